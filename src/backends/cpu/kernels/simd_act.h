/* simd_act.h -- NaN-keeping clamps of 16-float AVX-512 vectors for the
 * activations of fused layers (ReLU, Clip, HardSigmoid).
 *
 * Why the operand order matters: VMAXPS/VMINPS compute a > b ? a : b
 * (a < b ? a : b) and so return their SECOND operand when either is NaN.
 * _mm512_max_ps(x, 0) turns a NaN x into 0: a silent, plausible-looking
 * result where ONNX (Relu = max(0, x) with numpy's NaN rule), PyTorch
 * (torch.relu(nan) = nan, torch.clamp(nan) = nan) and kiln's reference
 * kernels (x < 0 ? 0 : x) give NaN. Each helper below puts the constant
 * first and x second, so a NaN x comes back as itself, at the same cost.
 * (GCC and Clang keep the order: without -ffinite-math-only these
 * intrinsics are not commutative.) +-inf are ordinary values here.
 * Include only from x86-64 code compiled with GCC/Clang. */
#ifndef KILN_SIMD_ACT_H
#define KILN_SIMD_ACT_H

#include <immintrin.h>

#define KILN_SIMD_ACT_FN static inline __attribute__((target("avx512f"), always_inline))

/* max(lo, x), NaN x kept */
KILN_SIMD_ACT_FN __m512 kiln__max_keep_nan512(__m512 lo, __m512 x) { return _mm512_max_ps(lo, x); }

/* min(hi, x), NaN x kept */
KILN_SIMD_ACT_FN __m512 kiln__min_keep_nan512(__m512 hi, __m512 x) { return _mm512_min_ps(hi, x); }

/* ReLU: max(0, x), NaN kept */
KILN_SIMD_ACT_FN __m512 kiln__relu512(__m512 x) { return kiln__max_keep_nan512(_mm512_setzero_ps(), x); }

/* Clip: min(hi, max(lo, x)), NaN kept */
KILN_SIMD_ACT_FN __m512 kiln__clip512(__m512 x, __m512 lo, __m512 hi) {
    return kiln__min_keep_nan512(hi, kiln__max_keep_nan512(lo, x));
}

/* HardSigmoid: min(1, max(0, alpha x + beta)), NaN kept */
KILN_SIMD_ACT_FN __m512 kiln__hard_sigmoid512(__m512 x, __m512 alpha, __m512 beta) {
    return kiln__clip512(_mm512_add_ps(_mm512_mul_ps(x, alpha), beta), _mm512_setzero_ps(), _mm512_set1_ps(1.0f));
}

#undef KILN_SIMD_ACT_FN

#endif
