/* k_index.cu -- kernels of the "index" family: ArgMax/ArgMin, TopK (bitonic
 * sort in shared or global memory), CumSum, GatherElements, GatherND,
 * ScatterElements/ScatterND (atomic read-modify-write for the reductions),
 * OneHot, Trilu, Range, EyeLike. Semantics follow the CPU kernels
 * (src/ops/reduce_index.c, tensor_index.c, tensor_gen.c) operation for
 * operation; where they cannot (out-of-range indices, duplicate scatter
 * targets) docs/cuda.md says so. */
#include "k_common.cuh"

#include "cuda_index.h"

namespace kcu {

/* bool is stored as one byte; a type of its own so that the reductions know it */
struct kbool {
    uint8_t v;
};

/* KCU_SWITCH_NUMERIC(t, body): body with T_ bound to the element type of t
 * (every kcu_index_numeric dtype); other dtypes run nothing (callers check
 * kcu_index_numeric first). */
#define KCU_SWITCH_NUMERIC(t, ...)                                                     \
    switch (t) {                                                                        \
        KCU_CASE(KILN_DTYPE_INT8, int8_t, __VA_ARGS__)                                  \
        KCU_CASE(KILN_DTYPE_INT16, int16_t, __VA_ARGS__)                                \
        KCU_CASE(KILN_DTYPE_INT32, int32_t, __VA_ARGS__)                                \
        KCU_CASE(KILN_DTYPE_INT64, int64_t, __VA_ARGS__)                                \
        KCU_CASE(KILN_DTYPE_UINT8, uint8_t, __VA_ARGS__)                                \
        KCU_CASE(KILN_DTYPE_UINT16, uint16_t, __VA_ARGS__)                              \
        KCU_CASE(KILN_DTYPE_UINT32, uint32_t, __VA_ARGS__)                              \
        KCU_CASE(KILN_DTYPE_UINT64, uint64_t, __VA_ARGS__)                              \
    default: KCU_SWITCH_FLOAT(t, __VA_ARGS__) break;                                    \
    }


static inline cudaError_t idx_check(kiln_dtype it) {
    return (it == KILN_DTYPE_INT32 || it == KILN_DTYPE_INT64) ? cudaSuccess : cudaErrorInvalidValue;
}

/* index i of an int32 (i64 == 0) or int64 index array */
__device__ __forceinline__ int64_t load_index(const void *p, int i64, int64_t i) {
    return i64 ? ((const int64_t *)p)[i] : (int64_t)((const int32_t *)p)[i];
}

/* ---- ArgMax / ArgMin --------------------------------------------------------------- */

template <typename C> __device__ __forceinline__ bool arg_take(bool is_max, bool last, C v, C best) {
    return is_max ? (last ? v >= best : v > best) : (last ? v <= best : v < best);
}

/* one thread per output: the CPU kernel's loop */
template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_argreduce(const T *__restrict__ x, int64_t *__restrict__ y, int64_t n, int64_t R,
                int64_t inner, bool is_max, bool last) {
    typedef typename Num<T>::C C;
    KCU_GRID_STRIDE(t, n) {
        int64_t o = t / inner, i = t % inner;
        const T *p = x + o * R * inner + i;
        C best = Num<T>::load(p[0]);
        int64_t bi = 0;
        for (int64_t r = 1; r < R; r++) {
            C v = Num<T>::load(p[r * inner]);
            if (arg_take(is_max, last, v, best)) {
                best = v;
                bi = r;
            }
        }
        y[t] = bi;
    }
}

/* one block per row (inner == 1, long rows): a NaN is never taken by the
 * sequential loop unless it is element 0, so the block reduces over the
 * other elements and element 0 decides at the end. */
template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_argreduce_row(const T *__restrict__ x, int64_t *__restrict__ y, int64_t rows, int64_t R,
                    bool is_max, bool last) {
    typedef typename Num<T>::C C;
    __shared__ C sv[KCU_THREADS];
    __shared__ int64_t si[KCU_THREADS];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T *p = x + row * R;
        C best = C();
        int64_t bi = -1;
        for (int64_t r = threadIdx.x; r < R; r += blockDim.x) {
            C v = Num<T>::load(p[r]);
            if (v != v) continue; /* NaN (floating dtypes only) */
            if (bi < 0 || arg_take(is_max, false, v, best) || (v == best && last)) {
                best = v;
                bi = r;
            }
        }
        sv[threadIdx.x] = best;
        si[threadIdx.x] = bi;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if ((int)threadIdx.x < s) {
                C a = sv[threadIdx.x], b = sv[threadIdx.x + s];
                int64_t ai = si[threadIdx.x], bj = si[threadIdx.x + s];
                bool take_b;
                if (bj < 0) take_b = false;
                else if (ai < 0) take_b = true;
                else if (a == b) take_b = last ? bj > ai : bj < ai;
                else take_b = is_max ? b > a : b < a;
                if (take_b) {
                    sv[threadIdx.x] = b;
                    si[threadIdx.x] = bj;
                }
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            C v0 = Num<T>::load(p[0]);
            int64_t r = si[0];
            y[row] = (v0 != v0 || r < 0) ? 0 : r;
        }
        __syncthreads();
    }
}

template <typename T>
static cudaError_t argreduce_launch(int is_max, int last, const void *x, int64_t *y, int64_t outer,
                                    int64_t R, int64_t inner, cudaStream_t st) {
    int64_t n = outer * inner;
    if (inner == 1 && R >= 1024 && n < 4096) {
        unsigned g = (unsigned)(n < 65535 ? n : 65535);
        k_argreduce_row<T><<<g, KCU_THREADS, 0, st>>>((const T *)x, y, n, R, is_max != 0, last != 0);
    } else {
        k_argreduce<T><<<grid_for(n), KCU_THREADS, 0, st>>>((const T *)x, y, n, R, inner, is_max != 0,
                                                          last != 0);
    }
    return cudaGetLastError();
}

/* ---- TopK ------------------------------------------------------------------------------
 * Every element gets a 64-bit key that orders like the CPU comparison: NaN
 * above everything, -0 == +0, integers by value. Items (key, index) are
 * sorted by "before": key descending (largest) or ascending, then index
 * ascending. Padding items (index INT32_MAX) sort after every real one. */

__device__ __forceinline__ uint64_t fkey32(float f) {
    if (f != f) return ~0ull;
    if (f == 0.f) f = 0.f; /* -0 -> +0 */
    uint32_t b = __float_as_uint(f);
    b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return (uint64_t)b;
}
__device__ __forceinline__ uint64_t fkey64(double f) {
    if (f != f) return ~0ull;
    if (f == 0.0) f = 0.0;
    uint64_t b = (uint64_t)__double_as_longlong(f);
    b = (b & 0x8000000000000000ull) ? ~b : (b | 0x8000000000000000ull);
    /* +inf maps below ~0 (NaN): its bits end in zeros */
    return b;
}
template <typename T> struct TKey {
    /* signed integers: flip the sign bit; unsigned: as is */
    static __device__ __forceinline__ uint64_t key(T v) {
        if constexpr (std::is_signed<T>::value)
            return (uint64_t)(int64_t)v ^ 0x8000000000000000ull;
        else
            return (uint64_t)v;
    }
};
template <> struct TKey<float> {
    static __device__ __forceinline__ uint64_t key(float v) { return fkey32(v); }
};
template <> struct TKey<double> {
    static __device__ __forceinline__ uint64_t key(double v) { return fkey64(v); }
};
template <> struct TKey<__half> {
    static __device__ __forceinline__ uint64_t key(__half v) { return fkey32(__half2float(v)); }
};
template <> struct TKey<__nv_bfloat16> {
    static __device__ __forceinline__ uint64_t key(__nv_bfloat16 v) {
        return fkey32(__bfloat162float(v));
    }
};

#define KCU_TOPK_PAD 0x7fffffff

__device__ __forceinline__ bool tk_before(bool largest, uint64_t ka, int32_t ia, uint64_t kb,
                                          int32_t ib) {
    if (ka != kb) return largest ? ka > kb : ka < kb;
    return ia < ib;
}

/* one bitonic compare-exchange step on item pair (i, i + stride) of a sequence
 * sorted ascending in "before" order when (i + off) & size is 0 (off: the
 * position of item 0 in the whole row) */
__device__ __forceinline__ void tk_step(bool largest, uint64_t *key, int32_t *idx, int64_t i,
                                        int64_t stride, int64_t size, int64_t off) {
    int64_t j = i + stride;
    bool up = ((i + off) & size) == 0;
    uint64_t ki = key[i], kj = key[j];
    int32_t ii = idx[i], ij = idx[j];
    bool swap = up ? tk_before(largest, kj, ij, ki, ii) : tk_before(largest, ki, ii, kj, ij);
    if (swap) {
        key[i] = kj;
        key[j] = ki;
        idx[i] = ij;
        idx[j] = ii;
    }
}

template <typename T>
__global__ void __launch_bounds__(512)
    k_topk_shared(const T *__restrict__ x, T *__restrict__ v, int64_t *__restrict__ ix,
                  int64_t rows, int64_t R, int64_t inner, int64_t k, int P, bool largest) {
    __shared__ uint64_t key[KCU_TOPK_SHARED];
    __shared__ int32_t idx[KCU_TOPK_SHARED];
    const uint64_t pad_key = largest ? 0ull : ~0ull;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        int64_t o = row / inner, in = row % inner;
        const T *p = x + o * R * inner + in;
        for (int i = threadIdx.x; i < P; i += blockDim.x) {
            if (i < R) {
                key[i] = TKey<T>::key(p[(int64_t)i * inner]);
                idx[i] = i;
            } else {
                key[i] = pad_key;
                idx[i] = KCU_TOPK_PAD;
            }
        }
        __syncthreads();
        for (int size = 2; size <= P; size <<= 1)
            for (int stride = size >> 1; stride > 0; stride >>= 1) {
                for (int t = threadIdx.x; t < P / 2; t += blockDim.x)
                    tk_step(largest, key, idx, 2 * t - (t & (stride - 1)), stride, size, 0);
                __syncthreads();
            }
        for (int j = threadIdx.x; j < k; j += blockDim.x) {
            int64_t op = (o * k + j) * inner + in;
            int64_t r = idx[j];
            v[op] = p[r * inner];
            if (ix) ix[op] = r;
        }
        __syncthreads();
    }
}

/* global-memory version: rows of P items in scratch */
template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_topk_init(const T *__restrict__ x, uint64_t *__restrict__ key, int32_t *__restrict__ idx,
                int64_t rows, int64_t R, int64_t inner, int64_t P, bool largest) {
    KCU_GRID_STRIDE(e, rows * P) {
        int64_t row = e / P, i = e % P;
        if (i < R) {
            int64_t o = row / inner, in = row % inner;
            key[e] = TKey<T>::key(x[(o * R + i) * inner + in]);
            idx[e] = (int32_t)i;
        } else {
            key[e] = largest ? 0ull : ~0ull;
            idx[e] = KCU_TOPK_PAD;
        }
    }
}

__global__ void __launch_bounds__(KCU_THREADS)
    k_topk_step(uint64_t *__restrict__ key, int32_t *__restrict__ idx, int64_t rows, int64_t P,
                int64_t stride, int64_t size, bool largest) {
    const int64_t half = P / 2;
    KCU_GRID_STRIDE(e, rows * half) {
        int64_t row = e / half, t = e % half;
        tk_step(largest, key + row * P, idx + row * P, 2 * t - (t & (stride - 1)), stride, size, 0);
    }
}

/* The steps of sizes size_lo..size_hi (the first from stride `first`) whose
 * strides are below KCU_TOPK_SHARED, on each chunk of KCU_TOPK_SHARED items
 * in shared memory (one launch instead of one per step). */
__global__ void __launch_bounds__(512)
    k_topk_chunks(uint64_t *__restrict__ key, int32_t *__restrict__ idx, int64_t rows, int64_t P,
                  int64_t size_lo, int64_t size_hi, int64_t first, bool largest) {
    __shared__ uint64_t sk[KCU_TOPK_SHARED];
    __shared__ int32_t si[KCU_TOPK_SHARED];
    const int64_t nch = P / KCU_TOPK_SHARED;
    for (int64_t b = blockIdx.x; b < rows * nch; b += gridDim.x) {
        const int64_t base = b * KCU_TOPK_SHARED, off = (b % nch) * KCU_TOPK_SHARED;
        for (int i = threadIdx.x; i < KCU_TOPK_SHARED; i += blockDim.x) {
            sk[i] = key[base + i];
            si[i] = idx[base + i];
        }
        __syncthreads();
        int64_t fs = first;
        for (int64_t size = size_lo; size <= size_hi; size <<= 1, fs = size >> 1)
            for (int64_t stride = fs; stride > 0; stride >>= 1) {
                for (int t = threadIdx.x; t < KCU_TOPK_SHARED / 2; t += blockDim.x)
                    tk_step(largest, sk, si, 2 * t - (t & (stride - 1)), stride, size, off);
                __syncthreads();
            }
        for (int i = threadIdx.x; i < KCU_TOPK_SHARED; i += blockDim.x) {
            key[base + i] = sk[i];
            idx[base + i] = si[i];
        }
        __syncthreads();
    }
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_topk_out(const T *__restrict__ x, const int32_t *__restrict__ idx, T *__restrict__ v,
               int64_t *__restrict__ ix, int64_t rows, int64_t R, int64_t inner, int64_t k,
               int64_t P) {
    KCU_GRID_STRIDE(e, rows * k) {
        int64_t row = e / k, j = e % k;
        int64_t o = row / inner, in = row % inner;
        int64_t r = idx[row * P + j];
        int64_t op = (o * k + j) * inner + in;
        v[op] = x[(o * R + r) * inner + in];
        if (ix) ix[op] = r;
    }
}

static int64_t pow2_at_least(int64_t n) {
    int64_t p = 1;
    while (p < n) p <<= 1;
    return p;
}

template <typename T>
static cudaError_t topk_launch(int largest, const void *xv, void *vv, int64_t *ix, int64_t outer,
                               int64_t R, int64_t inner, int64_t k, void *scratch,
                               cudaStream_t st) {
    const T *x = (const T *)xv;
    T *v = (T *)vv;
    int64_t rows = outer * inner, P = pow2_at_least(R);
    if (P <= KCU_TOPK_SHARED) {
        int threads = (int)(P / 2 < 32 ? 32 : P / 2 > 512 ? 512 : P / 2);
        unsigned g = (unsigned)(rows < 65535 ? rows : 65535);
        k_topk_shared<T><<<g, threads, 0, st>>>(x, v, ix, rows, R, inner, k, (int)P, largest != 0);
        return cudaGetLastError();
    }
    if (!scratch) return cudaErrorInvalidValue;
    uint64_t *key = (uint64_t *)scratch;
    int32_t *idx = (int32_t *)(key + rows * P);
    k_topk_init<T><<<grid_for(rows * P), KCU_THREADS, 0, st>>>(x, key, idx, rows, R, inner, P,
                                                               largest != 0);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    /* every chunk of KCU_TOPK_SHARED items sorted in shared memory; then per
     * larger size the steps of strides >= KCU_TOPK_SHARED in global memory
     * and the rest in shared memory again */
    const int64_t nch = rows * (P / KCU_TOPK_SHARED);
    const unsigned gch = (unsigned)(nch < 65535 ? nch : 65535);
    k_topk_chunks<<<gch, 512, 0, st>>>(key, idx, rows, P, 2, KCU_TOPK_SHARED, 1, largest != 0);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    for (int64_t size = 2 * KCU_TOPK_SHARED; size <= P; size <<= 1) {
        for (int64_t stride = size >> 1; stride >= KCU_TOPK_SHARED; stride >>= 1) {
            k_topk_step<<<grid_for(rows * P / 2), KCU_THREADS, 0, st>>>(key, idx, rows, P, stride,
                                                                         size, largest != 0);
            if ((e = cudaGetLastError()) != cudaSuccess) return e;
        }
        k_topk_chunks<<<gch, 512, 0, st>>>(key, idx, rows, P, size, size, KCU_TOPK_SHARED / 2,
                                          largest != 0);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    k_topk_out<T><<<grid_for(rows * k), KCU_THREADS, 0, st>>>(x, idx, v, ix, rows, R, inner, k, P);
    return cudaGetLastError();
}

/* ---- CumSum -------------------------------------------------------------------------- */

/* the CPU kernel's accumulator: Num<T>'s for floating dtypes (fp32 for
 * f16/bf16/f32, f64), unsigned 32/64-bit wrapping arithmetic for integers */
template <typename T, bool Int = std::is_integral<T>::value> struct CsAcc : Num<T> {};
template <typename T> struct CsAcc<T, true> {
    typedef typename std::conditional<(sizeof(T) > 4), uint64_t, uint32_t>::type C;
    static __device__ __forceinline__ C load(T v) { return (C)v; }
    static __device__ __forceinline__ T store(C v) { return (T)v; }
};

/* Running sums of line x/y (element stride `step`, `len` elements) over the
 * positions j in [b, e) of the scan order (reverse: from the end), from acc. */
template <typename T>
__device__ __forceinline__ void cumsum_run(const T *x, T *y, int64_t len, int64_t step, int64_t b,
                                           int64_t e, typename CsAcc<T>::C acc, bool exclusive,
                                           bool reverse) {
    for (int64_t j = b; j < e; j++) {
        int64_t p = (reverse ? len - 1 - j : j) * step;
        typename CsAcc<T>::C v = CsAcc<T>::load(x[p]);
        if (exclusive) {
            y[p] = CsAcc<T>::store(acc);
            acc += v;
        } else {
            acc += v;
            y[p] = CsAcc<T>::store(acc);
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_cumsum(const T *__restrict__ x, T *__restrict__ y, int64_t lines, int64_t len, int64_t inner,
             bool exclusive, bool reverse) {
    typedef typename CsAcc<T>::C A;
    KCU_GRID_STRIDE(t, lines) {
        int64_t base = (t / inner) * len * inner + t % inner;
        cumsum_run<T>(x + base, y + base, len, inner, 0, len, A(0), exclusive, reverse);
    }
}

/* integers along contiguous long lines: one block per line; thread t scans
 * its contiguous segment, the segment totals are scanned in shared memory,
 * then each thread writes its segment. Wrapping integer sums are exact in
 * any order, so this matches the sequential CPU loop bit for bit. */
template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_cumsum_line(const T *x, T *y, int64_t lines, int64_t len, bool exclusive, bool reverse) {
    typedef typename CsAcc<T>::C A;
    __shared__ A tot[KCU_THREADS];
    const int64_t seg = (len + blockDim.x - 1) / blockDim.x;
    for (int64_t line = blockIdx.x; line < lines; line += gridDim.x) {
        const T *xl = x + line * len;
        T *yl = y + line * len;
        const int64_t b = (int64_t)threadIdx.x * seg, e = b + seg < len ? b + seg : len;
        A s = A(0);
        for (int64_t j = b; j < e; j++) s += CsAcc<T>::load(xl[reverse ? len - 1 - j : j]);
        tot[threadIdx.x] = s;
        __syncthreads();
        if (threadIdx.x == 0) {
            A run = A(0);
            for (int t = 0; t < (int)blockDim.x; t++) {
                A v = tot[t];
                tot[t] = run;
                run += v;
            }
        }
        __syncthreads();
        cumsum_run<T>(xl, yl, len, 1, b, e, tot[threadIdx.x], exclusive, reverse);
        __syncthreads();
    }
}

template <typename T>
static cudaError_t cumsum_launch(const void *x, void *y, int64_t outer, int64_t len, int64_t inner,
                                 bool exclusive, bool reverse, cudaStream_t st) {
    int64_t lines = outer * inner;
    if (std::is_integral<T>::value && inner == 1 && len >= KCU_CUMSUM_LINE) {
        unsigned g = (unsigned)(lines < 65535 ? lines : 65535);
        k_cumsum_line<T><<<g, KCU_THREADS, 0, st>>>((const T *)x, (T *)y, lines, len, exclusive,
                                                     reverse);
    } else {
        k_cumsum<T><<<grid_for(lines), KCU_THREADS, 0, st>>>((const T *)x, (T *)y, lines, len, inner,
                                                             exclusive, reverse);
    }
    return cudaGetLastError();
}

/* ---- GatherElements / ScatterElements ------------------------------------------------ */

/* offset in data of index element i (without the axis part); *c_axis... */
__device__ __forceinline__ int64_t elems_base(const kcu_elems &g, int64_t i) {
    int64_t rem = i, off = 0;
    for (int d = g.rank - 1; d >= 0; d--) {
        int64_t c = rem % g.idims[d];
        rem /= g.idims[d];
        if (d != g.axis) off += c * g.xst[d];
    }
    return off;
}

template <typename E>
__global__ void __launch_bounds__(KCU_THREADS)
    k_gather_elements(const E *__restrict__ x, const void *__restrict__ ind, int i64,
                      E *__restrict__ y, const __grid_constant__ kcu_elems g) {
    KCU_GRID_STRIDE(i, g.n) {
        int64_t v = load_index(ind, i64, i);
        if (v < 0) v += g.axis_dim;
        if (v < 0 || v >= g.axis_dim) y[i] = E{};
        else y[i] = x[elems_base(g, i) + v * g.xst[g.axis]];
    }
}

/* dst = dst (red) src, computed like the CPU kernel's tx_reduce */
template <typename T> struct Red {
    static __device__ __forceinline__ T apply(int red, T a, T b) {
        typedef typename Num<T>::C C;
        C x = Num<T>::load(a), u = Num<T>::load(b), r;
        if constexpr (std::is_integral<C>::value) {
            /* wrapping add/mul through the unsigned type */
            typedef typename std::make_unsigned<C>::type U;
            switch (red) {
            case KCU_RED_ADD: r = (C)(U)((U)x + (U)u); break;
            case KCU_RED_MUL: r = (C)(U)((U)x * (U)u); break;
            case KCU_RED_MAX: r = x > u ? x : u; break;
            default: r = x < u ? x : u; break;
            }
        } else {
            switch (red) {
            case KCU_RED_ADD: r = x + u; break;
            case KCU_RED_MUL: r = x * u; break;
            case KCU_RED_MAX: r = x > u ? x : u; break;
            default: r = x < u ? x : u; break;
            }
        }
        return Num<T>::store(r);
    }
};
template <> struct Red<kbool> {
    static __device__ __forceinline__ kbool apply(int red, kbool a, kbool b) {
        bool x = a.v != 0, u = b.v != 0;
        kbool r;
        r.v = (red == KCU_RED_ADD || red == KCU_RED_MAX) ? (x || u) : (x && u);
        return r;
    }
};

/* *p = apply(red, *p, u) atomically: compare-and-swap on the aligned 4-byte
 * word that holds *p (1-, 2- and 4-byte T) or on the 8-byte word. */
template <typename T>
__device__ __forceinline__ void atomic_reduce(T *p, int red, T u) {
    static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                  "atomic_reduce: element size");
    if constexpr (sizeof(T) == 8) {
        unsigned long long *w = (unsigned long long *)p;
        unsigned long long old = *w, assumed;
        do {
            assumed = old;
            T cur;
            memcpy(&cur, &assumed, 8);
            T nv = Red<T>::apply(red, cur, u);
            unsigned long long nb;
            memcpy(&nb, &nv, 8);
            if (nb == assumed) break;
            old = atomicCAS(w, assumed, nb);
        } while (old != assumed);
    } else if constexpr (sizeof(T) == 4) {
        unsigned int *w = (unsigned int *)p;
        unsigned int old = *w, assumed;
        do {
            assumed = old;
            T cur;
            memcpy(&cur, &assumed, 4);
            T nv = Red<T>::apply(red, cur, u);
            unsigned int nb;
            memcpy(&nb, &nv, 4);
            if (nb == assumed) break;
            old = atomicCAS(w, assumed, nb);
        } while (old != assumed);
    } else {
        /* 1- and 2-byte elements: the aligned 4-byte word that holds them */
        uintptr_t a = (uintptr_t)p;
        unsigned int *w = (unsigned int *)(a & ~(uintptr_t)3);
        const unsigned shift = (unsigned)(a & 3) * 8;
        const unsigned mask = ((1u << (8 * sizeof(T))) - 1u) << shift;
        unsigned int old = *w, assumed;
        do {
            assumed = old;
            unsigned int bits = (assumed & mask) >> shift;
            T cur;
            memcpy(&cur, &bits, sizeof(T)); /* little-endian: the low bytes */
            T nv = Red<T>::apply(red, cur, u);
            unsigned int nbits = 0;
            memcpy(&nbits, &nv, sizeof(T));
            unsigned int nw = (assumed & ~mask) | ((nbits << shift) & mask);
            if (nw == assumed) break;
            old = atomicCAS(w, assumed, nw);
        } while (old != assumed);
    }
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_scatter_elements(const void *__restrict__ ind, int i64, const T *__restrict__ upd,
                       T *__restrict__ y, int red, const __grid_constant__ kcu_elems g) {
    KCU_GRID_STRIDE(i, g.n) {
        int64_t v = load_index(ind, i64, i);
        if (v < 0) v += g.axis_dim;
        if (v < 0 || v >= g.axis_dim) continue;
        T *dst = y + elems_base(g, i) + v * g.xst[g.axis];
        if (red == KCU_RED_NONE) *dst = upd[i];
        else atomic_reduce(dst, red, upd[i]);
    }
}

/* ---- GatherND / ScatterND ------------------------------------------------------------- */

/* data offset of tuple u, or -1 when an index is out of range */
__device__ __forceinline__ int64_t nd_off(const kcu_nd &g, const int64_t *ind, int64_t u) {
    int64_t off = (u / g.T) * g.batch_stride;
    const int64_t *tp = ind + u * g.m;
    for (int j = 0; j < g.m; j++) {
        int64_t v = tp[j];
        if (v < 0) v += g.ddim[j];
        if (v < 0 || v >= g.ddim[j]) return -1;
        off += v * g.dst[j];
    }
    return off;
}

template <typename E>
__global__ void __launch_bounds__(KCU_THREADS)
    k_gather_nd(const E *__restrict__ x, const int64_t *__restrict__ ind, E *__restrict__ y,
                const __grid_constant__ kcu_nd g) {
    const int64_t n = g.B * g.T * g.slice;
    KCU_GRID_STRIDE(e, n) {
        int64_t u = e / g.slice, s = e % g.slice;
        int64_t off = nd_off(g, ind, u);
        y[e] = off < 0 ? E{} : x[off + s];
    }
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_scatter_nd(const int64_t *__restrict__ ind, const T *__restrict__ upd, T *__restrict__ y,
                 int red, const __grid_constant__ kcu_nd g) {
    const int64_t n = g.B * g.T * g.slice;
    KCU_GRID_STRIDE(e, n) {
        int64_t u = e / g.slice, s = e % g.slice;
        int64_t off = nd_off(g, ind, u);
        if (off < 0) continue;
        if (red == KCU_RED_NONE) y[off + s] = upd[e];
        else atomic_reduce(y + off + s, red, upd[e]);
    }
}

/* ---- OneHot, Trilu, Range, EyeLike ------------------------------------------------------ */

template <typename E>
__global__ void __launch_bounds__(KCU_THREADS)
    k_onehot(const void *__restrict__ ind, int i64, const E *__restrict__ vals, E *__restrict__ y,
             int64_t outer, int64_t depth, int64_t inner) {
    const E off = vals[0], on = vals[1];
    KCU_GRID_STRIDE(e, outer * depth * inner) {
        int64_t i = e % inner, t = e / inner;
        int64_t d = t % depth, o = t / depth;
        int64_t v = load_index(ind, i64, o * inner + i);
        if (v < 0) v += depth;
        y[e] = v == d ? on : off;
    }
}

template <typename E>
__global__ void __launch_bounds__(KCU_THREADS)
    k_trilu(const E *__restrict__ x, E *__restrict__ y, int64_t n, int64_t R, int64_t C, bool upper,
            int64_t k, const void *k_dev, int k64) {
    if (k_dev) k = load_index(k_dev, k64, 0);
    KCU_GRID_STRIDE(e, n) {
        int64_t j = e % C, i = (e / C) % R;
        bool keep = upper ? j >= i + k : j <= i + k;
        y[e] = keep ? x[e] : E{};
    }
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_range(T *__restrict__ y, int64_t n, double sf, double df, int64_t si, int64_t di) {
    KCU_GRID_STRIDE(i, n) {
        if constexpr (std::is_same<T, float>::value) {
            float s = (float)sf, d = (float)df;
            y[i] = s + (float)i * d;
        } else if constexpr (IsFloat<T>::value) {
            y[i] = Num<T>::store((typename Num<T>::C)(sf + (double)i * df));
        } else {
            y[i] = (T)(uint64_t)((uint64_t)si + (uint64_t)i * (uint64_t)di);
        }
    }
}

template <typename E>
__global__ void __launch_bounds__(KCU_THREADS)
    k_eyelike(E *__restrict__ y, int64_t R, int64_t C, int64_t k, E one) {
    KCU_GRID_STRIDE(e, R * C) {
        int64_t j = e % C, i = e / C;
        y[e] = j == i + k ? one : E{};
    }
}

} /* namespace kcu */

using namespace kcu;

extern "C" {

int kcu_index_numeric(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT32: case KILN_DTYPE_FLOAT16: case KILN_DTYPE_BFLOAT16:
    case KILN_DTYPE_FLOAT64: case KILN_DTYPE_INT8: case KILN_DTYPE_INT16: case KILN_DTYPE_INT32:
    case KILN_DTYPE_INT64: case KILN_DTYPE_UINT8: case KILN_DTYPE_UINT16: case KILN_DTYPE_UINT32:
    case KILN_DTYPE_UINT64:
        return 1;
    default: return 0;
    }
}

cudaError_t kcu_argreduce(int is_max, int last, kiln_dtype t, const void *x, int64_t *y,
                          int64_t outer, int64_t R, int64_t inner, cudaStream_t stream) {
    if (outer <= 0 || inner <= 0) return cudaSuccess;
    if (R <= 0) return cudaErrorInvalidValue;
    KCU_SWITCH_NUMERIC(t, return argreduce_launch<T_>(is_max, last, x, y, outer, R, inner, stream))
    return cudaErrorInvalidValue;
}

size_t kcu_topk_scratch(int64_t outer, int64_t R, int64_t inner) {
    int64_t P = pow2_at_least(R);
    if (P <= KCU_TOPK_SHARED || outer <= 0 || inner <= 0) return 0;
    return (size_t)(outer * inner * P) * (sizeof(uint64_t) + sizeof(int32_t));
}

cudaError_t kcu_topk(int largest, kiln_dtype t, const void *x, void *v, int64_t *ix,
                     int64_t outer, int64_t R, int64_t inner, int64_t k, void *scratch,
                     cudaStream_t stream) {
    if (outer <= 0 || inner <= 0 || k <= 0) return cudaSuccess;
    if (k > R || R >= KCU_TOPK_PAD) return cudaErrorInvalidValue;
    KCU_SWITCH_NUMERIC(t, return topk_launch<T_>(largest, x, v, ix, outer, R, inner, k, scratch, stream))
    return cudaErrorInvalidValue;
}

cudaError_t kcu_cumsum(kiln_dtype t, int exclusive, int reverse, const void *x, void *y,
                       int64_t outer, int64_t len, int64_t inner, cudaStream_t stream) {
    int64_t lines = outer * inner;
    if (lines <= 0 || len <= 0) return cudaSuccess;
    KCU_SWITCH_NUMERIC(t, return cumsum_launch<T_>(x, y, outer, len, inner, exclusive != 0,
                                                   reverse != 0, stream))
    return cudaErrorInvalidValue;
}

cudaError_t kcu_gather_elements(size_t es, kiln_dtype it, const kcu_elems *g, const void *x,
                                const void *ind, void *y, cudaStream_t stream) {
    if (g->n <= 0) return cudaSuccess;
    if (idx_check(it) != cudaSuccess || g->rank < 1 || g->rank > KILN_MAX_RANK) return cudaErrorInvalidValue;
    int i64 = it == KILN_DTYPE_INT64;
    KCU_SWITCH_ES(es, k_gather_elements<E_><<<grid_for(g->n), KCU_THREADS, 0, stream>>>(
                          (const E_ *)x, ind, i64, (E_ *)y, *g))
    return cudaGetLastError();
}

int kcu_scatter_has(kiln_dtype t, int red) {
    if (red == KCU_RED_NONE) {
        size_t es = kiln_dtype_size(t);
        return t != KILN_DTYPE_STRING && (es == 1 || es == 2 || es == 4 || es == 8);
    }
    if (red < KCU_RED_ADD || red > KCU_RED_MIN) return 0;
    return kcu_index_numeric(t) || t == KILN_DTYPE_BOOL;
}

/* KCU_SWITCH_SCATTER(t, red, body): T_ = the element type (storage type for reduction none) */
#define KCU_SWITCH_SCATTER(t, red, ...)                                                 \
    if ((red) == KCU_RED_NONE) {                                                        \
        KCU_SWITCH_ES(kiln_dtype_size(t), typedef E_ T_; __VA_ARGS__)                   \
    } else if ((t) == KILN_DTYPE_BOOL) {                                                \
        typedef kbool T_;                                                               \
        __VA_ARGS__;                                                                    \
    } else {                                                                            \
        KCU_SWITCH_NUMERIC(t, __VA_ARGS__)                                              \
    }

cudaError_t kcu_scatter_elements(kiln_dtype t, int red, kiln_dtype it, const kcu_elems *g,
                                 const void *ind, const void *upd, void *y, cudaStream_t stream) {
    if (g->n <= 0) return cudaSuccess;
    if (!kcu_scatter_has(t, red) || idx_check(it) != cudaSuccess || g->rank < 1 ||
        g->rank > KILN_MAX_RANK)
        return cudaErrorInvalidValue;
    int i64 = it == KILN_DTYPE_INT64;
    KCU_SWITCH_SCATTER(t, red, k_scatter_elements<T_><<<grid_for(g->n), KCU_THREADS, 0, stream>>>(
                                   ind, i64, (const T_ *)upd, (T_ *)y, red, *g))
    return cudaGetLastError();
}

cudaError_t kcu_gather_nd(size_t es, const kcu_nd *g, const void *x, const int64_t *ind, void *y,
                          cudaStream_t stream) {
    int64_t n = g->B * g->T * g->slice;
    if (n <= 0) return cudaSuccess;
    if (g->m < 0 || g->m > KILN_MAX_RANK || g->T <= 0) return cudaErrorInvalidValue;
    KCU_SWITCH_ES(es, k_gather_nd<E_><<<grid_for(n), KCU_THREADS, 0, stream>>>(
                          (const E_ *)x, ind, (E_ *)y, *g))
    return cudaGetLastError();
}

cudaError_t kcu_scatter_nd(kiln_dtype t, int red, const kcu_nd *g, const int64_t *ind,
                           const void *upd, void *y, cudaStream_t stream) {
    int64_t n = g->B * g->T * g->slice;
    if (n <= 0) return cudaSuccess;
    if (!kcu_scatter_has(t, red) || g->m < 0 || g->m > KILN_MAX_RANK || g->T <= 0)
        return cudaErrorInvalidValue;
    KCU_SWITCH_SCATTER(t, red, k_scatter_nd<T_><<<grid_for(n), KCU_THREADS, 0, stream>>>(
                                   ind, (const T_ *)upd, (T_ *)y, red, *g))
    return cudaGetLastError();
}

cudaError_t kcu_onehot(size_t es, kiln_dtype it, const void *ind, const void *vals, void *y,
                       int64_t outer, int64_t depth, int64_t inner, cudaStream_t stream) {
    int64_t n = outer * depth * inner;
    if (n <= 0) return cudaSuccess;
    if (idx_check(it) != cudaSuccess) return cudaErrorInvalidValue;
    int i64 = it == KILN_DTYPE_INT64;
    KCU_SWITCH_ES(es, k_onehot<E_><<<grid_for(n), KCU_THREADS, 0, stream>>>(
                          ind, i64, (const E_ *)vals, (E_ *)y, outer, depth, inner))
    return cudaGetLastError();
}

cudaError_t kcu_trilu(size_t es, int upper, const void *x, void *y, int64_t nmat, int64_t R,
                      int64_t C, int64_t k, const void *k_dev, kiln_dtype k_t,
                      cudaStream_t stream) {
    int64_t n = nmat * R * C;
    if (n <= 0) return cudaSuccess;
    if (k_dev && idx_check(k_t) != cudaSuccess) return cudaErrorInvalidValue;
    int k64 = k_t == KILN_DTYPE_INT64;
    KCU_SWITCH_ES(es, k_trilu<E_><<<grid_for(n), KCU_THREADS, 0, stream>>>(
                          (const E_ *)x, (E_ *)y, n, R, C, upper != 0, k, k_dev, k64))
    return cudaGetLastError();
}

cudaError_t kcu_range(kiln_dtype t, void *y, int64_t n, double start_f, double delta_f,
                      int64_t start_i, int64_t delta_i, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (!kcu_index_numeric(t)) return cudaErrorInvalidValue;
    KCU_SWITCH_NUMERIC(t, k_range<T_><<<grid_for(n), KCU_THREADS, 0, stream>>>(
                              (T_ *)y, n, start_f, delta_f, start_i, delta_i))
    return cudaGetLastError();
}

cudaError_t kcu_eyelike(size_t es, void *y, int64_t R, int64_t C, int64_t k, const void *one,
                        cudaStream_t stream) {
    if (R <= 0 || C <= 0) return cudaSuccess;
    KCU_SWITCH_ES(es, E_ o; memcpy(&o, one, sizeof o);
                  k_eyelike<E_><<<grid_for(R * C), KCU_THREADS, 0, stream>>>((E_ *)y, R, C, k, o))
    return cudaGetLastError();
}

} /* extern "C" */
