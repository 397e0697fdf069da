/* tensor_layout.c -- ops that rearrange elements without arithmetic:
 * Transpose, DepthToSpace, SpaceToDepth, Concat, Split, Slice, Expand, Tile.
 * All of them are a (set of) strided copies, see kiln__tx_copy. */
#include "ops/tensor_internal.h"

/* An integer vector input (starts, axes, pads...) as the shared parameter
 * code sees it, from either an infer tinfo or a kernel tensor. */
typedef struct tx_ivec {
    bool present, known;
    kiln_dtype dtype;
    const void *data;
    int64_t n;
} tx_ivec;

static tx_ivec ivec_from_info(const kiln_infer_args *a, int i) {
    tx_ivec v = {false, false, KILN_DTYPE_INT64, NULL, -1};
    const kiln_tinfo *t = i < a->n_in ? a->in[i] : NULL;
    if (!t) return v;
    v.present = true;
    v.dtype = t->dtype;
    v.data = t->data;
    v.n = t->rank == 0 ? 1 : (t->rank == 1 ? t->dims[0] : -1);
    if (v.n < 0) v.n = -1;
    v.known = t->data != NULL && v.n >= 0;
    return v;
}

static tx_ivec ivec_from_tensor(const kiln_kernel_args *a, int i) {
    tx_ivec v = {false, false, KILN_DTYPE_INT64, NULL, -1};
    const kiln_tensor *t = i < a->n_in ? a->in[i] : NULL;
    if (!t) return v;
    v.present = true;
    v.dtype = t->dtype;
    v.data = t->data;
    v.n = t->rank == 0 ? 1 : t->dims[0];
    v.known = true;
    return v;
}

static int64_t ivec_at(const tx_ivec *v, int64_t i) { return kiln__load_i64(v->dtype, v->data, i); }

/* ---- Transpose ------------------------------------------------------------ */

static kiln_status transpose_import(kiln_import_ctx *ic, void *attrs) {
    kiln_transpose_attrs *at = (kiln_transpose_attrs *)attrs;
    int64_t p[KILN_MAX_RANK];
    int n = kiln_attr_ints(ic, "perm", p, KILN_MAX_RANK);
    if (n > KILN_MAX_RANK)
        return KILN_IMPORT_FAIL(ic, "attribute 'perm' has %d values (rank > %d)", n, KILN_MAX_RANK);
    at->n_perm = n < 0 ? 0 : n;
    for (int i = 0; i < at->n_perm; i++)
        at->perm[i] = p[i] < 0 || p[i] >= n ? -1 : (int32_t)p[i]; /* -1: refused by validate */
    return KILN_OK;
}

/* perm: 0..n_perm-1 in some order (n_perm 0: reverse the dims). */
static kiln_status transpose_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_transpose_attrs *at = (const kiln_transpose_attrs *)attrs;
    KILN_TRY(kiln__check_attr(op, node, "perm (count)", at->n_perm, 0, KILN_MAX_RANK));
    bool seen[KILN_MAX_RANK] = {false};
    for (int i = 0; i < at->n_perm; i++) {
        int p = at->perm[i];
        if (p < 0 || p >= at->n_perm || seen[p])
            return KILN_VALIDATE_FAIL(op, node, "attribute 'perm' is not a permutation of 0..%d",
                                      at->n_perm - 1);
        seen[p] = true;
    }
    return KILN_OK;
}

static kiln_status transpose_perm(const kiln_infer_args *a, int rank, int *perm) {
    const kiln_transpose_attrs *at = (const kiln_transpose_attrs *)a->attrs;
    if (at->n_perm == 0) {
        for (int k = 0; k < rank; k++) perm[k] = rank - 1 - k;
        return KILN_OK;
    }
    if (at->n_perm != rank)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "perm has %d entries but the input has rank %d",
                            at->n_perm, rank);
    bool seen[KILN_MAX_RANK] = {false};
    for (int k = 0; k < rank; k++) {
        int p = at->perm[k];
        if (p < 0 || p >= rank || seen[p])
            return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "perm is not a permutation");
        seen[p] = true;
        perm[k] = p;
    }
    return KILN_OK;
}

static kiln_status transpose_infer(const kiln_infer_args *a) {
    const kiln_transpose_attrs *at = (const kiln_transpose_attrs *)a->attrs;
    const kiln_tinfo *x = a->in[0];
    kiln_tinfo *y = a->out[0];
    y->dtype = x->dtype;
    if (x->rank < 0) {
        y->rank = at->n_perm ? at->n_perm : -1;
        for (int k = 0; k < y->rank; k++) y->dims[k] = KILN_DIM_UNKNOWN;
        return KILN_OK;
    }
    int perm[KILN_MAX_RANK];
    KILN_TRY(transpose_perm(a, x->rank, perm));
    y->rank = x->rank;
    for (int k = 0; k < x->rank; k++) y->dims[k] = x->dims[perm[k]];
    return KILN_OK;
}

/* Copies x viewed as `vrank`/`vdims` (row-major) into y permuted by perm. */
static void tx_permute(kiln_pool *pool, size_t es, int vrank, const int64_t *vdims,
                       const int *perm, const void *x, void *y) {
    int64_t st[KILN_TX_MAX_RANK], odims[KILN_TX_MAX_RANK], sst[KILN_TX_MAX_RANK],
        dst[KILN_TX_MAX_RANK];
    kiln__tx_strides(vrank, vdims, st);
    for (int k = 0; k < vrank; k++) {
        odims[k] = vdims[perm[k]];
        sst[k] = st[perm[k]];
    }
    kiln__tx_strides(vrank, odims, dst);
    kiln__tx_copy(pool, es, vrank, odims, y, dst, x, sst);
}

static kiln_status transpose_cpu(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    const kiln_transpose_attrs *at = (const kiln_transpose_attrs *)a->attrs;
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    int perm[KILN_MAX_RANK];
    for (int k = 0; k < x->rank; k++) perm[k] = at->n_perm ? at->perm[k] : x->rank - 1 - k;
    tx_permute(a->pool, es, x->rank, x->dims, perm, x->data, a->out[0]->data);
    return KILN_OK;
}

const kiln_op_def kiln_op_Transpose = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "Transpose", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_transpose_attrs),
    .import = transpose_import, .validate = transpose_validate, .infer = transpose_infer, .cpu = transpose_cpu,
};

/* ---- DepthToSpace / SpaceToDepth ----------------------------------------------- */

static kiln_status d2s_import(kiln_import_ctx *ic, void *attrs) {
    kiln_d2s_attrs *at = (kiln_d2s_attrs *)attrs;
    KILN_TRY(kiln_attr_int32(ic, "blocksize", 0, &at->blocksize));
    const char *mode = kiln_attr_string(ic, "mode", "DCR");
    if (!strcmp(mode, "DCR"))
        at->crd = 0;
    else if (!strcmp(mode, "CRD"))
        at->crd = 1;
    else
        return KILN_IMPORT_FAIL(ic, "attribute 'mode' = '%s' is not supported", mode);
    return KILN_OK;
}

/* blocksize in 1..2^20 (so that blocksize^2 and its products stay small);
 * mode DCR (0) or CRD (1) */
static kiln_status d2s_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_d2s_attrs *at = (const kiln_d2s_attrs *)attrs;
    KILN_TRY(kiln__check_attr(op, node, "blocksize", at->blocksize, 1, 1 << 20));
    return kiln__check_attr(op, node, "mode", at->crd, 0, 1);
}

/* A dim times f >= 0: a known dim checked for overflow; an unknown or
 * symbolic one stays itself when f is 1, else becomes unknown. */
static kiln_status tx_dim_mul(const char *node, int64_t d, int64_t f, int64_t *out) {
    if (d >= 0) return kiln__dim_mul(node, d, f, out);
    *out = f == 1 ? d : KILN_DIM_UNKNOWN;
    return KILN_OK;
}

static kiln_status d2s_infer(const kiln_infer_args *a) {
    const kiln_d2s_attrs *at = (const kiln_d2s_attrs *)a->attrs;
    const kiln_tinfo *x = a->in[0];
    kiln_tinfo *y = a->out[0];
    int64_t bs = at->blocksize;
    bool d2s = a->op->code == 0;
    y->dtype = x->dtype;
    y->rank = 4;
    if (x->rank < 0) {
        for (int k = 0; k < 4; k++) y->dims[k] = KILN_DIM_UNKNOWN;
        return KILN_OK;
    }
    if (x->rank != 4)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "input must be 4-D, not of rank %d", x->rank);
    y->dims[0] = x->dims[0];
    if (d2s) {
        if (x->dims[1] >= 0 && x->dims[1] % (bs * bs) != 0)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "channels %lld are not divisible by blocksize^2 = %lld",
                                (long long)x->dims[1], (long long)(bs * bs));
        y->dims[1] = x->dims[1] >= 0 ? x->dims[1] / (bs * bs) : (bs == 1 ? x->dims[1] : KILN_DIM_UNKNOWN);
        KILN_TRY(tx_dim_mul(a->node_name, x->dims[2], bs, &y->dims[2]));
        KILN_TRY(tx_dim_mul(a->node_name, x->dims[3], bs, &y->dims[3]));
    } else {
        for (int k = 2; k < 4; k++)
            if (x->dims[k] >= 0 && x->dims[k] % bs != 0)
                return KILN_TX_FAIL(KILN_ERR_MODEL, a,
                                    "spatial dimension %lld is not divisible by blocksize %lld",
                                    (long long)x->dims[k], (long long)bs);
        KILN_TRY(tx_dim_mul(a->node_name, x->dims[1], bs * bs, &y->dims[1]));
        for (int k = 2; k < 4; k++)
            y->dims[k] = x->dims[k] >= 0 ? x->dims[k] / bs : (bs == 1 ? x->dims[k] : KILN_DIM_UNKNOWN);
    }
    return KILN_OK;
}

static kiln_status d2s_cpu(const kiln_kernel_args *a) {
    const kiln_d2s_attrs *at = (const kiln_d2s_attrs *)a->attrs;
    const kiln_tensor *x = a->in[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    int64_t bs = at->blocksize, N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t v[6];
    if (a->op->code == 0) { /* DepthToSpace */
        int64_t c = C / (bs * bs);
        if (at->crd) {
            static const int p[6] = {0, 1, 4, 2, 5, 3};
            int64_t vd[6] = {N, c, bs, bs, H, W};
            memcpy(v, vd, sizeof v);
            tx_permute(a->pool, es, 6, v, p, x->data, a->out[0]->data);
        } else {
            static const int p[6] = {0, 3, 4, 1, 5, 2};
            int64_t vd[6] = {N, bs, bs, c, H, W};
            memcpy(v, vd, sizeof v);
            tx_permute(a->pool, es, 6, v, p, x->data, a->out[0]->data);
        }
    } else {
        static const int p[6] = {0, 3, 5, 1, 2, 4};
        int64_t vd[6] = {N, C, H / bs, bs, W / bs, bs};
        memcpy(v, vd, sizeof v);
        tx_permute(a->pool, es, 6, v, p, x->data, a->out[0]->data);
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_DepthToSpace = {
    .name = "DepthToSpace", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1, .code = 0,
    .attr_size = sizeof(kiln_d2s_attrs),
    .import = d2s_import, .validate = d2s_validate, .infer = d2s_infer, .cpu = d2s_cpu,
};

const kiln_op_def kiln_op_SpaceToDepth = {
    .name = "SpaceToDepth", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1, .code = 1,
    .attr_size = sizeof(kiln_d2s_attrs),
    .import = d2s_import, .validate = d2s_validate, .infer = d2s_infer, .cpu = d2s_cpu,
};

/* ---- Concat ------------------------------------------------------------------ */

static kiln_status concat_import(kiln_import_ctx *ic, void *attrs) {
    kiln_axis_attrs *at = (kiln_axis_attrs *)attrs;
    if (!kiln_attr_has(ic, "axis") && kiln_import_opset(ic) >= 4)
        return KILN_IMPORT_FAIL(ic, "attribute 'axis' is required");
    return kiln_attr_int32(ic, "axis", 1, &at->axis);
}

static kiln_status concat_infer(const kiln_infer_args *a) {
    const kiln_axis_attrs *at = (const kiln_axis_attrs *)a->attrs;
    kiln_tinfo *y = a->out[0];
    int rank = -1;
    y->dtype = KILN_DTYPE_UNDEFINED;
    for (int i = 0; i < a->n_in; i++) {
        const kiln_tinfo *t = a->in[i];
        if (!t) continue;
        if (y->dtype == KILN_DTYPE_UNDEFINED) y->dtype = t->dtype;
        if (t->dtype != y->dtype)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "input %d has dtype %s, input 0 has %s", i,
                                kiln_dtype_name(t->dtype), kiln_dtype_name(y->dtype));
        if (t->rank < 0) continue;
        if (rank >= 0 && t->rank != rank)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "inputs have different ranks (%d and %d)", rank,
                                t->rank);
        rank = t->rank;
    }
    y->rank = rank;
    if (rank < 0) return KILN_OK;
    if (rank == 0) return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "cannot concatenate scalars");
    int axis;
    KILN_TRY(kiln__norm_axis(a->node_name, at->axis, rank, &axis));
    for (int k = 0; k < rank; k++) y->dims[k] = KILN_DIM_UNKNOWN;
    int64_t sum = 0;
    bool sum_known = true, first = true;
    for (int i = 0; i < a->n_in; i++) {
        const kiln_tinfo *t = a->in[i];
        if (!t) continue;
        if (t->rank < 0) {
            sum_known = false;
            continue;
        }
        for (int k = 0; k < rank; k++) {
            if (k == axis) continue;
            if (first) {
                y->dims[k] = t->dims[k];
            } else {
                kiln_status s = kiln__tx_merge_dim(a->op->name, a->node_name, y->dims[k], t->dims[k],
                                                   &y->dims[k]);
                if (s != KILN_OK) {
                    char b1[160], b2[160];
                    return KILN_TX_FAIL(KILN_ERR_MODEL, a,
                                        "input %d has shape %s, incompatible with %s on axis %d", i,
                                        kiln__shape_str(t->rank, t->dims, b1, sizeof b1),
                                        kiln__shape_str(a->in[0]->rank, a->in[0]->dims, b2, sizeof b2),
                                        axis);
                }
            }
        }
        first = false;
        if (t->dims[axis] >= 0)
            KILN_TRY(kiln__dim_add(a->node_name, sum, t->dims[axis], &sum));
        else
            sum_known = false;
    }
    y->dims[axis] = sum_known ? sum : KILN_DIM_UNKNOWN;
    return KILN_OK;
}

static kiln_status concat_cpu(const kiln_kernel_args *a) {
    const kiln_axis_attrs *at = (const kiln_axis_attrs *)a->attrs;
    kiln_tensor *y = a->out[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, y->dtype, &es));
    int axis = at->axis < 0 ? at->axis + y->rank : at->axis;
    int64_t outer, inner;
    kiln__tx_outer_inner(y->rank, y->dims, axis, &outer, &inner);
    int64_t ochunk = y->dims[axis] * inner, off = 0;
    for (int i = 0; i < a->n_in; i++) {
        const kiln_tensor *t = a->in[i];
        if (!t) continue;
        int64_t chunk = t->dims[axis] * inner;
        if (chunk > 0 && outer > 0) {
            int64_t dims[2] = {outer, chunk}, dst[2] = {ochunk, 1}, src[2] = {chunk, 1};
            kiln__tx_copy(a->pool, es, 2, dims, (char *)y->data + (size_t)off * es, dst, t->data, src);
        }
        off += chunk;
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_Concat = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "Concat", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = -1, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_axis_attrs),
    .import = concat_import, .validate = kiln__tx_validate_axis, .infer = concat_infer, .cpu = concat_cpu,
};

/* ---- Split -------------------------------------------------------------------- */

static kiln_status split_import(kiln_import_ctx *ic, void *attrs) {
    kiln_split_attrs *at = (kiln_split_attrs *)attrs;
    KILN_TRY(kiln_attr_int32(ic, "axis", 0, &at->axis));
    KILN_TRY(kiln_attr_int32(ic, "num_outputs", 0, &at->num_outputs));
    if (kiln_import_opset(ic) < 13 && kiln_attr_has(ic, "split"))
        KILN_TRY(kiln__tx_ints_attr_to_input(ic, "split", 1));
    return KILN_OK;
}

/* Sizes of the outputs along the axis (dim d, maybe unknown). */
static kiln_status split_sizes(const kiln_infer_args *a, const kiln_tinfo *x, int axis,
                               const tx_ivec *sp, int64_t *sizes) {
    const kiln_split_attrs *at = (const kiln_split_attrs *)a->attrs;
    int n = a->n_out;
    int64_t d = x->dims[axis];
    if (sp->present) {
        if (sp->n >= 0 && sp->n != n)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "split has %lld entries for %d outputs",
                                (long long)sp->n, n);
        if (!sp->known) {
            for (int i = 0; i < n; i++) sizes[i] = KILN_DIM_UNKNOWN;
            return KILN_OK;
        }
        int64_t sum = 0;
        for (int i = 0; i < n; i++) {
            sizes[i] = ivec_at(sp, i);
            if (sizes[i] < 0)
                return KILN_TX_FAIL(KILN_ERR_MODEL, a, "split has negative entry %lld",
                                    (long long)sizes[i]);
            KILN_TRY(kiln__dim_add(a->node_name, sum, sizes[i], &sum));
        }
        if (d >= 0 && sum != d)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "split sizes sum to %lld, dimension %d is %lld",
                                (long long)sum, axis, (long long)d);
        return KILN_OK;
    }
    if (d < 0) {
        for (int i = 0; i < n; i++) sizes[i] = (n == 1) ? d : KILN_DIM_UNKNOWN;
        return KILN_OK;
    }
    if (at->num_outputs > 0) { /* opset 18: ceil-sized chunks, last smaller */
        int64_t c = (d + n - 1) / n;
        for (int i = 0; i < n; i++) sizes[i] = kiln__tx_max64(0, kiln__tx_min64(c, d - c * i));
        return KILN_OK;
    }
    if (d % n != 0)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "dimension %d (%lld) cannot be split evenly into %d",
                            axis, (long long)d, n);
    for (int i = 0; i < n; i++) sizes[i] = d / n;
    return KILN_OK;
}

/* axis in [-8, 7]; num_outputs (opset 18; 0 when absent) not negative */
static kiln_status split_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_split_attrs *at = (const kiln_split_attrs *)attrs;
    KILN_TRY(kiln__check_attr(op, node, "axis", at->axis, -KILN_MAX_RANK, KILN_MAX_RANK - 1));
    return kiln__check_attr(op, node, "num_outputs", at->num_outputs, 0, INT32_MAX);
}

static kiln_status split_infer(const kiln_infer_args *a) {
    const kiln_split_attrs *at = (const kiln_split_attrs *)a->attrs;
    const kiln_tinfo *x = a->in[0];
    tx_ivec sp = ivec_from_info(a, 1);
    for (int i = 0; i < a->n_out; i++) {
        a->out[i]->dtype = x->dtype;
        a->out[i]->rank = x->rank;
    }
    if (x->rank < 0) return KILN_OK;
    int axis;
    KILN_TRY(kiln__norm_axis(a->node_name, at->axis, x->rank, &axis));
    int64_t sizes[64];
    if (a->n_out > 64) return KILN_TX_FAIL(KILN_ERR_UNSUPPORTED, a, "%d outputs (at most 64)", a->n_out);
    KILN_TRY(split_sizes(a, x, axis, &sp, sizes));
    for (int i = 0; i < a->n_out; i++) {
        memcpy(a->out[i]->dims, x->dims, sizeof(int64_t) * (size_t)x->rank);
        a->out[i]->dims[axis] = sizes[i];
    }
    return KILN_OK;
}

static kiln_status split_cpu(const kiln_kernel_args *a) {
    const kiln_split_attrs *at = (const kiln_split_attrs *)a->attrs;
    const kiln_tensor *x = a->in[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    int axis = at->axis < 0 ? at->axis + x->rank : at->axis;
    int64_t outer, inner;
    kiln__tx_outer_inner(x->rank, x->dims, axis, &outer, &inner);
    int64_t xchunk = x->dims[axis] * inner, off = 0;
    for (int i = 0; i < a->n_out; i++) {
        kiln_tensor *t = a->out[i];
        int64_t chunk = t->dims[axis] * inner;
        if (chunk > 0 && outer > 0 && t->data) {
            int64_t dims[2] = {outer, chunk}, dst[2] = {chunk, 1}, src[2] = {xchunk, 1};
            kiln__tx_copy(a->pool, es, 2, dims, t->data, dst, (const char *)x->data + (size_t)off * es,
                          src);
        }
        off += chunk;
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_Split = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "Split", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = -1,
    .attr_size = sizeof(kiln_split_attrs),
    .host_inputs = 1u << 1,
    .import = split_import, .validate = split_validate, .infer = split_infer, .cpu = split_cpu,
};

/* ---- Slice ---------------------------------------------------------------------- */

static kiln_status slice_import(kiln_import_ctx *ic, void *attrs) {
    (void)attrs;
    if (kiln_import_opset(ic) < 10) {
        if (!kiln_attr_has(ic, "starts") || !kiln_attr_has(ic, "ends"))
            return KILN_IMPORT_FAIL(ic, "attributes 'starts' and 'ends' are required before opset 10");
        KILN_TRY(kiln__tx_ints_attr_to_input(ic, "starts", 1));
        KILN_TRY(kiln__tx_ints_attr_to_input(ic, "ends", 2));
        KILN_TRY(kiln__tx_ints_attr_to_input(ic, "axes", 3));
    }
    return KILN_OK;
}

/* Per-axis slice parameters. */
typedef struct tx_slice {
    int64_t start[KILN_MAX_RANK], step[KILN_MAX_RANK], len[KILN_MAX_RANK];
    bool sliced[KILN_MAX_RANK];
} tx_slice;

/* Computes the slice of `rank`/`dims` (dims may be unknown at build time:
 * len is then KILN_DIM_UNKNOWN unless the slice keeps the whole axis). */
static kiln_status slice_params(const kiln_infer_args *ia, const kiln_kernel_args *ka, int rank,
                                const int64_t *dims, const tx_ivec *st, const tx_ivec *en,
                                const tx_ivec *ax, const tx_ivec *sp, tx_slice *s) {
    const char *node = ia ? ia->node_name : ka->node_name;
    int64_t n = st->n;
    if (en->n != n || (ax->present && ax->n != n) || (sp->present && sp->n != n))
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (Slice): starts, ends, axes and steps must have the same length",
                         node);
    for (int k = 0; k < rank; k++) {
        s->start[k] = 0;
        s->step[k] = 1;
        s->len[k] = dims[k];
        s->sliced[k] = false;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t axis = ax->present ? ivec_at(ax, i) : i;
        if (axis < -rank || axis >= rank)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Slice): axis %lld is out of range for rank %d",
                             node, (long long)axis, rank);
        if (axis < 0) axis += rank;
        if (s->sliced[axis])
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Slice): axis %lld is repeated", node,
                             (long long)axis);
        s->sliced[axis] = true;
        int64_t b = ivec_at(st, i), e = ivec_at(en, i), step = sp->present ? ivec_at(sp, i) : 1;
        if (step == 0) return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Slice): step is 0", node);
        int64_t d = dims[axis];
        if (d < 0) {
            /* Whole-axis slice keeps a symbolic dim. */
            s->len[axis] = (b == 0 && step == 1 && e >= (int64_t)INT32_MAX) ? d : KILN_DIM_UNKNOWN;
            s->start[axis] = 0;
            s->step[axis] = step;
            continue;
        }
        if (b < 0) b += d; /* no overflow: d >= 0 */
        if (e < 0) e += d;
        int64_t len;
        /* written so that no step (up to INT64_MIN, whose negation
         * overflows) and no start or end overflows: d <= 2^48 */
        if (step > 0) {
            b = kiln__tx_max64(0, kiln__tx_min64(b, d));
            e = kiln__tx_max64(0, kiln__tx_min64(e, d));
            len = e > b ? (e - b - 1) / step + 1 : 0;
        } else {
            b = kiln__tx_max64(-1, kiln__tx_min64(b, d - 1));
            e = kiln__tx_max64(-1, kiln__tx_min64(e, d - 1));
            len = b > e ? (int64_t)((uint64_t)(b - e - 1) / (0 - (uint64_t)step)) + 1 : 0;
        }
        s->start[axis] = b;
        /* one element or none: the step does not matter (and a huge one
         * would overflow the kernel's stride arithmetic) */
        s->step[axis] = len > 1 ? step : 1;
        s->len[axis] = len;
    }
    return KILN_OK;
}

static kiln_status slice_infer(const kiln_infer_args *a) {
    const kiln_tinfo *x = a->in[0];
    kiln_tinfo *y = a->out[0];
    y->dtype = x->dtype;
    y->rank = x->rank;
    if (x->rank < 0) return KILN_OK;
    tx_ivec st = ivec_from_info(a, 1), en = ivec_from_info(a, 2), ax = ivec_from_info(a, 3),
            sp = ivec_from_info(a, 4);
    int64_t n;
    KILN_TRY(kiln__tx_int_vector(a, 1, "starts", false, &n));
    KILN_TRY(kiln__tx_int_vector(a, 2, "ends", false, &n));
    if (ax.present) KILN_TRY(kiln__tx_int_vector(a, 3, "axes", false, &n));
    if (sp.present) KILN_TRY(kiln__tx_int_vector(a, 4, "steps", false, &n));
    if (!st.known || !en.known || (ax.present && !ax.known) || (sp.present && !sp.known)) {
        /* Only axes known: the others keep their dims. */
        bool touched[KILN_MAX_RANK];
        for (int k = 0; k < x->rank; k++) touched[k] = !ax.present || !ax.known;
        if (ax.present && ax.known)
            for (int64_t i = 0; i < ax.n; i++) {
                int64_t v = ivec_at(&ax, i);
                if (v < 0) v += x->rank;
                if (v >= 0 && v < x->rank) touched[v] = true;
            }
        if (!ax.present && st.n >= 0)
            for (int k = 0; k < x->rank; k++) touched[k] = k < st.n;
        for (int k = 0; k < x->rank; k++) y->dims[k] = touched[k] ? KILN_DIM_UNKNOWN : x->dims[k];
        return KILN_OK;
    }
    tx_slice s;
    KILN_TRY(slice_params(a, NULL, x->rank, x->dims, &st, &en, &ax, &sp, &s));
    for (int k = 0; k < x->rank; k++) y->dims[k] = s.len[k];
    return KILN_OK;
}

static kiln_status slice_cpu(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    tx_ivec st = ivec_from_tensor(a, 1), en = ivec_from_tensor(a, 2), ax = ivec_from_tensor(a, 3),
            sp = ivec_from_tensor(a, 4);
    tx_slice s;
    KILN_TRY(slice_params(NULL, a, x->rank, x->dims, &st, &en, &ax, &sp, &s));
    int64_t xst[KILN_MAX_RANK], sst[KILN_MAX_RANK], dst[KILN_MAX_RANK];
    kiln__tx_strides(x->rank, x->dims, xst);
    kiln__tx_strides(a->out[0]->rank, a->out[0]->dims, dst);
    int64_t off = 0;
    for (int k = 0; k < x->rank; k++) {
        if (s.len[k] != a->out[0]->dims[k])
            return KILN_TX_FAIL0(KILN_ERR_INTERNAL, a, "output shape does not match the slice");
        if (s.len[k] == 0) return KILN_OK;
        off += s.start[k] * xst[k];
        sst[k] = s.step[k] * xst[k];
    }
    kiln__tx_copy(a->pool, es, x->rank, a->out[0]->dims, a->out[0]->data, dst,
                  (const char *)x->data + (size_t)off * es, sst);
    return KILN_OK;
}

const kiln_op_def kiln_op_Slice = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "Slice", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 5, .min_outputs = 1, .max_outputs = 1,
    .host_inputs = (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4),
    .import = slice_import, .infer = slice_infer, .cpu = slice_cpu,
};

/* ---- Expand --------------------------------------------------------------------- */

static kiln_status expand_infer(const kiln_infer_args *a) {
    const kiln_tinfo *x = a->in[0];
    kiln_tinfo *y = a->out[0];
    int64_t n;
    KILN_TRY(kiln__tx_int_vector(a, 1, "shape", true, &n));
    y->dtype = x->dtype;
    if (n > KILN_MAX_RANK)
        return KILN_TX_FAIL(KILN_ERR_UNSUPPORTED, a, "target rank %lld exceeds %d", (long long)n,
                            KILN_MAX_RANK);
    if (x->rank < 0 || n < 0) {
        y->rank = -1;
        return KILN_OK;
    }
    const kiln_tinfo *s = a->in[1];
    if (!s->data) {
        int r = x->rank > (int)n ? x->rank : (int)n;
        y->rank = r;
        for (int k = 0; k < r; k++) {
            int kx = k - (r - x->rank);
            y->dims[k] = (kx >= 0 && x->dims[kx] >= 0 && x->dims[kx] != 1) ? x->dims[kx]
                                                                           : KILN_DIM_UNKNOWN;
        }
        return KILN_OK;
    }
    kiln_tinfo t;
    memset(&t, 0, sizeof t);
    t.dtype = x->dtype;
    t.rank = (int)n;
    for (int k = 0; k < (int)n; k++) {
        t.dims[k] = kiln__tinfo_int(s, k);
        if (t.dims[k] < 0)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "shape has negative entry %lld",
                                (long long)t.dims[k]);
    }
    const kiln_tinfo *pair[2] = {x, &t};
    kiln_status st = kiln__broadcast_shapes(a->node_name, 2, pair, y);
    if (st != KILN_OK) {
        char b1[160], b2[160];
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "cannot expand %s to %s",
                            kiln__shape_str(x->rank, x->dims, b1, sizeof b1),
                            kiln__shape_str(t.rank, t.dims, b2, sizeof b2));
    }
    y->dtype = x->dtype;
    return KILN_OK;
}

static kiln_status expand_cpu(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    int64_t sst[KILN_MAX_RANK], dst[KILN_MAX_RANK];
    kiln__bcast_strides(x->rank, x->dims, y->rank, y->dims, sst);
    kiln__tx_strides(y->rank, y->dims, dst);
    kiln__tx_copy(a->pool, es, y->rank, y->dims, y->data, dst, x->data, sst);
    return KILN_OK;
}

const kiln_op_def kiln_op_Expand = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "Expand", .domain = "", .since = 8,
    .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .host_inputs = 1u << 1,
    .infer = expand_infer, .cpu = expand_cpu,
};

/* ---- Tile ------------------------------------------------------------------------- */

static kiln_status tile_import(kiln_import_ctx *ic, void *attrs) {
    (void)attrs;
    if (kiln_import_opset(ic) < 6)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Tile): opset %lld form (tiles, axis) is not supported",
                         kiln_import_node_name(ic), (long long)kiln_import_opset(ic));
    return KILN_OK;
}

static kiln_status tile_infer(const kiln_infer_args *a) {
    const kiln_tinfo *x = a->in[0];
    kiln_tinfo *y = a->out[0];
    int64_t n;
    KILN_TRY(kiln__tx_int_vector(a, 1, "repeats", false, &n));
    y->dtype = x->dtype;
    y->rank = x->rank;
    if (x->rank < 0) return KILN_OK;
    if (n >= 0 && n != x->rank)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "repeats has %lld entries for an input of rank %d",
                            (long long)n, x->rank);
    const kiln_tinfo *r = a->in[1];
    for (int k = 0; k < x->rank; k++) {
        if (!r->data) {
            y->dims[k] = KILN_DIM_UNKNOWN;
            continue;
        }
        int64_t rep = kiln__tinfo_int(r, k);
        if (rep < 0)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "repeats has negative entry %lld", (long long)rep);
        KILN_TRY(tx_dim_mul(a->node_name, x->dims[k], rep, &y->dims[k]));
    }
    return KILN_OK;
}

static kiln_status tile_cpu(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    int64_t xst[KILN_MAX_RANK];
    kiln__tx_strides(x->rank, x->dims, xst);
    int64_t vd[KILN_TX_MAX_RANK], vs[KILN_TX_MAX_RANK], vdst[KILN_TX_MAX_RANK];
    int r = 0;
    for (int k = 0; k < x->rank; k++) {
        int64_t rep = x->dims[k] ? y->dims[k] / x->dims[k] : 0;
        vd[r] = rep;
        vs[r++] = 0;
        vd[r] = x->dims[k];
        vs[r++] = xst[k];
    }
    kiln__tx_strides(r, vd, vdst);
    kiln__tx_copy(a->pool, es, r, vd, y->data, vdst, x->data, vs);
    return KILN_OK;
}

const kiln_op_def kiln_op_Tile = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "Tile", .domain = "", .since = 1,
    .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .host_inputs = 1u << 1,
    .import = tile_import, .infer = tile_infer, .cpu = tile_cpu,
};
