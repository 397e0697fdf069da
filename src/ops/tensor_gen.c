/* tensor_gen.c -- ops that generate or mask values: ConstantOfShape, Range,
 * EyeLike, Trilu, CumSum. */
#include "ops/tensor_internal.h"

#include <math.h>

/* ---- ConstantOfShape --------------------------------------------------------- */

static kiln_status cos_import(kiln_import_ctx *ic, void *attrs) {
    kiln_cos_attrs *at = (kiln_cos_attrs *)attrs;
    at->dtype = KILN_DTYPE_FLOAT32;
    memset(at->value, 0, sizeof at->value);
    if (!kiln_attr_has(ic, "value")) return KILN_OK;
    kiln_tinfo v;
    KILN_TRY(kiln_attr_tensor(ic, "value", &v));
    size_t es = kiln__dtype_valid((int)v.dtype) ? kiln_dtype_size(v.dtype) : 0;
    if (es == 0)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (ConstantOfShape): value dtype %s is not supported",
                         kiln_import_node_name(ic), kiln_dtype_name(v.dtype));
    if (kiln__numel(v.rank, v.dims) != 1 || !v.data)
        return KILN_IMPORT_FAIL(ic, "attribute 'value' must hold exactly one element");
    at->dtype = v.dtype;
    memcpy(at->value, v.data, es);
    return KILN_OK;
}

/* dtype: one kiln moves (not undefined, not string); a bool value 0 or 1 */
static kiln_status cos_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_cos_attrs *at = (const kiln_cos_attrs *)attrs;
    if (!kiln__dtype_valid(at->dtype) || kiln_dtype_size((kiln_dtype)at->dtype) == 0)
        return KILN_VALIDATE_FAIL(op, node, "value dtype %d is not supported", (int)at->dtype);
    if (at->dtype == KILN_DTYPE_BOOL && at->value[0] > 1)
        return KILN_VALIDATE_FAIL(op, node, "bool value %d is neither 0 nor 1", at->value[0]);
    return KILN_OK;
}

static kiln_status cos_infer(const kiln_infer_args *a) {
    const kiln_cos_attrs *at = (const kiln_cos_attrs *)a->attrs;
    kiln_tinfo *y = a->out[0];
    int64_t n;
    KILN_TRY(kiln__tx_int_vector(a, 0, "input", false, &n));
    y->dtype = (kiln_dtype)at->dtype;
    if (n > KILN_MAX_RANK)
        return KILN_TX_FAIL(KILN_ERR_UNSUPPORTED, a, "output rank %lld exceeds %d", (long long)n,
                            KILN_MAX_RANK);
    y->rank = (int)n;
    for (int k = 0; k < y->rank; k++) {
        y->dims[k] = a->in[0]->data ? kiln__tinfo_int(a->in[0], k) : KILN_DIM_UNKNOWN;
        if (a->in[0]->data && y->dims[k] < 0)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "shape has negative entry %lld",
                                (long long)y->dims[k]);
    }
    return KILN_OK;
}

static kiln_status cos_cpu(const kiln_kernel_args *a) {
    const kiln_cos_attrs *at = (const kiln_cos_attrs *)a->attrs;
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, (kiln_dtype)at->dtype, &es));
    kiln__tx_fill(a->out[0]->data, kiln__tensor_numel(a->out[0]), at->value, es);
    return KILN_OK;
}

const kiln_op_def kiln_op_ConstantOfShape = {
    .name = "ConstantOfShape", .domain = "", .since = 9,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_cos_attrs),
    .host_inputs = 1u << 0,
    .import = cos_import, .validate = cos_validate, .infer = cos_infer, .cpu = cos_cpu,
};

/* ---- Range ---------------------------------------------------------------------- */

static kiln_status range_count(const char *node, kiln_dtype t, const void *s, const void *l,
                               const void *d, int64_t *n) {
    if (kiln__dtype_is_float(t)) {
        double start = kiln__load_f64(t, s, 0), limit = kiln__load_f64(t, l, 0),
               delta = kiln__load_f64(t, d, 0);
        if (delta == 0 || isnan(delta) || isnan(start) || isnan(limit))
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Range): delta is 0 or a value is NaN", node);
        double c = ceil((limit - start) / delta);
        if (c > 1e12) return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Range): too many elements", node);
        *n = c > 0 ? (int64_t)c : 0;
        return KILN_OK;
    }
    int64_t start = kiln__load_i64(t, s, 0), limit = kiln__load_i64(t, l, 0),
            delta = kiln__load_i64(t, d, 0);
    if (delta == 0) return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Range): delta is 0", node);
    int64_t diff;
    if (__builtin_sub_overflow(limit, start, &diff))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Range): range overflows", node);
    if (delta > 0)
        *n = diff > 0 ? (diff - 1) / delta + 1 : 0;
    else
        *n = diff < 0 ? (diff + 1) / delta + 1 : 0;
    return KILN_OK;
}

static kiln_status range_infer(const kiln_infer_args *a) {
    kiln_tinfo *y = a->out[0];
    kiln_dtype t = a->in[0]->dtype;
    for (int i = 0; i < 3; i++) {
        if (a->in[i]->dtype != t)
            return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "start, limit and delta must have the same dtype");
        if (a->in[i]->rank > 1 || (a->in[i]->rank == 1 && a->in[i]->dims[0] != 1 && a->in[i]->dims[0] >= 0))
            return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "start, limit and delta must be scalars");
    }
    if (!kiln__dtype_is_float(t) && !kiln__dtype_is_int(t))
        return KILN_TX_FAIL(KILN_ERR_UNSUPPORTED, a, "dtype %s is not supported", kiln_dtype_name(t));
    y->dtype = t;
    y->rank = 1;
    y->dims[0] = KILN_DIM_UNKNOWN;
    if (a->in[0]->data && a->in[1]->data && a->in[2]->data)
        KILN_TRY(range_count(a->node_name, t, a->in[0]->data, a->in[1]->data, a->in[2]->data,
                             &y->dims[0]));
    return KILN_OK;
}

static kiln_status range_cpu(const kiln_kernel_args *a) {
    kiln_tensor *y = a->out[0];
    kiln_dtype t = y->dtype;
    int64_t n = y->dims[0];
    switch (t) {
    case KILN_DTYPE_FLOAT32: {
        float s = *(const float *)a->in[0]->data, d = *(const float *)a->in[2]->data;
        for (int64_t i = 0; i < n; i++) ((float *)y->data)[i] = s + (float)i * d;
        break;
    }
    case KILN_DTYPE_INT32: {
        int32_t s = *(const int32_t *)a->in[0]->data, d = *(const int32_t *)a->in[2]->data;
        for (int64_t i = 0; i < n; i++) ((int32_t *)y->data)[i] = (int32_t)(s + i * d);
        break;
    }
    case KILN_DTYPE_INT64: {
        int64_t s = *(const int64_t *)a->in[0]->data, d = *(const int64_t *)a->in[2]->data;
        for (int64_t i = 0; i < n; i++) ((int64_t *)y->data)[i] = s + i * d;
        break;
    }
    default:
        if (kiln__dtype_is_float(t)) {
            double s = kiln__load_f64(t, a->in[0]->data, 0), d = kiln__load_f64(t, a->in[2]->data, 0);
            for (int64_t i = 0; i < n; i++) kiln__store_f64(t, y->data, i, s + (double)i * d);
        } else {
            int64_t s = kiln__load_i64(t, a->in[0]->data, 0), d = kiln__load_i64(t, a->in[2]->data, 0);
            for (int64_t i = 0; i < n; i++) kiln__store_i64(t, y->data, i, s + i * d);
        }
        break;
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_Range = {
    .name = "Range", .domain = "", .since = 11,
    .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .host_inputs = (1u << 0) | (1u << 1) | (1u << 2),
    .infer = range_infer, .cpu = range_cpu,
};

/* ---- EyeLike ------------------------------------------------------------------------ */

static kiln_status eyelike_import(kiln_import_ctx *ic, void *attrs) {
    kiln_eyelike_attrs *at = (kiln_eyelike_attrs *)attrs;
    KILN_TRY(kiln_attr_int32(ic, "dtype", 0, &at->dtype));
    at->k = kiln_attr_int(ic, "k", 0);
    return KILN_OK;
}

/* dtype 0 (the input's) or one kiln moves; k any value */
static kiln_status eyelike_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_eyelike_attrs *at = (const kiln_eyelike_attrs *)attrs;
    if (at->dtype != 0 &&
        (!kiln__dtype_valid(at->dtype) || kiln_dtype_size((kiln_dtype)at->dtype) == 0))
        return KILN_VALIDATE_FAIL(op, node, "dtype %d is not supported", (int)at->dtype);
    return KILN_OK;
}

static kiln_status eyelike_infer(const kiln_infer_args *a) {
    const kiln_eyelike_attrs *at = (const kiln_eyelike_attrs *)a->attrs;
    kiln__tinfo_copy_shape(a->out[0], a->in[0]);
    if (at->dtype) a->out[0]->dtype = (kiln_dtype)at->dtype;
    if (a->in[0]->rank >= 0 && a->in[0]->rank != 2)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "input must be 2-D, not of rank %d", a->in[0]->rank);
    return KILN_OK;
}

static kiln_status eyelike_cpu(const kiln_kernel_args *a) {
    const kiln_eyelike_attrs *at = (const kiln_eyelike_attrs *)a->attrs;
    kiln_tensor *y = a->out[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, y->dtype, &es));
    int64_t R = y->dims[0], C = y->dims[1];
    if (R == 0 || C == 0) return KILN_OK;
    memset(y->data, 0, (size_t)(R * C) * es);
    uint8_t one[8];
    kiln__store_f64(y->dtype, one, 0, 1.0);
    if (at->k >= C || at->k <= -R) return KILN_OK; /* no diagonal (and no overflow of i + k) */
    for (int64_t i = 0; i < R; i++) {
        int64_t j = i + at->k;
        if (j >= 0 && j < C) memcpy((char *)y->data + (size_t)(i * C + j) * es, one, es);
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_EyeLike = {
    .name = "EyeLike", .domain = "", .since = 9,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_eyelike_attrs),
    .import = eyelike_import, .validate = eyelike_validate, .infer = eyelike_infer, .cpu = eyelike_cpu,
};

/* ---- Trilu ---------------------------------------------------------------------------- */

static kiln_status trilu_import(kiln_import_ctx *ic, void *attrs) {
    ((kiln_trilu_attrs *)attrs)->upper = kiln_attr_int(ic, "upper", 1) != 0;
    return KILN_OK;
}

static kiln_status trilu_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    return kiln__check_attr(op, node, "upper", ((const kiln_trilu_attrs *)attrs)->upper, 0, 1);
}

static kiln_status trilu_infer(const kiln_infer_args *a) {
    kiln__tinfo_copy_shape(a->out[0], a->in[0]);
    if (a->in[0]->rank >= 0 && a->in[0]->rank < 2)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "input rank %d < 2", a->in[0]->rank);
    if (a->n_in > 1 && a->in[1]) {
        int64_t n;
        KILN_TRY(kiln__tx_int_vector(a, 1, "k", true, &n));
        if (n >= 0 && n != 1) return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "k must be a scalar");
    }
    return KILN_OK;
}

static kiln_status trilu_cpu(const kiln_kernel_args *a) {
    const kiln_trilu_attrs *at = (const kiln_trilu_attrs *)a->attrs;
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    int64_t k = (a->n_in > 1 && a->in[1]) ? kiln__tx_tensor_int(a->in[1], 0) : 0;
    int64_t R = x->dims[x->rank - 2], C = x->dims[x->rank - 1];
    /* any k of the input is allowed: clamp it so that i + k cannot overflow */
    k = kiln__tx_max64(-R - 1, kiln__tx_min64(k, C + 1));
    int64_t nmat = (R > 0 && C > 0) ? kiln__tensor_numel(x) / (R * C) : 0;
    const char *src = (const char *)x->data;
    char *dst = (char *)y->data;
    for (int64_t m = 0; m < nmat; m++) {
        for (int64_t i = 0; i < R; i++) {
            size_t row = (size_t)((m * R + i) * C) * es;
            /* kept columns [c0, c1) */
            int64_t c0, c1;
            if (at->upper) {
                c0 = kiln__tx_max64(0, kiln__tx_min64(C, i + k));
                c1 = C;
            } else {
                c0 = 0;
                c1 = kiln__tx_max64(0, kiln__tx_min64(C, i + k + 1));
            }
            if (c0 > 0) memset(dst + row, 0, (size_t)c0 * es);
            if (c1 > c0) memcpy(dst + row + (size_t)c0 * es, src + row + (size_t)c0 * es, (size_t)(c1 - c0) * es);
            if (c1 < C) memset(dst + row + (size_t)c1 * es, 0, (size_t)(C - c1) * es);
        }
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_Trilu = {
    .name = "Trilu", .domain = "", .since = 14,
    .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_trilu_attrs),
    .import = trilu_import, .validate = trilu_validate, .infer = trilu_infer, .cpu = trilu_cpu,
};

/* ---- CumSum ---------------------------------------------------------------------------- */

static kiln_status cumsum_import(kiln_import_ctx *ic, void *attrs) {
    kiln_cumsum_attrs *at = (kiln_cumsum_attrs *)attrs;
    at->exclusive = kiln_attr_int(ic, "exclusive", 0) != 0;
    at->reverse = kiln_attr_int(ic, "reverse", 0) != 0;
    return KILN_OK;
}

static kiln_status cumsum_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_cumsum_attrs *at = (const kiln_cumsum_attrs *)attrs;
    KILN_TRY(kiln__check_attr(op, node, "exclusive", at->exclusive, 0, 1));
    return kiln__check_attr(op, node, "reverse", at->reverse, 0, 1);
}

static kiln_status cumsum_infer(const kiln_infer_args *a) {
    kiln__tinfo_copy_shape(a->out[0], a->in[0]);
    kiln_dtype t = a->in[0]->dtype;
    if (!kiln__dtype_is_float(t) && !kiln__dtype_is_int(t))
        return KILN_TX_FAIL(KILN_ERR_UNSUPPORTED, a, "dtype %s is not supported", kiln_dtype_name(t));
    int64_t n;
    KILN_TRY(kiln__tx_int_vector(a, 1, "axis", true, &n));
    if (n >= 0 && n != 1) return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "axis must be a scalar");
    if (a->in[1]->data && a->in[0]->rank >= 0) {
        int ax;
        KILN_TRY(kiln__norm_axis(a->node_name, kiln__tinfo_int(a->in[1], 0), a->in[0]->rank, &ax));
    }
    return KILN_OK;
}

#define CUMSUM_LOOP(T, ACC, LOAD, STORE)                                                    \
    do {                                                                                    \
        const T *x_ = (const T *)x->data;                                                   \
        T *y_ = (T *)y->data;                                                               \
        for (int64_t o = 0; o < outer; o++)                                                 \
            for (int64_t in = 0; in < inner; in++) {                                        \
                ACC acc = 0;                                                                \
                for (int64_t j = 0; j < len; j++) {                                         \
                    int64_t jj = at->reverse ? len - 1 - j : j;                             \
                    size_t p = (size_t)((o * len + jj) * inner + in);                       \
                    ACC v = LOAD(x_[p]);                                                    \
                    if (at->exclusive) {                                                    \
                        y_[p] = STORE(acc);                                                 \
                        acc += v;                                                           \
                    } else {                                                                \
                        acc += v;                                                           \
                        y_[p] = STORE(acc);                                                 \
                    }                                                                       \
                }                                                                           \
            }                                                                               \
    } while (0)

#define CS_ID(v) (v)

static kiln_status cumsum_cpu(const kiln_kernel_args *a) {
    const kiln_cumsum_attrs *at = (const kiln_cumsum_attrs *)a->attrs;
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    int ax;
    if (x->rank == 0) return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "input must have rank >= 1");
    KILN_TRY(kiln__norm_axis(a->node_name, kiln__tx_tensor_int(a->in[1], 0), x->rank, &ax));
    int64_t outer, inner, len = x->dims[ax];
    kiln__tx_outer_inner(x->rank, x->dims, ax, &outer, &inner);
    switch (x->dtype) {
    case KILN_DTYPE_FLOAT32: CUMSUM_LOOP(float, float, CS_ID, CS_ID); break;
    case KILN_DTYPE_FLOAT64: CUMSUM_LOOP(double, double, CS_ID, CS_ID); break;
    case KILN_DTYPE_INT32: CUMSUM_LOOP(int32_t, uint32_t, (uint32_t), (int32_t)); break;
    case KILN_DTYPE_INT64: CUMSUM_LOOP(int64_t, uint64_t, (uint64_t), (int64_t)); break;
    case KILN_DTYPE_UINT32: CUMSUM_LOOP(uint32_t, uint32_t, CS_ID, CS_ID); break;
    case KILN_DTYPE_UINT64: CUMSUM_LOOP(uint64_t, uint64_t, CS_ID, CS_ID); break;
    case KILN_DTYPE_FLOAT16: CUMSUM_LOOP(uint16_t, float, kiln__f16_to_f32, kiln__f32_to_f16); break;
    case KILN_DTYPE_BFLOAT16: CUMSUM_LOOP(uint16_t, float, kiln__bf16_to_f32, kiln__f32_to_bf16); break;
    case KILN_DTYPE_INT8: CUMSUM_LOOP(int8_t, uint32_t, (uint32_t), (int8_t)); break;
    case KILN_DTYPE_UINT8: CUMSUM_LOOP(uint8_t, uint32_t, CS_ID, (uint8_t)); break;
    case KILN_DTYPE_INT16: CUMSUM_LOOP(int16_t, uint32_t, (uint32_t), (int16_t)); break;
    case KILN_DTYPE_UINT16: CUMSUM_LOOP(uint16_t, uint32_t, CS_ID, (uint16_t)); break;
    default:
        return KILN_TX_FAIL(KILN_ERR_UNSUPPORTED, a, "dtype %s is not supported",
                            kiln_dtype_name(x->dtype));
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_CumSum = {
    .name = "CumSum", .domain = "", .since = 11,
    .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_cumsum_attrs),
    .host_inputs = 1u << 1,
    .import = cumsum_import, .validate = cumsum_validate, .infer = cumsum_infer, .cpu = cumsum_cpu,
};
