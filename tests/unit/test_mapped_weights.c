/* test_mapped_weights.c -- an engine loaded from a file keeps its weights in
 * a read-only file mapping; kiln hands pages of that mapping back to the
 * kernel once nothing needs them resident:
 *   - while the load checks the file's checksum (16 MiB at a time), so a
 *     loaded engine is not resident as a whole;
 *   - after a layer that keeps its own packed copy of a weight has made it
 *     (its first run in a context), so the weight is not resident twice.
 * Checked through RssFile (/proc/self/status) around loading and running an
 * engine with a 32 MiB weight, and the outputs against a second context
 * (which has to read the released weight again from the file). */
#include "test.h"

#include "graph_build.h"
#include "backends/cpu/kernels/fused_transformer_cpu.h"
#include "backends/cpu/kernels/fused_transformer_dnnl.h"

#include <math.h>
#include <unistd.h>

#define K 2048
#define N 4096 /* 2048 x 4096 floats: a 32 MiB weight */

/* RssFile of this process in KiB (-1 when /proc is not readable). */
static long rss_file_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "RssFile: %ld kB", &v) == 1) break;
    fclose(f);
    return v;
}

static void run_once(kiln_engine *e, const float *x, float *y0) {
    kiln_context *c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    if (!c) return;
    CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, (int64_t[]){4, K}, x));
    CHECK_OK(kiln_context_run(c));
    const void *out = NULL;
    CHECK_OK(kiln_context_get_output(c, "mm_out", NULL, NULL, NULL, &out));
    if (out) memcpy(y0, out, sizeof(float) * 4 * N);
    kiln_context_free(c);
}

TEST(mapped_weights_released) {
    if (rss_file_kib() < 0) {
        printf("  /proc/self/status has no RssFile: skipped\n");
        return;
    }
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    if (!g) return;
    int x = add_input(g, "x", 2, (int64_t[]){4, K});
    int w = add_const(g, "w", 2, (int64_t[]){K, N}, -0.05f, 0.05f);
    int y = add_binary(g, KILN_OP_MatMul, "mm", x, w);
    mark_output(g, y);
    kiln__graph_link(g);
    kiln_model *m = model_of(g);
    kiln_builder *b = NULL;
    kiln_engine *built = NULL;
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_threads(b, 1));
    CHECK_OK(kiln_builder_set_tuning(b, 0));
    CHECK_OK(kiln_build(b, m, &built));
    char path[] = "/tmp/kiln_test_mapped_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    if (built) CHECK_OK(kiln_engine_save(built, path));
    kiln_engine_free(built);
    kiln_builder_free(b);
    float *xv = malloc(sizeof(float) * 4 * K), *y1 = malloc(sizeof(float) * 4 * N),
          *y2 = malloc(sizeof(float) * 4 * N);
    if (!xv || !y1 || !y2) abort();
    for (int i = 0; i < 4 * K; i++) xv[i] = frand();
    /* reference for two outputs, from the weight as built */
    const float *wd = g->values[w].data;
    double ref[2] = {0, 0};
    for (int k = 0; k < K; k++) {
        ref[0] += (double)xv[k] * wd[(size_t)k * N];
        ref[1] += (double)xv[3 * K + k] * wd[(size_t)k * N + N - 1];
    }
    kiln_model_free(m);

    const long weight_kib = (long)K * N * 4 / 1024;
    long r0 = rss_file_kib();
    kiln_engine *e = NULL;
    CHECK_OK(kiln_engine_load(path, &e));
    long r1 = rss_file_kib();
    printf("  RssFile: +%ld KiB after loading an engine with a %ld KiB weight\n", r1 - r0, weight_kib);
    CHECK(r1 - r0 < weight_kib / 4);

    if (e) {
        run_once(e, xv, y1);
        long r2 = rss_file_kib();
        printf("  RssFile: +%ld KiB after the first run\n", r2 - r0);
        /* the layer packs its weight (oneDNN or the AVX-512 kernel; the plain
         * sgemm tactic reads it in place and keeps it resident) */
        if (kiln__tf_dnnl_available() || kiln__sgemm512_available()) CHECK(r2 - r0 < weight_kib / 4);
        run_once(e, xv, y2); /* a new context reads the weight again */
        CHECK(memcmp(y1, y2, sizeof(float) * 4 * N) == 0);
        /* and the values are those of the weight */
        CHECK(fabs(y1[0] - ref[0]) < 1e-4 && fabs(y1[4 * N - 1] - ref[1]) < 1e-4);
    }
    free(xv);
    free(y1);
    free(y2);
    kiln_engine_free(e);
    unlink(path);
}

int main(void) {
    RUN(mapped_weights_released);
    return test_summary();
}
