/* conv_pwdw.c -- pointwise 1x1 convolution + depthwise 3x3 convolution
 * [+ pointwise 1x1 convolution + residual], row by row (see conv_pwdw.h).
 *
 * Work is split into tasks of consecutive output rows (over the whole
 * batch); each task owns a slice of the workspace:
 *
 *   ring[3][Ep / 16][W + 2][16]  three rows of T, row iy in slot iy % 3,
 *                       each in planes of 16 channels (so the depthwise
 *                       pass over one plane reads contiguous memory);
 *                       columns 0 and W + 1 stay zero (the padding)
 *   drow[Wo][Ep]        one row of D (when D is not the output, or the
 *                       output is NCHW)
 *   prow[Wo][Mp]        one row of the project convolution, before the
 *                       residual and the activation
 *
 * An output row oy reads the rows iy = oy * stride - pt + {0, 1, 2} of T
 * (rows outside [0, H) are padding: their taps are skipped); three
 * consecutive rows fall in three different slots, so the rows a task made
 * for the previous output row are found again and only the missing ones
 * (one at stride 1, two at stride 2) are made.
 *
 * Both pointwise convolutions are [pixels x K] x [K x channels] products:
 * the AVX-512 kernel keeps a block of 6 pixels x 64 channels in 24
 * registers over all of K, broadcasting input values from any layout
 * (pixel stride, channel stride). */
#include "backends/cpu/kernels/conv_pwdw.h"

#include "ops/fused_conv.h"

#define EB 16 /* channels per vector; Ep and Mp are multiples */

static int64_t round16(int64_t e) { return (e + EB - 1) / EB * EB; }

int64_t kiln__pwdw_packed_floats(int64_t C, int64_t E, int64_t M) {
    return (C + 11) * round16(E) + (M > 0 ? (E + 1) * round16(M) : 0);
}

void kiln__pwdw_pack(const float *w1, const float *b1, const float *w2, const float *b2,
                     const float *w3, const float *b3, int64_t C, int64_t E, int64_t M, float *out) {
    int64_t Ep = round16(E), Mp = round16(M);
    memset(out, 0, sizeof(float) * (size_t)kiln__pwdw_packed_floats(C, E, M));
    float *W1 = out, *B1 = W1 + C * Ep, *W2 = B1 + Ep, *B2 = W2 + 9 * Ep;
    for (int64_t e = 0; e < E; e++) {
        for (int64_t c = 0; c < C; c++) W1[c * Ep + e] = w1[e * C + c];
        B1[e] = b1 ? b1[e] : 0.0f;
        for (int k = 0; k < 9; k++) W2[k * Ep + e] = w2[e * 9 + k];
        B2[e] = b2 ? b2[e] : 0.0f;
    }
    if (M <= 0) return;
    float *W3 = B2 + Ep, *B3 = W3 + E * Mp;
    for (int64_t m = 0; m < M; m++) {
        for (int64_t e = 0; e < E; e++) W3[e * Mp + m] = w3[m * E + e];
        B3[m] = b3 ? b3[m] : 0.0f;
    }
}

/* Sizes in floats; a task's slice is ring + drow + prow (each a multiple
 * of 16 floats, so 64-byte aligned) plus slack. */
typedef struct pwdw_geom {
    int64_t Ho, Wo, Ep, Mp;
    int64_t rs;       /* a 16-channel plane of a ring row: (W + 2) * 16 */
    int64_t ring_row, ring, drow, prow, task;
} pwdw_geom;

static bool geom_of(int64_t W, int64_t E, int64_t M, int stride, int pl, int pr, int64_t Ho,
                    pwdw_geom *g) {
    /* what kiln.PwDwConv allows (a damaged engine may say otherwise) */
    if (stride < 1 || stride > 2 || pl < 0 || pl > 1 || pr < 0 || pr > 1) return false;
    g->Ho = Ho;
    g->Wo = kiln__pwdw_out(W, pl, pr, stride);
    /* far from overflow; larger layers are refused by the caller's checks */
    if (W < 1 || W > (1 << 24) || E < 1 || E > (1 << 24) || M < 0 || M > (1 << 24) || g->Wo < 1)
        return false;
    g->Ep = round16(E);
    g->Mp = round16(M);
    if ((double)(W + 2) * (double)(g->Ep + g->Mp) > 0x1p40) return false;
    g->rs = (W + 2) * EB;
    g->ring_row = (W + 2) * g->Ep;
    g->ring = 3 * g->ring_row;
    g->drow = g->Wo * g->Ep;
    g->prow = g->Wo * g->Mp;
    g->task = g->ring + g->drow + g->prow + 32;
    return true;
}

size_t kiln__pwdw_workspace(int64_t W, int64_t E, int64_t M, int stride, int pl, int pr, int threads) {
    pwdw_geom g;
    if (threads < 1) threads = 1;
    if (!geom_of(W, E, M, stride, pl, pr, 1, &g)) return SIZE_MAX;
    return (size_t)g.task * sizeof(float) * (size_t)threads + 64;
}

typedef struct pwdw_plan {
    const kiln_pwdw_args *a;
    pwdw_geom g;
    const float *W1, *B1, *W2, *B2, *W3, *B3;
    float *ws; /* 64-byte aligned */
    int tasks;
    bool fast;
} pwdw_plan;

/* ---- plain C ----------------------------------------------------------------- */

/* Row iy of image n of T into a ring row (columns 1..W of each plane). */
static void pw_row_c(const pwdw_plan *P, int64_t n, int64_t iy, float *dst) {
    const kiln_pwdw_args *a = P->a;
    int64_t C = a->C, W = a->W, H = a->H, Ep = P->g.Ep;
    const float *xr = a->x_nhwc ? a->x + (n * H + iy) * W * C : a->x + n * C * H * W + iy * W;
    int64_t ps = a->x_nhwc ? C : 1, cs = a->x_nhwc ? 1 : H * W;
    for (int64_t e = 0; e < Ep; e++) {
        float *d = dst + (e / EB) * P->g.rs + e % EB;
        for (int64_t x = 0; x < W; x++) {
            float acc = P->B1[e];
            for (int64_t c = 0; c < C; c++) acc += xr[x * ps + c * cs] * P->W1[c * Ep + e];
            d[(x + 1) * EB] = kiln__fc_act(a->act1, a->alpha1, a->beta1, acc);
        }
    }
}

/* A row of D into out[Wo][ostride] (channels 0..E). rows[k]: ring row of
 * T for tap row k, or NULL (padding). */
static void dw_row_c(const pwdw_plan *P, const float *const rows[3], float *out, int64_t ostride) {
    const kiln_pwdw_args *a = P->a;
    int64_t Ep = P->g.Ep, s = a->stride;
    for (int64_t ox = 0; ox < P->g.Wo; ox++) {
        int64_t col = ox * s - a->pl + 1; /* ring column of tap 0 */
        for (int64_t e = 0; e < a->E; e++) {
            float acc = P->B2[e];
            for (int ky = 0; ky < 3; ky++) {
                if (!rows[ky]) continue;
                const float *r = rows[ky] + (e / EB) * P->g.rs + col * EB + e % EB;
                for (int kx = 0; kx < 3; kx++) acc += r[kx * EB] * P->W2[(ky * 3 + kx) * Ep + e];
            }
            out[ox * ostride + e] = kiln__fc_act(a->act2, a->alpha2, a->beta2, acc);
        }
    }
}

/* The project convolution of a row of D (drow[Wo][Ep]) into prow[Wo][Mp]
 * (bias added). */
static void pj_row_c(const pwdw_plan *P, const float *drow, float *prow) {
    const kiln_pwdw_args *a = P->a;
    int64_t Ep = P->g.Ep, Mp = P->g.Mp;
    for (int64_t ox = 0; ox < P->g.Wo; ox++)
        for (int64_t m = 0; m < Mp; m++) {
            float acc = P->B3[m];
            for (int64_t e = 0; e < a->E; e++) acc += drow[ox * Ep + e] * P->W3[e * Mp + m];
            prow[ox * Mp + m] = acc;
        }
}

/* ---- AVX-512F ---------------------------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "backends/cpu/kernels/simd_act.h"
#include "backends/cpu/kernels/simd_mask.h"
#define HAVE_X86 1
#define AVX512 __attribute__((target("avx512f")))
#define INLINE __attribute__((always_inline)) inline

bool kiln__pwdw_fast_available(void) { return __builtin_cpu_supports("avx512f"); }

/* Activations with a vector form; the others are applied per float after
 * the store. */
static bool vec_act(int act) {
    return act == KILN_FC_ACT_NONE || act == KILN_FC_ACT_RELU || act == KILN_FC_ACT_CLIP ||
           act == KILN_FC_ACT_LEAKY_RELU || act == KILN_FC_ACT_HARD_SIGMOID;
}

static AVX512 INLINE __m512 act512(int act, __m512 v, __m512 lo, __m512 hi) {
    switch (act) {
    case KILN_FC_ACT_RELU: return kiln__relu512(v);
    case KILN_FC_ACT_CLIP: return kiln__clip512(v, lo, hi);
    case KILN_FC_ACT_LEAKY_RELU: {
        __mmask16 neg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
        return _mm512_mask_mul_ps(v, neg, v, lo);
    }
    case KILN_FC_ACT_HARD_SIGMOID: return kiln__hard_sigmoid512(v, lo, hi); /* lo, hi: alpha, beta */
    default: return v; /* KILN_FC_ACT_NONE (callers pass vec_act's activations only) */
    }
}

/* A pointwise product block: np pixels x nv 16-channel vectors,
 *   d[v * vs + p * pd] = act(b[16 v..] + sum_k x[p * ps + k * ks] * w[k * wk + 16 v..])
 * with the block in registers over all of K. */
typedef struct pw_io {
    const float *x;
    int64_t ps, ks;   /* input strides: pixel, channel */
    const float *w;   /* [K][wk] */
    int64_t wk, K;
    const float *b;
    float *d;
    int64_t vs, pd;   /* output strides: vector, pixel */
} pw_io;

static AVX512 INLINE void pw_block(const pw_io *io, int np, int nv, int act, __m512 lo, __m512 hi) {
    __m512 acc[6][4];
    const float *x = io->x, *w = io->w;
    int64_t ps = io->ps, ks = io->ks, wk = io->wk;
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
        __m512 bv = _mm512_loadu_ps(io->b + 16 * v);
#pragma GCC unroll 6
        for (int p = 0; p < np; p++) acc[p][v] = bv;
    }
    for (int64_t k = 0; k < io->K; k++) {
        __m512 wv[4];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) wv[v] = _mm512_loadu_ps(w + k * wk + 16 * v);
        const float *xk = x + k * ks;
#pragma GCC unroll 6
        for (int p = 0; p < np; p++) {
            __m512 xb = _mm512_set1_ps(xk[p * ps]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) acc[p][v] = _mm512_fmadd_ps(xb, wv[v], acc[p][v]);
        }
    }
#pragma GCC unroll 6
    for (int p = 0; p < np; p++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            _mm512_storeu_ps(io->d + v * io->vs + p * io->pd, act512(act, acc[p][v], lo, hi));
}

#define PW_CASE(NP, NV)                                                                  \
    case (NP) * 8 + (NV):                                                                \
        pw_block(io, NP, NV, act, lo, hi);                                               \
        break;
#define PW_CASES(NP) PW_CASE(NP, 1) PW_CASE(NP, 2) PW_CASE(NP, 3) PW_CASE(NP, 4)

static AVX512 void pw_block_any(const pw_io *io, int np, int nv, int act, __m512 lo, __m512 hi) {
    switch (np * 8 + nv) {
        PW_CASES(1) PW_CASES(2) PW_CASES(3) PW_CASES(4) PW_CASES(5) PW_CASES(6)
    default: break;
    }
}

/* The whole product: `pixels` pixels x `chans` (a multiple of 16) channels. */
static AVX512 void pw_all_512(const pw_io *io0, int64_t pixels, int64_t chans, int act, float alpha,
                              float beta) {
    __m512 lo = _mm512_set1_ps(alpha), hi = _mm512_set1_ps(beta);
    for (int64_t e0 = 0; e0 < chans; e0 += 64) {
        int nv = (int)((chans - e0) / 16 < 4 ? (chans - e0) / 16 : 4);
        for (int64_t x0 = 0; x0 < pixels; x0 += 6) {
            int np = (int)(pixels - x0 < 6 ? pixels - x0 : 6);
            pw_io io = *io0;
            io.x += x0 * io0->ps;
            io.w += e0;
            io.b += e0;
            io.d += (e0 / 16) * io0->vs + x0 * io0->pd;
            pw_block_any(&io, np, nv, act, lo, hi);
        }
    }
}

static AVX512 void pw_row_512(const pwdw_plan *P, int64_t n, int64_t iy, float *dst) {
    const kiln_pwdw_args *a = P->a;
    int64_t C = a->C, W = a->W, H = a->H, Ep = P->g.Ep;
    pw_io io = {.x = a->x_nhwc ? a->x + (n * H + iy) * W * C : a->x + n * C * H * W + iy * W,
                .ps = a->x_nhwc ? C : 1, .ks = a->x_nhwc ? 1 : H * W, .w = P->W1, .wk = Ep,
                .K = C, .b = P->B1, .d = dst + EB, .vs = P->g.rs, .pd = EB};
    pw_all_512(&io, W, Ep, vec_act(a->act1) ? a->act1 : KILN_FC_ACT_NONE, a->alpha1, a->beta1);
    if (!vec_act(a->act1))
        for (int64_t e = 0; e < Ep; e += EB)
            for (int64_t i = EB; i < (W + 1) * EB; i++) {
                float *v = dst + (e / EB) * P->g.rs + i;
                *v = kiln__fc_act(a->act1, a->alpha1, a->beta1, *v);
            }
}

static AVX512 void pj_row_512(const pwdw_plan *P, const float *drow, float *prow) {
    pw_io io = {.x = drow, .ps = P->g.Ep, .ks = 1, .w = P->W3, .wk = P->g.Mp, .K = P->a->E,
                .b = P->B3, .d = prow, .vs = EB, .pd = P->g.Mp};
    pw_all_512(&io, P->g.Wo, P->g.Mp, KILN_FC_ACT_NONE, 0.0f, 0.0f);
}

/* Taps of one row of T for OX outputs of one 16-channel plane: acc[j] +=
 * t[(j * s + kx) * 16] * w[kx]. */
#define DW_TAPS(OX, r, o, s, w0, w1, w2)                                                    \
    do {                                                                                    \
        for (int j_ = 0; j_ < (OX); j_++) {                                                 \
            const float *t_ = (r) + (o) + (int64_t)j_ * (s) * EB;                           \
            acc[j_] = _mm512_fmadd_ps(_mm512_load_ps(t_), w0, acc[j_]);                     \
            acc[j_] = _mm512_fmadd_ps(_mm512_load_ps(t_ + EB), w1, acc[j_]);                \
            acc[j_] = _mm512_fmadd_ps(_mm512_load_ps(t_ + 2 * EB), w2, acc[j_]);            \
        }                                                                                   \
    } while (0)

/* OX consecutive outputs (from ox) of one 16-channel plane. */
static AVX512 INLINE void dw_block(const float *r0, const float *r1, const float *r2, int64_t ox,
                                   int64_t s, int64_t pl, const __m512 w[9], __m512 bv, int OX,
                                   float *out, int64_t ostride, __mmask16 mk, int act, __m512 lo,
                                   __m512 hi) {
    __m512 acc[4];
#pragma GCC unroll 4
    for (int j = 0; j < OX; j++) acc[j] = bv;
    int64_t o = (ox * s - pl + 1) * EB;
    if (r0) DW_TAPS(OX, r0, o, s, w[0], w[1], w[2]);
    if (r1) DW_TAPS(OX, r1, o, s, w[3], w[4], w[5]);
    if (r2) DW_TAPS(OX, r2, o, s, w[6], w[7], w[8]);
#pragma GCC unroll 4
    for (int j = 0; j < OX; j++)
        _mm512_mask_storeu_ps(out + (ox + j) * ostride, mk, act512(act, acc[j], lo, hi));
}

static AVX512 void dw_row_512(const pwdw_plan *P, const float *const rows[3], float *out,
                              int64_t ostride) {
    const kiln_pwdw_args *a = P->a;
    int64_t Ep = P->g.Ep, s = a->stride, Wo = P->g.Wo, E = a->E;
    int act = vec_act(a->act2) ? a->act2 : KILN_FC_ACT_NONE;
    __m512 lo = _mm512_set1_ps(a->alpha2), hi = _mm512_set1_ps(a->beta2);
    for (int64_t e = 0; e < Ep; e += 16) {
        __m512 w[9];
        for (int k = 0; k < 9; k++) w[k] = _mm512_loadu_ps(P->W2 + k * Ep + e);
        __m512 bv = _mm512_loadu_ps(P->B2 + e);
        __mmask16 mk = kiln__mask16(E - e);
        int64_t po = (e / EB) * P->g.rs;
        const float *r0 = rows[0] ? rows[0] + po : NULL, *r1 = rows[1] ? rows[1] + po : NULL,
                    *r2 = rows[2] ? rows[2] + po : NULL;
        int64_t ox = 0;
        for (; ox + 4 <= Wo; ox += 4)
            dw_block(r0, r1, r2, ox, s, a->pl, w, bv, 4, out + e, ostride, mk, act, lo, hi);
        for (; ox < Wo; ox++)
            dw_block(r0, r1, r2, ox, s, a->pl, w, bv, 1, out + e, ostride, mk, act, lo, hi);
    }
    if (!vec_act(a->act2))
        for (int64_t ox = 0; ox < Wo; ox++)
            for (int64_t c = 0; c < E; c++) {
                float *v = out + ox * ostride + c;
                *v = kiln__fc_act(a->act2, a->alpha2, a->beta2, *v);
            }
}

/* copy_row for NHWC X: 16-channel pieces of each pixel into the planes. */
static AVX512 void copy_row_nhwc_512(const float *xr, int64_t W, int64_t C, int64_t rs, float *dst) {
    for (int64_t c0 = 0; c0 < C; c0 += EB) {
        __mmask16 mk = kiln__mask16(C - c0);
        float *d = dst + (c0 / EB) * rs + EB;
        for (int64_t x = 0; x < W; x++) _mm512_store_ps(d + x * EB, _mm512_maskz_loadu_ps(mk, xr + x * C + c0));
    }
}
#else
#define HAVE_X86 0
bool kiln__pwdw_fast_available(void) { return false; }
#endif

/* ---- driver ------------------------------------------------------------------- */

/* Row iy of image n of X itself into a ring row (no_expand). */
static void copy_row(const pwdw_plan *P, int64_t n, int64_t iy, float *dst) {
    const kiln_pwdw_args *a = P->a;
    int64_t C = a->C, W = a->W, H = a->H, rs = P->g.rs;
    if (a->x_nhwc) {
        const float *xr = a->x + (n * H + iy) * W * C;
#if HAVE_X86
        if (P->fast) {
            copy_row_nhwc_512(xr, W, C, rs, dst);
            return;
        }
#endif
        for (int64_t x = 0; x < W; x++)
            for (int64_t c0 = 0; c0 < C; c0 += EB) {
                int64_t k = C - c0 < EB ? C - c0 : EB;
                memcpy(dst + (c0 / EB) * rs + (x + 1) * EB, xr + x * C + c0, sizeof(float) * (size_t)k);
            }
        return;
    }
    for (int64_t c = 0; c < C; c++) {
        const float *xr = a->x + ((n * C + c) * H + iy) * W;
        float *d = dst + (c / EB) * rs + EB + c % EB;
        for (int64_t x = 0; x < W; x++) d[x * EB] = xr[x];
    }
}

static void pw_row(const pwdw_plan *P, int64_t n, int64_t iy, float *dst) {
    if (P->a->no_expand) {
        copy_row(P, n, iy, dst);
        return;
    }
#if HAVE_X86
    if (P->fast) {
        pw_row_512(P, n, iy, dst);
        return;
    }
#endif
    pw_row_c(P, n, iy, dst);
}

static void dw_row(const pwdw_plan *P, const float *const rows[3], float *out, int64_t ostride) {
#if HAVE_X86
    if (P->fast) {
        dw_row_512(P, rows, out, ostride);
        return;
    }
#endif
    dw_row_c(P, rows, out, ostride);
}

static void pj_row(const pwdw_plan *P, const float *drow, float *prow) {
#if HAVE_X86
    if (P->fast) {
        pj_row_512(P, drow, prow);
        return;
    }
#endif
    pj_row_c(P, drow, prow);
}

/* Output row (n, oy) from a row in scratch src[Wo][sp] of `ch` channels,
 * adding the residual and applying act3 when there is a project convolution. */
static void store_row(const pwdw_plan *P, int64_t n, int64_t oy, const float *src, int64_t sp,
                      int64_t ch) {
    const kiln_pwdw_args *a = P->a;
    int64_t Ho = P->g.Ho, Wo = P->g.Wo;
    bool pj = a->M > 0;
    if (a->y_nhwc) {
        int64_t off = (n * Ho + oy) * Wo * ch;
        float *y = a->y + off;
        const float *r = a->r ? a->r + off : NULL;
        for (int64_t ox = 0; ox < Wo; ox++)
            for (int64_t c = 0; c < ch; c++) {
                float v = src[ox * sp + c] + (r ? r[ox * ch + c] : 0.0f);
                y[ox * ch + c] = pj ? kiln__fc_act(a->act3, a->alpha3, a->beta3, v) : v;
            }
    } else {
        int64_t plane = Ho * Wo;
        for (int64_t c = 0; c < ch; c++) {
            int64_t off = (n * ch + c) * plane + oy * Wo;
            float *y = a->y + off;
            const float *r = a->r ? a->r + off : NULL;
            for (int64_t ox = 0; ox < Wo; ox++) {
                float v = src[ox * sp + c] + (r ? r[ox] : 0.0f);
                y[ox] = pj ? kiln__fc_act(a->act3, a->alpha3, a->beta3, v) : v;
            }
        }
    }
}

#if HAVE_X86
/* store_row for NHWC outputs with a vector activation. */
static AVX512 void store_row_nhwc_512(const pwdw_plan *P, int64_t n, int64_t oy, const float *src,
                                      int64_t sp, int64_t ch) {
    const kiln_pwdw_args *a = P->a;
    int64_t Wo = P->g.Wo, off = (n * P->g.Ho + oy) * Wo * ch;
    float *y = a->y + off;
    const float *r = a->r ? a->r + off : NULL;
    __m512 lo = _mm512_set1_ps(a->alpha3), hi = _mm512_set1_ps(a->beta3);
    for (int64_t ox = 0; ox < Wo; ox++)
        for (int64_t c = 0; c < ch; c += 16) {
            __mmask16 mk = kiln__mask16(ch - c);
            __m512 v = _mm512_maskz_loadu_ps(mk, src + ox * sp + c);
            if (r) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, r + ox * ch + c));
            _mm512_mask_storeu_ps(y + ox * ch + c, mk, act512(a->act3, v, lo, hi));
        }
}
#endif

static void run_task(const pwdw_plan *P, int t) {
    const kiln_pwdw_args *a = P->a;
    const pwdw_geom *g = &P->g;
    int64_t total = a->N * g->Ho, r0 = total * t / P->tasks, r1 = total * (t + 1) / P->tasks;
    if (r0 >= r1) return;
    float *ring = P->ws + (size_t)t * (size_t)g->task, *drow = ring + g->ring, *prow = drow + g->drow;
    memset(ring, 0, sizeof(float) * (size_t)g->ring); /* the padding columns stay 0 */
    int64_t have[3] = {-1, -1, -1}; /* n * H + iy held by each slot */
    bool pj = a->M > 0;
    for (int64_t r = r0; r < r1; r++) {
        int64_t n = r / g->Ho, oy = r % g->Ho;
        const float *rows[3];
        for (int k = 0; k < 3; k++) {
            int64_t iy = oy * a->stride - a->pt + k;
            if (iy < 0 || iy >= a->H) {
                rows[k] = NULL;
                continue;
            }
            int s = (int)(iy % 3);
            float *slot = ring + s * g->ring_row;
            if (have[s] != n * a->H + iy) {
                pw_row(P, n, iy, slot);
                have[s] = n * a->H + iy;
            }
            rows[k] = slot;
        }
        if (!pj && a->y_nhwc) { /* D is the output: straight into it */
            dw_row(P, rows, a->y + (n * g->Ho + oy) * g->Wo * a->E, a->E);
            continue;
        }
        dw_row(P, rows, drow, g->Ep);
        const float *src = drow;
        int64_t sp = g->Ep, ch = a->E;
        if (pj) {
            pj_row(P, drow, prow);
            src = prow, sp = g->Mp, ch = a->M;
        }
#if HAVE_X86
        if (P->fast && a->y_nhwc && vec_act(a->act3)) {
            store_row_nhwc_512(P, n, oy, src, sp, ch);
            continue;
        }
#endif
        store_row(P, n, oy, src, sp, ch);
    }
}

static void run_tasks(void *ctx, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) run_task(ctx, (int)t);
}

void kiln__pwdw_run(const kiln_pwdw_args *a) {
    pwdw_plan P;
    memset(&P, 0, sizeof P);
    P.a = a;
    int64_t Ho = kiln__pwdw_out(a->H, a->pt, a->pb, a->stride);
    if (a->N < 1 || Ho < 1 || !geom_of(a->W, a->E, a->M, a->stride, a->pl, a->pr, Ho, &P.g)) return;
    P.fast = !a->force_generic && kiln__pwdw_fast_available();
    int64_t Ep = P.g.Ep;
    P.W1 = a->packed;
    P.B1 = P.W1 + (a->no_expand ? 0 : a->C) * Ep;
    P.W2 = P.B1 + Ep;
    P.B2 = P.W2 + 9 * Ep;
    P.W3 = P.B2 + Ep;
    P.B3 = P.W3 + a->E * P.g.Mp;
    P.ws = (float *)(((uintptr_t)a->ws + 63) & ~(uintptr_t)63);
    size_t avail = a->ws_bytes >= 64 ? (a->ws_bytes - 64) / sizeof(float) : 0;
    int64_t room = (int64_t)(avail / (size_t)P.g.task);
    KILN_ASSERT(room >= 1);
    double out_px = (double)a->N * (double)Ho * (double)P.g.Wo;
    double cost = (double)a->N * (double)a->H * (double)a->W * (double)(a->no_expand ? 1 : a->C) * (double)a->E +
                  out_px * (double)a->E * (9.0 + (double)a->M) +
                  16.0 * ((double)a->N * (double)a->H * (double)a->W * (double)a->C +
                          out_px * (double)(a->M > 0 ? 2 * a->M : a->E));
    int64_t tasks = kiln__pool_threads(a->pool);
    if (tasks > room) tasks = room;
    if (tasks > a->N * Ho) tasks = a->N * Ho;
    if (tasks > kiln__parts_for_cost(cost)) tasks = kiln__parts_for_cost(cost); /* small layers: fewer */
    P.tasks = (int)(tasks < 1 ? 1 : tasks);
    if (P.tasks == 1) run_task(&P, 0);
    else kiln__parallel_for(a->pool, P.tasks, 1, run_tasks, &P);
}
