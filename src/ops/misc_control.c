/* misc_control.c -- control flow: If, Loop, Scan (see misc_control.h for
 * how their subgraphs are stored).
 *
 * Output shapes of these ops depend on the whole computation (which branch
 * runs, how many iterations, what shapes the loop-carried values take), so
 * at run time `infer` runs the subgraphs and keeps the results in the
 * node's state, and the kernel only copies them into the outputs. Without
 * a node state (build time, a context's memory planning) `infer` infers the
 * subgraphs' shapes from the node's input infos, without running them
 * (dims it cannot know stay unknown: the run sizes those outputs), and a
 * kernel called without a state computes by itself.
 *
 * A subgraph runs on the CPU with the ops' CPU kernels, node by node, with
 * exact shapes inferred from its actual inputs; its intermediate tensors are
 * freed after their last reader. */
#include "ops/misc_control.h"


#include <stdio.h>

#define CF_MAX_SCAN 32 /* scan inputs / outputs a Scan node may have */
#define CF_MAX_DEPTH 32 /* subgraphs nested in subgraphs (as the importer allows) */

typedef struct cf_attrs {
    int32_t n_onnx_in; /* ONNX inputs of the node (trailing absent ones dropped) */
    int32_t n_scan_in; /* Scan: num_scan_inputs */
    int32_t batched; /* Scan-8: batch axis 0, sequence_lens input first */
    int32_t n_in_axes, n_in_dirs, n_out_axes, n_out_dirs; /* counts given (0: defaults) */
    int32_t in_axes[CF_MAX_SCAN], in_dirs[CF_MAX_SCAN];
    int32_t out_axes[CF_MAX_SCAN], out_dirs[CF_MAX_SCAN];
} cf_attrs;
KILN_ATTRS_SIZE(cf_attrs, 540); KILN_ATTRS_AT(cf_attrs, n_onnx_in, 0); KILN_ATTRS_AT(cf_attrs, n_scan_in, 4);
KILN_ATTRS_AT(cf_attrs, batched, 8); KILN_ATTRS_AT(cf_attrs, n_in_axes, 12);
KILN_ATTRS_AT(cf_attrs, n_in_dirs, 16); KILN_ATTRS_AT(cf_attrs, n_out_axes, 20);
KILN_ATTRS_AT(cf_attrs, n_out_dirs, 24); KILN_ATTRS_AT(cf_attrs, in_axes, 28);
KILN_ATTRS_AT(cf_attrs, in_dirs, 156); KILN_ATTRS_AT(cf_attrs, out_axes, 284);
KILN_ATTRS_AT(cf_attrs, out_dirs, 412);

/* ---- tensors owned or borrowed during a run -------------------------------- */

/* What the tensors of one engine node's subgraph runs hold, against the
 * context's memory limit (kiln_context_set_memory_limit): a Loop whose
 * carried value doubles every iteration took 19.7 GB under a 64 MiB limit
 * before these were counted. */
typedef struct cf_mem {
    size_t limit; /* 0: none */
    size_t used;
} cf_mem;

typedef struct cf_val {
    kiln_tensor t;
    bool owned; /* t.data was kiln__aligned_alloc'd here */
    bool set;
    cf_mem *mem;    /* where `charged` is counted (NULL: not counted) */
    size_t charged; /* bytes counted in mem while owned */
} cf_val;

static void val_drop(cf_val *v) {
    if (v->owned) {
        kiln__aligned_free(v->t.data);
        if (v->mem) v->mem->used -= v->charged;
    }
    memset(v, 0, sizeof *v);
}

/* Room for `bytes` more in mem (NULL: not counted). */
static kiln_status mem_take(cf_mem *mem, size_t bytes, const char *node) {
    if (!mem) return KILN_OK;
    if (mem->limit && bytes > mem->limit - mem->used)
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY,
                         "node '%s': its subgraphs' tensors need %zu more bytes, but they hold %zu "
                         "and the context's memory limit leaves them %zu bytes",
                         node, bytes, mem->used, mem->limit);
    mem->used += bytes;
    return KILN_OK;
}

static size_t tensor_bytes(const kiln_tensor *t) {
    kiln_tinfo i = {.dtype = t->dtype, .rank = t->rank};
    memcpy(i.dims, t->dims, sizeof i.dims);
    return kiln__value_nbytes(&i);
}

/* A new owned tensor of this type (zeroed). */
static kiln_status val_alloc(cf_val *v, cf_mem *mem, kiln_dtype dt, int rank,
                             const int64_t *dims, const char *node) {
    memset(v, 0, sizeof *v);
    v->t.dtype = dt;
    v->t.rank = rank;
    if (rank) memcpy(v->t.dims, dims, (size_t)rank * sizeof *dims);
    size_t nb = tensor_bytes(&v->t);
    if (!nb && kiln__numel(rank, dims) > 0) {
        char sh[160];
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s': a tensor of shape %s is too large",
                         node, kiln__shape_str(rank, dims, sh, sizeof sh));
    }
    KILN_TRY(mem_take(mem, nb, node));
    v->t.data = kiln__aligned_alloc(nb ? nb : 1);
    if (!v->t.data) {
        if (mem) mem->used -= nb;
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s': out of memory (%zu bytes)", node, nb);
    }
    memset(v->t.data, 0, nb ? nb : 1);
    v->owned = v->set = true;
    v->mem = mem;
    v->charged = mem ? nb : 0;
    return KILN_OK;
}

/* Makes v own its bytes (copies borrowed ones). */
static kiln_status val_own(cf_val *v, cf_mem *mem, const char *node) {
    if (v->owned) return KILN_OK;
    cf_val c;
    KILN_TRY(val_alloc(&c, mem, v->t.dtype, v->t.rank, v->t.dims, node));
    size_t nb = tensor_bytes(&v->t);
    if (nb) memcpy(c.t.data, v->t.data, nb);
    *v = c;
    return KILN_OK;
}

static cf_val val_borrow(const kiln_tensor *t) {
    cf_val v = {.t = *t, .owned = false, .set = true};
    return v;
}

/* ---- a runnable subgraph ----------------------------------------------------- */

typedef struct cf_plan {
    kiln_graph *g;
    const kiln_subgraph_io *io; /* what loaded g (frees it) */
    void *blob; /* the constants borrow from it */
    kiln_node_state *ns; /* per node */
    int *last; /* per value: last node reading it (n_nodes: a graph output) */
    cf_mem *mem; /* the state's count (cf_state.mem) */
} cf_plan;

static void plan_free(cf_plan *p) {
    if (p->ns && p->g)
        for (int i = 0; i < p->g->n_nodes; i++)
            if (p->ns[i].p && p->ns[i].free) p->ns[i].free(p->ns[i].p);
    kiln__free(p->ns);
    kiln__free(p->last);
    if (p->g) p->io->free(p->g);
    kiln__aligned_free(p->blob);
    memset(p, 0, sizeof *p);
}

/* The subgraph in a uint8 constant input. */
static kiln_status blob_of(const char *node, const char *what, const void *data, kiln_dtype dt,
                           int rank, const int64_t *dims, size_t *size) {
    if (!data || dt != KILN_DTYPE_UINT8 || rank != 1 || dims[0] < 0)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s': input '%s' must be a constant uint8 vector holding a subgraph",
                         node, what);
    *size = (size_t)dims[0];
    return KILN_OK;
}

/* The subgraph loader the caller gave (kiln_infer_args.sub / kiln_kernel_args.sub). */
static kiln_status need_io(const kiln_subgraph_io *io, const char *node) {
    if (!io)
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s': its subgraphs cannot be loaded here (no loader given)",
                         node);
    return KILN_OK;
}

static kiln_status plan_load(cf_plan *p, const kiln_subgraph_io *io, const char *node, const char *what,
                             const kiln_tensor *t) {
    size_t size = 0;
    KILN_TRY(blob_of(node, what, t->data, t->dtype, t->rank, t->dims, &size));
    char desc[300];
    snprintf(desc, sizeof desc, "node '%s': subgraph '%s'", node, what);
    KILN_TRY(need_io(io, node));
    KILN_TRY(io->unpack(t->data, size, desc, &p->g, &p->blob));
    p->io = io;
    const kiln_graph *g = p->g;
    p->ns = kiln__calloc((size_t)g->n_nodes + 1, sizeof *p->ns);
    p->last = kiln__malloc(((size_t)g->n_values + 1) * sizeof *p->last);
    if (!p->ns || !p->last) {
        plan_free(p);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory loading %s", desc);
    }
    for (int i = 0; i < g->n_values; i++) p->last[i] = -1;
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        if (n->dead) continue;
        if (!n->op->cpu) {
            kiln_status s = KILN_FAIL(KILN_ERR_UNSUPPORTED, "%s: node '%s' (%s) has no CPU kernel",
                                      desc, n->name, n->op->name);
            plan_free(p);
            return s;
        }
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0) p->last[n->in[k]] = ni;
    }
    for (int k = 0; k < g->n_outputs; k++) p->last[g->outputs[k]] = g->n_nodes;
    return KILN_OK;
}

/* plan_node's body, on the call begun for node ni. */
static kiln_status plan_node_call(cf_plan *p, int ni, cf_val *vals, kiln_pool *pool, kiln_call *c) {
    const kiln_node *n = &p->g->nodes[ni];
    for (int i = 0; i < n->n_in; i++) {
        if (n->in[i] < 0) continue;
        const cf_val *v = &vals[n->in[i]];
        if (!v->set)
            return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s': input %d has no value", n->name, i);
        kiln_tinfo info = {.dtype = v->t.dtype, .rank = v->t.rank, .data = v->t.data};
        memcpy(info.dims, v->t.dims, sizeof info.dims);
        kiln__call_input(c, i, &info, v->t.data);
    }
    KILN_TRY(kiln__call_infer(c, true, &p->ns[ni], true));
    cf_val res[KILN_CALL_MAX];
    memset(res, 0, sizeof res);
    kiln_status s = KILN_OK;
    void *ws = NULL;
    for (int i = 0; i < n->n_out; i++) {
        const kiln_tinfo *t = &c->out[i];
        if ((s = val_alloc(&res[i], p->mem, t->dtype, t->rank, t->dims, n->name)) != KILN_OK) goto done;
        c->out_tp[i] = &res[i].t;
    }
    size_t ws_size = n->op->workspace ? n->op->workspace(&c->ia) : 0;
    if (ws_size && !(ws = kiln__aligned_alloc(ws_size))) {
        s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s': out of memory (%zu bytes of workspace)",
                      n->name, ws_size);
        goto done;
    }
    kiln__call_args(c, ws, ws_size, pool, &p->ns[ni]);
    if ((s = n->op->cpu(&c->ka)) != KILN_OK) goto done;
    for (int i = 0; i < n->n_out; i++) {
        if (n->out[i] < 0) continue;
        val_drop(&vals[n->out[i]]);
        vals[n->out[i]] = res[i];
        res[i].owned = false;
    }
done:
    for (int i = 0; i < n->n_out; i++) val_drop(&res[i]);
    kiln__aligned_free(ws);
    return s;
}

/* Runs node ni of the plan on vals (outputs become owned values). */
static kiln_status plan_node(cf_plan *p, int ni, cf_val *vals, kiln_pool *pool) {
    kiln_call c;
    KILN_TRY(kiln__call_begin(&c, p->g, &p->g->nodes[ni]));
    kiln_status s = plan_node_call(p, ni, vals, pool, &c);
    kiln__call_end(&c);
    return s;
}

/* Bits lead..lead+n-1 (those below 64). */
static uint64_t carried_mask(int lead, int n) {
    uint64_t m = 0;
    for (int k = lead; k < lead + n && k < 64; k++) m |= (uint64_t)1 << k;
    return m;
}

/* Runs the plan on inputs in[0..n_inputs) (borrowed; their dtypes must
 * match what the subgraph declares, and their shapes too, except the dims of
 * the inputs in `loose` (bit k: input k), whose declared shape is only a hint:
 * a Loop's loop-carried values may change shape from one iteration to the
 * next) and fills res[0..n_outputs) with owned tensors. */
static kiln_status plan_run(cf_plan *p, const char *node, const char *what, const cf_val *in,
                            uint64_t loose, kiln_pool *pool, cf_val *res) {
    const kiln_graph *g = p->g;
    char s1[160], s2[160];
    for (int k = 0; k < g->n_inputs; k++) {
        const kiln_value *v = &g->values[g->inputs[k]];
        const kiln_tensor *t = &in[k].t;
        if (v->info.dtype != KILN_DTYPE_UNDEFINED && v->info.dtype != t->dtype)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s': subgraph '%s' input '%s' is %s, got %s",
                             node, what, v->name, kiln_dtype_name(v->info.dtype),
                             kiln_dtype_name(t->dtype));
        bool ok = v->info.rank < 0 || v->info.rank == t->rank;
        bool dims = k >= 64 || !(loose >> k & 1);
        for (int d = 0; ok && dims && v->info.rank > 0 && d < t->rank; d++)
            ok = v->info.dims[d] < 0 || v->info.dims[d] == t->dims[d];
        if (!ok)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s': subgraph '%s' input '%s' has shape %s, got %s", node, what,
                             v->name, kiln__shape_str(v->info.rank, v->info.dims, s1, sizeof s1),
                             kiln__shape_str(t->rank, t->dims, s2, sizeof s2));
    }
    cf_val *vals = kiln__calloc((size_t)g->n_values + 1, sizeof *vals);
    if (!vals) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s': out of memory", node);
    for (int i = 0; i < g->n_values; i++) {
        const kiln_value *v = &g->values[i];
        if (!(v->flags & KILN_VALUE_CONST)) continue;
        kiln_tensor t = {.dtype = v->info.dtype, .rank = v->info.rank, .data = v->data};
        memcpy(t.dims, v->info.dims, sizeof t.dims);
        vals[i] = val_borrow(&t);
    }
    for (int k = 0; k < g->n_inputs; k++) vals[g->inputs[k]] = val_borrow(&in[k].t);
    kiln_status s = KILN_OK;
    for (int ni = 0; ni < g->n_nodes && s == KILN_OK; ni++) {
        const kiln_node *n = &g->nodes[ni];
        if (n->dead) continue;
        s = plan_node(p, ni, vals, pool);
        /* free what no later node reads */
        for (int k = 0; k < n->n_in && s == KILN_OK; k++)
            if (n->in[k] >= 0 && p->last[n->in[k]] == ni) val_drop(&vals[n->in[k]]);
        for (int k = 0; k < n->n_out && s == KILN_OK; k++)
            if (n->out[k] >= 0 && p->last[n->out[k]] < 0) val_drop(&vals[n->out[k]]);
    }
    for (int k = 0; k < g->n_outputs && s == KILN_OK; k++) {
        cf_val *v = &vals[g->outputs[k]];
        if (!v->set) {
            s = KILN_FAIL(KILN_ERR_MODEL, "node '%s': subgraph '%s' output %d has no value", node,
                          what, k);
            break;
        }
        bool later = false; /* the same value listed again: copy this one */
        for (int j = k + 1; j < g->n_outputs; j++) later |= g->outputs[j] == g->outputs[k];
        res[k] = *v;
        if (v->owned && !later) { /* moved */
            v->owned = false;
            v->set = false;
            v->t.data = NULL;
        } else {
            res[k].owned = false;
            if ((s = val_own(&res[k], p->mem, node)) != KILN_OK) {
                memset(&res[k], 0, sizeof res[k]);
                break;
            }
        }
    }
    if (s != KILN_OK)
        for (int k = 0; k < g->n_outputs; k++) val_drop(&res[k]);
    for (int i = 0; i < g->n_values; i++) val_drop(&vals[i]);
    kiln__free(vals);
    return s;
}

/* ---- per (context, node) state ------------------------------------------------ */

typedef struct cf_state {
    cf_plan plan[2];
    cf_val *pending; /* results computed by infer, for the kernel */
    int n_pending;
    int depth; /* 0: a node of the engine's plan; k: inside k subgraphs */
    const kiln_subgraph_io *io; /* the caller's subgraph loader */
    cf_mem own; /* depth 0: the count of the whole tree of states */
    cf_mem *mem; /* &own at depth 0, else the parent's mem */
} cf_state;

static void pending_drop(cf_state *st) {
    for (int i = 0; i < st->n_pending; i++) val_drop(&st->pending[i]);
    kiln__free(st->pending);
    st->pending = NULL;
    st->n_pending = 0;
}

static void state_free(void *p) {
    cf_state *st = p;
    if (!st) return;
    pending_drop(st);
    plan_free(&st->plan[0]);
    plan_free(&st->plan[1]);
    kiln__free(st);
}

/* The node's state: kept in ns (NULL: a temporary one, *tmp = true). */
static kiln_status state_get(kiln_node_state *ns, const kiln_subgraph_io *io, cf_state **out, bool *tmp) {
    *tmp = false;
    if (ns && ns->p) {
        *out = ns->p;
        if (io) (*out)->io = io;
        return KILN_OK;
    }
    cf_state *st = kiln__calloc(1, sizeof *st);
    if (!st) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    st->io = io;
    st->mem = &st->own;
    if (ns) {
        ns->p = st;
        ns->free = state_free;
    } else {
        *tmp = true;
    }
    *out = st;
    return KILN_OK;
}

/* The plan of subgraph k held in input `in`, loaded on first use. */
static bool is_control_flow(const kiln_node *n) {
    int id = kiln__op_id_of(n->op);
    return id == KILN_OP_If || id == KILN_OP_Loop || id == KILN_OP_Scan;
}

/* The plan of subgraph k held in input `in`, loaded on first use. The
 * control-flow nodes inside it get their states now, one level deeper, so
 * that subgraphs nested in engine files (where the importer's limit did not
 * apply) cannot recurse without bound. */
static kiln_status state_plan(cf_state *st, int k, const char *node, const char *what,
                              const kiln_tensor *in, cf_plan **out) {
    if (!st->plan[k].g) {
        if (st->depth >= CF_MAX_DEPTH)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s': subgraphs are nested more than %d deep",
                             node, CF_MAX_DEPTH);
        cf_plan *p = &st->plan[k];
        KILN_TRY(plan_load(p, st->io, node, what, in));
        p->mem = st->mem;
        for (int ni = 0; ni < p->g->n_nodes; ni++) {
            if (p->g->nodes[ni].dead || !is_control_flow(&p->g->nodes[ni])) continue;
            cf_state *child = kiln__calloc(1, sizeof *child);
            if (!child) {
                plan_free(p);
                return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
            }
            child->depth = st->depth + 1;
            child->mem = st->mem;
            child->io = p->g->sub ? p->g->sub : st->io;
            p->ns[ni].p = child;
            p->ns[ni].free = state_free;
        }
    }
    *out = &st->plan[k];
    return KILN_OK;
}

/* What the three ops share: run the op (exec) from infer (keeping the
 * results) or from the kernel (copying them out). */
typedef kiln_status (*cf_exec_fn)(const cf_attrs *at, const char *node, int n_in,
                                  const kiln_tensor *const *in, int n_out, cf_state *st,
                                  kiln_pool *pool, cf_val *res);

static kiln_status cf_infer_runtime(const kiln_infer_args *a, cf_exec_fn exec) {
    kiln_tensor tin[64];
    const kiln_tensor *tp[64];
    if (a->n_in > 64 || a->n_out > 64)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': more than 64 inputs or outputs",
                         a->node_name);
    for (int i = 0; i < a->n_in; i++) {
        tp[i] = NULL;
        if (!a->in[i]) continue;
        tin[i].dtype = a->in[i]->dtype;
        tin[i].rank = a->in[i]->rank;
        memcpy(tin[i].dims, a->in[i]->dims, sizeof tin[i].dims);
        tin[i].data = (void *)a->in[i]->data;
        tp[i] = &tin[i];
    }
    cf_state *st = NULL;
    bool tmp;
    KILN_TRY(state_get(a->node_state, a->sub, &st, &tmp));
    pending_drop(st);
    if (!st->depth && a->node_state) st->own.limit = a->node_state->mem_budget;
    cf_val *res = kiln__calloc((size_t)a->n_out + 1, sizeof *res);
    kiln_status s = res ? exec(a->attrs, a->node_name, a->n_in, tp, a->n_out, st, NULL, res)
                        : KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (s == KILN_OK) {
        for (int i = 0; i < a->n_out; i++) {
            a->out[i]->dtype = res[i].t.dtype;
            a->out[i]->rank = res[i].t.rank;
            memcpy(a->out[i]->dims, res[i].t.dims, sizeof a->out[i]->dims);
            a->out[i]->data = NULL;
        }
    }
    if (s == KILN_OK && !tmp) {
        st->pending = res;
        st->n_pending = a->n_out;
    } else if (res) {
        for (int i = 0; i < a->n_out; i++) val_drop(&res[i]);
        kiln__free(res);
    }
    if (tmp) state_free(st);
    return s;
}

static kiln_status cf_kernel(const kiln_kernel_args *a, cf_exec_fn exec) {
    cf_state *st = NULL;
    bool tmp;
    KILN_TRY(state_get(a->node_state, a->sub, &st, &tmp));
    kiln_status s = KILN_OK;
    cf_val *res = NULL;
    if (st->pending && st->n_pending == a->n_out) {
        res = st->pending;
        st->pending = NULL;
        st->n_pending = 0;
    } else {
        pending_drop(st);
        if (!st->depth && a->node_state) st->own.limit = a->node_state->mem_budget;
        res = kiln__calloc((size_t)a->n_out + 1, sizeof *res);
        s = res ? exec(a->attrs, a->node_name, a->n_in, a->in, a->n_out, st, a->pool, res)
                : KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    char s1[160], s2[160];
    for (int i = 0; i < a->n_out && s == KILN_OK; i++) {
        const kiln_tensor *r = &res[i].t, *o = a->out[i];
        bool same = r->dtype == o->dtype && r->rank == o->rank &&
                    !memcmp(r->dims, o->dims, (size_t)r->rank * sizeof *r->dims);
        if (!same) {
            s = KILN_FAIL(
                KILN_ERR_INTERNAL, "node '%s': output %d is %s%s, expected %s%s", a->node_name, i,
                kiln_dtype_name(r->dtype), kiln__shape_str(r->rank, r->dims, s1, sizeof s1),
                kiln_dtype_name(o->dtype), kiln__shape_str(o->rank, o->dims, s2, sizeof s2));
            break;
        }
        size_t nb = tensor_bytes(r);
        if (nb) memcpy(o->data, r->data, nb);
    }
    if (res) {
        for (int i = 0; i < a->n_out; i++) val_drop(&res[i]);
        kiln__free(res);
    }
    if (tmp) state_free(st);
    return s;
}

/* ---- build-time inference of a subgraph ------------------------------------------ */

/* Symbolic dims belong to one graph's symbol table: across the boundary
 * they become unknown. */
static void unsym(kiln_tinfo *t) {
    for (int d = 0; d < t->rank; d++)
        if (KILN_DIM_IS_SYM(t->dims[d])) t->dims[d] = KILN_DIM_UNKNOWN;
}

/* Infers subgraph `blob` with input infos `ins` (n of them; NULL or
 * unknown entries keep what the subgraph declares, but only the rank for the
 * inputs in `loose`, as in plan_run) and copies the infos of its outputs
 * into outs (n_outs of them). The outputs in `loose_out` keep only the rank
 * they declare: inference would otherwise fill the dims it cannot know with
 * the declared ones. */
static kiln_status infer_subgraph(const kiln_subgraph_io *io, const char *node, const char *what,
                                  const kiln_tinfo *blob, int n, const kiln_tinfo *const *ins,
                                  uint64_t loose, uint64_t loose_out, int n_outs,
                                  kiln_tinfo *outs) {
    size_t size = 0;
    KILN_TRY(blob_of(node, what, blob->data, blob->dtype, blob->rank, blob->dims, &size));
    char desc[300];
    snprintf(desc, sizeof desc, "node '%s': subgraph '%s'", node, what);
    kiln_graph *g;
    void *b;
    KILN_TRY(need_io(io, node));
    KILN_TRY(io->unpack(blob->data, size, desc, &g, &b));
    kiln_status s = KILN_OK;
    if (g->n_inputs != n || g->n_outputs != n_outs) {
        s = KILN_FAIL(KILN_ERR_MODEL,
                      "%s has %d inputs and %d outputs; the node gives %d and reads %d", desc,
                      g->n_inputs, g->n_outputs, n, n_outs);
        goto done;
    }
    for (int k = 0; k < n; k++) {
        kiln_tinfo *t = &g->values[g->inputs[k]].info;
        if (k < 64 && (loose >> k & 1))
            for (int d = 0; d < t->rank; d++) t->dims[d] = KILN_DIM_UNKNOWN;
        if (!ins[k] || (ins[k]->dtype == KILN_DTYPE_UNDEFINED && ins[k]->rank < 0)) continue;
        kiln_tinfo x = *ins[k];
        unsym(&x);
        if (t->dtype != KILN_DTYPE_UNDEFINED && x.dtype != KILN_DTYPE_UNDEFINED &&
            t->dtype != x.dtype) {
            s = KILN_FAIL(KILN_ERR_MODEL, "%s: input '%s' is %s, but the node gives %s", desc,
                          g->values[g->inputs[k]].name, kiln_dtype_name(t->dtype),
                          kiln_dtype_name(x.dtype));
            goto done;
        }
        if (x.dtype == KILN_DTYPE_UNDEFINED) x.dtype = t->dtype;
        if (x.rank < 0 && t->rank >= 0) {
            x.rank = t->rank;
            memcpy(x.dims, t->dims, sizeof x.dims);
            unsym(&x);
        }
        *t = x;
    }
    for (int k = 0; k < n_outs && k < 64; k++) { /* (not a constant's or an input's) */
        kiln_value *v = &g->values[g->outputs[k]];
        if ((loose_out >> k & 1) && !(v->flags & (KILN_VALUE_CONST | KILN_VALUE_INPUT)))
            for (int d = 0; d < v->info.rank; d++) v->info.dims[d] = KILN_DIM_UNKNOWN;
    }
    /* forget inferred shapes of the subgraph's intermediate values */
    for (int i = 0; i < g->n_values; i++) {
        kiln_value *v = &g->values[i];
        if ((v->flags & (KILN_VALUE_CONST | KILN_VALUE_INPUT | KILN_VALUE_OUTPUT))) continue;
        v->info.rank = -1;
    }
    if ((s = kiln__graph_infer(g)) != KILN_OK) {
        s = kiln__fail_prefix(s, "%s", desc);
        goto done;
    }
    for (int k = 0; k < n_outs; k++) {
        outs[k] = g->values[g->outputs[k]].info;
        outs[k].data = NULL;
        unsym(&outs[k]);
    }
done:
    io->free(g);
    kiln__aligned_free(b);
    return s;
}

/* Whether two infos have the same rank and dims (known or not). */
static bool same_shape(const kiln_tinfo *a, const kiln_tinfo *b) {
    if (a->rank != b->rank) return false;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

/* The shape that covers both: differing dims unknown, differing ranks unknown. */
static void widen(kiln_tinfo *a, const kiln_tinfo *b) {
    if (a->dtype == KILN_DTYPE_UNDEFINED) a->dtype = b->dtype;
    if (a->rank != b->rank) {
        a->rank = -1;
        return;
    }
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) a->dims[d] = KILN_DIM_UNKNOWN;
}

/* Index of the first outer value among the node's inputs (after one
 * subgraph and the ONNX inputs). */
static int cf_free_start(const cf_attrs *at) { return 1 + at->n_onnx_in; }

/* The attributes (cf_validate checked their values) against the node: its
 * ONNX inputs after its subgraphs, at most 64 inputs and outputs. */
static kiln_status cf_check(const cf_attrs *at, const char *node, int n_in, int n_graphs,
                            int n_out) {
    bool ok = at->n_onnx_in <= n_in - n_graphs && n_out >= 0 && n_out <= 64 && n_in <= 64;
    if (!ok) return KILN_FAIL(KILN_ERR_MODEL, "node '%s': invalid control-flow attributes", node);
    return KILN_OK;
}

/* n_onnx_in >= 0; num_scan_inputs in 0..32 (Scan: at least 1) and at most
 * the ONNX inputs; batched (Scan-8) 0 or 1; the scan axes and directions
 * lists within their arrays, axes in [-9, 8], directions 0 or 1. */
static kiln_status cf_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const cf_attrs *at = attrs;
    bool scan = !strcmp(op->name, "Scan");
    KILN_TRY(kiln__check_attr(op, node, "ONNX inputs", at->n_onnx_in, 0, 64));
    KILN_TRY(kiln__check_attr(op, node, "num_scan_inputs", at->n_scan_in, scan ? 1 : 0,
                              scan ? (at->n_onnx_in < CF_MAX_SCAN ? at->n_onnx_in : CF_MAX_SCAN) : 0));
    KILN_TRY(kiln__check_attr(op, node, "batched (Scan-8)", at->batched, 0, scan ? 1 : 0));
    const struct {
        const char *name;
        int32_t n;
        const int32_t *v;
        int32_t lo, hi;
    } lists[4] = {
        {"scan_input_axes", at->n_in_axes, at->in_axes, -KILN_MAX_RANK - 1, KILN_MAX_RANK},
        {"scan_input_directions", at->n_in_dirs, at->in_dirs, 0, 1},
        {"scan_output_axes", at->n_out_axes, at->out_axes, -KILN_MAX_RANK - 1, KILN_MAX_RANK},
        {"scan_output_directions", at->n_out_dirs, at->out_dirs, 0, 1},
    };
    for (int l = 0; l < 4; l++) {
        KILN_TRY(kiln__check_attr(op, node, lists[l].name, lists[l].n, 0, scan ? CF_MAX_SCAN : 0));
        if (l < 2 && lists[l].n && lists[l].n != at->n_scan_in) /* one per scan input */
            return KILN_VALIDATE_FAIL(op, node, "attribute '%s' has %d entries for %d scan inputs",
                                      lists[l].name, (int)lists[l].n, (int)at->n_scan_in);
        for (int i = 0; i < lists[l].n; i++)
            KILN_TRY(kiln__check_attr(op, node, lists[l].name, lists[l].v[i], lists[l].lo,
                                      lists[l].hi));
    }
    return KILN_OK;
}

/* ---- If ------------------------------------------------------------------------ */

static kiln_status if_import(kiln_import_ctx *ic, void *attrs) {
    cf_attrs *at = attrs;
    at->n_onnx_in = kiln_import_num_inputs(ic);
    if (at->n_onnx_in != 1)
        return KILN_IMPORT_FAIL(ic, "If takes one input (cond), got %d", at->n_onnx_in);
    return KILN_OK;
}

static kiln_status read_cond(const char *node, const char *what, const kiln_tensor *t, bool *out) {
    if (kiln__tensor_numel(t) != 1) {
        char sh[160];
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s': %s must hold one value, got shape %s", node,
                         what, kiln__shape_str(t->rank, t->dims, sh, sizeof sh));
    }
    *out = kiln__load_f64(t->dtype, t->data, 0) != 0;
    return KILN_OK;
}

static kiln_status if_exec(const cf_attrs *at, const char *node, int n_in,
                           const kiln_tensor *const *in, int n_out, cf_state *st, kiln_pool *pool,
                           cf_val *res) {
    KILN_TRY(cf_check(at, node, n_in, 2, n_out));
    int fs = cf_free_start(at) + 1; /* two subgraphs */
    bool c = false;
    KILN_TRY(read_cond(node, "cond", in[2], &c));
    int k = c ? 0 : 1;
    const char *what = c ? "then_branch" : "else_branch";
    cf_plan *p;
    KILN_TRY(state_plan(st, k, node, what, in[k], &p));
    int n_free = n_in - fs;
    if (p->g->n_inputs != n_free || p->g->n_outputs != n_out)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s': %s has %d inputs and %d outputs; the node gives %d and has %d",
                         node, what, p->g->n_inputs, p->g->n_outputs, n_free, n_out);
    cf_val ins[64];
    for (int i = 0; i < n_free; i++) ins[i] = val_borrow(in[fs + i]);
    return plan_run(p, node, what, ins, 0, pool, res);
}

static kiln_status if_infer(const kiln_infer_args *a) {
    if (a->runtime && a->node_state) return cf_infer_runtime(a, if_exec);
    const cf_attrs *at = a->attrs;
    KILN_TRY(cf_check(at, a->node_name, a->n_in, 2, a->n_out));
    int fs = cf_free_start(at) + 1;
    if (a->n_in < fs || at->n_onnx_in != 1)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (If): malformed inputs", a->node_name);
    kiln_tinfo t[64], e[64];
    if (a->n_out > 64)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': too many outputs", a->node_name);
    KILN_TRY(infer_subgraph(a->sub, a->node_name, "then_branch", a->in[0], a->n_in - fs, a->in + fs,
                            0, 0, a->n_out, t));
    KILN_TRY(infer_subgraph(a->sub, a->node_name, "else_branch", a->in[1], a->n_in - fs, a->in + fs,
                            0, 0, a->n_out, e));
    for (int k = 0; k < a->n_out; k++) {
        if (t[k].dtype != KILN_DTYPE_UNDEFINED && e[k].dtype != KILN_DTYPE_UNDEFINED &&
            t[k].dtype != e[k].dtype)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (If): output %d is %s in then_branch but %s in else_branch",
                             a->node_name, k, kiln_dtype_name(t[k].dtype),
                             kiln_dtype_name(e[k].dtype));
        widen(&t[k], &e[k]);
        *a->out[k] = t[k];
    }
    return KILN_OK;
}

static kiln_status if_cpu(const kiln_kernel_args *a) { return cf_kernel(a, if_exec); }

/* clang-format off */
const kiln_op_def kiln_op_If = {
    .name = "If", .domain = "", .since = 1, .min_inputs = 3, .max_inputs = -1, .min_outputs = 1,
    .max_outputs = -1, .flags = KILN_OP_FLAG_NO_FOLD, .attr_size = sizeof(cf_attrs),
    .host_inputs = ~0u, .import = if_import, .validate = cf_validate, .infer = if_infer, .cpu = if_cpu,
};
/* clang-format on */

/* ---- Loop ---------------------------------------------------------------------- */

static kiln_status loop_import(kiln_import_ctx *ic, void *attrs) {
    cf_attrs *at = attrs;
    at->n_onnx_in = kiln_import_num_inputs(ic);
    return KILN_OK;
}

/* Appends the bytes of t to a growing scan output (elements of the first
 * iteration's shape). */
typedef struct cf_scan_acc {
    cf_val first; /* shape and dtype of one element (data unused) */
    unsigned char *data;
    size_t len, cap;
    int64_t count;
} cf_scan_acc;

static kiln_status acc_append(cf_scan_acc *acc, cf_mem *mem, const kiln_tensor *t,
                              const char *node, int k) {
    char s1[160], s2[160];
    if (!acc->count) {
        acc->first.t = *t;
        acc->first.t.data = NULL;
    } else if (t->dtype != acc->first.t.dtype || t->rank != acc->first.t.rank ||
               memcmp(t->dims, acc->first.t.dims, (size_t)t->rank * sizeof *t->dims)) {
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s': scan output %d is %s%s in iteration %lld but was %s%s before",
                         node, k, kiln_dtype_name(t->dtype),
                         kiln__shape_str(t->rank, t->dims, s1, sizeof s1), (long long)acc->count,
                         kiln_dtype_name(acc->first.t.dtype),
                         kiln__shape_str(acc->first.t.rank, acc->first.t.dims, s2, sizeof s2));
    }
    if (t->rank >= KILN_MAX_RANK)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': scan output %d would exceed rank %d",
                         node, k, KILN_MAX_RANK);
    size_t nb = tensor_bytes(t);
    if (acc->len + nb > acc->cap) {
        size_t cap = acc->cap ? acc->cap : 256;
        while (cap < acc->len + nb) {
            if (cap > SIZE_MAX / 2)
                return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s': scan output too large", node);
            cap *= 2;
        }
        KILN_TRY(mem_take(mem, cap - acc->cap, node));
        unsigned char *d = kiln__realloc(acc->data, cap);
        if (!d) {
            if (mem) mem->used -= cap - acc->cap;
            return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s': out of memory", node);
        }
        acc->data = d;
        acc->cap = cap;
    }
    if (nb) memcpy(acc->data + acc->len, t->data, nb);
    acc->len += nb;
    acc->count++;
    return KILN_OK;
}

/* The stacked output [count, element...]; with no element seen, `empty`
 * gives the element type (unknown dims count as 0). */
static kiln_status acc_finish(cf_scan_acc *acc, cf_mem *mem, const kiln_tinfo *empty,
                              const char *node, cf_val *out) {
    int64_t dims[KILN_MAX_RANK];
    kiln_dtype dt;
    int rank;
    if (acc->count) {
        dt = acc->first.t.dtype;
        rank = acc->first.t.rank + 1;
        dims[0] = acc->count;
        memcpy(dims + 1, acc->first.t.dims, (size_t)acc->first.t.rank * sizeof *dims);
    } else {
        dt = empty->dtype != KILN_DTYPE_UNDEFINED ? empty->dtype : KILN_DTYPE_FLOAT32;
        rank = empty->rank >= 0 && empty->rank < KILN_MAX_RANK ? empty->rank + 1 : 1;
        dims[0] = 0;
        for (int d = 1; d < rank; d++) dims[d] = empty->dims[d - 1] >= 0 ? empty->dims[d - 1] : 0;
    }
    KILN_TRY(val_alloc(out, mem, dt, rank, dims, node));
    if (acc->len) memcpy(out->t.data, acc->data, acc->len);
    return KILN_OK;
}

static kiln_status loop_exec(const cf_attrs *at, const char *node, int n_in,
                             const kiln_tensor *const *in, int n_out, cf_state *st, kiln_pool *pool,
                             cf_val *res) {
    KILN_TRY(cf_check(at, node, n_in, 1, n_out));
    int n_carry = at->n_onnx_in > 2 ? at->n_onnx_in - 2 : 0;
    int fs = cf_free_start(at), n_free = n_in - fs;
    int n_scan = n_out - n_carry;
    if (n_free < 0 || n_scan < 0 || 2 + n_carry + n_free > 64 || n_out > 63)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Loop): %d loop-carried values but %d outputs",
                         node, n_carry, n_out);
    cf_plan *p;
    KILN_TRY(state_plan(st, 0, node, "body", in[0], &p));
    if (p->g->n_inputs != 2 + n_carry + n_free || p->g->n_outputs != 1 + n_carry + n_scan)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (Loop): the body has %d inputs and %d outputs; it needs %d "
                         "(iteration, cond, %d loop-carried, %d outer) and %d (cond, %d "
                         "loop-carried, %d scan outputs)",
                         node, p->g->n_inputs, p->g->n_outputs, 2 + n_carry + n_free, n_carry,
                         n_free, 1 + n_carry + n_scan, n_carry, n_scan);
    bool have_m = at->n_onnx_in > 0 && in[1], have_cond = at->n_onnx_in > 1 && in[2];
    int64_t max_trip = INT64_MAX;
    bool cond = true;
    if (have_m) {
        if (kiln__tensor_numel(in[1]) != 1 || !kiln__dtype_is_int(in[1]->dtype))
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Loop): M must be one integer", node);
        max_trip = kiln__load_i64(in[1]->dtype, in[1]->data, 0);
    }
    if (have_cond) KILN_TRY(read_cond(node, "cond", in[2], &cond));
    if (!have_m && !have_cond)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (Loop): neither M nor cond is given: the loop would never end",
                         node);

    kiln_status s = KILN_OK;
    cf_val ins[64], out[64];
    cf_val carry[64];
    cf_scan_acc *acc = kiln__calloc((size_t)n_scan + 1, sizeof *acc);
    memset(carry, 0, sizeof carry);
    memset(out, 0, sizeof out);
    cf_val iter_v, cond_v;
    memset(&iter_v, 0, sizeof iter_v);
    memset(&cond_v, 0, sizeof cond_v);
    if (!acc) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s': out of memory", node);
    if ((s = val_alloc(&iter_v, NULL, KILN_DTYPE_INT64, 0, NULL, node)) != KILN_OK) goto done;
    if ((s = val_alloc(&cond_v, NULL, KILN_DTYPE_BOOL, 0, NULL, node)) != KILN_OK) goto done;
    for (int j = 0; j < n_carry; j++) {
        if (!in[3 + j]) {
            s = KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Loop): loop-carried input %d is absent", node,
                          j);
            goto done;
        }
        carry[j] = val_borrow(in[3 + j]);
    }
    for (int64_t i = 0; i < max_trip && cond; i++) {
        *(int64_t *)iter_v.t.data = i;
        *(bool *)cond_v.t.data = cond;
        ins[0] = iter_v;
        ins[1] = cond_v;
        for (int j = 0; j < n_carry; j++) ins[2 + j] = carry[j];
        for (int j = 0; j < n_free; j++) ins[2 + n_carry + j] = val_borrow(in[fs + j]);
        if ((s = plan_run(p, node, "body", ins, carried_mask(2, n_carry), pool, out)) != KILN_OK)
            goto done;
        bool next = false;
        if ((s = read_cond(node, "the body's cond output", &out[0].t, &next)) != KILN_OK) goto done;
        if (have_cond) cond = next;
        for (int j = 0; j < n_carry; j++) {
            val_drop(&carry[j]);
            carry[j] = out[1 + j];
            out[1 + j].owned = false;
        }
        for (int k = 0; k < n_scan; k++)
            if ((s = acc_append(&acc[k], p->mem, &out[1 + n_carry + k].t, node, k)) != KILN_OK) goto done;
        for (int k = 0; k < 1 + n_carry + n_scan; k++) val_drop(&out[k]);
    }
    for (int j = 0; j < n_carry; j++) {
        if ((s = val_own(&carry[j], p->mem, node)) != KILN_OK) goto done;
        res[j] = carry[j];
        carry[j].owned = false;
    }
    for (int k = 0; k < n_scan; k++) {
        const kiln_tinfo *decl = &p->g->values[p->g->outputs[1 + n_carry + k]].info;
        if ((s = acc_finish(&acc[k], p->mem, decl, node, &res[n_carry + k])) != KILN_OK) goto done;
    }
done:
    if (s != KILN_OK)
        for (int k = 0; k < n_out; k++) val_drop(&res[k]);
    for (int k = 0; k < 64; k++) val_drop(&out[k]);
    for (int j = 0; j < n_carry; j++) val_drop(&carry[j]);
    for (int k = 0; k < n_scan; k++) {
        p->mem->used -= acc[k].cap; /* acc_append counted it */
        kiln__free(acc[k].data);
    }
    kiln__free(acc);
    val_drop(&iter_v);
    val_drop(&cond_v);
    return s;
}

/* Build-time inference of a body whose first n_carry inputs after `lead`
 * are loop-carried (outputs after `lead_out` in the same order): a second
 * pass widens carried values whose shape the body changes. With `loose`
 * (Loop), the dims the body declares for its carried inputs are only hints
 * (torch's exporter declares the first iteration's shape): where the node
 * gives no shape they are unknown, so nothing is inferred from them. */
static kiln_status infer_carried(const kiln_infer_args *a, const kiln_tinfo *blob, int n_body_in,
                                 kiln_tinfo *ins, int lead, int n_carry, int lead_out,
                                 kiln_tinfo *outs, int n_body_out, bool loose) {
    const kiln_tinfo *ip[64];
    for (int k = 0; k < n_body_in; k++) ip[k] = &ins[k];
    uint64_t lm = loose ? carried_mask(lead, n_carry) : 0;
    uint64_t lo = loose ? carried_mask(lead_out, n_carry) : 0;
    KILN_TRY(
        infer_subgraph(a->sub, a->node_name, "body", blob, n_body_in, ip, lm, lo, n_body_out, outs));
    bool again = false;
    for (int j = 0; j < n_carry; j++) {
        kiln_tinfo *x = &ins[lead + j];
        const kiln_tinfo *o = &outs[lead_out + j];
        if (x->rank >= 0 && !same_shape(x, o)) {
            widen(x, o);
            again = true;
        }
    }
    if (again)
        KILN_TRY(infer_subgraph(a->sub, a->node_name, "body", blob, n_body_in, ip, lm, lo,
                                n_body_out, outs));
    return KILN_OK;
}

static kiln_status loop_infer(const kiln_infer_args *a) {
    if (a->runtime && a->node_state) return cf_infer_runtime(a, loop_exec);
    const cf_attrs *at = a->attrs;
    KILN_TRY(cf_check(at, a->node_name, a->n_in, 1, a->n_out));
    int n_carry = at->n_onnx_in > 2 ? at->n_onnx_in - 2 : 0;
    int fs = cf_free_start(at), n_free = a->n_in - fs, n_scan = a->n_out - n_carry;
    if (n_free < 0 || n_scan < 0 || 2 + n_carry + n_free > 64 || a->n_out > 63)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Loop): %d loop-carried values but %d outputs",
                         a->node_name, n_carry, a->n_out);
    kiln_tinfo ins[64], outs[64];
    memset(ins, 0, sizeof ins);
    ins[0].dtype = KILN_DTYPE_INT64;
    ins[1].dtype = KILN_DTYPE_BOOL;
    for (int j = 0; j < n_carry; j++) {
        if (a->in[3 + j])
            ins[2 + j] = *a->in[3 + j];
        else
            ins[2 + j].rank = -1;
        ins[2 + j].data = NULL;
    }
    for (int j = 0; j < n_free; j++) {
        if (a->in[fs + j])
            ins[2 + n_carry + j] = *a->in[fs + j];
        else
            ins[2 + n_carry + j].rank = -1;
    }
    KILN_TRY(infer_carried(a, a->in[0], 2 + n_carry + n_free, ins, 2, n_carry, 1, outs,
                           1 + n_carry + n_scan, true));
    for (int j = 0; j < n_carry; j++) { /* the initial value (no iteration) or the body's */
        kiln_tinfo o = outs[1 + j];
        if (o.dtype == KILN_DTYPE_UNDEFINED) o.dtype = ins[2 + j].dtype;
        if (ins[2 + j].rank >= 0 && o.rank >= 0) widen(&o, &ins[2 + j]);
        *a->out[j] = o;
    }
    for (int k = 0; k < n_scan; k++) {
        kiln_tinfo o = outs[1 + n_carry + k];
        if (o.rank >= 0 && o.rank < KILN_MAX_RANK) {
            memmove(o.dims + 1, o.dims, (size_t)o.rank * sizeof *o.dims);
            o.dims[0] = KILN_DIM_UNKNOWN;
            o.rank++;
        } else {
            o.rank = -1;
        }
        *a->out[n_carry + k] = o;
    }
    return KILN_OK;
}

static kiln_status loop_cpu(const kiln_kernel_args *a) { return cf_kernel(a, loop_exec); }

/* clang-format off */
const kiln_op_def kiln_op_Loop = {
    .name = "Loop", .domain = "", .since = 1, .min_inputs = 1, .max_inputs = -1, .min_outputs = 1,
    .max_outputs = -1, .flags = KILN_OP_FLAG_NO_FOLD, .attr_size = sizeof(cf_attrs),
    .host_inputs = ~0u, .import = loop_import, .validate = cf_validate, .infer = loop_infer, .cpu = loop_cpu,
};
/* clang-format on */

/* ---- Scan ---------------------------------------------------------------------- */

static kiln_status read_list(kiln_import_ctx *ic, const char *name, int32_t *dst, int32_t *count,
                             int expect) {
    int64_t buf[CF_MAX_SCAN];
    int n = kiln_attr_ints(ic, name, buf, CF_MAX_SCAN);
    if (n < 0) {
        *count = 0;
        return KILN_OK;
    }
    if (n != expect)
        return KILN_IMPORT_FAIL(ic, "attribute '%s' has %d entries; expected %d", name, n, expect);
    for (int i = 0; i < n; i++) /* out of int32: refused by cf_validate */
        dst[i] = buf[i] < INT32_MIN || buf[i] > INT32_MAX ? INT32_MIN : (int32_t)buf[i];
    *count = n;
    return KILN_OK;
}

static kiln_status scan_import(kiln_import_ctx *ic, void *attrs) {
    cf_attrs *at = attrs;
    at->n_onnx_in = kiln_import_num_inputs(ic);
    at->batched = kiln_import_opset(ic) < 9;
    int64_t m = kiln_attr_int(ic, "num_scan_inputs", -1);
    int n_state_in = at->n_onnx_in - at->batched;
    if (m < 1 || m > CF_MAX_SCAN || m > n_state_in)
        return KILN_IMPORT_FAIL(ic, "num_scan_inputs must be in 1..%d (the inputs), got %lld",
                                n_state_in < CF_MAX_SCAN ? n_state_in : CF_MAX_SCAN, (long long)m);
    at->n_scan_in = (int32_t)m;
    int n_scan_out = kiln_import_num_outputs(ic) - (n_state_in - (int)m);
    if (n_scan_out < 0 || n_scan_out > CF_MAX_SCAN)
        return KILN_IMPORT_FAIL(ic, "%d outputs for %d state variables",
                                kiln_import_num_outputs(ic), n_state_in - (int)m);
    if (at->batched) {
        KILN_TRY(read_list(ic, "directions", at->in_dirs, &at->n_in_dirs, (int)m));
    } else {
        KILN_TRY(read_list(ic, "scan_input_directions", at->in_dirs, &at->n_in_dirs, (int)m));
        KILN_TRY(read_list(ic, "scan_input_axes", at->in_axes, &at->n_in_axes, (int)m));
        KILN_TRY(
            read_list(ic, "scan_output_directions", at->out_dirs, &at->n_out_dirs, n_scan_out));
        KILN_TRY(read_list(ic, "scan_output_axes", at->out_axes, &at->n_out_axes, n_scan_out));
    }
    return KILN_OK;
}

/* Copies slice `idx` along `axis` of t into v (a new tensor without that axis). */
static kiln_status take_slice(const kiln_tensor *t, int axis, int64_t idx, const char *node,
                              cf_val *v) {
    int64_t dims[KILN_MAX_RANK];
    int r = 0;
    for (int d = 0; d < t->rank; d++)
        if (d != axis) dims[r++] = t->dims[d];
    KILN_TRY(val_alloc(v, NULL, t->dtype, r, dims, node));
    size_t es = kiln_dtype_size(t->dtype);
    int64_t outer = 1, inner = 1, n = t->dims[axis];
    for (int d = 0; d < axis; d++) outer *= t->dims[d];
    for (int d = axis + 1; d < t->rank; d++) inner *= t->dims[d];
    size_t ib = (size_t)inner * es;
    const unsigned char *src = t->data;
    unsigned char *dst = v->t.data;
    for (int64_t o = 0; o < outer; o++)
        memcpy(dst + (size_t)o * ib, src + ((size_t)o * (size_t)n + (size_t)idx) * ib, ib);
    return KILN_OK;
}

/* Writes element e as slice `idx` along `axis` of out. */
static void put_slice(kiln_tensor *out, int axis, int64_t idx, const kiln_tensor *e) {
    size_t es = kiln_dtype_size(out->dtype);
    int64_t outer = 1, inner = 1, n = out->dims[axis];
    for (int d = 0; d < axis; d++) outer *= out->dims[d];
    for (int d = axis + 1; d < out->rank; d++) inner *= out->dims[d];
    size_t ib = (size_t)inner * es;
    unsigned char *dst = out->data;
    const unsigned char *src = e->data;
    for (int64_t o = 0; o < outer; o++)
        memcpy(dst + ((size_t)o * (size_t)n + (size_t)idx) * ib, src + (size_t)o * ib, ib);
}

/* One Scan-9 run: states and scan inputs as given (no batch axis). */
static kiln_status scan_run(const cf_attrs *at, const char *node, cf_plan *p, int n_state,
                            const kiln_tensor *const *states, const kiln_tensor *const *scans,
                            int n_free, const kiln_tensor *const *frees, int n_scan_out,
                            kiln_pool *pool, cf_val *res) {
    int m = at->n_scan_in;
    int axes[CF_MAX_SCAN];
    int64_t T = -1;
    char sh[160];
    for (int j = 0; j < m; j++) {
        const kiln_tensor *t = scans[j];
        if (!t)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Scan): scan input %d is absent", node, j);
        int64_t ax = at->n_in_axes ? at->in_axes[j] : 0;
        if (ax < 0) ax += t->rank;
        if (ax < 0 || ax >= t->rank)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (Scan): scan input %d of shape %s has no axis %d", node, j,
                             kiln__shape_str(t->rank, t->dims, sh, sizeof sh),
                             at->n_in_axes ? at->in_axes[j] : 0);
        axes[j] = (int)ax;
        if (T >= 0 && t->dims[ax] != T)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (Scan): scan input %d has %lld steps, input 0 has %lld",
                             node, j, (long long)t->dims[ax], (long long)T);
        T = t->dims[ax];
    }
    kiln_status s = KILN_OK;
    cf_val ins[64], out[64], state[64];
    memset(ins, 0, sizeof ins);
    memset(out, 0, sizeof out);
    memset(state, 0, sizeof state);
    int oaxes[CF_MAX_SCAN];
    for (int j = 0; j < n_state; j++) {
        if (!states[j])
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Scan): state %d is absent", node, j);
        state[j] = val_borrow(states[j]);
    }
    for (int64_t t = 0; t < T; t++) {
        for (int j = 0; j < n_state; j++) ins[j] = state[j];
        for (int j = 0; j < m; j++) {
            int64_t idx = at->n_in_dirs && at->in_dirs[j] ? T - 1 - t : t;
            if ((s = take_slice(scans[j], axes[j], idx, node, &ins[n_state + j])) != KILN_OK)
                goto done;
        }
        for (int j = 0; j < n_free; j++) ins[n_state + m + j] = val_borrow(frees[j]);
        if ((s = plan_run(p, node, "body", ins, 0, pool, out)) != KILN_OK) goto done;
        for (int j = 0; j < m; j++) val_drop(&ins[n_state + j]);
        for (int j = 0; j < n_state; j++) {
            val_drop(&state[j]);
            state[j] = out[j];
            out[j].owned = false;
        }
        for (int k = 0; k < n_scan_out; k++) {
            const kiln_tensor *e = &out[n_state + k].t;
            cf_val *o = &res[n_state + k];
            if (t == 0) {
                int r = e->rank + 1;
                int64_t ax = at->n_out_axes ? at->out_axes[k] : 0;
                if (ax < 0) ax += r;
                if (ax < 0 || ax >= r || r > KILN_MAX_RANK) {
                    s = KILN_FAIL(KILN_ERR_MODEL,
                                  "node '%s' (Scan): scan output %d (rank %d) has no axis %lld",
                                  node, k, e->rank,
                                  (long long)(at->n_out_axes ? at->out_axes[k] : 0));
                    goto done;
                }
                oaxes[k] = (int)ax;
                int64_t dims[KILN_MAX_RANK];
                for (int d = 0, q = 0; d < r; d++) dims[d] = d == ax ? T : e->dims[q++];
                if ((s = val_alloc(o, p->mem, e->dtype, r, dims, node)) != KILN_OK) goto done;
            } else {
                bool ok = e->dtype == o->t.dtype && e->rank + 1 == o->t.rank;
                for (int d = 0, q = 0; ok && d < o->t.rank; d++)
                    if (d != oaxes[k]) ok = o->t.dims[d] == e->dims[q++];
                if (!ok) {
                    s = KILN_FAIL(KILN_ERR_MODEL,
                                  "node '%s' (Scan): scan output %d changes shape in step %lld",
                                  node, k, (long long)t);
                    goto done;
                }
            }
            put_slice(&o->t, oaxes[k], at->n_out_dirs && at->out_dirs[k] ? T - 1 - t : t, e);
        }
        for (int k = 0; k < n_state + n_scan_out; k++) val_drop(&out[k]);
    }
    for (int j = 0; j < n_state; j++) {
        if ((s = val_own(&state[j], p->mem, node)) != KILN_OK) goto done;
        res[j] = state[j];
        state[j].owned = false;
    }
    if (T == 0) {
        for (int k = 0; k < n_scan_out; k++) {
            cf_scan_acc acc;
            memset(&acc, 0, sizeof acc);
            const kiln_tinfo *decl = &p->g->values[p->g->outputs[n_state + k]].info;
            if ((s = acc_finish(&acc, p->mem, decl, node, &res[n_state + k])) != KILN_OK) goto done;
        }
    }
done:
    for (int k = 0; k < 64; k++) {
        val_drop(&out[k]);
        val_drop(&state[k]);
    }
    for (int j = 0; j < m; j++) val_drop(&ins[n_state + j]);
    if (s != KILN_OK)
        for (int k = 0; k < n_state + n_scan_out; k++) val_drop(&res[k]);
    return s;
}

static kiln_status scan_exec(const cf_attrs *at, const char *node, int n_in,
                             const kiln_tensor *const *in, int n_out, cf_state *st, kiln_pool *pool,
                             cf_val *res) {
    KILN_TRY(cf_check(at, node, n_in, 1, n_out));
    int b = at->batched, m = at->n_scan_in;
    int n_state = at->n_onnx_in - b - m, fs = cf_free_start(at), n_free = n_in - fs;
    int n_scan_out = n_out - n_state;
    if (n_state < 0 || n_free < 0 || n_scan_out < 0 || n_scan_out > CF_MAX_SCAN || m < 1 ||
        n_state + m + n_free > 64)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Scan): malformed inputs or outputs", node);
    cf_plan *p;
    KILN_TRY(state_plan(st, 0, node, "body", in[0], &p));
    if (p->g->n_inputs != n_state + m + n_free || p->g->n_outputs != n_out)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (Scan): the body has %d inputs and %d outputs; it needs %d "
                         "(%d states, %d scan inputs, %d outer) and %d",
                         node, p->g->n_inputs, p->g->n_outputs, n_state + m + n_free, n_state, m,
                         n_free, n_out);
    const kiln_tensor *const *states = in + 1 + b, *const *scans = in + 1 + b + n_state;
    const kiln_tensor *const *frees = in + fs;
    if (!b)
        return scan_run(at, node, p, n_state, states, scans, n_free, frees, n_scan_out, pool, res);

    /* Scan-8: axis 0 of every input and output is the batch; each batch
     * item is one Scan-9 run over axis 1 (now 0). */
    const kiln_tensor *lens = in[1];
    int64_t B = -1;
    for (int j = 0; j < n_state + m; j++) {
        const kiln_tensor *t = in[2 + j];
        if (!t || t->rank < (j < n_state ? 1 : 2) || (B >= 0 && t->dims[0] != B))
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (Scan-8): every input needs the same batch axis 0", node);
        B = t->dims[0];
    }
    if (lens) {
        for (int64_t i = 0; i < kiln__tensor_numel(lens); i++) {
            int64_t L = kiln__load_i64(lens->dtype, lens->data, i);
            if (L != scans[0]->dims[1])
                return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                                 "node '%s' (Scan-8): sequence_lens shorter than the scan inputs "
                                 "are not supported",
                                 node);
        }
    }
    kiln_status s = KILN_OK;
    cf_val item_in[64], item_res[64];
    memset(item_in, 0, sizeof item_in);
    memset(item_res, 0, sizeof item_res);
    const kiln_tensor *ip[64];
    for (int64_t bi = 0; bi < B && s == KILN_OK; bi++) {
        for (int j = 0; j < n_state + m && s == KILN_OK; j++) {
            s = take_slice(in[2 + j], 0, bi, node, &item_in[j]);
            ip[j] = &item_in[j].t;
        }
        if (s == KILN_OK)
            s = scan_run(at, node, p, n_state, ip, ip + n_state, n_free, frees, n_scan_out, pool,
                         item_res);
        for (int j = 0; j < n_state + m; j++) val_drop(&item_in[j]);
        for (int k = 0; k < n_out && s == KILN_OK; k++) {
            const kiln_tensor *e = &item_res[k].t;
            if (bi == 0) {
                int64_t dims[KILN_MAX_RANK];
                if (e->rank + 1 > KILN_MAX_RANK) {
                    s = KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': output rank too large", node);
                    break;
                }
                dims[0] = B;
                memcpy(dims + 1, e->dims, (size_t)e->rank * sizeof *dims);
                s = val_alloc(&res[k], NULL, e->dtype, e->rank + 1, dims, node);
            } else if (e->rank + 1 != res[k].t.rank || e->dtype != res[k].t.dtype ||
                       memcmp(e->dims, res[k].t.dims + 1, (size_t)e->rank * sizeof *e->dims)) {
                s = KILN_FAIL(KILN_ERR_MODEL,
                              "node '%s' (Scan-8): output %d differs between batch items", node, k);
            }
            if (s == KILN_OK) put_slice(&res[k].t, 0, bi, e);
        }
        for (int k = 0; k < n_out; k++) val_drop(&item_res[k]);
    }
    if (s == KILN_OK && B == 0)
        s = KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Scan-8): an empty batch is not supported",
                      node);
    if (s != KILN_OK)
        for (int k = 0; k < n_out; k++) val_drop(&res[k]);
    return s;
}

static kiln_status scan_infer(const kiln_infer_args *a) {
    if (a->runtime && a->node_state) return cf_infer_runtime(a, scan_exec);
    const cf_attrs *at = a->attrs;
    KILN_TRY(cf_check(at, a->node_name, a->n_in, 1, a->n_out));
    int b = at->batched, m = at->n_scan_in;
    int n_state = at->n_onnx_in - b - m, fs = cf_free_start(at), n_free = a->n_in - fs;
    int n_scan_out = a->n_out - n_state;
    if (n_state < 0 || n_free < 0 || n_scan_out < 0 || n_scan_out > CF_MAX_SCAN || m < 1 ||
        n_state + m + n_free > 64 || a->n_out > 64)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Scan): malformed inputs or outputs",
                         a->node_name);
    kiln_tinfo ins[64], outs[64];
    memset(ins, 0, sizeof ins);
    int64_t T = KILN_DIM_UNKNOWN, B = KILN_DIM_UNKNOWN;
    for (int j = 0; j < n_state + m; j++) {
        const kiln_tinfo *x = a->in[1 + b + j];
        kiln_tinfo t = x ? *x : (kiln_tinfo){.rank = -1};
        t.data = NULL;
        if (b && t.rank >= 1) { /* drop the batch axis */
            B = t.dims[0];
            memmove(t.dims, t.dims + 1, (size_t)(t.rank - 1) * sizeof *t.dims);
            t.rank--;
        }
        if (j >= n_state && t.rank >= 0) { /* a scan input: one slice */
            int k = j - n_state;
            int ax = at->n_in_axes ? at->in_axes[k] : 0;
            if (ax < 0) ax += t.rank;
            if (ax < 0 || ax >= t.rank)
                return KILN_FAIL(KILN_ERR_MODEL,
                                 "node '%s' (Scan): scan input %d (rank %d) has no axis %d",
                                 a->node_name, k, t.rank, at->n_in_axes ? at->in_axes[k] : 0);
            if (t.dims[ax] >= 0) T = t.dims[ax];
            memmove(t.dims + ax, t.dims + ax + 1, (size_t)(t.rank - ax - 1) * sizeof *t.dims);
            t.rank--;
        }
        ins[j] = t;
    }
    for (int j = 0; j < n_free; j++) {
        if (a->in[fs + j])
            ins[n_state + m + j] = *a->in[fs + j];
        else
            ins[n_state + m + j].rank = -1;
    }
    KILN_TRY(infer_carried(a, a->in[0], n_state + m + n_free, ins, 0, n_state, 0, outs, a->n_out,
                           false));
    for (int k = 0; k < a->n_out; k++) {
        kiln_tinfo o = outs[k];
        if (k < n_state && o.dtype == KILN_DTYPE_UNDEFINED) o.dtype = ins[k].dtype;
        if (k >= n_state && o.rank >= 0) { /* insert the steps axis */
            int r = o.rank + 1, kk = k - n_state;
            int ax = at->n_out_axes ? at->out_axes[kk] : 0;
            if (ax < 0) ax += r;
            if (ax < 0 || ax >= r || r > KILN_MAX_RANK) {
                o.rank = -1;
            } else {
                memmove(o.dims + ax + 1, o.dims + ax, (size_t)(o.rank - ax) * sizeof *o.dims);
                o.dims[ax] = T;
                o.rank = r;
            }
        }
        if (b && o.rank >= 0 && o.rank < KILN_MAX_RANK) {
            memmove(o.dims + 1, o.dims, (size_t)o.rank * sizeof *o.dims);
            o.dims[0] = B;
            o.rank++;
        } else if (b) {
            o.rank = -1;
        }
        *a->out[k] = o;
    }
    return KILN_OK;
}

static kiln_status scan_cpu(const kiln_kernel_args *a) { return cf_kernel(a, scan_exec); }

/* min_inputs: the body (Scan-8's sequence_lens, input 1, is optional) */
/* clang-format off */
const kiln_op_def kiln_op_Scan = {
    .name = "Scan", .domain = "", .since = 8, .min_inputs = 1, .max_inputs = -1, .min_outputs = 1,
    .max_outputs = -1, .flags = KILN_OP_FLAG_NO_FOLD, .attr_size = sizeof(cf_attrs),
    .host_inputs = ~0u, .import = scan_import, .validate = cf_validate, .infer = scan_infer, .cpu = scan_cpu,
};
/* clang-format on */
