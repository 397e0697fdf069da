/* k_pool.cu -- MaxPool/AveragePool (1-3 spatial dims), and the helpers of
 * the convolution fallback: im2col, a direct (depthwise-friendly)
 * convolution and the per-channel bias add. One thread per output element. */
#include "k_common.cuh"

namespace kcu {

/* spatial coordinates of output position p (row-major over out[0..ns)) */
__device__ __forceinline__ void unravel(int ns, const int64_t *dims, int64_t p, int64_t *c) {
    for (int i = ns - 1; i >= 0; i--) {
        c[i] = p % dims[i];
        p /= dims[i];
    }
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_pool(const T *__restrict__ x, T *__restrict__ y, int64_t *__restrict__ ind,
           const __grid_constant__ kcu_pool g) {
    typedef typename Num<T>::C C;
    KCU_GRID_STRIDE(i, g.out_n) {
        const int64_t pl = i / g.out_sz, p = i % g.out_sz;
        int64_t o[KCU_MAX_SP] = {0, 0, 0};
        unravel(g.ns, g.out, p, o);
        const T *xp = x + pl * g.in_sz;
        int64_t kn = 1;
        for (int d = 0; d < g.ns; d++) kn *= g.k[d];
        C best = -(C)INFINITY, acc = 0;
        int64_t bi = -1, n_valid = 0, n_pad = 0;
        for (int64_t kp = 0; kp < kn; kp++) {
            int64_t rem = kp, idx = 0;
            bool in = true, padded = true;
            int64_t kx[KCU_MAX_SP] = {0, 0, 0};
            for (int d = g.ns - 1; d >= 0; d--) {
                kx[d] = rem % g.k[d];
                rem /= g.k[d];
            }
            for (int d = 0; d < g.ns; d++) {
                int64_t q = o[d] * g.s[d] - g.pb[d] + kx[d] * g.d[d];
                if (q < 0 || q >= g.in[d]) in = false;
                if (q < -g.pb[d] || q >= g.in[d] + g.pe[d]) padded = false;
                idx = idx * g.in[d] + q;
            }
            if (in) {
                C v = Num<T>::load(xp[idx]);
                if (g.kind == 0) {
                    if (v > best || bi < 0) {
                        best = v;
                        bi = idx;
                    }
                } else {
                    acc += v;
                }
                n_valid++;
            } else if (padded) {
                n_pad++;
            }
        }
        C r;
        if (g.kind == 0) r = best;
        else r = acc / (C)(g.count_include_pad ? n_valid + n_pad : n_valid);
        y[i] = Num<T>::store(r);
        if (ind) ind[i] = pl * g.in_sz + bi;
    }
}

/* col[(c * k_sz + kk) * out_sz + p] for channel c of group grp, image n */
template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_im2col(const T *__restrict__ x, T *__restrict__ col, int64_t n, int64_t grp,
             const __grid_constant__ kcu_conv g) {
    const int64_t total = g.Cg * g.k_sz * g.out_sz;
    KCU_GRID_STRIDE(i, total) {
        const int64_t p = i % g.out_sz, row = i / g.out_sz;
        const int64_t kk = row % g.k_sz, c = row / g.k_sz;
        int64_t o[KCU_MAX_SP] = {0, 0, 0}, kx[KCU_MAX_SP] = {0, 0, 0};
        unravel(g.ns, g.out, p, o);
        unravel(g.ns, g.k, kk, kx);
        int64_t idx = 0;
        bool in = true;
        for (int d = 0; d < g.ns; d++) {
            int64_t q = o[d] * g.s[d] - g.pb[d] + kx[d] * g.d[d];
            if (q < 0 || q >= g.in[d]) in = false;
            idx = idx * g.in[d] + q;
        }
        const T *xc = x + (n * g.C + grp * g.Cg + c) * g.in_sz;
        col[i] = in ? xc[idx] : Num<T>::store((typename Num<T>::C)0);
    }
}

/* y[n, m, p] = bias[m] + sum over (c, kk) of w[m, c, kk] * x[n, grp*Cg + c, pos] */
template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_conv_direct(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ bias,
                  T *__restrict__ y, const __grid_constant__ kcu_conv g) {
    typedef typename Num<T>::C C;
    const int64_t total = g.N * g.M * g.out_sz;
    KCU_GRID_STRIDE(i, total) {
        const int64_t p = i % g.out_sz, t = i / g.out_sz;
        const int64_t m = t % g.M, n = t / g.M, grp = m / g.Mg;
        int64_t o[KCU_MAX_SP] = {0, 0, 0};
        unravel(g.ns, g.out, p, o);
        C acc = bias ? Num<T>::load(bias[m]) : C(0);
        for (int64_t kk = 0; kk < g.k_sz; kk++) {
            int64_t kx[KCU_MAX_SP] = {0, 0, 0};
            unravel(g.ns, g.k, kk, kx);
            int64_t idx = 0;
            bool in = true;
            for (int d = 0; d < g.ns; d++) {
                int64_t q = o[d] * g.s[d] - g.pb[d] + kx[d] * g.d[d];
                if (q < 0 || q >= g.in[d]) in = false;
                idx = idx * g.in[d] + q;
            }
            if (!in) continue;
            for (int64_t c = 0; c < g.Cg; c++) {
                C xv = Num<T>::load(x[(n * g.C + grp * g.Cg + c) * g.in_sz + idx]);
                C wv = Num<T>::load(w[(m * g.Cg + c) * g.k_sz + kk]);
                acc += xv * wv;
            }
        }
        y[i] = Num<T>::store(acc);
    }
}

} /* namespace kcu */

using namespace kcu;

extern "C" {

cudaError_t kcu_pool_run(kiln_dtype t, const kcu_pool *g, const void *x, void *y, int64_t *ind,
                         cudaStream_t stream) {
    if (g->out_n <= 0) return cudaSuccess;
    KCU_SWITCH_FLOAT(t, {
        k_pool<T_><<<grid_for(g->out_n), KCU_THREADS, 0, stream>>>((const T_ *)x, (T_ *)y, ind, *g);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_im2col(kiln_dtype t, const kcu_conv *g, const void *x, int64_t n, int64_t grp,
                       void *col, cudaStream_t stream) {
    int64_t total = g->Cg * g->k_sz * g->out_sz;
    if (total <= 0) return cudaSuccess;
    KCU_SWITCH_FLOAT(t, {
        k_im2col<T_><<<grid_for(total), KCU_THREADS, 0, stream>>>((const T_ *)x, (T_ *)col, n, grp,
                                                                  *g);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_conv_direct(kiln_dtype t, const kcu_conv *g, const void *x, const void *w,
                            const void *bias, void *y, cudaStream_t stream) {
    int64_t total = g->N * g->M * g->out_sz;
    if (total <= 0) return cudaSuccess;
    KCU_SWITCH_FLOAT(t, {
        k_conv_direct<T_><<<grid_for(total), KCU_THREADS, 0, stream>>>(
            (const T_ *)x, (const T_ *)w, (const T_ *)bias, (T_ *)y, *g);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

} /* extern "C" */
