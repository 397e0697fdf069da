/* prep_pool.c -- work made ahead on host threads (prep_pool.h).
 *
 * One mutex guards the job list; `work` wakes workers (a job queued, the
 * window moved, the end), `done` wakes the caller (a job made). Jobs are
 * kept in submission order; a taken or dropped job leaves the list (the
 * list is compacted at each take), so it holds at most the window's jobs
 * plus the queued ones. */
#include "core/prep_pool.h"

#include <limits.h>
#include <pthread.h>
#include <string.h>

enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE };

typedef struct prep_job {
    unsigned char *key;
    int group;
    uint64_t seq;  /* its submission's number (unique) */
    int state;
    bool taken;    /* the caller has its outcome: leaves the list */
    bool drop;     /* out of the window while being made: freed once made */
    int status;
    void *result;
} prep_job;

typedef struct prep_worker {
    kiln_prep *p;
    pthread_t th;
    bool started;
} prep_worker;

struct kiln_prep {
    kiln_prep_ops ops;
    int ahead;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    bool sync_made; /* mu, work, done initialized */
    bool stop;      /* kiln__prep_free: no job starts any more */
    bool released;  /* ... and the results are freed: the workers may end */
    prep_job *jobs;
    int n, cap;
    int current;    /* the group of the latest take (INT_MIN: none yet) */
    int first;      /* the first group submitted (INT_MIN: none yet) */
    uint64_t seq;   /* submissions so far */
    prep_worker *w;
    int n_w;
    kiln_prep_stats stats;
};

static void job_release(kiln_prep *p, prep_job *j) {
    if (j->result && p->ops.result_free) p->ops.result_free(p->ops.ctx, j->result);
    j->result = NULL;
    kiln__free(j->key);
    j->key = NULL;
}

/* Counts job j, leaving the list, where nobody took it (mu held). */
static void count_dropped(kiln_prep *p, const prep_job *j) {
    if (j->taken) return;
    if (j->state == JOB_DONE) p->stats.unused++;
    else p->stats.unstarted++;
}

/* The group jobs may start up to (mu held). */
static bool in_window(const kiln_prep *p, int group) {
    if (p->ahead < 0) return true;
    int base = p->current != INT_MIN ? p->current : p->first;
    return (int64_t)group <= (int64_t)base + p->ahead;
}

/* The first queued job a worker may start, or -1 (mu held). */
static int next_job(const kiln_prep *p) {
    for (int i = 0; i < p->n; i++)
        if (p->jobs[i].state == JOB_QUEUED && !p->jobs[i].drop && !p->jobs[i].taken)
            return in_window(p, p->jobs[i].group) ? i : -1;
    return -1;
}

/* The index of job number seq, which is in the list (mu held). */
static int seq_index(const kiln_prep *p, uint64_t seq) {
    int i = 0;
    while (p->jobs[i].seq != seq) i++;
    return i;
}

static void *worker_main(void *arg) {
    prep_worker *me = arg;
    kiln_prep *p = me->p;
    void *wctx = NULL;
    bool ok = !p->ops.worker_init || p->ops.worker_init(p->ops.ctx, &wctx) == 0;
    pthread_mutex_lock(&p->mu);
    while (ok && !p->stop) {
        int i = next_job(p);
        if (i < 0) {
            pthread_cond_wait(&p->work, &p->mu);
            continue;
        }
        prep_job *j = &p->jobs[i];
        j->state = JOB_RUNNING;
        uint64_t seq = j->seq;
        /* the list may move while the job is made (grown, compacted): the
         * job is found again by its number (its key, on the heap, stays
         * put: a job being made is never released) */
        const unsigned char *key = j->key;
        pthread_mutex_unlock(&p->mu);
        void *result = NULL;
        int status = p->ops.prepare(p->ops.ctx, wctx, key, &result);
        kiln__clear_error(); /* (a message of this thread's is nobody's) */
        pthread_mutex_lock(&p->mu);
        j = &p->jobs[seq_index(p, seq)];
        j->state = JOB_DONE;
        j->status = status;
        j->result = result;
        p->stats.by_workers++;
        pthread_cond_broadcast(&p->done);
    }
    while (!p->released) pthread_cond_wait(&p->work, &p->mu);
    pthread_mutex_unlock(&p->mu);
    if (ok && p->ops.worker_fini) p->ops.worker_fini(p->ops.ctx, wctx);
    return NULL;
}

kiln_status kiln__prep_create(int threads, int ahead, const kiln_prep_ops *ops, kiln_prep **out) {
    *out = NULL;
    if (threads < 0 || !ops || !ops->prepare || ops->key_size == 0)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "prep pool: bad arguments (%d threads)", threads);
    kiln_prep *p = kiln__calloc(1, sizeof *p);
    if (!p) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (prep pool)");
    p->ops = *ops;
    p->ahead = ahead;
    p->current = p->first = INT_MIN;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        kiln__free(p);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "prep pool: cannot make a mutex");
    }
    if (pthread_cond_init(&p->work, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        kiln__free(p);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "prep pool: cannot make a condition variable");
    }
    if (pthread_cond_init(&p->done, NULL) != 0) {
        pthread_cond_destroy(&p->work);
        pthread_mutex_destroy(&p->mu);
        kiln__free(p);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "prep pool: cannot make a condition variable");
    }
    p->sync_made = true;
    if (threads > 0 && !(p->w = kiln__calloc((size_t)threads, sizeof *p->w))) {
        kiln__prep_free(p, NULL);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (prep pool)");
    }
    for (int i = 0; i < threads; i++) {
        p->w[i].p = p;
        if (pthread_create(&p->w[i].th, NULL, worker_main, &p->w[i]) != 0) break; /* fewer workers */
        p->w[i].started = true;
        p->n_w = i + 1;
    }
    *out = p;
    return KILN_OK;
}

void kiln__prep_free(kiln_prep *p, kiln_prep_stats *final) {
    if (!p) return;
    if (p->sync_made) {
        /* no job starts any more; the ones being made finish; then every
         * result not taken is freed, and only then do the workers end (a
         * result may belong to a worker's library handle) */
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_broadcast(&p->work);
        for (;;) {
            bool running = false;
            for (int i = 0; i < p->n && !running; i++) running = p->jobs[i].state == JOB_RUNNING;
            if (!running) break;
            pthread_cond_wait(&p->done, &p->mu);
        }
    }
    for (int i = 0; i < p->n; i++) {
        count_dropped(p, &p->jobs[i]);
        job_release(p, &p->jobs[i]);
    }
    p->n = 0;
    if (final) *final = p->stats;
    if (p->sync_made) {
        p->released = true;
        pthread_cond_broadcast(&p->work);
        pthread_mutex_unlock(&p->mu);
    }
    for (int i = 0; i < p->n_w; i++)
        if (p->w[i].started) pthread_join(p->w[i].th, NULL);
    kiln__free(p->jobs);
    kiln__free(p->w);
    if (p->sync_made) {
        pthread_cond_destroy(&p->done);
        pthread_cond_destroy(&p->work);
        pthread_mutex_destroy(&p->mu);
    }
    kiln__free(p);
}

/* The job of key in the list, or -1 (mu held). */
static int find_job(const kiln_prep *p, const void *key) {
    for (int i = 0; i < p->n; i++)
        if (!p->jobs[i].drop && !p->jobs[i].taken && !memcmp(p->jobs[i].key, key, p->ops.key_size)) return i;
    return -1;
}

kiln_status kiln__prep_submit(kiln_prep *p, int group, const void *key) {
    unsigned char *k = kiln__malloc(p->ops.key_size);
    if (!k) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (prep pool)");
    memcpy(k, key, p->ops.key_size);
    pthread_mutex_lock(&p->mu);
    kiln_status st = KILN_OK;
    if (find_job(p, key) >= 0) {
        kiln__free(k);
    } else if ((st = kiln__grow((void **)&p->jobs, &p->cap, p->n + 1, sizeof *p->jobs)) != KILN_OK) {
        kiln__free(k);
    } else {
        p->jobs[p->n++] = (prep_job){.key = k, .group = group, .seq = p->seq++, .state = JOB_QUEUED};
        if (p->first == INT_MIN) p->first = group;
        pthread_cond_broadcast(&p->work);
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

/* Drops the jobs of groups before g that are queued or made (their
 * results freed) and marks running ones to be dropped when made; removes
 * them from the list (mu held). */
static void retire_before(kiln_prep *p, int g) {
    int o = 0;
    for (int i = 0; i < p->n; i++) {
        prep_job *j = &p->jobs[i];
        if (j->state != JOB_RUNNING && (j->taken || j->drop || j->group < g)) {
            count_dropped(p, j);
            job_release(p, j);
            continue;
        }
        if (j->group < g) j->drop = true; /* being made: freed once made (a later retire) */
        p->jobs[o++] = *j;
    }
    p->n = o;
}

/* Moves the window to group g where it is behind (mu held). */
static void move_to(kiln_prep *p, int g) {
    if (p->current == INT_MIN || g > p->current) {
        p->current = g;
        pthread_cond_broadcast(&p->work);
    }
}

void kiln__prep_advance(kiln_prep *p, int group) {
    pthread_mutex_lock(&p->mu);
    move_to(p, group);
    retire_before(p, group);
    pthread_mutex_unlock(&p->mu);
}

bool kiln__prep_take(kiln_prep *p, const void *key, void *caller_worker, int *status, void **result) {
    *status = 0;
    *result = NULL;
    pthread_mutex_lock(&p->mu);
    int i = find_job(p, key);
    if (i < 0) {
        pthread_mutex_unlock(&p->mu);
        return false;
    }
    int g = p->jobs[i].group;
    move_to(p, g);
    uint64_t seq = p->jobs[i].seq;
    if (p->jobs[i].state == JOB_QUEUED) { /* nobody started it: made here */
        p->jobs[i].state = JOB_RUNNING;
        pthread_mutex_unlock(&p->mu);
        *status = p->ops.prepare(p->ops.ctx, caller_worker, key, result);
        pthread_mutex_lock(&p->mu);
        p->stats.by_caller++;
        i = seq_index(p, seq);
        p->jobs[i].state = JOB_DONE;
    } else {
        double t0 = kiln__now_us();
        while (p->jobs[i = seq_index(p, seq)].state != JOB_DONE) pthread_cond_wait(&p->done, &p->mu);
        p->stats.wait_us += kiln__now_us() - t0;
        *status = p->jobs[i].status;
        *result = p->jobs[i].result;
        p->jobs[i].result = NULL;
    }
    p->jobs[i].taken = true;
    retire_before(p, g);
    pthread_mutex_unlock(&p->mu);
    return true;
}

void kiln__prep_stats(kiln_prep *p, kiln_prep_stats *s) {
    pthread_mutex_lock(&p->mu);
    *s = p->stats;
    pthread_mutex_unlock(&p->mu);
}
