/* fused_act_codes.h -- the activation of kiln.FusedConv
 * (kiln_fused_conv_attrs.act, src/ops/fused_conv.h; stored in engines). The
 * CPU kernels and the CUDA run functions and kernels (k_act.cuh) switch on
 * them, so this header is plain C that C++ reads too: no includes, no kiln
 * types. */
#ifndef KILN_FUSED_ACT_CODES_H
#define KILN_FUSED_ACT_CODES_H

/* Activation applied last (after bias and residual). */
enum {
    KILN_FC_ACT_NONE = 0,
    KILN_FC_ACT_RELU = 1,       /* max(x, 0) */
    KILN_FC_ACT_CLIP = 2,       /* min(max(x, alpha), beta) (Relu6: 0, 6) */
    KILN_FC_ACT_LEAKY_RELU = 3, /* x >= 0 ? x : alpha * x */
    KILN_FC_ACT_SIGMOID = 4,    /* 1 / (1 + exp(-x)) */
    KILN_FC_ACT_SILU = 5,       /* x * sigmoid(x) (Sigmoid + Mul) */
    KILN_FC_ACT_HARD_SWISH = 6, /* x * max(0, min(1, x / 6 + 0.5)) */
    KILN_FC_ACT_HARD_SIGMOID = 7, /* max(0, min(1, alpha * x + beta)) (ONNX HardSigmoid; the
                                     squeeze-excite gate of MobileNetV3: 1/6, 0.5) */
    KILN_FC_ACT_COUNT
};

#endif
