/* k_dwconv.cu -- depthwise convolution over channels-last (NHWC) tensors,
 * with the bias, residual and activation of kiln.FusedConv in the same
 * pass (kcu_dwconv_nhwc, cuda_kernels.h). fp32 accumulation, one rounding.
 *
 * The layer moves little data per multiply (k*k multiply-adds per output
 * element), so it is bound by memory: the kernels read each input vector
 * once per kernel row of a tile (neighbouring rows come from L1/L2) and
 * write each output once, 16 bytes (8 fp16/bf16 channels) at a time. */
#include "k_common.cuh"
#include "k_act.cuh"
#include "k_dwconv.h"

#include <limits.h>

using namespace kcu;

namespace {

/* 8 fp16/bf16 values of a 16-byte vector <-> fp32 */
template <typename T> __device__ __forceinline__ void unpack8(const uint4 &u, float *f) {
    const T *e = reinterpret_cast<const T *>(&u);
#pragma unroll
    for (int k = 0; k < 8; k++) f[k] = Num<T>::load(e[k]);
}

template <typename T> __device__ __forceinline__ uint4 pack8(const float *f) {
    uint4 u;
    T *e = reinterpret_cast<T *>(&u);
#pragma unroll
    for (int k = 0; k < 8; k++) e[k] = Num<T>::store(f[k]);
    return u;
}

/* the bias of channels c0..c0+7 (0 without one) */
template <typename T> __device__ __forceinline__ void bias8(const T *__restrict__ bias, int64_t c0, float *bf) {
    if (bias) {
        unpack8<T>(__ldg(reinterpret_cast<const uint4 *>(bias + c0)), bf);
        return;
    }
#pragma unroll
    for (int k = 0; k < 8; k++) bf[k] = 0.0f;
}

/* bias + residual + activation of 8 channels at output element offset o
 * (a multiple of 8), then the store */
template <typename T>
__device__ __forceinline__ void dw_store8(const kcu_dw_nhwc &g, float *v, const float *bf, const T *__restrict__ r,
                                          T *__restrict__ y, int64_t o) {
    float rf[8];
    if (r) unpack8<T>(__ldg(reinterpret_cast<const uint4 *>(r + o)), rf);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        float a = v[k] + bf[k];
        if (r) a += rf[k];
        v[k] = act_apply<float>(g.act, g.alpha, g.beta, a);
    }
    *reinterpret_cast<uint4 *>(y + o) = pack8<T>(v);
}

/* KH x KW kernel (3, 5 or 7: MobileNet's, EfficientNet's, ConvNeXt's),
 * stride S in both dims, no dilation: a thread per (n, ho,
 * tile of TW outputs along W, 8 channels), channels fastest across the
 * threads (a warp reads 512 contiguous bytes of a pixel where C >= 256).
 * Per kernel row the tile's (TW - 1) S + KW input vectors are loaded once
 * and used by every output of the tile. Index math in 32 bits (the
 * launcher checks that the element offsets fit where it must). */
template <typename T, int KH, int KW, int S, int TW>
__global__ void __launch_bounds__(KCU_THREADS)
    k_dw_nhwc_tile(const __grid_constant__ kcu_dw_nhwc g, const T *__restrict__ x, const T *__restrict__ wt,
                   const T *__restrict__ bias, const T *__restrict__ r, T *__restrict__ y, uint32_t CG,
                   uint32_t WT, uint32_t total) {
    constexpr int NX = (TW - 1) * S + KW;
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const uint32_t cg = i % CG;
    uint32_t rest = i / CG;
    const uint32_t tw = rest % WT;
    rest /= WT;
    const int Ho = (int)g.Ho, Wo = (int)g.Wo, H = (int)g.H, W = (int)g.W;
    const int ho = (int)(rest % (uint32_t)Ho);
    const int64_t n = (int64_t)(rest / (uint32_t)Ho);
    const int64_t C = g.C;
    const int c0 = (int)cg * 8;
    const int wo0 = (int)tw * TW;
    const int iw0 = wo0 * S - (int)g.pw, ih0 = ho * S - (int)g.ph;
    float acc[TW][8];
#pragma unroll
    for (int t = 0; t < TW; t++)
#pragma unroll
        for (int k = 0; k < 8; k++) acc[t][k] = 0.0f;
    const uint4 *wv = reinterpret_cast<const uint4 *>(wt + c0);
    const int64_t wstep = C / 8; /* vectors per tap */
#pragma unroll
    for (int kh = 0; kh < KH; kh++) {
        const int ih = ih0 + kh;
        if (ih < 0 || ih >= H) continue; /* zero padding: the row adds nothing */
        const T *xrow = x + ((n * H + ih) * W) * C + c0;
        uint4 xr[NX];
#pragma unroll
        for (int j = 0; j < NX; j++) {
            const int iw = iw0 + j;
            xr[j] = (iw >= 0 && iw < W) ? __ldg(reinterpret_cast<const uint4 *>(xrow + (int64_t)iw * C))
                                        : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int kw = 0; kw < KW; kw++) {
            float wf[8];
            unpack8<T>(__ldg(wv + (kh * KW + kw) * wstep), wf);
#pragma unroll
            for (int t = 0; t < TW; t++) {
                float xf[8];
                unpack8<T>(xr[t * S + kw], xf);
#pragma unroll
                for (int k = 0; k < 8; k++) acc[t][k] = fmaf(xf[k], wf[k], acc[t][k]);
            }
        }
    }
    float bf[8];
    bias8<T>(bias, c0, bf);
#pragma unroll
    for (int t = 0; t < TW; t++) {
        const int wo = wo0 + t;
        if (wo >= Wo) break;
        dw_store8<T>(g, acc[t], bf, r, y, ((n * Ho + ho) * Wo + wo) * C + c0);
    }
}

/* Calls f(px, tap) for every tap of output pixel (n, ho, wo) that falls
 * inside x: px = the input pixel (n H + ih) W + iw, tap = kh * kw + kw. */
template <typename F>
__device__ __forceinline__ void for_taps(const kcu_dw_nhwc &g, int64_t n, int64_t ho, int64_t wo, F f) {
    for (int64_t kh = 0; kh < g.kh; kh++) {
        const int64_t ih = ho * g.sh - g.ph + kh * g.dh;
        if (ih < 0 || ih >= g.H) continue;
        for (int64_t kw = 0; kw < g.kw; kw++) {
            const int64_t iw = wo * g.sw - g.pw + kw * g.dw;
            if (iw >= 0 && iw < g.W) f((n * g.H + ih) * g.W + iw, kh * g.kw + kw);
        }
    }
}

/* Any kernel size, stride, dilation and padding, 8 channels per thread:
 * a thread per (n, ho, wo, 8 channels). */
template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_dw_nhwc_vec(const __grid_constant__ kcu_dw_nhwc g, const T *__restrict__ x, const T *__restrict__ wt,
                  const T *__restrict__ bias, const T *__restrict__ r, T *__restrict__ y, int64_t total) {
    const int64_t CG = g.C / 8;
    KCU_GRID_STRIDE(i, total) {
        const int64_t cg = i % CG, p = i / CG, wo = p % g.Wo, q = p / g.Wo, ho = q % g.Ho, n = q / g.Ho;
        const int64_t c0 = cg * 8;
        float acc[8];
#pragma unroll
        for (int k = 0; k < 8; k++) acc[k] = 0.0f;
        for_taps(g, n, ho, wo, [&](int64_t px, int64_t tap) {
            float xf[8], wf[8];
            unpack8<T>(__ldg(reinterpret_cast<const uint4 *>(x + px * g.C + c0)), xf);
            unpack8<T>(__ldg(reinterpret_cast<const uint4 *>(wt + tap * g.C + c0)), wf);
#pragma unroll
            for (int k = 0; k < 8; k++) acc[k] = fmaf(xf[k], wf[k], acc[k]);
        });
        float bf[8];
        bias8<T>(bias, c0, bf);
        dw_store8<T>(g, acc, bf, r, y, i * 8);
    }
}

/* Every float dtype, any channel count and alignment: a thread per output
 * element, channels fastest (Num<T>::C arithmetic: fp32, fp64 for f64). */
template <typename T>
__global__ void k_dw_nhwc_scalar(const __grid_constant__ kcu_dw_nhwc g, const T *__restrict__ x,
                                 const T *__restrict__ wt, const T *__restrict__ bias, const T *__restrict__ r,
                                 T *__restrict__ y, int64_t total) {
    typedef typename Num<T>::C A;
    KCU_GRID_STRIDE(i, total) {
        const int64_t c = i % g.C, p = i / g.C, wo = p % g.Wo, q = p / g.Wo, ho = q % g.Ho, n = q / g.Ho;
        A acc = A(0);
        for_taps(g, n, ho, wo, [&](int64_t px, int64_t tap) {
            acc += Num<T>::load(x[px * g.C + c]) * Num<T>::load(wt[tap * g.C + c]);
        });
        if (bias) acc += Num<T>::load(bias[c]);
        if (r) acc += Num<T>::load(r[i]);
        y[i] = Num<T>::store(act_apply<A>(g.act, (A)g.alpha, (A)g.beta, acc));
    }
}

static bool aligned16(const void *p) { return p == NULL || ((uintptr_t)p & 15) == 0; }

/* The tiled kernel for one (KH = KW = K, S): TW outputs per thread, or 1
 * where the tiles would leave the GPU with too few threads (batch 1, late
 * layers). */
template <typename T, int K, int S>
static cudaError_t dw_tile_launch(const kcu_dw_nhwc *g, const T *x, const T *wt, const T *b, const T *r, T *y,
                                  cudaStream_t stream) {
    constexpr int TW = S == 1 ? 4 : 2;
    const int64_t CG = g->C / 8, base = g->N * g->Ho * CG;
    int64_t WT = (g->Wo + TW - 1) / TW;
    const bool wide = base * WT >= 65536; /* enough threads with the tiles */
    if (!wide) WT = g->Wo;
    const int64_t total = base * WT;
    if (total > INT32_MAX) return cudaErrorInvalidValue; /* the caller checked */
    /* few threads (batch 1, late layers: ConvNeXt's last 7x7 layers have 4704
     * at batch 1): blocks of 64, which spread over 4x the SMs */
    const int threads = total < 32768 ? 64 : KCU_THREADS;
    const unsigned blocks = (unsigned)((total + threads - 1) / threads);
    if (wide)
        k_dw_nhwc_tile<T, K, K, S, TW><<<blocks, threads, 0, stream>>>(*g, x, wt, b, r, y, (uint32_t)CG,
                                                                       (uint32_t)WT, (uint32_t)total);
    else
        k_dw_nhwc_tile<T, K, K, S, 1><<<blocks, threads, 0, stream>>>(*g, x, wt, b, r, y, (uint32_t)CG,
                                                                      (uint32_t)WT, (uint32_t)total);
    return cudaGetLastError();
}

template <typename T>
static cudaError_t dw_vec_launch(const kcu_dw_nhwc *g, const void *xv, const void *wv, const void *bv,
                                 const void *rv, void *yv, cudaStream_t stream) {
    const T *x = (const T *)xv, *wt = (const T *)wv, *b = (const T *)bv, *r = (const T *)rv;
    T *y = (T *)yv;
    /* the tiled kernels index rows and columns in int: sizes that fit */
    const bool fits = g->H < INT_MAX / 4 && g->W < INT_MAX / 4 && g->Ho < INT_MAX && g->Wo < INT_MAX &&
                      g->ph < INT_MAX / 4 && g->pw < INT_MAX / 4 && g->N * g->Ho * g->Wo * (g->C / 8) < INT32_MAX;
    const bool square = g->kh == g->kw && g->sh == g->sw && g->dh == 1 && g->dw == 1;
    if (fits && square && (g->sh == 1 || g->sh == 2) && (g->kh == 3 || g->kh == 5 || g->kh == 7)) {
        if (g->kh == 3) return g->sh == 1 ? dw_tile_launch<T, 3, 1>(g, x, wt, b, r, y, stream)
                                          : dw_tile_launch<T, 3, 2>(g, x, wt, b, r, y, stream);
        if (g->kh == 5) return g->sh == 1 ? dw_tile_launch<T, 5, 1>(g, x, wt, b, r, y, stream)
                                          : dw_tile_launch<T, 5, 2>(g, x, wt, b, r, y, stream);
        return g->sh == 1 ? dw_tile_launch<T, 7, 1>(g, x, wt, b, r, y, stream)
                          : dw_tile_launch<T, 7, 2>(g, x, wt, b, r, y, stream);
    }
    const int64_t total = g->N * g->Ho * g->Wo * (g->C / 8);
    k_dw_nhwc_vec<T><<<grid_for(total), KCU_THREADS, 0, stream>>>(*g, x, wt, b, r, y, total);
    return cudaGetLastError();
}

/* ---- NCHW ---------------------------------------------------------------------- */

/* NCHW depthwise: a block of 256 threads per (image, channel, tile of TY x
 * TX outputs), TX = 1 << tx_log2 (32, 16 or 8 as the output is wide) and
 * TY = 256 / TX. The block stages the tile's input window (zero padding
 * included) and the channel's kh x kw weights in shared memory as the
 * accumulation type, once; then each thread computes one output from there
 * (no bounds tests in the tap loop). Index math in 32 bits (the launcher
 * checks that the sizes fit). */
template <typename T>
__global__ void __launch_bounds__(KCU_DW_NCHW_THREADS)
    k_dw_nchw(const __grid_constant__ kcu_dw_nhwc g, const T *__restrict__ x, const T *__restrict__ w,
              const T *__restrict__ bias, const T *__restrict__ r, T *__restrict__ y, int tx_log2,
              uint32_t tiles_w, uint32_t tiles_h) {
    typedef typename Num<T>::C A;
    extern __shared__ __align__(16) unsigned char dw_smem[];
    A *ws = reinterpret_cast<A *>(dw_smem);
    const int kh = (int)g.kh, kw = (int)g.kw, sh = (int)g.sh, sw = (int)g.sw, dh = (int)g.dh, dw = (int)g.dw;
    const int H = (int)g.H, W = (int)g.W, Ho = (int)g.Ho, Wo = (int)g.Wo, C = (int)g.C;
    const int TX = 1 << tx_log2, TY = KCU_DW_NCHW_THREADS >> tx_log2;
    const int IH = (TY - 1) * sh + (kh - 1) * dh + 1, IW = (TX - 1) * sw + (kw - 1) * dw + 1;
    A *xs = ws + kh * kw;
    uint32_t b = blockIdx.x;
    const int tw = (int)(b % tiles_w);
    b /= tiles_w;
    const int th = (int)(b % tiles_h);
    const uint32_t plane = b / tiles_h; /* n C + c */
    const int c = (int)(plane % (uint32_t)C);
    const int ho0 = th * TY, wo0 = tw * TX, ih0 = ho0 * sh - (int)g.ph, iw0 = wo0 * sw - (int)g.pw;
    const T *xp = x + (size_t)plane * (size_t)H * (size_t)W;
    for (int i = threadIdx.x; i < kh * kw; i += KCU_DW_NCHW_THREADS) ws[i] = Num<T>::load(w[c * kh * kw + i]);
    for (int i = threadIdx.x; i < IH * IW; i += KCU_DW_NCHW_THREADS) {
        const int ih = ih0 + i / IW, iw = iw0 + i % IW;
        xs[i] = ih >= 0 && ih < H && iw >= 0 && iw < W ? Num<T>::load(xp[ih * W + iw]) : A(0);
    }
    __syncthreads();
    const int lx = threadIdx.x & (TX - 1), ly = threadIdx.x >> tx_log2;
    const int ho = ho0 + ly, wo = wo0 + lx;
    if (ho >= Ho || wo >= Wo) return;
    const A *xr = xs + ly * sh * IW + lx * sw;
    A acc = A(0);
    for (int i = 0; i < kh; i++)
        for (int j = 0; j < kw; j++) acc += xr[i * dh * IW + j * dw] * ws[i * kw + j];
    const size_t o = ((size_t)plane * (size_t)Ho + (size_t)ho) * (size_t)Wo + (size_t)wo;
    if (bias) acc += Num<T>::load(bias[c]);
    if (r) acc += Num<T>::load(r[o]);
    y[o] = Num<T>::store(act_apply<A>(g.act, (A)g.alpha, (A)g.beta, acc));
}

} // namespace

extern "C" {

cudaError_t kcu_dwconv_nchw(kiln_dtype t, const kcu_dw_nhwc *g, const void *x, const void *w, const void *bias,
                            const void *r, void *y, cudaStream_t stream) {
    if (g->N * g->Ho * g->Wo * g->C <= 0) return cudaSuccess;
    int tx_log2 = 0;
    int64_t blocks = 0;
    size_t smem = 0;
    if (g->act >= KILN_FC_ACT_COUNT || !kcu_dw_nchw_tile(t, g, &tx_log2, &blocks, &smem)) return cudaErrorInvalidValue;
    const int64_t TX = (int64_t)1 << tx_log2, TY = KCU_DW_NCHW_THREADS / TX;
    const uint32_t tiles_w = (uint32_t)((g->Wo + TX - 1) / TX), tiles_h = (uint32_t)((g->Ho + TY - 1) / TY);
    cudaError_t e = cudaErrorInvalidValue;
    KCU_SWITCH_FLOAT(t, {
        k_dw_nchw<T_><<<(unsigned)blocks, KCU_DW_NCHW_THREADS, smem, stream>>>(
            *g, (const T_ *)x, (const T_ *)w, (const T_ *)bias, (const T_ *)r, (T_ *)y, tx_log2, tiles_w, tiles_h);
        e = cudaGetLastError();
    })
    return e;
}

cudaError_t kcu_dwconv_nhwc(kiln_dtype t, const kcu_dw_nhwc *g, const void *x, const void *wt, const void *bias,
                            const void *r, void *y, cudaStream_t stream) {
    const int64_t total = g->N * g->Ho * g->Wo * g->C;
    if (total <= 0) return cudaSuccess;
    if (g->kh < 1 || g->kw < 1 || g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->act >= KILN_FC_ACT_COUNT)
        return cudaErrorInvalidValue;
    const bool vec = g->C % 8 == 0 && aligned16(x) && aligned16(wt) && aligned16(bias) && aligned16(r) &&
                     aligned16(y);
    if (vec && t == KILN_DTYPE_FLOAT16) return dw_vec_launch<__half>(g, x, wt, bias, r, y, stream);
    if (vec && t == KILN_DTYPE_BFLOAT16) return dw_vec_launch<__nv_bfloat16>(g, x, wt, bias, r, y, stream);
    cudaError_t e = cudaErrorInvalidValue;
    KCU_SWITCH_FLOAT(t, {
        k_dw_nhwc_scalar<T_><<<grid_for(total), KCU_THREADS, 0, stream>>>(
            *g, (const T_ *)x, (const T_ *)wt, (const T_ *)bias, (const T_ *)r, (T_ *)y, total);
        e = cudaGetLastError();
    })
    return e;
}

} /* extern "C" */
