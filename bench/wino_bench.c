/* wino_bench.c -- kiln's Winograd F(4x4, 3x3) or F(2x2, 3x3) convolution (src/backends/cpu/kernels/conv_wino.c)
 * against oneDNN's direct convolution on ResNet-50's 3x3 stride-1 layers at
 * batch 1: NHWC in and out, pads 1, bias, ReLU, no residual. Prints the
 * median of 30 timed runs (after warm-up) in ms and the direct-equivalent
 * GFLOP/s (2 N Ho Wo C M 9 / t) of both. Not built by CMake:
 *
 *   cmake --build build-wino --target kiln_static
 *   gcc -O3 -fno-math-errno -fno-trapping-math -Iinclude -Isrc bench/wino_bench.c \
 *       src/backends/cpu/kernels/conv_wino.c build-wino/libkiln.a -ldnnl -lprotobuf-c -lpthread -lm -o /tmp/wino_bench
 *   OMP_NUM_THREADS=1 /tmp/wino_bench 1     # kiln: no pool; oneDNN: 1 OpenMP thread
 *   OMP_NUM_THREADS=2 /tmp/wino_bench 2     # kiln: a pool of 2; oneDNN: 2 threads
 *
 * (Add -DKILN_WINO_BLOCK_FLOATS=... to try other tile block sizes.) An
 * optional second argument "nodnnl" skips oneDNN; a third (0..3) times only
 * that layer and then runs it 1000 times more (for perf record), -1 all; a
 * fourth is the output tile (4, the default, or 2); a fifth the layout of
 * input and output (1 NHWC, the default, or 2 nChw16c: kiln only, its
 * output is then not compared with oneDNN's). */
#include <dnnl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/kernels/conv_wino.h"

#define RUNS 30

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    return t[n / 2];
}

#define DN(call)                                                                                   \
    do {                                                                                           \
        dnnl_status_t s_ = (call);                                                                 \
        if (s_ != dnnl_success) {                                                                  \
            fprintf(stderr, "%s: %d\n", #call, (int)s_);                                          \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* oneDNN direct convolution, NHWC src/dst, weights in its preferred layout;
 * returns the median ms and checks its output against kiln's y. */
static double dnnl_time(int64_t HW, int64_t C, int64_t M, const float *x, const float *b, const float *y_ref,
                        float *maxdiff, const char **impl) {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    DN(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DN(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    dnnl_dims_t sd = {1, C, HW, HW}, wd = {M, C, 3, 3}, bd = {M}, dd = {1, M, HW, HW};
    dnnl_dims_t strides = {1, 1}, pad = {1, 1};
    dnnl_memory_desc_t smd, wmd, bmd, dmd, wany;
    DN(dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_f32, dnnl_acdb));
    DN(dnnl_memory_desc_init_by_tag(&wmd, 4, wd, dnnl_f32, dnnl_oihw));
    DN(dnnl_memory_desc_init_by_tag(&wany, 4, wd, dnnl_f32, dnnl_format_tag_any));
    DN(dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_a));
    DN(dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, dnnl_acdb));
    dnnl_convolution_desc_t cd;
    DN(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &smd, &wany,
                                          &bmd, &dmd, strides, pad, pad));
    dnnl_post_ops_t po;
    dnnl_primitive_attr_t attr;
    DN(dnnl_post_ops_create(&po));
    DN(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f));
    DN(dnnl_primitive_attr_create(&attr));
    DN(dnnl_primitive_attr_set_post_ops(attr, po));
    dnnl_primitive_desc_t pd;
    DN(dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL));
    DN(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, (void *)impl));
    const dnnl_memory_desc_t *wpref = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_primitive_t conv;
    DN(dnnl_primitive_create(&conv, pd));
    /* the weights: the same values as kiln's (regenerated), reordered */
    float *w = malloc(sizeof(float) * (size_t)(M * C * 9));
    srand(2);
    for (int64_t i = 0; i < M * C * 9; i++) w[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * 0.1f;
    dnnl_memory_t ms, mw_plain, mw, mb, md;
    float *y = malloc(sizeof(float) * (size_t)(HW * HW * M));
    DN(dnnl_memory_create(&ms, &smd, eng, (void *)x));
    DN(dnnl_memory_create(&mw_plain, &wmd, eng, w));
    DN(dnnl_memory_create(&mw, wpref, eng, DNNL_MEMORY_ALLOCATE));
    DN(dnnl_memory_create(&mb, &bmd, eng, (void *)b));
    DN(dnnl_memory_create(&md, &dmd, eng, y));
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t reo;
    DN(dnnl_reorder_primitive_desc_create(&rpd, &wmd, eng, wpref, eng, NULL));
    DN(dnnl_primitive_create(&reo, rpd));
    dnnl_exec_arg_t rargs[2] = {{DNNL_ARG_FROM, mw_plain}, {DNNL_ARG_TO, mw}};
    DN(dnnl_primitive_execute(reo, st, 2, rargs));
    DN(dnnl_stream_wait(st));
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, md}};
    double t[RUNS];
    for (int i = 0; i < 5; i++) DN(dnnl_primitive_execute(conv, st, 4, args));
    DN(dnnl_stream_wait(st));
    for (int i = 0; i < RUNS; i++) {
        double t0 = kiln__now_us();
        DN(dnnl_primitive_execute(conv, st, 4, args));
        DN(dnnl_stream_wait(st));
        t[i] = kiln__now_us() - t0;
    }
    float md_ = 0.0f;
    for (int64_t i = 0; i < HW * HW * M; i++) md_ = fmaxf(md_, fabsf(y[i] - y_ref[i]));
    *maxdiff = md_;
    dnnl_primitive_destroy(reo);
    dnnl_primitive_desc_destroy(rpd);
    dnnl_primitive_destroy(conv);
    dnnl_primitive_desc_destroy(pd);
    dnnl_memory_destroy(ms), dnnl_memory_destroy(mw_plain), dnnl_memory_destroy(mw);
    dnnl_memory_destroy(mb), dnnl_memory_destroy(md);
    dnnl_primitive_attr_destroy(attr);
    dnnl_post_ops_destroy(po);
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
    free(w), free(y);
    return median(t, RUNS) / 1000.0;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    int use_dnnl = !(argc > 2 && !strcmp(argv[2], "nodnnl"));
    int only = argc > 3 ? atoi(argv[3]) : -1; /* one layer (0..3), run 1000 times: for perf */
    int tile = argc > 4 && atoi(argv[4]) == 2 ? 2 : 4;
    int layout = argc > 5 && atoi(argv[5]) == 2 ? KILN_WINO_C16 : 1; /* input and output */
    kiln_pool *pool = NULL;
    if (threads > 1) {
        if (kiln__pool_create(threads, &pool) != KILN_OK) return 1;
        kiln__pool_hold(pool, true);
    }
    static const int64_t shapes[4][2] = {{56, 64}, {28, 128}, {14, 256}, {7, 512}};
    printf("threads %d, avx512f %s, F(%dx%d, 3x3)\n", threads, kiln__wino_fast_available() ? "yes" : "no", tile,
           tile);
    /* kiln's layers first, then (the pool freed: its spinning workers
     * would take CPU time from OpenMP's) oneDNN's on the same data */
    double tw[4] = {0};
    float *xs[4] = {0}, *bs[4] = {0}, *ys[4] = {0};
    for (int s = 0; s < 4; s++) {
        if (only >= 0 && s != only) continue;
        int64_t HW = shapes[s][0], C = shapes[s][1], M = C;
        float *x = malloc(sizeof(float) * (size_t)(HW * HW * C)), *w = malloc(sizeof(float) * (size_t)(M * C * 9));
        float *b = malloc(sizeof(float) * (size_t)M), *y = malloc(sizeof(float) * (size_t)(HW * HW * M));
        /* 64-byte aligned, as kiln allocates them (unaligned rows split every load) */
        float *u = aligned_alloc(64, (sizeof(float) * kiln__wino_packed_floats(C, M, tile) + 63) / 64 * 64);
        for (int64_t i = 0; i < HW * HW * C; i++) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        for (int64_t i = 0; i < M; i++) b[i] = 0.01f * (float)(i % 7);
        srand(2);
        for (int64_t i = 0; i < M * C * 9; i++) w[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * 0.1f;
        kiln__wino_pack(w, C, M, tile, u);
        size_t wsb = kiln__wino_workspace(1, HW, HW, C, M, 1, 1, 1, 1, tile, threads);
        void *ws = malloc(wsb);
        memset(ws, 0, wsb);
        kiln_wino_args a = {.x = x, .u = u, .tile = tile, .bias = b, .y = y, .N = 1, .H = HW, .W = HW, .C = C, .M = M,
                            .pt = 1, .pl = 1, .pb = 1, .pr = 1, .x_nhwc = layout, .y_nhwc = layout,
                            .act = KILN_FC_ACT_RELU, .ws = ws, .ws_bytes = wsb, .pool = pool};
        double t[RUNS];
        for (int i = 0; i < 5; i++) kiln__wino_run(&a);
        for (int i = 0; i < RUNS; i++) {
            double t0 = kiln__now_us();
            kiln__wino_run(&a);
            t[i] = kiln__now_us() - t0;
        }
        for (int i = 0; only >= 0 && i < 1000; i++) kiln__wino_run(&a);
        tw[s] = median(t, RUNS) / 1000.0;
        xs[s] = x, bs[s] = b, ys[s] = y;
        free(w), free(u), free(ws);
    }
    if (pool) kiln__pool_free(pool);
    pool = NULL;
    printf("%-16s %10s %10s %10s %10s %8s  %s\n", "layer", "wino ms", "GFLOP/s", "onednn ms", "GFLOP/s",
           "speedup", "maxdiff / oneDNN impl");
    for (int s = 0; s < 4; s++) {
        if (only >= 0 && s != only) continue;
        int64_t HW = shapes[s][0], C = shapes[s][1], M = C;
        double flops = 2.0 * (double)(HW * HW * C * M * 9);
        char name[32];
        snprintf(name, sizeof name, "%lldx%lld C=M=%lld", (long long)HW, (long long)HW, (long long)C);
        if (use_dnnl && layout == 1) {
            float diff;
            const char *impl = "?";
            double td = dnnl_time(HW, C, M, xs[s], bs[s], ys[s], &diff, &impl);
            printf("%-16s %10.3f %10.1f %10.3f %10.1f %7.2fx  %.2g / %s\n", name, tw[s], flops / tw[s] * 1e-6, td,
                   flops / td * 1e-6, td / tw[s], diff, impl);
        } else {
            printf("%-16s %10.3f %10.1f\n", name, tw[s], flops / tw[s] * 1e-6);
        }
        free(xs[s]), free(bs[s]), free(ys[s]);
    }
    return 0;
}
