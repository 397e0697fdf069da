/* backend.h -- the interface between the builder/runtime and a device.
 *
 * A backend says which nodes it can run (`supports`), names the kernel it
 * picked for a node (for inspect), owns per-context device state (stream,
 * library handles), moves bytes between host and device, and runs one node
 * on tensors that live in its memory. The CPU backend is always present; the
 * CUDA backend (src/backends/cuda/, built when nvcc is found) fills the same
 * table. Kernels stay with their ops: op->cpu for the CPU; a per-op-id table
 * inside each device backend for the others.
 *
 * Threading: one backend state belongs to one context and is used by one
 * thread at a time. Engine-level functions (upload/unload) may be called
 * from any thread. */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include "ir/ir.h"

typedef struct kiln_backend_i {
    const char *name;      /* "cpu", "cuda" */
    int device;            /* kiln_device */
    /* Whether the backend has a kernel for node n (dtypes/shapes as inferred
     * in g at build time). */
    bool (*supports)(const kiln_graph *g, const kiln_node *n);
    /* Short name of the kernel that runs n, for inspect (static string). */
    const char *(*kernel_name)(const kiln_graph *g, const kiln_node *n);

    /* Per-context state: created for device `index`; NULL state is fine for
     * backends without one (CPU). `stream` may be set by the caller
     * (cudaStream_t as void*; NULL: the state's own stream). */
    kiln_status (*state_create)(int index, void **state);
    void (*state_free)(void *state);
    kiln_status (*set_stream)(void *state, void *stream);

    /* Memory in the backend's address space. */
    void *(*alloc)(void *state, size_t bytes);
    void (*free)(void *state, void *p);
    /* Copies, ordered on the state's stream. to_host waits for completion. */
    kiln_status (*to_device)(void *state, void *dst, const void *src, size_t n);
    kiln_status (*to_host)(void *state, void *dst, const void *src, size_t n);
    /* Waits until all work queued on the state's stream is done. */
    kiln_status (*sync)(void *state);
    /* Whether p points into this backend's memory (so a caller's buffer can
     * be used without a copy). May be NULL: never. */
    bool (*owns_pointer)(void *state, const void *p);
    /* What engines built with this state are built for, e.g. "cpu x86_64
     * avx2 fma" or "cuda sm_90"; an engine whose target differs from the
     * device's is refused when a context is created. */
    void (*describe_target)(void *state, char *buf, size_t n);
    /* Applies the engine's precision (kiln_precision) to the state, e.g.
     * TF32 tensor cores for KILN_PRECISION_TF32. May be NULL. */
    kiln_status (*set_precision)(void *state, int precision);

    /* Runs node a->op with a->in/out pointing into this backend's memory.
     * a->stream and a->device_state are set from `state`. */
    kiln_status (*run)(void *state, const kiln_kernel_args *a);

    /* Tactics (optional; for nodes whose op has KILN_OP_FLAG_TACTICS). The
     * ids of the kernels that can run the node with inputs shaped as in `a`
     * (exact shapes) on this device; returns their count (at most cap). The
     * builder times each (setting the attrs' kiln_tactic.id and calling
     * `run`) and keeps the fastest. NULL: only tactic 0. */
    int (*tactics)(void *state, const kiln_infer_args *a, int32_t *ids, int cap);
    /* Short name of tactic `id` of node n, for inspect (static string). */
    const char *(*tactic_name)(const kiln_node *n, int32_t id);
    /* Optional: the full name of tactic `id` of n into buf (ids that encode
     * a library's configuration, e.g. a cuDNN engine and its knobs). NULL:
     * tactic_name says it all. */
    void (*tactic_describe)(const kiln_node *n, int32_t id, char *buf, size_t cap);

    /* Graph capture (optional, all four or none; CUDA Graphs). Between
     * capture_begin and capture_end the work `run` queues on the state's
     * stream is recorded, not executed. capture_end stops recording and
     * returns an executable graph in *graph, or NULL (with KILN_OK) when the
     * capture was invalidated (a kernel synchronized, allocated...), after
     * which nothing recorded has run. graph_launch queues a graph on the
     * state's stream; *launched = false (KILN_OK) when the graph refers to
     * state memory that has since moved (then it must be dropped and the
     * work run again). graph_free releases one. */
    kiln_status (*capture_begin)(void *state);
    kiln_status (*capture_end)(void *state, void **graph);
    kiln_status (*graph_launch)(void *state, void *graph, bool *launched);
    void (*graph_free)(void *state, void *graph);
} kiln_backend_i;

KILN_PRIVATE const kiln_backend_i *kiln__backend_for(int device); /* NULL if not built in */

#endif
