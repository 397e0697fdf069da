/* gemm.h -- single-precision matrix multiply used by MatMul, Gemm, Conv,
 * ConvTranspose and Einsum.
 *
 *     C = alpha * op(A) * op(B) + beta * C
 *
 * All matrices are row-major. op(A) is M x K: A is M x K with row stride lda
 * (transA == false) or K x M (transA == true). op(B) is K x N: B is K x N
 * with row stride ldb (transB == false) or N x K (transB == true). C is
 * M x N with row stride ldc. When beta == 0, C is only written (it may hold
 * NaN or garbage). K == 0 gives C = beta * C.
 *
 * The work is split over `pool` (may be NULL). Do not pass a pool from
 * inside one of its own parallel_for callbacks (pass NULL there). */
#ifndef KILN_GEMM_H
#define KILN_GEMM_H

#include "core/core.h"

KILN_PRIVATE kiln_status kiln__sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                                     float alpha, const float *A, int64_t lda, const float *B,
                                     int64_t ldb, float beta, float *C, int64_t ldc,
                                     kiln_pool *pool);

/* Name of the micro-kernel kiln__sgemm uses on this machine ("avx2-fma 6x16",
 * "generic 6x16", ...), for descriptions and benchmarks. */
KILN_PRIVATE const char *kiln__sgemm_kernel_name(void);

#endif
