/* direct_pair_bench.c -- the direct kernel's second source (conv_direct.h):
 * ResNet-50's downsample 1x1 convolution summed into its block's last 1x1
 * convolution in one run, against the two runs apart (the downsample
 * writing its output, the last convolution reading it back as residual),
 * at batch 1, NHWC, ReLU. Before each timed run, 256 MiB of other memory
 * is read and written (weights and activations cold), then the two inputs
 * are read (they come from the layers just before). Prints the median of
 * 40 runs of each, alternating. Not built by CMake:
 *
 *   cmake --build build-lead --target kiln_static
 *   gcc -O3 -fno-math-errno -fno-trapping-math -Iinclude -Isrc bench/direct_pair_bench.c \
 *       build-lead/libkiln.a -ldnnl -lprotobuf-c -lopenblas -lpthread -lm -o /tmp/direct_pair_bench
 *   /tmp/direct_pair_bench 2      # threads (a kiln pool; 1: none)
 *
 * Stages: layer1 (64 + 64 channels at 56x56, stride 1, 256 out), layer2
 * (128 at 28x28 + 256 at 56x56 stride 2, 512 out), layer3 (256 + 512,
 * 1024 out), layer4 (512 at 7x7 + 1024 at 14x14, 2048 out: gathered). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ops/conv_direct.h"
#include "ops/fused_conv.h"

#define RUNS 40

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static float *falloc(int64_t n, float step) {
    float *p = aligned_alloc(64, ((size_t)n * sizeof(float) + 63) / 64 * 64);
    for (int64_t i = 0; i < n; i++) p[i] = (float)(i % 7) * step;
    return p;
}

static volatile float sink;

static void touch(const float *p, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i += 16) s += p[i];
    sink = s;
}

static void cold(unsigned char *buf, size_t n) {
    for (size_t i = 0; i < n; i += 64) buf[i]++;
}

static void stage(int64_t Ch, int64_t Ho, int64_t Cx, int64_t s, int64_t M, kiln_pool *pool, unsigned char *fl,
                  size_t fln) {
    int64_t Hx = Ho * s;
    float *h = falloc(Ch * Ho * Ho, 0.1f), *x = falloc(Cx * Hx * Hx, 0.07f);
    float *W3 = falloc(M * Ch, 0.01f), *Wd = falloc(M * Cx, 0.013f);
    float *d = falloc(M * Ho * Ho, 0), *y = falloc(M * Ho * Ho, 0), *y2 = falloc(M * Ho * Ho, 0);
    float *p3 = falloc((int64_t)kiln__direct_packed_floats(Ch, M, 1, 1, 0), 0);
    float *pd = falloc((int64_t)kiln__direct_packed_floats(Cx, M, 1, 1, 0), 0);
    float *pp = falloc((int64_t)kiln__direct_packed_floats(Ch, M, 1, 1, Cx), 0);
    kiln__direct_pack(W3, Ch, M, 1, 1, NULL, 0, p3);
    kiln__direct_pack(Wd, Cx, M, 1, 1, NULL, 0, pd);
    kiln__direct_pack(W3, Ch, M, 1, 1, Wd, Cx, pp);
    kiln_direct_args ds = {.pool = pool, .x = x, .w = pd, .y = d, .N = 1, .C = Cx, .H = Hx, .W = Hx, .M = M,
                           .kh = 1, .kw = 1, .sh = s, .sw = s, .x_layout = KILN_DIRECT_NHWC,
                           .y_layout = KILN_DIRECT_NHWC, .r_layout = KILN_DIRECT_NHWC};
    kiln_direct_args last = {.pool = pool, .x = h, .w = p3, .r = d, .y = y, .N = 1, .C = Ch, .H = Ho, .W = Ho,
                             .M = M, .kh = 1, .kw = 1, .sh = 1, .sw = 1, .x_layout = KILN_DIRECT_NHWC,
                             .y_layout = KILN_DIRECT_NHWC, .r_layout = KILN_DIRECT_NHWC, .act = KILN_FC_ACT_RELU};
    kiln_direct_args pair = last;
    pair.w = pp, pair.r = NULL, pair.y = y2;
    pair.x2 = x, pair.C2 = Cx, pair.H2 = pair.W2 = Hx, pair.s2h = pair.s2w = s, pair.x2_layout = KILN_DIRECT_NHWC;
    pair.ws_bytes = kiln__direct_pair_workspace(&pair);
    pair.ws = pair.ws_bytes ? malloc(pair.ws_bytes) : NULL;
    double ta[RUNS], tb[RUNS];
    for (int r = -3; r < RUNS; r++) {
        cold(fl, fln);
        touch(h, Ch * Ho * Ho), touch(x, Cx * Hx * Hx);
        double t0 = now_ms();
        kiln__direct_run(&ds);
        kiln__direct_run(&last);
        double t1 = now_ms();
        cold(fl, fln);
        touch(h, Ch * Ho * Ho), touch(x, Cx * Hx * Hx);
        double t2 = now_ms();
        kiln__direct_run(&pair);
        double t3 = now_ms();
        if (r >= 0) ta[r] = (t1 - t0) * 1e3, tb[r] = (t3 - t2) * 1e3;
    }
    double md = 0.0, my = 0.0; /* the two results agree up to rounding */
    for (int64_t i = 0; i < M * Ho * Ho; i++) md = fmax(md, fabs((double)y[i] - y2[i])), my = fmax(my, fabs(y[i]));
    qsort(ta, RUNS, sizeof ta[0], cmp_d);
    qsort(tb, RUNS, sizeof tb[0], cmp_d);
    printf("%4lld ch %2lldx%-2lld + %4lld ch stride %lld -> %4lld: apart %6.0f us, one run %6.0f us (%.2f), max diff / max %.1g\n",
           (long long)Ch, (long long)Ho, (long long)Ho, (long long)Cx, (long long)s, (long long)M, ta[RUNS / 2],
           tb[RUNS / 2], tb[RUNS / 2] / ta[RUNS / 2], md / my);
    free(h), free(x), free(W3), free(Wd), free(d), free(y), free(y2), free(p3), free(pd), free(pp), free(pair.ws);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    kiln_pool *pool = NULL;
    if (threads > 1 && kiln__pool_create(threads, &pool) != KILN_OK) return 1;
    if (pool) kiln__pool_hold(pool, true);
    size_t fln = (size_t)256 << 20;
    unsigned char *fl = calloc(fln, 1);
    if (!fl) return 1;
    printf("threads %d\n", threads);
    stage(64, 56, 64, 1, 256, pool, fl, fln);
    stage(128, 28, 256, 2, 512, pool, fl, fln);
    stage(256, 14, 512, 2, 1024, pool, fl, fln);
    stage(512, 7, 1024, 2, 2048, pool, fl, fln);
    free(fl);
    if (pool) kiln__pool_hold(pool, false);
    kiln__pool_free(pool);
    return 0;
}
