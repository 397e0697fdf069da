/* tensor_pad.c -- Pad (constant, reflect, edge, wrap) and ReverseSequence. */
#include "ops/tensor_internal.h"

static kiln_status pad_import(kiln_import_ctx *ic, void *attrs) {
    kiln_pad_attrs *at = (kiln_pad_attrs *)attrs;
    const char *mode = kiln_attr_string(ic, "mode", "constant");
    if (!strcmp(mode, "constant"))
        at->mode = PAD_CONSTANT;
    else if (!strcmp(mode, "reflect"))
        at->mode = PAD_REFLECT;
    else if (!strcmp(mode, "edge"))
        at->mode = PAD_EDGE;
    else if (!strcmp(mode, "wrap"))
        at->mode = PAD_WRAP;
    else
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Pad): mode '%s' is not supported",
                         kiln_import_node_name(ic), mode);
    if (kiln_import_opset(ic) < 11) {
        const char *pname = kiln_attr_has(ic, "pads") ? "pads" : "paddings";
        if (!kiln_attr_has(ic, pname))
            return KILN_IMPORT_FAIL(ic, "attribute 'pads' is required before opset 11");
        KILN_TRY(kiln__tx_ints_attr_to_input(ic, pname, 1));
        float v = kiln_attr_float(ic, "value", 0.0f);
        if (v != 0.0f) {
            const kiln_tinfo *x = kiln_import_input_info(ic, 0);
            kiln_dtype dt = x && x->dtype != KILN_DTYPE_UNDEFINED ? x->dtype : KILN_DTYPE_FLOAT32;
            if (!kiln__dtype_valid((int)dt) || kiln_dtype_size(dt) == 0)
                return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Pad): dtype %s is not supported",
                                 kiln_import_node_name(ic), kiln_dtype_name(dt));
            uint8_t buf[8];
            memset(buf, 0, sizeof buf);
            kiln__store_f64(dt, buf, 0, v);
            KILN_TRY(kiln_import_set_const_input(ic, 2, dt, 0, NULL, buf));
        }
    }
    return KILN_OK;
}

/* Per-axis pads from the pads (and opset-18 axes) inputs. Returns false in
 * *known when the values are not known (build time). */
static kiln_status pad_amounts(const char *node, int rank, const kiln_dtype pdt, const void *pdata,
                               int64_t npads, const kiln_dtype adt, const void *adata, int64_t naxes,
                               bool has_axes, int64_t *pb, int64_t *pe) {
    int64_t n = has_axes ? naxes : rank;
    if (npads != 2 * n)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Pad): pads has %lld entries, expected %lld", node,
                         (long long)npads, (long long)(2 * n));
    for (int k = 0; k < rank; k++) pb[k] = pe[k] = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t axis = has_axes ? kiln__load_i64(adt, adata, i) : i;
        if (axis < -rank || axis >= rank)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Pad): axis %lld is out of range for rank %d",
                             node, (long long)axis, rank);
        if (axis < 0) axis += rank;
        pb[axis] = kiln__load_i64(pdt, pdata, i);
        pe[axis] = kiln__load_i64(pdt, pdata, i + n);
        /* bounded, so that the kernels' index arithmetic cannot overflow
         * (a pad of INT64_MIN on one side and INT64_MAX on the other gives
         * a small output) */
        for (int s = 0; s < 2; s++) {
            int64_t v = s ? pe[axis] : pb[axis];
            if (v < -KILN_MAX_TENSOR_BYTES || v > KILN_MAX_TENSOR_BYTES)
                return KILN_FAIL(KILN_ERR_MODEL,
                                 "node '%s' (Pad): pad %lld on axis %lld is out of range "
                                 "(at most 2^48 either way)",
                                 node, (long long)v, (long long)axis);
        }
    }
    return KILN_OK;
}

static kiln_status pad_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    return kiln__check_attr(op, node, "mode", ((const kiln_pad_attrs *)attrs)->mode, PAD_CONSTANT,
                            PAD_WRAP);
}

static kiln_status pad_infer(const kiln_infer_args *a) {
    const kiln_tinfo *x = a->in[0];
    kiln_tinfo *y = a->out[0];
    int64_t np, na = 0;
    KILN_TRY(kiln__tx_int_vector(a, 1, "pads", false, &np));
    const kiln_tinfo *ax = a->n_in > 3 ? a->in[3] : NULL;
    if (ax) KILN_TRY(kiln__tx_int_vector(a, 3, "axes", false, &na));
    y->dtype = x->dtype;
    y->rank = x->rank;
    if (x->rank < 0) return KILN_OK;
    if (!a->in[1]->data || np < 0 || (ax && (!ax->data || na < 0))) {
        for (int k = 0; k < x->rank; k++) y->dims[k] = KILN_DIM_UNKNOWN;
        return KILN_OK;
    }
    int64_t pb[KILN_MAX_RANK], pe[KILN_MAX_RANK];
    KILN_TRY(pad_amounts(a->node_name, x->rank, a->in[1]->dtype, a->in[1]->data, np,
                         ax ? ax->dtype : KILN_DTYPE_INT64, ax ? ax->data : NULL, na, ax != NULL, pb,
                         pe));
    const kiln_pad_attrs *at = (const kiln_pad_attrs *)a->attrs;
    for (int k = 0; k < x->rank; k++) {
        int64_t d = x->dims[k];
        if (d < 0) {
            y->dims[k] = (pb[k] == 0 && pe[k] == 0) ? d : KILN_DIM_UNKNOWN;
            continue;
        }
        if (__builtin_add_overflow(d, pb[k], &y->dims[k]) ||
            __builtin_add_overflow(y->dims[k], pe[k], &y->dims[k]))
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "pads %lld,%lld on axis %d overflow",
                                (long long)pb[k], (long long)pe[k], k);
        if (y->dims[k] < 0)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "pads %lld,%lld make axis %d of size %lld negative",
                                (long long)pb[k], (long long)pe[k], k, (long long)d);
        if (at->mode != PAD_CONSTANT && d == 0 && y->dims[k] > 0)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "cannot pad empty axis %d in this mode", k);
    }
    return KILN_OK;
}

/* Source index along an axis of size d for relative index i (may be outside). */
static int64_t pad_map(int mode, int64_t i, int64_t d) {
    if (i >= 0 && i < d) return i;
    switch (mode) {
    case PAD_EDGE: return i < 0 ? 0 : d - 1;
    case PAD_WRAP: {
        int64_t m = i % d;
        return m < 0 ? m + d : m;
    }
    default: { /* reflect */
        if (d == 1) return 0;
        int64_t p = 2 * (d - 1);
        int64_t m = i % p;
        if (m < 0) m += p;
        return m >= d ? p - m : m;
    }
    }
}

typedef struct pad_ctx {
    int mode, rank;
    size_t es;
    const char *x;
    char *y;
    const int64_t *xd, *yd, *pb;
    int64_t xst[KILN_MAX_RANK];
} pad_ctx;

static void pad_rows(void *vctx, int64_t begin, int64_t end) {
    const pad_ctx *c = (const pad_ctx *)vctx;
    int r = c->rank;
    size_t es = c->es;
    int64_t W = c->yd[r - 1], d = c->xd[r - 1], p0 = c->pb[r - 1];
    /* interior of the last axis: output j with 0 <= j - p0 < d */
    int64_t j0 = kiln__tx_max64(0, p0), j1 = kiln__tx_min64(W, p0 + d);
    for (int64_t row = begin; row < end; row++) {
        int64_t rem = row, soff = 0;
        for (int k = r - 2; k >= 0; k--) {
            int64_t i = rem % c->yd[k];
            rem /= c->yd[k];
            soff += pad_map(c->mode, i - c->pb[k], c->xd[k]) * c->xst[k];
        }
        const char *src = c->x + (size_t)soff * es;
        char *dst = c->y + (size_t)(row * W) * es;
        for (int64_t j = 0; j < j0 && j < W; j++)
            memcpy(dst + (size_t)j * es, src + (size_t)pad_map(c->mode, j - p0, d) * es, es);
        if (j1 > j0) memcpy(dst + (size_t)j0 * es, src + (size_t)(j0 - p0) * es, (size_t)(j1 - j0) * es);
        for (int64_t j = kiln__tx_max64(j1, j0); j < W; j++)
            memcpy(dst + (size_t)j * es, src + (size_t)pad_map(c->mode, j - p0, d) * es, es);
    }
}

static kiln_status pad_cpu(const kiln_kernel_args *a) {
    const kiln_pad_attrs *at = (const kiln_pad_attrs *)a->attrs;
    const kiln_tensor *x = a->in[0], *p = a->in[1];
    const kiln_tensor *cv = a->n_in > 2 ? a->in[2] : NULL;
    const kiln_tensor *ax = a->n_in > 3 ? a->in[3] : NULL;
    kiln_tensor *y = a->out[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    int64_t pb[KILN_MAX_RANK], pe[KILN_MAX_RANK];
    KILN_TRY(pad_amounts(a->node_name, x->rank, p->dtype, p->data, kiln__tensor_numel(p),
                         ax ? ax->dtype : KILN_DTYPE_INT64, ax ? ax->data : NULL,
                         ax ? kiln__tensor_numel(ax) : 0, ax != NULL, pb, pe));
    int64_t ny = kiln__tensor_numel(y);
    if (ny == 0) return KILN_OK;
    if (x->rank == 0) {
        memcpy(y->data, x->data, es);
        return KILN_OK;
    }
    if (at->mode == PAD_CONSTANT || kiln__tensor_numel(x) == 0) {
        uint8_t val[8];
        memset(val, 0, sizeof val);
        if (cv && cv->data && kiln__tensor_numel(cv) >= 1) {
            if (cv->dtype == x->dtype)
                memcpy(val, cv->data, es);
            else
                kiln__store_f64(x->dtype, val, 0, kiln__load_f64(cv->dtype, cv->data, 0));
        }
        kiln__tx_fill(y->data, ny, val, es);
        int64_t xst[KILN_MAX_RANK], yst[KILN_MAX_RANK], cd[KILN_MAX_RANK];
        kiln__tx_strides(x->rank, x->dims, xst);
        kiln__tx_strides(y->rank, y->dims, yst);
        int64_t xoff = 0, yoff = 0;
        for (int k = 0; k < x->rank; k++) {
            int64_t cb = kiln__tx_max64(0, -pb[k]), ce = kiln__tx_max64(0, -pe[k]);
            cd[k] = x->dims[k] - cb - ce;
            if (cd[k] <= 0) return KILN_OK;
            xoff += cb * xst[k];
            yoff += kiln__tx_max64(0, pb[k]) * yst[k];
        }
        kiln__tx_copy(a->pool, es, x->rank, cd, (char *)y->data + (size_t)yoff * es, yst,
                      (const char *)x->data + (size_t)xoff * es, xst);
        return KILN_OK;
    }
    pad_ctx c;
    c.mode = at->mode;
    c.rank = x->rank;
    c.es = es;
    c.x = (const char *)x->data;
    c.y = (char *)y->data;
    c.xd = x->dims;
    c.yd = y->dims;
    c.pb = pb;
    kiln__tx_strides(x->rank, x->dims, c.xst);
    int64_t rows = ny / y->dims[y->rank - 1];
    int64_t grain = KILN_TX_GRAIN_BYTES / (int64_t)((size_t)y->dims[y->rank - 1] * es + 1) + 1;
    kiln__parallel_for(a->pool, rows, grain, pad_rows, &c);
    return KILN_OK;
}

const kiln_op_def kiln_op_Pad = {
    .name = "Pad", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 4, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_pad_attrs),
    .host_inputs = (1u << 1) | (1u << 3),
    .import = pad_import, .validate = pad_validate, .infer = pad_infer, .cpu = pad_cpu,
};

/* ---- ReverseSequence ------------------------------------------------------------ */

static kiln_status revseq_import(kiln_import_ctx *ic, void *attrs) {
    kiln_revseq_attrs *at = (kiln_revseq_attrs *)attrs;
    KILN_TRY(kiln_attr_int32(ic, "batch_axis", 1, &at->batch_axis));
    return kiln_attr_int32(ic, "time_axis", 0, &at->time_axis);
}

/* batch_axis and time_axis: 0 or 1 (negative: counted from the end, which
 * the shape rule resolves) */
static kiln_status revseq_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_revseq_attrs *at = (const kiln_revseq_attrs *)attrs;
    KILN_TRY(kiln__check_attr(op, node, "batch_axis", at->batch_axis, -KILN_MAX_RANK, 1));
    return kiln__check_attr(op, node, "time_axis", at->time_axis, -KILN_MAX_RANK, 1);
}

static kiln_status revseq_infer(const kiln_infer_args *a) {
    const kiln_revseq_attrs *at = (const kiln_revseq_attrs *)a->attrs;
    const kiln_tinfo *x = a->in[0];
    kiln__tinfo_copy_shape(a->out[0], x);
    int64_t n;
    KILN_TRY(kiln__tx_int_vector(a, 1, "sequence_lens", false, &n));
    if (x->rank < 0) return KILN_OK;
    if (x->rank < 2) return KILN_TX_FAIL(KILN_ERR_MODEL, a, "input rank %d < 2", x->rank);
    int b, t;
    KILN_TRY(kiln__norm_axis(a->node_name, at->batch_axis, x->rank, &b));
    KILN_TRY(kiln__norm_axis(a->node_name, at->time_axis, x->rank, &t));
    if (b == t || b > 1 || t > 1)
        return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "batch_axis and time_axis must be 0 and 1");
    if (n >= 0 && x->dims[b] >= 0 && n != x->dims[b])
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "sequence_lens has %lld entries for batch %lld",
                            (long long)n, (long long)x->dims[b]);
    return KILN_OK;
}

static kiln_status revseq_cpu(const kiln_kernel_args *a) {
    const kiln_revseq_attrs *at = (const kiln_revseq_attrs *)a->attrs;
    const kiln_tensor *x = a->in[0], *sl = a->in[1];
    kiln_tensor *y = a->out[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    int r = x->rank;
    int b = at->batch_axis < 0 ? at->batch_axis + r : at->batch_axis;
    int t = at->time_axis < 0 ? at->time_axis + r : at->time_axis;
    int64_t n = kiln__tensor_numel(x);
    if (n == 0) return KILN_OK;
    kiln__tx_memcpy(a->pool, y->data, x->data, (size_t)n * es);
    int64_t st[KILN_MAX_RANK], sub[KILN_MAX_RANK];
    kiln__tx_strides(r, x->dims, st);
    memcpy(sub, x->dims, sizeof(int64_t) * (size_t)r);
    sub[b] = sub[t] = 1;
    int64_t T = x->dims[t];
    for (int64_t bi = 0; bi < x->dims[b]; bi++) {
        int64_t len = kiln__tx_tensor_int(sl, bi);
        if (len < 0 || len > T)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "sequence_lens[%lld] = %lld is out of range [0, %lld]",
                                (long long)bi, (long long)len, (long long)T);
        for (int64_t ti = 0; ti < len; ti++) {
            int64_t doff = bi * st[b] + ti * st[t], soff = bi * st[b] + (len - 1 - ti) * st[t];
            kiln__tx_copy(NULL, es, r, sub, (char *)y->data + (size_t)doff * es, st,
                          (const char *)x->data + (size_t)soff * es, st);
        }
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_ReverseSequence = {
    .name = "ReverseSequence", .domain = "", .since = 10,
    .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_revseq_attrs),
    .import = revseq_import, .validate = revseq_validate, .infer = revseq_infer, .cpu = revseq_cpu,
};
