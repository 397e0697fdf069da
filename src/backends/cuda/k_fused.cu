/* k_fused.cu -- epilogues of fused layers: per-channel bias, residual
 * addition and activation applied in one pass over a convolution's output
 * (kiln.FusedConv). fp32 arithmetic for fp16/bf16, one rounding. */
#include "k_common.cuh"
#include "k_act.cuh"

using namespace kcu;

namespace {

template <typename C> __device__ __forceinline__ C gelu_apply(int act, C x) {
    if (act == KCU_ACT_GELU_ERF) return x * C(0.5) * (C(1) + m_erf(x * C(0.70710678118654752440)));
    C u = C(0.79788456080286535588) * (x + C(0.044715) * x * x * x);
    return C(0.5) * x * (C(1) + m_tanh(u));
}

/* y[p, i] = act(x[p, i] + bias[p % M] + r[p, i]) over planes p of `plane` elements */
template <typename T, typename I>
__global__ void k_bias_act(const T *x, T *y, const T *__restrict__ bias, const T *__restrict__ r,
                           I total, I M, I plane, int act, float alpha, float beta) {
    typedef typename Num<T>::C C;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)blockDim.x * gridDim.x) {
        C v = Num<T>::load(x[i]);
        if (bias) v += Num<T>::load(bias[(i / plane) % M]);
        if (r) v += Num<T>::load(r[i]);
        if (act >= KCU_ACT_GELU_ERF) v = gelu_apply<C>(act, v);
        else v = act_apply<C>(act, (C)alpha, (C)beta, v);
        y[i] = Num<T>::store(v);
    }
}

/* The same for fp16/bf16 rows of M = 8k elements (plane 1, 16-byte aligned):
 * 8 elements per thread with 16-byte loads and stores. */
template <typename T>
__global__ void k_bias_act_vec(const T *x, T *y, const T *__restrict__ bias, const T *__restrict__ r,
                               int64_t total8, int64_t M8, int act, float alpha, float beta) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total8;
         i += (int64_t)blockDim.x * gridDim.x) {
        uint4 xu = reinterpret_cast<const uint4 *>(x)[i], bu = make_uint4(0, 0, 0, 0), ru = bu, o;
        if (bias) bu = reinterpret_cast<const uint4 *>(bias)[i % M8];
        if (r) ru = reinterpret_cast<const uint4 *>(r)[i];
        const T *xe = reinterpret_cast<const T *>(&xu), *be = reinterpret_cast<const T *>(&bu);
        const T *re = reinterpret_cast<const T *>(&ru);
        T *oe = reinterpret_cast<T *>(&o);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float v = Num<T>::load(xe[k]);
            if (bias) v += Num<T>::load(be[k]);
            if (r) v += Num<T>::load(re[k]);
            if (act >= KCU_ACT_GELU_ERF) v = gelu_apply<float>(act, v);
            else v = act_apply<float>(act, alpha, beta, v);
            oe[k] = Num<T>::store(v);
        }
        reinterpret_cast<uint4 *>(y)[i] = o;
    }
}

#define ATT_TILE 32 /* keys per shared-memory tile */
#define ATT_ROWS KCU_ATTN_ROWS /* query rows (threads) per block */

/* One thread per query row: scores against a tile of keys in shared
 * memory, online softmax (running max and sum), fp32 accumulation. Block
 * (b H + h) chunks + c takes rows c ATT_ROWS.. of (b, h) (kcu_attention_grid). */
template <typename T, int DM>
__global__ void __launch_bounds__(ATT_ROWS)
    k_attention(const __grid_constant__ kcu_attn g, const T *__restrict__ q,
                const T *__restrict__ k, const T *__restrict__ v, const T *__restrict__ mask,
                const uint8_t *__restrict__ cond, const T *__restrict__ bias, T *__restrict__ o) {
    __shared__ float ksh[ATT_TILE][DM];
    __shared__ float vsh[ATT_TILE][DM];
    const int64_t chunks = (g.Sq + ATT_ROWS - 1) / ATT_ROWS, bh = blockIdx.x / chunks;
    const int64_t b = bh / g.H, h = bh % g.H;
    const int64_t i = (int64_t)(blockIdx.x % chunks) * ATT_ROWS + threadIdx.x;
    const bool row = i < g.Sq;
    float qr[DM], acc[DM];
    const T *qp = q + b * g.qs[0] + h * g.qs[1] + (row ? i : 0) * g.qs[2];
#pragma unroll
    for (int d = 0; d < DM; d++) {
        qr[d] = (row && d < g.D) ? Num<T>::load(qp[d * g.qs[3]]) * g.scale : 0.0f;
        acc[d] = 0.0f;
    }
    const T *kb = k + b * g.ks[0] + h * g.ks[1];
    const T *vb = v + b * g.vs[0] + h * g.vs[1];
    const T *mrow = g.has_mask ? mask + b * g.ms[0] + h * g.ms[1] + (row ? i : 0) * g.ms[2] : NULL;
    const uint8_t *crow = g.has_cond ? cond + b * g.cs[0] + h * g.cs[1] + (row ? i : 0) * g.cs[2] : NULL;
    const T *brow = g.has_bias ? bias + b * g.bs[0] + h * g.bs[1] + (row ? i : 0) * g.bs[2] : NULL;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j0 = 0; j0 < g.Sk; j0 += ATT_TILE) {
        const int nt = g.Sk - j0 < ATT_TILE ? (int)(g.Sk - j0) : ATT_TILE;
        int vbad = 0;
        for (int e = threadIdx.x; e < ATT_TILE * DM; e += ATT_ROWS) {
            const int jj = e / DM, d = e % DM;
            float kv = 0.0f, vv = 0.0f;
            if (jj < nt) {
                const int64_t j = j0 + jj;
                if (d < g.D) kv = Num<T>::load(kb[j * g.ks[2] + d * g.ks[3]]);
                if (d < g.Dv) vv = Num<T>::load(vb[j * g.vs[2] + d * g.vs[3]]);
            }
            ksh[jj][d] = kv;
            vsh[jj][d] = vv;
            vbad |= !isfinite(vv);
        }
        /* whether the tile's V holds a NaN or an infinity (the barrier's OR: no extra pass) */
        const int tile_vbad = __syncthreads_or(vbad);
        if (row) {
            for (int jj = 0; jj < nt; jj++) {
                float s = 0.0f;
#pragma unroll
                for (int d = 0; d < DM; d++) s += qr[d] * ksh[jj][d];
                if (crow && (crow[(j0 + jj) * g.cs[3]] != 0) == (g.cond_fill_if != 0))
                    s = g.cond_mode == 1 ? g.fill : s + g.fill;
                if (mrow) s += Num<T>::load(mrow[(j0 + jj) * g.ms[3]]);
                if (brow) s += Num<T>::load(brow[(j0 + jj) * g.bs[3]]);
                if (s == -INFINITY) { /* weight 0, but 0 * (NaN or inf) in V is NaN, as P V gives */
                    if (tile_vbad)
#pragma unroll
                        for (int d = 0; d < DM; d++) acc[d] += 0.0f * vsh[jj][d];
                    continue;
                }
                if (s > m) {
                    const float c = expf(m - s);
                    l *= c;
#pragma unroll
                    for (int d = 0; d < DM; d++) acc[d] *= c;
                    m = s;
                }
                const float p = expf(s - m); /* NaN scores propagate */
                l += p;
#pragma unroll
                for (int d = 0; d < DM; d++) acc[d] += p * vsh[jj][d];
            }
        }
        __syncthreads();
    }
    if (!row) return;
    T *op = o + b * g.os[0] + h * g.os[1] + i * g.os[2];
    float inv;
    bool zero;
    kcu_attn_norm(l, g.nan_to_zero, &inv, &zero);
#pragma unroll
    for (int d = 0; d < DM; d++)
        if (d < g.Dv) op[d * g.os[3]] = Num<T>::store(zero ? 0.0f : acc[d] * inv);
}

template <typename T>
static cudaError_t attention_launch(const kcu_attn *g, const void *q, const void *k, const void *v,
                                    const void *mask, const uint8_t *cond, const void *bias, void *o,
                                    cudaStream_t stream) {
    const int64_t dmax = g->D > g->Dv ? g->D : g->Dv;
    int64_t chunks, gx;
    if (!kcu_attention_grid(g->B, g->H, g->Sq, &chunks, &gx)) return cudaErrorInvalidConfiguration;
    if (gx <= 0) return cudaSuccess;
    const dim3 grid((unsigned)gx);
    const T *qt = (const T *)q, *kt = (const T *)k, *vt = (const T *)v, *mt = (const T *)mask;
    const T *bt = (const T *)bias;
    if (dmax <= 32)
        k_attention<T, 32><<<grid, ATT_ROWS, 0, stream>>>(*g, qt, kt, vt, mt, cond, bt, (T *)o);
    else if (dmax <= 64)
        k_attention<T, 64><<<grid, ATT_ROWS, 0, stream>>>(*g, qt, kt, vt, mt, cond, bt, (T *)o);
    else if (dmax <= KCU_ATTN_MAX_D)
        k_attention<T, KCU_ATTN_MAX_D><<<grid, ATT_ROWS, 0, stream>>>(*g, qt, kt, vt, mt, cond, bt,
                                                                     (T *)o);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}


/* Y [N, M] = act(X [N, K] W [M, K]^T + bias[m] + R [N, M]) (kcu_conv_gemv):
 * a warp per output channel m (8 per block), NB images per warp
 * (blockIdx.y: the groups of images y, y + gridDim.y, ..., kcu_conv_gemv_grid);
 * the lanes step over K by V-element
 * vectors (up to 4 of W in flight each), then a warp sum; lane b finishes
 * image b (the epilogue of the layer inside, one rounding). */
template <typename T, int V, int NB>
__global__ void __launch_bounds__(256)
    k_conv_gemv(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ bias,
                const T *__restrict__ r, T *__restrict__ y, int64_t N, int64_t K, int64_t M, int act, float alpha,
                float beta) {
    typedef typename Num<T>::C C;
    typedef Vec<T, V> VT;
    const int lane = threadIdx.x & 31;
    const int64_t m = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (m >= M) return; /* (the whole warp: m is the warp's) */
    const int64_t kv = K / V;
    const VT *wr = (const VT *)(w + m * K);
    for (int64_t n0 = (int64_t)blockIdx.y * NB; n0 < N; n0 += (int64_t)gridDim.y * NB) {
        C acc[NB];
#pragma unroll
        for (int b = 0; b < NB; b++) acc[b] = C(0);
#pragma unroll 4
        for (int64_t i = lane; i < kv; i += 32) {
            const VT wv = wr[i];
#pragma unroll
            for (int b = 0; b < NB; b++) {
                if (n0 + b < N) {
                    const VT xv = ((const VT *)(x + (n0 + b) * K))[i];
#pragma unroll
                    for (int j = 0; j < V; j++) acc[b] += (C)Num<T>::load(wv.v[j]) * (C)Num<T>::load(xv.v[j]);
                }
            }
        }
#pragma unroll
        for (int b = 0; b < NB; b++) {
            C v = warp_reduce(acc[b], OpAdd());
            if (lane == b && n0 + b < N) {
                if (bias) v += Num<T>::load(bias[m]);
                if (r) v += Num<T>::load(r[(n0 + b) * M + m]);
                v = act_apply<C>(act, (C)alpha, (C)beta, v);
                y[(n0 + b) * M + m] = Num<T>::store(v);
            }
        }
    }
}

template <typename T, int V>
cudaError_t conv_gemv_launch(int64_t N, int64_t K, int64_t M, const void *x, const void *w, const void *bias,
                             const void *r, void *y, int act, float alpha, float beta, cudaStream_t stream) {
    int nb;
    int64_t gx, gy;
    if (!kcu_conv_gemv_grid(N, M, &nb, &gx, &gy)) return cudaErrorInvalidValue;
    const dim3 grid((unsigned)gx, (unsigned)gy);
    const T *xp = (const T *)x, *wp = (const T *)w, *bp = (const T *)bias, *rp = (const T *)r;
    if (nb == 4) k_conv_gemv<T, V, 4><<<grid, 256, 0, stream>>>(xp, wp, bp, rp, (T *)y, N, K, M, act, alpha, beta);
    else if (nb == 2) k_conv_gemv<T, V, 2><<<grid, 256, 0, stream>>>(xp, wp, bp, rp, (T *)y, N, K, M, act, alpha, beta);
    else k_conv_gemv<T, V, 1><<<grid, 256, 0, stream>>>(xp, wp, bp, rp, (T *)y, N, K, M, act, alpha, beta);
    return cudaGetLastError();
}

} // namespace

extern "C" {

cudaError_t kcu_bias_act(kiln_dtype t, const void *x, void *y, const void *bias,
                         const void *residual, int64_t N, int64_t M, int64_t plane, int act,
                         float alpha, float beta, cudaStream_t stream) {
    int64_t total = N * M * plane;
    if (total <= 0) return cudaSuccess;
    if (x == y && !bias && !residual && act == KILN_FC_ACT_NONE) return cudaSuccess;
    const bool al = (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0 && (uintptr_t)bias % 16 == 0 &&
                    (uintptr_t)residual % 16 == 0;
    if ((t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16) && al && (plane == 1 || !bias) &&
        (bias ? M % 8 == 0 : total % 8 == 0)) {
        const int64_t t8 = total / 8, m8 = bias ? M / 8 : 1;
        const unsigned grid = grid_for(t8);
        if (t == KILN_DTYPE_FLOAT16)
            k_bias_act_vec<__half><<<grid, KCU_THREADS, 0, stream>>>(
                (const __half *)x, (__half *)y, (const __half *)bias, (const __half *)residual, t8, m8, act,
                alpha, beta);
        else
            k_bias_act_vec<__nv_bfloat16><<<grid, KCU_THREADS, 0, stream>>>(
                (const __nv_bfloat16 *)x, (__nv_bfloat16 *)y, (const __nv_bfloat16 *)bias,
                (const __nv_bfloat16 *)residual, t8, m8, act, alpha, beta);
        return cudaGetLastError();
    }
    KCU_SWITCH_FLOAT(t, {
        if (kcu_i32_loop(total))
            k_bias_act<T_, int32_t><<<grid_for(total), KCU_THREADS, 0, stream>>>(
                (const T_ *)x, (T_ *)y, (const T_ *)bias, (const T_ *)residual, (int32_t)total,
                (int32_t)M, (int32_t)plane, act, alpha, beta);
        else
            k_bias_act<T_, int64_t><<<grid_for(total), KCU_THREADS, 0, stream>>>(
                (const T_ *)x, (T_ *)y, (const T_ *)bias, (const T_ *)residual, total, M, plane, act,
                alpha, beta);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_conv_gemv(kiln_dtype t, int64_t N, int64_t K, int64_t M, const void *x, const void *w,
                          const void *bias, const void *r, void *y, int act, float alpha, float beta,
                          cudaStream_t stream) {
    if (N <= 0 || M <= 0) return cudaSuccess;
    if (K <= 0 || act < 0 || act >= KILN_FC_ACT_COUNT) return cudaErrorInvalidValue;
    KCU_SWITCH_FLOAT(t, {
        const int v = (int)(16 / sizeof(T_));
        if (v > 1 && K % v == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)w % 16 == 0)
            return conv_gemv_launch<T_, (int)(16 / sizeof(T_))>(N, K, M, x, w, bias, r, y, act, alpha, beta, stream);
        return conv_gemv_launch<T_, 1>(N, K, M, x, w, bias, r, y, act, alpha, beta, stream);
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_attention(kiln_dtype t, const kcu_attn *g, const void *q, const void *k,
                          const void *v, const void *mask, const uint8_t *cond, const void *bias,
                          void *o, cudaStream_t stream) {
    if (g->B * g->H * g->Sq <= 0 || g->Dv <= 0) return cudaSuccess;
    switch (t) {
    case KILN_DTYPE_FLOAT32:
        return attention_launch<float>(g, q, k, v, mask, cond, bias, o, stream);
    case KILN_DTYPE_FLOAT16:
        return attention_launch<__half>(g, q, k, v, mask, cond, bias, o, stream);
    case KILN_DTYPE_BFLOAT16:
        return attention_launch<__nv_bfloat16>(g, q, k, v, mask, cond, bias, o, stream);
    default: return cudaErrorInvalidValue;
    }
}

} /* extern "C" */
