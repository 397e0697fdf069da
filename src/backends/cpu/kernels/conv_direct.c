/* conv_direct.c -- fp32 direct convolution, the "direct" tactic of
 * kiln.FusedConv (see conv_direct.h for the contract and the method). */
#include "backends/cpu/kernels/conv_direct.h"

#include "backends/cpu/kernels/fused_conv_cpu.h"

#define MR 14 /* output pixels per tile at most: 14 x 2 accumulators + 2 weight rows + 1 broadcast */
#define NR KILN_DIRECT_PANEL
#ifndef PF_K
#define PF_K 8 /* weight rows fetched ahead into L1 */
#endif

size_t kiln__direct_packed_floats(int64_t C, int64_t M, int64_t kh, int64_t kw) {
    return (size_t)((M + NR - 1) / NR * NR * C * kh * kw);
}

void kiln__direct_pack(const float *W, int64_t C, int64_t M, int64_t kh, int64_t kw, float *Wp) {
    int64_t np = (M + NR - 1) / NR, K = kh * kw * C, ks = kh * kw;
    for (int64_t p = 0; p < np; p++)
        for (int64_t i = 0; i < kh; i++)
            for (int64_t j = 0; j < kw; j++)
                for (int64_t c = 0; c < C; c++) {
                    float *d = Wp + (p * K + (i * kw + j) * C + c) * NR;
                    for (int64_t l = 0; l < NR; l++) {
                        int64_t m = p * NR + l;
                        d[l] = m < M ? W[(m * C + c) * ks + i * kw + j] : 0.0f;
                    }
                }
}

/* Where element (n, c, pixel p) of a tensor of a layout lies:
 * n * img + p * ps + (c / 16) * bs + (c % 16) * cs. */
typedef struct lay {
    int64_t img, ps, bs, cs;
} lay;

static lay layout_of(int l, int64_t C, int64_t HW) {
    switch (l) {
    case KILN_DIRECT_NHWC: return (lay){.img = HW * C, .ps = C, .bs = 16, .cs = 1};
    case KILN_DIRECT_C16: return (lay){.img = C * HW, .ps = 16, .bs = 16 * HW, .cs = 1};
    default: return (lay){.img = C * HW, .ps = 1, .bs = 16 * HW, .cs = HW};
    }
}

static inline int64_t chan_off(const lay *l, int64_t c) { return (c / 16) * l->bs + (c % 16) * l->cs; }

/* Whether R pixels `ps` floats apart crowd the L1 cache: more than 8 of
 * them map to one set (64-byte lines, 64 sets: lines 4 KiB apart share
 * one). A tile reads one 16-float block of each of its pixels per step, and
 * the weights need ways too. */
static bool crowded(int64_t ps, int64_t R) {
    int64_t b = ps * 4, g = 4096;
    while (b % g) g /= 2; /* the largest power of two up to 4 KiB dividing the stride */
    int64_t sets = g >= 64 ? 4096 / g : 64;
    return (R + sets - 1) / sets > 8;
}

/* A 1x1 layer without padding reads x in place, except where its tiles'
 * pixels would crowd the L1 cache (crowded; C = 512 at stride 2: 14
 * pixels 4 KiB apart); such a layer, and a padded 1x1 one, first gathers
 * the pixels it samples into a dense NHWC image, its pixel stride padded
 * where C alone would crowd too (C = 1024 at stride 2: 1.0 against 1.4 ms
 * at 7x7). Every other layer copies x into a padded NHWC image. The layer
 * reads x in place in layout `xl` (tiles of up to MR output pixels of one
 * output row, or of the whole image at stride 1). */
static bool in_place(int64_t C, int64_t H, int64_t W, int xl, int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                     int64_t pt, int64_t pl, int64_t pb, int64_t pr) {
    if (kh != 1 || kw != 1 || pt || pl || pb || pr) return false;
    if (xl != KILN_DIRECT_NHWC) return true; /* nChw16c: pixels 64 bytes apart; NCHW: one line */
    int64_t Wo = (W - 1) / sw + 1, R = sh == 1 && sw == 1 ? H * W : Wo;
    return !crowded(sw * C, R < MR ? R : MR);
}

static int64_t gather_ps(int64_t C) { return crowded(C, MR) ? C + 16 : C; }

size_t kiln__direct_workspace(int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t sh,
                              int64_t sw, int64_t pt, int64_t pl, int64_t pb, int64_t pr) {
    /* (an NHWC input reads in place least often) */
    if (in_place(C, H, W, KILN_DIRECT_NHWC, kh, kw, sh, sw, pt, pl, pb, pr)) return 0;
    if (kh == 1 && kw == 1) { /* the gathered image: Ho x Wo pixels */
        int64_t Ho = (H + pt + pb - 1) / sh + 1, Wo = (W + pl + pr - 1) / sw + 1;
        return (size_t)(N * Ho * Wo * gather_ps(C)) * sizeof(float) + 64;
    }
    return (size_t)(N * (H + pt + pb) * (W + pl + pr) * C) * sizeof(float) + 64;
}

typedef struct plan {
    const kiln_direct_args *a;
    const float *xb;             /* what the tiles read: x, or its padded NHWC copy */
    lay x, y, r;                 /* layouts of xb, y, r */
    int64_t Hp, Wp, Ho, Wo;      /* xb's image (padded) and the output's */
    int64_t T, Kt, K;            /* kernel rows (taps), floats per tap, K = T * Kt */
    int64_t toff[KILN_DIRECT_MAX_K]; /* xb elements from a pixel to each tap's run */
    int64_t seg_len, tps, tiles; /* output pixels per run, tiles per run, tiles per image */
    int64_t np, units;           /* panels; (image, tile, panel) units */
    int parts;
    bool linear;                 /* one run of pixels per image (1x1 in place, stride 1) */
    bool chans;                  /* units panel-major (threads split the panels) */
    bool fast;
} plan;

/* One tile: output pixels [q0, q0 + R) of image n (one run: consecutive
 * input pixels xps elements apart from x), output channels of panel p. */
typedef struct tile_at {
    const float *x;
    int64_t xps;
    int64_t n, q0, p;
    int R;
    /* weight rows [pf0, pf1) of the thread's next panel, fetched into L2
     * while this tile computes (pf NULL: none) */
    const float *pf;
    int64_t pf0, pf1;
} tile_at;

/* Offset in xb of element kk (0 .. K) of a pixel's receptive field. */
static inline int64_t k_off(const plan *P, int64_t kk) {
    int64_t t = kk / P->Kt, c = kk % P->Kt;
    return P->toff[t] + chan_off(&P->x, c);
}

/* bias + residual + activation of one output element (m, pixel q0 + i),
 * the scalar epilogue (NCHW outputs and the plain C path) */
static inline void put(const plan *P, const tile_at *t, int i, int64_t m, float acc) {
    const kiln_direct_args *a = P->a;
    int64_t q = t->q0 + i;
    float v = acc + (a->bias ? a->bias[m] : 0.0f);
    if (a->r) v += a->r[t->n * P->r.img + q * P->r.ps + chan_off(&P->r, m)];
    a->y[t->n * P->y.img + q * P->y.ps + chan_off(&P->y, m)] = kiln__fc_act(a->act, a->alpha, a->beta, v);
}

static void tile_generic(const plan *P, const tile_at *t) {
    const kiln_direct_args *a = P->a;
    int64_t m0 = t->p * NR, nn = a->M - m0 < NR ? a->M - m0 : NR;
    const float *wp = a->w + t->p * P->K * NR;
    for (int i = 0; i < t->R; i++)
        for (int64_t j = 0; j < nn; j++) {
            float s = 0.0f;
            for (int64_t kk = 0; kk < P->K; kk++) s += t->x[i * t->xps + k_off(P, kk)] * wp[kk * NR + j];
            put(P, t, i, m0 + j, s);
        }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "backends/cpu/kernels/simd_act.h"

#define AVX512 __attribute__((target("avx512f,prfchw")))
#define INLINE __attribute__((always_inline)) inline

bool kiln__direct_fast_available(void) { return __builtin_cpu_supports("avx512f"); }

static AVX512 INLINE __m512 act512(const kiln_direct_args *a, __m512 v) {
    switch (a->act) {
    case KILN_FC_ACT_NONE: return v;
    case KILN_FC_ACT_RELU: return kiln__relu512(v);
    case KILN_FC_ACT_CLIP: return kiln__clip512(v, _mm512_set1_ps(a->alpha), _mm512_set1_ps(a->beta));
    case KILN_FC_ACT_HARD_SIGMOID: return kiln__hard_sigmoid512(v, _mm512_set1_ps(a->alpha), _mm512_set1_ps(a->beta));
    default: { /* the others per float (kiln__fc_act has every one) */
        float f[16];
        _mm512_storeu_ps(f, v);
        for (int l = 0; l < 16; l++) f[l] = kiln__fc_act(a->act, a->alpha, a->beta, f[l]);
        return _mm512_loadu_ps(f);
    }
    }
}

/* R pixels x 32 channels; xcs: the input's channel stride inside a block
 * (1 for NHWC and nChw16c, a constant here, so the loop below is the fast
 * one; H*W for NCHW). */
static AVX512 INLINE void tile512(const int R, const int64_t xcs, const plan *P, const tile_at *t) {
    const kiln_direct_args *a = P->a;
    const int64_t Kt = P->Kt, xps = t->xps, xbs = P->x.bs;
    const float *wp = a->w + t->p * P->K * NR;
    int64_t m0 = t->p * NR, nn = a->M - m0 < NR ? a->M - m0 : NR;
    const bool vec = P->y.cs == 1 && (!a->r || P->r.cs == 1);
    float *y0 = NULL, *y1 = NULL;
    const float *r0 = NULL, *r1 = NULL;
    const int64_t yps = P->y.ps, rps = P->r.ps;
    if (vec) {
        /* the lines the epilogue reads and writes, fetched while the tile
         * computes (inside a network they come from memory; the hardware
         * prefetchers do not follow 32-channel slices of pixels) */
        y0 = a->y + t->n * P->y.img + t->q0 * yps + chan_off(&P->y, m0);
        y1 = nn > 16 ? a->y + t->n * P->y.img + t->q0 * yps + chan_off(&P->y, m0 + 16) : y0;
        if (a->r) {
            r0 = a->r + t->n * P->r.img + t->q0 * rps + chan_off(&P->r, m0);
            r1 = nn > 16 ? a->r + t->n * P->r.img + t->q0 * rps + chan_off(&P->r, m0 + 16) : r0;
        }
        for (int i = 0; i < R; i++) {
            if (r0) {
                _mm_prefetch((const char *)(r0 + i * rps), _MM_HINT_T0);
                if (nn > 16) _mm_prefetch((const char *)(r1 + i * rps), _MM_HINT_T0);
            }
            if (r0 != y0) {
                __builtin_prefetch(y0 + i * yps, 1, 3);
                if (nn > 16) __builtin_prefetch(y1 + i * yps, 1, 3);
            }
        }
    }
    __m512 acc[MR][2];
    for (int i = 0; i < R; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t tap = 0; tap < P->T; tap++) {
        const float *x = t->x + P->toff[tap], *wt = wp + tap * Kt * NR;
        int64_t kb = 0;
        for (; kb + 16 <= Kt; kb += 16) {
            const float *xk = x + (kb / 16) * xbs, *wk = wt + kb * NR;
            if (t->pf) { /* this block's share of the next panel's rows */
                int64_t g = tap * Kt + kb, span = t->pf1 - t->pf0;
                for (int64_t j = t->pf0 + span * g / P->K, j1 = t->pf0 + span * (g + 16) / P->K; j < j1; j++) {
                    _mm_prefetch((const char *)(t->pf + j * NR), _MM_HINT_T1);
                    _mm_prefetch((const char *)(t->pf + j * NR + 16), _MM_HINT_T1);
                }
            }
            for (int k = 0; k < 16; k++) {
                /* the weights stream from L2 (or memory) once per tile: ahead */
                _mm_prefetch((const char *)(wk + (k + PF_K) * NR), _MM_HINT_T0);
                _mm_prefetch((const char *)(wk + (k + PF_K) * NR + 16), _MM_HINT_T0);
                __m512 b0 = _mm512_load_ps(wk + k * NR), b1 = _mm512_load_ps(wk + k * NR + 16);
                for (int i = 0; i < R; i++) {
                    __m512 v = _mm512_set1_ps(xk[i * xps + k * xcs]);
                    acc[i][0] = _mm512_fmadd_ps(v, b0, acc[i][0]);
                    acc[i][1] = _mm512_fmadd_ps(v, b1, acc[i][1]);
                }
            }
        }
        for (; kb < Kt; kb++) { /* past the last whole block of 16 */
            const float *xk = x + (xcs == 1 ? kb : chan_off(&P->x, kb)), *wk = wt + kb * NR;
            __m512 b0 = _mm512_load_ps(wk), b1 = _mm512_load_ps(wk + 16);
            for (int i = 0; i < R; i++) {
                __m512 v = _mm512_set1_ps(xk[i * xps]);
                acc[i][0] = _mm512_fmadd_ps(v, b0, acc[i][0]);
                acc[i][1] = _mm512_fmadd_ps(v, b1, acc[i][1]);
            }
        }
    }
    if (!vec) { /* NCHW output or residual: element by element */
        float buf[MR][NR];
        for (int i = 0; i < R; i++) {
            _mm512_storeu_ps(buf[i], acc[i][0]);
            _mm512_storeu_ps(buf[i] + 16, acc[i][1]);
        }
        for (int64_t j = 0; j < nn; j++)
            for (int i = 0; i < R; i++) put(P, t, i, m0 + j, buf[i][j]);
        return;
    }
    __mmask16 k0 = nn >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nn) - 1u);
    __mmask16 k1 = nn >= 32 ? (__mmask16)0xffff : nn > 16 ? (__mmask16)((1u << (nn - 16)) - 1u) : 0;
    __m512 c0 = _mm512_setzero_ps(), c1 = c0;
    if (a->bias) {
        c0 = _mm512_maskz_loadu_ps(k0, a->bias + m0);
        if (k1) c1 = _mm512_maskz_loadu_ps(k1, a->bias + m0 + 16);
    }
    for (int i = 0; i < R; i++) {
        __m512 v0 = _mm512_add_ps(acc[i][0], c0), v1 = _mm512_add_ps(acc[i][1], c1);
        if (r0) {
            v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(k0, r0 + i * rps));
            if (k1) v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(k1, r1 + i * rps));
        }
        _mm512_mask_storeu_ps(y0 + i * yps, k0, act512(a, v0));
        if (k1) _mm512_mask_storeu_ps(y1 + i * yps, k1, act512(a, v1));
    }
}

#define DIRECT_CASES(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14)

static AVX512 void tile_fast(const plan *P, const tile_at *t) {
    if (P->x.cs == 1) {
        switch (t->R) {
#define CASE1(r) \
    case r: tile512(r, 1, P, t); break;
            DIRECT_CASES(CASE1)
#undef CASE1
        default: break;
        }
    } else {
        switch (t->R) {
#define CASEN(r) \
    case r: tile512(r, P->x.cs, P, t); break;
            DIRECT_CASES(CASEN)
#undef CASEN
        default: break;
        }
    }
}

#else

bool kiln__direct_fast_available(void) { return false; }
static void tile_fast(const plan *P, const tile_at *t) { tile_generic(P, t); }

#endif

/* Unit u: its image, tile and panel, and where the tile's input starts. */
static void unit_tile(const plan *P, int64_t u, tile_at *t) {
    const kiln_direct_args *a = P->a;
    int64_t rest;
    if (P->chans) {
        t->p = u / (a->N * P->tiles);
        rest = u % (a->N * P->tiles);
    } else {
        t->p = u % P->np;
        rest = u / P->np;
    }
    t->n = rest / P->tiles;
    int64_t ti = rest % P->tiles, seg = ti / P->tps, i = ti % P->tps;
    int64_t o0 = P->seg_len * i / P->tps, o1 = P->seg_len * (i + 1) / P->tps;
    t->R = (int)(o1 - o0);
    t->q0 = seg * P->seg_len + o0;
    /* one run per image (output pixel q is input pixel q), else run `seg`
     * is output row seg */
    int64_t p0 = P->linear ? t->q0 : seg * a->sh * P->Wp + o0 * a->sw;
    t->x = P->xb + t->n * P->x.img + p0 * P->x.ps;
    t->xps = (P->linear ? 1 : a->sw) * P->x.ps;
}

static void run_parts(void *vp, int64_t k0, int64_t k1) {
    const plan *P = vp;
    const kiln_direct_args *a = P->a;
    for (int64_t k = k0; k < k1; k++) {
        int64_t u0 = P->units * k / P->parts, u1 = P->units * (k + 1) / P->parts;
        for (int64_t u = u0; u < u1; u++) {
            tile_at t;
            unit_tile(P, u, &t);
            /* panel-major: the part's next panel comes into L2 over the
             * current panel's units, so its first tile does not wait on
             * memory (pixel-major parts reuse every panel from L2) */
            int64_t per = a->N * P->tiles, in = u % per;
            t.pf = NULL;
            if (P->chans && (t.p + 1) * per < u1) {
                t.pf = a->w + (t.p + 1) * P->K * NR;
                t.pf0 = P->K * in / per;
                t.pf1 = P->K * (in + 1) / per;
            }
            if (P->fast) tile_fast(P, &t);
            else tile_generic(P, &t);
        }
    }
}

/* Rows per chunk of a copy of `rows` rows of `row_floats` floats each:
 * about 64 KiB, at least one row. */
static int64_t copy_grain(int64_t rows, int64_t row_floats) {
    double bytes = (double)rows * (double)row_floats * 4.0;
    return bytes > 0 ? (int64_t)(65536.0 * (double)rows / bytes) + 1 : rows;
}

/* The padded NHWC copy of x: rows [r0, r1) of all images' padded rows. */
static void pad_rows(void *vp, int64_t r0, int64_t r1) {
    const plan *P = vp;
    const kiln_direct_args *a = P->a;
    const int64_t C = a->C, HW = a->H * a->W;
    const lay src = layout_of(a->x_layout, C, HW);
    float *xb = (float *)P->xb;
    for (int64_t r = r0; r < r1; r++) {
        int64_t n = r / P->Hp, h = r % P->Hp - a->pt;
        float *d = xb + r * P->Wp * C;
        if (h < 0 || h >= a->H) {
            memset(d, 0, sizeof(float) * (size_t)(P->Wp * C));
            continue;
        }
        memset(d, 0, sizeof(float) * (size_t)(a->pl * C));
        memset(d + (a->pl + a->W) * C, 0, sizeof(float) * (size_t)(a->pr * C));
        const float *s = a->x + n * src.img;
        d += a->pl * C;
        if (a->x_layout == KILN_DIRECT_NHWC) {
            memcpy(d, s + h * a->W * C, sizeof(float) * (size_t)(a->W * C));
        } else if (a->x_layout == KILN_DIRECT_C16) {
            for (int64_t w = 0; w < a->W; w++)
                for (int64_t cb = 0; cb < C / 16; cb++)
                    memcpy(d + w * C + cb * 16, s + cb * src.bs + (h * a->W + w) * 16, 16 * sizeof(float));
        } else {
            for (int64_t c = 0; c < C; c++)
                for (int64_t w = 0; w < a->W; w++) d[w * C + c] = s[c * HW + h * a->W + w];
        }
    }
}

/* A 1x1 layer's sampled pixels as a dense NHWC image: output rows [r0, r1)
 * of all images (zeros where a pixel falls in the padding). */
static void gather_rows(void *vp, int64_t r0, int64_t r1) {
    const plan *P = vp;
    const kiln_direct_args *a = P->a;
    const int64_t C = a->C;
    const lay src = layout_of(a->x_layout, C, a->H * a->W);
    float *xb = (float *)P->xb;
    for (int64_t r = r0; r < r1; r++) {
        int64_t n = r / P->Ho, h = r % P->Ho * a->sh - a->pt;
        float *d = xb + r * P->Wo * P->x.ps;
        for (int64_t o = 0; o < P->Wo; o++, d += P->x.ps) {
            int64_t w = o * a->sw - a->pl;
            if (h < 0 || h >= a->H || w < 0 || w >= a->W) {
                memset(d, 0, sizeof(float) * (size_t)C);
                continue;
            }
            const float *s = a->x + n * src.img + (h * a->W + w) * src.ps;
            if (a->x_layout == KILN_DIRECT_NHWC) {
                memcpy(d, s, sizeof(float) * (size_t)C);
            } else if (a->x_layout == KILN_DIRECT_C16) {
                for (int64_t cb = 0; cb < C / 16; cb++) memcpy(d + cb * 16, s + cb * src.bs, 16 * sizeof(float));
            } else {
                for (int64_t c = 0; c < C; c++) d[c] = s[c * src.cs];
            }
        }
    }
}

void kiln__direct_run(const kiln_direct_args *a) {
    int64_t Ho = (a->H + a->pt + a->pb - a->kh) / a->sh + 1, Wo = (a->W + a->pl + a->pr - a->kw) / a->sw + 1;
    if (a->N < 1 || a->C < 1 || a->M < 1 || Ho < 1 || Wo < 1) return;
    plan P = {.a = a, .Ho = Ho, .Wo = Wo};
    bool inplace = in_place(a->C, a->H, a->W, a->x_layout, a->kh, a->kw, a->sh, a->sw, a->pt, a->pl, a->pb, a->pr);
    bool gather = !inplace && a->kh == 1 && a->kw == 1;
    P.Hp = a->H + a->pt + a->pb;
    P.Wp = a->W + a->pl + a->pr;
    P.y = layout_of(a->y_layout, a->M, Ho * Wo);
    P.r = layout_of(a->r_layout, a->M, Ho * Wo);
    P.fast = !a->force_generic && kiln__direct_fast_available();
    if (inplace) {
        P.xb = a->x;
        P.x = layout_of(a->x_layout, a->C, a->H * a->W);
        P.T = 1;
        P.Kt = a->C;
    } else if (gather) {
        P.xb = (const float *)(((uintptr_t)a->ws + 63) & ~(uintptr_t)63);
        int64_t ps = gather_ps(a->C);
        P.x = (lay){.img = Ho * Wo * ps, .ps = ps, .bs = 16, .cs = 1};
        P.T = 1;
        P.Kt = a->C;
        kiln__parallel_for(a->pool, a->N * Ho, copy_grain(a->N * Ho, Wo * a->C), gather_rows, &P);
    } else {
        /* padded NHWC: kernel row i's taps and channels are kw * C floats in a row */
        P.xb = (const float *)(((uintptr_t)a->ws + 63) & ~(uintptr_t)63);
        P.x = layout_of(KILN_DIRECT_NHWC, a->C, P.Hp * P.Wp);
        P.T = a->kh;
        P.Kt = a->kw * a->C;
        for (int64_t i = 0; i < a->kh; i++) P.toff[i] = i * P.Wp * a->C;
        kiln__parallel_for(a->pool, a->N * P.Hp, copy_grain(a->N * P.Hp, P.Wp * a->C), pad_rows, &P);
    }
    P.K = P.T * P.Kt;
    /* one run per image where output pixels are input pixels in order */
    P.linear = (inplace && a->sh == 1 && a->sw == 1) || gather;
    P.seg_len = P.linear ? Ho * Wo : Wo;
    P.tps = (P.seg_len + MR - 1) / MR;
    P.tiles = Ho * Wo / P.seg_len * P.tps;
    P.np = (a->M + NR - 1) / NR;
    P.units = a->N * P.tiles * P.np;
    /* threads: as many as the work pays for (cost: multiply-adds plus 16
     * per element read or written), at most one per unit */
    double px = (double)a->N * (double)Ho * (double)Wo;
    double cost = px * (double)a->M * (double)P.K + 16.0 * px * (double)(P.K + a->M);
    int parts = kiln__pool_threads(a->pool), most = kiln__parts_for_cost(cost);
    if (parts > most) parts = most;
    if (parts > P.units) parts = (int)P.units;
    if (parts < 1) parts = 1;
    P.parts = parts;
    /* the panels split where each thread would otherwise read more weights
     * than input (and there are panels enough for every thread) */
    double wbytes = (double)P.K * (double)a->M, xbytes = px * (double)P.K;
    P.chans = a->split ? a->split == 2 : wbytes > xbytes && P.np >= parts;
    kiln__parallel_for(parts > 1 ? a->pool : NULL, parts, 1, run_parts, &P);
}
