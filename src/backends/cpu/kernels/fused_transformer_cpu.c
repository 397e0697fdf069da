/* fused_transformer_cpu.c -- the CPU backend's kernels of kiln.FusedMatMul
 * and kiln.Attention (the ops: src/ops/fused_transformer.c, whose
 * reference kernels run kiln__sgemm): the tactics that run them with oneDNN
 * (fused_transformer_dnnl.c) or kiln's AVX-512 kernels (gemm_avx512.c,
 * fused_transformer_avx512.c), and which of them a layer may use. */
#include "backends/cpu/kernels/fused_transformer_cpu.h"

#include "backends/cpu/kernels/fused_transformer_dnnl.h"

#define NODE(a) ((a)->node_name ? (a)->node_name : "?")

/* ======================================================================= */
/* kiln.FusedMatMul                                                         */
/* ======================================================================= */

size_t kiln__cpu_fmm_workspace(const kiln_infer_args *a) {
    const kiln_fused_matmul_attrs *at = a->attrs;
    if (at->precision != KILN_PRECISION_BF16 || a->in[0]->rank < 0) return 0;
    int64_t n = kiln__numel(a->in[0]->rank, a->in[0]->dims);
    return n > 0 ? (size_t)n * sizeof(uint16_t) : 0;
}

int kiln__cpu_fmm_tactics(void *state, const kiln_infer_args *a, int32_t *ids, int cap) {
    (void)state;
    const kiln_fused_matmul_attrs *at = a->attrs;
    int n = 0;
    /* bf16 layers: only the kernels that compute in bf16 (the others would
     * silently give fp32 results at fp32 speed) */
    bool bf16 = at->precision == KILN_PRECISION_BF16 && kiln__tf_dnnl_available();
    if (n < cap && !bf16) ids[n++] = KILN_FMM_TACTIC_SGEMM;
    if (n < cap && kiln__tf_dnnl_available()) ids[n++] = KILN_FMM_TACTIC_DNNL;
    /* The own AVX-512 kernel measured ~13% slower than oneDNN's on BERT's
     * layers: with oneDNN present it is a candidate for small products only
     * (where call overheads dominate), so that timing noise on a busy
     * machine cannot pick it for a big layer. */
    const kiln_tinfo *A = a->in[0], *B = a->in[1];
    double macs = A->rank >= 0 && B->rank == 2 ? (double)kiln__numel(A->rank, A->dims) *
                                                     (double)B->dims[at->trans_b ? 0 : 1]
                                               : -1.0;
    bool small = macs >= 0 && macs < (double)(1 << 24);
    if (n < cap && !bf16 && kiln__sgemm512_available() && (small || !kiln__tf_dnnl_available()))
        ids[n++] = KILN_FMM_TACTIC_AVX512;
    return n;
}

const char *kiln__cpu_fmm_tactic_name(int32_t id) {
    switch (id) {
    case KILN_FMM_TACTIC_AUTO: return "auto";
    case KILN_FMM_TACTIC_SGEMM: return "sgemm";
    case KILN_FMM_TACTIC_DNNL: return "onednn";
    case KILN_FMM_TACTIC_AVX512: return "avx512";
    default: return "?";
    }
}

static const float *fmm_bias(const kiln_kernel_args *a) {
    return a->n_in > 2 && a->in[2] ? a->in[2]->data : NULL;
}

static const float *fmm_residual(const kiln_kernel_args *a) {
    return a->n_in > 3 && a->in[3] ? a->in[3]->data : NULL;
}

static kiln_status fmm_run_avx512(const kiln_kernel_args *a, int64_t M, int64_t K, int64_t N) {
    const kiln_fused_matmul_attrs *at = a->attrs;
    /* weights packed for the AVX-512 kernel, kept in the node's state */
    bool fresh, own;
    float *Bp = kiln__node_packed(a, kiln__sgemm512_packed_floats(K, N), &fresh, &own);
    if (!Bp) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (kiln.FusedMatMul): out of memory packing weights", NODE(a));
    if (fresh) kiln__sgemm512_pack(a->in[1]->data, at->trans_b != 0, K, N, Bp);
    kiln__sgemm512_run(a->in[0]->data, M, K, N, Bp, fmm_bias(a), fmm_residual(a), at->act, a->out[0]->data, a->pool);
    if (own) kiln__aligned_free(Bp);
    return KILN_OK;
}

/* The layer's tactic; the reference kernel (kiln__sgemm + epilogue) for
 * tactic sgemm, empty products, and where oneDNN cannot run the layer. */
kiln_status kiln__cpu_fmm_run(const kiln_kernel_args *a) {
    const kiln_fused_matmul_attrs *at = a->attrs;
    int64_t M, K, N;
    KILN_TRY(kiln__fmm_dims(a, &M, &K, &N));
    if (M == 0 || N == 0 || K == 0) return a->op->cpu(a);
    const kiln_tensor *A = a->in[0], *B = a->in[1];
    const float *bias = fmm_bias(a), *res = fmm_residual(a);
    int32_t t = at->tactic.id;
    if (t == KILN_FMM_TACTIC_AUTO)
        t = kiln__tf_dnnl_available()      ? KILN_FMM_TACTIC_DNNL
            : kiln__sgemm512_available() ? KILN_FMM_TACTIC_AVX512
                                         : KILN_FMM_TACTIC_SGEMM;
    if (t == KILN_FMM_TACTIC_AVX512 && !kiln__sgemm512_available()) t = KILN_FMM_TACTIC_SGEMM; /* tuned elsewhere */
    if (t == KILN_FMM_TACTIC_AVX512) return fmm_run_avx512(a, M, K, N);
    if (t == KILN_FMM_TACTIC_DNNL && kiln__tf_dnnl_available()) {
        bool bf16 = at->precision == KILN_PRECISION_BF16;
        if (bf16 && (!a->workspace || a->workspace_size < (size_t)(M * K) * sizeof(uint16_t)))
            bf16 = false; /* no scratch for the rounded A (build-time timing): run in fp32 */
        kiln_tf_dnnl_mm *m = kiln__node_state_get(a, kiln__tf_dnnl_mm_free);
        bool own = false;
        if (!m) {
            kiln_status st = kiln__tf_dnnl_mm_create(K, N, B->data, at->trans_b != 0, bias != NULL, res != NULL,
                                                     at->act, bf16, &m);
            if (st != KILN_OK) {
                if (at->tactic.id != KILN_FMM_TACTIC_AUTO) return kiln__fail_prefix(st, "node '%s'", NODE(a));
                kiln__clear_error();
                return a->op->cpu(a);
            }
            own = !kiln__node_state_keep(a, m, kiln__tf_dnnl_mm_free);
        }
        kiln_status st = kiln__tf_dnnl_mm_run(m, M, A->data, bias, res, a->out[0]->data, a->workspace, a->pool,
                                              NODE(a));
        if (own) kiln__tf_dnnl_mm_free(m);
        if (st == KILN_ERR_UNSUPPORTED && at->tactic.id == KILN_FMM_TACTIC_AUTO) {
            kiln__clear_error(); /* oneDNN has no kernel for this shape here: own kernel */
            return a->op->cpu(a);
        }
        return st;
    }
    return a->op->cpu(a);
}

/* ======================================================================= */
/* kiln.Attention                                                           */
/* ======================================================================= */

static size_t avx512_ws_floats(int64_t Sq, int64_t Sk, int64_t D, int64_t Dv) {
    (void)Dv;
    return kiln__attn_avx512_ws_floats(Sq, Sk, D);
}

/* room for either block kernel (a bf16 layer on a CPU without bf16 runs
 * the fp32 one) */
static size_t fast_ws_floats(int64_t Sq, int64_t Sk, int64_t D, int64_t Dv) {
    size_t a = avx512_ws_floats(Sq, Sk, D, Dv), b = kiln__attn_bf16_ws_floats(Sq, Sk, D, Dv);
    return a > b ? a : b;
}

size_t kiln__cpu_attn_workspace(const kiln_infer_args *a) { return kiln__attn_workspace(a, fast_ws_floats); }

int kiln__cpu_attn_tactics(void *state, const kiln_infer_args *a, int32_t *ids, int cap) {
    (void)state;
    const kiln_attention_attrs *at = a->attrs;
    int n = 0;
    /* bf16 layers: only the kernel that computes in bf16 where the CPU has it */
    bool bf16 = at->precision == KILN_PRECISION_BF16 && kiln__attn_bf16_available();
    /* a cond, a second mask or the NaN rule: only the sgemm path applies them */
    bool extras = (a->n_in > 4 && a->in[4]) || (a->n_in > 5 && a->in[5]) || at->nan_to_zero;
    if (n < cap && (!bf16 || extras)) ids[n++] = KILN_ATTN_TACTIC_SGEMM;
    if (n < cap && kiln__attn_avx512_available() && !extras) ids[n++] = KILN_ATTN_TACTIC_AVX512;
    return n;
}

const char *kiln__cpu_attn_tactic_name(int32_t id) {
    switch (id) {
    case KILN_ATTN_TACTIC_AUTO: return "auto";
    case KILN_ATTN_TACTIC_SGEMM: return "sgemm";
    case KILN_ATTN_TACTIC_AVX512: return "avx512";
    default: return "?";
    }
}

static const kiln_attn_fast attn_avx512 = {avx512_ws_floats, kiln__attn_avx512_block};
static const kiln_attn_fast attn_bf16 = {kiln__attn_bf16_ws_floats, kiln__attn_bf16_block};

/* Tactic avx512 (and auto, where the CPU has AVX-512F): the AVX-512 block
 * kernel, in bf16 for bf16 layers on CPUs with AVX512-BF16; else the
 * reference path (kiln__sgemm, softmax, kiln__sgemm per row block). */
kiln_status kiln__cpu_attn_run(const kiln_kernel_args *a) {
    const kiln_attention_attrs *at = a->attrs;
    int32_t t = at->tactic.id;
    const kiln_attn_fast *fast = NULL;
    if ((t == KILN_ATTN_TACTIC_AUTO || t == KILN_ATTN_TACTIC_AVX512) && kiln__attn_avx512_available())
        fast = at->precision == KILN_PRECISION_BF16 && kiln__attn_bf16_available() ? &attn_bf16 : &attn_avx512;
    return kiln__attn_run(a, fast);
}
