/* test_conv_direct.c -- kiln's direct convolution (src/backends/cpu/kernels/conv_direct.c)
 * against a convolution with double accumulation: 1x1 layers read in place
 * (NCHW, NHWC, nChw16c, strided), kernels up to 7x7 through the padded
 * copy (ResNet's stem: 7x7, stride 2, 3 channels), channel counts that are
 * not multiples of 16 or 32, bias, residual (also written over), every
 * activation path, the AVX-512F and the generic path, both thread splits,
 * no pool and pools of 2 and 3 threads (which must give bitwise the same
 * result as no pool). */
#include <math.h>
#include <stdlib.h>

#include "test.h"
#include "kernel_check.h"

#include "backends/cpu/kernels/conv_direct.h"
#include "backends/cpu/kernels/fused_conv_cpu.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
/* NaN and +-inf in the input and the residual (direct_special_values) */
static bool g_specials;
static float frand(float lo, float hi) { return kc_frand(&rng, lo, hi); }

typedef struct dcase {
    int64_t N, H, W, C, M, k, s, pt, pl, pb, pr;
} dcase;

static int64_t out_h(const dcase *k) { return (k->H + k->pt + k->pb - k->k) / k->s + 1; }
static int64_t out_w(const dcase *k) { return (k->W + k->pl + k->pr - k->k) / k->s + 1; }

/* Index of logical (n, c, h, w) in NCHW, NHWC or nChw16c. */
static int64_t at(int l, int64_t C, int64_t H, int64_t W, int64_t n, int64_t c, int64_t h, int64_t w) {
    if (l == KILN_DIRECT_C16) return (((n * (C / 16) + c / 16) * H + h) * W + w) * 16 + c % 16;
    return l == KILN_DIRECT_NHWC ? ((n * H + h) * W + w) * C + c : ((n * C + c) * H + h) * W + w;
}

static void reference(const dcase *k, const float *x, int xl, const float *Wt, const float *bias, const float *r,
                      int rl, int yl, int act, float alpha, float beta, float *y) {
    int64_t Ho = out_h(k), Wo = out_w(k);
    for (int64_t n = 0; n < k->N; n++)
        for (int64_t m = 0; m < k->M; m++)
            for (int64_t oy = 0; oy < Ho; oy++)
                for (int64_t ox = 0; ox < Wo; ox++) {
                    double s = bias ? bias[m] : 0.0;
                    for (int64_t c = 0; c < k->C; c++)
                        for (int64_t i = 0; i < k->k; i++)
                            for (int64_t j = 0; j < k->k; j++) {
                                int64_t iy = oy * k->s + i - k->pt, ix = ox * k->s + j - k->pl;
                                if (iy < 0 || iy >= k->H || ix < 0 || ix >= k->W) continue;
                                s += (double)Wt[((m * k->C + c) * k->k + i) * k->k + j] *
                                     x[at(xl, k->C, k->H, k->W, n, c, iy, ix)];
                            }
                    if (r) s += r[at(rl, k->M, Ho, Wo, n, m, oy, ox)];
                    y[at(yl, k->M, Ho, Wo, n, m, oy, ox)] = kiln__fc_act(act, alpha, beta, (float)s);
                }
}

/* Runs one case on every path, pool and split; returns the worst error / scale. */
static double run_case(const dcase *k, int xl, int yl, int rl, int variant, kiln_pool **pools, int npools) {
    int64_t Ho = out_h(k), Wo = out_w(k);
    int64_t xn = k->N * k->C * k->H * k->W, yn = k->N * k->M * Ho * Wo, wn = k->M * k->C * k->k * k->k;
    int has_r = variant & 1, has_b = ((variant >> 1) & 1) == 0;
    static const int acts[5] = {KILN_FC_ACT_NONE, KILN_FC_ACT_RELU, KILN_FC_ACT_CLIP, KILN_FC_ACT_SILU,
                                KILN_FC_ACT_HARD_SIGMOID};
    /* (hard sigmoid in place of SiLU for every other output channel count) */
    int act = acts[((variant >> 2) & 3) + (((variant >> 2) & 3) == 3 && k->M % 2 == 0)];
    float alpha = act == KILN_FC_ACT_HARD_SIGMOID ? 0.3f : -0.3f, beta = 0.4f;
    float *x = malloc(sizeof(float) * (size_t)xn), *Wt = malloc(sizeof(float) * (size_t)wn);
    float *b = malloc(sizeof(float) * (size_t)k->M), *r = malloc(sizeof(float) * (size_t)yn);
    float *ref = malloc(sizeof(float) * (size_t)yn), *y = malloc(sizeof(float) * (size_t)yn);
    float *y0 = malloc(sizeof(float) * (size_t)yn);
    /* 64-byte aligned, as kernels get them */
    float *wp = kiln__aligned_alloc(sizeof(float) * kiln__direct_packed_floats(k->C, k->M, k->k, k->k));
    float ws_scale = 1.0f / sqrtf((float)(k->k * k->k * k->C));
    for (int64_t i = 0; i < xn; i++) x[i] = frand(-1.0f, 1.0f);
    for (int64_t i = 0; i < wn; i++) Wt[i] = frand(-ws_scale, ws_scale) * 1.7f;
    for (int64_t i = 0; i < k->M; i++) b[i] = frand(-0.5f, 0.5f);
    for (int64_t i = 0; i < yn; i++) r[i] = frand(-1.0f, 1.0f);
    if (g_specials) kc_specials(&rng, x, xn), kc_specials(&rng, r, yn);
    /* the residual of an output written over it has the output's layout */
    reference(k, x, xl, Wt, has_b ? b : NULL, has_r ? r : NULL, rl, yl, act, alpha, beta, ref);
    kiln__direct_pack(Wt, k->C, k->M, k->k, k->k, wp);
    double maxref = kc_maxref(ref, yn);
    double worst = 0.0;
    size_t wsb = kiln__direct_workspace(k->N, k->C, k->H, k->W, k->k, k->k, k->s, k->s, k->pt, k->pl, k->pb, k->pr);
    void *ws = wsb ? malloc(wsb) : NULL;
    for (int gen = 0; gen < 2; gen++) {
        if (!gen && !kiln__direct_fast_available()) continue;
        for (int split = 1; split <= 2; split++)
            for (int pi = 0; pi < npools; pi++) {
                /* some cases write the output over the residual (as the plan
                 * arranges when the layer reads the residual last) */
                bool alias = has_r && rl == yl && (variant + pi + split) % 2 == 1;
                for (int64_t i = 0; i < yn; i++) y[i] = alias ? r[i] : NAN;
                kiln_direct_args a = {
                    .x = x, .w = wp, .bias = has_b ? b : NULL, .r = has_r ? (alias ? y : r) : NULL, .y = y,
                    .N = k->N, .C = k->C, .H = k->H, .W = k->W, .M = k->M, .kh = k->k, .kw = k->k,
                    .sh = k->s, .sw = k->s, .pt = k->pt, .pl = k->pl, .pb = k->pb, .pr = k->pr,
                    .x_layout = xl, .y_layout = yl, .r_layout = rl, .act = act, .alpha = alpha, .beta = beta,
                    .ws = ws, .ws_bytes = wsb, .pool = pools[pi], .force_generic = gen, .split = split};
                kiln__direct_run(&a);
                double err = kc_error(y, ref, yn, maxref);
                if (err > worst) worst = err;
                if (!(err <= 5e-5)) {
                    fprintf(stderr,
                            "  N%lld H%lld W%lld C%lld M%lld k%lld s%lld pads %lld,%lld,%lld,%lld layouts %d->%d "
                            "(r %d) variant %d %s split %d threads %d: err %g\n",
                            (long long)k->N, (long long)k->H, (long long)k->W, (long long)k->C, (long long)k->M,
                            (long long)k->k, (long long)k->s, (long long)k->pt, (long long)k->pl,
                            (long long)k->pb, (long long)k->pr, xl, yl, rl, variant, gen ? "generic" : "avx512",
                            split, kiln__pool_threads(pools[pi]), err);
                    CHECK(err <= 5e-5);
                }
                kc_same_bits(pi, y0, y, yn);
            }
    }
    free(ws);
    free(x), free(Wt), free(b), free(r), free(ref), free(y), free(y0);
    kiln__aligned_free(wp);
    return worst;
}

static kiln_pool *g_pools[3];

/* 1x1 layers, read in place or gathered: every input and output layout
 * (nChw16c where the channels allow), strides, odd channel counts, several
 * images. */
TEST(direct_pointwise) {
    static const dcase cases[] = {
        {1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},    {1, 7, 7, 64, 32, 1, 1, 0, 0, 0, 0},
        {2, 5, 9, 17, 40, 1, 1, 0, 0, 0, 0},  {1, 14, 14, 32, 64, 1, 2, 0, 0, 0, 0},
        {3, 6, 5, 48, 16, 1, 1, 0, 0, 0, 0},  {1, 9, 11, 33, 70, 1, 2, 0, 0, 0, 0},
        {2, 4, 4, 160, 96, 1, 1, 0, 0, 0, 0}, {1, 15, 3, 5, 7, 1, 3, 0, 0, 0, 0},
        /* NHWC pixels that would crowd the L1 cache: gathered (the first
         * into an image of padded pixel stride) */
        {1, 4, 4, 1024, 16, 1, 1, 0, 0, 0, 0}, {2, 2, 28, 512, 32, 1, 2, 0, 0, 0, 0},
    };
    double worst = 0.0;
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++)
        for (int xl = 0; xl < 3; xl++)
            for (int yl = 0; yl < 3; yl++) {
                if ((xl == KILN_DIRECT_C16 && cases[i].C % 16) || (yl == KILN_DIRECT_C16 && cases[i].M % 16))
                    continue;
                int variant = (i + xl + yl) & 15;
                /* an NCHW output with an NHWC residual (the R_NHWC layer) */
                int rl = yl == KILN_DIRECT_NCHW && (i + xl) % 3 == 0 ? KILN_DIRECT_NHWC : yl;
                double e = run_case(&cases[i], xl, yl, rl, variant | 1 * (rl != yl), g_pools, 3);
                if (e > worst) worst = e;
            }
    printf("  worst error / (1 + max|ref|): %.3g\n", worst);
}

/* Kernels above 1x1 or padding: the padded NHWC copy (a padded 1x1: the
 * gathered one), from each layout. */
TEST(direct_padded) {
    static const dcase cases[] = {
        {1, 23, 23, 3, 64, 7, 2, 3, 3, 3, 3}, /* ResNet's stem, smaller */
        {2, 9, 9, 16, 32, 3, 1, 1, 1, 1, 1},  {1, 14, 14, 32, 48, 3, 2, 1, 1, 1, 1},
        {1, 7, 7, 64, 64, 3, 1, 1, 1, 1, 1},  {2, 8, 6, 5, 9, 3, 1, 0, 2, 1, 0},
        {1, 6, 6, 16, 16, 1, 1, 1, 1, 1, 1},  {1, 10, 12, 20, 33, 5, 2, 2, 1, 2, 0},
        {1, 3, 3, 7, 5, 3, 1, 0, 0, 0, 0},    {2, 9, 7, 20, 24, 1, 2, 1, 0, 0, 1}, /* 1x1, strided, padded */
    };
    double worst = 0.0;
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++)
        for (int v = 0; v < 3; v++) {
            int xl = (i + v) % 3, yl = (i + 2 * v) % 3;
            if (xl == KILN_DIRECT_C16 && cases[i].C % 16) xl = KILN_DIRECT_NCHW;
            if (yl == KILN_DIRECT_C16 && cases[i].M % 16) yl = KILN_DIRECT_NHWC;
            double e = run_case(&cases[i], xl, yl, yl, (i * 3 + v) & 15, g_pools, 3);
            if (e > worst) worst = e;
        }
    printf("  worst error / (1 + max|ref|): %.3g\n", worst);
}

/* NaN and +-inf in the input and the residual come out where the
 * reference has them, through every activation (with or without a
 * residual, bias), on both paths: the AVX-512 ReLU/Clip/HardSigmoid once
 * made a NaN 0 (or a bound). */
TEST(direct_special_values) {
    static const dcase cases[] = {
        {1, 7, 7, 64, 32, 1, 1, 0, 0, 0, 0}, {2, 5, 9, 17, 40, 1, 1, 0, 0, 0, 0},
        {2, 9, 9, 16, 32, 3, 1, 1, 1, 1, 1}, {1, 10, 12, 20, 33, 5, 2, 2, 1, 2, 0},
    };
    g_specials = true;
    for (int i = 0; i < 4; i++)
        for (int v = 0; v < 16; v++) {
            int l = (i + v) % 3;
            if (l == KILN_DIRECT_C16 && (cases[i].C % 16 || cases[i].M % 16)) l = KILN_DIRECT_NHWC;
            run_case(&cases[i], l, l, l, v, g_pools, 2);
        }
    g_specials = false;
}

/* Sizes where the split and the next-panel prefetch matter: weights
 * heavier than the input (threads split the panels), many tiles. */
TEST(direct_large) {
    static const dcase cases[] = {
        {1, 7, 7, 256, 192, 1, 1, 0, 0, 0, 0},
        {1, 14, 14, 64, 96, 3, 2, 1, 1, 1, 1},
        {2, 28, 28, 32, 64, 1, 1, 0, 0, 0, 0},
    };
    double worst = 0.0;
    for (int i = 0; i < 3; i++) {
        double e = run_case(&cases[i], KILN_DIRECT_NHWC, KILN_DIRECT_NHWC, KILN_DIRECT_NHWC, 1 | 4, g_pools, 3);
        if (e > worst) worst = e;
        e = run_case(&cases[i], KILN_DIRECT_C16, KILN_DIRECT_C16, KILN_DIRECT_C16, 8, g_pools, 2);
        if (e > worst) worst = e;
    }
    printf("  worst error / (1 + max|ref|): %.3g\n", worst);
}

/* kiln__fc_direct_fits: the geometry the tactic takes, and no layer whose
 * sizes could overflow the kernel's arithmetic (damaged engine files). */
TEST(direct_fits) {
    kiln_fused_conv_attrs at;
    memset(&at, 0, sizeof at);
    at.conv.group = 1;
    int64_t x[4] = {1, 64, 56, 56}, w1[4] = {256, 64, 1, 1}, w3[4] = {64, 64, 3, 3};
    CHECK(kiln__fc_direct_fits(&at, 4, x, 4, w1));
    CHECK(kiln__fc_direct_fits(&at, 4, x, 4, w3)); /* 3x3 without pads (54x54) */
    at.conv.n_pads = 4;
    for (int i = 0; i < 4; i++) at.conv.pads[i] = 1;
    CHECK(kiln__fc_direct_fits(&at, 4, x, 4, w3));
    int64_t huge[4] = {1, 64, (int64_t)1 << 40, (int64_t)1 << 20};
    CHECK(!kiln__fc_direct_fits(&at, 4, huge, 4, w3));
    int64_t w17[4] = {64, 64, 17, 17};
    CHECK(!kiln__fc_direct_fits(&at, 4, x, 4, w17)); /* kernel rows above KILN_DIRECT_MAX_K */
    at.conv.n_dilations = 2;
    at.conv.dilations[0] = at.conv.dilations[1] = 2;
    CHECK(!kiln__fc_direct_fits(&at, 4, x, 4, w3)); /* dilation 2 */
    at.conv.dilations[0] = at.conv.dilations[1] = 1;
    at.conv.group = 2;
    int64_t wg[4] = {64, 32, 3, 3};
    CHECK(!kiln__fc_direct_fits(&at, 4, x, 4, wg)); /* groups */
    at.conv.group = 1;
    at.precision = KILN_PRECISION_BF16;
    CHECK(!kiln__fc_direct_fits(&at, 4, x, 4, w3)); /* fp32 only */
}

/* A wrong kernel fails: a perturbed packed weight gives a large error. */
TEST(direct_detects_errors) {
    dcase k = {1, 6, 6, 4, 40, 3, 1, 1, 1, 1, 1};
    float Wt[40 * 4 * 9], x[4 * 36], y[40 * 36], ref[40 * 36];
    _Alignas(64) float wp[64 * 4 * 9];
    CHECK(kiln__direct_packed_floats(4, 40, 3, 3) == sizeof wp / sizeof wp[0]);
    for (int i = 0; i < 40 * 4 * 9; i++) Wt[i] = frand(-0.5f, 0.5f);
    for (int i = 0; i < 4 * 36; i++) x[i] = frand(-1.0f, 1.0f);
    reference(&k, x, 0, Wt, NULL, NULL, 0, 0, KILN_FC_ACT_NONE, 0, 0, ref);
    size_t wsb = kiln__direct_workspace(1, 4, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1);
    CHECK(wsb >= 8 * 8 * 4 * sizeof(float));
    void *ws = malloc(wsb);
    kiln__direct_pack(Wt, 4, 40, 3, 3, wp);
    for (int broken = 0; broken < 2; broken++) {
        if (broken) wp[(1 * 36 + 5) * 32 + 7] += 0.01f; /* panel 1, k row 5, channel 39 */
        for (int gen = 0; gen < 2; gen++) {
            kiln_direct_args a = {.x = x, .w = wp, .y = y, .N = 1, .C = 4, .H = 6, .W = 6, .M = 40, .kh = 3,
                                  .kw = 3, .sh = 1, .sw = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1,
                                  .ws = ws, .ws_bytes = wsb, .force_generic = gen};
            kiln__direct_run(&a);
            double err = 0.0;
            for (int i = 0; i < 40 * 36; i++) err = fmax(err, fabs((double)y[i] - ref[i]));
            CHECK(broken ? err > 1e-3 : err < 1e-5); /* intact: right; perturbed: wrong */
        }
    }
    free(ws);
}

int main(void) {
    kc_pools_create(g_pools);
    printf("  avx512f path: %s\n", kiln__direct_fast_available() ? "yes" : "no (generic only)");
    RUN(direct_pointwise);
    RUN(direct_padded);
    RUN(direct_large);
    RUN(direct_special_values);
    RUN(direct_fits);
    RUN(direct_detects_errors);
    kc_pools_free(g_pools);
    return test_summary();
}
