/* conv_wino.c -- fp32 Winograd F(4x4, 3x3) and F(2x2, 3x3) convolution
 * (see conv_wino.h).
 *
 * F(4x4, 3x3) (output tiles of m = 4, input tiles of a = m + 2 = 6; Lavin &
 * Gray 2015, points 0, +-1, +-2, inf):
 *
 *   B^T = | 4  0 -5  0  1  0 |   G = |  1/4     0     0  |   A^T = | 1  1  1  1  1  0 |
 *         | 0 -4 -4  1  1  0 |       | -1/6  -1/6  -1/6 |         | 0  1 -1  2 -2  0 |
 *         | 0  4 -4 -1  1  0 |       | -1/6   1/6  -1/6 |         | 0  1  1  4  4  0 |
 *         | 0 -2 -1  2  1  0 |       | 1/24  1/12   1/6 |         | 0  1 -1  8 -8  1 |
 *         | 0  2 -1 -2  1  0 |       | 1/24 -1/12   1/6 |
 *         | 0  4  0 -5  0  1 |       |    0     0     1 |
 *
 * F(2x2, 3x3) (m = 2, a = 4; points 0, +-1, inf): fewer multiplies saved
 * (2.25x against 4x) but transformed weights of 16/9 of the layer's (not
 * 4x), for layers whose weights outweigh their images:
 *
 *   B^T = | 1  0 -1  0 |   G = |   1     0    0  |   A^T = | 1  1  1  0 |
 *         | 0  1  1  0 |       | 1/2   1/2  1/2  |         | 0  1 -1 -1 |
 *         | 0 -1  1  0 |       | 1/2  -1/2  1/2  |
 *         | 0  1  0 -1 |       |   0     0    1  |
 *
 * Below, "36" is a*a (16 for F(2x2)).
 *
 * Layouts. Channels are padded to multiples of 16 (Cp, Mp). The input is
 * read NHWC with Cp channels per pixel: the caller's tensor when it is NHWC
 * with C % 16 == 0, else a zero padded NHWC copy in the workspace. Tiles
 * are numbered over the whole batch (image-major, then tile rows), so the
 * weights are reused across images, and are processed in blocks of TB
 * tiles:
 *
 *   V[36][TB][Cp]  input transform of the block (one plane per point p)
 *   M[36][TB][Mp]  M[p] = V[p] U[p], 36 matrix products
 *   U[36][Mp/32][Cp][32]  packed weights, panels of 32 output channels
 *                 (the last one 16 wide when Mp % 32 == 16)
 *
 * then the output transform adds the bias and the residual, applies the
 * activation and stores the 4x4 tile into y (NHWC), or into an NHWC copy
 * (bias only) that a last pass turns into NCHW with residual and
 * activation. The V and M planes are 16 floats longer than TB rows so the
 * 36 vectors of one tile do not all map to the same L1 set. The matrix
 * products keep a 12-tile x 32-channel block of M in 24 zmm registers over
 * the whole of Cp.
 *
 * Threads: with enough blocks each thread takes whole blocks (its own V and
 * M slot of the workspace, claimed through an atomic flag) and runs all
 * three steps on them without synchronizing; with few blocks (small
 * images) the three steps of each block are split over the threads in
 * turn: tiles, then (point, panel) pairs, then tiles. */
#include "backends/cpu/kernels/conv_wino.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#define CB 16           /* channel group (one zmm) */
#define NR 32           /* weight panel width */
#define MR 12           /* tiles per register block of the products */
#define MAX_SLOTS 64    /* threads that take whole blocks */
/* Floats of V + M in one block. While the weights fit in L2 with room to
 * spare, small blocks keep V and M there too (measured on ResNet-50's
 * 56x56x64 layer: 0.39 ms at 128K floats, 0.52 ms at 1M); larger weights
 * come from L3 once per block, so then one block takes as many tiles as
 * possible (28x28x128: 0.40 ms at 1M floats, 0.48 ms at 128K). */
#ifndef KILN_WINO_BLOCK_SMALL
#define KILN_WINO_BLOCK_SMALL (160 * 1024)
#endif
#define BLOCK_LARGE (1024 * 1024)
#define U_IN_L2 (384 * 1024) /* weights (floats) that count as fitting L2 */

static int64_t rup(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

/* ---- sizes ------------------------------------------------------------------ */

typedef struct wino_geom {
    int m, a, np; /* output tile m x m, input tile a x a (a = m + 2), np = a * a points */
    int64_t Ho, Wo, th, tw, T, Ttot, Cp, Mp, TB, nblk, vps, mps;
    size_t xs_floats, yt_floats, slot_floats;
} wino_geom;

/* tile: 2 or 4 (anything else is taken as 4) */
static int tile_m(int tile) { return tile == 2 ? 2 : 4; }

static void geom_init(wino_geom *g, int64_t N, int64_t H, int64_t W, int64_t C, int64_t M, int pt, int pl,
                      int pb, int pr, int tile) {
    g->m = tile_m(tile);
    g->a = g->m + 2;
    g->np = g->a * g->a;
    g->Ho = H + pt + pb - 2;
    g->Wo = W + pl + pr - 2;
    g->th = (g->Ho + g->m - 1) / g->m;
    g->tw = (g->Wo + g->m - 1) / g->m;
    g->T = g->th * g->tw;
    g->Ttot = N * g->T;
    g->Cp = rup(C, CB);
    g->Mp = rup(M, CB);
    int64_t per_tile = g->np * (g->Cp + g->Mp);
    int64_t budget = g->np * g->Cp * g->Mp <= U_IN_L2 ? KILN_WINO_BLOCK_SMALL : BLOCK_LARGE;
    int64_t tb = budget / per_tile / MR * MR;
    if (tb < MR) tb = MR;
    g->nblk = (g->Ttot + tb - 1) / tb;
    g->TB = (g->Ttot + g->nblk - 1) / g->nblk; /* balanced blocks */
    g->vps = g->TB * g->Cp + CB;
    g->mps = g->TB * g->Mp + CB;
    g->xs_floats = (size_t)(N * H * W * g->Cp);
    g->yt_floats = (size_t)(N * g->Ho * g->Wo * g->Mp);
    g->slot_floats = (size_t)(g->np * (g->vps + g->mps));
}

size_t kiln__wino_packed_floats(int64_t C, int64_t M, int tile) {
    int a = tile_m(tile) + 2;
    return (size_t)(a * a * rup(C, CB) * rup(M, CB));
}

size_t kiln__wino_workspace(int64_t N, int64_t H, int64_t W, int64_t C, int64_t M, int pt, int pl, int pb,
                            int pr, int tile, int threads) {
    wino_geom g;
    geom_init(&g, N, H, W, C, M, pt, pl, pb, pr, tile);
    if (threads < 1) threads = 1;
    if (threads > MAX_SLOTS) threads = MAX_SLOTS;
    return 64 + sizeof(float) * (g.xs_floats + g.yt_floats + (size_t)threads * g.slot_floats);
}

/* Offset of U[p][c][m] in the packed weights. */
static int64_t u_index(int64_t Cp, int64_t Mp, int p, int64_t c, int64_t m) {
    int64_t panel = m / NR, w = Mp - panel * NR < NR ? Mp - panel * NR : NR;
    return p * Cp * Mp + panel * NR * Cp + c * w + m % NR;
}

void kiln__wino_pack(const float *W, int64_t C, int64_t M, int tile, float *U) {
    static const double G6[6][3] = {{1.0 / 4, 0, 0},
                                    {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                    {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                    {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                    {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                    {0, 0, 1}};
    static const double G4[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
    int a = tile_m(tile) + 2;
    const double(*G)[3] = a == 6 ? G6 : G4;
    int64_t Cp = rup(C, CB), Mp = rup(M, CB);
    memset(U, 0, sizeof(float) * kiln__wino_packed_floats(C, M, tile));
    for (int64_t m = 0; m < M; m++)
        for (int64_t c = 0; c < C; c++) {
            const float *g = W + (m * C + c) * 9;
            double t[6][3];
            for (int i = 0; i < a; i++)
                for (int j = 0; j < 3; j++)
                    t[i][j] = G[i][0] * g[0 * 3 + j] + G[i][1] * g[1 * 3 + j] + G[i][2] * g[2 * 3 + j];
            for (int i = 0; i < a; i++)
                for (int j = 0; j < a; j++) {
                    double v = t[i][0] * G[j][0] + t[i][1] * G[j][1] + t[i][2] * G[j][2];
                    U[u_index(Cp, Mp, i * a + j, c, m)] = (float)v;
                }
        }
}

/* ---- the run's plan ------------------------------------------------------------ */

typedef struct wino_plan {
    const kiln_wino_args *a;
    wino_geom g;
    const float *xs; /* NHWC input with Cp channels per pixel, or nChw16c */
    int64_t xps, xgs; /* xs: floats from one pixel to the next, from one group of 16 channels to the next */
    float *yt;       /* NHWC output with Mp channels (NCHW y), else NULL */
    int64_t yps, ygs; /* the same for y (yt when it is used) */
    float *slots;
    int nslots;
    bool fast;
    int64_t b0, rows; /* mode B: the block being run */
    atomic_int busy[MAX_SLOTS];
} wino_plan;

/* Tile position of global tile tg. */
static void tile_pos(const wino_plan *P, int64_t tg, int64_t *n, int64_t *oy, int64_t *ox) {
    int64_t t = tg % P->g.T;
    *n = tg / P->g.T;
    *oy = t / P->g.tw * P->g.m;
    *ox = t % P->g.tw * P->g.m;
}

/* ---- generic kernels (plain C) ------------------------------------------------- */

/* B^T d over a values (6 or 4; stride 1 in a local array): r = B^T d. */
static void bt_gen(int a, const float d[6][CB], float r[6][CB]) {
    for (int l = 0; l < CB; l++) {
        if (a == 4) {
            float d0 = d[0][l], d1 = d[1][l], d2 = d[2][l], d3 = d[3][l];
            r[0][l] = d0 - d2;
            r[1][l] = d1 + d2;
            r[2][l] = d2 - d1;
            r[3][l] = d1 - d3;
            continue;
        }
        float d0 = d[0][l], d1 = d[1][l], d2 = d[2][l], d3 = d[3][l], d4 = d[4][l], d5 = d[5][l];
        r[0][l] = 4.0f * d0 - 5.0f * d2 + d4;
        r[1][l] = (d3 + d4) - 4.0f * (d1 + d2);
        r[2][l] = (d4 - d3) + 4.0f * (d1 - d2);
        r[3][l] = (d4 - d2) + 2.0f * (d3 - d1);
        r[4][l] = (d4 - d2) - 2.0f * (d3 - d1);
        r[5][l] = 4.0f * d1 - 5.0f * d3 + d5;
    }
}

/* A^T m over a values: the m = a - 2 outputs. */
static void at_gen(int a, const float m[6][CB], float o[4][CB]) {
    for (int l = 0; l < CB; l++) {
        if (a == 4) {
            o[0][l] = m[0][l] + m[1][l] + m[2][l];
            o[1][l] = m[1][l] - m[2][l] - m[3][l];
            continue;
        }
        float s12 = m[1][l] + m[2][l], d12 = m[1][l] - m[2][l];
        float s34 = m[3][l] + m[4][l], d34 = m[3][l] - m[4][l];
        o[0][l] = m[0][l] + s12 + s34;
        o[1][l] = d12 + 2.0f * d34;
        o[2][l] = s12 + 4.0f * s34;
        o[3][l] = d12 + 8.0f * d34 + m[5][l];
    }
}

static void in_tile_gen(const wino_plan *P, int64_t tg, float *V) {
    const kiln_wino_args *a = P->a;
    int64_t n, oy, ox, Cp = P->g.Cp;
    int A = P->g.a;
    tile_pos(P, tg, &n, &oy, &ox);
    int64_t iy0 = oy - a->pt, ix0 = ox - a->pl;
    const float *img = P->xs + n * a->H * a->W * Cp;
    for (int64_t cg = 0; cg < Cp; cg += CB) {
        float t[6][6][CB]; /* [row i][col j] after B^T on columns */
        for (int j = 0; j < A; j++) {
            float d[6][CB], r[6][CB];
            int64_t ix = ix0 + j;
            for (int i = 0; i < A; i++) {
                int64_t iy = iy0 + i;
                if (iy >= 0 && iy < a->H && ix >= 0 && ix < a->W)
                    memcpy(d[i], img + (iy * a->W + ix) * P->xps + cg / CB * P->xgs, sizeof d[i]);
                else
                    memset(d[i], 0, sizeof d[i]);
            }
            bt_gen(A, (const float(*)[CB])d, r);
            for (int i = 0; i < A; i++) memcpy(t[i][j], r[i], sizeof r[i]);
        }
        for (int i = 0; i < A; i++) {
            float r[6][CB];
            bt_gen(A, (const float(*)[CB])t[i], r);
            for (int j = 0; j < A; j++) memcpy(V + (i * A + j) * P->g.vps + cg, r[j], sizeof r[j]);
        }
    }
}

/* Rows [0, R) of M[p] (ldc Mp) for one panel of w columns: A (R x K, lda
 * Cp) times B (K x w). */
static void gemm_gen(int R, int w, const float *A, int64_t lda, const float *B, int64_t K, float *Cm,
                     int64_t ldc) {
    for (int r = 0; r < R; r++) {
        float acc[NR];
        for (int j = 0; j < w; j++) acc[j] = 0.0f;
        for (int64_t k = 0; k < K; k++) {
            float av = A[r * lda + k];
            const float *b = B + k * w;
            for (int j = 0; j < w; j++) acc[j] += av * b[j];
        }
        memcpy(Cm + r * ldc, acc, sizeof(float) * (size_t)w);
    }
}

/* Stores 16 channels (m0..m0+nm) of output pixel (n, y, x): bias added
 * already; residual and activation here (NHWC y) or later (NCHW y). */
static void store_px_gen(const wino_plan *P, int64_t n, int64_t y, int64_t x, int64_t m0, const float *v) {
    const kiln_wino_args *a = P->a;
    int64_t HWo = P->g.Ho * P->g.Wo, off = (y * P->g.Wo + x) * P->yps + m0 / CB * P->ygs;
    if (P->yt) {
        memcpy(P->yt + n * HWo * P->g.Mp + off, v, sizeof(float) * CB);
        return;
    }
    int64_t nm = a->M - m0 < CB ? a->M - m0 : CB;
    off += n * HWo * a->M;
    float *dst = a->y + off;
    const float *res = a->r ? a->r + off : NULL;
    for (int64_t l = 0; l < nm; l++) {
        float s = v[l];
        if (res) s += res[l];
        dst[l] = kiln__fc_act(a->act, a->alpha, a->beta, s);
    }
}

static void out_tile_gen(const wino_plan *P, int64_t tg, const float *Mb) {
    const kiln_wino_args *a = P->a;
    int64_t n, oy, ox, Mp = P->g.Mp;
    int A = P->g.a, m_ = P->g.m;
    tile_pos(P, tg, &n, &oy, &ox);
    for (int64_t mg = 0; mg < Mp; mg += CB) {
        float t[4][6][CB];
        for (int j = 0; j < A; j++) {
            float m[6][CB], o[4][CB];
            for (int i = 0; i < A; i++) memcpy(m[i], Mb + (i * A + j) * P->g.mps + mg, sizeof m[i]);
            at_gen(A, (const float(*)[CB])m, o);
            for (int i = 0; i < m_; i++) memcpy(t[i][j], o[i], sizeof o[i]);
        }
        float bias[CB];
        for (int l = 0; l < CB; l++) bias[l] = a->bias && mg + l < a->M ? a->bias[mg + l] : 0.0f;
        for (int i = 0; i < m_ && oy + i < P->g.Ho; i++) {
            float o[4][CB];
            at_gen(A, (const float(*)[CB])t[i], o);
            for (int j = 0; j < m_ && ox + j < P->g.Wo; j++) {
                for (int l = 0; l < CB; l++) o[j][l] += bias[l];
                store_px_gen(P, n, oy + i, ox + j, mg, o[j]);
            }
        }
    }
}

/* ---- AVX-512F kernels -------------------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "backends/cpu/kernels/simd_act.h"
#define HAVE_X86 1
#define AVX512 __attribute__((target("avx512f")))
#define INLINE __attribute__((always_inline)) inline

bool kiln__wino_fast_available(void) { return __builtin_cpu_supports("avx512f"); }

static AVX512 INLINE void bt6_512(const __m512 d[6], __m512 r[6]) {
    const __m512 c2 = _mm512_set1_ps(2.0f), c4 = _mm512_set1_ps(4.0f), c5 = _mm512_set1_ps(5.0f);
    r[0] = _mm512_add_ps(_mm512_fnmadd_ps(c5, d[2], _mm512_mul_ps(c4, d[0])), d[4]);
    r[1] = _mm512_fnmadd_ps(c4, _mm512_add_ps(d[1], d[2]), _mm512_add_ps(d[3], d[4]));
    r[2] = _mm512_fmadd_ps(c4, _mm512_sub_ps(d[1], d[2]), _mm512_sub_ps(d[4], d[3]));
    __m512 a = _mm512_sub_ps(d[4], d[2]), b = _mm512_sub_ps(d[3], d[1]);
    r[3] = _mm512_fmadd_ps(c2, b, a);
    r[4] = _mm512_fnmadd_ps(c2, b, a);
    r[5] = _mm512_add_ps(_mm512_fnmadd_ps(c5, d[3], _mm512_mul_ps(c4, d[1])), d[5]);
}

static AVX512 INLINE void at6_512(const __m512 m[6], __m512 o[4]) {
    __m512 s12 = _mm512_add_ps(m[1], m[2]), d12 = _mm512_sub_ps(m[1], m[2]);
    __m512 s34 = _mm512_add_ps(m[3], m[4]), d34 = _mm512_sub_ps(m[3], m[4]);
    o[0] = _mm512_add_ps(_mm512_add_ps(m[0], s12), s34);
    o[1] = _mm512_fmadd_ps(_mm512_set1_ps(2.0f), d34, d12);
    o[2] = _mm512_fmadd_ps(_mm512_set1_ps(4.0f), s34, s12);
    o[3] = _mm512_add_ps(_mm512_fmadd_ps(_mm512_set1_ps(8.0f), d34, d12), m[5]);
}

static AVX512 INLINE void bt4_512(const __m512 d[6], __m512 r[6]) {
    r[0] = _mm512_sub_ps(d[0], d[2]);
    r[1] = _mm512_add_ps(d[1], d[2]);
    r[2] = _mm512_sub_ps(d[2], d[1]);
    r[3] = _mm512_sub_ps(d[1], d[3]);
}

static AVX512 INLINE void at4_512(const __m512 m[6], __m512 o[4]) {
    __m512 s = _mm512_add_ps(m[1], m[2]);
    o[0] = _mm512_add_ps(m[0], s);
    o[1] = _mm512_sub_ps(_mm512_sub_ps(m[1], m[2]), m[3]);
}

/* B^T d and A^T m of tile size a = A (6 or 4). */
static AVX512 INLINE void bt_512(const int A, const __m512 d[6], __m512 r[6]) {
    if (A == 6)
        bt6_512(d, r);
    else
        bt4_512(d, r);
}

static AVX512 INLINE void at_512(const int A, const __m512 m[6], __m512 o[4]) {
    if (A == 6)
        at6_512(m, o);
    else
        at4_512(m, o);
}

/* Input transform of one tile, a = A (6 or 4, a constant where inlined). */
static AVX512 INLINE void in_tile_512a(const wino_plan *P, int64_t tg, float *V, const int A) {
    const kiln_wino_args *a = P->a;
    int64_t n, oy, ox, Cp = P->g.Cp, vps = P->g.vps;
    tile_pos(P, tg, &n, &oy, &ox);
    int64_t iy0 = oy - a->pt, ix0 = ox - a->pl;
    const float *img = P->xs + n * a->H * a->W * Cp;
    bool ok[6][6], inside = true;
    for (int i = 0; i < A; i++)
        for (int j = 0; j < A; j++) {
            ok[i][j] = iy0 + i >= 0 && iy0 + i < a->H && ix0 + j >= 0 && ix0 + j < a->W;
            inside = inside && ok[i][j];
        }
    int64_t ps = P->xps, gs = P->xgs, rs = a->W * ps;
    const float *base = inside ? img + (iy0 * a->W + ix0) * ps : img;
    for (int64_t cg = 0; cg < Cp; cg += CB) {
        __m512 t[6][6];
        int64_t go = cg / CB * gs;
        for (int j = 0; j < A; j++) {
            __m512 d[6], r[6];
            if (inside) {
                for (int i = 0; i < A; i++) d[i] = _mm512_loadu_ps(base + i * rs + j * ps + go);
            } else {
                for (int i = 0; i < A; i++)
                    d[i] = ok[i][j] ? _mm512_loadu_ps(img + ((iy0 + i) * a->W + ix0 + j) * ps + go)
                                    : _mm512_setzero_ps();
            }
            bt_512(A, d, r);
            for (int i = 0; i < A; i++) t[i][j] = r[i];
        }
        for (int i = 0; i < A; i++) {
            __m512 r[6];
            bt_512(A, t[i], r);
            for (int j = 0; j < A; j++) _mm512_storeu_ps(V + (i * A + j) * vps + cg, r[j]);
        }
    }
}

static AVX512 void in_tile_512(const wino_plan *P, int64_t tg, float *V) {
    if (P->g.a == 6)
        in_tile_512a(P, tg, V, 6);
    else
        in_tile_512a(P, tg, V, 4);
}

/* R rows x (16 * NV) columns of M[p], over the whole K; B rows ldb apart.
 * pf (or NULL): K rows of ldb floats to prefetch into L2 meanwhile. */
static AVX512 INLINE void gk512(int R, int NV, const float *A, int64_t lda, const float *B, int64_t ldb, int64_t K,
                                float *Cm, int64_t ldc, const float *pf) {
    __m512 acc[MR][2];
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        if (pf) {
            _mm_prefetch((const char *)(pf + k * ldb), _MM_HINT_T1);
            if (NV == 2) _mm_prefetch((const char *)(pf + k * ldb + 16), _MM_HINT_T1);
        }
        __m512 b0 = _mm512_loadu_ps(B + k * ldb);
        __m512 b1 = NV == 2 ? _mm512_loadu_ps(B + k * ldb + 16) : b0;
        for (int r = 0; r < R; r++) {
            __m512 av = _mm512_set1_ps(A[r * lda + k]);
            acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
            if (NV == 2) acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
        }
    }
    for (int r = 0; r < R; r++) {
        _mm512_storeu_ps(Cm + r * ldc, acc[r][0]);
        if (NV == 2) _mm512_storeu_ps(Cm + r * ldc + 16, acc[r][1]);
    }
}

#define GK(R, NV) gk512(R, NV, A, lda, B, ldb, K, Cm, ldc, pf)
#define GK_CASES(NV)                                                                               \
    switch (R) {                                                                                   \
    case 12: GK(12, NV); break;                                                                    \
    case 11: GK(11, NV); break;                                                                    \
    case 10: GK(10, NV); break;                                                                    \
    case 9: GK(9, NV); break;                                                                      \
    case 8: GK(8, NV); break;                                                                      \
    case 7: GK(7, NV); break;                                                                      \
    case 6: GK(6, NV); break;                                                                      \
    case 5: GK(5, NV); break;                                                                      \
    case 4: GK(4, NV); break;                                                                      \
    case 3: GK(3, NV); break;                                                                      \
    case 2: GK(2, NV); break;                                                                      \
    default: GK(1, NV); break;                                                                     \
    }

/* Rows [0, R) (R <= 12) of one panel of w (32 or 16) columns. (16 x 16
 * blocks for 13..16 rows, streaming the panel once, measured slower on
 * 14x14x256: 0.88 ms against 0.60 ms for 12 + 4 rows.) pf: as gk512. */
static AVX512 void gemm_512(int R, int w, const float *A, int64_t lda, const float *B, int64_t K, float *Cm,
                            int64_t ldc, const float *pf) {
    int64_t ldb = w;
    if (w == 32) {
        GK_CASES(2)
    } else {
        GK_CASES(1)
    }
}

/* Output transform and store of one tile, a = A (6 or 4). */
static AVX512 INLINE void out_tile_512a(const wino_plan *P, int64_t tg, const float *Mb, const int A) {
    const kiln_wino_args *a = P->a;
    const int m_ = A - 2;
    int64_t n, oy, ox, Mp = P->g.Mp, mps = P->g.mps, Ho = P->g.Ho, Wo = P->g.Wo;
    tile_pos(P, tg, &n, &oy, &ox);
    int ni = Ho - oy < m_ ? (int)(Ho - oy) : m_, nj = Wo - ox < m_ ? (int)(Wo - ox) : m_;
    bool direct = P->yt == NULL;
    int64_t ps = P->yps, gs = P->ygs, img = n * Ho * Wo * (direct ? a->M : Mp);
    float *dst = (direct ? a->y : P->yt) + img;
    const float *res = direct && a->r ? a->r + img : NULL;
    int act = direct ? a->act : KILN_FC_ACT_NONE;
    __m512 lo = _mm512_set1_ps(a->alpha), hi = _mm512_set1_ps(a->beta), zero = _mm512_setzero_ps();
    for (int64_t mg = 0; mg < Mp; mg += CB) {
        int64_t nm = (direct ? a->M : Mp) - mg;
        __mmask16 mk = nm >= CB ? (__mmask16)0xffff : (__mmask16)((1u << nm) - 1u);
        __m512 t[4][6];
        for (int j = 0; j < A; j++) {
            __m512 m[6], o[4];
            for (int i = 0; i < A; i++) m[i] = _mm512_loadu_ps(Mb + (i * A + j) * mps + mg);
            at_512(A, m, o);
            for (int i = 0; i < m_; i++) t[i][j] = o[i];
        }
        int64_t nb = a->M - mg; /* >= 1: Mp - M < 16 */
        __mmask16 bmk = nb >= CB ? (__mmask16)0xffff : (__mmask16)((1u << nb) - 1u);
        __m512 bias = a->bias ? _mm512_maskz_loadu_ps(bmk, a->bias + mg) : zero;
        for (int i = 0; i < ni; i++) {
            __m512 o[4];
            at_512(A, t[i], o);
            int64_t pix = (oy + i) * Wo + ox, go = mg / CB * gs;
            for (int j = 0; j < nj; j++) {
                __m512 v = _mm512_add_ps(o[j], bias);
                float *d = dst + (pix + j) * ps + go;
                if (res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, res + (pix + j) * ps + go));
                if (act == KILN_FC_ACT_NONE) {
                } else if (act == KILN_FC_ACT_RELU) {
                    v = kiln__relu512(v);
                } else if (act == KILN_FC_ACT_CLIP) {
                    v = kiln__clip512(v, lo, hi);
                } else {
                    float tmp[CB];
                    _mm512_storeu_ps(tmp, v);
                    for (int l = 0; l < CB; l++) tmp[l] = kiln__fc_act(act, a->alpha, a->beta, tmp[l]);
                    v = _mm512_loadu_ps(tmp);
                }
                _mm512_mask_storeu_ps(d, mk, v);
            }
        }
    }
}

static AVX512 void out_tile_512(const wino_plan *P, int64_t tg, const float *Mb) {
    if (P->g.a == 6)
        out_tile_512a(P, tg, Mb, 6);
    else
        out_tile_512a(P, tg, Mb, 4);
}

#else
#define HAVE_X86 0
bool kiln__wino_fast_available(void) { return false; }
#endif

/* ---- driver ------------------------------------------------------------------- */

static float *slot_v(const wino_plan *P, int s) { return P->slots + (size_t)s * P->g.slot_floats; }
static float *slot_m(const wino_plan *P, int s) { return slot_v(P, s) + P->g.np * P->g.vps; }

/* Tiles [b0 + t0, b0 + t1) of the block starting at global tile b0. */
static void in_tiles(const wino_plan *P, int64_t b0, int64_t t0, int64_t t1, float *V) {
    for (int64_t t = t0; t < t1; t++) {
#if HAVE_X86
        if (P->fast) {
            in_tile_512(P, b0 + t, V + t * P->g.Cp);
            continue;
        }
#endif
        in_tile_gen(P, b0 + t, V + t * P->g.Cp);
    }
}

static void out_tiles(const wino_plan *P, int64_t b0, int64_t t0, int64_t t1, const float *Mb) {
    for (int64_t t = t0; t < t1; t++) {
#if HAVE_X86
        if (P->fast) {
            out_tile_512(P, b0 + t, Mb + t * P->g.Mp);
            continue;
        }
#endif
        out_tile_gen(P, b0 + t, Mb + t * P->g.Mp);
    }
}

/* Products for items [i0, i1) of (point p, panel) pairs of a block. */
static void gemms(const wino_plan *P, int64_t rows, int64_t i0, int64_t i1, const float *V, float *Mb) {
    int64_t Cp = P->g.Cp, Mp = P->g.Mp, np = (Mp + NR - 1) / NR;
    for (int64_t it = i0; it < i1; it++) {
        int p = (int)(it / np);
        int64_t panel = it % np, m0 = panel * NR;
        int w = Mp - m0 < NR ? (int)(Mp - m0) : NR;
        const float *A = V + p * P->g.vps, *B = P->a->u + p * Cp * Mp + m0 * Cp;
        float *Cm = Mb + p * P->g.mps + m0;
        /* rows in nearly equal register blocks (49 tiles: 10,10,10,10,9, not
         * 12,12,12,12,1, whose one-row block streams the panel for little) */
        int64_t nch = (rows + MR - 1) / MR;
        for (int64_t ch = 0; ch < nch; ch++) {
            int64_t r = ch * rows / nch;
            int R = (int)((ch + 1) * rows / nch - r);
#if HAVE_X86
            if (P->fast) {
                /* the first register block of a panel prefetches the next
                 * one (the panels lie in the order of the items): inside a
                 * network the weights come from memory, and waiting for
                 * them took 0.4 of F(2x2)'s 1.05 ms on ResNet-50's 14x14
                 * layers at batch 1 */
                const float *pf = ch == 0 && it + 1 < i1 ? B + Cp * w : NULL;
                gemm_512(R, w, A + r * Cp, Cp, B, Cp, Cm + r * Mp, Mp, pf);
                continue;
            }
#endif
            gemm_gen(R, w, A + r * Cp, Cp, B, Cp, Cm + r * Mp, Mp);
        }
    }
}

/* Mode A: thread ranges [s0, s1) of tiles (range s: tiles [s Ttot / n,
 * (s + 1) Ttot / n) of n), each in balanced blocks of at most TB tiles on
 * one claimed slot. */
static void run_ranges(void *ctx, int64_t s0, int64_t s1) {
    wino_plan *P = ctx;
    int s = 0;
    for (;; s = (s + 1) % P->nslots) {
        int expect = 0;
        if (atomic_compare_exchange_strong(&P->busy[s], &expect, 1)) break;
    }
    float *V = slot_v(P, s), *Mb = slot_m(P, s);
    int64_t items = P->g.np * ((P->g.Mp + NR - 1) / NR), n = P->nslots, T = P->g.Ttot;
    for (int64_t r = s0; r < s1; r++) {
        int64_t t0 = r * T / n, t1 = (r + 1) * T / n;
        int64_t nb = (t1 - t0 + P->g.TB - 1) / P->g.TB;
        for (int64_t b = 0; b < nb; b++) {
            int64_t b0 = t0 + b * (t1 - t0) / nb, rows = t0 + (b + 1) * (t1 - t0) / nb - b0;
            in_tiles(P, b0, 0, rows, V);
            gemms(P, rows, 0, items, V, Mb);
            out_tiles(P, b0, 0, rows, Mb);
        }
    }
    atomic_store(&P->busy[s], 0);
}

/* Mode B: one step of the block (P->b0, P->rows) split over the threads. */
static void step_in(void *ctx, int64_t t0, int64_t t1) {
    const wino_plan *P = ctx;
    in_tiles(P, P->b0, t0, t1, slot_v(P, 0));
}
static void step_gemm(void *ctx, int64_t i0, int64_t i1) {
    const wino_plan *P = ctx;
    gemms(P, P->rows, i0, i1, slot_v(P, 0), slot_m(P, 0));
}
static void step_out(void *ctx, int64_t t0, int64_t t1) {
    const wino_plan *P = ctx;
    out_tiles(P, P->b0, t0, t1, slot_m(P, 0));
}

/* Input copy to NHWC with Cp channels: rows (n, h) [r0, r1). */
static void repack_x(void *ctx, int64_t r0, int64_t r1) {
    const wino_plan *P = ctx;
    const kiln_wino_args *a = P->a;
    int64_t H = a->H, W = a->W, C = a->C, Cp = P->g.Cp;
    float *xs = (float *)P->xs;
    for (int64_t r = r0; r < r1; r++) {
        int64_t n = r / H, h = r % H;
        float *d = xs + r * W * Cp;
        if (a->x_nhwc) {
            for (int64_t w = 0; w < W; w++) {
                memcpy(d + w * Cp, a->x + (r * W + w) * C, sizeof(float) * (size_t)C);
                memset(d + w * Cp + C, 0, sizeof(float) * (size_t)(Cp - C));
            }
        } else {
            for (int64_t c = 0; c < C; c++) {
                const float *s = a->x + ((n * C + c) * H + h) * W;
                for (int64_t w = 0; w < W; w++) d[w * Cp + c] = s[w];
            }
            for (int64_t w = 0; w < W; w++) memset(d + w * Cp + C, 0, sizeof(float) * (size_t)(Cp - C));
        }
    }
}

/* NHWC copy (conv + bias) -> NCHW y with residual and activation: planes
 * (n, m) [q0, q1). */
static void finish_nchw(void *ctx, int64_t q0, int64_t q1) {
    const wino_plan *P = ctx;
    const kiln_wino_args *a = P->a;
    int64_t HW = P->g.Ho * P->g.Wo, M = a->M, Mp = P->g.Mp;
    for (int64_t q = q0; q < q1; q++) {
        int64_t n = q / M, m = q % M;
        const float *s = P->yt + n * HW * Mp + m;
        const float *res = a->r ? a->r + q * HW : NULL;
        float *d = a->y + q * HW;
        for (int64_t i = 0; i < HW; i++) {
            float v = s[i * Mp];
            if (res) v += res[i];
            d[i] = kiln__fc_act(a->act, a->alpha, a->beta, v);
        }
    }
}

void kiln__wino_run(const kiln_wino_args *a) {
    wino_plan P;
    memset(&P, 0, sizeof P);
    P.a = a;
    geom_init(&P.g, a->N, a->H, a->W, a->C, a->M, a->pt, a->pl, a->pb, a->pr, a->tile);
    if (P.g.Ho < 1 || P.g.Wo < 1 || a->N < 1) return;
    P.fast = !a->force_generic && kiln__wino_fast_available();
    float *ws = (float *)(((uintptr_t)a->ws + 63) & ~(uintptr_t)63);
    size_t avail = a->ws_bytes >= 64 ? (a->ws_bytes - 64) / sizeof(float) : 0;
    size_t fixed = P.g.xs_floats + P.g.yt_floats;
    KILN_ASSERT(avail >= fixed + P.g.slot_floats);
    int64_t ns = (int64_t)((avail - fixed) / P.g.slot_floats);
    int threads = kiln__pool_threads(a->pool);
    P.nslots = (int)(ns < threads ? ns : threads);
    if (P.nslots > MAX_SLOTS) P.nslots = MAX_SLOTS;
    for (int s = 0; s < MAX_SLOTS; s++) atomic_init(&P.busy[s], 0);

    float *xs = ws, *yt = ws + P.g.xs_floats;
    P.slots = yt + P.g.yt_floats;
    /* nChw16c (x_nhwc / y_nhwc 2): the caller checked C and M are multiples of 16 */
    KILN_ASSERT((a->x_nhwc != KILN_WINO_C16 || a->C % CB == 0) && (a->y_nhwc != KILN_WINO_C16 || a->M % CB == 0));
    P.xps = P.g.Cp, P.xgs = CB;
    if (a->x_nhwc == KILN_WINO_C16) {
        P.xs = a->x;
        P.xps = CB, P.xgs = a->H * a->W * CB;
    } else if (a->x_nhwc && a->C % CB == 0) {
        P.xs = a->x;
    } else {
        P.xs = xs;
        kiln__parallel_for(a->pool, a->N * a->H, 4, repack_x, &P);
    }
    P.yt = a->y_nhwc ? NULL : yt;
    P.yps = a->y_nhwc ? a->M : P.g.Mp, P.ygs = CB;
    if (a->y_nhwc == KILN_WINO_C16) P.yps = CB, P.ygs = P.g.Ho * P.g.Wo * CB;

    /* Whole thread ranges while the weights fit L2 and each thread gets a
     * register block of tiles; else each block's steps split over threads. */
    bool small_u = P.g.np * P.g.Cp * P.g.Mp <= U_IN_L2;
    if (P.nslots == 1 || threads == 1) {
        P.nslots = 1;
        run_ranges(&P, 0, 1);
    } else if (small_u && P.g.Ttot >= (int64_t)P.nslots * MR) {
        kiln__parallel_for(a->pool, P.nslots, 1, run_ranges, &P);
    } else {
        int64_t items = P.g.np * ((P.g.Mp + NR - 1) / NR);
        for (int64_t b = 0; b < P.g.nblk; b++) {
            P.b0 = b * P.g.Ttot / P.g.nblk;
            P.rows = (b + 1) * P.g.Ttot / P.g.nblk - P.b0;
            kiln__parallel_for(a->pool, P.rows, 1, step_in, &P);
            kiln__parallel_for(a->pool, items, 1, step_gemm, &P);
            kiln__parallel_for(a->pool, P.rows, 1, step_out, &P);
        }
    }
    if (P.yt) kiln__parallel_for(a->pool, a->N * a->M, 1, finish_nchw, &P);
}
