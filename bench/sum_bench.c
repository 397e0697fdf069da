/* sum_bench.c -- oneDNN 1x1 convolution + bias + residual + ReLU, one
 * thread, the ways kiln could run a ResNet conv3 layer: residual as a sum
 * post-op in place (what kiln does), as a binary add post-op from its own
 * buffer, no residual (the downsample's cost), and the blocked nChw16c
 * layout instead of NHWC. Each timed run follows a 64 MiB write (cold
 * caches, as inside a network). Not built by CMake:
 *
 *   gcc -O2 bench/sum_bench.c -ldnnl -lm -o /tmp/sum_bench
 *   OMP_NUM_THREADS=1 /tmp/sum_bench N C M HW      # e.g. 4 64 256 56
 */
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DN(call)                                                          \
    do {                                                                  \
        dnnl_status_t s_ = (call);                                        \
        if (s_ != dnnl_success) {                                         \
            fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #call, s_); \
            exit(1);                                                      \
        }                                                                 \
    } while (0)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { PLAIN, SUM, BINARY, NONT };
static const char *mode_name[] = {"no residual", "sum in place", "binary add", "sum, nt"};

static void run(int64_t N, int64_t C, int64_t M, int64_t HW, int mode, dnnl_format_tag_t stag, dnnl_format_tag_t tag, char *flush,
                size_t flush_bytes) {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    DN(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DN(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    dnnl_dims_t sd = {N, C, HW, HW}, wd = {M, C, 1, 1}, bd = {M}, dd = {N, M, HW, HW};
    dnnl_dims_t strides = {1, 1}, pad = {0, 0};
    dnnl_memory_desc_t smd, wany, bmd, dmd;
    DN(dnnl_memory_desc_init_by_tag(&smd, 4, sd, dnnl_f32, stag));
    DN(dnnl_memory_desc_init_by_tag(&wany, 4, wd, dnnl_f32, dnnl_format_tag_any));
    DN(dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_a));
    DN(dnnl_memory_desc_init_by_tag(&dmd, 4, dd, dnnl_f32, tag));
    dnnl_convolution_desc_t cd;
    DN(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &smd, &wany, &bmd,
                                          &dmd, strides, pad, pad));
    dnnl_post_ops_t po;
    dnnl_primitive_attr_t attr;
    DN(dnnl_post_ops_create(&po));
    if (mode == SUM) DN(dnnl_post_ops_append_sum(po, 1.0f));
    if (mode == BINARY) DN(dnnl_post_ops_append_binary(po, dnnl_binary_add, &dmd));
    DN(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f));
    DN(dnnl_primitive_attr_create(&attr));
    DN(dnnl_primitive_attr_set_post_ops(attr, po));
    dnnl_primitive_desc_t pd;
    DN(dnnl_primitive_desc_create(&pd, &cd, attr, eng, NULL));
    const char *impl;
    DN(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, (void *)&impl));
    const dnnl_memory_desc_t *wpref = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_primitive_t conv;
    DN(dnnl_primitive_create(&conv, pd));
    dnnl_memory_t ms, mw, mb, md, mr;
    DN(dnnl_memory_create(&ms, &smd, eng, DNNL_MEMORY_ALLOCATE));
    DN(dnnl_memory_create(&mw, wpref, eng, DNNL_MEMORY_ALLOCATE));
    DN(dnnl_memory_create(&mb, &bmd, eng, DNNL_MEMORY_ALLOCATE));
    DN(dnnl_memory_create(&md, &dmd, eng, DNNL_MEMORY_ALLOCATE));
    DN(dnnl_memory_create(&mr, &dmd, eng, DNNL_MEMORY_ALLOCATE));
    void *p;
    size_t nbytes[4] = {(size_t)(N * C * HW * HW * 4), dnnl_memory_desc_get_size(wpref), (size_t)M * 4,
                        (size_t)(N * M * HW * HW * 4)};
    dnnl_memory_t mems[4] = {ms, mw, mb, md};
    for (int i = 0; i < 4; i++) {
        DN(dnnl_memory_get_data_handle(mems[i], &p));
        float *f = p;
        for (size_t k = 0; k < nbytes[i] / 4; k++) f[k] = (float)((k * 7 + i) % 13) * 0.01f;
    }
    DN(dnnl_memory_get_data_handle(mr, &p));
    memset(p, 0, nbytes[3]);
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, md},
                               {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, mr}};
    int nargs = mode == BINARY ? 5 : 4;
    enum { RUNS = 25 };
    double t[RUNS];
    for (int r = -3; r < RUNS; r++) {
        memset(flush, r & 0xff, flush_bytes);
        double t0 = now();
        DN(dnnl_primitive_execute(conv, st, nargs, args));
        DN(dnnl_stream_wait(st));
        if (r >= 0) t[r] = now() - t0;
    }
    qsort(t, RUNS, sizeof t[0], cmp_d);
    printf("%-8s-> %-8s %-13s %7.3f ms  %6.1f GMAC/s  %s\n", stag == dnnl_acdb ? "nhwc" : "nChw16c",
           tag == dnnl_acdb ? "nhwc" : "nChw16c", mode_name[mode],
           t[RUNS / 2] * 1e3, N * M * C * HW * HW / t[RUNS / 2] * 1e-9, impl);
    dnnl_primitive_destroy(conv);
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    dnnl_post_ops_destroy(po);
    for (int i = 0; i < 4; i++) dnnl_memory_destroy(mems[i]);
    dnnl_memory_destroy(mr);
    dnnl_stream_destroy(st);
    dnnl_engine_destroy(eng);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: sum_bench N C M HW\n");
        return 2;
    }
    int64_t N = atoll(argv[1]), C = atoll(argv[2]), M = atoll(argv[3]), HW = atoll(argv[4]);
    size_t fb = (size_t)64 << 20;
    char *flush = malloc(fb);
    dnnl_format_tag_t tags[2] = {dnnl_acdb, dnnl_aBcd16b};
    for (int k = 0; k < 4; k += 3)
        for (int mode = PLAIN; mode <= SUM; mode++) run(N, C, M, HW, mode, tags[k & 1], tags[k >> 1], flush, fb);
    free(flush);
    return 0;
}
