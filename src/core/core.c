/* core.c -- status messages, allocation, dtype facts, half floats, string
 * buffers, hashing. */
#include "core/core.h"

#include <sys/mman.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- status ------------------------------------------------------------ */

/* The last error message of this thread. Thread-local by design (the one
 * piece of state outside explicit contexts, like errno). */
static _Thread_local char kiln_errbuf[1024];

/* Control characters other than newline and tab become '?': messages name
 * a model's or engine's nodes and values, whose names may hold terminal
 * escapes or carriage returns meant for whoever reads the message. */
static void scrub_error(void) {
    for (char *p = kiln_errbuf; *p;) {
        size_t k = *p == '\n' || *p == '\t' ? 0 : kiln__control_at(p);
        if (!k) p++;
        for (; k; k--) *p++ = '?';
    }
}

size_t kiln__control_at(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    if ((p[0] && p[0] < 0x20) || p[0] == 0x7f) return 1;
    return p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f ? 2 : 0; /* U+0080..U+009F in UTF-8 */
}

const char *kiln_printable(const char *s, char *buf, size_t cap) {
    if (!s) return "(null)";
    const char *p = s;
    while (*p && !kiln__control_at(p)) p++;
    if (!*p) return s;
    if (!buf || !cap) return "?"; /* no room for the escaped copy: never s itself */
    size_t n = 0;
    for (p = s; *p;) {
        size_t k = kiln__control_at(p);
        if (n + (k ? 4 * k : 1) >= cap) break;
        if (!k) buf[n++] = *p++;
        for (; k; k--) n += (size_t)snprintf(buf + n, cap - n, "\\x%02x", (unsigned char)*p++);
    }
    buf[n] = 0;
    return buf;
}

kiln_status kiln__fail(kiln_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kiln_errbuf, sizeof kiln_errbuf, fmt, ap);
    va_end(ap);
    scrub_error();
    return code;
}

kiln_status kiln__fail_prefix(kiln_status code, const char *fmt, ...) {
    char prefix[512], old[sizeof kiln_errbuf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, kiln_errbuf, sizeof old);
    /* "prefix: old", truncated to the buffer */
    size_t np = strlen(prefix), no = strlen(old), cap = sizeof kiln_errbuf - 1;
    if (np > cap) np = cap;
    memcpy(kiln_errbuf, prefix, np);
    size_t len = np;
    if (len + 2 <= cap) {
        memcpy(kiln_errbuf + len, ": ", 2);
        len += 2;
    }
    if (no > cap - len) no = cap - len;
    memcpy(kiln_errbuf + len, old, no);
    kiln_errbuf[len + no] = 0;
    scrub_error();
    return code;
}

void kiln__clear_error(void) { kiln_errbuf[0] = 0; }

const char *kiln_last_error(void) { return kiln_errbuf; }

void kiln__assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "kiln: internal error: assertion '%s' failed at %s:%d\n", expr, file, line);
    abort();
}

const char *kiln_status_name(kiln_status s) {
    switch (s) {
    case KILN_OK: return "KILN_OK";
    case KILN_ERR_INVALID_ARGUMENT: return "KILN_ERR_INVALID_ARGUMENT";
    case KILN_ERR_UNSUPPORTED: return "KILN_ERR_UNSUPPORTED";
    case KILN_ERR_MODEL: return "KILN_ERR_MODEL";
    case KILN_ERR_FORMAT: return "KILN_ERR_FORMAT";
    case KILN_ERR_OUT_OF_MEMORY: return "KILN_ERR_OUT_OF_MEMORY";
    case KILN_ERR_DEVICE: return "KILN_ERR_DEVICE";
    case KILN_ERR_IO: return "KILN_ERR_IO";
    case KILN_ERR_INTERNAL: return "KILN_ERR_INTERNAL";
    }
    return "KILN_ERR_UNKNOWN";
}

int kiln_version_number(void) { return KILN_VERSION_NUMBER; }

const char *kiln_version_string(void) {
#define KILN_STR2(x) #x
#define KILN_STR(x) KILN_STR2(x)
    return KILN_STR(KILN_VERSION_MAJOR) "." KILN_STR(KILN_VERSION_MINOR) "." KILN_STR(
        KILN_VERSION_PATCH);
}

/* ---- allocation -------------------------------------------------------- */

void *kiln__malloc(size_t n) { return malloc(n ? n : 1); }
void *kiln__calloc(size_t n, size_t size) { return calloc(n ? n : 1, size ? size : 1); }
void *kiln__realloc(void *p, size_t n) { return realloc(p, n ? n : 1); }
void kiln__free(void *p) { free(p); }
void kiln_free(void *p) { kiln__aligned_free(p); }

char *kiln__strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = kiln__malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* Blocks of at least this many bytes start on a 2 MiB boundary and are
 * marked for transparent huge pages (Linux madvise(MADV_HUGEPAGE), where
 * the system allows it: /sys/kernel/mm/transparent_hugepage/enabled
 * "madvise" or "always"). They hold the packed weights and the activation
 * arena, which every run streams: ResNet-50's 100 MB take 50 TLB entries
 * instead of 25,000 (docs/memory.md). KILN_HUGE_PAGES=0 turns it off. */
#define HUGE_BYTES ((size_t)2 << 20)

bool kiln__env_flag(const char *name) {
    return kiln__env_flag_default(name, false);
}

bool kiln__env_flag_default(const char *name, bool dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    return strcmp(v, "0") != 0;
}

bool kiln__huge_pages_wanted(void) {
    const char *env = getenv("KILN_HUGE_PAGES");
    return !(env && env[0] == '0' && env[1] == 0);
}

void *kiln__aligned_alloc(size_t n) {
    void *p = NULL;
#ifdef MADV_HUGEPAGE
    if (n >= HUGE_BYTES && kiln__huge_pages_wanted()) {
        if (posix_memalign(&p, HUGE_BYTES, n) != 0) return NULL;
        (void)madvise(p, n & ~(HUGE_BYTES - 1), MADV_HUGEPAGE); /* advice only: no error to report */
        return p;
    }
#endif
    if (posix_memalign(&p, 256, n ? n : 1) != 0) return NULL;
    return p;
}

void kiln__aligned_free(void *p) { free(p); }

kiln_status kiln__grow(void **p, int *cap, int need, size_t size) {
    if (need <= *cap) return KILN_OK;
    int ncap = *cap ? *cap : 8;
    while (ncap < need) {
        if (ncap > (1 << 29)) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "table too large");
        ncap *= 2;
    }
    void *np = kiln__realloc(*p, (size_t)ncap * size);
    if (!np) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory growing a table");
    memset((char *)np + (size_t)*cap * size, 0, (size_t)(ncap - *cap) * size);
    *p = np;
    *cap = ncap;
    return KILN_OK;
}

/* ---- dtypes ------------------------------------------------------------ */

bool kiln__dtype_valid(int t) {
    switch (t) {
    case KILN_DTYPE_FLOAT32: case KILN_DTYPE_UINT8: case KILN_DTYPE_INT8:
    case KILN_DTYPE_UINT16: case KILN_DTYPE_INT16: case KILN_DTYPE_INT32:
    case KILN_DTYPE_INT64: case KILN_DTYPE_BOOL: case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_FLOAT64: case KILN_DTYPE_UINT32: case KILN_DTYPE_UINT64:
    case KILN_DTYPE_BFLOAT16:
        return true;
    default:
        return false;
    }
}

size_t kiln_dtype_size(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT32: case KILN_DTYPE_INT32: case KILN_DTYPE_UINT32: return 4;
    case KILN_DTYPE_UINT8: case KILN_DTYPE_INT8: case KILN_DTYPE_BOOL: return 1;
    case KILN_DTYPE_UINT16: case KILN_DTYPE_INT16: case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: return 2;
    case KILN_DTYPE_INT64: case KILN_DTYPE_FLOAT64: case KILN_DTYPE_UINT64: return 8;
    default: return 0;
    }
}

const char *kiln_dtype_name(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT32: return "float32";
    case KILN_DTYPE_UINT8: return "uint8";
    case KILN_DTYPE_INT8: return "int8";
    case KILN_DTYPE_UINT16: return "uint16";
    case KILN_DTYPE_INT16: return "int16";
    case KILN_DTYPE_INT32: return "int32";
    case KILN_DTYPE_INT64: return "int64";
    case KILN_DTYPE_STRING: return "string";
    case KILN_DTYPE_BOOL: return "bool";
    case KILN_DTYPE_FLOAT16: return "float16";
    case KILN_DTYPE_FLOAT64: return "float64";
    case KILN_DTYPE_UINT32: return "uint32";
    case KILN_DTYPE_UINT64: return "uint64";
    case KILN_DTYPE_BFLOAT16: return "bfloat16";
    default: return "?";
    }
}

bool kiln__dtype_is_float(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT32 || t == KILN_DTYPE_FLOAT64 || t == KILN_DTYPE_FLOAT16 ||
           t == KILN_DTYPE_BFLOAT16;
}

bool kiln__dtype_is_int(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_UINT8: case KILN_DTYPE_INT8: case KILN_DTYPE_UINT16: case KILN_DTYPE_INT16:
    case KILN_DTYPE_INT32: case KILN_DTYPE_INT64: case KILN_DTYPE_UINT32: case KILN_DTYPE_UINT64:
        return true;
    default:
        return false;
    }
}

bool kiln__dtype_is_signed(kiln_dtype t) {
    return t == KILN_DTYPE_INT8 || t == KILN_DTYPE_INT16 || t == KILN_DTYPE_INT32 ||
           t == KILN_DTYPE_INT64 || kiln__dtype_is_float(t);
}

double kiln__load_f64(kiln_dtype t, const void *p, int64_t i) {
    switch (t) {
    case KILN_DTYPE_FLOAT32: return ((const float *)p)[i];
    case KILN_DTYPE_FLOAT64: return ((const double *)p)[i];
    case KILN_DTYPE_FLOAT16: return kiln__f16_to_f32(((const uint16_t *)p)[i]);
    case KILN_DTYPE_BFLOAT16: return kiln__bf16_to_f32(((const uint16_t *)p)[i]);
    case KILN_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case KILN_DTYPE_INT8: return ((const int8_t *)p)[i];
    case KILN_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case KILN_DTYPE_INT16: return ((const int16_t *)p)[i];
    case KILN_DTYPE_INT32: return ((const int32_t *)p)[i];
    case KILN_DTYPE_INT64: return (double)((const int64_t *)p)[i];
    case KILN_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case KILN_DTYPE_UINT64: return (double)((const uint64_t *)p)[i];
    case KILN_DTYPE_BOOL: return ((const uint8_t *)p)[i] ? 1.0 : 0.0;
    default: return 0.0;
    }
}

/* float -> integer conversion that is defined for every input (C leaves
 * out-of-range conversions undefined). */
static int64_t kiln__f64_to_i64(double v) {
    if (isnan(v)) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

void kiln__store_f64(kiln_dtype t, void *p, int64_t i, double v) {
    switch (t) {
    case KILN_DTYPE_FLOAT32: ((float *)p)[i] = (float)v; break;
    case KILN_DTYPE_FLOAT64: ((double *)p)[i] = v; break;
    case KILN_DTYPE_FLOAT16: ((uint16_t *)p)[i] = kiln__f32_to_f16((float)v); break;
    case KILN_DTYPE_BFLOAT16: ((uint16_t *)p)[i] = kiln__f32_to_bf16((float)v); break;
    case KILN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0.0; break;
    case KILN_DTYPE_UINT64:
        ((uint64_t *)p)[i] = v >= 18446744073709551615.0 ? UINT64_MAX
                             : (v > 0 ? (uint64_t)v : (uint64_t)kiln__f64_to_i64(v));
        break;
    default: kiln__store_i64(t, p, i, kiln__f64_to_i64(v)); break;
    }
}

int64_t kiln__load_i64(kiln_dtype t, const void *p, int64_t i) {
    switch (t) {
    case KILN_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case KILN_DTYPE_INT8: return ((const int8_t *)p)[i];
    case KILN_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case KILN_DTYPE_INT16: return ((const int16_t *)p)[i];
    case KILN_DTYPE_INT32: return ((const int32_t *)p)[i];
    case KILN_DTYPE_INT64: return ((const int64_t *)p)[i];
    case KILN_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case KILN_DTYPE_UINT64: return (int64_t)((const uint64_t *)p)[i];
    case KILN_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return kiln__f64_to_i64(kiln__load_f64(t, p, i));
    }
}

void kiln__store_i64(kiln_dtype t, void *p, int64_t i, int64_t v) {
    switch (t) {
    case KILN_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case KILN_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case KILN_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case KILN_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
    case KILN_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case KILN_DTYPE_INT64: ((int64_t *)p)[i] = v; break;
    case KILN_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case KILN_DTYPE_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    case KILN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: kiln__store_f64(t, p, i, (double)v); break;
    }
}

/* ---- half floats ------------------------------------------------------- */

float kiln__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            u = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 0x1f) {
        u = sign | 0x7f800000u | man << 13;
    } else {
        u = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t kiln__f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00); /* NaN */
    if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow -> inf */
    if (absu < 0x38800000u) { /* subnormal or zero in half */
        if (absu < 0x33000000u) return (uint16_t)sign;
        uint32_t exp = absu >> 23;
        uint32_t man = (absu & 0x7fffff) | 0x800000;
        int shift = 126 - (int)exp; /* 14..24 bits to drop */
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((absu - 0x38000000u) >> 13);
    uint32_t rem = absu & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
    return (uint16_t)(sign | half);
}

/* ---- string buffer ----------------------------------------------------- */

void kiln__sbuf_printf(kiln_sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        size_t room = b->cap - b->len;
        va_list ap;
        va_start(ap, fmt);
        int n = b->data ? vsnprintf(b->data + b->len, room, fmt, ap) : -2;
        va_end(ap);
        if (n >= 0 && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        if (n == -1) {
            b->oom = true;
            return;
        }
        size_t ncap = b->cap ? b->cap * 2 : 256;
        while (n > 0 && ncap - b->len <= (size_t)n) ncap *= 2;
        char *nd = kiln__realloc(b->data, ncap);
        if (!nd) {
            b->oom = true;
            return;
        }
        b->data = nd;
        b->cap = ncap;
        if (b->len == 0) b->data[0] = 0;
    }
}

void kiln__sbuf_free(kiln_sbuf *b) {
    kiln__free(b->data);
    memset(b, 0, sizeof *b);
}

uint64_t kiln__fnv1a(const void *data, size_t n, uint64_t seed) {
    const unsigned char *p = data;
    uint64_t h = seed;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

double kiln__now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}
