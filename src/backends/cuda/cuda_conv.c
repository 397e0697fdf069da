/* cuda_conv.c -- Conv and kiln.FusedConv on the GPU (1 to 3 spatial dims,
 * groups, dilations).
 *
 *   fp16/bf16 (cuDNN builds): conv + bias + residual + activation as ONE
 *     cuDNN operation graph (cuda_dnn_graph.c), fp32 accumulation, run by
 *     the engine config the tactic names (timed by the builder) or the
 *     heuristics' first; NHWC or NCHW strides; asymmetric pads.
 *   otherwise, or where no engine config runs the graph: cuDNN's legacy
 *     convolution API (symmetric pads; algorithm timed on the first run),
 *     then one epilogue pass act(y + bias + residual);
 *   grouped (several input channels a group), NHWC: kiln's tensor-core
 *     kernel with the epilogue inside (k_gconv.cu), or cuDNN's NHWC graph
 *     configs or legacy algorithm, as the tactic says;
 *   depthwise (one input channel per group), NHWC: kiln's kernel with the
 *     epilogue inside (k_dwconv.cu), or cuDNN's grouped graph where the
 *     tactic names one of its configs; NCHW: kiln's tiled kernel with the
 *     epilogue inside (2-D, one output channel per group), else a direct
 *     kernel;
 *   without cuDNN: im2col into scratch + cuBLASLt GEMM per (image, group);
 *     a 1x1 stride-1 unpadded convolution reads the input directly;
 *   tactics GEMM and PATCH (timed by the builder against cuDNN's): a 1x1
 *     layer over a row-major input, or a non-overlapping unpadded one
 *     (patchify), as ONE cuBLASLt GEMM with its epilogue (conv_as_gemm). */
#if KILN_HAVE_CUDA

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/k_dwconv.h"
#include "backends/cuda/k_gconv.h"
#include "core/plan_cache.h"
#include "core/prep_pool.h"


#include <limits.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

bool kiln__cu_conv_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    kiln_dtype b = kiln__cu_in_dtype(g, n, 2);
    if (!kiln__cu_is_float(t) || kiln__cu_in_dtype(g, n, 1) != t) return false;
    if (b != KILN_DTYPE_UNDEFINED && b != t) return false;
    const kiln_tinfo *x = kiln__cu_in(g, n, 0);
    if (x && x->rank >= 0 && (x->rank < 3 || x->rank > 2 + KCU_MAX_SP)) return false;
    return true;
}

/* geometry from the dims of X, W, Y and the attributes; pe: end pads */
static kiln_status conv_geom_dims(const char *node, const kiln_conv_attrs *at, int xr, const int64_t *xd,
                                  int wr, const int64_t *wd, int yr, const int64_t *yd, kcu_conv *g,
                                  int64_t *pe) {
    memset(g, 0, sizeof *g);
    int ns = xr - 2;
    if (ns < 1 || ns > KCU_MAX_SP || wr != xr || yr != xr)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (Conv): %d spatial dims (the GPU kernels handle 1 to %d)", node,
                         ns, KCU_MAX_SP);
    g->ns = ns;
    g->G = at->group > 0 ? at->group : 1;
    g->N = xd[0];
    g->C = xd[1];
    g->M = wd[0];
    g->Cg = wd[1];
    if (g->M % g->G || g->C != g->Cg * g->G || yd[1] != g->M)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (Conv): input has %lld channels, weight is [%lld, %lld, ...], "
                         "group %lld",
                         node, (long long)g->C, (long long)g->M, (long long)g->Cg, (long long)g->G);
    g->Mg = g->M / g->G;
    g->in_sz = g->out_sz = g->k_sz = 1;
    for (int i = 0; i < ns; i++) {
        int64_t in = xd[2 + i], k = wd[2 + i];
        int64_t s = at->n_strides ? at->strides[i] : 1, d = at->n_dilations ? at->dilations[i] : 1;
        int64_t pb = at->n_pads ? at->pads[i] : 0, p_e = at->n_pads ? at->pads[ns + i] : 0;
        if (at->auto_pad == PAD_VALID) pb = p_e = 0;
        if (at->auto_pad == PAD_SAME_UPPER || at->auto_pad == PAD_SAME_LOWER)
            (void)kiln__nn_same_pads(at->auto_pad, in, k, s, d, &pb, &p_e);
        g->in[i] = in;
        g->out[i] = yd[2 + i];
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

static kiln_status conv_geom(const kiln_kernel_args *a, const kiln_conv_attrs *at, kcu_conv *g,
                             int64_t *pe) {
    const kiln_tensor *X = a->in[0], *W = a->in[1], *Y = a->out[0];
    return conv_geom_dims(KCU_NODE(a), at, X->rank, X->dims, W->rank, W->dims, Y->rank, Y->dims, g, pe);
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

/* The legacy-API side of one node: the descriptors and the algorithm for
 * one geometry, dtype and math mode. declined: cuDNN cannot run this
 * geometry (the im2col path runs, without asking cuDNN again). */
typedef struct conv_plan {
    kcu_conv g;
    int64_t pe[KCU_MAX_SP];
    int32_t dt, math;
    int32_t nhwc;           /* 1: X, Y (and R) hold NHWC bytes (kiln.FusedConv layout) */
    int32_t pin;            /* the forward algorithm the tactic pins, -1: found by timing */
    bool declined;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t c;
    cudnnConvolutionFwdAlgo_t algo;
    size_t ws;
} conv_plan;

static void conv_plan_destroy(void *v) {
    conv_plan *p = v;
    if (p->c) cudnnDestroyConvolutionDescriptor(p->c);
    if (p->w) cudnnDestroyFilterDescriptor(p->w);
    if (p->y) cudnnDestroyTensorDescriptor(p->y);
    if (p->x) cudnnDestroyTensorDescriptor(p->x);
    kiln__free(p);
}

/* the key is everything before `declined` */
static const kiln_plan_type conv_plans = {0, offsetof(conv_plan, declined), KILN_PLAN_CACHE_CAP, conv_plan_destroy};

/* The graph-API side: one fused operation graph (conv + bias + residual +
 * activation) and its execution plan per key. */
typedef struct gconv_key {
    kcu_conv g;
    int64_t pe[KCU_MAX_SP];
    int32_t dt, nhwc, tactic, act, has_b, has_r;
    float alpha, beta;      /* the activation's parameters (0 where it has none) */
    int32_t al[5];          /* byte alignments (<= 16) of X, W, B, R, Y */
    int32_t pad_;
} gconv_key;
typedef struct gconv_plan {
    gconv_key key;
    bool declined;          /* no engine config runs this graph (legacy path) */
    bool fell_back;         /* the key's config is missing here: the heuristics' first runs it */
    float hs[2];            /* the composed activations' by-value scale and shift (hard swish:
                               1/6, 1/2; hard sigmoid: alpha, beta; the variant pack points here) */
    kcu_dg dg;
    kcu_dg_plan plan;
} gconv_plan;

static void gconv_plan_destroy(void *v) {
    gconv_plan *p = v;
    kcu_dg_plan_free(&p->plan);
    kcu_dg_free(&p->dg);
    kiln__free(p);
}

static const kiln_plan_type gconv_plans = {offsetof(gconv_plan, key), sizeof(gconv_key), KILN_PLAN_CACHE_CAP,
                                           gconv_plan_destroy};

#endif /* KILN_HAVE_CUDNN */

/* The per-node state of Conv/FusedConv (kiln_cuda_node.conv). */
typedef struct conv_state {
#if KILN_HAVE_CUDNN
    /* plans kept by shape (core/plan_cache.h): cuDNN's Find timed every
     * algorithm anew at each change (a served ResNet-50 took 0.5 s per batch) */
    kiln_plan_cache legacy;  /* conv_plan */
    bool found;             /* the algorithm cuDNN's Find chose at the first shape: ... */
    cudnnConvolutionFwdAlgo_t found_algo; /* ... every later shape runs it where it can */
    kiln_plan_cache gp;      /* gconv_plan */
#endif
    /* NHWC layers: the weights as [M, kh, kw, C] for cuDNN (w[0]) and as
     * [kh * kw, C] for kiln's depthwise kernel (w[1], XV_DW): a depthwise
     * layer whose stored cuDNN config declines a new batch runs kiln's
     * kernel there and cuDNN's at the others, each with its own copy, made
     * once (one buffer for both made the other form again at every run:
     * two cudaFree + cudaMalloc per run, which also ended CUDA Graph
     * captures) */
    struct conv_w {
        void *p;            /* device, owned */
        const void *src;    /* made from these weights ... */
        size_t bytes;
        int variant;        /* ... for this input variant (XV_*) */
    } w[2];
    void *xbuf;             /* layout Y_NHWC alone: the input converted to NHWC (device, owned) */
    size_t xbuf_bytes;
    bool warned;            /* the stored tactic was missing once (warned) */
} conv_state;

static void conv_state_clear(conv_state *s) {
#if KILN_HAVE_CUDNN
    kiln__plan_cache_clear(&s->legacy, &conv_plans);
    kiln__plan_cache_clear(&s->gp, &gconv_plans);
#endif
    for (int i = 0; i < 2; i++)
        if (s->w[i].p) cudaFree(s->w[i].p);
    if (s->xbuf) cudaFree(s->xbuf);
    memset(s, 0, sizeof *s);
}

static void conv_state_free(void *p) {
    if (!p) return;
    conv_state_clear(p);
    kiln__free(p);
}

/* The node's conv state, or *tmp (cleared) when the args carry none: the
 * caller then clears tmp after the run. */
static conv_state *conv_state_of(const kiln_kernel_args *a, conv_state *tmp) {
    kiln_cuda_node *ns = kiln__cuda_node(a);
    if (ns && !ns->conv) {
        ns->conv = kiln__calloc(1, sizeof(conv_state));
        if (ns->conv) ns->conv_free = conv_state_free;
    }
    if (ns && ns->conv && ns->conv_free == conv_state_free) return ns->conv;
    memset(tmp, 0, sizeof *tmp);
    return tmp;
}

/* How an NHWC depthwise layer runs (FusedConv's tactic): kiln's kernel
 * (kcu_dwconv_nhwc; tactic 0 and KCU_CONV_TACTIC_DW) or one of cuDNN's
 * engine configs for the fused grouped graph (kcu_dg_is_id). */
static bool conv_is_depthwise(const kcu_conv *g) { return g->Cg == 1 && g->G > 1; }

/* Depthwise NHWC layers with kiln's kernel: the weights [C, 1, kh, kw] as
 * [kh * kw, C] (made once per weight buffer, kept in the node's state). */
#define XV_DW 3
/* The node's buffer of the weights a->in[1] rearranged for variant v
 * (`bytes` long, into *buf): *fresh = true when it was (re)made and must be
 * filled. */
static kiln_status w_buffer(const kiln_kernel_args *a, conv_state *cs, size_t bytes, int v, void **buf,
                            bool *fresh) {
    const void *src = a->in[1]->data;
    struct conv_w *w = &cs->w[v == XV_DW];
    *fresh = !(w->p && w->src == src && w->bytes == bytes && w->variant == v);
    if (*fresh) {
        if (w->p) cudaFree(w->p);
        w->p = NULL;
        KILN_CUDA_TRY(cudaMalloc(&w->p, bytes ? bytes : 1), KCU_NODE(a));
        w->src = src;
        w->bytes = bytes;
        w->variant = v;
    }
    *buf = w->p;
    return KILN_OK;
}

static kiln_status dw_weights(const kiln_kernel_args *a, const kcu_conv *g, conv_state *cs, const void **out) {
    size_t es = kiln_dtype_size(a->in[1]->dtype);
    bool fresh = false;
    void *buf = NULL;
    KILN_TRY(w_buffer(a, cs, (size_t)(g->M * g->k_sz) * es, XV_DW, &buf, &fresh));
    int64_t dims[2] = {g->k_sz, g->M}, sst[2] = {1, g->k_sz};
    if (fresh) KILN_TRY(kiln__cuda_copy(a, es, 2, dims, buf, NULL, a->in[1]->data, sst));
    *out = buf;
    return KILN_OK;
}

/* The depthwise kernels' geometry of 2-D layer g with its epilogue. */
static kcu_dw_nhwc dw_geom(const kcu_conv *g, int act, float alpha, float beta) {
    kcu_dw_nhwc d = {.N = g->N, .C = g->C, .H = g->in[0], .W = g->in[1], .Ho = g->out[0], .Wo = g->out[1],
                     .kh = g->k[0], .kw = g->k[1], .sh = g->s[0], .sw = g->s[1], .dh = g->d[0],
                     .dw = g->d[1], .ph = g->pb[0], .pw = g->pb[1], .act = act, .alpha = alpha,
                     .beta = beta};
    return d;
}

/* y = act(dwconv(x) + bias + r) over NHWC tensors by kiln's kernel. */
static kiln_status dw_nhwc_run(const kiln_kernel_args *a, const kcu_conv *g, int act, float alpha, float beta,
                               const kiln_tensor *B, const kiln_tensor *R) {
    conv_state tmp, *cs = conv_state_of(a, &tmp);
    const void *wt = NULL;
    kiln_status s = dw_weights(a, g, cs, &wt);
    if (s == KILN_OK) {
        kcu_dw_nhwc d = dw_geom(g, act, alpha, beta);
        cudaError_t e = kcu_dwconv_nhwc(a->in[0]->dtype, &d, a->in[0]->data, wt, B ? B->data : NULL,
                                        R ? R->data : NULL, a->out[0]->data, KCU_STREAM(a));
        if (e != cudaSuccess) s = kiln__cuda_fail(e, KCU_NODE(a), "kcu_dwconv_nhwc");
    }
    if (cs == &tmp) conv_state_clear(&tmp); /* (the copy is ordered before the free's sync) */
    return s;
}

/* A grouped layer with several input channels a group (RegNet, ResNeXt) */
static bool conv_is_grouped(const kcu_conv *g) { return g->G > 1 && g->Cg > 1; }

/* Grouped NHWC layers with kiln's kernel: the weights [M, Cg, kh, kw] as
 * [M, kh, kw, Cg] (made once per weight buffer, kept in the node's state) */
#define XV_GC 4
static kiln_status gc_weights(const kiln_kernel_args *a, const kcu_conv *g, conv_state *cs, const void **out) {
    size_t es = kiln_dtype_size(a->in[1]->dtype);
    bool fresh = false;
    void *buf = NULL;
    KILN_TRY(w_buffer(a, cs, (size_t)(g->M * g->k_sz * g->Cg) * es, XV_GC, &buf, &fresh));
    int64_t dims[4] = {g->M, g->k[0], g->k[1], g->Cg}, sst[4] = {g->Cg * g->k_sz, g->k[1], 1, g->k_sz};
    if (fresh) KILN_TRY(kiln__cuda_copy(a, es, 4, dims, buf, NULL, a->in[1]->data, sst));
    *out = buf;
    return KILN_OK;
}

/* y = act(gconv(x) + bias + r) over NHWC tensors by kiln's kernel, bm
 * pixels a block (0: the kernel's choice). */
static kiln_status gc_nhwc_run(const kiln_kernel_args *a, const kcu_conv *g, int act, float alpha, float beta,
                               const kiln_tensor *B, const kiln_tensor *R, int bm) {
    conv_state tmp, *cs = conv_state_of(a, &tmp);
    const void *wt = NULL;
    kiln_status s = gc_weights(a, g, cs, &wt);
    if (s == KILN_OK) {
        kcu_gc_nhwc d = {.N = g->N, .H = g->in[0], .W = g->in[1], .Ho = g->out[0], .Wo = g->out[1], .G = g->G,
                         .Cg = g->Cg, .Mg = g->Mg, .kh = g->k[0], .kw = g->k[1], .sh = g->s[0], .sw = g->s[1],
                         .dh = g->d[0], .dw = g->d[1], .ph = g->pb[0], .pw = g->pb[1], .act = act, .alpha = alpha,
                         .beta = beta, .bm = bm};
        cudaError_t e = kcu_gconv_nhwc(a->in[0]->dtype, &d, a->in[0]->data, wt, B ? B->data : NULL,
                                       R ? R->data : NULL, a->out[0]->data, KCU_STREAM(a));
        if (e != cudaSuccess) s = kiln__cuda_fail(e, KCU_NODE(a), "kcu_gconv_nhwc");
    }
    if (cs == &tmp) conv_state_clear(&tmp); /* (the copy is ordered before the free's sync) */
    return s;
}

#if KILN_HAVE_CUDNN

/* How an NCHW input reaches cuDNN in a layer with layout Y_NHWC alone (the
 * layer converts it: ResNet's 3-channel stem): the user bits of its tactic
 * (kcu_dg_is_id), timed against each other by the builder.
 *   XV_C8   NHWC, channels padded to a multiple of 8
 *   XV_C4   NHWC, channels padded to a multiple of 4
 *   XV_S2D  space-to-depth: a stride-2 convolution with kernel K on C
 *           channels is a stride-1 convolution with kernel ceil(K/2) on 4C
 *           channels (padded to 8) of the 2x2 blocks of the padded input:
 *           y[o] = sum_k w[k] x[2o - p + k] = sum_{j,r} w[2j + r] s[o + j][r]
 *           with s[l][r] = x[2l + r - p] (0 outside x). */
enum { XV_C8 = 0, XV_C4 = 1, XV_S2D = 2 };

static int tactic_xv(int32_t t) {
    return kcu_dg_is_id(t) ? (int)((t & KCU_DG_ID_USER) >> KCU_DG_ID_USER_SHIFT) : XV_C8;
}

static bool xv_ok(const kcu_conv *g, int v) {
    if (v == XV_C8 || v == XV_C4) return true;
    return v == XV_S2D && g->ns == 2 && g->G == 1 && g->s[0] == 2 && g->s[1] == 2 && g->d[0] == 1 && g->d[1] == 1;
}

/* The geometry cuDNN runs for variant v of the NCHW-input layer g. */
static void xv_geom(const kcu_conv *g, const int64_t *pe, int v, kcu_conv *o, int64_t *ope) {
    *o = *g;
    memcpy(ope, pe, KCU_MAX_SP * sizeof *ope);
    if (v != XV_S2D) {
        int64_t m = v == XV_C4 ? 4 : 8;
        o->C = o->Cg = (g->C + m - 1) / m * m;
        return;
    }
    o->C = o->Cg = (4 * g->C + 7) / 8 * 8;
    o->in_sz = o->k_sz = 1;
    for (int i = 0; i < 2; i++) {
        int64_t J = (g->k[i] + 1) / 2;
        o->in[i] = g->out[i] + J - 1;
        o->k[i] = J;
        o->s[i] = o->d[i] = 1;
        o->pb[i] = ope[i] = 0;
        o->in_sz *= o->in[i];
        o->k_sz *= J;
    }
}

/* NHWC layers: the weights [M, C, kh, kw], once as the NHWC filter cuDNN
 * reads for geometry g (cuda_conv's variant v): [M, kh, kw, Cg] with the
 * channels past C zero (XV_C8/XV_C4; Cg = C for NHWC inputs), or the
 * space-to-depth filter [M, J, J, Cg], channel c * 4 + rh * 2 + rw at (jh,
 * jw) holding w[c, 2 jh + rh, 2 jw + rw] (0 past the kernel). */
static kiln_status nhwc_weights(const kiln_kernel_args *a, const kcu_conv *g, int v, conv_state *cs,
                                const void **out) {
    const kiln_tensor *W = a->in[1];
    size_t es = kiln_dtype_size(W->dtype);
    if (g->ns != 2 || W->rank != 4 || W->dims[1] * (v == XV_S2D ? 4 : 1) > g->Cg)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': NHWC weights need a 2-D convolution", KCU_NODE(a));
    int64_t K0 = W->dims[2], K1 = W->dims[3], C = W->dims[1], J0 = g->k[0], J1 = g->k[1], Cp = g->Cg;
    size_t bytes = (size_t)(g->M * J0 * J1 * Cp) * es;
    bool fresh = false;
    void *buf = NULL;
    KILN_TRY(w_buffer(a, cs, bytes, v, &buf, &fresh));
    *out = buf;
    if (!fresh) return KILN_OK;
    char *dst = buf;
    const char *src = W->data;
    if (v != XV_S2D && C == Cp) {
        int64_t dims[4] = {g->M, K0, K1, C};
        int64_t sst[4] = {C * K0 * K1, K1, 1, K0 * K1};
        KILN_TRY(kiln__cuda_copy(a, es, 4, dims, dst, NULL, src, sst));
    } else {
        KILN_CUDA_TRY(cudaMemsetAsync(dst, 0, bytes, KCU_STREAM(a)), KCU_NODE(a));
        int rs = v == XV_S2D ? 2 : 1; /* 2x2 blocks: one copy per (rh, rw) */
        for (int rh = 0; rh < rs; rh++)
            for (int rw = 0; rw < rs; rw++) {
                int64_t n0 = (K0 - rh + rs - 1) / rs, n1 = (K1 - rw + rs - 1) / rs; /* taps of this phase */
                int64_t dims[4] = {g->M, n0, n1, C};
                int64_t sst[4] = {C * K0 * K1, rs * K1, rs, K0 * K1};
                int64_t dstst[4] = {J0 * J1 * Cp, J1 * Cp, Cp, rs * rs};
                KILN_TRY(kiln__cuda_copy(a, es, 4, dims, dst + (size_t)(rh * rs + rw) * es, dstst,
                                         src + (size_t)(rh * K1 + rw) * es, sst));
            }
    }
    return KILN_OK;
}

/* Layout Y_NHWC alone: X [N, C, H, W] NCHW into the node's buffer as the
 * NHWC input of geometry gx (variant v of the layer's geometry g),
 * described by *xc. */
static kiln_status nhwc_input(const kiln_kernel_args *a, int v, const kcu_conv *g, const kcu_conv *gx,
                              conv_state *cs, kiln_tensor *xc) {
    const kiln_tensor *X = a->in[0];
    size_t es = kiln_dtype_size(X->dtype);
    size_t bytes = (size_t)(gx->N * gx->C * gx->in_sz) * es;
    if (!cs->xbuf || cs->xbuf_bytes < bytes) {
        if (cs->xbuf) cudaFree(cs->xbuf);
        cs->xbuf = NULL;
        cs->xbuf_bytes = 0;
        KILN_CUDA_TRY(cudaMalloc(&cs->xbuf, bytes ? bytes : 1), KCU_NODE(a));
        cs->xbuf_bytes = bytes;
    }
    if (v == XV_S2D)
        KILN_CUDA_TRY(kcu_s2d_nhwc(X->dtype, g->N, g->C, g->in[0], g->in[1], g->pb[0], g->pb[1], gx->in[0],
                                   gx->in[1], gx->C, X->data, cs->xbuf, KCU_STREAM(a)),
                      KCU_NODE(a));
    else
        KILN_CUDA_TRY(kcu_nchw_to_nhwc(X->dtype, g->N, g->C, g->in_sz, gx->C, X->data, cs->xbuf, KCU_STREAM(a)),
                      KCU_NODE(a));
    *xc = *X;
    xc->dims[1] = gx->C;
    xc->dims[2] = gx->in[0];
    xc->dims[3] = gx->in[1];
    xc->data = cs->xbuf;
    return KILN_OK;
}

/* Largest workspace an algorithm may use. */
#define KCU_CONV_WS_LIMIT ((size_t)256 << 20)

/* Whether the legacy API takes geometry g: symmetric padding (pe: the end
 * pads), tensors of fewer than INT_MAX elements. */
static bool legacy_geom_ok(const kcu_conv *g, const int64_t *pe) {
    for (int i = 0; i < g->ns; i++)
        if (g->pb[i] != pe[i]) return false;
    return g->N * g->C * g->in_sz < INT_MAX && g->N * g->M * g->out_sz < INT_MAX;
}

/* Whether cuDNN's heuristic entry pf may run a layer: it runs it, within
 * the workspace limit, rounding as a direct algorithm does where the engine
 * must (accurate: kcu_conv_accurate_only). */
static bool legacy_algo_ok(const cudnnConvolutionFwdAlgoPerf_t *pf, bool accurate) {
    return pf->status == CUDNN_STATUS_SUCCESS && pf->memory <= KCU_CONV_WS_LIMIT &&
           !(accurate && kcu_fwd_algo_rounds_more(pf->algo));
}

/* The legacy key of a layer of geometry g and dtype t (pin: the algorithm
 * the tactic pins, -1 none). */
static void conv_plan_key(const kiln_cuda_state *st, const kcu_conv *g, const int64_t *pe, bool nhwc, kiln_dtype t,
                          int pin, conv_plan *key) {
    memset(key, 0, sizeof *key);
    key->g = *g;
    memcpy(key->pe, pe, sizeof key->pe);
    key->math = CUDNN_TENSOR_OP_MATH;
    key->nhwc = nhwc;
    key->pin = pin;
    switch (t) {
    case KILN_DTYPE_FLOAT32:
        key->dt = CUDNN_DATA_FLOAT;
        key->math = st->allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
        break;
    case KILN_DTYPE_FLOAT16: key->dt = CUDNN_DATA_HALF; break;
    case KILN_DTYPE_BFLOAT16: key->dt = CUDNN_DATA_BFLOAT16; break;
    default:
        key->dt = CUDNN_DATA_DOUBLE;
        key->math = CUDNN_DEFAULT_MATH;
        break;
    }
}

/* The descriptors of legacy plan p (its key set) and cuDNN's heuristic
 * list of algorithms for them (perf, *np); false where cuDNN declines the
 * geometry (asymmetric padding, a ceil-mode output, NHWC other than 2-D). */
static bool conv_plan_describe(const kiln_cuda_state *st, conv_plan *p,
                               cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT], int *np) {
    const kcu_conv *g = &p->g;
    cudnnDataType_t dt = (cudnnDataType_t)p->dt, ct = CUDNN_DATA_FLOAT;
    if (dt == CUDNN_DATA_DOUBLE) ct = CUDNN_DATA_DOUBLE;
    kcu_conv_nd v; /* the geometry as cuDNN's int arrays (cuda_spatial.h) */
    kiln__cuda_conv_nd(g, false, &v);
    const int nsp = v.nsp, nd = v.nd;
    const int *xd = v.xd, *yd = v.yd, *wd = v.wd, *xs = v.xs, *ys = v.ys, *pad = v.pad,
              *str = v.str, *dil = v.dil;
    if (p->nhwc && (nd != 4 || g->ns != 2)) goto done; /* channels last: 2-D only */
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
    DNN_SETUP(cudnnGetConvolutionForwardAlgorithm_v7(st->dnn, p->x, p->w, p->c, p->y,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, np, perf));
    return true;
done:
    return false;
}

/* Sets up legacy plan p for geometry g (descriptors, algorithm: the one the
 * tactic pins, else the candidates timed once per node, at its first
 * shape, on its own buffers unless KILN_CUDNN_FIND=0: later shapes run the
 * algorithm found where it runs them within the workspace limit, else the
 * heuristics' first). Leaves p->declined set when cuDNN cannot run it (the
 * pinned algorithm: not within the workspace limit or not for this shape). */
static kiln_status conv_plan_build(const kiln_kernel_args *a, const void *wdata, conv_plan *p, conv_state *cs) {
    kiln_cuda_state *st = KCU_STATE(a);
    const kiln_tensor *X = a->in[0];
    kiln_tensor *Y = a->out[0];
    cudnnDataType_t dt = (cudnnDataType_t)p->dt;
    p->declined = true;
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int np = 0;
    if (!conv_plan_describe(st, p, perf, &np)) return KILN_OK;
    const bool accurate = kcu_conv_accurate_only(st, dt);
    if (p->pin >= 0) {
        size_t pws = 0;
        bool listed = false;
        for (int i = 0; i < np; i++) listed |= (int)perf[i].algo == p->pin && perf[i].status == CUDNN_STATUS_SUCCESS;
        /* (an algorithm that rounds more, in an engine that must not: a file's
         * tactic the builder would not have listed, declined) */
        const cudnnConvolutionFwdAlgo_t pa = (cudnnConvolutionFwdAlgo_t)p->pin;
        if (!listed || (accurate && kcu_fwd_algo_rounds_more(pa)) ||
            cudnnGetConvolutionForwardWorkspaceSize(st->dnn, p->x, p->w, p->c, p->y, pa, &pws) !=
                CUDNN_STATUS_SUCCESS ||
            pws > KCU_CONV_WS_LIMIT)
            return KILN_OK;
        p->algo = pa;
        p->ws = pws;
        p->declined = false;
        goto named;
    }
    int nc = 0, first = -1;
    size_t ws_max = 0;
    for (int i = 0; i < np; i++)
        if (legacy_algo_ok(&perf[i], accurate)) {
            if (first < 0) first = i;
            nc++;
            if (perf[i].memory > ws_max) ws_max = perf[i].memory;
        }
    if (nc == 0) return KILN_OK;
    p->algo = perf[first].algo;
    p->ws = perf[first].memory;
    size_t fws = 0;
    if (cs->found &&
        cudnnGetConvolutionForwardWorkspaceSize(st->dnn, p->x, p->w, p->c, p->y, cs->found_algo, &fws) ==
            CUDNN_STATUS_SUCCESS &&
        fws <= KCU_CONV_WS_LIMIT) {
        p->algo = cs->found_algo;
        p->ws = fws;
    } else if (st->conv_find && nc > 1 && !cs->found) {
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
                if (found[i].status == CUDNN_STATUS_SUCCESS && found[i].memory <= ws_max &&
                    !(accurate && kcu_fwd_algo_rounds_more(found[i].algo))) {
                    p->algo = found[i].algo;
                    p->ws = found[i].memory;
                    cs->found = true;
                    cs->found_algo = p->algo;
                    break;
                }
        } else if (fs != CUDNN_STATUS_NOT_SUPPORTED) {
            return dnn_fail(KCU_NODE(a), "FindConvolutionForwardAlgorithmEx", fs);
        }
    }
    p->declined = false;
named:;
    char pn[256];
    if (st->verbose)
        fprintf(stderr, "kiln: cuda: node '%s': cuDNN legacy convolution algorithm %d (%s)%s%s\n",
                kiln_printable(KCU_NODE(a), pn, sizeof pn), (int)p->algo, kcu_fwd_algo_name(p->algo),
                accurate ? "" : ", fast math", p->pin >= 0 ? ", pinned by the tactic" : "");
    return KILN_OK;
}

/* Runs the convolution alone through cuDNN's legacy API (the epilogue is
 * the caller's), with algorithm pin (-1: found by timing). *handled =
 * false: cuDNN declined (no algorithm, unexpected output shape, the pinned
 * algorithm not here); the caller falls back. */
static kiln_status conv_cudnn(const kiln_kernel_args *a, const kcu_conv *g, const int64_t *pe,
                              bool nhwc, int xv, int pin, conv_state *cs, bool *handled) {
    kiln_cuda_state *st = KCU_STATE(a);
    const char *node = KCU_NODE(a);
    const kiln_tensor *X = a->in[0];
    kiln_tensor *Y = a->out[0];
    *handled = false;
    const void *wdata = a->in[1]->data;
    if (nhwc) KILN_TRY(nhwc_weights(a, g, xv, cs, &wdata));
    conv_plan key;
    conv_plan_key(st, g, pe, nhwc, X->dtype, pin, &key);
    conv_plan *p = kiln__plan_cache_find(&cs->legacy, &conv_plans, &key);
    if (!p) {
        p = kiln__calloc(1, sizeof *p);
        if (!p) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s': cuDNN convolution plan", node);
        memcpy(p, &key, conv_plans.key_size);
        kiln_status s = conv_plan_build(a, wdata, p, cs);
        if (s != KILN_OK) {
            conv_plan_destroy(p);
            return s;
        }
        kiln__plan_cache_put(&cs->legacy, &conv_plans, p);
    }
    if (p->declined) return KILN_OK;
    void *ws = NULL;
    if (p->ws) KILN_TRY(kiln__cuda_scratch(st, p->ws, &ws, node));
    float af = 1.0f, bf = 0.0f;
    double ad = 1.0, bd = 0.0;
    bool f64 = p->dt == CUDNN_DATA_DOUBLE;
    const void *alpha = f64 ? (const void *)&ad : (const void *)&af;
    const void *beta = f64 ? (const void *)&bd : (const void *)&bf;
    cudnnStatus_t fs = cudnnConvolutionForward(st->dnn, alpha, p->x, X->data, p->w, wdata, p->c,
                                               p->algo, ws, p->ws, beta, p->y, Y->data);
    if (fs == CUDNN_STATUS_NOT_SUPPORTED) {
        p->declined = true;
        return KILN_OK;
    }
    if (fs != CUDNN_STATUS_SUCCESS) return dnn_fail(node, "ConvolutionForward", fs);
    *handled = true;
    return KILN_OK;
}

/* conv_cudnn with the algorithm the layer's tactic pins, where it pins one:
 * where that algorithm does not run the layer here (another shape of its
 * profile, another cuDNN or GPU), one found by timing runs it, with a
 * warning (once per node), except in a tuning state, where the tactic fails. */
static kiln_status conv_legacy(const kiln_kernel_args *a, const kcu_conv *g, const int64_t *pe, bool nhwc, int xv,
                               conv_state *cs, bool *handled) {
    kiln_cuda_state *st = KCU_STATE(a);
    const int pin = kcu_conv_legacy_algo(kiln__cuda_tactic(a));
    KILN_TRY(conv_cudnn(a, g, pe, nhwc, xv, pin, cs, handled));
    if (*handled || pin < 0) return KILN_OK;
    const char *an = kcu_fwd_algo_name((cudnnConvolutionFwdAlgo_t)pin);
    if (st->strict_tactics)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': cuDNN's legacy algorithm %s does not run this layer here",
                         KCU_NODE(a), an);
    char pn[256];
    if (!cs->warned)
        fprintf(stderr,
                "kiln: warning: node '%s': cuDNN's legacy algorithm %s (chosen at build) does not run input "
                "[%lld, %lld, ...] with this cuDNN %zu and GPU; using the fastest of those that do\n",
                kiln_printable(KCU_NODE(a), pn, sizeof pn), an, (long long)g->N, (long long)g->C, cudnnGetVersion());
    cs->warned = true;
    return conv_cudnn(a, g, pe, nhwc, xv, -1, cs, handled);
}

/* ---- the fused graph ------------------------------------------------------------------ */

enum { UID_X = 1, UID_W = 2, UID_B = 3, UID_R = 4, UID_Y = 5, UID_HS_SCALE = 6, UID_HS_SHIFT = 7, UID_VIRT = 100 };

_Static_assert(KILN_FC_ACT_COUNT == 8, "gconv_act, gconv_composed: handle every KILN_FC_ACT_* (then update this count)");

/* The activations the graph composes of several pointwise operations
 * (no cuDNN mode of their own; gconv_graph): hard swish, hard sigmoid. */
static bool gconv_composed(int act) { return act == KILN_FC_ACT_HARD_SWISH || act == KILN_FC_ACT_HARD_SIGMOID; }

/* The graph's activation as a pointwise mode (false: not expressible,
 * the legacy path with the epilogue kernel runs). RELU_FWD's clips are
 * used only where both readings of a lower clip agree (0). */
static bool gconv_act(int act, float alpha, float beta, cudnnPointwiseMode_t *mode, kcu_dg_pw *pw) {
    memset(pw, 0, sizeof *pw);
    pw->relu_upper = 3.4028234663852886e38;
    pw->swish_beta = 1.0;
    switch (act) {
    case KILN_FC_ACT_RELU: *mode = CUDNN_POINTWISE_RELU_FWD; return true;
    case KILN_FC_ACT_CLIP:
        if (alpha != 0.0f || !(beta > 0.0f)) return false;
        *mode = CUDNN_POINTWISE_RELU_FWD;
        pw->relu_upper = beta;
        return true;
    case KILN_FC_ACT_LEAKY_RELU:
        *mode = CUDNN_POINTWISE_RELU_FWD;
        pw->relu_slope = alpha;
        return true;
    case KILN_FC_ACT_SIGMOID: *mode = CUDNN_POINTWISE_SIGMOID_FWD; return true;
    case KILN_FC_ACT_SILU: *mode = CUDNN_POINTWISE_SWISH_FWD; return true;
    case KILN_FC_ACT_NONE:
    case KILN_FC_ACT_HARD_SWISH:
    case KILN_FC_ACT_HARD_SIGMOID: return false; /* none, or no cuDNN pointwise mode (gconv_graph composes them) */
    default: return false;
    }
}

/* Whether a FusedConv of these dtypes/attributes may run as one graph. */
static bool gconv_eligible(kiln_dtype t, int act, float alpha, float beta) {
    cudnnPointwiseMode_t m;
    kcu_dg_pw pw;
    if (t != KILN_DTYPE_FLOAT16 && t != KILN_DTYPE_BFLOAT16) return false;
    return act == KILN_FC_ACT_NONE || gconv_composed(act) || gconv_act(act, alpha, beta, &m, &pw);
}

/* The operation graph of key k: conv -> [+ bias] -> [+ residual] -> [act],
 * fp32 in between, the I/O dtype at both ends. Hard swish, which has no
 * pointwise mode, is v * min(max(v / 6 + 1/2, 0), 1): MUL and ADD by
 * by-value scalars (UID_HS_*), RELU_FWD clipped to [0, 1], MUL by v; hard
 * sigmoid min(max(alpha v + beta, 0), 1) the same without the last MUL
 * (the scalars alpha and beta). */
static cudnnStatus_t gconv_graph(cudnnHandle_t h, const gconv_key *k, kcu_dg *dg) {
    kcu_conv_nd v;
    kiln__cuda_conv_nd(&k->g, false, &v);
    const int nd = v.nd, off = v.nsp - k->g.ns;
    int64_t xd[5], yd[5], wd[5], xs[5], ys[5], wst[5], bd[5], bs[5];
    int64_t pre[3], post[3], str[3], dil[3];
    /* X, W and Y with every spatial size 1 ([N, C, 1, 1]: SE blocks, pooled
     * heads) hold the same bytes in NCHW and NHWC, and their NCHW strides
     * ([C, 1, 1, 1]) give C, H and W the same stride 1: cuDNN 9.19's engines
     * 4 and 7 computed wrong values or NaN for such fp16 graphs at batch 32
     * (the legacy API right), so they are described channels-last, the
     * layout whose strides cuDNN's NHWC engines take */
    bool cl = k->nhwc || nd == 4;
    for (int i = 2; i < nd && cl && !k->nhwc; i++) cl = v.xd[i] == 1 && v.yd[i] == 1 && v.wd[i] == 1;
    for (int i = 0; i < nd; i++) {
        xd[i] = v.xd[i];
        yd[i] = v.yd[i];
        wd[i] = v.wd[i];
        bd[i] = i == 1 ? k->g.M : 1;
        bs[i] = i == 0 ? k->g.M : i == 1 || !cl ? 1 : k->g.M; /* [M,1,M,M] NHWC, [M,1,1,1] NCHW */
    }
    for (int i = 0; i < v.nsp; i++) {
        pre[i] = v.pad[i];
        post[i] = i - off < 0 ? 0 : k->pe[i - off];
        str[i] = v.str[i];
        dil[i] = v.dil[i];
    }
    if (cl) { /* 4-D: C innermost, then W, H, N */
        if (nd != 4) return CUDNN_STATUS_NOT_SUPPORTED;
        const int64_t *d[3] = {xd, yd, wd};
        int64_t *s[3] = {xs, ys, wst};
        for (int t = 0; t < 3; t++) {
            s[t][1] = 1;
            s[t][3] = d[t][1];
            s[t][2] = d[t][3] * d[t][1];
            s[t][0] = d[t][2] * d[t][3] * d[t][1];
        }
    } else {
        xs[nd - 1] = ys[nd - 1] = wst[nd - 1] = 1;
        for (int i = nd - 2; i >= 0; i--) {
            xs[i] = xs[i + 1] * xd[i + 1];
            ys[i] = ys[i + 1] * yd[i + 1];
            wst[i] = wst[i + 1] * wd[i + 1];
        }
    }
    cudnnDataType_t dt = (cudnnDataType_t)k->dt;
    cudnnPointwiseMode_t mode = CUDNN_POINTWISE_RELU_FWD;
    kcu_dg_pw pw;
    const bool act = k->act != KILN_FC_ACT_NONE, hs = gconv_composed(k->act), hsw = k->act == KILN_FC_ACT_HARD_SWISH;
    if (act && !hs && !gconv_act(k->act, k->alpha, k->beta, &mode, &pw)) return CUDNN_STATUS_NOT_SUPPORTED;
    int left = (k->has_b ? 1 : 0) + (k->has_r ? 1 : 0) + (act ? hs ? 3 + hsw : 1 : 0); /* pointwise ops to come */
    int64_t vuid = UID_VIRT;
    cudnnBackendDescriptor_t X, W, B, R, cur, next;
#define GC_TRY(call)                                          \
    do {                                                      \
        cudnnStatus_t gc_s_ = (call);                         \
        if (gc_s_ != CUDNN_STATUS_SUCCESS) return gc_s_;      \
    } while (0)
    /* the output of the next operation: virtual fp32, or Y after the last one */
#define GC_NEXT(out)                                                                                   \
    GC_TRY(left > 0 ? kcu_dg_tensor(dg, vuid++, CUDNN_DATA_FLOAT, nd, yd, ys, 16, true, &(out))       \
                    : kcu_dg_tensor(dg, UID_Y, dt, nd, yd, ys, k->al[4], false, &(out)))
    GC_TRY(kcu_dg_tensor(dg, UID_X, dt, nd, xd, xs, k->al[0], false, &X));
    GC_TRY(kcu_dg_tensor(dg, UID_W, dt, nd, wd, wst, k->al[1], false, &W));
    GC_NEXT(cur);
    GC_TRY(kcu_dg_conv_fwd(dg, X, W, cur, v.nsp, pre, post, str, dil, CUDNN_DATA_FLOAT));
    if (k->has_b) {
        left--;
        GC_TRY(kcu_dg_tensor(dg, UID_B, dt, nd, bd, bs, k->al[2], false, &B));
        GC_NEXT(next);
        GC_TRY(kcu_dg_pointwise(dg, CUDNN_POINTWISE_ADD, cur, B, next, NULL));
        cur = next;
    }
    if (k->has_r) {
        left--;
        GC_TRY(kcu_dg_tensor(dg, UID_R, dt, nd, yd, ys, k->al[3], false, &R));
        GC_NEXT(next);
        GC_TRY(kcu_dg_pointwise(dg, CUDNN_POINTWISE_ADD, cur, R, next, NULL));
        cur = next;
    }
    if (hs) {
        cudnnBackendDescriptor_t scale, shift, t1, t2, t3;
        kcu_dg_pw unit = {.relu_lower = 0, .relu_upper = 1, .relu_slope = 0, .swish_beta = 1};
        GC_TRY(kcu_dg_scalar(dg, UID_HS_SCALE, nd, &scale));
        GC_TRY(kcu_dg_scalar(dg, UID_HS_SHIFT, nd, &shift));
        left--;
        GC_NEXT(t1);
        GC_TRY(kcu_dg_pointwise(dg, CUDNN_POINTWISE_MUL, cur, scale, t1, NULL));
        left--;
        GC_NEXT(t2);
        GC_TRY(kcu_dg_pointwise(dg, CUDNN_POINTWISE_ADD, t1, shift, t2, NULL));
        left--;
        GC_NEXT(t3);
        GC_TRY(kcu_dg_pointwise(dg, CUDNN_POINTWISE_RELU_FWD, t2, NULL, t3, &unit));
        if (hsw) {
            left--;
            GC_NEXT(next);
            GC_TRY(kcu_dg_pointwise(dg, CUDNN_POINTWISE_MUL, cur, t3, next, NULL));
        }
    } else if (act) {
        left--;
        GC_NEXT(next);
        GC_TRY(kcu_dg_pointwise(dg, mode, cur, NULL, next, &pw));
    }
#undef GC_NEXT
#undef GC_TRY
    return kcu_dg_finalize(dg, h);
}

/* The key of a FusedConv's graph (alignments from the pointers; NULL: 16). */
static void gconv_key_make(gconv_key *k, const kcu_conv *g, const int64_t *pe, kiln_dtype t, bool nhwc,
                           int32_t tactic, int act, float alpha, float beta, bool has_b, bool has_r,
                           const void *const *ptrs) {
    memset(k, 0, sizeof *k);
    k->g = *g;
    memcpy(k->pe, pe, sizeof k->pe);
    k->dt = t == KILN_DTYPE_BFLOAT16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    k->nhwc = nhwc;
    k->tactic = tactic;
    k->act = act;
    if (act == KILN_FC_ACT_LEAKY_RELU || act == KILN_FC_ACT_CLIP || act == KILN_FC_ACT_HARD_SIGMOID) k->alpha = alpha;
    if (act == KILN_FC_ACT_CLIP || act == KILN_FC_ACT_HARD_SIGMOID) k->beta = beta;
    k->has_b = has_b;
    k->has_r = has_r;
    for (int i = 0; i < 5; i++) k->al[i] = ptrs && ptrs[i] ? kcu_dg_align(ptrs[i]) : 16;
}

/* What gconv_make made of a key. */
enum { GM_DECLINED = 0, GM_MADE = 1, GM_MISSING = 2 };

/* Makes, into p (cleared), the graph of key k and the plan of its tactic
 * on handle h: GM_MADE; GM_DECLINED when no engine config runs the graph;
 * GM_MISSING when k->tactic is a config id that cannot be made here (then,
 * with `fallback`, the plan of the first config in the heuristics' order
 * that can be made, if any). A tactic that is no config id: the first
 * config that can be made. Touches nothing but p and h: the plan threads
 * (KILN_CUDA_PLAN_THREADS) call it with their own handles, and it gives the
 * same answer for the same key on any thread. */
static int gconv_make(cudnnHandle_t h, const gconv_key *k, bool fallback, gconv_plan *p) {
    kcu_dg_cfgs cfgs;
    memset(&cfgs, 0, sizeof cfgs);
    p->key = *k;
    p->declined = true;
    int r = GM_DECLINED;
    if (gconv_graph(h, k, &p->dg) != CUDNN_STATUS_SUCCESS || kcu_dg_configs(&p->dg, &cfgs) != CUDNN_STATUS_SUCCESS ||
        cfgs.n == 0)
        goto done;
    if (kcu_dg_is_id(k->tactic)) {
        int f = 0;
        while (f < cfgs.n && cfgs.id[f] != (k->tactic & ~KCU_DG_ID_USER)) f++;
        if (f < cfgs.n && kcu_dg_plan_make(h, &cfgs.cfg[f], k->tactic, &p->plan) == CUDNN_STATUS_SUCCESS) {
            p->declined = false;
            r = GM_MADE;
            goto done;
        }
        r = GM_MISSING;
        if (!fallback) goto done;
    }
    for (int i = 0; i < cfgs.n; i++)
        if (kcu_dg_plan_make(h, &cfgs.cfg[i], cfgs.id[i], &p->plan) == CUDNN_STATUS_SUCCESS) {
            p->declined = false;
            if (r != GM_MISSING) r = GM_MADE;
            break;
        }
done:
    kcu_dg_cfgs_free(&cfgs);
    return r;
}

/* The plan threads' window follows the layer being set up (node: its
 * name's pointer, as it was announced; cuda_conv.c's plan threads below). */
static void plan_window(kiln_cuda_state *st, const char *node) {
    for (int g = st->plan_at; g < st->plan_group; g++)
        if (st->plan_nodes[g] == node) {
            if (g != st->plan_at || g == 0) kiln__prep_advance(st->plan_prep, g);
            st->plan_at = g;
            return;
        }
}

/* The plan of key k in the node's state (made on first use; in a tuning
 * state with plan threads, taken from them when they made it ahead). A
 * stored tactic that cannot be made here falls back to the heuristics'
 * order with a warning (once per node), except in a tuning state
 * (strict_tactics), where it fails. p->declined: no config runs the graph. */
static kiln_status gconv_plan_for(const kiln_kernel_args *a, conv_state *cs, const gconv_key *k,
                                  gconv_plan **out) {
    gconv_plan *p = kiln__plan_cache_find(&cs->gp, &gconv_plans, k);
    *out = p;
    if (p) return KILN_OK;
    kiln_cuda_state *st = KCU_STATE(a);
    int r = -1;
    if (st->plan_prep && st->strict_tactics) {
        plan_window(st, KCU_NODE(a));
        int status;
        void *made = NULL;
        if (kiln__prep_take(st->plan_prep, k, st->dnn, &status, &made) && made) {
            p = made;
            r = status;
        }
    }
    if (!p && !(p = kiln__calloc(1, sizeof *p)))
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s': cuDNN graph plan", KCU_NODE(a));
    kiln__plan_cache_put(&cs->gp, &gconv_plans, p);
    *out = p;
    if (r < 0) r = gconv_make(st->dnn, k, !st->strict_tactics, p);
    if (r != GM_MISSING) return KILN_OK;
    p->fell_back = !st->strict_tactics;
    char name[48];
    kcu_dg_id_name(k->tactic, name, sizeof name);
    if (st->strict_tactics)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': cuDNN engine config %s cannot be made here", KCU_NODE(a),
                         name);
    char pn[256];
    if (!cs->warned)
        fprintf(stderr,
                "kiln: warning: node '%s': cuDNN engine config %s (chosen at build) is not available for "
                "input [%lld, %lld, ...] with this cuDNN %zu and GPU; using cuDNN's heuristics\n",
                kiln_printable(KCU_NODE(a), pn, sizeof pn), name, (long long)k->g.N, (long long)k->g.C,
                cudnnGetVersion());
    cs->warned = true;
    return KILN_OK;
}

/* Runs conv + bias + residual + activation as one cuDNN graph. *handled =
 * false: not a graph layer (dtype, activation, tactic LEGACY) or no engine
 * config runs it: the caller takes the legacy path. */
/* Whether cuDNN's graph computes activation act with RELU_FWD's clamps (ReLU,
 * Clip, LeakyRelu; HardSigmoid's composition), which engines may compute as
 * max/min that turn NaN into a number (conv_graph_run's tactic 0). */
static bool gconv_act_clamps(int act) {
    return act == KILN_FC_ACT_RELU || act == KILN_FC_ACT_CLIP || act == KILN_FC_ACT_LEAKY_RELU ||
           act == KILN_FC_ACT_HARD_SIGMOID;
}

static kiln_status conv_graph_run(const kiln_kernel_args *a, const kcu_conv *g, const int64_t *pe, bool nhwc,
                                  int xv, int act, float alpha, float beta, const kiln_tensor *B,
                                  const kiln_tensor *R, conv_state *cs, bool *handled) {
    kiln_cuda_state *st = KCU_STATE(a);
    const kiln_tensor *X = a->in[0];
    kiln_tensor *Y = a->out[0];
    int32_t tactic = kiln__cuda_tactic(a);
    *handled = false;
    if (kcu_conv_is_legacy(tactic) || !gconv_eligible(X->dtype, act, alpha, beta)) return KILN_OK;
    /* Tactic 0 (a build without tuning: nothing timed, nothing checked) runs the
     * heuristics' first config, whose fused ReLU turned NaN into 0 on an H100
     * (fp16 random CUDA graphs 53 and 101, issue 20): with a clamping
     * activation its graph stops before the activation, and kiln's epilogue
     * (NaN kept) applies it after. The configs a tuned build times keep the
     * activation inside; the builder's NaN probe drops those that lose NaN. */
    bool act_after = tactic == 0 && gconv_act_clamps(act);
    const void *wdata = a->in[1]->data;
    if (nhwc) KILN_TRY(nhwc_weights(a, g, xv, cs, &wdata));
    const void *ptrs[5] = {X->data, wdata, B ? B->data : NULL, R ? R->data : NULL, Y->data};
    gconv_key k;
    gconv_key_make(&k, g, pe, X->dtype, nhwc, tactic, act_after ? KILN_FC_ACT_NONE : act, alpha, beta, B != NULL,
                   R != NULL, ptrs);
    gconv_plan *p;
    KILN_TRY(gconv_plan_for(a, cs, &k, &p));
    if (p->fell_back && !act_after && gconv_act_clamps(act)) {
        /* the stored config is missing here (another cuDNN or GPU): the heuristics'
         * first config runs the layer, unprobed, so as for tactic 0 */
        act_after = true;
        gconv_key_make(&k, g, pe, X->dtype, nhwc, 0, KILN_FC_ACT_NONE, alpha, beta, B != NULL, R != NULL, ptrs);
        KILN_TRY(gconv_plan_for(a, cs, &k, &p));
    }
    if (p->declined) return KILN_OK;
    void *ws = NULL;
    if (p->plan.ws) KILN_TRY(kiln__cuda_scratch(st, (size_t)p->plan.ws, &ws, KCU_NODE(a)));
    int64_t uids[7];
    void *vp[7];
    int n = 0;
    static const int64_t uid_of[5] = {UID_X, UID_W, UID_B, UID_R, UID_Y};
    for (int i = 0; i < 5; i++)
        if (ptrs[i]) {
            uids[n] = uid_of[i];
            vp[n++] = (void *)ptrs[i];
        }
    if (gconv_composed(k.act)) { /* the by-value scale and shift */
        p->hs[0] = k.act == KILN_FC_ACT_HARD_SWISH ? 1.0f / 6.0f : k.alpha;
        p->hs[1] = k.act == KILN_FC_ACT_HARD_SWISH ? 0.5f : k.beta;
        uids[n] = UID_HS_SCALE;
        vp[n++] = &p->hs[0];
        uids[n] = UID_HS_SHIFT;
        vp[n++] = &p->hs[1];
    }
    cudnnStatus_t s = kcu_dg_execute(st->dnn, &p->plan, n, uids, vp, ws);
    if (s != CUDNN_STATUS_SUCCESS) return dnn_fail(KCU_NODE(a), "graph execution", s);
    if (act_after) /* NHWC: the channel is the innermost dim (rows of M) */
        KILN_CUDA_TRY(kcu_bias_act(X->dtype, Y->data, Y->data, NULL, NULL, nhwc ? g->N * g->out_sz : g->N, g->M,
                                   nhwc ? 1 : g->out_sz, act, alpha, beta, KCU_STREAM(a)),
                      KCU_NODE(a));
    *handled = true;
    return KILN_OK;
}

#endif /* KILN_HAVE_CUDNN */

/* ---- convolutions as one GEMM (tactics GEMM and PATCH) ------------------------------- */

/* A 1x1 unpadded layer of one group whose input is a row-major [N * P, C]
 * matrix: NHWC, or every spatial size 1 (the same bytes in both layouts) */
static bool gemm_direct_ok(const kcu_conv *g, const int64_t *pe, bool nhwc, bool x_nchw) {
    if (g->G != 1) return false;
    for (int i = 0; i < g->ns; i++)
        if (g->k[i] != 1 || g->pb[i] != 0 || pe[i] != 0 || g->out[i] != g->in[i]) return false;
    return (nhwc && !x_nchw) || g->in_sz == 1;
}

/* A 2-D layer of one group without padding or dilation whose kernel is at
 * most its stride: every input element is in one patch at most */
static bool gemm_patch_ok(const kcu_conv *g, const int64_t *pe) {
    if (g->G != 1 || g->ns != 2) return false;
    for (int i = 0; i < 2; i++)
        if (g->pb[i] != 0 || pe[i] != 0 || g->d[i] != 1 || g->k[i] > g->s[i]) return false;
    return true;
}

/* The PATCH tactic's weights [M, Kp]: W's columns in the patches' order,
 * (c, i, k) for an NCHW input and (i, k, c) for an NHWC one, then the bias
 * in column C kh kw where B is given, zeros up to Kp (variant XV_PATCH + 1
 * for the NHWC order, + 2 with the bias). */
#define XV_PATCH 4
static kiln_status patch_weights(const kiln_kernel_args *a, const kcu_conv *g, bool nhwc_in, int64_t Kp,
                                 const kiln_tensor *B, conv_state *cs, const void **out) {
    const kiln_tensor *W = a->in[1];
    const size_t es = kiln_dtype_size(W->dtype);
    const size_t bytes = (size_t)(g->M * Kp) * es;
    const int64_t C = g->C, kh = g->k[0], kw = g->k[1], ckk = C * kh * kw;
    bool fresh = false;
    void *buf = NULL;
    KILN_TRY(w_buffer(a, cs, bytes, XV_PATCH + (nhwc_in ? 1 : 0) + (B ? 2 : 0), &buf, &fresh));
    *out = buf;
    if (!fresh) return KILN_OK;
    KILN_CUDA_TRY(cudaMemsetAsync(buf, 0, bytes, KCU_STREAM(a)), KCU_NODE(a));
    if (nhwc_in) {
        int64_t dims[4] = {g->M, kh, kw, C}, dst[4] = {Kp, kw * C, C, 1}, src[4] = {ckk, kw, 1, kh * kw};
        KILN_TRY(kiln__cuda_copy(a, es, 4, dims, buf, dst, W->data, src));
    } else {
        int64_t dims[2] = {g->M, ckk}, dst[2] = {Kp, 1}, src[2] = {ckk, 1};
        KILN_TRY(kiln__cuda_copy(a, es, 2, dims, buf, dst, W->data, src));
    }
    if (B) {
        int64_t dims[1] = {g->M}, dst[1] = {Kp}, src[1] = {1};
        KILN_TRY(kiln__cuda_copy(a, es, 1, dims, (char *)buf + (size_t)ckk * es, dst, B->data, src));
    }
    return KILN_OK;
}

/* The 1x1 convolution on rows (cuda_internal.h): the one place that says
 * what of a layer's bias and activation cuBLASLt's epilogue runs. The bias
 * (BIAS), and ReLU (RELU / RELU_BIAS, which keep NaN as kiln's kernels do:
 * checked on an H100, docs/cuda.md); the other activations have no
 * epilogue of kiln's form, so the caller runs them as one kcu_bias_act pass. */
bool kiln__cu_conv_rows_gemm(kiln_cuda_gemm *p, kiln_dtype t, int64_t rows, int64_t K, int64_t M, bool has_b,
                             int act, bool has_r) {
    memset(p, 0, sizeof *p);
    p->t = t;
    p->M = rows;
    p->N = M;
    p->K = K;
    p->batch = 1;
    p->alpha = 1.0;
    p->beta = has_r ? 1.0 : 0.0;
    p->tb = true;
    p->lda = p->ldb = K;
    p->ldc = M;
    const bool act_in = act == KILN_FC_ACT_RELU;
    p->epi = (has_b ? KCU_EPI_BIAS : KCU_EPI_NONE) | (act_in ? KCU_EPI_RELU : KCU_EPI_NONE);
    return act_in;
}

/* The GEMM of a layer run as one (no pointers): K, the columns of X (GEMM)
 * or of the patches (PATCH: C kh kw, + 1 for the bias column where the
 * output is NCHW, rounded up to 8 so that rows stay 16-byte aligned);
 * rows_out: Y is [N P, M] row-major (NHWC, or every spatial size 1), the 1x1
 * convolution on rows (kiln__cu_conv_rows_gemm) with the bias in its
 * epilogue (*bias_in / *act_in: what is in the GEMM); else per image Y_n
 * [M, P] = W' [M, K] patches_n [P, K]^T, a strided batch sharing W', the
 * bias a column of W'. */
static void conv_gemm_shape(const kcu_conv *g, bool patch, bool nhwc, kiln_dtype t, bool has_b, int act, bool has_r,
                            kiln_cuda_gemm *p, bool *bias_in, bool *act_in) {
    const bool rows_out = nhwc || g->out_sz == 1;
    const int64_t K = patch ? (g->C * g->k_sz + (has_b && !rows_out ? 1 : 0) + 7) / 8 * 8 : g->C;
    *bias_in = has_b;
    if (rows_out) { /* Y [N P, M] = X [N P, K] W [M, K]^T */
        *act_in = kiln__cu_conv_rows_gemm(p, t, g->N * g->out_sz, K, g->M, has_b, act, has_r);
        return;
    }
    /* the same product with W' [M, K] as the rows, one per image (nothing in the epilogue) */
    kiln__cu_conv_rows_gemm(p, t, g->M, K, g->out_sz, false, KILN_FC_ACT_NONE, has_r);
    p->batch = g->N;
    p->sb = g->out_sz * K;
    p->sc = g->M * g->out_sz;
    *act_in = false;
}

/* Y = act(conv(X, W) + B + R) as one cuBLASLt GEMM (conv_gemm_shape):
 * tactic GEMM reads X as it is, PATCH gathers its patches into scratch
 * first (kcu_patches; columns in the order (c, i, k) for an NCHW input,
 * (i, k, c) for an NHWC one, the weights rearranged to match once,
 * patch_weights). The residual is the GEMM's C (beta 1); what the GEMM
 * leaves of the bias and activation: one kcu_bias_act pass after it.
 * `cand`: cuBLASLt's heuristic candidate. *handled = false: the tactic
 * does not fit this geometry (the caller takes cuDNN's heuristics, as for
 * tactic 0). */
static kiln_status conv_as_gemm(const kiln_kernel_args *a, const kcu_conv *g, const int64_t *pe, int32_t kind,
                                int32_t cand, bool nhwc, bool x_nchw, int act, float alpha, float beta,
                                const kiln_tensor *B, const kiln_tensor *R, bool *handled) {
    *handled = false;
    const bool patch = kind == KCU_CONV_TACTIC_PATCH;
    if (patch ? !gemm_patch_ok(g, pe) : !gemm_direct_ok(g, pe, nhwc, x_nchw)) return KILN_OK;
    const kiln_tensor *X = a->in[0];
    kiln_tensor *Y = a->out[0];
    const size_t es = kiln_dtype_size(X->dtype);
    const bool rows_out = nhwc || g->out_sz == 1;
    kiln_cuda_gemm p;
    bool bias_in = false, act_in = false;
    conv_gemm_shape(g, patch, nhwc, X->dtype, B != NULL, act, R != NULL, &p, &bias_in, &act_in);
    p.tactic = cand;
    const void *xm = X->data, *wm = a->in[1]->data;
    conv_state tmp, *cs = NULL;
    kiln_status s = KILN_OK;
    if (patch) {
        const bool bias_col = bias_in && !rows_out;
        cs = conv_state_of(a, &tmp);
        s = patch_weights(a, g, nhwc && !x_nchw, p.K, bias_col ? B : NULL, cs, &wm);
        void *col = NULL;
        if (s == KILN_OK) s = kiln__cuda_scratch(KCU_STATE(a), (size_t)(g->N * g->out_sz * p.K) * es, &col, KCU_NODE(a));
        if (s == KILN_OK) {
            kcu_patch pp = {.N = g->N, .C = g->C, .H = g->in[0], .W = g->in[1], .Ho = g->out[0], .Wo = g->out[1],
                            .kh = g->k[0], .kw = g->k[1], .sh = g->s[0], .sw = g->s[1], .Kp = p.K,
                            .nhwc_in = nhwc && !x_nchw, .one_col = bias_col};
            cudaError_t e = kcu_patches(X->dtype, &pp, X->data, col, KCU_STREAM(a));
            if (e != cudaSuccess) s = kiln__cuda_fail(e, KCU_NODE(a), "kcu_patches");
        }
        xm = col;
    }
    if (s == KILN_OK) {
        p.A = rows_out ? xm : wm;
        p.B = rows_out ? wm : xm;
        p.C = Y->data;
        p.Cin = R ? R->data : NULL;
        p.bias = (p.epi & KCU_EPI_BIAS) ? B->data : NULL;
        s = kiln__cuda_gemm(a, &p);
    }
    if (bias_in) B = NULL;
    if (act_in) act = KILN_FC_ACT_NONE;
    if (s == KILN_OK && (B || act != KILN_FC_ACT_NONE)) {
        cudaError_t e = kcu_bias_act(X->dtype, Y->data, Y->data, B ? B->data : NULL, NULL,
                                     rows_out ? g->N * g->out_sz : g->N, g->M, rows_out ? 1 : g->out_sz, act,
                                     alpha, beta, KCU_STREAM(a));
        if (e != cudaSuccess) s = kiln__cuda_fail(e, KCU_NODE(a), "kcu_bias_act");
    }
    if (cs == &tmp) conv_state_clear(&tmp); /* (the copies are ordered before the free's sync) */
    if (s == KILN_OK) *handled = true;
    return s;
}

/* A 1x1 layer of one group on [N, C, 1, 1] values (every spatial size 1,
 * no padding): Y [N, M] = X [N, C] W [M, C]^T in any layout, with an
 * activation kcu_conv_gemv knows */
static bool gemv_ok(const kcu_conv *g, const int64_t *pe, int act) {
    if (g->G != 1 || g->in_sz != 1 || g->out_sz != 1 || act < 0 || act >= KILN_FC_ACT_COUNT) return false;
    for (int i = 0; i < g->ns; i++)
        if (g->k[i] != 1 || g->pb[i] != 0 || pe[i] != 0) return false;
    return true;
}

/* Tactic KCU_CONV_TACTIC_GEMV: kcu_conv_gemv, epilogue included;
 * *handled = false where the layer is not one (tactic 0's path then) */
static kiln_status conv_as_gemv(const kiln_kernel_args *a, const kcu_conv *g, const int64_t *pe, int act,
                                float alpha, float beta, const kiln_tensor *B, const kiln_tensor *R, bool *handled) {
    *handled = false;
    if (!gemv_ok(g, pe, act)) return KILN_OK;
    const kiln_tensor *X = a->in[0];
    KILN_CUDA_TRY(kcu_conv_gemv(X->dtype, g->N, g->C, g->M, X->data, a->in[1]->data, B ? B->data : NULL,
                                R ? R->data : NULL, a->out[0]->data, act, alpha, beta, KCU_STREAM(a)),
                  KCU_NODE(a));
    *handled = true;
    return KILN_OK;
}

/* At most this many of cuBLASLt's candidates per GEMM tactic (timed by the builder) */
#define KCU_CONV_GEMM_CANDIDATES 4

/* The GEMM tactic ids of a layer of geometry g (each of cuBLASLt's first
 * candidates for its GEMM) into ids, at most cap; their count. */
static int gemm_tactics(kiln_cuda_state *st, const kcu_conv *g, const int64_t *pe, bool nhwc, bool x_nchw,
                        kiln_dtype t, bool has_b, int act, bool has_r, int32_t *ids, int cap) {
    const int32_t kind = gemm_direct_ok(g, pe, nhwc, x_nchw) ? KCU_CONV_TACTIC_GEMM
                         : gemm_patch_ok(g, pe)              ? KCU_CONV_TACTIC_PATCH
                                                             : 0;
    if (!kind || cap < 1) return 0;
    kiln_cuda_gemm p;
    bool bias_in, act_in;
    conv_gemm_shape(g, kind == KCU_CONV_TACTIC_PATCH, nhwc, t, has_b, act, has_r, &p, &bias_in, &act_in);
    int n = kiln__cuda_gemm_candidates(st, &p, cap < KCU_CONV_GEMM_CANDIDATES ? cap : KCU_CONV_GEMM_CANDIDATES);
    if (n < 1) n = 1; /* (the GEMM's own fallback) */
    for (int k = 0; k < n; k++) ids[k] = kind | k << KCU_CONV_TACTIC_CAND_SHIFT;
    return n;
}

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

/* Y = act(conv(X, W) + B + R): Conv (act NONE, R NULL) and FusedConv.
 * nhwc: Y and R hold NHWC bytes, and X too unless x_nchw (then the layer
 * converts X itself, padding its channels to a multiple of 8). */
static kiln_status conv_exec(const kiln_kernel_args *a, const kiln_conv_attrs *at, int act,
                             float alpha, float beta, const kiln_tensor *R, bool nhwc, bool x_nchw) {
    (void)x_nchw; /* (cuDNN builds only) */
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
    if (nhwc && g.ns != 2)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): NHWC layout needs a 2-D convolution", node,
                         a->op->name);
    const int32_t tac = kiln__cuda_tactic(a);
    const bool grouped_nhwc = nhwc && conv_is_grouped(&g);
    if (grouped_nhwc) {
        if (x_nchw)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "node '%s' (%s): an NHWC grouped layer needs its input NHWC", node, a->op->name);
        bool dnn = false;
#if KILN_HAVE_CUDNN
        dnn = KCU_STATE(a)->dnn != NULL;
#endif
        /* kiln's kernel where the tactic names it or no cuDNN runs the layer,
         * else cuDNN's graph config or legacy algorithm below */
        if (kcu_conv_gconv_bm(tac) >= 0 || !dnn)
            return gc_nhwc_run(a, &g, act, alpha, beta, B, R, kcu_conv_gconv_bm(tac) > 0 ? kcu_conv_gconv_bm(tac) : 0);
    }
    if (nhwc && conv_is_depthwise(&g)) {
        if (x_nchw || g.M != g.C)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "node '%s' (%s): an NHWC depthwise layer needs its input NHWC and one "
                             "output channel per group (%lld in, %lld out)",
                             node, a->op->name, (long long)g.C, (long long)g.M);
#if KILN_HAVE_CUDNN
        /* one of cuDNN's configs for the grouped graph, where the tactic names one */
        if (kcu_dg_is_id(kiln__cuda_tactic(a)) && KCU_STATE(a)->dnn) {
            conv_state tmp, *cs = conv_state_of(a, &tmp);
            bool done = false;
            kiln_status s = conv_graph_run(a, &g, pe, true, XV_C8, act, alpha, beta, B, R, cs, &done);
            if (cs == &tmp) conv_state_clear(&tmp);
            KILN_TRY(s);
            if (done) return KILN_OK;
        }
#endif
        return dw_nhwc_run(a, &g, act, alpha, beta, B, R); /* kiln's kernel, epilogue included */
    }
    if (tac == KCU_CONV_TACTIC_GEMV) { /* kiln's kernel, epilogue included */
        bool done = false;
        KILN_TRY(conv_as_gemv(a, &g, pe, act, alpha, beta, B, R, &done));
        if (done) return KILN_OK;
    }
    if (kcu_conv_gemm_kind(tac)) { /* one cuBLASLt GEMM */
        bool done = false;
        KILN_TRY(conv_as_gemm(a, &g, pe, kcu_conv_gemm_kind(tac), tac >> KCU_CONV_TACTIC_CAND_SHIFT, nhwc, x_nchw,
                              act, alpha, beta, B, R, &done));
        if (done) return KILN_OK;
    }
    if (g.Cg == 1 && g.G > 1 && g.Mg == 1 && g.ns == 2 && KCU_STATE(a)->dw_nchw_tiled) {
        /* depthwise NCHW, 2-D, one output channel per group: the tiled kernel,
         * epilogue included. It runs by rule, untimed, so it is opt-in
         * (KILN_CUDA_DW_NCHW=1): correct on an H100 (test_dwconv_nchw, which
         * turns it on, under memcheck) but not yet measured against the
         * direct kernel */
        kcu_dw_nhwc d = dw_geom(&g, act, alpha, beta);
        int tx_log2;
        int64_t blocks;
        size_t smem;
        if (kcu_dw_nchw_tile(X->dtype, &d, &tx_log2, &blocks, &smem)) {
            KILN_CUDA_TRY(kcu_dwconv_nchw(X->dtype, &d, X->data, W->data, B ? B->data : NULL, R ? R->data : NULL,
                                          Y->data, KCU_STREAM(a)),
                          node);
            return KILN_OK;
        }
    }
    if (g.Cg == 1 && g.G > 1) { /* other depthwise layers: direct, bias included */
        KILN_CUDA_TRY(kcu_conv_direct(X->dtype, &g, X->data, W->data, B ? B->data : NULL, Y->data,
                                      KCU_STREAM(a)),
                      node);
        B = NULL;
    } else {
        bool done = false;
#if KILN_HAVE_CUDNN
        if (KCU_STATE(a)->dnn) {
            conv_state tmp, *cs = conv_state_of(a, &tmp);
            kiln_kernel_args ac = *a;
            kiln_tensor xc;
            const kiln_tensor *ins[3] = {NULL, W, B};
            kiln_status s = KILN_OK;
            int xv = XV_C8;
            if (nhwc && x_nchw) { /* convert X, as the tactic says (channels padded for cuDNN) */
                xv = tactic_xv(kiln__cuda_tactic(a));
                if (!xv_ok(&g, xv)) xv = XV_C8;
                kcu_conv gx;
                int64_t pex[KCU_MAX_SP];
                xv_geom(&g, pe, xv, &gx, pex);
                s = nhwc_input(a, xv, &g, &gx, cs, &xc);
                g = gx;
                memcpy(pe, pex, sizeof pex);
                ins[0] = &xc;
                ac.in = ins;
            }
            /* one fused graph (fp16/bf16), else the legacy API + the epilogue pass */
            if (s == KILN_OK) s = conv_graph_run(&ac, &g, pe, nhwc, xv, act, alpha, beta, B, R, cs, &done);
            if (s == KILN_OK && done) {
                if (cs == &tmp) conv_state_clear(&tmp);
                return KILN_OK;
            }
            if (s == KILN_OK && legacy_geom_ok(&g, pe)) s = conv_legacy(&ac, &g, pe, nhwc, xv, cs, &done);
            if (cs == &tmp) conv_state_clear(&tmp);
            KILN_TRY(s);
        }
#endif
        if (!done && grouped_nhwc) /* no cuDNN config or algorithm: kiln's kernel */
            return gc_nhwc_run(a, &g, act, alpha, beta, B, R, 0);
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
    return conv_exec(a, a->attrs, KILN_FC_ACT_NONE, 0.0f, 0.0f, NULL, false, false);
}


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
    if (at->layout != 0 && at->layout != both && at->layout != KILN_FC_LAYOUT_Y_NHWC)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (FusedConv): layout %d (the CUDA kernels read NCHW, NHWC for "
                         "input and output, or an NCHW input into an NHWC output)", KCU_NODE(a),
                         (int)at->layout);
    return conv_exec(&c, &at->conv, at->act, at->alpha, at->beta,
                     at->has_residual ? a->in[3] : NULL, at->layout != 0, at->layout == KILN_FC_LAYOUT_Y_NHWC);
}

/* Runtime-compiled engine configs (NVRTC, ~0.5 s to make a plan) timed per
 * graph at most: the heuristics' first ones (one for a depthwise layer,
 * which kiln's own kernel runs at memory bandwidth: MobileNetV3 and
 * EfficientNet have 15-16 such layers, and a build should stay within
 * seconds; one for a grouped NHWC layer too, which kiln's tensor-core
 * kernel runs: RegNetY-1.6GF has 27). */
#define KCU_CONV_MAX_RTC 3

/* The geometry of a FusedConv at the shapes of `a`; false where it has none. */
static bool fc_geom(const kiln_infer_args *a, kcu_conv *g, int64_t *pe) {
    const kiln_fused_conv_attrs *at = a->attrs;
    if (!at || a->n_in < 2 || !a->in[0] || !a->in[1] || a->n_out < 1 || !a->out[0]) return false;
    const kiln_tinfo *x = a->in[0], *w = a->in[1], *y = a->out[0];
    if (conv_geom_dims(a->node_name ? a->node_name : "?", &at->conv, x->rank, x->dims, w->rank, w->dims, y->rank,
                       y->dims, g, pe) != KILN_OK) {
        kiln__clear_error();
        return false;
    }
    return true;
}

/* fc_geom of an fp16/bf16 FusedConv (the layers with cuDNN's fused graphs); false for any other. */
static bool fc_half_geom(const kiln_infer_args *a, kcu_conv *g, int64_t *pe) {
    const kiln_dtype t = a->n_in > 0 && a->in[0] ? a->in[0]->dtype : KILN_DTYPE_FLOAT32;
    return (t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16) && fc_geom(a, g, pe);
}

#if KILN_HAVE_CUDNN
_Static_assert(KCU_CONV_LEGACY_ALGOS == CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
               "kcu_conv_legacy_algo: one tactic id per cuDNN forward algorithm");
/* Legacy tactics a layer lists at most: fp16/bf16 layers (their fused
 * graph's configs come first, and are faster) and the others (the legacy
 * API is cuDNN's only path for them). */
#define KCU_CONV_LEGACY_TACTICS_HALF 2
#define KCU_CONV_LEGACY_TACTICS_FULL 4

/* The legacy tactics of a layer of geometry g (the build's shape) into ids
 * (room: their space, >= 1): one per algorithm of cuDNN's heuristic list
 * that runs it within the workspace limit (and rounds as a direct one
 * does, where the engine must: kcu_conv_accurate_only), pinned (the
 * builder times and probes what the engine runs), in the list's order;
 * the plain KCU_CONV_TACTIC_LEGACY where cuDNN declines the geometry
 * (the path then runs kiln's im2col GEMM, or fails for an NHWC layer). */
static int legacy_tactics(kiln_cuda_state *st, const kcu_conv *g0, const int64_t *pe0, bool nhwc, bool x_nchw,
                          kiln_dtype t, int32_t *ids, int room) {
    if (room < 1) return 0;
    kcu_conv g = *g0;
    int64_t pe[KCU_MAX_SP];
    memcpy(pe, pe0, sizeof pe);
    if (nhwc && x_nchw) xv_geom(g0, pe0, XV_C8, &g, pe); /* as conv_exec converts X for the legacy API */
    conv_plan *p = legacy_geom_ok(&g, pe) ? kiln__calloc(1, sizeof *p) : NULL;
    int n = 0;
    if (p) {
        conv_plan_key(st, &g, pe, nhwc, t, -1, p);
        const bool half = t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16;
        const int most = half ? KCU_CONV_LEGACY_TACTICS_HALF : KCU_CONV_LEGACY_TACTICS_FULL;
        const bool accurate = kcu_conv_accurate_only(st, (cudnnDataType_t)p->dt);
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int np = 0;
        unsigned seen = 0; /* (cuDNN's list may name an algorithm twice, once per math type) */
        if (conv_plan_describe(st, p, perf, &np))
            for (int i = 0; i < np && n < room && n < most; i++)
                if (legacy_algo_ok(&perf[i], accurate) && (int)perf[i].algo >= 0 &&
                    (int)perf[i].algo < KCU_CONV_LEGACY_ALGOS && !(seen & 1u << perf[i].algo)) {
                    seen |= 1u << perf[i].algo;
                    ids[n++] = KCU_CONV_TACTIC_LEGACY | ((int32_t)perf[i].algo + 1) << KCU_CONV_TACTIC_CAND_SHIFT;
                }
        conv_plan_destroy(p);
    }
    if (n == 0) ids[n++] = KCU_CONV_TACTIC_LEGACY;
    return n;
}
#endif

/* FusedConv's tactics on CUDA: the engine configs of cuDNN's heuristics
 * for the layer's fused graph (fp16/bf16), in their order (for a layer
 * that converts its NCHW input: those of each input variant XV_*), then
 * the legacy path (the convolution alone, each of cuDNN's first
 * algorithms for it pinned (legacy_tactics), then kiln's epilogue kernel). Every one is timed by the
 * builder. A state whose tactics were listed is a tuning state: a tactic
 * that cannot be made there fails instead of falling back. The GEMM
 * tactics come before the legacy path where the layer is one GEMM; without
 * cuDNN they are listed after tactic 0 (for fp16/bf16 layers too). */
int kiln__cu_fused_conv_tactics(void *state, const kiln_infer_args *a, int32_t *ids, int cap) {
    kiln_cuda_state *st = state;
    if (!st || cap < 1) return 0;
    ids[0] = 0;
    const kiln_fused_conv_attrs *at = a->attrs;
    kcu_conv g;
    int64_t pe[KCU_MAX_SP] = {0, 0, 0};
    if (!fc_half_geom(a, &g, pe)) {
#if KILN_HAVE_CUDNN
        /* fp32: cuDNN's first algorithms, pinned (the legacy API is its path
         * for them), where conv_exec runs the legacy path: not for depthwise
         * layers (kiln's direct kernels) or NHWC ones. KILN_CUDA_FP32_CONV_FIND=1:
         * tactic 0 alone, its algorithm found at the engine's first run (as
         * before 2026-12-06; for A/B timings) */
        if (st->dnn && !st->fp32_conv_find && fc_geom(a, &g, pe) && at->layout == 0 &&
            a->in[0]->dtype == KILN_DTYPE_FLOAT32 && !conv_is_depthwise(&g)) {
            int n = legacy_tactics(st, &g, pe, false, false, KILN_DTYPE_FLOAT32, ids, cap);
            if (n == 1 && ids[0] == KCU_CONV_TACTIC_LEGACY) ids[0] = 0; /* (cuDNN declines it: as untuned) */
            else st->strict_tactics = true;
            return n;
        }
#endif
        return 1;
    }
    const kiln_tinfo *x = a->in[0];
    bool nhwc = at->layout != 0, x_nchw = at->layout == KILN_FC_LAYOUT_Y_NHWC;
    bool dw = conv_is_depthwise(&g);
    if (dw && !nhwc) return 1; /* depthwise NCHW: kiln's direct kernel */
    /* grouped NHWC: kiln's kernel, 64 and 128 pixels a block */
    const bool gc = nhwc && !x_nchw && g.ns == 2 && conv_is_grouped(&g) && cap >= 4;
    const int32_t gc_ids[2] = {KCU_CONV_TACTIC_GCONV | 1 << KCU_CONV_TACTIC_CAND_SHIFT,
                               KCU_CONV_TACTIC_GCONV | 2 << KCU_CONV_TACTIC_CAND_SHIFT};
    /* one cuBLASLt GEMM, where the layer is one: its candidates */
    int32_t gt[KCU_CONV_GEMM_CANDIDATES];
    /* kiln's kernel for [N, C, 1, 1] layers */
    const bool gv = gemv_ok(&g, pe, at->act) && cap >= 3;
    const int n_gt = gemm_tactics(st, &g, pe, nhwc, x_nchw, x->dtype, a->n_in > 2 && a->in[2] != NULL, at->act,
                                  at->has_residual != 0, gt, cap - 2 - (gv ? 1 : 0));
#if KILN_HAVE_CUDNN
    if (!st->dnn)
#endif
    { /* without cuDNN: tactic 0 where it runs the layer (im2col + GEMM per
       * image for NCHW, kiln's depthwise kernel; other NHWC layers fail) and
       * the GEMM ones */
        int n = 0;
        if (!nhwc || dw || n_gt == 0) ids[n++] = 0;
        for (int k = 0; gc && k < 2; k++) ids[n++] = gc_ids[k];
        for (int k = 0; k < n_gt && n < cap; k++) ids[n++] = gt[k];
        if (gv && n < cap) ids[n++] = KCU_CONV_TACTIC_GEMV;
        return n;
    }
#if KILN_HAVE_CUDNN
    st->strict_tactics = true;
    int n = 0;
    if (dw) ids[n++] = KCU_CONV_TACTIC_DW; /* depthwise NHWC: kiln's kernel, then cuDNN's configs */
    for (int k = 0; gc && k < 2; k++) ids[n++] = gc_ids[k]; /* grouped NHWC: kiln's kernel, then cuDNN's */
    const char *env = getenv("KILN_CUDNN_CANDIDATES"); /* at most this many configs per graph (experiments) */
    int per = env && atoi(env) > 0 ? atoi(env) : cap;
    /* hard swish and hard sigmoid are composed of four and three pointwise
     * operations, which only runtime-compiled engines may take (NVRTC, ~0.5 s
     * a plan): one config per graph, none for a depthwise layer (kiln's
     * kernel has them inside) */
    const bool hs = gconv_composed(at->act);
    for (int v = XV_C8; v <= XV_S2D && gconv_eligible(x->dtype, at->act, at->alpha, at->beta) && !(hs && dw); v++) {
        if (v != XV_C8 && (!x_nchw || !xv_ok(&g, v))) continue;
        kcu_conv gx = g;
        int64_t pex[KCU_MAX_SP];
        memcpy(pex, pe, sizeof pex);
        if (x_nchw) xv_geom(&g, pe, v, &gx, pex);
        gconv_key k;
        kcu_dg dg;
        kcu_dg_cfgs cfgs;
        kcu_dg_init(&dg);
        memset(&cfgs, 0, sizeof cfgs);
        gconv_key_make(&k, &gx, pex, x->dtype, nhwc, 0, at->act, at->alpha, at->beta,
                       a->n_in > 2 && a->in[2] != NULL, at->has_residual != 0, NULL);
        /* the input variants share the list */
        int n_var = 1;
        for (int u = v + 1; x_nchw && u <= XV_S2D; u++) n_var += xv_ok(&g, u);
        int want = (cap - 1 - n_gt - (gv ? 1 : 0) - n) / n_var;
        if (want > per) want = per;
        int rtc = 0, got = 0;
        if (gconv_graph(st->dnn, &k, &dg) == CUDNN_STATUS_SUCCESS && kcu_dg_configs(&dg, &cfgs) == CUDNN_STATUS_SUCCESS)
            for (int i = 0; i < cfgs.n && got < want; i++) {
                st->dg_engine_kind[kcu_dg_id_engine(cfgs.id[i])] =
                    cfgs.flags[i] & KCU_DG_CFG_RUNTIME_COMPILED ? KILN_TACTIC_KIND_RUNTIME : KILN_TACTIC_KIND_PRECOMPILED;
                if ((cfgs.flags[i] & KCU_DG_CFG_RUNTIME_COMPILED) && rtc++ >= (dw || gc || hs ? 1 : KCU_CONV_MAX_RTC)) continue;
                ids[n++] = cfgs.id[i] | (int32_t)v << KCU_DG_ID_USER_SHIFT;
                got++;
            }
        kcu_dg_cfgs_free(&cfgs);
        kcu_dg_free(&dg);
    }
    for (int k = 0; k < n_gt && n < cap - 1 - (gv ? 1 : 0); k++) ids[n++] = gt[k];
    if (gv) ids[n++] = KCU_CONV_TACTIC_GEMV;
    if (!dw) n += legacy_tactics(st, &g, pe, nhwc, x_nchw, x->dtype, ids + n, cap - n); /* (the legacy
                                                  API has no NHWC depthwise path here) */
    return n;
#endif
}

const char *kiln__cu_fused_conv_tactic_name(int32_t id) {
    return id == 0                        ? "cudnn-heuristic"
           : kcu_conv_is_legacy(id)       ? "cudnn-legacy+epilogue"
           : id == KCU_CONV_TACTIC_DW     ? "kiln-dwconv-nhwc"
           : id == KCU_CONV_TACTIC_GEMV   ? "kiln-gemv"
           : kcu_conv_gconv_bm(id) > 0    ? "kiln-gconv-nhwc"
           : kcu_conv_gemm_kind(id) == KCU_CONV_TACTIC_GEMM  ? "cublasLt-1x1"
           : kcu_conv_gemm_kind(id) == KCU_CONV_TACTIC_PATCH ? "kiln-patch+cublasLt"
                                          : "cudnn-graph";
}

const char *kiln__cu_fused_conv_name(const kiln_node *n) {
    if (!n->attrs) return NULL;
    const kiln_fused_conv_attrs *fa = n->attrs;
    int32_t lay = fa->layout;
    /* (NHWC layers of several groups: depthwise or grouped, cuda_layout.c) */
    if (lay == (KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC)) return fa->conv.group > 1 ? "cuda.dwconv.nhwc" : "cuda.conv.nhwc";
    if (lay == KILN_FC_LAYOUT_Y_NHWC) return "cuda.conv.nchw-in.nhwc";
    return NULL;
}

void kiln__cu_fused_conv_tactic_describe(int32_t id, char *buf, size_t n) {
#if KILN_HAVE_CUDNN
    if (kcu_dg_is_id(id)) {
        char base[48];
        int v = tactic_xv(id);
        kcu_dg_id_name(id, base, sizeof base);
        snprintf(buf, n, "%s%s", base, v == XV_C4 ? "/c4" : v == XV_S2D ? "/s2d" : "");
        return;
    }
#endif
    if (kcu_conv_gconv_bm(id) > 0)
        snprintf(buf, n, "%s/bm%d", kiln__cu_fused_conv_tactic_name(id), kcu_conv_gconv_bm(id));
    else if (kcu_conv_legacy_algo(id) >= 0)
#if KILN_HAVE_CUDNN
        snprintf(buf, n, "%s/%s", kiln__cu_fused_conv_tactic_name(id),
                 kcu_fwd_algo_name((cudnnConvolutionFwdAlgo_t)kcu_conv_legacy_algo(id)));
#else
        snprintf(buf, n, "%s/algo%d", kiln__cu_fused_conv_tactic_name(id), kcu_conv_legacy_algo(id));
#endif
    else if (kcu_conv_gemm_kind(id))
        snprintf(buf, n, "%s#%d", kiln__cu_fused_conv_tactic_name(id), (int)(id >> KCU_CONV_TACTIC_CAND_SHIFT));
    else
        snprintf(buf, n, "%s",
                 id >= 0 && (id <= KCU_CONV_TACTIC_DW || id == KCU_CONV_TACTIC_GEMV) ? kiln__cu_fused_conv_tactic_name(id)
                                                                                    : "cudnn-?");
}



/* ---- plans made ahead on host threads (KILN_CUDA_PLAN_THREADS) ----------------
 * The tuner announces each FusedConv layer it will time (tactics_ahead):
 * the key of every cuDNN graph config among its tactics (the key its
 * set-up run will make: alignments 16, as the tuner's cudaMalloc'd buffers
 * have) is queued on the state's plan threads, which make the graph, list
 * the configs and finalize that config's plan (NVRTC for runtime-compiled
 * engines: ~0.5 s each) with their own cuDNN handles; the set-up run takes
 * the plan by its key (gconv_plan_for) or makes it itself where no thread
 * has started it. What is made for a key does not depend on the thread
 * (gconv_make), so neither do the tactics that can be set up, their order
 * or their ids. */
#if KILN_HAVE_CUDNN
/* Look-ahead of the plan threads: the layers after the one being set up. */
#define KCU_PLAN_AHEAD 3

static int plan_worker_init(void *ctx, void **worker) {
    const kiln_cuda_state *st = ctx;
    cudnnHandle_t h = NULL;
    /* the device's primary context, current on this thread too */
    if (cudaSetDevice(st->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) return 1;
    *worker = h;
    /* below the tuner's thread, whose timings (a launch, a wait) must not
     * queue behind NVRTC compiles on a busy host */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10);
    return 0;
}

static void plan_worker_fini(void *ctx, void *worker) {
    (void)ctx;
    (void)cudnnDestroy((cudnnHandle_t)worker);
}

/* One key's plan (kiln_prep_ops.prepare): status GM_*, or -1 without memory. */
static int plan_prepare(void *ctx, void *worker, const void *key, void **result) {
    (void)ctx;
    gconv_plan *p = kiln__calloc(1, sizeof *p);
    if (!p) return -1;
    int r = gconv_make((cudnnHandle_t)worker, key, false, p);
    *result = p;
    return r;
}

static void plan_free(void *ctx, void *result) {
    (void)ctx;
    gconv_plan_destroy(result);
}
#endif

void kiln__cu_fused_conv_tactics_ahead(void *state, const kiln_infer_args *a, const int32_t *ids, int n) {
#if KILN_HAVE_CUDNN
    kiln_cuda_state *st = state;
    if (!st || !st->dnn || st->plan_threads <= 0 || !st->strict_tactics) return;
    const kiln_fused_conv_attrs *at = a->attrs;
    kcu_conv g;
    int64_t pe[KCU_MAX_SP] = {0, 0, 0};
    if (!fc_half_geom(a, &g, pe)) return;
    const kiln_tinfo *x = a->in[0];
    if (!st->plan_prep) {
        kiln_prep_ops ops = {.ctx = st, .key_size = sizeof(gconv_key), .worker_init = plan_worker_init,
                             .worker_fini = plan_worker_fini, .prepare = plan_prepare, .result_free = plan_free};
        if (kiln__prep_create(st->plan_threads, KCU_PLAN_AHEAD, &ops, &st->plan_prep) != KILN_OK) {
            kiln__clear_error(); /* the serial path */
            st->plan_threads = 0;
            return;
        }
    }
    /* the geometry and key conv_exec gives conv_graph_run for each tactic */
    const bool nhwc = at->layout != 0, x_nchw = at->layout == KILN_FC_LAYOUT_Y_NHWC;
    const bool has_b = a->n_in > 2 && a->in[2] != NULL;
    if (kiln__grow((void **)&st->plan_nodes, &st->plan_nodes_cap, st->plan_group + 1, sizeof *st->plan_nodes) !=
        KILN_OK) {
        kiln__clear_error(); /* (not announced: its plans are made when it is set up) */
        return;
    }
    const int group = st->plan_group++;
    st->plan_nodes[group] = a->node_name;
    for (int i = 0; i < n; i++) {
        if (!kcu_dg_is_id(ids[i])) continue;
        kcu_conv gx = g;
        int64_t pex[KCU_MAX_SP];
        memcpy(pex, pe, sizeof pex);
        if (nhwc && x_nchw && !conv_is_depthwise(&g)) {
            int xv = tactic_xv(ids[i]);
            xv_geom(&g, pe, xv_ok(&g, xv) ? xv : XV_C8, &gx, pex);
        }
        gconv_key k;
        gconv_key_make(&k, &gx, pex, x->dtype, nhwc, ids[i], at->act, at->alpha, at->beta, has_b,
                       at->has_residual != 0, NULL);
        if (kiln__prep_submit(st->plan_prep, group, &k) != KILN_OK) kiln__clear_error(); /* (made when set up) */
    }
#else
    (void)state, (void)a, (void)ids, (void)n;
#endif
}

void kiln__cu_conv_plans_end(kiln_cuda_state *st) {
#if KILN_HAVE_CUDNN
    if (!st->plan_prep) return;
    kiln_prep_stats s;
    kiln__prep_free(st->plan_prep, &s);
    if (st->tune_verbose)
        fprintf(stderr,
                "kiln: tune: cuDNN plans made ahead on %d threads (KILN_CUDA_PLAN_THREADS): %lld by the threads, "
                "%lld by the tuner's thread (not started when needed), %lld made for nothing, %lld never started "
                "(not needed); the tuner waited %.2f s for plans being made\n",
                st->plan_threads, (long long)s.by_workers, (long long)s.by_caller, (long long)s.unused,
                (long long)s.unstarted, s.wait_us / 1e6);
    st->plan_prep = NULL;
    kiln__free(st->plan_nodes);
    st->plan_nodes = NULL;
#else
    (void)st;
#endif
}

int kiln__cu_fused_conv_tactic_kind(void *state, int32_t id) {
#if KILN_HAVE_CUDNN
    const kiln_cuda_state *st = state;
    if (kcu_dg_is_id(id))
        return st && st->dg_engine_kind[kcu_dg_id_engine(id)] == KILN_TACTIC_KIND_RUNTIME ? KILN_TACTIC_KIND_RUNTIME
                                                                                           : KILN_TACTIC_KIND_PRECOMPILED;
#else
    (void)state;
#endif
    return kcu_conv_is_legacy(id) ? KILN_TACTIC_KIND_LEGACY
           : id == KCU_CONV_TACTIC_DW || id == KCU_CONV_TACTIC_GEMV || kcu_conv_gconv_bm(id) > 0 ? KILN_TACTIC_KIND_KILN
           : kcu_conv_gemm_kind(id)     ? KILN_TACTIC_KIND_BLAS
                                        : KILN_TACTIC_KIND_OTHER;
}

#else
typedef int kiln_cuda_conv_disabled;
#endif
