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
 *                    KILN_ATTN_SBHD: [S, B, H*D]  (sequence first: nn.MultiheadAttention's
 *                                    [S, B, E] before its Reshape to [S, B*H, D])
 *                    KILN_ATTN_SQKV: [S, B, 3*H*D] Q, K, V side by side, sequence
 *                                    first (nn.MultiheadAttention's packed in_proj)
 *                    KILN_ATTN_KV:   [B, S, 2*H*D] K and V side by side (K and V only:
 *                                    cross attention's packed K/V projection)
 *                    KILN_ATTN_SKV:  [S, B, 2*H*D] the same, sequence first
 *              mask  optional float32, added to the [B, H, Sq, Sk] scores,
 *                    broadcast numpy-style (e.g. [B, 1, 1, Sk])
 *              cond  optional bool (rank <= 4, broadcast like the mask): where
 *                    cond == cond_fill_if, KILN_ATTN_COND_SELECT sets the score
 *                    to `fill` and KILN_ATTN_COND_ADD adds `fill` to it (the
 *                    exporters' Where(cond, s, fill) / Where(cond, 0, fill) + Add)
 *              bias  optional, a second additive mask like `mask` (e.g. a
 *                    position bias [1, H, Sq, Sk] beside a padding mask)
 *     output   O     [B, Sq, H*D] (out_layout BSHD), [B, H, Sq, D] (BHSD) or
 *                    [Sq, B, H*D] (SBHD)
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

typedef struct kiln_fused_matmul_attrs {
    kiln_tactic tactic;  /* must stay first (KILN_OP_FLAG_TACTICS) */
    int32_t act;         /* KILN_FACT_* */
    int32_t trans_b;     /* B is [N, K] */
    int32_t precision;   /* kiln_precision: KILN_PRECISION_FP32 or KILN_PRECISION_BF16 */
} kiln_fused_matmul_attrs;
KILN_ATTRS_SIZE(kiln_fused_matmul_attrs, 20); KILN_ATTRS_AT(kiln_fused_matmul_attrs, tactic, 0);
KILN_ATTRS_AT(kiln_fused_matmul_attrs, act, 8); KILN_ATTRS_AT(kiln_fused_matmul_attrs, trans_b, 12);
KILN_ATTRS_AT(kiln_fused_matmul_attrs, precision, 16);

typedef struct kiln_gelu_attrs {
    int32_t approx;      /* 0: erf form, 1: tanh form */
} kiln_gelu_attrs;
KILN_ATTRS_SIZE(kiln_gelu_attrs, 4); KILN_ATTRS_AT(kiln_gelu_attrs, approx, 0);

/* Layouts of Attention's operands (permanent). */
enum {
    KILN_ATTN_BSHD = 0,
    KILN_ATTN_BHSD = 1,
    KILN_ATTN_BHDS = 2,
    KILN_ATTN_QKV = 3,  /* [B, S, 3*H*D]: Q, K and V side by side (columns [0, HD),
                           [HD, 2HD), [2HD, 3HD)), as one fused projection makes them;
                           all three inputs are then the same tensor */
    KILN_ATTN_SBHD = 4, /* [S, B, H*D]: sequence first (torch's nn.MultiheadAttention) */
    KILN_ATTN_SQKV = 5, /* [S, B, 3*H*D]: the QKV layout, sequence first */
    KILN_ATTN_KV = 6,   /* [B, S, 2*H*D]: K (columns [0, HD)) and V ([HD, 2HD)) side by side */
    KILN_ATTN_SKV = 7,  /* [S, B, 2*H*D]: the KV layout, sequence first */
};

/* How many operands a layout holds side by side in its last dim: 3 (QKV,
 * SQKV), 2 (KV, SKV: K and V) or 1. */
static inline int64_t kiln__attn_layout_parts(int layout) {
    return layout == KILN_ATTN_QKV || layout == KILN_ATTN_SQKV ? 3
           : layout == KILN_ATTN_KV || layout == KILN_ATTN_SKV ? 2
                                                               : 1;
}

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
KILN_ATTRS_SIZE(kiln_attention_attrs, 52); KILN_ATTRS_AT(kiln_attention_attrs, tactic, 0);
KILN_ATTRS_AT(kiln_attention_attrs, num_heads, 8); KILN_ATTRS_AT(kiln_attention_attrs, q_layout, 12);
KILN_ATTRS_AT(kiln_attention_attrs, k_layout, 16); KILN_ATTRS_AT(kiln_attention_attrs, v_layout, 20);
KILN_ATTRS_AT(kiln_attention_attrs, out_layout, 24); KILN_ATTRS_AT(kiln_attention_attrs, scale, 28);
KILN_ATTRS_AT(kiln_attention_attrs, precision, 32); KILN_ATTRS_AT(kiln_attention_attrs, cond_mode, 36);
KILN_ATTRS_AT(kiln_attention_attrs, cond_fill_if, 40); KILN_ATTRS_AT(kiln_attention_attrs, fill, 44);
KILN_ATTRS_AT(kiln_attention_attrs, nan_to_zero, 48);
#define KILN_ATTN_ATTRS_V5_SIZE 36 /* bytes up to and including `precision` */

/* ---- what the CPU backend's tuned kernels share with the reference ones -- */

/* FusedMatMul on the host: M, K, N of the layer (after checking that its
 * tensors are float32). */
KILN_PRIVATE kiln_status kiln__fmm_dims(const kiln_kernel_args *a, int64_t *M, int64_t *K, int64_t *N);

/* A faster block kernel for Attention (the CPU backend's AVX-512 ones): all
 * query rows of one (batch, head) at once, with ws_floats(Sq, Sk, D, Dv)
 * floats of scratch. Applies the mask, not the cond, bias or nan_to_zero
 * (layers with those take the reference path). */
typedef size_t (*kiln_attn_ws_fn)(int64_t Sq, int64_t Sk, int64_t D, int64_t Dv);
typedef struct kiln_attn_fast {
    kiln_attn_ws_fn ws_floats;
    void (*block)(const float *Q, int64_t ldq, const float *K, int64_t ldk, bool k_dxs, const float *V,
                  int64_t ldv, float *O, int64_t ldo, int64_t rows, int64_t Sk, int64_t D, int64_t Dv,
                  float scale, const float *mask, int64_t mrow, int64_t mcol, float *ws);
} kiln_attn_fast;
/* Runs an Attention layer: the reference path (fast NULL) or `fast`. */
KILN_PRIVATE kiln_status kiln__attn_run(const kiln_kernel_args *a, const kiln_attn_fast *fast);
/* Workspace bytes of kiln__attn_run for the reference path and, when
 * fast_floats is given, for a fast kernel with that scratch too. */
KILN_PRIVATE size_t kiln__attn_workspace(const kiln_infer_args *a, kiln_attn_ws_fn fast_floats);

#endif
