/* pool.c -- a small fork-join thread pool for CPU kernels.
 *
 * kiln__parallel_for splits [0, n) into chunks; the calling thread and the
 * pool's workers take chunks from a shared atomic counter until none are
 * left, then the caller waits for the workers to finish. One job runs at a
 * time per pool (a pool belongs to one context, which runs on one thread). */
#include "core/core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

struct kiln_pool {
    int n_workers; /* threads besides the caller */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    uint64_t generation; /* bumps for every job */
    int active;          /* workers still inside the current job */
    bool stop;
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

static void *pool_main(void *arg) {
    kiln_pool *p = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen) pthread_cond_wait(&p->cv_work, &p->mu);
        if (p->stop) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        pool_work(p);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0) pthread_cond_signal(&p->cv_done);
    }
    pthread_mutex_unlock(&p->mu);
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
    p->stop = true;
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
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = chunk;
    atomic_store(&p->next, 0);
    p->active = p->n_workers;
    p->generation++;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    pool_work(p);
    pthread_mutex_lock(&p->mu);
    while (p->active > 0) pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
