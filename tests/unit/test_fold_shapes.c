/* test_fold_shapes.c -- constant folding of shape computations that only
 * become known while folding: x[1,6] -> S = Shape(x) -> R = Reshape(x, S)
 * -> T = Shape(R) -> y = Reshape(R, T). The first inference pass cannot
 * know R's dims (its shape input is not a constant yet); once S is folded,
 * the fold pass infers R again, so T folds too and no Shape node is left
 * to run (on a GPU engine it would run on the CPU). */
#include "test.h"

#include "ir/ir.h"
#include "ops/tensor_internal.h"
#include "runtime/engine.h"

#include <stdlib.h>

static int val(kiln_graph *g, const char *name) {
    int v = -1;
    if (kiln__graph_add_value(g, name, &v) != KILN_OK) abort();
    return v;
}

static int node(kiln_graph *g, int op, const char *name, int n_in, const int *in, const void *at) {
    char oname[64];
    snprintf(oname, sizeof oname, "%s_out", name);
    int out = val(g, oname);
    if (kiln__graph_add_node(g, op, name, n_in, in, 1, &out, at, NULL) != KILN_OK) abort();
    return out;
}

static int count_live(const kiln_graph *g, int op) {
    int k = 0;
    for (int i = 0; i < g->n_nodes; i++) k += !g->nodes[i].dead && g->nodes[i].op_id == op;
    return k;
}

TEST(shape_of_reshape_folds) {
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    if (!g) return;
    int x = val(g, "x");
    g->values[x].info.dtype = KILN_DTYPE_FLOAT32;
    g->values[x].info.rank = 2;
    g->values[x].info.dims[0] = 1;
    g->values[x].info.dims[1] = 6;
    g->values[x].flags |= KILN_VALUE_INPUT;
    if (kiln__grow((void **)&g->inputs, &g->cap_inputs, 1, sizeof(int)) != KILN_OK) abort();
    g->inputs[g->n_inputs++] = x;
    kiln_shape_attrs sa = {.start = 0, .end = 0, .has_end = 0};
    kiln_reshape_attrs ra = {.allowzero = 0};
    int s = node(g, KILN_OP_Shape, "shape_x", 1, &x, &sa);
    int r = node(g, KILN_OP_Reshape, "reshape_r", 2, (int[]){x, s}, &ra);
    int t = node(g, KILN_OP_Shape, "shape_r", 1, &r, &sa);
    int y = node(g, KILN_OP_Reshape, "reshape_y", 2, (int[]){r, t}, &ra);
    g->values[y].flags |= KILN_VALUE_OUTPUT;
    if (kiln__grow((void **)&g->outputs, &g->cap_outputs, 1, sizeof(int)) != KILN_OK) abort();
    g->outputs[g->n_outputs++] = y;
    kiln__graph_link(g);
    CHECK_OK(kiln__pass_infer(g));
    /* one inference pass: R's dims are unknown, so T cannot fold yet */
    CHECK(g->values[r].info.rank == 2 && g->values[r].info.dims[0] < 0);
    CHECK_OK(kiln__pass_fold_constants(g));
    CHECK(count_live(g, KILN_OP_Shape) == 0);
    CHECK(g->values[t].flags & KILN_VALUE_CONST);
    CHECK(g->values[r].info.dims[0] == 1 && g->values[r].info.dims[1] == 6);
    CHECK_OK(kiln__pass_dce(g));
    CHECK_OK(kiln__pass_infer(g));
    CHECK(g->values[y].info.rank == 2 && g->values[y].info.dims[0] == 1 &&
          g->values[y].info.dims[1] == 6);
    CHECK(count_live(g, KILN_OP_Reshape) == 2);
    kiln__graph_free(g);
}

int main(void) {
    RUN(shape_of_reshape_folds);
    return test_summary();
}
