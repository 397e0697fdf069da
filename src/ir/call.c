/* call.c -- calling one node: the glue between a node and its op's infer
 * and kernel (see kiln_call in ir.h). */
#include "ir/ir.h"

kiln_status kiln__call_begin(kiln_call *c, const kiln_graph *g, const kiln_node *n) {
    c->n = n;
    c->in_heap = NULL;
    if (n->n_out > KILN_CALL_MAX)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): %d outputs (at most %d)", n->name,
                         n->op->name, n->n_out, KILN_CALL_MAX);
    if (n->n_in <= KILN_CALL_MAX) {
        c->in_info = c->in_info_buf;
        c->in_t = c->in_t_buf;
        c->in_ip = c->in_ip_buf;
        c->in_tp = c->in_tp_buf;
    } else {
        size_t k = (size_t)n->n_in;
        unsigned char *h = kiln__malloc(k * (sizeof(kiln_tinfo) + sizeof(kiln_tensor) + 2 * sizeof(void *)));
        if (!h)
            return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (%s): out of memory for %d inputs", n->name,
                             n->op->name, n->n_in);
        c->in_heap = h;
        c->in_info = (kiln_tinfo *)(void *)h;
        c->in_t = (kiln_tensor *)(void *)(h + k * sizeof(kiln_tinfo));
        c->in_ip = (const kiln_tinfo **)(void *)(h + k * (sizeof(kiln_tinfo) + sizeof(kiln_tensor)));
        c->in_tp = (const kiln_tensor **)(void *)(h + k * (sizeof(kiln_tinfo) + sizeof(kiln_tensor) +
                                                           sizeof(void *)));
    }
    for (int i = 0; i < n->n_in; i++) {
        c->in_ip[i] = NULL;
        c->in_tp[i] = NULL;
    }
    for (int i = 0; i < n->n_out; i++) {
        memset(&c->out[i], 0, sizeof c->out[i]);
        c->out[i].rank = -1;
        c->out_ip[i] = &c->out[i];
        memset(&c->out_t[i], 0, sizeof c->out_t[i]);
        c->out_tp[i] = &c->out_t[i];
    }
    c->ia = (kiln_infer_args){.op = n->op, .attrs = n->attrs, .node_name = n->name, .n_in = n->n_in,
                              .n_out = n->n_out, .in = c->in_ip, .out = c->out_ip, .sub = g->sub};
    c->ka = (kiln_kernel_args){.op = n->op, .op_id = n->op_id, .attrs = n->attrs, .node_name = n->name,
                               .n_in = n->n_in, .n_out = n->n_out, .in = c->in_tp, .out = c->out_tp,
                               .sub = g->sub};
    return KILN_OK;
}

void kiln__call_end(kiln_call *c) {
    kiln__free(c->in_heap);
    c->in_heap = NULL;
}

void kiln__call_input(kiln_call *c, int i, const kiln_tinfo *info, void *data) {
    c->in_info[i] = *info;
    c->in_ip[i] = &c->in_info[i];
    c->in_t[i].dtype = info->dtype;
    c->in_t[i].rank = info->rank;
    memcpy(c->in_t[i].dims, info->dims, sizeof c->in_t[i].dims);
    c->in_t[i].data = data;
    c->in_tp[i] = &c->in_t[i];
}

kiln_status kiln__call_infer(kiln_call *c, bool runtime, kiln_node_state *ns, bool exact) {
    const kiln_node *n = c->n;
    KILN_TRY(kiln__node_check_inputs(n));
    c->ia.runtime = runtime;
    c->ia.node_state = ns;
    for (int i = 0; i < n->n_out; i++) {
        memset(&c->out[i], 0, sizeof c->out[i]);
        c->out[i].rank = exact ? 0 : -1;
    }
    KILN_TRY(kiln__infer(&c->ia));
    for (int i = 0; i < n->n_out; i++) {
        const kiln_tinfo *t = &c->out[i];
        if (exact && (t->rank < 0 || t->rank > KILN_MAX_RANK || kiln__numel(t->rank, t->dims) < 0))
            return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (%s): output %d has no exact shape",
                             n->name, n->op->name, i);
        c->out_t[i].dtype = t->dtype;
        c->out_t[i].rank = t->rank;
        memcpy(c->out_t[i].dims, t->dims, sizeof c->out_t[i].dims);
        c->out_t[i].data = NULL;
    }
    return KILN_OK;
}

void kiln__call_args(kiln_call *c, void *ws, size_t ws_size, kiln_pool *pool, kiln_node_state *ns) {
    c->ka.workspace = ws;
    c->ka.workspace_size = ws_size;
    c->ka.pool = pool;
    c->ka.node_state = ns;
}

kiln_status kiln__call_run_host(kiln_call *c, kiln_pool *pool, size_t max_workspace) {
    const kiln_node *n = c->n;
    if (!n->op->cpu)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): the op has no host kernel", n->name, n->op->name);
    for (int i = 0; i < n->n_out; i++) c->out_t[i].data = NULL;
    kiln_status s = KILN_OK;
    void *ws = NULL;
    size_t ws_size = n->op->workspace ? n->op->workspace(&c->ia) : 0;
    if (ws_size > max_workspace)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): its host kernel needs %zu bytes of workspace "
                         "(at most %zu here)", n->name, n->op->name, ws_size, max_workspace);
    for (int i = 0; i < n->n_out && s == KILN_OK; i++) {
        size_t nb = kiln__value_nbytes(&c->out[i]);
        if (!nb && kiln__numel(c->out[i].rank, c->out[i].dims) > 0)
            s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (%s): output %d is too large", n->name,
                          n->op->name, i);
        else if (!(c->out_t[i].data = kiln__aligned_alloc(nb)))
            s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory running node '%s' (%s) on the host", n->name,
                          n->op->name);
    }
    if (s == KILN_OK && ws_size && !(ws = kiln__aligned_alloc(ws_size)))
        s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory running node '%s' (%s) on the host", n->name,
                      n->op->name);
    if (s == KILN_OK) {
        kiln__call_args(c, ws, ws_size, pool, NULL);
        s = n->op->cpu(&c->ka);
        kiln__call_args(c, NULL, 0, pool, NULL);
    }
    kiln__aligned_free(ws);
    for (int i = 0; i < n->n_out && s != KILN_OK; i++) {
        kiln__aligned_free(c->out_t[i].data);
        c->out_t[i].data = NULL;
    }
    return s;
}
