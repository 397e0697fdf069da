/* tensor_select.c -- ops whose output shape depends on input values:
 * NonZero, Compress, Unique. Their run-time infer scans the data. */
#include "ops/tensor_internal.h"

/* ---- NonZero ------------------------------------------------------------ */

static int64_t tx_count_nonzero(kiln_dtype t, const void *p, int64_t n) {
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += kiln__tx_nonzero(t, p, i);
    return c;
}

static kiln_status nonzero_infer(const kiln_infer_args *a) {
    const kiln_tinfo *x = a->in[0];
    kiln_tinfo *y = a->out[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    y->dtype = KILN_DTYPE_INT64;
    y->rank = 2;
    y->dims[0] = x->rank >= 0 ? x->rank : KILN_DIM_UNKNOWN;
    y->dims[1] = KILN_DIM_UNKNOWN;
    int64_t n = kiln__numel(x->rank, x->dims);
    if (x->data && n >= 0) y->dims[1] = tx_count_nonzero(x->dtype, x->data, n);
    return KILN_OK;
}

static kiln_status nonzero_cpu(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    int r = x->rank;
    int64_t n = kiln__tensor_numel(x), nnz = y->dims[1], j = 0;
    int64_t idx[KILN_MAX_RANK] = {0};
    int64_t *o = (int64_t *)y->data;
    for (int64_t i = 0; i < n; i++) {
        if (kiln__tx_nonzero(x->dtype, x->data, i)) {
            if (j >= nnz) return KILN_TX_FAIL0(KILN_ERR_INTERNAL, a, "nonzero count changed");
            for (int k = 0; k < r; k++) o[k * nnz + j] = idx[k];
            j++;
        }
        for (int k = r - 1; k >= 0; k--) {
            if (++idx[k] < x->dims[k]) break;
            idx[k] = 0;
        }
    }
    if (j != nnz) return KILN_TX_FAIL0(KILN_ERR_INTERNAL, a, "nonzero count changed");
    return KILN_OK;
}

const kiln_op_def kiln_op_NonZero = {
    .name = "NonZero", .domain = "", .since = 9,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .host_inputs = 1u << 0,
    .infer = nonzero_infer, .cpu = nonzero_cpu,
};

/* ---- Compress ----------------------------------------------------------------- */

static kiln_status compress_import(kiln_import_ctx *ic, void *attrs) {
    kiln_axis_opt_attrs *at = (kiln_axis_opt_attrs *)attrs;
    at->has_axis = kiln_attr_has(ic, "axis");
    KILN_TRY(kiln_attr_int32(ic, "axis", 0, &at->axis));
    at->sorted = kiln_attr_int(ic, "sorted", 1) != 0;
    return KILN_OK;
}

/* has_axis and sorted 0 or 1, axis in [-8, 7] */
static kiln_status axis_opt_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_axis_opt_attrs *at = (const kiln_axis_opt_attrs *)attrs;
    KILN_TRY(kiln__check_attr(op, node, "has_axis", at->has_axis, 0, 1));
    KILN_TRY(kiln__check_attr(op, node, "axis", at->axis, -KILN_MAX_RANK, KILN_MAX_RANK - 1));
    return kiln__check_attr(op, node, "sorted", at->sorted, 0, 1);
}

static int64_t tx_count_true(const void *cond, int64_t n) {
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += ((const uint8_t *)cond)[i] != 0;
    return c;
}

static kiln_status compress_infer(const kiln_infer_args *a) {
    const kiln_axis_opt_attrs *at = (const kiln_axis_opt_attrs *)a->attrs;
    const kiln_tinfo *x = a->in[0], *c = a->in[1];
    kiln_tinfo *y = a->out[0];
    if (c->dtype != KILN_DTYPE_BOOL)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "condition must be bool, not %s", kiln_dtype_name(c->dtype));
    if (c->rank >= 0 && c->rank != 1)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "condition must be 1-D, not of rank %d", c->rank);
    y->dtype = x->dtype;
    int64_t clen = c->rank == 1 ? c->dims[0] : -1;
    int64_t len; /* length along the compressed axis */
    int axis = 0;
    if (!at->has_axis) {
        y->rank = 1;
        len = kiln__numel(x->rank, x->dims);
    } else {
        if (x->rank < 0) {
            y->rank = -1;
            return KILN_OK;
        }
        KILN_TRY(kiln__norm_axis(a->node_name, at->axis, x->rank, &axis));
        kiln__tinfo_copy_shape(y, x);
        len = x->dims[axis];
    }
    int64_t d = KILN_DIM_UNKNOWN;
    if (clen >= 0 && len >= 0) {
        if (clen > len)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "condition has %lld entries, more than %lld",
                                (long long)clen, (long long)len);
        if (c->data) d = tx_count_true(c->data, clen);
    }
    y->dims[axis] = d;
    return KILN_OK;
}

static kiln_status compress_cpu(const kiln_kernel_args *a) {
    const kiln_axis_opt_attrs *at = (const kiln_axis_opt_attrs *)a->attrs;
    const kiln_tensor *x = a->in[0], *c = a->in[1];
    kiln_tensor *y = a->out[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    const uint8_t *cv = (const uint8_t *)c->data;
    int64_t clen = c->dims[0];
    int64_t outer = 1, inner = 1, len = kiln__tensor_numel(x);
    if (at->has_axis) {
        int axis = at->axis < 0 ? at->axis + x->rank : at->axis;
        kiln__tx_outer_inner(x->rank, x->dims, axis, &outer, &inner);
        len = x->dims[axis];
    }
    int64_t cnt = tx_count_true(cv, clen);
    size_t blk = (size_t)inner * es;
    char *dst = (char *)y->data;
    for (int64_t o = 0; o < outer; o++) {
        int64_t j = 0;
        for (int64_t i = 0; i < clen; i++) {
            if (!cv[i]) continue;
            memcpy(dst + (size_t)(o * cnt + j) * blk, (const char *)x->data + (size_t)(o * len + i) * blk,
                   blk);
            j++;
        }
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_Compress = {
    .name = "Compress", .domain = "", .since = 9,
    .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_axis_opt_attrs),
    .host_inputs = 1u << 1,
    .import = compress_import, .validate = axis_opt_validate, .infer = compress_infer, .cpu = compress_cpu,
};

/* ---- Unique ------------------------------------------------------------------------ */

/* Total order on elements: by value; NaN after everything and equal to NaN. */
static int tx_cmp_elem(kiln_dtype t, const void *p, int64_t i, int64_t j) {
    if (kiln__dtype_is_float(t)) {
        double a = kiln__load_f64(t, p, i), b = kiln__load_f64(t, p, j);
        bool na = a != a, nb = b != b;
        if (na || nb) return na == nb ? 0 : (na ? 1 : -1);
        return a < b ? -1 : (a > b ? 1 : 0);
    }
    if (t == KILN_DTYPE_UINT64) {
        uint64_t a = ((const uint64_t *)p)[i], b = ((const uint64_t *)p)[j];
        return a < b ? -1 : (a > b ? 1 : 0);
    }
    int64_t a = kiln__load_i64(t, p, i), b = kiln__load_i64(t, p, j);
    return a < b ? -1 : (a > b ? 1 : 0);
}

typedef struct uniq {
    int64_t N, U, isz;    /* items, unique items, elements per item */
    void *items;          /* item-major copy of the input (or NULL: the input itself) */
    const void *base;
    int64_t *first;       /* [U] first occurrence, in output order */
    int64_t *count;       /* [U] */
    int64_t *inv;         /* [N] output group of each item */
} uniq;

static int uniq_cmp(kiln_dtype t, const uniq *q, int64_t i, int64_t j) {
    for (int64_t e = 0; e < q->isz; e++) {
        int c = tx_cmp_elem(t, q->base, i * q->isz + e, j * q->isz + e);
        if (c) return c;
    }
    return 0;
}

/* Stable merge sort of idx[0..n) by item value. */
static void uniq_sort(kiln_dtype t, const uniq *q, int64_t *idx, int64_t *tmp, int64_t n) {
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = kiln__tx_min64(lo + w, n), hi = kiln__tx_min64(lo + 2 * w, n);
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) tmp[k++] = uniq_cmp(t, q, idx[j], idx[i]) < 0 ? idx[j++] : idx[i++];
            while (i < mid) tmp[k++] = idx[i++];
            while (j < hi) tmp[k++] = idx[j++];
        }
        memcpy(idx, tmp, sizeof(int64_t) * (size_t)n);
    }
}

static void uniq_free(uniq *q) {
    kiln__free(q->items);
    kiln__free(q->first);
    kiln__free(q->count);
    kiln__free(q->inv);
    memset(q, 0, sizeof *q);
}

static void uniq_sort_i64(int64_t *key, int64_t *val, int64_t *tk, int64_t *tv, int64_t n) {
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = kiln__tx_min64(lo + w, n), hi = kiln__tx_min64(lo + 2 * w, n);
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                if (key[j] < key[i]) {
                    tk[k] = key[j];
                    tv[k++] = val[j++];
                } else {
                    tk[k] = key[i];
                    tv[k++] = val[i++];
                }
            }
            while (i < mid) {
                tk[k] = key[i];
                tv[k++] = val[i++];
            }
            while (j < hi) {
                tk[k] = key[j];
                tv[k++] = val[j++];
            }
        }
        memcpy(key, tk, sizeof(int64_t) * (size_t)n);
        memcpy(val, tv, sizeof(int64_t) * (size_t)n);
    }
}

/* Computes the unique items of x (rank/dims/data), along `axis` (-1: flattened). */
static kiln_status uniq_compute(const char *node, kiln_dtype t, int rank, const int64_t *dims,
                                const void *data, int axis, bool sorted, uniq *q) {
    memset(q, 0, sizeof *q);
    size_t es = kiln_dtype_size(t);
    int64_t n = kiln__numel(rank, dims);
    if (axis < 0) {
        q->N = n;
        q->isz = 1;
        q->base = data;
    } else {
        int64_t outer, inner, A = dims[axis];
        kiln__tx_outer_inner(rank, dims, axis, &outer, &inner);
        q->N = A;
        q->isz = outer * inner;
        q->items = kiln__malloc((size_t)n * es);
        if (!q->items) goto oom;
        int64_t vd[3] = {A, outer, inner}, ss[3] = {inner, A * inner, 1}, ds[3] = {outer * inner, inner, 1};
        kiln__tx_copy(NULL, es, 3, vd, q->items, ds, data, ss);
        q->base = q->items;
    }
    int64_t N = q->N;
    int64_t *perm = (int64_t *)kiln__malloc(sizeof(int64_t) * (size_t)(N + 1));
    int64_t *tmp = (int64_t *)kiln__malloc(sizeof(int64_t) * (size_t)(N + 1));
    q->inv = (int64_t *)kiln__malloc(sizeof(int64_t) * (size_t)(N + 1));
    q->first = (int64_t *)kiln__malloc(sizeof(int64_t) * (size_t)(N + 1));
    q->count = (int64_t *)kiln__malloc(sizeof(int64_t) * (size_t)(N + 1));
    if (!perm || !tmp || !q->inv || !q->first || !q->count) {
        kiln__free(perm);
        kiln__free(tmp);
        goto oom;
    }
    for (int64_t i = 0; i < N; i++) perm[i] = i;
    uniq_sort(t, q, perm, tmp, N);
    int64_t U = 0;
    for (int64_t k = 0; k < N; k++) {
        if (k == 0 || uniq_cmp(t, q, perm[k - 1], perm[k]) != 0) {
            q->first[U] = perm[k];
            q->count[U] = 0;
            U++;
        }
        q->count[U - 1]++;
        q->inv[perm[k]] = U - 1;
    }
    q->U = U;
    if (!sorted && U > 1) {
        /* Reorder groups by first occurrence. perm: group ids, tmp: new position of group. */
        int64_t *key = (int64_t *)kiln__malloc(sizeof(int64_t) * (size_t)U * 4);
        if (!key) {
            kiln__free(perm);
            kiln__free(tmp);
            goto oom;
        }
        int64_t *val = key + U, *tk = key + 2 * U, *tv = key + 3 * U;
        for (int64_t g = 0; g < U; g++) {
            key[g] = q->first[g];
            val[g] = g;
        }
        uniq_sort_i64(key, val, tk, tv, U);
        /* val[newpos] = old group */
        for (int64_t p = 0; p < U; p++) tmp[val[p]] = p;
        for (int64_t p = 0; p < U; p++) perm[p] = q->count[val[p]];
        for (int64_t p = 0; p < U; p++) {
            q->first[p] = key[p];
            q->count[p] = perm[p];
        }
        for (int64_t i = 0; i < N; i++) q->inv[i] = tmp[q->inv[i]];
        kiln__free(key);
    }
    kiln__free(perm);
    kiln__free(tmp);
    return KILN_OK;
oom:
    uniq_free(q);
    return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (Unique): out of memory", node ? node : "?");
}

static kiln_status unique_infer(const kiln_infer_args *a) {
    const kiln_axis_opt_attrs *at = (const kiln_axis_opt_attrs *)a->attrs;
    const kiln_tinfo *x = a->in[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    int axis = -1;
    if (at->has_axis && x->rank >= 0) KILN_TRY(kiln__norm_axis(a->node_name, at->axis, x->rank, &axis));
    int64_t U = KILN_DIM_UNKNOWN, N = KILN_DIM_UNKNOWN;
    if (x->rank >= 0) N = axis >= 0 ? x->dims[axis] : kiln__numel(x->rank, x->dims);
    if (N < 0) N = KILN_DIM_UNKNOWN;
    if (x->data && kiln__numel(x->rank, x->dims) >= 0) {
        uniq q;
        KILN_TRY(uniq_compute(a->node_name, x->dtype, x->rank, x->dims, x->data, axis,
                              at->sorted != 0, &q));
        U = q.U;
        uniq_free(&q);
    }
    kiln_tinfo *y = a->out[0];
    y->dtype = x->dtype;
    if (axis >= 0) {
        kiln__tinfo_copy_shape(y, x);
        y->dims[axis] = U;
    } else if (at->has_axis) {
        y->rank = -1;
    } else {
        y->rank = 1;
        y->dims[0] = U;
    }
    for (int i = 1; i < a->n_out && i < 4; i++) {
        if (!a->out[i]) continue;
        a->out[i]->dtype = KILN_DTYPE_INT64;
        a->out[i]->rank = 1;
        a->out[i]->dims[0] = i == 2 ? N : U;
    }
    return KILN_OK;
}

static kiln_status unique_cpu(const kiln_kernel_args *a) {
    const kiln_axis_opt_attrs *at = (const kiln_axis_opt_attrs *)a->attrs;
    const kiln_tensor *x = a->in[0];
    size_t es;
    KILN_TRY(kiln__tx_esize(a->op->name, a->node_name, x->dtype, &es));
    int axis = -1;
    if (at->has_axis) axis = at->axis < 0 ? at->axis + x->rank : at->axis;
    uniq q;
    KILN_TRY(uniq_compute(a->node_name, x->dtype, x->rank, x->dims, x->data, axis, at->sorted != 0, &q));
    kiln_tensor *y = a->out[0];
    int64_t U = q.U;
    if ((axis >= 0 && y->dims[axis] != U) || (axis < 0 && y->dims[0] != U)) {
        uniq_free(&q);
        return KILN_TX_FAIL0(KILN_ERR_INTERNAL, a, "unique count changed");
    }
    if (axis < 0) {
        for (int64_t u = 0; u < U; u++)
            memcpy((char *)y->data + (size_t)u * es, (const char *)x->data + (size_t)q.first[u] * es, es);
    } else {
        int64_t outer, inner;
        kiln__tx_outer_inner(x->rank, x->dims, axis, &outer, &inner);
        for (int64_t u = 0; u < U; u++) {
            int64_t dims[2] = {outer, inner}, ds[2] = {U * inner, 1}, ss[2] = {inner, 1};
            kiln__tx_copy(NULL, es, 2, dims, (char *)y->data + (size_t)(u * inner) * es, ds,
                          (const char *)q.items + (size_t)(q.first[u] * q.isz) * es, ss);
        }
    }
    if (U == 0) {
        uniq_free(&q);
        return KILN_OK;
    }
    if (kiln__tx_has_out(a, 1)) memcpy(a->out[1]->data, q.first, sizeof(int64_t) * (size_t)U);
    if (kiln__tx_has_out(a, 2)) memcpy(a->out[2]->data, q.inv, sizeof(int64_t) * (size_t)q.N);
    if (kiln__tx_has_out(a, 3)) memcpy(a->out[3]->data, q.count, sizeof(int64_t) * (size_t)U);
    uniq_free(&q);
    return KILN_OK;
}

const kiln_op_def kiln_op_Unique = {
    .name = "Unique", .domain = "", .since = 11,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 4,
    .attr_size = sizeof(kiln_axis_opt_attrs),
    .host_inputs = 1u << 0,
    .import = compress_import, .validate = axis_opt_validate, .infer = unique_infer, .cpu = unique_cpu,
};
