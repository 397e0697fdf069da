/* k_gconv.h -- the launcher of k_gconv.cu (plain C types, included by
 * cuda_conv.c, k_gconv.cu and the emulation in tests/cuda/emu). */
#ifndef KILN_K_GCONV_H
#define KILN_K_GCONV_H

#include "cuda_kernels.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Grouped convolution over channels-last tensors (k_gconv.cu; RegNet's and
 * ResNeXt's 3x3 layers, G groups of Cg input and Mg output channels):
 * x [N, H, W, G Cg], wt [G Mg, kh, kw, Cg] (the weights [M, Cg, kh, kw]
 * with the channel innermost: the NHWC filter cuDNN reads too), bias
 * [G Mg] or NULL, r [N, Ho, Wo, G Mg] or NULL, y [N, Ho, Wo, G Mg]:
 *   y[n, o, p, g Mg + m] = act(sum_{i,j,c} x[n, o sh - ph + i dh, p sw - pw + j dw, g Cg + c]
 *                          * wt[g Mg + m, i, j, c] + bias[g Mg + m] + r[n, o, p, g Mg + m])
 * (taps outside x count 0), fp32 accumulation, one rounding, act a
 * KILN_FC_ACT_* (NaN propagates as in k_act.cuh).
 * Tensor cores (kcu_gconv_tc_ok): fp16/bf16, Cg and Mg multiples of 8, x
 * and wt 16-byte aligned, y 4-byte aligned: an implicit GEMM per group, rows the output
 * pixels, columns the group's output channels, K the (tap, channel) pairs;
 * `bm` pixels (64 or 128; 0: by the grid's size) by up to 32 channels per
 * block of 4 warps, mma.sync m16n8k16, operands through shared memory by
 * cp.async (three buffers: two steps in flight). Other shapes and dtypes
 * (f32, f64 too): a thread per output element. */
typedef struct kcu_gc_nhwc {
    int64_t N, H, W, Ho, Wo;
    int64_t G, Cg, Mg;
    int64_t kh, kw, sh, sw, dh, dw, ph, pw;
    int32_t act;
    float alpha, beta;
    int32_t bm;
} kcu_gc_nhwc;
cudaError_t kcu_gconv_nhwc(kiln_dtype t, const kcu_gc_nhwc *g, const void *x, const void *wt, const void *bias,
                           const void *r, void *y, cudaStream_t stream);

/* Whether the tensor-core kernel takes g in dtype t (pointers aside): the
 * sizes its 32-bit tile math and grid hold. */
static inline bool kcu_gconv_tc_ok(kiln_dtype t, const kcu_gc_nhwc *g) {
    const int64_t big = (int64_t)1 << 30;
    if (t != KILN_DTYPE_FLOAT16 && t != KILN_DTYPE_BFLOAT16) return false;
    if (g->Cg < 8 || g->Cg % 8 || g->Mg < 8 || g->Mg % 8 || g->G < 1 || g->G > 65535) return false;
    if (g->kh < 1 || g->kw < 1 || g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1) return false;
    if (g->kh * g->kw * g->Cg >= big || g->N * g->Ho * g->Wo >= big * 64 || g->H * g->W >= big) return false;
    return g->bm == 0 || g->bm == 64 || g->bm == 128;
}

#ifdef __cplusplus
}
#endif

#endif
