/* cuda_layout.h -- channels-last (NHWC) chains for fp16/bf16 CUDA engines
 * (see cuda_layout.c). */
#ifndef KILN_CUDA_LAYOUT_H
#define KILN_CUDA_LAYOUT_H

#include "ir/ir.h"

/* Runs after node placement and before tuning on a CUDA engine's graph:
 * the layers placed on the GPU that have channels-last kernels (2-D
 * fp16/bf16 kiln.FusedConv of one group whose output channels are a
 * multiple of 8 and pads symmetric; 2-D MaxPool/AveragePool;
 * GlobalAveragePool; static shapes) and pass values to one another form
 * chains; a chain worth it (at least two layers per conversion) keeps its
 * values NHWC (the same bytes under the NCHW shapes). Layouts:
 * FusedConv KILN_FC_LAYOUT_X_NHWC | _Y_NHWC, or _Y_NHWC alone where its
 * input comes NCHW (the layer converts it itself, padding the channels to
 * a multiple of 8); pools KILN_POOL_LAYOUT_NHWC (GlobalAveragePool: the
 * input; its [N, C, 1, 1] output is the same in both layouts). Where an NHWC
 * value meets a layer that reads NCHW (or a residual arrives NCHW), a
 * Transpose (+ a Reshape, a view: no copy) converts it. The tactics of the
 * layers converted are reset to 0 (the builder times them afterwards).
 * Does nothing unless kiln was built with cuDNN, or when the environment
 * variable KILN_CUDA_NHWC is "0". Returns the number of layers made NHWC
 * in *n_layers (may be NULL). */
KILN_PRIVATE kiln_status kiln__pass_cuda_nhwc(kiln_graph *g, int *n_layers);

#endif
