/* cuda_nhwc.h -- channels-last (NHWC) convolution chains for fp16/bf16 CUDA
 * engines (see cuda_nhwc.c). */
#ifndef KILN_PASSES_CUDA_NHWC_H
#define KILN_PASSES_CUDA_NHWC_H

#include "ir/ir.h"

/* Runs after node placement and tuning on a CUDA engine's graph (tactics of
 * the layers it converts are reset to 0: cuDNN's candidates are then timed
 * on the first run): every kiln.FusedConv
 * placed on the GPU that cuDNN runs best channels-last (2-D, fp16/bf16,
 * group 1, channel counts multiples of 8, symmetric padding, static shapes)
 * gets layout KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC: its input,
 * residual and output hold NHWC bytes under their NCHW shapes. Where such a
 * value meets a layer that reads NCHW, a Transpose (+ a Reshape, which is a
 * view: no copy) converts it. Does nothing unless kiln was built with cuDNN,
 * or when the environment variable KILN_CUDA_NHWC is "0". Returns the number
 * of layers made NHWC in *n_layers (may be NULL). */
KILN_PRIVATE kiln_status kiln__pass_cuda_nhwc(kiln_graph *g, int *n_layers);

#endif
