/* conv_direct.h -- kiln's fp32 direct convolution on the CPU, the "direct"
 * tactic of kiln.FusedConv: 2-D, one group, dilation 1, any kernel size,
 * strides and pads, any N, H, W, C, M >= 1. Computes
 *
 *     y[n, m, oh, ow] = act(sum_{c,i,j} x[n, c, oh*sh - pt + i, ow*sw - pl + j] W[m, c, i, j]
 *                           + bias[m] + r[n, m, oh, ow])
 *
 * as a matrix product per image: output pixels by output channels, over
 * K = kh * kw * C. The weights are packed once into panels of 32 output
 * channels ([M/32][kh][kw][C][32], the last panel zero padded). The
 * AVX-512F micro-kernel keeps up to 14 output pixels x 32 channels in 28
 * zmm registers over all of K, then adds bias and residual, applies the
 * activation and stores.
 *
 * Input: a 1x1 layer without padding reads x where it is, in its layout
 * (16 channels at a time: one block of nChw16c, 16 consecutive floats of
 * NHWC), its pixels one run per image at stride 1, else one output row
 * segment at a time; except where a tile's NHWC pixels would crowd one set
 * of the L1 cache (C = 1024, or 512 at stride 2). Such a layer, and a
 * padded 1x1 one, first gathers the pixels it samples into a dense NHWC
 * image in the workspace (its pixel stride padded where C alone would
 * crowd), read as one run per image. Any other layer first
 * copies x into a zero-padded NHWC image in the workspace, where the kw
 * taps of a kernel row and the channels are one contiguous run of kw * C
 * floats (the stem of ResNet, 7x7 over 3 channels: 7 runs of 21); tiles
 * then stay inside one output row.
 *
 * Threads: the work is (image, pixel tile, panel) units. Where the weights
 * outweigh the input read (ResNet-50's 14x14 and 7x7 stages at batch 1),
 * each thread takes a contiguous share of the panels, so it streams only
 * its share of the weights (the next panel's weights fetched into L2 while
 * the current one computes) and writes whole channel blocks; else a share
 * of the pixel tiles with every panel. No copies of the output.
 *
 * A plain C path gives the same results up to rounding (CPUs without
 * AVX-512F, and tests). */
#ifndef KILN_CONV_DIRECT_H
#define KILN_CONV_DIRECT_H

#include "core/core.h"

/* Tensor layouts (the values of kiln_wino_args' x_nhwc / y_nhwc). */
enum { KILN_DIRECT_NCHW = 0, KILN_DIRECT_NHWC = 1, KILN_DIRECT_C16 = 2 /* channels a multiple of 16 */ };

#define KILN_DIRECT_PANEL 32   /* output channels per packed panel */
#define KILN_DIRECT_MAX_K 16   /* kernel rows at most */

KILN_PRIVATE size_t kiln__direct_packed_floats(int64_t C, int64_t M, int64_t kh, int64_t kw);
/* W: [M][C][kh][kw] (ONNX layout) -> packed panels (kiln__direct_packed_floats floats). */
KILN_PRIVATE void kiln__direct_pack(const float *W, int64_t C, int64_t M, int64_t kh, int64_t kw, float *Wp);

typedef struct kiln_direct_args {
    const float *x;     /* [N, C, H, W] logical, layout x_layout */
    const float *w;     /* packed by kiln__direct_pack */
    const float *bias;  /* [M] or NULL */
    const float *r;     /* residual [N, M, Ho, Wo] logical, layout r_layout, or NULL;
                           may be y itself (each element is read before it is written) */
    float *y;           /* [N, M, Ho, Wo] logical, layout y_layout */
    int64_t N, C, H, W, M;
    int64_t kh, kw;     /* 1..KILN_DIRECT_MAX_K */
    int64_t sh, sw;     /* strides >= 1 */
    int64_t pt, pl, pb, pr; /* pads >= 0: Ho = (H + pt + pb - kh) / sh + 1 >= 1, Wo likewise */
    int x_layout, y_layout, r_layout; /* KILN_DIRECT_* */
    int act;            /* KILN_FC_ACT_*, after bias and residual */
    float alpha, beta;
    void *ws;           /* kiln__direct_workspace bytes */
    size_t ws_bytes;
    kiln_pool *pool;    /* may be NULL */
    int force_generic;  /* tests: 1 runs the plain C path even with AVX-512F */
    int split;          /* tests: 0 chosen by size, 1 pixel tiles, 2 panels */
} kiln_direct_args;

/* Scratch bytes (the padded or gathered input; 0 for a 1x1 layer that
 * reads its input in place whatever its layout). */
KILN_PRIVATE size_t kiln__direct_workspace(int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw,
                                           int64_t sh, int64_t sw, int64_t pt, int64_t pl, int64_t pb, int64_t pr);
KILN_PRIVATE void kiln__direct_run(const kiln_direct_args *a);
/* AVX-512F present (the fast path is used). */
KILN_PRIVATE bool kiln__direct_fast_available(void);

#endif
