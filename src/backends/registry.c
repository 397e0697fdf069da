/* registry.c -- the backends this kiln knows, by device: one line each.
 * A backend is a folder under src/backends/ whose vtable (backend.h) a
 * getter returns; its getter is NULL where this kiln was built without it
 * (the device is then known by name, and refused as not built in). */
#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"

#include <stdio.h>
#include <string.h>

typedef struct backend_entry {
    int device;       /* kiln_device */
    const char *name; /* as in target strings, messages and inspect */
    const kiln_backend_i *(*get)(void);
} backend_entry;

static const backend_entry kiln_backends[] = {
    {KILN_DEVICE_CPU, "cpu", kiln__cpu_backend},
    {KILN_DEVICE_CUDA, "cuda", KILN_CUDA_BACKEND_GET},
};

static const backend_entry *entry_of(int device) {
    for (size_t i = 0; i < sizeof kiln_backends / sizeof kiln_backends[0]; i++)
        if (kiln_backends[i].device == device) return &kiln_backends[i];
    return NULL;
}

const kiln_backend_i *kiln__backend_for(int device) {
    const backend_entry *b = entry_of(device);
    return b && b->get ? b->get() : NULL;
}

const char *kiln__device_name(int device) {
    const backend_entry *b = entry_of(device);
    return b ? b->name : NULL;
}

kiln_status kiln_device_from_name(const char *name, kiln_device *dev) {
    const size_t nb = sizeof kiln_backends / sizeof kiln_backends[0];
    for (size_t i = 0; name && dev && i < nb; i++)
        if (!strcmp(name, kiln_backends[i].name)) {
            *dev = (kiln_device)kiln_backends[i].device;
            return KILN_OK;
        }
    if (!dev) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_device_from_name: dev is NULL");
    char known[128] = "";
    for (size_t i = 0; i < nb; i++) {
        size_t n = strlen(known);
        snprintf(known + n, sizeof known - n, "%s%s", i ? ", " : "", kiln_backends[i].name);
    }
    return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "unknown device '%.64s' (known: %s)", name ? name : "(null)", known);
}

const char *kiln_device_name(kiln_device dev) { return kiln__device_name(dev); }

int kiln_device_available(kiln_device dev) {
    const kiln_backend_i *be = kiln__backend_for(dev);
    if (!be) return 0;
    if (dev == KILN_DEVICE_CPU) return 1;
    void *state = NULL;
    if (be->state_create(0, &state) != KILN_OK) {
        kiln__clear_error();
        return 0;
    }
    be->state_free(state);
    return 1;
}
