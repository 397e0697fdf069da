/* pool_cpu.h -- the CPU backend's MaxPool and GlobalAveragePool kernels
 * (rows of cpu_table.c): the NHWC and nChw16c layouts of its chains; a
 * layer without a layout runs the op's reference kernel. */
#ifndef KILN_POOL_CPU_H
#define KILN_POOL_CPU_H

#include "ops/op.h"

KILN_PRIVATE kiln_status kiln__cpu_maxpool_run(const kiln_kernel_args *a);
KILN_PRIVATE kiln_status kiln__cpu_gap_run(const kiln_kernel_args *a);

#endif
