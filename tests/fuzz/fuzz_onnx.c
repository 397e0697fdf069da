/* fuzz_onnx.c -- libFuzzer target for the ONNX importer.
 *
 * The input bytes are parsed with kiln_model_load_onnx_memory; a model that
 * loads is then built into an engine: every pass, the optimizer, constant
 * folding, memory planning and serialization. Everything is freed, so leaks
 * show up under LeakSanitizer. See tests/fuzz/README.md.
 *
 * An engine that builds is then run once on zero inputs (fuzz_run.h: one
 * thread, 16 MiB activation limit), so the kernels see what a fuzzed model
 * gives them.
 *
 * The builder runs with tactic timing off and one thread. Timing runs every
 * candidate kernel of a layer several times at the declared shapes, and a
 * 200-byte model can declare a convolution with an 85 MB output: legitimate
 * work that takes seconds under the sanitizers and would be reported as a
 * libFuzzer timeout, without being a defect of the parser or the builder.
 * One thread keeps the coverage (and so a seeded run) repeatable. */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_run.h"
#include "kiln.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_model *m = NULL;
    /* base_dir NULL: external data references are not followed to files. */
    if (kiln_model_load_onnx_memory(data, size, NULL, &m) != KILN_OK) return 0;
    kiln_builder *b = NULL;
    if (kiln_builder_create(&b) == KILN_OK) {
        kiln_engine *e = NULL;
        kiln_builder_set_tuning(b, 0);
        kiln_builder_set_threads(b, 1);
        if (kiln_build(b, m, &e) == KILN_OK) {
            fuzz_run_once(e);
            kiln_engine_free(e);
        }
        kiln_builder_free(b);
    }
    kiln_model_free(m);
    return 0;
}
