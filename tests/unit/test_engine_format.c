/* test_engine_format.c -- the engine file format (src/format/) and the
 * engine load/save API (src/api/engine_io.c).
 *
 * A small plan is built by hand (symbolic dims, constants of odd sizes and
 * several dtypes, an empty constant, nodes of registered ops with attribute
 * bytes), written, read back and compared field by field, through memory,
 * kiln_engine_save/kiln_engine_load (mmap) and kiln_engine_load_memory.
 * Then the failures: empty, every truncation, every flipped bit, foreign
 * files, newer/older format versions, unknown op ids, bad indices and
 * sizes (patched with the checksum recomputed, so the check itself is hit),
 * targets this machine cannot run, atomic save, and a seeded mutation run
 * that must never crash (run it under -DKILN_SANITIZE=ON). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_features.h"
#include "format/format.h"
#include "ops/fused_conv.h"
#include "ops/fused_se.h"
#include "ops/tensor_internal.h"
#include "test.h"

/* ---- building a test engine -------------------------------------------- */

/* A registered op that accepts n_in inputs and one output (0 if none). */
static int find_op(int n_in, int prefer) {
    const kiln_op_def *p = kiln__op_by_id(prefer);
    if (p && p->min_inputs <= n_in && (p->max_inputs < 0 || p->max_inputs >= n_in) &&
        p->min_outputs <= 1 && (p->max_outputs < 0 || p->max_outputs >= 1))
        return prefer;
    for (int id = 1; id < KILN_OP_ID_LIMIT; id++) {
        const kiln_op_def *op = kiln__op_by_id(id);
        if (op && op->min_inputs <= n_in && (op->max_inputs < 0 || op->max_inputs >= n_in) &&
            op->min_outputs <= 1 && (op->max_outputs < 0 || op->max_outputs >= 1))
            return id;
    }
    return 0;
}

static int add_value(kiln_graph *g, const char *name, kiln_dtype dt, int rank, const int64_t *dims) {
    int idx = -1;
    CHECK_OK(kiln__graph_add_value(g, name, &idx));
    if (idx < 0) return -1;
    kiln_value *v = &g->values[idx];
    v->info.dtype = dt;
    v->info.rank = rank;
    for (int d = 0; d < rank; d++) v->info.dims[d] = dims[d];
    return idx;
}

static int add_const(kiln_graph *g, const char *name, kiln_dtype dt, int rank, const int64_t *dims,
                     const void *data) {
    int idx = -1;
    CHECK_OK(kiln__graph_add_value(g, name, &idx));
    if (idx < 0) return -1;
    CHECK_OK(kiln__value_set_const(&g->values[idx], dt, rank, dims, data));
    return idx;
}

static int test_has_nodes; /* set by make_engine: whether ops were found */

/* The test plan:
 *   x [batch,4] f32 (input) ; axes = [1] i64 ; w [2,3] f32 ; b [5] u8 ;
 *   empty [0] f32 ; h [3] f16 ; y [batch,1] ; z [batch]
 *   n0 = OpA(x, axes) -> y ; n1 = OpB(y) -> z ; outputs z, y, w */
static kiln_engine *make_engine(void) {
    kiln_engine *e = kiln__calloc(1, sizeof *e);
    if (!e) return NULL;
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    if (!g) {
        kiln__free(e);
        return NULL;
    }
    e->graph = g;
    g->opset = 17;
    int sym = -1;
    CHECK_OK(kiln__graph_add_symbol(g, "batch", &sym));
    int64_t dx[2] = {KILN_DIM_SYM(sym), 4}, dy[2] = {KILN_DIM_SYM(sym), 1}, dz[1] = {KILN_DIM_SYM(sym)};
    float wv[6] = {1, 2, 3, 4, 5, 6.5f};
    int64_t axes[1] = {1};
    uint8_t bv[5] = {9, 8, 7, 6, 5};
    uint16_t hv[3] = {0x3c00, 0xc000, 0x7bff};
    int x = add_value(g, "x", KILN_DTYPE_FLOAT32, 2, dx);
    int ax = add_const(g, "axes", KILN_DTYPE_INT64, 1, (int64_t[]){1}, axes);
    int w = add_const(g, "w", KILN_DTYPE_FLOAT32, 2, (int64_t[]){2, 3}, wv);
    add_const(g, "b", KILN_DTYPE_UINT8, 1, (int64_t[]){5}, bv);
    add_const(g, "empty", KILN_DTYPE_FLOAT32, 1, (int64_t[]){0}, NULL);
    add_const(g, "h", KILN_DTYPE_FLOAT16, 1, (int64_t[]){3}, hv);
    int y = add_value(g, "y", KILN_DTYPE_FLOAT32, 2, dy);
    int z = add_value(g, "z", KILN_DTYPE_FLOAT32, 1, dz);
    add_value(g, "unknown_rank", KILN_DTYPE_UNDEFINED, -1, NULL);

    int op_a = find_op(2, KILN_OP_ReduceSum), op_b = find_op(1, KILN_OP_ReduceMax);
    test_has_nodes = op_a && op_b;
    if (test_has_nodes) {
        /* ReduceSum's attrs, valid (engines are validated when written
         * and loaded): keepdims 1 (y is [batch, 1]), noop_with_empty_axes 0 */
        unsigned char attrs[4096];
        memset(attrs, 0, sizeof attrs);
        attrs[0] = 1;
        CHECK(kiln__op_by_id(op_a)->attr_size <= sizeof attrs);
        CHECK_OK(kiln__graph_add_node(g, op_a, "n0", 2, (int[]){x, ax}, 1, (int[]){y}, attrs, NULL));
        memset(attrs, 0, sizeof attrs);
        CHECK_OK(kiln__graph_add_node(g, op_b, "n1", 1, (int[]){y}, 1, (int[]){z}, attrs, NULL));
    } else {
        printf("  (no registered ops with 1-2 inputs: node parts skipped)\n");
        y = x;
        z = x;
    }
    g->inputs = kiln__calloc(4, sizeof(int));
    g->outputs = kiln__calloc(4, sizeof(int));
    if (g->inputs && g->outputs) {
        g->cap_inputs = g->cap_outputs = 4;
        g->inputs[g->n_inputs++] = x;
        g->outputs[g->n_outputs++] = z;
        if (y != z) g->outputs[g->n_outputs++] = y;
        g->outputs[g->n_outputs++] = w;
    }
    kiln__graph_link(g);
    e->profiles = kiln__calloc(1, sizeof *e->profiles);
    if (e->profiles) {
        kiln_profile *p = &e->profiles[0];
        p->rank = 2;
        p->min[0] = 1, p->opt[0] = 8, p->max[0] = 32;
        p->min[1] = p->opt[1] = p->max[1] = 4;
    }
    e->opts.device = KILN_DEVICE_CPU;
    e->opts.precision = KILN_PRECISION_FP32;
    e->opts.threads = 3;
    e->opts.workspace = 12345;
    kiln__cpu_target(e->target, sizeof e->target);
    snprintf(e->builder_version, sizeof e->builder_version, "%s", kiln_version_string());
    return e;
}

static void *serialize(const kiln_engine *e, size_t *size) {
    void *data = NULL;
    *size = 0;
    CHECK_OK(kiln_engine_serialize(e, &data, size));
    return data;
}

/* An aligned private copy (format_read wants aligned bytes, like mmap). */
static unsigned char *copy_bytes(const void *data, size_t size) {
    unsigned char *p = kiln__aligned_alloc(size ? size : 1);
    if (p && size) memcpy(p, data, size);
    return p;
}

/* kiln__format_read into a fresh engine; the engine is freed (the bytes are
 * the caller's). */
static kiln_status read_only(const void *data, size_t size) {
    kiln_engine *e = kiln__calloc(1, sizeof *e);
    if (!e) return KILN_ERR_OUT_OF_MEMORY;
    kiln_status s = kiln__format_read(data, size, e);
    kiln_engine_free(e);
    return s;
}

/* ---- comparing ------------------------------------------------------------ */

static int same_engine(const kiln_engine *a, const kiln_engine *b) {
    int bad = 0;
#define SAME(c)                                                                \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "  %s:%d: differs: %s\n", __FILE__, __LINE__, #c); \
            bad++;                                                             \
        }                                                                      \
    } while (0)
    const kiln_graph *ga = a->graph, *gb = b->graph;
    SAME(!memcmp(&a->opts, &b->opts, sizeof a->opts));
    SAME(!strcmp(a->target, b->target));
    SAME(!strcmp(a->builder_version, b->builder_version));
    SAME(ga->opset == gb->opset);
    SAME(ga->n_symbols == gb->n_symbols);
    for (int i = 0; i < ga->n_symbols && i < gb->n_symbols; i++)
        SAME(!strcmp(ga->symbols[i], gb->symbols[i]));
    SAME(ga->n_values == gb->n_values);
    for (int i = 0; i < ga->n_values && i < gb->n_values; i++) {
        const kiln_value *va = &ga->values[i], *vb = &gb->values[i];
        SAME(!strcmp(va->name, vb->name));
        SAME(va->info.dtype == vb->info.dtype);
        SAME(va->info.rank == vb->info.rank);
        for (int d = 0; d < va->info.rank; d++) SAME(va->info.dims[d] == vb->info.dims[d]);
        SAME(va->flags == vb->flags);
        SAME(va->producer == vb->producer);
        SAME(va->n_uses == vb->n_uses);
        SAME(va->nbytes == vb->nbytes);
        if (va->flags & KILN_VALUE_CONST) {
            SAME(vb->info.data == vb->data);
            SAME(va->nbytes == 0 || !memcmp(va->data, vb->data, va->nbytes));
        } else {
            SAME(vb->data == NULL);
        }
    }
    SAME(ga->n_nodes == gb->n_nodes);
    for (int i = 0; i < ga->n_nodes && i < gb->n_nodes; i++) {
        const kiln_node *na = &ga->nodes[i], *nb = &gb->nodes[i];
        SAME(na->op_id == nb->op_id);
        SAME(na->op == nb->op);
        SAME(!strcmp(na->name, nb->name));
        SAME(na->n_in == nb->n_in && na->n_out == nb->n_out);
        if (na->n_in == nb->n_in)
            SAME(!memcmp(na->in, nb->in, sizeof(int) * (size_t)na->n_in));
        if (na->n_out == nb->n_out)
            SAME(!memcmp(na->out, nb->out, sizeof(int) * (size_t)na->n_out));
        if (na->op && na->op->attr_size)
            SAME(!memcmp(na->attrs, nb->attrs, na->op->attr_size));
    }
    SAME(ga->n_inputs == gb->n_inputs && ga->n_outputs == gb->n_outputs);
    if (ga->n_inputs == gb->n_inputs) {
        SAME(!memcmp(ga->inputs, gb->inputs, sizeof(int) * (size_t)ga->n_inputs));
        for (int i = 0; i < ga->n_inputs; i++) {
            const kiln_profile *pa = &a->profiles[i], *pb = &b->profiles[i];
            SAME(pa->rank == pb->rank);
            for (int d = 0; d < pa->rank; d++)
                SAME(pa->min[d] == pb->min[d] && pa->opt[d] == pb->opt[d] && pa->max[d] == pb->max[d]);
        }
    }
    if (ga->n_outputs == gb->n_outputs)
        SAME(!memcmp(ga->outputs, gb->outputs, sizeof(int) * (size_t)ga->n_outputs));
#undef SAME
    return bad == 0;
}

/* Every constant of a loaded engine borrows 256-aligned bytes from its blob. */
static int constants_in_place(const kiln_engine *e) {
    int ok = 1;
    for (int i = 0; i < e->graph->n_values; i++) {
        const kiln_value *v = &e->graph->values[i];
        if (!(v->flags & KILN_VALUE_CONST)) continue;
        const char *p = v->data, *base = e->blob;
        if (!v->data_borrowed || p < base || p + v->nbytes > base + e->blob_size ||
            (size_t)(p - base) % KILN_FORMAT_ALIGN != 0 || (uintptr_t)p % KILN_FORMAT_ALIGN != 0) {
            fprintf(stderr, "  constant '%s' is not in place / aligned\n", v->name);
            ok = 0;
        }
    }
    return ok;
}

/* ---- patching files -------------------------------------------------------- */

/* Finds a section; returns its offset and size (0 and 0 if absent). */
static uint64_t section_of(const unsigned char *f, const char *id, uint64_t *size) {
    uint32_t n = kiln__le32(f + KILN_FMT_OFF_SECTION_COUNT);
    uint32_t hs = kiln__le32(f + KILN_FMT_OFF_HEADER_SIZE);
    for (uint32_t i = 0; i < n; i++) {
        const unsigned char *s = f + hs + (size_t)i * KILN_FORMAT_SECTION_ENTRY;
        if (!memcmp(s, id, 4)) {
            if (size) *size = kiln__le64(s + 16);
            return kiln__le64(s + 8);
        }
    }
    if (size) *size = 0;
    return 0;
}

static unsigned char *section_entry(unsigned char *f, const char *id) {
    uint32_t n = kiln__le32(f + KILN_FMT_OFF_SECTION_COUNT);
    for (uint32_t i = 0; i < n; i++) {
        unsigned char *s = f + KILN_FORMAT_HEADER_SIZE + (size_t)i * KILN_FORMAT_SECTION_ENTRY;
        if (!memcmp(s, id, 4)) return s;
    }
    return NULL;
}

static void reseal(unsigned char *f, size_t size) {
    kiln__put_le64(f + KILN_FMT_OFF_CHECKSUM, kiln__format_checksum(f, size));
}

static unsigned char *value_record(unsigned char *f, int i) {
    return f + section_of(f, "VALS", NULL) + (size_t)i * KILN_FMT_VALUE_RECORD;
}

static unsigned char *node_record(unsigned char *f, int i) {
    unsigned char *p = f + section_of(f, "NODS", NULL);
    for (int k = 0; k < i; k++) {
        uint64_t rec = KILN_FMT_NODE_HEADER + 4 * ((uint64_t)kiln__le32(p + 8) + kiln__le32(p + 12)) +
                       kiln__le32(p + 16);
        p += (rec + 7) & ~(uint64_t)7;
    }
    return p;
}

static int value_index(const kiln_engine *e, const char *name) {
    return kiln__graph_find_value(e->graph, name);
}

/* ---- fixture --------------------------------------------------------------- */

static char tmpdir[256];

static void path_in_tmp(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", tmpdir, name);
}

/* Counts entries of a folder whose name contains `needle`. */
static int count_entries(const char *dir, const char *needle) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strstr(de->d_name, needle)) n++;
    closedir(d);
    return n;
}

static int write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = (size == 0 || fwrite(data, size, 1, f) == 1);
    return fclose(f) == 0 && ok;
}

/* ---- tests ---------------------------------------------------------------- */

TEST(test_roundtrip_memory) {
    kiln_engine *e = make_engine();
    if (!e) return;
    size_t size;
    void *data = serialize(e, &size);
    if (!data) goto out;
    CHECK(size >= KILN_FORMAT_HEADER_SIZE);
    CHECK(!memcmp(data, "KILN", 4));
    CHECK(kiln__le32((unsigned char *)data + KILN_FMT_OFF_VERSION) == KILN_FORMAT_VERSION);
    CHECK(kiln__le64((unsigned char *)data + KILN_FMT_OFF_FILE_SIZE) == size);

    /* Deterministic: the same engine gives the same bytes. */
    size_t size2;
    void *data2 = serialize(e, &size2);
    CHECK(data2 && size2 == size && !memcmp(data, data2, size));
    kiln_free(data2);

    kiln_engine *r = kiln__calloc(1, sizeof *r);
    CHECK_OK(kiln__format_read(data, size, r));
    if (r->graph) {
        CHECK(same_engine(e, r));
        /* Constants borrow from the bytes, at 256-byte file offsets. */
        for (int i = 0; i < r->graph->n_values; i++) {
            const kiln_value *v = &r->graph->values[i];
            if (!(v->flags & KILN_VALUE_CONST)) continue;
            CHECK(v->data_borrowed);
            CHECK((const char *)v->data >= (const char *)data &&
                  (const char *)v->data + v->nbytes <= (const char *)data + size);
            CHECK(((const char *)v->data - (const char *)data) % KILN_FORMAT_ALIGN == 0);
        }
        /* Writing what was read gives the same bytes again. */
        void *data3 = serialize(r, &size2);
        CHECK(data3 && size2 == size && !memcmp(data, data3, size));
        kiln_free(data3);
    }
    kiln_engine_free(r); /* blob_kind 0: the bytes stay ours */
    kiln_free(data);
out:
    kiln_engine_free(e);
}

TEST(test_save_load_mmap) {
    kiln_engine *e = make_engine();
    if (!e) return;
    char path[512];
    path_in_tmp(path, sizeof path, "model.kiln");
    CHECK_OK(kiln_engine_save(e, path));
    CHECK(count_entries(tmpdir, ".tmp") == 0);
    kiln_engine *l = NULL;
    CHECK_OK(kiln_engine_load(path, &l));
    if (l) {
        CHECK(l->blob_kind == 1);
        CHECK(same_engine(e, l));
        CHECK(constants_in_place(l));
        /* The saved file holds exactly the serialized bytes. */
        size_t size;
        void *data = serialize(e, &size);
        CHECK(data && l->blob_size == size && !memcmp(l->blob, data, size));
        kiln_free(data);
    }
    /* Saving over an existing file replaces it. */
    e->opts.threads = 5;
    CHECK_OK(kiln_engine_save(e, path));
    kiln_engine *l2 = NULL;
    CHECK_OK(kiln_engine_load(path, &l2));
    CHECK(l2 && l2->opts.threads == 5);
    CHECK(count_entries(tmpdir, ".tmp") == 0);
    kiln_engine_free(l2);
    kiln_engine_free(l);
    unlink(path);
    kiln_engine_free(e);
}

TEST(test_load_memory) {
    kiln_engine *e = make_engine();
    if (!e) return;
    size_t size;
    void *data = serialize(e, &size);
    if (data) {
        /* Deliberately misaligned source: load_memory copies into aligned memory. */
        unsigned char *odd = malloc(size + 1);
        if (odd) {
            memcpy(odd + 1, data, size);
            kiln_engine *l = NULL;
            CHECK_OK(kiln_engine_load_memory(odd + 1, size, &l));
            if (l) {
                CHECK(l->blob_kind == 2);
                CHECK(same_engine(e, l));
                CHECK(constants_in_place(l));
            }
            free(odd);
            /* The copy is the engine's: the caller's bytes may go. */
            if (l) {
                int wi = value_index(l, "w");
                CHECK(wi >= 0 && ((const float *)l->graph->values[wi].data)[5] == 6.5f);
            }
            kiln_engine_free(l);
        }
    }
    kiln_free(data);
    kiln_engine_free(e);
}

TEST(test_getters) {
    kiln_engine *e = make_engine();
    if (!e) return;
    size_t size;
    void *data = serialize(e, &size);
    kiln_engine *l = NULL;
    if (data) CHECK_OK(kiln_engine_load_memory(data, size, &l));
    kiln_free(data);
    if (l) {
        CHECK(kiln_engine_num_inputs(l) == 1);
        CHECK(kiln_engine_num_outputs(l) == (test_has_nodes ? 3 : 2));
        kiln_io_info info;
        CHECK_OK(kiln_engine_input_info(l, 0, &info));
        CHECK(!strcmp(info.name, "x"));
        CHECK(info.dtype == KILN_DTYPE_FLOAT32 && info.rank == 2);
        CHECK(info.dims[0] == -1 && info.dims[1] == 4);
        CHECK(info.dim_names[0] && !strcmp(info.dim_names[0], "batch"));
        CHECK(info.dim_names[1] == NULL);
        CHECK_OK(kiln_engine_output_info(l, 0, &info));
        CHECK(!strcmp(info.name, test_has_nodes ? "z" : "x"));
        CHECK_OK(kiln_engine_output_info(l, kiln_engine_num_outputs(l) - 1, &info));
        CHECK(!strcmp(info.name, "w") && info.rank == 2 && info.dims[0] == 2 && info.dims[1] == 3);
        int64_t mn[KILN_MAX_RANK], op[KILN_MAX_RANK], mx[KILN_MAX_RANK];
        CHECK_OK(kiln_engine_input_profile(l, 0, mn, op, mx));
        CHECK(mn[0] == 1 && op[0] == 8 && mx[0] == 32 && mn[1] == 4 && mx[1] == 4);
        CHECK(kiln_engine_device(l) == KILN_DEVICE_CPU);
        CHECK(kiln_engine_precision(l) == KILN_PRECISION_FP32);
        CHECK_ERR(kiln_engine_input_info(l, 1, &info), KILN_ERR_INVALID_ARGUMENT, "out of range");
        CHECK_ERR(kiln_engine_output_info(l, -1, &info), KILN_ERR_INVALID_ARGUMENT, "out of range");
        CHECK_ERR(kiln_engine_input_profile(l, 7, mn, op, mx), KILN_ERR_INVALID_ARGUMENT,
                  "out of range");
    }
    CHECK(kiln_engine_num_inputs(NULL) == 0);
    kiln_engine_free(l);
    kiln_engine_free(NULL);
    kiln_engine_free(e);
}

TEST(test_misuse) {
    void *data = (void *)1;
    size_t size = 1;
    kiln_engine *l = (kiln_engine *)1;
    CHECK_ERR(kiln_engine_serialize(NULL, &data, &size), KILN_ERR_INVALID_ARGUMENT, "NULL");
    CHECK(data == NULL && size == 0);
    CHECK_ERR(kiln_engine_load(NULL, &l), KILN_ERR_INVALID_ARGUMENT, "NULL");
    CHECK(l == NULL);
    CHECK_ERR(kiln_engine_load_memory(NULL, 10, &l), KILN_ERR_INVALID_ARGUMENT, "NULL");
    CHECK_ERR(kiln_engine_save(NULL, "x.kiln"), KILN_ERR_INVALID_ARGUMENT, "kiln_engine_save");
    CHECK_ERR(kiln_engine_load("/nonexistent/dir/model.kiln", &l), KILN_ERR_IO,
              "/nonexistent/dir/model.kiln");
    CHECK_ERR(kiln_engine_load(tmpdir, &l), KILN_ERR_IO, "not a regular file");
    CHECK(l == NULL);
    /* A FIFO is refused without a blocking open (which would wait for a
     * writer forever: the alarm turns that into a failure). */
    char fifo[512];
    path_in_tmp(fifo, sizeof fifo, "engine_fifo");
    CHECK(mkfifo(fifo, 0600) == 0);
    alarm(30);
    CHECK_ERR(kiln_engine_load(fifo, &l), KILN_ERR_IO, "is a FIFO (named pipe), not a regular file");
    alarm(0);
    unlink(fifo);
}

TEST(test_empty) {
    kiln_engine *l = (kiln_engine *)1;
    CHECK_ERR(kiln_engine_load_memory("", 0, &l), KILN_ERR_FORMAT, "empty");
    CHECK(l == NULL);
    char path[512];
    path_in_tmp(path, sizeof path, "empty.kiln");
    CHECK(write_file(path, "", 0));
    CHECK_ERR(kiln_engine_load(path, &l), KILN_ERR_FORMAT, "empty");
    CHECK(strstr(kiln_last_error(), path) != NULL); /* errors name the path */
    unlink(path);
}

TEST(test_truncated) {
    kiln_engine *e = make_engine();
    if (!e) return;
    size_t size;
    void *data = serialize(e, &size);
    unsigned char *buf = data ? copy_bytes(data, size) : NULL;
    if (buf) {
        int wrong = 0;
        for (size_t n = 1; n < size; n++) {
            kiln_status s = read_only(buf, n);
            if (s != KILN_ERR_FORMAT || !strstr(kiln_last_error(), "engine file is truncated")) {
                if (wrong++ < 5)
                    fprintf(stderr, "  prefix %zu: %s: %s\n", n, kiln_status_name(s),
                            kiln_last_error());
            }
        }
        CHECK(wrong == 0);
        char msg[128];
        snprintf(msg, sizeof msg, "engine file is truncated: %zu bytes, header says %zu", size - 1,
                 size);
        CHECK_ERR(read_only(buf, size - 1), KILN_ERR_FORMAT, msg);
        /* Through the file API too, with the path in the message. */
        char path[512];
        path_in_tmp(path, sizeof path, "short.kiln");
        CHECK(write_file(path, buf, size / 2));
        kiln_engine *l = NULL;
        CHECK_ERR(kiln_engine_load(path, &l), KILN_ERR_FORMAT, "truncated");
        CHECK(strstr(kiln_last_error(), "short.kiln") != NULL);
        unlink(path);
        /* Trailing bytes are refused too. */
        unsigned char *big = kiln__aligned_alloc(size + 8);
        if (big) {
            memcpy(big, buf, size);
            memset(big + size, 0, 8);
            CHECK_ERR(read_only(big, size + 8), KILN_ERR_FORMAT, "trailing data");
            kiln__aligned_free(big);
        }
    }
    kiln__aligned_free(buf);
    kiln_free(data);
    kiln_engine_free(e);
}

TEST(test_flipped_bytes) {
    kiln_engine *e = make_engine();
    if (!e) return;
    size_t size;
    void *data = serialize(e, &size);
    unsigned char *buf = data ? copy_bytes(data, size) : NULL;
    if (buf) {
        int wrong = 0;
        for (size_t pos = 0; pos < size; pos++) {
            for (int bit = 0; bit < 8; bit += 7) {
                buf[pos] ^= (unsigned char)(1u << bit);
                kiln_status s = read_only(buf, size);
                buf[pos] ^= (unsigned char)(1u << bit);
                /* Bytes 0..15 and the size are checked before the checksum. */
                bool want_checksum = pos >= 16 && !(pos >= 24 && pos < 32);
                if (s != KILN_ERR_FORMAT ||
                    (want_checksum && !strstr(kiln_last_error(), "checksum mismatch"))) {
                    if (wrong++ < 5)
                        fprintf(stderr, "  flip byte %zu bit %d: %s: %s\n", pos, bit,
                                kiln_status_name(s), kiln_last_error());
                }
            }
        }
        CHECK(wrong == 0);
        CHECK_OK(read_only(buf, size)); /* restored */
        buf[size - 1] ^= 0x40;
        CHECK_ERR(read_only(buf, size), KILN_ERR_FORMAT,
                  "engine file is corrupted (checksum mismatch)");
    }
    kiln__aligned_free(buf);
    kiln_free(data);
    kiln_engine_free(e);
}

TEST(test_foreign_files) {
    kiln_engine *l = NULL;
    const char *text = "hello, this is not an engine\n";
    CHECK_ERR(kiln_engine_load_memory(text, strlen(text), &l), KILN_ERR_FORMAT,
              "not a kiln engine file (bad magic)");
    /* An ONNX model: the committed one, or a protobuf-looking prefix. */
    struct stat sb;
    if (stat("tests/data/tiny_mlp.onnx", &sb) == 0) {
        CHECK_ERR(kiln_engine_load("tests/data/tiny_mlp.onnx", &l), KILN_ERR_FORMAT, "bad magic");
        CHECK(strstr(kiln_last_error(), "tiny_mlp.onnx") != NULL);
    } else {
        static const unsigned char onnx[] = {0x08, 0x07, 0x12, 0x07, 'p', 'y', 't', 'o', 'r', 'c', 'h'};
        CHECK_ERR(kiln_engine_load_memory(onnx, sizeof onnx, &l), KILN_ERR_FORMAT, "bad magic");
    }
    CHECK(l == NULL);
    CHECK_ERR(kiln_engine_load_memory("KIL", 3, &l), KILN_ERR_FORMAT, "truncated");
    CHECK_ERR(kiln_engine_load_memory("KIX", 3, &l), KILN_ERR_FORMAT, "bad magic");

    /* A file that went through a CRLF -> LF text-mode copy. */
    kiln_engine *e = make_engine();
    if (!e) return;
    size_t size;
    void *data = serialize(e, &size);
    if (data) {
        unsigned char *t = copy_bytes(data, size);
        if (t) {
            memmove(t + 5, t + 6, size - 6); /* "\r\n" -> "\n" */
            CHECK_ERR(read_only(t, size - 1), KILN_ERR_FORMAT, "text-mode");
            kiln__aligned_free(t);
        }
    }
    kiln_free(data);
    kiln_engine_free(e);
}

/* Serializes the test engine into an aligned, patchable copy. */
static unsigned char *patchable(size_t *size, kiln_engine **e_out) {
    kiln_engine *e = make_engine();
    if (!e) return NULL;
    void *data = serialize(e, size);
    unsigned char *buf = data ? copy_bytes(data, *size) : NULL;
    kiln_free(data);
    *e_out = e;
    return buf;
}

TEST(test_versions) {
    kiln_engine *e = NULL;
    size_t size;
    unsigned char *buf = patchable(&size, &e);
    if (buf) {
        kiln__put_le32(buf + KILN_FMT_OFF_VERSION, KILN_FORMAT_VERSION + 1);
        reseal(buf, size);
        char msg[160];
        snprintf(msg, sizeof msg,
                 "engine format version %d is newer than this kiln supports (%d); rebuild the "
                 "engine or upgrade kiln",
                 KILN_FORMAT_VERSION + 1, KILN_FORMAT_VERSION);
        CHECK_ERR(read_only(buf, size), KILN_ERR_FORMAT, msg);
        /* A newer version is recognized even if the rest changed shape. */
        kiln__put_le32(buf + KILN_FMT_OFF_VERSION, 1000);
        kiln__put_le64(buf + KILN_FMT_OFF_FILE_SIZE, 1);
        CHECK_ERR(read_only(buf, size), KILN_ERR_FORMAT, "version 1000 is newer");
        kiln__put_le64(buf + KILN_FMT_OFF_FILE_SIZE, size);
        kiln__put_le32(buf + KILN_FMT_OFF_VERSION, 0);
        reseal(buf, size);
        CHECK_ERR(read_only(buf, size), KILN_ERR_FORMAT,
                  "engine format version 0 is older than this kiln supports");
    }
    kiln__aligned_free(buf);
    kiln_engine_free(e);
}

/* The math field (offset 104): 0 (files from before it), 1 and 2 load;
 * any other value, resealed so the checksum passes, is refused naming it. */
TEST(test_math_field) {
    kiln_engine *e = NULL;
    size_t size;
    unsigned char *buf = patchable(&size, &e);
    if (buf) {
        const int32_t ok[] = {KILN_MATH_UNRECORDED, KILN_MATH_ACCURATE, KILN_MATH_FAST};
        const int32_t bad[] = {3, -1, INT32_MIN, INT32_MAX, 256};
        for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
            kiln__put_le32(buf + KILN_FMT_OFF_MATH, (uint32_t)ok[i]);
            reseal(buf, size);
            CHECK_OK(read_only(buf, size));
        }
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
            char msg[64];
            snprintf(msg, sizeof msg, "math %d) are invalid", bad[i]);
            kiln__put_le32(buf + KILN_FMT_OFF_MATH, (uint32_t)bad[i]);
            reseal(buf, size);
            CHECK_ERR(read_only(buf, size), KILN_ERR_FORMAT, msg);
            kiln__put_le32(buf + KILN_FMT_OFF_MATH, (uint32_t)bad[i] ^ 0x40u); /* a flipped bit: */
            CHECK_ERR(read_only(buf, size), KILN_ERR_FORMAT, "checksum mismatch"); /* unsealed */
        }
    }
    kiln__aligned_free(buf);
    kiln_engine_free(e);
}

/* Applies `patch` to a fresh copy, reseals it and expects (code, substr). */
typedef void (*patch_fn)(unsigned char *f, size_t size, const kiln_engine *e);

static void expect_patch(const char *what, patch_fn patch, kiln_status code, const char *substr) {
    kiln_engine *e = NULL;
    size_t size;
    unsigned char *buf = patchable(&size, &e);
    if (buf) {
        patch(buf, size, e);
        reseal(buf, size);
        kiln_status s = read_only(buf, size);
        if (s != code || !strstr(kiln_last_error(), substr)) {
            fprintf(stderr, "  %s: expected %s with \"%s\", got %s: \"%s\"\n", what,
                    kiln_status_name(code), substr, kiln_status_name(s), kiln_last_error());
            test_failed_checks++;
        }
        /* load_memory (a copy) gives the same verdict. */
        kiln_engine *l = NULL;
        CHECK(kiln_engine_load_memory(buf, size, &l) == code && l == NULL);
    }
    kiln__aligned_free(buf);
    kiln_engine_free(e);
}

static int unknown_op_id(void) {
    for (int id = KILN_OP_ID_LIMIT - 1; id > 0; id--)
        if (!kiln__op_by_id(id)) return id;
    return 0;
}

static void p_unknown_op(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le32(node_record(f, 1), (uint32_t)unknown_op_id());
}
static void p_huge_op(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le32(node_record(f, 0), 0xffffffffu);
}
static void p_node_device(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le32(node_record(f, 0) + 20, 7); /* a CPU engine's node claims device 7 */
}
static void p_node_input(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le32(node_record(f, 0) + KILN_FMT_NODE_HEADER, 99);
}
static void p_node_output_neg(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    unsigned char *n = node_record(f, 1);
    kiln__put_le32(n + KILN_FMT_NODE_HEADER + 4 * kiln__le32(n + 8), (uint32_t)-1);
}
static void p_node_order(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s;
    /* n0 reads z, which only n1 (later) produces */
    kiln__put_le32(node_record(f, 0) + KILN_FMT_NODE_HEADER, (uint32_t)value_index(e, "z"));
}
static void p_node_writes_const(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s;
    unsigned char *n = node_record(f, 1);
    kiln__put_le32(n + KILN_FMT_NODE_HEADER + 4 * kiln__le32(n + 8), (uint32_t)value_index(e, "w"));
}
static void p_node_count(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le32(node_record(f, 0) + 8, 0x40000000u); /* n_in */
}
static void p_attr_size(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    /* node 0's record grows into node 1's: the size check fires first */
    unsigned char *n = node_record(f, 0);
    kiln__put_le32(n + 16, kiln__le32(n + 16) + 8);
}
static void p_graph_input(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le32(f + section_of(f, "GRPH", NULL) + KILN_FMT_GRAPH_HEADER, (uint32_t)-5);
}
static void p_graph_output(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le32(f + section_of(f, "GRPH", NULL) + KILN_FMT_GRAPH_HEADER + 4, 1000000);
}
static void p_dtype(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s;
    kiln__put_le32(value_record(f, value_index(e, "x")) + 4, KILN_DTYPE_STRING);
}
static void p_rank(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s;
    kiln__put_le32(value_record(f, value_index(e, "y")) + 8, KILN_MAX_RANK + 1);
}
static void p_symbol(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s;
    kiln__put_le64(value_record(f, value_index(e, "x")) + 16, (uint64_t)KILN_DIM_SYM(7));
}
static void p_const_size(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s;
    unsigned char *v = value_record(f, value_index(e, "w"));
    kiln__put_le64(v + 88, kiln__le64(v + 88) - 4);
}
static void p_const_dims(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s;
    /* 2^62 x 4 elements: numel * dtype size overflows */
    unsigned char *v = value_record(f, value_index(e, "w"));
    kiln__put_le64(v + 16, (uint64_t)1 << 62);
}
static void p_const_misaligned(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s;
    unsigned char *v = value_record(f, value_index(e, "w"));
    kiln__put_le64(v + 80, kiln__le64(v + 80) + 8);
}
static void p_const_outside(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)e;
    unsigned char *v = value_record(f, value_index(e, "w"));
    kiln__put_le64(v + 80, (uint64_t)(s + 256) & ~(uint64_t)255);
}
static void p_const_wraps(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s;
    unsigned char *v = value_record(f, value_index(e, "w"));
    kiln__put_le64(v + 80, ~(uint64_t)255);
}
static void p_string_offset(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s;
    kiln__put_le32(value_record(f, value_index(e, "y")), 0x7fffffffu);
}
static void p_string_nul(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    uint64_t size, off = section_of(f, "STRS", &size);
    f[off + size - 1] = 'X'; /* the last string loses its terminator */
}
static void p_duplicate_name(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s;
    kiln__put_le32(value_record(f, value_index(e, "y")),
                   kiln__le32(value_record(f, value_index(e, "x"))));
}
static void p_section_bounds(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)e;
    kiln__put_le64(section_entry(f, "VALS") + 16, (uint64_t)s);
}
static void p_section_huge(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le64(section_entry(f, "PROF") + 8, ~(uint64_t)7);
}
static void p_section_count(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le32(f + KILN_FMT_OFF_SECTION_COUNT, 0x7fffffffu);
}
static void p_value_count(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le64(section_entry(f, "VALS") + 24, 0xffffffffffull);
}
static void p_unknown_required(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    memcpy(section_entry(f, "PROF"), "ZZZZ", 4);
}
static void p_unknown_optional(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    unsigned char *sec = section_entry(f, "PROF");
    memcpy(sec, "ZZZZ", 4);
    kiln__put_le32(sec + 4, 0);
}
static void p_profile(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le64(f + section_of(f, "PROF", NULL) + 8, (uint64_t)-3); /* min[0] */
}
static void p_profile_rank(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le32(f + section_of(f, "PROF", NULL), 3);
}
static void p_header_size(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le32(f + KILN_FMT_OFF_HEADER_SIZE, 100);
}
static void p_target_unterminated(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    memset(f + KILN_FMT_OFF_TARGET, 'a', KILN_FMT_TARGET_LEN);
}
static void p_precision(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le32(f + KILN_FMT_OFF_PRECISION, 77);
}
static void p_cuda(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le32(f + KILN_FMT_OFF_DEVICE, KILN_DEVICE_CUDA);
    memset(f + KILN_FMT_OFF_TARGET, 0, KILN_FMT_TARGET_LEN);
    strcpy((char *)f + KILN_FMT_OFF_TARGET, "cuda sm_90");
}
static void p_device_mismatch(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    memset(f + KILN_FMT_OFF_TARGET, 0, KILN_FMT_TARGET_LEN);
    strcpy((char *)f + KILN_FMT_OFF_TARGET, "cuda sm_90");
}
static void p_required_unknown(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    strcpy((char *)f + KILN_FMT_OFF_REQUIRED, "avx9000");
}
static void p_required_arch(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    memset(f + KILN_FMT_OFF_TARGET, 0, KILN_FMT_TARGET_LEN);
    strcpy((char *)f + KILN_FMT_OFF_TARGET, "cpu sparc64 vis3");
    strcpy((char *)f + KILN_FMT_OFF_REQUIRED, "vis3");
}
static const char *missing_feature; /* set before p_required_missing runs */
static void p_required_missing(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    snprintf((char *)f + KILN_FMT_OFF_REQUIRED, KILN_FMT_REQUIRED_LEN, "%s", missing_feature);
}
static void p_required_present(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    /* the features this machine has: accepted */
    char here[128];
    kiln__cpu_target(here, sizeof here);
    const char *feats = strchr(here + 4, ' ');
    snprintf((char *)f + KILN_FMT_OFF_REQUIRED, KILN_FMT_REQUIRED_LEN, "%s", feats ? feats + 1 : "");
}

TEST(test_patched_files) {
    if (test_has_nodes) {
        char msg[96];
        snprintf(msg, sizeof msg, "operator id %d (node 1 'n1')", unknown_op_id());
        expect_patch("unknown op", p_unknown_op, KILN_ERR_FORMAT, msg);
        expect_patch("huge op id", p_huge_op, KILN_ERR_FORMAT, "operator id 4294967295 (node 0 'n0')");
        expect_patch("node device", p_node_device, KILN_ERR_FORMAT,
                     "device 7 is neither the CPU nor the engine's device");
        expect_patch("node input index", p_node_input, KILN_ERR_FORMAT,
                     "node 0 'n0' (");
        expect_patch("node input index", p_node_input, KILN_ERR_FORMAT,
                     "input 0 refers to value 99");
        expect_patch("node output index", p_node_output_neg, KILN_ERR_FORMAT,
                     "output 0 refers to value -1");
        expect_patch("node order", p_node_order, KILN_ERR_FORMAT, "output of an earlier node");
        expect_patch("node writes constant", p_node_writes_const, KILN_ERR_FORMAT,
                     "already a constant");
        expect_patch("node io count", p_node_count, KILN_ERR_FORMAT, "runs past the node section");
        expect_patch("attr size", p_attr_size, KILN_ERR_FORMAT, "attributes are");
    }
    expect_patch("graph input index", p_graph_input, KILN_ERR_FORMAT,
                 "graph input 0 refers to value -5");
    expect_patch("graph output index", p_graph_output, KILN_ERR_FORMAT,
                 "graph output 0 refers to value 1000000");
    expect_patch("dtype", p_dtype, KILN_ERR_FORMAT, "value 0 'x': unknown dtype 8");
    expect_patch("rank", p_rank, KILN_ERR_FORMAT, "rank 9 is outside");
    expect_patch("symbol", p_symbol, KILN_ERR_FORMAT, "refers to symbol 7, but there are 1");
    expect_patch("constant size", p_const_size, KILN_ERR_FORMAT, "'w': constant data is 20 bytes");
    expect_patch("constant dims overflow", p_const_dims, KILN_ERR_FORMAT, "'w': constant data is");
    expect_patch("constant misaligned", p_const_misaligned, KILN_ERR_FORMAT, "256-aligned");
    expect_patch("constant outside", p_const_outside, KILN_ERR_FORMAT, "inside the weights section");
    expect_patch("constant wraps", p_const_wraps, KILN_ERR_FORMAT, "inside the weights section");
    expect_patch("string offset", p_string_offset, KILN_ERR_FORMAT, "outside the string table");
    expect_patch("string terminator", p_string_nul, KILN_ERR_FORMAT, "not NUL-terminated");
    expect_patch("duplicate name", p_duplicate_name, KILN_ERR_FORMAT, "defined twice");
    expect_patch("section bounds", p_section_bounds, KILN_ERR_FORMAT, "out of bounds");
    expect_patch("section offset", p_section_huge, KILN_ERR_FORMAT, "'PROF'");
    expect_patch("section count", p_section_count, KILN_ERR_FORMAT, "does not fit");
    expect_patch("value count", p_value_count, KILN_ERR_FORMAT, "value section");
    expect_patch("unknown required section", p_unknown_required, KILN_ERR_FORMAT,
                 "needs section 'ZZZZ', which this kiln does not know");
    expect_patch("unknown optional section", p_unknown_optional, KILN_ERR_FORMAT,
                 "section 'PROF' is missing");
    expect_patch("profile", p_profile, KILN_ERR_FORMAT, "profile of input 'x', dim 0");
    expect_patch("profile rank", p_profile_rank, KILN_ERR_FORMAT, "has rank 3");
    expect_patch("header size", p_header_size, KILN_ERR_FORMAT, "header size 100");
    expect_patch("target", p_target_unterminated, KILN_ERR_FORMAT, "'target' is not NUL-terminated");
    expect_patch("precision", p_precision, KILN_ERR_FORMAT, "precision 77");
    expect_patch("device/target", p_device_mismatch, KILN_ERR_FORMAT, "device is cpu");
    if (!kiln__backend_for(KILN_DEVICE_CUDA))
        expect_patch("cuda", p_cuda, KILN_ERR_UNSUPPORTED, "built for 'cuda sm_90'");
    expect_patch("required unknown", p_required_unknown, KILN_ERR_UNSUPPORTED,
                 "requires CPU feature 'avx9000', which this kiln does not know");
    expect_patch("required arch", p_required_arch, KILN_ERR_UNSUPPORTED,
                 "built for 'cpu sparc64 vis3'");
    static const char *const cands[] = {"sse4.2", "avx", "avx2", "fma", "f16c", "avx512f",
                                        "avx512bw", "avx512vl", "avx512vnni", "asimd", "fp16",
                                        "dotprod", "sve"};
    missing_feature = NULL;
    for (size_t i = 0; i < sizeof cands / sizeof cands[0] && !missing_feature; i++) {
        bool known;
        if (!kiln__cpu_has_feature(cands[i], &known) && known) missing_feature = cands[i];
    }
    if (missing_feature) {
        char msg[96];
        snprintf(msg, sizeof msg, "requires CPU feature '%s', which this machine", missing_feature);
        expect_patch("required missing", p_required_missing, KILN_ERR_UNSUPPORTED, msg);
    } else {
        printf("  (this CPU has every feature kiln knows: 'lacks' case skipped)\n");
    }
    /* Requiring what this CPU has loads fine. */
    {
        kiln_engine *e = NULL;
        size_t size;
        unsigned char *buf = patchable(&size, &e);
        if (buf) {
            p_required_present(buf, size, e);
            reseal(buf, size);
            CHECK_OK(read_only(buf, size));
        }
        kiln__aligned_free(buf);
        kiln_engine_free(e);
    }
}

/* An engine whose writer is a newer kiln, with a part this kiln does not
 * know (a required section, an operator id): the message names both kilns. */
static void p_newer_writer_section(unsigned char *f, size_t s, const kiln_engine *e) {
    p_unknown_required(f, s, e);
    kiln__put_le32(f + KILN_FMT_OFF_WRITER_VERSION, KILN_VERSION_NUMBER + 200);
}
static void p_newer_writer_op(unsigned char *f, size_t s, const kiln_engine *e) {
    p_unknown_op(f, s, e);
    kiln__put_le32(f + KILN_FMT_OFF_WRITER_VERSION, KILN_VERSION_NUMBER + 200);
}

TEST(test_compat_messages) {
    char newer[32], msg[400];
    snprintf(newer, sizeof newer, "%d.%d.%d", KILN_VERSION_MAJOR, KILN_VERSION_MINOR + 2,
             KILN_VERSION_PATCH);
    /* (c) a newer kiln's engine with a required section unknown here */
    snprintf(msg, sizeof msg,
             "engine file needs section 'ZZZZ', which this kiln does not know; the file was "
             "written by kiln %s, newer than this kiln (%s): upgrade kiln or rebuild the engine "
             "with this one",
             newer, kiln_version_string());
    expect_patch("newer writer, unknown section", p_newer_writer_section, KILN_ERR_FORMAT, msg);
    /* the same from a writer that is not newer: damage, not age */
    expect_patch("same writer, unknown section", p_unknown_required, KILN_ERR_FORMAT,
                 "which is not newer than this kiln");
    if (test_has_nodes) {
        snprintf(msg, sizeof msg,
                 "which this kiln does not know; the file was written by kiln %s, newer than "
                 "this kiln",
                 newer);
        expect_patch("newer writer, unknown op", p_newer_writer_op, KILN_ERR_FORMAT, msg);
    }
    /* (b) a newer format version: test_versions. (d) a CUDA engine on a kiln
     * without CUDA: test_patched_files ("cuda"). */

    /* (a) a required CPU feature this machine lacks, on any machine:
     * KILN_HIDE_CPU_FEATURES makes kiln act as if the CPU lacked it. */
    static const char *const cands[] = {"avx2", "avx", "sse4.2", "asimd"};
    const char *have = NULL;
    for (size_t i = 0; i < sizeof cands / sizeof cands[0] && !have; i++) {
        bool known;
        if (kiln__cpu_has_feature(cands[i], &known) && known) have = cands[i];
    }
    if (!have) {
        printf("  (no feature to hide on this CPU: 'lacks' case skipped)\n");
        return;
    }
    setenv("KILN_HIDE_CPU_FEATURES", have, 1);
    bool known = false;
    CHECK(!kiln__cpu_has_feature(have, &known) && known);
    char here[128];
    kiln__cpu_target(here, sizeof here);
    char needle[40];
    snprintf(needle, sizeof needle, " %s ", have);
    size_t hl = strlen(here);
    if (hl + 1 < sizeof here) here[hl] = ' ', here[hl + 1] = 0; /* so the last name matches too */
    CHECK(!strstr(here, needle)); /* not in the target string either */
    missing_feature = have;
    snprintf(msg, sizeof msg, "requires CPU feature '%s', which this machine ('cpu ", have);
    expect_patch("required hidden", p_required_missing, KILN_ERR_UNSUPPORTED, msg);
    expect_patch("required hidden", p_required_missing, KILN_ERR_UNSUPPORTED,
                 "lacks; rebuild the engine on this machine");
    /* a list with other names around it */
    snprintf(needle, sizeof needle, "foo,%s bar", have);
    setenv("KILN_HIDE_CPU_FEATURES", needle, 1);
    CHECK(!kiln__cpu_has_feature(have, &known) && known);
    unsetenv("KILN_HIDE_CPU_FEATURES");
    CHECK(kiln__cpu_has_feature(have, &known) && known);
}

/* ---- engine files written by earlier kilns (tests/data/engines) ---------- */

#define FIXTURES "tests/data/engines"

/* Deterministic input values in [-1, 1). */
static void fill_input(float *x, size_t n, unsigned seed) {
    uint32_t st = 2463534242u + seed;
    for (size_t i = 0; i < n; i++) {
        st ^= st << 13, st ^= st >> 17, st ^= st << 5;
        x[i] = (float)(st % 2000) / 1000.0f - 1.0f;
    }
}

/* Runs `e` on float inputs at each input's opt shape (seeded values); the
 * outputs are copied to out[k] (malloc'ed, n_out[k] floats). Returns 1 if
 * the run and every output are fine. */
static int run_at_opt(kiln_engine *e, float **out, size_t *n_out, int max_out) {
    int ok = 0, n_in = kiln_engine_num_inputs(e), n_o = kiln_engine_num_outputs(e);
    kiln_context *c = NULL;
    float *xs[8] = {0};
    if (n_in > 8 || n_o > max_out || kiln_context_create(e, &c) != KILN_OK) goto done;
    for (int i = 0; i < n_in; i++) {
        kiln_io_info info;
        int64_t mn[KILN_MAX_RANK], op[KILN_MAX_RANK], mx[KILN_MAX_RANK];
        if (kiln_engine_input_info(e, i, &info) != KILN_OK || info.dtype != KILN_DTYPE_FLOAT32 ||
            kiln_engine_input_profile(e, i, mn, op, mx) != KILN_OK)
            goto done;
        size_t n = 1;
        for (int d = 0; d < info.rank; d++) n *= (size_t)op[d];
        xs[i] = malloc((n ? n : 1) * sizeof(float));
        if (!xs[i]) goto done;
        fill_input(xs[i], n, (unsigned)i);
        if (kiln_context_set_input(c, info.name, KILN_DTYPE_FLOAT32, info.rank, op, xs[i]) != KILN_OK)
            goto done;
    }
    if (kiln_context_run(c) != KILN_OK) goto done;
    for (int k = 0; k < n_o; k++) {
        kiln_io_info info;
        kiln_dtype dt;
        int rank;
        int64_t dims[KILN_MAX_RANK];
        const void *data;
        if (kiln_engine_output_info(e, k, &info) != KILN_OK ||
            kiln_context_get_output(c, info.name, &dt, &rank, dims, &data) != KILN_OK ||
            dt != KILN_DTYPE_FLOAT32)
            goto done;
        size_t n = 1;
        for (int d = 0; d < rank; d++) n *= (size_t)dims[d];
        out[k] = malloc((n ? n : 1) * sizeof(float));
        if (!out[k]) goto done;
        memcpy(out[k], data, n * sizeof(float));
        n_out[k] = n;
        for (size_t j = 0; j < n; j++)
            if (!isfinite(out[k][j])) goto done;
    }
    ok = 1;
done:
    if (!ok) fprintf(stderr, "  run at opt shapes failed: %s\n", kiln_last_error());
    for (int i = 0; i < 8; i++) free(xs[i]);
    kiln_context_free(c);
    return ok;
}

/* The model a fixture was built from (see make_fixtures.sh), or NULL. */
static const char *fixture_model(const char *name) {
    if (!strcmp(name, "tiny_mlp_v1.kiln")) return "tests/data/tiny_mlp.onnx";
    if (!strcmp(name, "stress_cnn_v1.kiln")) return "tests/stress/stress_cnn.onnx";
    if (!strncmp(name, "attn_block_v", 12)) return "tests/data/attention/t211_ts_sdpa_scale_bias.onnx";
    return NULL;
}

/* Builds `model` today with the fixture's profiles. */
static kiln_engine *rebuild_like(const kiln_engine *fx, const char *model) {
    kiln_model *m = NULL;
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    CHECK_OK(kiln_model_load_onnx(model, &m));
    CHECK_OK(kiln_builder_create(&b));
    if (b) CHECK_OK(kiln_builder_set_tuning(b, 0)); /* quick: default tactics */
    for (int i = 0; m && b && i < kiln_engine_num_inputs(fx); i++) {
        kiln_io_info info;
        int64_t mn[KILN_MAX_RANK], op[KILN_MAX_RANK], mx[KILN_MAX_RANK];
        CHECK_OK(kiln_engine_input_info(fx, i, &info));
        CHECK_OK(kiln_engine_input_profile(fx, i, mn, op, mx));
        CHECK_OK(kiln_builder_set_profile(b, info.name, info.rank, mn, op, mx));
    }
    if (m && b) CHECK_OK(kiln_build(b, m, &e));
    kiln_builder_free(b);
    kiln_model_free(m);
    return e;
}

/* GlobalAveragePool had no attributes before format version 4: a version-3
 * file with one loads (an NCHW pool), while the same bytes marked version 4
 * are refused by their attribute size, named. */
TEST(test_gap_attrs_by_version) {
    FILE *f = fopen(FIXTURES "/stress_cnn_v3.kiln", "rb");
    CHECK(f != NULL);
    if (!f) return;
    unsigned char *buf = kiln__aligned_alloc(1 << 16);
    size_t size = buf ? fread(buf, 1, 1 << 16, f) : 0;
    fclose(f);
    CHECK(size > KILN_FORMAT_HEADER_SIZE && kiln__le32(buf + KILN_FMT_OFF_VERSION) == 3);
    if (size > KILN_FORMAT_HEADER_SIZE) {
        CHECK_OK(read_only(buf, size));
        kiln__put_le32(buf + KILN_FMT_OFF_VERSION, 4);
        reseal(buf, size);
        CHECK_ERR(read_only(buf, size), KILN_ERR_FORMAT, "(GlobalAveragePool): attributes are 0 bytes");
    }
    kiln__aligned_free(buf);
}

/* Every engine fixture (written by an earlier kiln, format version 1 to 6)
 * loads, is described, runs, and matches the same model built today. */
/* ---- SRCS: the ONNX nodes each layer came from ----------------------------- */

static const char two_sources[] = "conv1\0bn+1\0"; /* a name may hold a '+' */

/* The test engine with sources: n0 made from two nodes, n1 added by kiln. */
static unsigned char *patchable_sources(size_t *size, kiln_engine **e_out) {
    kiln_engine *e = make_engine();
    if (!e) return NULL;
    *e_out = e;
    if (!test_has_nodes) return NULL;
    CHECK_OK(kiln__node_set_sources(&e->graph->nodes[0], two_sources, sizeof two_sources - 1, 2));
    e->graph->nodes[1].added = true;
    void *data = serialize(e, size);
    unsigned char *buf = data ? copy_bytes(data, *size) : NULL;
    kiln_free(data);
    return buf;
}

static void p_srcs_count(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le32(f + section_of(f, "SRCS", NULL), 1000000);
}
static void p_srcs_string(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le32(f + section_of(f, "SRCS", NULL) + 4, 0x7fffffff);
}
static void p_srcs_records(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    kiln__put_le64(section_entry(f, "SRCS") + 24, 5);
}
static void p_srcs_trailing(unsigned char *f, size_t s, const kiln_engine *e) {
    (void)s, (void)e;
    unsigned char *sec = section_entry(f, "SRCS");
    kiln__put_le64(sec + 16, kiln__le64(sec + 16) + 4); /* into the gap before WGTS */
}

TEST(test_sources) {
    kiln_engine *e = NULL, *l = NULL;
    size_t size = 0;
    unsigned char *buf = patchable_sources(&size, &e);
    if (!buf) { /* no registered ops: nothing to attach sources to */
        kiln_engine_free(e);
        return;
    }
    /* they survive the file, and the section is optional (flag 0) */
    CHECK((kiln__le32(section_entry(buf, "SRCS") + 4) & KILN_FMT_SECTION_REQUIRED) == 0);
    CHECK_OK(kiln_engine_load_memory(buf, size, &l));
    if (l) {
        CHECK(kiln_engine_layer_num_sources(l, 0) == 2);
        CHECK(!strcmp(kiln_engine_layer_source(l, 0, 0), "conv1"));
        CHECK(!strcmp(kiln_engine_layer_source(l, 0, 1), "bn+1"));
        CHECK(kiln_engine_layer_source(l, 0, 2) == NULL);
        CHECK(kiln_engine_layer_num_sources(l, 1) == 0);
        CHECK(kiln_engine_layer_num_sources(l, 2) == -1 && kiln_engine_layer_num_sources(NULL, 0) == -1);
        const char *json = kiln_engine_describe(l, 1), *text = kiln_engine_describe(l, 0);
        CHECK(strstr(json, "\"sources\": [\"conv1\", \"bn+1\"]") && strstr(json, "\"sources\": []"));
        CHECK(strstr(text, "sources 'conv1', 'bn+1'") && strstr(text, "(added by kiln)"));
        kiln_engine_free(l);
        l = NULL;
    }
    /* a kiln that does not know SRCS skips it: here, an engine without it
     * gives each layer's name split at '+' */
    memcpy(section_entry(buf, "SRCS"), "ZZZ1", 4);
    reseal(buf, size);
    CHECK_OK(kiln_engine_load_memory(buf, size, &l));
    if (l) {
        CHECK(kiln_engine_layer_num_sources(l, 0) == 1 && !strcmp(kiln_engine_layer_source(l, 0, 0), "n0"));
        CHECK(kiln_engine_layer_num_sources(l, 1) == 1);
        kiln_engine_free(l);
    }
    kiln__aligned_free(buf);
    kiln_engine_free(e);
    /* a damaged section is refused */
    static const struct {
        patch_fn patch;
        const char *msg;
    } bad[] = {{p_srcs_count, "source section: node 0 'n0' has 1000000 sources"},
               {p_srcs_string, "outside the string table"},
               {p_srcs_records, "source section: 5 records for 2 nodes"},
               {p_srcs_trailing, "source section has 4 bytes after the last node"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        buf = patchable_sources(&size, &e);
        if (buf) {
            bad[i].patch(buf, size, e);
            reseal(buf, size);
            CHECK_ERR(read_only(buf, size), KILN_ERR_FORMAT, bad[i].msg);
        }
        kiln__aligned_free(buf);
        kiln_engine_free(e);
    }
}

TEST(test_fixtures) {
    DIR *d = opendir(FIXTURES);
    CHECK(d != NULL);
    if (!d) return;
    int n_fixtures = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len < 6 || strcmp(de->d_name + len - 5, ".kiln")) continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", FIXTURES, de->d_name);
        n_fixtures++;
        FILE *f = fopen(path, "rb");
        unsigned char head[16] = {0};
        CHECK(f && fread(head, 1, sizeof head, f) == sizeof head);
        if (f) fclose(f);
        uint32_t version = kiln__le32(head + KILN_FMT_OFF_VERSION);
        if (version < KILN_FORMAT_MIN_VERSION) { /* an old format, dropped: a clear refusal */
            kiln_engine *e = NULL;
            CHECK_ERR(kiln_engine_load(path, &e), KILN_ERR_FORMAT, "is older than this kiln");
            continue;
        }
        kiln_engine *e = NULL;
        CHECK_OK(kiln_engine_load(path, &e));
        if (!e) {
            fprintf(stderr, "  fixture %s does not load\n", path);
            continue;
        }
        const char *text = kiln_engine_describe(e, 0), *json = kiln_engine_describe(e, 1);
        CHECK(text && strstr(text, "kiln engine (built by kiln ") && strstr(text, "layers ("));
        CHECK(json && json[0] == '{');
        float *out[4] = {0}, *ref[4] = {0};
        size_t n_out[4] = {0}, n_ref[4] = {0};
        CHECK(run_at_opt(e, out, n_out, 4));
        const char *model = fixture_model(de->d_name);
        kiln_engine *today = model ? rebuild_like(e, model) : NULL;
        if (today) {
            CHECK(run_at_opt(today, ref, n_ref, 4));
            for (int k = 0; k < kiln_engine_num_outputs(e) && k < 4; k++) {
                CHECK(out[k] && ref[k] && n_out[k] == n_ref[k]);
                float err = 0;
                for (size_t j = 0; out[k] && ref[k] && j < n_out[k] && j < n_ref[k]; j++) {
                    float dlt = fabsf(out[k][j] - ref[k][j]);
                    if (!(dlt <= err)) err = dlt;
                }
                if (!(err <= 1e-4f))
                    fprintf(stderr, "  fixture %s output %d differs from today's build by %g\n",
                            path, k, (double)err);
                CHECK(err <= 1e-4f);
            }
        }
        printf("  fixture %s: loaded, described, ran%s\n", de->d_name,
               today ? ", matches today's build" : "");
        for (int k = 0; k < 4; k++) free(out[k]), free(ref[k]);
        kiln_engine_free(today);
        kiln_engine_free(e);
    }
    closedir(d);
    CHECK(n_fixtures >= 2);
}

TEST(test_writer_refuses_invalid) {
    kiln_engine *e = make_engine();
    if (!e) return;
    void *data = NULL;
    size_t size = 0;
    if (test_has_nodes) {
        kiln_node *n0 = &e->graph->nodes[0];
        int saved = n0->in[0];
        n0->in[0] = value_index(e, "z"); /* produced later */
        CHECK_ERR(kiln_engine_serialize(e, &data, &size), KILN_ERR_INTERNAL,
                  "refusing to write an invalid engine");
        CHECK(data == NULL);
        char path[512];
        path_in_tmp(path, sizeof path, "invalid.kiln");
        CHECK_ERR(kiln_engine_save(e, path), KILN_ERR_INTERNAL, "refusing");
        CHECK(access(path, F_OK) != 0 && count_entries(tmpdir, "invalid") == 0);
        n0->in[0] = saved;
    }
    kiln_profile saved = e->profiles[0];
    e->profiles[0].max[1] = 5; /* static dim with a range */
    CHECK_ERR(kiln_engine_serialize(e, &data, &size), KILN_ERR_INTERNAL, "profile of input 'x'");
    e->profiles[0] = saved;
    /* Dead nodes are not written. */
    if (test_has_nodes) {
        kiln_graph *g = e->graph;
        int d = add_value(g, "dead_out", KILN_DTYPE_FLOAT32, 0, NULL);
        int ni = -1;
        CHECK_OK(kiln__graph_add_node(g, g->nodes[1].op_id, "dead", 1,
                                      (int[]){value_index(e, "y")}, 1, (int[]){d},
                                      g->nodes[1].attrs, &ni));
        if (ni >= 0) g->nodes[ni].dead = true;
        kiln__graph_link(g);
        CHECK_OK(kiln_engine_serialize(e, &data, &size));
        kiln_engine *l = NULL;
        if (data) CHECK_OK(kiln_engine_load_memory(data, size, &l));
        CHECK(l && l->graph->n_nodes == 2 && l->graph->n_values == g->n_values);
        kiln_engine_free(l);
        kiln_free(data);
    }
    kiln_engine_free(e);
}

TEST(test_save_atomic) {
    kiln_engine *e = make_engine();
    if (!e) return;
    char dir[512], path[600];
    path_in_tmp(dir, sizeof dir, "no/such/folder");
    snprintf(path, sizeof path, "%s/model.kiln", dir);
    CHECK_ERR(kiln_engine_save(e, path), KILN_ERR_IO, "model.kiln");
    CHECK(access(dir, F_OK) != 0);
    CHECK(count_entries(tmpdir, ".tmp") == 0);

    /* Targets that exist and are not regular files are refused, not
     * replaced (issue 20 4.5: `kiln build -o` turned a character device
     * into a regular file), and no temporary file is left. */
    path_in_tmp(path, sizeof path, "a_folder");
    CHECK(mkdir(path, 0755) == 0);
    CHECK_ERR(kiln_engine_save(e, path), KILN_ERR_IO, "exists and is a directory");
    CHECK(count_entries(tmpdir, ".tmp") == 0);
    rmdir(path);
    path_in_tmp(path, sizeof path, "a_fifo");
    CHECK(mkfifo(path, 0600) == 0);
    CHECK_ERR(kiln_engine_save(e, path), KILN_ERR_IO, "exists and is a FIFO");
    struct stat sb;
    CHECK(lstat(path, &sb) == 0 && S_ISFIFO(sb.st_mode));
    unlink(path);
    /* a link to a character device: the device is what stays */
    path_in_tmp(path, sizeof path, "null_link");
    CHECK(symlink("/dev/null", path) == 0);
    CHECK_ERR(kiln_engine_save(e, path), KILN_ERR_IO, "exists and is a character device");
    CHECK(lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode));
    CHECK(stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode));
    unlink(path);
    CHECK(count_entries(tmpdir, ".tmp") == 0);

    /* A file that holds something other than an engine (the model, its
     * external weights, a timing cache: `kiln build m.onnx -o w.bin`
     * replaced the weights, and the next build read the engine's bytes as
     * weights) is refused and kept; an empty file, an engine and a link to
     * such a file (the link is replaced, not its target) are written over
     * (issue 20, probe6). */
    path_in_tmp(path, sizeof path, "weights.bin");
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite("not an engine", 1, 13, f) == 13);
    if (f) fclose(f);
    CHECK_ERR(kiln_engine_save(e, path), KILN_ERR_IO, "exists and is not a kiln engine");
    CHECK(stat(path, &sb) == 0 && sb.st_size == 13);
    char lpath[600];
    path_in_tmp(lpath, sizeof lpath, "weights_link.kiln");
    CHECK(symlink(path, lpath) == 0);
    CHECK_OK(kiln_engine_save(e, lpath));
    CHECK(lstat(lpath, &sb) == 0 && S_ISREG(sb.st_mode) && stat(path, &sb) == 0 && sb.st_size == 13);
    CHECK_OK(kiln_engine_save(e, lpath)); /* over an engine */
    unlink(lpath);
    unlink(path);
    f = fopen(path, "wb");
    if (f) fclose(f);
    CHECK_OK(kiln_engine_save(e, path)); /* over an empty file */
    unlink(path);
    CHECK(count_entries(tmpdir, ".tmp") == 0);

    /* A name of 250 bytes, near the 255-byte limit of a file name: the
     * temporary name is short, not the name plus a suffix (issue 20 4.11). */
    char longname[251];
    memset(longname, 'n', 245);
    memcpy(longname + 245, ".kiln", 6);
    path_in_tmp(path, sizeof path, longname);
    CHECK_OK(kiln_engine_save(e, path));
    kiln_engine *l = NULL;
    CHECK_OK(kiln_engine_load(path, &l));
    kiln_engine_free(l);
    CHECK(count_entries(tmpdir, ".tmp") == 0);
    unlink(path);
    kiln_engine_free(e);
}

/* Seeded mutations, resealed so that the structural checks (not the
 * checksum) must catch them. Nothing may crash; whatever loads must be
 * writable again. */
TEST(test_mutations) {
    kiln_engine *e = NULL;
    size_t size;
    unsigned char *orig = patchable(&size, &e);
    unsigned char *buf = orig ? kiln__aligned_alloc(size) : NULL;
    if (buf) {
        uint64_t rng = 0x9e3779b97f4a7c15ull;
        int loaded = 0, refused = 0, bad = 0;
        for (int iter = 0; iter < 20000; iter++) {
            memcpy(buf, orig, size);
            int n = 1 + (int)(rng % 4);
            for (int k = 0; k < n; k++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                size_t pos = 40 + (size_t)((rng >> 16) % (size - 40)); /* keep bytes 0..39 */
                switch ((rng >> 8) % 4) {
                case 0: buf[pos] ^= (unsigned char)(1u << (rng % 8)); break;
                case 1: buf[pos] = (unsigned char)rng; break;
                case 2: buf[pos] = 0xff; break;
                default: buf[pos] = 0; break;
                }
            }
            reseal(buf, size);
            kiln_engine *l = kiln__calloc(1, sizeof *l);
            kiln_status s = kiln__format_read(buf, size, l);
            if (s == KILN_OK) {
                loaded++;
                void *d = NULL;
                size_t ds = 0;
                kiln_status w = kiln__format_write(l, &d, &ds);
                if (w != KILN_OK && bad++ < 5)
                    fprintf(stderr, "  mutation %d loads but does not write back: %s\n", iter,
                            kiln_last_error());
                kiln_free(d);
            } else {
                refused++;
                if ((s != KILN_ERR_FORMAT && s != KILN_ERR_UNSUPPORTED) && bad++ < 5)
                    fprintf(stderr, "  mutation %d: unexpected %s: %s\n", iter, kiln_status_name(s),
                            kiln_last_error());
            }
            kiln_engine_free(l);
        }
        printf("  mutations: %d loaded, %d refused\n", loaded, refused);
        CHECK(bad == 0);
        CHECK(refused > 0);
    }
    kiln__aligned_free(buf);
    kiln__aligned_free(orig);
    kiln_engine_free(e);
}

TEST(test_checksum_spec) {
    /* The checksum ignores header bytes 32..39 and sees every other byte. */
    unsigned char a[1000];
    for (size_t i = 0; i < sizeof a; i++) a[i] = (unsigned char)(i * 7);
    uint64_t h = kiln__format_checksum(a, sizeof a);
    a[35] ^= 1;
    CHECK(kiln__format_checksum(a, sizeof a) == h);
    a[40] ^= 0x80;
    CHECK(kiln__format_checksum(a, sizeof a) != h);
    a[40] ^= 0x80;
    /* Two top-bit flips in the same lane do not cancel. */
    a[103] ^= 0x80;
    a[135] ^= 0x80;
    CHECK(kiln__format_checksum(a, sizeof a) != h);
    a[103] ^= 0x80;
    a[135] ^= 0x80;
    CHECK(kiln__format_checksum(a, 999) != h); /* length matters */
    CHECK(kiln__format_checksum(a, 0) != kiln__format_checksum(a, 1));
}

TEST(test_cpu_target) {
    char t[128];
    kiln__cpu_target(t, sizeof t);
    CHECK(!strncmp(t, "cpu ", 4));
    printf("  this machine: %s\n", t);
    char small[8];
    kiln__cpu_target(small, sizeof small);
    CHECK(strlen(small) < sizeof small);
}

/* ---- attribute values in engine files (issue 20 4.3) ----------------------- */

/* An empty CPU engine of this build: room for 4 graph inputs (and their
 * profiles) and 1 output; NULL on failure. */
static kiln_engine *cpu_engine_shell(void) {
    kiln_engine *e = kiln__calloc(1, sizeof *e);
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(&g));
    if (!e || !g) {
        kiln__free(e);
        kiln__graph_free(g);
        return NULL;
    }
    e->graph = g;
    g->opset = 17;
    g->inputs = kiln__calloc(4, sizeof(int));
    g->outputs = kiln__calloc(1, sizeof(int));
    e->profiles = kiln__calloc(4, sizeof *e->profiles);
    g->cap_inputs = 4;
    g->cap_outputs = 1;
    e->opts.device = KILN_DEVICE_CPU;
    kiln__cpu_target(e->target, sizeof e->target);
    snprintf(e->builder_version, sizeof e->builder_version, "%s", kiln_version_string());
    return e;
}

/* A one-layer CPU engine: op(inputs...) -> y, attributes `attrs`, every
 * input a graph input of the given float32 / int64 shapes (n_const of the
 * last ones int64 constants holding `cdata`). */
static kiln_engine *one_layer(int op_id, const void *attrs, int n_in, const int64_t (*dims)[4],
                              const int *ranks, int n_const, const int64_t *cdata,
                              const int64_t *ydims, int yrank) {
    kiln_engine *e = cpu_engine_shell();
    if (!e) return NULL;
    kiln_graph *g = e->graph;
    int in[4], n_graph_in = n_in - n_const;
    for (int i = 0; i < n_in; i++) {
        char name[8];
        snprintf(name, sizeof name, "in%d", i);
        if (i < n_graph_in) {
            in[i] = add_value(g, name, KILN_DTYPE_FLOAT32, ranks[i], dims[i]);
            g->values[in[i]].flags |= KILN_VALUE_INPUT;
            g->inputs[g->n_inputs++] = in[i];
            kiln_profile *p = &e->profiles[i];
            p->rank = ranks[i];
            for (int d = 0; d < ranks[i]; d++) p->min[d] = p->opt[d] = p->max[d] = dims[i][d];
        } else {
            in[i] = add_const(g, name, KILN_DTYPE_INT64, ranks[i], dims[i], cdata);
        }
    }
    int y = add_value(g, "y", KILN_DTYPE_FLOAT32, yrank, ydims);
    g->values[y].flags |= KILN_VALUE_OUTPUT;
    g->outputs[g->n_outputs++] = y;
    CHECK_OK(kiln__graph_add_node(g, op_id, "layer", n_in, in, 1, &y, attrs, NULL));
    kiln__graph_link(g);
    return e;
}

/* The engine's bytes with the int32 at byte `at` of its first node's
 * attributes set to v, resealed; NULL on failure. */
static unsigned char *with_node_attr_int32(const kiln_engine *e, int node, size_t at, int32_t v, size_t *size) {
    void *data = serialize(e, size);
    unsigned char *f = data ? copy_bytes(data, *size) : NULL;
    kiln_free(data);
    if (!f) return NULL;
    unsigned char *n = node_record(f, node);
    kiln__put_le32(n + KILN_FMT_NODE_HEADER + 4 * (kiln__le32(n + 8) + kiln__le32(n + 12)) + at, (uint32_t)v);
    reseal(f, *size);
    return f;
}

static unsigned char *with_attr_int32(const kiln_engine *e, size_t at, int32_t v, size_t *size) {
    return with_node_attr_int32(e, 0, at, v, size);
}

/* ... its first attribute word */
static unsigned char *with_attr_word(const kiln_engine *e, int32_t v, size_t *size) {
    return with_attr_int32(e, 0, v, size);
}

/* Writes the damaged engine to $KILN_WRITE_REPROS/<name> when that is set
 * (how tests/fuzz/regressions/engine/ got them). */
static void maybe_write_repro(const char *name, const void *f, size_t size) {
    const char *dir = getenv("KILN_WRITE_REPROS");
    if (!dir || !*dir || !name) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK(write_file(path, f, size));
}

/* A layer's layout field (NHWC / nChw16c chains) changed in a file with its
 * checksum fixed: a FusedConv reading the graph's NCHW input as NHWC ran
 * and gave wrong numbers (CUDA, and the CPU's NHWC kernels), so did a
 * layer reading as NCHW what its producer wrote NHWC, and an output
 * written NHWC. Refused when the engine loads, naming both ends (probe7).
 * se_block.onnx on the CPU: 0 FusedConv (reads x) -> 1 GlobalAveragePool
 * and 4 Mul; 5 FusedConv reads the Mul and writes the output y. */
/* `model` built for the CPU, default tactics; NULL (a failed check) where
 * that fails. */
static kiln_engine *cpu_engine_of(const char *model) {
    kiln_model *m = NULL;
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    CHECK_OK(kiln_model_load_onnx(model, &m));
    CHECK_OK(kiln_builder_create(&b));
    if (b) CHECK_OK(kiln_builder_set_tuning(b, 0));
    if (m && b) CHECK_OK(kiln_build(b, m, &e));
    kiln_builder_free(b);
    kiln_model_free(m);
    return e;
}

TEST(test_layouts_checked_on_load) {
    kiln_engine *e = cpu_engine_of("tests/data/se_block.onnx");
    if (!e) return;
    const kiln_graph *g = e->graph;
    CHECK(g->n_nodes == 6 && g->nodes[0].op_id == KILN_OP_FusedConv && g->nodes[1].op_id == KILN_OP_GlobalAveragePool &&
          g->nodes[5].op_id == KILN_OP_FusedConv);
    static const struct { int node; int32_t layout; const char *msg; } bad[] = {
        {0, KILN_FC_LAYOUT_X_NHWC, "node 0 'dw+dw_sig+dw_silu' (FusedConv) reads its input, value 8 'x', as nhwc, "
                                   "but it is nchw (a graph input)"},
        {0, KILN_FC_LAYOUT_X_C16 | KILN_FC_LAYOUT_Y_C16, "reads its input, value 8 'x', as nchw16c, but it is nchw"},
        {0, KILN_FC_LAYOUT_Y_NHWC, "node 1 'gap' (GlobalAveragePool) reads its input, value "},
        {0, KILN_FC_LAYOUT_Y_NHWC | KILN_FC_LAYOUT_Y_BF16, "as nchw, but it is nhwc-bf16 (node 0 'dw+dw_sig+dw_silu')"},
        {5, KILN_FC_LAYOUT_Y_NHWC, "graph output 0, value "},
        /* through a layer of no layout that reads only NCHW values */
        {5, KILN_FC_LAYOUT_X_NHWC, "node 5 'project' (FusedConv) reads its input, value "},
        {5, KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC, "as nhwc, but it is nchw (node 4 'excite')"},
    };
    size_t at = offsetof(kiln_fused_conv_attrs, layout);
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        size_t size = 0;
        unsigned char *f = with_node_attr_int32(e, bad[k].node, at, bad[k].layout, &size);
        if (f) CHECK_ERR(read_only(f, size), KILN_ERR_FORMAT, bad[k].msg);
        kiln__aligned_free(f);
    }
    /* the writer refuses to write such a plan too */
    kiln_fused_conv_attrs *fc = g->nodes[0].attrs;
    int32_t keep = fc->layout;
    fc->layout = KILN_FC_LAYOUT_X_NHWC;
    void *data = NULL;
    size_t size = 0;
    CHECK_ERR(kiln_engine_serialize(e, &data, &size), KILN_ERR_INTERNAL, "as nhwc, but it is nchw (a graph input)");
    kiln_free(data);
    /* an elementwise layer reading two full inputs in two layouts: the Mul
     * made to read x (NCHW) beside the FusedConv's output written NHWC */
    kiln_node *mul = &g->nodes[4];
    int keep_in = mul->in[1];
    CHECK(mul->op_id == KILN_OP_Mul && g->values[g->inputs[0]].info.rank == 4);
    fc->layout = KILN_FC_LAYOUT_Y_NHWC;
    int32_t *gap_field = g->nodes[1].op->layout_field(g->nodes[1].attrs), keep_gap0 = *gap_field;
    *gap_field = 1; /* KILN_POOL_LAYOUT_NHWC: the pool reads 'a' as written (the checks go in node order) */
    mul->in[1] = g->inputs[0];
    CHECK_ERR(kiln_engine_serialize(e, &data, &size), KILN_ERR_INTERNAL,
              "node 4 'excite' (Mul) reads value 9 'a', which is nhwc, and value 8 'x', which is nchw, as one layout");
    kiln_free(data);
    mul->in[1] = keep_in;
    *gap_field = keep_gap0;
    fc->layout = keep;
    kiln_engine_free(e);

    /* through a view that keeps the shape: tiny_mbv3's head GlobalAveragePool
     * reads the Identity 'feat' of a FusedConv's NCHW output */
    e = cpu_engine_of("tests/data/tiny_mbv3.onnx");
    int gap = -1;
    for (int i = 0; e && i < e->graph->n_nodes; i++)
        if (!strcmp(e->graph->nodes[i].name, "head_gap")) gap = i;
    CHECK(gap > 0);
    if (gap > 0) {
        kiln_node *n = &e->graph->nodes[gap];
        int32_t *field = n->op->layout_field(n->attrs), keep_gap = *field;
        *field = 1; /* KILN_POOL_LAYOUT_NHWC */
        CHECK_ERR(kiln_engine_serialize(e, &data, &size), KILN_ERR_INTERNAL, "(GlobalAveragePool) reads its input, value ");
        CHECK(strstr(kiln_last_error(), "'feat', as nhwc, but it is nchw (node ") != NULL);
        kiln_free(data);
        *field = keep_gap;
    }
    kiln_engine_free(e);
}

/* Runs engine bytes f on se_block's x [1, 32, 16, 16]: the first n floats
 * of its output 'z' into y. */
static kiln_status run_bytes(const unsigned char *f, size_t size, float *y, size_t n) {
    kiln_engine *e = NULL;
    kiln_context *ctx = NULL;
    static float x[32 * 16 * 16];
    for (int i = 0; i < 32 * 16 * 16; i++) x[i] = (float)((i * 7919) % 2001 - 1000) / 400.0f;
    const int64_t dims[4] = {1, 32, 16, 16};
    kiln_status st = kiln_engine_load_memory(f, size, &e);
    if (st == KILN_OK) st = kiln_context_create(e, &ctx);
    if (st == KILN_OK) st = kiln_context_set_input(ctx, "x", KILN_DTYPE_FLOAT32, 4, dims, x);
    if (st == KILN_OK) st = kiln_context_run(ctx);
    const void *out = NULL;
    if (st == KILN_OK) st = kiln_context_get_output(ctx, "z", NULL, NULL, NULL, &out);
    if (st == KILN_OK) memcpy(y, out, n * sizeof(float));
    kiln_context_free(ctx);
    kiln_engine_free(e);
    return st;
}

/* A view that changes the shape (Reshape, Flatten, Squeeze, Unsqueeze)
 * passes its input's bytes on in their order, and a layer of no layout of
 * its own that is not elementwise (a Concat, a Transpose...) reads NCHW: a
 * FusedConv's layout field set to write NHWC or nChw16c before either
 * loaded (this CPU's FusedConv kernel then refused the layout at run; a
 * kernel that takes it reads the bytes in the other order). Refused when
 * the engine loads, naming the reader and the writer (probe8).
 * se_block.onnx's output y [1, 16, 16, 16] flattened (or concatenated
 * with itself) into the output z. */
TEST(test_layouts_through_views) {
    for (int form = 0; form < 2; form++) {
        kiln_engine *e = cpu_engine_of("tests/data/se_block.onnx");
        if (!e) return;
        kiln_graph *g = e->graph;
        int y = g->outputs[0], z = -1;
        const int64_t *d = g->values[y].info.dims;
        CHECK(g->nodes[5].op_id == KILN_OP_FusedConv && g->nodes[5].out[0] == y && g->values[y].info.rank == 4);
        if (form == 0) {
            const int64_t flat[2] = {d[0], d[1] * d[2] * d[3]};
            kiln_flatten_attrs fa = {.axis = 1};
            z = add_value(g, "z", KILN_DTYPE_FLOAT32, 2, flat);
            CHECK_OK(kiln__graph_add_node(g, KILN_OP_Flatten, "flat", 1, &y, 1, &z, &fa, NULL));
        } else {
            const int64_t cd[4] = {d[0], 2 * d[1], d[2], d[3]};
            kiln_axis_attrs ca = {.axis = 1};
            z = add_value(g, "z", KILN_DTYPE_FLOAT32, 4, cd);
            CHECK_OK(kiln__graph_add_node(g, KILN_OP_Concat, "cat", 2, (int[]){y, y}, 1, &z, &ca, NULL));
        }
        g->values[y].flags &= ~(uint32_t)KILN_VALUE_OUTPUT;
        g->values[z].flags |= KILN_VALUE_OUTPUT;
        g->outputs[0] = z;
        g->nodes[6].device = KILN_DEVICE_CPU;
        kiln__graph_link(g);
        size_t size = 0, n = 16 * 16 * 16;
        float *ref = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
        void *data = serialize(e, &size); /* the plan as built */
        CHECK(data && ref && out && run_bytes(data, size, ref, n) == KILN_OK);
        kiln_free(data);
        static const int32_t bad[2] = {KILN_FC_LAYOUT_Y_NHWC, KILN_FC_LAYOUT_Y_C16};
        for (int k = 0; k < 2 && ref && out; k++) {
            unsigned char *f = with_node_attr_int32(e, 5, offsetof(kiln_fused_conv_attrs, layout), bad[k], &size);
            if (!f) continue;
            kiln_status st = read_only(f, size);
            if (st == KILN_OK && run_bytes(f, size, out, n) == KILN_OK && memcmp(out, ref, n * sizeof(float))) {
                fprintf(stderr, "  %s: FusedConv 'project' set to write %s loaded and ran, with other numbers\n",
                        form ? "Concat" : "Flatten", k ? "nchw16c" : "nhwc");
                test_failed_checks++;
            }
            char msg[200];
            snprintf(msg, sizeof msg, "node 6 '%s' (%s) reads value %d 'y' as nchw, but it is %s (node 5 'project')",
                     form ? "cat" : "flat", form ? "Concat" : "Flatten", y, k ? "nchw16c" : "nhwc");
            CHECK_ERR(st, KILN_ERR_FORMAT, msg);
            kiln__aligned_free(f);
        }
        free(ref);
        free(out);
        kiln_engine_free(e);
    }
}

/* The engine loader checks attribute values as the importer does: a
 * DepthToSpace of blocksize 0 (SIGFPE in inspect and run before) and a
 * GatherND of batch_dims -1 (a read before its dims) are refused when the
 * file loads, naming the node and the attribute, not run. */
TEST(test_attr_values_checked_on_load) {
    /* DepthToSpace [1, 4, 2, 2] -> [1, 1, 4, 4], blocksize 2 */
    int32_t d2s[2] = {2, 0};
    const int64_t xd[1][4] = {{1, 4, 2, 2}};
    kiln_engine *e = one_layer(KILN_OP_DepthToSpace, d2s, 1, xd, (int[]){4}, 0, NULL,
                               (int64_t[]){1, 1, 4, 4}, 4);
    size_t size = 0;
    unsigned char *f = e ? with_attr_word(e, 2, &size) : NULL;
    CHECK(f && read_only(f, size) == KILN_OK); /* the valid engine loads */
    kiln__aligned_free(f);
    f = e ? with_attr_word(e, 0, &size) : NULL;
    if (f) {
        maybe_write_repro("depthtospace_blocksize0.kiln", f, size);
        CHECK_ERR(read_only(f, size), KILN_ERR_FORMAT,
                  "engine file is malformed: node 0: node 'layer' (DepthToSpace): attribute "
                  "'blocksize' = 0 is out of range [1, 1048576]");
        kiln_engine *l = (kiln_engine *)1;
        CHECK(kiln_engine_load_memory(f, size, &l) == KILN_ERR_FORMAT && l == NULL);
    }
    kiln__aligned_free(f);
    kiln_engine_free(e);

    /* GatherND data [2, 3], indices [2, 1] (int64 constant) -> [2, 3] */
    int32_t gnd[2] = {0, 0};
    const int64_t gd[2][4] = {{2, 3}, {2, 1}};
    const int64_t idx[2] = {1, 0};
    e = one_layer(KILN_OP_GatherND, gnd, 2, gd, (int[]){2, 2}, 1, idx, (int64_t[]){2, 3}, 2);
    f = e ? with_attr_word(e, 0, &size) : NULL;
    CHECK(f && read_only(f, size) == KILN_OK);
    kiln__aligned_free(f);
    f = e ? with_attr_word(e, -1, &size) : NULL;
    if (f) {
        maybe_write_repro("gathernd_batch_dims_neg.kiln", f, size);
        CHECK_ERR(read_only(f, size), KILN_ERR_FORMAT,
                  "node 'layer' (GatherND): attribute 'batch_dims' = -1 is out of range [0, 7]");
    }
    kiln__aligned_free(f);
    kiln_engine_free(e);
}

/* A kiln.SqueezeExcite layer (CUDA plans only: passes/fuse_se.c) in a CPU
 * engine: X [xd] (input, its profile min xd, max xmax), W1 [w1d], W2 [w2d],
 * B1 [R], B2 [C] float32 constants (B's dims from b1n/b2n; 0: absent). */
static kiln_engine *se_engine(const kiln_se_attrs *sa, const int64_t *xd, const int64_t *xmax, const int64_t *w1d,
                              const int64_t *w2d, int64_t b1n, int64_t b2n) {
    kiln_engine *e = cpu_engine_shell();
    if (!e) return NULL;
    kiln_graph *g = e->graph;
    int64_t xs[4];
    for (int d = 0; d < 4; d++) xs[d] = xd[d] == xmax[d] ? xd[d] : -1;
    int in[5] = {-1, -1, -1, -1, -1};
    in[0] = add_value(g, "x", KILN_DTYPE_FLOAT32, 4, xs);
    g->values[in[0]].flags |= KILN_VALUE_INPUT;
    g->inputs[g->n_inputs++] = in[0];
    e->profiles[0].rank = 4;
    for (int d = 0; d < 4; d++) {
        e->profiles[0].min[d] = e->profiles[0].opt[d] = xd[d];
        e->profiles[0].max[d] = xmax[d];
    }
    static float vals[1 << 17] = {0.5f, -0.25f, 0.75f, 1.0f, -1.0f, 0.125f, 0.5f, -0.5f, 0.25f, 0.3f, -0.7f, 0.9f};
    in[1] = add_const(g, "w1", KILN_DTYPE_FLOAT32, 4, w1d, vals);
    in[2] = add_const(g, "w2", KILN_DTYPE_FLOAT32, 4, w2d, vals);
    int n_in = 3;
    if (b1n) in[3] = add_const(g, "b1", KILN_DTYPE_FLOAT32, 1, &b1n, vals), n_in = 4;
    if (b2n) in[4] = add_const(g, "b2", KILN_DTYPE_FLOAT32, 1, &b2n, vals), n_in = 5;
    const int64_t yd[4] = {xs[0], xs[1], 1, 1};
    int y = add_value(g, "y", KILN_DTYPE_FLOAT32, 4, yd);
    g->values[y].flags |= KILN_VALUE_OUTPUT;
    g->outputs[g->n_outputs++] = y;
    CHECK_OK(kiln__graph_add_node(g, KILN_OP_SqueezeExcite, "se", n_in, in, 1, &y, sa, NULL));
    kiln__graph_link(g);
    return e;
}

/* Loads e's bytes and runs them on X of dims xd (values i / 8 - 1): the
 * status of the first step that fails (msg: its error), y's first values
 * into ys. */
static kiln_status se_load_run(const kiln_engine *src, const int64_t *xd, float *ys, int n_ys, const char *name) {
    size_t size = 0;
    void *data = serialize(src, &size);
    unsigned char *f = data ? copy_bytes(data, size) : NULL;
    kiln_free(data);
    if (!f) return KILN_ERR_OUT_OF_MEMORY;
    maybe_write_repro(name, f, size);
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    kiln_status s = kiln_engine_load_memory(f, size, &e);
    if (s == KILN_OK) CHECK(strlen(kiln_engine_describe(e, 0)) > 0 && strlen(kiln_engine_describe(e, 1)) > 0);
    float x[4096];
    for (int i = 0; i < 4096; i++) x[i] = (float)(i % 17) / 8.0f - 1.0f;
    if (s == KILN_OK) s = kiln_context_create(e, &c);
    if (s == KILN_OK) s = kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 4, xd, x);
    if (s == KILN_OK) s = kiln_context_run(c);
    const void *y = NULL;
    if (s == KILN_OK) s = kiln_context_get_output(c, "y", NULL, NULL, NULL, &y);
    if (s == KILN_OK) memcpy(ys, y, (size_t)n_ys * sizeof *ys);
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln__aligned_free(f);
    return s;
}

/* kiln.SqueezeExcite from a hostile engine file (issue 20): attributes,
 * weights that do not fit X (checked when it loads, or when a dynamic C
 * meets them at run time), a layout or activation out of range. The CPU
 * runs a layer an engine holds with the reference kernel. */
TEST(test_squeeze_excite_engines) {
    const kiln_se_attrs ok = {.act1 = KILN_FC_ACT_RELU, .act2 = KILN_FC_ACT_SIGMOID};
    const int64_t x4[4] = {1, 4, 2, 2}, w1[4] = {2, 4, 1, 1}, w2[4] = {4, 2, 1, 1};
    float y[4] = {0};
    kiln_engine *e = se_engine(&ok, x4, x4, w1, w2, 2, 4);
    CHECK(e && se_load_run(e, x4, y, 4, "se_ok.kiln") == KILN_OK);
    {   /* by hand: p = mean of the 4 values of each channel */
        float x[16], p[4], h[2];
        for (int i = 0; i < 16; i++) x[i] = (float)(i % 17) / 8.0f - 1.0f;
        static const float v[12] = {0.5f, -0.25f, 0.75f, 1.0f, -1.0f, 0.125f, 0.5f, -0.5f, 0.25f, 0.3f, -0.7f, 0.9f};
        for (int c = 0; c < 4; c++) p[c] = (x[4 * c] + x[4 * c + 1] + x[4 * c + 2] + x[4 * c + 3]) / 4;
        for (int r = 0; r < 2; r++) {
            double s = v[r];
            for (int c = 0; c < 4; c++) s += v[r * 4 + c] * p[c];
            h[r] = s > 0 ? (float)s : 0.0f;
        }
        for (int c = 0; c < 4; c++) {
            double s = v[c];
            for (int r = 0; r < 2; r++) s += v[c * 2 + r] * h[r];
            CHECK(fabs(y[c] - 1 / (1 + exp(-s))) < 1e-6);
        }
    }
    kiln_engine_free(e);

    /* attributes out of range */
    static const struct { size_t at; int32_t v; const char *msg; } bad[] = {
        {offsetof(kiln_se_attrs, layout), 2, "'layout' = 2 is out of range [0, 1]"},
        {offsetof(kiln_se_attrs, layout), -1, "'layout' = -1 is out of range [0, 1]"},
        {offsetof(kiln_se_attrs, act1), KILN_FC_ACT_COUNT, "'act1' = "},
        {offsetof(kiln_se_attrs, act2), -5, "'act2' = -5 is out of range"},
        {offsetof(kiln_se_attrs, reserved), 7, "'reserved' = 7 is out of range [0, 0]"},
    };
    e = se_engine(&ok, x4, x4, w1, w2, 2, 4);
    for (size_t k = 0; e && k < sizeof bad / sizeof bad[0]; k++) {
        size_t size = 0;
        unsigned char *f = with_attr_int32(e, bad[k].at, bad[k].v, &size);
        if (f) CHECK_ERR(read_only(f, size), KILN_ERR_FORMAT, bad[k].msg);
        kiln__aligned_free(f);
    }
    kiln_engine_free(e);

    /* an NHWC layer (CUDA's channels-last chains) reading the graph's
     * (NCHW) input: refused when the engine loads (it ran, and on the GPU
     * read NCHW bytes as NHWC: probe7) */
    e = se_engine(&ok, x4, x4, w1, w2, 2, 4);
    if (e) {
        size_t size = 0;
        unsigned char *f = with_attr_int32(e, offsetof(kiln_se_attrs, layout), KILN_SE_LAYOUT_NHWC, &size);
        if (f) CHECK_ERR(read_only(f, size), KILN_ERR_FORMAT,
                         "node 0 'se' (SqueezeExcite) reads its input, value 0 'x', as nhwc, but it is nchw (a graph input)");
        kiln__aligned_free(f);
    }
    kiln_engine_free(e);

    /* weights that do not fit X: refused when the engine loads */
    static const struct { int64_t w1[4], w2[4], b1, b2; } misfit[] = {
        {{2, 3, 1, 1}, {4, 2, 1, 1}, 2, 4}, /* W1's C */
        {{2, 4, 1, 1}, {4, 1, 1, 1}, 2, 4}, /* W2's R: read past W2 */
        {{2, 4, 1, 1}, {3, 2, 1, 1}, 2, 4}, /* W2's C */
        {{2, 4, 1, 1}, {4, 2, 1, 1}, 1, 4}, /* B1 */
        {{2, 4, 1, 1}, {4, 2, 1, 1}, 2, 3}, /* B2 */
        {{2, 4, 3, 1}, {4, 2, 1, 1}, 2, 4}, /* a 3x1 kernel */
    };
    static const char *const misfit_msg[] = {
        "weights [2x3x1x1] and [4x2x1x1], biases [2] and [4] do not fit X [1x4x2x2]",
        "weights [2x4x1x1] and [4x1x1x1], biases [2] and [4] do not fit X",
        "weights [2x4x1x1] and [3x2x1x1], biases",
        "weights [2x4x1x1] and [4x2x1x1], biases [1] and [4] do not fit",
        "biases [2] and [3] do not fit",
        "weights [2x4x3x1] and",
    };
    for (size_t k = 0; k < sizeof misfit / sizeof misfit[0]; k++) {
        e = se_engine(&ok, x4, x4, misfit[k].w1, misfit[k].w2, misfit[k].b1, misfit[k].b2);
        CHECK_ERR(se_load_run(e, x4, y, 4, NULL), KILN_ERR_MODEL, misfit_msg[k]);
        kiln_engine_free(e);
    }

    /* C dynamic in the engine (profile 4..8): X with 8 channels meets W1 of 4 */
    const int64_t x8[4] = {1, 8, 2, 2};
    e = se_engine(&ok, x4, x8, w1, w2, 2, 4);
    CHECK_ERR(se_load_run(e, x8, y, 4, "se_dynamic_c.kiln"), KILN_ERR_MODEL,
              "biases [2] and [4] do not fit X [1x8x2x2]");
    kiln_engine_free(e);

    /* dynamic batch (1..4) runs at 3 */
    const int64_t xb4[4] = {4, 4, 2, 2}, xb3[4] = {3, 4, 2, 2};
    e = se_engine(&ok, x4, xb4, w1, w2, 2, 4);
    CHECK_OK(se_load_run(e, xb3, y, 4, NULL));
    kiln_engine_free(e);

    /* the workspace of shapes an engine's profile may claim: N (2^46) * (C + R)
     * (1 + 2^17) doubles is past int64 (a signed overflow in se_workspace before):
     * SIZE_MAX, which the planner refuses. Such an engine loads, describes and runs at
     * its min shape. (CPU plans reach se_workspace at the max shapes only through a
     * workspace limit at build, which never makes this layer for the CPU.) */
    const int64_t x1[4] = {1, 1, 1, 1}, xhuge[4] = {INT64_C(1) << 46, 1, 1, 1};
    const int64_t w1r[4] = {1 << 17, 1, 1, 1}, w2r[4] = {1, 1 << 17, 1, 1};
    {
        kiln_tinfo ti[2] = {{.dtype = KILN_DTYPE_FLOAT32, .rank = 4}, {.dtype = KILN_DTYPE_FLOAT32, .rank = 4}};
        memcpy(ti[0].dims, xhuge, sizeof xhuge);
        memcpy(ti[1].dims, w1r, sizeof w1r);
        const kiln_tinfo *const in[2] = {&ti[0], &ti[1]};
        const kiln_op_def *op = kiln__op_by_id(KILN_OP_SqueezeExcite);
        CHECK(op && op->workspace(&(kiln_infer_args){.op = op, .attrs = &ok, .n_in = 2, .in = in}) == SIZE_MAX);
        ti[0].dims[0] = 3;
        CHECK(op && op->workspace(&(kiln_infer_args){.op = op, .attrs = &ok, .n_in = 2, .in = in}) ==
                        3 * (1 + (1 << 17)) * sizeof(double));
    }
    e = se_engine(&ok, x1, xhuge, w1r, w2r, 0, 0);
    CHECK_OK(se_load_run(e, x1, y, 1, NULL));
    kiln_engine_free(e);

    /* tactic ids the CPU does not know */
    kiln_se_attrs tac = ok;
    tac.tactic.id = -7;
    e = se_engine(&tac, x4, x4, w1, w2, 2, 4);
    CHECK_OK(se_load_run(e, x4, y, 4, NULL)); /* the reference kernel has none */
    kiln_engine_free(e);
}

/* A bool constant of an engine file holds bytes 0 and 1 only: the kernels
 * read it as C bool, and any other byte is undefined behaviour there
 * (kiln.Attention's cond with a byte 205: found by fuzz_engine,
 * regressions/engine/attention_cond_bool_byte.kiln). ONNX import makes
 * them 0/1; the loader refuses others. */
TEST(test_bool_constant_bytes) {
    kiln_engine *e = make_engine();
    int b = e ? kiln__graph_find_value(e->graph, "b") : -1;
    CHECK(b >= 0);
    if (b < 0) {
        kiln_engine_free(e);
        return;
    }
    static const uint8_t ok[5] = {0, 1, 1, 0, 1};
    kiln_value *v = &e->graph->values[b];
    v->info.dtype = KILN_DTYPE_BOOL;
    memcpy(v->data, ok, sizeof ok);
    size_t size = 0;
    void *data = serialize(e, &size);
    unsigned char *f = data ? copy_bytes(data, size) : NULL;
    CHECK(f && read_only(f, size) == KILN_OK);
    kiln__aligned_free(f);
    kiln_free(data);
    ((uint8_t *)v->data)[3] = 205;
    data = serialize(e, &size);
    f = data ? copy_bytes(data, size) : NULL;
    if (f) CHECK_ERR(read_only(f, size), KILN_ERR_FORMAT, "value 3 'b': bool constant holds byte 205 at element 3");
    kiln__aligned_free(f);
    kiln_free(data);
    kiln_engine_free(e);
}

/* Names holding terminal escapes, carriage returns and newlines (a hostile
 * model's or engine's) come out of `kiln inspect`'s text escaped (\x1b),
 * so they cannot clear the screen or forge lines; error messages carry
 * '?' for them (issue 20). */
TEST(test_control_chars_in_names) {
    kiln_engine *e = make_engine();
    if (!e || !test_has_nodes) {
        kiln_engine_free(e);
        return;
    }
    static const char *evil = "n0\x1b[2J\r\nlayers (0):\x7f";
    kiln_graph *g = e->graph;
    kiln__free(g->nodes[0].name);
    g->nodes[0].name = kiln__strdup(evil);
    kiln__free(g->values[g->inputs[0]].name);
    g->values[g->inputs[0]].name = kiln__strdup(evil);
    /* a symbolic dim's name too (it was written raw: a quote broke the JSON,
     * a newline forged a text line; probe5) */
    CHECK(g->n_symbols > 0);
    if (g->n_symbols > 0) {
        kiln__free(g->symbols[0]);
        g->symbols[0] = kiln__strdup("B\"]\n\x1b");
    }
    snprintf(e->builder_version, sizeof e->builder_version, "0.1\x1b[2J"); /* header strings too */
    const char *text = kiln_engine_describe(e, 0);
    CHECK(text && !strchr(text, 0x1b) && !strchr(text, '\r') && !strchr(text, 0x7f));
    CHECK(text && strstr(text, "(built by kiln 0.1\\x1b[2J)\n"));
    CHECK(text && strstr(text, "  n0\\x1b[2J\\x0d\\x0alayers (0):\\x7f: float32"));
    CHECK(text && strstr(text, "n0\\x1b[2J\\x0d\\x0alayers (0):\\x7f kernel"));
    CHECK(text && strstr(text, "[B\"]\\x0a\\x1bx4]"));
    const char *json = kiln_engine_describe(e, 1);
    CHECK(json && !strchr(json, 0x1b) && strstr(json, "n0\\u001b[2J\\u000d\\u000alayers (0):"));
    CHECK(json && strstr(json, "[\"B\\\"]\\u000a\\u001b\", 4]"));
    CHECK_ERR(KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): bad", evil, "Op"), KILN_ERR_MODEL,
              "node 'n0?[2J?\nlayers (0):?' (Op): bad");
    kiln_engine_free(e);
}

/* docs/engine-format.md gives the format version this kiln writes and the
 * range it reads, in its title, its header table and its compatibility
 * rules: the same numbers as format.h (issue 20 4.13: the page said 3 and
 * "2 (this kiln also reads 1)" while kiln wrote 5). */
TEST(test_doc_version) {
    FILE *f = fopen("docs/engine-format.md", "rb");
    CHECK(f != NULL);
    if (!f) return;
    static char doc[1 << 18];
    size_t n = fread(doc, 1, sizeof doc - 1, f);
    fclose(f);
    doc[n] = 0;
    char want[3][128];
    snprintf(want[0], sizeof want[0], "# The kiln engine file format (version %d)\n",
             KILN_FORMAT_VERSION);
    snprintf(want[1], sizeof want[1], "| format_version | %d (this kiln reads versions %d to %d).",
             KILN_FORMAT_VERSION, KILN_FORMAT_MIN_VERSION, KILN_FORMAT_VERSION);
    snprintf(want[2], sizeof want[2], "KILN_FORMAT_VERSION` (%d..%d today)", KILN_FORMAT_MIN_VERSION,
             KILN_FORMAT_VERSION);
    CHECK(!strncmp(doc, want[0], strlen(want[0])));
    for (int i = 1; i < 3; i++)
        if (!strstr(doc, want[i])) {
            fprintf(stderr, "  docs/engine-format.md lacks \"%s\"\n", want[i]);
            CHECK(!"the documented format version matches KILN_FORMAT_VERSION");
        }
}

/* Engines made zeroed (kiln__calloc, as these tests and the format code
 * do) hold no file: freeing one closes nothing (a mapped engine keeps its
 * file open, and a zero fd taken for it closed stdin). */
/* Names that are not UTF-8 in kiln_engine_describe's JSON: each stray byte
 * as \udcNN, well-formed characters (2 to 4 bytes) kept; the raw bytes made
 * the JSON unreadable (Python's json.load, jq). probe5. */
TEST(test_json_names_not_utf8) {
    kiln_engine *e = make_engine();
    if (!e || !test_has_nodes) {
        kiln_engine_free(e);
        return;
    }
    /* 0xff, a cut-short \xc3, an overlong \xc0\xaf, a surrogate \xed\xa0\x80, past U+10FFFF,
     * then é, €, U+1F600 */
    static const char *name = "a\xff\xc3" "b\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    kiln_graph *g = e->graph;
    kiln__free(g->nodes[0].name);
    g->nodes[0].name = kiln__strdup(name);
    const char *json = kiln_engine_describe(e, 1);
    CHECK(json && strstr(json, "\"a\\udcff\\udcc3" "b\\udcc0\\udcaf\\udced\\udca0\\udc80\\udcf4\\udc90\\udc80\\udc80"
                               "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""));
    for (const char *p = json; p && *p;) { /* the whole text is UTF-8 */
        size_t n = kiln__utf8_at(p);
        CHECK(n > 0);
        p += n ? n : 1;
    }
    kiln_engine_free(e);
}

/* An engine file written in place within the file clock's grain of its
 * load keeps every time fstat shows (Linux before 6.13 stamps files once
 * per tick; ext4 with small inodes, FAT once per 1-2 s): such an engine
 * compares the bytes themselves, once, after the grain has passed (the
 * write went unseen for as long as the engine lived). probe5. */
TEST(test_watch_same_times) {
    kiln_engine *e = make_engine();
    if (!e) return;
    char path[512];
    path_in_tmp(path, sizeof path, "same_times.kiln");
    CHECK_OK(kiln_engine_save(e, path));
    for (int write = 0; write < 2; write++) {
        kiln_engine *l = NULL;
        CHECK_OK(kiln_engine_load(path, &l));
        if (!l) break;
        CHECK(l->map_verify_at_ns != 0); /* the file changed just now */
        if (write) {
            int fd = open(path, O_RDWR);
            unsigned char b = 0;
            off_t at = (off_t)l->blob_size - 1;
            CHECK(fd >= 0 && pread(fd, &b, 1, at) == 1);
            b ^= 1;
            CHECK(pwrite(fd, &b, 1, at) == 1);
            if (fd >= 0) close(fd);
            struct stat st;
            CHECK(fstat(l->map_fd, &st) == 0);
            l->map_st = st; /* as a coarse file clock shows it: no time moved */
        }
        l->map_verify_at_ns = 1; /* the grain has passed */
        atomic_store(&l->map_checked_us, 0);
        if (write) {
            CHECK_ERR(kiln__engine_check_file(l), KILN_ERR_IO, "was written in place");
        } else {
            CHECK_OK(kiln__engine_check_file(l));
            CHECK(l->map_verify_at_ns == 0); /* verified once */
        }
        kiln_engine_free(l);
    }
    unlink(path);
    kiln_engine_free(e);
}

TEST(test_zeroed_engine_keeps_stdin) {
    if (fcntl(0, F_GETFD) == -1) /* (stdin closed under the test runner: fd 0 is then /dev/null) */
        CHECK(open("/dev/null", O_RDONLY) == 0);
    kiln_engine *e = kiln__calloc(1, sizeof *e);
    CHECK(e != NULL);
    kiln_engine_free(e);
    CHECK(fcntl(0, F_GETFD) != -1);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln_fmt_test_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "cannot create a temporary folder: %s\n", strerror(errno));
        return 1;
    }
    RUN(test_zeroed_engine_keeps_stdin);
    RUN(test_watch_same_times);
    RUN(test_json_names_not_utf8);
    RUN(test_roundtrip_memory);
    RUN(test_save_load_mmap);
    RUN(test_load_memory);
    RUN(test_getters);
    RUN(test_misuse);
    RUN(test_empty);
    RUN(test_truncated);
    RUN(test_flipped_bytes);
    RUN(test_foreign_files);
    RUN(test_versions);
    RUN(test_math_field);
    RUN(test_patched_files);
    RUN(test_writer_refuses_invalid);
    RUN(test_save_atomic);
    RUN(test_mutations);
    RUN(test_checksum_spec);
    RUN(test_cpu_target);
    RUN(test_compat_messages);
    RUN(test_fixtures);
    RUN(test_sources);
    RUN(test_gap_attrs_by_version);
    RUN(test_doc_version);
    RUN(test_control_chars_in_names);
    RUN(test_bool_constant_bytes);
    RUN(test_attr_values_checked_on_load);
    RUN(test_layouts_checked_on_load);
    RUN(test_layouts_through_views);
    RUN(test_squeeze_excite_engines);
    rmdir(tmpdir);
    return test_summary();
}
