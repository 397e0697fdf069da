/* cpu_table.c -- THE CPU kernel table: one row per op whose CPU kernel is
 * more than its reference kernel (tactics, an in-place input, a kernel of
 * its own), indexed by op id (src/ops/ops.def):
 *
 *     [KILN_OP_<Op>] = {.name = "cpu", .run = ..., .tactics = ..., ...},
 *
 * (kernel.h says what each field means). Every other op with a reference
 * kernel (op->cpu) runs that, under the name "cpu". */
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/kernels/add_layernorm_cpu.h"
#include "backends/cpu/kernels/fused_conv_cpu.h"
#include "backends/cpu/kernels/fused_transformer_cpu.h"
#include "backends/cpu/kernels/pool_cpu.h"

/* Adding or removing an op: give it a row below if the CPU runs it with more
 * than its reference kernel, then update the count. */
_Static_assert(KILN_OP_COUNT == 173, "the op registry changed: see this table, then update the count");

static kiln_status cpu_ref_run(const kiln_kernel_args *a) { return a->op->cpu(a); }

/* An op's reference kernel as the CPU backend runs it. */
static const kiln_kernel cpu_ref = {.name = "cpu", .run = cpu_ref_run};

/* kiln.SqueezeExcite: the CPU keeps the squeeze-excite gate as its three
 * layers (GlobalAveragePool and two 1x1 FusedConvs on tuned GEMM kernels),
 * so the pass (passes/fuse_se.c) does not make it for CPU plans; a layer an
 * engine holds anyway runs the reference kernel (docs/cuda.md, "One
 * squeeze-excite layer"). */
static bool cpu_se_supports(const kiln_graph *g, const kiln_node *n) {
    (void)g;
    (void)n;
    return false;
}

static const kiln_kernel cpu_kernels[KILN_OP_ID_LIMIT] = {
    [KILN_OP_FusedConv] = {.name = "cpu", .run = kiln__cpu_fc_run, .workspace = kiln__cpu_fc_workspace,
                           .tactics = kiln__cpu_fc_tactics,
                           .tactic_name = kiln__cpu_fc_tactic_name,
                           .tactic_fast_math = kiln__cpu_fc_tactic_fast_math,
                           .inplace_input = kiln__cpu_fc_inplace_input,
                           .tune_prepare = kiln__cpu_fc_tune_prepare},
    [KILN_OP_PwDwConv] = {.name = "cpu", .supports = kiln__cpu_pwdw_supports, .run = kiln__cpu_pwdw_run,
                          .workspace = kiln__cpu_pwdw_workspace},
    [KILN_OP_FusedMatMul] = {.name = "cpu", .run = kiln__cpu_fmm_run, .workspace = kiln__cpu_fmm_workspace,
                             .tactics = kiln__cpu_fmm_tactics,
                             .tactic_name = kiln__cpu_fmm_tactic_name},
    [KILN_OP_Attention] = {.name = "cpu", .run = kiln__cpu_attn_run, .workspace = kiln__cpu_attn_workspace,
                           .tactics = kiln__cpu_attn_tactics,
                           .tactic_name = kiln__cpu_attn_tactic_name},
    [KILN_OP_SqueezeExcite] = {.name = "cpu", .supports = cpu_se_supports, .run = cpu_ref_run},
    [KILN_OP_AddLayerNorm] = {.name = "cpu", .run = kiln__cpu_add_ln_run, .workspace = kiln__cpu_add_ln_workspace},
    /* the NHWC / nChw16c layouts of the CPU's chains (cpu_layout.c) */
    [KILN_OP_MaxPool] = {.name = "cpu", .run = kiln__cpu_maxpool_run},
    [KILN_OP_GlobalAveragePool] = {.name = "cpu", .run = kiln__cpu_gap_run},
};

const kiln_kernel *kiln__cpu_kernel_for(int op_id) {
    if (op_id <= 0 || op_id >= KILN_OP_ID_LIMIT) return NULL;
    if (cpu_kernels[op_id].run) return &cpu_kernels[op_id];
    const kiln_op_def *op = kiln__op_by_id(op_id);
    return op && op->cpu ? &cpu_ref : NULL;
}
