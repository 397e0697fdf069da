/* test_fusion_pointwise.c -- the pointwise-fusion pass
 * (src/passes/fuse_pointwise.c) and kiln.Pointwise (src/ops/fused_pointwise.c,
 * its host kernel src/ops/pointwise_interp.c): which groups
 * form (chains, diamonds, several outputs, broadcast inputs, groups split
 * by other layers, by shapes and by dtypes, the path that leaves a group
 * and comes back), that fused engines compute what unfused ones do, mixed
 * dtypes in one program, and validate's refusal of damaged programs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test.h"

#include "graph_build.h"

#include "ops/pointwise_interp.h"
#include "format/format.h"
#include "ops/elementwise_impl.h"
#include "ops/fused_pointwise.h"
#include "ops/reduce_attrs.h"
#include "ops/tensor_internal.h"

/* ---- engines -------------------------------------------------------------- */

static kiln_engine *build_pw(const kiln_model *m, int opt, bool no_pointwise) {
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_optimization(b, opt));
    if (no_pointwise) CHECK_OK(kiln_builder_disable_pass(b, "fuse_pointwise"));
    CHECK_OK(kiln_build(b, m, &e));
    kiln_builder_free(b);
    return e;
}

#define MAXN 4096
#define MAXO 4

/* Runs e on deterministic inputs (floats in [-3, 3) with a NaN and an
 * infinity, 0/1 for bool and integer inputs); out[k]: output k as float. */
static int64_t run_pw(const kiln_engine *e, float (*out)[MAXN]) {
    static unsigned char in[8][MAXN * 8];
    kiln_context *c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    if (!c) return -1;
    const kiln_graph *g = e->graph;
    gb_rng_state = 777;
    for (int i = 0; i < g->n_inputs && i < 8; i++) {
        const kiln_value *v = &g->values[g->inputs[i]];
        int64_t n = kiln__numel(v->info.rank, v->info.dims);
        for (int64_t j = 0; j < n && j < MAXN; j++) {
            double x = 3.0 * frand();
            if (v->info.dtype != KILN_DTYPE_FLOAT32) x = x > 0;
            else if (j == 5) x = NAN;
            else if (j == 7) x = INFINITY;
            kiln__store_f64(v->info.dtype, in[i], j, x);
        }
        CHECK_OK(kiln_context_set_input(c, v->name, v->info.dtype, v->info.rank, v->info.dims, in[i]));
    }
    CHECK_OK(kiln_context_run(c));
    int64_t n = -1;
    for (int k = 0; k < g->n_outputs && k < MAXO; k++) {
        const void *data = NULL;
        kiln_dtype t;
        int rank = 0;
        int64_t dims[8];
        CHECK_OK(kiln_context_get_output(c, g->values[g->outputs[k]].name, &t, &rank, dims, &data));
        n = kiln__numel(rank, dims);
        for (int64_t j = 0; data && j < n && j < MAXN; j++) out[k][j] = (float)kiln__load_f64(t, data, j);
    }
    kiln_context_free(c);
    return n;
}

/* The optimized engine (pass on) agrees with the unoptimized one on every
 * output within tol (NaN where NaN); returns it for inspection. */
static kiln_engine *check_fused(kiln_graph *g, double tol) {
    static float y0[MAXO][MAXN], y1[MAXO][MAXN];
    kiln_model *m = model_of(g);
    kiln_engine *e0 = build_pw(m, 0, false), *e1 = build_pw(m, 1, false);
    int64_t n0 = e0 ? run_pw(e0, y0) : -1, n1 = e1 ? run_pw(e1, y1) : -2;
    CHECK(n0 >= 0 && n0 == n1);
    for (int k = 0; k < g->n_outputs && k < MAXO && n0 > 0; k++) {
        double err = rel_err(y1[k], y0[k], n0 < MAXN ? n0 : MAXN);
        if (!(err <= tol)) fprintf(stderr, "  output %d: relative error %g > %g\n", k, err, tol);
        CHECK(err <= tol);
    }
    kiln_engine_free(e0);
    kiln_model_free(m); /* and g: the engines have their own copies */
    return e1;
}

static const kiln_pw_attrs *pw_of(const kiln_engine *e, int k) {
    for (int i = 0; e && i < e->graph->n_nodes; i++)
        if (e->graph->nodes[i].op_id == KILN_OP_Pointwise && k-- == 0) return e->graph->nodes[i].attrs;
    return NULL;
}

static int in_f32(kiln_graph *g, const char *name, int rank, const int64_t *d) { return add_input(g, name, rank, d); }

/* ---- group formation ------------------------------------------------------- */

TEST(test_chain) {
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(&g));
    int64_t d[3] = {2, 3, 40};
    int x = in_f32(g, "x", 3, d);
    int s = add_unary(g, KILN_OP_Sigmoid, "sig", x, NULL);
    int silu = add_binary(g, KILN_OP_Mul, "mul", x, s);
    int hs = add_unary(g, KILN_OP_HardSwish, "hswish", silu, NULL);
    mark_output(g, add_binary(g, KILN_OP_Add, "add", hs, add_scalar(g, "one", 1.0f)));
    kiln_engine *e = check_fused(g, 0);
    CHECK(e && e->graph->n_nodes == 1 && count_op(e, KILN_OP_Pointwise) == 1);
    CHECK(find_layer(e, "sig+mul+hswish+add"));
    const kiln_pw_attrs *at = pw_of(e, 0);
    CHECK(at && at->n_in == 1 && at->n_out == 1 && at->n_instr == 4 && at->n_regs <= 3);
    CHECK(at && at->instr[3].op == KILN_PW_ADD && at->instr[3].imm == 2 && at->instr[3].p0 == 1.0f);
    /* the engine file keeps the program; a damaged (and resealed) one is refused on load */
    void *buf = NULL;
    size_t size = 0;
    CHECK_OK(kiln_engine_serialize(e, &buf, &size));
    kiln_engine *e2 = NULL;
    CHECK_OK(kiln_engine_load_memory(buf, size, &e2));
    const kiln_pw_attrs *at2 = pw_of(e2, 0);
    CHECK(at && at2 && !memcmp(at, at2, sizeof *at));
    kiln_engine_free(e2);
    unsigned char *f = buf, *hit = NULL;
    for (size_t i = 0; at && i + sizeof *at <= size && !hit; i += 8)
        if (!memcmp(f + i, at, sizeof *at)) hit = f + i;
    CHECK(hit != NULL);
    if (hit) {
        hit[offsetof(kiln_pw_attrs, instr) + offsetof(kiln_pw_instr, a) + sizeof(kiln_pw_instr)] = 200;
        kiln__put_le64(f + KILN_FMT_OFF_CHECKSUM, kiln__format_checksum(f, size));
        e2 = NULL;
        CHECK_ERR(kiln_engine_load_memory(buf, size, &e2), KILN_ERR_FORMAT, "reads register 200");
        CHECK(e2 == NULL);
    }
    kiln_free(buf);
    kiln_engine_free(e);
}

TEST(test_diamond_and_multi_output) {
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(&g));
    int64_t d[2] = {7, 33};
    int x = in_f32(g, "x", 2, d);
    int a = add_unary(g, KILN_OP_Neg, "neg", x, NULL);
    /* a is also read outside (a reduction, placed between the group's
     * nodes: the plan is sorted again), b is a graph output; mul reads the
     * reduction, which depends on the group: it stays apart */
    kiln_reduce_attrs ra = {.keepdims = 1};
    int r = add_node(g, KILN_OP_ReduceSum, "sum", 1, (int[]){a}, &ra);
    int b = add_unary(g, KILN_OP_Exp, "exp", x, NULL);
    int c = add_binary(g, KILN_OP_Add, "add", a, b);
    mark_output(g, add_binary(g, KILN_OP_Mul, "mul", c, r));
    mark_output(g, b);
    kiln_engine *e = check_fused(g, 1e-6);
    CHECK(e && count_op(e, KILN_OP_Pointwise) == 1 && count_op(e, KILN_OP_Mul) == 1);
    CHECK(find_layer(e, "neg+exp+add"));
    /* {neg, exp, add} with neg's and exp's values as extra outputs */
    const kiln_pw_attrs *at = pw_of(e, 0);
    CHECK(at && at->n_in == 1 && at->n_out == 3);
    kiln_engine_free(e);
}

TEST(test_broadcast_inputs) {
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(&g));
    int64_t d[4] = {2, 3, 4, 8}, bd[3] = {3, 1, 1}, sd[1] = {8};
    int x = in_f32(g, "x", 4, d);
    /* a [1,1,1,1,1] constant gives the output its rank 5: it is an input,
     * not an immediate */
    int64_t one[5] = {1, 1, 1, 1, 1};
    int y = add_binary(g, KILN_OP_Sub, "sub", x, add_const(g, "c", 5, one, 1, 2));
    y = add_binary(g, KILN_OP_Add, "bias", y, add_const(g, "b", 3, bd, -1, 1));
    y = add_unary(g, KILN_OP_Relu, "relu", y, NULL);
    y = add_binary(g, KILN_OP_Mul, "scale", y, add_const(g, "s", 1, sd, 0.5f, 2));
    mark_output(g, y);
    kiln_engine *e = check_fused(g, 0);
    CHECK(e && e->graph->n_nodes == 1 && count_op(e, KILN_OP_Pointwise) == 1);
    const kiln_pw_attrs *at = pw_of(e, 0);
    CHECK(at && at->n_in == 4); /* x, b, s and the rank-5 constant, which sets the output's rank */
    kiln_engine_free(e);
}

TEST(test_split_by_other_layers) {
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(&g));
    int64_t d[2] = {6, 6};
    int x = in_f32(g, "x", 2, d);
    int a = add_unary(g, KILN_OP_Relu, "relu", x, NULL);
    kiln_transpose_attrs ta = {.n_perm = 2, .perm = {1, 0}};
    int t = add_unary(g, KILN_OP_Transpose, "tr", a, &ta);
    int s = add_unary(g, KILN_OP_Sigmoid, "sig", t, NULL);
    mark_output(g, add_binary(g, KILN_OP_Mul, "mul", s, t));
    kiln_engine *e = check_fused(g, 0);
    /* relu alone stays Relu; sig + mul fuse */
    CHECK(e && count_op(e, KILN_OP_Pointwise) == 1 && count_op(e, KILN_OP_Relu) == 1 &&
          count_op(e, KILN_OP_Transpose) == 1);
    CHECK(find_layer(e, "sig+mul"));
    kiln_engine_free(e);
}

/* relu -> MatMul -> add(relu, matmul): joining add to relu would make a
 * cycle through the MatMul */
TEST(test_no_cycle) {
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(&g));
    int64_t d[2] = {5, 5};
    int x = in_f32(g, "x", 2, d);
    int a = add_unary(g, KILN_OP_Relu, "relu", x, NULL);
    int b = add_unary(g, KILN_OP_Neg, "neg", a, NULL);
    int mm = add_binary(g, KILN_OP_MatMul, "mm", b, add_const(g, "w", 2, d, -1, 1));
    mark_output(g, add_binary(g, KILN_OP_Add, "add", b, mm));
    kiln_engine *e = check_fused(g, 1e-6);
    CHECK(e && count_op(e, KILN_OP_Pointwise) == 1 && find_layer(e, "relu+neg"));
    CHECK(e && count_op(e, KILN_OP_Add) + count_op(e, KILN_OP_FusedMatMul) >= 1);
    kiln_engine_free(e);
}

TEST(test_shape_and_dtype_boundaries) {
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(&g));
    int64_t d[2] = {4, 9}, cd[2] = {4, 1};
    int x = in_f32(g, "x", 2, d);
    int c = in_f32(g, "c", 2, cd);
    /* sigmoid(c) is [4,1]: a smaller shape, not in the [4,9] group */
    int s = add_unary(g, KILN_OP_Sigmoid, "sig", c, NULL);
    int m = add_binary(g, KILN_OP_Mul, "mul", x, s);
    int r = add_unary(g, KILN_OP_Abs, "abs", m, NULL);
    /* a Cast to int32 ends the group; Cast to float16 and back stays in */
    kiln_ew_cast_attrs ci = {.to = KILN_DTYPE_INT32}, ch = {.to = KILN_DTYPE_FLOAT16}, cf = {.to = KILN_DTYPE_FLOAT32};
    mark_output(g, add_unary(g, KILN_OP_Cast, "toint", r, &ci));
    int h = add_unary(g, KILN_OP_Cast, "tohalf", r, &ch);
    mark_output(g, add_unary(g, KILN_OP_Cast, "tofloat", h, &cf));
    kiln_engine *e = check_fused(g, 0);
    CHECK(e && count_op(e, KILN_OP_Pointwise) == 1 && count_op(e, KILN_OP_Sigmoid) == 1 &&
          count_op(e, KILN_OP_Cast) == 1);
    CHECK(find_layer(e, "mul+abs+tohalf+tofloat"));
    const kiln_pw_attrs *at = pw_of(e, 0);
    CHECK(at && at->n_in == 2 && at->n_out == 2 && at->instr[2].op == KILN_PW_ROUND_F16);
    kiln_engine_free(e);
}

/* BERT's mask preparation and the SDPA export's NaN clean-up: an int64
 * input cast to float, Where over IsNaN, bool in and out */
TEST(test_masks) {
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(&g));
    int64_t d[2] = {3, 16};
    int mask = in_f32(g, "mask", 2, d);
    g->values[mask].info.dtype = KILN_DTYPE_INT64;
    int s = in_f32(g, "scores", 2, d);
    kiln_ew_cast_attrs cf = {.to = KILN_DTYPE_FLOAT32}, cb = {.to = KILN_DTYPE_BOOL};
    int m = add_unary(g, KILN_OP_Cast, "cast", mask, &cf);
    m = add_binary(g, KILN_OP_Sub, "sub", add_scalar(g, "one", 1.0f), m);
    m = add_binary(g, KILN_OP_Mul, "mul", m, add_scalar(g, "big", -10000.0f));
    int y = add_binary(g, KILN_OP_Add, "add", s, m);
    int nan = add_unary(g, KILN_OP_IsNaN, "isnan", y, NULL);
    y = add_node(g, KILN_OP_Where, "where", 3, (int[]){nan, add_scalar(g, "zero", 0.0f), y}, NULL);
    mark_output(g, y);
    int nb = add_unary(g, KILN_OP_Not, "not", add_unary(g, KILN_OP_Cast, "tobool", mask, &cb), NULL);
    mark_output(g, nb);
    kiln_engine *e = check_fused(g, 0);
    CHECK(e && e->graph->n_nodes <= 2 && count_op(e, KILN_OP_Pointwise) >= 1);
    const kiln_pw_attrs *at = pw_of(e, 0);
    CHECK(at && at->in_dtype[0] == KILN_DTYPE_INT64);
    kiln_engine_free(e);
}

/* shrink_constants: a constant operand that repeats along its leading axes
 * (BERT's token-type embedding, folded to [B, S, E]) is stored once per
 * repetition, broadcast by its layer: the same results, 6 times smaller
 * here; a constant that does not repeat, or that another layer reads too,
 * keeps its shape; with the pass off every one does. */
static const kiln_value *const_of(const kiln_engine *e, const char *name) {
    int v = e ? kiln__graph_find_value(e->graph, name) : -1;
    return v >= 0 ? &e->graph->values[v] : NULL;
}

static kiln_graph *shrink_graph(void) {
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(&g));
    int64_t d[3] = {2, 3, 40};
    int x = in_f32(g, "x", 3, d);
    float rep[240], other[240];
    for (int i = 0; i < 240; i++) {
        rep[i] = (float)(i % 40) * 0.25f - 3.0f;
        other[i] = (float)(i % 41) * 0.5f; /* (not a repetition of 40) */
    }
    int c = add_val(g, "rep"), o = add_val(g, "other");
    CHECK_OK(kiln__value_set_const(&g->values[c], KILN_DTYPE_FLOAT32, 3, d, rep));
    CHECK_OK(kiln__value_set_const(&g->values[o], KILN_DTYPE_FLOAT32, 3, d, other));
    int a = add_binary(g, KILN_OP_Add, "add", x, c);
    mark_output(g, a);
    mark_output(g, add_binary(g, KILN_OP_Sub, "sub", o, x));
    return g;
}

TEST(test_shrink_constants) {
    kiln_engine *e = check_fused(shrink_graph(), 0);
    const kiln_value *c = const_of(e, "rep"), *o = const_of(e, "other");
    CHECK(c && c->info.rank == 3 && c->info.dims[0] == 1 && c->info.dims[1] == 1 && c->info.dims[2] == 40);
    CHECK(c && c->nbytes == 40 * sizeof(float) && ((const float *)c->data)[39] == 39 * 0.25f - 3.0f);
    CHECK(o && o->info.dims[0] == 2 && o->info.dims[1] == 3 && o->info.dims[2] == 40);
    kiln_engine_free(e);
    kiln_model *m = model_of(shrink_graph());
    kiln_builder *b = NULL;
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_disable_pass(b, "shrink_constants"));
    e = NULL;
    CHECK_OK(kiln_build(b, m, &e));
    c = const_of(e, "rep");
    CHECK(c && c->info.dims[0] == 2 && c->info.dims[1] == 3);
    kiln_engine_free(e);
    kiln_builder_free(b);
    kiln_model_free(m);
}

TEST(test_switch_off) {
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(&g));
    int64_t d[1] = {10};
    int x = in_f32(g, "x", 1, d);
    mark_output(g, add_unary(g, KILN_OP_Tanh, "t", add_unary(g, KILN_OP_Exp, "e", x, NULL), NULL));
    kiln_model *m = model_of(g);
    kiln_engine *e = build_pw(m, 1, true);
    CHECK(e && count_op(e, KILN_OP_Pointwise) == 0 && e->graph->n_nodes == 2);
    kiln_engine_free(e);
    e = build_pw(m, 1, false);
    CHECK(e && count_op(e, KILN_OP_Pointwise) == 1);
    kiln_engine_free(e);
    kiln_model_free(m);
}

/* Every activation the pass knows, in one group, against the unfused ops
 * (float32: the same kernels, so equal bit for bit). */
TEST(test_every_unary) {
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(&g));
    int64_t d[1] = {300};
    int x = in_f32(g, "x", 1, d);
    const int ops[] = {KILN_OP_Neg, KILN_OP_Abs, KILN_OP_Sigmoid, KILN_OP_Tanh, KILN_OP_Erf, KILN_OP_Relu,
                       KILN_OP_HardSwish, KILN_OP_Softplus, KILN_OP_Softsign, KILN_OP_Mish, KILN_OP_Floor,
                       KILN_OP_Ceil, KILN_OP_Exp, KILN_OP_Sin, KILN_OP_Atan};
    int y = x;
    char nm[32];
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        snprintf(nm, sizeof nm, "u%zu", i);
        y = add_unary(g, ops[i], nm, y, NULL);
    }
    kiln_ew_act_attrs hs = {.alpha = 0.2f, .beta = 0.5f}, lr = {.alpha = 0.1f}, se = {.alpha = 1.67f, .gamma = 1.05f};
    y = add_unary(g, KILN_OP_HardSigmoid, "hsig", add_binary(g, KILN_OP_Add, "mix", y, x), &hs);
    y = add_unary(g, KILN_OP_LeakyRelu, "lrelu", add_binary(g, KILN_OP_Sub, "mix2", x, y), &lr);
    y = add_unary(g, KILN_OP_Selu, "selu", y, &se);
    y = add_node(g, KILN_OP_Clip, "clip", 3, (int[]){y, add_scalar(g, "lo", -0.5f), add_scalar(g, "hi", 0.75f)}, NULL);
    y = add_node(g, KILN_OP_Max, "max", 3, (int[]){y, x, add_scalar(g, "z", 0.1f)}, NULL);
    y = add_node(g, KILN_OP_Mean, "mean", 2, (int[]){y, x}, NULL);
    y = add_binary(g, KILN_OP_Pow, "sq", y, add_scalar(g, "two", 2.0f));
    mark_output(g, y);
    kiln_engine *e = check_fused(g, 0);
    CHECK(e && e->graph->n_nodes == 1 && count_op(e, KILN_OP_Pointwise) == 1);
    kiln_engine_free(e);
}

/* Random graphs of elementwise nodes over broadcastable shapes, cut by
 * reductions, MatMuls and fp16 round trips, with random outputs: the pass
 * must keep them acyclic and computing what the unfused plan computes. */
TEST(test_random_graphs) {
    static const int64_t shapes[4][2] = {{4, 6}, {1, 6}, {4, 1}, {6, 6}};
    int fused = 0;
    for (int iter = 0; iter < 150; iter++) {
        kiln_graph *g;
        CHECK_OK(kiln__graph_create(&g));
        gb_rng_state = 1000 + (uint64_t)iter;
        int vals[40], nv = 0;
        char nm[32];
        for (int i = 0; i < 3; i++) {
            snprintf(nm, sizeof nm, "in%d", i);
            int si = (int)((frand() + 1) * 2) & 3;
            vals[nv++] = in_f32(g, nm, 2, shapes[si]);
        }
        for (int k = 0; k < 14; k++) {
            int a = vals[(int)((frand() + 1) * 0.5 * nv) % nv], b = vals[(int)((frand() + 1) * 0.5 * nv) % nv];
            const kiln_tinfo *ta = &g->values[a].info, *tb = &g->values[b].info;
            bool bc = true; /* a and b broadcast together */
            for (int d = 0; d < 2; d++)
                bc = bc && (ta->dims[d] == tb->dims[d] || ta->dims[d] == 1 || tb->dims[d] == 1);
            int r = (int)((frand() + 1) * 6) % 12;
            snprintf(nm, sizeof nm, "n%d", k);
            int v;
            kiln_ew_cast_attrs ch = {.to = KILN_DTYPE_FLOAT16}, cf = {.to = KILN_DTYPE_FLOAT32};
            kiln_reduce_attrs ra = {.keepdims = 1};
            if (!bc && r >= 4) r = 0;
            switch (r) {
            case 0: v = add_unary(g, KILN_OP_Sigmoid, nm, a, NULL); break;
            case 1: v = add_unary(g, KILN_OP_Neg, nm, a, NULL); break;
            case 2: v = add_unary(g, KILN_OP_Tanh, nm, a, NULL); break;
            case 3: {
                char n2[40];
                snprintf(n2, sizeof n2, "%s_h", nm);
                v = add_unary(g, KILN_OP_Cast, nm, add_unary(g, KILN_OP_Cast, n2, a, &ch), &cf);
                break;
            }
            case 4: v = add_binary(g, KILN_OP_Add, nm, a, b); break;
            case 5: v = add_binary(g, KILN_OP_Mul, nm, a, b); break;
            case 6: v = add_binary(g, KILN_OP_Sub, nm, a, b); break;
            case 7: v = add_node(g, KILN_OP_Max, nm, 2, (int[]){a, b}, NULL); break;
            case 8: {
                char n2[40];
                snprintf(n2, sizeof n2, "%s_c", nm);
                v = add_node(g, KILN_OP_Where, nm, 3, (int[]){add_binary(g, KILN_OP_Greater, n2, a, b), a, b}, NULL);
                break;
            }
            case 9: {
                char n2[40];
                snprintf(n2, sizeof n2, "%s_e", nm);
                v = add_binary(g, KILN_OP_Div, nm, a, add_unary(g, KILN_OP_Exp, n2, b, NULL));
                break;
            }
            case 10: v = add_node(g, KILN_OP_ReduceSum, nm, 1, (int[]){a}, &ra); break;
            default:
                v = ta->dims[1] == 6 && tb->dims[0] == 6 && tb->dims[1] == 6 ? add_binary(g, KILN_OP_MatMul, nm, a, b)
                                                                             : add_unary(g, KILN_OP_Abs, nm, a, NULL);
                break;
            }
            if (kiln__graph_infer(g) != KILN_OK) {
                fprintf(stderr, "  random graph %d: %s\n", iter, kiln_last_error());
                CHECK(false);
                break;
            }
            if (nv < 40) vals[nv++] = v;
        }
        mark_output(g, vals[nv - 1]);
        for (int k = 3; k < nv - 1; k++)
            if (frand() > 0.6f) mark_output(g, vals[k]);
        kiln_engine *e = check_fused(g, 1e-6);
        fused += count_op(e, KILN_OP_Pointwise) > 0;
        kiln_engine_free(e);
    }
    CHECK(fused > 100); /* most graphs have a group */
}

/* ---- the kernel: mixed dtypes, broadcasting ----------------------------------- */

TEST(test_kernel_mixed_dtypes) {
    /* y (bf16) = where(c (bool), x (f16) * 2, -x); z (bool) = y > 0 */
    kiln_pw_attrs at;
    memset(&at, 0, sizeof at);
    at.n_in = 2, at.n_out = 2, at.n_regs = 4, at.n_instr = 4;
    at.in_dtype[0] = KILN_DTYPE_FLOAT16, at.in_dtype[1] = KILN_DTYPE_BOOL;
    at.out_dtype[0] = KILN_DTYPE_BFLOAT16, at.out_dtype[1] = KILN_DTYPE_BOOL;
    at.instr[0] = (kiln_pw_instr){.op = KILN_PW_MUL, .dst = 2, .a = 0, .imm = 2, .p0 = 2.0f};
    at.instr[1] = (kiln_pw_instr){.op = KILN_PW_NEG, .dst = 3, .a = 0};
    at.instr[2] = (kiln_pw_instr){.op = KILN_PW_WHERE, .dst = 0, .a = 1, .b = 2, .c = 3};
    at.instr[3] = (kiln_pw_instr){.op = KILN_PW_GT, .dst = 1, .a = 0, .imm = 2, .p0 = 0.0f};
    at.out_reg[0] = 0, at.out_reg[1] = 1;
    const kiln_op_def *op = kiln__op_by_id(KILN_OP_Pointwise);
    CHECK_OK(op->validate(op, &at, "pw"));
    enum { R = 5, C = 12 };
    uint16_t x[R * C], y[R * C];
    uint8_t cnd[C], z[R * C];
    for (int i = 0; i < R * C; i++) x[i] = kiln__f32_to_f16((float)(i - 30) * 0.25f);
    for (int j = 0; j < C; j++) cnd[j] = j % 3 == 0;
    kiln_tensor tx = {KILN_DTYPE_FLOAT16, 2, {R, C}, x}, tc = {KILN_DTYPE_BOOL, 1, {C}, cnd};
    kiln_tensor ty = {KILN_DTYPE_BFLOAT16, 2, {R, C}, y}, tz = {KILN_DTYPE_BOOL, 2, {R, C}, z};
    const kiln_tensor *ins[2] = {&tx, &tc};
    kiln_tensor *outs[2] = {&ty, &tz};
    kiln_kernel_args a = {.op = op, .attrs = &at, .node_name = "pw", .n_in = 2, .n_out = 2, .in = ins, .out = outs};
    CHECK_OK(op->cpu(&a));
    int bad = 0;
    for (int i = 0; i < R * C; i++) {
        float v = kiln__f16_to_f32(x[i]);
        float want = cnd[i % C] ? v * 2.0f : -v;
        bad += kiln__bf16_to_f32(y[i]) != kiln__bf16_to_f32(kiln__f32_to_bf16(want));
        bad += z[i] != (kiln__bf16_to_f32(kiln__f32_to_bf16(want)) > 0.0f);
    }
    CHECK(bad == 0);
}

/* ---- validate: damaged programs are refused ------------------------------------- */

TEST(test_validate_hostile) {
    const kiln_op_def *op = kiln__op_by_id(KILN_OP_Pointwise);
    kiln_pw_attrs good;
    memset(&good, 0, sizeof good);
    good.n_in = 1, good.n_out = 1, good.n_regs = 2, good.n_instr = 2;
    good.in_dtype[0] = KILN_DTYPE_FLOAT32, good.out_dtype[0] = KILN_DTYPE_FLOAT32;
    good.instr[0] = (kiln_pw_instr){.op = KILN_PW_SIGMOID, .dst = 1, .a = 0};
    good.instr[1] = (kiln_pw_instr){.op = KILN_PW_MUL, .dst = 0, .a = 0, .b = 1};
    good.out_reg[0] = 0;
    CHECK_OK(op->validate(op, &good, "pw"));
    kiln_pw_attrs b;
#define BAD(stmt, what)                                              \
    do {                                                             \
        b = good;                                                    \
        stmt;                                                        \
        CHECK_ERR(op->validate(op, &b, "pw"), KILN_ERR_MODEL, what); \
    } while (0)
    BAD(b.n_in = 0, "n_in");
    BAD(b.n_in = 9, "n_in");
    BAD(b.n_out = 5, "n_out");
    BAD(b.n_instr = 49, "n_instr");
    BAD(b.n_instr = 0, "n_instr");
    BAD(b.n_regs = 17, "n_regs");
    BAD(b.n_regs = 0, "n_regs");
    BAD(b.in_dtype[0] = KILN_DTYPE_FLOAT64, "cannot read");
    BAD(b.in_dtype[1] = KILN_DTYPE_FLOAT32, "cannot read");
    BAD(b.out_dtype[0] = KILN_DTYPE_INT32, "cannot write");
    BAD(b.out_dtype[2] = KILN_DTYPE_FLOAT32, "not zero");
    BAD(b.out_reg[0] = 7, "does not write");
    BAD(b.out_reg[0] = -1, "does not write");
    BAD(b.instr[0].op = 0, "unknown opcode");
    BAD(b.instr[0].op = 200, "unknown opcode");
    BAD(b.instr[0].op = KILN_PW_UNARY_END, "unknown opcode");
    BAD(b.instr[1].b = 200, "out of range");
    BAD(b.instr[1].b = 5, "out of range");
    BAD(b.instr[0].a = 1, "not written before");
    BAD(b.instr[0].dst = 2, "writes register");
    BAD(b.instr[0].b = 1, "unused");
    BAD(b.instr[1].c = 1, "unused");
    BAD(b.instr[1].imm = 3, "constant slot");
    BAD(b.instr[0].reserved[1] = 1, "reserved");
    BAD(b.instr[5].op = KILN_PW_ADD, "past the program");
    BAD((b.instr[0].op = KILN_PW_CELU, b.instr[0].p0 = 0), "alpha");
    /* every single-byte change of the good program is either accepted or
     * refused; accepted ones run without reading outside the registers
     * (ASan builds check the reads) */
    float xin[7] = {0, 1, -2, 3, NAN, -INFINITY, 0.5f}, yout[7];
    for (size_t off = 0; off < sizeof good; off++)
        for (int v = 0; v < 256; v += 17) {
            b = good;
            ((unsigned char *)&b)[off] = (unsigned char)v;
            if (op->validate(op, &b, "pw") != KILN_OK) {
                kiln__clear_error();
                continue;
            }
            if (b.n_in != 1 || b.n_out != 1 || b.in_dtype[0] != KILN_DTYPE_FLOAT32) continue;
            kiln_tensor tx = {KILN_DTYPE_FLOAT32, 1, {7}, xin}, ty = {(kiln_dtype)b.out_dtype[0], 1, {7}, yout};
            const kiln_tensor *ins[1] = {&tx};
            kiln_tensor *outs[1] = {&ty};
            kiln_kernel_args a = {.op = op, .attrs = &b, .node_name = "pw", .n_in = 1, .n_out = 1, .in = ins, .out = outs};
            CHECK(op->cpu(&a) == KILN_OK);
        }
#undef BAD
}

int main(void) {
    RUN(test_chain);
    RUN(test_diamond_and_multi_output);
    RUN(test_broadcast_inputs);
    RUN(test_split_by_other_layers);
    RUN(test_no_cycle);
    RUN(test_shape_and_dtype_boundaries);
    RUN(test_masks);
    RUN(test_switch_off);
    RUN(test_shrink_constants);
    RUN(test_every_unary);
    RUN(test_random_graphs);
    RUN(test_kernel_mixed_dtypes);
    RUN(test_validate_hostile);
    return test_summary();
}
