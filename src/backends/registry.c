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

/* A device spec for a message: at most 48 bytes of it (cut before a UTF-8
 * sequence, "..." after), escaped as kiln_printable does. A spec of any
 * length leaves the message room to say what is expected. */
static const char *spec_shown(const char *spec, char *buf, size_t cap) {
    char cut[64];
    size_t n = strlen(spec);
    if (n > 48) {
        n = 48;
        while (n > 0 && ((unsigned char)spec[n] & 0xC0) == 0x80) n--; /* spec[n] starts a character */
        memcpy(cut, spec, n);
        memcpy(cut + n, "...", 4);
        spec = cut;
    }
    const char *s = kiln_printable(spec, buf, cap);
    return s == cut ? (snprintf(buf, cap, "%s", cut), buf) : s;
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
    char shown[256];
    return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "unknown device '%s' (known: %s)",
                     name ? spec_shown(name, shown, sizeof shown) : "(null)", known);
}

int kiln__device_index_max(int device) { return device == KILN_DEVICE_CPU ? 0 : 1023; }

kiln_status kiln_device_parse(const char *spec, kiln_device *dev, int *index) {
    if (!spec || !dev || !index)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_device_parse: %s is NULL",
                         !spec ? "spec" : !dev ? "dev" : "index");
    char name[32], shown[256];
    const char *colon = strchr(spec, ':');
    size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    kiln_device d = KILN_DEVICE_CPU;
    kiln_status st = n < sizeof name ? KILN_OK : KILN_ERR_INVALID_ARGUMENT;
    if (st == KILN_OK) {
        memcpy(name, spec, n);
        name[n] = 0;
        st = kiln_device_from_name(name, &d);
    }
    long idx = 0;
    if (st == KILN_OK && colon) {
        const char *p = colon + 1;
        int max = kiln__device_index_max(d), digits = 0;
        for (; *p >= '0' && *p <= '9' && idx <= max; p++, digits++) idx = idx * 10 + (*p - '0');
        if (!digits || *p || idx > max) st = KILN_ERR_INVALID_ARGUMENT;
    }
    if (st != KILN_OK) {
        kiln__clear_error();
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "device '%s': expected cpu, cpu:0, cuda or cuda:N (N in 0..1023)",
                         spec_shown(spec, shown, sizeof shown));
    }
    *dev = d;
    *index = (int)idx;
    return KILN_OK;
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
