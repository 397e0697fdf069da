/* backend.h -- the interface between the builder/runtime and a device.
 *
 * A backend says which nodes it can run (`supports`), names the kernel it
 * picked for a node (for inspect), and runs one node on tensors that live in
 * its memory. The CPU backend is always present; a CUDA backend fills the
 * same table from src/backends/cuda/. Kernels themselves stay with their ops
 * (op->cpu for the CPU; a per-op table for other devices). */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include "ir/ir.h"

typedef struct kiln_backend_i {
    const char *name;      /* "cpu" */
    int device;            /* kiln_device */
    /* Whether the backend has a kernel for node n (dtypes as inferred). */
    bool (*supports)(const kiln_graph *g, const kiln_node *n);
    /* Short name of the kernel that runs n, for inspect. */
    const char *(*kernel_name)(const kiln_graph *g, const kiln_node *n);
    /* Device memory for activations; host pointers for the CPU. */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    kiln_status (*run)(const kiln_kernel_args *a);
} kiln_backend_i;

KILN_PRIVATE const kiln_backend_i *kiln__backend_for(int device); /* NULL if not built in */

#endif
