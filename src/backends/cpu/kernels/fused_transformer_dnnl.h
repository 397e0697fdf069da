/* fused_transformer_dnnl.h -- oneDNN matrix products for kiln.FusedMatMul
 * (src/backends/cpu/kernels/fused_transformer_dnnl.c). Built only with KILN_HAVE_DNNL; without
 * it kiln__tf_dnnl_available() is false and create fails with
 * KILN_ERR_UNSUPPORTED.
 *
 * One object holds the weights B reordered once into oneDNN's preferred
 * blocked layout (float32, or bfloat16 for bf16 engines), and primitives
 * for the row counts it has run with. A run splits the M rows over the kiln
 * pool; each part runs one oneDNN primitive on one thread (oneDNN's own
 * OpenMP threading is limited to 1 thread per call, so the pool's threads
 * are the only ones working: no oversubscription). */
#ifndef KILN_FUSED_TRANSFORMER_DNNL_H
#define KILN_FUSED_TRANSFORMER_DNNL_H

#include "ops/op.h"

typedef struct kiln_tf_dnnl_mm kiln_tf_dnnl_mm;

KILN_PRIVATE bool kiln__tf_dnnl_available(void);
/* B: [K, N] row-major, or [N, K] when trans_b; it must stay valid while m
 * lives (packed on the first run). act: KILN_FACT_*. bf16: products in
 * bfloat16 with float32 accumulation. */
KILN_PRIVATE kiln_status kiln__tf_dnnl_mm_create(int64_t K, int64_t N, const float *B, bool trans_b,
                                                 bool has_bias, bool has_residual, int act, bool bf16,
                                                 kiln_tf_dnnl_mm **out);
/* Y[M, N] = act(A[M, K] B + bias + res). ws: for bf16, M*K bfloat16 scratch. */
KILN_PRIVATE kiln_status kiln__tf_dnnl_mm_run(kiln_tf_dnnl_mm *m, int64_t M, const float *A,
                                              const float *bias, const float *res, float *Y, void *ws,
                                              kiln_pool *pool, const char *node);
KILN_PRIVATE void kiln__tf_dnnl_mm_free(void *m);

#endif
