/* model.c -- the public kiln_model_* functions: loading ONNX models and
 * describing their inputs and outputs. */
#include "onnx/onnx_import.h"
#include "runtime/engine.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* The most a model read from a pipe may hold: ONNX files are protobuf
 * messages, which cannot exceed 2 GiB (larger models keep their weights in
 * external data). */
#define MODEL_STREAM_MAX ((size_t)2 << 30)

/* Reads a whole file into a new buffer (kiln__free): a regular file, or a
 * pipe / FIFO (`kiln build /dev/stdin`, `<(...)`) read to its end, at most
 * MODEL_STREAM_MAX bytes. Devices, sockets and folders are refused before
 * they are opened: /dev/zero or /dev/urandom were read until memory ran out
 * (32 GiB asked for), and opening some devices has effects of its own. */
static kiln_status read_file(const char *path, void **data, size_t *size) {
    *data = NULL;
    *size = 0;
    struct stat st;
    if (stat(path, &st) != 0) return KILN_FAIL(KILN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode))
        return KILN_FAIL(KILN_ERR_IO, "cannot read '%s': it is %s, not a model file", path,
                         kiln__file_type_name((unsigned)st.st_mode));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return KILN_FAIL(KILN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    kiln_status s = KILN_OK;
    char *buf = NULL;
    if (fstat(fd, &st) != 0) {
        s = KILN_FAIL(KILN_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
        goto done;
    }
    if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) { /* replaced since the stat */
        s = KILN_FAIL(KILN_ERR_IO, "cannot read '%s': it is %s, not a model file", path,
                      kiln__file_type_name((unsigned)st.st_mode));
        goto done;
    }
    /* Regular files: read st_size bytes. Pipes: read until EOF. */
    size_t cap = S_ISREG(st.st_mode) ? (size_t)st.st_size + 1 : 1 << 16, len = 0;
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size >= (uint64_t)SIZE_MAX / 2) {
        s = KILN_FAIL(KILN_ERR_IO, "'%s' is too large", path);
        goto done;
    }
    buf = kiln__malloc(cap);
    if (!buf) {
        s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory reading '%s' (%zu bytes)", path, cap);
        goto done;
    }
    for (;;) {
        if (len == cap) {
            if (!S_ISREG(st.st_mode) && len >= MODEL_STREAM_MAX) {
                s = KILN_FAIL(KILN_ERR_MODEL,
                              "'%s' gave %zu bytes and more: an ONNX file holds less than 2 GiB (larger "
                              "models keep their weights in external data)",
                              path, MODEL_STREAM_MAX);
                goto done;
            }
            if (cap > SIZE_MAX / 4) {
                s = KILN_FAIL(KILN_ERR_IO, "'%s' is too large", path);
                goto done;
            }
            char *nb = kiln__realloc(buf, cap * 2);
            if (!nb) {
                s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory reading '%s'", path);
                goto done;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            s = KILN_FAIL(KILN_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
            goto done;
        }
        if (r == 0) break;
        len += (size_t)r;
    }
    *data = buf;
    *size = len;
    buf = NULL;
done:
    kiln__free(buf);
    close(fd);
    return s;
}

static kiln_status add_warning(kiln_model *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static kiln_status add_warning(kiln_model *m, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    KILN_TRY(kiln__grow((void **)&m->warnings, &m->cap_warnings, m->n_warnings + 1,
                        sizeof *m->warnings));
    if (!(m->warnings[m->n_warnings] = kiln__strdup(msg)))
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    m->n_warnings++;
    return KILN_OK;
}

/* Whether a declared type contradicts the inferred one: dtypes, ranks, or
 * a dim known in both differ (a symbolic or unknown dim contradicts
 * nothing). */
static bool contradicts(const kiln_tinfo *decl, const kiln_tinfo *inf) {
    if (decl->dtype != KILN_DTYPE_UNDEFINED && inf->dtype != KILN_DTYPE_UNDEFINED &&
        decl->dtype != inf->dtype)
        return true;
    if (decl->rank < 0 || inf->rank < 0) return false;
    if (decl->rank != inf->rank) return true;
    for (int i = 0; i < decl->rank; i++)
        if (decl->dims[i] >= 0 && inf->dims[i] >= 0 && decl->dims[i] != inf->dims[i]) return true;
    return false;
}

/* Adds value v's declared info to m->declared (once per value: a value_info
 * entry and a graph output, or two value_info entries, for one value keep
 * the first). */
static kiln_status add_declared(kiln_model *m, bool *seen, int v, const kiln_tinfo *info, bool reported) {
    if (seen[v] || (info->dtype == KILN_DTYPE_UNDEFINED && info->rank < 0)) return KILN_OK;
    KILN_TRY(kiln__grow((void **)&m->declared, &m->cap_declared, m->n_declared + 1, sizeof *m->declared));
    m->declared[m->n_declared++] = (kiln_declared){.value = v, .reported = reported, .info = *info};
    m->declared[m->n_declared - 1].info.data = NULL;
    seen[v] = true;
    return KILN_OK;
}

/* Warnings: an opset outside the range kiln imports as it should, and
 * graph outputs whose declared type or shape contradicts what the graph
 * computes (the engine gives what the graph computes). Lists the declared
 * types of node outputs in m->declared (kiln_build checks them against the
 * shapes its profiles give). */
static kiln_status model_warnings(kiln_model *m, const kiln_tinfo *declared, const kiln_onnx_decl *vi, int n_vi) {
    const kiln_graph *g = m->graph;
    if (g->opset > KILN_ONNX_OPSET_MAX)
        KILN_TRY(add_warning(m,
                             "the model uses ai.onnx opset %lld; kiln supports opsets %d to %d, and "
                             "an operator whose meaning changed after opset %d is read with its "
                             "opset-%d meaning",
                             (long long)g->opset, KILN_ONNX_OPSET_MIN, KILN_ONNX_OPSET_MAX,
                             KILN_ONNX_OPSET_MAX, KILN_ONNX_OPSET_MAX));
    bool *seen = kiln__calloc((size_t)g->n_values + 1, sizeof *seen);
    if (!seen) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kiln_status s = KILN_OK;
    /* value_info first: the import applies it before the outputs' declarations */
    for (int i = 0; i < n_vi && s == KILN_OK; i++) s = add_declared(m, seen, vi[i].value, &vi[i].info, false);
    for (int i = 0; declared && i < g->n_outputs && s == KILN_OK; i++) {
        int v = g->outputs[i];
        bool bad = contradicts(&declared[i], &g->values[v].info);
        if (g->values[v].producer >= 0) s = add_declared(m, seen, v, &declared[i], bad);
        if (s != KILN_OK || !bad) continue;
        const kiln_tinfo *inf = &g->values[v].info;
        char a[192], b[192], pn[512];
        s = add_warning(
            m,
            "graph output '%s' is declared %s %s, but the graph computes %s %s: the engine's "
            "output is %s %s",
            kiln_printable(g->values[g->outputs[i]].name, pn, sizeof pn), kiln_dtype_name(declared[i].dtype),
            declared[i].rank < 0 ? "(rank unknown)"
                                 : kiln__shape_str(declared[i].rank, declared[i].dims, a, sizeof a),
            kiln_dtype_name(inf->dtype),
            inf->rank < 0 ? "(rank unknown)" : kiln__shape_str(inf->rank, inf->dims, b, sizeof b),
            kiln_dtype_name(inf->dtype), inf->rank < 0 ? "(rank unknown)" : b);
    }
    kiln__free(seen);
    return s;
}

static kiln_status model_from_memory(const void *data, size_t size, const char *base_dir,
                                     kiln_model **out) {
    kiln_model *m = kiln__calloc(1, sizeof *m);
    if (!m) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kiln_onnx_extras ex; /* filled on success, zeroed otherwise */
    kiln_status s = kiln__onnx_import(data, size, base_dir, &m->graph, &ex);
    m->producer = ex.producer;
    if (s == KILN_OK) s = kiln__graph_infer(m->graph);
    if (s == KILN_OK) s = model_warnings(m, ex.declared, ex.vi, ex.n_vi);
    kiln__free(ex.declared);
    kiln__free(ex.vi);
    if (s != KILN_OK) {
        kiln_model_free(m);
        return s;
    }
    *out = m;
    return KILN_OK;
}

kiln_status kiln_model_load_onnx(const char *path, kiln_model **out) {
    if (!out) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_model_load_onnx: out is NULL");
    *out = NULL;
    if (!path) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_model_load_onnx: path is NULL");
    kiln__clear_error();
    void *data;
    size_t size;
    KILN_TRY(read_file(path, &data, &size));
    /* base_dir: the model's folder */
    size_t n = strlen(path);
    char *dir = kiln__malloc(n + 2);
    if (!dir) {
        kiln__free(data);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    const char *slash = strrchr(path, '/');
    if (!slash) {
        strcpy(dir, ".");
    } else if (slash == path) {
        strcpy(dir, "/");
    } else {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = 0;
    }
    kiln_status s = model_from_memory(data, size, dir, out);
    kiln__free(dir);
    kiln__free(data);
    if (s != KILN_OK) return kiln__fail_prefix(s, "%s", path);
    return KILN_OK;
}

kiln_status kiln_model_load_onnx_memory(const void *data, size_t size, const char *base_dir,
                                        kiln_model **out) {
    if (!out)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_model_load_onnx_memory: out is NULL");
    *out = NULL;
    if (!data && size)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_model_load_onnx_memory: data is NULL");
    kiln__clear_error();
    return model_from_memory(data, size, base_dir, out);
}

void kiln_model_free(kiln_model *m) {
    if (!m) return;
    kiln__graph_free(m->graph);
    kiln__free(m->producer);
    kiln__free(m->declared);
    for (int i = 0; i < m->n_warnings; i++) kiln__free(m->warnings[i]);
    kiln__free(m->warnings);
    kiln__free(m);
}

int kiln_model_num_inputs(const kiln_model *m) { return m && m->graph ? m->graph->n_inputs : 0; }

int kiln_model_num_outputs(const kiln_model *m) { return m && m->graph ? m->graph->n_outputs : 0; }

int kiln_model_num_warnings(const kiln_model *m) { return m ? m->n_warnings : 0; }

const char *kiln_model_warning(const kiln_model *m, int index) {
    return m && index >= 0 && index < m->n_warnings ? m->warnings[index] : NULL;
}

static kiln_status io_info(const kiln_model *m, int index, bool input, kiln_io_info *out) {
    const char *fn = input ? "kiln_model_input_info" : "kiln_model_output_info";
    if (!m || !m->graph || !out)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "%s: model or out is NULL", fn);
    const kiln_graph *g = m->graph;
    int n = input ? g->n_inputs : g->n_outputs;
    if (index < 0 || index >= n)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "%s: index %d out of range (the model has %d %s)", fn, index, n,
                         input ? "inputs" : "outputs");
    const kiln_value *v = &g->values[input ? g->inputs[index] : g->outputs[index]];
    memset(out, 0, sizeof *out);
    out->name = v->name;
    out->dtype = v->info.dtype;
    out->rank = v->info.rank;
    for (int i = 0; i < v->info.rank && i < KILN_MAX_RANK; i++) {
        int64_t d = v->info.dims[i];
        out->dims[i] = d < 0 ? -1 : d;
        if (KILN_DIM_IS_SYM(d) && KILN_DIM_SYM_ID(d) < g->n_symbols)
            out->dim_names[i] = g->symbols[KILN_DIM_SYM_ID(d)];
    }
    return KILN_OK;
}

kiln_status kiln_model_input_info(const kiln_model *m, int index, kiln_io_info *out) {
    return io_info(m, index, true, out);
}

kiln_status kiln_model_output_info(const kiln_model *m, int index, kiln_io_info *out) {
    return io_info(m, index, false, out);
}
