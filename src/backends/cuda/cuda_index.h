/* cuda_index.h -- declarations of the CUDA kernels of the "index" family
 * (cuda_ops_index.c, k_index.cu): KCU_DECLARE lines and the kcu_* launchers.
 * Ops of this family: ArgMax ArgMin Hardmax TopK CumSum GatherElements GatherND Scatter ScatterElements ScatterND OneHot Trilu Range EyeLike ConstantOfShape ReverseSequence NonZero Compress Unique.
 * Included by cuda_internal.h. */
#ifndef KILN_CUDA_INDEX_H
#define KILN_CUDA_INDEX_H

#endif
