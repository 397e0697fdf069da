/* cpu_kernels.h -- the CPU backend's kernel table (cpu_table.c). The
 * tuned kernels its rows name are in kernels/ (each with its header). */
#ifndef KILN_CPU_KERNELS_H
#define KILN_CPU_KERNELS_H

#include "backends/kernel.h"

/* The CPU backend's kernel of op `op_id`: its table's row, else the op's
 * reference kernel (op->cpu); NULL when the op has neither. */
KILN_PRIVATE const kiln_kernel *kiln__cpu_kernel_for(int op_id);

#endif
