/* engine_file.c -- a loaded engine's watch on its file: an engine mapped
 * from a file reads its weights from it, so a run first checks (at most
 * every 10 ms, by the coarse clock) that the file was not written in place
 * since it was loaded (runtime/engine.h, kiln__engine_check_file; the file
 * is opened and mapped by kiln_engine_load in api/engine_io.c).
 *
 * What the check compares: the file's inode, size, modification and
 * status-change times (fstat). A write changes the times, but only to the
 * file clock's grain: Linux before 6.13 stamps files from a clock that
 * moves once per tick (1-10 ms), ext4 with small inodes and FAT once per
 * 1-2 s. A file written, loaded and written again within one grain keeps
 * every time it had at load. So an engine whose file changed within
 * KILN_FILE_TIME_GRAIN_NS of its load also compares the bytes themselves
 * (the checksum, once) at the first check after that grain has passed;
 * from then on any write gets other times. The status-change time is the
 * one a writer cannot set back (`touch -r`, `cp -p` set the modification
 * time). No check is always right during a run: the file's pages are the
 * engine's weights, and a write meanwhile is read by the run (docs/memory.md). */
#include "format/format.h"

#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>

/* the coarse clock (a few ns; ms resolution) is enough for a 10 ms period */
/* more than any file clock's grain (FAT's 2 s modification times) */
#define KILN_FILE_TIME_GRAIN_NS 3000000000LL

static long long realtime_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static long long stat_ns(const struct timespec *t) { return (long long)t->tv_sec * 1000000000 + t->tv_nsec; }

/* the same file as when loaded, as fstat sees it (kiln__same_file, and the
 * status-change time, which a writer cannot set back) */
static bool same_stat(const struct stat *a, const struct stat *b) {
    return kiln__same_file(a, b) && a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
           a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

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
    long long changed = stat_ns(&st->st_mtim) > stat_ns(&st->st_ctim) ? stat_ns(&st->st_mtim)
                                                                      : stat_ns(&st->st_ctim);
    long long now = realtime_now_ns();
    e->map_verify_at_ns = 0;
    if (now - changed < KILN_FILE_TIME_GRAIN_NS) /* (also a time in the future) */
        e->map_verify_at_ns = (changed > now ? changed : now) + KILN_FILE_TIME_GRAIN_NS;
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
    bool same = same_stat(&st, &e->map_st);
    /* loaded within a grain of a change: the times alone cannot tell */
    bool verify = same && e->map_verify_at_ns && realtime_now_ns() >= e->map_verify_at_ns;
    if (!same || verify) { /* (a file cut short is not read: its pages past the end fault) */
        same = (uint64_t)st.st_size == (uint64_t)e->blob_size &&
               kiln__format_checksum_ex(e->blob, e->blob_size, true) == e->map_sum;
        if (same) { /* touched, or written again with the same bytes; or verified */
            e->map_st = st;
            e->map_verify_at_ns = verify ? 0 : realtime_now_ns() + KILN_FILE_TIME_GRAIN_NS;
        }
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
