/* test_prep_pool.c -- the pool that makes a layer's candidates ahead on
 * host threads (src/core/prep_pool.h; the CUDA backend's cuDNN plans with
 * KILN_CUDA_PLAN_THREADS=N), with a fake `prepare` in place of cuDNN:
 * outcomes (made, failed) reach the caller by key, the same for 0 threads
 * (the serial path) and for 4, whatever each job's duration; every worker
 * has its own context, never used by two threads at once; the look-ahead
 * window holds; results nobody takes are freed. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#include "core/prep_pool.h"

#define MAX_W 16

typedef struct fake {
    atomic_int inits, finis, made, freed, live_results;
    atomic_int max_group_started;
    atomic_int busy[MAX_W + 1]; /* per worker context (index MAX_W: the caller's) */
    atomic_int shared_use;      /* a context used by two threads at once */
    int fail_init;              /* worker_init fails */
    int ids[MAX_W + 1];
    atomic_int next_id;
    int sleep_us;               /* jobs take up to this long (varied by key) */
} fake;

typedef struct key {
    int id, group;
} key;

static int w_init(void *ctx, void **worker) {
    fake *f = ctx;
    if (f->fail_init) return 1;
    int i = atomic_fetch_add(&f->next_id, 1);
    if (i >= MAX_W) return 1;
    f->ids[i] = i;
    *worker = &f->ids[i];
    atomic_fetch_add(&f->inits, 1);
    return 0;
}

static void w_fini(void *ctx, void *worker) {
    (void)worker;
    atomic_fetch_add(&((fake *)ctx)->finis, 1);
}

/* Outcome of key id: fails (status -5, no result) for ids = 3 mod 7, else
 * a result id * id + 1; the time it takes varies with the id. */
static int prepare(void *ctx, void *worker, const void *kp, void **result) {
    fake *f = ctx;
    key k;
    memcpy(&k, kp, sizeof k);
    int w = *(int *)worker;
    if (atomic_fetch_add(&f->busy[w], 1) != 0) atomic_fetch_add(&f->shared_use, 1);
    int g = atomic_load(&f->max_group_started);
    while (k.group > g && !atomic_compare_exchange_weak(&f->max_group_started, &g, k.group)) {
    }
    if (f->sleep_us) usleep((useconds_t)((k.id * 7919) % f->sleep_us));
    atomic_fetch_sub(&f->busy[w], 1);
    atomic_fetch_add(&f->made, 1);
    if (k.id % 7 == 3) return -5;
    int *r = malloc(sizeof *r);
    *r = k.id * k.id + 1;
    atomic_fetch_add(&f->live_results, 1);
    *result = r;
    return 0;
}

static void result_free(void *ctx, void *r) {
    fake *f = ctx;
    atomic_fetch_add(&f->freed, 1);
    atomic_fetch_sub(&f->live_results, 1);
    free(r);
}

static kiln_prep_ops ops_of(fake *f) {
    return (kiln_prep_ops){.ctx = f, .key_size = sizeof(key), .worker_init = w_init, .worker_fini = w_fini,
                           .prepare = prepare, .result_free = result_free};
}

/* Submits n jobs, n_per to a group, then takes them all in order; out[i]:
 * the result's value (0 none, -1 not found), st[i] the status. */
static void run_all(int threads, int ahead, int n, int n_per, int sleep_us, int *out, int *st, fake *f) {
    memset(f, 0, sizeof *f);
    f->sleep_us = sleep_us;
    atomic_store(&f->max_group_started, -1);
    kiln_prep_ops ops = ops_of(f);
    kiln_prep *p = NULL;
    CHECK_OK(kiln__prep_create(threads, ahead, &ops, &p));
    if (!p) return;
    for (int i = 0; i < n; i++) CHECK_OK(kiln__prep_submit(p, i / n_per, &(key){i, i / n_per}));
    int caller = MAX_W;
    for (int i = 0; i < n; i++) {
        void *r = NULL;
        out[i] = -1;
        if (!kiln__prep_take(p, &(key){i, i / n_per}, &caller, &st[i], &r)) continue;
        out[i] = r ? *(int *)r : 0;
        if (r) result_free(f, r);
    }
    kiln_prep_stats s;
    kiln__prep_stats(p, &s);
    CHECK(s.by_workers + s.by_caller == n);
    CHECK(s.unused == 0 && s.unstarted == 0);
    if (threads == 0) CHECK(s.by_workers == 0);
    kiln__prep_free(p, NULL);
}

/* The serial path (0 threads) and 4 workers give every key its outcome,
 * failures included, whatever order the workers finish in. */
TEST(outcomes_do_not_depend_on_threads) {
    enum { N = 60 };
    int out0[N], st0[N], out4[N], st4[N];
    fake f;
    run_all(0, -1, N, 6, 0, out0, st0, &f);
    CHECK(atomic_load(&f.made) == N && atomic_load(&f.inits) == 0 && atomic_load(&f.shared_use) == 0);
    for (int i = 0; i < N; i++) {
        CHECK(st0[i] == (i % 7 == 3 ? -5 : 0));
        CHECK(out0[i] == (i % 7 == 3 ? 0 : i * i + 1));
    }
    for (int rep = 0; rep < 3; rep++) {
        run_all(4, rep == 0 ? -1 : rep, N, 6, 3000, out4, st4, &f);
        CHECK(!memcmp(out0, out4, sizeof out0) && !memcmp(st0, st4, sizeof st0));
        CHECK(atomic_load(&f.made) == N);
        CHECK(atomic_load(&f.shared_use) == 0); /* a context is one thread's at a time */
        CHECK(atomic_load(&f.inits) == 4 && atomic_load(&f.finis) == 4);
        CHECK(atomic_load(&f.live_results) == 0);
    }
}

/* Workers make jobs while the caller is busy elsewhere, and only within the
 * window: groups first..first+ahead before any take. */
TEST(workers_run_ahead_within_the_window) {
    fake f;
    memset(&f, 0, sizeof f);
    atomic_store(&f.max_group_started, -1);
    kiln_prep_ops ops = ops_of(&f);
    kiln_prep *p = NULL;
    CHECK_OK(kiln__prep_create(4, 1, &ops, &p));
    if (!p) return;
    for (int i = 0; i < 20; i++) CHECK_OK(kiln__prep_submit(p, 10 + i / 4, &(key){i, 10 + i / 4}));
    /* jobs of groups 10 and 11 (8 jobs) are made without any take */
    for (int t = 0; t < 2000 && atomic_load(&f.made) < 8; t++) usleep(1000);
    usleep(20000);
    CHECK(atomic_load(&f.made) == 8);
    CHECK(atomic_load(&f.max_group_started) == 11);
    /* taking from group 12 drops what groups 10 and 11 made (freed), and
     * lets 13 start */
    int caller = MAX_W, st;
    void *r = NULL;
    CHECK(kiln__prep_take(p, &(key){9, 12}, &caller, &st, &r));
    CHECK(r && *(int *)r == 82);
    if (r) result_free(&f, r);
    for (int t = 0; t < 2000 && atomic_load(&f.max_group_started) < 13; t++) usleep(1000);
    usleep(20000);
    CHECK(atomic_load(&f.max_group_started) == 13);
    kiln_prep_stats s;
    kiln__prep_stats(p, &s);
    CHECK(s.unused == 8 && s.unstarted == 0);
    /* a key submitted twice is made once */
    CHECK_OK(kiln__prep_submit(p, 13, &(key){12, 13}));
    /* moving on to group 14 without taking anything (the set-up's keys did
     * not match the ones announced) moves the window too */
    kiln__prep_advance(p, 14);
    for (int t = 0; t < 2000 && atomic_load(&f.max_group_started) < 14; t++) usleep(1000);
    CHECK(atomic_load(&f.max_group_started) == 14);
    /* a dropped key is no longer there: the caller makes it itself */
    CHECK(!kiln__prep_take(p, &(key){0, 10}, &caller, &st, &r));
    kiln_prep_stats fin;
    kiln__prep_free(p, &fin); /* frees what nobody took */
    CHECK(fin.unused >= 8 && fin.by_workers + fin.by_caller == atomic_load(&f.made));
    CHECK(fin.unused + fin.unstarted == 20 - 1);
    CHECK(atomic_load(&f.live_results) == 0);
    CHECK(atomic_load(&f.made) <= 20);
    CHECK(atomic_load(&f.finis) == 4);
}

/* Workers that cannot start (their library handle fails) leave every job
 * to the caller, with the same outcomes. */
TEST(failed_workers_leave_jobs_to_the_caller) {
    fake f;
    memset(&f, 0, sizeof f);
    f.fail_init = 1;
    atomic_store(&f.max_group_started, -1);
    kiln_prep_ops ops = ops_of(&f);
    kiln_prep *p = NULL;
    CHECK_OK(kiln__prep_create(3, -1, &ops, &p));
    if (!p) return;
    for (int i = 0; i < 10; i++) CHECK_OK(kiln__prep_submit(p, 0, &(key){i, 0}));
    int caller = MAX_W;
    for (int i = 0; i < 10; i++) {
        int st;
        void *r = NULL;
        CHECK(kiln__prep_take(p, &(key){i, 0}, &caller, &st, &r));
        CHECK(st == (i % 7 == 3 ? -5 : 0));
        CHECK(i % 7 == 3 ? r == NULL : (r && *(int *)r == i * i + 1));
        if (r) result_free(&f, r);
    }
    kiln_prep_stats s;
    kiln__prep_stats(p, &s);
    CHECK(s.by_caller == 10 && s.by_workers == 0);
    kiln__prep_free(p, NULL);
    CHECK(atomic_load(&f.finis) == 0);
}

TEST(bad_arguments) {
    kiln_prep *p = (kiln_prep *)1;
    kiln_prep_ops none = {.key_size = 4};
    CHECK_ERR(kiln__prep_create(2, 0, &none, &p), KILN_ERR_INVALID_ARGUMENT, "prep pool");
    CHECK(p == NULL);
    kiln__prep_free(NULL, NULL);
}

int main(void) {
    RUN(outcomes_do_not_depend_on_threads);
    RUN(workers_run_ahead_within_the_window);
    RUN(failed_workers_leave_jobs_to_the_caller);
    RUN(bad_arguments);
    return test_summary();
}
