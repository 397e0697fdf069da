/* misc_sample.c -- ops that sample an image at computed coordinates:
 * GridSample (opset 16, 4-D) and RoiAlign (opset 10/16). float32/float64
 * (computed in double for float64, float for float32 through double
 * loads/stores of the generic helpers where needed). */
#include "ops/op.h"

#include <math.h>

/* ---- GridSample ---------------------------------------------------------------
 * X [N, C, H, W], grid [N, Ho, Wo, 2] with (x, y) normalized to [-1, 1] ->
 * Y [N, C, Ho, Wo]. Modes bilinear, nearest, bicubic (A = -0.75); padding
 * zeros, border, reflection; align_corners. */

enum { GS_BILINEAR = 0, GS_NEAREST = 1, GS_BICUBIC = 2 };
enum { GS_ZEROS = 0, GS_BORDER = 1, GS_REFLECTION = 2 };

typedef struct kiln_gridsample_attrs {
    int32_t mode;
    int32_t padding_mode;
    int32_t align_corners;
} kiln_gridsample_attrs;

static kiln_status gs_import(kiln_import_ctx *ic, void *attrs) {
    kiln_gridsample_attrs *at = attrs;
    const char *m = kiln_attr_string(ic, "mode", "bilinear");
    if (!strcmp(m, "bilinear") || !strcmp(m, "linear")) at->mode = GS_BILINEAR;
    else if (!strcmp(m, "nearest")) at->mode = GS_NEAREST;
    else if (!strcmp(m, "bicubic") || !strcmp(m, "cubic")) at->mode = GS_BICUBIC;
    else return KILN_IMPORT_FAIL(ic, "attribute 'mode' = '%s' is not supported", m);
    const char *p = kiln_attr_string(ic, "padding_mode", "zeros");
    if (!strcmp(p, "zeros")) at->padding_mode = GS_ZEROS;
    else if (!strcmp(p, "border")) at->padding_mode = GS_BORDER;
    else if (!strcmp(p, "reflection")) at->padding_mode = GS_REFLECTION;
    else return KILN_IMPORT_FAIL(ic, "attribute 'padding_mode' = '%s' is not supported", p);
    at->align_corners = kiln_attr_int(ic, "align_corners", 0) != 0;
    return KILN_OK;
}

static kiln_status gs_infer(const kiln_infer_args *a) {
    const char *nm = a->node_name ? a->node_name : "?";
    const kiln_tinfo *x = a->in[0], *g = a->in[1];
    kiln_tinfo *y = a->out[0];
    if (x->dtype != KILN_DTYPE_FLOAT32 && x->dtype != KILN_DTYPE_FLOAT64)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (GridSample): dtype %s is not supported",
                         nm, kiln_dtype_name(x->dtype));
    if (!kiln__dtype_is_float(g->dtype))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (GridSample): grid must be floating", nm);
    y->dtype = x->dtype;
    y->data = NULL;
    y->rank = 4;
    if ((x->rank >= 0 && x->rank != 4) || (g->rank >= 0 && g->rank != 4))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (GridSample): only 4-D input [N, C, H, W] and grid "
                         "[N, Ho, Wo, 2] are supported", nm);
    if (g->rank == 4 && g->dims[3] >= 0 && g->dims[3] != 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (GridSample): grid's last dimension must be 2",
                         nm);
    if (x->rank == 4 && g->rank == 4 && x->dims[0] >= 0 && g->dims[0] >= 0 && x->dims[0] != g->dims[0])
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (GridSample): batch of input (%lld) and grid "
                         "(%lld) differ", nm, (long long)x->dims[0], (long long)g->dims[0]);
    y->dims[0] = x->rank == 4 ? x->dims[0] : (g->rank == 4 ? g->dims[0] : KILN_DIM_UNKNOWN);
    y->dims[1] = x->rank == 4 ? x->dims[1] : KILN_DIM_UNKNOWN;
    y->dims[2] = g->rank == 4 ? g->dims[1] : KILN_DIM_UNKNOWN;
    y->dims[3] = g->rank == 4 ? g->dims[2] : KILN_DIM_UNKNOWN;
    return KILN_OK;
}

static double gs_unnormalize(double c, int64_t size, bool align) {
    return align ? (c + 1.0) / 2.0 * (double)(size - 1) : ((c + 1.0) * (double)size - 1.0) / 2.0;
}

static double gs_clip(double c, int64_t size) {
    return fmin((double)(size - 1), fmax(c, 0.0));
}

static double gs_reflect(double c, double twice_low, double twice_high) {
    if (twice_low == twice_high) return 0.0;
    double mn = twice_low / 2.0, span = (twice_high - twice_low) / 2.0;
    c = fabs(c - mn);
    double extra = fmod(c, span);
    double flips = floor(c / span);
    return fmod(flips, 2.0) == 0.0 ? extra + mn : span - extra + mn;
}

static double gs_pad(double c, int64_t size, int pad, bool align) {
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
static int64_t gs_idx(double v) {
    if (!(v >= -1.0 && v < 4611686018427387904.0)) return -1;
    return (int64_t)v;
}

static double gs_at(const kiln_tensor *x, int64_t base, int64_t H, int64_t W, int64_t iy,
                    int64_t ix) {
    if (iy < 0 || iy >= H || ix < 0 || ix >= W) return 0.0;
    int64_t e = base + iy * W + ix;
    return x->dtype == KILN_DTYPE_FLOAT32 ? ((const float *)x->data)[e]
                                          : ((const double *)x->data)[e];
}

static void gs_cubic_coeffs(double t, double *w) {
    const double A = -0.75;
    double x1 = t + 1.0, x2 = t, x3 = 1.0 - t, x4 = 2.0 - t;
    w[0] = ((A * x1 - 5.0 * A) * x1 + 8.0 * A) * x1 - 4.0 * A;
    w[1] = ((A + 2.0) * x2 - (A + 3.0)) * x2 * x2 + 1.0;
    w[2] = ((A + 2.0) * x3 - (A + 3.0)) * x3 * x3 + 1.0;
    w[3] = ((A * x4 - 5.0 * A) * x4 + 8.0 * A) * x4 - 4.0 * A;
}

static kiln_status gs_cpu(const kiln_kernel_args *a) {
    const kiln_gridsample_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0], *g = a->in[1];
    kiln_tensor *y = a->out[0];
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t Ho = g->dims[1], Wo = g->dims[2];
    bool align = at->align_corners != 0;
    int pad = at->padding_mode;
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < Ho; oh++)
            for (int64_t ow = 0; ow < Wo; ow++) {
                int64_t ge = ((n * Ho + oh) * Wo + ow) * 2;
                double gx = kiln__load_f64(g->dtype, g->data, ge);
                double gy = kiln__load_f64(g->dtype, g->data, ge + 1);
                double fx = gs_unnormalize(gx, W, align), fy = gs_unnormalize(gy, H, align);
                for (int64_t c = 0; c < C; c++) {
                    int64_t base = (n * C + c) * H * W;
                    double v = 0.0;
                    if (at->mode == GS_BICUBIC) {
                        double x0 = floor(fx), y0 = floor(fy);
                        double wx[4], wy[4];
                        gs_cubic_coeffs(fx - x0, wx);
                        gs_cubic_coeffs(fy - y0, wy);
                        for (int i = 0; i < 4; i++) {
                            double row = 0.0;
                            for (int j = 0; j < 4; j++) {
                                double px = gs_pad(x0 - 1 + j, W, pad, align);
                                double py = gs_pad(y0 - 1 + i, H, pad, align);
                                row += wx[j] * gs_at(x, base, H, W, gs_idx(py), gs_idx(px));
                            }
                            v += wy[i] * row;
                        }
                    } else {
                        double ix = gs_pad(fx, W, pad, align), iy = gs_pad(fy, H, pad, align);
                        if (at->mode == GS_NEAREST) {
                            v = gs_at(x, base, H, W, gs_idx(nearbyint(iy)), gs_idx(nearbyint(ix)));
                        } else {
                            double x0 = floor(ix), y0 = floor(iy);
                            double tx = ix - x0, ty = iy - y0;
                            int64_t X0 = gs_idx(x0), Y0 = gs_idx(y0);
                            if (X0 < 0 && x0 != -1.0) X0 = -2; /* both taps outside */
                            if (Y0 < 0 && y0 != -1.0) Y0 = -2;
                            v = (1 - tx) * (1 - ty) * gs_at(x, base, H, W, Y0, X0) +
                                tx * (1 - ty) * gs_at(x, base, H, W, Y0, X0 + 1) +
                                (1 - tx) * ty * gs_at(x, base, H, W, Y0 + 1, X0) +
                                tx * ty * gs_at(x, base, H, W, Y0 + 1, X0 + 1);
                        }
                    }
                    kiln__store_f64(y->dtype, y->data, ((n * C + c) * Ho + oh) * Wo + ow, v);
                }
            }
    return KILN_OK;
}

const kiln_op_def kiln_op_GridSample = {
    .name = "GridSample", .domain = "", .since = 16,
    .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_gridsample_attrs),
    .import = gs_import, .infer = gs_infer, .cpu = gs_cpu,
};

/* ---- RoiAlign -------------------------------------------------------------------
 * X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices [R] ->
 * [R, C, output_height, output_width]. Each bin averages (or takes the max
 * of) sampling_ratio^2 bilinear samples (adaptive when 0). Mode max follows
 * ONNX Runtime: the max over samples of the largest weighted corner. */

typedef struct kiln_roialign_attrs {
    int32_t half_pixel;   /* coordinate_transformation_mode: 1 half_pixel, 0 output_half_pixel */
    int32_t max_mode;
    int64_t out_h, out_w;
    int64_t sampling_ratio;
    float spatial_scale;
    int32_t pad_;
} kiln_roialign_attrs;

static kiln_status roi_import(kiln_import_ctx *ic, void *attrs) {
    kiln_roialign_attrs *at = attrs;
    const char *ctm = kiln_attr_string(ic, "coordinate_transformation_mode",
                                       kiln_import_opset(ic) >= 16 ? "half_pixel" : "output_half_pixel");
    if (!strcmp(ctm, "half_pixel")) at->half_pixel = 1;
    else if (!strcmp(ctm, "output_half_pixel")) at->half_pixel = 0;
    else return KILN_IMPORT_FAIL(ic, "attribute 'coordinate_transformation_mode' = '%s' is not "
                                     "supported", ctm);
    const char *mode = kiln_attr_string(ic, "mode", "avg");
    if (!strcmp(mode, "avg")) at->max_mode = 0;
    else if (!strcmp(mode, "max")) at->max_mode = 1;
    else return KILN_IMPORT_FAIL(ic, "attribute 'mode' = '%s' is not supported", mode);
    at->out_h = kiln_attr_int(ic, "output_height", 1);
    at->out_w = kiln_attr_int(ic, "output_width", 1);
    at->sampling_ratio = kiln_attr_int(ic, "sampling_ratio", 0);
    at->spatial_scale = kiln_attr_float(ic, "spatial_scale", 1.f);
    if (at->out_h < 1 || at->out_w < 1 || at->sampling_ratio < 0)
        return KILN_IMPORT_FAIL(ic, "output_height/output_width must be >= 1 and sampling_ratio >= 0");
    return KILN_OK;
}

static kiln_status roi_infer(const kiln_infer_args *a) {
    const kiln_roialign_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    const kiln_tinfo *x = a->in[0], *rois = a->in[1], *bi = a->in[2];
    kiln_tinfo *y = a->out[0];
    if (x->dtype != KILN_DTYPE_FLOAT32 && x->dtype != KILN_DTYPE_FLOAT64)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (RoiAlign): dtype %s is not supported", nm,
                         kiln_dtype_name(x->dtype));
    if (rois->dtype != x->dtype || !kiln__dtype_is_int(bi->dtype))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (RoiAlign): rois must be %s and batch_indices "
                         "integer", nm, kiln_dtype_name(x->dtype));
    if ((x->rank >= 0 && x->rank != 4) || (rois->rank >= 0 && rois->rank != 2) ||
        (rois->rank == 2 && rois->dims[1] >= 0 && rois->dims[1] != 4) ||
        (bi->rank >= 0 && bi->rank != 1))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (RoiAlign): expected X [N, C, H, W], rois "
                         "[R, 4] and batch_indices [R]", nm);
    int64_t R = rois->rank == 2 ? rois->dims[0] : KILN_DIM_UNKNOWN;
    if (bi->rank == 1 && bi->dims[0] >= 0 && R >= 0 && bi->dims[0] != R)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (RoiAlign): %lld rois but %lld batch indices",
                         nm, (long long)R, (long long)bi->dims[0]);
    y->dtype = x->dtype;
    y->data = NULL;
    y->rank = 4;
    y->dims[0] = R >= 0 ? R : (bi->rank == 1 ? bi->dims[0] : KILN_DIM_UNKNOWN);
    y->dims[1] = x->rank == 4 ? x->dims[1] : KILN_DIM_UNKNOWN;
    y->dims[2] = at->out_h;
    y->dims[3] = at->out_w;
    return KILN_OK;
}

typedef struct roi_pc {
    int64_t p[4];
    double w[4];
} roi_pc;

static kiln_status roi_cpu(const kiln_kernel_args *a) {
    const kiln_roialign_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    const kiln_tensor *x = a->in[0], *rois = a->in[1], *bi = a->in[2];
    kiln_tensor *y = a->out[0];
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t R = rois->dims[0], PH = at->out_h, PW = at->out_w;
    if (H == 0 || W == 0) {
        for (int64_t i = 0; i < R * C * PH * PW; i++) kiln__store_f64(y->dtype, y->data, i, 0.0);
        return KILN_OK;
    }
    for (int64_t r = 0; r < R; r++) {
        int64_t b = kiln__load_i64(bi->dtype, bi->data, r);
        if (b < 0 || b >= N)
            return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                             "node '%s' (RoiAlign): batch index %lld of roi %lld is not in [0, %lld)",
                             nm, (long long)b, (long long)r, (long long)N);
        double off = at->half_pixel ? 0.5 : 0.0, sc = at->spatial_scale;
        double x1 = kiln__load_f64(rois->dtype, rois->data, r * 4 + 0) * sc - off;
        double y1 = kiln__load_f64(rois->dtype, rois->data, r * 4 + 1) * sc - off;
        double x2 = kiln__load_f64(rois->dtype, rois->data, r * 4 + 2) * sc - off;
        double y2 = kiln__load_f64(rois->dtype, rois->data, r * 4 + 3) * sc - off;
        double rw = x2 - x1, rh = y2 - y1;
        if (!at->half_pixel) {
            rw = fmax(rw, 1.0);
            rh = fmax(rh, 1.0);
        }
        double bh = rh / (double)PH, bw = rw / (double)PW;
        /* adaptive sampling: ceil(size / bins), bounded so that absurd (or NaN)
         * rois cannot make the loops explode */
        double ah = ceil(rh / (double)PH), aw = ceil(rw / (double)PW);
        int64_t gh = at->sampling_ratio > 0 ? at->sampling_ratio
                                            : (ah >= 0 ? (int64_t)fmin(ah, 65536.0) : 0);
        int64_t gw = at->sampling_ratio > 0 ? at->sampling_ratio
                                            : (aw >= 0 ? (int64_t)fmin(aw, 65536.0) : 0);
        double count = (double)(gh * gw > 1 ? gh * gw : 1);
        for (int64_t ph = 0; ph < PH; ph++)
            for (int64_t pw = 0; pw < PW; pw++)
                for (int64_t c = 0; c < C; c++) {
                    int64_t base = (b * C + c) * H * W;
                    double acc = 0.0;
                    bool have = false;
                    for (int64_t iy = 0; iy < gh; iy++) {
                        double yy = y1 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
                        for (int64_t ix = 0; ix < gw; ix++) {
                            double xx = x1 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw;
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
                            double v[4];
                            for (int q = 0; q < 4; q++)
                                v[q] = pc.w[q] * kiln__load_f64(x->dtype, x->data, base + pc.p[q]);
                            if (!at->max_mode) {
                                acc += v[0] + v[1] + v[2] + v[3];
                            } else {
                                double m = fmax(fmax(fmax(v[0], v[1]), v[2]), v[3]);
                                acc = have ? fmax(acc, m) : m;
                                have = true;
                            }
                        }
                    }
                    if (!at->max_mode) acc /= count;
                    kiln__store_f64(y->dtype, y->data, ((r * C + c) * PH + ph) * PW + pw, acc);
                }
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_RoiAlign = {
    .name = "RoiAlign", .domain = "", .since = 10,
    .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_roialign_attrs),
    .import = roi_import, .infer = roi_infer, .cpu = roi_cpu,
};
