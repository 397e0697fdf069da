/* simd_mask.h -- the lane mask of a 16-float AVX-512 vector at the tail of
 * a row: the first `left` lanes (all 16 when left >= 16, none when
 * left <= 0). Include only from x86-64 code compiled with GCC/Clang. */
#ifndef KILN_SIMD_MASK_H
#define KILN_SIMD_MASK_H

#include <immintrin.h>
#include <stdint.h>

static inline __mmask16 kiln__mask16(int64_t left) {
    return left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1u) : (__mmask16)0;
}

#endif
