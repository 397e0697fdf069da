/* cuda_ops_spatial.c -- the "spatial" family on the GPU: Pad, Resize and
 * Upsample, DepthToSpace/SpaceToDepth, InstanceNormalization, LRN,
 * MeanVarianceNormalization, Hardmax, ConvTranspose, LpPool, GlobalLpPool,
 * MaxUnpool, MaxRoiPool, ReverseSequence, GridSample, RoiAlign: supports()
 * and run(). Kernels in k_spatial.cu (index math in k_spatial.h, shared with
 * the emulator; Resize/GridSample/RoiAlign arithmetic in
 * src/ops/spatial_sample.h, shared with the CPU). The CPU kernels
 * (src/ops/tensor_pad.c, tensor_resize.c, tensor_layout.c, nn_norm.c,
 * nn_pool.c, nn_conv.c, misc_sample.c) are the reference. */
#if KILN_HAVE_CUDA

#include "backends/cuda/cuda_internal.h"
#include "ops/fused_conv.h"
#include "ops/nn_attrs.h"
#include "ops/spatial_attrs.h"
#include "ops/tensor_internal.h"

#include <stddef.h>

_Static_assert((int)KCU_PAD_CONSTANT == (int)PAD_CONSTANT &&
                   (int)KCU_PAD_REFLECT == (int)PAD_REFLECT && (int)KCU_PAD_EDGE == (int)PAD_EDGE &&
                   (int)KCU_PAD_WRAP == (int)PAD_WRAP,
               "Pad modes of k_spatial.h and tensor_internal.h differ");
static kiln_status sp_dtype_fail(const kiln_kernel_args *a, kiln_dtype t) {
    return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s has no CUDA kernel",
                     KCU_NODE(a), a->op->name, kiln_dtype_name(t));
}

/* element sizes the byte-moving kernels take */
static bool movable(kiln_dtype t) {
    size_t es = kiln_dtype_size(t);
    return t != KILN_DTYPE_UNDEFINED && (es == 1 || es == 2 || es == 4 || es == 8);
}

/* input 0 and output 0 share a floating dtype */
static bool sp_float_in_out(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    return kiln__cu_is_float(t) && kiln__cu_out_dtype(g, n, 0) == t;
}

/* Element i of a small floating parameter tensor (Resize scales/roi) on the
 * host, wherever it lives (a device copy synchronizes, like
 * kiln__cuda_read_ints). */
static kiln_status read_f64_at(const kiln_kernel_args *a, const kiln_tensor *t, int64_t i,
                               double *v) {
    if (i < 0 || i >= kiln__tensor_numel(t))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): parameter has %lld values, needs %lld",
                         KCU_NODE(a), a->op->name, (long long)kiln__tensor_numel(t),
                         (long long)(i + 1));
    kiln_tensor e = *t;
    e.rank = 0;
    e.data = (char *)t->data + (size_t)i * kiln_dtype_size(t->dtype);
    int64_t unused;
    return kiln__cuda_read_scalar(a, &e, v, &unused);
}

/* ---- Pad --------------------------------------------------------------------------------- */

bool kiln__cu_pad_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    if (!movable(t) || kiln__cu_out_dtype(g, n, 0) != t) return false;
    /* a constant of another dtype would need a conversion */
    kiln_dtype v = n->n_in > 2 ? kiln__cu_in_dtype(g, n, 2) : KILN_DTYPE_UNDEFINED;
    return v == KILN_DTYPE_UNDEFINED || v == t;
}

kiln_status kiln__cu_pad_run(const kiln_kernel_args *a) {
    const kiln_pad_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    const kiln_tensor *cv = a->n_in > 2 ? a->in[2] : NULL;
    const kiln_tensor *ax = a->n_in > 3 ? a->in[3] : NULL;
    kiln_tensor *y = a->out[0];
    if (!movable(x->dtype) || y->dtype != x->dtype) return sp_dtype_fail(a, x->dtype);
    if (cv && cv->data && kiln__tensor_numel(cv) >= 1 && cv->dtype != x->dtype)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (Pad): constant of dtype %s for %s data has no CUDA kernel",
                         KCU_NODE(a), kiln_dtype_name(cv->dtype), kiln_dtype_name(x->dtype));
    int r = x->rank;
    int64_t pads[2 * KILN_MAX_RANK], axes[KILN_MAX_RANK], np = 0, na = 0;
    KILN_TRY(kiln__cuda_read_ints(a, a->in[1], pads, 2 * KILN_MAX_RANK, &np, "pads"));
    if (ax) KILN_TRY(kiln__cuda_read_ints(a, ax, axes, KILN_MAX_RANK, &na, "axes"));
    int64_t cnt = ax ? na : r;
    if (np != 2 * cnt)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Pad): pads has %lld entries, expected %lld",
                         KCU_NODE(a), (long long)np, (long long)(2 * cnt));
    kcu_pad g;
    memset(&g, 0, sizeof g);
    for (int64_t i = 0; i < cnt; i++) {
        int64_t k = ax ? axes[i] : i;
        if (k < -r || k >= r)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (Pad): axis %lld is out of range for rank %d", KCU_NODE(a),
                             (long long)k, r);
        if (k < 0) k += r;
        g.pb[k] = pads[i];
    }
    g.rank = r;
    g.n = kiln__tensor_numel(y);
    if (g.n == 0) return KILN_OK;
    /* every other mode pads an empty input with the constant (as the CPU does) */
    g.mode = kiln__tensor_numel(x) == 0 ? KCU_PAD_CONSTANT : at->mode;
    if (g.mode < KCU_PAD_CONSTANT || g.mode > KCU_PAD_WRAP)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Pad): unknown mode %d", KCU_NODE(a),
                         (int)g.mode);
    for (int k = 0; k < r; k++) {
        g.in[k] = x->dims[k];
        g.out[k] = y->dims[k];
    }
    kiln__cuda_strides(r, x->dims, g.xst);
    const void *vdev = NULL;
    if (cv && cv->data && kiln__tensor_numel(cv) >= 1) {
        if (kiln__cuda_is_device_ptr(cv->data)) {
            vdev = cv->data;
        } else {
            memcpy(g.value, cv->data, kiln_dtype_size(x->dtype));
        }
    }
    KILN_CUDA_TRY(kcu_pad_run(kiln_dtype_size(x->dtype), &g, x->data, vdev, y->data, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- Resize, Upsample -------------------------------------------------------------------- */

bool kiln__cu_resize_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_resize_attrs *at = n->attrs;
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    if (kiln__cu_out_dtype(g, n, 0) != t) return false;
    if (at->mode == RS_NEAREST) return movable(t);
    return (at->mode == RS_LINEAR || at->mode == RS_CUBIC) && kiln__cu_is_float(t);
}

/* Parameter input idx of Resize when present and not empty (rs_tensor). */
static const kiln_tensor *rs_param(const kiln_kernel_args *a, int idx) {
    if (idx < 0 || idx >= a->n_in || !a->in[idx]) return NULL;
    return kiln__tensor_numel(a->in[idx]) == 0 ? NULL : a->in[idx];
}

kiln_status kiln__cu_resize_run(const kiln_kernel_args *a) {
    const kiln_resize_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    kiln_dtype t = x->dtype;
    bool interp = at->mode != RS_NEAREST;
    if (y->dtype != t || (interp ? !kiln__cu_is_float(t) : !movable(t))) return sp_dtype_fail(a, t);
    if (at->mode < RS_NEAREST || at->mode > RS_CUBIC || at->ctm < RS_HALF_PIXEL ||
        at->ctm > RS_HALF_PIXEL_SYMMETRIC || at->nearest_mode < RS_ROUND_PREFER_FLOOR ||
        at->nearest_mode > RS_SIMPLE)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): invalid attributes", KCU_NODE(a),
                         a->op->name);
    int r = x->rank;
    size_t es = kiln_dtype_size(t);
    int64_t ny = kiln__tensor_numel(y);
    if (ny == 0) return KILN_OK;
    if (kiln__tensor_numel(x) == 0)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (%s): cannot resize an empty tensor to a non-empty one",
                         KCU_NODE(a), a->op->name);
    if (r == 0) return kiln__cuda_memcpy(a, y->data, x->data, es);
    if (y->rank != r)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (%s): output rank %d differs from input rank %d", KCU_NODE(a),
                         a->op->name, y->rank, r);
    const kiln_tensor *sizes = rs_param(a, at->in_sizes), *scales = rs_param(a, at->in_scales),
                      *roi = rs_param(a, at->in_roi);
    kcu_resize g;
    memset(&g, 0, sizeof g);
    g.rank = r;
    g.mode = at->mode;
    g.n = ny;
    kiln__store_f64(t, g.extrap, 0, at->extrapolation_value);
    kiln__cuda_strides(r, x->dims, g.xst);
    for (int k = 0; k < r; k++) {
        /* as resize_cpu: the scale given, or out/in with sizes */
        bool by_sizes = sizes || !scales;
        double scale = (double)y->dims[k] / (double)x->dims[k];
        if (!by_sizes) KILN_TRY(read_f64_at(a, scales, k, &scale));
        double roi0 = 0, roi1 = 1;
        if (at->ctm == RS_TF_CROP_AND_RESIZE && roi) {
            KILN_TRY(read_f64_at(a, roi, k, &roi0));
            KILN_TRY(read_f64_at(a, roi, k + r, &roi1));
        }
        g.ax[k] = (rs_axis_param){.mode = at->mode,
                                  .ctm = at->ctm,
                                  .nearest_mode = at->nearest_mode,
                                  .exclude_outside = at->exclude_outside,
                                  .cubic_a = at->cubic_coeff_a,
                                  .in = x->dims[k],
                                  .out = y->dims[k],
                                  .scale = scale,
                                  .len = by_sizes ? (double)y->dims[k]
                                                  : (double)x->dims[k] * scale * (roi1 - roi0),
                                  .roi0 = roi0,
                                  .roi1 = roi1};
    }
    KILN_CUDA_TRY(kcu_resize_run(t, es, &g, x->data, y->data, KCU_STREAM(a)), KCU_NODE(a));
    return KILN_OK;
}

/* ---- DepthToSpace, SpaceToDepth: a permuting copy ---------------------------------------- */

bool kiln__cu_depth_space_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    return movable(t) && kiln__cu_out_dtype(g, n, 0) == t;
}

kiln_status kiln__cu_depth_space_run(const kiln_kernel_args *a) {
    const kiln_d2s_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    if (!movable(x->dtype) || y->dtype != x->dtype) return sp_dtype_fail(a, x->dtype);
    if (x->rank != 4 || at->blocksize < 1)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): needs a 4-D input and blocksize >= 1",
                         KCU_NODE(a), a->op->name);
    int64_t bs = at->blocksize, N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    /* x viewed as v (6-D), y = v transposed by p (as the CPU kernel) */
    int64_t v[6];
    const int *p;
    static const int p_crd[6] = {0, 1, 4, 2, 5, 3}, p_dcr[6] = {0, 3, 4, 1, 5, 2},
                     p_s2d[6] = {0, 3, 5, 1, 2, 4};
    if (kiln__op_id_of(a->op) == KILN_OP_DepthToSpace) {
        int64_t c = C / (bs * bs);
        int64_t crd[6] = {N, c, bs, bs, H, W}, dcr[6] = {N, bs, bs, c, H, W};
        memcpy(v, at->crd ? crd : dcr, sizeof v);
        p = at->crd ? p_crd : p_dcr;
    } else {
        int64_t s2d[6] = {N, C, H / bs, bs, W / bs, bs};
        memcpy(v, s2d, sizeof v);
        p = p_s2d;
    }
    int64_t vst[6], dims[6], st[6];
    kiln__cuda_strides(6, v, vst);
    for (int i = 0; i < 6; i++) {
        dims[i] = v[p[i]];
        st[i] = vst[p[i]];
    }
    if (kiln__numel(6, dims) != kiln__tensor_numel(y) || kiln__numel(6, v) != kiln__tensor_numel(x))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): shapes do not match blocksize %lld",
                         KCU_NODE(a), a->op->name, (long long)bs);
    return kiln__cuda_copy(a, kiln_dtype_size(x->dtype), 6, dims, y->data, NULL, x->data, st);
}

/* ---- InstanceNormalization, MeanVarianceNormalization ------------------------------------ */

bool kiln__cu_instance_norm_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    return sp_float_in_out(g, n) && kiln__cu_in_dtype(g, n, 1) == t &&
           kiln__cu_in_dtype(g, n, 2) == t;
}

kiln_status kiln__cu_instance_norm_run(const kiln_kernel_args *a) {
    const kiln_eps_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0], *S = a->in[1], *B = a->in[2];
    if (!kiln__cu_is_float(x->dtype) || S->dtype != x->dtype || B->dtype != x->dtype)
        return sp_dtype_fail(a, x->dtype);
    if (x->rank < 3)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (InstanceNormalization): input rank %d < 3",
                         KCU_NODE(a), x->rank);
    int64_t C = x->dims[1];
    if (kiln__tensor_numel(S) != C || kiln__tensor_numel(B) != C)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (InstanceNormalization): scale/B must have C = %lld elements",
                         KCU_NODE(a), (long long)C);
    kcu_groupnorm g;
    memset(&g, 0, sizeof g);
    g.kind = KCU_GN_INSTANCE;
    g.eps = at->epsilon;
    g.C = C;
    g.groups = x->dims[0] * C;
    g.R = kiln__numel(x->rank - 2, x->dims + 2);
    g.krank = g.rrank = 1;
    g.kdims[0] = g.groups;
    g.kst[0] = g.R;
    g.rdims[0] = g.R;
    g.rst[0] = 1;
    KILN_CUDA_TRY(
        kcu_groupnorm_run(x->dtype, &g, x->data, S->data, B->data, a->out[0]->data, KCU_STREAM(a)),
        KCU_NODE(a));
    return KILN_OK;
}

bool kiln__cu_mvn_supports(const kiln_graph *g, const kiln_node *n) {
    return sp_float_in_out(g, n);
}

kiln_status kiln__cu_mvn_run(const kiln_kernel_args *a) {
    const kiln_mvn_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    if (!kiln__cu_is_float(x->dtype)) return sp_dtype_fail(a, x->dtype);
    if (at->n_axes < 0 || at->n_axes > KILN_MAX_RANK)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (MeanVarianceNormalization): %d axes",
                         KCU_NODE(a), (int)at->n_axes);
    bool mask[KILN_MAX_RANK] = {false};
    for (int i = 0; i < at->n_axes; i++) {
        int axis;
        KILN_TRY(kiln__norm_axis(KCU_NODE(a), at->axes[i], x->rank, &axis));
        mask[axis] = true;
    }
    kcu_groupnorm g;
    memset(&g, 0, sizeof g);
    g.kind = KCU_GN_MVN;
    g.groups = g.R = 1;
    int64_t st[KILN_MAX_RANK];
    kiln__cuda_strides(x->rank, x->dims, st);
    for (int k = 0; k < x->rank; k++) {
        if (mask[k]) {
            g.rdims[g.rrank] = x->dims[k];
            g.rst[g.rrank++] = st[k];
            g.R *= x->dims[k];
        } else {
            g.kdims[g.krank] = x->dims[k];
            g.kst[g.krank++] = st[k];
            g.groups *= x->dims[k];
        }
    }
    KILN_CUDA_TRY(
        kcu_groupnorm_run(x->dtype, &g, x->data, NULL, NULL, a->out[0]->data, KCU_STREAM(a)),
        KCU_NODE(a));
    return KILN_OK;
}

/* ---- LRN --------------------------------------------------------------------------------- */

bool kiln__cu_lrn_supports(const kiln_graph *g, const kiln_node *n) {
    return sp_float_in_out(g, n);
}

kiln_status kiln__cu_lrn_run(const kiln_kernel_args *a) {
    const kiln_lrn_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    if (!kiln__cu_is_float(x->dtype)) return sp_dtype_fail(a, x->dtype);
    if (x->rank < 2 || at->size < 1)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (LRN): needs rank >= 2 and size >= 1",
                         KCU_NODE(a));
    KILN_CUDA_TRY(kcu_lrn(x->dtype, x->data, a->out[0]->data, x->dims[0], x->dims[1],
                          kiln__numel(x->rank - 2, x->dims + 2), at->size, at->alpha, at->beta,
                          at->bias, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- Hardmax ----------------------------------------------------------------------------- */

bool kiln__cu_hardmax_supports(const kiln_graph *g, const kiln_node *n) {
    return sp_float_in_out(g, n);
}

kiln_status kiln__cu_softmax_rows(const kiln_kernel_args *a, int64_t *outer, int64_t *n,
                                  int64_t *inner) {
    const kiln_softmax_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    int axis = 0;
    if (x->rank == 0) {
        *outer = *n = *inner = 1;
    } else if (at->coerce_2d) {
        axis = at->axis;
        if (axis != x->rank) KILN_TRY(kiln__norm_axis(KCU_NODE(a), at->axis, x->rank, &axis));
        *outer = kiln__numel(axis, x->dims);
        *n = kiln__numel(x->rank - axis, x->dims + axis);
        *inner = 1;
    } else {
        KILN_TRY(kiln__norm_axis(KCU_NODE(a), at->axis, x->rank, &axis));
        *outer = kiln__numel(axis, x->dims);
        *n = x->dims[axis];
        *inner = kiln__numel(x->rank - axis - 1, x->dims + axis + 1);
    }
    return KILN_OK;
}

kiln_status kiln__cu_hardmax_run(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    if (!kiln__cu_is_float(x->dtype)) return sp_dtype_fail(a, x->dtype);
    int64_t outer, n, inner;
    KILN_TRY(kiln__cu_softmax_rows(a, &outer, &n, &inner));
    /* the CPU's float32 contiguous path gives a row whose first element is NaN all zeros */
    int nan_first_zero = x->dtype == KILN_DTYPE_FLOAT32 && inner == 1;
    KILN_CUDA_TRY(kcu_hardmax(x->dtype, x->data, a->out[0]->data, outer, n, inner, nan_first_zero,
                              KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ConvTranspose: the GEMM path needs at least this many channels per group,
 * and at most this much scratch for col */
#define KCU_CONVT_GEMM_MIN_CG 8
#define KCU_CONVT_COL_LIMIT ((size_t)256 << 20)

/* ---- ConvTranspose ----------------------------------------------------------------------- */

bool kiln__cu_conv_transpose_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    kiln_dtype b = n->n_in > 2 ? kiln__cu_in_dtype(g, n, 2) : KILN_DTYPE_UNDEFINED;
    if (!sp_float_in_out(g, n) || kiln__cu_in_dtype(g, n, 1) != t) return false;
    if (b != KILN_DTYPE_UNDEFINED && b != t) return false;
    const kiln_tinfo *x = kiln__cu_in(g, n, 0);
    return !x || x->rank < 0 || (x->rank >= 3 && x->rank <= 2 + KCU_MAX_SP);
}

void kiln__cuda_conv_nd(const kcu_conv *g, bool transposed, kcu_conv_nd *v) {
    /* 1-D runs as 2-D with a height of 1 */
    v->nsp = g->ns < 2 ? 2 : g->ns;
    v->nd = v->nsp + 2;
    const int off = v->nsp - g->ns;
    v->xd[0] = v->yd[0] = (int)g->N;
    v->xd[1] = (int)g->C;
    v->yd[1] = (int)g->M;
    v->wd[0] = (int)(transposed ? g->C : g->M);
    v->wd[1] = (int)(transposed ? g->Mg : g->Cg);
    for (int i = 0; i < v->nsp; i++) {
        int k = i - off; /* spatial index in g, < 0: the added unit dim */
        v->xd[2 + i] = k < 0 ? 1 : (int)g->in[k];
        v->yd[2 + i] = k < 0 ? 1 : (int)g->out[k];
        v->wd[2 + i] = k < 0 ? 1 : (int)g->k[k];
        v->pad[i] = k < 0 ? 0 : (int)g->pb[k];
        v->str[i] = k < 0 ? 1 : (int)g->s[k];
        v->dil[i] = k < 0 ? 1 : (int)g->d[k];
    }
    v->xs[v->nd - 1] = v->ys[v->nd - 1] = 1;
    for (int i = v->nd - 2; i >= 0; i--) {
        v->xs[i] = v->xs[i + 1] * v->xd[i + 1];
        v->ys[i] = v->ys[i + 1] * v->yd[i + 1];
    }
}

#if KILN_HAVE_CUDNN

/* cuDNN's backward-data convolution is ConvTranspose: dx[o] gathers dy[i] w[k]
 * for o = i * s - pb + k * d, the forward convolution of dx (our Y) giving
 * dy (our X) with filter [C, M/group, k...] (our W). cuDNN pads both ends by
 * pb, so a layer qualifies when that forward convolution of Y's shape gives
 * X's shape (cudnnGetConvolutionNdForwardOutputDim): then the results agree
 * (end pads and output_padding only change how far Y extends). The plan
 * (descriptors, algorithm) is kept in the node's state, keyed by geometry,
 * dtype and math mode; `declined`: run the GEMM/direct path instead. */
typedef struct convt_plan {
    kcu_conv g; /* key: geometry, dtype, math */
    int32_t dt, math;
    bool declined;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t c;
    cudnnConvolutionBwdDataAlgo_t algo;
    size_t ws;
} convt_plan;

static void convt_plan_clear(convt_plan *p) {
    if (p->c) cudnnDestroyConvolutionDescriptor(p->c);
    if (p->w) cudnnDestroyFilterDescriptor(p->w);
    if (p->y) cudnnDestroyTensorDescriptor(p->y);
    if (p->x) cudnnDestroyTensorDescriptor(p->x);
    memset(p, 0, sizeof *p);
}

static void convt_plan_free(void *p) {
    if (!p) return;
    convt_plan_clear(p);
    kiln__free(p);
}

/* Sets up p (key filled in) for its geometry; p->declined when cuDNN
 * cannot run it. */
static void convt_plan_build(kiln_cuda_state *st, convt_plan *p) {
    const kcu_conv *g = &p->g;
    cudnnDataType_t dt = (cudnnDataType_t)p->dt;
    cudnnDataType_t ct = dt == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    p->declined = true;
    /* cuDNN takes int dims and strides */
    if (g->N * g->C * g->in_sz > INT32_MAX || g->N * g->M * g->out_sz > INT32_MAX ||
        g->C * g->Mg * g->k_sz > INT32_MAX)
        return;
    kcu_conv_nd v;
    kiln__cuda_conv_nd(g, true, &v);
    const int nsp = v.nsp, nd = v.nd;
    const int *xd = v.xd, *yd = v.yd, *wd = v.wd, *xs = v.xs, *ys = v.ys;
    int od[5];
    if (cudnnCreateTensorDescriptor(&p->x) || cudnnCreateTensorDescriptor(&p->y) ||
        cudnnCreateFilterDescriptor(&p->w) || cudnnCreateConvolutionDescriptor(&p->c) ||
        cudnnSetTensorNdDescriptor(p->x, dt, nd, xd, xs) ||
        cudnnSetTensorNdDescriptor(p->y, dt, nd, yd, ys) ||
        cudnnSetFilterNdDescriptor(p->w, dt, CUDNN_TENSOR_NCHW, nd, wd) ||
        cudnnSetConvolutionNdDescriptor(p->c, nsp, v.pad, v.str, v.dil, CUDNN_CROSS_CORRELATION,
                                        ct) ||
        cudnnSetConvolutionGroupCount(p->c, (int)g->G) ||
        cudnnSetConvolutionMathType(p->c, (cudnnMathType_t)p->math) ||
        cudnnGetConvolutionNdForwardOutputDim(p->c, p->y, p->w, nd, od))
        return;
    for (int i = 0; i < nd; i++)
        if (od[i] != xd[i]) return; /* not expressible with cuDNN's symmetric pads */
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int np = 0;
    if (cudnnGetConvolutionBackwardDataAlgorithm_v7(st->dnn, p->w, p->x, p->c, p->y,
                                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &np,
                                                    perf))
        return;
    for (int i = 0; i < np; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= KCU_CONVT_COL_LIMIT &&
            !(kcu_conv_accurate_only(st, dt) && kcu_bwd_data_algo_rounds_more(perf[i].algo))) {
            p->algo = perf[i].algo;
            p->ws = perf[i].memory;
            p->declined = false;
            return;
        }
}

/* Y = ConvTranspose(X, W) through cuDNN (no bias); *handled false: declined. */
static kiln_status convt_cudnn(const kiln_kernel_args *a, const kcu_conv *g, bool *handled) {
    kiln_cuda_state *st = KCU_STATE(a);
    const kiln_tensor *X = a->in[0], *W = a->in[1];
    *handled = false;
    if (!st || !st->dnn) return KILN_OK;
    convt_plan key;
    memset(&key, 0, sizeof key);
    key.g = *g;
    switch (X->dtype) {
    case KILN_DTYPE_FLOAT32:
        key.dt = CUDNN_DATA_FLOAT;
        key.math = st->allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
        break;
    case KILN_DTYPE_FLOAT16:
        key.dt = CUDNN_DATA_HALF;
        key.math = CUDNN_TENSOR_OP_MATH;
        break;
    case KILN_DTYPE_BFLOAT16:
        key.dt = CUDNN_DATA_BFLOAT16;
        key.math = CUDNN_TENSOR_OP_MATH;
        break;
    default:
        key.dt = CUDNN_DATA_DOUBLE;
        key.math = CUDNN_DEFAULT_MATH;
        break;
    }
    const size_t key_size = offsetof(convt_plan, declined);
    kiln_cuda_node *ns = kiln__cuda_node(a);
    if (ns && !ns->conv) {
        ns->conv = kiln__calloc(1, sizeof(convt_plan));
        if (ns->conv) ns->conv_free = convt_plan_free;
    }
    convt_plan tmp, *p = ns && ns->conv_free == convt_plan_free ? ns->conv : NULL;
    if (!p) {
        memset(&tmp, 0, sizeof tmp);
        p = &tmp;
    }
    if (p == &tmp || !(p->x || p->declined) || memcmp(p, &key, key_size)) {
        convt_plan_clear(p);
        memcpy(p, &key, key_size);
        convt_plan_build(st, p);
    }
    kiln_status s = KILN_OK;
    if (!p->declined) {
        void *ws = NULL;
        if (p->ws) s = kiln__cuda_scratch(st, p->ws, &ws, KCU_NODE(a));
        float af = 1.0f, bf = 0.0f;
        double ad = 1.0, bd = 0.0;
        bool f64 = p->dt == CUDNN_DATA_DOUBLE;
        cudnnStatus_t ds = CUDNN_STATUS_SUCCESS;
        if (s == KILN_OK)
            ds = cudnnConvolutionBackwardData(
                st->dnn, f64 ? (const void *)&ad : (const void *)&af, p->w, W->data, p->x,
                X->data, p->c, p->algo, ws, p->ws, f64 ? (const void *)&bd : (const void *)&bf,
                p->y, a->out[0]->data);
        if (ds == CUDNN_STATUS_NOT_SUPPORTED || ds == CUDNN_STATUS_BAD_PARAM)
            p->declined = true; /* this and later runs take the other path */
        else if (ds != CUDNN_STATUS_SUCCESS)
            s = KILN_FAIL(KILN_ERR_DEVICE, "node '%s' (ConvTranspose): cuDNN backward data: %s",
                          KCU_NODE(a), cudnnGetErrorString(ds));
        else if (s == KILN_OK)
            *handled = true;
    }
    if (p == &tmp) convt_plan_clear(&tmp);
    return s;
}

#endif /* KILN_HAVE_CUDNN */

kiln_status kiln__cu_conv_transpose_run(const kiln_kernel_args *a) {
    const kiln_tensor *X = a->in[0], *W = a->in[1], *B = a->n_in > 2 ? a->in[2] : NULL;
    kiln_tensor *Y = a->out[0];
    if (!kiln__cu_is_float(X->dtype) || W->dtype != X->dtype || Y->dtype != X->dtype ||
        (B && B->dtype != X->dtype))
        return sp_dtype_fail(a, X->dtype);
    if (X->rank < 3 || X->rank > 2 + KCU_MAX_SP)
        return KILN_FAIL(
            KILN_ERR_UNSUPPORTED,
            "node '%s' (ConvTranspose): %d spatial dims (the GPU kernel handles 1 to %d)",
            KCU_NODE(a), X->rank - 2, KCU_MAX_SP);
    kiln_conv_geom cg;
    KILN_TRY(kiln__convt_geom(KCU_NODE(a), a->attrs, X->rank, X->dims, W->rank, W->dims, &cg));
    if (Y->rank != X->rank || Y->dims[0] != cg.N || Y->dims[1] != cg.M)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (ConvTranspose): output shape does not match",
                         KCU_NODE(a));
    if (B && kiln__tensor_numel(B) != cg.M)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (ConvTranspose): B has %lld elements, M = %lld",
                         KCU_NODE(a), (long long)kiln__tensor_numel(B), (long long)cg.M);
    kcu_conv g;
    memset(&g, 0, sizeof g);
    g.ns = cg.ns;
    g.N = cg.N;
    g.C = cg.C;
    g.M = cg.M;
    g.G = cg.G;
    g.Cg = cg.Cg;
    g.Mg = cg.Mg;
    g.in_sz = cg.in_sz;
    g.out_sz = cg.out_sz;
    g.k_sz = cg.k_sz;
    for (int i = 0; i < cg.ns; i++) {
        if (cg.out[i] != Y->dims[2 + i])
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (ConvTranspose): output dim %d is %lld, "
                             "the attributes give %lld",
                             KCU_NODE(a), 2 + i, (long long)Y->dims[2 + i], (long long)cg.out[i]);
        g.in[i] = cg.in[i];
        g.out[i] = cg.out[i];
        g.k[i] = cg.k[i];
        g.s[i] = cg.s[i];
        g.d[i] = cg.d[i];
        g.pb[i] = cg.pb[i];
    }
    if (kiln__tensor_numel(Y) == 0) return KILN_OK;
#if KILN_HAVE_CUDNN
    bool handled = false;
    KILN_TRY(convt_cudnn(a, &g, &handled));
    if (handled) {
        if (B)
            KILN_CUDA_TRY(kcu_bias_act(X->dtype, Y->data, Y->data, B->data, NULL, g.N, g.M,
                                       g.out_sz, KILN_FC_ACT_NONE, 0.0f, 0.0f, KCU_STREAM(a)),
                          KCU_NODE(a));
        return KILN_OK;
    }
#endif
    /* Otherwise a GEMM (cuBLASLt) per image and group, col = W_g^T X_g [Mg*k_sz, in_sz],
     * then a col2im gather; the direct kernel where the GEMM's inner
     * dimension (channels per group) is small (depthwise layers) or col would
     * need too much scratch. */
    const size_t es = kiln_dtype_size(X->dtype);
    const int64_t rows = g.Mg * g.k_sz;
    const size_t col_bytes = (size_t)rows * (size_t)g.in_sz * es;
    if (g.Cg < KCU_CONVT_GEMM_MIN_CG || col_bytes == 0 || col_bytes > KCU_CONVT_COL_LIMIT) {
        KILN_CUDA_TRY(kcu_conv_transpose(X->dtype, &g, X->data, W->data, B ? B->data : NULL,
                                         Y->data, KCU_STREAM(a)),
                      KCU_NODE(a));
        return KILN_OK;
    }
    void *col = NULL;
    KILN_TRY(kiln__cuda_scratch(KCU_STATE(a), col_bytes, &col, KCU_NODE(a)));
    kiln_cuda_gemm p;
    memset(&p, 0, sizeof p);
    p.t = X->dtype;
    p.ta = true; /* A = W_g stored [Cg, Mg*k_sz] */
    p.M = rows;
    p.N = g.in_sz;
    p.K = g.Cg;
    p.batch = 1;
    p.lda = rows;
    p.ldb = g.in_sz;
    p.ldc = g.in_sz;
    p.alpha = 1.0;
    p.C = col;
    for (int64_t n = 0; n < g.N; n++)
        for (int64_t grp = 0; grp < g.G; grp++) {
            p.A = (const char *)W->data + (size_t)(grp * g.Cg * rows) * es;
            p.B = (const char *)X->data + (size_t)((n * g.C + grp * g.Cg) * g.in_sz) * es;
            KILN_TRY(kiln__cuda_gemm(a, &p));
            KILN_CUDA_TRY(kcu_convt_col2im(X->dtype, &g, col, B ? B->data : NULL, Y->data, n, grp,
                                           KCU_STREAM(a)),
                          KCU_NODE(a));
        }
    return KILN_OK;
}

/* ---- LpPool, GlobalLpPool ---------------------------------------------------------------- */

bool kiln__cu_lppool_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_pool_attrs *at = n->attrs;
    if (!sp_float_in_out(g, n) || at->n_kernel < 1 || at->n_kernel > KCU_MAX_SP) return false;
    const kiln_tinfo *x = kiln__cu_in(g, n, 0);
    return !x || x->rank < 0 || x->rank == 2 + at->n_kernel;
}

kiln_status kiln__cu_lppool_run(const kiln_kernel_args *a) {
    const kiln_pool_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    if (!kiln__cu_is_float(x->dtype) || y->dtype != x->dtype) return sp_dtype_fail(a, x->dtype);
    if (x->rank < 3 || x->rank > 2 + KCU_MAX_SP)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (LpPool): %d spatial dims (the GPU kernel handles 1 to %d)",
                         KCU_NODE(a), x->rank - 2, KCU_MAX_SP);
    kiln_pool_geom pg;
    KILN_TRY(kiln__pool_geom(KCU_NODE(a), "LpPool", at, x->rank, x->dims, &pg));
    kcu_pool g;
    memset(&g, 0, sizeof g);
    g.ns = pg.ns;
    g.planes = pg.N * pg.C;
    g.in_sz = pg.in_sz;
    g.out_sz = pg.out_sz;
    g.out_n = g.planes * g.out_sz;
    for (int i = 0; i < pg.ns; i++) {
        g.in[i] = pg.in[i];
        g.out[i] = pg.out[i];
        g.k[i] = pg.k[i];
        g.s[i] = pg.s[i];
        g.d[i] = pg.d[i];
        g.pb[i] = pg.pb[i];
        g.pe[i] = pg.pe[i];
    }
    if (g.out_n != kiln__tensor_numel(y))
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (LpPool): output has %lld elements, expected %lld", KCU_NODE(a),
                         (long long)kiln__tensor_numel(y), (long long)g.out_n);
    KILN_CUDA_TRY(kcu_lppool(x->dtype, &g, at->p, x->data, y->data, KCU_STREAM(a)), KCU_NODE(a));
    return KILN_OK;
}

bool kiln__cu_global_lppool_supports(const kiln_graph *g, const kiln_node *n) {
    return sp_float_in_out(g, n);
}

kiln_status kiln__cu_global_lppool_run(const kiln_kernel_args *a) {
    const kiln_pool_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    if (!kiln__cu_is_float(x->dtype) || a->out[0]->dtype != x->dtype)
        return sp_dtype_fail(a, x->dtype);
    if (x->rank < 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (GlobalLpPool): input rank %d < 2", KCU_NODE(a),
                         x->rank);
    KILN_CUDA_TRY(kcu_global_lppool(x->dtype, x->data, a->out[0]->data, x->dims[0] * x->dims[1],
                                    kiln__numel(x->rank - 2, x->dims + 2), at ? at->p : 2.0,
                                    KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- MaxUnpool --------------------------------------------------------------------------- */

bool kiln__cu_maxunpool_supports(const kiln_graph *g, const kiln_node *n) {
    /* output_shape (input 2) is read by the run-time inference but is not
     * one of the op's host inputs: on the GPU its values would not reach
     * it, so such nodes stay on the CPU */
    if (n->n_in > 2 && n->in[2] >= 0) return false;
    return sp_float_in_out(g, n) && kiln__cu_in_dtype(g, n, 1) == KILN_DTYPE_INT64;
}

kiln_status kiln__cu_maxunpool_run(const kiln_kernel_args *a) {
    const kiln_pool_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0], *I = a->in[1];
    kiln_tensor *y = a->out[0];
    if (!kiln__cu_is_float(x->dtype) || y->dtype != x->dtype || I->dtype != KILN_DTYPE_INT64)
        return sp_dtype_fail(a, x->dtype);
    int r = x->rank, ns = r - 2;
    if (r < 3 || y->rank != r || at->n_kernel != ns || (at->n_strides && at->n_strides != ns) ||
        (at->n_pads && at->n_pads != 2 * ns))
        return KILN_FAIL(
            KILN_ERR_MODEL,
            "node '%s' (MaxUnpool): kernel_shape/strides/pads do not match input rank %d",
            KCU_NODE(a), r);
    kcu_unpool g;
    memset(&g, 0, sizeof g);
    g.rank = r;
    g.nx = kiln__tensor_numel(x);
    g.ny = kiln__tensor_numel(y);
    if (kiln__tensor_numel(I) != g.nx)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (MaxUnpool): indices have %lld elements, X has %lld",
                         KCU_NODE(a), (long long)kiln__tensor_numel(I), (long long)g.nx);
    /* the default output shape, which the indices refer to (unpool_default) */
    g.def[0] = x->dims[0];
    g.def[1] = x->dims[1];
    for (int i = 0; i < ns; i++) {
        int64_t s = at->n_strides ? at->strides[i] : 1;
        int64_t p = at->n_pads ? at->pads[i] + at->pads[ns + i] : 0;
        g.def[2 + i] = (x->dims[2 + i] - 1) * s + at->kernel[i] - p;
    }
    for (int i = 0; i < r; i++) {
        if (g.def[i] < 0 || y->dims[i] < g.def[i])
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (MaxUnpool): output dim %d is %lld, below %lld",
                             KCU_NODE(a), i, (long long)y->dims[i], (long long)g.def[i]);
        g.ydims[i] = y->dims[i];
    }
    g.ndef = kiln__numel(r, g.def);
    KILN_CUDA_TRY(
        kcu_maxunpool(kiln_dtype_size(x->dtype), &g, x->data, I->data, y->data, KCU_STREAM(a)),
        KCU_NODE(a));
    return KILN_OK;
}

/* ---- MaxRoiPool -------------------------------------------------------------------------- */

bool kiln__cu_maxroipool_supports(const kiln_graph *g, const kiln_node *n) {
    return sp_float_in_out(g, n) && kiln__cu_in_dtype(g, n, 1) == kiln__cu_in_dtype(g, n, 0);
}

kiln_status kiln__cu_maxroipool_run(const kiln_kernel_args *a) {
    const kiln_maxroipool_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0], *R = a->in[1];
    kiln_tensor *y = a->out[0];
    if (!kiln__cu_is_float(x->dtype) || R->dtype != x->dtype || y->dtype != x->dtype)
        return sp_dtype_fail(a, x->dtype);
    if (x->rank != 4 || R->rank != 2 || R->dims[1] != 5 || at->pooled_h < 1 || at->pooled_w < 1)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (MaxRoiPool): expected X [N,C,H,W] and rois [R,5]",
                         KCU_NODE(a));
    kcu_roipool g = {.N = x->dims[0],
                     .C = x->dims[1],
                     .H = x->dims[2],
                     .W = x->dims[3],
                     .R = R->dims[0],
                     .PH = at->pooled_h,
                     .PW = at->pooled_w,
                     .scale = at->spatial_scale};
    if (kiln__tensor_numel(y) != g.R * g.C * g.PH * g.PW)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (MaxRoiPool): output shape does not match",
                         KCU_NODE(a));
    KILN_CUDA_TRY(kcu_maxroipool(x->dtype, &g, x->data, R->data, y->data, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- ReverseSequence --------------------------------------------------------------------- */

bool kiln__cu_reverse_sequence_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0), l = kiln__cu_in_dtype(g, n, 1);
    return movable(t) && kiln__cu_out_dtype(g, n, 0) == t &&
           (l == KILN_DTYPE_INT32 || l == KILN_DTYPE_INT64);
}

kiln_status kiln__cu_reverse_sequence_run(const kiln_kernel_args *a) {
    const kiln_revseq_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0], *sl = a->in[1];
    kiln_tensor *y = a->out[0];
    if (!movable(x->dtype) || y->dtype != x->dtype) return sp_dtype_fail(a, x->dtype);
    if (sl->dtype != KILN_DTYPE_INT32 && sl->dtype != KILN_DTYPE_INT64)
        return sp_dtype_fail(a, sl->dtype);
    int r = x->rank;
    int b = at->batch_axis < 0 ? at->batch_axis + r : at->batch_axis;
    int t = at->time_axis < 0 ? at->time_axis + r : at->time_axis;
    if (r < 2 || b == t || b < 0 || b > 1 || t < 0 || t > 1)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (ReverseSequence): batch_axis and time_axis must be 0 and 1",
                         KCU_NODE(a));
    if (kiln__tensor_numel(sl) != x->dims[b])
        return KILN_FAIL(
            KILN_ERR_MODEL,
            "node '%s' (ReverseSequence): sequence_lens has %lld entries for batch %lld",
            KCU_NODE(a), (long long)kiln__tensor_numel(sl), (long long)x->dims[b]);
    kcu_revseq g = {.batch_axis = b,
                    .lens_i32 = sl->dtype == KILN_DTYPE_INT32,
                    .d0 = x->dims[0],
                    .d1 = x->dims[1],
                    .inner = kiln__numel(r - 2, x->dims + 2),
                    .n = kiln__tensor_numel(x)};
    KILN_CUDA_TRY(kcu_reverse_sequence(kiln_dtype_size(x->dtype), &g, x->data, sl->data, y->data,
                                       KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- GridSample, RoiAlign ---------------------------------------------------------------- */

static bool f32_or_f64(kiln_dtype t) { return t == KILN_DTYPE_FLOAT32 || t == KILN_DTYPE_FLOAT64; }

bool kiln__cu_gridsample_supports(const kiln_graph *g, const kiln_node *n) {
    return sp_float_in_out(g, n) && f32_or_f64(kiln__cu_in_dtype(g, n, 0)) &&
           f32_or_f64(kiln__cu_in_dtype(g, n, 1));
}

kiln_status kiln__cu_gridsample_run(const kiln_kernel_args *a) {
    const kiln_gridsample_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0], *gr = a->in[1];
    kiln_tensor *y = a->out[0];
    if (!f32_or_f64(x->dtype) || !f32_or_f64(gr->dtype) || y->dtype != x->dtype)
        return sp_dtype_fail(a, x->dtype);
    if (x->rank != 4 || gr->rank != 4 || gr->dims[3] != 2 || gr->dims[0] != x->dims[0] ||
        y->rank != 4 || y->dims[2] != gr->dims[1] || y->dims[3] != gr->dims[2])
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (GridSample): expected X [N, C, H, W] and grid [N, Ho, Wo, 2]",
                         KCU_NODE(a));
    kcu_gridsample g = {.mode = at->mode,
                        .pad = at->padding_mode,
                        .align = at->align_corners != 0,
                        .x_f64 = x->dtype == KILN_DTYPE_FLOAT64,
                        .g_f64 = gr->dtype == KILN_DTYPE_FLOAT64,
                        .N = x->dims[0],
                        .C = x->dims[1],
                        .H = x->dims[2],
                        .W = x->dims[3],
                        .Ho = gr->dims[1],
                        .Wo = gr->dims[2]};
    KILN_CUDA_TRY(kcu_gridsample_run(&g, x->data, gr->data, y->data, KCU_STREAM(a)), KCU_NODE(a));
    return KILN_OK;
}

bool kiln__cu_roialign_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0), b = kiln__cu_in_dtype(g, n, 2);
    return sp_float_in_out(g, n) && f32_or_f64(t) && kiln__cu_in_dtype(g, n, 1) == t &&
           (b == KILN_DTYPE_INT32 || b == KILN_DTYPE_INT64);
}

kiln_status kiln__cu_roialign_run(const kiln_kernel_args *a) {
    const kiln_roialign_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0], *rois = a->in[1], *bi = a->in[2];
    kiln_tensor *y = a->out[0];
    if (!f32_or_f64(x->dtype) || rois->dtype != x->dtype || y->dtype != x->dtype)
        return sp_dtype_fail(a, x->dtype);
    if (bi->dtype != KILN_DTYPE_INT32 && bi->dtype != KILN_DTYPE_INT64)
        return sp_dtype_fail(a, bi->dtype);
    if (x->rank != 4 || rois->rank != 2 || rois->dims[1] != 4 ||
        kiln__tensor_numel(bi) != rois->dims[0] || at->out_h < 1 || at->out_w < 1)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (RoiAlign): expected X [N, C, H, W], rois [R, 4] and "
                         "batch_indices [R]",
                         KCU_NODE(a));
    kcu_roialign g = {.half_pixel = at->half_pixel,
                      .max_mode = at->max_mode,
                      .x_f64 = x->dtype == KILN_DTYPE_FLOAT64,
                      .bi_i32 = bi->dtype == KILN_DTYPE_INT32,
                      .N = x->dims[0],
                      .C = x->dims[1],
                      .H = x->dims[2],
                      .W = x->dims[3],
                      .R = rois->dims[0],
                      .PH = at->out_h,
                      .PW = at->out_w,
                      .sampling_ratio = at->sampling_ratio,
                      .scale = at->spatial_scale};
    if (kiln__tensor_numel(y) != g.R * g.C * g.PH * g.PW)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (RoiAlign): output shape does not match",
                         KCU_NODE(a));
    KILN_CUDA_TRY(kcu_roialign_run(&g, x->data, rois->data, bi->data, y->data, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

#else
typedef int kiln_cuda_ops_spatial_unused;
#endif
