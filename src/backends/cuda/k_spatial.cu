/* k_spatial.cu -- kernels of the "spatial" family: Pad, Resize/Upsample,
 * MeanVarianceNormalization/InstanceNormalization (group statistics), LRN,
 * Hardmax, ConvTranspose (direct), LpPool, GlobalLpPool, MaxUnpool,
 * MaxRoiPool, ReverseSequence, GridSample, RoiAlign. Index math shared with
 * the host emulation lives in k_spatial.h; GridSample's and RoiAlign's
 * arithmetic is the CPU kernels' own (src/ops/spatial_sample.h). */
#include "k_common.cuh"
#include "k_spatial.h"

namespace kcu {

/* ---- Pad, Resize (nearest): a gather with a fill value ----------------------------------- */

__device__ __forceinline__ int64_t gather_src(const kcu_pad &g, int64_t i) {
    return kcu_pad_src(&g, i);
}
__device__ __forceinline__ int64_t gather_src(const kcu_resize &g, int64_t i) {
    return kcu_rs_nearest_src(&g, i);
}
__device__ __forceinline__ const unsigned char *gather_fill(const kcu_pad &g) { return g.value; }
__device__ __forceinline__ const unsigned char *gather_fill(const kcu_resize &g) {
    return g.extrap;
}

/* y[i] = x[gather_src(g, i)], or the fill value where that is -1: *value
 * (device) when not NULL, else the geometry's bytes */
template <typename E, typename G>
__global__ void __launch_bounds__(KCU_THREADS)
    k_gather_fill(const E *__restrict__ x, const E *__restrict__ value, E *__restrict__ y,
                  const __grid_constant__ G g) {
    E v;
    if (value)
        v = *value;
    else
        memcpy(&v, gather_fill(g), sizeof v);
    KCU_GRID_STRIDE(i, g.n) {
        const int64_t s = gather_src(g, i);
        y[i] = s < 0 ? v : x[s];
    }
}

/* ---- Resize (linear, cubic) -------------------------------------------------------------- */

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_resize_interp(const T *__restrict__ x, T *__restrict__ y,
                    const __grid_constant__ kcu_resize g) {
    T ev;
    memcpy(&ev, g.extrap, sizeof ev);
    KCU_GRID_STRIDE(i, g.n) {
        kcu_rs_elem e;
        if (kcu_rs_prepare(&g, i, &e)) {
            y[i] = ev;
            continue;
        }
        double acc = 0;
        do {
            int64_t off = 0;
            double wp = kcu_rs_combo(&g, &e, &off);
            if (wp != 0.0) acc += wp * (double)Num<T>::load(x[off]);
        } while (kcu_rs_next(&g, &e));
        y[i] = Num<T>::store((typename Num<T>::C)acc);
    }
}

/* ---- group statistics (MVN, InstanceNormalization) --------------------------------------- */

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_groupnorm(const T *__restrict__ x, const T *__restrict__ scale, const T *__restrict__ bias,
                T *__restrict__ y, const __grid_constant__ kcu_groupnorm g) {
    __shared__ double sh[32];
    for (int64_t o = blockIdx.x; o < g.groups; o += gridDim.x) {
        const int64_t base = kcu_gn_off(g.krank, g.kdims, g.kst, o);
        double s = 0;
        for (int64_t r = threadIdx.x; r < g.R; r += blockDim.x)
            s += (double)Num<T>::load(x[base + kcu_gn_off(g.rrank, g.rdims, g.rst, r)]);
        s = block_reduce(s, OpAdd(), sh);
        const double mean = g.R ? s / (double)g.R : 0.0;
        double ss = 0;
        for (int64_t r = threadIdx.x; r < g.R; r += blockDim.x) {
            double d =
                (double)Num<T>::load(x[base + kcu_gn_off(g.rrank, g.rdims, g.rst, r)]) - mean;
            ss += d * d;
        }
        ss = block_reduce(ss, OpAdd(), sh);
        const double var = g.R ? ss / (double)g.R : 0.0;
        double mul, add;
        if (g.kind == KCU_GN_MVN) {
            mul = 1.0 / (sqrt(var) + 1e-9);
            add = -mean * mul;
        } else {
            const int64_t c = o % g.C;
            const double inv = 1.0 / sqrt(var + g.eps);
            mul = inv * (double)Num<T>::load(scale[c]);
            add = (double)Num<T>::load(bias[c]) - mean * mul;
        }
        for (int64_t r = threadIdx.x; r < g.R; r += blockDim.x) {
            const int64_t off = base + kcu_gn_off(g.rrank, g.rdims, g.rst, r);
            double v = (double)Num<T>::load(x[off]);
            y[off] = Num<T>::store(
                (typename Num<T>::C)(g.kind == KCU_GN_MVN ? (v - mean) * mul : v * mul + add));
        }
    }
}

/* ---- LRN, Hardmax ------------------------------------------------------------------------ */

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_lrn(const T *__restrict__ x, T *__restrict__ y, int64_t N, int64_t C, int64_t plane, int size,
          double alpha, double beta, double bias) {
    const int64_t total = N * C * plane, lo = (size - 1) / 2, hi = size - 1 - lo;
    KCU_GRID_STRIDE(i, total) {
        const int64_t p = i % plane, c = (i / plane) % C, n = i / (plane * C);
        const int64_t c0 = c - lo < 0 ? 0 : c - lo, c1 = c + hi >= C ? C - 1 : c + hi;
        double ss = 0;
        for (int64_t k = c0; k <= c1; k++) {
            double v = (double)Num<T>::load(x[(n * C + k) * plane + p]);
            ss += v * v;
        }
        double v = (double)Num<T>::load(x[i]);
        y[i] = Num<T>::store((typename Num<T>::C)(v / pow(bias + alpha / size * ss, beta)));
    }
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_hardmax(const T *__restrict__ x, T *__restrict__ y, int64_t outer, int64_t n, int64_t inner,
              int nan_first_zero) {
    typedef typename Num<T>::C C;
    KCU_GRID_STRIDE(r, outer * inner) {
        const int64_t base = (r / inner) * n * inner + r % inner;
        C m = Num<T>::load(x[base]);
        int64_t arg = 0;
        for (int64_t k = 1; k < n; k++) {
            C v = Num<T>::load(x[base + k * inner]);
            if (v > m) {
                m = v;
                arg = k;
            }
        }
        if (nan_first_zero && m != m) arg = -1;
        for (int64_t k = 0; k < n; k++)
            y[base + k * inner] = Num<T>::store((C)(k == arg ? 1 : 0));
    }
}

/* ---- ConvTranspose (direct) -------------------------------------------------------------- */

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_conv_transpose(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ bias,
                     T *__restrict__ y, const __grid_constant__ kcu_conv g) {
    typedef typename Num<T>::C C;
    const int64_t total = g.N * g.M * g.out_sz;
    KCU_GRID_STRIDE(i, total) {
        const int64_t m = (i / g.out_sz) % g.M, n = i / (g.out_sz * g.M);
        const int64_t grp = m / g.Mg, mm = m % g.Mg;
        int64_t o[KCU_MAX_SP] = {0, 0, 0};
        kcu_convt_out_pos(&g, i % g.out_sz, o);
        C acc = bias ? Num<T>::load(bias[m]) : C(0);
        for (int64_t kk = 0; kk < g.k_sz; kk++) {
            const int64_t idx = kcu_convt_src(&g, o, kk);
            if (idx < 0) continue;
            for (int64_t c = 0; c < g.Cg; c++) {
                const int64_t ch = grp * g.Cg + c;
                acc += Num<T>::load(x[(n * g.C + ch) * g.in_sz + idx]) *
                       Num<T>::load(w[(ch * g.Mg + mm) * g.k_sz + kk]);
            }
        }
        y[i] = Num<T>::store(acc);
    }
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_convt_col2im(const T *__restrict__ col, const T *__restrict__ bias, T *__restrict__ y,
                   int64_t n, int64_t grp, const __grid_constant__ kcu_conv g) {
    typedef typename Num<T>::C C;
    const int64_t total = g.Mg * g.out_sz;
    KCU_GRID_STRIDE(i, total) {
        const int64_t mm = i / g.out_sz, m = grp * g.Mg + mm;
        int64_t o[KCU_MAX_SP] = {0, 0, 0};
        kcu_convt_out_pos(&g, i % g.out_sz, o);
        C acc = bias ? Num<T>::load(bias[m]) : C(0);
        for (int64_t kk = 0; kk < g.k_sz; kk++) {
            const int64_t idx = kcu_convt_src(&g, o, kk);
            if (idx >= 0) acc += Num<T>::load(col[(mm * g.k_sz + kk) * g.in_sz + idx]);
        }
        y[(n * g.M + m) * g.out_sz + i % g.out_sz] = Num<T>::store(acc);
    }
}

/* ---- LpPool, GlobalLpPool, MaxUnpool, MaxRoiPool ----------------------------------------- */

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_lppool(const T *__restrict__ x, T *__restrict__ y, double pw,
             const __grid_constant__ kcu_pool g) {
    KCU_GRID_STRIDE(i, g.out_n) {
        const int64_t pl = i / g.out_sz;
        int64_t p = i % g.out_sz, o[KCU_MAX_SP] = {0, 0, 0}, kn = 1;
        for (int d = g.ns - 1; d >= 0; d--) {
            o[d] = p % g.out[d];
            p /= g.out[d];
            kn *= g.k[d];
        }
        const T *xp = x + pl * g.in_sz;
        double acc = 0;
        for (int64_t kp = 0; kp < kn; kp++) {
            int64_t rem = kp, idx = 0, mul = 1;
            bool in = true;
            for (int d = g.ns - 1; d >= 0; d--) {
                const int64_t q = o[d] * g.s[d] - g.pb[d] + (rem % g.k[d]) * g.d[d];
                rem /= g.k[d];
                if (q < 0 || q >= g.in[d]) in = false;
                idx += q * mul;
                mul *= g.in[d];
            }
            if (in) acc += pow(fabs((double)Num<T>::load(xp[idx])), pw);
        }
        y[i] = Num<T>::store((typename Num<T>::C)pow(acc, 1.0 / pw));
    }
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_global_lppool(const T *__restrict__ x, T *__restrict__ y, int64_t planes, int64_t n,
                    double pw) {
    __shared__ double sh[32];
    for (int64_t pl = blockIdx.x; pl < planes; pl += gridDim.x) {
        double acc = 0;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
            acc += pow(fabs((double)Num<T>::load(x[pl * n + i])), pw);
        acc = block_reduce(acc, OpAdd(), sh);
        if (threadIdx.x == 0) y[pl] = Num<T>::store((typename Num<T>::C)pow(acc, 1.0 / pw));
    }
}

template <typename E>
__global__ void __launch_bounds__(KCU_THREADS)
    k_maxunpool(const E *__restrict__ x, const int64_t *__restrict__ ind, E *__restrict__ y,
                const __grid_constant__ kcu_unpool g) {
    KCU_GRID_STRIDE(j, g.nx) {
        const int64_t o = kcu_unpool_dst(&g, ind[j]);
        if (o >= 0 && o < g.ny) y[o] = x[j];
    }
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_maxroipool(const T *__restrict__ x, const T *__restrict__ rois, T *__restrict__ y,
                 const __grid_constant__ kcu_roipool g) {
    const int64_t total = g.R * g.C * g.PH * g.PW;
    KCU_GRID_STRIDE(i, total) {
        const int64_t pw = i % g.PW, ph = (i / g.PW) % g.PH, c = (i / (g.PW * g.PH)) % g.C,
                      r = i / (g.PW * g.PH * g.C);
        const T *ro = rois + r * 5;
        const int64_t b = (int64_t)(double)Num<T>::load(ro[0]);
        if (b < 0 || b >= g.N) {
            y[i] = Num<T>::store((typename Num<T>::C)0);
            continue;
        }
        const int64_t x1 = (int64_t)round((double)Num<T>::load(ro[1]) * g.scale);
        const int64_t y1 = (int64_t)round((double)Num<T>::load(ro[2]) * g.scale);
        const int64_t x2 = (int64_t)round((double)Num<T>::load(ro[3]) * g.scale);
        const int64_t y2 = (int64_t)round((double)Num<T>::load(ro[4]) * g.scale);
        const int64_t rh = y2 - y1 + 1 > 1 ? y2 - y1 + 1 : 1,
                      rw = x2 - x1 + 1 > 1 ? x2 - x1 + 1 : 1;
        const double bh = (double)rh / (double)g.PH, bw = (double)rw / (double)g.PW;
        int64_t hs = (int64_t)floor((double)ph * bh) + y1,
                he = (int64_t)ceil((double)(ph + 1) * bh) + y1;
        int64_t ws = (int64_t)floor((double)pw * bw) + x1,
                we = (int64_t)ceil((double)(pw + 1) * bw) + x1;
        hs = hs < 0 ? 0 : hs > g.H ? g.H : hs;
        he = he < 0 ? 0 : he > g.H ? g.H : he;
        ws = ws < 0 ? 0 : ws > g.W ? g.W : ws;
        we = we < 0 ? 0 : we > g.W ? g.W : we;
        double m = (he <= hs || we <= ws) ? 0.0 : -INFINITY;
        for (int64_t h = hs; h < he; h++)
            for (int64_t w = ws; w < we; w++) {
                const double v = (double)Num<T>::load(x[((b * g.C + c) * g.H + h) * g.W + w]);
                m = v > m || v != v ? v : m; /* NaN kept, as MaxPool */
            }
        y[i] = Num<T>::store((typename Num<T>::C)m);
    }
}

/* ---- ReverseSequence --------------------------------------------------------------------- */

template <typename E>
__global__ void __launch_bounds__(KCU_THREADS)
    k_reverse_sequence(const E *__restrict__ x, const void *__restrict__ lens, E *__restrict__ y,
                       const __grid_constant__ kcu_revseq g) {
    KCU_GRID_STRIDE(i, g.n) {
        const int64_t in = i % g.inner, a1 = (i / g.inner) % g.d1, a0 = i / (g.inner * g.d1);
        const int64_t b = g.batch_axis == 0 ? a0 : a1, t = g.batch_axis == 0 ? a1 : a0;
        const int64_t T = g.batch_axis == 0 ? g.d1 : g.d0;
        const int64_t len =
            g.lens_i32 ? (int64_t)((const int32_t *)lens)[b] : ((const int64_t *)lens)[b];
        int64_t ts = t;
        if (len >= 0 && len <= T && t < len) ts = len - 1 - t;
        const int64_t s0 = g.batch_axis == 0 ? a0 : ts, s1 = g.batch_axis == 0 ? ts : a1;
        y[i] = x[(s0 * g.d1 + s1) * g.inner + in];
    }
}

/* ---- GridSample, RoiAlign ---------------------------------------------------------------- */

__global__ void __launch_bounds__(KCU_THREADS)
    k_gridsample(const void *__restrict__ x, const void *__restrict__ grid, void *__restrict__ y,
                 const __grid_constant__ kcu_gridsample g) {
    const int64_t total = g.N * g.C * g.Ho * g.Wo;
    KCU_GRID_STRIDE(i, total) {
        const int64_t ow = i % g.Wo, oh = (i / g.Wo) % g.Ho, c = (i / (g.Wo * g.Ho)) % g.C,
                      n = i / (g.Wo * g.Ho * g.C);
        const int64_t ge = ((n * g.Ho + oh) * g.Wo + ow) * 2;
        const double gx = g.g_f64 ? ((const double *)grid)[ge] : (double)((const float *)grid)[ge];
        const double gy =
            g.g_f64 ? ((const double *)grid)[ge + 1] : (double)((const float *)grid)[ge + 1];
        const double fx = gs_unnormalize(gx, g.W, g.align != 0),
                     fy = gs_unnormalize(gy, g.H, g.align != 0);
        const double v = gs_sample(x, g.x_f64 != 0, (n * g.C + c) * g.H * g.W, g.H, g.W, fx, fy,
                                   g.mode, g.pad, g.align != 0);
        if (g.x_f64)
            ((double *)y)[i] = v;
        else
            ((float *)y)[i] = (float)v;
    }
}

__global__ void __launch_bounds__(KCU_THREADS)
    k_roialign(const void *__restrict__ x, const void *__restrict__ rois,
               const void *__restrict__ batch, void *__restrict__ y,
               const __grid_constant__ kcu_roialign g) {
    const int64_t total = g.R * g.C * g.PH * g.PW;
    KCU_GRID_STRIDE(i, total) {
        const int64_t pw = i % g.PW, ph = (i / g.PW) % g.PH, c = (i / (g.PW * g.PH)) % g.C,
                      r = i / (g.PW * g.PH * g.C);
        const int64_t b =
            g.bi_i32 ? (int64_t)((const int32_t *)batch)[r] : ((const int64_t *)batch)[r];
        double v = 0.0;
        if (g.H > 0 && g.W > 0 && b >= 0 && b < g.N) {
            double rv[4];
            for (int k = 0; k < 4; k++)
                rv[k] = g.x_f64 ? ((const double *)rois)[r * 4 + k]
                                : (double)((const float *)rois)[r * 4 + k];
            const roi_box bx = roi_box_make(rv[0], rv[1], rv[2], rv[3], g.scale, g.half_pixel, g.PH,
                                            g.PW, g.sampling_ratio);
            v = roi_bin(x, g.x_f64 != 0, (b * g.C + c) * g.H * g.W, g.H, g.W, &bx, ph, pw,
                        g.max_mode);
        }
        if (g.x_f64)
            ((double *)y)[i] = v;
        else
            ((float *)y)[i] = (float)v;
    }
}

} /* namespace kcu */

using namespace kcu;


extern "C" {

cudaError_t kcu_pad_run(size_t es, const kcu_pad *g, const void *x, const void *value, void *y,
                        cudaStream_t stream) {
    if (g->n <= 0) return cudaSuccess;
    KCU_SWITCH_ES(es, {
        k_gather_fill<E_, kcu_pad><<<grid_for(g->n), KCU_THREADS, 0, stream>>>(
            (const E_ *)x, (const E_ *)value, (E_ *)y, *g);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_resize_run(kiln_dtype t, size_t es, const kcu_resize *g, const void *x, void *y,
                           cudaStream_t stream) {
    if (g->n <= 0) return cudaSuccess;
    if (g->mode == RS_NEAREST) {
        KCU_SWITCH_ES(es, {
            k_gather_fill<E_, kcu_resize><<<grid_for(g->n), KCU_THREADS, 0, stream>>>(
                (const E_ *)x, (const E_ *)NULL, (E_ *)y, *g);
            return cudaGetLastError();
        })
        return cudaErrorInvalidValue;
    }
    KCU_SWITCH_FLOAT(t, {
        k_resize_interp<T_><<<grid_for(g->n), KCU_THREADS, 0, stream>>>((const T_ *)x, (T_ *)y, *g);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_groupnorm_run(kiln_dtype t, const kcu_groupnorm *g, const void *x,
                              const void *scale, const void *bias, void *y, cudaStream_t stream) {
    if (g->groups <= 0 || g->R <= 0) return cudaSuccess;
    unsigned blocks = g->groups > KCU_MAX_BLOCKS ? KCU_MAX_BLOCKS : (unsigned)g->groups;
    KCU_SWITCH_FLOAT(t, {
        k_groupnorm<T_><<<blocks, KCU_THREADS, 0, stream>>>((const T_ *)x, (const T_ *)scale,
                                                            (const T_ *)bias, (T_ *)y, *g);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_lrn(kiln_dtype t, const void *x, void *y, int64_t N, int64_t C, int64_t plane,
                    int size, double alpha, double beta, double bias, cudaStream_t stream) {
    int64_t total = N * C * plane;
    if (total <= 0) return cudaSuccess;
    KCU_SWITCH_FLOAT(t, {
        k_lrn<T_><<<grid_for(total), KCU_THREADS, 0, stream>>>((const T_ *)x, (T_ *)y, N, C, plane,
                                                               size, alpha, beta, bias);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_hardmax(kiln_dtype t, const void *x, void *y, int64_t outer, int64_t n,
                        int64_t inner, int nan_first_zero, cudaStream_t stream) {
    int64_t rows = outer * inner;
    if (rows <= 0 || n <= 0) return cudaSuccess;
    KCU_SWITCH_FLOAT(t, {
        k_hardmax<T_><<<grid_for(rows), KCU_THREADS, 0, stream>>>((const T_ *)x, (T_ *)y, outer, n,
                                                                  inner, nan_first_zero);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_conv_transpose(kiln_dtype t, const kcu_conv *g, const void *x, const void *w,
                               const void *bias, void *y, cudaStream_t stream) {
    int64_t total = g->N * g->M * g->out_sz;
    if (total <= 0) return cudaSuccess;
    KCU_SWITCH_FLOAT(t, {
        k_conv_transpose<T_><<<grid_for(total), KCU_THREADS, 0, stream>>>(
            (const T_ *)x, (const T_ *)w, (const T_ *)bias, (T_ *)y, *g);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_lppool(kiln_dtype t, const kcu_pool *g, double p, const void *x, void *y,
                       cudaStream_t stream) {
    if (g->out_n <= 0) return cudaSuccess;
    KCU_SWITCH_FLOAT(t, {
        k_lppool<T_><<<grid_for(g->out_n), KCU_THREADS, 0, stream>>>((const T_ *)x, (T_ *)y, p, *g);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_global_lppool(kiln_dtype t, const void *x, void *y, int64_t planes, int64_t n,
                              double p, cudaStream_t stream) {
    if (planes <= 0) return cudaSuccess;
    unsigned blocks = planes > KCU_MAX_BLOCKS ? KCU_MAX_BLOCKS : (unsigned)planes;
    KCU_SWITCH_FLOAT(t, {
        k_global_lppool<T_>
            <<<blocks, KCU_THREADS, 0, stream>>>((const T_ *)x, (T_ *)y, planes, n, p);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_maxunpool(size_t es, const kcu_unpool *g, const void *x, const int64_t *ind,
                          void *y, cudaStream_t stream) {
    if (g->ny <= 0) return cudaSuccess;
    cudaError_t e = cudaMemsetAsync(y, 0, (size_t)g->ny * es, stream);
    if (e != cudaSuccess || g->nx <= 0) return e;
    KCU_SWITCH_ES(es, {
        k_maxunpool<E_>
            <<<grid_for(g->nx), KCU_THREADS, 0, stream>>>((const E_ *)x, ind, (E_ *)y, *g);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_maxroipool(kiln_dtype t, const kcu_roipool *g, const void *x, const void *rois,
                           void *y, cudaStream_t stream) {
    int64_t total = g->R * g->C * g->PH * g->PW;
    if (total <= 0) return cudaSuccess;
    KCU_SWITCH_FLOAT(t, {
        k_maxroipool<T_><<<grid_for(total), KCU_THREADS, 0, stream>>>(
            (const T_ *)x, (const T_ *)rois, (T_ *)y, *g);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_reverse_sequence(size_t es, const kcu_revseq *g, const void *x, const void *lens,
                                 void *y, cudaStream_t stream) {
    if (g->n <= 0) return cudaSuccess;
    KCU_SWITCH_ES(es, {
        k_reverse_sequence<E_>
            <<<grid_for(g->n), KCU_THREADS, 0, stream>>>((const E_ *)x, lens, (E_ *)y, *g);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_gridsample_run(const kcu_gridsample *g, const void *x, const void *grid, void *y,
                               cudaStream_t stream) {
    int64_t total = g->N * g->C * g->Ho * g->Wo;
    if (total <= 0) return cudaSuccess;
    k_gridsample<<<grid_for(total), KCU_THREADS, 0, stream>>>(x, grid, y, *g);
    return cudaGetLastError();
}

cudaError_t kcu_roialign_run(const kcu_roialign *g, const void *x, const void *rois,
                             const void *batch, void *y, cudaStream_t stream) {
    int64_t total = g->R * g->C * g->PH * g->PW;
    if (total <= 0) return cudaSuccess;
    k_roialign<<<grid_for(total), KCU_THREADS, 0, stream>>>(x, rois, batch, y, *g);
    return cudaGetLastError();
}

cudaError_t kcu_convt_col2im(kiln_dtype t, const kcu_conv *g, const void *col, const void *bias,
                             void *y, int64_t n, int64_t grp, cudaStream_t stream) {
    int64_t total = g->Mg * g->out_sz;
    if (total <= 0) return cudaSuccess;
    KCU_SWITCH_FLOAT(t, {
        k_convt_col2im<T_><<<grid_for(total), KCU_THREADS, 0, stream>>>(
            (const T_ *)col, (const T_ *)bias, (T_ *)y, n, grp, *g);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

} /* extern "C" */
