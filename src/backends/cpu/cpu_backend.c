/* cpu_backend.c -- the CPU backend: kernels are each op's `cpu` function. */
#include "backends/backend.h"
#include "runtime/engine.h"

#include "backends/cuda/cuda_backend.h"

static bool cpu_supports(const kiln_graph *g, const kiln_node *n) {
    (void)g;
    return n->op && n->op->cpu != NULL;
}

static const char *cpu_kernel_name(const kiln_graph *g, const kiln_node *n) {
    (void)g;
    (void)n;
    return "cpu";
}

static kiln_status cpu_run(void *state, const kiln_kernel_args *a) {
    (void)state;
    return a->op->cpu(a);
}

static int cpu_tactics(void *state, const kiln_infer_args *a, int32_t *ids, int cap) {
    (void)state;
    if (!(a->op->flags & KILN_OP_FLAG_TACTICS) || !a->op->cpu_tactics) {
        if (cap > 0) ids[0] = 0;
        return cap > 0;
    }
    return a->op->cpu_tactics(a, ids, cap);
}

static const char *cpu_tactic_name(const kiln_node *n, int32_t id) {
    if (n->op && n->op->cpu_tactic_name) return n->op->cpu_tactic_name(id);
    return id == 0 ? "default" : "?";
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
    .supports = cpu_supports,
    .kernel_name = cpu_kernel_name,
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
    .tactics = cpu_tactics,
    .tactic_name = cpu_tactic_name,
};

const kiln_backend_i *kiln__backend_for(int device) {
    if (device == KILN_DEVICE_CPU) return &kiln_backend_cpu;
#if KILN_HAVE_CUDA
    if (device == KILN_DEVICE_CUDA) return kiln__cuda_backend();
#endif
    return NULL;
}

int kiln_device_available(kiln_device dev) {
    const kiln_backend_i *be = kiln__backend_for(dev);
    if (!be) return 0;
    if (dev == KILN_DEVICE_CPU) return 1;
    void *state = NULL;
    if (be->state_create(0, &state) != KILN_OK) {
        kiln__clear_error();
        return 0;
    }
    be->state_free(state);
    return 1;
}
