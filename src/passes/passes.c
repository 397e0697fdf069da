/* passes.c -- graph passes run by the builder: constant folding, dead-node
 * elimination (shape/type inference is src/ir/infer.c). */
#include "ir/ir.h"
#include "passes/pattern.h"
#include "ops/tensor_internal.h"

#include <stdio.h>

static bool all_dims_known(const kiln_tinfo *t) {
    if (t->rank < 0) return false;
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i] < 0) return false;
    return true;
}

/* Folded outputs become constants stored in the engine file. A node whose
 * outputs together would take more than this (an Expand or ConstantOfShape
 * to a large tensor, a layer applied to large constants) is left in the
 * plan and computed at run time, as ONNX Runtime and TensorRT leave
 * large constant subgraphs: the engine stays small, and building does not
 * spend the time and memory of running a big layer on the host. */
#define KILN_FOLD_MAX_BYTES ((size_t)64 << 20)

/* fold_node's body, on the call begun for node ni. */
static kiln_status fold_node_call(kiln_graph *g, int ni, const kiln_tinfo *in0, int64_t *in0_data, kiln_call *c) {
    kiln_node *n = &g->nodes[ni];
    bool shape_only = (n->op->flags & KILN_OP_FLAG_SHAPE_ONLY) != 0;
    for (int i = 0; i < n->n_in; i++) {
        if (n->in[i] < 0) continue;
        kiln_value *v = &g->values[n->in[i]];
        if (i == 0 && in0)
            kiln__call_input(c, 0, in0, in0_data);
        else
            kiln__call_input(c, i, &v->info, shape_only ? NULL : v->data);
    }
    KILN_TRY(kiln__call_infer(c, true, NULL, true));
    const kiln_tinfo *outs = c->out;
    kiln_tensor *out_t = c->out_t;
    size_t total = 0;
    for (int i = 0; i < n->n_out; i++) {
        size_t nb = kiln__value_nbytes(&outs[i]);
        /* nb == 0 with elements: the byte size overflows; too large as well */
        if ((!nb && kiln__numel(outs[i].rank, outs[i].dims) > 0) || nb > KILN_FOLD_MAX_BYTES ||
            (total += nb) > KILN_FOLD_MAX_BYTES)
            return KILN_OK; /* not folded: runs in the plan */
    }
    KILN_TRY(kiln__call_run_host(c, NULL, SIZE_MAX));
    /* entries of a partial shape (below): folded only when all known */
    for (int i = 0; i < n->n_out && in0; i++)
        for (int64_t k = 0; k < kiln__numel(outs[i].rank, outs[i].dims); k++)
            if (((const int64_t *)out_t[i].data)[k] < 0) goto done;
    for (int i = 0; i < n->n_out; i++) {
        if (n->out[i] < 0) continue;
        kiln_value *v = &g->values[n->out[i]];
        if (!v->data_borrowed) kiln__aligned_free(v->data);
        v->data = out_t[i].data;
        v->data_borrowed = false;
        v->nbytes = kiln__value_nbytes(&outs[i]);
        v->info = outs[i];
        v->info.data = v->data;
        v->flags |= KILN_VALUE_CONST;
        out_t[i].data = NULL;
    }
    n->dead = true;
done:
    for (int i = 0; i < n->n_out; i++) kiln__aligned_free(out_t[i].data);
    return KILN_OK;
}

/* Evaluates node `ni` on its (constant) inputs and turns its outputs into
 * constants; leaves it alone when its outputs are too large (above) or too
 * many (KILN_CALL_MAX). With in0, that is input 0 (an int64 shape, values
 * in0_data, whose unknown dims are negative), and outputs with a negative entry are not
 * folded. */
static kiln_status fold_node(kiln_graph *g, int ni, const kiln_tinfo *in0, int64_t *in0_data) {
    if (g->nodes[ni].n_out > KILN_CALL_MAX) return KILN_OK;
    kiln_call c;
    KILN_TRY(kiln__call_begin(&c, g, &g->nodes[ni]));
    kiln_status s = fold_node_call(g, ni, in0, in0_data, &c);
    kiln__call_end(&c);
    return s;
}

/* Whether node n selects entries of a shape read at run time, Gather (axis 0)
 * or Slice of Shape(x) with x's rank known and the other inputs constant:
 * then fills *sh with that shape, x's dims (some of them negative: symbolic
 * or unknown) in sd. The entries it selects may all be known at build time
 * (the sequence length of a model whose batch alone is dynamic), and then
 * the node folds. */
static bool selects_from_shape(const kiln_graph *g, const kiln_node *n, kiln_tinfo *sh, int64_t *sd) {
    if ((n->op_id != KILN_OP_Slice && n->op_id != KILN_OP_Gather) || n->n_in < 2 || n->in[0] < 0 ||
        (g->values[n->in[0]].flags & KILN_VALUE_CONST))
        return false;
    if (n->op_id == KILN_OP_Gather && ((const kiln_axis_attrs *)n->attrs)->axis != 0) return false;
    int sn = kiln__pat_producer(g, n->in[0], KILN_OP_Shape), b, e;
    if (sn < 0 || !kiln__pat_shape_range(g, sn, &b, &e)) return false;
    for (int i = 1; i < n->n_in; i++)
        if (n->in[i] >= 0 && !(g->values[n->in[i]].flags & KILN_VALUE_CONST)) return false;
    const kiln_tinfo *xi = &g->values[g->nodes[sn].in[0]].info;
    for (int k = b; k < e; k++) sd[k - b] = xi->dims[k];
    *sh = (kiln_tinfo){.dtype = KILN_DTYPE_INT64, .rank = 1, .dims = {e - b}, .data = sd};
    return true;
}

kiln_status kiln__pass_fold_constants(kiln_graph *g) {
    kiln_tinfo outs[KILN_CALL_MAX];
    kiln__graph_link(g);
    for (int ni = 0; ni < g->n_nodes; ni++) {
        kiln_node *n = &g->nodes[ni];
        if (n->dead) continue;
        /* Infer the node again: inputs folded above may now be constants
         * (a Reshape's shape made of Shape/Gather/Concat), which gives this
         * node's outputs dims that the first inference left unknown (as
         * broadcasting 1 against an unknown dim does), so that Shape nodes
         * further on fold too. */
        if (kiln__graph_infer_node(g, ni, false, outs) == KILN_OK) {
            for (int k = 0; k < n->n_out; k++) {
                if (n->out[k] < 0 || (g->values[n->out[k]].flags & KILN_VALUE_CONST)) continue;
                kiln__tinfo_merge(&g->values[n->out[k]].info, &outs[k]);
            }
        } else {
            kiln__clear_error(); /* the inference pass after folding reports it */
        }
        if (!n->op->cpu || (n->op->flags & KILN_OP_FLAG_NO_FOLD)) continue;
        bool shape_only = (n->op->flags & KILN_OP_FLAG_SHAPE_ONLY) != 0;
        bool ok = true;
        kiln_tinfo sh;
        int64_t sd[KILN_MAX_RANK];
        const kiln_tinfo *in0 = NULL;
        if (selects_from_shape(g, n, &sh, sd)) in0 = &sh;
        for (int i = in0 ? 1 : 0; i < n->n_in && ok; i++) {
            if (n->in[i] < 0) continue;
            const kiln_value *v = &g->values[n->in[i]];
            ok = shape_only ? all_dims_known(&v->info) : (v->flags & KILN_VALUE_CONST) != 0;
        }
        /* Never fold into a graph output that is also a graph input. */
        for (int i = 0; i < n->n_out && ok; i++)
            if (n->out[i] >= 0 && (g->values[n->out[i]].flags & KILN_VALUE_INPUT)) ok = false;
        if (!ok) continue;
        kiln_status s = fold_node(g, ni, in0, sd);
        if (s != KILN_OK)
            return kiln__fail_prefix(s, "constant folding node '%s' (%s)", n->name, n->op->name);
    }
    return KILN_OK;
}

kiln_status kiln__pass_dce(kiln_graph *g) {
    bool *live = kiln__calloc((size_t)g->n_values + 1, sizeof *live);
    if (!live) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (dce)");
    for (int i = 0; i < g->n_outputs; i++) live[g->outputs[i]] = true;
    for (int ni = g->n_nodes - 1; ni >= 0; ni--) {
        kiln_node *n = &g->nodes[ni];
        if (n->dead) continue;
        bool used = false;
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0 && live[n->out[k]]) used = true;
        if (!used) {
            n->dead = true;
            continue;
        }
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0) live[n->in[k]] = true;
    }
    kiln__free(live);
    return kiln__graph_compact(g);
}
