/* emu_seq.c -- host emulation of the "seq" family's launchers (cuda_seq.h,
 * k_seq.cu) for the CUDA emulator (cuda_emu.c): index math transcribed from
 * the kernels, so that the host side (cuda_ops_seq.c: shapes, scratch
 * carving, the batched cuBLASLt GEMMs of the recurrent layers) and the test
 * cases can run without a GPU. Not part of libkiln. */
#include <math.h>

#include "backends/cuda/cuda_internal.h"

/* ---- RNN, GRU, LSTM ---- */

static float e_act(int act, float v) {
    switch (act) {
    case KILN_RNN_ACT_SIGMOID: return 1.f / (1.f + expf(-v));
    case KILN_RNN_ACT_TANH: return tanhf(v);
    case KILN_RNN_ACT_RELU: return v > 0.f ? v : 0.f;
    default: return v;
    }
}
static float e_clip(const kcu_rnn *p, float v) {
    if (!p->has_clip) return v;
    return v < -p->clip ? -p->clip : (v > p->clip ? p->clip : v);
}
static int64_t e_time(const kcu_rnn *p, int64_t d, int64_t b, int64_t s) {
    int64_t L = p->S;
    if (p->lens) L = p->lens_i64 ? ((const int64_t *)p->lens)[b] : ((const int32_t *)p->lens)[b];
    L = L < 0 ? 0 : (L > p->S ? p->S : L);
    int64_t t = (p->direction == KILN_RNN_REVERSE || d == 1) ? L - 1 - s : s;
    return (t < 0 || t >= L) ? -1 : t;
}
static int64_t e_state_off(const kcu_rnn *p, int64_t d, int64_t b) {
    return p->layout ? (b * p->D + d) * p->H : (d * p->B + b) * p->H;
}
static float e_xw(const kcu_rnn *p, const float *xw, const float *wb, int64_t jj) {
    float v = xw[jj];
    if (wb) v += wb[jj] + ((p->kind == KILN_RNN_GRU && p->lbr && jj >= 2 * p->H) ? 0.f : wb[p->G * p->H + jj]);
    return v;
}

cudaError_t kcu_rnn_init(const kcu_rnn *p, cudaStream_t s) {
    (void)s;
    for (int64_t i = 0; i < p->D * p->B * p->H; i++) {
        int64_t j = i % p->H, b = (i / p->H) % p->B, d = i / (p->H * p->B);
        int64_t off = e_state_off(p, d, b) + j;
        p->h[i] = p->h0 ? p->h0[off] : 0.f;
        if (p->c) p->c[i] = p->c0 ? p->c0[off] : 0.f;
    }
    return cudaSuccess;
}

cudaError_t kcu_rnn_final(const kcu_rnn *p, cudaStream_t s) {
    (void)s;
    for (int64_t i = 0; i < p->D * p->B * p->H; i++) {
        int64_t j = i % p->H, b = (i / p->H) % p->B, d = i / (p->H * p->B);
        int64_t off = e_state_off(p, d, b) + j;
        if (p->yh) p->yh[off] = p->h[i];
        if (p->yc && p->c) p->yc[off] = p->c[i];
    }
    return cudaSuccess;
}

cudaError_t kcu_rnn_gru_reset(const kcu_rnn *p, int64_t s, cudaStream_t st) {
    (void)st;
    const int64_t GH = p->G * p->H;
    for (int64_t i = 0; i < p->D * p->B * p->H; i++) {
        int64_t j = i % p->H, b = (i / p->H) % p->B, d = i / (p->H * p->B);
        int64_t t = e_time(p, d, b, s);
        if (t < 0) {
            p->tmp[i] = 0.f;
            continue;
        }
        const float *xw = p->xw + d * p->S * p->B * GH + (p->layout ? b * p->S + t : t * p->B + b) * GH;
        const float *hr = p->hr + (d * p->B + b) * GH;
        const float *wb = p->bias ? p->bias + d * 2 * GH : NULL;
        float r = e_act(p->act[d * 3], e_clip(p, e_xw(p, xw, wb, p->H + j) + hr[p->H + j]));
        p->tmp[i] = r * p->h[i];
    }
    return cudaSuccess;
}

cudaError_t kcu_rnn_step(const kcu_rnn *p, int64_t s, cudaStream_t st) {
    (void)st;
    const int64_t GH = p->G * p->H, H = p->H;
    for (int64_t i = 0; i < p->D * p->B * H; i++) {
        int64_t j = i % H, b = (i / H) % p->B, d = i / (H * p->B);
        int64_t t = e_time(p, d, b, s);
        if (t < 0) continue;
        const float *xw = p->xw + d * p->S * p->B * GH + (p->layout ? b * p->S + t : t * p->B + b) * GH;
        const float *hr = p->hr + (d * p->B + b) * GH;
        const float *wb = p->bias ? p->bias + d * 2 * GH : NULL;
        const int32_t *act = p->act + d * 3;
        float hv = p->h[i];
        if (p->kind == KILN_RNN_SIMPLE) {
            hv = e_act(act[0], e_clip(p, e_xw(p, xw, wb, j) + hr[j]));
        } else if (p->kind == KILN_RNN_GRU) {
            float z = e_act(act[0], e_clip(p, e_xw(p, xw, wb, j) + hr[j])), hh;
            if (p->lbr) {
                float r = e_act(act[0], e_clip(p, e_xw(p, xw, wb, H + j) + hr[H + j]));
                float rec = hr[2 * H + j] + (wb ? wb[GH + 2 * H + j] : 0.f);
                hh = e_act(act[1], e_clip(p, e_xw(p, xw, wb, 2 * H + j) + r * rec));
            } else {
                hh = e_act(act[1], e_clip(p, e_xw(p, xw, wb, 2 * H + j) + hr[2 * H + j]));
            }
            hv = (1.f - z) * hh + z * hv;
        } else {
            const float *P = p->P ? p->P + d * 3 * H : NULL;
            float cp = p->c[i];
            float it = e_act(act[0], e_clip(p, e_xw(p, xw, wb, j) + hr[j] + (P ? P[j] * cp : 0.f)));
            float ft = p->input_forget
                           ? 1.f - it
                           : e_act(act[0], e_clip(p, e_xw(p, xw, wb, 2 * H + j) + hr[2 * H + j] +
                                                         (P ? P[2 * H + j] * cp : 0.f)));
            float ct = e_act(act[1], e_clip(p, e_xw(p, xw, wb, 3 * H + j) + hr[3 * H + j]));
            float cn = ft * cp + it * ct;
            float ot = e_act(act[0], e_clip(p, e_xw(p, xw, wb, H + j) + hr[H + j] + (P ? P[H + j] * cn : 0.f)));
            p->c[i] = cn;
            hv = ot * e_act(act[2], cn);
        }
        p->h[i] = hv;
        if (p->y) p->y[(p->layout ? ((b * p->S + t) * p->D + d) * H : ((t * p->D + d) * p->B + b) * H) + j] = hv;
    }
    return cudaSuccess;
}

/* ---- quantization ---- */

static int32_t e_qload(kiln_dtype t, const void *p, int64_t i) {
    switch (t) {
    case KILN_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case KILN_DTYPE_INT8: return ((const int8_t *)p)[i];
    case KILN_DTYPE_INT32: return ((const int32_t *)p)[i];
    default: return 0;
    }
}
static int32_t e_qclamp(float v, int u8) {
    float lo = u8 ? 0.f : -128.f, hi = u8 ? 255.f : 127.f;
    if (!(v >= lo)) v = lo;
    if (v > hi) v = hi;
    return (int32_t)v;
}

cudaError_t kcu_qdq(int dq, kiln_dtype xt, kiln_dtype yt, const void *x, const float *scale,
                    const void *zp, void *y, int64_t n, int64_t C, int64_t inner, cudaStream_t s) {
    (void)s;
    if (n > 0 && (C < 1 || inner < 1)) return cudaErrorInvalidValue;
    for (int64_t i = 0; i < n; i++) {
        int64_t c = C > 1 ? (i / inner) % C : 0;
        if (dq) {
            int32_t d = (int32_t)((uint32_t)e_qload(xt, x, i) - (uint32_t)(zp ? e_qload(xt, zp, c) : 0));
            ((float *)y)[i] = (float)d * scale[c];
        } else {
            float v = xt == KILN_DTYPE_FLOAT32 ? ((const float *)x)[i] : (float)((const int32_t *)x)[i];
            int32_t q = e_qclamp(rintf(v / scale[c]) + (float)(zp ? e_qload(yt, zp, c) : 0),
                                 yt == KILN_DTYPE_UINT8);
            if (yt == KILN_DTYPE_UINT8) ((uint8_t *)y)[i] = (uint8_t)q;
            else ((int8_t *)y)[i] = (int8_t)q;
        }
    }
    return cudaSuccess;
}

cudaError_t kcu_dyn_quant(const float *x, int64_t n, uint8_t *y, float *yscale, uint8_t *yzp,
                          float *params, cudaStream_t s) {
    (void)s;
    float mn = 0.f, mx = 0.f;
    for (int64_t i = 0; i < n; i++) {
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }
    float scale = (mx - mn) / 255.f, zpf = 0.f;
    if (scale != 0.f) {
        float t = 0.f - mn / scale;
        t = t < 0.f ? 0.f : (t > 255.f ? 255.f : t);
        zpf = rintf(t);
    }
    params[0] = scale;
    params[1] = zpf;
    if (yscale) *yscale = scale;
    if (yzp) *yzp = (uint8_t)zpf;
    for (int64_t i = 0; i < n; i++)
        y[i] = scale != 0.f ? (uint8_t)e_qclamp(rintf(x[i] / scale) + zpf, 1) : (uint8_t)zpf;
    return cudaSuccess;
}

/* ---- integer matrix products ---- */

static int32_t e_i8(kiln_dtype t, const void *p, int64_t i) {
    return t == KILN_DTYPE_UINT8 ? ((const uint8_t *)p)[i] : ((const int8_t *)p)[i];
}

static void e_requant(double v, double sa, double sb, double sy, kiln_dtype yt, const void *yz,
                      void *y, int64_t o) {
    double r = rint(v * (double)(float)(sa * sb / sy)) + (double)e_i8(yt, yz, 0);
    int u8 = yt == KILN_DTYPE_UINT8;
    double lo = u8 ? 0 : -128, hi = u8 ? 255 : 127;
    r = r < lo ? lo : r > hi ? hi : r;
    if (u8) ((uint8_t *)y)[o] = (uint8_t)(int)r;
    else ((int8_t *)y)[o] = (int8_t)(int)r;
}

cudaError_t kcu_mmi_run(const kcu_mmi *p, cudaStream_t s) {
    (void)s;
    for (int64_t bt = 0; bt < p->nbatch; bt++) {
        int64_t oa = 0, ob = 0, rem = bt;
        for (int k = p->nbr - 1; k >= 0; k--) {
            int64_t idx = rem % p->bdims[k];
            rem /= p->bdims[k];
            oa += idx * p->astr[k];
            ob += idx * p->bstr[k];
        }
        for (int64_t i = 0; i < p->M; i++)
            for (int64_t j = 0; j < p->N; j++) {
                int32_t za = p->az ? e_i8(p->at, p->az, p->naz == 1 ? 0 : i) : 0;
                int32_t zb = p->bz ? e_i8(p->bt, p->bz, p->nbz == 1 ? 0 : j) : 0;
                int64_t acc = 0;
                for (int64_t k = 0; k < p->K; k++)
                    acc += (int64_t)(e_i8(p->at, p->A, oa + i * p->K + k) - za) *
                           (e_i8(p->bt, p->B, ob + k * p->N + j) - zb);
                int64_t o = bt * p->M * p->N + i * p->N + j;
                if (!p->qlinear) {
                    ((int32_t *)p->Y)[o] = (int32_t)(uint32_t)(uint64_t)acc;
                    continue;
                }
                e_requant((double)acc, p->as[p->nas == 1 ? 0 : i], p->bs[p->nbs == 1 ? 0 : j], p->ys[0],
                          p->yt, p->yz, p->Y, o);
            }
    }
    return cudaSuccess;
}

/* ---- integer convolutions ---- */

cudaError_t kcu_qconv_run(const kcu_qconv *p, cudaStream_t s) {
    (void)s;
    const kcu_conv *g = &p->g;
    const int64_t n_out = g->N * g->M * g->out_sz;
    if (n_out > 0 && (g->ns < 1 || g->ns > KCU_MAX_SP)) return cudaErrorInvalidValue;
    const int32_t xz = p->xz ? e_i8(p->xt, p->xz, 0) : 0;
    for (int64_t i = 0; i < n_out; i++) {
        int64_t pos = i % g->out_sz, m = (i / g->out_sz) % g->M, n = i / (g->out_sz * g->M);
        int64_t gi = m / g->Mg, o[KCU_MAX_SP] = {0}, rem = pos;
        int32_t wz = p->wz ? e_i8(p->wt, p->wz, p->nwz == 1 ? 0 : m) : 0;
        for (int d = g->ns - 1; d >= 0; d--) {
            o[d] = rem % g->out[d];
            rem /= g->out[d];
        }
        int64_t acc = 0;
        for (int64_t c = 0; c < g->Cg; c++)
            for (int64_t kp = 0; kp < g->k_sz; kp++) {
                int64_t kr = kp, idx = 0, kx[KCU_MAX_SP];
                for (int d = g->ns - 1; d >= 0; d--) {
                    kx[d] = kr % g->k[d];
                    kr /= g->k[d];
                }
                int ok = 1;
                for (int d = 0; d < g->ns && ok; d++) {
                    int64_t q = o[d] * g->s[d] - g->pb[d] + kx[d] * g->d[d];
                    if (q < 0 || q >= g->in[d]) ok = 0;
                    else idx = idx * g->in[d] + q;
                }
                if (ok)
                    acc += (int64_t)(e_i8(p->xt, p->x, (n * g->C + gi * g->Cg + c) * g->in_sz + idx) - xz) *
                           (e_i8(p->wt, p->w, (m * g->Cg + c) * g->k_sz + kp) - wz);
            }
        if (!p->qlinear) {
            ((int32_t *)p->y)[i] = (int32_t)(uint32_t)(uint64_t)acc;
            continue;
        }
        e_requant((double)acc + (p->bias ? (double)p->bias[m] : 0.0), p->xs[0],
                  p->ws[p->nws == 1 ? 0 : m], p->ys[0], p->yt, p->yz, p->y, i);
    }
    return cudaSuccess;
}

/* ---- Einsum ---- */

cudaError_t kcu_einsum_run(kiln_dtype t, const kcu_einsum *p, void *y, cudaStream_t s) {
    (void)s;
    if (p->n <= 0) return cudaSuccess;
    if (p->n_ops < 1 || p->n_ops > KCU_ES_OPS || p->n_sum < 0 || p->n_sum > KCU_ES_SUM) return cudaErrorInvalidValue;
    bool fl = t == KILN_DTYPE_FLOAT32 || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16 || t == KILN_DTYPE_FLOAT64;
    for (int64_t o = 0; o < p->n; o++) {
        int64_t off[KCU_ES_OPS] = {0}, rem = o, sidx[KCU_ES_SUM] = {0};
        for (int k = p->n_out - 1; k >= 0; k--) {
            int64_t idx = rem % p->out_size[k];
            rem /= p->out_size[k];
            for (int i = 0; i < p->n_ops; i++) off[i] += idx * p->out_str[i][k];
        }
        double facc = 0.0;
        uint64_t iacc = 0;
        for (int64_t q = 0; q < p->n_sum_total; q++) {
            double fv = 1.0;
            uint64_t iv = 1;
            for (int i = 0; i < p->n_ops; i++) {
                if (fl) fv *= kiln__load_f64(t, p->in[i], off[i]);
                else iv *= (uint64_t)kiln__load_i64(t, p->in[i], off[i]);
            }
            facc += fv;
            iacc += iv;
            for (int k = p->n_sum - 1; k >= 0; k--) {
                for (int i = 0; i < p->n_ops; i++) off[i] += p->sum_str[i][k];
                if (++sidx[k] < p->sum_size[k]) break;
                for (int i = 0; i < p->n_ops; i++) off[i] -= p->sum_str[i][k] * p->sum_size[k];
                sidx[k] = 0;
            }
        }
        if (fl) kiln__store_f64(t, y, o, facc);
        else kiln__store_i64(t, y, o, (int64_t)iacc);
    }
    return cudaSuccess;
}
