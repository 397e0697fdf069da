/* tune.c -- tactic selection at build time.
 *
 * For every node whose op has tactics (KILN_OP_FLAG_TACTICS), the node's
 * backend lists the kernels that can run it at the profiles' opt shapes;
 * each is run a few times on inputs of those shapes (constants real, the
 * rest random, fp16/bf16 too) through the backend's own alloc/copy/run/sync,
 * and the one with the lowest median time is written into the node's
 * kiln_tactic. A device backend's candidates are timed as replays of a
 * CUDA Graph of 10 runs each where the backend can capture (else as 10
 * queued runs), and a device layer with a single tactic is timed too (its
 * time is what inspect and the timing cache show).
 *
 * Timing cache: a text file (the builder's timing_cache path)
 *
 *     kiln-timing-cache 1
 *     <key> <tactic id> <microseconds>
 *
 * keyed by the target, the thread count, the op, its attributes (without
 * the tactic, in hex) and the input dtypes and shapes. It is read before
 * timing (a known key is not timed again, nor is a layer identical to one
 * timed before in the same build) and rewritten after, through a
 * temporary file and a rename. */
#include "backends/backend.h"
#include "ops/conv_direct.h"
#include "ops/fused_conv.h"
#include "runtime/engine.h"

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <unistd.h>

#define TUNE_MAX_TACTICS 32
#define TUNE_REPS 5
#define DEVICE_REPS 10 /* runs per timing of a device tactic (turn_run) */

typedef struct cache_ent {
    char *key;
    int32_t id;
    float us;
} cache_ent;

typedef struct tcache {
    cache_ent *e;
    int n, cap;
    bool dirty;
} tcache;

static void cache_free(tcache *c) {
    for (int i = 0; i < c->n; i++) kiln__free(c->e[i].key);
    kiln__free(c->e);
}

static cache_ent *cache_find(tcache *c, const char *key) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->e[i].key, key)) return &c->e[i];
    return NULL;
}

static kiln_status cache_put(tcache *c, const char *key, int32_t id, float us) {
    cache_ent *e = cache_find(c, key);
    if (!e) {
        KILN_TRY(kiln__grow((void **)&c->e, &c->cap, c->n + 1, sizeof *c->e));
        char *k = kiln__strdup(key);
        if (!k) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (timing cache)");
        e = &c->e[c->n++];
        memset(e, 0, sizeof *e);
        e->key = k;
    }
    e->id = id;
    e->us = us;
    c->dirty = true;
    return KILN_OK;
}

/* Reads the cache file; a missing file is an empty cache, a malformed one
 * an error naming the file and line. */
static kiln_status cache_read(tcache *c, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return KILN_OK;
        return KILN_FAIL(KILN_ERR_IO, "cannot read timing cache '%s': %s", path, strerror(errno));
    }
    char line[8192];
    int ln = 0;
    kiln_status st = KILN_OK;
    while (st == KILN_OK && fgets(line, sizeof line, f)) {
        ln++;
        size_t len = strlen(line);
        if (len && line[len - 1] == '\n') line[--len] = 0;
        if (ln == 1) {
            if (strcmp(line, "kiln-timing-cache 1"))
                st = KILN_FAIL(KILN_ERR_IO, "timing cache '%s' is not a kiln timing cache (version 1)",
                               path);
            continue;
        }
        if (!len) continue;
        char key[8192];
        int id;
        float us;
        if (sscanf(line, "%8191s %d %f", key, &id, &us) != 3) {
            st = KILN_FAIL(KILN_ERR_IO, "timing cache '%s', line %d is malformed", path, ln);
            break;
        }
        st = cache_put(c, key, id, us);
    }
    fclose(f);
    c->dirty = false;
    return st;
}

static kiln_status cache_write(const tcache *c, const char *path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return KILN_FAIL(KILN_ERR_IO, "cannot write timing cache '%s': %s", tmp, strerror(errno));
    fprintf(f, "kiln-timing-cache 1\n");
    for (int i = 0; i < c->n; i++) fprintf(f, "%s %d %.3f\n", c->e[i].key, (int)c->e[i].id, c->e[i].us);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) {
        remove(tmp);
        return KILN_FAIL(KILN_ERR_IO, "cannot write timing cache '%s'", tmp);
    }
    if (rename(tmp, path) != 0) {
        int err = errno;
        remove(tmp);
        return KILN_FAIL(KILN_ERR_IO, "cannot rename timing cache to '%s': %s", path, strerror(err));
    }
    return KILN_OK;
}

/* The cache key, written over what sb held: no spaces (the file format
 * splits on them). */
static void make_key(const kiln_engine *e, const kiln_node *n, const kiln_tinfo *const *in,
                     kiln_sbuf *sb) {
    sb->len = 0;
    if (sb->data) sb->data[0] = 0;
    for (const char *p = e->target; *p; p++) kiln__sbuf_printf(sb, "%c", *p == ' ' ? '_' : *p);
    kiln__sbuf_printf(sb, "|t%d|%s.%s|", (int)e->opts.threads, n->op->domain, n->op->name);
    const unsigned char *a = n->attrs;
    for (size_t i = sizeof(kiln_tactic); i < n->op->attr_size; i++) kiln__sbuf_printf(sb, "%02x", a[i]);
    for (int i = 0; i < n->n_in; i++) {
        if (!in[i]) {
            kiln__sbuf_printf(sb, "|-");
            continue;
        }
        kiln__sbuf_printf(sb, "|%s%s", kiln_dtype_name(in[i]->dtype), in[i]->data ? "c" : "");
        for (int d = 0; d < in[i]->rank; d++) kiln__sbuf_printf(sb, "%s%lld", d ? "x" : ":", (long long)in[i]->dims[d]);
    }
}

/* ---- shapes at the opt profile --------------------------------------------- */

/* Infers every value's shape with the graph inputs at their opt shapes
 * (build-time inference: values of non-constants unknown). Values whose
 * shape cannot be inferred get rank -1. */
static kiln_status opt_shapes(const kiln_engine *e, kiln_tinfo *vi) {
    const kiln_graph *g = e->graph;
    for (int i = 0; i < g->n_values; i++) {
        const kiln_value *v = &g->values[i];
        vi[i] = v->info;
        if (v->flags & KILN_VALUE_CONST) vi[i].data = v->data;
        else if (!(v->flags & KILN_VALUE_INPUT)) vi[i].rank = -1;
    }
    for (int k = 0; k < g->n_inputs; k++) {
        kiln_tinfo *t = &vi[g->inputs[k]];
        t->rank = e->profiles[k].rank;
        memcpy(t->dims, e->profiles[k].opt, sizeof t->dims);
        t->data = NULL;
    }
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        if (n->dead) continue;
        const kiln_tinfo *ip[64] = {0};
        kiln_tinfo outs[16];
        kiln_tinfo *op[16];
        if (n->n_in > 64 || n->n_out > 16) continue;
        bool known = true;
        for (int i = 0; i < n->n_in; i++) {
            ip[i] = n->in[i] >= 0 ? &vi[n->in[i]] : NULL;
            if (ip[i] && ip[i]->rank < 0) known = false;
        }
        for (int i = 0; i < n->n_out; i++) {
            memset(&outs[i], 0, sizeof outs[i]);
            outs[i].rank = -1;
            op[i] = &outs[i];
        }
        kiln_infer_args ia = {.op = n->op, .attrs = n->attrs, .node_name = n->name, .n_in = n->n_in,
                              .n_out = n->n_out, .in = ip, .out = op, .runtime = false};
        if (!known || n->op->infer(&ia) != KILN_OK) {
            kiln__clear_error();
            for (int i = 0; i < n->n_out; i++) outs[i].rank = -1;
        }
        for (int i = 0; i < n->n_out; i++) {
            int v = n->out[i];
            if (v < 0) continue;
            outs[i].data = NULL;
            if (outs[i].rank >= 0 && kiln__numel(outs[i].rank, outs[i].dims) < 0) outs[i].rank = -1;
            vi[v] = outs[i];
        }
    }
    return KILN_OK;
}

/* ---- timing one node --------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct tune_bufs {
    void *in[64], *out[16], *host_tmp;
    kiln_tensor tin[64], tout[16];
    const kiln_tensor *pin[64];
    kiln_tensor *pout[16];
} tune_bufs;

static void bufs_free(const kiln_backend_i *be, void *state, const kiln_node *n, tune_bufs *tb,
                      const kiln_tinfo *const *in) {
    for (int i = 0; i < n->n_in; i++)
        if (tb->in[i] && !(in[i] && in[i]->data && be->device == KILN_DEVICE_CPU)) be->free(state, tb->in[i]);
    for (int i = 0; i < n->n_out; i++)
        if (tb->out[i]) be->free(state, tb->out[i]);
}

/* Allocates the node's inputs (constants copied, others random in [-1, 1))
 * and outputs in the backend's memory. */
static kiln_status bufs_make(const kiln_backend_i *be, void *state, const kiln_node *n,
                             const kiln_tinfo *const *in, const kiln_tinfo *out, tune_bufs *tb) {
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)n->n_in;
    for (int i = 0; i < n->n_in; i++) {
        if (!in[i]) continue;
        size_t nb = kiln__value_nbytes(in[i]);
        kiln_tensor *t = &tb->tin[i];
        t->dtype = in[i]->dtype;
        t->rank = in[i]->rank;
        memcpy(t->dims, in[i]->dims, sizeof t->dims);
        tb->pin[i] = t;
        if (in[i]->data && be->device == KILN_DEVICE_CPU) {
            t->data = (void *)in[i]->data;
            tb->in[i] = t->data;
            continue;
        }
        tb->in[i] = be->alloc(state, nb ? nb : 1);
        unsigned char *h = kiln__aligned_alloc(nb ? nb : 1);
        if (!tb->in[i] || !h) {
            kiln__aligned_free(h);
            return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory timing node '%s'", n->name);
        }
        if (in[i]->data) {
            memcpy(h, in[i]->data, nb);
        } else if (in[i]->dtype == KILN_DTYPE_FLOAT32 || in[i]->dtype == KILN_DTYPE_FLOAT16 ||
                   in[i]->dtype == KILN_DTYPE_BFLOAT16) {
            /* random, not zeros: kernels can run faster on zeros than on real data */
            int64_t ne = (int64_t)(nb / kiln_dtype_size(in[i]->dtype));
            for (int64_t k = 0; k < ne; k++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                kiln__store_f64(in[i]->dtype, h, k, (double)(rng >> 11) / 4503599627370496.0 - 1.0);
            }
        } else {
            memset(h, 0, nb);
        }
        kiln_status st = be->to_device(state, tb->in[i], h, nb);
        kiln__aligned_free(h);
        KILN_TRY(st);
        t->data = tb->in[i];
    }
    for (int i = 0; i < n->n_out; i++) {
        size_t nb = kiln__value_nbytes(&out[i]);
        kiln_tensor *t = &tb->tout[i];
        t->dtype = out[i].dtype;
        t->rank = out[i].rank;
        memcpy(t->dims, out[i].dims, sizeof t->dims);
        tb->out[i] = be->alloc(state, nb ? nb : 1);
        if (!tb->out[i]) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory timing node '%s'", n->name);
        t->data = tb->out[i];
        tb->pout[i] = t;
    }
    return KILN_OK;
}

/* One tactic of a node set up for timing: its attrs (tactic id and the
 * layout the node had at setup), workspace and kernel state. */
typedef struct tac_run {
    unsigned char attrs[4096];
    void *ws;
    kiln_node_state ns;
    kiln_kernel_args ka;
    bool ok;                /* set up, and every run so far succeeded */
    /* device backends with graph capture: DEVICE_REPS runs recorded once and
     * replayed for each timing (made at the first timed turn, after every
     * tactic's set-up has grown the scratch memory it needs) */
    const kiln_backend_i *be;
    void *state;
    void *graph;
    bool no_graph;          /* capture failed: timed by plain runs */
} tac_run;

static void tac_free(tac_run *r) {
    if (r->graph) r->be->graph_free(r->state, r->graph);
    r->graph = NULL;
    if (r->ns.p && r->ns.free) r->ns.free(r->ns.p);
    r->ns.p = NULL;
    kiln__aligned_free(r->ws);
    r->ws = NULL;
}

/* Sets up tactic `id` of node n (attrs as they are now otherwise) and runs
 * it once, untimed (prepacking, library primitives); r->ok says whether it
 * ran. */
static void tac_setup(const kiln_backend_i *be, void *state, kiln_pool *pool, const kiln_node *n,
                      const kiln_tinfo *const *in, int32_t id, tune_bufs *tb, tac_run *r) {
    memset(r, 0, sizeof *r);
    if (n->op->attr_size > sizeof r->attrs) return;
    memcpy(r->attrs, n->attrs, n->op->attr_size);
    ((kiln_tactic *)(void *)r->attrs)->id = id;
    ((kiln_tactic *)(void *)r->attrs)->us = 0;
    kiln_tinfo outs[16];
    kiln_tinfo *op[16];
    for (int i = 0; i < n->n_out; i++) {
        memset(&outs[i], 0, sizeof outs[i]);
        op[i] = &outs[i];
    }
    kiln_infer_args ia = {.op = n->op, .attrs = r->attrs, .node_name = n->name, .n_in = n->n_in,
                          .n_out = n->n_out, .in = in, .out = op, .runtime = false};
    size_t ws = n->op->workspace && be->device == KILN_DEVICE_CPU ? n->op->workspace(&ia) : 0;
    r->ws = ws ? kiln__aligned_alloc(ws) : NULL;
    if (ws && !r->ws) return;
    r->ka = (kiln_kernel_args){.op = n->op, .attrs = r->attrs, .node_name = n->name, .n_in = n->n_in,
                               .n_out = n->n_out, .in = tb->pin, .out = tb->pout, .workspace = r->ws,
                               .workspace_size = ws, .pool = be->device == KILN_DEVICE_CPU ? pool : NULL,
                               .device_state = be->device == KILN_DEVICE_CPU ? NULL : state,
                               .node_state = &r->ns};
    r->ok = be->run(state, &r->ka) == KILN_OK && be->sync(state) == KILN_OK;
    r->be = be;
    r->state = state;
    r->no_graph = be->device == KILN_DEVICE_CPU || !be->capture_begin;
    kiln__clear_error();
}

/* Records DEVICE_REPS runs of set-up tactic r into r->graph (r->no_graph
 * when the backend cannot: then it is timed by plain runs). */
static void tac_capture(tac_run *r) {
    if (r->graph || r->no_graph) return;
    r->no_graph = true;
    if (r->be->capture_begin(r->state) != KILN_OK) {
        kiln__clear_error();
        return;
    }
    bool ok = true;
    for (int i = 0; i < DEVICE_REPS && ok; i++) ok = r->be->run(r->state, &r->ka) == KILN_OK;
    void *g = NULL;
    if (r->be->capture_end(r->state, &g) != KILN_OK) g = NULL;
    kiln__clear_error();
    if (ok && g) {
        r->graph = g;
        r->no_graph = false;
    } else if (g) {
        r->be->graph_free(r->state, g);
    }
}

/* (runtime/engine.h) Timed one tactic after the other, a burst of load
 * fell on one candidate's runs alone: a 2-thread ResNet-50 build took
 * oneDNN (481 us) over Winograd for its 3x3 128-channel layers, which other
 * builds timed at 175-246 us. */
void kiln__tune_turns(int n, kiln_turn_fn run, void *ctx, double *us) {
    double t[TUNE_MAX_TACTICS][TUNE_REPS];
    int got[TUNE_MAX_TACTICS] = {0}, cap[TUNE_MAX_TACTICS];
    bool ok[TUNE_MAX_TACTICS];
    if (n > TUNE_MAX_TACTICS) n = TUNE_MAX_TACTICS;
    for (int k = 0; k < n; k++) ok[k] = true, cap[k] = TUNE_REPS;
    int rounds = TUNE_REPS;
    for (int round = 0; round < rounds; round++) {
        double t0 = kiln__now_us(), best = -1;
        for (int k = 0; k < n; k++) {
            if (!ok[k] || got[k] >= cap[k]) continue;
            double v = run(ctx, k);
            if (v < 0) ok[k] = false;
            else t[k][got[k]++] = v;
        }
        if (round == 1) { /* loses by far on both first runs (one could fall in a burst): enough */
            for (int k = 0; k < n; k++)
                if (ok[k] && got[k] == 2) {
                    double m = t[k][0] < t[k][1] ? t[k][0] : t[k][1];
                    if (best < 0 || m < best) best = m;
                }
            for (int k = 0; k < n; k++)
                if (ok[k] && got[k] == 2 && (t[k][0] < t[k][1] ? t[k][0] : t[k][1]) > 4.0 * best + 1000.0)
                    cap[k] = 2;
        }
        if (round == 1 && kiln__now_us() - t0 > 100000.0) rounds = 3;
    }
    for (int k = 0; k < n; k++) {
        us[k] = -1;
        if (!ok[k] || got[k] == 0) continue;
        qsort(t[k], (size_t)got[k], sizeof t[k][0], cmp_double);
        us[k] = t[k][got[k] / 2];
    }
}

typedef struct turn_ctx {
    const kiln_backend_i *be;
    void *state;
    tac_run *runs;
} turn_ctx;

/* One timed run of set-up tactic k (kiln_turn_fn): microseconds, < 0 when
 * it fails (then r->ok turns false). */
static double turn_run(void *vp, int k) {
    turn_ctx *c = vp;
    tac_run *r = &c->runs[k];
    if (!r->ok) return -1;
    /* a device queues its runs: DEVICE_REPS back to back, then one wait,
     * so that the launch and the synchronization do not hide a kernel of
     * a few microseconds */
    int reps = c->be->device == KILN_DEVICE_CPU ? 1 : DEVICE_REPS;
    /* a device replays them as a graph where it can: the library's host
     * work per call (which graphs skip at run time too) stays out of the
     * comparison, so a layer of a few microseconds is judged by the GPU */
    if (reps > 1) tac_capture(r);
    double t0 = kiln__now_us();
    bool ok = true, launched = false;
    if (r->graph) {
        ok = c->be->graph_launch(c->state, r->graph, &launched) == KILN_OK;
        if (ok && !launched) { /* it refers to memory that moved: plain runs from now on */
            c->be->graph_free(c->state, r->graph);
            r->graph = NULL;
            t0 = kiln__now_us();
        }
    }
    if (!launched)
        for (int i = 0; i < reps && ok; i++) ok = c->be->run(c->state, &r->ka) == KILN_OK;
    r->ok = ok && c->be->sync(c->state) == KILN_OK;
    kiln__clear_error();
    return r->ok ? (kiln__now_us() - t0) / reps : -1;
}

/* Times set-up tactics runs[0..n) by turns (kiln__tune_turns) and leaves
 * each one's median in us[] (< 0: it fails, not a candidate). */
static void time_turns(const kiln_backend_i *be, void *state, tac_run *runs, int n, double *us) {
    turn_ctx c = {be, state, runs};
    kiln__tune_turns(n, turn_run, &c, us);
}

/* Median time of tactic `id` of node n in microseconds; < 0 when it fails
 * to run. */
static double time_tactic(const kiln_backend_i *be, void *state, kiln_pool *pool, const kiln_node *n,
                          const kiln_tinfo *const *in, int32_t id, tune_bufs *tb) {
    tac_run *r = kiln__malloc(sizeof *r);
    double us = -1;
    if (!r) return -1;
    tac_setup(be, state, pool, n, in, id, tb, r);
    time_turns(be, state, r, 1, &us);
    tac_free(r);
    kiln__free(r);
    return us;
}

/* The inputs and outputs of tactic node n at the opt shapes; false when
 * n has no tactics or a shape is unknown. */
static bool node_shapes(const kiln_graph *g, const kiln_node *n, const kiln_tinfo *vi,
                        const kiln_tinfo **in, kiln_tinfo *outs) {
    (void)g;
    if (n->dead || !(n->op->flags & KILN_OP_FLAG_TACTICS) || n->n_in > 64 || n->n_out > 16)
        return false;
    for (int i = 0; i < n->n_in; i++) {
        in[i] = n->in[i] >= 0 ? &vi[n->in[i]] : NULL;
        if (in[i] && (in[i]->rank < 0 || kiln__numel(in[i]->rank, in[i]->dims) < 0)) return false;
    }
    for (int i = 0; i < n->n_out; i++) {
        int v = n->out[i];
        outs[i] = v >= 0 ? vi[v] : (kiln_tinfo){.rank = -1};
        if (outs[i].rank < 0) return false;
    }
    return true;
}

static bool lists(const int32_t *ids, int n, int32_t id) {
    for (int i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

/* Whether oneDNN runs FusedConv n (tactic and layouts as in its attrs)
 * with a real kernel (a reference one would take seconds to time). */
static bool probe_fused_conv(const kiln_node *n, tune_bufs *tb, kiln_pool *pool) {
#if KILN_HAVE_DNNL
    kiln_kernel_args ka = {.op = n->op, .attrs = n->attrs, .node_name = n->name, .n_in = n->n_in,
                           .n_out = n->n_out, .in = tb->pin, .out = tb->pout, .pool = pool};
    bool ok = kiln__dnnl_conv_probe(&ka, ((const kiln_tactic *)n->attrs)->id) == KILN_OK;
    kiln__clear_error();
    return ok;
#else
    (void)n, (void)tb, (void)pool;
    return false;
#endif
}

/* A oneDNN tactic of a FusedConv is timed as it runs inside a chain of
 * oneDNN layers, NHWC in and out (no reorders), when oneDNN has a real
 * kernel for that: sets the node's layout for the timing and returns true
 * (the caller resets it), else leaves it NCHW. */
static bool chain_layout(kiln_node *n, const kiln_tinfo *const *in, int32_t id, tune_bufs *tb,
                         kiln_pool *pool) {
    if (n->op_id != KILN_OP_FusedConv || n->device != KILN_DEVICE_CPU || id == KILN_FC_TACTIC_OWN ||
        !in[0] || in[0]->rank != 4)
        return false;
    kiln_fused_conv_attrs *fa = n->attrs;
    if (kiln__fc_wino_tile(id) || id == KILN_FC_TACTIC_DIRECT) { /* kiln's kernels: every layer they take, any layout */
        fa->layout = KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
        return true;
    }
    int32_t saved = fa->tactic.id;
    fa->tactic.id = id;
    fa->layout = KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
    if (fa->precision == KILN_PRECISION_BF16) fa->layout |= KILN_FC_LAYOUT_X_BF16 | KILN_FC_LAYOUT_Y_BF16;
    bool ok = probe_fused_conv(n, tb, pool);
    fa->tactic.id = saved;
    if (!ok) fa->layout = 0;
    return ok;
}

/* Times FusedConv layer ni with the layout in its attrs at the opt shapes:
 * *us the median (-1: it fails, or oneDNN has only a reference kernel for
 * it), left as it was when a shape is unknown. */
static kiln_status time_layout(const kiln_graph *g, kiln_tinfo *vi, void *cpu_state, kiln_pool *pool, int ni,
                               double *us) {
    const kiln_backend_i *be = kiln__backend_for(KILN_DEVICE_CPU);
    const kiln_node *n = &g->nodes[ni];
    const kiln_tinfo *in[64] = {0};
    kiln_tinfo outs[16];
    if (!node_shapes(g, n, vi, in, outs)) return KILN_OK;
    tune_bufs tb;
    memset(&tb, 0, sizeof tb);
    kiln_status st = bufs_make(be, cpu_state, n, in, outs, &tb);
    const kiln_tactic *tac = n->attrs;
    /* oneDNN's tactics: only where it has a real kernel for the layouts */
    bool dnnl = tac->id == KILN_FC_TACTIC_DNNL_PLAIN || tac->id == KILN_FC_TACTIC_DNNL_BLOCKED;
    *us = st == KILN_OK && (!dnnl || probe_fused_conv(n, &tb, pool))
              ? time_tactic(be, cpu_state, pool, n, in, tac->id, &tb)
              : -1;
    bufs_free(be, cpu_state, n, &tb, in);
    return st;
}

#define C16_MARGIN 0.98 /* nChw16c kept when its run takes at most this share of NHWC's */

/* Every node's layout field (kiln__layout_attr; 0 for nodes without one)
 * into lay[n_nodes], or (set) back from it. */
static void layouts_io(kiln_graph *g, int32_t *lay, bool set) {
    for (int ni = 0; ni < g->n_nodes; ni++) {
        int32_t *l = kiln__layout_attr(&g->nodes[ni]);
        if (set && l) *l = lay[ni];
        else if (!set) lay[ni] = l ? *l : 0;
    }
}

#define TRIAL_MAX_RUNS 15

/* Node attrs of trial variant v (0 or 1) into the graph. */
typedef void (*variant_fn)(kiln_graph *g, int v, void *arg);

/* The whole engine run at the opt shapes (zero inputs) in two variants of
 * its nodes' attrs (set(g, v, arg) before every run: a context reads them
 * as it runs, and keeps the state each variant's kernels made), alternately:
 * a warm-up run each, then up to TRIAL_MAX_RUNS timed runs each, about a
 * second in all; one each where a run takes over a quarter of a second
 * (large batches), so a trial adds four runs to the build. t[v][r]: run
 * r's microseconds; layer_us (when not NULL; TRIAL_MAX_RUNS x 2 x n_nodes)
 * each layer's too, from the context's profile. *runs: the timed runs
 * (0: a run failed). */
static kiln_status alternate_runs(kiln_engine *e, variant_fn set, void *arg, double t[2][TRIAL_MAX_RUNS],
                                  double *layer_us, int *runs) {
    kiln_graph *g = e->graph;
    void **bufs = kiln__calloc((size_t)g->n_inputs + 1, sizeof *bufs);
    kiln_context *c[2] = {NULL, NULL};
    *runs = 0;
    if (!bufs) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (engine trial)");
    int want = 3;
    bool ok = true;
    for (int k = 0; k < g->n_inputs && ok; k++) {
        const kiln_profile *p = &e->profiles[k];
        int64_t n = kiln__numel(p->rank, p->opt);
        size_t es = kiln_dtype_size(g->values[g->inputs[k]].info.dtype);
        bufs[k] = n >= 0 && es ? kiln__calloc((size_t)n + 1, es) : NULL;
        ok = bufs[k] != NULL;
    }
    /* round -1: each context's first run (plans, primitives, packed weights) */
    for (int r = -1; ok && r < want; r++) {
        for (int v = 0; v < 2 && ok; v++) {
            set(g, v, arg);
            if (!c[v]) {
                ok = kiln_context_create(e, &c[v]) == KILN_OK;
                for (int k = 0; ok && k < g->n_inputs; k++) {
                    const kiln_profile *p = &e->profiles[k];
                    ok = kiln_context_set_input(c[v], g->values[g->inputs[k]].name,
                                                g->values[g->inputs[k]].info.dtype, p->rank, p->opt,
                                                bufs[k]) == KILN_OK;
                }
            }
            if (ok && layer_us) ok = kiln_context_set_profiling(c[v], r >= 0) == KILN_OK; /* clears the totals */
            double t0 = kiln__now_us();
            ok = ok && kiln_context_run(c[v]) == KILN_OK;
            if (r >= 0) t[v][r] = kiln__now_us() - t0;
            for (int ni = 0; ok && r >= 0 && layer_us && ni < g->n_nodes; ni++) {
                double us = 0;
                int64_t nr = 0;
                ok = kiln_context_layer_time(c[v], ni, &us, &nr) == KILN_OK;
                layer_us[((size_t)r * 2 + (size_t)v) * (size_t)g->n_nodes + (size_t)ni] = nr > 0 ? us / (double)nr : 0;
            }
            if (r == 0 && v == 1 && ok) { /* from the first timed runs (the warm-up ones set up too) */
                double us = (t[0][0] + t[1][0]) / 2;
                want = us > 0 ? (int)(1e6 / (2 * us)) : TRIAL_MAX_RUNS;
                want = us > 2.5e5 ? 1 : want < 3 ? 3 : want > TRIAL_MAX_RUNS ? TRIAL_MAX_RUNS : want;
            }
        }
        if (r >= 0 && ok) *runs = r + 1;
    }
    if (!ok) *runs = 0;
    kiln__clear_error(); /* a failed run: the caller keeps variant 0 */
    for (int v = 0; v < 2; v++) kiln_context_free(c[v]);
    for (int k = 0; k < g->n_inputs; k++) kiln__free(bufs[k]);
    kiln__free(bufs);
    return KILN_OK;
}

/* Median of n doubles spaced `stride` apart (n <= TRIAL_MAX_RUNS). */
static double median_of(const double *x, int n, size_t stride) {
    double v[TRIAL_MAX_RUNS];
    for (int i = 0; i < n; i++) v[i] = x[(size_t)i * stride];
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return v[n / 2];
}

typedef struct lay_variants {
    int32_t *lay; /* 2 x n_nodes layout fields */
} lay_variants;

static void set_layouts(kiln_graph *g, int v, void *arg) {
    layouts_io(g, ((lay_variants *)arg)->lay + (size_t)v * g->n_nodes, true);
}

/* The engine with the layouts of variant 0 (NHWC) and 1 (nChw16c)
 * (alternate_runs). Blocked tensors pay off where they stream from memory
 * and cost where a batch-1 layer must split its channels over the threads,
 * which timing layers one by one, warm, does not show. Leaves the faster
 * variant's layouts (NHWC when a run fails). */
static kiln_status network_c16(kiln_engine *e, const bool *veto) {
    kiln_graph *g = e->graph;
    lay_variants lv = {kiln__calloc(2 * (size_t)g->n_nodes + 1, sizeof *lv.lay)};
    if (!lv.lay) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (layouts)");
    layouts_io(g, lv.lay + g->n_nodes, false); /* the nChw16c layouts are in place now */
    kiln__fc_choose_layouts(g, veto, false);
    layouts_io(g, lv.lay, false);
    double t[2][TRIAL_MAX_RUNS];
    int runs = 0;
    kiln_status st = alternate_runs(e, set_layouts, &lv, t, NULL, &runs);
    /* by 2% at least: the two can tie within the noise of a few runs, and
     * where they tie NHWC keeps the batch-1 row split */
    int keep = st == KILN_OK && runs > 0 && median_of(t[1], runs, 1) < C16_MARGIN * median_of(t[0], runs, 1) ? 1 : 0;
    layouts_io(g, lv.lay + (size_t)keep * g->n_nodes, true);
    kiln__free(lv.lay);
    return st;
}

#define DIRECT_MARGIN 0.97 /* a layer takes the direct kernel where it runs in this share of the time */

typedef struct tac_variants {
    int32_t *id; /* 2 x n_nodes tactic ids (-1: no tactic) */
} tac_variants;

static void set_tactics(kiln_graph *g, int v, void *arg) {
    const int32_t *id = ((tac_variants *)arg)->id + (size_t)v * g->n_nodes;
    for (int ni = 0; ni < g->n_nodes; ni++)
        if (id[ni] >= 0) ((kiln_tactic *)g->nodes[ni].attrs)->id = id[ni];
}

/* The timing-cache key of node n's in-network choice (network_direct):
 * its tuning key (the same shapes) + "|in-network". */
static bool net_key(const kiln_engine *e, const kiln_node *n, const kiln_tinfo *vi, kiln_sbuf *key) {
    const kiln_tinfo *in[64] = {0};
    kiln_tinfo outs[16];
    if (!node_shapes(e->graph, n, vi, in, outs)) return false;
    make_key(e, n, in, key);
    kiln__sbuf_printf(key, "|in-network");
    return !key->oom;
}

/* kiln's direct kernel (KILN_FC_TACTIC_DIRECT) against each layer's tuned
 * tactic, inside the network. Timed alone, warm, oneDNN's kernels win most
 * layers; in the network, where the weights come from memory and the input
 * from the other core's cache, the direct kernel wins the weight-heavy ones
 * (ResNet-50's last stage at batch 1, 2 threads: 1x1 layers 410-500 us
 * against 510-610). So variant 1 runs it in every layer it fits (except
 * Winograd ones: 2.25 to 4 times fewer multiplications), variant 0 in
 * none; each layer takes it where its median time is under DIRECT_MARGIN
 * of the tuned tactic's; then that mix runs against variant 0 and is kept
 * only where the whole engine runs faster. Only layers whose opt shapes
 * are known (vi) take part. The choices go into the timing cache (`cache`,
 * key + "|in-network": tactic DIRECT, or another id for the tuned one); a
 * build that finds every candidate there takes them without a trial. */
static kiln_status network_direct(kiln_engine *e, const kiln_tinfo *vi, tcache *cache) {
    kiln_graph *g = e->graph;
    size_t nn = (size_t)g->n_nodes;
    tac_variants tv = {kiln__malloc(2 * nn * sizeof *tv.id + 1)};
    double *lus = kiln__calloc((size_t)TRIAL_MAX_RUNS * 2 * nn + 1, sizeof *lus);
    kiln_sbuf key = {0};
    if (!tv.id || !lus) {
        kiln__free(tv.id);
        kiln__free(lus);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (direct-kernel trial)");
    }
    int cand = 0, cached = 0;
    for (size_t ni = 0; ni < nn; ni++) {
        kiln_node *n = &g->nodes[ni];
        tv.id[ni] = tv.id[nn + ni] = -1;
        if (n->dead || n->op_id != KILN_OP_FusedConv || n->device != KILN_DEVICE_CPU || n->n_in < 2 ||
            n->in[0] < 0 || n->in[1] < 0)
            continue;
        const kiln_fused_conv_attrs *fa = n->attrs;
        const kiln_tinfo *x = &vi[n->in[0]], *w = &vi[n->in[1]];
        if ((fa->layout & (KILN_FC_LAYOUT_X_BF16 | KILN_FC_LAYOUT_Y_BF16)) || fa->tactic.id == KILN_FC_TACTIC_DIRECT ||
            kiln__fc_wino_tile(fa->tactic.id) || x->rank < 0 || w->rank < 0 ||
            !kiln__fc_direct_fits(fa, x->rank, x->dims, w->rank, w->dims))
            continue;
        tv.id[ni] = fa->tactic.id;
        tv.id[nn + ni] = KILN_FC_TACTIC_DIRECT;
        cand++;
        if (cache && net_key(e, n, vi, &key)) {
            const cache_ent *ce = cache_find(cache, key.data);
            if (ce) {
                cached++;
                lus[ni] = ce->us;
                if (ce->id != KILN_FC_TACTIC_DIRECT) tv.id[nn + ni] = tv.id[ni];
            }
        }
    }
    kiln_status st = KILN_OK;
    int keep = 0;
    if (cand > 0 && cached == cand) {
        keep = 1; /* the cache's choices */
    } else if (cand > 0) {
        for (size_t ni = 0; ni < nn; ni++)
            if (tv.id[ni] >= 0) tv.id[nn + ni] = KILN_FC_TACTIC_DIRECT;
        double t[2][TRIAL_MAX_RUNS];
        int runs = 0, chosen = 0;
        st = alternate_runs(e, set_tactics, &tv, t, lus, &runs);
        /* variant 1 becomes the mix of each layer's faster kernel; the
         * direct kernel's median goes into lus[ni] (its time for inspect) */
        for (size_t ni = 0; ni < nn; ni++) {
            if (tv.id[ni] < 0) continue;
            bool take = false;
            if (st == KILN_OK && runs > 0) {
                double m0 = median_of(lus + ni, runs, 2 * nn), m1 = median_of(lus + nn + ni, runs, 2 * nn);
                take = m1 < DIRECT_MARGIN * m0;
                lus[ni] = m1;
            }
            if (take) chosen++;
            else tv.id[nn + ni] = tv.id[ni];
        }
        /* the mix against the tuned tactics, whole runs: each layer was
         * timed among neighbours that had all changed too, and a layer's
         * time depends on where its neighbours left its tensors */
        if (st == KILN_OK && chosen > 0) {
            st = alternate_runs(e, set_tactics, &tv, t, NULL, &runs);
            keep = st == KILN_OK && runs > 0 && median_of(t[1], runs, 1) < median_of(t[0], runs, 1) ? 1 : 0;
        }
        for (size_t ni = 0; st == KILN_OK && cache && ni < nn; ni++)
            if (tv.id[ni] >= 0 && net_key(e, &g->nodes[ni], vi, &key))
                st = cache_put(cache, key.data, tv.id[(size_t)keep * nn + ni], (float)lus[ni]);
    }
    if (cand > 0) {
        set_tactics(g, keep, &tv);
        for (size_t ni = 0; ni < nn; ni++)
            if (tv.id[ni] >= 0 && ((kiln_tactic *)g->nodes[ni].attrs)->id == KILN_FC_TACTIC_DIRECT)
                ((kiln_tactic *)g->nodes[ni].attrs)->us = (float)lus[ni];
    }
    kiln__sbuf_free(&key);
    kiln__free(tv.id);
    kiln__free(lus);
    return st;
}

/* NHWC tensors between oneDNN layers (fused_conv.h). Each layer that gets
 * one is timed again: one that fails, or that oneDNN runs much slower that
 * way (a reference kernel), is vetoed and the choice made again. Then the
 * float32 ones in nChw16c instead, kept when the engine runs faster so
 * (network_c16). */
static kiln_status choose_layouts(kiln_engine *e, kiln_tinfo *vi, void *cpu_state, kiln_pool *pool) {
    kiln_graph *g = e->graph;
    bool *veto = kiln__calloc((size_t)g->n_nodes + 1, sizeof *veto);
    int *checked = kiln__calloc((size_t)g->n_nodes + 1, sizeof *checked);
    if (!veto || !checked) {
        kiln__free(veto);
        kiln__free(checked);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (layouts)");
    }
    kiln_status st = KILN_OK;
    bool bad = true;
    for (int round = 0; round < 16 && bad; round++) {
        bad = false;
        if (kiln__fc_choose_layouts(g, veto, false) == 0) break;
        for (int ni = 0; ni < g->n_nodes && st == KILN_OK; ni++) {
            int lay = g->nodes[ni].op_id == KILN_OP_FusedConv ? ((kiln_fused_conv_attrs *)g->nodes[ni].attrs)->layout : 0;
            if (!lay || checked[ni] == lay + 1) continue;
            double us = -2;
            st = time_layout(g, vi, cpu_state, pool, ni, &us);
            if (us == -2) continue; /* shapes unknown at opt */
            checked[ni] = lay + 1; /* this layout of this layer was timed */
            const kiln_tactic *tac = g->nodes[ni].attrs;
            if (st == KILN_OK && (us < 0 || (tac->us > 0 && us > 2.0 * tac->us + 100.0))) {
                veto[ni] = true;
                bad = true;
            }
        }
    }
    if (bad || st != KILN_OK) { /* give up on NHWC: NCHW is always right */
        kiln__fc_clear_layouts(g);
    } else if (e->opts.device == KILN_DEVICE_CPU && kiln__fc_choose_layouts(g, veto, true) > 0 &&
               kiln__fc_c16_values(g) > 0) {
        /* (a device engine's CPU layers keep NHWC: running that engine
         * here would prepare its device weights before the build is done) */
        st = network_c16(e, veto);
    }
    kiln__free(veto);
    kiln__free(checked);
    return st;
}

static bool has_tactics(const kiln_graph *g) {
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && (g->nodes[i].op->flags & KILN_OP_FLAG_TACTICS)) return true;
    return false;
}

kiln_status kiln__builder_tune(const kiln_builder *b, kiln_engine *e) {
    kiln_graph *g = e->graph;
    if (!b->tuning || !has_tactics(g)) return KILN_OK;
    kiln_tinfo *vi = kiln__calloc((size_t)g->n_values + 1, sizeof *vi);
    if (!vi) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (tuning)");
    tcache cache = {0};
    kiln_pool *pool = NULL;
    void *states[2] = {NULL, NULL}; /* a backend's state may be NULL (CPU): made[] says */
    bool made[2] = {false, false};
    kiln_sbuf key = {0};
    kiln_status st = KILN_OK;
    int n_timed = 0, n_cached = 0, n_layers = 0;
    const char *venv = getenv("KILN_TUNE_VERBOSE");
    bool verbose = venv && *venv && strcmp(venv, "0") != 0;
    double t_start = kiln__now_us();
    if (b->timing_cache && (st = cache_read(&cache, b->timing_cache)) != KILN_OK) goto out;
    if ((st = opt_shapes(e, vi)) != KILN_OK) goto out;
    for (int ni = 0; ni < g->n_nodes; ni++) {
        kiln_node *n = &g->nodes[ni];
        const kiln_tinfo *in[64] = {0};
        kiln_tinfo outs[16];
        if (!node_shapes(g, n, vi, in, outs)) continue; /* unknown at opt: tactic 0 */
        const kiln_backend_i *be = kiln__backend_for(n->device);
        if (!be) continue;
        int si = n->device == KILN_DEVICE_CPU ? 0 : 1;
        if (!made[si]) {
            if ((st = be->state_create(e->opts.device_index, &states[si])) != KILN_OK) goto out;
            made[si] = true;
        }
        if (si == 0 && !pool && (st = kiln__pool_create(e->opts.threads, &pool)) != KILN_OK) goto out;
        kiln_tinfo *op_[16];
        for (int i = 0; i < n->n_out; i++) op_[i] = &outs[i];
        kiln_infer_args ia = {.op = n->op, .attrs = n->attrs, .node_name = n->name, .n_in = n->n_in,
                              .n_out = n->n_out, .in = in, .out = op_, .runtime = false};
        int32_t ids[TUNE_MAX_TACTICS];
        int n_ids = be->tactics ? be->tactics(states[si], &ia, ids, TUNE_MAX_TACTICS) : 0;
        kiln_tactic *tac = n->attrs;
        n_layers++;
        /* one tactic: nothing to choose (a device layer's is still timed, for
         * inspect and the timing cache) */
        if (n_ids == 0 || (n_ids == 1 && be->device == KILN_DEVICE_CPU)) {
            tac->id = n_ids == 1 ? ids[0] : 0;
            continue;
        }
        make_key(e, n, in, &key);
        if (key.oom) {
            st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (tuning)");
            goto out;
        }
        cache_ent *ce = cache_find(&cache, key.data);
        if (ce) {
            for (int k = 0; k < n_ids; k++)
                if (ids[k] == ce->id) {
                    tac->id = ce->id;
                    tac->us = ce->us;
                    n_cached++;
                    goto next;
                }
        }
        {
            tune_bufs tb;
            memset(&tb, 0, sizeof tb);
            st = bufs_make(be, states[si], n, in, outs, &tb);
            int32_t best = 0, cand[TUNE_MAX_TACTICS];
            double best_us = -1, us[TUNE_MAX_TACTICS], setup_us[TUNE_MAX_TACTICS];
            int nc = 0;
            tac_run *runs = st == KILN_OK ? kiln__calloc((size_t)n_ids, sizeof *runs) : NULL;
            if (st == KILN_OK && !runs) st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (tuning)");
            for (int k = 0; st == KILN_OK && k < n_ids; k++) {
                /* the direct kernel is judged inside the network (network_direct) */
                if (n->op_id == KILN_OP_FusedConv && ids[k] == KILN_FC_TACTIC_DIRECT) continue;
                bool nhwc = chain_layout(n, in, ids[k], &tb, pool);
                if (nhwc && ids[k] == KILN_FC_TACTIC_DNNL_PLAIN && lists(ids, n_ids, KILN_FC_TACTIC_DNNL_BLOCKED)) {
                    /* NHWC in and out, oneDNN's plain and blocked tactics
                     * are one kernel; blocked is the one that also runs
                     * well where a neighbour stays NCHW */
                    ((kiln_fused_conv_attrs *)n->attrs)->layout = 0;
                    continue;
                }
                /* set up with the layout it runs in (its attrs are copied) */
                double t_setup = kiln__now_us();
                tac_setup(be, states[si], pool, n, in, ids[k], &tb, &runs[nc]);
                setup_us[nc] = kiln__now_us() - t_setup;
                if (nhwc) ((kiln_fused_conv_attrs *)n->attrs)->layout = 0;
                cand[nc++] = ids[k];
            }
            if (st == KILN_OK) time_turns(be, states[si], runs, nc, us);
            if (st == KILN_OK && verbose) {
                /* KILN_TUNE_VERBOSE=1: every candidate's set-up and median time */
                fprintf(stderr, "kiln: tune %s:", n->name);
                for (int k = 0; k < nc; k++) {
                    char nm[96];
                    if (be->tactic_describe) be->tactic_describe(n, cand[k], nm, sizeof nm);
                    else snprintf(nm, sizeof nm, "%s", be->tactic_name ? be->tactic_name(n, cand[k]) : "?");
                    fprintf(stderr, " %s=%.1fus(setup %.0fms)", nm, us[k], setup_us[k] / 1000.0);
                }
                fprintf(stderr, "\n");
            }
            for (int k = 0; k < nc; k++) {
                if (st == KILN_OK && us[k] >= 0 && (best_us < 0 || us[k] < best_us)) {
                    best_us = us[k];
                    best = cand[k];
                }
                tac_free(&runs[k]);
            }
            kiln__free(runs);
            bufs_free(be, states[si], n, &tb, in);
            if (st != KILN_OK) goto out;
            tac->id = best_us >= 0 ? best : 0;
            tac->us = best_us >= 0 ? (float)best_us : 0.0f;
            n_timed++;
            if ((st = cache_put(&cache, key.data, tac->id, tac->us)) != KILN_OK) goto out;
            if (kiln__now_us() - t_start > 2e6 && n_timed % 10 == 0)
                fprintf(stderr, "kiln: tuning: %d layers timed, %d from the cache (%.1f s)\n", n_timed,
                        n_cached, (kiln__now_us() - t_start) / 1e6);
        }
    next:;
    }
    if (made[0] && (st = choose_layouts(e, vi, states[0], pool)) != KILN_OK) goto out;
    /* (CPU engines only, as network_c16) */
    if (made[0] && e->opts.device == KILN_DEVICE_CPU && kiln__direct_fast_available() &&
        (st = network_direct(e, vi, b->timing_cache ? &cache : NULL)) != KILN_OK)
        goto out;
    if (b->timing_cache && cache.dirty) st = cache_write(&cache, b->timing_cache);
    if (kiln__now_us() - t_start > 2e6)
        fprintf(stderr, "kiln: tuning done: %d layers with tactics, %d timed, %d from the cache (%.1f s)\n",
                n_layers, n_timed, n_cached, (kiln__now_us() - t_start) / 1e6);
out:
    if (made[0]) kiln__backend_for(KILN_DEVICE_CPU)->state_free(states[0]);
    if (made[1]) kiln__backend_for(e->opts.device)->state_free(states[1]);
    kiln__pool_free(pool);
    kiln__sbuf_free(&key);
    cache_free(&cache);
    kiln__free(vi);
    return st;
}
