/* nn_einsum.c -- Einsum.
 *
 * The equation is kept verbatim in the attributes and parsed when shapes are
 * known. Every subscript letter (and every dimension an ellipsis stands for)
 * becomes a label. Each operand then maps labels to element strides (a
 * repeated letter adds its strides: that is the diagonal; a size-1 dimension
 * broadcast against a larger one gets stride 0). The output is computed by
 * a generic loop: for every output element, sum over the labels that are not
 * in the output of the product of the operands' elements. Output elements
 * are spread over the pool. Accumulation is in double for floating types and
 * in 64-bit integers for integer types. The loop structure
 * (kiln__einsum_loops, ops/seq_attrs.h) is shared with the CUDA kernel.
 *
 * Implicit output (no "->"): ellipsis dimensions first, then the letters
 * that appear exactly once, in alphabetical (ASCII) order. */
#include "ops/op.h"
#include "ops/seq_attrs.h"

#include <stdio.h>

#define NODE(a) ((a)->node_name ? (a)->node_name : "?")
#define ES_MAX_EQ KILN_ES_MAX_EQ
#define ES_LETTERS 52
#define ES_MAX_LABELS KILN_ES_MAX_LABELS
#define ES_MAX_OPS KILN_ES_MAX_OPS

static kiln_status es_import(kiln_import_ctx *ic, void *attrs) {
    kiln_einsum_attrs *at = attrs;
    const char *eq = kiln_attr_string(ic, "equation", NULL);
    if (!eq) return KILN_IMPORT_FAIL(ic, "attribute 'equation' is required");
    size_t n = 0;
    for (const char *p = eq; *p; p++) {
        if (*p == ' ') continue;
        if (n + 1 >= ES_MAX_EQ)
            return KILN_IMPORT_FAIL(ic, "equation is longer than %d characters", ES_MAX_EQ - 1);
        at->equation[n++] = *p;
    }
    at->equation[n] = 0;
    if (kiln_import_num_inputs(ic) > ES_MAX_OPS)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Einsum): more than %d operands",
                         kiln_import_node_name(ic), ES_MAX_OPS);
    return KILN_OK;
}

/* The equation is NUL-terminated inside its array (the parser relies on it)
 * and made of the characters an equation has (its grammar is checked with
 * the operand ranks, by the shape rule). */
static kiln_status es_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_einsum_attrs *at = attrs;
    size_t n = 0;
    while (n < ES_MAX_EQ && at->equation[n]) n++;
    if (n == ES_MAX_EQ)
        return KILN_VALIDATE_FAIL(op, node, "equation is not terminated within %d bytes", ES_MAX_EQ);
    for (size_t i = 0; i < n; i++) {
        char c = at->equation[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == ',' ||
              c == '-' || c == '>'))
            return KILN_VALIDATE_FAIL(op, node, "invalid character 0x%02x in equation",
                                      (unsigned)(unsigned char)c);
    }
    return KILN_OK;
}

/* ---- parsing -------------------------------------------------------------- */

typedef struct es_plan {
    int n_ops;
    int rank[ES_MAX_OPS];
    int lab[ES_MAX_OPS][KILN_MAX_RANK]; /* label of each operand dim */
    int n_out;
    int out[ES_MAX_LABELS];             /* output labels */
    int n_labels;                       /* labels in use are marked in used[] */
    bool used[ES_MAX_LABELS];
    int64_t size[ES_MAX_LABELS];        /* KILN_DIM_UNKNOWN if not known */
} es_plan;

static int letter_id(char c) {
    if (c >= 'a' && c <= 'z') return c - 'a';
    if (c >= 'A' && c <= 'Z') return 26 + (c - 'A');
    return -1;
}

/* Parses one term [begin, end) for an operand of rank `rank` (rank < 0: the
 * output term, ellipsis expands to all E ellipsis labels). */
static kiln_status es_term(const char *node, const char *b, const char *e, int rank, int E,
                           int *labels, int *n_labels, int *ell_dims, int max_labels) {
    int n_letters = 0;
    bool ell = false;
    for (const char *p = b; p < e; p++) {
        if (*p == '.') {
            if (ell || e - p < 3 || p[1] != '.' || p[2] != '.')
                return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Einsum): malformed ellipsis in equation", node);
            ell = true;
            p += 2;
        } else if (letter_id(*p) >= 0) {
            n_letters++;
        } else {
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Einsum): invalid character '%c' in equation", node, *p);
        }
    }
    int n_ell = 0;
    if (rank >= 0) {
        if (ell) n_ell = rank - n_letters;
        if ((ell && n_ell < 0) || (!ell && n_letters != rank))
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (Einsum): term '%.*s' has %d subscripts but the operand has rank %d",
                             node, (int)(e - b), b, n_letters, rank);
    } else if (ell) {
        n_ell = E;
    }
    if (n_letters + n_ell > max_labels)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Einsum): too many dimensions in a term", node);
    int k = 0;
    for (const char *p = b; p < e; p++) {
        if (*p == '.') {
            /* operand ellipsis dims are right-aligned among the E global ones */
            for (int i = 0; i < n_ell; i++) labels[k++] = ES_LETTERS + (E - n_ell) + i;
            p += 2;
        } else {
            labels[k++] = letter_id(*p);
        }
    }
    *n_labels = k;
    if (ell_dims) *ell_dims = ell ? n_ell : 0;
    return KILN_OK;
}

/* Builds the plan from the equation and operand shapes (dims may be unknown). */
static kiln_status es_plan_make(const char *node, const char *eq, int n_ops, const int *ranks,
                                const int64_t *const *dims, es_plan *pl) {
    memset(pl, 0, sizeof *pl);
    pl->n_ops = n_ops;
    const char *arrow = strstr(eq, "->");
    const char *lhs_end = arrow ? arrow : eq + strlen(eq);
    /* split operands on commas */
    const char *tb[ES_MAX_OPS], *te[ES_MAX_OPS];
    int nt = 0;
    const char *p = eq;
    for (;;) {
        const char *c = p;
        while (c < lhs_end && *c != ',') c++;
        if (nt >= ES_MAX_OPS)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Einsum): too many operands", node);
        tb[nt] = p;
        te[nt] = c;
        nt++;
        if (c >= lhs_end) break;
        p = c + 1;
    }
    if (nt != n_ops)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Einsum): equation '%s' has %d operand terms but the node has %d inputs",
                         node, eq, nt, n_ops);
    /* E = max ellipsis dims */
    int E = 0;
    for (int i = 0; i < n_ops; i++) {
        int labels[KILN_MAX_RANK], nl, ne;
        KILN_TRY(es_term(node, tb[i], te[i], ranks[i], KILN_MAX_RANK, labels, &nl, &ne, KILN_MAX_RANK));
        if (ne > E) E = ne;
    }
    for (int l = 0; l < ES_MAX_LABELS; l++) pl->size[l] = 1;
    int count[ES_MAX_LABELS] = {0};
    for (int i = 0; i < n_ops; i++) {
        int nl;
        pl->rank[i] = ranks[i];
        KILN_TRY(es_term(node, tb[i], te[i], ranks[i], E, pl->lab[i], &nl, NULL, KILN_MAX_RANK));
        for (int d = 0; d < ranks[i]; d++) {
            int l = pl->lab[i][d];
            pl->used[l] = true;
            count[l]++;
            int64_t v = dims[i][d];
            if (v == 1) continue; /* broadcasts against anything */
            if (v < 0) {
                if (pl->size[l] == 1) pl->size[l] = KILN_DIM_UNKNOWN;
                continue;
            }
            if (pl->size[l] == 1 || pl->size[l] < 0) {
                pl->size[l] = v;
            } else if (pl->size[l] != v) {
                return KILN_FAIL(KILN_ERR_MODEL,
                                 "node '%s' (Einsum): dimension %d of operand %d has size %lld, but "
                                 "the same subscript has size %lld elsewhere",
                                 node, d, i, (long long)v, (long long)pl->size[l]);
            }
        }
    }
    if (arrow) {
        const char *ob = arrow + 2, *oe = eq + strlen(eq);
        KILN_TRY(es_term(node, ob, oe, -1, E, pl->out, &pl->n_out, NULL, ES_MAX_LABELS));
        bool dup[ES_MAX_LABELS] = {false};
        for (int k = 0; k < pl->n_out; k++) {
            int l = pl->out[k];
            if (dup[l])
                return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Einsum): output subscript repeated", node);
            dup[l] = true;
            if (!pl->used[l])
                return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Einsum): output subscript does not appear in any input",
                                 node);
        }
    } else {
        for (int i = 0; i < E; i++) pl->out[pl->n_out++] = ES_LETTERS + i;
        /* ASCII order: uppercase (ids 26..51) before lowercase (0..25) */
        for (int l = 26; l < ES_LETTERS; l++)
            if (count[l] == 1) pl->out[pl->n_out++] = l;
        for (int l = 0; l < 26; l++)
            if (count[l] == 1) pl->out[pl->n_out++] = l;
    }
    if (pl->n_out > KILN_MAX_RANK)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Einsum): output rank %d exceeds %d", node,
                         pl->n_out, KILN_MAX_RANK);
    return KILN_OK;
}

/* ---- infer / cpu ------------------------------------------------------------- */

static bool es_dtype_ok(kiln_dtype t) {
    return kiln__dtype_is_float(t) || kiln__dtype_is_int(t);
}

static kiln_status es_infer(const kiln_infer_args *a) {
    const kiln_einsum_attrs *at = a->attrs;
    kiln_tinfo *y = a->out[0];
    y->dtype = a->in[0]->dtype;
    if (a->n_in > ES_MAX_OPS)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Einsum): more than %d operands", NODE(a), ES_MAX_OPS);
    int ranks[ES_MAX_OPS];
    const int64_t *dims[ES_MAX_OPS];
    for (int i = 0; i < a->n_in; i++) {
        const kiln_tinfo *t = a->in[i];
        if (!t) return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Einsum): input %d is missing", NODE(a), i);
        if (t->dtype != y->dtype)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Einsum): input dtypes differ (%s and %s)", NODE(a),
                             kiln_dtype_name(y->dtype), kiln_dtype_name(t->dtype));
        if (t->rank < 0) {
            y->rank = -1;
            return KILN_OK;
        }
        ranks[i] = t->rank;
        dims[i] = t->dims;
    }
    if (!es_dtype_ok(y->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Einsum): dtype %s is not supported", NODE(a),
                         kiln_dtype_name(y->dtype));
    es_plan pl;
    KILN_TRY(es_plan_make(NODE(a), at->equation, a->n_in, ranks, dims, &pl));
    y->rank = pl.n_out;
    for (int k = 0; k < pl.n_out; k++) y->dims[k] = pl.size[pl.out[k]];
    return KILN_OK;
}

kiln_status kiln__einsum_loops(const char *node, const char *eq, int n_ops, const int *ranks,
                               const int64_t *const *dims, kiln_einsum_loops *l) {
    es_plan *pl = kiln__calloc(1, sizeof *pl);
    if (!pl) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (Einsum): out of memory", node);
    kiln_status st = es_plan_make(node, eq, n_ops, ranks, dims, pl);
    if (st != KILN_OK) {
        kiln__free(pl);
        return st;
    }
    memset(l, 0, sizeof *l);
    l->n_ops = n_ops;
    /* element stride of each operand per label */
    int64_t(*lstr)[ES_MAX_LABELS] = kiln__calloc(ES_MAX_OPS, sizeof *lstr);
    if (!lstr) {
        kiln__free(pl);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (Einsum): out of memory", node);
    }
    for (int i = 0; i < n_ops; i++) {
        int64_t s = 1;
        for (int d = ranks[i] - 1; d >= 0; d--) {
            int lb = pl->lab[i][d];
            if (!(dims[i][d] == 1 && pl->size[lb] != 1)) lstr[i][lb] += s;
            s *= dims[i][d];
        }
    }
    bool in_out[ES_MAX_LABELS] = {false};
    l->n_out = pl->n_out;
    for (int k = 0; k < pl->n_out; k++) {
        int lb = pl->out[k];
        in_out[lb] = true;
        l->out_size[k] = pl->size[lb];
        for (int i = 0; i < n_ops; i++) l->out_str[i][k] = lstr[i][lb];
    }
    for (int lb = 0; lb < ES_MAX_LABELS; lb++) {
        if (!pl->used[lb] || in_out[lb]) continue;
        l->sum_size[l->n_sum] = pl->size[lb];
        for (int i = 0; i < n_ops; i++) l->sum_str[i][l->n_sum] = lstr[i][lb];
        l->n_sum++;
    }
    kiln__free(lstr);
    kiln__free(pl);
    return KILN_OK;
}

typedef struct es_ctx {
    const kiln_einsum_loops *l;
    const kiln_kernel_args *a;
    int64_t n_sum_total;
} es_ctx;

static void es_range(void *vctx, int64_t o0, int64_t o1) {
    const es_ctx *c = vctx;
    const kiln_einsum_loops *l = c->l;
    const kiln_kernel_args *a = c->a;
    kiln_dtype t = a->out[0]->dtype;
    bool fl = kiln__dtype_is_float(t);
    int nops = l->n_ops;
    for (int64_t o = o0; o < o1; o++) {
        /* base offsets from the output index */
        int64_t base[ES_MAX_OPS] = {0};
        int64_t rem = o;
        for (int k = l->n_out - 1; k >= 0; k--) {
            int64_t idx = rem % l->out_size[k];
            rem /= l->out_size[k];
            for (int i = 0; i < nops; i++) base[i] += idx * l->out_str[i][k];
        }
        double facc = 0.0;
        uint64_t iacc = 0;
        int64_t sidx[ES_MAX_LABELS] = {0};
        int64_t off[ES_MAX_OPS];
        for (int i = 0; i < nops; i++) off[i] = base[i];
        for (int64_t s = 0; s < c->n_sum_total; s++) {
            if (fl) {
                double p = 1.0;
                for (int i = 0; i < nops; i++) p *= kiln__load_f64(t, a->in[i]->data, off[i]);
                facc += p;
            } else {
                uint64_t p = 1;
                for (int i = 0; i < nops; i++) p *= (uint64_t)kiln__load_i64(t, a->in[i]->data, off[i]);
                iacc += p;
            }
            for (int k = l->n_sum - 1; k >= 0; k--) {
                for (int i = 0; i < nops; i++) off[i] += l->sum_str[i][k];
                if (++sidx[k] < l->sum_size[k]) break;
                for (int i = 0; i < nops; i++) off[i] -= l->sum_str[i][k] * l->sum_size[k];
                sidx[k] = 0;
            }
        }
        if (fl) kiln__store_f64(t, a->out[0]->data, o, facc);
        else kiln__store_i64(t, a->out[0]->data, o, (int64_t)iacc);
    }
}

static kiln_status es_cpu(const kiln_kernel_args *a) {
    const kiln_einsum_attrs *at = a->attrs;
    int ranks[ES_MAX_OPS];
    const int64_t *dims[ES_MAX_OPS];
    if (a->n_in > ES_MAX_OPS)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Einsum): more than %d operands", NODE(a), ES_MAX_OPS);
    for (int i = 0; i < a->n_in; i++) {
        ranks[i] = a->in[i]->rank;
        dims[i] = a->in[i]->dims;
    }
    kiln_einsum_loops *l = kiln__calloc(1, sizeof *l);
    if (!l) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (Einsum): out of memory", NODE(a));
    kiln_status st = kiln__einsum_loops(NODE(a), at->equation, a->n_in, ranks, dims, l);
    if (st != KILN_OK) goto done;
    es_ctx c = {.l = l, .a = a, .n_sum_total = 1};
    for (int k = 0; k < l->n_sum; k++) c.n_sum_total *= l->sum_size[k];
    int64_t n_out = kiln__tensor_numel(a->out[0]);
    if (n_out > 0) {
        int64_t per = c.n_sum_total * a->n_in;
        kiln__parallel_for(a->pool, n_out, per > 0 ? (16384 + per - 1) / per : n_out, es_range, &c);
    }
done:
    kiln__free(l);
    return st;
}

const kiln_op_def kiln_op_Einsum = {
    .name = "Einsum", .domain = "", .since = 12,
    .min_inputs = 1, .max_inputs = -1, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_einsum_attrs),
    .import = es_import, .validate = es_validate, .infer = es_infer, .cpu = es_cpu,
};
