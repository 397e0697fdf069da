/* engine_file.c -- a loaded engine's watch on its file: an engine mapped
 * from a file reads its weights from it, so a run first checks (at most
 * every 10 ms, by the coarse clock) that the file was not written in place
 * since it was loaded (runtime/engine.h, kiln__engine_check_file; the file
 * is opened and mapped by kiln_engine_load in api/engine_io.c). */
#include "format/format.h"

#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>

/* the coarse clock (a few ns; ms resolution) is enough for a 10 ms period */
static long long coarse_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void kiln__engine_watch_file(kiln_engine *e, int fd, const struct stat *st, const char *path) {
    e->map_fd = fd;
    e->map_open = true;
    e->map_st = *st;
    e->map_sum = kiln__le64((const unsigned char *)e->blob + KILN_FMT_OFF_CHECKSUM);
    e->map_path = kiln__strdup(path);
    atomic_store(&e->map_checked_us, coarse_now_us());
}

kiln_status kiln__engine_check_file(const kiln_engine *ce) {
    kiln_engine *e = (kiln_engine *)ce; /* the check's own fields only (atomics, under dev_lock) */
    if (!e->map_open) return KILN_OK;
    const char *path = e->map_path ? e->map_path : "?";
    if (atomic_load_explicit(&e->map_changed, memory_order_relaxed)) goto changed;
    long long now = coarse_now_us();
    long long last = atomic_load_explicit(&e->map_checked_us, memory_order_relaxed);
    if (now - last < 10000 || !atomic_compare_exchange_strong(&e->map_checked_us, &last, now))
        return KILN_OK; /* looked at less than 10 ms ago, or another thread is looking */
    struct stat st;
    if (fstat(e->map_fd, &st) != 0) return KILN_OK;
    pthread_mutex_lock(&e->dev_lock);
    bool same = kiln__same_file(&st, &e->map_st);
    if (!same && (uint64_t)st.st_size == (uint64_t)e->blob_size &&
        kiln__format_checksum_ex(e->blob, e->blob_size, true) == e->map_sum) {
        e->map_st = st; /* touched, or written again with the same bytes */
        same = true;
    }
    if (!same) atomic_store(&e->map_changed, true);
    pthread_mutex_unlock(&e->dev_lock);
    if (same) return KILN_OK;
changed:
    return KILN_FAIL(KILN_ERR_IO,
                     "engine file '%s' was written in place since it was loaded (its weights are read "
                     "from the file): load it again; replace engine files by rename, never in place "
                     "(docs/memory.md)",
                     path);
}
