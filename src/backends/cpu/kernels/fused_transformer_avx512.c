/* fused_transformer_avx512.c -- the AVX-512 attention block kernel of
 * kiln.Attention (see fused_transformer.h).
 *
 * One call computes `rows` query rows of one (batch, head):
 *   1. K^T is packed (16x16 in-register transposes) into zero-padded panels
 *      of 16 keys x D dims (Skp = Sk rounded up to 64 keys), and V rows are
 *      copied into a contiguous [Sk][round16(D)] panel when Dv fits it (the
 *      rows of a packed QKV tensor are 3*H*D floats apart and alias in L1);
 *   2. S = scale * Q K^T (+ the mask, when its columns are contiguous) with
 *      an 8-row x 32-key register tile (16 zmm accumulators, Q broadcast);
 *   3. each score row goes through max and exp (float32; exp by a degree-6
 *      polynomial and vscalefps), keeping 1 / the row sum;
 *   4. O = (P V) / sum with a 6-row x 64-column register tile (24 zmm).
 * Query rows go 32 at a time (the score block stays in L1/L2).
 * Only compiled for x86-64; the caller checks kiln__attn_avx512_available(). */
#include "backends/cpu/kernels/fused_transformer_cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "backends/cpu/kernels/simd_act.h"
#include "backends/cpu/kernels/simd_exp.h"
#include "backends/cpu/kernels/simd_mask.h"
#include <math.h>

#define AVX512 __attribute__((target("avx512f")))
#define INLINE __attribute__((always_inline)) inline

bool kiln__attn_avx512_available(void) { return __builtin_cpu_supports("avx512f"); }

#define QROWS 32 /* query rows whose scores are in flight at once */
#define PVR 6 /* rows of a P V register tile: PVR x 4 accumulators */

static int64_t rup(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* K^T panels [Skp/16][D][16] (Skp: Sk rounded up to 64) + V panel
 * [Sk][round16(D)] (used when Dv fits in it) + scores [QROWS][Skp] + QROWS
 * reciprocal row sums */
size_t kiln__attn_avx512_ws_floats(int64_t rows, int64_t Sk, int64_t D) {
    int64_t skp = rup(Sk, 64), q = rows < QROWS ? rows : QROWS;
    return (size_t)(D * skp + Sk * rup(D, 16) + q * skp + rup(q, 16));
}

/* Transposes a 16x16 block: rows r[0..16) (16 floats each) into columns. */
static AVX512 INLINE void tr16(__m512 r[16]) {
    __m512 t[16];
    for (int k = 0; k < 8; k++) {
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    /* u[4k+m], 128-bit lane L: column 4L+m of rows 4k..4k+3 */
    for (int k = 0; k < 4; k++) {
        r[4 * k] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
        r[4 * k + 1] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
        r[4 * k + 2] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
        r[4 * k + 3] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
    }
    for (int m = 0; m < 4; m++) {
        __m512 v0 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x88), v1 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xDD);
        __m512 w0 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x88), w1 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xDD);
        t[m] = _mm512_shuffle_f32x4(v0, w0, 0x88);      /* column m */
        t[8 + m] = _mm512_shuffle_f32x4(v0, w0, 0xDD);  /* column 8+m */
        t[4 + m] = _mm512_shuffle_f32x4(v1, w1, 0x88);  /* column 4+m */
        t[12 + m] = _mm512_shuffle_f32x4(v1, w1, 0xDD); /* column 12+m */
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

/* Prefetches into L2 the n floats at p (a guess at the next head's row:
 * prefetches never fault, a wrong guess only costs bandwidth). */
static INLINE void prefetch_row_l2(const float *p, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) _mm_prefetch((const char *)(p + i), _MM_HINT_T1);
}

/* KT[j/16][d][j%16] = K[j][d] for d < D, j < skp (zero for j >= Sk): panels
 * of 16 keys, written and read sequentially; with VP set, also
 * VP[j][0..Dv) = V[j][0..Dv) (rows dvp apart). */
static AVX512 void pack_kv(const float *K, int64_t ldk, int64_t Sk, int64_t D, float *KT, int64_t skp,
                           const float *V, int64_t ldv, int64_t Dv, float *VP, int64_t dvp) {
    for (int64_t j0 = 0; j0 < skp; j0 += 16) {
        for (int64_t d0 = 0; d0 < D; d0 += 16) {
            int64_t nd = D - d0 < 16 ? D - d0 : 16;
            __mmask16 m = (__mmask16)(nd == 16 ? 0xffffu : (1u << nd) - 1u);
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = j0 + i < Sk ? _mm512_maskz_loadu_ps(m, K + (j0 + i) * ldk + d0) : _mm512_setzero_ps();
            tr16(r);
            float *kt = KT + ((j0 / 16) * D + d0) * 16;
            for (int64_t i = 0; i < nd; i++) _mm512_storeu_ps(kt + i * 16, r[i]);
        }
        if (VP)
            for (int64_t j = j0; j < j0 + 16 && j < Sk; j++)
                for (int64_t c = 0; c < Dv; c += 16) {
                    int64_t l = Dv - c;
                    __mmask16 m = (__mmask16)(l >= 16 ? 0xffffu : (1u << l) - 1u);
                    _mm512_mask_storeu_ps(VP + j * dvp + c, m, _mm512_maskz_loadu_ps(m, V + j * ldv + c));
                }
    }
}

#define QK_NR 8 /* query rows of a Q K^T register tile */
#define QK_NV 2 /* 16-key vectors of a Q K^T register tile */
#define QK_NK (16 * QK_NV)

/* S[r][j..j+QK_NK) = scale * Q[r] . K[j..j+QK_NK) (+ mask row r when mr)
 * for NR rows */
static AVX512 INLINE void qk_tile(int NR, const float *Q, int64_t ldq, const float *KT, int64_t skp, int64_t D,
                                  float scale, float *S, int64_t j, const float *mr, int64_t mrow, int64_t Sk) {
    __m512 acc[QK_NR][QK_NV];
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < QK_NV; v++) acc[r][v] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d++) {
        __m512 k[QK_NV];
        for (int v = 0; v < QK_NV; v++) k[v] = _mm512_loadu_ps(KT + ((j / 16 + v) * D + d) * 16);
        for (int r = 0; r < NR; r++) {
            __m512 q = _mm512_set1_ps(Q[r * ldq + d]);
            for (int v = 0; v < QK_NV; v++) acc[r][v] = _mm512_fmadd_ps(q, k[v], acc[r][v]);
        }
    }
    __m512 vs = _mm512_set1_ps(scale);
    for (int v = 0; v < QK_NV; v++) {
        __mmask16 m = kiln__mask16(Sk - j - 16 * v);
        for (int r = 0; r < NR; r++) {
            float *sp = S + r * skp + j + 16 * v;
            if (mr)
                _mm512_storeu_ps(sp, _mm512_fmadd_ps(acc[r][v], vs, _mm512_maskz_loadu_ps(m, mr + r * mrow + j + 16 * v)));
            else
                _mm512_storeu_ps(sp, _mm512_mul_ps(acc[r][v], vs));
        }
    }
}

/* Masks of the four column vectors of a 64-column tile with `left` columns
 * left, and zeroed accumulators for NR rows. */
static AVX512 INLINE void pv_begin(int NR, int64_t left, __mmask16 m[4], __m512 acc[][4]) {
    for (int v = 0; v < 4; v++) m[v] = kiln__mask16(left - 16 * v);
    for (int r = 0; r < NR; r++)
        for (int v = 0; v < 4; v++) acc[r][v] = _mm512_setzero_ps();
}

/* O[r][c..c+64) = inv[r] * sum_j P[r][j] V[j][c..c+64) for NR rows (columns
 * beyond Dv masked off) */
static AVX512 INLINE void pv_tile(int NR, bool full, const float *P, int64_t skp, const float *inv, const float *V,
                                  int64_t ldv, int64_t Sk, float *O, int64_t ldo, int64_t c, int64_t Dv) {
    __mmask16 m[4];
    __m512 acc[PVR][4];
    pv_begin(NR, Dv - c, m, acc);
    for (int64_t j = 0; j < Sk; j++) {
        const float *vr = V + j * ldv + c;
        __m512 b0, b1, b2, b3;
        if (full) {
            b0 = _mm512_loadu_ps(vr), b1 = _mm512_loadu_ps(vr + 16);
            b2 = _mm512_loadu_ps(vr + 32), b3 = _mm512_loadu_ps(vr + 48);
        } else {
            b0 = _mm512_maskz_loadu_ps(m[0], vr), b1 = _mm512_maskz_loadu_ps(m[1], vr + 16);
            b2 = _mm512_maskz_loadu_ps(m[2], vr + 32), b3 = _mm512_maskz_loadu_ps(m[3], vr + 48);
        }
        for (int r = 0; r < NR; r++) {
            __m512 p = _mm512_set1_ps(P[r * skp + j]);
            acc[r][0] = _mm512_fmadd_ps(p, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(p, b1, acc[r][1]);
            acc[r][2] = _mm512_fmadd_ps(p, b2, acc[r][2]);
            acc[r][3] = _mm512_fmadd_ps(p, b3, acc[r][3]);
        }
    }
    for (int r = 0; r < NR; r++) {
        __m512 s = _mm512_set1_ps(inv[r]);
        for (int v = 0; v < 4; v++)
            _mm512_mask_storeu_ps(O + r * ldo + c + 16 * v, m[v], _mm512_mul_ps(acc[r][v], s));
    }
}

#define QK_CASE(n) \
    case n: qk_tile(n, Q, ldq, KT, skp, D, scale, S, j, mr, mrow, Sk); break
static AVX512 void qk_rows(int nr, const float *Q, int64_t ldq, const float *KT, int64_t skp, int64_t D,
                           float scale, float *S, const float *mr, int64_t mrow, int64_t Sk) {
    for (int64_t j = 0; j < skp; j += QK_NK) {
        switch (nr) {
            QK_CASE(8); QK_CASE(7); QK_CASE(6); QK_CASE(5); QK_CASE(4); QK_CASE(3); QK_CASE(2);
        default: qk_tile(1, Q, ldq, KT, skp, D, scale, S, j, mr, mrow, Sk); break;
        }
    }
}

#define PV_CASE(n)                                                                                             \
    case n:                                                                                                    \
        if (full) pv_tile(n, true, P, skp, inv, V, ldv, Sk, O, ldo, c, Dv);                                    \
        else pv_tile(n, false, P, skp, inv, V, ldv, Sk, O, ldo, c, Dv);                                        \
        break
static AVX512 void pv_rows(int nr, const float *P, int64_t skp, const float *inv, const float *V, int64_t ldv,
                           int64_t Sk, float *O, int64_t ldo, int64_t Dv) {
    for (int64_t c = 0; c < Dv; c += 64) {
        bool full = Dv - c >= 64;
        switch (nr) {
            PV_CASE(6); PV_CASE(5); PV_CASE(4); PV_CASE(3); PV_CASE(2);
        default:
            if (full) pv_tile(1, true, P, skp, inv, V, ldv, Sk, O, ldo, c, Dv);
            else pv_tile(1, false, P, skp, inv, V, ldv, Sk, O, ldo, c, Dv);
            break;
        }
    }
}

/* exp(x) for x <= 0 (softmax after the max shift): x < -87.34 (and -inf)
 * gives 0 like expf's underflow, NaN gives NaN (a NaN score makes the row
 * NaN, as torch's softmax: simd_act.h says why the max's order matters);
 * degree-6 polynomial after reduction by ln 2, then 2^n by vscalefps. */
static AVX512 INLINE __m512 exp_neg(__m512 x) {
    __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_NLT_UQ);
    x = kiln__max_keep_nan512(_mm512_set1_ps(-87.33654f), x);
    __m512 n, p = kiln__exp512_poly(x, &n);
    return _mm512_maskz_scalef_ps(keep, p, n);
}

/* s[0..Sk) = exp(s - max s) in place; returns 1 / their sum (inf when the
 * row is fully masked with -inf: the context is then NaN, like ONNX). */
static AVX512 float exp_row(float *s, int64_t Sk) {
    int64_t nv = Sk / 16, t = Sk - nv * 16;
    __mmask16 tm = (__mmask16)((1u << t) - 1u);
    __m512 mx0 = _mm512_set1_ps(-INFINITY), mx1 = mx0;
    int64_t v = 0;
    for (; v + 2 <= nv; v += 2) {
        mx0 = _mm512_max_ps(mx0, _mm512_loadu_ps(s + 16 * v));
        mx1 = _mm512_max_ps(mx1, _mm512_loadu_ps(s + 16 * v + 16));
    }
    if (v < nv) mx0 = _mm512_max_ps(mx0, _mm512_loadu_ps(s + 16 * v));
    if (t) mx1 = _mm512_mask_max_ps(mx1, tm, mx1, _mm512_maskz_loadu_ps(tm, s + 16 * nv));
    float m = _mm512_reduce_max_ps(_mm512_max_ps(mx0, mx1));
    if (m == -INFINITY) m = 0.0f;
    __m512 vm = _mm512_set1_ps(m), sum0 = _mm512_setzero_ps(), sum1 = sum0;
    for (v = 0; v + 2 <= nv; v += 2) {
        __m512 e0 = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(s + 16 * v), vm));
        __m512 e1 = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(s + 16 * v + 16), vm));
        _mm512_storeu_ps(s + 16 * v, e0);
        _mm512_storeu_ps(s + 16 * v + 16, e1);
        sum0 = _mm512_add_ps(sum0, e0);
        sum1 = _mm512_add_ps(sum1, e1);
    }
    if (v < nv) {
        __m512 e0 = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(s + 16 * v), vm));
        _mm512_storeu_ps(s + 16 * v, e0);
        sum0 = _mm512_add_ps(sum0, e0);
    }
    if (t) {
        __m512 e = _mm512_maskz_mov_ps(tm, exp_neg(_mm512_sub_ps(_mm512_maskz_loadu_ps(tm, s + 16 * nv), vm)));
        _mm512_mask_storeu_ps(s + 16 * nv, tm, e);
        sum1 = _mm512_add_ps(sum1, e);
    }
    return 1.0f / _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
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
    int64_t skp = rup(Sk, 64), dvp = rup(D, 16);
    int64_t q = rows < QROWS ? rows : QROWS;
    float *KT = ws, *VP = KT + D * skp, *S = VP + Sk * dvp, *inv = S + q * skp;
    /* 1. pack K^T, zero padded; V rows made contiguous when they fit the
     * panel (the strided rows of packed QKV tensors alias in L1) */
    if (Sk == 0) { /* no keys: an empty sum */
        for (int64_t r = 0; r < rows; r++) memset(O + r * ldo, 0, sizeof(float) * (size_t)Dv);
        return;
    }
    bool vpack = Dv <= dvp && ldv != Dv;
    const float *V0 = V;
    int64_t ldv0 = ldv;
    bool pf_next = !k_dxs && ldq >= 2 * D && ldk >= 2 * D && ldv >= 2 * Dv;
    if (k_dxs) {
        for (int64_t d = 0; d < D; d++) {
            for (int64_t j = 0; j < skp; j += 16) {
                __mmask16 m = kiln__mask16(Sk - j);
                _mm512_storeu_ps(KT + ((j / 16) * D + d) * 16, _mm512_maskz_loadu_ps(m, K + d * ldk + j));
            }
        }
        if (vpack)
            for (int64_t j = 0; j < Sk; j++) memcpy(VP + j * dvp, V + j * ldv, sizeof(float) * (size_t)Dv);
    } else {
        pack_kv(K, ldk, Sk, D, KT, skp, V, ldv, Dv, vpack ? VP : NULL, dvp);
    }
    if (vpack) {
        V = VP;
        ldv = dvp;
    }
    bool mfused = mask && mcol == 1;
    for (int64_t q0 = 0; q0 < rows; q0 += QROWS) {
        int64_t nq = rows - q0 < QROWS ? rows - q0 : QROWS;
        const float *Qb = Q + q0 * ldq;
        /* 2. scores (+ mask when its columns are contiguous) */
        for (int64_t r = 0; r < nq; r += QK_NR)
            qk_rows(nq - r < QK_NR ? (int)(nq - r) : QK_NR, Qb + r * ldq, ldq, KT, skp, D, scale, S + r * skp,
                    mfused ? mask + (q0 + r) * mrow : NULL, mrow, Sk);
        /* 3. mask (strided columns) and exp; the rows' 1/sum scale the context */
        for (int64_t r = 0; r < nq; r++) {
            float *s = S + r * skp;
            if (mask && !mfused) {
                const float *mr = mask + (q0 + r) * mrow;
                for (int64_t j = 0; j < Sk; j++) s[j] += mr[j * mcol];
            }
            inv[r] = exp_row(s, Sk);
            /* the next head of row-packed operands (QKV, BSHD) starts D
             * columns on: fetch its rows into L2 while this one computes
             * (the last row is left out: it could end past the tensor) */
            if (pf_next) {
                int64_t i = q0 + r;
                if (i + 1 < rows) prefetch_row_l2(Q + i * ldq + D, D);
                if (i + 1 < Sk) {
                    prefetch_row_l2(K + i * ldk + D, D);
                    prefetch_row_l2(V0 + i * ldv0 + Dv, Dv);
                }
                if (q0 + nq >= rows && r == nq - 1)
                    for (int64_t j = rows; j + 1 < Sk; j++) {
                        prefetch_row_l2(K + j * ldk + D, D);
                        prefetch_row_l2(V0 + j * ldv0 + Dv, Dv);
                    }
            }
        }
        /* 4. context */
        for (int64_t r = 0; r < nq; r += PVR)
            pv_rows(nq - r < PVR ? (int)(nq - r) : PVR, S + r * skp, skp, inv + r, V, ldv, Sk, O + (q0 + r) * ldo,
                    ldo, Dv);
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
