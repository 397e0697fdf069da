/* pool_cpu.c -- the CPU backend's kernels of MaxPool and GlobalAveragePool
 * in the layouts of its chains (kiln_pool_attrs.layout: NHWC and nChw16c,
 * chosen by backends/cpu/cpu_layout.c); NCHW layers run the ops' reference
 * kernels (src/ops/nn_pool.c). */
#include "backends/cpu/kernels/pool_cpu.h"

#include "ops/nn_attrs.h"
#include "ops/spatial_attrs.h"

#include <math.h>
#include <string.h>

#define NODE(a) ((a)->node_name ? (a)->node_name : "?")

typedef kiln_pool_geom pool_geom; /* ops/spatial_attrs.h */

/* float32 2-D MaxPool on NHWC tensors (KILN_POOL_LAYOUT_NHWC): each output
 * position is the max over its window's in-bounds pixels of whole channel
 * vectors (contiguous; vectorized over channels). Work: output rows of all
 * images. */
typedef struct nhwc_ctx {
    const pool_geom *g;
    const float *x;
    float *y;
    bool avx512; /* the CPU has AVX-512F: max_px_avx512 for windows of up to MAX_WIN_PX pixels */
} nhwc_ctx;

#define MAX_WIN_PX 64

/* The in-bounds input pixels (h * W + w) of output column ow's window,
 * whose first row is hs (may be negative); at most MAX_WIN_PX (the caller
 * checked the window's size). Returns their count. */
static int window_px(const pool_geom *g, int64_t hs, int64_t ow, int64_t *pix) {
    int64_t H = g->in[0], W = g->in[1], ws = ow * g->s[1] - g->pb[1];
    int np = 0;
    int64_t i0, i1, j0, j1;
    kiln__pool_taps(hs, g->k[0], g->d[0], 0, H, &i0, &i1);
    kiln__pool_taps(ws, g->k[1], g->d[1], 0, W, &j0, &j1);
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++) pix[np++] = (hs + i * g->d[0]) * W + ws + j * g->d[1];
    return np;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include "backends/cpu/kernels/simd_mask.h"
#define HAVE_MAX_PX_AVX512 1
/* One output pixel: the max over the np > 0 input pixels px[] of C
 * channels each, kept in registers (64 channels at a time, then 16 with a
 * mask for the tail). max_keep_nan512(m, x) is kiln__max_keep_nan. */
/* VMAXPS returns its second operand when either is NaN: max(x, m) keeps a
 * NaN m; a NaN x is taken by the mask of x's ordered lanes. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 max_keep_nan512(__m512 m, __m512 x) {
    return _mm512_mask_max_ps(x, _mm512_cmp_ps_mask(x, x, _CMP_ORD_Q), x, m);
}

__attribute__((target("avx512f"))) static void max_px_avx512(float *y, const float *const *px, int np,
                                                            int64_t C) {
    int64_t ch = 0;
    for (; ch + 64 <= C; ch += 64) {
        const float *p = px[0] + ch;
        __m512 m0 = _mm512_loadu_ps(p), m1 = _mm512_loadu_ps(p + 16), m2 = _mm512_loadu_ps(p + 32),
               m3 = _mm512_loadu_ps(p + 48);
        for (int k = 1; k < np; k++) {
            p = px[k] + ch;
            m0 = max_keep_nan512(m0, _mm512_loadu_ps(p));
            m1 = max_keep_nan512(m1, _mm512_loadu_ps(p + 16));
            m2 = max_keep_nan512(m2, _mm512_loadu_ps(p + 32));
            m3 = max_keep_nan512(m3, _mm512_loadu_ps(p + 48));
        }
        _mm512_storeu_ps(y + ch, m0);
        _mm512_storeu_ps(y + ch + 16, m1);
        _mm512_storeu_ps(y + ch + 32, m2);
        _mm512_storeu_ps(y + ch + 48, m3);
    }
    for (; ch < C; ch += 16) {
        __mmask16 mk = kiln__mask16(C - ch);
        __m512 m = _mm512_maskz_loadu_ps(mk, px[0] + ch);
        for (int k = 1; k < np; k++) m = max_keep_nan512(m, _mm512_maskz_loadu_ps(mk, px[k] + ch));
        _mm512_mask_storeu_ps(y + ch, mk, m);
    }
}

/* One output pixel's 16 channels of an nChw16c block: the max over the
 * np input pixels at x + off[k] (np 0: all padding, -inf). */
__attribute__((target("avx512f"))) static void max16_avx512(float *y, const float *x, const int64_t *off,
                                                           int np) {
    __m512 m = np ? _mm512_loadu_ps(x + off[0]) : _mm512_set1_ps(-INFINITY);
    for (int k = 1; k < np; k++) m = max_keep_nan512(m, _mm512_loadu_ps(x + off[k]));
    _mm512_storeu_ps(y, m);
}
#endif

static void max_nhwc_rows(void *vctx, int64_t r0, int64_t r1) {
    const nhwc_ctx *c = vctx;
    const pool_geom *g = c->g;
    int64_t C = g->C, H = g->in[0], W = g->in[1], OH = g->out[0], OW = g->out[1];
#ifdef HAVE_MAX_PX_AVX512
    if (c->avx512 && g->k[0] * g->k[1] <= MAX_WIN_PX) {
        for (int64_t r = r0; r < r1; r++) {
            int64_t n = r / OH, oh = r % OH;
            const float *xn = c->x + n * H * W * C;
            float *yr = c->y + r * OW * C;
            int64_t hs = oh * g->s[0] - g->pb[0];
            for (int64_t ow = 0; ow < OW; ow++) {
                const float *px[MAX_WIN_PX];
                int64_t pix[MAX_WIN_PX];
                int np = window_px(g, hs, ow, pix);
                for (int k = 0; k < np; k++) px[k] = xn + pix[k] * C;
                if (np) max_px_avx512(yr + ow * C, px, np, C);
                else
                    for (int64_t ch = 0; ch < C; ch++) yr[ow * C + ch] = -INFINITY; /* all padding */
            }
        }
        return;
    }
#endif
    for (int64_t r = r0; r < r1; r++) {
        int64_t n = r / OH, oh = r % OH;
        const float *xn = c->x + n * H * W * C;
        float *restrict yr = c->y + r * OW * C;
        int64_t hs = oh * g->s[0] - g->pb[0];
        for (int64_t ow = 0; ow < OW; ow++) {
            float *restrict yp = yr + ow * C;
            int64_t ws = ow * g->s[1] - g->pb[1];
            bool first = true;
            int64_t i0, i1, j0, j1;
            kiln__pool_taps(hs, g->k[0], g->d[0], 0, H, &i0, &i1);
            kiln__pool_taps(ws, g->k[1], g->d[1], 0, W, &j0, &j1);
            for (int64_t i = i0; i < i1; i++) {
                int64_t ih = hs + i * g->d[0];
                for (int64_t j = j0; j < j1; j++) {
                    int64_t iw = ws + j * g->d[1];
                    const float *restrict xp = xn + (ih * W + iw) * C;
                    if (first) {
                        memcpy(yp, xp, sizeof(float) * (size_t)C);
                        first = false;
                    } else {
                        for (int64_t ch = 0; ch < C; ch++) yp[ch] = kiln__max_keep_nan(yp[ch], xp[ch]);
                    }
                }
            }
            if (first)
                for (int64_t ch = 0; ch < C; ch++) yp[ch] = -INFINITY; /* window wholly in the padding */
        }
    }
}

/* The same on nChw16c tensors (KILN_POOL_LAYOUT_C16): per output pixel the
 * window's offsets are found once, then each block of 16 channels takes
 * its max (one vector; all blocks of a pixel in turn, which reads the
 * input as it streams from memory better than block by block). Work:
 * output rows of all images. */
static void max_c16_rows(void *vctx, int64_t r0, int64_t r1) {
    const nhwc_ctx *c = vctx;
    const pool_geom *g = c->g;
    int64_t G = g->C / 16, H = g->in[0], W = g->in[1], OH = g->out[0], OW = g->out[1];
    for (int64_t r = r0; r < r1; r++) {
        int64_t n = r / OH, oh = r % OH;
        int64_t hs = oh * g->s[0] - g->pb[0];
        for (int64_t ow = 0; ow < OW; ow++) {
            int64_t off[MAX_WIN_PX];
            int np = window_px(g, hs, ow, off);
            for (int k = 0; k < np; k++) off[k] *= 16;
            for (int64_t gi = 0; gi < G; gi++) {
                const float *xb = c->x + (n * G + gi) * H * W * 16;
                float *yp = c->y + ((n * G + gi) * OH + oh) * OW * 16 + ow * 16;
#ifdef HAVE_MAX_PX_AVX512
                if (c->avx512) {
                    max16_avx512(yp, xb, off, np);
                    continue;
                }
#endif
                for (int l = 0; l < 16; l++) {
                    float m = np ? xb[off[0] + l] : -INFINITY; /* no pixel: all padding */
                    for (int k = 1; k < np; k++) m = kiln__max_keep_nan(m, xb[off[k] + l]);
                    yp[l] = m;
                }
            }
        }
    }
}

kiln_status kiln__cpu_maxpool_run(const kiln_kernel_args *a) {
    const kiln_pool_attrs *at = a->attrs;
    if (!at->layout) return a->op->cpu(a);
    pool_geom g;
    KILN_TRY(kiln__pool_geom(NODE(a), a->op->name, at, a->in[0]->rank, a->in[0]->dims, &g));
    if ((at->layout != KILN_POOL_LAYOUT_NHWC && at->layout != KILN_POOL_LAYOUT_C16) ||
        a->op->code != POOL_MAX || g.ns != 2 || a->in[0]->dtype != KILN_DTYPE_FLOAT32 ||
        (a->n_out > 1 && a->out[1]) || (at->layout == KILN_POOL_LAYOUT_C16 && g.C % 16))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): layout %d is only for a 2-D float32 MaxPool "
                         "without indices (nChw16c: channels a multiple of 16)", NODE(a), a->op->name,
                         (int)at->layout);
    int64_t rows = g.N * g.out[0];
    if (rows == 0 || g.out_sz == 0 || g.C == 0) return KILN_OK;
    nhwc_ctx c = {.g = &g, .x = a->in[0]->data, .y = a->out[0]->data};
#ifdef HAVE_MAX_PX_AVX512
    c.avx512 = __builtin_cpu_supports("avx512f");
#endif
    bool c16 = at->layout == KILN_POOL_LAYOUT_C16;
    if (c16 && g.k[0] * g.k[1] > MAX_WIN_PX) { /* large windows: NHWC images of 16 channels */
        g.N *= g.C / 16, g.C = 16, rows = g.N * g.out[0];
        c16 = false;
    }
    int64_t per = g.out[1] * g.C * g.k[0] * g.k[1];
    kiln__parallel_for(a->pool, rows, per > 0 ? (32768 + per - 1) / per : rows,
                       c16 ? max_c16_rows : max_nhwc_rows, &c);
    return KILN_OK;
}

/* GlobalAveragePool of an NHWC float32 tensor (KILN_POOL_LAYOUT_NHWC: the
 * last layer of an NHWC chain feeds it, ResNet's last block): items are
 * (image, block of 64 channels), each summing its pixels' channel vectors. */
typedef struct gap_nhwc_ctx {
    const float *x;
    float *y;
    int64_t C, px, cblocks;
} gap_nhwc_ctx;

#define GAP_CB 64
static void gap_nhwc_items(void *vctx, int64_t i0, int64_t i1) {
    const gap_nhwc_ctx *c = vctx;
    for (int64_t it = i0; it < i1; it++) {
        int64_t n = it / c->cblocks, c0 = it % c->cblocks * GAP_CB;
        int64_t nc = c->C - c0 < GAP_CB ? c->C - c0 : GAP_CB;
        double acc[GAP_CB] = {0}; /* double: as exact as the NCHW path on large images */
        const float *x = c->x + n * c->px * c->C + c0;
        for (int64_t p = 0; p < c->px; p++, x += c->C)
            for (int64_t k = 0; k < nc; k++) acc[k] += x[k];
        float *y = c->y + n * c->C + c0;
        for (int64_t k = 0; k < nc; k++) y[k] = (float)(acc[k] / (double)c->px);
    }
}

kiln_status kiln__cpu_gap_run(const kiln_kernel_args *a) {
    const kiln_pool_attrs *at = a->attrs;
    const kiln_tensor *X = a->in[0];
    if (!at || !at->layout) return a->op->cpu(a);
    if ((at->layout != KILN_POOL_LAYOUT_NHWC && at->layout != KILN_POOL_LAYOUT_C16) ||
        a->op->code != POOL_AVG || X->rank != 4 || X->dtype != KILN_DTYPE_FLOAT32 ||
        (at->layout == KILN_POOL_LAYOUT_C16 && X->dims[1] % 16))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): layout %d is only for a 4-D float32 "
                         "GlobalAveragePool (nChw16c: channels a multiple of 16)", NODE(a), a->op->name,
                         (int)at->layout);
    gap_nhwc_ctx g = {.x = X->data, .y = a->out[0]->data, .C = X->dims[1], .px = X->dims[2] * X->dims[3]};
    int64_t images = X->dims[0];
    /* nChw16c: NHWC images of 16 channels, C / 16 of them per image,
     * whose averages land as [N][C] */
    if (at->layout == KILN_POOL_LAYOUT_C16) images *= g.C / 16, g.C = 16;
    g.cblocks = (g.C + GAP_CB - 1) / GAP_CB;
    int64_t items = images * g.cblocks;
    if (items == 0 || g.px == 0) return KILN_OK;
    /* about 32K elements per piece of work (px >= 1 here) */
    int64_t per = GAP_CB * g.px;
    kiln__parallel_for(a->pool, items, (32768 + per - 1) / per, gap_nhwc_items, &g);
    return KILN_OK;
}
