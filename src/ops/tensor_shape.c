/* tensor_shape.c -- ops that change only the shape of a tensor (its bytes are
 * copied unchanged, or aliased in place): Reshape, Flatten, Squeeze,
 * Unsqueeze, Identity, Dropout (inference), and the shape queries Shape and
 * Size. */
#include "ops/tensor_internal.h"

#include <stdio.h>

/* Prints a requested shape literally ("[4x-1x0]"), for messages. */
static const char *tx_req_str(int n, const int64_t *v, char *buf, size_t cap) {
    size_t len = 0;
    len += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? "x" : "", (long long)v[i]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
    return buf;
}

/* Product of dims[from..to): known value, or the single symbolic dim when all
 * others are 1, else KILN_DIM_UNKNOWN. */
static int64_t tx_dim_product(const int64_t *dims, int from, int to) {
    int64_t p = 1, sym = 0;
    int nsym = 0;
    bool unknown = false;
    for (int k = from; k < to; k++) {
        int64_t d = dims[k];
        if (d == 0) return 0;
        if (d > 0) {
            if (!kiln__mul_ok(p, d, &p)) return KILN_DIM_UNKNOWN;
        } else if (KILN_DIM_IS_SYM(d)) {
            nsym++;
            sym = d;
        } else {
            unknown = true;
        }
    }
    if (unknown) return KILN_DIM_UNKNOWN;
    if (nsym == 0) return p;
    if (nsym == 1 && p == 1) return sym;
    return KILN_DIM_UNKNOWN;
}

/* Copies in[0] to out[0] unless they alias (in-place ops). */
static kiln_status tx_copy_through(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    int64_t n = kiln__tensor_numel(x);
    if (n != kiln__tensor_numel(y))
        return KILN_TX_FAIL0(KILN_ERR_INTERNAL, a, "output size differs from input size");
    if (y->data != x->data && n > 0) kiln__tx_memcpy(a->pool, y->data, x->data, (size_t)n * es);
    return KILN_OK;
}

/* ---- Reshape ----------------------------------------------------------- */

static kiln_status reshape_import(kiln_import_ctx *ic, void *attrs) {
    kiln_reshape_attrs *at = (kiln_reshape_attrs *)attrs;
    if (kiln_import_opset(ic) < 5) {
        if (!kiln_attr_has(ic, "shape"))
            return KILN_IMPORT_FAIL(ic, "attribute 'shape' is required before opset 5");
        KILN_TRY(kiln__tx_ints_attr_to_input(ic, "shape", 1));
    }
    at->allowzero = kiln_attr_int(ic, "allowzero", 0) != 0;
    return KILN_OK;
}

static kiln_status reshape_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    return kiln__check_attr(op, node, "allowzero", ((const kiln_reshape_attrs *)attrs)->allowzero,
                            0, 1);
}

static kiln_status reshape_infer(const kiln_infer_args *a) {
    const kiln_reshape_attrs *at = (const kiln_reshape_attrs *)a->attrs;
    const kiln_tinfo *x = a->in[0];
    kiln_tinfo *y = a->out[0];
    int64_t n;
    KILN_TRY(kiln__tx_int_vector(a, 1, "shape", false, &n));
    y->dtype = x->dtype;
    if (n > KILN_MAX_RANK)
        return KILN_TX_FAIL(KILN_ERR_UNSUPPORTED, a, "target rank %lld exceeds %d", (long long)n,
                            KILN_MAX_RANK);
    const kiln_tinfo *s = a->in[1];
    if (n < 0 || !s->data) {
        y->rank = (int)n;
        for (int i = 0; i < y->rank; i++) y->dims[i] = KILN_DIM_UNKNOWN;
        return KILN_OK;
    }
    int64_t v[KILN_MAX_RANK];
    bool copied[KILN_MAX_RANK] = {false};
    int neg = -1;
    bool has_zero = false;
    y->rank = (int)n;
    for (int i = 0; i < (int)n; i++) {
        v[i] = kiln__tinfo_int(s, i);
        if (v[i] < -1)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "invalid value %lld in shape", (long long)v[i]);
        if (v[i] == -1) {
            if (neg >= 0) return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "shape has more than one -1");
            neg = i;
        }
        if (v[i] == 0) has_zero = true;
    }
    if (at->allowzero && has_zero && neg >= 0)
        return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "shape has both 0 and -1 with allowzero=1");
    for (int i = 0; i < (int)n; i++) {
        if (v[i] == 0 && !at->allowzero) {
            if (x->rank < 0) {
                y->dims[i] = KILN_DIM_UNKNOWN;
                continue;
            }
            if (i >= x->rank)
                return KILN_TX_FAIL(KILN_ERR_MODEL, a,
                                    "shape[%d] = 0 copies input dimension %d, but the input has rank %d",
                                    i, i, x->rank);
            y->dims[i] = x->dims[i];
            copied[i] = true;
        } else {
            y->dims[i] = v[i];
        }
    }
    if (x->rank < 0) {
        if (neg >= 0) y->dims[neg] = KILN_DIM_UNKNOWN;
        return KILN_OK;
    }
    /* Element count check / -1 resolution, cancelling dims copied by 0. */
    int64_t pin = 1, pout = 1, sym = 0;
    int nsym = 0;
    bool anon = false, ovf = false;
    for (int k = 0; k < x->rank; k++) {
        if (k < (int)n && copied[k]) continue;
        int64_t d = x->dims[k];
        if (d >= 0) {
            if (!kiln__mul_ok(pin, d, &pin)) ovf = true;
        } else if (KILN_DIM_IS_SYM(d)) {
            nsym++;
            sym = d;
        } else {
            anon = true;
        }
    }
    for (int i = 0; i < (int)n; i++)
        if (!copied[i] && i != neg)
            if (!kiln__mul_ok(pout, y->dims[i], &pout)) ovf = true;
    if (ovf) return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "element count overflows");
    char b1[160], b2[160];
    if (!anon && nsym == 0) {
        if (neg >= 0) {
            if (pout == 0 || pin % pout != 0)
                return KILN_TX_FAIL(KILN_ERR_MODEL, a, "cannot reshape %s to %s",
                                    kiln__shape_str(x->rank, x->dims, b1, sizeof b1),
                                    tx_req_str((int)n, v, b2, sizeof b2));
            y->dims[neg] = pin / pout;
        } else if (pin != pout) {
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "cannot reshape %s to %s",
                                kiln__shape_str(x->rank, x->dims, b1, sizeof b1),
                                tx_req_str((int)n, v, b2, sizeof b2));
        }
    } else if (neg >= 0) {
        y->dims[neg] = (!anon && nsym == 1 && pin == pout) ? sym : KILN_DIM_UNKNOWN;
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_Reshape = {
    .name = "Reshape", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .flags = KILN_OP_FLAG_INPLACE | KILN_OP_FLAG_VIEW | KILN_OP_FLAG_REDUCIBLE,
    .attr_size = sizeof(kiln_reshape_attrs),
    .host_inputs = 1u << 1,
    .import = reshape_import, .validate = reshape_validate, .infer = reshape_infer, .cpu = tx_copy_through,
};

/* ---- Flatten ----------------------------------------------------------- */

static kiln_status flatten_import(kiln_import_ctx *ic, void *attrs) {
    return kiln_attr_int32(ic, "axis", 1, &((kiln_flatten_attrs *)attrs)->axis);
}

/* axis in [-8, 8] (Flatten's axis may equal the rank) */
static kiln_status flatten_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    return kiln__check_attr(op, node, "axis", ((const kiln_flatten_attrs *)attrs)->axis,
                            -KILN_MAX_RANK, KILN_MAX_RANK);
}

static kiln_status flatten_infer(const kiln_infer_args *a) {
    const kiln_flatten_attrs *at = (const kiln_flatten_attrs *)a->attrs;
    const kiln_tinfo *x = a->in[0];
    kiln_tinfo *y = a->out[0];
    y->dtype = x->dtype;
    y->rank = 2;
    if (x->rank < 0) {
        y->dims[0] = y->dims[1] = KILN_DIM_UNKNOWN;
        return KILN_OK;
    }
    int axis = at->axis;
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis > x->rank)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "axis %d is out of range for rank %d", at->axis,
                            x->rank);
    y->dims[0] = tx_dim_product(x->dims, 0, axis);
    y->dims[1] = tx_dim_product(x->dims, axis, x->rank);
    return KILN_OK;
}

const kiln_op_def kiln_op_Flatten = {
    .name = "Flatten", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .flags = KILN_OP_FLAG_INPLACE | KILN_OP_FLAG_VIEW | KILN_OP_FLAG_REDUCIBLE,
    .attr_size = sizeof(kiln_flatten_attrs),
    .import = flatten_import, .validate = flatten_validate, .infer = flatten_infer, .cpu = tx_copy_through,
};

/* ---- Squeeze / Unsqueeze --------------------------------------------------- */

static kiln_status squeeze_import(kiln_import_ctx *ic, void *attrs) {
    (void)attrs;
    if (kiln_import_opset(ic) < 13) KILN_TRY(kiln__tx_ints_attr_to_input(ic, "axes", 1));
    return KILN_OK;
}

/* Reads and normalizes the axes input (in[1]) against `rank`; marks them. */
static kiln_status tx_read_axes(const kiln_infer_args *a, const kiln_tinfo *ax, int rank,
                                bool *mark, int *count) {
    int64_t n = ax->rank == 0 ? 1 : ax->dims[0];
    *count = 0;
    for (int k = 0; k < rank; k++) mark[k] = false;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = kiln__tinfo_int(ax, i);
        if (v < -rank || v >= rank)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "axis %lld is out of range for rank %d",
                                (long long)v, rank);
        if (v < 0) v += rank;
        if (mark[v]) return KILN_TX_FAIL(KILN_ERR_MODEL, a, "axis %lld is repeated", (long long)v);
        mark[v] = true;
        (*count)++;
    }
    return KILN_OK;
}

static kiln_status squeeze_infer(const kiln_infer_args *a) {
    const kiln_tinfo *x = a->in[0];
    const kiln_tinfo *ax = a->n_in > 1 ? a->in[1] : NULL;
    kiln_tinfo *y = a->out[0];
    y->dtype = x->dtype;
    bool mark[KILN_MAX_RANK];
    int64_t n = -1;
    if (ax) KILN_TRY(kiln__tx_int_vector(a, 1, "axes", true, &n));
    if (x->rank < 0) {
        y->rank = -1;
        return KILN_OK;
    }
    if (ax && !ax->data) {
        y->rank = n >= 0 ? x->rank - (int)n : -1;
        if (y->rank < 0 && n >= 0)
            return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "more axes than input dimensions");
        for (int k = 0; k < y->rank; k++) y->dims[k] = KILN_DIM_UNKNOWN;
        return KILN_OK;
    }
    if (ax) {
        int cnt;
        KILN_TRY(tx_read_axes(a, ax, x->rank, mark, &cnt));
        for (int k = 0; k < x->rank; k++)
            if (mark[k] && x->dims[k] >= 0 && x->dims[k] != 1) {
                char b[160];
                return KILN_TX_FAIL(KILN_ERR_MODEL, a,
                                    "cannot squeeze axis %d of shape %s: dimension is %lld, not 1", k,
                                    kiln__shape_str(x->rank, x->dims, b, sizeof b),
                                    (long long)x->dims[k]);
            }
    } else {
        for (int k = 0; k < x->rank; k++) {
            if (x->dims[k] < 0) { /* might or might not be 1 */
                y->rank = -1;
                return KILN_OK;
            }
            mark[k] = x->dims[k] == 1;
        }
    }
    int r = 0;
    for (int k = 0; k < x->rank; k++)
        if (!mark[k]) y->dims[r++] = x->dims[k];
    y->rank = r;
    return KILN_OK;
}

const kiln_op_def kiln_op_Squeeze = {
    .name = "Squeeze", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .flags = KILN_OP_FLAG_INPLACE | KILN_OP_FLAG_VIEW | KILN_OP_FLAG_REDUCIBLE,
    .host_inputs = 1u << 1,
    .import = squeeze_import, .infer = squeeze_infer, .cpu = tx_copy_through,
};

static kiln_status unsqueeze_import(kiln_import_ctx *ic, void *attrs) {
    (void)attrs;
    if (kiln_import_opset(ic) < 13) {
        if (!kiln_attr_has(ic, "axes"))
            return KILN_IMPORT_FAIL(ic, "attribute 'axes' is required before opset 13");
        KILN_TRY(kiln__tx_ints_attr_to_input(ic, "axes", 1));
    }
    return KILN_OK;
}

static kiln_status unsqueeze_infer(const kiln_infer_args *a) {
    const kiln_tinfo *x = a->in[0];
    kiln_tinfo *y = a->out[0];
    int64_t n;
    KILN_TRY(kiln__tx_int_vector(a, 1, "axes", true, &n));
    const kiln_tinfo *ax = a->in[1];
    y->dtype = x->dtype;
    if (x->rank < 0 || n < 0) {
        y->rank = -1;
        return KILN_OK;
    }
    int r = x->rank + (int)n;
    if (r > KILN_MAX_RANK)
        return KILN_TX_FAIL(KILN_ERR_UNSUPPORTED, a, "output rank %d exceeds %d", r, KILN_MAX_RANK);
    y->rank = r;
    if (!ax->data) {
        for (int k = 0; k < r; k++) y->dims[k] = KILN_DIM_UNKNOWN;
        return KILN_OK;
    }
    bool mark[KILN_MAX_RANK];
    int cnt;
    KILN_TRY(tx_read_axes(a, ax, r, mark, &cnt));
    int j = 0;
    for (int k = 0; k < r; k++) y->dims[k] = mark[k] ? 1 : x->dims[j++];
    return KILN_OK;
}

const kiln_op_def kiln_op_Unsqueeze = {
    .name = "Unsqueeze", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .flags = KILN_OP_FLAG_INPLACE | KILN_OP_FLAG_VIEW | KILN_OP_FLAG_REDUCIBLE,
    .host_inputs = 1u << 1,
    .import = unsqueeze_import, .infer = unsqueeze_infer, .cpu = tx_copy_through,
};

/* ---- Identity ------------------------------------------------------------ */

static kiln_status identity_infer(const kiln_infer_args *a) {
    kiln__tinfo_copy_shape(a->out[0], a->in[0]);
    return KILN_OK;
}

const kiln_op_def kiln_op_Identity = {
    .name = "Identity", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .flags = KILN_OP_FLAG_INPLACE | KILN_OP_FLAG_VIEW | KILN_OP_FLAG_REDUCIBLE,
    .infer = identity_infer, .cpu = tx_copy_through,
};

/* ---- Dropout (inference) -------------------------------------------------- */

static kiln_status dropout_import(kiln_import_ctx *ic, void *attrs) {
    kiln_dropout_attrs *at = (kiln_dropout_attrs *)attrs;
    at->mask_like_input = kiln_import_opset(ic) < 10;
    return KILN_OK;
}

static kiln_status dropout_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    return kiln__check_attr(op, node, "mask_like_input (opset < 10)",
                            ((const kiln_dropout_attrs *)attrs)->mask_like_input, 0, 1);
}

static kiln_status dropout_infer(const kiln_infer_args *a) {
    const kiln_dropout_attrs *at = (const kiln_dropout_attrs *)a->attrs;
    kiln__tinfo_copy_shape(a->out[0], a->in[0]);
    if (a->n_out > 1 && a->out[1]) {
        kiln__tinfo_copy_shape(a->out[1], a->in[0]);
        a->out[1]->dtype = at->mask_like_input ? a->in[0]->dtype : KILN_DTYPE_BOOL;
    }
    return KILN_OK;
}

static kiln_status dropout_cpu(const kiln_kernel_args *a) {
    const kiln_tensor *ratio = a->n_in > 1 ? a->in[1] : NULL;
    const kiln_tensor *train = a->n_in > 2 ? a->in[2] : NULL;
    if (train && train->data && kiln__tx_nonzero(train->dtype, train->data, 0)) {
        double r = 0.5;
        if (ratio && ratio->data) r = kiln__load_f64(ratio->dtype, ratio->data, 0);
        if (r != 0.0)
            return KILN_TX_FAIL0(KILN_ERR_UNSUPPORTED, a,
                                 "training_mode=true with a nonzero ratio (random dropout) is not "
                                 "supported");
    }
    KILN_TRY(tx_copy_through(a));
    if (kiln__tx_has_out(a, 1)) {
        kiln_tensor *m = a->out[1];
        int64_t n = kiln__tensor_numel(m);
        if (n == 0) return KILN_OK;
        if (m->dtype == KILN_DTYPE_BOOL) {
            memset(m->data, 1, (size_t)n);
        } else {
            size_t es;
            KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, m->dtype, &es));
            char one[8];
            kiln__store_f64(m->dtype, one, 0, 1.0);
            kiln__tx_fill(m->data, n, one, es);
        }
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_Dropout = {
    .name = "Dropout", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 3, .min_outputs = 1, .max_outputs = 2,
    .flags = KILN_OP_FLAG_INPLACE,
    .attr_size = sizeof(kiln_dropout_attrs),
    .import = dropout_import, .validate = dropout_validate, .infer = dropout_infer, .cpu = dropout_cpu,
};

/* ---- Shape / Size ---------------------------------------------------------- */

static kiln_status shape_import(kiln_import_ctx *ic, void *attrs) {
    kiln_shape_attrs *at = (kiln_shape_attrs *)attrs;
    at->start = kiln_attr_int(ic, "start", 0);
    at->has_end = kiln_attr_has(ic, "end");
    at->end = kiln_attr_int(ic, "end", 0);
    return KILN_OK;
}

/* start and end: any value (clamped to the rank); has_end 0 or 1 */
static kiln_status shape_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    return kiln__check_attr(op, node, "has_end", ((const kiln_shape_attrs *)attrs)->has_end, 0, 1);
}

static void shape_range(const kiln_shape_attrs *at, int rank, int *b, int *e) {
    int64_t s = at->start, t = at->has_end ? at->end : rank;
    if (s < 0) s += rank;
    if (t < 0) t += rank;
    s = kiln__tx_max64(0, kiln__tx_min64(s, rank));
    t = kiln__tx_max64(0, kiln__tx_min64(t, rank));
    *b = (int)s;
    *e = (int)(t > s ? t : s);
}

static kiln_status shape_infer(const kiln_infer_args *a) {
    const kiln_shape_attrs *at = (const kiln_shape_attrs *)a->attrs;
    kiln_tinfo *y = a->out[0];
    y->dtype = KILN_DTYPE_INT64;
    y->rank = 1;
    if (a->in[0]->rank < 0) {
        y->dims[0] = KILN_DIM_UNKNOWN;
        return KILN_OK;
    }
    int b, e;
    shape_range(at, a->in[0]->rank, &b, &e);
    y->dims[0] = e - b;
    return KILN_OK;
}

static kiln_status shape_cpu(const kiln_kernel_args *a) {
    const kiln_shape_attrs *at = (const kiln_shape_attrs *)a->attrs;
    int b, e;
    shape_range(at, a->in[0]->rank, &b, &e);
    int64_t *o = (int64_t *)a->out[0]->data;
    for (int k = b; k < e; k++) o[k - b] = a->in[0]->dims[k];
    return KILN_OK;
}

const kiln_op_def kiln_op_Shape = {
    .name = "Shape", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .flags = KILN_OP_FLAG_SHAPE_ONLY,
    .attr_size = sizeof(kiln_shape_attrs),
    .import = shape_import, .validate = shape_validate, .infer = shape_infer, .cpu = shape_cpu,
};

static kiln_status size_infer(const kiln_infer_args *a) {
    a->out[0]->dtype = KILN_DTYPE_INT64;
    a->out[0]->rank = 0;
    return KILN_OK;
}

static kiln_status size_cpu(const kiln_kernel_args *a) {
    *(int64_t *)a->out[0]->data = kiln__tensor_numel(a->in[0]);
    return KILN_OK;
}

const kiln_op_def kiln_op_Size = {
    .name = "Size", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .flags = KILN_OP_FLAG_SHAPE_ONLY,
    .infer = size_infer, .cpu = size_cpu,
};
