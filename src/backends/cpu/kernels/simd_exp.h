/* simd_exp.h -- the shared core of kiln's AVX-512 exp: for x already
 * clamped to the float range, n = round(x / ln 2) and the degree-6
 * polynomial p(r) ~ exp(r) of the remainder r = x - n ln 2 (ln 2 split in
 * two for accuracy); exp(x) = p * 2^n, which each caller scales as it needs
 * (vscalefps, or two exponent factors where n may reach 128). Include only
 * from x86-64 code compiled with GCC/Clang. */
#ifndef KILN_SIMD_EXP_H
#define KILN_SIMD_EXP_H

#include <immintrin.h>

__attribute__((target("avx512f"), always_inline)) static inline __m512 kiln__exp512_poly(__m512 x, __m512 *n_out) {
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.4426950408889634f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    *n_out = n;
    return p;
}

#endif
