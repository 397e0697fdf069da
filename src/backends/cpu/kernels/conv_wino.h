/* conv_wino.h -- fp32 Winograd F(4x4, 3x3) and F(2x2, 3x3) convolution on
 * the CPU (tactics of kiln.FusedConv): 2-D, 3x3 kernel, stride 1, dilation
 * 1, one group, pads 0..2 on each side, any N, H, W, C, M >= 1. Computes
 *
 *     y = act(conv(x, W) + bias[m] + r)
 *
 * with the standard transforms of Lavin & Gray: per m x m output tile
 * (`tile` m = 4: points 0, +-1, +-2, inf; m = 2: points 0, +-1, inf),
 * V = B^T d B (a x a input tile d, a = m + 2), a*a matrix products
 * M[p] = V[p] U[p] over the channels (U = G g G^T, the packed weights),
 * then y = A^T M A. An AVX-512F path is used when the CPU
 * has it; the generic path is plain C and gives the same results up to
 * rounding. All scratch comes from the caller's workspace. */
#ifndef KILN_CONV_WINO_H
#define KILN_CONV_WINO_H

#include "core/core.h"
#include "backends/cpu/kernels/fused_conv_cpu.h"

/* `tile` below is the output tile m: 4 or 2. */
/* Packed, transformed weights: U = G g G^T for each (m, c). */
KILN_PRIVATE size_t kiln__wino_packed_floats(int64_t C, int64_t M, int tile);
/* W: [M][C][3][3] (ONNX layout) -> U (kiln__wino_packed_floats floats). */
KILN_PRIVATE void kiln__wino_pack(const float *W, int64_t C, int64_t M, int tile, float *U);
/* Scratch bytes for one run (all threads together), given the pool's
 * thread count (more threads than this are not used). */
KILN_PRIVATE size_t kiln__wino_workspace(int64_t N, int64_t H, int64_t W, int64_t C, int64_t M,
                                         int pt, int pl, int pb, int pr, int tile, int threads);

typedef struct kiln_wino_args {
    const float *x;      /* input: NHWC if x_nhwc else NCHW, [N, C, H, W] logical */
    const float *u;      /* packed weights from kiln__wino_pack with the same tile */
    int tile;            /* output tile m: 4 or 2 */
    const float *bias;   /* [M] or NULL */
    const float *r;      /* residual, same layout and shape as y, or NULL */
    float *y;            /* output [N, M, Ho, Wo] logical; NHWC if y_nhwc else NCHW */
    int64_t N, H, W, C, M;
    int pt, pl, pb, pr;  /* pads top, left, bottom, right (0..2) */
    int x_nhwc, y_nhwc;  /* layouts: 0 NCHW, 1 NHWC, KILN_WINO_C16 nChw16c (C, resp. M, a
                            multiple of 16); the residual has y's layout */
    int act;             /* KILN_FC_ACT_*, applied after bias + residual */
    float alpha, beta;   /* activation parameters */
    void *ws;            /* scratch of kiln__wino_workspace bytes */
    size_t ws_bytes;
    kiln_pool *pool;     /* may be NULL (one thread) */
    int force_generic;   /* tests: 1 runs the plain C path even with AVX-512F */
} kiln_wino_args;

enum { KILN_WINO_C16 = 2 };

/* Ho = H + pt + pb - 2, Wo = W + pl + pr - 2 (both must be >= 1). */
KILN_PRIVATE void kiln__wino_run(const kiln_wino_args *a);
/* AVX-512F present (the fast path is used). */
KILN_PRIVATE bool kiln__wino_fast_available(void);

#endif
