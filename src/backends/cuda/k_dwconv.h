/* k_dwconv.h -- the launcher of k_dwconv.cu (plain C types, included by
 * cuda_conv.c, k_dwconv.cu and the emulation in tests/cuda/emu). */
#ifndef KILN_K_DWCONV_H
#define KILN_K_DWCONV_H

#include "cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Depthwise convolution over channels-last tensors (k_dwconv.cu; one input
 * and one output channel per group): x [N, H, W, C], wt [kh * kw, C] (the
 * weights [C, 1, kh, kw] with the channel innermost), bias [C] or NULL,
 * r [N, Ho, Wo, C] or NULL, y [N, Ho, Wo, C]:
 *   y[n, o, p, c] = act(sum_{i,j} x[n, o sh - ph + i dh, p sw - pw + j dw, c]
 *                       * wt[i kw + j, c] + bias[c] + r[n, o, p, c])
 * (taps outside x count 0), fp32 accumulation, act a KCU_ACT_* below
 * (GELU excluded). fp16/bf16 with C % 8 == 0 and 16-byte aligned pointers:
 * 8 channels per thread in 16-byte vectors; 3x3 and 5x5 kernels with
 * stride 1 or 2 and no dilation: a row of TW outputs per thread, each
 * input vector loaded once per kernel row. Other shapes and dtypes (f32,
 * f64 too): a thread per output element. */
typedef struct kcu_dw_nhwc {
    int64_t N, C, H, W, Ho, Wo;
    int64_t kh, kw, sh, sw, dh, dw, ph, pw;
    int32_t act;
    float alpha, beta;
    int32_t pad_;
} kcu_dw_nhwc;
cudaError_t kcu_dwconv_nhwc(kiln_dtype t, const kcu_dw_nhwc *g, const void *x, const void *wt,
                            const void *bias, const void *r, void *y, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
