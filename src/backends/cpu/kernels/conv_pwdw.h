/* conv_pwdw.h -- a pointwise (1x1) convolution followed by a depthwise 3x3
 * one, and optionally by a second pointwise one with a residual, computed
 * row by row so that the wide tensors between them never leave the cache
 * (kiln.PwDwConv, src/ops/fused_pwdw.c; MobileNet's inverted-residual
 * blocks: expand 1x1 + activation, depthwise 3x3 + activation, project 1x1
 * + residual):
 *
 *     T = act1(conv1x1(X, W1) + B1) or X (no_expand) [N, E, H, W]   (never stored whole)
 *     D = act2(dwconv3x3(T, W2, stride, pads) + B2)  [N, E, Ho, Wo] (Y without W3)
 *     Y = act3(conv1x1(D, W3) + B3 + R)              [N, M, Ho, Wo] (with W3)
 *
 * Each thread keeps three rows of T (with a zero column on either side for
 * the depthwise padding) and makes the rows of T an output row needs when
 * it needs them; the weights are packed once per context. Exact up to the
 * order of float additions against the two convolutions run apart. */
#ifndef KILN_CONV_PWDW_H
#define KILN_CONV_PWDW_H

#include "ops/fused_conv.h" /* kiln__pwdw_out */

typedef struct kiln_pwdw_args {
    const float *x;      /* input [N, C, H, W] logical; NHWC if x_nhwc else NCHW */
    const float *packed; /* weights and biases from kiln__pwdw_pack */
    const float *r;      /* residual (project only), y's shape and layout, or NULL */
    float *y;            /* output [N, M or E, Ho, Wo] logical; NHWC if y_nhwc else NCHW */
    int64_t N, H, W, C, E;
    int64_t M;           /* channels of the project convolution; 0: none (Y = D) */
    int no_expand;       /* 1: T = X (E = C; W1, B1 and act1 unused) */
    int stride;          /* depthwise stride, 1 or 2 (both dimensions) */
    int pt, pl, pb, pr;  /* depthwise pads top, left, bottom, right (0 or 1) */
    int x_nhwc, y_nhwc;
    int act1;            /* KILN_FC_ACT_* after the pointwise convolution */
    float alpha1, beta1;
    int act2;            /* KILN_FC_ACT_* after the depthwise convolution */
    float alpha2, beta2;
    int act3;            /* KILN_FC_ACT_* after the project convolution (and residual) */
    float alpha3, beta3;
    void *ws;            /* scratch of kiln__pwdw_workspace bytes */
    size_t ws_bytes;
    kiln_pool *pool;     /* may be NULL (one thread) */
    int force_generic;   /* tests: 1 runs the plain C path even with AVX-512F */
} kiln_pwdw_args;

/* Floats of the packed weights: W1 as [C][Ep], B1 [Ep], W2 as [9][Ep], B2
 * [Ep], then (M > 0) W3 as [E][Mp], B3 [Mp], with Ep and Mp = E and M
 * rounded up to 16 (zero padded). Without the first pointwise convolution
 * (no_expand) C is 0 here and in kiln__pwdw_pack (W1 empty, B1 zeros). */
KILN_PRIVATE int64_t kiln__pwdw_packed_floats(int64_t C, int64_t E, int64_t M);
/* w1 [E, C], b1 [E] or NULL, w2 [E, 9], b2 [E] or NULL, w3 [M, E] (or
 * NULL with M = 0), b3 [M] or NULL -> out. */
KILN_PRIVATE void kiln__pwdw_pack(const float *w1, const float *b1, const float *w2, const float *b2,
                                  const float *w3, const float *b3, int64_t C, int64_t E, int64_t M,
                                  float *out);
/* Scratch bytes for up to `threads` threads (SIZE_MAX when absurd). */
KILN_PRIVATE size_t kiln__pwdw_workspace(int64_t W, int64_t E, int64_t M, int stride, int pl, int pr,
                                         int threads);
/* Runs the layer (with fewer threads than the pool has if the workspace
 * has room for fewer). Ho, Wo (kiln__pwdw_out) must be >= 1. */
KILN_PRIVATE void kiln__pwdw_run(const kiln_pwdw_args *a);
/* AVX-512F present (the fast path is used; the graph optimizer fuses only then). */
KILN_PRIVATE bool kiln__pwdw_fast_available(void);

#endif
