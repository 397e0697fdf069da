/* reduce_index.c -- reductions that return positions: ArgMax, ArgMin, TopK.
 *
 * TopK's `k` is input 1 (int64 1-element tensor) for every opset: opset 1's
 * `k` attribute is turned into that input at import. Ties are broken the ONNX
 * way: among equal values the lower index comes first. Output is always
 * sorted (sorted=0 leaves the order unspecified, so sorted order is valid). */
#include "ops/index_attrs.h"
#include "ops/op.h"

#include <math.h>
#include <stdlib.h>

/* ---- ArgMax / ArgMin --------------------------------------------------- */

/* kiln_argreduce_attrs: ops/index_attrs.h */

static kiln_status arg_import(kiln_import_ctx *ic, void *attrs) {
    kiln_argreduce_attrs *at = attrs;
    at->keepdims = kiln_attr_int(ic, "keepdims", 1) != 0;
    at->select_last_index = kiln_attr_int(ic, "select_last_index", 0) != 0;
    return kiln_attr_int32(ic, "axis", 0, &at->axis);
}

/* axis in [-8, 7]; keepdims and select_last_index 0 or 1 */
static kiln_status arg_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_argreduce_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "axis", at->axis, -KILN_MAX_RANK, KILN_MAX_RANK - 1));
    KILN_TRY(kiln__check_attr(op, node, "keepdims", at->keepdims, 0, 1));
    return kiln__check_attr(op, node, "select_last_index", at->select_last_index, 0, 1);
}

static bool numeric_dtype(kiln_dtype t) { return kiln__dtype_is_float(t) || kiln__dtype_is_int(t); }

static kiln_status arg_infer(const kiln_infer_args *a) {
    const kiln_argreduce_attrs *at = a->attrs;
    const kiln_tinfo *x = a->in[0];
    kiln_tinfo *y = a->out[0];
    const char *nm = a->node_name ? a->node_name : "?";
    y->dtype = KILN_DTYPE_INT64;
    y->data = NULL;
    if (!numeric_dtype(x->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s is not supported", nm,
                         a->op->name, kiln_dtype_name(x->dtype));
    if (x->rank < 0) {
        y->rank = -1;
        return KILN_OK;
    }
    if (x->rank == 0)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): input must have rank >= 1", nm,
                         a->op->name);
    int ax;
    KILN_TRY(kiln__norm_axis(nm, at->axis, x->rank, &ax));
    if (x->dims[ax] == 0)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): cannot reduce axis %d of size 0", nm,
                         a->op->name, ax);
    int k = 0;
    for (int i = 0; i < x->rank; i++) {
        if (i != ax) y->dims[k++] = x->dims[i];
        else if (at->keepdims) y->dims[k++] = 1;
    }
    y->rank = k;
    return KILN_OK;
}

typedef struct arg_ctx {
    bool is_max, last;
    kiln_dtype dt;
    const void *x;
    int64_t *y;
    int64_t R, inner;
} arg_ctx;

static void arg_f32_fn(void *vctx, int64_t b, int64_t e) {
    const arg_ctx *c = vctx;
    const float *x = c->x;
    for (int64_t t = b; t < e; t++) {
        int64_t o = t / c->inner, i = t % c->inner;
        const float *p = x + o * c->R * c->inner + i;
        float best = p[0];
        int64_t bi = 0;
        for (int64_t r = 1; r < c->R; r++) {
            float v = p[r * c->inner];
            bool take = c->is_max ? (c->last ? v >= best : v > best)
                                  : (c->last ? v <= best : v < best);
            if (take) {
                best = v;
                bi = r;
            }
        }
        c->y[t] = bi;
    }
}

static void arg_gen_fn(void *vctx, int64_t b, int64_t e) {
    const arg_ctx *c = vctx;
    bool ints = kiln__dtype_is_int(c->dt);
    bool u64 = c->dt == KILN_DTYPE_UINT64;
    for (int64_t t = b; t < e; t++) {
        int64_t o = t / c->inner, i = t % c->inner;
        int64_t base = o * c->R * c->inner + i;
        int64_t bi = 0;
        if (ints) {
            /* compare uint64 with the sign bit flipped */
            uint64_t f = u64 ? (uint64_t)1 << 63 : 0;
            int64_t best = (int64_t)((uint64_t)kiln__load_i64(c->dt, c->x, base) ^ f);
            for (int64_t r = 1; r < c->R; r++) {
                int64_t v = (int64_t)((uint64_t)kiln__load_i64(c->dt, c->x, base + r * c->inner) ^ f);
                bool take = c->is_max ? (c->last ? v >= best : v > best)
                                      : (c->last ? v <= best : v < best);
                if (take) {
                    best = v;
                    bi = r;
                }
            }
        } else {
            double best = kiln__load_f64(c->dt, c->x, base);
            for (int64_t r = 1; r < c->R; r++) {
                double v = kiln__load_f64(c->dt, c->x, base + r * c->inner);
                bool take = c->is_max ? (c->last ? v >= best : v > best)
                                      : (c->last ? v <= best : v < best);
                if (take) {
                    best = v;
                    bi = r;
                }
            }
        }
        c->y[t] = bi;
    }
}

static kiln_status arg_cpu(const kiln_kernel_args *a) {
    const kiln_argreduce_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    const char *nm = a->node_name ? a->node_name : "?";
    if (!numeric_dtype(x->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s is not supported", nm,
                         a->op->name, kiln_dtype_name(x->dtype));
    int ax;
    KILN_TRY(kiln__norm_axis(nm, at->axis, x->rank, &ax));
    arg_ctx c = {.is_max = a->op->code == 0, .last = at->select_last_index != 0, .dt = x->dtype,
                 .x = x->data, .y = y->data, .R = x->dims[ax], .inner = 1};
    int64_t outer = 1;
    for (int i = 0; i < ax; i++) outer *= x->dims[i];
    for (int i = ax + 1; i < x->rank; i++) c.inner *= x->dims[i];
    if (c.R == 0)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "node '%s' (%s): cannot reduce an empty axis",
                         nm, a->op->name);
    int64_t n = outer * c.inner;
    int64_t grain = c.R >= 4096 ? 1 : 4096 / c.R;
    kiln__parallel_for(a->pool, n, grain, x->dtype == KILN_DTYPE_FLOAT32 ? arg_f32_fn : arg_gen_fn,
                       &c);
    return KILN_OK;
}

const kiln_op_def kiln_op_ArgMax = {
    .name = "ArgMax", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .code = 0, .attr_size = sizeof(kiln_argreduce_attrs),
    .import = arg_import, .validate = arg_validate, .infer = arg_infer, .cpu = arg_cpu,
};

const kiln_op_def kiln_op_ArgMin = {
    .name = "ArgMin", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .code = 1, .attr_size = sizeof(kiln_argreduce_attrs),
    .import = arg_import, .validate = arg_validate, .infer = arg_infer, .cpu = arg_cpu,
};

/* ---- TopK -------------------------------------------------------------- */

/* kiln_topk_attrs: ops/index_attrs.h */

static kiln_status topk_import(kiln_import_ctx *ic, void *attrs) {
    kiln_topk_attrs *at = attrs;
    KILN_TRY(kiln_attr_int32(ic, "axis", -1, &at->axis));
    at->largest = kiln_attr_int(ic, "largest", 1) != 0;
    at->sorted = kiln_attr_int(ic, "sorted", 1) != 0;
    if (kiln_import_opset(ic) < 10 || !kiln_import_has_input(ic, 1)) {
        if (!kiln_attr_has(ic, "k"))
            return KILN_IMPORT_FAIL(ic, "TopK needs a 'k' attribute (opset 1) or input (opset 10+)");
        int64_t k = kiln_attr_int(ic, "k", 0);
        int64_t dims[1] = {1};
        KILN_TRY(kiln_import_set_const_input(ic, 1, KILN_DTYPE_INT64, 1, dims, &k));
    }
    return KILN_OK;
}

/* axis in [-8, 7]; largest and sorted 0 or 1 */
static kiln_status topk_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_topk_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "axis", at->axis, -KILN_MAX_RANK, KILN_MAX_RANK - 1));
    KILN_TRY(kiln__check_attr(op, node, "largest", at->largest, 0, 1));
    return kiln__check_attr(op, node, "sorted", at->sorted, 0, 1);
}

static kiln_status topk_infer(const kiln_infer_args *a) {
    const kiln_topk_attrs *at = a->attrs;
    const kiln_tinfo *x = a->in[0];
    const kiln_tinfo *K = a->n_in > 1 ? a->in[1] : NULL;
    const char *nm = a->node_name ? a->node_name : "?";
    kiln_tinfo *v = a->out[0];
    kiln_tinfo *ix = a->n_out > 1 ? a->out[1] : NULL;
    if (!numeric_dtype(x->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (TopK): dtype %s is not supported", nm,
                         kiln_dtype_name(x->dtype));
    if (!K)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (TopK): input 'K' is missing", nm);
    if (!kiln__dtype_is_int(K->dtype) || K->rank > 1 || (K->rank == 1 && K->dims[0] >= 0 && K->dims[0] != 1))
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (TopK): input 'K' must be a 1-element int64 tensor", nm);
    v->dtype = x->dtype;
    v->data = NULL;
    if (ix) {
        ix->dtype = KILN_DTYPE_INT64;
        ix->data = NULL;
    }
    if (x->rank < 0) {
        v->rank = -1;
        if (ix) ix->rank = -1;
        return KILN_OK;
    }
    if (x->rank == 0)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (TopK): input must have rank >= 1", nm);
    int ax;
    KILN_TRY(kiln__norm_axis(nm, at->axis, x->rank, &ax));
    int64_t k = KILN_DIM_UNKNOWN;
    if (K->data) {
        k = kiln__tinfo_int(K, 0);
        if (k < 0)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (TopK): K = %lld is negative", nm,
                             (long long)k);
        if (x->dims[ax] >= 0 && k > x->dims[ax])
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (TopK): K = %lld is larger than axis %d of size %lld", nm,
                             (long long)k, ax, (long long)x->dims[ax]);
    }
    kiln__tinfo_copy_shape(v, x);
    v->dtype = x->dtype;
    v->dims[ax] = k;
    if (ix) {
        kiln__tinfo_copy_shape(ix, v);
        ix->dtype = KILN_DTYPE_INT64;
    }
    return KILN_OK;
}

typedef struct topk_item {
    double f;   /* key for floating dtypes */
    int64_t i;  /* key for integer dtypes (uint64: sign bit flipped) */
    int64_t idx;
} topk_item;

/* Orders: NaN above everything; then value; then lower index first. */
static int cmp_f_desc(const void *pa, const void *pb) {
    const topk_item *a = pa, *b = pb;
    bool na = a->f != a->f, nb = b->f != b->f;
    if (na != nb) return na ? -1 : 1;
    if (!na) {
        if (a->f > b->f) return -1;
        if (a->f < b->f) return 1;
    }
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}
static int cmp_f_asc(const void *pa, const void *pb) {
    const topk_item *a = pa, *b = pb;
    bool na = a->f != a->f, nb = b->f != b->f;
    if (na != nb) return na ? 1 : -1;
    if (!na) {
        if (a->f < b->f) return -1;
        if (a->f > b->f) return 1;
    }
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}
static int cmp_i_desc(const void *pa, const void *pb) {
    const topk_item *a = pa, *b = pb;
    if (a->i != b->i) return a->i > b->i ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}
static int cmp_i_asc(const void *pa, const void *pb) {
    const topk_item *a = pa, *b = pb;
    if (a->i != b->i) return a->i < b->i ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Heap of the k best items with the worst of them (largest in cmp) at
 * the root. */
static void topk_sift(topk_item *h, int64_t k, int64_t p, int (*cmp)(const void *, const void *)) {
    for (;;) {
        int64_t c = 2 * p + 1;
        if (c >= k) break;
        if (c + 1 < k && cmp(&h[c + 1], &h[c]) > 0) c++;
        if (cmp(&h[c], &h[p]) <= 0) break;
        topk_item t = h[c];
        h[c] = h[p];
        h[p] = t;
        p = c;
    }
}

/* Moves the k first items in `cmp` order into items[0..m) and returns m
 * (the caller sorts those m). Small k keeps a heap of the k best,
 * O(R log k); otherwise m = R and the caller's full sort does the work. */
static int64_t topk_select(topk_item *items, int64_t R, int64_t k,
                           int (*cmp)(const void *, const void *)) {
    if (k >= R / 4 || k == 0) return R;
    for (int64_t p = k / 2; p-- > 0;) topk_sift(items, k, p, cmp);
    for (int64_t r = k; r < R; r++) {
        if (cmp(&items[r], &items[0]) >= 0) continue;
        items[0] = items[r];
        topk_sift(items, k, 0, cmp);
    }
    return k;
}

static kiln_status topk_cpu(const kiln_kernel_args *a) {
    const kiln_topk_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    const kiln_tensor *K = a->in[1];
    kiln_tensor *v = a->out[0];
    kiln_tensor *ix = a->n_out > 1 ? a->out[1] : NULL;
    const char *nm = a->node_name ? a->node_name : "?";
    if (!numeric_dtype(x->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (TopK): dtype %s is not supported", nm,
                         kiln_dtype_name(x->dtype));
    int ax;
    KILN_TRY(kiln__norm_axis(nm, at->axis, x->rank, &ax));
    int64_t k = kiln__load_i64(K->dtype, K->data, 0);
    int64_t R = x->dims[ax];
    if (k < 0 || k > R)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "node '%s' (TopK): K = %lld is out of range for axis %d of size %lld", nm,
                         (long long)k, ax, (long long)R);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; i++) outer *= x->dims[i];
    for (int i = ax + 1; i < x->rank; i++) inner *= x->dims[i];
    if (k == 0 || outer * inner == 0) return KILN_OK;
    topk_item *items = kiln__malloc((size_t)R * sizeof *items);
    if (!items)
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (TopK): out of memory", nm);
    bool ints = kiln__dtype_is_int(x->dtype);
    uint64_t flip = x->dtype == KILN_DTYPE_UINT64 ? (uint64_t)1 << 63 : 0;
    int (*cmp)(const void *, const void *) =
        ints ? (at->largest ? cmp_i_desc : cmp_i_asc) : (at->largest ? cmp_f_desc : cmp_f_asc);
    size_t es = kiln_dtype_size(x->dtype);
    const char *xb = x->data;
    char *vb = v->data;
    int64_t *ib = ix ? ix->data : NULL;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t in = 0; in < inner; in++) {
            int64_t base = o * R * inner + in;
            for (int64_t r = 0; r < R; r++) {
                int64_t p = base + r * inner;
                items[r].idx = r;
                if (ints) items[r].i = (int64_t)((uint64_t)kiln__load_i64(x->dtype, xb, p) ^ flip);
                else if (x->dtype == KILN_DTYPE_FLOAT32) items[r].f = ((const float *)xb)[p];
                else items[r].f = kiln__load_f64(x->dtype, xb, p);
            }
            int64_t m = topk_select(items, R, k, cmp);
            qsort(items, (size_t)m, sizeof *items, cmp);
            int64_t obase = o * k * inner + in;
            for (int64_t j = 0; j < k; j++) {
                int64_t op = obase + j * inner;
                memcpy(vb + op * es, xb + (base + items[j].idx * inner) * es, es);
                if (ib) ib[op] = items[j].idx;
            }
        }
    }
    kiln__free(items);
    return KILN_OK;
}

const kiln_op_def kiln_op_TopK = {
    .name = "TopK", .domain = "", .since = 1,
    .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 2,
    .attr_size = sizeof(kiln_topk_attrs),
    .host_inputs = 1u << 1, /* K: read by infer */
    .import = topk_import, .validate = topk_validate, .infer = topk_infer, .cpu = topk_cpu,
};
