/* pointwise_interp.h -- the host interpreter of kiln.Pointwise
 * (src/ops/fused_pointwise.h): the op's reference kernel, which the CPU
 * backend runs as its kernel (no row in its table). */
#ifndef KILN_POINTWISE_INTERP_H
#define KILN_POINTWISE_INTERP_H

#include "ops/fused_pointwise.h"

/* Runs the program of a->attrs (validated) over dense row-major tensors:
 * inputs broadcast to the outputs' shape. Any mix of the dtypes the op
 * takes; arithmetic in float32, as the elementwise ops' float32 kernels. */
KILN_PRIVATE kiln_status kiln__pw_cpu_run(const kiln_kernel_args *a);

#endif
