/* k_misc.h -- geometry structs and launchers of the "misc" family of CUDA
 * kernels (k_misc.cu; host side in cuda_ops_misc.c): random numbers,
 * windows, DFT/STFT, MelWeightMatrix, Det, the two losses.
 *
 * Plain C (C11 and C++17 both compile it), like cuda_kernels.h. Every
 * launcher enqueues on `stream`, returns cudaGetLastError() of its launches
 * (cudaSuccess when there is nothing to do), never synchronizes and never
 * allocates: scratch comes from the caller. Floating math is done in
 * double, like the CPU kernels, and rounded once into the output dtype. */
#ifndef KILN_K_MISC_H
#define KILN_K_MISC_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the misc kernels can store into dtype t (the store of double
 * values of kiln__store_f64: f32 f64 f16 bf16, the integers, bool). */
int kcu_misc_store_has(kiln_dtype t);

/* ---- random numbers ------------------------------------------------------------
 * Element i's value is a function of (key, i) only: splitmix64 of
 * key + (i + 1) * golden gamma (two draws 2i, 2i + 1 for Box-Muller), so
 * the kernel is order-free. key = seed, xor a hash of *ctr when ctr is not
 * NULL (device counter of a node without a seed: every launch also adds 1
 * to it, so replays of a CUDA Graph draw new values).
 * kind: KCU_RND_NORMAL (a + b * N(0, 1)), KCU_RND_UNIFORM (a + (b - a) *
 * U[0, 1)), KCU_RND_BERNOULLI (1 where U[0, 1) < p[i], else 0; p of
 * floating dtype pt). */
enum { KCU_RND_NORMAL = 0, KCU_RND_UNIFORM = 1, KCU_RND_BERNOULLI = 2 };
cudaError_t kcu_random(int kind, kiln_dtype t, void *y, int64_t n, uint64_t seed,
                       uint64_t *ctr, double a, double b, kiln_dtype pt, const void *p,
                       cudaStream_t stream);
/* *ctr = v (first use of a node's counter) */
cudaError_t kcu_random_ctr_init(uint64_t *ctr, uint64_t v, cudaStream_t stream);

/* ---- windows: y[i], i < n, dtype t; code 0 Blackman, 1 Hamming, 2 Hann ---- */
cudaError_t kcu_window(int code, int periodic, kiln_dtype t, void *y, int64_t n,
                       cudaStream_t stream);

/* ---- DFT of lines ------------------------------------------------------------------
 * For every line (o < outer, i < inner) and bin k < n_out:
 *   y[o*out_so + i*out_si + k*out_sk + {0, 1}] =
 *     scale * sum_{j < n} w[j] * x_j * exp(sgn * 2 pi i j k / n)
 * with x_j the complex sample at x[o*in_so + i*in_si + j*in_sj] (real only
 * when comp == 1; zero for j >= nin), w the optional window (w[j], dtype t;
 * NULL: 1), sgn -1 (forward) or +1 (inverse, scale 1/n). Offsets are in
 * elements of dtype t. tw: scratch of 2 * n doubles (the twiddles). */
typedef struct kcu_dft_geo {
    int64_t n, nin, n_out;
    int64_t outer, inner;
    int64_t in_so, in_si, in_sj;
    int64_t out_so, out_si, out_sk;
    int32_t comp, inverse;
} kcu_dft_geo;
cudaError_t kcu_dft(kiln_dtype t, const kcu_dft_geo *g, const void *x, const void *w, void *y,
                    double *tw, cudaStream_t stream);

/* ---- MelWeightMatrix: y [nb, nmel] of dtype t, nb = dftl / 2 + 1; mel
 * point i is at frequency 700 * (10^((i * step + lm) / 2595) - 1) -------- */
cudaError_t kcu_mel(kiln_dtype t, void *y, int64_t nmel, int64_t dftl, int64_t sr, double lm,
                    double step, cudaStream_t stream);

/* ---- Det: y[b] = det(x[b]) of `batch` n x n matrices (LU with partial
 * pivoting in double, like the CPU kernel). ws: scratch of
 * kcu_det_scratch(batch, n) bytes (0: none needed) -------------------------------- */
size_t kcu_det_scratch(int64_t batch, int64_t n);
cudaError_t kcu_det(kiln_dtype t, const void *x, void *y, int64_t batch, int64_t n, void *ws,
                    cudaStream_t stream);

/* ---- NegativeLogLikelihoodLoss (sce 0) / SoftmaxCrossEntropyLoss (sce 1) --
 * x [N, C, D...] of float dtype t, target [N, D...] (int32 or int64, tt),
 * weight [C] (dtype t) or NULL. reduction 0 none (y [N, D...]), 1 sum, 2
 * mean (y scalar). log_prob (sce only, may be NULL): [N, C, D...] of dtype
 * t. A target outside [0, C) that is not ignored gives NaN (the CPU kernel
 * fails the run). ws: scratch of kcu_loss_scratch(N * D, reduction) bytes
 * (NULL when that is 0). */
typedef struct kcu_loss_geo {
    int64_t N, C, D;
    int32_t sce, reduction;
    int32_t has_ignore, pad_;
    int64_t ignore_index;
} kcu_loss_geo;
size_t kcu_loss_scratch(int64_t positions, int reduction);
cudaError_t kcu_loss(kiln_dtype t, kiln_dtype tt, const kcu_loss_geo *g, const void *x,
                     const void *target, const void *weight, void *y, void *log_prob, void *ws,
                     cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
