/* cuda_ops_tensor.c -- data movement on the GPU: Reshape, Flatten, Squeeze,
 * Unsqueeze, Identity, Dropout (inference), Transpose, Concat, Split, Slice,
 * Expand, Tile, Gather. All are copies planned on the host (kiln__cuda_copy)
 * or the gather kernel (k_tensor.cu). Integer parameter inputs (Slice
 * starts..., Split sizes) are read on the host, wherever they live. */
#if KILN_HAVE_CUDA

#include "backends/cuda/cuda_internal.h"
#include "ops/tensor_internal.h"

/* dtypes kiln can move (everything with a size; no strings) */
static bool movable(kiln_dtype t) {
    return t != KILN_DTYPE_STRING && t != KILN_DTYPE_UNDEFINED && kiln_dtype_size(t) > 0;
}

static kiln_status esize(const kiln_kernel_args *a, kiln_dtype t, size_t *es) {
    if (!movable(t))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s has no CUDA kernel",
                         KCU_NODE(a), a->op->name, kiln_dtype_name(t));
    *es = kiln_dtype_size(t);
    return KILN_OK;
}

static bool in0_movable(const kiln_graph *g, const kiln_node *n) {
    return movable(kiln__cu_in_dtype(g, n, 0));
}

/* ---- copies: Reshape, Flatten, Squeeze, Unsqueeze, Identity ------------------------------ */

bool kiln__cu_copy_supports(const kiln_graph *g, const kiln_node *n) { return in0_movable(g, n); }

kiln_status kiln__cu_copy_run(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    size_t es = 0;
    KILN_TRY(esize(a, x->dtype, &es));
    int64_t n = kiln__tensor_numel(x);
    if (n != kiln__tensor_numel(y))
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (%s): output size differs from input size",
                         KCU_NODE(a), a->op->name);
    return kiln__cuda_memcpy(a, y->data, x->data, (size_t)n * es);
}

/* ---- Shape, Size (read the input's dims only: written by a kernel, nothing copied) ------- */

bool kiln__cu_shape_supports(const kiln_graph *g, const kiln_node *n) {
    return kiln__cu_out_dtype(g, n, 0) == KILN_DTYPE_INT64;
}

static kiln_status write_ints(const kiln_kernel_args *a, int n, const kcu_i64s *v) {
    kiln_tensor *y = a->out[0];
    if (y->dtype != KILN_DTYPE_INT64 || kiln__tensor_numel(y) != n)
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (%s): output is %s with %lld elements, expected %d",
                         KCU_NODE(a), a->op->name, kiln_dtype_name(y->dtype),
                         (long long)kiln__tensor_numel(y), n);
    KILN_CUDA_TRY(kcu_write_i64(y->data, n, v, KCU_STREAM(a)), KCU_NODE(a));
    return KILN_OK;
}

kiln_status kiln__cu_shape_run(const kiln_kernel_args *a) {
    const kiln_shape_attrs *at = a->attrs;
    int r = a->in[0]->rank;
    /* ONNX start/end: negative counts from the end, both clamped to [0, rank] */
    int64_t b = at ? at->start : 0, e = at && at->has_end ? at->end : r;
    if (b < 0) b += r;
    if (e < 0) e += r;
    b = b < 0 ? 0 : b > r ? r : b;
    e = e < b ? b : e > r ? r : e;
    kcu_i64s v;
    memset(&v, 0, sizeof v);
    for (int64_t k = b; k < e; k++) v.v[k - b] = a->in[0]->dims[k];
    return write_ints(a, (int)(e - b), &v);
}

bool kiln__cu_size_supports(const kiln_graph *g, const kiln_node *n) {
    return kiln__cu_out_dtype(g, n, 0) == KILN_DTYPE_INT64;
}

kiln_status kiln__cu_size_run(const kiln_kernel_args *a) {
    kcu_i64s v;
    memset(&v, 0, sizeof v);
    v.v[0] = kiln__tensor_numel(a->in[0]);
    return write_ints(a, 1, &v);
}

/* ---- Dropout (inference: a copy, and a mask of ones) ------------------------------------ */

bool kiln__cu_dropout_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype m = kiln__cu_out_dtype(g, n, 1);
    return in0_movable(g, n) && (m == KILN_DTYPE_UNDEFINED || m == KILN_DTYPE_BOOL ||
                                 kiln__cu_is_float(m));
}

kiln_status kiln__cu_dropout_run(const kiln_kernel_args *a) {
    const kiln_tensor *ratio = a->n_in > 1 ? a->in[1] : NULL;
    const kiln_tensor *train = a->n_in > 2 ? a->in[2] : NULL;
    if (train && train->data && kiln__tensor_numel(train) > 0) {
        double f, r = 0.5;
        int64_t i;
        KILN_TRY(kiln__cuda_read_scalar(a, train, &f, &i));
        if (f != 0.0) {
            if (ratio && ratio->data && kiln__tensor_numel(ratio) > 0)
                KILN_TRY(kiln__cuda_read_scalar(a, ratio, &r, &i));
            if (r != 0.0)
                return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                                 "node '%s' (Dropout): training_mode=true with a nonzero ratio "
                                 "(random dropout) is not supported",
                                 KCU_NODE(a));
        }
    }
    KILN_TRY(kiln__cu_copy_run(a));
    if (a->n_out > 1 && a->out[1] && a->out[1]->data) {
        kiln_tensor *m = a->out[1];
        int64_t n = kiln__tensor_numel(m);
        size_t es = 0;
        KILN_TRY(esize(a, m->dtype, &es));
        unsigned char one[8] = {0};
        if (m->dtype == KILN_DTYPE_BOOL) one[0] = 1;
        else kiln__store_f64(m->dtype, one, 0, 1.0);
        KILN_CUDA_TRY(kcu_fill(es, m->data, n, one, KCU_STREAM(a)), KCU_NODE(a));
    }
    return KILN_OK;
}

/* ---- Transpose ------------------------------------------------------------------------------ */

bool kiln__cu_transpose_supports(const kiln_graph *g, const kiln_node *n) {
    return in0_movable(g, n);
}

kiln_status kiln__cu_transpose_run(const kiln_kernel_args *a) {
    const kiln_transpose_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    size_t es = 0;
    KILN_TRY(esize(a, x->dtype, &es));
    if (at->n_perm != 0 && at->n_perm != x->rank)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Transpose): perm has %d entries for rank %d",
                         KCU_NODE(a), at->n_perm, x->rank);
    int64_t xst[KILN_MAX_RANK], sst[KILN_MAX_RANK];
    kiln__cuda_strides(x->rank, x->dims, xst);
    for (int k = 0; k < x->rank; k++) {
        int p = at->n_perm ? at->perm[k] : x->rank - 1 - k;
        if (p < 0 || p >= x->rank)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Transpose): perm is not a permutation",
                             KCU_NODE(a));
        sst[k] = xst[p];
    }
    return kiln__cuda_copy(a, es, y->rank, y->dims, y->data, NULL, x->data, sst);
}

/* ---- Concat, Split --------------------------------------------------------------------------- */

bool kiln__cu_concat_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_out_dtype(g, n, 0);
    for (int i = 0; i < n->n_in; i++) {
        kiln_dtype d = kiln__cu_in_dtype(g, n, i);
        if (d != KILN_DTYPE_UNDEFINED && d != t) return false;
    }
    return movable(t);
}

kiln_status kiln__cu_concat_run(const kiln_kernel_args *a) {
    const kiln_axis_attrs *at = a->attrs;
    kiln_tensor *y = a->out[0];
    size_t es = 0;
    KILN_TRY(esize(a, y->dtype, &es));
    int axis = at->axis < 0 ? at->axis + y->rank : at->axis;
    if (axis < 0 || axis >= y->rank)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Concat): axis %d out of range", KCU_NODE(a),
                         at->axis);
    int64_t outer, inner;
    kiln__tx_outer_inner(y->rank, y->dims, axis, &outer, &inner);
    int64_t ochunk = y->dims[axis] * inner, off = 0;
    for (int i = 0; i < a->n_in; i++) {
        const kiln_tensor *t = a->in[i];
        if (!t) continue;
        int64_t chunk = t->dims[axis] * inner;
        if (chunk > 0 && outer > 0) {
            int64_t dims[2] = {outer, chunk}, dst[2] = {ochunk, 1}, src[2] = {chunk, 1};
            KILN_TRY(kiln__cuda_copy(a, es, 2, dims, (char *)y->data + (size_t)off * es, dst,
                                     t->data, src));
        }
        off += chunk;
    }
    return KILN_OK;
}

bool kiln__cu_split_supports(const kiln_graph *g, const kiln_node *n) { return in0_movable(g, n); }

kiln_status kiln__cu_split_run(const kiln_kernel_args *a) {
    const kiln_split_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    size_t es = 0;
    KILN_TRY(esize(a, x->dtype, &es));
    int axis = at->axis < 0 ? at->axis + x->rank : at->axis;
    if (axis < 0 || axis >= x->rank)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Split): axis %d out of range", KCU_NODE(a),
                         at->axis);
    int64_t outer, inner;
    kiln__tx_outer_inner(x->rank, x->dims, axis, &outer, &inner);
    int64_t xchunk = x->dims[axis] * inner, off = 0;
    for (int i = 0; i < a->n_out; i++) {
        kiln_tensor *t = a->out[i];
        if (!t) continue;
        int64_t chunk = t->dims[axis] * inner;
        if (chunk > 0 && outer > 0 && t->data) {
            int64_t dims[2] = {outer, chunk}, dst[2] = {chunk, 1}, src[2] = {xchunk, 1};
            KILN_TRY(kiln__cuda_copy(a, es, 2, dims, t->data, dst,
                                     (const char *)x->data + (size_t)off * es, src));
        }
        off += chunk;
    }
    return KILN_OK;
}

/* ---- Slice ------------------------------------------------------------------------------------- */

bool kiln__cu_slice_supports(const kiln_graph *g, const kiln_node *n) { return in0_movable(g, n); }

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

kiln_status kiln__cu_slice_run(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    const char *node = KCU_NODE(a);
    size_t es = 0;
    KILN_TRY(esize(a, x->dtype, &es));
    int64_t st[KILN_MAX_RANK], en[KILN_MAX_RANK], ax[KILN_MAX_RANK], sp[KILN_MAX_RANK];
    int64_t ns, ne, nax = -1, nsp = -1;
    const kiln_tensor *tax = a->n_in > 3 ? a->in[3] : NULL, *tsp = a->n_in > 4 ? a->in[4] : NULL;
    KILN_TRY(kiln__cuda_read_ints(a, a->in[1], st, KILN_MAX_RANK, &ns, "starts"));
    KILN_TRY(kiln__cuda_read_ints(a, a->in[2], en, KILN_MAX_RANK, &ne, "ends"));
    if (tax) KILN_TRY(kiln__cuda_read_ints(a, tax, ax, KILN_MAX_RANK, &nax, "axes"));
    if (tsp) KILN_TRY(kiln__cuda_read_ints(a, tsp, sp, KILN_MAX_RANK, &nsp, "steps"));
    if (ne != ns || (tax && nax != ns) || (tsp && nsp != ns))
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (Slice): starts, ends, axes and steps must have the same length",
                         node);
    const int r = x->rank;
    int64_t start[KILN_MAX_RANK], step[KILN_MAX_RANK], len[KILN_MAX_RANK];
    bool seen[KILN_MAX_RANK] = {false};
    for (int k = 0; k < r; k++) {
        start[k] = 0;
        step[k] = 1;
        len[k] = x->dims[k];
    }
    for (int64_t i = 0; i < ns; i++) {
        int64_t axis = tax ? ax[i] : i;
        if (axis < -r || axis >= r)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Slice): axis %lld is out of range for rank %d",
                             node, (long long)axis, r);
        if (axis < 0) axis += r;
        if (seen[axis])
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Slice): axis %lld is repeated", node,
                             (long long)axis);
        seen[axis] = true;
        int64_t b = st[i], e = en[i], s = tsp ? sp[i] : 1, d = x->dims[axis], l;
        if (s == 0) return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Slice): step is 0", node);
        if (b < 0) b += d;
        if (e < 0) e += d;
        if (s > 0) {
            b = clamp64(b, 0, d);
            e = clamp64(e, 0, d);
            l = e > b ? (e - b + s - 1) / s : 0;
        } else {
            b = clamp64(b, -1, d - 1);
            e = clamp64(e, -1, d - 1);
            l = b > e ? (b - e + (-s) - 1) / (-s) : 0;
        }
        start[axis] = b;
        step[axis] = s;
        len[axis] = l;
    }
    int64_t xst[KILN_MAX_RANK], sst[KILN_MAX_RANK], off = 0;
    kiln__cuda_strides(r, x->dims, xst);
    for (int k = 0; k < r; k++) {
        if (len[k] != y->dims[k])
            return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (Slice): output shape does not match the slice",
                             node);
        if (len[k] == 0) return KILN_OK;
        off += start[k] * xst[k];
        sst[k] = step[k] * xst[k];
    }
    return kiln__cuda_copy(a, es, r, y->dims, y->data, NULL, (const char *)x->data + off * (int64_t)es,
                           sst);
}

/* ---- Expand, Tile ------------------------------------------------------------------------------- */

bool kiln__cu_expand_supports(const kiln_graph *g, const kiln_node *n) { return in0_movable(g, n); }

kiln_status kiln__cu_expand_run(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    size_t es = 0;
    KILN_TRY(esize(a, x->dtype, &es));
    int64_t sst[KILN_MAX_RANK];
    kiln__bcast_strides(x->rank, x->dims, y->rank, y->dims, sst);
    return kiln__cuda_copy(a, es, y->rank, y->dims, y->data, NULL, x->data, sst);
}

bool kiln__cu_tile_supports(const kiln_graph *g, const kiln_node *n) { return in0_movable(g, n); }

kiln_status kiln__cu_tile_run(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    size_t es = 0;
    KILN_TRY(esize(a, x->dtype, &es));
    int64_t xst[KILN_MAX_RANK];
    kiln__cuda_strides(x->rank, x->dims, xst);
    int64_t vd[KCU_COPY_MAX_RANK], vs[KCU_COPY_MAX_RANK];
    int r = 0;
    for (int k = 0; k < x->rank; k++) {
        vd[r] = x->dims[k] ? y->dims[k] / x->dims[k] : 0; /* repeats */
        vs[r++] = 0;
        vd[r] = x->dims[k];
        vs[r++] = xst[k];
    }
    return kiln__cuda_copy(a, es, r, vd, y->data, NULL, x->data, vs);
}

/* ---- Gather ------------------------------------------------------------------------------------- */

bool kiln__cu_gather_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype it = kiln__cu_in_dtype(g, n, 1);
    return in0_movable(g, n) && (it == KILN_DTYPE_INT32 || it == KILN_DTYPE_INT64);
}

kiln_status kiln__cu_gather_run(const kiln_kernel_args *a) {
    const kiln_axis_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0], *ind = a->in[1];
    size_t es = 0;
    KILN_TRY(esize(a, x->dtype, &es));
    if (ind->dtype != KILN_DTYPE_INT32 && ind->dtype != KILN_DTYPE_INT64)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Gather): indices of dtype %s",
                         KCU_NODE(a), kiln_dtype_name(ind->dtype));
    int axis = at->axis < 0 ? at->axis + x->rank : at->axis;
    if (axis < 0 || axis >= x->rank)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Gather): axis %d out of range", KCU_NODE(a),
                         at->axis);
    int64_t outer, inner;
    kiln__tx_outer_inner(x->rank, x->dims, axis, &outer, &inner);
    /* move whole rows in wider elements when they allow it */
    static const size_t widths[3] = {16, 8, 4};
    for (int w = 0; w < 3; w++) {
        size_t we = widths[w];
        if (we <= es || we % es) continue;
        int64_t f = (int64_t)(we / es);
        if (inner % f || (uintptr_t)x->data % we || (uintptr_t)a->out[0]->data % we) continue;
        inner /= f;
        es = we;
        break;
    }
    kiln_cuda_state *st = a->device_state;
    int tag = st ? kiln__cuda_oob_tag(st, a->node_name) : 0;
    KILN_CUDA_TRY(kcu_gather(es, ind->dtype, x->data, ind->data, a->out[0]->data, outer, x->dims[axis],
                             kiln__tensor_numel(ind), inner, st ? st->oob_dev : NULL, tag, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

#else
typedef int kiln_cuda_ops_tensor_disabled;
#endif
