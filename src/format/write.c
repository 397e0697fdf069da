/* write.c -- serializes an engine into the format described in format.h.
 *
 * The writer lays the whole file out first (string table, section offsets,
 * weight offsets), then fills one zeroed buffer, so every padding byte is
 * zero and the same engine always gives the same bytes. */
#include "format/format.h"
#include "runtime/engine.h"

#include <stdio.h>

/* ---- checksum ----------------------------------------------------------- */

#define KILN_FMT_PRIME 0x100000001b3ull

static void checksum_block(uint64_t h[4], const unsigned char *b) {
    for (int i = 0; i < 4; i++) {
        uint64_t x = (h[i] ^ kiln__le64(b + 8 * i)) * KILN_FMT_PRIME;
        h[i] = x ^ (x >> 32);
    }
}

uint64_t kiln__format_checksum(const void *data, size_t size) {
    return kiln__format_checksum_ex(data, size, false);
}

/* Pages handed back every this many bytes of a mapped file (a multiple of
 * the 32-byte block and of any page size). */
#define KILN_FMT_RELEASE_CHUNK ((size_t)16 << 20)

uint64_t kiln__format_checksum_ex(const void *data, size_t size, bool mapped) {
    const unsigned char *p = data;
    uint64_t h[4];
    for (int i = 0; i < 4; i++) h[i] = KILN_FNV_SEED + (uint64_t)i;
    size_t pos = 0;
    /* The first 64 bytes go through a copy with the checksum field zeroed. */
    if (size >= 64) {
        unsigned char head[64];
        memcpy(head, p, 64);
        memset(head + KILN_FMT_OFF_CHECKSUM, 0, 8);
        checksum_block(h, head);
        checksum_block(h, head + 32);
        pos = 64;
    }
    size_t released = 0;
    for (; size - pos >= 32; pos += 32) {
        checksum_block(h, p + pos);
        if (mapped && pos + 32 - released >= KILN_FMT_RELEASE_CHUNK) {
            kiln__mapping_release(data, size, p + released, pos + 32 - released);
            released = pos + 32;
        }
    }
    if (mapped && released < size) kiln__mapping_release(data, size, p + released, size - released);
    if (pos < size) {
        unsigned char tail[64] = {0};
        memcpy(tail, p + pos, size - pos);
        if (pos < KILN_FMT_OFF_CHECKSUM + 8) /* short input: field still inside */
            memset(tail + KILN_FMT_OFF_CHECKSUM, 0, 8);
        checksum_block(h, tail);
        if (size - pos > 32) checksum_block(h, tail + 32);
    }
    unsigned char fin[40];
    for (int i = 0; i < 4; i++) kiln__put_le64(fin + 8 * i, h[i]);
    kiln__put_le64(fin + 32, (uint64_t)size);
    return kiln__fnv1a(fin, sizeof fin, KILN_FNV_SEED);
}

/* ---- string table ------------------------------------------------------- */

typedef struct strtab {
    char *data;
    size_t len, cap;
} strtab;

/* Appends s (NULL counts as "") and returns its offset in *off. */
static kiln_status strtab_add(strtab *t, const char *s, uint32_t *off) {
    if (!s || !*s) {
        *off = 0;
        return KILN_OK;
    }
    size_t n = strlen(s) + 1;
    if (t->len + n > UINT32_MAX)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "engine string table exceeds 4 GiB");
    if (t->len + n > t->cap) {
        size_t ncap = t->cap ? t->cap : 1024;
        while (ncap < t->len + n) ncap *= 2;
        char *nd = kiln__realloc(t->data, ncap);
        if (!nd) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory writing an engine");
        t->data = nd;
        t->cap = ncap;
    }
    memcpy(t->data + t->len, s, n);
    *off = (uint32_t)t->len;
    t->len += n;
    return KILN_OK;
}

/* ---- layout ------------------------------------------------------------- */

enum { SEC_STRS, SEC_SYMS, SEC_VALS, SEC_NODS, SEC_GRPH, SEC_PROF, SEC_SRCS, SEC_WGTS, SEC_COUNT };
static const char kiln_sec_ids[SEC_COUNT][5] = {"STRS", "SYMS", "VALS", "NODS",
                                                "GRPH", "PROF", "SRCS", "WGTS"};

typedef struct section {
    uint64_t offset, size, count;
} section;

static bool add_ok(uint64_t *acc, uint64_t n) { return !__builtin_add_overflow(*acc, n, acc); }

static bool align_ok(uint64_t *v, uint64_t a) {
    uint64_t r = *v % a;
    return r == 0 || add_ok(v, a - r);
}

static uint64_t node_record_size(const kiln_node *n) {
    uint64_t s = KILN_FMT_NODE_HEADER + 4 * ((uint64_t)n->n_in + (uint64_t)n->n_out) +
                 (uint64_t)n->op->attr_size;
    return (s + 7) & ~(uint64_t)7;
}

/* ---- writer ------------------------------------------------------------- */

static void put_str(unsigned char *dst, const char *s, size_t cap) {
    size_t n = strlen(s);
    if (n > cap - 1) n = cap - 1;
    memcpy(dst, s, n); /* the rest stays zero */
}

kiln_status kiln__format_write(const kiln_engine *e, void **data, size_t *size) {
    if (!data || !size)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln__format_write: NULL output");
    *data = NULL;
    *size = 0;
    if (!e || !e->graph)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "cannot write engine: no engine or no plan");
    const kiln_graph *g = e->graph;

    kiln_status st = kiln__format_check_graph(g, e->profiles, true);
    if (st != KILN_OK)
        return kiln__fail_prefix(KILN_ERR_INTERNAL, "refusing to write an invalid engine");
    if (memchr(e->target, 0, sizeof e->target) == NULL ||
        strlen(e->target) >= KILN_FMT_TARGET_LEN)
        return KILN_FAIL(KILN_ERR_INTERNAL, "cannot write engine: target string is too long");

    /* Strings. */
    strtab t = {0};
    uint32_t *val_name = kiln__calloc((size_t)g->n_values + 1, sizeof *val_name);
    uint32_t *node_name = kiln__calloc((size_t)g->n_nodes + 1, sizeof *node_name);
    uint32_t *sym_name = kiln__calloc((size_t)g->n_symbols + 1, sizeof *sym_name);
    uint32_t *src_first = kiln__calloc((size_t)g->n_nodes + 1, sizeof *src_first); /* into src_name */
    uint32_t *src_name = NULL;
    int n_src_names = 0, cap_src_names = 0;
    unsigned char *buf = NULL;
    if (!val_name || !node_name || !sym_name || !src_first) {
        st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory writing an engine");
        goto done;
    }
    /* Offset 0 is the empty string. */
    t.data = kiln__malloc(1024);
    if (!t.data) {
        st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory writing an engine");
        goto done;
    }
    t.cap = 1024;
    t.data[0] = 0;
    t.len = 1;
    for (int i = 0; i < g->n_symbols; i++)
        if ((st = strtab_add(&t, g->symbols[i], &sym_name[i])) != KILN_OK) goto done;
    for (int i = 0; i < g->n_values; i++)
        if ((st = strtab_add(&t, g->values[i].name, &val_name[i])) != KILN_OK) goto done;
    int n_live = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead) continue;
        n_live++;
        if ((st = strtab_add(&t, g->nodes[i].name, &node_name[i])) != KILN_OK) goto done;
    }
    /* SRCS: each node's source names (an unfused node's is its own name) */
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead) continue;
        int k = kiln__node_num_sources(n);
        src_first[i] = (uint32_t)n_src_names;
        if ((st = kiln__grow((void **)&src_name, &cap_src_names, n_src_names + k + 1, sizeof *src_name)) != KILN_OK)
            goto done;
        for (int j = 0; j < k; j++) { /* a source named as its node shares the name's string */
            const char *src = kiln__node_source(n, j);
            if (!strcmp(src, n->name)) src_name[n_src_names] = node_name[i];
            else if ((st = strtab_add(&t, src, &src_name[n_src_names])) != KILN_OK) goto done;
            n_src_names++;
        }
    }

    /* Layout. User metadata, when there is any, goes last, in an optional
     * section (meta.c). */
    section sec[SEC_COUNT], meta = {0};
    memset(sec, 0, sizeof sec);
    bool ok = kiln__meta_size(&e->meta, &meta.size);
    meta.count = (uint64_t)e->meta.n;
    int n_sec = SEC_COUNT + (meta.count > 0);
    uint64_t pos = KILN_FORMAT_HEADER_SIZE + (uint64_t)n_sec * KILN_FORMAT_SECTION_ENTRY;
    sec[SEC_STRS].size = sec[SEC_STRS].count = t.len;
    sec[SEC_SYMS].size = 4 * (uint64_t)g->n_symbols;
    sec[SEC_SYMS].count = (uint64_t)g->n_symbols;
    sec[SEC_VALS].size = KILN_FMT_VALUE_RECORD * (uint64_t)g->n_values;
    sec[SEC_VALS].count = (uint64_t)g->n_values;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead) ok = ok && add_ok(&sec[SEC_NODS].size, node_record_size(&g->nodes[i]));
    sec[SEC_NODS].count = (uint64_t)n_live;
    sec[SEC_GRPH].size = KILN_FMT_GRAPH_HEADER + 4 * ((uint64_t)g->n_inputs + (uint64_t)g->n_outputs);
    sec[SEC_GRPH].count = 1;
    sec[SEC_PROF].size = KILN_FMT_PROFILE_RECORD * (uint64_t)g->n_inputs;
    sec[SEC_PROF].count = (uint64_t)g->n_inputs;
    sec[SEC_SRCS].size = 4 * ((uint64_t)n_live + (uint64_t)n_src_names);
    sec[SEC_SRCS].count = (uint64_t)n_live;
    for (int s = 0; s < SEC_WGTS; s++) {
        ok = ok && align_ok(&pos, 8);
        sec[s].offset = pos;
        ok = ok && add_ok(&pos, sec[s].size);
    }
    ok = ok && align_ok(&pos, KILN_FORMAT_ALIGN);
    sec[SEC_WGTS].offset = pos;
    uint64_t *const_off = kiln__calloc((size_t)g->n_values + 1, sizeof *const_off);
    if (!const_off) {
        st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory writing an engine");
        goto done;
    }
    for (int i = 0; i < g->n_values; i++) {
        const kiln_value *v = &g->values[i];
        if (!(v->flags & KILN_VALUE_CONST)) continue;
        ok = ok && align_ok(&pos, KILN_FORMAT_ALIGN);
        const_off[i] = pos;
        ok = ok && add_ok(&pos, kiln__value_nbytes(&v->info));
        sec[SEC_WGTS].count++;
    }
    sec[SEC_WGTS].size = pos - sec[SEC_WGTS].offset;
    if (meta.count) {
        ok = ok && align_ok(&pos, 8);
        meta.offset = pos;
        ok = ok && add_ok(&pos, meta.size);
    }
    if (!ok || pos > (uint64_t)SIZE_MAX) {
        kiln__free(const_off);
        st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "engine is too large to serialize");
        goto done;
    }

    size_t total = (size_t)pos;
    buf = kiln__aligned_alloc(total);
    if (!buf) {
        kiln__free(const_off);
        st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory serializing an engine (%zu bytes)",
                       total);
        goto done;
    }
    memset(buf, 0, total);

    /* Header. */
    memcpy(buf, KILN_FORMAT_MAGIC, KILN_FORMAT_MAGIC_SIZE);
    kiln__put_le32(buf + KILN_FMT_OFF_VERSION, KILN_FORMAT_VERSION);
    kiln__put_le32(buf + KILN_FMT_OFF_HEADER_SIZE, KILN_FORMAT_HEADER_SIZE);
    kiln__put_le32(buf + KILN_FMT_OFF_SECTION_COUNT, (uint32_t)n_sec);
    kiln__put_le64(buf + KILN_FMT_OFF_FILE_SIZE, (uint64_t)total);
    kiln__put_le32(buf + KILN_FMT_OFF_WRITER_VERSION, KILN_VERSION_NUMBER);
    {
        char ver[KILN_FMT_BUILDER_VERSION_LEN];
        if (memchr(e->builder_version, 0, sizeof e->builder_version) && e->builder_version[0])
            snprintf(ver, sizeof ver, "%s", e->builder_version);
        else
            snprintf(ver, sizeof ver, "%d.%d.%d", KILN_VERSION_MAJOR, KILN_VERSION_MINOR,
                     KILN_VERSION_PATCH);
        put_str(buf + KILN_FMT_OFF_BUILDER_VERSION, ver, KILN_FMT_BUILDER_VERSION_LEN);
    }
    kiln__put_le32(buf + KILN_FMT_OFF_DEVICE, (uint32_t)e->opts.device);
    kiln__put_le32(buf + KILN_FMT_OFF_DEVICE_INDEX, (uint32_t)e->opts.device_index);
    kiln__put_le32(buf + KILN_FMT_OFF_PRECISION, (uint32_t)e->opts.precision);
    kiln__put_le32(buf + KILN_FMT_OFF_THREADS, (uint32_t)e->opts.threads);
    kiln__put_le64(buf + KILN_FMT_OFF_WORKSPACE, e->opts.workspace);
    kiln__put_le32(buf + KILN_FMT_OFF_MATH, (uint32_t)e->opts.math);
    put_str(buf + KILN_FMT_OFF_TARGET, e->target, KILN_FMT_TARGET_LEN);
    /* required: CPU features the kernels need (bf16 convolutions: avx512_bf16). */
    if (e->opts.device == KILN_DEVICE_CPU && e->opts.precision == KILN_PRECISION_BF16)
        put_str(buf + KILN_FMT_OFF_REQUIRED, "avx512_bf16", KILN_FMT_REQUIRED_LEN);

    /* Section table. */
    for (int s = 0; s < SEC_COUNT; s++) {
        unsigned char *p = buf + KILN_FORMAT_HEADER_SIZE + (size_t)s * KILN_FORMAT_SECTION_ENTRY;
        memcpy(p, kiln_sec_ids[s], 4);
        kiln__put_le32(p + 4, s == SEC_SRCS ? 0 : KILN_FMT_SECTION_REQUIRED); /* SRCS: optional */
        kiln__put_le64(p + 8, sec[s].offset);
        kiln__put_le64(p + 16, sec[s].size);
        kiln__put_le64(p + 24, sec[s].count);
    }
    if (meta.count) {
        unsigned char *p = buf + KILN_FORMAT_HEADER_SIZE + (size_t)SEC_COUNT * KILN_FORMAT_SECTION_ENTRY;
        memcpy(p, KILN_FMT_META_ID, 4); /* flags 0: optional, older readers skip it */
        kiln__put_le64(p + 8, meta.offset);
        kiln__put_le64(p + 16, meta.size);
        kiln__put_le64(p + 24, meta.count);
        kiln__meta_write(&e->meta, buf + meta.offset);
    }

    /* STRS */
    memcpy(buf + sec[SEC_STRS].offset, t.data, t.len);
    /* SYMS */
    for (int i = 0; i < g->n_symbols; i++)
        kiln__put_le32(buf + sec[SEC_SYMS].offset + 4 * (size_t)i, sym_name[i]);
    /* VALS + WGTS */
    for (int i = 0; i < g->n_values; i++) {
        const kiln_value *v = &g->values[i];
        unsigned char *p = buf + sec[SEC_VALS].offset + (size_t)i * KILN_FMT_VALUE_RECORD;
        kiln__put_le32(p, val_name[i]);
        kiln__put_le32(p + 4, (uint32_t)v->info.dtype);
        kiln__put_le32(p + 8, (uint32_t)v->info.rank);
        kiln__put_le32(p + 12, v->flags);
        for (int d = 0; d < v->info.rank && d < KILN_MAX_RANK; d++)
            kiln__put_le64(p + 16 + 8 * d, (uint64_t)v->info.dims[d]);
        if (v->flags & KILN_VALUE_CONST) {
            size_t nb = kiln__value_nbytes(&v->info);
            kiln__put_le64(p + 80, const_off[i]);
            kiln__put_le64(p + 88, (uint64_t)nb);
            if (nb) memcpy(buf + const_off[i], v->data, nb);
        }
    }
    kiln__free(const_off);
    /* NODS */
    {
        unsigned char *p = buf + sec[SEC_NODS].offset;
        for (int i = 0; i < g->n_nodes; i++) {
            const kiln_node *n = &g->nodes[i];
            if (n->dead) continue;
            kiln__put_le32(p, (uint32_t)n->op_id);
            kiln__put_le32(p + 4, node_name[i]);
            kiln__put_le32(p + 8, (uint32_t)n->n_in);
            kiln__put_le32(p + 12, (uint32_t)n->n_out);
            kiln__put_le32(p + 16, (uint32_t)n->op->attr_size);
            kiln__put_le32(p + 20, (uint32_t)n->device);
            unsigned char *q = p + KILN_FMT_NODE_HEADER;
            for (int k = 0; k < n->n_in; k++, q += 4) kiln__put_le32(q, (uint32_t)n->in[k]);
            for (int k = 0; k < n->n_out; k++, q += 4) kiln__put_le32(q, (uint32_t)n->out[k]);
            if (n->op->attr_size) memcpy(q, n->attrs, n->op->attr_size);
            p += node_record_size(n);
        }
    }
    /* GRPH */
    {
        unsigned char *p = buf + sec[SEC_GRPH].offset;
        kiln__put_le64(p, (uint64_t)g->opset);
        kiln__put_le32(p + 8, (uint32_t)g->n_inputs);
        kiln__put_le32(p + 12, (uint32_t)g->n_outputs);
        p += KILN_FMT_GRAPH_HEADER;
        for (int i = 0; i < g->n_inputs; i++, p += 4) kiln__put_le32(p, (uint32_t)g->inputs[i]);
        for (int i = 0; i < g->n_outputs; i++, p += 4) kiln__put_le32(p, (uint32_t)g->outputs[i]);
    }
    /* PROF */
    for (int i = 0; i < g->n_inputs; i++) {
        const kiln_profile *pr = &e->profiles[i];
        unsigned char *p = buf + sec[SEC_PROF].offset + (size_t)i * KILN_FMT_PROFILE_RECORD;
        kiln__put_le32(p, (uint32_t)pr->rank);
        for (int d = 0; d < pr->rank; d++) {
            kiln__put_le64(p + 8 + 8 * d, (uint64_t)pr->min[d]);
            kiln__put_le64(p + 72 + 8 * d, (uint64_t)pr->opt[d]);
            kiln__put_le64(p + 136 + 8 * d, (uint64_t)pr->max[d]);
        }
    }

    /* SRCS */
    {
        unsigned char *p = buf + sec[SEC_SRCS].offset;
        for (int i = 0; i < g->n_nodes; i++) {
            const kiln_node *n = &g->nodes[i];
            if (n->dead) continue;
            int k = kiln__node_num_sources(n);
            kiln__put_le32(p, (uint32_t)k);
            p += 4;
            for (int j = 0; j < k; j++, p += 4) kiln__put_le32(p, src_name[src_first[i] + (uint32_t)j]);
        }
    }

    kiln__put_le64(buf + KILN_FMT_OFF_CHECKSUM, kiln__format_checksum(buf, total));
    *data = buf;
    *size = total;
    buf = NULL;
    st = KILN_OK;

done:
    kiln__aligned_free(buf);
    kiln__free(t.data);
    kiln__free(val_name);
    kiln__free(node_name);
    kiln__free(sym_name);
    kiln__free(src_first);
    kiln__free(src_name);
    return st;
}
