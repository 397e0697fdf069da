/* k_cast.cu -- Cast between the 13 numeric dtypes, with the CPU kernel's
 * rules (src/ops/elementwise_cast.c): float -> integer truncates toward
 * zero through int64 (NaN and out-of-range give INT64_MIN, then wrap to
 * the destination width); integer -> float16/bfloat16 goes through float32;
 * double -> float16/bfloat16 rounds once; anything -> bool is `!= 0`. */
#include <type_traits>

#include "k_common.cuh"

namespace kcu {

/* bool element (storage uint8_t, semantic 0/1) */
struct B8 {
    uint8_t v;
};

__device__ __forceinline__ int64_t f2i64(double v) {
    return (v >= -9223372036854775808.0 && v < 9223372036854775808.0) ? (int64_t)v : INT64_MIN;
}
__device__ __forceinline__ uint64_t f2u64(double v) {
    if (v >= 0.0 && v < 18446744073709551616.0) return (uint64_t)v;
    return (uint64_t)f2i64(v);
}

template <typename T> struct IsHalf {
    static const bool value =
        std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value;
};

template <typename D> __device__ __forceinline__ D from_float(float f) {
    if constexpr (std::is_same<D, __half>::value) return __float2half_rn(f);
    else return __float2bfloat16_rn(f);
}

template <typename S, typename D> __device__ __forceinline__ D cvt(S x) {
    if constexpr (std::is_same<D, B8>::value) {
        /* anything -> bool */
        if constexpr (std::is_same<S, B8>::value) return B8{(uint8_t)(x.v != 0)};
        else if constexpr (IsHalf<S>::value) return B8{(uint8_t)(Num<S>::load(x) != 0.0f)};
        else return B8{(uint8_t)(x != 0)};
    } else if constexpr (std::is_same<S, B8>::value) {
        /* bool -> anything */
        const int b = x.v != 0;
        if constexpr (IsHalf<D>::value) return from_float<D>((float)b);
        else return (D)b;
    } else if constexpr (IsHalf<S>::value || std::is_floating_point<S>::value) {
        /* floating source: value as float (halves) or itself */
        auto v = Num<S>::load(x);
        if constexpr (IsHalf<D>::value) {
            if constexpr (std::is_same<decltype(v), double>::value) {
                if constexpr (std::is_same<D, __half>::value) return __double2half(v);
                else return __double2bfloat16(v);
            } else {
                return from_float<D>(v);
            }
        } else if constexpr (std::is_floating_point<D>::value) {
            return (D)v;
        } else if constexpr (std::is_signed<D>::value) {
            return (D)f2i64((double)v);
        } else {
            return (D)f2u64((double)v);
        }
    } else {
        /* integer source */
        if constexpr (IsHalf<D>::value) return from_float<D>((float)x);
        else return (D)x;
    }
}

template <typename S, typename D>
__global__ void __launch_bounds__(KCU_THREADS)
    k_cast(const S *__restrict__ x, D *__restrict__ y, int64_t n) {
    KCU_GRID_STRIDE(i, n) y[i] = cvt<S, D>(x[i]);
}

#define KCU_CAST_TYPES(X, ...)                                                           \
    X(KILN_DTYPE_FLOAT32, float, __VA_ARGS__)                                            \
    X(KILN_DTYPE_FLOAT64, double, __VA_ARGS__)                                           \
    X(KILN_DTYPE_FLOAT16, __half, __VA_ARGS__)                                           \
    X(KILN_DTYPE_BFLOAT16, __nv_bfloat16, __VA_ARGS__)                                   \
    X(KILN_DTYPE_INT8, int8_t, __VA_ARGS__)                                              \
    X(KILN_DTYPE_INT16, int16_t, __VA_ARGS__)                                            \
    X(KILN_DTYPE_INT32, int32_t, __VA_ARGS__)                                            \
    X(KILN_DTYPE_INT64, int64_t, __VA_ARGS__)                                            \
    X(KILN_DTYPE_UINT8, uint8_t, __VA_ARGS__)                                            \
    X(KILN_DTYPE_UINT16, uint16_t, __VA_ARGS__)                                          \
    X(KILN_DTYPE_UINT32, uint32_t, __VA_ARGS__)                                          \
    X(KILN_DTYPE_UINT64, uint64_t, __VA_ARGS__)                                          \
    X(KILN_DTYPE_BOOL, B8, __VA_ARGS__)

template <typename S>
static cudaError_t cast_from(kiln_dtype to, const void *x, void *y, int64_t n, cudaStream_t st) {
    switch (to) {
#define KCU_CAST_TO(DT, TY, unused)                                                      \
    case DT:                                                                            \
        k_cast<S, TY><<<grid_for(n), KCU_THREADS, 0, st>>>((const S *)x, (TY *)y, n);    \
        return cudaGetLastError();
        KCU_CAST_TYPES(KCU_CAST_TO, 0)
#undef KCU_CAST_TO
    default: return cudaErrorInvalidValue;
    }
}

} /* namespace kcu */

using namespace kcu;

extern "C" {

int kcu_cast_has(kiln_dtype t) {
    switch (t) {
#define KCU_CAST_HAS(DT, TY, unused) case DT:
        KCU_CAST_TYPES(KCU_CAST_HAS, 0)
#undef KCU_CAST_HAS
        return 1;
    default: return 0;
    }
}

cudaError_t kcu_cast(kiln_dtype from, kiln_dtype to, const void *x, void *y, int64_t n,
                     cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    switch (from) {
#define KCU_CAST_FROM(DT, TY, unused) case DT: return cast_from<TY>(to, x, y, n, stream);
        KCU_CAST_TYPES(KCU_CAST_FROM, 0)
#undef KCU_CAST_FROM
    default: return cudaErrorInvalidValue;
    }
}

} /* extern "C" */
