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
