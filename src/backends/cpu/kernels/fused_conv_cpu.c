/* fused_conv_cpu.c -- the CPU backend's kernel of kiln.FusedConv (the op:
 * src/ops/fused_conv.c), with its tactics:
 *   0 own       kiln's Conv kernels (pointwise GEMM, depthwise direct,
 *               im2col + sgemm) followed by one pass adding the residual
 *               and applying the activation while the output is in cache
 *               per plane;
 *   1 dnnl      oneDNN convolution on NCHW tensors, residual and activation
 *               as post-ops, weights reordered once per context;
 *   2 dnnl-blk  oneDNN in its blocked layout, input/output reordered;
 *   3 wino      kiln's Winograd F(4x4, 3x3) (conv_wino.c) for 3x3 stride-1
 *               layers, NCHW or NHWC in and out, weights transformed once
 *               per context;
 *   4 wino2     the same with F(2x2, 3x3), for layers whose F(4x4)
 *               weights are too large to stream;
 *               (3 and 4 round more than the others: offered only with
 *               fast math, kiln__cpu_fc_tactic_fast_math)
 *   5 direct    kiln's direct convolution (conv_direct.c): dilation 1,
 *               any kernel size, stride and pads, NCHW, NHWC or nChw16c
 *               in and out, weights packed once per context.
 * (A version-3 kiln reads tactic 4 as unknown: NCHW layers run tactic 0,
 * NHWC ones are refused with a message, never run wrong.)
 * The oneDNN tactics exist when kiln is built with it (KILN_HAVE_DNNL); an
 * engine whose tactic is not available where it runs (built elsewhere, or
 * oneDNN refuses the shapes) falls back to tactic 0. */
#include "backends/cpu/kernels/fused_conv_cpu.h"

#include "backends/cpu/kernels/conv_direct.h"
#include "backends/cpu/kernels/conv_wino.h"

#define NODE(a) ((a)->node_name ? (a)->node_name : "?")

/* ---- activation pass ------------------------------------------------------------ */

#if defined(__x86_64__) && defined(__GNUC__)
#include "backends/cpu/kernels/simd_act.h"
#include "backends/cpu/kernels/simd_mask.h"

__attribute__((target("avx512f"))) static void act_avx512(float *y, int64_t n, int act, float alpha, float beta) {
    __m512 a = _mm512_set1_ps(alpha), b = _mm512_set1_ps(beta);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = kiln__mask16(n - i);
        __m512 v = _mm512_maskz_loadu_ps(m, y + i);
        v = act == KILN_FC_ACT_RELU ? kiln__relu512(v)
            : act == KILN_FC_ACT_CLIP ? kiln__clip512(v, a, b)
                                      : kiln__hard_sigmoid512(v, a, b);
        _mm512_mask_storeu_ps(y + i, m, v);
    }
}

/* ReLU on bfloat16 bits, 32 at a time: lanes with the sign set and a
 * magnitude up to inf's (not NaN) are written 0. */
__attribute__((target("avx512f,avx512bw"))) static void relu_bf16_avx512(uint16_t *y, int64_t n) {
    const __m512i mag = _mm512_set1_epi16(0x7fff), inf = _mm512_set1_epi16(0x7f80);
    for (int64_t i = 0; i < n; i += 32) {
        __mmask32 m = n - i >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (n - i)) - 1u);
        __m512i v = _mm512_maskz_loadu_epi16(m, y + i);
        __mmask32 neg = _mm512_movepi16_mask(v) & _mm512_cmple_epu16_mask(_mm512_and_si512(v, mag), inf);
        _mm512_mask_storeu_epi16(y + i, m & neg, _mm512_setzero_si512());
    }
}
#endif

void kiln__fc_act_f32(float *y, int64_t n, int act, float alpha, float beta) {
    if (act == KILN_FC_ACT_NONE) return;
#if defined(__x86_64__) && defined(__GNUC__)
    if ((act == KILN_FC_ACT_RELU || act == KILN_FC_ACT_CLIP || act == KILN_FC_ACT_HARD_SIGMOID) &&
        __builtin_cpu_supports("avx512f")) {
        act_avx512(y, n, act, alpha, beta);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) y[i] = kiln__fc_act(act, alpha, beta, y[i]);
}

void kiln__fc_act_bf16(uint16_t *y, int64_t n, int act, float alpha, float beta) {
    if (act == KILN_FC_ACT_NONE) return;
    if (act == KILN_FC_ACT_RELU) { /* a negative number (-inf too, not NaN: 0x7f80 < magnitude) becomes 0 */
#if defined(__x86_64__) && defined(__GNUC__)
        if (__builtin_cpu_supports("avx512bw")) {
            relu_bf16_avx512(y, n);
            return;
        }
#endif
        for (int64_t i = 0; i < n; i++) y[i] = (y[i] & 0x8000) && (y[i] & 0x7fff) <= 0x7f80 ? 0 : y[i];
        return;
    }
    for (int64_t i = 0; i < n; i++) y[i] = kiln__f32_to_bf16(kiln__fc_act(act, alpha, beta, kiln__bf16_to_f32(y[i])));
}

/* ---- tactics ------------------------------------------------------------------ */

static bool wants_dnnl(const kiln_fused_conv_attrs *at) {
    return at->tactic.id == KILN_FC_TACTIC_DNNL_PLAIN ||
           at->tactic.id == KILN_FC_TACTIC_DNNL_BLOCKED;
}

/* Transformed weight bytes per image up to which Winograd F(4x4) is a
 * candidate, and F(2x2) (where F(4x4) is not). */
#define WINO_WEIGHT_BYTES_PER_IMAGE (3.0 * 1024 * 1024)
#ifndef KILN_WINO2_BYTES_PER_IMAGE
#define KILN_WINO2_BYTES_PER_IMAGE (6.0 * 1024 * 1024)
#endif

/* Threads the Winograd workspace is sized for: this machine's CPUs, at
 * most 16 (the kernel uses no more threads than its workspace has room for). */
static int wino_ws_threads(void) {
    int n = kiln__cpu_count();
    return n < 1 ? 1 : n > 16 ? 16 : n;
}

/* The Winograd geometry of a layer: true (and *g filled) when the tactic
 * can run it (see kiln__fc_wino_fits). */
/* The geometry of a float32 2-D layer of one group with known, non-empty
 * dims (what kiln's Winograd and direct kernels take): true and *g filled,
 * else false (no error set). */
static bool fp32_2d_geom(const kiln_fused_conv_attrs *at, int xr, const int64_t *xd, int wr, const int64_t *wd,
                         kiln_conv_geom *g) {
    if (at->precision != KILN_PRECISION_FP32 || xr != 4 || wr != 4) return false;
    if (kiln__conv_geom("?", "FusedConv", &at->conv, xr, xd, wr, wd, g) != KILN_OK) {
        kiln__clear_error();
        return false;
    }
    return g->ns == 2 && g->G == 1 && g->N >= 1 && g->C >= 1 && g->M >= 1;
}

static bool wino_geom(const kiln_fused_conv_attrs *at, int xr, const int64_t *xd, int wr,
                      const int64_t *wd, kiln_conv_geom *gp) {
    if (!fp32_2d_geom(at, xr, xd, wr, wd, gp)) return false;
    const kiln_conv_geom g = *gp;
    for (int i = 0; i < 2; i++)
        if (g.k[i] != 3 || g.s[i] != 1 || g.d[i] != 1 || g.in[i] < 1 || g.out[i] < 1 ||
            g.pb[i] < 0 || g.pb[i] > 2 || g.pe[i] < 0 || g.pe[i] > 2)
            return false;
    /* the kernel's sizes (int64 products of dims and channels padded to 16)
     * stay far from overflow; larger layers (only in damaged or absurd
     * engines: the planner refuses such tensors) are left to kiln's own */
    double cp = (double)g.C + 16, mp = (double)g.M + 16, lim = 0x1p50;
    if ((double)g.N * (double)g.in[0] * (double)g.in[1] * cp > lim ||
        (double)g.N * (double)g.out[0] * (double)g.out[1] * mp > lim || 36.0 * cp * mp > lim)
        return false;
    return true;
}

bool kiln__fc_wino_fits(const kiln_fused_conv_attrs *at, int xr, const int64_t *xd, int wr,
                        const int64_t *wd) {
    kiln_conv_geom g;
    return wino_geom(at, xr, xd, wr, wd, &g);
}

/* The direct geometry of a layer: true (and *g filled) when the tactic
 * can run it (see kiln__fc_direct_fits). */
static bool direct_geom(const kiln_fused_conv_attrs *at, int xr, const int64_t *xd, int wr, const int64_t *wd,
                        kiln_conv_geom *gp) {
    kiln_conv_geom g;
    if (!fp32_2d_geom(at, xr, xd, wr, wd, &g)) return false;
    for (int i = 0; i < 2; i++)
        if (g.k[i] < 1 || g.k[i] > KILN_DIRECT_MAX_K || g.s[i] < 1 || g.d[i] != 1 || g.pb[i] < 0 || g.pe[i] < 0 ||
            g.in[i] < 1 || g.out[i] < 1 || g.out[i] != (g.in[i] + g.pb[i] + g.pe[i] - g.k[i]) / g.s[i] + 1)
            return false;
    /* sizes far from overflow (larger layers only in damaged or absurd
     * engines: the planner refuses such tensors) */
    double lim = 0x1p50, pad = (double)(g.in[0] + g.pb[0] + g.pe[0]) * (double)(g.in[1] + g.pb[1] + g.pe[1]);
    if ((double)g.N * pad * (double)g.C > lim ||
        (double)g.M * (double)g.C * (double)g.k_sz + 64.0 * (double)g.k_sz * (double)g.C > lim ||
        (double)g.N * (double)g.M * (double)g.out[0] * (double)g.out[1] > lim)
        return false;
    *gp = g;
    return true;
}

bool kiln__fc_direct_fits(const kiln_fused_conv_attrs *at, int xr, const int64_t *xd, int wr, const int64_t *wd) {
    kiln_conv_geom g;
    return direct_geom(at, xr, xd, wr, wd, &g);
}

static size_t direct_workspace(const kiln_conv_geom *g) {
    return kiln__direct_workspace(g->N, g->C, g->in[0], g->in[1], g->k[0], g->k[1], g->s[0], g->s[1], g->pb[0],
                                  g->pb[1], g->pe[0], g->pe[1]);
}

/* Winograd scratch bytes of geometry g, output tile `tile`, for `threads` threads. */
static size_t wino_workspace(const kiln_conv_geom *g, int tile, int threads) {
    return kiln__wino_workspace(g->N, g->in[0], g->in[1], g->C, g->M, (int)g->pb[0], (int)g->pb[1],
                                (int)g->pe[0], (int)g->pe[1], tile, threads);
}

size_t kiln__cpu_fc_workspace(const kiln_infer_args *a) {
    const kiln_fused_conv_attrs *at = a->attrs;
    kiln_conv_geom wg;
    int tile = kiln__fc_wino_tile(at->tactic.id);
    const kiln_tinfo *X = a->in[0], *W = a->in[1];
    bool wino = tile && wino_geom(at, X->rank, X->dims, W->rank, W->dims, &wg);
    bool direct = !wino && at->tactic.id == KILN_FC_TACTIC_DIRECT &&
                  direct_geom(at, X->rank, X->dims, W->rank, W->dims, &wg);
    if (wino || direct) {
        /* kiln's own kernels run the layer if the engine is used with
         * other shapes: room for either */
        size_t k = wino ? wino_workspace(&wg, tile, wino_ws_threads()) : direct_workspace(&wg);
        size_t own = a->op->workspace(a);
        return k > own ? k : own;
    }
#if KILN_HAVE_DNNL
    if (wants_dnnl(at) || at->precision == KILN_PRECISION_BF16) {
        size_t own = 0;
        if (at->precision == KILN_PRECISION_BF16 && !wants_dnnl(at))
            own = a->op->workspace(a); /* in case oneDNN refuses the layer */
        size_t d = kiln__dnnl_conv_workspace(a, wants_dnnl(at) ? at->tactic.id : KILN_FC_TACTIC_DNNL_BLOCKED);
        return d > own ? d : own;
    }
#else
    (void)wants_dnnl, (void)at;
#endif
    return a->op->workspace(a);
}

int kiln__cpu_fc_tactics(void *state, const kiln_infer_args *a, int32_t *ids, int cap) {
    (void)state;
    int n = 0;
    const kiln_fused_conv_attrs *at = a->attrs;
#if KILN_HAVE_DNNL
    /* bf16: the blocked tactic only (oneDNN's AMX/bf16 kernels want their own
     * layout; with NCHW it falls back to slow gemm-based code) */
    int first = at->precision == KILN_PRECISION_BF16 ? KILN_FC_TACTIC_DNNL_BLOCKED : KILN_FC_TACTIC_DNNL_PLAIN;
    for (int t = first; t <= KILN_FC_TACTIC_DNNL_BLOCKED && n < cap; t++)
        if (a->in[0]->rank >= 0 && kiln__dnnl_conv_usable(at, a->in[0]->rank, t)) ids[n++] = t;
#endif
    /* bf16 layers are oneDNN's; kiln's own kernel (fp32) is the fallback only. */
    if ((at->precision != KILN_PRECISION_BF16 || n == 0) && n < cap) ids[n++] = KILN_FC_TACTIC_OWN;
    /* Winograd where its AVX-512 path runs (its plain C path is a fallback
     * for engines moved to a CPU without it, not a contender), and where its
     * transformed weights (4x the layer's) are small for the images that
     * share them: in a network each layer's weights come from memory, not
     * from the caches the build's timing leaves them in (ResNet-50's 14x14,
     * 256-channel layers: 0.6 ms timed alone, 1.26 ms inside the network
     * at batch 1, against oneDNN's 1.15); where they are too large, F(2x2)
     * with its 16/9 of the weights */
    if (n < cap && kiln__wino_fast_available() &&
        kiln__fc_wino_fits(at, a->in[0]->rank, a->in[0]->dims, a->in[1]->rank, a->in[1]->dims)) {
        int64_t C = a->in[0]->dims[1], M = a->in[1]->dims[0];
        double images = (double)a->in[0]->dims[0];
        if ((double)kiln__wino_packed_floats(C, M, 4) * sizeof(float) <= WINO_WEIGHT_BYTES_PER_IMAGE * images)
            ids[n++] = KILN_FC_TACTIC_WINO;
        else if ((double)kiln__wino_packed_floats(C, M, 2) * sizeof(float) <= KILN_WINO2_BYTES_PER_IMAGE * images)
            ids[n++] = KILN_FC_TACTIC_WINO2;
    }
    /* the direct kernel where its AVX-512 path runs (as Winograd's) */
    if (n < cap && kiln__direct_fast_available() &&
        kiln__fc_direct_fits(at, a->in[0]->rank, a->in[0]->dims, a->in[1]->rank, a->in[1]->dims))
        ids[n++] = KILN_FC_TACTIC_DIRECT;
    return n;
}

/* The tactics only fast-math builds get (kiln_builder_set_fast_math): both
 * Winograd ones. Their input and output transforms round more than a direct
 * convolution's sums (docs/cpu-conv.md, "Fast math": ResNet-101 2.7 times
 * PyTorch's own float32 error against float64 with them, 1.2 times without).
 * F(2x2) alone was as accurate as none on ResNet-101 and DeepLabV3, but no
 * faster on ResNet-50 (0.98-1.02 of the time without Winograd), so it is
 * fast math too: one rule, Winograd only when asked. */
bool kiln__cpu_fc_tactic_fast_math(int32_t id) { return kiln__fc_wino_tile(id) != 0; }

const char *kiln__cpu_fc_tactic_name(int32_t id) {
    switch (id) {
    case KILN_FC_TACTIC_OWN: return "own";
    case KILN_FC_TACTIC_DNNL_PLAIN: return "dnnl";
    case KILN_FC_TACTIC_DNNL_BLOCKED: return "dnnl-blocked";
    case KILN_FC_TACTIC_WINO: return "wino";
    case KILN_FC_TACTIC_WINO2: return "wino2";
    case KILN_FC_TACTIC_DIRECT: return "direct";
    default: return "?";
    }
}

/* ---- kernel ------------------------------------------------------------------- */

/* The output may overwrite the residual (the plan puts both in one block
 * when this layer reads the residual last): oneDNN's sum post-op then finds
 * it in place (no copy into the output first), and the Winograd kernel
 * reads each residual element before writing that output element. */
int kiln__cpu_fc_inplace_input(const void *attrs) {
    const kiln_fused_conv_attrs *at = attrs;
    /* in place only where the residual has the output's layout */
    if (!at->has_residual || (at->layout & KILN_FC_LAYOUT_R_NHWC)) return -1;
    switch (at->tactic.id) {
    case KILN_FC_TACTIC_DNNL_PLAIN:
    case KILN_FC_TACTIC_DNNL_BLOCKED:
    case KILN_FC_TACTIC_WINO:
    case KILN_FC_TACTIC_WINO2:
    case KILN_FC_TACTIC_DIRECT: return 3;
    default: return -1;
    }
}

/* g: the layer's geometry, from wino_geom; tile: 4 or 2. */
static kiln_status fc_wino(const kiln_kernel_args *a, const kiln_conv_geom *gp, int tile) {
    const kiln_fused_conv_attrs *at = a->attrs;
    const kiln_conv_geom g = *gp;
    int pt = (int)g.pb[0], pl = (int)g.pb[1], pb = (int)g.pe[0], pr = (int)g.pe[1];
    /* the kernel takes as many threads as the workspace has room for */
    size_t need = wino_workspace(&g, tile, 1);
    if (need > a->workspace_size)
        return KILN_FAIL(KILN_ERR_INTERNAL,
                         "node '%s' (FusedConv): Winograd needs %zu bytes of workspace, the plan gave %zu",
                         NODE(a), need, a->workspace_size);
    /* the transformed weights, kept in the node's state */
    bool fresh, own;
    float *U = kiln__node_packed(a, kiln__wino_packed_floats(g.C, g.M, tile), &fresh, &own);
    if (!U)
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (FusedConv): out of memory transforming weights",
                         NODE(a));
    if (fresh) kiln__wino_pack(a->in[1]->data, g.C, g.M, tile, U);
    kiln_wino_args w = {
        .x = a->in[0]->data, .u = U, .tile = tile, .bias = a->n_in > 2 && a->in[2] ? a->in[2]->data : NULL,
        .r = at->has_residual ? a->in[3]->data : NULL, .y = a->out[0]->data,
        .N = g.N, .H = g.in[0], .W = g.in[1], .C = g.C, .M = g.M,
        .pt = pt, .pl = pl, .pb = pb, .pr = pr,
        .x_nhwc = (at->layout & KILN_FC_LAYOUT_X_C16) ? KILN_WINO_C16 : (at->layout & KILN_FC_LAYOUT_X_NHWC) != 0,
        .y_nhwc = (at->layout & KILN_FC_LAYOUT_Y_C16) ? KILN_WINO_C16 : (at->layout & KILN_FC_LAYOUT_Y_NHWC) != 0,
        .act = at->act, .alpha = at->alpha, .beta = at->beta,
        .ws = a->workspace, .ws_bytes = a->workspace_size, .pool = a->pool};
    kiln__wino_run(&w);
    if (own) kiln__aligned_free(U);
    return KILN_OK;
}

/* The layout of a tensor for the direct kernel: nChw16c, NHWC or NCHW. */
static int direct_layout(int32_t layout, int32_t c16_bit, int32_t nhwc_bit) {
    return (layout & c16_bit) ? KILN_DIRECT_C16 : (layout & nhwc_bit) ? KILN_DIRECT_NHWC : KILN_DIRECT_NCHW;
}

static kiln_status fc_direct(const kiln_kernel_args *a, const kiln_conv_geom *g) {
    const kiln_fused_conv_attrs *at = a->attrs;
    size_t need = direct_workspace(g);
    if (need > a->workspace_size)
        return KILN_FAIL(KILN_ERR_INTERNAL,
                         "node '%s' (FusedConv): the direct kernel needs %zu bytes of workspace, the plan gave %zu",
                         NODE(a), need, a->workspace_size);
    bool fresh, own;
    float *Wp = kiln__node_packed(a, kiln__direct_packed_floats(g->C, g->M, g->k[0], g->k[1]), &fresh, &own);
    if (!Wp)
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (FusedConv): out of memory packing weights", NODE(a));
    if (fresh) kiln__direct_pack(a->in[1]->data, g->C, g->M, g->k[0], g->k[1], Wp);
    int y_layout = direct_layout(at->layout, KILN_FC_LAYOUT_Y_C16, KILN_FC_LAYOUT_Y_NHWC);
    kiln_direct_args d = {
        .x = a->in[0]->data, .w = Wp, .bias = a->n_in > 2 && a->in[2] ? a->in[2]->data : NULL,
        .r = at->has_residual ? a->in[3]->data : NULL, .y = a->out[0]->data,
        .N = g->N, .C = g->C, .H = g->in[0], .W = g->in[1], .M = g->M, .kh = g->k[0], .kw = g->k[1],
        .sh = g->s[0], .sw = g->s[1], .pt = g->pb[0], .pl = g->pb[1], .pb = g->pe[0], .pr = g->pe[1],
        .x_layout = direct_layout(at->layout, KILN_FC_LAYOUT_X_C16, KILN_FC_LAYOUT_X_NHWC),
        .y_layout = y_layout,
        .r_layout = (at->layout & KILN_FC_LAYOUT_R_NHWC) ? KILN_DIRECT_NHWC : y_layout,
        .act = at->act, .alpha = at->alpha, .beta = at->beta,
        .ws = a->workspace, .ws_bytes = a->workspace_size, .pool = a->pool};
    kiln__direct_run(&d);
    if (own) kiln__aligned_free(Wp);
    return KILN_OK;
}

kiln_status kiln__cpu_fc_run(const kiln_kernel_args *a) {
    const kiln_fused_conv_attrs *at = a->attrs;
    KILN_TRY(kiln__fc_check_run(a));
    const kiln_tensor *X = a->in[0], *W = a->in[1];
    if (kiln__tensor_numel(a->out[0]) == 0) return KILN_OK;
    kiln_conv_geom wg;
    int tile = kiln__fc_wino_tile(at->tactic.id);
    if (tile && !(at->layout & (KILN_FC_LAYOUT_X_BF16 | KILN_FC_LAYOUT_Y_BF16 | KILN_FC_LAYOUT_R_NHWC)) &&
        wino_geom(at, X->rank, X->dims, W->rank, W->dims, &wg))
        return fc_wino(a, &wg, tile);
    if (at->tactic.id == KILN_FC_TACTIC_DIRECT && !(at->layout & (KILN_FC_LAYOUT_X_BF16 | KILN_FC_LAYOUT_Y_BF16)) &&
        direct_geom(at, X->rank, X->dims, W->rank, W->dims, &wg))
        return fc_direct(a, &wg);
#if KILN_HAVE_DNNL
    if (wants_dnnl(at) || at->precision == KILN_PRECISION_BF16) {
        int t = wants_dnnl(at) ? at->tactic.id : KILN_FC_TACTIC_DNNL_BLOCKED;
        if (kiln__dnnl_conv_usable(at, a->in[0]->rank, t)) {
            kiln_status st = kiln__dnnl_conv_run(a, t);
            if (st != KILN_ERR_UNSUPPORTED || at->layout) return st;
            kiln__clear_error(); /* oneDNN has no kernel for this layer: kiln's own */
        }
    }
#endif
    if (at->layout) /* NHWC / nChw16c tensors: only oneDNN and kiln's Winograd and direct kernels read and write them */
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (FusedConv): the engine passes this layer's tensors in "
                         "NHWC or nChw16c for %s, which cannot run it here (kiln built "
                         "without oneDNN, this CPU lacks what the build machine had, or the "
                         "shapes differ from the build's); rebuild the engine on this machine",
                         NODE(a),
                         tile                                     ? "the Winograd kernel"
                         : at->tactic.id == KILN_FC_TACTIC_DIRECT ? "the direct kernel"
                                                                  : "oneDNN");
    return a->op->cpu(a); /* the reference: kiln's Conv kernel and an epilogue pass */
}


/* ---- tuning ---------------------------------------------------------------------- */

bool kiln__cpu_fc_dnnl_real(const kiln_kernel_args *a) {
#if KILN_HAVE_DNNL
    bool ok = kiln__dnnl_conv_probe(a, ((const kiln_tactic *)a->attrs)->id) == KILN_OK;
    kiln__clear_error();
    return ok;
#else
    (void)a;
    return false;
#endif
}

static bool lists(const int32_t *ids, int n, int32_t id) {
    for (int i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

/* A tactic that joins NHWC chains is timed as it runs inside one, NHWC in
 * and out (no reorders): kiln's Winograd kernel always, oneDNN's where it
 * has a real kernel for that (a reference one would take seconds to time).
 * The direct kernel is judged inside the network (cpu_layout.c). With NHWC
 * in and out, oneDNN's plain and blocked tactics are one kernel: blocked is
 * the one that also runs well where a neighbour stays NCHW. */
int kiln__cpu_fc_tune_prepare(kiln_node *n, int32_t id, const int32_t *ids, int n_ids, const kiln_kernel_args *a) {
    if (id == KILN_FC_TACTIC_DIRECT) return -1;
    if (id == KILN_FC_TACTIC_OWN || a->n_in < 1 || !a->in[0] || a->in[0]->rank != 4) return 0;
    kiln_fused_conv_attrs *fa = n->attrs;
    if (kiln__fc_wino_tile(id)) { /* kiln's kernel: every layer it takes, any layout */
        fa->layout = KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
        return 1;
    }
    int32_t saved = fa->tactic.id;
    fa->tactic.id = id;
    fa->layout = KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
    if (fa->precision == KILN_PRECISION_BF16) fa->layout |= KILN_FC_LAYOUT_X_BF16 | KILN_FC_LAYOUT_Y_BF16;
    kiln_kernel_args p = *a;
    p.attrs = fa;
    bool ok = kiln__cpu_fc_dnnl_real(&p);
    fa->tactic.id = saved;
    if (!ok) {
        fa->layout = 0;
        return 0;
    }
    return id == KILN_FC_TACTIC_DNNL_PLAIN && lists(ids, n_ids, KILN_FC_TACTIC_DNNL_BLOCKED) ? -1 : 1;
}
