/* context.c -- execution contexts: input/output binding and running the plan.
 *
 * A run walks the plan's nodes in order. Each node runs on the device the
 * builder placed it on: the engine's device, or the CPU for nodes the device
 * has no kernel for. For each node the context
 *   1. makes every input available where the node runs (copying between
 *      host and device memory when the producer ran elsewhere), and on the
 *      host for inputs whose values shape inference reads (op->host_inputs);
 *   2. infers the exact output shapes from the actual inputs (so any shape
 *      inside the profile works, and data-dependent shapes too);
 *   3. places the outputs (and the node's workspace) where the memory plan
 *      says, in the arena of that memory, and runs the kernel.
 * The memory plan (src/runtime/plan.c) is made once per input shape
 * signature, before the first node runs, and kept (the last
 * KILN_PLAN_CACHE signatures); the arenas grow only when a plan needs more,
 * so repeated runs at the same shapes plan nothing, allocate nothing and see
 * the same addresses. A memory limit (kiln_context_set_memory_limit) is
 * checked against the plan before anything is allocated. Values the plan
 * cannot size (data-dependent shapes), or that turn out larger than
 * planned, take buffers from a per-memory overflow pool instead, reused
 * after their last reader. In the debug arena mode (kiln_context_set_debug_arena,
 * KILN_DEBUG_ARENA=1; src/runtime/debug_arena.c) every run also checks, layer
 * by layer, that no layer reads bytes another one has overwritten. */
#include "backends/backend.h"
#include "runtime/debug.h"
#include "runtime/engine.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MEM_HOST = KILN_MEM_HOST, MEM_DEV = KILN_MEM_DEV };
#define KILN_PLAN_CACHE 4

typedef struct kiln_buf {
    void *data;
    size_t cap;
    bool in_use;
} kiln_buf;

/* Overflow buffers of one memory: for what the plan does not cover. */
typedef struct kiln_mempool {
    kiln_buf *bufs;
    int n, cap;
    void *ws;     /* scratch shared by nodes whose workspace is not planned */
    size_t ws_cap;
} kiln_mempool;

/* A value during a run: its shape and where its bytes are. */
typedef struct kiln_slot {
    kiln_tensor t;         /* dtype/rank/dims; t.data unused */
    void *ptr[2];          /* host / device copy, or NULL */
    int buf[2];            /* pool buffer index per memory, or -1 (not pooled) */
    int uses_left;
} kiln_slot;

typedef struct kiln_binding {
    const void *data;
    bool bound;
    const void *run;       /* what this run reads: data, or the context's copy of it (inputs_for_run,
                            * graph_stage_io) */
    int mem;               /* where the caller's bytes are */
    int run_mem;           /* where `run` is */
    /* CUDA Graphs (graph_stage_io): the device pointer of the last run that could use one, whether
     * it has changed between two such runs, and the device copy read instead from then on */
    const void *prev;
    bool churn;
    void *stage;
    size_t stage_cap;
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_RANK];
} kiln_binding;

typedef struct kiln_view_buf {
    void *p;
    size_t cap;
} kiln_view_buf;

typedef struct kiln_out_binding {
    void *data;            /* caller memory for an output, or NULL */
    size_t cap;
    int mem;
    size_t written;        /* bytes of this run's output written there so far */
    /* CUDA Graphs (graph_stage_io): as kiln_binding's; once churned, a graph run writes the output
     * into the context's memory and copies it here */
    void *prev;
    bool churn;
} kiln_out_binding;

struct kiln_context {
    const kiln_engine *e;
    const kiln_backend_i *be[2];   /* host (CPU) backend; the engine's device backend or NULL */
    void *state[2];
    kiln_mempool pool[2];
    kiln_mem_plan *plans[KILN_PLAN_CACHE]; /* most recently used first */
    const kiln_mem_plan *plan;             /* of the current (or last) run */
    kiln_plan_input *sig;                  /* per graph input: this run's signature */
    void *arena[2];
    size_t arena_cap[2];
    size_t mem_limit;                      /* 0: none */
    bool no_plan;                          /* tests: every buffer from the overflow pools */
    kiln_context_counters counters;
    kiln_pool *threads_pool;
    int threads;
    kiln_slot *slots;      /* per value (+1 spare for unread outputs) */
    int *out_slot;         /* per value: graph output index or -1 */
    kiln_binding *in;      /* per graph input */
    kiln_out_binding *out; /* per graph output */
    kiln_node_state *node_state; /* per node */
    bool ran;
    /* CUDA Graphs (see "graph capture" below) */
    void *stream;          /* as given to kiln_context_set_stream */
    int graph_mode;        /* 0: not decided (KILN_CUDA_GRAPHS), 1: on, -1: off */
    int graph_static;      /* 0: not checked, 1: the plan can be captured, -1: it cannot */
    void *graph;           /* the captured launch sequence, or NULL */
    uintptr_t *gkey;       /* 4 keys of graph_klen words: this run, last run, graph, refused */
    int graph_klen;
    bool graph_refused;    /* a capture at the refused key failed */
    bool graph_verbose;    /* KILN_CUDA_VERBOSE: say why a capture failed */
    uint64_t graph_overflow; /* overflow counter when the capture began */
    bool graph_run;        /* this run may replay or capture (its key is in gkey) */
    kiln_slot *graph_out;  /* per graph output: its slot right after the captured run */
    /* per-layer profile (kiln_context_set_profiling): per node, total time and runs */
    double *prof_us;
    int64_t *prof_runs;
    /* debugging ("layer callback" below; docs/debugging.md) */
    kiln_layer_callback layer_cb;
    void *layer_user;
    int cb_layer;          /* the layer whose event is being reported, or -1 */
    kiln_layer_event cb_event;
    kiln_view_buf *view;   /* host copies handed out as views: used_view of them in this event */
    kiln_view_buf *in_copy; /* per graph input: its bytes copied when they are the context's own */
    int n_view, cap_view, used_view;
    bool no_reuse;         /* kiln_context_set_memory_reuse(c, 0) */
    int plant_layer;       /* KILN_TEST_PLANT_BUG: the layer made wrong, or -1 */
    kiln_arena_check *acheck; /* the debug arena check, or NULL (off) */
    atomic_uint busy;      /* while a kiln_context_* call runs or changes it: 1 + the fork
                            * count of the process whose call claimed it; else 0 (ctx_claim) */
    atomic_uintptr_t owner; /* the claiming thread's ctx_thread_tag address, or 0 */
    bool free_pending;     /* freed by its own run's layer callback: freed as the run returns */
    int *vlayout;          /* per value: its layout (kiln__value_layouts), made when a debugger asks */
};

/* A context is used by one thread at a time (kiln.h). Every kiln_context_*
 * call but _create, _free and _tensor claims it for its duration; a call
 * that finds it claimed fails instead of corrupting it: a second thread
 * running or binding the same context, or a layer callback that runs,
 * binds or reconfigures the context whose run called it (which would free
 * the thread pool, profile or arena check under the run, or recurse).
 * kiln_context_free waits for the claim instead (ctx_free_claim). */
static _Thread_local char ctx_thread_tag; /* its address names the thread (never written) */

static unsigned ctx_claim_value(void) { return kiln__fork_gen() + 1u; }

static kiln_status ctx_claim(kiln_context *c, const char *fn) {
    unsigned expected = 0;
    if (atomic_compare_exchange_strong(&c->busy, &expected, ctx_claim_value())) {
        atomic_store_explicit(&c->owner, (uintptr_t)&ctx_thread_tag, memory_order_relaxed);
        return KILN_OK;
    }
    return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                     "%s: the context is in use (by a call on another thread, or by the run whose layer "
                     "callback made this call); a context is used by one thread at a time",
                     fn);
}

static void ctx_destroy(kiln_context *c);

/* Ends c's claim; frees c if its own run's layer callback freed it. */
static void ctx_release(kiln_context *c) {
    if (c->free_pending) {
        ctx_destroy(c);
        return;
    }
    atomic_store_explicit(&c->owner, 0, memory_order_relaxed);
    atomic_store(&c->busy, 0);
}

/* `return call;` with c claimed around it (a NULL c is the call's to report). */
#define WITH_CLAIM(c, fn, call)                         \
    do {                                                \
        if (c) KILN_TRY(ctx_claim((c), (fn)));          \
        kiln_status st_ = (call);                       \
        if (c) ctx_release(c);                          \
        return st_;                                     \
    } while (0)

static int node_mem(const kiln_context *c, const kiln_node *n) { return kiln__node_mem(c->e, n); }

kiln_status kiln_context_create(const kiln_engine *e, kiln_context **out) {
    if (!out) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_create: out is NULL");
    *out = NULL;
    if (!e) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_create: engine is NULL");
    const kiln_backend_i *dev = NULL;
    if (e->opts.device != KILN_DEVICE_CPU) {
        dev = kiln__backend_for(e->opts.device);
        if (!dev)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "the engine was built for device %d, which this kiln was built without",
                             e->opts.device);
        /* weights go to the device once per engine, with its first context */
        KILN_TRY(kiln__engine_prepare((kiln_engine *)e));
    }
    kiln_context *c = kiln__calloc(1, sizeof *c);
    if (!c) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory creating a context");
    const kiln_graph *g = e->graph;
    c->e = e;
    c->be[MEM_HOST] = kiln__backend_for(KILN_DEVICE_CPU);
    c->be[MEM_DEV] = dev;
    c->threads = e->opts.threads;
    size_t nv = (size_t)g->n_values + 1;
    c->slots = kiln__calloc(nv, sizeof *c->slots);
    c->out_slot = kiln__malloc(nv * sizeof *c->out_slot);
    c->in = kiln__calloc((size_t)g->n_inputs + 1, sizeof *c->in);
    c->in_copy = kiln__calloc((size_t)g->n_inputs + 1, sizeof *c->in_copy);
    c->out = kiln__calloc((size_t)g->n_outputs + 1, sizeof *c->out);
    c->node_state = kiln__calloc((size_t)g->n_nodes + 1, sizeof *c->node_state);
    c->sig = kiln__calloc((size_t)g->n_inputs + 1, sizeof *c->sig);
    if (!c->slots || !c->out_slot || !c->in || !c->in_copy || !c->out || !c->node_state || !c->sig) {
        kiln_context_free(c);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory creating a context");
    }
    for (size_t i = 0; i < nv; i++) {
        c->slots[i].buf[0] = c->slots[i].buf[1] = -1;
        c->out_slot[i] = -1;
    }
    c->cb_layer = -1;
    kiln_engine *me = (kiln_engine *)e; /* the note is made once per engine (dev_lock) */
    pthread_mutex_lock(&me->dev_lock);
    c->plant_layer = kiln__plant_bug_layer(g, !me->plant_noted);
    if (c->plant_layer >= 0) me->plant_noted = true;
    pthread_mutex_unlock(&me->dev_lock);
    for (int k = 0; k < g->n_outputs; k++) c->out_slot[g->outputs[k]] = k;
    if (kiln__env_flag("KILN_DEBUG_ARENA")) {
        kiln_status s = kiln__acheck_create(e, &c->acheck);
        if (s != KILN_OK) {
            kiln_context_free(c);
            return s;
        }
    }
    for (int m = 0; m < 2; m++) {
        if (!c->be[m]) continue;
        kiln_status s = c->be[m]->state_create(e->opts.device_index, &c->state[m]);
        if (s == KILN_OK && m == MEM_DEV && c->be[m]->set_precision)
            s = c->be[m]->set_precision(c->state[m], e->opts.precision, e->opts.math == KILN_MATH_FAST);
        if (s != KILN_OK) {
            kiln_context_free(c);
            return s;
        }
    }
    *out = c;
    return KILN_OK;
}

static void mempool_free(kiln_context *c, int m) {
    kiln_mempool *p = &c->pool[m];
    for (int i = 0; i < p->n; i++) c->be[m]->free(c->state[m], p->bufs[i].data);
    if (p->ws) c->be[m]->free(c->state[m], p->ws);
    kiln__free(p->bufs);
    memset(p, 0, sizeof *p);
    if (c->arena[m]) c->be[m]->free(c->state[m], c->arena[m]);
    c->arena[m] = NULL;
    c->arena_cap[m] = 0;
}

/* Claims c for kiln_context_free: waits while another thread's call has it
 * (a run in progress ends before its context is freed). Returns false when
 * c must not be freed now: the call that has it is this thread's own run,
 * whose layer callback is freeing it (then the run frees it as it returns).
 * A claim made before a fork() by another thread of the parent is not waited
 * for: no thread of this child will end it. */
static bool ctx_free_claim(kiln_context *c) {
    unsigned mine = ctx_claim_value();
    for (unsigned wait_us = 1;;) {
        unsigned v = 0;
        if (atomic_compare_exchange_strong(&c->busy, &v, mine)) return true;
        /* (this thread's run; also in a child forked from its layer callback,
         * whose copy of the run goes on) */
        if (atomic_load_explicit(&c->owner, memory_order_relaxed) == (uintptr_t)&ctx_thread_tag) {
            c->free_pending = true;
            return false;
        }
        if (v != mine) return true; /* another thread of the parent process's */
        struct timespec ts = {0, (long)wait_us * 1000};
        nanosleep(&ts, NULL);
        if (wait_us < 1000) wait_us *= 2;
    }
}

void kiln_context_free(kiln_context *c) {
    if (!c || !ctx_free_claim(c)) return;
    ctx_destroy(c);
}

static void ctx_destroy(kiln_context *c) {
    if (c->be[MEM_DEV] && c->state[MEM_DEV]) c->be[MEM_DEV]->sync(c->state[MEM_DEV]);
    if (c->node_state)
        for (int i = 0; i < c->e->graph->n_nodes; i++)
            if (c->node_state[i].p && c->node_state[i].free) c->node_state[i].free(c->node_state[i].p);
    kiln__free(c->node_state);
    kiln__free(c->prof_us);
    kiln__free(c->prof_runs);
    for (int i = 0; i < c->n_view; i++) kiln__free(c->view[i].p);
    kiln__free(c->view);
    for (int i = 0; c->in_copy && i < c->e->graph->n_inputs; i++) kiln__free(c->in_copy[i].p);
    kiln__free(c->in_copy);
    kiln__acheck_free(c->acheck);
    kiln__free(c->vlayout);
    if (c->graph) c->be[MEM_DEV]->graph_free(c->state[MEM_DEV], c->graph);
    for (int i = 0; c->in && c->be[MEM_DEV] && c->state[MEM_DEV] && i < c->e->graph->n_inputs; i++)
        if (c->in[i].stage) c->be[MEM_DEV]->free(c->state[MEM_DEV], c->in[i].stage);
    kiln__free(c->gkey);
    kiln__free(c->graph_out);
    for (int m = 0; m < 2; m++) {
        if (!c->be[m]) continue;
        if (m == MEM_DEV && c->state[m]) c->be[m]->sync(c->state[m]);
        mempool_free(c, m);
        if (c->state[m]) c->be[m]->state_free(c->state[m]);
    }
    kiln__pool_free(c->threads_pool);
    for (int i = 0; i < KILN_PLAN_CACHE; i++) kiln__plan_free(c->plans[i]);
    kiln__free(c->sig);
    kiln__free(c->slots);
    kiln__free(c->out_slot);
    kiln__free(c->in);
    kiln__free(c->out);
    kiln__free(c);
}

static kiln_status ctx_set_threads(kiln_context *c, int threads) {
    if (!c) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_threads: context is NULL");
    if (threads < 0 || threads > 1024)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "threads must be in 0..1024, got %d", threads);
    if (threads != c->threads) {
        kiln__pool_free(c->threads_pool);
        c->threads_pool = NULL;
        c->threads = threads;
    }
    return KILN_OK;
}

kiln_status kiln_context_set_threads(kiln_context *c, int threads) {
    WITH_CLAIM(c, "kiln_context_set_threads", ctx_set_threads(c, threads));
}

static kiln_status ctx_set_stream(kiln_context *c, void *stream) {
    if (!c) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_stream: context is NULL");
    if (!c->be[MEM_DEV]) {
        if (stream) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "a stream was given for a CPU engine");
        return KILN_OK;
    }
    KILN_TRY(c->be[MEM_DEV]->set_stream(c->state[MEM_DEV], stream));
    c->stream = stream;
    return KILN_OK;
}

kiln_status kiln_context_set_stream(kiln_context *c, void *stream) {
    WITH_CLAIM(c, "kiln_context_set_stream", ctx_set_stream(c, stream));
}

static int find_io(const kiln_graph *g, const int *list, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(g->values[list[i]].name, name)) return i;
    return -1;
}

/* "engine has no input named 'x' (inputs: 'a', 'b')" */
static kiln_status no_such_io(const kiln_graph *g, bool input, const char *name) {
    const int *list = input ? g->inputs : g->outputs;
    int n = input ? g->n_inputs : g->n_outputs;
    char buf[512];
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < n && len + 1 < sizeof buf; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s'%s'", i ? ", " : "",
                                g->values[list[i]].name);
    return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "engine has no %s named '%s' (%ss: %s)",
                     input ? "input" : "output", name, input ? "input" : "output", buf);
}

static int pointer_mem(const kiln_context *c, const void *p) {
    const kiln_backend_i *dev = c->be[MEM_DEV];
    return (dev && dev->owns_pointer && p && dev->owns_pointer(c->state[MEM_DEV], p)) ? MEM_DEV
                                                                                      : MEM_HOST;
}

static kiln_status ctx_set_input(kiln_context *c, const char *name, kiln_dtype dtype, int rank,
                                 const int64_t *dims, const void *data) {
    char a[160], b[160], c2[160];
    if (!c || !name)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_input: NULL context or name");
    const kiln_graph *g = c->e->graph;
    int k = find_io(g, g->inputs, g->n_inputs, name);
    if (k < 0) return no_such_io(g, true, name);
    const kiln_value *v = &g->values[g->inputs[k]];
    const kiln_profile *p = &c->e->profiles[k];
    if (dtype != v->info.dtype)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "input '%s': expected dtype %s, got %s", name,
                         kiln_dtype_name(v->info.dtype), kiln_dtype_name(dtype));
    if (rank != p->rank)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "input '%s': expected rank %d %s, got rank %d",
                         name, p->rank, kiln__shape_str(v->info.rank, v->info.dims, a, sizeof a),
                         rank);
    if (rank > 0 && !dims)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "input '%s': dims is NULL; a rank-%d input needs its %d dims", name, rank,
                         rank);
    for (int d = 0; d < rank; d++) {
        if (dims[d] < p->min[d] || dims[d] > p->max[d]) {
            if (p->min[d] == p->max[d])
                return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                                 "input '%s': shape %s does not match the engine's shape %s "
                                 "(dimension %d must be %lld)",
                                 name, kiln__shape_str(rank, dims, a, sizeof a),
                                 kiln__shape_str(p->rank, p->min, b, sizeof b), d,
                                 (long long)p->min[d]);
            return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                             "input '%s': shape %s is outside the engine's profile (min %s, max %s; "
                             "dimension %d must be in %lld..%lld)",
                             name, kiln__shape_str(rank, dims, a, sizeof a),
                             kiln__shape_str(p->rank, p->min, b, sizeof b),
                             kiln__shape_str(p->rank, p->max, c2, sizeof c2), d,
                             (long long)p->min[d], (long long)p->max[d]);
        }
    }
    if (!data && kiln__numel(rank, dims) > 0)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "input '%s': data is NULL", name);
    kiln_binding *bd = &c->in[k];
    bd->data = data;
    bd->bound = true;
    bd->mem = pointer_mem(c, data);
    bd->dtype = dtype;
    bd->rank = rank;
    for (int d = 0; d < rank; d++) bd->dims[d] = dims[d];
    return KILN_OK;
}

kiln_status kiln_context_set_input(kiln_context *c, const char *name, kiln_dtype dtype, int rank,
                                   const int64_t *dims, const void *data) {
    WITH_CLAIM(c, "kiln_context_set_input", ctx_set_input(c, name, dtype, rank, dims, data));
}

static kiln_status ctx_set_output(kiln_context *c, const char *name, void *data, size_t capacity) {
    if (!c || !name)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_output: NULL context or name");
    const kiln_graph *g = c->e->graph;
    int k = find_io(g, g->outputs, g->n_outputs, name);
    if (k < 0) return no_such_io(g, false, name);
    c->out[k].data = data;
    c->out[k].cap = data ? capacity : 0;
    c->out[k].mem = pointer_mem(c, data);
    return KILN_OK;
}

kiln_status kiln_context_set_output(kiln_context *c, const char *name, void *data, size_t capacity) {
    WITH_CLAIM(c, "kiln_context_set_output", ctx_set_output(c, name, data, capacity));
}

/* ---- memory: plans, arenas, overflow buffers ---------------------------- */

#define ARENA_SLACK 64 /* past an arena's last block, for kernels' vector tails */

static const char *mem_name(int m) { return m == MEM_DEV ? "device" : "host"; }
static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

/* Frees the overflow buffers no value is using (under a memory limit,
 * before allocating more). */
static void pools_trim(kiln_context *c) {
    for (int m = 0; m < 2; m++) {
        if (!c->be[m]) continue;
        kiln_mempool *p = &c->pool[m];
        for (int i = 0; i < p->n; i++) {
            kiln_buf *b = &p->bufs[i];
            if (b->in_use || !b->data) continue;
            c->be[m]->free(c->state[m], b->data);
            b->data = NULL;
            b->cap = 0;
        }
        if (p->ws) c->be[m]->free(c->state[m], p->ws);
        p->ws = NULL;
        p->ws_cap = 0;
    }
}

/* Every allocation of activation memory: counted, and refused before it
 * is made when it would take the context past its memory limit. */
static kiln_status ctx_alloc(kiln_context *c, int m, size_t bytes, const char *what, void **out) {
    *out = NULL;
    if (c->mem_limit && kiln__context_memory(c) + bytes > c->mem_limit) {
        pools_trim(c);
        size_t held = kiln__context_memory(c);
        if (held + bytes > c->mem_limit)
            return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY,
                             "'%s' needs %zu more bytes of %s memory, but the context holds %zu "
                             "bytes and its memory limit is %zu bytes (%.1f MiB)",
                             what, bytes, mem_name(m), held, c->mem_limit, mib(c->mem_limit));
    }
    void *p = c->be[m]->alloc(c->state[m], bytes);
    if (!p)
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of %s memory: %zu bytes for '%s'", mem_name(m),
                         bytes, what);
    c->counters.allocs++;
    *out = p;
    return KILN_OK;
}

/* Takes a free overflow buffer of at least `size` bytes from pool m;
 * returns its index in *idx. Best fit; otherwise the largest free one is
 * regrown, or a new one is made. */
static kiln_status take_buf(kiln_context *c, int m, size_t size, const char *what, int *idx) {
    kiln_mempool *p = &c->pool[m];
    int best = -1;
    c->counters.overflow++;
    for (int i = 0; i < p->n; i++) {
        kiln_buf *b = &p->bufs[i];
        if (b->in_use || !b->data || b->cap < size) continue;
        if (best < 0 || b->cap < p->bufs[best].cap) best = i;
    }
    if (best < 0) {
        for (int i = 0; i < p->n; i++)
            if (!p->bufs[i].in_use && (best < 0 || p->bufs[i].cap > p->bufs[best].cap)) best = i;
        if (best < 0) {
            KILN_TRY(kiln__grow((void **)&p->bufs, &p->cap, p->n + 1, sizeof *p->bufs));
            best = p->n++;
            p->bufs[best].data = NULL;
            p->bufs[best].cap = 0;
            p->bufs[best].in_use = false;
        }
        kiln_buf *b = &p->bufs[best];
        if (b->data) c->be[m]->free(c->state[m], b->data);
        b->data = NULL;
        b->cap = 0;
        b->in_use = true; /* kept by a trim inside ctx_alloc */
        kiln_status s = ctx_alloc(c, m, size + 64, what, &b->data);
        b->in_use = false;
        if (s != KILN_OK) return s;
        b->cap = size + 64;
    }
    p->bufs[best].in_use = true;
    *idx = best;
    return KILN_OK;
}

static bool sig_equal(const kiln_plan_input *a, const kiln_plan_input *b, int n) {
    for (int k = 0; k < n; k++) {
        if (a[k].mem != b[k].mem || a[k].rank != b[k].rank) return false;
        for (int d = 0; d < a[k].rank; d++)
            if (a[k].dims[d] != b[k].dims[d]) return false;
    }
    return true;
}

/* Finds the plan for the bound inputs' shapes, or makes it. */
static kiln_status select_plan(kiln_context *c) {
    const kiln_graph *g = c->e->graph;
    for (int k = 0; k < g->n_inputs; k++) {
        memset(&c->sig[k], 0, sizeof c->sig[k]);
        c->sig[k].mem = c->in[k].mem;
        c->sig[k].rank = c->in[k].rank;
        memcpy(c->sig[k].dims, c->in[k].dims, (size_t)c->in[k].rank * sizeof c->sig[k].dims[0]);
    }
    for (int i = 0; i < KILN_PLAN_CACHE && c->plans[i]; i++) {
        if (!sig_equal(c->plans[i]->sig, c->sig, g->n_inputs)) continue;
        kiln_mem_plan *hit = c->plans[i];
        memmove(c->plans + 1, c->plans, (size_t)i * sizeof *c->plans);
        c->plans[0] = hit;
        c->plan = hit;
        return KILN_OK;
    }
    kiln_mem_plan *p;
    KILN_TRY(kiln__plan_build(c->e, c->sig, &p));
    c->counters.plans++;
    kiln__plan_free(c->plans[KILN_PLAN_CACHE - 1]);
    memmove(c->plans + 1, c->plans, (KILN_PLAN_CACHE - 1) * sizeof *c->plans);
    c->plans[0] = p;
    c->plan = p;
    return KILN_OK;
}

/* Makes the arenas large enough for the current plan, after checking the
 * memory limit against what the plan needs. */
static kiln_status arena_reserve(kiln_context *c) {
    const kiln_mem_plan *p = c->plan;
    size_t need[2], total = 0;
    for (int m = 0; m < 2; m++) {
        need[m] = p->n_blocks[m] ? p->arena[m] + ARENA_SLACK : 0;
        total += need[m];
    }
    if (c->mem_limit && total > c->mem_limit) {
        const kiln_graph *g = c->e->graph;
        char shapes[512], sh[160];
        size_t len = 0;
        shapes[0] = 0;
        for (int k = 0; k < g->n_inputs && len + 1 < sizeof shapes; k++)
            len += (size_t)snprintf(shapes + len, sizeof shapes - len, "%s%s:%s", k ? ", " : "",
                                    g->values[g->inputs[k]].name,
                                    kiln__shape_str(c->sig[k].rank, c->sig[k].dims, sh, sizeof sh));
        char split[96] = "";
        if (c->be[MEM_DEV])
            snprintf(split, sizeof split, " (host %zu + device %zu)", need[MEM_HOST], need[MEM_DEV]);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY,
                         "the run needs %zu bytes (%.1f MiB) of activation memory%s at input shapes "
                         "%s, above the context's memory limit of %zu bytes (%.1f MiB); nothing was "
                         "allocated",
                         total, mib(total), split, shapes, c->mem_limit, mib(c->mem_limit));
    }
    for (int m = 0; m < 2; m++) {
        bool shrink = c->mem_limit && kiln__context_memory(c) > c->mem_limit && c->arena_cap[m] > need[m];
        if (c->arena_cap[m] >= need[m] && !shrink) continue;
        if (c->arena[m]) c->be[m]->free(c->state[m], c->arena[m]);
        c->arena[m] = NULL;
        c->arena_cap[m] = 0;
        if (!need[m]) continue;
        KILN_TRY(ctx_alloc(c, m, need[m], "activation arena", &c->arena[m]));
        c->arena_cap[m] = need[m];
    }
    return KILN_OK;
}

/* Where the plan puts value v in memory m, if it fits there; else NULL. */
static void *planned_value(const kiln_context *c, int v, int m, size_t nb) {
    const kiln_mem_plan *p = c->plan;
    if (!p || !c->arena[m] || p->off[m][v] < 0 || nb > p->nbytes[v]) return NULL;
    return (char *)c->arena[m] + p->off[m][v];
}

/* The same for node ni's aux entry k (an output nobody reads, or k ==
 * n_out: its workspace). */
static void *planned_aux(const kiln_context *c, int ni, int k, int m, size_t nb) {
    const kiln_mem_plan *p = c->plan;
    if (!p || !c->arena[m]) return NULL;
    int a = p->aux_first[ni] + k;
    if (p->aux_off[a] < 0 || nb > p->aux_bytes[a]) return NULL;
    return (char *)c->arena[m] + p->aux_off[a];
}

static void slot_release(kiln_context *c, kiln_slot *s) {
    for (int m = 0; m < 2; m++) {
        if (s->buf[m] >= 0) c->pool[m].bufs[s->buf[m]].in_use = false;
        s->buf[m] = -1;
        s->ptr[m] = NULL;
    }
}

static size_t slot_bytes(const kiln_slot *s) { return kiln__tensor_nbytes(&s->t); }

/* Makes value v's bytes available in memory m (copying if needed) for node
 * ni (-1: the caller, after the run). */
static kiln_status slot_make_available(kiln_context *c, int v, int m, int ni) {
    kiln_slot *s = &c->slots[v];
    if (s->ptr[m]) return KILN_OK;
    int from = 1 - m;
    size_t nb = slot_bytes(s);
    const char *name = c->e->graph->values[v].name;
    if (!s->ptr[from] && nb)
        return KILN_FAIL(KILN_ERR_INTERNAL, "tensor '%s' has no data", name);
    if ((s->ptr[m] = planned_value(c, v, m, nb)) == NULL) {
        int b;
        KILN_TRY(take_buf(c, m, nb, name, &b));
        s->buf[m] = b;
        s->ptr[m] = c->pool[m].bufs[b].data;
    }
    if (!nb) return KILN_OK;
    if (c->acheck) {
        KILN_TRY(kiln__acheck_read(c->acheck, ni, v, from, s->ptr[from], nb));
        kiln__acheck_copied(c->acheck, ni, v, m, s->ptr[m], nb);
    }
    const kiln_backend_i *dev = c->be[MEM_DEV];
    if (m == MEM_DEV) return dev->to_device(c->state[MEM_DEV], s->ptr[m], s->ptr[from], nb);
    return dev->to_host(c->state[MEM_DEV], s->ptr[m], s->ptr[from], nb);
}

static kiln_status workspace(kiln_context *c, int m, size_t ws, const char *node, void **out) {
    kiln_mempool *p = &c->pool[m];
    *out = NULL;
    if (!ws) return KILN_OK;
    if (ws > p->ws_cap) {
        if (p->ws) c->be[m]->free(c->state[m], p->ws);
        p->ws = NULL;
        p->ws_cap = 0;
        KILN_TRY(ctx_alloc(c, m, ws, node, &p->ws));
        p->ws_cap = ws;
    }
    *out = p->ws;
    return KILN_OK;
}

/* ---- running ------------------------------------------------------------ */

/* Engines loaded from a file map it read-only (blob_kind 1). Pages of such a
 * mapping that nothing needs to keep resident can be handed back to the
 * kernel: they are read again from the file (page cache) if touched later,
 * so this never changes a value, only what counts as resident memory.
 * Releases the whole pages inside [p, p + n) when they lie in e's mapping;
 * does nothing otherwise (engines built in memory or loaded from memory). */
static void engine_release_pages(const kiln_engine *e, const void *p, size_t n) {
    if (e && e->blob_kind == 1) kiln__mapping_release(e->blob, e->blob_size, p, n);
}

/* A CPU kernel that has just created its node state (prepacked weights, a
 * library primitive with reordered weights) no longer reads its constant
 * inputs at run time: their pages in the engine's file mapping are handed
 * back, so that the weights are not resident twice (mapped and packed). If
 * anything reads them again (another context, a repack) they come back from
 * the page cache. */
static void release_packed_constants(kiln_context *c, const kiln_node *n) {
    const kiln_graph *g = c->e->graph;
    for (int i = 0; i < n->n_in; i++) {
        if (n->in[i] < 0) continue;
        const kiln_value *v = &g->values[n->in[i]];
        if ((v->flags & KILN_VALUE_CONST) && v->data) engine_release_pages(c->e, v->data, v->nbytes);
    }
}

/* The layout value v's bytes are in (the layouts made on first use: a
 * debugger's or a test's, never a plain run's). */
static kiln_status value_layout(kiln_context *c, int v, int *layout) {
    if (!c->vlayout && !(c->vlayout = kiln__value_layouts(c->e->graph)))
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (tensor layouts)");
    *layout = c->vlayout[v];
    return KILN_OK;
}

/* KILN_TEST_PLANT_BUG (tests of kiln debug only): makes output 0 of layer
 * ni wrong, as a buggy kernel would. */
static kiln_status plant_bug(kiln_context *c, int ni) {
    const kiln_graph *g = c->e->graph;
    int v = g->nodes[ni].out[0], m = node_mem(c, &g->nodes[ni]);
    kiln_slot *s = &c->slots[v];
    int layout = KILN_VLAYOUT_PLAIN;
    KILN_TRY(value_layout(c, v, &layout));
    size_t nb = kiln__vlayout_stored_bytes(layout, &s->t);
    if (m == MEM_HOST || !nb) {
        if (s->ptr[MEM_HOST]) kiln__plant_bug_apply(layout, &s->t, s->ptr[MEM_HOST]);
        return KILN_OK;
    }
    void *h = kiln__malloc(nb);
    if (!h) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (KILN_TEST_PLANT_BUG)");
    const kiln_backend_i *dev = c->be[MEM_DEV];
    kiln_status st = dev->to_host(c->state[MEM_DEV], h, s->ptr[MEM_DEV], nb);
    if (st == KILN_OK) {
        kiln__plant_bug_apply(layout, &s->t, h);
        st = dev->to_device(c->state[MEM_DEV], s->ptr[MEM_DEV], h, nb);
    }
    if (st == KILN_OK) st = dev->sync(c->state[MEM_DEV]);
    kiln__free(h);
    return st;
}

/* Whether infer reads the values of input i of n (op->host_inputs). */
static bool host_input(const kiln_node *n, int i) {
    return i < 32 && (n->op->host_inputs & (1u << i));
}

static kiln_status check_output_overlap(const kiln_context *c, int k, int m, size_t n);

static kiln_status run_node_call(kiln_context *c, int ni, kiln_call *call) {
    const kiln_node *n = &c->e->graph->nodes[ni];
    const kiln_graph *g = c->e->graph;
    int m = node_mem(c, n);
    int tmp_bufs[KILN_CALL_MAX], n_tmp = 0;
    kiln_tensor *out_t = call->out_t;
    for (int i = 0; i < n->n_in; i++) {
        if (n->in[i] < 0) continue;
        kiln_slot *s = &c->slots[n->in[i]];
        KILN_TRY(slot_make_available(c, n->in[i], m, ni));
        bool need_host = m == MEM_HOST || host_input(n, i);
        if (need_host && m == MEM_DEV) KILN_TRY(slot_make_available(c, n->in[i], MEM_HOST, ni));
        kiln_tinfo info = {.dtype = s->t.dtype, .rank = s->t.rank, .data = need_host ? s->ptr[MEM_HOST] : NULL};
        memcpy(info.dims, s->t.dims, sizeof info.dims);
        /* A device layer's host input (Slice's starts, Pad's pads, Reduce's axes...) is handed
         * to its kernel as the host copy, which the kernels read in place
         * (kiln__cuda_read_ints): a constant's is there from the start. Handing the device
         * copy made the kernel copy it back, a stream synchronization per input per run,
         * which also made every CUDA Graph capture of the engine fail (Swin-T: ~300 per
         * inference). */
        kiln__call_input(call, i, &info, need_host ? s->ptr[MEM_HOST] : s->ptr[m]);
    }
    size_t held = kiln__context_memory(c);
    c->node_state[ni].mem_budget = !c->mem_limit ? 0 : held < c->mem_limit ? c->mem_limit - held : 1;
    KILN_TRY(kiln__call_infer(call, true, &c->node_state[ni], true));
    const kiln_tinfo *outs = call->out;
    kiln_status st = KILN_OK;
    for (int i = 0; i < n->n_out; i++) {
        int v = n->out[i];
        size_t nb = kiln__value_nbytes(&outs[i]);
        if (!nb && kiln__numel(outs[i].rank, outs[i].dims) > 0) {
            char sh[160];
            st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (%s): output %d of shape %s is too large",
                           n->name, n->op->name, i,
                           kiln__shape_str(outs[i].rank, outs[i].dims, sh, sizeof sh));
            goto done;
        }
        if (v < 0) { /* an output nobody reads: memory held until the kernel ran */
            if ((out_t[i].data = planned_aux(c, ni, i, m, nb)) != NULL) continue;
            int b;
            if ((st = take_buf(c, m, nb, n->name, &b)) != KILN_OK) goto done;
            tmp_bufs[n_tmp++] = b;
            out_t[i].data = c->pool[m].bufs[b].data;
            continue;
        }
        kiln_slot *s = &c->slots[v];
        slot_release(c, s);
        s->t = out_t[i];
        int ok = c->out_slot[v];
        /* caller memory not aligned to the element is written by a copy after the run
         * (deliver_output), not by the kernel's element stores */
        size_t es = kiln_dtype_size(outs[i].dtype);
        if (ok >= 0 && c->out[ok].data && c->out[ok].mem == m && c->out[ok].cap >= nb &&
            (m != MEM_HOST || !es || (uintptr_t)c->out[ok].data % es == 0) &&
            !(c->graph_run && c->out[ok].churn)) {
            if ((st = check_output_overlap(c, ok, m, nb)) != KILN_OK) goto done;
            c->out[ok].written = nb;
            s->ptr[m] = c->out[ok].data; /* write straight into caller memory */
        } else {
            if (ok >= 0 && c->out[ok].data && c->out[ok].cap < nb) {
                st = KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                               "output '%s' needs %zu bytes, but the bound buffer holds %zu",
                               g->values[v].name, nb, c->out[ok].cap);
                goto done;
            }
            if ((s->ptr[m] = planned_value(c, v, m, nb)) == NULL) {
                int b;
                if ((st = take_buf(c, m, nb, g->values[v].name, &b)) != KILN_OK) goto done;
                s->buf[m] = b;
                s->ptr[m] = c->pool[m].bufs[b].data;
            }
        }
        out_t[i].data = s->ptr[m];
    }
    size_t ws_size = m == MEM_HOST ? kiln__kernel_workspace(kiln__backend_kernel(c->be[m], n), &call->ia) : 0;
    void *ws = ws_size ? planned_aux(c, ni, n->n_out, m, ws_size) : NULL;
    if (!ws && (st = workspace(c, m, ws_size, n->name, &ws)) != KILN_OK) goto done;
    kiln__call_args(call, ws, ws_size, m == MEM_HOST ? c->threads_pool : NULL, &c->node_state[ni]);
    kiln_kernel_args ka = call->ka;
    ka.device_state = m == MEM_DEV ? c->state[m] : NULL;
    for (int i = 0; m == MEM_DEV && i < n->n_in && i < 32; i++)
        if (n->in[i] >= 0 && host_input(n, i)) ka.host_in |= 1u << i;
    bool had_state = c->node_state[ni].p != NULL;
    if (c->acheck && (st = kiln__acheck_before(c->acheck, ni, m, &ka)) != KILN_OK) goto done;
    st = c->be[m]->run(c->state[m], &ka);
    if (st == KILN_OK && c->acheck) st = kiln__acheck_after(c->acheck, ni, m, &ka);
    if (st == KILN_OK && m == MEM_HOST && !had_state && c->node_state[ni].p)
        release_packed_constants(c, n);
    if (st == KILN_OK && ni == c->plant_layer) st = plant_bug(c, ni);
done:
    for (int j = 0; j < n_tmp; j++) c->pool[m].bufs[tmp_bufs[j]].in_use = false;
    return st;
}

static kiln_status run_node(kiln_context *c, int ni) {
    kiln_call call;
    KILN_TRY(kiln__call_begin(&call, c->e->graph, &c->e->graph->nodes[ni]));
    kiln_status st = run_node_call(c, ni, &call);
    kiln__call_end(&call);
    return st;
}

/* Output k is about to be written to its bound buffer, n bytes in memory m.
 * Those bytes must not overlap a graph input's bytes nor another output's
 * bytes of this run: a layer writing an output over an input changed what
 * later layers read (a silent wrong result: with y1 bound over x, y2 = x + 1
 * read 2x + 1), and outputs written over each other lose one. */
static kiln_status check_output_overlap(const kiln_context *c, int k, int m, size_t n) {
    const kiln_graph *g = c->e->graph;
    uintptr_t a = (uintptr_t)c->out[k].data, b = a + n;
    if (!n) return KILN_OK;
    const char *what = NULL, *name = NULL;
    for (int i = 0; i < g->n_inputs && !what; i++) {
        const kiln_binding *in = &c->in[i];
        if (!in->bound || !in->run || in->mem != m) continue;
        uintptr_t ia = (uintptr_t)in->run;
        uintptr_t ib = ia + (size_t)kiln__numel(in->rank, in->dims) * kiln_dtype_size(in->dtype);
        if (a < ib && ia < b) what = "input", name = g->values[g->inputs[i]].name;
    }
    for (int j = 0; j < g->n_outputs && !what; j++) {
        const kiln_out_binding *o = &c->out[j];
        if (j == k || !o->written || o->mem != m) continue;
        uintptr_t oa = (uintptr_t)o->data, ob = oa + o->written;
        if (a < ob && oa < b) what = "output", name = g->values[g->outputs[j]].name;
    }
    if (!what) return KILN_OK;
    return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                     "output '%s' is bound to memory that overlaps %s '%s': a run writes its outputs "
                     "while layers still read the inputs; give each output a buffer of its own",
                     g->values[g->outputs[k]].name, what, name);
}

/* Copies graph output k into the caller's bound buffer when the kernel
 * could not write it there directly. */
static kiln_status deliver_output(kiln_context *c, int k) {
    kiln_out_binding *ob = &c->out[k];
    int v = c->e->graph->outputs[k];
    kiln_slot *s = &c->slots[v];
    if (!ob->data || s->ptr[ob->mem] == ob->data) return KILN_OK;
    size_t nb = slot_bytes(s);
    if (ob->cap < nb)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "output '%s' needs %zu bytes, but the bound buffer holds %zu",
                         c->e->graph->values[v].name, nb, ob->cap);
    KILN_TRY(check_output_overlap(c, k, ob->mem, nb));
    ob->written = nb;
    int from = s->ptr[ob->mem] ? ob->mem : 1 - ob->mem;
    if (nb) {
        if (from == MEM_HOST && ob->mem == MEM_HOST) memcpy(ob->data, s->ptr[MEM_HOST], nb);
        else if (ob->mem == MEM_DEV)
            KILN_TRY(c->be[MEM_DEV]->to_device(c->state[MEM_DEV], ob->data, s->ptr[from], nb));
        else KILN_TRY(c->be[MEM_DEV]->to_host(c->state[MEM_DEV], ob->data, s->ptr[from], nb));
    }
    /* the bound buffer now holds the output */
    if (s->buf[ob->mem] >= 0) c->pool[ob->mem].bufs[s->buf[ob->mem]].in_use = false;
    s->buf[ob->mem] = -1;
    s->ptr[ob->mem] = ob->data;
    return KILN_OK;
}

/* ---- graph capture (CUDA Graphs) ----------------------------------------
 * A device context whose whole plan runs on the device and a memory plan
 * that places every value records its launch sequence on the second run
 * with the same key (plan, arenas, stream, input pointers and shapes, the
 * outputs written in place; host inputs and buffers that change from run to
 * run are staged: graph_stage_io) and replays it from then on: a replay skips
 * the node loop and restores the outputs' slots as the captured run left
 * them. A capture the backend invalidates (a kernel synchronized or had to
 * allocate) is dropped, the run is done node by node, and that key is not
 * captured again. kiln_context_set_cuda_graphs / KILN_CUDA_GRAPHS=0 turn it
 * off. */

static void slots_reset(kiln_context *c);
static kiln_status run_nodes(kiln_context *c);

static void graph_drop(kiln_context *c) {
    if (c->graph) c->be[MEM_DEV]->graph_free(c->state[MEM_DEV], c->graph);
    c->graph = NULL;
}

bool kiln__context_graph_active(const kiln_context *c) { return c && c->graph; }

static kiln_status ctx_set_cuda_graphs(kiln_context *c, int on) {
    if (!c) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_cuda_graphs: context is NULL");
    c->graph_mode = on ? 1 : -1;
    if (!on && c->be[MEM_DEV]) graph_drop(c);
    return KILN_OK;
}

kiln_status kiln_context_set_cuda_graphs(kiln_context *c, int on) {
    WITH_CLAIM(c, "kiln_context_set_cuda_graphs", ctx_set_cuda_graphs(c, on));
}

/* A graph reads its inputs and writes its in-place outputs at the addresses it was captured with.
 * Callers that hand new buffers at each run (a framework's allocator, two buffers in turn) would
 * never run one: a device input or output whose address changed between two runs that could use a
 * graph is staged from then on (churn) — the input copied into a device buffer of the context's
 * own (stage) before the run, the output written into the context's memory and copied to the
 * caller's buffer after it — one device copy each per run. Host inputs are always staged (a graph
 * reads device memory). False where it cannot stage (out of memory): this run goes node by node. */
static bool graph_stage_io(kiln_context *c) {
    const kiln_graph *g = c->e->graph;
    const kiln_backend_i *dev = c->be[MEM_DEV];
    for (int k = 0; k < g->n_outputs; k++) {
        kiln_out_binding *ob = &c->out[k];
        if (ob->mem != MEM_DEV || !ob->data) continue;
        if (ob->prev && ob->prev != ob->data) ob->churn = true;
        ob->prev = ob->data;
    }
    for (int k = 0; k < g->n_inputs; k++) {
        kiln_binding *bd = &c->in[k];
        kiln_slot *s = &c->slots[g->inputs[k]]; /* (slots_reset gave it the binding's shape) */
        const size_t nb = slot_bytes(s);
        if (bd->mem == MEM_DEV && bd->data) {
            if (bd->prev && bd->prev != bd->data) bd->churn = true;
            bd->prev = bd->data;
        }
        if (!nb || !bd->run || (bd->run_mem == MEM_DEV && !bd->churn)) continue;
        if (bd->stage_cap < nb) {
            if (bd->stage) dev->free(c->state[MEM_DEV], bd->stage);
            bd->stage = NULL;
            bd->stage_cap = 0;
            if (ctx_alloc(c, MEM_DEV, nb, "an input's copy for CUDA Graphs", &bd->stage) != KILN_OK) {
                kiln__clear_error();
                return false;
            }
            bd->stage_cap = nb;
        }
        if (dev->to_device(c->state[MEM_DEV], bd->stage, bd->run, nb) != KILN_OK) {
            kiln__clear_error();
            return false;
        }
        bd->run = bd->stage;
        bd->run_mem = MEM_DEV;
        s->ptr[MEM_DEV] = bd->stage;
    }
    return true;
}

/* Whether this run may replay or capture a graph; fills the run's key. */
static bool graph_usable(kiln_context *c) {
    const kiln_backend_i *dev = c->be[MEM_DEV];
    const kiln_graph *g = c->e->graph;
    if (!dev || !dev->capture_begin || !dev->capture_end || !dev->graph_launch || !dev->graph_free)
        return false;
    if (c->graph_mode == 0) {
        const char *env = getenv("KILN_CUDA_GRAPHS");
        c->graph_mode = env && !strcmp(env, "0") ? -1 : 1;
        c->graph_verbose = kiln__env_flag("KILN_CUDA_VERBOSE");
    }
    /* profiling times layers one by one; the debug arena check checks them; a layer callback
     * and a planted bug see each layer */
    if (c->graph_mode < 0 || c->prof_us || c->acheck || c->layer_cb || c->plant_layer >= 0) return false;
    if (c->graph_static == 0) {
        c->graph_static = 1;
        for (int ni = 0; ni < g->n_nodes && c->graph_static > 0; ni++) {
            const kiln_node *n = &g->nodes[ni];
            if (node_mem(c, n) != MEM_DEV) c->graph_static = -1;
            for (int i = 0; i < n->n_in; i++)
                if (host_input(n, i) && n->in[i] >= 0 &&
                    !(g->values[n->in[i]].flags & KILN_VALUE_CONST))
                    c->graph_static = -1;
        }
        c->graph_klen = 4 + g->n_inputs * (3 + KILN_MAX_RANK) + 3 * g->n_outputs;
        c->gkey = kiln__calloc(4 * (size_t)c->graph_klen, sizeof *c->gkey);
        c->graph_out = kiln__calloc((size_t)g->n_outputs + 1, sizeof *c->graph_out);
        if (!c->gkey || !c->graph_out) c->graph_static = -1;
    }
    if (c->graph_static < 0 || !c->plan || c->plan->n_dynamic || !graph_stage_io(c)) return false;
    uintptr_t *k = c->gkey; /* this run's key */
    int j = 0;
    k[j++] = (uintptr_t)c->plan;
    k[j++] = (uintptr_t)c->arena[0];
    k[j++] = (uintptr_t)c->arena[1];
    k[j++] = (uintptr_t)c->stream;
    for (int i = 0; i < g->n_inputs; i++) {
        if (c->in[i].run_mem != MEM_DEV && c->in[i].run) return false;
        k[j++] = (uintptr_t)c->in[i].run;
        k[j++] = (uintptr_t)c->in[i].rank;
        k[j++] = (uintptr_t)c->in[i].dtype;
        for (int d = 0; d < KILN_MAX_RANK; d++)
            k[j++] = d < c->in[i].rank ? (uintptr_t)c->in[i].dims[d] : 0;
    }
    for (int i = 0; i < g->n_outputs; i++) { /* (where a replay may write: the device buffers written in place) */
        const kiln_out_binding *ob = &c->out[i];
        bool in_place = ob->data && ob->mem == MEM_DEV && !ob->churn;
        k[j++] = in_place ? (uintptr_t)ob->data : 0;
        k[j++] = in_place ? (uintptr_t)ob->cap : 0;
        k[j++] = (uintptr_t)ob->mem;
    }
    return true;
}

static bool gkey_eq(const kiln_context *c, int a, int b) {
    size_t n = (size_t)c->graph_klen;
    return !memcmp(c->gkey + (size_t)a * n, c->gkey + (size_t)b * n, n * sizeof *c->gkey);
}

static void gkey_copy(kiln_context *c, int to, int from) {
    size_t n = (size_t)c->graph_klen;
    memcpy(c->gkey + (size_t)to * n, c->gkey + (size_t)from * n, n * sizeof *c->gkey);
}

enum { GK_RUN = 0, GK_LAST = 1, GK_GRAPH = 2, GK_REFUSED = 3 };

/* Replays the captured graph when this run's key is its key. */
static kiln_status graph_replay(kiln_context *c, bool *replayed) {
    *replayed = false;
    c->graph_run = graph_usable(c);
    if (!c->graph_run) {
        if (c->be[MEM_DEV]) graph_drop(c);
        return KILN_OK;
    }
    if (!c->graph) return KILN_OK;
    if (!gkey_eq(c, GK_RUN, GK_GRAPH)) { /* one graph, for the key of the runs that made it */
        graph_drop(c);
        return KILN_OK;
    }
    bool launched = false;
    KILN_TRY(c->be[MEM_DEV]->graph_launch(c->state[MEM_DEV], c->graph, &launched));
    if (!launched) { /* it refers to memory that has moved: capture again */
        graph_drop(c);
        return KILN_OK;
    }
    const kiln_graph *g = c->e->graph;
    for (int k = 0; k < g->n_outputs; k++) c->slots[g->outputs[k]] = c->graph_out[k];
    *replayed = true;
    return KILN_OK;
}

/* Starts a capture on the second run in a row with the same key. */
static bool graph_capture_begin(kiln_context *c) {
    if (!c->graph_run) return false;
    bool again = gkey_eq(c, GK_RUN, GK_LAST);
    gkey_copy(c, GK_LAST, GK_RUN);
    if (!again || (c->graph_refused && gkey_eq(c, GK_RUN, GK_REFUSED))) return false;
    graph_drop(c);
    if (c->be[MEM_DEV]->capture_begin(c->state[MEM_DEV]) != KILN_OK) {
        kiln__clear_error();
        return false;
    }
    c->graph_overflow = c->counters.overflow;
    return true;
}

/* Ends the capture begun for this run: on success keeps the graph and
 * launches it (nothing ran yet); otherwise runs the nodes one by one. */
static kiln_status graph_capture_end(kiln_context *c, kiln_status loop) {
    void *gr = NULL;
    kiln_status s = c->be[MEM_DEV]->capture_end(c->state[MEM_DEV], &gr);
    bool launched = false;
    if (loop == KILN_OK && s == KILN_OK && gr && c->counters.overflow == c->graph_overflow) {
        c->graph = gr;
        gkey_copy(c, GK_GRAPH, GK_RUN);
        const kiln_graph *g = c->e->graph;
        for (int k = 0; k < g->n_outputs; k++) c->graph_out[k] = c->slots[g->outputs[k]];
        s = c->be[MEM_DEV]->graph_launch(c->state[MEM_DEV], c->graph, &launched);
        if (s != KILN_OK) return s;
        if (launched && c->graph_verbose)
            fprintf(stderr, "kiln: CUDA Graph captured: later runs at these shapes replay it\n");
    } else if (gr) {
        c->be[MEM_DEV]->graph_free(c->state[MEM_DEV], gr);
    }
    if (launched) return KILN_OK;
    graph_drop(c);
    if (c->graph_verbose) /* KILN_CUDA_VERBOSE=1: why a plan runs without its graph */
        fprintf(stderr, "kiln: CUDA Graph capture failed, layers run one by one at these shapes: %s\n",
                loop != KILN_OK || s != KILN_OK                   ? kiln_last_error()
                : c->counters.overflow != c->graph_overflow       ? "the run overflowed the arena"
                                                                  : "the device's scratch memory moved");
    kiln__clear_error();
    gkey_copy(c, GK_REFUSED, GK_RUN);
    c->graph_refused = true;
    slots_reset(c);
    return run_nodes(c);
}

/* Bool inputs in host memory hold bytes 0 and 1 only: kernels load them as
 * C bool, for which any other byte is undefined behaviour (a byte 2 may
 * read as true in one kernel and false in another). Checked at every run,
 * as a caller may refill a bound buffer between runs; a scan at memory
 * speed (bool inputs are masks and conditions). */
/* Whether [p, p + n) of memory m lies in memory the context owns: its
 * arena, overflow buffers and scratch, and (host) the copies it hands out. */
static bool ctx_owns(const kiln_context *c, int m, const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p, b = a + n;
#define KILN_IN_(q, cap) ((q) && a < (uintptr_t)(q) + (cap) && (uintptr_t)(q) < b)
    if (KILN_IN_(c->arena[m], c->arena_cap[m]) || KILN_IN_(c->pool[m].ws, c->pool[m].ws_cap)) return true;
    for (int i = 0; i < c->pool[m].n; i++)
        if (KILN_IN_(c->pool[m].bufs[i].data, c->pool[m].bufs[i].cap)) return true;
    for (int i = 0; m == MEM_HOST && i < c->n_view; i++)
        if (KILN_IN_(c->view[i].p, c->view[i].cap)) return true;
#undef KILN_IN_
    return false;
}

/* The bytes each input's run reads. Host bytes not aligned to their
 * element are copied (below). An input bound to memory the context
 * itself handed out (an output of its last run, from kiln_context_get_output,
 * fed back: a recurrent or autoregressive loop) would be written over by the
 * layers of the run that reads it (measured: a residual MLP fed its own
 * output was 1.1 off after one step, 3.2 after four, with no error), or
 * freed when an arena grows; so its bytes are copied first, into memory of
 * the context's that no layer writes. Device memory: refused (copy it). */
static kiln_status inputs_for_run(kiln_context *c) {
    const kiln_graph *g = c->e->graph;
    for (int k = 0; k < g->n_inputs; k++) {
        kiln_binding *bd = &c->in[k];
        bd->run = bd->data;
        bd->run_mem = bd->mem;
        size_t es = kiln_dtype_size(bd->dtype), nb = (size_t)kiln__numel(bd->rank, bd->dims) * es;
        if (!bd->data || !nb || !c->be[bd->mem]) continue;
        /* host bytes not aligned to their element (numpy.frombuffer(b, offset=1)): the
         * kernels' element loads are undefined there (UBSan: misaligned load), so they
         * read an aligned copy */
        bool misaligned = bd->mem == MEM_HOST && es && (uintptr_t)bd->data % es;
        if (!misaligned && !ctx_owns(c, bd->mem, bd->data, nb)) continue;
        if (bd->mem == MEM_DEV)
            return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                             "input '%s' is bound to device memory of this context's last run (an output "
                             "read with kiln_context_get_output_device), which this run writes over: copy it "
                             "to memory of your own first",
                             g->values[g->inputs[k]].name);
        kiln_view_buf *cp = &c->in_copy[k];
        if (cp->cap < nb) {
            void *q = kiln__malloc(nb);
            if (!q) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory: %zu bytes copying input '%s'", nb,
                                     g->values[g->inputs[k]].name);
            kiln__free(cp->p);
            cp->p = q;
            cp->cap = nb;
        }
        memcpy(cp->p, bd->data, nb);
        bd->run = cp->p;
    }
    return KILN_OK;
}

static kiln_status check_bool_inputs(const kiln_context *c) {
    const kiln_graph *g = c->e->graph;
    for (int k = 0; k < g->n_inputs; k++) {
        const kiln_binding *bd = &c->in[k];
        if (bd->dtype != KILN_DTYPE_BOOL || bd->mem != MEM_HOST || !bd->run) continue;
        const uint8_t *p = bd->run;
        int64_t n = kiln__numel(bd->rank, bd->dims);
        uint8_t high = 0;
        for (int64_t i = 0; i < n; i++) high |= p[i];
        if (high <= 1) continue;
        int64_t at = 0;
        while (p[at] <= 1) at++;
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "input '%s': bool data holds byte %d (0x%02x) at element %lld (byte offset %lld); a "
                         "bool input holds 0 (false) or 1 (true) only: convert other data with x != 0",
                         g->values[g->inputs[k]].name, p[at], p[at], (long long)at, (long long)at);
    }
    return KILN_OK;
}

/* Inputs that share a symbolic dim (ONNX dim_param) must agree on it, and
 * an input whose dims share one (a square [n, n]) with itself: a mismatch
 * is named here, with both inputs, rather than deep inside the first layer
 * that combines them. */
static kiln_status check_shared_dims(const kiln_context *c) {
    const kiln_graph *g = c->e->graph;
    for (int k = 0; k < g->n_inputs; k++) {
        const kiln_value *v = &g->values[g->inputs[k]];
        for (int d = 0; d < c->in[k].rank && d < v->info.rank; d++) {
            int64_t sym = v->info.dims[d];
            if (!KILN_DIM_IS_SYM(sym)) continue;
            /* the symbol's first place: input j, dim e (before (k, d)) */
            int j = 0, e = 0;
            bool found = false;
            for (j = 0; j <= k && !found; j++) {
                const kiln_value *w = &g->values[g->inputs[j]];
                int end = j == k ? d : (c->in[j].rank < w->info.rank ? c->in[j].rank : w->info.rank);
                for (e = 0; e < end && !found; e++) found = w->info.dims[e] == sym;
            }
            if (!found) continue;
            j--, e--; /* the loops stepped past the match */
            if (c->in[j].dims[e] == c->in[k].dims[d]) continue;
            const kiln_value *w = &g->values[g->inputs[j]];
            int id = KILN_DIM_SYM_ID(sym);
            if (j == k)
                return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                                 "input '%s' has the dimension '%s' twice but its dims %d and %d "
                                 "are %lld and %lld",
                                 v->name, id < g->n_symbols ? g->symbols[id] : "?", e, d,
                                 (long long)c->in[k].dims[e], (long long)c->in[k].dims[d]);
            return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                             "inputs '%s' and '%s' share the dimension '%s' but disagree: '%s' has "
                             "%lld in dim %d, '%s' has %lld in dim %d",
                             w->name, v->name, id < g->n_symbols ? g->symbols[id] : "?", w->name,
                             (long long)c->in[j].dims[e], e, v->name, (long long)c->in[k].dims[d], d);
        }
    }
    return KILN_OK;
}

static kiln_status ctx_run_once(kiln_context *c);

static kiln_status ctx_run(kiln_context *c) {
    if (!c) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_run: context is NULL");
    kiln_status st = ctx_run_once(c);
    if (st != KILN_OK && c->be[MEM_DEV] && c->state[MEM_DEV]) {
        /* A failed run leaves no device work in flight, nor a device-side
         * report of its own (CUDA: a Gather index out of range, read at the
         * stream's synchronization) for the next run's end to find; the
         * run's message stays. */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", kiln_last_error());
        (void)c->be[MEM_DEV]->sync(c->state[MEM_DEV]);
        st = KILN_FAIL(st, "%s", msg);
    }
    return st;
}

static kiln_status ctx_run_once(kiln_context *c) {
    const kiln_engine *e = c->e;
    const kiln_graph *g = e->graph;
    for (int k = 0; k < g->n_inputs; k++)
        if (!c->in[k].bound)
            return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "input '%s' is not set",
                             g->values[g->inputs[k]].name);
    KILN_TRY(check_shared_dims(c));
    KILN_TRY(kiln__engine_check_file(e));
    KILN_TRY(inputs_for_run(c));
    KILN_TRY(check_bool_inputs(c));
    if (kiln__pool_forked(c->threads_pool)) { /* a fork() child: the workers stayed with the parent */
        kiln__pool_free(c->threads_pool);
        c->threads_pool = NULL;
    }
    if (!c->threads_pool && (c->threads == 0 || c->threads > 1))
        KILN_TRY(kiln__pool_create(c->threads, &c->threads_pool));
    c->ran = false;
    c->plan = NULL;
    if (!c->no_plan && !c->no_reuse) {
        KILN_TRY(select_plan(c));
        KILN_TRY(arena_reserve(c));
    }
    slots_reset(c);
    for (int k = 0; k < g->n_outputs; k++) c->out[k].written = 0;
    if (c->acheck) KILN_TRY(kiln__acheck_begin(c->acheck, c->arena, c->arena_cap));
    kiln_status st = KILN_OK;
    if (c->be[MEM_DEV] && c->be[MEM_DEV]->run_begin) KILN_TRY(c->be[MEM_DEV]->run_begin(c->state[MEM_DEV]));
    bool replayed = false;
    KILN_TRY(graph_replay(c, &replayed));
    if (!replayed) {
        bool capturing = graph_capture_begin(c);
        kiln__pool_hold(c->threads_pool, true);
        st = run_nodes(c);
        kiln__pool_hold(c->threads_pool, false);
        if (capturing) st = graph_capture_end(c, st);
        if (st != KILN_OK) return st;
    }
    for (int k = 0; c->acheck && k < g->n_outputs; k++) {
        const kiln_slot *s = &c->slots[g->outputs[k]];
        for (int m = 0; m < 2; m++)
            KILN_TRY(kiln__acheck_read(c->acheck, -1, g->outputs[k], m, s->ptr[m], slot_bytes(s)));
    }
    for (int k = 0; k < g->n_outputs; k++) KILN_TRY(deliver_output(c, k));
    if (c->be[MEM_DEV]) KILN_TRY(c->be[MEM_DEV]->sync(c->state[MEM_DEV]));
    c->ran = true;
    return KILN_OK;
}

kiln_status kiln_context_run(kiln_context *c) {
    WITH_CLAIM(c, "kiln_context_run", ctx_run(c));
}

/* Sets every slot to the start of a run: constants and bound inputs. */
static void slots_reset(kiln_context *c) {
    const kiln_engine *e = c->e;
    const kiln_graph *g = e->graph;
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < c->pool[m].n; i++) c->pool[m].bufs[i].in_use = false;
    for (int i = 0; i <= g->n_values; i++) {
        kiln_slot *s = &c->slots[i];
        s->buf[0] = s->buf[1] = -1;
        s->ptr[0] = s->ptr[1] = NULL;
        if (i == g->n_values) continue;
        const kiln_value *v = &g->values[i];
        s->uses_left = v->n_uses;
        if (v->flags & KILN_VALUE_CONST) {
            s->t.dtype = v->info.dtype;
            s->t.rank = v->info.rank;
            memcpy(s->t.dims, v->info.dims, sizeof s->t.dims);
            s->ptr[MEM_HOST] = v->data;
            if (e->dev_const) s->ptr[MEM_DEV] = e->dev_const[i];
        }
    }
    for (int k = 0; k < g->n_inputs; k++) {
        kiln_slot *s = &c->slots[g->inputs[k]];
        s->t.dtype = c->in[k].dtype;
        s->t.rank = c->in[k].rank;
        memcpy(s->t.dims, c->in[k].dims, sizeof s->t.dims);
        s->ptr[c->in[k].run_mem] = (void *)c->in[k].run; /* read-only: kernels never write inputs */
    }
}

/* run_node, timed into the profile: a device layer's time ends when the
 * stream has finished it. */
static kiln_status run_node_profiled(kiln_context *c, int ni) {
    double t0 = kiln__now_us();
    kiln_status st = run_node(c, ni);
    if (st == KILN_OK && node_mem(c, &c->e->graph->nodes[ni]) == MEM_DEV)
        st = c->be[MEM_DEV]->sync(c->state[MEM_DEV]);
    c->prof_us[ni] += kiln__now_us() - t0;
    c->prof_runs[ni]++;
    return st;
}

static kiln_status ctx_set_profiling(kiln_context *c, int on) {
    if (!c) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_profiling: context is NULL");
    kiln__free(c->prof_us);
    kiln__free(c->prof_runs);
    c->prof_us = NULL;
    c->prof_runs = NULL;
    if (!on) return KILN_OK;
    size_t n = (size_t)c->e->graph->n_nodes + 1;
    c->prof_us = kiln__calloc(n, sizeof *c->prof_us);
    c->prof_runs = kiln__calloc(n, sizeof *c->prof_runs);
    if (!c->prof_us || !c->prof_runs) {
        kiln__free(c->prof_us);
        kiln__free(c->prof_runs);
        c->prof_us = NULL;
        c->prof_runs = NULL;
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (layer profile)");
    }
    if (c->be[MEM_DEV]) graph_drop(c);
    return KILN_OK;
}

kiln_status kiln_context_set_profiling(kiln_context *c, int on) {
    WITH_CLAIM(c, "kiln_context_set_profiling", ctx_set_profiling(c, on));
}

static kiln_status ctx_layer_time(const kiln_context *c, int layer, double *total_us,
                                  int64_t *runs) {
    if (total_us) *total_us = 0;
    if (runs) *runs = 0;
    if (!c) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_layer_time: context is NULL");
    if (!c->prof_us)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "kiln_context_layer_time: profiling is off (kiln_context_set_profiling)");
    if (layer < 0 || layer >= c->e->graph->n_nodes)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_layer_time: layer %d of %d", layer,
                         c->e->graph->n_nodes);
    if (total_us) *total_us = c->prof_us[layer];
    if (runs) *runs = c->prof_runs[layer];
    return KILN_OK;
}

kiln_status kiln_context_layer_time(const kiln_context *c, int layer, double *total_us,
                                    int64_t *runs) {
    if (total_us) *total_us = 0; /* (also when the context is in use) */
    if (runs) *runs = 0;
    WITH_CLAIM((kiln_context *)c, "kiln_context_layer_time", ctx_layer_time(c, layer, total_us, runs));
}

/* Reports one event of layer ni to the layer callback. */
static kiln_status layer_event(kiln_context *c, int ni, kiln_layer_event ev) {
    c->cb_layer = ni;
    c->cb_event = ev;
    c->used_view = 0;
    kiln__pool_hold(c->threads_pool, false); /* idle workers sleep while the callback works */
    int stop = c->layer_cb(c, ni, ev, c->layer_user);
    kiln__pool_hold(c->threads_pool, true);
    c->cb_layer = -1;
    c->used_view = 0;
    if (!stop) return KILN_OK;
    const kiln_node *n = &c->e->graph->nodes[ni];
    return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "the layer callback stopped the run %s layer %d '%s' (%s)",
                     ev == KILN_LAYER_BEFORE ? "before" : "after", ni, n->name, n->op->name);
}

/* Runs every node in order, releasing values after their last reader
 * (except with memory reuse off). */
static kiln_status run_nodes(kiln_context *c) {
    const kiln_graph *g = c->e->graph;
    kiln_status st = KILN_OK;
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        if (c->layer_cb && (st = layer_event(c, ni, KILN_LAYER_BEFORE)) != KILN_OK) return st;
        if ((st = c->prof_us ? run_node_profiled(c, ni) : run_node(c, ni)) != KILN_OK) {
            if (!strstr(kiln_last_error(), n->name))
                st = kiln__fail_prefix(st, "running node '%s' (%s)", n->name, n->op->name);
            return st;
        }
        if (c->layer_cb && (st = layer_event(c, ni, KILN_LAYER_AFTER)) != KILN_OK) return st;
        if (c->no_reuse) continue; /* every value keeps its buffer to the end of the run */
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            /* a node may read the same value twice: each read counts */
            if (v >= 0 && --c->slots[v].uses_left == 0 && c->out_slot[v] < 0)
                slot_release(c, &c->slots[v]);
        }
        for (int k = 0; k < n->n_out; k++) {
            int v = n->out[k];
            if (v >= 0 && c->slots[v].uses_left == 0 && c->out_slot[v] < 0)
                slot_release(c, &c->slots[v]);
        }
    }
    return KILN_OK;
}

/* ---- debugging: layer callback, views, memory reuse ---------------------- */

static kiln_status ctx_set_layer_callback(kiln_context *c, kiln_layer_callback cb, void *user) {
    if (!c) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_layer_callback: context is NULL");
    c->layer_cb = cb;
    c->layer_user = cb ? user : NULL;
    if (cb && c->be[MEM_DEV]) graph_drop(c);
    return KILN_OK;
}

kiln_status kiln_context_set_layer_callback(kiln_context *c, kiln_layer_callback cb, void *user) {
    WITH_CLAIM(c, "kiln_context_set_layer_callback", ctx_set_layer_callback(c, cb, user));
}

static kiln_status ctx_set_memory_reuse(kiln_context *c, int on) {
    if (!c) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_memory_reuse: context is NULL");
    c->no_reuse = !on;
    if (!on && c->be[MEM_DEV]) graph_drop(c);
    return KILN_OK;
}

kiln_status kiln_context_set_memory_reuse(kiln_context *c, int on) {
    WITH_CLAIM(c, "kiln_context_set_memory_reuse", ctx_set_memory_reuse(c, on));
}

/* A host buffer of at least `bytes` for a view of the current event (kept
 * by the context, reused by later events). */
static kiln_status view_buffer(kiln_context *c, size_t bytes, void **out) {
    if (c->used_view == c->n_view) {
        KILN_TRY(kiln__grow((void **)&c->view, &c->cap_view, c->n_view + 1, sizeof *c->view));
        c->view[c->n_view].p = NULL;
        c->view[c->n_view].cap = 0;
        c->n_view++;
    }
    kiln_view_buf *vb = &c->view[c->used_view];
    if (vb->cap < bytes) {
        void *p = kiln__malloc(bytes);
        if (!p) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory: %zu bytes for a tensor view", bytes);
        kiln__free(vb->p);
        vb->p = p;
        vb->cap = bytes;
    }
    c->used_view++;
    *out = vb->p;
    return KILN_OK;
}

kiln_status kiln_context_tensor(kiln_context *c, const char *name, kiln_tensor_view *out) {
    if (!c || !name || !out) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_tensor: NULL argument");
    memset(out, 0, sizeof *out);
    if (c->cb_layer < 0)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "kiln_context_tensor('%s'): may only be called from a layer callback", name);
    const kiln_graph *g = c->e->graph;
    int v = kiln__graph_find_value(g, name);
    if (v < 0) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_tensor: the engine has no tensor '%s'", name);
    const kiln_slot *s = &c->slots[v];
    kiln_tensor t = s->t;
    int layout = KILN_VLAYOUT_PLAIN;
    KILN_TRY(value_layout(c, v, &layout));
    size_t stored = kiln__vlayout_stored_bytes(layout, &t);
    const void *raw = s->ptr[MEM_HOST];
    if (!raw && !s->ptr[MEM_DEV])
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "kiln_context_tensor: tensor '%s' is not held %s layer %d '%s' (not made yet, or "
                         "no layer reads it any more)",
                         name, c->cb_event == KILN_LAYER_BEFORE ? "before" : "after", c->cb_layer,
                         g->nodes[c->cb_layer].name);
    if (!raw && stored) {
        void *h;
        KILN_TRY(view_buffer(c, stored, &h));
        KILN_TRY(c->be[MEM_DEV]->to_host(c->state[MEM_DEV], h, s->ptr[MEM_DEV], stored));
        raw = h;
    }
    if (layout != KILN_VLAYOUT_PLAIN && stored) {
        void *d;
        KILN_TRY(view_buffer(c, slot_bytes(s), &d));
        KILN_TRY(kiln__vlayout_to_logical(layout, &t, raw, d));
        raw = d;
    }
    out->name = g->values[v].name;
    out->dtype = t.dtype;
    out->rank = t.rank;
    memcpy(out->dims, t.dims, sizeof out->dims);
    out->data = stored ? raw : NULL;
    return KILN_OK;
}

size_t kiln__context_memory(const kiln_context *c) {
    size_t total = 0;
    for (int m = 0; m < 2; m++) {
        total += c->pool[m].ws_cap + c->arena_cap[m];
        for (int i = 0; i < c->pool[m].n; i++) total += c->pool[m].bufs[i].cap;
    }
    for (int i = 0; c->in && i < c->e->graph->n_inputs; i++) total += c->in[i].stage_cap;
    return total;
}

void kiln__context_counters(const kiln_context *c, kiln_context_counters *out) { *out = c->counters; }

const kiln_mem_plan *kiln__context_plan(const kiln_context *c) { return c->plan; }

void kiln__context_set_planning(kiln_context *c, bool on) { c->no_plan = !on; }

kiln_status kiln__context_plan_force(kiln_context *c, int m, int v, int64_t off) {
    kiln_mem_plan *p = c->plans[0];
    if (!p || c->plan != p || v < 0 || v >= c->e->graph->n_values || p->off[m][v] < 0 || off < 0 ||
        (size_t)off + p->nbytes[v] > p->arena[m])
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln__context_plan_force: no such planned value");
    p->off[m][v] = off;
    return KILN_OK;
}

static kiln_status ctx_set_debug_arena(kiln_context *c, int on) {
    if (!c) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_debug_arena: context is NULL");
    if (!on) {
        kiln__acheck_free(c->acheck);
        c->acheck = NULL;
        return KILN_OK;
    }
    if (c->acheck) return KILN_OK;
    KILN_TRY(kiln__acheck_create(c->e, &c->acheck));
    if (c->be[MEM_DEV]) graph_drop(c);
    return KILN_OK;
}

kiln_status kiln_context_set_debug_arena(kiln_context *c, int on) {
    WITH_CLAIM(c, "kiln_context_set_debug_arena", ctx_set_debug_arena(c, on));
}

static kiln_status ctx_set_memory_limit(kiln_context *c, size_t bytes) {
    if (!c) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_memory_limit: context is NULL");
    c->mem_limit = bytes;
    return KILN_OK;
}

kiln_status kiln_context_set_memory_limit(kiln_context *c, size_t bytes) {
    WITH_CLAIM(c, "kiln_context_set_memory_limit", ctx_set_memory_limit(c, bytes));
}

static kiln_status ctx_get_output(kiln_context *c, const char *name, kiln_dtype *dtype, int *rank,
                                  int64_t *dims, const void **data) {
    if (!c || !name)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_get_output: NULL context or name");
    const kiln_graph *g = c->e->graph;
    int k = find_io(g, g->outputs, g->n_outputs, name);
    if (k < 0) return no_such_io(g, false, name);
    if (!c->ran)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "output '%s' is not available: the context has not run successfully", name);
    int v = g->outputs[k];
    kiln_slot *s = &c->slots[v];
    if (data) {
        /* host bytes; a device output is copied to the host once */
        KILN_TRY(slot_make_available(c, v, MEM_HOST, -1));
        *data = s->ptr[MEM_HOST];
    }
    if (dtype) *dtype = s->t.dtype;
    if (rank) *rank = s->t.rank;
    if (dims)
        for (int d = 0; d < s->t.rank; d++) dims[d] = s->t.dims[d];
    return KILN_OK;
}

kiln_status kiln_context_get_output(kiln_context *c, const char *name, kiln_dtype *dtype, int *rank,
                                    int64_t *dims, const void **data) {
    WITH_CLAIM(c, "kiln_context_get_output", ctx_get_output(c, name, dtype, rank, dims, data));
}

static kiln_status ctx_get_output_device(kiln_context *c, const char *name, const void **data) {
    if (!c || !name || !data)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_get_output_device: NULL argument");
    const kiln_graph *g = c->e->graph;
    int k = find_io(g, g->outputs, g->n_outputs, name);
    if (k < 0) return no_such_io(g, false, name);
    if (!c->be[MEM_DEV])
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "output '%s': a CPU engine has no device outputs",
                         name);
    if (!c->ran)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "output '%s' is not available: the context has not run successfully", name);
    int v = g->outputs[k];
    KILN_TRY(slot_make_available(c, v, MEM_DEV, -1));
    KILN_TRY(c->be[MEM_DEV]->sync(c->state[MEM_DEV]));
    *data = c->slots[v].ptr[MEM_DEV];
    return KILN_OK;
}

kiln_status kiln_context_get_output_device(kiln_context *c, const char *name, const void **data) {
    WITH_CLAIM(c, "kiln_context_get_output_device", ctx_get_output_device(c, name, data));
}

/* ---- engine-level device state ---------------------------------------- */

kiln_engine *kiln__engine_alloc(void) {
    kiln_engine *e = kiln__calloc(1, sizeof *e);
    if (!e) return NULL;
    pthread_mutex_init(&e->dev_lock, NULL);
    return e;
}

static kiln_status engine_upload(kiln_engine *e);

kiln_status kiln__engine_prepare(kiln_engine *e) {
    if (e->opts.device == KILN_DEVICE_CPU) return KILN_OK;
    pthread_mutex_lock(&e->dev_lock);
    kiln_status s = KILN_OK;
    if (!e->dev_ready) {
        s = engine_upload(e);
        if (s == KILN_OK) e->dev_ready = true;
        else kiln__engine_release(e);
    }
    pthread_mutex_unlock(&e->dev_lock);
    return s;
}

static kiln_status engine_upload(kiln_engine *e) {
    const kiln_backend_i *dev = kiln__backend_for(e->opts.device);
    if (!dev)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "the engine was built for device %d, which this kiln was built without",
                         e->opts.device);
    const kiln_graph *g = e->graph;
    KILN_TRY(dev->state_create(e->opts.device_index, &e->dev_state));
    char here[128];
    dev->describe_target(e->dev_state, here, sizeof here);
    if (strcmp(here, e->target) != 0)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "engine was built for '%s', but device %d is '%s'; rebuild the engine on "
                         "this device", e->target, e->opts.device_index, here);
    e->dev_const = kiln__calloc((size_t)g->n_values + 1, sizeof *e->dev_const);
    if (!e->dev_const) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        if (n->device == KILN_DEVICE_CPU) continue;
        for (int i = 0; i < n->n_in; i++) {
            int v = n->in[i];
            if (v < 0 || e->dev_const[v] || !(g->values[v].flags & KILN_VALUE_CONST)) continue;
            const kiln_value *val = &g->values[v];
            e->dev_const[v] = dev->alloc(e->dev_state, val->nbytes + 64);
            if (!e->dev_const[v])
                return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY,
                                 "out of device memory uploading weight '%s' (%zu bytes)", val->name,
                                 val->nbytes);
            if (val->nbytes) KILN_TRY(dev->to_device(e->dev_state, e->dev_const[v], val->data, val->nbytes));
        }
    }
    return dev->sync(e->dev_state);
}

void kiln__engine_release(kiln_engine *e) {
    if (!e->dev_state && !e->dev_const) return;
    const kiln_backend_i *dev = kiln__backend_for(e->opts.device);
    if (dev && e->dev_const && e->graph)
        for (int i = 0; i < e->graph->n_values; i++)
            if (e->dev_const[i]) dev->free(e->dev_state, e->dev_const[i]);
    if (dev && e->dev_state) dev->state_free(e->dev_state);
    kiln__free(e->dev_const);
    e->dev_const = NULL;
    e->dev_state = NULL;
}
