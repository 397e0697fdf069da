/* cuda_blas.c -- matrix products through cuBLASLt: the row-major batched
 * GEMM used by MatMul, Gemm and the convolution fallback, plus the two ops.
 *
 * cuBLASLt is column-major; a row-major M x N product is computed as the
 * column-major N x M product C^T = op(B)^T op(A)^T, i.e. with the operands
 * swapped and each matrix read through its column-major view (no copies).
 * The algorithm comes from cuBLASLt's heuristic each call (autotuning and a
 * plan cache belong to the builder, later); when it offers none, a simple
 * tiled kernel (k_gemm.cu) runs instead. */
#if KILN_HAVE_CUDA

#include "backends/cuda/cuda_internal.h"

#include <stddef.h>
#include <stdint.h>

static kiln_status lt_fail(const char *node, const char *what, cublasStatus_t s) {
    return KILN_FAIL(KILN_ERR_DEVICE, "node '%s': cuBLASLt %s failed: %s", node, what,
                     cublasLtGetStatusString(s));
}

#define LT_TRY(call, what)                                \
    do {                                                  \
        cublasStatus_t lt_s_ = (call);                    \
        if (lt_s_ != CUBLAS_STATUS_SUCCESS) {             \
            s = lt_fail(node, (what), lt_s_);             \
            goto done;                                    \
        }                                                 \
    } while (0)

/* largest power of two <= 256 dividing both the address and the batch stride */
static uint32_t align_of(const void *p, int64_t stride_bytes, int64_t batch) {
    uint32_t al = 256;
    uintptr_t v = (uintptr_t)p;
    while (al > 1 && (v % al || (batch > 1 && stride_bytes % al))) al >>= 1;
    return al;
}

static kiln_status gemm_simple(const kiln_kernel_args *a, const kiln_cuda_gemm *p) {
    KILN_CUDA_TRY(kcu_gemm_simple(p->t, p->ta, p->tb, p->M, p->N, p->K, p->batch, p->alpha, p->A,
                                  p->lda, p->sa, p->B, p->ldb, p->sb, p->beta, p->C, p->ldc, p->sc,
                                  KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* Destroys a GEMM plan's descriptors and clears it. */
static void gemm_plan_release(kiln_cuda_gemm_plan *pl) {
    for (int i = 0; i < 3; i++)
        if (pl->l[i]) cublasLtMatrixLayoutDestroy(pl->l[i]);
    if (pl->op) cublasLtMatmulDescDestroy(pl->op);
    memset(pl, 0, sizeof *pl);
}

static void gemm_plan_destroy(void *pl) {
    gemm_plan_release(pl);
    kiln__free(pl);
}

const kiln_plan_type kiln__cuda_gemm_plans = {offsetof(kiln_cuda_gemm_plan, key), sizeof(kiln_cuda_gemm_key),
                                              KCU_GEMM_PLANS, gemm_plan_destroy};

static void gemm_key(const kiln_cuda_state *st, const kiln_cuda_gemm *p, bool assume_aligned,
                     kiln_cuda_gemm_key *k) {
    memset(k, 0, sizeof *k); /* compared with memcmp: padding too */
    const int64_t es = (int64_t)kiln_dtype_size(p->t);
    k->t = p->t;
    k->ta = p->ta;
    k->tb = p->tb;
    k->tf32 = p->t == KILN_DTYPE_FLOAT32 && st->allow_tf32;
    k->epi = p->epi;
    k->tactic = p->tactic;
    if (assume_aligned) {
        k->al[0] = k->al[1] = k->al[2] = k->al[3] = 256;
    } else {
        k->al[0] = align_of(p->B, p->sb * es, p->batch);
        k->al[1] = align_of(p->A, p->sa * es, p->batch);
        k->al[2] = align_of(p->C, p->sc * es, p->batch);
        if (p->Cin) {
            uint32_t ai = align_of(p->Cin, p->sc * es, p->batch);
            if (ai < k->al[2]) k->al[2] = ai;
        }
        k->al[3] = p->bias ? align_of(p->bias, 0, 1) : 0;
    }
    k->M = p->M;
    k->N = p->N;
    k->K = p->K;
    k->batch = p->batch;
    k->lda = p->lda;
    k->ldb = p->ldb;
    k->ldc = p->ldc;
    k->sa = p->sa;
    k->sb = p->sb;
    k->sc = p->sc;
}

/* Descriptors and heuristic candidates for key k: fills pl (op, layouts)
 * and up to cap results. *nres = 0: cuBLASLt has no algorithm. */
static kiln_status gemm_describe(kiln_cuda_state *st, const char *node, const kiln_cuda_gemm_key *k,
                                 kiln_cuda_gemm_plan *pl, cublasLtMatmulHeuristicResult_t *res,
                                 int cap, int *nres) {
    *nres = 0;
    cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
    cudaDataType_t dt = CUDA_R_32F, scale_t = CUDA_R_32F;
    switch ((kiln_dtype)k->t) {
    case KILN_DTYPE_FLOAT32: ct = k->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F; break;
    case KILN_DTYPE_FLOAT16: dt = CUDA_R_16F; break;
    case KILN_DTYPE_BFLOAT16: dt = CUDA_R_16BF; break;
    default: /* FLOAT64 */
        ct = CUBLAS_COMPUTE_64F;
        dt = CUDA_R_64F;
        scale_t = CUDA_R_64F;
        break;
    }
    kiln_status s = KILN_OK;
    cublasLtMatmulPreference_t pref = NULL;
    LT_TRY(cublasLtMatmulDescCreate(&pl->op, ct, scale_t), "MatmulDescCreate");
    /* first operand: B (column-major view: rows = row-major cols) */
    cublasOperation_t opf = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t ops = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_TRANSA, &opf, sizeof opf),
           "set TRANSA");
    LT_TRY(cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_TRANSB, &ops, sizeof ops),
           "set TRANSB");
    if (k->epi) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_DEFAULT;
        switch (k->epi) {
        case KCU_EPI_RELU: ep = CUBLASLT_EPILOGUE_RELU; break;
        case KCU_EPI_GELU: ep = CUBLASLT_EPILOGUE_GELU; break;
        case KCU_EPI_BIAS: ep = CUBLASLT_EPILOGUE_BIAS; break;
        case KCU_EPI_BIAS | KCU_EPI_RELU: ep = CUBLASLT_EPILOGUE_RELU_BIAS; break;
        case KCU_EPI_BIAS | KCU_EPI_GELU: ep = CUBLASLT_EPILOGUE_GELU_BIAS; break;
        default: return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s': GEMM epilogue %d", node, k->epi);
        }
        LT_TRY(cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep),
               "set EPILOGUE");
        if (k->epi & KCU_EPI_BIAS) {
            cudaDataType_t bt = dt;
            LT_TRY(cublasLtMatmulDescSetAttribute(pl->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                                  sizeof bt),
                   "set BIAS_DATA_TYPE");
        }
    }
    LT_TRY(cublasLtMatrixLayoutCreate(&pl->l[0], dt, (uint64_t)(k->tb ? k->K : k->N),
                                      (uint64_t)(k->tb ? k->N : k->K), k->ldb),
           "layout of B");
    LT_TRY(cublasLtMatrixLayoutCreate(&pl->l[1], dt, (uint64_t)(k->ta ? k->M : k->K),
                                      (uint64_t)(k->ta ? k->K : k->M), k->lda),
           "layout of A");
    LT_TRY(cublasLtMatrixLayoutCreate(&pl->l[2], dt, (uint64_t)k->N, (uint64_t)k->M, k->ldc),
           "layout of C");
    if (k->batch > 1) {
        int32_t bc = (int32_t)k->batch;
        const int64_t strides[3] = {k->sb, k->sa, k->sc};
        for (int i = 0; i < 3; i++) {
            LT_TRY(cublasLtMatrixLayoutSetAttribute(pl->l[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                    &bc, sizeof bc),
                   "set batch count");
            int64_t so = strides[i];
            LT_TRY(cublasLtMatrixLayoutSetAttribute(
                       pl->l[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &so, sizeof so),
                   "set batch stride");
        }
    }
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
    uint64_t ws = st->lt_ws_size;
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                sizeof ws),
           "set workspace");
    static const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++) {
        uint32_t al = k->al[i < 3 ? i : 2];
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &al, sizeof al),
               "set alignment");
    }
    int n = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(st->lt, pl->op, pl->l[0], pl->l[1], pl->l[2],
                                                       pl->l[2], pref, cap, res, &n);
    if (hs == CUBLAS_STATUS_SUCCESS) *nres = n;
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    return s;
}

/* Builds plan pl for key k (the tactic picks among the heuristic's results). */
static kiln_status gemm_plan_build(kiln_cuda_state *st, const char *node,
                                   const kiln_cuda_gemm_key *k, kiln_cuda_gemm_plan *pl) {
    memset(pl, 0, sizeof *pl);
    pl->key = *k;
    cublasLtMatmulHeuristicResult_t res[KCU_GEMM_MAX_CANDIDATES];
    int n = 0;
    kiln_status s = gemm_describe(st, node, k, pl, res, KCU_GEMM_MAX_CANDIDATES, &n);
    if (s != KILN_OK) {
        gemm_plan_release(pl);
        return s;
    }
    if (n < 1) {
        pl->simple = true;
        return KILN_OK;
    }
    int pick = k->tactic >= 0 && k->tactic < n ? k->tactic : 0;
    pl->algo = res[pick].algo;
    return KILN_OK;
}

int kiln__cuda_gemm_candidates(kiln_cuda_state *st, const kiln_cuda_gemm *p, int cap) {
    if (p->M <= 0 || p->N <= 0 || p->K <= 0 || p->batch <= 0 || !kiln__cu_is_float(p->t)) return 0;
    kiln_cuda_gemm_key k;
    gemm_key(st, p, true, &k);
    kiln_cuda_gemm_plan pl;
    memset(&pl, 0, sizeof pl);
    cublasLtMatmulHeuristicResult_t res[KCU_GEMM_MAX_CANDIDATES];
    int n = 0;
    if (cap > KCU_GEMM_MAX_CANDIDATES) cap = KCU_GEMM_MAX_CANDIDATES;
    if (gemm_describe(st, "tactics", &k, &pl, res, cap, &n) != KILN_OK) {
        kiln__clear_error();
        n = 0;
    }
    gemm_plan_release(&pl);
    return n;
}

kiln_status kiln__cuda_gemm(const kiln_kernel_args *a, const kiln_cuda_gemm *p) {
    kiln_cuda_state *st = KCU_STATE(a);
    const char *node = KCU_NODE(a);
    if (p->M <= 0 || p->N <= 0 || p->batch <= 0) return KILN_OK;
    if (!kiln__cu_is_float(p->t))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': GEMM of dtype %s has no CUDA kernel",
                         node, kiln_dtype_name(p->t));
    if (p->epi && (p->batch != 1 || ((p->epi & KCU_EPI_BIAS) && !p->bias)))
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s': GEMM epilogue needs batch 1 and a bias",
                         node);
    bool sep_c = p->Cin && p->Cin != p->C && p->beta != 0.0;
    if (!p->epi && (p->K <= 0 || p->batch > INT32_MAX)) {
        if (sep_c)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': GEMM with a separate C needs cuBLASLt", node);
        return gemm_simple(a, p);
    }
    kiln_cuda_gemm_key k;
    gemm_key(st, p, false, &k);
    kiln_cuda_node *ns = kiln__cuda_node(a);
    kiln_cuda_gemm_plan tmp, *pl = NULL;
    if (ns) {
        pl = kiln__plan_cache_find(&ns->gemm, &kiln__cuda_gemm_plans, &k);
        if (!pl) {
            if (!(pl = kiln__malloc(sizeof *pl)))
                return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s': cuBLASLt GEMM plan", node);
            kiln_status s = gemm_plan_build(st, node, &k, pl);
            if (s != KILN_OK) {
                kiln__free(pl);
                return s;
            }
            kiln__plan_cache_put(&ns->gemm, &kiln__cuda_gemm_plans, pl);
        }
    } else {
        KILN_TRY(gemm_plan_build(st, node, &k, &tmp));
        pl = &tmp;
    }
    kiln_status s = KILN_OK;
    if (pl->simple) {
        s = p->epi || sep_c ? KILN_FAIL(KILN_ERR_UNSUPPORTED,
                                        "node '%s': cuBLASLt has no algorithm for this GEMM with its "
                                        "epilogue or separate C", node)
                            : gemm_simple(a, p);
        goto out;
    }
    if (p->epi & KCU_EPI_BIAS) {
        const void *bias = p->bias;
        cublasStatus_t bs = cublasLtMatmulDescSetAttribute(
            pl->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
        if (bs != CUBLAS_STATUS_SUCCESS) {
            s = lt_fail(node, "set BIAS_POINTER", bs);
            goto out;
        }
    }
    float af = (float)p->alpha, bf = (float)p->beta;
    bool f64 = p->t == KILN_DTYPE_FLOAT64;
    const void *alpha = f64 ? (const void *)&p->alpha : (const void *)&af;
    const void *beta = f64 ? (const void *)&p->beta : (const void *)&bf;
    cublasStatus_t ms = cublasLtMatmul(st->lt, pl->op, alpha, p->B, pl->l[0], p->A, pl->l[1], beta,
                                       sep_c ? p->Cin : p->C, pl->l[2], p->C, pl->l[2], &pl->algo,
                                       st->lt_ws, st->lt_ws_size, KCU_STREAM(a));
    if (ms == CUBLAS_STATUS_NOT_SUPPORTED && !p->epi && !sep_c) { /* e.g. a layout the heuristic let through */
        pl->simple = true;
        s = gemm_simple(a, p);
    } else if (ms == CUBLAS_STATUS_NOT_SUPPORTED) {
        pl->simple = true; /* the caller does without the epilogue */
        s = KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': cuBLASLt cannot run this GEMM epilogue or separate C",
                      node);
    } else if (ms != CUBLAS_STATUS_SUCCESS) {
        s = lt_fail(node, "Matmul", ms);
    }
out:
    if (pl == &tmp) gemm_plan_release(&tmp);
    return s;
}

/* ---- MatMul ---------------------------------------------------------------------------------- */

bool kiln__cu_matmul_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    return kiln__cu_is_float(t) && kiln__cu_in_dtype(g, n, 1) == t;
}

kiln_status kiln__cu_matmul_run(const kiln_kernel_args *a) {
    const kiln_tensor *A = a->in[0], *B = a->in[1];
    kiln_tensor *Y = a->out[0];
    const char *node = KCU_NODE(a);
    if (!kiln__cu_is_float(A->dtype) || B->dtype != A->dtype)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (MatMul): dtype %s has no CUDA kernel",
                         node, kiln_dtype_name(A->dtype));
    if (A->rank < 1 || B->rank < 1)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (MatMul): inputs must have rank >= 1", node);
    if (kiln__tensor_numel(Y) == 0) return KILN_OK;
    const int ra = A->rank, rb = B->rank;
    kiln_cuda_gemm p;
    memset(&p, 0, sizeof p);
    p.t = A->dtype;
    p.M = ra >= 2 ? A->dims[ra - 2] : 1;
    p.K = A->dims[ra - 1];
    p.N = rb >= 2 ? B->dims[rb - 1] : 1;
    p.lda = p.K;
    p.ldb = p.N;
    p.ldc = p.N;
    p.alpha = 1.0;
    p.beta = 0.0;
    /* batch dims (numpy broadcast), element strides of A and B per batch dim */
    int bra = ra > 2 ? ra - 2 : 0, brb = rb > 2 ? rb - 2 : 0;
    int nbr = bra > brb ? bra : brb;
    int64_t bd[KILN_MAX_RANK], as[KILN_MAX_RANK], bs[KILN_MAX_RANK];
    for (int i = 0; i < nbr; i++) {
        int ka = i - (nbr - bra), kb = i - (nbr - brb);
        int64_t da = ka >= 0 ? A->dims[ka] : 1, db = kb >= 0 ? B->dims[kb] : 1;
        bd[i] = da == 1 ? db : da;
    }
    kiln__bcast_strides(bra, A->dims, nbr, bd, as);
    kiln__bcast_strides(brb, B->dims, nbr, bd, bs);
    int64_t nbatch = 1;
    for (int i = 0; i < nbr; i++) {
        as[i] *= p.M * p.K;
        bs[i] *= p.K * p.N;
        nbatch *= bd[i];
    }
    /* B shared by every batch entry and A dense: one GEMM with the batch in M */
    bool b_shared = true, a_dense = true;
    int64_t expect = p.M * p.K;
    for (int i = nbr - 1; i >= 0; i--) {
        if (bd[i] == 1) continue;
        if (bs[i] != 0) b_shared = false;
        if (as[i] != expect) a_dense = false;
        expect *= bd[i];
    }
    if (b_shared && a_dense) {
        p.M *= nbatch;
        p.batch = 1;
        p.A = A->data;
        p.B = B->data;
        p.C = Y->data;
        return kiln__cuda_gemm(a, &p);
    }
    /* merge batch dims that are linear for A, B and C; the innermost merged
     * dim is batched in one call, the outer ones are looped */
    int64_t md[KILN_MAX_RANK], ma[KILN_MAX_RANK], mb[KILN_MAX_RANK], mc[KILN_MAX_RANK];
    int nm = 0;
    int64_t cst = p.M * p.N, cs[KILN_MAX_RANK];
    for (int i = nbr - 1; i >= 0; i--) {
        cs[i] = cst;
        cst *= bd[i];
    }
    for (int i = 0; i < nbr; i++) {
        if (bd[i] == 1) continue;
        if (nm > 0 && ma[nm - 1] == as[i] * bd[i] && mb[nm - 1] == bs[i] * bd[i] &&
            mc[nm - 1] == cs[i] * bd[i]) {
            md[nm - 1] *= bd[i];
            ma[nm - 1] = as[i];
            mb[nm - 1] = bs[i];
            mc[nm - 1] = cs[i];
        } else {
            md[nm] = bd[i];
            ma[nm] = as[i];
            mb[nm] = bs[i];
            mc[nm] = cs[i];
            nm++;
        }
    }
    if (nm == 0) {
        md[0] = 1;
        ma[0] = mb[0] = 0;
        mc[0] = p.M * p.N;
        nm = 1;
    }
    const int64_t es = (int64_t)kiln_dtype_size(p.t);
    int64_t outer = 1;
    for (int i = 0; i < nm - 1; i++) outer *= md[i];
    p.batch = md[nm - 1];
    p.sa = ma[nm - 1];
    p.sb = mb[nm - 1];
    p.sc = mc[nm - 1];
    for (int64_t o = 0; o < outer; o++) {
        int64_t rem = o, oa = 0, ob = 0, oc = 0;
        for (int i = nm - 2; i >= 0; i--) {
            int64_t q = rem % md[i];
            rem /= md[i];
            oa += q * ma[i];
            ob += q * mb[i];
            oc += q * mc[i];
        }
        p.A = (const char *)A->data + oa * es;
        p.B = (const char *)B->data + ob * es;
        p.C = (char *)Y->data + oc * es;
        KILN_TRY(kiln__cuda_gemm(a, &p));
    }
    return KILN_OK;
}

/* ---- Gemm ------------------------------------------------------------------------------------- */


bool kiln__cu_gemm_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    kiln_dtype c = kiln__cu_in_dtype(g, n, 2);
    return kiln__cu_is_float(t) && kiln__cu_in_dtype(g, n, 1) == t &&
           (c == KILN_DTYPE_UNDEFINED || c == t);
}

kiln_status kiln__cu_gemm_run(const kiln_kernel_args *a) {
    const kiln_gemm_attrs *at = a->attrs;
    const kiln_tensor *A = a->in[0], *B = a->in[1];
    const kiln_tensor *C = a->n_in > 2 ? a->in[2] : NULL;
    kiln_tensor *Y = a->out[0];
    const char *node = KCU_NODE(a);
    if (!kiln__cu_is_float(A->dtype) || B->dtype != A->dtype || (C && C->dtype != A->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Gemm): dtype %s has no CUDA kernel",
                         node, kiln_dtype_name(A->dtype));
    if (A->rank != 2 || B->rank != 2 || Y->rank != 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Gemm): A and B must be 2-D", node);
    kiln_cuda_gemm p;
    memset(&p, 0, sizeof p);
    p.t = A->dtype;
    p.ta = at->trans_a != 0;
    p.tb = at->trans_b != 0;
    p.M = Y->dims[0];
    p.N = Y->dims[1];
    p.K = A->dims[p.ta ? 0 : 1];
    p.batch = 1;
    p.A = A->data;
    p.B = B->data;
    p.C = Y->data;
    p.lda = A->dims[1];
    p.ldb = B->dims[1];
    p.ldc = p.N;
    p.alpha = at->alpha;
    if (p.M == 0 || p.N == 0) return KILN_OK;
    bool use_c = C && at->beta != 0.0f && kiln__tensor_numel(C) > 0;
    if (use_c) {
        /* Y = C broadcast, then Y = alpha A B + beta Y */
        if (C->rank > 2)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Gemm): C must have rank <= 2", node);
        int64_t cs[2];
        kiln__bcast_strides(C->rank, C->dims, 2, Y->dims, cs);
        KILN_TRY(kiln__cuda_copy(a, kiln_dtype_size(p.t), 2, Y->dims, Y->data, NULL, C->data, cs));
        p.beta = at->beta;
    }
    return kiln__cuda_gemm(a, &p);
}


#else
typedef int kiln_cuda_blas_disabled;
#endif
