/* layouts.c -- in which layout each value of a plan is written (layouts.h):
 * what the engine checks (format/read.c, when a file is written and read)
 * compare every layer's reads with, and what the runtime's debugger
 * converts a tensor's bytes from (runtime/debug.c). */
#include "ir/layouts.h"

#include <stdio.h>

static const char *nm(const char *s) { return s ? s : ""; }

static const char *layout_name(int l) {
    return l == KILN_VLAYOUT_NHWC ? "nhwc" : l == KILN_VLAYOUT_NHWC_BF16 ? "nhwc-bf16"
           : l == KILN_VLAYOUT_C16 ? "nchw16c" : "nchw";
}

/* Whether a 4-D value's bytes read the same in layouts a and b: NHWC and
 * NCHW where C = 1 or H = W = 1 (a pool's [N, C, 1, 1]). */
static bool same_bytes(const kiln_tinfo *t, int a, int b) {
    if (a == b) return true;
    bool nhwc_plain = (a == KILN_VLAYOUT_NHWC && b == KILN_VLAYOUT_PLAIN) ||
                      (b == KILN_VLAYOUT_NHWC && a == KILN_VLAYOUT_PLAIN);
    return nhwc_plain && t->rank == 4 && (t->dims[1] == 1 || (t->dims[2] == 1 && t->dims[3] == 1));
}

/* What the layout checks know of a plan: per value, the layout its bytes
 * are written in where the file says it for sure (lay[v] >= 0), else -1;
 * per value its producer (-1: a constant or a graph input); whether the
 * file says which nodes kiln added (its SRCS section: a writer's graph
 * always knows). */
typedef struct layout_ck {
    const kiln_graph *g;
    int *lay, *prod;
    bool sources;
} layout_ck;

/* "node 3 'conv'", "a constant" or "a graph input": who wrote value v. */
static const char *writer_of(const layout_ck *c, int v, char *buf, size_t n) {
    if (c->prod[v] >= 0) snprintf(buf, n, "node %d '%s'", c->prod[v], nm(c->g->nodes[c->prod[v]].name));
    else snprintf(buf, n, "%s", c->g->values[v].flags & KILN_VALUE_CONST ? "a constant" : "a graph input");
    return buf;
}

/* lay[v], as plain where its bytes read the same plain. */
static int plain_or(const layout_ck *c, int v) {
    int l = c->lay[v];
    return l > 0 && same_bytes(&c->g->values[v].info, l, KILN_VLAYOUT_PLAIN) ? KILN_VLAYOUT_PLAIN : l;
}

static kiln_status reads_as_plain(const layout_ck *c, int ni, int v, const char *why) {
    const kiln_node *n = &c->g->nodes[ni];
    char by[96];
    return KILN_FAIL(KILN_ERR_FORMAT, "node %d '%s' (%s) reads value %d '%s' as nchw, but it is %s (%s)%s", ni,
                     nm(n->name), kiln__op_by_id(n->op_id)->name, v, nm(c->g->values[v].name),
                     layout_name(c->lay[v]), writer_of(c, v, by, sizeof by), why);
}

/* Whether t broadcasts over a 4-D value in one way whatever the order of
 * its bytes: rank 4 or less, 1 in every dim but the batch. */
static bool batch_only(const kiln_tinfo *t) {
    if (t->rank < 0 || t->rank > 4) return false;
    for (int d = t->rank - 3; d < t->rank; d++)
        if (d >= 0 && t->dims[d] != 1) return false;
    return true;
}

/* What layer ni writes (*y), neither a view nor a layer with a layout of
 * its own: it reads plain values (or values whose bytes read the same
 * plain), except that an elementwise layer (kiln__op_same_index) with a
 * 4-D output reads its inputs of the output's dims ("full") in one layout,
 * which it writes, with only batch-wide operands beside them where that
 * layout is not plain (a per-channel one would meet other channels in
 * NHWC bytes: the CUDA pass gives such layers views), and never bf16 held
 * under a float32 type. -1: an input of unknown layout. Fails naming the
 * layer and the value otherwise. */
static kiln_status layer_layout(const layout_ck *c, int ni, int *y) {
    const kiln_graph *g = c->g;
    const kiln_node *n = &g->nodes[ni];
    const kiln_tinfo *yt = n->n_out == 1 && n->out[0] >= 0 ? &g->values[n->out[0]].info : NULL;
    bool ew = kiln__op_same_index(n->op_id) && yt && yt->rank == 4;
    int full = -2, first = -1, odd = -1;
    bool unknown = false;
    for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        if (v < 0) continue;
        const kiln_tinfo *t = &g->values[v].info;
        int l = plain_or(c, v);
        if (!(ew && t->rank == 4 && !memcmp(t->dims, yt->dims, sizeof t->dims))) {
            if (l > 0) return reads_as_plain(c, ni, v, "");
            if (l < 0) unknown = true;
            else if (!batch_only(t) && odd < 0) odd = v;
            continue;
        }
        if (l < 0) {
            unknown = true;
        } else if (full == -2) {
            full = l, first = v;
        } else if (full != l) {
            return KILN_FAIL(KILN_ERR_FORMAT,
                             "node %d '%s' (%s) reads value %d '%s', which is %s, and value %d '%s', which is %s, "
                             "as one layout", ni, nm(n->name), kiln__op_by_id(n->op_id)->name, first,
                             nm(g->values[first].name), layout_name(c->lay[first]), v, nm(g->values[v].name),
                             layout_name(c->lay[v]));
        }
    }
    char by[96];
    if (full == KILN_VLAYOUT_NHWC_BF16)
        return reads_as_plain(c, ni, first, ": bf16 elements under a float32 type");
    if (full > 0 && odd >= 0)
        return KILN_FAIL(KILN_ERR_FORMAT,
                         "node %d '%s' (%s) reads value %d '%s', which is %s (%s), beside value %d '%s', "
                         "which it broadcasts over more than the batch: it would meet other elements in %s bytes",
                         ni, nm(n->name), kiln__op_by_id(n->op_id)->name, first, nm(g->values[first].name),
                         layout_name(full), writer_of(c, first, by, sizeof by), odd, nm(g->values[odd].name),
                         layout_name(full));
    *y = unknown ? -1 : full >= 0 ? full : KILN_VLAYOUT_PLAIN;
    return KILN_OK;
}

/* Whether 4-D b's dims are 4-D a's in the order p: b[i] = a[p[i]]. */
static bool dims_as(const kiln_tinfo *a, const kiln_tinfo *b, const int *p) {
    if (a->rank != 4 || b->rank != 4) return false;
    for (int i = 0; i < 4; i++)
        if (b->dims[i] != a->dims[p[i]]) return false;
    return true;
}

/* What view ni writes (*y): its output holds its input's bytes in their
 * order under another shape (Reshape, Flatten, Squeeze, Unsqueeze,
 * Identity). A backend's NHWC chain relabels with Reshapes it adds (the
 * CUDA pass, cuda_layout.c): NHWC bytes of [N, C, H, W] as a plain
 * [N, H, W, C] value (out of a chain: the only view of such bytes there
 * is), and a plain [N, H, W, C] value as NHWC bytes of [N, C, H, W] (into
 * one): where the file says which nodes kiln added, a Reshape kiln added on
 * a device from [N, H, W, C] to [N, C, H, W] relabels so, and any other
 * view of a plain value is plain (the model's own Reshape); without that
 * the two cannot be told apart (-1). A view that keeps the shape passes
 * the layout on; any other view of bytes that are not plain would read
 * them in another order: refused, naming it. */
static kiln_status view_layout(const layout_ck *c, int ni, int *y) {
    static const int to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};
    const kiln_graph *g = c->g;
    const kiln_node *n = &g->nodes[ni];
    *y = -1;
    if (n->n_in < 1 || n->in[0] < 0 || n->n_out < 1 || n->out[0] < 0 || c->lay[n->in[0]] < 0) return KILN_OK;
    int x = n->in[0], l = c->lay[x], lp = plain_or(c, x);
    const kiln_tinfo *tx = &g->values[x].info, *ty = &g->values[n->out[0]].info;
    bool device_reshape = n->op_id == KILN_OP_Reshape && n->device != KILN_DEVICE_CPU;
    bool relabel = device_reshape && c->sources && n->added;
    bool same = tx->rank == ty->rank && !memcmp(tx->dims, ty->dims, sizeof tx->dims);
    if (lp == KILN_VLAYOUT_PLAIN && dims_as(tx, ty, to_nchw) && !same_bytes(ty, KILN_VLAYOUT_NHWC, KILN_VLAYOUT_PLAIN)) {
        if (relabel) *y = KILN_VLAYOUT_NHWC;
        else if (!same && device_reshape && !c->sources) *y = -1;
        else *y = same ? l : KILN_VLAYOUT_PLAIN;
        return KILN_OK;
    }
    if (l == KILN_VLAYOUT_NHWC && dims_as(tx, ty, to_nhwc) && (!same || relabel)) {
        *y = KILN_VLAYOUT_PLAIN;
        return KILN_OK;
    }
    /* (the chain's views out of NHWC read NHWC bytes, or bytes that read the same) */
    if (relabel && dims_as(tx, ty, to_nhwc) && !same_bytes(tx, l, KILN_VLAYOUT_NHWC)) {
        char by[96];
        return KILN_FAIL(KILN_ERR_FORMAT,
                         "node %d '%s' (Reshape), which kiln added, reads value %d '%s' as nhwc bytes of %s, but it "
                         "is %s (%s)", ni, nm(n->name), x, nm(g->values[x].name),
                         kiln__shape_str(tx->rank, tx->dims, (char[96]){0}, 96), layout_name(l),
                         writer_of(c, x, by, sizeof by));
    }
    if (same || lp == KILN_VLAYOUT_PLAIN) {
        *y = same ? l : KILN_VLAYOUT_PLAIN;
        return KILN_OK;
    }
    return reads_as_plain(c, ni, x, ": a view that changes the shape keeps the bytes in their order");
}

/* What layout layer ni (its attributes say in which layout it reads and
 * writes: NHWC or nChw16c chains) writes (*y), after checking that it
 * reads its input and residual as they are written. */
static kiln_status layout_layer(const layout_ck *c, int ni, int *y) {
    const kiln_graph *g = c->g;
    const kiln_node *n = &g->nodes[ni];
    const kiln_op_def *op = kiln__op_by_id(n->op_id);
    kiln_io_layout io;
    op->layout_io(*op->layout_field(n->attrs), &io);
    *y = io.y;
    for (int pass = 0; pass < 2; pass++) {
        int k = pass == 0 ? 0 : io.r_in;
        if ((pass == 1 && k <= 0) || k >= n->n_in || n->in[k] < 0) continue;
        int want = pass == 0 ? io.x : io.r_nhwc ? KILN_VLAYOUT_NHWC : io.y;
        int v = n->in[k], have = g->values[v].info.rank == 4 ? c->lay[v] : want;
        if (have < 0 || same_bytes(&g->values[v].info, have, want)) continue;
        char by[96];
        return KILN_FAIL(KILN_ERR_FORMAT, "node %d '%s' (%s) reads its %s, value %d '%s', as %s, but it is %s (%s)",
                         ni, nm(n->name), op->name, pass == 0 ? "input" : "residual", v, nm(g->values[v].name),
                         layout_name(want), layout_name(have), writer_of(c, v, by, sizeof by));
    }
    return KILN_OK;
}

/* See layouts.h. */
kiln_status kiln__plan_layouts(const kiln_graph *g, bool sources, int *lay) {
    layout_ck c = {.g = g, .prod = kiln__malloc(((size_t)g->n_values + 1) * sizeof(int)), .lay = lay,
                   .sources = sources};
    int *prod = c.prod;
    kiln_status st = KILN_OK;
    if (!prod) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory checking a plan's layouts");
    for (int v = 0; v < g->n_values; v++) {
        bool given = (g->values[v].flags & KILN_VALUE_CONST) || g->values[v].info.rank != 4;
        lay[v] = given ? KILN_VLAYOUT_PLAIN : -1;
        prod[v] = -1;
    }
    for (int i = 0; i < g->n_inputs; i++) lay[g->inputs[i]] = KILN_VLAYOUT_PLAIN;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead)
            for (int k = 0; k < g->nodes[i].n_out; k++) prod[g->nodes[i].out[k]] = i;
    for (int i = 0; i < g->n_nodes && st == KILN_OK; i++) {
        const kiln_node *n = &g->nodes[i];
        const kiln_op_def *op = kiln__op_by_id(n->op_id);
        if (n->dead) continue;
        int y = -1;
        bool laid = op->layout_io && n->attrs;
        if (laid) st = layout_layer(&c, i, &y);
        else if (op->flags & KILN_OP_FLAG_VIEW) st = view_layout(&c, i, &y);
        else st = layer_layout(&c, i, &y);
        for (int k = 0; k < n->n_out && st == KILN_OK; k++)
            if (g->values[n->out[k]].info.rank == 4) lay[n->out[k]] = k > 0 && laid ? KILN_VLAYOUT_PLAIN : y;
    }
    for (int i = 0; i < g->n_outputs && st == KILN_OK; i++) {
        int v = g->outputs[i], have = lay[v];
        if (have > 0 && !same_bytes(&g->values[v].info, have, KILN_VLAYOUT_PLAIN))
            st = KILN_FAIL(KILN_ERR_FORMAT, "graph output %d, value %d '%s', is written %s by node %d '%s': "
                           "outputs are nchw", i, v, nm(g->values[v].name), layout_name(have), prod[v],
                           prod[v] >= 0 ? nm(g->nodes[prod[v]].name) : "");
    }
    kiln__free(prod);
    return st;
}
