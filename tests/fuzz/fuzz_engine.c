/* fuzz_engine.c -- libFuzzer target for the engine loader.
 *
 * The input bytes are loaded with kiln_engine_load_memory; an engine that
 * loads is described (text and JSON), run once on zero inputs (one thread,
 * 16 MiB activation limit) and freed. See tests/fuzz/README.md.
 *
 * Nearly every mutation of an engine file breaks its checksum (and many its
 * file-size field), which the loader checks before anything else. So that
 * the fuzzer also reaches the section and graph parsers, an input of at
 * least a header's size is loaded a second time with the file-size and
 * checksum fields rewritten to match the bytes.
 *
 * A checksum is no signature: the loader must check attribute values itself
 * (each op's validate). Mutations rarely hit attribute bytes, so each input
 * is also loaded with attribute words of its nodes set to hostile values
 * (0, -1, INT32_MIN, INT32_MAX, 2^30, INT64_MIN...): the node, the word and
 * the value are picked by a hash of the input, and the file is resealed. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"
#include "fuzz_run.h"
#include "kiln.h"

static void load_and_describe(const uint8_t *data, size_t size) {
    kiln_engine *e = NULL;
    if (kiln_engine_load_memory(data, size, &e) != KILN_OK) return;
    const char *text = kiln_engine_describe(e, 0);
    const char *json = kiln_engine_describe(e, 1);
    /* Touch the whole strings so that a bad terminator is caught by ASan. */
    volatile size_t n = 0;
    if (text) n += strlen(text);
    if (json) n += strlen(json);
    (void)n;
    fuzz_run_once(e);
    kiln_engine_free(e);
}

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void reseal(uint8_t *f, size_t size) {
    put_le64(f + KILN_FMT_OFF_FILE_SIZE, (uint64_t)size);
    put_le64(f + KILN_FMT_OFF_CHECKSUM, kiln__format_checksum(f, size));
}

/* The attribute bytes of node `want` (counting only nodes with
 * attributes) of the NODS section, walking it with every bound checked (the
 * bytes are the fuzzer's); *n_attr_nodes: how many nodes have attributes.
 * NULL if there is no such node. */
static uint8_t *node_attrs(uint8_t *f, size_t size, uint64_t want, uint32_t *attr_size,
                           uint64_t *n_attr_nodes) {
    *n_attr_nodes = 0;
    uint32_t hs = kiln__le32(f + KILN_FMT_OFF_HEADER_SIZE), ns = kiln__le32(f + KILN_FMT_OFF_SECTION_COUNT);
    uint8_t *found = NULL;
    for (uint64_t i = 0; i < ns; i++) {
        uint64_t e = hs + i * KILN_FORMAT_SECTION_ENTRY;
        if (e + KILN_FORMAT_SECTION_ENTRY > size) break;
        if (memcmp(f + e, "NODS", 4)) continue;
        uint64_t off = kiln__le64(f + e + 8), len = kiln__le64(f + e + 16), count = kiln__le64(f + e + 24);
        if (off > size || len > size - off) return NULL;
        uint64_t pos = off, end = off + len;
        for (uint64_t k = 0; k < count && end - pos >= KILN_FMT_NODE_HEADER; k++) {
            const uint8_t *q = f + pos;
            uint64_t n_io = (uint64_t)kiln__le32(q + 8) + kiln__le32(q + 12), as = kiln__le32(q + 16);
            uint64_t rec = (KILN_FMT_NODE_HEADER + 4 * n_io + as + 7) & ~(uint64_t)7;
            if (rec > end - pos) break;
            if (as >= 4) {
                if (*n_attr_nodes == want) {
                    found = f + pos + KILN_FMT_NODE_HEADER + 4 * n_io;
                    *attr_size = (uint32_t)as;
                }
                (*n_attr_nodes)++;
            }
            pos += rec;
        }
        break;
    }
    return found;
}

/* Loads `data` with one attribute word (or int64) set to a hostile value. */
static void mutate_attrs(const uint8_t *data, size_t size, uint64_t h) {
    static const int64_t values[] = {0, 1, 2, 3, -1, -2, 8, 9, 64, 65, (1 << 20) + 1, 1 << 30,
                                     INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN,
                                     (int64_t)1 << 48, (int64_t)1 << 62};
    uint8_t *f = malloc(size);
    if (!f) return;
    memcpy(f, data, size);
    uint32_t as = 0;
    uint64_t n = 0;
    node_attrs(f, size, 0, &as, &n);
    uint8_t *at = n ? node_attrs(f, size, h % n, &as, &n) : NULL;
    if (at) {
        h /= n ? n : 1;
        uint32_t word = (uint32_t)(h % (as / 4));
        h /= as / 4;
        int64_t v = values[h % (sizeof values / sizeof values[0])];
        bool wide = (h / 64) % 2 && word * 4 + 8 <= as;
        for (int i = 0; i < (wide ? 8 : 4); i++) at[word * 4 + i] = (uint8_t)((uint64_t)v >> (8 * i));
        reseal(f, size);
        load_and_describe(f, size);
    }
    free(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load_and_describe(data, size);

    if (size < KILN_FORMAT_HEADER_SIZE) return 0;
    uint8_t *fixed = malloc(size);
    if (!fixed) return 0;
    memcpy(fixed, data, size);
    reseal(fixed, size);
    if (memcmp(fixed, data, size) != 0) load_and_describe(fixed, size);
    /* two attribute mutations, picked by hashes of the (resealed) input */
    uint64_t h = kiln__fnv1a(fixed, size, KILN_FNV_SEED);
    mutate_attrs(fixed, size, h);
    mutate_attrs(fixed, size, h * 0x9e3779b97f4a7c15ull + 1);
    free(fixed);
    return 0;
}
