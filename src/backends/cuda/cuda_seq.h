/* cuda_seq.h -- declarations of the CUDA kernels of the "seq" family
 * (cuda_ops_seq.c, k_seq.cu): KCU_DECLARE lines and the kcu_* launchers.
 * Ops of this family: LSTM GRU RNN Einsum QuantizeLinear DequantizeLinear DynamicQuantizeLinear MatMulInteger ConvInteger QLinearMatMul QLinearConv.
 * Included by cuda_internal.h. */
#ifndef KILN_CUDA_SEQ_H
#define KILN_CUDA_SEQ_H

#endif
