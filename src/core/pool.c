/* pool.c -- a small fork-join thread pool for CPU kernels.
 *
 * kiln__parallel_for splits [0, n) into chunks; the calling thread and the
 * pool's workers take chunks from a shared atomic counter until none are
 * left, then the caller waits for the workers to finish. One job runs at a
 * time per pool (a pool belongs to one context, which runs on one thread).
 *
 * Waking a sleeping thread costs tens of microseconds, as much as a small
 * layer's whole work, and inference calls kiln__parallel_for back to back.
 * So an idle worker first spins for a bounded time (about 100 us) watching
 * for the next job before it sleeps on the condition variable, and the
 * caller likewise spins briefly for the workers to finish. A job is
 * published through the atomic `generation` (release) after its fields are
 * written; `active` counts the workers still inside it. */
#include "core/core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

struct kiln_pool {
    int n_workers; /* threads besides the caller */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    atomic_uint_fast64_t generation; /* bumps for every job */
    atomic_int active;               /* workers still inside the current job */
    atomic_bool stop;
    int sleepers;                    /* workers waiting on cv_work (under mu) */
    /* current job */
    kiln_range_fn fn;
    void *ctx;
    int64_t n, chunk;
    atomic_int_fast64_t next;
};

int kiln__cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void pool_work(kiln_pool *p) {
    for (;;) {
        int64_t b = atomic_fetch_add(&p->next, p->chunk);
        if (b >= p->n) break;
        int64_t e = b + p->chunk < p->n ? b + p->chunk : p->n;
        p->fn(p->ctx, b, e);
    }
}

enum { SPIN_ITERS = 2000 }; /* ~100 us of pause instructions */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Waits until the pool's generation differs from `seen` (or stop); returns it. */
static uint64_t wait_job(kiln_pool *p, uint64_t seen) {
    for (int i = 0; i < SPIN_ITERS; i++) {
        uint64_t g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed)) return g;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    p->sleepers++;
    while (!atomic_load(&p->stop) && atomic_load(&p->generation) == seen)
        pthread_cond_wait(&p->cv_work, &p->mu);
    p->sleepers--;
    pthread_mutex_unlock(&p->mu);
    return atomic_load_explicit(&p->generation, memory_order_acquire);
}

static void *pool_main(void *arg) {
    kiln_pool *p = arg;
    uint64_t seen = 0;
    for (;;) {
        seen = wait_job(p, seen);
        if (atomic_load(&p->stop)) break;
        pool_work(p);
        if (atomic_fetch_sub_explicit(&p->active, 1, memory_order_acq_rel) == 1) {
            /* the caller may be asleep waiting for the last worker */
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

kiln_status kiln__pool_create(int threads, kiln_pool **out) {
    *out = NULL;
    if (threads <= 0) threads = kiln__cpu_count();
    if (threads > 256) threads = 256;
    kiln_pool *p = kiln__calloc(1, sizeof *p);
    if (!p) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory creating thread pool");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    if (threads > 1) {
        p->threads = kiln__calloc((size_t)threads - 1, sizeof *p->threads);
        if (!p->threads) {
            kiln__pool_free(p);
            return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory creating thread pool");
        }
        for (int i = 0; i < threads - 1; i++) {
            if (pthread_create(&p->threads[i], NULL, pool_main, p) != 0) {
                kiln__pool_free(p);
                return KILN_FAIL(KILN_ERR_INTERNAL, "cannot start worker thread %d", i);
            }
            p->n_workers++;
        }
    }
    *out = p;
    return KILN_OK;
}

void kiln__pool_free(kiln_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_workers; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    kiln__free(p->threads);
    kiln__free(p);
}

int kiln__pool_threads(const kiln_pool *p) { return p ? p->n_workers + 1 : 1; }

void kiln__parallel_for(kiln_pool *p, int64_t n, int64_t grain, kiln_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int nt = kiln__pool_threads(p);
    if (!p || nt == 1 || n <= grain) {
        fn(ctx, 0, n);
        return;
    }
    /* About 4 chunks per thread for balance, never smaller than grain. */
    int64_t chunk = (n + (int64_t)nt * 4 - 1) / ((int64_t)nt * 4);
    if (chunk < grain) chunk = grain;
    int64_t n_chunks = (n + chunk - 1) / chunk;
    int helpers = n_chunks - 1 < p->n_workers ? (int)(n_chunks - 1) : p->n_workers;
    if (helpers <= 0) {
        fn(ctx, 0, n);
        return;
    }
    /* Every worker has left the previous job (the caller waited for that),
     * so the job fields can be written before the new generation publishes them. */
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = chunk;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->active, p->n_workers, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_mutex_lock(&p->mu);
    if (p->sleepers > 0) pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    pool_work(p);
    for (int i = 0; i < SPIN_ITERS; i++) {
        if (atomic_load_explicit(&p->active, memory_order_acquire) == 0) return;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    while (atomic_load_explicit(&p->active, memory_order_acquire) > 0)
        pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
