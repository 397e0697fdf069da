/* test_cuda_engine.c -- CUDA engines end to end on the GPU (skips without
 * one): fp32 vs the committed reference, CUDA Graph capture and replay
 * (new data in the same device buffer, other shapes, turned off; buffers
 * that change from run to run, host inputs and outputs), and
 * fp16/bf16 engines (casts at the boundaries, outputs within reduced-
 * precision tolerance, a layer kept in fp32). Model: tests/data/tiny_mlp.onnx.
 * And a dynamic-batch CNN (tests/stress/stress_cnn.onnx) whose runs change
 * batch size as a server's do: more sizes than a layer keeps plans for, each
 * seen twice, every output checked against the CPU engine; and EfficientNet's
 * squeeze-excitation block (tests/data/se_block.onnx) at batch 1 to 32; and a
 * MobileNetV3-style net's NHWC chain (tests/data/tiny_mbv3.onnx); and NHWC
 * chains of fp16 CNNs built for a batch range (tests/data/tiny_dyncnn.onnx,
 * tiny_mbv3.onnx, tiny_convnext.onnx at batches 1 to 32); and inputs written on
 * the legacy default stream while it is busy (default_stream_inputs). */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>

#include "test.h"

#include "runtime/engine.h"

#define MODEL "tests/data/tiny_mlp.onnx"
#define IO "tests/data/tiny_mlp_io.bin"

static float ref_x[3 * 16], ref_y[3 * 8];

static kiln_engine *build(kiln_device dev, kiln_precision p, const char *keep) {
    kiln_model *m = NULL;
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    int64_t mn[2] = {1, 16}, op[2] = {3, 16}, mx[2] = {8, 16};
    CHECK_OK(kiln_model_load_onnx(MODEL, &m));
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_profile(b, "x", 2, mn, op, mx));
    CHECK_OK(kiln_builder_set_device(b, dev, 0));
    CHECK_OK(kiln_builder_set_precision(b, p));
    if (keep) CHECK_OK(kiln_builder_set_layer_precision(b, keep, KILN_PRECISION_FP32));
    CHECK_OK(kiln_build(b, m, &e));
    kiln_builder_free(b);
    kiln_model_free(m);
    return e;
}

/* max |a - b| / max |b| */
static double rel_err(const float *a, const float *b, int n) {
    double m = 0, r = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d;
        if (fabs(b[i]) > r) r = fabs(b[i]);
    }
    return r > 0 ? m / r : m;
}

/* runs engine e on host input x [n, 16], output into y [n, 8] */
static void run_host(kiln_engine *e, const float *x, int n, float *y) {
    kiln_context *c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    if (!c) return;
    int64_t dims[2] = {n, 16};
    CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, dims, x));
    CHECK_OK(kiln_context_set_output(c, "y", y, sizeof(float) * (size_t)n * 8));
    CHECK_OK(kiln_context_run(c));
    kiln_context_free(c);
}

TEST(fp32_reference) {
    kiln_engine *e = build(KILN_DEVICE_CUDA, KILN_PRECISION_FP32, NULL);
    if (!e) return;
    float y[24];
    run_host(e, ref_x, 3, y);
    CHECK(rel_err(y, ref_y, 24) < 1e-5);
    kiln_engine_free(e);
}

/* An input written into device memory on the legacy default stream, queued
 * behind a 64 MiB copy that keeps that stream busy for milliseconds, then
 * run at once on the context's own stream: the run must wait for it
 * (cuda_run_begin), not read the zeros the buffer held before. Five runs
 * with new values each time: plain, captured and replayed as a CUDA Graph.
 * A cudaMemcpy from pageable memory returns with its DMA still in flight,
 * which once gave nhwc_dynamic_batch a replay 65% off at batch 32. */
TEST(default_stream_inputs) {
    enum { N = 8 };
    const size_t big = (size_t)64 << 20;
    kiln_engine *e = build(KILN_DEVICE_CUDA, KILN_PRECISION_FP32, NULL);
    kiln_engine *cpu = build(KILN_DEVICE_CPU, KILN_PRECISION_FP32, NULL);
    kiln_context *c = NULL;
    void *hbig = NULL, *dbig = NULL;
    float *hx = NULL, *dx = NULL;
    float y[N * 8], want[N * 8];
    CHECK(cudaMallocHost(&hbig, big) == cudaSuccess);
    CHECK(cudaMalloc(&dbig, big) == cudaSuccess);
    CHECK(cudaMallocHost((void **)&hx, sizeof(float) * N * 16) == cudaSuccess);
    CHECK(cudaMalloc((void **)&dx, sizeof(float) * N * 16) == cudaSuccess);
    if (e && cpu && hbig && dbig && hx && dx) CHECK_OK(kiln_context_create(e, &c));
    for (int r = 0; c && r < 5; r++) {
        for (int i = 0; i < N * 16; i++) hx[i] = sinf(0.37f * (float)i + (float)r) + 0.5f;
        run_host(cpu, hx, N, want);
        CHECK(cudaMemset(dx, 0, sizeof(float) * N * 16) == cudaSuccess);
        CHECK(cudaDeviceSynchronize() == cudaSuccess);
        CHECK(cudaMemcpyAsync(dbig, hbig, big, cudaMemcpyHostToDevice, 0) == cudaSuccess);
        CHECK(cudaMemcpyAsync(dx, hx, sizeof(float) * N * 16, cudaMemcpyHostToDevice, 0) == cudaSuccess);
        int64_t dims[2] = {N, 16};
        CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, dims, dx));
        CHECK_OK(kiln_context_set_output(c, "y", y, sizeof y));
        CHECK_OK(kiln_context_run(c));
        double err = rel_err(y, want, N * 8);
        if (!(err < 1e-5)) fprintf(stderr, "  run %d%s: error %g\n", r, kiln__context_graph_active(c) ? " (CUDA Graph)" : "", err);
        CHECK(err < 1e-5);
    }
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    kiln_context_free(c);
    cudaFreeHost(hbig);
    cudaFree(dbig);
    cudaFreeHost(hx);
    cudaFree(dx);
    kiln_engine_free(e);
    kiln_engine_free(cpu);
}

TEST(graphs) {
    kiln_engine *e = build(KILN_DEVICE_CUDA, KILN_PRECISION_FP32, NULL);
    kiln_engine *cpu = build(KILN_DEVICE_CPU, KILN_PRECISION_FP32, NULL);
    if (!e || !cpu) goto out0;
    kiln_context *c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    if (!c) goto out0;
    float *dx = NULL, *dy = NULL;
    CHECK(cudaMalloc((void **)&dx, 8 * 16 * sizeof(float)) == cudaSuccess);
    CHECK(cudaMalloc((void **)&dy, 8 * 8 * sizeof(float)) == cudaSuccess);
    float x[8 * 16], y[8 * 8], want[8 * 8];
    for (int round = 0; round < 8; round++) {
        /* rounds 0-3 at batch 3, 4-5 at batch 5 (a new key), 6-7 with graphs off */
        int n = round < 4 ? 3 : 5;
        if (round == 6) CHECK_OK(kiln_context_set_cuda_graphs(c, 0));
        for (int i = 0; i < n * 16; i++) x[i] = sinf(0.37f * (float)(i + 31 * round));
        CHECK(cudaMemcpy(dx, x, sizeof(float) * (size_t)n * 16, cudaMemcpyHostToDevice) == cudaSuccess);
        int64_t dims[2] = {n, 16};
        CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, dims, dx));
        CHECK_OK(kiln_context_set_output(c, "y", dy, sizeof(float) * 8 * 8));
        CHECK_OK(kiln_context_run(c));
        CHECK(cudaMemcpy(y, dy, sizeof(float) * (size_t)n * 8, cudaMemcpyDeviceToHost) == cudaSuccess);
        run_host(cpu, x, n, want);
        double err = rel_err(y, want, n * 8);
        if (!(err < 1e-5)) fprintf(stderr, "  round %d: error %g\n", round, err);
        CHECK(err < 1e-5);
        /* captured on the second run of a key, replayed after; none when off */
        bool active = kiln__context_graph_active(c);
        if (round == 0 || round == 4 || round >= 6) CHECK(!active);
        else CHECK(active);
    }
    cudaFree(dx);
    cudaFree(dy);
    kiln_context_free(c);
out0:
    kiln_engine_free(e);
    kiln_engine_free(cpu);
}

/* Callers that hand other buffers at each run still get CUDA Graphs (graph_stage_io): a device
 * input and output in two buffers taken in turn (a framework's allocator), captured at the third
 * run and replayed after; and host input and output, captured at the second run. New values every
 * run: a replay that read the last run's input, or wrote the last run's output buffer, fails. */
TEST(graphs_new_buffers) {
    enum { N = 5 };
    kiln_engine *e = build(KILN_DEVICE_CUDA, KILN_PRECISION_FP32, NULL);
    kiln_engine *cpu = build(KILN_DEVICE_CPU, KILN_PRECISION_FP32, NULL);
    kiln_context *c = NULL;
    float *dx[2] = {NULL, NULL}, *dy[2] = {NULL, NULL};
    if (!e || !cpu) goto out;
    for (int i = 0; i < 2; i++) {
        CHECK(cudaMalloc((void **)&dx[i], sizeof(float) * N * 16) == cudaSuccess);
        CHECK(cudaMalloc((void **)&dy[i], sizeof(float) * N * 8) == cudaSuccess);
    }
    float x[N * 16], y[N * 8], want[N * 8];
    int64_t dims[2] = {N, 16};
    for (int host = 0; host < 2; host++) {
        CHECK_OK(kiln_context_create(e, &c));
        for (int r = 0; c && r < 6; r++) {
            for (int i = 0; i < N * 16; i++) x[i] = sinf(0.37f * (float)i + 1.3f * (float)(r + 7 * host));
            run_host(cpu, x, N, want);
            memset(y, 0, sizeof y);
            if (host) {
                CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, dims, x));
                CHECK_OK(kiln_context_set_output(c, "y", y, sizeof y));
            } else {
                CHECK(cudaMemcpy(dx[r % 2], x, sizeof x, cudaMemcpyHostToDevice) == cudaSuccess);
                CHECK(cudaMemset(dy[r % 2], 0, sizeof y) == cudaSuccess);
                CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, dims, dx[r % 2]));
                CHECK_OK(kiln_context_set_output(c, "y", dy[r % 2], sizeof y));
            }
            CHECK_OK(kiln_context_run(c));
            if (!host) CHECK(cudaMemcpy(y, dy[r % 2], sizeof y, cudaMemcpyDeviceToHost) == cudaSuccess);
            double err = rel_err(y, want, N * 8);
            bool active = kiln__context_graph_active(c);
            if (!(err < 1e-5) || active != (r >= 2 - host))
                fprintf(stderr, "  %s, run %d: error %g, graph %d\n", host ? "host" : "device", r, err, active);
            CHECK(err < 1e-5);
            CHECK(active == (r >= 2 - host));
        }
        kiln_context_free(c);
        c = NULL;
    }
out:
    for (int i = 0; i < 2; i++) {
        cudaFree(dx[i]);
        cudaFree(dy[i]);
    }
    kiln_engine_free(e);
    kiln_engine_free(cpu);
}

static int count_casts(kiln_engine *e) {
    const char *d = kiln_engine_describe(e, 0);
    int n = 0;
    for (const char *p = d; (p = strstr(p, " Cast ")) != NULL; p++) n++;
    return n;
}

TEST(reduced_precision) {
    kiln_precision ps[2] = {KILN_PRECISION_FP16, KILN_PRECISION_BF16};
    for (int k = 0; k < 2; k++) {
        kiln_engine *e = build(KILN_DEVICE_CUDA, ps[k], NULL);
        if (!e) continue;
        kiln_io_info in, out;
        CHECK_OK(kiln_engine_input_info(e, 0, &in));
        CHECK_OK(kiln_engine_output_info(e, 0, &out));
        CHECK(in.dtype == KILN_DTYPE_FLOAT32 && out.dtype == KILN_DTYPE_FLOAT32);
        CHECK(count_casts(e) >= 2);
        CHECK(kiln_engine_precision(e) == ps[k]);
        float y[24];
        run_host(e, ref_x, 3, y);
        double err = rel_err(y, ref_y, 24);
        printf("  %s: max err / max|ref| = %.2e\n", k ? "bf16" : "fp16", err);
        CHECK(err < (k ? 3e-2 : 5e-3));
        kiln_engine_free(e);
    }
}

/* Model `path` with input x [min_n..max_n (opt opt_n), c, hw, hw] (dev, precision). */
static kiln_engine *build_nchw(const char *path, int64_t c, int64_t hw, int64_t min_n, int64_t opt_n, int64_t max_n,
                               kiln_device dev, kiln_precision p) {
    kiln_model *m = NULL;
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    int64_t mn[4] = {min_n, c, hw, hw}, op[4] = {opt_n, c, hw, hw}, mx[4] = {max_n, c, hw, hw};
    CHECK_OK(kiln_model_load_onnx(path, &m));
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_profile(b, "x", 4, mn, op, mx));
    CHECK_OK(kiln_builder_set_device(b, dev, 0));
    CHECK_OK(kiln_builder_set_precision(b, p));
    CHECK_OK(kiln_build(b, m, &e));
    kiln_builder_free(b);
    kiln_model_free(m);
    return e;
}

/* The stress CNN for batch 1..NB of 3x16x16 (dev, precision). */
#define NB 20
static kiln_engine *build_cnn(kiln_device dev, kiln_precision p) {
    return build_nchw("tests/stress/stress_cnn.onnx", 3, 16, 1, 8, NB, dev, p);
}

static void run_cnn(kiln_context *c, const float *x, int n, float *probs, float *feat) {
    int64_t dims[4] = {n, 3, 16, 16};
    CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 4, dims, x));
    CHECK_OK(kiln_context_set_output(c, "probs", probs, sizeof(float) * (size_t)n * 10));
    CHECK_OK(kiln_context_set_output(c, "feat", feat, sizeof(float) * (size_t)n * 16));
    CHECK_OK(kiln_context_run(c));
}

TEST(batch_sizes_change_run_to_run) {
    kiln_precision ps[2] = {KILN_PRECISION_FP32, KILN_PRECISION_FP16};
    kiln_engine *cpu = build_cnn(KILN_DEVICE_CPU, KILN_PRECISION_FP32);
    static float x[NB * 3 * 16 * 16], p[NB * 10], f[NB * 16], wp[NB * 10], wf[NB * 16];
    for (int k = 0; cpu && k < 2; k++) {
        kiln_engine *e = build_cnn(KILN_DEVICE_CUDA, ps[k]);
        kiln_context *c = NULL, *cc = NULL;
        if (e) CHECK_OK(kiln_context_create(e, &c));
        CHECK_OK(kiln_context_create(cpu, &cc));
        for (int r = 0; c && cc && r < 2 * NB; r++) {
            int n = 1 + (r * 7) % NB; /* every size twice, in an order that jumps */
            for (int i = 0; i < n * 3 * 256; i++) x[i] = sinf(0.11f * (float)i + (float)r);
            run_cnn(c, x, n, p, f);
            run_cnn(cc, x, n, wp, wf);
            double ep = rel_err(p, wp, n * 10), ef = rel_err(f, wf, n * 16);
            double tol = k ? 2e-2 : 1e-4;
            if (!(ep < tol && ef < tol)) fprintf(stderr, "  %s batch %d: errors %g %g\n", k ? "fp16" : "fp32", n, ep, ef);
            CHECK(ep < tol && ef < tol);
        }
        kiln_context_free(c);
        kiln_context_free(cc);
        kiln_engine_free(e);
    }
    kiln_engine_free(cpu);
}

/* EfficientNet's squeeze-excitation block (tests/data/se_block.onnx: depthwise
 * conv, SiLU, GAP, two 1x1 convs on [N, C, 1, 1], the channel scale, a 1x1
 * projection), tuned at batch 32: an EfficientNet-B0 fp16 engine's first SE
 * 1x1 conv gave wrong values at batch 32 on the H200 (2026-12-04). */
TEST(se_block_at_batch_sizes) {
    kiln_precision ps[2] = {KILN_PRECISION_FP32, KILN_PRECISION_FP16};
    kiln_engine *cpu = build_nchw("tests/data/se_block.onnx", 32, 16, 1, 32, 32, KILN_DEVICE_CPU, KILN_PRECISION_FP32);
    static float x[32 * 32 * 256], y[32 * 16 * 256], want[32 * 16 * 256];
    static const int ns[4] = {32, 1, 8, 5};
    for (int k = 0; cpu && k < 2; k++) {
        kiln_engine *e = build_nchw("tests/data/se_block.onnx", 32, 16, 1, 32, 32, KILN_DEVICE_CUDA, ps[k]);
        kiln_context *c = NULL, *cc = NULL;
        if (e) CHECK_OK(kiln_context_create(e, &c));
        CHECK_OK(kiln_context_create(cpu, &cc));
        for (int r = 0; c && cc && r < 4; r++) {
            int n = ns[r];
            for (int i = 0; i < n * 32 * 256; i++) x[i] = sinf(0.013f * (float)i + (float)r);
            int64_t dims[4] = {n, 32, 16, 16};
            kiln_context *cs[2] = {c, cc};
            float *outs[2] = {y, want};
            for (int j = 0; j < 2; j++) {
                CHECK_OK(kiln_context_set_input(cs[j], "x", KILN_DTYPE_FLOAT32, 4, dims, x));
                CHECK_OK(kiln_context_set_output(cs[j], "y", outs[j], sizeof(float) * (size_t)n * 16 * 256));
                CHECK_OK(kiln_context_run(cs[j]));
            }
            double err = rel_err(y, want, n * 16 * 256), tol = k ? 2e-2 : 1e-4;
            if (!(err < tol)) fprintf(stderr, "  %s batch %d: error %g\n", k ? "fp16" : "fp32", n, err);
            CHECK(err < tol);
        }
        kiln_context_free(c);
        kiln_context_free(cc);
        kiln_engine_free(e);
    }
    kiln_engine_free(cpu);
}

/* A MobileNetV3/EfficientNet-style net (tests/data/tiny_mbv3.onnx, see
 * gen_tiny.py: depthwise 3x3 and 5x5/2 layers, SE blocks with HardSigmoid
 * and Sigmoid gates, a residual, an NHWC output) at a fixed shape, where
 * fp16/bf16 CUDA engines run one NHWC chain (kiln's depthwise kernel, the
 * SE Muls through views, the gates fused into their convolutions, no
 * conversion but the one back for `feat`): against the CPU's fp32 engine. */
#define MBV3 "tests/data/tiny_mbv3.onnx"
static kiln_engine *build_mbv3(kiln_device dev, kiln_precision p, int64_t n) {
    return build_nchw(MBV3, 3, 32, n, n, n, dev, p);
}

static void run_mbv3(kiln_engine *e, const float *x, float *y, float *feat, int64_t n) {
    kiln_context *c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    if (!c) return;
    int64_t dims[4] = {n, 3, 32, 32};
    CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 4, dims, x));
    CHECK_OK(kiln_context_set_output(c, "y", y, sizeof(float) * (size_t)n * 10));
    CHECK_OK(kiln_context_set_output(c, "feat", feat, sizeof(float) * (size_t)n * 24 * 8 * 8));
    CHECK_OK(kiln_context_run(c));
    kiln_context_free(c);
}

/* Batch 2 in fp16 and bf16, and batch 32 in fp16: the batch at which an
 * EfficientNet-B0 fp16 engine gave NaN (2026-12-04, "Next steps" in
 * docs/cuda.md); its SE blocks run in this net's NHWC chain too
 * (test_cuda_engine's se_block alone keeps NCHW: a batch range, and too few
 * layers per conversion for cuda_layout.c). */
#define MBV3_NMAX 32
TEST(nhwc_mobilenet) {
    static float x[MBV3_NMAX * 3 * 32 * 32], y0[MBV3_NMAX * 10], f0[MBV3_NMAX * 24 * 64], y1[MBV3_NMAX * 10],
        f1[MBV3_NMAX * 24 * 64];
    for (int i = 0; i < MBV3_NMAX * 3 * 32 * 32; i++) x[i] = sinf(0.731f * (float)i) + 0.3f * cosf(0.057f * (float)i);
    static const struct { kiln_precision p; int64_t n; } cs[3] = {
        {KILN_PRECISION_FP16, 2}, {KILN_PRECISION_BF16, 2}, {KILN_PRECISION_FP16, MBV3_NMAX}};
    for (int k = 0; k < 3; k++) {
        const int64_t n = cs[k].n;
        const bool bf = cs[k].p == KILN_PRECISION_BF16;
        kiln_engine *cpu = k == 1 ? NULL : build_mbv3(KILN_DEVICE_CPU, KILN_PRECISION_FP32, n);
        if (cpu) run_mbv3(cpu, x, y0, f0, n); /* (k = 1: batch 2's reference, kept from k = 0) */
        kiln_engine_free(cpu);
        kiln_engine *e = build_mbv3(KILN_DEVICE_CUDA, cs[k].p, n);
        if (!e) continue;
        const char *d = kiln_engine_describe(e, 0);
        int tr = 0;
        for (const char *p = d; (p = strstr(p, " Transpose ")) != NULL; p++) tr++;
        CHECK(tr == 1); /* feat back to NCHW */
        CHECK(strstr(d, "nhwc") != NULL);
        /* the SE gate's HardSigmoid is the epilogue of its 1x1 convolution */
        CHECK(strstr(d, "b1_se_r+b1_se_gate") != NULL && strstr(d, " HardSigmoid ") == NULL);
        run_mbv3(e, x, y1, f1, n);
        double ey = rel_err(y1, y0, n * 10), ef = rel_err(f1, f0, n * 24 * 64);
        printf("  %s batch %lld: y max err / max|ref| = %.2e, feat %.2e, %d Transpose\n", bf ? "bf16" : "fp16",
               (long long)n, ey, ef, tr);
        CHECK(ey < (bf ? 5e-2 : 1e-2) && ef < (bf ? 5e-2 : 1e-2));
        kiln_engine_free(e);
    }
}

/* Whether every convolution, pool and squeeze-excite layer of engine e's
 * description runs NHWC (1x1 convolutions on [N, C, 1, 1] values excepted:
 * the same bytes in both layouts) and its activations keep the symbolic batch;
 * counts its Transposes (the chain's conversions). */
static bool all_nhwc(kiln_engine *e, int *transposes, int *nhwc_layers) {
    const char *d = kiln_engine_describe(e, 0);
    bool ok = d != NULL;
    *transposes = *nhwc_layers = 0;
    for (const char *l = d; ok && l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        const char *end = strchr(l, '\n');
        int len = end ? (int)(end - l) : (int)strlen(l);
        char line[512];
        snprintf(line, sizeof line, "%.*s", len, l);
        char op[64] = "", name[256] = "", kern[128] = "";
        int idx;
        if (sscanf(line, "%d %63s %255s kernel %127s", &idx, op, name, kern) != 4) continue;
        *transposes += !strcmp(op, "Transpose");
        /* (kiln.SqueezeExcite pools its input as GlobalAveragePool does) */
        bool conv = !strcmp(op, "FusedConv"), pool = strstr(op, "Pool") != NULL || !strcmp(op, "SqueezeExcite");
        if (!conv && !pool) continue;
        if (strstr(kern, "nhwc")) {
            ++*nhwc_layers;
            /* kiln inspect's layout column: the input NHWC or NCHW, the output NHWC
             * (a GlobalAveragePool's [N, C, 1, 1] output: nchw, the same bytes) */
            if (!strstr(line, conv ? "->nhwc" : "layout nhwc->")) {
                fprintf(stderr, "  no NHWC layout shown: %s\n", line);
                ok = false;
            }
        } else if (!(conv && strstr(line, "x1x1]"))) {
            fprintf(stderr, "  not NHWC: %s\n", line);
            ok = false;
        }
        if (!strstr(line, "-> [batchx")) {
            fprintf(stderr, "  batch not dynamic: %s\n", line);
            ok = false;
        }
    }
    return ok;
}

/* fp16 CNNs built for a batch range (min 1 / opt 8 / max 32, as a server's
 * engine is: LitServe and Ray Serve fill its batch): tiny_dyncnn.onnx
 * (pools, a residual, a depthwise layer, an SE block, an NCHW input into a
 * pool and an NHWC value out to an output), tiny_mbv3.onnx (the stem
 * converting the input itself) and tiny_convnext.onnx (7x7 depthwise layers,
 * the Transposes around LayerNorms and MLPs as views: 3 Transposes left, the
 * `feat` output's conversion and two that move no byte on [N, C, 1, 1]
 * values) and tiny_regnet.onnx (grouped 3x3 layers of 24 and 8 channels a
 * group: kiln's tensor-core kernel or cuDNN's NHWC engines, as tuned and
 * judged). Every convolution and pool runs NHWC with
 * the batch taken at run time (before, an engine of a dynamic batch got no
 * NHWC chain: every layer NCHW); runs at batches 1, 5, 8 and 32, each a few
 * times in a row from device buffers (a CUDA Graph captured at the second
 * run and replayed: no layer allocates at a batch it was not tuned at),
 * against the CPU's fp32 engine. */
TEST(nhwc_dynamic_batch) {
    static const struct { const char *path; int64_t c; int transposes, min_nhwc; } ms[4] = {
        {"tests/data/tiny_dyncnn.onnx", 8, 2, 10}, {MBV3, 3, 1, 10}, {"tests/data/tiny_convnext.onnx", 3, 3, 5},
        {"tests/data/tiny_regnet.onnx", 3, 1, 10}};
    enum { NMAX = 32, HW = 32 * 32, FEAT = 24 * 8 * 8 };
    static float x[NMAX * 8 * HW], y[NMAX * 10], f[NMAX * FEAT], wy[NMAX * 10], wf[NMAX * FEAT];
    static const int ns[] = {8, 8, 8, 1, 5, 5, 5, 32, 32, 32, 1, 1, 8};
    for (int m = 0; m < 4; m++) {
        kiln_engine *e = build_nchw(ms[m].path, ms[m].c, 32, 1, 8, NMAX, KILN_DEVICE_CUDA, KILN_PRECISION_FP16);
        kiln_engine *cpu = build_nchw(ms[m].path, ms[m].c, 32, 1, 8, NMAX, KILN_DEVICE_CPU, KILN_PRECISION_FP32);
        kiln_context *c = NULL, *cc = NULL;
        float *dx = NULL, *dy = NULL, *df = NULL;
        if (!e || !cpu) goto next;
        int tr = 0, nl = 0;
        CHECK(all_nhwc(e, &tr, &nl));
        printf("  %s: %d NHWC layers, %d Transpose\n", ms[m].path, nl, tr);
        CHECK(tr == ms[m].transposes && nl >= ms[m].min_nhwc);
        CHECK_OK(kiln_context_create(e, &c));
        CHECK_OK(kiln_context_create(cpu, &cc));
        CHECK(cudaMalloc((void **)&dx, sizeof x) == cudaSuccess);
        CHECK(cudaMalloc((void **)&dy, sizeof y) == cudaSuccess);
        CHECK(cudaMalloc((void **)&df, sizeof f) == cudaSuccess);
        for (size_t r = 0; c && cc && dx && dy && df && r < sizeof ns / sizeof ns[0]; r++) {
            int64_t n = ns[r], xn = n * ms[m].c * HW;
            for (int64_t i = 0; i < xn; i++) x[i] = sinf(0.731f * (float)i + (float)r) + 0.3f * cosf(0.057f * (float)i);
            int64_t dims[4] = {n, ms[m].c, 32, 32};
            CHECK(cudaMemcpy(dx, x, sizeof(float) * (size_t)xn, cudaMemcpyHostToDevice) == cudaSuccess);
            CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 4, dims, dx));
            CHECK_OK(kiln_context_set_output(c, "y", dy, sizeof y));
            CHECK_OK(kiln_context_set_output(c, "feat", df, sizeof f));
            CHECK_OK(kiln_context_run(c));
            CHECK(cudaMemcpy(y, dy, sizeof(float) * (size_t)n * 10, cudaMemcpyDeviceToHost) == cudaSuccess);
            CHECK(cudaMemcpy(f, df, sizeof(float) * (size_t)(n * FEAT), cudaMemcpyDeviceToHost) == cudaSuccess);
            CHECK_OK(kiln_context_set_input(cc, "x", KILN_DTYPE_FLOAT32, 4, dims, x));
            CHECK_OK(kiln_context_set_output(cc, "y", wy, sizeof wy));
            CHECK_OK(kiln_context_set_output(cc, "feat", wf, sizeof wf));
            CHECK_OK(kiln_context_run(cc));
            double ey = rel_err(y, wy, (int)n * 10), ef = rel_err(f, wf, (int)(n * FEAT));
            bool again = r > 0 && ns[r - 1] == n, graph = kiln__context_graph_active(c);
            printf("  batch %lld: y max err / max|ref| = %.2e, feat %.2e%s\n", (long long)n, ey, ef,
                   graph ? " (CUDA Graph)" : "");
            CHECK(ey < 1e-2 && ef < 1e-2);
            if (again) CHECK(graph); /* captured at the second run, replayed at the third */
        }
    next:
        cudaFree(dx);
        cudaFree(dy);
        cudaFree(df);
        kiln_context_free(c);
        kiln_context_free(cc);
        kiln_engine_free(e);
        kiln_engine_free(cpu);
    }
}

int main(void) {
    if (!kiln_device_available(KILN_DEVICE_CUDA)) {
        printf("no CUDA device: skipping\n0 passed, 0 failed, 9 skipped\n");
        return 0;
    }
    FILE *f = fopen(IO, "rb");
    int ok = f && fread(ref_x, sizeof ref_x, 1, f) == 1 && fread(ref_y, sizeof ref_y, 1, f) == 1;
    if (f) fclose(f);
    if (!ok) {
        printf("FAIL cannot read %s\n0 passed, 1 failed\n", IO);
        return 1;
    }
    RUN(fp32_reference);
    RUN(graphs);
    RUN(graphs_new_buffers);
    RUN(default_stream_inputs);
    RUN(reduced_precision);
    RUN(batch_sizes_change_run_to_run);
    RUN(se_block_at_batch_sizes);
    RUN(nhwc_mobilenet);
    RUN(nhwc_dynamic_batch);
    return test_summary();
}
