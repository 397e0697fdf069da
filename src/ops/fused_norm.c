/* fused_norm.c -- kiln.AddLayerNorm (fused_norm.h): validation, inference
 * and the reference kernel (the sum in the tensors' type, then
 * LayerNormalization's reference kernel on it). The CPU backend's float32
 * kernel is src/backends/cpu/kernels/add_layernorm_cpu.c. */
#include "ops/fused_norm.h"

#include "ops/nn_attrs.h"

#include <math.h>
#include <stdio.h>

#define NODE(a) ((a)->node_name ? (a)->node_name : "?")

/* The first axis k of A from which R's dims (right-aligned) are A's, R
 * being 1 before it and k <= axis (R covers whole rows); -1 when R does not
 * broadcast that way. Dims may be symbolic (< -1: equal when the same
 * symbol) before axis; the normalized dims must be known. */
static int aln_split(int rank, const int64_t *dims, int r_rank, const int64_t *r_dims, int axis) {
    if (rank < 1 || axis < 0 || axis >= rank || r_rank < 0 || r_rank > rank) return -1;
    for (int i = 0; i < rank; i++)
        if (dims[i] == KILN_DIM_UNKNOWN || (i >= axis && dims[i] < 0)) return -1;
    /* right-aligned: R's dims equal A's from some axis k on, 1 before it */
    int off = rank - r_rank, k = rank;
    while (k > off && r_dims[k - 1 - off] == dims[k - 1]) k--;
    for (int i = off; i < k; i++)
        if (r_dims[i - off] != 1) return -1;
    if (k > axis) { /* R must cover whole rows (dims of size 1 there are the same in both) */
        for (int i = axis; i < k; i++)
            if (dims[i] != 1) return -1;
        k = axis;
    }
    return k;
}

bool kiln__add_ln_fits(int rank, const int64_t *dims, int r_rank, const int64_t *r_dims, int axis) {
    return aln_split(rank, dims, r_rank, r_dims, axis) >= 0;
}

bool kiln__add_ln_geom(int rank, const int64_t *dims, int r_rank, const int64_t *r_dims, int axis,
                       int64_t *rows, int64_t *D, int64_t *r_rows) {
    for (int i = 0; i < rank; i++)
        if (dims[i] < 0) return false;
    int k = aln_split(rank, dims, r_rank, r_dims, axis);
    if (k < 0) return false;
    *rows = kiln__numel(axis, dims);
    *D = kiln__numel(rank - axis, dims + axis);
    *r_rows = kiln__numel(axis - k, dims + k);
    return true;
}

static kiln_status aln_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_add_ln_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "axis", at->axis, -KILN_MAX_RANK, KILN_MAX_RANK - 1));
    if (!(at->epsilon >= 0.0f) || !isfinite(at->epsilon))
        return KILN_VALIDATE_FAIL(op, node, "epsilon %g is not a finite value >= 0", (double)at->epsilon);
    return KILN_OK;
}

static kiln_status aln_infer(const kiln_infer_args *a) {
    const kiln_add_ln_attrs *at = a->attrs;
    const kiln_tinfo *A = a->in[0], *R = a->in[1];
    kiln_dtype t = A->dtype;
    if (t != KILN_DTYPE_FLOAT32 && t != KILN_DTYPE_FLOAT16 && t != KILN_DTYPE_BFLOAT16)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (kiln.AddLayerNorm): dtype %s (float32, float16 "
                         "or bfloat16 expected)", NODE(a), kiln_dtype_name(t));
    if (R->dtype != t)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (kiln.AddLayerNorm): the two addends are %s and %s",
                         NODE(a), kiln_dtype_name(t), kiln_dtype_name(R->dtype));
    /* Scale and B: LayerNormalization's own checks, on A */
    const kiln_op_def *ln = kiln__op_by_id(KILN_OP_LayerNormalization);
    kiln_ln_attrs la = {.axis = at->axis, .epsilon = at->epsilon, .stash_type = 1};
    const kiln_tinfo *lin[3] = {A, a->in[2], a->n_in > 3 ? a->in[3] : NULL};
    kiln_tinfo *lout[1] = {a->out[0]};
    kiln_infer_args la_args = {.op = ln, .attrs = &la, .node_name = a->node_name, .n_in = 3, .n_out = 1,
                               .in = lin, .out = lout, .runtime = a->runtime};
    KILN_TRY(ln->infer(&la_args));
    if (a->n_out > 1 && a->out[1]) kiln__tinfo_copy_shape(a->out[1], A);
    if (A->rank < 0 || R->rank < 0) return KILN_OK;
    int axis;
    KILN_TRY(kiln__norm_axis(NODE(a), at->axis, A->rank, &axis));
    /* checked once every dim is known (at run time at the latest: over a
     * profile the pass proved the fit with symbols, kiln__add_ln_fits) */
    bool known = true;
    for (int i = 0; i < A->rank; i++) known = known && A->dims[i] >= 0;
    for (int i = 0; i < R->rank; i++) known = known && R->dims[i] >= 0;
    int64_t rows, D, rr;
    if (R->rank > A->rank || (known && !kiln__add_ln_geom(A->rank, A->dims, R->rank, R->dims, axis, &rows, &D, &rr))) {
        char s1[128], s2[128];
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (kiln.AddLayerNorm): addend %s does not repeat over whole rows of %s "
                         "(axis %d)", NODE(a), kiln__shape_str(R->rank, R->dims, s1, sizeof s1),
                         kiln__shape_str(A->rank, A->dims, s2, sizeof s2), axis);
    }
    return KILN_OK;
}

/* The sum goes to the Sum output, or to the workspace when Sum is not one. */
size_t kiln__add_ln_ref_workspace(const kiln_infer_args *a) {
    if (a->n_out > 1 && a->out[1]) return 0;
    const kiln_tinfo *A = a->in[0];
    int64_t n = A->rank >= 0 ? kiln__numel(A->rank, A->dims) : 0;
    return n > 0 ? (size_t)n * kiln_dtype_size(A->dtype) : 0;
}

typedef struct aln_sum {
    const kiln_tensor *A, *R;
    void *s;
    int64_t D, rr;
} aln_sum;

/* rows [r0, r1) of the sum, stored in the tensors' type (rounded as the Add would) */
static void aln_sum_rows(void *vc, int64_t r0, int64_t r1) {
    const aln_sum *c = vc;
    const kiln_dtype t = c->A->dtype;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t rb = (r % c->rr) * c->D;
        for (int64_t i = 0; i < c->D; i++)
            kiln__store_f64(t, c->s, r * c->D + i,
                            kiln__load_f64(t, c->A->data, r * c->D + i) + kiln__load_f64(t, c->R->data, rb + i));
    }
}

/* The reference kernel: the sum (float32, float16 or bfloat16), then
 * LayerNormalization's own reference kernel on it. */
static kiln_status aln_ref(const kiln_kernel_args *a) {
    const kiln_add_ln_attrs *at = a->attrs;
    const kiln_tensor *A = a->in[0], *R = a->in[1];
    int axis;
    int64_t rows, D, rr;
    KILN_TRY(kiln__norm_axis(NODE(a), at->axis, A->rank, &axis));
    if (!kiln__add_ln_geom(A->rank, A->dims, R->rank, R->dims, axis, &rows, &D, &rr))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (kiln.AddLayerNorm): the addends do not fit", NODE(a));
    if (A->dtype != R->dtype)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (kiln.AddLayerNorm): the addends are %s and %s", NODE(a),
                         kiln_dtype_name(A->dtype), kiln_dtype_name(R->dtype));
    if (rows == 0 || D == 0) return KILN_OK;
    kiln_tensor sum = *A;
    if (a->n_out > 1 && a->out[1] && a->out[1]->data) {
        sum.data = a->out[1]->data;
    } else {
        if (a->workspace_size < (size_t)(rows * D) * kiln_dtype_size(A->dtype))
            return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (kiln.AddLayerNorm): workspace of %zu bytes is too small",
                             NODE(a), a->workspace_size);
        sum.data = a->workspace;
    }
    aln_sum c = {.A = A, .R = R, .s = sum.data, .D = D, .rr = rr};
    kiln__parallel_for(a->pool, rows, (16384 + D - 1) / D, aln_sum_rows, &c);
    const kiln_op_def *ln = kiln__op_by_id(KILN_OP_LayerNormalization);
    kiln_ln_attrs la = {.axis = at->axis, .epsilon = at->epsilon, .stash_type = 1};
    const kiln_tensor *lin[3] = {&sum, a->in[2], a->n_in > 3 ? a->in[3] : NULL};
    kiln_kernel_args lk = *a;
    lk.op = ln;
    lk.op_id = KILN_OP_LayerNormalization;
    lk.attrs = &la;
    lk.n_in = lin[2] ? 3 : 2;
    lk.in = lin;
    lk.n_out = 1;
    lk.workspace = NULL;
    lk.workspace_size = 0;
    return ln->cpu(&lk);
}

const kiln_op_def kiln_op_AddLayerNorm = {
    .name = "AddLayerNorm", .domain = "kiln", .since = 1,
    .min_inputs = 3, .max_inputs = 4, .min_outputs = 1, .max_outputs = 2,
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .attr_size = sizeof(kiln_add_ln_attrs),
    .validate = aln_validate, .infer = aln_infer, .workspace = kiln__add_ln_ref_workspace, .cpu = aln_ref,
};
