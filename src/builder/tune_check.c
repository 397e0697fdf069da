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

bool kiln__tune_agree(kiln_dtype dt, const kiln_tune_sample *a, const kiln_tune_sample *b) {
    if (!a->valid || !b->valid) return true; /* nothing to compare */
    if (a->n != b->n || a->nonfinite != b->nonfinite) return false;
    /* a gross-error check, not a precision test: different algorithms round
     * differently (reduced precision outputs: a few ulps of the largest) */
    double rtol = dt == KILN_DTYPE_FLOAT32 ? 1e-2 : 2e-2;
    double scale = a->max_abs > b->max_abs ? a->max_abs : b->max_abs;
    double tol = rtol * scale + 1e-6;
    if (fabs(a->max_abs - b->max_abs) > tol || fabs(a->mean_abs - b->mean_abs) > tol) return false;
    for (int64_t j = 0; j < a->n; j++) {
        float x = a->v[j], y = b->v[j];
        bool fx = isfinite(x), fy = isfinite(y);
        if (fx != fy) return false;
        if (fx && fabs((double)x - (double)y) > tol) return false;
    }
    return true;
}

static bool agree_all(const kiln_dtype *dt, const kiln_tune_sample *s, int n_out, int a, int b) {
    for (int i = 0; i < n_out; i++)
        if (!kiln__tune_agree(dt[i], &s[a * n_out + i], &s[b * n_out + i])) return false;
    return true;
}

static int votes_for(const kiln_dtype *dt, const kiln_tune_sample *s, int n, int n_out, const bool *ran, int r) {
    int votes = 0;
    for (int k = 0; k < n; k++) votes += ran[k] && (k == r || agree_all(dt, s, n_out, r, k));
    return votes;
}

int kiln__tune_consensus(const kiln_dtype *dt, const kiln_tune_sample *s, int n, int n_out, const bool *ran,
                         bool *keep) {
    int n_ran = 0, ref = -1;
    for (int k = 0; k < n; k++) {
        keep[k] = true;
        n_ran += ran[k];
    }
    if (n_ran < 2) return 0;
    /* the first that a majority agrees with (usually tactic 0: n comparisons) */
    for (int r = 0; r < n && ref < 0; r++)
        if (ran[r] && 2 * votes_for(dt, s, n, n_out, ran, r) > n_ran) ref = r;
    /* none: the first with the most votes */
    if (ref < 0)
        for (int r = 0, most = 0; r < n; r++) {
            int v = ran[r] ? votes_for(dt, s, n, n_out, ran, r) : 0;
            if (v > most) most = v, ref = r;
        }
    int dropped = 0;
    for (int k = 0; k < n; k++)
        if (ran[k] && k != ref && !agree_all(dt, s, n_out, ref, k)) {
            keep[k] = false;
            dropped++;
        }
    return dropped;
}
