/* engine_io.c -- public engine functions: load (mmap or memory), serialize,
 * save (atomically), free, and the getters. The format itself is in
 * src/format/. */
#include "format/format.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- load ------------------------------------------------------------- */

void kiln__mapping_release(const void *map, size_t map_size, const void *p, size_t n) {
    long pg = sysconf(_SC_PAGESIZE);
    if (!map || pg <= 0 || !p || !n) return;
    uintptr_t lo = (uintptr_t)map, hi = lo + map_size, a = (uintptr_t)p, b = a + n;
    if (a < lo || b > hi || b < a) return;
    uintptr_t mask = (uintptr_t)pg - 1;
    a = (a + mask) & ~mask; /* whole pages only: neighbours may still be in use */
    b &= ~mask;
    if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

void kiln__engine_release_pages(const kiln_engine *e, const void *p, size_t n) {
    if (e && e->blob_kind == 1) kiln__mapping_release(e->blob, e->blob_size, p, n);
}

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
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return KILN_FAIL(KILN_ERR_IO, "%s: cannot open engine: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        return KILN_FAIL(KILN_ERR_IO, "%s: cannot stat engine: %s", path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return KILN_FAIL(KILN_ERR_IO, "%s: not a regular file", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return KILN_FAIL(KILN_ERR_FORMAT, "%s: engine file is empty (0 bytes)", path);
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "%s: engine file is too large to map", path);
    }
    size_t size = (size_t)sb.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED)
        return KILN_FAIL(KILN_ERR_IO, "%s: cannot map engine: %s", path, strerror(err));
    kiln_status st = engine_from_blob(map, size, 1, out);
    if (st != KILN_OK) return kiln__fail_prefix(st, "%s", path);
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

static kiln_status write_all(int fd, const unsigned char *p, size_t n, const char *tmp) {
    while (n > 0) {
        size_t chunk = n < (1u << 30) ? n : (1u << 30);
        ssize_t w = write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return KILN_FAIL(KILN_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
        }
        if (w == 0) return KILN_FAIL(KILN_ERR_IO, "cannot write '%s': no progress", tmp);
        p += w;
        n -= (size_t)w;
    }
    return KILN_OK;
}

/* Flushes the folder holding `path` so that the rename itself is durable.
 * Best effort: some file systems refuse fsync on folders. */
static void sync_parent(const char *path) {
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, sizeof dir, ".");
    } else if (slash == path) {
        snprintf(dir, sizeof dir, "/");
    } else {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dir) return;
        memcpy(dir, path, n);
        dir[n] = 0;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

kiln_status kiln_engine_save(const kiln_engine *e, const char *path) {
    if (!e || !path || !*path)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_save: engine and path must be given");
    void *data;
    size_t size;
    KILN_TRY(kiln__format_write(e, &data, &size));

    /* "<path>.tmp.<pid>" in the same folder (so rename is atomic); a suffix
     * is added if a stale or concurrent temporary holds that name. */
    size_t plen = strlen(path);
    size_t cap = plen + 48;
    char *tmp = kiln__malloc(cap);
    if (!tmp) {
        kiln__aligned_free(data);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory saving an engine");
    }
    int fd = -1, open_err = EEXIST;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        if (attempt == 0)
            snprintf(tmp, cap, "%s.tmp.%ld", path, (long)getpid());
        else
            snprintf(tmp, cap, "%s.tmp.%ld.%d", path, (long)getpid(), attempt);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        open_err = errno;
        if (fd < 0 && open_err != EEXIST) break;
    }
    if (fd < 0) {
        kiln_status st = KILN_FAIL(KILN_ERR_IO, "%s: cannot create temporary file '%s': %s", path,
                                   tmp, strerror(open_err));
        kiln__free(tmp);
        kiln__aligned_free(data);
        return st;
    }
    kiln_status st = write_all(fd, data, size, tmp);
    kiln__aligned_free(data);
    if (st == KILN_OK && fsync(fd) != 0)
        st = KILN_FAIL(KILN_ERR_IO, "cannot flush '%s': %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == KILN_OK)
        st = KILN_FAIL(KILN_ERR_IO, "cannot close '%s': %s", tmp, strerror(errno));
    if (st == KILN_OK && rename(tmp, path) != 0)
        st = KILN_FAIL(KILN_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (st != KILN_OK) {
        unlink(tmp);
        kiln__free(tmp);
        return kiln__fail_prefix(st, "%s: engine not saved", path);
    }
    kiln__free(tmp);
    sync_parent(path);
    return KILN_OK;
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
