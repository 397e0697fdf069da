/* test_precision.c -- the fp16/bf16 pass of the graph optimizer
 * (src/passes/precision.c) on small graphs built in memory, for the CUDA
 * backend. Needs no GPU: the pass asks only the backend's supports().
 * Checks: graph inputs and outputs stay float32 with their names; converted
 * nodes read and write the reduced type; constants are converted (fp16
 * clamped to its range); nodes kept in fp32 (an op left out, a layer named
 * in fp32_layers) get casts around them; the graph stays topologically
 * ordered and consistent after re-inference; unknown layer names fail;
 * fp32 and CPU plans are left alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test.h"
#include "ops/fused_pointwise.h"

#include "backends/backend.h"
#include "ops/nn_attrs.h"
#include "ops/reduce_attrs.h"
#include "ops/elementwise_impl.h"
#include "ops/fused_conv.h"
#include "ops/fused_se.h"
#include "ops/tensor_internal.h"
#include "backends/cuda/cuda_layout.h"
#include "passes/precision.h"
#include "runtime/engine.h"
#include "format/format.h"
#include "runtime/debug.h"

static int add_val(kiln_graph *g, const char *name) {
    int v = -1;
    if (kiln__graph_add_value(g, name, &v) != KILN_OK) abort();
    return v;
}

static int add_const(kiln_graph *g, const char *name, kiln_dtype t, int rank, const int64_t *dims,
                     const void *data) {
    int v = add_val(g, name);
    if (kiln__value_set_const(&g->values[v], t, rank, dims, data) != KILN_OK) abort();
    return v;
}

static int add_node(kiln_graph *g, int op, const char *name, int n_in, const int *in,
                    const void *attrs) {
    char oname[64];
    snprintf(oname, sizeof oname, "%s_out", name);
    int out = add_val(g, oname);
    if (kiln__graph_add_node(g, op, name, n_in, in, 1, &out, attrs, NULL) != KILN_OK) abort();
    return out;
}

static void mark_output(kiln_graph *g, int v) {
    g->values[v].flags |= KILN_VALUE_OUTPUT;
    if (kiln__grow((void **)&g->outputs, &g->cap_outputs, g->n_outputs + 1, sizeof(int)) != KILN_OK)
        abort();
    g->outputs[g->n_outputs++] = v;
}

/* x[2,8] -> MatMul W -> Add b ("add1") -> Relu -> Mul 1e6 -> Sigmoid (output y1)
 *        -> ReduceSum(axes 1) (output y2) */
static kiln_graph *make_graph(void) {
    kiln_graph *g = NULL;
    if (kiln__graph_create(&g) != KILN_OK) abort();
    int x = add_val(g, "x");
    g->values[x].info.dtype = KILN_DTYPE_FLOAT32;
    g->values[x].info.rank = 2;
    g->values[x].info.dims[0] = 2;
    g->values[x].info.dims[1] = 8;
    g->values[x].flags |= KILN_VALUE_INPUT;
    if (kiln__grow((void **)&g->inputs, &g->cap_inputs, 1, sizeof(int)) != KILN_OK) abort();
    g->inputs[g->n_inputs++] = x;
    float w[32], b[4];
    for (int i = 0; i < 32; i++) w[i] = (float)((i * 7) % 11 - 5) * 0.1f;
    for (int i = 0; i < 4; i++) b[i] = 0.25f * (float)i;
    int64_t wd[2] = {8, 4}, bd[1] = {4}, ad[1] = {1};
    int W = add_const(g, "W", KILN_DTYPE_FLOAT32, 2, wd, w);
    int B = add_const(g, "b", KILN_DTYPE_FLOAT32, 1, bd, b);
    float big = 1e6f;
    int C = add_const(g, "big", KILN_DTYPE_FLOAT32, 0, NULL, &big);
    int64_t axis = 1;
    int A = add_const(g, "axes", KILN_DTYPE_INT64, 1, ad, &axis);
    int mm = add_node(g, KILN_OP_MatMul, "mm", 2, (int[]){x, W}, NULL);
    int add = add_node(g, KILN_OP_Add, "add1", 2, (int[]){mm, B}, NULL);
    int relu = add_node(g, KILN_OP_Relu, "relu", 1, &add, NULL);
    int mul = add_node(g, KILN_OP_Mul, "scale", 2, (int[]){relu, C}, NULL);
    int sig = add_node(g, KILN_OP_Sigmoid, "sig", 1, &mul, NULL);
    kiln_reduce_attrs ra = {.keepdims = 1};
    int rs = add_node(g, KILN_OP_ReduceSum, "rsum", 2, (int[]){sig, A}, &ra);
    mark_output(g, sig);
    mark_output(g, rs);
    kiln__graph_link(g);
    if (kiln__graph_infer(g) != KILN_OK) {
        fprintf(stderr, "infer: %s\n", kiln_last_error());
        abort();
    }
    return g;
}

static const kiln_node *find_node(const kiln_graph *g, const char *name) {
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && !strcmp(g->nodes[i].name, name)) return &g->nodes[i];
    return NULL;
}

static kiln_dtype in_dtype(const kiln_graph *g, const kiln_node *n, int i) {
    return g->values[n->in[i]].info.dtype;
}

static int count_op(const kiln_graph *g, int op) {
    int k = 0;
    for (int i = 0; i < g->n_nodes; i++) k += !g->nodes[i].dead && g->nodes[i].op_id == op;
    return k;
}

/* every input of every node is a graph input, a constant or made earlier */
static bool topo_ok(const kiln_graph *g) {
    bool *made = calloc((size_t)g->n_values + 1, 1);
    for (int k = 0; k < g->n_inputs; k++) made[g->inputs[k]] = true;
    for (int v = 0; v < g->n_values; v++)
        if (g->values[v].flags & KILN_VALUE_CONST) made[v] = true;
    bool ok = true;
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0 && !made[n->in[k]]) ok = false;
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0) made[n->out[k]] = true;
    }
    free(made);
    return ok;
}

static kiln_status optimize(kiln_graph *g, int device, int precision, const char *const *keep,
                            int n_keep, bool disable) {
    kiln_optimize_opts o = {.device = device, .precision = precision, .disable = disable,
                            .fp32_layers = keep, .n_fp32_layers = n_keep};
    return kiln__pass_optimize(g, &o);
}

/* g optimized for fp16 on CUDA with every node placed there, as the builder
 * places them. */
static kiln_status optimize_cuda_fp16(kiln_graph *g) {
    kiln_status s = optimize(g, KILN_DEVICE_CUDA, KILN_PRECISION_FP16, NULL, 0, false);
    for (int i = 0; i < g->n_nodes; i++) g->nodes[i].device = KILN_DEVICE_CUDA;
    return s;
}

static bool have_cuda(void) {
    if (kiln__backend_for(KILN_DEVICE_CUDA)) return true;
    printf("CUDA backend not built: skipping\n");
    return false;
}

TEST(fp16_plan) {
    if (!have_cuda()) return;
    kiln_graph *g = make_graph();
    const char *keep[] = {"add1"};
    CHECK_OK(optimize(g, KILN_DEVICE_CUDA, KILN_PRECISION_FP16, keep, 1, true));
    CHECK(topo_ok(g));
    /* inputs and outputs: float32, same names */
    CHECK(g->values[g->inputs[0]].info.dtype == KILN_DTYPE_FLOAT32);
    CHECK(!strcmp(g->values[g->inputs[0]].name, "x"));
    CHECK(g->n_outputs == 2);
    CHECK(!strcmp(g->values[g->outputs[0]].name, "sig_out"));
    CHECK(!strcmp(g->values[g->outputs[1]].name, "rsum_out"));
    CHECK(g->values[g->outputs[0]].info.dtype == KILN_DTYPE_FLOAT32);
    CHECK(g->values[g->outputs[1]].info.dtype == KILN_DTYPE_FLOAT32);
    const kiln_node *mm = find_node(g, "mm"), *add = find_node(g, "add1"),
                    *relu = find_node(g, "relu"), *mul = find_node(g, "scale"),
                    *sig = find_node(g, "sig"), *rs = find_node(g, "rsum");
    CHECK(mm && add && relu && mul && sig && rs);
    if (!(mm && add && relu && mul && sig && rs)) goto done;
    /* converted */
    CHECK(in_dtype(g, mm, 0) == KILN_DTYPE_FLOAT16 && in_dtype(g, mm, 1) == KILN_DTYPE_FLOAT16);
    CHECK(g->values[mm->out[0]].info.dtype == KILN_DTYPE_FLOAT16);
    CHECK(g->values[mm->in[1]].flags & KILN_VALUE_CONST); /* W converted, not cast at run time */
    CHECK(in_dtype(g, relu, 0) == KILN_DTYPE_FLOAT16);
    CHECK(in_dtype(g, mul, 0) == KILN_DTYPE_FLOAT16 && in_dtype(g, mul, 1) == KILN_DTYPE_FLOAT16);
    CHECK(in_dtype(g, sig, 0) == KILN_DTYPE_FLOAT16);
    CHECK(g->values[sig->out[0]].info.dtype == KILN_DTYPE_FLOAT16);
    /* 1e6 does not fit fp16: clamped to the largest finite value */
    const kiln_value *c = &g->values[mul->in[1]];
    CHECK((c->flags & KILN_VALUE_CONST) && kiln__f16_to_f32(((const uint16_t *)c->data)[0]) == 65504.0f);
    /* kept in fp32: the named layer and the sum-like reduction */
    CHECK(in_dtype(g, add, 0) == KILN_DTYPE_FLOAT32 && in_dtype(g, add, 1) == KILN_DTYPE_FLOAT32);
    CHECK(g->values[add->out[0]].info.dtype == KILN_DTYPE_FLOAT32);
    CHECK(in_dtype(g, rs, 0) == KILN_DTYPE_FLOAT32);
    /* casts: x -> fp16, mm -> fp32 (for add1), add1 -> fp16 (for relu), sig -> fp32 (output) */
    CHECK(count_op(g, KILN_OP_Cast) == 4);
    /* every Cast converts between float32 and float16 and matches its values */
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead || n->op_id != KILN_OP_Cast) continue;
        kiln_dtype a = in_dtype(g, n, 0), b = g->values[n->out[0]].info.dtype;
        CHECK((a == KILN_DTYPE_FLOAT32 && b == KILN_DTYPE_FLOAT16) ||
              (a == KILN_DTYPE_FLOAT16 && b == KILN_DTYPE_FLOAT32));
    }
    /* the CUDA backend runs every node of the plan */
    const kiln_backend_i *be = kiln__backend_for(KILN_DEVICE_CUDA);
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead) CHECK(kiln__backend_supports(be, g, &g->nodes[i]));
done:
    kiln__graph_free(g);
}

TEST(bf16_plan) {
    if (!have_cuda()) return;
    kiln_graph *g = make_graph();
    /* the pointwise fusion off: "scale" stays a node to look at */
    kiln_optimize_opts oo = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_BF16,
                             .disabled = 1u << KILN_PASS_FUSE_POINTWISE};
    CHECK_OK(kiln__pass_optimize(g, &oo));
    CHECK(topo_ok(g));
    const kiln_node *mul = find_node(g, "scale");
    CHECK(mul != NULL);
    if (mul) {
        CHECK(in_dtype(g, mul, 0) == KILN_DTYPE_BFLOAT16);
        const kiln_value *c = &g->values[mul->in[1]];
        /* bf16 has fp32's range: rounded, not clamped */
        CHECK(c->info.dtype == KILN_DTYPE_BFLOAT16 &&
              ((const uint16_t *)c->data)[0] == kiln__f32_to_bf16(1e6f));
    }
    CHECK(g->values[g->outputs[0]].info.dtype == KILN_DTYPE_FLOAT32);
    CHECK(g->values[g->outputs[1]].info.dtype == KILN_DTYPE_FLOAT32);
    /* with the optimizer on, the matrix product runs in bf16 (fused or not), never fp32 */
    int n_mm = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead || (strcmp(n->op->name, "MatMul") && strcmp(n->op->name, "FusedMatMul"))) continue;
        n_mm++;
        CHECK(in_dtype(g, n, 0) == KILN_DTYPE_BFLOAT16);
    }
    CHECK(n_mm == 1);
    kiln__graph_free(g);
}

/* With the optimizer on, fp16 plans keep kiln's fused layers: the precision
 * pass runs after fusion (their inference takes float16), so Conv + Relu is
 * one FusedConv and MatMul + Add + Relu one FusedMatMul, both in fp16. */
TEST(fused_fp16) {
    if (!have_cuda()) return;
    kiln_optimize_opts o = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP16};
    CHECK(!kiln__precision_first(&o));
    kiln_graph *g = make_graph();
    CHECK_OK(optimize(g, KILN_DEVICE_CUDA, KILN_PRECISION_FP16, NULL, 0, false));
    CHECK(topo_ok(g));
    CHECK(count_op(g, KILN_OP_MatMul) == 0 && count_op(g, KILN_OP_Add) == 0);
    CHECK(count_op(g, KILN_OP_FusedMatMul) == 1);
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead || n->op_id != KILN_OP_FusedMatMul) continue;
        CHECK(in_dtype(g, n, 0) == KILN_DTYPE_FLOAT16 && in_dtype(g, n, 1) == KILN_DTYPE_FLOAT16);
        CHECK(g->values[n->out[0]].info.dtype == KILN_DTYPE_FLOAT16);
    }
    kiln__graph_free(g);
    /* x[1,2,5,5] -> Conv(W[3,2,3,3], B) -> Relu (output) */
    g = NULL;
    if (kiln__graph_create(&g) != KILN_OK) abort();
    int x = add_val(g, "x");
    g->values[x].info.dtype = KILN_DTYPE_FLOAT32;
    g->values[x].info.rank = 4;
    int64_t xd[4] = {1, 2, 5, 5}, wd[4] = {3, 2, 3, 3}, bd[1] = {3};
    memcpy(g->values[x].info.dims, xd, sizeof xd);
    g->values[x].flags |= KILN_VALUE_INPUT;
    if (kiln__grow((void **)&g->inputs, &g->cap_inputs, 1, sizeof(int)) != KILN_OK) abort();
    g->inputs[g->n_inputs++] = x;
    float w[54], b[3] = {0.5f, -0.5f, 0.f};
    for (int i = 0; i < 54; i++) w[i] = (float)(i % 5 - 2) * 0.1f;
    int W = add_const(g, "W", KILN_DTYPE_FLOAT32, 4, wd, w);
    int B = add_const(g, "B", KILN_DTYPE_FLOAT32, 1, bd, b);
    kiln_conv_attrs ca;
    memset(&ca, 0, sizeof ca);
    ca.group = 1;
    int cv = add_node(g, KILN_OP_Conv, "conv", 3, (int[]){x, W, B}, &ca);
    int r = add_node(g, KILN_OP_Relu, "relu", 1, &cv, NULL);
    mark_output(g, r);
    kiln__graph_link(g);
    CHECK_OK(kiln__graph_infer(g));
    CHECK_OK(optimize(g, KILN_DEVICE_CUDA, KILN_PRECISION_FP16, NULL, 0, false));
    CHECK(topo_ok(g));
    CHECK(count_op(g, KILN_OP_Conv) == 0 && count_op(g, KILN_OP_Relu) == 0);
    CHECK(count_op(g, KILN_OP_FusedConv) == 1);
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead || n->op_id != KILN_OP_FusedConv) continue;
        CHECK(in_dtype(g, n, 0) == KILN_DTYPE_FLOAT16 && in_dtype(g, n, 1) == KILN_DTYPE_FLOAT16);
        CHECK(g->values[n->out[0]].info.dtype == KILN_DTYPE_FLOAT16);
    }
    CHECK(g->values[g->outputs[0]].info.dtype == KILN_DTYPE_FLOAT32);
    kiln__graph_free(g);
}

/* Add + LayerNormalization (src/passes/fuse_norm.c) in an fp16 CUDA plan:
 * one kiln.AddLayerNorm in fp16, the sum (a graph output too) its second
 * output, both outputs cast back to float32 at the boundary. */
TEST(add_layernorm_fp16) {
    if (!have_cuda()) return;
    kiln_graph *g = NULL;
    if (kiln__graph_create(&g) != KILN_OK) abort();
    int64_t xd[3] = {2, 8, 64}, pd[1] = {64};
    int xy[2];
    for (int k = 0; k < 2; k++) {
        int v = xy[k] = add_val(g, k ? "y" : "x");
        g->values[v].info.dtype = KILN_DTYPE_FLOAT32;
        g->values[v].info.rank = 3;
        memcpy(g->values[v].info.dims, xd, sizeof xd);
        g->values[v].flags |= KILN_VALUE_INPUT;
        if (kiln__grow((void **)&g->inputs, &g->cap_inputs, g->n_inputs + 1, sizeof(int)) != KILN_OK) abort();
        g->inputs[g->n_inputs++] = v;
    }
    float sc[64], bi[64];
    for (int i = 0; i < 64; i++) {
        sc[i] = 1.0f + 0.01f * (float)i;
        bi[i] = -0.1f * (float)(i % 3);
    }
    int s = add_node(g, KILN_OP_Add, "res", 2, xy, NULL);
    kiln_ln_attrs la = {.axis = -1, .epsilon = 1e-5f, .stash_type = 1};
    int in[3] = {s, add_const(g, "ln.weight", KILN_DTYPE_FLOAT32, 1, pd, sc),
                 add_const(g, "ln.bias", KILN_DTYPE_FLOAT32, 1, pd, bi)};
    mark_output(g, add_node(g, KILN_OP_LayerNormalization, "ln", 3, in, &la));
    mark_output(g, s);
    kiln__graph_link(g);
    CHECK_OK(kiln__graph_infer(g));
    CHECK_OK(optimize(g, KILN_DEVICE_CUDA, KILN_PRECISION_FP16, NULL, 0, false));
    CHECK(topo_ok(g));
    CHECK(count_op(g, KILN_OP_AddLayerNorm) == 1 && count_op(g, KILN_OP_Add) == 0 &&
          count_op(g, KILN_OP_LayerNormalization) == 0);
    const kiln_node *n = find_node(g, "res+ln");
    CHECK(n && n->n_out == 2 && n->out[1] >= 0);
    for (int i = 0; n && i < 4; i++) CHECK(in_dtype(g, n, i) == KILN_DTYPE_FLOAT16);
    for (int i = 0; n && i < 2; i++) CHECK(g->values[n->out[i]].info.dtype == KILN_DTYPE_FLOAT16);
    for (int i = 0; i < g->n_outputs; i++) CHECK(g->values[g->outputs[i]].info.dtype == KILN_DTYPE_FLOAT32);
    kiln__graph_free(g);
}

/* T5's RMSNorm (src/passes/fuse_transformer.c, fuse_rmsnorm) over x [2, 8,
 * 64] of type xt: Cast(float) -> Pow 2 -> ReduceMean(-1) -> Add eps -> Sqrt
 * -> Div(1, .) -> Mul(cast, .) [-> Cast(xt) where xt is not float32] ->
 * Mul(weight of type xt, .), the graph's output. */
static kiln_graph *t5_rmsnorm_graph(kiln_dtype xt) {
    kiln_graph *g = NULL;
    if (kiln__graph_create(&g) != KILN_OK) abort();
    int64_t xd[3] = {2, 8, 64}, pd[1] = {64}, ad[1] = {1}, last = -1;
    int x = add_val(g, "x");
    g->values[x].info.dtype = xt;
    g->values[x].info.rank = 3;
    memcpy(g->values[x].info.dims, xd, sizeof xd);
    g->values[x].flags |= KILN_VALUE_INPUT;
    if (kiln__grow((void **)&g->inputs, &g->cap_inputs, 1, sizeof(int)) != KILN_OK) abort();
    g->inputs[g->n_inputs++] = x;
    float w[64], two = 2.0f, eps = 1e-6f, one = 1.0f;
    uint16_t wh[64];
    for (int i = 0; i < 64; i++) {
        w[i] = 0.5f + 0.01f * (float)i;
        wh[i] = xt == KILN_DTYPE_FLOAT16 ? kiln__f32_to_f16(w[i]) : kiln__f32_to_bf16(w[i]);
    }
    kiln_ew_cast_attrs to32 = {.to = KILN_DTYPE_FLOAT32}, back = {.to = xt};
    kiln_reduce_attrs ra = {.keepdims = 1};
    int c = add_node(g, KILN_OP_Cast, "ln/Cast", 1, &x, &to32);
    int sq = add_node(g, KILN_OP_Pow, "ln/Pow", 2, (int[]){c, add_const(g, "two", KILN_DTYPE_FLOAT32, 0, NULL, &two)},
                      NULL);
    int ms = add_node(g, KILN_OP_ReduceMean, "ln/ReduceMean", 2,
                      (int[]){sq, add_const(g, "axes", KILN_DTYPE_INT64, 1, ad, &last)}, &ra);
    int t = add_node(g, KILN_OP_Add, "ln/Add", 2, (int[]){ms, add_const(g, "eps", KILN_DTYPE_FLOAT32, 0, NULL, &eps)},
                     NULL);
    int r = add_node(g, KILN_OP_Sqrt, "ln/Sqrt", 1, &t, NULL);
    r = add_node(g, KILN_OP_Div, "ln/Div", 2, (int[]){add_const(g, "one", KILN_DTYPE_FLOAT32, 0, NULL, &one), r},
                 NULL);
    int y = add_node(g, KILN_OP_Mul, "ln/Mul", 2, (int[]){c, r}, NULL);
    if (xt != KILN_DTYPE_FLOAT32) y = add_node(g, KILN_OP_Cast, "ln/Cast_1", 1, &y, &back);
    int wv = add_const(g, "ln.weight", xt, 1, pd, xt == KILN_DTYPE_FLOAT32 ? (const void *)w : (const void *)wh);
    mark_output(g, add_node(g, KILN_OP_Mul, "ln/Mul_1", 2, (int[]){wv, y}, NULL));
    kiln__graph_link(g);
    if (kiln__graph_infer(g) != KILN_OK) {
        fprintf(stderr, "infer: %s\n", kiln_last_error());
        abort();
    }
    return g;
}

/* RMSNorm in CUDA plans: a float32 model's in an fp16 plan becomes one
 * RMSNormalization run in fp16 (X, scale and Y; the graph's input and output
 * stay float32); a float16 or bfloat16 model's (computed in float32 between
 * its Casts) one RMSNormalization of the model's type, the Casts taken in. */
TEST(rmsnorm_reduced) {
    if (!have_cuda()) return;
    kiln_graph *g = t5_rmsnorm_graph(KILN_DTYPE_FLOAT32);
    CHECK_OK(optimize(g, KILN_DEVICE_CUDA, KILN_PRECISION_FP16, NULL, 0, false));
    CHECK(topo_ok(g));
    CHECK(count_op(g, KILN_OP_RMSNormalization) == 1 && count_op(g, KILN_OP_ReduceMean) == 0 &&
          count_op(g, KILN_OP_Pow) == 0 && count_op(g, KILN_OP_Div) == 0);
    const kiln_node *n = find_node(g, "ln/Cast+ln/Pow+ln/ReduceMean+ln/Add+ln/Sqrt+ln/Div+ln/Mul+ln/Mul_1");
    CHECK(n != NULL);
    for (int i = 0; n && i < 2; i++) CHECK(in_dtype(g, n, i) == KILN_DTYPE_FLOAT16);
    CHECK(n && g->values[n->out[0]].info.dtype == KILN_DTYPE_FLOAT16);
    CHECK(g->values[g->inputs[0]].info.dtype == KILN_DTYPE_FLOAT32);
    CHECK(g->values[g->outputs[0]].info.dtype == KILN_DTYPE_FLOAT32);
    kiln__graph_free(g);
    const kiln_dtype ts[2] = {KILN_DTYPE_FLOAT16, KILN_DTYPE_BFLOAT16};
    for (int k = 0; k < 2; k++) {
        g = t5_rmsnorm_graph(ts[k]);
        CHECK_OK(optimize(g, KILN_DEVICE_CUDA, KILN_PRECISION_FP32, NULL, 0, false));
        CHECK(topo_ok(g));
        CHECK(count_op(g, KILN_OP_RMSNormalization) == 1 && count_op(g, KILN_OP_Cast) == 0 && g->n_nodes == 1);
        n = find_node(g, "ln/Cast+ln/Pow+ln/ReduceMean+ln/Add+ln/Sqrt+ln/Div+ln/Mul+ln/Cast_1+ln/Mul_1");
        CHECK(n && n->in[0] == g->inputs[0] && in_dtype(g, n, 1) == ts[k] && n->out[0] == g->outputs[0]);
        CHECK(g->values[g->outputs[0]].info.dtype == ts[k]);
        kiln__graph_free(g);
    }
}

/* The CPU kernels of the fused layers refuse float16 tensors with a message. */
TEST(fused_cpu_refuses_fp16) {
    uint16_t buf[64] = {0};
    kiln_tensor t2 = {.dtype = KILN_DTYPE_FLOAT16, .rank = 2, .dims = {2, 2}, .data = buf};
    kiln_tensor t4 = {.dtype = KILN_DTYPE_FLOAT16, .rank = 4, .dims = {1, 1, 2, 2}, .data = buf};
    kiln_tensor o2 = t2, o4 = t4;
    const kiln_tensor *in2[3] = {&t2, &t2, &t2}, *in4[2] = {&t4, &t4};
    kiln_tensor *out2[1] = {&o2}, *out4[1] = {&o4};
    unsigned char attrs[4096] = {0};
    static const char *const names[] = {"FusedMatMul", "Gelu", "Attention", "FusedConv"};
    for (int k = 0; k < 4; k++) {
        int id = kiln__op_find("kiln", names[k]);
        const kiln_op_def *op = id ? kiln__op_by_id(id) : NULL;
        CHECK(op != NULL && op->cpu != NULL && op->attr_size <= sizeof attrs);
        if (!op || !op->cpu || op->attr_size > sizeof attrs) continue;
        bool conv = k == 3;
        int n_in = k == 1 ? 1 : conv ? 2 : k == 2 ? 3 : 2;
        kiln_kernel_args a = {.op = op, .attrs = attrs, .node_name = names[k], .n_in = n_in,
                              .n_out = 1, .in = conv ? in4 : in2, .out = conv ? out4 : out2};
        CHECK_ERR(op->cpu(&a), KILN_ERR_UNSUPPORTED, "float32");
    }
}

/* No dead node is left (the builder runs nothing that drops them after the
 * layout passes: the runtime would run them). */
static bool no_dead(const kiln_graph *g) {
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].dead) return false;
    return true;
}

static int live_nodes_of(const kiln_graph *g, int op, int *first) {
    int k = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && g->nodes[i].op_id == op) {
            if (k++ == 0 && first) *first = i;
        }
    return k;
}

/* x[batch,cin,6,6] (batch: 1, or a dynamic KILN_DIM_SYM / KILN_DIM_UNKNOWN) -> nb blocks of [Conv 3x3 -> Relu -> c1; Conv 3x3 (c1) -> Add c1 ->
 * Relu] (cin->16 channels first, then 16->16), with a MaxPool 2x2/2 after the
 * first block when `pool` -> GlobalAveragePool (output) when `gap`, else the
 * last Relu is the output; optimized for fp16 on CUDA (2 * nb FusedConv
 * layers) and placed there. */
static kiln_graph *conv_chain(int nb, int cin, bool pool, bool gap, int64_t batch) {
    kiln_graph *g = NULL;
    if (kiln__graph_create(&g) != KILN_OK) abort();
    int x = add_val(g, "x");
    g->values[x].info.dtype = KILN_DTYPE_FLOAT32;
    g->values[x].info.rank = 4;
    if (KILN_DIM_IS_SYM(batch)) { /* (ONNX's dim_param "batch") */
        int sym = -1;
        if (kiln__graph_add_symbol(g, "batch", &sym) != KILN_OK || KILN_DIM_SYM(sym) != batch) abort();
    }
    int64_t xd[4] = {batch, cin, 6, 6}, w1d[4] = {16, cin, 3, 3}, w2d[4] = {16, 16, 3, 3}, bd[1] = {16};
    memcpy(g->values[x].info.dims, xd, sizeof xd);
    g->values[x].flags |= KILN_VALUE_INPUT;
    if (kiln__grow((void **)&g->inputs, &g->cap_inputs, 1, sizeof(int)) != KILN_OK) abort();
    g->inputs[g->n_inputs++] = x;
    static float w1[16 * 8 * 9], w2[16 * 16 * 9], b[16];
    for (int i = 0; i < 16 * 16 * 9; i++) {
        if (i < 16 * 8 * 9) w1[i] = (float)(i % 7 - 3) * 0.05f;
        w2[i] = (float)(i % 5 - 2) * 0.05f;
    }
    int W1 = add_const(g, "W1", KILN_DTYPE_FLOAT32, 4, w1d, w1);
    int W2 = add_const(g, "W2", KILN_DTYPE_FLOAT32, 4, w2d, w2);
    int B = add_const(g, "B", KILN_DTYPE_FLOAT32, 1, bd, b);
    kiln_conv_attrs ca;
    memset(&ca, 0, sizeof ca);
    ca.group = 1;
    ca.n_pads = 4;
    for (int i = 0; i < 4; i++) ca.pads[i] = 1;
    kiln_pool_attrs pa;
    memset(&pa, 0, sizeof pa);
    pa.n_kernel = pa.n_strides = 2;
    pa.kernel[0] = pa.kernel[1] = pa.strides[0] = pa.strides[1] = 2;
    int h = x;
    for (int k = 0; k < nb; k++) {
        char nm[6][32];
        static const char *const base[6] = {"conv_a", "relu_a", "conv_b", "add_b", "relu_b", "pool"};
        for (int q = 0; q < 6; q++) snprintf(nm[q], sizeof nm[q], "%s%d", base[q], k);
        int c1 = add_node(g, KILN_OP_Conv, nm[0], 3, (int[]){h, k ? W2 : W1, B}, &ca);
        int r1 = add_node(g, KILN_OP_Relu, nm[1], 1, &c1, NULL);
        int c2 = add_node(g, KILN_OP_Conv, nm[2], 3, (int[]){r1, W2, B}, &ca);
        int a2 = add_node(g, KILN_OP_Add, nm[3], 2, (int[]){c2, r1}, NULL);
        h = add_node(g, KILN_OP_Relu, nm[4], 1, &a2, NULL);
        if (pool && k == 0) h = add_node(g, KILN_OP_MaxPool, nm[5], 1, &h, &pa);
    }
    if (gap) h = add_node(g, KILN_OP_GlobalAveragePool, "gap", 1, &h, NULL);
    mark_output(g, h);
    kiln__graph_link(g);
    CHECK_OK(kiln__graph_infer(g));
    CHECK_OK(optimize_cuda_fp16(g));
    CHECK(live_nodes_of(g, KILN_OP_FusedConv, NULL) == 2 * nb);
    return g;
}

/* The engine checks (format/read.c, as the writer and the loader run
 * them) on plan g: KILN_OK or the status, with a profile per input of its
 * dims (a dynamic dim 1..4). */
static kiln_status check_plan(const kiln_graph *g) {
    kiln_profile *p = calloc((size_t)g->n_inputs + 1, sizeof *p);
    for (int i = 0; i < g->n_inputs; i++) {
        const kiln_tinfo *t = &g->values[g->inputs[i]].info;
        p[i].rank = t->rank;
        for (int d = 0; d < t->rank; d++) {
            p[i].min[d] = t->dims[d] < 0 ? 1 : t->dims[d];
            p[i].opt[d] = p[i].min[d];
            p[i].max[d] = t->dims[d] < 0 ? 4 : t->dims[d];
        }
    }
    kiln_status st = kiln__format_check_graph(g, p, true);
    free(p);
    return st;
}

/* Sets the layout field of FusedConv ni to l: the status of check_plan,
 * with the field put back. */
static kiln_status check_with_layout(kiln_graph *g, int ni, int32_t l) {
    kiln_fused_conv_attrs *fa = g->nodes[ni].attrs;
    int32_t keep = fa->layout;
    fa->layout = l;
    kiln_status st = check_plan(g);
    fa->layout = keep;
    return st;
}

static int32_t pool_layout(const kiln_node *nd) { return ((const kiln_pool_attrs *)nd->attrs)->layout; }

/* The NHWC pass on conv_chain(nb, cin, pool, gap, batch): *n layers made NHWC;
 * checks what every chain must satisfy (topological order, NCHW shapes,
 * the layouts, every layer past the first reading NHWC producers directly). */
static kiln_graph *nhwc_chain(int nb, int cin, bool pool, bool gap, int64_t batch, int *n) {
    kiln_graph *g = conv_chain(nb, cin, pool, gap, batch);
    CHECK_OK(kiln__pass_cuda_nhwc(g, n));
    CHECK(topo_ok(g));
    if (*n == 0) return g;
    int first = -1;
    live_nodes_of(g, KILN_OP_FusedConv, &first);
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *nd = &g->nodes[i];
        if (nd->dead) continue;
        const kiln_backend_i *cu = kiln__backend_for(KILN_DEVICE_CUDA);
        if (nd->op_id == KILN_OP_FusedConv) {
            const kiln_fused_conv_attrs *fa = nd->attrs;
            /* the first converts its NCHW input itself (channels padded); the rest read NHWC */
            CHECK(fa->layout == (i == first ? KILN_FC_LAYOUT_Y_NHWC : KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC));
            CHECK(strstr(kiln__backend_kernel_name(cu, nd), "nhwc") != NULL);
            CHECK(kiln__backend_supports(cu, g, nd));
            /* shapes stay NCHW */
            CHECK(g->values[nd->in[0]].info.dims[1] == (i == first ? cin : 16));
            int pr = g->values[nd->in[0]].producer;
            if (i != first) CHECK(g->nodes[pr].op_id == KILN_OP_FusedConv || g->nodes[pr].op_id == KILN_OP_MaxPool);
            if (nd->n_in > 3) CHECK(nd->in[3] == nd->in[0]);
        }
        if (nd->op_id == KILN_OP_MaxPool || nd->op_id == KILN_OP_GlobalAveragePool) {
            CHECK(pool_layout(nd) == KILN_POOL_LAYOUT_NHWC);
            CHECK(strstr(kiln__backend_kernel_name(cu, nd), "nhwc") != NULL);
            CHECK(kiln__backend_supports(cu, g, nd));
            /* reads a layer's NHWC output directly */
            CHECK(g->nodes[g->values[nd->in[0]].producer].op_id != KILN_OP_Reshape);
        }
    }
    return g;
}

/* A chain stays NCHW unless it has two layers per conversion: one block
 * alone (2 layers: the input converted in, the output out) stays; with the
 * GlobalAveragePool (which reads NHWC, its [N, C, 1, 1] output is both) or
 * a second block it goes NHWC. ResNet's 3-channel stem converts and pads
 * its input itself; a MaxPool between blocks stays in the chain. */
/* After the NHWC pass on a graph whose input has batch `batch`: every
 * 4-D activation keeps that batch (a dynamic one stays the same symbol, or
 * unknown, through the conversions and views), and every view's target
 * holds 0 for a dynamic batch (the input's own, at run time) or the batch. */
static void check_batch(const kiln_graph *g, int64_t batch) {
    CHECK_OK(check_plan(g)); /* (and the plan passes the engine checks: a writer would refuse it) */
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *nd = &g->nodes[i];
        if (nd->dead) continue;
        for (int k = 0; k < nd->n_out; k++) {
            const kiln_tinfo *t = nd->out[k] >= 0 ? &g->values[nd->out[k]].info : NULL;
            if (t && t->rank == 4 && t->dims[0] != 1) CHECK(t->dims[0] == batch);
            if (t && t->rank == 4 && t->dims[0] != batch && t->dims[0] != 1)
                printf("  %s: batch %lld, want %lld\n", nd->name, (long long)t->dims[0], (long long)batch);
        }
        if (nd->op_id != KILN_OP_Reshape) continue;
        const kiln_value *tv = &g->values[nd->in[1]];
        CHECK((tv->flags & KILN_VALUE_CONST) && tv->info.rank == 1 && tv->info.dims[0] == 4);
        const int64_t *target = tv->data;
        const kiln_tinfo *x = &g->values[nd->in[0]].info;
        if (target && x->rank == 4) CHECK(target[0] == (x->dims[0] < 0 ? 0 : x->dims[0]));
    }
}

static void nhwc_chains_at(int64_t batch) {
    int n = -1;
    kiln_graph *g = nhwc_chain(1, 8, false, false, batch, &n);
    CHECK(n == 0 && live_nodes_of(g, KILN_OP_Transpose, NULL) == 0);
    kiln__graph_free(g);
    g = nhwc_chain(1, 8, false, true, batch, &n);
    CHECK(n == 3 && live_nodes_of(g, KILN_OP_Transpose, NULL) == 0);
    check_batch(g, batch);
    kiln__graph_free(g);
    /* the graph output gets one conversion back */
    g = nhwc_chain(2, 8, false, false, batch, &n);
    CHECK(n == 4);
    CHECK(live_nodes_of(g, KILN_OP_Transpose, NULL) == 1 && live_nodes_of(g, KILN_OP_Reshape, NULL) == 1);
    check_batch(g, batch);
    kiln__graph_free(g);
    g = nhwc_chain(2, 3, true, true, batch, &n);
    CHECK(n == 6 && live_nodes_of(g, KILN_OP_Transpose, NULL) == 0);
    check_batch(g, batch);
    kiln__graph_free(g);
}

TEST(cuda_nhwc_chain) {
    if (!have_cuda()) return;
#if !KILN_HAVE_CUDNN
    printf("built without cuDNN: skipping\n");
    return;
#else
    nhwc_chains_at(1);
#endif
}

/* A MobileNetV3-style net: x[batch,3,16,16] (batch 2, or dynamic) -> stem Conv 3x3/2 + HardSwish (16)
 * -> nb inverted-residual blocks [Conv 1x1 + Relu (32); depthwise Conv 3x3
 * (stride 2 in the first block, 1 after) + Relu; SE: GlobalAveragePool ->
 * Conv 1x1 + Relu (8) -> Conv 1x1 (32) -> HardSigmoid -> Mul with the
 * depthwise output; Conv 1x1 (16), + the block's input from the second block
 * on] -> GlobalAveragePool (output) when `gap`, else the last block's output
 * (mul_out: the last SE Mul is the output instead); fp16 on CUDA. */
static kiln_graph *mbv3_net(int nb, bool gap, bool mul_out, int64_t batch) {
    kiln_graph *g = NULL;
    if (kiln__graph_create(&g) != KILN_OK) abort();
    int x = add_val(g, "x");
    g->values[x].info.dtype = KILN_DTYPE_FLOAT32;
    g->values[x].info.rank = 4;
    if (KILN_DIM_IS_SYM(batch)) { /* (ONNX's dim_param "batch") */
        int sym = -1;
        if (kiln__graph_add_symbol(g, "batch", &sym) != KILN_OK || KILN_DIM_SYM(sym) != batch) abort();
    }
    int64_t xd[4] = {batch, 3, 16, 16};
    memcpy(g->values[x].info.dims, xd, sizeof xd);
    g->values[x].flags |= KILN_VALUE_INPUT;
    if (kiln__grow((void **)&g->inputs, &g->cap_inputs, 1, sizeof(int)) != KILN_OK) abort();
    g->inputs[g->n_inputs++] = x;
    static float w[32 * 32 * 9];
    for (int i = 0; i < 32 * 32 * 9; i++) w[i] = (float)(i % 7 - 3) * 0.05f;
    int64_t ds[4] = {16, 3, 3, 3}, de[4] = {32, 16, 1, 1}, dd[4] = {32, 1, 3, 3}, dq[4] = {8, 32, 1, 1},
            dr[4] = {32, 8, 1, 1}, dp[4] = {16, 32, 1, 1};
    int Ws = add_const(g, "Ws", KILN_DTYPE_FLOAT32, 4, ds, w), We = add_const(g, "We", KILN_DTYPE_FLOAT32, 4, de, w);
    int Wd = add_const(g, "Wd", KILN_DTYPE_FLOAT32, 4, dd, w), Wq = add_const(g, "Wq", KILN_DTYPE_FLOAT32, 4, dq, w);
    int Wr = add_const(g, "Wr", KILN_DTYPE_FLOAT32, 4, dr, w), Wp = add_const(g, "Wp", KILN_DTYPE_FLOAT32, 4, dp, w);
    kiln_conv_attrs c1, c3, c3s2, dw, dws2;
    memset(&c1, 0, sizeof c1);
    c1.group = 1;
    c3 = c1;
    c3.n_pads = 4;
    for (int i = 0; i < 4; i++) c3.pads[i] = 1;
    c3s2 = c3;
    c3s2.n_strides = 2;
    c3s2.strides[0] = c3s2.strides[1] = 2;
    dw = c3;
    dw.group = 32;
    dws2 = c3s2;
    dws2.group = 32;
    kiln_ew_act_attrs hs = {.alpha = 1.0f / 6, .beta = 0.5f};
    int h = add_node(g, KILN_OP_Conv, "stem", 2, (int[]){x, Ws}, &c3s2);
    h = add_node(g, KILN_OP_HardSwish, "stem_act", 1, &h, NULL);
    for (int k = 0; k < nb; k++) {
        char nm[12][32];
        static const char *const base[12] = {"exp", "exp_relu", "dw", "dw_relu", "se_gap", "se_q", "se_relu",
                                             "se_r", "se_hsig", "se_mul", "proj", "add"};
        for (int q = 0; q < 12; q++) snprintf(nm[q], sizeof nm[q], "%s%d", base[q], k);
        int e = add_node(g, KILN_OP_Conv, nm[0], 2, (int[]){h, We}, &c1);
        e = add_node(g, KILN_OP_Relu, nm[1], 1, &e, NULL);
        int d = add_node(g, KILN_OP_Conv, nm[2], 2, (int[]){e, Wd}, k ? &dw : &dws2);
        d = add_node(g, KILN_OP_Relu, nm[3], 1, &d, NULL);
        int p = add_node(g, KILN_OP_GlobalAveragePool, nm[4], 1, &d, NULL);
        int q = add_node(g, KILN_OP_Conv, nm[5], 2, (int[]){p, Wq}, &c1);
        q = add_node(g, KILN_OP_Relu, nm[6], 1, &q, NULL);
        int r = add_node(g, KILN_OP_Conv, nm[7], 2, (int[]){q, Wr}, &c1);
        r = add_node(g, KILN_OP_HardSigmoid, nm[8], 1, &r, &hs);
        int m = add_node(g, KILN_OP_Mul, nm[9], 2, (int[]){d, r}, NULL);
        if (mul_out && k == nb - 1) {
            mark_output(g, m);
            break;
        }
        int o = add_node(g, KILN_OP_Conv, nm[10], 2, (int[]){m, Wp}, &c1);
        h = k ? add_node(g, KILN_OP_Add, nm[11], 2, (int[]){o, h}, NULL) : o;
    }
    if (!mul_out) mark_output(g, gap ? add_node(g, KILN_OP_GlobalAveragePool, "gap", 1, &h, NULL) : h);
    kiln__graph_link(g);
    CHECK_OK(kiln__graph_infer(g));
    CHECK_OK(optimize_cuda_fp16(g));
    return g;
}

/* The NHWC chain goes through depthwise convolutions, the SE block
 * (its pool, 1x1 convolutions and HardSigmoid one kiln.SqueezeExcite
 * reading NHWC, its [N, C, 1, 1] output the same in both layouts, the Mul
 * through views) and residuals: the stem converts the input itself, and the only
 * Transpose is the one back to NCHW for a graph output that needs it. */
static void nhwc_mobilenet_at(int64_t batch) {
    const kiln_backend_i *cu = kiln__backend_for(KILN_DEVICE_CUDA);
    static const struct { int nb; bool gap, mul_out; int transposes; } cs[] = {
        {3, true, false, 0}, {2, false, false, 1}, {2, false, true, 1}};
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        kiln_graph *g = mbv3_net(cs[k].nb, cs[k].gap, cs[k].mul_out, batch);
        int n = 0;
        CHECK_OK(kiln__pass_cuda_nhwc(g, &n));
        CHECK(topo_ok(g));
        CHECK(n > 0);
        CHECK(live_nodes_of(g, KILN_OP_Transpose, NULL) == cs[k].transposes);
        int dws = 0, muls = 0, gaps = 0, ses = 0, first = -1;
        live_nodes_of(g, KILN_OP_FusedConv, &first);
        for (int i = 0; i < g->n_nodes; i++) {
            const kiln_node *nd = &g->nodes[i];
            if (nd->dead) continue;
            CHECK(kiln__backend_supports(cu, g, nd));
            const kiln_tinfo *x = nd->n_in > 0 && nd->in[0] >= 0 ? &g->values[nd->in[0]].info : NULL;
            if (nd->op_id == KILN_OP_FusedConv) {
                const kiln_fused_conv_attrs *fa = nd->attrs;
                bool se = x && x->dims[2] == 1 && x->dims[3] == 1;
                int32_t want = se ? 0 : i == first ? KILN_FC_LAYOUT_Y_NHWC : KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
                CHECK(fa->layout == want);
                if (fa->layout != want) printf("  %s: layout %d, want %d\n", nd->name, (int)fa->layout, (int)want);
                dws += fa->conv.group > 1;
                if (fa->conv.group > 1) CHECK(g->nodes[g->values[nd->in[0]].producer].op_id == KILN_OP_FusedConv);
            }
            if (nd->op_id == KILN_OP_GlobalAveragePool) {
                gaps++;
                CHECK(pool_layout(nd) == KILN_POOL_LAYOUT_NHWC);
            }
            if (nd->op_id == KILN_OP_SqueezeExcite) { /* the SE gate: fuse_se, reading the chain NHWC */
                const kiln_se_attrs *sa = nd->attrs;
                ses++;
                CHECK(sa->layout == KILN_SE_LAYOUT_NHWC && sa->act1 == KILN_FC_ACT_RELU &&
                      sa->act2 == KILN_FC_ACT_HARD_SIGMOID && nd->n_in == 3);
            }
            if (nd->op_id == KILN_OP_Mul || nd->op_id == KILN_OP_Pointwise) {
                /* [N, H, W, C] x [N, 1, 1, C] over the NHWC bytes, viewed back (the Mul
                 * of a graph output is a kiln.Pointwise with the Cast to float32) */
                muls++;
                const kiln_tinfo *s = &g->values[nd->in[1]].info, *y = &g->values[nd->out[0]].info;
                CHECK(g->nodes[g->values[nd->in[0]].producer].op_id == KILN_OP_Reshape);
                CHECK(x->dims[1] == x->dims[2] && x->dims[3] == 32 && s->dims[1] == 1 && s->dims[3] == 32);
                CHECK(y->dims[3] == 32);
            }
        }
        CHECK(dws == (cs[k].mul_out ? cs[k].nb : cs[k].nb) && muls == cs[k].nb);
        CHECK(gaps == (cs[k].gap ? 1 : 0) && ses == cs[k].nb);
        check_batch(g, batch);
        kiln__graph_free(g);
    }
}

TEST(cuda_nhwc_mobilenet) {
    if (!have_cuda()) return;
#if !KILN_HAVE_CUDNN
    printf("built without cuDNN: skipping\n");
    return;
#else
    nhwc_mobilenet_at(2);
#endif
}

/* A RegNet-style net: x[2,3,16,16] -> stem Conv 3x3/2 + Relu (32) -> nb
 * blocks [Conv 1x1 + Relu (48); grouped Conv 3x3 (`width` channels a group,
 * stride 2 in the first block) + Relu; Conv 1x1 (32), + the block's input
 * from the second block on, Relu] -> GlobalAveragePool; fp16 on CUDA. */
static kiln_graph *regnet_net(int nb, int64_t width) {
    kiln_graph *g = NULL;
    if (kiln__graph_create(&g) != KILN_OK) abort();
    int x = add_val(g, "x");
    const kiln_tinfo xi = {.dtype = KILN_DTYPE_FLOAT32, .rank = 4, .dims = {2, 3, 16, 16}};
    g->values[x].info = xi;
    g->values[x].flags |= KILN_VALUE_INPUT;
    if (kiln__grow((void **)&g->inputs, &g->cap_inputs, 1, sizeof(int)) != KILN_OK) abort();
    g->inputs[g->n_inputs++] = x;
    static float w[48 * 48 * 9];
    for (int i = 0; i < 48 * 48 * 9; i++) w[i] = (float)(i % 7 - 3) * 0.05f;
    int64_t ds[4] = {32, 3, 3, 3}, da[4] = {48, 32, 1, 1}, db[4] = {48, width, 3, 3}, dc[4] = {32, 48, 1, 1};
    int Ws = add_const(g, "Ws", KILN_DTYPE_FLOAT32, 4, ds, w), Wa = add_const(g, "Wa", KILN_DTYPE_FLOAT32, 4, da, w);
    int Wb = add_const(g, "Wb", KILN_DTYPE_FLOAT32, 4, db, w), Wc = add_const(g, "Wc", KILN_DTYPE_FLOAT32, 4, dc, w);
    kiln_conv_attrs c1, c3s2, gc, gcs2;
    memset(&c1, 0, sizeof c1);
    c1.group = 1;
    gc = c1;
    gc.group = 48 / width;
    gc.n_pads = 4;
    for (int i = 0; i < 4; i++) gc.pads[i] = 1;
    c3s2 = gc;
    c3s2.group = 1;
    c3s2.n_strides = 2;
    c3s2.strides[0] = c3s2.strides[1] = 2;
    gcs2 = c3s2;
    gcs2.group = gc.group;
    int h = add_node(g, KILN_OP_Conv, "stem", 2, (int[]){x, Ws}, &c3s2);
    h = add_node(g, KILN_OP_Relu, "stem_relu", 1, &h, NULL);
    for (int k = 0; k < nb; k++) {
        char nm[7][32];
        static const char *const base[7] = {"a", "a_relu", "b", "b_relu", "c", "add", "relu"};
        for (int q = 0; q < 7; q++) snprintf(nm[q], sizeof nm[q], "%s%d", base[q], k);
        int a = add_node(g, KILN_OP_Conv, nm[0], 2, (int[]){h, Wa}, &c1);
        a = add_node(g, KILN_OP_Relu, nm[1], 1, &a, NULL);
        int b = add_node(g, KILN_OP_Conv, nm[2], 2, (int[]){a, Wb}, k ? &gc : &gcs2);
        b = add_node(g, KILN_OP_Relu, nm[3], 1, &b, NULL);
        int c = add_node(g, KILN_OP_Conv, nm[4], 2, (int[]){b, Wc}, &c1);
        if (k) c = add_node(g, KILN_OP_Add, nm[5], 2, (int[]){c, h}, NULL);
        h = add_node(g, KILN_OP_Relu, nm[6], 1, &c, NULL);
    }
    mark_output(g, add_node(g, KILN_OP_GlobalAveragePool, "gap", 1, &h, NULL));
    kiln__graph_link(g);
    CHECK_OK(kiln__graph_infer(g));
    CHECK_OK(optimize_cuda_fp16(g));
    return g;
}

/* RegNet's and ResNeXt's grouped convolutions (group widths that are
 * multiples of 8) join the NHWC chain (kiln's tensor-core kernel and
 * cuDNN's NHWC engines run them): the whole net is one chain, the stem
 * converting the input, no Transpose. Before, a grouped layer stayed NCHW
 * and cut every block into pieces too short to convert (the whole net ran
 * NCHW: cuDNN's legacy non-tensor-core kernel and layout conversions inside
 * cuDNN). A group width of 4 stays NCHW. */
TEST(cuda_nhwc_grouped) {
    if (!have_cuda()) return;
#if !KILN_HAVE_CUDNN
    printf("built without cuDNN: skipping\n");
    return;
#else
    const kiln_backend_i *cu = kiln__backend_for(KILN_DEVICE_CUDA);
    static const int64_t widths[3] = {24, 8, 4};
    for (int k = 0; k < 3; k++) {
        kiln_graph *g = regnet_net(3, widths[k]);
        int n = 0;
        CHECK_OK(kiln__pass_cuda_nhwc(g, &n));
        CHECK(topo_ok(g));
        int grouped = 0, nhwc_grouped = 0, first = -1;
        live_nodes_of(g, KILN_OP_FusedConv, &first);
        for (int i = 0; i < g->n_nodes; i++) {
            const kiln_node *nd = &g->nodes[i];
            if (nd->dead || nd->op_id != KILN_OP_FusedConv) continue;
            CHECK(kiln__backend_supports(cu, g, nd));
            const kiln_fused_conv_attrs *fa = nd->attrs;
            if (fa->conv.group > 1) {
                grouped++;
                nhwc_grouped += fa->layout == (KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC);
            } else if (widths[k] % 8 == 0) {
                CHECK(fa->layout == (i == first ? KILN_FC_LAYOUT_Y_NHWC : KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC));
            }
        }
        printf("  width %lld: %d layers NHWC, %d of %d grouped layers NHWC, %d Transposes\n", (long long)widths[k], n,
               nhwc_grouped, grouped, live_nodes_of(g, KILN_OP_Transpose, NULL));
        CHECK(grouped == 3);
        if (widths[k] % 8 == 0) CHECK(nhwc_grouped == 3 && live_nodes_of(g, KILN_OP_Transpose, NULL) == 0);
        else CHECK(nhwc_grouped == 0);
        kiln__graph_free(g);
    }
#endif
}

/* Engines built for a batch range (a server's: min 1, max 32) have a
 * dynamic batch in every activation: the same chains as at a fixed batch
 * (a named symbol as ONNX's dim_param gives, or an unknown dim), with the
 * conversions' views taking the batch at run time. Without that the pass
 * kept no chain at all: every convolution NCHW. */
TEST(cuda_nhwc_dynamic_batch) {
    if (!have_cuda()) return;
#if !KILN_HAVE_CUDNN
    printf("built without cuDNN: skipping\n");
    return;
#else
    nhwc_chains_at(KILN_DIM_SYM(0));
    nhwc_mobilenet_at(KILN_DIM_SYM(0));
    /* an unknown batch (no dim_param) too; fuse_conv leaves conv_chain's
     * residual Add of two unknown shapes unfused, so only MobileNet here */
    nhwc_mobilenet_at(KILN_DIM_UNKNOWN);
#endif
}

/* The ONNX model at `path` optimized for fp16 on CUDA, every node placed
 * there (NULL after a failed check). */
static kiln_model *cuda_fp16_model(const char *path) {
    kiln_model *m = NULL;
    CHECK_OK(kiln_model_load_onnx(path, &m));
    if (!m) return NULL;
    kiln_graph *g = m->graph;
    CHECK_OK(optimize_cuda_fp16(g));
    return m;
}

/* The test models of test_cuda_engine's nhwc_dynamic_batch as the builder
 * sees them (ONNX's "batch" dim_param: a symbol), optimized for fp16 on
 * CUDA: every convolution and pool NHWC but the SE blocks' 1x1 ones, the
 * conversions only where the chain meets the NCHW input (tiny_dyncnn's
 * first MaxPool; tiny_mbv3's stem converts it itself) and the `feat`
 * output, and the batch symbolic throughout; tiny_regnet's grouped layers
 * in the chain too. */
TEST(cuda_nhwc_dynamic_models) {
    if (!have_cuda()) return;
#if !KILN_HAVE_CUDNN
    printf("built without cuDNN: skipping\n");
    return;
#else
    const kiln_backend_i *cu = kiln__backend_for(KILN_DEVICE_CUDA);
    static const struct { const char *path; int transposes, convs, pools, ses; } ms[4] = {
        {"tests/data/tiny_dyncnn.onnx", 2, 6, 3, 1}, {"tests/data/tiny_mbv3.onnx", 1, 7, 1, 2},
        {"tests/data/tiny_convnext.onnx", 3, 4, 1, 0}, {"tests/data/tiny_regnet.onnx", 1, 8, 1, 1}};
    for (int k = 0; k < 4; k++) {
        kiln_model *m = cuda_fp16_model(ms[k].path);
        if (!m) continue;
        kiln_graph *g = m->graph;
        int64_t batch = g->values[g->inputs[0]].info.dims[0];
        CHECK(KILN_DIM_IS_SYM(batch));
        int n = 0, convs = 0, pools = 0, ses = 0;
        CHECK_OK(kiln__pass_cuda_nhwc(g, &n));
        CHECK(topo_ok(g));
        CHECK(live_nodes_of(g, KILN_OP_Transpose, NULL) == ms[k].transposes);
        for (int i = 0; i < g->n_nodes; i++) {
            const kiln_node *nd = &g->nodes[i];
            if (nd->dead) continue;
            CHECK(kiln__backend_supports(cu, g, nd));
            const kiln_tinfo *y = &g->values[nd->out[0]].info;
            if (nd->op_id == KILN_OP_FusedConv && !(y->dims[2] == 1 && y->dims[3] == 1)) {
                convs += ((const kiln_fused_conv_attrs *)nd->attrs)->layout != 0;
                CHECK(strstr(kiln__backend_kernel_name(cu, nd), "nhwc") != NULL);
            }
            if (nd->op_id == KILN_OP_MaxPool || nd->op_id == KILN_OP_AveragePool ||
                nd->op_id == KILN_OP_GlobalAveragePool) {
                pools++;
                CHECK(pool_layout(nd) == KILN_POOL_LAYOUT_NHWC);
            }
            if (nd->op_id == KILN_OP_SqueezeExcite) {
                ses++;
                CHECK(((const kiln_se_attrs *)nd->attrs)->layout == KILN_SE_LAYOUT_NHWC);
                CHECK(strstr(kiln__backend_kernel_name(cu, nd), "nhwc") != NULL);
            }
        }
        printf("  %s: %d layers NHWC (%d convolutions, %d pools, %d squeeze-excite)\n", ms[k].path, n, convs,
               pools, ses);
        CHECK(convs == ms[k].convs && pools == ms[k].pools && ses == ms[k].ses);
        check_batch(g, batch);
        kiln_model_free(m);
    }
#endif
}

/* The squeeze-excite gates as exported (fuse_se, passes/fuse_se.c):
 * tiny_mbv3's two (MobileNetV3's ReLU / HardSigmoid and EfficientNet's SiLU
 * / Sigmoid, each after fuse_conv made its 1x1 layers FusedConvs) and
 * se_block.onnx's (EfficientNet's MBConv, dynamic batch) become one
 * kiln.SqueezeExcite each in CUDA plans, fp16 and fp32, with their biases
 * and activations; none with the pass switched off or in a CPU plan (the
 * CPU keeps the three layers). */
TEST(fuse_se_models) {
    if (!have_cuda()) return;
    static const struct {
        const char *path;
        int device, precision;
        uint32_t disabled;
        int ses, gaps, head, acts[2][2]; /* head: GlobalAveragePools not of a gate */
    } cs[] = {
        {"tests/data/tiny_mbv3.onnx", KILN_DEVICE_CUDA, KILN_PRECISION_FP16, 0, 2, 1, 1,
         {{KILN_FC_ACT_RELU, KILN_FC_ACT_HARD_SIGMOID}, {KILN_FC_ACT_SILU, KILN_FC_ACT_SIGMOID}}},
        {"tests/data/tiny_mbv3.onnx", KILN_DEVICE_CUDA, KILN_PRECISION_FP32, 0, 2, 1, 1,
         {{KILN_FC_ACT_RELU, KILN_FC_ACT_HARD_SIGMOID}, {KILN_FC_ACT_SILU, KILN_FC_ACT_SIGMOID}}},
        {"tests/data/tiny_mbv3.onnx", KILN_DEVICE_CUDA, KILN_PRECISION_FP16, 1u << KILN_PASS_FUSE_SE, 0, 3, 1, {{0}}},
        {"tests/data/tiny_mbv3.onnx", KILN_DEVICE_CPU, KILN_PRECISION_FP32, 0, 0, 3, 1, {{0}}},
        {"tests/data/se_block.onnx", KILN_DEVICE_CUDA, KILN_PRECISION_FP16, 0, 1, 0, 0,
         {{KILN_FC_ACT_SILU, KILN_FC_ACT_SIGMOID}}},
        {"tests/data/se_block.onnx", KILN_DEVICE_CPU, KILN_PRECISION_FP32, 0, 0, 1, 0, {{0}}},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        kiln_model *m = NULL;
        CHECK_OK(kiln_model_load_onnx(cs[k].path, &m));
        if (!m) continue;
        kiln_graph *g = m->graph;
        kiln_optimize_opts o = {.device = cs[k].device, .precision = cs[k].precision, .disabled = cs[k].disabled};
        CHECK_OK(kiln__pass_optimize(g, &o));
        CHECK(topo_ok(g));
        int ses = 0, gaps = 0, se_convs = 0;
        for (int i = 0; i < g->n_nodes; i++) {
            const kiln_node *nd = &g->nodes[i];
            if (nd->dead) continue;
            gaps += nd->op_id == KILN_OP_GlobalAveragePool;
            if (nd->op_id == KILN_OP_FusedConv && g->values[nd->in[0]].info.dims[2] == 1) se_convs++;
            if (nd->op_id != KILN_OP_SqueezeExcite) continue;
            const kiln_se_attrs *sa = nd->attrs;
            const kiln_tinfo *x = &g->values[nd->in[0]].info, *y = &g->values[nd->out[0]].info;
            CHECK(ses < 2 && sa->act1 == cs[k].acts[ses][0] && sa->act2 == cs[k].acts[ses][1]);
            CHECK(nd->n_in == 5 && sa->layout == KILN_SE_LAYOUT_NCHW && sa->tactic.id == 0);
            CHECK(y->rank == 4 && y->dims[1] == x->dims[1] && y->dims[2] == 1 && y->dims[3] == 1);
            CHECK(y->dtype == (cs[k].precision == KILN_PRECISION_FP16 ? KILN_DTYPE_FLOAT16 : KILN_DTYPE_FLOAT32));
            for (int j = 1; j < 5; j++) CHECK(g->values[nd->in[j]].info.dtype == y->dtype);
            ses++;
        }
        printf("  %s on %s: %d squeeze-excite layers, %d GlobalAveragePool, %d 1x1 layers on [N, C, 1, 1]\n",
               cs[k].path, cs[k].device == KILN_DEVICE_CUDA ? "CUDA" : "the CPU", ses, gaps, se_convs);
        CHECK(ses == cs[k].ses && gaps == cs[k].gaps && se_convs == 2 * (cs[k].gaps - cs[k].head));
        kiln_model_free(m);
    }
}

/* Output `out` of float32 graph g run on the host node by node with the
 * ops' reference kernels (op->cpu, through kiln__call_run_host), its first
 * input x of dims xd; *n gets its element count. NULL on failure (checked). */
static float *host_run(const kiln_graph *g, const int64_t *xd, const float *x, int out, int64_t *n) {
    kiln_tinfo *info = calloc((size_t)g->n_values + 1, sizeof *info);
    void **data = calloc((size_t)g->n_values + 1, sizeof *data);
    bool *owned = calloc((size_t)g->n_values + 1, sizeof *owned);
    float *y = NULL;
    for (int v = 0; v < g->n_values; v++) {
        info[v] = g->values[v].info;
        data[v] = g->values[v].data;
    }
    const int xi = g->inputs[0];
    memcpy(info[xi].dims, xd, (size_t)info[xi].rank * sizeof *xd);
    data[xi] = (void *)x;
    bool ok = true;
    for (int ni = 0; ni < g->n_nodes && ok; ni++) {
        const kiln_node *nd = &g->nodes[ni];
        if (nd->dead) continue;
        kiln_call c;
        CHECK_OK(kiln__call_begin(&c, g, nd));
        for (int i = 0; i < nd->n_in; i++)
            if (nd->in[i] >= 0) {
                info[nd->in[i]].data = data[nd->in[i]];
                kiln__call_input(&c, i, &info[nd->in[i]], data[nd->in[i]]);
            }
        kiln_status s = kiln__call_infer(&c, true, NULL, true);
        if (s == KILN_OK) s = kiln__call_run_host(&c, NULL, SIZE_MAX);
        if (s != KILN_OK) {
            printf("  host run of '%s': %s\n", nd->name, kiln_last_error());
            ok = false;
        }
        for (int i = 0; ok && i < nd->n_out; i++) {
            if (nd->out[i] < 0) {
                kiln__aligned_free(c.out_t[i].data);
                continue;
            }
            info[nd->out[i]] = c.out[i];
            data[nd->out[i]] = c.out_t[i].data;
            owned[nd->out[i]] = true;
        }
        kiln__call_end(&c);
    }
    CHECK(ok);
    if (ok) {
        *n = kiln__numel(info[out].rank, info[out].dims);
        y = malloc((size_t)*n * sizeof *y);
        memcpy(y, data[out], (size_t)*n * sizeof *y);
    }
    for (int v = 0; v < g->n_values; v++)
        if (owned[v]) kiln__aligned_free(data[v]);
    free(info);
    free(data);
    free(owned);
    return y;
}

/* The fused layer computes what the three layers did: the CUDA fp32 plans
 * of tiny_mbv3 (MobileNetV3's and EfficientNet's gates) and se_block.onnx,
 * with and without fuse_se, run on the host with the reference kernels
 * (kiln.SqueezeExcite's against GlobalAveragePool's and FusedConv's) at
 * batch 3 agree on every output to 1e-5 of its largest value. se_odd.onnx
 * (tests/data/gen_tiny.py): the gates fuse_se must keep (pooled or hidden
 * value read elsewhere or a graph output, a grouped or padded 1x1 layer, 6
 * channels out of 8) stay three layers; those it fuses (strides and
 * dilations on 1x1 layers, the gate into an Add, two gates sharing weights,
 * B1 absent with B2 present) compute the same. */
TEST(fuse_se_same_outputs) {
    if (!have_cuda()) return;
    static const char *const paths[3] = {"tests/data/tiny_mbv3.onnx", "tests/data/se_block.onnx",
                                         "tests/data/se_odd.onnx"};
    static const int ses[3] = {2, 1, 6};
    for (int k = 0; k < 3; k++) {
        kiln_model *m[2] = {NULL, NULL};
        for (int f = 0; f < 2; f++) {
            CHECK_OK(kiln_model_load_onnx(paths[k], &m[f]));
            if (!m[f]) continue;
            kiln_optimize_opts o = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP32,
                                    .disabled = f ? 0 : 1u << KILN_PASS_FUSE_SE};
            CHECK_OK(kiln__pass_optimize(m[f]->graph, &o));
        }
        if (!m[0] || !m[1]) continue;
        CHECK(live_nodes_of(m[0]->graph, KILN_OP_SqueezeExcite, NULL) == 0);
        const int n_se = live_nodes_of(m[1]->graph, KILN_OP_SqueezeExcite, NULL);
        if (n_se != ses[k]) printf("  %s: %d kiln.SqueezeExcite layers, %d expected\n", paths[k], n_se, ses[k]);
        CHECK(n_se == ses[k]);
        for (int i = 0; k == 2 && i < m[1]->graph->n_nodes; i++) { /* which gates */
            const kiln_graph *g = m[1]->graph;
            const kiln_node *nd = &g->nodes[i];
            if (nd->dead || nd->op_id != KILN_OP_SqueezeExcite) continue;
            const char *y = g->values[nd->out[0]].name;
            static const char *const fused[] = {"plain_", "strided_", "add_", "shared1_", "shared2_", "nob1_"};
            bool known = false;
            for (size_t f = 0; f < sizeof fused / sizeof fused[0]; f++) known |= !strncmp(y, fused[f], strlen(fused[f]));
            if (!known) printf("  se_odd: gate '%s' fused\n", y);
            CHECK(known);
            CHECK(!strncmp(y, "nob1_", 5) ? nd->n_in == 5 && nd->in[3] < 0 : nd->n_in == 5 && nd->in[3] >= 0);
        }
        const kiln_tinfo *xi = &m[0]->graph->values[m[0]->graph->inputs[0]].info;
        int64_t xd[4] = {3, xi->dims[1], xi->dims[2], xi->dims[3]}, nx = 3 * xd[1] * xd[2] * xd[3];
        float *x = malloc((size_t)nx * sizeof *x);
        for (int64_t i = 0; i < nx; i++) x[i] = (float)((i * 7919) % 2001 - 1000) / 500.0f;
        for (int o = 0; o < m[0]->graph->n_outputs; o++) {
            int64_t n0 = 0, n1 = 0;
            float *y0 = host_run(m[0]->graph, xd, x, m[0]->graph->outputs[o], &n0);
            float *y1 = host_run(m[1]->graph, xd, x, m[1]->graph->outputs[o], &n1);
            if (y0 && y1 && n0 == n1 && n0 > 0) {
                double err = 0, big = 0;
                for (int64_t i = 0; i < n0; i++) {
                    err = fmax(err, fabs((double)y0[i] - y1[i]));
                    big = fmax(big, fabs((double)y0[i]));
                }
                printf("  %s output %d: %lld values, max |fused - unfused| %.3g (max |y| %.3g)\n", paths[k], o,
                       (long long)n0, err, big);
                CHECK(err <= 1e-5 * big && big > 0);
            } else {
                CHECK(y0 && y1 && n0 == n1);
            }
            free(y0);
            free(y1);
        }
        free(x);
        kiln_model_free(m[0]);
        kiln_model_free(m[1]);
    }
}

/* A ConvNeXt-style net (tests/data/tiny_convnext.onnx: torchvision's
 * convnext as torch exports it, in small) optimized for fp16 on CUDA: one
 * NHWC chain from the stem (which converts the input itself) to the
 * GlobalAveragePool. The Transposes around each LayerNorm and MLP are views
 * of the NHWC bytes (the LayerNorm reads the depthwise layer's output, the
 * residual Pointwise the second Linear's, both through a Reshape), the 7x7
 * depthwise layers run kiln's NHWC kernel, the layer scale [C, 1, 1]
 * broadcasts through views; the only Transposes left are the conversion of
 * the `feat` output (the first depthwise layer's) and the head's two on
 * [N, C, 1, 1] values. Without the views each depthwise layer stayed NCHW
 * between two Transposes (8 of them here, 44 in convnext_tiny). */
TEST(cuda_nhwc_convnext) {
    if (!have_cuda()) return;
#if !KILN_HAVE_CUDNN
    printf("built without cuDNN: skipping\n");
    return;
#else
    const kiln_backend_i *cu = kiln__backend_for(KILN_DEVICE_CUDA);
    kiln_model *m = cuda_fp16_model("tests/data/tiny_convnext.onnx");
    if (!m) return;
    kiln_graph *g = m->graph;
    int64_t batch = g->values[g->inputs[0]].info.dims[0];
    /* (the layer scale folded and the residual in the second Linear: one
     * Transpose fewer, a stage's first block's residual read through a new one) */
    CHECK(live_nodes_of(g, KILN_OP_Transpose, NULL) == 9);
    int n = 0;
    CHECK_OK(kiln__pass_cuda_nhwc(g, &n));
    CHECK(topo_ok(g) && no_dead(g));
    CHECK(n > 0);
    int dws = 0, convs = 0, lns = 0, pws = 0, moved = 0, first = -1, resmm = 0;
    live_nodes_of(g, KILN_OP_FusedConv, &first);
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *nd = &g->nodes[i];
        if (nd->dead) continue;
        CHECK(kiln__backend_supports(cu, g, nd));
        const kiln_tinfo *x = nd->n_in > 0 && nd->in[0] >= 0 ? &g->values[nd->in[0]].info : NULL;
        int pr = nd->n_in > 0 && nd->in[0] >= 0 ? g->values[nd->in[0]].producer : -1;
        /* (the head's Transposes of [N, C, 1, 1] <-> [N, 1, 1, C] move no byte) */
        if (nd->op_id == KILN_OP_Transpose && (x->dims[1] != 1) + (x->dims[2] != 1) + (x->dims[3] != 1) > 1) {
            moved++;
            CHECK(strstr(nd->name, "feat") && strstr(nd->name, "kiln_to_nchw"));
        }
        if (nd->op_id == KILN_OP_FusedConv) {
            const kiln_fused_conv_attrs *fa = nd->attrs;
            int32_t want = i == first ? KILN_FC_LAYOUT_Y_NHWC : KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
            CHECK(fa->layout == want);
            convs++;
            if (fa->conv.group > 1) {
                dws++;
                CHECK(!strcmp(kiln__backend_kernel_name(cu, nd), "cuda.dwconv.nhwc"));
                CHECK(g->values[nd->in[1]].info.dims[2] == 7 && fa->conv.pads[0] == 3);
            }
        }
        if (nd->op_id == KILN_OP_LayerNormalization && x->dims[1] > 1) {
            /* [N, H, W, C]: a view of an NHWC layer's output, or (the
             * downsampling LayerNorm) the last block's FusedMatMul's */
            lns++;
            CHECK(pr >= 0 && (g->nodes[pr].op_id == KILN_OP_Reshape || g->nodes[pr].op_id == KILN_OP_FusedMatMul));
        }
        /* no layer-scale and residual Pointwise: both in the second Linear */
        pws += nd->op_id == KILN_OP_Pointwise || nd->op_id == KILN_OP_Mul || nd->op_id == KILN_OP_Add;
        if (nd->op_id == KILN_OP_FusedMatMul && nd->n_in == 4 && nd->in[3] >= 0) {
            /* the residual read [N, H, W, C]: the stem's LayerNorm output, or
             * a view of the downsampling conv's NHWC output */
            resmm++;
            const kiln_tinfo *r = &g->values[nd->in[3]].info, *y = &g->values[nd->out[0]].info;
            int rp = g->values[nd->in[3]].producer;
            CHECK(!memcmp(r->dims, y->dims, sizeof r->dims) && y->dims[1] == y->dims[2] && y->dims[3] > y->dims[1]);
            CHECK(rp >= 0 && (g->nodes[rp].op_id == KILN_OP_Reshape || g->nodes[rp].op_id == KILN_OP_LayerNormalization));
        }
    }
    printf("  %d layers NHWC, %d convolutions (%d depthwise), %d Transposes moving bytes\n", n, convs, dws, moved);
    CHECK(dws == 2 && convs == 4 && lns == 4 && pws == 0 && resmm == 2 && moved == 1);
    CHECK(live_nodes_of(g, KILN_OP_Transpose, NULL) == 3);
    check_batch(g, batch);
    kiln_model_free(m);
#endif
}

/* x [2, 16, 8, 8] -> Transpose(0,2,3,1) -> Sigmoid -> Transpose(0,3,1,2)
 * -> (dw: depthwise 7x7 pad 3 -> Transpose(0,2,3,1) -> Sigmoid) -> output;
 * fp16 on CUDA. */
static kiln_graph *perm_net(bool dw) {
    kiln_graph *g = NULL;
    if (kiln__graph_create(&g) != KILN_OK) abort();
    int x = add_val(g, "x");
    g->values[x].info.dtype = KILN_DTYPE_FLOAT32;
    g->values[x].info.rank = 4;
    int64_t xd[4] = {2, 16, 8, 8}, wd[4] = {16, 1, 7, 7};
    memcpy(g->values[x].info.dims, xd, sizeof xd);
    g->values[x].flags |= KILN_VALUE_INPUT;
    if (kiln__grow((void **)&g->inputs, &g->cap_inputs, 1, sizeof(int)) != KILN_OK) abort();
    g->inputs[g->n_inputs++] = x;
    static float w[16 * 49];
    for (int i = 0; i < 16 * 49; i++) w[i] = (float)(i % 9 - 4) * 0.03f;
    kiln_transpose_attrs in = {.n_perm = 4, .perm = {0, 2, 3, 1}}, out = {.n_perm = 4, .perm = {0, 3, 1, 2}};
    int h = add_node(g, KILN_OP_Transpose, "t_in", 1, &x, &in);
    h = add_node(g, KILN_OP_Sigmoid, "sig", 1, &h, NULL);
    h = add_node(g, KILN_OP_Transpose, "t_out", 1, &h, &out);
    if (dw) {
        kiln_conv_attrs ca;
        memset(&ca, 0, sizeof ca);
        ca.group = 16;
        ca.n_pads = 4;
        for (int i = 0; i < 4; i++) ca.pads[i] = 3;
        h = add_node(g, KILN_OP_Conv, "dw", 2, (int[]){h, add_const(g, "W", KILN_DTYPE_FLOAT32, 4, wd, w)}, &ca);
        h = add_node(g, KILN_OP_Transpose, "t_in2", 1, &h, &in);
        h = add_node(g, KILN_OP_Sigmoid, "sig2", 1, &h, NULL);
    }
    mark_output(g, h);
    kiln__graph_link(g);
    CHECK_OK(kiln__graph_infer(g));
    CHECK_OK(optimize_cuda_fp16(g));
    return g;
}

/* Which Transposes become views: not one whose input comes NCHW (a graph
 * input) or whose output no NHWC layer reads (a graph output) -- there the
 * pass changes nothing; but a Transpose(0,3,1,2) feeding a depthwise layer
 * and the Transpose(0,2,3,1) of that layer's output do, with no conversion
 * (the first Transpose stays). */
TEST(cuda_nhwc_perm_views) {
    if (!have_cuda()) return;
#if !KILN_HAVE_CUDNN
    printf("built without cuDNN: skipping\n");
    return;
#else
    kiln_graph *g = perm_net(false);
    int n = -1;
    CHECK_OK(kiln__pass_cuda_nhwc(g, &n));
    CHECK(n == 0 && live_nodes_of(g, KILN_OP_Transpose, NULL) == 2 && live_nodes_of(g, KILN_OP_Reshape, NULL) == 0);
    kiln__graph_free(g);
    g = perm_net(true);
    CHECK(live_nodes_of(g, KILN_OP_Transpose, NULL) == 3);
    CHECK_OK(kiln__pass_cuda_nhwc(g, &n));
    CHECK(topo_ok(g) && no_dead(g));
    CHECK(n == 3);
    int first = -1, conv = -1;
    CHECK(live_nodes_of(g, KILN_OP_Transpose, &first) == 1 && live_nodes_of(g, KILN_OP_FusedConv, &conv) == 1);
    if (first >= 0) CHECK(!strcmp(g->nodes[first].name, "t_in"));
    if (conv >= 0) {
        const kiln_node *nd = &g->nodes[conv];
        CHECK(((const kiln_fused_conv_attrs *)nd->attrs)->layout == (KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC));
        CHECK(g->nodes[g->values[nd->in[0]].producer].op_id == KILN_OP_Reshape);
    }
    CHECK(live_nodes_of(g, KILN_OP_Reshape, NULL) == 2);
    kiln__graph_free(g);
#endif
}

/* The views the NHWC pass makes (a Transpose between the two orders of one
 * tensor made a Reshape of the bytes, and the conversions' Reshapes) pass
 * the layout on as the pass means it: every plan it makes passes the
 * engine checks, and a FusedConv's layout field changed beside such a view
 * is refused. Those ran: ConvNeXt's depthwise layer set to write NCHW
 * before the view its LayerNorm reads [N, H, W, C], perm_net's reading
 * the view of its Sigmoid's [N, H, W, C] output as NCHW, or writing NCHW
 * into the view back: each a wrong result without a word. The debugger's
 * layouts (kiln__value_layout) are the checks' (probe8). */
TEST(cuda_nhwc_views_checked) {
    if (!have_cuda()) return;
#if !KILN_HAVE_CUDNN
    printf("built without cuDNN: skipping\n");
    return;
#else
    int n = 0;
    /* plans the pass makes: views out, in, conversions, per-channel views */
    kiln_graph *gs[4] = {perm_net(true), mbv3_net(2, true, true, 2), nhwc_chain(2, 3, true, true, 2, &n), NULL};
    kiln_model *m = cuda_fp16_model("tests/data/tiny_convnext.onnx");
    for (int k = 0; k < 3; k++) {
        if (k < 2) CHECK_OK(kiln__pass_cuda_nhwc(gs[k], &n));
        CHECK(n > 0);
        CHECK_OK(check_plan(gs[k]));
    }
    if (m) {
        gs[3] = m->graph;
        CHECK_OK(kiln__pass_cuda_nhwc(gs[3], &n));
        CHECK(n > 0);
        CHECK_OK(check_plan(gs[3]));
    }
    /* the debugger reads each tensor in the layout it is written in: the SE
     * blocks' Muls (per-channel: computed over views) write NHWC bytes
     * under the model's names, which it read as NCHW (kiln debug compare on
     * a CUDA fp16 engine: a difference where there is none) */
    int muls = 0;
    for (int i = 0; i < gs[1]->n_nodes; i++) {
        const kiln_node *nd = &gs[1]->nodes[i];
        if (nd->dead || !strstr(nd->name, "/kiln_nhwc_out_view")) continue;
        muls++;
        CHECK(kiln__value_layout(gs[1], nd->out[0]) == KILN_VLAYOUT_NHWC);
        CHECK(kiln__value_layout(gs[1], nd->in[0]) == KILN_VLAYOUT_PLAIN); /* (the [N, H, W, C] view) */
    }
    CHECK(muls >= 2);
    /* perm_net: t_in -> Sigmoid -> view -> dw (reads it NHWC) -> view -> Sigmoid */
    kiln_graph *g = gs[0];
    int dw = -1;
    live_nodes_of(g, KILN_OP_FusedConv, &dw);
    if (dw >= 0) {
        CHECK_ERR(check_with_layout(g, dw, KILN_FC_LAYOUT_Y_NHWC), KILN_ERR_FORMAT,
                  "(FusedConv) reads its input, value ");
        CHECK(strstr(kiln_last_error(), "as nchw, but it is nhwc (node ") != NULL);
        CHECK_ERR(check_with_layout(g, dw, KILN_FC_LAYOUT_X_NHWC), KILN_ERR_FORMAT,
                  "(Reshape), which kiln added, reads value ");
        CHECK(strstr(kiln_last_error(), "as nhwc bytes of [2x16x8x8], but it is nchw (node ") != NULL);
        CHECK_OK(check_plan(g));
    }
    /* ConvNeXt: a depthwise layer's NHWC output read [N, H, W, C] through a view */
    int refused = 0, dws = 0;
    for (int i = 0; gs[3] && i < gs[3]->n_nodes; i++) {
        const kiln_node *nd = &gs[3]->nodes[i];
        if (nd->dead || nd->op_id != KILN_OP_FusedConv || ((const kiln_fused_conv_attrs *)nd->attrs)->conv.group < 2)
            continue;
        dws++;
        int32_t l = ((const kiln_fused_conv_attrs *)nd->attrs)->layout;
        if (check_with_layout(gs[3], i, l & ~KILN_FC_LAYOUT_Y_NHWC) == KILN_ERR_FORMAT &&
            strstr(kiln_last_error(), "which kiln added, reads value "))
            refused++;
    }
    CHECK(dws == 2 && refused == dws);
    for (int k = 0; k < 3; k++) kiln__graph_free(gs[k]);
    kiln_model_free(m);
#endif
}

TEST(left_alone) {
    if (!have_cuda()) return;
    /* fp32 CUDA plans and CPU plans get no casts */
    int precs[2] = {KILN_PRECISION_FP32, KILN_PRECISION_FP16};
    int devs[2] = {KILN_DEVICE_CUDA, KILN_DEVICE_CPU};
    for (int k = 0; k < 2; k++) {
        kiln_graph *g = make_graph();
        CHECK_OK(optimize(g, devs[k], precs[k], NULL, 0, true));
        CHECK(count_op(g, KILN_OP_Cast) == 0);
        for (int v = 0; v < g->n_values; v++)
            CHECK(g->values[v].info.dtype != KILN_DTYPE_FLOAT16);
        kiln__graph_free(g);
    }
}

TEST(unknown_layer) {
    if (!have_cuda()) return;
    kiln_graph *g = make_graph();
    const char *keep[] = {"relu", "no_such_layer"};
    CHECK_ERR(optimize(g, KILN_DEVICE_CUDA, KILN_PRECISION_FP16, keep, 2, true),
              KILN_ERR_INVALID_ARGUMENT, "no_such_layer");
    kiln__graph_free(g);
}

TEST(fused_names) {
    CHECK(kiln__layer_name_matches("conv1+bn1+relu1", "bn1"));
    CHECK(kiln__layer_name_matches("conv1", "conv1"));
    CHECK(!kiln__layer_name_matches("conv1+bn1", "bn"));
    CHECK(!kiln__layer_name_matches("conv10", "conv1"));
}

TEST(builder_api) {
    kiln_builder *b = NULL;
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_layer_precision(b, "relu", KILN_PRECISION_FP32));
    CHECK_OK(kiln_builder_set_layer_precision(b, "relu", KILN_PRECISION_FP32)); /* once */
    CHECK(b->n_fp32_layers == 1);
    CHECK_ERR(kiln_builder_set_layer_precision(b, "relu", KILN_PRECISION_FP16),
              KILN_ERR_INVALID_ARGUMENT, "only fp32");
    CHECK_ERR(kiln_builder_set_layer_precision(b, "", KILN_PRECISION_FP32),
              KILN_ERR_INVALID_ARGUMENT, "no layer name");
    CHECK_ERR(kiln_builder_set_layer_precision(NULL, "x", KILN_PRECISION_FP32),
              KILN_ERR_INVALID_ARGUMENT, "builder is NULL");
    kiln_builder_free(b);
}

/* The pointwise fusion runs after the precision pass: in an fp16 plan, the
 * Casts it added join the elementwise nodes around them, so x (fp32) ->
 * Sigmoid, Mul, Relu -> y (fp32) is one kiln.Pointwise reading and writing
 * fp32 that rounds to fp16 where the Cast did; the ReduceSum after the
 * Relu stays fp32 and reads the same (fp32) output. */
TEST(pointwise_fp16) {
    if (!have_cuda()) return;
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    int x = add_val(g, "x");
    g->values[x].info.dtype = KILN_DTYPE_FLOAT32;
    g->values[x].info.rank = 2;
    g->values[x].info.dims[0] = 4;
    g->values[x].info.dims[1] = 64;
    g->values[x].flags |= KILN_VALUE_INPUT;
    CHECK_OK(kiln__grow((void **)&g->inputs, &g->cap_inputs, 1, sizeof(int)));
    g->inputs[g->n_inputs++] = x;
    int s = add_node(g, KILN_OP_Sigmoid, "sig", 1, &x, NULL);
    int m = add_node(g, KILN_OP_Mul, "mul", 2, (int[]){x, s}, NULL);
    int r = add_node(g, KILN_OP_Relu, "relu", 1, &m, NULL);
    kiln_reduce_attrs ra = {.keepdims = 1};
    int rs = add_node(g, KILN_OP_ReduceSum, "rsum", 1, &r, &ra);
    mark_output(g, r);
    mark_output(g, rs);
    kiln__graph_link(g);
    CHECK_OK(kiln__graph_infer(g));
    CHECK_OK(optimize(g, KILN_DEVICE_CUDA, KILN_PRECISION_FP16, NULL, 0, false));
    CHECK_OK(kiln__pass_dce(g));
    CHECK(topo_ok(g));
    CHECK(count_op(g, KILN_OP_Pointwise) == 1 && count_op(g, KILN_OP_Cast) == 0 && count_op(g, KILN_OP_Sigmoid) == 0);
    const kiln_backend_i *be = kiln__backend_for(KILN_DEVICE_CUDA);
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead) continue;
        CHECK(kiln__backend_supports(be, g, n));
        if (n->op_id != KILN_OP_Pointwise) continue;
        const kiln_pw_attrs *at = n->attrs;
        CHECK(at->n_in == 1 && at->in_dtype[0] == KILN_DTYPE_FLOAT32);
        CHECK(at->n_out == 1 && at->out_dtype[0] == KILN_DTYPE_FLOAT32);
        CHECK(at->instr[0].op == KILN_PW_ROUND_F16); /* the input's Cast */
    }
    kiln__graph_free(g);
}

int main(void) {
    RUN(fp16_plan);
    RUN(bf16_plan);
    RUN(fused_fp16);
    RUN(fused_cpu_refuses_fp16);
    RUN(add_layernorm_fp16);
    RUN(rmsnorm_reduced);
    RUN(cuda_nhwc_chain);
    RUN(cuda_nhwc_mobilenet);
    RUN(cuda_nhwc_grouped);
    RUN(fuse_se_models);
    RUN(fuse_se_same_outputs);
    RUN(cuda_nhwc_dynamic_batch);
    RUN(cuda_nhwc_dynamic_models);
    RUN(cuda_nhwc_convnext);
    RUN(cuda_nhwc_perm_views);
    RUN(cuda_nhwc_views_checked);
    RUN(left_alone);
    RUN(unknown_layer);
    RUN(fused_names);
    RUN(builder_api);
    RUN(pointwise_fp16);
    return test_summary();
}
