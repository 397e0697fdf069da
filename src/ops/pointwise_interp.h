/* pointwise_cpu.h -- the host kernel of kiln.Pointwise (src/ops/fused_pointwise.h):
 * the op's reference kernel and the CPU backend's. */
#ifndef KILN_POINTWISE_INTERP_H
#define KILN_POINTWISE_INTERP_H

#include "ops/fused_pointwise.h"

/* Runs the program of a->attrs (validated) over dense row-major tensors:
 * inputs broadcast to the outputs' shape. Any mix of the dtypes the op
 * takes; arithmetic in float32, as the elementwise ops' float32 kernels. */
KILN_PRIVATE kiln_status kiln__pw_cpu_run(const kiln_kernel_args *a);

#endif
