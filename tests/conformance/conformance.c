/* conformance.c -- runs ONNX backend node tests (a folder with model.onnx and
 * test_data_set_N/{input,output}_K.pb) through kiln and compares the outputs.
 *
 *   kiln_conformance [--expect FILE] [--write-passing FILE] [--verbose]
 *                    [--threads N] [--timeout S] [--no-fork] [--device cpu|cuda] PATH...
 *
 * Each PATH is a test folder or a folder of test folders. Every test is
 * classified as pass, fail (wrong values, shape or dtype, a run-time error,
 * a crash or a timeout) or unsupported (KILN_ERR_UNSUPPORTED while loading
 * or building). Each test runs in a child process (unless --no-fork) so a
 * crashing kernel is reported instead of killing the run.
 *
 * Output: one line per test that did not pass, then
 *   conformance: P passed, F failed, U unsupported (T total)
 *   P passed, F failed, U skipped
 * With --expect FILE (test names, one per line, '#' comments) every listed
 * test that did not pass is reported as "REGRESSION: name: reason" and the
 * exit status is 1. Without --expect the exit status is 1 only if a test
 * crashed or timed out. --write-passing writes the sorted names of the
 * passing tests (atomically). --device builds the engines for that device
 * (default cpu; a CUDA engine runs the nodes without a GPU kernel on the
 * CPU) and compares the same way; with cuda on a machine without a usable
 * GPU (or a kiln built without CUDA) it prints that the run is skipped and
 * exits 0. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln.h"
#include "onnx/onnx_import.h"

#define RTOL 1e-3
#define ATOL 1e-7
#define REASON_MAX 512

enum { R_PASS = 0, R_FAIL = 1, R_UNSUPPORTED = 2 };

typedef struct result {
    int kind;
    int crashed; /* signal or timeout */
    char reason[REASON_MAX];
    /* --device other than cpu: op types of the layers the build left on the
     * CPU, space-separated, each once ("" when every layer runs on the device) */
    char cpu_ops[256];
} result;

typedef struct options {
    const char *expect;
    const char *write_passing;
    int verbose;
    int threads;
    int timeout;
    int fork;
    kiln_device device;
} options;

typedef struct test_entry {
    char *path;
    const char *name; /* points into path */
    result r;
} test_entry;

typedef struct test_list {
    test_entry *v;
    size_t n, cap;
} test_list;

/* ---- small utilities ------------------------------------------------------ */

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "kiln_conformance: out of memory\n");
        exit(2);
    }
    return q;
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(xrealloc(NULL, n), s, n);
}

static char *path_join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *p = xrealloc(NULL, la + lb + 2);
    memcpy(p, a, la);
    size_t k = la;
    if (k && p[k - 1] != '/') p[k++] = '/';
    memcpy(p + k, b, lb + 1);
    return p;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static void set_reason(result *r, int kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_reason(result *r, int kind, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof r->reason, fmt, ap);
    va_end(ap);
    for (char *p = r->reason; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t') *p = ' ';
    r->kind = kind;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of the entries of `dir` (NULL-terminated; free with free_names). */
static char **list_dir(const char *dir, size_t *count) {
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n + 1 >= cap) {
            cap = cap ? cap * 2 : 64;
            names = xrealloc(names, cap * sizeof *names);
        }
        names[n++] = xstrdup(e->d_name);
    }
    closedir(d);
    if (names) {
        qsort(names, n, sizeof *names, cmp_str);
        names[n] = NULL;
    }
    *count = n;
    return names;
}

static void free_names(char **names, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static void shape_str(int rank, const int64_t *dims, char *buf, size_t n) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? "x%lld" : "%lld", (long long)dims[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* ---- collecting tests ----------------------------------------------------- */

static void add_test(test_list *l, const char *path) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 256;
        l->v = xrealloc(l->v, l->cap * sizeof *l->v);
    }
    test_entry *t = &l->v[l->n++];
    memset(t, 0, sizeof *t);
    t->path = xstrdup(path);
    size_t len = strlen(t->path);
    while (len > 1 && t->path[len - 1] == '/')
        t->path[--len] = 0;
    const char *slash = strrchr(t->path, '/');
    t->name = slash ? slash + 1 : t->path;
}

static int is_test_dir(const char *dir) {
    char *m = path_join(dir, "model.onnx");
    int ok = is_file(m);
    free(m);
    return ok;
}

static void collect(test_list *l, const char *path, int depth) {
    if (is_test_dir(path)) {
        add_test(l, path);
        return;
    }
    if (depth > 3 || !is_dir(path)) return;
    size_t n;
    char **names = list_dir(path, &n);
    for (size_t i = 0; i < n; i++) {
        char *sub = path_join(path, names[i]);
        if (is_dir(sub)) collect(l, sub, depth + 1);
        free(sub);
    }
    free_names(names, n);
}

/* ---- tensors from .pb files ----------------------------------------------- */

typedef struct tensor {
    char *name;
    kiln_tinfo info;
    void *data;
} tensor;

static void tensor_free(tensor *t) {
    kiln__free(t->name);
    kiln__free(t->data);
    memset(t, 0, sizeof *t);
}

static kiln_status read_pb(const char *path, tensor *t, result *r) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) {
        set_reason(r, R_FAIL, "cannot open '%s': %s", path, strerror(errno));
        return KILN_ERR_IO;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 1 << 16;
            buf = xrealloc(buf, cap);
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        set_reason(r, R_FAIL, "cannot read '%s'", path);
        return KILN_ERR_IO;
    }
    kiln_status s = kiln__onnx_read_tensor_named(buf, len, &t->info, &t->data, &t->name);
    free(buf);
    if (s != KILN_OK)
        set_reason(r, s == KILN_ERR_UNSUPPORTED ? R_UNSUPPORTED : R_FAIL, "reading '%s': %s: %s",
                   path, kiln_status_name(s), kiln_last_error());
    return s;
}

typedef struct data_set {
    char *name;
    tensor *in, *out;
    int n_in, n_out;
} data_set;

static void data_set_free(data_set *d) {
    for (int i = 0; i < d->n_in; i++)
        tensor_free(&d->in[i]);
    for (int i = 0; i < d->n_out; i++)
        tensor_free(&d->out[i]);
    free(d->in);
    free(d->out);
    free(d->name);
}

/* Reads prefix_0.pb, prefix_1.pb, ... until one is missing. */
static int read_tensors(const char *dir, const char *prefix, tensor **out, int *n, result *r) {
    *out = NULL;
    *n = 0;
    for (int k = 0;; k++) {
        char file[64];
        snprintf(file, sizeof file, "%s_%d.pb", prefix, k);
        char *p = path_join(dir, file);
        if (!is_file(p)) {
            free(p);
            return 0;
        }
        *out = xrealloc(*out, (size_t)(k + 1) * sizeof **out);
        kiln_status s = read_pb(p, &(*out)[k], r);
        free(p);
        if (s != KILN_OK) return -1;
        *n = k + 1;
    }
}

/* ---- comparison ----------------------------------------------------------- */

static int64_t numel(int rank, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= dims[i];
    return n;
}

static void index_str(int64_t flat, int rank, const int64_t *dims, char *buf, size_t n) {
    int64_t idx[KILN_MAX_RANK];
    for (int i = rank - 1; i >= 0; i--) {
        idx[i] = dims[i] ? flat % dims[i] : 0;
        flat = dims[i] ? flat / dims[i] : 0;
    }
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)idx[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* Whether element i of two bfloat16 tensors is the same value or one of its
 * two neighbours (one unit in the last place, same sign). RTOL is finer than
 * bfloat16's resolution (2^-8), so for bfloat16 the tolerance is one step:
 * the ONNX 1.12 test data truncates float -> bfloat16, while kiln rounds to
 * nearest even like ONNX's reference helper (float32_to_bfloat16) and ONNX
 * Runtime; both are within one step. */
static int bf16_neighbors(const void *a, const void *b, int64_t i) {
    uint16_t x = ((const uint16_t *)a)[i], y = ((const uint16_t *)b)[i];
    return !((x ^ y) & 0x8000) && (x > y ? x - y : y - x) <= 1;
}

/* Compares kiln's output with the expected tensor; returns 0 if equal. */
static int compare(const char *name, const char *set, const tensor *exp, kiln_dtype dt, int rank,
                   const int64_t *dims, const void *data, result *r) {
    kiln_dtype edt = exp->info.dtype;
    if (edt == KILN_DTYPE_UINT16 && dt == KILN_DTYPE_BFLOAT16) edt = dt; /* bfloat16 bits */
    if (dt != edt) {
        set_reason(r, R_FAIL, "%s: output '%s': dtype expected %s, got %s", set, name,
                   kiln_dtype_name(exp->info.dtype), kiln_dtype_name(dt));
        return 1;
    }
    int same = rank == exp->info.rank;
    for (int i = 0; same && i < rank; i++)
        same = dims[i] == exp->info.dims[i];
    if (!same) {
        char a[200], b[200];
        shape_str(exp->info.rank, exp->info.dims, a, sizeof a);
        shape_str(rank, dims, b, sizeof b);
        set_reason(r, R_FAIL, "%s: output '%s': shape expected %s, got %s", set, name, a, b);
        return 1;
    }
    int64_t n = numel(rank, dims);
    if (n > 0 && !data) {
        set_reason(r, R_FAIL, "%s: output '%s': no data", set, name);
        return 1;
    }
    int is_float = dt == KILN_DTYPE_FLOAT32 || dt == KILN_DTYPE_FLOAT64 ||
                   dt == KILN_DTYPE_FLOAT16 || dt == KILN_DTYPE_BFLOAT16;
    int64_t bad = 0, first = -1;
    double fe = 0, fg = 0;
    long long ie = 0, ig = 0;
    for (int64_t i = 0; i < n; i++) {
        int ok;
        if (is_float) {
            double e = kiln__load_f64(dt, exp->data, i), g = kiln__load_f64(dt, data, i);
            if (isnan(e) || isnan(g))
                ok = isnan(e) && isnan(g);
            else if (isinf(e) || isinf(g))
                ok = e == g;
            else
                ok = fabs(g - e) <= ATOL + RTOL * fabs(e) ||
                     (dt == KILN_DTYPE_BFLOAT16 && bf16_neighbors(exp->data, data, i));
            if (!ok && first < 0) fe = e, fg = g;
        } else {
            int64_t e = kiln__load_i64(dt, exp->data, i), g = kiln__load_i64(dt, data, i);
            ok = e == g;
            if (!ok && first < 0) ie = e, ig = g;
        }
        if (!ok) {
            if (first < 0) first = i;
            bad++;
        }
    }
    if (!bad) return 0;
    char at[200];
    index_str(first, rank, dims, at, sizeof at);
    if (is_float)
        set_reason(r, R_FAIL,
                   "%s: output '%s' (%s): %lld of %lld values differ; first at %s: expected %.9g, "
                   "got %.9g",
                   set, name, kiln_dtype_name(dt), (long long)bad, (long long)n, at, fe, fg);
    else
        set_reason(r, R_FAIL,
                   "%s: output '%s' (%s): %lld of %lld values differ; first at %s: expected %lld, "
                   "got %lld",
                   set, name, kiln_dtype_name(dt), (long long)bad, (long long)n, at, ie, ig);
    return 1;
}

/* ---- running one test ------------------------------------------------------ */

static void kiln_reason(result *r, int kind, const char *stage, kiln_status s) {
    set_reason(r, kind, "%s: %s: %s", stage, kiln_status_name(s), kiln_last_error());
}

/* Index of the model input that data-set input k binds to: by the tensor's
 * name when it names a model input, else by position. -1 if none. */
static int model_input_for(const kiln_model *m, const tensor *t, int k) {
    int n = kiln_model_num_inputs(m);
    if (t->name && *t->name) {
        for (int i = 0; i < n; i++) {
            kiln_io_info info;
            if (kiln_model_input_info(m, i, &info) == KILN_OK && !strcmp(info.name, t->name))
                return i;
        }
    }
    return k < n ? k : -1;
}

static int engine_has_input(const kiln_engine *e, const char *name) {
    for (int i = 0; i < kiln_engine_num_inputs(e); i++) {
        kiln_io_info info;
        if (kiln_engine_input_info(e, i, &info) == KILN_OK && !strcmp(info.name, name)) return 1;
    }
    return 0;
}

/* Engine output that output file k corresponds to (by name, else position). */
static const char *engine_output_for(const kiln_engine *e, const tensor *t, int k) {
    int n = kiln_engine_num_outputs(e);
    kiln_io_info info;
    if (t->name && *t->name)
        for (int i = 0; i < n; i++)
            if (kiln_engine_output_info(e, i, &info) == KILN_OK && !strcmp(info.name, t->name))
                return info.name;
    if (k < n && kiln_engine_output_info(e, k, &info) == KILN_OK) return info.name;
    return NULL;
}

/* Appends `word` to the space-separated list `list` (capacity n) unless it
 * is there already. */
static void add_word(char *list, size_t n, const char *word, size_t wlen) {
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ' ');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == wlen && !strncmp(p, word, wlen)) return;
        p += len + (end != NULL);
    }
    size_t have = strlen(list);
    if (have + wlen + 2 > n) return;
    if (have) list[have++] = ' ';
    memcpy(list + have, word, wlen);
    list[have + wlen] = 0;
}

/* Records in r->cpu_ops the op types of e's layers that run on the CPU
 * (kernel "cpu:..." in the JSON description) in an engine for a device. */
static void note_cpu_layers(kiln_engine *e, result *r) {
    const char *json = kiln_engine_describe(e, 1);
    const char *p = json ? strstr(json, "\"layers\"") : NULL;
    while (p && (p = strstr(p, "{\"name\"")) != NULL) {
        const char *op = strstr(p, "\"op\": \"");
        const char *kernel = strstr(p, "\"kernel\": \"");
        const char *next = strstr(p + 1, "{\"name\"");
        if (!op || !kernel || (next && kernel > next)) break;
        op += 7;
        const char *op_end = strchr(op, '"');
        if (!op_end) break;
        if (!strncmp(kernel + 11, "cpu:", 4))
            add_word(r->cpu_ops, sizeof r->cpu_ops, op, (size_t)(op_end - op));
        p = op_end;
    }
}

static void run_test(const char *dir, const options *o, result *r) {
    memset(r, 0, sizeof *r);
    kiln_model *m = NULL;
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    data_set *sets = NULL;
    size_t n_sets = 0, n_names = 0;
    char **names = NULL;
    kiln_status s;

    char *model_path = path_join(dir, "model.onnx");
    s = kiln_model_load_onnx(model_path, &m);
    if (s != KILN_OK) {
        /* the message starts with the model's path: drop it, the test is named */
        const char *msg = kiln_last_error();
        size_t pl = strlen(model_path);
        if (!strncmp(msg, model_path, pl) && msg[pl] == ':' && msg[pl + 1] == ' ') msg += pl + 2;
        set_reason(r, s == KILN_ERR_UNSUPPORTED ? R_UNSUPPORTED : R_FAIL, "load: %s: %s",
                   kiln_status_name(s), msg);
        free(model_path);
        goto done;
    }
    free(model_path);

    /* data sets */
    names = list_dir(dir, &n_names);
    sets = xrealloc(NULL, (n_names + 1) * sizeof *sets);
    for (size_t i = 0; i < n_names; i++) {
        if (strncmp(names[i], "test_data_set_", 14)) continue;
        char *sd = path_join(dir, names[i]);
        if (!is_dir(sd)) {
            free(sd);
            continue;
        }
        data_set *d = &sets[n_sets++];
        memset(d, 0, sizeof *d);
        d->name = xstrdup(names[i]);
        int bad = read_tensors(sd, "input", &d->in, &d->n_in, r) ||
                  read_tensors(sd, "output", &d->out, &d->n_out, r);
        free(sd);
        if (bad) goto done;
    }
    if (n_sets == 0) {
        set_reason(r, R_FAIL, "no test_data_set_* folders");
        goto done;
    }

    /* builder, with profiles covering the data sets' shapes for dynamic inputs */
    if ((s = kiln_builder_create(&b)) != KILN_OK) {
        kiln_reason(r, R_FAIL, "builder", s);
        goto done;
    }
    if ((s = kiln_builder_set_threads(b, o->threads)) != KILN_OK ||
        (s = kiln_builder_set_device(b, o->device, 0)) != KILN_OK) {
        kiln_reason(r, R_FAIL, "builder", s);
        goto done;
    }
    for (int i = 0; i < kiln_model_num_inputs(m); i++) {
        kiln_io_info info;
        if ((s = kiln_model_input_info(m, i, &info)) != KILN_OK) {
            kiln_reason(r, R_FAIL, "model input info", s);
            goto done;
        }
        int dynamic = info.rank < 0;
        for (int j = 0; j < info.rank; j++)
            dynamic |= info.dims[j] < 0;
        if (!dynamic) continue;
        int rank = -1, have = 0;
        int64_t mn[KILN_MAX_RANK], opt[KILN_MAX_RANK], mx[KILN_MAX_RANK];
        for (size_t d = 0; d < n_sets; d++) {
            for (int k = 0; k < sets[d].n_in; k++) {
                const tensor *t = &sets[d].in[k];
                if (model_input_for(m, t, k) != i) continue;
                if (!have) {
                    rank = t->info.rank;
                    memcpy(mn, t->info.dims, sizeof mn);
                    memcpy(opt, t->info.dims, sizeof opt);
                    memcpy(mx, t->info.dims, sizeof mx);
                    have = 1;
                } else if (t->info.rank == rank) {
                    for (int j = 0; j < rank; j++) {
                        if (t->info.dims[j] < mn[j]) mn[j] = t->info.dims[j];
                        if (t->info.dims[j] > mx[j]) mx[j] = t->info.dims[j];
                    }
                }
            }
        }
        if (!have) continue;
        if ((s = kiln_builder_set_profile(b, info.name, rank, mn, opt, mx)) != KILN_OK) {
            kiln_reason(r, s == KILN_ERR_UNSUPPORTED ? R_UNSUPPORTED : R_FAIL, "profile", s);
            goto done;
        }
    }
    if ((s = kiln_build(b, m, &e)) != KILN_OK) {
        kiln_reason(r, s == KILN_ERR_UNSUPPORTED ? R_UNSUPPORTED : R_FAIL, "build", s);
        goto done;
    }
    if (o->device != KILN_DEVICE_CPU) note_cpu_layers(e, r);
    if ((s = kiln_context_create(e, &c)) != KILN_OK) {
        kiln_reason(r, R_FAIL, "context", s);
        goto done;
    }

    for (size_t d = 0; d < n_sets; d++) {
        const data_set *ds = &sets[d];
        for (int k = 0; k < ds->n_in; k++) {
            const tensor *t = &ds->in[k];
            int mi = model_input_for(m, t, k);
            if (mi < 0) {
                set_reason(r, R_FAIL,
                           "%s: input_%d.pb has no matching model input (the model has %d)",
                           ds->name, k, kiln_model_num_inputs(m));
                goto done;
            }
            kiln_io_info info;
            kiln_model_input_info(m, mi, &info);
            if (!engine_has_input(e, info.name)) continue; /* pruned: unused by the outputs */
            /* ONNX's test data stores bfloat16 tensors as uint16 bit patterns */
            kiln_dtype dt = t->info.dtype;
            if (dt == KILN_DTYPE_UINT16 && info.dtype == KILN_DTYPE_BFLOAT16)
                dt = KILN_DTYPE_BFLOAT16;
            s = kiln_context_set_input(c, info.name, dt, t->info.rank, t->info.dims, t->data);
            if (s != KILN_OK) {
                char stage[300];
                snprintf(stage, sizeof stage, "%s: set input '%s'", ds->name, info.name);
                kiln_reason(r, R_FAIL, stage, s);
                goto done;
            }
        }
        if ((s = kiln_context_run(c)) != KILN_OK) {
            char stage[300];
            snprintf(stage, sizeof stage, "%s: run", ds->name);
            kiln_reason(r, R_FAIL, stage, s);
            goto done;
        }
        for (int k = 0; k < ds->n_out; k++) {
            const tensor *t = &ds->out[k];
            const char *oname = engine_output_for(e, t, k);
            if (!oname) {
                set_reason(r, R_FAIL, "%s: output_%d.pb ('%s') has no matching engine output",
                           ds->name, k, t->name ? t->name : "");
                goto done;
            }
            kiln_dtype dt = KILN_DTYPE_UNDEFINED;
            int rank = 0;
            int64_t dims[KILN_MAX_RANK] = {0};
            const void *data = NULL;
            if ((s = kiln_context_get_output(c, oname, &dt, &rank, dims, &data)) != KILN_OK) {
                char stage[300];
                snprintf(stage, sizeof stage, "%s: get output '%s'", ds->name, oname);
                kiln_reason(r, R_FAIL, stage, s);
                goto done;
            }
            if (rank < 0 || rank > KILN_MAX_RANK) {
                set_reason(r, R_FAIL, "%s: output '%s': bad rank %d", ds->name, oname, rank);
                goto done;
            }
            if (compare(oname, ds->name, t, dt, rank, dims, data, r)) goto done;
        }
    }
    r->kind = R_PASS;
done:
    for (size_t d = 0; d < n_sets; d++)
        data_set_free(&sets[d]);
    free(sets);
    free_names(names, n_names);
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_builder_free(b);
    kiln_model_free(m);
}

/* ---- isolation ------------------------------------------------------------- */

static const char *signal_name(int sig) {
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGFPE: return "SIGFPE";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGTRAP: return "SIGTRAP";
    case SIGSYS: return "SIGSYS";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    default: return NULL;
    }
}

static void run_isolated(const char *dir, const options *o, result *r) {
    memset(r, 0, sizeof *r);
    if (!o->fork) {
        run_test(dir, o, r);
        return;
    }
    int fds[2];
    if (pipe(fds) != 0) {
        set_reason(r, R_FAIL, "pipe failed: %s", strerror(errno));
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        set_reason(r, R_FAIL, "fork failed: %s", strerror(errno));
        return;
    }
    if (pid == 0) { /* child */
        close(fds[0]);
        struct rlimit nocore = {0, 0};
        setrlimit(RLIMIT_CORE, &nocore);
        signal(SIGALRM, SIG_DFL);
        if (o->timeout > 0) alarm((unsigned)o->timeout);
        result cr;
        run_test(dir, o, &cr);
        const char *p = (const char *)&cr;
        size_t left = sizeof cr;
        while (left > 0) {
            ssize_t w = write(fds[1], p, left);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) break;
            p += w;
            left -= (size_t)w;
        }
        close(fds[1]);
        _exit(0);
    }
    close(fds[1]);
    result cr;
    size_t got = 0;
    while (got < sizeof cr) {
        ssize_t n = read(fds[0], (char *)&cr + got, sizeof cr - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        const char *sn = signal_name(sig);
        r->crashed = 1;
        if (sig == SIGALRM)
            set_reason(r, R_FAIL, "timeout: still running after %d s", o->timeout);
        else if (sn)
            set_reason(r, R_FAIL, "crashed: %s", sn);
        else
            set_reason(r, R_FAIL, "crashed: signal %d", sig);
        return;
    }
    if (got != sizeof cr) {
        r->crashed = 1;
        set_reason(r, R_FAIL, "test process exited with status %d without a result",
                   WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return;
    }
    cr.reason[sizeof cr.reason - 1] = 0;
    *r = cr;
}

/* ---- expect / passing files -------------------------------------------------- */

static char **read_name_file(const char *path, size_t *count) {
    *count = 0;
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char **names = NULL;
    size_t n = 0, cap = 0;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *h = strchr(line, '#');
        if (h) *h = 0;
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        char *q = p + strlen(p);
        while (q > p && (q[-1] == '\n' || q[-1] == '\r' || q[-1] == ' ' || q[-1] == '\t'))
            *--q = 0;
        if (!*p) continue;
        if (n + 1 >= cap) {
            cap = cap ? cap * 2 : 256;
            names = xrealloc(names, cap * sizeof *names);
        }
        names[n++] = xstrdup(p);
    }
    fclose(f);
    if (!names) names = xrealloc(NULL, sizeof *names);
    names[n] = NULL;
    *count = n;
    return names;
}

/* Status of the test called `name`: NULL if it was not run; otherwise the
 * first non-passing entry's result, or a passing one. */
static const result *result_of(const test_list *l, const char *name) {
    const result *found = NULL;
    for (size_t i = 0; i < l->n; i++) {
        if (strcmp(l->v[i].name, name)) continue;
        if (l->v[i].r.kind != R_PASS) return &l->v[i].r;
        found = &l->v[i].r;
    }
    return found;
}

static int write_passing(const char *path, const test_list *l) {
    const char **names = xrealloc(NULL, (l->n + 1) * sizeof *names);
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++) {
        const result *r = result_of(l, l->v[i].name);
        if (r && r->kind == R_PASS) names[n++] = l->v[i].name;
    }
    qsort(names, n, sizeof *names, cmp_str);
    size_t tl = strlen(path) + 32;
    char *tmp = xrealloc(NULL, tl);
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL;
    if (ok) {
        fprintf(f,
                "# Conformance tests kiln passes (written by kiln_conformance --write-passing).\n");
        for (size_t i = 0; i < n; i++)
            if (i == 0 || strcmp(names[i], names[i - 1])) fprintf(f, "%s\n", names[i]);
        ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
        ok = (fclose(f) == 0) && ok;
        if (ok) ok = rename(tmp, path) == 0;
        if (!ok) remove(tmp);
    }
    if (!ok) fprintf(stderr, "kiln_conformance: cannot write '%s': %s\n", path, strerror(errno));
    free(tmp);
    free(names);
    return ok;
}

/* ---- main --------------------------------------------------------------------- */

/* Whether `dev` is usable. Asked in a child process when tests run forked:
 * a process that has initialized CUDA cannot use it in children it forks
 * afterwards. */
static int device_available(kiln_device dev, int use_fork) {
    if (!use_fork) return kiln_device_available(dev);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return kiln_device_available(dev);
    if (pid == 0) _exit(kiln_device_available(dev) ? 0 : 1);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* --device cuda: how many passing tests ran wholly on the device, and which
 * op types were left on the CPU in the others (with the number of tests). */
static void report_cpu_layers(const test_list *l) {
    char ops[64][48];
    int counts[64], n_ops = 0, on_device = 0, passed = 0;
    for (size_t i = 0; i < l->n; i++) {
        const result *r = &l->v[i].r;
        if (r->kind != R_PASS) continue;
        passed++;
        if (!r->cpu_ops[0]) {
            on_device++;
            continue;
        }
        printf("device: %s ran %s on the CPU\n", l->v[i].name, r->cpu_ops);
        for (const char *p = r->cpu_ops; *p;) {
            const char *end = strchr(p, ' ');
            size_t len = end ? (size_t)(end - p) : strlen(p);
            if (len >= sizeof ops[0]) len = sizeof ops[0] - 1;
            int k = 0;
            while (k < n_ops && (strlen(ops[k]) != len || strncmp(ops[k], p, len))) k++;
            if (k == n_ops && n_ops < 64) {
                memcpy(ops[k], p, len);
                ops[k][len] = 0;
                counts[k] = 0;
                n_ops++;
            }
            if (k < n_ops) counts[k]++;
            p += len + (end != NULL);
        }
    }
    printf("device: %d of %d passing tests ran every layer on the device; %d had layers on the CPU\n",
           on_device, passed, passed - on_device);
    if (n_ops) {
        printf("device: op types left on the CPU (tests):");
        for (int k = 0; k < n_ops; k++) printf(" %s (%d)", ops[k], counts[k]);
        printf("\n");
    }
}

static void usage(void) {
    fprintf(stderr,
            "usage: kiln_conformance [--expect FILE] [--write-passing FILE] [--verbose]\n"
            "                        [--threads N] [--timeout S] [--fork|--no-fork]\n"
            "                        [--device cpu|cuda] PATH...\n"
            "PATH: a test folder (with model.onnx) or a folder of test folders.\n"
            "--device: build the engines for this device (default cpu); with cuda and no\n"
            "          usable GPU the run is skipped (exit status 0).\n");
}

int main(int argc, char **argv) {
    options o = {.threads = 1, .timeout = 60, .fork = 1, .device = KILN_DEVICE_CPU};
    test_list tests = {0};
    int n_paths = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--expect") && i + 1 < argc) {
            o.expect = argv[++i];
        } else if (!strcmp(a, "--write-passing") && i + 1 < argc) {
            o.write_passing = argv[++i];
        } else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
            o.verbose = 1;
        } else if (!strcmp(a, "--threads") && i + 1 < argc) {
            o.threads = atoi(argv[++i]);
        } else if (!strcmp(a, "--timeout") && i + 1 < argc) {
            o.timeout = atoi(argv[++i]);
        } else if (!strcmp(a, "--fork")) {
            o.fork = 1;
        } else if (!strcmp(a, "--no-fork")) {
            o.fork = 0;
        } else if (!strcmp(a, "--device") && i + 1 < argc) {
            const char *d = argv[++i];
            if (!strcmp(d, "cpu")) {
                o.device = KILN_DEVICE_CPU;
            } else if (!strcmp(d, "cuda")) {
                o.device = KILN_DEVICE_CUDA;
            } else {
                fprintf(stderr, "kiln_conformance: unknown device '%s' (cpu or cuda)\n", d);
                return 2;
            }
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "kiln_conformance: unknown option '%s'\n", a);
            usage();
            return 2;
        } else {
            n_paths++;
            size_t before = tests.n;
            collect(&tests, a, 0);
            if (tests.n == before) fprintf(stderr, "kiln_conformance: no tests found in '%s'\n", a);
        }
    }
    if (!n_paths) {
        usage();
        return 2;
    }
    if (o.device != KILN_DEVICE_CPU && !device_available(o.device, o.fork)) {
        printf("conformance: skipped: --device cuda, but this kiln has no CUDA backend or no "
               "CUDA GPU is present (%zu tests not run)\n",
               tests.n);
        for (size_t i = 0; i < tests.n; i++) free(tests.v[i].path);
        free(tests.v);
        return 0;
    }

    int passed = 0, failed = 0, unsupported = 0, crashed = 0;
    for (size_t i = 0; i < tests.n; i++) {
        test_entry *t = &tests.v[i];
        run_isolated(t->path, &o, &t->r);
        if (t->r.kind == R_PASS) {
            passed++;
            if (o.verbose) printf("PASS %s\n", t->name);
        } else {
            if (t->r.kind == R_UNSUPPORTED)
                unsupported++;
            else
                failed++;
            crashed += t->r.crashed;
            printf("%s %s: %.200s\n", t->r.kind == R_UNSUPPORTED ? "UNSUPPORTED" : "FAIL", t->name,
                   t->r.reason);
        }
        fflush(stdout);
    }

    int rc = crashed ? 1 : 0;
    if (o.expect) {
        rc = 0;
        size_t n;
        char **names = read_name_file(o.expect, &n);
        if (!names) {
            fprintf(stderr, "kiln_conformance: cannot read '%s': %s\n", o.expect, strerror(errno));
            rc = 2;
        }
        int regressions = 0;
        for (size_t i = 0; i < n; i++) {
            const result *r = result_of(&tests, names[i]);
            if (r && r->kind == R_PASS) continue;
            regressions++;
            printf("REGRESSION: %s: %.200s\n", names[i],
                   r ? r->reason : "not found among the tests run");
        }
        if (regressions) {
            printf("%d expected test%s did not pass\n", regressions, regressions == 1 ? "" : "s");
            rc = 1;
        }
        if (names) free_names(names, n);
    }
    if (o.write_passing && !write_passing(o.write_passing, &tests) && !rc) rc = 2;

    if (o.device != KILN_DEVICE_CPU) report_cpu_layers(&tests);
    printf("conformance: %d passed, %d failed, %d unsupported (%zu total)\n", passed, failed,
           unsupported, tests.n);
    printf("%d passed, %d failed, %d skipped\n", passed, failed, unsupported);
    for (size_t i = 0; i < tests.n; i++)
        free(tests.v[i].path);
    free(tests.v);
    return rc;
}
