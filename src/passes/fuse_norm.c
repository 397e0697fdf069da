/* fuse_norm.c -- the residual Add before a LayerNormalization fused into it:
 *
 *   s = Add(a, r) -> LayerNormalization(s, Scale, B)   =>   kiln.AddLayerNorm(a, r, Scale, B)
 *
 * (src/ops/fused_norm.h). Where s is read elsewhere too (pre-LN transformers:
 * the residual stream goes on to the next block) or is a graph output, the
 * fused layer writes it as its second output; otherwise only Y is written.
 *
 * Runs after the transformer fusions (fuse_transformer.c): an Add that a
 * FusedMatMul took as its residual (read through cuBLASLt's C, beta = 1)
 * stays there. That keeps the GEMM + LayerNorm pair at two kernels either
 * way and the LayerNorm reading one tensor instead of two, so this pass gets
 * the Adds no GEMM can take: BERT's embedding sums, residuals after
 * convolutions or other layers, Adds of non-constant products.
 *
 * The leading dims may be named symbols (an engine over a batch profile):
 * the normalized dims must be known, and the addends provably of one shape,
 * or the residual's dims the same symbols or known sizes as the sum's where
 * it does not broadcast (kiln__add_ln_fits); the kernels take the rows from
 * the tensors' dims at run time.
 *
 * Not fused: a LayerNormalization whose Mean or InvStdDev is read; Adds
 * whose operands both broadcast, or broadcast other than over leading dims
 * whole rows at a time (a [N, S, 1] addend, say); operands of another dtype;
 * where the backend does not support the layer; where a reader of s comes
 * before the LayerNormalization and its Scale/B are not yet made at the
 * Add (the fused node would not be in topological order). */
#include "passes/pattern.h"

#include "backends/backend.h"
#include "ops/fused_norm.h"
#include "ops/nn_attrs.h"

static const kiln_tinfo *vinfo(const kiln_graph *g, int v) { return &g->values[v].info; }


/* Whether value v is read by a live node other than `skip` placed before node `before`. */
static bool read_before(const kiln_graph *g, int v, int skip, int before) {
    for (int ni = 0; ni < before && ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        if (n->dead || ni == skip) continue;
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] == v) return true;
    }
    return false;
}

/* Whether value v (may be -1: absent) is available at node `at`: a graph
 * input or constant, or made by a live node before it. */
static bool made_before(const kiln_graph *g, int v, int at) {
    if (v < 0) return true;
    int p = g->values[v].producer;
    return p < 0 || p < at;
}

static kiln_status match_add_ln(kiln_graph *g, const kiln_optimize_opts *o, int ln) {
    const kiln_node *n = &g->nodes[ln];
    /* statistics outputs must be unread */
    for (int k = 1; k < n->n_out; k++)
        if (n->out[k] >= 0 && g->values[n->out[k]].n_uses > 0) return KILN_OK;
    const int s = n->in[0], y = n->out[0];
    const int add = kiln__pat_producer(g, s, KILN_OP_Add);
    if (add < 0 || g->nodes[add].n_in != 2 || g->nodes[add].n_out != 1) return KILN_OK;
    int a = g->nodes[add].in[0], r = g->nodes[add].in[1];
    const kiln_tinfo *si = vinfo(g, s);
    if (a < 0 || r < 0 || si->rank < 1) return KILN_OK;
    /* the full-shape addend first */
    if (!kiln__pat_same_shape(vinfo(g, a), si)) {
        int t = a;
        a = r;
        r = t;
    }
    const kiln_tinfo *ai = vinfo(g, a), *ri = vinfo(g, r);
    kiln_dtype t = si->dtype;
    if (!kiln__pat_same_shape(ai, si) || ai->dtype != t || ri->dtype != t || ri->rank < 0) return KILN_OK;
    if (t != KILN_DTYPE_FLOAT32 && t != KILN_DTYPE_FLOAT16 && t != KILN_DTYPE_BFLOAT16) return KILN_OK;
    const kiln_ln_attrs *la = n->attrs;
    int axis = la->axis < 0 ? la->axis + si->rank : la->axis;
    if (axis < 0 || axis >= si->rank || !kiln__add_ln_fits(si->rank, si->dims, ri->rank, ri->dims, axis))
        return KILN_OK;
    /* the sum as an output where anything else reads it */
    const bool keep_sum = !kiln__pat_sole_use(g, s);
    const int scale = n->in[1], bias = n->n_in > 2 ? n->in[2] : -1;
    /* where the fused node goes: the LayerNormalization's place, or the Add's
     * when s has a reader in between (Scale and B must exist there) */
    int at = ln;
    if (keep_sum && read_before(g, s, ln, ln)) {
        if (!made_before(g, scale, add) || !made_before(g, bias, add)) return KILN_OK;
        at = add;
    }
    kiln_add_ln_attrs fa = {.axis = la->axis, .epsilon = la->epsilon};
    int in[4] = {a, r, scale, bias}, out[2] = {y, keep_sum ? s : -1};
    const int n_in = bias >= 0 ? 4 : 3, n_out = keep_sum ? 2 : 1;
    if (!kiln__pat_supports(g, o->device, KILN_OP_AddLayerNorm, n_in, in, n_out, out, &fa)) return KILN_OK;
    const int from[2] = {add, ln};
    KILN_TRY(kiln__pat_replace(g, at, KILN_OP_AddLayerNorm, n_in, in, n_out, out, &fa, from, 2));
    g->nodes[at == ln ? add : ln].dead = true;
    kiln__graph_link(g);
    return KILN_OK;
}

kiln_status kiln__opt_norm(kiln_graph *g, const kiln_optimize_opts *o) {
    if (!kiln__pass_on(o, KILN_PASS_FUSE_ADD_LAYERNORM)) return KILN_OK;
    kiln__graph_link(g);
    for (int ni = 0; ni < g->n_nodes; ni++)
        if (!g->nodes[ni].dead && g->nodes[ni].op_id == KILN_OP_LayerNormalization)
            KILN_TRY(match_add_ln(g, o, ni));
    return KILN_OK;
}
