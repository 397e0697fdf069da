/* cpu_kernels.h -- the CPU backend's tuned kernels: what its table
 * (cpu_table.c) names for the ops that have more than their reference
 * kernel (op->cpu): tactics and their names, in-place inputs. */
#ifndef KILN_CPU_KERNELS_H
#define KILN_CPU_KERNELS_H

#include "backends/kernel.h"

/* The CPU backend's kernel of op `op_id`: its table's row, else the op's
 * reference kernel (op->cpu); NULL when the op has neither. */
KILN_PRIVATE const kiln_kernel *kiln__cpu_kernel_for(int op_id);

/* kiln.FusedConv */
KILN_PRIVATE int kiln__cpu_fc_tactics(void *state, const kiln_infer_args *a, int32_t *ids, int cap);
KILN_PRIVATE const char *kiln__cpu_fc_tactic_name(int32_t id);
KILN_PRIVATE int kiln__cpu_fc_inplace_input(const void *attrs);
/* kiln.FusedMatMul */
KILN_PRIVATE int kiln__cpu_fmm_tactics(void *state, const kiln_infer_args *a, int32_t *ids, int cap);
KILN_PRIVATE const char *kiln__cpu_fmm_tactic_name(int32_t id);
/* kiln.Attention */
KILN_PRIVATE int kiln__cpu_attn_tactics(void *state, const kiln_infer_args *a, int32_t *ids, int cap);
KILN_PRIVATE const char *kiln__cpu_attn_tactic_name(int32_t id);

#endif
