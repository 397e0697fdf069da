/* fused_conv.h -- kiln.FusedConv: a convolution with its bias, an optional
 * residual addition and an optional activation in one layer, made by the
 * graph optimizer (src/passes/fuse_conv.c) from
 *
 *     Conv [-> BatchNormalization] [-> Add(residual)] [-> activation]
 *
 * (BatchNormalization is folded into W and B first). Computes, elementwise
 * over the Conv output:
 *
 *     Y = act(conv(X, W) + B[m] + R)
 *
 * Inputs:  0 X  [N, C, spatial...] float32
 *          1 W  [M, C/group, k...] float32 (a constant after optimization)
 *          2 B  [M] float32, optional (absent: 0)
 *          3 R  residual, same shape as Y, optional (has_residual == 1)
 * Output:  0 Y  [N, M, out spatial...] float32
 *
 * The attrs struct is POD and written verbatim into engines: never change
 * its layout; device backends (CUDA) read it as documented here. */
#ifndef KILN_FUSED_CONV_H
#define KILN_FUSED_CONV_H

#include "ops/fused_act_codes.h"
#include "ops/op.h"
#include "ops/nn_attrs.h"

/* Every switch over KILN_FC_ACT_* sits next to this check: an activation
 * added here fails the build until each of them handles it. */
#define KILN_FC_ACT_ALL_HANDLED(where) \
    _Static_assert(KILN_FC_ACT_COUNT == 8, where ": handle every KILN_FC_ACT_* (then update this count)")

typedef struct kiln_fused_conv_attrs {
    kiln_tactic tactic;      /* first, as for every KILN_OP_FLAG_TACTICS op */
    kiln_conv_attrs conv;    /* the Conv's attributes (see nn_attrs.h) */
    int32_t act;             /* KILN_FC_ACT_* */
    float alpha, beta;       /* activation parameters (see above) */
    int32_t has_residual;    /* 1: input 3 is added before the activation */
    int32_t precision;       /* kiln_precision of the arithmetic: FP32, or BF16 (inputs and
                                weights rounded to bf16, fp32 accumulation and output) */
    int32_t layout;          /* KILN_FC_LAYOUT_* bits (the CPU's oneDNN, Winograd and direct
                                tactics, CUDA's channels-last layers; 0: NCHW) */
    int32_t reserved[2];     /* 0 */
} kiln_fused_conv_attrs;
KILN_ATTRS_SIZE(kiln_fused_conv_attrs, 424); KILN_ATTRS_AT(kiln_fused_conv_attrs, tactic, 0);
KILN_ATTRS_AT(kiln_fused_conv_attrs, conv, 8); KILN_ATTRS_AT(kiln_fused_conv_attrs, act, 392);
KILN_ATTRS_AT(kiln_fused_conv_attrs, alpha, 396); KILN_ATTRS_AT(kiln_fused_conv_attrs, beta, 400);
KILN_ATTRS_AT(kiln_fused_conv_attrs, has_residual, 404); KILN_ATTRS_AT(kiln_fused_conv_attrs, precision, 408);
KILN_ATTRS_AT(kiln_fused_conv_attrs, layout, 412); KILN_ATTRS_AT(kiln_fused_conv_attrs, reserved, 416);

/* Channels-last layout (NHWC, rank 4: the same bytes as NCHW in another
 * order) of tensors passed between layers that run oneDNN or kiln's
 * Winograd kernel, whose fastest kernels here use it; set by
 * kiln__fc_choose_layouts after tuning. */
enum {
    KILN_FC_LAYOUT_X_NHWC = 1, /* input 0 arrives NHWC */
    KILN_FC_LAYOUT_Y_NHWC = 2, /* output (and the residual, input 3) NHWC */
    KILN_FC_LAYOUT_X_BF16 = 4, /* the NHWC input holds bf16 values (bf16 layers) */
    KILN_FC_LAYOUT_Y_BF16 = 8, /* the NHWC output and residual hold bf16 values */
    /* the residual arrives NHWC (float32) while the output leaves NCHW: the
     * last residual layer before a reader outside the chain (ResNet's last
     * block before GlobalAveragePool); oneDNN tactics only, engine format 3 */
    KILN_FC_LAYOUT_R_NHWC = 16,
    /* channel-blocked nChw16c ([N][C/16][H][W][16], float32, C % 16 == 0):
     * oneDNN's jit 1x1 kernels run faster on it than on NHWC where the
     * tensors stream from memory (ResNet-50 at batch 8); the builder times
     * both and keeps the faster (kiln__fc_choose_layouts's `c16`) */
    KILN_FC_LAYOUT_X_C16 = 32, /* input 0 arrives nChw16c */
    KILN_FC_LAYOUT_Y_C16 = 64, /* output (and the residual) nChw16c */
    KILN_FC_LAYOUT_ALL = 127,
};

/* kiln.PwDwConv (src/ops/fused_pwdw.c, kernel conv_pwdw.c): a pointwise
 * 1x1 FusedConv (stride 1, no pads, one group) whose output only a
 * depthwise 3x3 FusedConv reads, and optionally the 1x1 FusedConv that
 * alone reads the depthwise output (with its residual), in one layer that
 * never stores the tensors between them (MobileNet's inverted-residual
 * block: expand, depthwise, project):
 *
 *     T = act1(conv1x1(X, W1) + B1), or X itself (no_expand: MobileNetV2's first
 *         block, a depthwise and a project convolution)
 *     D = act2(dwconv3x3(T, W2, stride, pads) + B2)
 *     Y = D, or with the project convolution: act3(conv1x1(D, W3) + B3 + R)
 *
 * Inputs:  0 X  [N, C, H, W] float32
 *          1 W1 [E, C, 1, 1] float32 (absent with no_expand)
 *          2 B1 [E] float32, optional (absent: 0)
 *          3 W2 [E, 1, 3, 3] float32
 *          4 B2 [E] float32, optional (absent: 0)
 *          5 W3 [M, E, 1, 1] float32 (has_project)
 *          6 B3 [M] float32, optional (absent: 0)
 *          7 R  residual, the shape of Y (has_residual; needs has_project)
 * Output:  0 Y  [N, E or M, Ho, Wo], Ho = (H + pads[0] + pads[2] - 3) / stride + 1,
 *               Wo = (W + pads[1] + pads[3] - 3) / stride + 1
 * Made by the graph optimizer (fuse_conv.c) for float32 CPU layers only.
 * POD, written verbatim into engines. */
typedef struct kiln_pwdw_attrs {
    int32_t act1;            /* KILN_FC_ACT_* of the first pointwise convolution */
    float alpha1, beta1;
    int32_t act2;            /* KILN_FC_ACT_* of the depthwise convolution */
    float alpha2, beta2;
    int32_t act3;            /* KILN_FC_ACT_* of the project convolution (after the residual) */
    float alpha3, beta3;
    int32_t stride;          /* depthwise stride, 1 or 2 (both dimensions) */
    int32_t pads[4];         /* depthwise pads top, left, bottom, right: 0 or 1 */
    int32_t has_project;     /* 1: inputs 5 and 6, Y has M channels */
    int32_t has_residual;    /* 1: input 7 is added before act3 */
    int32_t layout;          /* KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC (0: NCHW; the
                                residual has Y's layout) */
    int32_t no_expand;       /* 1: no first pointwise convolution, T = X (inputs 1 and 2
                                absent, act1 none, E = C; needs has_project) */
    int32_t reserved;        /* 0 */
} kiln_pwdw_attrs;
KILN_ATTRS_SIZE(kiln_pwdw_attrs, 76); KILN_ATTRS_AT(kiln_pwdw_attrs, act1, 0);
KILN_ATTRS_AT(kiln_pwdw_attrs, alpha1, 4); KILN_ATTRS_AT(kiln_pwdw_attrs, beta1, 8);
KILN_ATTRS_AT(kiln_pwdw_attrs, act2, 12); KILN_ATTRS_AT(kiln_pwdw_attrs, alpha2, 16);
KILN_ATTRS_AT(kiln_pwdw_attrs, beta2, 20); KILN_ATTRS_AT(kiln_pwdw_attrs, act3, 24);
KILN_ATTRS_AT(kiln_pwdw_attrs, alpha3, 28); KILN_ATTRS_AT(kiln_pwdw_attrs, beta3, 32);
KILN_ATTRS_AT(kiln_pwdw_attrs, stride, 36); KILN_ATTRS_AT(kiln_pwdw_attrs, pads, 40);
KILN_ATTRS_AT(kiln_pwdw_attrs, has_project, 56); KILN_ATTRS_AT(kiln_pwdw_attrs, has_residual, 60);
KILN_ATTRS_AT(kiln_pwdw_attrs, layout, 64); KILN_ATTRS_AT(kiln_pwdw_attrs, no_expand, 68);
KILN_ATTRS_AT(kiln_pwdw_attrs, reserved, 72);

/* Output size of PwDwConv's depthwise convolution along a dimension of n. */
static inline int64_t kiln__pwdw_out(int64_t n, int pa, int pb, int stride) {
    return (n + pa + pb - 3) / stride + 1;
}
/* fused_pwdw.c: the node's inputs agree with the (validated) attributes. */
KILN_PRIVATE kiln_status kiln__pwdw_check_inputs(const char *node, const kiln_pwdw_attrs *at, int n_in);

/* Resolved geometry of a convolution (shared by Conv and FusedConv kernels). */
typedef struct kiln_conv_geom {
    int ns;                  /* spatial rank */
    int64_t N, C, M, G;      /* batch, input channels, output channels, groups */
    int64_t Cg, Mg;          /* per group */
    int64_t in[KILN_NN_MAX_SP], out[KILN_NN_MAX_SP], k[KILN_NN_MAX_SP], s[KILN_NN_MAX_SP],
        d[KILN_NN_MAX_SP], pb[KILN_NN_MAX_SP], pe[KILN_NN_MAX_SP];
    int64_t in_sz, out_sz, k_sz; /* products (-1 if unknown) */
} kiln_conv_geom;

/* nn_conv.c: validate of the Conv family's attributes (op names the node's op in
 * messages). */
KILN_PRIVATE kiln_status kiln__conv_validate_attrs(const kiln_op_def *op, const kiln_conv_attrs *at,
                                                   const char *node);
/* nn_conv.c: the Conv geometry of X/W shapes (dims may be unknown at build time). */
KILN_PRIVATE kiln_status kiln__conv_geom(const char *node, const char *op,
                                         const kiln_conv_attrs *at, int xr, const int64_t *xd,
                                         int wr, const int64_t *wd, kiln_conv_geom *g);
/* nn_conv.c: Conv's infer / workspace / float kernel for args whose attrs
 * point at a kiln_conv_attrs and whose inputs are X, W[, B]. */
KILN_PRIVATE kiln_status kiln__conv_infer(const kiln_infer_args *a);
KILN_PRIVATE size_t kiln__conv_workspace(const kiln_infer_args *a);
KILN_PRIVATE kiln_status kiln__conv_cpu(const kiln_kernel_args *a);

/* The activation of a FusedConv on one float (reference semantics). */
KILN_PRIVATE float kiln__fc_act(int act, float alpha, float beta, float x);
KILN_PRIVATE const char *kiln__fc_act_name(int act);
/* What every FusedConv kernel on the host checks first: has_residual agrees
 * with the inputs, float32 tensors, blocked layout bits that fit. */
KILN_PRIVATE kiln_status kiln__fc_check_run(const kiln_kernel_args *a);

/* The blocked layout bits of `at` fit a layer with input of dtype xt and
 * rank xr and weights of rank wr, dims wd (float32, 2-D, one group,
 * channels multiples of 16); else an error. */
KILN_PRIVATE kiln_status kiln__fc_c16_check(const char *node, const kiln_fused_conv_attrs *at, kiln_dtype xt,
                                            int xr, int wr, const int64_t *wd);

#endif
