/* cpu_backend.h -- what the rest of kiln sees of the CPU backend: its vtable
 * (kiln__backend_for(KILN_DEVICE_CPU) returns it). */
#ifndef KILN_CPU_BACKEND_H
#define KILN_CPU_BACKEND_H

#include "backends/backend.h"

KILN_PRIVATE const kiln_backend_i *kiln__cpu_backend(void);

#endif
