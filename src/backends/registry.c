/* registry.c -- the backends built into this kiln, by device. */
#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"

const kiln_backend_i *kiln__backend_for(int device) {
    if (device == KILN_DEVICE_CPU) return kiln__cpu_backend();
#if KILN_HAVE_CUDA
    if (device == KILN_DEVICE_CUDA) return kiln__cuda_backend();
#endif
    return NULL;
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
