/* tune_check.h -- do a layer's tactics agree? (the builder's tuner)
 *
 * Every tactic of a layer computes the same function, so their outputs on
 * the same inputs must agree to within rounding. A tactic whose output does
 * not agree with the others' (a library engine config with a defect for
 * some shape, a kernel with a bug at some size) is not a candidate, however
 * fast it is: the tuner would otherwise pick a wrong answer silently. */
#ifndef KILN_TUNE_CHECK_H
#define KILN_TUNE_CHECK_H

#include "core/core.h"

/* What one tactic's output looked like: up to KILN_TUNE_SAMPLES values
 * spread evenly over it (the tuner gathers them from the device with one
 * strided copy) and their statistics. */
#define KILN_TUNE_SAMPLES 65536

typedef struct kiln_tune_sample {
    float *v;            /* n sampled values (owned) */
    int64_t n;
    double max_abs;      /* over the finite samples */
    double mean_abs;     /* over the finite samples */
    int64_t nonfinite;   /* NaN and Inf samples */
    bool valid;          /* a float output was sampled */
} kiln_tune_sample;

/* Samples ne values of type dt at host, KILN_TUNE_SAMPLES evenly spread
 * when there are more (fp32, fp16 or bf16; any other type leaves s
 * invalid: not compared). */
KILN_PRIVATE kiln_status kiln__tune_sample(kiln_dtype dt, const void *host, int64_t ne, kiln_tune_sample *s);
KILN_PRIVATE void kiln__tune_sample_free(kiln_tune_sample *s);

/* Whether a and b (samples of the same output) agree: the same count of
 * non-finite values, each pair of samples either both non-finite or within
 * rtol * max(|ref|) (plus a small absolute term), and the samples' max and
 * mean |x| within the same bound. rtol suits dt (reduced precision: 2e-2). */
KILN_PRIVATE bool kiln__tune_agree(kiln_dtype dt, const kiln_tune_sample *a, const kiln_tune_sample *b);

/* Consensus of n tactics with n_out outputs each (s[k * n_out + i]; k's
 * entries are ignored where ran[k] is false): the reference is tactic 0 if
 * more than half of those that ran agree with it, else the one that agrees
 * with the most (the earlier on a tie). keep[k] is false for a tactic that
 * ran and disagrees with the reference in some output. Returns how many
 * were dropped. */
KILN_PRIVATE int kiln__tune_consensus(const kiln_dtype *dt, const kiln_tune_sample *s, int n, int n_out,
                                      const bool *ran, bool *keep);

#endif
