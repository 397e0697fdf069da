/* test_fusion_transformer.c -- the transformer rewrites
 * (src/passes/fuse_transformer.c) and the kernels of kiln.FusedMatMul,
 * kiln.Gelu and kiln.Attention (src/ops/fused_transformer*.c), on small
 * graphs built in memory the way PyTorch exports them: optimized and
 * unoptimized builds agree, the fused layers (named after the nodes they
 * came from) replace the patterns, every FusedMatMul tactic computes the same
 * result, and bf16 engines stay within 2e-2 of fp32. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test.h"

#include "graph_build.h"

#include "backends/backend.h"
#include "backends/cpu/kernels/fused_transformer_cpu.h"
#include "ops/elementwise_impl.h"
#include "ops/nn_attrs.h"
#include "ops/reduce_attrs.h"
#include "ops/tensor_internal.h"
#include "runtime/engine.h"

/* ---- graphs (helpers of graph_build.h, plus the patterns as exported) ---- */

static int weights(kiln_graph *g, const char *name, int rank, const int64_t *dims, float scale) {
    return add_const(g, name, rank, dims, -scale, scale);
}

static int ints(kiln_graph *g, const char *name, int n, const int64_t *x) {
    int v = add_val(g, name);
    int64_t d[1] = {n};
    if (kiln__value_set_const(&g->values[v], KILN_DTYPE_INT64, 1, d, x) != KILN_OK) abort();
    return v;
}


static int transpose(kiln_graph *g, const char *name, int x, int a, int b, int c, int d) {
    kiln_transpose_attrs t = {.n_perm = 4, .perm = {a, b, c, d}};
    return add_unary(g, KILN_OP_Transpose, name, x, &t);
}

static int reshape(kiln_graph *g, const char *name, int x, int n, const int64_t *shape) {
    char sn[96];
    snprintf(sn, sizeof sn, "%s_shape", name);
    kiln_reshape_attrs ra = {0};
    return add_node(g, KILN_OP_Reshape, name, 2, (int[]){x, ints(g, sn, n, shape)}, &ra);
}

/* PyTorch's decomposed LayerNorm over the last axis of x (D wide). */
static int layernorm(kiln_graph *g, const char *p, int x, int64_t D) {
    char n[12][64];
    for (int i = 0; i < 12; i++) snprintf(n[i], sizeof n[i], "%s_%d", p, i);
    kiln_reduce_attrs ra = {.keepdims = 1};
    int64_t ax[1] = {-1}, dd[1] = {D};
    int mean = add_node(g, KILN_OP_ReduceMean, n[0], 2, (int[]){x, ints(g, n[1], 1, ax)}, &ra);
    int d = add_binary(g, KILN_OP_Sub, n[2], x, mean);
    int sq = add_binary(g, KILN_OP_Pow, n[3], d, add_scalar(g, n[4], 2.0f));
    int var = add_node(g, KILN_OP_ReduceMean, n[5], 2, (int[]){sq, ints(g, n[6], 1, ax)}, &ra);
    int s = add_unary(g, KILN_OP_Sqrt, n[8], add_binary(g, KILN_OP_Add, n[7], var, add_scalar(g, n[9], 1e-12f)), NULL);
    int y = add_binary(g, KILN_OP_Div, n[10], d, s);
    y = add_binary(g, KILN_OP_Mul, n[11], y, weights(g, "gamma", 1, dd, 1.0f));
    char an[64];
    snprintf(an, sizeof an, "%s_add", p);
    return add_binary(g, KILN_OP_Add, an, y, weights(g, "beta", 1, dd, 0.5f));
}

/* GELU, erf form, in export order `form` (0: (x*(1+erf))*0.5, 1: x*((1+erf)*0.5),
 * 2: (x*0.5)*(1+erf)). */
static int gelu_erf(kiln_graph *g, const char *p, int x, int form) {
    char n[8][64];
    for (int i = 0; i < 8; i++) snprintf(n[i], sizeof n[i], "%s_%d", p, i);
    int e = add_unary(g, KILN_OP_Erf, n[1], add_binary(g, KILN_OP_Div, n[0], x, add_scalar(g, n[5], 1.4142135f)), NULL);
    int a = add_binary(g, KILN_OP_Add, n[2], e, add_scalar(g, n[6], 1.0f));
    if (form == 0) return add_binary(g, KILN_OP_Mul, n[4], add_binary(g, KILN_OP_Mul, n[3], x, a), add_scalar(g, n[7], 0.5f));
    if (form == 1) return add_binary(g, KILN_OP_Mul, n[4], x, add_binary(g, KILN_OP_Mul, n[3], a, add_scalar(g, n[7], 0.5f)));
    return add_binary(g, KILN_OP_Mul, n[4], add_binary(g, KILN_OP_Mul, n[3], x, add_scalar(g, n[7], 0.5f)), a);
}

/* GELU, tanh form; cube as Pow(x, 3) or x*x*x. */
static int gelu_tanh(kiln_graph *g, const char *p, int x, bool pow3) {
    char n[14][64];
    for (int i = 0; i < 14; i++) snprintf(n[i], sizeof n[i], "%s_%d", p, i);
    int cube = pow3 ? add_binary(g, KILN_OP_Pow, n[0], x, add_scalar(g, n[1], 3.0f))
                    : add_binary(g, KILN_OP_Mul, n[0], add_binary(g, KILN_OP_Mul, n[1], x, x), x);
    int c = add_binary(g, KILN_OP_Mul, n[2], add_scalar(g, n[3], 0.044715f), cube);
    int in = add_binary(g, KILN_OP_Add, n[4], x, c);
    int t = add_unary(g, KILN_OP_Tanh, n[6], add_binary(g, KILN_OP_Mul, n[5], in, add_scalar(g, n[7], 0.7978845608f)), NULL);
    int a = add_binary(g, KILN_OP_Add, n[8], t, add_scalar(g, n[9], 1.0f));
    return add_binary(g, KILN_OP_Mul, n[11], add_binary(g, KILN_OP_Mul, n[10], x, add_scalar(g, n[12], 0.5f)), a);
}

/* x [.., K] @ W [K, N] + b (bias first, as PyTorch exports it) */
static int linear(kiln_graph *g, const char *p, int x, int64_t K, int64_t N) {
    char wn[64], bn[64], mn[64], an[64];
    snprintf(wn, sizeof wn, "%s.weight", p);
    snprintf(bn, sizeof bn, "%s.bias", p);
    snprintf(mn, sizeof mn, "%s/MatMul", p);
    snprintf(an, sizeof an, "%s/Add", p);
    int64_t wd[2] = {K, N}, bd[1] = {N};
    int mm = add_binary(g, KILN_OP_MatMul, mn, x, weights(g, wn, 2, wd, 1.0f / sqrtf((float)K)));
    return add_binary(g, KILN_OP_Add, an, weights(g, bn, 1, bd, 0.1f), mm);
}

/* BERT-style attention as PyTorch exports it: projections of x (Q) and y (K,
 * V) into H heads of D, head split, scores (scaled by 1/sqrt(D) when
 * `scaled`, + mask when >= 0), softmax, context, merge back to [B, S, H*D].
 * Node names: q/k/v (linear), rq/tq, rk/tk, rv/tv, qk, div, addmask, softmax,
 * pv, tm, rm. */
static int attention(kiln_graph *g, int x, int y, int64_t B, int64_t S, int64_t S2, int64_t H, int64_t D,
                     int mask, bool scaled) {
    int64_t E = H * D, sq[4] = {B, S, H, D}, sk[4] = {B, S2, H, D}, merge[3] = {B, S, E};
    int q = transpose(g, "tq", reshape(g, "rq", linear(g, "q", x, E, E), 4, sq), 0, 2, 1, 3);
    int k = transpose(g, "tk", reshape(g, "rk", linear(g, "k", y, E, E), 4, sk), 0, 2, 3, 1);
    int v = transpose(g, "tv", reshape(g, "rv", linear(g, "v", y, E, E), 4, sk), 0, 2, 1, 3);
    int s = add_binary(g, KILN_OP_MatMul, "qk", q, k);
    if (scaled) s = add_binary(g, KILN_OP_Div, "div", s, add_scalar(g, "sqrt_d", sqrtf((float)D)));
    if (mask >= 0) s = add_binary(g, KILN_OP_Add, "addmask", s, mask);
    kiln_softmax_attrs sa = {.axis = -1};
    int o = add_binary(g, KILN_OP_MatMul, "pv", add_unary(g, KILN_OP_Softmax, "softmax", s, &sa), v);
    return reshape(g, "rm", transpose(g, "tm", o, 0, 2, 1, 3), 3, merge);
}

/* ---- engines -------------------------------------------------------------- */

/* off: a pass switched off (kiln debug passes), or NULL */
static kiln_engine *build_off(const kiln_model *m, int opt, kiln_precision prec, int threads, const char *off) {
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_optimization(b, opt));
    CHECK_OK(kiln_builder_set_threads(b, threads));
    if (prec) CHECK_OK(kiln_builder_set_precision(b, prec));
    if (off) CHECK_OK(kiln_builder_disable_pass(b, off));
    CHECK_OK(kiln_build(b, m, &e));
    kiln_builder_free(b);
    return e;
}

static kiln_engine *build(const kiln_model *m, int opt, kiln_precision prec, int threads) {
    return build_off(m, opt, prec, threads, NULL);
}

/* A bf16 engine of m, or NULL (with a note) where this kiln or CPU refuses
 * bf16 CPU engines (no oneDNN, no AVX512-BF16). */
static kiln_engine *build_bf16_fp32_or_skip(const kiln_model *m, int threads, const char *const *fp32,
                                            kiln_status expect) {
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_threads(b, threads));
    CHECK_OK(kiln_builder_set_precision(b, KILN_PRECISION_BF16));
    for (int i = 0; fp32 && fp32[i]; i++) CHECK_OK(kiln_builder_set_layer_precision(b, fp32[i], KILN_PRECISION_FP32));
    kiln_status s = kiln_build(b, m, &e);
    if (expect != KILN_OK && s != KILN_ERR_UNSUPPORTED) {
        CHECK(s == expect);
        kiln_builder_free(b);
        return e;
    }
    kiln_builder_free(b);
    if (s == KILN_ERR_UNSUPPORTED) {
        printf("  (bf16 engines refused here: %s)\n", kiln_last_error());
        return NULL;
    }
    CHECK_OK(s);
    return e;
}

static kiln_engine *build_bf16_or_skip(const kiln_model *m, int threads) {
    return build_bf16_fp32_or_skip(m, threads, NULL, KILN_OK);
}

#define BIG (1 << 16)
static float xs[3][BIG], yref[BIG], yopt[BIG];

/* Runs e with its inputs from xs[i] (shapes from the graph; with B >= 0,
 * batch B along axis 0) and copies output k. */
static int64_t run_batch(const kiln_engine *e, int64_t B, int k, float *y) {
    kiln_context *c = NULL;
    int64_t n = -1;
    if (!e) return -1;
    CHECK_OK(kiln_context_create(e, &c));
    if (!c) return -1;
    const kiln_graph *g = e->graph;
    for (int i = 0; i < g->n_inputs && i < 3; i++) {
        const kiln_value *v = &g->values[g->inputs[i]];
        int64_t d[KILN_MAX_RANK];
        memcpy(d, v->info.dims, sizeof d);
        if (B >= 0) d[0] = B;
        CHECK_OK(kiln_context_set_input(c, v->name, KILN_DTYPE_FLOAT32, v->info.rank, d, xs[i]));
    }
    CHECK_OK(kiln_context_run(c));
    const void *data = NULL;
    int rank = 0;
    int64_t dims[8];
    CHECK_OK(kiln_context_get_output(c, g->values[g->outputs[k]].name, NULL, &rank, dims, &data));
    if (data) {
        n = kiln__numel(rank, dims);
        if (n > BIG) n = BIG;
        memcpy(y, data, sizeof(float) * (size_t)n);
    }
    kiln_context_free(c);
    return n;
}

static int64_t run(const kiln_engine *e, int k, float *y) { return run_batch(e, -1, k, y); }

/* Run after fill_inputs when set: puts NaN or infinities in the inputs. */
static void (*g_specials)(void);

static void fill_inputs(void) {
    for (int j = 0; j < 3; j++)
        for (int i = 0; i < BIG; i++) xs[j][i] = 2.0f * frand();
    if (g_specials) g_specials();
}

/* Optimized (with `threads`) vs unoptimized engines agree on every output. */
static void compare(const kiln_model *m, double tol, int threads) {
    kiln_engine *e0 = build(m, 0, KILN_PRECISION_FP32, 1), *e1 = build(m, 1, KILN_PRECISION_FP32, threads);
    fill_inputs();
    for (int k = 0; e0 && e1 && k < m->graph->n_outputs; k++) {
        int64_t n0 = run(e0, k, yref), n1 = run(e1, k, yopt);
        CHECK(n0 > 0 && n0 == n1);
        double err = rel_err(yopt, yref, n0);
        if (!(err <= tol)) fprintf(stderr, "  output %d: relative error %g > %g\n", k, err, tol);
        CHECK(err <= tol);
    }
    kiln_engine_free(e0);
    kiln_engine_free(e1);
}

/* ---- tests ------------------------------------------------------------------ */

TEST(layernorm_fused) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[3] = {2, 5, 48};
    int x = add_input(g, "x", 3, xd);
    mark_output(g, layernorm(g, "ln", x, 48));
    kiln_model *m = model_of(g);
    compare(m, 1e-5, 1);
    compare(m, 1e-5, 2);
    kiln_engine *e = build(m, 1, 0, 1);
    CHECK(e && e->graph->n_nodes == 1 && count_op(e, KILN_OP_LayerNormalization) == 1);
    const kiln_node *n = find_layer(e, "ln_0+ln_2+ln_3+ln_5+ln_7+ln_8+ln_10+ln_11+ln_add");
    CHECK(n && n->n_in == 3 && fabsf(((const kiln_ln_attrs *)n->attrs)->epsilon - 1e-12f) < 1e-18f);
    const char *d = e ? kiln_engine_describe(e, 0) : "";
    CHECK(strstr(d, "LayerNormalization") && strstr(d, "ln_0+ln_2"));
    kiln_engine_free(e);
    kiln_model_free(m);
}

TEST(gelu_forms) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[2] = {7, 33};
    int x = add_input(g, "x", 2, xd);
    for (int f = 0; f < 3; f++) {
        char p[16];
        snprintf(p, sizeof p, "erf%d", f);
        mark_output(g, gelu_erf(g, p, x, f));
    }
    mark_output(g, gelu_tanh(g, "tanhp", x, true));
    mark_output(g, gelu_tanh(g, "tanhm", x, false));
    kiln_model *m = model_of(g);
    compare(m, 2e-6, 1);
    kiln_engine *e = build(m, 1, 0, 1);
    CHECK(e && e->graph->n_nodes == 5 && count_op(e, KILN_OP_Gelu) == 5);
    const kiln_node *n = find_layer(e, "erf0_0+erf0_1+erf0_2+erf0_3+erf0_4");
    CHECK(n && ((const kiln_gelu_attrs *)n->attrs)->approx == 0);
    CHECK(find_layer(e, "erf1_0+erf1_1+erf1_2+erf1_3+erf1_4") && find_layer(e, "erf2_0+erf2_1+erf2_2+erf2_3+erf2_4"));
    n = find_layer(e, "tanhp_0+tanhp_2+tanhp_4+tanhp_5+tanhp_6+tanhp_8+tanhp_10+tanhp_11");
    CHECK(n && ((const kiln_gelu_attrs *)n->attrs)->approx == 1);
    CHECK(find_layer(e, "tanhm_1+tanhm_0+tanhm_2+tanhm_4+tanhm_5+tanhm_6+tanhm_8+tanhm_10+tanhm_11"));
    kiln_engine_free(e);
    /* wrong constants: not a GELU */
    CHECK_OK(kiln__graph_create(&g));
    x = add_input(g, "x", 2, xd);
    int a = add_binary(g, KILN_OP_Add, "a", add_unary(g, KILN_OP_Erf, "e", add_binary(g, KILN_OP_Div, "d", x, add_scalar(g, "c", 1.5f)), NULL),
                add_scalar(g, "one", 1.0f));
    mark_output(g, add_binary(g, KILN_OP_Mul, "m2", add_binary(g, KILN_OP_Mul, "m1", x, a), add_scalar(g, "h", 0.5f)));
    kiln_model *m2 = model_of(g);
    e = build(m2, 1, 0, 1);
    CHECK(e && count_op(e, KILN_OP_Gelu) == 0 && count_op(e, KILN_OP_Pointwise) == 1 && e->graph->n_nodes == 1);
    kiln_engine_free(e);
    kiln_model_free(m2);
    kiln_model_free(m);
}

/* Every layer of op `op` in e gives the same output under tactics 1..last
 * (ids the CPU cannot run fall back to one it can). */
static void every_tactic_of(const kiln_model *m, int threads, int op, int last) {
    kiln_engine *e = build(m, 1, 0, threads);
    if (!e) return;
    fill_inputs();
    int64_t n0 = run(e, 0, yref);
    CHECK(n0 > 0);
    for (int t = 1; t <= last; t++) {
        for (int i = 0; i < e->graph->n_nodes; i++)
            if (e->graph->nodes[i].op_id == op) ((kiln_tactic *)e->graph->nodes[i].attrs)->id = t;
        int64_t n1 = run(e, 0, yopt);
        double err = special_rel_err(yopt, yref, n0);
        if (!(err <= 1e-5)) fprintf(stderr, "  tactic %d: relative error %g\n", t, err);
        CHECK(n1 == n0 && err <= 1e-5);
    }
    kiln_engine_free(e);
}

static void every_tactic(const kiln_model *m, int threads) {
    every_tactic_of(m, threads, KILN_OP_FusedMatMul, KILN_FMM_TACTIC_AVX512);
}

TEST(matmul_bias_act) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[3] = {2, 9, 40};
    int x = add_input(g, "x", 3, xd);
    /* linear + GELU (erf), then linear + Relu, then a bare MatMul */
    int h = gelu_erf(g, "act", linear(g, "fc1", x, 40, 72), 0);
    int r = add_unary(g, KILN_OP_Relu, "relu", linear(g, "fc2", h, 72, 24), NULL);
    int64_t wd[2] = {24, 17};
    mark_output(g, add_binary(g, KILN_OP_MatMul, "fc3", r, weights(g, "w3", 2, wd, 0.3f)));
    kiln_model *m = model_of(g);
    compare(m, 1e-5, 1);
    compare(m, 1e-5, 2);
    kiln_engine *e = build(m, 1, 0, 1);
    CHECK(e && e->graph->n_nodes == 3 && count_op(e, KILN_OP_FusedMatMul) == 3);
    const kiln_node *n = find_layer(e, "fc1/MatMul+fc1/Add+act_0+act_1+act_2+act_3+act_4");
    CHECK(n && n->n_in == 3 && ((const kiln_fused_matmul_attrs *)n->attrs)->act == KILN_FACT_GELU_ERF);
    n = find_layer(e, "fc2/MatMul+fc2/Add+relu");
    CHECK(n && ((const kiln_fused_matmul_attrs *)n->attrs)->act == KILN_FACT_RELU);
    n = find_layer(e, "fc3");
    CHECK(n && n->n_in == 2 && ((const kiln_fused_matmul_attrs *)n->attrs)->act == KILN_FACT_NONE);
    const char *d = e ? kiln_engine_describe(e, 0) : "";
    CHECK(strstr(d, "FusedMatMul") && strstr(d, "fc2/MatMul+fc2/Add+relu") && strstr(d, "tactic"));
    kiln_engine_free(e);
    every_tactic(m, 1);
    every_tactic(m, 2);
    kiln_model_free(m);
}

/* Residual Adds join the product: linear + residual (BERT), bare MatMul +
 * residual + Relu, with 1 and 2 threads and every tactic. */
TEST(matmul_residual) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[3] = {2, 7, 48}, wd[2] = {48, 48};
    int x = add_input(g, "x", 3, xd), r = add_input(g, "r", 3, xd);
    int h = add_binary(g, KILN_OP_Add, "res1", r, linear(g, "fc1", x, 48, 48));
    int m2 = add_binary(g, KILN_OP_MatMul, "mm2", h, weights(g, "w2", 2, wd, 0.2f));
    mark_output(g, add_unary(g, KILN_OP_Relu, "relu2", add_binary(g, KILN_OP_Add, "res2", m2, x), NULL));
    kiln_model *m = model_of(g);
    compare(m, 1e-5, 1);
    compare(m, 1e-5, 2);
    kiln_engine *e = build(m, 1, 0, 1);
    CHECK(e && e->graph->n_nodes == 2 && count_op(e, KILN_OP_FusedMatMul) == 2);
    const kiln_node *n = find_layer(e, "fc1/MatMul+fc1/Add+res1");
    CHECK(n && n->n_in == 4 && n->in[3] == e->graph->inputs[1] && n->in[2] >= 0);
    n = find_layer(e, "mm2+res2+relu2");
    CHECK(n && n->n_in == 4 && n->in[2] < 0 && n->in[3] == e->graph->inputs[0] &&
          ((const kiln_fused_matmul_attrs *)n->attrs)->act == KILN_FACT_RELU);
    kiln_engine_free(e);
    every_tactic(m, 1);
    every_tactic(m, 2);
    kiln_model_free(m);
}

/* NaN and +-inf in the inputs and the residual come out of every epilogue
 * (bias, residual, Relu, GELU) where the unfused layers put them, on every
 * FusedMatMul tactic: kiln__relu_f32 and oneDNN's relu post-op made NaN 0
 * (and oneDNN's made -inf NaN). */
TEST(matmul_special_values) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[3] = {2, 7, 40};
    int x = add_input(g, "x", 3, xd), r = add_input(g, "r", 3, (int64_t[]){2, 7, 24});
    mark_output(g, add_unary(g, KILN_OP_Relu, "relu", add_binary(g, KILN_OP_Add, "res", linear(g, "fc1", x, 40, 24), r), NULL));
    mark_output(g, add_unary(g, KILN_OP_Relu, "relu2", linear(g, "fc2", x, 40, 24), NULL));
    mark_output(g, gelu_erf(g, "ge", linear(g, "fc3", x, 40, 24), 0));
    mark_output(g, gelu_tanh(g, "gt", linear(g, "fc4", x, 40, 24), true));
    mark_output(g, add_binary(g, KILN_OP_Add, "res5", linear(g, "fc5", x, 40, 24), r));
    kiln_model *m = model_of(g);
    kiln_engine *e0 = build(m, 0, KILN_PRECISION_FP32, 1);
    for (int threads = 1; threads <= 2; threads++) {
        kiln_engine *e = build(m, 1, KILN_PRECISION_FP32, threads);
        CHECK(e && count_op(e, KILN_OP_FusedMatMul) == 5 && e->graph->n_nodes == 5);
        fill_inputs();
        for (int i = 0; i < BIG; i += 13) xs[0][i] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
        for (int i = 0; i < BIG; i += 5) xs[1][i] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
        for (int t = 0; e && t <= KILN_FMM_TACTIC_AVX512; t++) {
            for (int i = 0; i < e->graph->n_nodes; i++)
                if (e->graph->nodes[i].op_id == KILN_OP_FusedMatMul) ((kiln_tactic *)e->graph->nodes[i].attrs)->id = t;
            for (int k = 0; k < m->graph->n_outputs; k++) {
                int64_t n0 = run(e0, k, yref), n1 = run(e, k, yopt);
                double err = special_rel_err(yopt, yref, n0);
                if (!(err <= 1e-5)) {
                    fprintf(stderr, "  tactic %d (%s), %d threads, output %d: relative error %g\n", t,
                            kiln__cpu_fmm_tactic_name(t), threads, k, err);
                    for (int64_t i = 0; i < n0; i++)
                        if (special_rel_err(&yopt[i], &yref[i], 1) > 1e-5) {
                            fprintf(stderr, "  element %lld: %g, unfused %g\n", (long long)i, yopt[i], yref[i]);
                            break;
                        }
                }
                CHECK(n0 > 0 && n1 == n0 && err <= 1e-5);
            }
        }
        kiln_engine_free(e);
    }
    kiln_engine_free(e0);
    kiln_model_free(m);
}

TEST(gemm_and_tanh_gelu) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[2] = {5, 31}, wd[2] = {20, 31}, bd[2] = {1, 20};
    int x = add_input(g, "x", 2, xd);
    kiln_gemm_attrs ga = {.alpha = 1.0f, .beta = 1.0f, .trans_b = 1};
    int y = add_node(g, KILN_OP_Gemm, "gemm", 3, (int[]){x, weights(g, "W", 2, wd, 0.2f), weights(g, "B", 2, bd, 0.2f)},
                 &ga);
    mark_output(g, gelu_tanh(g, "gt", y, true));
    /* alpha and beta folded into copies of B and C; beta 0 drops C */
    kiln_gemm_attrs g2 = {.alpha = 0.5f, .beta = 1.0f, .trans_b = 1};
    mark_output(g, add_node(g, KILN_OP_Gemm, "gemm2", 2, (int[]){x, weights(g, "W2", 2, wd, 0.2f)}, &g2));
    kiln_gemm_attrs g3 = {.alpha = 2.0f, .beta = -0.5f, .trans_b = 1};
    int64_t cd[1] = {20};
    mark_output(g, add_node(g, KILN_OP_Gemm, "gemm3", 3,
                            (int[]){x, weights(g, "W3", 2, wd, 0.2f), weights(g, "C3", 1, cd, 1.0f)}, &g3));
    kiln_gemm_attrs g4 = {.alpha = 1.0f, .beta = 0.0f, .trans_b = 1};
    mark_output(g, add_node(g, KILN_OP_Gemm, "gemm4", 3,
                            (int[]){x, weights(g, "W4", 2, wd, 0.2f), weights(g, "C4", 1, cd, 1.0f)}, &g4));
    kiln_model *m = model_of(g);
    compare(m, 1e-5, 1);
    kiln_engine *e = build(m, 1, 0, 1);
    CHECK(e && count_op(e, KILN_OP_FusedMatMul) == 4 && count_op(e, KILN_OP_Gemm) == 0);
    CHECK(find_layer(e, "gemm3") && find_layer(e, "gemm3")->n_in == 3 && find_layer(e, "gemm4") && find_layer(e, "gemm4")->n_in == 2);
    const kiln_node *n = find_layer(e, "gemm+gt_0+gt_2+gt_4+gt_5+gt_6+gt_8+gt_10+gt_11");
    CHECK(n && ((const kiln_fused_matmul_attrs *)n->attrs)->act == KILN_FACT_GELU_TANH &&
          ((const kiln_fused_matmul_attrs *)n->attrs)->trans_b == 1);
    kiln_engine_free(e);
    every_tactic(m, 2);
    kiln_model_free(m);
}

/* GPT-2's Conv1D: Reshape [B,S,K] -> [B*S,K], Gemm (bias), Reshape back to
 * [B,S,N], then the tanh GELU (MLP) or the residual Add (projection): one
 * FusedMatMul each on the 3-D input, no Reshape left; a Reshape that does
 * not restore the leading dims is not folded. */
TEST(gemm_between_flattening_reshapes) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[3] = {2, 5, 24}, wd1[2] = {24, 40}, bd1[1] = {40}, wd2[2] = {40, 24}, bd2[1] = {24};
    int x = add_input(g, "x", 3, xd);
    kiln_gemm_attrs ga = {.alpha = 1.0f, .beta = 1.0f};
    int f1 = reshape(g, "fc_flat", x, 2, (int64_t[]){10, 24});
    int y1 = add_node(g, KILN_OP_Gemm, "fc", 3, (int[]){f1, weights(g, "Wfc", 2, wd1, 0.2f), weights(g, "Bfc", 1, bd1, 0.2f)},
                      &ga);
    int h = gelu_tanh(g, "gt", reshape(g, "fc_back", y1, 3, (int64_t[]){2, 5, 40}), true);
    int f2 = reshape(g, "proj_flat", h, 2, (int64_t[]){10, 40});
    int y2 = add_node(g, KILN_OP_Gemm, "proj", 3,
                      (int[]){f2, weights(g, "Wpr", 2, wd2, 0.2f), weights(g, "Bpr", 1, bd2, 0.2f)}, &ga);
    int z = add_binary(g, KILN_OP_Add, "res", reshape(g, "proj_back", y2, 3, (int64_t[]){2, 5, 24}), x);
    /* not the inverse of the flattening: [10, 24] -> [5, 2, 24] */
    int f3 = reshape(g, "odd_flat", z, 2, (int64_t[]){10, 24});
    int y3 = add_node(g, KILN_OP_Gemm, "odd", 3, (int[]){f3, weights(g, "Wod", 2, wd1, 0.2f), weights(g, "Bod", 1, bd1, 0.2f)},
                      &ga);
    mark_output(g, reshape(g, "odd_back", y3, 3, (int64_t[]){5, 2, 40}));
    kiln_model *m = model_of(g);
    compare(m, 1e-5, 1);
    compare(m, 1e-5, 2);
    kiln_engine *e = build(m, 1, 0, 1);
    CHECK(e && count_op(e, KILN_OP_FusedMatMul) == 3 && count_op(e, KILN_OP_Gemm) == 0);
    const kiln_node *n = find_layer(e, "fc+fc_flat+fc_back+gt_0+gt_2+gt_4+gt_5+gt_6+gt_8+gt_10+gt_11");
    CHECK(n && ((const kiln_fused_matmul_attrs *)n->attrs)->act == KILN_FACT_GELU_TANH &&
          n->in[0] == e->graph->inputs[0]);
    n = find_layer(e, "proj+proj_flat+proj_back+res");
    CHECK(n && n->n_in == 4 && n->in[3] == e->graph->inputs[0]);
    CHECK(find_layer(e, "odd") != NULL); /* its Reshapes stay */
    kiln_engine_free(e);
    every_tactic(m, 2);
    kiln_model_free(m);
}

/* A constant per-feature scale after a Linear (fold_layer_scale): folded
 * into the weights and bias when it scales the output features alone, with
 * or without a bias Add, a Gemm's transposed B and C, through a Transpose
 * moving the features (ConvNeXt's [C, 1, 1] after Transpose(0,3,1,2), then
 * the residual Add taken by the layer in its own frame, the residual a new
 * Transpose of it), on weights another MatMul reads too (copied); a scale
 * along another axis is left. */
TEST(layer_scale_forms) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[4] = {2, 3, 5, 16}, rd[4] = {2, 24, 3, 5}, x2d[2] = {5, 31}, wd[2] = {20, 31}, cd[1] = {20},
            s1d[1] = {24}, s2d[2] = {1, 20}, s3d[2] = {5, 1}, s4d[3] = {24, 1, 1}, w5d[2] = {16, 24};
    int x = add_input(g, "x", 4, xd), r = add_input(g, "r", 4, rd), x2 = add_input(g, "x2", 2, x2d);
    mark_output(g, add_binary(g, KILN_OP_Mul, "scale_a", linear(g, "fa", x, 16, 24), weights(g, "s1", 1, s1d, 2.0f)));
    kiln_gemm_attrs ga = {.alpha = 1.0f, .beta = 1.0f, .trans_b = 1};
    int y = add_node(g, KILN_OP_Gemm, "gemm_b", 3,
                     (int[]){x2, weights(g, "Wb", 2, wd, 0.2f), weights(g, "Cb", 1, cd, 1.0f)}, &ga);
    mark_output(g, add_binary(g, KILN_OP_Mul, "scale_b", weights(g, "s2", 2, s2d, 2.0f), y));
    mark_output(g, add_binary(g, KILN_OP_Mul, "scale_c", linear(g, "fc", x, 16, 24), weights(g, "s3", 2, s3d, 2.0f)));
    int t = transpose(g, "td", linear(g, "fd", x, 16, 24), 0, 3, 1, 2);
    int ls = add_binary(g, KILN_OP_Mul, "scale_d", weights(g, "s4", 3, s4d, 2.0f), t);
    mark_output(g, add_binary(g, KILN_OP_Add, "res_d", ls, r));
    int w5 = weights(g, "W5", 2, w5d, 0.3f);
    mark_output(g, add_binary(g, KILN_OP_MatMul, "mm_e1", x, w5));
    mark_output(g, add_binary(g, KILN_OP_Mul, "scale_e", add_binary(g, KILN_OP_MatMul, "mm_e2", x, w5),
                              weights(g, "s5", 1, s1d, 2.0f)));
    kiln_model *m = model_of(g);
    compare(m, 1e-5, 1);
    compare(m, 1e-5, 2);
    kiln_engine *e = build(m, 1, 0, 1);
    CHECK(e && count_op(e, KILN_OP_Mul) + count_op(e, KILN_OP_Pointwise) == 1 && count_op(e, KILN_OP_Add) == 0 &&
          count_op(e, KILN_OP_FusedMatMul) == 6 && count_op(e, KILN_OP_Transpose) == 2);
    const kiln_node *n = find_layer(e, "fd/MatMul+fd/Add");
    CHECK(n && n->n_in == 4 && !strcmp(e->graph->values[n->in[3]].name, "r/kiln_nhwc"));
    n = find_layer(e, "td");
    CHECK(n && !strcmp(e->graph->values[n->out[0]].name, "res_d_out"));
    kiln_engine_free(e);
    e = build_off(m, 1, 0, 1, "fold_layer_scale");
    CHECK(e && count_op(e, KILN_OP_Mul) + count_op(e, KILN_OP_Pointwise) >= 4);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* torchvision's ConvNeXt block as exported (tests/data/tiny_convnext.onnx):
 * Linear -> Transpose(0,3,1,2) -> Mul by the layer scale [C, 1, 1] -> Add
 * of the block's input. The scale goes into the second Linear's weights and
 * bias, the residual into the layer (read [N, H, W, C]: the stem's
 * LayerNorm output, or a Transpose of the downsampling Conv's): no Mul, Add
 * or Pointwise is left, and the downsampling LayerNorm reads the layer's
 * output with no Transpose pair between. */
TEST(convnext_layer_scale) {
    kiln_model *m = NULL;
    CHECK_OK(kiln_model_load_onnx("tests/data/tiny_convnext.onnx", &m));
    if (!m) return;
    compare(m, 1e-5, 1);
    compare(m, 1e-5, 2);
    kiln_engine *e = build(m, 1, 0, 1);
    /* (the head's Transpose of [1, 1, 1, C] to [1, C, 1, 1] before its Flatten
     * moves nothing: merge_movement makes the two one Reshape view; 9 with the pass off) */
    CHECK(e && count_op(e, KILN_OP_Mul) == 0 && count_op(e, KILN_OP_Add) == 0 &&
          count_op(e, KILN_OP_Pointwise) == 0 && count_op(e, KILN_OP_Transpose) == 8);
    const kiln_graph *eg = e ? e->graph : NULL;
    const kiln_node *n = find_layer(e, "b1_fc2_mm+b1_fc2");
    CHECK(n && n->n_in == 4 && !strcmp(eg->values[n->in[3]].name, "stem_ln"));
    n = find_layer(e, "b2_fc2_mm+b2_fc2");
    CHECK(n && n->n_in == 4 && !strcmp(eg->values[n->in[3]].name, "down/kiln_nhwc"));
    n = find_layer(e, "down_ln");
    CHECK(n && eg->nodes[eg->values[n->in[0]].producer].op_id == KILN_OP_FusedMatMul);
    kiln_engine_free(e);
    e = build_off(m, 1, 0, 1, "fold_layer_scale");
    CHECK(e && count_op(e, KILN_OP_Mul) + count_op(e, KILN_OP_Pointwise) == 2);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* A value that something else reads is not fused away. */
TEST(no_fusion_when_shared) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[2] = {4, 8}, wd[2] = {8, 8};
    int x = add_input(g, "x", 2, xd);
    int mm = add_binary(g, KILN_OP_MatMul, "mm", x, weights(g, "w", 2, wd, 0.5f));
    mark_output(g, mm);
    mark_output(g, add_unary(g, KILN_OP_Relu, "relu", mm, NULL));
    kiln_model *m = model_of(g);
    compare(m, 1e-6, 1);
    kiln_engine *e = build(m, 1, 0, 1);
    CHECK(e && find_layer(e, "mm") && find_layer(e, "relu") && count_op(e, KILN_OP_FusedMatMul) == 1);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* BERT's mask (input 1, [2, 1, 1, 12]) with a NaN for image 0's key 3,
 * +inf for image 1's key 7 and -inf for its key 5. */
static void mask_specials(void) {
    xs[1][3] = NAN;
    xs[1][12 + 5] = -INFINITY;
    xs[1][12 + 7] = INFINITY;
}

/* BERT's self-attention as exported (B 2, S 12, H 3, D 8; input "x" and an
 * additive "mask" [2, 1, 1, 12]): projections, head split, scores, scale,
 * mask, softmax, context, merge, and (out_proj) the output projection. */
static kiln_model *bert_attention(bool out_proj) {
    const int64_t B = 2, S = 12, H = 3, D = 8, E = H * D;
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[3] = {B, S, E}, md[4] = {B, 1, 1, S};
    int x = add_input(g, "x", 3, xd);
    int mask = add_input(g, "mask", 4, md);
    int y = attention(g, x, x, B, S, S, H, D, mask, true);
    mark_output(g, out_proj ? linear(g, "out", y, E, E) : y);
    return model_of(g);
}

/* A NaN or +inf score makes its softmax row NaN, as torch's softmax (-inf
 * is a masked key), on every Attention tactic: the AVX-512 exp flushed a
 * NaN to 0, so the row came out finite without that key. */
TEST(attention_special_values) {
    const int64_t B = 2, S = 12, E = 24;
    kiln_model *m = bert_attention(false);
    g_specials = mask_specials;
    kiln_engine *e0 = build(m, 0, KILN_PRECISION_FP32, 1);
    fill_inputs();
    int64_t n0 = run(e0, 0, yref), nans = 0;
    for (int64_t i = 0; i < n0; i++) nans += isnan(yref[i]);
    CHECK(n0 == B * S * E && nans == n0); /* both images have a NaN row everywhere */
    xs[1][12 + 7] = 0.0f;                 /* image 1: only its -inf key */
    n0 = run(e0, 0, yref), nans = 0;
    for (int64_t i = 0; i < n0; i++) nans += isnan(yref[i]);
    CHECK(nans == n0 / 2);
    for (int threads = 1; threads <= 2; threads++) {
        kiln_engine *e = build(m, 1, KILN_PRECISION_FP32, threads);
        CHECK(e && count_op(e, KILN_OP_Attention) == 1);
        for (int t = 0; e && t <= KILN_ATTN_TACTIC_AVX512; t++) {
            for (int i = 0; i < e->graph->n_nodes; i++)
                if (e->graph->nodes[i].op_id == KILN_OP_Attention) ((kiln_tactic *)e->graph->nodes[i].attrs)->id = t;
            int64_t n1 = run(e, 0, yopt);
            double err = special_rel_err(yopt, yref, n0);
            if (!(err <= 1e-5)) fprintf(stderr, "  tactic %d, %d threads: relative error %g\n", t, threads, err);
            CHECK(n1 == n0 && err <= 1e-5);
        }
        kiln_engine_free(e);
    }
    kiln_engine_free(e0);
    g_specials = NULL;
    kiln_model_free(m);
}

/* BERT's self-attention as exported, with its output projection. */
TEST(attention_bert_form) {
    const int64_t H = 3, D = 8, E = H * D;
    kiln_model *m = bert_attention(true);
    compare(m, 1e-5, 1);
    compare(m, 1e-5, 2);
    every_tactic_of(m, 2, KILN_OP_Attention, KILN_ATTN_TACTIC_AVX512);
    kiln_engine *e = build(m, 1, 0, 1);
    /* Q, K, V projections in one FusedMatMul; attention; output projection */
    CHECK(e && count_op(e, KILN_OP_Attention) == 1 && count_op(e, KILN_OP_FusedMatMul) == 2 &&
          count_op(e, KILN_OP_Transpose) == 0 && count_op(e, KILN_OP_Reshape) == 0 && e->graph->n_nodes == 3);
    const kiln_node *qkv = find_layer(e, "q/MatMul+q/Add+k/MatMul+k/Add+v/MatMul+v/Add");
    CHECK(qkv && qkv->n_in == 3 && e->graph->values[qkv->in[1]].info.dims[1] == 3 * E);
    const kiln_node *n = find_layer(e, "tq+rq+tk+rk+tv+rv+qk+div+addmask+softmax+pv+tm+rm");
    if (n && qkv) {
        const kiln_attention_attrs *aa = n->attrs;
        CHECK(aa->num_heads == H && aa->q_layout == KILN_ATTN_QKV && aa->k_layout == KILN_ATTN_QKV &&
              aa->v_layout == KILN_ATTN_QKV && aa->out_layout == KILN_ATTN_BSHD && n->n_in == 4);
        CHECK(n->in[0] == qkv->out[0] && n->in[1] == qkv->out[0] && n->in[2] == qkv->out[0]);
        CHECK(fabsf(aa->scale - 1.0f / sqrtf((float)D)) < 1e-7f);
    } else {
        CHECK(n != NULL);
    }
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* Cross-attention (K, V from another input, another length): no shared
 * projection, each operand read in its [B, S, H*D] form. */
/* GPT-2's form: one packed projection [B,S,3E], Split into Q, K, V along the
 * last axis, each split into heads: one Attention reading the packed value
 * (QKV layout), no Split left. */
static int gpt2_attention(kiln_graph *g, const char *p, int x, int64_t B, int64_t S, int64_t H, int64_t D,
                          const int64_t *parts) {
    int64_t E = H * D, sh[4] = {B, S, H, D}, merge[3] = {B, S, E};
    char nm[64], sz[64], o[3][64];
    snprintf(nm, sizeof nm, "%s_split", p);
    snprintf(sz, sizeof sz, "%s_sizes", p);
    int qkv = linear(g, p, x, E, 3 * E), out[3];
    for (int i = 0; i < 3; i++) {
        snprintf(o[i], sizeof o[i], "%s_part%d", p, i);
        out[i] = add_val(g, o[i]);
    }
    kiln_split_attrs sa = {.axis = 2};
    if (kiln__graph_add_node(g, KILN_OP_Split, nm, 2, (int[]){qkv, ints(g, sz, 3, parts)}, 3, out, &sa, NULL) != KILN_OK)
        abort();
    const int64_t *shk = sh;
    int hs[3];
    for (int i = 0; i < 3; i++) {
        char rn[64], tn[64];
        snprintf(rn, sizeof rn, "%s_r%d", p, i);
        snprintf(tn, sizeof tn, "%s_t%d", p, i);
        int64_t shp[4] = {B, S, H, parts[i] / H};
        hs[i] = transpose(g, tn, reshape(g, rn, out[i], 4, parts[i] == E ? shk : shp), 0, 2, i == 1 ? 3 : 1,
                          i == 1 ? 1 : 3);
    }
    char qk[64], dv[64], sc[64], smx[64], pv[64], tm[64], rm[64];
    snprintf(qk, sizeof qk, "%s_qk", p);
    snprintf(dv, sizeof dv, "%s_div", p);
    snprintf(sc, sizeof sc, "%s_scale", p);
    snprintf(smx, sizeof smx, "%s_softmax", p);
    snprintf(pv, sizeof pv, "%s_pv", p);
    snprintf(tm, sizeof tm, "%s_tm", p);
    snprintf(rm, sizeof rm, "%s_rm", p);
    int s_ = add_binary(g, KILN_OP_Div, dv, add_binary(g, KILN_OP_MatMul, qk, hs[0], hs[1]),
                        add_scalar(g, sc, sqrtf((float)D)));
    kiln_softmax_attrs sm = {.axis = -1};
    int y = add_binary(g, KILN_OP_MatMul, pv, add_unary(g, KILN_OP_Softmax, smx, s_, &sm), hs[2]);
    return reshape(g, rm, transpose(g, tm, y, 0, 2, 1, 3), 3, merge);
}

TEST(attention_gpt2_split_form) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t B = 2, S = 6, H = 2, D = 8, E = H * D, xd[3] = {B, S, E};
    int x = add_input(g, "x", 3, xd);
    int64_t equal[3] = {E, E, E};
    int y = gpt2_attention(g, "a", x, B, S, H, D, equal);
    mark_output(g, y);
    kiln_model *m = model_of(g);
    compare(m, 1e-5, 1);
    kiln_engine *e = build(m, 1, 0, 1);
    CHECK(e && count_op(e, KILN_OP_Attention) == 1 && count_op(e, KILN_OP_Split) == 0);
    for (int i = 0; e && i < e->graph->n_nodes; i++) {
        const kiln_node *n = &e->graph->nodes[i];
        if (n->op_id != KILN_OP_Attention) continue;
        const kiln_attention_attrs *aa = n->attrs;
        CHECK(aa->q_layout == KILN_ATTN_QKV && aa->k_layout == KILN_ATTN_QKV && aa->v_layout == KILN_ATTN_QKV);
        CHECK(n->in[0] == n->in[1] && n->in[1] == n->in[2]);
    }
    kiln_engine_free(e);
    kiln_model_free(m);
}

TEST(attention_cross) {
    const int64_t B = 2, S = 9, S2 = 21, H = 4, D = 6, E = H * D;
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[3] = {B, S, E}, yd[3] = {B, S2, E};
    int x = add_input(g, "x", 3, xd), y = add_input(g, "y", 3, yd);
    mark_output(g, attention(g, x, y, B, S, S2, H, D, -1, false));
    kiln_model *m = model_of(g);
    compare(m, 1e-5, 2);
    every_tactic_of(m, 1, KILN_OP_Attention, KILN_ATTN_TACTIC_AVX512);
    kiln_engine *e = build(m, 1, 0, 1);
    const kiln_node *n = find_layer(e, "tq+rq+tk+rk+tv+rv+qk+softmax+pv+tm+rm");
    CHECK(e && count_op(e, KILN_OP_FusedMatMul) == 3 && n && n->n_in == 3);
    if (n) {
        const kiln_attention_attrs *aa = n->attrs;
        CHECK(aa->q_layout == KILN_ATTN_BSHD && aa->k_layout == KILN_ATTN_BSHD && aa->v_layout == KILN_ATTN_BSHD);
    }
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* Attention on [B,H,S,D] tensors given directly: K^T by Transpose(0,1,3,2),
 * Mul scale, no mask; and a pre-transposed K with no scale. */
TEST(attention_4d_forms) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t qd[4] = {1, 2, 37, 16};
    int q = add_input(g, "q", 4, qd);
    int kv = add_input(g, "kv", 4, qd);
    kiln_softmax_attrs sa = {.axis = 3};
    int s = add_binary(g, KILN_OP_Mul, "scale", add_scalar(g, "c", 0.25f), add_binary(g, KILN_OP_MatMul, "qk", q, transpose(g, "kt", kv, 0, 1, 3, 2)));
    mark_output(g, add_binary(g, KILN_OP_MatMul, "pv", add_unary(g, KILN_OP_Softmax, "sm", s, &sa), kv));
    /* K^T given as an input ([B,H,D,S]) */
    int64_t ktd[4] = {1, 2, 16, 37};
    int kt = add_input(g, "kt_in", 4, ktd);
    mark_output(g, add_binary(g, KILN_OP_MatMul, "pv2", add_unary(g, KILN_OP_Softmax, "sm2", add_binary(g, KILN_OP_MatMul, "qk2", kv, kt), &sa),
                  q));
    /* a K^T Transpose that is also an output: read through, kept */
    int qt = transpose(g, "qt", q, 0, 1, 3, 2);
    mark_output(g, qt);
    mark_output(g, add_binary(g, KILN_OP_MatMul, "pv3", add_unary(g, KILN_OP_Softmax, "sm3", add_binary(g, KILN_OP_MatMul, "qk3", kv, qt), &sa),
                  kv));
    kiln_model *m = model_of(g);
    compare(m, 1e-5, 2);
    every_tactic_of(m, 1, KILN_OP_Attention, KILN_ATTN_TACTIC_AVX512);
    kiln_engine *e = build(m, 1, 0, 1);
    CHECK(e && count_op(e, KILN_OP_Attention) == 3 && count_op(e, KILN_OP_Transpose) == 1);
    const kiln_node *n = find_layer(e, "kt+qk+scale+sm+pv");
    CHECK(n && ((const kiln_attention_attrs *)n->attrs)->k_layout == KILN_ATTN_BHSD &&
          ((const kiln_attention_attrs *)n->attrs)->out_layout == KILN_ATTN_BHSD &&
          ((const kiln_attention_attrs *)n->attrs)->scale == 0.25f);
    n = find_layer(e, "qk2+sm2+pv2");
    CHECK(n && ((const kiln_attention_attrs *)n->attrs)->k_layout == KILN_ATTN_BHDS &&
          ((const kiln_attention_attrs *)n->attrs)->scale == 1.0f);
    n = find_layer(e, "qk3+sm3+pv3");
    CHECK(n && ((const kiln_attention_attrs *)n->attrs)->k_layout == KILN_ATTN_BHSD && n->in[1] == e->graph->inputs[0]);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* Attention with ragged shapes for the AVX-512 kernel's tails: Sq 37, Sk 70
 * (not a multiple of 16), D 20 (a partial 16-dim block), Dv 40 > D (V read
 * in place), and a full [1, 1, Sq, Sk] mask (a row per query). */
TEST(attention_ragged_shapes) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t qd[4] = {1, 2, 37, 20}, kd[4] = {1, 2, 70, 20}, vd[4] = {1, 2, 70, 40}, md[4] = {1, 1, 37, 70};
    int q = add_input(g, "q", 4, qd), v = add_input(g, "v", 4, vd), mask = add_input(g, "mask", 4, md);
    int k = weights(g, "k", 4, kd, 1.0f); /* a constant: the inputs are three at most */
    kiln_softmax_attrs sa = {.axis = -1};
    int s = add_binary(g, KILN_OP_MatMul, "qk", q, transpose(g, "kt", k, 0, 1, 3, 2));
    s = add_binary(g, KILN_OP_Mul, "scale", s, add_scalar(g, "c", 0.3f));
    s = add_binary(g, KILN_OP_Add, "addmask", s, mask);
    mark_output(g, add_binary(g, KILN_OP_MatMul, "pv", add_unary(g, KILN_OP_Softmax, "sm", s, &sa), v));
    kiln_model *m = model_of(g);
    compare(m, 1e-5, 1);
    compare(m, 1e-5, 2);
    every_tactic_of(m, 1, KILN_OP_Attention, KILN_ATTN_TACTIC_AVX512);
    kiln_engine *e = build(m, 1, 0, 1);
    CHECK(e && count_op(e, KILN_OP_Attention) == 1);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* A "mask" that broadcasts the scores up to a bigger batch is not an
 * attention mask: left alone. */
TEST(attention_mask_widening_not_fused) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t qd[4] = {1, 2, 5, 4}, md[4] = {3, 2, 5, 5};
    int q = add_input(g, "q", 4, qd), kv = add_input(g, "kv", 4, qd), mask = add_input(g, "mask", 4, md);
    kiln_softmax_attrs sa = {.axis = -1};
    int s = add_binary(g, KILN_OP_Add, "add", add_binary(g, KILN_OP_MatMul, "qk", q, transpose(g, "kt", kv, 0, 1, 3, 2)), mask);
    mark_output(g, add_binary(g, KILN_OP_MatMul, "pv", add_unary(g, KILN_OP_Softmax, "sm", s, &sa), kv));
    kiln_model *m = model_of(g);
    compare(m, 1e-6, 1);
    kiln_engine *e = build(m, 1, 0, 1);
    CHECK(e && count_op(e, KILN_OP_Attention) == 0 && count_op(e, KILN_OP_Softmax) == 1);
    kiln_engine_free(e);
    kiln_model_free(m);
}

TEST(transpose_reshape_cleanup) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[4] = {2, 3, 4, 5};
    int x = add_input(g, "x", 4, xd);
    /* transpose of transpose = identity: both disappear */
    mark_output(g, add_unary(g, KILN_OP_Relu, "r1", transpose(g, "t2", transpose(g, "t1", x, 0, 2, 3, 1), 0, 3, 1, 2), NULL));
    /* composed into one */
    mark_output(g, transpose(g, "t4", transpose(g, "t3", x, 1, 0, 2, 3), 0, 1, 3, 2));
    /* reshape of reshape: one */
    int64_t s1[2] = {6, 20}, s2[3] = {3, 8, 5};
    mark_output(g, reshape(g, "rs2", reshape(g, "rs1", x, 2, s1), 3, s2));
    kiln_model *m = model_of(g);
    compare(m, 0.0, 1);
    kiln_engine *e = build(m, 1, 0, 1);
    CHECK(e && count_op(e, KILN_OP_Transpose) == 1 && count_op(e, KILN_OP_Reshape) == 1 && e->graph->n_nodes == 3);
    const kiln_node *n = find_layer(e, "t3+t4");
    const kiln_transpose_attrs *ta = n ? n->attrs : NULL;
    CHECK(ta && ta->n_perm == 4 && ta->perm[0] == 1 && ta->perm[1] == 0 && ta->perm[2] == 3 && ta->perm[3] == 2);
    CHECK(find_layer(e, "rs1+rs2") != NULL);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* An int64 scalar constant. */
static int int_scalar(kiln_graph *g, const char *name, int64_t x) {
    int v = add_val(g, name);
    if (kiln__value_set_const(&g->values[v], KILN_DTYPE_INT64, 0, NULL, &x) != KILN_OK) abort();
    return v;
}

/* The int64 constant of Reshape node `name`'s target in g, or NULL. */
static const int64_t *reshape_target(const kiln_graph *g, const char *name, int64_t *n) {
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *nd = &g->nodes[i];
        if (nd->dead || nd->op_id != KILN_OP_Reshape || strcmp(nd->name, name)) continue;
        const kiln_value *t = &g->values[nd->in[1]];
        if (!(t->flags & KILN_VALUE_CONST)) return NULL;
        *n = t->info.dims[0];
        return t->data;
    }
    return NULL;
}

/* Reshape targets computed at run time from dims (models exported with
 * dynamic axes) in the forms the exporters write: Gather(Shape(x)) with a
 * one-element index, Shape(x, start, end), Unsqueeze(Gather(Shape(x),
 * scalar)), negative indices. A target that copies x's own dims in place
 * becomes a constant with 0 entries; one that swaps them stays computed. */
TEST(runtime_reshape_targets) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int sb, ss;
    CHECK_OK(kiln__graph_add_symbol(g, "b", &sb));
    CHECK_OK(kiln__graph_add_symbol(g, "s", &ss));
    int64_t xd[3] = {KILN_DIM_SYM(sb), KILN_DIM_SYM(ss), 8};
    int x = add_input(g, "x", 3, xd);
    kiln_axis_attrs ax0 = {0};
    kiln_shape_attrs all = {0}, one = {.start = 1, .end = 2, .has_end = 1};
    int64_t i0[1] = {0}, hd[2] = {2, 4}, e8[1] = {8};
    /* [b, s, 2, 4]: Gather(Shape(x), [0]) and Shape(x, 1, 2) */
    int sh = add_node(g, KILN_OP_Shape, "sh", 1, &x, &all);
    int d0 = add_node(g, KILN_OP_Gather, "g0", 2, (int[]){sh, ints(g, "i0", 1, i0)}, &ax0);
    int d1 = add_node(g, KILN_OP_Shape, "sh1", 1, &x, &one);
    int c1 = add_node(g, KILN_OP_Concat, "c1", 3, (int[]){d0, d1, ints(g, "hd", 2, hd)}, &ax0);
    kiln_reshape_attrs ra = {0};
    int r1 = add_node(g, KILN_OP_Reshape, "r1", 2, (int[]){x, c1}, &ra);
    mark_output(g, add_unary(g, KILN_OP_Relu, "relu", r1, NULL));
    /* [s, b, 8]: Unsqueeze(Gather(Shape(x), -2)), Unsqueeze(Gather(Shape(x), 0)): not x's dims in place */
    int gs = add_node(g, KILN_OP_Gather, "gs", 2, (int[]){sh, int_scalar(g, "m2", -2)}, &ax0);
    int gb = add_node(g, KILN_OP_Gather, "gb", 2, (int[]){sh, int_scalar(g, "z", 0)}, &ax0);
    int us = add_node(g, KILN_OP_Unsqueeze, "us", 2, (int[]){gs, ints(g, "a0", 1, i0)}, NULL);
    int ub = add_node(g, KILN_OP_Unsqueeze, "ub", 2, (int[]){gb, ints(g, "a1", 1, i0)}, NULL);
    int c2 = add_node(g, KILN_OP_Concat, "c2", 3, (int[]){us, ub, ints(g, "e8", 1, e8)}, &ax0);
    mark_output(g, add_node(g, KILN_OP_Reshape, "r2", 2, (int[]){x, c2}, &ra));
    kiln_model *m = model_of(g);
    kiln_optimize_opts oo = {.device = KILN_DEVICE_CPU, .precision = KILN_PRECISION_FP32};
    CHECK_OK(kiln__pass_fold_constants(g));
    CHECK_OK(kiln__pass_dce(g));
    CHECK_OK(kiln__graph_infer(g));
    CHECK_OK(kiln__pass_optimize(g, &oo));
    int64_t n = 0;
    const int64_t *t1 = reshape_target(g, "r1", &n);
    CHECK(t1 && n == 4 && t1[0] == 0 && t1[1] == 0 && t1[2] == 2 && t1[3] == 4);
    int y1 = kiln__graph_find_value(g, "r1_out");
    const kiln_tinfo *yi = y1 >= 0 ? &g->values[y1].info : NULL;
    CHECK(yi && yi->rank == 4 && yi->dims[0] == KILN_DIM_SYM(sb) && yi->dims[1] == KILN_DIM_SYM(ss));
    CHECK(reshape_target(g, "r2", &n) == NULL);
    int shapes = 0, concats = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        shapes += !g->nodes[i].dead && g->nodes[i].op_id == KILN_OP_Shape;
        concats += !g->nodes[i].dead && g->nodes[i].op_id == KILN_OP_Concat;
    }
    CHECK(shapes == 1 && concats == 1); /* r2's computation stays; r1's went */
    kiln_model_free(m);
}

/* bf16 engines: FusedMatMul and Attention in bf16, within 2e-2 of fp32. */
/* attention, then out projection + GELU + ffn projection */
static kiln_model *attention_ffn_model(void) {
    const int64_t B = 1, S = 16, H = 2, D = 16, E = H * D;
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[3] = {B, S, E};
    int x = add_input(g, "x", 3, xd);
    int o = attention(g, x, x, B, S, S, H, D, -1, false);
    mark_output(g, linear(g, "ffn", gelu_erf(g, "act", linear(g, "out", o, E, 4 * E), 0), 4 * E, E));
    return model_of(g);
}

TEST(bf16_close_to_fp32) {
    kiln_model *m = attention_ffn_model();
    kiln_engine *e = build_bf16_or_skip(m, 0);
    if (e) {
        const kiln_node *n = find_layer(e, "out/MatMul+out/Add+act_0+act_1+act_2+act_3+act_4");
        CHECK(n && ((const kiln_fused_matmul_attrs *)n->attrs)->precision == KILN_PRECISION_BF16);
        kiln_engine *ef = build(m, 1, 0, 1);
        fill_inputs();
        int64_t n0 = run(ef, 0, yref), n1 = run(e, 0, yopt);
        double err = rel_err(yopt, yref, n0);
        printf("  bf16 vs fp32: relative error %.3g\n", err);
        CHECK(n0 > 0 && n0 == n1 && err <= 2e-2 && err > 0);
        kiln_engine_free(ef);
    }
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* bf16 CPU engines with layers named fp32 (--layer-precision): the
 * FusedMatMul and Attention layers holding them are fp32 (they stayed bf16:
 * only FusedConvs read the names), and a name that is no layer is refused
 * (it was ignored). probe5. */
TEST(bf16_layer_precision) {
    kiln_model *m = attention_ffn_model();
    static const char *const names[] = {"out/Add", "softmax", NULL}, *const typo[] = {"out/MatMull", NULL};
    kiln_engine *e = build_bf16_fp32_or_skip(m, 0, names, KILN_OK);
    if (e) {
        int fp32 = 0, bf16 = 0;
        for (int i = 0; i < e->graph->n_nodes; i++) {
            const kiln_node *n = &e->graph->nodes[i];
            int32_t p = n->op_id == KILN_OP_FusedMatMul ? ((const kiln_fused_matmul_attrs *)n->attrs)->precision
                        : n->op_id == KILN_OP_Attention ? ((const kiln_attention_attrs *)n->attrs)->precision
                                                        : -1;
            bool named = strstr(n->name, "out/Add") || strstr(n->name, "softmax");
            if (p < 0) continue;
            CHECK(p == (named ? KILN_PRECISION_FP32 : KILN_PRECISION_BF16));
            fp32 += p == KILN_PRECISION_FP32;
            bf16 += p == KILN_PRECISION_BF16;
        }
        CHECK(fp32 == 2 && bf16 >= 1);
        kiln_engine_free(e);
        e = build_bf16_fp32_or_skip(m, 0, typo, KILN_ERR_INVALID_ARGUMENT);
        CHECK(!e && strstr(kiln_last_error(), "layer precision given for 'out/MatMull', which is not a layer"));
    }
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* The vectorized helpers (AVX-512 here when the CPU has it) against libm. */
TEST(math_helpers) {
    enum { N = 1000 };
    static float x[N], y[N], z[N];
    for (int i = 0; i < N; i++) x[i] = -12.0f + 24.0f * (float)i / N;
    for (int approx = 0; approx < 2; approx++) {
        memcpy(y, x, sizeof x);
        kiln__gelu_f32(y, N - 3, approx); /* odd length: the masked tail */
        double worst = 0;
        for (int i = 0; i < N - 3; i++) {
            double v = x[i], ref = approx ? 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)))
                                          : 0.5 * v * (1 + erf(v / sqrt(2.0)));
            double e = fabs(y[i] - ref) / (1.0 + fabs(ref));
            if (e > worst) worst = e;
        }
        CHECK(worst < 1e-6 && y[N - 1] == x[N - 1]);
    }
    /* softmax: large magnitudes, a -inf entry, a fully masked row */
    for (int i = 0; i < 37; i++) z[i] = (float)(i * 7 % 37) * 3.0f - 50.0f;
    z[5] = -INFINITY;
    for (int i = 37; i < 74; i++) z[i] = -INFINITY;
    kiln__softmax_rows_f32(z, 2, 37);
    double m = -1e30, sum = 0, worst = 0;
    for (int i = 0; i < 37; i++) {
        double v = (double)(i * 7 % 37) * 3.0 - 50.0;
        if (i != 5 && v > m) m = v;
    }
    for (int i = 0; i < 37; i++) sum += i == 5 ? 0 : exp((double)(i * 7 % 37) * 3.0 - 50.0 - m);
    for (int i = 0; i < 37; i++) {
        double ref = i == 5 ? 0 : exp((double)(i * 7 % 37) * 3.0 - 50.0 - m) / sum;
        if (fabs(z[i] - ref) > worst) worst = fabs(z[i] - ref);
    }
    CHECK(worst < 1e-6 && z[5] == 0.0f);
    CHECK(isnan(z[40])); /* as exp(-inf - -inf) gives in the reference */
}

/* bf16 attention alone (vdpbf16ps kernel): close to fp32, and not fp32. */
TEST(bf16_attention) {
    if (!kiln__attn_bf16_available()) {
        printf("  (no AVX512-BF16 here)\n");
        return;
    }
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t qd[4] = {2, 3, 45, 20}, md[4] = {2, 1, 1, 45};
    int q = add_input(g, "q", 4, qd), kv = add_input(g, "kv", 4, qd), mask = add_input(g, "mask", 4, md);
    kiln_softmax_attrs sa = {.axis = -1};
    int qk = add_binary(g, KILN_OP_MatMul, "qk", q, transpose(g, "kt", kv, 0, 1, 3, 2));
    int s = add_binary(g, KILN_OP_Add, "add", add_binary(g, KILN_OP_Mul, "scale", qk, add_scalar(g, "c", 0.2236068f)), mask);
    mark_output(g, add_binary(g, KILN_OP_MatMul, "pv", add_unary(g, KILN_OP_Softmax, "sm", s, &sa), kv));
    kiln_model *m = model_of(g);
    kiln_engine *eb = build_bf16_or_skip(m, 2);
    if (!eb) {
        kiln_model_free(m);
        return;
    }
    kiln_engine *ef = build(m, 1, 0, 2);
    CHECK(count_op(eb, KILN_OP_Attention) == 1);
    fill_inputs();
    int64_t n0 = run(ef, 0, yref), n1 = run(eb, 0, yopt);
    double err = rel_err(yopt, yref, n0);
    printf("  bf16 attention vs fp32: relative error %.3g\n", err);
    CHECK(n0 > 0 && n1 == n0 && err > 0 && err <= 2e-2);
    kiln_engine_free(ef);
    kiln_engine_free(eb);
    kiln_model_free(m);
}


/* ---- Add + LayerNormalization (src/passes/fuse_norm.c) ----------------------- */

/* ONNX LayerNormalization of s over the last axis (D wide), optionally with
 * its Mean output (*mean set). */
static int onnx_ln(kiln_graph *g, const char *name, int s, int64_t D, int *mean) {
    char sn[64], bn[64], yn[64], mn[64];
    snprintf(sn, sizeof sn, "%s.weight", name);
    snprintf(bn, sizeof bn, "%s.bias", name);
    snprintf(yn, sizeof yn, "%s_out", name);
    snprintf(mn, sizeof mn, "%s_mean", name);
    int64_t d[1] = {D};
    kiln_ln_attrs la = {.axis = -1, .epsilon = 1e-5f, .stash_type = 1};
    int in[3] = {s, add_const(g, sn, 1, d, 0.5f, 1.5f), add_const(g, bn, 1, d, -0.5f, 0.5f)};
    int out[2] = {add_val(g, yn), mean ? add_val(g, mn) : -1};
    if (kiln__graph_add_node(g, KILN_OP_LayerNormalization, name, 3, in, mean ? 2 : 1, out, &la, NULL) != KILN_OK)
        abort();
    if (mean) *mean = out[1];
    return out[0];
}

/* BERT (post-LN): the embedding sum (position embeddings [1, S, D] repeating
 * over the batch) fuses with its LayerNorm; the residual Add after a linear
 * layer stays in the FusedMatMul (read through C) before a plain LayerNorm. */
TEST(add_layernorm_bert) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[3] = {2, 7, 48}, pd[3] = {1, 7, 48};
    int x = add_input(g, "x", 3, xd);
    int e0 = add_binary(g, KILN_OP_Add, "emb_add", x, add_const(g, "pos", 3, pd, -1.0f, 1.0f));
    int h = onnx_ln(g, "emb_ln", e0, 48, NULL);
    int r = add_binary(g, KILN_OP_Add, "res", linear(g, "fc", h, 48, 48), h);
    mark_output(g, onnx_ln(g, "out_ln", r, 48, NULL));
    kiln_model *m = model_of(g);
    compare(m, 1e-5, 1);
    compare(m, 1e-5, 2);
    kiln_engine *e = build(m, 1, 0, 1);
    CHECK(e && count_op(e, KILN_OP_AddLayerNorm) == 1 && count_op(e, KILN_OP_LayerNormalization) == 1 &&
          count_op(e, KILN_OP_FusedMatMul) == 1 && count_op(e, KILN_OP_Add) == 0 && e->graph->n_nodes == 3);
    const kiln_node *n = find_layer(e, "emb_add+emb_ln");
    CHECK(n && n->n_in == 4 && n->n_out == 1 && n->in[0] == e->graph->inputs[0]);
    const char *d = e ? kiln_engine_describe(e, 0) : "";
    CHECK(strstr(d, "AddLayerNorm") && strstr(d, "emb_add+emb_ln"));
    kiln_engine_free(e);
    /* --disable-pass fuse_add_layernorm keeps the two nodes */
    e = build_off(m, 1, 0, 1, "fuse_add_layernorm");
    CHECK(e && count_op(e, KILN_OP_AddLayerNorm) == 0 && count_op(e, KILN_OP_LayerNormalization) == 2 &&
          count_op(e, KILN_OP_Add) == 1);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* Pre-LN: the sum goes on to the next residual (here a FusedMatMul's) and is
 * a graph output: the fused layer writes it as its second output. A reader
 * of the sum placed before the LayerNorm moves the fused node to the Add. */
TEST(add_layernorm_pre_ln) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[3] = {2, 5, 40};
    int x = add_input(g, "x", 3, xd), y = add_input(g, "y", 3, xd);
    int s = add_binary(g, KILN_OP_Add, "res1", x, y);
    int t = add_unary(g, KILN_OP_Relu, "early", s, NULL); /* reads s before the LayerNorm */
    int h = onnx_ln(g, "ln1", s, 40, NULL);
    int o = add_binary(g, KILN_OP_Add, "res2", linear(g, "fc", h, 40, 40), s);
    mark_output(g, o);
    mark_output(g, t);
    mark_output(g, s);
    kiln_model *m = model_of(g);
    compare(m, 1e-5, 1);
    compare(m, 1e-5, 2);
    kiln_engine *e = build(m, 1, 0, 1);
    CHECK(e && count_op(e, KILN_OP_AddLayerNorm) == 1 && count_op(e, KILN_OP_Add) == 0 &&
          count_op(e, KILN_OP_LayerNormalization) == 0);
    const kiln_node *n = find_layer(e, "res1+ln1");
    CHECK(n && n->n_out == 2 && n->out[1] >= 0);
    /* the fused node comes before the Relu that reads its sum */
    for (int i = 0; e && n && i < e->graph->n_nodes; i++)
        if (e->graph->nodes[i].op_id == KILN_OP_Relu) CHECK(&e->graph->nodes[i] > n);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* Left alone: a LayerNorm whose Mean is read, an addend broadcast along the
 * normalized axis, two addends that both broadcast. */
TEST(add_layernorm_not_fused) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[3] = {2, 5, 40}, cd[3] = {2, 5, 1}, ad[3] = {2, 1, 40}, bd[3] = {1, 5, 40};
    int x = add_input(g, "x", 3, xd);
    int mean = -1;
    mark_output(g, onnx_ln(g, "ln_stats", add_binary(g, KILN_OP_Add, "add_stats", x, x), 40, &mean));
    mark_output(g, mean);
    int c = add_binary(g, KILN_OP_Add, "add_col", x, add_const(g, "col", 3, cd, -1.0f, 1.0f));
    mark_output(g, onnx_ln(g, "ln_col", c, 40, NULL));
    int p = add_unary(g, KILN_OP_Relu, "ra", add_input(g, "y", 3, ad), NULL);
    int q = add_unary(g, KILN_OP_Relu, "rb", add_input(g, "z", 3, bd), NULL);
    mark_output(g, onnx_ln(g, "ln_both", add_binary(g, KILN_OP_Add, "add_both", p, q), 40, NULL));
    kiln_model *m = model_of(g);
    compare(m, 1e-5, 1);
    kiln_engine *e = build(m, 1, 0, 1);
    CHECK(e && count_op(e, KILN_OP_AddLayerNorm) == 0 && count_op(e, KILN_OP_LayerNormalization) == 3);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* Live Add nodes of g after the CUDA plan's optimization at precision p,
 * fuse_pointwise off (-1: no CUDA backend in this build, or the
 * optimization failed). */
static int cuda_plan_adds(kiln_graph *g, kiln_precision p) {
    if (!kiln__backend_for(KILN_DEVICE_CUDA)) return -1;
    kiln_optimize_opts oo = {.device = KILN_DEVICE_CUDA, .precision = p, .disabled = 1u << KILN_PASS_FUSE_POINTWISE};
    if (kiln__graph_infer(g) != KILN_OK || kiln__pass_optimize(g, &oo) != KILN_OK) return -1;
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += !g->nodes[i].dead && g->nodes[i].op_id == KILN_OP_Add;
    return n;
}

/* Add(Add(x, c1), c2) with c1 = c2 = `c` everywhere: x + c1 + c2. */
static kiln_graph *two_addends(float c) {
    kiln_graph *g = NULL;
    if (kiln__graph_create(&g) != KILN_OK) abort();
    int64_t xd[2] = {2, 8}, cd[1] = {8};
    int x = add_input(g, "x", 2, xd);
    int c1 = add_const(g, "c1", 1, cd, c, c), c2 = add_const(g, "c2", 1, cd, c, c);
    mark_output(g, add_binary(g, KILN_OP_Add, "outer", add_binary(g, KILN_OP_Add, "inner", x, c1), c2));
    return g;
}

/* fold_addends (fp16/bf16 device plans, issue 20, probe6): constants whose
 * sum leaves fp16's range are not summed at build: stored, the sum was
 * clamped to 65504 (40000 + 40000 for x = -50000 gave 15504, not 30000)
 * while each constant alone fits; bf16 plans (float32's range) fold them,
 * and small constants fold in fp16 as before. */
TEST(fold_addends_range) {
    if (!kiln__backend_for(KILN_DEVICE_CUDA)) {
        printf("  (no CUDA backend in this build: skipped)\n");
        return;
    }
    kiln_graph *g = two_addends(40000.0f);
    CHECK(cuda_plan_adds(g, KILN_PRECISION_FP16) == 2);
    kiln__graph_free(g);
    g = two_addends(40000.0f);
    CHECK(cuda_plan_adds(g, KILN_PRECISION_BF16) == 1);
    kiln__graph_free(g);
    g = two_addends(3e38f); /* the sum is float32's infinity */
    CHECK(cuda_plan_adds(g, KILN_PRECISION_BF16) == 2);
    kiln__graph_free(g);
    g = two_addends(0.5f);
    CHECK(cuda_plan_adds(g, KILN_PRECISION_FP16) == 1);
    kiln__graph_free(g);
}

/* Engine of m over a profile of batch 1 to 4 (opt 2) along axis 0 of every
 * input (the other dims as the graph has them). */
static kiln_engine *build_batch_profile(const kiln_model *m, int opt) {
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_optimization(b, opt));
    CHECK_OK(kiln_builder_set_threads(b, 2));
    for (int i = 0; i < m->graph->n_inputs; i++) {
        const kiln_value *v = &m->graph->values[m->graph->inputs[i]];
        int64_t d[3][KILN_MAX_RANK];
        for (int k = 0; k < 3; k++) memcpy(d[k], v->info.dims, sizeof d[k]);
        d[0][0] = 1, d[1][0] = 2, d[2][0] = 4;
        CHECK_OK(kiln_builder_set_profile(b, v->name, v->info.rank, d[0], d[1], d[2]));
    }
    CHECK_OK(kiln_build(b, m, &e));
    kiln_builder_free(b);
    return e;
}

/* A symbolic batch (an engine over a batch profile, as servers build): the
 * embedding sum (position embeddings [1, S, D] repeating over the batch) and
 * a residual of the same symbolic shape fuse as at a static batch, and the
 * kernels take the rows from the run-time dims (batches 1, 3 and 4, the
 * profile's opt being 2). An addend [b, 1, D] (not whole rows) stays apart. */
TEST(add_layernorm_symbolic_batch) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int sb;
    CHECK_OK(kiln__graph_add_symbol(g, "batch", &sb));
    int64_t xd[3] = {KILN_DIM_SYM(sb), 7, 48}, pd[3] = {1, 7, 48}, cd[3] = {KILN_DIM_SYM(sb), 1, 48};
    int x = add_input(g, "x", 3, xd), y = add_input(g, "y", 3, xd), z = add_input(g, "z", 3, cd);
    int e0 = add_binary(g, KILN_OP_Add, "emb_add", x, add_const(g, "pos", 3, pd, -1.0f, 1.0f));
    int h = onnx_ln(g, "emb_ln", e0, 48, NULL);
    int r = add_binary(g, KILN_OP_Add, "res", h, y);
    int o = onnx_ln(g, "out_ln", r, 48, NULL);
    mark_output(g, o);
    mark_output(g, onnx_ln(g, "col_ln", add_binary(g, KILN_OP_Add, "col_add", o, z), 48, NULL));
    kiln_model *m = model_of(g);
    kiln_engine *ep0 = build_batch_profile(m, 0), *ep1 = build_batch_profile(m, 1);
    CHECK(ep1 && count_op(ep1, KILN_OP_AddLayerNorm) == 2 && count_op(ep1, KILN_OP_LayerNormalization) == 1 &&
          count_op(ep1, KILN_OP_Add) == 1);
    CHECK(find_layer(ep1, "emb_add+emb_ln") && find_layer(ep1, "res+out_ln"));
    fill_inputs();
    static const int64_t batches[] = {1, 3, 4};
    for (int b = 0; b < 3; b++)
        for (int k = 0; k < 2; k++) {
            int64_t n0 = run_batch(ep0, batches[b], k, yref), n1 = run_batch(ep1, batches[b], k, yopt);
            double err = n0 > 0 ? rel_err(yopt, yref, n0) : 1;
            if (!(err <= 1e-5)) printf("  batch %lld output %d: %g\n", (long long)batches[b], k, err);
            CHECK(n0 == batches[b] * 7 * 48 && n1 == n0 && err <= 1e-5);
        }
    kiln_engine_free(ep0);
    kiln_engine_free(ep1);
    kiln_model_free(m);
}

/* ---- RMSNorm (fuse_rmsnorm, src/passes/fuse_transformer.c) ------------------- */

/* How an RMSNorm over x [.., D] is written. form 0: T5 (transformers 4.36,
 * torch 1.13): Cast(float) -> Pow 2 -> ReduceMean -> Add eps -> Sqrt ->
 * Div(1, .) -> Mul(cast, .) -> Mul(w, .); 1: Pow 2 ... Sqrt -> Div(x, .) ->
 * Mul(., w); 2: Mul(x, x) ... Add(eps, .) -> Sqrt -> Reciprocal -> Mul(., x)
 * -> Cast(float) -> Mul(w, .); 3: Pow 2 ... Pow(., -0.5) -> Mul(x, .) ->
 * Mul(., w). eps: the value added (-1: a scalar constant); axes: the
 * ReduceMean's (n_axes 0: the last). Out: the Cast's, the mean's and the
 * square root's values (-1 where the form has none). */
typedef struct rms_spec {
    int form, eps, n_axes;
    int64_t axes[2];
    int cast, mean, sqrt;
} rms_spec;

static int rmsnorm(kiln_graph *g, const char *p, int x, int64_t D, rms_spec *sp) {
    char n[16][64];
    for (int i = 0; i < 16; i++) snprintf(n[i], sizeof n[i], "%s_%d", p, i);
    kiln_reduce_attrs ra = {.keepdims = 1};
    kiln_ew_cast_attrs ca = {.to = KILN_DTYPE_FLOAT32};
    int64_t last[1] = {-1}, dd[1] = {D};
    sp->cast = sp->sqrt = -1;
    if (sp->form == 0) x = sp->cast = add_unary(g, KILN_OP_Cast, n[0], x, &ca);
    int sq = sp->form == 2 ? add_binary(g, KILN_OP_Mul, n[1], x, x)
                           : add_binary(g, KILN_OP_Pow, n[1], x, add_scalar(g, n[2], 2.0f));
    int axes = sp->n_axes ? ints(g, n[3], sp->n_axes, sp->axes) : ints(g, n[3], 1, last);
    int ms = sp->mean = add_node(g, KILN_OP_ReduceMean, n[4], 2, (int[]){sq, axes}, &ra);
    int eps = sp->eps >= 0 ? sp->eps : add_scalar(g, n[5], 1e-6f);
    int t = sp->form == 2 ? add_binary(g, KILN_OP_Add, n[6], eps, ms) : add_binary(g, KILN_OP_Add, n[6], ms, eps);
    int y, w = weights(g, n[7], 1, dd, 1.0f);
    if (sp->form == 3) {
        y = add_binary(g, KILN_OP_Mul, n[9], x, add_binary(g, KILN_OP_Pow, n[8], t, add_scalar(g, n[10], -0.5f)));
        return add_binary(g, KILN_OP_Mul, n[11], y, w);
    }
    int r = sp->sqrt = add_unary(g, KILN_OP_Sqrt, n[8], t, NULL);
    if (sp->form == 1) return add_binary(g, KILN_OP_Mul, n[11], add_binary(g, KILN_OP_Div, n[9], x, r), w);
    if (sp->form == 0) {
        r = add_binary(g, KILN_OP_Div, n[10], add_scalar(g, n[12], 1.0f), r);
        return add_binary(g, KILN_OP_Mul, n[11], w, add_binary(g, KILN_OP_Mul, n[9], x, r));
    }
    y = add_binary(g, KILN_OP_Mul, n[9], add_unary(g, KILN_OP_Reciprocal, n[10], r, NULL), x);
    return add_binary(g, KILN_OP_Mul, n[11], w, add_unary(g, KILN_OP_Cast, n[13], y, &ca));
}

/* The four forms, chained; T5's Cast output is read by a residual Add too
 * (torch's .to(float32) of a float32 tensor is the tensor itself, so the
 * trace reads it from there): the Add reads the Cast's input instead and
 * the Cast goes. Every norm becomes one RMSNormalization named after its
 * nodes; --disable-pass fuse_rmsnorm keeps them. */
TEST(rmsnorm_forms) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[3] = {2, 5, 40};
    int x = add_input(g, "x", 3, xd);
    rms_spec s0 = {.form = 0, .eps = -1}, s1 = {.form = 1, .eps = -1}, s2 = {.form = 2, .eps = -1},
             s3 = {.form = 3, .eps = -1};
    int h = rmsnorm(g, "n0", x, 40, &s0);
    h = add_binary(g, KILN_OP_Add, "res", s0.cast, h);
    h = rmsnorm(g, "n3", rmsnorm(g, "n2", rmsnorm(g, "n1", h, 40, &s1), 40, &s2), 40, &s3);
    mark_output(g, h);
    kiln_model *m = model_of(g);
    compare(m, 1e-5, 1);
    compare(m, 1e-5, 2);
    kiln_engine *e = build(m, 1, 0, 1);
    CHECK(e && count_op(e, KILN_OP_RMSNormalization) == 4 && count_op(e, KILN_OP_Add) == 1 && e->graph->n_nodes == 5);
    CHECK(count_op(e, KILN_OP_Cast) == 0 && count_op(e, KILN_OP_ReduceMean) == 0);
    const kiln_node *n0 = find_layer(e, "n0_0+n0_1+n0_4+n0_6+n0_8+n0_10+n0_9+n0_11");
    CHECK(n0 && n0->n_in == 2 && n0->in[0] == e->graph->inputs[0]);
    CHECK(n0 && fabsf(((const kiln_ln_attrs *)n0->attrs)->epsilon - 1e-6f) < 1e-12f &&
          ((const kiln_ln_attrs *)n0->attrs)->axis == -1);
    CHECK(find_layer(e, "n2_1+n2_4+n2_6+n2_8+n2_10+n2_9+n2_13+n2_11") != NULL);
    for (int i = 0; e && i < e->graph->n_nodes; i++) /* the residual reads x */
        if (e->graph->nodes[i].op_id == KILN_OP_Add) CHECK(e->graph->nodes[i].in[0] == e->graph->inputs[0]);
    kiln_engine_free(e);
    e = build_off(m, 1, 0, 1, "fuse_rmsnorm");
    CHECK(e && count_op(e, KILN_OP_RMSNormalization) == 0);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* Left alone: a mean over another axis or over the last two, an eps that is
 * not a scalar constant (a graph input, a constant per element), a mean or a
 * square root read elsewhere too (graph outputs). */
TEST(rmsnorm_not_fused) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int64_t xd[3] = {2, 5, 40}, ed[1] = {40};
    int x = add_input(g, "x", 3, xd), ein = add_input(g, "eps_in", 0, ed);
    rms_spec sp[7] = {{.form = 1, .eps = -1, .n_axes = 1, .axes = {1}},
                      {.form = 3, .eps = -1, .n_axes = 2, .axes = {-2, -1}},
                      {.form = 1, .eps = ein},
                      {.form = 0, .eps = add_const(g, "eps40", 1, ed, 1e-6f, 1e-5f)},
                      {.form = 2, .eps = -1},
                      {.form = 3, .eps = -1},
                      {.form = 1, .eps = -1}};
    for (int i = 0; i < 7; i++) {
        char p[8];
        snprintf(p, sizeof p, "m%d", i);
        mark_output(g, rmsnorm(g, p, x, 40, &sp[i]));
    }
    mark_output(g, sp[4].mean);
    mark_output(g, add_unary(g, KILN_OP_Relu, "reads_sqrt", sp[6].sqrt, NULL));
    mark_output(g, add_binary(g, KILN_OP_Mul, "reads_mean", sp[5].mean, x));
    kiln_model *m = model_of(g);
    for (int i = 0; i < BIG; i++) xs[1][i] = 1e-6f; /* eps_in */
    kiln_engine *e0 = build(m, 0, KILN_PRECISION_FP32, 1), *e1 = build(m, 1, KILN_PRECISION_FP32, 1);
    for (int j = 0; j < BIG; j++) xs[0][j] = 2.0f * frand();
    for (int k = 0; e0 && e1 && k < m->graph->n_outputs; k++) {
        int64_t n0 = run(e0, k, yref), n1 = run(e1, k, yopt);
        CHECK(n0 > 0 && n0 == n1 && rel_err(yopt, yref, n0) <= 1e-5);
    }
    CHECK(e1 && count_op(e1, KILN_OP_RMSNormalization) == 0 && count_op(e1, KILN_OP_ReduceMean) == 7);
    kiln_engine_free(e0);
    kiln_engine_free(e1);
    kiln_model_free(m);
}

int main(void) {
    RUN(math_helpers);
    RUN(layernorm_fused);
    RUN(gelu_forms);
    RUN(matmul_bias_act);
    RUN(matmul_residual);
    RUN(matmul_special_values);
    RUN(gemm_and_tanh_gelu);
    RUN(gemm_between_flattening_reshapes);
    RUN(layer_scale_forms);
    RUN(convnext_layer_scale);
    RUN(no_fusion_when_shared);
    RUN(attention_bert_form);
    RUN(attention_special_values);
    RUN(attention_gpt2_split_form);
    RUN(attention_cross);
    RUN(attention_4d_forms);
    RUN(attention_ragged_shapes);
    RUN(attention_mask_widening_not_fused);
    RUN(transpose_reshape_cleanup);
    RUN(runtime_reshape_targets);
    RUN(bf16_close_to_fp32);
    RUN(bf16_layer_precision);
    RUN(bf16_attention);
    RUN(add_layernorm_bert);
    RUN(add_layernorm_pre_ln);
    RUN(add_layernorm_symbolic_batch);
    RUN(add_layernorm_not_fused);
    RUN(fold_addends_range);
    RUN(rmsnorm_forms);
    RUN(rmsnorm_not_fused);
    return test_summary();
}
