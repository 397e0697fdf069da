/* fused_transformer_math.h -- vectorized float32 helpers
 * (fused_transformer_math.c): the transformer layers' reference kernels
 * (src/ops/fused_transformer.c) and the CPU backend's tuned ones use them. */
#ifndef KILN_FUSED_TRANSFORMER_MATH_H
#define KILN_FUSED_TRANSFORMER_MATH_H

#include "core/core.h"

/* AVX-512 when the CPU has it, portable C otherwise. */
KILN_PRIVATE void kiln__gelu_f32(float *x, int64_t n, int approx); /* in place */
KILN_PRIVATE void kiln__relu_f32(float *x, int64_t n);
/* FusedMatMul's epilogue on `rows` rows of n values (row stride ldy): adds
 * bias (may be NULL) and residual rows (stride ldr; may be NULL), then the
 * activation. */
KILN_PRIVATE void kiln__fmm_epilogue(float *Y, int64_t ldy, int64_t rows, int64_t n, const float *bias,
                                     const float *res, int64_t ldr, int act);
/* Rounds n floats to bfloat16 (nearest even). */
KILN_PRIVATE void kiln__f32_to_bf16_row(const float *x, uint16_t *y, int64_t n);
/* y[i] = exp(x[i] - m) for i < n; returns their sum. */
KILN_PRIVATE float kiln__exp_shift_sum_f32(const float *x, float *y, int64_t n, float m);
KILN_PRIVATE float kiln__max_f32(const float *x, int64_t n);
/* Softmax of each of `rows` rows of n floats in place. */
KILN_PRIVATE void kiln__softmax_rows_f32(float *x, int64_t rows, int64_t n);

#endif
