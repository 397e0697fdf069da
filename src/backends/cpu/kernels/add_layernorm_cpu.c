/* add_layernorm_cpu.c -- kiln.AddLayerNorm on the CPU for float32 tensors
 * (add_layernorm_cpu.h). Same arithmetic as the reference kernel
 * (src/ops/fused_norm.c): the sum rounded to float32, then
 * LayerNormalization's own float32 row (kiln__ln_row_f32: float lanes
 * summed into double), so the fused layer gives the unfused pair's bits. */
#include "backends/cpu/kernels/add_layernorm_cpu.h"

#include "ops/nn_attrs.h"

typedef struct aln_f32 {
    const float *a, *r, *scale, *bias;
    float *y, *sum;
    int64_t D, r_rows;
    float eps;
} aln_f32;

static void aln_f32_rows(void *vc, int64_t r0, int64_t r1) {
    const aln_f32 *c = vc;
    const int64_t D = c->D;
    for (int64_t row = r0; row < r1; row++) {
        const float *a = c->a + row * D, *r = c->r + (row % c->r_rows) * D;
        float *s = (c->sum ? c->sum : c->y) + row * D; /* the sum, or y itself (either may be a) */
        for (int64_t i = 0; i < D; i++) s[i] = a[i] + r[i];
        double mean, inv;
        kiln__ln_row_f32(s, c->y + row * D, c->scale, c->bias, D, c->eps, true, &mean, &inv);
    }
}

/* float32 tensors and Scale/B of D elements (the fast path) */
static bool aln_fast(kiln_dtype a, kiln_dtype r, kiln_dtype s, int64_t sn, kiln_dtype b, int64_t bn, int64_t D) {
    const kiln_dtype f = KILN_DTYPE_FLOAT32;
    return a == f && r == f && s == f && sn == D && D > 0 && (b == KILN_DTYPE_UNDEFINED || (b == f && bn == D));
}

size_t kiln__cpu_add_ln_workspace(const kiln_infer_args *a) {
    const kiln_add_ln_attrs *at = a->attrs;
    const kiln_tinfo *A = a->in[0], *S = a->in[2], *B = a->n_in > 3 ? a->in[3] : NULL;
    if (A->rank > 0 && S->rank >= 0 && (!B || B->rank >= 0)) {
        int axis = at->axis < 0 ? at->axis + A->rank : at->axis;
        int64_t D = axis >= 0 && axis < A->rank ? kiln__numel(A->rank - axis, A->dims + axis) : -1;
        if (aln_fast(A->dtype, a->in[1]->dtype, S->dtype, kiln__numel(S->rank, S->dims),
                     B ? B->dtype : KILN_DTYPE_UNDEFINED, B ? kiln__numel(B->rank, B->dims) : 0, D))
            return 0;
    }
    return kiln__add_ln_ref_workspace(a);
}

kiln_status kiln__cpu_add_ln_run(const kiln_kernel_args *a) {
    const kiln_add_ln_attrs *at = a->attrs;
    const kiln_tensor *A = a->in[0], *R = a->in[1], *S = a->in[2], *B = a->n_in > 3 ? a->in[3] : NULL;
    kiln_tensor *Sum = a->n_out > 1 && a->out[1] && a->out[1]->data ? a->out[1] : NULL;
    int axis;
    int64_t rows, D, r_rows;
    bool fast = kiln__norm_axis(a->node_name ? a->node_name : "?", at->axis, A->rank, &axis) == KILN_OK &&
                kiln__add_ln_geom(A->rank, A->dims, R->rank, R->dims, axis, &rows, &D, &r_rows) &&
                aln_fast(A->dtype, R->dtype, S->dtype, kiln__tensor_numel(S), B ? B->dtype : KILN_DTYPE_UNDEFINED,
                         B ? kiln__tensor_numel(B) : 0, D);
    if (!fast) return a->op->cpu(a);
    kiln__clear_error();
    aln_f32 c = {.a = A->data, .r = R->data, .scale = S->data, .bias = B ? B->data : NULL, .y = a->out[0]->data,
                 .sum = Sum ? Sum->data : NULL, .D = D, .r_rows = r_rows, .eps = at->epsilon};
    kiln__parallel_for(a->pool, rows, (16384 + D - 1) / D, aln_f32_rows, &c);
    return KILN_OK;
}
