/* backend.h -- the interface between the builder/runtime and a device.
 *
 * A backend has a table of kernels, one per op id it runs
 * (`kernel_for`, kernel.h), owns per-context device state (stream, library
 * handles), moves bytes between host and device, and runs one node on
 * tensors that live in its memory. What the builder and inspect ask about a
 * node (supported? kernel name? tactics?) is answered from the kernel by the
 * kiln__backend_* helpers below (src/backends/kernel.c), the same way for
 * every backend. The CPU backend is always present; the CUDA backend
 * (src/backends/cuda/, built when nvcc is found) fills the same table.
 *
 * Threading: one backend state belongs to one context and is used by one
 * thread at a time. Engine-level functions (upload/unload) may be called
 * from any thread. */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include "backends/kernel.h"

/* ---- what the builder leaves to a backend (builder/tune.c) -------------- */

#define KILN_TRIAL_MAX_RUNS 15 /* timed runs per variant of a whole-engine trial */
/* Sets the attrs of variant v (0 or 1) of a whole-engine trial. */
typedef void (*kiln_variant_fn)(kiln_graph *g, int v, void *arg);

/* A layout choice, as the builder hands it to a backend's `layouts` hook
 * (once per build): the graph with its nodes placed, and the builder's
 * timing services. */
typedef struct kiln_layout_ctx kiln_layout_ctx;
struct kiln_layout_ctx {
    kiln_graph *g;
    int device;        /* the engine's device (kiln_device) */
    bool optimize;     /* the builder optimizes (kiln_builder_set_optimization) */
    uint32_t disabled; /* bits of the passes switched off (KILN_PASS_*, ir.h) */
    /* Times every layer's tactics in the layouts its attrs hold at that
     * point and keeps the fastest (the hook calls it before or after its
     * choice; a second call does nothing). */
    kiln_status (*tune)(kiln_layout_ctx *c);
    /* After tune: every value's info at the profiles' opt shapes (rank -1:
     * unknown), and whether a CPU layer was timed. */
    const kiln_tinfo *vi;
    bool cpu_tuned;
    /* Median microseconds of CPU node ni run alone with its attrs as they
     * are, at the opt shapes, into *us: -2 when a shape is unknown, -1 when
     * it fails or `accept` (may be NULL), asked with the node's buffers,
     * says no. */
    kiln_status (*time_node)(kiln_layout_ctx *c, int ni, bool (*accept)(const kiln_kernel_args *a),
                             double *us);
    /* The whole engine run at the opt shapes in two variants of its nodes'
     * attrs (set(g, v, arg) before every run), alternately: a warm-up run
     * each, then up to KILN_TRIAL_MAX_RUNS timed runs each, about a second
     * in all. t[v][r]: run r's microseconds; layer_us (when not NULL;
     * KILN_TRIAL_MAX_RUNS x 2 x n_nodes) each layer's too. *runs: the timed
     * runs (0: a run failed). */
    kiln_status (*trial)(kiln_layout_ctx *c, kiln_variant_fn set, void *arg,
                         double t[2][KILN_TRIAL_MAX_RUNS], double *layer_us, int *runs);
    /* The timing cache's entry for node n (its tuning key at the opt shapes
     * + suffix): true and *id, *us when found. put stores one. Without a
     * timing cache nothing is found and put does nothing. */
    bool (*cache_get)(kiln_layout_ctx *c, const kiln_node *n, const char *suffix, int32_t *id, float *us);
    kiln_status (*cache_put)(kiln_layout_ctx *c, const kiln_node *n, const char *suffix, int32_t id,
                             float us);
    void *priv; /* the builder's */
};

typedef struct kiln_backend_i {
    const char *name;      /* "cpu", "cuda" */
    int device;            /* kiln_device */
    /* fp16/bf16 engines carry fp16/bf16 tensors between this backend's
     * layers (the precision pass converts the graph, passes/precision.c);
     * false: a reduced precision is the kernels' own business (the CPU's
     * bf16 layers keep float32 tensors). */
    bool reduced_tensors;
    /* The kernel of op `op_id` (kernel.h), or NULL when the backend has none. */
    const kiln_kernel *(*kernel_for)(int op_id);

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
    /* Optional: called once at the start of every run, before anything of
     * the run is queued (or a captured graph launched). The CUDA backend,
     * on its own stream, makes the run wait for the work the caller queued
     * before it on the legacy default stream (an input written there by
     * cudaMemcpy, whose DMA may still be in flight when it returns). */
    kiln_status (*run_begin)(void *state);
    /* For the tuner's check that a layer's tactics agree (optional, all three
     * or none; builder/tune_check.h). poison_scratch fills the state's
     * scratch memory (library workspaces) and poison n bytes at p with bytes
     * that read as NaN, on the state's stream: a kernel that reads its
     * workspace before writing it, or leaves part of its output unwritten,
     * cannot agree with the other candidates by luck. to_host_strided
     * copies `count` elements of `elem` bytes, `stride` bytes apart from
     * src, packed into dst, and waits. */
    void (*poison_scratch)(void *state);
    kiln_status (*poison)(void *state, void *p, size_t n);
    kiln_status (*to_host_strided)(void *state, void *dst, const void *src, size_t elem, size_t stride,
                                   size_t count);
    /* Whether p points into this backend's memory (so a caller's buffer can
     * be used without a copy). May be NULL: never. */
    bool (*owns_pointer)(void *state, const void *p);
    /* What engines built with this state are built for, e.g. "cpu x86_64
     * avx2 fma" or "cuda sm_90"; an engine whose target differs from the
     * device's is refused when a context is created. */
    void (*describe_target)(void *state, char *buf, size_t n);
    /* Applies the engine's precision (kiln_precision) and math to the
     * state, e.g. TF32 tensor cores for KILN_PRECISION_TF32; fast_math (the
     * engine was built with kiln_builder_set_fast_math): algorithms the
     * backend chooses at run time may round more (Winograd, FFT). May be NULL. */
    kiln_status (*set_precision)(void *state, int precision, bool fast_math);

    /* Runs node a->op with a->in/out pointing into this backend's memory,
     * through its kernel (a->op_id's, or a->op's when op_id is 0).
     * a->stream and a->device_state are set from `state`. */
    kiln_status (*run)(void *state, const kiln_kernel_args *a);

    /* Layouts (optional): chooses the memory layouts of the layers placed on
     * this backend (channels-last chains...), writing them into their attrs
     * (and conversions into the graph), and calls c->tune before or after
     * that, as its choice needs. The builder calls it once per build: the
     * engine's device backend's, then the CPU's (for a device engine's CPU
     * layers too). NULL: nothing to choose. */
    kiln_status (*layouts)(kiln_layout_ctx *c);

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

/* The backends (backends/registry.c). */
KILN_PRIVATE const kiln_backend_i *kiln__backend_for(int device); /* NULL if not built in */
/* "cpu", "cuda"...: the name of a device kiln knows (built in or not); NULL
 * for an unknown one. */
KILN_PRIVATE const char *kiln__device_name(int device);
/* The largest device index of a device kind (cpu: 0, one CPU device; cuda: 1023), as
 * kiln_device_parse and kiln_builder_set_device take them. */
KILN_PRIVATE int kiln__device_index_max(int device);

/* ---- what a backend says about one node, from its kernel (kernel.c) ---- */

/* The kernel `be` runs node n with, or NULL. */
KILN_PRIVATE const kiln_kernel *kiln__backend_kernel(const kiln_backend_i *be, const kiln_node *n);
/* Whether `be` has a kernel for node n (dtypes/shapes as inferred in g). */
KILN_PRIVATE bool kiln__backend_supports(const kiln_backend_i *be, const kiln_graph *g,
                                         const kiln_node *n);
/* Short name of the kernel that runs n, for inspect (static string; "none"). */
KILN_PRIVATE const char *kiln__backend_kernel_name(const kiln_backend_i *be, const kiln_node *n);
/* The tactic ids that can run the node of `a` on `be` (state: its state),
 * at most cap: {0} for ops without tactics or kernels without a list.
 * Without fast_math, tactics the kernel marks as fast math only
 * (kiln_kernel.tactic_fast_math) are left out. */
KILN_PRIVATE int kiln__backend_tactics(const kiln_backend_i *be, void *state,
                                       const kiln_infer_args *a, bool fast_math, int32_t *ids, int cap);
/* Tells the kernel of the node of `a` that the tuner will set up its
 * tactics ids[0..n) next (kiln_kernel.tactics_ahead); nothing without the hook. */
KILN_PRIVATE void kiln__backend_tactics_ahead(const kiln_backend_i *be, void *state, const kiln_infer_args *a,
                                              const int32_t *ids, int n);
/* What tactic `id` of node n is (KILN_TACTIC_KIND_*, kernel.h), and a kind's name. */
KILN_PRIVATE int kiln__backend_tactic_kind(const kiln_backend_i *be, void *state, const kiln_node *n, int32_t id);
KILN_PRIVATE const char *kiln__backend_tactic_kind_name(int kind);
/* Short (static) and full names of tactic `id` of node n on `be`. */
KILN_PRIVATE const char *kiln__backend_tactic_name(const kiln_backend_i *be, const kiln_node *n,
                                                   int32_t id);
KILN_PRIVATE void kiln__backend_tactic_describe(const kiln_backend_i *be, const kiln_node *n,
                                                int32_t id, char *buf, size_t cap);
/* Host scratch bytes kernel k needs for the shapes of `a` (0: none). */
KILN_PRIVATE size_t kiln__kernel_workspace(const kiln_kernel *k, const kiln_infer_args *a);
/* The input (other than in[0]) whose bytes n's kernel on `be` may overwrite
 * with out[0], given n's attrs; -1: none. */
KILN_PRIVATE int kiln__backend_inplace_input(const kiln_backend_i *be, const kiln_node *n);

#endif
