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

int main(void) {
    RUN(shape_of_reshape_folds);
    RUN(large_constants_not_folded);
    return test_summary();
}
