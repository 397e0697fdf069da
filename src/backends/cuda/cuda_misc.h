/* cuda_misc.h -- declarations of the CUDA kernels of the "misc" family
 * (cuda_ops_misc.c, k_misc.cu): KCU_DECLARE lines and the kcu_* launchers.
 * Ops of this family: RandomNormal RandomNormalLike RandomUniform RandomUniformLike Bernoulli DFT STFT BlackmanWindow HammingWindow HannWindow MelWeightMatrix Det NonMaxSuppression NegativeLogLikelihoodLoss SoftmaxCrossEntropyLoss.
 * Included by cuda_internal.h. */
#ifndef KILN_CUDA_MISC_H
#define KILN_CUDA_MISC_H

#endif
