/* cuda_spatial.h -- declarations of the CUDA kernels of the "spatial" family
 * (cuda_ops_spatial.c, k_spatial.cu): KCU_DECLARE lines and the kcu_* launchers.
 * Ops of this family: Pad Resize Upsample DepthToSpace SpaceToDepth InstanceNormalization LRN MeanVarianceNormalization LpPool GlobalLpPool MaxUnpool ConvTranspose GridSample RoiAlign MaxRoiPool.
 * Included by cuda_internal.h. */
#ifndef KILN_CUDA_SPATIAL_H
#define KILN_CUDA_SPATIAL_H

#endif
