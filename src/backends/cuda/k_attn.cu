/* k_attn.cu -- kiln.Attention in fp16/bf16 on tensor cores, flash-attention
 * style: one CTA per (batch * head, tile of 16 * NWQ query rows), NWQ x NWK
 * warps: NWQ groups of 16 rows, NWK slices of each step of keys (NWK > 1 at
 * small batches, the partials merged at the end: k_attn_plan.h says which).
 * For every step of keys: K and V into shared memory
 * (cp.async, zero-filled past the ends), S = Q K^T with mma.sync m16n8k16
 * (fp32 accumulators), the scale, cond rule, mask and bias added in fp32,
 * an online softmax per row (running max and sum in fp32, exp2), then
 * O += P V with P rounded to the input type in registers (the accumulator
 * layout of S is the A-operand layout of P). Head sizes up to 128 (padded
 * to 32, 64 or 128 with zeros in shared memory). The semantics are those of
 * k_attention (k_fused.cu), which runs what this kernel does not take. */
#include "k_common.cuh"
#include "k_attn_plan.h"
#include "k_mma.cuh"

using namespace kcu;

namespace {

#define ATT_BN 64 /* keys per tile */

/* Loads rows [r0, r0 + R) x cols [0, DM) of an operand into shared memory
 * (row stride DMP elements): element (r, c) at base + r * rs + c * cs, valid
 * for r < nr, c < nc, zero elsewhere. vec: cs == 1, rows 16-byte aligned and
 * nc a multiple of 8 (whole 16-byte chunks valid or not). */
template <typename T, int R, int DM, int DMP, int NT>
__device__ __forceinline__ void load_tile(T *sh, const T *base, int64_t rs, int64_t cs, int64_t r0,
                                          int64_t nr, int nc, bool vec) {
    if (vec) {
        /* offsets inside the tile fit 32 bits (the launcher checks R * rs) */
        constexpr int CH = DM / 8; /* 16-byte chunks per row */
        const T *tb = base + r0 * rs;
        const int rows = nr - r0 < R ? (int)(nr - r0) : R, rs32 = (int)rs;
#pragma unroll
        for (int e = threadIdx.x; e < R * CH; e += NT) {
            const int r = e / CH, c = (e % CH) * 8;
            const bool ok = r < rows && c < nc;
            cp_async16(sh + r * DMP + c, ok ? tb + r * rs32 + c : base, ok ? 16 : 0);
        }
    } else {
        for (int e = threadIdx.x; e < R * DM; e += NT) {
            const int r = e / DM, c = e % DM;
            T x = Num<T>::store(0.0f);
            if (r0 + r < nr && c < nc) x = base[(r0 + r) * rs + c * cs];
            sh[r * DMP + c] = x;
        }
    }
}

/* 2^x, the MUFU approximation (relative error about 2^-22; -inf gives 0) */
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* The cond bits and the float mask + bias of this thread's 32 scores of a key
 * tile (rows crow/mrow/brow, keys j0 + n * 8 + 2 * tq + {0, 1}). FULL: every
 * key of the tile exists. Key strides fit 32 bits (the launcher checks);
 * contiguous ones (stride 1, the usual [.., Sq, Sk] masks) use constant
 * offsets. */
template <typename T, int NN, bool FM, bool FULL>
__device__ __forceinline__ uint32_t tile_masks(const kcu_attn &g, const uint8_t *const *crow,
                                               const T *const *mrow, const T *const *brow, int64_t j0, int tq,
                                               bool fill_if, float (*madd)[4]) {
    uint32_t cbits = 0;
    const int cs = (int)g.cs[3], ms = (int)g.ms[3], bs = (int)g.bs[3];
    const int64_t nk = FULL ? NN * 8 : g.Sk - j0; /* may be <= 0: a slice past the keys */
#pragma unroll
    for (int u = 0; u < 2; u++) {
        /* this thread's first key of the tile */
        const uint8_t *cp = crow[u] ? crow[u] + (j0 + 2 * tq) * g.cs[3] : NULL;
        const T *mp = FM && mrow[u] ? mrow[u] + (j0 + 2 * tq) * g.ms[3] : NULL;
        const T *bp = FM && brow[u] ? brow[u] + (j0 + 2 * tq) * g.bs[3] : NULL;
        if (cp) {
            if (cs == 1) {
#pragma unroll
                for (int n = 0; n < NN; n++)
#pragma unroll
                    for (int w = 0; w < 2; w++)
                        if ((FULL || n * 8 + 2 * tq + w < nk) && (cp[n * 8 + w] != 0) == fill_if)
                            cbits |= 1u << (n * 4 + u * 2 + w);
            } else {
#pragma unroll
                for (int n = 0; n < NN; n++)
#pragma unroll
                    for (int w = 0; w < 2; w++)
                        if ((FULL || n * 8 + 2 * tq + w < nk) && (cp[(n * 8 + w) * cs] != 0) == fill_if)
                            cbits |= 1u << (n * 4 + u * 2 + w);
            }
        }
        if (FM) {
#pragma unroll
            for (int n = 0; n < NN; n++)
#pragma unroll
                for (int w = 0; w < 2; w++) {
                    float a = 0.0f;
                    if (FULL || n * 8 + 2 * tq + w < nk) {
                        if (mp) a += Num<T>::load(ms == 1 ? mp[n * 8 + w] : mp[(n * 8 + w) * ms]);
                        if (bp) a += Num<T>::load(bs == 1 ? bp[n * 8 + w] : bp[(n * 8 + w) * bs]);
                    }
                    madd[n][u * 2 + w] = a;
                }
        }
    }
    return cbits;
}

/* A warp's 16 rows of Q (at Qw, rows DMP elements apart) as the A fragments
 * of the KS steps of 16 of the head dim, kept in registers for every key. */
template <typename T, int KS, int DMP>
__device__ __forceinline__ void attn_q_frags(uint32_t (*qf)[4], const T *Qw, int lane) {
    const int mi = lane >> 3, r = lane & 7;
#pragma unroll
    for (int ks = 0; ks < KS; ks++) ldsm_x4(qf[ks], Qw + ((mi & 1) * 8 + r) * DMP + ks * 16 + (mi >> 1) * 8);
}

/* The output scale of this thread's two rows from their softmax sums (kcu_attn_norm). */
__device__ __forceinline__ void attn_norm(const float *l, int nan_to_zero, float *inv, bool *zero) {
#pragma unroll
    for (int u = 0; u < 2; u++) kcu_attn_norm(l[u], nan_to_zero, &inv[u], &zero[u]);
}

/* S = Q K^T for one warp: its 16 rows (qf: KS steps of 16 of the head dim) x
 * the NN * 8 keys of Ks (rows of DMP elements), fp32. */
template <typename T, int KS, int NN, int DMP>
__device__ __forceinline__ void attn_qk(float (*s)[4], const uint32_t (*qf)[4], const T *Ks, int lane) {
#pragma unroll
    for (int n = 0; n < NN; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    const int mi = lane >> 3, r = lane & 7;
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
#pragma unroll
        for (int np = 0; np < NN / 2; np++) {
            uint32_t bf[4];
            ldsm_x4(bf, Ks + (np * 16 + (mi >> 1) * 8 + r) * DMP + ks * 16 + (mi & 1) * 8);
            MmaType<T>::mma(s[2 * np], qf[ks], bf[0], bf[1]);
            MmaType<T>::mma(s[2 * np + 1], qf[ks], bf[2], bf[3]);
        }
}

/* One step of the online softmax: s the step's scores (scaled and masked; keys
 * past the end -inf), tmax their maxima over this thread's two rows. Updates the
 * running max m and sum l, rescales the output acc (NA columns of 8) and gives
 * P = exp(s - max) rounded to T as the A fragments of P V: pf[k][0] = (row gr,
 * keys 16k + 2tq..), pf[k][1] = (row gr + 8, ...), pf[k][2..3] the same 8 keys
 * further (the accumulator layout of S is the A-operand layout of P). */
template <typename T, int NN, int NA>
__device__ __forceinline__ void attn_softmax(const float (*s)[4], float *tmax, float *m, float *l, float (*acc)[4],
                                             uint32_t (*pf)[4]) {
    const float LOG2E = 1.4426950408889634f;
    float corr[2], base[2];
#pragma unroll
    for (int u = 0; u < 2; u++) {
        tmax[u] = fmaxf(tmax[u], __shfl_xor_sync(0xffffffffu, tmax[u], 1));
        tmax[u] = fmaxf(tmax[u], __shfl_xor_sync(0xffffffffu, tmax[u], 2));
        const float mn = fmaxf(m[u], tmax[u]);
        base[u] = mn == -INFINITY ? 0.0f : mn; /* all masked so far: exp2(-inf) = 0 */
        corr[u] = ex2((m[u] - base[u]) * LOG2E); /* differences: no overflow of a huge fill */
        m[u] = mn;
        l[u] *= corr[u];
    }
#pragma unroll
    for (int n = 0; n < NA; n++) {
        acc[n][0] *= corr[0];
        acc[n][1] *= corr[0];
        acc[n][2] *= corr[1];
        acc[n][3] *= corr[1];
    }
#pragma unroll
    for (int n = 0; n < NN; n++) {
        const float p0 = ex2((s[n][0] - base[0]) * LOG2E), p1 = ex2((s[n][1] - base[0]) * LOG2E);
        const float p2 = ex2((s[n][2] - base[1]) * LOG2E), p3 = ex2((s[n][3] - base[1]) * LOG2E);
        l[0] += p0 + p1;
        l[1] += p2 + p3;
        pf[n >> 1][(n & 1) * 2 + 0] = MmaType<T>::pack(p0, p1);
        pf[n >> 1][(n & 1) * 2 + 1] = MmaType<T>::pack(p2, p3);
    }
}

/* O += P V for one warp: P (pf, NN * 8 keys) times V's NN * 8 rows of DM
 * columns at Vs (rows of DMP elements), read transposed. */
template <typename T, int NN, int DM, int DMP>
__device__ __forceinline__ void attn_pv(float (*acc)[4], const uint32_t (*pf)[4], const T *Vs, int lane) {
    const int mi = lane >> 3, r = lane & 7;
#pragma unroll
    for (int ks = 0; ks < NN / 2; ks++)
#pragma unroll
        for (int np = 0; np < DM / 16; np++) {
            uint32_t bf[4];
            ldsm_x4_t(bf, Vs + (ks * 16 + (mi & 1) * 8 + r) * DMP + np * 16 + (mi >> 1) * 8);
            MmaType<T>::mma(acc[2 * np], pf[ks], bf[0], bf[1]);
            MmaType<T>::mma(acc[2 * np + 1], pf[ks], bf[2], bf[3]);
        }
}

/* One step's online softmax (attn_softmax) and O += P V (attn_pv), P kept in registers. */
template <typename T, int NN, int DM, int DMP>
__device__ __forceinline__ void attn_softmax_pv(const float (*s)[4], float *tmax, float *m, float *l,
                                                float (*acc)[4], const T *Vs, int lane) {
    uint32_t pf[NN / 2][4];
    attn_softmax<T, NN, DM / 8>(s, tmax, m, l, acc, pf);
    attn_pv<T, NN, DM, DMP>(acc, pf, Vs, lane);
}

/* This CTA's work: query rows [i0, i0 + BM) of (batch b, head h), the q tiles
 * of one (batch, head) side by side in the grid; Q, K, V at that batch and head. */
template <typename T> struct AttnCta {
    int64_t b, h, i0;
    const T *q, *k, *v;
    __device__ __forceinline__ AttnCta(const kcu_attn &g, int BM, const T *q_, const T *k_, const T *v_) {
        const int qtiles = (int)((g.Sq + BM - 1) / BM);
        const int64_t bh = blockIdx.x / qtiles;
        b = bh / g.H;
        h = bh % g.H;
        i0 = (int64_t)(blockIdx.x % qtiles) * BM;
        q = q_ + b * g.qs[0] + h * g.qs[1];
        k = k_ + b * g.ks[0] + h * g.ks[1];
        v = v_ + b * g.vs[0] + h * g.vs[1];
    }
};

/* One CTA: NWQ * 16 query rows x NWK key slices, a warp per (16 rows, slice).
 * Per step the CTA loads BN = NWK * WN keys; warp (wq, wk) takes the WN keys
 * [wk * WN, (wk + 1) * WN) of each step, with its own running max, sum and
 * output. NWK > 1 (small batches: more warps over the same rows, each with a
 * shorter serial chain): the partial results meet in shared memory at the
 * end and each warp finishes DM / NWK of the output columns.
 * FM: a float mask or bias is there (the cond alone needs no registers of floats). */
template <typename T, int DM, int NWQ, int NWK, int WN, bool FM>
__global__ void __launch_bounds__(NWQ *NWK * 32)
    k_attn_mma(const __grid_constant__ kcu_attn g, const T *__restrict__ q, const T *__restrict__ k,
               const T *__restrict__ v, const T *__restrict__ mask, const uint8_t *__restrict__ cond,
               const T *__restrict__ bias, T *__restrict__ o, int vec_q, int vec_k, int vec_v) {
    constexpr int BM = 16 * NWQ, BN = NWK * WN, NN = WN / 8, DMP = DM + 8, NT = NWQ * NWK * 32, KS = DM / 16;
    static_assert(WN % 16 == 0 && NN * 4 <= 32, "a warp's key slice: 16 to 64 keys");
    static_assert(NWK == 1 || (DM / 8) % NWK == 0, "output columns split evenly over the key warps");
    /* the merge's partials (acc, max, sum per thread) fit in one stage of K, V */
    static_assert(NWK == 1 || (size_t)NWQ * NWK * (DM / 2 + 4) * 32 * 4 <= (size_t)2 * BN * DMP * sizeof(T),
                  "merge scratch fits in one K/V stage");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    /* Q, then one or two stages of (K, V) */
    T *Qs = reinterpret_cast<T *>(smem_raw);
    T *KV = Qs + BM * DMP;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wq = warp % NWQ, wk = warp / NWQ;
    const int gr = lane >> 2, tq = lane & 3; /* row group and thread in quad */
    const AttnCta<T> cta(g, BM, q, k, v);
    const int64_t b = cta.b, h = cta.h, i0 = cta.i0;
    const T *qb = cta.q, *kb = cta.k, *vb = cta.v;
    const int ntiles = (int)((g.Sk + BN - 1) / BN);

    /* everything the first step needs, in flight at once */
    load_tile<T, BM, DM, DMP, NT>(Qs, qb, g.qs[2], g.qs[3], i0, g.Sq, (int)g.D, vec_q);
    load_tile<T, BN, DM, DMP, NT>(KV, kb, g.ks[2], g.ks[3], 0, g.Sk, (int)g.D, vec_k);
    load_tile<T, BN, DM, DMP, NT>(KV + BN * DMP, vb, g.vs[2], g.vs[3], 0, g.Sk, (int)g.Dv, vec_v);
    cp_async_commit();
    /* this thread's two rows (gr and gr + 8 of the warp's 16) and their masks */
    int64_t row[2];
    const T *mrow[2] = {NULL, NULL}, *brow[2] = {NULL, NULL};
    const uint8_t *crow[2] = {NULL, NULL};
#pragma unroll
    for (int u = 0; u < 2; u++) {
        row[u] = i0 + wq * 16 + gr + u * 8;
        const int64_t ri = row[u] < g.Sq ? row[u] : 0;
        if (g.has_mask) mrow[u] = mask + b * g.ms[0] + h * g.ms[1] + ri * g.ms[2];
        if (g.has_cond) crow[u] = cond + b * g.cs[0] + h * g.cs[1] + ri * g.cs[2];
        if (g.has_bias) brow[u] = bias + b * g.bs[0] + h * g.bs[1] + ri * g.bs[2];
    }
    const bool any_mask = g.has_mask || g.has_bias || g.has_cond;
    const bool fill_if = g.cond_fill_if != 0, select = g.cond_mode == 1;
    cp_async_wait<0>();
    __syncthreads();
    uint32_t qf[KS][4];
    attn_q_frags<T, KS, DMP>(qf, Qs + wq * 16 * DMP, lane);
    const float LOG2E = 1.4426950408889634f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float acc[DM / 8][4];
#pragma unroll
    for (int n = 0; n < DM / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

    for (int t = 0; t < ntiles; t++) {
        const int64_t j0 = (int64_t)t * BN + wk * WN; /* this warp's first key */
        const T *Ks = KV + (t & 1) * 2 * BN * DMP + wk * WN * DMP, *Vs = Ks + BN * DMP;
        /* the next step streams in while this one is computed */
        if (t + 1 < ntiles) {
            T *Kn = KV + ((t + 1) & 1) * 2 * BN * DMP;
            const int64_t jn = (int64_t)(t + 1) * BN;
            load_tile<T, BN, DM, DMP, NT>(Kn, kb, g.ks[2], g.ks[3], jn, g.Sk, (int)g.D, vec_k);
            load_tile<T, BN, DM, DMP, NT>(Kn + BN * DMP, vb, g.vs[2], g.vs[3], jn, g.Sk, (int)g.Dv, vec_v);
            cp_async_commit();
        }
        /* masks of this slice, loaded before the products so their latency overlaps */
        float madd[FM ? NN : 1][4];
        uint32_t cbits = 0; /* bit (n * 4 + e): the cond rule applies */
        const bool full = j0 + WN <= g.Sk;
        if (any_mask)
            cbits = full ? tile_masks<T, NN, FM, true>(g, crow, mrow, brow, j0, tq, fill_if, madd)
                         : tile_masks<T, NN, FM, false>(g, crow, mrow, brow, j0, tq, fill_if, madd);
        /* S = Q K^T: 16 rows x WN keys per warp */
        float s[NN][4];
        attn_qk<T, KS, NN, DMP>(s, qf, Ks, lane);
        /* scale, cond, mask, bias; keys past the end are -inf */
        float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < NN; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int u = e >> 1;
                float x = s[n][e] * g.scale;
                if (any_mask) {
                    if ((cbits >> (n * 4 + e)) & 1) x = select ? g.fill : x + g.fill;
                    if (FM) x += madd[FM ? n : 0][e];
                }
                if (!full && j0 + n * 8 + 2 * tq + (e & 1) >= g.Sk) x = -INFINITY;
                s[n][e] = x;
                tmax[u] = fmaxf(tmax[u], x);
            }
        /* the online softmax, then O += P V (V [WN keys][DM]) */
        attn_softmax_pv<T, NN, DM, DMP>(s, tmax, m, l, acc, Vs, lane);
        if (t + 1 < ntiles) {
            cp_async_wait<0>();
            __syncthreads(); /* the next stage is in; this one is read by every warp */
        }
    }
#pragma unroll
    for (int u = 0; u < 2; u++) {
        l[u] += __shfl_xor_sync(0xffffffffu, l[u], 1);
        l[u] += __shfl_xor_sync(0xffffffffu, l[u], 2);
    }
    /* output columns n8 in [n0, n1) of this warp */
    constexpr int NO = DM / 8 / NWK;
    const int n0 = NWK == 1 ? 0 : wk * NO;
    if constexpr (NWK > 1) {
        /* partials in fragment order (conflict-free: lane-consecutive), over the K/V stage */
        constexpr int PART = (DM / 2 + 4) * 32; /* floats per warp */
        float *part = reinterpret_cast<float *>(KV);
        __syncthreads(); /* every warp is done with the last K/V stage */
        float *mine = part + (wk * NWQ + wq) * PART;
#pragma unroll
        for (int n = 0; n < DM / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) mine[(n * 4 + e) * 32 + lane] = acc[n][e];
#pragma unroll
        for (int u = 0; u < 2; u++) {
            mine[(DM / 2 + u) * 32 + lane] = m[u];
            mine[(DM / 2 + 2 + u) * 32 + lane] = l[u];
        }
        __syncthreads();
        float mp[NWK][2], wgt[NWK][2], M[2] = {-INFINITY, -INFINITY}, L[2] = {0.0f, 0.0f};
#pragma unroll
        for (int p = 0; p < NWK; p++)
#pragma unroll
            for (int u = 0; u < 2; u++) {
                mp[p][u] = part[(p * NWQ + wq) * PART + (DM / 2 + u) * 32 + lane];
                M[u] = fmaxf(M[u], mp[p][u]);
            }
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const float bs = M[u] == -INFINITY ? 0.0f : M[u];
#pragma unroll
            for (int p = 0; p < NWK; p++) {
                wgt[p][u] = ex2((mp[p][u] - bs) * LOG2E); /* a partial without keys (-inf): 0 */
                L[u] += wgt[p][u] * part[(p * NWQ + wq) * PART + (DM / 2 + 2 + u) * 32 + lane];
            }
            l[u] = L[u];
        }
        /* this warp's columns (n tested, not used as an index: acc stays in registers) */
#pragma unroll
        for (int n = 0; n < DM / 8; n++)
            if (n / NO == wk)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float a = 0.0f;
#pragma unroll
                    for (int p = 0; p < NWK; p++)
                        a += wgt[p][e >> 1] * part[(p * NWQ + wq) * PART + (n * 4 + e) * 32 + lane];
                    acc[n][e] = a;
                }
    }
    float inv[2];
    bool zero[2];
    attn_norm(l, g.nan_to_zero, inv, zero);
    /* the output: pairs of neighbouring d as one 4-byte store where contiguous */
    const bool pair = g.os[3] == 1 && (g.os[2] % 2) == 0 && (g.os[1] % 2) == 0 && (g.os[0] % 2) == 0 &&
                      (uintptr_t)o % 4 == 0 && g.Dv % 2 == 0;
#pragma unroll
    for (int n = 0; n < DM / 8; n++)
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int64_t d = n * 8 + 2 * tq;
            if (n < n0 || n >= n0 + NO || row[u] >= g.Sq || d >= g.Dv) continue;
            T *op = o + b * g.os[0] + h * g.os[1] + row[u] * g.os[2] + d * g.os[3];
            const float y0 = zero[u] ? 0.0f : acc[n][2 * u] * inv[u];
            const float y1 = zero[u] ? 0.0f : acc[n][2 * u + 1] * inv[u];
            if (pair) {
                *reinterpret_cast<uint32_t *>(op) = MmaType<T>::pack(y0, y1);
            } else {
                op[0] = Num<T>::store(y0);
                if (d + 1 < g.Dv) op[g.os[3]] = Num<T>::store(y1);
            }
        }
}

/* rows of n elements starting at p, r elements apart, all 16-byte aligned */
bool rows_aligned(const void *p, int64_t rs, size_t es) {
    return (uintptr_t)p % 16 == 0 && (rs * (int64_t)es) % 16 == 0;
}

/* whether an operand at p (element strides st: batch, head, row, column; n
 * columns) is read and written in 16-byte chunks: every row of each (batch,
 * head) 16-byte aligned, columns contiguous and whole chunks */
int chunked(const void *p, const int64_t *st, int64_t n, size_t es) {
    return st[3] == 1 && n % 8 == 0 && rows_aligned(p, st[2], es) && (st[0] * (int64_t)es) % 16 == 0 &&
           (st[1] * (int64_t)es) % 16 == 0;
}

template <typename T, int DM, int NWQ, int NWK, int WN, bool FM>
cudaError_t launch_fm(const kcu_attn *g, const void *q, const void *k, const void *v, const void *mask,
                      const uint8_t *cond, const void *bias, void *o, int vq, int vk, int vv,
                      cudaStream_t stream) {
    constexpr int BM = 16 * NWQ, BN = NWK * WN, DMP = DM + 8;
    const int stages = g->Sk > BN ? 2 : 1; /* one step of keys: no second stage */
    const size_t smem = (size_t)(BM + 2 * stages * BN) * DMP * sizeof(T); /* Q + stages of K, V */
    cudaError_t e = cudaFuncSetAttribute(k_attn_mma<T, DM, NWQ, NWK, WN, FM>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    const int64_t tiles = (g->Sq + BM - 1) / BM;
    dim3 grid((unsigned)(g->B * g->H * tiles)); /* the q tiles of one (batch, head) side by side */
    k_attn_mma<T, DM, NWQ, NWK, WN, FM><<<grid, NWQ * NWK * 32, smem, stream>>>(
        *g, (const T *)q, (const T *)k, (const T *)v, (const T *)mask, cond, (const T *)bias, (T *)o, vq, vk, vv);
    return cudaGetLastError();
}

template <typename T, int DM, int NWQ, int NWK, int WN>
cudaError_t launch_dm(const kcu_attn *g, const void *q, const void *k, const void *v, const void *mask,
                      const uint8_t *cond, const void *bias, void *o, int vq, int vk, int vv,
                      cudaStream_t stream) {
    if (g->has_mask || g->has_bias)
        return launch_fm<T, DM, NWQ, NWK, WN, true>(g, q, k, v, mask, cond, bias, o, vq, vk, vv, stream);
    return launch_fm<T, DM, NWQ, NWK, WN, false>(g, q, k, v, mask, cond, bias, o, vq, vk, vv, stream);
}

template <typename T, int DM>
cudaError_t launch_nw(const kcu_attn *g, const void *q, const void *k, const void *v, const void *mask,
                      const uint8_t *cond, const void *bias, void *o, int vq, int vk, int vv, int sm_count,
                      int split, cudaStream_t stream) {
    const kcu_attn_plan p = kcu_attn_choose(g->B, g->H, g->Sq, DM, sm_count, split);
    if (p.ctas > INT32_MAX) return cudaErrorNotSupported;
    if (p.k_warps > 1)
        return launch_dm<T, DM, 1, 4, (DM > 64 ? 16 : 32)>(g, q, k, v, mask, cond, bias, o, vq, vk, vv, stream);
    if (p.q_warps == 4)
        return launch_dm<T, DM, 4, 1, ATT_BN>(g, q, k, v, mask, cond, bias, o, vq, vk, vv, stream);
    return launch_dm<T, DM, 2, 1, ATT_BN>(g, q, k, v, mask, cond, bias, o, vq, vk, vv, stream);
}

template <typename T>
cudaError_t launch_t(const kcu_attn *g, const void *q, const void *k, const void *v, const void *mask,
                     const uint8_t *cond, const void *bias, void *o, int sm_count, int split,
                     cudaStream_t stream) {
    const int64_t dmax = g->D > g->Dv ? g->D : g->Dv;
    const size_t es = sizeof(T);
    const int vq = chunked(q, g->qs, g->D, es), vk = chunked(k, g->ks, g->D, es), vv = chunked(v, g->vs, g->Dv, es);
    if (dmax <= 32) return launch_nw<T, 32>(g, q, k, v, mask, cond, bias, o, vq, vk, vv, sm_count, split, stream);
    if (dmax <= 64) return launch_nw<T, 64>(g, q, k, v, mask, cond, bias, o, vq, vk, vv, sm_count, split, stream);
    return launch_nw<T, 128>(g, q, k, v, mask, cond, bias, o, vq, vk, vv, sm_count, split, stream);
}

/* ---- kiln-attn-fa64 / kiln-attn-fa128: the masks through shared memory ----
 *
 * The same flash-attention scheme as k_attn_mma with NWK = 1 (a warp per 16
 * query rows, every warp over all keys), 4 or 8 warps per CTA (64 or 128
 * rows), but with the mask, bias and cond of each step of keys staged in
 * shared memory beside K and V (cp.async, 16-byte chunks, where their rows
 * allow; element by element where not) instead of being read per thread into
 * registers: k_attn_mma's masked variant keeps 32 floats of mask per thread
 * live across the products (216 registers at D 64: two CTAs per
 * multiprocessor), this one reads each value from shared memory where it is
 * added. A mask broadcast over the query rows (BERT's padding mask
 * [B, 1, 1, Sk]) takes one row per stage. The output is normalized, staged in
 * the warp's own rows of Q's buffer (Q lives in registers by then) and
 * written with 16-byte stores where its rows allow. */

#define FA_BN 64     /* keys per step */
#define FA_TPAD 8    /* elements of padding per row of a T mask tile (16 bytes) */
#define FA_CPAD 16   /* bytes of padding per row of a cond tile */

/* Rows of a mask-like operand's tile: 0 absent, 1 broadcast over the query rows, else BM. */
__host__ __device__ __forceinline__ int fa_rows(int has, int64_t row_stride, int BM) {
    return !has ? 0 : row_stride == 0 ? 1 : BM;
}

/* Bytes of one stage (K, V, mask, bias, cond tiles, each a multiple of 16 bytes). */
__host__ __device__ __forceinline__ size_t fa_stage_bytes(const kcu_attn &g, int BM, int DMP, size_t es) {
    return (size_t)2 * FA_BN * DMP * es + (size_t)fa_rows(g.has_mask, g.ms[2], BM) * (FA_BN + FA_TPAD) * es +
           (size_t)fa_rows(g.has_bias, g.bs[2], BM) * (FA_BN + FA_TPAD) * es +
           (size_t)fa_rows(g.has_cond, g.cs[2], BM) * (FA_BN + FA_CPAD);
}

/* One mask-like operand's tile of a step: sh[r * P + c] = x[(i0 + r) * rs + (j0 + c) * cs]
 * for r < R, c < FA_BN (x: the operand at this CTA's batch and head), zero past
 * the query rows (nr) and the keys (nk). By 16-byte cp.async chunks (a partial
 * last chunk zero-filled by the copy) where the keys are contiguous and every
 * row starts 16-byte aligned; else element by element. */
template <typename E, int NT>
__device__ __forceinline__ void fa_mask_tile(E *sh, int P, int R, const E *x, int64_t rs, int64_t cs, int64_t i0,
                                             int64_t nr, int64_t j0, int64_t nk) {
    constexpr int CE = 16 / (int)sizeof(E), CH = FA_BN / CE; /* elements per chunk, chunks per row */
    const bool vec = cs == 1 && (uintptr_t)(x + j0) % 16 == 0 && (R == 1 || (rs * (int64_t)sizeof(E)) % 16 == 0);
    if (vec) {
        for (int e = threadIdx.x; e < R * CH; e += NT) {
            const int r = e / CH, c = (e % CH) * CE;
            int64_t keys = nk - (j0 + c); /* valid keys in this chunk, clamped to [0, CE] */
            keys = keys < 0 ? 0 : keys > CE ? CE : keys;
            if (i0 + r >= nr) keys = 0;
            const E *src = keys ? x + (i0 + r) * rs + j0 + c : x;
            cp_async16(sh + r * P + c, src, (int)(keys * (int64_t)sizeof(E)));
        }
    } else {
        for (int e = threadIdx.x; e < R * FA_BN; e += NT) {
            const int r = e / FA_BN, c = e % FA_BN;
            E v;
            memset(&v, 0, sizeof v);
            if (i0 + r < nr && j0 + c < nk) v = x[(i0 + r) * rs + (j0 + c) * cs];
            sh[r * P + c] = v;
        }
    }
}

/* 4 bytes of shared memory (aligned), read where written in the program: a
 * volatile asm stays after the products before it (the mma asm), so the step's
 * mask values are not all loaded ahead of them into registers. */
__device__ __forceinline__ uint32_t fa_lds32(const void *p) {
    uint32_t v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(smem_addr(p)));
    return v;
}

/* Two neighbouring T values of shared memory (4-byte aligned) as floats. */
template <typename T> __device__ __forceinline__ float2 fa_ld2(const T *p) {
    typedef typename std::conditional<std::is_same<T, __half>::value, __half2, __nv_bfloat162>::type T2;
    const uint32_t u = fa_lds32(p);
    const T2 v = *reinterpret_cast<const T2 *>(&u);
    return make_float2(Num<T>::load(v.x), Num<T>::load(v.y));
}

/* The scores of one step in place (s: this thread's elements of S = Q K^T; element
 * e of s[n] is row rr[e >> 1] of the CTA's tile, key n * 8 + 2 * tq + (e & 1) of the
 * step starting at key j0): the scale, the cond rule, mask + bias (from the stage's
 * tiles Ms, Bs, Cs of Rm, Rb, Rc rows: 0 absent, 1 broadcast over the rows), keys
 * past the end -inf; tmax: the maxima of this thread's two rows. */
template <typename T, int NN, bool AM>
__device__ __forceinline__ void fa_scores(float (*s)[4], float *tmax, const kcu_attn &g, const T *Ms, const T *Bs,
                                          const uint8_t *Cs, int Rm, int Rb, int Rc, const int *rr, int tq,
                                          int64_t j0) {
    constexpr int MP = FA_BN + FA_TPAD, CP = FA_BN + FA_CPAD;
    const bool full = j0 + FA_BN <= g.Sk, fill_if = g.cond_fill_if != 0, select = g.cond_mode == 1;
    tmax[0] = tmax[1] = -INFINITY;
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int c = n * 8 + 2 * tq; /* the first of this pair's two keys */
            float x[2] = {s[n][2 * u] * g.scale, s[n][2 * u + 1] * g.scale};
            if (AM) {
                if (Rc) {
                    /* keys c, c + 1 (c even) in a 4-byte aligned read of their row */
                    const uint8_t *cp = Cs + (Rc == 1 ? 0 : rr[u]) * CP + c;
                    const uint32_t cv = fa_lds32(cp - (c & 2)) >> (8 * (c & 2));
#pragma unroll
                    for (int w = 0; w < 2; w++)
                        if ((((cv >> (8 * w)) & 0xff) != 0) == fill_if) x[w] = select ? g.fill : x[w] + g.fill;
                }
                if (Rm || Rb) { /* mask + bias, then added (k_attn_mma's order) */
                    float2 a = make_float2(0.0f, 0.0f);
                    if (Rm) {
                        const float2 mv = fa_ld2<T>(Ms + (Rm == 1 ? 0 : rr[u]) * MP + c);
                        a.x += mv.x;
                        a.y += mv.y;
                    }
                    if (Rb) {
                        const float2 bv = fa_ld2<T>(Bs + (Rb == 1 ? 0 : rr[u]) * MP + c);
                        a.x += bv.x;
                        a.y += bv.y;
                    }
                    x[0] += a.x;
                    x[1] += a.y;
                }
            }
#pragma unroll
            for (int w = 0; w < 2; w++) {
                if (!full && j0 + c + w >= g.Sk) x[w] = -INFINITY;
                s[n][2 * u + w] = x[w];
                tmax[u] = fmaxf(tmax[u], x[w]);
            }
        }
}

/* CTAs per multiprocessor the register cap is set for. Head size 64: 12 warps
 * for 64-row CTAs (168 registers: no spills), 16 for 128-row CTAs (128
 * registers; ptxas spills a few loop-invariant values); the builder times both.
 * Head size 128: 8 warps (255 registers). */
template <int DM, int NW> struct FaOcc {
    static constexpr int value = DM <= 64 ? (NW == 4 ? 3 : 2) : NW == 4 ? 2 : 1;
};

/* NW warps, 16 query rows each; AM: a mask, bias or cond is there. vec_o: O's
 * rows are 16-byte aligned, its head dim contiguous and Dv a multiple of 8. */
template <typename T, int DM, int NW, bool AM>
__global__ void __launch_bounds__(NW * 32, FaOcc<DM, NW>::value)
    k_attn_fa(const __grid_constant__ kcu_attn g, const T *__restrict__ q, const T *__restrict__ k,
              const T *__restrict__ v, const T *__restrict__ mask, const uint8_t *__restrict__ cond,
              const T *__restrict__ bias, T *__restrict__ o, int vec_q, int vec_k, int vec_v, int vec_o) {
    constexpr int BM = 16 * NW, BN = FA_BN, NN = BN / 8, DMP = DM + 8, NT = NW * 32, KS = DM / 16;
    constexpr int MP = BN + FA_TPAD, CP = BN + FA_CPAD; /* mask / cond tile row pitch (elements) */
    extern __shared__ __align__(16) unsigned char smem_raw[];
    /* Q [BM][DMP], then one or two stages of: K [BN][DMP], V [BN][DMP], mask [Rm][MP],
     * bias [Rb][MP], cond [Rc][CP] (every part a multiple of 16 bytes) */
    T *Qs = reinterpret_cast<T *>(smem_raw);
    unsigned char *stages = smem_raw + (size_t)BM * DMP * sizeof(T);
    const size_t stage_bytes = fa_stage_bytes(g, BM, DMP, sizeof(T));
    const int Rm = fa_rows(g.has_mask, g.ms[2], BM), Rb = fa_rows(g.has_bias, g.bs[2], BM);
    const int Rc = fa_rows(g.has_cond, g.cs[2], BM);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int gr = lane >> 2, tq = lane & 3; /* row group and thread in quad */
    const AttnCta<T> cta(g, BM, q, k, v);
    const int64_t b = cta.b, h = cta.h, i0 = cta.i0;
    const T *qb = cta.q, *kb = cta.k, *vb = cta.v;
    /* the mask-like operands at this batch and head (NULL: absent) */
    const T *mb = g.has_mask ? mask + b * g.ms[0] + h * g.ms[1] : NULL;
    const T *bb = g.has_bias ? bias + b * g.bs[0] + h * g.bs[1] : NULL;
    const uint8_t *cb = g.has_cond ? cond + b * g.cs[0] + h * g.cs[1] : NULL;
    const int ntiles = (int)((g.Sk + BN - 1) / BN);

    /* the pointers of stage s's tiles */
#define FA_STAGE(s, Ks, Vs, Ms, Bs, Cs)                                                \
    T *Ks = reinterpret_cast<T *>(stages + (size_t)(s) * stage_bytes), *Vs = Ks + BN * DMP; \
    T *Ms = Vs + BN * DMP, *Bs = Ms + Rm * MP;                                         \
    uint8_t *Cs = reinterpret_cast<uint8_t *>(Bs + Rb * MP)
    /* issues the loads of step t into stage s (cp.async; the element-by-element mask loads finish here) */
    auto load_step = [&](int t, int s) {
        FA_STAGE(s, Ks, Vs, Ms, Bs, Cs);
        const int64_t j0 = (int64_t)t * BN;
        load_tile<T, BN, DM, DMP, NT>(Ks, kb, g.ks[2], g.ks[3], j0, g.Sk, (int)g.D, vec_k);
        load_tile<T, BN, DM, DMP, NT>(Vs, vb, g.vs[2], g.vs[3], j0, g.Sk, (int)g.Dv, vec_v);
        if (AM) {
            if (mb) fa_mask_tile<T, NT>(Ms, MP, Rm, mb, g.ms[2], g.ms[3], i0, g.Sq, j0, g.Sk);
            if (bb) fa_mask_tile<T, NT>(Bs, MP, Rb, bb, g.bs[2], g.bs[3], i0, g.Sq, j0, g.Sk);
            if (cb) fa_mask_tile<uint8_t, NT>(Cs, CP, Rc, cb, g.cs[2], g.cs[3], i0, g.Sq, j0, g.Sk);
        }
    };

    /* everything the first step needs, and the second step behind it, in flight at once
     * (a CTA of s128 has only two steps: its loads' latency is paid once) */
    load_tile<T, BM, DM, DMP, NT>(Qs, qb, g.qs[2], g.qs[3], i0, g.Sq, (int)g.D, vec_q);
    load_step(0, 0);
    cp_async_commit();
    if (ntiles > 1) {
        load_step(1, 1);
        cp_async_commit();
        cp_async_wait<1>(); /* Q and step 0 in; step 1 may still be coming */
    } else {
        cp_async_wait<0>();
    }
    __syncthreads();
    /* this warp's 16 rows of Q as A fragments, for every step */
    uint32_t qf[KS][4];
    attn_q_frags<T, KS, DMP>(qf, Qs + warp * 16 * DMP, lane);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float acc[DM / 8][4];
#pragma unroll
    for (int n = 0; n < DM / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    /* this thread's two rows inside the CTA's tile (gr and gr + 8 of the warp's 16) */
    const int rr[2] = {warp * 16 + gr, warp * 16 + gr + 8};
    const bool live = i0 + warp * 16 < g.Sq; /* (uniform over the warp) */

    for (int t = 0; t < ntiles; t++) {
        const int64_t j0 = (int64_t)t * BN;
        FA_STAGE(t & 1, Ks, Vs, Ms, Bs, Cs);
        /* the next step streams in while this one is computed (step 1: since the start) */
        if (t >= 1 && t + 1 < ntiles) {
            load_step(t + 1, (t + 1) & 1);
            cp_async_commit();
        }
        /* a warp whose 16 rows are all past the queries (the last q tile) only loads */
        if (live) {
            /* S = Q K^T: 16 rows x BN keys per warp */
            float s[NN][4];
            attn_qk<T, KS, NN, DMP>(s, qf, Ks, lane);
            float tmax[2];
            fa_scores<T, NN, AM>(s, tmax, g, Ms, Bs, Cs, Rm, Rb, Rc, rr, tq, j0);
            /* the online softmax, then O += P V (V [BN keys][DM]) */
            attn_softmax_pv<T, NN, DM, DMP>(s, tmax, m, l, acc, Vs, lane);
        }
        if (t + 1 < ntiles) {
            cp_async_wait<0>();
            __syncthreads(); /* the next stage is in; this one is read by every warp */
        }
    }
#undef FA_STAGE
    if (!live) return; /* (no barrier follows) */
#pragma unroll
    for (int u = 0; u < 2; u++) {
        l[u] += __shfl_xor_sync(0xffffffffu, l[u], 1);
        l[u] += __shfl_xor_sync(0xffffffffu, l[u], 2);
    }
    float inv[2];
    bool zero[2];
    attn_norm(l, g.nan_to_zero, inv, zero);
    T *ob = o + b * g.os[0] + h * g.os[1];
    if (vec_o) {
        /* the warp's 16 rows into its own rows of Q's buffer (read only by this warp,
         * into qf, before the loop), then 16-byte chunks out, a row's chunks side by side */
        T *Os = Qs + warp * 16 * DMP;
#pragma unroll
        for (int n = 0; n < DM / 8; n++)
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const float y0 = zero[u] ? 0.0f : acc[n][2 * u] * inv[u];
                const float y1 = zero[u] ? 0.0f : acc[n][2 * u + 1] * inv[u];
                *reinterpret_cast<uint32_t *>(Os + (gr + 8 * u) * DMP + n * 8 + 2 * tq) = MmaType<T>::pack(y0, y1);
            }
        __syncwarp();
        constexpr int CH = DM / 8; /* 16-byte chunks per row */
#pragma unroll
        for (int e = lane; e < 16 * CH; e += 32) {
            const int r = e / CH, c = (e % CH) * 8;
            const int64_t row = i0 + warp * 16 + r;
            if (row < g.Sq && c < g.Dv)
                *reinterpret_cast<uint4 *>(ob + row * g.os[2] + c) =
                    *reinterpret_cast<const uint4 *>(Os + r * DMP + c);
        }
        return;
    }
#pragma unroll
    for (int n = 0; n < DM / 8; n++)
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int64_t d = n * 8 + 2 * tq, row = i0 + rr[u];
            if (row >= g.Sq || d >= g.Dv) continue;
            T *op = ob + row * g.os[2] + d * g.os[3];
            op[0] = Num<T>::store(zero[u] ? 0.0f : acc[n][2 * u] * inv[u]);
            if (d + 1 < g.Dv) op[g.os[3]] = Num<T>::store(zero[u] ? 0.0f : acc[n][2 * u + 1] * inv[u]);
        }
}

template <typename T, int DM, int NW, bool AM>
cudaError_t launch_fa(const kcu_attn *g, const void *q, const void *k, const void *v, const void *mask,
                      const uint8_t *cond, const void *bias, void *o, int vq, int vk, int vv, int vo,
                      cudaStream_t stream) {
    constexpr int BM = 16 * NW, DMP = DM + 8;
    const int stages = g->Sk > FA_BN ? 2 : 1; /* one step of keys: no second stage */
    const size_t smem = (size_t)BM * DMP * sizeof(T) + stages * fa_stage_bytes(*g, BM, DMP, sizeof(T));
    cudaError_t e = cudaFuncSetAttribute(k_attn_fa<T, DM, NW, AM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem);
    if (e == cudaErrorInvalidValue) { /* more shared memory than this GPU gives a CTA: the other kernel */
        cudaGetLastError();
        return cudaErrorNotSupported;
    }
    if (e != cudaSuccess) return e;
    const int64_t tiles = (g->Sq + BM - 1) / BM;
    dim3 grid((unsigned)(g->B * g->H * tiles)); /* the q tiles of one (batch, head) side by side */
    k_attn_fa<T, DM, NW, AM><<<grid, NW * 32, smem, stream>>>(*g, (const T *)q, (const T *)k, (const T *)v,
                                                             (const T *)mask, cond, (const T *)bias, (T *)o, vq,
                                                             vk, vv, vo);
    return cudaGetLastError();
}

template <typename T, int DM>
cudaError_t launch_fa_nw(const kcu_attn *g, const void *q, const void *k, const void *v, const void *mask,
                         const uint8_t *cond, const void *bias, void *o, int rows, cudaStream_t stream) {
    const size_t es = sizeof(T);
    const int vq = chunked(q, g->qs, g->D, es), vk = chunked(k, g->ks, g->D, es), vv = chunked(v, g->vs, g->Dv, es);
    const int vo = chunked(o, g->os, g->Dv, es);
    const bool am = g->has_mask || g->has_bias || g->has_cond;
    if (rows == 128)
        return am ? launch_fa<T, DM, 8, true>(g, q, k, v, mask, cond, bias, o, vq, vk, vv, vo, stream)
                  : launch_fa<T, DM, 8, false>(g, q, k, v, mask, cond, bias, o, vq, vk, vv, vo, stream);
    return am ? launch_fa<T, DM, 4, true>(g, q, k, v, mask, cond, bias, o, vq, vk, vv, vo, stream)
              : launch_fa<T, DM, 4, false>(g, q, k, v, mask, cond, bias, o, vq, vk, vv, vo, stream);
}

} // namespace

extern "C" cudaError_t kcu_attention_mma(kiln_dtype t, const kcu_attn *g, const void *q, const void *k,
                                         const void *v, const void *mask, const uint8_t *cond,
                                         const void *bias, void *o, int sm_count, int split,
                                         cudaStream_t stream) {
    if (t != KILN_DTYPE_FLOAT16 && t != KILN_DTYPE_BFLOAT16) return cudaErrorNotSupported;
    if (g->D <= 0 || g->D > 128 || g->Dv <= 0 || g->Dv > 128) return cudaErrorNotSupported;
    if (g->B * g->H * ((g->Sq + 31) / 32) > INT32_MAX) return cudaErrorNotSupported;
    /* offsets inside a tile and along the keys are 32-bit */
    const int64_t lim = INT32_MAX / 128;
    if (g->qs[2] > lim || g->ks[2] > lim || g->vs[2] > lim || g->cs[3] > lim || g->ms[3] > lim ||
        g->bs[3] > lim)
        return cudaErrorNotSupported;
    if (g->B * g->H * g->Sq <= 0) return cudaSuccess;
    if (t == KILN_DTYPE_FLOAT16) return launch_t<__half>(g, q, k, v, mask, cond, bias, o, sm_count, split, stream);
    return launch_t<__nv_bfloat16>(g, q, k, v, mask, cond, bias, o, sm_count, split, stream);
}

extern "C" cudaError_t kcu_attention_fa(kiln_dtype t, const kcu_attn *g, const void *q, const void *k,
                                        const void *v, const void *mask, const uint8_t *cond, const void *bias,
                                        void *o, int rows, cudaStream_t stream) {
    if (t != KILN_DTYPE_FLOAT16 && t != KILN_DTYPE_BFLOAT16) return cudaErrorNotSupported;
    if (rows != 64 && rows != 128) return cudaErrorNotSupported;
    if (g->D <= 0 || g->D > 128 || g->Dv <= 0 || g->Dv > 128) return cudaErrorNotSupported;
    if (g->B * g->H * ((g->Sq + rows - 1) / rows) > INT32_MAX) return cudaErrorNotSupported;
    /* offsets inside a Q, K or V tile are 32-bit (load_tile) */
    const int64_t lim = INT32_MAX / 128;
    if (g->qs[2] > lim || g->ks[2] > lim || g->vs[2] > lim) return cudaErrorNotSupported;
    if (g->B * g->H * g->Sq <= 0) return cudaSuccess;
    const int64_t dmax = g->D > g->Dv ? g->D : g->Dv;
    if (t == KILN_DTYPE_FLOAT16)
        return dmax <= 64 ? launch_fa_nw<__half, 64>(g, q, k, v, mask, cond, bias, o, rows, stream)
                          : launch_fa_nw<__half, 128>(g, q, k, v, mask, cond, bias, o, rows, stream);
    return dmax <= 64 ? launch_fa_nw<__nv_bfloat16, 64>(g, q, k, v, mask, cond, bias, o, rows, stream)
                      : launch_fa_nw<__nv_bfloat16, 128>(g, q, k, v, mask, cond, bias, o, rows, stream);
}

/* ---- a bool cond as an additive mask (cuDNN's fused attention takes masks as additions) ---- */

namespace {
template <typename T>
__global__ void k_cond_to_add(const uint8_t *__restrict__ cond, int64_t n, uint8_t fill_if, float fill,
                              T *__restrict__ out) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = Num<T>::store((cond[i] != 0) == (fill_if != 0) ? fill : 0.0f);
}
} // namespace

extern "C" cudaError_t kcu_attn_cond_add(kiln_dtype t, const uint8_t *cond, int64_t n, int fill_if, float fill,
                                         void *out, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (t == KILN_DTYPE_FLOAT16)
        k_cond_to_add<__half><<<grid_for(n), KCU_THREADS, 0, stream>>>(cond, n, (uint8_t)fill_if, fill, (__half *)out);
    else if (t == KILN_DTYPE_BFLOAT16)
        k_cond_to_add<__nv_bfloat16>
            <<<grid_for(n), KCU_THREADS, 0, stream>>>(cond, n, (uint8_t)fill_if, fill, (__nv_bfloat16 *)out);
    else
        return cudaErrorNotSupported;
    return cudaGetLastError();
}
