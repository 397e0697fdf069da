/* cuda_kernels.h -- the launchers of kiln's CUDA kernels (src/backends/cuda/k_*.cu).
 *
 * This header is the only thing the C side (cuda_*.c) and the CUDA side
 * (k_*.cu, compiled by nvcc) share. It uses plain C types, the public
 * kiln.h enums and the elementwise op codes (ops/elementwise_codes.h, plain
 * C too), so that no other internal kiln header has to be valid C++.
 * Every launcher enqueues work on `stream` and returns cudaGetLastError()
 * of the launch (cudaSuccess when there was nothing to do); the C side turns
 * a failure into KILN_ERR_DEVICE naming the node. Launchers never
 * synchronize and never allocate: scratch memory comes from the caller.
 *
 * Geometry structs are passed by value to the kernels (as __grid_constant__
 * parameters), so they must stay well under the 4 KB parameter limit. */
#ifndef KILN_CUDA_KERNELS_H
#define KILN_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kiln.h"
#include "ops/elementwise_codes.h"
#include "ops/fused_act_codes.h"
#include "ops/reduce_codes.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KCU_THREADS 256
/* Grid-stride kernels launch at most this many blocks. */
#define KCU_MAX_BLOCKS 8192
/* Whether a grid-stride loop over n items may count in signed 32 bits: its
 * index passes n by up to one grid's stride (KCU_THREADS * KCU_MAX_BLOCKS)
 * before the loop ends, and that step must not overflow (n < INT32_MAX
 * alone let an index of about 2^31 wrap negative and address memory before
 * the tensor). */
static inline int kcu_i32_loop(int64_t n) {
    return n >= 0 && n <= (int64_t)INT32_MAX - (int64_t)KCU_THREADS * KCU_MAX_BLOCKS;
}

/* CUDA's limits on a grid: gridDim.x up to 2^31 - 1 blocks, gridDim.y and
 * gridDim.z up to 65535 each. A launch past them fails with "invalid
 * configuration argument", so a launcher that puts a shape-sized count
 * (images, rows, heads) in y or z must cap it there and have the kernel
 * step over the rest (or put it in x). */
#define KCU_GRID_X_MAX ((int64_t)INT32_MAX)
#define KCU_GRID_YZ_MAX ((int64_t)65535)
static inline int kcu_grid_ok(int64_t gx, int64_t gy, int64_t gz) {
    return gx >= 1 && gx <= KCU_GRID_X_MAX && gy >= 1 && gy <= KCU_GRID_YZ_MAX && gz >= 1 && gz <= KCU_GRID_YZ_MAX;
}

/* ---- broadcasting elementwise geometry -------------------------------------
 * The output is dense with `n` elements; input k is read at the element
 * offset sum_d coord[d] * st[k][d], coord being the output coordinate in the
 * merged shape dims[0..rank). flat[k] says that no index arithmetic is
 * needed: KCU_FLAT_SAME (offset = output index) or KCU_FLAT_SCALAR (offset
 * 0); when every input is flat the kernel skips the coordinates entirely.
 * idx32: every offset fits in 32 bits (cheaper index arithmetic). */
#define KCU_EW_MAX_IN 3
enum { KCU_FLAT_NONE = 0, KCU_FLAT_SAME = 1, KCU_FLAT_SCALAR = 2 };
typedef struct kcu_bcast {
    int rank, nin;
    int all_flat, idx32;
    int flat[KCU_EW_MAX_IN];
    int pad_;
    int64_t n;
    int64_t dims[KILN_MAX_RANK];
    int64_t st[KCU_EW_MAX_IN][KILN_MAX_RANK];
} kcu_bcast;

/* Unary ops (float compute: f32, f16, bf16 in float; f64 in double): `op` is the
 * op's code, EW_U_ABS .. EW_U_SHRINK (ops/elementwise_codes.h). */
/* y[i] = op(x[i]), n elements, same dtype. Floating dtypes: every op;
 * int32/int64: ABS, NEG, SIGN, RELU only. */
cudaError_t kcu_unary(int op, kiln_dtype t, const void *x, void *y, int64_t n, float alpha,
                      float beta, float gamma, cudaStream_t stream);
/* Whether kcu_unary has a kernel for (op, dtype). */
int kcu_unary_has(int op, kiln_dtype t);

/* IsNaN / IsInf / Not (op: EW_U_ISNAN, EW_U_ISINF, EW_U_NOT): bool (uint8) output. */
cudaError_t kcu_predicate(int op, kiln_dtype t, const void *x, uint8_t *y, int64_t n,
                          int detect_pos, int detect_neg, cudaStream_t stream);

/* Binary ops with broadcasting: `op` is a row kind EW_B_ADD .. EW_B_POW
 * (ops/elementwise_codes.h, kiln__ew_binary_kind). Inputs share dtype `t`;
 * comparisons and logic write bool (uint8), the rest write `t`. */
cudaError_t kcu_binary(int op, kiln_dtype t, const kcu_bcast *g, void *y, const void *a,
                       const void *b, cudaStream_t stream);
int kcu_binary_has(int op, kiln_dtype t);
/* y[i] = y[i] / d (Mean): floating dtypes. */
cudaError_t kcu_div_scalar(kiln_dtype t, void *y, int64_t n, float d, cudaStream_t stream);

/* Where(cond, x, y) with broadcasting over three inputs; es: element size
 * (1, 2, 4, 8). in[0] of the geometry is the condition. */
cudaError_t kcu_where(size_t es, const kcu_bcast *g, void *out, const uint8_t *cond,
                      const void *x, const void *y, cudaStream_t stream);

/* Clip: bounds from device scalars (lo_dev/hi_dev, same dtype as x) when
 * non-NULL, else from host values (lo_f/hi_f for floating dtypes, lo_i/hi_i
 * for integers) when has_lo/has_hi. Floating dtypes and int8/uint8/int32/
 * int64. */
typedef struct kcu_clip_bounds {
    const void *lo_dev, *hi_dev;
    int has_lo, has_hi;
    double lo_f, hi_f;
    int64_t lo_i, hi_i;
} kcu_clip_bounds;
cudaError_t kcu_clip(kiln_dtype t, const void *x, void *y, int64_t n, const kcu_clip_bounds *b,
                     cudaStream_t stream);
int kcu_clip_has(kiln_dtype t);

/* Cast between any two of: f32 f64 f16 bf16 i8 i16 i32 i64 u8 u16 u32 u64 bool. */
cudaError_t kcu_cast(kiln_dtype from, kiln_dtype to, const void *x, void *y, int64_t n,
                     cudaStream_t stream);
int kcu_cast_has(kiln_dtype t);

/* ---- data movement ----------------------------------------------------------
 * dst[sum i_k*dst_st[k]] = src[sum i_k*src_st[k]] for every index i of dims
 * (element strides; source strides may be zero or negative). Dims merged
 * and size-1 dims dropped by the caller (kiln__cuda_copy_plan). */
#define KCU_COPY_MAX_RANK 16
typedef struct kcu_copy {
    int rank, idx32;
    int dst_dense, pad_; /* dst_st are the dense row-major strides of dims */
    int64_t n;
    int64_t dims[KCU_COPY_MAX_RANK];
    int64_t dst_st[KCU_COPY_MAX_RANK];
    int64_t src_st[KCU_COPY_MAX_RANK];
} kcu_copy;
cudaError_t kcu_strided_copy(size_t es, const kcu_copy *c, void *dst, const void *src,
                             cudaStream_t stream);
/* Batched 2-D transpose: for b in [0, batch), p in [0, P), q in [0, Q):
 * dst[b*P*Q + p*Q + q] = src[boff(b) + q*sq + p], boff from the batch dims
 * of `c` (c->rank dims, c->src_st strides, dst ignored). Tiled through
 * shared memory so reads and writes are both coalesced. */
cudaError_t kcu_transpose2d(size_t es, const kcu_copy *batch, int64_t P, int64_t Q, int64_t sq,
                            void *dst, const void *src, cudaStream_t stream);

/* Gather along an axis: x viewed as [outer, axis_dim, inner], indices (n_ind
 * of int32/int64, negative counts from the end), y as [outer, n_ind, inner].
 * An out-of-range index produces zeros and, with oob non-NULL (device
 * address, e.g. of mapped host memory), stores `tag` there, so that the
 * host can fail the run as the CPU kernel does. */
cudaError_t kcu_gather(size_t es, kiln_dtype idx_t, const void *x, const void *ind, void *y,
                       int64_t outer, int64_t axis_dim, int64_t n_ind, int64_t inner, int *oob,
                       int tag, cudaStream_t stream);

/* ---- normalization, softmax -------------------------------------------------- */

/* Softmax (kind 0) / LogSoftmax (kind 1) over `n` elements with stride
 * `inner`, for outer*inner rows. Floating dtypes; fp32 arithmetic (double
 * for f64). */
cudaError_t kcu_softmax(int kind, kiln_dtype t, const void *x, void *y, int64_t outer, int64_t n,
                        int64_t inner, cudaStream_t stream);

/* LayerNormalization over rows of D contiguous elements. scale/bias hold D
 * elements (or 1 when *_scalar), dtype t; bias may be NULL. mean/inv_std
 * (dtype stat_t: f32/f64/f16/bf16, one per row) may be NULL. Statistics in
 * fp32 (f64 for f64 input), two-pass. */
cudaError_t kcu_layernorm(kiln_dtype t, const void *x, const void *scale, int scale_scalar,
                          const void *bias, int bias_scalar, void *y, kiln_dtype stat_t,
                          void *mean, void *inv_std, int64_t rows, int64_t D, float eps,
                          cudaStream_t stream);
/* RMSNormalization over rows of D contiguous elements: x / sqrt(mean(x^2) +
 * eps) * scale (D elements, or 1 when scale_scalar), all of dtype t; fp32
 * statistics (f64 for f64), one reduction per row. */
cudaError_t kcu_rmsnorm(kiln_dtype t, const void *x, const void *scale, int scale_scalar, void *y, int64_t rows,
                        int64_t D, float eps, cudaStream_t stream);
/* kiln.AddLayerNorm: LayerNormalization of x + r (rounded to t, written to
 * sum unless NULL) over rows of D; r holds r_rows rows (rows a multiple of
 * it; row i adds r's row i % r_rows). f32/f16/bf16; no statistics outputs. */
cudaError_t kcu_add_layernorm(kiln_dtype t, const void *x, const void *r, int64_t r_rows, void *sum,
                              const void *scale, int scale_scalar, const void *bias, int bias_scalar, void *y,
                              int64_t rows, int64_t D, float eps, cudaStream_t stream);

/* BatchNormalization (inference): y = x * mul[c] + add[c] with
 * mul = scale / sqrt(var + eps), add = bias - mean * mul computed in double
 * from parameters of dtype pt into `coef` (device scratch of 2*np floats;
 * np = C, or C*plane when per_elem). x/y: [N, C, plane] of dtype t. */
cudaError_t kcu_batchnorm(kiln_dtype t, const void *x, void *y, kiln_dtype pt,
                          const void *scale, const void *bias, const void *mean, const void *var,
                          float *coef, int64_t N, int64_t C, int64_t plane, int per_elem,
                          float eps, cudaStream_t stream);

/* ---- reductions ----------------------------------------------------------------
 * Output element o (dense, out_n of them) reduces R input elements. Input
 * offsets: kept part from o's coordinates in kdims (strides kst), reduced
 * part from r's coordinates in rdims (strides rst). */
/* kind: the op's code (RK_*, ops/reduce_codes.h) */
typedef struct kcu_reduce {
    int krank, rrank;
    int64_t out_n, R;
    int64_t kdims[KILN_MAX_RANK], kst[KILN_MAX_RANK];
    int64_t rdims[KILN_MAX_RANK], rst[KILN_MAX_RANK];
} kcu_reduce;
/* Floating dtypes (fp32 accumulation; f64 in double). */
cudaError_t kcu_reduce_run(int kind, kiln_dtype t, const kcu_reduce *g, const void *x, void *y,
                           cudaStream_t stream);

/* ---- pooling, convolution helpers ---------------------------------------------- */

#define KCU_MAX_SP 3
typedef struct kcu_pool {
    int ns, kind;            /* kind: 0 max, 1 average */
    int count_include_pad, pad_;
    int64_t planes;          /* N * C */
    int64_t in_sz, out_sz, out_n;
    int64_t in[KCU_MAX_SP], out[KCU_MAX_SP], k[KCU_MAX_SP], s[KCU_MAX_SP], d[KCU_MAX_SP];
    int64_t pb[KCU_MAX_SP], pe[KCU_MAX_SP];
} kcu_pool;
/* MaxPool / AveragePool on [planes, spatial...]; ind (int64, may be NULL):
 * MaxPool indices into the flattened input (row-major, storage_order 0). */
cudaError_t kcu_pool_run(kiln_dtype t, const kcu_pool *g, const void *x, void *y, int64_t *ind,
                         cudaStream_t stream);

/* Channels-last (NHWC) 2-D pooling: x [N, H, W, C] -> y [N, Ho, Wo, C];
 * kind 0 max, 1 average (the same rules as kcu_pool: a window's first
 * valid value starts the max, NaN never replaces it; an average divides by
 * the valid taps, or with count_include_pad by the taps inside the padded
 * input). 16-byte loads where C and the pointers allow. */
typedef struct kcu_pool_nhwc {
    int kind, count_include_pad;
    int64_t N, C, H, W, Ho, Wo;
    int64_t kh, kw, sh, sw, dh, dw;
    int64_t ph, pw, peh, pew;  /* begin and end pads */
} kcu_pool_nhwc;
cudaError_t kcu_pool_nhwc_run(kiln_dtype t, const kcu_pool_nhwc *g, const void *x, void *y,
                              cudaStream_t stream);
/* GlobalAveragePool of an NHWC x [N, HW, C] into y [N, C] (fp32 sums).
 * Blocks of 256 threads take 32 vectors of channels (fewer where C is
 * smaller) of one image; a plane too large for the N x (channel blocks)
 * blocks alone (batch 1; EfficientNet's SE blocks: 112 x 112 positions,
 * 32-96 channels) is split in S = kcu_gap_nhwc_splits(N, HW, C) parts:
 *   - S <= KCU_GAP_CLUSTER and `clusters` (the device has thread-block
 *     clusters: compute capability 9 and above): the S blocks of a channel
 *     block form one cluster and add up their sums through distributed
 *     shared memory, one launch, `part` unused (kcu_gap_nhwc_cluster);
 *   - else their fp32 sums go to `part` (S x N x C floats, device; may be
 *     NULL with one split), then a second kernel adds them. */
cudaError_t kcu_gap_nhwc(kiln_dtype t, int64_t N, int64_t HW, int64_t C, const void *x, void *y, float *part,
                         int clusters, cudaStream_t stream);
/* the largest portable cluster (8 blocks) */
#define KCU_GAP_CLUSTER 8
/* Enough blocks to give each of an H100/H200's 132 multiprocessors two
 * (256), but no more splits than positions per thread row (each thread
 * reads at least one position); where that asks for more than one cluster
 * of splits, a plane of at most 64 positions per thread row keeps one
 * cluster (8 loads per thread at most: a 28 x 28 x 120 layer), and a larger
 * one takes at least 4 positions per thread and split. Up to a cluster,
 * the count is a power of two (the portable cluster shapes; the splits
 * then cover the plane with a last one that may be empty). */
static inline int64_t kcu_gap_nhwc_splits(int64_t N, int64_t HW, int64_t C) {
    int64_t cv = C / 8 > 0 ? C / 8 : 1, tx = cv < 32 ? cv : 32, ty = 256 / tx;
    int64_t blocks = N * ((cv + tx - 1) / tx), rows = (HW + ty - 1) / ty;
    int64_t s = (256 + blocks - 1) / blocks;
    if (s > rows) s = rows;
    if (s > KCU_GAP_CLUSTER) {
        int64_t most = (rows + 3) / 4;
        s = rows <= 8 * KCU_GAP_CLUSTER ? KCU_GAP_CLUSTER : s < most ? s : most;
        if (s < KCU_GAP_CLUSTER) s = KCU_GAP_CLUSTER;
    }
    if (s > 2 && s < KCU_GAP_CLUSTER) s = s > 4 ? 8 : 4; /* clusters of 2, 4 or 8 blocks (a last split may be empty) */
    return s > 1 ? s : 1;
}
/* whether S splits run as one cluster (no `part`, one launch) */
static inline int kcu_gap_nhwc_cluster(int64_t S, int clusters) {
    return clusters && S > 1 && S <= KCU_GAP_CLUSTER;
}
/* Space-to-depth of a stride-2 convolution's input (cuda_conv.c, XV_S2D):
 * x [N, C, H, W] (NCHW) -> y [N, Lh, Lw, Cp] (NHWC), y[n, l, m, c*4 + rh*2 + rw]
 * = x[n, c, 2l + rh - ph, 2m + rw - pw] (0 outside x), channels 4C..Cp-1 zero. */
cudaError_t kcu_s2d_nhwc(kiln_dtype t, int64_t N, int64_t C, int64_t H, int64_t W, int64_t ph, int64_t pw,
                         int64_t Lh, int64_t Lw, int64_t Cp, const void *x, void *y, cudaStream_t stream);
/* x [N, C, HW] (NCHW) -> y [N, HW, Cp] (NHWC), channels C..Cp-1 zero (Cp >= C). */
cudaError_t kcu_nchw_to_nhwc(kiln_dtype t, int64_t N, int64_t C, int64_t HW, int64_t Cp, const void *x,
                             void *y, cudaStream_t stream);

/* Convolution geometry (NC + up to 3 spatial dims), group G. */
typedef struct kcu_conv {
    int ns, pad_;
    int64_t N, C, M, G, Cg, Mg;
    int64_t in_sz, out_sz, k_sz;
    int64_t in[KCU_MAX_SP], out[KCU_MAX_SP], k[KCU_MAX_SP], s[KCU_MAX_SP], d[KCU_MAX_SP];
    int64_t pb[KCU_MAX_SP];
} kcu_conv;
/* im2col of image n, group g into col [Cg * k_sz, out_sz] (dtype t). */
cudaError_t kcu_im2col(kiln_dtype t, const kcu_conv *g, const void *x, int64_t n, int64_t grp,
                       void *col, cudaStream_t stream);
/* The patches of a 2-D convolution without padding or dilation as the
 * rows of a GEMM operand (cuda_conv.c, tactic KCU_CONV_TACTIC_PATCH):
 * col[(n * Ho + oh) * Wo + ow, j] (rows of Kp elements) holds x at (n, c,
 * oh * sh + i, ow * sw + k), with j = (c * kh + i) * kw + k where x is
 * NCHW (nhwc_in 0) and j = (i * kw + k) * C + c where x is NHWC; column
 * C * kh * kw is 1 where one_col (the bias column), the rest up to Kp 0. */
typedef struct kcu_patch {
    int64_t N, C, H, W, Ho, Wo, kh, kw, sh, sw, Kp;
    int32_t nhwc_in, one_col;
} kcu_patch;
cudaError_t kcu_patches(kiln_dtype t, const kcu_patch *p, const void *x, void *col, cudaStream_t stream);
/* Direct depthwise convolution (Cg == 1, Mg == 1... any Mg): y = conv(x, w)
 * (+ bias[m] when bias != NULL). Floating dtypes, fp32 accumulation. */
cudaError_t kcu_conv_direct(kiln_dtype t, const kcu_conv *g, const void *x, const void *w,
                            const void *bias, void *y, cudaStream_t stream);

/* Activations of fused layers: FusedConv's own codes (KILN_FC_ACT_*,
 * ops/fused_act_codes.h), and two more the epilogues take for FusedMatMul's
 * Gelu: */
enum {
    KCU_ACT_GELU_ERF = 100,  /* x/2 (1 + erf(x / sqrt 2)) */
    KCU_ACT_GELU_TANH = 101  /* x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
};
/* y[n, m, :] = act(x[n, m, :] + bias[m] + residual[n, m, :]) over [N, M,
 * plane]; bias and residual may be NULL; x may be y (k_fused.cu). A row
 * bias of a [rows, cols] matrix: N = rows, M = cols, plane = 1. */
cudaError_t kcu_bias_act(kiln_dtype t, const void *x, void *y, const void *bias,
                         const void *residual, int64_t N, int64_t M, int64_t plane, int act,
                         float alpha, float beta, cudaStream_t stream);
/* Y [N, M] = act(X [N, K] W [M, K]^T + bias[M] + R [N, M]) in one launch,
 * the epilogue inside (bias and R may be NULL; act a KILN_FC_ACT_* below
 * KILN_FC_ACT_COUNT): a FusedConv on [N, C, 1, 1] values (the squeeze-excite
 * blocks' 1x1 layers) by tactic KCU_CONV_TACTIC_GEMV (cuda_conv.c). A warp
 * per output channel, up to 4 images per warp, 16-byte loads where K and
 * the pointers allow; fp32 accumulation (fp64 for fp64) (k_fused.cu). */
cudaError_t kcu_conv_gemv(kiln_dtype t, int64_t N, int64_t K, int64_t M, const void *x, const void *w,
                          const void *bias, const void *r, void *y, int act, float alpha, float beta,
                          cudaStream_t stream);
/* kcu_conv_gemv's launch: *nb images per warp (4, 2 or 1 as N allows), a
 * grid of *gx blocks of 8 output channels by *gy groups of nb images; the
 * groups past KCU_GRID_YZ_MAX are stepped over by the kernel (block y takes
 * groups y, y + gy, ...: a batch of 4 x 65535 + 1 images fits). 0 where
 * the channels do not fit gridDim.x. */
static inline int kcu_conv_gemv_grid(int64_t N, int64_t M, int *nb, int64_t *gx, int64_t *gy) {
    *nb = N >= 4 ? 4 : N >= 2 ? 2 : 1;
    const int64_t groups = (N + *nb - 1) / *nb;
    *gx = (M + 7) / 8;
    *gy = groups < KCU_GRID_YZ_MAX ? groups : KCU_GRID_YZ_MAX;
    return *gx <= KCU_GRID_X_MAX;
}

/* kiln.SqueezeExcite in one launch (k_se.cu): y [N, C] = act2(W2 h + b2),
 * h [N, R] = act1(W1 p + b1), p [N, C] the mean of x [N, C, HW] (NCHW) or
 * [N, HW, C] (nhwc), p and h rounded to T as the layers storing them would
 * (fp32 sums; fp64 for fp64). One thread-block cluster of S blocks (1, 2, 4
 * or 8; S > 1 needs compute capability 9) per image, 256 threads each: block
 * k owns channel slice k (NHWC: it sums position slice k of every channel,
 * then, after a cluster sync, adds its channels' sums up over the cluster;
 * NCHW: it pools its channels) and keeps their means in shared memory;
 * after a cluster sync every block copies the whole pooled vector from the
 * others' shared memory (distributed shared memory), computes hidden slice
 * k (a warp per unit), the cluster syncs, every block copies the whole
 * hidden vector, the cluster syncs again (nothing is read remotely after
 * it), and block k writes output slice k. Needs C <= KCU_SE_MAX_C and R <= KCU_SE_MAX_R
 * (kcu_se_fits); b1, b2 may be NULL. */
#define KCU_SE_MAX_C 4096
#define KCU_SE_MAX_R 1024
typedef struct kcu_se_geom {
    int64_t N, C, R, HW;
    int32_t nhwc, act1, act2, pad_;
    float alpha1, beta1, alpha2, beta2;
} kcu_se_geom;
static inline int kcu_se_fits(int64_t C, int64_t R) {
    return C > 0 && R > 0 && C <= KCU_SE_MAX_C && R <= KCU_SE_MAX_R;
}
cudaError_t kcu_se(kiln_dtype t, const kcu_se_geom *g, int S, const void *x, const void *w1, const void *w2,
                   const void *b1, const void *b2, void *y, cudaStream_t stream);

/* Attention O = softmax(s) V per (batch, head) with s = scale Q K^T, then
 * the cond rule (cond == cond_fill_if: s = fill (mode 1) or s += fill (mode
 * 2)), then + mask + bias; nan_to_zero: NaN probabilities count as 0 (a row
 * whose every probability is NaN gives zeros). Online softmax in fp32.
 * Element strides per logical dim (b, h, s, d) of each operand; strides of
 * mask, cond (bytes) and bias per (b, h, query, key), 0 where broadcast.
 * fp16/bf16 with d-contiguous Q, V and O: a tensor-core kernel (k_attn.cu);
 * otherwise a thread per query row (k_fused.cu). */
#define KCU_ATTN_MAX_D 128
typedef struct kcu_attn {
    int64_t B, H, Sq, Sk, D, Dv;
    int64_t qs[4], ks[4], vs[4], os[4], ms[4], cs[4], bs[4];
    float scale, fill;
    int has_mask, has_cond, has_bias, cond_mode, cond_fill_if, nan_to_zero;
} kcu_attn;
cudaError_t kcu_attention(kiln_dtype t, const kcu_attn *g, const void *q, const void *k,
                          const void *v, const void *mask, const uint8_t *cond, const void *bias,
                          void *o, cudaStream_t stream);
/* kcu_attention's launch (the thread-per-row kernel): one block of
 * KCU_ATTN_ROWS query rows per (batch, head, chunk of rows), all in
 * gridDim.x (block = (b H + h) chunks + chunk), so that neither the batch
 * times heads nor the query chunks meet gridDim.y's 65535 (a sequence of
 * 65535 x 64 + 1 queries, a batch of 4096 x 16 heads); *chunks: the chunks
 * per (batch, head). 0 where the blocks do not fit gridDim.x. */
#define KCU_ATTN_ROWS 64
static inline int kcu_attention_grid(int64_t B, int64_t H, int64_t Sq, int64_t *chunks, int64_t *gx) {
    *chunks = (Sq + KCU_ATTN_ROWS - 1) / KCU_ATTN_ROWS;
    *gx = 0;
    if (B <= 0 || H <= 0 || *chunks <= 0) return 1;
    if (B > KCU_GRID_X_MAX / H || B * H > KCU_GRID_X_MAX / *chunks) return 0;
    *gx = B * H * *chunks;
    return 1;
}
/* The tensor-core kernel (k_attn.cu): cudaErrorNotSupported when it cannot
 * take g (dtype, head size, strides), so the caller runs the other one.
 * split: how to share out the work (k_attn_plan.h): -1 by the plan's rule,
 * 0 never over the keys, 1 always. */
cudaError_t kcu_attention_mma(kiln_dtype t, const kcu_attn *g, const void *q, const void *k,
                              const void *v, const void *mask, const uint8_t *cond,
                              const void *bias, void *o, int sm_count, int split,
                              cudaStream_t stream);

/* The tensor-core kernel with the masks staged in shared memory (k_attn.cu,
 * tactics kiln-attn-fa64 / kiln-attn-fa128): rows = 64 or 128 query rows
 * per CTA (4 or 8 warps). cudaErrorNotSupported when it cannot take g. */
cudaError_t kcu_attention_fa(kiln_dtype t, const kcu_attn *g, const void *q, const void *k,
                             const void *v, const void *mask, const uint8_t *cond, const void *bias,
                             void *o, int rows, cudaStream_t stream);

/* out[i] = (cond[i] != 0) == fill_if ? fill : 0 for n bools (a cond of
 * Attention as an additive mask, fp16/bf16 out: cuda_sdpa.c). */
cudaError_t kcu_attn_cond_add(kiln_dtype t, const uint8_t *cond, int64_t n, int fill_if, float fill, void *out,
                              cudaStream_t stream);

/* Simple tiled GEMM (fallback when cuBLASLt has no algorithm, and K == 0):
 * row-major, batched like kiln__cuda_gemm (cuda_internal.h): C_b = alpha *
 * op(A_b) op(B_b) + beta * C_b (C only written when beta == 0). Floating
 * dtypes, fp32 accumulation (fp64 for fp64). */
cudaError_t kcu_gemm_simple(kiln_dtype t, int ta, int tb, int64_t M, int64_t N, int64_t K,
                            int64_t batch, double alpha, const void *A, int64_t lda, int64_t sa,
                            const void *B, int64_t ldb, int64_t sb, double beta, void *C,
                            int64_t ldc, int64_t sc, cudaStream_t stream);

/* ---- misc ------------------------------------------------------------------------ */

/* Writes n (<= KILN_MAX_RANK) int64 values passed by value (Shape, Size:
 * nothing read from host memory, so graph capture keeps them). */
typedef struct kcu_i64s {
    int64_t v[KILN_MAX_RANK];
} kcu_i64s;
cudaError_t kcu_write_i64(int64_t *dst, int n, const kcu_i64s *vals, cudaStream_t stream);
/* Fills n elements of size es at dst with the element at host address val. */
cudaError_t kcu_fill(size_t es, void *dst, int64_t n, const void *val, cudaStream_t stream);
/* Checks that the kernels of this build can run on the current device:
 * cudaSuccess, or the error (e.g. cudaErrorNoKernelImageForDevice). */
cudaError_t kcu_probe(void);

#ifdef __cplusplus
}
#endif

#endif
