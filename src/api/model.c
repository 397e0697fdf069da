/* model.c -- the public kiln_model_* functions: loading ONNX models and
 * describing their inputs and outputs. */
#include "onnx/onnx_import.h"
#include "runtime/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads a whole file into a new buffer (kiln__free). */
static kiln_status read_file(const char *path, void **data, size_t *size) {
    *data = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return KILN_FAIL(KILN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    kiln_status s = KILN_OK;
    char *buf = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        s = KILN_FAIL(KILN_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
        goto done;
    }
    if (S_ISDIR(st.st_mode)) {
        s = KILN_FAIL(KILN_ERR_IO, "cannot read '%s': %s", path, strerror(EISDIR));
        goto done;
    }
    /* Regular files: read st_size bytes. Others (pipes): read until EOF. */
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

static kiln_status model_from_memory(const void *data, size_t size, const char *base_dir,
                                     kiln_model **out) {
    kiln_model *m = kiln__calloc(1, sizeof *m);
    if (!m) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kiln_status s = kiln__onnx_import(data, size, base_dir, &m->graph, &m->producer);
    if (s == KILN_OK) s = kiln__pass_infer(m->graph);
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
    kiln__free(m);
}

int kiln_model_num_inputs(const kiln_model *m) { return m && m->graph ? m->graph->n_inputs : 0; }

int kiln_model_num_outputs(const kiln_model *m) { return m && m->graph ? m->graph->n_outputs : 0; }

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
