/* fused_conv_cpu.h -- the CPU backend's kernel of kiln.FusedConv
 * (fused_conv_cpu.c; the op is src/ops/fused_conv.h): its tactics, the
 * kernels behind them (conv_wino.h, conv_direct.h, oneDNN in
 * dnnl_conv.c), and the functions its row of the CPU table names. */
#ifndef KILN_FUSED_CONV_CPU_H
#define KILN_FUSED_CONV_CPU_H

#include "ir/ir.h"
#include "ops/fused_conv.h"

/* CPU tactics (kiln_tactic.id) of kiln.FusedConv. */
enum {
    KILN_FC_TACTIC_OWN = 0,          /* kiln's kernels (im2col/pointwise + sgemm, depthwise) */
    KILN_FC_TACTIC_DNNL_PLAIN = 1,   /* oneDNN, NCHW in and out */
    KILN_FC_TACTIC_DNNL_BLOCKED = 2, /* oneDNN in its blocked layout, reordered in and out */
    KILN_FC_TACTIC_WINO = 3,         /* kiln's Winograd F(4x4, 3x3) (conv_wino.h): 3x3, stride 1 */
    KILN_FC_TACTIC_WINO2 = 4,        /* kiln's Winograd F(2x2, 3x3): the same layers, 16/9 of the
                                      * weights transformed instead of 4x */
    KILN_FC_TACTIC_DIRECT = 5,       /* kiln's direct convolution (conv_direct.h): any kernel size,
                                      * stride and pads, dilation 1 */
    KILN_FC_TACTIC_COUNT
};

/* The Winograd output tile of tactic `id`: 4 (wino), 2 (wino2), else 0. */
static inline int kiln__fc_wino_tile(int32_t id) {
    return id == KILN_FC_TACTIC_WINO ? 4 : id == KILN_FC_TACTIC_WINO2 ? 2 : 0;
}

#if KILN_HAVE_DNNL
/* dnnl_conv.c: whether oneDNN may run a layer with these attrs and input
 * rank with `tactic` on this CPU (cheap checks; bf16 needs avx512_bf16). */
KILN_PRIVATE bool kiln__dnnl_conv_usable(const kiln_fused_conv_attrs *at, int rank, int tactic);
/* Runs the layer, keeping the primitive and the reordered weights in
 * a->node_state when there is one. KILN_ERR_UNSUPPORTED: oneDNN has no
 * kernel for it (the caller falls back to kiln's own). */
KILN_PRIVATE kiln_status kiln__dnnl_conv_run(const kiln_kernel_args *a, int tactic);
/* Whether oneDNN has a real (not reference) kernel for the layer as its
 * attrs (tactic, layout) say: KILN_OK, or KILN_ERR_UNSUPPORTED. Creates
 * nothing that stays. */
KILN_PRIVATE kiln_status kiln__dnnl_conv_probe(const kiln_kernel_args *a, int tactic);
/* Scratch bytes the tactic needs for reordered tensors (0: none). */
KILN_PRIVATE size_t kiln__dnnl_conv_workspace(const kiln_infer_args *a, int tactic);
#endif

/* Whether the Winograd tactic can run a layer of these attrs and shapes
 * (fp32, 2-D 3x3, stride 1, dilation 1, one group, pads 0..2; dims known). */
KILN_PRIVATE bool kiln__fc_wino_fits(const kiln_fused_conv_attrs *at, int xr, const int64_t *xd,
                                     int wr, const int64_t *wd);
/* Whether the direct tactic (conv_direct.h) can run a layer of these
 * attrs and shapes (fp32, 2-D, one group, dilation 1, kernel at most
 * KILN_DIRECT_MAX_K square; dims known). */
KILN_PRIVATE bool kiln__fc_direct_fits(const kiln_fused_conv_attrs *at, int xr, const int64_t *xd, int wr,
                                       const int64_t *wd);

/* How the oneDNN layer whose state is in ns (kept by a run of a oneDNN
 * tactic) was split over threads: KILN_DNNL_SPLIT_*, with the number of
 * parts; -1 when ns holds none or kiln has no oneDNN. For tests. */
enum { KILN_DNNL_SPLIT_BATCH = 0, KILN_DNNL_SPLIT_ROWS = 1, KILN_DNNL_SPLIT_CHANS = 2 };
KILN_PRIVATE int kiln__dnnl_conv_split(const kiln_node_state *ns, int *parts);

/* y[0..n) = act(y) (KILN_FC_ACT_*), NaN kept as kiln__fc_act keeps it; AVX-512
 * for ReLU, Clip and HardSigmoid where the CPU has it. For kernels whose
 * library cannot apply the activation right (dnnl_conv.c). */
KILN_PRIVATE void kiln__fc_act_f32(float *y, int64_t n, int act, float alpha, float beta);
/* The same on bfloat16 values (ReLU exact on the bits; the others through
 * float32, rounded to nearest even). */
KILN_PRIVATE void kiln__fc_act_bf16(uint16_t *y, int64_t n, int act, float alpha, float beta);

/* The row of the CPU table (cpu_table.c, kernel.h): run (a tactic, else the
 * op's reference kernel), workspace, tactics, their names, the in-place
 * residual. */
KILN_PRIVATE kiln_status kiln__cpu_fc_run(const kiln_kernel_args *a);
KILN_PRIVATE size_t kiln__cpu_fc_workspace(const kiln_infer_args *a);
KILN_PRIVATE int kiln__cpu_fc_tactics(void *state, const kiln_infer_args *a, int32_t *ids, int cap);
KILN_PRIVATE const char *kiln__cpu_fc_tactic_name(int32_t id);
KILN_PRIVATE bool kiln__cpu_fc_tactic_fast_math(int32_t id);
KILN_PRIVATE int kiln__cpu_fc_inplace_input(const void *attrs);
/* Tuning (kiln_kernel.tune_prepare): the layout a tactic runs in inside a chain. */
KILN_PRIVATE int kiln__cpu_fc_tune_prepare(kiln_node *n, int32_t id, const int32_t *ids, int n_ids,
                                           const kiln_kernel_args *a);
/* Whether oneDNN runs the layer of `a` (tactic and layouts as in a->attrs)
 * with a real kernel, not a reference one (false without oneDNN). */
KILN_PRIVATE bool kiln__cpu_fc_dnnl_real(const kiln_kernel_args *a);
/* kiln.PwDwConv's row (fused_pwdw_cpu.c): the op has no reference kernel. */
KILN_PRIVATE bool kiln__cpu_pwdw_supports(const kiln_graph *g, const kiln_node *n);
KILN_PRIVATE kiln_status kiln__cpu_pwdw_run(const kiln_kernel_args *a);
KILN_PRIVATE size_t kiln__cpu_pwdw_workspace(const kiln_infer_args *a);

#endif
