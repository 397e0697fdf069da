/* tensor_index.c -- ops that read or write by index: Gather, GatherElements,
 * GatherND, ScatterElements (and the deprecated Scatter), ScatterND, OneHot. */
#include "ops/tensor_internal.h"

/* Checks that input i is an integer index tensor. */
static kiln_status tx_check_index_dtype(const kiln_infer_args *a, int i, const char *what) {
    kiln_dtype t = a->in[i]->dtype;
    if (t != KILN_DTYPE_INT64 && t != KILN_DTYPE_INT32)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "%s must be int32 or int64, not %s", what,
                            kiln_dtype_name(t));
    return KILN_OK;
}

/* Normalizes index v against dimension d (negative counts from the end). */
static inline bool tx_index_ok(int64_t *v, int64_t d) {
    if (*v < 0) *v += d;
    return *v >= 0 && *v < d;
}

static kiln_status tx_index_error(const kiln_kernel_args *a, int64_t v, int64_t d, int axis) {
    return KILN_TX_FAIL(KILN_ERR_MODEL, a, "index %lld is out of range for axis %d of size %lld",
                        (long long)v, axis, (long long)d);
}

static kiln_status axis0_import(kiln_import_ctx *ic, void *attrs) {
    return kiln_attr_int32(ic, "axis", 0, &((kiln_axis_attrs *)attrs)->axis);
}

/* ---- Gather ---------------------------------------------------------------- */

static kiln_status gather_infer(const kiln_infer_args *a) {
    const kiln_axis_attrs *at = (const kiln_axis_attrs *)a->attrs;
    const kiln_tinfo *x = a->in[0], *ind = a->in[1];
    kiln_tinfo *y = a->out[0];
    KILN_TRY(tx_check_index_dtype(a, 1, "indices"));
    y->dtype = x->dtype;
    if (x->rank < 0 || ind->rank < 0) {
        y->rank = -1;
        return KILN_OK;
    }
    if (x->rank == 0) return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "data must have rank >= 1");
    int axis;
    KILN_TRY(kiln__norm_axis(a->node_name, at->axis, x->rank, &axis));
    int r = x->rank + ind->rank - 1;
    if (r > KILN_MAX_RANK)
        return KILN_TX_FAIL(KILN_ERR_UNSUPPORTED, a, "output rank %d exceeds %d", r, KILN_MAX_RANK);
    y->rank = r;
    int j = 0;
    for (int k = 0; k < axis; k++) y->dims[j++] = x->dims[k];
    for (int k = 0; k < ind->rank; k++) y->dims[j++] = ind->dims[k];
    for (int k = axis + 1; k < x->rank; k++) y->dims[j++] = x->dims[k];
    return KILN_OK;
}

typedef struct gather_ctx {
    const char *x;
    char *y;
    const void *ind;
    kiln_dtype idt;
    int64_t N, A;
    size_t inner; /* bytes */
} gather_ctx;

static void gather_run(void *vctx, int64_t begin, int64_t end) {
    const gather_ctx *c = (const gather_ctx *)vctx;
    size_t inner = c->inner;
    for (int64_t u = begin; u < end; u++) {
        int64_t o = u / c->N, i = u % c->N;
        int64_t v = c->idt == KILN_DTYPE_INT64 ? ((const int64_t *)c->ind)[i]
                                                : ((const int32_t *)c->ind)[i];
        if (v < 0) v += c->A;
        const char *s = c->x + (size_t)(o * c->A + v) * inner;
        char *d = c->y + (size_t)u * inner;
        switch (inner) {
        case 4: memcpy(d, s, 4); break;
        case 8: memcpy(d, s, 8); break;
        default: memcpy(d, s, inner); break;
        }
    }
}

static kiln_status gather_cpu(const kiln_kernel_args *a) {
    const kiln_axis_attrs *at = (const kiln_axis_attrs *)a->attrs;
    const kiln_tensor *x = a->in[0], *ind = a->in[1];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    int axis = at->axis < 0 ? at->axis + x->rank : at->axis;
    int64_t outer, inner, A = x->dims[axis], N = kiln__tensor_numel(ind);
    kiln__tx_outer_inner(x->rank, x->dims, axis, &outer, &inner);
    for (int64_t i = 0; i < N; i++) {
        int64_t v = kiln__tx_tensor_int(ind, i);
        if (!tx_index_ok(&v, A)) return tx_index_error(a, kiln__tx_tensor_int(ind, i), A, axis);
    }
    if (outer * N == 0 || inner == 0) return KILN_OK;
    gather_ctx c = {(const char *)x->data, (char *)a->out[0]->data, ind->data, ind->dtype, N, A,
                    (size_t)inner * es};
    int64_t grain = KILN_TX_GRAIN_BYTES / (int64_t)(c.inner + 1) + 1;
    kiln__parallel_for(a->pool, outer * N, grain, gather_run, &c);
    return KILN_OK;
}

const kiln_op_def kiln_op_Gather = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "Gather", .domain = "", .since = 1,
    .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_axis_attrs),
    .import = axis0_import, .validate = kiln__tx_validate_axis, .infer = gather_infer, .cpu = gather_cpu,
};

/* ---- GatherElements -------------------------------------------------------- */

static kiln_status gather_el_infer(const kiln_infer_args *a) {
    const kiln_axis_attrs *at = (const kiln_axis_attrs *)a->attrs;
    const kiln_tinfo *x = a->in[0], *ind = a->in[1];
    KILN_TRY(tx_check_index_dtype(a, 1, "indices"));
    kiln__tinfo_copy_shape(a->out[0], ind);
    a->out[0]->dtype = x->dtype;
    if (x->rank >= 0 && ind->rank >= 0) {
        if (x->rank != ind->rank)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "data rank %d differs from indices rank %d", x->rank,
                                ind->rank);
        int axis;
        KILN_TRY(kiln__norm_axis(a->node_name, at->axis, x->rank, &axis));
    }
    return KILN_OK;
}

static kiln_status gather_el_cpu(const kiln_kernel_args *a) {
    const kiln_axis_attrs *at = (const kiln_axis_attrs *)a->attrs;
    const kiln_tensor *x = a->in[0], *ind = a->in[1];
    kiln_tensor *y = a->out[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    int r = x->rank, axis = at->axis < 0 ? at->axis + r : at->axis;
    int64_t xst[KILN_MAX_RANK], idx[KILN_MAX_RANK] = {0};
    kiln__tx_strides(r, x->dims, xst);
    int64_t n = kiln__tensor_numel(ind);
    for (int k = 0; k < r; k++)
        if (k != axis && ind->dims[k] > x->dims[k])
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "indices dimension %d (%lld) exceeds data's (%lld)", k,
                                (long long)ind->dims[k], (long long)x->dims[k]);
    int64_t base = 0; /* offset of idx in x without the axis component */
    for (int64_t i = 0; i < n; i++) {
        int64_t v = kiln__tx_tensor_int(ind, i), v0 = v;
        if (!tx_index_ok(&v, x->dims[axis])) return tx_index_error(a, v0, x->dims[axis], axis);
        memcpy((char *)y->data + (size_t)i * es, (const char *)x->data + (size_t)(base + v * xst[axis]) * es,
               es);
        for (int k = r - 1; k >= 0; k--) {
            idx[k]++;
            if (k != axis) base += xst[k];
            if (idx[k] < ind->dims[k]) break;
            if (k != axis) base -= xst[k] * ind->dims[k];
            idx[k] = 0;
        }
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_GatherElements = {
    .name = "GatherElements", .domain = "", .since = 11,
    .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_axis_attrs),
    .import = axis0_import, .validate = kiln__tx_validate_axis, .infer = gather_el_infer, .cpu = gather_el_cpu,
};

/* ---- GatherND ---------------------------------------------------------------- */

static kiln_status gathernd_import(kiln_import_ctx *ic, void *attrs) {
    kiln_gathernd_attrs *at = (kiln_gathernd_attrs *)attrs;
    return kiln_attr_int32(ic, "batch_dims", 0, &at->batch_dims);
}

/* GatherND: batch_dims in [0, 7] (the shape rule reads dims below it),
 * reduction unused (0). ScatterND: batch_dims 0, reduction a RED_*. */
static kiln_status nd_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_gathernd_attrs *at = (const kiln_gathernd_attrs *)attrs;
    bool scatter = !strcmp(op->name, "ScatterND");
    KILN_TRY(kiln__check_attr(op, node, "batch_dims", at->batch_dims, 0,
                              scatter ? 0 : KILN_MAX_RANK - 1));
    return kiln__check_attr(op, node, "reduction", at->reduction, scatter ? RED_NONE : 0,
                            scatter ? RED_MIN : 0);
}

static kiln_status gathernd_infer(const kiln_infer_args *a) {
    const kiln_gathernd_attrs *at = (const kiln_gathernd_attrs *)a->attrs;
    const kiln_tinfo *x = a->in[0], *ind = a->in[1];
    kiln_tinfo *y = a->out[0];
    if (ind->dtype != KILN_DTYPE_INT64)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "indices must be int64, not %s",
                            kiln_dtype_name(ind->dtype));
    y->dtype = x->dtype;
    int b = at->batch_dims;
    if (x->rank < 0 || ind->rank < 0 || ind->dims[ind->rank > 0 ? ind->rank - 1 : 0] < 0) {
        y->rank = -1;
        return KILN_OK;
    }
    if (ind->rank < 1 || x->rank < 1)
        return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "data and indices must have rank >= 1");
    int64_t m = ind->dims[ind->rank - 1];
    if (b >= ind->rank || b >= x->rank || m > x->rank - b)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a,
                            "invalid shapes: batch_dims %d, indices rank %d (last dim %lld), data rank %d",
                            b, ind->rank, (long long)m, x->rank);
    int r = ind->rank - 1 + x->rank - b - (int)m;
    if (r > KILN_MAX_RANK)
        return KILN_TX_FAIL(KILN_ERR_UNSUPPORTED, a, "output rank %d exceeds %d", r, KILN_MAX_RANK);
    y->rank = r;
    int j = 0;
    for (int k = 0; k < ind->rank - 1; k++) {
        y->dims[j] = ind->dims[k];
        if (k < b) KILN_TRY(kiln__tx_merge_dim(a->op->name, a->node_name, ind->dims[k], x->dims[k], &y->dims[j]));
        j++;
    }
    for (int k = b + (int)m; k < x->rank; k++) y->dims[j++] = x->dims[k];
    return KILN_OK;
}

/* Layout shared by GatherND and ScatterND: data [B..., D(m)..., S...],
 * indices [B..., T..., m]. */
typedef struct nd_layout {
    int64_t B, T, m, slice; /* batches, tuples per batch, tuple length, slice elements */
    int64_t batch_stride;   /* data elements per batch */
    int64_t dst[KILN_MAX_RANK], ddim[KILN_MAX_RANK]; /* strides/dims of the m indexed axes */
} nd_layout;

static void nd_make_layout(const kiln_tensor *x, const kiln_tensor *ind, int b, nd_layout *L) {
    int64_t xst[KILN_MAX_RANK];
    kiln__tx_strides(x->rank, x->dims, xst);
    L->m = ind->dims[ind->rank - 1];
    L->B = 1;
    for (int k = 0; k < b; k++) L->B *= x->dims[k];
    L->T = 1;
    for (int k = b; k < ind->rank - 1; k++) L->T *= ind->dims[k];
    L->slice = 1;
    for (int k = b + (int)L->m; k < x->rank; k++) L->slice *= x->dims[k];
    L->batch_stride = b > 0 ? xst[b - 1] : kiln__tensor_numel(x);
    for (int j = 0; j < L->m; j++) {
        L->dst[j] = xst[b + j];
        L->ddim[j] = x->dims[b + j];
    }
}

/* Element offset in data of tuple t of batch bi, or -1 (and *bad) if out of range. */
static int64_t nd_offset(const nd_layout *L, const int64_t *tuple, int64_t bi, int64_t *bad) {
    int64_t off = bi * L->batch_stride;
    for (int j = 0; j < L->m; j++) {
        int64_t v = tuple[j];
        if (!tx_index_ok(&v, L->ddim[j])) {
            *bad = tuple[j];
            return -1;
        }
        off += v * L->dst[j];
    }
    return off;
}

static kiln_status gathernd_cpu(const kiln_kernel_args *a) {
    const kiln_gathernd_attrs *at = (const kiln_gathernd_attrs *)a->attrs;
    const kiln_tensor *x = a->in[0], *ind = a->in[1];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    if (kiln__tensor_numel(a->out[0]) == 0) return KILN_OK;
    nd_layout L;
    nd_make_layout(x, ind, at->batch_dims, &L);
    const int64_t *iv = (const int64_t *)ind->data;
    char *y = (char *)a->out[0]->data;
    for (int64_t bi = 0; bi < L.B; bi++)
        for (int64_t t = 0; t < L.T; t++) {
            int64_t bad = 0, u = bi * L.T + t;
            int64_t off = nd_offset(&L, iv + u * L.m, bi, &bad);
            if (off < 0)
                return KILN_TX_FAIL(KILN_ERR_MODEL, a, "index %lld is out of range", (long long)bad);
            memcpy(y + (size_t)(u * L.slice) * es, (const char *)x->data + (size_t)off * es,
                   (size_t)L.slice * es);
        }
    return KILN_OK;
}

const kiln_op_def kiln_op_GatherND = {
    .name = "GatherND", .domain = "", .since = 11,
    .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_gathernd_attrs),
    .import = gathernd_import, .validate = nd_validate, .infer = gathernd_infer, .cpu = gathernd_cpu,
};

/* ---- reductions for the scatter ops ---------------------------------------------- */

static kiln_status tx_import_reduction(kiln_import_ctx *ic, int32_t *out) {
    const char *r = kiln_attr_string(ic, "reduction", "none");
    if (!strcmp(r, "none"))
        *out = RED_NONE;
    else if (!strcmp(r, "add"))
        *out = RED_ADD;
    else if (!strcmp(r, "mul"))
        *out = RED_MUL;
    else if (!strcmp(r, "max"))
        *out = RED_MAX;
    else if (!strcmp(r, "min"))
        *out = RED_MIN;
    else
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': reduction '%s' is not supported",
                         kiln_import_node_name(ic), r);
    return KILN_OK;
}

#define RED_APPLY(T, ACC, LOAD, STORE)                        \
    do {                                                      \
        T *d_ = (T *)dst;                                     \
        const T *s_ = (const T *)src;                         \
        for (int64_t i = 0; i < n; i++) {                     \
            ACC x_ = LOAD(d_[i]), u_ = LOAD(s_[i]), r_;       \
            switch (red) {                                    \
            case RED_ADD: r_ = x_ + u_; break;                \
            case RED_MUL: r_ = x_ * u_; break;                \
            case RED_MAX: r_ = x_ > u_ ? x_ : u_; break;      \
            default: r_ = x_ < u_ ? x_ : u_; break;           \
            }                                                 \
            d_[i] = STORE(r_);                                \
        }                                                     \
    } while (0)
#define RED_ID(v) (v)

/* dst[i] = dst[i] (red) src[i] for n contiguous elements. */
static void tx_reduce(kiln_dtype t, int red, void *dst, const void *src, int64_t n, size_t es) {
    if (red == RED_NONE) {
        memcpy(dst, src, (size_t)n * es);
        return;
    }
    switch (t) {
    case KILN_DTYPE_FLOAT32: RED_APPLY(float, float, RED_ID, RED_ID); break;
    case KILN_DTYPE_FLOAT64: RED_APPLY(double, double, RED_ID, RED_ID); break;
    case KILN_DTYPE_FLOAT16: RED_APPLY(uint16_t, float, kiln__f16_to_f32, kiln__f32_to_f16); break;
    case KILN_DTYPE_BFLOAT16: RED_APPLY(uint16_t, float, kiln__bf16_to_f32, kiln__f32_to_bf16); break;
    case KILN_DTYPE_INT8: RED_APPLY(int8_t, int64_t, RED_ID, (int8_t)); break;
    case KILN_DTYPE_UINT8: RED_APPLY(uint8_t, uint64_t, RED_ID, (uint8_t)); break;
    case KILN_DTYPE_INT16: RED_APPLY(int16_t, int64_t, RED_ID, (int16_t)); break;
    case KILN_DTYPE_UINT16: RED_APPLY(uint16_t, uint64_t, RED_ID, (uint16_t)); break;
    case KILN_DTYPE_INT32: RED_APPLY(int32_t, int64_t, RED_ID, (int32_t)); break;
    case KILN_DTYPE_UINT32: RED_APPLY(uint32_t, uint64_t, RED_ID, (uint32_t)); break;
    case KILN_DTYPE_INT64: {
        /* wrap-around arithmetic through uint64 for add/mul */
        int64_t *d_ = (int64_t *)dst;
        const int64_t *s_ = (const int64_t *)src;
        for (int64_t i = 0; i < n; i++) {
            int64_t x_ = d_[i], u_ = s_[i];
            switch (red) {
            case RED_ADD: d_[i] = (int64_t)((uint64_t)x_ + (uint64_t)u_); break;
            case RED_MUL: d_[i] = (int64_t)((uint64_t)x_ * (uint64_t)u_); break;
            case RED_MAX: d_[i] = x_ > u_ ? x_ : u_; break;
            default: d_[i] = x_ < u_ ? x_ : u_; break;
            }
        }
        break;
    }
    case KILN_DTYPE_UINT64: RED_APPLY(uint64_t, uint64_t, RED_ID, RED_ID); break;
    case KILN_DTYPE_BOOL: {
        uint8_t *d_ = (uint8_t *)dst;
        const uint8_t *s_ = (const uint8_t *)src;
        for (int64_t i = 0; i < n; i++) {
            bool x_ = d_[i] != 0, u_ = s_[i] != 0;
            d_[i] = (red == RED_ADD || red == RED_MAX) ? (x_ || u_) : (x_ && u_);
        }
        break;
    }
    default: break;
    }
}

/* ---- ScatterElements / Scatter ------------------------------------------------------ */

static kiln_status scatter_import(kiln_import_ctx *ic, void *attrs) {
    kiln_scatter_attrs *at = (kiln_scatter_attrs *)attrs;
    KILN_TRY(axis0_import(ic, attrs));
    return tx_import_reduction(ic, &at->reduction);
}

/* axis in [-8, 7], reduction a RED_* */
static kiln_status scatter_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_scatter_attrs *at = (const kiln_scatter_attrs *)attrs;
    KILN_TRY(kiln__check_attr(op, node, "axis", at->axis, -KILN_MAX_RANK, KILN_MAX_RANK - 1));
    return kiln__check_attr(op, node, "reduction", at->reduction, RED_NONE, RED_MIN);
}

static kiln_status scatter_el_infer(const kiln_infer_args *a) {
    const kiln_scatter_attrs *at = (const kiln_scatter_attrs *)a->attrs;
    const kiln_tinfo *x = a->in[0], *ind = a->in[1], *upd = a->in[2];
    KILN_TRY(tx_check_index_dtype(a, 1, "indices"));
    kiln__tinfo_copy_shape(a->out[0], x);
    if (upd->dtype != x->dtype)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "updates dtype %s differs from data dtype %s",
                            kiln_dtype_name(upd->dtype), kiln_dtype_name(x->dtype));
    if (x->rank >= 0 && ind->rank >= 0) {
        if (x->rank != ind->rank)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "data rank %d differs from indices rank %d", x->rank,
                                ind->rank);
        int axis;
        KILN_TRY(kiln__norm_axis(a->node_name, at->axis, x->rank, &axis));
    }
    if (ind->rank >= 0 && upd->rank >= 0) {
        char b1[160], b2[160];
        bool bad = ind->rank != upd->rank;
        for (int k = 0; !bad && k < ind->rank; k++)
            bad = ind->dims[k] >= 0 && upd->dims[k] >= 0 && ind->dims[k] != upd->dims[k];
        if (bad)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "indices shape %s differs from updates shape %s",
                                kiln__shape_str(ind->rank, ind->dims, b1, sizeof b1),
                                kiln__shape_str(upd->rank, upd->dims, b2, sizeof b2));
    }
    return KILN_OK;
}

static kiln_status scatter_el_cpu(const kiln_kernel_args *a) {
    const kiln_scatter_attrs *at = (const kiln_scatter_attrs *)a->attrs;
    const kiln_tensor *x = a->in[0], *ind = a->in[1], *upd = a->in[2];
    kiln_tensor *y = a->out[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    int r = x->rank, axis = at->axis < 0 ? at->axis + r : at->axis;
    kiln__tx_memcpy(a->pool, y->data, x->data, (size_t)kiln__tensor_numel(x) * es);
    for (int k = 0; k < r; k++)
        if (k != axis && ind->dims[k] > x->dims[k])
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "indices dimension %d (%lld) exceeds data's (%lld)", k,
                                (long long)ind->dims[k], (long long)x->dims[k]);
    int64_t xst[KILN_MAX_RANK], idx[KILN_MAX_RANK] = {0};
    kiln__tx_strides(r, x->dims, xst);
    int64_t n = kiln__tensor_numel(ind), base = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = kiln__tx_tensor_int(ind, i), v0 = v;
        if (!tx_index_ok(&v, x->dims[axis])) return tx_index_error(a, v0, x->dims[axis], axis);
        tx_reduce(x->dtype, at->reduction, (char *)y->data + (size_t)(base + v * xst[axis]) * es,
                  (const char *)upd->data + (size_t)i * es, 1, es);
        for (int k = r - 1; k >= 0; k--) {
            idx[k]++;
            if (k != axis) base += xst[k];
            if (idx[k] < ind->dims[k]) break;
            if (k != axis) base -= xst[k] * ind->dims[k];
            idx[k] = 0;
        }
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_ScatterElements = {
    .name = "ScatterElements", .domain = "", .since = 11,
    .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_scatter_attrs),
    .import = scatter_import, .validate = scatter_validate, .infer = scatter_el_infer, .cpu = scatter_el_cpu,
};

const kiln_op_def kiln_op_Scatter = {
    .name = "Scatter", .domain = "", .since = 9,
    .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_scatter_attrs),
    .import = scatter_import, .validate = scatter_validate, .infer = scatter_el_infer, .cpu = scatter_el_cpu,
};

/* ---- ScatterND ----------------------------------------------------------------------- */

static kiln_status scatternd_import(kiln_import_ctx *ic, void *attrs) {
    kiln_gathernd_attrs *at = (kiln_gathernd_attrs *)attrs;
    at->batch_dims = 0;
    return tx_import_reduction(ic, &at->reduction);
}

static kiln_status scatternd_infer(const kiln_infer_args *a) {
    const kiln_tinfo *x = a->in[0], *ind = a->in[1], *upd = a->in[2];
    kiln__tinfo_copy_shape(a->out[0], x);
    if (ind->dtype != KILN_DTYPE_INT64)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "indices must be int64, not %s",
                            kiln_dtype_name(ind->dtype));
    if (upd->dtype != x->dtype)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "updates dtype %s differs from data dtype %s",
                            kiln_dtype_name(upd->dtype), kiln_dtype_name(x->dtype));
    if (x->rank < 0 || ind->rank < 0 || upd->rank < 0) return KILN_OK;
    if (ind->rank < 1) return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "indices must have rank >= 1");
    int64_t m = ind->dims[ind->rank - 1];
    if (m < 0) return KILN_OK;
    char b1[160], b2[160], b3[160];
    bool bad = m > x->rank || upd->rank != ind->rank - 1 + x->rank - (int)m;
    for (int k = 0; !bad && k < upd->rank; k++) {
        int64_t want = k < ind->rank - 1 ? ind->dims[k] : x->dims[m + k - (ind->rank - 1)];
        bad = want >= 0 && upd->dims[k] >= 0 && want != upd->dims[k];
    }
    if (bad)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "updates shape %s does not fit data %s and indices %s",
                            kiln__shape_str(upd->rank, upd->dims, b1, sizeof b1),
                            kiln__shape_str(x->rank, x->dims, b2, sizeof b2),
                            kiln__shape_str(ind->rank, ind->dims, b3, sizeof b3));
    return KILN_OK;
}

static kiln_status scatternd_cpu(const kiln_kernel_args *a) {
    const kiln_gathernd_attrs *at = (const kiln_gathernd_attrs *)a->attrs;
    const kiln_tensor *x = a->in[0], *ind = a->in[1], *upd = a->in[2];
    kiln_tensor *y = a->out[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    kiln__tx_memcpy(a->pool, y->data, x->data, (size_t)kiln__tensor_numel(x) * es);
    nd_layout L;
    nd_make_layout(x, ind, 0, &L);
    const int64_t *iv = (const int64_t *)ind->data;
    for (int64_t t = 0; t < L.T; t++) {
        int64_t bad = 0;
        int64_t off = nd_offset(&L, iv + t * L.m, 0, &bad);
        if (off < 0) return KILN_TX_FAIL(KILN_ERR_MODEL, a, "index %lld is out of range", (long long)bad);
        tx_reduce(x->dtype, at->reduction, (char *)y->data + (size_t)off * es,
                  (const char *)upd->data + (size_t)(t * L.slice) * es, L.slice, es);
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_ScatterND = {
    .name = "ScatterND", .domain = "", .since = 11,
    .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_gathernd_attrs),
    .import = scatternd_import, .validate = nd_validate, .infer = scatternd_infer, .cpu = scatternd_cpu,
};

/* ---- OneHot ----------------------------------------------------------------------------- */

static kiln_status onehot_import(kiln_import_ctx *ic, void *attrs) {
    return kiln_attr_int32(ic, "axis", -1, &((kiln_axis_attrs *)attrs)->axis);
}

static int64_t onehot_depth(kiln_dtype t, const void *p) { return kiln__load_i64(t, p, 0); }

static kiln_status onehot_infer(const kiln_infer_args *a) {
    const kiln_axis_attrs *at = (const kiln_axis_attrs *)a->attrs;
    const kiln_tinfo *ind = a->in[0], *depth = a->in[1], *vals = a->in[2];
    kiln_tinfo *y = a->out[0];
    y->dtype = vals->dtype;
    if (vals->rank >= 0 && kiln__numel(vals->rank, vals->dims) >= 0 &&
        kiln__numel(vals->rank, vals->dims) != 2)
        return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "values must have two elements [off, on]");
    if (depth->rank > 1 || (depth->rank == 1 && depth->dims[0] >= 0 && depth->dims[0] != 1))
        return KILN_TX_FAIL0(KILN_ERR_MODEL, a, "depth must be a scalar");
    if (ind->rank < 0) {
        y->rank = -1;
        return KILN_OK;
    }
    int r = ind->rank + 1;
    if (r > KILN_MAX_RANK)
        return KILN_TX_FAIL(KILN_ERR_UNSUPPORTED, a, "output rank %d exceeds %d", r, KILN_MAX_RANK);
    int axis;
    KILN_TRY(kiln__norm_axis(a->node_name, at->axis, r, &axis));
    int64_t d = KILN_DIM_UNKNOWN;
    if (depth->data) {
        d = onehot_depth(depth->dtype, depth->data);
        if (d < 1) return KILN_TX_FAIL(KILN_ERR_MODEL, a, "depth %lld must be positive", (long long)d);
    }
    y->rank = r;
    int j = 0;
    for (int k = 0; k < r; k++) y->dims[k] = k == axis ? d : ind->dims[j++];
    return KILN_OK;
}

static kiln_status onehot_cpu(const kiln_kernel_args *a) {
    const kiln_axis_attrs *at = (const kiln_axis_attrs *)a->attrs;
    const kiln_tensor *ind = a->in[0], *vals = a->in[2];
    kiln_tensor *y = a->out[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, y->dtype, &es));
    int r = y->rank, axis = at->axis < 0 ? at->axis + r : at->axis;
    int64_t depth = y->dims[axis], outer, inner;
    kiln__tx_outer_inner(r, y->dims, axis, &outer, &inner);
    const char *off = (const char *)vals->data, *on = off + es;
    kiln__tx_fill(y->data, kiln__tensor_numel(y), off, es);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t p = o * inner + i;
            int64_t v = kiln__load_i64(ind->dtype, ind->data, p);
            if (v < 0) v += depth;
            if (v < 0 || v >= depth) continue;
            memcpy((char *)y->data + (size_t)((o * depth + v) * inner + i) * es, on, es);
        }
    return KILN_OK;
}

const kiln_op_def kiln_op_OneHot = {
    .name = "OneHot", .domain = "", .since = 9,
    .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_axis_attrs),
    .host_inputs = 1u << 1,
    .import = onehot_import, .validate = kiln__tx_validate_axis, .infer = onehot_infer, .cpu = onehot_cpu,
};
