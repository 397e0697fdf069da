/* core.h -- internal helpers shared by every part of kiln: status reporting,
 * allocation, dtype facts, half-precision conversion. Not public API. */
#ifndef KILN_CORE_H
#define KILN_CORE_H

#include "kiln.h"
#include "core/utf8.h" /* kiln__utf8_len, kiln__utf8_at (header-only: the CLI's too) */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KILN_PRIVATE __attribute__((visibility("hidden")))

/* Records a failure message (printf-style) for kiln_last_error() and returns
 * `code`. Use as `return KILN_FAIL(KILN_ERR_MODEL, "node '%s': ...", name);` */
#define KILN_FAIL(code, ...) kiln__fail((code), __VA_ARGS__)
KILN_PRIVATE kiln_status kiln__fail(kiln_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prepends context to the current message: "ctx: <old message>". Returns code. */
KILN_PRIVATE kiln_status kiln__fail_prefix(kiln_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
KILN_PRIVATE void kiln__clear_error(void);

#define KILN_TRY(expr)                       \
    do {                                     \
        kiln_status kiln__s_ = (expr);       \
        if (kiln__s_ != KILN_OK) return kiln__s_; \
    } while (0)

/* Invariant checks for kiln bugs only (never for input-dependent conditions). */
#define KILN_ASSERT(x) \
    ((x) ? (void)0 : kiln__assert_fail(#x, __FILE__, __LINE__))
KILN_PRIVATE void kiln__assert_fail(const char *expr, const char *file, int line);

/* Allocation. Every kiln allocation goes through these. */
KILN_PRIVATE void *kiln__malloc(size_t n);
KILN_PRIVATE void *kiln__calloc(size_t n, size_t size);
KILN_PRIVATE void *kiln__realloc(void *p, size_t n);
KILN_PRIVATE void kiln__free(void *p);
KILN_PRIVATE char *kiln__strdup(const char *s);
/* 256-byte aligned (engine weights and loaded engines rely on it); free with
 * kiln__aligned_free. From 2 MiB on: 2 MiB aligned and marked for
 * transparent huge pages (Linux), unless KILN_HUGE_PAGES=0. */
KILN_PRIVATE void *kiln__aligned_alloc(size_t n);
/* Whether environment variable `name` is set to something other than "" or
 * "0" (kiln's debugging and experiment switches, e.g. KILN_CUDA_SYNC=1). */
KILN_PRIVATE bool kiln__env_flag(const char *name);
/* Like kiln__env_flag, but `dflt` where the variable is unset or "" (a
 * feature on by default that "0" turns off, e.g. KILN_CUDA_SE_FUSED=0). */
KILN_PRIVATE bool kiln__env_flag_default(const char *name, bool dflt);

/* Whether large blocks are marked for huge pages (KILN_HUGE_PAGES is not "0"). */
KILN_PRIVATE bool kiln__huge_pages_wanted(void);
KILN_PRIVATE void kiln__aligned_free(void *p);
/* Grows *p (elements of `size`) so that it holds at least `need` elements. */
KILN_PRIVATE kiln_status kiln__grow(void **p, int *cap, int need, size_t size);

/* ---- files (src/core/file.c) ---------------------------------------------
 * "a FIFO (named pipe)", "a directory", ... for a st_mode. */
KILN_PRIVATE const char *kiln__file_type_name(unsigned mode);
/* Whether two stat results are the same file with the same size and
 * modification time (a file replaced by rename, or written, is not). */
struct stat;
KILN_PRIVATE bool kiln__same_file(const struct stat *a, const struct stat *b);
/* Opens `path` for reading when it is a regular file (symbolic links
 * followed): a FIFO, device, socket or folder is refused without a
 * blocking open. *fd_out is the caller's to close; *size_out (may be NULL)
 * its size. Messages: "<path>: cannot open <what>: <reason>", "<path>: the
 * <what> is a FIFO (named pipe), not a regular file". */
KILN_PRIVATE kiln_status kiln__open_regular(const char *path, const char *what, int *fd_out,
                                            int64_t *size_out);
/* Fails (KILN_ERR_IO, naming the path and its kind) when `path` exists and
 * is not a regular file: kiln never replaces a device, FIFO, socket or
 * folder with a file it writes. */
KILN_PRIVATE kiln_status kiln__check_write_target(const char *path, const char *what);
/* Writes `size` bytes to `path` atomically: a short temporary name in the
 * same folder (".kiln-<16 hex>.tmp", so that names near the file system's
 * length limit work), fsync, rename, fsync of the folder. The new file's
 * mode follows the umask. Refuses targets that are not regular files. */
KILN_PRIVATE kiln_status kiln__write_file_atomic(const char *path, const void *data, size_t size,
                                                 const char *what);

/* Multiplication with overflow check: returns false on overflow. */
static inline bool kiln__mul_ok(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
/* Addition with overflow check: returns false on overflow. */
static inline bool kiln__add_ok(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* The largest tensor kiln accepts, declared, stored or inferred: 2^48
 * bytes (256 TiB), far beyond any machine's memory, and far enough from
 * int64 overflow that size arithmetic on accepted tensors stays safe. */
#define KILN_MAX_TENSOR_BYTES (INT64_C(1) << 48)

/* a * b, or SIZE_MAX when it overflows (sizes from untrusted shapes; the
 * planner and the allocator refuse SIZE_MAX with a message). */
static inline size_t kiln__size_mul(size_t a, size_t b) {
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

/* dtype facts */
KILN_PRIVATE bool kiln__dtype_valid(int t);        /* a kiln_dtype kiln knows */
KILN_PRIVATE bool kiln__dtype_is_float(kiln_dtype t); /* f16, bf16, f32, f64 */
KILN_PRIVATE bool kiln__dtype_is_int(kiln_dtype t);   /* signed or unsigned integer */
KILN_PRIVATE bool kiln__dtype_is_signed(kiln_dtype t);

/* Generic element access as double / int64 (slow paths for rare dtypes). */
KILN_PRIVATE double kiln__load_f64(kiln_dtype t, const void *p, int64_t i);
KILN_PRIVATE void kiln__store_f64(kiln_dtype t, void *p, int64_t i, double v);
KILN_PRIVATE int64_t kiln__load_i64(kiln_dtype t, const void *p, int64_t i);
KILN_PRIVATE void kiln__store_i64(kiln_dtype t, void *p, int64_t i, int64_t v);

/* IEEE half and bfloat16 <-> float (round to nearest even). */
KILN_PRIVATE float kiln__f16_to_f32(uint16_t h);
KILN_PRIVATE uint16_t kiln__f32_to_f16(float f);
static inline float kiln__bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* max(m, v) that keeps NaN wherever it sits (MaxPool, GlobalMaxPool, as
 * torch's max_pool2d and numpy's maximum; docs/onnx.md): v > m alone drops a
 * NaN v that does not come first. */
static inline float kiln__max_keep_nan(float m, float v) { return v > m || v != v ? v : m; }
static inline uint16_t kiln__f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Growable string buffer (used for messages, inspect output). */
typedef struct kiln_sbuf {
    char *data;
    size_t len, cap;
    bool oom;
} kiln_sbuf;
KILN_PRIVATE void kiln__sbuf_printf(kiln_sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
KILN_PRIVATE void kiln__sbuf_free(kiln_sbuf *b);


/* How many bytes at s make one control character: 1 for bytes 0x01-0x1f
 * and 0x7f, 2 for U+0080..U+009F written in UTF-8 (C1 controls, which a
 * UTF-8 terminal may act on), else 0. What kiln_printable escapes. */
KILN_PRIVATE size_t kiln__control_at(const char *s);


/* Cheap 64-bit hash (FNV-1a) for names and checksums. */
KILN_PRIVATE uint64_t kiln__fnv1a(const void *data, size_t n, uint64_t seed);
#define KILN_FNV_SEED 0xcbf29ce484222325ull

/* Thread pool. A kernel splits [0, n) into chunks of at least `grain` and
 * calls fn(ctx, begin, end) on the pool's threads (and the caller's). A NULL
 * pool runs fn(ctx, 0, n) inline. */
typedef struct kiln_pool kiln_pool;
typedef void (*kiln_range_fn)(void *ctx, int64_t begin, int64_t end);
KILN_PRIVATE kiln_status kiln__pool_create(int threads, kiln_pool **out);
KILN_PRIVATE void kiln__pool_free(kiln_pool *p);
KILN_PRIVATE int kiln__pool_threads(const kiln_pool *p); /* 1 for NULL */
/* Whether p was made by another process: this one is a fork() child of it,
 * which has none of p's worker threads. Such a pool runs jobs on the caller
 * alone, touches no thread or lock of the parent, and is freed without
 * joining; contexts make themselves a new one (see pool.c, "fork"). */
KILN_PRIVATE bool kiln__pool_forked(const kiln_pool *p);
/* This process's fork count (0 in the process that first asked; a fork()
 * child's is higher than its parent's): what tells a child that some
 * state, a pool or a context's claim, was made by its parent. */
KILN_PRIVATE unsigned kiln__fork_gen(void);
/* While held (a context is running a plan), idle workers spin waiting for
 * the next job instead of sleeping. NULL: nothing. */
KILN_PRIVATE void kiln__pool_hold(kiln_pool *p, bool on);
KILN_PRIVATE void kiln__parallel_for(kiln_pool *p, int64_t n, int64_t grain, kiln_range_fn fn,
                                     void *ctx);
KILN_PRIVATE int kiln__cpu_count(void);
/* Threads a kernel splits a layer over at most, for its cost (multiply-adds
 * plus 16 per element read or written): one per KILN_PART_COST, and one in
 * all below twice that. Pool workers spin briefly between jobs, so handing
 * a part to one costs a few microseconds, about this many multiply-adds;
 * measured on the 2-core test machine, MobileNetV2 at 2 threads: 4.9 ms
 * with 12e6, 3.3 ms with 3e6, 2.9 ms with 1e6. */
#define KILN_PART_COST 1e6
static inline int kiln__parts_for_cost(double cost) {
    if (!(cost >= 2 * KILN_PART_COST)) return 1;
    return cost / KILN_PART_COST >= 1e9 ? 1000000000 : (int)(cost / KILN_PART_COST);
}
/* CLOCK_MONOTONIC in microseconds (timing: tactics, layer profiles). */
KILN_PRIVATE double kiln__now_us(void);
/* Tests: the CPU worker w is pinned to (-1: not pinned; see pool.c). */
KILN_PRIVATE int kiln__pool_worker_cpu(const kiln_pool *p, int w);

/* Hands the whole pages inside [p, p + n) of a read-only file mapping
 * [map, map + map_size) back to the kernel (madvise DONTNEED): they are
 * read again from the file if touched later, so no value changes, only
 * what counts as resident memory. Does nothing outside the mapping. */
KILN_PRIVATE void kiln__mapping_release(const void *map, size_t map_size, const void *p, size_t n);

#endif
