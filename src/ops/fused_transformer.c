/* fused_transformer.c -- kiln's transformer layers: kiln.FusedMatMul,
 * kiln.Gelu, kiln.Attention (see fused_transformer.h for their inputs,
 * attributes and semantics): validation, inference and the reference
 * kernels (kiln__sgemm and the float32 helpers). The CPU backend's tuned
 * kernels (oneDNN, AVX-512) are src/backends/cpu/kernels/fused_transformer_cpu.c. */
#include "ops/fused_transformer.h"

#include "backends/cpu/kernels/fused_transformer_math.h"
#include "backends/cpu/kernels/gemm.h"

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>

#define NODE(a) ((a)->node_name ? (a)->node_name : "?")

/* Inference accepts float32, float16 and bfloat16 layers (the reduced types
 * are for device backends: the CPU kernels below refuse them, cpu_f32_only);
 * every float input of a layer has the dtype of its first input. */
static kiln_status need_float(const char *node, const char *op, const char *what, const kiln_tinfo *t,
                              const kiln_tinfo *first) {
    if (!t) return KILN_OK;
    kiln_dtype want = first->dtype;
    bool ok = want == KILN_DTYPE_FLOAT32 || want == KILN_DTYPE_FLOAT16 || want == KILN_DTYPE_BFLOAT16;
    if (!ok || t->dtype != want)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (%s): %s must be float32, float16 or bfloat16 like the first input "
                         "(%s), got %s", node, op, what, kiln_dtype_name(want), kiln_dtype_name(t->dtype));
    return KILN_OK;
}

/* The CPU kernels compute in float32 only (bf16 CPU layers keep float32
 * tensors and set the precision attribute); bool inputs (Attention's cond)
 * are not float tensors. */
static kiln_status cpu_f32_only(const kiln_kernel_args *a, const char *op) {
    for (int i = 0; i < a->n_in; i++)
        if (a->in[i] && a->in[i]->dtype != KILN_DTYPE_FLOAT32 && a->in[i]->dtype != KILN_DTYPE_BOOL)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "node '%s' (%s): the CPU kernel takes float32 tensors, input %d is %s "
                             "(run this layer on a device backend or in float32)",
                             NODE(a), op, i, kiln_dtype_name(a->in[i]->dtype));
    return KILN_OK;
}

static const float *fmm_bias(const kiln_kernel_args *a) {
    return a->n_in > 2 && a->in[2] ? a->in[2]->data : NULL;
}

static const float *fmm_residual(const kiln_kernel_args *a) {
    return a->n_in > 3 && a->in[3] ? a->in[3]->data : NULL;
}

/* ======================================================================= */
/* kiln.FusedMatMul                                                         */
/* ======================================================================= */

/* A layer's arithmetic precision: fp32 or bf16. */
static kiln_status fp32_or_bf16(const kiln_op_def *op, const char *node, int32_t p) {
    if (p != KILN_PRECISION_FP32 && p != KILN_PRECISION_BF16)
        return KILN_VALIDATE_FAIL(op, node, "unsupported precision %d", (int)p);
    return KILN_OK;
}

/* act a KILN_FACT_*; trans_b 0 or 1; precision fp32 or bf16 */
static kiln_status fmm_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_fused_matmul_attrs *at = attrs;
    if (at->act < KILN_FACT_NONE || at->act > KILN_FACT_GELU_TANH)
        return KILN_VALIDATE_FAIL(op, node, "unknown activation %d", (int)at->act);
    KILN_TRY(kiln__check_attr(op, node, "trans_b", at->trans_b, 0, 1));
    return fp32_or_bf16(op, node, at->precision);
}

static kiln_status fmm_infer(const kiln_infer_args *a) {
    const kiln_fused_matmul_attrs *at = a->attrs;
    const kiln_tinfo *A = a->in[0], *B = a->in[1], *bias = a->n_in > 2 ? a->in[2] : NULL;
    const kiln_tinfo *res = a->n_in > 3 ? a->in[3] : NULL;
    const char *op = "kiln.FusedMatMul";
    KILN_TRY(need_float(NODE(a), op, "A", A, A));
    KILN_TRY(need_float(NODE(a), op, "B", B, A));
    KILN_TRY(need_float(NODE(a), op, "bias", bias, A));
    KILN_TRY(need_float(NODE(a), op, "residual", res, A));
    kiln_tinfo *y = a->out[0];
    y->dtype = A->dtype;
    if (B->rank != 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): B must be 2-D, got rank %d", NODE(a), op, B->rank);
    int64_t K = B->dims[at->trans_b ? 1 : 0], N = B->dims[at->trans_b ? 0 : 1];
    if (A->rank < 0) {
        y->rank = -1;
        return KILN_OK;
    }
    if (A->rank < 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): A must have rank >= 2, got %d", NODE(a), op, A->rank);
    int64_t Ka = A->dims[A->rank - 1];
    if (Ka >= 0 && K >= 0 && Ka != K) {
        char s1[128], s2[128];
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): inner dimensions differ: A %s, B %s%s", NODE(a), op,
                         kiln__shape_str(A->rank, A->dims, s1, sizeof s1),
                         kiln__shape_str(B->rank, B->dims, s2, sizeof s2), at->trans_b ? " (transposed)" : "");
    }
    if (bias && bias->rank >= 0) {
        int64_t n = kiln__numel(bias->rank, bias->dims);
        if (n >= 0 && N >= 0 && (n != N || (bias->rank > 0 && bias->dims[bias->rank - 1] != N)))
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): bias must have %lld elements along the last axis",
                             NODE(a), op, (long long)N);
    }
    kiln__tinfo_copy_shape(y, A);
    y->dtype = A->dtype;
    y->dims[y->rank - 1] = N;
    if (res && res->rank >= 0) {
        bool same = res->rank == y->rank;
        for (int i = 0; same && i < y->rank; i++)
            if (res->dims[i] != y->dims[i] && res->dims[i] >= 0 && y->dims[i] >= 0) same = false;
        if (!same) {
            char s1[128], s2[128];
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): residual %s does not have the output's shape %s",
                             NODE(a), op, kiln__shape_str(res->rank, res->dims, s1, sizeof s1),
                             kiln__shape_str(y->rank, y->dims, s2, sizeof s2));
        }
    }
    return KILN_OK;
}

typedef struct epi_ctx {
    float *Y;
    int64_t N;
    const float *bias, *res;
    int act;
} epi_ctx;

static void epi_fn(void *vc, int64_t r0, int64_t r1) {
    const epi_ctx *c = vc;
    kiln__fmm_epilogue(c->Y + r0 * c->N, c->N, r1 - r0, c->N, c->bias, c->res ? c->res + r0 * c->N : NULL, c->N,
                       c->act);
}

static kiln_status fmm_run_sgemm(const kiln_kernel_args *a, int64_t M, int64_t K, int64_t N) {
    const kiln_fused_matmul_attrs *at = a->attrs;
    float *Y = a->out[0]->data;
    KILN_TRY(kiln__sgemm(false, at->trans_b != 0, M, N, K, 1.0f, a->in[0]->data, K, a->in[1]->data,
                         at->trans_b ? K : N, 0.0f, Y, N, a->pool));
    epi_ctx c = {.Y = Y, .N = N, .bias = fmm_bias(a), .res = fmm_residual(a), .act = at->act};
    if (!c.bias && !c.res && at->act == KILN_FACT_NONE) return KILN_OK;
    kiln__parallel_for(a->pool, M, N > 0 ? (8192 + N - 1) / N : M, epi_fn, &c);
    return KILN_OK;
}

kiln_status kiln__fmm_dims(const kiln_kernel_args *a, int64_t *M, int64_t *K, int64_t *N) {
    KILN_TRY(cpu_f32_only(a, "kiln.FusedMatMul"));
    const kiln_fused_matmul_attrs *at = a->attrs;
    const kiln_tensor *A = a->in[0], *B = a->in[1];
    *K = B->dims[at->trans_b ? 1 : 0];
    *N = B->dims[at->trans_b ? 0 : 1];
    *M = *K > 0 ? kiln__tensor_numel(A) / *K : kiln__numel(A->rank - 1, A->dims);
    return KILN_OK;
}

/* The reference kernel: kiln__sgemm, then the epilogue pass. */
static kiln_status fmm_ref(const kiln_kernel_args *a) {
    int64_t M, K, N;
    KILN_TRY(kiln__fmm_dims(a, &M, &K, &N));
    if (M == 0 || N == 0) return KILN_OK;
    if (K == 0) {
        const kiln_fused_matmul_attrs *at = a->attrs;
        float *Y = a->out[0]->data;
        memset(Y, 0, sizeof *Y * (size_t)(M * N));
        kiln__fmm_epilogue(Y, N, M, N, fmm_bias(a), fmm_residual(a), N, at->act);
        return KILN_OK;
    }
    return fmm_run_sgemm(a, M, K, N);
}

const kiln_op_def kiln_op_FusedMatMul = {
    .name = "FusedMatMul", .domain = "kiln", .since = 1,
    .min_inputs = 2, .max_inputs = 4, .min_outputs = 1, .max_outputs = 1,
    .flags = KILN_OP_FLAG_TACTICS | KILN_OP_FLAG_REDUCIBLE,
    .attr_size = sizeof(kiln_fused_matmul_attrs),
    .validate = fmm_validate, .infer = fmm_infer, .cpu = fmm_ref,
};

/* ======================================================================= */
/* kiln.Gelu                                                                */
/* ======================================================================= */

static kiln_status gelu_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    return kiln__check_attr(op, node, "approx", ((const kiln_gelu_attrs *)attrs)->approx, 0, 1);
}

static kiln_status gelu_infer(const kiln_infer_args *a) {
    KILN_TRY(need_float(NODE(a), "kiln.Gelu", "input", a->in[0], a->in[0]));
    kiln__tinfo_copy_shape(a->out[0], a->in[0]);
    return KILN_OK;
}

typedef struct gelu_ctx {
    const float *x;
    float *y;
    int approx;
} gelu_ctx;

static void gelu_fn(void *vc, int64_t i0, int64_t i1) {
    const gelu_ctx *c = vc;
    if (c->y != c->x) memcpy(c->y + i0, c->x + i0, sizeof(float) * (size_t)(i1 - i0));
    kiln__gelu_f32(c->y + i0, i1 - i0, c->approx);
}

static kiln_status gelu_cpu(const kiln_kernel_args *a) {
    KILN_TRY(cpu_f32_only(a, "kiln.Gelu"));
    const kiln_gelu_attrs *at = a->attrs;
    gelu_ctx c = {.x = a->in[0]->data, .y = a->out[0]->data, .approx = at->approx};
    kiln__parallel_for(a->pool, kiln__tensor_numel(a->in[0]), 16384, gelu_fn, &c);
    return KILN_OK;
}

const kiln_op_def kiln_op_Gelu = {
    .name = "Gelu", .domain = "kiln", .since = 1,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .flags = KILN_OP_FLAG_INPLACE | KILN_OP_FLAG_REDUCIBLE,
    .attr_size = sizeof(kiln_gelu_attrs),
    .validate = gelu_validate, .infer = gelu_infer, .cpu = gelu_cpu,
};

/* ONNX Gelu (opset 20; the dynamo exporter writes it): kiln.Gelu's
 * attributes, inference and kernels; approximate "none" or "tanh". The graph
 * optimizer turns these nodes into kiln.Gelu. */
static kiln_status gelu_onnx_import(kiln_import_ctx *ic, void *attrs) {
    kiln_gelu_attrs *at = attrs;
    const char *ap = kiln_attr_string(ic, "approximate", "none");
    if (!strcmp(ap, "none")) at->approx = 0;
    else if (!strcmp(ap, "tanh")) at->approx = 1;
    else return KILN_IMPORT_FAIL(ic, "approximate must be \"none\" or \"tanh\", got \"%s\"", ap);
    return KILN_OK;
}

const kiln_op_def kiln_op_GeluOnnx = {
    .name = "Gelu", .domain = "", .since = 20,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .flags = KILN_OP_FLAG_INPLACE | KILN_OP_FLAG_REDUCIBLE,
    .attr_size = sizeof(kiln_gelu_attrs),
    .import = gelu_onnx_import, .validate = gelu_validate, .infer = gelu_infer, .cpu = gelu_cpu,
};

/* ======================================================================= */
/* kiln.Attention                                                           */
/* ======================================================================= */

/* Logical [B, H, S, D] view of an operand in a layout. */
typedef struct attn_view {
    int64_t B, H, S, D;
} attn_view;

static kiln_status attn_view_of(const char *node, const char *what, const kiln_tinfo *t, int layout, int64_t H,
                                attn_view *v) {
    const char *op = "kiln.Attention";
    if (t->rank < 0) {
        v->B = v->H = v->S = v->D = KILN_DIM_UNKNOWN;
        return KILN_OK;
    }
    switch (layout) {
    case KILN_ATTN_BSHD:
    case KILN_ATTN_QKV:
    case KILN_ATTN_SBHD:
    case KILN_ATTN_SQKV:
    case KILN_ATTN_KV:
    case KILN_ATTN_SKV: {
        if (t->rank != 3) break;
        bool sf = layout == KILN_ATTN_SBHD || layout == KILN_ATTN_SQKV || layout == KILN_ATTN_SKV; /* sequence first */
        int64_t parts = kiln__attn_layout_parts(layout);
        v->B = t->dims[sf ? 1 : 0];
        v->S = t->dims[sf ? 0 : 1];
        v->H = H;
        v->D = t->dims[2] >= 0 ? t->dims[2] / (parts * H) : KILN_DIM_UNKNOWN;
        if (t->dims[2] >= 0 && t->dims[2] % (parts * H))
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): %s has %lld columns, not %lld x %lld heads", node,
                             op, what, (long long)t->dims[2], (long long)parts, (long long)H);
        return KILN_OK;
    }
    case KILN_ATTN_BHSD:
    case KILN_ATTN_BHDS:
        if (t->rank != 4) break;
        v->B = t->dims[0];
        v->H = t->dims[1];
        v->S = t->dims[layout == KILN_ATTN_BHSD ? 2 : 3];
        v->D = t->dims[layout == KILN_ATTN_BHSD ? 3 : 2];
        return KILN_OK;
    default:
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): unknown layout %d of %s", node, op, layout, what);
    }
    return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): %s has rank %d, which layout %d does not allow", node, op,
                     what, t->rank, layout);
}

static kiln_status dim_eq(const char *node, const char *what, int64_t x, int64_t y) {
    if (x >= 0 && y >= 0 && x != y)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (kiln.Attention): %s differ (%lld and %lld)", node, what,
                         (long long)x, (long long)y);
    return KILN_OK;
}

/* num_heads positive; layouts its kernels read (Q and V not BHDS, the
 * output BSHD, BHSD or SBHD); precision fp32 or bf16; scale any float */
static kiln_status attn_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_attention_attrs *at = attrs;
    if (at->num_heads <= 0)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): num_heads must be positive, got %d", node,
                         op->name, at->num_heads);
    const int32_t lay[4] = {at->q_layout, at->k_layout, at->v_layout, at->out_layout};
    bool ok = true;
    for (int i = 0; i < 4; i++) ok = ok && lay[i] >= KILN_ATTN_BSHD && lay[i] <= KILN_ATTN_SKV;
    if (!ok || at->q_layout == KILN_ATTN_BHDS || at->v_layout == KILN_ATTN_BHDS ||
        kiln__attn_layout_parts(at->q_layout) == 2 ||
        (at->out_layout != KILN_ATTN_BSHD && at->out_layout != KILN_ATTN_BHSD && at->out_layout != KILN_ATTN_SBHD))
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (%s): unsupported layouts (Q %d, K %d, V %d, output %d)", node,
                         op->name, at->q_layout, at->k_layout, at->v_layout, at->out_layout);
    if (at->cond_mode < KILN_ATTN_COND_NONE || at->cond_mode > KILN_ATTN_COND_ADD ||
        (at->cond_fill_if != 0 && at->cond_fill_if != 1) || (at->nan_to_zero != 0 && at->nan_to_zero != 1))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): cond_mode %d, cond_fill_if %d, nan_to_zero %d out of range",
                         node, op->name, at->cond_mode, at->cond_fill_if, at->nan_to_zero);
    return fp32_or_bf16(op, node, at->precision);
}

static kiln_status attn_infer(const kiln_infer_args *a) {
    const kiln_attention_attrs *at = a->attrs;
    const char *node = NODE(a), *op = "kiln.Attention";
    const kiln_tinfo *mask = a->n_in > 3 ? a->in[3] : NULL;
    const kiln_tinfo *cond = a->n_in > 4 ? a->in[4] : NULL, *bias = a->n_in > 5 ? a->in[5] : NULL;
    KILN_TRY(need_float(node, op, "Q", a->in[0], a->in[0]));
    KILN_TRY(need_float(node, op, "K", a->in[1], a->in[0]));
    KILN_TRY(need_float(node, op, "V", a->in[2], a->in[0]));
    KILN_TRY(need_float(node, op, "mask", mask, a->in[0]));
    KILN_TRY(need_float(node, op, "bias", bias, a->in[0]));
    if (cond && cond->dtype != KILN_DTYPE_BOOL)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): cond must be bool, got %s", node, op,
                         kiln_dtype_name(cond->dtype));
    if ((cond != NULL) != (at->cond_mode != KILN_ATTN_COND_NONE))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): cond_mode %d and a cond input %s do not agree",
                         node, op, at->cond_mode, cond ? "given" : "absent");
    attn_view q = {0}, k = {0}, v = {0};
    KILN_TRY(attn_view_of(node, "Q", a->in[0], at->q_layout, at->num_heads, &q));
    KILN_TRY(attn_view_of(node, "K", a->in[1], at->k_layout, at->num_heads, &k));
    KILN_TRY(attn_view_of(node, "V", a->in[2], at->v_layout, at->num_heads, &v));
    KILN_TRY(dim_eq(node, "batch sizes of Q and K", q.B, k.B));
    KILN_TRY(dim_eq(node, "batch sizes of Q and V", q.B, v.B));
    KILN_TRY(dim_eq(node, "head counts of Q and K", q.H, k.H));
    KILN_TRY(dim_eq(node, "head counts of Q and V", q.H, v.H));
    KILN_TRY(dim_eq(node, "head counts of Q and the attribute", q.H, at->num_heads));
    KILN_TRY(dim_eq(node, "head sizes of Q and K", q.D, k.D));
    KILN_TRY(dim_eq(node, "sequence lengths of K and V", k.S, v.S));
    kiln_tinfo *y = a->out[0];
    y->dtype = a->in[0]->dtype;
    if (a->in[0]->rank < 0 || a->in[2]->rank < 0) {
        y->rank = -1;
        return KILN_OK;
    }
    const kiln_tinfo *masks[3] = {mask, cond, bias};
    static const char *const mask_names[3] = {"mask", "cond", "bias"};
    for (int m = 0; m < 3; m++) {
        const kiln_tinfo *mi = masks[m];
        if (!mi || mi->rank < 0) continue;
        if (mi->rank > 4)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): %s has rank %d (at most 4)", node, op, mask_names[m],
                             mi->rank);
        int64_t full[4] = {q.B, q.H, q.S, k.S};
        for (int i = 0; i < mi->rank; i++) {
            int64_t md = mi->dims[i], fd = full[4 - mi->rank + i];
            if (md >= 0 && fd >= 0 && md != 1 && md != fd)
                return KILN_FAIL(KILN_ERR_MODEL,
                                 "node '%s' (%s): %s of shape %s does not broadcast to the scores [%lld,%lld,%lld,%lld]",
                                 node, op, mask_names[m], kiln__shape_str(mi->rank, mi->dims, (char[64]){0}, 64),
                                 (long long)q.B, (long long)q.H, (long long)q.S, (long long)k.S);
        }
    }
    if (at->out_layout == KILN_ATTN_BSHD || at->out_layout == KILN_ATTN_SBHD) {
        bool sf = at->out_layout == KILN_ATTN_SBHD;
        y->rank = 3;
        y->dims[sf ? 1 : 0] = q.B;
        y->dims[sf ? 0 : 1] = q.S;
        y->dims[2] = KILN_DIM_UNKNOWN;
        if (v.D >= 0) KILN_TRY(kiln__dim_mul(node, v.D, at->num_heads, &y->dims[2]));
    } else {
        y->rank = 4;
        y->dims[0] = q.B;
        y->dims[1] = q.H;
        y->dims[2] = q.S;
        y->dims[3] = v.D;
    }
    return KILN_OK;
}

#define ATTN_QBLOCK 32

static int64_t attn_nqb(int64_t Sq) { return (Sq + ATTN_QBLOCK - 1) / ATTN_QBLOCK; }

/* scratch floats of one (batch, head, row block) item: the score block of
 * the reference path, or what a faster block kernel needs (fast_floats,
 * may be NULL) */
static size_t attn_item_floats(int64_t Sq, int64_t Sk, int64_t D, int64_t Dv, kiln_attn_ws_fn fast_floats) {
    size_t a = (size_t)ATTN_QBLOCK * (size_t)Sk, b = fast_floats ? fast_floats(Sq, Sk, D, Dv) : 0;
    return a > b ? a : b;
}

size_t kiln__attn_workspace(const kiln_infer_args *a, kiln_attn_ws_fn fast_floats) {
    const kiln_attention_attrs *at = a->attrs;
    attn_view q = {0}, k = {0}, v = {0};
    if (attn_view_of(NODE(a), "Q", a->in[0], at->q_layout, at->num_heads, &q) != KILN_OK ||
        attn_view_of(NODE(a), "K", a->in[1], at->k_layout, at->num_heads, &k) != KILN_OK ||
        attn_view_of(NODE(a), "V", a->in[2], at->v_layout, at->num_heads, &v) != KILN_OK) {
        kiln__clear_error();
        return 0;
    }
    if (q.B < 0 || q.H < 0 || q.S < 0 || k.S < 0 || q.D < 0 || v.D < 0) return 0;
    size_t items = kiln__size_mul(kiln__size_mul((size_t)q.B, (size_t)q.H), (size_t)attn_nqb(q.S));
    return kiln__size_mul(kiln__size_mul(items, attn_item_floats(q.S, k.S, q.D, v.D, fast_floats)), sizeof(float));
}

static size_t attn_workspace(const kiln_infer_args *a) { return kiln__attn_workspace(a, NULL); }

/* Offset of (b, h) and row stride of an operand in `layout` (role: 0 Q,
 * 1 K, 2 V, for the QKV and KV layouts). */
static void attn_addr(int layout, int role, const attn_view *v, int64_t b, int64_t h, int64_t *off, int64_t *ld) {
    switch (layout) {
    case KILN_ATTN_QKV:
        *off = b * v->S * 3 * v->H * v->D + role * v->H * v->D + h * v->D;
        *ld = 3 * v->H * v->D;
        break;
    case KILN_ATTN_BSHD:
        *off = b * v->S * v->H * v->D + h * v->D;
        *ld = v->H * v->D;
        break;
    case KILN_ATTN_SQKV: /* [S, B, 3*H*D] */
        *off = b * 3 * v->H * v->D + role * v->H * v->D + h * v->D;
        *ld = v->B * 3 * v->H * v->D;
        break;
    case KILN_ATTN_KV: /* [B, S, 2*H*D]: K, then V */
        *off = b * v->S * 2 * v->H * v->D + (role - 1) * v->H * v->D + h * v->D;
        *ld = 2 * v->H * v->D;
        break;
    case KILN_ATTN_SKV: /* [S, B, 2*H*D] */
        *off = b * 2 * v->H * v->D + (role - 1) * v->H * v->D + h * v->D;
        *ld = v->B * 2 * v->H * v->D;
        break;
    case KILN_ATTN_SBHD: /* [S, B, H*D] */
        *off = b * v->H * v->D + h * v->D;
        *ld = v->B * v->H * v->D;
        break;
    case KILN_ATTN_BHSD:
        *off = (b * v->H + h) * v->S * v->D;
        *ld = v->D;
        break;
    default: /* BHDS: rows are the D dims, S columns */
        *off = (b * v->H + h) * v->D * v->S;
        *ld = v->S;
        break;
    }
}

typedef struct attn_ctx {
    const kiln_attention_attrs *at;
    attn_view q, k, v, o;
    const float *Q, *K, *V, *mask, *bias;
    const bool *cond;
    int64_t mstr[4], cstr[4], bstr[4];
    bool extras; /* cond, bias or nan_to_zero: only the sgemm path applies them */
    float *O, *ws;
    int64_t nqb;
    size_t item_floats;
    const kiln_attn_fast *fast; /* NULL: the reference path */
    atomic_int failed;
} attn_ctx;

static void attn_items(void *vc, int64_t i0, int64_t i1) {
    attn_ctx *c = vc;
    const kiln_attention_attrs *at = c->at;
    int64_t Sq = c->q.S, Sk = c->k.S, D = c->q.D, Dv = c->v.D;
    for (int64_t it = i0; it < i1; it++) {
        int64_t bh = it / c->nqb, qb = it % c->nqb, b = bh / c->q.H, h = bh % c->q.H;
        int64_t r0 = c->fast ? 0 : qb * ATTN_QBLOCK;
        int64_t rows = c->fast ? Sq : Sq - r0 < ATTN_QBLOCK ? Sq - r0 : ATTN_QBLOCK;
        int64_t qo, qld, ko, kld, vo, vld, oo, old;
        attn_addr(at->q_layout, 0, &c->q, b, h, &qo, &qld);
        attn_addr(at->k_layout, 1, &c->k, b, h, &ko, &kld);
        attn_addr(at->v_layout, 2, &c->v, b, h, &vo, &vld);
        attn_addr(at->out_layout, 0, &c->o, b, h, &oo, &old);
        /* the items of one range run one after another on one thread: they
         * share the range's first scratch block, which stays in cache */
        float *s = c->ws + (size_t)i0 * c->item_floats;
        const float *mrow0 = c->mask ? c->mask + b * c->mstr[0] + h * c->mstr[1] + r0 * c->mstr[2] : NULL;
        if (c->fast) {
            c->fast->block(c->Q + qo + r0 * qld, qld, c->K + ko, kld, at->k_layout == KILN_ATTN_BHDS, c->V + vo,
                           vld, c->O + oo + r0 * old, old, rows, Sk, D, Dv, at->scale, mrow0, c->mstr[2],
                           c->mstr[3], s);
            continue;
        }
        /* s = scale * Q K^T: K is [Sk, D] rows (transposed operand) or [D, Sk] (BHDS) */
        if (kiln__sgemm(false, at->k_layout != KILN_ATTN_BHDS, rows, Sk, D, at->scale, c->Q + qo + r0 * qld, qld,
                        c->K + ko, kld, 0.0f, s, Sk, NULL) != KILN_OK) {
            atomic_store(&c->failed, 1);
            return;
        }
        if (c->cond) {
            const bool *c0 = c->cond + b * c->cstr[0] + h * c->cstr[1] + r0 * c->cstr[2];
            bool fill_if = at->cond_fill_if != 0, sel = at->cond_mode == KILN_ATTN_COND_SELECT;
            for (int64_t r = 0; r < rows; r++) {
                const bool *crow = c0 + r * c->cstr[2];
                float *srow = s + r * Sk;
                for (int64_t j = 0; j < Sk; j++)
                    if (crow[j * c->cstr[3]] == fill_if) srow[j] = sel ? at->fill : srow[j] + at->fill;
            }
        }
        if (c->mask)
            for (int64_t r = 0; r < rows; r++) {
                const float *mrow = mrow0 + r * c->mstr[2];
                float *srow = s + r * Sk;
                if (c->mstr[3] == 1)
                    for (int64_t j = 0; j < Sk; j++) srow[j] += mrow[j];
                else
                    for (int64_t j = 0; j < Sk; j++) srow[j] += mrow[j * c->mstr[3]];
            }
        if (c->bias) {
            const float *b0 = c->bias + b * c->bstr[0] + h * c->bstr[1] + r0 * c->bstr[2];
            for (int64_t r = 0; r < rows; r++) {
                const float *brow = b0 + r * c->bstr[2];
                float *srow = s + r * Sk;
                for (int64_t j = 0; j < Sk; j++) srow[j] += brow[j * c->bstr[3]];
            }
        }
        kiln__softmax_rows_f32(s, rows, Sk);
        if (at->nan_to_zero)
            for (int64_t e = 0; e < rows * Sk; e++)
                if (isnan(s[e])) s[e] = 0.0f;
        if (kiln__sgemm(false, false, rows, Dv, Sk, 1.0f, s, Sk, c->V + vo, vld, 0.0f, c->O + oo + r0 * old, old,
                        NULL) != KILN_OK) {
            atomic_store(&c->failed, 1);
            return;
        }
    }
}

kiln_status kiln__attn_run(const kiln_kernel_args *a, const kiln_attn_fast *fast) {
    KILN_TRY(cpu_f32_only(a, "kiln.Attention"));
    const kiln_attention_attrs *at = a->attrs;
    const kiln_tensor *mask = a->n_in > 3 ? a->in[3] : NULL;
    attn_ctx c = {.at = at, .Q = a->in[0]->data, .K = a->in[1]->data, .V = a->in[2]->data, .O = a->out[0]->data,
                  .ws = a->workspace};
    kiln_tinfo ti[3];
    for (int i = 0; i < 3; i++) {
        ti[i].dtype = a->in[i]->dtype;
        ti[i].rank = a->in[i]->rank;
        memcpy(ti[i].dims, a->in[i]->dims, sizeof ti[i].dims);
    }
    KILN_TRY(attn_view_of(NODE(a), "Q", &ti[0], at->q_layout, at->num_heads, &c.q));
    KILN_TRY(attn_view_of(NODE(a), "K", &ti[1], at->k_layout, at->num_heads, &c.k));
    KILN_TRY(attn_view_of(NODE(a), "V", &ti[2], at->v_layout, at->num_heads, &c.v));
    c.o = (attn_view){.B = c.q.B, .H = c.q.H, .S = c.q.S, .D = c.v.D};
    if (kiln__tensor_numel(a->out[0]) == 0) return KILN_OK;
    c.nqb = attn_nqb(c.q.S);
    const kiln_tensor *cond = a->n_in > 4 ? a->in[4] : NULL, *bias = a->n_in > 5 ? a->in[5] : NULL;
    int64_t full[4] = {c.q.B, c.q.H, c.q.S, c.k.S};
    if (cond && kiln__tensor_numel(cond) > 0) {
        if (cond->dtype != KILN_DTYPE_BOOL)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (kiln.Attention): cond must be bool", NODE(a));
        kiln__bcast_strides(cond->rank, cond->dims, 4, full, c.cstr);
        c.cond = cond->data;
    }
    if (bias && kiln__tensor_numel(bias) > 0) {
        kiln__bcast_strides(bias->rank, bias->dims, 4, full, c.bstr);
        c.bias = bias->data;
    }
    c.extras = c.cond || c.bias || at->nan_to_zero;
    c.fast = c.extras ? NULL : fast; /* only the reference path applies the extras */
    c.item_floats = attn_item_floats(c.q.S, c.k.S, c.q.D, c.v.D, c.fast ? c.fast->ws_floats : NULL);
    if (!c.ws || a->workspace_size < (size_t)(c.q.B * c.q.H * c.nqb) * c.item_floats * sizeof(float))
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (kiln.Attention): workspace too small", NODE(a));
    if (c.fast) c.nqb = 1; /* one item per (batch, head): K^T is packed once */
    if (mask && kiln__tensor_numel(mask) > 0) {
        kiln__bcast_strides(mask->rank, mask->dims, 4, full, c.mstr);
        c.mask = mask->data;
    }
    atomic_init(&c.failed, 0);
    kiln__parallel_for(a->pool, c.q.B * c.q.H * c.nqb, 1, attn_items, &c);
    if (atomic_load(&c.failed))
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (kiln.Attention): out of memory", NODE(a));
    return KILN_OK;
}

/* The reference kernel. */
static kiln_status attn_ref(const kiln_kernel_args *a) { return kiln__attn_run(a, NULL); }

_Static_assert(offsetof(kiln_attention_attrs, cond_mode) == KILN_ATTN_ATTRS_V5_SIZE,
               "kiln_attention_attrs: the fields of format 5 keep their place");

const kiln_op_def kiln_op_Attention = {
    .name = "Attention", .domain = "kiln", .since = 1,
    .min_inputs = 3, .max_inputs = 6, .min_outputs = 1, .max_outputs = 1,
    .flags = KILN_OP_FLAG_TACTICS | KILN_OP_FLAG_REDUCIBLE,
    .attr_size = sizeof(kiln_attention_attrs),
    .attr_grew_in = 6, .attr_size_before = KILN_ATTN_ATTRS_V5_SIZE, /* cond_mode and after: 0 */
    .validate = attn_validate, .infer = attn_infer, .workspace = attn_workspace, .cpu = attn_ref,
};
