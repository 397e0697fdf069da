/* k_misc.cu -- kernels of the "misc" family (launchers declared in
 * k_misc.h): RandomNormal/RandomUniform(+Like)/Bernoulli, the three
 * windows, DFT/STFT (direct sum over a twiddle table), MelWeightMatrix,
 * Det (LU with partial pivoting, a block per matrix) and
 * NegativeLogLikelihoodLoss/SoftmaxCrossEntropyLoss. Arithmetic in double,
 * as in the CPU kernels (src/ops/misc_*.c). */
#include "k_common.cuh"
#include "k_misc.h"

namespace kcu {

/* ---- loads and stores of double values by dtype --------------------------------------- */

__device__ __forceinline__ int64_t f64_to_i64(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

/* kiln__store_f64 on the device */
__device__ __forceinline__ void store_dt(kiln_dtype t, void *p, int64_t i, double v) {
    switch (t) {
    case KILN_DTYPE_FLOAT32: ((float *)p)[i] = (float)v; break;
    case KILN_DTYPE_FLOAT64: ((double *)p)[i] = v; break;
    case KILN_DTYPE_FLOAT16: ((__half *)p)[i] = __float2half_rn((float)v); break;
    case KILN_DTYPE_BFLOAT16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
    case KILN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0.0; break;
    case KILN_DTYPE_UINT64:
        ((uint64_t *)p)[i] = v >= 18446744073709551615.0 ? UINT64_MAX
                             : (v > 0 ? (uint64_t)v : (uint64_t)f64_to_i64(v));
        break;
    case KILN_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)f64_to_i64(v); break;
    case KILN_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)f64_to_i64(v); break;
    case KILN_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)f64_to_i64(v); break;
    case KILN_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)f64_to_i64(v); break;
    case KILN_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)f64_to_i64(v); break;
    case KILN_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)f64_to_i64(v); break;
    case KILN_DTYPE_INT64: ((int64_t *)p)[i] = f64_to_i64(v); break;
    default: break;
    }
}

static bool store_has(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT32: case KILN_DTYPE_FLOAT64: case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: case KILN_DTYPE_BOOL: case KILN_DTYPE_UINT8: case KILN_DTYPE_INT8:
    case KILN_DTYPE_UINT16: case KILN_DTYPE_INT16: case KILN_DTYPE_INT32: case KILN_DTYPE_UINT32:
    case KILN_DTYPE_INT64: case KILN_DTYPE_UINT64:
        return true;
    default:
        return false;
    }
}

static bool is_float(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT32 || t == KILN_DTYPE_FLOAT64 || t == KILN_DTYPE_FLOAT16 ||
           t == KILN_DTYPE_BFLOAT16;
}

/* floating loads (the only ones these kernels read by dtype) */
__device__ __forceinline__ double load_fdt(kiln_dtype t, const void *p, int64_t i) {
    switch (t) {
    case KILN_DTYPE_FLOAT64: return ((const double *)p)[i];
    case KILN_DTYPE_FLOAT16: return (double)__half2float(((const __half *)p)[i]);
    case KILN_DTYPE_BFLOAT16: return (double)__bfloat162float(((const __nv_bfloat16 *)p)[i]);
    default: return (double)((const float *)p)[i];
    }
}

template <typename T> __device__ __forceinline__ double ld(const T *p, int64_t i) {
    return (double)Num<T>::load(p[i]);
}
template <typename T> __device__ __forceinline__ void st(T *p, int64_t i, double v) {
    p[i] = Num<T>::store((typename Num<T>::C)v);
}
/* f16/bf16 from double through float, like kiln__store_f64 */
template <> __device__ __forceinline__ void st<__half>(__half *p, int64_t i, double v) {
    p[i] = __float2half_rn((float)v);
}
template <> __device__ __forceinline__ void st<__nv_bfloat16>(__nv_bfloat16 *p, int64_t i,
                                                             double v) {
    p[i] = __float2bfloat16_rn((float)v);
}

/* ---- random numbers ----------------------------------------------------------------------- */

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* draw c of the stream `key`: splitmix64's c-th output from state key */
__device__ __forceinline__ uint64_t draw(uint64_t key, uint64_t c) {
    return mix64(key + (c + 1) * 0x9e3779b97f4a7c15ull);
}
/* uniform in [0, 1) with 53 random bits */
__device__ __forceinline__ double unit(uint64_t u) {
    return (double)(u >> 11) * (1.0 / 9007199254740992.0);
}

__global__ void __launch_bounds__(KCU_THREADS)
    k_random(int kind, kiln_dtype t, void *y, int64_t n, uint64_t seed, const uint64_t *ctr,
             double a, double b, kiln_dtype pt, const void *p) {
    uint64_t key = seed;
    if (ctr) key ^= mix64(*ctr ^ 0x632be59bd9b4e019ull);
    KCU_GRID_STRIDE(i, n) {
        double v;
        if (kind == KCU_RND_NORMAL) {
            /* Box-Muller, as the CPU kernel */
            double u1 = 1.0 - unit(draw(key, 2 * (uint64_t)i));
            double u2 = unit(draw(key, 2 * (uint64_t)i + 1));
            v = a + b * sqrt(-2.0 * log(u1)) * cospi(2.0 * u2);
        } else if (kind == KCU_RND_UNIFORM) {
            v = a + (b - a) * unit(draw(key, (uint64_t)i));
        } else {
            v = unit(draw(key, (uint64_t)i)) < load_fdt(pt, p, i) ? 1.0 : 0.0;
        }
        store_dt(t, y, i, v);
    }
}

__global__ void k_random_bump(uint64_t *ctr) { *ctr += 1; }
__global__ void k_random_set(uint64_t *ctr, uint64_t v) { *ctr = v; }

/* ---- windows ----------------------------------------------------------------------------- */

__global__ void __launch_bounds__(KCU_THREADS)
    k_window(int code, int periodic, kiln_dtype t, void *y, int64_t n) {
    const double pi = 3.14159265358979323846;
    double N = periodic ? (double)n : (double)(n - 1);
    KCU_GRID_STRIDE(i, n) {
        double v = 1.0;
        if (N > 0) {
            double a = 2.0 * pi * (double)i / N;
            if (code == 0) v = 0.42 - 0.5 * cos(a) + 0.08 * cos(2.0 * a);
            else if (code == 1) v = 25.0 / 46.0 - (21.0 / 46.0) * cos(a);
            else v = 0.5 - 0.5 * cos(a);
        }
        store_dt(t, y, i, v);
    }
}

/* ---- DFT ------------------------------------------------------------------------------------- */

__global__ void __launch_bounds__(KCU_THREADS) k_twiddles(double *tw, int64_t n) {
    KCU_GRID_STRIDE(m, n) {
        double s, c;
        sincospi(2.0 * (double)m / (double)n, &s, &c);
        tw[2 * m] = c;
        tw[2 * m + 1] = s;
    }
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_dft(const __grid_constant__ kcu_dft_geo g, const T *__restrict__ x, const T *__restrict__ w,
          T *__restrict__ y, const double *__restrict__ tw) {
    const double sgn = g.inverse ? 1.0 : -1.0;
    const double scale = g.inverse ? 1.0 / (double)g.n : 1.0;
    const int64_t jmax = g.nin < g.n ? g.nin : g.n;
    KCU_GRID_STRIDE(t, g.outer * g.inner * g.n_out) {
        int64_t k = t % g.n_out, line = t / g.n_out;
        int64_t i = line % g.inner, o = line / g.inner;
        const T *xl = x + o * g.in_so + i * g.in_si;
        double re = 0.0, im = 0.0;
        int64_t m = 0;
        for (int64_t j = 0; j < jmax; j++) {
            double xr = ld(xl, j * g.in_sj);
            double xi = g.comp == 2 ? ld(xl, j * g.in_sj + 1) : 0.0;
            if (w) {
                double ww = ld(w, j);
                xr *= ww;
                xi *= ww;
            }
            double wr = tw[2 * m], wi = sgn * tw[2 * m + 1];
            re += xr * wr - xi * wi;
            im += xr * wi + xi * wr;
            m += k;
            if (m >= g.n) m -= g.n;
        }
        int64_t e = o * g.out_so + i * g.out_si + k * g.out_sk;
        st(y, e, re * scale);
        st(y, e + 1, im * scale);
    }
}

/* Powers of two 2 <= n <= KCU_FFT_MAX_N: a block per line, radix-2 FFT in
 * shared memory (n complex doubles), the CPU's algorithm: samples stored
 * at their bit-reversed places (zero-padded / truncated to n), then log2(n)
 * butterfly stages with the twiddle table. */
#define KCU_FFT_MAX_N 2048

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_fft_pow2(const __grid_constant__ kcu_dft_geo g, int logn, const T *__restrict__ x,
               const T *__restrict__ w, T *__restrict__ y, const double *__restrict__ tw) {
    extern __shared__ double fft_sh[]; /* 2n: re, im */
    const double sgn = g.inverse ? 1.0 : -1.0;
    const double scale = g.inverse ? 1.0 / (double)g.n : 1.0;
    const int n = (int)g.n, tid = threadIdx.x, nt = blockDim.x;
    const int64_t lines = g.outer * g.inner;
    for (int64_t line = blockIdx.x; line < lines; line += gridDim.x) {
        int64_t i = line % g.inner, o = line / g.inner;
        const T *xl = x + o * g.in_so + i * g.in_si;
        __syncthreads(); /* the previous line is written out */
        for (int j = tid; j < n; j += nt) {
            double xr = 0.0, xi = 0.0;
            if (j < g.nin) {
                xr = ld(xl, (int64_t)j * g.in_sj);
                xi = g.comp == 2 ? ld(xl, (int64_t)j * g.in_sj + 1) : 0.0;
                if (w) {
                    double ww = ld(w, j);
                    xr *= ww;
                    xi *= ww;
                }
            }
            int r = (int)(__brev((unsigned)j) >> (32 - logn));
            fft_sh[2 * r] = xr;
            fft_sh[2 * r + 1] = xi;
        }
        __syncthreads();
        for (int len = 2; len <= n; len <<= 1) {
            const int half = len >> 1, step = n / len;
            for (int b = tid; b < n / 2; b += nt) {
                int k = b % half, i0 = (b / half) * len + k, i1 = i0 + half;
                double wr = tw[2 * k * step], wi = sgn * tw[2 * k * step + 1];
                double v0 = fft_sh[2 * i1], v1 = fft_sh[2 * i1 + 1];
                double vr = v0 * wr - v1 * wi, vi = v0 * wi + v1 * wr;
                double u0 = fft_sh[2 * i0], u1 = fft_sh[2 * i0 + 1];
                fft_sh[2 * i1] = u0 - vr;
                fft_sh[2 * i1 + 1] = u1 - vi;
                fft_sh[2 * i0] = u0 + vr;
                fft_sh[2 * i0 + 1] = u1 + vi;
            }
            __syncthreads();
        }
        for (int k = tid; k < g.n_out; k += nt) {
            int64_t e = o * g.out_so + i * g.out_si + k * g.out_sk;
            st(y, e, fft_sh[2 * k] * scale);
            st(y, e + 1, fft_sh[2 * k + 1] * scale);
        }
    }
}

/* ---- MelWeightMatrix ------------------------------------------------------------------------ */

__device__ __forceinline__ int64_t mel_point(int64_t i, int64_t dftl, int64_t sr, double lm,
                                             double step) {
    /* no FMA contraction: the CPU's roundings, so points land in the same bins */
    double f = 700.0 * (pow(10.0, __dadd_rn(__dmul_rn((double)i, step), lm) / 2595.0) - 1.0);
    double b = floor(__dmul_rn((double)(dftl + 1), f) / (double)sr);
    return b >= -1.0 ? (int64_t)fmin(b, 4.0e15) : -1;
}

__global__ void __launch_bounds__(KCU_THREADS)
    k_mel(kiln_dtype t, void *y, int64_t nb, int64_t nmel, int64_t dftl, int64_t sr, double lm,
          double step) {
    KCU_GRID_STRIDE(e, nb * nmel) {
        int64_t j = e / nmel, m = e % nmel;
        int64_t l = mel_point(m, dftl, sr, lm, step), c = mel_point(m + 1, dftl, sr, lm, step),
                h = mel_point(m + 2, dftl, sr, lm, step);
        /* the CPU kernel's writes for column m, in its order: rising edge
         * (or the single 1 when c == l), then the falling edge */
        double v = 0.0;
        if (c == l) {
            if (j == c) v = 1.0;
        } else if (j >= (l > 0 ? l : 0) && j <= c) {
            v = (double)(j - l) / (double)(c - l);
        }
        if (h > c && j >= (c > 0 ? c : 0) && j < h) v = (double)(h - j) / (double)(h - c);
        store_dt(t, y, e, v);
    }
}

/* ---- Det --------------------------------------------------------------------------------------
 * A block per matrix (grid-stride over the batch). The matrix is copied
 * (as double) into shared memory when it fits, else into the block's slot
 * of the scratch. Thread 0 searches the pivot column sequentially (the
 * CPU kernel's choice: the first largest |value|); the row updates run in
 * parallel, without FMA contraction, so every element sees the CPU's
 * operations. */
#define KCU_DET_SHARED_N 64
#define KCU_DET_THREADS 128

static int64_t det_blocks(int64_t batch, int64_t n) {
    int64_t b = batch < 1024 ? batch : 1024;
    if (n > KCU_DET_SHARED_N) {
        int64_t per = n * n * (int64_t)sizeof(double);
        int64_t lim = ((int64_t)1 << 28) / per; /* at most 256 MiB of scratch */
        if (lim < 1) lim = 1;
        if (b > lim) b = lim;
    }
    return b < 1 ? 1 : b;
}

template <typename T>
__global__ void __launch_bounds__(KCU_DET_THREADS)
    k_det(const T *__restrict__ x, T *__restrict__ y, int64_t batch, int64_t n,
          double *__restrict__ ws) {
    extern __shared__ double det_sh[];
    __shared__ double det;
    __shared__ int64_t piv;
    __shared__ int stop;
    double *m = n <= KCU_DET_SHARED_N ? det_sh : ws + (int64_t)blockIdx.x * n * n;
    const int tid = threadIdx.x;
    for (int64_t b = blockIdx.x; b < batch; b += gridDim.x) {
        __syncthreads(); /* the previous matrix is done */
        for (int64_t e = tid; e < n * n; e += blockDim.x) m[e] = ld(x, b * n * n + e);
        if (tid == 0) det = 1.0;
        __syncthreads();
        for (int64_t c = 0; c < n; c++) {
            if (tid == 0) {
                int64_t p = c;
                double best = fabs(m[c * n + c]);
                for (int64_t r = c + 1; r < n; r++)
                    if (fabs(m[r * n + c]) > best) {
                        best = fabs(m[r * n + c]);
                        p = r;
                    }
                piv = p;
                stop = best == 0.0;
                if (stop) det = 0.0;
            }
            __syncthreads();
            if (stop) break; /* uniform: every thread read the same flag */
            const int64_t p = piv;
            if (p != c)
                for (int64_t j = tid; j < n; j += blockDim.x) {
                    double t0 = m[c * n + j];
                    m[c * n + j] = m[p * n + j];
                    m[p * n + j] = t0;
                }
            __syncthreads();
            const double d = m[c * n + c];
            if (tid == 0) det = (p != c ? -det : det) * d;
            const int64_t w = n - c - 1;
            for (int64_t e = tid; e < w * w; e += blockDim.x) {
                int64_t r = c + 1 + e / w, j = c + 1 + e % w;
                double f = m[r * n + c] / d;
                if (f == 0.0) continue;
                m[r * n + j] = __dsub_rn(m[r * n + j], __dmul_rn(f, m[c * n + j]));
            }
            __syncthreads();
        }
        if (tid == 0) st(y, b, det);
    }
}

/* ---- losses ---------------------------------------------------------------------------------- */

template <typename T, typename TT>
__global__ void __launch_bounds__(KCU_THREADS)
    k_loss(const __grid_constant__ kcu_loss_geo g, const T *__restrict__ x,
           const TT *__restrict__ target, const T *__restrict__ wgt, T *__restrict__ y,
           T *__restrict__ lp, double *__restrict__ ws) {
    const int64_t C = g.C, D = g.D;
    KCU_GRID_STRIDE(p, g.N * D) {
        int64_t nn = p / D, d = p % D;
        int64_t base = nn * C * D + d;
        double lse = 0.0;
        if (g.sce) {
            double mx = -INFINITY;
            for (int64_t c = 0; c < C; c++) {
                double v = ld(x, base + c * D);
                if (v > mx) mx = v;
            }
            double s = 0.0;
            for (int64_t c = 0; c < C; c++) s += exp(ld(x, base + c * D) - mx);
            lse = log(s) + mx;
            if (lp)
                for (int64_t c = 0; c < C; c++) st(lp, base + c * D, ld(x, base + c * D) - lse);
        }
        int64_t tv = (int64_t)target[p];
        double l = 0.0, wt = 0.0;
        if (!(g.has_ignore && tv == g.ignore_index)) {
            if (tv < 0 || tv >= C) {
                l = wt = __longlong_as_double(0x7ff8000000000000ll); /* NaN */
            } else {
                wt = wgt ? ld(wgt, tv) : 1.0;
                double v = ld(x, (nn * C + tv) * D + d);
                l = -wt * (g.sce ? v - lse : v);
            }
        }
        if (g.reduction == 0) {
            st(y, p, l);
        } else {
            ws[2 * p] = l;
            ws[2 * p + 1] = wt;
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_loss_reduce(int reduction, int64_t cnt, const double *__restrict__ ws, T *__restrict__ y) {
    __shared__ double sh[32];
    double s = 0.0, w = 0.0;
    for (int64_t i = threadIdx.x; i < cnt; i += blockDim.x) {
        s += ws[2 * i];
        w += ws[2 * i + 1];
    }
    s = block_reduce(s, OpAdd(), sh);
    w = block_reduce(w, OpAdd(), sh);
    if (threadIdx.x == 0) st(y, 0, reduction == 1 ? s : s / w);
}

} /* namespace kcu */

using namespace kcu;

extern "C" {

int kcu_misc_store_has(kiln_dtype t) { return store_has(t) ? 1 : 0; }

cudaError_t kcu_random(int kind, kiln_dtype t, void *y, int64_t n, uint64_t seed, uint64_t *ctr,
                       double a, double b, kiln_dtype pt, const void *p, cudaStream_t stream) {
    if (!store_has(t) || (kind == KCU_RND_BERNOULLI && (!is_float(pt) || !p)) ||
        (kind != KCU_RND_BERNOULLI && !is_float(t)))
        return cudaErrorInvalidValue;
    if (n <= 0) return cudaSuccess;
    k_random<<<grid_for(n), KCU_THREADS, 0, stream>>>(kind, t, y, n, seed, ctr, a, b, pt, p);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || !ctr) return e;
    k_random_bump<<<1, 1, 0, stream>>>(ctr);
    return cudaGetLastError();
}

cudaError_t kcu_random_ctr_init(uint64_t *ctr, uint64_t v, cudaStream_t stream) {
    k_random_set<<<1, 1, 0, stream>>>(ctr, v);
    return cudaGetLastError();
}

cudaError_t kcu_window(int code, int periodic, kiln_dtype t, void *y, int64_t n,
                       cudaStream_t stream) {
    if (!store_has(t) || code < 0 || code > 2) return cudaErrorInvalidValue;
    if (n <= 0) return cudaSuccess;
    k_window<<<grid_for(n), KCU_THREADS, 0, stream>>>(code, periodic, t, y, n);
    return cudaGetLastError();
}

cudaError_t kcu_dft(kiln_dtype t, const kcu_dft_geo *g, const void *x, const void *w, void *y,
                    double *tw, cudaStream_t stream) {
    if (g->n < 1 || (g->comp != 1 && g->comp != 2) || g->n_out > g->n) return cudaErrorInvalidValue;
    int64_t total = g->outer * g->inner * g->n_out;
    if (total <= 0) return cudaSuccess;
    k_twiddles<<<grid_for(g->n), KCU_THREADS, 0, stream>>>(tw, g->n);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    int logn = 0;
    while (logn < 62 && ((int64_t)1 << logn) < g->n) logn++;
    bool fft = g->n >= 2 && g->n <= KCU_FFT_MAX_N && ((int64_t)1 << logn) == g->n;
    int64_t lines = g->outer * g->inner;
    unsigned threads = fft ? (unsigned)(g->n / 2 < 32 ? 32 : g->n / 2 > KCU_THREADS ? KCU_THREADS
                                                                                     : g->n / 2)
                           : KCU_THREADS;
    bool ok = false;
    KCU_SWITCH_FLOAT(t, {
        if (fft)
            k_fft_pow2<T_><<<grid_for(lines, 1), threads, (size_t)g->n * 2 * sizeof(double),
                             stream>>>(*g, logn, (const T_ *)x, (const T_ *)w, (T_ *)y, tw);
        else
            k_dft<T_><<<grid_for(total), KCU_THREADS, 0, stream>>>(*g, (const T_ *)x,
                                                                   (const T_ *)w, (T_ *)y, tw);
        ok = true;
    })
    return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t kcu_mel(kiln_dtype t, void *y, int64_t nmel, int64_t dftl, int64_t sr, double lm,
                    double step, cudaStream_t stream) {
    if (!store_has(t) || sr <= 0 || dftl < 1 || nmel < 0) return cudaErrorInvalidValue;
    int64_t nb = dftl / 2 + 1;
    if (nb * nmel <= 0) return cudaSuccess;
    k_mel<<<grid_for(nb * nmel), KCU_THREADS, 0, stream>>>(t, y, nb, nmel, dftl, sr, lm, step);
    return cudaGetLastError();
}

size_t kcu_det_scratch(int64_t batch, int64_t n) {
    if (batch <= 0 || n <= KCU_DET_SHARED_N) return 0;
    return (size_t)det_blocks(batch, n) * (size_t)n * (size_t)n * sizeof(double);
}

cudaError_t kcu_det(kiln_dtype t, const void *x, void *y, int64_t batch, int64_t n, void *ws,
                    cudaStream_t stream) {
    if (n < 0 || (n > KCU_DET_SHARED_N && batch > 0 && !ws)) return cudaErrorInvalidValue;
    if (batch <= 0) return cudaSuccess;
    unsigned blocks = (unsigned)det_blocks(batch, n);
    size_t shm = n <= KCU_DET_SHARED_N ? (size_t)(n * n > 0 ? n * n : 1) * sizeof(double) : 0;
    bool ok = false;
    KCU_SWITCH_FLOAT(t, {
        k_det<T_><<<blocks, KCU_DET_THREADS, shm, stream>>>((const T_ *)x, (T_ *)y, batch, n,
                                                            (double *)ws);
        ok = true;
    })
    return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

size_t kcu_loss_scratch(int64_t positions, int reduction) {
    if (reduction == 0) return 0;
    return (size_t)(positions > 0 ? positions : 1) * 2 * sizeof(double);
}

cudaError_t kcu_loss(kiln_dtype t, kiln_dtype tt, const kcu_loss_geo *g, const void *x,
                     const void *target, const void *weight, void *y, void *log_prob, void *ws,
                     cudaStream_t stream) {
    if ((tt != KILN_DTYPE_INT32 && tt != KILN_DTYPE_INT64) || g->reduction < 0 ||
        g->reduction > 2 || (g->reduction != 0 && !ws))
        return cudaErrorInvalidValue;
    int64_t cnt = g->N * g->D;
    bool ok = false;
    KCU_SWITCH_FLOAT(t, {
        if (cnt > 0) {
            if (tt == KILN_DTYPE_INT32)
                k_loss<T_, int32_t><<<grid_for(cnt), KCU_THREADS, 0, stream>>>(
                    *g, (const T_ *)x, (const int32_t *)target, (const T_ *)weight, (T_ *)y,
                    (T_ *)log_prob, (double *)ws);
            else
                k_loss<T_, int64_t><<<grid_for(cnt), KCU_THREADS, 0, stream>>>(
                    *g, (const T_ *)x, (const int64_t *)target, (const T_ *)weight, (T_ *)y,
                    (T_ *)log_prob, (double *)ws);
        }
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
        /* sum / mean: written also when there is no element (sum 0, mean 0/0) */
        if (g->reduction != 0)
            k_loss_reduce<T_><<<1, KCU_THREADS, 0, stream>>>(g->reduction, cnt, (const double *)ws,
                                                             (T_ *)y);
        ok = true;
    })
    return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

} /* extern "C" */
