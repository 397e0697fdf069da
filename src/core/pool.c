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
 * caller likewise spins briefly for the workers to finish. While a context
 * runs a plan it holds the pool (kiln__pool_hold): idle workers then keep
 * spinning between layers instead of sleeping, as ONNX Runtime's do; a
 * sleeping virtual CPU can take far longer to wake than a layer takes. A job is
 * published through the atomic `generation` (release) after its fields are
 * written. A worker takes part in a job only if it joins it before the
 * caller has taken the last chunk: `state` holds the job's generation (high
 * 32 bits), a CLOSED bit and the count of joined workers still inside it.
 * The caller closes the job when its own share is done and waits only for
 * the workers that joined, so a worker whose CPU is slow to be scheduled
 * (a descheduled virtual CPU) never holds a layer up.
 *
 * Placement. After a pause (a request every few tens of milliseconds), Linux
 * often wakes the caller on the CPU where a worker waits, and the two then
 * share that CPU for milliseconds until the load balancer separates them:
 * the worker takes almost no chunks for the whole run (measured on the
 * 2-vCPU test machine: MobileNetV2 at 2 threads, 2.7 ms back to back but
 * 6.6 ms after 50 ms pauses, the same as 1 thread). So when a run takes the
 * pool (kiln__pool_hold), each worker is pinned to a CPU other than the one
 * the caller is on, spread over the CPUs the pool's creator may use; the
 * caller itself is never pinned; its CPU is checked again before every job
 * (a wake-up can move it next to the worker that woke it), and a worker is
 * only moved when the caller's CPU changed. Off when there are more threads than usable CPUs,
 * on machines without sched_getcpu, or with KILN_PIN_THREADS=0 in the
 * environment when the pool is created.
 *
 * fork. A child process gets a copy of the pool's memory but none of its
 * workers: their thread ids are the parent's (pinning them would move the
 * parent's threads) and joining them waited forever (a forked child that used
 * an engine of its parent hung at exit, freeing it). So a pool remembers the
 * process that made it; in any other process it runs every job on the caller,
 * neither pins nor wakes workers, and is freed without joining or locking
 * (its locks may have been held at the fork). "Made by this process" is a
 * fork count, which a pthread_atfork child handler raises: the one piece of
 * process-wide state here (it describes the process, as getpid does, and
 * costs a load where getpid is a ~100 ns system call, asked on every job). */
#include "core/core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct kiln_pool {
    int n_workers; /* threads besides the caller */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    atomic_uint_fast64_t generation; /* bumps for every job */
    atomic_uint_fast64_t state;      /* job generation << 32 | CLOSED | joined workers inside */
    atomic_bool stop;
    atomic_bool hold;                /* a run is in progress: idle workers keep spinning */
    int sleepers;                    /* workers waiting on cv_work (under mu) */
    /* placement (see above): usable CPUs, and the CPU each worker is pinned to */
    bool place;
    int n_cpus;
    int *cpus;
    int *worker_cpu;                 /* -1: not pinned */
    unsigned fork_gen;               /* kiln_fork_gen when it was made (see "fork") */
    int caller_cpu;                  /* the caller's CPU at the last placement */
    /* current job */
    kiln_range_fn fn;
    void *ctx;
    int64_t n, chunk;
    atomic_int_fast64_t next;
};

static atomic_uint kiln_fork_gen;
static pthread_once_t kiln_fork_once = PTHREAD_ONCE_INIT;
static void fork_child(void) { atomic_fetch_add(&kiln_fork_gen, 1); }
static void fork_watch(void) { (void)pthread_atfork(NULL, NULL, fork_child); }

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
#define JOB_CLOSED ((uint64_t)1 << 31)
#define JOB_COUNT ((uint64_t)JOB_CLOSED - 1)

/* Joins job `gen` unless it is closed (or already replaced); true if joined. */
static bool job_join(kiln_pool *p, uint64_t gen) {
    uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
    for (;;) {
        if ((s >> 32) != (gen & 0xffffffffu) || (s & JOB_CLOSED)) return false;
        if (atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            return true;
    }
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Waits until the pool's generation differs from `seen` (or stop); returns
 * it. Spins first: SPIN_ITERS pauses, or as long as the pool is held. */
static uint64_t wait_job(kiln_pool *p, uint64_t seen) {
    for (;;) {
        for (int i = 0;; i < SPIN_ITERS ? i++ : 0) {
            uint64_t g = atomic_load_explicit(&p->generation, memory_order_acquire);
            if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed)) return g;
            if (i >= SPIN_ITERS && !atomic_load_explicit(&p->hold, memory_order_relaxed)) break;
            cpu_relax();
            /* a spinning worker that shares a CPU with the caller must not
             * take its time: give way now and then */
            if ((i & 63) == 63 || i >= SPIN_ITERS) sched_yield();
        }
        pthread_mutex_lock(&p->mu);
        p->sleepers++;
        while (!atomic_load(&p->stop) && atomic_load(&p->generation) == seen && !atomic_load(&p->hold))
            pthread_cond_wait(&p->cv_work, &p->mu);
        p->sleepers--;
        pthread_mutex_unlock(&p->mu);
        uint64_t g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g != seen || atomic_load(&p->stop)) return g;
        /* woken because the pool is held: spin again */
    }
}

/* Pins the workers to CPUs other than the caller's (see "Placement"). */
static void place_workers(kiln_pool *p) {
    int cur = sched_getcpu();
    if (cur < 0 || cur == p->caller_cpu) return;
    p->caller_cpu = cur;
    int at = 0; /* the caller's index in cpus (0 when it runs outside them) */
    for (int i = 0; i < p->n_cpus; i++)
        if (p->cpus[i] == cur) at = i;
    for (int w = 0; w < p->n_workers; w++) {
        int cpu = p->cpus[(at + 1 + w) % p->n_cpus];
        if (cpu == p->worker_cpu[w]) continue;
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (pthread_setaffinity_np(p->threads[w], sizeof set, &set) == 0) p->worker_cpu[w] = cpu;
    }
}

void kiln__pool_hold(kiln_pool *p, bool on) {
    if (!p || kiln__pool_forked(p)) return;
    if (on && p->place) place_workers(p);
    atomic_store(&p->hold, on);
    if (!on) return;
    pthread_mutex_lock(&p->mu);
    if (p->sleepers > 0) pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
}

static void *pool_main(void *arg) {
    kiln_pool *p = arg;
    uint64_t seen = 0;
    for (;;) {
        seen = wait_job(p, seen);
        if (atomic_load(&p->stop)) break;
        if (!job_join(p, seen)) continue; /* the caller already finished it */
        pool_work(p);
        uint64_t prev = atomic_fetch_sub_explicit(&p->state, 1, memory_order_acq_rel);
        if ((prev & JOB_CLOSED) && (prev & JOB_COUNT) == 1) {
            /* the caller may be asleep waiting for the last worker */
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

/* Decides whether workers are placed, and on which CPUs (the caller's
 * affinity mask); best effort: any failure leaves placement off. */
static void setup_placement(kiln_pool *p) {
    const char *env = getenv("KILN_PIN_THREADS");
    if (env && !strcmp(env, "0")) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0 || sched_getcpu() < 0) return;
    int n = CPU_COUNT(&set);
    if (n < p->n_workers + 1) return; /* more threads than CPUs: leave it to the scheduler */
    p->cpus = kiln__calloc((size_t)n, sizeof *p->cpus);
    p->worker_cpu = kiln__calloc((size_t)p->n_workers, sizeof *p->worker_cpu);
    if (!p->cpus || !p->worker_cpu) return; /* freed with the pool */
    for (int c = 0, k = 0; c < CPU_SETSIZE && k < n; c++)
        if (CPU_ISSET(c, &set)) p->cpus[k++] = c;
    p->n_cpus = n;
    for (int w = 0; w < p->n_workers; w++) p->worker_cpu[w] = -1;
    p->caller_cpu = -1;
    p->place = true;
}

kiln_status kiln__pool_create(int threads, kiln_pool **out) {
    *out = NULL;
    if (threads <= 0) threads = kiln__cpu_count();
    if (threads > 256) threads = 256;
    kiln_pool *p = kiln__calloc(1, sizeof *p);
    if (!p) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory creating thread pool");
    pthread_once(&kiln_fork_once, fork_watch);
    p->fork_gen = atomic_load(&kiln_fork_gen);
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
        setup_placement(p);
    }
    *out = p;
    return KILN_OK;
}

unsigned kiln__fork_gen(void) {
    pthread_once(&kiln_fork_once, fork_watch);
    return atomic_load_explicit(&kiln_fork_gen, memory_order_relaxed);
}

bool kiln__pool_forked(const kiln_pool *p) {
    return p && p->fork_gen != atomic_load_explicit(&kiln_fork_gen, memory_order_relaxed);
}

void kiln__pool_free(kiln_pool *p) {
    if (!p) return;
    if (kiln__pool_forked(p)) { /* the workers are the parent's: memory only */
        kiln__free(p->threads);
        kiln__free(p->cpus);
        kiln__free(p->worker_cpu);
        kiln__free(p);
        return;
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_workers; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    kiln__free(p->threads);
    kiln__free(p->cpus);
    kiln__free(p->worker_cpu);
    kiln__free(p);
}

int kiln__pool_threads(const kiln_pool *p) { return p && !kiln__pool_forked(p) ? p->n_workers + 1 : 1; }

int kiln__pool_worker_cpu(const kiln_pool *p, int w) {
    return p && p->place && w >= 0 && w < p->n_workers && !kiln__pool_forked(p) ? p->worker_cpu[w] : -1;
}

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
    /* the caller may have been moved (a wake-up puts it next to its waker) */
    if (p->place) place_workers(p);
    /* Every worker has left the previous job (the caller waited for that),
     * so the job fields can be written before the new generation publishes them. */
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->chunk = chunk;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    uint64_t gen = atomic_load_explicit(&p->generation, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->state, (gen & 0xffffffffu) << 32, memory_order_relaxed);
    atomic_store_explicit(&p->generation, gen, memory_order_release);
    pthread_mutex_lock(&p->mu);
    if (p->sleepers > 0) pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    pool_work(p);
    /* every chunk is taken: close the job to late workers, wait for the joined */
    uint64_t s = atomic_fetch_or_explicit(&p->state, JOB_CLOSED, memory_order_acq_rel);
    if ((s & JOB_COUNT) == 0) return;
    for (int i = 0; i < SPIN_ITERS; i++) {
        if ((atomic_load_explicit(&p->state, memory_order_acquire) & JOB_COUNT) == 0) return;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    while (atomic_load_explicit(&p->state, memory_order_acquire) & JOB_COUNT)
        pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
