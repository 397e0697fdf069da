/* cuda_conv.c -- Conv on the GPU (1 to 3 spatial dims, groups, dilations).
 *
 *   cuDNN (when built with it and the pads are symmetric): the legacy
 *     convolution API, algorithm from cuDNN's heuristic, workspace from the
 *     state's scratch; bias added by a small kernel.
 *   depthwise (one input channel per group): a direct kernel.
 *   otherwise: im2col into scratch + cuBLASLt GEMM per (image, group); a
 *     1x1 stride-1 unpadded convolution reads the input directly.
 * Needs kiln_conv_attrs (KILN_CUDA_NN_ATTRS). */
#if KILN_HAVE_CUDA

#include "backends/cuda/cuda_internal.h"

#if KILN_CUDA_NN_ATTRS

#include <limits.h>
#include <stddef.h>

bool kiln__cu_conv_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    kiln_dtype b = kiln__cu_in_dtype(g, n, 2);
    if (!kiln__cu_is_float(t) || kiln__cu_in_dtype(g, n, 1) != t) return false;
    if (b != KILN_DTYPE_UNDEFINED && b != t) return false;
    const kiln_tinfo *x = kiln__cu_in(g, n, 0);
    if (x && x->rank >= 0 && (x->rank < 3 || x->rank > 2 + KCU_MAX_SP)) return false;
    return true;
}

/* geometry from X, W, Y and the attributes; pe: end pads */
static kiln_status conv_geom(const kiln_kernel_args *a, const kiln_conv_attrs *at, kcu_conv *g,
                             int64_t *pe) {
    const kiln_tensor *X = a->in[0], *W = a->in[1];
    const kiln_tensor *Y = a->out[0];
    const char *node = KCU_NODE(a);
    memset(g, 0, sizeof *g);
    int ns = X->rank - 2;
    if (ns < 1 || ns > KCU_MAX_SP || W->rank != X->rank || Y->rank != X->rank)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (Conv): %d spatial dims (the GPU kernels handle 1 to %d)", node,
                         ns, KCU_MAX_SP);
    g->ns = ns;
    g->G = at->group > 0 ? at->group : 1;
    g->N = X->dims[0];
    g->C = X->dims[1];
    g->M = W->dims[0];
    g->Cg = W->dims[1];
    if (g->M % g->G || g->C != g->Cg * g->G || Y->dims[1] != g->M)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (Conv): input has %lld channels, weight is [%lld, %lld, ...], "
                         "group %lld",
                         node, (long long)g->C, (long long)g->M, (long long)g->Cg, (long long)g->G);
    g->Mg = g->M / g->G;
    g->in_sz = g->out_sz = g->k_sz = 1;
    for (int i = 0; i < ns; i++) {
        int64_t in = X->dims[2 + i], k = W->dims[2 + i];
        int64_t s = at->n_strides ? at->strides[i] : 1, d = at->n_dilations ? at->dilations[i] : 1;
        int64_t pb = at->n_pads ? at->pads[i] : 0, p_e = at->n_pads ? at->pads[ns + i] : 0;
        if (at->auto_pad == PAD_VALID) pb = p_e = 0;
        if (at->auto_pad == PAD_SAME_UPPER || at->auto_pad == PAD_SAME_LOWER) {
            int64_t out = (in + s - 1) / s, dk = (k - 1) * d + 1;
            int64_t total = (out - 1) * s + dk - in;
            if (total < 0) total = 0;
            if (at->auto_pad == PAD_SAME_UPPER) {
                pb = total / 2;
                p_e = total - pb;
            } else {
                p_e = total / 2;
                pb = total - p_e;
            }
        }
        g->in[i] = in;
        g->out[i] = Y->dims[2 + i];
        g->k[i] = k;
        g->s[i] = s;
        g->d[i] = d;
        g->pb[i] = pb;
        pe[i] = p_e;
        g->in_sz *= in;
        g->out_sz *= g->out[i];
        g->k_sz *= k;
    }
    return KILN_OK;
}

#if KILN_HAVE_CUDNN

static kiln_status dnn_fail(const char *node, const char *what, cudnnStatus_t s) {
    return KILN_FAIL(KILN_ERR_DEVICE, "node '%s': cuDNN %s failed: %s", node, what,
                     cudnnGetErrorString(s));
}

/* descriptor setup: any failure means "cuDNN declines", the caller falls back */
#define DNN_SETUP(call)                                \
    do {                                               \
        if ((call) != CUDNN_STATUS_SUCCESS) goto done; \
    } while (0)


/* The cuDNN side of one node, kept in its kiln_cuda_node (conv): the
 * descriptors and the algorithm for one geometry, dtype and math mode.
 * declined: cuDNN cannot run this geometry (the im2col path runs, without
 * asking cuDNN again). */
typedef struct conv_plan {
    kcu_conv g;
    int64_t pe[KCU_MAX_SP];
    int32_t dt, math, tactic;
    int32_t nhwc;           /* 1: X, Y (and R) hold NHWC bytes (kiln.FusedConv layout) */
    const void *w_src;      /* NHWC: the weights w_nhwc was made from */
    bool declined;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t c;
    cudnnConvolutionFwdAlgo_t algo;
    size_t ws;
    void *w_nhwc;           /* NHWC: the weights as [M, kh, kw, C] (device, owned) */
} conv_plan;

static void conv_plan_clear(conv_plan *p) {
    if (p->w_nhwc) cudaFree(p->w_nhwc);
    if (p->c) cudnnDestroyConvolutionDescriptor(p->c);
    if (p->w) cudnnDestroyFilterDescriptor(p->w);
    if (p->y) cudnnDestroyTensorDescriptor(p->y);
    if (p->x) cudnnDestroyTensorDescriptor(p->x);
    memset(p, 0, sizeof *p);
}

static void conv_plan_free(void *p) {
    if (!p) return;
    conv_plan_clear(p);
    kiln__free(p);
}

/* Largest workspace an algorithm may use. */
#define KCU_CONV_WS_LIMIT ((size_t)256 << 20)

/* Sets up plan p for geometry g (descriptors, algorithm). Leaves
 * p->declined set when cuDNN cannot run it. */
static kiln_status conv_plan_build(const kiln_kernel_args *a, const kcu_conv *g, conv_plan *p) {
    kiln_cuda_state *st = KCU_STATE(a);
    const kiln_tensor *X = a->in[0], *W = a->in[1];
    kiln_tensor *Y = a->out[0];
    cudnnDataType_t dt = (cudnnDataType_t)p->dt, ct = CUDNN_DATA_FLOAT;
    if (dt == CUDNN_DATA_DOUBLE) ct = CUDNN_DATA_DOUBLE;
    p->declined = true;
    kcu_conv_nd v; /* the geometry as cuDNN's int arrays (cuda_spatial.h) */
    kiln__cuda_conv_nd(g, false, &v);
    const int nsp = v.nsp, nd = v.nd;
    const int *xd = v.xd, *yd = v.yd, *wd = v.wd, *xs = v.xs, *ys = v.ys, *pad = v.pad,
              *str = v.str, *dil = v.dil;
    const void *wdata = W->data;
    if (p->nhwc) {
        /* channels last (2-D only): C innermost, then W, H, N */
        if (nd != 4 || g->ns != 2) goto done;
        /* the weights, [M, C, kh, kw], once as [M, kh, kw, C] */
        size_t es = kiln_dtype_size(X->dtype);
        int64_t dims[4] = {g->M, wd[2], wd[3], g->Cg};
        int64_t sst[4] = {g->Cg * wd[2] * wd[3], wd[3], 1, (int64_t)wd[2] * wd[3]};
        KILN_CUDA_TRY(cudaMalloc(&p->w_nhwc, (size_t)(dims[0] * dims[1] * dims[2] * dims[3]) * es),
                      KCU_NODE(a));
        KILN_TRY(kiln__cuda_copy(a, es, 4, dims, p->w_nhwc, NULL, W->data, sst));
        wdata = p->w_nhwc;
    }
    DNN_SETUP(cudnnCreateTensorDescriptor(&p->x));
    DNN_SETUP(cudnnCreateTensorDescriptor(&p->y));
    DNN_SETUP(cudnnCreateFilterDescriptor(&p->w));
    DNN_SETUP(cudnnCreateConvolutionDescriptor(&p->c));
    if (p->nhwc) {
        DNN_SETUP(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NHWC, dt, xd[0], xd[1], xd[2], xd[3]));
        DNN_SETUP(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NHWC, dt, yd[0], yd[1], yd[2], yd[3]));
    } else {
        DNN_SETUP(cudnnSetTensorNdDescriptor(p->x, dt, nd, xd, xs));
        DNN_SETUP(cudnnSetTensorNdDescriptor(p->y, dt, nd, yd, ys));
    }
    DNN_SETUP(cudnnSetFilterNdDescriptor(p->w, dt, p->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                         nd, wd));
    DNN_SETUP(cudnnSetConvolutionNdDescriptor(p->c, nsp, pad, str, dil, CUDNN_CROSS_CORRELATION, ct));
    DNN_SETUP(cudnnSetConvolutionGroupCount(p->c, (int)g->G));
    DNN_SETUP(cudnnSetConvolutionMathType(p->c, (cudnnMathType_t)p->math));
    int od[5];
    DNN_SETUP(cudnnGetConvolutionNdForwardOutputDim(p->c, p->x, p->w, nd, od));
    for (int i = 0; i < nd; i++)
        if (od[i] != yd[i]) goto done; /* asymmetric padding or ceil: not expressible */
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int np = 0;
    DNN_SETUP(cudnnGetConvolutionForwardAlgorithm_v7(st->dnn, p->x, p->w, p->c, p->y,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &np, perf));
    /* usable candidates in heuristic order; the tactic picks one (0: the first) */
    int cand[CUDNN_CONVOLUTION_FWD_ALGO_COUNT], nc = 0;
    size_t ws_max = 0;
    for (int i = 0; i < np; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= KCU_CONV_WS_LIMIT) {
            cand[nc++] = i;
            if (perf[i].memory > ws_max) ws_max = perf[i].memory;
        }
    if (nc == 0) goto done;
    int pick = cand[p->tactic > 0 && p->tactic < nc ? p->tactic : 0];
    p->algo = perf[pick].algo;
    p->ws = perf[pick].memory;
    if (p->tactic == 0 && st->conv_find && nc > 1) {
        /* time the candidates once, on this node's own buffers (first run only) */
        void *ws = NULL;
        KILN_TRY(kiln__cuda_scratch(st, ws_max, &ws, KCU_NODE(a)));
        cudnnConvolutionFwdAlgoPerf_t found[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int nf = 0;
        cudnnStatus_t fs = cudnnFindConvolutionForwardAlgorithmEx(
            st->dnn, p->x, X->data, p->w, wdata, p->c, p->y, Y->data,
            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &nf, found, ws, ws_max);
        if (fs == CUDNN_STATUS_SUCCESS) {
            for (int i = 0; i < nf; i++)
                if (found[i].status == CUDNN_STATUS_SUCCESS && found[i].memory <= ws_max) {
                    p->algo = found[i].algo;
                    p->ws = found[i].memory;
                    break;
                }
        } else if (fs != CUDNN_STATUS_NOT_SUPPORTED) {
            return dnn_fail(KCU_NODE(a), "FindConvolutionForwardAlgorithmEx", fs);
        }
    }
    p->declined = false;
done:
    return KILN_OK;
}

/* Runs the convolution through cuDNN. *handled = false: cuDNN declined
 * (no algorithm, unexpected output shape); the caller falls back. */
static kiln_status conv_cudnn(const kiln_kernel_args *a, const kcu_conv *g, const int64_t *pe,
                              bool nhwc, bool *handled) {
    kiln_cuda_state *st = KCU_STATE(a);
    const char *node = KCU_NODE(a);
    const kiln_tensor *X = a->in[0], *W = a->in[1];
    kiln_tensor *Y = a->out[0];
    *handled = false;
    conv_plan key;
    memset(&key, 0, sizeof key);
    key.g = *g;
    memcpy(key.pe, pe, sizeof key.pe);
    key.math = CUDNN_TENSOR_OP_MATH;
    key.tactic = kiln__cuda_tactic(a);
    key.nhwc = nhwc;
    key.w_src = nhwc ? W->data : NULL;
    switch (X->dtype) {
    case KILN_DTYPE_FLOAT32:
        key.dt = CUDNN_DATA_FLOAT;
        key.math = st->allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
        break;
    case KILN_DTYPE_FLOAT16: key.dt = CUDNN_DATA_HALF; break;
    case KILN_DTYPE_BFLOAT16: key.dt = CUDNN_DATA_BFLOAT16; break;
    default:
        key.dt = CUDNN_DATA_DOUBLE;
        key.math = CUDNN_DEFAULT_MATH;
        break;
    }
    /* the key is everything before `declined` */
    const size_t key_size = offsetof(conv_plan, declined);
    kiln_cuda_node *ns = kiln__cuda_node(a);
    conv_plan *p = ns && ns->conv_free == conv_plan_free ? ns->conv : NULL;
    conv_plan tmp;
    if (ns && !ns->conv) {
        p = kiln__calloc(1, sizeof *p);
        if (p) {
            ns->conv = p;
            ns->conv_free = conv_plan_free;
        }
    }
    if (!p) {
        memset(&tmp, 0, sizeof tmp);
        p = &tmp;
    }
    kiln_status s = KILN_OK;
    if (p == &tmp || !(p->x || p->declined) || memcmp(p, &key, key_size)) {
        conv_plan_clear(p);
        memcpy(p, &key, key_size);
        s = conv_plan_build(a, g, p);
        if (s != KILN_OK) {
            conv_plan_clear(p);
            goto out;
        }
    }
    if (p->declined) goto out;
    void *ws = NULL;
    if (p->ws && (s = kiln__cuda_scratch(st, p->ws, &ws, node)) != KILN_OK) goto out;
    float af = 1.0f, bf = 0.0f;
    double ad = 1.0, bd = 0.0;
    bool f64 = p->dt == CUDNN_DATA_DOUBLE;
    const void *alpha = f64 ? (const void *)&ad : (const void *)&af;
    const void *beta = f64 ? (const void *)&bd : (const void *)&bf;
    cudnnStatus_t fs = cudnnConvolutionForward(st->dnn, alpha, p->x, X->data, p->w,
                                               p->w_nhwc ? p->w_nhwc : W->data, p->c,
                                               p->algo, ws, p->ws, beta, p->y, Y->data);
    if (fs == CUDNN_STATUS_NOT_SUPPORTED) {
        p->declined = true;
        goto out;
    }
    if (fs != CUDNN_STATUS_SUCCESS) {
        s = dnn_fail(node, "ConvolutionForward", fs);
        goto out;
    }
    *handled = true;
out:
    if (p == &tmp) conv_plan_clear(&tmp);
    return s;
}

#endif /* KILN_HAVE_CUDNN */

/* im2col + GEMM per (image, group) */
static kiln_status conv_gemm(const kiln_kernel_args *a, const kcu_conv *g) {
    const kiln_tensor *X = a->in[0], *W = a->in[1];
    kiln_tensor *Y = a->out[0];
    const size_t es = kiln_dtype_size(X->dtype);
    bool direct = true; /* 1x1, stride 1, no padding: the input is its own im2col */
    for (int i = 0; i < g->ns; i++)
        if (g->k[i] != 1 || g->s[i] != 1 || g->pb[i] != 0 || g->out[i] != g->in[i]) direct = false;
    void *col = NULL;
    const int64_t K = g->Cg * g->k_sz;
    if (!direct)
        KILN_TRY(kiln__cuda_scratch(KCU_STATE(a), (size_t)(K * g->out_sz) * es, &col, KCU_NODE(a)));
    kiln_cuda_gemm p;
    memset(&p, 0, sizeof p);
    p.t = X->dtype;
    p.M = g->Mg;
    p.N = g->out_sz;
    p.K = K;
    p.batch = 1;
    p.lda = K;
    p.ldb = g->out_sz;
    p.ldc = g->out_sz;
    p.alpha = 1.0;
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t grp = 0; grp < g->G; grp++) {
            if (direct) {
                p.B = (const char *)X->data + (size_t)((n * g->C + grp * g->Cg) * g->in_sz) * es;
            } else {
                KILN_CUDA_TRY(kcu_im2col(X->dtype, g, X->data, n, grp, col, KCU_STREAM(a)),
                              KCU_NODE(a));
                p.B = col;
            }
            p.A = (const char *)W->data + (size_t)(grp * g->Mg * K) * es;
            p.C = (char *)Y->data + (size_t)((n * g->M + grp * g->Mg) * g->out_sz) * es;
            KILN_TRY(kiln__cuda_gemm(a, &p));
        }
    return KILN_OK;
}

/* Y = act(conv(X, W) + B + R): Conv (act NONE, R NULL) and FusedConv. */
static kiln_status conv_exec(const kiln_kernel_args *a, const kiln_conv_attrs *at, int act,
                             float alpha, float beta, const kiln_tensor *R, bool nhwc) {
    const kiln_tensor *X = a->in[0], *W = a->in[1];
    const kiln_tensor *B = a->n_in > 2 ? a->in[2] : NULL;
    kiln_tensor *Y = a->out[0];
    const char *node = KCU_NODE(a);
    if (!kiln__cu_is_float(X->dtype) || W->dtype != X->dtype || (B && B->dtype != X->dtype) ||
        (R && R->dtype != X->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s has no CUDA kernel", node,
                         a->op->name, kiln_dtype_name(X->dtype));
    kcu_conv g;
    int64_t pe[KCU_MAX_SP] = {0, 0, 0};
    KILN_TRY(conv_geom(a, at, &g, pe));
    if (B && kiln__tensor_numel(B) != g.M)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): bias has %lld elements, expected %lld",
                         node, a->op->name, (long long)kiln__tensor_numel(B), (long long)g.M);
    if (R && kiln__tensor_numel(R) != kiln__tensor_numel(Y))
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (%s): residual has %lld elements, the output %lld", node,
                         a->op->name, (long long)kiln__tensor_numel(R),
                         (long long)kiln__tensor_numel(Y));
    if (kiln__tensor_numel(Y) == 0) return KILN_OK;
    if (nhwc && (g.ns != 2 || g.G != 1))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (%s): NHWC layout needs a 2-D convolution of one group", node,
                         a->op->name);
    if (g.Cg == 1 && g.G > 1) { /* depthwise: direct, bias included */
        KILN_CUDA_TRY(kcu_conv_direct(X->dtype, &g, X->data, W->data, B ? B->data : NULL, Y->data,
                                      KCU_STREAM(a)),
                      node);
        B = NULL;
    } else {
        bool done = false;
#if KILN_HAVE_CUDNN
        bool sym = true, fits = g.N * g.C * g.in_sz < INT_MAX && g.N * g.M * g.out_sz < INT_MAX;
        for (int i = 0; i < g.ns; i++)
            if (g.pb[i] != pe[i]) sym = false;
        if (KCU_STATE(a)->dnn && sym && fits) KILN_TRY(conv_cudnn(a, &g, pe, nhwc, &done));
#endif
        if (!done && nhwc)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "node '%s' (%s): cuDNN has no NHWC kernel for this layer (%s; build "
                             "with KILN_CUDA_NHWC=0 to keep it NCHW)",
                             node, a->op->name, kiln_dtype_name(X->dtype));
        if (!done) KILN_TRY(conv_gemm(a, &g));
    }
    /* bias, residual and activation in one pass */
    /* NHWC: the channel is the innermost dim (rows of M) */
    KILN_CUDA_TRY(kcu_bias_act(X->dtype, Y->data, Y->data, B ? B->data : NULL, R ? R->data : NULL,
                               nhwc ? g.N * g.out_sz : g.N, g.M, nhwc ? 1 : g.out_sz, act, alpha,
                               beta, KCU_STREAM(a)),
                  node);
    return KILN_OK;
}

kiln_status kiln__cu_conv_run(const kiln_kernel_args *a) {
    return conv_exec(a, a->attrs, KCU_ACT_NONE, 0.0f, 0.0f, NULL, false);
}

#if KILN_CUDA_FUSED_CONV

_Static_assert((int)KCU_ACT_RELU == (int)KILN_FC_ACT_RELU &&
                   (int)KCU_ACT_CLIP == (int)KILN_FC_ACT_CLIP &&
                   (int)KCU_ACT_LEAKY_RELU == (int)KILN_FC_ACT_LEAKY_RELU &&
                   (int)KCU_ACT_SIGMOID == (int)KILN_FC_ACT_SIGMOID &&
                   (int)KCU_ACT_SILU == (int)KILN_FC_ACT_SILU &&
                   (int)KCU_ACT_HARD_SWISH == (int)KILN_FC_ACT_HARD_SWISH &&
                   (int)KCU_ACT_COUNT == (int)KILN_FC_ACT_COUNT,
               "kcu activations must match kiln.FusedConv's");

bool kiln__cu_fused_conv_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_fused_conv_attrs *at = n->attrs;
    if (!at || at->act < 0 || at->act >= KILN_FC_ACT_COUNT) return false;
    if (at->has_residual != (n->n_in > 3)) return false;
    if (!kiln__cu_conv_supports(g, n)) return false;
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    if (t != KILN_DTYPE_FLOAT32 && !kiln__cu_infer_keeps_dtype(g, n)) return false;
    return !at->has_residual || kiln__cu_in_dtype(g, n, 3) == t;
}

kiln_status kiln__cu_fused_conv_run(const kiln_kernel_args *a) {
    const kiln_fused_conv_attrs *at = a->attrs;
    if (at->act < 0 || at->act >= KILN_FC_ACT_COUNT || at->has_residual != (a->n_in > 3))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (FusedConv): bad attributes (act %d, residual %d)",
                         KCU_NODE(a), (int)at->act, (int)at->has_residual);
    kiln_kernel_args c = *a;
    c.n_in = a->n_in > 3 ? 3 : a->n_in;
    const int32_t both = KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
    if (at->layout != 0 && at->layout != both)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (FusedConv): layout %d (the CUDA kernels read NCHW, or NHWC "
                         "for input and output together)", KCU_NODE(a), (int)at->layout);
    return conv_exec(&c, &at->conv, at->act, at->alpha, at->beta,
                     at->has_residual ? a->in[3] : NULL, at->layout == both);
}

#endif /* KILN_CUDA_FUSED_CONV */

#endif /* KILN_CUDA_NN_ATTRS */

#else
typedef int kiln_cuda_conv_disabled;
#endif
