/* cuda_index.h -- declarations of the CUDA kernels of the "index" family
 * (cuda_ops_index.c, k_index.cu): KCU_DECLARE lines and the kcu_* launchers.
 * Ops on the GPU: ArgMax ArgMin TopK CumSum GatherElements GatherND Scatter
 * ScatterElements ScatterND OneHot Trilu Range EyeLike ConstantOfShape.
 * NonZero, Compress and Unique stay on the CPU (docs/cuda.md says why).
 * Included by cuda_internal.h (C) and by k_index.cu (nvcc): the launcher
 * part uses plain C types and kiln.h only, like cuda_kernels.h. */
#ifndef KILN_CUDA_INDEX_H
#define KILN_CUDA_INDEX_H

#include "cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Dtypes the typed index kernels take: f32 f64 f16 bf16 i8 i16 i32 i64 u8
 * u16 u32 u64 (and bool where a launcher says so). */
int kcu_index_numeric(kiln_dtype t);

/* ---- ArgMax / ArgMin -----------------------------------------------------------
 * x viewed as [outer, R, inner] (R >= 1); y (int64) [outer, inner]: the
 * position of the max (is_max) or min along R, the first one on ties (the
 * last with `last`). Same comparisons as the CPU kernel, in fp32 for
 * f16/bf16: a NaN is never taken, except a NaN at position 0 wins. */
cudaError_t kcu_argreduce(int is_max, int last, kiln_dtype t, const void *x, int64_t *y,
                          int64_t outer, int64_t R, int64_t inner, cudaStream_t stream);

/* ---- TopK ----------------------------------------------------------------------
 * x viewed as [outer, R, inner]; v (dtype t) and ix (int64, may be NULL) as
 * [outer, k, inner]: the k first elements of each row in the order of the
 * CPU kernel (largest: descending, NaN first; else ascending, NaN last;
 * equal values by lower index). Rows of up to KCU_TOPK_SHARED elements are
 * sorted in shared memory; longer rows need kcu_topk_scratch() bytes of
 * device scratch (bitonic sort in global memory). R < 2^31. */
#define KCU_TOPK_SHARED 2048
size_t kcu_topk_scratch(int64_t outer, int64_t R, int64_t inner);
cudaError_t kcu_topk(int largest, kiln_dtype t, const void *x, void *v, int64_t *ix,
                     int64_t outer, int64_t R, int64_t inner, int64_t k, void *scratch,
                     cudaStream_t stream);

/* ---- CumSum ----------------------------------------------------------------------
 * x, y viewed as [outer, len, inner]; a sequential sum per line in the CPU
 * kernel's accumulator (fp32 for f16/bf16/f32, f64, wrapping integers).
 * Integer lines with inner == 1 and len >= KCU_CUMSUM_LINE: one block per
 * line, segments scanned in parallel (exact: integer sums wrap). */
#define KCU_CUMSUM_LINE 2048
cudaError_t kcu_cumsum(kiln_dtype t, int exclusive, int reverse, const void *x, void *y,
                       int64_t outer, int64_t len, int64_t inner, cudaStream_t stream);

/* ---- GatherElements / ScatterElements ------------------------------------------
 * Element i of indices (dims idims, rank) addresses data at
 * sum_{d != axis} coord_d * xst[d] + v * xst[axis], v = indices[i]
 * (int32/int64; negative counts from axis_dim). Out-of-range v: gather
 * writes zero, scatter skips the element. */
typedef struct kcu_elems {
    int32_t rank, axis;
    int64_t n, axis_dim;
    int64_t idims[KILN_MAX_RANK];
    int64_t xst[KILN_MAX_RANK];
} kcu_elems;
cudaError_t kcu_gather_elements(size_t es, kiln_dtype it, const kcu_elems *g, const void *x,
                                const void *ind, void *y, cudaStream_t stream);

/* Reductions of the scatter ops (same numbers as RED_* in ops/tensor_internal.h;
 * cuda_ops_index.c asserts it). */
enum { KCU_RED_NONE = 0, KCU_RED_ADD = 1, KCU_RED_MUL = 2, KCU_RED_MAX = 3, KCU_RED_MIN = 4 };
/* Whether the scatter kernels take dtype t (reduction none: any 1/2/4/8-byte
 * dtype; the others: kcu_index_numeric dtypes and bool). */
int kcu_scatter_has(kiln_dtype t, int red);
/* y (already holding the data) [off(i)] = upd[i] (none) or y (red) upd[i]
 * (atomic read-modify-write). */
cudaError_t kcu_scatter_elements(kiln_dtype t, int red, kiln_dtype it, const kcu_elems *g,
                                 const void *ind, const void *upd, void *y, cudaStream_t stream);

/* ---- GatherND / ScatterND ---------------------------------------------------------
 * data [B..., D(m)..., S...], indices (int64) [B..., T..., m]: tuple u (of
 * batch u / T) addresses the slice at (u / T) * batch_stride + sum_j v_j *
 * dst[j] (v_j negative counts from ddim[j]) of `slice` elements. Gather:
 * y [u * slice + s]; out-of-range tuples write zeros. Scatter (B = 1):
 * update element u * slice + s; out-of-range tuples are skipped. */
typedef struct kcu_nd {
    int32_t m, pad_;
    int64_t B, T, slice, batch_stride;
    int64_t dst[KILN_MAX_RANK], ddim[KILN_MAX_RANK];
} kcu_nd;
cudaError_t kcu_gather_nd(size_t es, const kcu_nd *g, const void *x, const int64_t *ind, void *y,
                          cudaStream_t stream);
cudaError_t kcu_scatter_nd(kiln_dtype t, int red, const kcu_nd *g, const int64_t *ind,
                           const void *upd, void *y, cudaStream_t stream);

/* ---- OneHot -------------------------------------------------------------------------
 * y [outer, depth, inner] (es-byte elements) = vals[1] where indices[o,
 * i] (int32/int64, negative counts from depth) == d, else vals[0]; vals is
 * a device array of two elements. */
cudaError_t kcu_onehot(size_t es, kiln_dtype it, const void *ind, const void *vals, void *y,
                       int64_t outer, int64_t depth, int64_t inner, cudaStream_t stream);

/* ---- Trilu ------------------------------------------------------------------------------
 * nmat matrices R x C: keeps element (i, j) where j >= i + k (upper) or
 * j <= i + k (lower), else zero. k is read on the device from k_dev
 * (int32/int64 of dtype k_t) when k_dev is not NULL, else taken from k. */
cudaError_t kcu_trilu(size_t es, int upper, const void *x, void *y, int64_t nmat, int64_t R,
                      int64_t C, int64_t k, const void *k_dev, kiln_dtype k_t,
                      cudaStream_t stream);

/* ---- Range, EyeLike -----------------------------------------------------------------
 * Range: y[i] = start + i * delta, n elements of t (float32 in float;
 * other floating dtypes in double; integers in int64, truncated). */
cudaError_t kcu_range(kiln_dtype t, void *y, int64_t n, double start_f, double delta_f,
                      int64_t start_i, int64_t delta_i, cudaStream_t stream);
/* EyeLike: y [R, C] of es-byte elements: `one` (host bytes) where j == i + k, else 0. */
cudaError_t kcu_eyelike(size_t es, void *y, int64_t R, int64_t C, int64_t k, const void *one,
                        cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#ifndef __CUDACC__
#include "ops/index_attrs.h"

/* cuda_ops_index.c */
KCU_DECLARE(argreduce)
KCU_DECLARE(topk)
KCU_DECLARE(cumsum)
KCU_DECLARE(gather_elements)
KCU_DECLARE(gather_nd)
KCU_DECLARE(scatter_elements)
KCU_DECLARE(scatter_nd)
KCU_DECLARE(onehot)
KCU_DECLARE(trilu)
KCU_DECLARE(range)
KCU_DECLARE(eyelike)
KCU_DECLARE(const_of_shape)
#endif

#endif
