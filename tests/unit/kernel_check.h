/* kernel_check.h -- checks shared by the kernel tests that run one
 * computation on several paths and pools against a double-precision
 * reference (test_conv_wino.c, test_conv_pwdw.c, test_conv_direct.c). Include after test.h. */
#ifndef KILN_TEST_KERNEL_CHECK_H
#define KILN_TEST_KERNEL_CHECK_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/core.h"

/* A float in [lo, hi) from the generator state *rng (a 64-bit LCG: each
 * test draws the same numbers on every run). */
static inline float kc_frand(uint64_t *rng, float lo, float hi) {
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((*rng >> 40) & 0xffffff) / 16777216.0f;
}

/* The pools a kernel test runs every case on: none, 2 and 3 threads. */
static inline void kc_pools_create(kiln_pool *pools[3]) {
    pools[0] = NULL;
    CHECK_OK(kiln__pool_create(2, &pools[1]));
    CHECK_OK(kiln__pool_create(3, &pools[2]));
}

static inline void kc_pools_free(kiln_pool *pools[3]) {
    kiln__pool_free(pools[1]);
    kiln__pool_free(pools[2]);
}

/* max |y - ref| / (1 + maxref) over finite ref; a NaN in y where ref is
 * not NaN, or a value other than ref's where ref is NaN or infinite (NaN
 * and +-inf must come out where the reference has them), counts as an
 * infinite error. */
static inline double kc_error(const float *y, const float *ref, int64_t n, double maxref) {
    double err = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(ref[i]) || isinf(ref[i])) {
            if (isnan(ref[i]) ? !isnan(y[i]) : y[i] != ref[i]) err = INFINITY;
            continue;
        }
        double e = fabs((double)y[i] - ref[i]);
        if (!(e <= err)) err = isnan(e) ? INFINITY : e;
    }
    return err / (1.0 + maxref);
}

/* max |ref| over its finite values (the scale kc_error divides by). */
static inline double kc_maxref(const float *ref, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(ref[i])) m = fmax(m, fabs(ref[i]));
    return m;
}

/* About one value of v in eight made NaN, +inf or -inf (the special values
 * every activation must carry through as its reference does). */
static inline void kc_specials(uint64_t *rng, float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float u = kc_frand(rng, 0.0f, 8.0f);
        if (u < 1.0f) v[i] = u < 0.4f ? NAN : u < 0.7f ? INFINITY : -INFINITY;
    }
}

/* Every pool gives the same bits as no pool on the same path: pool 0's
 * output is kept in y0, the others are compared with it. */
static inline void kc_same_bits(int pool_index, float *y0, const float *y, int64_t n) {
    if (pool_index == 0)
        memcpy(y0, y, sizeof(float) * (size_t)n);
    else
        CHECK(memcmp(y0, y, sizeof(float) * (size_t)n) == 0);
}

#endif
