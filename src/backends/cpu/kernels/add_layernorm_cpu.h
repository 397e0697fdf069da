/* add_layernorm_cpu.h -- the CPU backend's kernel of kiln.AddLayerNorm
 * (src/ops/fused_norm.h), named by its row of the CPU table. */
#ifndef KILN_ADD_LAYERNORM_CPU_H
#define KILN_ADD_LAYERNORM_CPU_H

#include "ops/fused_norm.h"

/* float32 tensors with Scale/B of D elements: one pass over the row for the
 * sum (kept in Y, or in Sum when it is an output) and its mean, one for the
 * variance, one for Y; every other case runs the reference kernel. */
KILN_PRIVATE kiln_status kiln__cpu_add_ln_run(const kiln_kernel_args *a);
/* none on that path; the reference kernel's elsewhere */
KILN_PRIVATE size_t kiln__cpu_add_ln_workspace(const kiln_infer_args *a);

#endif
