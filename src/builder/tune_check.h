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
/* Whether a agrees with the host reference ref (as kiln__tune_agree, the
 * bound relative to ref's max |y| alone: a wrong output that is large does
 * not widen it). */
KILN_PRIVATE bool kiln__tune_agree_ref(kiln_dtype dt, const kiln_tune_sample *ref, const kiln_tune_sample *a);
/* a's error against ref for messages: max |a - ref| over the samples
 * (INFINITY where one is finite and the other not). */
KILN_PRIVATE double kiln__tune_error(const kiln_tune_sample *ref, const kiln_tune_sample *a);

/* Whether every tactic that ran (ran[k]) agrees with the first that ran in
 * every output (s as for kiln__tune_decide). */
KILN_PRIVATE bool kiln__tune_all_agree(const kiln_dtype *dt, const kiln_tune_sample *s, int n, int n_out,
                                       const bool *ran);

/* How a layer's tactics were judged (kiln__tune_decide). */
typedef enum kiln_tune_rule {
    KILN_TUNE_AGREE,      /* every tactic that ran agrees with the first: all kept */
    KILN_TUNE_REFERENCE,  /* they disagree: those that agree with the host reference are kept */
    KILN_TUNE_MAJORITY,   /* they disagree, no reference: a strict majority of the engine
                             families agrees with one tactic; those that agree with it are kept */
    KILN_TUNE_NONE_RIGHT, /* none agrees with the host reference: the build fails */
    KILN_TUNE_UNDECIDED,  /* no reference and no strict majority: the build fails */
} kiln_tune_rule;

/* Judges n tactics with n_out outputs each (s[k * n_out + i]; k's entries
 * are ignored where ran[k] is false). When they all agree with the first
 * that ran, all are kept. Else a tactic is kept when it agrees with the
 * reference ref (n_out samples of the layer's output computed on the host
 * at the same elements, or NULL where none could be computed) in every
 * output. Without a reference the tactics vote, the tactics of one family
 * (family[k] equal; NULL: each its own) counting as one voter: a family
 * votes for tactic r when one of its tactics agrees with r, and the first
 * r (tactic order) that more than half of the families vote for is the
 * one the others must agree with. No plurality is ever taken: a vote is
 * not a proof, and configurations of one engine share its defects.
 * keep[k]: kept (false for every tactic under NONE_RIGHT and UNDECIDED,
 * true where ran[k] is false). */
KILN_PRIVATE kiln_tune_rule kiln__tune_decide(const kiln_dtype *dt, const kiln_tune_sample *s, int n, int n_out,
                                              const bool *ran, const kiln_tune_sample *ref, const int *family,
                                              bool *keep);

/* The NaN probe (tune.c): s[k * n_out + i] the samples of tactic k's outputs
 * on inputs whose data input is all NaN; ref (NULL: none) the host
 * reference's on the same inputs. A NaN is expected at a sample where ref's
 * is NaN, or without ref where any tactic that ran gives one. A tactic
 * that gives a finite value where a NaN is expected (a max(x, 0) ReLU
 * epilogue turns NaN into 0) has keep[k] false; one that gives more NaN
 * than expected is kept (Winograd-like transforms spread a NaN over a
 * tile: not a silent answer). keep[k] is true where ran[k] is false.
 * Returns how many tactics that ran are not kept; where that would be every
 * one, all are kept and it returns -1 (the layer then keeps its tactics, and
 * the tuner notes that NaN inputs may give finite outputs there). */
KILN_PRIVATE int kiln__tune_nan_decide(const kiln_tune_sample *s, int n, int n_out, const bool *ran,
                                       const kiln_tune_sample *ref, bool *keep);

/* The NaN probe's second input (tune.c): the data input random as in the
 * check, with a few elements NaN, +inf and -inf; s as above, ref the host
 * reference's samples on the same inputs (required: without one nothing is
 * decided). A tactic is not kept where one of its finite samples is wrong:
 * ref's is not finite there (-inf through a saturating conversion became
 * -65504, and a ReLU then gave a number), or differs from ref's by more
 * than kiln__tune_agree_ref's bound. Non-finite values where ref's are
 * finite are no fault (a transform spreads an infinity over its tile: not
 * a silent answer). Returns as kiln__tune_nan_decide (-1: every tactic that
 * ran would go; all are kept). */
KILN_PRIVATE int kiln__tune_specials_decide(const kiln_dtype *dt, const kiln_tune_sample *s, int n, int n_out,
                                            const bool *ran, const kiln_tune_sample *ref, bool *keep);

#endif
