/* k_seq.cu -- kernels of the "seq" family: the gate math of RNN/GRU/LSTM
 * (the GEMMs are cuBLASLt's, cuda_ops_seq.c), linear quantization, and
 * integer matrix products. Semantics follow the CPU kernels
 * (src/ops/misc_rnn.c, misc_quant.c, nn_matmul.c) operation for operation:
 * same float32 expressions, rint (half to even) rounding, same saturation. */
#include "k_common.cuh"

#include "cuda_seq.h"

namespace kcu {

/* ---- RNN, GRU, LSTM ---------------------------------------------------------------- */

/* kiln_rnn_kind / kiln_rnn_act / kiln_rnn_dir values (ops/seq_attrs.h) */
enum { R_SIMPLE = 0, R_GRU = 1, R_LSTM = 2 };
enum { A_SIGMOID = 0, A_TANH = 1, A_RELU = 2 };
enum { D_REVERSE = 1 };

__device__ __forceinline__ float rnn_act(int act, float v) {
    switch (act) {
    case A_SIGMOID: return 1.f / (1.f + expf(-v));
    case A_TANH: return tanhf(v);
    case A_RELU: return v < 0.f ? 0.f : v; /* NaN kept */
    default: return v;
    }
}

__device__ __forceinline__ float rnn_clip(const kcu_rnn &p, float v) {
    if (!p.has_clip) return v;
    return v < -p.clip ? -p.clip : (v > p.clip ? p.clip : v);
}

__device__ __forceinline__ int64_t rnn_len(const kcu_rnn &p, int64_t b) {
    if (!p.lens) return p.S;
    int64_t L = p.lens_i64 ? ((const int64_t *)p.lens)[b] : (int64_t)((const int32_t *)p.lens)[b];
    return L < 0 ? 0 : (L > p.S ? p.S : L);
}

/* time index of (d, b) at step s, or -1 when the step is past the sequence */
__device__ __forceinline__ int64_t rnn_time(const kcu_rnn &p, int64_t d, int64_t b, int64_t s) {
    int64_t L = rnn_len(p, b);
    bool rev = p.direction == D_REVERSE || d == 1;
    int64_t t = rev ? L - 1 - s : s;
    return (t < 0 || t >= L) ? -1 : t;
}

/* offset of (d, b) in initial_h / Y_h ([D, B, H] or, layout 1, [B, D, H]) */
__device__ __forceinline__ int64_t rnn_state_off(const kcu_rnn &p, int64_t d, int64_t b) {
    return p.layout ? (b * p.D + d) * p.H : (d * p.B + b) * p.H;
}

/* x * W^T (+ the biases the CPU folds into it) at gate column jj */
__device__ __forceinline__ float rnn_xw(const kcu_rnn &p, const float *xw, const float *wb,
                                        int64_t jj) {
    float v = xw[jj];
    if (wb) {
        const int64_t GH = p.G * p.H;
        bool inner_rb = p.kind == R_GRU && p.lbr && jj >= 2 * p.H;
        v += wb[jj] + (inner_rb ? 0.f : wb[GH + jj]);
    }
    return v;
}

__global__ void k_rnn_init(const kcu_rnn p) {
    const int64_t n = p.D * p.B * p.H;
    KCU_GRID_STRIDE(i, n) {
        int64_t j = i % p.H, b = (i / p.H) % p.B, d = i / (p.H * p.B);
        int64_t off = rnn_state_off(p, d, b) + j;
        p.h[i] = p.h0 ? p.h0[off] : 0.f;
        if (p.c) p.c[i] = p.c0 ? p.c0[off] : 0.f;
    }
}

__global__ void k_rnn_final(const kcu_rnn p) {
    const int64_t n = p.D * p.B * p.H;
    KCU_GRID_STRIDE(i, n) {
        int64_t j = i % p.H, b = (i / p.H) % p.B, d = i / (p.H * p.B);
        int64_t off = rnn_state_off(p, d, b) + j;
        if (p.yh) p.yh[off] = p.h[i];
        if (p.yc && p.c) p.yc[off] = p.c[i];
    }
}

/* GRU, linear_before_reset = 0: tmp = r (.) h (0 where the step is idle) */
__global__ void k_rnn_gru_reset(const kcu_rnn p, int64_t s) {
    const int64_t n = p.D * p.B * p.H, GH = p.G * p.H;
    KCU_GRID_STRIDE(i, n) {
        int64_t j = i % p.H, b = (i / p.H) % p.B, d = i / (p.H * p.B);
        int64_t t = rnn_time(p, d, b, s);
        if (t < 0) {
            p.tmp[i] = 0.f;
            continue;
        }
        const float *xw = p.xw + d * p.S * p.B * GH + (p.layout ? b * p.S + t : t * p.B + b) * GH;
        const float *hr = p.hr + (d * p.B + b) * GH;
        const float *wb = p.bias ? p.bias + d * 2 * GH : nullptr;
        const int32_t *act = p.act + d * 3;
        float r = rnn_act(act[0], rnn_clip(p, rnn_xw(p, xw, wb, p.H + j) + hr[p.H + j]));
        p.tmp[i] = r * p.h[i];
    }
}

__global__ void k_rnn_step(const kcu_rnn p, int64_t s) {
    const int64_t n = p.D * p.B * p.H, GH = p.G * p.H, H = p.H;
    KCU_GRID_STRIDE(i, n) {
        int64_t j = i % H, b = (i / H) % p.B, d = i / (H * p.B);
        int64_t t = rnn_time(p, d, b, s);
        if (t < 0) continue;
        const float *xw = p.xw + d * p.S * p.B * GH + (p.layout ? b * p.S + t : t * p.B + b) * GH;
        const float *hr = p.hr + (d * p.B + b) * GH;
        const float *wb = p.bias ? p.bias + d * 2 * GH : nullptr;
        const int32_t *act = p.act + d * 3;
        float hv = p.h[i];
        switch (p.kind) {
        case R_SIMPLE:
            hv = rnn_act(act[0], rnn_clip(p, rnn_xw(p, xw, wb, j) + hr[j]));
            break;
        case R_GRU: {
            float z = rnn_act(act[0], rnn_clip(p, rnn_xw(p, xw, wb, j) + hr[j]));
            float hh;
            if (p.lbr) {
                float r = rnn_act(act[0], rnn_clip(p, rnn_xw(p, xw, wb, H + j) + hr[H + j]));
                float rec = hr[2 * H + j] + (wb ? wb[GH + 2 * H + j] : 0.f);
                hh = rnn_act(act[1], rnn_clip(p, rnn_xw(p, xw, wb, 2 * H + j) + r * rec));
            } else {
                hh = rnn_act(act[1], rnn_clip(p, rnn_xw(p, xw, wb, 2 * H + j) + hr[2 * H + j]));
            }
            hv = (1.f - z) * hh + z * hv;
            break;
        }
        case R_LSTM: {
            const float *P = p.P ? p.P + d * 3 * H : nullptr;
            float cp = p.c[i];
            float gi = rnn_xw(p, xw, wb, j) + hr[j] + (P ? P[j] * cp : 0.f);
            float it = rnn_act(act[0], rnn_clip(p, gi));
            float ft;
            if (p.input_forget) {
                ft = 1.f - it;
            } else {
                float gf = rnn_xw(p, xw, wb, 2 * H + j) + hr[2 * H + j] + (P ? P[2 * H + j] * cp : 0.f);
                ft = rnn_act(act[0], rnn_clip(p, gf));
            }
            float ct = rnn_act(act[1], rnn_clip(p, rnn_xw(p, xw, wb, 3 * H + j) + hr[3 * H + j]));
            float cn = ft * cp + it * ct;
            float go = rnn_xw(p, xw, wb, H + j) + hr[H + j] + (P ? P[H + j] * cn : 0.f);
            float ot = rnn_act(act[0], rnn_clip(p, go));
            p.c[i] = cn;
            hv = ot * rnn_act(act[2], cn);
            break;
        }
        default:
            break;
        }
        p.h[i] = hv;
        if (p.y)
            p.y[(p.layout ? ((b * p.S + t) * p.D + d) * H : ((t * p.D + d) * p.B + b) * H) + j] = hv;
    }
}

/* ---- QuantizeLinear / DequantizeLinear ------------------------------------------- */

template <typename X> __device__ __forceinline__ int32_t q_ld(const void *p, int64_t i) {
    return (int32_t)((const X *)p)[i];
}

__device__ __forceinline__ int32_t q_load(kiln_dtype t, const void *p, int64_t i) {
    switch (t) {
    case KILN_DTYPE_UINT8: return q_ld<uint8_t>(p, i);
    case KILN_DTYPE_INT8: return q_ld<int8_t>(p, i);
    case KILN_DTYPE_INT32: return q_ld<int32_t>(p, i);
    default: return 0;
    }
}

/* saturate to the 8-bit type (NaN -> low end), as the CPU's q_clamp */
__device__ __forceinline__ int32_t q_clamp(float v, bool u8) {
    float lo = u8 ? 0.f : -128.f, hi = u8 ? 255.f : 127.f;
    if (!(v >= lo)) v = lo;
    if (v > hi) v = hi;
    return (int32_t)v;
}

__global__ void k_qdq(int dq, kiln_dtype xt, kiln_dtype yt, const void *x, const float *scale,
                      const void *zp, void *y, int64_t n, int64_t C, int64_t inner) {
    KCU_GRID_STRIDE(i, n) {
        int64_t c = C > 1 ? (i / inner) % C : 0;
        float sc = scale[c];
        if (dq) {
            int32_t zv = zp ? q_load(xt, zp, c) : 0;
            int32_t xv = q_load(xt, x, i);
            int32_t diff = (int32_t)((uint32_t)xv - (uint32_t)zv);
            ((float *)y)[i] = (float)diff * sc;
        } else {
            int32_t zv = zp ? q_load(yt, zp, c) : 0;
            float v = xt == KILN_DTYPE_FLOAT32 ? ((const float *)x)[i]
                                               : (float)((const int32_t *)x)[i];
            int32_t q = q_clamp(rintf(__fdiv_rn(v, sc)) + (float)zv, yt == KILN_DTYPE_UINT8);
            if (yt == KILN_DTYPE_UINT8) ((uint8_t *)y)[i] = (uint8_t)q;
            else ((int8_t *)y)[i] = (int8_t)q;
        }
    }
}

/* ---- DynamicQuantizeLinear --------------------------------------------------------- */

#define KCU_DQ_THREADS 1024

/* min/max over the block (NaN never wins a comparison): thread 0 gets them */
__device__ __forceinline__ void block_minmax(float &mn, float &mx) {
    __shared__ float smn[32], smx[32];
    for (int o = 16; o > 0; o >>= 1) {
        float a = __shfl_xor_sync(0xffffffffu, mn, o), b = __shfl_xor_sync(0xffffffffu, mx, o);
        mn = a < mn ? a : mn;
        mx = b > mx ? b : mx;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        smn[warp] = mn;
        smx[warp] = mx;
    }
    __syncthreads();
    if (threadIdx.x == 0)
        for (int w = 1; w < (int)(blockDim.x >> 5); w++) {
            mn = smn[w] < mn ? smn[w] : mn;
            mx = smx[w] > mx ? smx[w] : mx;
        }
}

/* pass 1: each block's min/max (from 0, NaN skipped) into part[2b], part[2b+1] */
__global__ void __launch_bounds__(KCU_DQ_THREADS)
    k_dyn_partial(const float *x, int64_t n, float *part) {
    float mn = 0.f, mx = 0.f;
    KCU_GRID_STRIDE(i, n) {
        float v = x[i];
        mn = v < mn ? v : mn;
        mx = v > mx ? v : mx;
    }
    block_minmax(mn, mx);
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = mn;
        part[2 * blockIdx.x + 1] = mx;
    }
}

/* pass 2 (one block): the range of the nb partials, then scale and zero point */
__global__ void __launch_bounds__(KCU_DQ_THREADS)
    k_dyn_params(const float *part, int nb, float *params, float *yscale, uint8_t *yzp) {
    float mn = 0.f, mx = 0.f;
    for (int b = threadIdx.x; b < nb; b += blockDim.x) {
        mn = part[2 * b] < mn ? part[2 * b] : mn;
        mx = part[2 * b + 1] > mx ? part[2 * b + 1] : mx;
    }
    block_minmax(mn, mx);
    if (threadIdx.x == 0) {
        float scale = __fdiv_rn(mx - mn, 255.f);
        float zpf = 0.f;
        if (scale != 0.f) {
            float t = 0.f - __fdiv_rn(mn, scale);
            if (t < 0.f) t = 0.f;
            if (t > 255.f) t = 255.f;
            zpf = rintf(t);
        }
        params[0] = scale;
        params[1] = zpf;
        if (yscale) *yscale = scale;
        if (yzp) *yzp = (uint8_t)zpf;
    }
}

__global__ void k_dyn_quant(const float *x, int64_t n, uint8_t *y, const float *params) {
    const float scale = params[0], zpf = params[1];
    KCU_GRID_STRIDE(i, n) {
        y[i] = scale != 0.f ? (uint8_t)q_clamp(rintf(__fdiv_rn(x[i], scale)) + zpf, true)
                            : (uint8_t)zpf;
    }
}

/* ---- MatMulInteger / QLinearMatMul ----------------------------------------------------- */

#define KCU_MT 16

__device__ __forceinline__ int32_t i8_load(kiln_dtype t, const void *p, int64_t i) {
    return t == KILN_DTYPE_UINT8 ? (int32_t)((const uint8_t *)p)[i]
                                 : (int32_t)((const int8_t *)p)[i];
}

__device__ __forceinline__ int32_t zp_at(kiln_dtype t, const void *z, int64_t nz, int64_t i) {
    if (!z) return 0;
    return i8_load(t, z, nz == 1 ? 0 : i);
}

/* QLinearMatMul / QLinearConv output, as the CPU: y[o] = saturate(rint(v *
 * (double)(float)(sa * sb / sy)) + yz[0]) in the 8-bit type yt */
__device__ __forceinline__ void q_requant(double v, double sa, double sb, double sy, kiln_dtype yt,
                                          const void *yz, void *y, int64_t o) {
    double r = rint(v * (double)(float)(sa * sb / sy)) + (double)i8_load(yt, yz, 0);
    bool u8 = yt == KILN_DTYPE_UINT8;
    double lo = u8 ? 0 : -128, hi = u8 ? 255 : 127;
    r = r < lo ? lo : r > hi ? hi : r;
    if (u8) ((uint8_t *)y)[o] = (uint8_t)(int)r;
    else ((int8_t *)y)[o] = (int8_t)(int)r;
}

__global__ void __launch_bounds__(KCU_MT * KCU_MT) k_mmi(const kcu_mmi p) {
    __shared__ int32_t As[KCU_MT][KCU_MT + 1], Bs[KCU_MT][KCU_MT + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t mt = (p.M + KCU_MT - 1) / KCU_MT, nt = (p.N + KCU_MT - 1) / KCU_MT;
    for (int64_t bt = blockIdx.z; bt < p.nbatch; bt += gridDim.z) {
        int64_t oa = 0, ob = 0, rem = bt;
        for (int k = p.nbr - 1; k >= 0; k--) {
            int64_t idx = rem % p.bdims[k];
            rem /= p.bdims[k];
            oa += idx * p.astr[k];
            ob += idx * p.bstr[k];
        }
        for (int64_t bm = blockIdx.y; bm < mt; bm += gridDim.y)
            for (int64_t bn = blockIdx.x; bn < nt; bn += gridDim.x) {
                /* row of A this thread loads (and output row), column of B (and output column) */
                const int64_t ia = bm * KCU_MT + ty, jb = bn * KCU_MT + tx;
                const int64_t i = ia, j = jb;
                const int32_t za = ia < p.M ? zp_at(p.at, p.az, p.naz, ia) : 0;
                const int32_t zb = jb < p.N ? zp_at(p.bt, p.bz, p.nbz, jb) : 0;
                int64_t acc = 0;
                for (int64_t k0 = 0; k0 < p.K; k0 += KCU_MT) {
                    int64_t ka = k0 + tx, kb = k0 + ty;
                    As[ty][tx] = (ia < p.M && ka < p.K) ? i8_load(p.at, p.A, oa + ia * p.K + ka) - za : 0;
                    Bs[ty][tx] = (kb < p.K && jb < p.N) ? i8_load(p.bt, p.B, ob + kb * p.N + jb) - zb : 0;
                    __syncthreads();
                    int32_t part = 0; /* 16 products of at most 255*255: no overflow */
#pragma unroll
                    for (int k = 0; k < KCU_MT; k++) part += As[ty][k] * Bs[k][tx];
                    acc += part;
                    __syncthreads();
                }
                if (i < p.M && j < p.N) {
                    int64_t o = bt * p.M * p.N + i * p.N + j;
                    if (!p.qlinear) {
                        ((int32_t *)p.Y)[o] = (int32_t)(uint32_t)(uint64_t)acc;
                    } else {
                        q_requant((double)acc, p.as[p.nas == 1 ? 0 : i], p.bs[p.nbs == 1 ? 0 : j],
                                  p.ys[0], p.yt, p.yz, p.Y, o);
                    }
                }
            }
    }
}

/* ---- ConvInteger / QLinearConv ----------------------------------------------------------- */

__global__ void k_qconv(const kcu_qconv p) {
    const kcu_conv &g = p.g;
    const int64_t n_out = g.N * g.M * g.out_sz;
    const int32_t xz = p.xz ? i8_load(p.xt, p.xz, 0) : 0;
    KCU_GRID_STRIDE(i, n_out) {
        const int64_t pos = i % g.out_sz, m = (i / g.out_sz) % g.M, n = i / (g.out_sz * g.M);
        const int64_t gi = m / g.Mg;
        const int32_t wz = p.wz ? i8_load(p.wt, p.wz, p.nwz == 1 ? 0 : m) : 0;
        int64_t o[KCU_MAX_SP] = {0}, rem = pos;
        for (int d = g.ns - 1; d >= 0; d--) {
            o[d] = rem % g.out[d];
            rem /= g.out[d];
        }
        int64_t acc = 0;
        for (int64_t c = 0; c < g.Cg; c++) {
            const int64_t xoff = (n * g.C + gi * g.Cg + c) * g.in_sz;
            const int64_t woff = (m * g.Cg + c) * g.k_sz;
            for (int64_t kp = 0; kp < g.k_sz; kp++) {
                int64_t kr = kp, idx = 0, kx[KCU_MAX_SP];
                for (int d = g.ns - 1; d >= 0; d--) {
                    kx[d] = kr % g.k[d];
                    kr /= g.k[d];
                }
                bool ok = true;
                for (int d = 0; d < g.ns; d++) {
                    int64_t q = o[d] * g.s[d] - g.pb[d] + kx[d] * g.d[d];
                    if (q < 0 || q >= g.in[d]) {
                        ok = false;
                        break;
                    }
                    idx = idx * g.in[d] + q;
                }
                if (ok)
                    acc += (int64_t)(i8_load(p.xt, p.x, xoff + idx) - xz) *
                           (i8_load(p.wt, p.w, woff + kp) - wz);
            }
        }
        if (!p.qlinear) {
            ((int32_t *)p.y)[i] = (int32_t)(uint32_t)(uint64_t)acc;
            continue;
        }
        q_requant((double)acc + (p.bias ? (double)p.bias[m] : 0.0), p.xs[0],
                  p.ws[p.nws == 1 ? 0 : m], p.ys[0], p.yt, p.yz, p.y, i);
    }
}

/* ---- Einsum -------------------------------------------------------------------------------- */

template <typename T> __global__ void k_einsum(const kcu_einsum p, T *__restrict__ y) {
    KCU_GRID_STRIDE(o, p.n) {
        int64_t off[KCU_ES_OPS] = {0, 0, 0, 0}, rem = o;
        for (int k = p.n_out - 1; k >= 0; k--) {
            int64_t idx = rem % p.out_size[k];
            rem /= p.out_size[k];
            for (int i = 0; i < p.n_ops; i++) off[i] += idx * p.out_str[i][k];
        }
        int64_t sidx[KCU_ES_SUM] = {0, 0, 0, 0, 0, 0, 0, 0};
        double facc = 0.0;
        uint64_t iacc = 0;
        for (int64_t s = 0; s < p.n_sum_total; s++) {
            if (IsFloat<T>::value) {
                double v = 1.0;
                for (int i = 0; i < p.n_ops; i++)
                    v *= (double)Num<T>::load(((const T *)p.in[i])[off[i]]);
                facc += v;
            } else {
                uint64_t v = 1;
                for (int i = 0; i < p.n_ops; i++)
                    v *= (uint64_t)(int64_t)((const T *)p.in[i])[off[i]];
                iacc += v;
            }
            for (int k = p.n_sum - 1; k >= 0; k--) {
                for (int i = 0; i < p.n_ops; i++) off[i] += p.sum_str[i][k];
                if (++sidx[k] < p.sum_size[k]) break;
                for (int i = 0; i < p.n_ops; i++) off[i] -= p.sum_str[i][k] * p.sum_size[k];
                sidx[k] = 0;
            }
        }
        if (IsFloat<T>::value) y[o] = Num<T>::store((typename Num<T>::C)facc);
        else y[o] = (T)(int64_t)iacc;
    }
}

} /* namespace kcu */

using namespace kcu;

extern "C" cudaError_t kcu_einsum_run(kiln_dtype t, const kcu_einsum *p, void *y,
                                      cudaStream_t stream) {
    if (p->n <= 0) return cudaSuccess;
    if (p->n_ops < 1 || p->n_ops > KCU_ES_OPS || p->n_sum < 0 || p->n_sum > KCU_ES_SUM ||
        p->n_out < 0 || p->n_out > KILN_MAX_RANK)
        return cudaErrorInvalidValue;
#define KCU_ES_CASE(DT, TY)                                                                   \
    case DT:                                                                                  \
        k_einsum<TY><<<grid_for(p->n), KCU_THREADS, 0, stream>>>(*p, (TY *)y);                \
        return cudaGetLastError();
    switch (t) {
        KCU_ES_CASE(KILN_DTYPE_FLOAT32, float)
        KCU_ES_CASE(KILN_DTYPE_FLOAT16, __half)
        KCU_ES_CASE(KILN_DTYPE_BFLOAT16, __nv_bfloat16)
        KCU_ES_CASE(KILN_DTYPE_FLOAT64, double)
        KCU_ES_CASE(KILN_DTYPE_INT8, int8_t)
        KCU_ES_CASE(KILN_DTYPE_UINT8, uint8_t)
        KCU_ES_CASE(KILN_DTYPE_INT16, int16_t)
        KCU_ES_CASE(KILN_DTYPE_UINT16, uint16_t)
        KCU_ES_CASE(KILN_DTYPE_INT32, int32_t)
        KCU_ES_CASE(KILN_DTYPE_UINT32, uint32_t)
        KCU_ES_CASE(KILN_DTYPE_INT64, int64_t)
        KCU_ES_CASE(KILN_DTYPE_UINT64, uint64_t)
    default: break;
    }
#undef KCU_ES_CASE
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t kcu_qconv_run(const kcu_qconv *p, cudaStream_t stream) {
    int64_t n = p->g.N * p->g.M * p->g.out_sz;
    if (n <= 0) return cudaSuccess;
    if (p->g.ns < 1 || p->g.ns > KCU_MAX_SP) return cudaErrorInvalidValue;
    k_qconv<<<grid_for(n), KCU_THREADS, 0, stream>>>(*p);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_rnn_init(const kcu_rnn *p, cudaStream_t stream) {
    int64_t n = p->D * p->B * p->H;
    if (n <= 0) return cudaSuccess;
    k_rnn_init<<<grid_for(n), KCU_THREADS, 0, stream>>>(*p);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_rnn_gru_reset(const kcu_rnn *p, int64_t step, cudaStream_t stream) {
    int64_t n = p->D * p->B * p->H;
    if (n <= 0) return cudaSuccess;
    k_rnn_gru_reset<<<grid_for(n), KCU_THREADS, 0, stream>>>(*p, step);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_rnn_step(const kcu_rnn *p, int64_t step, cudaStream_t stream) {
    int64_t n = p->D * p->B * p->H;
    if (n <= 0) return cudaSuccess;
    k_rnn_step<<<grid_for(n), KCU_THREADS, 0, stream>>>(*p, step);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_rnn_final(const kcu_rnn *p, cudaStream_t stream) {
    int64_t n = p->D * p->B * p->H;
    if (n <= 0 || (!p->yh && !p->yc)) return cudaSuccess;
    k_rnn_final<<<grid_for(n), KCU_THREADS, 0, stream>>>(*p);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_qdq(int dq, kiln_dtype xt, kiln_dtype yt, const void *x,
                               const float *scale, const void *zp, void *y, int64_t n, int64_t C,
                               int64_t inner, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (C < 1 || inner < 1) return cudaErrorInvalidValue;
    k_qdq<<<grid_for(n), KCU_THREADS, 0, stream>>>(dq, xt, yt, x, scale, zp, y, n, C, inner);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_dyn_quant(const float *x, int64_t n, uint8_t *y, float *yscale,
                                     uint8_t *yzp, float *params, cudaStream_t stream) {
    int nb = (int)grid_for(n, KCU_DQ_THREADS);
    if (nb > KCU_DQ_BLOCKS) nb = KCU_DQ_BLOCKS;
    float *part = params + 2;
    k_dyn_partial<<<nb, KCU_DQ_THREADS, 0, stream>>>(x, n, part);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    k_dyn_params<<<1, KCU_DQ_THREADS, 0, stream>>>(part, nb, params, yscale, yzp);
    e = cudaGetLastError();
    if (e != cudaSuccess || n <= 0) return e;
    k_dyn_quant<<<grid_for(n), KCU_THREADS, 0, stream>>>(x, n, y, params);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_mmi_run(const kcu_mmi *p, cudaStream_t stream) {
    if (p->M <= 0 || p->N <= 0 || p->nbatch <= 0) return cudaSuccess;
    int64_t mt = (p->M + KCU_MT - 1) / KCU_MT, nt = (p->N + KCU_MT - 1) / KCU_MT;
    dim3 grid((unsigned)(nt < 65535 ? nt : 65535), (unsigned)(mt < 65535 ? mt : 65535),
              (unsigned)(p->nbatch < 65535 ? p->nbatch : 65535));
    dim3 block(KCU_MT, KCU_MT);
    k_mmi<<<grid, block, 0, stream>>>(*p);
    return cudaGetLastError();
}
