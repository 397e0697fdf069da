/* registry.c -- the backends this kiln knows, by device: one line each.
 * A backend is a folder under src/backends/ whose vtable (backend.h) a
 * getter returns; its getter is NULL where this kiln was built without it
 * (the device is then known by name, and refused as not built in). */
#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"

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
