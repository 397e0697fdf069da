/* k_spatial.h -- geometry structs, launchers and per-element index math of
 * the "spatial" family of CUDA kernels (k_spatial.cu; host side in
 * cuda_ops_spatial.c).
 *
 * Plain C (C11 and C++17 both compile it), like cuda_kernels.h: the C side
 * plans a struct on the host, the launcher passes it by value to the kernel.
 * The index math of Pad, Resize and ConvTranspose lives here as KCU_HD
 * inline functions so that the kernels and the host emulation
 * (tests/cuda/emu/emu_spatial.c) run the very same code; Resize's taps,
 * GridSample's and RoiAlign's arithmetic are the CPU kernels' own
 * (src/ops/spatial_sample.h). */
#ifndef KILN_K_SPATIAL_H
#define KILN_K_SPATIAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "../../ops/spatial_sample.h" /* Resize taps (rs_taps), shared with the CPU */
#include "cuda_kernels.h"             /* kcu_conv */
#include "kiln.h"

#if defined(__CUDACC__)
#define KCU_HD __host__ __device__
#else
#define KCU_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Pad ---------------------------------------------------------------------
 * Modes: the numbers of PAD_CONSTANT.. in src/ops/tensor_internal.h
 * (cuda_ops_spatial.c checks that they agree). */
enum { KCU_PAD_CONSTANT = 0, KCU_PAD_REFLECT = 1, KCU_PAD_EDGE = 2, KCU_PAD_WRAP = 3 };
typedef struct kcu_pad {
    int rank, mode;
    int64_t n;              /* output elements */
    unsigned char value[8]; /* the constant, when not read from device memory */
    int64_t in[KILN_MAX_RANK], out[KILN_MAX_RANK], pb[KILN_MAX_RANK], xst[KILN_MAX_RANK];
} kcu_pad;

/* Source index along an axis of size d (> 0) for the relative index i (the
 * CPU kernel's pad_map): -1 for the constant mode outside [0, d). */
static inline KCU_HD int64_t kcu_pad_map(int mode, int64_t i, int64_t d) {
    if (i >= 0 && i < d) return i;
    switch (mode) {
    case KCU_PAD_CONSTANT: return -1;
    case KCU_PAD_EDGE: return i < 0 ? 0 : d - 1;
    case KCU_PAD_WRAP: {
        int64_t m = i % d;
        return m < 0 ? m + d : m;
    }
    default: {
        if (d == 1) return 0;
        int64_t p = 2 * (d - 1), m = i % p;
        if (m < 0) m += p;
        return m >= d ? p - m : m;
    }
    }
}

/* Element offset in x of output element i, or -1 (the constant value). */
static inline KCU_HD int64_t kcu_pad_src(const kcu_pad *g, int64_t i) {
    int64_t off = 0;
    for (int k = g->rank - 1; k >= 0; k--) {
        int64_t o = i % g->out[k];
        i /= g->out[k];
        int64_t s = kcu_pad_map(g->mode, o - g->pb[k], g->in[k]);
        if (s < 0) return -1;
        off += s * g->xst[k];
    }
    return off;
}

/* y[i] = x[kcu_pad_src(i)], or the constant where that is -1: *value (es
 * bytes in device memory) or, when value is NULL, g->value. Element sizes
 * 1, 2, 4, 8. */
cudaError_t kcu_pad_run(size_t es, const kcu_pad *g, const void *x, const void *value, void *y,
                        cudaStream_t stream);

/* ---- Resize / Upsample ----------------------------------------------------------------
 * Per axis the CPU's parameters (rs_axis_param, src/ops/spatial_sample.h,
 * whose rs_taps gives the taps of an output index); mode RS_*. */
typedef struct kcu_resize {
    int rank, mode;
    int64_t n;               /* output elements */
    unsigned char extrap[8]; /* extrapolation value in the element type */
    int64_t xst[KILN_MAX_RANK];
    rs_axis_param ax[KILN_MAX_RANK];
} kcu_resize;

/* Offset in x of output element i in the nearest mode; -1: extrapolate. */
static inline KCU_HD int64_t kcu_rs_nearest_src(const kcu_resize *g, int64_t i) {
    int64_t off = 0, ix[4];
    double w[4];
    for (int k = g->rank - 1; k >= 0; k--) {
        int64_t o = i % g->ax[k].out;
        i /= g->ax[k].out;
        int outside = 0;
        rs_taps(&g->ax[k], o, ix, w, &outside);
        if (outside) return -1;
        off += ix[0] * g->xst[k];
    }
    return off;
}

/* Taps of every axis for output element i (linear/cubic); returns 1 when
 * the element is the extrapolation value. Then the element is the sum over
 * every combination t (t[k] < nt[k], starting at zeros, kcu_rs_next) of
 * the weights' product times x at the taps' offset (kcu_rs_combo). */
typedef struct kcu_rs_elem {
    int nt[KILN_MAX_RANK], t[KILN_MAX_RANK];
    int64_t ix[KILN_MAX_RANK][4];
    double w[KILN_MAX_RANK][4];
} kcu_rs_elem;
static inline KCU_HD int kcu_rs_prepare(const kcu_resize *g, int64_t i, kcu_rs_elem *e) {
    int outside = 0;
    for (int k = g->rank - 1; k >= 0; k--) {
        int64_t o = i % g->ax[k].out;
        i /= g->ax[k].out;
        int out = 0;
        e->nt[k] = rs_taps(&g->ax[k], o, e->ix[k], e->w[k], &out);
        e->t[k] = 0;
        if (out) outside = 1;
    }
    return outside;
}
/* weight of the current combination (0: skip it, as the CPU skips taps of
 * weight 0) and its offset in x */
static inline KCU_HD double kcu_rs_combo(const kcu_resize *g, const kcu_rs_elem *e, int64_t *off) {
    double wp = 1.0;
    int64_t o = 0;
    for (int k = 0; k < g->rank; k++) {
        double w = e->w[k][e->t[k]];
        if (w == 0.0) return 0.0;
        wp *= w;
        o += e->ix[k][e->t[k]] * g->xst[k];
    }
    *off = o;
    return wp;
}
/* next combination; 0 after the last */
static inline KCU_HD int kcu_rs_next(const kcu_resize *g, kcu_rs_elem *e) {
    for (int k = g->rank - 1; k >= 0; k--) {
        if (++e->t[k] < e->nt[k]) return 1;
        e->t[k] = 0;
    }
    return 0;
}

/* Nearest (RS_NEAREST): moves elements of size es (any dtype). Linear/cubic: floating
 * dtype t, weights and sums in double; taps of weight 0 are skipped (as on
 * the CPU, so a NaN there does not spread). */
cudaError_t kcu_resize_run(kiln_dtype t, size_t es, const kcu_resize *g, const void *x, void *y,
                           cudaStream_t stream);

/* ---- normalization ------------------------------------------------------------------
 * Group statistics: group o (groups of them) holds R elements at offsets
 * base(o) + roff(r), base from o's coordinates in kdims (strides kst),
 * roff from r's in rdims (strides rst). kind 0 (MeanVarianceNormalization):
 * y = (x - mean) / (sqrt(var) + 1e-9); kind 1 (InstanceNormalization, group
 * = (n, c) plane): y = (x - mean) / sqrt(var + eps) * scale[c] + bias[c],
 * c = o % C. Statistics in double (two passes), one block per group. */
enum { KCU_GN_MVN = 0, KCU_GN_INSTANCE = 1 };
typedef struct kcu_groupnorm {
    int kind, krank, rrank, pad_;
    double eps;
    int64_t groups, R, C;
    int64_t kdims[KILN_MAX_RANK], kst[KILN_MAX_RANK], rdims[KILN_MAX_RANK], rst[KILN_MAX_RANK];
} kcu_groupnorm;
/* offset of flat index i over dims (row-major) with element strides st */
static inline KCU_HD int64_t kcu_gn_off(int rank, const int64_t *dims, const int64_t *st,
                                        int64_t i) {
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; d--) {
        off += (i % dims[d]) * st[d];
        i /= dims[d];
    }
    return off;
}
cudaError_t kcu_groupnorm_run(kiln_dtype t, const kcu_groupnorm *g, const void *x,
                              const void *scale, const void *bias, void *y, cudaStream_t stream);

/* LRN across channels of x [N, C, plane]: y = x / (bias + alpha/size *
 * sum of squares over channels [c - (size-1)/2, c + size/2])^beta, in double. */
cudaError_t kcu_lrn(kiln_dtype t, const void *x, void *y, int64_t N, int64_t C, int64_t plane,
                    int size, double alpha, double beta, double bias, cudaStream_t stream);

/* Hardmax over n elements of stride `inner`, outer*inner rows: 1 at the first
 * maximum (NaN not counted unless first), 0 elsewhere. nan_first_zero: a row
 * whose first element is NaN gets all zeros (the CPU's float32 contiguous
 * path); else its one is at the first element. */
cudaError_t kcu_hardmax(kiln_dtype t, const void *x, void *y, int64_t outer, int64_t n,
                        int64_t inner, int nan_first_zero, cudaStream_t stream);

/* ---- ConvTranspose ---------------------------------------------------------------------
 * Geometry g: x [N, C, in...], w [C, Mg, k...], y [N, M, out...], pads pb
 * (end pads are implied by out). Output position o (spatial coordinates)
 * receives, from kernel tap kk (flat over k), the input position i with
 * o = i * s - pb + kk * d: its flat offset in the input plane, or -1. */
static inline KCU_HD int64_t kcu_convt_src(const kcu_conv *g, const int64_t *o, int64_t kk) {
    int64_t idx = 0, mul = 1;
    for (int d = g->ns - 1; d >= 0; d--) {
        const int64_t kx = kk % g->k[d];
        kk /= g->k[d];
        const int64_t t = o[d] + g->pb[d] - kx * g->d[d];
        if (t < 0 || t % g->s[d] != 0 || t / g->s[d] >= g->in[d]) return -1;
        idx += (t / g->s[d]) * mul;
        mul *= g->in[d];
    }
    return idx;
}
/* spatial coordinates of flat output position p */
static inline KCU_HD void kcu_convt_out_pos(const kcu_conv *g, int64_t p, int64_t *o) {
    for (int d = g->ns - 1; d >= 0; d--) {
        o[d] = p % g->out[d];
        p /= g->out[d];
    }
}
/* Direct kernel, one thread per output element y[n, m, o]: bias[m] (bias
 * may be NULL) plus the sum over the group's channels c and taps kk of
 * x[n, c, kcu_convt_src] * w[c, m % Mg, kk]. Floating dtypes, fp32
 * accumulation (fp64 for fp64). */
cudaError_t kcu_conv_transpose(kiln_dtype t, const kcu_conv *g, const void *x, const void *w,
                               const void *bias, void *y, cudaStream_t stream);
/* col2im of image n, group grp: col [Mg * k_sz, in_sz] holds W_g^T X_g (one
 * GEMM); y[n, grp*Mg + mm, o] = bias + sum over taps kk of
 * col[mm * k_sz + kk, kcu_convt_src(o, kk)] (a gather: no atomics). */
cudaError_t kcu_convt_col2im(kiln_dtype t, const kcu_conv *g, const void *col, const void *bias,
                             void *y, int64_t n, int64_t grp, cudaStream_t stream);

/* ---- LpPool, GlobalLpPool, MaxUnpool, MaxRoiPool --------------------------------------------
 * LpPool on [planes, spatial...] with the pooling geometry g (kind
 * ignored): y = (sum over the taps inside x of |v|^p)^(1/p), in double. */
cudaError_t kcu_lppool(kiln_dtype t, const kcu_pool *g, double p, const void *x, void *y,
                       cudaStream_t stream);
/* GlobalLpPool: one value per plane of n elements, in double; one block per plane. */
cudaError_t kcu_global_lppool(kiln_dtype t, const void *x, void *y, int64_t planes, int64_t n,
                              double p, cudaStream_t stream);

/* MaxUnpool: y (ny elements of size es) zeroed, then x[j] written at the
 * position of ind[j] (an index into the default output shape def[0..rank),
 * re-linearized into y's shape ydims). Indices outside [0, numel(def)) are
 * skipped (the CPU kernel fails the run). */
typedef struct kcu_unpool {
    int rank, pad_;
    int64_t nx, ny, ndef;
    int64_t def[KILN_MAX_RANK], ydims[KILN_MAX_RANK];
} kcu_unpool;
static inline KCU_HD int64_t kcu_unpool_dst(const kcu_unpool *g, int64_t idx) {
    if (idx < 0 || idx >= g->ndef) return -1;
    int64_t o = 0, mul = 1;
    for (int i = g->rank - 1; i >= 0; i--) {
        o += (idx % g->def[i]) * mul;
        idx /= g->def[i];
        mul *= g->ydims[i];
    }
    return o;
}
cudaError_t kcu_maxunpool(size_t es, const kcu_unpool *g, const void *x, const int64_t *ind,
                          void *y, cudaStream_t stream);

/* MaxRoiPool (Caffe ROI pooling): x [N, C, H, W], rois [R, 5] (batch, x1,
 * y1, x2, y2; dtype t) -> y [R, C, PH, PW]; corners scaled and rounded,
 * bins with floor/ceil bounds clamped to the image, empty bins 0. A batch
 * index outside [0, N) gives zeros (the CPU kernel fails the run). */
typedef struct kcu_roipool {
    int64_t N, C, H, W, R, PH, PW;
    double scale;
} kcu_roipool;
cudaError_t kcu_maxroipool(kiln_dtype t, const kcu_roipool *g, const void *x, const void *rois,
                           void *y, cudaStream_t stream);

/* ---- ReverseSequence ----------------------------------------------------------------------
 * x viewed as [d0, d1, inner], batch along axis batch_axis (0 or 1), time
 * along the other; lens (int32 when lens_i32, else int64, device) per
 * batch. y[b, t] = x[b, len - 1 - t] for t < len, else x[b, t]. A length
 * outside [0, T] reverses nothing (the CPU kernel fails the run). */
typedef struct kcu_revseq {
    int batch_axis, lens_i32;
    int64_t d0, d1, inner, n;
} kcu_revseq;
cudaError_t kcu_reverse_sequence(size_t es, const kcu_revseq *g, const void *x, const void *lens,
                                 void *y, cudaStream_t stream);

/* ---- GridSample, RoiAlign (float32/float64; arithmetic of src/ops/spatial_sample.h) ---------
 * GridSample: x [N, C, H, W], grid [N, Ho, Wo, 2] (x_f64/g_f64: float64,
 * else float32) -> y [N, C, Ho, Wo], one thread per output element. */
typedef struct kcu_gridsample {
    int mode, pad, align, x_f64, g_f64, pad_;
    int64_t N, C, H, W, Ho, Wo;
} kcu_gridsample;
cudaError_t kcu_gridsample_run(const kcu_gridsample *g, const void *x, const void *grid, void *y,
                               cudaStream_t stream);

/* RoiAlign: x [N, C, H, W], rois [R, 4] (dtype of x), batch indices [R]
 * (int32 when bi_i32, else int64) -> y [R, C, PH, PW]. An empty plane
 * (H or W 0) gives zeros; a batch index outside [0, N) gives zeros (the CPU
 * kernel fails the run). */
typedef struct kcu_roialign {
    int half_pixel, max_mode, x_f64, bi_i32;
    int64_t N, C, H, W, R, PH, PW, sampling_ratio;
    double scale;
} kcu_roialign;
cudaError_t kcu_roialign_run(const kcu_roialign *g, const void *x, const void *rois,
                             const void *batch, void *y, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
