/* passes.c -- graph passes run by the builder: constant folding, dead-node
 * elimination (shape/type inference is src/ir/infer.c). */
#include "ir/ir.h"

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
static kiln_status fold_node_call(kiln_graph *g, int ni, kiln_call *c) {
    kiln_node *n = &g->nodes[ni];
    bool shape_only = (n->op->flags & KILN_OP_FLAG_SHAPE_ONLY) != 0;
    for (int i = 0; i < n->n_in; i++) {
        if (n->in[i] < 0) continue;
        kiln_value *v = &g->values[n->in[i]];
        kiln__call_input(c, i, &v->info, shape_only ? NULL : v->data);
    }
    KILN_TRY(kiln__call_infer(c, true, NULL, true));
    const kiln_tinfo *outs = c->out;
    kiln_tensor *out_t = c->out_t;
    void *ws = NULL;
    size_t ws_size = n->op->workspace ? n->op->workspace(&c->ia) : 0;
    kiln_status s = KILN_OK;
    size_t total = 0;
    for (int i = 0; i < n->n_out; i++) {
        size_t nb = kiln__value_nbytes(&outs[i]);
        /* nb == 0 with elements: the byte size overflows; too large as well */
        if ((!nb && kiln__numel(outs[i].rank, outs[i].dims) > 0) || nb > KILN_FOLD_MAX_BYTES ||
            (total += nb) > KILN_FOLD_MAX_BYTES)
            goto done; /* not folded: runs in the plan */
    }
    for (int i = 0; i < n->n_out; i++) {
        size_t nb = kiln__value_nbytes(&outs[i]);
        out_t[i].data = kiln__aligned_alloc(nb);
        if (!out_t[i].data) {
            s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory folding node '%s'", n->name);
            goto done;
        }
    }
    if (ws_size && !(ws = kiln__aligned_alloc(ws_size))) {
        s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory folding node '%s'", n->name);
        goto done;
    }
    kiln__call_args(c, ws, ws_size, NULL, NULL);
    if ((s = n->op->cpu(&c->ka)) != KILN_OK) goto done;
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
    kiln__aligned_free(ws);
    return s;
}

/* Evaluates node `ni` on its (constant) inputs and turns its outputs into
 * constants; leaves it alone when its outputs are too large (above) or too
 * many (KILN_CALL_MAX). */
static kiln_status fold_node(kiln_graph *g, int ni) {
    if (g->nodes[ni].n_out > KILN_CALL_MAX) return KILN_OK;
    kiln_call c;
    KILN_TRY(kiln__call_begin(&c, g, &g->nodes[ni]));
    kiln_status s = fold_node_call(g, ni, &c);
    kiln__call_end(&c);
    return s;
}

kiln_status kiln__pass_fold_constants(kiln_graph *g) {
    kiln_tinfo outs[KILN_CALL_MAX];
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
        for (int i = 0; i < n->n_in && ok; i++) {
            if (n->in[i] < 0) continue;
            const kiln_value *v = &g->values[n->in[i]];
            ok = shape_only ? all_dims_known(&v->info) : (v->flags & KILN_VALUE_CONST) != 0;
        }
        /* Never fold into a graph output that is also a graph input. */
        for (int i = 0; i < n->n_out && ok; i++)
            if (n->out[i] >= 0 && (g->values[n->out[i]].flags & KILN_VALUE_INPUT)) ok = false;
        if (!ok) continue;
        kiln_status s = fold_node(g, ni);
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
