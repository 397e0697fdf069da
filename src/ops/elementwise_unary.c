/* elementwise_unary.c -- unary math, activations, IsNaN/IsInf/Not and Clip.
 *
 * float32 runs tight loops (one per op, the switch outside the loop) that the
 * compiler vectorizes; exp-based activations use a branch-free exp so they
 * vectorize too. float64 runs the same loops with libm. float16/bfloat16 go
 * through float32 in blocks. Integer inputs have typed loops for the ops that
 * are exact on integers (Abs, Neg, Sign, Relu, Clip) and a double-based path
 * for the rest (Shrink, Erf... on ints). */
#include "ops/elementwise_impl.h"

#include <math.h>

EW_VECTORIZE_FLOAT_SELECTS

/* input dtypes each op accepts */
static uint32_t ew_unary_mask(int code) {
    switch (code) {
    case EW_U_ABS: case EW_U_SIGN: case EW_U_SHRINK: case EW_U_ERF: return EW_NUMERIC;
    case EW_U_NEG: case EW_U_RELU: return EW_FLOATS | EW_SINTS;
    case EW_U_NOT: return EW_BOOL;
    default: return EW_FLOATS;
    }
}

/* ---- branch-free float32 exp / expm1 / tanh ----------------------------------
 * exp(x) = 2^k * exp(r) with k = round(x / ln 2) and r = x - k ln 2 split in
 * two parts (k ln2_hi is exact), |r| <= ln2/2, exp(r) by its degree-7 Taylor
 * polynomial (truncation error < 1e-8 relative). 2^k is applied as two
 * factors so that results in the subnormal range come out right. */
static inline float ew_bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float ew_expf(float x) {
    const float hi = 88.72283935546875f, lo = -103.972084045410f;
    float xc = x > hi ? hi : x;
    xc = xc < lo ? lo : xc;
    xc = xc == xc ? xc : 0.0f; /* NaN: computed on 0, patched below */
    float kf = xc * 1.44269504088896341f + 12582912.0f; /* round to nearest integer */
    kf -= 12582912.0f;
    float r = xc - kf * 0.693145751953125f;
    r = r - kf * 1.428606820309417e-06f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t k = (int32_t)kf; /* in [-150, 128] */
    int32_t k1 = k / 2, k2 = k - k1;
    float s1 = ew_bits_to_f32((uint32_t)(k1 + 127) << 23);
    float s2 = ew_bits_to_f32((uint32_t)(k2 + 127) << 23);
    float y = p * s1 * s2;
    y = x > hi ? INFINITY : y;
    return x == x ? y : x;
}

/* expm1 by its degree-12 Taylor polynomial: relative error < 1e-8 for |x| <= 1.5 */
static inline float ew_expm1_taylor12f(float x) {
    float p = 1.0f / 479001600.0f;
    p = p * x + 1.0f / 39916800.0f;
    p = p * x + 1.0f / 3628800.0f;
    p = p * x + 1.0f / 362880.0f;
    p = p * x + 1.0f / 40320.0f;
    p = p * x + 1.0f / 5040.0f;
    p = p * x + 1.0f / 720.0f;
    p = p * x + 1.0f / 120.0f;
    p = p * x + 1.0f / 24.0f;
    p = p * x + 1.0f / 6.0f;
    p = p * x + 0.5f;
    return x + x * x * p;
}

/* exp(x) - 1 without cancellation near 0 */
static inline float ew_expm1f(float x) {
    float big = ew_expf(x) - 1.0f;
    return (x > -0.7f && x < 1.5f) ? ew_expm1_taylor12f(x) : big;
}

/* tanh on |x| with the sign put back (keeps tanh(-0) = -0):
 *   |x| < 0.25:  odd Taylor polynomial
 *   |x| < 0.55:  t / (t + 2) with t = expm1(2|x|) from its Taylor polynomial
 *   otherwise:   1 - 2 / (exp(2|x|) + 1) (no cancellation: the result is > 0.5) */
static inline float ew_tanhf(float x) {
    float ax = fabsf(x);
    float e = ew_expf(2.0f * ax);
    float big = 1.0f - 2.0f / (e + 1.0f);
    float t = ew_expm1_taylor12f(2.0f * ax);
    float mid = t / (t + 2.0f);
    float x2 = ax * ax;
    float p = -1382.0f / 155925.0f;
    p = p * x2 + 62.0f / 2835.0f;
    p = p * x2 - 17.0f / 315.0f;
    p = p * x2 + 2.0f / 15.0f;
    p = p * x2 - 1.0f / 3.0f;
    float small = ax + ax * x2 * p;
    float y = ax < 0.55f ? mid : big;
    return copysignf(ax < 0.25f ? small : y, x);
}

static inline float ew_sigmoidf(float x) { return 1.0f / (1.0f + ew_expf(-x)); }
static inline double ew_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* min(1, max(0, v)) keeping NaN */
static inline float ew_clamp01f(float v) {
    v = v > 1.0f ? 1.0f : v;
    return v < 0.0f ? 0.0f : v;
}
static inline double ew_clamp01(double v) {
    v = v > 1.0 ? 1.0 : v;
    return v < 0.0 ? 0.0 : v;
}

/* ---- float loops ------------------------------------------------------------- */

#define EW_MAP(T, EXPR)                         \
    for (int64_t i = 0; i < n; i++) {           \
        T v = x[i];                             \
        y[i] = (T)(EXPR);                       \
    }                                           \
    break

/* SFX: libm suffix (f or nothing); EXP/EXPM1/TANH/SIGMOID: functions used.
 * NaN in gives NaN out for every activation, as PyTorch (docs/onnx.md): each
 * comparison sends NaN down the branch that returns it (v < 0 ? 0 : v). */
#define EW_UNARY_FLOAT_FN(NAME, T, SFX, EXP, EXPM1, TANH, SIGMOID, CLAMP01)                 \
    static void NAME(int code, const kiln_ew_act_attrs *at, const T *x, T *y, int64_t n) {  \
        const T alpha = (T)at->alpha, beta = (T)at->beta, gamma = (T)at->gamma;             \
        const T zero = (T)0, one = (T)1;                                                    \
        switch (code) {                                                                     \
        case EW_U_ABS: EW_MAP(T, fabs##SFX(v));                                             \
        case EW_U_NEG: EW_MAP(T, -v);                                                       \
        case EW_U_SQRT: EW_MAP(T, sqrt##SFX(v));                                            \
        case EW_U_EXP: EW_MAP(T, EXP(v));                                                   \
        case EW_U_LOG: EW_MAP(T, log##SFX(v));                                              \
        case EW_U_RECIPROCAL: EW_MAP(T, one / v);                                           \
        case EW_U_FLOOR: EW_MAP(T, floor##SFX(v));                                          \
        case EW_U_CEIL: EW_MAP(T, ceil##SFX(v));                                            \
        case EW_U_ROUND: EW_MAP(T, rint##SFX(v));                                           \
        case EW_U_SIGN: EW_MAP(T, v > zero ? one : (v < zero ? -one : v));                  \
        case EW_U_SIN: EW_MAP(T, sin##SFX(v));                                              \
        case EW_U_COS: EW_MAP(T, cos##SFX(v));                                              \
        case EW_U_TAN: EW_MAP(T, tan##SFX(v));                                              \
        case EW_U_ASIN: EW_MAP(T, asin##SFX(v));                                            \
        case EW_U_ACOS: EW_MAP(T, acos##SFX(v));                                            \
        case EW_U_ATAN: EW_MAP(T, atan##SFX(v));                                            \
        case EW_U_SINH: EW_MAP(T, sinh##SFX(v));                                            \
        case EW_U_COSH: EW_MAP(T, cosh##SFX(v));                                            \
        case EW_U_ASINH: EW_MAP(T, asinh##SFX(v));                                          \
        case EW_U_ACOSH: EW_MAP(T, acosh##SFX(v));                                          \
        case EW_U_ATANH: EW_MAP(T, atanh##SFX(v));                                          \
        case EW_U_ERF: EW_MAP(T, erf##SFX(v));                                              \
        case EW_U_RELU: EW_MAP(T, v < zero ? zero : v);                                     \
        case EW_U_LEAKYRELU: EW_MAP(T, v < zero ? v * alpha : v);                           \
        case EW_U_ELU: EW_MAP(T, v < zero ? alpha * EXPM1(v) : v);                          \
        case EW_U_SELU: EW_MAP(T, v > zero ? gamma * v : gamma * alpha * EXPM1(v));         \
        case EW_U_CELU: EW_MAP(T, v < zero ? alpha * EXPM1(v / alpha) : v);                 \
        case EW_U_SIGMOID: EW_MAP(T, SIGMOID(v));                                           \
        case EW_U_HARDSIGMOID: EW_MAP(T, CLAMP01(alpha * v + beta));                        \
        case EW_U_HARDSWISH: {                                                              \
            const T a6 = (T)(1.0 / 6.0), half = (T)0.5;                                      \
            EW_MAP(T, v * CLAMP01(a6 * v + half));                                          \
        }                                                                                   \
        case EW_U_TANH: EW_MAP(T, TANH(v));                                                 \
        case EW_U_SOFTPLUS:                                                                 \
            EW_MAP(T, (v > zero ? v : zero) + log1p##SFX(exp##SFX(-fabs##SFX(v))));         \
        case EW_U_SOFTSIGN: EW_MAP(T, v / (one + fabs##SFX(v)));                            \
        case EW_U_MISH:                                                                     \
            EW_MAP(T, v * TANH((v > zero ? v : zero) + log1p##SFX(exp##SFX(-fabs##SFX(v))))); \
        case EW_U_THRESHOLDEDRELU: EW_MAP(T, v <= alpha ? zero : v);                        \
        case EW_U_SHRINK: /* alpha = lambd, beta = bias */                                  \
            EW_MAP(T, v >= -alpha && v <= alpha ? zero : (v < -alpha ? v + beta : v - beta)); \
        default: break;                                                                     \
        }                                                                                   \
    }

EW_UNARY_FLOAT_FN(ew_unary_f32, float, f, ew_expf, ew_expm1f, ew_tanhf, ew_sigmoidf, ew_clamp01f)
EW_UNARY_FLOAT_FN(ew_unary_f64, double, , exp, expm1, tanh, ew_sigmoid, ew_clamp01)

void kiln__ew_unary_f32(int code, const kiln_ew_act_attrs *at, const float *x, float *y, int64_t n) {
    ew_unary_f32(code, at, x, y, n);
}

/* ---- integer loops (exact ops only) ------------------------------------------ */

#define EW_IABS_S(T, W, v) ((v) < 0 ? (T)((W)0 - (W)(v)) : (v))
#define EW_IABS_U(T, W, v) (v)
#define EW_INEG_S(T, W, v) (T)((W)0 - (W)(v))
#define EW_INEG_U(T, W, v) (T)((W)0 - (W)(v))
#define EW_ISIGN_S(T, W, v) (T)(((v) > 0) - ((v) < 0))
#define EW_ISIGN_U(T, W, v) (T)((v) > 0)
#define EW_IRELU_S(T, W, v) ((v) < 0 ? (T)0 : (v))
#define EW_IRELU_U(T, W, v) (v)

#define EW_UNARY_INT_FN(IDX, SFX, T, K, W, DT)                                          \
    static bool ew_unary_##SFX(int code, const void *vx, void *vy, int64_t n) {     \
        const T *x = vx;                                                            \
        T *y = vy;                                                                  \
        switch (code) {                                                             \
        case EW_U_ABS:                                                              \
            for (int64_t i = 0; i < n; i++) y[i] = EW_IABS_##K(T, W, x[i]);         \
            return true;                                                            \
        case EW_U_NEG:                                                              \
            for (int64_t i = 0; i < n; i++) y[i] = EW_INEG_##K(T, W, x[i]);         \
            return true;                                                            \
        case EW_U_SIGN:                                                             \
            for (int64_t i = 0; i < n; i++) y[i] = EW_ISIGN_##K(T, W, x[i]);        \
            return true;                                                            \
        case EW_U_RELU:                                                             \
            for (int64_t i = 0; i < n; i++) y[i] = EW_IRELU_##K(T, W, x[i]);        \
            return true;                                                            \
        default: return false;                                                      \
        }                                                                           \
    }
EW_FOR_INT(EW_UNARY_INT_FN)

static bool ew_unary_int(kiln_dtype t, int code, const void *x, void *y, int64_t n) {
    switch (t) {
#define EW_CASE_INT(IDX, SFX, T, K, W, DT) \
    case DT: return ew_unary_##SFX(code, x, y, n);
        EW_FOR_INT(EW_CASE_INT)
#undef EW_CASE_INT
    default: return false;
    }
}

/* ---- kernel -------------------------------------------------------------------- */

typedef struct ew_unary_job {
    int code;
    const kiln_ew_act_attrs *at;
    kiln_dtype t;
    const void *x;
    void *y;
} ew_unary_job;

#define EW_BLOCK 256

static const kiln_ew_act_attrs ew_no_attrs = {0, 0, 0};

static void ew_unary_chunk(void *vctx, int64_t b, int64_t e) {
    const ew_unary_job *j = vctx;
    const int64_t n = e - b;
    const size_t es = kiln_dtype_size(j->t);
    const char *x = (const char *)j->x + b * (int64_t)es;
    char *y = (char *)j->y + b * (int64_t)es;
    switch (j->t) {
    case KILN_DTYPE_FLOAT32:
        ew_unary_f32(j->code, j->at, (const float *)(const void *)x, (float *)(void *)y, n);
        return;
    case KILN_DTYPE_FLOAT64:
        ew_unary_f64(j->code, j->at, (const double *)(const void *)x, (double *)(void *)y, n);
        return;
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: {
        float buf[EW_BLOCK];
        const uint16_t *hx = (const uint16_t *)(const void *)x;
        uint16_t *hy = (uint16_t *)(void *)y;
        for (int64_t i0 = 0; i0 < n; i0 += EW_BLOCK) {
            int64_t m = n - i0 < EW_BLOCK ? n - i0 : EW_BLOCK;
            for (int64_t i = 0; i < m; i++) buf[i] = ew_half_load(j->t, hx[i0 + i]);
            ew_unary_f32(j->code, j->at, buf, buf, m);
            for (int64_t i = 0; i < m; i++) hy[i0 + i] = ew_half_store(j->t, buf[i]);
        }
        return;
    }
    default:
        break;
    }
    if (ew_unary_int(j->t, j->code, x, y, n)) return;
    /* integers, other ops: through double */
    double buf[EW_BLOCK];
    for (int64_t i0 = 0; i0 < n; i0 += EW_BLOCK) {
        int64_t m = n - i0 < EW_BLOCK ? n - i0 : EW_BLOCK;
        for (int64_t i = 0; i < m; i++) buf[i] = kiln__load_f64(j->t, x, i0 + i);
        ew_unary_f64(j->code, j->at, buf, buf, m);
        for (int64_t i = 0; i < m; i++) kiln__store_f64(j->t, y, i0 + i, buf[i]);
    }
}

static kiln_status ew_unary_infer(const kiln_infer_args *a) {
    const kiln_tinfo *x = a->in[0];
    KILN_TRY(kiln__ew_check_dtype(a, 0, x->dtype, ew_unary_mask(a->op->code)));
    kiln__tinfo_copy_shape(a->out[0], x);
    if (a->op->code == EW_U_ISNAN || a->op->code == EW_U_ISINF) a->out[0]->dtype = KILN_DTYPE_BOOL;
    return KILN_OK;
}

static kiln_status ew_unary_cpu(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    if (!ew_dtype_in(x->dtype, ew_unary_mask(a->op->code)) || x->dtype != y->dtype)
        return kiln__ew_kernel_dtype_fail(a, x->dtype);
    ew_unary_job j = {a->op->code, a->attrs ? a->attrs : &ew_no_attrs, x->dtype, x->data, y->data};
    /* transcendental ops are much more expensive per element */
    int64_t grain = a->op->code == EW_U_RELU || a->op->code == EW_U_NEG || a->op->code == EW_U_ABS
                        ? EW_GRAIN
                        : EW_GRAIN / 8;
    kiln__ew_parallel(a->pool, kiln__tensor_numel(x), grain, ew_unary_chunk, &j);
    return KILN_OK;
}

/* ---- IsNaN, IsInf, Not ---------------------------------------------------------- */

typedef struct ew_pred_job {
    int code;
    bool pos, neg;
    kiln_dtype t;
    const void *x;
    uint8_t *y;
} ew_pred_job;

static void ew_pred_chunk(void *vctx, int64_t b, int64_t e) {
    const ew_pred_job *j = vctx;
    uint8_t *y = j->y;
    const bool pos = j->pos, neg = j->neg;
    if (j->code == EW_U_NOT) {
        const uint8_t *x = j->x;
        for (int64_t i = b; i < e; i++) y[i] = !x[i];
        return;
    }
    if (j->t == KILN_DTYPE_FLOAT32) {
        const float *x = j->x;
        if (j->code == EW_U_ISNAN)
            for (int64_t i = b; i < e; i++) y[i] = x[i] != x[i];
        else
            for (int64_t i = b; i < e; i++)
                y[i] = (pos && x[i] == INFINITY) || (neg && x[i] == -INFINITY);
        return;
    }
    for (int64_t i = b; i < e; i++) {
        double v = kiln__load_f64(j->t, j->x, i);
        y[i] = j->code == EW_U_ISNAN ? isnan(v) : (pos && v == INFINITY) || (neg && v == -INFINITY);
    }
}

static kiln_status ew_pred_cpu(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    if (!ew_dtype_in(x->dtype, ew_unary_mask(a->op->code)))
        return kiln__ew_kernel_dtype_fail(a, x->dtype);
    ew_pred_job j = {a->op->code, true, true, x->dtype, x->data, a->out[0]->data};
    if (a->op->code == EW_U_ISINF && a->attrs) {
        const kiln_ew_isinf_attrs *at = a->attrs;
        j.pos = at->detect_positive != 0;
        j.neg = at->detect_negative != 0;
    }
    kiln__ew_parallel(a->pool, kiln__tensor_numel(x), EW_GRAIN, ew_pred_chunk, &j);
    return KILN_OK;
}

/* ---- imports ---------------------------------------------------------------------- */

static kiln_status ew_import_alpha(kiln_import_ctx *ic, void *attrs, float dflt) {
    kiln_ew_act_attrs *at = attrs;
    at->alpha = kiln_attr_float(ic, "alpha", dflt);
    return KILN_OK;
}
static kiln_status ew_import_leakyrelu(kiln_import_ctx *ic, void *attrs) {
    return ew_import_alpha(ic, attrs, 0.01f);
}
static kiln_status ew_import_alpha1(kiln_import_ctx *ic, void *attrs) {
    return ew_import_alpha(ic, attrs, 1.0f);
}
static kiln_status ew_import_celu(kiln_import_ctx *ic, void *attrs) {
    return ew_import_alpha(ic, attrs, 1.0f);
}
static kiln_status ew_import_selu(kiln_import_ctx *ic, void *attrs) {
    kiln_ew_act_attrs *at = attrs;
    at->alpha = kiln_attr_float(ic, "alpha", 1.67326319217681884765625f);
    at->gamma = kiln_attr_float(ic, "gamma", 1.05070102214813232421875f);
    return KILN_OK;
}
static kiln_status ew_import_hardsigmoid(kiln_import_ctx *ic, void *attrs) {
    kiln_ew_act_attrs *at = attrs;
    at->alpha = kiln_attr_float(ic, "alpha", 0.2f);
    at->beta = kiln_attr_float(ic, "beta", 0.5f);
    return KILN_OK;
}
static kiln_status ew_import_shrink(kiln_import_ctx *ic, void *attrs) {
    kiln_ew_act_attrs *at = attrs;
    at->alpha = kiln_attr_float(ic, "lambd", 0.5f);
    at->beta = kiln_attr_float(ic, "bias", 0.0f);
    return KILN_OK;
}
static kiln_status ew_import_isinf(kiln_import_ctx *ic, void *attrs) {
    kiln_ew_isinf_attrs *at = attrs;
    at->detect_positive = kiln_attr_int(ic, "detect_positive", 1) != 0;
    at->detect_negative = kiln_attr_int(ic, "detect_negative", 1) != 0;
    return KILN_OK;
}

/* Activation parameters are any floats, except Celu's alpha, which divides. */
static kiln_status ew_act_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    if (op->code == EW_U_CELU && ((const kiln_ew_act_attrs *)attrs)->alpha == 0.0f)
        return KILN_VALIDATE_FAIL(op, node, "attribute alpha must not be 0");
    return KILN_OK;
}

static kiln_status ew_isinf_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_ew_isinf_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "detect_positive", at->detect_positive, 0, 1));
    return kiln__check_attr(op, node, "detect_negative", at->detect_negative, 0, 1);
}

/* ---- descriptors ------------------------------------------------------------------- */

#define EW_UNARY_DEF(SYM, NAME, SINCE, CODE, FLAGS, ASIZE, IMPORT, VALIDATE, CPU)          \
    const kiln_op_def kiln_op_##SYM = {                                                    \
        .name = NAME, .domain = "", .since = SINCE, .min_inputs = 1, .max_inputs = 1,      \
        .min_outputs = 1, .max_outputs = 1, .code = CODE, .flags = FLAGS,                  \
        .attr_size = ASIZE, .import = IMPORT, .validate = VALIDATE, .infer = ew_unary_infer, \
        .workspace = NULL, .cpu = CPU};
#define EW_SIMPLE(SYM, NAME, SINCE, CODE) \
    EW_UNARY_DEF(SYM, NAME, SINCE, CODE, KILN_OP_FLAG_INPLACE | KILN_OP_FLAG_REDUCIBLE, 0, NULL, NULL, ew_unary_cpu)
#define EW_ACT(SYM, NAME, SINCE, CODE, IMPORT)                                   \
    EW_UNARY_DEF(SYM, NAME, SINCE, CODE, KILN_OP_FLAG_INPLACE | KILN_OP_FLAG_REDUCIBLE, sizeof(kiln_ew_act_attrs), \
                 IMPORT, ew_act_validate, ew_unary_cpu)

EW_SIMPLE(Abs, "Abs", 1, EW_U_ABS)
EW_SIMPLE(Neg, "Neg", 1, EW_U_NEG)
EW_SIMPLE(Sqrt, "Sqrt", 1, EW_U_SQRT)
EW_SIMPLE(Exp, "Exp", 1, EW_U_EXP)
EW_SIMPLE(Log, "Log", 1, EW_U_LOG)
EW_SIMPLE(Reciprocal, "Reciprocal", 1, EW_U_RECIPROCAL)
EW_SIMPLE(Floor, "Floor", 1, EW_U_FLOOR)
EW_SIMPLE(Ceil, "Ceil", 1, EW_U_CEIL)
EW_SIMPLE(Round, "Round", 11, EW_U_ROUND)
EW_SIMPLE(Sign, "Sign", 9, EW_U_SIGN)
EW_SIMPLE(Sin, "Sin", 7, EW_U_SIN)
EW_SIMPLE(Cos, "Cos", 7, EW_U_COS)
EW_SIMPLE(Tan, "Tan", 7, EW_U_TAN)
EW_SIMPLE(Asin, "Asin", 7, EW_U_ASIN)
EW_SIMPLE(Acos, "Acos", 7, EW_U_ACOS)
EW_SIMPLE(Atan, "Atan", 7, EW_U_ATAN)
EW_SIMPLE(Sinh, "Sinh", 9, EW_U_SINH)
EW_SIMPLE(Cosh, "Cosh", 9, EW_U_COSH)
EW_SIMPLE(Asinh, "Asinh", 9, EW_U_ASINH)
EW_SIMPLE(Acosh, "Acosh", 9, EW_U_ACOSH)
EW_SIMPLE(Atanh, "Atanh", 9, EW_U_ATANH)
EW_SIMPLE(Erf, "Erf", 9, EW_U_ERF)
EW_SIMPLE(Relu, "Relu", 1, EW_U_RELU)
EW_SIMPLE(Sigmoid, "Sigmoid", 1, EW_U_SIGMOID)
EW_SIMPLE(Tanh, "Tanh", 1, EW_U_TANH)
EW_SIMPLE(Softplus, "Softplus", 1, EW_U_SOFTPLUS)
EW_SIMPLE(Softsign, "Softsign", 1, EW_U_SOFTSIGN)
EW_SIMPLE(HardSwish, "HardSwish", 14, EW_U_HARDSWISH)
EW_SIMPLE(Mish, "Mish", 18, EW_U_MISH)
EW_ACT(LeakyRelu, "LeakyRelu", 1, EW_U_LEAKYRELU, ew_import_leakyrelu)
EW_ACT(Elu, "Elu", 1, EW_U_ELU, ew_import_alpha1)
EW_ACT(Selu, "Selu", 1, EW_U_SELU, ew_import_selu)
EW_ACT(Celu, "Celu", 12, EW_U_CELU, ew_import_celu)
EW_ACT(HardSigmoid, "HardSigmoid", 1, EW_U_HARDSIGMOID, ew_import_hardsigmoid)
EW_ACT(ThresholdedRelu, "ThresholdedRelu", 10, EW_U_THRESHOLDEDRELU, ew_import_alpha1)
EW_ACT(Shrink, "Shrink", 9, EW_U_SHRINK, ew_import_shrink)
EW_UNARY_DEF(IsNaN, "IsNaN", 9, EW_U_ISNAN, KILN_OP_FLAG_REDUCIBLE, 0, NULL, NULL, ew_pred_cpu)
EW_UNARY_DEF(IsInf, "IsInf", 10, EW_U_ISINF, KILN_OP_FLAG_REDUCIBLE, sizeof(kiln_ew_isinf_attrs), ew_import_isinf,
             ew_isinf_validate, ew_pred_cpu)
EW_UNARY_DEF(Not, "Not", 1, EW_U_NOT, KILN_OP_FLAG_INPLACE, 0, NULL, NULL, ew_pred_cpu)

/* ---- Clip ---------------------------------------------------------------------------
 * Clip-6 `min`/`max` attributes become inputs 1 and 2 at import. */

static kiln_status ew_clip_import(kiln_import_ctx *ic, void *attrs) {
    (void)attrs;
    if (kiln_import_opset(ic) >= 11) return KILN_OK;
    const kiln_tinfo *x = kiln_import_input_info(ic, 0);
    kiln_dtype t = x && ew_dtype_in(x->dtype, EW_FLOATS) ? x->dtype : KILN_DTYPE_FLOAT32;
    const char *const names[2] = {"min", "max"};
    for (int i = 0; i < 2; i++) {
        if (!kiln_attr_has(ic, names[i])) continue;
        float v = kiln_attr_float(ic, names[i], 0.0f);
        unsigned char buf[8];
        kiln__store_f64(t, buf, 0, v);
        KILN_TRY(kiln_import_set_const_input(ic, i + 1, t, 0, NULL, buf));
    }
    return KILN_OK;
}

static kiln_status ew_clip_infer(const kiln_infer_args *a) {
    const kiln_tinfo *x = a->in[0];
    KILN_TRY(kiln__ew_check_dtype(a, 0, x->dtype, EW_NUMERIC));
    for (int i = 1; i < a->n_in && i < 3; i++) {
        const kiln_tinfo *b = a->in[i];
        if (!b) continue;
        KILN_TRY(kiln__ew_check_dtype(a, i, b->dtype, EW_NUMERIC));
        int64_t n = kiln__numel(b->rank, b->dims);
        if (n >= 0 && n != 1)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Clip): input %d (%s) must be a scalar",
                             a->node_name ? a->node_name : "?", i, i == 1 ? "min" : "max");
    }
    kiln__tinfo_copy_shape(a->out[0], x);
    return KILN_OK;
}

typedef struct ew_clip_job {
    kiln_dtype t;
    const void *x;
    void *y;
    bool has_lo, has_hi;
    double flo, fhi;  /* float bounds */
    int64_t ilo, ihi; /* integer bounds */
} ew_clip_job;

#define EW_CLIP_FLOAT(T)                                                     \
    do {                                                                     \
        const T *x = (const T *)j->x + b;                                    \
        T *y = (T *)j->y + b;                                                \
        const T lo = j->has_lo ? (T)j->flo : (T)-INFINITY;                   \
        const T hi = j->has_hi ? (T)j->fhi : (T)INFINITY;                    \
        for (int64_t i = 0; i < n; i++) {                                    \
            T v = x[i];                                                      \
            v = v < lo ? lo : v;                                             \
            y[i] = v > hi ? hi : v;                                          \
        }                                                                    \
    } while (0)

#define EW_CLIP_INT_FN(IDX, SFX, T, K, W, DT)                                           \
    static void ew_clip_##SFX(const ew_clip_job *j, int64_t b, int64_t n) {         \
        const T *x = (const T *)j->x + b;                                           \
        T *y = (T *)j->y + b;                                                       \
        const T lo = (T)j->ilo, hi = (T)j->ihi;                                     \
        const bool has_lo = j->has_lo, has_hi = j->has_hi;                          \
        for (int64_t i = 0; i < n; i++) {                                           \
            T v = x[i];                                                             \
            if (has_lo && v < lo) v = lo;                                           \
            if (has_hi && v > hi) v = hi;                                           \
            y[i] = v;                                                               \
        }                                                                           \
    }
EW_FOR_INT(EW_CLIP_INT_FN)

static void ew_clip_chunk(void *vctx, int64_t b, int64_t e) {
    const ew_clip_job *j = vctx;
    const int64_t n = e - b;
    switch (j->t) {
    case KILN_DTYPE_FLOAT32: EW_CLIP_FLOAT(float); return;
    case KILN_DTYPE_FLOAT64: EW_CLIP_FLOAT(double); return;
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: {
        const uint16_t *x = j->x;
        uint16_t *y = j->y;
        const float lo = j->has_lo ? (float)j->flo : -INFINITY;
        const float hi = j->has_hi ? (float)j->fhi : INFINITY;
        for (int64_t i = b; i < e; i++) {
            float v = ew_half_load(j->t, x[i]);
            v = v < lo ? lo : v;
            y[i] = ew_half_store(j->t, v > hi ? hi : v);
        }
        return;
    }
    case KILN_DTYPE_INT8: ew_clip_i8(j, b, n); return;
    case KILN_DTYPE_INT16: ew_clip_i16(j, b, n); return;
    case KILN_DTYPE_INT32: ew_clip_i32(j, b, n); return;
    case KILN_DTYPE_INT64: ew_clip_i64(j, b, n); return;
    case KILN_DTYPE_UINT8: ew_clip_u8(j, b, n); return;
    case KILN_DTYPE_UINT16: ew_clip_u16(j, b, n); return;
    case KILN_DTYPE_UINT32: ew_clip_u32(j, b, n); return;
    case KILN_DTYPE_UINT64: ew_clip_u64(j, b, n); return;
    default: return;
    }
}

static kiln_status ew_clip_cpu(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    if (!ew_dtype_in(x->dtype, EW_NUMERIC)) return kiln__ew_kernel_dtype_fail(a, x->dtype);
    ew_clip_job j = {x->dtype, x->data, a->out[0]->data, false, false, 0, 0, 0, 0};
    const kiln_tensor *lo = a->n_in > 1 ? a->in[1] : NULL;
    const kiln_tensor *hi = a->n_in > 2 ? a->in[2] : NULL;
    if (lo && kiln__tensor_numel(lo) > 0) {
        j.has_lo = true;
        j.flo = kiln__load_f64(lo->dtype, lo->data, 0);
        j.ilo = kiln__load_i64(lo->dtype, lo->data, 0);
    }
    if (hi && kiln__tensor_numel(hi) > 0) {
        j.has_hi = true;
        j.fhi = kiln__load_f64(hi->dtype, hi->data, 0);
        j.ihi = kiln__load_i64(hi->dtype, hi->data, 0);
    }
    kiln__ew_parallel(a->pool, kiln__tensor_numel(x), EW_GRAIN, ew_clip_chunk, &j);
    return KILN_OK;
}

const kiln_op_def kiln_op_Clip = {
    .name = "Clip", .domain = "", .since = 1, .min_inputs = 1, .max_inputs = 3,
    .min_outputs = 1, .max_outputs = 1, .code = 0, .flags = KILN_OP_FLAG_INPLACE | KILN_OP_FLAG_REDUCIBLE,
    .attr_size = 0, .import = ew_clip_import, .infer = ew_clip_infer, .workspace = NULL,
    .cpu = ew_clip_cpu};
