/* test_conv_wino.c -- the Winograd F(4x4, 3x3) and F(2x2, 3x3) convolutions
 * (src/backends/cpu/kernels/conv_wino.c) against a direct convolution with double accumulation: odd sizes and
 * channel counts, pads, NCHW and NHWC, bias, residual, activations, the
 * AVX-512F and the generic path, no pool and pools of 2 and 3 threads
 * (which must give bitwise the same result as no pool). */
#include <math.h>
#include <stdlib.h>

#include "test.h"
#include "kernel_check.h"

#include "backends/cpu/kernels/conv_wino.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
/* NaN and +-inf in the residual (wino_special_values) */
static bool g_specials;
static float frand(float lo, float hi) { return kc_frand(&rng, lo, hi); }

typedef struct wcase {
    int64_t N, H, W, C, M;
    int pt, pl, pb, pr;
} wcase;

/* Index of logical (n, c, h, w) in NCHW, NHWC (1) or nChw16c (KILN_WINO_C16). */
static int64_t at(int nhwc, int64_t C, int64_t H, int64_t W, int64_t n, int64_t c, int64_t h, int64_t w) {
    if (nhwc == KILN_WINO_C16) return (((n * (C / 16) + c / 16) * H + h) * W + w) * 16 + c % 16;
    return nhwc ? ((n * H + h) * W + w) * C + c : ((n * C + c) * H + h) * W + w;
}

static void reference(const wcase *k, const float *x, int x_nhwc, const float *Wt, const float *bias,
                      const float *r, int y_nhwc, int act, float alpha, float beta, float *y) {
    int64_t Ho = k->H + k->pt + k->pb - 2, Wo = k->W + k->pl + k->pr - 2;
    for (int64_t n = 0; n < k->N; n++)
        for (int64_t m = 0; m < k->M; m++)
            for (int64_t oy = 0; oy < Ho; oy++)
                for (int64_t ox = 0; ox < Wo; ox++) {
                    double s = bias ? bias[m] : 0.0;
                    for (int64_t c = 0; c < k->C; c++)
                        for (int i = 0; i < 3; i++)
                            for (int j = 0; j < 3; j++) {
                                int64_t iy = oy + i - k->pt, ix = ox + j - k->pl;
                                if (iy < 0 || iy >= k->H || ix < 0 || ix >= k->W) continue;
                                s += (double)Wt[((m * k->C + c) * 3 + i) * 3 + j] *
                                     x[at(x_nhwc, k->C, k->H, k->W, n, c, iy, ix)];
                            }
                    int64_t o = at(y_nhwc, k->M, Ho, Wo, n, m, oy, ox);
                    if (r) s += r[o];
                    y[o] = kiln__fc_act(act, alpha, beta, (float)s);
                }
}

/* Runs one case with output tile `tile` (4 or 2), every pool and path;
 * returns the worst error / scale. */
static double run_case(const wcase *k, int tile, int variant, kiln_pool **pools, int npools) {
    int64_t Ho = k->H + k->pt + k->pb - 2, Wo = k->W + k->pl + k->pr - 2;
    int64_t xn = k->N * k->C * k->H * k->W, yn = k->N * k->M * Ho * Wo, wn = k->M * k->C * 9;
    int x_nhwc = variant & 1, y_nhwc = (variant >> 1) & 1, has_r = (variant >> 2) & 1;
    if (variant & 64) x_nhwc = KILN_WINO_C16; /* bits 6, 7: nChw16c in, out */
    if (variant & 128) y_nhwc = KILN_WINO_C16;
    int has_b = ((variant >> 3) & 1) == 0;
    static const int acts[4] = {KILN_FC_ACT_NONE, KILN_FC_ACT_RELU, KILN_FC_ACT_CLIP, KILN_FC_ACT_SIGMOID};
    int act = acts[(variant >> 4) & 3];
    float alpha = -0.3f, beta = 0.4f;
    float *x = malloc(sizeof(float) * (size_t)xn), *Wt = malloc(sizeof(float) * (size_t)wn);
    float *b = malloc(sizeof(float) * (size_t)k->M), *r = malloc(sizeof(float) * (size_t)yn);
    float *ref = malloc(sizeof(float) * (size_t)yn), *y = malloc(sizeof(float) * (size_t)yn);
    float *y0 = malloc(sizeof(float) * (size_t)yn);
    float *u = malloc(sizeof(float) * kiln__wino_packed_floats(k->C, k->M, tile));
    float ws_scale = 1.0f / sqrtf((float)(9 * k->C));
    for (int64_t i = 0; i < xn; i++) x[i] = frand(-1.0f, 1.0f);
    for (int64_t i = 0; i < wn; i++) Wt[i] = frand(-ws_scale, ws_scale) * 1.7f;
    for (int64_t i = 0; i < k->M; i++) b[i] = frand(-0.5f, 0.5f);
    for (int64_t i = 0; i < yn; i++) r[i] = frand(-1.0f, 1.0f);
    if (g_specials) kc_specials(&rng, r, yn);
    reference(k, x, x_nhwc, Wt, has_b ? b : NULL, has_r ? r : NULL, y_nhwc, act, alpha, beta, ref);
    kiln__wino_pack(Wt, k->C, k->M, tile, u);
    double maxref = kc_maxref(ref, yn);
    double worst = 0.0;
    for (int gen = 0; gen < 2; gen++) {
        if (!gen && !kiln__wino_fast_available()) continue;
        for (int pi = 0; pi < npools; pi++) {
            int threads = kiln__pool_threads(pools[pi]);
            /* one case sized for fewer threads than the pool has */
            if (variant % 7 == 3 && threads > 1) threads = 1;
            size_t wsb =
                kiln__wino_workspace(k->N, k->H, k->W, k->C, k->M, k->pt, k->pl, k->pb, k->pr, tile, threads);
            void *ws = malloc(wsb);
            /* some cases write the output over the residual (as the plan
             * arranges when the layer reads the residual last) */
            bool alias = has_r && (variant + pi) % 2 == 1;
            for (int64_t i = 0; i < yn; i++) y[i] = alias ? r[i] : NAN;
            kiln_wino_args a = {.x = x, .u = u, .tile = tile, .bias = has_b ? b : NULL, .r = has_r ? (alias ? y : r) : NULL, .y = y,
                                .N = k->N, .H = k->H, .W = k->W, .C = k->C, .M = k->M,
                                .pt = k->pt, .pl = k->pl, .pb = k->pb, .pr = k->pr,
                                .x_nhwc = x_nhwc, .y_nhwc = y_nhwc, .act = act, .alpha = alpha, .beta = beta,
                                .ws = ws, .ws_bytes = wsb, .pool = pools[pi], .force_generic = gen};
            kiln__wino_run(&a);
            free(ws);
            double err = kc_error(y, ref, yn, maxref);
            if (err > worst) worst = err;
            if (!(err <= 5e-5)) {
                fprintf(stderr,
                        "  F(%dx%d) N%lld H%lld W%lld C%lld M%lld pads %d,%d,%d,%d variant %d %s threads %d: "
                        "err %g\n",
                        tile, tile, (long long)k->N, (long long)k->H, (long long)k->W, (long long)k->C,
                        (long long)k->M, k->pt, k->pl, k->pb, k->pr, variant, gen ? "generic" : "avx512",
                        kiln__pool_threads(pools[pi]), err);
                CHECK(err <= 5e-5);
            }
            kc_same_bits(pi, y0, y, yn);
        }
    }
    free(x), free(Wt), free(b), free(r), free(ref), free(y), free(y0), free(u);
    return worst;
}

static kiln_pool *g_pools[3];

TEST(wino_small_shapes) {
    static const wcase cases[] = {
        {1, 1, 1, 1, 1, 1, 1, 1, 1},   {1, 2, 5, 3, 2, 1, 1, 1, 1},   {2, 7, 7, 17, 33, 1, 1, 1, 1},
        {1, 13, 9, 33, 17, 1, 1, 1, 1}, {2, 13, 9, 3, 1, 0, 0, 0, 0},  {1, 7, 7, 16, 16, 2, 1, 0, 2},
        {2, 8, 8, 32, 48, 1, 1, 1, 1},  {1, 5, 11, 1, 3, 2, 2, 2, 2},  {1, 3, 3, 20, 40, 0, 0, 0, 0},
        {2, 9, 13, 48, 32, 2, 1, 0, 2}, {1, 16, 16, 64, 64, 1, 1, 1, 1}, {1, 1, 4, 5, 7, 2, 0, 1, 2},
    };
    double worst = 0.0;
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int tile = 4; tile >= 2; tile -= 2)
        for (int i = 0; i < n; i++)
            for (int v = 0; v < 4; v++) {
                /* layouts vary fastest; residual, bias and activation by case */
                int variant = v | (((i + v + tile) & 1) << 2) | (((i / 2 + v) & 1) << 3) | (((i + v) & 3) << 4);
                double e = run_case(&cases[i], tile, variant, g_pools, 3);
                if (e > worst) worst = e;
            }
    printf("  worst error / (1 + max|ref|): %.3g\n", worst);
}

/* Several blocks of tiles (threads take whole blocks), batch tiles, and
 * weights too large for whole thread ranges (each block's steps split). */
TEST(wino_blocks) {
    static const wcase cases[] = {
        {3, 28, 28, 64, 64, 1, 1, 1, 1},
        {2, 30, 26, 17, 80, 1, 1, 1, 1},
        {1, 14, 14, 160, 192, 1, 1, 1, 1},
    };
    double worst = 0.0;
    for (int tile = 4; tile >= 2; tile -= 2)
        for (int i = 0; i < 3; i++) {
            double e = run_case(&cases[i], tile, 3 | (i << 2) | (1 << 4), g_pools, 3);
            if (e > worst) worst = e;
            e = run_case(&cases[i], tile, 0 | (2 << 4), g_pools, 2);
            if (e > worst) worst = e;
        }
    printf("  worst error / (1 + max|ref|): %.3g\n", worst);
}

/* nChw16c input and/or output (channels multiples of 16) with each other
 * layout, residual in the output's layout, small and blocked shapes. */
TEST(wino_c16) {
    static const wcase cases[] = {
        {1, 7, 7, 16, 16, 2, 1, 0, 2}, {2, 8, 8, 32, 48, 1, 1, 1, 1}, {2, 9, 13, 48, 32, 2, 1, 0, 2},
        {3, 28, 28, 64, 64, 1, 1, 1, 1}, {1, 14, 14, 160, 192, 1, 1, 1, 1},
    };
    double worst = 0.0;
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int tile = 4; tile >= 2; tile -= 2)
        for (int i = 0; i < n; i++)
            for (int v = 0; v < 3; v++) {
                /* x c16 + y NCHW / NHWC, then y c16 + x NCHW / NHWC / c16 */
                static const int lay[5] = {64, 64 | 2, 128, 128 | 1, 128 | 64};
                int l = lay[(i + v + tile) % 5];
                int variant = l | (((i + v) & 1) << 2) | (((i / 2 + v) & 1) << 3) | (((i + v) & 3) << 4);
                double e = run_case(&cases[i], tile, variant, g_pools, i < 3 ? 3 : 2);
                if (e > worst) worst = e;
            }
    printf("  worst error / (1 + max|ref|): %.3g\n", worst);
}

/* NaN and +-inf in the residual come out where the reference has them,
 * through every activation, on both paths and tiles: the AVX-512 ReLU and
 * Clip once made a NaN 0 (or a bound). (Only the residual: the transforms
 * spread a NaN of the input over a whole tile, as every Winograd does.) */
TEST(wino_special_values) {
    static const wcase cases[] = {{2, 7, 7, 17, 33, 1, 1, 1, 1}, {2, 8, 8, 32, 48, 1, 1, 1, 1}};
    g_specials = true;
    for (int tile = 4; tile >= 2; tile -= 2)
        for (int i = 0; i < 2; i++)
            for (int v = 0; v < 16; v++) /* act: bits 4, 5; residual on */
                run_case(&cases[i], tile, (v & 3) | 4 | ((v >> 2) << 4) | (i << 3), g_pools, 2);
    g_specials = false;
}

/* kiln__fc_wino_fits: the geometry the tactic takes, and no layer whose
 * sizes could overflow the kernel's arithmetic (damaged engine files). */
TEST(wino_fits) {
    kiln_fused_conv_attrs at;
    memset(&at, 0, sizeof at);
    at.conv.group = 1;
    at.conv.n_pads = 4;
    for (int i = 0; i < 4; i++) at.conv.pads[i] = 1;
    int64_t x[4] = {1, 64, 56, 56}, w[4] = {64, 64, 3, 3};
    CHECK(kiln__fc_wino_fits(&at, 4, x, 4, w));
    int64_t huge[4] = {1, 64, (int64_t)1 << 40, (int64_t)1 << 20};
    CHECK(!kiln__fc_wino_fits(&at, 4, huge, 4, w));
    int64_t w1[4] = {64, 64, 1, 1};
    CHECK(!kiln__fc_wino_fits(&at, 4, x, 4, w1)); /* 1x1 */
    at.conv.n_strides = 2;
    at.conv.strides[0] = at.conv.strides[1] = 2;
    CHECK(!kiln__fc_wino_fits(&at, 4, x, 4, w)); /* stride 2 */
    at.conv.strides[0] = at.conv.strides[1] = 1;
    at.precision = KILN_PRECISION_BF16;
    CHECK(!kiln__fc_wino_fits(&at, 4, x, 4, w)); /* fp32 only */
}

/* A wrong kernel fails: a perturbed weight gives a large error. */
TEST(wino_detects_errors) {
    wcase k = {1, 6, 6, 4, 4, 1, 1, 1, 1};
    int64_t n = 4 * 4 * 9;
    float Wt[144], u[36 * 16 * 16], x[144], y[144], ref[144];
    for (int64_t i = 0; i < n; i++) Wt[i] = frand(-0.5f, 0.5f);
    for (int64_t i = 0; i < 144; i++) x[i] = frand(-1.0f, 1.0f);
    reference(&k, x, 0, Wt, NULL, NULL, 0, KILN_FC_ACT_NONE, 0, 0, ref);
    CHECK(kiln__wino_packed_floats(4, 4, 4) == sizeof u / sizeof u[0]);
    CHECK(kiln__wino_packed_floats(4, 4, 2) == 16 * 16 * 16);
    for (int tile = 4; tile >= 2; tile -= 2) {
        kiln__wino_pack(Wt, 4, 4, tile, u);
        double err = 0.0;
        for (int broken = 0; broken < 2; broken++) {
            if (broken) u[5 * 16 * 16 + 2 * 16 + 1] += 0.01f;
            size_t wsb = kiln__wino_workspace(1, 6, 6, 4, 4, 1, 1, 1, 1, tile, 1);
            void *ws = malloc(wsb);
            kiln_wino_args a = {.x = x, .u = u, .tile = tile, .y = y, .N = 1, .H = 6, .W = 6, .C = 4, .M = 4,
                                .pt = 1, .pl = 1, .pb = 1, .pr = 1, .ws = ws, .ws_bytes = wsb};
            kiln__wino_run(&a);
            free(ws);
            err = 0.0;
            for (int i = 0; i < 144; i++) err = fmax(err, fabs((double)y[i] - ref[i]));
            CHECK(broken ? err > 1e-3 : err < 1e-5); /* intact: right; perturbed: wrong */
        }
    }
}

int main(void) {
    kc_pools_create(g_pools);
    printf("  avx512f path: %s\n", kiln__wino_fast_available() ? "yes" : "no (generic only)");
    RUN(wino_small_shapes);
    RUN(wino_blocks);
    RUN(wino_c16);
    RUN(wino_special_values);
    RUN(wino_detects_errors);
    RUN(wino_fits);
    kc_pools_free(g_pools);
    return test_summary();
}
