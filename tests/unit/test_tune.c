/* test_tune.c -- how the tuner times a layer's candidate tactics
 * (kiln__tune_turns, src/builder/tune.c), with a fake run whose times the
 * test sets: the candidates take turns, one run each per round; a burst of
 * slow runs (load on a shared machine) that covers fewer than half of any
 * candidate's runs does not move its median, so the faster candidate still
 * wins wherever the burst falls; a candidate that fails is dropped and not
 * run again; one that loses by far on its first two runs runs no more.
 * And how a layer's tactics are judged by their outputs (tune_check.c): a
 * tactic that computes something else (NaN, a scaled or shuffled output)
 * is dropped even when it is tactic 0, rounding-level differences are not;
 * when they disagree the host reference decides, without one a strict
 * majority of engine families (configs of one engine vote once), and no
 * plurality is ever taken (tests/unit/test_tune_judge.c runs the tuner's
 * whole path on a planted device). */
#include "test.h"

#include "builder/tune_check.h"

#include "runtime/engine.h"

#include <math.h>
#include <string.h>

#define MAX_CALLS 64

typedef struct fake {
    double base[4];      /* each candidate's time when nothing else runs */
    int calls;           /* runs so far, all candidates */
    int order[MAX_CALLS]; /* which candidate each run was */
    int burst_from, burst_len; /* runs [from, from + len) take `factor` times as long */
    double factor;
    int fail_k, fail_at; /* candidate fail_k fails on its fail_at-th run (0: never) */
    int runs[4];         /* runs of each candidate */
} fake;

static double fake_run(void *ctx, int k) {
    fake *f = ctx;
    int i = f->calls++;
    if (i < MAX_CALLS) f->order[i] = k;
    f->runs[k]++;
    if (k == f->fail_k && f->runs[k] == f->fail_at) return -1;
    double v = f->base[k];
    if (i >= f->burst_from && i < f->burst_from + f->burst_len) v *= f->factor;
    return v;
}

static fake make(int n, const double *base) {
    fake f;
    memset(&f, 0, sizeof f);
    for (int k = 0; k < n; k++) f.base[k] = base[k];
    f.fail_k = -1;
    f.burst_from = -1;
    f.factor = 1.0;
    return f;
}

/* One run each per round, in candidate order, 5 rounds. */
TEST(candidates_take_turns) {
    static const double base[3] = {100, 130, 160};
    fake f = make(3, base);
    double us[3];
    kiln__tune_turns(3, fake_run, &f, us);
    CHECK(f.calls == 15);
    for (int i = 0; i < 15 && i < f.calls; i++) CHECK(f.order[i] == i % 3);
    for (int k = 0; k < 3; k++) CHECK(us[k] == base[k]);
}

/* A burst covering fewer than half of each candidate's runs (3 runs in a
 * row for two candidates, 5 for three) leaves every median as it was,
 * wherever it starts. Timed one candidate after the other, such a burst
 * would cover 3 of the first candidate's 5 runs and make it look 5x slower. */
TEST(a_burst_does_not_pick_the_slower) {
    static const double base[3] = {100, 130, 160};
    for (int n = 2; n <= 3; n++) {
        int len = n == 2 ? 3 : 5;
        for (int from = 0; from + len <= 5 * n; from++) {
            fake f = make(n, base);
            f.burst_from = from;
            f.burst_len = len;
            f.factor = 5.0;
            double us[3] = {-1, -1, -1};
            kiln__tune_turns(n, fake_run, &f, us);
            for (int k = 0; k < n; k++) {
                if (us[k] != base[k]) printf("  n %d burst at %d len %d: candidate %d %g\n", n, from, len, k, us[k]);
                CHECK(us[k] == base[k]);
            }
        }
    }
}

/* A burst on one of a candidate's first two runs, however slow, does not
 * stop it as a far loser: the other run decides. */
TEST(a_burst_on_one_first_run_does_not_stop_it) {
    static const double base[2] = {100, 300};
    for (int at = 1; at <= 3; at += 2) { /* the second candidate's first run, then its second */
        fake f = make(2, base);
        f.burst_from = at;
        f.burst_len = 1;
        f.factor = 10.0; /* 3000 us */
        double us[2];
        kiln__tune_turns(2, fake_run, &f, us);
        CHECK(f.runs[1] == 5);
        CHECK(us[0] == 100 && us[1] == 300);
    }
}

/* A failed run drops the candidate (us < 0) and it is not run again; the
 * others keep their turns. */
TEST(a_failing_candidate_is_dropped) {
    static const double base[2] = {100, 130};
    fake f = make(2, base);
    f.fail_k = 0;
    f.fail_at = 2;
    double us[2];
    kiln__tune_turns(2, fake_run, &f, us);
    CHECK(us[0] < 0);
    CHECK(us[1] == 130);
    CHECK(f.runs[0] == 2);
    CHECK(f.runs[1] == 5);
}

/* A candidate whose first two runs both take over 4x the best + 1 ms
 * runs no more (median of the two); one within that keeps all 5. */
TEST(a_far_loser_stops_after_two_runs) {
    static const double base[3] = {100, 1500, 1300};
    fake f = make(3, base);
    double us[3];
    kiln__tune_turns(3, fake_run, &f, us);
    CHECK(f.runs[0] == 5);
    CHECK(f.runs[1] == 2); /* 1500 > 4 * 100 + 1000 */
    CHECK(f.runs[2] == 5); /* 1300 is not */
    CHECK(us[1] == 1500);
    CHECK(us[0] == 100 && us[2] == 1300);
}

/* ---- do the tactics agree (tune_check.c) ---------------------------------- */

#define NE 3000 /* elements of the output (every one sampled) */

/* tactic k's output of type dt: the same values, made wrong as `how` says */
static void make_out_dt(kiln_dtype dt, void *h, int how, int k) {
    for (int i = 0; i < NE; i++) {
        double x = sin(0.37 * i) * 3.0;
        if (how == 1) x += ((i + k) % 3 - 1) * 2e-3;     /* rounding-level differences */
        if (how == 2 && i == 1234) x = NAN;               /* one NaN */
        if (how == 3) x *= 25.0;                          /* scaled */
        if (how == 4) x = sin(0.37 * (NE - 1 - i)) * 3.0; /* shuffled: same statistics */
        kiln__store_f64(dt, h, i, x);
    }
}

/* fp16 (the device's tactics) */
static void make_out(uint16_t *h, int how, int k) { make_out_dt(KILN_DTYPE_FLOAT16, h, how, k); }

/* n tactics, how[k] each (-1: did not run), judged against a host
 * reference made as ref_how says (-1: none) with the families `family`
 * (NULL: each its own); keep[] out */
static kiln_tune_rule decide(int n, const int *how, int ref_how, const int *family, bool *keep) {
    static uint16_t h[NE];
    static float hr[NE];
    kiln_tune_sample s[8], ref;
    bool ran[8];
    kiln_dtype dt = KILN_DTYPE_FLOAT16;
    for (int k = 0; k < n; k++) {
        make_out(h, how[k], k);
        CHECK(kiln__tune_sample(dt, h, NE, &s[k]) == KILN_OK);
        ran[k] = how[k] >= 0;
    }
    if (ref_how >= 0) { /* the host's: float32 math (not rounded: fp16's bound still holds) */
        make_out_dt(KILN_DTYPE_FLOAT32, hr, ref_how, 7);
        CHECK(kiln__tune_sample(KILN_DTYPE_FLOAT32, hr, NE, &ref) == KILN_OK);
    }
    kiln_tune_rule r = kiln__tune_decide(&dt, s, n, 1, ran, ref_how >= 0 ? &ref : NULL, family, keep);
    for (int k = 0; k < n; k++) kiln__tune_sample_free(&s[k]);
    if (ref_how >= 0) kiln__tune_sample_free(&ref);
    return r;
}

TEST(tactics_that_agree_are_all_kept) {
    bool keep[8];
    CHECK(decide(4, (int[]){0, 1, 1, 0}, -1, NULL, keep) == KILN_TUNE_AGREE);
    for (int k = 0; k < 4; k++) CHECK(keep[k]);
    CHECK(decide(4, (int[]){0, 1, 1, 0}, 0, NULL, keep) == KILN_TUNE_AGREE); /* no reference needed */
}

TEST(a_tactic_that_computes_something_else_is_dropped) {
    bool keep[8];
    /* a reference decides */
    CHECK(decide(4, (int[]){0, 2, 0, 1}, 0, NULL, keep) == KILN_TUNE_REFERENCE); /* a NaN */
    CHECK(keep[0] && !keep[1] && keep[2] && keep[3]);
    CHECK(decide(3, (int[]){0, 0, 3}, 1, NULL, keep) == KILN_TUNE_REFERENCE); /* scaled */
    CHECK(keep[0] && keep[1] && !keep[2]);
    CHECK(decide(3, (int[]){4, 0, 0}, 0, NULL, keep) == KILN_TUNE_REFERENCE); /* tactic 0 wrong, shuffled */
    CHECK(!keep[0] && keep[1] && keep[2]);
    /* without one, a strict majority */
    CHECK(decide(4, (int[]){0, 2, 0, 1}, -1, NULL, keep) == KILN_TUNE_MAJORITY);
    CHECK(keep[0] && !keep[1] && keep[2] && keep[3]);
    CHECK(decide(3, (int[]){4, 0, 0}, -1, NULL, keep) == KILN_TUNE_MAJORITY);
    CHECK(!keep[0] && keep[1] && keep[2]);
}

/* What the H200 showed for an EfficientNet squeeze-excite 1x1 conv (fp16):
 * cudnn-eng7 NaN, cudnn-eng4.0266c and cudnn-eng4.3fe3b (two configs of
 * one engine) agreeing on a wrong answer, cudnn-legacy+epilogue right. The
 * plurality (the two eng4 configs) was kept, the right one dropped. */
TEST(two_configs_of_one_engine_do_not_outvote_the_reference) {
    bool keep[8];
    static const int fam[4] = {0, 1, 1, 3}; /* eng7, eng4, eng4, legacy */
    CHECK(decide(4, (int[]){2, 3, 3, 0}, 0, fam, keep) == KILN_TUNE_REFERENCE);
    CHECK(!keep[0] && !keep[1] && !keep[2] && keep[3]);
    CHECK(decide(4, (int[]){2, 3, 3, 0}, 0, NULL, keep) == KILN_TUNE_REFERENCE);
    CHECK(!keep[0] && !keep[1] && !keep[2] && keep[3]);
    /* no reference: 1 vote of 3 families each, 2 of 4 tactics: no strict majority */
    CHECK(decide(4, (int[]){2, 3, 3, 0}, -1, fam, keep) == KILN_TUNE_UNDECIDED);
    for (int k = 0; k < 4; k++) CHECK(!keep[k]);
    CHECK(decide(4, (int[]){2, 3, 3, 0}, -1, NULL, keep) == KILN_TUNE_UNDECIDED);
    /* three configs of one engine are still one voter (3 of 4 tactics are not a majority) */
    static const int fam3[4] = {0, 0, 0, 3};
    CHECK(decide(4, (int[]){3, 3, 3, 0}, -1, fam3, keep) == KILN_TUNE_UNDECIDED);
    CHECK(decide(4, (int[]){3, 3, 3, 0}, 0, fam3, keep) == KILN_TUNE_REFERENCE);
    CHECK(!keep[0] && !keep[1] && !keep[2] && keep[3]);
    /* two families of three that agree are a majority */
    static const int fam2[4] = {0, 0, 2, 3}; /* eng4, eng4, legacy, eng7 */
    CHECK(decide(4, (int[]){3, 3, 0, 1}, -1, fam2, keep) == KILN_TUNE_MAJORITY);
    CHECK(!keep[0] && !keep[1] && keep[2] && keep[3]);
}

TEST(no_majority_and_no_reference_decides_nothing) {
    bool keep[8];
    CHECK(decide(2, (int[]){0, 3}, -1, NULL, keep) == KILN_TUNE_UNDECIDED); /* two that disagree */
    CHECK(!keep[0] && !keep[1]);
    CHECK(decide(2, (int[]){0, 3}, 3, NULL, keep) == KILN_TUNE_REFERENCE);
    CHECK(!keep[0] && keep[1]);
    CHECK(decide(4, (int[]){3, 0, 0, 2}, -1, NULL, keep) == KILN_TUNE_UNDECIDED); /* a tie of 2 of 4 */
    CHECK(decide(3, (int[]){0, -1, 3}, -1, NULL, keep) == KILN_TUNE_UNDECIDED); /* one that did not run */
    CHECK(decide(3, (int[]){0, -1, 3}, 0, NULL, keep) == KILN_TUNE_REFERENCE);
    CHECK(keep[0] && keep[1] && !keep[2]);
}

TEST(every_tactic_wrong_is_none_right) {
    bool keep[8];
    CHECK(decide(3, (int[]){2, 3, 4}, 0, NULL, keep) == KILN_TUNE_NONE_RIGHT);
    for (int k = 0; k < 3; k++) CHECK(!keep[k]);
    CHECK(decide(2, (int[]){3, 3}, 0, NULL, keep) == KILN_TUNE_AGREE); /* all agree: not judged */
}

TEST(the_reference_bound_is_its_own_scale) {
    /* 25 times the reference: the error is measured, and a large output does not widen the bound */
    static uint16_t a[NE], r[NE];
    make_out(a, 3, 0);
    make_out(r, 0, 0);
    kiln_tune_sample sa, sr;
    CHECK(kiln__tune_sample(KILN_DTYPE_FLOAT16, a, NE, &sa) == KILN_OK);
    CHECK(kiln__tune_sample(KILN_DTYPE_FLOAT16, r, NE, &sr) == KILN_OK);
    CHECK(!kiln__tune_agree_ref(KILN_DTYPE_FLOAT16, &sr, &sa));
    CHECK(kiln__tune_agree_ref(KILN_DTYPE_FLOAT16, &sr, &sr));
    CHECK(fabs(kiln__tune_error(&sr, &sa) - 24 * sr.max_abs) < 0.1);
    kiln__tune_sample_free(&sa);
    kiln__tune_sample_free(&sr);
}

TEST(other_dtypes_are_not_compared) {
    int64_t v[4] = {1, 2, 3, 4};
    kiln_tune_sample s;
    CHECK(kiln__tune_sample(KILN_DTYPE_INT64, v, 4, &s) == KILN_OK);
    CHECK(!s.valid);
    CHECK(kiln__tune_agree(KILN_DTYPE_INT64, &s, &s));
    kiln__tune_sample_free(&s);
}

int main(void) {
    RUN(candidates_take_turns);
    RUN(a_burst_does_not_pick_the_slower);
    RUN(a_burst_on_one_first_run_does_not_stop_it);
    RUN(a_failing_candidate_is_dropped);
    RUN(a_far_loser_stops_after_two_runs);
    RUN(tactics_that_agree_are_all_kept);
    RUN(a_tactic_that_computes_something_else_is_dropped);
    RUN(two_configs_of_one_engine_do_not_outvote_the_reference);
    RUN(no_majority_and_no_reference_decides_nothing);
    RUN(every_tactic_wrong_is_none_right);
    RUN(the_reference_bound_is_its_own_scale);
    RUN(other_dtypes_are_not_compared);
    return test_summary();
}
