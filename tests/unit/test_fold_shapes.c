/* test_fold_shapes.c -- constant folding of shape computations that only
 * become known while folding: x[1,6] -> S = Shape(x) -> R = Reshape(x, S)
 * -> T = Shape(R) -> y = Reshape(R, T). The first inference pass cannot
 * know R's dims (its shape input is not a constant yet); once S is folded,
 * the fold pass infers R again, so T folds too and no Shape node is left
 * to run (on a GPU engine it would run on the CPU). */
#include "test.h"

#include "graph_build.h"
#include "ir/ir.h"
#include "ops/tensor_internal.h"
#include "runtime/engine.h"

#include <stdlib.h>

static int count_live(const kiln_graph *g, int op) {
    int k = 0;
    for (int i = 0; i < g->n_nodes; i++) k += !g->nodes[i].dead && g->nodes[i].op_id == op;
    return k;
}

TEST(shape_of_reshape_folds) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    if (!g) return;
    int x = add_val(g, "x");
    g->values[x].info.dtype = KILN_DTYPE_FLOAT32;
    g->values[x].info.rank = 2;
    g->values[x].info.dims[0] = 1;
    g->values[x].info.dims[1] = 6;
    g->values[x].flags |= KILN_VALUE_INPUT;
    if (kiln__grow((void **)&g->inputs, &g->cap_inputs, 1, sizeof(int)) != KILN_OK) abort();
    g->inputs[g->n_inputs++] = x;
    kiln_shape_attrs sa = {.start = 0, .end = 0, .has_end = 0};
    kiln_reshape_attrs ra = {.allowzero = 0};
    int s = add_node(g, KILN_OP_Shape, "shape_x", 1, &x, &sa);
    int r = add_node(g, KILN_OP_Reshape, "reshape_r", 2, (int[]){x, s}, &ra);
    int t = add_node(g, KILN_OP_Shape, "shape_r", 1, &r, &sa);
    int y = add_node(g, KILN_OP_Reshape, "reshape_y", 2, (int[]){r, t}, &ra);
    g->values[y].flags |= KILN_VALUE_OUTPUT;
    if (kiln__grow((void **)&g->outputs, &g->cap_outputs, 1, sizeof(int)) != KILN_OK) abort();
    g->outputs[g->n_outputs++] = y;
    kiln__graph_link(g);
    CHECK_OK(kiln__graph_infer(g));
    /* one inference pass: R's dims are unknown, so T cannot fold yet */
    CHECK(g->values[r].info.rank == 2 && g->values[r].info.dims[0] < 0);
    CHECK_OK(kiln__pass_fold_constants(g));
    CHECK(count_live(g, KILN_OP_Shape) == 0);
    CHECK(g->values[t].flags & KILN_VALUE_CONST);
    CHECK(g->values[r].info.dims[0] == 1 && g->values[r].info.dims[1] == 6);
    CHECK_OK(kiln__pass_dce(g));
    CHECK_OK(kiln__graph_infer(g));
    CHECK(g->values[y].info.rank == 2 && g->values[y].info.dims[0] == 1 &&
          g->values[y].info.dims[1] == 6);
    CHECK(count_live(g, KILN_OP_Reshape) == 2);
    kiln__graph_free(g);
}

/* y = Expand(2.5, shape) + x. With shape [17,1024,1024] the Expand's output
 * (68 MiB) is over the folding limit: the Expand stays in the plan, the
 * engine stays small, and the run still computes it. With shape [4,4] it
 * folds into a constant. */
static void expand_case(const int64_t *shape, bool big) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    if (!g) return;
    int x = add_input(g, "x", 1, (int64_t[]){1});
    int c = add_scalar(g, "c", 2.5f);
    int sh = add_val(g, "shape");
    CHECK_OK(kiln__value_set_const(&g->values[sh], KILN_DTYPE_INT64, 1, (int64_t[]){3}, shape));
    int e = add_node(g, KILN_OP_Expand, "expand", 2, (int[]){c, sh}, NULL);
    int y = add_binary(g, KILN_OP_Add, "add", e, x);
    mark_output(g, y);
    kiln__graph_link(g);
    kiln_model *m = model_of(g);
    kiln_builder *b = NULL;
    kiln_engine *en = NULL;
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_threads(b, 1));
    CHECK_OK(kiln_build(b, m, &en));
    if (en) {
        CHECK(count_op(en, KILN_OP_Expand) == (big ? 1 : 0));
        void *bytes = NULL;
        size_t size = 0;
        CHECK_OK(kiln_engine_serialize(en, &bytes, &size));
        CHECK(size < (big ? (size_t)1 << 20 : (size_t)1 << 16));
        kiln_free(bytes);
        kiln_context *ctx = NULL;
        CHECK_OK(kiln_context_create(en, &ctx));
        float xv = 0.25f;
        CHECK_OK(kiln_context_set_input(ctx, "x", KILN_DTYPE_FLOAT32, 1, (int64_t[]){1}, &xv));
        CHECK_OK(kiln_context_run(ctx));
        const void *out = NULL;
        int rank = 0;
        int64_t dims[8];
        CHECK_OK(kiln_context_get_output(ctx, "add_out", NULL, &rank, dims, &out));
        int64_t n = kiln__numel(3, shape);
        CHECK(rank == 3 && dims[0] == shape[0] && dims[1] == shape[1] && dims[2] == shape[2]);
        const float *o = out;
        if (o) CHECK(o[0] == 2.75f && o[n / 2] == 2.75f && o[n - 1] == 2.75f);
        kiln_context_free(ctx);
        kiln_engine_free(en);
    }
    kiln_builder_free(b);
    kiln_model_free(m);
}

TEST(large_constants_not_folded) {
    expand_case((int64_t[]){17, 1024, 1024}, true);
    expand_case((int64_t[]){4, 2, 2}, false);
}

/* An int64 constant: a scalar (rank 0) or one element of rank 1. */
static int add_i64(kiln_graph *g, const char *name, int rank, int64_t v) {
    int c = add_val(g, name);
    CHECK_OK(kiln__value_set_const(&g->values[c], KILN_DTYPE_INT64, rank, (int64_t[]){1}, &v));
    return c;
}

/* Whether value v is an int64 constant equal to want[0..n). */
static bool const_is(const kiln_graph *g, int v, int n, const int64_t *want) {
    const kiln_value *c = &g->values[v];
    if (!(c->flags & KILN_VALUE_CONST) || c->info.dtype != KILN_DTYPE_INT64 || kiln__numel(c->info.rank, c->info.dims) != n)
        return false;
    for (int i = 0; i < n; i++)
        if (((const int64_t *)c->data)[i] != want[i]) return false;
    return true;
}

/* x [batch, 7, 5] with a symbolic batch: Gather and Slice of Shape(x) that
 * select known dims fold (Gather 1, Gather -1, Slice 1:3, Gather 0 of
 * Shape(x, start=1)); those selecting the batch (Gather 0, Slice 0:2) stay,
 * as does Gather 1 of Shape(y) where y's dim 1 is unknown. */
TEST(known_dims_of_symbolic_shape_fold) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    if (!g) return;
    int sym;
    CHECK_OK(kiln__graph_add_symbol(g, "batch", &sym));
    int x = add_input(g, "x", 3, (int64_t[]){KILN_DIM_SYM(sym), 7, 5});
    int y = add_input(g, "y", 2, (int64_t[]){4, KILN_DIM_UNKNOWN});
    kiln_shape_attrs all = {0}, from1 = {.start = 1};
    kiln_axis_attrs ax0 = {.axis = 0};
    int s = add_node(g, KILN_OP_Shape, "shape_x", 1, &x, &all);
    int s1 = add_node(g, KILN_OP_Shape, "shape_x_1", 1, &x, &from1);
    int sy = add_node(g, KILN_OP_Shape, "shape_y", 1, &y, &all);
    int i0 = add_i64(g, "i0", 0, 0), i1 = add_i64(g, "i1", 0, 1), im1 = add_i64(g, "im1", 0, -1);
    int one = add_i64(g, "one", 1, 1), three = add_i64(g, "three", 1, 3);
    int z = add_i64(g, "z", 1, 0), two = add_i64(g, "two", 1, 2);
    int g1 = add_node(g, KILN_OP_Gather, "g1", 2, (int[]){s, i1}, &ax0);
    int gm1 = add_node(g, KILN_OP_Gather, "gm1", 2, (int[]){s, im1}, &ax0);
    int g0 = add_node(g, KILN_OP_Gather, "g0", 2, (int[]){s, i0}, &ax0);
    int s13 = add_node(g, KILN_OP_Slice, "s13", 3, (int[]){s, one, three}, NULL);
    int s02 = add_node(g, KILN_OP_Slice, "s02", 3, (int[]){s, z, two}, NULL);
    int h0 = add_node(g, KILN_OP_Gather, "h0", 2, (int[]){s1, i0}, &ax0);
    int gy = add_node(g, KILN_OP_Gather, "gy", 2, (int[]){sy, i1}, &ax0);
    int gy0 = add_node(g, KILN_OP_Gather, "gy0", 2, (int[]){sy, i0}, &ax0);
    int outs[] = {g1, gm1, g0, s13, s02, h0, gy, gy0};
    for (int i = 0; i < 8; i++) mark_output(g, outs[i]);
    kiln__graph_link(g);
    CHECK_OK(kiln__graph_infer(g));
    CHECK_OK(kiln__pass_fold_constants(g));
    CHECK(const_is(g, g1, 1, (int64_t[]){7}));
    CHECK(const_is(g, gm1, 1, (int64_t[]){5}));
    CHECK(const_is(g, s13, 2, (int64_t[]){7, 5}));
    CHECK(const_is(g, h0, 1, (int64_t[]){7}));
    CHECK(const_is(g, gy0, 1, (int64_t[]){4}));
    CHECK(!(g->values[g0].flags & KILN_VALUE_CONST));
    CHECK(!(g->values[s02].flags & KILN_VALUE_CONST));
    CHECK(!(g->values[gy].flags & KILN_VALUE_CONST));
    CHECK(count_live(g, KILN_OP_Gather) == 2 && count_live(g, KILN_OP_Slice) == 1);
    kiln__graph_free(g);
}

/* An int64 constant vector. */
static int add_vec(kiln_graph *g, const char *name, int n, const int64_t *v) {
    int c = add_val(g, name);
    CHECK_OK(kiln__value_set_const(&g->values[c], KILN_DTYPE_INT64, 1, (int64_t[]){n}, v));
    return c;
}

static bool dims_are(const kiln_graph *g, int v, int rank, const int64_t *d) {
    const kiln_tinfo *t = &g->values[v].info;
    if (t->rank != rank) return false;
    for (int i = 0; i < rank; i++)
        if (t->dims[i] != d[i]) return false;
    return true;
}

/* kiln__pass_shape_values (src/passes/shape_values.c) on x [B, 7, 5] with a
 * symbolic B and u [4, ?]; b = Unsqueeze(Gather(Shape(x), 0)) = [B]:
 *   Expand(c [1, 3, 1], Where(Equal([B, -1, 4], -1), 1, [B, -1, 4])) -> [B, 3, 4]
 *   (torch's expand(B, -1, 4));
 *   Reshape(x, [B, -1]) -> [B, 35]; Reshape(x, Mul([B], 1) ++ [7, -1]) -> [B, 7, 5];
 *   Range(0, Gather(Shape(x), 0), 1) -> [B]; ConstantOfShape([B] ++ [3]) -> [B, 3];
 * and what must stay unknown:
 *   Expand(u, [B, 4, B]) -> [B, 4, ?] (u's unknown dim may be 5 when B is 1);
 *   Reshape(x, [-1, 5]) -> [?, 5] (7B is no symbol); Reshape(x, Mul([B], 2) ++ [-1]) -> [?, ?]. */
TEST(shape_values) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    if (!g) return;
    int sym;
    CHECK_OK(kiln__graph_add_symbol(g, "B", &sym));
    const int64_t B = KILN_DIM_SYM(sym), U = KILN_DIM_UNKNOWN;
    int x = add_input(g, "x", 3, (int64_t[]){B, 7, 5});
    int u = add_input(g, "u", 2, (int64_t[]){4, U});
    kiln_shape_attrs all = {0};
    kiln_axis_attrs ax0 = {.axis = 0};
    kiln_reshape_attrs ra = {0};
    int sx = add_node(g, KILN_OP_Shape, "sx", 1, &x, &all);
    int i0 = add_i64(g, "i0", 0, 0);
    int gb = add_node(g, KILN_OP_Gather, "gb", 2, (int[]){sx, i0}, &ax0);
    int b = add_node(g, KILN_OP_Unsqueeze, "b", 2, (int[]){gb, add_i64(g, "ax", 1, 0)}, NULL);
    int m1 = add_i64(g, "m1", 0, -1);
    int sh = add_node(g, KILN_OP_Concat, "sh", 2, (int[]){b, add_vec(g, "m14", 2, (int64_t[]){-1, 4})}, &ax0);
    int eq = add_node(g, KILN_OP_Equal, "eq", 2, (int[]){sh, m1}, NULL);
    int ws = add_node(g, KILN_OP_Where, "ws", 3, (int[]){eq, add_vec(g, "ones", 3, (int64_t[]){1, 1, 1}), sh}, NULL);
    int c = add_const(g, "c", 3, (int64_t[]){1, 3, 1}, 0, 1);
    int e1 = add_node(g, KILN_OP_Expand, "e1", 2, (int[]){c, ws}, NULL);
    int r1 = add_node(g, KILN_OP_Reshape, "r1", 2, (int[]){x, add_node(g, KILN_OP_Concat, "t1", 2, (int[]){b, add_vec(g, "m1v", 1, (int64_t[]){-1})}, &ax0)}, &ra);
    int b1 = add_node(g, KILN_OP_Mul, "b1", 2, (int[]){b, add_i64(g, "one", 0, 1)}, NULL);
    int r2 = add_node(g, KILN_OP_Reshape, "r2", 2, (int[]){x, add_node(g, KILN_OP_Concat, "t2", 2, (int[]){b1, add_vec(g, "s7", 2, (int64_t[]){7, -1})}, &ax0)}, &ra);
    int rg = add_node(g, KILN_OP_Range, "rg", 3, (int[]){add_i64(g, "z", 0, 0), gb, add_i64(g, "d1", 0, 1)}, NULL);
    kiln_cos_attrs ca = {.dtype = KILN_DTYPE_FLOAT32};
    int cs = add_node(g, KILN_OP_ConstantOfShape, "cs", 1, (int[]){add_node(g, KILN_OP_Concat, "t3", 2, (int[]){b, add_vec(g, "s3", 1, (int64_t[]){3})}, &ax0)}, &ca);
    int e2 = add_node(g, KILN_OP_Expand, "e2", 2, (int[]){u, add_node(g, KILN_OP_Concat, "t4", 3, (int[]){b, add_vec(g, "s4", 1, (int64_t[]){4}), b}, &ax0)}, NULL);
    int r3 = add_node(g, KILN_OP_Reshape, "r3", 2, (int[]){x, add_vec(g, "s5", 2, (int64_t[]){-1, 5})}, &ra);
    int b2 = add_node(g, KILN_OP_Mul, "b2", 2, (int[]){b, add_i64(g, "two", 0, 2)}, NULL);
    int r4 = add_node(g, KILN_OP_Reshape, "r4", 2, (int[]){x, add_node(g, KILN_OP_Concat, "t5", 2, (int[]){b2, add_vec(g, "m1w", 1, (int64_t[]){-1})}, &ax0)}, &ra);
    int outs[] = {e1, r1, r2, rg, cs, e2, r3, r4};
    for (int i = 0; i < 8; i++) mark_output(g, outs[i]);
    kiln__graph_link(g);
    CHECK_OK(kiln__graph_infer(g));
    /* inference alone: the computed shapes give no symbolic dims */
    CHECK(g->values[e1].info.dims[0] == U && dims_are(g, rg, 1, (int64_t[]){U}));
    CHECK_OK(kiln__pass_shape_values(g));
    CHECK(dims_are(g, e1, 3, (int64_t[]){B, 3, 4}));
    CHECK(dims_are(g, r1, 2, (int64_t[]){B, 35}));
    CHECK(dims_are(g, r2, 3, (int64_t[]){B, 7, 5}));
    CHECK(dims_are(g, rg, 1, (int64_t[]){B}));
    CHECK(dims_are(g, cs, 2, (int64_t[]){B, 3}));
    CHECK(dims_are(g, e2, 3, (int64_t[]){B, 4, U}));
    CHECK(dims_are(g, r3, 2, (int64_t[]){U, 5}));
    CHECK(dims_are(g, r4, 2, (int64_t[]){U, U}));
    CHECK_OK(kiln__graph_infer(g));
    CHECK(dims_are(g, e1, 3, (int64_t[]){B, 3, 4}) && dims_are(g, rg, 1, (int64_t[]){B}));
    kiln__graph_free(g);
}

int main(void) {
    RUN(shape_of_reshape_folds);
    RUN(known_dims_of_symbolic_shape_fold);
    RUN(shape_values);
    RUN(large_constants_not_folded);
    return test_summary();
}
