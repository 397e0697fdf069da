/* k_common.cuh -- shared device helpers of kiln's CUDA kernels: element
 * types and their compute types, grid sizing, dtype dispatch, warp/block
 * reductions. Included by the k_*.cu files only. */
#ifndef KILN_K_COMMON_CUH
#define KILN_K_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "cuda_kernels.h"

namespace kcu {

/* ---- element types ---------------------------------------------------------
 * Num<T>::C is the arithmetic type: float for f16/bf16/f32, double for f64,
 * the type itself for integers. Bool is stored as uint8_t. */
template <typename T> struct Num {
    typedef T C;
    static __device__ __forceinline__ C load(T v) { return v; }
    static __device__ __forceinline__ T store(C v) { return v; }
};
template <> struct Num<__half> {
    typedef float C;
    static __device__ __forceinline__ float load(__half v) { return __half2float(v); }
    static __device__ __forceinline__ __half store(float v) { return __float2half_rn(v); }
};
template <> struct Num<__nv_bfloat16> {
    typedef float C;
    static __device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
    static __device__ __forceinline__ __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};

template <typename T> struct IsFloat { static const bool value = false; };
template <> struct IsFloat<float> { static const bool value = true; };
template <> struct IsFloat<double> { static const bool value = true; };
template <> struct IsFloat<__half> { static const bool value = true; };
template <> struct IsFloat<__nv_bfloat16> { static const bool value = true; };

/* V elements of T moved as one (16 bytes for 8 halves) */
template <typename T, int V> struct alignas(sizeof(T) * V) Vec {
    T v[V];
};

/* Unsigned type of the same width (wrapping integer arithmetic). */
template <typename T> struct Wide { typedef T U; };
template <> struct Wide<int8_t> { typedef uint8_t U; };
template <> struct Wide<int16_t> { typedef uint16_t U; };
template <> struct Wide<int32_t> { typedef uint32_t U; };
template <> struct Wide<int64_t> { typedef uint64_t U; };

/* Storage type of a given element size (for moving bytes). */
template <int ES> struct Bytes;
template <> struct Bytes<1> { typedef uint8_t T; };
template <> struct Bytes<2> { typedef uint16_t T; };
template <> struct Bytes<4> { typedef uint32_t T; };
template <> struct Bytes<8> { typedef uint64_t T; };
template <> struct Bytes<16> { typedef uint4 T; };

/* ---- math wrappers (float and double overloads) ------------------------------ */
#define KCU_MATH1(name)                                                                  \
    __device__ __forceinline__ float m_##name(float x) { return name##f(x); }          \
    __device__ __forceinline__ double m_##name(double x) { return name(x); }
KCU_MATH1(fabs)
KCU_MATH1(sqrt)
KCU_MATH1(exp)
KCU_MATH1(expm1)
KCU_MATH1(log)
KCU_MATH1(log1p)
KCU_MATH1(floor)
KCU_MATH1(ceil)
KCU_MATH1(rint)
KCU_MATH1(sin)
KCU_MATH1(cos)
KCU_MATH1(tan)
KCU_MATH1(asin)
KCU_MATH1(acos)
KCU_MATH1(atan)
KCU_MATH1(sinh)
KCU_MATH1(cosh)
KCU_MATH1(asinh)
KCU_MATH1(acosh)
KCU_MATH1(atanh)
KCU_MATH1(erf)
KCU_MATH1(tanh)
#undef KCU_MATH1
__device__ __forceinline__ float m_fmod(float a, float b) { return fmodf(a, b); }
__device__ __forceinline__ double m_fmod(double a, double b) { return fmod(a, b); }
__device__ __forceinline__ float m_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double m_pow(double a, double b) { return pow(a, b); }

/* ---- launch helpers ---------------------------------------------------------- */

static inline unsigned grid_for(int64_t n, int threads = KCU_THREADS) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > KCU_MAX_BLOCKS) b = KCU_MAX_BLOCKS;
    return (unsigned)b;
}

/* The configuration of a launch of `grid` x `block` on `stream` in
 * thread-block clusters of `cluster` blocks (sm_90; cudaLaunchKernelEx);
 * `at` holds its one attribute and must live until the launch. */
static inline cudaLaunchConfig_t cluster_config(dim3 grid, dim3 block, cudaStream_t stream, dim3 cluster,
                                                cudaLaunchAttribute *at) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = stream;
    *at = cudaLaunchAttribute{};
    at->id = cudaLaunchAttributeClusterDimension;
    at->val.clusterDim.x = cluster.x;
    at->val.clusterDim.y = cluster.y;
    at->val.clusterDim.z = cluster.z;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    return cfg;
}

#define KCU_GRID_STRIDE(i, n)                                                         \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);         \
         i += (int64_t)blockDim.x * gridDim.x)

/* ---- dtype dispatch -------------------------------------------------------------
 * KCU_SWITCH_*(t, T, body): runs `body` with T bound to the element type of
 * dtype t; falls through (no match) otherwise. */
#define KCU_CASE(DT, TY, ...)                                                          \
    case DT: {                                                                          \
        typedef TY T_;                                                                  \
        __VA_ARGS__;                                                                    \
    } break;

#define KCU_SWITCH_FLOAT(t, ...)                                                       \
    switch (t) {                                                                        \
        KCU_CASE(KILN_DTYPE_FLOAT32, float, __VA_ARGS__)                                \
        KCU_CASE(KILN_DTYPE_FLOAT16, __half, __VA_ARGS__)                               \
        KCU_CASE(KILN_DTYPE_BFLOAT16, __nv_bfloat16, __VA_ARGS__)                       \
        KCU_CASE(KILN_DTYPE_FLOAT64, double, __VA_ARGS__)                               \
    default: break;                                                                     \
    }

/* ---- reductions ------------------------------------------------------------------ */

template <typename C, typename Op> __device__ __forceinline__ C warp_reduce(C v, Op op) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Reduces v over the block (blockDim.x a multiple of 32, <= 1024); every
 * thread gets the result. `sh` holds at least 32 elements. */
template <typename C, typename Op>
__device__ __forceinline__ C block_reduce(C v, Op op, C *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_reduce(v, op);
    __syncthreads(); /* sh may still be read from a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    C r = sh[0];
    for (int w = 1; w < nw; w++) r = op(r, sh[w]);
    return r;
}

struct OpAdd {
    template <typename C> __device__ __forceinline__ C operator()(C a, C b) const { return a + b; }
};
/* max/min that propagate NaN */
struct OpMaxNan {
    template <typename C> __device__ __forceinline__ C operator()(C a, C b) const {
        return (b > a || b != b) ? b : a;
    }
};
struct OpMinNan {
    template <typename C> __device__ __forceinline__ C operator()(C a, C b) const {
        return (b < a || b != b) ? b : a;
    }
};
struct OpMul {
    template <typename C> __device__ __forceinline__ C operator()(C a, C b) const { return a * b; }
};

/* The attention kernels' output scale for a row (k_fused.cu, k_attn.cu) from its
 * softmax sum l, the output being acc * inv where !zero, 0 where zero.
 * l > 0: inv = 1 / l. l == 0 (every key masked out): 0/0 = NaN, as the
 * softmax of all -inf; with nan_to_zero the row's probabilities are 0, so
 * inv = 0 and acc * 0 gives what P V does, 0 or NaN where V holds NaN/inf
 * (acc then holds only the 0 * V terms of the masked keys). l NaN (a NaN or
 * +inf score, from NaN/inf in Q or K): NaN, or with nan_to_zero zeros (every
 * probability was NaN, then 0). */
__device__ __forceinline__ void kcu_attn_norm(float l, int nan_to_zero, float *inv, bool *zero) {
    *zero = nan_to_zero && l != l;
    *inv = nan_to_zero && l == 0.0f ? 0.0f : 1.0f / l;
}

} /* namespace kcu */

/* KCU_SWITCH_ES(es, body): body with E_ bound to the unsigned storage type of
 * es bytes (1, 2, 4, 8); other sizes return cudaErrorInvalidValue. For
 * kernels that only move elements. */
#define KCU_SWITCH_ES(es, ...)                                  \
    switch (es) {                                               \
    case 1: { typedef uint8_t E_; __VA_ARGS__; } break;         \
    case 2: { typedef uint16_t E_; __VA_ARGS__; } break;        \
    case 4: { typedef uint32_t E_; __VA_ARGS__; } break;        \
    case 8: { typedef uint64_t E_; __VA_ARGS__; } break;        \
    default: return cudaErrorInvalidValue;                      \
    }

#endif
