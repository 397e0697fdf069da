/* elementwise_cast.c -- Cast and CastLike.
 *
 * Every pair of native types (float32/64, all integers, bool) has a typed
 * loop. float -> integer truncates toward zero (out-of-range and NaN give
 * the x86 "integer indefinite" value, never undefined behaviour); anything
 * -> bool is `!= 0`. float16/bfloat16 go through float32, except double ->
 * float16/bfloat16 which rounds once (round-to-odd to float, then nearest
 * even) so the result equals a direct conversion. */
#include "ops/elementwise_impl.h"

#include <math.h>

EW_VECTORIZE_FLOAT_SELECTS

/* conversion expressions by (source kind, destination kind) */
#define EW_CV_FF(DT, v) (DT)(v)
#define EW_CV_FS(DT, v) (DT)ew_f2i64((double)(v))
#define EW_CV_FU(DT, v) (DT)ew_f2u64((double)(v))
#define EW_CV_FB(DT, v) (DT)((v) != 0)
#define EW_CV_SF(DT, v) (DT)(v)
#define EW_CV_SS(DT, v) (DT)(v)
#define EW_CV_SU(DT, v) (DT)(v)
#define EW_CV_SB(DT, v) (DT)((v) != 0)
#define EW_CV_UF EW_CV_SF
#define EW_CV_US EW_CV_SS
#define EW_CV_UU EW_CV_SS
#define EW_CV_UB EW_CV_SB
#define EW_CV_BF(DT, v) (DT)((v) != 0)
#define EW_CV_BS EW_CV_BF
#define EW_CV_BU EW_CV_BF
#define EW_CV_BB EW_CV_BF

typedef void (*ew_cast_fn)(const void *x, void *y, int64_t n);

#define EW_CAST_FN(SS, ST, SK, DS, DTY, DK)                          \
    static void ew_cast_##SS##_##DS(const void *vx, void *vy, int64_t n) { \
        const ST *x = vx;                                            \
        DTY *y = vy;                                                 \
        for (int64_t i = 0; i < n; i++) y[i] = EW_CV_##SK##DK(DTY, x[i]); \
    }

/* for each source type, a function per destination type */
#define EW_CAST_FN_X(...) EW_CAST_FN(__VA_ARGS__)

#define EW_CAST_ROW_GEN(IDX, SS, ST, SK, W, DT)                                    \
    EW_CAST_FN_X(SS, ST, SK, f32, float, F) EW_CAST_FN_X(SS, ST, SK, f64, double, F) \
    EW_CAST_FN_X(SS, ST, SK, i8, int8_t, S) EW_CAST_FN_X(SS, ST, SK, i16, int16_t, S) \
    EW_CAST_FN_X(SS, ST, SK, i32, int32_t, S) EW_CAST_FN_X(SS, ST, SK, i64, int64_t, S) \
    EW_CAST_FN_X(SS, ST, SK, u8, uint8_t, U) EW_CAST_FN_X(SS, ST, SK, u16, uint16_t, U) \
    EW_CAST_FN_X(SS, ST, SK, u32, uint32_t, U) EW_CAST_FN_X(SS, ST, SK, u64, uint64_t, U) \
    EW_CAST_FN_X(SS, ST, SK, b, uint8_t, B)
EW_FOR_ALL(EW_CAST_ROW_GEN)

#define EW_CAST_TAB_ROW(IDX, SS, ST, SK, W, DT)                                          \
    [IDX] = {ew_cast_##SS##_f32, ew_cast_##SS##_f64, ew_cast_##SS##_i8, ew_cast_##SS##_i16, \
             ew_cast_##SS##_i32, ew_cast_##SS##_i64, ew_cast_##SS##_u8, ew_cast_##SS##_u16, \
             ew_cast_##SS##_u32, ew_cast_##SS##_u64, ew_cast_##SS##_b},
static const ew_cast_fn ew_cast_table[EW_T_COUNT][EW_T_COUNT] = {EW_FOR_ALL(EW_CAST_TAB_ROW)};

/* double -> float rounded to odd: exact values stay, inexact ones get their
 * last bit set, so that a second rounding to fewer bits is correct. */
static float ew_f64_to_f32_odd(double d) {
    float f = (float)d;
    if (isnan(d) || isinf(d) || (double)f == d) return f;
    if (isinf(f) || fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
    uint32_t u;
    memcpy(&u, &f, 4);
    u |= 1u;
    memcpy(&f, &u, 4);
    return f;
}

typedef struct ew_cast_job {
    kiln_dtype from, to;
    const void *x;
    void *y;
} ew_cast_job;

#define EW_CAST_BLOCK 256

static void ew_cast_chunk(void *vctx, int64_t b, int64_t e) {
    const ew_cast_job *j = vctx;
    const size_t sx = kiln_dtype_size(j->from), sy = kiln_dtype_size(j->to);
    const char *x = (const char *)j->x + b * (int64_t)sx;
    char *y = (char *)j->y + b * (int64_t)sy;
    const int64_t n = e - b;
    int fi = kiln__ew_native_index(j->from), ti = kiln__ew_native_index(j->to);
    if (fi >= 0 && ti >= 0) {
        ew_cast_table[fi][ti](x, y, n);
        return;
    }
    float buf[EW_CAST_BLOCK];
    for (int64_t i0 = 0; i0 < n; i0 += EW_CAST_BLOCK) {
        int64_t m = n - i0 < EW_CAST_BLOCK ? n - i0 : EW_CAST_BLOCK;
        /* source -> float32 */
        if (ew_is_half(j->from)) {
            const uint16_t *h = (const uint16_t *)(const void *)x;
            for (int64_t i = 0; i < m; i++) buf[i] = ew_half_load(j->from, h[i0 + i]);
        } else if (j->from == KILN_DTYPE_FLOAT64) {
            const double *d = (const double *)(const void *)x;
            for (int64_t i = 0; i < m; i++) buf[i] = ew_f64_to_f32_odd(d[i0 + i]);
        } else {
            ew_cast_table[fi][EW_T_F32](x + i0 * (int64_t)sx, buf, m);
        }
        /* float32 -> destination */
        if (ew_is_half(j->to)) {
            uint16_t *h = (uint16_t *)(void *)y;
            for (int64_t i = 0; i < m; i++) h[i0 + i] = ew_half_store(j->to, buf[i]);
        } else {
            ew_cast_table[EW_T_F32][ti](buf, y + i0 * (int64_t)sy, m);
        }
    }
}

static bool ew_castable(kiln_dtype t) {
    return t != KILN_DTYPE_STRING && t != KILN_DTYPE_UNDEFINED && kiln__dtype_valid(t);
}

static kiln_status ew_cast_run(const kiln_kernel_args *a, kiln_dtype to) {
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    if (!ew_castable(x->dtype)) return kiln__ew_kernel_dtype_fail(a, x->dtype);
    if (!ew_castable(to) || y->dtype != to) return kiln__ew_kernel_dtype_fail(a, to);
    int64_t n = kiln__tensor_numel(x);
    if (x->dtype == to) {
        if (n > 0 && x->data != y->data)
            memcpy(y->data, x->data, (size_t)n * kiln_dtype_size(to));
        return KILN_OK;
    }
    ew_cast_job j = {x->dtype, to, x->data, y->data};
    kiln__ew_parallel(a->pool, n, EW_GRAIN, ew_cast_chunk, &j);
    return KILN_OK;
}

static kiln_status ew_cast_cpu(const kiln_kernel_args *a) {
    const kiln_ew_cast_attrs *at = a->attrs;
    return ew_cast_run(a, (kiln_dtype)at->to);
}

static kiln_status ew_castlike_cpu(const kiln_kernel_args *a) {
    return ew_cast_run(a, a->in[1]->dtype);
}

static kiln_status ew_cast_check(const kiln_infer_args *a, kiln_dtype to) {
    kiln_dtype from = a->in[0]->dtype;
    if (from != KILN_DTYPE_UNDEFINED && !ew_castable(from))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): cannot cast from %s",
                         a->node_name ? a->node_name : "?", a->op->name, kiln_dtype_name(from));
    if (!ew_castable(to))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): cannot cast to %s",
                         a->node_name ? a->node_name : "?", a->op->name, kiln_dtype_name(to));
    kiln__tinfo_copy_shape(a->out[0], a->in[0]);
    a->out[0]->dtype = to;
    return KILN_OK;
}

static kiln_status ew_cast_infer(const kiln_infer_args *a) {
    const kiln_ew_cast_attrs *at = a->attrs;
    return ew_cast_check(a, (kiln_dtype)at->to);
}

static kiln_status ew_castlike_infer(const kiln_infer_args *a) {
    return ew_cast_check(a, a->in[1]->dtype);
}

/* Cast-1 names the target type with a string. */
static const struct {
    const char *name;
    kiln_dtype t;
} ew_dtype_names[] = {
    {"FLOAT", KILN_DTYPE_FLOAT32},   {"FLOAT32", KILN_DTYPE_FLOAT32},
    {"DOUBLE", KILN_DTYPE_FLOAT64},  {"FLOAT64", KILN_DTYPE_FLOAT64},
    {"FLOAT16", KILN_DTYPE_FLOAT16}, {"BFLOAT16", KILN_DTYPE_BFLOAT16},
    {"INT8", KILN_DTYPE_INT8},       {"INT16", KILN_DTYPE_INT16},
    {"INT32", KILN_DTYPE_INT32},     {"INT64", KILN_DTYPE_INT64},
    {"UINT8", KILN_DTYPE_UINT8},     {"UINT16", KILN_DTYPE_UINT16},
    {"UINT32", KILN_DTYPE_UINT32},   {"UINT64", KILN_DTYPE_UINT64},
    {"BOOL", KILN_DTYPE_BOOL},       {"STRING", KILN_DTYPE_STRING},
};

static int ew_dtype_from_name(const char *s) {
    for (size_t i = 0; i < sizeof ew_dtype_names / sizeof ew_dtype_names[0]; i++)
        if (!strcmp(s, ew_dtype_names[i].name)) return (int)ew_dtype_names[i].t;
    return -1;
}

static kiln_status ew_cast_import(kiln_import_ctx *ic, void *attrs) {
    kiln_ew_cast_attrs *at = attrs;
    int64_t to = -1;
    const char *s = kiln_import_opset(ic) < 6 ? kiln_attr_string(ic, "to", NULL) : NULL;
    if (s) {
        to = ew_dtype_from_name(s);
        if (to < 0) return KILN_IMPORT_FAIL(ic, "unknown type '%s' in attribute to", s);
    } else {
        if (!kiln_attr_has(ic, "to")) return KILN_IMPORT_FAIL(ic, "attribute to is required");
        to = kiln_attr_int(ic, "to", -1);
    }
    at->to = to < INT32_MIN || to > INT32_MAX ? -1 : (int32_t)to; /* -1: refused below */
    return KILN_OK;
}

/* `to`: a dtype kiln has, other than string (unsupported, as in the model) */
static kiln_status ew_cast_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_ew_cast_attrs *at = attrs;
    if (at->to == KILN_DTYPE_STRING)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): casting to string is not supported",
                         node, op->name);
    if (!kiln__dtype_valid(at->to) || at->to == KILN_DTYPE_UNDEFINED)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): unsupported target type %d", node,
                         op->name, (int)at->to);
    return KILN_OK;
}

const kiln_op_def kiln_op_Cast = {
    .name = "Cast", .domain = "", .since = 1, .min_inputs = 1, .max_inputs = 1,
    .min_outputs = 1, .max_outputs = 1, .code = 0, .flags = 0,
    .attr_size = sizeof(kiln_ew_cast_attrs), .import = ew_cast_import,
    .validate = ew_cast_validate, .infer = ew_cast_infer,
    .workspace = NULL, .cpu = ew_cast_cpu};

const kiln_op_def kiln_op_CastLike = {
    .name = "CastLike", .domain = "", .since = 15, .min_inputs = 2, .max_inputs = 2,
    .min_outputs = 1, .max_outputs = 1, .code = 0, .flags = 0, .attr_size = 0,
    .import = NULL, .infer = ew_castlike_infer, .workspace = NULL, .cpu = ew_castlike_cpu};
