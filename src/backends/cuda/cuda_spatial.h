/* cuda_spatial.h -- declarations of the CUDA kernels of the "spatial" family
 * (cuda_ops_spatial.c, k_spatial.cu): KCU_DECLARE lines and the kcu_* launchers.
 * Ops of this family: Pad Resize Upsample DepthToSpace SpaceToDepth InstanceNormalization LRN MeanVarianceNormalization LpPool GlobalLpPool MaxUnpool ConvTranspose GridSample RoiAlign MaxRoiPool.
 * Included by cuda_internal.h. */
#ifndef KILN_CUDA_SPATIAL_H
#define KILN_CUDA_SPATIAL_H

#include "backends/cuda/k_spatial.h" /* launchers, geometry structs */

KCU_DECLARE(pad)
KCU_DECLARE(resize)
KCU_DECLARE(depth_space)
KCU_DECLARE(instance_norm)
KCU_DECLARE(lrn)
KCU_DECLARE(mvn)
KCU_DECLARE(hardmax)
/* Rows of Softmax/LogSoftmax/Hardmax (kiln_softmax_attrs, input 0): outer x
 * n x inner with the axis of n; opset < 13 coerces to 2-D (inner 1). */
KILN_PRIVATE kiln_status kiln__cu_softmax_rows(const kiln_kernel_args *a, int64_t *outer,
                                               int64_t *n, int64_t *inner);
KCU_DECLARE(conv_transpose)
/* A convolution geometry as cuDNN's int arrays (cuda_conv.c and
 * ConvTranspose): x [N, C, in...] and y [N, M, out...] dims and dense
 * strides, filter dims ([M, C/group, k...], or [C, M/group, k...] when
 * transposed), pads/strides/dilations; 1-D as 2-D with a leading unit dim. */
typedef struct kcu_conv_nd {
    int nsp, nd;
    int xd[5], yd[5], wd[5], xs[5], ys[5], pad[3], str[3], dil[3];
} kcu_conv_nd;
KILN_PRIVATE void kiln__cuda_conv_nd(const kcu_conv *g, bool transposed, kcu_conv_nd *v);
KCU_DECLARE(lppool)
KCU_DECLARE(global_lppool)
KCU_DECLARE(maxunpool)
KCU_DECLARE(maxroipool)
KCU_DECLARE(reverse_sequence)
KCU_DECLARE(gridsample)
KCU_DECLARE(roialign)

#endif
