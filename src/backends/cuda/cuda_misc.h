/* cuda_misc.h -- declarations of the CUDA kernels of the "misc" family
 * (cuda_ops_misc.c, k_misc.cu): KCU_DECLARE lines and the kcu_* launchers.
 * Ops of this family: RandomNormal RandomNormalLike RandomUniform RandomUniformLike Bernoulli DFT STFT BlackmanWindow HammingWindow HannWindow MelWeightMatrix Det NonMaxSuppression NegativeLogLikelihoodLoss SoftmaxCrossEntropyLoss.
 * On the GPU: all but NonMaxSuppression (see docs/cuda.md).
 * Included by cuda_internal.h. */
#ifndef KILN_CUDA_MISC_H
#define KILN_CUDA_MISC_H

#include "backends/cuda/k_misc.h"
#include "ops/misc_attrs.h"

KCU_DECLARE(random) /* RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike, Bernoulli */
KCU_DECLARE(window) /* BlackmanWindow, HammingWindow, HannWindow */
KCU_DECLARE(dft)
KCU_DECLARE(stft)
KCU_DECLARE(mel)    /* MelWeightMatrix */
KCU_DECLARE(det)
KCU_DECLARE(loss)   /* NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss */

#endif
