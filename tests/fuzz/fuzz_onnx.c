/* fuzz_onnx.c -- libFuzzer target for the ONNX importer.
 *
 * The input bytes are parsed with kiln_model_load_onnx_memory; a model that
 * loads is then built into an engine with a default builder. Everything is
 * freed, so leaks show up under LeakSanitizer. See tests/fuzz/README.md. */
#include <stddef.h>
#include <stdint.h>

#include "kiln.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_model *m = NULL;
    /* base_dir NULL: external data references are not followed to files. */
    if (kiln_model_load_onnx_memory(data, size, NULL, &m) != KILN_OK) return 0;
    kiln_builder *b = NULL;
    if (kiln_builder_create(&b) == KILN_OK) {
        kiln_engine *e = NULL;
        if (kiln_build(b, m, &e) == KILN_OK) kiln_engine_free(e);
        kiln_builder_free(b);
    }
    kiln_model_free(m);
    return 0;
}
