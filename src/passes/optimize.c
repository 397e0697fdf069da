/* optimize.c -- the graph optimizer: runs the rewrite families over a
 * shape-inferred, constant-folded graph, then re-infers and cleans up. */
#include "passes/pattern.h"

#include "backends/backend.h"
#include "passes/precision.h"

#include <stdio.h>

/* ---- the passes that can be switched off (kiln_builder_disable_pass) ------ */

static const struct {
    const char *name, *what;
} pass_table[KILN_PASS_COUNT] = {
    [KILN_PASS_FOLD_BN] = {"fold_bn", "BatchNormalization after a Conv folded into its weights and bias"},
    [KILN_PASS_FUSE_CONV] = {"fuse_conv",
                             "Conv + residual Add + activation into one kiln.FusedConv layer"},
    [KILN_PASS_FUSE_PWDW] = {"fuse_pwdw", "CPU: 1x1 + depthwise 3x3 (+ 1x1 project) FusedConv layers into "
                                          "one kiln.PwDwConv (MobileNet blocks)"},
    [KILN_PASS_FUSE_SE] = {"fuse_se", "GlobalAveragePool + two 1x1 FusedConv layers (a squeeze-excite gate) into "
                                      "one kiln.SqueezeExcite, where the device's backend takes it (CUDA)"},
    [KILN_PASS_MERGE_TRANSPOSE_RESHAPE] = {"merge_transpose_reshape",
                                           "Transpose of Transpose composed (or removed), Reshape of "
                                           "Reshape made one Reshape, Reshape targets computed at run "
                                           "time from the input's own dims made constant (0 entries), inference "
                                           "Dropouts removed"},
    [KILN_PASS_FUSE_LAYERNORM] = {"fuse_layernorm", "decomposed LayerNorm (ReduceMean ... Div, Mul, Add) "
                                                    "into LayerNormalization"},
    [KILN_PASS_FUSE_RMSNORM] = {"fuse_rmsnorm", "decomposed RMSNorm (Pow 2, ReduceMean, Add eps, Sqrt, Div or "
                                                "reciprocal and Mul, Mul weight) into RMSNormalization"},
    [KILN_PASS_FUSE_GELU] = {"fuse_gelu", "GELU (erf or tanh form) into kiln.Gelu"},
    [KILN_PASS_FUSE_ATTENTION] = {"fuse_attention", "MatMul, scale, mask, Softmax, MatMul (and the head "
                                                    "split and merge around them) into kiln.Attention"},
    [KILN_PASS_FOLD_LAYER_SCALE] = {"fold_layer_scale",
                                    "a constant per-feature scale after MatMul/Gemm (+ bias), also through a "
                                    "Transpose (ConvNeXt's layer scale), folded into the weights and bias"},
    [KILN_PASS_FUSE_MATMUL] = {"fuse_matmul",
                               "MatMul/Gemm + bias + residual + Relu/Gelu into kiln.FusedMatMul"},
    [KILN_PASS_FUSE_QKV] = {"fuse_qkv", "an Attention's Q, K and V projections into one FusedMatMul (a "
                                        "packed one's Split/Slices read in place; batch_first "
                                        "MultiheadAttention's transposes dropped)"},
    [KILN_PASS_SHARE_ATTENTION_MASK] = {"share_attention_mask",
                                        "fp16/bf16 device plans: the bool cond that several Attention layers "
                                        "share (a padding mask, -inf where masked) made into one additive mask "
                                        "once per run (one Where), read by every one of them"},
    [KILN_PASS_ATTENTION_MASK_ROWS] = {"attention_mask_rows",
                                       "share_attention_mask's mask made from what a cond And an all-true "
                                       "constant broadcasts (BERT's padding mask [B, 1, 1, S]: one row of keys "
                                       "per batch) rather than in the cond's shape ([B, 1, S, S])"},
    [KILN_PASS_MERGE_MOVEMENT] = {"merge_movement",
                                  "a chain of data-movement layers from one value (Transpose, Slice, Gather and "
                                  "Concat with constant parameters, views) into one Gather of rows"},
    [KILN_PASS_FOLD_ADDENDS] = {"fold_addends",
                                "fp16/bf16 device plans: Add(Add(x, c1), c2) of two constants made Add(x, c1 + c2), "
                                "the sum made at build time (BERT's embeddings: token type + position)"},
    [KILN_PASS_FUSE_ADD_LAYERNORM] = {"fuse_add_layernorm",
                                      "Add + LayerNormalization into kiln.AddLayerNorm (the sum an output "
                                      "too where it is read elsewhere)"},
    [KILN_PASS_FUSE_POINTWISE] = {"fuse_pointwise", "every connected group of elementwise nodes left by the "
                                                    "other fusions (activations, Cast, Where, masks) into "
                                                    "one kiln.Pointwise layer"},
    [KILN_PASS_SHRINK_CONSTANTS] = {"shrink_constants",
                                    "a constant operand of a binary elementwise layer that repeats along its "
                                    "leading axes stored once, broadcast by the layer (BERT's token-type "
                                    "embedding [B, S, E] -> [1, 1, E])"},
    [KILN_PASS_CPU_LAYOUT] = {"cpu_layout", "CPU: NHWC or blocked nChw16c tensors between convolution "
                                            "layers (chosen by timing at build)"},
    [KILN_PASS_CUDA_NHWC] = {"cuda_nhwc", "CUDA: NHWC tensors between fp16/bf16 cuDNN convolution layers"},
};

int kiln_pass_count(void) { return KILN_PASS_COUNT; }

const char *kiln_pass_name(int index) {
    return index >= 0 && index < KILN_PASS_COUNT ? pass_table[index].name : NULL;
}

const char *kiln_pass_description(int index) {
    return index >= 0 && index < KILN_PASS_COUNT ? pass_table[index].what : NULL;
}

int kiln__pass_find(const char *name) {
    for (int i = 0; name && i < KILN_PASS_COUNT; i++)
        if (!strcmp(pass_table[i].name, name)) return i;
    return -1;
}

kiln_status kiln__pass_optimize(kiln_graph *g, const kiln_optimize_opts *o) {
    /* fp16/bf16 device plans are converted even without optimizations (precision.c) */
    const kiln_backend_i *be = kiln__backend_for(o->device);
    bool reduced = be && be->reduced_tensors &&
                   (o->precision == KILN_PRECISION_FP16 || o->precision == KILN_PRECISION_BF16);
    /* CPU fp16/bf16: the fused layers carry the precision (kiln__layer_fp32_apply) */
    bool cpu_reduced = !reduced && (o->precision == KILN_PRECISION_FP16 || o->precision == KILN_PRECISION_BF16);
    if (cpu_reduced) KILN_TRY(kiln__layer_names_check(g, o));
    if (o->disable && !reduced) return KILN_OK;
    bool first = reduced && kiln__precision_first(o);
    kiln__graph_link(g);
    if (first) KILN_TRY(kiln__pass_precision(g, o));
    if (!o->disable) KILN_TRY(kiln__opt_conv(g, o));
    if (!o->disable) KILN_TRY(kiln__opt_se(g, o));
    if (!o->disable) KILN_TRY(kiln__opt_transformer(g, o));
    if (!o->disable) KILN_TRY(kiln__opt_movement(g, o));
    if (!o->disable) KILN_TRY(kiln__opt_norm(g, o));
    if (cpu_reduced) kiln__layer_fp32_apply(g, o);
    if (reduced && !first) KILN_TRY(kiln__pass_precision(g, o));
    kiln__graph_link(g);
    if (!o->disable) KILN_TRY(kiln__opt_pointwise(g, o));
    if (!o->disable) KILN_TRY(kiln__opt_shrink_constants(g, o));
    KILN_TRY(kiln__pass_dce(g));
    return kiln__graph_infer(g);
}
