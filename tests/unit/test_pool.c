/* test_pool.c -- the thread pool's worker placement (src/core/pool.c): when a
 * run takes the pool, and before every job, each worker is pinned to a CPU
 * other than the caller's, so that a caller woken on a worker's CPU does not
 * share it with that worker for the whole run. Also: every chunk of a job is
 * run exactly once whatever the placement, and KILN_PIN_THREADS=0 turns
 * placement off. Needs 2 usable CPUs (skipped otherwise). */
#include "test.h"

#include "core/core.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

static atomic_int hits[64];

static void count(void *ctx, int64_t b, int64_t e) {
    (void)ctx;
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&hits[i], 1);
}

static bool pin_self(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0;
}

static void job_once(kiln_pool *p) {
    for (int i = 0; i < 64; i++) atomic_store(&hits[i], 0);
    kiln__parallel_for(p, 64, 1, count, NULL);
    for (int i = 0; i < 64; i++) CHECK(atomic_load(&hits[i]) == 1);
}

TEST(workers_avoid_the_callers_cpu) {
    cpu_set_t all;
    CPU_ZERO(&all);
    if (sched_getaffinity(0, sizeof all, &all) != 0 || CPU_COUNT(&all) < 2 || sched_getcpu() < 0) {
        printf("  fewer than 2 usable CPUs: skipped\n");
        return;
    }
    int cpu[2], k = 0;
    for (int c = 0; c < CPU_SETSIZE && k < 2; c++)
        if (CPU_ISSET(c, &all)) cpu[k++] = c;
    /* the pool places workers among the CPUs the creating thread may use:
     * two of them, so "another CPU" is the other one (on any machine) */
    cpu_set_t two;
    CPU_ZERO(&two);
    CPU_SET(cpu[0], &two);
    CPU_SET(cpu[1], &two);
    CHECK(sched_setaffinity(0, sizeof two, &two) == 0);
    kiln_pool *p = NULL;
    CHECK_OK(kiln__pool_create(2, &p));
    if (!p) return;
    CHECK(kiln__pool_worker_cpu(p, 0) == -1); /* nothing placed before a run */
    for (int round = 0; round < 3; round++) {
        int me = cpu[round % 2], other = cpu[(round + 1) % 2];
        CHECK(pin_self(me));
        kiln__pool_hold(p, true);
        CHECK(kiln__pool_worker_cpu(p, 0) == other);
        job_once(p);
        /* the caller moves during the run: the next job moves the worker */
        CHECK(pin_self(other));
        job_once(p);
        CHECK(kiln__pool_worker_cpu(p, 0) == me);
        kiln__pool_hold(p, false);
    }
    kiln__pool_free(p);
    CHECK(sched_setaffinity(0, sizeof all, &all) == 0);

    /* KILN_PIN_THREADS=0: never placed */
    setenv("KILN_PIN_THREADS", "0", 1);
    CHECK_OK(kiln__pool_create(2, &p));
    unsetenv("KILN_PIN_THREADS");
    if (!p) return;
    kiln__pool_hold(p, true);
    job_once(p);
    CHECK(kiln__pool_worker_cpu(p, 0) == -1);
    kiln__pool_hold(p, false);
    kiln__pool_free(p);

    /* more threads than CPUs: left to the scheduler */
    CHECK_OK(kiln__pool_create(CPU_COUNT(&all) + 1, &p));
    if (!p) return;
    kiln__pool_hold(p, true);
    job_once(p);
    CHECK(kiln__pool_worker_cpu(p, 0) == -1);
    kiln__pool_hold(p, false);
    kiln__pool_free(p);
}

int main(void) {
    RUN(workers_avoid_the_callers_cpu);
    return test_summary();
}
