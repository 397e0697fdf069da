/* read.c -- parses and validates an engine file (format.h) and rebuilds the
 * plan. Nothing read from the file is trusted: every offset, count, index,
 * id and size is checked (with overflow checks) before it is used, and
 * constants borrow their bytes from the file only after their bounds are
 * known to be inside the weights section. */
#include "format/format.h"

#include "backends/backend.h"
#include "backends/cpu/cpu_features.h"
#include "ir/layouts.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- errors ------------------------------------------------------------ */

static kiln_status bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static kiln_status bad(const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return KILN_FAIL(KILN_ERR_FORMAT, "engine file is malformed: %s", msg);
}

/* ---- graph checks (shared with the writer) ----------------------------- */

static const char *nm(const char *s) { return s ? s : ""; }

static kiln_status check_dims(const kiln_graph *g, const char *what, int idx, const char *name,
                              int rank, const int64_t *dims, bool need_known) {
    for (int d = 0; d < rank; d++) {
        int64_t x = dims[d];
        if (x >= 0) continue;
        if (need_known)
            return KILN_FAIL(KILN_ERR_FORMAT, "%s %d '%s': dim %d is %lld; constants need known dims",
                             what, idx, name, d, (long long)x);
        if (x == KILN_DIM_UNKNOWN) continue;
        int64_t sym = -2 - x; /* x <= -2, so no overflow */
        if (sym >= g->n_symbols)
            return KILN_FAIL(KILN_ERR_FORMAT,
                             "%s %d '%s': dim %d refers to symbol %lld, but there are %d symbols",
                             what, idx, name, d, (long long)sym, g->n_symbols);
    }
    return KILN_OK;
}

/* Bytes of a constant of this type, or false on overflow. */
static bool const_bytes(kiln_dtype dt, int rank, const int64_t *dims, uint64_t *out) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        if (dims[d] < 0 || !kiln__mul_ok(n, dims[d], &n)) return false;
    int64_t b;
    if (!kiln__mul_ok(n, (int64_t)kiln_dtype_size(dt), &b)) return false;
    *out = (uint64_t)b;
    return true;
}

/* ---- layouts ------------------------------------------------------------ */

/* Every layer reads each value in the order its producer wrote its bytes
 * in, and graph outputs are plain (kiln__plan_layouts): a layout field
 * changed in a file (a checksum is no signature) read NCHW bytes as NHWC,
 * a silent wrong result. */
static kiln_status check_layouts(const kiln_graph *g, bool sources) {
    int *lay = kiln__malloc(((size_t)g->n_values + 1) * sizeof *lay);
    if (!lay) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory checking an engine");
    kiln_status st = kiln__plan_layouts(g, sources, lay);
    kiln__free(lay);
    return st;
}

kiln_status kiln__format_check_graph(const kiln_graph *g, const kiln_profile *profiles, bool sources) {
    if (!g) return KILN_FAIL(KILN_ERR_FORMAT, "no graph");
    if (g->n_values < 0 || g->n_nodes < 0 || g->n_inputs < 0 || g->n_outputs < 0 ||
        g->n_symbols < 0)
        return KILN_FAIL(KILN_ERR_FORMAT, "negative table size");
    for (int i = 0; i < g->n_symbols; i++)
        if (!g->symbols[i]) return KILN_FAIL(KILN_ERR_FORMAT, "symbol %d has no name", i);

    /* Values. */
    for (int i = 0; i < g->n_values; i++) {
        const kiln_value *v = &g->values[i];
        const char *name = nm(v->name);
        if (!*name) return KILN_FAIL(KILN_ERR_FORMAT, "value %d has no name", i);
        if (v->info.dtype != KILN_DTYPE_UNDEFINED && !kiln__dtype_valid(v->info.dtype))
            return KILN_FAIL(KILN_ERR_FORMAT, "value %d '%s': unknown dtype %d", i, name,
                             (int)v->info.dtype);
        if (v->info.rank < -1 || v->info.rank > KILN_MAX_RANK)
            return KILN_FAIL(KILN_ERR_FORMAT, "value %d '%s': rank %d is outside -1..%d", i, name,
                             v->info.rank, KILN_MAX_RANK);
        bool is_const = (v->flags & KILN_VALUE_CONST) != 0;
        KILN_TRY(check_dims(g, "value", i, name, v->info.rank, v->info.dims, is_const));
        if (!is_const) continue;
        if (!kiln__dtype_valid(v->info.dtype))
            return KILN_FAIL(KILN_ERR_FORMAT, "value %d '%s': constant of unknown dtype %d", i,
                             name, (int)v->info.dtype);
        if (v->info.rank < 0)
            return KILN_FAIL(KILN_ERR_FORMAT, "value %d '%s': constant of unknown rank", i, name);
        uint64_t nb;
        if (!const_bytes(v->info.dtype, v->info.rank, v->info.dims, &nb) || nb > SIZE_MAX)
            return KILN_FAIL(KILN_ERR_FORMAT, "value %d '%s': constant size overflows", i, name);
        if (v->nbytes != (size_t)nb)
            return KILN_FAIL(KILN_ERR_FORMAT,
                             "value %d '%s': constant holds %zu bytes, but %s%s needs %llu", i,
                             name, v->nbytes, kiln_dtype_name(v->info.dtype),
                             kiln__shape_str(v->info.rank, v->info.dims, (char[96]){0}, 96),
                             (unsigned long long)nb);
        if (nb && !v->data)
            return KILN_FAIL(KILN_ERR_FORMAT, "value %d '%s': constant without data", i, name);
    }

    kiln_status st = KILN_OK;
    /* state: bit 0 available (const, graph input or produced), bit 1 graph
     * input, bit 2 produced by a node. */
    unsigned char *state = kiln__calloc((size_t)g->n_values + 1, 1);
    if (!state) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory checking an engine");
    for (int i = 0; i < g->n_values; i++)
        if (g->values[i].flags & KILN_VALUE_CONST) state[i] = 1;

    /* Graph inputs. */
    if (g->n_inputs > 0 && !profiles) {
        st = KILN_FAIL(KILN_ERR_FORMAT, "the graph has %d inputs but no profiles", g->n_inputs);
        goto done;
    }
    for (int i = 0; i < g->n_inputs; i++) {
        int x = g->inputs[i];
        if (x < 0 || x >= g->n_values) {
            st = KILN_FAIL(KILN_ERR_FORMAT, "graph input %d refers to value %d, but there are %d values",
                           i, x, g->n_values);
            goto done;
        }
        const kiln_value *v = &g->values[x];
        if (state[x] & 2) {
            st = KILN_FAIL(KILN_ERR_FORMAT, "graph input %d: value %d '%s' is listed twice", i, x,
                           nm(v->name));
            goto done;
        }
        if (state[x] & 1) {
            st = KILN_FAIL(KILN_ERR_FORMAT, "graph input %d: value %d '%s' is a constant", i, x,
                           nm(v->name));
            goto done;
        }
        state[x] |= 3;
        const kiln_profile *p = &profiles[i];
        if (p->rank < 0 || p->rank > KILN_MAX_RANK ||
            (v->info.rank >= 0 && p->rank != v->info.rank)) {
            st = KILN_FAIL(KILN_ERR_FORMAT, "profile of input '%s' has rank %d, the input has rank %d",
                           nm(v->name), p->rank, v->info.rank);
            goto done;
        }
        for (int d = 0; d < p->rank; d++) {
            int64_t vd = v->info.rank >= 0 ? v->info.dims[d] : -1;
            if (p->min[d] < 0 || p->min[d] > p->opt[d] || p->opt[d] > p->max[d] ||
                (vd >= 0 && (p->min[d] != vd || p->max[d] != vd))) {
                st = KILN_FAIL(KILN_ERR_FORMAT,
                               "profile of input '%s', dim %d: min %lld, opt %lld, max %lld does not "
                               "satisfy 0 <= min <= opt <= max%s",
                               nm(v->name), d, (long long)p->min[d], (long long)p->opt[d],
                               (long long)p->max[d], vd >= 0 ? " = the static dim" : "");
                goto done;
            }
        }
    }

    /* Nodes, in order. */
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead) continue;
        const char *name = nm(n->name);
        const kiln_op_def *op = kiln__op_by_id(n->op_id);
        if (!op || (n->op && n->op != op)) {
            st = KILN_FAIL(KILN_ERR_FORMAT, "node %d '%s': operator id %d is unknown", i, name,
                           n->op_id);
            goto done;
        }
        if (n->n_in < op->min_inputs || (op->max_inputs >= 0 && n->n_in > op->max_inputs) ||
            n->n_out < op->min_outputs || (op->max_outputs >= 0 && n->n_out > op->max_outputs)) {
            st = KILN_FAIL(KILN_ERR_FORMAT,
                           "node %d '%s' (%s): %d inputs and %d outputs; the op takes %d..%d inputs "
                           "and %d..%d outputs",
                           i, name, op->name, n->n_in, n->n_out, op->min_inputs, op->max_inputs,
                           op->min_outputs, op->max_outputs);
            goto done;
        }
        if (op->attr_size && !n->attrs) {
            st = KILN_FAIL(KILN_ERR_FORMAT, "node %d '%s' (%s): no attributes", i, name, op->name);
            goto done;
        }
        /* the values the op's infer and kernels rely on, checked as the
         * importer checks them (a checksum is no signature) */
        if (op->validate && n->attrs && (st = op->validate(op, n->attrs, name)) != KILN_OK) {
            st = kiln__fail_prefix(KILN_ERR_FORMAT, "node %d", i);
            goto done;
        }
        for (int k = 0; k < n->n_in; k++) {
            int x = n->in[k];
            if (x == -1 && k >= op->min_inputs) continue;
            if (x < 0 || x >= g->n_values) {
                st = KILN_FAIL(KILN_ERR_FORMAT,
                               "node %d '%s' (%s): input %d refers to value %d, but there are %d "
                               "values",
                               i, name, op->name, k, x, g->n_values);
                goto done;
            }
            if (!(state[x] & 1)) {
                st = KILN_FAIL(KILN_ERR_FORMAT,
                               "node %d '%s' (%s): input %d is value %d '%s', which is neither a "
                               "constant, a graph input nor an output of an earlier node",
                               i, name, op->name, k, x, nm(g->values[x].name));
                goto done;
            }
        }
        for (int k = 0; k < n->n_out; k++) {
            int x = n->out[k];
            if (x < 0 || x >= g->n_values) {
                st = KILN_FAIL(KILN_ERR_FORMAT,
                               "node %d '%s' (%s): output %d refers to value %d, but there are %d "
                               "values",
                               i, name, op->name, k, x, g->n_values);
                goto done;
            }
            if (state[x] & 1) {
                st = KILN_FAIL(KILN_ERR_FORMAT,
                               "node %d '%s' (%s): output %d is value %d '%s', which is already %s",
                               i, name, op->name, k, x, nm(g->values[x].name),
                               (state[x] & 4)   ? "produced by another node"
                               : (state[x] & 2) ? "a graph input"
                                                : "a constant");
                goto done;
            }
        }
        for (int k = 0; k < n->n_out; k++) state[n->out[k]] |= 1 | 4;
    }

    for (int i = 0; i < g->n_outputs; i++) {
        int x = g->outputs[i];
        if (x < 0 || x >= g->n_values) {
            st = KILN_FAIL(KILN_ERR_FORMAT, "graph output %d refers to value %d, but there are %d values",
                           i, x, g->n_values);
            goto done;
        }
        if (!(state[x] & 1)) {
            st = KILN_FAIL(KILN_ERR_FORMAT, "graph output %d is value %d '%s', which nothing produces",
                           i, x, nm(g->values[x].name));
            goto done;
        }
    }
    st = check_layouts(g, sources);
done:
    kiln__free(state);
    return st;
}

/* ---- reader ------------------------------------------------------------ */

/* Says which kiln wrote the file (header writer_version), for messages about
 * parts of the file this kiln does not know: "written by kiln 0.3.0, newer
 * than this kiln (0.1.0): upgrade kiln or rebuild the engine with this one". */
static const char *writer_note(const unsigned char *p, char *buf, size_t n) {
    uint32_t w = kiln__le32(p + KILN_FMT_OFF_WRITER_VERSION);
    const char *here = kiln_version_string();
    if (w > (uint32_t)KILN_VERSION_NUMBER)
        snprintf(buf, n,
                 "the file was written by kiln %u.%u.%u, newer than this kiln (%s): upgrade kiln "
                 "or rebuild the engine with this one",
                 w / 10000, w / 100 % 100, w % 100, here);
    else
        snprintf(buf, n,
                 "the file was written by kiln %u.%u.%u, which is not newer than this kiln (%s): "
                 "the file is damaged or was not written by kiln; rebuild the engine",
                 w / 10000, w / 100 % 100, w % 100, here);
    return buf;
}

enum { SEC_STRS, SEC_SYMS, SEC_VALS, SEC_NODS, SEC_GRPH, SEC_PROF, SEC_SRCS, SEC_WGTS, SEC_COUNT };
static const char kiln_sec_ids[SEC_COUNT][5] = {"STRS", "SYMS", "VALS", "NODS",
                                                "GRPH", "PROF", "SRCS", "WGTS"};
/* Sections a file may lack (written by kilns from a later version on). */
static const bool kiln_sec_optional[SEC_COUNT] = {[SEC_SRCS] = true};

typedef struct section {
    uint64_t offset, size, count;
    bool present;
} section;

typedef struct reader {
    const unsigned char *p;
    size_t size;
    uint32_t version; /* the file's format version */
    section sec[SEC_COUNT];
    section meta;     /* optional user metadata (meta.c) */
} reader;

/* The string at offset `off` of the string table, or an error. */
static kiln_status get_str(const reader *r, uint32_t off, const char *what, int idx,
                           const char **out) {
    const section *s = &r->sec[SEC_STRS];
    if (off >= s->size)
        return bad("%s %d: name offset %u is outside the string table (%llu bytes)", what, idx, off,
                   (unsigned long long)s->size);
    const char *base = (const char *)r->p + s->offset;
    if (!memchr(base + off, 0, (size_t)(s->size - off)))
        return bad("%s %d: name at offset %u is not NUL-terminated inside the string table", what,
                   idx, off);
    *out = base + off;
    return KILN_OK;
}

/* Copies a fixed-size string field of the header; it must hold a NUL. */
static kiln_status header_str(const reader *r, size_t off, size_t len, const char *what, char *dst,
                              size_t cap) {
    const char *s = (const char *)r->p + off;
    const char *z = memchr(s, 0, len);
    if (!z) return bad("header field '%s' is not NUL-terminated", what);
    size_t n = (size_t)(z - s);
    if (n >= cap) return bad("header field '%s' is too long", what);
    memcpy(dst, s, n + 1);
    return KILN_OK;
}

static kiln_status check_signature(const unsigned char *p, size_t size, bool mapped) {
    if (size == 0) return KILN_FAIL(KILN_ERR_FORMAT, "engine file is empty (0 bytes)");
    size_t n = size < KILN_FORMAT_MAGIC_SIZE ? size : KILN_FORMAT_MAGIC_SIZE;
    size_t k = n < 4 ? n : 4;
    if (memcmp(p, KILN_FORMAT_MAGIC, k) != 0)
        return KILN_FAIL(KILN_ERR_FORMAT, "not a kiln engine file (bad magic)");
    if (memcmp(p, KILN_FORMAT_MAGIC, n) != 0)
        return KILN_FAIL(KILN_ERR_FORMAT,
                         "engine file signature is damaged (bytes 4..11 are altered, as by a "
                         "text-mode transfer that converts line endings); copy the file in "
                         "binary mode");
    if (size < 16)
        return KILN_FAIL(KILN_ERR_FORMAT,
                         "engine file is truncated: %zu bytes, shorter than its %d-byte header",
                         size, KILN_FORMAT_HEADER_SIZE);
    uint32_t version = kiln__le32(p + KILN_FMT_OFF_VERSION);
    if (version > KILN_FORMAT_VERSION)
        return KILN_FAIL(KILN_ERR_FORMAT,
                         "engine format version %u is newer than this kiln supports (%d); rebuild "
                         "the engine or upgrade kiln",
                         version, KILN_FORMAT_VERSION);
    if (version < KILN_FORMAT_MIN_VERSION)
        return KILN_FAIL(KILN_ERR_FORMAT,
                         "engine format version %u is older than this kiln supports (%d); rebuild "
                         "the engine with this kiln",
                         version, KILN_FORMAT_MIN_VERSION);
    if (size < KILN_FMT_OFF_FILE_SIZE + 8)
        return KILN_FAIL(KILN_ERR_FORMAT,
                         "engine file is truncated: %zu bytes, shorter than its %d-byte header",
                         size, KILN_FORMAT_HEADER_SIZE);
    uint64_t declared = kiln__le64(p + KILN_FMT_OFF_FILE_SIZE);
    if ((uint64_t)size < declared)
        return KILN_FAIL(KILN_ERR_FORMAT, "engine file is truncated: %zu bytes, header says %llu",
                         size, (unsigned long long)declared);
    if ((uint64_t)size > declared)
        return KILN_FAIL(KILN_ERR_FORMAT,
                         "engine file has %zu bytes but its header says %llu (trailing data)",
                         size, (unsigned long long)declared);
    uint32_t header_size = kiln__le32(p + KILN_FMT_OFF_HEADER_SIZE);
    if (size < KILN_FORMAT_HEADER_SIZE)
        return KILN_FAIL(KILN_ERR_FORMAT,
                         "engine file is truncated: %zu bytes, shorter than its %d-byte header",
                         size, KILN_FORMAT_HEADER_SIZE);
    if (kiln__le64(p + KILN_FMT_OFF_CHECKSUM) != kiln__format_checksum_ex(p, size, mapped))
        return KILN_FAIL(KILN_ERR_FORMAT, "engine file is corrupted (checksum mismatch)");
    if (header_size < KILN_FORMAT_HEADER_SIZE || header_size % 8 || header_size > size)
        return bad("header size %u (must be >= %d, a multiple of 8, inside the file)", header_size,
                   KILN_FORMAT_HEADER_SIZE);
    return KILN_OK;
}

/* Refuses engines this machine cannot run. */
static kiln_status check_target(const kiln_engine *e, const char *required) {
    const char *t = e->target;
    size_t kind_len = strcspn(t, " ");
    const char *dev = kiln__device_name(e->opts.device);
    if (!dev) return bad("unknown device %d", (int)e->opts.device);
    /* the target names the device: "cpu x86_64 avx2...", "cuda sm_90" */
    if (kind_len && (kind_len != strlen(dev) || memcmp(t, dev, kind_len) != 0))
        return bad("device is %s but the target is '%s'", dev, t);
    if (!kiln__backend_for(e->opts.device))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "engine was built for '%s' (device %s), but this kiln was built without "
                         "the %s backend; rebuild the engine for the CPU",
                         t, dev, dev);
    if (!*required) return KILN_OK;
    if (e->opts.device != KILN_DEVICE_CPU) return KILN_OK; /* device features: the backend's job */

    char here[128];
    kiln__cpu_target(here, sizeof here);
    /* Required features are named per architecture: compare that first. */
    const char *arch = t + kind_len + (t[kind_len] == ' ');
    size_t arch_len = strcspn(arch, " ");
    const char *here_arch = kiln__cpu_arch();
    if (arch_len != strlen(here_arch) || memcmp(arch, here_arch, arch_len) != 0)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "engine was built for '%s' and requires '%s', but this machine is '%s'; "
                         "rebuild the engine on this machine",
                         t, required, here);
    const char *q = required;
    while (*q) {
        q += strspn(q, " ");
        size_t len = strcspn(q, " ");
        if (!len) break;
        char feat[64];
        if (len >= sizeof feat) return bad("required CPU feature name is too long");
        memcpy(feat, q, len);
        feat[len] = 0;
        bool known;
        bool has = kiln__cpu_has_feature(feat, &known);
        if (!known)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "engine requires CPU feature '%s', which this kiln does not know; "
                             "upgrade kiln or rebuild the engine with this kiln",
                             feat);
        if (!has)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "engine was built for '%s' and requires CPU feature '%s', which this "
                             "machine ('%s') lacks; rebuild the engine on this machine",
                             t, feat, here);
        q += len;
    }
    return KILN_OK;
}

static kiln_status read_sections(reader *r) {
    const unsigned char *p = r->p;
    uint64_t header_size = kiln__le32(p + KILN_FMT_OFF_HEADER_SIZE);
    uint64_t n = kiln__le32(p + KILN_FMT_OFF_SECTION_COUNT);
    if (n > (r->size - header_size) / KILN_FORMAT_SECTION_ENTRY)
        return bad("section table of %llu entries does not fit in the file", (unsigned long long)n);
    uint64_t prev_end = header_size + n * KILN_FORMAT_SECTION_ENTRY;
    for (uint64_t i = 0; i < n; i++) {
        const unsigned char *s = p + header_size + i * KILN_FORMAT_SECTION_ENTRY;
        char id[5];
        for (int c = 0; c < 4; c++) id[c] = (s[c] >= 0x20 && s[c] < 0x7f) ? (char)s[c] : '?';
        id[4] = 0;
        uint32_t flags = kiln__le32(s + 4);
        uint64_t off = kiln__le64(s + 8), size = kiln__le64(s + 16), count = kiln__le64(s + 24);
        uint64_t end;
        if (off < prev_end || off % 8 || __builtin_add_overflow(off, size, &end) || end > r->size)
            return bad("section '%s' (offset %llu, %llu bytes) is out of place or out of bounds",
                       id, (unsigned long long)off, (unsigned long long)size);
        prev_end = end;
        int k = -1;
        for (int j = 0; j < SEC_COUNT; j++)
            if (!memcmp(s, kiln_sec_ids[j], 4)) k = j;
        if (k < 0 && !memcmp(s, KILN_FMT_META_ID, 4)) {
            if (r->meta.present) return bad("section '%s' appears twice", id);
            r->meta = (section){off, size, count, true};
            continue;
        }
        if (k < 0) {
            if (flags & KILN_FMT_SECTION_REQUIRED)
                return KILN_FAIL(KILN_ERR_FORMAT,
                                 "engine file needs section '%s', which this kiln does not know; "
                                 "%s",
                                 id, writer_note(p, (char[256]){0}, 256));
            continue; /* optional extension: skip */
        }
        if (r->sec[k].present) return bad("section '%s' appears twice", id);
        r->sec[k] = (section){off, size, count, true};
    }
    for (int j = 0; j < SEC_COUNT; j++)
        if (!r->sec[j].present && !kiln_sec_optional[j]) return bad("section '%s' is missing", kiln_sec_ids[j]);

    const section *sec = r->sec;
    if (sec[SEC_STRS].size == 0 || sec[SEC_STRS].count != sec[SEC_STRS].size ||
        sec[SEC_STRS].size > UINT32_MAX || p[sec[SEC_STRS].offset] != 0)
        return bad("string table (%llu bytes) is invalid", (unsigned long long)sec[SEC_STRS].size);
    if (sec[SEC_SYMS].count > INT_MAX || sec[SEC_SYMS].size != 4 * sec[SEC_SYMS].count)
        return bad("symbol section: %llu bytes for %llu symbols",
                   (unsigned long long)sec[SEC_SYMS].size, (unsigned long long)sec[SEC_SYMS].count);
    if (sec[SEC_VALS].count > INT_MAX ||
        sec[SEC_VALS].size != KILN_FMT_VALUE_RECORD * sec[SEC_VALS].count)
        return bad("value section: %llu bytes for %llu values",
                   (unsigned long long)sec[SEC_VALS].size, (unsigned long long)sec[SEC_VALS].count);
    if (sec[SEC_NODS].count > INT_MAX || sec[SEC_NODS].count > sec[SEC_NODS].size / KILN_FMT_NODE_HEADER)
        return bad("node section: %llu bytes cannot hold %llu nodes",
                   (unsigned long long)sec[SEC_NODS].size, (unsigned long long)sec[SEC_NODS].count);
    if (sec[SEC_GRPH].count != 1 || sec[SEC_GRPH].size < KILN_FMT_GRAPH_HEADER)
        return bad("graph section is invalid");
    if (sec[SEC_PROF].count > INT_MAX ||
        sec[SEC_PROF].size != KILN_FMT_PROFILE_RECORD * sec[SEC_PROF].count)
        return bad("profile section: %llu bytes for %llu profiles",
                   (unsigned long long)sec[SEC_PROF].size, (unsigned long long)sec[SEC_PROF].count);
    if (sec[SEC_WGTS].offset % KILN_FORMAT_ALIGN)
        return bad("weights section is not %d-byte aligned", KILN_FORMAT_ALIGN);
    return KILN_OK;
}

static kiln_status read_values(const reader *r, kiln_graph *g) {
    const section *vs = &r->sec[SEC_VALS], *ws = &r->sec[SEC_WGTS];
    int n = (int)vs->count;
    uint64_t n_consts = 0;
    for (int i = 0; i < n; i++) {
        const unsigned char *q = r->p + vs->offset + (size_t)i * KILN_FMT_VALUE_RECORD;
        const char *name = "";
        KILN_TRY(get_str(r, kiln__le32(q), "value", i, &name));
        if (!*name) return bad("value %d has no name", i);
        int32_t dtype = (int32_t)kiln__le32(q + 4);
        int32_t rank = (int32_t)kiln__le32(q + 8);
        uint32_t flags = kiln__le32(q + 12);
        uint64_t off = kiln__le64(q + 80), size = kiln__le64(q + 88);
        if (dtype != KILN_DTYPE_UNDEFINED && !kiln__dtype_valid(dtype))
            return bad("value %d '%s': unknown dtype %d", i, name, dtype);
        if (rank < -1 || rank > KILN_MAX_RANK)
            return bad("value %d '%s': rank %d is outside -1..%d", i, name, rank, KILN_MAX_RANK);
        int64_t dims[KILN_MAX_RANK] = {0};
        for (int d = 0; d < KILN_MAX_RANK; d++) {
            int64_t x = (int64_t)kiln__le64(q + 16 + 8 * d);
            if (d >= rank && x != 0)
                return bad("value %d '%s': dim %d past rank %d is not zero", i, name, d, rank);
            dims[d] = x;
        }
        bool is_const = (flags & KILN_VALUE_CONST) != 0;
        kiln_status st = check_dims(g, "value", i, name, rank, dims, is_const);
        if (st != KILN_OK) return kiln__fail_prefix(st, "engine file is malformed");
        if (is_const) {
            uint64_t want = 0, end;
            if (!kiln__dtype_valid(dtype) || rank < 0)
                return bad("value %d '%s': constant of unknown dtype or rank", i, name);
            if (!const_bytes((kiln_dtype)dtype, rank, dims, &want) || size != want)
                return bad("value %d '%s': constant data is %llu bytes, but %s%s needs %llu", i,
                           name, (unsigned long long)size, kiln_dtype_name((kiln_dtype)dtype),
                           kiln__shape_str(rank, dims, (char[96]){0}, 96),
                           (unsigned long long)want);
            if (off % KILN_FORMAT_ALIGN || off < ws->offset ||
                __builtin_add_overflow(off, size, &end) || end > ws->offset + ws->size)
                return bad("value %d '%s': constant data at offset %llu (%llu bytes) is not a "
                           "%d-aligned range inside the weights section",
                           i, name, (unsigned long long)off, (unsigned long long)size,
                           KILN_FORMAT_ALIGN);
            /* kernels read bool data as C bool: a byte other than 0 or 1 is undefined there */
            for (uint64_t k = 0; dtype == KILN_DTYPE_BOOL && k < size; k++)
                if (r->p[off + k] > 1)
                    return bad("value %d '%s': bool constant holds byte %u at element %llu (0 or 1 only)", i,
                               name, (unsigned)r->p[off + k], (unsigned long long)k);
            n_consts++;
        } else if (off || size) {
            return bad("value %d '%s': not a constant but has data", i, name);
        }
        int idx;
        st = kiln__graph_add_value(g, name, &idx);
        if (st != KILN_OK) return kiln__fail_prefix(KILN_ERR_FORMAT, "engine file is malformed: value %d", i);
        if (idx != i) return bad("value %d '%s' was added as %d", i, name, idx);
        kiln_value *v = &g->values[idx];
        v->info.dtype = (kiln_dtype)dtype;
        v->info.rank = rank;
        memcpy(v->info.dims, dims, sizeof dims);
        v->flags = flags;
        if (is_const) {
            v->data = (void *)(r->p + off); /* borrowed from the mapped file */
            v->data_borrowed = true;
            v->nbytes = (size_t)size;
            v->info.data = v->data;
        }
    }
    if (n_consts != ws->count)
        return bad("weights section says %llu constants, the values have %llu",
                   (unsigned long long)ws->count, (unsigned long long)n_consts);
    return KILN_OK;
}

static kiln_status read_nodes(const reader *r, int engine_device, kiln_graph *g) {
    const section *ns = &r->sec[SEC_NODS];
    uint64_t pos = ns->offset, end = ns->offset + ns->size;
    int *io = NULL;
    int io_cap = 0;
    void *grown_attrs = NULL;
    kiln_status st = KILN_OK;
    for (int i = 0; i < (int)ns->count; i++) {
        if (end - pos < KILN_FMT_NODE_HEADER) {
            st = bad("node %d: record runs past the node section", i);
            break;
        }
        const unsigned char *q = r->p + pos;
        uint32_t op_id = kiln__le32(q), n_in = kiln__le32(q + 8), n_out = kiln__le32(q + 12);
        uint32_t attr_size = kiln__le32(q + 16);
        uint32_t device = kiln__le32(q + 20);
        const char *name = "";
        if ((st = get_str(r, kiln__le32(q + 4), "node", i, &name)) != KILN_OK) break;
        uint64_t rec = KILN_FMT_NODE_HEADER + 4 * ((uint64_t)n_in + n_out) + attr_size;
        rec = (rec + 7) & ~(uint64_t)7;
        if (rec > end - pos) {
            st = bad("node %d '%s': record (%u inputs, %u outputs, %u attribute bytes) runs past "
                     "the node section",
                     i, name, n_in, n_out, attr_size);
            break;
        }
        const kiln_op_def *op = op_id < INT_MAX ? kiln__op_by_id((int)op_id) : NULL;
        if (!op) {
            st = KILN_FAIL(KILN_ERR_FORMAT,
                           "engine file uses operator id %u (node %d '%s'), which this kiln does "
                           "not know; %s",
                           op_id, i, name, writer_note(r->p, (char[256]){0}, 256));
            break;
        }
        if (device != KILN_DEVICE_CPU && device != (uint32_t)engine_device) {
            st = bad("node %d '%s' (%s): device %u is neither the CPU nor the engine's device", i,
                     name, op->name, device);
            break;
        }
        /* attributes an older format wrote shorter (kiln_op_def.attr_grew_in):
         * the fields added since are 0 */
        bool grew = op->attr_grew_in && r->version < (uint32_t)op->attr_grew_in &&
                    attr_size == op->attr_size_before && attr_size < op->attr_size;
        if (grew && attr_size) {
            if (!(grown_attrs = kiln__calloc(1, op->attr_size))) {
                st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory reading node %d '%s'", i, name);
                break;
            }
            memcpy(grown_attrs, q + KILN_FMT_NODE_HEADER + 4 * ((uint64_t)n_in + n_out), attr_size);
        }
        if (attr_size != op->attr_size && !grew) {
            st = bad("node %d '%s' (%s): attributes are %u bytes, this kiln's %s has %zu", i, name,
                     op->name, attr_size, op->name, op->attr_size);
            break;
        }
        if ((uint64_t)n_in + n_out >= INT_MAX / 2) {
            st = bad("node %d '%s': %u inputs and %u outputs", i, name, n_in, n_out);
            break;
        }
        int n_io = (int)(n_in + n_out);
        void *grown = io;
        st = kiln__grow(&grown, &io_cap, n_io + 1, sizeof *io);
        io = grown;
        if (st != KILN_OK) break;
        const unsigned char *x = q + KILN_FMT_NODE_HEADER;
        for (int k = 0; k < n_io; k++, x += 4) {
            int32_t idx = (int32_t)kiln__le32(x);
            bool is_in = k < (int)n_in;
            if (idx < (is_in ? -1 : 0) || idx >= g->n_values) {
                st = bad("node %d '%s' (%s): %s %d refers to value %d, but there are %d values", i,
                         name, op->name, is_in ? "input" : "output", is_in ? k : k - (int)n_in,
                         idx, g->n_values);
                goto out;
            }
            io[k] = idx;
        }
        int node_idx;
        st = kiln__graph_add_node(g, (int)op_id, name, (int)n_in, io, (int)n_out, io + n_in,
                                  grew ? grown_attrs : attr_size ? x : NULL, &node_idx);
        kiln__free(grown_attrs);
        grown_attrs = NULL;
        if (st != KILN_OK) {
            st = kiln__fail_prefix(KILN_ERR_FORMAT, "engine file is malformed: node %d '%s'", i, name);
            break;
        }
        g->nodes[node_idx].device = (int)device;
        pos += rec;
    }
    if (st == KILN_OK && pos != end) st = bad("node section has %llu bytes after the last node",
                                              (unsigned long long)(end - pos));
out:
    kiln__free(io);
    kiln__free(grown_attrs);
    return st;
}

/* SRCS: the source nodes of every node (or, for files without the
 * section, each name split at '+', which is how fused layers are named). */
static kiln_status read_sources(const reader *r, kiln_graph *g) {
    const section *ss = &r->sec[SEC_SRCS];
    kiln_sbuf sb = {0};
    kiln_status st = KILN_OK;
    if (!ss->present) {
        for (int i = 0; i < g->n_nodes && st == KILN_OK; i++) {
            kiln_node *n = &g->nodes[i];
            if (!strchr(n->name, '+')) continue;
            sb.len = 0;
            int count = 0;
            for (const char *p = n->name; p; count++) {
                const char *e = strchr(p, '+');
                int len = e ? (int)(e - p) : (int)strlen(p);
                kiln__sbuf_printf(&sb, "%.*s%c", len, p, 0);
                p = e ? e + 1 : NULL;
            }
            st = sb.oom ? KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory loading an engine")
                        : kiln__node_set_sources(n, sb.data, sb.len, count);
        }
        kiln__sbuf_free(&sb);
        return st;
    }
    if (ss->count != (uint64_t)g->n_nodes) return bad("source section: %llu records for %d nodes",
                                                     (unsigned long long)ss->count, g->n_nodes);
    uint64_t pos = 0;
    for (int i = 0; i < g->n_nodes && st == KILN_OK; i++) {
        kiln_node *n = &g->nodes[i];
        if (ss->size - pos < 4) {
            st = bad("source section: node %d '%s' runs past its end", i, n->name);
            break;
        }
        uint32_t count = kiln__le32(r->p + ss->offset + pos);
        pos += 4;
        if (count > (ss->size - pos) / 4) {
            st = bad("source section: node %d '%s' has %u sources, past its end", i, n->name, count);
            break;
        }
        sb.len = 0;
        for (uint32_t k = 0; k < count && st == KILN_OK; k++, pos += 4) {
            const char *name = "";
            st = get_str(r, kiln__le32(r->p + ss->offset + pos), "source of node", i, &name);
            kiln__sbuf_printf(&sb, "%s%c", name, 0);
        }
        if (st != KILN_OK) break;
        if (sb.oom) st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory loading an engine");
        /* an unfused node's only source is its name: nothing to keep */
        else if (count == 1 && !strcmp(sb.data, n->name)) st = KILN_OK;
        else st = kiln__node_set_sources(n, sb.data, sb.len, (int)count);
        n->added = count == 0;
    }
    if (st == KILN_OK && pos != ss->size)
        st = bad("source section has %llu bytes after the last node", (unsigned long long)(ss->size - pos));
    kiln__sbuf_free(&sb);
    return st;
}

static kiln_status append_ints(int **arr, int *n, int *cap, const unsigned char *src, uint32_t count,
                               int n_values, const char *what) {
    void *a = *arr;
    KILN_TRY(kiln__grow(&a, cap, (int)count, sizeof(int)));
    *arr = a;
    for (uint32_t i = 0; i < count; i++) {
        int32_t x = (int32_t)kiln__le32(src + 4 * (size_t)i);
        if (x < 0 || x >= n_values)
            return bad("%s %u refers to value %d, but there are %d values", what, i, x, n_values);
        (*arr)[(*n)++] = x;
    }
    return KILN_OK;
}

static kiln_status read_io(const reader *r, kiln_graph *g, kiln_profile **profiles) {
    const section *gs = &r->sec[SEC_GRPH], *ps = &r->sec[SEC_PROF];
    const unsigned char *q = r->p + gs->offset;
    g->opset = (int64_t)kiln__le64(q);
    uint32_t n_in = kiln__le32(q + 8), n_out = kiln__le32(q + 12);
    if (n_in >= INT_MAX / 2 || n_out >= INT_MAX / 2 ||
        gs->size != KILN_FMT_GRAPH_HEADER + 4 * ((uint64_t)n_in + n_out))
        return bad("graph section: %llu bytes for %u inputs and %u outputs",
                   (unsigned long long)gs->size, n_in, n_out);
    KILN_TRY(append_ints(&g->inputs, &g->n_inputs, &g->cap_inputs, q + KILN_FMT_GRAPH_HEADER, n_in,
                         g->n_values, "graph input"));
    KILN_TRY(append_ints(&g->outputs, &g->n_outputs, &g->cap_outputs,
                         q + KILN_FMT_GRAPH_HEADER + 4 * (size_t)n_in, n_out, g->n_values,
                         "graph output"));
    if (ps->count != n_in)
        return bad("%llu profiles for %u graph inputs", (unsigned long long)ps->count, n_in);
    kiln_profile *pr = kiln__calloc((size_t)n_in + 1, sizeof *pr);
    if (!pr) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory loading an engine");
    for (uint32_t i = 0; i < n_in; i++) {
        const unsigned char *x = r->p + ps->offset + (size_t)i * KILN_FMT_PROFILE_RECORD;
        int32_t rank = (int32_t)kiln__le32(x);
        if (rank < 0 || rank > KILN_MAX_RANK) {
            kiln__free(pr);
            return bad("profile %u: rank %d is outside 0..%d", i, rank, KILN_MAX_RANK);
        }
        pr[i].rank = rank;
        for (int d = 0; d < rank; d++) {
            pr[i].min[d] = (int64_t)kiln__le64(x + 8 + 8 * d);
            pr[i].opt[d] = (int64_t)kiln__le64(x + 72 + 8 * d);
            pr[i].max[d] = (int64_t)kiln__le64(x + 136 + 8 * d);
        }
    }
    *profiles = pr;
    return KILN_OK;
}

kiln_status kiln__format_read(const void *data, size_t size, kiln_engine *e) {
    if (!e || (!data && size))
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln__format_read: NULL argument");
    if ((uintptr_t)data % 16)
        return KILN_FAIL(KILN_ERR_INTERNAL, "engine bytes must be 16-byte aligned in memory");
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                     "engine files are little-endian and this CPU is not; kiln cannot use "
                     "their weights in place here");
#endif
    reader r;
    memset(&r, 0, sizeof r);
    r.p = data;
    r.size = size;
    KILN_TRY(check_signature(r.p, size, e->blob_kind == 1 && data == e->blob));
    r.version = kiln__le32(r.p + KILN_FMT_OFF_VERSION); /* checked by check_signature */

    /* Header fields. */
    kiln_build_options opts;
    memset(&opts, 0, sizeof opts);
    opts.device = (int32_t)kiln__le32(r.p + KILN_FMT_OFF_DEVICE);
    opts.device_index = (int32_t)kiln__le32(r.p + KILN_FMT_OFF_DEVICE_INDEX);
    opts.precision = (int32_t)kiln__le32(r.p + KILN_FMT_OFF_PRECISION);
    opts.threads = (int32_t)kiln__le32(r.p + KILN_FMT_OFF_THREADS);
    opts.workspace = kiln__le64(r.p + KILN_FMT_OFF_WORKSPACE);
    opts.math = (int32_t)kiln__le32(r.p + KILN_FMT_OFF_MATH);
    if (opts.device_index < 0 || opts.threads < 0 || opts.precision < KILN_PRECISION_FP32 ||
        opts.precision > KILN_PRECISION_BF16 || opts.math < KILN_MATH_UNRECORDED || opts.math > KILN_MATH_FAST)
        return bad("build options (device index %d, precision %d, threads %d, math %d) are invalid",
                   opts.device_index, opts.precision, opts.threads, opts.math);
    char target[sizeof e->target], builder[sizeof e->builder_version];
    char required[KILN_FMT_REQUIRED_LEN];
    KILN_TRY(header_str(&r, KILN_FMT_OFF_TARGET, KILN_FMT_TARGET_LEN, "target", target,
                        sizeof target));
    KILN_TRY(header_str(&r, KILN_FMT_OFF_BUILDER_VERSION, KILN_FMT_BUILDER_VERSION_LEN,
                        "builder_version", builder, sizeof builder));
    KILN_TRY(header_str(&r, KILN_FMT_OFF_REQUIRED, KILN_FMT_REQUIRED_LEN, "required", required,
                        sizeof required));
    {
        kiln_engine probe;
        memset(&probe, 0, sizeof probe);
        probe.opts = opts;
        memcpy(probe.target, target, sizeof target);
        KILN_TRY(check_target(&probe, required));
    }

    KILN_TRY(read_sections(&r));

    kiln_graph *g = NULL;
    kiln_profile *profiles = NULL;
    kiln_status st = kiln__graph_create(&g);
    if (st == KILN_OK) g->sub = &kiln__subgraph_io;
    if (st != KILN_OK) return st;
    /* Symbols. */
    const section *ss = &r.sec[SEC_SYMS];
    for (int i = 0; i < (int)ss->count && st == KILN_OK; i++) {
        const char *name = "";
        st = get_str(&r, kiln__le32(r.p + ss->offset + 4 * (size_t)i), "symbol", i, &name);
        if (st != KILN_OK) break;
        int idx;
        st = kiln__graph_add_symbol(g, name, &idx);
        if (st != KILN_OK)
            st = kiln__fail_prefix(KILN_ERR_FORMAT, "engine file is malformed: symbol %d", i);
        else if (idx != i)
            st = bad("symbol %d '%s' is defined twice", i, name);
    }
    if (st == KILN_OK) st = read_values(&r, g);
    if (st == KILN_OK) st = read_nodes(&r, opts.device, g);
    if (st == KILN_OK) st = read_sources(&r, g);
    if (st == KILN_OK) st = read_io(&r, g, &profiles);
    if (st == KILN_OK) {
        st = kiln__format_check_graph(g, profiles, r.sec[SEC_SRCS].present);
        if (st != KILN_OK) st = kiln__fail_prefix(KILN_ERR_FORMAT, "engine file is malformed");
    }
    if (st == KILN_OK && r.meta.present) {
        st = kiln__meta_read(r.p + r.meta.offset, r.meta.size, r.meta.count, &e->meta);
        if (st == KILN_ERR_FORMAT) st = kiln__fail_prefix(st, "engine file is malformed");
    }
    if (st != KILN_OK) {
        kiln__graph_free(g);
        kiln__free(profiles);
        return st;
    }
    kiln__graph_link(g);

    e->graph = g;
    e->profiles = profiles;
    e->opts = opts;
    memcpy(e->target, target, sizeof target);
    memcpy(e->builder_version, builder, sizeof builder);
    return KILN_OK;
}
