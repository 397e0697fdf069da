/* test_debug.c -- what `kiln debug` stands on (docs/debugging.md), on a
 * small convolution network built in memory: optimizer passes switched off
 * by name, the ONNX nodes every layer was made from (and the names of its
 * tensors), the layer callback with kiln_context_tensor (tensors that
 * layers keep NHWC or nChw16c read back in their logical layout), memory
 * reuse off, misuse of the debugging calls, and the test-only planted bug
 * KILN_TEST_PLANT_BUG. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/cpu_layout.h"

#include "graph_build.h"
#include "backends/cpu/kernels/fused_conv_cpu.h"
#include "runtime/debug.h"

/* x [2,16,12,12] -> conv1 -> bn1 -> relu1 -> conv2 -> add2(+relu1) -> relu2 -> conv3 -> y */
static const int64_t xd[4] = {2, 16, 12, 12};
#define XN (2 * 16 * 12 * 12)
static float x_in[XN];

static kiln_model *small_cnn(void) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int x = add_input(g, "x", 4, xd);
    int r1 = add_unary(g, KILN_OP_Relu, "relu1", add_bnorm(g, "bn1", add_conv(g, "conv1", x, 16, 16, 3, 1, 1, 1, 1), 16),
                       NULL);
    int a2 = add_binary(g, KILN_OP_Add, "add2", add_conv(g, "conv2", r1, 16, 16, 3, 1, 1, 1, 1), r1);
    int r2 = add_unary(g, KILN_OP_Relu, "relu2", a2, NULL);
    mark_output(g, add_conv(g, "conv3", r2, 16, 16, 3, 1, 1, 1, 1));
    for (int i = 0; i < XN; i++) x_in[i] = frand();
    return model_of(g);
}

static kiln_engine *build_prec(const kiln_model *m, int opt, const char *off, kiln_precision p) {
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_precision(b, p));
    CHECK_OK(kiln_builder_set_optimization(b, opt));
    CHECK_OK(kiln_builder_set_tuning(b, 0));
    if (off) CHECK_OK(kiln_builder_disable_pass(b, off));
    CHECK_OK(kiln_build(b, m, &e));
    kiln_builder_free(b);
    return e;
}

static kiln_engine *build(const kiln_model *m, int opt, const char *off) {
    return build_prec(m, opt, off, KILN_PRECISION_FP32);
}

static int layer_of_op(const kiln_engine *e, const char *op) {
    for (int l = 0; e && l < kiln_engine_num_layers(e); l++) {
        kiln_layer_info li;
        if (kiln_engine_layer_info(e, l, &li) == KILN_OK && !strcmp(li.op, op)) return l;
    }
    return -1;
}

/* ---- tensors seen by a layer callback ------------------------------------------- */

#define MAX_SEEN 32
typedef struct seen {
    char name[64];
    int64_t n;
    float *data;
} seen;

typedef struct watcher {
    const kiln_engine *e;
    seen s[MAX_SEEN];
    int n;
    int events;
    const char *late;    /* read at the last layer's AFTER event */
    kiln_status late_st;
    float late_first;
    int stop_after;      /* stop after this layer (-1: never) */
} watcher;

/* Keeps a copy of every float tensor a layer writes. */
static int watch(kiln_context *c, int layer, kiln_layer_event ev, void *user) {
    watcher *w = user;
    w->events++;
    if (ev != KILN_LAYER_AFTER) return 0;
    for (int k = 0; k < kiln_engine_layer_num_outputs(w->e, layer) && w->n < MAX_SEEN; k++) {
        const char *name = kiln_engine_layer_output(w->e, layer, k);
        kiln_tensor_view v;
        CHECK_OK(kiln_context_tensor(c, name, &v));
        CHECK(v.dtype == KILN_DTYPE_FLOAT32 && !strcmp(v.name, name));
        seen *s = &w->s[w->n++];
        snprintf(s->name, sizeof s->name, "%s", name);
        s->n = kiln__numel(v.rank, v.dims);
        s->data = malloc(sizeof(float) * (size_t)s->n);
        if (s->data) memcpy(s->data, v.data, sizeof(float) * (size_t)s->n);
    }
    if (w->late && layer == kiln_engine_num_layers(w->e) - 1) {
        kiln_tensor_view v;
        w->late_st = kiln_context_tensor(c, w->late, &v);
        if (w->late_st == KILN_OK) w->late_first = ((const float *)v.data)[0];
    }
    return layer == w->stop_after;
}

static const seen *find_seen(const watcher *w, const char *name) {
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->s[i].name, name)) return &w->s[i];
    return NULL;
}

static void watcher_free(watcher *w) {
    for (int i = 0; i < w->n; i++) free(w->s[i].data);
}

/* Runs e on x_in with the watcher; returns the run's status. */
static kiln_status run_watched(const kiln_engine *e, watcher *w, int reuse) {
    kiln_context *c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    if (!c) return KILN_ERR_INTERNAL;
    w->e = e;
    CHECK_OK(kiln_context_set_memory_reuse(c, reuse));
    CHECK_OK(kiln_context_set_layer_callback(c, watch, w));
    CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 4, xd, x_in));
    kiln_status st = kiln_context_run(c);
    kiln_context_free(c);
    return st;
}

/* ---- tests ------------------------------------------------------------------------ */

TEST(pass_names) {
    int n = kiln_pass_count();
    CHECK(n >= 11);
    for (int i = 0; i < n; i++) {
        CHECK(kiln_pass_name(i) && kiln_pass_description(i) && *kiln_pass_description(i));
        for (int j = 0; j < i; j++) CHECK(strcmp(kiln_pass_name(i), kiln_pass_name(j)));
    }
    CHECK(kiln_pass_name(-1) == NULL && kiln_pass_name(n) == NULL && kiln_pass_description(n) == NULL);
    kiln_builder *b = NULL;
    CHECK_OK(kiln_builder_create(&b));
    CHECK_ERR(kiln_builder_disable_pass(b, "fuse_everything"), KILN_ERR_INVALID_ARGUMENT,
              "unknown pass 'fuse_everything' (passes: fold_bn, fuse_conv, fuse_pwdw,");
    CHECK_ERR(kiln_builder_disable_pass(b, NULL), KILN_ERR_INVALID_ARGUMENT, "cuda_nhwc");
    CHECK_ERR(kiln_builder_disable_pass(NULL, "fuse_conv"), KILN_ERR_INVALID_ARGUMENT, "builder is NULL");
    for (int i = 0; i < n; i++) CHECK_OK(kiln_builder_disable_pass(b, kiln_pass_name(i)));
    kiln_builder_free(b);
}

TEST(disable_pass) {
    kiln_model *m = small_cnn();
    kiln_engine *all = build(m, 1, NULL), *no_fuse = build(m, 1, "fuse_conv"), *no_bn = build(m, 1, "fold_bn");
    CHECK(count_op(all, KILN_OP_FusedConv) == 3 && count_op(all, KILN_OP_BatchNormalization) == 0);
    /* fuse_conv off: the Convs stay (BN still folded into conv1) */
    CHECK(count_op(no_fuse, KILN_OP_FusedConv) == 0 && count_op(no_fuse, KILN_OP_Conv) == 3);
    CHECK(count_op(no_fuse, KILN_OP_BatchNormalization) == 0);
    /* fold_bn off: conv1 is fused without it, the BatchNormalization stays */
    CHECK(count_op(no_bn, KILN_OP_BatchNormalization) == 1 && count_op(no_bn, KILN_OP_FusedConv) == 3);
    kiln_engine_free(all);
    kiln_engine_free(no_fuse);
    kiln_engine_free(no_bn);
    kiln_model_free(m);
}

TEST(sources_and_tensor_names) {
    kiln_model *m = small_cnn();
    kiln_engine *e = build(m, 1, NULL), *e2 = NULL;
    void *blob = NULL;
    size_t size = 0;
    CHECK_OK(kiln_engine_serialize(e, &blob, &size));
    if (blob) CHECK_OK(kiln_engine_load_memory(blob, size, &e2));
    /* written again, the loaded engine gives the same bytes (conv3's one source is its name) */
    void *blob2 = NULL;
    size_t size2 = 0;
    if (e2) CHECK_OK(kiln_engine_serialize(e2, &blob2, &size2));
    CHECK(blob && blob2 && size == size2 && !memcmp(blob, blob2, size));
    kiln_free(blob2);
    kiln_free(blob);
    const kiln_engine *es[2] = {e, e2};
    for (int i = 0; i < 2 && es[i]; i++) { /* as built, and through a file */
        const kiln_engine *x = es[i];
        CHECK(kiln_engine_num_layers(x) == 3);
        CHECK(kiln_engine_layer_num_sources(x, 0) == 3);
        CHECK(!strcmp(kiln_engine_layer_source(x, 0, 0), "conv1") &&
              !strcmp(kiln_engine_layer_source(x, 0, 1), "bn1") && !strcmp(kiln_engine_layer_source(x, 0, 2), "relu1"));
        CHECK(kiln_engine_layer_num_sources(x, 1) == 3 && !strcmp(kiln_engine_layer_source(x, 1, 1), "add2"));
        CHECK(kiln_engine_layer_num_sources(x, 2) == 1 && !strcmp(kiln_engine_layer_source(x, 2, 0), "conv3"));
        CHECK(kiln_engine_layer_source(x, 2, 1) == NULL && kiln_engine_layer_source(x, 3, 0) == NULL);
        CHECK(kiln_engine_layer_num_inputs(x, 1) == 4 && !strcmp(kiln_engine_layer_input(x, 1, 0), "relu1_out"));
        CHECK(!strcmp(kiln_engine_layer_input(x, 1, 3), "relu1_out")); /* the residual */
        CHECK(kiln_engine_layer_num_outputs(x, 1) == 1 && !strcmp(kiln_engine_layer_output(x, 1, 0), "relu2_out"));
        CHECK(kiln_engine_layer_output(x, 1, 1) == NULL && kiln_engine_layer_input(x, 1, -1) == NULL);
        CHECK(kiln_engine_layer_num_inputs(x, 9) == -1 && kiln_engine_layer_num_outputs(NULL, 0) == -1);
    }
    /* an unoptimized engine: each layer is its own source */
    kiln_engine *e0 = build(m, 0, NULL);
    CHECK(kiln_engine_layer_num_sources(e0, 1) == 1 && !strcmp(kiln_engine_layer_source(e0, 1, 0), "bn1"));
    kiln_engine_free(e0);
    kiln_engine_free(e2);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* Tensors the engine passes NHWC or nChw16c between its convolution layers
 * read back in the NCHW order of their shape: equal to the unoptimized
 * engine's tensors of the same names. */
TEST(logical_layouts) {
    if (!kiln__have_dnnl()) {
        printf("  (no oneDNN: no NHWC chains to read)\n");
        return;
    }
    kiln_model *m = small_cnn();
    kiln_engine *ref = build(m, 0, NULL);
    watcher wr = {.stop_after = -1};
    CHECK_OK(run_watched(ref, &wr, 1));
    /* 0: NHWC, 1: nChw16c, 2: NHWC holding bf16 (bf16 layers, where the CPU has them) */
    for (int kind = 0; kind < 3; kind++) {
        if (kind == 2 && !kiln__cpu_has_bf16()) {
            printf("  (no AVX512-BF16: bf16 NHWC not read)\n");
            continue;
        }
        kiln_engine *e = build_prec(m, 1, NULL, kind == 2 ? KILN_PRECISION_BF16 : KILN_PRECISION_FP32);
        if (!e) continue;
        kiln_graph *g = e->graph;
        for (int i = 0; i < g->n_nodes; i++) /* Winograd (bf16: oneDNN): layouts as they are chosen */
            if (g->nodes[i].op_id == KILN_OP_FusedConv)
                ((kiln_fused_conv_attrs *)g->nodes[i].attrs)->tactic.id =
                    kind == 2 ? KILN_FC_TACTIC_DNNL_PLAIN : KILN_FC_TACTIC_WINO;
        CHECK(kiln__fc_choose_layouts(g, NULL, kind == 1) > 0);
        int want = kind == 0 ? KILN_VLAYOUT_NHWC : kind == 1 ? KILN_VLAYOUT_C16 : KILN_VLAYOUT_NHWC_BF16;
        int v1 = kiln__graph_find_value(g, "relu1_out"), v2 = kiln__graph_find_value(g, "relu2_out");
        CHECK(kiln__value_layout(g, v1) == want && kiln__value_layout(g, v2) == want);
        watcher we = {.stop_after = -1};
        CHECK_OK(run_watched(e, &we, 1));
        CHECK(we.n == 3);
        double tol = kind == 2 ? 3e-2 : 1e-4;
        for (int i = 0; i < we.n; i++) {
            const seen *r = find_seen(&wr, we.s[i].name);
            CHECK(r && r->n == we.s[i].n);
            double err = r ? rel_err(we.s[i].data, r->data, r->n) : 1;
            if (!(err < tol)) fprintf(stderr, "  %s (layout %d): error %g\n", we.s[i].name, want, err);
            CHECK(err < tol);
        }
        watcher_free(&we);
        kiln_engine_free(e);
    }
    watcher_free(&wr);
    kiln_engine_free(ref);
    kiln_model_free(m);
}

/* Which layers leave their output in another layout (CUDA's NHWC chains
 * set the pools' layout too): read from the producer's attributes. */
TEST(value_layouts) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int x = add_input(g, "x", 4, xd);
    kiln_pool_attrs pa;
    memset(&pa, 0, sizeof pa);
    pa.n_kernel = 2;
    pa.kernel[0] = pa.kernel[1] = 2;
    pa.layout = KILN_POOL_LAYOUT_NHWC;
    int ap = add_node(g, KILN_OP_AveragePool, "ap", 1, (int[]){x}, &pa);
    int mp = add_node(g, KILN_OP_MaxPool, "mp", 1, (int[]){x}, &pa);
    pa.layout = KILN_POOL_LAYOUT_C16;
    int mc = add_node(g, KILN_OP_MaxPool, "mc", 1, (int[]){x}, &pa);
    pa.layout = KILN_POOL_LAYOUT_NHWC;
    int gp = add_node(g, KILN_OP_GlobalAveragePool, "gp", 1, (int[]){x}, &pa);
    kiln__graph_link(g);
    for (int v = 0; v < g->n_values; v++) g->values[v].info.rank = 4; /* (layouts are of 4-D tensors) */
    CHECK(kiln__value_layout(g, x) == KILN_VLAYOUT_PLAIN);
    CHECK(kiln__value_layout(g, ap) == KILN_VLAYOUT_NHWC && kiln__value_layout(g, mp) == KILN_VLAYOUT_NHWC);
    CHECK(kiln__value_layout(g, mc) == KILN_VLAYOUT_C16);
    CHECK(kiln__value_layout(g, gp) == KILN_VLAYOUT_PLAIN); /* [N, C, 1, 1]: the same bytes either way */
    CHECK(kiln__value_layout(g, -1) == KILN_VLAYOUT_PLAIN && kiln__value_layout(g, 1000) == KILN_VLAYOUT_PLAIN);
    kiln__graph_free(g);
}

/* With reuse off every tensor stays to the end of the run; with reuse on,
 * one nothing reads any more is not held. */
TEST(memory_reuse) {
    kiln_model *m = small_cnn();
    kiln_engine *e = build(m, 1, NULL);
    watcher on = {.stop_after = -1, .late = "relu1_out"}, off = {.stop_after = -1, .late = "relu1_out"};
    CHECK_OK(run_watched(e, &on, 1));
    CHECK_OK(run_watched(e, &off, 0));
    CHECK(on.late_st == KILN_ERR_INVALID_ARGUMENT && off.late_st == KILN_OK);
    const seen *r1 = find_seen(&off, "relu1_out"), *y_on = find_seen(&on, "conv3_out"), *y_off = find_seen(&off, "conv3_out");
    CHECK(r1 && off.late_first == r1->data[0]);
    CHECK(y_on && y_off && y_on->n == y_off->n && !memcmp(y_on->data, y_off->data, sizeof(float) * (size_t)y_on->n));
    CHECK(on.events == 6 && off.events == 6); /* before and after each of 3 layers */
    watcher_free(&on);
    watcher_free(&off);
    kiln_engine_free(e);
    kiln_model_free(m);
}

static int read_bogus(kiln_context *c, int layer, kiln_layer_event ev, void *user) {
    (void)layer, (void)ev, (void)user;
    kiln_tensor_view v;
    CHECK_ERR(kiln_context_tensor(c, "no_such_tensor", &v), KILN_ERR_INVALID_ARGUMENT,
              "the engine has no tensor 'no_such_tensor'");
    CHECK_ERR(kiln_context_tensor(c, "conv3_out", NULL), KILN_ERR_INVALID_ARGUMENT, "NULL argument");
    if (ev == KILN_LAYER_BEFORE && layer == 0)
        CHECK_ERR(kiln_context_tensor(c, "relu2_out", &v), KILN_ERR_INVALID_ARGUMENT, "is not held before layer 0");
    return 0;
}

TEST(misuse) {
    kiln_model *m = small_cnn();
    kiln_engine *e = build(m, 1, NULL);
    kiln_context *c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    kiln_tensor_view v;
    CHECK_ERR(kiln_context_tensor(c, "x", &v), KILN_ERR_INVALID_ARGUMENT, "may only be called from a layer callback");
    CHECK_ERR(kiln_context_set_layer_callback(NULL, read_bogus, NULL), KILN_ERR_INVALID_ARGUMENT, "context is NULL");
    CHECK_ERR(kiln_context_set_memory_reuse(NULL, 0), KILN_ERR_INVALID_ARGUMENT, "context is NULL");
    CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 4, xd, x_in));
    CHECK_OK(kiln_context_set_layer_callback(c, read_bogus, NULL));
    CHECK_OK(kiln_context_run(c));
    /* a callback that stops the run */
    watcher w = {.stop_after = 0};
    w.e = e;
    CHECK_OK(kiln_context_set_layer_callback(c, watch, &w));
    CHECK_ERR(kiln_context_run(c), KILN_ERR_INVALID_ARGUMENT,
              "the layer callback stopped the run after layer 0 'conv1+bn1+relu1' (FusedConv)");
    CHECK(w.n == 1);
    CHECK_OK(kiln_context_set_layer_callback(c, NULL, NULL));
    CHECK_OK(kiln_context_run(c));
    watcher_free(&w);
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* KILN_TEST_PLANT_BUG=FusedConv makes the first FusedConv's output
 * 1.05 x + 0.05 in contexts created while it is set. */
TEST(planted_bug) {
    kiln_model *m = small_cnn();
    kiln_engine *e = build(m, 1, NULL);
    watcher good = {.stop_after = -1}, bad = {.stop_after = -1};
    CHECK_OK(run_watched(e, &good, 1));
    setenv("KILN_TEST_PLANT_BUG", "FusedConv", 1);
    CHECK_OK(run_watched(e, &bad, 1));
    unsetenv("KILN_TEST_PLANT_BUG");
    const seen *g1 = find_seen(&good, "relu1_out"), *b1 = find_seen(&bad, "relu1_out");
    CHECK(g1 && b1 && g1->n == b1->n);
    for (int64_t i = 0; g1 && b1 && i < g1->n; i++)
        if (!(fabsf(b1->data[i] - (1.05f * g1->data[i] + 0.05f)) <= 1e-5f)) {
            CHECK(!"relu1_out is 1.05 x + 0.05");
            break;
        }
    CHECK(layer_of_op(e, "FusedConv") == 0);
    watcher again = {.stop_after = -1};
    CHECK_OK(run_watched(e, &again, 1)); /* unset: right again */
    const seen *a1 = find_seen(&again, "relu1_out");
    CHECK(a1 && g1 && !memcmp(a1->data, g1->data, sizeof(float) * (size_t)g1->n));
    watcher_free(&good);
    watcher_free(&bad);
    watcher_free(&again);
    kiln_engine_free(e);
    kiln_model_free(m);
}

int main(void) {
    RUN(pass_names);
    RUN(disable_pass);
    RUN(sources_and_tensor_names);
    RUN(logical_layouts);
    RUN(value_layouts);
    RUN(memory_reuse);
    RUN(misuse);
    RUN(planted_bug);
    return test_summary();
}
