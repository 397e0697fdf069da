/* k_reduce.cu -- the Reduce* family over any set of axes. Two kernels:
 *   rows:    the reduced elements of one output are contiguous at the
 *            innermost level (ReduceMean over the last axis, global pools):
 *            a warp (short rows) or a block per output;
 *   columns: otherwise, a thread per output walking the reduced elements
 *            (coalesced when neighbouring outputs are neighbours in memory).
 * Accumulation in fp32 (fp64 for fp64). NaN propagates through max/min. */
#include "k_common.cuh"

namespace kcu {

template <int K, typename C> struct Red {
    static __device__ __forceinline__ C init() {
        if (K == RK_PROD) return C(1);
        if (K == RK_MAX || K == RK_LOGSUMEXP) return -(C)INFINITY;
        if (K == RK_MIN) return (C)INFINITY;
        return C(0);
    }
    /* pass 0: the reduction (the max for LogSumExp) */
    static __device__ __forceinline__ C acc(C a, C v) {
        switch (K) {
        case RK_L1: return a + m_fabs(v);
        case RK_L2: case RK_SUMSQUARE: return a + v * v;
        case RK_PROD: return a * v;
        case RK_MAX: case RK_LOGSUMEXP: return (v > a || v != v) ? v : a;
        case RK_MIN: return (v < a || v != v) ? v : a;
        default: return a + v;
        }
    }
    static __device__ __forceinline__ C combine(C a, C b) {
        switch (K) {
        case RK_PROD: return a * b;
        case RK_MAX: case RK_LOGSUMEXP: return (b > a || b != b) ? b : a;
        case RK_MIN: return (b < a || b != b) ? b : a;
        default: return a + b;
        }
    }
    static __device__ __forceinline__ C finish(C a, int64_t R) {
        switch (K) {
        case RK_MEAN: return R > 0 ? a / (C)R : (C)NAN;
        case RK_L2: return m_sqrt(a);
        case RK_LOGSUM: return m_log(a);
        default: return a;
        }
    }
};

template <int K, typename C> struct RedCombine {
    __device__ __forceinline__ C operator()(C a, C b) const { return Red<K, C>::combine(a, b); }
};

/* input offset of output o's kept coordinates */
__device__ __forceinline__ int64_t kept_offset(const kcu_reduce &g, int64_t o) {
    int64_t off = 0;
    for (int d = g.krank - 1; d >= 0; d--) {
        int64_t q = o % g.kdims[d];
        o /= g.kdims[d];
        off += q * g.kst[d];
    }
    return off;
}
/* offset of reduced element r */
__device__ __forceinline__ int64_t red_offset(const kcu_reduce &g, int64_t r) {
    if (g.rrank == 1) return r * g.rst[0];
    int64_t off = 0;
    for (int d = g.rrank - 1; d >= 0; d--) {
        int64_t q = r % g.rdims[d];
        r /= g.rdims[d];
        off += q * g.rst[d];
    }
    return off;
}

template <int K, typename T, int G>
__global__ void __launch_bounds__(KCU_THREADS)
    k_reduce_rows(const T *__restrict__ x, T *__restrict__ y, const __grid_constant__ kcu_reduce g) {
    typedef typename Num<T>::C C;
    __shared__ C sh[32];
    const int per_block = KCU_THREADS / G;
    const int lane = (int)(threadIdx.x % G);
    for (int64_t o = (int64_t)blockIdx.x * per_block + threadIdx.x / G; o < g.out_n;
         o += (int64_t)gridDim.x * per_block) {
        const T *xo = x + kept_offset(g, o);
        C a = Red<K, C>::init();
        for (int64_t r = lane; r < g.R; r += G) a = Red<K, C>::acc(a, Num<T>::load(xo[red_offset(g, r)]));
        if constexpr (G == 32) a = warp_reduce(a, RedCombine<K, C>());
        else a = block_reduce(a, RedCombine<K, C>(), sh);
        if constexpr (K == RK_LOGSUMEXP) {
            const C shift = isfinite(a) ? a : C(0);
            C s = 0;
            for (int64_t r = lane; r < g.R; r += G) s += m_exp(Num<T>::load(xo[red_offset(g, r)]) - shift);
            if constexpr (G == 32) s = warp_reduce(s, OpAdd());
            else s = block_reduce(s, OpAdd(), sh);
            a = m_log(s) + shift;
        }
        if (lane == 0) y[o] = Num<T>::store(Red<K, C>::finish(a, g.R));
    }
}

template <int K, typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_reduce_cols(const T *__restrict__ x, T *__restrict__ y, const __grid_constant__ kcu_reduce g) {
    typedef typename Num<T>::C C;
    KCU_GRID_STRIDE(o, g.out_n) {
        const T *xo = x + kept_offset(g, o);
        C a = Red<K, C>::init();
        for (int64_t r = 0; r < g.R; r++) a = Red<K, C>::acc(a, Num<T>::load(xo[red_offset(g, r)]));
        if constexpr (K == RK_LOGSUMEXP) {
            const C shift = isfinite(a) ? a : C(0);
            C s = 0;
            for (int64_t r = 0; r < g.R; r++) s += m_exp(Num<T>::load(xo[red_offset(g, r)]) - shift);
            a = m_log(s) + shift;
        }
        y[o] = Num<T>::store(Red<K, C>::finish(a, g.R));
    }
}

template <int K, typename T>
static cudaError_t reduce_launch(const kcu_reduce *g, const void *x, void *y, cudaStream_t st) {
    const T *px = (const T *)x;
    T *py = (T *)y;
    bool rows = g->rrank > 0 && g->rst[g->rrank - 1] == 1 && g->R >= 32;
    if (!rows) {
        k_reduce_cols<K, T><<<grid_for(g->out_n), KCU_THREADS, 0, st>>>(px, py, *g);
    } else if (g->R <= 4096 || g->out_n >= 4096) {
        int64_t blocks = (g->out_n + (KCU_THREADS / 32) - 1) / (KCU_THREADS / 32);
        k_reduce_rows<K, T, 32><<<grid_for(blocks, 1), KCU_THREADS, 0, st>>>(px, py, *g);
    } else {
        k_reduce_rows<K, T, KCU_THREADS><<<grid_for(g->out_n, 1), KCU_THREADS, 0, st>>>(px, py, *g);
    }
    return cudaGetLastError();
}

template <typename T>
static cudaError_t reduce_kind(int kind, const kcu_reduce *g, const void *x, void *y,
                               cudaStream_t st) {
    switch (kind) {
#define KCU_R_CASE(K) case K: return reduce_launch<K, T>(g, x, y, st);
        KCU_R_CASE(RK_SUM) KCU_R_CASE(RK_MEAN) KCU_R_CASE(RK_MAX) KCU_R_CASE(RK_MIN)
        KCU_R_CASE(RK_PROD) KCU_R_CASE(RK_L1) KCU_R_CASE(RK_L2) KCU_R_CASE(RK_LOGSUM)
        KCU_R_CASE(RK_LOGSUMEXP) KCU_R_CASE(RK_SUMSQUARE)
#undef KCU_R_CASE
    default: return cudaErrorInvalidValue;
    }
}

} /* namespace kcu */

using namespace kcu;

extern "C" cudaError_t kcu_reduce_run(int kind, kiln_dtype t, const kcu_reduce *g, const void *x,
                                      void *y, cudaStream_t stream) {
    if (g->out_n <= 0) return cudaSuccess;
    KCU_SWITCH_FLOAT(t, return reduce_kind<T_>(kind, g, x, y, stream))
    return cudaErrorInvalidValue;
}
