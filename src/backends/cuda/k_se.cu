/* k_se.cu -- kiln.SqueezeExcite in one launch (kcu_se, cuda_kernels.h): one
 * thread-block cluster per image holds the pooled vector and the hidden
 * vector in distributed shared memory. The composed path (the pool, then
 * two kcu_conv_gemv launches) is cuda_se.c's tactic 0. */
#include "k_common.cuh"
#include "k_act.cuh"

#include <cooperative_groups.h>

using namespace kcu;

namespace {

#define SE_THREADS 256
#define SE_WARPS (SE_THREADS / 32)

/* v rounded to T (what a layer storing it would keep) */
template <typename T> __device__ __forceinline__ typename Num<T>::C rnd(typename Num<T>::C v) {
    return Num<T>::load(Num<T>::store(v));
}

/* Rows per warp step of the matrix-vector products: their loads are issued
 * together (a gate's rows are short: 240 fp16 values are one 16-byte load
 * per lane, so one row at a time would wait one memory latency per row) */
#define SE_ROWS 4

/* out[j] = sum over k < K of w[row0 + j * SE_WARPS][k] v[k] for j < nr (<=
 * SE_ROWS), by the 32 lanes of a warp (w row-major with rows of K elements
 * in global memory, VW elements per load: K % VW == 0 and w 16-byte aligned
 * where VW > 1; v in shared memory); every lane gets the sums */
template <typename T, int VW, typename C>
__device__ __forceinline__ void warp_dots(const T *__restrict__ w, int64_t K, int64_t row0, int nr, const C *v,
                                          int lane, C *out) {
    typedef Vec<T, VW> VT;
    C acc[SE_ROWS];
#pragma unroll
    for (int j = 0; j < SE_ROWS; j++) acc[j] = C(0);
    const int64_t kv = K / VW;
    for (int64_t i = lane; i < kv; i += 32) {
        VT a[SE_ROWS];
#pragma unroll
        for (int j = 0; j < SE_ROWS; j++)
            if (j < nr) a[j] = ((const VT *)(w + (row0 + (int64_t)j * SE_WARPS) * K))[i];
#pragma unroll
        for (int j = 0; j < SE_ROWS; j++)
            if (j < nr)
#pragma unroll
                for (int e = 0; e < VW; e++) acc[j] += (C)Num<T>::load(a[j].v[e]) * v[i * VW + e];
    }
#pragma unroll
    for (int j = 0; j < SE_ROWS; j++) out[j] = warp_reduce(acc[j], OpAdd());
}

/* Rows [lo, hi) of act(w v + b) (w [rows, K] in global memory, 16-byte
 * loads where wv; v in shared memory; b may be NULL), a warp per row,
 * SE_ROWS rows a step: into shared `sh` rounded to T (a vector the next
 * step reads), or into global `gl` (the layer's output). */
template <typename T, typename C>
__device__ __forceinline__ void gemv_rows(const T *__restrict__ w, int64_t K, int wv, int64_t lo, int64_t hi,
                                          const C *v, const T *__restrict__ b, int act, float alpha, float beta,
                                          int warp, int lane, C *sh, T *gl) {
    constexpr int VW = (int)(16 / sizeof(T));
    for (int64_t r = lo + warp; r < hi; r += SE_ROWS * SE_WARPS) {
        const int64_t left = (hi - r + SE_WARPS - 1) / SE_WARPS;
        const int nr = left < SE_ROWS ? (int)left : SE_ROWS;
        C s[SE_ROWS];
        if (wv) warp_dots<T, VW>(w, K, r, nr, v, lane, s);
        else warp_dots<T, 1>(w, K, r, nr, v, lane, s);
        if (lane == 0)
#pragma unroll
            for (int j = 0; j < SE_ROWS; j++) {
                if (j >= nr) break;
                const int64_t rj = r + (int64_t)j * SE_WARPS;
                const C y = act_apply<C>(act, (C)alpha, (C)beta, b ? s[j] + (C)Num<T>::load(b[rj]) : s[j]);
                if (sh) sh[rj] = rnd<T>(y);
                else gl[rj] = Num<T>::store(y);
            }
    }
}

/* Copies entries [lo, hi) of shared array `a` from block b of the cluster
 * (the same array there) into this block's (S > 1, sm_90). */
template <int S, typename C>
__device__ __forceinline__ void cluster_copy(C *a, int b, int64_t lo, int64_t hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    const C *src = cl.map_shared_rank(a, b);
    for (int64_t i = lo + threadIdx.x; i < hi; i += SE_THREADS) a[i] = src[i];
#endif
}

/* The sum of entry i of shared array `a` over the cluster's blocks other
 * than k (0 for S == 1; sm_90) */
template <int S, typename C> __device__ __forceinline__ C cluster_sum_others(C *a, int k, int64_t i) {
    C s = C(0);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (S > 1) {
        namespace cg = cooperative_groups;
        cg::cluster_group cl = cg::this_cluster();
        for (int b = 0; b < S; b++)
            if (b != k) s += cl.map_shared_rank(a, b)[i];
    }
#endif
    return s;
}

template <int S> __device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (S > 1) cooperative_groups::this_cluster().sync();
#endif
}

/* Block k (of the S of image n's cluster) owns channels [v0 V, v1 V) (V
 * channels per vector: 16-byte loads of an NHWC x where C and x allow; 1
 * for NCHW) and hidden units [r0, r1): it pools its channels (NCHW), or
 * sums positions slice k of every channel and then adds its channels' sums
 * up over the cluster (NHWC), computes its hidden units and writes its
 * outputs; the slices are the same in every block's arithmetic, so block
 * b's slice is known to the others. */
template <typename T, int V, int S>
__global__ void __launch_bounds__(SE_THREADS)
    k_se(const __grid_constant__ kcu_se_geom g, const T *__restrict__ x, const T *__restrict__ w1,
         const T *__restrict__ w2, const T *__restrict__ b1, const T *__restrict__ b2, T *__restrict__ y, int w1v,
         int w2v) {
    typedef typename Num<T>::C C;
    __shared__ C pooled[KCU_SE_MAX_C];
    __shared__ C hidden[KCU_SE_MAX_R];
    __shared__ C red[SE_THREADS * V];  /* the pool's [row][output] sums */
    __shared__ C red2[SE_THREADS * V]; /* their partial sums over rows */
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int64_t n = blockIdx.x / S, Cn = g.C, R = g.R, HW = g.HW;
    const int k = (int)(blockIdx.x % S); /* the block's rank in its cluster (cluster dims S x 1 x 1) */
    const int64_t cv = Cn / V, per = (cv + S - 1) / S, rper = (R + S - 1) / S;
    const int64_t v0 = k * per < cv ? k * per : cv, v1 = v0 + per < cv ? v0 + per : cv;
    const int64_t r0 = k * rper < R ? k * rper : R, r1 = r0 + rper < R ? r0 + rper : R;

    /* 1. the pooled slice */
    if (g.nhwc) {
        /* NHWC: the block sums positions [p0, p1) of every channel (every block of
         * the cluster busy whatever C is: 32 channels of a 112 x 112 plane are 4
         * vectors), TX threads across the vectors, TY rows of them over the
         * positions; block k then adds slice k up over the cluster (below) */
        const int64_t pper = (HW + S - 1) / S, p0 = k * pper < HW ? k * pper : HW;
        const int64_t p1 = p0 + pper < HW ? p0 + pper : HW;
        const int TX = cv >= SE_THREADS ? SE_THREADS : (int)cv, TY = SE_THREADS / TX;
        const int tx = t % TX, ty = t / TX;
        const T *xn = x + n * HW * Cn;
        for (int64_t base = 0; base < cv; base += TX) {
            C acc[V];
#pragma unroll
            for (int j = 0; j < V; j++) acc[j] = C(0);
            const int64_t vi = base + tx;
            if (ty < TY && vi < cv) {
#pragma unroll 4
                for (int64_t p = p0 + ty; p < p1; p += TY) {
                    const Vec<T, V> a = *(const Vec<T, V> *)(xn + p * Cn + vi * V);
#pragma unroll
                    for (int j = 0; j < V; j++) acc[j] += (C)Num<T>::load(a.v[j]);
                }
            }
            if (ty < TY)
#pragma unroll
                for (int j = 0; j < V; j++) red[(ty * TX + tx) * V + j] = acc[j];
            __syncthreads();
            /* row ty of red holds O = TX V sums: RR threads per output add TY / RR rows
             * each (every thread busy), then one adds those RR */
            const int O = TX * V, RR = O >= SE_THREADS ? 1 : SE_THREADS / O;
            for (int i = t; i < RR * O; i += SE_THREADS) {
                const int o = i % O, r = i / O;
                C s = C(0);
                for (int k2 = r; k2 < TY; k2 += RR) s += red[k2 * O + o];
                red2[r * O + o] = s;
            }
            __syncthreads();
            for (int o = t; o < O; o += SE_THREADS)
                if (base + o / V < cv) {
                    C s = C(0);
                    for (int r = 0; r < RR; r++) s += red2[r * O + o];
                    pooled[base * V + o] = s; /* (the block's positions only) */
                }
            __syncthreads();
        }
    } else {
        /* NCHW (V == 1): a warp per channel along its plane */
        for (int64_t c = v0 * V + warp; c < v1 * V; c += SE_WARPS) {
            const T *xc = x + (n * Cn + c) * HW;
            C s = C(0);
            for (int64_t p = lane; p < HW; p += 32) s += (C)Num<T>::load(xc[p]);
            s = warp_reduce(s, OpAdd());
            if (lane == 0) pooled[c] = rnd<T>(s / (C)HW);
        }
    }
    __syncthreads();
    if (g.nhwc) {
        /* slice k of the mean: the S blocks' sums of its channels */
        cluster_sync<S>();
        for (int64_t c = v0 * V + t; c < v1 * V; c += SE_THREADS)
            pooled[c] = rnd<T>((pooled[c] + cluster_sum_others<S>(pooled, k, c)) / (C)HW);
        __syncthreads();
    }
    /* 2. the whole pooled vector: the other blocks' slices through distributed shared memory */
    if (S > 1) {
        cluster_sync<S>();
        for (int b = 0; b < S; b++) {
            const int64_t b0 = b * per < cv ? b * per : cv, b1v = b0 + per < cv ? b0 + per : cv;
            if (b != k) cluster_copy<S>(pooled, b, b0 * V, b1v * V);
        }
        __syncthreads();
    }
    /* 3. the hidden slice (rounded to T, as the first 1x1 layer stored it) */
    gemv_rows<T>(w1, Cn, w1v, r0, r1, pooled, b1, g.act1, g.alpha1, g.beta1, warp, lane, hidden, (T *)NULL);
    __syncthreads();
    /* 4. the whole hidden vector; the second cluster sync: no block reads
     * another's shared memory after it, so any may leave */
    if (S > 1) {
        cluster_sync<S>();
        for (int b = 0; b < S; b++) {
            const int64_t b0 = b * rper < R ? b * rper : R, b1r = b0 + rper < R ? b0 + rper : R;
            if (b != k) cluster_copy<S>(hidden, b, b0, b1r);
        }
        cluster_sync<S>();
    }
    __syncthreads();
    /* 5. the output slice */
    gemv_rows<T>(w2, R, w2v, v0 * V, v1 * V, hidden, b2, g.act2, g.alpha2, g.beta2, warp, lane, (C *)NULL, y + n * Cn);
}

template <typename T, int V, int S>
static cudaError_t se_launch(const kcu_se_geom *g, const void *x, const void *w1, const void *w2, const void *b1,
                             const void *b2, void *y, int w1v, int w2v, cudaStream_t stream) {
    const dim3 grid((unsigned)(g->N * S)), block(SE_THREADS);
    const T *xp = (const T *)x, *w1p = (const T *)w1, *w2p = (const T *)w2, *b1p = (const T *)b1, *b2p = (const T *)b2;
    if (S == 1) {
        k_se<T, V, S><<<grid, block, 0, stream>>>(*g, xp, w1p, w2p, b1p, b2p, (T *)y, w1v, w2v);
        return cudaGetLastError();
    }
    cudaLaunchAttribute at;
    cudaLaunchConfig_t cfg = cluster_config(grid, block, stream, dim3((unsigned)S, 1, 1), &at);
    cudaError_t e = cudaLaunchKernelEx(&cfg, k_se<T, V, S>, *g, xp, w1p, w2p, b1p, b2p, (T *)y, w1v, w2v);
    return e != cudaSuccess ? e : cudaGetLastError();
}

template <typename T, int V>
static cudaError_t se_by_s(int S, const kcu_se_geom *g, const void *x, const void *w1, const void *w2,
                           const void *b1, const void *b2, void *y, int w1v, int w2v, cudaStream_t stream) {
    switch (S) {
    case 1: return se_launch<T, V, 1>(g, x, w1, w2, b1, b2, y, w1v, w2v, stream);
    case 2: return se_launch<T, V, 2>(g, x, w1, w2, b1, b2, y, w1v, w2v, stream);
    case 4: return se_launch<T, V, 4>(g, x, w1, w2, b1, b2, y, w1v, w2v, stream);
    case 8: return se_launch<T, V, 8>(g, x, w1, w2, b1, b2, y, w1v, w2v, stream);
    default: return cudaErrorInvalidValue;
    }
}

template <typename T>
static cudaError_t se_run(int S, const kcu_se_geom *g, const void *x, const void *w1, const void *w2,
                          const void *b1, const void *b2, void *y, cudaStream_t stream) {
    constexpr int VW = (int)(16 / sizeof(T));
    const int w1v = g->C % VW == 0 && (uintptr_t)w1 % 16 == 0, w2v = g->R % VW == 0 && (uintptr_t)w2 % 16 == 0;
    if (g->nhwc && g->C % VW == 0 && (uintptr_t)x % 16 == 0)
        return se_by_s<T, VW>(S, g, x, w1, w2, b1, b2, y, w1v, w2v, stream);
    return se_by_s<T, 1>(S, g, x, w1, w2, b1, b2, y, w1v, w2v, stream);
}

} // namespace

extern "C" cudaError_t kcu_se(kiln_dtype t, const kcu_se_geom *g, int S, const void *x, const void *w1,
                              const void *w2, const void *b1, const void *b2, void *y, cudaStream_t stream) {
    if (g->N <= 0 || g->C <= 0) return cudaSuccess;
    if (!kcu_se_fits(g->C, g->R) || g->HW <= 0 || g->N * S > INT32_MAX || g->act1 < 0 ||
        g->act1 >= KILN_FC_ACT_COUNT || g->act2 < 0 || g->act2 >= KILN_FC_ACT_COUNT)
        return cudaErrorInvalidValue;
    switch (t) {
    case KILN_DTYPE_FLOAT32: return se_run<float>(S, g, x, w1, w2, b1, b2, y, stream);
    case KILN_DTYPE_FLOAT16: return se_run<__half>(S, g, x, w1, w2, b1, b2, y, stream);
    case KILN_DTYPE_BFLOAT16: return se_run<__nv_bfloat16>(S, g, x, w1, w2, b1, b2, y, stream);
    default: return cudaErrorInvalidValue;
    }
}
