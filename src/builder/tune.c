/* tune.c -- tactic selection at build time (to be written). */
#include "backends/backend.h"
#include "runtime/engine.h"

kiln_status kiln__builder_tune(const kiln_builder *b, kiln_engine *e) {
    (void)b;
    (void)e;
    return KILN_OK;
}
