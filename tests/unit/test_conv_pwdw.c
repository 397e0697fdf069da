/* test_conv_pwdw.c -- the row-by-row 1x1 + depthwise 3x3 [+ 1x1 + residual]
 * kernel (src/backends/cpu/kernels/conv_pwdw.c) against the three convolutions computed
 * apart with double accumulation: strides 1 and 2, every pad pattern,
 * with and without the first pointwise convolution,
 * channel counts that are and are not multiples of 16, NCHW and NHWC in
 * and out, biases present or absent, the activations with a vector form
 * and one without, batches, the AVX-512F and the generic path, no pool and
 * pools of 2 and 3 threads (which must give the same bits as no pool). */
#include <math.h>
#include <stdlib.h>

#include "test.h"
#include "kernel_check.h"

#include "backends/cpu/kernels/conv_pwdw.h"
#include "ops/fused_conv.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
/* NaN and +-inf in the input and the residual (pwdw_special_values) */
static bool g_specials;
static float frand(float lo, float hi) { return kc_frand(&rng, lo, hi); }

typedef struct pcase {
    int64_t N, H, W, C, E, M; /* M = 0: no project convolution */
    int stride, pt, pl, pb, pr;
    int no_expand;            /* T = X (E = C) */
} pcase;

static int64_t at(int nhwc, int64_t C, int64_t H, int64_t W, int64_t n, int64_t c, int64_t h, int64_t w) {
    return nhwc ? ((n * H + h) * W + w) * C + c : ((n * C + c) * H + h) * W + w;
}

typedef struct pdata {
    float *x, *w1, *b1, *w2, *b2, *w3, *b3, *r;
    int acts[3];
    float alpha[3], beta[3];
} pdata;

/* The three layers apart; ref is NCHW or NHWC as y_nhwc says. */
static void reference(const pcase *k, const pdata *d, int x_nhwc, int y_nhwc, float *ref) {
    int64_t H = k->H, W = k->W, E = k->E;
    int64_t Ho = kiln__pwdw_out(H, k->pt, k->pb, k->stride), Wo = kiln__pwdw_out(W, k->pl, k->pr, k->stride);
    float *t = malloc(sizeof(float) * (size_t)(k->N * E * H * W));
    float *dd = malloc(sizeof(float) * (size_t)(k->N * E * Ho * Wo));
    for (int64_t n = 0; n < k->N; n++)
        for (int64_t e = 0; e < E; e++)
            for (int64_t y = 0; y < H; y++)
                for (int64_t x = 0; x < W; x++) {
                    if (k->no_expand) {
                        t[((n * E + e) * H + y) * W + x] = d->x[at(x_nhwc, k->C, H, W, n, e, y, x)];
                        continue;
                    }
                    double s = d->b1 ? d->b1[e] : 0.0;
                    for (int64_t c = 0; c < k->C; c++)
                        s += (double)d->w1[e * k->C + c] * d->x[at(x_nhwc, k->C, H, W, n, c, y, x)];
                    t[((n * E + e) * H + y) * W + x] = kiln__fc_act(d->acts[0], d->alpha[0], d->beta[0], (float)s);
                }
    for (int64_t n = 0; n < k->N; n++)
        for (int64_t e = 0; e < E; e++)
            for (int64_t oy = 0; oy < Ho; oy++)
                for (int64_t ox = 0; ox < Wo; ox++) {
                    double s = d->b2 ? d->b2[e] : 0.0;
                    for (int i = 0; i < 3; i++)
                        for (int j = 0; j < 3; j++) {
                            int64_t iy = oy * k->stride + i - k->pt, ix = ox * k->stride + j - k->pl;
                            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                            s += (double)d->w2[e * 9 + i * 3 + j] * t[((n * E + e) * H + iy) * W + ix];
                        }
                    dd[((n * E + e) * Ho + oy) * Wo + ox] = kiln__fc_act(d->acts[1], d->alpha[1], d->beta[1], (float)s);
                }
    int64_t Yc = k->M ? k->M : E;
    for (int64_t n = 0; n < k->N; n++)
        for (int64_t m = 0; m < Yc; m++)
            for (int64_t oy = 0; oy < Ho; oy++)
                for (int64_t ox = 0; ox < Wo; ox++) {
                    int64_t o = at(y_nhwc, Yc, Ho, Wo, n, m, oy, ox);
                    if (!k->M) {
                        ref[o] = dd[((n * E + m) * Ho + oy) * Wo + ox];
                        continue;
                    }
                    double s = d->b3 ? d->b3[m] : 0.0;
                    for (int64_t e = 0; e < E; e++) s += (double)d->w3[m * E + e] * dd[((n * E + e) * Ho + oy) * Wo + ox];
                    if (d->r) s += d->r[o];
                    ref[o] = kiln__fc_act(d->acts[2], d->alpha[2], d->beta[2], (float)s);
                }
    free(t);
    free(dd);
}

/* Runs one case with every pool and path; returns the worst error / (1 + max|ref|). */
static double run_case(const pcase *k, int variant, kiln_pool **pools, int npools) {
    int64_t Ho = kiln__pwdw_out(k->H, k->pt, k->pb, k->stride), Wo = kiln__pwdw_out(k->W, k->pl, k->pr, k->stride);
    int64_t Yc = k->M ? k->M : k->E;
    int64_t xn = k->N * k->C * k->H * k->W, yn = k->N * Yc * Ho * Wo;
    int x_nhwc = variant & 1, y_nhwc = (variant >> 1) & 1, has_r = k->M && ((variant >> 2) & 1);
    int has_b = ((variant >> 3) & 1) == 0;
    static const int acts[5] = {KILN_FC_ACT_CLIP, KILN_FC_ACT_RELU, KILN_FC_ACT_NONE, KILN_FC_ACT_SIGMOID,
                                KILN_FC_ACT_HARD_SIGMOID};
    pdata d;
    memset(&d, 0, sizeof d);
    for (int i = 0; i < 3; i++) {
        d.acts[i] = acts[((variant >> 4) + i) % 5];
        d.alpha[i] = i == 2 ? -0.5f : 0.0f;
        d.beta[i] = 6.0f;
        if (d.acts[i] == KILN_FC_ACT_HARD_SIGMOID) d.alpha[i] = i == 2 ? -0.4f : 1.0f / 6.0f, d.beta[i] = 0.5f;
    }
    d.x = malloc(sizeof(float) * (size_t)xn);
    d.w1 = malloc(sizeof(float) * (size_t)(k->E * k->C));
    d.b1 = malloc(sizeof(float) * (size_t)k->E);
    d.w2 = malloc(sizeof(float) * (size_t)(k->E * 9));
    d.b2 = malloc(sizeof(float) * (size_t)k->E);
    d.w3 = malloc(sizeof(float) * (size_t)(k->M * k->E + 1));
    d.b3 = malloc(sizeof(float) * (size_t)(k->M + 1));
    d.r = malloc(sizeof(float) * (size_t)yn);
    for (int64_t i = 0; i < xn; i++) d.x[i] = frand(-1.0f, 1.0f);
    float s1 = 1.5f / sqrtf((float)k->C), s3 = 1.5f / sqrtf((float)k->E);
    for (int64_t i = 0; i < k->E * k->C; i++) d.w1[i] = frand(-s1, s1);
    for (int64_t i = 0; i < k->E * 9; i++) d.w2[i] = frand(-0.5f, 0.5f);
    for (int64_t i = 0; i < k->M * k->E; i++) d.w3[i] = frand(-s3, s3);
    for (int64_t i = 0; i < k->E; i++) d.b1[i] = frand(-0.3f, 0.3f), d.b2[i] = frand(-0.3f, 0.3f);
    for (int64_t i = 0; i < k->M; i++) d.b3[i] = frand(-0.3f, 0.3f);
    for (int64_t i = 0; i < yn; i++) d.r[i] = frand(-1.0f, 1.0f);
    if (g_specials) kc_specials(&rng, d.x, xn), kc_specials(&rng, d.r, yn);
    if (!has_b) d.b1 = (free(d.b1), NULL), d.b2 = (free(d.b2), NULL), d.b3 = (free(d.b3), NULL);
    float *rr = d.r;
    if (!has_r) d.r = NULL;
    float *ref = malloc(sizeof(float) * (size_t)yn), *y = malloc(sizeof(float) * (size_t)yn);
    float *y0 = malloc(sizeof(float) * (size_t)yn);
    reference(k, &d, x_nhwc, y_nhwc, ref);
    int64_t Cw = k->no_expand ? 0 : k->C;
    float *packed = malloc(sizeof(float) * (size_t)kiln__pwdw_packed_floats(Cw, k->E, k->M));
    kiln__pwdw_pack(k->no_expand ? NULL : d.w1, k->no_expand ? NULL : d.b1, d.w2, d.b2, k->M ? d.w3 : NULL,
                    d.b3, Cw, k->E, k->M, packed);
    double maxref = kc_maxref(ref, yn), worst = 0.0;
    for (int gen = 0; gen < 2; gen++) {
        if (!gen && !kiln__pwdw_fast_available()) continue;
        for (int pi = 0; pi < npools; pi++) {
            int threads = kiln__pool_threads(pools[pi]);
            if (variant % 5 == 3 && threads > 1) threads = 1; /* workspace for fewer threads */
            size_t wsb = kiln__pwdw_workspace(k->W, k->E, k->M, k->stride, k->pl, k->pr, threads);
            void *ws = malloc(wsb);
            for (int64_t i = 0; i < yn; i++) y[i] = NAN;
            kiln_pwdw_args a = {.x = d.x, .packed = packed, .r = d.r, .y = y, .N = k->N, .H = k->H,
                                .W = k->W, .C = k->C, .E = k->E, .M = k->M, .no_expand = k->no_expand,
                                .stride = k->stride,
                                .pt = k->pt, .pl = k->pl, .pb = k->pb, .pr = k->pr,
                                .x_nhwc = x_nhwc, .y_nhwc = y_nhwc,
                                .act1 = d.acts[0], .alpha1 = d.alpha[0], .beta1 = d.beta[0],
                                .act2 = d.acts[1], .alpha2 = d.alpha[1], .beta2 = d.beta[1],
                                .act3 = d.acts[2], .alpha3 = d.alpha[2], .beta3 = d.beta[2],
                                .ws = ws, .ws_bytes = wsb, .pool = pools[pi], .force_generic = gen};
            kiln__pwdw_run(&a);
            free(ws);
            double err = kc_error(y, ref, yn, maxref);
            if (err > worst) worst = err;
            if (!(err <= 2e-5)) {
                fprintf(stderr,
                        "  N%lld H%lld W%lld C%lld E%lld M%lld stride %d pads %d,%d,%d,%d variant %d %s "
                        "threads %d: err %g\n",
                        (long long)k->N, (long long)k->H, (long long)k->W, (long long)k->C, (long long)k->E,
                        (long long)k->M, k->stride, k->pt, k->pl, k->pb, k->pr, variant,
                        gen ? "generic" : "avx512", kiln__pool_threads(pools[pi]), err);
                CHECK(err <= 2e-5);
            }
            kc_same_bits(pi, y0, y, yn);
        }
    }
    free(d.x), free(d.w1), free(d.b1), free(d.w2), free(d.b2), free(d.w3), free(d.b3), free(rr);
    free(ref), free(y), free(y0), free(packed);
    return worst;
}

static kiln_pool *g_pools[3];

TEST(pwdw_shapes) {
    static const pcase cases[] = {
        {1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0},      {1, 5, 7, 3, 16, 0, 1, 1, 1, 1, 1, 0},
        {2, 9, 8, 5, 20, 7, 2, 1, 1, 1, 1, 0},     {1, 12, 11, 16, 96, 24, 2, 0, 1, 1, 0, 0},
        {1, 10, 10, 8, 33, 17, 1, 0, 0, 0, 0, 0},  {2, 7, 13, 24, 144, 24, 1, 1, 1, 1, 1, 0},
        {1, 14, 14, 32, 192, 64, 2, 1, 0, 0, 1, 0}, {3, 6, 5, 4, 64, 80, 1, 1, 0, 1, 0, 0},
        {1, 3, 3, 2, 48, 16, 2, 1, 1, 1, 1, 0},    {1, 16, 9, 7, 65, 0, 2, 1, 1, 1, 1, 0},
        /* large enough to be split over threads (bands of rows, images) */
        {2, 24, 20, 32, 96, 32, 1, 1, 1, 1, 1, 0}, {1, 40, 30, 16, 96, 24, 2, 1, 1, 1, 1, 0},
        {2, 30, 30, 32, 128, 0, 1, 1, 1, 1, 1, 0},
        /* no first pointwise convolution (E = C): depthwise + project */
        {1, 9, 11, 16, 16, 8, 1, 1, 1, 1, 1, 1}, {2, 12, 10, 20, 20, 33, 2, 1, 1, 1, 1, 1},
        {1, 40, 36, 32, 32, 16, 1, 1, 1, 1, 1, 1}, {1, 7, 7, 5, 5, 16, 2, 0, 1, 0, 1, 1},
    };
    double worst = 0.0;
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++)
        for (int v = 0; v < 4; v++) {
            /* layouts vary fastest; residual, biases and activations by case */
            int variant = v | (((i + v) & 1) << 2) | (((i / 2 + v) & 1) << 3) | (((i + v) & 3) << 4);
            double e = run_case(&cases[i], variant, g_pools, 3);
            if (e > worst) worst = e;
        }
    printf("  worst error / (1 + max|ref|): %.3g\n", worst);
}

/* NaN and +-inf in the input and the residual come out where the
 * reference has them, each activation in each of the three places, on
 * both paths: the AVX-512 ReLU/Clip/HardSigmoid once made a NaN 0 (or a
 * bound). */
TEST(pwdw_special_values) {
    static const pcase cases[] = {
        {2, 9, 8, 5, 20, 7, 2, 1, 1, 1, 1, 0}, {2, 7, 13, 24, 144, 24, 1, 1, 1, 1, 1, 0},
        {1, 9, 11, 16, 16, 8, 1, 1, 1, 1, 1, 1},
    };
    g_specials = true;
    for (int i = 0; i < 3; i++)
        for (int v = 0; v < 10; v++) /* activations: variant >> 4 in 0..4; residual on */
            run_case(&cases[i], (v & 1) | ((v & 1) << 1) | 4 | ((v >> 1) << 4), g_pools, 2);
    g_specials = false;
}

/* A wrong kernel fails: a perturbed packed weight gives a large error. */
TEST(pwdw_detects_errors) {
    pcase k = {1, 6, 6, 4, 16, 8, 1, 1, 1, 1, 1, 0};
    pdata d;
    memset(&d, 0, sizeof d);
    float x[144], w1[64], w2[144], w3[128], ref[288], y[288];
    for (int i = 0; i < 144; i++) x[i] = frand(-1, 1), w2[i] = frand(-0.5f, 0.5f);
    for (int i = 0; i < 64; i++) w1[i] = frand(-0.5f, 0.5f);
    for (int i = 0; i < 128; i++) w3[i] = frand(-0.5f, 0.5f);
    d.x = x, d.w1 = w1, d.w2 = w2, d.w3 = w3;
    reference(&k, &d, 0, 0, ref);
    float packed[(4 + 11) * 16 + 17 * 16];
    CHECK(kiln__pwdw_packed_floats(4, 16, 8) == (int64_t)(sizeof packed / sizeof packed[0]));
    kiln__pwdw_pack(w1, NULL, w2, NULL, w3, NULL, 4, 16, 8, packed);
    packed[(4 + 1) * 16 + 4 * 16 + 3] += 0.05f; /* W2, tap 4, channel 3 */
    size_t wsb = kiln__pwdw_workspace(6, 16, 8, 1, 1, 1, 1);
    void *ws = malloc(wsb);
    kiln_pwdw_args a = {.x = x, .packed = packed, .y = y, .N = 1, .H = 6, .W = 6, .C = 4, .E = 16, .M = 8,
                        .stride = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .ws = ws, .ws_bytes = wsb};
    kiln__pwdw_run(&a);
    double err = 0.0;
    for (int i = 0; i < 288; i++) err = fmax(err, fabs((double)y[i] - ref[i]));
    CHECK(err > 1e-3);
    free(ws);
}

/* Attributes and shapes a damaged engine may give the layer: refused by
 * infer with a message naming what is wrong. */
TEST(pwdw_bad_layers) {
    const kiln_op_def *op = kiln__op_by_id(KILN_OP_PwDwConv);
    CHECK(op && op->infer && op->validate);
    if (!op) return;
    kiln_tinfo X = {.dtype = KILN_DTYPE_FLOAT32, .rank = 4, .dims = {1, 8, 10, 10}};
    kiln_tinfo W1 = {.dtype = KILN_DTYPE_FLOAT32, .rank = 4, .dims = {32, 8, 1, 1}};
    kiln_tinfo W2 = {.dtype = KILN_DTYPE_FLOAT32, .rank = 4, .dims = {32, 1, 3, 3}};
    kiln_tinfo W3 = {.dtype = KILN_DTYPE_FLOAT32, .rank = 4, .dims = {8, 32, 1, 1}};
    kiln_tinfo W2bad = {.dtype = KILN_DTYPE_FLOAT32, .rank = 4, .dims = {32, 1, 5, 5}};
    kiln_tinfo R = {.dtype = KILN_DTYPE_FLOAT32, .rank = 4, .dims = {1, 8, 9, 9}}, Y;
    kiln_tinfo *outs[1] = {&Y};
    const kiln_tinfo *in[8] = {&X, &W1, NULL, &W2, NULL};
    kiln_pwdw_attrs at;
    memset(&at, 0, sizeof at);
    at.stride = 1;
    for (int i = 0; i < 4; i++) at.pads[i] = 1;
    kiln_infer_args a = {.op = op, .attrs = &at, .node_name = "blk", .n_in = 5, .n_out = 1, .in = in, .out = outs};
    CHECK_OK(op->infer(&a));
    CHECK(Y.rank == 4 && Y.dims[1] == 32 && Y.dims[2] == 10 && Y.dims[3] == 10);
    /* attribute values: refused by validate (on import, and when an
     * engine is written or loaded), which infer then relies on */
    at.stride = 0;
    CHECK_ERR(op->validate(op, &at, "blk"), KILN_ERR_MODEL, "node 'blk' (PwDwConv): stride 0 (1 or 2 only)");
    at.stride = 2;
    at.pads[2] = 2;
    CHECK_ERR(op->validate(op, &at, "blk"), KILN_ERR_MODEL, "pad 2 is 2 (0 or 1 only)");
    at.pads[2] = 1;
    at.act2 = 99;
    CHECK_ERR(op->validate(op, &at, "blk"), KILN_ERR_MODEL, "unknown activation");
    at.act2 = 0;
    at.has_residual = 1; /* without the project convolution */
    CHECK_ERR(op->validate(op, &at, "blk"), KILN_ERR_MODEL, "has_project 0, has_residual 1");
    at.has_residual = 0;
    at.layout = 64;
    CHECK_ERR(op->validate(op, &at, "blk"), KILN_ERR_MODEL, "unknown layout bits 0x40");
    at.layout = 0;
    in[3] = &W2bad;
    CHECK_ERR(op->infer(&a), KILN_ERR_MODEL, "do not fit an input of 8 channels");
    in[3] = &W2;
    /* the project convolution and its residual, which must match the output */
    at.has_project = at.has_residual = 1;
    CHECK_ERR(op->infer(&a), KILN_ERR_MODEL, "5 inputs, but its attributes want 8");
    in[5] = &W3;
    in[7] = &R;
    a.n_in = 8;
    CHECK_ERR(op->infer(&a), KILN_ERR_MODEL, "residual [1x8x9x9] does not match the output [1x8x5x5]");
    R.dims[2] = R.dims[3] = 5;
    CHECK_OK(op->infer(&a));
    /* no_expand with the first weights still there */
    at.no_expand = 1;
    CHECK_ERR(op->infer(&a), KILN_ERR_MODEL, "present but no_expand is set");
}

int main(void) {
    kc_pools_create(g_pools);
    printf("  avx512f path: %s\n", kiln__pwdw_fast_available() ? "yes" : "no (generic only)");
    RUN(pwdw_shapes);
    RUN(pwdw_special_values);
    RUN(pwdw_detects_errors);
    RUN(pwdw_bad_layers);
    kc_pools_free(g_pools);
    return test_summary();
}
