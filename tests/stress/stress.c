/* stress.c -- concurrency stress test of the runtime (issue 6, item 4).
 *
 * One engine is built from tests/stress/stress_cnn.onnx (dynamic batch, H
 * and W up to 4x3x48x48; convolutions, Gemm, pooling, reductions, LayerNormalization), and a
 * second copy of it is made by serializing and loading it back from memory.
 * Reference outputs are computed first, single-threaded (one context, one
 * thread), for a set of shapes inside the profile with seeded inputs. Then N
 * threads run for a bounded time, each with its own contexts (of different
 * thread counts, on either engine), picking a random shape each iteration,
 * and every output is compared with the reference. Contexts are freed and
 * created again all along, some runs bind caller memory for the outputs,
 * and the two engines are shared by all threads. Leaks are LeakSanitizer's
 * business (the ASan build runs this test too) or valgrind's by hand.
 *
 * Usage: kiln_stress [--seconds S] [--threads N] [--seed K] [--model PATH]
 * Defaults: 5 s, 6 threads, seed 1, tests/stress/stress_cnn.onnx (run from
 * the repository root). Exit status 0 when every run matched. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln.h"

#define N_SHAPES 14
#define FEAT 16 /* channels of the model: feat is [batch, FEAT] */
#define MAX_THREADS 64
#define CTX_PER_THREAD 2
#define TOL 1e-5f

typedef struct shape_case {
    int64_t dims[4]; /* batch, 3, H, W */
    float *x;
    float *probs, *feat; /* reference outputs: [batch,10], [batch,FEAT] */
} shape_case;

typedef struct shared {
    kiln_engine *engines[2];
    shape_case cases[N_SHAPES];
    double deadline;
    atomic_int stop; /* set on the first failure */
} shared;

typedef struct worker {
    shared *s;
    int id;
    uint64_t rng;
    long runs, contexts_made, caller_outputs, failures;
    float max_err;
    char msg[512];
} worker;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint32_t next_rand(uint64_t *st) { /* xorshift64* */
    uint64_t x = *st;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *st = x;
    return (uint32_t)((x * 0x2545F4914F6CDD1Dull) >> 32);
}

static size_t numel(const int64_t *d, int rank) {
    size_t n = 1;
    for (int i = 0; i < rank; i++) n *= (size_t)d[i];
    return n;
}

/* Runs one case on a context; copies the outputs into probs/feat. When
 * `bind` is set, the outputs go to caller memory bound with set_output. */
static int run_case(kiln_context *c, const shape_case *sc, int bind, float *probs, float *feat,
                    char *msg, size_t msg_len) {
    int64_t b = sc->dims[0];
    size_t np = (size_t)b * 10, nf = (size_t)b * FEAT;
    kiln_status st = kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 4, sc->dims, sc->x);
    if (st == KILN_OK && bind) st = kiln_context_set_output(c, "probs", probs, np * sizeof(float));
    if (st == KILN_OK && bind) st = kiln_context_set_output(c, "feat", feat, nf * sizeof(float));
    if (st == KILN_OK) st = kiln_context_run(c);
    const char *names[2] = {"probs", "feat"};
    float *dst[2] = {probs, feat};
    int64_t want_d1[2] = {10, FEAT};
    for (int k = 0; k < 2 && st == KILN_OK; k++) {
        kiln_dtype dt;
        int rank = 0;
        int64_t od[KILN_MAX_RANK];
        const void *data = NULL;
        st = kiln_context_get_output(c, names[k], &dt, &rank, od, &data);
        if (st != KILN_OK) break;
        if (dt != KILN_DTYPE_FLOAT32 || rank != 2 || od[0] != b || od[1] != want_d1[k] || !data) {
            snprintf(msg, msg_len, "output '%s' has the wrong type or shape", names[k]);
            return 0;
        }
        if (bind && data != dst[k]) {
            snprintf(msg, msg_len, "output '%s' is not in the bound caller memory", names[k]);
            return 0;
        }
        if (!bind) memcpy(dst[k], data, (size_t)(b * want_d1[k]) * sizeof(float));
    }
    if (bind) { /* unbind, so that a later unbound run uses the context's memory */
        if (kiln_context_set_output(c, "probs", NULL, 0) != KILN_OK ||
            kiln_context_set_output(c, "feat", NULL, 0) != KILN_OK) {
            snprintf(msg, msg_len, "cannot unbind outputs: %s", kiln_last_error());
            return 0;
        }
    }
    if (st != KILN_OK) {
        snprintf(msg, msg_len, "run of [%lldx3x%lldx%lld] failed: %s", (long long)b,
                 (long long)sc->dims[2], (long long)sc->dims[3], kiln_last_error());
        return 0;
    }
    return 1;
}

static float max_abs_diff(const float *a, const float *b, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN counts */
    }
    return m;
}

static kiln_status new_context(worker *w, kiln_context **c) {
    kiln_engine *e = w->s->engines[next_rand(&w->rng) % 2];
    kiln_status st = kiln_context_create(e, c);
    if (st != KILN_OK) return st;
    w->contexts_made++;
    /* 0 = one per core; 1..3 threads: the same engine with several pool sizes */
    return kiln_context_set_threads(*c, (int)(next_rand(&w->rng) % 4));
}

static void *worker_main(void *arg) {
    worker *w = arg;
    shared *s = w->s;
    kiln_context *ctx[CTX_PER_THREAD] = {0};
    float probs[4 * 10], feat[4 * FEAT];
    for (int k = 0; k < CTX_PER_THREAD; k++)
        if (new_context(w, &ctx[k]) != KILN_OK) {
            snprintf(w->msg, sizeof w->msg, "context create: %s", kiln_last_error());
            w->failures++;
            goto out;
        }
    while (!atomic_load(&s->stop) && now_s() < s->deadline) {
        int k = (int)(next_rand(&w->rng) % CTX_PER_THREAD);
        if (next_rand(&w->rng) % 8 == 0) { /* free and make a new context now and then */
            kiln_context_free(ctx[k]);
            ctx[k] = NULL;
            if (new_context(w, &ctx[k]) != KILN_OK) {
                snprintf(w->msg, sizeof w->msg, "context create: %s", kiln_last_error());
                w->failures++;
                break;
            }
        }
        const shape_case *sc = &s->cases[next_rand(&w->rng) % N_SHAPES];
        int bind = next_rand(&w->rng) % 4 == 0;
        w->caller_outputs += bind;
        if (!run_case(ctx[k], sc, bind, probs, feat, w->msg, sizeof w->msg)) {
            w->failures++;
            break;
        }
        w->runs++;
        size_t b = (size_t)sc->dims[0];
        float ep = max_abs_diff(probs, sc->probs, b * 10), ef = max_abs_diff(feat, sc->feat, b * FEAT);
        float e = ep > ef ? ep : ef;
        if (!(e <= w->max_err)) w->max_err = e;
        if (!(e <= TOL)) {
            snprintf(w->msg, sizeof w->msg,
                     "output of [%zux3x%lldx%lld] differs from the single-threaded reference by %g",
                     b, (long long)sc->dims[2], (long long)sc->dims[3], (double)e);
            w->failures++;
            break;
        }
    }
out:
    if (w->failures) atomic_store(&s->stop, 1);
    for (int k = 0; k < CTX_PER_THREAD; k++) kiln_context_free(ctx[k]);
    return NULL;
}

static int usage(void) {
    fprintf(stderr, "usage: kiln_stress [--seconds S] [--threads N] [--seed K] [--model PATH]\n");
    return 2;
}

int main(int argc, char **argv) {
    double seconds = 5;
    int n_threads = 6;
    unsigned long long seed = 1;
    const char *model_path = "tests/stress/stress_cnn.onnx";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) return usage();
        char *end = NULL;
        if (!strcmp(a, "--seconds")) {
            seconds = strtod(argv[++i], &end);
            if (*end || !(seconds > 0 && seconds <= 86400)) return usage();
        } else if (!strcmp(a, "--threads")) {
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > MAX_THREADS) return usage();
            n_threads = (int)v;
        } else if (!strcmp(a, "--seed")) {
            seed = strtoull(argv[++i], &end, 10);
            if (*end) return usage();
        } else if (!strcmp(a, "--model")) {
            model_path = argv[++i];
        } else {
            return usage();
        }
    }

    int rc = 1;
    shared s;
    memset(&s, 0, sizeof s);
    kiln_model *m = NULL;
    kiln_builder *b = NULL;
    kiln_context *ref = NULL;
    void *bytes = NULL;
    size_t n_bytes = 0;
    int64_t mn[4] = {1, 3, 4, 4}, op[4] = {2, 3, 16, 16}, mx[4] = {4, 3, 48, 48};
    if (kiln_model_load_onnx(model_path, &m) != KILN_OK || kiln_builder_create(&b) != KILN_OK ||
        kiln_builder_set_profile(b, "x", 4, mn, op, mx) != KILN_OK ||
        kiln_build(b, m, &s.engines[0]) != KILN_OK ||
        kiln_engine_serialize(s.engines[0], &bytes, &n_bytes) != KILN_OK ||
        kiln_engine_load_memory(bytes, n_bytes, &s.engines[1]) != KILN_OK) {
        fprintf(stderr, "stress: cannot build the engine from %s: %s\n", model_path,
                kiln_last_error());
        goto done;
    }

    /* Shapes inside the profile (H, W from 4 to 16, odd ones too) and their
     * single-threaded reference outputs. */
    static const int64_t hw[N_SHAPES][3] = {
        {1, 4, 4},   {2, 8, 8},  {4, 16, 16}, {3, 5, 7},   {1, 48, 4}, {4, 4, 48},  {2, 11, 9},
        {3, 13, 16}, {1, 7, 7},  {4, 48, 48}, {2, 32, 31}, {1, 9, 6},  {3, 40, 24}, {4, 33, 47}};
    uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
    if (kiln_context_create(s.engines[0], &ref) != KILN_OK ||
        kiln_context_set_threads(ref, 1) != KILN_OK) {
        fprintf(stderr, "stress: reference context: %s\n", kiln_last_error());
        goto done;
    }
    for (int i = 0; i < N_SHAPES; i++) {
        shape_case *sc = &s.cases[i];
        int64_t d[4] = {hw[i][0], 3, hw[i][1], hw[i][2]};
        memcpy(sc->dims, d, sizeof d);
        size_t n = numel(d, 4);
        sc->x = malloc(n * sizeof(float));
        sc->probs = malloc((size_t)d[0] * 10 * sizeof(float));
        sc->feat = malloc((size_t)d[0] * FEAT * sizeof(float));
        if (!sc->x || !sc->probs || !sc->feat) {
            fprintf(stderr, "stress: out of memory\n");
            goto done;
        }
        for (size_t k = 0; k < n; k++) sc->x[k] = (float)(next_rand(&rng) % 2001) / 1000.0f - 1.0f;
        char msg[512];
        if (!run_case(ref, sc, 0, sc->probs, sc->feat, msg, sizeof msg)) {
            fprintf(stderr, "stress: reference run: %s\n", msg);
            goto done;
        }
    }

    worker w[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    int started = 0;
    double t0 = now_s();
    s.deadline = t0 + seconds;
    for (int i = 0; i < n_threads; i++) {
        w[i] = (worker){.s = &s, .id = i, .rng = rng + 0x1000193ull * (uint64_t)(i + 1)};
        if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0) {
            fprintf(stderr, "stress: cannot start thread %d\n", i);
            atomic_store(&s.stop, 1);
            break;
        }
        started++;
    }
    long runs = 0, made = 0, bound = 0, failures = 0;
    float max_err = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        runs += w[i].runs;
        made += w[i].contexts_made;
        bound += w[i].caller_outputs;
        failures += w[i].failures;
        if (w[i].max_err > max_err) max_err = w[i].max_err;
        if (w[i].failures) fprintf(stderr, "stress: thread %d: %s\n", i, w[i].msg);
    }
    double secs = now_s() - t0;
    printf("stress: %d threads, %.1f s: %ld runs (%.0f/s), %ld contexts created, %ld runs into "
           "caller outputs, %d shapes, max |diff| vs single-threaded %g, %ld failures\n",
           started, secs, runs, (double)runs / secs, made, bound, N_SHAPES, (double)max_err,
           failures);
    for (int i = 0; i < started; i++) printf("  thread %d: %ld runs\n", i, w[i].runs);
    rc = (failures == 0 && started == n_threads && runs > 0) ? 0 : 1;
    printf("stress: %s\n", rc ? "FAILED" : "passed");

done:
    kiln_context_free(ref);
    for (int i = 0; i < N_SHAPES; i++) {
        free(s.cases[i].x);
        free(s.cases[i].probs);
        free(s.cases[i].feat);
    }
    kiln_engine_free(s.engines[1]);
    kiln_free(bytes);
    kiln_engine_free(s.engines[0]);
    kiln_builder_free(b);
    kiln_model_free(m);
    return rc;
}
