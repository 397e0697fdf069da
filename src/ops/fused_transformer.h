/* fused_transformer.h -- kiln's transformer layers (domain "kiln", ids
 * 1100..1199 in src/ops/fused.def), made by the graph optimizer
 * (src/passes/fuse_transformer.c) from patterns of ONNX nodes.
 *
 * The attribute structs below are POD and written verbatim into engine
 * files: fields are never reordered or removed. They are the contract for
 * every backend's kernel (CPU kernels in src/ops/fused_transformer*.c; a
 * device backend adds its own kernels for the same op ids).
 *
 * kiln.FusedMatMul   Y = act(A x B + bias + residual)
 *     inputs   A     float32 [..., M, K] (rank >= 2; the leading dims are a batch
 *                    folded into M)
 *              B     float32 constant, [K, N], or [N, K] when trans_b
 *              bias  optional (absent: -1) float32 constant with N elements,
 *                    broadcast along the last axis ([N], [1, N], ...)
 *              residual  optional float32 tensor of Y's shape
 *     output   Y     float32 [..., M, N]
 *     made from MatMul (+ Add bias) (+ Add residual) (+ Relu | Gelu erf form |
 *     Gelu tanh form), and from Gemm (transA = 0, alpha = beta = 1) + the same.
 *     With precision BF16, A and B are rounded to bfloat16 and the products
 *     accumulate in float32; bias and activation are applied in float32.
 *
 * kiln.Gelu          Y = x * 0.5 * (1 + erf(x / sqrt(2)))        (approx 0)
 *                    Y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (approx 1)
 *     one float32 input, same-shape output. Made from the PyTorch-export
 *     forms when they cannot join a matrix product.
 *
 * kiln.Attention     O = softmax(scores) V, per batch and head, where
 *                      scores = scale * Q K^T
 *                      scores = cond rule (input 4, when cond_mode != NONE)
 *                      scores = scores + mask (input 3) + bias (input 5)
 *                    and, with nan_to_zero, probabilities that are NaN become 0
 *                    (so a row whose keys are all masked out gives zeros)
 *     inputs   Q, K, V float32, each in the layout its attr says:
 *                    KILN_ATTN_BSHD: [B, S, H*D]  (heads packed in the last dim,
 *                                    as before PyTorch's head-splitting
 *                                    Reshape + Transpose)
 *                    KILN_ATTN_BHSD: [B, H, S, D]
 *                    KILN_ATTN_BHDS: [B, H, D, S] (K only: already transposed)
 *                    KILN_ATTN_QKV:  [B, S, 3*H*D] holding Q, K, V side by side (the
 *                                    output of one FusedMatMul for all three
 *                                    projections; Q, K, V are then one tensor)
 *              mask  optional float32, added to the [B, H, Sq, Sk] scores,
 *                    broadcast numpy-style (e.g. [B, 1, 1, Sk])
 *              cond  optional bool (rank <= 4, broadcast like the mask): where
 *                    cond == cond_fill_if, KILN_ATTN_COND_SELECT sets the score
 *                    to `fill` and KILN_ATTN_COND_ADD adds `fill` to it (the
 *                    exporters' Where(cond, s, fill) / Where(cond, 0, fill) + Add)
 *              bias  optional, a second additive mask like `mask` (e.g. a
 *                    position bias [1, H, Sq, Sk] beside a padding mask)
 *     output   O     [B, Sq, H*D] (out_layout BSHD) or [B, H, Sq, D] (BHSD)
 *     Softmax statistics are float32 at every precision.
 *
 * Precision: the engine's kiln_precision (FP32 or BF16) at build time. */
#ifndef KILN_FUSED_TRANSFORMER_H
#define KILN_FUSED_TRANSFORMER_H

#include "ops/op.h"

/* Activations of FusedMatMul (values are permanent: stored in engines). */
enum {
    KILN_FACT_NONE = 0,
    KILN_FACT_RELU = 1,
    KILN_FACT_GELU_ERF = 2,
    KILN_FACT_GELU_TANH = 3,
};

/* CPU tactics of FusedMatMul (permanent). 0 picks the best available at run
 * time (oneDNN when built with it, else the AVX-512 kernel on CPUs that have
 * AVX-512F, else kiln__sgemm). */
enum {
    KILN_FMM_TACTIC_AUTO = 0,
    KILN_FMM_TACTIC_SGEMM = 1,  /* kiln__sgemm (AVX2/generic) + epilogue pass */
    KILN_FMM_TACTIC_DNNL = 2,   /* oneDNN matmul with fused bias/activation */
    KILN_FMM_TACTIC_AVX512 = 3, /* own AVX-512 kernel, prepacked weights, fused epilogue */
};

typedef struct kiln_fused_matmul_attrs {
    kiln_tactic tactic;  /* must stay first (KILN_OP_FLAG_TACTICS) */
    int32_t act;         /* KILN_FACT_* */
    int32_t trans_b;     /* B is [N, K] */
    int32_t precision;   /* kiln_precision: KILN_PRECISION_FP32 or KILN_PRECISION_BF16 */
} kiln_fused_matmul_attrs;

typedef struct kiln_gelu_attrs {
    int32_t approx;      /* 0: erf form, 1: tanh form */
} kiln_gelu_attrs;

/* Layouts of Attention's operands (permanent). */
enum {
    KILN_ATTN_BSHD = 0,
    KILN_ATTN_BHSD = 1,
    KILN_ATTN_BHDS = 2,
    KILN_ATTN_QKV = 3,  /* [B, S, 3*H*D]: Q, K and V side by side (columns [0, HD),
                           [HD, 2HD), [2HD, 3HD)), as one fused projection makes them;
                           all three inputs are then the same tensor */
};

/* CPU tactics of Attention (permanent). */
enum {
    KILN_ATTN_TACTIC_AUTO = 0,
    KILN_ATTN_TACTIC_SGEMM = 1, /* per (batch, head, row block): kiln__sgemm, softmax, kiln__sgemm */
    KILN_ATTN_TACTIC_AVX512 = 2, /* per (batch, head, row block): AVX-512 register tiles */
};

/* How Attention's cond input acts on the scores (permanent). */
enum {
    KILN_ATTN_COND_NONE = 0,
    KILN_ATTN_COND_SELECT = 1, /* score = fill where cond == cond_fill_if */
    KILN_ATTN_COND_ADD = 2,    /* score += fill where cond == cond_fill_if */
};

typedef struct kiln_attention_attrs {
    kiln_tactic tactic;  /* must stay first */
    int32_t num_heads;   /* H (needed for the BSHD layouts) */
    int32_t q_layout, k_layout, v_layout, out_layout; /* KILN_ATTN_* */
    float scale;         /* multiplies Q K^T before the mask is added */
    int32_t precision;   /* kiln_precision */
    /* Since engine format 6; engines of older formats read these as 0 (their
     * size was KILN_ATTN_ATTRS_V5_SIZE). */
    int32_t cond_mode;   /* KILN_ATTN_COND_*: how input 4 acts */
    int32_t cond_fill_if;/* 0 or 1: the cond value where `fill` applies */
    float fill;          /* the score (SELECT) or the addend (ADD) there; may be -inf */
    int32_t nan_to_zero; /* 1: NaN probabilities become 0 (IsNaN + Where after Softmax) */
} kiln_attention_attrs;
#define KILN_ATTN_ATTRS_V5_SIZE 36 /* bytes up to and including `precision` */

/* Vectorized float32 helpers shared by the transformer kernels
 * (src/backends/cpu/kernels/fused_transformer_math.c; AVX-512 when the CPU has it). */
KILN_PRIVATE void kiln__gelu_f32(float *x, int64_t n, int approx); /* in place */
KILN_PRIVATE void kiln__relu_f32(float *x, int64_t n);
/* FusedMatMul's epilogue on `rows` rows of n values (row stride ldy): adds
 * bias (may be NULL) and residual rows (stride ldr; may be NULL), then the
 * activation. */
KILN_PRIVATE void kiln__fmm_epilogue(float *Y, int64_t ldy, int64_t rows, int64_t n, const float *bias,
                                     const float *res, int64_t ldr, int act);
/* Rounds n floats to bfloat16 (nearest even). */
KILN_PRIVATE void kiln__f32_to_bf16_row(const float *x, uint16_t *y, int64_t n);
/* y[i] = exp(x[i] - m) for i < n; returns their sum. */
KILN_PRIVATE float kiln__exp_shift_sum_f32(const float *x, float *y, int64_t n, float m);
KILN_PRIVATE float kiln__max_f32(const float *x, int64_t n);
/* Softmax of each of `rows` rows of n floats in place. */
KILN_PRIVATE void kiln__softmax_rows_f32(float *x, int64_t rows, int64_t n);

/* Own AVX-512 matrix product (gemm_avx512.c): B packed once into 32-column
 * panels (kiln__sgemm512_packed_floats floats, 64-byte aligned), then
 * C[M, N] = act(A[M, K] B + bias + res) with A, C and res (may be NULL)
 * dense row-major. */
KILN_PRIVATE bool kiln__sgemm512_available(void);
KILN_PRIVATE size_t kiln__sgemm512_packed_floats(int64_t K, int64_t N);
KILN_PRIVATE void kiln__sgemm512_pack(const float *B, bool trans_b, int64_t K, int64_t N, float *Bp);
KILN_PRIVATE void kiln__sgemm512_run(const float *A, int64_t M, int64_t K, int64_t N, const float *Bp,
                                     const float *bias, const float *res, int act, float *C, kiln_pool *pool);

/* AVX-512 attention block (fused_transformer_avx512.c): `rows` query rows of
 * one (batch, head). Q rows at stride ldq; K as [Sk, D] rows at stride ldk,
 * or as [D, Sk] rows (k_dxs); V [Sk, Dv] rows at stride ldv; O rows at
 * stride ldo. mask: NULL or the first row's mask, rows mrow apart, columns
 * mcol apart. ws: kiln__attn_avx512_ws_floats(rows, Sk, D) floats. */
KILN_PRIVATE bool kiln__attn_avx512_available(void);
/* The same block with bf16 products (vdpbf16ps) and float32 accumulation and
 * softmax, for bf16 engines on CPUs with AVX512-BF16; ws:
 * kiln__attn_bf16_ws_floats(rows, Sk, D, Dv) floats. */
KILN_PRIVATE bool kiln__attn_bf16_available(void);
KILN_PRIVATE size_t kiln__attn_bf16_ws_floats(int64_t rows, int64_t Sk, int64_t D, int64_t Dv);
KILN_PRIVATE void kiln__attn_bf16_block(const float *Q, int64_t ldq, const float *K, int64_t ldk, bool k_dxs,
                                        const float *V, int64_t ldv, float *O, int64_t ldo, int64_t rows,
                                        int64_t Sk, int64_t D, int64_t Dv, float scale, const float *mask,
                                        int64_t mrow, int64_t mcol, float *ws);
KILN_PRIVATE size_t kiln__attn_avx512_ws_floats(int64_t rows, int64_t Sk, int64_t D);
KILN_PRIVATE void kiln__attn_avx512_block(const float *Q, int64_t ldq, const float *K, int64_t ldk, bool k_dxs,
                                          const float *V, int64_t ldv, float *O, int64_t ldo, int64_t rows,
                                          int64_t Sk, int64_t D, int64_t Dv, float scale, const float *mask,
                                          int64_t mrow, int64_t mcol, float *ws);

#endif
