/* nn_conv.c -- convolutions: Conv, ConvTranspose, ConvInteger, QLinearConv.
 *
 * Layout is NC[D]HW, weights [M, C/group, k...] (Conv) or [C, M/group, k...]
 * (ConvTranspose). Any number of spatial dims (1..6).
 *
 * float32 Conv, per image and group:
 *   - pointwise (all kernel dims 1, stride 1, no padding): Y = W * X, one
 *     GEMM straight on the input;
 *   - depthwise (one input channel per group, 1-D/2-D): a direct kernel that
 *     walks output rows, one vectorizable pass per kernel tap;
 *   - otherwise im2col into the workspace, then Y = W * col.
 * Bias is written into Y first and the GEMM accumulates onto it.
 * float32 ConvTranspose: col = W^T * X (GEMM), then col2im adds col into Y.
 * Other dtypes and the integer variants use a direct loop accumulating in
 * double (exact for 8-bit products), with zero points and requantization for
 * ConvInteger and QLinearConv. */
#include "ops/fused_conv.h"
#include "ops/nn_attrs.h"
#include "backends/cpu/kernels/gemm.h"
#include "ops/op.h"
#include "ops/spatial_attrs.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>

#define NODE(a) ((a)->node_name ? (a)->node_name : "?")


/* Serialized verbatim into engines: keep POD and fixed-size. Counts of 0
 * mean "attribute absent" (defaults apply). */

/* ---- import --------------------------------------------------------------- */

static kiln_status conv_import(kiln_import_ctx *ic, void *attrs) {
    kiln_conv_attrs *at = attrs;
    KILN_TRY(kiln__nn_parse_auto_pad(ic, &at->auto_pad));
    KILN_TRY(kiln_attr_int32(ic, "group", 1, &at->group));
    KILN_TRY(kiln__nn_read_ints(ic, "kernel_shape", at->kernel, KILN_NN_MAX_SP, &at->n_kernel));
    KILN_TRY(kiln__nn_read_ints(ic, "pads", at->pads, 2 * KILN_NN_MAX_SP, &at->n_pads));
    KILN_TRY(kiln__nn_read_ints(ic, "strides", at->strides, KILN_NN_MAX_SP, &at->n_strides));
    KILN_TRY(kiln__nn_read_ints(ic, "dilations", at->dilations, KILN_NN_MAX_SP, &at->n_dilations));
    KILN_TRY(kiln__nn_read_ints(ic, "output_padding", at->output_padding, KILN_NN_MAX_SP, &at->n_out_pad));
    KILN_TRY(kiln__nn_read_ints(ic, "output_shape", at->output_shape, KILN_MAX_RANK, &at->n_out_shape));
    return KILN_OK;
}

/* The values, bounded so that the geometry's arithmetic stays in range:
 * group >= 1; strides and dilations in 1..2^31-1; pads, kernel_shape and
 * output_padding in 0..2^31-1; output_shape dims in 0..2^48; every count
 * within its array. Shared with kiln.FusedConv (its embedded conv). */
kiln_status kiln__conv_validate_attrs(const kiln_op_def *op, const kiln_conv_attrs *at,
                                      const char *node) {
    KILN_TRY(kiln__check_attr(op, node, "auto_pad", at->auto_pad, PAD_NOTSET, PAD_VALID));
    KILN_TRY(kiln__check_attr(op, node, "group", at->group, 1, INT32_MAX));
    const struct {
        const char *name;
        int32_t n, cap;
        const int64_t *v;
        int64_t lo, hi;
    } lists[] = {
        {"kernel_shape", at->n_kernel, KILN_NN_MAX_SP, at->kernel, 0, INT32_MAX},
        {"pads", at->n_pads, 2 * KILN_NN_MAX_SP, at->pads, 0, INT32_MAX},
        {"strides", at->n_strides, KILN_NN_MAX_SP, at->strides, 1, INT32_MAX},
        {"dilations", at->n_dilations, KILN_NN_MAX_SP, at->dilations, 1, INT32_MAX},
        {"output_padding", at->n_out_pad, KILN_NN_MAX_SP, at->output_padding, 0, INT32_MAX},
        {"output_shape", at->n_out_shape, KILN_MAX_RANK, at->output_shape, 0,
         KILN_MAX_TENSOR_BYTES},
    };
    for (size_t l = 0; l < sizeof lists / sizeof lists[0]; l++) {
        if (lists[l].n < 0 || lists[l].n > lists[l].cap)
            return KILN_VALIDATE_FAIL(op, node, "attribute '%s' has %d values (at most %d)",
                                      lists[l].name, (int)lists[l].n, (int)lists[l].cap);
        for (int i = 0; i < lists[l].n; i++)
            if (lists[l].v[i] < lists[l].lo || lists[l].v[i] > lists[l].hi)
                return KILN_VALIDATE_FAIL(op, node, "attribute '%s' has the value %lld (allowed: "
                                          "%lld to %lld)",
                                          lists[l].name, (long long)lists[l].v[i],
                                          (long long)lists[l].lo, (long long)lists[l].hi);
    }
    return KILN_OK;
}

static kiln_status conv_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    return kiln__conv_validate_attrs(op, attrs, node);
}

/* ---- geometry ------------------------------------------------------------- */

typedef kiln_conv_geom conv_geom; /* fused_conv.h */

/* Product of the dims, -1 if one is unknown or it overflows (an output
 * that large is refused by kiln__infer before any kernel sees it). */
static int64_t prod(int n, const int64_t *v) { return kiln__numel(n, v); }

/* Resolves pads and output size of one spatial dim of a Conv (or pool, via
 * the shared rule). in < 0: unknown. */
static kiln_status conv_dim(const char *node, const char *op, int auto_pad, int64_t in, int64_t k,
                            int64_t s, int64_t d, int64_t *pb, int64_t *pe, int64_t *out) {
    int64_t dk = (k - 1) * d + 1; /* k, d <= 2^31-1: checked by conv_geom_make */
    if (auto_pad == PAD_VALID) *pb = *pe = 0;
    if (in < 0) {
        *out = KILN_DIM_UNKNOWN;
        return KILN_OK;
    }
    if (auto_pad == PAD_SAME_UPPER || auto_pad == PAD_SAME_LOWER) {
        *out = kiln__nn_same_pads(auto_pad, in, k, s, d, pb, pe);
        return KILN_OK;
    }
    int64_t span = in + *pb + *pe - dk;
    if (span < 0)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (%s): kernel extent %lld is larger than the padded input %lld",
                         node, op, (long long)dk, (long long)(in + *pb + *pe));
    *out = span / s + 1;
    return KILN_OK;
}

/* Builds the geometry from X and W shapes (Conv: W [M, C/G, k...];
 * transposed: W [C, M/G, k...]). Dims may be unknown at build time. */
static kiln_status conv_geom_make(const char *node, const char *op, const kiln_conv_attrs *at,
                                  int xr, const int64_t *xd, int wr, const int64_t *wd,
                                  bool transposed, conv_geom *g) {
    memset(g, 0, sizeof *g);
    if (xr < 3)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): input must have rank >= 3 (N, C, spatial), got %d",
                         node, op, xr);
    if (wr != xr)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): weight rank %d differs from input rank %d",
                         node, op, wr, xr);
    g->ns = xr - 2;
    /* The attribute values are within kiln__conv_validate_attrs's bounds
     * (checked on import and when an engine loads); the arithmetic below
     * that mixes them with dims is checked. */
    if (at->n_out_shape && (at->n_out_shape < g->ns || at->n_out_shape > KILN_MAX_RANK))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): output_shape has %d dims for %d spatial dims",
                         node, op, at->n_out_shape, g->ns);
    g->G = at->group;
    g->N = xd[0];
    g->C = xd[1];
    if (transposed) {
        g->Cg = wd[0] >= 0 ? wd[0] / g->G : -1;
        g->Mg = wd[1];
        g->M = -1;
        if (wd[1] >= 0) KILN_TRY(kiln__dim_mul(node, wd[1], g->G, &g->M));
        if (g->C >= 0 && wd[0] >= 0 && g->C != wd[0])
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (%s): input has %lld channels but weight expects %lld "
                             "(W is [C, M/group, k...])",
                             node, op, (long long)g->C, (long long)wd[0]);
        if (wd[0] >= 0 && wd[0] % g->G != 0)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (%s): %lld input channels are not divisible by group %lld",
                             node, op, (long long)wd[0], (long long)g->G);
    } else {
        g->M = wd[0];
        g->Cg = wd[1];
        g->Mg = wd[0] >= 0 ? wd[0] / g->G : -1;
        int64_t cin = -1;
        if (wd[1] >= 0) KILN_TRY(kiln__dim_mul(node, wd[1], g->G, &cin));
        if (g->C >= 0 && wd[1] >= 0 && g->C != cin)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (%s): input has %lld channels but weight expects %lld "
                             "(W is [M, C/group, k...] = [%lld, %lld, ...], group %lld)",
                             node, op, (long long)g->C, (long long)cin,
                             (long long)wd[0], (long long)wd[1], (long long)g->G);
        if (wd[0] >= 0 && wd[0] % g->G != 0)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (%s): %lld output channels are not divisible by group %lld",
                             node, op, (long long)wd[0], (long long)g->G);
    }
    if (at->n_kernel && at->n_kernel != g->ns)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): kernel_shape has %d dims, input has %d spatial dims",
                         node, op, at->n_kernel, g->ns);
    if ((at->n_strides && at->n_strides != g->ns) || (at->n_dilations && at->n_dilations != g->ns) ||
        (at->n_pads && at->n_pads != 2 * g->ns))
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (%s): strides/dilations/pads lengths (%d/%d/%d) do not match %d "
                         "spatial dims",
                         node, op, at->n_strides, at->n_dilations, at->n_pads, g->ns);
    for (int i = 0; i < g->ns; i++) {
        g->in[i] = xd[2 + i];
        g->k[i] = wd[2 + i];
        if (g->k[i] > INT32_MAX)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): kernel dim %d is %lld (over 2^31-1)",
                             node, op, i, (long long)g->k[i]);
        if (at->n_kernel && g->k[i] >= 0 && at->kernel[i] != g->k[i])
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (%s): kernel_shape[%d] = %lld but the weight has %lld", node,
                             op, i, (long long)at->kernel[i], (long long)g->k[i]);
        g->s[i] = at->n_strides ? at->strides[i] : 1;
        g->d[i] = at->n_dilations ? at->dilations[i] : 1;
        g->pb[i] = at->n_pads ? at->pads[i] : 0;
        g->pe[i] = at->n_pads ? at->pads[g->ns + i] : 0;
        if (g->k[i] < 0) {
            g->out[i] = KILN_DIM_UNKNOWN;
            continue;
        }
        if (!transposed) {
            KILN_TRY(conv_dim(node, op, at->auto_pad, g->in[i], g->k[i], g->s[i], g->d[i], &g->pb[i],
                              &g->pe[i], &g->out[i]));
            continue;
        }
        /* ConvTranspose */
        int64_t dk = (g->k[i] - 1) * g->d[i] + 1;
        int64_t op_ = at->n_out_pad ? at->output_padding[i] : 0;
        if (g->in[i] < 0) {
            g->out[i] = KILN_DIM_UNKNOWN;
            if (at->n_out_shape) g->out[i] = at->output_shape[at->n_out_shape - g->ns + i];
            continue;
        }
        int64_t full; /* s * (in - 1) + output_padding + dk, which can overflow */
        KILN_TRY(kiln__dim_mul(node, g->s[i], g->in[i] - 1, &full));
        KILN_TRY(kiln__dim_add(node, full, op_ + dk, &full));
        if (at->n_out_shape || at->auto_pad == PAD_SAME_UPPER || at->auto_pad == PAD_SAME_LOWER) {
            int64_t o;
            if (at->n_out_shape) {
                if (at->n_out_shape < g->ns)
                    return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): output_shape has %d values for %d spatial dims",
                                     node, op, at->n_out_shape, g->ns);
                o = at->output_shape[at->n_out_shape - g->ns + i];
            } else {
                KILN_TRY(kiln__dim_mul(node, g->in[i], g->s[i], &o));
            }
            int64_t total = full - o;
            if (o < 0)
                return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): output_shape[%d] is negative",
                                 node, op, i);
            if (total < 0) {
                /* output larger than the full result: zeros at the end */
                g->pb[i] = 0;
                g->pe[i] = total;
            } else if (at->auto_pad == PAD_SAME_UPPER) {
                g->pb[i] = total / 2;
                g->pe[i] = total - total / 2;
            } else {
                g->pb[i] = total - total / 2;
                g->pe[i] = total / 2;
            }
            g->out[i] = o;
        } else {
            if (at->auto_pad == PAD_VALID) g->pb[i] = g->pe[i] = 0;
            g->out[i] = full - g->pb[i] - g->pe[i];
            if (g->out[i] < 0)
                return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): pads exceed the output along spatial dim %d",
                                 node, op, i);
        }
    }
    g->in_sz = prod(g->ns, g->in);
    g->out_sz = prod(g->ns, g->out);
    g->k_sz = prod(g->ns, g->k);
    return KILN_OK;
}

static kiln_status check_bias(const char *node, const char *op, const kiln_tinfo *b, int64_t M) {
    if (!b || b->rank < 0) return KILN_OK;
    if (b->rank != 1 || (b->dims[0] >= 0 && M >= 0 && b->dims[0] != M))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): bias must be 1-D of length %lld, got %s",
                         node, op, (long long)M,
                         kiln__shape_str(b->rank, b->dims, (char[64]){0}, 64));
    return KILN_OK;
}

/* Shared infer for the Conv family. xi/wi/bi: input indices of X, W, bias (-1
 * if none); out_dtype: UNDEFINED = X's dtype. */
static kiln_status conv_family_infer(const kiln_infer_args *a, int xi, int wi, int bi,
                                     bool transposed, kiln_dtype out_dtype) {
    const kiln_conv_attrs *at = a->attrs;
    const kiln_tinfo *X = a->in[xi], *W = a->in[wi];
    const kiln_tinfo *B = bi >= 0 && bi < a->n_in ? a->in[bi] : NULL;
    kiln_tinfo *y = a->out[0];
    y->dtype = out_dtype == KILN_DTYPE_UNDEFINED ? X->dtype : out_dtype;
    if (X->rank < 0 || W->rank < 0) {
        y->rank = X->rank >= 0 ? X->rank : W->rank;
        for (int i = 0; i < y->rank; i++) y->dims[i] = KILN_DIM_UNKNOWN;
        if (X->rank >= 1) y->dims[0] = X->dims[0];
        return KILN_OK;
    }
    conv_geom g;
    KILN_TRY(conv_geom_make(NODE(a), a->op->name, at, X->rank, X->dims, W->rank, W->dims,
                            transposed, &g));
    KILN_TRY(check_bias(NODE(a), a->op->name, B, g.M));
    y->rank = X->rank;
    y->dims[0] = g.N;
    y->dims[1] = g.M;
    for (int i = 0; i < g.ns; i++) y->dims[2 + i] = g.out[i];
    return KILN_OK;
}

/* ---- float32 helpers ------------------------------------------------------ */

/* Fills rows of Y (n_rows x len) with bias[row] (or zero). */
static void fill_bias(float *y, const float *bias, int64_t n_rows, int64_t len) {
    for (int64_t r = 0; r < n_rows; r++) {
        float v = bias ? bias[r] : 0.0f;
        float *p = y + r * len;
        for (int64_t i = 0; i < len; i++) p[i] = v;
    }
}

/* Valid output range [lo, hi) of positions o with 0 <= o*s + off < n. */
static void valid_range(int64_t off, int64_t s, int64_t n, int64_t n_out, int64_t *lo,
                        int64_t *hi) {
    int64_t l = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t h = n - 1 - off >= 0 ? (n - 1 - off) / s + 1 : 0;
    if (h > n_out) h = n_out;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}

/* 2-D view of a geometry with 1 or 2 spatial dims (1-D: H = 1). */
typedef struct g2d {
    int64_t H, W, OH, OW, kh, kw, sh, sw, dh, dw, pt, pl;
} g2d;

static bool as_2d(const conv_geom *g, g2d *v) {
    if (g->ns > 2) return false;
    int o = g->ns == 2 ? 1 : 0;
    v->H = g->ns == 2 ? g->in[0] : 1;
    v->OH = g->ns == 2 ? g->out[0] : 1;
    v->kh = g->ns == 2 ? g->k[0] : 1;
    v->sh = g->ns == 2 ? g->s[0] : 1;
    v->dh = g->ns == 2 ? g->d[0] : 1;
    v->pt = g->ns == 2 ? g->pb[0] : 0;
    v->W = g->in[o];
    v->OW = g->out[o];
    v->kw = g->k[o];
    v->sw = g->s[o];
    v->dw = g->d[o];
    v->pl = g->pb[o];
    return true;
}

/* im2col for one group: col[(c*k_sz + kpos), out_pos], rows [r0, r1). */
typedef struct im2col_ctx {
    const conv_geom *g;
    const float *x; /* Cg x in_sz */
    float *col;     /* (Cg*k_sz) x out_sz */
} im2col_ctx;

static void im2col_rows(void *vctx, int64_t r0, int64_t r1) {
    const im2col_ctx *c = vctx;
    const conv_geom *g = c->g;
    g2d v;
    if (as_2d(g, &v)) {
        for (int64_t r = r0; r < r1; r++) {
            int64_t ch = r / g->k_sz, kp = r % g->k_sz;
            int64_t i = kp / v.kw, j = kp % v.kw;
            const float *x = c->x + ch * g->in_sz;
            float *dst = c->col + r * g->out_sz;
            int64_t off = j * v.dw - v.pl, lo, hi;
            valid_range(off, v.sw, v.W, v.OW, &lo, &hi);
            for (int64_t oh = 0; oh < v.OH; oh++) {
                float *d = dst + oh * v.OW;
                int64_t ih = oh * v.sh - v.pt + i * v.dh;
                if (ih < 0 || ih >= v.H) {
                    for (int64_t ow = 0; ow < v.OW; ow++) d[ow] = 0.0f;
                    continue;
                }
                const float *xr = x + ih * v.W;
                for (int64_t ow = 0; ow < lo; ow++) d[ow] = 0.0f;
                if (v.sw == 1)
                    memcpy(d + lo, xr + lo + off, (size_t)(hi - lo) * sizeof(float));
                else
                    for (int64_t ow = lo; ow < hi; ow++) d[ow] = xr[ow * v.sw + off];
                for (int64_t ow = hi; ow < v.OW; ow++) d[ow] = 0.0f;
            }
        }
        return;
    }
    /* N-D: walk output positions with an odometer. */
    int ns = g->ns;
    for (int64_t r = r0; r < r1; r++) {
        int64_t ch = r / g->k_sz, kp = r % g->k_sz;
        int64_t kidx[KILN_NN_MAX_SP], base[KILN_NN_MAX_SP], o[KILN_NN_MAX_SP];
        for (int i = ns - 1; i >= 0; i--) {
            kidx[i] = kp % g->k[i];
            kp /= g->k[i];
            base[i] = kidx[i] * g->d[i] - g->pb[i];
            o[i] = 0;
        }
        const float *x = c->x + ch * g->in_sz;
        float *dst = c->col + r * g->out_sz;
        for (int64_t p = 0; p < g->out_sz; p++) {
            int64_t idx = 0;
            bool ok = true;
            for (int i = 0; i < ns; i++) {
                int64_t q = o[i] * g->s[i] + base[i];
                if (q < 0 || q >= g->in[i]) {
                    ok = false;
                    break;
                }
                idx = idx * g->in[i] + q;
            }
            dst[p] = ok ? x[idx] : 0.0f;
            for (int i = ns - 1; i >= 0; i--) {
                if (++o[i] < g->out[i]) break;
                o[i] = 0;
            }
        }
    }
}

static void im2col(const conv_geom *g, const float *x, float *col, kiln_pool *pool) {
    im2col_ctx c = {g, x, col};
    int64_t rows = g->Cg * g->k_sz;
    int64_t grain = g->out_sz > 0 ? (32768 + g->out_sz - 1) / g->out_sz : rows;
    kiln__parallel_for(pool, rows, grain, im2col_rows, &c);
}

/* Depthwise (Cg == 1), 1-D/2-D: output channels [c0, c1) over all images. */
typedef struct dw_ctx {
    const conv_geom *g;
    g2d v;
    const float *x, *w, *b;
    float *y;
} dw_ctx;

/* One output row of a depthwise conv, kernel row by kernel row, one pass per
 * tap (any kernel size, stride, dilation). */
static void dw_row_generic(const g2d *v, const float *x, const float *w, float *restrict yr,
                           int64_t oh) {
    for (int64_t i = 0; i < v->kh; i++) {
        int64_t ih = oh * v->sh - v->pt + i * v->dh;
        if (ih < 0 || ih >= v->H) continue;
        const float *restrict xr = x + ih * v->W;
        for (int64_t j = 0; j < v->kw; j++) {
            float wv = w[i * v->kw + j];
            int64_t off = j * v->dw - v->pl, lo, hi;
            valid_range(off, v->sw, v->W, v->OW, &lo, &hi);
            if (v->sw == 1) {
                const float *restrict xs = xr + off;
                for (int64_t ow = lo; ow < hi; ow++) yr[ow] += wv * xs[ow];
            } else {
                for (int64_t ow = lo; ow < hi; ow++) yr[ow] += wv * xr[ow * v->sw + off];
            }
        }
    }
}

/* 3x3 kernels (MobileNet): the three taps of a kernel row (or all nine taps
 * when the three input rows exist) are fused into one pass over the
 * interior of the row, where every tap is inside the input; the few edge
 * outputs are done tap by tap. */
static void dw_row_3x3(const g2d *v, const float *x, const float *w, float *restrict yr,
                       int64_t oh) {
    int64_t d = v->dw, off0 = -v->pl, lo, hi, lo2, hi2;
    valid_range(off0, v->sw, v->W, v->OW, &lo, &hi);
    valid_range(off0 + 2 * d, v->sw, v->W, v->OW, &lo2, &hi2);
    if (lo2 > lo) lo = lo2;
    if (hi2 < hi) hi = hi2;
    if (lo > hi) lo = hi;
    const float *rows[3];
    int nrows = 0;
    for (int64_t i = 0; i < 3; i++) {
        int64_t ih = oh * v->sh - v->pt + i * v->dh;
        rows[i] = ih >= 0 && ih < v->H ? x + ih * v->W : NULL;
        nrows += rows[i] != NULL;
    }
    /* edges, tap by tap */
    for (int64_t i = 0; i < 3; i++) {
        if (!rows[i]) continue;
        for (int64_t j = 0; j < 3; j++) {
            float wv = w[i * 3 + j];
            int64_t off = j * d + off0;
            for (int64_t ow = 0; ow < lo; ow++) {
                int64_t iw = ow * v->sw + off;
                if (iw >= 0 && iw < v->W) yr[ow] += wv * rows[i][iw];
            }
            for (int64_t ow = hi; ow < v->OW; ow++) {
                int64_t iw = ow * v->sw + off;
                if (iw >= 0 && iw < v->W) yr[ow] += wv * rows[i][iw];
            }
        }
    }
    if (lo >= hi) return;
    if (nrows == 3) {
        const float *restrict a = rows[0] + off0, *restrict b = rows[1] + off0,
                              *restrict c = rows[2] + off0;
        float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6],
              w7 = w[7], w8 = w[8];
        if (v->sw == 1) {
            for (int64_t ow = lo; ow < hi; ow++)
                yr[ow] += w0 * a[ow] + w1 * a[ow + d] + w2 * a[ow + 2 * d] + w3 * b[ow] +
                          w4 * b[ow + d] + w5 * b[ow + 2 * d] + w6 * c[ow] + w7 * c[ow + d] +
                          w8 * c[ow + 2 * d];
        } else {
            int64_t s = v->sw;
            for (int64_t ow = lo; ow < hi; ow++) {
                int64_t q = ow * s;
                yr[ow] += w0 * a[q] + w1 * a[q + d] + w2 * a[q + 2 * d] + w3 * b[q] +
                          w4 * b[q + d] + w5 * b[q + 2 * d] + w6 * c[q] + w7 * c[q + d] +
                          w8 * c[q + 2 * d];
            }
        }
        return;
    }
    for (int64_t i = 0; i < 3; i++) {
        if (!rows[i]) continue;
        const float *restrict a = rows[i] + off0;
        float w0 = w[i * 3], w1 = w[i * 3 + 1], w2 = w[i * 3 + 2];
        int64_t s = v->sw;
        for (int64_t ow = lo; ow < hi; ow++) {
            int64_t q = ow * s;
            yr[ow] += w0 * a[q] + w1 * a[q + d] + w2 * a[q + 2 * d];
        }
    }
}

static void dw_channels(void *vctx, int64_t c0, int64_t c1) {
    const dw_ctx *c = vctx;
    const conv_geom *g = c->g;
    const g2d *v = &c->v;
    int64_t mult = g->Mg; /* output channels per input channel */
    bool k3 = v->kh == 3 && v->kw == 3;
    for (int64_t nm = c0; nm < c1; nm++) {
        int64_t n = nm / g->M, m = nm % g->M;
        int64_t ci = m / mult;
        const float *x = c->x + (n * g->C + ci) * g->in_sz;
        const float *w = c->w + m * g->k_sz;
        float *y = c->y + nm * g->out_sz;
        float bias = c->b ? c->b[m] : 0.0f;
        for (int64_t oh = 0; oh < v->OH; oh++) {
            float *restrict yr = y + oh * v->OW;
            for (int64_t ow = 0; ow < v->OW; ow++) yr[ow] = bias;
            if (k3) dw_row_3x3(v, x, w, yr, oh);
            else dw_row_generic(v, x, w, yr, oh);
        }
    }
}

static bool is_pointwise(const conv_geom *g) {
    for (int i = 0; i < g->ns; i++)
        if (g->k[i] != 1 || g->s[i] != 1 || g->pb[i] != 0 || g->pe[i] != 0) return false;
    return true;
}

/* Bytes of the im2col buffer; SIZE_MAX when the product overflows (shapes
 * from engine files are not trusted: the planner and the allocator then
 * refuse it with a message). */
static size_t conv_f32_workspace_bytes(const conv_geom *g) {
    if (is_pointwise(g)) return 0;
    if (g->Cg == 1 && g->ns <= 2) return 0;
    int64_t n;
    if (!kiln__mul_ok(g->Cg, g->k_sz, &n) || !kiln__mul_ok(n, g->out_sz, &n) ||
        !kiln__mul_ok(n, (int64_t)sizeof(float), &n) || n < 0 || (uint64_t)n > SIZE_MAX)
        return SIZE_MAX;
    return (size_t)n;
}

static kiln_status conv_f32(const kiln_kernel_args *a, const conv_geom *g, const float *x,
                            const float *w, const float *b, float *y) {
    if (g->Cg == 1 && g->ns <= 2 && !is_pointwise(g)) {
        dw_ctx c = {.g = g, .x = x, .w = w, .b = b, .y = y};
        as_2d(g, &c.v);
        int64_t per = g->out_sz * g->k_sz;
        int64_t grain = per > 0 ? (65536 + per - 1) / per : 1;
        kiln__parallel_for(a->pool, g->N * g->M, grain, dw_channels, &c);
        return KILN_OK;
    }
    bool pw = is_pointwise(g);
    float *col = NULL, *owned = NULL;
    if (!pw) {
        size_t need = conv_f32_workspace_bytes(g);
        if (a->workspace && a->workspace_size >= need) {
            col = a->workspace;
        } else {
            owned = kiln__aligned_alloc(need ? need : 1);
            if (!owned)
                return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (Conv): out of memory for im2col (%zu bytes)",
                                 NODE(a), need);
            col = owned;
        }
    }
    kiln_status st = KILN_OK;
    int64_t kk = g->Cg * g->k_sz;
    for (int64_t n = 0; n < g->N && st == KILN_OK; n++) {
        for (int64_t gi = 0; gi < g->G; gi++) {
            const float *xg = x + (n * g->C + gi * g->Cg) * g->in_sz;
            float *yg = y + (n * g->M + gi * g->Mg) * g->out_sz;
            const float *wg = w + gi * g->Mg * kk;
            if (b) fill_bias(yg, b + gi * g->Mg, g->Mg, g->out_sz);
            const float *bm = xg;
            if (!pw) {
                im2col(g, xg, col, a->pool);
                bm = col;
            }
            st = kiln__sgemm(false, false, g->Mg, g->out_sz, kk, 1.0f, wg, kk, bm, g->out_sz,
                             b ? 1.0f : 0.0f, yg, g->out_sz, a->pool);
            if (st != KILN_OK) break;
        }
    }
    kiln__aligned_free(owned);
    return st;
}

/* ---- generic direct convolution (double accumulation) -------------------- */

typedef struct conv_q {
    /* optional zero points (scalar or per output channel for w) */
    const kiln_tensor *xz, *wz;
} conv_q;

static double q_at(const kiln_tensor *t, int64_t i) {
    if (!t) return 0.0;
    int64_t n = kiln__tensor_numel(t);
    return kiln__load_f64(t->dtype, t->data, n == 1 ? 0 : i);
}

/* emit(a, out_index, value, m) stores one output. value = sum + bias. */
typedef void (*conv_emit_fn)(const kiln_kernel_args *a, int64_t idx, double v, int64_t m);

static void conv_direct(const kiln_kernel_args *a, const conv_geom *g, const kiln_tensor *X,
                        const kiln_tensor *W, const kiln_tensor *B, conv_q q, conv_emit_fn emit) {
    int ns = g->ns;
    double xz = q_at(q.xz, 0);
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t m = 0; m < g->M; m++) {
            int64_t gi = m / g->Mg;
            double wz = q_at(q.wz, m);
            double bias = B ? kiln__load_f64(B->dtype, B->data, m) : 0.0;
            int64_t o[KILN_NN_MAX_SP] = {0};
            for (int64_t p = 0; p < g->out_sz; p++) {
                double acc = 0.0;
                for (int64_t c = 0; c < g->Cg; c++) {
                    int64_t xoff = (n * g->C + gi * g->Cg + c) * g->in_sz;
                    int64_t woff = (m * g->Cg + c) * g->k_sz;
                    int64_t kx[KILN_NN_MAX_SP] = {0};
                    for (int64_t kp = 0; kp < g->k_sz; kp++) {
                        int64_t idx = 0;
                        bool ok = true;
                        for (int i = 0; i < ns; i++) {
                            int64_t qv = o[i] * g->s[i] - g->pb[i] + kx[i] * g->d[i];
                            if (qv < 0 || qv >= g->in[i]) {
                                ok = false;
                                break;
                            }
                            idx = idx * g->in[i] + qv;
                        }
                        if (ok)
                            acc += (kiln__load_f64(X->dtype, X->data, xoff + idx) - xz) *
                                   (kiln__load_f64(W->dtype, W->data, woff + kp) - wz);
                        for (int i = ns - 1; i >= 0; i--) {
                            if (++kx[i] < g->k[i]) break;
                            kx[i] = 0;
                        }
                    }
                }
                emit(a, (n * g->M + m) * g->out_sz + p, acc + bias, m);
                for (int i = ns - 1; i >= 0; i--) {
                    if (++o[i] < g->out[i]) break;
                    o[i] = 0;
                }
            }
        }
}

static void emit_float(const kiln_kernel_args *a, int64_t idx, double v, int64_t m) {
    (void)m;
    kiln__store_f64(a->out[0]->dtype, a->out[0]->data, idx, v);
}

/* ---- Conv ----------------------------------------------------------------- */

static bool conv_float_ok(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT32 || t == KILN_DTYPE_FLOAT64 || t == KILN_DTYPE_FLOAT16 ||
           t == KILN_DTYPE_BFLOAT16;
}

static kiln_status conv_infer(const kiln_infer_args *a) {
    const kiln_tinfo *X = a->in[0], *W = a->in[1];
    const kiln_tinfo *B = a->n_in > 2 ? a->in[2] : NULL;
    if (!conv_float_ok(X->dtype) || W->dtype != X->dtype || (B && B->dtype != X->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtypes %s/%s%s%s are not supported",
                         NODE(a), a->op->name, kiln_dtype_name(X->dtype), kiln_dtype_name(W->dtype),
                         B ? "/" : "", B ? kiln_dtype_name(B->dtype) : "");
    return conv_family_infer(a, 0, 1, 2, false, KILN_DTYPE_UNDEFINED);
}

static size_t conv_workspace(const kiln_infer_args *a) {
    const kiln_tinfo *X = a->in[0], *W = a->in[1];
    if (X->dtype != KILN_DTYPE_FLOAT32 || X->rank < 0 || W->rank < 0) return 0;
    conv_geom g;
    if (conv_geom_make(NODE(a), "Conv", a->attrs, X->rank, X->dims, W->rank, W->dims, false, &g) !=
        KILN_OK)
        return 0;
    if (g.in_sz < 0 || g.out_sz < 0 || g.k_sz < 0 || g.Cg < 0) return 0;
    return conv_f32_workspace_bytes(&g);
}

static kiln_status conv_cpu(const kiln_kernel_args *a) {
    const kiln_tensor *X = a->in[0], *W = a->in[1];
    const kiln_tensor *B = a->n_in > 2 ? a->in[2] : NULL;
    conv_geom g;
    KILN_TRY(conv_geom_make(NODE(a), "Conv", a->attrs, X->rank, X->dims, W->rank, W->dims, false, &g));
    if (kiln__tensor_numel(a->out[0]) == 0) return KILN_OK;
    if (X->dtype == KILN_DTYPE_FLOAT32)
        return conv_f32(a, &g, X->data, W->data, B ? B->data : NULL, a->out[0]->data);
    if (!conv_float_ok(X->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Conv): dtype %s is not supported",
                         NODE(a), kiln_dtype_name(X->dtype));
    conv_direct(a, &g, X, W, B, (conv_q){NULL, NULL}, emit_float);
    return KILN_OK;
}

const kiln_op_def kiln_op_Conv = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "Conv", .domain = "", .since = 1,
    .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_conv_attrs),
    .import = conv_import, .validate = conv_validate, .infer = conv_infer, .workspace = conv_workspace, .cpu = conv_cpu,
};

/* ---- ConvInteger ------------------------------------------------------------ */

static bool is_8bit(kiln_dtype t) { return t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT8; }

static kiln_status convint_infer(const kiln_infer_args *a) {
    const kiln_tinfo *X = a->in[0], *W = a->in[1];
    if (!is_8bit(X->dtype) || !is_8bit(W->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (ConvInteger): inputs must be int8/uint8, got %s and %s",
                         NODE(a), kiln_dtype_name(X->dtype), kiln_dtype_name(W->dtype));
    return conv_family_infer(a, 0, 1, -1, false, KILN_DTYPE_INT32);
}

static void emit_i32(const kiln_kernel_args *a, int64_t idx, double v, int64_t m) {
    (void)m;
    ((int32_t *)a->out[0]->data)[idx] = (int32_t)v;
}

static kiln_status convint_cpu(const kiln_kernel_args *a) {
    const kiln_tensor *X = a->in[0], *W = a->in[1];
    conv_geom g;
    KILN_TRY(conv_geom_make(NODE(a), "ConvInteger", a->attrs, X->rank, X->dims, W->rank, W->dims,
                            false, &g));
    conv_q q = {a->n_in > 2 ? a->in[2] : NULL, a->n_in > 3 ? a->in[3] : NULL};
    conv_direct(a, &g, X, W, NULL, q, emit_i32);
    return KILN_OK;
}

const kiln_op_def kiln_op_ConvInteger = {
    .name = "ConvInteger", .domain = "", .since = 10,
    .min_inputs = 2, .max_inputs = 4, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_conv_attrs),
    .import = conv_import, .validate = conv_validate, .infer = convint_infer, .cpu = convint_cpu,
};

/* ---- QLinearConv ------------------------------------------------------------ */
/* x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B */

static kiln_status qlconv_infer(const kiln_infer_args *a) {
    const kiln_tinfo *X = a->in[0], *W = a->in[3], *yz = a->in[7];
    if (!is_8bit(X->dtype) || !is_8bit(W->dtype) || !is_8bit(yz->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (QLinearConv): x, w, y_zero_point must be int8/uint8, got %s, %s, %s",
                         NODE(a), kiln_dtype_name(X->dtype), kiln_dtype_name(W->dtype),
                         kiln_dtype_name(yz->dtype));
    const kiln_tinfo *sc[3] = {a->in[1], a->in[4], a->in[6]};
    for (int i = 0; i < 3; i++)
        if (sc[i]->dtype != KILN_DTYPE_FLOAT32)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (QLinearConv): scales must be float32, got %s",
                             NODE(a), kiln_dtype_name(sc[i]->dtype));
    const kiln_tinfo *B = a->n_in > 8 ? a->in[8] : NULL;
    if (B && B->dtype != KILN_DTYPE_INT32)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (QLinearConv): bias must be int32, got %s",
                         NODE(a), kiln_dtype_name(B->dtype));
    return conv_family_infer(a, 0, 3, 8, false, yz->dtype);
}

static void emit_qlinear(const kiln_kernel_args *a, int64_t idx, double v, int64_t m) {
    double xs = q_at(a->in[1], 0), ws = q_at(a->in[4], m), ys = q_at(a->in[6], 0);
    double yz = q_at(a->in[7], 0);
    double r = nearbyint(v * (double)(float)(xs * ws / ys)) + yz;
    kiln_dtype t = a->out[0]->dtype;
    double lo = t == KILN_DTYPE_UINT8 ? 0 : -128, hi = t == KILN_DTYPE_UINT8 ? 255 : 127;
    r = r < lo ? lo : r > hi ? hi : r;
    kiln__store_i64(t, a->out[0]->data, idx, (int64_t)r);
}

static kiln_status qlconv_cpu(const kiln_kernel_args *a) {
    const kiln_tensor *X = a->in[0], *W = a->in[3];
    const kiln_tensor *B = a->n_in > 8 ? a->in[8] : NULL;
    conv_geom g;
    KILN_TRY(conv_geom_make(NODE(a), "QLinearConv", a->attrs, X->rank, X->dims, W->rank, W->dims,
                            false, &g));
    conv_q q = {a->in[2], a->in[5]};
    conv_direct(a, &g, X, W, B, q, emit_qlinear);
    return KILN_OK;
}

const kiln_op_def kiln_op_QLinearConv = {
    .name = "QLinearConv", .domain = "", .since = 10,
    .min_inputs = 8, .max_inputs = 9, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_conv_attrs),
    .import = conv_import, .validate = conv_validate, .infer = qlconv_infer, .cpu = qlconv_cpu,
};

/* ---- ConvTranspose ---------------------------------------------------------- */

static kiln_status convt_infer(const kiln_infer_args *a) {
    const kiln_tinfo *X = a->in[0], *W = a->in[1];
    const kiln_tinfo *B = a->n_in > 2 ? a->in[2] : NULL;
    if (!conv_float_ok(X->dtype) || W->dtype != X->dtype || (B && B->dtype != X->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (ConvTranspose): dtypes %s/%s are not supported",
                         NODE(a), kiln_dtype_name(X->dtype), kiln_dtype_name(W->dtype));
    return conv_family_infer(a, 0, 1, 2, true, KILN_DTYPE_UNDEFINED);
}

static size_t convt_workspace(const kiln_infer_args *a) {
    const kiln_tinfo *X = a->in[0], *W = a->in[1];
    if (X->dtype != KILN_DTYPE_FLOAT32 || X->rank < 0 || W->rank < 0) return 0;
    conv_geom g;
    if (conv_geom_make(NODE(a), "ConvTranspose", a->attrs, X->rank, X->dims, W->rank, W->dims, true,
                       &g) != KILN_OK)
        return 0;
    if (g.in_sz < 0 || g.k_sz < 0 || g.Mg < 0) return 0;
    return kiln__size_mul(kiln__size_mul(kiln__size_mul((size_t)g.Mg, (size_t)g.k_sz), (size_t)g.in_sz),
                          sizeof(float));
}

/* y (Mg x out_sz) += col2im(col (Mg*k_sz x in_sz)). */
static void col2im(const conv_geom *g, const float *col, float *y) {
    g2d v;
    if (as_2d(g, &v)) {
        /* In the transposed view, the conv "input" is the output y. */
        for (int64_t m = 0; m < g->Mg; m++)
            for (int64_t i = 0; i < v.kh; i++)
                for (int64_t j = 0; j < v.kw; j++) {
                    const float *cr = col + ((m * v.kh + i) * v.kw + j) * g->in_sz;
                    float *ym = y + m * g->out_sz;
                    int64_t off = j * v.dw - v.pl, lo, hi;
                    /* positions ih of x with 0 <= iw*sw + off < OW */
                    valid_range(off, v.sw, v.OW, v.W, &lo, &hi);
                    for (int64_t ih = 0; ih < v.H; ih++) {
                        int64_t oh = ih * v.sh - v.pt + i * v.dh;
                        if (oh < 0 || oh >= v.OH) continue;
                        float *yr = ym + oh * v.OW;
                        const float *c = cr + ih * v.W;
                        for (int64_t iw = lo; iw < hi; iw++) yr[iw * v.sw + off] += c[iw];
                    }
                }
        return;
    }
    int ns = g->ns;
    for (int64_t r = 0; r < g->Mg * g->k_sz; r++) {
        int64_t m = r / g->k_sz, kp = r % g->k_sz;
        int64_t base[KILN_NN_MAX_SP], p[KILN_NN_MAX_SP];
        for (int i = ns - 1; i >= 0; i--) {
            base[i] = (kp % g->k[i]) * g->d[i] - g->pb[i];
            kp /= g->k[i];
            p[i] = 0;
        }
        const float *cr = col + r * g->in_sz;
        float *ym = y + m * g->out_sz;
        for (int64_t q = 0; q < g->in_sz; q++) {
            int64_t idx = 0;
            bool ok = true;
            for (int i = 0; i < ns; i++) {
                int64_t o = p[i] * g->s[i] + base[i];
                if (o < 0 || o >= g->out[i]) {
                    ok = false;
                    break;
                }
                idx = idx * g->out[i] + o;
            }
            if (ok) ym[idx] += cr[q];
            for (int i = ns - 1; i >= 0; i--) {
                if (++p[i] < g->in[i]) break;
                p[i] = 0;
            }
        }
    }
}

static kiln_status convt_f32(const kiln_kernel_args *a, const conv_geom *g, const float *x,
                             const float *w, const float *b, float *y) {
    size_t need = (size_t)(g->Mg * g->k_sz * g->in_sz) * sizeof(float);
    float *col, *owned = NULL;
    if (a->workspace && a->workspace_size >= need) {
        col = a->workspace;
    } else {
        owned = kiln__aligned_alloc(need ? need : 1);
        if (!owned)
            return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (ConvTranspose): out of memory (%zu bytes)",
                             NODE(a), need);
        col = owned;
    }
    kiln_status st = KILN_OK;
    int64_t rows = g->Mg * g->k_sz;
    for (int64_t n = 0; n < g->N && st == KILN_OK; n++)
        for (int64_t gi = 0; gi < g->G; gi++) {
            const float *xg = x + (n * g->C + gi * g->Cg) * g->in_sz;
            const float *wg = w + gi * g->Cg * rows;
            float *yg = y + (n * g->M + gi * g->Mg) * g->out_sz;
            fill_bias(yg, b ? b + gi * g->Mg : NULL, g->Mg, g->out_sz);
            st = kiln__sgemm(true, false, rows, g->in_sz, g->Cg, 1.0f, wg, rows, xg, g->in_sz, 0.0f,
                             col, g->in_sz, a->pool);
            if (st != KILN_OK) break;
            col2im(g, col, yg);
        }
    kiln__aligned_free(owned);
    return st;
}

static kiln_status convt_direct(const char *node, const conv_geom *g, const kiln_tensor *X,
                                const kiln_tensor *W, const kiln_tensor *B, kiln_tensor *Y) {
    kiln_dtype t = Y->dtype;
    int64_t total = g->N * g->M * g->out_sz;
    double *acc = kiln__calloc((size_t)(total > 0 ? total : 1), sizeof(double));
    if (!acc) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (ConvTranspose): out of memory", node);
    int ns = g->ns;
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t c = 0; c < g->C; c++) {
            int64_t gi = c / g->Cg;
            int64_t p[KILN_NN_MAX_SP] = {0};
            for (int64_t q = 0; q < g->in_sz; q++) {
                double xv = kiln__load_f64(t, X->data, (n * g->C + c) * g->in_sz + q);
                for (int64_t mm = 0; mm < g->Mg; mm++) {
                    int64_t m = gi * g->Mg + mm;
                    int64_t kx[KILN_NN_MAX_SP] = {0};
                    for (int64_t kp = 0; kp < g->k_sz; kp++) {
                        int64_t idx = 0;
                        bool ok = true;
                        for (int i = 0; i < ns; i++) {
                            int64_t o = p[i] * g->s[i] - g->pb[i] + kx[i] * g->d[i];
                            if (o < 0 || o >= g->out[i]) {
                                ok = false;
                                break;
                            }
                            idx = idx * g->out[i] + o;
                        }
                        if (ok)
                            acc[(n * g->M + m) * g->out_sz + idx] +=
                                xv * kiln__load_f64(t, W->data, (c * g->Mg + mm) * g->k_sz + kp);
                        for (int i = ns - 1; i >= 0; i--) {
                            if (++kx[i] < g->k[i]) break;
                            kx[i] = 0;
                        }
                    }
                }
                for (int i = ns - 1; i >= 0; i--) {
                    if (++p[i] < g->in[i]) break;
                    p[i] = 0;
                }
            }
        }
    for (int64_t i = 0; i < total; i++) {
        int64_t m = (i / g->out_sz) % g->M;
        double bias = B ? kiln__load_f64(t, B->data, m) : 0.0;
        kiln__store_f64(t, Y->data, i, acc[i] + bias);
    }
    kiln__free(acc);
    return KILN_OK;
}

static kiln_status convt_cpu(const kiln_kernel_args *a) {
    const kiln_tensor *X = a->in[0], *W = a->in[1];
    const kiln_tensor *B = a->n_in > 2 ? a->in[2] : NULL;
    conv_geom g;
    KILN_TRY(conv_geom_make(NODE(a), "ConvTranspose", a->attrs, X->rank, X->dims, W->rank, W->dims,
                            true, &g));
    if (kiln__tensor_numel(a->out[0]) == 0) return KILN_OK;
    if (X->dtype == KILN_DTYPE_FLOAT32)
        return convt_f32(a, &g, X->data, W->data, B ? B->data : NULL, a->out[0]->data);
    if (!conv_float_ok(X->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (ConvTranspose): dtype %s is not supported",
                         NODE(a), kiln_dtype_name(X->dtype));
    return convt_direct(NODE(a), &g, X, W, B, a->out[0]);
}

const kiln_op_def kiln_op_ConvTranspose = {
    .name = "ConvTranspose", .domain = "", .since = 1,
    .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_conv_attrs),
    .import = conv_import, .validate = conv_validate, .infer = convt_infer, .workspace = convt_workspace, .cpu = convt_cpu,
};

/* ---- shared with kiln.FusedConv (fused_conv.h) ------------------------------ */

kiln_status kiln__conv_geom(const char *node, const char *op, const kiln_conv_attrs *at, int xr,
                            const int64_t *xd, int wr, const int64_t *wd, kiln_conv_geom *g) {
    return conv_geom_make(node, op, at, xr, xd, wr, wd, false, g);
}
kiln_status kiln__conv_infer(const kiln_infer_args *a) { return conv_infer(a); }
size_t kiln__conv_workspace(const kiln_infer_args *a) { return conv_workspace(a); }
kiln_status kiln__conv_cpu(const kiln_kernel_args *a) { return conv_cpu(a); }
/* ConvTranspose's geometry (spatial_attrs.h): for the CUDA backend */
kiln_status kiln__convt_geom(const char *node, const kiln_conv_attrs *at, int xr, const int64_t *xd,
                             int wr, const int64_t *wd, kiln_conv_geom *g) {
    return conv_geom_make(node, "ConvTranspose", at, xr, xd, wr, wd, true, g);
}
