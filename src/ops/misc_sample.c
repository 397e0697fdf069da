/* misc_sample.c -- ops that sample an image at computed coordinates:
 * GridSample (opset 16, 4-D) and RoiAlign (opset 10/16). float32/float64
 * (computed in double for float64, float for float32 through double
 * loads/stores of the generic helpers where needed). */
#include "ops/op.h"
#include "ops/spatial_attrs.h"
#include "ops/spatial_sample.h"

#include <math.h>

/* ---- GridSample ---------------------------------------------------------------
 * X [N, C, H, W], grid [N, Ho, Wo, 2] with (x, y) normalized to [-1, 1] ->
 * Y [N, C, Ho, Wo]. Modes bilinear, nearest, bicubic (A = -0.75); padding
 * zeros, border, reflection; align_corners. */

/* kiln_gridsample_attrs: ops/spatial_attrs.h; GS_* and the sampling
 * arithmetic: ops/spatial_sample.h */

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

static kiln_status gs_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_gridsample_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "mode", at->mode, GS_BILINEAR, GS_BICUBIC));
    KILN_TRY(kiln__check_attr(op, node, "padding_mode", at->padding_mode, GS_ZEROS, GS_REFLECTION));
    return kiln__check_attr(op, node, "align_corners", at->align_corners, 0, 1);
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
                    double v = gs_sample(x->data, x->dtype == KILN_DTYPE_FLOAT64,
                                         (n * C + c) * H * W, H, W, fx, fy, at->mode, pad, align);
                    kiln__store_f64(y->dtype, y->data, ((n * C + c) * Ho + oh) * Wo + ow, v);
                }
            }
    return KILN_OK;
}

const kiln_op_def kiln_op_GridSample = {
    .name = "GridSample", .domain = "", .since = 16,
    .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_gridsample_attrs),
    .import = gs_import, .validate = gs_validate, .infer = gs_infer, .cpu = gs_cpu,
};

/* ---- RoiAlign -------------------------------------------------------------------
 * X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2), batch_indices [R] ->
 * [R, C, output_height, output_width]. Each bin averages (or takes the max
 * of) sampling_ratio^2 bilinear samples (adaptive when 0). Mode max follows
 * ONNX Runtime: the max over samples of the largest weighted corner. */

/* kiln_roialign_attrs: ops/spatial_attrs.h */

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
    return KILN_OK;
}

/* output_height and output_width >= 1 (the size limit is kiln__infer's);
 * sampling_ratio in 0..65536, the bound the adaptive grid has too (more
 * samples per bin would make the loops run for days, and their count
 * overflow); the modes 0 or 1 */
static kiln_status roi_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_roialign_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "output_height", at->out_h, 1, KILN_MAX_TENSOR_BYTES));
    KILN_TRY(kiln__check_attr(op, node, "output_width", at->out_w, 1, KILN_MAX_TENSOR_BYTES));
    KILN_TRY(kiln__check_attr(op, node, "sampling_ratio", at->sampling_ratio, 0, 65536));
    KILN_TRY(kiln__check_attr(op, node, "coordinate_transformation_mode", at->half_pixel, 0, 1));
    return kiln__check_attr(op, node, "mode", at->max_mode, 0, 1);
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
        roi_box bx = roi_box_make(kiln__load_f64(rois->dtype, rois->data, r * 4 + 0),
                                  kiln__load_f64(rois->dtype, rois->data, r * 4 + 1),
                                  kiln__load_f64(rois->dtype, rois->data, r * 4 + 2),
                                  kiln__load_f64(rois->dtype, rois->data, r * 4 + 3),
                                  at->spatial_scale, at->half_pixel, PH, PW, at->sampling_ratio);
        for (int64_t ph = 0; ph < PH; ph++)
            for (int64_t pw = 0; pw < PW; pw++)
                for (int64_t c = 0; c < C; c++) {
                    int64_t base = (b * C + c) * H * W;
                    double acc = roi_bin(x->data, x->dtype == KILN_DTYPE_FLOAT64, base, H, W, &bx,
                                         ph, pw, at->max_mode);
                    kiln__store_f64(y->dtype, y->data, ((r * C + c) * PH + ph) * PW + pw, acc);
                }
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_RoiAlign = {
    .name = "RoiAlign", .domain = "", .since = 10,
    .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_roialign_attrs),
    .import = roi_import, .validate = roi_validate, .infer = roi_infer, .cpu = roi_cpu,
};
