/* nn_norm.c -- normalizations and softmax: BatchNormalization,
 * InstanceNormalization, LayerNormalization, RMSNormalization, LRN,
 * MeanVarianceNormalization, Softmax, LogSoftmax, Hardmax.
 *
 * Numerics: means and variances are two-pass (mean first, then the sum of
 * squared deviations), with float lanes summed into double; softmax
 * subtracts the row maximum before exponentiating. float32 softmax rows use
 * a vectorizable exp (Cody-Waite reduction + degree-7 polynomial, < 2 ulp
 * on the range softmax needs); other dtypes go through double. */
#include "ops/nn_attrs.h"
#include "ops/spatial_attrs.h"
#include "ops/op.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>

#define NODE(a) ((a)->node_name ? (a)->node_name : "?")

/* Lets GCC if-convert float selects (clamps, max) in the few hot loops below
 * so that they vectorize; kiln never relies on floating-point traps. */
#if defined(__GNUC__) && !defined(__clang__)
#define NN_VEC_MATH __attribute__((optimize("no-trapping-math")))
#else
#define NN_VEC_MATH
#endif

static bool is_floating(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT32 || t == KILN_DTYPE_FLOAT64 || t == KILN_DTYPE_FLOAT16 ||
           t == KILN_DTYPE_BFLOAT16;
}

static kiln_status need_float(const kiln_infer_args *a, kiln_dtype t) {
    if (!is_floating(t))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s is not supported", NODE(a),
                         a->op->name, kiln_dtype_name(t));
    return KILN_OK;
}

/* sum of x[0..n) as double, with 16 float lanes */
static double sum_f32(const float *x, int64_t n) {
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += x[i + j];
    double s = 0.0;
    for (int j = 0; j < 16; j++) s += acc[j];
    for (; i < n; i++) s += x[i];
    return s;
}

/* sum of (x - m)^2 as double */
static double sumsq_dev_f32(const float *x, int64_t n, float m) {
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) {
            float d = x[i + j] - m;
            acc[j] += d * d;
        }
    double s = 0.0;
    for (int j = 0; j < 16; j++) s += acc[j];
    for (; i < n; i++) {
        double d = (double)x[i] - m;
        s += d * d;
    }
    return s;
}

/* ---- BatchNormalization ----------------------------------------------------- */


static kiln_status bn_import(kiln_import_ctx *ic, void *attrs) {
    kiln_bn_attrs *at = attrs;
    int64_t opset = kiln_import_opset(ic);
    at->epsilon = kiln_attr_float(ic, "epsilon", 1e-5f);
    at->spatial = opset < 9 ? (int32_t)(kiln_attr_int(ic, "spatial", 1) != 0) : 1;
    if (kiln_attr_int(ic, "training_mode", 0) != 0)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (BatchNormalization): training_mode=1 is not supported "
                         "(inference only)",
                         kiln_import_node_name(ic));
    int nout = kiln_import_num_outputs(ic);
    if (opset < 14 && nout > 1)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (BatchNormalization): %d outputs means training mode, which is "
                         "not supported (inference only)",
                         kiln_import_node_name(ic), nout);
    return KILN_OK;
}

/* epsilon any float; spatial (opset < 9) 0 or 1 */
static kiln_status bn_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    return kiln__check_attr(op, node, "spatial", ((const kiln_bn_attrs *)attrs)->spatial, 0, 1);
}

static kiln_status bn_infer(const kiln_infer_args *a) {
    const kiln_tinfo *X = a->in[0];
    KILN_TRY(need_float(a, X->dtype));
    for (int i = 0; i < a->n_out; i++) {
        if (!a->out[i]) continue;
        if (i == 0) {
            kiln__tinfo_copy_shape(a->out[0], X);
        } else {
            /* running/saved mean and variance (training mode only) */
            a->out[i]->dtype = a->in[3]->dtype;
            a->out[i]->rank = 1;
            a->out[i]->dims[0] = X->rank >= 2 ? X->dims[1] : KILN_DIM_UNKNOWN;
        }
    }
    if (X->rank < 0) return KILN_OK;
    if (X->rank < 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (BatchNormalization): input must have rank >= 2, got %d",
                         NODE(a), X->rank);
    int64_t C = X->dims[1];
    static const char *const names[5] = {"X", "scale", "B", "input_mean", "input_var"};
    for (int i = 1; i < 5; i++) {
        const kiln_tinfo *p = a->in[i];
        if (!is_floating(p->dtype))
            return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (BatchNormalization): %s has dtype %s",
                             NODE(a), names[i], kiln_dtype_name(p->dtype));
        if (p->rank < 0 || C < 0) continue;
        int64_t n = kiln__numel(p->rank, p->dims);
        if (p->rank == 1 && p->dims[0] >= 0 && p->dims[0] != C)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (BatchNormalization): %s has %lld elements but the input has "
                             "%lld channels",
                             NODE(a), names[i], (long long)p->dims[0], (long long)C);
        if (p->rank != 1 && n >= 0 && n != C) {
            int64_t per = kiln__numel(X->rank - 1, X->dims + 1);
            if (per >= 0 && n != per)
                return KILN_FAIL(KILN_ERR_MODEL,
                                 "node '%s' (BatchNormalization): %s has shape %s, expected [%lld]",
                                 NODE(a), names[i], kiln__shape_str(p->rank, p->dims, (char[64]){0}, 64),
                                 (long long)C);
        }
    }
    return KILN_OK;
}

typedef struct bn_ctx {
    const kiln_tensor *X;
    kiln_tensor *Y;
    const double *mul, *add; /* per channel or per (channel, position) */
    int64_t C, plane;
    bool per_elem;
} bn_ctx;

static void bn_planes(void *vctx, int64_t p0, int64_t p1) {
    const bn_ctx *c = vctx;
    for (int64_t p = p0; p < p1; p++) {
        int64_t ch = p % c->C;
        if (c->X->dtype == KILN_DTYPE_FLOAT32 && !c->per_elem) {
            const float *restrict x = (const float *)c->X->data + p * c->plane;
            float *restrict y = (float *)c->Y->data + p * c->plane;
            float m = (float)c->mul[ch], b = (float)c->add[ch];
            for (int64_t i = 0; i < c->plane; i++) y[i] = x[i] * m + b;
            continue;
        }
        for (int64_t i = 0; i < c->plane; i++) {
            int64_t k = c->per_elem ? ch * c->plane + i : ch;
            double v = kiln__load_f64(c->X->dtype, c->X->data, p * c->plane + i);
            kiln__store_f64(c->Y->dtype, c->Y->data, p * c->plane + i, v * c->mul[k] + c->add[k]);
        }
    }
}

static kiln_status bn_cpu(const kiln_kernel_args *a) {
    const kiln_bn_attrs *at = a->attrs;
    const kiln_tensor *X = a->in[0];
    int64_t N = X->dims[0], C = X->dims[1];
    int64_t plane = kiln__numel(X->rank - 2, X->dims + 2);
    int64_t np = kiln__tensor_numel(a->in[1]);
    bool per_elem = np != C;
    if (per_elem && np != C * plane)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (BatchNormalization): scale has %lld elements, "
                         "expected %lld or %lld", NODE(a), (long long)np, (long long)C, (long long)(C * plane));
    for (int i = 2; i < 5; i++)
        if (kiln__tensor_numel(a->in[i]) != np)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (BatchNormalization): parameter %d has %lld "
                             "elements, scale has %lld", NODE(a), i, (long long)kiln__tensor_numel(a->in[i]),
                             (long long)np);
    double *mul = kiln__malloc(sizeof(double) * (size_t)(2 * np + 1));
    if (!mul) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (BatchNormalization): out of memory", NODE(a));
    double *add = mul + np;
    for (int64_t i = 0; i < np; i++) {
        double s = kiln__load_f64(a->in[1]->dtype, a->in[1]->data, i);
        double b = kiln__load_f64(a->in[2]->dtype, a->in[2]->data, i);
        double m = kiln__load_f64(a->in[3]->dtype, a->in[3]->data, i);
        double v = kiln__load_f64(a->in[4]->dtype, a->in[4]->data, i);
        mul[i] = s / sqrt(v + (double)at->epsilon);
        add[i] = b - m * mul[i];
    }
    bn_ctx c = {.X = X, .Y = a->out[0], .mul = mul, .add = add, .C = C, .plane = plane,
                .per_elem = per_elem};
    kiln__parallel_for(a->pool, N * C, plane > 0 ? (65536 + plane - 1) / plane : 1, bn_planes, &c);
    kiln__free(mul);
    return KILN_OK;
}

const kiln_op_def kiln_op_BatchNormalization = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "BatchNormalization", .domain = "", .since = 1,
    .min_inputs = 5, .max_inputs = 5, .min_outputs = 1, .max_outputs = 5,
    .attr_size = sizeof(kiln_bn_attrs),
    .import = bn_import, .validate = bn_validate, .infer = bn_infer, .cpu = bn_cpu,
};

/* ---- InstanceNormalization --------------------------------------------------- */


static kiln_status in_import(kiln_import_ctx *ic, void *attrs) {
    ((kiln_eps_attrs *)attrs)->epsilon = kiln_attr_float(ic, "epsilon", 1e-5f);
    return KILN_OK;
}

/* epsilon: any float */
static kiln_status eps_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    (void)op, (void)attrs, (void)node;
    return KILN_OK;
}

static kiln_status in_infer(const kiln_infer_args *a) {
    const kiln_tinfo *X = a->in[0];
    KILN_TRY(need_float(a, X->dtype));
    kiln__tinfo_copy_shape(a->out[0], X);
    if (X->rank < 0) return KILN_OK;
    if (X->rank < 3)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (InstanceNormalization): input must have rank >= 3, got %d",
                         NODE(a), X->rank);
    for (int i = 1; i < 3; i++) {
        const kiln_tinfo *p = a->in[i];
        if (p->dtype != X->dtype)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (InstanceNormalization): %s dtype %s differs from input %s",
                             NODE(a), i == 1 ? "scale" : "B", kiln_dtype_name(p->dtype), kiln_dtype_name(X->dtype));
        if (p->rank >= 0 && (p->rank != 1 || (p->dims[0] >= 0 && X->dims[1] >= 0 && p->dims[0] != X->dims[1])))
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (InstanceNormalization): %s must be 1-D of length C=%lld, got %s",
                             NODE(a), i == 1 ? "scale" : "B", (long long)X->dims[1],
                             kiln__shape_str(p->rank, p->dims, (char[64]){0}, 64));
    }
    return KILN_OK;
}

typedef struct in_ctx {
    const kiln_tensor *X, *S, *B;
    kiln_tensor *Y;
    int64_t C, plane;
    float eps;
} in_ctx;

static void in_planes(void *vctx, int64_t p0, int64_t p1) {
    const in_ctx *c = vctx;
    kiln_dtype t = c->X->dtype;
    int64_t n = c->plane;
    for (int64_t p = p0; p < p1; p++) {
        int64_t ch = p % c->C;
        double sc = kiln__load_f64(t, c->S->data, ch), bi = kiln__load_f64(t, c->B->data, ch);
        if (t == KILN_DTYPE_FLOAT32) {
            const float *x = (const float *)c->X->data + p * n;
            float *y = (float *)c->Y->data + p * n;
            double mean = n ? sum_f32(x, n) / (double)n : 0.0;
            double var = n ? sumsq_dev_f32(x, n, (float)mean) / (double)n : 0.0;
            float m = (float)(sc / sqrt(var + c->eps)), b = (float)(bi - mean * (sc / sqrt(var + c->eps)));
            for (int64_t i = 0; i < n; i++) y[i] = x[i] * m + b;
            continue;
        }
        double s = 0.0, ss = 0.0;
        for (int64_t i = 0; i < n; i++) s += kiln__load_f64(t, c->X->data, p * n + i);
        double mean = n ? s / (double)n : 0.0;
        for (int64_t i = 0; i < n; i++) {
            double d = kiln__load_f64(t, c->X->data, p * n + i) - mean;
            ss += d * d;
        }
        double inv = 1.0 / sqrt((n ? ss / (double)n : 0.0) + c->eps);
        for (int64_t i = 0; i < n; i++) {
            double v = kiln__load_f64(t, c->X->data, p * n + i);
            kiln__store_f64(t, c->Y->data, p * n + i, (v - mean) * inv * sc + bi);
        }
    }
}

static kiln_status in_cpu(const kiln_kernel_args *a) {
    const kiln_eps_attrs *at = a->attrs;
    const kiln_tensor *X = a->in[0];
    in_ctx c = {.X = X, .S = a->in[1], .B = a->in[2], .Y = a->out[0], .C = X->dims[1],
                .plane = kiln__numel(X->rank - 2, X->dims + 2), .eps = at->epsilon};
    int64_t planes = X->dims[0] * X->dims[1];
    kiln__parallel_for(a->pool, planes, c.plane > 0 ? (32768 + c.plane - 1) / c.plane : 1, in_planes, &c);
    return KILN_OK;
}

const kiln_op_def kiln_op_InstanceNormalization = {
    .name = "InstanceNormalization", .domain = "", .since = 1,
    .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_eps_attrs),
    .import = in_import, .validate = eps_validate, .infer = in_infer, .cpu = in_cpu,
};

/* ---- LayerNormalization ------------------------------------------------------ */


static kiln_status ln_import(kiln_import_ctx *ic, void *attrs) {
    kiln_ln_attrs *at = attrs;
    KILN_TRY(kiln_attr_int32(ic, "axis", -1, &at->axis));
    at->epsilon = kiln_attr_float(ic, "epsilon", 1e-5f);
    return kiln_attr_int32(ic, "stash_type", 1, &at->stash_type);
}

/* axis in [-8, 7]; stash_type a float dtype */
static kiln_status ln_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_ln_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "axis", at->axis, -KILN_MAX_RANK, KILN_MAX_RANK - 1));
    if (at->stash_type != 1 && at->stash_type != KILN_DTYPE_FLOAT64 &&
        at->stash_type != KILN_DTYPE_FLOAT16 && at->stash_type != KILN_DTYPE_BFLOAT16)
        return KILN_VALIDATE_FAIL(op, node, "stash_type %d is not supported", (int)at->stash_type);
    return KILN_OK;
}

/* Checks that `p` broadcasts (unidirectionally) to dims[axis:]. */
static kiln_status ln_check_param(const kiln_infer_args *a, const char *what, const kiln_tinfo *p,
                                  const kiln_tinfo *X, int axis) {
    if (!p || p->rank < 0) return KILN_OK;
    int nr = X->rank - axis;
    if (p->rank > nr)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): %s has rank %d, more than the %d normalized dims",
                         NODE(a), a->op->name, what, p->rank, nr);
    for (int i = 0; i < p->rank; i++) {
        int64_t pd = p->dims[i], xd = X->dims[X->rank - p->rank + i];
        if (pd >= 0 && xd >= 0 && pd != 1 && pd != xd) {
            char s1[128], s2[128];
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (%s): %s of shape %s does not match the normalized "
                             "shape of input %s (axis %d)",
                             NODE(a), a->op->name, what, kiln__shape_str(p->rank, p->dims, s1, sizeof s1),
                             kiln__shape_str(X->rank, X->dims, s2, sizeof s2), axis);
        }
    }
    return KILN_OK;
}

static kiln_status ln_infer(const kiln_infer_args *a) {
    const kiln_ln_attrs *at = a->attrs;
    const kiln_tinfo *X = a->in[0];
    KILN_TRY(need_float(a, X->dtype));
    kiln__tinfo_copy_shape(a->out[0], X);
    for (int i = 1; i < a->n_out && i < 3; i++) {
        if (!a->out[i]) continue;
        a->out[i]->dtype = at->stash_type == 1 ? KILN_DTYPE_FLOAT32 : (kiln_dtype)at->stash_type;
        a->out[i]->rank = X->rank;
    }
    if (X->rank < 0) return KILN_OK;
    int axis;
    KILN_TRY(kiln__norm_axis(NODE(a), at->axis, X->rank, &axis));
    for (int i = 1; i < a->n_in && i < 3; i++) {
        const kiln_tinfo *p = a->in[i];
        if (p && p->dtype != X->dtype)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (LayerNormalization): %s dtype %s differs from input %s",
                             NODE(a), i == 1 ? "Scale" : "B", kiln_dtype_name(p->dtype), kiln_dtype_name(X->dtype));
        KILN_TRY(ln_check_param(a, i == 1 ? "Scale" : "B", p, X, axis));
    }
    for (int i = 1; i < a->n_out && i < 3; i++) {
        if (!a->out[i]) continue;
        for (int d = 0; d < X->rank; d++) a->out[i]->dims[d] = d < axis ? X->dims[d] : 1;
    }
    return KILN_OK;
}

typedef struct ln_ctx {
    const kiln_tensor *X;
    kiln_tensor *Y;
    const kiln_tensor *S, *B;
    float *mean_out, *inv_out;   /* float32 stash outputs or NULL */
    kiln_tensor *mean_t, *inv_t; /* other dtypes */
    int64_t D;                   /* normalized size */
    int64_t sstr[KILN_MAX_RANK], bstr[KILN_MAX_RANK]; /* broadcast strides over dims[axis:] */
    int64_t ndims[KILN_MAX_RANK];
    int nr;
    bool s_dense, b_dense;       /* parameter has D elements laid out like X's row */
    float eps;
    bool rms;                    /* RMSNormalization: no mean subtracted, no B */
} ln_ctx;

static int64_t ln_param_index(const ln_ctx *c, const int64_t *str, int64_t i) {
    int64_t off = 0;
    for (int d = c->nr - 1; d >= 0; d--) {
        off += (i % c->ndims[d]) * str[d];
        i /= c->ndims[d];
    }
    return off;
}

void kiln__ln_row_f32(const float *x, float *y, const float *scale, const float *bias, int64_t D, float eps,
                      bool center, double *mean, double *inv) {
    *mean = D && center ? sum_f32(x, D) / (double)D : 0.0;
    double var = D ? sumsq_dev_f32(x, D, (float)*mean) / (double)D : 0.0;
    *inv = 1.0 / sqrt(var + (double)eps);
    const float fm = (float)*mean, fi = (float)*inv;
    if (bias)
        for (int64_t i = 0; i < D; i++) y[i] = (x[i] - fm) * fi * scale[i] + bias[i];
    else
        for (int64_t i = 0; i < D; i++) y[i] = (x[i] - fm) * fi * scale[i];
}

static void ln_rows(void *vctx, int64_t r0, int64_t r1) {
    const ln_ctx *c = vctx;
    int64_t D = c->D;
    kiln_dtype t = c->X->dtype;
    const kiln_dtype yt = c->Y->dtype; /* RMSNormalization: Scale's type, which may differ from X's */
    for (int64_t r = r0; r < r1; r++) {
        double mean, inv;
        if (t == KILN_DTYPE_FLOAT32 && yt == t && c->S->dtype == t && c->s_dense && (!c->B || c->b_dense)) {
            kiln__ln_row_f32((const float *)c->X->data + r * D, (float *)c->Y->data + r * D, c->S->data,
                             c->B ? c->B->data : NULL, D, c->eps, !c->rms, &mean, &inv);
        } else {
            double sum = 0.0, ss = 0.0;
            for (int64_t i = 0; i < D && !c->rms; i++) sum += kiln__load_f64(t, c->X->data, r * D + i);
            mean = D ? sum / (double)D : 0.0;
            for (int64_t i = 0; i < D; i++) {
                double d = kiln__load_f64(t, c->X->data, r * D + i) - mean;
                ss += d * d;
            }
            inv = 1.0 / sqrt((D ? ss / (double)D : 0.0) + (double)c->eps);
            for (int64_t i = 0; i < D; i++) {
                double v = (kiln__load_f64(t, c->X->data, r * D + i) - mean) * inv;
                v *= kiln__load_f64(c->S->dtype, c->S->data, ln_param_index(c, c->sstr, i));
                if (c->B) v += kiln__load_f64(c->B->dtype, c->B->data, ln_param_index(c, c->bstr, i));
                kiln__store_f64(yt, c->Y->data, r * D + i, v);
            }
        }
        if (c->mean_t) kiln__store_f64(c->mean_t->dtype, c->mean_t->data, r, mean);
        if (c->inv_t) kiln__store_f64(c->inv_t->dtype, c->inv_t->data, r, inv);
    }
}

static kiln_status ln_cpu(const kiln_kernel_args *a) {
    const kiln_ln_attrs *at = a->attrs;
    const kiln_tensor *X = a->in[0];
    int axis;
    KILN_TRY(kiln__norm_axis(NODE(a), at->axis, X->rank, &axis));
    const int op_id = a->op_id ? a->op_id : kiln__op_id_of(a->op);
    ln_ctx c = {.X = X, .Y = a->out[0], .S = a->in[1], .B = a->n_in > 2 ? a->in[2] : NULL,
                .eps = at->epsilon, .rms = op_id == KILN_OP_RMSNormalization};
    c.nr = X->rank - axis;
    c.D = kiln__numel(c.nr, X->dims + axis);
    for (int i = 0; i < c.nr; i++) c.ndims[i] = X->dims[axis + i];
    kiln__bcast_strides(c.S->rank, c.S->dims, c.nr, c.ndims, c.sstr);
    c.s_dense = kiln__tensor_numel(c.S) == c.D;
    if (c.B) {
        kiln__bcast_strides(c.B->rank, c.B->dims, c.nr, c.ndims, c.bstr);
        c.b_dense = kiln__tensor_numel(c.B) == c.D;
    }
    if (a->n_out > 1 && a->out[1] && a->out[1]->data) c.mean_t = a->out[1];
    if (a->n_out > 2 && a->out[2] && a->out[2]->data) c.inv_t = a->out[2];
    int64_t rows = kiln__numel(axis, X->dims);
    kiln__parallel_for(a->pool, rows, c.D > 0 ? (16384 + c.D - 1) / c.D : rows, ln_rows, &c);
    return KILN_OK;
}

const kiln_op_def kiln_op_LayerNormalization = {
    .flags = KILN_OP_FLAG_REDUCIBLE | KILN_OP_FLAG_REDUCIBLE_OUT0,
    .name = "LayerNormalization", .domain = "", .since = 1,
    .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 3,
    .attr_size = sizeof(kiln_ln_attrs),
    .import = ln_import, .validate = ln_validate, .infer = ln_infer, .cpu = ln_cpu,
};

/* ---- RMSNormalization (opset 23) -------------------------------------------------
 *
 * Y = X / sqrt(mean(X^2 over dims[axis:]) + epsilon) * scale: LayerNormalization
 * without the mean and B (ln_rows with rms set). X and scale may be of two
 * float types; Y is of scale's. The statistics are computed in float32 (double
 * for float64 X) whatever stash_type says, as for LayerNormalization. Made by
 * the optimizer from the decomposed form too (fuse_rmsnorm,
 * src/passes/fuse_transformer.c). */

static kiln_status rms_infer(const kiln_infer_args *a) {
    const kiln_ln_attrs *at = a->attrs;
    const kiln_tinfo *X = a->in[0], *S = a->in[1];
    KILN_TRY(need_float(a, X->dtype));
    KILN_TRY(need_float(a, S->dtype));
    kiln__tinfo_copy_shape(a->out[0], X);
    a->out[0]->dtype = S->dtype;
    if (X->rank < 0) return KILN_OK;
    int axis;
    KILN_TRY(kiln__norm_axis(NODE(a), at->axis, X->rank, &axis));
    return ln_check_param(a, "scale", S, X, axis);
}

const kiln_op_def kiln_op_RMSNormalization = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "RMSNormalization", .domain = "", .since = 23,
    .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_ln_attrs),
    .import = ln_import, .validate = ln_validate, .infer = rms_infer, .cpu = ln_cpu,
};

/* ---- LRN ------------------------------------------------------------------- */

/* kiln_lrn_attrs: ops/spatial_attrs.h */

static kiln_status lrn_import(kiln_import_ctx *ic, void *attrs) {
    kiln_lrn_attrs *at = attrs;
    at->alpha = kiln_attr_float(ic, "alpha", 1e-4f);
    at->beta = kiln_attr_float(ic, "beta", 0.75f);
    at->bias = kiln_attr_float(ic, "bias", 1.0f);
    return kiln_attr_int32(ic, "size", 0, &at->size);
}

/* size >= 1; alpha, beta, bias any floats */
static kiln_status lrn_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    return kiln__check_attr(op, node, "size", ((const kiln_lrn_attrs *)attrs)->size, 1, INT32_MAX);
}

static kiln_status lrn_infer(const kiln_infer_args *a) {
    const kiln_tinfo *X = a->in[0];
    KILN_TRY(need_float(a, X->dtype));
    kiln__tinfo_copy_shape(a->out[0], X);
    if (X->rank >= 0 && X->rank < 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (LRN): input must have rank >= 2, got %d", NODE(a), X->rank);
    return KILN_OK;
}

static kiln_status lrn_cpu(const kiln_kernel_args *a) {
    const kiln_lrn_attrs *at = a->attrs;
    const kiln_tensor *X = a->in[0];
    kiln_dtype t = X->dtype;
    int64_t N = X->dims[0], C = X->dims[1], plane = kiln__numel(X->rank - 2, X->dims + 2);
    int64_t lo = (at->size - 1) / 2, hi = at->size - 1 - lo; /* floor, ceil of (size-1)/2 */
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < plane; i++) {
                double ss = 0.0;
                int64_t c0 = c - lo < 0 ? 0 : c - lo, c1 = c + hi >= C ? C - 1 : c + hi;
                for (int64_t k = c0; k <= c1; k++) {
                    double v = kiln__load_f64(t, X->data, (n * C + k) * plane + i);
                    ss += v * v;
                }
                double x = kiln__load_f64(t, X->data, (n * C + c) * plane + i);
                double y = x / pow((double)at->bias + (double)at->alpha / at->size * ss, (double)at->beta);
                kiln__store_f64(t, a->out[0]->data, (n * C + c) * plane + i, y);
            }
    return KILN_OK;
}

const kiln_op_def kiln_op_LRN = {
    .name = "LRN", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_lrn_attrs),
    .import = lrn_import, .validate = lrn_validate, .infer = lrn_infer, .cpu = lrn_cpu,
};

/* ---- MeanVarianceNormalization -------------------------------------------- */

/* kiln_mvn_attrs: ops/spatial_attrs.h */

static kiln_status mvn_import(kiln_import_ctx *ic, void *attrs) {
    kiln_mvn_attrs *at = attrs;
    int n = kiln_attr_ints(ic, "axes", at->axes, KILN_MAX_RANK);
    if (n > KILN_MAX_RANK) return KILN_IMPORT_FAIL(ic, "too many axes (%d)", n);
    if (n < 0) {
        at->axes[0] = 0;
        at->axes[1] = 2;
        at->axes[2] = 3;
        n = 3;
    }
    at->n_axes = n;
    return KILN_OK;
}

/* n_axes in 0..8 (the axes themselves are checked against the rank) */
static kiln_status mvn_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    return kiln__check_attr(op, node, "axes (count)", ((const kiln_mvn_attrs *)attrs)->n_axes, 0,
                            KILN_MAX_RANK);
}

static kiln_status mvn_mask(const kiln_mvn_attrs *at, const char *node, int rank, bool *mask) {
    for (int i = 0; i < rank; i++) mask[i] = false;
    for (int i = 0; i < at->n_axes; i++) {
        int ax;
        KILN_TRY(kiln__norm_axis(node, at->axes[i], rank, &ax));
        mask[ax] = true;
    }
    return KILN_OK;
}

static kiln_status mvn_infer(const kiln_infer_args *a) {
    const kiln_tinfo *X = a->in[0];
    KILN_TRY(need_float(a, X->dtype));
    kiln__tinfo_copy_shape(a->out[0], X);
    if (X->rank < 0) return KILN_OK;
    bool mask[KILN_MAX_RANK];
    return mvn_mask(a->attrs, NODE(a), X->rank, mask);
}

static kiln_status mvn_cpu(const kiln_kernel_args *a) {
    const kiln_tensor *X = a->in[0];
    kiln_dtype t = X->dtype;
    bool mask[KILN_MAX_RANK];
    KILN_TRY(mvn_mask(a->attrs, NODE(a), X->rank, mask));
    int64_t total = kiln__tensor_numel(X), groups = 1;
    for (int i = 0; i < X->rank; i++)
        if (!mask[i]) groups *= X->dims[i];
    if (total == 0) return KILN_OK;
    double *acc = kiln__calloc((size_t)(2 * groups), sizeof(double));
    int64_t *gidx = kiln__malloc(sizeof(int64_t) * (size_t)total);
    if (!acc || !gidx) {
        kiln__free(acc);
        kiln__free(gidx);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (MeanVarianceNormalization): out of memory", NODE(a));
    }
    int64_t idx[KILN_MAX_RANK] = {0};
    for (int64_t e = 0; e < total; e++) {
        int64_t g = 0;
        for (int i = 0; i < X->rank; i++)
            if (!mask[i]) g = g * X->dims[i] + idx[i];
        gidx[e] = g;
        for (int i = X->rank - 1; i >= 0; i--) {
            if (++idx[i] < X->dims[i]) break;
            idx[i] = 0;
        }
    }
    double cnt = (double)(total / groups);
    double *mean = acc, *var = acc + groups;
    for (int64_t e = 0; e < total; e++) mean[gidx[e]] += kiln__load_f64(t, X->data, e);
    for (int64_t g = 0; g < groups; g++) mean[g] /= cnt;
    for (int64_t e = 0; e < total; e++) {
        double d = kiln__load_f64(t, X->data, e) - mean[gidx[e]];
        var[gidx[e]] += d * d;
    }
    for (int64_t g = 0; g < groups; g++) var[g] = sqrt(var[g] / cnt) + 1e-9;
    for (int64_t e = 0; e < total; e++)
        kiln__store_f64(t, a->out[0]->data, e, (kiln__load_f64(t, X->data, e) - mean[gidx[e]]) / var[gidx[e]]);
    kiln__free(acc);
    kiln__free(gidx);
    return KILN_OK;
}

const kiln_op_def kiln_op_MeanVarianceNormalization = {
    .name = "MeanVarianceNormalization", .domain = "", .since = 9,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_mvn_attrs),
    .import = mvn_import, .validate = mvn_validate, .infer = mvn_infer, .cpu = mvn_cpu,
};

/* ---- Softmax, LogSoftmax, Hardmax ---------------------------------------- */



static kiln_status sm_import(kiln_import_ctx *ic, void *attrs) {
    kiln_softmax_attrs *at = attrs;
    bool legacy = kiln_import_opset(ic) < 13;
    at->coerce_2d = legacy;
    return kiln_attr_int32(ic, "axis", legacy ? 1 : -1, &at->axis);
}

/* axis in [-8, 7]; coerce_2d (opset < 13) 0 or 1 */
static kiln_status sm_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_softmax_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "axis", at->axis, -KILN_MAX_RANK, KILN_MAX_RANK - 1));
    return kiln__check_attr(op, node, "coerce_2d (opset < 13)", at->coerce_2d, 0, 1);
}

static kiln_status sm_infer(const kiln_infer_args *a) {
    const kiln_softmax_attrs *at = a->attrs;
    const kiln_tinfo *X = a->in[0];
    KILN_TRY(need_float(a, X->dtype));
    kiln__tinfo_copy_shape(a->out[0], X);
    if (X->rank < 0) return KILN_OK;
    int axis;
    if (at->coerce_2d && at->axis == X->rank) return KILN_OK; /* allowed by the old spec */
    return kiln__norm_axis(NODE(a), at->axis, X->rank < 1 ? 1 : X->rank, &axis);
}

/* Vectorizable exp for x <= ~88: Cody-Waite reduction by ln2, degree-7
 * Taylor polynomial on |r| <= ln2/2 (relative error < 2 ulp), 2^n built in
 * the exponent bits. Inputs below -87.3 give 0; NaN gives NaN. */
NN_VEC_MATH static inline float nn_expf(float x) {
    float xc = x < -87.0f ? -87.0f : x;
    xc = xc > 88.0f ? 88.0f : xc;
    float t = xc * 1.44269504088896341f + 12582912.0f; /* round to nearest via 1.5*2^23 */
    float n = t - 12582912.0f;
    int32_t ti;
    memcpy(&ti, &t, sizeof ti);
    /* unsigned: NaN input must not make this signed arithmetic overflow */
    uint32_t e = ((uint32_t)ti - 0x4B400000u + 127u) << 23;
    float scale;
    memcpy(&scale, &e, sizeof scale);
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    float y = p * scale;
    return x < -87.3f ? 0.0f : y;
}

/* One contiguous float32 row. */
NN_VEC_MATH static void sm_row_f32(int kind, const float *restrict x, float *restrict y, int64_t n) {
    if (n <= 0) return;
    float mx[16];
    for (int j = 0; j < 16; j++) mx[j] = x[0];
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) mx[j] = x[i + j] > mx[j] ? x[i + j] : mx[j];
    float m = mx[0];
    for (int j = 1; j < 16; j++) m = mx[j] > m ? mx[j] : m;
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    if (kind == SM_HARDMAX) {
        int64_t k = 0;
        while (k < n && !(x[k] == m)) k++;
        for (int64_t j = 0; j < n; j++) y[j] = 0.0f;
        if (k < n) y[k] = 1.0f;
        return;
    }
    for (int64_t j = 0; j < n; j++) y[j] = nn_expf(x[j] - m);
    double s = sum_f32(y, n);
    if (kind == SM_SOFTMAX) {
        float inv = (float)(1.0 / s);
        for (int64_t j = 0; j < n; j++) y[j] *= inv;
    } else {
        float ls = (float)log(s);
        for (int64_t j = 0; j < n; j++) y[j] = (x[j] - m) - ls;
    }
}

typedef struct sm_ctx {
    int kind;
    const kiln_tensor *X;
    kiln_tensor *Y;
    int64_t n, inner;
} sm_ctx;

/* Rows r = (outer, inner index) pairs. */
static void sm_rows(void *vctx, int64_t r0, int64_t r1) {
    const sm_ctx *c = vctx;
    kiln_dtype t = c->X->dtype;
    int64_t n = c->n, inner = c->inner;
    for (int64_t r = r0; r < r1; r++) {
        if (t == KILN_DTYPE_FLOAT32 && inner == 1) {
            sm_row_f32(c->kind, (const float *)c->X->data + r * n, (float *)c->Y->data + r * n, n);
            continue;
        }
        int64_t o = r / inner, j = r % inner;
        int64_t base = o * n * inner + j;
        double m = -INFINITY;
        int64_t arg = -1;
        for (int64_t k = 0; k < n; k++) {
            double v = kiln__load_f64(t, c->X->data, base + k * inner);
            if (v > m || arg < 0) {
                m = v;
                arg = k;
            }
        }
        if (c->kind == SM_HARDMAX) {
            for (int64_t k = 0; k < n; k++)
                kiln__store_f64(t, c->Y->data, base + k * inner, k == arg ? 1.0 : 0.0);
            continue;
        }
        double s = 0.0;
        for (int64_t k = 0; k < n; k++) s += exp(kiln__load_f64(t, c->X->data, base + k * inner) - m);
        double ls = log(s);
        for (int64_t k = 0; k < n; k++) {
            double v = kiln__load_f64(t, c->X->data, base + k * inner) - m;
            kiln__store_f64(t, c->Y->data, base + k * inner, c->kind == SM_SOFTMAX ? exp(v) / s : v - ls);
        }
    }
}

static kiln_status sm_cpu(const kiln_kernel_args *a) {
    const kiln_softmax_attrs *at = a->attrs;
    const kiln_tensor *X = a->in[0];
    sm_ctx c = {.kind = a->op->code, .X = X, .Y = a->out[0]};
    int64_t outer;
    if (X->rank == 0) {
        outer = 1;
        c.n = 1;
        c.inner = 1;
    } else if (at->coerce_2d) {
        int axis = at->axis;
        if (axis != X->rank) KILN_TRY(kiln__norm_axis(NODE(a), at->axis, X->rank, &axis));
        outer = kiln__numel(axis, X->dims);
        c.n = kiln__numel(X->rank - axis, X->dims + axis);
        c.inner = 1;
    } else {
        int axis;
        KILN_TRY(kiln__norm_axis(NODE(a), at->axis, X->rank, &axis));
        outer = kiln__numel(axis, X->dims);
        c.n = X->dims[axis];
        c.inner = kiln__numel(X->rank - axis - 1, X->dims + axis + 1);
    }
    int64_t rows = outer * c.inner;
    if (rows == 0 || c.n == 0) return KILN_OK;
    kiln__parallel_for(a->pool, rows, (8192 + c.n - 1) / c.n, sm_rows, &c);
    return KILN_OK;
}

const kiln_op_def kiln_op_Softmax = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "Softmax", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .code = SM_SOFTMAX, .attr_size = sizeof(kiln_softmax_attrs),
    .import = sm_import, .validate = sm_validate, .infer = sm_infer, .cpu = sm_cpu,
};

const kiln_op_def kiln_op_LogSoftmax = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "LogSoftmax", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .code = SM_LOGSOFTMAX, .attr_size = sizeof(kiln_softmax_attrs),
    .import = sm_import, .validate = sm_validate, .infer = sm_infer, .cpu = sm_cpu,
};

const kiln_op_def kiln_op_Hardmax = {
    .name = "Hardmax", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .code = SM_HARDMAX, .attr_size = sizeof(kiln_softmax_attrs),
    .import = sm_import, .validate = sm_validate, .infer = sm_infer, .cpu = sm_cpu,
};
