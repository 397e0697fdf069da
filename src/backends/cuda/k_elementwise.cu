/* k_elementwise.cu -- unary, binary (numpy broadcasting), Where, Clip,
 * IsNaN/IsInf/Not and the Mean scaling. Semantics follow the CPU kernels of
 * src/ops/elementwise_*.c exactly (NaN propagation of Max/Min, integer
 * division by 0 giving 0, Python-style Mod...), with float16/bfloat16
 * computed in float32 and rounded once to nearest-even. */
#include <type_traits>

#include "k_common.cuh"

namespace kcu {

template <typename C> __device__ __forceinline__ C clamp01(C v) {
    v = v > C(1) ? C(1) : v;
    return v < C(0) ? C(0) : v;
}

/* ---- unary ---------------------------------------------------------------------- */

template <int OP, typename C>
__device__ __forceinline__ C unary_f(C v, C alpha, C beta, C gamma) {
    const C zero = C(0), one = C(1);
    switch (OP) {
    case EW_U_ABS: return m_fabs(v);
    case EW_U_NEG: return -v;
    case EW_U_SQRT: return m_sqrt(v);
    case EW_U_EXP: return m_exp(v);
    case EW_U_LOG: return m_log(v);
    case EW_U_RECIPROCAL: return one / v;
    case EW_U_FLOOR: return m_floor(v);
    case EW_U_CEIL: return m_ceil(v);
    case EW_U_ROUND: return m_rint(v);
    case EW_U_SIGN: return v > zero ? one : (v < zero ? -one : v);
    case EW_U_SIN: return m_sin(v);
    case EW_U_COS: return m_cos(v);
    case EW_U_TAN: return m_tan(v);
    case EW_U_ASIN: return m_asin(v);
    case EW_U_ACOS: return m_acos(v);
    case EW_U_ATAN: return m_atan(v);
    case EW_U_SINH: return m_sinh(v);
    case EW_U_COSH: return m_cosh(v);
    case EW_U_ASINH: return m_asinh(v);
    case EW_U_ACOSH: return m_acosh(v);
    case EW_U_ATANH: return m_atanh(v);
    case EW_U_ERF: return m_erf(v);
    case EW_U_RELU: return v < zero ? zero : v;
    case EW_U_LEAKYRELU: return v < zero ? v * alpha : v;
    case EW_U_ELU: return v < zero ? alpha * m_expm1(v) : v;
    case EW_U_SELU: return v > zero ? gamma * v : gamma * alpha * m_expm1(v);
    case EW_U_CELU:
        return (v > zero ? v : zero) + (v < zero ? alpha * m_expm1(v / alpha) : zero);
    case EW_U_SIGMOID: return one / (one + m_exp(-v));
    case EW_U_HARDSIGMOID: return clamp01(alpha * v + beta);
    case EW_U_HARDSWISH: return v * clamp01(C(1.0 / 6.0) * v + C(0.5));
    case EW_U_TANH: return m_tanh(v);
    case EW_U_SOFTPLUS: return (v > zero ? v : zero) + m_log1p(m_exp(-m_fabs(v)));
    case EW_U_SOFTSIGN: return v / (one + m_fabs(v));
    case EW_U_MISH: return v * m_tanh((v > zero ? v : zero) + m_log1p(m_exp(-m_fabs(v))));
    case EW_U_THRESHOLDEDRELU: return v > alpha ? v : zero;
    case EW_U_SHRINK: return v < -alpha ? v + beta : (v > alpha ? v - beta : zero);
    default: return v;
    }
}

/* integers: the exact ops only (wrapping negation) */
template <int OP, typename T> __device__ __forceinline__ T unary_i(T v) {
    typedef typename Wide<T>::U U;
    switch (OP) {
    case EW_U_ABS: return v < 0 ? (T)((U)0 - (U)v) : v;
    case EW_U_NEG: return (T)((U)0 - (U)v);
    case EW_U_SIGN: return (T)((v > 0) - (v < 0));
    case EW_U_RELU: return v < 0 ? (T)0 : v;
    default: return v;
    }
}

template <int OP, typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_unary(const T *__restrict__ x, T *__restrict__ y, int64_t n, float alpha, float beta,
            float gamma) {
    typedef typename Num<T>::C C;
    KCU_GRID_STRIDE(i, n) {
        if constexpr (IsFloat<T>::value)
            y[i] = Num<T>::store(unary_f<OP, C>(Num<T>::load(x[i]), (C)alpha, (C)beta, (C)gamma));
        else
            y[i] = unary_i<OP, T>(x[i]);
    }
}

#define KCU_UNARY_OPS(X)                                                                  \
    X(EW_U_ABS) X(EW_U_NEG) X(EW_U_SQRT) X(EW_U_EXP) X(EW_U_LOG) X(EW_U_RECIPROCAL)   \
    X(EW_U_FLOOR) X(EW_U_CEIL) X(EW_U_ROUND) X(EW_U_SIGN) X(EW_U_SIN) X(EW_U_COS)     \
    X(EW_U_TAN) X(EW_U_ASIN) X(EW_U_ACOS) X(EW_U_ATAN) X(EW_U_SINH) X(EW_U_COSH)      \
    X(EW_U_ASINH) X(EW_U_ACOSH) X(EW_U_ATANH) X(EW_U_ERF) X(EW_U_RELU)                 \
    X(EW_U_LEAKYRELU) X(EW_U_ELU) X(EW_U_SELU) X(EW_U_CELU) X(EW_U_SIGMOID)            \
    X(EW_U_HARDSIGMOID) X(EW_U_HARDSWISH) X(EW_U_TANH) X(EW_U_SOFTPLUS)                 \
    X(EW_U_SOFTSIGN) X(EW_U_MISH) X(EW_U_THRESHOLDEDRELU) X(EW_U_SHRINK)

template <typename T>
static cudaError_t unary_float(int op, const void *x, void *y, int64_t n, float a, float b,
                               float c, cudaStream_t st) {
    const T *px = (const T *)x;
    T *py = (T *)y;
    switch (op) {
#define KCU_UNARY_LAUNCH(OP)                                                                  \
    case OP: k_unary<OP, T><<<grid_for(n), KCU_THREADS, 0, st>>>(px, py, n, a, b, c); break;
        KCU_UNARY_OPS(KCU_UNARY_LAUNCH)
#undef KCU_UNARY_LAUNCH
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

template <typename T>
static cudaError_t unary_int(int op, const void *x, void *y, int64_t n, cudaStream_t st) {
    const T *px = (const T *)x;
    T *py = (T *)y;
    switch (op) {
    case EW_U_ABS: k_unary<EW_U_ABS, T><<<grid_for(n), KCU_THREADS, 0, st>>>(px, py, n, 0, 0, 0); break;
    case EW_U_NEG: k_unary<EW_U_NEG, T><<<grid_for(n), KCU_THREADS, 0, st>>>(px, py, n, 0, 0, 0); break;
    case EW_U_SIGN: k_unary<EW_U_SIGN, T><<<grid_for(n), KCU_THREADS, 0, st>>>(px, py, n, 0, 0, 0); break;
    case EW_U_RELU: k_unary<EW_U_RELU, T><<<grid_for(n), KCU_THREADS, 0, st>>>(px, py, n, 0, 0, 0); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

static bool unary_int_op(int op) {
    return op == EW_U_ABS || op == EW_U_NEG || op == EW_U_SIGN || op == EW_U_RELU;
}

/* ---- predicates --------------------------------------------------------------- */

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_isnan(const T *__restrict__ x, uint8_t *__restrict__ y, int64_t n) {
    KCU_GRID_STRIDE(i, n) {
        auto v = Num<T>::load(x[i]);
        y[i] = v != v;
    }
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_isinf(const T *__restrict__ x, uint8_t *__restrict__ y, int64_t n, int pos, int neg) {
    typedef typename Num<T>::C C;
    KCU_GRID_STRIDE(i, n) {
        C v = Num<T>::load(x[i]);
        y[i] = (pos && v == (C)INFINITY) || (neg && v == -(C)INFINITY);
    }
}

__global__ void __launch_bounds__(KCU_THREADS)
    k_not(const uint8_t *__restrict__ x, uint8_t *__restrict__ y, int64_t n) {
    KCU_GRID_STRIDE(i, n) y[i] = !x[i];
}

/* ---- broadcasting offsets --------------------------------------------------------- */

template <int NIN, typename IdxT>
__device__ __forceinline__ void bc_offsets(const kcu_bcast &g, int64_t i, IdxT (&off)[NIN]) {
    if (g.all_flat) {
#pragma unroll
        for (int k = 0; k < NIN; k++) off[k] = g.flat[k] == KCU_FLAT_SAME ? (IdxT)i : (IdxT)0;
        return;
    }
#pragma unroll
    for (int k = 0; k < NIN; k++) off[k] = 0;
    IdxT rem = (IdxT)i;
    for (int d = g.rank - 1; d > 0; d--) {
        IdxT dim = (IdxT)g.dims[d];
        IdxT c = rem % dim;
        rem /= dim;
#pragma unroll
        for (int k = 0; k < NIN; k++) off[k] += c * (IdxT)g.st[k][d];
    }
    if (g.rank > 0) {
#pragma unroll
        for (int k = 0; k < NIN; k++) off[k] += rem * (IdxT)g.st[k][0];
    }
}

/* ---- binary ------------------------------------------------------------------------- */

template <int OP> struct BinIsBool {
    static const bool value = OP >= EW_B_EQ && OP <= EW_B_XOR;
};

__device__ __forceinline__ int64_t pymod_i64(int64_t a, int64_t b) {
    if (b == 0 || b == -1) return 0;
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

template <int OP, typename T>
__device__ __forceinline__ typename std::conditional<BinIsBool<OP>::value, uint8_t, T>::type
bin_op(T av, T bv) {
    typedef typename Num<T>::C C;
    if constexpr (BinIsBool<OP>::value) {
        C a = Num<T>::load(av), b = Num<T>::load(bv);
        switch (OP) {
        case EW_B_EQ: return a == b;
        case EW_B_LT: return a < b;
        case EW_B_LE: return a <= b;
        case EW_B_GT: return a > b;
        case EW_B_GE: return a >= b;
        case EW_B_AND: return (a != 0) & (b != 0);
        case EW_B_OR: return (a != 0) | (b != 0);
        default: return (a != 0) ^ (b != 0); /* XOR */
        }
    } else if constexpr (IsFloat<T>::value) {
        C a = Num<T>::load(av), b = Num<T>::load(bv), r;
        switch (OP) {
        case EW_B_ADD: r = a + b; break;
        case EW_B_SUB: r = a - b; break;
        case EW_B_MUL: r = a * b; break;
        case EW_B_DIV: r = a / b; break;
        case EW_B_MOD: r = m_fmod(a, b); break;
        case EW_B_PYMOD: {
            C m = m_fmod(a, b);
            r = (m != C(0) && ((m < C(0)) != (b < C(0)))) ? m + b : m;
            break;
        }
        case EW_B_MAX: r = (a != a || a > b) ? a : b; break;
        case EW_B_MIN: r = (a != a || a < b) ? a : b; break;
        case EW_B_PRELU: r = a < C(0) ? a * b : a; break;
        case EW_B_POW: r = m_pow(a, b); break;
        default: r = a; break;
        }
        return Num<T>::store(r);
    } else {
        typedef typename std::conditional<(sizeof(T) < 8), uint32_t, uint64_t>::type W;
        const T a = av, b = bv;
        if constexpr (std::is_signed<T>::value) {
            switch (OP) {
            case EW_B_ADD: return (T)((W)a + (W)b);
            case EW_B_SUB: return (T)((W)a - (W)b);
            case EW_B_MUL: return (T)((W)a * (W)b);
            case EW_B_DIV: return b == 0 ? (T)0 : b == (T)-1 ? (T)((W)0 - (W)a) : (T)(a / b);
            case EW_B_MOD: return (b == 0 || b == (T)-1) ? (T)0 : (T)(a % b);
            case EW_B_PYMOD: return (T)pymod_i64((int64_t)a, (int64_t)b);
            case EW_B_MAX: return a > b ? a : b;
            case EW_B_MIN: return a < b ? a : b;
            case EW_B_PRELU: return a < (T)0 ? (T)((W)a * (W)b) : a;
            default: return a;
            }
        } else {
            switch (OP) {
            case EW_B_ADD: return (T)((W)a + (W)b);
            case EW_B_SUB: return (T)((W)a - (W)b);
            case EW_B_MUL: return (T)((W)a * (W)b);
            case EW_B_DIV: return b == 0 ? (T)0 : (T)(a / b);
            case EW_B_MOD:
            case EW_B_PYMOD: return b == 0 ? (T)0 : (T)(a % b);
            case EW_B_MAX: return a > b ? a : b;
            case EW_B_MIN: return a < b ? a : b;
            case EW_B_SHL: return b >= (T)(8 * sizeof(T)) ? (T)0 : (T)((W)a << b);
            case EW_B_SHR: return b >= (T)(8 * sizeof(T)) ? (T)0 : (T)(a >> b);
            default: return a;
            }
        }
    }
}

template <int OP, typename T, typename IdxT>
__global__ void __launch_bounds__(KCU_THREADS)
    k_binary(typename std::conditional<BinIsBool<OP>::value, uint8_t, T>::type *__restrict__ y,
             const T *__restrict__ a, const T *__restrict__ b, const __grid_constant__ kcu_bcast g) {
    KCU_GRID_STRIDE(i, g.n) {
        IdxT off[2];
        bc_offsets<2, IdxT>(g, i, off);
        y[i] = bin_op<OP, T>(a[off[0]], b[off[1]]);
    }
}

template <int OP, typename T>
static cudaError_t bin_launch(const kcu_bcast *g, void *y, const void *a, const void *b,
                              cudaStream_t st) {
    typedef typename std::conditional<BinIsBool<OP>::value, uint8_t, T>::type OT;
    if (g->idx32)
        k_binary<OP, T, uint32_t><<<grid_for(g->n), KCU_THREADS, 0, st>>>(
            (OT *)y, (const T *)a, (const T *)b, *g);
    else
        k_binary<OP, T, int64_t><<<grid_for(g->n), KCU_THREADS, 0, st>>>(
            (OT *)y, (const T *)a, (const T *)b, *g);
    return cudaGetLastError();
}

/* dtype sets per op (bit = kiln_dtype) */
#define KB(t) (1u << (unsigned)(t))
static const unsigned KCU_FLOATS = KB(KILN_DTYPE_FLOAT32) | KB(KILN_DTYPE_FLOAT16) |
                                   KB(KILN_DTYPE_BFLOAT16) | KB(KILN_DTYPE_FLOAT64);
static const unsigned KCU_UINTS = KB(KILN_DTYPE_UINT8) | KB(KILN_DTYPE_UINT16) |
                                  KB(KILN_DTYPE_UINT32) | KB(KILN_DTYPE_UINT64);
static const unsigned KCU_SINTS = KB(KILN_DTYPE_INT8) | KB(KILN_DTYPE_INT16) |
                                  KB(KILN_DTYPE_INT32) | KB(KILN_DTYPE_INT64);
/* every integer type, with the CPU's semantics (wrapping, x / 0 = x % 0 = 0) */
static const unsigned KCU_ARITH = KCU_FLOATS | KCU_SINTS | KCU_UINTS;
static const unsigned KCU_PRELU = KCU_FLOATS | KCU_SINTS;
static const unsigned KCU_CMP = KCU_ARITH | KB(KILN_DTYPE_BOOL);

static unsigned bin_mask(int op) {
    switch (op) {
    case EW_B_ADD: case EW_B_SUB: case EW_B_MUL: case EW_B_DIV: case EW_B_MOD:
    case EW_B_PYMOD: case EW_B_MAX: case EW_B_MIN:
        return KCU_ARITH;
    case EW_B_PRELU: return KCU_PRELU;
    case EW_B_POW: return KCU_FLOATS;
    case EW_B_EQ: case EW_B_LT: case EW_B_LE: case EW_B_GT: case EW_B_GE: return KCU_CMP;
    case EW_B_AND: case EW_B_OR: case EW_B_XOR: return KB(KILN_DTYPE_BOOL);
    case EW_B_SHL: case EW_B_SHR: return KCU_UINTS;
    default: return 0;
    }
}

/* one op, every dtype of its set */
template <int OP>
static cudaError_t bin_dispatch(kiln_dtype t, const kcu_bcast *g, void *y, const void *a,
                                const void *b, cudaStream_t st) {
    constexpr bool arith = !BinIsBool<OP>::value && OP != EW_B_POW && OP != EW_B_SHL &&
                           OP != EW_B_SHR;
    constexpr bool cmp = OP >= EW_B_EQ && OP <= EW_B_GE;
    constexpr bool logic = OP >= EW_B_AND && OP <= EW_B_XOR;
    constexpr bool shift = OP == EW_B_SHL || OP == EW_B_SHR;
    constexpr bool floats = arith || cmp || OP == EW_B_POW;
    constexpr bool ints = arith || cmp;
    constexpr bool uints = (ints && OP != EW_B_PRELU) || shift;
    switch (t) {
    case KILN_DTYPE_FLOAT32: if constexpr (floats) return bin_launch<OP, float>(g, y, a, b, st); break;
    case KILN_DTYPE_FLOAT16: if constexpr (floats) return bin_launch<OP, __half>(g, y, a, b, st); break;
    case KILN_DTYPE_BFLOAT16: if constexpr (floats) return bin_launch<OP, __nv_bfloat16>(g, y, a, b, st); break;
    case KILN_DTYPE_FLOAT64: if constexpr (floats) return bin_launch<OP, double>(g, y, a, b, st); break;
    case KILN_DTYPE_INT32: if constexpr (ints) return bin_launch<OP, int32_t>(g, y, a, b, st); break;
    case KILN_DTYPE_INT64: if constexpr (ints) return bin_launch<OP, int64_t>(g, y, a, b, st); break;
    case KILN_DTYPE_INT8: if constexpr (ints) return bin_launch<OP, int8_t>(g, y, a, b, st); break;
    case KILN_DTYPE_INT16: if constexpr (ints) return bin_launch<OP, int16_t>(g, y, a, b, st); break;
    case KILN_DTYPE_UINT8: if constexpr (uints) return bin_launch<OP, uint8_t>(g, y, a, b, st); break;
    case KILN_DTYPE_BOOL: if constexpr (cmp || logic) return bin_launch<OP, uint8_t>(g, y, a, b, st); break;
    case KILN_DTYPE_UINT16: if constexpr (uints) return bin_launch<OP, uint16_t>(g, y, a, b, st); break;
    case KILN_DTYPE_UINT32: if constexpr (uints) return bin_launch<OP, uint32_t>(g, y, a, b, st); break;
    case KILN_DTYPE_UINT64: if constexpr (uints) return bin_launch<OP, uint64_t>(g, y, a, b, st); break;
    default: break;
    }
    return cudaErrorInvalidValue;
}

/* ---- Mean scaling, Where, Clip ------------------------------------------------------ */

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS) k_div_scalar(T *__restrict__ y, int64_t n, float d) {
    typedef typename Num<T>::C C;
    KCU_GRID_STRIDE(i, n) y[i] = Num<T>::store(Num<T>::load(y[i]) / (C)d);
}

template <typename E, typename IdxT>
__global__ void __launch_bounds__(KCU_THREADS)
    k_where(E *__restrict__ out, const uint8_t *__restrict__ c, const E *__restrict__ x,
            const E *__restrict__ y, const __grid_constant__ kcu_bcast g) {
    KCU_GRID_STRIDE(i, g.n) {
        IdxT off[3];
        bc_offsets<3, IdxT>(g, i, off);
        out[i] = c[off[0]] ? x[off[1]] : y[off[2]];
    }
}

template <typename E>
static cudaError_t where_launch(const kcu_bcast *g, void *out, const uint8_t *c, const void *x,
                                const void *y, cudaStream_t st) {
    if (g->idx32)
        k_where<E, uint32_t><<<grid_for(g->n), KCU_THREADS, 0, st>>>((E *)out, c, (const E *)x,
                                                                    (const E *)y, *g);
    else
        k_where<E, int64_t><<<grid_for(g->n), KCU_THREADS, 0, st>>>((E *)out, c, (const E *)x,
                                                                   (const E *)y, *g);
    return cudaGetLastError();
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_clip(const T *__restrict__ x, T *__restrict__ y, int64_t n, const T *lo_dev, const T *hi_dev,
           int has_lo, int has_hi, double lo_f, double hi_f, int64_t lo_i, int64_t hi_i) {
    typedef typename Num<T>::C C;
    if constexpr (IsFloat<T>::value) {
        C lo = has_lo ? (lo_dev ? Num<T>::load(*lo_dev) : (C)lo_f) : -(C)INFINITY;
        C hi = has_hi ? (hi_dev ? Num<T>::load(*hi_dev) : (C)hi_f) : (C)INFINITY;
        KCU_GRID_STRIDE(i, n) {
            C v = Num<T>::load(x[i]);
            v = v < lo ? lo : v;
            y[i] = Num<T>::store(v > hi ? hi : v);
        }
    } else {
        T lo = has_lo ? (lo_dev ? *lo_dev : (T)lo_i) : (T)0;
        T hi = has_hi ? (hi_dev ? *hi_dev : (T)hi_i) : (T)0;
        KCU_GRID_STRIDE(i, n) {
            T v = x[i];
            if (has_lo && v < lo) v = lo;
            if (has_hi && v > hi) v = hi;
            y[i] = v;
        }
    }
}

} /* namespace kcu */

using namespace kcu;

extern "C" {

int kcu_unary_has(int op, kiln_dtype t) {
    if (op < EW_U_ABS || op > EW_U_SHRINK) return 0;
    switch (t) {
    case KILN_DTYPE_FLOAT32: case KILN_DTYPE_FLOAT16: case KILN_DTYPE_BFLOAT16:
    case KILN_DTYPE_FLOAT64:
        return 1;
    case KILN_DTYPE_INT32: case KILN_DTYPE_INT64: return unary_int_op(op);
    default: return 0;
    }
}

cudaError_t kcu_unary(int op, kiln_dtype t, const void *x, void *y, int64_t n, float alpha,
                      float beta, float gamma, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    switch (t) {
    case KILN_DTYPE_FLOAT32: return unary_float<float>(op, x, y, n, alpha, beta, gamma, stream);
    case KILN_DTYPE_FLOAT16: return unary_float<__half>(op, x, y, n, alpha, beta, gamma, stream);
    case KILN_DTYPE_BFLOAT16:
        return unary_float<__nv_bfloat16>(op, x, y, n, alpha, beta, gamma, stream);
    case KILN_DTYPE_FLOAT64: return unary_float<double>(op, x, y, n, alpha, beta, gamma, stream);
    case KILN_DTYPE_INT32: return unary_int<int32_t>(op, x, y, n, stream);
    case KILN_DTYPE_INT64: return unary_int<int64_t>(op, x, y, n, stream);
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t kcu_predicate(int op, kiln_dtype t, const void *x, uint8_t *y, int64_t n,
                          int detect_pos, int detect_neg, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (op == EW_U_NOT) {
        if (t != KILN_DTYPE_BOOL) return cudaErrorInvalidValue;
        k_not<<<grid_for(n), KCU_THREADS, 0, stream>>>((const uint8_t *)x, y, n);
        return cudaGetLastError();
    }
    bool done = false;
    KCU_SWITCH_FLOAT(t, {
        if (op == EW_U_ISNAN)
            k_isnan<T_><<<grid_for(n), KCU_THREADS, 0, stream>>>((const T_ *)x, y, n);
        else
            k_isinf<T_><<<grid_for(n), KCU_THREADS, 0, stream>>>((const T_ *)x, y, n, detect_pos,
                                                                 detect_neg);
        done = true;
    })
    if (!done) return cudaErrorInvalidValue;
    return cudaGetLastError();
}

int kcu_binary_has(int op, kiln_dtype t) {
    return (unsigned)t < 32 && (bin_mask(op) & KB(t)) != 0;
}

cudaError_t kcu_binary(int op, kiln_dtype t, const kcu_bcast *g, void *y, const void *a,
                       const void *b, cudaStream_t stream) {
    if (g->n <= 0) return cudaSuccess;
    if (!kcu_binary_has(op, t)) return cudaErrorInvalidValue;
    switch (op) {
#define KCU_B_CASE(OP) case OP: return bin_dispatch<OP>(t, g, y, a, b, stream);
        KCU_B_CASE(EW_B_ADD) KCU_B_CASE(EW_B_SUB) KCU_B_CASE(EW_B_MUL) KCU_B_CASE(EW_B_DIV)
        KCU_B_CASE(EW_B_MOD) KCU_B_CASE(EW_B_PYMOD) KCU_B_CASE(EW_B_MAX)
        KCU_B_CASE(EW_B_MIN) KCU_B_CASE(EW_B_PRELU) KCU_B_CASE(EW_B_POW)
        KCU_B_CASE(EW_B_EQ) KCU_B_CASE(EW_B_LT) KCU_B_CASE(EW_B_LE) KCU_B_CASE(EW_B_GT)
        KCU_B_CASE(EW_B_GE) KCU_B_CASE(EW_B_AND) KCU_B_CASE(EW_B_OR) KCU_B_CASE(EW_B_XOR)
        KCU_B_CASE(EW_B_SHL) KCU_B_CASE(EW_B_SHR)
#undef KCU_B_CASE
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t kcu_div_scalar(kiln_dtype t, void *y, int64_t n, float d, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    bool done = false;
    KCU_SWITCH_FLOAT(t, {
        k_div_scalar<T_><<<grid_for(n), KCU_THREADS, 0, stream>>>((T_ *)y, n, d);
        done = true;
    })
    if (!done) return cudaErrorInvalidValue;
    return cudaGetLastError();
}

cudaError_t kcu_where(size_t es, const kcu_bcast *g, void *out, const uint8_t *cond,
                      const void *x, const void *y, cudaStream_t stream) {
    if (g->n <= 0) return cudaSuccess;
    switch (es) {
    case 1: return where_launch<uint8_t>(g, out, cond, x, y, stream);
    case 2: return where_launch<uint16_t>(g, out, cond, x, y, stream);
    case 4: return where_launch<uint32_t>(g, out, cond, x, y, stream);
    case 8: return where_launch<uint64_t>(g, out, cond, x, y, stream);
    default: return cudaErrorInvalidValue;
    }
}

int kcu_clip_has(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT32: case KILN_DTYPE_FLOAT16: case KILN_DTYPE_BFLOAT16:
    case KILN_DTYPE_FLOAT64: case KILN_DTYPE_INT8: case KILN_DTYPE_UINT8: case KILN_DTYPE_INT32:
    case KILN_DTYPE_INT64:
        return 1;
    default: return 0;
    }
}

cudaError_t kcu_clip(kiln_dtype t, const void *x, void *y, int64_t n, const kcu_clip_bounds *b,
                     cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
#define KCU_CLIP(TY)                                                                          \
    k_clip<TY><<<grid_for(n), KCU_THREADS, 0, stream>>>(                                      \
        (const TY *)x, (TY *)y, n, (const TY *)b->lo_dev, (const TY *)b->hi_dev, b->has_lo,   \
        b->has_hi, b->lo_f, b->hi_f, b->lo_i, b->hi_i);                                       \
    break;
    switch (t) {
    case KILN_DTYPE_FLOAT32: KCU_CLIP(float)
    case KILN_DTYPE_FLOAT16: KCU_CLIP(__half)
    case KILN_DTYPE_BFLOAT16: KCU_CLIP(__nv_bfloat16)
    case KILN_DTYPE_FLOAT64: KCU_CLIP(double)
    case KILN_DTYPE_INT8: KCU_CLIP(int8_t)
    case KILN_DTYPE_UINT8: KCU_CLIP(uint8_t)
    case KILN_DTYPE_INT32: KCU_CLIP(int32_t)
    case KILN_DTYPE_INT64: KCU_CLIP(int64_t)
    default: return cudaErrorInvalidValue;
    }
#undef KCU_CLIP
    return cudaGetLastError();
}

} /* extern "C" */
