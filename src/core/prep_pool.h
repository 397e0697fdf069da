/* prep_pool.h -- work made ahead on host threads and taken, in order, by
 * one caller (the tuner's set-up of a layer's candidates: cuDNN execution
 * plans, some of which compile a kernel with NVRTC for half a second).
 *
 * A job is a key of ops.key_size bytes (copied; compared with memcmp) in a
 * group (a layer's number, non-decreasing from one submission to the next).
 * Workers take queued jobs in submission order and call
 * ops.prepare(ctx, worker, key, &result) with their own worker context
 * (ops.worker_init on the worker's thread: its library handle). The caller
 * takes a job's outcome by its key: it waits while a worker makes it, and
 * makes a job no worker has started itself, with its own context. So
 * the outcome of a key never depends on which thread made it or when:
 * prepare must give the same answer for the same key anywhere, and the
 * caller takes jobs in its own order.
 *
 * Bounded look-ahead: a worker starts a job of group g only while
 * g <= (the group of the caller's latest take, or the first group
 * submitted) + ahead (ahead < 0: no bound). Taking from group g drops the
 * outcomes of older groups not taken (their results freed with
 * ops.result_free), so the results held stay within the window.
 *
 * threads == 0 makes no threads: every take of a submitted job runs it on
 * the caller's thread (the serial path, through the same code).
 *
 * Thread safety: submit, take and free are for one caller thread; the
 * callbacks run on the workers concurrently (never two on one worker
 * context at once). */
#ifndef KILN_PREP_POOL_H
#define KILN_PREP_POOL_H

#include "core/core.h"

typedef struct kiln_prep_ops {
    void *ctx;        /* passed to every callback */
    size_t key_size;  /* > 0 */
    /* On each worker's thread when it starts and before it ends (may be
     * NULL). A worker whose init fails (non-zero) makes nothing. */
    int (*worker_init)(void *ctx, void **worker);
    void (*worker_fini)(void *ctx, void *worker);
    /* Makes the outcome of key: returns a status of the caller's (0 or
     * not: both are outcomes, kept as they are) and may set *result (owned
     * by whoever takes it). */
    int (*prepare)(void *ctx, void *worker, const void *key, void **result);
    /* Frees a result nobody took (may be NULL when results are never set). */
    void (*result_free)(void *ctx, void *result);
} kiln_prep_ops;

typedef struct kiln_prep kiln_prep;

/* A pool of `threads` (>= 0) workers; `ahead`: groups of look-ahead (< 0:
 * unbounded). */
KILN_PRIVATE kiln_status kiln__prep_create(int threads, int ahead, const kiln_prep_ops *ops, kiln_prep **out);
/* Waits for the jobs being made, frees every result not taken (before the
 * workers' worker_fini: a result may need its worker's context), ends the
 * workers; *final (may be NULL): the counters at the end. NULL p is fine. */
typedef struct kiln_prep_stats kiln_prep_stats;
KILN_PRIVATE void kiln__prep_free(kiln_prep *p, kiln_prep_stats *final);
/* Queues key in group (a key already queued, being made or made and not
 * taken is not queued twice). */
KILN_PRIVATE kiln_status kiln__prep_submit(kiln_prep *p, int group, const void *key);
/* The outcome of the job of key: true with *status and *result (the
 * caller's now; NULL when prepare set none) when it was submitted and not
 * taken yet; false when it was not (the caller makes it itself).
 * caller_worker: the context a job no worker has started runs with here. */
KILN_PRIVATE bool kiln__prep_take(kiln_prep *p, const void *key, void *caller_worker, int *status, void **result);

/* The caller has moved on to group g (as a take from g does, even where it
 * takes nothing from it): the window follows, and what older groups made
 * and nobody took is freed. */
KILN_PRIVATE void kiln__prep_advance(kiln_prep *p, int group);

/* Counters (tests and KILN_TUNE_VERBOSE): jobs made by the workers, by the
 * caller (take of a job not started), made but dropped before anyone took
 * them (older groups, or left at free: work for nothing), dropped before
 * anyone started them, and the caller's microseconds spent waiting in take. */
struct kiln_prep_stats {
    int64_t by_workers, by_caller, unused, unstarted;
    double wait_us;
};
KILN_PRIVATE void kiln__prep_stats(kiln_prep *p, kiln_prep_stats *s);

#endif
