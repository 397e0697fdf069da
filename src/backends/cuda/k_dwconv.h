/* k_dwconv.h -- the launcher of k_dwconv.cu (plain C types, included by
 * cuda_conv.c, k_dwconv.cu and the emulation in tests/cuda/emu). */
#ifndef KILN_K_DWCONV_H
#define KILN_K_DWCONV_H

#include "cuda_kernels.h"

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Depthwise convolution over channels-last tensors (k_dwconv.cu; one input
 * and one output channel per group): x [N, H, W, C], wt [kh * kw, C] (the
 * weights [C, 1, kh, kw] with the channel innermost), bias [C] or NULL,
 * r [N, Ho, Wo, C] or NULL, y [N, Ho, Wo, C]:
 *   y[n, o, p, c] = act(sum_{i,j} x[n, o sh - ph + i dh, p sw - pw + j dw, c]
 *                       * wt[i kw + j, c] + bias[c] + r[n, o, p, c])
 * (taps outside x count 0), fp32 accumulation, act a KILN_FC_ACT_* below
 * (GELU excluded). fp16/bf16 with C % 8 == 0 and 16-byte aligned pointers:
 * 8 channels per thread in 16-byte vectors; 3x3, 5x5 and 7x7 kernels with
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

/* The same layer over NCHW tensors (k_dwconv.cu): x [N, C, H, W], w the
 * weights [C, 1, kh, kw] as they are, bias [C] or NULL, r [N, C, Ho, Wo] or
 * NULL, y [N, C, Ho, Wo]; every float dtype (fp32 accumulation, fp64 for
 * f64), any kernel size, stride, dilation and padding whose tile fits
 * (kcu_dw_nchw_tile). A block of KCU_DW_NCHW_THREADS threads per (image,
 * channel, tile of TY x TX outputs) stages the tile's input window and the
 * weights in shared memory, then a thread computes one output. */
#define KCU_DW_NCHW_THREADS 256
#define KCU_DW_NCHW_SMEM (48 * 1024)
cudaError_t kcu_dwconv_nchw(kiln_dtype t, const kcu_dw_nhwc *g, const void *x, const void *w,
                            const void *bias, const void *r, void *y, cudaStream_t stream);

/* kcu_dwconv_nchw's tile for g in dtype t: *tx_log2 (TX = 32, 16 or 8 as
 * the output is wide; TY = KCU_DW_NCHW_THREADS / TX), *blocks and *smem
 * (bytes); false where the kernel does not take g (a window over
 * KCU_DW_NCHW_SMEM, sizes past its 32-bit index math, a negative pad). */
static inline bool kcu_dw_nchw_tile(kiln_dtype t, const kcu_dw_nhwc *g, int *tx_log2, int64_t *blocks,
                                    size_t *smem) {
    const int64_t big = (int64_t)1 << 30;
    if (g->kh < 1 || g->kw < 1 || g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->ph < 0 || g->pw < 0)
        return false;
    if (g->H * g->W >= big || g->Ho * g->Wo >= big || g->C * g->kh * g->kw >= big || g->ph >= big ||
        g->pw >= big || g->sh >= 4096 || g->sw >= 4096 || g->dh >= 4096 || g->dw >= 4096)
        return false;
    *tx_log2 = g->Wo > 16 ? 5 : g->Wo > 8 ? 4 : 3;
    const int64_t TX = (int64_t)1 << *tx_log2, TY = KCU_DW_NCHW_THREADS / TX;
    const int64_t IH = (TY - 1) * g->sh + (g->kh - 1) * g->dh + 1, IW = (TX - 1) * g->sw + (g->kw - 1) * g->dw + 1;
    const int64_t es = t == KILN_DTYPE_FLOAT64 ? 8 : 4, tiles = ((g->Wo + TX - 1) / TX) * ((g->Ho + TY - 1) / TY);
    if (IH * IW + g->kh * g->kw > KCU_DW_NCHW_SMEM / es || g->N * g->C > INT32_MAX / tiles) return false;
    *blocks = g->N * g->C * tiles;
    *smem = (size_t)((IH * IW + g->kh * g->kw) * es);
    return true;
}

#ifdef __cplusplus
}
#endif

#endif
