/* cuda_se.c -- kiln.SqueezeExcite on the GPU (ops/fused_se.h; made by
 * passes/fuse_se.c). Tactics, all timed by the builder:
 *   0  KCU_SE_TACTIC_COMPOSED: the three layers' kernels in sequence: the
 *      pool (kiln__cu_gap_into: GlobalAveragePool's NHWC or NCHW kernel)
 *      into Y, then two kcu_conv_gemv launches (the `kiln-gemv` tactic of
 *      the 1x1 FusedConvs) through a hidden vector in the state's scratch;
 *   5  KCU_SE_TACTIC_BLAS (`cublasLt-1x1+gap`, fp32/fp16/bf16): the same pool,
 *      then the two 1x1 layers as cuBLASLt GEMMs, each the 1x1 FusedConvs'
 *      `cublasLt-1x1` GEMM (kiln__cu_conv_rows_gemm: the bias and ReLU in
 *      cuBLASLt's epilogue, the other activations one kcu_bias_act pass
 *      after it; cuBLASLt's first candidate);
 *   1..4  kcu_se (k_se.cu), the whole gate in one launch, one cluster of
 *      1, 2, 4 or 8 blocks per image (2..8 need compute capability 9);
 *      listed unless KILN_CUDA_SE_FUSED=0 (on by default), where
 *      C <= KCU_SE_MAX_C, R <= KCU_SE_MAX_R, fp32/fp16/bf16.
 * An engine tuned on another GPU whose fused tactic cannot run here (no
 * clusters) runs tactic 0. */
#if KILN_HAVE_CUDA

#include "backends/cuda/cuda_internal.h"
#include "ops/fused_se.h"

#define KCU_SE_TACTIC_COMPOSED 0
#define KCU_SE_TACTIC_FUSED_LAST 4
#define KCU_SE_TACTIC_BLAS 5

/* blocks per image of fused tactic id (1, 2, 4, 8), 0 for the others */
static int se_cluster(int32_t id) { return id >= 1 && id <= KCU_SE_TACTIC_FUSED_LAST ? 1 << (id - 1) : 0; }

static bool se_fused_dtype(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT32 || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16;
}

bool kiln__cu_se_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_tinfo *x = kiln__cu_in(g, n, 0), *w1 = kiln__cu_in(g, n, 1);
    const kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    if (!kiln__cu_is_float(t) || kiln__cu_out_dtype(g, n, 0) != t || !x || !w1) return false;
    if (x->rank != 4 || w1->rank != 4 || x->dims[1] <= 0 || w1->dims[0] <= 0) return false;
    for (int i = 1; i < n->n_in; i++)
        if (n->in[i] >= 0 && kiln__cu_in_dtype(g, n, i) != t) return false;
    return true;
}

const char *kiln__cu_se_name(const kiln_node *n) {
    const kiln_se_attrs *at = n->attrs;
    return at && at->layout == KILN_SE_LAYOUT_NHWC ? "cuda.squeeze_excite.nhwc" : NULL;
}

/* y [N, M] = act(x [N, K] w [M, K]^T + b): the 1x1 convolution on rows
 * (kiln__cu_conv_rows_gemm, as the 1x1 FusedConvs' `cublasLt-1x1`: the
 * bias and ReLU in cuBLASLt's epilogue), the other activations one
 * kcu_bias_act pass after it */
static kiln_status se_gemm(const kiln_kernel_args *a, kiln_dtype t, int64_t N, int64_t K, int64_t M, const void *x,
                           const void *w, const kiln_tensor *b, void *y, int act, float alpha, float beta) {
    kiln_cuda_gemm p;
    const bool act_in = kiln__cu_conv_rows_gemm(&p, t, N, K, M, b != NULL, act, false);
    p.A = x;
    p.B = w;
    p.C = y;
    p.bias = b ? b->data : NULL;
    KILN_TRY(kiln__cuda_gemm(a, &p));
    if (!act_in && act != KILN_FC_ACT_NONE)
        KILN_CUDA_TRY(kcu_bias_act(t, y, y, NULL, NULL, N, M, 1, act, alpha, beta, KCU_STREAM(a)), KCU_NODE(a));
    return KILN_OK;
}

kiln_status kiln__cu_se_run(const kiln_kernel_args *a) {
    const kiln_se_attrs *at = a->attrs;
    kiln_cuda_state *st = KCU_STATE(a);
    const kiln_tensor *X = a->in[0], *W1 = a->in[1], *W2 = a->in[2];
    const kiln_tensor *B1 = a->n_in > 3 ? a->in[3] : NULL, *B2 = a->n_in > 4 ? a->in[4] : NULL;
    kiln_tensor *Y = a->out[0];
    const kiln_dtype t = X->dtype;
    if (!kiln__cu_is_float(t) || X->rank != 4 || W1->rank != 4)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (kiln.SqueezeExcite): %s X of rank %d (a float "
                         "[N, C, H, W] expected)", KCU_NODE(a), kiln_dtype_name(t), X->rank);
    const bool nhwc = at->layout == KILN_SE_LAYOUT_NHWC;
    const int64_t N = X->dims[0], C = X->dims[1], HW = X->dims[2] * X->dims[3], R = W1->dims[0];
    if (N == 0 || C == 0) return KILN_OK;
    const int S = se_cluster(at->tactic.id);
    if (S && se_fused_dtype(t) && kcu_se_fits(C, R) && (S == 1 || st->cc_major >= 9)) {
        kcu_se_geom g = {.N = N, .C = C, .R = R, .HW = HW, .nhwc = nhwc, .act1 = at->act1, .act2 = at->act2,
                         .alpha1 = at->alpha1, .beta1 = at->beta1, .alpha2 = at->alpha2, .beta2 = at->beta2};
        KILN_CUDA_TRY(kcu_se(t, &g, S, X->data, W1->data, W2->data, B1 ? B1->data : NULL, B2 ? B2->data : NULL,
                             Y->data, KCU_STREAM(a)),
                      KCU_NODE(a));
        return KILN_OK;
    }
    /* composed: pool into Y, Y -> hidden (scratch) -> Y; the pool's partial
     * sums, where it has any, are read before the first GEMV writes the
     * scratch (stream order) */
    KILN_TRY(kiln__cu_gap_into(a, X, nhwc, Y->data));
    void *h;
    KILN_TRY(kiln__cuda_scratch(st, (size_t)(N * R) * kiln_dtype_size(t), &h, KCU_NODE(a)));
    if (at->tactic.id == KCU_SE_TACTIC_BLAS && se_fused_dtype(t)) {
        KILN_TRY(se_gemm(a, t, N, C, R, Y->data, W1->data, B1, h, at->act1, at->alpha1, at->beta1));
        return se_gemm(a, t, N, R, C, h, W2->data, B2, Y->data, at->act2, at->alpha2, at->beta2);
    }
    KILN_CUDA_TRY(kcu_conv_gemv(t, N, C, R, Y->data, W1->data, B1 ? B1->data : NULL, NULL, h, at->act1, at->alpha1,
                                at->beta1, KCU_STREAM(a)),
                  KCU_NODE(a));
    KILN_CUDA_TRY(kcu_conv_gemv(t, N, R, C, h, W2->data, B2 ? B2->data : NULL, NULL, Y->data, at->act2, at->alpha2,
                                at->beta2, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

int kiln__cu_se_tactics(void *state, const kiln_infer_args *a, int32_t *ids, int cap) {
    const kiln_cuda_state *st = state;
    if (!st || cap < 1) return 0;
    int n = 0;
    ids[n++] = KCU_SE_TACTIC_COMPOSED;
    const kiln_tinfo *x = a->in[0], *w1 = a->in[1];
    if (se_fused_dtype(x->dtype) && n < cap) ids[n++] = KCU_SE_TACTIC_BLAS;
    if (!st->se_fused || !se_fused_dtype(x->dtype) || x->rank != 4 || w1->rank != 4 ||
        !kcu_se_fits(x->dims[1], w1->dims[0]))
        return n;
    for (int32_t id = 1; id <= KCU_SE_TACTIC_FUSED_LAST && n < cap; id++)
        if (se_cluster(id) == 1 || st->cc_major >= 9) ids[n++] = id;
    return n;
}

const char *kiln__cu_se_tactic_name(int32_t id) {
    switch (id) {
    case KCU_SE_TACTIC_COMPOSED: return "kiln-gap+gemv";
    case 1: return "kiln-se";
    case 2: return "kiln-se-c2";
    case 3: return "kiln-se-c4";
    case 4: return "kiln-se-c8";
    case KCU_SE_TACTIC_BLAS: return "cublasLt-1x1+gap";
    default: return "kiln-se-?";
    }
}

#else
typedef int kiln_cuda_se_disabled;
#endif
