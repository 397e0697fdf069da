/* test_fusion_conv.c -- the convolution rewrites (src/passes/fuse_conv.c),
 * kiln.FusedConv's tactics (src/ops/fused_conv.c, dnnl_conv.c) and tactic
 * tuning with its timing cache (src/builder/tune.c), on small graphs built
 * in memory: optimized vs unoptimized builds give the same outputs, the
 * fused layers appear in the description, every tactic computes the same
 * result, and a timing cache is written and read back. */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "test.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/cpu_layout.h"

#include "graph_build.h"
#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "ops/elementwise_impl.h"
#include "backends/cpu/kernels/conv_pwdw.h"
#include "backends/cpu/kernels/conv_direct.h"
#include "backends/cpu/kernels/conv_wino.h"
#include "backends/cpu/kernels/fused_conv_cpu.h"
#include "format/format.h"
#include "runtime/engine.h"

/* ---- building and running engines --------------------------------------- */

typedef struct bopts {
    int opt, tuning, threads;
    kiln_precision prec;
    const char *cache;
    int fast_math;
} bopts;

static kiln_engine *build(const kiln_model *m, bopts o) {
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_optimization(b, o.opt));
    CHECK_OK(kiln_builder_set_tuning(b, o.tuning));
    CHECK_OK(kiln_builder_set_threads(b, o.threads ? o.threads : 1));
    if (o.prec) CHECK_OK(kiln_builder_set_precision(b, o.prec));
    if (o.cache) CHECK_OK(kiln_builder_set_timing_cache(b, o.cache));
    if (o.fast_math) CHECK_OK(kiln_builder_set_fast_math(b, 1));
    CHECK_OK(kiln_build(b, m, &e));
    kiln_builder_free(b);
    return e;
}

/* Runs e on x (input 0, shape xd) and copies output k into y (cap floats);
 * returns the element count. */
static int64_t run(kiln_engine *e, const float *x, const int64_t *xd, int k, float *y, int64_t cap) {
    kiln_context *c = NULL;
    int64_t n = -1;
    if (!e) return -1;
    CHECK_OK(kiln_context_create(e, &c));
    if (!c) return -1;
    const kiln_graph *g = e->graph;
    CHECK_OK(kiln_context_set_input(c, g->values[g->inputs[0]].name, KILN_DTYPE_FLOAT32, 4, xd, x));
    CHECK_OK(kiln_context_run(c));
    const void *data = NULL;
    int rank = 0;
    int64_t dims[8];
    CHECK_OK(kiln_context_get_output(c, g->values[g->outputs[k]].name, NULL, &rank, dims, &data));
    if (data) {
        n = kiln__numel(rank, dims);
        if (n > cap) n = cap;
        memcpy(y, data, sizeof(float) * (size_t)n);
    }
    kiln_context_free(c);
    return n;
}

#define BIG (1 << 20)
static float x_in[BIG], y_ref[BIG], y_opt[BIG];

/* Runs e (input "x" of shape xd, x_in) in a new context: true when the run
 * fails with status `want` and a message holding m1 and (if not NULL) m2;
 * with m1 NULL, true when it succeeds. */
static bool run_fails(kiln_engine *e, const int64_t *xd, kiln_status want, const char *m1, const char *m2) {
    kiln_context *c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 4, xd, x_in));
    kiln_status st = c ? kiln_context_run(c) : KILN_ERR_INTERNAL;
    bool ok = m1 ? st == want && strstr(kiln_last_error(), m1) && (!m2 || strstr(kiln_last_error(), m2))
                 : st == KILN_OK;
    if (!ok) fprintf(stderr, "  run: status %d, %s\n", (int)st, st ? kiln_last_error() : "ok");
    kiln_context_free(c);
    return ok;
}

/* run_fails with KILN_ERR_MODEL (a layer refusing what the engine says). */
static bool run_refused(kiln_engine *e, const int64_t *xd, const char *m1, const char *m2) {
    return run_fails(e, xd, KILN_ERR_MODEL, m1, m2);
}

/* Attribute values a layer refuses (a damaged or foreign engine): the
 * engine writer (like the loader) refuses e, naming them (m1). */
static bool write_refused(const kiln_engine *e, const char *m1) {
    void *blob = NULL;
    size_t size = 0;
    kiln_status st = kiln_engine_serialize(e, &blob, &size);
    kiln_free(blob);
    bool ok = st != KILN_OK && strstr(kiln_last_error(), m1);
    if (!ok) fprintf(stderr, "  serialize: status %d, %s\n", (int)st, st ? kiln_last_error() : "ok");
    return ok;
}

/* e serialized and loaded back (NULL, with a failed check, if that fails). */
static kiln_engine *reload(const kiln_engine *e) {
    void *blob = NULL;
    size_t size = 0;
    kiln_engine *e2 = NULL;
    CHECK_OK(kiln_engine_serialize(e, &blob, &size));
    if (blob) CHECK_OK(kiln_engine_load_memory(blob, size, &e2));
    kiln_free(blob);
    return e2;
}

static void fill_x(int64_t n) {
    for (int64_t i = 0; i < n; i++) x_in[i] = frand();
}

/* Builds m optimized and not, compares every output (tolerance tol). */
static void compare_opt(const kiln_model *m, const int64_t *xd, double tol) {
    kiln_engine *e0 = build(m, (bopts){.opt = 0, .tuning = 0});
    kiln_engine *e1 = build(m, (bopts){.opt = 1, .tuning = 1});
    fill_x(kiln__numel(4, xd));
    for (int k = 0; e0 && e1 && k < m->graph->n_outputs; k++) {
        int64_t n0 = run(e0, x_in, xd, k, y_ref, BIG), n1 = run(e1, x_in, xd, k, y_opt, BIG);
        CHECK(n0 > 0 && n0 == n1);
        double err = rel_err(y_opt, y_ref, n0);
        if (!(err <= tol)) fprintf(stderr, "  output %d: relative error %g > %g\n", k, err, tol);
        CHECK(err <= tol);
    }
    kiln_engine_free(e0);
    kiln_engine_free(e1);
}

/* ---- tests ------------------------------------------------------------------ */

/* Conv -> BN with a weight named by 302 characters: the folded weights are
 * constants named after it (kiln__graph_add_const), and a name past its
 * buffer lost the number that makes it unique, so the build looped forever. */
TEST(long_weight_name) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[4] = {1, 4, 6, 6};
    char name[301];
    memset(name, 'c', 300);
    name[300] = 0;
    int x = add_input(g, "x", 4, xd);
    mark_output(g, add_bnorm(g, "bn1", add_conv(g, name, x, 4, 4, 3, 1, 1, 1, 1), 4));
    kiln_model *m = model_of(g);
    compare_opt(m, xd, 1e-5);
    kiln_model_free(m);
}

/* Conv -> BN -> Add(x) -> Relu: one FusedConv named after all four. */
TEST(conv_bn_add_relu) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[4] = {2, 8, 10, 10};
    int x = add_input(g, "x", 4, xd);
    int c = add_conv(g, "conv1", x, 8, 8, 3, 1, 1, 1, 1);
    int b = add_bnorm(g, "bn1", c, 8);
    int a = add_binary(g, KILN_OP_Add, "add1", x, b);
    mark_output(g, add_unary(g, KILN_OP_Relu, "relu1", a, NULL));
    kiln_model *m = model_of(g);
    compare_opt(m, xd, 1e-5);
    kiln_engine *e = build(m, (bopts){.opt = 1, .tuning = 0});
    CHECK(e && e->graph->n_nodes == 1);
    CHECK(e && count_op(e, KILN_OP_FusedConv) == 1);
    const kiln_node *n = e ? find_layer(e, "conv1+bn1+add1+relu1") : NULL;
    CHECK(n != NULL);
    if (n) {
        const kiln_fused_conv_attrs *fa = n->attrs;
        CHECK(fa->act == KILN_FC_ACT_RELU && fa->has_residual == 1 && n->n_in == 4);
    }
    const char *d = e ? kiln_engine_describe(e, 0) : "";
    CHECK(strstr(d, "FusedConv") && strstr(d, "conv1+bn1+add1+relu1") && strstr(d, "tactic"));
    const char *j = e ? kiln_engine_describe(e, 1) : "";
    CHECK(strstr(j, "\"tactic\": {\"id\": 0, \"name\": \"own\""));
    kiln_engine_free(e);
    /* unoptimized: the four nodes stay */
    e = build(m, (bopts){.opt = 0, .tuning = 0});
    CHECK(e && e->graph->n_nodes == 4 && count_op(e, KILN_OP_FusedConv) == 0);
    kiln_engine_free(e);
    kiln_model_free(m);
}

static void set_fc_tactic(kiln_engine *e, int tactic);
static int each_tactic_matches(kiln_engine *e, const int64_t *xd, int out, int64_t n0);

/* Every activation the rewrite knows, each on its own branch; every CPU
 * tactic computes each of them (oneDNN's post-ops, the direct kernel's
 * epilogue) as the own kernel does. */
TEST(activations) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[4] = {1, 6, 9, 9};
    int x = add_input(g, "x", 4, xd);
    /* Relu6 as Clip(0, 6) */
    int c = add_conv(g, "c_clip", x, 6, 8, 3, 1, 1, 1, 1);
    int in3[3] = {c, add_scalar(g, "lo", 0.0f), add_scalar(g, "hi", 0.3f)};
    mark_output(g, add_node(g, KILN_OP_Clip, "clip", 3, in3, NULL));
    /* Clip with a min only */
    c = add_conv(g, "c_clipmin", x, 6, 8, 3, 1, 1, 1, 1);
    int in2[2] = {c, add_scalar(g, "lo2", -0.1f)};
    mark_output(g, add_node(g, KILN_OP_Clip, "clipmin", 2, in2, NULL));
    kiln_ew_act_attrs la = {.alpha = 0.1f};
    mark_output(g, add_unary(g, KILN_OP_LeakyRelu, "leaky", add_conv(g, "c_leaky", x, 6, 8, 3, 2, 1, 1, 1), &la));
    mark_output(g, add_unary(g, KILN_OP_Sigmoid, "sig", add_conv(g, "c_sig", x, 6, 8, 1, 1, 0, 1, 1), NULL));
    mark_output(g, add_unary(g, KILN_OP_HardSwish, "hsw", add_conv(g, "c_hsw", x, 6, 6, 3, 1, 1, 6, 1), NULL));
    c = add_conv(g, "c_silu", x, 6, 8, 3, 1, 2, 2, 2);
    int s = add_unary(g, KILN_OP_Sigmoid, "silu_sig", c, NULL);
    mark_output(g, add_binary(g, KILN_OP_Mul, "silu_mul", c, s));
    /* HardSigmoid with slopes that reach both clamps, one after a residual */
    kiln_ew_act_attrs hsa = {.alpha = 1.5f, .beta = 0.5f}, hsb = {.alpha = -0.7f, .beta = 0.4f};
    mark_output(g, add_unary(g, KILN_OP_HardSigmoid, "hsig", add_conv(g, "c_hsig", x, 6, 8, 1, 1, 0, 1, 1), &hsa));
    c = add_conv(g, "c_hsigr", x, 6, 6, 3, 1, 1, 1, 1);
    mark_output(g, add_unary(g, KILN_OP_HardSigmoid, "hsigr", add_binary(g, KILN_OP_Add, "hsigr_add", c, x), &hsb));
    kiln_model *m = model_of(g);
    compare_opt(m, xd, 1e-5);
    kiln_engine *e = build(m, (bopts){.opt = 1, .tuning = 0});
    CHECK(e && e->graph->n_nodes == 8 && count_op(e, KILN_OP_FusedConv) == 8 && count_op(e, KILN_OP_HardSigmoid) == 0);
    const char *names[8] = {"c_clip+clip", "c_clipmin+clipmin", "c_leaky+leaky", "c_sig+sig",
                            "c_hsw+hsw", "c_silu+silu_sig+silu_mul", "c_hsig+hsig", "c_hsigr+hsigr_add+hsigr"};
    int acts[8] = {KILN_FC_ACT_CLIP, KILN_FC_ACT_CLIP, KILN_FC_ACT_LEAKY_RELU, KILN_FC_ACT_SIGMOID,
                   KILN_FC_ACT_HARD_SWISH, KILN_FC_ACT_SILU, KILN_FC_ACT_HARD_SIGMOID, KILN_FC_ACT_HARD_SIGMOID};
    for (int i = 0; e && i < 8; i++) {
        const kiln_node *n = find_layer(e, names[i]);
        CHECK(n != NULL);
        if (!n) {
            fprintf(stderr, "  missing layer %s\n", names[i]);
            continue;
        }
        const kiln_fused_conv_attrs *fa = n->attrs;
        CHECK(fa->act == acts[i]);
        const kiln_ew_act_attrs *h = i == 6 ? &hsa : &hsb;
        if (i >= 6) CHECK(fa->alpha == h->alpha && fa->beta == h->beta && fa->has_residual == (i == 7));
    }
    int n_multi = 0;
    for (int k = 0; e && k < e->graph->n_outputs; k++) {
        set_fc_tactic(e, 0);
        fill_x(kiln__numel(4, xd));
        int64_t n0 = run(e, x_in, xd, k, y_ref, BIG);
        CHECK(n0 > 0);
        n_multi += each_tactic_matches(e, xd, k, n0);
    }
    CHECK(n_multi > 0 || (!kiln__have_dnnl() && !kiln__direct_fast_available()));
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* A MobileNetV3-style net (tests/data/tiny_mbv3.onnx, gen_tiny.py): its
 * squeeze-excite gate, Conv 1x1 + HardSigmoid, is one FusedConv (no
 * HardSigmoid layer is left) and gives the unoptimized outputs. The
 * activation's number survives an engine file, and a file whose FusedConv
 * holds a number past the last activation is refused on load. */
TEST(hard_sigmoid_se_gate) {
    kiln_model *m = NULL;
    CHECK_OK(kiln_model_load_onnx("tests/data/tiny_mbv3.onnx", &m));
    if (!m) return;
    int64_t xd[4] = {1, 3, 32, 32}; /* (the dynamic batch without a profile: 1) */
    compare_opt(m, xd, 1e-5);
    kiln_engine *e = build(m, (bopts){.opt = 1, .tuning = 0});
    const kiln_node *gate = e ? find_layer(e, "b1_se_r+b1_se_gate") : NULL;
    CHECK(e && gate && count_op(e, KILN_OP_HardSigmoid) == 0);
    if (!gate) {
        kiln_engine_free(e);
        kiln_model_free(m);
        return;
    }
    const kiln_fused_conv_attrs *fa = gate->attrs;
    CHECK(fa->act == KILN_FC_ACT_HARD_SIGMOID && fa->alpha == 0.2f && fa->beta == 0.5f); /* (ONNX's defaults) */
    void *bytes = NULL;
    size_t size = 0;
    CHECK_OK(kiln_engine_serialize(e, &bytes, &size));
    kiln_engine *back = NULL;
    if (bytes) CHECK_OK(kiln_engine_load_memory(bytes, size, &back));
    const kiln_node *bg = back ? find_layer(back, "b1_se_r+b1_se_gate") : NULL;
    CHECK(bg && ((const kiln_fused_conv_attrs *)bg->attrs)->act == KILN_FC_ACT_HARD_SIGMOID);
    kiln_engine_free(back);
    back = NULL;
    /* the layer's attributes, written verbatim: act set past the last one (checksum fixed up) */
    unsigned char *at = bytes ? memmem(bytes, size, fa, sizeof *fa) : NULL;
    CHECK(at != NULL);
    if (at) {
        int32_t bad = KILN_FC_ACT_COUNT;
        memcpy(at + offsetof(kiln_fused_conv_attrs, act), &bad, 4);
        uint64_t sum = kiln__format_checksum(bytes, size);
        for (int i = 0; i < 8; i++) ((unsigned char *)bytes)[KILN_FMT_OFF_CHECKSUM + i] = (unsigned char)(sum >> (8 * i));
        kiln_status st = kiln_engine_load_memory(bytes, size, &back);
        if (st != KILN_ERR_FORMAT || !strstr(kiln_last_error(), "b1_se_r+b1_se_gate"))
            fprintf(stderr, "  load: status %d, %s\n", (int)st, st ? kiln_last_error() : "ok");
        CHECK(st == KILN_ERR_FORMAT && back == NULL && strstr(kiln_last_error(), "unknown activation 8") &&
              strstr(kiln_last_error(), "b1_se_r+b1_se_gate"));
        kiln_engine_free(back);
    }
    kiln_free(bytes);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* Values that others read are not fused away: a Conv output that is also a
 * graph output keeps its Relu separate, and a BN whose input has two
 * readers stays. */
TEST(no_fusion_when_shared) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[4] = {1, 4, 7, 7};
    int x = add_input(g, "x", 4, xd);
    int c = add_conv(g, "c1", x, 4, 4, 3, 1, 1, 1, 1);
    mark_output(g, c);
    mark_output(g, add_unary(g, KILN_OP_Relu, "r1", c, NULL));
    int c2 = add_conv(g, "c2", x, 4, 4, 1, 1, 0, 1, 1);
    mark_output(g, add_bnorm(g, "bn2", c2, 4));
    mark_output(g, add_unary(g, KILN_OP_Tanh, "t2", c2, NULL));
    kiln_model *m = model_of(g);
    compare_opt(m, xd, 1e-5);
    kiln_engine *e = build(m, (bopts){.opt = 1, .tuning = 0});
    CHECK(e && find_layer(e, "r1") && find_layer(e, "bn2") && find_layer(e, "c1") &&
          count_op(e, KILN_OP_FusedConv) == 2);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* Conv -> BN -> Clip(0, 6), MobileNetV2's conv unit. */
static int conv_bn_relu6(kiln_graph *g, const char *name, int x, int64_t C, int64_t M, int k,
                         int stride, int group) {
    char bn[64], cl[64], lo[64], hi[64];
    snprintf(bn, sizeof bn, "%s_bn", name);
    snprintf(cl, sizeof cl, "%s_relu6", name);
    snprintf(lo, sizeof lo, "%s_lo", name);
    snprintf(hi, sizeof hi, "%s_hi", name);
    int b = add_bnorm(g, bn, add_conv(g, name, x, C, M, k, stride, k / 2, group, 1), M);
    int in3[3] = {b, add_scalar(g, lo, 0.0f), add_scalar(g, hi, 6.0f)};
    return add_node(g, KILN_OP_Clip, cl, 3, in3, NULL);
}

/* MobileNetV2's inverted-residual blocks: expand 1x1, depthwise 3x3 and
 * project 1x1 (+ residual) become one PwDwConv where the expanded tensor is
 * large (and AVX-512F is there to run it fast), and give the same outputs;
 * a first block without the expand convolution becomes one too;
 * a block whose depthwise output is also read elsewhere fuses only its
 * first two convolutions, and one whose expanded tensor is small stays as
 * three FusedConvs. */
TEST(inverted_residual_block) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[4] = {2, 64, 48, 48};
    int x0 = add_input(g, "x", 4, xd);
    /* block 0: depthwise 3x3 + project 64 -> 16, no expand (depthwise output:
     * 64 x 48 x 48 floats = 576 KiB) */
    int d0 = conv_bn_relu6(g, "b0_dw", x0, 64, 64, 3, 1, 64);
    int x = add_bnorm(g, "b0_project_bn", add_conv(g, "b0_project", d0, 64, 16, 1, 1, 0, 1, 1), 16);
    /* block 1: 16 -> 64 -> 16, stride 1, residual (expanded: 64 x 48 x 48 floats = 576 KiB) */
    int e1 = conv_bn_relu6(g, "b1_expand", x, 16, 64, 1, 1, 1);
    int d1 = conv_bn_relu6(g, "b1_dw", e1, 64, 64, 3, 1, 64);
    int p1 = add_bnorm(g, "b1_project_bn", add_conv(g, "b1_project", d1, 64, 16, 1, 1, 0, 1, 1), 16);
    int y1 = add_binary(g, KILN_OP_Add, "b1_add", x, p1);
    /* block 2: 16 -> 96 -> 24, stride 2; its depthwise output is also a graph output */
    int e2 = conv_bn_relu6(g, "b2_expand", y1, 16, 96, 1, 1, 1);
    int d2 = conv_bn_relu6(g, "b2_dw", e2, 96, 96, 3, 2, 96);
    mark_output(g, d2);
    int p2 = add_bnorm(g, "b2_project_bn", add_conv(g, "b2_project", d2, 96, 24, 1, 1, 0, 1, 1), 24);
    /* block 3: small (24 x 6 x 24 x 24 floats = 324 KiB): not fused */
    int e3 = conv_bn_relu6(g, "b3_expand", p2, 24, 144, 1, 1, 1);
    int d3 = conv_bn_relu6(g, "b3_dw", e3, 144, 144, 3, 2, 144);
    mark_output(g, add_bnorm(g, "b3_project_bn", add_conv(g, "b3_project", d3, 144, 32, 1, 1, 0, 1, 1), 32));
    kiln_model *m = model_of(g);
    compare_opt(m, xd, 1e-5);
    for (int threads = 1; threads <= 3; threads += 2) {
        kiln_engine *e = build(m, (bopts){.opt = 1, .tuning = 1, .threads = threads});
        bool fast = kiln__pwdw_fast_available();
        CHECK(e && count_op(e, KILN_OP_PwDwConv) == (fast ? 3 : 0));
        const kiln_node *n0 = e ? find_layer(e, "b0_dw+b0_dw_bn+b0_dw_relu6+b0_project+b0_project_bn") : NULL;
        CHECK(!fast || n0);
        if (n0) {
            const kiln_pwdw_attrs *a0 = n0->attrs;
            CHECK(a0->no_expand == 1 && a0->has_project == 1 && a0->has_residual == 0 && n0->n_in == 7 &&
                  n0->in[1] < 0 && n0->in[2] < 0);
        }
        const kiln_node *n1 = e ? find_layer(e, "b1_expand+b1_expand_bn+b1_expand_relu6+b1_dw+b1_dw_bn+"
                                              "b1_dw_relu6+b1_project+b1_project_bn+b1_add")
                                : NULL;
        const kiln_node *n2 = e ? find_layer(e, "b2_expand+b2_expand_bn+b2_expand_relu6+b2_dw+b2_dw_bn+b2_dw_relu6") : NULL;
        CHECK(!fast || (n1 && n2));
        if (n1 && n2) {
            const kiln_pwdw_attrs *a1 = n1->attrs, *a2 = n2->attrs;
            CHECK(a1->has_project == 1 && a1->has_residual == 1 && n1->n_in == 8 && a1->stride == 1);
            CHECK(a1->act1 == KILN_FC_ACT_CLIP && a1->act2 == KILN_FC_ACT_CLIP && a1->act3 == KILN_FC_ACT_NONE);
            CHECK(a2->has_project == 0 && a2->stride == 2 && a2->pads[0] == 1 && a2->pads[3] == 1);
            /* blocks 0 -> 1 -> 2 pass NHWC (kiln's kernel reads and writes
             * either) where kiln chooses layouts at all (built with oneDNN:
             * kiln__fc_choose_layouts); the graph output stays NCHW */
            const kiln_pwdw_attrs *a0 = n0 ? n0->attrs : NULL;
            bool nhwc = kiln__have_dnnl();
            CHECK(!(a2->layout & KILN_FC_LAYOUT_Y_NHWC));
            CHECK(!!(a1->layout & KILN_FC_LAYOUT_Y_NHWC) == nhwc && !!(a2->layout & KILN_FC_LAYOUT_X_NHWC) == nhwc);
            CHECK(a0 && !!(a0->layout & KILN_FC_LAYOUT_Y_NHWC) == nhwc && !!(a1->layout & KILN_FC_LAYOUT_X_NHWC) == nhwc);
            const char *d = kiln_engine_describe(e, 0);
            CHECK(strstr(d, "PwDwConv") != NULL);
        }
        CHECK(e && find_layer(e, "b3_expand+b3_expand_bn+b3_expand_relu6") != NULL);
        /* the same outputs as the unoptimized engine, at this thread count */
        kiln_engine *e0 = build(m, (bopts){.opt = 0, .tuning = 0});
        fill_x(kiln__numel(4, xd));
        for (int k = 0; e && e0 && k < 2; k++) {
            int64_t n0 = run(e0, x_in, xd, k, y_ref, BIG), n1c = run(e, x_in, xd, k, y_opt, BIG);
            CHECK(n0 > 0 && n0 == n1c);
            double err = rel_err(y_opt, y_ref, n0);
            if (!(err <= 1e-5)) fprintf(stderr, "  threads %d output %d: relative error %g\n", threads, k, err);
            CHECK(err <= 1e-5);
        }
        kiln_engine_free(e0);
        kiln_engine_free(e);
    }
    kiln_model_free(m);
}

/* Sets kiln's tactic `tactic` (Winograd F(4x4) or F(2x2), or the direct
 * kernel) on every FusedConv layer it can run (only the 1x1 ones:
 * `pointwise`). */
static void set_where_fits(kiln_engine *e, int tactic, bool pointwise) {
    for (int i = 0; i < e->graph->n_nodes; i++) {
        kiln_node *n = &e->graph->nodes[i];
        if (n->op_id != KILN_OP_FusedConv) continue;
        const kiln_tinfo *x = &e->graph->values[n->in[0]].info, *w = &e->graph->values[n->in[1]].info;
        kiln_fused_conv_attrs *fa = n->attrs;
        bool fits = tactic == KILN_FC_TACTIC_DIRECT ? kiln__fc_direct_fits(fa, x->rank, x->dims, w->rank, w->dims)
                                                   : kiln__fc_wino_fits(fa, x->rank, x->dims, w->rank, w->dims);
        if (fits && (!pointwise || w->dims[2] == 1)) fa->tactic.id = tactic;
    }
}

static void set_wino_where_fits(kiln_engine *e, int tactic) { set_where_fits(e, tactic, false); }

/* Every FusedConv layer of e to `tactic`. */
static void set_fc_tactic(kiln_engine *e, int tactic) {
    for (int i = 0; i < e->graph->n_nodes; i++)
        if (e->graph->nodes[i].op_id == KILN_OP_FusedConv)
            ((kiln_fused_conv_attrs *)e->graph->nodes[i].attrs)->tactic.id = tactic;
}

/* A ResNet-like chain (stride, 1x1, residual, depthwise) for the tactic tests. */
/* big: 64 -> 128 channels on 56 x 56 and a 3x3 cb, layers large enough for
 * oneDNN to split them across threads (dnnl_conv.c's PART_COST). */
static kiln_model *chain_model_n(int64_t *xd, int64_t batch, bool big) {
    kiln_graph *g = NULL;
    if (kiln__graph_create(&g) != KILN_OK) abort();
    int64_t c = big ? 64 : 16, m = 2 * c;
    int kb = big ? 3 : 1;
    xd[0] = batch, xd[1] = c, xd[2] = xd[3] = big ? 56 : 14;
    int x = add_input(g, "x", 4, xd);
    int a = add_unary(g, KILN_OP_Relu, "ra", add_bnorm(g, "bna", add_conv(g, "ca", x, c, m, 3, 2, 1, 1, 1), m), NULL);
    int b = add_bnorm(g, "bnb", add_conv(g, "cb", a, m, m, kb, 1, kb / 2, 1, 1), m);
    int d = add_bnorm(g, "bnd", add_conv(g, "cd", x, c, m, 1, 2, 0, 1, 1), m);
    int r = add_unary(g, KILN_OP_Relu, "rr", add_binary(g, KILN_OP_Add, "add", b, d), NULL);
    int w = add_conv(g, "cw", r, m, m, 3, 1, 1, (int)m, 1);
    int in3[3] = {w, add_scalar(g, "z", 0.0f), add_scalar(g, "six", 6.0f)};
    mark_output(g, add_node(g, KILN_OP_Clip, "r6", 3, in3, NULL));
    return model_of(g);
}

static kiln_model *chain_model(int64_t *xd) { return chain_model_n(xd, 2, false); }

/* Runs e (input x_in of shape xd) once per CPU FusedConv tactic t >= 1,
 * set on every layer that lists it (the others run tactic 0): output `out`
 * (n0 floats) is y_ref within 1e-5 each time. Returns how many tactics
 * were set on some layer. */
/* Sets CPU FusedConv tactic t on every layer of e that lists it (tactic 0
 * on the others); returns how many layers list it. */
static int set_listed_tactic(kiln_engine *e, int t) {
    int set = 0;
    for (int i = 0; i < e->graph->n_nodes; i++) {
        kiln_node *n = &e->graph->nodes[i];
        if (n->op_id != KILN_OP_FusedConv) continue;
        kiln_fused_conv_attrs *fa = n->attrs;
        kiln_tinfo ti[4];
        const kiln_tinfo *tp[4] = {0};
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k] < 0) continue;
            ti[k] = e->graph->values[n->in[k]].info;
            tp[k] = &ti[k];
        }
        kiln_tinfo to;
        kiln_tinfo *top[1] = {&to};
        kiln_infer_args ia = {.op = n->op, .attrs = n->attrs, .node_name = n->name,
                              .n_in = n->n_in, .n_out = 1, .in = tp, .out = top};
        int32_t ids[8];
        int k = kiln__cpu_kernel_for(KILN_OP_FusedConv)->tactics(NULL, &ia, ids, 8);
        bool listed = false;
        for (int q = 0; q < k; q++) listed |= ids[q] == t;
        fa->tactic.id = listed ? t : 0;
        set += listed;
    }
    return set;
}

static int each_tactic_matches(kiln_engine *e, const int64_t *xd, int out, int64_t n0) {
    int n_multi = 0;
    for (int t = 1; e && t < KILN_FC_TACTIC_COUNT; t++) {
        if (!set_listed_tactic(e, t)) continue;
        n_multi++;
        int64_t n1 = run(e, x_in, xd, out, y_opt, BIG);
        CHECK(n1 == n0);
        double err = rel_err(y_opt, y_ref, n0);
        if (!(err <= 1e-5)) fprintf(stderr, "  tactic %d, output %d: relative error %g\n", t, out, err);
        CHECK(err <= 1e-5);
    }
    return n_multi;
}

/* Runs e on inputs "x", "xs" and "r" (x_in, xs_in, r_in, all of shape xd)
 * and copies every output, one after the other, into y (cap floats);
 * returns the total element count (-1 on failure). */
static float xs_in[BIG], r_in[BIG];
static int64_t run_xr(kiln_engine *e, const int64_t *xd, float *y, int64_t cap) {
    kiln_context *c = NULL;
    if (!e) return -1;
    CHECK_OK(kiln_context_create(e, &c));
    if (!c) return -1;
    const char *names[3] = {"x", "xs", "r"};
    const float *data[3] = {x_in, xs_in, r_in};
    for (int i = 0; i < 3; i++) CHECK_OK(kiln_context_set_input(c, names[i], KILN_DTYPE_FLOAT32, 4, xd, data[i]));
    int64_t total = kiln_context_run(c) == KILN_OK ? 0 : -1;
    for (int k = 0; total >= 0 && k < e->graph->n_outputs; k++) {
        const void *out = NULL;
        int rank = 0;
        int64_t dims[8];
        CHECK_OK(kiln_context_get_output(c, e->graph->values[e->graph->outputs[k]].name, NULL, &rank, dims, &out));
        int64_t n = out ? kiln__numel(rank, dims) : -1;
        if (n < 0 || total + n > cap) {
            total = -1;
            break;
        }
        memcpy(y + total, out, sizeof(float) * (size_t)n);
        total += n;
    }
    kiln_context_free(c);
    return total;
}

/* NaN and +-inf come out of every activation of a FusedConv where the
 * unfused layers (Conv, Add, Relu...) put them, on every CPU tactic: in the
 * residual ("r", all tactics) and in the input of 1x1 layers ("xs"; not of
 * 3x3 ones, whose Winograd transforms spread a NaN over a whole tile). The
 * AVX-512 ReLU/Clip/HardSigmoid of kiln's kernels made NaN 0 (or a bound),
 * and so did oneDNN's post-ops (dnnl_conv.c's own_act). */
/* bf16: a bf16 engine, each activation followed by a 1x1 convolution (the
 * activation's output passes between bf16 layers in bf16). */
static void special_values_case(int64_t batch, int threads, bool bf16) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[4] = {batch, 16, 9, 9};
    int x = add_input(g, "x", 4, xd), xs = add_input(g, "xs", 4, xd), r = add_input(g, "r", 4, xd);
    kiln_ew_act_attrs la = {.alpha = 0.1f}, hsa = {.alpha = 0.7f, .beta = 0.4f};
    char name[32];
    int acts[16];
    for (int a = 0; a < 8; a++)
        for (int one = 0; one < 2; one++) {
            snprintf(name, sizeof name, "c%d_%d", a, one);
            int c = one ? add_conv(g, name, xs, 16, 16, 1, 1, 0, 1, 1) : add_conv(g, name, x, 16, 16, 3, 1, 1, 1, 1);
            snprintf(name, sizeof name, "add%d_%d", a, one);
            if (!(bf16 && one)) c = add_binary(g, KILN_OP_Add, name, c, r); /* bf16: an NCHW residual ends a bf16 chain */
            snprintf(name, sizeof name, "act%d_%d", a, one);
            if (a == 1 || a == 2) {
                snprintf(name, sizeof name, "lo%d_%d", a, one);
                int in3[3] = {c, add_scalar(g, name, a == 1 ? 0.0f : -0.2f), -1};
                snprintf(name, sizeof name, "hi%d_%d", a, one);
                if (a == 1) in3[2] = add_scalar(g, name, 0.5f);
                snprintf(name, sizeof name, "act%d_%d", a, one);
                acts[2 * a + one] = add_node(g, KILN_OP_Clip, name, a == 1 ? 3 : 2, in3, NULL);
            } else if (a == 7) { /* SiLU */
                int sg = add_unary(g, KILN_OP_Sigmoid, name, c, NULL);
                snprintf(name, sizeof name, "mul%d_%d", a, one);
                acts[2 * a + one] = add_binary(g, KILN_OP_Mul, name, c, sg);
            } else {
                static const int ops[7] = {KILN_OP_Relu, 0, 0, KILN_OP_LeakyRelu, KILN_OP_HardSigmoid,
                                           KILN_OP_HardSwish, KILN_OP_Sigmoid};
                acts[2 * a + one] = add_unary(g, ops[a], name, c, a == 3 ? &la : a == 4 ? &hsa : NULL);
            }
        }
    for (int k = 0; k < 16; k++) {
        snprintf(name, sizeof name, "p%d", k);
        mark_output(g, bf16 ? add_conv(g, name, acts[k], 16, 16, 1, 1, 0, 1, 1) : acts[k]);
    }
    kiln_model *m = model_of(g);
    int64_t nx = kiln__numel(4, xd), cap = 16 * nx;
    for (int64_t i = 0; i < nx; i++) x_in[i] = frand(), xs_in[i] = frand(), r_in[i] = frand();
    for (int64_t i = 0; i < nx; i += 5) {
        float v = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
        r_in[i] = v;
        xs_in[(i * 7) % nx] = v;
    }
    kiln_engine *e0 = build(m, (bopts){.opt = 0}),
                *e1 = build(m, (bopts){.opt = 1, .tuning = bf16, .threads = threads,
                                       .prec = bf16 ? KILN_PRECISION_BF16 : 0});
    int layers = bf16 ? 32 : 16, n_bf16 = 0;
    CHECK(e1 && count_op(e1, KILN_OP_FusedConv) == layers && e1->graph->n_nodes == layers);
    for (int i = 0; e1 && i < e1->graph->n_nodes; i++)
        n_bf16 += (((const kiln_fused_conv_attrs *)e1->graph->nodes[i].attrs)->layout & KILN_FC_LAYOUT_Y_BF16) != 0;
    if (n_bf16 != (bf16 ? 8 : 0)) fprintf(stderr, "  %d layers with bf16 outputs\n", n_bf16);
    CHECK(n_bf16 == (bf16 ? 8 : 0)); /* bf16: the 1x1 layers of xs */
    double tol = bf16 ? 3e-2 : 1e-5;
    int64_t n0 = run_xr(e0, xd, y_ref, cap), nan0 = 0;
    CHECK(n0 == cap);
    for (int64_t i = 0; i < n0; i++) nan0 += isnan(y_ref[i]);
    CHECK(nan0 > 0);
    int tried = 0;
    for (int t = 0; e1 && t < KILN_FC_TACTIC_COUNT; t++) {
        if (t && !set_listed_tactic(e1, t)) continue;
        if (!t) set_fc_tactic(e1, 0);
        tried++;
        int64_t n1 = run_xr(e1, xd, y_opt, cap);
        CHECK(n1 == n0);
        double err = special_rel_err(y_opt, y_ref, n0);
        if (!(err <= tol)) {
            fprintf(stderr, "  tactic %d (%s): relative error %g\n", t, kiln__cpu_fc_tactic_name(t), err);
            for (int64_t i = 0; i < n0; i++)
                if (special_rel_err(&y_opt[i], &y_ref[i], 1) > tol) {
                    fprintf(stderr, "  output %lld, element %lld: %g, unfused %g\n", (long long)(i / nx),
                            (long long)(i % nx), y_opt[i], y_ref[i]);
                    i = (i / nx + 1) * nx - 1; /* the first of each output */
                }
        }
        CHECK(err <= tol);
    }
    fprintf(stderr, "  batch %lld, %d threads%s: %d tactics, %lld NaN outputs\n", (long long)batch, threads,
            bf16 ? ", bf16" : "", tried, (long long)nan0);
    kiln_engine_free(e0);
    kiln_engine_free(e1);
    kiln_model_free(m);
}

TEST(special_values_every_tactic) {
    special_values_case(2, 1, false); /* oneDNN splits images, */
    special_values_case(1, 3, false); /* output rows */
    if (kiln__have_dnnl() && kiln__cpu_has_bf16()) special_values_case(1, 2, true);
}

/* Every tactic the CPU lists for every layer gives the same outputs as the
 * own kernels (tactic 0), with `batch` images on `threads` threads (oneDNN
 * splits the batch, or with one image the output rows, across the pool). */
static void tactics_agree(int64_t batch, int threads, bool big) {
    int64_t xd[4];
    kiln_model *m = chain_model_n(xd, batch, big);
    fprintf(stderr, "  %s layers, batch %lld, %d threads\n", big ? "large" : "small", (long long)batch, threads);
    compare_opt(m, xd, 1e-5);
    int64_t nx = kiln__numel(4, xd);
    fill_x(nx);
    kiln_engine *e = build(m, (bopts){.opt = 1, .tuning = 0, .threads = threads});
    int64_t n0 = run(e, x_in, xd, 0, y_ref, BIG);
    CHECK(n0 > 0);
    int n_multi = each_tactic_matches(e, xd, 0, n0);
    /* a tactic that cannot run the layer here (Winograd on 1x1 and strided
     * layers): kiln's own kernels run it, also where the plan put the output
     * over the residual for the Winograd kernel (fc_inplace_input); F(2x2)
     * (listed only where F(4x4)'s weights are too large, not in this chain)
     * runs the layers F(4x4) takes with the same results */
    for (int tactic = KILN_FC_TACTIC_WINO; e && tactic <= KILN_FC_TACTIC_WINO2; tactic++) {
        for (int i = 0; i < e->graph->n_nodes; i++)
            if (e->graph->nodes[i].op_id == KILN_OP_FusedConv) {
                kiln_fused_conv_attrs *fa = e->graph->nodes[i].attrs;
                fa->tactic.id = tactic;
                fa->layout = 0;
            }
        int64_t n1 = run(e, x_in, xd, 0, y_opt, BIG);
        double err = rel_err(y_opt, y_ref, n0);
        if (!(err <= 1e-5)) fprintf(stderr, "  Winograd (tactic %d) set everywhere: relative error %g\n", tactic, err);
        CHECK(n1 == n0 && err <= 1e-5);
    }
    /* built with oneDNN: both of its tactics were listed and run; with
     * AVX-512F, Winograd for the 3x3 stride-1 layer of the big chain, and
     * the direct kernel for every layer but the depthwise one */
    CHECK(n_multi == (kiln__have_dnnl() ? 2 : 0) + (big && kiln__wino_fast_available() ? 1 : 0) +
                         (kiln__direct_fast_available() ? 1 : 0));
    /* oneDNN everywhere, tensors between its layers passed NHWC */
    if (e && kiln__have_dnnl()) {
        set_fc_tactic(e, KILN_FC_TACTIC_DNNL_BLOCKED);
        int nb = kiln__fc_choose_layouts(e->graph, NULL, false);
        CHECK(nb == 3); /* ca -> cb, cb/cd -> residual add, add -> depthwise */
        int64_t n1 = run(e, x_in, xd, 0, y_opt, BIG);
        CHECK(n1 == n0 && rel_err(y_opt, y_ref, n0) <= 1e-5);
        /* the same chain with the Winograd kernel in it, NHWC on both sides */
        for (int tactic = KILN_FC_TACTIC_WINO; big && kiln__wino_fast_available() && tactic <= KILN_FC_TACTIC_WINO2;
             tactic++) {
            set_fc_tactic(e, KILN_FC_TACTIC_DNNL_BLOCKED);
            set_wino_where_fits(e, tactic);
            kiln__fc_clear_layouts(e->graph);
            CHECK(kiln__fc_choose_layouts(e->graph, NULL, false) == 3);
            const kiln_node *cb = NULL; /* the layer made from conv cb (named cb+bnb+...) */
            for (int i = 0; i < e->graph->n_nodes; i++)
                if (e->graph->nodes[i].name && !strncmp(e->graph->nodes[i].name, "cb+", 3)) cb = &e->graph->nodes[i];
            CHECK(cb && ((const kiln_fused_conv_attrs *)cb->attrs)->tactic.id == tactic &&
                  ((const kiln_fused_conv_attrs *)cb->attrs)->layout ==
                      (KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC));
            n1 = run(e, x_in, xd, 0, y_opt, BIG);
            double err = rel_err(y_opt, y_ref, n0);
            if (!(err <= 1e-5))
                fprintf(stderr, "  oneDNN + Winograd (tactic %d) NHWC chain: relative error %g\n", tactic, err);
            CHECK(n1 == n0 && err <= 1e-5);
        }
    }
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* conv a -> conv b + residual a -> GlobalMaxPool, as the last block of
 * ResNet with an NCHW reader at the end: with oneDNN running both
 * convolutions, a stays NHWC (read by b as input and residual) while b's
 * output leaves the chain NCHW for the pool, so b reads an NHWC residual
 * into an NCHW output (KILN_FC_LAYOUT_R_NHWC), never in place; the results
 * are the NCHW ones with the batch split, with bands of rows and on one
 * thread. Before this, the pool's NCHW made a NCHW too. (ResNet's own
 * GlobalAveragePool reads NHWC: gap_reads_nhwc below.) */
/* x [batch, 16, hw, hw] -> conv ca (ch channels) + Relu -> a; conv cb(a) + a
 * + Relu -> r -> global pool `pool_op` named `pool` (the model's output):
 * the model in *mp, the engine (built on `threads`), the input in x_in. */
static kiln_engine *last_block(int64_t *xd, int64_t batch, int64_t hw, int64_t ch, int threads, int pool_op,
                               const char *pool, kiln_model **mp) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    xd[0] = batch, xd[1] = 16, xd[2] = xd[3] = hw;
    int x = add_input(g, "x", 4, xd);
    int a = add_unary(g, KILN_OP_Relu, "ra", add_conv(g, "ca", x, 16, ch, 3, 1, 1, 1, 1), NULL);
    int b = add_conv(g, "cb", a, ch, ch, 3, 1, 1, 1, 1);
    int r = add_unary(g, KILN_OP_Relu, "rr", add_binary(g, KILN_OP_Add, "add", b, a), NULL);
    mark_output(g, add_node(g, pool_op, pool, 1, (int[]){r}, NULL));
    *mp = model_of(g);
    fill_x(kiln__numel(4, xd));
    return build(*mp, (bopts){.opt = 1, .tuning = 0, .threads = threads});
}

static void residual_nhwc_case(int64_t batch, int threads) {
    int64_t xd[4];
    kiln_model *m = NULL;
    kiln_engine *e = last_block(xd, batch, 28, 32, threads, KILN_OP_GlobalMaxPool, "gmp", &m);
    int64_t n0 = run(e, x_in, xd, 0, y_ref, BIG);
    CHECK(n0 == batch * 32);
    if (e) set_fc_tactic(e, KILN_FC_TACTIC_DNNL_BLOCKED);
    if (e) {
        CHECK(kiln__fc_choose_layouts(e->graph, NULL, false) == 1); /* ca's output */
        const kiln_node *ca = find_layer(e, "ca+ra"), *cb = find_layer(e, "cb+add+rr");
        CHECK(ca && ((const kiln_fused_conv_attrs *)ca->attrs)->layout == KILN_FC_LAYOUT_Y_NHWC);
        CHECK(cb && ((const kiln_fused_conv_attrs *)cb->attrs)->layout ==
                        (KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_R_NHWC));
        const char *d = kiln_engine_describe(e, 0);
        CHECK(d && strstr(d, "layout nhwc->nchw (residual nhwc)"));
        d = kiln_engine_describe(e, 1);
        CHECK(d && strstr(d, "\"layout\": {\"x\": \"nhwc\", \"y\": \"nchw\", \"residual\": \"nhwc\"}"));
        int64_t n1 = run(e, x_in, xd, 0, y_opt, BIG);
        double err = rel_err(y_opt, y_ref, n0);
        if (!(err <= 1e-5))
            fprintf(stderr, "  NHWC residual, batch %lld, %d threads: relative error %g\n", (long long)batch,
                    threads, err);
        CHECK(n1 == n0 && err <= 1e-5);
        /* layout bits a kiln does not know, or an NHWC residual with an NHWC
         * output, are refused with a message (a damaged or foreign engine:
         * the writer and the loader check attribute values) */
        if (batch == 1 && threads == 1 && cb) {
            kiln_fused_conv_attrs *fa = cb->attrs;
            const int bad[2] = {fa->layout | 128, fa->layout | KILN_FC_LAYOUT_Y_NHWC};
            const char *msg[2] = {"unknown layout bits", "NHWC residual"};
            int keep = fa->layout;
            for (int k = 0; k < 2; k++) {
                fa->layout = bad[k];
                CHECK(write_refused(e, msg[k]));
            }
            fa->layout = keep;
        }
    }
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* bf16 layers: x -> ca -> a -> cm -> m; cb(m) + a -> r; cc(r) + r -> o ->
 * GlobalAveragePool. m (read only by bf16 layers) is passed in bf16; a
 * residual holds what its layer's output holds, and the NHWC residual r
 * into cc's NCHW output is float32, so a and r are float32 NHWC. Compared
 * with the fp32 engine (bf16 rounding: within 5e-2). */
static void residual_nhwc_bf16_case(void) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[4] = {1, 16, 28, 28};
    int x = add_input(g, "x", 4, xd);
    int a = add_unary(g, KILN_OP_Relu, "ra", add_conv(g, "ca", x, 16, 32, 3, 1, 1, 1, 1), NULL);
    int mm = add_unary(g, KILN_OP_Relu, "rm", add_conv(g, "cm", a, 32, 32, 3, 1, 1, 1, 1), NULL);
    int r = add_unary(g, KILN_OP_Relu, "rr", add_binary(g, KILN_OP_Add, "add", add_conv(g, "cb", mm, 32, 32, 3, 1, 1, 1, 1), a),
                      NULL);
    int o = add_unary(g, KILN_OP_Relu, "ro", add_binary(g, KILN_OP_Add, "add2", add_conv(g, "cc", r, 32, 32, 3, 1, 1, 1, 1), r),
                      NULL);
    mark_output(g, add_node(g, KILN_OP_GlobalMaxPool, "gmp", 1, (int[]){o}, NULL));
    kiln_model *m = model_of(g);
    fill_x(kiln__numel(4, xd));
    kiln_engine *e32 = build(m, (bopts){.opt = 1, .tuning = 0, .threads = 2});
    kiln_engine *e = build(m, (bopts){.opt = 1, .tuning = 0, .threads = 2, .prec = KILN_PRECISION_BF16});
    int64_t n0 = run(e32, x_in, xd, 0, y_ref, BIG);
    CHECK(n0 == 32);
    if (e) set_fc_tactic(e, KILN_FC_TACTIC_DNNL_BLOCKED);
    if (e) {
        CHECK(kiln__fc_choose_layouts(e->graph, NULL, false) == 3); /* a, m, r */
        const char *names[4] = {"ca+ra", "cm+rm", "cb+add+rr", "cc+add2+ro"};
        const int want[4] = {KILN_FC_LAYOUT_Y_NHWC, KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC | KILN_FC_LAYOUT_Y_BF16,
                             KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_X_BF16 | KILN_FC_LAYOUT_Y_NHWC,
                             KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_R_NHWC};
        for (int i = 0; i < 4; i++) {
            const kiln_node *n = find_layer(e, names[i]);
            int got = n ? ((const kiln_fused_conv_attrs *)n->attrs)->layout : -1;
            if (got != want[i]) fprintf(stderr, "  %s: layout %d, want %d\n", names[i], got, want[i]);
            CHECK(got == want[i]);
        }
        int64_t n1 = run(e, x_in, xd, 0, y_opt, BIG);
        double err = rel_err(y_opt, y_ref, n0);
        if (!(err <= 5e-2)) fprintf(stderr, "  bf16 chain with an NHWC residual: error %g against fp32\n", err);
        CHECK(n1 == n0 && err <= 5e-2);
        /* under the debug arena check: the same outputs (m, bf16 in the first half of
         * a float32 value's bytes, was reported half unwritten; probe5) */
        kiln_context *c = NULL;
        CHECK_OK(kiln_context_create(e, &c));
        CHECK_OK(kiln_context_set_debug_arena(c, 1));
        CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 4, xd, x_in));
        CHECK_OK(kiln_context_run(c));
        const void *data = NULL;
        CHECK_OK(kiln_context_get_output(c, e->graph->values[e->graph->outputs[0]].name, NULL, NULL, NULL, &data));
        CHECK(data && !memcmp(data, y_opt, sizeof(float) * (size_t)n0));
        kiln_context_free(c);
    }
    kiln_engine_free(e);
    kiln_engine_free(e32);
    kiln_model_free(m);
}

/* conv a -> conv b + residual a -> GlobalAveragePool (ResNet's end): the
 * pool reads b's output NHWC (kiln's kernel), so b writes NHWC with its
 * residual in place, no reorder to NCHW; the same results at 1 and 3
 * threads and batch 1 and 3, also after a save and load (engine format 4
 * keeps the pool's layout); a damaged layout is refused with a message. */
static void gap_nhwc_case(int64_t batch, int threads) {
    int64_t xd[4];
    kiln_model *m = NULL;
    kiln_engine *e = last_block(xd, batch, 14, 80, threads, KILN_OP_GlobalAveragePool, "gap", &m);
    int64_t n0 = run(e, x_in, xd, 0, y_ref, BIG);
    CHECK(n0 == batch * 80);
    if (e) {
        set_fc_tactic(e, KILN_FC_TACTIC_DNNL_BLOCKED);
        CHECK(kiln__fc_choose_layouts(e->graph, NULL, false) == 3); /* ca's and cb's outputs, the pool's input */
        const kiln_node *cb = find_layer(e, "cb+add+rr"), *gap = find_layer(e, "gap");
        CHECK(cb && ((const kiln_fused_conv_attrs *)cb->attrs)->layout ==
                        (KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC));
        CHECK(gap && gap->attrs && ((const kiln_pool_attrs *)gap->attrs)->layout == KILN_POOL_LAYOUT_NHWC);
        const char *d = kiln_engine_describe(e, 1);
        CHECK(d && strstr(d, "\"layout\": {\"x\": \"nhwc\", \"y\": \"nchw\"}") &&
              !strstr(d, "\"residual\": \"nhwc\""));
        int64_t n1 = run(e, x_in, xd, 0, y_opt, BIG);
        double err = rel_err(y_opt, y_ref, n0);
        if (!(err <= 1e-5))
            fprintf(stderr, "  NHWC GlobalAveragePool, batch %lld, %d threads: relative error %g\n",
                    (long long)batch, threads, err);
        CHECK(n1 == n0 && err <= 1e-5);
        /* saved and loaded: the pool's layout travels in the file */
        kiln_engine *e2 = reload(e);
        const kiln_node *gap2 = e2 ? find_layer(e2, "gap") : NULL;
        CHECK(gap2 && gap2->attrs && ((const kiln_pool_attrs *)gap2->attrs)->layout == KILN_POOL_LAYOUT_NHWC);
        int64_t n2 = run(e2, x_in, xd, 0, y_opt, BIG);
        CHECK(n2 == n0 && rel_err(y_opt, y_ref, n0) <= 1e-5);
        kiln_engine_free(e2);
        /* a layout value kiln does not know: refused, named */
        if (batch == 1 && threads == 1 && gap) {
            kiln_pool_attrs *pa = gap->attrs;
            pa->layout = 3;
            CHECK(run_refused(e, xd, "GlobalAveragePool", "layout 3"));
            pa->layout = KILN_POOL_LAYOUT_NHWC;
        }
    }
    kiln_engine_free(e);
    kiln_model_free(m);
}

TEST(gap_reads_nhwc) {
    if (!kiln__have_dnnl()) {
        printf("  built without oneDNN: skipped\n");
        return;
    }
    gap_nhwc_case(1, 1);
    gap_nhwc_case(1, 3);
    gap_nhwc_case(3, 2);
}

TEST(residual_nhwc_output_nchw) {
    if (!kiln__have_dnnl()) {
        printf("  built without oneDNN: skipped\n");
        return;
    }
    residual_nhwc_case(1, 1);
    residual_nhwc_case(1, 3); /* bands of rows */
    residual_nhwc_case(3, 2); /* the batch split, 1 + 2 images */
    if (kiln__cpu_has_bf16()) residual_nhwc_bf16_case();
    else printf("  no AVX-512 BF16 on this CPU: the bf16 case skipped\n");
}

/* ResNet's stem, small: conv `cn` (3 -> 32 channels, 3x3, stride 2, pad 1)
 * -> Relu `rn` -> MaxPool "mp" (3x3, stride 2, pad 1); returns its output. */
static int stem_pool(kiln_graph *g, int x, const char *cn, const char *rn) {
    int a = add_unary(g, KILN_OP_Relu, rn, add_conv(g, cn, x, 3, 32, 3, 2, 1, 1, 1), NULL);
    kiln_pool_attrs pa;
    memset(&pa, 0, sizeof pa);
    pa.n_kernel = pa.n_strides = 2;
    pa.kernel[0] = pa.kernel[1] = 3;
    pa.strides[0] = pa.strides[1] = 2;
    pa.n_pads = 4;
    for (int i = 0; i < 4; i++) pa.pads[i] = 1;
    return add_node(g, KILN_OP_MaxPool, "mp", 1, (int[]){a}, &pa);
}

/* conv -> Relu -> MaxPool (3x3, stride 2, pad 1; odd sizes, so windows hang
 * over the edges) -> conv, as ResNet's stem: with the convolutions run by
 * oneDNN the MaxPool joins the NHWC chain (kiln's NHWC kernel), and the
 * result is the NCHW one. */
TEST(maxpool_in_nhwc_chain) {
    if (!kiln__have_dnnl()) {
        printf("  built without oneDNN: skipped\n");
        return;
    }
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[4] = {2, 3, 29, 27};
    int x = add_input(g, "x", 4, xd);
    int p = stem_pool(g, x, "ca", "ra");
    mark_output(g, add_conv(g, "cb", p, 32, 48, 1, 1, 0, 1, 1));
    kiln_model *m = model_of(g);
    compare_opt(m, xd, 1e-5);
    fill_x(kiln__numel(4, xd));
    kiln_engine *e = build(m, (bopts){.opt = 1, .tuning = 0, .threads = 2});
    int64_t n0 = run(e, x_in, xd, 0, y_ref, BIG);
    CHECK(n0 > 0);
    if (e) set_fc_tactic(e, KILN_FC_TACTIC_DNNL_BLOCKED);
    if (e) {
        CHECK(kiln__fc_choose_layouts(e->graph, NULL, false) == 2); /* ca -> mp -> cb */
        const kiln_node *mp = find_layer(e, "mp");
        CHECK(mp && ((const kiln_pool_attrs *)mp->attrs)->layout == KILN_POOL_LAYOUT_NHWC);
        /* kiln inspect shows the layouts */
        const char *d = kiln_engine_describe(e, 0);
        CHECK(d && strstr(d, "layout nchw->nhwc") && strstr(d, "layout nhwc->nhwc") && strstr(d, "layout nhwc->nchw"));
        d = kiln_engine_describe(e, 1);
        CHECK(d && strstr(d, "\"layout\": {\"x\": \"nhwc\", \"y\": \"nhwc\"}"));
        int64_t n1 = run(e, x_in, xd, 0, y_opt, BIG);
        double err = rel_err(y_opt, y_ref, n0);
        if (!(err <= 1e-5)) fprintf(stderr, "  NHWC chain with MaxPool: relative error %g\n", err);
        CHECK(n1 == n0 && err <= 1e-5);
        /* back to NCHW everywhere */
        kiln__fc_clear_layouts(e->graph);
        CHECK(((const kiln_pool_attrs *)mp->attrs)->layout == 0);
    }
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* A small ResNet: stem conv (3 -> 32, stride 2) + Relu -> MaxPool -> block
 * (1x1 32 -> 16, 3x3 16 -> 16, 1x1 16 -> 64 + downsample 1x1 32 -> 64) ->
 * block (1x1 64 -> 16, 3x3 stride s2 16 -> 16 (with a strided 1x1
 * downsample when s2 is 2), 1x1 16 -> 64 + residual) -> GlobalAveragePool.
 * mid: the 3x3 layers' channels (16, or 24: no nChw16c). */
static kiln_model *small_resnet(int64_t *xd, int64_t batch, int64_t mid, int s2) {
    kiln_graph *g = NULL;
    if (kiln__graph_create(&g) != KILN_OK) abort();
    xd[0] = batch, xd[1] = 3, xd[2] = 30, xd[3] = 26;
    int x = add_input(g, "x", 4, xd);
    int p = stem_pool(g, x, "stem", "rs");
    int b1 = add_unary(g, KILN_OP_Relu, "r11", add_conv(g, "c11", p, 32, mid, 1, 1, 0, 1, 1), NULL);
    int b2 = add_unary(g, KILN_OP_Relu, "r12", add_conv(g, "c12", b1, mid, mid, 3, 1, 1, 1, 1), NULL);
    int d = add_conv(g, "ds1", p, 32, 64, 1, 1, 0, 1, 1);
    int o1 = add_unary(g, KILN_OP_Relu, "r13", add_binary(g, KILN_OP_Add, "add1", add_conv(g, "c13", b2, mid, 64, 1, 1, 0, 1, 1), d), NULL);
    int e1 = add_unary(g, KILN_OP_Relu, "r21", add_conv(g, "c21", o1, 64, mid, 1, 1, 0, 1, 1), NULL);
    int e2 = add_unary(g, KILN_OP_Relu, "r22", add_conv(g, "c22", e1, mid, mid, 3, s2, 1, 1, 1), NULL);
    int res = s2 == 1 ? o1 : add_conv(g, "ds2", o1, 64, 64, 1, s2, 0, 1, 1);
    int o2 = add_unary(g, KILN_OP_Relu, "r23", add_binary(g, KILN_OP_Add, "add2", add_conv(g, "c23", e2, mid, 64, 1, 1, 0, 1, 1), res), NULL);
    mark_output(g, add_node(g, KILN_OP_GlobalAveragePool, "gap", 1, (int[]){o2}, NULL));
    return model_of(g);
}

/* The small ResNet (mid 16) and its untuned engine, run once on x_in
 * into y_ref (*n0 outputs). */
static kiln_engine *small_resnet_ref(int64_t batch, int threads, int s2, int64_t *xd, kiln_model **m,
                                     int64_t *n0) {
    *m = small_resnet(xd, batch, 16, s2);
    fill_x(kiln__numel(4, xd));
    kiln_engine *e = build(*m, (bopts){.opt = 1, .tuning = 0, .threads = threads});
    *n0 = run(e, x_in, xd, 0, y_ref, BIG);
    CHECK(*n0 == batch * 64);
    return e;
}

/* The small ResNet with its tensors in nChw16c (oneDNN and Winograd
 * layers, MaxPool, GlobalAveragePool) gives the NCHW engine's outputs:
 * batch 1 (channel split over the threads) and 3, 1 to 3 threads, saved
 * and loaded; layouts a layer cannot take are refused with a message. */
static void c16_case(int64_t batch, int threads, int s2, bool wino) {
    int64_t xd[4], n0 = 0;
    kiln_model *m = NULL;
    kiln_engine *e = small_resnet_ref(batch, threads, s2, xd, &m, &n0);
    if (e) {
        set_fc_tactic(e, KILN_FC_TACTIC_DNNL_BLOCKED);
        if (wino) set_wino_where_fits(e, KILN_FC_TACTIC_WINO2);
        int nv = kiln__fc_choose_layouts(e->graph, NULL, true);
        CHECK(nv >= 10 && kiln__fc_c16_values(e->graph) >= 8);
        const kiln_node *stem = find_layer(e, "stem+rs"), *mp = find_layer(e, "mp"), *gap = find_layer(e, "gap");
        const kiln_node *c13 = find_layer(e, "ds1+add1+r13");
        CHECK(stem && ((const kiln_fused_conv_attrs *)stem->attrs)->layout == KILN_FC_LAYOUT_Y_C16);
        CHECK(c13 && ((const kiln_fused_conv_attrs *)c13->attrs)->layout == (KILN_FC_LAYOUT_X_C16 | KILN_FC_LAYOUT_Y_C16));
        CHECK(mp && ((const kiln_pool_attrs *)mp->attrs)->layout == KILN_POOL_LAYOUT_C16);
        CHECK(gap && gap->attrs && ((const kiln_pool_attrs *)gap->attrs)->layout == KILN_POOL_LAYOUT_C16);
        const char *d = kiln_engine_describe(e, 0);
        CHECK(d && strstr(d, "layout nchw->nchw16c") && strstr(d, "layout nchw16c->nchw16c"));
        int64_t n1 = run(e, x_in, xd, 0, y_opt, BIG);
        double err = rel_err(y_opt, y_ref, n0);
        if (!(err <= 1e-5))
            fprintf(stderr, "  nChw16c, batch %lld, %d threads, stride %d, %s: relative error %g\n",
                    (long long)batch, threads, s2, wino ? "winograd" : "onednn", err);
        CHECK(n1 == n0 && err <= 1e-5);
        /* saved and loaded */
        kiln_engine *e2 = reload(e);
        const kiln_node *c13b = e2 ? find_layer(e2, "ds1+add1+r13") : NULL;
        CHECK(c13b && ((const kiln_fused_conv_attrs *)c13b->attrs)->layout ==
                          (KILN_FC_LAYOUT_X_C16 | KILN_FC_LAYOUT_Y_C16));
        CHECK(run(e2, x_in, xd, 0, y_opt, BIG) == n0 && rel_err(y_opt, y_ref, n0) <= 1e-5);
        kiln_engine_free(e2);
        /* damaged layouts: refused, named */
        if (batch == 1 && threads == 1 && c13 && mp) {
            kiln_fused_conv_attrs *fa = c13->attrs;
            kiln_pool_attrs *pa = mp->attrs;
            const int keep = fa->layout;
            struct { int fc, pool; const char *msg; } bad[3] = {
                {keep | KILN_FC_LAYOUT_Y_NHWC, KILN_POOL_LAYOUT_C16, "mixes the blocked"},
                {keep, 5, "'layout' = 5"},
                {keep, KILN_POOL_LAYOUT_C16, NULL},
            };
            for (int k = 0; k < 3; k++) {
                fa->layout = bad[k].fc;
                pa->layout = bad[k].pool;
                CHECK(bad[k].msg ? write_refused(e, bad[k].msg) : run_refused(e, xd, NULL, NULL));
            }
        }
        /* back to NHWC: the same values, no nChw16c */
        CHECK(kiln__fc_choose_layouts(e->graph, NULL, false) == nv && kiln__fc_c16_values(e->graph) == 0);
    }
    kiln_engine_free(e);
    kiln_model_free(m);
}

TEST(blocked_c16_chain) {
    if (!kiln__have_dnnl()) {
        printf("  built without oneDNN: skipped\n");
        return;
    }
    c16_case(1, 1, 1, true);
    c16_case(1, 2, 2, false); /* channel split of whole 16-channel blocks */
    c16_case(1, 3, 1, false); /* 3 threads, 64 channels: 4 blocks as 1 + 1 + 2 */
    c16_case(3, 2, 2, true);  /* the batch split, 1 + 2 images */
    /* channels that are not multiples of 16 somewhere: every tensor stays NHWC */
    int64_t xd[4];
    kiln_model *m = small_resnet(xd, 1, 24, 1);
    kiln_engine *e = build(m, (bopts){.opt = 1, .tuning = 0, .threads = 1});
    if (e) {
        set_fc_tactic(e, KILN_FC_TACTIC_DNNL_BLOCKED);
        CHECK(kiln__fc_choose_layouts(e->graph, NULL, true) >= 10);
        CHECK(kiln__fc_c16_values(e->graph) == 0);
        const kiln_node *mp = find_layer(e, "mp");
        CHECK(mp && ((const kiln_pool_attrs *)mp->attrs)->layout == KILN_POOL_LAYOUT_NHWC);
        /* a layer whose channels do not fit the blocked layout: refused */
        const kiln_node *c12 = find_layer(e, "c12+r12");
        if (c12) {
            kiln_fused_conv_attrs *fa = c12->attrs;
            int keep = fa->layout;
            fa->layout = KILN_FC_LAYOUT_X_C16 | KILN_FC_LAYOUT_Y_C16;
            fill_x(kiln__numel(4, xd));
            CHECK(run_refused(e, xd, "multiples of 16", "c12"));
            fa->layout = keep;
        }
    }
    kiln_engine_free(e);
    kiln_model_free(m);
    /* tuned: the builder runs the engine both ways and keeps the faster;
     * either way the outputs are the NCHW ones */
    for (int b = 1; b <= 3; b += 2) {
        m = small_resnet(xd, b, 16, 2);
        fill_x(kiln__numel(4, xd));
        kiln_engine *e0 = build(m, (bopts){.opt = 0, .tuning = 0, .threads = 2});
        e = build(m, (bopts){.opt = 1, .tuning = 1, .threads = 2});
        int64_t n0 = run(e0, x_in, xd, 0, y_ref, BIG), n1 = run(e, x_in, xd, 0, y_opt, BIG);
        CHECK(n0 == b * 64 && n1 == n0 && rel_err(y_opt, y_ref, n0) <= 1e-5);
        kiln_engine_free(e0);
        kiln_engine_free(e);
        kiln_model_free(m);
    }
}

/* kiln's direct kernel in the small ResNet (stem 3 -> 32 through the
 * padded copy, 1x1 layers in place, strided 3x3 and 1x1): alone on NCHW
 * tensors, and its 1x1 layers among oneDNN and Winograd ones with NHWC and
 * nChw16c tensors between them; batch 1 (panels split over the threads)
 * and 3, 1 to 3 threads, saved and loaded: the NCHW engine's outputs. */
static void direct_case(int64_t batch, int threads, int s2) {
    int64_t xd[4], n0 = 0;
    kiln_model *m = NULL;
    kiln_engine *e = small_resnet_ref(batch, threads, s2, xd, &m, &n0);
    if (e) {
        set_where_fits(e, KILN_FC_TACTIC_DIRECT, false);
        const kiln_node *stem = find_layer(e, "stem+rs"), *c12 = find_layer(e, "c12+r12");
        CHECK(stem && ((const kiln_tactic *)stem->attrs)->id == KILN_FC_TACTIC_DIRECT);
        CHECK(c12 && ((const kiln_tactic *)c12->attrs)->id == KILN_FC_TACTIC_DIRECT);
        const char *d = kiln_engine_describe(e, 0);
        CHECK(d && strstr(d, "tactic direct"));
        int64_t n1 = run(e, x_in, xd, 0, y_opt, BIG);
        double err = rel_err(y_opt, y_ref, n0);
        if (!(err <= 1e-5))
            fprintf(stderr, "  direct, NCHW, batch %lld, %d threads: relative error %g\n", (long long)batch, threads, err);
        CHECK(n1 == n0 && err <= 1e-5);
    }
    for (int c16 = 0; e && kiln__have_dnnl() && c16 < 2; c16++) {
        set_fc_tactic(e, KILN_FC_TACTIC_DNNL_BLOCKED);
        set_wino_where_fits(e, KILN_FC_TACTIC_WINO2);
        set_where_fits(e, KILN_FC_TACTIC_DIRECT, true);
        kiln__fc_clear_layouts(e->graph);
        CHECK(kiln__fc_choose_layouts(e->graph, NULL, c16) >= 10);
        const kiln_node *c13 = find_layer(e, "ds1+add1+r13");
        int32_t both = c16 ? KILN_FC_LAYOUT_X_C16 | KILN_FC_LAYOUT_Y_C16 : KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
        CHECK(c13 && ((const kiln_fused_conv_attrs *)c13->attrs)->tactic.id == KILN_FC_TACTIC_DIRECT &&
              ((const kiln_fused_conv_attrs *)c13->attrs)->layout == both);
        int64_t n1 = run(e, x_in, xd, 0, y_opt, BIG);
        double err = rel_err(y_opt, y_ref, n0);
        if (!(err <= 1e-5))
            fprintf(stderr, "  direct among oneDNN, %s, batch %lld, %d threads: relative error %g\n",
                    c16 ? "nChw16c" : "NHWC", (long long)batch, threads, err);
        CHECK(n1 == n0 && err <= 1e-5);
        kiln_engine *e2 = reload(e);
        CHECK(run(e2, x_in, xd, 0, y_opt, BIG) == n0 && rel_err(y_opt, y_ref, n0) <= 1e-5);
        kiln_engine_free(e2);
        /* a direct layer with blocked or NHWC tensors that the kernel
         * cannot run (a damaged engine: dilation 2 on the 1x1 layer, the
         * same output shape): refused with a message naming the layer */
        if (c13 && batch == 1 && threads == 1) {
            kiln_fused_conv_attrs *fa = c13->attrs;
            kiln_conv_attrs keep = fa->conv;
            fa->conv.n_dilations = 2;
            fa->conv.dilations[0] = fa->conv.dilations[1] = 2;
            CHECK(run_fails(e, xd, KILN_ERR_UNSUPPORTED, "for the direct kernel", "ds1"));
            fa->conv = keep;
        }
    }
    kiln_engine_free(e);
    kiln_model_free(m);
}

TEST(direct_in_chains) {
    if (!kiln__direct_fast_available()) {
        printf("  no AVX-512F: the direct tactic is not offered; skipped\n");
        return;
    }
    direct_case(1, 1, 1);
    direct_case(1, 2, 2);
    direct_case(1, 3, 1);
    direct_case(3, 2, 2);
}

/* Threads of this process (Linux), -1 where unknown. */
static int count_threads(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    int n = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "Threads:", 8)) n = atoi(line + 8);
    fclose(f);
    return n;
}

TEST(every_tactic_agrees) {
    int before = count_threads();
    tactics_agree(2, 2, false); /* small layers: one thread each */
    tactics_agree(1, 1, false);
    tactics_agree(3, 2, true);  /* batch split, uneven: 1 + 2 images */
    tactics_agree(1, 3, true);  /* bands of rows: 28 output rows in 9 + 9 + 10 */
    /* oneDNN ran on kiln's pool threads alone: no OpenMP team was started
     * (its threads would stay, spinning after each layer) */
    int after = count_threads();
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
    after = before = -1; /* ThreadSanitizer starts a thread of its own */
#endif
#endif
#if defined(__SANITIZE_THREAD__)
    after = before = -1;
#endif
    if (before > 0 && after > 0) CHECK(after == before);
}

/* The tactics listed for a 3x3 layer of C = M channels on HW x HW images
 * (batch n) contain `id`. */
static bool wino_listed(int64_t n, int64_t HW, int64_t C, int32_t id) {
    kiln_fused_conv_attrs at;
    memset(&at, 0, sizeof at);
    at.conv.group = 1;
    at.conv.n_pads = 4;
    for (int i = 0; i < 4; i++) at.conv.pads[i] = 1;
    kiln_tinfo x = {.dtype = KILN_DTYPE_FLOAT32, .rank = 4, .dims = {n, C, HW, HW}};
    kiln_tinfo w = {.dtype = KILN_DTYPE_FLOAT32, .rank = 4, .dims = {C, C, 3, 3}};
    kiln_tinfo y;
    const kiln_tinfo *in[2] = {&x, &w};
    kiln_tinfo *out[1] = {&y};
    const kiln_op_def *op = kiln__op_by_id(KILN_OP_FusedConv);
    kiln_infer_args ia = {.op = op, .attrs = &at, .node_name = "c", .n_in = 2, .n_out = 1, .in = in, .out = out};
    int32_t ids[8];
    int k = kiln__cpu_kernel_for(KILN_OP_FusedConv)->tactics(NULL, &ia, ids, 8);
    for (int q = 0; q < k; q++)
        if (ids[q] == id) return true;
    return false;
}

/* Which Winograd the tuner is offered: F(4x4) while its transformed weights
 * (36 / 9 of the layer's) are at most 3 MiB per image, else F(2x2) (16 / 9)
 * up to 6 MiB per image (ResNet-50's 14x14 layers at batch 1), else
 * neither (its 7x7 x 512 layers at batch 1: 16.8 MB). */
TEST(winograd_offered_by_weight_size) {
    if (!kiln__wino_fast_available()) {
        printf("  no AVX-512F: Winograd is not offered\n");
        CHECK(!wino_listed(1, 28, 128, KILN_FC_TACTIC_WINO) && !wino_listed(1, 14, 256, KILN_FC_TACTIC_WINO2));
        return;
    }
    CHECK(wino_listed(1, 28, 128, KILN_FC_TACTIC_WINO) && !wino_listed(1, 28, 128, KILN_FC_TACTIC_WINO2));
    CHECK(!wino_listed(1, 14, 256, KILN_FC_TACTIC_WINO) && wino_listed(1, 14, 256, KILN_FC_TACTIC_WINO2));
    CHECK(wino_listed(4, 14, 256, KILN_FC_TACTIC_WINO) && !wino_listed(4, 14, 256, KILN_FC_TACTIC_WINO2));
    CHECK(!wino_listed(1, 7, 512, KILN_FC_TACTIC_WINO) && !wino_listed(1, 7, 512, KILN_FC_TACTIC_WINO2));
    CHECK(!wino_listed(8, 7, 512, KILN_FC_TACTIC_WINO) && wino_listed(8, 7, 512, KILN_FC_TACTIC_WINO2));
}

/* One NHWC float32 FusedConv run by oneDNN (tactic dnnl-blocked) at batch 1
 * on `pool`, with its state kept in *ns: C -> M channels, k x k kernel,
 * stride st, pads k / 2, bias and residual optional (alias: the residual
 * is the output buffer itself, as the plan arranges in place). y gets the
 * output (NHWC). */
typedef struct split_case {
    int64_t C, M, H, k, st;
    bool bias, residual, alias;
    bool c16; /* nChw16c in and out instead of NHWC */
} split_case;

static void run_dnnl_layer(const split_case *sc, const float *x, const float *w, const float *b, const float *r,
                           float *y, kiln_pool *pool, kiln_node_state *ns) {
    const kiln_op_def *op = kiln__op_by_id(KILN_OP_FusedConv);
    kiln_fused_conv_attrs at;
    memset(&at, 0, sizeof at);
    at.tactic.id = KILN_FC_TACTIC_DNNL_BLOCKED;
    at.conv.group = 1;
    at.conv.n_pads = 4;
    for (int i = 0; i < 4; i++) at.conv.pads[i] = sc->k / 2;
    at.conv.n_strides = 2;
    at.conv.strides[0] = at.conv.strides[1] = sc->st;
    at.act = KILN_FC_ACT_RELU;
    at.has_residual = sc->residual;
    at.layout = sc->c16 ? KILN_FC_LAYOUT_X_C16 | KILN_FC_LAYOUT_Y_C16 : KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
    int64_t Ho = (sc->H + 2 * (sc->k / 2) - sc->k) / sc->st + 1;
    kiln_tensor X = {KILN_DTYPE_FLOAT32, 4, {1, sc->C, sc->H, sc->H}, (void *)x};
    kiln_tensor W = {KILN_DTYPE_FLOAT32, 4, {sc->M, sc->C, sc->k, sc->k}, (void *)w};
    kiln_tensor B = {KILN_DTYPE_FLOAT32, 1, {sc->M}, (void *)b};
    kiln_tensor Y = {KILN_DTYPE_FLOAT32, 4, {1, sc->M, Ho, Ho}, y};
    kiln_tensor R = {KILN_DTYPE_FLOAT32, 4, {1, sc->M, Ho, Ho}, sc->alias ? y : (void *)r};
    if (sc->alias) memcpy(y, r, sizeof(float) * (size_t)(sc->M * Ho * Ho));
    const kiln_tensor *in[4] = {&X, &W, sc->bias ? &B : NULL, sc->residual ? &R : NULL};
    kiln_tensor *out[1] = {&Y};
    kiln_tinfo ti[4], to;
    const kiln_tinfo *tip[4] = {0};
    for (int i = 0; i < 4; i++)
        if (in[i]) {
            ti[i] = (kiln_tinfo){.dtype = in[i]->dtype, .rank = in[i]->rank};
            memcpy(ti[i].dims, in[i]->dims, sizeof ti[i].dims);
            tip[i] = &ti[i];
        }
    kiln_tinfo *top[1] = {&to};
    int n_in = sc->residual ? 4 : 3;
    kiln_infer_args ia = {.op = op, .attrs = &at, .node_name = "c", .n_in = n_in, .n_out = 1, .in = tip, .out = top};
    const kiln_kernel *k = kiln__cpu_kernel_for(KILN_OP_FusedConv); /* the CPU backend's, with its tactics */
    size_t ws = kiln__kernel_workspace(k, &ia);
    void *wsm = ws ? kiln__aligned_alloc(ws) : NULL;
    kiln_kernel_args ka = {.op = op, .attrs = &at, .node_name = "c", .n_in = n_in, .n_out = 1, .in = in, .out = out,
                           .workspace = wsm, .workspace_size = ws, .pool = pool, .node_state = ns};
    CHECK_OK(k->run(&ka));
    kiln__aligned_free(wsm);
}

/* Batch-1 oneDNN layers whose weights outweigh their activations run as
 * shares of the output channels (each thread streams its share of the
 * weights): the same results as one thread, for uneven shares of 16-channel
 * blocks, with and without bias, with a residual apart or in place, a
 * strided layer; layers with larger activations still split rows. In
 * nChw16c every batch-1 layer splits its channel blocks (a band of rows is
 * not dense there), each part writing its own run of the output. */
TEST(dnnl_channel_split) {
    if (!kiln__have_dnnl()) {
        printf("  kiln built without oneDNN: nothing to split\n");
        return;
    }
    static const split_case cases[] = {
        {64, 256, 7, 3, 1, true, true, false, false},   /* layer4's 3x3: 16 blocks, 3 parts 5 + 5 + 6 */
        {512, 208, 7, 1, 1, false, true, true, false},  /* 13 blocks: 6 + 7, 4 + 4 + 5; residual in place */
        {128, 128, 14, 3, 2, true, false, false, false}, /* stride 2, 14 -> 7 */
        {32, 64, 28, 3, 1, true, true, false, false},   /* activations outweigh the weights: rows */
    };
    kiln_pool *pools[2] = {NULL, NULL};
    CHECK_OK(kiln__pool_create(2, &pools[0]));
    CHECK_OK(kiln__pool_create(3, &pools[1]));
    for (size_t cj = 0; cj < 2 * sizeof cases / sizeof cases[0]; cj++) {
        size_t ci = cj / 2;
        split_case scv = cases[ci];
        scv.c16 = cj % 2;
        const split_case *sc = &scv;
        int64_t Ho = (sc->H + 2 * (sc->k / 2) - sc->k) / sc->st + 1;
        int64_t nx = sc->C * sc->H * sc->H, nw = sc->M * sc->C * sc->k * sc->k, ny = sc->M * Ho * Ho;
        float *x = malloc(sizeof(float) * (size_t)nx), *w = malloc(sizeof(float) * (size_t)nw);
        float *b = malloc(sizeof(float) * (size_t)sc->M), *r = malloc(sizeof(float) * (size_t)ny);
        float *ref = malloc(sizeof(float) * (size_t)ny), *y = malloc(sizeof(float) * (size_t)ny);
        for (int64_t i = 0; i < nx; i++) x[i] = frand();
        for (int64_t i = 0; i < nw; i++) w[i] = frand() * 0.1f;
        for (int64_t i = 0; i < sc->M; i++) b[i] = frand();
        for (int64_t i = 0; i < ny; i++) r[i] = frand();
        kiln_node_state ns0 = {0};
        run_dnnl_layer(sc, x, w, b, r, ref, NULL, &ns0); /* one thread: one part */
        CHECK(kiln__dnnl_conv_split(&ns0, NULL) == KILN_DNNL_SPLIT_BATCH);
        if (ns0.p) ns0.free(ns0.p);
        bool chans = ci < 3 || sc->c16;
        for (int pi = 0; pi < 2; pi++) {
            kiln_node_state ns = {0};
            for (int rep = 0; rep < 2; rep++) { /* the kept state runs again */
                for (int64_t i = 0; i < ny; i++) y[i] = NAN;
                run_dnnl_layer(sc, x, w, b, r, y, pools[pi], &ns);
                double err = rel_err(y, ref, ny);
                if (!(err <= 1e-5))
                    fprintf(stderr, "  case %zu%s, %d threads: relative error %g\n", ci, sc->c16 ? " (c16)" : "",
                            pi + 2, err);
                CHECK(err <= 1e-5);
            }
            int parts = 0;
            int split = kiln__dnnl_conv_split(&ns, &parts);
            if (split != (chans ? KILN_DNNL_SPLIT_CHANS : KILN_DNNL_SPLIT_ROWS) || parts != pi + 2)
                fprintf(stderr, "  case %zu%s, %d threads: split %d in %d parts\n", ci, sc->c16 ? " (c16)" : "",
                        pi + 2, split, parts);
            CHECK(split == (chans ? KILN_DNNL_SPLIT_CHANS : KILN_DNNL_SPLIT_ROWS) && parts == pi + 2);
            if (ns.p) ns.free(ns.p);
        }
        free(x), free(w), free(b), free(r), free(ref), free(y);
    }
    kiln__pool_free(pools[0]);
    kiln__pool_free(pools[1]);
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* Writes timing cache `txt` to path with every entry (only the in-network
 * ones: `net_only`) saying tactic `id` took `us` microseconds; the header
 * and the other entries as they are. */
static void rewrite_cache(const char *path, const char *txt, bool net_only, int id, const char *us) {
    FILE *f = fopen(path, "w");
    for (const char *l = txt; f && *l;) {
        const char *nl = strchr(l, '\n');
        int len = nl ? (int)(nl - l) : (int)strlen(l);
        const char *sp = memchr(l, ' ', (size_t)len), *net = strstr(l, "|in-network ");
        bool entry = strncmp(l, "kiln-timing-cache", 17) && sp && (!net_only || (net && net < l + len));
        if (entry) fprintf(f, "%.*s %d %s\n", (int)(sp - l), l, id, us);
        else fprintf(f, "%.*s\n", len, l);
        l += len + (nl ? 1 : 0);
    }
    if (f) fclose(f);
}

/* Builds m with timing cache `path` (its other settings the defaults); the status. */
static kiln_status build_with_cache(const kiln_model *m, const char *path) {
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_timing_cache(b, path));
    kiln_status st = kiln_build(b, m, &e);
    kiln_engine_free(e);
    kiln_builder_free(b);
    return st;
}

/* Tuning on and off give the same outputs; the timing cache is written,
 * and read back by the next build (whose choices it then dictates). */
TEST(tuning_and_timing_cache) {
    int64_t xd[4];
    kiln_model *m = chain_model(xd);
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln_test_tc_%ld.txt", (long)getpid());
    remove(path);
    kiln_engine *e1 = build(m, (bopts){.opt = 1, .tuning = 1, .cache = path});
    kiln_engine *e0 = build(m, (bopts){.opt = 1, .tuning = 0});
    int64_t nx = kiln__numel(4, xd);
    fill_x(nx);
    int64_t n0 = run(e0, x_in, xd, 0, y_ref, BIG), n1 = run(e1, x_in, xd, 0, y_opt, BIG);
    CHECK(n0 > 0 && n0 == n1 && rel_err(y_opt, y_ref, n0) <= 1e-5);
    if (!kiln__have_dnnl()) { /* one tactic per layer: nothing is timed, no cache written */
        fprintf(stderr, "  note: built without oneDNN, timing cache checks skipped\n");
        kiln_engine_free(e0);
        kiln_engine_free(e1);
        goto not_a_cache;
    }
    char *txt = read_file(path);
    CHECK(txt && !strncmp(txt, "kiln-timing-cache 5\n", 20));
    int lines = 0, net_lines = 0;
    for (const char *p = txt ? txt : ""; *p; p++) lines += *p == '\n';
    for (const char *p = txt ? txt : ""; (p = strstr(p, "|in-network ")); p++) net_lines++;
    int n_multi = 0; /* layers with several tactics: the ones timed */
    for (int i = 0; e1 && i < e1->graph->n_nodes; i++) {
        const kiln_fused_conv_attrs *fa = e1->graph->nodes[i].attrs;
        if (e1->graph->nodes[i].op_id == KILN_OP_FusedConv && fa->tactic.us > 0) n_multi++;
    }
    /* a line per layer timed; with the direct kernel, one per layer of
     * its in-network trial too */
    CHECK(lines >= 1 && lines - 1 - net_lines <= n_multi && net_lines <= n_multi);
    CHECK(kiln__direct_fast_available() ? net_lines > 0 : net_lines == 0);
    /* A second build reads the cache: same choices (the in-network ones too). */
    kiln_engine *e2 = build(m, (bopts){.opt = 1, .tuning = 1, .cache = path});
    for (int i = 0; e1 && e2 && i < e1->graph->n_nodes; i++) {
        const kiln_tactic *t1 = e1->graph->nodes[i].attrs, *t2 = e2->graph->nodes[i].attrs;
        if (e1->graph->nodes[i].op_id != KILN_OP_FusedConv) continue;
        CHECK(t1->id == t2->id);
        CHECK(fabsf(t1->us - t2->us) <= 0.001f + 1e-6f * t1->us);
    }
    kiln_engine_free(e2);
    /* The in-network entries all saying "direct, 3 us": the next build takes
     * the direct kernel in exactly those layers, without a trial. */
    if (txt && net_lines > 0) {
        rewrite_cache(path, txt, true, KILN_FC_TACTIC_DIRECT, "3.000");
        e2 = build(m, (bopts){.opt = 1, .tuning = 1, .cache = path});
        int n3 = 0;
        for (int i = 0; e2 && i < e2->graph->n_nodes; i++) {
            const kiln_tactic *t = e2->graph->nodes[i].attrs;
            if (e2->graph->nodes[i].op_id == KILN_OP_FusedConv && t->id == KILN_FC_TACTIC_DIRECT)
                n3 += t->us == 3.0f;
        }
        CHECK(n3 == net_lines);
        int64_t n2 = run(e2, x_in, xd, 0, y_opt, BIG);
        CHECK(n2 == n0 && rel_err(y_opt, y_ref, n0) <= 1e-5);
        kiln_engine_free(e2);
        free(txt);
        txt = read_file(path); /* as the build rewrote it (unchanged: nothing was timed anew) */
    }
    /* Rewrite the cache: every entry says tactic 0 took 7 us. The next build
     * must take that from the file instead of timing. */
    if (txt && lines > 1) {
        rewrite_cache(path, txt, false, 0, "7.000");
        e2 = build(m, (bopts){.opt = 1, .tuning = 1, .cache = path});
        int n7 = 0;
        for (int i = 0; e2 && i < e2->graph->n_nodes; i++) {
            const kiln_tactic *t = e2->graph->nodes[i].attrs;
            if (e2->graph->nodes[i].op_id != KILN_OP_FusedConv || t->us == 0) continue;
            /* kiln's own kernels in every layer change the layouts, so the
             * in-network choices of the first build do not apply: the
             * direct kernel may take a layer again (network_direct) */
            CHECK((t->id == 0 && t->us == 7.0f) || t->id == KILN_FC_TACTIC_DIRECT);
            n7++;
        }
        CHECK(n7 == n_multi);
        kiln_engine_free(e2);
    }
    remove(path);
    free(txt);
    kiln_engine_free(e0);
    kiln_engine_free(e1);
not_a_cache:;
    /* A file that is not a cache is refused with its name. */
    FILE *f = fopen(path, "w");
    fprintf(f, "something else\n");
    fclose(f);
    CHECK_ERR(build_with_cache(m, path), KILN_ERR_IO, "not a kiln timing cache");
    /* A cache of version 1 (before tactics had to agree on their outputs),
     * 2 (before disagreeing tactics were judged by the host reference), 3
     * (before the NaN probe) or 4 (before its input with infinities) is read
     * as empty: its entry is not used, the layers are timed again and the
     * file is rewritten as version 5. */
    for (int v = 1; v <= 4; v++) {
        f = fopen(path, "w");
        fprintf(f, "kiln-timing-cache %d\nsome-key 7 1.5\n", v);
        fclose(f);
        kiln_engine *e4 = build(m, (bopts){.opt = 1, .tuning = 1, .cache = path});
        CHECK(e4 != NULL);
        char *txt4 = read_file(path);
        if (kiln__have_dnnl())
            CHECK(txt4 && !strncmp(txt4, "kiln-timing-cache 5\n", 20) && !strstr(txt4, "some-key"));
        free(txt4);
        kiln_engine_free(e4);
    }
    remove(path);
    kiln_model_free(m);
}

/* ---- a build that shares its timing cache file with another one ---------
 * Builds writing one cache file at once (make -j, CI jobs) each read it
 * before tuning and write it whole after: the last rename dropped every
 * entry the others wrote in between. Here the other build is simulated
 * deterministically: the build's stderr is a full pipe, so that with
 * verbosity 2 it blocks in its first "kiln: tune" line (after it read the
 * cache); while it waits there, the test writes an entry of another build
 * into the file; then the pipe is drained. The build's cache must keep it. */
typedef struct tc_build {
    const kiln_model *m;
    const char *path;
    kiln_status st;
    atomic_int tid, done;
} tc_build;

static void *tc_build_main(void *arg) {
    tc_build *t = arg;
    atomic_store(&t->tid, (int)syscall(SYS_gettid));
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    t->st = kiln_builder_create(&b);
    if (t->st == KILN_OK) t->st = kiln_builder_set_threads(b, 1);
    if (t->st == KILN_OK) t->st = kiln_builder_set_verbosity(b, 2);
    if (t->st == KILN_OK) t->st = kiln_builder_set_timing_cache(b, t->path);
    if (t->st == KILN_OK) t->st = kiln_build(b, t->m, &e);
    kiln_engine_free(e);
    kiln_builder_free(b);
    atomic_store(&t->done, 1);
    return NULL;
}

/* Whether thread tid is blocked in write(2, ...) (/proc: its syscall number
 * and first argument). */
static bool blocked_writing_stderr(int tid) {
    char path[64], buf[128] = "";
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool yes = fgets(buf, sizeof buf, f) && !strncmp(buf, "1 0x2 ", 6); /* SYS_write, fd 2 */
    fclose(f);
    return yes;
}

TEST(timing_cache_shared_by_builds) {
    if (!kiln__have_dnnl()) {
        fprintf(stderr, "  note: built without oneDNN (nothing to time), skipped\n");
        return;
    }
    int64_t xd[4];
    kiln_model *m = chain_model(xd);
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln_test_tcs_%ld.txt", (long)getpid());
    remove(path);
    int fds[2];
    if (!m || pipe(fds) != 0) {
        CHECK(!"pipe");
        kiln_model_free(m);
        return;
    }
    (void)fcntl(fds[1], F_SETPIPE_SZ, 4096);
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    char fill[512];
    memset(fill, '.', sizeof fill);
    while (write(fds[1], fill, sizeof fill) > 0) { /* fill the pipe */
    }
    while (write(fds[1], fill, 1) > 0) {
    }
    fcntl(fds[1], F_SETFL, 0); /* the build's writes block */
    fflush(stderr);
    int saved = dup(2);
    dup2(fds[1], 2);
    tc_build t = {.m = m, .path = path};
    atomic_init(&t.tid, 0);
    atomic_init(&t.done, 0);
    pthread_t th;
    pthread_create(&th, NULL, tc_build_main, &t);
    bool blocked = false;
    for (int i = 0; i < 20000 && !blocked && !atomic_load(&t.done); i++) {
        int tid = atomic_load(&t.tid);
        blocked = tid && blocked_writing_stderr(tid);
        if (!blocked) usleep(1000);
    }
    if (blocked) { /* the other build's entry, written as a build writes: temporary + rename */
        char tmp[80];
        snprintf(tmp, sizeof tmp, "%s.other", path);
        FILE *f = fopen(tmp, "w");
        if (f) {
            fprintf(f, "kiln-timing-cache 5\nanother_build|key 3 12.500\n");
            fclose(f);
        }
        CHECK(rename(tmp, path) == 0);
    }
    /* drain: the filler, then what the build prints, until it is done */
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    char got[4096 + 512];
    size_t n_got = 0;
    for (;;) {
        char buf[4096];
        ssize_t r = read(fds[0], buf, sizeof buf);
        if (r > 0) {
            for (ssize_t k = 0; k < r; k++)
                if (buf[k] != '.' && n_got + 1 < sizeof got) got[n_got++] = buf[k];
            continue;
        }
        if (atomic_load(&t.done)) break;
        usleep(1000);
    }
    got[n_got] = 0;
    pthread_join(th, NULL);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fds[0]);
    close(fds[1]);
    CHECK_OK(t.st);
    CHECK(blocked); /* the build waited in its first line */
    CHECK(!strncmp(got, "kiln: tune ", 11)); /* which came after it read the cache */
    char *txt = read_file(path);
    CHECK(txt && !strncmp(txt, "kiln-timing-cache 5\n", 20));
    CHECK(txt && strstr(txt, "\nanother_build|key 3 12.500\n")); /* kept */
    int lines = 0;
    for (const char *q = txt ? txt : ""; *q; q++) lines += *q == '\n';
    CHECK(lines >= 3); /* and this build's own entries */
    free(txt);
    remove(path);
    kiln_model_free(m);
}

/* Hostile and careless timing caches (issue 20): a file of 200,000 entries
 * is read in linear time (it was a list searched key by key: n^2/2 key
 * comparisons, about an hour for 10^6 lines); lines with a NaN, infinite or
 * negative time (a NaN reached the engine, and inspect's JSON said
 * "us": nan), an id beyond int32, something after the time, or more than
 * 8190 characters (fgets split it into two "lines") are refused with the
 * file's name and line. And an engine whose layer time is NaN describes
 * itself as valid JSON ("us": null). */
TEST(timing_cache_hostile) {
    int64_t xd[4];
    kiln_model *m = chain_model(xd);
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln_test_tch_%ld.txt", (long)getpid());
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fprintf(f, "kiln-timing-cache 5\n");
    for (int i = 0; i < 200000; i++) fprintf(f, "cpu_some_target|t1|acc|kiln.FusedConv|%08x|float32:1x8x16x16 1 2.5\n", i);
    fclose(f);
    double t0 = kiln__now_us();
    kiln_engine *e = build(m, (bopts){.opt = 1, .tuning = 1, .cache = path});
    double secs = (kiln__now_us() - t0) / 1e6;
    fprintf(stderr, "  a build reading and rewriting a cache of 200,000 entries: %.2f s\n", secs);
    CHECK(e != NULL && secs < 30.0);
    kiln_engine_free(e);
    static const char *bad[] = {
        "k 1 nan", "k 1 inf", "k 1 -2.5", "k 1 1e39", "k 99999999999 1.0", "k -99999999999 1.0", "k 1 2.0 x",
        "k 1", "k x 1.0", " 1 1.0", "k 1 0x",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        f = fopen(path, "w");
        fprintf(f, "kiln-timing-cache 5\nok-key 0 1.0\n%s\n", bad[i]);
        fclose(f);
        kiln_status st = build_with_cache(m, path);
        if (st != KILN_ERR_IO || !strstr(kiln_last_error(), "line 3 is malformed"))
            fprintf(stderr, "  line '%s': status %d: %s\n", bad[i], st, kiln_last_error());
        CHECK(st == KILN_ERR_IO && strstr(kiln_last_error(), "line 3 is malformed"));
    }
    f = fopen(path, "w");
    fprintf(f, "kiln-timing-cache 5\n");
    for (int i = 0; i < 9000; i++) fputc('a', f);
    fprintf(f, " 1 1.0\n");
    fclose(f);
    CHECK_ERR(build_with_cache(m, path), KILN_ERR_IO, "line 2 is longer than 8190 characters");
    /* a NUL byte: refused (the line was read up to it, "k 1 2.0\0junk" as "k 1 2.0"), also in a
     * line over the limit (whose length then went unseen) */
    f = fopen(path, "w");
    fprintf(f, "kiln-timing-cache 5\nok-key 0 1.0\n");
    fwrite("k 1 2.0\0junk\n", 1, 13, f);
    fclose(f);
    CHECK_ERR(build_with_cache(m, path), KILN_ERR_IO, "line 3 holds a NUL byte");
    f = fopen(path, "w");
    fprintf(f, "kiln-timing-cache 5\nk");
    fputc(0, f);
    for (int i = 0; i < 9000; i++) fputc('a', f);
    fprintf(f, " 1 1.0\n");
    fclose(f);
    CHECK_ERR(build_with_cache(m, path), KILN_ERR_IO, "line 2 is longer than 8190 characters");
    /* CRLF line ends (a checkout that converted them): read as the same cache */
    f = fopen(path, "w");
    fprintf(f, "kiln-timing-cache 5\r\nok-key 0 1.0\r\nother-key 1 2.5\r\n");
    fclose(f);
    CHECK_OK(build_with_cache(m, path));
    char *crlf = read_file(path); /* rewritten (the layers were timed) with the two keys kept */
    if (kiln__have_dnnl()) /* (else nothing is timed and the file stays as it was) */
        CHECK(crlf && !strncmp(crlf, "kiln-timing-cache 5\n", 20) && strstr(crlf, "\nok-key 0 1.000\n") &&
              strstr(crlf, "\nother-key 1 2.500\n") && !strchr(crlf, '\r'));
    free(crlf);
    remove(path);
    /* an engine's layer time of NaN or inf: JSON null */
    e = build(m, (bopts){.opt = 1, .tuning = 1});
    int set = 0;
    for (int i = 0; e && i < e->graph->n_nodes; i++) {
        kiln_node *n = &e->graph->nodes[i];
        if (n->op_id != KILN_OP_FusedConv) continue;
        ((kiln_tactic *)n->attrs)->us = set++ % 2 ? INFINITY : NAN;
    }
    const char *js = e ? kiln_engine_describe(e, 1) : NULL;
    CHECK(set > 0 && js && !strstr(js, "nan") && !strstr(js, "inf\"") && !strstr(js, ": inf"));
    if (kiln__have_dnnl()) CHECK(js && strstr(js, "\"us\": null"));
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* bf16 engines on a CPU with avx512_bf16: close to fp32, and the engine
 * records the CPU feature; elsewhere the build is refused. */
TEST(bf16_cpu) {
    int64_t xd[4];
    kiln_model *m = chain_model(xd);
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_precision(b, KILN_PRECISION_BF16));
    kiln_status s = kiln_build(b, m, &e);
    if (!kiln__have_dnnl()) {
        fprintf(stderr, "  note: built without oneDNN, bf16 checks skipped (the build is refused)\n");
        CHECK(s == KILN_ERR_UNSUPPORTED && strstr(kiln_last_error(), "oneDNN"));
    } else if (!kiln__cpu_has_bf16()) {
        CHECK(s == KILN_ERR_UNSUPPORTED && strstr(kiln_last_error(), "avx512_bf16"));
    } else {
        CHECK_OK(s);
        kiln_engine *ef = build(m, (bopts){.opt = 1, .tuning = 0});
        fill_x(kiln__numel(4, xd));
        int64_t n0 = run(ef, x_in, xd, 0, y_ref, BIG), n1 = run(e, x_in, xd, 0, y_opt, BIG);
        CHECK(n0 > 0 && n0 == n1);
        double err = rel_err(y_opt, y_ref, n0);
        CHECK(err <= 2e-2 && err > 0);
        /* tensors between the bf16 layers are passed NHWC in bf16 */
        int n_bf16 = 0;
        for (int i = 0; e && i < e->graph->n_nodes; i++)
            if (e->graph->nodes[i].op_id == KILN_OP_FusedConv)
                n_bf16 += (((const kiln_fused_conv_attrs *)e->graph->nodes[i].attrs)->layout &
                           KILN_FC_LAYOUT_Y_BF16) != 0;
        CHECK(n_bf16 == 3);
        /* a layer named in the layer precisions stays fp32 (the others bf16) */
        kiln_builder *b2 = NULL;
        kiln_engine *e2 = NULL;
        CHECK_OK(kiln_builder_create(&b2));
        CHECK_OK(kiln_builder_set_precision(b2, KILN_PRECISION_BF16));
        CHECK_OK(kiln_builder_set_layer_precision(b2, "ca", KILN_PRECISION_FP32));
        CHECK_OK(kiln_build(b2, m, &e2));
        int n_fp32 = 0, n_conv = 0;
        for (int i = 0; e2 && i < e2->graph->n_nodes; i++) {
            const kiln_node *n = &e2->graph->nodes[i];
            if (n->op_id != KILN_OP_FusedConv) continue;
            bool f32 = ((const kiln_fused_conv_attrs *)n->attrs)->precision == KILN_PRECISION_FP32;
            n_fp32 += f32;
            n_conv++;
            if (f32) CHECK(!strncmp(n->name, "ca+", 3));
        }
        CHECK(n_fp32 == 1 && n_conv == 4);
        int64_t n2 = run(e2, x_in, xd, 0, y_opt, BIG);
        CHECK(n2 == n0 && rel_err(y_opt, y_ref, n0) <= 2e-2);
        kiln_engine_free(e2);
        kiln_builder_free(b2);
        void *data = NULL;
        size_t size = 0;
        CHECK_OK(kiln_engine_serialize(e, &data, &size));
        CHECK(data && size > 512 && memmem(data, 512, "avx512_bf16", 11) != NULL);
        kiln_free(data);
        kiln_engine_free(ef);
    }
    kiln_engine_free(e);
    kiln_builder_free(b);
    kiln_model_free(m);
}

/* The tactics the tuner is offered for a 3x3 layer of 128 channels on
 * 28x28 (batch 1), with or without fast math, contain `id`. */
static bool offered(bool fast_math, int32_t id) {
    kiln_fused_conv_attrs at;
    memset(&at, 0, sizeof at);
    at.conv.group = 1;
    at.conv.n_pads = 4;
    for (int i = 0; i < 4; i++) at.conv.pads[i] = 1;
    kiln_tinfo x = {.dtype = KILN_DTYPE_FLOAT32, .rank = 4, .dims = {1, 128, 28, 28}};
    kiln_tinfo w = {.dtype = KILN_DTYPE_FLOAT32, .rank = 4, .dims = {128, 128, 3, 3}};
    kiln_tinfo y;
    const kiln_tinfo *in[2] = {&x, &w};
    kiln_tinfo *out[1] = {&y};
    kiln_infer_args ia = {.op = kiln__op_by_id(KILN_OP_FusedConv), .attrs = &at, .node_name = "c", .n_in = 2,
                          .n_out = 1, .in = in, .out = out};
    int32_t ids[8];
    int k = kiln__backend_tactics(kiln__backend_for(KILN_DEVICE_CPU), NULL, &ia, fast_math, ids, 8);
    for (int q = 0; q < k; q++)
        if (ids[q] == id) return true;
    return false;
}

/* The FusedConv layers of e that run a Winograd tactic. */
static int wino_layers(const kiln_engine *e) {
    int n = 0;
    for (int i = 0; e && i < e->graph->n_nodes; i++)
        if (e->graph->nodes[i].op_id == KILN_OP_FusedConv)
            n += kiln__fc_wino_tile(((const kiln_tactic *)e->graph->nodes[i].attrs)->id) != 0;
    return n;
}

/* Fast math (kiln_builder_set_fast_math): float32 engines get the Winograd
 * tactics, which round more than a direct convolution, only when asked;
 * the engine (its file too) and inspect say which; a timing cache made
 * with one setting is not used by a build with the other. */
TEST(fast_math_policy) {
    CHECK(!offered(false, KILN_FC_TACTIC_WINO) && !offered(false, KILN_FC_TACTIC_WINO2));
    CHECK(offered(true, KILN_FC_TACTIC_WINO) == kiln__wino_fast_available());
    int64_t xd[4];
    kiln_model *m = chain_model_n(xd, 1, true); /* layer cb: 3x3, 128 channels, 28x28 */
    char path[64];
    snprintf(path, sizeof path, "/tmp/kiln_test_fm_%ld.txt", (long)getpid());
    remove(path);
    kiln_engine *ef = build(m, (bopts){.opt = 1, .tuning = 1, .cache = path, .fast_math = 1});
    kiln_engine *ea = build(m, (bopts){.opt = 1, .tuning = 1});
    CHECK(ea && ea->opts.math == KILN_MATH_ACCURATE && wino_layers(ea) == 0);
    CHECK(ef && ef->opts.math == KILN_MATH_FAST);
    const char *d = ea ? kiln_engine_describe(ea, 0) : NULL;
    CHECK(d && strstr(d, "math:      accurate\n"));
    d = ef ? kiln_engine_describe(ef, 0) : NULL;
    CHECK(d && strstr(d, "math:      fast (--fast-math"));
    d = ef ? kiln_engine_describe(ef, 1) : NULL;
    CHECK(d && strstr(d, "\"math\": \"fast\""));
    /* the setting survives the file */
    void *bytes = NULL;
    size_t size = 0;
    kiln_engine *back = NULL;
    if (ef) CHECK_OK(kiln_engine_serialize(ef, &bytes, &size));
    if (bytes) CHECK_OK(kiln_engine_load_memory(bytes, size, &back));
    CHECK(back && back->opts.math == KILN_MATH_FAST);
    kiln_engine_free(back);
    back = NULL;
    if (bytes) {
        /* a file from before the field (reserved, zero) is "not recorded";
         * a value no kiln writes is refused (the checksum fixed up) */
        unsigned char *h = bytes;
        for (int v = 0; v <= 3; v += 3) {
            memset(h + KILN_FMT_OFF_MATH, 0, 4);
            h[KILN_FMT_OFF_MATH] = (unsigned char)v;
            uint64_t sum = kiln__format_checksum(bytes, size);
            for (int i = 0; i < 8; i++) h[KILN_FMT_OFF_CHECKSUM + i] = (unsigned char)(sum >> (8 * i));
            kiln_status st = kiln_engine_load_memory(bytes, size, &back);
            if (v == 0) {
                CHECK(st == KILN_OK && back && back->opts.math == KILN_MATH_UNRECORDED);
                d = back ? kiln_engine_describe(back, 0) : NULL;
                CHECK(d && strstr(d, "math:      not recorded\n"));
            } else {
                CHECK(st != KILN_OK && strstr(kiln_last_error(), "math 3"));
            }
            kiln_engine_free(back);
            back = NULL;
        }
        kiln_free(bytes);
    }
    char *txt = read_file(path);
    if (!kiln__have_dnnl() || !kiln__wino_fast_available() || !txt) {
        fprintf(stderr, "  note: no oneDNN or no AVX-512F: one tactic per layer, cache checks skipped\n");
        goto done;
    }
    CHECK(strstr(txt, "|fast|") && !strstr(txt, "|acc|"));
    /* the fast-math cache saying "Winograd, 1 us" everywhere: a fast-math
     * build takes it in layer cb; a default build reading it does not */
    rewrite_cache(path, txt, false, KILN_FC_TACTIC_WINO, "1.000");
    kiln_engine_free(ef);
    ef = build(m, (bopts){.opt = 1, .tuning = 1, .cache = path, .fast_math = 1});
    CHECK(wino_layers(ef) == 1);
    kiln_engine_free(ea);
    ea = build(m, (bopts){.opt = 1, .tuning = 1, .cache = path});
    CHECK(ea && wino_layers(ea) == 0);
    free(txt);
    txt = read_file(path); /* now with the default build's own entries */
    CHECK(txt && strstr(txt, "|acc|") && strstr(txt, "|fast|"));
    /* entries of the fast-math build saying "tactic 0, 7 us": the default
     * build times its layers itself */
    remove(path);
    kiln_engine_free(ef);
    ef = build(m, (bopts){.opt = 1, .tuning = 1, .cache = path, .fast_math = 1});
    free(txt);
    txt = read_file(path);
    if (txt) rewrite_cache(path, txt, false, 0, "7.000");
    kiln_engine_free(ea);
    ea = build(m, (bopts){.opt = 1, .tuning = 1, .cache = path});
    int n7 = 0, n_timed = 0;
    for (int i = 0; ea && i < ea->graph->n_nodes; i++) {
        const kiln_tactic *t = ea->graph->nodes[i].attrs;
        if (ea->graph->nodes[i].op_id != KILN_OP_FusedConv) continue;
        n7 += t->us == 7.0f;
        n_timed += t->us > 0;
    }
    CHECK(n_timed > 0 && n7 == 0);
done:
    remove(path);
    free(txt);
    kiln_engine_free(ea);
    kiln_engine_free(ef);
    kiln_model_free(m);
}

int main(void) {
    RUN(long_weight_name);
    RUN(conv_bn_add_relu);
    RUN(activations);
    RUN(hard_sigmoid_se_gate);
    RUN(no_fusion_when_shared);
    RUN(inverted_residual_block);
    RUN(every_tactic_agrees);
    RUN(special_values_every_tactic);
    RUN(winograd_offered_by_weight_size);
    RUN(fast_math_policy);
    RUN(dnnl_channel_split);
    RUN(maxpool_in_nhwc_chain);
    RUN(residual_nhwc_output_nchw);
    RUN(gap_reads_nhwc);
    RUN(blocked_c16_chain);
    RUN(direct_in_chains);
    RUN(tuning_and_timing_cache);
    RUN(timing_cache_hostile);
    RUN(timing_cache_shared_by_builds);
    RUN(bf16_cpu);
    return test_summary();
}
