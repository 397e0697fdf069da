/* fused_transformer_math.c -- vectorized float32 helpers of the transformer
 * kernels: GELU (erf and tanh forms), ReLU, exp-and-sum, max, softmax rows.
 *
 * Each helper has an AVX-512F version, chosen at run time when the CPU has
 * AVX-512F (never otherwise: no SIGILL), and a portable C version using libm.
 * The AVX-512 exp is a degree-6 polynomial after range reduction by ln 2
 * (about 1 ulp); erf is Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7). */
#include "backends/cpu/kernels/fused_transformer_math.h"
#include "ops/fused_transformer.h"

#include <math.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define KILN_TF_X86 1
#include <immintrin.h>

#include "backends/cpu/kernels/simd_act.h"
#include "backends/cpu/kernels/simd_exp.h"
#else
#define KILN_TF_X86 0
#endif

static bool have_avx512(void) {
#if KILN_TF_X86
    return __builtin_cpu_supports("avx512f");
#else
    return false;
#endif
}

/* ---- portable versions --------------------------------------------------- */

static float gelu1(float x, int approx) {
    if (approx) {
        float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
        return 0.5f * x * (1.0f + tanhf(u));
    }
    return x * 0.5f * (1.0f + erff(x * 0.7071067811865476f));
}

static void gelu_c(float *x, int64_t n, int approx) {
    for (int64_t i = 0; i < n; i++) x[i] = gelu1(x[i], approx);
}

static float exp_sum_c(const float *x, float *y, int64_t n, float m) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        y[i] = expf(x[i] - m);
        s += y[i];
    }
    return s;
}

static float max_c(const float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

#if KILN_TF_X86
/* ---- AVX-512 versions ----------------------------------------------------- */
#define AVX512 __attribute__((target("avx512f")))

static AVX512 inline __m512 exp512(__m512 x) {
    /* below -87.3 the result is flushed to 0 (as expf underflows), so that -inf gives 0;
     * NaN gives NaN (the clamps keep it: simd_act.h) */
    __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_NLT_UQ);
    x = kiln__max_keep_nan512(_mm512_set1_ps(-87.33654f), x);
    x = kiln__min_keep_nan512(_mm512_set1_ps(88.37626f), x);
    __m512 n, p = kiln__exp512_poly(x, &n);
    /* 2^n, split in two factors so that n = 128 (x near 88.7) does not overflow the exponent */
    __m512i ni = _mm512_cvtps_epi32(n);
    __m512i h = _mm512_srai_epi32(ni, 1);
    __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(h, _mm512_set1_epi32(127)), 23));
    __m512 s2 = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(ni, h), _mm512_set1_epi32(127)), 23));
    return _mm512_maskz_mov_ps(keep, _mm512_mul_ps(_mm512_mul_ps(p, s1), s2));
}

static AVX512 inline __m512 erf512(__m512 x) {
    __m512 ax = _mm512_abs_ps(x);
    __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f),
                             _mm512_fmadd_ps(ax, _mm512_set1_ps(0.3275911f), _mm512_set1_ps(1.0f)));
    __m512 p = _mm512_set1_ps(1.061405429f);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
    p = _mm512_mul_ps(p, t);
    __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(ax, ax)));
    __m512 y = _mm512_fnmadd_ps(p, e, _mm512_set1_ps(1.0f));
    /* copy the sign of x */
    __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(y), sign));
}

static AVX512 inline __m512 tanh512(__m512 x) {
    /* tanh(x) = 1 - 2 / (exp(2x) + 1) */
    __m512 e = exp512(_mm512_add_ps(x, x));
    return _mm512_sub_ps(_mm512_set1_ps(1.0f),
                         _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
}

static AVX512 inline __m512 gelu512(__m512 x, int approx) {
    __m512 half_x = _mm512_mul_ps(x, _mm512_set1_ps(0.5f));
    __m512 g;
    if (approx) {
        __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
        __m512 u = _mm512_mul_ps(_mm512_fmadd_ps(x3, _mm512_set1_ps(0.044715f), x),
                                 _mm512_set1_ps(0.7978845608028654f));
        g = tanh512(u);
    } else {
        g = erf512(_mm512_mul_ps(x, _mm512_set1_ps(0.7071067811865476f)));
    }
    return _mm512_fmadd_ps(half_x, g, half_x);
}

static AVX512 void gelu_avx512(float *x, int64_t n, int approx) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, gelu512(_mm512_loadu_ps(x + i), approx));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(x + i, k, gelu512(_mm512_maskz_loadu_ps(k, x + i), approx));
    }
}

static AVX512 float exp_sum_avx512(const float *x, float *y, int64_t n, float m) {
    __m512 vm = _mm512_set1_ps(m), acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
        _mm512_storeu_ps(y + i, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm));
        _mm512_mask_storeu_ps(y + i, k, e);
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(k, e));
    }
    return _mm512_reduce_add_ps(acc);
}

static AVX512 float max_avx512(const float *x, int64_t n) {
    __m512 acc = _mm512_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_max_ps(acc, _mm512_loadu_ps(x + i));
    float m = _mm512_reduce_max_ps(acc);
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

static AVX512 void scale_avx512(float *x, int64_t n, float s) {
    __m512 vs = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), vs));
    for (; i < n; i++) x[i] *= s;
}
#endif

/* ---- dispatch ----------------------------------------------------------- */

void kiln__gelu_f32(float *x, int64_t n, int approx) {
#if KILN_TF_X86
    if (have_avx512()) {
        gelu_avx512(x, n, approx);
        return;
    }
#endif
    gelu_c(x, n, approx);
}

#if KILN_TF_X86
/* vcvtneps2bf16: round to nearest even like kiln__f32_to_bf16 (NaN stays NaN) */
__attribute__((target("avx512f,avx512bf16"))) static void f32_to_bf16_avx512(const float *x, uint16_t *y,
                                                                             int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
        _mm256_storeu_si256((__m256i *)(void *)(y + i), (__m256i)b);
    }
    for (; i < n; i++) y[i] = kiln__f32_to_bf16(x[i]);
}
#endif

void kiln__f32_to_bf16_row(const float *x, uint16_t *y, int64_t n) {
#if KILN_TF_X86
    if (have_avx512() && __builtin_cpu_supports("avx512bf16")) {
        f32_to_bf16_avx512(x, y, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) y[i] = kiln__f32_to_bf16(x[i]);
}

void kiln__fmm_epilogue(float *Y, int64_t ldy, int64_t rows, int64_t n, const float *bias, const float *res,
                        int64_t ldr, int act) {
    for (int64_t r = 0; r < rows; r++) {
        float *y = Y + r * ldy;
        if (bias)
            for (int64_t j = 0; j < n; j++) y[j] += bias[j];
        if (res)
            for (int64_t j = 0; j < n; j++) y[j] += res[r * ldr + j];
        if (act == KILN_FACT_RELU) kiln__relu_f32(y, n);
        else if (act == KILN_FACT_GELU_ERF) kiln__gelu_f32(y, n, 0);
        else if (act == KILN_FACT_GELU_TANH) kiln__gelu_f32(y, n, 1);
    }
}

void kiln__relu_f32(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = x[i] < 0.0f ? 0.0f : x[i]; /* NaN kept, as torch.relu */
}

float kiln__exp_shift_sum_f32(const float *x, float *y, int64_t n, float m) {
#if KILN_TF_X86
    if (have_avx512()) return exp_sum_avx512(x, y, n, m);
#endif
    return exp_sum_c(x, y, n, m);
}

float kiln__max_f32(const float *x, int64_t n) {
#if KILN_TF_X86
    if (have_avx512()) return max_avx512(x, n);
#endif
    return max_c(x, n);
}

void kiln__softmax_rows_f32(float *x, int64_t rows, int64_t n) {
    bool v = have_avx512();
    for (int64_t r = 0; r < rows; r++) {
        float *row = x + r * n;
        float m = kiln__max_f32(row, n);
        if (m == -INFINITY) m = 0.0f; /* a fully masked row: exp(-inf) = 0, sum 0 -> NaN like ONNX */
        float s = kiln__exp_shift_sum_f32(row, row, n, m);
        float inv = 1.0f / s;
#if KILN_TF_X86
        if (v) {
            scale_avx512(row, n, inv);
            continue;
        }
#endif
        (void)v;
        for (int64_t i = 0; i < n; i++) row[i] *= inv;
    }
}
