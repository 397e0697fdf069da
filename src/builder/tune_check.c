/* tune_check.c -- do a layer's tactics agree? (tune_check.h) */
#include "builder/tune_check.h"

#include <math.h>
#include <stdlib.h>

kiln_status kiln__tune_sample(kiln_dtype dt, const void *host, int64_t ne, kiln_tune_sample *s) {
    memset(s, 0, sizeof *s);
    if (ne <= 0 || (dt != KILN_DTYPE_FLOAT32 && dt != KILN_DTYPE_FLOAT16 && dt != KILN_DTYPE_BFLOAT16))
        return KILN_OK;
    int64_t n = ne < KILN_TUNE_SAMPLES ? ne : KILN_TUNE_SAMPLES;
    s->v = kiln__malloc((size_t)n * sizeof *s->v);
    if (!s->v) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (checking tactics)");
    /* evenly spread: element (j * ne) / n, j < n (every element when ne <= n) */
    double sum = 0;
    int64_t finite = 0;
    for (int64_t j = 0; j < n; j++) {
        double x = kiln__load_f64(dt, host, (int64_t)((double)j * (double)ne / (double)n));
        s->v[j] = (float)x;
        if (!isfinite(x)) {
            s->nonfinite++;
            continue;
        }
        double a = fabs(x);
        if (a > s->max_abs) s->max_abs = a;
        sum += a;
        finite++;
    }
    s->n = n;
    s->mean_abs = finite ? sum / (double)finite : 0;
    s->valid = true;
    return KILN_OK;
}

void kiln__tune_sample_free(kiln_tune_sample *s) {
    kiln__free(s->v);
    memset(s, 0, sizeof *s);
}

/* The bound two samples of dt values of magnitude scale must agree within:
 * a gross-error check, not a precision test (different algorithms round
 * differently; reduced precision outputs: a few ulps of the largest). */
static double agree_tol(kiln_dtype dt, double scale) { return (dt == KILN_DTYPE_FLOAT32 ? 1e-2 : 2e-2) * scale + 1e-6; }

/* a and b agree to within agree_tol(dt, scale) */
static bool agree_within(kiln_dtype dt, const kiln_tune_sample *a, const kiln_tune_sample *b, double scale) {
    if (!a->valid || !b->valid) return true; /* nothing to compare */
    if (a->n != b->n || a->nonfinite != b->nonfinite) return false;
    double tol = agree_tol(dt, scale);
    if (fabs(a->max_abs - b->max_abs) > tol || fabs(a->mean_abs - b->mean_abs) > tol) return false;
    for (int64_t j = 0; j < a->n; j++) {
        float x = a->v[j], y = b->v[j];
        bool fx = isfinite(x), fy = isfinite(y);
        if (fx != fy) return false;
        if (fx && fabs((double)x - (double)y) > tol) return false;
    }
    return true;
}

bool kiln__tune_agree(kiln_dtype dt, const kiln_tune_sample *a, const kiln_tune_sample *b) {
    return agree_within(dt, a, b, a->max_abs > b->max_abs ? a->max_abs : b->max_abs);
}

bool kiln__tune_agree_ref(kiln_dtype dt, const kiln_tune_sample *ref, const kiln_tune_sample *a) {
    return agree_within(dt, ref, a, ref->max_abs);
}

double kiln__tune_error(const kiln_tune_sample *ref, const kiln_tune_sample *a) {
    if (!ref->valid || !a->valid) return 0;
    if (ref->n != a->n) return INFINITY;
    double e = 0;
    for (int64_t j = 0; j < a->n; j++) {
        float x = a->v[j], y = ref->v[j];
        if (isfinite(x) != isfinite(y)) return INFINITY;
        if (isfinite(x) && fabs((double)x - (double)y) > e) e = fabs((double)x - (double)y);
    }
    return e;
}

static bool agree_all(const kiln_dtype *dt, const kiln_tune_sample *s, int n_out, int a, int b) {
    for (int i = 0; i < n_out; i++)
        if (!kiln__tune_agree(dt[i], &s[a * n_out + i], &s[b * n_out + i])) return false;
    return true;
}

static bool agree_ref(const kiln_dtype *dt, const kiln_tune_sample *s, int n_out, const kiln_tune_sample *ref, int k) {
    for (int i = 0; i < n_out; i++)
        if (!kiln__tune_agree_ref(dt[i], &ref[i], &s[k * n_out + i])) return false;
    return true;
}

static int family_of(const int *family, int k) { return family ? family[k] : k; }

/* The families among the tactics that ran that vote for tactic r: those
 * with a tactic that agrees with r (r's own always). */
static int family_votes(const kiln_dtype *dt, const kiln_tune_sample *s, int n, int n_out, const bool *ran,
                        const int *family, int r) {
    int votes = 0;
    for (int k = 0; k < n; k++) {
        if (!ran[k]) continue;
        bool first = true; /* k is the first tactic that ran of its family */
        for (int j = 0; j < k && first; j++) first = !(ran[j] && family_of(family, j) == family_of(family, k));
        if (!first) continue;
        bool votes_r = false;
        for (int j = k; j < n && !votes_r; j++)
            votes_r = ran[j] && family_of(family, j) == family_of(family, k) &&
                      (j == r || agree_all(dt, s, n_out, r, j));
        votes += votes_r;
    }
    return votes;
}

bool kiln__tune_all_agree(const kiln_dtype *dt, const kiln_tune_sample *s, int n, int n_out, const bool *ran) {
    int first = -1;
    for (int k = 0; k < n; k++) {
        if (!ran[k]) continue;
        if (first < 0) first = k;
        else if (!agree_all(dt, s, n_out, first, k)) return false;
    }
    return true;
}

kiln_tune_rule kiln__tune_decide(const kiln_dtype *dt, const kiln_tune_sample *s, int n, int n_out,
                                 const bool *ran, const kiln_tune_sample *ref, const int *family, bool *keep) {
    int n_fam = 0;
    for (int k = 0; k < n; k++) {
        keep[k] = true;
        if (!ran[k]) continue;
        bool seen = false;
        for (int j = 0; j < k && !seen; j++) seen = ran[j] && family_of(family, j) == family_of(family, k);
        n_fam += !seen;
    }
    if (kiln__tune_all_agree(dt, s, n, n_out, ran)) return KILN_TUNE_AGREE;
    if (ref) {
        int kept = 0;
        for (int k = 0; k < n; k++) {
            if (!ran[k]) continue;
            keep[k] = agree_ref(dt, s, n_out, ref, k);
            kept += keep[k];
        }
        return kept ? KILN_TUNE_REFERENCE : KILN_TUNE_NONE_RIGHT;
    }
    int chosen = -1;
    for (int r = 0; r < n && chosen < 0; r++)
        if (ran[r] && 2 * family_votes(dt, s, n, n_out, ran, family, r) > n_fam) chosen = r;
    for (int k = 0; k < n; k++)
        if (ran[k]) keep[k] = chosen >= 0 && (k == chosen || agree_all(dt, s, n_out, chosen, k));
    return chosen >= 0 ? KILN_TUNE_MAJORITY : KILN_TUNE_UNDECIDED;
}

int kiln__tune_nan_decide(const kiln_tune_sample *s, int n, int n_out, const bool *ran, const kiln_tune_sample *ref,
                          bool *keep) {
    int ran_n = 0, dropped = 0;
    for (int k = 0; k < n; k++) {
        keep[k] = true;
        ran_n += ran[k];
    }
    for (int i = 0; i < n_out; i++) {
        int64_t len = -1; /* the samples every tactic that ran has of output i (-1: not compared) */
        for (int k = 0; k < n; k++) {
            const kiln_tune_sample *a = &s[k * n_out + i];
            if (!ran[k]) continue;
            if (!a->valid || (len >= 0 && a->n != len)) {
                len = -2;
                break;
            }
            len = a->n;
        }
        if (len < 0 || (ref && (!ref[i].valid || ref[i].n != len))) continue;
        for (int64_t j = 0; j < len; j++) {
            bool want = false; /* a NaN expected here */
            if (ref)
                want = isnan(ref[i].v[j]);
            else
                for (int k = 0; k < n && !want; k++) want = ran[k] && isnan(s[k * n_out + i].v[j]);
            if (!want) continue;
            for (int k = 0; k < n; k++)
                if (ran[k] && keep[k] && isfinite(s[k * n_out + i].v[j])) keep[k] = false;
        }
    }
    for (int k = 0; k < n; k++) dropped += ran[k] && !keep[k];
    if (ran_n && dropped == ran_n) {
        for (int k = 0; k < n; k++) keep[k] = true;
        return -1;
    }
    return dropped;
}

int kiln__tune_specials_decide(const kiln_dtype *dt, const kiln_tune_sample *s, int n, int n_out,
                               const bool *ran, const kiln_tune_sample *ref, bool *keep) {
    int ran_n = 0, dropped = 0;
    for (int k = 0; k < n; k++) {
        keep[k] = true;
        ran_n += ran[k];
    }
    for (int i = 0; i < n_out; i++) {
        const kiln_tune_sample *r = &ref[i];
        if (!r->valid) continue;
        double tol = agree_tol(dt[i], r->max_abs);
        for (int k = 0; k < n; k++) {
            const kiln_tune_sample *a = &s[k * n_out + i];
            if (!ran[k] || !keep[k] || !a->valid || a->n != r->n) continue;
            for (int64_t j = 0; j < a->n && keep[k]; j++)
                if (isfinite(a->v[j]) && (!isfinite(r->v[j]) || fabs((double)a->v[j] - (double)r->v[j]) > tol))
                    keep[k] = false;
        }
    }
    for (int k = 0; k < n; k++) dropped += ran[k] && !keep[k];
    if (ran_n && dropped == ran_n) {
        for (int k = 0; k < n; k++) keep[k] = true;
        return -1;
    }
    return dropped;
}
