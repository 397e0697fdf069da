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

#include <float.h>
#include <math.h>
#include <stdio.h>

static const kiln_tinfo *vinfo(const kiln_graph *g, int v) { return &g->values[v].info; }


/* Whether value v is read by a live node other than `skip` placed before node `before`. */
static bool read_before(const kiln_graph *g, int v, int skip, int before) {
    int nu = 0;
    const kiln_use *u = kiln__graph_uses(g, v, &nu);
    if (u) {
        for (int k = 0; k < nu; k++)
            if (u[k].node < before && u[k].node != skip) return true;
        return false;
    }
    kiln__graph_note_visits(g, before);
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
    kiln__graph_relink(g, from, 2);
    return KILN_OK;
}

/* Whether v is a float32 constant. */
static bool const_f32(const kiln_graph *g, int v) {
    return v >= 0 && (g->values[v].flags & KILN_VALUE_CONST) && vinfo(g, v)->dtype == KILN_DTYPE_FLOAT32 &&
           g->values[v].data;
}

/* Add node ni = Add(Add(x, c1), c2), c1 and c2 float32 constants, x not,
 * the inner sum read by ni alone and of x's and ni's shape: ni becomes
 * Add(x, c1 + c2), the constants summed (in float32) at build time and
 * stored with the leading axes along which the sum repeats of size 1
 * (BERT's embeddings: word + token type + position; the sum [1, S, E]): one
 * Add fewer, the other taken by AddLayerNorm. A sum that is not finite, or
 * (fp16 plans, `lim` 65504) beyond the range of the plan's dtype, is left
 * unmade: stored, it would be clamped to +-65504 (precision.c) where the
 * two Adds gave x + c1 + c2 (40000 + 40000 for x = -50000: 15504 for 30000).
 * *done: folded. */
static kiln_status fold_addends(kiln_graph *g, int ni, float lim, bool *done) {
    *done = false;
    const kiln_node *n = &g->nodes[ni];
    if (n->op_id != KILN_OP_Add || n->n_in != 2 || n->n_out != 1 || n->out[0] < 0) return KILN_OK;
    for (int k = 0; k < 2; k++) {
        int c2 = n->in[k], a = n->in[1 - k], y = n->out[0];
        int p = const_f32(g, c2) ? kiln__pat_producer(g, a, KILN_OP_Add) : -1;
        if (p < 0 || !kiln__pat_sole_use(g, a) || g->nodes[p].n_in != 2) continue;
        for (int j = 0; j < 2; j++) {
            int c1 = g->nodes[p].in[j], x = g->nodes[p].in[1 - j];
            if (!const_f32(g, c1) || x < 0 || (g->values[x].flags & KILN_VALUE_CONST)) continue;
            const kiln_tinfo *yi = vinfo(g, y);
            if (!kiln__pat_same_shape(vinfo(g, x), yi) || !kiln__pat_same_shape(vinfo(g, a), yi)) continue;
            const kiln_tinfo *ins[2] = {vinfo(g, c1), vinfo(g, c2)};
            kiln_tinfo u;
            if (kiln__broadcast_shapes(n->name, 2, ins, &u) != KILN_OK) {
                kiln__clear_error();
                continue;
            }
            bool fits = u.rank <= yi->rank;
            for (int d = 0; d < u.rank && fits; d++) {
                int64_t du = u.dims[u.rank - 1 - d], dy = yi->dims[yi->rank - 1 - d];
                fits = du == 1 || du == dy;
            }
            int64_t nu = kiln__numel(u.rank, u.dims);
            if (!fits || nu <= 0) continue;
            float *sum = kiln__malloc(sizeof(float) * (size_t)nu);
            if (!sum) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (folding constant addends)");
            int64_t s1[KILN_MAX_RANK], s2[KILN_MAX_RANK], idx[KILN_MAX_RANK] = {0};
            kiln__bcast_strides(ins[0]->rank, ins[0]->dims, u.rank, u.dims, s1);
            kiln__bcast_strides(ins[1]->rank, ins[1]->dims, u.rank, u.dims, s2);
            const float *d1 = g->values[c1].data, *d2 = g->values[c2].data;
            for (int64_t i = 0; i < nu; i++) {
                int64_t o1 = 0, o2 = 0;
                for (int d = 0; d < u.rank; d++) {
                    o1 += idx[d] * s1[d];
                    o2 += idx[d] * s2[d];
                }
                sum[i] = d1[o1] + d2[o2];
                for (int d = u.rank - 1; d >= 0 && ++idx[d] == u.dims[d]; d--) idx[d] = 0;
            }
            bool in_range = true;
            for (int64_t i = 0; i < nu && in_range; i++) in_range = fabsf(sum[i]) <= lim;
            if (!in_range) {
                kiln__free(sum);
                continue;
            }
            int lead = kiln__pat_repeated_lead_axes(sum, sizeof(float), u.rank, u.dims);
            for (int d = 0; d < lead; d++) u.dims[d] = 1;
            int v;
            char base[256];
            snprintf(base, sizeof base, "%.200s_plus", g->values[c2].name ? g->values[c2].name : "addend");
            kiln_status st = kiln__graph_add_const(g, base, KILN_DTYPE_FLOAT32, u.rank, u.dims, sum, &v);
            kiln__free(sum);
            KILN_TRY(st);
            kiln_node *nw = &g->nodes[ni];
            nw->in[0] = x;
            nw->in[1] = v;
            KILN_TRY(kiln__node_merge_sources(g, ni, (const int[2]){p, ni}, 2));
            g->nodes[p].dead = true;
            kiln__graph_relink(g, (const int[2]){p, ni}, 2);
            *done = true;
            return KILN_OK;
        }
    }
    return KILN_OK;
}

kiln_status kiln__opt_norm(kiln_graph *g, const kiln_optimize_opts *o) {
    /* fp16/bf16 device plans: constant addends summed (fp32 plans keep the
     * order of their additions, and so their results bit for bit) */
    const kiln_backend_i *be = kiln__backend_for(o->device);
    if (kiln__pass_on(o, KILN_PASS_FOLD_ADDENDS) && be && be->reduced_tensors &&
        (o->precision == KILN_PRECISION_FP16 || o->precision == KILN_PRECISION_BF16)) {
        kiln__graph_link(g);
        for (int ni = 0; ni < g->n_nodes; ni++) {
            bool done = !g->nodes[ni].dead;
            float lim = o->precision == KILN_PRECISION_FP16 ? 65504.0f : FLT_MAX;
            for (int r = 0; done && r < 8; r++) KILN_TRY(fold_addends(g, ni, lim, &done));
        }
    }
    if (!kiln__pass_on(o, KILN_PASS_FUSE_ADD_LAYERNORM)) return KILN_OK;
    kiln__graph_link(g);
    for (int ni = 0; ni < g->n_nodes; ni++)
        if (!g->nodes[ni].dead && g->nodes[ni].op_id == KILN_OP_LayerNormalization)
            KILN_TRY(match_add_ln(g, o, ni));
    return KILN_OK;
}
