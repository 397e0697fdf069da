/* cpu_backend.c -- the CPU backend: kernels are each op's `cpu` function. */
#include "backends/backend.h"

static bool cpu_supports(const kiln_graph *g, const kiln_node *n) {
    (void)g;
    return n->op && n->op->cpu != NULL;
}

static const char *cpu_kernel_name(const kiln_graph *g, const kiln_node *n) {
    (void)g;
    (void)n;
    return "cpu";
}

static kiln_status cpu_run(const kiln_kernel_args *a) { return a->op->cpu(a); }

static const kiln_backend_i kiln_backend_cpu = {
    .name = "cpu",
    .device = KILN_DEVICE_CPU,
    .supports = cpu_supports,
    .kernel_name = cpu_kernel_name,
    .alloc = kiln__aligned_alloc,
    .free = kiln__aligned_free,
    .run = cpu_run,
};

const kiln_backend_i *kiln__backend_for(int device) {
    if (device == KILN_DEVICE_CPU) return &kiln_backend_cpu;
    return NULL;
}
