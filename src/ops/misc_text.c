/* misc_text.c -- TfIdfVectorizer over integer tokens (pool_strings is not
 * supported: kiln has no string tensors).
 *
 * The variable-length attributes become constant inputs at import so that
 * the POD attribute struct stays fixed-size:
 *   input 1  pool         int64 [P]   (pool_int64s)
 *   input 2  counts       int64 [G]   (ngram_counts: start of each n-gram length in pool)
 *   input 3  indexes      int64 [M]   (ngram_indexes: output slot of each pool n-gram)
 *   input 4  weights      float [M]   (optional)
 * X: [C] or [N, C] int32/int64 -> Y: [S] or [N, S] float32 with
 * S = max(indexes) + 1. For each row, every n-gram with
 * min_gram_length <= n <= max_gram_length is counted at every start and, for
 * n >= 2, every skip in [0, max_skip_count] (tokens skip + 1 apart). */
#include "ops/op.h"

#include <stdlib.h>

enum { TFIDF_TF = 0, TFIDF_IDF = 1, TFIDF_TFIDF = 2 };

typedef struct kiln_tfidf_attrs {
    int32_t mode;
    int32_t min_gram;
    int32_t max_gram;
    int32_t max_skip;
    int64_t out_size;
} kiln_tfidf_attrs;
KILN_ATTRS_SIZE(kiln_tfidf_attrs, 24); KILN_ATTRS_AT(kiln_tfidf_attrs, mode, 0);
KILN_ATTRS_AT(kiln_tfidf_attrs, min_gram, 4); KILN_ATTRS_AT(kiln_tfidf_attrs, max_gram, 8);
KILN_ATTRS_AT(kiln_tfidf_attrs, max_skip, 12); KILN_ATTRS_AT(kiln_tfidf_attrs, out_size, 16);

static kiln_status tfidf_import(kiln_import_ctx *ic, void *attrs) {
    kiln_tfidf_attrs *at = attrs;
    const char *mode = kiln_attr_string(ic, "mode", "");
    if (!strcmp(mode, "TF")) at->mode = TFIDF_TF;
    else if (!strcmp(mode, "IDF")) at->mode = TFIDF_IDF;
    else if (!strcmp(mode, "TFIDF")) at->mode = TFIDF_TFIDF;
    else return KILN_IMPORT_FAIL(ic, "attribute 'mode' = '%s' is not supported", mode);
    KILN_TRY(kiln_attr_int32(ic, "min_gram_length", 0, &at->min_gram));
    KILN_TRY(kiln_attr_int32(ic, "max_gram_length", 0, &at->max_gram));
    KILN_TRY(kiln_attr_int32(ic, "max_skip_count", 0, &at->max_skip));
    if (kiln_attr_has(ic, "pool_strings"))
        return KILN_IMPORT_FAIL(ic, "attribute 'pool_strings' is not supported (no string tensors)");
    int np = kiln_attr_ints(ic, "pool_int64s", NULL, 0);
    int ng = kiln_attr_ints(ic, "ngram_counts", NULL, 0);
    int ni = kiln_attr_ints(ic, "ngram_indexes", NULL, 0);
    int nw = kiln_attr_floats(ic, "weights", NULL, 0);
    if (np < 1 || ng < 1 || ni < 1)
        return KILN_IMPORT_FAIL(ic, "attributes 'pool_int64s', 'ngram_counts' and 'ngram_indexes' "
                                "are required");
    if (nw >= 0 && nw != ni)
        return KILN_IMPORT_FAIL(ic, "'weights' has %d entries but 'ngram_indexes' has %d", nw, ni);
    int64_t *buf = kiln__malloc((size_t)(np + ng + ni) * sizeof(int64_t));
    float *w = nw > 0 ? kiln__malloc((size_t)nw * sizeof(float)) : NULL;
    if (!buf || (nw > 0 && !w)) {
        kiln__free(buf);
        kiln__free(w);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "TfIdfVectorizer import: out of memory");
    }
    int64_t *pool = buf, *cnt = buf + np, *idx = buf + np + ng;
    kiln_attr_ints(ic, "pool_int64s", pool, np);
    kiln_attr_ints(ic, "ngram_counts", cnt, ng);
    kiln_attr_ints(ic, "ngram_indexes", idx, ni);
    if (nw > 0) kiln_attr_floats(ic, "weights", w, nw);
    kiln_status st = KILN_OK;
    /* validate: counts ascending starts; each n-gram section a multiple of n */
    int64_t total = 0;
    for (int g = 0; g < ng && st == KILN_OK; g++) {
        int64_t start = cnt[g], end = g + 1 < ng ? cnt[g + 1] : np;
        if (start < 0 || end < start || end > np || (end - start) % (g + 1) != 0)
            st = KILN_IMPORT_FAIL(ic, "'ngram_counts' does not describe 'pool_int64s' (%d-grams)",
                                  g + 1);
        else
            total += (end - start) / (g + 1);
    }
    if (st == KILN_OK && total != ni)
        st = KILN_IMPORT_FAIL(ic, "the pool holds %lld n-grams but 'ngram_indexes' has %d entries",
                              (long long)total, ni);
    int64_t mxi = -1;
    for (int i = 0; st == KILN_OK && i < ni; i++) {
        if (idx[i] < 0 || idx[i] > (int64_t)1 << 40)
            st = KILN_IMPORT_FAIL(ic, "'ngram_indexes' has an invalid entry %lld", (long long)idx[i]);
        else if (idx[i] > mxi) mxi = idx[i];
    }
    at->out_size = mxi + 1;
    int64_t d;
    if (st == KILN_OK) {
        d = np;
        st = kiln_import_set_const_input(ic, 1, KILN_DTYPE_INT64, 1, &d, pool);
    }
    if (st == KILN_OK) {
        d = ng;
        st = kiln_import_set_const_input(ic, 2, KILN_DTYPE_INT64, 1, &d, cnt);
    }
    if (st == KILN_OK) {
        d = ni;
        st = kiln_import_set_const_input(ic, 3, KILN_DTYPE_INT64, 1, &d, idx);
    }
    if (st == KILN_OK && nw > 0) {
        d = nw;
        st = kiln_import_set_const_input(ic, 4, KILN_DTYPE_FLOAT32, 1, &d, w);
    }
    kiln__free(buf);
    kiln__free(w);
    return st;
}

/* mode a TFIDF_*; 1 <= min_gram_length <= max_gram_length <= 64;
 * max_skip_count >= 0; out_size (1 + the largest n-gram index) in 0..2^40+1 */
static kiln_status tfidf_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_tfidf_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "mode", at->mode, TFIDF_TF, TFIDF_TFIDF));
    if (at->min_gram < 1 || at->max_gram < at->min_gram || at->max_gram > 64 || at->max_skip < 0)
        return KILN_VALIDATE_FAIL(op, node, "invalid min_gram_length %d / max_gram_length %d / "
                                  "max_skip_count %d", (int)at->min_gram, (int)at->max_gram,
                                  (int)at->max_skip);
    return kiln__check_attr(op, node, "ngram_indexes (largest + 1)", at->out_size, 0,
                            ((int64_t)1 << 40) + 1);
}

static kiln_status tfidf_infer(const kiln_infer_args *a) {
    const kiln_tfidf_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    const kiln_tinfo *x = a->in[0];
    kiln_tinfo *y = a->out[0];
    if (x->dtype != KILN_DTYPE_INT32 && x->dtype != KILN_DTYPE_INT64)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (TfIdfVectorizer): input dtype %s is not "
                         "supported", nm, kiln_dtype_name(x->dtype));
    if (a->n_in < 4 || !a->in[1] || !a->in[2] || !a->in[3])
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (TfIdfVectorizer): pool inputs are missing", nm);
    for (int i = 1; i < a->n_in && i < 5; i++)
        if (a->in[i] && a->in[i]->dtype != (i < 4 ? KILN_DTYPE_INT64 : KILN_DTYPE_FLOAT32))
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (TfIdfVectorizer): input %d is %s", nm, i,
                             kiln_dtype_name(a->in[i]->dtype));
    y->dtype = KILN_DTYPE_FLOAT32;
    y->data = NULL;
    if (x->rank < 0) {
        y->rank = -1;
        return KILN_OK;
    }
    if (x->rank != 1 && x->rank != 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (TfIdfVectorizer): input must be [C] or [N, C], "
                         "got rank %d", nm, x->rank);
    y->rank = x->rank;
    if (x->rank == 2) y->dims[0] = x->dims[0];
    y->dims[x->rank - 1] = at->out_size;
    return KILN_OK;
}

typedef struct tfidf_gram {
    const int64_t *tok; /* n tokens in the pool */
    int64_t slot;
    int64_t pos;        /* position in pool order (for weights) */
} tfidf_gram;

typedef struct tfidf_sorted {
    tfidf_gram *g;
    int64_t count;
    int n;
} tfidf_sorted;

static int cmp_tokens(const int64_t *a, const int64_t *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return 0;
}

/* Sorts the pool n-grams of one length by tokens (shell sort: qsort's
 * comparator could not know n). */
static void sort_grams(tfidf_gram *g, int64_t count, int n) {
    for (int64_t gap = count / 2; gap > 0; gap /= 2)
        for (int64_t i = gap; i < count; i++) {
            tfidf_gram t = g[i];
            int64_t j = i;
            for (; j >= gap && cmp_tokens(g[j - gap].tok, t.tok, n) > 0; j -= gap) g[j] = g[j - gap];
            g[j] = t;
        }
}

static const tfidf_gram *find_gram(const tfidf_sorted *s, const int64_t *key) {
    int64_t lo = 0, hi = s->count;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = cmp_tokens(s->g[mid].tok, key, s->n);
        if (c == 0) return &s->g[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

static kiln_status tfidf_cpu(const kiln_kernel_args *a) {
    const kiln_tfidf_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    const kiln_tensor *x = a->in[0], *pool = a->in[1], *cnt = a->in[2], *idx = a->in[3];
    const kiln_tensor *w = a->n_in > 4 ? a->in[4] : NULL;
    kiln_tensor *y = a->out[0];
    int64_t np = kiln__tensor_numel(pool), ng = kiln__tensor_numel(cnt), ni = kiln__tensor_numel(idx);
    const int64_t *P = pool->data, *G = cnt->data, *I = idx->data;
    int64_t rows = x->rank == 2 ? x->dims[0] : 1, C = x->dims[x->rank - 1];
    int64_t S = at->out_size;
    float *Y = y->data;
    for (int64_t i = 0; i < rows * S; i++) Y[i] = 0.f;
    if (C == 0 || rows == 0) return KILN_OK;
    int maxn = at->max_gram < ng ? at->max_gram : (int)ng;
    tfidf_gram *grams = kiln__malloc((size_t)(ni > 0 ? ni : 1) * sizeof *grams);
    int64_t *key = kiln__malloc((size_t)(maxn + 1) * sizeof(int64_t));
    float *counts = kiln__malloc((size_t)(ni > 0 ? ni : 1) * sizeof(float));
    if (!grams || !key || !counts) {
        kiln__free(grams);
        kiln__free(key);
        kiln__free(counts);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (TfIdfVectorizer): out of memory", nm);
    }
    /* the pool tensors are the importer's, checked there; an engine file
     * could hold others: sections must stay inside the pool, weights cover
     * every n-gram */
    kiln_status bad = KILN_OK;
    for (int g = 0; g < ng && bad == KILN_OK; g++) {
        int64_t start = G[g], end = g + 1 < ng ? G[g + 1] : np;
        if (start < 0 || end < start || end > np)
            bad = KILN_FAIL(KILN_ERR_MODEL, "node '%s' (TfIdfVectorizer): 'ngram_counts' does not "
                            "describe 'pool_int64s'", nm);
    }
    if (bad == KILN_OK && w && kiln__tensor_numel(w) < ni)
        bad = KILN_FAIL(KILN_ERR_MODEL, "node '%s' (TfIdfVectorizer): 'weights' has fewer entries "
                        "than 'ngram_indexes'", nm);
    if (bad != KILN_OK) {
        kiln__free(grams);
        kiln__free(key);
        kiln__free(counts);
        return bad;
    }
    tfidf_sorted secs[64];
    memset(secs, 0, sizeof secs);
    int64_t k = 0;
    for (int g = 0; g < ng && g < 64; g++) {
        int64_t start = G[g], end = g + 1 < ng ? G[g + 1] : np;
        secs[g].g = grams + k;
        secs[g].n = g + 1;
        secs[g].count = 0;
        for (int64_t p = start; p + g + 1 <= end && k < ni; p += g + 1) {
            grams[k].tok = P + p;
            grams[k].slot = I[k];
            grams[k].pos = k;
            k++;
            secs[g].count++;
        }
        sort_grams(secs[g].g, secs[g].count, g + 1);
    }
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < ni; i++) counts[i] = 0.f;
        for (int n = at->min_gram; n <= maxn; n++) {
            const tfidf_sorted *s = &secs[n - 1];
            if (s->count == 0) continue;
            int64_t skips = n == 1 ? 0 : at->max_skip;
            for (int64_t sk = 0; sk <= skips; sk++)
                for (int64_t st = 0; st + (int64_t)(n - 1) * (sk + 1) < C; st++) {
                    for (int q = 0; q < n; q++)
                        key[q] = kiln__load_i64(x->dtype, x->data, r * C + st + q * (sk + 1));
                    const tfidf_gram *f = find_gram(s, key);
                    if (f) counts[f->pos] += 1.f;
                }
        }
        for (int64_t i = 0; i < ni; i++) {
            if (counts[i] == 0.f) continue;
            float wt = w ? ((const float *)w->data)[i] : 1.f;
            float v = at->mode == TFIDF_TF ? counts[i] : at->mode == TFIDF_IDF ? wt : counts[i] * wt;
            if (I[i] >= 0 && I[i] < S) Y[r * S + I[i]] = v;
        }
    }
    kiln__free(grams);
    kiln__free(key);
    kiln__free(counts);
    return KILN_OK;
}

const kiln_op_def kiln_op_TfIdfVectorizer = {
    .name = "TfIdfVectorizer", .domain = "", .since = 9,
    .min_inputs = 1, .max_inputs = 5, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_tfidf_attrs),
    .import = tfidf_import, .validate = tfidf_validate, .infer = tfidf_infer, .cpu = tfidf_cpu,
};
