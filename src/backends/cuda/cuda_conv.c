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
static kiln_status conv_geom(const kiln_kernel_args *a, kcu_conv *g, int64_t *pe) {
    const kiln_conv_attrs *at = a->attrs;
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

/* Runs the convolution through cuDNN. *handled = false: cuDNN declined
 * (no algorithm, unexpected output shape); the caller falls back. */
static kiln_status conv_cudnn(const kiln_kernel_args *a, const kcu_conv *g, bool *handled) {
    kiln_cuda_state *st = KCU_STATE(a);
    const char *node = KCU_NODE(a);
    const kiln_tensor *X = a->in[0], *W = a->in[1];
    kiln_tensor *Y = a->out[0];
    *handled = false;
    kiln_status s = KILN_OK;
    cudnnDataType_t dt, ct = CUDNN_DATA_FLOAT;
    cudnnMathType_t math = CUDNN_TENSOR_OP_MATH;
    switch (X->dtype) {
    case KILN_DTYPE_FLOAT32:
        dt = CUDNN_DATA_FLOAT;
        math = st->allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
        break;
    case KILN_DTYPE_FLOAT16: dt = CUDNN_DATA_HALF; break;
    case KILN_DTYPE_BFLOAT16: dt = CUDNN_DATA_BFLOAT16; break;
    default:
        dt = CUDNN_DATA_DOUBLE;
        ct = CUDNN_DATA_DOUBLE;
        math = CUDNN_DEFAULT_MATH;
        break;
    }
    /* 1-D runs as 2-D with a height of 1 */
    const int nsp = g->ns < 2 ? 2 : g->ns, nd = nsp + 2, off = nsp - g->ns;
    int xd[5], yd[5], wd[5], xs[5], ys[5], pad[3], str[3], dil[3];
    xd[0] = (int)g->N;
    xd[1] = (int)g->C;
    yd[0] = (int)g->N;
    yd[1] = (int)g->M;
    wd[0] = (int)g->M;
    wd[1] = (int)g->Cg;
    for (int i = 0; i < nsp; i++) {
        int k = i - off; /* spatial index in g, < 0: the added unit dim */
        xd[2 + i] = k < 0 ? 1 : (int)g->in[k];
        yd[2 + i] = k < 0 ? 1 : (int)g->out[k];
        wd[2 + i] = k < 0 ? 1 : (int)g->k[k];
        pad[i] = k < 0 ? 0 : (int)g->pb[k];
        str[i] = k < 0 ? 1 : (int)g->s[k];
        dil[i] = k < 0 ? 1 : (int)g->d[k];
    }
    xs[nd - 1] = ys[nd - 1] = 1;
    for (int i = nd - 2; i >= 0; i--) {
        xs[i] = xs[i + 1] * xd[i + 1];
        ys[i] = ys[i + 1] * yd[i + 1];
    }
    cudnnTensorDescriptor_t xdesc = NULL, ydesc = NULL;
    cudnnFilterDescriptor_t wdesc = NULL;
    cudnnConvolutionDescriptor_t cdesc = NULL;
    DNN_SETUP(cudnnCreateTensorDescriptor(&xdesc));
    DNN_SETUP(cudnnCreateTensorDescriptor(&ydesc));
    DNN_SETUP(cudnnCreateFilterDescriptor(&wdesc));
    DNN_SETUP(cudnnCreateConvolutionDescriptor(&cdesc));
    DNN_SETUP(cudnnSetTensorNdDescriptor(xdesc, dt, nd, xd, xs));
    DNN_SETUP(cudnnSetTensorNdDescriptor(ydesc, dt, nd, yd, ys));
    DNN_SETUP(cudnnSetFilterNdDescriptor(wdesc, dt, CUDNN_TENSOR_NCHW, nd, wd));
    DNN_SETUP(cudnnSetConvolutionNdDescriptor(cdesc, nsp, pad, str, dil, CUDNN_CROSS_CORRELATION, ct));
    DNN_SETUP(cudnnSetConvolutionGroupCount(cdesc, (int)g->G));
    DNN_SETUP(cudnnSetConvolutionMathType(cdesc, math));
    int od[5];
    if (cudnnGetConvolutionNdForwardOutputDim(cdesc, xdesc, wdesc, nd, od) != CUDNN_STATUS_SUCCESS)
        goto done;
    for (int i = 0; i < nd; i++)
        if (od[i] != yd[i]) goto done; /* asymmetric padding or ceil: not expressible */
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int np = 0;
    if (cudnnGetConvolutionForwardAlgorithm_v7(st->dnn, xdesc, wdesc, cdesc, ydesc,
                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &np,
                                               perf) != CUDNN_STATUS_SUCCESS)
        goto done;
    int pick = -1;
    for (int i = 0; i < np; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= ((size_t)4 << 30)) {
            pick = i;
            break;
        }
    if (pick < 0) goto done;
    void *ws = NULL;
    if (perf[pick].memory && (s = kiln__cuda_scratch(st, perf[pick].memory, &ws, node)) != KILN_OK)
        goto done;
    float af = 1.0f, bf = 0.0f;
    double ad = 1.0, bd = 0.0;
    const void *alpha = dt == CUDNN_DATA_DOUBLE ? (const void *)&ad : (const void *)&af;
    const void *beta = dt == CUDNN_DATA_DOUBLE ? (const void *)&bd : (const void *)&bf;
    cudnnStatus_t fs = cudnnConvolutionForward(st->dnn, alpha, xdesc, X->data, wdesc, W->data,
                                               cdesc, perf[pick].algo, ws, perf[pick].memory, beta,
                                               ydesc, Y->data);
    if (fs == CUDNN_STATUS_NOT_SUPPORTED) goto done;
    if (fs != CUDNN_STATUS_SUCCESS) {
        s = dnn_fail(node, "ConvolutionForward", fs);
        goto done;
    }
    *handled = true;
done:
    if (cdesc) cudnnDestroyConvolutionDescriptor(cdesc);
    if (wdesc) cudnnDestroyFilterDescriptor(wdesc);
    if (ydesc) cudnnDestroyTensorDescriptor(ydesc);
    if (xdesc) cudnnDestroyTensorDescriptor(xdesc);
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

kiln_status kiln__cu_conv_run(const kiln_kernel_args *a) {
    const kiln_tensor *X = a->in[0], *W = a->in[1];
    const kiln_tensor *B = a->n_in > 2 ? a->in[2] : NULL;
    kiln_tensor *Y = a->out[0];
    const char *node = KCU_NODE(a);
    if (!kiln__cu_is_float(X->dtype) || W->dtype != X->dtype || (B && B->dtype != X->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Conv): dtype %s has no CUDA kernel",
                         node, kiln_dtype_name(X->dtype));
    kcu_conv g;
    int64_t pe[KCU_MAX_SP] = {0, 0, 0};
    KILN_TRY(conv_geom(a, &g, pe));
    if (B && kiln__tensor_numel(B) != g.M)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Conv): bias has %lld elements, expected %lld",
                         node, (long long)kiln__tensor_numel(B), (long long)g.M);
    if (kiln__tensor_numel(Y) == 0) return KILN_OK;
    if (g.Cg == 1 && g.G > 1) { /* depthwise: direct, bias included */
        KILN_CUDA_TRY(kcu_conv_direct(X->dtype, &g, X->data, W->data, B ? B->data : NULL, Y->data,
                                      KCU_STREAM(a)),
                      node);
        return KILN_OK;
    }
    bool done = false;
#if KILN_HAVE_CUDNN
    bool sym = true, fits = g.N * g.C * g.in_sz < INT_MAX && g.N * g.M * g.out_sz < INT_MAX;
    for (int i = 0; i < g.ns; i++)
        if (g.pb[i] != pe[i]) sym = false;
    if (KCU_STATE(a)->dnn && sym && fits) KILN_TRY(conv_cudnn(a, &g, &done));
#endif
    if (!done) KILN_TRY(conv_gemm(a, &g));
    if (B)
        KILN_CUDA_TRY(kcu_add_channel_bias(X->dtype, Y->data, B->data, g.N, g.M, g.out_sz,
                                           KCU_STREAM(a)),
                      node);
    return KILN_OK;
}

#endif /* KILN_CUDA_NN_ATTRS */

#else
typedef int kiln_cuda_conv_disabled;
#endif
