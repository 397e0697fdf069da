/* debug.c -- `kiln debug`: finds the first layer of an engine whose output
 * is wrong (docs/debugging.md).
 *
 *   kiln debug compare MODEL.onnx [options]
 *   kiln debug passes
 *
 * `compare` builds the engine as `kiln build` would, runs it, and runs the
 * reference on the same inputs: kiln's own plan of the model's nodes as
 * they are (no fusion, no layout or precision changes), in fp32 on the CPU
 * with memory reuse off. A layer callback reads every tensor the engine
 * writes, as the engine holds it (layout-converted), and compares it with
 * the reference's tensor of the same name (an ONNX value); tensors of fused
 * layers that exist only inside the layer are not there to compare. Before
 * each layer it checks that the tensors it reads still hold what their
 * producer wrote (a hash), which catches memory that a later layer wrote
 * over too early; a second run then finds the layer that wrote over it.
 * Uses only the public API (kiln.h) and the helpers in cli.h. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kiln.h"
#include "npy.h"

static const char debug_help[] =
    "Usage: kiln debug compare MODEL.onnx [options]\n"
    "       kiln debug passes\n"
    "\n"
    "compare: builds MODEL into an engine (as kiln build does, with the options\n"
    "below), runs it, and runs a reference on the same inputs: the model's own\n"
    "nodes, unfused and unoptimized, in fp32 on the CPU, with memory reuse off.\n"
    "Every tensor the engine writes that is a tensor of the model (by name) is\n"
    "compared with the reference's, in the engine's order of execution; tensors\n"
    "that only exist inside a fused layer are not there to compare. Prints the\n"
    "first layer whose output differs beyond tolerance (layer, op, kernel and\n"
    "tactic, the ONNX nodes it was made from, error and shapes), then a summary.\n"
    "It also checks that each tensor a layer reads still holds what its producer\n"
    "wrote, and names the layer that wrote over one too early.\n"
    "\n"
    "passes: lists the graph optimizer's passes, for --disable-pass.\n"
    "\n"
    "Options of compare:\n"
    "  -i, --input NAME=FILE.npy  an input (repeatable; FILE.npy alone if the model has one\n"
    "                           input); inputs not given get random data (as kiln run)\n"
    "                           at the profile's opt shape\n"
    "  --seed S                 seed of the random inputs (default 0)\n"
    "  --shapes, --min-shapes, --opt-shapes, --max-shapes SPECS\n"
    "                           the engine's shape profile, as for kiln build (an input\n"
    "                           read from a file whose dims are dynamic and given no shapes\n"
    "                           gets the file's shape)\n"
    "  --fp32 | --tf32 | --fp16 | --bf16   the engine's precision (default fp32)\n"
    "  --device DEV             the engine's device: cpu (default), cuda or cuda:N\n"
    "  --layer-precision LIST   fp16/bf16 engines: layers kept in fp32 (name:fp32[,...])\n"
    "  --workspace MIB          largest scratch memory a layer may use (0 = no limit)\n"
    "  --disable-pass NAME      build the engine with pass NAME off (repeatable)\n"
    "  --threads N              threads of both runs (0 = one per core; default 0)\n"
    "  --no-tuning              take each layer's default kernel instead of timing them\n"
    "  --timing-cache FILE      kernel timing cache (read if present, written after)\n"
    "  --no-memory-reuse        run the engine with memory reuse off too (a difference that\n"
    "                           goes away then comes from the memory plan)\n"
    "  --atol A, --rtol R       a tensor differs when max|engine - ref| > A + R * max|ref|\n"
    "                           (defaults: fp32 1e-5 and 1e-3, tf32 and fp16 1e-3 and 1e-2,\n"
    "                           bf16 1e-2 and 5e-2); integer and bool tensors must be equal\n"
    "  -v, --verbose            list every compared tensor, not only those that differ\n"
    "  -h, --help               show this help\n"
    "\n"
    "Exit status: 0 every compared tensor within tolerance; 1 a tensor differs or was\n"
    "overwritten (or a failure: bad model, input, build or run); 2 usage error.\n";

/* ---- a name -> entry table (open addressing) -------------------------------------- */

enum { ROW_NONE = 0, ROW_OK, ROW_DIFF, ROW_SHAPE, ROW_NOREF };

typedef struct entry {
    const char *name; /* borrowed from the engine */
    int producer;     /* engine layer writing it */
    /* the reference's tensor of that name */
    bool have_ref;
    int ref_layer;
    kiln_dtype ref_dtype;
    int ref_rank;
    int64_t ref_dims[KILN_MAX_RANK];
    void *ref_data; /* owned */
    /* the engine's: its hash when written, and the comparison */
    bool hashed;
    uint64_t hash;
    int status;       /* ROW_* */
    tensor_diff diff;
    double limit;     /* atol + rtol * max|ref| */
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_RANK];
    double a_val, r_val; /* engine and reference at diff.at */
    int clobbered_by_reader; /* first layer that read it changed, or -1 */
} entry;

typedef struct table {
    entry *v;
    int n, cap;  /* cap: power of two */
    int *slots;  /* index + 1, 0 = empty */
} table;

static uint64_t hash_bytes(const void *p, size_t n, uint64_t h) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t hash_str(const char *s) { return hash_bytes(s, strlen(s), 0xcbf29ce484222325ull); }

static entry *table_find(const table *t, const char *name) {
    if (!name || !t->cap) return NULL;
    for (uint64_t k = hash_str(name) & (uint64_t)(t->cap - 1);; k = (k + 1) & (uint64_t)(t->cap - 1)) {
        int i = t->slots[k];
        if (!i) return NULL;
        if (!strcmp(t->v[i - 1].name, name)) return &t->v[i - 1];
    }
}

/* The table of every tensor an engine layer writes (n_max: an upper bound). */
static bool table_init(table *t, int n_max) {
    t->cap = 16;
    while (t->cap < 2 * n_max + 2) t->cap *= 2;
    t->v = calloc((size_t)n_max + 1, sizeof *t->v);
    t->slots = calloc((size_t)t->cap, sizeof *t->slots);
    return t->v && t->slots;
}

static entry *table_add(table *t, const char *name) {
    entry *e = table_find(t, name);
    if (e) return e;
    uint64_t k = hash_str(name) & (uint64_t)(t->cap - 1);
    while (t->slots[k]) k = (k + 1) & (uint64_t)(t->cap - 1);
    e = &t->v[t->n];
    memset(e, 0, sizeof *e);
    e->name = name;
    e->clobbered_by_reader = -1;
    t->slots[k] = ++t->n;
    return e;
}

static void table_free(table *t) {
    for (int i = 0; i < t->n; i++) free(t->v[i].ref_data);
    free(t->v);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

static int64_t numel_of(int rank, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= dims[i];
    return n;
}

static uint64_t view_hash(const kiln_tensor_view *v) {
    size_t n = (size_t)numel_of(v->rank, v->dims) * kiln_dtype_size(v->dtype);
    return v->data ? hash_bytes(v->data, n, 0xcbf29ce484222325ull) : 0;
}

/* ---- the runs -------------------------------------------------------------------------- */

typedef struct session {
    const kiln_engine *e;   /* the engine under test */
    const kiln_engine *ref; /* the reference */
    table t;
    double atol, rtol;
    int first;              /* the first layer with a differing output, or -1 */
    int first_clobber;      /* the first layer that read an overwritten tensor, or -1 */
    const char *victim;     /* that tensor */
    int n_rows;             /* tensors compared (or without reference) */
    kiln_status cb_error;   /* a failure inside a callback */
    char cb_msg[512];
    /* the second run: which layer changed `victim` */
    int watch_from, watch_to, culprit;
    uint64_t watch_hash;
    bool watch_set;
    /* the third run, with memory reuse off: whether layer `first` is right then */
    int recheck_bad;        /* its outputs that still differ, or -1 (not checked) */
    double recheck_norm;    /* their largest max abs error / max|ref| */
} session;

static int cb_failed(session *s, kiln_status st, const char *what, const char *name) {
    const char *msg = kiln_last_error();
    s->cb_error = st;
    snprintf(s->cb_msg, sizeof s->cb_msg, "%s '%s': %s", what, name, msg && *msg ? msg : kiln_status_name(st));
    return 1; /* stop the run */
}

/* The reference run: keeps a copy of each tensor the engine also has. */
static int ref_callback(kiln_context *c, int layer, kiln_layer_event ev, void *user) {
    session *s = user;
    if (ev != KILN_LAYER_AFTER) return 0;
    int n_out = kiln_engine_layer_num_outputs(s->ref, layer);
    for (int k = 0; k < n_out; k++) {
        const char *name = kiln_engine_layer_output(s->ref, layer, k);
        entry *en = table_find(&s->t, name);
        if (!en || en->have_ref) continue;
        kiln_tensor_view v;
        kiln_status st = kiln_context_tensor(c, name, &v);
        if (st != KILN_OK) return cb_failed(s, st, "reading the reference's tensor", name);
        size_t nb = (size_t)numel_of(v.rank, v.dims) * kiln_dtype_size(v.dtype);
        en->ref_data = malloc(nb + 1);
        if (!en->ref_data) return cb_failed(s, KILN_ERR_OUT_OF_MEMORY, "out of memory keeping", name);
        if (nb) memcpy(en->ref_data, v.data, nb);
        en->have_ref = true;
        en->ref_layer = layer;
        en->ref_dtype = v.dtype;
        en->ref_rank = v.rank;
        memcpy(en->ref_dims, v.dims, sizeof en->ref_dims);
    }
    return 0;
}

static bool same_shape(int ra, const int64_t *a, int rb, const int64_t *b) {
    if (ra != rb) return false;
    for (int i = 0; i < ra; i++)
        if (a[i] != b[i]) return false;
    return true;
}

static void compare_one(session *s, entry *en, const kiln_tensor_view *v) {
    en->dtype = v->dtype;
    en->rank = v->rank;
    memcpy(en->dims, v->dims, sizeof en->dims);
    s->n_rows++;
    if (!en->have_ref) {
        en->status = ROW_NOREF;
        return;
    }
    /* another shape of as many elements: a fusion that took in the Transpose
     * before a merging Reshape gives the tensor the merged shape (the same
     * bytes): compared element by element */
    int64_t n = numel_of(v->rank, v->dims);
    if (!same_shape(v->rank, v->dims, en->ref_rank, en->ref_dims) && n != numel_of(en->ref_rank, en->ref_dims)) {
        en->status = ROW_SHAPE;
        return;
    }
    tensor_diff_compute(v->dtype, v->data, en->ref_dtype, en->ref_data, n, &en->diff);
    const tensor_diff *d = &en->diff;
    en->limit = s->atol + s->rtol * d->max_ref;
    bool ok = d->is_float ? d->max_abs <= en->limit && !d->nonfinite : d->differ == 0;
    if (d->is_float && n > 0) {
        en->a_val = load_f64(v->dtype, v->data, d->at);
        en->r_val = load_f64(en->ref_dtype, en->ref_data, d->at);
    }
    en->status = ok ? ROW_OK : ROW_DIFF;
}

/* The engine's run: each layer's inputs still as written, each output against the reference. */
static int engine_callback(kiln_context *c, int layer, kiln_layer_event ev, void *user) {
    session *s = user;
    kiln_tensor_view v;
    kiln_status st;
    if (ev == KILN_LAYER_BEFORE) {
        int n_in = kiln_engine_layer_num_inputs(s->e, layer);
        for (int i = 0; i < n_in; i++) {
            entry *en = table_find(&s->t, kiln_engine_layer_input(s->e, layer, i));
            if (!en || !en->hashed || en->clobbered_by_reader >= 0) continue;
            if ((st = kiln_context_tensor(c, en->name, &v)) != KILN_OK)
                return cb_failed(s, st, "reading the engine's tensor", en->name);
            if (view_hash(&v) == en->hash) continue;
            en->clobbered_by_reader = layer;
            if (s->first_clobber < 0) {
                s->first_clobber = layer;
                s->victim = en->name;
            }
        }
        return 0;
    }
    int n_out = kiln_engine_layer_num_outputs(s->e, layer);
    for (int k = 0; k < n_out; k++) {
        entry *en = table_find(&s->t, kiln_engine_layer_output(s->e, layer, k));
        if (!en) continue;
        if ((st = kiln_context_tensor(c, en->name, &v)) != KILN_OK)
            return cb_failed(s, st, "reading the engine's tensor", en->name);
        en->hash = view_hash(&v);
        en->hashed = true;
        compare_one(s, en, &v);
        if (en->status != ROW_OK && en->status != ROW_NOREF && s->first < 0) s->first = layer;
    }
    return 0;
}

/* The second run: the first layer after which `victim` changed. */
static int watch_callback(kiln_context *c, int layer, kiln_layer_event ev, void *user) {
    session *s = user;
    if (ev != KILN_LAYER_AFTER || layer < s->watch_from || layer >= s->watch_to || s->culprit >= 0) return 0;
    kiln_tensor_view v;
    kiln_status st = kiln_context_tensor(c, s->victim, &v);
    if (st != KILN_OK) return cb_failed(s, st, "reading the engine's tensor", s->victim);
    uint64_t h = view_hash(&v);
    if (!s->watch_set) {
        s->watch_hash = h;
        s->watch_set = true;
    } else if (h != s->watch_hash) {
        s->culprit = layer;
    }
    return 0;
}

/* The third run (memory reuse off): layer `first`'s outputs against the reference again. */
static int recheck_callback(kiln_context *c, int layer, kiln_layer_event ev, void *user) {
    session *s = user;
    if (ev != KILN_LAYER_AFTER || layer != s->first) return 0;
    s->recheck_bad = 0;
    for (int k = 0; k < kiln_engine_layer_num_outputs(s->e, layer); k++) {
        const entry *en = table_find(&s->t, kiln_engine_layer_output(s->e, layer, k));
        if (!en || !en->have_ref) continue;
        kiln_tensor_view v;
        kiln_status st = kiln_context_tensor(c, en->name, &v);
        if (st != KILN_OK) return cb_failed(s, st, "reading the engine's tensor", en->name);
        entry copy = *en; /* compared again without changing the first run's results */
        session scratch = *s;
        compare_one(&scratch, &copy, &v);
        if (copy.status != ROW_OK) s->recheck_bad++;
        if (copy.status == ROW_DIFF && tensor_diff_norm(&copy.diff) > s->recheck_norm)
            s->recheck_norm = tensor_diff_norm(&copy.diff);
    }
    return 1; /* nothing more to see */
}

/* Runs c with callback cb; EXIT_OK or EXIT_FAIL (printed). */
static int run_with(kiln_context *c, kiln_layer_callback cb, session *s, const char *what) {
    kiln_status st = kiln_context_set_layer_callback(c, cb, s);
    if (st != KILN_OK) return fail_kiln(st, "%s: layer callback", what);
    s->cb_error = KILN_OK;
    st = kiln_context_run(c);
    kiln_context_set_layer_callback(c, NULL, NULL);
    if (s->cb_error != KILN_OK) return fail("%s: %s", what, s->cb_msg);
    if (st != KILN_OK && cb == recheck_callback && s->recheck_bad >= 0) return EXIT_OK; /* stopped on purpose */
    if (st != KILN_OK) return fail_kiln(st, "%s failed", what);
    return EXIT_OK;
}

/* ---- the report ------------------------------------------------------------------------ */

static const char *dims_str(char *buf, size_t cap, kiln_dtype dt, int rank, const int64_t *dims) {
    char d[DIMS_CAP];
    snprintf(buf, cap, "%s %s", kiln_dtype_name(dt), fmt_dims(d, sizeof d, rank, dims, NULL));
    return buf;
}

/* "Op 'name'" of layer l of e. */
static void print_layer(const kiln_engine *e, int l) {
    kiln_layer_info li;
    char op[NAME_CAP], pn[NAME_CAP];
    if (kiln_engine_layer_info(e, l, &li) != KILN_OK) return;
    printf("%s '%s'", PRINTABLE(li.op, op), PRINTABLE(li.name, pn));
}

static void print_sources(const kiln_engine *e, int l) {
    int n = kiln_engine_layer_num_sources(e, l);
    if (n <= 0) {
        printf("none (a layer kiln added)");
        return;
    }
    char pn[NAME_CAP];
    for (int i = 0; i < n; i++) printf("%s'%s'", i ? ", " : "", PRINTABLE(kiln_engine_layer_source(e, l, i), pn));
}

static void print_error(const entry *en) {
    char a[DIMS_CAP + 32], b[DIMS_CAP + 32];
    if (en->status == ROW_SHAPE) {
        printf("shape %s, the reference's %s", dims_str(a, sizeof a, en->dtype, en->rank, en->dims),
               dims_str(b, sizeof b, en->ref_dtype, en->ref_rank, en->ref_dims));
        return;
    }
    const tensor_diff *d = &en->diff;
    if (!d->is_float) {
        printf("%" PRId64 " of %" PRId64 " elements differ", d->differ, d->n);
        return;
    }
    printf("max abs error %.3g, max abs error / max|ref| %.3g (max|ref| %.3g; limit %.3g)", d->max_abs,
           tensor_diff_norm(d), d->max_ref, en->limit);
    if (d->nonfinite) printf(", %" PRId64 " NaN/Inf mismatches", d->nonfinite);
}

static const char *status_word(int st) {
    return st == ROW_OK ? "ok" : st == ROW_DIFF ? "DIFFERS" : st == ROW_SHAPE ? "SHAPE" : "no reference";
}

static void print_first(const session *s) {
    const kiln_engine *e = s->e;
    int l = s->first;
    kiln_layer_info li;
    kiln_engine_layer_info(e, l, &li);
    printf("\nfirst layer whose output differs: layer %d of %d, ", l, kiln_engine_num_layers(e));
    print_layer(e, l);
    printf("\n  kernel:    %s:%s%s%s (%s)\n", li.kernel, li.op, li.tactic[0] ? ", tactic " : "", li.tactic,
           li.device == KILN_DEVICE_CUDA ? "on the GPU" : "on the CPU");
    printf("  made from: ");
    print_sources(e, l);
    printf(" (ONNX nodes)\n");
    char a[DIMS_CAP + 32], pn[NAME_CAP];
    for (int k = 0; k < kiln_engine_layer_num_outputs(e, l); k++) {
        const entry *en = table_find(&s->t, kiln_engine_layer_output(e, l, k));
        if (!en || en->status == ROW_NONE) continue;
        printf("  output %d '%s': %s: ", k, PRINTABLE(en->name, pn), dims_str(a, sizeof a, en->dtype, en->rank, en->dims));
        if (en->status == ROW_NOREF) {
            printf("no reference (a tensor kiln made)\n");
            continue;
        }
        print_error(en);
        printf(" %s\n", status_word(en->status));
        if (en->status == ROW_DIFF && en->diff.is_float)
            printf("    worst element %" PRId64 ": engine %.6g, reference %.6g\n", en->diff.at, en->a_val,
                   en->r_val);
    }
    int unchecked[16], n_unchecked = 0; /* layers that wrote inputs without a reference */
    for (int i = 0; i < kiln_engine_layer_num_inputs(e, l); i++) {
        const char *name = kiln_engine_layer_input(e, l, i);
        bool again = false;
        for (int j = 0; j < i && name && !again; j++) again = kiln_engine_layer_input(e, l, j) &&
                                                            !strcmp(kiln_engine_layer_input(e, l, j), name);
        if (!name || again) continue;
        const entry *en = table_find(&s->t, name);
        printf("  input %d '%s': ", i, PRINTABLE(name, pn));
        if (!en) {
            bool input = false;
            for (int k = 0; k < kiln_engine_num_inputs(e); k++) {
                kiln_io_info info;
                input = input || (kiln_engine_input_info(e, k, &info) == KILN_OK && !strcmp(info.name, name));
            }
            printf("%s\n", input ? "an input of the engine" : "a constant");
        } else if (en->clobbered_by_reader == l) {
            printf("CHANGED after layer %d wrote it, before this layer read it\n", en->producer);
        } else if (en->status == ROW_OK) {
            printf("matches the reference (written by layer %d)\n", en->producer);
        } else if (en->status == ROW_NOREF) {
            printf("no reference (written by layer %d)\n", en->producer);
            if (n_unchecked < 16) unchecked[n_unchecked++] = en->producer;
        } else {
            printf("%s (written by layer %d)\n", status_word(en->status), en->producer);
        }
    }
    for (int i = 0; i < n_unchecked; i++) {
        bool again = false;
        for (int j = 0; j < i; j++) again = again || unchecked[j] == unchecked[i];
        if (again) continue;
        printf("  The fault may also be in layer %d, ", unchecked[i]);
        print_layer(e, unchecked[i]);
        printf(",\n  made from ");
        print_sources(e, unchecked[i]);
        printf(":\n  the tensor it wrote has no counterpart in the model, so it was not compared.\n");
    }
    if (s->recheck_bad == 0)
        printf("  Run again with memory reuse off, this layer's output matches the reference: its memory\n"
               "  overlaps a tensor it reads or another layer writes into it (a fault of the memory plan;\n"
               "  --no-memory-reuse runs the whole engine so).\n");
    else if (s->recheck_bad > 0)
        printf("  Run again with memory reuse off, it still differs (max abs error / max|ref| %.3g):\n"
               "  %s computes it wrong: a kernel, or the rewrite that made it (try --disable-pass).\n",
               s->recheck_norm, n_unchecked ? "this layer, or one above whose output was not compared," : "the layer");
}

static void print_row(const session *s, const entry *en) {
    char a[DIMS_CAP + 32], op[NAME_CAP], pn[NAME_CAP];
    kiln_layer_info li;
    kiln_engine_layer_info(s->e, en->producer, &li);
    printf("  %5d  %-18s %-8s ", en->producer, PRINTABLE(li.op, op), status_word(en->status));
    if (en->status == ROW_OK || en->status == ROW_DIFF) {
        if (en->diff.is_float) printf("%9.3g %9.3g  ", en->diff.max_abs, tensor_diff_norm(&en->diff));
        else printf("%9" PRId64 " %9s  ", en->diff.differ, "(differ)");
    } else {
        printf("%9s %9s  ", "-", "-");
    }
    printf("%s %s\n", PRINTABLE(en->name, pn), dims_str(a, sizeof a, en->dtype, en->rank, en->dims));
}

/* The summary; returns the number of problems (differing, mis-shaped or overwritten tensors). */
static int print_summary(const session *s, bool verbose) {
    int ok = 0, differ = 0, noref = 0, clob = 0;
    for (int i = 0; i < s->t.n; i++) {
        const entry *en = &s->t.v[i];
        ok += en->status == ROW_OK;
        differ += en->status == ROW_DIFF || en->status == ROW_SHAPE;
        noref += en->status == ROW_NOREF;
        clob += en->clobbered_by_reader >= 0;
    }
    printf("\nsummary: %d tensors compared: %d within tolerance, %d differ", ok + differ, ok, differ);
    if (noref) printf("; %d without a reference (tensors kiln made)", noref);
    if (clob) printf("; %d changed before a layer read them", clob);
    printf("\n");
    int shown = 0, limit = verbose ? s->t.n : 20;
    bool header = false;
    for (int l = 0; l < kiln_engine_num_layers(s->e); l++) /* execution order */
        for (int k = 0; k < kiln_engine_layer_num_outputs(s->e, l); k++) {
            const entry *en = table_find(&s->t, kiln_engine_layer_output(s->e, l, k));
            if (!en || en->status == ROW_NONE || (!verbose && (en->status == ROW_OK || en->status == ROW_NOREF)))
                continue;
            if (!header) {
                printf("  %5s  %-18s %-8s %9s %9s  %s\n", "layer", "op", "status", "max abs", "/max|ref|",
                       "tensor");
                header = true;
            }
            if (shown++ < limit) print_row(s, en);
        }
    if (shown > limit) printf("  ... %d more (--verbose lists every tensor)\n", shown - limit);
    printf("graph outputs:\n");
    for (int k = 0; k < kiln_engine_num_outputs(s->e); k++) {
        kiln_io_info info;
        if (kiln_engine_output_info(s->e, k, &info) != KILN_OK) continue;
        const entry *en = table_find(&s->t, info.name);
        char pn[NAME_CAP];
        printf("  %s: ", PRINTABLE(info.name, pn));
        if (!en || en->status == ROW_NONE) printf("not compared\n");
        else if (en->status == ROW_NOREF) printf("no reference\n");
        else {
            print_error(en);
            printf(" %s\n", status_word(en->status));
        }
    }
    return differ + clob;
}

/* ---- kiln debug passes ------------------------------------------------------------------ */

static int cmd_passes(int argc, char **argv) {
    if (argc > 0 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        fputs(debug_help, stdout);
        return EXIT_OK;
    }
    if (argc > 0) return usage_error("debug", "passes: unexpected argument '%s'", argv[0]);
    printf("graph optimizer passes, in the order they run (kiln build / kiln debug compare\n"
           "--disable-pass NAME switches one off):\n");
    for (int i = 0; i < kiln_pass_count(); i++) printf("  %-24s %s\n", kiln_pass_name(i), kiln_pass_description(i));
    return EXIT_OK;
}

/* ---- kiln debug compare ----------------------------------------------------------------- */

/* Gives each --input file its input's name (checked against the model) and,
 * for inputs with dynamic dims given no shapes, the file's shape as the
 * profile (sl[0]: min = opt = max); the files are read once here, so a
 * missing or bad file fails before the build. */
static int check_input_files(const kiln_model *m, input_files *files, shape_list sl[4]) {
    int n_in = kiln_model_num_inputs(m);
    char names[2048];
    size_t len = 0;
    names[0] = '\0';
    for (int i = 0; i < n_in; i++) {
        kiln_io_info info;
        if (kiln_model_input_info(m, i, &info) == KILN_OK && len < sizeof names)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s'%s'", i ? ", " : "", info.name);
    }
    for (int j = 0; j < files->n; j++) {
        input_file *f = &files->v[j];
        kiln_io_info info;
        int k = -1;
        if (!f->name && n_in != 1)
            return fail("--input %s: name the input (name=file.npy); the model has %d inputs: %s", f->path, n_in,
                        names);
        for (int i = 0; i < n_in; i++)
            if (kiln_model_input_info(m, i, &info) == KILN_OK && (!f->name || !strcmp(info.name, f->name))) {
                k = i;
                break;
            }
        if (k < 0) return fail("--input: the model has no input named '%s' (inputs: %s)", f->name, names);
        if (!f->name && !(f->name = strdup(info.name))) return fail("out of memory");
        npy_array arr;
        char err[1024];
        if (npy_read(f->path, &arr, err, sizeof err)) return fail("input '%s': %s", info.name, err);
        /* the model's fixed dims and dtype, before a build that may take long */
        char a[DIMS_CAP], b[DIMS_CAP];
        const char *why = arr.dtype != info.dtype ? "dtype" : arr.rank != info.rank ? "rank" : NULL;
        for (int i = 0; !why && i < info.rank; i++)
            if (info.dims[i] >= 0 && arr.dims[i] != info.dims[i]) why = "shape";
        if (why) {
            int r = fail("input '%s': %s has %s %s, the model's input is %s %s (a wrong %s)", info.name, f->path,
                         kiln_dtype_name(arr.dtype), fmt_dims(a, sizeof a, arr.rank, arr.dims, NULL),
                         kiln_dtype_name(info.dtype), fmt_dims(b, sizeof b, info.rank, info.dims, info.dim_names),
                         why);
            npy_free(&arr);
            return r;
        }
        bool dynamic = false, named = false;
        for (int i = 0; i < info.rank; i++) dynamic = dynamic || info.dims[i] < 0;
        for (int q = 0; q < 4; q++) named = named || shapes_find(&sl[q], info.name);
        if (dynamic && !named) {
            shape_spec sp = {.name = strdup(info.name), .rank = arr.rank};
            memcpy(sp.dims, arr.dims, sizeof sp.dims);
            shape_spec *nv = sp.name ? realloc(sl[0].v, (size_t)(sl[0].n + 1) * sizeof *nv) : NULL;
            if (!nv) {
                free(sp.name);
                npy_free(&arr);
                return fail("out of memory");
            }
            sl[0].v = nv;
            sl[0].v[sl[0].n++] = sp;
            sl[0].cap = sl[0].n;
        }
        npy_free(&arr);
    }
    return EXIT_OK;
}

typedef struct compare_opts {
    const char *model_path;
    input_files files;
    shape_list sl[4];
    int precision, device;
    int64_t device_index, threads, seed, workspace;
    const char *layer_prec;
    uint32_t disabled;
    bool no_tuning, no_reuse, verbose, atol_set, rtol_set;
    const char *tcache;
    double atol, rtol;
} compare_opts;

static void default_tolerance(compare_opts *o) {
    double atol = 1e-5, rtol = 1e-3; /* summation order alone moves deep layers ~1e-4 of max|ref| */
    if (o->precision == KILN_PRECISION_TF32 || o->precision == KILN_PRECISION_FP16) atol = 1e-3, rtol = 1e-2;
    if (o->precision == KILN_PRECISION_BF16) atol = 1e-2, rtol = 5e-2;
    if (!o->atol_set) o->atol = atol;
    if (!o->rtol_set) o->rtol = rtol;
}

/* The engine under test, as kiln build would make it. */
static int build_engine(const compare_opts *o, const kiln_model *m, kiln_engine **e) {
    kiln_builder *b = NULL;
    int rc = EXIT_FAIL;
    kiln_status st = kiln_builder_create(&b);
    if (st != KILN_OK) return fail_kiln(st, "cannot create a builder");
    if ((st = kiln_builder_set_device(b, (kiln_device)o->device, (int)o->device_index)) != KILN_OK) {
        fail_kiln(st, "--device");
        goto done;
    }
    if (o->precision >= 0 && (st = kiln_builder_set_precision(b, (kiln_precision)o->precision)) != KILN_OK) {
        fail_kiln(st, "precision");
        goto done;
    }
    if (o->threads >= 0 && (st = kiln_builder_set_threads(b, (int)o->threads)) != KILN_OK) {
        fail_kiln(st, "--threads");
        goto done;
    }
    if (o->no_tuning && (st = kiln_builder_set_tuning(b, 0)) != KILN_OK) {
        fail_kiln(st, "--no-tuning");
        goto done;
    }
    if (o->tcache && (st = kiln_builder_set_timing_cache(b, o->tcache)) != KILN_OK) {
        fail_kiln(st, "--timing-cache");
        goto done;
    }
    if (o->workspace >= 0 && (st = kiln_builder_set_workspace(b, (size_t)o->workspace << 20)) != KILN_OK) {
        fail_kiln(st, "--workspace");
        goto done;
    }
    if (o->layer_prec && !set_layer_precisions("debug", b, o->layer_prec)) goto done;
    if ((rc = set_profiles("debug", m, b, o->sl, false)) != EXIT_OK) goto done;
    if ((rc = disable_passes(b, o->disabled)) != EXIT_OK) goto done;
    rc = EXIT_FAIL;
    if ((st = kiln_build(b, m, e)) != KILN_OK) {
        fail_kiln(st, "cannot build '%s'", o->model_path);
        goto done;
    }
    rc = EXIT_OK;
done:
    kiln_builder_free(b);
    return rc;
}

static int compare(compare_opts *o) {
    kiln_model *m = NULL;
    kiln_engine *e = NULL, *ref = NULL;
    kiln_context *c = NULL, *rc = NULL;
    bound_input *bufs = NULL;
    session s;
    memset(&s, 0, sizeof s);
    int ret = EXIT_FAIL, n_in = 0;
    kiln_status st = kiln_model_load_onnx(o->model_path, &m);
    if (st != KILN_OK) {
        fail_load(st, "model", o->model_path);
        goto done;
    }
    if (check_input_files(m, &o->files, o->sl) != EXIT_OK) goto done;
    default_tolerance(o);
    double t0 = now_s();
    if ((ret = build_engine(o, m, &e)) != EXIT_OK) goto done;
    ret = EXIT_FAIL;
    double t_build = now_s() - t0;
    if ((st = kiln_context_create(e, &c)) != KILN_OK) {
        fail_kiln(st, "cannot create a context");
        goto done;
    }
    if (o->threads >= 0 && (st = kiln_context_set_threads(c, (int)o->threads)) != KILN_OK) {
        fail_kiln(st, "--threads");
        goto done;
    }
    if (o->no_reuse && (st = kiln_context_set_memory_reuse(c, 0)) != KILN_OK) {
        fail_kiln(st, "--no-memory-reuse");
        goto done;
    }
    n_in = kiln_engine_num_inputs(e);
    bufs = calloc((size_t)(n_in > 0 ? n_in : 1), sizeof *bufs);
    if (!bufs) {
        fail("out of memory");
        goto done;
    }
    static const shape_list no_shapes = {0}; /* random inputs: the profile's opt shapes */
    printf("model:     %s\n", o->model_path);
    if (bind_inputs(e, c, &o->files, &no_shapes, (uint64_t)o->seed, true, bufs, false) != EXIT_OK) goto done;
    if (reference_engine(m, o->model_path, bufs, n_in, false, "reference", &ref, &rc) != EXIT_OK) goto done;
    if ((st = kiln_context_set_memory_reuse(rc, 0)) != KILN_OK ||
        (o->threads >= 0 && (st = kiln_context_set_threads(rc, (int)o->threads)) != KILN_OK)) {
        fail_kiln(st, "reference context");
        goto done;
    }
    int n_layers = kiln_engine_num_layers(e), n_tensors = 0;
    for (int l = 0; l < n_layers; l++) n_tensors += kiln_engine_layer_num_outputs(e, l);
    if (!table_init(&s.t, n_tensors)) {
        fail("out of memory");
        goto done;
    }
    for (int l = 0; l < n_layers; l++)
        for (int k = 0; k < kiln_engine_layer_num_outputs(e, l); k++) {
            const char *name = kiln_engine_layer_output(e, l, k);
            if (name) table_add(&s.t, name)->producer = l;
        }
    s.e = e;
    s.ref = ref;
    s.atol = o->atol;
    s.rtol = o->rtol;
    s.first = s.first_clobber = s.culprit = -1;
    char passes[512] = "";
    size_t plen = 0;
    for (int i = 0; i < kiln_pass_count(); i++)
        if (o->disabled >> i & 1)
            plen += (size_t)snprintf(passes + plen, plen < sizeof passes ? sizeof passes - plen : 0, "%s%s",
                                     plen ? ", " : "", kiln_pass_name(i));
    static const char *const prec[] = {"fp32", "tf32", "fp16", "bf16"};
    printf("engine:    %s %s, %d layers (built in %.1f s; passes off: %s; memory reuse %s)\n",
           kiln_engine_device(e) == KILN_DEVICE_CUDA ? "cuda" : "cpu", prec[kiln_engine_precision(e) & 3], n_layers,
           t_build, plen ? passes : "none", o->no_reuse ? "off" : "on");
    printf("reference: the model's %d nodes unoptimized, fp32 on the CPU, memory reuse off\n",
           kiln_engine_num_layers(ref));
    printf("tolerance: max|engine - ref| <= %g + %g * max|ref| (integer tensors: equal)\n", s.atol, s.rtol);
    fflush(stdout);
    if (run_with(rc, ref_callback, &s, "the reference run") != EXIT_OK) goto done;
    if (run_with(c, engine_callback, &s, "the engine's run") != EXIT_OK) goto done;
    s.recheck_bad = -1;
    if (s.first >= 0 && !o->no_reuse) { /* is the layer right without memory reuse? */
        if ((st = kiln_context_set_memory_reuse(c, 0)) != KILN_OK) {
            fail_kiln(st, "--no-memory-reuse");
            goto done;
        }
        if (run_with(c, recheck_callback, &s, "the engine's run without memory reuse") != EXIT_OK) goto done;
        kiln_context_set_memory_reuse(c, 1);
    }
    if (s.first >= 0) print_first(&s);
    if (s.first_clobber >= 0) {
        const entry *v = table_find(&s.t, s.victim);
        char pn[NAME_CAP];
        printf("\ntensor '%s' changed between layer %d (", PRINTABLE(s.victim, pn), v->producer);
        print_layer(e, v->producer);
        printf("), which wrote it, and layer %d (", s.first_clobber);
        print_layer(e, s.first_clobber);
        printf("), which read it:\n  another layer wrote over it while it was still to be read");
        /* which one: run again watching it */
        s.watch_from = v->producer;
        s.watch_to = s.first_clobber;
        s.watch_set = false;
        s.culprit = -1;
        if (run_with(c, watch_callback, &s, "the engine's second run") != EXIT_OK) goto done;
        if (s.culprit >= 0) {
            printf(": layer %d (", s.culprit);
            print_layer(e, s.culprit);
            printf(") in a second run.\n  Its output shares memory with '%s': a fault of the memory plan "
                   "(try --no-memory-reuse)\n", pn);
        } else {
            printf(" (a second run did not change it between layers %d and %d: it varies from run to run)\n",
                   s.watch_from, s.watch_to);
        }
    }
    int problems = print_summary(&s, o->verbose);
    if (problems) {
        printf("\nresult: %s\n", s.first >= 0 ? "the engine's output differs from the reference" : "tensors were overwritten");
        if (!o->no_reuse)
            printf("hints: --no-memory-reuse runs the engine without memory reuse; --disable-pass NAME builds "
                   "it without a pass (kiln debug passes)\n");
        ret = EXIT_FAIL;
    } else {
        printf("\nresult: every compared tensor is within tolerance\n");
        ret = EXIT_OK;
    }
done:
    table_free(&s.t);
    kiln_context_free(rc);
    kiln_engine_free(ref);
    kiln_context_free(c);
    free_inputs(bufs, n_in);
    kiln_engine_free(e);
    kiln_model_free(m);
    return ret;
}

static int cmd_compare(int argc, char **argv) {
    static const optdef defs[] = {
        {"--input", "-i", true},       {"--seed", NULL, true},        {"--shapes", NULL, true},
        {"--min-shapes", NULL, true},  {"--opt-shapes", NULL, true},  {"--max-shapes", NULL, true},
        {"--fp32", NULL, false},       {"--tf32", NULL, false},       {"--fp16", NULL, false},
        {"--bf16", NULL, false},       {"--device", NULL, true},      {"--disable-pass", NULL, true},
        {"--threads", NULL, true},     {"--no-tuning", NULL, false},  {"--timing-cache", NULL, true},
        {"--no-memory-reuse", NULL, false}, {"--atol", NULL, true},   {"--rtol", NULL, true},
        {"--verbose", "-v", false},    {"--help", "-h", false},       {"--layer-precision", NULL, true},
        {"--workspace", NULL, true},
    };
    enum { O_INPUT, O_SEED, O_SHAPES, O_MIN, O_OPT, O_MAX, O_FP32, O_TF32, O_FP16, O_BF16, O_DEVICE,
           O_DISABLE, O_THREADS, O_NO_TUNING, O_TCACHE, O_NO_REUSE, O_ATOL, O_RTOL, O_VERBOSE, O_HELP,
           O_LAYER_PREC, O_WORKSPACE };
    compare_opts o;
    memset(&o, 0, sizeof o);
    o.precision = -1;
    o.device = KILN_DEVICE_CPU;
    o.threads = -1;
    o.workspace = -1;
    argscan s = {argc, argv, 0, "debug", false};
    const char *val;
    int rc = EXIT_USAGE, id;
    while ((id = scan_next(&s, defs, (int)(sizeof defs / sizeof defs[0]), &val)) != SCAN_END) {
        switch (id) {
        case SCAN_ERROR: goto done;
        case SCAN_POSITIONAL:
            if (o.model_path) {
                usage_error("debug", "unexpected argument '%s' (one model only)", val);
                goto done;
            }
            o.model_path = val;
            break;
        case O_HELP: fputs(debug_help, stdout); rc = EXIT_OK; goto done;
        case O_INPUT:
            if ((rc = input_arg("debug", val, &o.files)) != EXIT_OK) goto done;
            rc = EXIT_USAGE;
            break;
        case O_SEED: if (!opt_int("debug", "--seed", val, 0, INT64_MAX, &o.seed)) goto done; break;
        case O_SHAPES: case O_MIN: case O_OPT: case O_MAX:
            if (!shapes_parse("debug", defs[id].name, val, &o.sl[id - O_SHAPES])) goto done;
            break;
        case O_FP32: case O_TF32: case O_FP16: case O_BF16:
            if (!set_precision_flag("debug", &o.precision, id - O_FP32 + KILN_PRECISION_FP32)) goto done;
            break;
        case O_DEVICE: if (!parse_device("debug", val, &o.device, &o.device_index)) goto done; break;
        case O_DISABLE: if (!parse_pass("debug", val, &o.disabled)) goto done; break;
        case O_THREADS: if (!opt_int("debug", "--threads", val, 0, 4096, &o.threads)) goto done; break;
        case O_NO_TUNING: o.no_tuning = true; break;
        case O_TCACHE: o.tcache = val; break;
        case O_NO_REUSE: o.no_reuse = true; break;
        case O_ATOL: case O_RTOL: {
            double *dst = id == O_ATOL ? &o.atol : &o.rtol;
            if (!parse_double(val, 0, 1e30, dst)) {
                usage_error("debug", "%s: expected a number >= 0, got '%s'", defs[id].name, val);
                goto done;
            }
            if (id == O_ATOL) o.atol_set = true;
            else o.rtol_set = true;
            break;
        }
        case O_VERBOSE: o.verbose = true; break;
        case O_LAYER_PREC: o.layer_prec = val; break;
        case O_WORKSPACE:
            if (!opt_int("debug", "--workspace", val, 0, (int64_t)(SIZE_MAX >> 21), &o.workspace)) goto done;
            break;
        default: goto done;
        }
    }
    if (!o.model_path) {
        usage_error("debug", "compare: no model given");
        goto done;
    }
    rc = compare(&o);
done:
    input_files_free(&o.files);
    for (int q = 0; q < 4; q++) shapes_free(&o.sl[q]);
    return rc;
}

int cmd_debug(int argc, char **argv) {
    if (argc < 1) return usage_error("debug", "expected a subcommand: compare or passes");
    if (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        fputs(debug_help, stdout);
        return EXIT_OK;
    }
    if (!strcmp(argv[0], "compare")) return cmd_compare(argc - 1, argv + 1);
    if (!strcmp(argv[0], "passes")) return cmd_passes(argc - 1, argv + 1);
    return usage_error("debug", "unknown subcommand '%s' (expected compare or passes)", argv[0]);
}
