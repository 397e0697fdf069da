/* cuda_seq.h -- declarations of the CUDA kernels of the "seq" family
 * (cuda_ops_seq.c, k_seq.cu): KCU_DECLARE lines and the kcu_* launchers.
 * Ops of this family: LSTM GRU RNN Einsum QuantizeLinear DequantizeLinear DynamicQuantizeLinear MatMulInteger ConvInteger QLinearMatMul QLinearConv.
 * Included by cuda_internal.h (C) and by k_seq.cu (nvcc): the launcher part
 * uses plain C types and kiln.h only, like cuda_kernels.h. */
#ifndef KILN_CUDA_SEQ_H
#define KILN_CUDA_SEQ_H

#include "cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- RNN, GRU, LSTM (one direction pair per call, float32) ---------------------
 * State and scratch live on the device; the host loops over the steps:
 *   kcu_rnn_init            h, c <- initial_h / initial_c (or 0)
 *   per step s: GEMM hr = h * R^T (cuBLASLt, both directions batched),
 *     GRU without linear_before_reset: kcu_rnn_gru_reset (tmp = r (.) h)
 *     and GEMM hr[:, 2H:3H] = tmp * Rh^T,
 *     kcu_rnn_step          gates; h, c updated; Y written
 *   kcu_rnn_final           Y_h, Y_c <- h, c
 * Time index of (direction d, batch b) at step s: s, or len[b]-1-s for the
 * reverse direction (d == 1 or direction reverse); steps outside
 * [0, len[b]) leave the state alone. len = sequence_lens clamped to [0, S]. */
typedef struct kcu_rnn {
    int32_t kind;          /* kiln_rnn_kind */
    int32_t direction;     /* kiln_rnn_dir */
    int32_t layout;        /* 0: [S, B, ...]; 1: [B, S, ...] */
    int32_t lbr;           /* GRU linear_before_reset */
    int32_t input_forget;  /* LSTM */
    int32_t has_clip;
    float clip;
    int32_t act[6];        /* per direction: f, g, h (kiln_rnn_act) */
    int32_t lens_i64;      /* lens is int64 (else int32) */
    int64_t S, B, H, D, G; /* steps, batch, hidden, directions, gates */
    const float *xw;       /* [D, S*B, G*H] X * W^T, rows in X's memory order */
    float *hr;             /* [D, B, G*H] this step's h * R^T */
    const float *bias;     /* [D, 2*G*H] (Wb, Rb) or NULL */
    const float *P;        /* [D, 3*H] peepholes or NULL */
    const void *lens;      /* [B] or NULL (every sequence has S steps) */
    const float *h0, *c0;  /* initial state in the layout of Y_h, or NULL */
    float *h, *c;          /* [D, B, H] state */
    float *tmp;            /* [D, B, H] GRU: r (.) h */
    float *y, *yh, *yc;    /* outputs or NULL */
} kcu_rnn;
cudaError_t kcu_rnn_init(const kcu_rnn *p, cudaStream_t stream);
cudaError_t kcu_rnn_gru_reset(const kcu_rnn *p, int64_t step, cudaStream_t stream);
cudaError_t kcu_rnn_step(const kcu_rnn *p, int64_t step, cudaStream_t stream);
cudaError_t kcu_rnn_final(const kcu_rnn *p, cudaStream_t stream);

/* ---- QuantizeLinear / DequantizeLinear ------------------------------------------
 * Element i uses channel c = (i / inner) % C of scale (float32) and zp
 * (NULL: 0). dq: y = float(x - zp) * scale with x int8/uint8/int32 (zp of
 * x's dtype). Else: y = saturate(rint(x / scale) + zp) with x float32 or
 * int32, y int8/uint8 (zp of y's dtype; NaN -> the low end). */
cudaError_t kcu_qdq(int dq, kiln_dtype xt, kiln_dtype yt, const void *x, const float *scale,
                    const void *zp, void *y, int64_t n, int64_t C, int64_t inner,
                    cudaStream_t stream);

/* ---- DynamicQuantizeLinear -------------------------------------------------------
 * x float32 -> y uint8; the range [min(x), max(x)] widened to include 0 (NaN
 * skipped): per-block partial ranges, then one block for scale and zero
 * point, then one pass. params: KCU_DQ_SCRATCH floats of device scratch
 * (scale, zero point, partials). yscale (float) and yzp (uint8) may be NULL. */
#define KCU_DQ_BLOCKS 256
#define KCU_DQ_SCRATCH (2 + 2 * KCU_DQ_BLOCKS)
cudaError_t kcu_dyn_quant(const float *x, int64_t n, uint8_t *y, float *yscale, uint8_t *yzp,
                          float *params, cudaStream_t stream);

/* ---- MatMulInteger / QLinearMatMul -------------------------------------------------
 * For each batch entry b (numpy broadcast over bdims; element offsets of A
 * and B from astr/bstr) and i < M, j < N:
 *   acc = sum_k (A[i,k] - az[i]) * (B[k,j] - bz[j])      (64-bit)
 * az/bz: NULL (0), 1 value, or M / N values (naz, nbz), of A's / B's dtype.
 * MatMulInteger (qlinear 0): Y int32 = (int32)acc. QLinearMatMul: Y =
 * saturate(rint(acc * (double)(float)(as[i] * bs[j] / ys)) + yz), with
 * as/bs 1 or M / N float32 values, ys and yz one value, Y of yt. */
typedef struct kcu_mmi {
    int32_t qlinear;
    kiln_dtype at, bt, yt;
    int32_t nbr;
    int64_t M, N, K, nbatch;
    int64_t bdims[KILN_MAX_RANK], astr[KILN_MAX_RANK], bstr[KILN_MAX_RANK];
    const void *A, *B, *az, *bz;
    int64_t naz, nbz;
    const float *as, *bs, *ys;
    int64_t nas, nbs;
    const void *yz;
    void *Y;
} kcu_mmi;
cudaError_t kcu_mmi_run(const kcu_mmi *p, cudaStream_t stream);

/* ---- ConvInteger / QLinearConv ----------------------------------------------------
 * Direct convolution (1-3 spatial dims, groups), one thread per output:
 *   acc = sum_{c, k} (x - xz[0]) * (w - wz[m])                 (64-bit)
 * ConvInteger (qlinear 0): y int32 = (int32)acc. QLinearConv: v = acc +
 * bias[m] (int32, may be NULL), y = saturate(rint(v * (double)(float)(xs[0]
 * * ws[m] / ys[0])) + yz[0]). wz and ws: 1 or M values (nwz, nws); xz, wz
 * NULL: 0. x, w, zero points int8/uint8 of their own dtypes. */
typedef struct kcu_qconv {
    kcu_conv g;
    int32_t qlinear;
    kiln_dtype xt, wt, yt;
    const void *x, *w, *xz, *wz, *yz;
    int64_t nwz, nws;
    const int32_t *bias;
    const float *xs, *ws, *ys;
    void *y;
} kcu_qconv;
cudaError_t kcu_qconv_run(const kcu_qconv *p, cudaStream_t stream);

/* ---- Einsum ---------------------------------------------------------------------------
 * The loops of kiln_einsum_loops (ops/seq_attrs.h) for at most KCU_ES_OPS
 * operands and KCU_ES_SUM summed labels: one thread per output element
 * (n of them) sums n_sum_total products. Accumulation in double for
 * floating types, in wrapping 64-bit integers for integer types, as the
 * CPU kernel. All operands and y have dtype t. */
#define KCU_ES_OPS 4
#define KCU_ES_SUM 8
typedef struct kcu_einsum {
    int32_t n_ops, n_out, n_sum, pad_;
    int64_t n, n_sum_total;
    int64_t out_size[KILN_MAX_RANK], sum_size[KCU_ES_SUM];
    int64_t out_str[KCU_ES_OPS][KILN_MAX_RANK], sum_str[KCU_ES_OPS][KCU_ES_SUM];
    const void *in[KCU_ES_OPS];
} kcu_einsum;
cudaError_t kcu_einsum_run(kiln_dtype t, const kcu_einsum *p, void *y, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#ifndef __CUDACC__
#include "ops/seq_attrs.h"

/* cuda_ops_seq.c */
KCU_DECLARE(rnn)
KCU_DECLARE(qdq)
KCU_DECLARE(dyn_quant)
KCU_DECLARE(mmi)
KCU_DECLARE(qconv)
KCU_DECLARE(einsum)
#endif

#endif
