/* fuse_movement.c -- a chain of data-movement layers from one value merged
 * into one Gather of rows (pass merge_movement):
 *
 *   y = Transpose / Slice / Gather / Concat / views (...(x))   =>
 *   y = Reshape(Gather(Reshape(x, [P, Rx, R]), indices, axis=1), dims of y)
 *
 * where every layer of the chain reads values made by the chain or x, has
 * constant parameters (Slice's starts/ends/axes/steps, Gather's indices)
 * and static shapes, and every value inside the chain is read by the chain
 * alone. Each output element is then a fixed element of x: the pass works
 * out which (walking back through the chain), finds the largest rows of R
 * elements that stay whole (contiguous in y and in x, R-aligned in x) and
 * the leading P blocks (a batch) that the chain maps block to block, and
 * writes the row table of one block as the Gather's constant int64 indices.
 * The Reshapes are views (no kernel); outputs are bit-identical (pure data
 * movement).
 *
 * Made only where the chain had at least two layers that copy (views do not
 * count), the backend runs the Gather, and the index table is small (at
 * most 4096 rows) or its rows hold 16 bytes or more (MV_MIN_ROW_BYTES: a
 * chain moving single elements keeps its layers); a chain that leaves every
 * element where it was becomes one Reshape (a Transpose and its inverse,
 * a Transpose of dims of 1).
 *
 * What it takes: torchvision's Swin has, per shifted block, torch.roll over
 * two axes (two Gathers, kiln__opt_concat_of_slices below) and the
 * window partition's Transpose before the QKV projection, and the window
 * reverse's Transpose and the two inverse rolls after the output
 * projection: each three copies, now one; PatchMerging's strided Slices and
 * their Concat (x[:, 0::2, 0::2], x[:, 1::2, 0::2], ..., cat on channels):
 * seven copies, now one space-to-depth Gather.
 *
 * Runs after the transformer fusions (whose head split/merge and Q/K/V
 * patterns read Transposes and Gathers of their own) and before the norm
 * fusion and the precision pass.
 *
 * Also here, the family's rewrite that runs earlier, inside the transformer
 * pass's layout clean-up (kiln__opt_concat_of_slices, at the end): a Concat
 * of Slices of one axis of one value (torch.roll) into one Gather with a
 * constant index table (axes of at most 2^16 elements). */
#include <stdio.h>
#include <string.h>

#include "passes/pattern.h"

#include "core/core.h"
#include "ops/op.h"
#include "ops/tensor_internal.h"

#define MV_MAX_NODES 32          /* layers in one chain at most */
#define MV_MAX_ROWS (1LL << 24) /* rows of the map at most (worked out at build time) */
#define MV_MAX_TABLE (1LL << 20) /* rows of the Gather's index table at most */
#define MV_SMALL_TABLE 4096      /* a table this small is made whatever its rows' size */
#define MV_MIN_ROW_BYTES 16      /* else a row must hold this much: a chain moving single
                                    elements (a Transpose of the last axis) stays as it is,
                                    as its index table would be as large as its data */

enum { MV_VIEW, MV_TRANSPOSE, MV_SLICE, MV_GATHER, MV_CONCAT };

/* One layer of a chain: what it does, with its parameters normalized. */
typedef struct mv_node {
    int node, kind, axis;
    int perm[KILN_MAX_RANK];                          /* Transpose */
    int64_t start[KILN_MAX_RANK], step[KILN_MAX_RANK]; /* Slice: every axis (whole ones 0, 1) */
    const void *idx;                                  /* Gather: constant indices */
    bool idx32;
    int64_t n_idx, unit; /* unit: the output's rows of `unit` elements move whole (see chain_units) */
} mv_node;

typedef struct chain {
    mv_node n[MV_MAX_NODES];
    int count, x; /* x: the value the chain reads */
} chain;

static const kiln_tinfo *vi(const kiln_graph *g, int v) { return &g->values[v].info; }

static bool fixed(const kiln_tinfo *t) { return t->rank >= 0 && kiln__numel(t->rank, t->dims) >= 0; }

static int64_t gcd64(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Integer constant v (int32 or int64, rank <= 1) into out[cap]; its count, or -1. */
static int const_ints(const kiln_graph *g, int v, int64_t *out, int cap) {
    if (v < 0 || !(g->values[v].flags & KILN_VALUE_CONST)) return -1;
    const kiln_tinfo *t = vi(g, v);
    int64_t n = kiln__numel(t->rank, t->dims);
    if (t->rank > 1 || n < 0 || n > cap) return -1;
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == KILN_DTYPE_INT64) out[i] = ((const int64_t *)g->values[v].data)[i];
        else if (t->dtype == KILN_DTYPE_INT32) out[i] = ((const int32_t *)g->values[v].data)[i];
        else return -1;
    }
    return (int)n;
}

/* Slice node n's starts and steps on every axis of its input (ONNX's
 * clamping); false unless its parameters are constants and give its output. */
static bool slice_params(const kiln_graph *g, const kiln_node *n, mv_node *m) {
    const kiln_tinfo *x = vi(g, n->in[0]), *y = vi(g, n->out[0]);
    int64_t st[KILN_MAX_RANK], en[KILN_MAX_RANK], ax[KILN_MAX_RANK], sp[KILN_MAX_RANK];
    int k = n->n_in > 2 ? const_ints(g, n->in[1], st, KILN_MAX_RANK) : -1;
    if (k < 0 || const_ints(g, n->in[2], en, KILN_MAX_RANK) != k) return false;
    for (int i = 0; i < k; i++) ax[i] = i, sp[i] = 1;
    if (n->n_in > 3 && n->in[3] >= 0 && const_ints(g, n->in[3], ax, KILN_MAX_RANK) != k) return false;
    if (n->n_in > 4 && n->in[4] >= 0 && const_ints(g, n->in[4], sp, KILN_MAX_RANK) != k) return false;
    for (int a = 0; a < x->rank; a++) m->start[a] = 0, m->step[a] = 1;
    bool seen[KILN_MAX_RANK] = {false};
    for (int i = 0; i < k; i++) {
        int64_t a = ax[i] < 0 ? ax[i] + x->rank : ax[i], d = a >= 0 && a < x->rank ? x->dims[a] : 0;
        if (a < 0 || a >= x->rank || seen[a] || sp[i] == 0) return false;
        seen[a] = true;
        int64_t s = st[i] < 0 ? st[i] + d : st[i], e = en[i] < 0 ? en[i] + d : en[i], len;
        /* a step longer than the axis takes one element, as a step of d + 1
         * does: clamped so that no arithmetic below overflows (INT64_MIN) */
        int64_t stp = sp[i] > d + 1 ? d + 1 : sp[i] < -(d + 1) ? -(d + 1) : sp[i];
        if (stp > 0) {
            s = s < 0 ? 0 : s > d ? d : s;
            e = e < 0 ? 0 : e > d ? d : e;
            len = e > s ? (e - s + stp - 1) / stp : 0;
        } else {
            s = s < -1 ? -1 : s > d - 1 ? d - 1 : s;
            e = e < -1 ? -1 : e > d - 1 ? d - 1 : e;
            len = s > e ? (s - e - stp - 1) / -stp : 0;
        }
        if (len != y->dims[a]) return false;
        m->start[a] = s;
        m->step[a] = stp;
    }
    return true;
}

/* Node ni as a layer of a chain: its kind and parameters; false if it is
 * not a data-movement layer with constant parameters and static shapes. */
static bool movement(const kiln_graph *g, int ni, mv_node *m) {
    const kiln_node *n = &g->nodes[ni];
    if (n->dead || n->n_out != 1 || n->n_in < 1 || n->in[0] < 0) return false;
    const kiln_tinfo *x = vi(g, n->in[0]), *y = vi(g, n->out[0]);
    if (!fixed(x) || !fixed(y) || x->dtype != y->dtype) return false;
    memset(m, 0, sizeof *m);
    m->node = ni;
    if (n->op->flags & KILN_OP_FLAG_VIEW) {
        m->kind = MV_VIEW;
        return kiln__numel(x->rank, x->dims) == kiln__numel(y->rank, y->dims);
    }
    switch (n->op_id) {
    case KILN_OP_Transpose: {
        const kiln_transpose_attrs *a = n->attrs;
        if (x->rank != y->rank || (a->n_perm && a->n_perm != x->rank)) return false;
        for (int k = 0; k < x->rank; k++) {
            m->perm[k] = a->n_perm ? a->perm[k] : x->rank - 1 - k;
            if (m->perm[k] < 0 || m->perm[k] >= x->rank || x->dims[m->perm[k]] != y->dims[k]) return false;
        }
        m->kind = MV_TRANSPOSE;
        return true;
    }
    case KILN_OP_Slice:
        m->kind = MV_SLICE;
        return x->rank == y->rank && slice_params(g, n, m);
    case KILN_OP_Gather: {
        int iv = n->n_in > 1 ? n->in[1] : -1;
        if (iv < 0 || !(g->values[iv].flags & KILN_VALUE_CONST)) return false;
        const kiln_tinfo *it = vi(g, iv);
        if (it->dtype != KILN_DTYPE_INT64 && it->dtype != KILN_DTYPE_INT32) return false;
        int a = ((const kiln_axis_attrs *)n->attrs)->axis;
        a = a < 0 ? a + x->rank : a;
        if (a < 0 || a >= x->rank || y->rank != x->rank - 1 + it->rank) return false;
        m->kind = MV_GATHER;
        m->axis = a;
        m->idx = g->values[iv].data;
        m->idx32 = it->dtype == KILN_DTYPE_INT32;
        m->n_idx = kiln__numel(it->rank, it->dims);
        for (int64_t i = 0; i < m->n_idx; i++) {
            int64_t v = m->idx32 ? ((const int32_t *)m->idx)[i] : ((const int64_t *)m->idx)[i];
            if (v < -x->dims[a] || v >= x->dims[a]) return false;
        }
        return true;
    }
    case KILN_OP_Concat: {
        int a = ((const kiln_axis_attrs *)n->attrs)->axis;
        a = a < 0 ? a + y->rank : a;
        if (a < 0 || a >= y->rank) return false;
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] < 0 || !fixed(vi(g, n->in[i])) || vi(g, n->in[i])->rank != y->rank ||
                vi(g, n->in[i])->dtype != y->dtype)
                return false;
        m->kind = MV_CONCAT;
        m->axis = a;
        return true;
    }
    default:
        return false;
    }
}

static int n_data_inputs(const kiln_graph *g, const mv_node *m) {
    return m->kind == MV_CONCAT ? g->nodes[m->node].n_in : 1;
}

/* The chain's entry of the node producing v, or -1 (v made outside). */
static int in_chain(const kiln_graph *g, const chain *c, int v) {
    int p = g->values[v].producer;
    for (int i = 0; p >= 0 && i < c->count; i++)
        if (c->n[i].node == p) return i;
    return -1;
}

/* Grows the chain ending at node root backwards over movement layers whose
 * output the chain alone reads; sorts it by node index and sets c->x. False
 * unless the chain reads exactly one value from outside. */
static bool grow_chain(const kiln_graph *g, int root, chain *c) {
    c->count = 0;
    if (!movement(g, root, &c->n[0])) return false;
    c->count = 1;
    for (bool grew = true; grew && c->count < MV_MAX_NODES;) {
        grew = false;
        for (int i = 0; i < c->count && !grew; i++) {
            const kiln_node *n = &g->nodes[c->n[i].node];
            for (int k = 0; k < n_data_inputs(g, &c->n[i]) && !grew; k++) {
                int v = n->in[k], p = g->values[v].producer;
                if (p < 0 || in_chain(g, c, v) >= 0 || kiln__graph_is_output(g, v)) continue;
                int reads = 0; /* every live read of v must be a chain layer's data input */
                for (int j = 0; j < c->count; j++) {
                    const kiln_node *cn = &g->nodes[c->n[j].node];
                    for (int q = 0; q < cn->n_in; q++) reads += cn->in[q] == v;
                }
                if (reads != g->values[v].n_uses || !movement(g, p, &c->n[c->count])) continue;
                c->count++;
                grew = true;
            }
        }
    }
    for (int i = 1; i < c->count; i++) /* topological order: by node index */
        for (int j = i; j > 0 && c->n[j - 1].node > c->n[j].node; j--) {
            mv_node t = c->n[j];
            c->n[j] = c->n[j - 1];
            c->n[j - 1] = t;
        }
    c->x = -1;
    for (int i = 0; i < c->count; i++) {
        const kiln_node *n = &g->nodes[c->n[i].node];
        for (int k = 0; k < n_data_inputs(g, &c->n[i]); k++) {
            int v = n->in[k];
            if (in_chain(g, c, v) >= 0) continue;
            if (c->x >= 0 && c->x != v) return false;
            c->x = v;
        }
    }
    return c->x >= 0;
}

/* Each layer's unit: its output is rows of `unit` elements, each a
 * contiguous, unit-aligned range of x (rows move whole through the chain). */
static void chain_units(const kiln_graph *g, chain *c) {
    for (int i = 0; i < c->count; i++) {
        mv_node *m = &c->n[i];
        const kiln_node *n = &g->nodes[m->node];
        const kiln_tinfo *x = vi(g, n->in[0]), *y = vi(g, n->out[0]);
        int64_t u = 0, d = 1; /* d: the trailing block the layer keeps whole */
        for (int k = 0; k < n_data_inputs(g, m); k++) {
            int e = in_chain(g, c, n->in[k]);
            u = gcd64(u, e >= 0 ? c->n[e].unit : kiln__numel(vi(g, n->in[k])->rank, vi(g, n->in[k])->dims));
        }
        switch (m->kind) {
        case MV_VIEW: d = u; break;
        case MV_TRANSPOSE: {
            int t = x->rank;
            while (t > 0 && m->perm[t - 1] == t - 1) t--;
            for (int k = t; k < x->rank; k++) d *= x->dims[k];
            break;
        }
        case MV_SLICE: {
            int t = x->rank; /* after the last axis the Slice cuts */
            while (t > 0 && m->start[t - 1] == 0 && m->step[t - 1] == 1 && y->dims[t - 1] == x->dims[t - 1]) t--;
            for (int k = t; k < x->rank; k++) d *= x->dims[k];
            break;
        }
        case MV_GATHER:
            for (int k = m->axis + 1; k < x->rank; k++) d *= x->dims[k];
            break;
        default: /* Concat */
            for (int k = m->axis + 1; k < y->rank; k++) d *= y->dims[k];
        }
        m->unit = gcd64(u, d);
        if (m->unit <= 0) m->unit = 1; /* (empty tensors: one element a row) */
    }
}

/* Flat index of element i of value v in x, walking back through the chain. */
static int64_t source_of(const kiln_graph *g, const chain *c, int v, int64_t i) {
    int e;
    while ((e = in_chain(g, c, v)) >= 0) {
        const mv_node *m = &c->n[e];
        const kiln_node *n = &g->nodes[m->node];
        const kiln_tinfo *x = vi(g, n->in[0]), *y = vi(g, n->out[0]);
        int64_t co[KILN_MAX_RANK + KILN_MAX_RANK], ci[KILN_MAX_RANK] = {0};
        int64_t rem = i;
        for (int k = y->rank - 1; k >= 0; k--) {
            co[k] = y->dims[k] ? rem % y->dims[k] : 0;
            rem = y->dims[k] ? rem / y->dims[k] : 0;
        }
        int from = n->in[0];
        switch (m->kind) {
        case MV_VIEW: v = from; continue;
        case MV_TRANSPOSE:
            for (int k = 0; k < y->rank; k++) ci[m->perm[k]] = co[k];
            break;
        case MV_SLICE:
            for (int k = 0; k < y->rank; k++) ci[k] = m->start[k] + co[k] * m->step[k];
            break;
        case MV_GATHER: {
            const kiln_tinfo *it = vi(g, n->in[1]);
            int a = m->axis, q = 0;
            int64_t j = 0;
            for (int k = 0; k < a; k++) ci[k] = co[k];
            for (int k = 0; k < it->rank; k++) j = j * it->dims[k] + co[a + k];
            q = a + it->rank;
            int64_t t = m->idx32 ? ((const int32_t *)m->idx)[j] : ((const int64_t *)m->idx)[j];
            ci[a] = t < 0 ? t + x->dims[a] : t;
            for (int k = a + 1; k < x->rank; k++) ci[k] = co[q + k - a - 1];
            break;
        }
        default: { /* Concat: find the input */
            int k = 0;
            while (k + 1 < n->n_in && co[m->axis] >= vi(g, n->in[k])->dims[m->axis]) {
                co[m->axis] -= vi(g, n->in[k])->dims[m->axis];
                k++;
            }
            from = n->in[k];
            x = vi(g, from);
            for (int a = 0; a < y->rank; a++) ci[a] = co[a];
        }
        }
        i = 0;
        for (int k = 0; k < x->rank; k++) i = i * x->dims[k] + ci[k];
        v = from;
    }
    return i;
}

/* Makes value (a copy of proto's info with these dims) and returns it. */
static kiln_status new_value(kiln_graph *g, int proto, int rank, const int64_t *dims, int *out) {
    kiln_tinfo t = *vi(g, proto);
    KILN_TRY(kiln__graph_add_value(g, NULL, out));
    t.data = NULL;
    t.rank = rank;
    for (int k = 0; k < rank; k++) t.dims[k] = dims[k];
    g->values[*out].info = t;
    return KILN_OK;
}

/* The name of a node the pass adds for the chain writing value y: "<y>/kiln_<what>". */
static void added_name(const kiln_graph *g, int y, const char *what, char *buf, size_t size) {
    snprintf(buf, size, "%.200s/kiln_%s", g->values[y].name ? g->values[y].name : "movement", what);
}

/* Reshape of value `from` to value `to`'s dims: node *node replaced, or a
 * new node (*node < 0 on entry) named after y; the chain's nodes src its sources. */
static kiln_status add_reshape(kiln_graph *g, int from, int to, int y, const int *src, int n_src, int *node) {
    const kiln_tinfo *t = vi(g, to);
    int64_t dims[KILN_MAX_RANK], rank = t->rank;
    for (int k = 0; k < t->rank; k++) dims[k] = t->dims[k];
    int in[2] = {from, -1};
    KILN_TRY(kiln__graph_add_const(g, "kiln_movement_shape", KILN_DTYPE_INT64, 1, &rank, dims, &in[1]));
    kiln_reshape_attrs ra = {.allowzero = 0};
    if (*node >= 0) return kiln__pat_replace(g, *node, KILN_OP_Reshape, 2, in, 1, &to, &ra, src, n_src);
    char name[240];
    added_name(g, y, "rows_in", name, sizeof name);
    KILN_TRY(kiln__graph_add_node(g, KILN_OP_Reshape, name, 2, in, 1, &to, &ra, node));
    return kiln__node_merge_sources(g, *node, src, n_src);
}

/* Where the pass's new nodes go: node pl->n0 + j (added by this pass, in
 * creation order) is placed after node after[j] of the graph as it was,
 * all at once when the pass ends (moving every node for each chain made a
 * model of n chains n^2, issue 20). */
typedef struct placements {
    int n0;
    int *after, cap;
} placements;

/* Rewrites the chain ending at node root (see the file's comment). */
static kiln_status merge_chain(kiln_graph *g, const kiln_optimize_opts *o, int root, placements *pl) {
    chain c;
    if (!grow_chain(g, root, &c) || c.count < 2) return KILN_OK;
    int copies = 0;
    for (int i = 0; i < c.count; i++) copies += c.n[i].kind != MV_VIEW;
    int x = c.x, y = g->nodes[root].out[0];
    int64_t nx = kiln__numel(vi(g, x)->rank, vi(g, x)->dims), ny = kiln__numel(vi(g, y)->rank, vi(g, y)->dims);
    if (copies < 1 || nx <= 0 || ny <= 0 || (g->values[x].flags & KILN_VALUE_CONST)) return KILN_OK;
    chain_units(g, &c);
    int64_t u = c.n[c.count - 1].unit, rows = ny / u, xrows = nx / u;
    if (rows > MV_MAX_ROWS) return KILN_OK;
    int64_t *map = kiln__malloc(sizeof(int64_t) * (size_t)rows);
    if (!map) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (merge_movement)");
    bool ident = nx == ny;
    for (int64_t r = 0; r < rows; r++) {
        map[r] = source_of(g, &c, y, r * u) / u;
        ident = ident && map[r] == r;
    }
    kiln_status st = KILN_OK;
    bool made = false;
    int src[MV_MAX_NODES];
    for (int i = 0; i < c.count; i++) src[i] = c.n[i].node;
    if (ident) { /* the chain leaves every element where it was: one view */
        int node = root;
        st = add_reshape(g, x, y, y, src, c.count, &node);
        made = true;
        goto done;
    }
    if (copies < 2) goto done;
    /* rows of m units whole and m-aligned in x */
    int64_t m = rows;
    for (; m > 1; m--) {
        if (rows % m || xrows % m) continue;
        bool ok = true;
        for (int64_t r = 0; r < rows && ok; r++) ok = r % m ? map[r] == map[r - 1] + 1 : map[r] % m == 0;
        if (ok) break;
    }
    /* the largest P: P blocks of y read P blocks of x in the same way (a batch) */
    int64_t P = 1;
    for (int64_t p = gcd64(rows / m, xrows / m); p > 1 && P == 1; p--) {
        if ((rows / m) % p || (xrows / m) % p) continue;
        int64_t s = rows / p, sx = xrows / p;
        bool ok = true;
        for (int64_t r = 0; r < rows && ok; r++) ok = map[r] - (r / s) * sx == map[r % s] && map[r % s] < sx;
        if (ok) P = p;
    }
    int64_t R = u * m, n_idx = rows / m / P, *idx = map; /* (reused in place) */
    if (n_idx > MV_MAX_TABLE ||
        (n_idx > MV_SMALL_TABLE && (uint64_t)R * kiln_dtype_size(vi(g, x)->dtype) < MV_MIN_ROW_BYTES))
        goto done;
    for (int64_t r = 0; r < n_idx; r++) idx[r] = map[r * m] / m;
    int64_t dx[3] = {P, xrows / m / P, R}, dg[3] = {P, n_idx, R};
    int vx, vg, in[2] = {-1, -1};
    st = new_value(g, x, 3, dx, &vx);
    if (st == KILN_OK) st = new_value(g, x, 3, dg, &vg);
    if (st == KILN_OK) st = kiln__graph_add_const(g, "kiln_movement_rows", KILN_DTYPE_INT64, 1, &n_idx, idx, &in[1]);
    in[0] = vx;
    kiln_axis_attrs ga = {.axis = 1};
    /* (unused values and constants, should the Gather not run there, go with DCE) */
    if (st != KILN_OK || !kiln__pat_supports(g, o->device, KILN_OP_Gather, 2, in, 1, &vg, &ga)) goto done;
    int n0 = g->n_nodes, r1 = -1, gn = -1, rl = root, dev = g->nodes[root].device;
    st = add_reshape(g, x, vx, y, src, c.count, &r1);
    char name[240];
    added_name(g, y, "rows", name, sizeof name);
    if (st == KILN_OK) st = kiln__graph_add_node(g, KILN_OP_Gather, name, 2, in, 1, &vg, &ga, &gn);
    if (st == KILN_OK) st = kiln__node_merge_sources(g, gn, src, c.count);
    if (st == KILN_OK) {
        g->nodes[r1].device = g->nodes[gn].device = dev;
        st = add_reshape(g, vg, y, y, src, c.count, &rl);
    }
    if (st == KILN_OK) /* the new nodes just before the root (after everything the chain read) */
        st = kiln__grow((void **)&pl->after, &pl->cap, g->n_nodes - pl->n0, sizeof *pl->after);
    if (st == KILN_OK) {
        for (int j = n0; j < g->n_nodes; j++) pl->after[j - pl->n0] = root - 1;
        made = true;
    }
done:
    if (st == KILN_OK && made) {
        for (int i = 0; i < c.count; i++)
            if (c.n[i].node != root) g->nodes[c.n[i].node].dead = true;
    }
    kiln__free(map);
    kiln__graph_relink(g, src, made ? c.count : 0); /* (and the nodes added) */
    return st;
}

/* ---- Concat of Slices (torch.roll) --------------------------------------------------
 * Run by fuse_transformer.c's layout clean-up (kiln__opt_transformer), node
 * by node, before the transformer patterns and merge_movement. */

/* At most this many Slices into one Gather (kiln__opt_concat_of_slices) */
#define CONCAT_SLICES_MAX 16
/* and an axis of at most this many elements: the Gather's index table is a
 * new int64 constant in the engine (512 KiB here; Swin rolls axes of 56 and
 * less). A longer axis keeps its Slices and Concat: with 2^24 a 2 kB model
 * made a 128 MiB engine. */
#define CONCAT_SLICES_MAX_AXIS ((int64_t)1 << 16)

/* Slice node sl taking one range [*b, *b + len) of one axis *axis of its
 * input (constant one-element starts and axes, steps absent or 1; every
 * other axis whole; shapes known); false if not so. */
static bool slice_one_range(const kiln_graph *g, int sl, int *axis, int64_t *b) {
    const kiln_node *n = &g->nodes[sl];
    double st, ax = 0, step = 1;
    if (n->n_in < 3 || !kiln__pat_const_scalar(g, n->in[1], &st) ||
        (n->n_in > 3 && n->in[3] >= 0 && !kiln__pat_const_scalar(g, n->in[3], &ax)) ||
        (n->n_in > 4 && n->in[4] >= 0 && !kiln__pat_const_scalar(g, n->in[4], &step)) || step != 1)
        return false;
    const kiln_tinfo *x = vi(g, n->in[0]), *y = vi(g, n->out[0]);
    if (!fixed(x) || !fixed(y) || x->rank != y->rank || x->rank < 1) return false;
    if (!(ax >= -x->rank && ax < x->rank)) return false; /* (before the cast: a double out of int's range) */
    int a = (int)ax < 0 ? (int)ax + x->rank : (int)ax;
    for (int k = 0; k < x->rank; k++)
        if (k != a && x->dims[k] != y->dims[k]) return false;
    int64_t d = x->dims[a];
    double s0 = st < 0 ? st + (double)d : st;
    int64_t s = s0 < 0 ? 0 : s0 > (double)d ? d : (int64_t)s0;
    if (s + y->dims[a] > d) return false;
    *axis = a;
    *b = s;
    return true;
}

/* Concat node ci of ranges of one axis of one value x, each taken by a
 * Slice read by the Concat alone (torch.roll as torch 1.13 and 2.x export
 * it: Concat(x[:, s:], x[:, :s])), becomes one Gather of x along that axis
 * with constant indices: one kernel instead of one a Slice and the Concat
 * (Swin's shifted blocks roll twice over two axes: 12 kernels, now 4). */
kiln_status kiln__opt_concat_of_slices(kiln_graph *g, const kiln_optimize_opts *o, int ci) {
    const kiln_node *n = &g->nodes[ci];
    const kiln_tinfo *y = vi(g, n->out[0]);
    int x = -1, from[CONCAT_SLICES_MAX + 1], nf = 0;
    if (n->n_in < 2 || n->n_in > CONCAT_SLICES_MAX || !fixed(y) || y->rank < 1) return KILN_OK;
    int ca = ((const kiln_axis_attrs *)n->attrs)->axis;
    ca = ca < 0 ? ca + y->rank : ca;
    int64_t L = y->dims[ca], idx_n = 0;
    if (L <= 0 || L > CONCAT_SLICES_MAX_AXIS) return KILN_OK;
    int64_t *idx = kiln__malloc(sizeof(int64_t) * (size_t)L);
    if (!idx) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (optimizer)");
    bool ok = true;
    for (int i = 0; i < n->n_in && ok; i++) {
        int v = n->in[i], a;
        int sl = v >= 0 && kiln__pat_sole_use(g, v) ? kiln__pat_producer(g, v, KILN_OP_Slice) : -1;
        int64_t b;
        ok = sl >= 0 && slice_one_range(g, sl, &a, &b) && a == ca && (x < 0 || g->nodes[sl].in[0] == x);
        if (!ok) break;
        x = g->nodes[sl].in[0];
        int64_t len = vi(g, n->in[i])->dims[ca];
        ok = idx_n + len <= L;
        for (int64_t j = 0; ok && j < len; j++) idx[idx_n++] = b + j;
        from[nf++] = sl;
    }
    kiln_status st = KILN_OK;
    if (ok && idx_n == L && vi(g, x)->dtype == y->dtype) {
        int in[2] = {x, -1}, out = n->out[0];
        kiln_axis_attrs ga = {.axis = ca};
        char base[200];
        snprintf(base, sizeof base, "%s_indices", n->name ? n->name : "concat");
        st = kiln__graph_add_const(g, base, KILN_DTYPE_INT64, 1, &L, idx, &in[1]);
        /* (an unused constant, should the Gather not run there, goes with DCE) */
        if (st == KILN_OK && kiln__pat_supports(g, o->device, KILN_OP_Gather, 2, in, 1, &out, &ga)) {
            from[nf++] = ci;
            st = kiln__pat_replace(g, ci, KILN_OP_Gather, 2, in, 1, &out, &ga, from, nf);
            for (int i = 0; st == KILN_OK && i < nf - 1; i++) g->nodes[from[i]].dead = true;
            kiln__graph_relink(g, from, nf);
        }
    }
    kiln__free(idx);
    return st;
}

kiln_status kiln__opt_movement(kiln_graph *g, const kiln_optimize_opts *o) {
    if (!kiln__pass_on(o, KILN_PASS_MERGE_MOVEMENT)) return KILN_OK;
    kiln__graph_link(g);
    placements pl = {.n0 = g->n_nodes};
    kiln_status st = KILN_OK;
    /* from the last node back: a chain's last layer first, so it takes the
     * whole chain (the nodes of the graph as it was keep their indices: the
     * new ones stay last until the end) */
    for (int ni = pl.n0 - 1; ni >= 0 && st == KILN_OK; ni--)
        if (!g->nodes[ni].dead) st = merge_chain(g, o, ni, &pl);
    if (st == KILN_OK) st = kiln__nodes_place_after(g, pl.n0, pl.after);
    kiln__free(pl.after);
    return st;
}
