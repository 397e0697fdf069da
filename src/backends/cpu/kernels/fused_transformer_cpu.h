/* fused_transformer_cpu.h -- the CPU backend's kernels of kiln.FusedMatMul
 * and kiln.Attention (fused_transformer_cpu.c; the ops are
 * src/ops/fused_transformer.h): their tactics, the AVX-512 and oneDNN
 * kernels behind them, and the functions their rows of the CPU table name. */
#ifndef KILN_FUSED_TRANSFORMER_CPU_H
#define KILN_FUSED_TRANSFORMER_CPU_H

#include "backends/cpu/kernels/fused_transformer_math.h"
#include "ops/fused_transformer.h"

/* CPU tactics of FusedMatMul (permanent). 0 picks the best available at run
 * time (oneDNN when built with it, else the AVX-512 kernel on CPUs that have
 * AVX-512F, else kiln__sgemm). */
enum {
    KILN_FMM_TACTIC_AUTO = 0,
    KILN_FMM_TACTIC_SGEMM = 1,  /* kiln__sgemm (AVX2/generic) + epilogue pass */
    KILN_FMM_TACTIC_DNNL = 2,   /* oneDNN matmul with fused bias/activation */
    KILN_FMM_TACTIC_AVX512 = 3, /* own AVX-512 kernel, prepacked weights, fused epilogue */
};

/* CPU tactics of Attention (permanent). */
enum {
    KILN_ATTN_TACTIC_AUTO = 0,
    KILN_ATTN_TACTIC_SGEMM = 1, /* per (batch, head, row block): kiln__sgemm, softmax, kiln__sgemm */
    KILN_ATTN_TACTIC_AVX512 = 2, /* per (batch, head, row block): AVX-512 register tiles */
};

/* Own AVX-512 matrix product (gemm_avx512.c): B packed once into 32-column
 * panels (kiln__sgemm512_packed_floats floats, 64-byte aligned), then
 * C[M, N] = act(A[M, K] B + bias + res) with A, C and res (may be NULL)
 * dense row-major. */
KILN_PRIVATE bool kiln__sgemm512_available(void);
KILN_PRIVATE size_t kiln__sgemm512_packed_floats(int64_t K, int64_t N);
KILN_PRIVATE void kiln__sgemm512_pack(const float *B, bool trans_b, int64_t K, int64_t N, float *Bp);
KILN_PRIVATE void kiln__sgemm512_run(const float *A, int64_t M, int64_t K, int64_t N, const float *Bp,
                                     const float *bias, const float *res, int act, float *C, kiln_pool *pool);

/* AVX-512 attention block (fused_transformer_avx512.c): `rows` query rows of
 * one (batch, head). Q rows at stride ldq; K as [Sk, D] rows at stride ldk,
 * or as [D, Sk] rows (k_dxs); V [Sk, Dv] rows at stride ldv; O rows at
 * stride ldo. mask: NULL or the first row's mask, rows mrow apart, columns
 * mcol apart. ws: kiln__attn_avx512_ws_floats(rows, Sk, D) floats. */
KILN_PRIVATE bool kiln__attn_avx512_available(void);
/* The same block with bf16 products (vdpbf16ps) and float32 accumulation and
 * softmax, for bf16 engines on CPUs with AVX512-BF16; ws:
 * kiln__attn_bf16_ws_floats(rows, Sk, D, Dv) floats. */
KILN_PRIVATE bool kiln__attn_bf16_available(void);
KILN_PRIVATE size_t kiln__attn_bf16_ws_floats(int64_t rows, int64_t Sk, int64_t D, int64_t Dv);
KILN_PRIVATE void kiln__attn_bf16_block(const float *Q, int64_t ldq, const float *K, int64_t ldk, bool k_dxs,
                                        const float *V, int64_t ldv, float *O, int64_t ldo, int64_t rows,
                                        int64_t Sk, int64_t D, int64_t Dv, float scale, const float *mask,
                                        int64_t mrow, int64_t mcol, float *ws);
KILN_PRIVATE size_t kiln__attn_avx512_ws_floats(int64_t rows, int64_t Sk, int64_t D);
KILN_PRIVATE void kiln__attn_avx512_block(const float *Q, int64_t ldq, const float *K, int64_t ldk, bool k_dxs,
                                          const float *V, int64_t ldv, float *O, int64_t ldo, int64_t rows,
                                          int64_t Sk, int64_t D, int64_t Dv, float scale, const float *mask,
                                          int64_t mrow, int64_t mcol, float *ws);

/* The rows of the CPU table (cpu_table.c, kernel.h). */
KILN_PRIVATE kiln_status kiln__cpu_fmm_run(const kiln_kernel_args *a);
KILN_PRIVATE size_t kiln__cpu_fmm_workspace(const kiln_infer_args *a);
KILN_PRIVATE int kiln__cpu_fmm_tactics(void *state, const kiln_infer_args *a, int32_t *ids, int cap);
KILN_PRIVATE const char *kiln__cpu_fmm_tactic_name(int32_t id);
KILN_PRIVATE kiln_status kiln__cpu_attn_run(const kiln_kernel_args *a);
KILN_PRIVATE size_t kiln__cpu_attn_workspace(const kiln_infer_args *a);
KILN_PRIVATE int kiln__cpu_attn_tactics(void *state, const kiln_infer_args *a, int32_t *ids, int cap);
KILN_PRIVATE const char *kiln__cpu_attn_tactic_name(int32_t id);

#endif
