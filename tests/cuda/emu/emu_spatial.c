/* emu_spatial.c -- host emulation of the "spatial" family's launchers
 * (src/backends/cuda/k_spatial.h) for tests/cuda/emu/run.sh. Pad and
 * Resize run the kernels' own index math (the KCU_HD functions of
 * k_spatial.h); the reductions are sequential loops over the same
 * geometry, arithmetic in double. Not part of libkiln. */
#include <math.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"
#include "ops/spatial_sample.h"

cudaError_t kcu_pad_run(size_t es, const kcu_pad *g, const void *x, const void *value, void *y,
                        cudaStream_t s) {
    (void)s;
    if (es != 1 && es != 2 && es != 4 && es != 8) return cudaErrorInvalidValue;
    for (int64_t i = 0; i < g->n; i++) {
        int64_t src = kcu_pad_src(g, i);
        const void *from = src >= 0 ? (const char *)x + (size_t)src * es : value ? value : g->value;
        memcpy((char *)y + (size_t)i * es, from, es);
    }
    return cudaSuccess;
}

cudaError_t kcu_resize_run(kiln_dtype t, size_t es, const kcu_resize *g, const void *x, void *y,
                           cudaStream_t s) {
    (void)s;
    for (int64_t i = 0; i < g->n; i++) {
        if (g->mode == RS_NEAREST) {
            int64_t src = kcu_rs_nearest_src(g, i);
            memcpy((char *)y + (size_t)i * es,
                   src >= 0 ? (const char *)x + (size_t)src * es : (const char *)g->extrap, es);
            continue;
        }
        if (!kiln__dtype_is_float(t)) return cudaErrorInvalidValue;
        kcu_rs_elem e;
        if (kcu_rs_prepare(g, i, &e)) {
            memcpy((char *)y + (size_t)i * es, g->extrap, es);
            continue;
        }
        double acc = 0;
        do {
            int64_t off = 0;
            double wp = kcu_rs_combo(g, &e, &off);
            if (wp != 0.0) acc += wp * kiln__load_f64(t, x, off);
        } while (kcu_rs_next(g, &e));
        kiln__store_f64(t, y, i, acc);
    }
    return cudaSuccess;
}

cudaError_t kcu_groupnorm_run(kiln_dtype t, const kcu_groupnorm *g, const void *x,
                              const void *scale, const void *bias, void *y, cudaStream_t s) {
    (void)s;
    for (int64_t o = 0; o < g->groups && g->R > 0; o++) {
        int64_t base = kcu_gn_off(g->krank, g->kdims, g->kst, o);
        double sum = 0, ss = 0;
        for (int64_t r = 0; r < g->R; r++)
            sum += kiln__load_f64(t, x, base + kcu_gn_off(g->rrank, g->rdims, g->rst, r));
        double mean = sum / (double)g->R;
        for (int64_t r = 0; r < g->R; r++) {
            double d =
                kiln__load_f64(t, x, base + kcu_gn_off(g->rrank, g->rdims, g->rst, r)) - mean;
            ss += d * d;
        }
        double var = ss / (double)g->R, mul, add;
        if (g->kind == KCU_GN_MVN) {
            mul = 1.0 / (sqrt(var) + 1e-9);
            add = -mean * mul;
        } else {
            int64_t c = o % g->C;
            mul = kiln__load_f64(t, scale, c) / sqrt(var + g->eps);
            add = kiln__load_f64(t, bias, c) - mean * mul;
        }
        for (int64_t r = 0; r < g->R; r++) {
            int64_t off = base + kcu_gn_off(g->rrank, g->rdims, g->rst, r);
            kiln__store_f64(t, y, off, kiln__load_f64(t, x, off) * mul + add);
        }
    }
    return cudaSuccess;
}

cudaError_t kcu_lrn(kiln_dtype t, const void *x, void *y, int64_t N, int64_t C, int64_t plane,
                    int size, double alpha, double beta, double bias, cudaStream_t s) {
    (void)s;
    int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
    for (int64_t i = 0; i < N * C * plane; i++) {
        int64_t p = i % plane, c = (i / plane) % C, n = i / (plane * C);
        double ss = 0;
        for (int64_t k = c - lo < 0 ? 0 : c - lo; k <= (c + hi >= C ? C - 1 : c + hi); k++) {
            double v = kiln__load_f64(t, x, (n * C + k) * plane + p);
            ss += v * v;
        }
        kiln__store_f64(t, y, i, kiln__load_f64(t, x, i) / pow(bias + alpha / size * ss, beta));
    }
    return cudaSuccess;
}

cudaError_t kcu_hardmax(kiln_dtype t, const void *x, void *y, int64_t outer, int64_t n,
                        int64_t inner, int nan_first_zero, cudaStream_t s) {
    (void)s;
    for (int64_t r = 0; r < outer * inner && n > 0; r++) {
        int64_t base = (r / inner) * n * inner + r % inner, arg = 0;
        double m = kiln__load_f64(t, x, base);
        for (int64_t k = 1; k < n; k++) {
            double v = kiln__load_f64(t, x, base + k * inner);
            if (v > m) {
                m = v;
                arg = k;
            }
        }
        if (nan_first_zero && isnan(m)) arg = -1;
        for (int64_t k = 0; k < n; k++)
            kiln__store_f64(t, y, base + k * inner, k == arg ? 1.0 : 0.0);
    }
    return cudaSuccess;
}

cudaError_t kcu_conv_transpose(kiln_dtype t, const kcu_conv *g, const void *x, const void *w,
                               const void *bias, void *y, cudaStream_t s) {
    (void)s;
    for (int64_t i = 0; i < g->N * g->M * g->out_sz; i++) {
        int64_t m = (i / g->out_sz) % g->M, n = i / (g->out_sz * g->M);
        int64_t grp = m / g->Mg, mm = m % g->Mg, o[KCU_MAX_SP] = {0, 0, 0};
        kcu_convt_out_pos(g, i % g->out_sz, o);
        double acc = bias ? kiln__load_f64(t, bias, m) : 0.0;
        for (int64_t kk = 0; kk < g->k_sz; kk++) {
            int64_t idx = kcu_convt_src(g, o, kk);
            for (int64_t c = 0; idx >= 0 && c < g->Cg; c++) {
                int64_t ch = grp * g->Cg + c;
                acc += kiln__load_f64(t, x, (n * g->C + ch) * g->in_sz + idx) *
                       kiln__load_f64(t, w, (ch * g->Mg + mm) * g->k_sz + kk);
            }
        }
        kiln__store_f64(t, y, i, acc);
    }
    return cudaSuccess;
}

cudaError_t kcu_convt_col2im(kiln_dtype t, const kcu_conv *g, const void *col, const void *bias,
                             void *y, int64_t n, int64_t grp, cudaStream_t s) {
    (void)s;
    for (int64_t i = 0; i < g->Mg * g->out_sz; i++) {
        int64_t mm = i / g->out_sz, m = grp * g->Mg + mm, o[KCU_MAX_SP] = {0, 0, 0};
        kcu_convt_out_pos(g, i % g->out_sz, o);
        double acc = bias ? kiln__load_f64(t, bias, m) : 0.0;
        for (int64_t kk = 0; kk < g->k_sz; kk++) {
            int64_t idx = kcu_convt_src(g, o, kk);
            if (idx >= 0) acc += kiln__load_f64(t, col, (mm * g->k_sz + kk) * g->in_sz + idx);
        }
        kiln__store_f64(t, y, (n * g->M + m) * g->out_sz + i % g->out_sz, acc);
    }
    return cudaSuccess;
}

cudaError_t kcu_lppool(kiln_dtype t, const kcu_pool *g, double p, const void *x, void *y,
                       cudaStream_t s) {
    (void)s;
    for (int64_t i = 0; i < g->out_n; i++) {
        int64_t pl = i / g->out_sz, q = i % g->out_sz, o[KCU_MAX_SP] = {0, 0, 0}, kn = 1;
        for (int d = g->ns - 1; d >= 0; d--) {
            o[d] = q % g->out[d];
            q /= g->out[d];
            kn *= g->k[d];
        }
        double acc = 0;
        for (int64_t kp = 0; kp < kn; kp++) {
            int64_t rem = kp, idx = 0, mul = 1;
            int in = 1;
            for (int d = g->ns - 1; d >= 0; d--) {
                int64_t v = o[d] * g->s[d] - g->pb[d] + (rem % g->k[d]) * g->d[d];
                rem /= g->k[d];
                if (v < 0 || v >= g->in[d]) in = 0;
                idx += v * mul;
                mul *= g->in[d];
            }
            if (in) acc += pow(fabs(kiln__load_f64(t, x, pl * g->in_sz + idx)), p);
        }
        kiln__store_f64(t, y, i, pow(acc, 1.0 / p));
    }
    return cudaSuccess;
}

cudaError_t kcu_global_lppool(kiln_dtype t, const void *x, void *y, int64_t planes, int64_t n,
                              double p, cudaStream_t s) {
    (void)s;
    for (int64_t pl = 0; pl < planes; pl++) {
        double acc = 0;
        for (int64_t i = 0; i < n; i++)
            acc += pow(fabs(kiln__load_f64(t, x, pl * n + i)), p);
        kiln__store_f64(t, y, pl, pow(acc, 1.0 / p));
    }
    return cudaSuccess;
}

cudaError_t kcu_maxunpool(size_t es, const kcu_unpool *g, const void *x, const int64_t *ind,
                          void *y, cudaStream_t s) {
    (void)s;
    if (g->ny <= 0) return cudaSuccess;
    memset(y, 0, (size_t)g->ny * es);
    for (int64_t j = 0; j < g->nx; j++) {
        int64_t o = kcu_unpool_dst(g, ind[j]);
        if (o >= 0 && o < g->ny)
            memcpy((char *)y + (size_t)o * es, (const char *)x + (size_t)j * es, es);
    }
    return cudaSuccess;
}

cudaError_t kcu_maxroipool(kiln_dtype t, const kcu_roipool *g, const void *x, const void *rois,
                           void *y, cudaStream_t s) {
    (void)s;
    for (int64_t i = 0; i < g->R * g->C * g->PH * g->PW; i++) {
        int64_t pw = i % g->PW, ph = (i / g->PW) % g->PH, c = (i / (g->PW * g->PH)) % g->C,
                r = i / (g->PW * g->PH * g->C);
        int64_t b = (int64_t)kiln__load_f64(t, rois, r * 5);
        if (b < 0 || b >= g->N) {
            kiln__store_f64(t, y, i, 0.0);
            continue;
        }
        int64_t x1 = (int64_t)round(kiln__load_f64(t, rois, r * 5 + 1) * g->scale);
        int64_t y1 = (int64_t)round(kiln__load_f64(t, rois, r * 5 + 2) * g->scale);
        int64_t x2 = (int64_t)round(kiln__load_f64(t, rois, r * 5 + 3) * g->scale);
        int64_t y2 = (int64_t)round(kiln__load_f64(t, rois, r * 5 + 4) * g->scale);
        int64_t rh = y2 - y1 + 1 > 1 ? y2 - y1 + 1 : 1, rw = x2 - x1 + 1 > 1 ? x2 - x1 + 1 : 1;
        double bh = (double)rh / (double)g->PH, bw = (double)rw / (double)g->PW;
        int64_t hs = (int64_t)floor((double)ph * bh) + y1,
                he = (int64_t)ceil((double)(ph + 1) * bh) + y1;
        int64_t ws = (int64_t)floor((double)pw * bw) + x1,
                we = (int64_t)ceil((double)(pw + 1) * bw) + x1;
        hs = hs < 0 ? 0 : hs > g->H ? g->H : hs;
        he = he < 0 ? 0 : he > g->H ? g->H : he;
        ws = ws < 0 ? 0 : ws > g->W ? g->W : ws;
        we = we < 0 ? 0 : we > g->W ? g->W : we;
        double m = (he <= hs || we <= ws) ? 0.0 : -INFINITY;
        for (int64_t h = hs; h < he; h++)
            for (int64_t w = ws; w < we; w++) {
                double v = kiln__load_f64(t, x, ((b * g->C + c) * g->H + h) * g->W + w);
                m = v > m || v != v ? v : m;
            }
        kiln__store_f64(t, y, i, m);
    }
    return cudaSuccess;
}

cudaError_t kcu_reverse_sequence(size_t es, const kcu_revseq *g, const void *x, const void *lens,
                                 void *y, cudaStream_t s) {
    (void)s;
    for (int64_t i = 0; i < g->n; i++) {
        int64_t in = i % g->inner, a1 = (i / g->inner) % g->d1, a0 = i / (g->inner * g->d1);
        int64_t b = g->batch_axis == 0 ? a0 : a1, t = g->batch_axis == 0 ? a1 : a0;
        int64_t T = g->batch_axis == 0 ? g->d1 : g->d0;
        int64_t len =
            g->lens_i32 ? (int64_t)((const int32_t *)lens)[b] : ((const int64_t *)lens)[b];
        int64_t ts = len >= 0 && len <= T && t < len ? len - 1 - t : t;
        int64_t s0 = g->batch_axis == 0 ? a0 : ts, s1 = g->batch_axis == 0 ? ts : a1;
        memcpy((char *)y + (size_t)i * es,
               (const char *)x + (size_t)((s0 * g->d1 + s1) * g->inner + in) * es, es);
    }
    return cudaSuccess;
}

cudaError_t kcu_gridsample_run(const kcu_gridsample *g, const void *x, const void *grid, void *y,
                               cudaStream_t s) {
    (void)s;
    for (int64_t i = 0; i < g->N * g->C * g->Ho * g->Wo; i++) {
        int64_t ow = i % g->Wo, oh = (i / g->Wo) % g->Ho, c = (i / (g->Wo * g->Ho)) % g->C,
                n = i / (g->Wo * g->Ho * g->C), ge = ((n * g->Ho + oh) * g->Wo + ow) * 2;
        kiln_dtype gt = g->g_f64 ? KILN_DTYPE_FLOAT64 : KILN_DTYPE_FLOAT32;
        double fx = gs_unnormalize(kiln__load_f64(gt, grid, ge), g->W, g->align != 0);
        double fy = gs_unnormalize(kiln__load_f64(gt, grid, ge + 1), g->H, g->align != 0);
        double v = gs_sample(x, g->x_f64 != 0, (n * g->C + c) * g->H * g->W, g->H, g->W, fx, fy,
                             g->mode, g->pad, g->align != 0);
        kiln__store_f64(g->x_f64 ? KILN_DTYPE_FLOAT64 : KILN_DTYPE_FLOAT32, y, i, v);
    }
    return cudaSuccess;
}

cudaError_t kcu_roialign_run(const kcu_roialign *g, const void *x, const void *rois,
                             const void *batch, void *y, cudaStream_t s) {
    (void)s;
    kiln_dtype t = g->x_f64 ? KILN_DTYPE_FLOAT64 : KILN_DTYPE_FLOAT32;
    for (int64_t i = 0; i < g->R * g->C * g->PH * g->PW; i++) {
        int64_t pw = i % g->PW, ph = (i / g->PW) % g->PH, c = (i / (g->PW * g->PH)) % g->C,
                r = i / (g->PW * g->PH * g->C);
        int64_t b = kiln__load_i64(g->bi_i32 ? KILN_DTYPE_INT32 : KILN_DTYPE_INT64, batch, r);
        double v = 0.0;
        if (g->H > 0 && g->W > 0 && b >= 0 && b < g->N) {
            roi_box bx =
                roi_box_make(kiln__load_f64(t, rois, r * 4), kiln__load_f64(t, rois, r * 4 + 1),
                             kiln__load_f64(t, rois, r * 4 + 2), kiln__load_f64(t, rois, r * 4 + 3),
                             g->scale, g->half_pixel, g->PH, g->PW, g->sampling_ratio);
            v = roi_bin(x, g->x_f64 != 0, (b * g->C + c) * g->H * g->W, g->H, g->W, &bx, ph, pw,
                        g->max_mode);
        }
        kiln__store_f64(t, y, i, v);
    }
    return cudaSuccess;
}
