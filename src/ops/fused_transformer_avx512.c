/* fused_transformer_avx512.c -- the AVX-512 attention block kernel of
 * kiln.Attention (see fused_transformer.h).
 *
 * One call computes `rows` query rows of one (batch, head):
 *   1. K^T is packed into a zero-padded [D][Skp] panel (Skp = Sk rounded up
 *      to 32), so that 32 consecutive keys of one head dim are two vectors;
 *   2. S = scale * Q K^T with an 8-row x 32-key register tile (16 zmm
 *      accumulators, Q elements broadcast);
 *   3. the mask is added and each row goes through softmax (float32);
 *   4. O = P V with a 4-row x 64-column register tile (V rows are contiguous).
 * Only compiled for x86-64; the caller checks kiln__attn_avx512_available(). */
#include "ops/fused_transformer.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define INLINE __attribute__((always_inline)) inline

bool kiln__attn_avx512_available(void) { return __builtin_cpu_supports("avx512f"); }

#define QROWS 32 /* query rows whose scores are in flight at once */

size_t kiln__attn_avx512_ws_floats(int64_t rows, int64_t Sk, int64_t D) {
    int64_t skp = (Sk + 31) / 32 * 32;
    return (size_t)(((rows < QROWS ? rows : QROWS) + D) * skp);
}

/* S[r][j..j+32) for NR rows: sum over d of Q[r][d] * KT[d][j..j+32) */
static AVX512 INLINE void qk_tile(int NR, const float *Q, int64_t ldq, const float *KT, int64_t skp, int64_t D,
                                  float scale, float *S, int64_t j) {
    __m512 acc[8][2];
    for (int r = 0; r < NR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d++) {
        __m512 k0 = _mm512_loadu_ps(KT + d * skp + j), k1 = _mm512_loadu_ps(KT + d * skp + j + 16);
        for (int r = 0; r < NR; r++) {
            __m512 q = _mm512_set1_ps(Q[r * ldq + d]);
            acc[r][0] = _mm512_fmadd_ps(q, k0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(q, k1, acc[r][1]);
        }
    }
    __m512 vs = _mm512_set1_ps(scale);
    for (int r = 0; r < NR; r++) {
        _mm512_storeu_ps(S + r * skp + j, _mm512_mul_ps(acc[r][0], vs));
        _mm512_storeu_ps(S + r * skp + j + 16, _mm512_mul_ps(acc[r][1], vs));
    }
}

/* Masks of the four column vectors of a 64-column tile with `left` columns
 * left, and zeroed accumulators for NR rows. */
static AVX512 INLINE void pv_begin(int NR, int64_t left, __mmask16 m[4], __m512 acc[4][4]) {
    for (int v = 0; v < 4; v++) {
        int64_t l = left - 16 * v;
        m[v] = l >= 16 ? (__mmask16)0xffff : l > 0 ? (__mmask16)((1u << l) - 1u) : 0;
    }
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < 4; v++) acc[r][v] = _mm512_setzero_ps();
}

/* O[r][c..c+64) for NR rows (columns beyond Dv masked off) */
static AVX512 INLINE void pv_tile(int NR, const float *P, int64_t skp, const float *V, int64_t ldv, int64_t Sk,
                                  float *O, int64_t ldo, int64_t c, int64_t Dv) {
    __mmask16 m[4];
    __m512 acc[4][4];
    pv_begin(NR, Dv - c, m, acc);
    for (int64_t j = 0; j < Sk; j++) {
        const float *vr = V + j * ldv + c;
        __m512 b0 = _mm512_maskz_loadu_ps(m[0], vr), b1 = _mm512_maskz_loadu_ps(m[1], vr + 16);
        __m512 b2 = _mm512_maskz_loadu_ps(m[2], vr + 32), b3 = _mm512_maskz_loadu_ps(m[3], vr + 48);
        for (int r = 0; r < NR; r++) {
            __m512 p = _mm512_set1_ps(P[r * skp + j]);
            acc[r][0] = _mm512_fmadd_ps(p, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(p, b1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(p, b2, acc[r][2]);
            acc[r][3] = _mm512_fmadd_ps(p, b3, acc[r][3]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < 4; v++) _mm512_mask_storeu_ps(O + r * ldo + c + 16 * v, m[v], acc[r][v]);
}

static AVX512 void qk_rows(int nr, const float *Q, int64_t ldq, const float *KT, int64_t skp, int64_t D,
                           float scale, float *S) {
    for (int64_t j = 0; j < skp; j += 32) {
        switch (nr) {
        case 8: qk_tile(8, Q, ldq, KT, skp, D, scale, S, j); break;
        case 7: qk_tile(7, Q, ldq, KT, skp, D, scale, S, j); break;
        case 6: qk_tile(6, Q, ldq, KT, skp, D, scale, S, j); break;
        case 5: qk_tile(5, Q, ldq, KT, skp, D, scale, S, j); break;
        case 4: qk_tile(4, Q, ldq, KT, skp, D, scale, S, j); break;
        case 3: qk_tile(3, Q, ldq, KT, skp, D, scale, S, j); break;
        case 2: qk_tile(2, Q, ldq, KT, skp, D, scale, S, j); break;
        default: qk_tile(1, Q, ldq, KT, skp, D, scale, S, j); break;
        }
    }
}

static AVX512 void pv_rows(int nr, const float *P, int64_t skp, const float *V, int64_t ldv, int64_t Sk, float *O,
                           int64_t ldo, int64_t Dv) {
    for (int64_t c = 0; c < Dv; c += 64) {
        switch (nr) {
        case 4: pv_tile(4, P, skp, V, ldv, Sk, O, ldo, c, Dv); break;
        case 3: pv_tile(3, P, skp, V, ldv, Sk, O, ldo, c, Dv); break;
        case 2: pv_tile(2, P, skp, V, ldv, Sk, O, ldo, c, Dv); break;
        default: pv_tile(1, P, skp, V, ldv, Sk, O, ldo, c, Dv); break;
        }
    }
}

/* Adds the mask row mr (NULL: none; columns mcol apart) to the scores s and
 * takes their softmax, in float32. */
static AVX512 void mask_softmax(float *s, const float *mr, int64_t mcol, int64_t Sk) {
    if (mr && mcol == 1) {
        int64_t j = 0;
        for (; j + 16 <= Sk; j += 16)
            _mm512_storeu_ps(s + j, _mm512_add_ps(_mm512_loadu_ps(s + j), _mm512_loadu_ps(mr + j)));
        for (; j < Sk; j++) s[j] += mr[j];
    } else if (mr) {
        for (int64_t j = 0; j < Sk; j++) s[j] += mr[j * mcol];
    }
    kiln__softmax_rows_f32(s, 1, Sk);
}

AVX512 void kiln__attn_avx512_block(const float *Q, int64_t ldq, const float *K, int64_t ldk, bool k_dxs,
                                    const float *V, int64_t ldv, float *O, int64_t ldo, int64_t rows, int64_t Sk,
                                    int64_t D, int64_t Dv, float scale, const float *mask, int64_t mrow,
                                    int64_t mcol, float *ws) {
    int64_t skp = (Sk + 31) / 32 * 32;
    float *KT = ws, *S = ws + D * skp;
    /* 1. pack K^T, zero padded */
    if (k_dxs) {
        for (int64_t d = 0; d < D; d++) memcpy(KT + d * skp, K + d * ldk, sizeof(float) * (size_t)Sk);
    } else {
        for (int64_t j = 0; j < Sk; j++) { /* K rows are contiguous: read along them */
            const float *kr = K + j * ldk;
            for (int64_t d = 0; d < D; d++) KT[d * skp + j] = kr[d];
        }
    }
    for (int64_t d = 0; d < D; d++)
        for (int64_t j = Sk; j < skp; j++) KT[d * skp + j] = 0.0f;
    for (int64_t q0 = 0; q0 < rows; q0 += QROWS) {
        int64_t nq = rows - q0 < QROWS ? rows - q0 : QROWS;
        const float *Qb = Q + q0 * ldq;
        /* 2. scores */
        for (int64_t r = 0; r < nq; r += 8)
            qk_rows(nq - r < 8 ? (int)(nq - r) : 8, Qb + r * ldq, ldq, KT, skp, D, scale, S + r * skp);
        /* 3. mask and softmax */
        for (int64_t r = 0; r < nq; r++)
            mask_softmax(S + r * skp, mask ? mask + (q0 + r) * mrow : NULL, mcol, Sk);
        /* 4. context */
        for (int64_t r = 0; r < nq; r += 4)
            pv_rows(nq - r < 4 ? (int)(nq - r) : 4, S + r * skp, skp, V, ldv, Sk, O + (q0 + r) * ldo, ldo, Dv);
    }
}

/* ---- bf16: vdpbf16ps on pairs of bfloat16, float32 accumulation ---------- *
 * K^T is packed as [D/2][Skp][2] (lane j of a vector: keys j's two dims),
 * V as [Sk/2][Dvp][2] (lane c: column c of two consecutive keys), Q and P
 * rows as bfloat16 pairs broadcast 32 bits at a time. The scores, softmax
 * and the context accumulate in float32. */
#define AVX512BF16 __attribute__((target("avx512f,avx512bf16")))

bool kiln__attn_bf16_available(void) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

static int64_t even(int64_t x) { return (x + 1) / 2 * 2; }

size_t kiln__attn_bf16_ws_floats(int64_t rows, int64_t Sk, int64_t D, int64_t Dv) {
    int64_t skp = (Sk + 31) / 32 * 32, q = rows < QROWS ? rows : QROWS, dvp = (Dv + 63) / 64 * 64;
    int64_t t = Sk > D ? Sk : D;
    t = t > Dv ? t : Dv;
    /* S (f32) + K^T, V, Q rows, P rows, one row of scratch (bf16, counted in halves of floats) */
    return (size_t)(q * skp + (even(D) * skp + even(Sk) * dvp + q * even(D) + q * skp + even(t)) / 2 + 64);
}

static uint32_t pair(const uint16_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static AVX512BF16 INLINE void qk_tile_bf16(int NR, const uint16_t *Q2, int64_t dp2, const uint16_t *KT2,
                                           int64_t skp, float scale, float *S, int64_t j) {
    __m512 acc[8][2];
    for (int r = 0; r < NR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t d = 0; d < dp2; d += 2) {
        const uint16_t *k = KT2 + (d / 2) * skp * 2 + j * 2;
        __m512bh k0 = (__m512bh)_mm512_loadu_si512(k), k1 = (__m512bh)_mm512_loadu_si512(k + 32);
        for (int r = 0; r < NR; r++) {
            __m512bh q = (__m512bh)_mm512_set1_epi32((int)pair(Q2 + r * dp2 + d));
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], q, k0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], q, k1);
        }
    }
    __m512 vs = _mm512_set1_ps(scale);
    for (int r = 0; r < NR; r++) {
        _mm512_storeu_ps(S + r * skp + j, _mm512_mul_ps(acc[r][0], vs));
        _mm512_storeu_ps(S + r * skp + j + 16, _mm512_mul_ps(acc[r][1], vs));
    }
}

static AVX512BF16 INLINE void pv_tile_bf16(int NR, const uint16_t *P2, int64_t skp, const uint16_t *V2, int64_t dvp,
                                           int64_t sk2, float *O, int64_t ldo, int64_t c, int64_t Dv) {
    __mmask16 m[4];
    __m512 acc[4][4];
    pv_begin(NR, Dv - c, m, acc);
    for (int64_t j = 0; j < sk2; j += 2) {
        const uint16_t *vr = V2 + (j / 2) * dvp * 2 + c * 2;
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(vr), b1 = (__m512bh)_mm512_loadu_si512(vr + 32);
        __m512bh b2 = (__m512bh)_mm512_loadu_si512(vr + 64), b3 = (__m512bh)_mm512_loadu_si512(vr + 96);
        for (int r = 0; r < NR; r++) {
            __m512bh p = (__m512bh)_mm512_set1_epi32((int)pair(P2 + r * skp + j));
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], p, b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], p, b1);
            acc[r][2] = _mm512_dpbf16_ps(acc[r][2], p, b2);
            acc[r][3] = _mm512_dpbf16_ps(acc[r][3], p, b3);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < 4; v++) _mm512_mask_storeu_ps(O + r * ldo + c + 16 * v, m[v], acc[r][v]);
}

static AVX512BF16 void qk_rows_bf16(int nr, const uint16_t *Q2, int64_t dp2, const uint16_t *KT2, int64_t skp,
                                    float scale, float *S) {
    for (int64_t j = 0; j < skp; j += 32) {
        switch (nr) {
        case 8: qk_tile_bf16(8, Q2, dp2, KT2, skp, scale, S, j); break;
        case 7: qk_tile_bf16(7, Q2, dp2, KT2, skp, scale, S, j); break;
        case 6: qk_tile_bf16(6, Q2, dp2, KT2, skp, scale, S, j); break;
        case 5: qk_tile_bf16(5, Q2, dp2, KT2, skp, scale, S, j); break;
        case 4: qk_tile_bf16(4, Q2, dp2, KT2, skp, scale, S, j); break;
        case 3: qk_tile_bf16(3, Q2, dp2, KT2, skp, scale, S, j); break;
        case 2: qk_tile_bf16(2, Q2, dp2, KT2, skp, scale, S, j); break;
        default: qk_tile_bf16(1, Q2, dp2, KT2, skp, scale, S, j); break;
        }
    }
}

static AVX512BF16 void pv_rows_bf16(int nr, const uint16_t *P2, int64_t skp, const uint16_t *V2, int64_t dvp,
                                    int64_t sk2, float *O, int64_t ldo, int64_t Dv) {
    for (int64_t c = 0; c < Dv; c += 64) {
        switch (nr) {
        case 4: pv_tile_bf16(4, P2, skp, V2, dvp, sk2, O, ldo, c, Dv); break;
        case 3: pv_tile_bf16(3, P2, skp, V2, dvp, sk2, O, ldo, c, Dv); break;
        case 2: pv_tile_bf16(2, P2, skp, V2, dvp, sk2, O, ldo, c, Dv); break;
        default: pv_tile_bf16(1, P2, skp, V2, dvp, sk2, O, ldo, c, Dv); break;
        }
    }
}

AVX512BF16 void kiln__attn_bf16_block(const float *Q, int64_t ldq, const float *K, int64_t ldk, bool k_dxs,
                                      const float *V, int64_t ldv, float *O, int64_t ldo, int64_t rows, int64_t Sk,
                                      int64_t D, int64_t Dv, float scale, const float *mask, int64_t mrow,
                                      int64_t mcol, float *ws) {
    int64_t skp = (Sk + 31) / 32 * 32, dp2 = even(D), sk2 = even(Sk), dvp = (Dv + 63) / 64 * 64;
    int64_t q = rows < QROWS ? rows : QROWS;
    float *S = ws;
    uint16_t *KT2 = (uint16_t *)(void *)(S + q * skp); /* [dp2/2][skp][2] */
    uint16_t *V2 = KT2 + dp2 * skp;                     /* [sk2/2][dvp][2] */
    uint16_t *Q2 = V2 + sk2 * dvp;                      /* [q][dp2] */
    uint16_t *P2 = Q2 + q * dp2;                        /* [q][skp] */
    memset(KT2, 0, sizeof(uint16_t) * (size_t)(dp2 * skp + sk2 * dvp));
    /* rows rounded with the vector conversion, then spread into the pair layouts */
    uint16_t *tmp = P2 + q * skp; /* max(Sk, D, Dv) values */
    if (k_dxs) {
        for (int64_t d = 0; d < D; d++) {
            kiln__f32_to_bf16_row(K + d * ldk, tmp, Sk);
            uint16_t *kt = KT2 + (d / 2) * skp * 2 + (d & 1);
            for (int64_t j = 0; j < Sk; j++) kt[j * 2] = tmp[j];
        }
    } else {
        for (int64_t j = 0; j < Sk; j++) {
            kiln__f32_to_bf16_row(K + j * ldk, tmp, D);
            uint16_t *kt = KT2 + j * 2;
            for (int64_t d = 0; d < D; d++) kt[(d / 2) * skp * 2 + (d & 1)] = tmp[d];
        }
    }
    for (int64_t j = 0; j < Sk; j++) {
        kiln__f32_to_bf16_row(V + j * ldv, tmp, Dv);
        uint16_t *vr = V2 + (j / 2) * dvp * 2 + (j & 1);
        for (int64_t c = 0; c < Dv; c++) vr[c * 2] = tmp[c];
    }
    for (int64_t q0 = 0; q0 < rows; q0 += QROWS) {
        int64_t nq = rows - q0 < QROWS ? rows - q0 : QROWS;
        for (int64_t r = 0; r < nq; r++) {
            kiln__f32_to_bf16_row(Q + (q0 + r) * ldq, Q2 + r * dp2, D);
            if (dp2 > D) Q2[r * dp2 + D] = 0;
        }
        for (int64_t r = 0; r < nq; r += 8)
            qk_rows_bf16(nq - r < 8 ? (int)(nq - r) : 8, Q2 + r * dp2, dp2, KT2, skp, scale, S + r * skp);
        for (int64_t r = 0; r < nq; r++) {
            mask_softmax(S + r * skp, mask ? mask + (q0 + r) * mrow : NULL, mcol, Sk);
            kiln__f32_to_bf16_row(S + r * skp, P2 + r * skp, Sk);
            if (sk2 > Sk) P2[r * skp + Sk] = 0;
        }
        for (int64_t r = 0; r < nq; r += 4)
            pv_rows_bf16(nq - r < 4 ? (int)(nq - r) : 4, P2 + r * skp, skp, V2, dvp, sk2, O + (q0 + r) * ldo, ldo, Dv);
    }
}

#else

bool kiln__attn_bf16_available(void) { return false; }
size_t kiln__attn_bf16_ws_floats(int64_t rows, int64_t Sk, int64_t D, int64_t Dv) {
    (void)rows, (void)Sk, (void)D, (void)Dv;
    return 0;
}
void kiln__attn_bf16_block(const float *Q, int64_t ldq, const float *K, int64_t ldk, bool k_dxs, const float *V,
                           int64_t ldv, float *O, int64_t ldo, int64_t rows, int64_t Sk, int64_t D, int64_t Dv,
                           float scale, const float *mask, int64_t mrow, int64_t mcol, float *ws) {
    kiln__attn_avx512_block(Q, ldq, K, ldk, k_dxs, V, ldv, O, ldo, rows, Sk, D, Dv, scale, mask, mrow, mcol, ws);
}
bool kiln__attn_avx512_available(void) { return false; }
size_t kiln__attn_avx512_ws_floats(int64_t rows, int64_t Sk, int64_t D) {
    (void)rows, (void)Sk, (void)D;
    return 0;
}
void kiln__attn_avx512_block(const float *Q, int64_t ldq, const float *K, int64_t ldk, bool k_dxs, const float *V,
                             int64_t ldv, float *O, int64_t ldo, int64_t rows, int64_t Sk, int64_t D, int64_t Dv,
                             float scale, const float *mask, int64_t mrow, int64_t mcol, float *ws) {
    (void)Q, (void)ldq, (void)K, (void)ldk, (void)k_dxs, (void)V, (void)ldv, (void)O, (void)ldo, (void)rows;
    (void)Sk, (void)D, (void)Dv, (void)scale, (void)mask, (void)mrow, (void)mcol, (void)ws;
}

#endif
