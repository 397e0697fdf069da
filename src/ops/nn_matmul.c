/* nn_matmul.c -- matrix products: MatMul, Gemm, MatMulInteger, QLinearMatMul.
 *
 * float32 goes through kiln__sgemm (src/backends/cpu/kernels/gemm.c). MatMul with a 2-D
 * right operand and a contiguous left one is a single GEMM with the batch
 * folded into M; otherwise one GEMM per batch entry, batches spread over the
 * pool when each is small. Other dtypes use a plain loop accumulating in
 * double (floating types) or 64-bit integers (wrapping, like C unsigned). */
#include "ops/nn_attrs.h"
#include "backends/cpu/kernels/gemm.h"
#include "ops/op.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>

#define NODE(a) ((a)->node_name ? (a)->node_name : "?")

/* ---- shapes ------------------------------------------------------------- */

/* Batched matmul geometry (numpy semantics, 1-D operands promoted). */
typedef struct mm_geom {
    int64_t M, N, K;
    int nbr;                      /* batch rank of the output */
    int64_t bdims[KILN_MAX_RANK]; /* output batch dims */
    int64_t astr[KILN_MAX_RANK];  /* batch strides of A/B in elements (0: broadcast) */
    int64_t bstr[KILN_MAX_RANK];
    int64_t nbatch;
} mm_geom;

static bool mm_dtype_ok(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT32: case KILN_DTYPE_FLOAT64: case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: case KILN_DTYPE_INT32: case KILN_DTYPE_INT64:
    case KILN_DTYPE_UINT32: case KILN_DTYPE_UINT64: case KILN_DTYPE_INT8:
    case KILN_DTYPE_UINT8: case KILN_DTYPE_INT16: case KILN_DTYPE_UINT16:
        return true;
    default:
        return false;
    }
}

/* Output shape of matmul(A, B) into y (rank/dims). Works with unknown dims. */
static kiln_status mm_infer_shape(const char *node, const char *op, const kiln_tinfo *A,
                                  const kiln_tinfo *B, kiln_tinfo *y) {
    if (A->rank < 0 || B->rank < 0) {
        y->rank = -1;
        return KILN_OK;
    }
    if (A->rank == 0 || B->rank == 0)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): inputs must have rank >= 1, got %d and %d",
                         node, op, A->rank, B->rank);
    int64_t K = A->dims[A->rank - 1];
    int64_t Kb = B->rank >= 2 ? B->dims[B->rank - 2] : B->dims[0];
    if (K >= 0 && Kb >= 0 && K != Kb) {
        char s1[128], s2[128];
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (%s): inner dimensions differ: A %s has K=%lld, B %s has K=%lld",
                         node, op, kiln__shape_str(A->rank, A->dims, s1, sizeof s1), (long long)K,
                         kiln__shape_str(B->rank, B->dims, s2, sizeof s2), (long long)Kb);
    }
    kiln_tinfo ba = {0}, bb = {0}, bo = {0};
    ba.rank = A->rank > 2 ? A->rank - 2 : 0;
    bb.rank = B->rank > 2 ? B->rank - 2 : 0;
    for (int i = 0; i < ba.rank; i++) ba.dims[i] = A->dims[i];
    for (int i = 0; i < bb.rank; i++) bb.dims[i] = B->dims[i];
    const kiln_tinfo *bin[2] = {&ba, &bb};
    kiln_status st = kiln__broadcast_shapes(node, 2, bin, &bo);
    if (st != KILN_OK) return kiln__fail_prefix(st, "batch dimensions of %s", op);
    int r = bo.rank;
    for (int i = 0; i < bo.rank; i++) y->dims[i] = bo.dims[i];
    if (A->rank >= 2) y->dims[r++] = A->dims[A->rank - 2];
    if (B->rank >= 2) y->dims[r++] = B->dims[B->rank - 1];
    y->rank = r;
    return KILN_OK;
}

/* Run-time geometry of matmul(A, B) (all dims known). */
static void mm_geom_make(int ra, const int64_t *ad, int rb, const int64_t *bd, mm_geom *g) {
    g->M = ra >= 2 ? ad[ra - 2] : 1;
    g->K = ad[ra - 1];
    g->N = rb >= 2 ? bd[rb - 1] : 1;
    int bra = ra > 2 ? ra - 2 : 0, brb = rb > 2 ? rb - 2 : 0;
    g->nbr = bra > brb ? bra : brb;
    for (int i = 0; i < g->nbr; i++) {
        int ka = i - (g->nbr - bra), kb = i - (g->nbr - brb);
        int64_t da = ka >= 0 ? ad[ka] : 1, db = kb >= 0 ? bd[kb] : 1;
        g->bdims[i] = da == 1 ? db : da;
    }
    kiln__bcast_strides(bra, ad, g->nbr, g->bdims, g->astr);
    kiln__bcast_strides(brb, bd, g->nbr, g->bdims, g->bstr);
    int64_t msa = g->M * g->K, msb = g->K * g->N;
    g->nbatch = 1;
    for (int i = 0; i < g->nbr; i++) {
        g->astr[i] *= msa;
        g->bstr[i] *= msb;
        g->nbatch *= g->bdims[i];
    }
}

/* Element offsets of batch entry `b` in A and B. */
static void mm_batch_offsets(const mm_geom *g, int64_t b, int64_t *oa, int64_t *ob) {
    int64_t a = 0, bo = 0;
    for (int i = g->nbr - 1; i >= 0; i--) {
        int64_t idx = b % g->bdims[i];
        b /= g->bdims[i];
        a += idx * g->astr[i];
        bo += idx * g->bstr[i];
    }
    *oa = a;
    *ob = bo;
}

/* ---- float32 batched kernel -------------------------------------------- */

typedef struct mm_f32_ctx {
    const mm_geom *g;
    const float *A, *B;
    float *C;
    atomic_int failed;
} mm_f32_ctx;

static void mm_f32_batches(void *vctx, int64_t b0, int64_t b1) {
    mm_f32_ctx *c = vctx;
    const mm_geom *g = c->g;
    for (int64_t b = b0; b < b1; b++) {
        int64_t oa, ob;
        mm_batch_offsets(g, b, &oa, &ob);
        if (kiln__sgemm(false, false, g->M, g->N, g->K, 1.0f, c->A + oa, g->K, c->B + ob, g->N, 0.0f,
                        c->C + b * g->M * g->N, g->N, NULL) != KILN_OK)
            atomic_store(&c->failed, 1);
    }
}

static kiln_status mm_f32(const mm_geom *g, const float *A, const float *B, float *C,
                          kiln_pool *pool, const char *node) {
    /* B shared by every batch and A dense: fold the batch into M. */
    bool b_shared = true, a_dense = true;
    int64_t expect = g->M * g->K;
    for (int i = g->nbr - 1; i >= 0; i--) {
        if (g->bstr[i] != 0 && g->bdims[i] != 1) b_shared = false;
        if (g->bdims[i] != 1) {
            if (g->astr[i] != expect) a_dense = false;
            expect *= g->bdims[i];
        }
    }
    if (b_shared && a_dense)
        return kiln__sgemm(false, false, g->nbatch * g->M, g->N, g->K, 1.0f, A, g->K, B, g->N, 0.0f,
                           C, g->N, pool);
    int nt = kiln__pool_threads(pool);
    double per = 2.0 * (double)g->M * (double)g->N * (double)g->K;
    if (nt > 1 && g->nbatch >= nt && per < 64.0e6) {
        mm_f32_ctx c = {.g = g, .A = A, .B = B, .C = C};
        atomic_init(&c.failed, 0);
        kiln__parallel_for(pool, g->nbatch, 1, mm_f32_batches, &c);
        if (atomic_load(&c.failed))
            return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (MatMul): out of memory", node);
        return KILN_OK;
    }
    for (int64_t b = 0; b < g->nbatch; b++) {
        int64_t oa, ob;
        mm_batch_offsets(g, b, &oa, &ob);
        KILN_TRY(kiln__sgemm(false, false, g->M, g->N, g->K, 1.0f, A + oa, g->K, B + ob, g->N, 0.0f,
                             C + b * g->M * g->N, g->N, pool));
    }
    return KILN_OK;
}

/* ---- generic batched kernel (other dtypes) ----------------------------- */

static void mm_generic(const mm_geom *g, kiln_dtype t, const void *A, const void *B, void *C) {
    bool fl = kiln__dtype_is_float(t);
    for (int64_t b = 0; b < g->nbatch; b++) {
        int64_t oa, ob;
        mm_batch_offsets(g, b, &oa, &ob);
        int64_t oc = b * g->M * g->N;
        if (t == KILN_DTYPE_FLOAT64) {
            const double *a = (const double *)A + oa, *bb = (const double *)B + ob;
            double *c = (double *)C + oc;
            for (int64_t i = 0; i < g->M; i++)
                for (int64_t j = 0; j < g->N; j++) {
                    double acc = 0;
                    for (int64_t k = 0; k < g->K; k++) acc += a[i * g->K + k] * bb[k * g->N + j];
                    c[i * g->N + j] = acc;
                }
            continue;
        }
        for (int64_t i = 0; i < g->M; i++)
            for (int64_t j = 0; j < g->N; j++) {
                if (fl) {
                    double acc = 0;
                    for (int64_t k = 0; k < g->K; k++)
                        acc += kiln__load_f64(t, A, oa + i * g->K + k) *
                               kiln__load_f64(t, B, ob + k * g->N + j);
                    kiln__store_f64(t, C, oc + i * g->N + j, acc);
                } else {
                    uint64_t acc = 0;
                    for (int64_t k = 0; k < g->K; k++)
                        acc += (uint64_t)kiln__load_i64(t, A, oa + i * g->K + k) *
                               (uint64_t)kiln__load_i64(t, B, ob + k * g->N + j);
                    kiln__store_i64(t, C, oc + i * g->N + j, (int64_t)acc);
                }
            }
    }
}

/* ---- MatMul ------------------------------------------------------------- */

static kiln_status matmul_infer(const kiln_infer_args *a) {
    const kiln_tinfo *A = a->in[0], *B = a->in[1];
    kiln_tinfo *y = a->out[0];
    y->dtype = A->dtype;
    if (A->dtype != B->dtype)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (MatMul): input dtypes differ (%s and %s)",
                         NODE(a), kiln_dtype_name(A->dtype), kiln_dtype_name(B->dtype));
    if (!mm_dtype_ok(A->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (MatMul): dtype %s is not supported",
                         NODE(a), kiln_dtype_name(A->dtype));
    return mm_infer_shape(NODE(a), "MatMul", A, B, y);
}

static kiln_status matmul_cpu(const kiln_kernel_args *a) {
    const kiln_tensor *A = a->in[0], *B = a->in[1];
    kiln_tensor *Y = a->out[0];
    mm_geom g;
    mm_geom_make(A->rank, A->dims, B->rank, B->dims, &g);
    if (kiln__tensor_numel(Y) == 0) return KILN_OK;
    if (A->dtype == KILN_DTYPE_FLOAT32)
        return mm_f32(&g, A->data, B->data, Y->data, a->pool, NODE(a));
    if (!mm_dtype_ok(A->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (MatMul): dtype %s is not supported",
                         NODE(a), kiln_dtype_name(A->dtype));
    mm_generic(&g, A->dtype, A->data, B->data, Y->data);
    return KILN_OK;
}

const kiln_op_def kiln_op_MatMul = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "MatMul", .domain = "", .since = 1,
    .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = matmul_infer, .cpu = matmul_cpu,
};

/* ---- Gemm --------------------------------------------------------------- */


static kiln_status gemm_import(kiln_import_ctx *ic, void *attrs) {
    kiln_gemm_attrs *at = attrs;
    at->alpha = kiln_attr_float(ic, "alpha", 1.0f);
    at->beta = kiln_attr_float(ic, "beta", 1.0f);
    at->trans_a = kiln_attr_int(ic, "transA", 0) != 0;
    at->trans_b = kiln_attr_int(ic, "transB", 0) != 0;
    /* Gemm-1/6 `broadcast`: with broadcast=0 C must already have the output
     * shape, which broadcasting accepts too. */
    return KILN_OK;
}

/* transA and transB 0 or 1; alpha and beta any floats */
static kiln_status gemm_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_gemm_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "transA", at->trans_a, 0, 1));
    return kiln__check_attr(op, node, "transB", at->trans_b, 0, 1);
}

static kiln_status gemm_infer(const kiln_infer_args *a) {
    const kiln_gemm_attrs *at = a->attrs;
    const kiln_tinfo *A = a->in[0], *B = a->in[1];
    const kiln_tinfo *C = a->n_in > 2 ? a->in[2] : NULL;
    kiln_tinfo *y = a->out[0];
    y->dtype = A->dtype;
    if (A->dtype != B->dtype || (C && C->dtype != A->dtype))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Gemm): input dtypes differ (%s, %s%s%s)",
                         NODE(a), kiln_dtype_name(A->dtype), kiln_dtype_name(B->dtype),
                         C ? ", " : "", C ? kiln_dtype_name(C->dtype) : "");
    if (!mm_dtype_ok(A->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Gemm): dtype %s is not supported",
                         NODE(a), kiln_dtype_name(A->dtype));
    if (A->rank < 0 || B->rank < 0) {
        y->rank = 2;
        y->dims[0] = y->dims[1] = KILN_DIM_UNKNOWN;
        if (A->rank == 2) y->dims[0] = A->dims[at->trans_a ? 1 : 0];
        if (B->rank == 2) y->dims[1] = B->dims[at->trans_b ? 0 : 1];
        return KILN_OK;
    }
    if (A->rank != 2 || B->rank != 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Gemm): A and B must be 2-D, got rank %d and %d",
                         NODE(a), A->rank, B->rank);
    int64_t M = A->dims[at->trans_a ? 1 : 0], K = A->dims[at->trans_a ? 0 : 1];
    int64_t Kb = B->dims[at->trans_b ? 1 : 0], N = B->dims[at->trans_b ? 0 : 1];
    if (K >= 0 && Kb >= 0 && K != Kb)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (Gemm): inner dimensions differ: op(A) is %lldx%lld, op(B) is "
                         "%lldx%lld",
                         NODE(a), (long long)M, (long long)K, (long long)Kb, (long long)N);
    y->rank = 2;
    y->dims[0] = M;
    y->dims[1] = N;
    if (C && C->rank >= 0) {
        if (C->rank > 2)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Gemm): C must have rank <= 2, got %d",
                             NODE(a), C->rank);
        for (int i = 0; i < C->rank; i++) {
            int64_t cd = C->dims[i], od = y->dims[2 - C->rank + i];
            if (cd >= 0 && od >= 0 && cd != 1 && cd != od)
                return KILN_FAIL(KILN_ERR_MODEL,
                                 "node '%s' (Gemm): C of shape %s cannot be broadcast to %lldx%lld",
                                 NODE(a), kiln__shape_str(C->rank, C->dims, (char[64]){0}, 64),
                                 (long long)M, (long long)N);
        }
    }
    return KILN_OK;
}

static kiln_status gemm_cpu(const kiln_kernel_args *a) {
    const kiln_gemm_attrs *at = a->attrs;
    const kiln_tensor *A = a->in[0], *B = a->in[1];
    const kiln_tensor *C = a->n_in > 2 ? a->in[2] : NULL;
    kiln_tensor *Y = a->out[0];
    int64_t M = Y->dims[0], N = Y->dims[1];
    int64_t K = A->dims[at->trans_a ? 0 : 1];
    if (M == 0 || N == 0) return KILN_OK;
    kiln_dtype t = A->dtype;
    bool use_c = C && at->beta != 0.0f && kiln__tensor_numel(C) > 0;
    int64_t cs[2] = {0, 0};
    if (use_c) kiln__bcast_strides(C->rank, C->dims, 2, Y->dims, cs);
    if (t == KILN_DTYPE_FLOAT32) {
        float *y = Y->data;
        if (use_c) {
            const float *c = C->data;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) y[i * N + j] = at->beta * c[i * cs[0] + j * cs[1]];
        }
        return kiln__sgemm(at->trans_a, at->trans_b, M, N, K, at->alpha, A->data, A->dims[1],
                           B->data, B->dims[1], use_c ? 1.0f : 0.0f, y, N, a->pool);
    }
    if (!mm_dtype_ok(t))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Gemm): dtype %s is not supported",
                         NODE(a), kiln_dtype_name(t));
    int64_t lda = A->dims[1], ldb = B->dims[1];
    bool fl = kiln__dtype_is_float(t);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            if (fl) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++) {
                    double av = kiln__load_f64(t, A->data, at->trans_a ? k * lda + i : i * lda + k);
                    double bv = kiln__load_f64(t, B->data, at->trans_b ? j * ldb + k : k * ldb + j);
                    acc += av * bv;
                }
                double v = (double)at->alpha * acc;
                if (use_c) v += (double)at->beta * kiln__load_f64(t, C->data, i * cs[0] + j * cs[1]);
                kiln__store_f64(t, Y->data, i * N + j, v);
            } else {
                uint64_t acc = 0;
                for (int64_t k = 0; k < K; k++) {
                    int64_t av = kiln__load_i64(t, A->data, at->trans_a ? k * lda + i : i * lda + k);
                    int64_t bv = kiln__load_i64(t, B->data, at->trans_b ? j * ldb + k : k * ldb + j);
                    acc += (uint64_t)av * (uint64_t)bv;
                }
                double v = (double)at->alpha * (double)(int64_t)acc;
                if (use_c)
                    v += (double)at->beta * (double)kiln__load_i64(t, C->data, i * cs[0] + j * cs[1]);
                kiln__store_i64(t, Y->data, i * N + j, (int64_t)llround(v));
            }
        }
    return KILN_OK;
}

const kiln_op_def kiln_op_Gemm = {
    .flags = KILN_OP_FLAG_REDUCIBLE,
    .name = "Gemm", .domain = "", .since = 1,
    .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_gemm_attrs),
    .import = gemm_import, .validate = gemm_validate, .infer = gemm_infer, .cpu = gemm_cpu,
};

/* ---- MatMulInteger / QLinearMatMul -------------------------------------- */

static bool is_8bit(kiln_dtype t) { return t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT8; }

/* Zero point (or scale) tensor z: scalar, or 1-D of length `n` (per row of
 * A / per column of B). Returns the value for index i. */
static double zp_at(const kiln_tensor *z, int64_t i) {
    if (!z) return 0.0;
    int64_t n = kiln__tensor_numel(z);
    return kiln__load_f64(z->dtype, z->data, n == 1 ? 0 : i);
}

static kiln_status check_zp(const char *node, const char *op, const char *what,
                            const kiln_tinfo *z, kiln_dtype want, int64_t len) {
    if (!z) return KILN_OK;
    if (want != KILN_DTYPE_UNDEFINED && z->dtype != want)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): %s has dtype %s, expected %s", node, op,
                         what, kiln_dtype_name(z->dtype), kiln_dtype_name(want));
    if (z->rank < 0) return KILN_OK;
    int64_t n = kiln__numel(z->rank, z->dims);
    if (z->rank > 1 || (n >= 0 && n != 1 && len >= 0 && n != len))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (%s): %s must be a scalar or a 1-D tensor of length %lld, got "
                         "shape %s",
                         node, op, what, (long long)len,
                         kiln__shape_str(z->rank, z->dims, (char[64]){0}, 64));
    return KILN_OK;
}

static kiln_status mmi_infer(const kiln_infer_args *a) {
    const kiln_tinfo *A = a->in[0], *B = a->in[1];
    kiln_tinfo *y = a->out[0];
    y->dtype = KILN_DTYPE_INT32;
    if (!is_8bit(A->dtype) || !is_8bit(B->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (MatMulInteger): inputs must be int8/uint8, got %s and %s",
                         NODE(a), kiln_dtype_name(A->dtype), kiln_dtype_name(B->dtype));
    int64_t M = A->rank >= 2 ? A->dims[A->rank - 2] : 1;
    int64_t N = B->rank >= 2 ? B->dims[B->rank - 1] : 1;
    KILN_TRY(check_zp(NODE(a), "MatMulInteger", "a_zero_point", a->n_in > 2 ? a->in[2] : NULL,
                      A->dtype, A->rank < 0 ? -1 : M));
    KILN_TRY(check_zp(NODE(a), "MatMulInteger", "b_zero_point", a->n_in > 3 ? a->in[3] : NULL,
                      B->dtype, B->rank < 0 ? -1 : N));
    return mm_infer_shape(NODE(a), "MatMulInteger", A, B, y);
}

/* acc[i,j] = sum_k (A[i,k] - az[i]) * (B[k,j] - bz[j]) for every batch;
 * emit(ctx, index, acc, i, j) stores the result. */
typedef void (*mm_emit_fn)(const kiln_kernel_args *a, int64_t idx, int64_t acc, int64_t i,
                           int64_t j);

static void mm_int_run(const kiln_kernel_args *a, const kiln_tensor *A, const kiln_tensor *B,
                       const kiln_tensor *az, const kiln_tensor *bz, mm_emit_fn emit) {
    mm_geom g;
    mm_geom_make(A->rank, A->dims, B->rank, B->dims, &g);
    for (int64_t b = 0; b < g.nbatch; b++) {
        int64_t oa, ob;
        mm_batch_offsets(&g, b, &oa, &ob);
        for (int64_t i = 0; i < g.M; i++) {
            int64_t zi = (int64_t)zp_at(az, i);
            for (int64_t j = 0; j < g.N; j++) {
                int64_t zj = (int64_t)zp_at(bz, j), acc = 0;
                for (int64_t k = 0; k < g.K; k++)
                    acc += (kiln__load_i64(A->dtype, A->data, oa + i * g.K + k) - zi) *
                           (kiln__load_i64(B->dtype, B->data, ob + k * g.N + j) - zj);
                emit(a, b * g.M * g.N + i * g.N + j, acc, i, j);
            }
        }
    }
}

static void mmi_emit(const kiln_kernel_args *a, int64_t idx, int64_t acc, int64_t i, int64_t j) {
    (void)i;
    (void)j;
    ((int32_t *)a->out[0]->data)[idx] = (int32_t)acc;
}

static kiln_status mmi_cpu(const kiln_kernel_args *a) {
    mm_int_run(a, a->in[0], a->in[1], a->n_in > 2 ? a->in[2] : NULL, a->n_in > 3 ? a->in[3] : NULL,
               mmi_emit);
    return KILN_OK;
}

const kiln_op_def kiln_op_MatMulInteger = {
    .name = "MatMulInteger", .domain = "", .since = 10,
    .min_inputs = 2, .max_inputs = 4, .min_outputs = 1, .max_outputs = 1,
    .infer = mmi_infer, .cpu = mmi_cpu,
};

/* QLinearMatMul: a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp. */
static kiln_status qlmm_infer(const kiln_infer_args *a) {
    const kiln_tinfo *A = a->in[0], *B = a->in[3];
    kiln_tinfo *y = a->out[0];
    const kiln_tinfo *yz = a->in[7];
    y->dtype = yz->dtype;
    if (!is_8bit(A->dtype) || !is_8bit(B->dtype) || !is_8bit(yz->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (QLinearMatMul): a, b, y_zero_point must be int8/uint8, got "
                         "%s, %s, %s",
                         NODE(a), kiln_dtype_name(A->dtype), kiln_dtype_name(B->dtype),
                         kiln_dtype_name(yz->dtype));
    int64_t M = A->rank >= 2 ? A->dims[A->rank - 2] : 1;
    int64_t N = B->rank >= 2 ? B->dims[B->rank - 1] : 1;
    const char *op = "QLinearMatMul";
    KILN_TRY(check_zp(NODE(a), op, "a_scale", a->in[1], KILN_DTYPE_FLOAT32, A->rank < 0 ? -1 : M));
    KILN_TRY(check_zp(NODE(a), op, "a_zero_point", a->in[2], A->dtype, A->rank < 0 ? -1 : M));
    KILN_TRY(check_zp(NODE(a), op, "b_scale", a->in[4], KILN_DTYPE_FLOAT32, B->rank < 0 ? -1 : N));
    KILN_TRY(check_zp(NODE(a), op, "b_zero_point", a->in[5], B->dtype, B->rank < 0 ? -1 : N));
    KILN_TRY(check_zp(NODE(a), op, "y_scale", a->in[6], KILN_DTYPE_FLOAT32, 1));
    KILN_TRY(check_zp(NODE(a), op, "y_zero_point", a->in[7], KILN_DTYPE_UNDEFINED, 1));
    return mm_infer_shape(NODE(a), op, A, B, y);
}

static void qlmm_emit(const kiln_kernel_args *a, int64_t idx, int64_t acc, int64_t i, int64_t j) {
    double sa = zp_at(a->in[1], i), sb = zp_at(a->in[4], j), sy = zp_at(a->in[6], 0);
    double zy = zp_at(a->in[7], 0);
    double v = nearbyint((double)acc * (double)(float)(sa * sb / sy)) + zy;
    kiln_dtype t = a->out[0]->dtype;
    double lo = t == KILN_DTYPE_UINT8 ? 0 : -128, hi = t == KILN_DTYPE_UINT8 ? 255 : 127;
    v = v < lo ? lo : v > hi ? hi : v;
    kiln__store_i64(t, a->out[0]->data, idx, (int64_t)v);
}

static kiln_status qlmm_cpu(const kiln_kernel_args *a) {
    mm_int_run(a, a->in[0], a->in[3], a->in[2], a->in[5], qlmm_emit);
    return KILN_OK;
}

const kiln_op_def kiln_op_QLinearMatMul = {
    .name = "QLinearMatMul", .domain = "", .since = 10,
    .min_inputs = 8, .max_inputs = 8, .min_outputs = 1, .max_outputs = 1,
    .infer = qlmm_infer, .cpu = qlmm_cpu,
};
