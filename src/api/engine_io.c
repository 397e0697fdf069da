/* engine_io.c -- public engine functions: load (mmap or memory), serialize,
 * save (atomically), free, and the getters. The format itself is in
 * src/format/. */
#include "format/format.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- load ------------------------------------------------------------- */

/* Takes ownership of blob (kind 1 or 2) and parses it into a new engine. */
static kiln_status engine_from_blob(void *blob, size_t size, int kind, kiln_engine **out) {
    kiln_engine *e = kiln__engine_alloc();
    if (!e) {
        if (kind == 1) munmap(blob, size);
        else kiln__aligned_free(blob);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory loading an engine");
    }
    e->blob = blob;
    e->blob_size = size;
    e->blob_kind = kind;
    kiln_status st = kiln__format_read(blob, size, e);
    if (st != KILN_OK) {
        kiln_engine_free(e);
        return st;
    }
    *out = e;
    return KILN_OK;
}

kiln_status kiln_engine_load(const char *path, kiln_engine **out) {
    if (out) *out = NULL;
    if (!path || !out)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_load: path and out must not be NULL");
    int fd;
    int64_t fsize;
    KILN_TRY(kiln__open_regular(path, "engine", &fd, &fsize));
    if (fsize == 0) {
        close(fd);
        return KILN_FAIL(KILN_ERR_FORMAT, "%s: engine file is empty (0 bytes)", path);
    }
    if ((uint64_t)fsize > (uint64_t)SIZE_MAX) {
        close(fd);
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "%s: engine file is too large to map", path);
    }
    size_t size = (size_t)fsize;
    struct stat st0;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    if (map == MAP_FAILED || fstat(fd, &st0) != 0) {
        if (map != MAP_FAILED) munmap(map, size);
        close(fd);
        return KILN_FAIL(KILN_ERR_IO, "%s: cannot map engine: %s", path, strerror(err));
    }
    kiln_status st = engine_from_blob(map, size, 1, out);
    if (st != KILN_OK) {
        close(fd);
        return kiln__fail_prefix(st, "%s", path);
    }
    kiln__engine_watch_file(*out, fd, &st0, path); /* kept open: looked at now and then */
    return KILN_OK;
}

kiln_status kiln_engine_load_memory(const void *data, size_t size, kiln_engine **out) {
    if (out) *out = NULL;
    if (!out || (!data && size))
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "kiln_engine_load_memory: data and out must not be NULL");
    if (size == 0) return KILN_FAIL(KILN_ERR_FORMAT, "engine data is empty (0 bytes)");
    void *copy = kiln__aligned_alloc(size);
    if (!copy)
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory copying an engine (%zu bytes)", size);
    memcpy(copy, data, size);
    return engine_from_blob(copy, size, 2, out);
}

/* ---- save ------------------------------------------------------------- */

kiln_status kiln_engine_serialize(const kiln_engine *e, void **data, size_t *size) {
    if (data) *data = NULL;
    if (size) *size = 0;
    if (!e || !data || !size)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_serialize: NULL argument");
    return kiln__format_write(e, data, size);
}

/* An engine is written over a file only where that file is empty or an
 * engine (or a link, which the rename replaces, not what it points to):
 * `kiln build m.onnx -o m.onnx`, or -o naming the model's external data
 * file or the timing cache, replaced them without a word (the next build
 * then read the engine's bytes as weights). */
static kiln_status check_not_other_file(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return KILN_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return KILN_OK; /* (unreadable: the write names what is wrong) */
    char head[KILN_FORMAT_MAGIC_SIZE];
    ssize_t got = pread(fd, head, sizeof head, 0);
    close(fd);
    if (got == (ssize_t)sizeof head && !memcmp(head, KILN_FORMAT_MAGIC, sizeof head)) return KILN_OK;
    return KILN_FAIL(KILN_ERR_IO,
                     "engine not saved: '%s' exists and is not a kiln engine (a model, its weights, a timing "
                     "cache?); kiln replaces only engines and empty files: remove it or name another file",
                     path);
}

kiln_status kiln_engine_save(const kiln_engine *e, const char *path) {
    if (!e || !path || !*path)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_save: engine and path must be given");
    KILN_TRY(kiln__check_write_target(path, "engine not saved"));
    KILN_TRY(check_not_other_file(path));
    void *data;
    size_t size;
    KILN_TRY(kiln__format_write(e, &data, &size));
    kiln_status st = kiln__write_file_atomic(path, data, size, "engine not saved");
    kiln__aligned_free(data);
    return st;
}

/* ---- free and getters -------------------------------------------------- */

void kiln_engine_free(kiln_engine *e) {
    if (!e) return;
    kiln__engine_release(e);
    kiln__graph_free(e->graph);
    kiln__free(e->profiles);
    kiln__free(e->describe_text);
    kiln__free(e->describe_json);
    kiln__meta_clear(&e->meta);
    pthread_mutex_destroy(&e->dev_lock);
    if (e->map_open) close(e->map_fd);
    kiln__free(e->map_path);
    if (e->blob_kind == 1 && e->blob)
        munmap(e->blob, e->blob_size);
    else if (e->blob_kind == 2)
        kiln__aligned_free(e->blob);
    kiln__free(e);
}

int kiln_engine_num_inputs(const kiln_engine *e) {
    return e && e->graph ? e->graph->n_inputs : 0;
}

int kiln_engine_num_outputs(const kiln_engine *e) {
    return e && e->graph ? e->graph->n_outputs : 0;
}

static kiln_status io_info(const kiln_engine *e, int index, bool input, kiln_io_info *out) {
    const char *fn = input ? "kiln_engine_input_info" : "kiln_engine_output_info";
    if (!e || !e->graph || !out)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "%s: NULL argument", fn);
    const kiln_graph *g = e->graph;
    int n = input ? g->n_inputs : g->n_outputs;
    if (index < 0 || index >= n)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "%s: index %d is out of range (the engine has %d %s)",
                         fn, index, n, input ? "inputs" : "outputs");
    const kiln_value *v = &g->values[input ? g->inputs[index] : g->outputs[index]];
    memset(out, 0, sizeof *out);
    out->name = v->name;
    out->dtype = v->info.dtype;
    out->rank = v->info.rank;
    for (int d = 0; d < v->info.rank && d < KILN_MAX_RANK; d++) {
        int64_t x = v->info.dims[d];
        if (x >= 0) {
            out->dims[d] = x;
            continue;
        }
        out->dims[d] = -1; /* dynamic; internal symbol codes stay internal */
        if (KILN_DIM_IS_SYM(x) && KILN_DIM_SYM_ID(x) < g->n_symbols)
            out->dim_names[d] = g->symbols[KILN_DIM_SYM_ID(x)];
    }
    return KILN_OK;
}

kiln_status kiln_engine_input_info(const kiln_engine *e, int index, kiln_io_info *out) {
    return io_info(e, index, true, out);
}

kiln_status kiln_engine_output_info(const kiln_engine *e, int index, kiln_io_info *out) {
    return io_info(e, index, false, out);
}

kiln_status kiln_engine_input_profile(const kiln_engine *e, int index, int64_t *min, int64_t *opt,
                                      int64_t *max) {
    if (!e || !e->graph)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_input_profile: NULL engine");
    if (index < 0 || index >= e->graph->n_inputs)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "kiln_engine_input_profile: index %d is out of range (the engine has %d "
                         "inputs)",
                         index, e->graph->n_inputs);
    if (!e->profiles)
        return KILN_FAIL(KILN_ERR_INTERNAL, "kiln_engine_input_profile: engine has no profiles");
    const kiln_profile *p = &e->profiles[index];
    size_t n = (size_t)p->rank * sizeof(int64_t);
    if (min) memcpy(min, p->min, n);
    if (opt) memcpy(opt, p->opt, n);
    if (max) memcpy(max, p->max, n);
    return KILN_OK;
}

kiln_device kiln_engine_device(const kiln_engine *e) {
    return e ? (kiln_device)e->opts.device : KILN_DEVICE_CPU;
}

kiln_precision kiln_engine_precision(const kiln_engine *e) {
    return e ? (kiln_precision)e->opts.precision : KILN_PRECISION_FP32;
}

int kiln_engine_device_index(const kiln_engine *e) { return e ? e->opts.device_index : 0; }
