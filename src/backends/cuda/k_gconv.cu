/* k_gconv.cu -- grouped convolution over channels-last (NHWC) tensors on
 * tensor cores, with the bias, residual and activation of kiln.FusedConv in
 * the same pass (kcu_gconv_nhwc, k_gconv.h).
 *
 * Each group is an implicit GEMM: rows the N Ho Wo output pixels, columns
 * the group's Mg output channels, K the kh kw Cg (tap, input channel)
 * pairs in the weights' order [tap][channel], walked 8 channels (16 bytes)
 * at a time: a chunk never crosses a tap because Cg is a multiple of 8, so
 * groups of 24 (RegNet) waste no K. A block of 4 warps computes BM pixels
 * (64 or 128: 16 or 32 rows a warp) by BN = 8 NT channels of one group; per
 * step of 32 K values it copies the pixels' input chunks (zero past the
 * image, the pixels and K) and the weights' into shared memory by cp.async,
 * GC_STAGES steps ahead (a 3x3 layer of 24 channels a group has only 7
 * steps: the copies' latency, not the math, bounds a block), and each warp
 * multiplies them with mma.sync m16n8k16
 * (fragments by ldmatrix; rows 80 bytes apart: no bank conflicts). The
 * epilogue adds the bias and the residual to the fp32 accumulators, applies
 * the activation and rounds once. */
#include "k_common.cuh"
#include "k_act.cuh"
#include "k_gconv.h"
#include "k_mma.cuh"

using namespace kcu;

namespace {

#define GC_THREADS 128
#define GC_BK 32  /* K values per step: 4 chunks of 8 */
#define GC_LDS 40 /* shared row stride in elements (80 bytes) */
#define GC_STAGES 3 /* shared buffers: steps in flight + the one computed (38 KiB at most) */

template <typename T, int BM, int NT>
__global__ void __launch_bounds__(GC_THREADS)
    k_gconv_tc(const __grid_constant__ kcu_gc_nhwc g, const T *__restrict__ x, const T *__restrict__ wt,
               const T *__restrict__ bias, const T *__restrict__ r, T *__restrict__ y, int nchunks, int64_t P) {
    constexpr int BN = 8 * NT, WM = BM / 64; /* m16 tiles per warp */
    constexpr int CPT = BM / 32, TPR = 4 / CPT; /* A chunks per thread, threads per row */
    __shared__ __align__(16) T sa[GC_STAGES][BM * GC_LDS];
    __shared__ __align__(16) T sb[GC_STAGES][BN * GC_LDS];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int64_t grp = blockIdx.z, m0 = (int64_t)blockIdx.y * BN, p0 = (int64_t)blockIdx.x * BM;
    const int64_t C = g.G * g.Cg, M = g.G * g.Mg;
    const int cgc = (int)(g.Cg / 8), kw = (int)g.kw;

    /* this thread's A row (an output pixel) and chunks */
    const int arow = tid / TPR, ach = (tid % TPR) * CPT;
    const int64_t pa = p0 + arow;
    const bool pvalid = pa < P;
    int64_t n = 0, ho = 0, wo = 0;
    if (pvalid) {
        wo = pa % g.Wo;
        const int64_t q = pa / g.Wo;
        ho = q % g.Ho;
        n = q / g.Ho;
    }
    const int64_t hi0 = ho * g.sh - g.ph, wi0 = wo * g.sw - g.pw;
    const T *xg = x + n * g.H * g.W * C + grp * g.Cg;
    /* this thread's B row (an output channel of the group) and chunk */
    const int brow = tid >> 2, bch = tid & 3;
    const bool bload = brow < BN;
    const T *wg = wt + (grp * g.Mg + m0 + (bload ? brow : 0)) * (int64_t)nchunks * 8;

    auto load = [&](int stage, int kt) {
#pragma unroll
        for (int i = 0; i < CPT; i++) {
            const int j = kt * 4 + ach + i;
            const void *src = x;
            int bytes = 0;
            if (pvalid && j < nchunks) {
                const int tap = j / cgc, c8 = j - tap * cgc, ti = tap / kw, tj = tap - ti * kw;
                const int64_t hi = hi0 + ti * g.dh, wi = wi0 + tj * g.dw;
                if (hi >= 0 && hi < g.H && wi >= 0 && wi < g.W) {
                    src = xg + (hi * g.W + wi) * C + c8 * 8;
                    bytes = 16;
                }
            }
            cp_async16(&sa[stage][arow * GC_LDS + (ach + i) * 8], src, bytes);
        }
        if (bload) {
            const int j = kt * 4 + bch;
            cp_async16(&sb[stage][brow * GC_LDS + bch * 8], j < nchunks ? (const void *)(wg + j * 8) : (const void *)wt,
                       j < nchunks ? 16 : 0);
        }
    };

    float acc[WM][NT][4];
#pragma unroll
    for (int a = 0; a < WM; a++)
#pragma unroll
        for (int b = 0; b < NT; b++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[a][b][c] = 0.0f;

    /* one commit group per step (empty past the end): step kt is group kt */
    const int KT = (nchunks + 3) / 4;
#pragma unroll
    for (int st = 0; st < GC_STAGES - 1; st++) {
        if (st < KT) load(st, st);
        cp_async_commit();
    }
    for (int kt = 0; kt < KT; kt++) {
        cp_async_wait<GC_STAGES - 2>(); /* this thread's copies of step kt are done */
        __syncthreads();                /* everyone's are; and everyone is past step kt - 1's math */
        if (kt + GC_STAGES - 1 < KT) load((kt + GC_STAGES - 1) % GC_STAGES, kt + GC_STAGES - 1);
        cp_async_commit();
        const T *A = sa[kt % GC_STAGES], *B = sb[kt % GC_STAGES];
#pragma unroll
        for (int k16 = 0; k16 < GC_BK / 16; k16++) {
            uint32_t af[WM][4];
#pragma unroll
            for (int mt = 0; mt < WM; mt++)
                ldsm_x4(af[mt], A + (warp * 16 * WM + mt * 16 + (lane & 15)) * GC_LDS + k16 * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                uint32_t bf[2];
                ldsm_x2(bf, B + (nt * 8 + (lane & 7)) * GC_LDS + k16 * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
                for (int mt = 0; mt < WM; mt++) MmaType<T>::mma(acc[mt][nt], af[mt], bf[0], bf[1]);
            }
        }
    }
    cp_async_wait<0>(); /* (only empty groups are left) */

    /* epilogue: accumulator (row lane / 4 (+ 8), columns 2 (lane % 4) + {0, 1}) */
#pragma unroll
    for (int mt = 0; mt < WM; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t p = p0 + warp * 16 * WM + mt * 16 + (lane >> 2) + h * 8;
            if (p >= P) continue;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const int64_t ch = grp * g.Mg + m0 + nt * 8 + (lane & 3) * 2, o = p * M + ch;
                float v0 = acc[mt][nt][h * 2], v1 = acc[mt][nt][h * 2 + 1];
                if (bias) {
                    v0 += Num<T>::load(bias[ch]);
                    v1 += Num<T>::load(bias[ch + 1]);
                }
                if (r) {
                    v0 += Num<T>::load(r[o]);
                    v1 += Num<T>::load(r[o + 1]);
                }
                T out[2] = {Num<T>::store(act_apply<float>(g.act, g.alpha, g.beta, v0)),
                            Num<T>::store(act_apply<float>(g.act, g.alpha, g.beta, v1))};
                *reinterpret_cast<uint32_t *>(y + o) = *reinterpret_cast<const uint32_t *>(out);
            }
        }
}

/* Every float dtype, any group width and alignment: a thread per output
 * element, channels fastest (Num<T>::C arithmetic: fp32, fp64 for f64). */
template <typename T>
__global__ void k_gconv_scalar(const __grid_constant__ kcu_gc_nhwc g, const T *__restrict__ x,
                               const T *__restrict__ wt, const T *__restrict__ bias, const T *__restrict__ r,
                               T *__restrict__ y, int64_t total) {
    typedef typename Num<T>::C A;
    const int64_t C = g.G * g.Cg, M = g.G * g.Mg;
    KCU_GRID_STRIDE(i, total) {
        const int64_t m = i % M, p = i / M, wo = p % g.Wo, q = p / g.Wo, ho = q % g.Ho, n = q / g.Ho;
        const int64_t c0 = (m / g.Mg) * g.Cg;
        const T *wm = wt + m * g.kh * g.kw * g.Cg;
        A acc = A(0);
        for (int64_t i0 = 0; i0 < g.kh; i0++) {
            const int64_t hi = ho * g.sh - g.ph + i0 * g.dh;
            if (hi < 0 || hi >= g.H) continue;
            for (int64_t j0 = 0; j0 < g.kw; j0++) {
                const int64_t wi = wo * g.sw - g.pw + j0 * g.dw;
                if (wi < 0 || wi >= g.W) continue;
                const T *xp = x + ((n * g.H + hi) * g.W + wi) * C + c0, *wp = wm + (i0 * g.kw + j0) * g.Cg;
                for (int64_t c = 0; c < g.Cg; c++) acc += Num<T>::load(xp[c]) * Num<T>::load(wp[c]);
            }
        }
        if (bias) acc += Num<T>::load(bias[m]);
        if (r) acc += Num<T>::load(r[i]);
        y[i] = Num<T>::store(act_apply<A>(g.act, (A)g.alpha, (A)g.beta, acc));
    }
}

static bool aligned(const void *p, uintptr_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

/* Output channels per block: the largest of 32, 24, 16, 8 that divides Mg */
static int gc_nt(int64_t Mg) { return Mg % 32 == 0 ? 4 : Mg % 24 == 0 ? 3 : Mg % 16 == 0 ? 2 : 1; }

template <typename T, int BM, int NT>
static cudaError_t gc_launch(const kcu_gc_nhwc *g, const T *x, const T *wt, const T *b, const T *r, T *y,
                             int64_t P, cudaStream_t stream) {
    const int nchunks = (int)(g->kh * g->kw * g->Cg / 8);
    dim3 grid((unsigned)((P + BM - 1) / BM), (unsigned)(g->Mg / (8 * NT)), (unsigned)g->G);
    if (grid.y > 65535) return cudaErrorInvalidValue;
    k_gconv_tc<T, BM, NT><<<grid, GC_THREADS, 0, stream>>>(*g, x, wt, b, r, y, nchunks, P);
    return cudaGetLastError();
}

template <typename T, int BM>
static cudaError_t gc_launch_nt(const kcu_gc_nhwc *g, const void *x, const void *wt, const void *b, const void *r,
                                void *y, int64_t P, cudaStream_t stream) {
    const T *xt = (const T *)x, *wtt = (const T *)wt, *bt = (const T *)b, *rt = (const T *)r;
    switch (gc_nt(g->Mg)) {
    case 4: return gc_launch<T, BM, 4>(g, xt, wtt, bt, rt, (T *)y, P, stream);
    case 3: return gc_launch<T, BM, 3>(g, xt, wtt, bt, rt, (T *)y, P, stream);
    case 2: return gc_launch<T, BM, 2>(g, xt, wtt, bt, rt, (T *)y, P, stream);
    default: return gc_launch<T, BM, 1>(g, xt, wtt, bt, rt, (T *)y, P, stream);
    }
}

template <typename T>
static cudaError_t gc_tc(const kcu_gc_nhwc *g, const void *x, const void *wt, const void *b, const void *r, void *y,
                         cudaStream_t stream) {
    const int64_t P = g->N * g->Ho * g->Wo;
    int bm = g->bm;
    if (bm == 0) { /* 128 pixels a block where that still gives every SM two blocks (H100: 132) */
        const int64_t blocks128 = (P + 127) / 128 * (g->Mg / (8 * gc_nt(g->Mg))) * g->G;
        bm = blocks128 >= 264 ? 128 : 64;
    }
    return bm == 128 ? gc_launch_nt<T, 128>(g, x, wt, b, r, y, P, stream)
                     : gc_launch_nt<T, 64>(g, x, wt, b, r, y, P, stream);
}

} // namespace

extern "C" {

cudaError_t kcu_gconv_nhwc(kiln_dtype t, const kcu_gc_nhwc *g, const void *x, const void *wt, const void *bias,
                           const void *r, void *y, cudaStream_t stream) {
    const int64_t total = g->N * g->Ho * g->Wo * g->G * g->Mg;
    if (total <= 0) return cudaSuccess;
    if (g->kh < 1 || g->kw < 1 || g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->Cg < 1 || g->Mg < 1 ||
        g->act < 0 || g->act >= KILN_FC_ACT_COUNT)
        return cudaErrorInvalidValue;
    /* (x and the weights by 16-byte copies, y by pairs of channels; bias and r element by element) */
    const bool tc = kcu_gconv_tc_ok(t, g) && aligned(x, 16) && aligned(wt, 16) && aligned(y, 4);
    if (tc && t == KILN_DTYPE_FLOAT16) return gc_tc<__half>(g, x, wt, bias, r, y, stream);
    if (tc && t == KILN_DTYPE_BFLOAT16) return gc_tc<__nv_bfloat16>(g, x, wt, bias, r, y, stream);
    cudaError_t e = cudaErrorInvalidValue;
    KCU_SWITCH_FLOAT(t, {
        k_gconv_scalar<T_><<<grid_for(total), KCU_THREADS, 0, stream>>>(
            *g, (const T_ *)x, (const T_ *)wt, (const T_ *)bias, (const T_ *)r, (T_ *)y, total);
        e = cudaGetLastError();
    })
    return e;
}

} /* extern "C" */
