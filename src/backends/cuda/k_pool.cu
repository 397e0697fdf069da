/* k_pool.cu -- MaxPool/AveragePool (1-3 spatial dims), and the helpers of
 * the convolution fallback: im2col, a direct (depthwise-friendly)
 * convolution and the per-channel bias add, and the patch gather of
 * convolutions run as one GEMM (kcu_patches). One thread per output element. */
#include "k_common.cuh"

#include <cooperative_groups.h>

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
                    if (v > best || bi < 0 || (v != v && best == best)) { /* NaN kept, as torch */
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

/* ---- channels last ------------------------------------------------------------- */

/* thread per (n, ho, wo, group of V channels) */
/* I: the index type (32 bits where every offset fits: cheaper division) */
template <typename T, int V, typename I>
__global__ void __launch_bounds__(KCU_THREADS)
    k_pool_nhwc(const T *__restrict__ x, T *__restrict__ y, const __grid_constant__ kcu_pool_nhwc g) {
    typedef Vec<T, V> VT;
    const I cv = (I)(g.C / V), total = (I)(g.N * g.Ho * g.Wo) * cv, Wo = (I)g.Wo, Ho = (I)g.Ho;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)blockDim.x * gridDim.x) {
        I c = i % cv, p = i / cv;
        const I wo = p % Wo;
        p /= Wo;
        const I ho = p % Ho, n = p / Ho;
        float best[V], acc[V];
#pragma unroll
        for (int j = 0; j < V; j++) best[j] = -INFINITY, acc[j] = 0.0f;
        int n_valid = 0, n_pad = 0;
        for (I ki = 0; ki < (I)g.kh; ki++) {
            const I h = ho * (I)g.sh - (I)g.ph + ki * (I)g.dh;
            const bool in_h = h >= 0 && h < (I)g.H, pad_h = h >= -(I)g.ph && h < (I)(g.H + g.peh);
            for (I kj = 0; kj < (I)g.kw; kj++) {
                const I w = wo * (I)g.sw - (I)g.pw + kj * (I)g.dw;
                if (in_h && w >= 0 && w < (I)g.W) {
                    const VT v = *(const VT *)(x + ((n * (I)g.H + h) * (I)g.W + w) * (I)g.C + c * V);
#pragma unroll
                    for (int j = 0; j < V; j++) {
                        const float f = Num<T>::load(v.v[j]);
                        if (g.kind == 0) {
                            if (n_valid == 0 || f > best[j] || (f != f && best[j] == best[j])) best[j] = f;
                        } else {
                            acc[j] += f;
                        }
                    }
                    n_valid++;
                } else if (pad_h && w >= -(I)g.pw && w < (I)(g.W + g.pew)) {
                    n_pad++;
                }
            }
        }
        VT r;
        const float div = (float)(g.count_include_pad ? n_valid + n_pad : n_valid);
#pragma unroll
        for (int j = 0; j < V; j++) r.v[j] = Num<T>::store(g.kind == 0 ? best[j] : acc[j] / div);
        *(VT *)(y + ((n * Ho + ho) * Wo + wo) * (I)g.C + c * V) = r;
    }
}

/* block (TX, TY) per (TX groups of V channels, image n, split z of the
 * plane): TX = min(32, C / V) so that every thread has channels (a
 * 96-channel layer leaves none idle), the TY = 256 / TX rows of threads
 * split the split's positions (four loads in flight per thread), then the
 * block adds up its rows in shared memory with every thread busy: output o
 * (= j * TX + tx, channel (block * TX + tx) * V + j) gets R = threads / O
 * threads that add TY / R rows each, then one thread adds those R (at most
 * 32 + 8 shared loads in a row; the kernel's earlier form had one thread add
 * V * TY values alone, 224 at 72 channels, about 3 us of the 5.4 us it took
 * at batch 1 on the H100).
 * The block's O sums then go:
 *   - with one split: y = sum / HW;
 *   - CLUSTER (sm_90, the S splits of one channel block are one thread-block
 *     cluster of S <= KCU_GAP_CLUSTER blocks along z): every block leaves its
 *     sums in shared memory, the cluster syncs, block 0 of the cluster adds
 *     the S blocks' sums through distributed shared memory and writes y (one
 *     launch, no scratch), and the cluster syncs again so that no block
 *     leaves while its shared memory is read;
 *   - else: part[z][n][c] for k_gap_finish.
 * blockIdx.x = n * (channel blocks) + channel block (the batch in gridDim.y
 * would cap it at 65535 images), blockIdx.z = z. */
template <typename T, int V, bool CLUSTER>
__global__ void __launch_bounds__(256)
    k_gap_nhwc(const T *__restrict__ x, T *__restrict__ y, float *__restrict__ part, int64_t N, int64_t HW,
               int64_t C, int64_t chunk) {
    typedef Vec<T, V> VT;
    __shared__ float sh[256 * V]; /* [ty][j][tx]: row ty holds O = TX * V sums */
    __shared__ float red[256];    /* [r][o]: the R partial sums of output o */
    __shared__ float out[256];    /* [o]: the block's sums (read by the cluster's block 0) */
    const int tx = threadIdx.x, ty = threadIdx.y, TX = blockDim.x, TY = blockDim.y;
    const int t = ty * TX + tx, O = TX * V, R = (TX * TY) / O;
    const int64_t cv = C / V, cb = (cv + TX - 1) / TX, n = blockIdx.x / cb, z = blockIdx.z;
    const int64_t cblk = (int64_t)(blockIdx.x % cb) * TX, c = cblk + tx;
    const int64_t p0 = z * chunk, p1 = p0 + chunk < HW ? p0 + chunk : HW;
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; j++) acc[j] = 0.0f;
    if (c < cv) {
        const T *xp = x + n * HW * C + c * V;
#pragma unroll 4
        for (int64_t p = p0 + ty; p < p1; p += TY) {
            const VT v = *(const VT *)(xp + p * C);
#pragma unroll
            for (int j = 0; j < V; j++) acc[j] += (float)Num<T>::load(v.v[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < V; j++) sh[(ty * V + j) * TX + tx] = acc[j];
    __syncthreads();
    if (t < R * O) {
        const int o = t % O, r = t / O;
        float s = 0.0f;
        for (int k = r; k < TY; k += R) s += sh[k * O + o];
        red[r * O + o] = s;
    }
    __syncthreads();
    float s = 0.0f;
    const int j = t / TX, q = t % TX;
    const bool mine = t < O && cblk + q < cv; /* this thread holds output t, a real channel */
    if (t < O)
        for (int r = 0; r < R; r++) s += red[r * O + t];
    const int64_t ch = (cblk + q) * V + j;
    if (CLUSTER) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        namespace cg = cooperative_groups;
        cg::cluster_group cl = cg::this_cluster();
        if (t < O) out[t] = s;
        cl.sync();
        if (cl.block_rank() == 0 && mine) {
            float tot = 0.0f;
            const int S = (int)cl.num_blocks();
            for (int b = 0; b < S; b++) tot += cl.map_shared_rank(out, b)[t];
            y[n * C + ch] = Num<T>::store(tot / (float)HW);
        }
        cl.sync();
#endif
    } else if (mine) {
        if (part) part[(z * N + n) * C + ch] = s;
        else y[n * C + ch] = Num<T>::store(s / (float)HW);
    }
}

/* y[i] = (sum of the S partial sums of i) / HW over the N * C outputs */
template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_gap_finish(const float *__restrict__ part, T *__restrict__ y, int64_t NC, int64_t S, int64_t HW) {
    KCU_GRID_STRIDE(i, NC) {
        float s = 0.0f;
        for (int64_t k = 0; k < S; k++) s += part[k * NC + i];
        y[i] = Num<T>::store(s / (float)HW);
    }
}

/* thread per (n, group of V output channels, position): reads along the
 * positions (coalesced), writes V channels at once */
template <typename T, int V>
__global__ void __launch_bounds__(KCU_THREADS)
    k_nchw_to_nhwc_v(const T *__restrict__ x, T *__restrict__ y, int64_t N, int64_t C, int64_t HW, int64_t Cp) {
    typedef Vec<T, V> VT;
    const int64_t cg = Cp / V, total = N * cg * HW;
    KCU_GRID_STRIDE(i, total) {
        const int64_t p = i % HW, t = i / HW, k = t % cg, n = t / cg;
        VT r;
#pragma unroll
        for (int j = 0; j < V; j++) {
            const int64_t c = k * V + j;
            r.v[j] = c < C ? x[(n * C + c) * HW + p] : Num<T>::store(0.0f);
        }
        *(VT *)(y + (n * HW + p) * Cp + k * V) = r;
    }
}

/* thread per (n, l, m, group of 8 output channels) */
template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_s2d_nhwc8(const T *__restrict__ x, T *__restrict__ y, int64_t N, int64_t C, int64_t H, int64_t W, int64_t ph,
                int64_t pw, int64_t Lh, int64_t Lw, int64_t Cp) {
    typedef Vec<T, 8> VT;
    const int64_t cg = Cp / 8, total = N * Lh * Lw * cg;
    KCU_GRID_STRIDE(i, total) {
        const int64_t k = i % cg, t = i / cg, m = t % Lw, t2 = t / Lw, l = t2 % Lh, n = t2 / Lh;
        VT r;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int64_t cc = k * 8 + j, c = cc >> 2, h = 2 * l + ((cc >> 1) & 1) - ph, w = 2 * m + (cc & 1) - pw;
            r.v[j] = c < C && h >= 0 && h < H && w >= 0 && w < W ? x[((n * C + c) * H + h) * W + w]
                                                               : Num<T>::store((typename Num<T>::C)0);
        }
        *(VT *)(y + i * 8) = r;
    }
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_s2d_nhwc1(const T *__restrict__ x, T *__restrict__ y, int64_t N, int64_t C, int64_t H, int64_t W, int64_t ph,
                int64_t pw, int64_t Lh, int64_t Lw, int64_t Cp) {
    const int64_t total = N * Lh * Lw * Cp;
    KCU_GRID_STRIDE(i, total) {
        const int64_t cc = i % Cp, t = i / Cp, m = t % Lw, t2 = t / Lw, l = t2 % Lh, n = t2 / Lh;
        const int64_t c = cc >> 2, h = 2 * l + ((cc >> 1) & 1) - ph, w = 2 * m + (cc & 1) - pw;
        y[i] = c < C && h >= 0 && h < H && w >= 0 && w < W ? x[((n * C + c) * H + h) * W + w]
                                                           : Num<T>::store((typename Num<T>::C)0);
    }
}

template <typename T>
__global__ void __launch_bounds__(KCU_THREADS)
    k_nchw_to_nhwc1(const T *__restrict__ x, T *__restrict__ y, int64_t N, int64_t C, int64_t HW, int64_t Cp) {
    const int64_t total = N * Cp * HW;
    KCU_GRID_STRIDE(i, total) {
        const int64_t c = i % Cp, t = i / Cp, p = t % HW, n = t / HW;
        y[i] = c < C ? x[(n * C + c) * HW + p] : Num<T>::store((typename Num<T>::C)0);
    }
}

/* Thread per V consecutive elements of a patch row (V divides Kp): the
 * row's image and position are found once, the kernel tap of its first
 * element by division and the next ones by counting (I: 32-bit indices
 * where every offset fits, kcu_patches). */
template <typename T, int V, typename I>
__global__ void __launch_bounds__(KCU_THREADS)
    k_patches(const T *__restrict__ x, T *__restrict__ col, const __grid_constant__ kcu_patch g) {
    const I kv = (I)(g.Kp / V), total = (I)(g.N * g.Ho * g.Wo) * kv, Wo = (I)g.Wo, Ho = (I)g.Ho;
    const I C = (I)g.C, H = (I)g.H, W = (I)g.W, kh = (I)g.kh, kw = (I)g.kw, ckk = C * kh * kw;
    const T zero = Num<T>::store((typename Num<T>::C)0), one = Num<T>::store((typename Num<T>::C)1);
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)blockDim.x * gridDim.x) {
        const I r = i / kv, j = (i - r * kv) * V, ow = r % Wo, t = r / Wo, oh = t % Ho, n = t / Ho;
        const I h0 = oh * (I)g.sh, w0 = ow * (I)g.sw;
        I c, a, b; /* channel, kernel row, kernel column of element j */
        if (g.nhwc_in) {
            c = j % C;
            const I q = j / C;
            b = q % kw;
            a = q / kw;
        } else {
            b = j % kw;
            const I q = j / kw;
            a = q % kh;
            c = q / kh;
        }
        Vec<T, V> v;
#pragma unroll
        for (int e = 0; e < V; e++) {
            const I je = j + e;
            if (je < ckk)
                v.v[e] = g.nhwc_in ? x[((n * H + h0 + a) * W + w0 + b) * C + c] : x[((n * C + c) * H + h0 + a) * W + w0 + b];
            else
                v.v[e] = je == ckk && g.one_col ? one : zero;
            if (g.nhwc_in) {
                if (++c == C) {
                    c = 0;
                    if (++b == kw) {
                        b = 0;
                        ++a;
                    }
                }
            } else if (++b == kw) {
                b = 0;
                if (++a == kh) {
                    a = 0;
                    ++c;
                }
            }
        }
        if (V == 1) col[i] = v.v[0];
        else *(Vec<T, V> *)(col + (int64_t)i * V) = v;
    }
}

template <typename T, int V>
static void patches_launch(const kcu_patch *p, const void *x, void *col, cudaStream_t stream) {
    const int64_t total = p->N * p->Ho * p->Wo * (p->Kp / V);
    if (kcu_i32_loop(p->N * p->C * p->H * p->W) && kcu_i32_loop(p->N * p->Ho * p->Wo * p->Kp))
        k_patches<T, V, int32_t><<<grid_for(total), KCU_THREADS, 0, stream>>>((const T *)x, (T *)col, *p);
    else
        k_patches<T, V, int64_t><<<grid_for(total), KCU_THREADS, 0, stream>>>((const T *)x, (T *)col, *p);
}

/* 32-bit indices where every element offset fits (and the loop's last step) */
template <typename T, int V>
static void pool_nhwc_launch(const kcu_pool_nhwc *g, const void *x, void *y, int64_t total, cudaStream_t stream) {
    const bool i32 = kcu_i32_loop(g->N * g->H * g->W * g->C) && kcu_i32_loop(g->N * g->Ho * g->Wo * g->C);
    if (i32) k_pool_nhwc<T, V, int32_t><<<grid_for(total), KCU_THREADS, 0, stream>>>((const T *)x, (T *)y, *g);
    else k_pool_nhwc<T, V, int64_t><<<grid_for(total), KCU_THREADS, 0, stream>>>((const T *)x, (T *)y, *g);
}

/* elements per 16 bytes of T where C and the pointers allow, else 1 */
template <typename T> static int vec_width(int64_t C, const void *a, const void *b) {
    const int v = (int)(16 / sizeof(T));
    return v > 1 && C % v == 0 && (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0 ? v : 1;
}

/* k_gap_nhwc over S splits that form one cluster each (cluster dims 1 x 1 x S) */
template <typename T, int V>
static cudaError_t gap_cluster_launch(dim3 grid, dim3 block, int S, const void *x, void *y, int64_t N, int64_t HW,
                                      int64_t C, int64_t chunk, cudaStream_t stream) {
    cudaLaunchAttribute at;
    cudaLaunchConfig_t cfg = cluster_config(grid, block, stream, dim3(1, 1, (unsigned)S), &at);
    float *none = NULL;
    cudaError_t e = cudaLaunchKernelEx(&cfg, k_gap_nhwc<T, V, true>, (const T *)x, (T *)y, none, N, HW, C, chunk);
    return e != cudaSuccess ? e : cudaGetLastError();
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

cudaError_t kcu_pool_nhwc_run(kiln_dtype t, const kcu_pool_nhwc *g, const void *x, void *y,
                              cudaStream_t stream) {
    if (g->N * g->Ho * g->Wo * g->C <= 0) return cudaSuccess;
    KCU_SWITCH_FLOAT(t, {
        const int v = vec_width<T_>(g->C, x, y);
        const int64_t total = g->N * g->Ho * g->Wo * (g->C / v);
        if (v == 8) pool_nhwc_launch<T_, 8>(g, x, y, total, stream);
        else if (v == 4) pool_nhwc_launch<T_, 4>(g, x, y, total, stream);
        else if (v == 2) pool_nhwc_launch<T_, 2>(g, x, y, total, stream);
        else pool_nhwc_launch<T_, 1>(g, x, y, total, stream);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_gap_nhwc(kiln_dtype t, int64_t N, int64_t HW, int64_t C, const void *x, void *y, float *part,
                         int clusters, cudaStream_t stream) {
    if (N * C <= 0) return cudaSuccess;
    const int64_t S = kcu_gap_nhwc_splits(N, HW, C);
    const bool cluster = kcu_gap_nhwc_cluster(S, clusters);
    if (S > 65535 || (S > 1 && !cluster && !part)) return cudaErrorInvalidValue;
    const int64_t chunk = (HW + S - 1) / S;
    KCU_SWITCH_FLOAT(t, {
        const int v = vec_width<T_>(C, x, y);
        const int64_t cv = C / v;
        const int tx = cv < 32 ? (int)cv : 32;
        const int64_t gx = (cv + tx - 1) / tx * N; /* channel blocks of every image */
        if (gx > INT32_MAX) return cudaErrorInvalidValue;
        const dim3 block((unsigned)tx, (unsigned)(256 / tx)), grid((unsigned)gx, 1, (unsigned)S);
        if (cluster) {
            if (v == 8) return gap_cluster_launch<T_, 8>(grid, block, (int)S, x, y, N, HW, C, chunk, stream);
            if (v == 4) return gap_cluster_launch<T_, 4>(grid, block, (int)S, x, y, N, HW, C, chunk, stream);
            if (v == 2) return gap_cluster_launch<T_, 2>(grid, block, (int)S, x, y, N, HW, C, chunk, stream);
            return gap_cluster_launch<T_, 1>(grid, block, (int)S, x, y, N, HW, C, chunk, stream);
        }
        float *pp = S > 1 ? part : NULL;
        if (v == 8) k_gap_nhwc<T_, 8, false><<<grid, block, 0, stream>>>((const T_ *)x, (T_ *)y, pp, N, HW, C, chunk);
        else if (v == 4) k_gap_nhwc<T_, 4, false><<<grid, block, 0, stream>>>((const T_ *)x, (T_ *)y, pp, N, HW, C, chunk);
        else if (v == 2) k_gap_nhwc<T_, 2, false><<<grid, block, 0, stream>>>((const T_ *)x, (T_ *)y, pp, N, HW, C, chunk);
        else k_gap_nhwc<T_, 1, false><<<grid, block, 0, stream>>>((const T_ *)x, (T_ *)y, pp, N, HW, C, chunk);
        if (S > 1)
            k_gap_finish<T_><<<grid_for(N * C), KCU_THREADS, 0, stream>>>(part, (T_ *)y, N * C, S, HW);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_s2d_nhwc(kiln_dtype t, int64_t N, int64_t C, int64_t H, int64_t W, int64_t ph, int64_t pw,
                         int64_t Lh, int64_t Lw, int64_t Cp, const void *x, void *y, cudaStream_t stream) {
    if (N * Lh * Lw * Cp <= 0) return cudaSuccess;
    if (Cp < 4 * C) return cudaErrorInvalidValue;
    KCU_SWITCH_FLOAT(t, {
        if (sizeof(T_) == 2 && Cp % 8 == 0 && (uintptr_t)y % 16 == 0)
            k_s2d_nhwc8<T_><<<grid_for(N * Lh * Lw * (Cp / 8)), KCU_THREADS, 0, stream>>>(
                (const T_ *)x, (T_ *)y, N, C, H, W, ph, pw, Lh, Lw, Cp);
        else
            k_s2d_nhwc1<T_><<<grid_for(N * Lh * Lw * Cp), KCU_THREADS, 0, stream>>>((const T_ *)x, (T_ *)y, N, C, H,
                                                                                W, ph, pw, Lh, Lw, Cp);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}

cudaError_t kcu_nchw_to_nhwc(kiln_dtype t, int64_t N, int64_t C, int64_t HW, int64_t Cp, const void *x,
                             void *y, cudaStream_t stream) {
    if (N * Cp * HW <= 0) return cudaSuccess;
    if (Cp < C) return cudaErrorInvalidValue;
    KCU_SWITCH_FLOAT(t, {
        if (sizeof(T_) == 2 && Cp % 8 == 0 && (uintptr_t)y % 16 == 0)
            k_nchw_to_nhwc_v<T_, 8><<<grid_for(N * (Cp / 8) * HW), KCU_THREADS, 0, stream>>>((const T_ *)x, (T_ *)y,
                                                                                         N, C, HW, Cp);
        else if (sizeof(T_) == 2 && Cp % 4 == 0 && (uintptr_t)y % 8 == 0)
            k_nchw_to_nhwc_v<T_, 4><<<grid_for(N * (Cp / 4) * HW), KCU_THREADS, 0, stream>>>((const T_ *)x, (T_ *)y,
                                                                                         N, C, HW, Cp);
        else
            k_nchw_to_nhwc1<T_><<<grid_for(N * Cp * HW), KCU_THREADS, 0, stream>>>((const T_ *)x, (T_ *)y, N, C,
                                                                               HW, Cp);
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

cudaError_t kcu_patches(kiln_dtype t, const kcu_patch *p, const void *x, void *col, cudaStream_t stream) {
    const int64_t rows = p->N * p->Ho * p->Wo;
    if (rows <= 0 || p->Kp <= 0) return cudaSuccess;
    if (p->Kp < p->C * p->kh * p->kw + (p->one_col ? 1 : 0) || p->kh > p->sh || p->kw > p->sw ||
        (p->Ho - 1) * p->sh + p->kh > p->H || (p->Wo - 1) * p->sw + p->kw > p->W)
        return cudaErrorInvalidValue;
    KCU_SWITCH_FLOAT(t, {
        if (sizeof(T_) == 2 && p->Kp % 8 == 0 && (uintptr_t)col % 16 == 0) patches_launch<T_, 8>(p, x, col, stream);
        else if (sizeof(T_) == 4 && p->Kp % 4 == 0 && (uintptr_t)col % 16 == 0) patches_launch<T_, 4>(p, x, col, stream);
        else patches_launch<T_, 1>(p, x, col, stream);
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
