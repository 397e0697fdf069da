/* k_norm.cu -- Softmax/LogSoftmax, LayerNormalization (and kiln.AddLayerNorm,
 * RMSNormalization: the same kernels, a sum before or no mean),
 * BatchNormalization (inference). Statistics are kept in fp32 (fp64 for fp64
 * tensors) for every storage type; rows are reduced by a warp (short rows) or
 * a block. */
#include "k_common.cuh"

namespace kcu {

/* A "group" of G threads (32: one warp; KCU_THREADS: the block) that
 * reduces one row. Every thread of the group gets the result. */
template <int G> struct Group {
    template <typename C, typename Op>
    static __device__ __forceinline__ C reduce(C v, Op op, C *sh) {
        if constexpr (G == 32) {
            (void)sh;
            return warp_reduce(v, op);
        } else {
            return block_reduce(v, op, sh);
        }
    }
    static __device__ __forceinline__ int rank() { return (int)(threadIdx.x % G); }
};

/* ---- softmax --------------------------------------------------------------------------
 * Rows of n contiguous elements (inner == 1): a group of G threads per row
 * (G = 32: a warp per row, 8 rows per block; G = block size: one row per
 * block). Strided rows (inner > 1): a thread per row. */

template <typename T, int G>
__global__ void __launch_bounds__(KCU_THREADS)
    k_softmax_rows(int kind, const T *__restrict__ x, T *__restrict__ y, int64_t rows, int64_t n) {
    typedef typename Num<T>::C C;
    __shared__ C sh[32];
    const int rows_per_block = KCU_THREADS / G;
    const int lane = Group<G>::rank();
    for (int64_t r = (int64_t)blockIdx.x * rows_per_block + threadIdx.x / G; r < rows;
         r += (int64_t)gridDim.x * rows_per_block) {
        const T *xr = x + r * n;
        T *yr = y + r * n;
        C m = -(C)INFINITY;
        for (int64_t j = lane; j < n; j += G) {
            C v = Num<T>::load(xr[j]);
            m = v > m ? v : m;
        }
        m = Group<G>::reduce(m, OpMaxNan(), sh);
        C s = 0;
        for (int64_t j = lane; j < n; j += G) s += m_exp(Num<T>::load(xr[j]) - m);
        s = Group<G>::reduce(s, OpAdd(), sh);
        if (kind == 0) {
            C inv = C(1) / s;
            for (int64_t j = lane; j < n; j += G) yr[j] = Num<T>::store(m_exp(Num<T>::load(xr[j]) - m) * inv);
        } else {
            C ls = m_log(s);
            for (int64_t j = lane; j < n; j += G) yr[j] = Num<T>::store((Num<T>::load(xr[j]) - m) - ls);
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_softmax_strided(int kind, const T *__restrict__ x, T *__restrict__ y, int64_t outer,
                      int64_t n, int64_t inner) {
    typedef typename Num<T>::C C;
    KCU_GRID_STRIDE(r, outer * inner) {
        int64_t o = r / inner, j = r % inner;
        const T *xr = x + o * n * inner + j;
        T *yr = y + o * n * inner + j;
        C m = -(C)INFINITY;
        for (int64_t k = 0; k < n; k++) {
            C v = Num<T>::load(xr[k * inner]);
            m = (v > m || v != v) ? v : m;
        }
        C s = 0;
        for (int64_t k = 0; k < n; k++) s += m_exp(Num<T>::load(xr[k * inner]) - m);
        if (kind == 0) {
            C inv = C(1) / s;
            for (int64_t k = 0; k < n; k++)
                yr[k * inner] = Num<T>::store(m_exp(Num<T>::load(xr[k * inner]) - m) * inv);
        } else {
            C ls = m_log(s);
            for (int64_t k = 0; k < n; k++)
                yr[k * inner] = Num<T>::store((Num<T>::load(xr[k * inner]) - m) - ls);
        }
    }
}

template <typename T>
static cudaError_t softmax_launch(int kind, const void *x, void *y, int64_t outer, int64_t n,
                                  int64_t inner, cudaStream_t st) {
    const T *px = (const T *)x;
    T *py = (T *)y;
    if (inner == 1) {
        if (n <= 1024) {
            int64_t blocks = (outer + (KCU_THREADS / 32) - 1) / (KCU_THREADS / 32);
            k_softmax_rows<T, 32><<<grid_for(blocks, 1), KCU_THREADS, 0, st>>>(kind, px, py, outer, n);
        } else {
            k_softmax_rows<T, KCU_THREADS><<<grid_for(outer, 1), KCU_THREADS, 0, st>>>(kind, px, py,
                                                                                    outer, n);
        }
    } else {
        k_softmax_strided<T><<<grid_for(outer * inner), KCU_THREADS, 0, st>>>(kind, px, py, outer,
                                                                             n, inner);
    }
    return cudaGetLastError();
}

/* ---- LayerNormalization ------------------------------------------------------------------- */

template <typename S> __device__ __forceinline__ void store_stat(void *p, int64_t r, double v) {
    ((S *)p)[r] = Num<S>::store((typename Num<S>::C)v);
}

__device__ __forceinline__ void store_stat_dt(kiln_dtype t, void *p, int64_t r, double v) {
    switch (t) {
    case KILN_DTYPE_FLOAT64: store_stat<double>(p, r, v); break;
    case KILN_DTYPE_FLOAT16: store_stat<__half>(p, r, v); break;
    case KILN_DTYPE_BFLOAT16: store_stat<__nv_bfloat16>(p, r, v); break;
    default: store_stat<float>(p, r, v); break;
    }
}

/* The rows' input: x alone (LayerNormalization), or the sum x + r rounded to
 * T (kiln.AddLayerNorm: r's row is the output row modulo r_rows; the sum is
 * written to sum_out when given). */
template <typename T, bool ADD> struct RowIn {
    const T *x, *r;
    T *sum;
    __device__ __forceinline__ typename Num<T>::C at(int64_t xi, int64_t ri) const {
        if constexpr (ADD)
            return Num<T>::load(Num<T>::store(Num<T>::load(x[xi]) + Num<T>::load(r[ri])));
        else
            return Num<T>::load(x[xi]);
    }
};

/* RMS: RMSNormalization's rows, x / sqrt(mean(x^2) + eps) * scale (the mean
 * taken as 0: one reduction, no bias). */
template <typename T, int G, bool ADD, bool RMS>
__global__ void __launch_bounds__(KCU_THREADS)
    k_layernorm(RowIn<T, ADD> in, int64_t r_rows, const T *__restrict__ scale, int scale_scalar,
                const T *__restrict__ bias, int bias_scalar, T *__restrict__ y, kiln_dtype stat_t,
                void *mean_out, void *inv_out, int64_t rows, int64_t D, float eps) {
    typedef typename Num<T>::C C;
    __shared__ C sh[32];
    const int rows_per_block = KCU_THREADS / G;
    const int lane = Group<G>::rank();
    for (int64_t r = (int64_t)blockIdx.x * rows_per_block + threadIdx.x / G; r < rows;
         r += (int64_t)gridDim.x * rows_per_block) {
        const int64_t xo = r * D, ro = ADD ? (r % r_rows) * D : 0;
        T *yr = y + r * D;
        C mean = 0;
        if constexpr (!RMS) {
            C s = 0;
            for (int64_t j = lane; j < D; j += G) {
                const C v = in.at(xo + j, ro + j);
                if (ADD && in.sum) in.sum[xo + j] = Num<T>::store(v);
                s += v;
            }
            s = Group<G>::reduce(s, OpAdd(), sh);
            mean = D ? s / (C)D : C(0);
        }
        C ss = 0;
        for (int64_t j = lane; j < D; j += G) {
            const C v = in.at(xo + j, ro + j);
            if (RMS && ADD && in.sum) in.sum[xo + j] = Num<T>::store(v);
            C d = v - mean;
            ss += d * d;
        }
        ss = Group<G>::reduce(ss, OpAdd(), sh);
        const C inv = C(1) / m_sqrt((D ? ss / (C)D : C(0)) + (C)eps);
        for (int64_t j = lane; j < D; j += G) {
            C v = (in.at(xo + j, ro + j) - mean) * inv * Num<T>::load(scale[scale_scalar ? 0 : j]);
            if (bias) v += Num<T>::load(bias[bias_scalar ? 0 : j]);
            yr[j] = Num<T>::store(v);
        }
        if (lane == 0) {
            if (mean_out) store_stat_dt(stat_t, mean_out, r, (double)mean);
            if (inv_out) store_stat_dt(stat_t, inv_out, r, (double)inv);
        }
    }
}

/* fp16/bf16 rows of D = 8k <= 256 * VPL elements, 16-byte aligned: a warp per
 * row holding its values in registers (one read of x, 16-byte loads and
 * stores), RPB rows per block. Every load of a row (x, r, scale, bias) is
 * issued before the first reduction, so a short row costs one memory
 * latency, not two. Same arithmetic as k_layernorm (fp32, mean first, then
 * the mean of squared deviations; RMS: the mean of squares, one reduction). */
template <typename T, int VPL, int RPB, bool ADD, bool RMS>
__global__ void __launch_bounds__(RPB * 32)
    k_layernorm_vec(RowIn<T, ADD> in, int64_t r_rows, const T *__restrict__ scale, const T *__restrict__ bias,
                    T *__restrict__ y, kiln_dtype stat_t, void *mean_out, void *inv_out, int64_t rows,
                    int64_t D, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * RPB + (threadIdx.x >> 5);
    if (r >= rows) return;
    const int nv = (int)(D / 8);
    const uint4 *xr = reinterpret_cast<const uint4 *>(in.x + r * D);
    const uint4 *rr = reinterpret_cast<const uint4 *>(ADD ? in.r + (r % r_rows) * D : in.x);
    const uint4 *sc = reinterpret_cast<const uint4 *>(scale), *bi = reinterpret_cast<const uint4 *>(bias);
    const uint4 z = make_uint4(0, 0, 0, 0);
    uint4 xu[VPL], ru[VPL], su[VPL], bu[VPL];
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        const int c = lane + i * 32;
        const bool ok = c < nv;
        xu[i] = ok ? xr[c] : z;
        ru[i] = ADD && ok ? rr[c] : z;
        su[i] = ok ? sc[c] : z;
        bu[i] = bias && ok ? bi[c] : z;
    }
    float v[VPL][8];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        const T *e = reinterpret_cast<const T *>(&xu[i]);
        const T *f = reinterpret_cast<const T *>(&ru[i]);
        uint4 so;
        T *se = reinterpret_cast<T *>(&so);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            if constexpr (ADD) {
                se[k] = Num<T>::store(Num<T>::load(e[k]) + Num<T>::load(f[k]));
                v[i][k] = Num<T>::load(se[k]);
            } else {
                v[i][k] = Num<T>::load(e[k]);
            }
            s += v[i][k];
        }
        if (ADD && in.sum && lane + i * 32 < nv) reinterpret_cast<uint4 *>(in.sum + r * D)[lane + i * 32] = so;
    }
    const float mean = RMS ? 0.0f : warp_reduce(s, OpAdd()) / (float)D;
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < VPL; i++)
        if (lane + i * 32 < nv)
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float d = v[i][k] - mean;
                ss += d * d;
            }
    const float inv = 1.0f / sqrtf(warp_reduce(ss, OpAdd()) / (float)D + eps);
    uint4 *yr = reinterpret_cast<uint4 *>(y + r * D);
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        const int c = lane + i * 32;
        if (c >= nv) break;
        uint4 o;
        const T *se = reinterpret_cast<const T *>(&su[i]), *be = reinterpret_cast<const T *>(&bu[i]);
        T *oe = reinterpret_cast<T *>(&o);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float w = (v[i][k] - mean) * inv * Num<T>::load(se[k]);
            if (bias) w += Num<T>::load(be[k]);
            oe[k] = Num<T>::store(w);
        }
        yr[c] = o;
    }
    if (lane == 0) {
        if (mean_out) store_stat_dt(stat_t, mean_out, r, (double)mean);
        if (inv_out) store_stat_dt(stat_t, inv_out, r, (double)inv);
    }
}

/* Rows per block of the vectorized kernel: one warp per block while the rows
 * fit in a few waves of single-warp blocks (latency-bound: spread over every
 * multiprocessor), else 4. */
template <typename T, int VPL, bool ADD, bool RMS>
static cudaError_t layernorm_vec_launch(RowIn<T, ADD> in, int64_t r_rows, const void *scale, const void *bias,
                                        void *y, kiln_dtype stat_t, void *mean, void *inv, int64_t rows,
                                        int64_t D, float eps, cudaStream_t st) {
    if (rows <= 1024) {
        k_layernorm_vec<T, VPL, 1, ADD, RMS><<<(unsigned)rows, 32, 0, st>>>(
            in, r_rows, (const T *)scale, (const T *)bias, (T *)y, stat_t, mean, inv, rows, D, eps);
        return cudaGetLastError();
    }
    const int64_t blocks = (rows + 3) / 4;
    if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
    k_layernorm_vec<T, VPL, 4, ADD, RMS><<<(unsigned)blocks, 128, 0, st>>>(
        in, r_rows, (const T *)scale, (const T *)bias, (T *)y, stat_t, mean, inv, rows, D, eps);
    return cudaGetLastError();
}

static bool al16(const void *p) { return (uintptr_t)p % 16 == 0; }

template <typename T, bool ADD, bool RMS = false>
static cudaError_t layernorm_launch(RowIn<T, ADD> in, int64_t r_rows, const void *scale, int ss, const void *bias,
                                    int bs, void *y, kiln_dtype stat_t, void *mean, void *inv,
                                    int64_t rows, int64_t D, float eps, cudaStream_t st) {
    if constexpr (sizeof(T) == 2) {
        if (D % 8 == 0 && D > 0 && D <= 2048 && !ss && !bs && al16(in.x) && al16(y) && al16(scale) &&
            (!bias || al16(bias)) && (!ADD || (al16(in.r) && (!in.sum || al16(in.sum))))) {
#define KCU_LN_VEC(V) \
    layernorm_vec_launch<T, V, ADD, RMS>(in, r_rows, scale, bias, y, stat_t, mean, inv, rows, D, eps, st)
            if (D <= 256) return KCU_LN_VEC(1);
            if (D <= 512) return KCU_LN_VEC(2);
            if (D <= 768) return KCU_LN_VEC(3);
            if (D <= 1024) return KCU_LN_VEC(4);
            return KCU_LN_VEC(8);
#undef KCU_LN_VEC
        }
    }
    if (D <= 1024) {
        int64_t blocks = (rows + (KCU_THREADS / 32) - 1) / (KCU_THREADS / 32);
        k_layernorm<T, 32, ADD, RMS><<<grid_for(blocks, 1), KCU_THREADS, 0, st>>>(
            in, r_rows, (const T *)scale, ss, (const T *)bias, bs, (T *)y, stat_t, mean, inv, rows, D, eps);
    } else {
        k_layernorm<T, KCU_THREADS, ADD, RMS><<<grid_for(rows, 1), KCU_THREADS, 0, st>>>(
            in, r_rows, (const T *)scale, ss, (const T *)bias, bs, (T *)y, stat_t, mean, inv, rows, D, eps);
    }
    return cudaGetLastError();
}

/* ---- BatchNormalization ----------------------------------------------------------------------- */

__device__ __forceinline__ double load_dt(kiln_dtype t, const void *p, int64_t i) {
    switch (t) {
    case KILN_DTYPE_FLOAT64: return ((const double *)p)[i];
    case KILN_DTYPE_FLOAT16: return (double)__half2float(((const __half *)p)[i]);
    case KILN_DTYPE_BFLOAT16: return (double)__bfloat162float(((const __nv_bfloat16 *)p)[i]);
    default: return (double)((const float *)p)[i];
    }
}

__global__ void __launch_bounds__(KCU_THREADS)
    k_bn_coef(kiln_dtype pt, const void *scale, const void *bias, const void *mean,
              const void *var, float *coef, int64_t np, float eps) {
    KCU_GRID_STRIDE(i, np) {
        double s = load_dt(pt, scale, i), b = load_dt(pt, bias, i);
        double m = load_dt(pt, mean, i), v = load_dt(pt, var, i);
        double mul = s / ::sqrt(v + (double)eps);
        coef[i] = (float)mul;
        coef[np + i] = (float)(b - m * mul);
    }
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_bn_apply(const T *__restrict__ x, T *__restrict__ y, const float *__restrict__ coef,
               int64_t total, int64_t C, int64_t plane, int per_elem, int64_t np) {
    KCU_GRID_STRIDE(i, total) {
        int64_t p = i / plane, ch = p % C;
        int64_t k = per_elem ? ch * plane + (i % plane) : ch;
        float v = (float)Num<T>::load(x[i]);
        y[i] = Num<T>::store((typename Num<T>::C)(v * coef[k] + coef[np + k]));
    }
}

/* fp64 keeps the double coefficients' precision poorly through float; use
 * double all the way for it */
__global__ void __launch_bounds__(KCU_THREADS)
    k_bn_apply_f64(const double *__restrict__ x, double *__restrict__ y, kiln_dtype pt,
                   const void *scale, const void *bias, const void *mean, const void *var,
                   int64_t total, int64_t C, int64_t plane, int per_elem, float eps) {
    KCU_GRID_STRIDE(i, total) {
        int64_t p = i / plane, ch = p % C;
        int64_t k = per_elem ? ch * plane + (i % plane) : ch;
        double mul = load_dt(pt, scale, k) / ::sqrt(load_dt(pt, var, k) + (double)eps);
        double add = load_dt(pt, bias, k) - load_dt(pt, mean, k) * mul;
        y[i] = x[i] * mul + add;
    }
}

} /* namespace kcu */

using namespace kcu;

extern "C" {

cudaError_t kcu_softmax(int kind, kiln_dtype t, const void *x, void *y, int64_t outer, int64_t n,
                        int64_t inner, cudaStream_t stream) {
    if (outer <= 0 || n <= 0 || inner <= 0) return cudaSuccess;
    KCU_SWITCH_FLOAT(t, return softmax_launch<T_>(kind, x, y, outer, n, inner, stream))
    return cudaErrorInvalidValue;
}

cudaError_t kcu_layernorm(kiln_dtype t, const void *x, const void *scale, int scale_scalar,
                          const void *bias, int bias_scalar, void *y, kiln_dtype stat_t,
                          void *mean, void *inv_std, int64_t rows, int64_t D, float eps,
                          cudaStream_t stream) {
    if (rows <= 0) return cudaSuccess;
    KCU_SWITCH_FLOAT(t, return layernorm_launch<T_, false>(RowIn<T_, false>{(const T_ *)x, NULL, NULL}, 1, scale,
                                                            scale_scalar, bias, bias_scalar, y, stat_t, mean,
                                                            inv_std, rows, D, eps, stream))
    return cudaErrorInvalidValue;
}

cudaError_t kcu_rmsnorm(kiln_dtype t, const void *x, const void *scale, int scale_scalar, void *y, int64_t rows,
                        int64_t D, float eps, cudaStream_t stream) {
    if (rows <= 0) return cudaSuccess;
    KCU_SWITCH_FLOAT(t, return layernorm_launch<T_, false, true>(RowIn<T_, false>{(const T_ *)x, NULL, NULL}, 1,
                                                                  scale, scale_scalar, NULL, 0, y, KILN_DTYPE_FLOAT32,
                                                                  NULL, NULL, rows, D, eps, stream))
    return cudaErrorInvalidValue;
}

cudaError_t kcu_add_layernorm(kiln_dtype t, const void *x, const void *r, int64_t r_rows, void *sum,
                              const void *scale, int scale_scalar, const void *bias, int bias_scalar, void *y,
                              int64_t rows, int64_t D, float eps, cudaStream_t stream) {
    if (rows <= 0) return cudaSuccess;
    if (r_rows <= 0 || rows % r_rows) return cudaErrorInvalidValue;
    switch (t) {
#define KCU_ALN(T_)                                                                                          \
    return layernorm_launch<T_, true>(RowIn<T_, true>{(const T_ *)x, (const T_ *)r, (T_ *)sum}, r_rows, scale, \
                                      scale_scalar, bias, bias_scalar, y, KILN_DTYPE_FLOAT32, NULL, NULL, rows, \
                                      D, eps, stream)
    case KILN_DTYPE_FLOAT32: KCU_ALN(float);
    case KILN_DTYPE_FLOAT16: KCU_ALN(__half);
    case KILN_DTYPE_BFLOAT16: KCU_ALN(__nv_bfloat16);
#undef KCU_ALN
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t kcu_batchnorm(kiln_dtype t, const void *x, void *y, kiln_dtype pt,
                          const void *scale, const void *bias, const void *mean, const void *var,
                          float *coef, int64_t N, int64_t C, int64_t plane, int per_elem,
                          float eps, cudaStream_t stream) {
    int64_t total = N * C * plane;
    if (total <= 0) return cudaSuccess;
    if (t == KILN_DTYPE_FLOAT64) {
        k_bn_apply_f64<<<grid_for(total), KCU_THREADS, 0, stream>>>(
            (const double *)x, (double *)y, pt, scale, bias, mean, var, total, C, plane, per_elem,
            eps);
        return cudaGetLastError();
    }
    int64_t np = per_elem ? C * plane : C;
    k_bn_coef<<<grid_for(np), KCU_THREADS, 0, stream>>>(pt, scale, bias, mean, var, coef, np, eps);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    switch (t) {
    case KILN_DTYPE_FLOAT32:
        k_bn_apply<float><<<grid_for(total), KCU_THREADS, 0, stream>>>(
            (const float *)x, (float *)y, coef, total, C, plane, per_elem, np);
        break;
    case KILN_DTYPE_FLOAT16:
        k_bn_apply<__half><<<grid_for(total), KCU_THREADS, 0, stream>>>(
            (const __half *)x, (__half *)y, coef, total, C, plane, per_elem, np);
        break;
    case KILN_DTYPE_BFLOAT16:
        k_bn_apply<__nv_bfloat16><<<grid_for(total), KCU_THREADS, 0, stream>>>(
            (const __nv_bfloat16 *)x, (__nv_bfloat16 *)y, coef, total, C, plane, per_elem, np);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

} /* extern "C" */
