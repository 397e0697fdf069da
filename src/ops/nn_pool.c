/* nn_pool.c -- pooling: MaxPool, AveragePool, LpPool, GlobalAveragePool,
 * GlobalMaxPool, GlobalLpPool, MaxUnpool.
 *
 * Windows are resolved per output position and clipped to the input, so
 * padding never reads memory. Planes (n, c) are spread over the pool.
 * float32 1-D/2-D windows have a direct path; everything else (3-D, other
 * dtypes) walks the window with an odometer and accumulates in double.
 *
 * Output size (NOTSET): floor or ceil((in + pads - dilated_kernel) / stride) + 1;
 * with ceil_mode the last window must start inside the input or its leading
 * padding (PyTorch's rule). SAME_*: ceil(in / stride). VALID: no padding. */
#include "ops/nn_attrs.h"
#include "ops/spatial_attrs.h"
#include "ops/op.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

#define NODE(a) ((a)->node_name ? (a)->node_name : "?")

/* MaxPool, GlobalMaxPool and MaxRoiPool keep NaN (kiln__max_keep_nan). */
/* The same for the index-tracking loops: take v (its index) when it is
 * larger, the first, or the first NaN. */
#define TAKE_MAX(v, best, first) ((v) > (best) || (first) || ((v) != (v) && (best) == (best)))



/* ---- import --------------------------------------------------------------- */

static float read_p(kiln_import_ctx *ic) {
    /* LpPool-1 / GlobalLpPool-1 have a float `p`; later versions an int. */
    if (kiln_import_opset(ic) < 2) return kiln_attr_float(ic, "p", 2.0f);
    return (float)kiln_attr_int(ic, "p", 2);
}

static kiln_status pool_import(kiln_import_ctx *ic, void *attrs) {
    kiln_pool_attrs *at = attrs;
    KILN_TRY(kiln__nn_parse_auto_pad(ic, &at->auto_pad));
    at->ceil_mode = kiln_attr_int(ic, "ceil_mode", 0) != 0;
    at->count_include_pad = kiln_attr_int(ic, "count_include_pad", 0) != 0;
    at->storage_order = kiln_attr_int(ic, "storage_order", 0) != 0;
    at->p = read_p(ic);
    KILN_TRY(kiln__nn_read_ints(ic, "kernel_shape", at->kernel, KILN_NN_MAX_SP, &at->n_kernel));
    KILN_TRY(kiln__nn_read_ints(ic, "pads", at->pads, 2 * KILN_NN_MAX_SP, &at->n_pads));
    KILN_TRY(kiln__nn_read_ints(ic, "strides", at->strides, KILN_NN_MAX_SP, &at->n_strides));
    KILN_TRY(kiln__nn_read_ints(ic, "dilations", at->dilations, KILN_NN_MAX_SP, &at->n_dilations));
    return KILN_OK;
}

/* The windowed pools and MaxUnpool: the flags 0 or 1, a layout kiln knows,
 * kernel_shape required; kernel, strides, dilations in 1..2^31-1 and pads
 * in 0..2^31-1 (bounds that keep the geometry's arithmetic in range);
 * every count within its array. */
static kiln_status pool_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_pool_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "auto_pad", at->auto_pad, PAD_NOTSET, PAD_VALID));
    KILN_TRY(kiln__check_attr(op, node, "ceil_mode", at->ceil_mode, 0, 1));
    KILN_TRY(kiln__check_attr(op, node, "count_include_pad", at->count_include_pad, 0, 1));
    KILN_TRY(kiln__check_attr(op, node, "storage_order", at->storage_order, 0, 1));
    /* (MaxPool NHWC or nChw16c: the CPU's chains and CUDA's; AveragePool NHWC: CUDA's) */
    KILN_TRY(kiln__check_attr(op, node, "layout", at->layout, 0,
                              !strcmp(op->name, "MaxPool")       ? KILN_POOL_LAYOUT_C16
                              : !strcmp(op->name, "AveragePool") ? KILN_POOL_LAYOUT_NHWC
                                                                 : 0));
    if (at->n_kernel == 0) return KILN_VALIDATE_FAIL(op, node, "attribute 'kernel_shape' is required");
    const struct {
        const char *name;
        int32_t n, cap;
        const int64_t *v;
        int64_t lo;
    } lists[] = {
        {"kernel_shape", at->n_kernel, KILN_NN_MAX_SP, at->kernel, 1},
        {"pads", at->n_pads, 2 * KILN_NN_MAX_SP, at->pads, 0},
        {"strides", at->n_strides, KILN_NN_MAX_SP, at->strides, 1},
        {"dilations", at->n_dilations, KILN_NN_MAX_SP, at->dilations, 1},
    };
    for (size_t l = 0; l < sizeof lists / sizeof lists[0]; l++) {
        if (lists[l].n < 0 || lists[l].n > lists[l].cap)
            return KILN_VALIDATE_FAIL(op, node, "attribute '%s' has %d values (at most %d)",
                                      lists[l].name, (int)lists[l].n, (int)lists[l].cap);
        for (int i = 0; i < lists[l].n; i++)
            if (lists[l].v[i] < lists[l].lo || lists[l].v[i] > INT32_MAX)
                return KILN_VALIDATE_FAIL(op, node, "attribute '%s' has the value %lld (allowed: "
                                          "%lld to 2^31-1)",
                                          lists[l].name, (long long)lists[l].v[i],
                                          (long long)lists[l].lo);
    }
    return KILN_OK;
}

/* The global pools: only `layout` (GlobalAveragePool reading an NHWC or
 * nChw16c tensor) and GlobalLpPool's p are used. */
static kiln_status global_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_pool_attrs *at = attrs;
    if (at->layout != 0 && (op->code != POOL_AVG || (at->layout != KILN_POOL_LAYOUT_NHWC &&
                                                     at->layout != KILN_POOL_LAYOUT_C16)))
        return KILN_VALIDATE_FAIL(op, node, "unknown layout %d", (int)at->layout);
    return KILN_OK;
}

static kiln_status global_import(kiln_import_ctx *ic, void *attrs) {
    kiln_pool_attrs *at = attrs;
    at->p = read_p(ic);
    return KILN_OK;
}

/* ---- geometry ------------------------------------------------------------- */

typedef kiln_pool_geom pool_geom; /* ops/spatial_attrs.h */

static kiln_status pool_geom_make(const char *node, const char *op, const kiln_pool_attrs *at,
                                  int rank, const int64_t *dims, pool_geom *g) {
    memset(g, 0, sizeof *g);
    if (rank < 3)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): input must have rank >= 3 (N, C, spatial), got %d",
                         node, op, rank);
    g->ns = rank - 2;
    if (at->n_kernel != g->ns)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): kernel_shape has %d dims, input has %d spatial dims",
                         node, op, at->n_kernel, g->ns);
    if ((at->n_strides && at->n_strides != g->ns) || (at->n_dilations && at->n_dilations != g->ns) ||
        (at->n_pads && at->n_pads != 2 * g->ns))
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (%s): strides/dilations/pads lengths (%d/%d/%d) do not match %d "
                         "spatial dims",
                         node, op, at->n_strides, at->n_dilations, at->n_pads, g->ns);
    g->N = dims[0];
    g->C = dims[1];
    g->in_sz = g->out_sz = 1;
    for (int i = 0; i < g->ns; i++) {
        int64_t in = dims[2 + i], k = at->kernel[i];
        int64_t s = at->n_strides ? at->strides[i] : 1;
        int64_t d = at->n_dilations ? at->dilations[i] : 1;
        int64_t pb = at->n_pads ? at->pads[i] : 0, pe = at->n_pads ? at->pads[g->ns + i] : 0;
        /* k, s, d, pb, pe within pool_validate's bounds (checked on import
         * and when an engine loads): the arithmetic below stays in range */
        int64_t dk = (k - 1) * d + 1, out;
        if (at->auto_pad == PAD_VALID) pb = pe = 0;
        if (in < 0) {
            out = KILN_DIM_UNKNOWN;
        } else if (at->auto_pad == PAD_SAME_UPPER || at->auto_pad == PAD_SAME_LOWER) {
            out = kiln__nn_same_pads(at->auto_pad, in, k, s, d, &pb, &pe);
        } else {
            int64_t span = in + pb + pe - dk;
            if (span < 0)
                return KILN_FAIL(KILN_ERR_MODEL,
                                 "node '%s' (%s): kernel extent %lld is larger than the padded "
                                 "input %lld along spatial dim %d",
                                 node, op, (long long)dk, (long long)(in + pb + pe), i);
            if (at->ceil_mode && at->auto_pad == PAD_NOTSET) {
                out = (span + s - 1) / s + 1;
                if ((out - 1) * s >= in + pb) out--;
            } else {
                out = span / s + 1;
            }
        }
        g->in[i] = in;
        g->out[i] = out;
        g->k[i] = k;
        g->s[i] = s;
        g->d[i] = d;
        g->pb[i] = pb;
        g->pe[i] = pe;
        /* -1: unknown, or too large (kiln__infer refuses such an output) */
        if (in < 0 || g->in_sz < 0 || !kiln__mul_ok(g->in_sz, in, &g->in_sz)) g->in_sz = -1;
        if (out < 0 || g->out_sz < 0 || !kiln__mul_ok(g->out_sz, out, &g->out_sz)) g->out_sz = -1;
    }
    return KILN_OK;
}

static bool pool_dtype_ok(kiln_dtype t, int kind) {
    if (t == KILN_DTYPE_FLOAT32 || t == KILN_DTYPE_FLOAT64 || t == KILN_DTYPE_FLOAT16 ||
        t == KILN_DTYPE_BFLOAT16)
        return true;
    return kind == POOL_MAX && (t == KILN_DTYPE_INT8 || t == KILN_DTYPE_UINT8);
}

static kiln_status pool_infer(const kiln_infer_args *a) {
    const kiln_pool_attrs *at = a->attrs;
    const kiln_tinfo *X = a->in[0];
    kiln_tinfo *y = a->out[0];
    int kind = a->op->code;
    y->dtype = X->dtype;
    if (!pool_dtype_ok(X->dtype, kind))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s is not supported", NODE(a),
                         a->op->name, kiln_dtype_name(X->dtype));
    kiln_tinfo *ind = a->n_out > 1 ? a->out[1] : NULL;
    if (ind) ind->dtype = KILN_DTYPE_INT64;
    if (X->rank < 0) {
        y->rank = -1;
        if (ind) ind->rank = -1;
        return KILN_OK;
    }
    pool_geom g;
    KILN_TRY(pool_geom_make(NODE(a), a->op->name, at, X->rank, X->dims, &g));
    y->rank = X->rank;
    y->dims[0] = X->dims[0];
    y->dims[1] = X->dims[1];
    for (int i = 0; i < g.ns; i++) y->dims[2 + i] = g.out[i];
    if (ind) kiln__tinfo_copy_shape(ind, y), ind->dtype = KILN_DTYPE_INT64;
    return KILN_OK;
}

/* ---- kernels -------------------------------------------------------------- */

typedef struct pool_ctx {
    const pool_geom *g;
    const kiln_pool_attrs *at;
    int kind;
    const kiln_tensor *X;
    kiln_tensor *Y;
    int64_t *ind; /* MaxPool indices or NULL */
    int64_t cm_stride[KILN_NN_MAX_SP]; /* column-major spatial strides (storage_order 1) */
} pool_ctx;

/* The taps [*a, *b) of a window starting at s, k taps d apart (d >= 1),
 * that land in [lo, hi): the loops below visit only these, so the work of
 * a window is bounded by the input (or padded input) it covers, not by its
 * kernel size (a hostile engine's kernel of 2^20 over a padded input of a
 * few values took minutes of tap-by-tap bounds checks). */
void kiln__pool_taps(int64_t s, int64_t k, int64_t d, int64_t lo, int64_t hi, int64_t *a, int64_t *b) {
    int64_t first = s < lo ? (lo - s + d - 1) / d : 0, end = k;
    if (hi <= s) {
        end = 0;
    } else {
        int64_t m = (hi - 1 - s) / d + 1;
        if (m < end) end = m;
    }
    if (first > end) first = end;
    *a = first;
    *b = end;
}

/* Max of one output position over its in-bounds taps, taps in row-major
 * order, the first one taken as the start (NaN-compatible with the
 * general loop below). */
static float max_at(const float *x, int64_t H, int64_t W, int64_t hs, int64_t ws, int64_t kh,
                    int64_t kw, int64_t dh, int64_t dw) {
    float best = -INFINITY;
    bool any = false;
    int64_t i0, i1, j0, j1;
    kiln__pool_taps(hs, kh, dh, 0, H, &i0, &i1);
    kiln__pool_taps(ws, kw, dw, 0, W, &j0, &j1);
    for (int64_t i = i0; i < i1; i++) {
        int64_t ih = hs + i * dh;
        for (int64_t j = j0; j < j1; j++) {
            int64_t iw = ws + j * dw;
            float v = x[ih * W + iw];
            if (TAKE_MAX(v, best, !any)) best = v;
            any = true;
        }
    }
    return best;
}

/* float32 MaxPool without indices, one output row at a time: the columns
 * whose window lies inside the row are done tap by tap over the whole
 * range (vectorizable); the few edge columns one by one. */
static void max_plane_rows(const pool_ctx *c, int64_t pl, int64_t H, int64_t W, int64_t OH,
                           int64_t OW, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh,
                           int64_t dw, int64_t pt, int64_t pl_) {
    const pool_geom *g = c->g;
    const float *x = (const float *)c->X->data + pl * g->in_sz;
    float *y = (float *)c->Y->data + pl * g->out_sz;
    /* interior columns: 0 <= ow*sw - pl_ and ow*sw - pl_ + (kw-1)*dw < W */
    int64_t lo = (pl_ + sw - 1) / sw, hi = W - 1 - (kw - 1) * dw + pl_;
    hi = hi >= 0 ? hi / sw + 1 : 0;
    if (hi > OW) hi = OW;
    if (lo > hi) lo = hi;
    for (int64_t oh = 0; oh < OH; oh++) {
        int64_t hs = oh * sh - pt;
        float *restrict yr = y + oh * OW;
        for (int64_t ow = 0; ow < lo; ow++) yr[ow] = max_at(x, H, W, hs, ow * sw - pl_, kh, kw, dh, dw);
        for (int64_t ow = hi; ow < OW; ow++) yr[ow] = max_at(x, H, W, hs, ow * sw - pl_, kh, kw, dh, dw);
        bool first = true;
        int64_t i0, i1;
        kiln__pool_taps(hs, kh, dh, 0, H, &i0, &i1);
        for (int64_t i = i0; i < i1 && lo < hi; i++) {
            int64_t ih = hs + i * dh;
            for (int64_t j = 0; j < kw; j++) {
                const float *restrict xs = x + ih * W + j * dw - pl_;
                if (first) {
                    for (int64_t ow = lo; ow < hi; ow++) yr[ow] = xs[ow * sw];
                    first = false;
                } else if (sw == 1) {
                    for (int64_t ow = lo; ow < hi; ow++) yr[ow] = kiln__max_keep_nan(yr[ow], xs[ow]);
                } else {
                    for (int64_t ow = lo; ow < hi; ow++) {
                        yr[ow] = kiln__max_keep_nan(yr[ow], xs[ow * sw]);
                    }
                }
            }
        }
        if (first)
            for (int64_t ow = lo; ow < hi; ow++) yr[ow] = -INFINITY; /* no row in bounds */
    }
}

/* float32, 1-D/2-D windows. */
static void pool_plane_f32_2d(const pool_ctx *c, int64_t pl) {
    const pool_geom *g = c->g;
    bool two = g->ns == 2;
    int64_t H = two ? g->in[0] : 1, W = g->in[two ? 1 : 0];
    int64_t OH = two ? g->out[0] : 1, OW = g->out[two ? 1 : 0];
    int64_t kh = two ? g->k[0] : 1, kw = g->k[two ? 1 : 0];
    int64_t sh = two ? g->s[0] : 1, sw = g->s[two ? 1 : 0];
    int64_t dh = two ? g->d[0] : 1, dw = g->d[two ? 1 : 0];
    int64_t pt = two ? g->pb[0] : 0, pl_ = g->pb[two ? 1 : 0];
    int64_t pbh = two ? g->pe[0] : 0, pbw = g->pe[two ? 1 : 0];
    if (c->kind == POOL_MAX && !c->ind) {
        max_plane_rows(c, pl, H, W, OH, OW, kh, kw, sh, sw, dh, dw, pt, pl_);
        return;
    }
    const float *x = (const float *)c->X->data + pl * g->in_sz;
    float *y = (float *)c->Y->data + pl * g->out_sz;
    int64_t *ind = c->ind ? c->ind + pl * g->out_sz : NULL;
    for (int64_t oh = 0; oh < OH; oh++) {
        int64_t hs = oh * sh - pt;
        for (int64_t ow = 0; ow < OW; ow++) {
            int64_t ws = ow * sw - pl_;
            if (c->kind == POOL_MAX) {
                float best = -INFINITY;
                int64_t bi = -1, i0, i1, j0, j1;
                kiln__pool_taps(hs, kh, dh, 0, H, &i0, &i1);
                kiln__pool_taps(ws, kw, dw, 0, W, &j0, &j1);
                for (int64_t i = i0; i < i1; i++) {
                    int64_t ih = hs + i * dh;
                    const float *xr = x + ih * W;
                    for (int64_t j = j0; j < j1; j++) {
                        int64_t iw = ws + j * dw;
                        if (TAKE_MAX(xr[iw], best, bi < 0)) {
                            best = xr[iw];
                            bi = ih * W + iw;
                        }
                    }
                }
                y[oh * OW + ow] = best;
                if (ind) {
                    int64_t ih = bi / W, iw = bi % W;
                    int64_t v = c->at->storage_order ? (two ? ih + iw * H : iw) : bi;
                    ind[oh * OW + ow] = pl * g->in_sz + v;
                }
                continue;
            }
            /* the in-bounds taps, and (count_include_pad) how many of the
             * window's taps lie in the padded input: a rectangle holding them */
            double acc = 0.0;
            int64_t i0, i1, j0, j1, p0, p1, q0, q1;
            kiln__pool_taps(hs, kh, dh, 0, H, &i0, &i1);
            kiln__pool_taps(ws, kw, dw, 0, W, &j0, &j1);
            kiln__pool_taps(hs, kh, dh, -pt, H + pbh, &p0, &p1);
            kiln__pool_taps(ws, kw, dw, -pl_, W + pbw, &q0, &q1);
            int64_t n_valid = (i1 - i0) * (j1 - j0), n_pad = (p1 - p0) * (q1 - q0) - n_valid;
            for (int64_t i = i0; i < i1; i++) {
                const float *xr = x + (hs + i * dh) * W;
                for (int64_t j = j0; j < j1; j++) {
                    float v = xr[ws + j * dw];
                    if (c->kind == POOL_AVG) acc += v;
                    else acc += pow(fabs((double)v), (double)c->at->p);
                }
            }
            double r;
            if (c->kind == POOL_AVG) r = acc / (double)(c->at->count_include_pad ? n_valid + n_pad : n_valid);
            else r = pow(acc, 1.0 / (double)c->at->p);
            y[oh * OW + ow] = (float)r;
        }
    }
}

/* Any rank, any dtype (through double). */
static void pool_plane_generic(const pool_ctx *c, int64_t pl) {
    const pool_geom *g = c->g;
    int ns = g->ns;
    kiln_dtype t = c->X->dtype;
    int64_t o[KILN_NN_MAX_SP] = {0};
    for (int64_t p = 0; p < g->out_sz; p++) {
        /* per dim, the in-bounds taps [ka, kb) and the padded input's
         * (count_include_pad: a box holding the in-bounds one) */
        int64_t ka[KILN_NN_MAX_SP], kb[KILN_NN_MAX_SP], kx[KILN_NN_MAX_SP];
        int64_t n_valid = 1, n_box = 1;
        for (int i = 0; i < ns; i++) {
            int64_t st = o[i] * g->s[i] - g->pb[i], pa, pb;
            kiln__pool_taps(st, g->k[i], g->d[i], 0, g->in[i], &ka[i], &kb[i]);
            kiln__pool_taps(st, g->k[i], g->d[i], -g->pb[i], g->in[i] + g->pe[i], &pa, &pb);
            n_valid *= kb[i] - ka[i];
            n_box *= pb - pa;
            kx[i] = ka[i];
        }
        int64_t n_pad = n_box - n_valid;
        double best = -INFINITY, acc = 0.0;
        int64_t bi = -1;
        for (int64_t kp = 0; kp < n_valid; kp++) {
            int64_t idx = 0, cm = 0;
            for (int i = 0; i < ns; i++) {
                int64_t q = o[i] * g->s[i] - g->pb[i] + kx[i] * g->d[i];
                idx = idx * g->in[i] + q;
                cm += q * c->cm_stride[i];
            }
            double v = kiln__load_f64(t, c->X->data, pl * g->in_sz + idx);
            if (c->kind == POOL_MAX) {
                if (TAKE_MAX(v, best, bi < 0)) {
                    best = v;
                    bi = c->at->storage_order ? cm : idx;
                }
            } else if (c->kind == POOL_AVG) {
                acc += v;
            } else {
                acc += pow(fabs(v), (double)c->at->p);
            }
            for (int i = ns - 1; i >= 0; i--) {
                if (++kx[i] < kb[i]) break;
                kx[i] = ka[i];
            }
        }
        double r;
        if (c->kind == POOL_MAX) r = best;
        else if (c->kind == POOL_AVG)
            r = acc / (double)(c->at->count_include_pad ? n_valid + n_pad : n_valid);
        else r = pow(acc, 1.0 / (double)c->at->p);
        kiln__store_f64(t, c->Y->data, pl * g->out_sz + p, r);
        if (c->ind) c->ind[pl * g->out_sz + p] = pl * g->in_sz + bi;
        for (int i = ns - 1; i >= 0; i--) {
            if (++o[i] < g->out[i]) break;
            o[i] = 0;
        }
    }
}

static void pool_planes(void *vctx, int64_t p0, int64_t p1) {
    const pool_ctx *c = vctx;
    bool fast = c->X->dtype == KILN_DTYPE_FLOAT32 && c->g->ns <= 2;
    for (int64_t pl = p0; pl < p1; pl++) {
        if (fast) pool_plane_f32_2d(c, pl);
        else pool_plane_generic(c, pl);
    }
}

static kiln_status pool_cpu(const kiln_kernel_args *a) {
    const kiln_pool_attrs *at = a->attrs;
    pool_geom g;
    KILN_TRY(pool_geom_make(NODE(a), a->op->name, at, a->in[0]->rank, a->in[0]->dims, &g));
    if (at->layout)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): the reference kernel reads and writes NCHW "
                         "tensors only (layout %d: the CPU backend's kernel)", NODE(a), a->op->name,
                         (int)at->layout);
    if (!pool_dtype_ok(a->in[0]->dtype, a->op->code))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s is not supported", NODE(a),
                         a->op->name, kiln_dtype_name(a->in[0]->dtype));
    pool_ctx c = {.g = &g, .at = at, .kind = a->op->code, .X = a->in[0], .Y = a->out[0]};
    if (a->op->code == POOL_MAX && a->n_out > 1 && a->out[1] && a->out[1]->data)
        c.ind = a->out[1]->data;
    int64_t s = 1;
    for (int i = 0; i < g.ns; i++) {
        c.cm_stride[i] = s;
        s *= g.in[i];
    }
    int64_t planes = g.N * g.C;
    if (planes == 0 || g.out_sz == 0) return KILN_OK;
    int64_t kn = 1;
    for (int i = 0; i < g.ns; i++) kn *= g.k[i];
    int64_t per = g.out_sz * kn;
    kiln__parallel_for(a->pool, planes, per > 0 ? (32768 + per - 1) / per : planes, pool_planes, &c);
    return KILN_OK;
}

/* MaxPool, AveragePool (and GlobalAveragePool's input): KILN_POOL_LAYOUT_* */
static int32_t *pool_layout_field(void *attrs) { return &((kiln_pool_attrs *)attrs)->layout; }

static int pool_side(int32_t l) {
    return l == KILN_POOL_LAYOUT_C16 ? KILN_VLAYOUT_C16 : l == KILN_POOL_LAYOUT_NHWC ? KILN_VLAYOUT_NHWC
                                                                                    : KILN_VLAYOUT_PLAIN;
}

static void pool_layout_io(int32_t l, kiln_io_layout *io) {
    io->x = io->y = pool_side(l);
    io->r_nhwc = false;
    io->r_in = 0;
}

const kiln_op_def kiln_op_MaxPool = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "MaxPool", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 2,
    .code = POOL_MAX, .attr_size = sizeof(kiln_pool_attrs),
    .import = pool_import, .validate = pool_validate, .infer = pool_infer, .cpu = pool_cpu,
    .layout_field = pool_layout_field, .layout_io = pool_layout_io,
};

const kiln_op_def kiln_op_AveragePool = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "AveragePool", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .code = POOL_AVG, .attr_size = sizeof(kiln_pool_attrs),
    .import = pool_import, .validate = pool_validate, .infer = pool_infer, .cpu = pool_cpu,
    .layout_field = pool_layout_field, .layout_io = pool_layout_io,
};

const kiln_op_def kiln_op_LpPool = {
    .name = "LpPool", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .code = POOL_LP, .attr_size = sizeof(kiln_pool_attrs),
    .import = pool_import, .validate = pool_validate, .infer = pool_infer, .cpu = pool_cpu,
};

/* ---- global pools --------------------------------------------------------- */

static kiln_status global_infer(const kiln_infer_args *a) {
    const kiln_tinfo *X = a->in[0];
    kiln_tinfo *y = a->out[0];
    y->dtype = X->dtype;
    if (!pool_dtype_ok(X->dtype, a->op->code))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s is not supported", NODE(a),
                         a->op->name, kiln_dtype_name(X->dtype));
    y->rank = X->rank;
    if (X->rank < 0) return KILN_OK;
    if (X->rank < 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): input must have rank >= 2, got %d", NODE(a),
                         a->op->name, X->rank);
    y->dims[0] = X->dims[0];
    y->dims[1] = X->dims[1];
    for (int i = 2; i < X->rank; i++) y->dims[i] = 1;
    return KILN_OK;
}

typedef struct global_ctx {
    const kiln_tensor *X;
    kiln_tensor *Y;
    int64_t plane;
    int kind;
    float p;
} global_ctx;

static void global_planes(void *vctx, int64_t p0, int64_t p1) {
    const global_ctx *c = vctx;
    int64_t n = c->plane;
    for (int64_t pl = p0; pl < p1; pl++) {
        double r;
        if (c->X->dtype == KILN_DTYPE_FLOAT32 && c->kind != POOL_LP) {
            const float *x = (const float *)c->X->data + pl * n;
            if (c->kind == POOL_MAX) {
                float m = n > 0 ? x[0] : -INFINITY;
                for (int64_t i = 1; i < n; i++) m = kiln__max_keep_nan(m, x[i]);
                r = m;
            } else {
                float acc[8] = {0};
                int64_t i = 0;
                for (; i + 8 <= n; i += 8)
                    for (int j = 0; j < 8; j++) acc[j] += x[i + j];
                double s = 0.0;
                for (; i < n; i++) s += x[i];
                for (int j = 0; j < 8; j++) s += acc[j];
                r = s / (double)n;
            }
            ((float *)c->Y->data)[pl] = (float)r;
            continue;
        }
        kiln_dtype t = c->X->dtype;
        double acc = c->kind == POOL_MAX ? -INFINITY : 0.0;
        for (int64_t i = 0; i < n; i++) {
            double v = kiln__load_f64(t, c->X->data, pl * n + i);
            if (c->kind == POOL_MAX) acc = TAKE_MAX(v, acc, i == 0) ? v : acc;
            else if (c->kind == POOL_AVG) acc += v;
            else acc += pow(fabs(v), (double)c->p);
        }
        if (c->kind == POOL_AVG) r = acc / (double)n;
        else if (c->kind == POOL_LP) r = pow(acc, 1.0 / (double)c->p);
        else r = acc;
        kiln__store_f64(t, c->Y->data, pl, r);
    }
}

static kiln_status global_cpu(const kiln_kernel_args *a) {
    const kiln_pool_attrs *at = a->attrs;
    const kiln_tensor *X = a->in[0];
    if (at && at->layout)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): the reference kernel reads NCHW tensors only "
                         "(layout %d: the CPU backend's kernel)", NODE(a), a->op->name, (int)at->layout);
    global_ctx c = {.X = X, .Y = a->out[0], .kind = a->op->code, .p = at ? at->p : 2.0f};
    c.plane = 1;
    for (int i = 2; i < X->rank; i++) c.plane *= X->dims[i];
    int64_t planes = X->dims[0] * X->dims[1];
    if (planes == 0) return KILN_OK;
    kiln__parallel_for(a->pool, planes, c.plane > 0 ? (32768 + c.plane - 1) / c.plane : planes,
                       global_planes, &c);
    return KILN_OK;
}

/* attrs: only `layout` is used (set by kiln__fc_choose_layouts; engine
 * format 4; zero from ONNX) */
/* its [N, C, 1, 1] output is the same bytes in any layout */
static void global_layout_io(int32_t l, kiln_io_layout *io) {
    io->x = pool_side(l);
    io->y = KILN_VLAYOUT_PLAIN;
    io->r_nhwc = false;
    io->r_in = 0;
}

const kiln_op_def kiln_op_GlobalAveragePool = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "GlobalAveragePool", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .code = POOL_AVG, .attr_size = sizeof(kiln_pool_attrs), .validate = global_validate,
    .attr_grew_in = 4, .attr_size_before = 0, /* no attributes before format 4: an NCHW input */
    .infer = global_infer, .cpu = global_cpu,
    .layout_field = pool_layout_field, .layout_io = global_layout_io,
};

const kiln_op_def kiln_op_GlobalMaxPool = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "GlobalMaxPool", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .code = POOL_MAX, .infer = global_infer, .cpu = global_cpu,
};

const kiln_op_def kiln_op_GlobalLpPool = {
    .name = "GlobalLpPool", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .code = POOL_LP, .attr_size = sizeof(kiln_pool_attrs),
    .import = global_import, .validate = global_validate, .infer = global_infer, .cpu = global_cpu,
};

/* ---- MaxUnpool ------------------------------------------------------------ */
/* Indices refer to the default output shape ((in - 1) * stride + kernel -
 * pads); an explicit output_shape places that result at the start of each
 * dimension (the ONNX reference behaviour). */

static kiln_status unpool_import(kiln_import_ctx *ic, void *attrs) {
    kiln_pool_attrs *at = attrs;
    KILN_TRY(kiln__nn_read_ints(ic, "kernel_shape", at->kernel, KILN_NN_MAX_SP, &at->n_kernel));
    KILN_TRY(kiln__nn_read_ints(ic, "pads", at->pads, 2 * KILN_NN_MAX_SP, &at->n_pads));
    KILN_TRY(kiln__nn_read_ints(ic, "strides", at->strides, KILN_NN_MAX_SP, &at->n_strides));
    return KILN_OK;
}

static kiln_status unpool_default(const char *node, const kiln_pool_attrs *at, int rank,
                                  const int64_t *xd, int64_t *out) {
    int ns = rank - 2;
    if (rank < 3 || at->n_kernel != ns || (at->n_strides && at->n_strides != ns) ||
        (at->n_pads && at->n_pads != 2 * ns))
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (MaxUnpool): kernel_shape/strides/pads do not match input rank %d",
                         node, rank);
    out[0] = xd[0];
    out[1] = xd[1];
    for (int i = 0; i < ns; i++) {
        int64_t s = at->n_strides ? at->strides[i] : 1;
        int64_t p = at->n_pads ? at->pads[i] + at->pads[ns + i] : 0;
        if (xd[2 + i] < 0) {
            out[2 + i] = KILN_DIM_UNKNOWN;
            continue;
        }
        /* (in - 1) * stride + kernel - pads; s, kernel, pads <= 2^31-1 */
        KILN_TRY(kiln__dim_mul(node, xd[2 + i] - 1, s, &out[2 + i]));
        out[2 + i] += at->kernel[i] - p;
        if (out[2 + i] < 0)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (MaxUnpool): spatial dim %d of the output would be %lld",
                             node, i, (long long)out[2 + i]);
    }
    return KILN_OK;
}

static kiln_status unpool_infer(const kiln_infer_args *a) {
    const kiln_pool_attrs *at = a->attrs;
    const kiln_tinfo *X = a->in[0], *I = a->in[1];
    const kiln_tinfo *S = a->n_in > 2 ? a->in[2] : NULL;
    kiln_tinfo *y = a->out[0];
    y->dtype = X->dtype;
    if (!pool_dtype_ok(X->dtype, POOL_AVG))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (MaxUnpool): dtype %s is not supported",
                         NODE(a), kiln_dtype_name(X->dtype));
    if (I->dtype != KILN_DTYPE_INT64)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (MaxUnpool): indices must be int64, got %s",
                         NODE(a), kiln_dtype_name(I->dtype));
    y->rank = X->rank;
    if (X->rank < 0) return KILN_OK;
    KILN_TRY(unpool_default(NODE(a), at, X->rank, X->dims, y->dims));
    if (S) {
        if (S->rank != 1 || (S->dims[0] >= 0 && S->dims[0] != X->rank))
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (MaxUnpool): output_shape must be 1-D of length %d",
                             NODE(a), X->rank);
        for (int i = 0; i < X->rank; i++) {
            int64_t def = y->dims[i];
            y->dims[i] = S->data ? kiln__tinfo_int(S, i) : KILN_DIM_UNKNOWN;
            if (S->data && y->dims[i] < 0)
                return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (MaxUnpool): output_shape[%d] is %lld",
                                 NODE(a), i, (long long)y->dims[i]);
            if (S->data && def >= 0 && y->dims[i] < def)
                return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                                 "node '%s' (MaxUnpool): output_shape[%d] = %lld is smaller than "
                                 "the default %lld",
                                 NODE(a), i, (long long)y->dims[i], (long long)def);
        }
    }
    return KILN_OK;
}

static kiln_status unpool_cpu(const kiln_kernel_args *a) {
    const kiln_pool_attrs *at = a->attrs;
    const kiln_tensor *X = a->in[0], *I = a->in[1];
    kiln_tensor *Y = a->out[0];
    int64_t def[KILN_MAX_RANK];
    KILN_TRY(unpool_default(NODE(a), at, X->rank, X->dims, def));
    int64_t ny = kiln__tensor_numel(Y), nx = kiln__tensor_numel(X);
    int64_t ndef = kiln__numel(X->rank, def);
    size_t es = kiln_dtype_size(Y->dtype);
    memset(Y->data, 0, (size_t)ny * es);
    const int64_t *ind = I->data;
    if (kiln__tensor_numel(I) != nx)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (MaxUnpool): indices have %lld elements, X has %lld",
                         NODE(a), (long long)kiln__tensor_numel(I), (long long)nx);
    for (int64_t j = 0; j < nx; j++) {
        int64_t idx = ind[j];
        if (idx < 0 || idx >= ndef)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (MaxUnpool): index %lld out of range [0, %lld)",
                             NODE(a), (long long)idx, (long long)ndef);
        /* re-linearize from the default shape into Y's shape */
        int64_t rem = idx, o = 0, mul = 1;
        for (int i = X->rank - 1; i >= 0; i--) {
            int64_t c = rem % def[i];
            rem /= def[i];
            o += c * mul;
            mul *= Y->dims[i];
        }
        memcpy((char *)Y->data + (size_t)o * es, (const char *)X->data + (size_t)j * es, es);
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_MaxUnpool = {
    .name = "MaxUnpool", .domain = "", .since = 9,
    .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_pool_attrs),
    .import = unpool_import, .validate = pool_validate, .infer = unpool_infer, .cpu = unpool_cpu,
};

/* ---- MaxRoiPool ----------------------------------------------------------- */
/* X [N, C, H, W], rois [R, 5] (batch, x1, y1, x2, y2) -> Y [R, C, ph, pw].
 * Caffe's ROI pooling: ROI corners rounded after scaling, bins of
 * floor/ceil bounds, empty bins give 0. */

/* kiln_maxroipool_attrs: ops/spatial_attrs.h */

static kiln_status maxroipool_import(kiln_import_ctx *ic, void *attrs) {
    kiln_maxroipool_attrs *at = attrs;
    int64_t ps[2];
    int n = kiln_attr_ints(ic, "pooled_shape", ps, 2);
    if (n != 2) return KILN_IMPORT_FAIL(ic, "attribute 'pooled_shape' must hold two values");
    /* values that do not fit become 0, which validate refuses */
    at->pooled_h = ps[0] < 1 || ps[0] > INT32_MAX ? 0 : (int32_t)ps[0];
    at->pooled_w = ps[1] < 1 || ps[1] > INT32_MAX ? 0 : (int32_t)ps[1];
    at->spatial_scale = kiln_attr_float(ic, "spatial_scale", 1.0f);
    return KILN_OK;
}

static kiln_status maxroipool_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_maxroipool_attrs *at = attrs;
    if (at->pooled_h < 1 || at->pooled_w < 1)
        return KILN_VALIDATE_FAIL(op, node, "attribute 'pooled_shape' must hold two positive values "
                                  "(at most 2^31-1)");
    return KILN_OK;
}

/* A ROI coordinate (any float of the input) as a pixel index, bounded far
 * beyond any image so that the arithmetic on it cannot overflow; NaN: 0. */
static int64_t roi_coord(double v) {
    if (!(v == v)) return 0;
    const double lim = 4503599627370496.0; /* 2^52 */
    return (int64_t)(v < -lim ? -lim : v > lim ? lim : round(v));
}

static kiln_status maxroipool_infer(const kiln_infer_args *a) {
    const kiln_maxroipool_attrs *at = a->attrs;
    const kiln_tinfo *X = a->in[0], *R = a->in[1];
    kiln_tinfo *y = a->out[0];
    y->dtype = X->dtype;
    if (!pool_dtype_ok(X->dtype, POOL_AVG) || R->dtype != X->dtype)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (MaxRoiPool): dtypes %s/%s are not supported",
                         NODE(a), kiln_dtype_name(X->dtype), kiln_dtype_name(R->dtype));
    if ((X->rank >= 0 && X->rank != 4) || (R->rank >= 0 && R->rank != 2) ||
        (R->rank == 2 && R->dims[1] >= 0 && R->dims[1] != 5))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (MaxRoiPool): expected X [N,C,H,W] and rois [R,5]",
                         NODE(a));
    y->rank = 4;
    y->dims[0] = R->rank == 2 ? R->dims[0] : KILN_DIM_UNKNOWN;
    y->dims[1] = X->rank == 4 ? X->dims[1] : KILN_DIM_UNKNOWN;
    y->dims[2] = at->pooled_h;
    y->dims[3] = at->pooled_w;
    return KILN_OK;
}

static kiln_status maxroipool_cpu(const kiln_kernel_args *a) {
    const kiln_maxroipool_attrs *at = a->attrs;
    const kiln_tensor *X = a->in[0], *R = a->in[1];
    kiln_dtype t = X->dtype;
    int64_t N = X->dims[0], C = X->dims[1], H = X->dims[2], W = X->dims[3];
    int64_t nr = R->dims[0], PH = at->pooled_h, PW = at->pooled_w;
    for (int64_t r = 0; r < nr; r++) {
        int64_t b = roi_coord(trunc(kiln__load_f64(t, R->data, r * 5)));
        if (b < 0 || b >= N)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (MaxRoiPool): batch index %lld out of range [0, %lld)",
                             NODE(a), (long long)b, (long long)N);
        double sc = at->spatial_scale;
        int64_t x1 = roi_coord(kiln__load_f64(t, R->data, r * 5 + 1) * sc);
        int64_t y1 = roi_coord(kiln__load_f64(t, R->data, r * 5 + 2) * sc);
        int64_t x2 = roi_coord(kiln__load_f64(t, R->data, r * 5 + 3) * sc);
        int64_t y2 = roi_coord(kiln__load_f64(t, R->data, r * 5 + 4) * sc);
        int64_t rh = y2 - y1 + 1 > 1 ? y2 - y1 + 1 : 1, rw = x2 - x1 + 1 > 1 ? x2 - x1 + 1 : 1;
        double bh = (double)rh / (double)PH, bw = (double)rw / (double)PW;
        for (int64_t c = 0; c < C; c++)
            for (int64_t ph = 0; ph < PH; ph++)
                for (int64_t pw = 0; pw < PW; pw++) {
                    int64_t hs = (int64_t)floor((double)ph * bh) + y1, he = (int64_t)ceil((double)(ph + 1) * bh) + y1;
                    int64_t ws = (int64_t)floor((double)pw * bw) + x1, we = (int64_t)ceil((double)(pw + 1) * bw) + x1;
                    hs = hs < 0 ? 0 : hs > H ? H : hs;
                    he = he < 0 ? 0 : he > H ? H : he;
                    ws = ws < 0 ? 0 : ws > W ? W : ws;
                    we = we < 0 ? 0 : we > W ? W : we;
                    double m = (he <= hs || we <= ws) ? 0.0 : -INFINITY;
                    for (int64_t h = hs; h < he; h++)
                        for (int64_t w = ws; w < we; w++) {
                            double v = kiln__load_f64(t, X->data, ((b * C + c) * H + h) * W + w);
                            m = TAKE_MAX(v, m, false) ? v : m;
                        }
                    kiln__store_f64(t, a->out[0]->data, ((r * C + c) * PH + ph) * PW + pw, m);
                }
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_MaxRoiPool = {
    .name = "MaxRoiPool", .domain = "", .since = 1,
    .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_maxroipool_attrs),
    .import = maxroipool_import, .validate = maxroipool_validate, .infer = maxroipool_infer, .cpu = maxroipool_cpu,
};

/* The pooling geometry (spatial_attrs.h): for the CUDA backend */
kiln_status kiln__pool_geom(const char *node, const char *op, const kiln_pool_attrs *at, int rank,
                            const int64_t *dims, kiln_pool_geom *g) {
    return pool_geom_make(node, op, at, rank, dims, g);
}
