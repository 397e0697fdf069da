/* misc_quant.c -- linear quantization: QuantizeLinear, DequantizeLinear,
 * DynamicQuantizeLinear. (QLinearMatMul is the nn family's, nn_matmul.c.)
 *
 * Scales are float32. Zero points and quantized data are uint8 or int8
 * (DequantizeLinear also takes int32 with no zero point). Scale and zero
 * point are either per tensor (scalar or 1 element) or per axis (1-D of the
 * size of dimension `axis`, opset 13+). Rounding is half to even. */
#include "ops/op.h"
#include "ops/seq_attrs.h"

#include <math.h>

static bool q8_dtype(kiln_dtype t) { return t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT8; }

static inline float q_round(float v) { return nearbyintf(v); }

static inline int32_t q_clamp(float v, kiln_dtype t) {
    float lo = t == KILN_DTYPE_UINT8 ? 0.f : -128.f;
    float hi = t == KILN_DTYPE_UINT8 ? 255.f : 127.f;
    if (!(v >= lo)) v = lo; /* NaN -> lo */
    if (v > hi) v = hi;
    return (int32_t)v;
}

static inline int32_t q_load(kiln_dtype t, const void *p, int64_t i) {
    switch (t) {
    case KILN_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case KILN_DTYPE_INT8: return ((const int8_t *)p)[i];
    case KILN_DTYPE_INT32: return ((const int32_t *)p)[i];
    default: return 0;
    }
}

static inline void q_store(kiln_dtype t, void *p, int64_t i, int32_t v) {
    if (t == KILN_DTYPE_UINT8) ((uint8_t *)p)[i] = (uint8_t)v;
    else ((int8_t *)p)[i] = (int8_t)v;
}

/* ---- QuantizeLinear / DequantizeLinear ------------------------------- */

static kiln_status qdq_import(kiln_import_ctx *ic, void *attrs) {
    kiln_qdq_attrs *at = attrs;
    if (kiln_attr_has(ic, "saturate") && kiln_attr_int(ic, "saturate", 1) != 1)
        return KILN_IMPORT_FAIL(ic, "attribute 'saturate' = 0 is not supported");
    return kiln_attr_int32(ic, "axis", 1, &at->axis);
}

static kiln_status qdq_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    return kiln__check_attr(op, node, "axis", ((const kiln_qdq_attrs *)attrs)->axis, -KILN_MAX_RANK,
                            KILN_MAX_RANK - 1);
}

/* Checks scale/zero point shapes against x. *axis_out: -1 per tensor, the
 * normalized axis per axis, -2 not known yet (build time). */
static kiln_status qdq_params(const char *nm, const char *opname, int32_t axis, int xr,
                              const int64_t *xd, int sr, const int64_t *sd, int zr,
                              const int64_t *zd, bool has_z, int *axis_out) {
    *axis_out = -1;
    if (sr > 1)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): scale must be a scalar or 1-D, got rank %d",
                         nm, opname, sr);
    int64_t sn = sr < 0 ? -1 : kiln__numel(sr, sd);
    if (sn < 0 || xr < 0) {
        *axis_out = -2;
    } else if (sn != 1) {
        int ax;
        KILN_TRY(kiln__norm_axis(nm, axis, xr, &ax));
        if (xd[ax] >= 0 && sn != xd[ax])
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (%s): scale has %lld elements but axis %d has %lld", nm,
                             opname, (long long)sn, ax, (long long)xd[ax]);
        *axis_out = ax;
    }
    if (has_z && zr >= 0) {
        int64_t zn = kiln__numel(zr, zd);
        if (zr > 1 || (zn >= 0 && sn >= 0 && zn != sn))
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (%s): zero point and scale must have the same shape", nm,
                             opname);
    }
    return KILN_OK;
}

static kiln_status quant_infer(const kiln_infer_args *a) {
    const kiln_qdq_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    const kiln_tinfo *x = a->in[0], *s = a->in[1];
    const kiln_tinfo *z = a->n_in > 2 ? a->in[2] : NULL;
    kiln_tinfo *y = a->out[0];
    bool dq = a->op->code == 1;
    if (dq) {
        if (!q8_dtype(x->dtype) && x->dtype != KILN_DTYPE_INT32)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "node '%s' (DequantizeLinear): input dtype %s is not supported", nm,
                             kiln_dtype_name(x->dtype));
        if (z && z->dtype != x->dtype)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (DequantizeLinear): zero point is %s but input is %s", nm,
                             kiln_dtype_name(z->dtype), kiln_dtype_name(x->dtype));
    } else {
        if (x->dtype != KILN_DTYPE_FLOAT32 && x->dtype != KILN_DTYPE_INT32)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "node '%s' (QuantizeLinear): input dtype %s is not supported", nm,
                             kiln_dtype_name(x->dtype));
        if (z && !q8_dtype(z->dtype))
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "node '%s' (QuantizeLinear): zero point dtype %s is not supported", nm,
                             kiln_dtype_name(z->dtype));
    }
    if (s->dtype != KILN_DTYPE_FLOAT32)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): scale dtype %s is not supported",
                         nm, a->op->name, kiln_dtype_name(s->dtype));
    int ax;
    KILN_TRY(qdq_params(nm, a->op->name, at->axis, x->rank, x->dims, s->rank, s->dims,
                        z ? z->rank : 0, z ? z->dims : NULL, z != NULL, &ax));
    kiln__tinfo_copy_shape(y, x);
    y->data = NULL;
    y->dtype = dq ? KILN_DTYPE_FLOAT32 : (z ? z->dtype : KILN_DTYPE_UINT8);
    return KILN_OK;
}

static kiln_status quant_cpu(const kiln_kernel_args *a) {
    const kiln_qdq_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    const kiln_tensor *x = a->in[0], *s = a->in[1];
    const kiln_tensor *z = a->n_in > 2 ? a->in[2] : NULL;
    kiln_tensor *y = a->out[0];
    bool dq = a->op->code == 1;
    int ax;
    KILN_TRY(qdq_params(nm, a->op->name, at->axis, x->rank, x->dims, s->rank, s->dims,
                        z ? z->rank : 0, z ? z->dims : NULL, z != NULL, &ax));
    int64_t n = kiln__tensor_numel(x);
    int64_t C = 1, inner = 1;
    if (ax >= 0) {
        C = x->dims[ax];
        for (int i = ax + 1; i < x->rank; i++) inner *= x->dims[i];
    }
    const float *sc = s->data;
    for (int64_t i = 0; i < n; i++) {
        int64_t c = ax >= 0 ? (i / inner) % C : 0;
        float scale = sc[c];
        int32_t zp = z ? q_load(z->dtype, z->data, c) : 0;
        if (dq) {
            ((float *)y->data)[i] = (float)(q_load(x->dtype, x->data, i) - zp) * scale;
        } else {
            float v = x->dtype == KILN_DTYPE_FLOAT32 ? ((const float *)x->data)[i]
                                                     : (float)((const int32_t *)x->data)[i];
            q_store(y->dtype, y->data, i, q_clamp(q_round(v / scale) + (float)zp, y->dtype));
        }
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_QuantizeLinear = {
    .name = "QuantizeLinear", .domain = "", .since = 10,
    .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .code = 0, .attr_size = sizeof(kiln_qdq_attrs),
    .import = qdq_import, .validate = qdq_validate, .infer = quant_infer, .cpu = quant_cpu,
};

const kiln_op_def kiln_op_DequantizeLinear = {
    .name = "DequantizeLinear", .domain = "", .since = 10,
    .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .code = 1, .attr_size = sizeof(kiln_qdq_attrs),
    .import = qdq_import, .validate = qdq_validate, .infer = quant_infer, .cpu = quant_cpu,
};

/* ---- DynamicQuantizeLinear ---------------------------------------------
 * x float32 -> y uint8, y_scale float32 scalar, y_zero_point uint8 scalar.
 * The range [min(x), max(x)] is widened to include 0. */

static kiln_status dql_infer(const kiln_infer_args *a) {
    const char *nm = a->node_name ? a->node_name : "?";
    const kiln_tinfo *x = a->in[0];
    if (x->dtype != KILN_DTYPE_FLOAT32)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (DynamicQuantizeLinear): input dtype %s is not supported", nm,
                         kiln_dtype_name(x->dtype));
    kiln__tinfo_copy_shape(a->out[0], x);
    a->out[0]->dtype = KILN_DTYPE_UINT8;
    a->out[0]->data = NULL;
    for (int i = 1; i < 3 && i < a->n_out; i++) {
        if (!a->out[i]) continue;
        a->out[i]->rank = 0;
        a->out[i]->data = NULL;
        a->out[i]->dtype = i == 1 ? KILN_DTYPE_FLOAT32 : KILN_DTYPE_UINT8;
    }
    return KILN_OK;
}

static kiln_status dql_cpu(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    const float *xv = x->data;
    int64_t n = kiln__tensor_numel(x);
    float mn = 0.f, mx = 0.f;
    for (int64_t i = 0; i < n; i++) {
        mn = xv[i] < mn ? xv[i] : mn;
        mx = xv[i] > mx ? xv[i] : mx;
    }
    float scale = (mx - mn) / 255.f;
    float zpf = 0.f;
    /* ONNX: zero point = round(saturate(0 - min / scale)) */
    if (scale != 0.f) {
        float t = 0.f - mn / scale;
        if (t < 0.f) t = 0.f;
        if (t > 255.f) t = 255.f;
        zpf = q_round(t);
    }
    uint8_t *y = a->out[0]->data;
    for (int64_t i = 0; i < n; i++)
        y[i] = scale != 0.f ? (uint8_t)q_clamp(q_round(xv[i] / scale) + zpf, KILN_DTYPE_UINT8)
                            : (uint8_t)zpf;
    if (a->n_out > 1 && a->out[1]) *(float *)a->out[1]->data = scale;
    if (a->n_out > 2 && a->out[2]) *(uint8_t *)a->out[2]->data = (uint8_t)zpf;
    return KILN_OK;
}

const kiln_op_def kiln_op_DynamicQuantizeLinear = {
    .name = "DynamicQuantizeLinear", .domain = "", .since = 11,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 3,
    .infer = dql_infer, .cpu = dql_cpu,
};
