/* cpu_backend.c -- the CPU backend: host memory, and each op's kernel from
 * the CPU table (cpu_table.c: a tuned kernel, else the op's reference). */
#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_features.h"
#include "backends/cpu/cpu_layout.h"

static kiln_status cpu_run(void *state, const kiln_kernel_args *a) {
    (void)state;
    const kiln_kernel *k = kiln__cpu_kernel_for(a->op_id ? a->op_id : kiln__op_id_of(a->op));
    if (!k)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): no CPU kernel for this op",
                         a->node_name ? a->node_name : "?", a->op->name);
    return k->run(a);
}

static kiln_status cpu_state_create(int index, void **state) {
    (void)index;
    *state = NULL;
    return KILN_OK;
}
static void cpu_state_free(void *state) { (void)state; }
static kiln_status cpu_set_stream(void *state, void *stream) {
    (void)state;
    if (stream) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "a stream was given for a CPU engine");
    return KILN_OK;
}
static void *cpu_alloc(void *state, size_t n) {
    (void)state;
    return kiln__aligned_alloc(n);
}
static void cpu_free(void *state, void *p) {
    (void)state;
    kiln__aligned_free(p);
}
static kiln_status cpu_copy(void *state, void *dst, const void *src, size_t n) {
    (void)state;
    if (n) memmove(dst, src, n);
    return KILN_OK;
}
static void cpu_describe_target(void *state, char *buf, size_t n) {
    (void)state;
    kiln__cpu_target(buf, n);
}
static kiln_status cpu_sync(void *state) {
    (void)state;
    return KILN_OK;
}

static const kiln_backend_i kiln_backend_cpu = {
    .name = "cpu",
    .device = KILN_DEVICE_CPU,
    .kernel_for = kiln__cpu_kernel_for,
    .state_create = cpu_state_create,
    .state_free = cpu_state_free,
    .set_stream = cpu_set_stream,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .sync = cpu_sync,
    .describe_target = cpu_describe_target,
    .run = cpu_run,
    .layouts = kiln__cpu_layouts,
};

const kiln_backend_i *kiln__cpu_backend(void) { return &kiln_backend_cpu; }
