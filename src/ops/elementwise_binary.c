/* elementwise_binary.c -- numpy-broadcasting binary ops (arithmetic,
 * comparisons, logic, BitShift, PRelu, Pow, Mod), the variadic Max/Min/Sum/Mean
 * and Where.
 *
 * Each (operation, native dtype) pair has a row function generated below with
 * four loops: both inputs contiguous, one of them broadcast (stride 0), or
 * general strides. The loop driver (elementwise_common.c) merges dims so that
 * common broadcasts ([N,C,H,W] + [C,1,1], [B,S,H] + [H], scalars) reach these
 * rows as long contiguous runs. float16/bfloat16 run the float32 rows through
 * a converting wrapper; mixed-type Pow goes through double/int64. */
#include "ops/elementwise_impl.h"

#include <math.h>

EW_VECTORIZE_FLOAT_SELECTS

/* ---- scalar helpers ------------------------------------------------------- */

static inline float ew_pymod_f32(float a, float b) {
    float r = fmodf(a, b);
    return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
static inline double ew_pymod_f64(double a, double b) {
    double r = fmod(a, b);
    return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r;
}
static inline int64_t ew_pymod_i64(int64_t a, int64_t b) {
    if (b == 0 || b == -1) return 0;
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

#define EW_FMOD(a, b) _Generic((a), float: fmodf, double: fmod)((a), (b))
#define EW_FPYMOD(a, b) _Generic((a), float: ew_pymod_f32, double: ew_pymod_f64)((a), (b))
#define EW_POWF(a, b) _Generic((a), float: powf, double: pow)((a), (b))

/* ---- expressions, by kind of element (F float, S signed, U unsigned, B bool) */

#define EW_X_ADD_F(T, W) (a + b)
#define EW_X_ADD_S(T, W) (T)((W)a + (W)b)
#define EW_X_ADD_U EW_X_ADD_S
#define EW_X_SUB_F(T, W) (a - b)
#define EW_X_SUB_S(T, W) (T)((W)a - (W)b)
#define EW_X_SUB_U EW_X_SUB_S
#define EW_X_MUL_F(T, W) (a * b)
#define EW_X_MUL_S(T, W) (T)((W)a * (W)b)
#define EW_X_MUL_U EW_X_MUL_S
#define EW_X_DIV_F(T, W) (a / b)
#define EW_X_DIV_S(T, W) (b == 0 ? (T)0 : b == (T)-1 ? (T)((W)0 - (W)a) : (T)(a / b))
#define EW_X_DIV_U(T, W) (b == 0 ? (T)0 : (T)(a / b))
#define EW_X_MOD_F(T, W) EW_FMOD(a, b)
#define EW_X_MOD_S(T, W) ((b == 0 || b == (T)-1) ? (T)0 : (T)(a % b))
#define EW_X_MOD_U(T, W) (b == 0 ? (T)0 : (T)(a % b))
#define EW_X_PYMOD_F(T, W) EW_FPYMOD(a, b)
#define EW_X_PYMOD_S(T, W) (T)ew_pymod_i64((int64_t)a, (int64_t)b)
#define EW_X_PYMOD_U EW_X_MOD_U
#define EW_X_MAX_F(T, W) ((a != a || a > b) ? a : b) /* NaN propagates */
#define EW_X_MAX_S(T, W) (a > b ? a : b)
#define EW_X_MAX_U EW_X_MAX_S
#define EW_X_MIN_F(T, W) ((a != a || a < b) ? a : b)
#define EW_X_MIN_S(T, W) (a < b ? a : b)
#define EW_X_MIN_U EW_X_MIN_S
#define EW_X_PRELU_F(T, W) (a < 0 ? a * b : a)
#define EW_X_PRELU_S(T, W) (a < 0 ? (T)((W)a * (W)b) : a)
#define EW_X_PRELU_U(T, W) ((void)b, a)
#define EW_X_EQ(T, W) (a == b)
#define EW_X_LT(T, W) (a < b)
#define EW_X_LE(T, W) (a <= b)
#define EW_X_GT(T, W) (a > b)
#define EW_X_GE(T, W) (a >= b)
#define EW_X_AND(T, W) ((a != 0) & (b != 0))
#define EW_X_OR(T, W) ((a != 0) | (b != 0))
#define EW_X_XOR(T, W) ((a != 0) ^ (b != 0))
#define EW_X_SHL(T, W) (b >= (T)(8 * sizeof(T)) ? (T)0 : (T)((W)a << b))
#define EW_X_SHR(T, W) (b >= (T)(8 * sizeof(T)) ? (T)0 : (T)(a >> b))
#define EW_X_POW(T, W) EW_POWF(a, b)

/* ---- row functions ------------------------------------------------------------ */

#define EW_BIN_ROW(NAME, T, OT, EXPR)                                                   \
    static void NAME(const void *ctx, char *const *p, const int64_t *s, int64_t n) {    \
        (void)ctx;                                                                      \
        OT *o = (OT *)(void *)p[0];                                                     \
        const T *A = (const T *)(const void *)p[1];                                     \
        const T *B = (const T *)(const void *)p[2];                                     \
        const int64_t sa = s[1], sb = s[2];                                             \
        if (sa == 1 && sb == 1) {                                                       \
            for (int64_t i = 0; i < n; i++) {                                           \
                const T a = A[i], b = B[i];                                             \
                o[i] = (OT)(EXPR);                                                      \
            }                                                                           \
        } else if (sa == 1 && sb == 0) {                                                \
            const T b = B[0];                                                           \
            for (int64_t i = 0; i < n; i++) {                                           \
                const T a = A[i];                                                       \
                o[i] = (OT)(EXPR);                                                      \
            }                                                                           \
        } else if (sa == 0 && sb == 1) {                                                \
            const T a = A[0];                                                           \
            for (int64_t i = 0; i < n; i++) {                                           \
                const T b = B[i];                                                       \
                o[i] = (OT)(EXPR);                                                      \
            }                                                                           \
        } else {                                                                        \
            for (int64_t i = 0; i < n; i++) {                                           \
                const T a = A[i * sa], b = B[i * sb];                                   \
                o[i] = (OT)(EXPR);                                                      \
            }                                                                           \
        }                                                                               \
    }

/* same-type ops: ew_<op>_<sfx>, expression chosen by element kind */
#define EW_GEN_SAME(OP, IDX, SFX, T, K, W, DT) \
    EW_BIN_ROW(ew_##OP##_##SFX, T, T, EW_X_##OP##_##K(T, W))
#define EW_GEN_ADD(...) EW_GEN_SAME(ADD, __VA_ARGS__)
#define EW_GEN_SUB(...) EW_GEN_SAME(SUB, __VA_ARGS__)
#define EW_GEN_MUL(...) EW_GEN_SAME(MUL, __VA_ARGS__)
#define EW_GEN_DIV(...) EW_GEN_SAME(DIV, __VA_ARGS__)
#define EW_GEN_MOD(...) EW_GEN_SAME(MOD, __VA_ARGS__)
#define EW_GEN_PYMOD(...) EW_GEN_SAME(PYMOD, __VA_ARGS__)
#define EW_GEN_MAX(...) EW_GEN_SAME(MAX, __VA_ARGS__)
#define EW_GEN_MIN(...) EW_GEN_SAME(MIN, __VA_ARGS__)
#define EW_GEN_PRELU(...) EW_GEN_SAME(PRELU, __VA_ARGS__)
EW_FOR_NUM(EW_GEN_ADD)
EW_FOR_NUM(EW_GEN_SUB)
EW_FOR_NUM(EW_GEN_MUL)
EW_FOR_NUM(EW_GEN_DIV)
EW_FOR_NUM(EW_GEN_MOD)
EW_FOR_NUM(EW_GEN_PYMOD)
EW_FOR_NUM(EW_GEN_MAX)
EW_FOR_NUM(EW_GEN_MIN)
EW_FOR_NUM(EW_GEN_PRELU)

/* kind-independent expressions */
#define EW_GEN_ANY(OP, OT, IDX, SFX, T, K, W, DT) EW_BIN_ROW(ew_##OP##_##SFX, T, OT, EW_X_##OP(T, W))
#define EW_GEN_EQ(...) EW_GEN_ANY(EQ, uint8_t, __VA_ARGS__)
#define EW_GEN_LT(...) EW_GEN_ANY(LT, uint8_t, __VA_ARGS__)
#define EW_GEN_LE(...) EW_GEN_ANY(LE, uint8_t, __VA_ARGS__)
#define EW_GEN_GT(...) EW_GEN_ANY(GT, uint8_t, __VA_ARGS__)
#define EW_GEN_GE(...) EW_GEN_ANY(GE, uint8_t, __VA_ARGS__)
#define EW_GEN_AND(...) EW_GEN_ANY(AND, uint8_t, __VA_ARGS__)
#define EW_GEN_OR(...) EW_GEN_ANY(OR, uint8_t, __VA_ARGS__)
#define EW_GEN_XOR(...) EW_GEN_ANY(XOR, uint8_t, __VA_ARGS__)
#define EW_GEN_SHL(IDX, SFX, T, K, W, DT) EW_BIN_ROW(ew_SHL_##SFX, T, T, EW_X_SHL(T, W))
#define EW_GEN_SHR(IDX, SFX, T, K, W, DT) EW_BIN_ROW(ew_SHR_##SFX, T, T, EW_X_SHR(T, W))
#define EW_GEN_POW(IDX, SFX, T, K, W, DT) EW_BIN_ROW(ew_POW_##SFX, T, T, EW_X_POW(T, W))
EW_FOR_ALL(EW_GEN_EQ)
EW_FOR_ALL(EW_GEN_LT)
EW_FOR_ALL(EW_GEN_LE)
EW_FOR_ALL(EW_GEN_GT)
EW_FOR_ALL(EW_GEN_GE)
EW_FOR_BOOLT(EW_GEN_AND)
EW_FOR_BOOLT(EW_GEN_OR)
EW_FOR_BOOLT(EW_GEN_XOR)
EW_FOR_UINT(EW_GEN_SHL)
EW_FOR_UINT(EW_GEN_SHR)
EW_FOR_FLOAT(EW_GEN_POW)

/* the table: ew_bin_rows[kind][native type index] (NULL: not supported) */
#define EW_ENTRY(OP, IDX, SFX) [IDX] = ew_##OP##_##SFX,
#define EW_E_ADD(IDX, SFX, T, K, W, DT) EW_ENTRY(ADD, IDX, SFX)
#define EW_E_SUB(IDX, SFX, T, K, W, DT) EW_ENTRY(SUB, IDX, SFX)
#define EW_E_MUL(IDX, SFX, T, K, W, DT) EW_ENTRY(MUL, IDX, SFX)
#define EW_E_DIV(IDX, SFX, T, K, W, DT) EW_ENTRY(DIV, IDX, SFX)
#define EW_E_MOD(IDX, SFX, T, K, W, DT) EW_ENTRY(MOD, IDX, SFX)
#define EW_E_PYMOD(IDX, SFX, T, K, W, DT) EW_ENTRY(PYMOD, IDX, SFX)
#define EW_E_MAX(IDX, SFX, T, K, W, DT) EW_ENTRY(MAX, IDX, SFX)
#define EW_E_MIN(IDX, SFX, T, K, W, DT) EW_ENTRY(MIN, IDX, SFX)
#define EW_E_PRELU(IDX, SFX, T, K, W, DT) EW_ENTRY(PRELU, IDX, SFX)
#define EW_E_EQ(IDX, SFX, T, K, W, DT) EW_ENTRY(EQ, IDX, SFX)
#define EW_E_LT(IDX, SFX, T, K, W, DT) EW_ENTRY(LT, IDX, SFX)
#define EW_E_LE(IDX, SFX, T, K, W, DT) EW_ENTRY(LE, IDX, SFX)
#define EW_E_GT(IDX, SFX, T, K, W, DT) EW_ENTRY(GT, IDX, SFX)
#define EW_E_GE(IDX, SFX, T, K, W, DT) EW_ENTRY(GE, IDX, SFX)
#define EW_E_AND(IDX, SFX, T, K, W, DT) EW_ENTRY(AND, IDX, SFX)
#define EW_E_OR(IDX, SFX, T, K, W, DT) EW_ENTRY(OR, IDX, SFX)
#define EW_E_XOR(IDX, SFX, T, K, W, DT) EW_ENTRY(XOR, IDX, SFX)
#define EW_E_SHL(IDX, SFX, T, K, W, DT) EW_ENTRY(SHL, IDX, SFX)
#define EW_E_SHR(IDX, SFX, T, K, W, DT) EW_ENTRY(SHR, IDX, SFX)
#define EW_E_POW(IDX, SFX, T, K, W, DT) EW_ENTRY(POW, IDX, SFX)

static const ew_row_fn ew_bin_rows[EW_B_COUNT][EW_T_COUNT] = {
    [EW_B_ADD] = {EW_FOR_NUM(EW_E_ADD)},
    [EW_B_SUB] = {EW_FOR_NUM(EW_E_SUB)},
    [EW_B_MUL] = {EW_FOR_NUM(EW_E_MUL)},
    [EW_B_DIV] = {EW_FOR_NUM(EW_E_DIV)},
    [EW_B_MOD] = {EW_FOR_NUM(EW_E_MOD)},
    [EW_B_PYMOD] = {EW_FOR_NUM(EW_E_PYMOD)},
    [EW_B_MAX] = {EW_FOR_NUM(EW_E_MAX)},
    [EW_B_MIN] = {EW_FOR_NUM(EW_E_MIN)},
    [EW_B_EQ] = {EW_FOR_ALL(EW_E_EQ)},
    [EW_B_LT] = {EW_FOR_ALL(EW_E_LT)},
    [EW_B_LE] = {EW_FOR_ALL(EW_E_LE)},
    [EW_B_GT] = {EW_FOR_ALL(EW_E_GT)},
    [EW_B_GE] = {EW_FOR_ALL(EW_E_GE)},
    [EW_B_AND] = {EW_FOR_BOOLT(EW_E_AND)},
    [EW_B_OR] = {EW_FOR_BOOLT(EW_E_OR)},
    [EW_B_XOR] = {EW_FOR_BOOLT(EW_E_XOR)},
    [EW_B_SHL] = {EW_FOR_UINT(EW_E_SHL)},
    [EW_B_SHR] = {EW_FOR_UINT(EW_E_SHR)},
    [EW_B_PRELU] = {EW_FOR_NUM(EW_E_PRELU)},
    [EW_B_POW] = {EW_FOR_FLOAT(EW_E_POW)},
};

static bool ew_kind_is_compare(int kind) {
    return kind == EW_B_EQ || kind == EW_B_LT || kind == EW_B_LE || kind == EW_B_GT ||
           kind == EW_B_GE || kind == EW_B_AND || kind == EW_B_OR || kind == EW_B_XOR;
}

/* x * x for Pow with a constant exponent of 2 */
static void ew_square_f32(const void *ctx, char *const *p, const int64_t *s, int64_t n) {
    (void)ctx;
    float *o = (float *)(void *)p[0];
    const float *A = (const float *)(const void *)p[1];
    if (s[1] == 1)
        for (int64_t i = 0; i < n; i++) o[i] = A[i] * A[i];
    else
        for (int64_t i = 0; i < n; i++) o[i] = A[i * s[1]] * A[i * s[1]];
}

/* Pow with mixed or integer types: int^int exactly in int64 (wrapping), else
 * through double, stored in the base type (truncating for integers). */
typedef struct ew_pow_ctx {
    kiln_dtype to, ta, tb;
} ew_pow_ctx;

static int64_t ew_ipow(int64_t b, int64_t e) {
    if (e < 0) return b == 1 ? 1 : b == -1 ? ((e & 1) ? -1 : 1) : 0;
    uint64_t r = 1, x = (uint64_t)b;
    while (e) {
        if (e & 1) r *= x;
        x *= x;
        e >>= 1;
    }
    return (int64_t)r;
}

static void ew_pow_generic(const void *vctx, char *const *p, const int64_t *s, int64_t n) {
    const ew_pow_ctx *c = vctx;
    bool ints = kiln__dtype_is_int(c->ta) && kiln__dtype_is_int(c->tb);
    for (int64_t i = 0; i < n; i++) {
        if (ints) {
            int64_t a = kiln__load_i64(c->ta, p[1], i * s[1]);
            int64_t b = kiln__load_i64(c->tb, p[2], i * s[2]);
            kiln__store_i64(c->to, p[0], i, ew_ipow(a, b));
        } else {
            double a = kiln__load_f64(c->ta, p[1], i * s[1]);
            double b = kiln__load_f64(c->tb, p[2], i * s[2]);
            kiln__store_f64(c->to, p[0], i, pow(a, b));
        }
    }
}

/* ---- shapes -------------------------------------------------------------------- */

static const char *ew_node(const char *n) { return n ? n : "?"; }

/* Input i as a broadcast operand: for opset < 7 legacy broadcasting, input 1
 * is re-shaped to input 0's rank. */
static kiln_status ew_bin_inputs_info(const kiln_infer_args *a, kiln_tinfo *b1) {
    *b1 = *a->in[1];
    return kiln__ew_legacy_shape(a->node_name, a->attrs, a->in[0]->rank, &b1->rank, b1->dims);
}

static kiln_status ew_same_dtypes(const kiln_infer_args *a, int first, int n) {
    kiln_dtype t = KILN_DTYPE_UNDEFINED;
    for (int i = first; i < first + n; i++) {
        if (!a->in[i] || a->in[i]->dtype == KILN_DTYPE_UNDEFINED) continue;
        if (t == KILN_DTYPE_UNDEFINED) t = a->in[i]->dtype;
        else if (a->in[i]->dtype != t)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): inputs have different dtypes (%s, %s)",
                             ew_node(a->node_name), a->op->name, kiln_dtype_name(t),
                             kiln_dtype_name(a->in[i]->dtype));
    }
    return KILN_OK;
}

static uint32_t ew_bin_mask(int code) {
    switch (code) {
    case EW_B_EQ: return EW_ALL;
    case EW_B_AND: case EW_B_OR: case EW_B_XOR: return EW_BOOL;
    case EW_B_SHL: return EW_UINTS;
    case EW_B_SUM: case EW_B_MEAN: return EW_FLOATS;
    default: return EW_NUMERIC;
    }
}

static kiln_status ew_binary_infer(const kiln_infer_args *a) {
    const int code = a->op->code;
    kiln_tinfo b1;
    KILN_TRY(ew_bin_inputs_info(a, &b1));
    KILN_TRY(kiln__ew_check_dtype(a, 0, a->in[0]->dtype, ew_bin_mask(code)));
    KILN_TRY(kiln__ew_check_dtype(a, 1, b1.dtype, ew_bin_mask(code)));
    if (code != EW_B_POW) KILN_TRY(ew_same_dtypes(a, 0, 2));
    const kiln_tinfo *ins[2] = {a->in[0], &b1};
    KILN_TRY(kiln__broadcast_shapes(a->node_name, 2, ins, a->out[0]));
    if (code == EW_B_PRELU && a->in[0]->rank >= 0 && a->out[0]->rank >= 0) {
        /* unidirectional: the slope broadcasts to X, the output is X's shape */
        const kiln_tinfo *x = a->in[0];
        bool ok = a->out[0]->rank == x->rank;
        for (int d = 0; ok && d < x->rank; d++)
            if (x->dims[d] >= 0 && a->out[0]->dims[d] >= 0 && x->dims[d] != a->out[0]->dims[d])
                ok = false;
        if (!ok) {
            char sx[128], ss[128];
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (PRelu): slope %s does not broadcast to X %s",
                             ew_node(a->node_name), kiln__shape_str(b1.rank, b1.dims, ss, sizeof ss),
                             kiln__shape_str(x->rank, x->dims, sx, sizeof sx));
        }
        kiln__tinfo_copy_shape(a->out[0], x);
    }
    a->out[0]->dtype = ew_kind_is_compare(code) ? KILN_DTYPE_BOOL : a->in[0]->dtype;
    return KILN_OK;
}

static kiln_status ew_variadic_infer(const kiln_infer_args *a) {
    if (a->n_in < 1)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): needs at least one input",
                         ew_node(a->node_name), a->op->name);
    for (int i = 0; i < a->n_in; i++) {
        if (!a->in[i])
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): input %d is missing",
                             ew_node(a->node_name), a->op->name, i);
        KILN_TRY(kiln__ew_check_dtype(a, i, a->in[i]->dtype, ew_bin_mask(a->op->code)));
    }
    KILN_TRY(ew_same_dtypes(a, 0, a->n_in));
    KILN_TRY(kiln__broadcast_shapes(a->node_name, a->n_in, a->in, a->out[0]));
    a->out[0]->dtype = a->in[0]->dtype;
    return KILN_OK;
}

static kiln_status ew_where_infer(const kiln_infer_args *a) {
    KILN_TRY(kiln__ew_check_dtype(a, 0, a->in[0]->dtype, EW_BOOL));
    KILN_TRY(kiln__ew_check_dtype(a, 1, a->in[1]->dtype, EW_ALL));
    KILN_TRY(ew_same_dtypes(a, 1, 2));
    KILN_TRY(kiln__broadcast_shapes(a->node_name, 3, a->in, a->out[0]));
    a->out[0]->dtype = a->in[1]->dtype;
    return KILN_OK;
}

/* ---- kernels ----------------------------------------------------------------------- */

/* out = A (kind) B with broadcasting; A and B have the same dtype. */
static kiln_status ew_apply(const kiln_kernel_args *a, int kind, const kiln_tensor *A,
                            const kiln_tensor *B, kiln_tensor *out) {
    const kiln_tensor *ins[2] = {A, B};
    ew_half_ctx hc;
    ew_row_fn fn;
    const void *ctx = NULL;
    if (ew_is_half(A->dtype)) {
        fn = ew_bin_rows[kind][EW_T_F32];
        hc = (ew_half_ctx){fn, NULL, 3, {out->dtype, A->dtype, B->dtype, KILN_DTYPE_UNDEFINED}};
        fn = kiln__ew_half_row;
        ctx = &hc;
    } else {
        int ti = kiln__ew_native_index(A->dtype);
        fn = ti >= 0 ? ew_bin_rows[kind][ti] : NULL;
    }
    if (!fn || A->dtype != B->dtype) return kiln__ew_kernel_dtype_fail(a, A->dtype);
    ew_loop L;
    kiln__ew_loop_init(&L, out, 2, ins, fn, ctx);
    kiln__ew_loop_run(&L, a->pool);
    return KILN_OK;
}

static kiln_status ew_pow_cpu(const kiln_kernel_args *a, const kiln_tensor *A,
                              const kiln_tensor *B) {
    kiln_tensor *out = a->out[0];
    if (A->dtype == KILN_DTYPE_FLOAT32 && B->dtype == KILN_DTYPE_FLOAT32 &&
        kiln__tensor_numel(B) == 1 && ((const float *)B->data)[0] == 2.0f) {
        const kiln_tensor *ins[1] = {A};
        ew_loop L;
        kiln__ew_loop_init(&L, out, 1, ins, ew_square_f32, NULL);
        kiln__ew_loop_run(&L, a->pool);
        return KILN_OK;
    }
    if (A->dtype == B->dtype && ew_dtype_in(A->dtype, EW_FLOATS))
        return ew_apply(a, EW_B_POW, A, B, out);
    if (!ew_dtype_in(A->dtype, EW_NUMERIC)) return kiln__ew_kernel_dtype_fail(a, A->dtype);
    if (!ew_dtype_in(B->dtype, EW_NUMERIC)) return kiln__ew_kernel_dtype_fail(a, B->dtype);
    ew_pow_ctx c = {out->dtype, A->dtype, B->dtype};
    const kiln_tensor *ins[2] = {A, B};
    ew_loop L;
    kiln__ew_loop_init(&L, out, 2, ins, ew_pow_generic, &c);
    kiln__ew_loop_run(&L, a->pool);
    return KILN_OK;
}

static kiln_status ew_binary_cpu(const kiln_kernel_args *a) {
    const kiln_ew_bin_attrs *at = a->attrs;
    const kiln_tensor *A = a->in[0];
    kiln_tensor B = *a->in[1];
    KILN_TRY(kiln__ew_legacy_shape(a->node_name, at, A->rank, &B.rank, B.dims));
    int kind = a->op->code;
    if (kind == EW_B_POW) return ew_pow_cpu(a, A, &B);
    if (at) kind = kiln__ew_binary_kind(kind, at->fmod, at->shift_right);
    return ew_apply(a, kind, A, &B, a->out[0]);
}

/* Max, Min, Sum, Mean: a left fold into the output. */
typedef struct ew_scale_job {
    kiln_dtype t;
    void *y;
    double n;
} ew_scale_job;

static void ew_mean_chunk(void *vctx, int64_t b, int64_t e) {
    const ew_scale_job *j = vctx;
    if (j->t == KILN_DTYPE_FLOAT32) {
        float *y = j->y;
        const float n = (float)j->n;
        for (int64_t i = b; i < e; i++) y[i] /= n;
    } else if (j->t == KILN_DTYPE_FLOAT64) {
        double *y = j->y;
        for (int64_t i = b; i < e; i++) y[i] /= j->n;
    } else {
        for (int64_t i = b; i < e; i++)
            kiln__store_f64(j->t, j->y, i, (float)kiln__load_f64(j->t, j->y, i) / (float)j->n);
    }
}

static kiln_status ew_variadic_cpu(const kiln_kernel_args *a) {
    kiln_tensor *out = a->out[0];
    const int code = a->op->code;
    const int kind = kiln__ew_variadic_kind(code);
    if (!ew_dtype_in(out->dtype, ew_bin_mask(code))) return kiln__ew_kernel_dtype_fail(a, out->dtype);
    if (a->n_in == 1) {
        size_t nb = (size_t)kiln__tensor_numel(out) * kiln_dtype_size(out->dtype);
        if (nb && out->data != a->in[0]->data) memcpy(out->data, a->in[0]->data, nb);
    } else {
        KILN_TRY(ew_apply(a, kind, a->in[0], a->in[1], out));
        for (int i = 2; i < a->n_in; i++) KILN_TRY(ew_apply(a, kind, out, a->in[i], out));
    }
    if (code == EW_B_MEAN && a->n_in > 1) {
        ew_scale_job j = {out->dtype, out->data, (double)a->n_in};
        kiln__ew_parallel(a->pool, kiln__tensor_numel(out), EW_GRAIN, ew_mean_chunk, &j);
    }
    return KILN_OK;
}

/* Where: by element size */
#define EW_WHERE_ROW(BITS)                                                                  \
    static void ew_where_##BITS(const void *ctx, char *const *p, const int64_t *s, int64_t n) { \
        (void)ctx;                                                                          \
        uint##BITS##_t *o = (uint##BITS##_t *)(void *)p[0];                                 \
        const uint8_t *C = (const uint8_t *)p[1];                                           \
        const uint##BITS##_t *X = (const uint##BITS##_t *)(const void *)p[2];               \
        const uint##BITS##_t *Y = (const uint##BITS##_t *)(const void *)p[3];               \
        if (s[1] == 1 && s[2] == 1 && s[3] == 1) {                                          \
            for (int64_t i = 0; i < n; i++) o[i] = C[i] ? X[i] : Y[i];                      \
        } else {                                                                            \
            for (int64_t i = 0; i < n; i++) o[i] = C[i * s[1]] ? X[i * s[2]] : Y[i * s[3]]; \
        }                                                                                   \
    }
EW_WHERE_ROW(8)
EW_WHERE_ROW(16)
EW_WHERE_ROW(32)
EW_WHERE_ROW(64)

static kiln_status ew_where_cpu(const kiln_kernel_args *a) {
    kiln_tensor *out = a->out[0];
    ew_row_fn fn;
    switch (kiln_dtype_size(out->dtype)) {
    case 1: fn = ew_where_8; break;
    case 2: fn = ew_where_16; break;
    case 4: fn = ew_where_32; break;
    case 8: fn = ew_where_64; break;
    default: return kiln__ew_kernel_dtype_fail(a, out->dtype);
    }
    if (a->in[0]->dtype != KILN_DTYPE_BOOL) return kiln__ew_kernel_dtype_fail(a, a->in[0]->dtype);
    ew_loop L;
    kiln__ew_loop_init(&L, out, 3, a->in, fn, NULL);
    kiln__ew_loop_run(&L, a->pool);
    return KILN_OK;
}

/* ---- imports ------------------------------------------------------------------------ */

static kiln_status ew_binary_import(kiln_import_ctx *ic, void *attrs) {
    return kiln__ew_import_legacy_bcast(ic, attrs);
}

static kiln_status ew_prelu_import(kiln_import_ctx *ic, void *attrs) {
    kiln_ew_bin_attrs *at = attrs;
    if (kiln_import_opset(ic) < 7) at->legacy_bcast = EW_LEGACY_PRELU;
    return KILN_OK;
}

static kiln_status ew_mod_import(kiln_import_ctx *ic, void *attrs) {
    kiln_ew_bin_attrs *at = attrs;
    return kiln_attr_int32(ic, "fmod", 0, &at->fmod);
}

static kiln_status ew_bitshift_import(kiln_import_ctx *ic, void *attrs) {
    kiln_ew_bin_attrs *at = attrs;
    const char *d = kiln_attr_string(ic, "direction", NULL);
    if (!d) return KILN_IMPORT_FAIL(ic, "attribute direction is required");
    if (!strcmp(d, "RIGHT")) at->shift_right = 1;
    else if (strcmp(d, "LEFT") != 0)
        return KILN_IMPORT_FAIL(ic, "attribute direction must be LEFT or RIGHT, not '%s'", d);
    return KILN_OK;
}

/* legacy_bcast an EW_LEGACY_* with its axis in [-8, 7]; fmod (Mod) and
 * shift_right (BitShift) 0 or 1 */
static kiln_status ew_binary_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_ew_bin_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "broadcast (opset < 7)", at->legacy_bcast, EW_LEGACY_NONE,
                              EW_LEGACY_PRELU));
    KILN_TRY(kiln__check_attr(op, node, "axis (opset < 7)", at->legacy_axis, -KILN_MAX_RANK,
                              KILN_MAX_RANK - 1));
    KILN_TRY(kiln__check_attr(op, node, "fmod", at->fmod, 0, 1));
    return kiln__check_attr(op, node, "direction", at->shift_right, 0, 1);
}

/* ---- descriptors -------------------------------------------------------------------- */

/* FLAGS: KILN_OP_FLAG_REDUCIBLE for the arithmetic and comparisons, 0 for the
 * integer and bool ones */
#define EW_BIN_DEF(SYM, NAME, SINCE, CODE, IMPORT, FLAGS)                                   \
    const kiln_op_def kiln_op_##SYM = {                                                     \
        .name = NAME, .domain = "", .since = SINCE, .min_inputs = 2, .max_inputs = 2,       \
        .min_outputs = 1, .max_outputs = 1, .code = CODE, .flags = FLAGS,                   \
        .attr_size = sizeof(kiln_ew_bin_attrs), .import = IMPORT,                           \
        .validate = ew_binary_validate, .infer = ew_binary_infer, .workspace = NULL,        \
        .cpu = ew_binary_cpu};

EW_BIN_DEF(Add, "Add", 1, EW_B_ADD, ew_binary_import, KILN_OP_FLAG_REDUCIBLE)
EW_BIN_DEF(Sub, "Sub", 1, EW_B_SUB, ew_binary_import, KILN_OP_FLAG_REDUCIBLE)
EW_BIN_DEF(Mul, "Mul", 1, EW_B_MUL, ew_binary_import, KILN_OP_FLAG_REDUCIBLE)
EW_BIN_DEF(Div, "Div", 1, EW_B_DIV, ew_binary_import, KILN_OP_FLAG_REDUCIBLE)
EW_BIN_DEF(Pow, "Pow", 1, EW_B_POW, ew_binary_import, KILN_OP_FLAG_REDUCIBLE)
EW_BIN_DEF(Mod, "Mod", 10, EW_B_MOD, ew_mod_import, 0)
EW_BIN_DEF(Equal, "Equal", 1, EW_B_EQ, ew_binary_import, KILN_OP_FLAG_REDUCIBLE)
EW_BIN_DEF(Less, "Less", 1, EW_B_LT, ew_binary_import, KILN_OP_FLAG_REDUCIBLE)
EW_BIN_DEF(LessOrEqual, "LessOrEqual", 12, EW_B_LE, NULL, KILN_OP_FLAG_REDUCIBLE)
EW_BIN_DEF(Greater, "Greater", 1, EW_B_GT, ew_binary_import, KILN_OP_FLAG_REDUCIBLE)
EW_BIN_DEF(GreaterOrEqual, "GreaterOrEqual", 12, EW_B_GE, NULL, KILN_OP_FLAG_REDUCIBLE)
EW_BIN_DEF(And, "And", 1, EW_B_AND, ew_binary_import, 0)
EW_BIN_DEF(Or, "Or", 1, EW_B_OR, ew_binary_import, 0)
EW_BIN_DEF(Xor, "Xor", 1, EW_B_XOR, ew_binary_import, 0)
EW_BIN_DEF(BitShift, "BitShift", 11, EW_B_SHL, ew_bitshift_import, 0)
EW_BIN_DEF(PRelu, "PRelu", 1, EW_B_PRELU, ew_prelu_import, KILN_OP_FLAG_REDUCIBLE)

#define EW_VAR_DEF(SYM, NAME, CODE)                                                         \
    const kiln_op_def kiln_op_##SYM = {                                                     \
        .name = NAME, .domain = "", .since = 1, .min_inputs = 1, .max_inputs = -1,          \
        .min_outputs = 1, .max_outputs = 1, .code = CODE, .flags = KILN_OP_FLAG_REDUCIBLE,  \
        .attr_size = 0, .import = NULL, .infer = ew_variadic_infer, .workspace = NULL,                      \
        .cpu = ew_variadic_cpu};

EW_VAR_DEF(Max, "Max", EW_B_MAX)
EW_VAR_DEF(Min, "Min", EW_B_MIN)
EW_VAR_DEF(Sum, "Sum", EW_B_SUM)
EW_VAR_DEF(Mean, "Mean", EW_B_MEAN)

const kiln_op_def kiln_op_Where = {
    .name = "Where", .domain = "", .since = 9, .min_inputs = 3, .max_inputs = 3,
    .min_outputs = 1, .max_outputs = 1, .code = EW_B_WHERE, .flags = 0 | KILN_OP_FLAG_REDUCIBLE, .attr_size = 0,
    .import = NULL, .infer = ew_where_infer, .workspace = NULL, .cpu = ew_where_cpu};
