/* spatial_sample.h -- the sampling arithmetic of GridSample and RoiAlign
 * (src/ops/misc_sample.c) and Resize (tensor_resize.c), shared with their
 * CUDA kernels
 * (src/backends/cuda/k_spatial.cu) so both run the same formulas. Plain C,
 * also valid CUDA C++ (the functions are __host__ __device__ there). */
#ifndef KILN_SPATIAL_SAMPLE_H
#define KILN_SPATIAL_SAMPLE_H

#include <math.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdbool.h>
#endif

#if defined(__CUDACC__)
#define KILN_SAMPLE_FN static inline __host__ __device__
#else
#define KILN_SAMPLE_FN static inline
#endif

/* GridSample modes and padding modes (attribute values, permanent) */
enum { GS_BILINEAR = 0, GS_NEAREST = 1, GS_BICUBIC = 2 };
enum { GS_ZEROS = 0, GS_BORDER = 1, GS_REFLECTION = 2 };

KILN_SAMPLE_FN double gs_unnormalize(double c, int64_t size, bool align) {
    return align ? (c + 1.0) / 2.0 * (double)(size - 1) : ((c + 1.0) * (double)size - 1.0) / 2.0;
}

KILN_SAMPLE_FN double gs_clip(double c, int64_t size) {
    return fmin((double)(size - 1), fmax(c, 0.0));
}

KILN_SAMPLE_FN double gs_reflect(double c, double twice_low, double twice_high) {
    if (twice_low == twice_high) return 0.0;
    double mn = twice_low / 2.0, span = (twice_high - twice_low) / 2.0;
    c = fabs(c - mn);
    double extra = fmod(c, span);
    double flips = floor(c / span);
    return fmod(flips, 2.0) == 0.0 ? extra + mn : span - extra + mn;
}

KILN_SAMPLE_FN double gs_pad(double c, int64_t size, int pad, bool align) {
    if (pad == GS_BORDER) return gs_clip(c, size);
    if (pad == GS_REFLECTION) {
        c = align ? gs_reflect(c, 0.0, 2.0 * (double)(size - 1))
                  : gs_reflect(c, -1.0, 2.0 * (double)size - 1.0);
        return gs_clip(c, size);
    }
    return c;
}

/* A pixel coordinate as an index; out-of-range (and NaN) give -1, which
 * reads as padding. */
KILN_SAMPLE_FN int64_t gs_idx(double v) {
    if (!(v >= -1.0 && v < 4611686018427387904.0)) return -1;
    return (int64_t)v;
}

KILN_SAMPLE_FN void gs_cubic_coeffs(double t, double *w) {
    const double A = -0.75;
    double x1 = t + 1.0, x2 = t, x3 = 1.0 - t, x4 = 2.0 - t;
    w[0] = ((A * x1 - 5.0 * A) * x1 + 8.0 * A) * x1 - 4.0 * A;
    w[1] = ((A + 2.0) * x2 - (A + 3.0)) * x2 * x2 + 1.0;
    w[2] = ((A + 2.0) * x3 - (A + 3.0)) * x3 * x3 + 1.0;
    w[3] = ((A * x4 - 5.0 * A) * x4 + 8.0 * A) * x4 - 4.0 * A;
}

/* GridSample: element (iy, ix) of the H x W plane at `base` of x (float64
 * when f64, else float32); 0 outside. */
KILN_SAMPLE_FN double gs_at(const void *x, bool f64, int64_t base, int64_t H, int64_t W, int64_t iy,
                            int64_t ix) {
    if (iy < 0 || iy >= H || ix < 0 || ix >= W) return 0.0;
    int64_t e = base + iy * W + ix;
    return f64 ? ((const double *)x)[e] : (double)((const float *)x)[e];
}

/* GridSample: the value at pixel coordinates (fx, fy) (unnormalized) of
 * the plane at `base` in mode GS_* with padding mode pad. */
KILN_SAMPLE_FN double gs_sample(const void *x, bool f64, int64_t base, int64_t H, int64_t W,
                                double fx, double fy, int mode, int pad, bool align) {
    double v = 0.0;
    if (mode == GS_BICUBIC) {
        double x0 = floor(fx), y0 = floor(fy);
        double wx[4], wy[4];
        gs_cubic_coeffs(fx - x0, wx);
        gs_cubic_coeffs(fy - y0, wy);
        for (int i = 0; i < 4; i++) {
            double row = 0.0;
            for (int j = 0; j < 4; j++) {
                double px = gs_pad(x0 - 1 + j, W, pad, align);
                double py = gs_pad(y0 - 1 + i, H, pad, align);
                row += wx[j] * gs_at(x, f64, base, H, W, gs_idx(py), gs_idx(px));
            }
            v += wy[i] * row;
        }
        return v;
    }
    double ix = gs_pad(fx, W, pad, align), iy = gs_pad(fy, H, pad, align);
    if (mode == GS_NEAREST)
        return gs_at(x, f64, base, H, W, gs_idx(nearbyint(iy)), gs_idx(nearbyint(ix)));
    double x0 = floor(ix), y0 = floor(iy);
    double tx = ix - x0, ty = iy - y0;
    int64_t X0 = gs_idx(x0), Y0 = gs_idx(y0);
    if (X0 < 0 && x0 != -1.0) X0 = -2; /* both taps outside */
    if (Y0 < 0 && y0 != -1.0) Y0 = -2;
    return (1 - tx) * (1 - ty) * gs_at(x, f64, base, H, W, Y0, X0) +
           tx * (1 - ty) * gs_at(x, f64, base, H, W, Y0, X0 + 1) +
           (1 - tx) * ty * gs_at(x, f64, base, H, W, Y0 + 1, X0) +
           tx * ty * gs_at(x, f64, base, H, W, Y0 + 1, X0 + 1);
}

/* RoiAlign: the box of one roi (x1, y1, x2, y2 in input coordinates before
 * spatial_scale): its corner, bin sizes and sampling grid gh x gw
 * (adaptive: ceil(size / bins), bounded so that absurd or NaN rois cannot
 * make the loops explode); count = samples averaged per bin. */
typedef struct roi_box {
    double x1, y1, bh, bw, count;
    int64_t gh, gw;
} roi_box;

KILN_SAMPLE_FN roi_box roi_box_make(double rx1, double ry1, double rx2, double ry2, double sc,
                                    int half_pixel, int64_t PH, int64_t PW,
                                    int64_t sampling_ratio) {
    roi_box b;
    double off = half_pixel ? 0.5 : 0.0;
    b.x1 = rx1 * sc - off;
    b.y1 = ry1 * sc - off;
    double x2 = rx2 * sc - off, y2 = ry2 * sc - off;
    double rw = x2 - b.x1, rh = y2 - b.y1;
    if (!half_pixel) {
        rw = fmax(rw, 1.0);
        rh = fmax(rh, 1.0);
    }
    b.bh = rh / (double)PH;
    b.bw = rw / (double)PW;
    double ah = ceil(rh / (double)PH), aw = ceil(rw / (double)PW);
    b.gh = sampling_ratio > 0 ? sampling_ratio : (ah >= 0 ? (int64_t)fmin(ah, 65536.0) : 0);
    b.gw = sampling_ratio > 0 ? sampling_ratio : (aw >= 0 ? (int64_t)fmin(aw, 65536.0) : 0);
    b.count = (double)(b.gh * b.gw > 1 ? b.gh * b.gw : 1);
    return b;
}

/* RoiAlign: the four corners (offsets in an H x W plane) and weights of the
 * bilinear sample at (yy, xx); all zero outside [-1, H] x [-1, W]. */
typedef struct roi_pc {
    int64_t p[4];
    double w[4];
} roi_pc;

KILN_SAMPLE_FN roi_pc roi_bilinear(double yy, double xx, int64_t H, int64_t W) {
    roi_pc pc = {{0, 0, 0, 0}, {0, 0, 0, 0}};
    if (yy >= -1.0 && yy <= (double)H && xx >= -1.0 && xx <= (double)W) {
        double sy = yy <= 0 ? 0 : yy, sx = xx <= 0 ? 0 : xx;
        int64_t yl = (int64_t)sy, xl = (int64_t)sx, yh, xh;
        if (yl >= H - 1) {
            yh = yl = H - 1;
            sy = (double)yl;
        } else {
            yh = yl + 1;
        }
        if (xl >= W - 1) {
            xh = xl = W - 1;
            sx = (double)xl;
        } else {
            xh = xl + 1;
        }
        double ly = sy - (double)yl, lx = sx - (double)xl;
        double hy = 1.0 - ly, hx = 1.0 - lx;
        pc.p[0] = yl * W + xl;
        pc.p[1] = yl * W + xh;
        pc.p[2] = yh * W + xl;
        pc.p[3] = yh * W + xh;
        pc.w[0] = hy * hx;
        pc.w[1] = hy * lx;
        pc.w[2] = ly * hx;
        pc.w[3] = ly * lx;
    }
    return pc;
}

/* RoiAlign: output bin (ph, pw) of the plane at `base` of x (float64 when
 * f64, else float32): the average of the box's samples, or (max_mode) the
 * max over samples of the largest weighted corner (ONNX Runtime's rule). */
KILN_SAMPLE_FN double roi_bin(const void *x, bool f64, int64_t base, int64_t H, int64_t W,
                              const roi_box *b, int64_t ph, int64_t pw, int max_mode) {
    double acc = 0.0;
    bool have = false;
    for (int64_t iy = 0; iy < b->gh; iy++) {
        double yy = b->y1 + (double)ph * b->bh + ((double)iy + 0.5) * b->bh / (double)b->gh;
        for (int64_t ix = 0; ix < b->gw; ix++) {
            double xx = b->x1 + (double)pw * b->bw + ((double)ix + 0.5) * b->bw / (double)b->gw;
            roi_pc pc = roi_bilinear(yy, xx, H, W);
            double v[4];
            for (int q = 0; q < 4; q++) {
                int64_t e = base + pc.p[q];
                v[q] = pc.w[q] * (f64 ? ((const double *)x)[e] : (double)((const float *)x)[e]);
            }
            if (!max_mode) {
                acc += v[0] + v[1] + v[2] + v[3];
            } else {
                double m = fmax(fmax(fmax(v[0], v[1]), v[2]), v[3]);
                acc = have ? fmax(acc, m) : m;
                have = true;
            }
        }
    }
    return max_mode ? acc : acc / b->count;
}

/* ---- Resize / Upsample (src/ops/tensor_resize.c) ----------------------------
 * enum values stored in attributes (permanent) */
enum { RS_NEAREST = 0, RS_LINEAR = 1, RS_CUBIC = 2 };
enum {
    RS_HALF_PIXEL = 0,
    RS_ASYMMETRIC = 1,
    RS_PYTORCH_HALF_PIXEL = 2,
    RS_TF_HALF_PIXEL_FOR_NN = 3,
    RS_ALIGN_CORNERS = 4,
    RS_TF_CROP_AND_RESIZE = 5,
    RS_HALF_PIXEL_SYMMETRIC = 6,
};
enum {
    RS_ROUND_PREFER_FLOOR = 0,
    RS_ROUND_PREFER_CEIL = 1,
    RS_FLOOR = 2,
    RS_CEIL = 3,
    RS_SIMPLE = 4, /* opset < 11: floor when upsampling, ceil when downsampling */
};

KILN_SAMPLE_FN double rs_cubic_w(double r, double A, int t) {
    switch (t) {
    case 0: return ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
    case 1: return ((A + 2) * r - (A + 3)) * r * r + 1;
    case 2: return ((A + 2) * (1 - r) - (A + 3)) * (1 - r) * (1 - r) + 1;
    default: return ((A * (2 - r) - 5 * A) * (2 - r) + 8 * A) * (2 - r) - 4 * A;
    }
}

KILN_SAMPLE_FN int64_t rs_clamp(int64_t i, int64_t n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }

/* The resize parameters of one axis: input/output sizes, scale, the
 * resized length `len` = in*scale (not rounded, as the ONNX reference
 * uses; it equals `out` when sizes were given), crop roi. */
typedef struct rs_axis_param {
    int mode, ctm, nearest_mode, exclude_outside;
    double cubic_a;
    int64_t in, out;
    double scale, len, roi0, roi1;
} rs_axis_param;

/* Taps of output index o on one axis: source indices (clamped to the
 * axis) and weights; returns their number (1 nearest, 2 linear, 4 cubic).
 * *outside: the extrapolation value (tf_crop_and_resize). */
KILN_SAMPLE_FN int rs_taps(const rs_axis_param *p, int64_t o, int64_t *ix, double *w,
                           int *outside) {
    const int64_t in = p->in, out = p->out;
    const double scale = p->scale, len = p->len, roi0 = p->roi0, roi1 = p->roi1;
    double x;
    *outside = 0;
    switch (p->ctm) {
    case RS_ASYMMETRIC: x = o / scale; break;
    case RS_PYTORCH_HALF_PIXEL: x = len > 1 ? (o + 0.5) / scale - 0.5 : 0.0; break;
    case RS_TF_HALF_PIXEL_FOR_NN: x = (o + 0.5) / scale; break;
    case RS_ALIGN_CORNERS: x = len == 1 ? 0.0 : (double)o * (double)(in - 1) / (len - 1); break;
    case RS_TF_CROP_AND_RESIZE:
        x = len > 1 ? roi0 * (in - 1) + (double)o * (roi1 - roi0) * (in - 1) / (len - 1)
                    : 0.5 * (roi0 + roi1) * (in - 1);
        if (x < 0 || x > (double)(in - 1)) *outside = 1;
        break;
    case RS_HALF_PIXEL_SYMMETRIC: {
        double adj = (double)out / (scale * (double)in);
        double c = (double)in / 2.0 * (1.0 - adj);
        x = c + ((o + 0.5) / scale - 0.5);
        break;
    }
    default: x = (o + 0.5) / scale - 0.5; break;
    }
    double fl = floor(x);
    int64_t i0 = (int64_t)fl;
    double r = x - fl;
    if (p->mode == RS_NEAREST) {
        int64_t n = i0;
        if (r != 0.0) {
            switch (p->nearest_mode) {
            case RS_ROUND_PREFER_CEIL: n = r < 0.5 ? i0 : i0 + 1; break;
            case RS_FLOOR: n = i0; break;
            case RS_CEIL: n = i0 + 1; break;
            case RS_SIMPLE: n = scale < 1.0 ? i0 + 1 : i0; break;
            default: n = r <= 0.5 ? i0 : i0 + 1; break;
            }
        }
        ix[0] = rs_clamp(n, in);
        w[0] = 1.0;
        return 1;
    }
    if (p->mode == RS_LINEAR) {
        ix[0] = rs_clamp(i0, in);
        ix[1] = rs_clamp(i0 + 1, in);
        w[0] = 1.0 - r;
        w[1] = r;
        return 2;
    }
    double sum = 0;
    for (int t = 0; t < 4; t++) {
        int64_t s = i0 - 1 + t;
        w[t] = rs_cubic_w(r, p->cubic_a, t);
        if (p->exclude_outside && (s < 0 || s >= in)) w[t] = 0;
        sum += w[t];
        ix[t] = rs_clamp(s, in);
    }
    if (p->exclude_outside && sum != 0)
        for (int t = 0; t < 4; t++)
            w[t] /= sum;
    return 4;
}

#endif
