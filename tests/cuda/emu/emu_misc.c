/* emu_misc.c -- host emulation of the "misc" family's launchers
 * (src/backends/cuda/k_misc.h) for tests/cuda/emu/run.sh: the kernels'
 * index math and element order transcribed, arithmetic in double, values
 * stored with kiln__store_f64. The random generator is the kernels' (same
 * hash of (key, element)), so the distribution checks of
 * tests/cuda/cases_misc.inc see the same kind of numbers. Not part of
 * libkiln. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

static bool em_store_ok(kiln_dtype t) {
    return kiln__dtype_valid((int)t) && t != KILN_DTYPE_STRING && t != KILN_DTYPE_UNDEFINED;
}

int kcu_misc_store_has(kiln_dtype t) { return em_store_ok(t) ? 1 : 0; }

/* ---- random ---- */
static uint64_t em_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double em_unit(uint64_t key, uint64_t c) {
    return (double)(em_mix64(key + (c + 1) * 0x9e3779b97f4a7c15ull) >> 11) * (1.0 / 9007199254740992.0);
}

cudaError_t kcu_random(int kind, kiln_dtype t, void *y, int64_t n, uint64_t seed, uint64_t *ctr,
                       double a, double b, kiln_dtype pt, const void *p, cudaStream_t stream) {
    (void)stream;
    if (!em_store_ok(t) || (kind == KCU_RND_BERNOULLI && (!kiln__dtype_is_float(pt) || !p)) ||
        (kind != KCU_RND_BERNOULLI && !kiln__dtype_is_float(t)))
        return cudaErrorInvalidValue;
    if (n <= 0) return cudaSuccess;
    uint64_t key = seed;
    if (ctr) key ^= em_mix64(*ctr ^ 0x632be59bd9b4e019ull);
    for (int64_t i = 0; i < n; i++) {
        double v;
        if (kind == KCU_RND_NORMAL) {
            double u1 = 1.0 - em_unit(key, 2 * (uint64_t)i), u2 = em_unit(key, 2 * (uint64_t)i + 1);
            v = a + b * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        } else if (kind == KCU_RND_UNIFORM) {
            v = a + (b - a) * em_unit(key, (uint64_t)i);
        } else {
            v = em_unit(key, (uint64_t)i) < kiln__load_f64(pt, p, i) ? 1.0 : 0.0;
        }
        kiln__store_f64(t, y, i, v);
    }
    if (ctr) *ctr += 1;
    return cudaSuccess;
}

cudaError_t kcu_random_ctr_init(uint64_t *ctr, uint64_t v, cudaStream_t stream) {
    (void)stream;
    *ctr = v;
    return cudaSuccess;
}

/* ---- windows ---- */
cudaError_t kcu_window(int code, int periodic, kiln_dtype t, void *y, int64_t n, cudaStream_t stream) {
    (void)stream;
    if (!em_store_ok(t) || code < 0 || code > 2) return cudaErrorInvalidValue;
    double N = periodic ? (double)n : (double)(n - 1);
    for (int64_t i = 0; i < n; i++) {
        double v = 1.0;
        if (N > 0) {
            double a = 2.0 * 3.14159265358979323846 * (double)i / N;
            v = code == 0 ? 0.42 - 0.5 * cos(a) + 0.08 * cos(2.0 * a)
                : code == 1 ? 25.0 / 46.0 - (21.0 / 46.0) * cos(a) : 0.5 - 0.5 * cos(a);
        }
        kiln__store_f64(t, y, i, v);
    }
    return cudaSuccess;
}

/* ---- DFT ---- */
cudaError_t kcu_dft(kiln_dtype t, const kcu_dft_geo *g, const void *x, const void *w, void *y,
                    double *tw, cudaStream_t stream) {
    (void)stream;
    if (g->n < 1 || (g->comp != 1 && g->comp != 2) || g->n_out > g->n || !kiln__dtype_is_float(t))
        return cudaErrorInvalidValue;
    int64_t total = g->outer * g->inner * g->n_out;
    if (total <= 0) return cudaSuccess;
    for (int64_t m = 0; m < g->n; m++) {
        tw[2 * m] = cos(2.0 * 3.14159265358979323846 * (double)m / (double)g->n);
        tw[2 * m + 1] = sin(2.0 * 3.14159265358979323846 * (double)m / (double)g->n);
    }
    double sgn = g->inverse ? 1.0 : -1.0, scale = g->inverse ? 1.0 / (double)g->n : 1.0;
    int logn = 0;
    while (logn < 62 && ((int64_t)1 << logn) < g->n) logn++;
    if (g->n >= 2 && g->n <= 2048 && ((int64_t)1 << logn) == g->n) {
        /* k_fft_pow2: a line at a time, samples at their bit-reversed places */
        int n = (int)g->n;
        double *sh = malloc((size_t)n * 2 * sizeof(double));
        for (int64_t line = 0; line < g->outer * g->inner; line++) {
            int64_t i = line % g->inner, o = line / g->inner, base = o * g->in_so + i * g->in_si;
            for (int j = 0; j < n; j++) {
                double xr = 0.0, xi = 0.0;
                if (j < g->nin) {
                    xr = kiln__load_f64(t, x, base + (int64_t)j * g->in_sj);
                    xi = g->comp == 2 ? kiln__load_f64(t, x, base + (int64_t)j * g->in_sj + 1) : 0.0;
                    if (w) {
                        double ww = kiln__load_f64(t, w, j);
                        xr *= ww;
                        xi *= ww;
                    }
                }
                unsigned r = 0;
                for (int b = 0; b < logn; b++) r |= (((unsigned)j >> b) & 1u) << (logn - 1 - b);
                sh[2 * r] = xr;
                sh[2 * r + 1] = xi;
            }
            for (int len = 2; len <= n; len <<= 1) {
                int half = len >> 1, step = n / len;
                for (int b = 0; b < n / 2; b++) {
                    int k = b % half, i0 = (b / half) * len + k, i1 = i0 + half;
                    double wr = tw[2 * k * step], wi = sgn * tw[2 * k * step + 1];
                    double v0 = sh[2 * i1], v1 = sh[2 * i1 + 1];
                    double vr = v0 * wr - v1 * wi, vi = v0 * wi + v1 * wr;
                    double u0 = sh[2 * i0], u1 = sh[2 * i0 + 1];
                    sh[2 * i1] = u0 - vr;
                    sh[2 * i1 + 1] = u1 - vi;
                    sh[2 * i0] = u0 + vr;
                    sh[2 * i0 + 1] = u1 + vi;
                }
            }
            for (int64_t k = 0; k < g->n_out; k++) {
                int64_t oo = o * g->out_so + i * g->out_si + k * g->out_sk;
                kiln__store_f64(t, y, oo, sh[2 * k] * scale);
                kiln__store_f64(t, y, oo + 1, sh[2 * k + 1] * scale);
            }
        }
        free(sh);
        return cudaSuccess;
    }
    int64_t jmax = g->nin < g->n ? g->nin : g->n;
    for (int64_t e = 0; e < total; e++) {
        int64_t k = e % g->n_out, line = e / g->n_out, i = line % g->inner, o = line / g->inner;
        int64_t base = o * g->in_so + i * g->in_si;
        double re = 0, im = 0;
        int64_t m = 0;
        for (int64_t j = 0; j < jmax; j++) {
            double xr = kiln__load_f64(t, x, base + j * g->in_sj);
            double xi = g->comp == 2 ? kiln__load_f64(t, x, base + j * g->in_sj + 1) : 0.0;
            if (w) {
                double ww = kiln__load_f64(t, w, j);
                xr *= ww;
                xi *= ww;
            }
            double wr = tw[2 * m], wi = sgn * tw[2 * m + 1];
            re += xr * wr - xi * wi;
            im += xr * wi + xi * wr;
            m += k;
            if (m >= g->n) m -= g->n;
        }
        int64_t oo = o * g->out_so + i * g->out_si + k * g->out_sk;
        kiln__store_f64(t, y, oo, re * scale);
        kiln__store_f64(t, y, oo + 1, im * scale);
    }
    return cudaSuccess;
}

/* ---- MelWeightMatrix ---- */
static int64_t em_mel_point(int64_t i, int64_t dftl, int64_t sr, double lm, double step) {
    double f = 700.0 * (pow(10.0, ((double)i * step + lm) / 2595.0) - 1.0);
    double b = floor((double)(dftl + 1) * f / (double)sr);
    return b >= -1.0 ? (int64_t)fmin(b, 4.0e15) : -1;
}

cudaError_t kcu_mel(kiln_dtype t, void *y, int64_t nmel, int64_t dftl, int64_t sr, double lm,
                    double step, cudaStream_t stream) {
    (void)stream;
    if (!em_store_ok(t) || sr <= 0 || dftl < 1 || nmel < 0) return cudaErrorInvalidValue;
    int64_t nb = dftl / 2 + 1;
    for (int64_t e = 0; e < nb * nmel; e++) {
        int64_t j = e / nmel, m = e % nmel;
        int64_t l = em_mel_point(m, dftl, sr, lm, step), c = em_mel_point(m + 1, dftl, sr, lm, step),
                h = em_mel_point(m + 2, dftl, sr, lm, step);
        double v = 0.0;
        if (c == l) {
            if (j == c) v = 1.0;
        } else if (j >= (l > 0 ? l : 0) && j <= c) {
            v = (double)(j - l) / (double)(c - l);
        }
        if (h > c && j >= (c > 0 ? c : 0) && j < h) v = (double)(h - j) / (double)(h - c);
        kiln__store_f64(t, y, e, v);
    }
    return cudaSuccess;
}

/* ---- Det (the kernel's block-slot layout of the scratch) ---- */
static int64_t em_det_blocks(int64_t batch, int64_t n) {
    int64_t b = batch < 1024 ? batch : 1024;
    if (n > 64) {
        int64_t lim = ((int64_t)1 << 28) / (n * n * (int64_t)sizeof(double));
        if (lim < 1) lim = 1;
        if (b > lim) b = lim;
    }
    return b < 1 ? 1 : b;
}

size_t kcu_det_scratch(int64_t batch, int64_t n) {
    if (batch <= 0 || n <= 64) return 0;
    return (size_t)em_det_blocks(batch, n) * (size_t)n * (size_t)n * sizeof(double);
}

cudaError_t kcu_det(kiln_dtype t, const void *x, void *y, int64_t batch, int64_t n, void *ws,
                    cudaStream_t stream) {
    (void)stream;
    if (n < 0 || (n > 64 && batch > 0 && !ws) || !kiln__dtype_is_float(t)) return cudaErrorInvalidValue;
    if (batch <= 0) return cudaSuccess;
    int64_t blocks = em_det_blocks(batch, n);
    double *sh = malloc((size_t)(n * n > 0 ? n * n : 1) * sizeof(double));
    for (int64_t b = 0; b < batch; b++) {
        double *m = n <= 64 ? sh : (double *)ws + (b % blocks) * n * n;
        for (int64_t e = 0; e < n * n; e++) m[e] = kiln__load_f64(t, x, b * n * n + e);
        double det = 1.0;
        for (int64_t c = 0; c < n; c++) {
            int64_t p = c;
            double best = fabs(m[c * n + c]);
            for (int64_t r = c + 1; r < n; r++)
                if (fabs(m[r * n + c]) > best) {
                    best = fabs(m[r * n + c]);
                    p = r;
                }
            if (best == 0.0) {
                det = 0.0;
                break;
            }
            if (p != c)
                for (int64_t j = 0; j < n; j++) {
                    double t0 = m[c * n + j];
                    m[c * n + j] = m[p * n + j];
                    m[p * n + j] = t0;
                }
            double d = m[c * n + c];
            det = (p != c ? -det : det) * d;
            for (int64_t r = c + 1; r < n; r++)
                for (int64_t j = c + 1; j < n; j++) {
                    double f = m[r * n + c] / d;
                    if (f != 0.0) m[r * n + j] -= f * m[c * n + j];
                }
        }
        kiln__store_f64(t, y, b, det);
    }
    free(sh);
    return cudaSuccess;
}

/* ---- losses ---- */
size_t kcu_loss_scratch(int64_t positions, int reduction) {
    if (reduction == 0) return 0;
    return (size_t)(positions > 0 ? positions : 1) * 2 * sizeof(double);
}

cudaError_t kcu_loss(kiln_dtype t, kiln_dtype tt, const kcu_loss_geo *g, const void *x,
                     const void *target, const void *weight, void *y, void *log_prob, void *ws,
                     cudaStream_t stream) {
    (void)stream;
    if ((tt != KILN_DTYPE_INT32 && tt != KILN_DTYPE_INT64) || g->reduction < 0 || g->reduction > 2 ||
        (g->reduction != 0 && !ws) || !kiln__dtype_is_float(t))
        return cudaErrorInvalidValue;
    int64_t C = g->C, D = g->D, cnt = g->N * D;
    double *w2 = ws;
    for (int64_t p = 0; p < cnt; p++) {
        int64_t nn = p / D, d = p % D, base = nn * C * D + d;
        double lse = 0.0;
        if (g->sce) {
            double mx = -INFINITY, s = 0.0;
            for (int64_t c = 0; c < C; c++) {
                double v = kiln__load_f64(t, x, base + c * D);
                if (v > mx) mx = v;
            }
            for (int64_t c = 0; c < C; c++) s += exp(kiln__load_f64(t, x, base + c * D) - mx);
            lse = log(s) + mx;
            if (log_prob)
                for (int64_t c = 0; c < C; c++)
                    kiln__store_f64(t, log_prob, base + c * D, kiln__load_f64(t, x, base + c * D) - lse);
        }
        int64_t tv = kiln__load_i64(tt, target, p);
        double l = 0.0, wt = 0.0;
        if (!(g->has_ignore && tv == g->ignore_index)) {
            if (tv < 0 || tv >= C) {
                l = wt = NAN;
            } else {
                wt = weight ? kiln__load_f64(t, weight, tv) : 1.0;
                double v = kiln__load_f64(t, x, (nn * C + tv) * D + d);
                l = -wt * (g->sce ? v - lse : v);
            }
        }
        if (g->reduction == 0) {
            kiln__store_f64(t, y, p, l);
        } else {
            w2[2 * p] = l;
            w2[2 * p + 1] = wt;
        }
    }
    if (g->reduction != 0) {
        double s = 0, w = 0;
        for (int64_t p = 0; p < cnt; p++) {
            s += w2[2 * p];
            w += w2[2 * p + 1];
        }
        kiln__store_f64(t, y, 0, g->reduction == 1 ? s : s / w);
    }
    return cudaSuccess;
}
