/* test_registry.c -- what the rest of kiln relies on in the operator
 * registry and the backends' kernel tables, instead of naming ops:
 *
 *   - the fused layers (domain "kiln") flagged KILN_OP_FLAG_REDUCIBLE infer
 *     float16 and bfloat16 inputs as such (the precision pass runs after
 *     the fusions because of it: kiln__precision_first);
 *   - the flags are where the passes and the planner expect them (views,
 *     fp16-eligible, layouts);
 *   - every row of the CPU kernel table belongs to an op of the registry,
 *     and every op with a reference kernel has a CPU kernel. */
#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "ops/fused_conv.h"
#include "test.h"

/* Whether op `name` (domain "kiln") infers output 0 as t for a small valid
 * node with float inputs of type t (and does so in float32). */
static bool infers_as(const char *name, int n_in, const int64_t (*dims)[4], const int *ranks, const void *attrs,
                      kiln_dtype t) {
    const kiln_op_def *op = kiln__op_by_id(kiln__op_find("kiln", name));
    if (!op) return false;
    unsigned char zero[1024] = {0};
    if (!attrs) attrs = zero;
    bool ok[2];
    kiln_dtype ts[2] = {KILN_DTYPE_FLOAT32, t};
    for (int k = 0; k < 2; k++) {
        kiln_tinfo in[4], out;
        const kiln_tinfo *ip[4];
        kiln_tinfo *op_ = &out;
        for (int i = 0; i < n_in; i++) {
            memset(&in[i], 0, sizeof in[i]);
            in[i].dtype = ts[k];
            in[i].rank = ranks[i];
            memcpy(in[i].dims, dims[i], sizeof(int64_t) * (size_t)ranks[i]);
            ip[i] = &in[i];
        }
        memset(&out, 0, sizeof out);
        kiln_infer_args ia = {.op = op, .attrs = attrs, .node_name = "probe", .n_in = n_in, .n_out = 1, .in = ip,
                              .out = &op_};
        ok[k] = kiln__infer(&ia) == KILN_OK && out.dtype == ts[k];
        kiln__clear_error();
    }
    return ok[0] && ok[1];
}

TEST(test_reducible_fused_layers_infer_half) {
    static const int64_t mm[2][4] = {{2, 4}, {4, 3}}, x1[1][4] = {{4}}, cv[2][4] = {{1, 2, 5, 5}, {3, 2, 3, 3}};
    static const int64_t se[3][4] = {{2, 8, 5, 5}, {2, 8, 1, 1}, {8, 2, 1, 1}};
    static const int r2[2] = {2, 2}, r1[1] = {1}, r4[2] = {4, 4}, r3[3] = {4, 4, 4};
    kiln_fused_conv_attrs fa;
    memset(&fa, 0, sizeof fa);
    fa.conv.group = 1;
    kiln_dtype half[2] = {KILN_DTYPE_FLOAT16, KILN_DTYPE_BFLOAT16};
    for (int k = 0; k < 2; k++) {
        CHECK(infers_as("FusedMatMul", 2, mm, r2, NULL, half[k]));
        CHECK(infers_as("Gelu", 1, x1, r1, NULL, half[k]));
        CHECK(infers_as("FusedConv", 2, cv, r4, &fa, half[k]));
        CHECK(infers_as("SqueezeExcite", 3, se, r3, NULL, half[k])); /* X, W1, W2 */
    }
    const char *names[] = {"FusedMatMul", "Gelu", "FusedConv", "Attention", "SqueezeExcite"};
    for (int i = 0; i < 5; i++) {
        const kiln_op_def *op = kiln__op_by_id(kiln__op_find("kiln", names[i]));
        CHECK(op && (op->flags & KILN_OP_FLAG_REDUCIBLE));
    }
}

TEST(test_descriptor_flags) {
    CHECK(kiln__op_by_id(KILN_OP_Reshape)->flags & KILN_OP_FLAG_VIEW);
    CHECK(kiln__op_by_id(KILN_OP_Identity)->flags & KILN_OP_FLAG_VIEW);
    CHECK(!(kiln__op_by_id(KILN_OP_Transpose)->flags & KILN_OP_FLAG_VIEW));
    CHECK(kiln__op_by_id(KILN_OP_Add)->flags & KILN_OP_FLAG_REDUCIBLE);
    CHECK(!(kiln__op_by_id(KILN_OP_ReduceSum)->flags & KILN_OP_FLAG_REDUCIBLE)); /* sum-like */
    CHECK(!(kiln__op_by_id(KILN_OP_And)->flags & KILN_OP_FLAG_REDUCIBLE));
    CHECK(kiln__op_by_id(KILN_OP_LayerNormalization)->flags & KILN_OP_FLAG_REDUCIBLE_OUT0);
    /* layouts: the ops whose attrs carry one */
    int with_layout = 0;
    for (int id = 1; id < KILN_OP_ID_LIMIT; id++) {
        const kiln_op_def *op = kiln__op_by_id(id);
        if (!op) continue;
        CHECK(!op->layout_field == !op->layout_io);
        with_layout += op->layout_field != NULL;
    }
    CHECK(with_layout == 6); /* FusedConv, PwDwConv, SqueezeExcite, MaxPool, AveragePool, GlobalAveragePool */
    kiln_fused_conv_attrs fa;
    memset(&fa, 0, sizeof fa);
    fa.layout = KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_C16;
    const kiln_op_def *fc = kiln__op_by_id(KILN_OP_FusedConv);
    CHECK(*fc->layout_field(&fa) == fa.layout);
    kiln_io_layout io;
    fc->layout_io(fa.layout, &io);
    CHECK(io.x == KILN_VLAYOUT_NHWC && io.y == KILN_VLAYOUT_C16 && !io.r_nhwc);
}

TEST(test_kernel_tables) {
    int n_ops = 0, n_rows = 0;
    const kiln_backend_i *cpu = kiln__backend_for(KILN_DEVICE_CPU);
    for (int id = 0; id < KILN_OP_ID_LIMIT; id++) {
        const kiln_op_def *op = kiln__op_by_id(id);
        const kiln_kernel *k = kiln__cpu_kernel_for(id);
        n_ops += op != NULL;
        if (!op) {
            CHECK(!k); /* a row without an op */
            continue;
        }
        if (op->cpu) CHECK(k && k->run);
        if (k && strcmp(k->name, "cpu")) n_rows++;
        CHECK(cpu->kernel_for(id) == k);
    }
    CHECK(n_ops == KILN_OP_COUNT);
    (void)n_rows;
}

int main(void) {
    RUN(test_reducible_fused_layers_infer_half);
    RUN(test_descriptor_flags);
    RUN(test_kernel_tables);
    return test_summary();
}
