/* infer.c -- shape and type inference over a graph: each node's op infer
 * (through kiln__infer) on its inputs' infos, in order. */
#include "ir/ir.h"

void kiln__tinfo_merge(kiln_tinfo *dst, const kiln_tinfo *inferred) {
    if (inferred->rank < 0) {
        if (dst->dtype == KILN_DTYPE_UNDEFINED) dst->dtype = inferred->dtype;
        return;
    }
    kiln_tinfo old = *dst;
    dst->dtype = inferred->dtype;
    dst->rank = inferred->rank;
    for (int i = 0; i < inferred->rank; i++) {
        int64_t d = inferred->dims[i];
        if (d == KILN_DIM_UNKNOWN && old.rank == inferred->rank && old.dims[i] != KILN_DIM_UNKNOWN)
            d = old.dims[i];
        dst->dims[i] = d;
    }
}

kiln_status kiln__node_check_inputs(const kiln_node *n) {
    if (n->n_in < n->op->min_inputs)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s) has %d inputs; at least %d are required",
                         n->name, n->op->name, n->n_in, n->op->min_inputs);
    for (int i = 0; i < n->op->min_inputs; i++)
        if (n->in[i] < 0)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): required input %d is missing", n->name,
                             n->op->name, i);
    return KILN_OK;
}

kiln_status kiln__graph_infer_node(kiln_graph *g, int ni, bool runtime, kiln_tinfo *outs) {
    return kiln__node_infer(g, &g->nodes[ni], runtime, outs);
}

kiln_status kiln__node_infer(const kiln_graph *g, const kiln_node *n, bool runtime, kiln_tinfo *outs) {
    const kiln_tinfo *in_buf[KILN_CALL_MAX], **in_ptrs = in_buf;
    kiln_tinfo *out_ptrs[KILN_CALL_MAX];
    if (n->n_out > KILN_CALL_MAX)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): %d outputs (at most %d)", n->name,
                         n->op->name, n->n_out, KILN_CALL_MAX);
    KILN_TRY(kiln__node_check_inputs(n));
    if (n->n_in > KILN_CALL_MAX && !(in_ptrs = kiln__malloc(sizeof *in_ptrs * (size_t)n->n_in)))
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (%s): out of memory for %d inputs", n->name,
                         n->op->name, n->n_in);
    for (int i = 0; i < n->n_in; i++) in_ptrs[i] = n->in[i] >= 0 ? &g->values[n->in[i]].info : NULL;
    for (int i = 0; i < n->n_out; i++) {
        memset(&outs[i], 0, sizeof outs[i]);
        outs[i].rank = -1;
        out_ptrs[i] = &outs[i];
    }
    kiln_infer_args a = {.op = n->op, .attrs = n->attrs, .node_name = n->name, .n_in = n->n_in,
                         .n_out = n->n_out, .in = in_ptrs, .out = out_ptrs, .runtime = runtime,
                         .sub = g->sub};
    kiln_status s = kiln__infer(&a);
    if (in_ptrs != in_buf) kiln__free(in_ptrs);
    if (s != KILN_OK) return s;
    for (int i = 0; i < n->n_out; i++) {
        outs[i].data = NULL;
        /* a dim below -1 names a symbol of the graph; anything else is the
         * trace of shape arithmetic gone wrong */
        for (int d = 0; d < outs[i].rank; d++)
            if (KILN_DIM_IS_SYM(outs[i].dims[d]) &&
                KILN_DIM_SYM_ID(outs[i].dims[d]) >= g->n_symbols)
                return KILN_FAIL(KILN_ERR_INTERNAL,
                                 "node '%s' (%s): output %d, dim %d has the invalid value %lld",
                                 n->name, n->op->name, i, d, (long long)outs[i].dims[d]);
    }
    return KILN_OK;
}

kiln_status kiln__graph_infer(kiln_graph *g) {
    kiln_tinfo outs[KILN_CALL_MAX];
    for (int ni = 0; ni < g->n_nodes; ni++) {
        kiln_node *n = &g->nodes[ni];
        if (n->dead) continue;
        kiln_status s = kiln__graph_infer_node(g, ni, false, outs);
        if (s != KILN_OK) return s;
        for (int k = 0; k < n->n_out; k++) {
            if (n->out[k] < 0) continue;
            kiln_value *v = &g->values[n->out[k]];
            if (v->flags & KILN_VALUE_CONST) continue;
            kiln__tinfo_merge(&v->info, &outs[k]);
        }
    }
    return KILN_OK;
}
