/* cuda_fused.c -- kiln's transformer layers on the GPU (see
 * src/ops/fused_transformer.h for their contracts):
 *   kiln.FusedMatMul  cuBLASLt with the bias / ReLU / GELU epilogue and a
 *                     residual through C (beta = 1); cuBLASLt's GELU is the
 *                     tanh form: fp16/bf16 layers take it for the erf form
 *                     too (KILN_CUDA_EXACT_GELU=1: a second erf pass, as
 *                     fp32 layers do); without an epilogue algorithm: GEMM +
 *                     one bias/residual/activation pass.
 *   kiln.Gelu         one elementwise pass (k_fused.cu).
 *   kiln.Attention    one kernel: tensor cores for fp16/bf16 (k_attn.cu),
 *                     else a thread per query row (k_fused.cu); online
 *                     softmax, fp32 statistics, head size up to
 *                     KCU_ATTN_MAX_D.
 * FusedConv lives with Conv in cuda_conv.c. */
#if KILN_HAVE_CUDA

#include "backends/cuda/cuda_internal.h"


static bool half_or_float(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT32 || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16;
}

/* f32, or f16/bf16 where the layer's inference takes them */
static bool layer_dtype_ok(const kiln_graph *g, const kiln_node *n, kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT32 || (half_or_float(t) && kiln__cu_infer_keeps_dtype(g, n));
}

/* ---- FusedMatMul -------------------------------------------------------------------------- */

bool kiln__cu_fused_matmul_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_fused_matmul_attrs *at = n->attrs;
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0), bt = kiln__cu_in_dtype(g, n, 2);
    kiln_dtype rt = kiln__cu_in_dtype(g, n, 3);
    if (!at || at->act < KILN_FACT_NONE || at->act > KILN_FACT_GELU_TANH) return false;
    return layer_dtype_ok(g, n, t) && kiln__cu_in_dtype(g, n, 1) == t &&
           (bt == KILN_DTYPE_UNDEFINED || bt == t) && (rt == KILN_DTYPE_UNDEFINED || rt == t) &&
           kiln__cu_out_dtype(g, n, 0) == t;
}

kiln_status kiln__cu_fused_matmul_run(const kiln_kernel_args *a) {
    const kiln_fused_matmul_attrs *at = a->attrs;
    const kiln_tensor *A = a->in[0], *B = a->in[1];
    const kiln_tensor *bias = a->n_in > 2 ? a->in[2] : NULL;
    const kiln_tensor *res = a->n_in > 3 ? a->in[3] : NULL;
    kiln_tensor *Y = a->out[0];
    const char *node = KCU_NODE(a);
    kiln_dtype t = A->dtype;
    if (!half_or_float(t) || B->dtype != t || (bias && bias->dtype != t) || (res && res->dtype != t) ||
        Y->dtype != t)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (FusedMatMul): dtype %s has no CUDA kernel",
                         node, kiln_dtype_name(t));
    if (res && kiln__tensor_numel(res) != kiln__tensor_numel(Y))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (FusedMatMul): residual has %lld elements, the output %lld",
                         node, (long long)kiln__tensor_numel(res), (long long)kiln__tensor_numel(Y));
    if (A->rank < 2 || B->rank != 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (FusedMatMul): A rank %d, B rank %d", node,
                         A->rank, B->rank);
    kiln_cuda_gemm p;
    memset(&p, 0, sizeof p);
    p.t = t;
    p.K = A->dims[A->rank - 1];
    p.N = B->dims[at->trans_b ? 0 : 1];
    if (B->dims[at->trans_b ? 1 : 0] != p.K)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (FusedMatMul): inner dimensions differ", node);
    if (bias && kiln__tensor_numel(bias) != p.N)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (FusedMatMul): bias has %lld elements, expected %lld",
                         node, (long long)kiln__tensor_numel(bias), (long long)p.N);
    int64_t numel = kiln__tensor_numel(A);
    p.M = p.K > 0 ? numel / p.K : kiln__numel(A->rank - 1, A->dims);
    if (p.M == 0 || p.N == 0) return KILN_OK;
    p.tb = at->trans_b != 0;
    p.batch = 1;
    p.A = A->data;
    p.B = B->data;
    p.C = Y->data;
    p.lda = p.K;
    p.ldb = p.tb ? p.K : p.N;
    p.ldc = p.N;
    p.alpha = 1.0;
    p.tactic = kiln__cuda_tactic(a);
    /* epilogue: bias and ReLU / GELU(tanh) inside cuBLASLt */
    int post = KILN_FC_ACT_NONE;
    p.epi = bias ? KCU_EPI_BIAS : KCU_EPI_NONE;
    p.bias = bias ? bias->data : NULL;
    if (at->act == KILN_FACT_RELU) p.epi |= KCU_EPI_RELU;
    else if (at->act == KILN_FACT_GELU_TANH) p.epi |= KCU_EPI_GELU;
    else if (at->act == KILN_FACT_GELU_ERF && t != KILN_DTYPE_FLOAT32 && !KCU_STATE(a)->exact_gelu)
        p.epi |= KCU_EPI_GELU; /* fp16/bf16: the tanh form, within 4.7e-4 of erf (docs/cuda.md) */
    else if (at->act == KILN_FACT_GELU_ERF) post = KCU_ACT_GELU_ERF;
    /* the residual through cuBLASLt's C (beta = 1, C apart from D): the epilogue's
     * bias and activation apply to A B + residual, as the layer's semantics want */
    if (res) {
        p.Cin = res->data;
        p.beta = 1.0;
    }
    if (p.K > 0 && (p.epi != KCU_EPI_NONE || res)) {
        kiln_status s = kiln__cuda_gemm(a, &p);
        if (s != KILN_ERR_UNSUPPORTED) {
            if (s != KILN_OK || post == KILN_FC_ACT_NONE) return s;
            KILN_CUDA_TRY(kcu_bias_act(t, Y->data, Y->data, NULL, NULL, p.M, p.N, 1, post, 0, 0,
                                       KCU_STREAM(a)),
                          node);
            return KILN_OK;
        }
        kiln__clear_error(); /* no algorithm with this epilogue: GEMM, then one pass */
    }
    if (at->act == KILN_FACT_RELU) post = KILN_FC_ACT_RELU;
    else if (at->act == KILN_FACT_GELU_TANH) post = KCU_ACT_GELU_TANH;
    p.epi = KCU_EPI_NONE;
    p.bias = NULL;
    p.Cin = NULL;
    p.beta = 0.0;
    KILN_TRY(kiln__cuda_gemm(a, &p));
    KILN_CUDA_TRY(kcu_bias_act(t, Y->data, Y->data, bias ? bias->data : NULL, res ? res->data : NULL,
                               p.M, p.N, 1, post, 0, 0, KCU_STREAM(a)),
                  node);
    return KILN_OK;
}

int kiln__cu_fused_matmul_tactics(void *state, const kiln_infer_args *a, int32_t *ids, int cap) {
    kiln_cuda_state *st = state;
    const kiln_fused_matmul_attrs *at = a->attrs;
    if (!st || cap < 1) return 0;
    const kiln_tinfo *A = a->in[0], *B = a->in[1];
    const kiln_tinfo *bias = a->n_in > 2 ? a->in[2] : NULL;
    if (!A || !B || A->rank < 2 || B->rank != 2 || !half_or_float(A->dtype)) return 0;
    kiln_cuda_gemm p;
    memset(&p, 0, sizeof p);
    p.t = A->dtype;
    p.K = A->dims[A->rank - 1];
    p.N = B->dims[at->trans_b ? 0 : 1];
    p.M = kiln__numel(A->rank - 1, A->dims);
    if (p.M <= 0 || p.N <= 0 || p.K <= 0) return 0;
    p.tb = at->trans_b != 0;
    p.batch = 1;
    p.lda = p.K;
    p.ldb = p.tb ? p.K : p.N;
    p.ldc = p.N;
    p.epi = bias ? KCU_EPI_BIAS : KCU_EPI_NONE;
    if (at->act == KILN_FACT_RELU) p.epi |= KCU_EPI_RELU;
    else if (at->act == KILN_FACT_GELU_TANH || (at->act == KILN_FACT_GELU_ERF && p.t != KILN_DTYPE_FLOAT32 &&
                                                !st->exact_gelu))
        p.epi |= KCU_EPI_GELU;
    int n = kiln__cuda_gemm_candidates(st, &p, cap);
    for (int i = 0; i < n; i++) ids[i] = i;
    return n;
}

const char *kiln__cu_fused_matmul_tactic_name(int32_t id) {
    static const char *const lt[KCU_GEMM_MAX_CANDIDATES] = {
        "cublasLt#0", "cublasLt#1", "cublasLt#2", "cublasLt#3", "cublasLt#4", "cublasLt#5",
        "cublasLt#6", "cublasLt#7", "cublasLt#8", "cublasLt#9", "cublasLt#10", "cublasLt#11",
        "cublasLt#12", "cublasLt#13", "cublasLt#14", "cublasLt#15", "cublasLt#16", "cublasLt#17",
        "cublasLt#18", "cublasLt#19", "cublasLt#20", "cublasLt#21", "cublasLt#22", "cublasLt#23",
        "cublasLt#24", "cublasLt#25", "cublasLt#26", "cublasLt#27", "cublasLt#28", "cublasLt#29",
        "cublasLt#30", "cublasLt#31"};
    return id >= 0 && id < KCU_GEMM_MAX_CANDIDATES ? lt[id] : "cublasLt#?";
}

/* ---- Gelu ------------------------------------------------------------------------------------ */

bool kiln__cu_gelu_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_gelu_attrs *at = n->attrs;
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    return at && (at->approx == 0 || at->approx == 1) && layer_dtype_ok(g, n, t) &&
           kiln__cu_out_dtype(g, n, 0) == t;
}

kiln_status kiln__cu_gelu_run(const kiln_kernel_args *a) {
    const kiln_gelu_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    if (!half_or_float(x->dtype) || a->out[0]->dtype != x->dtype || (at->approx != 0 && at->approx != 1))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Gelu): dtype %s / form %d has no CUDA kernel",
                         KCU_NODE(a), kiln_dtype_name(x->dtype), (int)at->approx);
    KILN_CUDA_TRY(kcu_bias_act(x->dtype, x->data, a->out[0]->data, NULL, NULL, 1, 1,
                               kiln__tensor_numel(x),
                               at->approx ? KCU_ACT_GELU_TANH : KCU_ACT_GELU_ERF, 0, 0,
                               KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- Attention --------------------------------------------------------------------------------- */

/* Strides (b, h, s, d) and sizes of an operand of rank/dims in `layout`
 * (role 0, 1, 2: Q, K, V; the QKV and KV layouts put them side by side: *off
 * is the element offset of the role's columns); *B its batch size. */
static bool attn_strides(int layout, int role, int rank, const int64_t *dims, int64_t H, int64_t *st,
                         int64_t *B, int64_t *S, int64_t *D, int64_t *off) {
    *off = 0;
    switch (layout) {
    case KILN_ATTN_BSHD:
    case KILN_ATTN_QKV:
    case KILN_ATTN_SBHD:
    case KILN_ATTN_SQKV:
    case KILN_ATTN_KV:
    case KILN_ATTN_SKV: {
        int64_t parts = kiln__attn_layout_parts(layout);
        bool sf = layout == KILN_ATTN_SBHD || layout == KILN_ATTN_SQKV || layout == KILN_ATTN_SKV; /* [S, B, ...] */
        if (rank != 3 || H <= 0 || dims[2] < 0 || dims[2] % (parts * H) || (parts == 2 && role == 0)) return false;
        *B = dims[sf ? 1 : 0];
        *S = dims[sf ? 0 : 1];
        *D = dims[2] / (parts * H);
        *off = parts == 3 ? role * H * *D : parts == 2 ? (role - 1) * H * *D : 0;
        st[0] = sf ? dims[2] : dims[1] * dims[2];
        st[1] = *D;
        st[2] = sf ? dims[1] * dims[2] : dims[2];
        st[3] = 1;
        return true;
    }
    case KILN_ATTN_BHSD:
    case KILN_ATTN_BHDS: {
        if (rank != 4) return false;
        bool ds = layout == KILN_ATTN_BHDS; /* [B, H, D, S] */
        *B = dims[0];
        *S = dims[ds ? 3 : 2];
        *D = dims[ds ? 2 : 3];
        st[0] = dims[1] * dims[2] * dims[3];
        st[1] = dims[2] * dims[3];
        st[ds ? 3 : 2] = dims[3];
        st[ds ? 2 : 3] = 1;
        return true;
    }
    default: return false;
    }
}

bool kiln__cu_attention_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_attention_attrs *at = n->attrs;
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0), mt = kiln__cu_in_dtype(g, n, 3);
    kiln_dtype ct = kiln__cu_in_dtype(g, n, 4), bt = kiln__cu_in_dtype(g, n, 5);
    if (!at || at->num_heads <= 0 || !layer_dtype_ok(g, n, t)) return false;
    if (kiln__cu_in_dtype(g, n, 1) != t || kiln__cu_in_dtype(g, n, 2) != t ||
        (mt != KILN_DTYPE_UNDEFINED && mt != t) || (bt != KILN_DTYPE_UNDEFINED && bt != t) ||
        (ct != KILN_DTYPE_UNDEFINED && ct != KILN_DTYPE_BOOL) || kiln__cu_out_dtype(g, n, 0) != t)
        return false;
    if ((ct != KILN_DTYPE_UNDEFINED) != (at->cond_mode != KILN_ATTN_COND_NONE) ||
        at->cond_mode < KILN_ATTN_COND_NONE || at->cond_mode > KILN_ATTN_COND_ADD)
        return false;
    if (at->q_layout == KILN_ATTN_BHDS || at->v_layout == KILN_ATTN_BHDS ||
        (at->out_layout != KILN_ATTN_BSHD && at->out_layout != KILN_ATTN_BHSD && at->out_layout != KILN_ATTN_SBHD))
        return false;
    /* head sizes must be known and small enough for the kernel */
    const int lay[3] = {at->q_layout, at->k_layout, at->v_layout};
    for (int i = 0; i < 3; i++) {
        const kiln_tinfo *x = kiln__cu_in(g, n, i);
        int64_t st[4], B, S, D, off;
        if (!x || !attn_strides(lay[i], i, x->rank, x->dims, at->num_heads, st, &B, &S, &D, &off) ||
            D < 0 || D > KCU_ATTN_MAX_D)
            return false;
    }
    for (int i = 3; i < 6; i++) {
        const kiln_tinfo *m = kiln__cu_in(g, n, i);
        if (m && (m->rank < 0 || m->rank > 4)) return false;
    }
    return true;
}

/* Broadcast strides (b, h, query, key) of mask-like input M (rank, dims) into the scores. */
static kiln_status attn_mask_strides(const char *node, const char *what, int rank, const int64_t *dims,
                                     const int64_t *full, int64_t *st) {
    if (rank > 4)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Attention): %s has rank %d", node, what, rank);
    for (int i = 0; i < rank; i++) {
        int64_t md = dims[i], fd = full[4 - rank + i];
        if (md != 1 && md != fd)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Attention): the %s does not broadcast to the scores",
                             node, what);
    }
    kiln__bcast_strides(rank, dims, 4, full, st);
    return KILN_OK;
}

/* The shapes of an Attention's operands: Q, K, V, mask, cond, bias, O
 * (rank < 0: absent). */
enum { ATTN_Q, ATTN_K, ATTN_V, ATTN_M, ATTN_C, ATTN_B, ATTN_O, ATTN_N };
typedef struct attn_shape {
    int rank;
    const int64_t *dims;
} attn_shape;

/* The kernels' geometry of an Attention (at run time and for its tactics);
 * off[i]: element offset of Q, K, V in their inputs. */
static kiln_status attn_geom(const char *node, const kiln_attention_attrs *at, const attn_shape *sh, kcu_attn *g,
                             int64_t *off) {
    memset(g, 0, sizeof *g);
    int64_t H = at->num_heads, Sk2, Dk, Dq, Bk, Bv;
    if (!attn_strides(at->q_layout, 0, sh[ATTN_Q].rank, sh[ATTN_Q].dims, H, g->qs, &g->B, &g->Sq, &Dq, &off[0]) ||
        !attn_strides(at->k_layout, 1, sh[ATTN_K].rank, sh[ATTN_K].dims, H, g->ks, &Bk, &g->Sk, &Dk, &off[1]) ||
        !attn_strides(at->v_layout, 2, sh[ATTN_V].rank, sh[ATTN_V].dims, H, g->vs, &Bv, &Sk2, &g->Dv, &off[2]) ||
        Dq != Dk || Sk2 != g->Sk || Bk != g->B || Bv != g->B || at->q_layout == KILN_ATTN_BHDS ||
        at->v_layout == KILN_ATTN_BHDS)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Attention): operands do not fit their layouts", node);
    g->H = H;
    g->D = Dq;
    if (g->D > KCU_ATTN_MAX_D || g->Dv > KCU_ATTN_MAX_D)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (Attention): head size %lld (the CUDA kernel takes up to %d)", node,
                         (long long)(g->D > g->Dv ? g->D : g->Dv), KCU_ATTN_MAX_D);
    int64_t b2, s2, d2, oo;
    if (!attn_strides(at->out_layout, 0, sh[ATTN_O].rank, sh[ATTN_O].dims, H, g->os, &b2, &s2, &d2, &oo) ||
        s2 != g->Sq || d2 != g->Dv || b2 != g->B)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Attention): output shape does not fit", node);
    g->scale = at->scale;
    int64_t full[4] = {g->B, H, g->Sq, g->Sk};
    if (sh[ATTN_M].rank >= 0) {
        KILN_TRY(attn_mask_strides(node, "mask", sh[ATTN_M].rank, sh[ATTN_M].dims, full, g->ms));
        g->has_mask = 1;
    }
    if (sh[ATTN_B].rank >= 0) {
        KILN_TRY(attn_mask_strides(node, "bias", sh[ATTN_B].rank, sh[ATTN_B].dims, full, g->bs));
        g->has_bias = 1;
    }
    if (sh[ATTN_C].rank >= 0) {
        KILN_TRY(attn_mask_strides(node, "cond", sh[ATTN_C].rank, sh[ATTN_C].dims, full, g->cs));
        g->has_cond = 1;
        g->cond_mode = at->cond_mode;
        g->cond_fill_if = at->cond_fill_if != 0;
        g->fill = at->fill;
    }
    g->nan_to_zero = at->nan_to_zero != 0;
    return KILN_OK;
}

kiln_status kiln__cu_attention_run(const kiln_kernel_args *a) {
    const kiln_attention_attrs *at = a->attrs;
    const kiln_tensor *Q = a->in[0], *K = a->in[1], *V = a->in[2];
    const kiln_tensor *M = a->n_in > 3 ? a->in[3] : NULL;
    const kiln_tensor *C = a->n_in > 4 ? a->in[4] : NULL, *Bi = a->n_in > 5 ? a->in[5] : NULL;
    kiln_tensor *O = a->out[0];
    const char *node = KCU_NODE(a);
    kiln_dtype t = Q->dtype;
    if (!half_or_float(t) || K->dtype != t || V->dtype != t || (M && M->dtype != t) ||
        (Bi && Bi->dtype != t) || (C && C->dtype != KILN_DTYPE_BOOL) || O->dtype != t)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Attention): dtype %s has no CUDA kernel",
                         node, kiln_dtype_name(t));
    if ((C != NULL) != (at->cond_mode != KILN_ATTN_COND_NONE))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Attention): cond input and cond_mode %d disagree",
                         node, at->cond_mode);
    const kiln_tensor *all[ATTN_N] = {Q, K, V, M, C, Bi, O};
    attn_shape sh[ATTN_N];
    for (int i = 0; i < ATTN_N; i++) sh[i] = (attn_shape){all[i] ? all[i]->rank : -1, all[i] ? all[i]->dims : NULL};
    kcu_attn g;
    int64_t off[3];
    KILN_TRY(attn_geom(node, at, sh, &g, off));
    size_t es = kiln_dtype_size(t);
    const char *q = (const char *)Q->data + off[0] * es, *k = (const char *)K->data + off[1] * es;
    const char *v = (const char *)V->data + off[2] * es;
    const void *mp = M ? M->data : NULL, *bp = Bi ? Bi->data : NULL;
    const uint8_t *cp = C ? (const uint8_t *)C->data : NULL;
    int32_t tactic = kiln__cuda_tactic(a);
#if KILN_HAVE_CUDNN
    if (kcu_dg_is_id(tactic)) { /* cuDNN's fused attention; declined: kiln's kernel by its rule */
        bool handled = false;
        KILN_TRY(kiln__cu_sdpa_run(a, t, &g, q, k, v, M ? mp : Bi ? bp : (const void *)cp, O->data, &handled));
        if (handled) return KILN_OK;
        tactic = 0;
    }
#endif
    cudaError_t e = cudaErrorNotSupported;
    if (tactic == KCU_ATTN_TACTIC_FA64 || tactic == KCU_ATTN_TACTIC_FA128) /* not taken: the rule's kernel */
        e = kcu_attention_fa(t, &g, q, k, v, mp, cp, bp, O->data, tactic == KCU_ATTN_TACTIC_FA64 ? 64 : 128,
                             KCU_STREAM(a));
    int split = tactic == KCU_ATTN_TACTIC_ROWS ? 0 : tactic == KCU_ATTN_TACTIC_SPLIT ? 1 : KCU_STATE(a)->attn_split;
    if (e == cudaErrorNotSupported)
        e = kcu_attention_mma(t, &g, q, k, v, mp, cp, bp, O->data, KCU_STATE(a)->sm_count, split, KCU_STREAM(a));
    if (e == cudaErrorNotSupported) /* not a case for the tensor-core kernel */
        e = kcu_attention(t, &g, q, k, v, mp, cp, bp, O->data, KCU_STREAM(a));
    KILN_CUDA_TRY(e, node);
    return KILN_OK;
}

/* Attention's tactics on CUDA (fp16/bf16): kiln's tensor-core kernel with
 * each way of sharing out the work (k_attn_plan.h: whole key ranges per
 * warp, or 16-row tiles with the keys split over 4 warps), its variant with
 * the masks staged in shared memory (64 or 128 rows per CTA), then the engine
 * configs of cuDNN's fused attention for the layer's graph where cuDNN
 * takes the layer (cuda_sdpa.c). Tactic 0: kiln's kernel by the plan's rule. */
int kiln__cu_attention_tactics(void *state, const kiln_infer_args *a, int32_t *ids, int cap) {
    kiln_cuda_state *st = state;
    const kiln_attention_attrs *at = a->attrs;
    if (!st || cap < 1) return 0;
    ids[0] = 0;
    if (!at || a->n_in < 3 || a->n_out < 1 || !a->out[0]) return 1;
    attn_shape sh[ATTN_N];
    for (int i = 0; i < ATTN_N; i++) {
        const kiln_tinfo *x = i == ATTN_O ? a->out[0] : i < a->n_in ? a->in[i] : NULL;
        sh[i] = (attn_shape){x ? x->rank : -1, x ? x->dims : NULL};
        if (i <= ATTN_V && !x) return 1;
    }
    kiln_dtype t = a->in[0]->dtype;
    kcu_attn g;
    int64_t off[3];
    if (attn_geom(a->node_name ? a->node_name : "?", at, sh, &g, off) != KILN_OK) {
        kiln__clear_error();
        return 1;
    }
    if (t != KILN_DTYPE_FLOAT16 && t != KILN_DTYPE_BFLOAT16) return 1;
    int n = 0;
    ids[n++] = KCU_ATTN_TACTIC_ROWS;
    if (n < cap) ids[n++] = KCU_ATTN_TACTIC_SPLIT;
    /* kiln-attn-fa64/128 (kcu_attention_fa takes every head size the layer
     * may have) are listed unless KILN_CUDA_ATTN_FA=0 (checked on an H100
     * under compute-sanitizer memcheck; tuning keeps them only where fastest) */
    if (st->attn_fa && n + 1 < cap) {
        ids[n++] = KCU_ATTN_TACTIC_FA64;
        ids[n++] = KCU_ATTN_TACTIC_FA128;
    }
#if KILN_HAVE_CUDNN
    n += kiln__cu_sdpa_tactics(st, t, &g, ids + n, cap - n);
#endif
    return n;
}

const char *kiln__cu_attention_tactic_name(int32_t id) {
    return id == 0                        ? "kiln-attn"
           : id == KCU_ATTN_TACTIC_ROWS  ? "kiln-attn-rows"
           : id == KCU_ATTN_TACTIC_SPLIT ? "kiln-attn-split"
           : id == KCU_ATTN_TACTIC_FA64  ? "kiln-attn-fa64"
           : id == KCU_ATTN_TACTIC_FA128 ? "kiln-attn-fa128"
                                          : "cudnn-sdpa";
}

void kiln__cu_attention_tactic_describe(int32_t id, char *buf, size_t n) {
#if KILN_HAVE_CUDNN
    if (kcu_dg_is_id(id)) {
        /* the graph it is for (cuda_sdpa.c): composite, its stride-0 mask form, the SDPA operation */
        int v = (int)((id & KCU_DG_ID_USER) >> KCU_DG_ID_USER_SHIFT);
        snprintf(buf, n, "cudnn-sdpa-eng%d.%05x%s", kcu_dg_id_engine(id), (unsigned)(id & 0xfffff),
                 v == 1 ? "/s0" : v == 2 ? "/op" : "");
        return;
    }
#endif
    snprintf(buf, n, "%s", kiln__cu_attention_tactic_name(id));
}


#else
typedef int kiln_cuda_fused_disabled;
#endif
