/* tensor_resize.c -- Resize (opset 10, 11, 13) and Upsample (opset 1-9),
 * which is normalized to the same attributes and kernel.
 *
 * Every axis gets a table mapping each output index to up to 4 source taps
 * (index clamped to the edge, weight) computed from the coordinate
 * transformation; the kernel combines the taps of all axes. Nearest mode
 * moves bytes only, so it works for every dtype. */
#include "ops/tensor_internal.h"

#include <math.h>

static kiln_status rs_mode(kiln_import_ctx *ic, const char *m, int32_t *out) {
    if (!strcmp(m, "nearest"))
        *out = RS_NEAREST;
    else if (!strcmp(m, "linear") || !strcmp(m, "bilinear"))
        *out = RS_LINEAR;
    else if (!strcmp(m, "cubic"))
        *out = RS_CUBIC;
    else
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': mode '%s' is not supported",
                         kiln_import_node_name(ic), m);
    return KILN_OK;
}

static kiln_status resize_import(kiln_import_ctx *ic, void *attrs) {
    kiln_resize_attrs *at = (kiln_resize_attrs *)attrs;
    int64_t opset = kiln_import_opset(ic);
    KILN_TRY(rs_mode(ic, kiln_attr_string(ic, "mode", "nearest"), &at->mode));
    at->cubic_coeff_a = kiln_attr_float(ic, "cubic_coeff_a", -0.75f);
    at->exclude_outside = kiln_attr_int(ic, "exclude_outside", 0) != 0;
    at->extrapolation_value = kiln_attr_float(ic, "extrapolation_value", 0.0f);
    if (opset < 11) {
        at->ctm = RS_ASYMMETRIC;
        at->nearest_mode = RS_SIMPLE;
        at->in_roi = -1;
        at->in_scales = 1;
        at->in_sizes = -1;
        if (at->mode == RS_CUBIC)
            return KILN_IMPORT_FAIL(ic, "mode 'cubic' needs opset 11");
        return KILN_OK;
    }
    at->in_roi = 1;
    at->in_scales = 2;
    at->in_sizes = 3;
    static const char *const ctms[] = {"half_pixel",           "asymmetric",
                                       "pytorch_half_pixel",   "tf_half_pixel_for_nn",
                                       "align_corners",        "tf_crop_and_resize",
                                       "half_pixel_symmetric"};
    const char *c = kiln_attr_string(ic, "coordinate_transformation_mode", "half_pixel");
    at->ctm = -1;
    for (int i = 0; i < (int)(sizeof ctms / sizeof ctms[0]); i++)
        if (!strcmp(c, ctms[i])) at->ctm = i;
    if (at->ctm < 0)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (Resize): coordinate_transformation_mode '%s' is not supported",
                         kiln_import_node_name(ic), c);
    static const char *const nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    const char *nm = kiln_attr_string(ic, "nearest_mode", "round_prefer_floor");
    at->nearest_mode = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(nm, nms[i])) at->nearest_mode = i;
    if (at->nearest_mode < 0)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Resize): nearest_mode '%s' is not supported",
                         kiln_import_node_name(ic), nm);
    if (kiln_attr_has(ic, "antialias") && kiln_attr_int(ic, "antialias", 0) != 0)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Resize): antialias is not supported",
                         kiln_import_node_name(ic));
    if (kiln_attr_has(ic, "axes"))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Resize): attribute 'axes' is not supported",
                         kiln_import_node_name(ic));
    const char *kar = kiln_attr_string(ic, "keep_aspect_ratio_policy", "stretch");
    if (strcmp(kar, "stretch"))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (Resize): keep_aspect_ratio_policy '%s' is not supported",
                         kiln_import_node_name(ic), kar);
    return KILN_OK;
}

static kiln_status upsample_import(kiln_import_ctx *ic, void *attrs) {
    kiln_resize_attrs *at = (kiln_resize_attrs *)attrs;
    int64_t opset = kiln_import_opset(ic);
    KILN_TRY(rs_mode(ic, kiln_attr_string(ic, "mode", "nearest"), &at->mode));
    if (at->mode == RS_CUBIC) return KILN_IMPORT_FAIL(ic, "mode 'cubic' is not valid for Upsample");
    at->ctm = RS_ASYMMETRIC;
    at->nearest_mode = RS_SIMPLE;
    at->cubic_coeff_a = -0.75f;
    at->in_roi = -1;
    at->in_scales = 1;
    at->in_sizes = -1;
    if (opset >= 9) return KILN_OK;
    float sc[KILN_MAX_RANK];
    int n;
    if (opset >= 7) {
        n = kiln_attr_floats(ic, "scales", sc, KILN_MAX_RANK);
        if (n < 0) return KILN_IMPORT_FAIL(ic, "attribute 'scales' is required");
        if (n > KILN_MAX_RANK) return KILN_IMPORT_FAIL(ic, "attribute 'scales' has %d values", n);
    } else { /* Upsample-1: height_scale/width_scale on NCHW */
        n = 4;
        sc[0] = sc[1] = 1.0f;
        sc[2] = kiln_attr_float(ic, "height_scale", 1.0f);
        sc[3] = kiln_attr_float(ic, "width_scale", 1.0f);
    }
    int64_t dims[1] = {n};
    return kiln_import_set_const_input(ic, 1, KILN_DTYPE_FLOAT32, 1, dims, sc);
}

/* Input `idx` if present and non-empty. */
static const kiln_tinfo *rs_info(const kiln_infer_args *a, int idx) {
    if (idx < 0 || idx >= a->n_in || !a->in[idx]) return NULL;
    const kiln_tinfo *t = a->in[idx];
    if (t->rank == 1 && t->dims[0] == 0) return NULL;
    return t;
}

static const kiln_tensor *rs_tensor(const kiln_kernel_args *a, int idx) {
    if (idx < 0 || idx >= a->n_in || !a->in[idx]) return NULL;
    const kiln_tensor *t = a->in[idx];
    if (kiln__tensor_numel(t) == 0) return NULL;
    return t;
}

/* Output dim from an input dim and a scale (roi range for crop-and-resize). */
static int64_t rs_out_dim(int64_t in, double scale, double roi_range) {
    double v = (double)in * roi_range * scale;
    if (!(v >= 0) || v > 1e15) return -1;
    return (int64_t)floor(v); /* floor, like the reference */
}

static kiln_status resize_infer(const kiln_infer_args *a) {
    const kiln_resize_attrs *at = (const kiln_resize_attrs *)a->attrs;
    const kiln_tinfo *x = a->in[0];
    kiln_tinfo *y = a->out[0];
    const kiln_tinfo *sizes = rs_info(a, at->in_sizes), *scales = rs_info(a, at->in_scales),
                     *roi = rs_info(a, at->in_roi);
    y->dtype = x->dtype;
    y->rank = x->rank;
    if (at->mode != RS_NEAREST && !kiln__dtype_is_float(x->dtype) && !kiln__dtype_is_int(x->dtype))
        return KILN_TX_FAIL(KILN_ERR_UNSUPPORTED, a, "dtype %s is not supported in this mode",
                            kiln_dtype_name(x->dtype));
    if (!sizes && !scales) return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "one of scales or sizes is required");
    if (sizes && scales && a->runtime)
        return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "only one of scales and sizes may be given");
    const kiln_tinfo *v = sizes ? sizes : scales;
    if (v->rank != 1 && v->rank >= 0)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "%s must be 1-D", sizes ? "sizes" : "scales");
    if (sizes && !kiln__dtype_is_int(sizes->dtype))
        return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "sizes must be int64");
    if (!sizes && !kiln__dtype_is_float(scales->dtype))
        return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "scales must be float");
    if (x->rank < 0) {
        if (v->rank == 1 && v->dims[0] >= 0) {
            y->rank = (int)v->dims[0];
            for (int k = 0; k < y->rank; k++) y->dims[k] = KILN_DIM_UNKNOWN;
        }
        return KILN_OK;
    }
    if (v->rank == 1 && v->dims[0] >= 0 && v->dims[0] != x->rank)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "%s has %lld entries for an input of rank %d",
                            sizes ? "sizes" : "scales", (long long)v->dims[0], x->rank);
    /* before the loop below reads roi[k + rank] */
    if (at->ctm == RS_TF_CROP_AND_RESIZE && roi && roi->rank >= 0 &&
        (roi->rank != 1 || (roi->dims[0] >= 0 && roi->dims[0] != 2 * x->rank))) {
        char sh[160];
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "roi has shape %s, expected [%d]",
                            kiln__shape_str(roi->rank, roi->dims, sh, sizeof sh), 2 * x->rank);
    }
    for (int k = 0; k < x->rank; k++) {
        if (!v->data) {
            y->dims[k] = KILN_DIM_UNKNOWN;
            continue;
        }
        if (sizes) {
            y->dims[k] = kiln__tinfo_int(sizes, k);
            if (y->dims[k] < 0)
                return KILN_TX_FAIL(KILN_ERR_MODEL, a, "sizes has negative entry %lld",
                                    (long long)y->dims[k]);
            continue;
        }
        double s = kiln__load_f64(scales->dtype, scales->data, k);
        if (!(s > 0)) return KILN_TX_FAIL(KILN_ERR_MODEL, a, "scale %g must be positive", s);
        double range = 1.0;
        if (at->ctm == RS_TF_CROP_AND_RESIZE && roi) {
            if (!roi->data) {
                y->dims[k] = KILN_DIM_UNKNOWN;
                continue;
            }
            range = kiln__load_f64(roi->dtype, roi->data, k + x->rank) -
                    kiln__load_f64(roi->dtype, roi->data, k);
        }
        if (x->dims[k] < 0) {
            y->dims[k] = (s == 1.0 && range == 1.0) ? x->dims[k] : KILN_DIM_UNKNOWN;
            continue;
        }
        y->dims[k] = rs_out_dim(x->dims[k], s, range);
        if (y->dims[k] < 0) return KILN_TX_FAIL(KILN_ERR_MODEL, a, "invalid scale %g", s);
    }
    return KILN_OK;
}

/* Enum fields within their enums; the input indices of roi, scales and
 * sizes -1 (absent) or an input Resize can have (0..3). */
static kiln_status resize_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_resize_attrs *at = (const kiln_resize_attrs *)attrs;
    KILN_TRY(kiln__check_attr(op, node, "mode", at->mode, RS_NEAREST, RS_CUBIC));
    KILN_TRY(kiln__check_attr(op, node, "coordinate_transformation_mode", at->ctm, RS_HALF_PIXEL,
                              RS_HALF_PIXEL_SYMMETRIC));
    KILN_TRY(kiln__check_attr(op, node, "nearest_mode", at->nearest_mode, RS_ROUND_PREFER_FLOOR,
                              RS_SIMPLE));
    KILN_TRY(kiln__check_attr(op, node, "exclude_outside", at->exclude_outside, 0, 1));
    const int32_t idx[3] = {at->in_roi, at->in_scales, at->in_sizes};
    for (int i = 0; i < 3; i++)
        KILN_TRY(kiln__check_attr(op, node, "input index", idx[i], -1, 3));
    return KILN_OK;
}

/* ---- kernel --------------------------------------------------------------- */

typedef struct rs_axis {
    int T;           /* taps per output index (1 for trivial axes / nearest) */
    int64_t *idx;    /* [out * T] source indices, clamped */
    double *w;       /* [out * T] */
    uint8_t *outside;/* [out] extrapolate (tf_crop_and_resize) */
} rs_axis;

/* Fills the table of one axis. Returns false if the axis is the identity. */
static bool rs_axis_table(const kiln_resize_attrs *at, int64_t in, int64_t out, double scale,
                          double len, double roi0, double roi1, rs_axis *ax) {
    int T = at->mode == RS_NEAREST ? 1 : (at->mode == RS_LINEAR ? 2 : 4);
    ax->T = T;
    rs_axis_param p = {.mode = at->mode, .ctm = at->ctm, .nearest_mode = at->nearest_mode,
                       .exclude_outside = at->exclude_outside, .cubic_a = at->cubic_coeff_a,
                       .in = in, .out = out, .scale = scale, .len = len, .roi0 = roi0, .roi1 = roi1};
    bool identity = in == out;
    for (int64_t o = 0; o < out; o++) {
        int64_t *ix = ax->idx + o * T;
        double *w = ax->w + o * T;
        int outside = 0;
        rs_taps(&p, o, ix, w, &outside);
        ax->outside[o] = (uint8_t)outside;
        if (at->mode == RS_NEAREST) {
            if (ix[0] != o || outside) identity = false;
        } else if (at->mode == RS_LINEAR) {
            if (outside || !((ix[0] == o && w[1] == 0.0) || (ix[1] == o && w[0] == 0.0)))
                identity = false;
        } else {
            bool ok = !outside;
            for (int t = 0; t < 4; t++)
                if (w[t] != 0.0 && (ix[t] != o || w[t] != 1.0)) ok = false;
            if (!ok) identity = false;
        }
    }
    return !identity;
}

#define RS_MAX_PAIRS 1024

typedef struct rs_ctx {
    const kiln_resize_attrs *at;
    int r;
    size_t es;
    kiln_dtype dt;
    const char *x;
    char *y;
    const int64_t *xd, *yd;
    int64_t xst[KILN_MAX_RANK];
    rs_axis ax[KILN_MAX_RANK];
    bool active[KILN_MAX_RANK];
    uint8_t extrap[8];
} rs_ctx;

static void rs_rows(void *vctx, int64_t begin, int64_t end) {
    const rs_ctx *c = (const rs_ctx *)vctx;
    int r = c->r;
    size_t es = c->es;
    int64_t W = c->yd[r - 1];
    const rs_axis *la = &c->ax[r - 1];
    bool lact = c->active[r - 1];
    int64_t poff[RS_MAX_PAIRS];
    double pw[RS_MAX_PAIRS];
    for (int64_t row = begin; row < end; row++) {
        /* taps of the outer axes for this row */
        int np = 1;
        bool outside = false;
        poff[0] = 0;
        pw[0] = 1.0;
        int64_t rem = row;
        int64_t oidx[KILN_MAX_RANK];
        for (int k = r - 2; k >= 0; k--) {
            oidx[k] = rem % c->yd[k];
            rem /= c->yd[k];
        }
        for (int k = 0; k < r - 1; k++) {
            int64_t o = oidx[k];
            if (!c->active[k]) {
                for (int p = 0; p < np; p++) poff[p] += o * c->xst[k];
                continue;
            }
            const rs_axis *A = &c->ax[k];
            if (A->outside[o]) outside = true;
            int n2 = 0;
            for (int p = 0; p < np; p++)
                for (int t = 0; t < A->T; t++) {
                    double w = A->w[o * A->T + t];
                    if (w == 0.0 && A->T > 1) continue;
                    poff[np + n2] = poff[p] + A->idx[o * A->T + t] * c->xst[k];
                    pw[np + n2] = pw[p] * w;
                    n2++;
                }
            memmove(poff, poff + np, sizeof(int64_t) * (size_t)n2);
            memmove(pw, pw + np, sizeof(double) * (size_t)n2);
            np = n2;
        }
        char *dst = c->y + (size_t)(row * W) * es;
        if (outside) {
            kiln__tx_fill(dst, W, c->extrap, es);
            continue;
        }
        if (c->at->mode == RS_NEAREST) {
            /* one pair, one tap: a byte copy */
            const char *src = c->x + (size_t)poff[0] * es;
            if (!lact) {
                memcpy(dst, src, (size_t)W * es);
                continue;
            }
            bool crop = c->at->ctm == RS_TF_CROP_AND_RESIZE;
            if (!crop && es == 4) {
                for (int64_t j = 0; j < W; j++) ((uint32_t *)dst)[j] = ((const uint32_t *)src)[la->idx[j]];
            } else if (!crop && es == 2) {
                for (int64_t j = 0; j < W; j++) ((uint16_t *)dst)[j] = ((const uint16_t *)src)[la->idx[j]];
            } else if (!crop && es == 1) {
                for (int64_t j = 0; j < W; j++) ((uint8_t *)dst)[j] = ((const uint8_t *)src)[la->idx[j]];
            } else {
                for (int64_t j = 0; j < W; j++) {
                    const char *s = la->outside[j] ? (const char *)c->extrap : src + (size_t)la->idx[j] * es;
                    memcpy(dst + (size_t)j * es, s, es);
                }
            }
            continue;
        }
        int T = lact ? la->T : 1;
        if (c->dt == KILN_DTYPE_FLOAT32) {
            const float *xs = (const float *)c->x;
            float *yd = (float *)dst;
            for (int64_t j = 0; j < W; j++) {
                if (lact && la->outside[j]) {
                    memcpy(&yd[j], c->extrap, 4);
                    continue;
                }
                double acc = 0;
                for (int t = 0; t < T; t++) {
                    int64_t s = lact ? la->idx[j * T + t] : j;
                    double wl = lact ? la->w[j * T + t] : 1.0;
                    if (wl == 0.0) continue;
                    double part = 0;
                    for (int p = 0; p < np; p++) part += pw[p] * xs[poff[p] + s];
                    acc += wl * part;
                }
                yd[j] = (float)acc;
            }
        } else {
            for (int64_t j = 0; j < W; j++) {
                if (lact && la->outside[j]) {
                    memcpy(dst + (size_t)j * es, c->extrap, es);
                    continue;
                }
                double acc = 0;
                for (int t = 0; t < T; t++) {
                    int64_t s = lact ? la->idx[j * T + t] : j;
                    double wl = lact ? la->w[j * T + t] : 1.0;
                    if (wl == 0.0) continue;
                    double part = 0;
                    for (int p = 0; p < np; p++) part += pw[p] * kiln__load_f64(c->dt, c->x, poff[p] + s);
                    acc += wl * part;
                }
                kiln__store_f64(c->dt, dst, j, acc);
            }
        }
    }
}

static kiln_status resize_cpu(const kiln_kernel_args *a) {
    const kiln_resize_attrs *at = (const kiln_resize_attrs *)a->attrs;
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    const kiln_tensor *sizes = rs_tensor(a, at->in_sizes), *scales = rs_tensor(a, at->in_scales),
                      *roi = rs_tensor(a, at->in_roi);
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    int r = x->rank;
    int64_t ny = kiln__tensor_numel(y);
    if (ny == 0) return KILN_OK;
    if (kiln__tensor_numel(x) == 0)
        return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "cannot resize an empty tensor to a non-empty one");
    if (r == 0) {
        memcpy(y->data, x->data, es);
        return KILN_OK;
    }
    rs_ctx c;
    memset(&c, 0, sizeof c);
    c.at = at;
    c.r = r;
    c.es = es;
    c.dt = x->dtype;
    c.x = (const char *)x->data;
    c.y = (char *)y->data;
    c.xd = x->dims;
    c.yd = y->dims;
    kiln__tx_strides(r, x->dims, c.xst);
    kiln__store_f64(x->dtype, c.extrap, 0, at->extrapolation_value);
    size_t total = 0;
    for (int k = 0; k < r; k++) total += (size_t)y->dims[k];
    int64_t *ibuf = (int64_t *)kiln__malloc(sizeof(int64_t) * total * 4);
    double *wbuf = (double *)kiln__malloc(sizeof(double) * total * 4);
    uint8_t *obuf = (uint8_t *)kiln__malloc(total);
    if (!ibuf || !wbuf || !obuf) {
        kiln__free(ibuf);
        kiln__free(wbuf);
        kiln__free(obuf);
        return KILN_TX_FAIL0(KILN_ERR_OUT_OF_MEMORY, a, "out of memory");
    }
    size_t off = 0;
    int64_t pairs = 1;
    for (int k = 0; k < r; k++) {
        bool by_sizes = sizes || !scales;
        double scale = by_sizes ? (double)y->dims[k] / (double)x->dims[k]
                                : kiln__load_f64(scales->dtype, scales->data, k);
        double roi0 = 0, roi1 = 1;
        if (at->ctm == RS_TF_CROP_AND_RESIZE && roi) {
            roi0 = kiln__load_f64(roi->dtype, roi->data, k);
            roi1 = kiln__load_f64(roi->dtype, roi->data, k + r);
        }
        double len = by_sizes ? (double)y->dims[k] : (double)x->dims[k] * scale * (roi1 - roi0);
        c.ax[k].idx = ibuf + off * 4;
        c.ax[k].w = wbuf + off * 4;
        c.ax[k].outside = obuf + off;
        off += (size_t)y->dims[k];
        c.active[k] = rs_axis_table(at, x->dims[k], y->dims[k], scale, len, roi0, roi1, &c.ax[k]);
        if (c.active[k] && k < r - 1) pairs *= c.ax[k].T;
    }
    kiln_status st = KILN_OK;
    if (pairs * 2 > RS_MAX_PAIRS) {
        st = KILN_TX_FAIL0(KILN_ERR_UNSUPPORTED, a, "too many resized axes for this mode");
    } else {
        int64_t rows = ny / y->dims[r - 1];
        int64_t grain = 4096 / (y->dims[r - 1] * (at->mode == RS_NEAREST ? 1 : 8) + 1) + 1;
        kiln__parallel_for(a->pool, rows, grain, rs_rows, &c);
    }
    kiln__free(ibuf);
    kiln__free(wbuf);
    kiln__free(obuf);
    return st;
}

const kiln_op_def kiln_op_Resize = {
    .name = "Resize", .domain = "", .since = 10,
    .min_inputs = 1, .max_inputs = 4, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_resize_attrs),
    .host_inputs = (1u << 1) | (1u << 2) | (1u << 3),
    .import = resize_import, .validate = resize_validate, .infer = resize_infer, .cpu = resize_cpu,
};

const kiln_op_def kiln_op_Upsample = {
    .name = "Upsample", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_resize_attrs),
    .host_inputs = 1u << 1,
    .import = upsample_import, .validate = resize_validate, .infer = resize_infer, .cpu = resize_cpu,
};
