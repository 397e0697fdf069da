/* cpu_features.h -- what this CPU can do (cpu_features.c). */
#ifndef KILN_CPU_FEATURES_H
#define KILN_CPU_FEATURES_H

#include "core/core.h"

/* Whether the running CPU has feature `name` (as in the target / required
 * strings, e.g. "avx2"). *known is set false for names this kiln does not
 * know. KILN_HIDE_CPU_FEATURES hides features (see cpu_features.c). */
KILN_PRIVATE bool kiln__cpu_has_feature(const char *name, bool *known);
/* This CPU's architecture as target strings name it: "x86_64", "aarch64"... */
KILN_PRIVATE const char *kiln__cpu_arch(void);
/* Target description of this machine: "cpu <arch> <features...>". */
KILN_PRIVATE void kiln__cpu_target(char *buf, size_t n);
/* Whether this CPU does bf16 arithmetic (avx512_bf16). */
KILN_PRIVATE bool kiln__cpu_has_bf16(void);
/* Whether kiln was built with oneDNN (its tactics exist). */
KILN_PRIVATE bool kiln__have_dnnl(void);

#endif
