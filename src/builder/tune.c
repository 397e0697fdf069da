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
 *     kiln-timing-cache 5
 *     <key> <tactic id> <microseconds>
 *
 * keyed by the target, the thread count, the math setting ("acc", or
 * "fast" with kiln_builder_set_fast_math: the tactics a layer may get
 * differ), the op, its attributes (without
 * the tactic, in hex) and the input dtypes and shapes. It is read before
 * timing (a known key is not timed again, nor is a layer identical to one
 * timed before in the same build) and rewritten after, through a
 * temporary file and a rename, with the entries other builds added to the
 * file meanwhile (cache_write). Files of versions 1 (made before a device
 * layer's tactics had to agree on its output, tune_check.h) and 2 (before
 * disagreeing tactics were judged by the host reference, not a vote: a
 * wrong plurality's choice may be in them), 3 (before the NaN probe: a
 * tactic that turns NaN into numbers may be in them) and 4 (before the
 * probe's input with infinities) are read as empty,
 * with a note: their choices are timed and checked again. */
#include "backends/backend.h"
#include "builder/tune_check.h"
#include "runtime/debug.h"
#include "runtime/engine.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <sys/stat.h>
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
    int *slot;    /* open-addressing index of e: entry + 1, 0 empty (a file of 10^6 lines is read in */
    int n_slot;   /* linear time, not n^2 key comparisons); a power of two, at least twice n */
    bool dirty;
    struct stat seen; /* the file as read (st_ino 0: none was); cache_write merges only if it changed */
} tcache;

/* Lines of the cache file are at most this long (a key is ~1 kB) */
#define CACHE_LINE_MAX 8192

static void cache_free(tcache *c) {
    for (int i = 0; i < c->n; i++) kiln__free(c->e[i].key);
    kiln__free(c->e);
    kiln__free(c->slot);
}

/* The slot of key: its entry's, or the empty one where it would go. */
static int *cache_slot(const tcache *c, const char *key) {
    size_t mask = (size_t)c->n_slot - 1, k = (size_t)kiln__fnv1a(key, strlen(key), KILN_FNV_SEED) & mask;
    while (c->slot[k] && strcmp(c->e[c->slot[k] - 1].key, key)) k = (k + 1) & mask;
    return &c->slot[k];
}

static cache_ent *cache_find(tcache *c, const char *key) {
    if (!c->n_slot) return NULL;
    int s = *cache_slot(c, key);
    return s ? &c->e[s - 1] : NULL;
}

static kiln_status cache_put(tcache *c, const char *key, int32_t id, float us) {
    cache_ent *e = cache_find(c, key);
    if (!e) {
        if ((c->n + 1) * 2 > c->n_slot) {
            if (c->n_slot > INT32_MAX / 4) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "timing cache: too many entries");
            int ns = c->n_slot ? c->n_slot * 2 : 64;
            int *old = c->slot;
            if (!(c->slot = kiln__calloc((size_t)ns, sizeof *c->slot))) {
                c->slot = old;
                return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (timing cache)");
            }
            kiln__free(old);
            c->n_slot = ns;
            for (int i = 0; i < c->n; i++) *cache_slot(c, c->e[i].key) = i + 1;
        }
        KILN_TRY(kiln__grow((void **)&c->e, &c->cap, c->n + 1, sizeof *c->e));
        char *k = kiln__strdup(key);
        if (!k) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (timing cache)");
        *cache_slot(c, key) = c->n + 1;
        e = &c->e[c->n++];
        memset(e, 0, sizeof *e);
        e->key = k;
    }
    e->id = id;
    e->us = us;
    c->dirty = true;
    return KILN_OK;
}

/* One "<key> <tactic id> <microseconds>" line: a key without spaces, an
 * int32 id, a finite time >= 0 (a NaN would reach the engine and inspect's
 * JSON), nothing after. */
static bool cache_parse_line(char *line, const char **key, int32_t *id, float *us) {
    char *sp = strchr(line, ' '), *end;
    if (!sp || sp == line) return false;
    *sp = 0;
    *key = line;
    errno = 0;
    long long v = strtoll(sp + 1, &end, 10);
    if (end == sp + 1 || *end != ' ' || errno || v < INT32_MIN || v > INT32_MAX) return false;
    *id = (int32_t)v;
    const char *t = end + 1;
    double u = strtod(t, &end);
    if (end == t || *end || !isfinite(u) || u < 0 || u > 3.0e38) return false;
    *us = (float)u;
    return true;
}

/* One line of the cache file into buf (cap bytes), without its newline and
 * a carriage return before it (a file that went through a CRLF checkout was
 * "not a kiln timing cache"): its length, or -1 at the end of the file, -2
 * when it is longer than cap - 2 characters, -3 when it holds a NUL byte
 * (fgets + strlen read such a line up to the NUL, and a long line with one
 * escaped the length check). */
static long cache_getline(FILE *f, char *buf, size_t cap) {
    size_t len = 0;
    int ch = EOF;
    bool nul = false;
    while ((ch = getc_unlocked(f)) != EOF && ch != '\n') {
        if (len + 2 >= cap) {
            while ((ch = getc_unlocked(f)) != EOF && ch != '\n') {
            }
            return -2;
        }
        nul |= ch == 0;
        buf[len++] = (char)ch;
    }
    if (ch == EOF && len == 0) return -1;
    if (len && buf[len - 1] == '\r') len--;
    buf[len] = 0;
    return nul ? -3 : (long)len;
}

/* Reads the cache file; a missing file is an empty cache (when its folder
 * exists: it is written there after the tuning, which should not run in
 * vain), a malformed one an error naming the file and line. */
static kiln_status cache_read(tcache *c, const char *path, bool notes) {
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT) {
        const char *slash = strrchr(path, '/');
        char dir[4096];
        if (!slash) return KILN_OK;
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        if (n >= sizeof dir) return KILN_OK; /* (the write names the problem) */
        memcpy(dir, path, n);
        dir[n] = 0;
        if (stat(dir, &sb) != 0)
            return KILN_FAIL(KILN_ERR_IO, "timing cache '%s': folder '%s': %s", path, dir, strerror(errno));
        if (!S_ISDIR(sb.st_mode))
            return KILN_FAIL(KILN_ERR_IO, "timing cache '%s': '%s' is not a folder", path, dir);
        return KILN_OK;
    }
    int fd;
    KILN_TRY(kiln__open_regular(path, "timing cache", &fd, NULL));
    if (fstat(fd, &c->seen) != 0) memset(&c->seen, 0, sizeof c->seen);
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return KILN_FAIL(KILN_ERR_IO, "cannot read timing cache '%s': %s", path, strerror(errno));
    }
    char line[CACHE_LINE_MAX];
    int ln = 0;
    kiln_status st = KILN_OK;
    bool old = false;
    long got;
    while (st == KILN_OK && !old && (got = cache_getline(f, line, sizeof line)) != -1) {
        if (ln == INT32_MAX) break;
        ln++;
        if (got == -2) {
            st = KILN_FAIL(KILN_ERR_IO, "timing cache '%s', line %d is longer than %d characters", path, ln,
                           CACHE_LINE_MAX - 2);
            break;
        }
        if (got == -3) {
            st = KILN_FAIL(KILN_ERR_IO, "timing cache '%s', line %d holds a NUL byte", path, ln);
            break;
        }
        size_t len = (size_t)got;
        if (ln == 1) {
            old = !strcmp(line, "kiln-timing-cache 1") || !strcmp(line, "kiln-timing-cache 2") ||
                  !strcmp(line, "kiln-timing-cache 3") || !strcmp(line, "kiln-timing-cache 4");
            if (old) {
                if (notes)
                    fprintf(stderr, "kiln: timing cache '%s' is of version %c (%s): its layers are timed again\n",
                            path, line[18],
                            line[18] == '4'   ? "before the NaN probe tried infinities"
                            : line[18] == '3' ? "before the NaN probe kept tactics that turn NaN into numbers out"
                                              : "before a device layer's tactics that disagree were judged by "
                                                "kiln's host reference");
            } else if (strcmp(line, "kiln-timing-cache 5"))
                st = KILN_FAIL(KILN_ERR_IO, "timing cache '%s' is not a kiln timing cache (version 5)",
                               path);
            continue;
        }
        if (!len) continue;
        const char *key;
        int32_t id;
        float us;
        if (!cache_parse_line(line, &key, &id, &us)) {
            st = KILN_FAIL(KILN_ERR_IO,
                           "timing cache '%s', line %d is malformed (expected '<key> <tactic id> <microseconds>', "
                           "a finite time >= 0)", path, ln);
            break;
        }
        st = cache_put(c, key, id, us);
    }
    fclose(f);
    c->dirty = false;
    return st;
}

/* Writes c to path. Entries another build wrote to the file since it was
 * read are kept (c's own win where both have a key): builds sharing one
 * cache file at once (make -j, CI jobs) each rewrite it whole, and without
 * this merge the last one's rename dropped every entry the others had timed.
 * A file now unreadable or of another version is replaced, as before. */
static kiln_status cache_write(tcache *c, const char *path) {
    tcache now = {0};
    struct stat cur;
    bool changed = stat(path, &cur) == 0 ? !kiln__same_file(&cur, &c->seen) : c->seen.st_ino != 0;
    if (!changed) { /* as this build read it (or still absent): nothing to keep */
    } else if (cache_read(&now, path, false) == KILN_OK) {
        for (int i = 0; i < now.n; i++)
            if (!cache_find(c, now.e[i].key)) {
                kiln_status st = cache_put(c, now.e[i].key, now.e[i].id, now.e[i].us);
                if (st != KILN_OK) {
                    cache_free(&now);
                    return st;
                }
            }
    } else {
        kiln__clear_error();
    }
    cache_free(&now);
    kiln_sbuf sb = {0};
    kiln__sbuf_printf(&sb, "kiln-timing-cache 5\n");
    for (int i = 0; i < c->n; i++)
        kiln__sbuf_printf(&sb, "%s %d %.3f\n", c->e[i].key, (int)c->e[i].id, c->e[i].us);
    kiln_status st = sb.oom ? KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (timing cache)")
                            : kiln__write_file_atomic(path, sb.data, sb.len, "timing cache");
    kiln__sbuf_free(&sb);
    return st;
}

/* The cache key, written over what sb held: no spaces (the file format
 * splits on them). */
static void make_key(const kiln_engine *e, const kiln_node *n, const kiln_tinfo *const *in,
                     kiln_sbuf *sb) {
    sb->len = 0;
    if (sb->data) sb->data[0] = 0;
    for (const char *p = e->target; *p; p++) kiln__sbuf_printf(sb, "%c", *p == ' ' ? '_' : *p);
    kiln__sbuf_printf(sb, "|t%d|%s|%s.%s|", (int)e->opts.threads, e->opts.math == KILN_MATH_FAST ? "fast" : "acc",
                      n->op->domain, n->op->name);
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
        kiln_call c;
        if (kiln__call_begin(&c, g, n) != KILN_OK) {
            kiln__clear_error();
            continue; /* (its outputs stay unknown) */
        }
        bool known = true;
        for (int i = 0; i < n->n_in; i++) {
            if (n->in[i] < 0) continue;
            kiln__call_input(&c, i, &vi[n->in[i]], NULL);
            if (vi[n->in[i]].rank < 0) known = false;
        }
        if (!known || kiln__call_infer(&c, false, NULL, false) != KILN_OK) {
            kiln__clear_error();
            for (int i = 0; i < n->n_out; i++) c.out[i].rank = -1;
        }
        for (int i = 0; i < n->n_out; i++) {
            int v = n->out[i];
            if (v < 0) continue;
            kiln_tinfo *o = &c.out[i];
            o->data = NULL;
            if (o->rank >= 0 && kiln__numel(o->rank, o->dims) < 0) o->rank = -1;
            vi[v] = *o;
        }
        kiln__call_end(&c);
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
    void *host[64]; /* a device layer's inputs as bufs_make wrote them (keep_host) */
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
    for (int i = 0; i < n->n_in; i++) kiln__aligned_free(tb->host[i]);
}

/* Allocates the node's inputs (constants copied, others random in [-1, 1))
 * and outputs in the backend's memory; keep_host: the bytes copied to a
 * device's inputs stay in tb->host (for the host reference). */
static kiln_status bufs_make(const kiln_backend_i *be, void *state, const kiln_node *n,
                             const kiln_tinfo *const *in, const kiln_tinfo *out, bool keep_host, tune_bufs *tb) {
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
        if (keep_host) tb->host[i] = h;
        else kiln__aligned_free(h);
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
    kiln_call c;
    static const kiln_graph no_subgraphs; /* (a layer with tactics is no control flow) */
    if (kiln__call_begin(&c, &no_subgraphs, n) != KILN_OK) {
        kiln__clear_error();
        return;
    }
    for (int i = 0; i < n->n_in; i++)
        if (in[i]) kiln__call_input(&c, i, in[i], tb->pin[i] ? tb->pin[i]->data : NULL);
    c.ia.attrs = c.ka.attrs = r->attrs;
    size_t ws = be->device == KILN_DEVICE_CPU ? kiln__kernel_workspace(kiln__backend_kernel(be, n), &c.ia) : 0;
    r->ws = ws ? kiln__aligned_alloc(ws) : NULL;
    if (ws && !r->ws) {
        kiln__call_end(&c);
        return;
    }
    kiln__call_args(&c, r->ws, ws, be->device == KILN_DEVICE_CPU ? pool : NULL, &r->ns);
    r->ka = c.ka;
    r->ka.in = tb->pin; /* the node's timing buffers, which outlive this call */
    r->ka.out = tb->pout;
    kiln__call_end(&c);
    r->ka.device_state = be->device == KILN_DEVICE_CPU ? NULL : state;
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

/* The whole engine run at the opt shapes (zero inputs) in two variants of
 * its nodes' attrs (set(g, v, arg) before every run: a context reads them
 * as it runs, and keeps the state each variant's kernels made), alternately:
 * a warm-up run each, then up to KILN_TRIAL_MAX_RUNS timed runs each, about a
 * second in all; one each where a run takes over a quarter of a second
 * (large batches), so a trial adds four runs to the build. t[v][r]: run
 * r's microseconds; layer_us (when not NULL; KILN_TRIAL_MAX_RUNS x 2 x n_nodes)
 * each layer's too, from the context's profile. *runs: the timed runs
 * (0: a run failed). */
static kiln_status alternate_runs(kiln_engine *e, kiln_variant_fn set, void *arg,
                                  double t[2][KILN_TRIAL_MAX_RUNS], double *layer_us, int *runs) {
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
                want = us > 0 ? (int)(1e6 / (2 * us)) : KILN_TRIAL_MAX_RUNS;
                want = us > 2.5e5 ? 1 : want < 3 ? 3 : want > KILN_TRIAL_MAX_RUNS ? KILN_TRIAL_MAX_RUNS : want;
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

/* Bytes of output i to check (0: not checked: unknown size). */
static size_t check_bytes(const kiln_tinfo *outs, const tune_bufs *tb, int i) {
    size_t nb = kiln__value_nbytes(&outs[i]);
    return nb && tb->out[i] && kiln_dtype_size(outs[i].dtype) ? nb : 0;
}

/* The elements of an output of ne (> 0) that the check compares: *cnt of
 * them, every *stride-th from the first (in the order of its stored bytes):
 * all of an output of up to KILN_TUNE_SAMPLES, else that many evenly spaced. */
static void sample_plan(size_t ne, size_t *cnt, size_t *stride) {
    *cnt = ne <= KILN_TUNE_SAMPLES ? ne : KILN_TUNE_SAMPLES;
    *stride = ne / *cnt;
}

/* Gathers the samples of the outputs tactic k just wrote (tac_setup's run)
 * to the host (sample_plan's elements: one strided copy); host: room for
 * KILN_TUNE_SAMPLES elements of 8 bytes. */
static kiln_status sample_outputs(const kiln_backend_i *be, void *state, const kiln_node *n, tune_bufs *tb,
                                  const kiln_tinfo *outs, void *host, kiln_tune_sample *s) {
    for (int i = 0; i < n->n_out; i++) {
        size_t nb = check_bytes(outs, tb, i), es = kiln_dtype_size(outs[i].dtype);
        if (!nb) continue;
        size_t ne = nb / es, cnt, stride;
        sample_plan(ne, &cnt, &stride);
        kiln_status st = cnt == ne ? be->to_host(state, host, tb->out[i], nb)
                                   : be->to_host_strided(state, host, tb->out[i], es, stride * es, cnt);
        if (st != KILN_OK) { /* not compared */
            kiln__clear_error();
            continue;
        }
        KILN_TRY(kiln__tune_sample(outs[i].dtype, host, (int64_t)cnt, &s[i]));
    }
    return KILN_OK;
}

/* Fills the outputs with bytes that read as NaN before tactic k's checked
 * run (a kernel that leaves part of its output unwritten must not agree by
 * showing the previous tactic's values), and the state's scratch. */
static kiln_status poison_outputs(const kiln_backend_i *be, void *state, const kiln_node *n, tune_bufs *tb,
                                  const kiln_tinfo *outs) {
    be->poison_scratch(state);
    for (int i = 0; i < n->n_out; i++) {
        size_t nb = check_bytes(outs, tb, i);
        if (nb) KILN_TRY(be->poison(state, tb->out[i], nb));
    }
    return KILN_OK;
}

/* ---- judging a device layer's tactics (tune_check.h) ------------------------ */

/* Bounds on the host reference of one layer (host_reference): about 3.4e10
 * multiply-adds, a few seconds of kiln's reference convolution (im2col +
 * sgemm) on a GPU host's cores (ResNet-50's largest layers at batch 256),
 * and 2 GiB of host tensors. Beyond them the tactics vote. */
#define REF_MAX_MACS 3.4e10
#define REF_MAX_BYTES 2147483648.0

/* The host reference's estimated multiply-adds: each output element reads
 * numel(in[1]) / in[1].dims[0] products (exact for FusedConv's weights
 * [M, C/group, k...] and for FusedMatMul's [N, K]; N for its [K, N]); and
 * the bytes of its host tensors (float32 copies of the inputs and outputs
 * and their layout conversions: 8 bytes an element). */
static void ref_cost(const kiln_node *n, const kiln_tinfo *const *in, const kiln_tinfo *outs, double *macs,
                     double *bytes) {
    double per = 1, elems = 0;
    if (n->n_in > 1 && in[1] && in[1]->rank >= 1 && in[1]->dims[0] > 0)
        per = (double)kiln__numel(in[1]->rank, in[1]->dims) / (double)in[1]->dims[0];
    *macs = 0;
    for (int i = 0; i < n->n_out; i++) {
        double ne = (double)kiln__numel(outs[i].rank, outs[i].dims);
        *macs += ne * per;
        elems += ne;
    }
    for (int i = 0; i < n->n_in; i++)
        if (in[i]) elems += (double)kiln__numel(in[i]->rank, in[i]->dims);
    *bytes = elems * 8;
}

/* Input `in` of the host reference: the bytes bufs_make gave the device
 * (host), as float32 where they are float16/bfloat16 (exact), in dense
 * row-major order where they arrive in `layout`; *t its info, data in
 * *buf (the caller's to kiln__aligned_free). */
static kiln_status ref_input(const kiln_tinfo *in, const void *host, int layout, kiln_tinfo *t, void **buf) {
    *t = *in;
    *buf = NULL;
    bool half = in->dtype == KILN_DTYPE_FLOAT16 || in->dtype == KILN_DTYPE_BFLOAT16;
    if (half) t->dtype = KILN_DTYPE_FLOAT32;
    int64_t ne = kiln__numel(t->rank, t->dims);
    size_t nb = kiln__value_nbytes(t);
    void *a = kiln__aligned_alloc(nb), *b = NULL;
    if (!a) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (tuning: host reference)");
    if (half)
        for (int64_t k = 0; k < ne; k++) ((float *)a)[k] = (float)kiln__load_f64(in->dtype, host, k);
    else if (nb)
        memcpy(a, host, nb);
    if (layout != KILN_VLAYOUT_PLAIN) {
        kiln_tensor tt = {.dtype = t->dtype, .rank = t->rank, .data = NULL};
        memcpy(tt.dims, t->dims, sizeof tt.dims);
        kiln_status st = (b = kiln__aligned_alloc(nb)) ? kiln__vlayout_to_logical(layout, &tt, a, b)
                                                        : KILN_FAIL(KILN_ERR_OUT_OF_MEMORY,
                                                                    "out of memory (tuning: host reference)");
        kiln__aligned_free(a);
        a = b;
        if (st != KILN_OK) {
            kiln__aligned_free(a);
            return st;
        }
    }
    t->data = a;
    *buf = a;
    return KILN_OK;
}

/* Output i of the host reference (y, dense row-major) sampled as
 * sample_outputs samples the device's (the same elements of its bytes in
 * `layout`, rounded to the device's type dt) into *ref. */
static kiln_status ref_sample(const kiln_tensor *y, int layout, kiln_dtype dt, size_t ne, kiln_tune_sample *ref) {
    const void *stored = y->data;
    void *conv = NULL, *buf = NULL;
    kiln_status st = KILN_OK;
    if (layout != KILN_VLAYOUT_PLAIN) {
        kiln_tinfo ti = {.dtype = y->dtype, .rank = y->rank};
        memcpy(ti.dims, y->dims, sizeof ti.dims);
        conv = kiln__aligned_alloc(kiln__value_nbytes(&ti));
        if (!conv) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (tuning: host reference)");
        st = kiln__vlayout_from_logical(layout, y, y->data, conv);
        stored = conv;
    }
    size_t cnt, stride;
    sample_plan(ne, &cnt, &stride);
    if (st == KILN_OK && !(buf = kiln__aligned_alloc(cnt * kiln_dtype_size(dt))))
        st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (tuning: host reference)");
    for (size_t j = 0; st == KILN_OK && j < cnt; j++)
        kiln__store_f64(dt, buf, (int64_t)j, kiln__load_f64(y->dtype, stored, (int64_t)(j * stride)));
    if (st == KILN_OK) st = kiln__tune_sample(dt, buf, (int64_t)cnt, ref);
    kiln__aligned_free(buf);
    kiln__aligned_free(conv);
    return st;
}

/* The reference run of host_reference, on the call begun for L->n: false
 * with the reason in why where the host cannot compute it. */
static kiln_status ref_run(const kiln_tune_layer *L, const tune_bufs *tb, kiln_call *c, const void *attrs,
                           const kiln_io_layout *io, void **bufs, kiln_tune_sample *ref, bool *ok, char *why,
                           size_t cap) {
    const kiln_node *n = L->n;
    int r_layout = io->r_nhwc ? KILN_VLAYOUT_NHWC : io->y;
    for (int i = 0; i < n->n_in; i++) {
        if (!L->in[i]) continue;
        if (!tb->host[i]) {
            snprintf(why, cap, "input %d is not on the host", i);
            return KILN_OK;
        }
        int layout = i == 0 ? io->x : io->r_in > 0 && i == io->r_in ? r_layout : KILN_VLAYOUT_PLAIN;
        kiln_tinfo t;
        KILN_TRY(ref_input(L->in[i], tb->host[i], layout, &t, &bufs[i]));
        kiln__call_input(c, i, &t, bufs[i]);
    }
    c->ia.attrs = c->ka.attrs = attrs;
    if (!*L->pool) KILN_TRY(kiln__pool_create(L->threads, L->pool));
    if (kiln__call_infer(c, true, NULL, true) != KILN_OK || kiln__call_run_host(c, *L->pool, SIZE_MAX) != KILN_OK) {
        snprintf(why, cap, "its host kernel fails: %s", kiln_last_error());
        kiln__clear_error();
        return KILN_OK;
    }
    kiln_status st = KILN_OK;
    for (int i = 0; i < n->n_out && st == KILN_OK && !why[0]; i++) {
        const kiln_tinfo *o = &L->outs[i], *h = &c->out[i];
        bool half = o->dtype == KILN_DTYPE_FLOAT16 || o->dtype == KILN_DTYPE_BFLOAT16;
        bool same = h->rank == o->rank && h->dtype == (half ? KILN_DTYPE_FLOAT32 : o->dtype);
        for (int d = 0; same && d < h->rank; d++) same = h->dims[d] == o->dims[d];
        size_t nb = check_bytes(L->outs, tb, i);
        if (!same) {
            char s1[96], s2[96];
            snprintf(why, cap, "its host kernel makes output %d %s %s, the device %s %s", i,
                     kiln_dtype_name(h->dtype), kiln__shape_str(h->rank, h->dims, s1, sizeof s1),
                     kiln_dtype_name(o->dtype), kiln__shape_str(o->rank, o->dims, s2, sizeof s2));
        } else if (nb) {
            st = ref_sample(&c->out_t[i], i == 0 ? io->y : KILN_VLAYOUT_PLAIN, o->dtype,
                            nb / kiln_dtype_size(o->dtype), &ref[i]);
        }
    }
    for (int i = 0; i < n->n_out; i++) {
        kiln__aligned_free(c->out_t[i].data);
        c->out_t[i].data = NULL;
    }
    *ok = st == KILN_OK && !why[0];
    return st;
}

/* Computes node L->n's outputs on the host with its op's reference kernel
 * (op->cpu, through kiln__call_run_host) on the very inputs bufs_make gave
 * the device (tb->host), in float32 where the layer computes in
 * float16/bfloat16, and samples them as the device's are sampled, into
 * ref[0..n_out). The node runs with its attrs but for the tactic (0: the
 * reference has none) and its layout (the reference reads and writes
 * dense row-major tensors: the inputs that arrive in another layout are
 * converted to it and the output back before sampling), so it computes
 * what every tactic must. *ok false, with the reason in why, where the
 * host cannot: an op without a host kernel, a layout of bf16 values, a
 * layer over the bounds (REF_MAX_*), or the host kernel failing. */
static kiln_status host_reference(const kiln_tune_layer *L, const tune_bufs *tb, kiln_tune_sample *ref, bool *ok,
                                  char *why, size_t cap) {
    const kiln_node *n = L->n;
    *ok = false;
    why[0] = 0;
    double macs, bytes;
    ref_cost(n, L->in, L->outs, &macs, &bytes);
    unsigned char attrs[4096];
    kiln_io_layout io = {0};
    if (!n->op->cpu) {
        snprintf(why, cap, "%s has no host kernel", n->op->name);
        return KILN_OK;
    }
    if (macs > L->ref_max_macs || bytes > L->ref_max_bytes) {
        snprintf(why, cap, "the layer is over the host reference's bounds: about %.3g multiply-adds and %.0f MB "
                 "(at most %.3g and %.0f MB)", macs, bytes / 1e6, L->ref_max_macs, L->ref_max_bytes / 1e6);
        return KILN_OK;
    }
    if (n->op->attr_size > sizeof attrs || n->n_in > 64) {
        snprintf(why, cap, "its attributes or inputs are too many for the tuner");
        return KILN_OK;
    }
    memcpy(attrs, n->attrs, n->op->attr_size);
    if (n->op->flags & KILN_OP_FLAG_TACTICS) *(kiln_tactic *)(void *)attrs = (kiln_tactic){0, 0};
    if (n->op->layout_field && n->op->layout_io) {
        int32_t *lf = n->op->layout_field(attrs);
        n->op->layout_io(*lf, &io);
        *lf = 0;
    }
    if (io.x == KILN_VLAYOUT_NHWC_BF16 || io.y == KILN_VLAYOUT_NHWC_BF16) {
        snprintf(why, cap, "it keeps bf16 values in float32 tensors");
        return KILN_OK;
    }
    static const kiln_graph no_subgraphs; /* (a layer with tactics is no control flow) */
    kiln_call c;
    void *bufs[64] = {0};
    KILN_TRY(kiln__call_begin(&c, &no_subgraphs, n));
    kiln_status st = ref_run(L, tb, &c, attrs, &io, bufs, ref, ok, why, cap);
    kiln__call_end(&c);
    for (int i = 0; i < n->n_in; i++) kiln__aligned_free(bufs[i]);
    return st;
}

/* The engine family of each of the nc tactics: the index of the first
 * whose full name (kiln_kernel.tactic_describe) has the same part before
 * its first '.' (configurations of one engine: cudnn-eng4.0266c), else its
 * own. */
static void tactic_families(char (*names)[96], int nc, int *family) {
    for (int k = 0; k < nc; k++) {
        family[k] = k;
        const char *dot = strchr(names[k], '.');
        if (!dot) continue;
        size_t len = (size_t)(dot - names[k]);
        for (int j = 0; j < k && family[k] == k; j++)
            if (!strncmp(names[j], names[k], len) && names[j][len] == '.') family[k] = family[j];
    }
}

/* Judges the tactics of a device layer by their outputs' samples
 * (kiln__tune_decide): when they disagree, against the host reference
 * where it can be computed, else by the vote of their engine families.
 * Those not kept leave the timing (runs[k].ok = false), with a note on
 * stderr; fails, naming the layer and its tactics, when none can be shown
 * right. */
static kiln_status judge_tactics(const kiln_tune_layer *L, const tune_bufs *tb, tac_run *runs, const int32_t *cand,
                                 int nc, const kiln_tune_sample *samples, kiln_tune_stats *S) {
    const kiln_node *n = L->n;
    bool ran[TUNE_MAX_TACTICS], keep[TUNE_MAX_TACTICS];
    int family[TUNE_MAX_TACTICS];
    char names[TUNE_MAX_TACTICS][96];
    kiln_dtype dt[16];
    for (int i = 0; i < n->n_out; i++) dt[i] = L->outs[i].dtype;
    for (int k = 0; k < nc; k++) ran[k] = runs[k].ok;
    if (kiln__tune_all_agree(dt, samples, nc, n->n_out, ran)) return KILN_OK;
    for (int k = 0; k < nc; k++) kiln__backend_tactic_describe(L->be, n, cand[k], names[k], sizeof names[k]);
    tactic_families(names, nc, family);
    kiln_tune_sample ref[16];
    memset(ref, 0, sizeof ref);
    bool have_ref;
    char why[512];
    char pn[256]; /* the node's name for messages */
    kiln_status st = host_reference(L, tb, ref, &have_ref, why, sizeof why);
    S->ref_runs += have_ref;
    kiln_tune_rule rule = kiln__tune_decide(dt, samples, nc, n->n_out, ran, have_ref ? ref : NULL, family, keep);
    if (st == KILN_OK && L->notes && (rule == KILN_TUNE_REFERENCE || rule == KILN_TUNE_MAJORITY)) {
        if (rule == KILN_TUNE_REFERENCE)
            fprintf(stderr, "kiln: tuning: node '%s': its tactics disagree; kiln's host reference keeps",
                    kiln_printable(n->name, pn, sizeof pn));
        else
            fprintf(stderr,
                    "kiln: tuning: node '%s': its tactics disagree and no host reference checks them (%s); a "
                    "majority of their engine families keeps",
                    kiln_printable(n->name, pn, sizeof pn), why);
        for (int k = 0; k < nc; k++)
            if (ran[k] && keep[k]) fprintf(stderr, " %s", names[k]);
        fprintf(stderr, "\n");
    }
    kiln_sbuf msg = {0};
    for (int k = 0; st == KILN_OK && k < nc; k++) {
        if (!ran[k]) continue;
        double err = 0, scale = 0, bad = 0, top = 0;
        for (int i = 0; i < n->n_out; i++) {
            const kiln_tune_sample *a = &samples[k * n->n_out + i];
            double e = have_ref ? kiln__tune_error(&ref[i], a) : 0;
            if (e > err) err = e;
            if (have_ref && ref[i].max_abs > scale) scale = ref[i].max_abs;
            if (a->max_abs > top) top = a->max_abs;
            bad += (double)a->nonfinite;
        }
        if (have_ref)
            kiln__sbuf_printf(&msg, "%s %s (max |y - ref| %.4g, %.0f NaN/Inf)", msg.len ? "," : "", names[k], err,
                              bad);
        else
            kiln__sbuf_printf(&msg, "%s %s (max |y| %.4g, %.0f NaN/Inf)", msg.len ? "," : "", names[k], top, bad);
        if (!L->notes)
            ;
        else if (rule == KILN_TUNE_REFERENCE && !keep[k])
            fprintf(stderr,
                    "kiln: tuning: node '%s': tactic %s does not compute what the host reference does (max "
                    "|y - ref| %.4g where max |ref| is %.4g, %.0f NaN/Inf): it is not used\n",
                    kiln_printable(n->name, pn, sizeof pn), names[k], err, scale, bad);
        else if (rule == KILN_TUNE_MAJORITY && !keep[k])
            fprintf(stderr,
                    "kiln: tuning: node '%s': tactic %s disagrees with that majority (max |y| %.4g, %.0f "
                    "NaN/Inf): it is not used\n",
                    kiln_printable(n->name, pn, sizeof pn), names[k], top, bad);
        if (!keep[k]) runs[k].ok = false;
    }
    if (st == KILN_OK && msg.oom) st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (tuning)");
    if (st == KILN_OK && rule == KILN_TUNE_NONE_RIGHT)
        st = KILN_FAIL(KILN_ERR_DEVICE,
                       "node '%s' (%s): none of its tactics computes what kiln's host reference does (max |ref| "
                       "%.4g):%s; the device computes this layer wrongly at these shapes",
                       n->name, n->op->name, ref[0].max_abs, msg.data);
    else if (st == KILN_OK && rule == KILN_TUNE_UNDECIDED)
        st = KILN_FAIL(KILN_ERR_DEVICE,
                       "node '%s' (%s): its tactics disagree:%s; no host reference checks them (%s), and no "
                       "majority of their engine families agrees: which one is right is unknown, and a wrong "
                       "layer is worse than none",
                       n->name, n->op->name, msg.data, why);
    kiln__sbuf_free(&msg);
    for (int i = 0; i < n->n_out; i++) kiln__tune_sample_free(&ref[i]);
    return st;
}

/* ---- the NaN probe (tune_check.h: kiln__tune_nan_decide) ------------------ */

/* Whether the NaN probe applies to layer L: a device layer (checked) whose
 * data input (input 0) is a float activation, not a constant, with at least
 * two tactics still candidates; KILN_TUNE_NO_NAN_PROBE=1 turns it off. */
static bool nan_probe_applies(const kiln_tune_layer *L, const tac_run *runs, int nc) {
    const kiln_tinfo *x = L->n->n_in > 0 ? L->in[0] : NULL;
    if (!x || x->data || kiln__env_flag("KILN_TUNE_NO_NAN_PROBE")) return false;
    if (x->dtype != KILN_DTYPE_FLOAT32 && x->dtype != KILN_DTYPE_FLOAT16 && x->dtype != KILN_DTYPE_BFLOAT16)
        return false;
    if (!kiln__value_nbytes(x)) return false;
    int ok = 0;
    for (int k = 0; k < nc; k++) ok += runs[k].ok;
    return ok >= 2;
}

/* The probe's runs: input 0's nb bytes on the device replaced by xin, every
 * candidate still in once more, its outputs sampled into s[k * n_out + ..]
 * (ran[k]: it ran), then input 0 put back as orig (for the timing). */
static kiln_status probe_runs(const kiln_tune_layer *L, tune_bufs *tb, tac_run *runs, int nc, void *host,
                              const void *xin, const void *orig, size_t nb, kiln_tune_sample *s, bool *ran) {
    const kiln_backend_i *be = L->be;
    for (int k = 0; k < nc; k++) ran[k] = false;
    KILN_TRY(be->to_device(L->state, tb->in[0], xin, nb));
    kiln_status st = KILN_OK;
    for (int k = 0; st == KILN_OK && k < nc; k++) {
        if (!runs[k].ok) continue;
        st = poison_outputs(be, L->state, L->n, tb, L->outs);
        if (st != KILN_OK) break;
        ran[k] = be->run(L->state, &runs[k].ka) == KILN_OK && be->sync(L->state) == KILN_OK;
        if (!ran[k]) { /* (not judged by the probe: the checked run passed) */
            kiln__clear_error();
            continue;
        }
        st = sample_outputs(be, L->state, L->n, tb, L->outs, host, &s[k * L->n->n_out]);
    }
    kiln_status r = be->to_device(L->state, tb->in[0], orig, nb);
    return st != KILN_OK ? st : r;
}

/* kiln's host reference of layer L on input 0 = xin (host bytes), into ref
 * (*have: it could be computed; counted in S). */
static kiln_status probe_reference(const kiln_tune_layer *L, tune_bufs *tb, void *xin, kiln_tune_sample *ref,
                                   bool *have, kiln_tune_stats *S) {
    char why[512];
    void *h0 = tb->host[0];
    tb->host[0] = xin;
    kiln_status st = host_reference(L, tb, ref, have, why, sizeof why);
    tb->host[0] = h0;
    S->ref_runs += *have;
    return st;
}

/* The candidates that ran and a probe did not keep leave the timing
 * (runs[k].ok = false), each with the note "tactic <name> <what>: it is
 * not used". */
static void probe_drop(const kiln_tune_layer *L, tac_run *runs, const int32_t *cand, int nc, const bool *ran,
                       const bool *keep, const char *what) {
    char pn[256], nm[96];
    for (int k = 0; k < nc; k++) {
        if (!ran[k] || keep[k]) continue;
        runs[k].ok = false;
        if (!L->notes) continue;
        kiln__backend_tactic_describe(L->be, L->n, cand[k], nm, sizeof nm);
        fprintf(stderr, "kiln: tuning: node '%s': tactic %s %s: it is not used\n",
                kiln_printable(L->n->name, pn, sizeof pn), nm, what);
    }
}

/* The probe's second input (issue 20: a 2x2 stride-2 fp16 NHWC conv of 5
 * channels through cuDNN's legacy API gave numbers where an input of
 * -inf makes the CPU's ReLU give 0; an all-NaN input cannot show that):
 * input 0 as the check had it (orig, random), with 3 + ne / 4096 of its
 * elements, spread over it, NaN, +inf and -inf in turn, so that most
 * outputs stay finite and each kind of value meets a tactic's arithmetic.
 * Where the candidates still in disagree, kiln's host reference on the
 * same input (within its bounds; without one nothing is decided) drops
 * those with a finite value that is wrong (kiln__tune_specials_decide).
 * KILN_TUNE_NO_INF_PROBE=1 turns this input off alone (an A/B of what it
 * drops), KILN_TUNE_NO_NAN_PROBE=1 both. */
static kiln_status specials_probe(const kiln_tune_layer *L, tune_bufs *tb, tac_run *runs, const int32_t *cand,
                                  int nc, void *host, const void *orig, kiln_tune_stats *S) {
    if (!nan_probe_applies(L, runs, nc) || !tb->host[0] || kiln__env_flag("KILN_TUNE_NO_INF_PROBE")) return KILN_OK;
    const kiln_node *n = L->n;
    const kiln_tinfo *x = L->in[0];
    size_t nb = kiln__value_nbytes(x);
    int64_t ne = (int64_t)(nb / kiln_dtype_size(x->dtype)), cnt = 3 + ne / 4096;
    if (cnt > ne) cnt = ne;
    void *xsp = kiln__aligned_alloc(nb);
    kiln_tune_sample *s = kiln__calloc((size_t)nc * (size_t)n->n_out, sizeof *s);
    bool ran[TUNE_MAX_TACTICS], keep[TUNE_MAX_TACTICS];
    kiln_status st = xsp && s ? KILN_OK : KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (tuning)");
    if (st == KILN_OK) {
        static const double vals[3] = {NAN, INFINITY, -INFINITY};
        memcpy(xsp, orig, nb);
        for (int64_t k = 0; k < cnt; k++) /* (evenly spread, off the grid of a power-of-two layout) */
            kiln__store_f64(x->dtype, xsp, (int64_t)(((double)k + 0.37) * (double)ne / (double)cnt) % ne,
                            vals[k % 3]);
        st = probe_runs(L, tb, runs, nc, host, xsp, orig, nb, s, ran);
    }
    kiln_dtype dt[16];
    for (int i = 0; i < n->n_out; i++) dt[i] = L->outs[i].dtype;
    bool have_ref = false;
    kiln_tune_sample ref[16];
    memset(ref, 0, sizeof ref);
    int dropped = 0;
    if (st == KILN_OK && !kiln__tune_all_agree(dt, s, nc, n->n_out, ran)) {
        st = probe_reference(L, tb, xsp, ref, &have_ref, S);
        if (st == KILN_OK && have_ref) dropped = kiln__tune_specials_decide(dt, s, nc, n->n_out, ran, ref, keep);
    }
    char pn[256];
    if (st == KILN_OK && dropped < 0 && L->notes)
        fprintf(stderr, "kiln: tuning: node '%s': with NaN and infinities in its input, every tactic gives numbers "
                        "that kiln's host reference does not: they are all kept\n",
                kiln_printable(n->name, pn, sizeof pn));
    if (st == KILN_OK && dropped > 0)
        probe_drop(L, runs, cand, nc, ran, keep,
                   "gives wrong numbers where its input holds NaN or infinities (kiln's host reference differs)");
    for (int i = 0; i < n->n_out; i++) kiln__tune_sample_free(&ref[i]);
    for (int k = 0; s && k < nc * n->n_out; k++) kiln__tune_sample_free(&s[k]);
    kiln__free(s);
    kiln__aligned_free(xsp);
    return st;
}

/* The NaN probe (issue 20: in random CUDA graphs 53 and 101 an fp16 conv +
 * ReLU run by a cuDNN config with the ReLU inside turned a NaN input into 0
 * where the CPU, ONNX and PyTorch give NaN; random inputs in [-1, 1) cannot
 * show that): the candidates still in (runs[k].ok) run once more
 * with input 0 all NaN. Where they disagree on where NaN is, kiln's host
 * reference on the same inputs (where it can be computed; else the tactics
 * that give NaN) says where NaN is expected, and a tactic that gives a
 * finite value there leaves the timing (runs[k].ok = false), with a note.
 * Input 0's bytes are put back after. One run per candidate, no host
 * reference while they agree: the cost is a fraction of the timing's. */
static kiln_status nan_probe(const kiln_tune_layer *L, tune_bufs *tb, tac_run *runs, const int32_t *cand, int nc,
                             void *host, kiln_tune_stats *S) {
    if (!nan_probe_applies(L, runs, nc)) return KILN_OK;
    const kiln_backend_i *be = L->be;
    const kiln_node *n = L->n;
    const kiln_tinfo *x = L->in[0];
    size_t nb = kiln__value_nbytes(x);
    int64_t ne = (int64_t)(nb / kiln_dtype_size(x->dtype));
    void *orig = kiln__aligned_alloc(nb), *xnan = kiln__aligned_alloc(nb);
    kiln_tune_sample *s = kiln__calloc((size_t)nc * (size_t)n->n_out, sizeof *s);
    bool ran[TUNE_MAX_TACTICS], keep[TUNE_MAX_TACTICS];
    kiln_status st = orig && xnan && s ? KILN_OK : KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (tuning)");
    for (int64_t k = 0; st == KILN_OK && k < ne; k++) kiln__store_f64(x->dtype, xnan, k, NAN);
    if (st == KILN_OK) st = be->to_host(L->state, orig, tb->in[0], nb);
    if (st == KILN_OK) st = probe_runs(L, tb, runs, nc, host, xnan, orig, nb, s, ran);
    int dropped = st == KILN_OK ? kiln__tune_nan_decide(s, nc, n->n_out, ran, NULL, keep) : 0;
    bool have_ref = false;
    kiln_tune_sample ref[16];
    memset(ref, 0, sizeof ref);
    if (st == KILN_OK && dropped != 0 && tb->host[0]) { /* they disagree: the host reference on the NaN input */
        st = probe_reference(L, tb, xnan, ref, &have_ref, S);
        if (st == KILN_OK && have_ref) dropped = kiln__tune_nan_decide(s, nc, n->n_out, ran, ref, keep);
    }
    char pn[256], nm[96];
    if (st == KILN_OK && dropped < 0 && L->notes) {
        fprintf(stderr, "kiln: tuning: node '%s': NaN inputs give finite outputs where %s gives NaN, in every "
                        "tactic (", kiln_printable(n->name, pn, sizeof pn),
                have_ref ? "kiln's host reference" : "a tactic");
        for (int k = 0, c = 0; k < nc; k++)
            if (ran[k]) {
                kiln__backend_tactic_describe(be, n, cand[k], nm, sizeof nm);
                fprintf(stderr, "%s%s", c++ ? " " : "", nm);
            }
        fprintf(stderr, "): they are all kept\n");
    }
    if (st == KILN_OK && dropped > 0)
        probe_drop(L, runs, cand, nc, ran, keep,
                   have_ref ? "gives finite values where its input is NaN and kiln's host reference gives NaN (a "
                              "NaN-dropping epilogue)"
                            : "gives finite values where its input is NaN and another tactic gives NaN (a "
                              "NaN-dropping epilogue)");
    if (st == KILN_OK) st = specials_probe(L, tb, runs, cand, nc, host, orig, S);
    for (int i = 0; i < n->n_out; i++) kiln__tune_sample_free(&ref[i]);
    for (int k = 0; s && k < nc * n->n_out; k++) kiln__tune_sample_free(&s[k]);
    kiln__free(s);
    kiln__aligned_free(orig);
    kiln__aligned_free(xnan);
    return st;
}

/* One line of where a layer's (or a build's) tuning time went, into sb:
 * "12 candidates, 812.4 ms: list 3.1, buffers 0.4, set-up 790.2 (precompiled
 * 9 in 95.0, runtime-compiled 3 in 690.1 ...), check 2.0, judge 0.0 (0
 * host references), NaN probe 0.3, timing 16.7" (milliseconds). */
static void stats_describe(const kiln_tune_stats *S, kiln_sbuf *sb) {
    double setup = 0;
    for (int k = 0; k < KILN_TUNE_KINDS; k++) setup += S->setup_us[k];
    kiln__sbuf_printf(sb, "%d candidates, %.1f ms: list %.1f, buffers %.1f, set-up %.1f", S->candidates,
                      (S->total_us + S->list_us) / 1000.0, S->list_us / 1000.0, S->bufs_us / 1000.0, setup / 1000.0);
    bool any = false;
    for (int k = 0; k < KILN_TUNE_KINDS; k++) {
        if (!S->setup_n[k]) continue;
        kiln__sbuf_printf(sb, "%s%s %d in %.1f", any ? ", " : " (", kiln__backend_tactic_kind_name(k), S->setup_n[k],
                          S->setup_us[k] / 1000.0);
        if (S->failed_n[k]) kiln__sbuf_printf(sb, " (%d failed)", S->failed_n[k]);
        any = true;
    }
    kiln__sbuf_printf(sb, "%s, check %.1f, judge %.1f (%d host reference%s), NaN probe %.1f, timing %.1f",
                      any ? ")" : "", S->check_us / 1000.0, S->judge_us / 1000.0, S->ref_runs,
                      S->ref_runs == 1 ? "" : "s", S->probe_us / 1000.0, S->time_us / 1000.0);
}

kiln_status kiln__tune_layer(const kiln_tune_layer *L, int32_t *best_id, double *best_time) {
    double t_layer = kiln__now_us(), t0;
    kiln_tune_stats scratch_stats, *S = L->stats ? L->stats : &scratch_stats;
    double list_us = L->stats ? L->stats->list_us : 0;
    memset(S, 0, sizeof *S);
    S->list_us = list_us;
    const kiln_backend_i *be = L->be;
    void *state = L->state;
    kiln_node *n = L->n;
    const kiln_tinfo *const *in = L->in;
    const kiln_tinfo *outs = L->outs;
    const int32_t *ids = L->ids;
    int n_ids = L->n_ids < TUNE_MAX_TACTICS ? L->n_ids : TUNE_MAX_TACTICS;
    bool cpu = be->device == KILN_DEVICE_CPU;
    kiln_pool *pool = *L->pool;
    /* the kernel may time a tactic as it runs inside the engine
     * (kiln_kernel.tune_prepare): the attrs it changes come back
     * after the set-up (which copies them) */
    const kiln_kernel *kn = kiln__backend_kernel(be, n);
    unsigned char saved[4096];
    bool can_prep = kn && kn->tune_prepare && n->op->attr_size <= sizeof saved;
    /* a device layer's tactics must agree on its output (tune_check.h);
     * (CPU tactics that change the layout they run in are not compared) */
    bool check = be->device != KILN_DEVICE_CPU && !can_prep && n->n_out <= 16 && be->poison &&
                 be->poison_scratch && be->to_host_strided && !kiln__env_flag("KILN_TUNE_NO_CHECK");
    /* the inputs stay on the host for a reference where one could be computed */
    double macs, bytes;
    ref_cost(n, in, outs, &macs, &bytes);
    bool keep_host = check && n->op->cpu && macs <= L->ref_max_macs && bytes <= L->ref_max_bytes;
    tune_bufs tb;
    memset(&tb, 0, sizeof tb);
    t0 = kiln__now_us();
    kiln_status st = bufs_make(be, state, n, in, outs, keep_host, &tb);
    S->bufs_us = kiln__now_us() - t0;
    int32_t best = 0, cand[TUNE_MAX_TACTICS];
    double best_us = -1, us[TUNE_MAX_TACTICS], setup_us[TUNE_MAX_TACTICS];
    int nc = 0;
    tac_run *runs = st == KILN_OK ? kiln__calloc((size_t)n_ids, sizeof *runs) : NULL;
    if (st == KILN_OK && !runs) st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (tuning)");
    kiln_tune_sample *samples = NULL;
    void *host = NULL;
    if (check && st == KILN_OK) {
        samples = kiln__calloc((size_t)n_ids * (size_t)n->n_out, sizeof *samples);
        host = kiln__aligned_alloc(KILN_TUNE_SAMPLES * 8);
        if (!samples || !host) st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (tuning)");
    }
    kiln_kernel_args probe = {.op = n->op, .op_id = n->op_id, .attrs = n->attrs, .node_name = n->name,
                              .n_in = n->n_in, .n_out = n->n_out, .in = tb.pin, .out = tb.pout,
                              .pool = cpu ? pool : NULL};
    for (int k = 0; st == KILN_OK && k < n_ids; k++) {
        int prep = 0;
        if (can_prep) {
            memcpy(saved, n->attrs, n->op->attr_size);
            prep = kn->tune_prepare(n, ids[k], ids, n_ids, &probe);
            if (prep < 0) {
                memcpy(n->attrs, saved, n->op->attr_size);
                continue;
            }
        }
        /* set up with the layout it runs in (its attrs are copied) */
        t0 = kiln__now_us();
        if (check && st == KILN_OK) st = poison_outputs(be, state, n, &tb, outs);
        double t_setup = kiln__now_us();
        S->check_us += t_setup - t0;
        tac_setup(be, state, pool, n, in, ids[k], &tb, &runs[nc]);
        setup_us[nc] = kiln__now_us() - t_setup;
        int kind = kiln__backend_tactic_kind(be, state, n, ids[k]);
        if (kind < 0 || kind >= KILN_TUNE_KINDS) kind = KILN_TACTIC_KIND_OTHER;
        S->setup_us[kind] += setup_us[nc];
        S->setup_n[kind]++;
        S->failed_n[kind] += !runs[nc].ok;
        if (prep > 0) memcpy(n->attrs, saved, n->op->attr_size);
        t0 = kiln__now_us();
        if (check && runs[nc].ok && st == KILN_OK)
            st = sample_outputs(be, state, n, &tb, outs, host, &samples[nc * n->n_out]);
        S->check_us += kiln__now_us() - t0;
        cand[nc++] = ids[k];
    }
    S->candidates = nc;
    t0 = kiln__now_us();
    if (check && st == KILN_OK) st = judge_tactics(L, &tb, runs, cand, nc, samples, S);
    S->judge_us = kiln__now_us() - t0;
    t0 = kiln__now_us();
    if (check && st == KILN_OK) st = nan_probe(L, &tb, runs, cand, nc, host, S);
    S->probe_us = kiln__now_us() - t0;
    t0 = kiln__now_us();
    if (st == KILN_OK) time_turns(be, state, runs, nc, us);
    S->time_us = kiln__now_us() - t0;
    S->total_us = kiln__now_us() - t_layer;
    if (st == KILN_OK && L->verbose) {
        /* KILN_TUNE_VERBOSE=1: every candidate's set-up and median time,
         * then where the layer's time went */
        char pn[256];
        fprintf(stderr, "kiln: tune %s:", kiln_printable(n->name, pn, sizeof pn));
        for (int k = 0; k < nc; k++) {
            char nm[96];
            kiln__backend_tactic_describe(be, n, cand[k], nm, sizeof nm);
            fprintf(stderr, " %s=%.1fus(setup %.0fms%s)", nm, us[k], setup_us[k] / 1000.0,
                    runs[k].no_graph && be->device != KILN_DEVICE_CPU ? ", plain runs" : "");
        }
        fprintf(stderr, "\n");
        kiln_sbuf sb = {0};
        stats_describe(S, &sb);
        fprintf(stderr, "kiln: tune %s: %s\n", kiln_printable(n->name, pn, sizeof pn), sb.data ? sb.data : "?");
        kiln__sbuf_free(&sb);
    }
    for (int k = 0; k < nc; k++) {
        if (st == KILN_OK && us[k] >= 0 && (best_us < 0 || us[k] < best_us)) {
            best_us = us[k];
            best = cand[k];
        }
        tac_free(&runs[k]);
    }
    kiln__free(runs);
    for (int k = 0; samples && k < n_ids * n->n_out; k++) kiln__tune_sample_free(&samples[k]);
    kiln__free(samples);
    kiln__aligned_free(host);
    bufs_free(be, state, n, &tb, in);
    *best_id = best_us >= 0 ? best : 0;
    *best_time = best_us;
    return st;
}

static bool has_tactics(const kiln_graph *g) {
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && (g->nodes[i].op->flags & KILN_OP_FLAG_TACTICS)) return true;
    return false;
}

/* ---- the tuner: what kiln_layout_ctx offers a backend's layouts hook ---------- */

/* A layer tune_all times: its node, the backend side (0 CPU, 1 device), its
 * tactics and timing-cache key, or the earlier one it is identical to. */
typedef struct tune_item {
    int ni, si;
    int32_t ids[TUNE_MAX_TACTICS];
    int n_ids;
    char *key;
    int dup_of;              /* index of the identical item timed instead, -1 */
    bool timed;
    kiln_tune_stats stats;
} tune_item;

/* Whether id is one of ids[0..n). */
static bool tactic_listed(const int32_t *ids, int n, int32_t id) {
    for (int k = 0; k < n; k++)
        if (ids[k] == id) return true;
    return false;
}

typedef struct tuner {
    kiln_layout_ctx pub;
    const kiln_builder *b;
    kiln_engine *e;
    kiln_tinfo *vi;          /* value infos at the opt shapes (after tune_all) */
    tcache cache;
    kiln_pool *pool;
    void *states[2];         /* a backend's state may be NULL (CPU): made[] says */
    bool made[2];
    bool tuned, active;
    kiln_sbuf key;
    int n_timed, n_cached, n_layers;
    double t_start;
    bool verbose;            /* KILN_TUNE_VERBOSE */
    double list_us;          /* listing every layer's tactics (the cached ones' too) */
    tune_item *items;        /* the layers to time, in graph order (tune_all) */
    int n_items, cap_items;
} tuner;

/* The state of the backend of side si (0 CPU, 1 the engine's device). */
static kiln_status tuner_state(tuner *T, int si, const kiln_backend_i *be) {
    if (!T->made[si]) {
        KILN_TRY(be->state_create(T->e->opts.device_index, &T->states[si]));
        T->made[si] = true;
        /* tactics are timed as the engine's contexts will run them (TF32, fast math) */
        if (be->set_precision)
            KILN_TRY(be->set_precision(T->states[si], T->e->opts.precision, T->e->opts.math == KILN_MATH_FAST));
    }
    if (si == 0 && !T->pool) KILN_TRY(kiln__pool_create(T->e->opts.threads, &T->pool));
    return KILN_OK;
}

/* Times the tactics of every node whose op has tactics (kiln_layout_ctx.tune):
 * first lists every layer's tactics and keeps those found in the timing
 * cache, then times the others in graph order (a layer identical to one
 * before it takes its choice). Each layer to time is announced to its
 * backend as soon as it is listed (kiln__backend_tactics_ahead), so that a
 * backend may make the next layers' plans on host threads while this
 * thread times (KILN_CUDA_PLAN_THREADS). */
static kiln_status tune_all(kiln_layout_ctx *c) {
    tuner *T = c->priv;
    const kiln_builder *b = T->b;
    kiln_engine *e = T->e;
    kiln_graph *g = e->graph;
    if (T->tuned) return KILN_OK;
    T->tuned = true;
    if (!b->tuning || !has_tactics(g)) return KILN_OK;
    T->active = true;
    T->vi = kiln__calloc((size_t)g->n_values + 1, sizeof *T->vi);
    if (!T->vi) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (tuning)");
    kiln_tinfo *vi = T->vi;
    if (b->timing_cache) KILN_TRY(cache_read(&T->cache, b->timing_cache, b->verbosity >= 1));
    KILN_TRY(opt_shapes(e, vi));
    c->vi = vi;
    for (int ni = 0; ni < g->n_nodes; ni++) {
        kiln_node *n = &g->nodes[ni];
        const kiln_tinfo *in[64] = {0};
        kiln_tinfo outs[16];
        if (!node_shapes(g, n, vi, in, outs)) continue; /* unknown at opt: tactic 0 */
        const kiln_backend_i *be = kiln__backend_for(n->device);
        if (!be) continue;
        int si = n->device == KILN_DEVICE_CPU ? 0 : 1;
        KILN_TRY(tuner_state(T, si, be));
        c->cpu_tuned = T->made[0];
        kiln_tinfo *op_[16];
        for (int i = 0; i < n->n_out; i++) op_[i] = &outs[i];
        kiln_infer_args ia = {.op = n->op, .attrs = n->attrs, .node_name = n->name, .n_in = n->n_in,
                              .n_out = n->n_out, .in = in, .out = op_, .runtime = false};
        int32_t ids[TUNE_MAX_TACTICS];
        double t_list = kiln__now_us();
        int n_ids = kiln__backend_tactics(be, T->states[si], &ia, e->opts.math == KILN_MATH_FAST, ids,
                                          TUNE_MAX_TACTICS);
        t_list = kiln__now_us() - t_list;
        T->list_us += t_list;
        kiln_tactic *tac = n->attrs;
        T->n_layers++;
        /* one tactic: nothing to choose (a device layer's is still timed, for
         * inspect and the timing cache) */
        if (n_ids == 0 || (n_ids == 1 && be->device == KILN_DEVICE_CPU)) {
            tac->id = n_ids == 1 ? ids[0] : 0;
            continue;
        }
        make_key(e, n, in, &T->key);
        if (T->key.oom) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (tuning)");
        const cache_ent *ce = cache_find(&T->cache, T->key.data);
        if (ce && tactic_listed(ids, n_ids, ce->id)) {
            tac->id = ce->id;
            tac->us = ce->us;
            T->n_cached++;
            continue;
        }
        KILN_TRY(kiln__grow((void **)&T->items, &T->cap_items, T->n_items + 1, sizeof *T->items));
        tune_item *it = &T->items[T->n_items];
        memset(it, 0, sizeof *it);
        it->ni = ni;
        it->si = si;
        it->dup_of = -1;
        memcpy(it->ids, ids, (size_t)n_ids * sizeof *ids);
        it->n_ids = n_ids;
        it->stats.list_us = t_list;
        if (!(it->key = kiln__strdup(T->key.data))) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (tuning)");
        T->n_items++;
        /* a layer identical to one listed before takes its choice (timed once per build) */
        for (int j = 0; j < T->n_items - 1 && it->dup_of < 0; j++)
            if (T->items[j].dup_of < 0 && !strcmp(T->items[j].key, it->key)) it->dup_of = j;
        if (it->dup_of < 0) kiln__backend_tactics_ahead(be, T->states[si], &ia, ids, n_ids);
    }
    for (int k = 0; k < T->n_items; k++) {
        tune_item *it = &T->items[k];
        kiln_node *n = &g->nodes[it->ni];
        kiln_tactic *tac = n->attrs;
        if (it->dup_of >= 0) {
            const kiln_tactic *src = g->nodes[T->items[it->dup_of].ni].attrs;
            if (tactic_listed(it->ids, it->n_ids, src->id)) {
                tac->id = src->id;
                tac->us = src->us;
                T->n_cached++;
                continue;
            }
            it->dup_of = -1; /* (its list differs: timed itself) */
        }
        const kiln_tinfo *in[64] = {0};
        kiln_tinfo outs[16];
        node_shapes(g, n, vi, in, outs);
        const kiln_backend_i *be = kiln__backend_for(n->device);
        int32_t best;
        double best_us;
        kiln_tune_layer L = {.be = be, .state = T->states[it->si], .pool = &T->pool, .threads = e->opts.threads,
                             .n = n, .in = in, .outs = outs, .ids = it->ids, .n_ids = it->n_ids,
                             .verbose = T->verbose, .notes = T->b->verbosity >= 1, .ref_max_macs = REF_MAX_MACS,
                             .ref_max_bytes = REF_MAX_BYTES, .stats = &it->stats};
        KILN_TRY(kiln__tune_layer(&L, &best, &best_us));
        it->timed = true;
        tac->id = best;
        tac->us = best_us >= 0 ? (float)best_us : 0.0f;
        T->n_timed++;
        KILN_TRY(cache_put(&T->cache, it->key, tac->id, tac->us));
        if (T->b->verbosity >= 1 && kiln__now_us() - T->t_start > 2e6 && T->n_timed % 10 == 0)
            fprintf(stderr, "kiln: tuning: %d layers timed, %d from the cache (%.1f s)\n", T->n_timed, T->n_cached,
                    (kiln__now_us() - T->t_start) / 1e6);
    }
    return KILN_OK;
}

/* KILN_TUNE_VERBOSE=1, at the end of a build: where the tuning time went,
 * in all and in the 10 layers that took longest. */
static void tune_summary(const tuner *T) {
    kiln_tune_stats sum;
    memset(&sum, 0, sizeof sum);
    int order[10], n_top = 0;
    for (int k = 0; k < T->n_items; k++) {
        const kiln_tune_stats *S = &T->items[k].stats;
        if (!T->items[k].timed) continue;
        sum.candidates += S->candidates;
        sum.list_us += S->list_us;
        sum.bufs_us += S->bufs_us;
        for (int i = 0; i < KILN_TUNE_KINDS; i++) {
            sum.setup_us[i] += S->setup_us[i];
            sum.setup_n[i] += S->setup_n[i];
            sum.failed_n[i] += S->failed_n[i];
        }
        sum.check_us += S->check_us;
        sum.judge_us += S->judge_us;
        sum.probe_us += S->probe_us;
        sum.ref_runs += S->ref_runs;
        sum.time_us += S->time_us;
        sum.total_us += S->total_us;
        /* the 10 longest (list + the rest), longest first */
        double t = S->total_us + S->list_us;
        int at = n_top < 10 ? n_top++ : 10;
        while (at > 0) {
            const kiln_tune_stats *o = &T->items[order[at - 1]].stats;
            if (o->total_us + o->list_us >= t) break;
            if (at < 10) order[at] = order[at - 1];
            at--;
        }
        if (at < 10) order[at] = k;
    }
    kiln_sbuf sb = {0};
    stats_describe(&sum, &sb);
    fprintf(stderr,
            "kiln: tune summary: %d layers with tactics, %d timed, %d from the cache or identical to one timed; "
            "tuning %.2f s in all (layouts included), listing the tactics of every layer %.2f s; the timed "
            "layers: %s\n",
            T->n_layers, T->n_timed, T->n_cached, (kiln__now_us() - T->t_start) / 1e6, T->list_us / 1e6,
            sb.data ? sb.data : "?");
    for (int i = 0; i < n_top; i++) {
        const tune_item *it = &T->items[order[i]];
        const kiln_node *n = &T->e->graph->nodes[it->ni];
        sb.len = 0;
        if (sb.data) sb.data[0] = 0;
        stats_describe(&it->stats, &sb);
        char pn[256];
        fprintf(stderr, "kiln: tune summary: #%d %s (%s): %s\n", i + 1, kiln_printable(n->name, pn, sizeof pn),
                n->op->name, sb.data ? sb.data : "?");
    }
    kiln__sbuf_free(&sb);
}

/* kiln_layout_ctx.time_node */
static kiln_status tuner_time_node(kiln_layout_ctx *c, int ni, bool (*accept)(const kiln_kernel_args *a),
                                   double *us) {
    tuner *T = c->priv;
    const kiln_graph *g = T->e->graph;
    const kiln_node *n = &g->nodes[ni];
    const kiln_tinfo *in[64] = {0};
    kiln_tinfo outs[16];
    *us = -2;
    if (!T->vi || !node_shapes(g, n, T->vi, in, outs)) return KILN_OK;
    const kiln_backend_i *be = kiln__backend_for(KILN_DEVICE_CPU);
    KILN_TRY(tuner_state(T, 0, be));
    tune_bufs tb;
    memset(&tb, 0, sizeof tb);
    kiln_status st = bufs_make(be, T->states[0], n, in, outs, false, &tb);
    *us = -1;
    if (st == KILN_OK) {
        kiln_kernel_args ka = {.op = n->op, .op_id = n->op_id, .attrs = n->attrs, .node_name = n->name,
                               .n_in = n->n_in, .n_out = n->n_out, .in = tb.pin, .out = tb.pout, .pool = T->pool};
        if (!accept || accept(&ka))
            *us = time_tactic(be, T->states[0], T->pool, n, in, ((const kiln_tactic *)n->attrs)->id, &tb);
    }
    bufs_free(be, T->states[0], n, &tb, in);
    return st;
}

/* kiln_layout_ctx.trial */
static kiln_status tuner_trial(kiln_layout_ctx *c, kiln_variant_fn set, void *arg,
                               double t[2][KILN_TRIAL_MAX_RUNS], double *layer_us, int *runs) {
    return alternate_runs(((tuner *)c->priv)->e, set, arg, t, layer_us, runs);
}

/* The timing-cache key of node n + suffix into T->key; false when a shape
 * is unknown at opt or memory is short. */
static bool tuner_key(tuner *T, const kiln_node *n, const char *suffix) {
    const kiln_tinfo *in[64] = {0};
    kiln_tinfo outs[16];
    if (!T->vi || !node_shapes(T->e->graph, n, T->vi, in, outs)) return false;
    make_key(T->e, n, in, &T->key);
    kiln__sbuf_printf(&T->key, "%s", suffix);
    return !T->key.oom;
}

/* kiln_layout_ctx.cache_get / cache_put */
static bool tuner_cache_get(kiln_layout_ctx *c, const kiln_node *n, const char *suffix, int32_t *id, float *us) {
    tuner *T = c->priv;
    if (!T->b->timing_cache || !tuner_key(T, n, suffix)) return false;
    const cache_ent *ce = cache_find(&T->cache, T->key.data);
    if (!ce) return false;
    *id = ce->id;
    *us = ce->us;
    return true;
}

static kiln_status tuner_cache_put(kiln_layout_ctx *c, const kiln_node *n, const char *suffix, int32_t id,
                                   float us) {
    tuner *T = c->priv;
    if (!T->b->timing_cache || !tuner_key(T, n, suffix)) return KILN_OK;
    return cache_put(&T->cache, T->key.data, id, us);
}

/* Tactics and layouts: the engine's device backend's layouts hook, then
 * the CPU's (each tunes where its choice needs it), then whatever is left
 * untuned. */
kiln_status kiln__builder_tune(const kiln_builder *b, kiln_engine *e) {
    tuner T;
    memset(&T, 0, sizeof T);
    T.b = b;
    T.e = e;
    T.t_start = kiln__now_us();
    T.verbose = b->verbosity >= 2 || kiln__env_flag("KILN_TUNE_VERBOSE");
    T.pub = (kiln_layout_ctx){.g = e->graph, .device = e->opts.device, .optimize = b->optimization != 0,
                              .disabled = b->disabled_passes, .tune = tune_all, .time_node = tuner_time_node,
                              .trial = tuner_trial, .cache_get = tuner_cache_get, .cache_put = tuner_cache_put,
                              .priv = &T};
    const kiln_backend_i *cpu = kiln__backend_for(KILN_DEVICE_CPU), *dev = kiln__backend_for(e->opts.device);
    kiln_status st = KILN_OK;
    if (dev && dev != cpu && dev->layouts) st = dev->layouts(&T.pub);
    if (st == KILN_OK && cpu->layouts) st = cpu->layouts(&T.pub);
    if (st == KILN_OK) st = tune_all(&T.pub);
    if (st == KILN_OK && b->timing_cache && T.cache.dirty) st = cache_write(&T.cache, b->timing_cache);
    if (st == KILN_OK && T.active && b->verbosity >= 1 && kiln__now_us() - T.t_start > 2e6)
        fprintf(stderr, "kiln: tuning done: %d layers with tactics, %d timed, %d from the cache (%.1f s)\n",
                T.n_layers, T.n_timed, T.n_cached, (kiln__now_us() - T.t_start) / 1e6);
    if (st == KILN_OK && T.active && T.verbose) tune_summary(&T);
    if (T.made[0]) cpu->state_free(T.states[0]);
    if (T.made[1]) dev->state_free(T.states[1]);
    kiln__pool_free(T.pool);
    kiln__sbuf_free(&T.key);
    for (int k = 0; k < T.n_items; k++) kiln__free(T.items[k].key);
    kiln__free(T.items);
    cache_free(&T.cache);
    kiln__free(T.vi);
    return st;
}
