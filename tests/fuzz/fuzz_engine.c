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
 * checksum fields rewritten to match the bytes. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/format.h"
#include "kiln.h"

/* Runs a loaded engine once on zero inputs at its profiles' min shapes,
 * under a 16 MiB activation limit, on one thread: the kernels then see the
 * file's attributes and shapes (a run may fail, never crash). */
static void run_once(kiln_engine *e) {
    kiln_context *c = NULL;
    if (kiln_context_create(e, &c) != KILN_OK) return;
    kiln_context_set_threads(c, 1);
    kiln_context_set_memory_limit(c, (size_t)16 << 20);
    int n = kiln_engine_num_inputs(e);
    void *bufs[16] = {0};
    bool ok = n <= 16;
    for (int i = 0; ok && i < n; i++) {
        kiln_io_info info;
        int64_t mn[KILN_MAX_RANK], opt[KILN_MAX_RANK], mx[KILN_MAX_RANK];
        if (kiln_engine_input_info(e, i, &info) != KILN_OK ||
            kiln_engine_input_profile(e, i, mn, opt, mx) != KILN_OK || info.rank < 0 ||
            info.rank > KILN_MAX_RANK) {
            ok = false;
            break;
        }
        size_t count = 1;
        for (int d = 0; d < info.rank; d++) {
            if (mn[d] < 0 || mn[d] > (1 << 20) || (mn[d] && count > ((size_t)1 << 22) / (size_t)mn[d])) {
                ok = false;
                break;
            }
            count *= (size_t)mn[d];
        }
        size_t es = kiln_dtype_size(info.dtype);
        if (!ok || !es) {
            ok = false;
            break;
        }
        bufs[i] = calloc(count ? count : 1, es);
        ok = bufs[i] && kiln_context_set_input(c, info.name, info.dtype, info.rank, mn, bufs[i]) == KILN_OK;
    }
    if (ok) (void)kiln_context_run(c);
    for (int i = 0; i < 16; i++) free(bufs[i]);
    kiln_context_free(c);
}

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
    run_once(e);
    kiln_engine_free(e);
}

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load_and_describe(data, size);

    if (size < KILN_FORMAT_HEADER_SIZE) return 0;
    uint8_t *fixed = malloc(size);
    if (!fixed) return 0;
    memcpy(fixed, data, size);
    put_le64(fixed + KILN_FMT_OFF_FILE_SIZE, (uint64_t)size);
    put_le64(fixed + KILN_FMT_OFF_CHECKSUM, kiln__format_checksum(fixed, size));
    if (memcmp(fixed, data, size) != 0) load_and_describe(fixed, size);
    free(fixed);
    return 0;
}
