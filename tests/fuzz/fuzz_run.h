/* fuzz_run.h -- shared by the fuzz targets: runs an engine once on zero
 * inputs at its profiles' min shapes, on one thread, under a 16 MiB
 * activation limit, so that the kernels see the attributes and shapes a
 * fuzzed file produced (a run may fail, never crash). Larger layers are
 * refused by the limit before they allocate, which also keeps each input's
 * work small. */
#ifndef KILN_FUZZ_RUN_H
#define KILN_FUZZ_RUN_H

#include <stdbool.h>
#include <stdlib.h>

#include "kiln.h"

static void fuzz_run_once(kiln_engine *e) {
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

#endif
