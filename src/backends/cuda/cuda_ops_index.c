/* cuda_ops_index.c -- the "index" family on the GPU: ArgMax, ArgMin, TopK,
 * CumSum, GatherElements, GatherND, ScatterElements, Scatter, ScatterND,
 * OneHot, Trilu, Range, EyeLike, ConstantOfShape (kernels: k_index.cu).
 * The CPU kernels (src/ops/reduce_index.c, tensor_index.c, tensor_gen.c)
 * are the reference. Shapes come from the inferred outputs (TopK's k,
 * OneHot's depth, Range's length), so only parameters the kernels need as
 * numbers are read on the host: CumSum's axis, Range's start and delta
 * (all of them host inputs). Trilu's k is read by the kernel on the device. */
#if KILN_HAVE_CUDA

#include "backends/cuda/cuda_internal.h"
#include "ops/tensor_internal.h"

static bool es_ok(kiln_dtype t) {
    if (t == KILN_DTYPE_STRING || t == KILN_DTYPE_UNDEFINED) return false;
    size_t es = kiln_dtype_size(t);
    return es == 1 || es == 2 || es == 4 || es == 8;
}

static bool is_index_dtype(kiln_dtype t) { return t == KILN_DTYPE_INT32 || t == KILN_DTYPE_INT64; }

static kiln_status need_es(const kiln_kernel_args *a, kiln_dtype t, size_t *es) {
    if (!es_ok(t))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s has no CUDA kernel",
                         KCU_NODE(a), a->op->name, kiln_dtype_name(t));
    *es = kiln_dtype_size(t);
    return KILN_OK;
}

static kiln_status need_numeric(const kiln_kernel_args *a, kiln_dtype t) {
    if (!kcu_index_numeric(t))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s has no CUDA kernel",
                         KCU_NODE(a), a->op->name, kiln_dtype_name(t));
    return KILN_OK;
}

static kiln_status need_index(const kiln_kernel_args *a, const kiln_tensor *t, const char *what) {
    if (!is_index_dtype(t->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): %s of dtype %s (int32/int64 only)",
                         KCU_NODE(a), a->op->name, what, kiln_dtype_name(t->dtype));
    return KILN_OK;
}

static kiln_status axis_of(const kiln_kernel_args *a, int64_t axis, int rank, int *out) {
    if (rank < 1 || axis < -rank || axis >= rank)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): axis %lld is out of range for rank %d",
                         KCU_NODE(a), a->op->name, (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return KILN_OK;
}

/* ---- ArgMax / ArgMin ------------------------------------------------------------------- */

bool kiln__cu_argreduce_supports(const kiln_graph *g, const kiln_node *n) {
    return kcu_index_numeric(kiln__cu_in_dtype(g, n, 0)) &&
           kiln__cu_out_dtype(g, n, 0) == KILN_DTYPE_INT64;
}

kiln_status kiln__cu_argreduce_run(const kiln_kernel_args *a) {
    const kiln_argreduce_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    KILN_TRY(need_numeric(a, x->dtype));
    int ax = 0;
    KILN_TRY(axis_of(a, at->axis, x->rank, &ax));
    int64_t outer, inner, R = x->dims[ax];
    kiln__tx_outer_inner(x->rank, x->dims, ax, &outer, &inner);
    if (R == 0)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "node '%s' (%s): cannot reduce an empty axis",
                         KCU_NODE(a), a->op->name);
    KILN_CUDA_TRY(kcu_argreduce(kiln__op_id_of(a->op) == KILN_OP_ArgMax, at->select_last_index != 0, x->dtype,
                                x->data, a->out[0]->data, outer, R, inner, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- TopK ------------------------------------------------------------------------------------ */

/* device scratch one TopK launch may use (long rows sort in global memory) */
#define TOPK_SCRATCH_CAP ((size_t)64 << 20)

bool kiln__cu_topk_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype it = kiln__cu_out_dtype(g, n, 1);
    return kcu_index_numeric(kiln__cu_in_dtype(g, n, 0)) &&
           (it == KILN_DTYPE_UNDEFINED || it == KILN_DTYPE_INT64);
}

kiln_status kiln__cu_topk_run(const kiln_kernel_args *a) {
    const kiln_topk_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    kiln_tensor *v = a->out[0];
    kiln_tensor *ix = a->n_out > 1 ? a->out[1] : NULL;
    KILN_TRY(need_numeric(a, x->dtype));
    int ax = 0;
    KILN_TRY(axis_of(a, at->axis, x->rank, &ax));
    /* k is the inferred output extent along the axis: nothing to read */
    int64_t outer, inner, R = x->dims[ax], k = v->dims[ax];
    if (v->rank != x->rank || k < 0 || k > R)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "node '%s' (TopK): K = %lld is out of range for axis %d of size %lld",
                         KCU_NODE(a), (long long)k, ax, (long long)R);
    if (R >= INT32_MAX)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (TopK): axis of %lld elements (CUDA: < 2^31)",
                         KCU_NODE(a), (long long)R);
    kiln__tx_outer_inner(x->rank, x->dims, ax, &outer, &inner);
    if (k == 0 || outer * inner == 0) return KILN_OK;
    /* rows longer than KCU_TOPK_SHARED sort in device scratch: at most
     * TOPK_SCRATCH_CAP bytes at a time (groups of `outer` entries) */
    int64_t step = outer;
    size_t per = kcu_topk_scratch(1, R, inner);
    if (per > 0 && (size_t)outer * per > TOPK_SCRATCH_CAP)
        step = (int64_t)(TOPK_SCRATCH_CAP / per) > 0 ? (int64_t)(TOPK_SCRATCH_CAP / per) : 1;
    void *scratch = NULL;
    if (per) KILN_TRY(kiln__cuda_scratch(KCU_STATE(a), (size_t)step * per, &scratch, KCU_NODE(a)));
    size_t es = kiln_dtype_size(x->dtype);
    int64_t *ixd = ix && ix->data ? (int64_t *)ix->data : NULL;
    for (int64_t o = 0; o < outer; o += step) {
        int64_t no = outer - o < step ? outer - o : step;
        KILN_CUDA_TRY(kcu_topk(at->largest != 0, x->dtype,
                               (const char *)x->data + (size_t)(o * R * inner) * es,
                               (char *)v->data + (size_t)(o * k * inner) * es,
                               ixd ? ixd + o * k * inner : NULL, no, R, inner, k, scratch,
                               KCU_STREAM(a)),
                      KCU_NODE(a));
    }
    return KILN_OK;
}

/* ---- CumSum --------------------------------------------------------------------------------- */

bool kiln__cu_cumsum_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype at = kiln__cu_in_dtype(g, n, 1);
    return kcu_index_numeric(kiln__cu_in_dtype(g, n, 0)) &&
           (at == KILN_DTYPE_UNDEFINED || is_index_dtype(at));
}

kiln_status kiln__cu_cumsum_run(const kiln_kernel_args *a) {
    const kiln_cumsum_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    KILN_TRY(need_numeric(a, x->dtype));
    if (x->rank == 0)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (CumSum): input must have rank >= 1", KCU_NODE(a));
    int64_t axv[1], na = 0;
    KILN_TRY(kiln__cuda_read_ints(a, a->in[1], axv, 1, &na, "axis"));
    if (na != 1)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (CumSum): axis must be a scalar", KCU_NODE(a));
    int ax = 0;
    KILN_TRY(axis_of(a, axv[0], x->rank, &ax));
    int64_t outer, inner;
    kiln__tx_outer_inner(x->rank, x->dims, ax, &outer, &inner);
    KILN_CUDA_TRY(kcu_cumsum(x->dtype, at->exclusive != 0, at->reverse != 0, x->data,
                             a->out[0]->data, outer, x->dims[ax], inner, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- GatherElements, ScatterElements, Scatter ------------------------------------------------ */

/* geometry of GatherElements / ScatterElements: indices dims, data strides */
static kiln_status elems_plan(const kiln_kernel_args *a, int32_t axis_attr, const kiln_tensor *x,
                              const kiln_tensor *ind, kcu_elems *g) {
    KILN_TRY(need_index(a, ind, "indices"));
    int r = x->rank, axis = 0;
    if (ind->rank != r)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): data rank %d differs from indices rank %d",
                         KCU_NODE(a), a->op->name, r, ind->rank);
    KILN_TRY(axis_of(a, axis_attr, r, &axis));
    for (int k = 0; k < r; k++)
        if (k != axis && ind->dims[k] > x->dims[k])
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (%s): indices dimension %d (%lld) exceeds data's (%lld)",
                             KCU_NODE(a), a->op->name, k, (long long)ind->dims[k],
                             (long long)x->dims[k]);
    memset(g, 0, sizeof *g);
    g->rank = r;
    g->axis = axis;
    g->n = kiln__tensor_numel(ind);
    g->axis_dim = x->dims[axis];
    memcpy(g->idims, ind->dims, (size_t)r * sizeof ind->dims[0]);
    kiln__cuda_strides(r, x->dims, g->xst);
    return KILN_OK;
}

bool kiln__cu_gather_elements_supports(const kiln_graph *g, const kiln_node *n) {
    return es_ok(kiln__cu_in_dtype(g, n, 0)) && is_index_dtype(kiln__cu_in_dtype(g, n, 1));
}

kiln_status kiln__cu_gather_elements_run(const kiln_kernel_args *a) {
    const kiln_axis_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0], *ind = a->in[1];
    size_t es = 0;
    KILN_TRY(need_es(a, x->dtype, &es));
    kcu_elems g;
    KILN_TRY(elems_plan(a, at->axis, x, ind, &g));
    KILN_CUDA_TRY(kcu_gather_elements(es, ind->dtype, &g, x->data, ind->data, a->out[0]->data,
                                      KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

bool kiln__cu_scatter_elements_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_scatter_attrs *at = n->attrs;
    return at && kcu_scatter_has(kiln__cu_in_dtype(g, n, 0), at->reduction) &&
           is_index_dtype(kiln__cu_in_dtype(g, n, 1)) &&
           kiln__cu_in_dtype(g, n, 2) == kiln__cu_in_dtype(g, n, 0);
}

/* y <- x, then the scatter kernel updates y in place */
static kiln_status copy_data(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    return kiln__cuda_memcpy(a, a->out[0]->data, x->data,
                             (size_t)kiln__tensor_numel(x) * kiln_dtype_size(x->dtype));
}

/* The scatter kernels take the ops' reduction attribute as it is. */
_Static_assert((int)KCU_RED_NONE == (int)RED_NONE && (int)KCU_RED_ADD == (int)RED_ADD &&
                   (int)KCU_RED_MUL == (int)RED_MUL && (int)KCU_RED_MAX == (int)RED_MAX &&
                   (int)KCU_RED_MIN == (int)RED_MIN,
               "KCU_RED_* (cuda_index.h) must be the ops' RED_* (ops/tensor_internal.h)");

static kiln_status need_scatter(const kiln_kernel_args *a, kiln_dtype t, int red) {
    if (!kcu_scatter_has(t, red) || a->in[2]->dtype != t)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (%s): dtype %s (updates %s) with reduction %d has no CUDA kernel",
                         KCU_NODE(a), a->op->name, kiln_dtype_name(t),
                         kiln_dtype_name(a->in[2]->dtype), red);
    return KILN_OK;
}

kiln_status kiln__cu_scatter_elements_run(const kiln_kernel_args *a) {
    const kiln_scatter_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0], *ind = a->in[1], *upd = a->in[2];
    KILN_TRY(need_scatter(a, x->dtype, at->reduction));
    kcu_elems g;
    KILN_TRY(elems_plan(a, at->axis, x, ind, &g));
    if (kiln__tensor_numel(upd) != g.n)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): updates and indices differ in size",
                         KCU_NODE(a), a->op->name);
    KILN_TRY(copy_data(a));
    KILN_CUDA_TRY(kcu_scatter_elements(x->dtype, at->reduction, ind->dtype, &g, ind->data,
                                       upd->data, a->out[0]->data, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- GatherND, ScatterND ------------------------------------------------------------------- */

/* data [B..., D(m)..., S...], indices [B..., T..., m] (as the CPU kernel's nd_layout) */
static kiln_status nd_plan(const kiln_kernel_args *a, const kiln_tensor *x, const kiln_tensor *ind,
                           int b, kcu_nd *g) {
    if (ind->dtype != KILN_DTYPE_INT64)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): indices must be int64, not %s",
                         KCU_NODE(a), a->op->name, kiln_dtype_name(ind->dtype));
    if (ind->rank < 1 || b < 0 || b >= ind->rank || b > x->rank ||
        ind->dims[ind->rank - 1] > x->rank - b)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): invalid shapes (batch_dims %d, indices "
                         "rank %d, data rank %d)", KCU_NODE(a), a->op->name, b, ind->rank, x->rank);
    int64_t xst[KILN_MAX_RANK];
    kiln__cuda_strides(x->rank, x->dims, xst);
    memset(g, 0, sizeof *g);
    g->m = (int32_t)ind->dims[ind->rank - 1];
    g->B = 1;
    for (int k = 0; k < b; k++) g->B *= x->dims[k];
    g->T = 1;
    for (int k = b; k < ind->rank - 1; k++) g->T *= ind->dims[k];
    g->slice = 1;
    for (int k = b + g->m; k < x->rank; k++) g->slice *= x->dims[k];
    g->batch_stride = b > 0 ? xst[b - 1] : kiln__tensor_numel(x);
    for (int j = 0; j < g->m; j++) {
        g->dst[j] = xst[b + j];
        g->ddim[j] = x->dims[b + j];
    }
    return KILN_OK;
}

bool kiln__cu_gather_nd_supports(const kiln_graph *g, const kiln_node *n) {
    return es_ok(kiln__cu_in_dtype(g, n, 0)) && kiln__cu_in_dtype(g, n, 1) == KILN_DTYPE_INT64;
}

kiln_status kiln__cu_gather_nd_run(const kiln_kernel_args *a) {
    const kiln_gathernd_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0], *ind = a->in[1];
    size_t es = 0;
    KILN_TRY(need_es(a, x->dtype, &es));
    if (kiln__tensor_numel(a->out[0]) == 0) return KILN_OK;
    kcu_nd g;
    KILN_TRY(nd_plan(a, x, ind, at->batch_dims, &g));
    if (g.B * g.T * g.slice != kiln__tensor_numel(a->out[0]))
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (GatherND): output size does not match",
                         KCU_NODE(a));
    KILN_CUDA_TRY(kcu_gather_nd(es, &g, x->data, ind->data, a->out[0]->data, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

bool kiln__cu_scatter_nd_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_gathernd_attrs *at = n->attrs;
    return at && kcu_scatter_has(kiln__cu_in_dtype(g, n, 0), at->reduction) &&
           kiln__cu_in_dtype(g, n, 1) == KILN_DTYPE_INT64 &&
           kiln__cu_in_dtype(g, n, 2) == kiln__cu_in_dtype(g, n, 0);
}

kiln_status kiln__cu_scatter_nd_run(const kiln_kernel_args *a) {
    const kiln_gathernd_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0], *ind = a->in[1], *upd = a->in[2];
    KILN_TRY(need_scatter(a, x->dtype, at->reduction));
    kcu_nd g;
    KILN_TRY(nd_plan(a, x, ind, 0, &g));
    if (g.T * g.slice != kiln__tensor_numel(upd))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (ScatterND): updates do not fit data and indices",
                         KCU_NODE(a));
    KILN_TRY(copy_data(a));
    KILN_CUDA_TRY(kcu_scatter_nd(x->dtype, at->reduction, &g, ind->data, upd->data, a->out[0]->data,
                                 KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- OneHot ------------------------------------------------------------------------------- */

bool kiln__cu_onehot_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_out_dtype(g, n, 0);
    return es_ok(t) && is_index_dtype(kiln__cu_in_dtype(g, n, 0)) && kiln__cu_in_dtype(g, n, 2) == t;
}

kiln_status kiln__cu_onehot_run(const kiln_kernel_args *a) {
    const kiln_axis_attrs *at = a->attrs;
    const kiln_tensor *ind = a->in[0], *vals = a->in[2];
    kiln_tensor *y = a->out[0];
    size_t es = 0;
    KILN_TRY(need_es(a, y->dtype, &es));
    KILN_TRY(need_index(a, ind, "indices"));
    if (vals->dtype != y->dtype || kiln__tensor_numel(vals) != 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (OneHot): values must be two elements [off, on]",
                         KCU_NODE(a));
    int axis = 0;
    KILN_TRY(axis_of(a, at->axis, y->rank, &axis));
    int64_t outer, inner;
    kiln__tx_outer_inner(y->rank, y->dims, axis, &outer, &inner);
    if (outer * inner != kiln__tensor_numel(ind))
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (OneHot): output shape does not match the indices",
                         KCU_NODE(a));
    KILN_CUDA_TRY(kcu_onehot(es, ind->dtype, ind->data, vals->data, y->data, outer, y->dims[axis],
                             inner, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- Trilu ----------------------------------------------------------------------------------- */

bool kiln__cu_trilu_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype kt = kiln__cu_in_dtype(g, n, 1);
    return es_ok(kiln__cu_in_dtype(g, n, 0)) && (kt == KILN_DTYPE_UNDEFINED || is_index_dtype(kt));
}

kiln_status kiln__cu_trilu_run(const kiln_kernel_args *a) {
    const kiln_trilu_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    const kiln_tensor *kt = a->n_in > 1 ? a->in[1] : NULL;
    size_t es = 0;
    KILN_TRY(need_es(a, x->dtype, &es));
    if (x->rank < 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Trilu): input rank %d < 2", KCU_NODE(a), x->rank);
    int64_t k = 0;
    const void *k_dev = NULL;
    kiln_dtype k_t = KILN_DTYPE_INT64;
    if (kt && kt->data) {
        KILN_TRY(need_index(a, kt, "k"));
        if (kiln__tensor_numel(kt) != 1)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Trilu): k must be a scalar", KCU_NODE(a));
        k_t = kt->dtype;
        /* a device k is read by the kernel (no synchronization) */
        if (kiln__cuda_is_device_ptr(kt->data)) k_dev = kt->data;
        else k = kiln__load_i64(kt->dtype, kt->data, 0);
    }
    int64_t R = x->dims[x->rank - 2], C = x->dims[x->rank - 1];
    int64_t nmat = (R > 0 && C > 0) ? kiln__tensor_numel(x) / (R * C) : 0;
    KILN_CUDA_TRY(kcu_trilu(es, at->upper != 0, x->data, a->out[0]->data, nmat, R, C, k, k_dev, k_t,
                            KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- Range, EyeLike, ConstantOfShape -------------------------------------------------------- */

bool kiln__cu_range_supports(const kiln_graph *g, const kiln_node *n) {
    return kcu_index_numeric(kiln__cu_out_dtype(g, n, 0));
}

kiln_status kiln__cu_range_run(const kiln_kernel_args *a) {
    kiln_tensor *y = a->out[0];
    KILN_TRY(need_numeric(a, y->dtype));
    if (a->in[0]->dtype != y->dtype || a->in[2]->dtype != y->dtype)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Range): start, limit and delta must have the "
                         "output's dtype", KCU_NODE(a));
    /* the length is the inferred output's; start and delta are host inputs */
    double sf, df;
    int64_t si, di;
    KILN_TRY(kiln__cuda_read_scalar(a, a->in[0], &sf, &si));
    KILN_TRY(kiln__cuda_read_scalar(a, a->in[2], &df, &di));
    KILN_CUDA_TRY(kcu_range(y->dtype, y->data, y->rank == 1 ? y->dims[0] : 0, sf, df, si, di,
                            KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

bool kiln__cu_eyelike_supports(const kiln_graph *g, const kiln_node *n) {
    return es_ok(kiln__cu_out_dtype(g, n, 0));
}

kiln_status kiln__cu_eyelike_run(const kiln_kernel_args *a) {
    const kiln_eyelike_attrs *at = a->attrs;
    kiln_tensor *y = a->out[0];
    size_t es = 0;
    KILN_TRY(need_es(a, y->dtype, &es));
    if (y->rank != 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (EyeLike): output must be 2-D, not of rank %d",
                         KCU_NODE(a), y->rank);
    uint8_t one[8] = {0};
    kiln__store_f64(y->dtype, one, 0, 1.0);
    KILN_CUDA_TRY(kcu_eyelike(es, y->data, y->dims[0], y->dims[1], at->k, one, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

bool kiln__cu_const_of_shape_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_cos_attrs *at = n->attrs;
    return at && kiln__dtype_valid(at->dtype) && es_ok((kiln_dtype)at->dtype) &&
           kiln__cu_out_dtype(g, n, 0) == (kiln_dtype)at->dtype;
}

kiln_status kiln__cu_const_of_shape_run(const kiln_kernel_args *a) {
    const kiln_cos_attrs *at = a->attrs;
    kiln_tensor *y = a->out[0];
    size_t es = 0;
    KILN_TRY(need_es(a, y->dtype, &es));
    if (y->dtype != (kiln_dtype)at->dtype)
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (ConstantOfShape): output dtype %s, value %s",
                         KCU_NODE(a), kiln_dtype_name(y->dtype), kiln_dtype_name((kiln_dtype)at->dtype));
    KILN_CUDA_TRY(kcu_fill(es, y->data, kiln__tensor_numel(y), at->value, KCU_STREAM(a)), KCU_NODE(a));
    return KILN_OK;
}

#else
typedef int kiln_cuda_ops_index_disabled;
#endif
