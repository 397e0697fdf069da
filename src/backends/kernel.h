/* kernel.h -- one kernel, as every backend describes it.
 *
 * A backend runs an op through the kernel its table gives for the op id
 * (`kiln_backend_i.kernel_for`): the CPU backend's table is
 * src/backends/cpu/cpu_table.c (an op without a row there runs its
 * reference kernel, `op->cpu`), the CUDA backend's is
 * src/backends/cuda/cuda_table.c. Everything the builder, the planner and
 * inspect ask of a backend about one node (does it run it, under which
 * name, with which tactics, may out[0] overwrite an input) is answered
 * from the kernel, by the helpers below, the same way for every backend.
 *
 * Tactics. A layer that several kernels can run (own SIMD kernels, a
 * library, different blockings) has an op with KILN_OP_FLAG_TACTICS: its
 * attrs begin with a kiln_tactic, which the builder fills after timing the
 * ids `tactics` lists (src/builder/tune.c) and `run` reads. id 0 is always
 * valid: the kernel's own default choice. The meaning of an id is the
 * kernel's (so the same op has different tactic ids on each backend). */
#ifndef KILN_KERNEL_H
#define KILN_KERNEL_H

#include "ir/ir.h"

typedef struct kiln_kernel {
    const char *name;  /* for inspect, e.g. "cpu", "cuda.binary", "cublasLt" */
    /* Whether it runs node n as inferred in g (dtypes, shapes as far as
     * known at build time, attributes). NULL: every node of its op. */
    bool (*supports)(const kiln_graph *g, const kiln_node *n);
    /* Runs the node. Host backends get host tensors; device backends get
     * tensors in device memory and a->stream / a->device_state set (see the
     * backend's docs). */
    kiln_status (*run)(const kiln_kernel_args *a);
    /* Host scratch bytes `run` needs for these shapes (a->workspace).
     * NULL: the op's `workspace` (NULL there too: none). */
    size_t (*workspace)(const kiln_infer_args *a);
    /* Tactics (ops with KILN_OP_FLAG_TACTICS): the ids of the ways this
     * kernel can run the node with inputs shaped as in `a` (exact shapes)
     * on this device (`state`: the backend's state, NULL for the CPU);
     * returns their count (at most cap). NULL: only tactic 0. */
    int (*tactics)(void *state, const kiln_infer_args *a, int32_t *ids, int cap);
    /* True when tactic `id` trades float32 accuracy for speed (Winograd
     * transforms, reduced-precision math): the tuner offers it only to
     * builds with fast math (kiln_builder_set_fast_math). NULL: none does. */
    bool (*tactic_fast_math)(int32_t id);
    /* Short name of tactic `id` for inspect (static string). NULL: `name`. */
    const char *(*tactic_name)(int32_t id);
    /* Full name of tactic `id` into buf (ids that encode a library's
     * configuration, e.g. a cuDNN engine and its knobs). NULL: tactic_name.
     * A name "<family>.<config>" says that the tactics of one family are
     * configurations of one engine (cuDNN's: "cudnn-eng4.0266c"), which
     * share its defects: where the tuner has no host reference to check a
     * layer's tactics against, a family votes once (builder/tune_check.h). */
    void (*tactic_describe)(int32_t id, char *buf, size_t cap);
    /* The input other than in[0] (for in[0] see KILN_OP_FLAG_INPLACE) whose
     * bytes `run`, with these attrs, may overwrite with out[0] (same size)
     * when the layer reads it last; -1: none. NULL: none. Host memory only. */
    int (*inplace_input)(const void *attrs);
    /* Name of the kernel for node n where it depends on the attributes
     * (e.g. a channels-last variant). NULL: `name`. */
    const char *(*name_of)(const kiln_node *n);
    /* Tuning (optional): before tactic `id` of node n is timed, sets in n's
     * attrs how it would run inside the engine (e.g. the layout of a chain
     * it joins); `a` holds the node's timing buffers (for a probe), `ids`
     * the tactics listed. Returns 1 when it changed the attrs (the builder
     * restores them after the set-up), 0 when not, -1 when `id` is not to
     * be timed alone (the builder restores the attrs and skips it). */
    int (*tune_prepare)(kiln_node *n, int32_t id, const int32_t *ids, int n_ids, const kiln_kernel_args *a);
    /* Tuning (optional): the builder will set up tactics ids[0..n) of the
     * node of `a` (state: the tuner's state of this backend), in that
     * order, after those of the layers it announced before: the kernel may
     * start making what their set-up makes (library execution plans) on
     * host threads now (CUDA: KILN_CUDA_PLAN_THREADS). Which tactics can be
     * set up and what they compute must not depend on it. */
    void (*tactics_ahead)(void *state, const kiln_infer_args *a, const int32_t *ids, int n);
    /* What tactic `id` is (KILN_TACTIC_KIND_*; state: the tuner's, which
     * listed it), for KILN_TUNE_VERBOSE's account of a build's time. NULL:
     * guessed from tactic_name ("cublas..." a BLAS library's, "kiln..."
     * kiln's own kernel, else other). */
    int (*tactic_kind)(void *state, int32_t id);
} kiln_kernel;

/* Kinds of tactics (kiln_kernel.tactic_kind), by what setting one up costs. */
enum {
    KILN_TACTIC_KIND_OTHER = 0,
    KILN_TACTIC_KIND_PRECOMPILED = 1, /* a library's precompiled kernel (cuDNN engine config) */
    KILN_TACTIC_KIND_RUNTIME = 2,     /* a library kernel compiled when its plan is made (NVRTC) */
    KILN_TACTIC_KIND_LEGACY = 3,      /* a library's older API that times its own algorithms */
    KILN_TACTIC_KIND_BLAS = 4,        /* a BLAS library's matrix product (cuBLASLt) */
    KILN_TACTIC_KIND_KILN = 5,        /* kiln's own kernel */
    KILN_TACTIC_KIND_COUNT = 6
};

#endif
