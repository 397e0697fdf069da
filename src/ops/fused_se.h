/* fused_se.h -- kiln.SqueezeExcite: the squeeze-excite gate of
 * MobileNetV3's and EfficientNet's blocks in one layer (made by
 * src/passes/fuse_se.c from GlobalAveragePool -> 1x1 FusedConv -> 1x1
 * FusedConv). The channel Mul that applies the gate stays a layer of its
 * own.
 *
 *   inputs   X  [N, C, H, W]  float32/float16/bfloat16/float64
 *            W1 [R, C, 1, 1]  (X's dtype)
 *            W2 [C, R, 1, 1]
 *            B1 [R]           optional (absent: 0)
 *            B2 [C]           optional (absent: 0)
 *   output   Y  [N, C, 1, 1]
 *
 *   p[n, c] = mean over (h, w) of X[n, c, h, w]      rounded to X's type
 *   h[n, r] = act1(sum_c W1[r, c] p[n, c] + B1[r])  rounded to X's type
 *   Y[n, c] = act2(sum_r W2[c, r] h[n, r] + B2[c])
 *
 * (the roundings are those of the three layers it replaces). act1/act2 are
 * FusedConv's activations (KILN_FC_ACT_*, ops/fused_act_codes.h) with their
 * alpha and beta. The attrs struct is POD and written verbatim into engines. */
#ifndef KILN_FUSED_SE_H
#define KILN_FUSED_SE_H

#include "ops/fused_act_codes.h"
#include "ops/op.h"

typedef struct kiln_se_attrs {
    kiln_tactic tactic; /* first, as for every KILN_OP_FLAG_TACTICS op (the backend's ids) */
    int32_t act1;       /* KILN_FC_ACT_* of the first 1x1 layer (ReLU, SiLU) */
    float alpha1, beta1;
    int32_t act2;       /* KILN_FC_ACT_* of the second (HardSigmoid, Sigmoid) */
    float alpha2, beta2;
    int32_t layout;     /* KILN_SE_LAYOUT_*: how X is stored (Y [N, C, 1, 1] is the same bytes in both) */
    int32_t reserved;   /* 0 */
} kiln_se_attrs;
KILN_ATTRS_SIZE(kiln_se_attrs, 40);
KILN_ATTRS_AT(kiln_se_attrs, tactic, 0);
KILN_ATTRS_AT(kiln_se_attrs, act1, 8);
KILN_ATTRS_AT(kiln_se_attrs, alpha1, 12);
KILN_ATTRS_AT(kiln_se_attrs, beta1, 16);
KILN_ATTRS_AT(kiln_se_attrs, act2, 20);
KILN_ATTRS_AT(kiln_se_attrs, alpha2, 24);
KILN_ATTRS_AT(kiln_se_attrs, beta2, 28);
KILN_ATTRS_AT(kiln_se_attrs, layout, 32);
KILN_ATTRS_AT(kiln_se_attrs, reserved, 36);

enum {
    KILN_SE_LAYOUT_NCHW = 0,
    KILN_SE_LAYOUT_NHWC = 1 /* X holds NHWC bytes under its NCHW shape (CUDA's channels-last chains) */
};

#endif
