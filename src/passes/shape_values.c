/* shape_values.c -- symbolic dims through shapes computed at run time.
 *
 * Models exported with dynamic axes compute the shapes of Expand, Reshape,
 * ConstantOfShape and Range at run time from Shape(x): torch's
 * x.expand(B, -1, -1) is Expand(x, Where(Equal([B, -1, -1], -1), 1, [B, -1,
 * -1])) with B = Gather(Shape(y), 0). Shape inference sees no constant
 * there and leaves those dims unknown, and everything after them loses its
 * symbolic dims (the attention patterns then do not match). This pass
 * follows the small int64 vectors made from Shape entries (Gather, Slice,
 * Unsqueeze, Squeeze, Reshape, Cast, Concat, Equal, Where, Add, Mul), each
 * entry a known value, a symbolic dim or unknown, and gives the outputs of
 * the nodes they shape the dims that are the same for every input shape.
 * Nodes are inferred again in order as it goes, so the dims flow on. */
#include "ir/ir.h"
#include "ops/tensor_internal.h"
#include "passes/pattern.h"

#include <string.h>

enum { SV_UNKNOWN, SV_KNOWN, SV_SYM };

typedef struct sent {
    int64_t v; /* SV_KNOWN: the value; SV_SYM: KILN_DIM_SYM(k) */
    int kind;
} sent;

typedef struct sval {
    int n; /* entries; -1: not a shape vector followed here */
    sent e[KILN_MAX_RANK];
} sval;

/* The entries of value v, or NULL: a small int64 constant (rank <= 1), or a
 * vector computed above. */
static const sval *sval_of(const kiln_graph *g, sval *sv, int v) {
    if (v < 0) return NULL;
    const kiln_value *x = &g->values[v];
    if (sv[v].n < 0 && (x->flags & KILN_VALUE_CONST) && x->data && x->info.rank >= 0 && x->info.rank <= 1 &&
        (x->info.dtype == KILN_DTYPE_INT64 || x->info.dtype == KILN_DTYPE_INT32 ||
         x->info.dtype == KILN_DTYPE_BOOL)) {
        int64_t n = kiln__numel(x->info.rank, x->info.dims);
        if (n < 0 || n > KILN_MAX_RANK) return NULL;
        sv[v].n = (int)n;
        for (int i = 0; i < n; i++)
            sv[v].e[i] = (sent){.v = kiln__load_i64(x->info.dtype, x->data, i), .kind = SV_KNOWN};
    }
    return sv[v].n >= 0 ? &sv[v] : NULL;
}

/* A dim of a tensor as an entry. */
static sent dim_entry(int64_t d) {
    if (d >= 0) return (sent){.v = d, .kind = SV_KNOWN};
    if (KILN_DIM_IS_SYM(d)) return (sent){.v = d, .kind = SV_SYM};
    return (sent){.kind = SV_UNKNOWN};
}

static bool same(sent a, sent b) { return a.kind != SV_UNKNOWN && a.kind == b.kind && a.v == b.v; }

/* Elementwise a op b for entries (dims are never negative: a symbolic dim
 * differs from a negative value). */
static sent binary(int op, sent a, sent b) {
    sent u = {.kind = SV_UNKNOWN};
    bool ka = a.kind == SV_KNOWN, kb = b.kind == SV_KNOWN;
    switch (op) {
    case KILN_OP_Equal:
        if (ka && kb) return (sent){.v = a.v == b.v, .kind = SV_KNOWN};
        if (same(a, b)) return (sent){.v = 1, .kind = SV_KNOWN};
        if ((a.kind == SV_SYM && kb && b.v < 0) || (b.kind == SV_SYM && ka && a.v < 0))
            return (sent){.v = 0, .kind = SV_KNOWN};
        return u;
    case KILN_OP_Mul:
        if (ka && kb) return (sent){.v = a.v * b.v, .kind = SV_KNOWN};
        if (ka && a.v == 1) return b;
        if (kb && b.v == 1) return a;
        return u;
    case KILN_OP_Add:
        if (ka && kb) return (sent){.v = a.v + b.v, .kind = SV_KNOWN};
        if (ka && a.v == 0) return b;
        if (kb && b.v == 0) return a;
        return u;
    default:
        return u;
    }
}

/* Output 0's entries for node n, when it computes a shape vector from
 * followed ones. */
static void follow(const kiln_graph *g, sval *sv, const kiln_node *n) {
    if (n->n_out < 1 || n->out[0] < 0) return;
    const kiln_tinfo *oi = &g->values[n->out[0]].info;
    if (oi->rank < 0 || oi->rank > 1 || (oi->dtype != KILN_DTYPE_INT64 && oi->dtype != KILN_DTYPE_BOOL)) return;
    sval r = {.n = -1};
    const sval *a = n->n_in > 0 ? sval_of(g, sv, n->in[0]) : NULL;
    switch (n->op_id) {
    case KILN_OP_Shape: {
        int b, e;
        if (!kiln__pat_shape_range(g, (int)(n - g->nodes), &b, &e) || e - b > KILN_MAX_RANK) return;
        const kiln_tinfo *xi = &g->values[n->in[0]].info;
        r.n = e - b;
        for (int i = b; i < e; i++) r.e[i - b] = dim_entry(xi->dims[i]);
        break;
    }
    case KILN_OP_Gather: {
        const sval *ix = sval_of(g, sv, n->in[1]);
        if (!a || !ix || ((const kiln_axis_attrs *)n->attrs)->axis != 0) return;
        r.n = ix->n;
        for (int i = 0; i < ix->n; i++) {
            int64_t k = ix->e[i].v;
            if (ix->e[i].kind != SV_KNOWN || k < -a->n || k >= a->n) return;
            r.e[i] = a->e[k < 0 ? k + a->n : k];
        }
        break;
    }
    case KILN_OP_Slice: {
        const sval *st = sval_of(g, sv, n->in[1]), *en = sval_of(g, sv, n->in[2]);
        const sval *ax = n->n_in > 3 ? sval_of(g, sv, n->in[3]) : NULL, *sp = n->n_in > 4 ? sval_of(g, sv, n->in[4]) : NULL;
        if (!a || !st || !en || st->n != 1 || en->n != 1 || st->e[0].kind != SV_KNOWN || en->e[0].kind != SV_KNOWN)
            return;
        if ((n->n_in > 3 && n->in[3] >= 0 && (!ax || ax->n != 1 || ax->e[0].kind != SV_KNOWN ||
                                              (ax->e[0].v != 0 && ax->e[0].v != -1))) ||
            (n->n_in > 4 && n->in[4] >= 0 && (!sp || sp->n != 1 || sp->e[0].kind != SV_KNOWN || sp->e[0].v != 1)))
            return;
        int64_t s = st->e[0].v, t = en->e[0].v;
        if (s < 0) s += a->n;
        if (t < 0) t += a->n;
        s = s < 0 ? 0 : s > a->n ? a->n : s;
        t = t < s ? s : t > a->n ? a->n : t;
        r.n = (int)(t - s);
        for (int64_t i = s; i < t; i++) r.e[i - s] = a->e[i];
        break;
    }
    case KILN_OP_Unsqueeze:
    case KILN_OP_Squeeze:
    case KILN_OP_Reshape:
    case KILN_OP_Identity:
    case KILN_OP_Cast:
        if (!a || kiln__numel(oi->rank, oi->dims) != a->n) return;
        if (n->op_id == KILN_OP_Cast && oi->dtype != g->values[n->in[0]].info.dtype &&
            !(oi->dtype == KILN_DTYPE_INT64 && g->values[n->in[0]].info.dtype == KILN_DTYPE_INT32))
            return;
        r = *a;
        break;
    case KILN_OP_Concat:
        r.n = 0;
        for (int i = 0; i < n->n_in; i++) {
            const sval *p = sval_of(g, sv, n->in[i]);
            if (!p || r.n + p->n > KILN_MAX_RANK) return;
            memcpy(&r.e[r.n], p->e, sizeof(sent) * (size_t)p->n);
            r.n += p->n;
        }
        break;
    case KILN_OP_Equal:
    case KILN_OP_Mul:
    case KILN_OP_Add:
    case KILN_OP_Where: {
        int k = n->op_id == KILN_OP_Where ? 3 : 2;
        const sval *in[3] = {0};
        r.n = 1;
        for (int i = 0; i < k; i++) {
            if (n->n_in <= i || !(in[i] = sval_of(g, sv, n->in[i]))) return;
            if (in[i]->n != 1 && r.n != 1 && in[i]->n != r.n) return;
            if (in[i]->n != 1) r.n = in[i]->n;
        }
        for (int j = 0; j < r.n; j++) {
            sent x[3];
            for (int i = 0; i < k; i++) x[i] = in[i]->e[in[i]->n == 1 ? 0 : j];
            if (n->op_id != KILN_OP_Where)
                r.e[j] = binary(n->op_id, x[0], x[1]);
            else if (x[0].kind == SV_KNOWN)
                r.e[j] = x[0].v ? x[1] : x[2];
            else
                r.e[j] = same(x[1], x[2]) ? x[1] : (sent){.kind = SV_UNKNOWN};
        }
        break;
    }
    default:
        return;
    }
    if (r.n > KILN_MAX_RANK || r.n != kiln__numel(oi->rank, oi->dims)) return;
    sv[n->out[0]] = r;
}

/* The dim an entry gives a result: a known value >= 0 or a symbolic dim,
 * else KILN_DIM_UNKNOWN. */
static int64_t entry_dim(sent e) {
    return e.kind == SV_SYM || (e.kind == SV_KNOWN && e.v >= 0) ? e.v : KILN_DIM_UNKNOWN;
}

/* Reshape(x, s) (allowzero 0) dims from entries: 0 copies x's dim, -1 is
 * what is left of x's element count, where x's and the others' symbolic
 * dims cancel. */
static void reshape_dims(const kiln_tinfo *xi, const sval *s, int64_t *d) {
    int minus = -1;
    for (int i = 0; i < s->n; i++) {
        d[i] = entry_dim(s->e[i]);
        if (s->e[i].kind == SV_KNOWN && s->e[i].v == 0) d[i] = i < xi->rank ? xi->dims[i] : KILN_DIM_UNKNOWN;
        if (s->e[i].kind == SV_KNOWN && s->e[i].v == -1) minus = i;
    }
    if (minus < 0) return;
    /* x's dims as known product and symbols, less the other entries' */
    int64_t syms[KILN_MAX_RANK], kx = 1, ko = 1;
    int ns = 0;
    for (int i = 0; i < xi->rank; i++) {
        if (xi->dims[i] >= 0)
            kx *= xi->dims[i];
        else if (KILN_DIM_IS_SYM(xi->dims[i]))
            syms[ns++] = xi->dims[i];
        else
            return;
    }
    for (int i = 0; i < s->n; i++) {
        if (i == minus) continue;
        if (d[i] >= 0) {
            ko *= d[i];
            continue;
        }
        if (!KILN_DIM_IS_SYM(d[i])) return;
        int k = 0;
        while (k < ns && syms[k] != d[i]) k++;
        if (k == ns) return;
        syms[k] = syms[--ns];
    }
    if (ns == 0 && ko > 0 && kx % ko == 0)
        d[minus] = kx / ko;
    else if (ns == 1 && ko == kx)
        d[minus] = syms[0];
}

/* Gives node n's output dims that its followed shape input determines,
 * where inference left them unknown. */
static void refine(kiln_graph *g, sval *sv, const kiln_node *n) {
    if (n->n_out < 1 || n->out[0] < 0 || (g->values[n->out[0]].flags & KILN_VALUE_CONST)) return;
    kiln_tinfo *oi = &g->values[n->out[0]].info;
    int64_t d[KILN_MAX_RANK];
    const sval *s;
    if (n->op_id == KILN_OP_Expand && n->n_in >= 2 && (s = sval_of(g, sv, n->in[1]))) {
        const kiln_tinfo *xi = &g->values[n->in[0]].info;
        if (xi->rank < 0 || oi->rank != (s->n > xi->rank ? s->n : xi->rank)) return;
        for (int i = 0; i < oi->rank; i++) {
            int ks = i - (oi->rank - s->n), kx = i - (oi->rank - xi->rank);
            sent e = ks >= 0 ? s->e[ks] : (sent){.v = 1, .kind = SV_KNOWN};
            int64_t x = kx >= 0 ? xi->dims[kx] : 1;
            if (e.kind == SV_KNOWN && e.v == 1)
                d[i] = x; /* the input's dim, whatever it is */
            else if (x == 1)
                d[i] = entry_dim(e);
            else if (x >= 0 || same(e, dim_entry(x)))
                d[i] = x; /* a symbolic e of 1 would leave x too */
            else
                d[i] = KILN_DIM_UNKNOWN; /* x unknown or another symbol: either may be 1 */
        }
    } else if (n->op_id == KILN_OP_Reshape && n->n_in >= 2 && (s = sval_of(g, sv, n->in[1])) &&
               !((const kiln_reshape_attrs *)n->attrs)->allowzero && s->n == oi->rank) {
        reshape_dims(&g->values[n->in[0]].info, s, d);
    } else if (n->op_id == KILN_OP_ConstantOfShape && (s = sval_of(g, sv, n->in[0])) && s->n == oi->rank) {
        for (int i = 0; i < s->n; i++) d[i] = entry_dim(s->e[i]);
    } else if (n->op_id == KILN_OP_Range && oi->rank == 1) {
        /* Range(0, limit, 1): limit elements */
        const sval *st = sval_of(g, sv, n->in[0]), *lim = sval_of(g, sv, n->in[1]), *dl = sval_of(g, sv, n->in[2]);
        if (!st || !lim || !dl || st->n != 1 || lim->n != 1 || dl->n != 1 || !same(st->e[0], (sent){0, SV_KNOWN}) ||
            !same(dl->e[0], (sent){1, SV_KNOWN}))
            return;
        d[0] = entry_dim(lim->e[0]);
    } else {
        return;
    }
    for (int i = 0; i < oi->rank; i++)
        if (oi->dims[i] == KILN_DIM_UNKNOWN) oi->dims[i] = d[i];
}

kiln_status kiln__pass_shape_values(kiln_graph *g) {
    sval *sv = kiln__calloc((size_t)g->n_values + 1, sizeof *sv);
    if (!sv) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (shape values)");
    for (int v = 0; v < g->n_values; v++) sv[v].n = -1;
    kiln__graph_link(g);
    kiln_tinfo outs[KILN_CALL_MAX];
    for (int ni = 0; ni < g->n_nodes; ni++) {
        kiln_node *n = &g->nodes[ni];
        if (n->dead) continue;
        /* again, over the dims given above */
        if (kiln__graph_infer_node(g, ni, false, outs) == KILN_OK) {
            for (int k = 0; k < n->n_out; k++)
                if (n->out[k] >= 0 && !(g->values[n->out[k]].flags & KILN_VALUE_CONST))
                    kiln__tinfo_merge(&g->values[n->out[k]].info, &outs[k]);
        } else {
            kiln__clear_error(); /* the inference pass after this reports it */
        }
        follow(g, sv, n);
        refine(g, sv, n);
    }
    kiln__free(sv);
    return KILN_OK;
}
