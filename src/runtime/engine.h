/* engine.h -- internal layout of kiln_model, kiln_builder, kiln_engine and
 * kiln_context. */
#ifndef KILN_ENGINE_H
#define KILN_ENGINE_H

#include "ir/ir.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

/* User metadata of an engine or a builder: key/value strings, sorted by
 * key (the rules, and the functions that keep them: format/meta.h). */
typedef struct kiln_meta_entry {
    char *key;
    char *value;
    size_t value_len;
} kiln_meta_entry;

typedef struct kiln_meta {
    kiln_meta_entry *items; /* sorted by key */
    int n, cap;
} kiln_meta;

/* A type and shape the model declares for a node output (ONNX value_info
 * or graph output), for the build's warnings when inference from the
 * inputs' shape profiles contradicts it. */
typedef struct kiln_declared {
    int value;       /* index in the model's graph (kiln_build's copy keeps the indices) */
    bool reported;   /* loading warned about it already (graph outputs) */
    kiln_tinfo info; /* as declared (data NULL) */
} kiln_declared;

struct kiln_model {
    kiln_graph *graph;     /* as imported, shapes inferred */
    char *producer;        /* producer_name + version, for inspect */
    char **warnings;       /* kiln_model_warning: what loading found suspect */
    int n_warnings, cap_warnings;
    kiln_declared *declared; /* node outputs with a declared type, each value once */
    int n_declared, cap_declared;
};

/* Shape range of one graph input. For inputs without dynamic dims
 * min == opt == max == the static shape. */
typedef struct kiln_profile {
    int rank;
    int64_t min[KILN_MAX_RANK], opt[KILN_MAX_RANK], max[KILN_MAX_RANK];
} kiln_profile;

typedef struct kiln_build_options {
    int32_t device;        /* kiln_device */
    int32_t device_index;
    int32_t precision;     /* kiln_precision */
    int32_t threads;       /* 0 = one per core */
    uint64_t workspace;    /* 0 = no limit */
    int32_t math;          /* KILN_MATH_* (kiln_builder_set_fast_math) */
} kiln_build_options;

/* kiln_build_options.math: which kernels the tuner could choose. Engines
 * written before the setting existed read as UNRECORDED (their builds
 * allowed what FAST allows). */
#define KILN_MATH_UNRECORDED 0
#define KILN_MATH_ACCURATE 1   /* default: float32 kept as accurate as a direct computation */
#define KILN_MATH_FAST 2       /* kiln_builder_set_fast_math: faster, less accurate kernels too */

typedef struct kiln_profile_req {
    char *name;
    kiln_profile p;
} kiln_profile_req;

struct kiln_builder {
    kiln_build_options opts;
    char *timing_cache;
    bool strict_device;
    int optimization;      /* 0 none, 1 all (default) */
    bool tuning;           /* time tactics (default true) */
    int verbosity;         /* kiln_builder_set_verbosity: 0 silent, 1 progress and notes (default), 2 all */
    uint32_t disabled_passes; /* bit KILN_PASS_x: pass x switched off (kiln_builder_disable_pass) */
    kiln_profile_req *profiles;
    int n_profiles, cap_profiles;
    char **fp32_layers;    /* kiln_builder_set_layer_precision: layers kept in float32 */
    int n_fp32_layers, cap_fp32_layers;
    kiln_meta meta;        /* kiln_builder_set_metadata: copied into the engine */
};

struct kiln_engine {
    kiln_graph *graph;           /* the optimized plan */
    kiln_profile *profiles;      /* one per graph input, same order as graph->inputs */
    kiln_build_options opts;
    char target[128];            /* what it was built for, e.g. "cpu x86_64 avx2 fma" */
    char builder_version[32];    /* kiln version that built it */
    /* Storage the graph's constants may borrow from. */
    void *blob;                  /* mmap'd file or kiln__aligned_alloc'd copy */
    size_t blob_size;
    int blob_kind;               /* 0 none, 1 mmap, 2 aligned_alloc */
    /* Mapped engines: the file, kept open so that a rewrite in place is noticed
     * (kiln__engine_check_file): its identity and checksum when loaded, when it
     * was last looked at, and whether it was found changed. */
    bool map_open;               /* map_fd is open (engines made zeroed have none) */
    int map_fd;
    struct stat map_st;
    uint64_t map_sum;
    char *map_path;
    atomic_llong map_checked_us;
    atomic_bool map_changed;
    /* A file last changed within KILN_FILE_TIME_GRAIN_NS of its load may be
     * written again with the same timestamps (coarse file clocks): its bytes
     * are compared once, by checksum, when a check finds the clock past this
     * (CLOCK_REALTIME ns), else 0. Under dev_lock. */
    long long map_verify_at_ns;
    /* Device engines: constants read by device nodes, uploaded once at
     * when the first context is created and shared by all contexts
     * (dev_const[value] or NULL), and the backend state that owns them.
     * dev_lock guards the upload; the engine is otherwise immutable. */
    void **dev_const;
    void *dev_state;
    bool dev_ready;
    pthread_mutex_t dev_lock;
    bool plant_noted;            /* KILN_TEST_PLANT_BUG was reported for it (under dev_lock) */
    /* Cached descriptions (kiln_engine_describe): made by the first call, on
     * whichever thread, and published with a compare-and-swap, so that
     * threads describing one engine at once all get the same string. */
    _Atomic(char *) describe_text;
    _Atomic(char *) describe_json;
    /* User metadata (kiln_engine_metadata; the optional META section). */
    kiln_meta meta;
};

/* Engine (de)serialization: src/format/. */
KILN_PRIVATE kiln_status kiln__format_write(const kiln_engine *e, void **data, size_t *size);
/* Parses `data` (which must stay alive as e->blob; constants borrow from it)
 * into e->graph, e->profiles, e->opts, e->target. Validates everything. */
KILN_PRIVATE kiln_status kiln__format_read(const void *data, size_t size, kiln_engine *e);


/* Allocates an engine with its lock initialized (free: kiln_engine_free). */
KILN_PRIVATE kiln_engine *kiln__engine_alloc(void);
/* Device engines: uploads the constants device nodes read, once (no-op for
 * CPU engines). Thread-safe; called by kiln_context_create. */
KILN_PRIVATE kiln_status kiln__engine_prepare(kiln_engine *e);
/* Mapped engines: fails (KILN_ERR_IO) when the engine's file was written in
 * place since it was loaded (its weights are read from the file's pages: a
 * `cp` over it changed them silently, a truncation killed the process with
 * SIGBUS). Looks at the file at most every 10 ms; a changed identity with
 * the same checksum (touch) is taken. Thread-safe; called by every run. */
KILN_PRIVATE kiln_status kiln__engine_check_file(const kiln_engine *e);
/* Starts the watch kiln__engine_check_file keeps on engine e, just mapped
 * (e->blob) from the regular file `path` open as fd with identity *st: e
 * owns fd from here (closed by kiln_engine_free). */
KILN_PRIVATE void kiln__engine_watch_file(kiln_engine *e, int fd, const struct stat *st, const char *path);
/* Frees what kiln__engine_prepare made. */
KILN_PRIVATE void kiln__engine_release(kiln_engine *e);

/* Times the tactics of every layer that has several (src/builder/tune.c),
 * writing each choice into the node's kiln_tactic; reads and updates the
 * builder's timing cache file. With tuning off, leaves every tactic 0. */
KILN_PRIVATE kiln_status kiln__builder_tune(const kiln_builder *b, kiln_engine *e);
/* One timed run of candidate k of a layer: microseconds, < 0 when it fails. */
typedef double (*kiln_turn_fn)(void *ctx, int k);
/* The tuner's timing of a layer's n candidates (at most 16): they take
 * turns, one run each per round, 5 rounds (3 where the second round takes
 * over 100 ms), so that a burst of load on a shared machine slows every
 * candidate of a round alike instead of all the runs of one; a candidate
 * whose first two runs both take over 4x the best (the fastest of each
 * candidate's first two) + 1 ms runs no more.
 * us[k]: candidate k's median, < 0 if one of its runs failed. */
KILN_PRIVATE void kiln__tune_turns(int n, kiln_turn_fn run, void *ctx, double *us);
/* One layer's tactics, as the tuner times and checks them (src/builder/tune.c;
 * kiln__builder_tune calls it for every layer it times, tests with a
 * backend of their own). */
struct kiln_backend_i;
/* Where one layer's tuning time went (kiln_tune_layer.stats; always
 * collected, printed with KILN_TUNE_VERBOSE=1), in microseconds of the
 * tuner's thread. Kinds are KILN_TACTIC_KIND_* (backends/kernel.h). */
#define KILN_TUNE_KINDS 6
typedef struct kiln_tune_stats {
    int candidates;
    double list_us;                      /* listing its tactics (the backend's hook: cuDNN
                                            graphs and heuristics queries) */
    double bufs_us;                      /* its buffers: allocated, filled, copied to the device */
    double setup_us[KILN_TUNE_KINDS];    /* set-up of the candidates of each kind: state and
                                            plans made (or taken from the threads that made
                                            them ahead), one untimed run */
    int setup_n[KILN_TUNE_KINDS], failed_n[KILN_TUNE_KINDS]; /* set up; of which failed */
    double check_us;                     /* outputs poisoned before, sampled after each set-up
                                            run (the agreement check) */
    double judge_us;                     /* judging candidates that disagree (host reference) */
    int ref_runs;                        /* host references computed */
    double probe_us;                     /* the NaN probe: a run of each candidate on a NaN input
                                            (tune.c: nan_probe) */
    double time_us;                      /* timing: CUDA Graph captures and replays, runs */
    double total_us;                     /* kiln__tune_layer's whole time */
} kiln_tune_stats;
typedef struct kiln_tune_layer {
    const struct kiln_backend_i *be; /* the layer's backend (backends/backend.h) */
    void *state;                     /* be's state */
    kiln_pool **pool;                /* the host's threads (CPU tactics, the host reference):
                                        made with `threads` where *pool is NULL and they are
                                        needed; the caller frees *pool */
    int threads;
    kiln_node *n;
    const kiln_tinfo *const *in;     /* its inputs and outputs at the opt shapes */
    const kiln_tinfo *outs;
    const int32_t *ids;              /* the tactics to time (n_ids, at most 32) */
    int n_ids;
    bool verbose;                    /* every candidate's time on stderr (KILN_TUNE_VERBOSE) */
    bool notes;                      /* notes on stderr: tactics that disagree and are not used */
    /* bounds on the host reference that judges a device layer's tactics when they
     * disagree (estimated multiply-adds, host bytes; 0: none is computed) */
    double ref_max_macs, ref_max_bytes;
    kiln_tune_stats *stats;          /* where the time went (NULL: not kept) */
} kiln_tune_layer;
/* Sets up, checks (a device layer: builder/tune_check.h) and times the
 * tactics of L; *best: the fastest that ran and passed the check, with its
 * median time *best_us (< 0: none ran; *best is then 0). Fails (naming the
 * layer and its tactics) when a device layer's tactics disagree and none
 * can be shown right. */
KILN_PRIVATE kiln_status kiln__tune_layer(const kiln_tune_layer *L, int32_t *best, double *best_us);
/* Bytes of activation buffers and scratch a context holds after its runs
 * (its arenas plus any overflow buffers). */
KILN_PRIVATE size_t kiln__context_memory(const kiln_context *c);

/* ---- activation memory plans (src/runtime/plan.c) ----------------------
 * A plan gives every value whose size the input shapes determine an offset
 * in one arena per memory (host / device), by liveness; see plan.c. A
 * context keeps the plans of the last few input shape signatures and one
 * arena per memory that grows only when a plan needs more. */
enum { KILN_MEM_HOST = 0, KILN_MEM_DEV = 1 };
#define KILN_ARENA_ALIGN_HOST 64
#define KILN_ARENA_ALIGN_DEV 256

/* What a plan is made for: the shape of a bound graph input and the memory
 * its bytes are in. */
typedef struct kiln_plan_input {
    int mem;
    int rank;
    int64_t dims[KILN_MAX_RANK];
} kiln_plan_input;

typedef struct kiln_mem_plan {
    kiln_plan_input *sig;   /* per graph input */
    int n_sig;
    int64_t *off[2];        /* per value: offset in the arena of memory m, or -1 (not planned) */
    size_t *nbytes;         /* per value: planned bytes (exact size, before alignment) */
    /* Per node, aux_first[node] indexes n_out entries (outputs nobody
     * reads; off -1 for read ones) and then the node's workspace. */
    int *aux_first;
    int64_t *aux_off;       /* offset in the node's memory (the host for workspaces), or -1 */
    size_t *aux_bytes;
    size_t arena[2];        /* arena bytes per memory */
    size_t lower[2];        /* lower bound: most aligned bytes live at one time */
    int n_blocks[2];
    int n_dynamic;          /* values sized only during the run (data-dependent shapes) */
    int n_views;            /* values sharing their input's block (Reshape... no copy) */
    size_t max_workspace;   /* largest host workspace of one node, and that node (or -1) */
    int max_workspace_node;
} kiln_mem_plan;

/* The memory node n runs in (KILN_MEM_DEV for device nodes of device engines). */
KILN_PRIVATE int kiln__node_mem(const kiln_engine *e, const kiln_node *n);
/* The input of node n whose block the plan may give n's out[0] when n reads
 * it last (in place: 0 for KILN_OP_FLAG_INPLACE ops, else what the node's
 * kernel says, kiln_kernel.inplace_input; host memory only), or -1. */
KILN_PRIVATE int kiln__node_inplace_input(const kiln_engine *e, const kiln_node *n);
/* Plans the activation memory of engine e for inputs `in` (one per graph
 * input). Deterministic. Free with kiln__plan_free. */
KILN_PRIVATE kiln_status kiln__plan_build(const kiln_engine *e, const kiln_plan_input *in,
                                          kiln_mem_plan **out);
/* The plan at the profiles' min (which = 0), opt (1) or max (2) shapes, inputs on the host. */
KILN_PRIVATE kiln_status kiln__plan_at_profile(const kiln_engine *e, int which, kiln_mem_plan **out);
KILN_PRIVATE void kiln__plan_free(kiln_mem_plan *p);
/* The layout step alone (exposed for tests): n blocks of size[i] bytes
 * (aligned), live from step start[i] to end[i] (inclusive, <= n_steps),
 * get offsets in offs[] within *arena bytes; *lower is the most bytes
 * live at one step. *work (if not NULL): the greedy placements' work
 * (blocks and tree nodes looked at, entries sorted), to test that it grows
 * about linearly with a chain's length. */
KILN_PRIVATE kiln_status kiln__plan_layout(int n, const size_t *size, const int *start, const int *end,
                                           int n_steps, int64_t *offs, size_t *arena, size_t *lower,
                                           uint64_t *work);

/* Workspace limit of the builder (kiln_builder_set_workspace): whether a
 * layer may use `bytes` of scratch. For tactic selection: a tactic whose
 * workspace does not fit must not be chosen. */
KILN_PRIVATE bool kiln__workspace_fits(const kiln_build_options *o, size_t bytes);
/* Fails (KILN_ERR_OUT_OF_MEMORY, naming the layer) when a layer of e needs
 * more host workspace at the profiles' max shapes than e->opts.workspace. */
KILN_PRIVATE kiln_status kiln__check_workspace_limit(const kiln_engine *e);

/* Counters of a context, for tests: backend allocations it made, plans it
 * built, and buffers its runs took outside the plan (overflow). */
typedef struct kiln_context_counters {
    uint64_t allocs, plans, overflow;
} kiln_context_counters;
KILN_PRIVATE void kiln__context_counters(const kiln_context *c, kiln_context_counters *out);
/* Whether the context holds a captured CUDA Graph that its next run at
 * the same key replays (context.c, "graph capture"). */
KILN_PRIVATE bool kiln__context_graph_active(const kiln_context *c);
/* The plan of the context's last run, or NULL. */
KILN_PRIVATE const kiln_mem_plan *kiln__context_plan(const kiln_context *c);
/* Tests: with planning off, runs take every buffer from the overflow pools
 * (the runtime's behaviour before memory planning), to compare outputs. */
KILN_PRIVATE void kiln__context_set_planning(kiln_context *c, bool on);

/* Tests: puts value v at offset `off` of memory m's arena in the plan of
 * the context's last run (which its next run at the same shapes uses), as
 * a faulty planner would; for the debug arena check's tests. */
KILN_PRIVATE kiln_status kiln__context_plan_force(kiln_context *c, int m, int v, int64_t off);

/* ---- the debug arena check (src/runtime/debug_arena.c) -----------------
 * kiln_context_set_debug_arena / KILN_DEBUG_ARENA=1: a context's runs
 * check, layer by layer, that each layer reads from the arenas only bytes
 * that the producer of each input wrote and nobody has overwritten since,
 * and that no output or workspace overlaps a live input; regions handed to
 * a producer are poisoned first (host memory). Failures are
 * KILN_ERR_INTERNAL naming the layer, the value and the overwriting layer.
 * Node ni = -1 means the caller (after the run). */
typedef struct kiln_arena_check kiln_arena_check;
KILN_PRIVATE kiln_status kiln__acheck_create(const kiln_engine *e, kiln_arena_check **out);
KILN_PRIVATE void kiln__acheck_free(kiln_arena_check *a);
/* A run begins, with arenas [base[m], base[m] + cap[m]) (NULL: none); nothing in them is owned. */
KILN_PRIVATE kiln_status kiln__acheck_begin(kiln_arena_check *a, void *const base[2], const size_t cap[2]);
/* Node ni reads value v, nb bytes at p in memory m: fails unless v's bytes are still there. */
KILN_PRIVATE kiln_status kiln__acheck_read(const kiln_arena_check *a, int ni, int v, int m, const void *p,
                                           size_t nb);
/* Value v was copied to p (nb bytes) in memory m for node ni. */
KILN_PRIVATE void kiln__acheck_copied(kiln_arena_check *a, int ni, int v, int m, const void *p, size_t nb);
/* Node ni (running in memory m) is about to run kernel args ka: checks its
 * inputs and that its outputs and workspace overlap no input (but the
 * plan's views and in-place outputs) nor each other; hands them over. */
KILN_PRIVATE kiln_status kiln__acheck_before(kiln_arena_check *a, int ni, int m, const kiln_kernel_args *ka);
/* Node ni has run: fails if a float output it was handed poisoned still
 * holds the poison pattern somewhere (host memory). */
KILN_PRIVATE kiln_status kiln__acheck_after(const kiln_arena_check *a, int ni, int m,
                                            const kiln_kernel_args *ka);
/* The poison of dtype t over nb bytes at p, and the number of elements of
 * p..p+nb that hold it (float types; 0 for others), the first in *first. */
KILN_PRIVATE void kiln__acheck_poison(void *p, size_t nb, kiln_dtype t);
KILN_PRIVATE size_t kiln__acheck_unwritten(const void *p, size_t nb, kiln_dtype t, size_t *first);
/* Bytes of a tensor's shape and dtype (0 if unknown or too large). */
KILN_PRIVATE size_t kiln__tensor_nbytes(const kiln_tensor *t);

#endif
