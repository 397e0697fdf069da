/* context.c -- execution contexts: input/output binding and running the plan.
 *
 * A run walks the plan's nodes in order. For each node it infers the exact
 * output shapes from the actual inputs (so every shape inside the profile
 * works, and data-dependent shapes too), takes buffers for the outputs from
 * the context's pool, runs the kernel, and returns to the pool every buffer
 * whose last reader has run. Buffers stay with the context between runs, so
 * repeated runs at the same shapes allocate nothing. */
#include "backends/backend.h"
#include "runtime/engine.h"

#include <stdio.h>

typedef struct kiln_buf {
    void *data;
    size_t cap;
    bool in_use;
} kiln_buf;

typedef struct kiln_binding {
    const void *data;      /* bound input */
    bool bound;
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_RANK];
} kiln_binding;

typedef struct kiln_out_binding {
    void *data;            /* caller memory for an output, or NULL */
    size_t cap;
} kiln_out_binding;

struct kiln_context {
    const kiln_engine *e;
    const kiln_backend_i *be;
    void *be_state;
    kiln_pool *pool;
    int threads;
    kiln_tensor *vt;       /* per value: its tensor during/after a run */
    int *buf_of;           /* per value: index into bufs, or -1 */
    int *uses_left;        /* per value, during a run */
    kiln_buf *bufs;
    int n_bufs, cap_bufs;
    void *ws;              /* scratch shared by all nodes */
    size_t ws_cap;
    kiln_binding *in;      /* per graph input */
    kiln_out_binding *out; /* per graph output */
    bool ran;
};

kiln_status kiln_context_create(const kiln_engine *e, kiln_context **out) {
    if (!out) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_create: out is NULL");
    *out = NULL;
    if (!e) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_create: engine is NULL");
    const kiln_backend_i *be = kiln__backend_for(e->opts.device);
    if (!be) return KILN_FAIL(KILN_ERR_UNSUPPORTED, "engine device is not available in this kiln");
    kiln_context *c = kiln__calloc(1, sizeof *c);
    if (!c) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory creating a context");
    const kiln_graph *g = e->graph;
    c->e = e;
    c->be = be;
    c->threads = e->opts.threads;
    size_t nv = (size_t)g->n_values + 1;
    c->vt = kiln__calloc(nv, sizeof *c->vt);
    c->buf_of = kiln__malloc(nv * sizeof *c->buf_of);
    c->uses_left = kiln__calloc(nv, sizeof *c->uses_left);
    c->in = kiln__calloc((size_t)g->n_inputs + 1, sizeof *c->in);
    c->out = kiln__calloc((size_t)g->n_outputs + 1, sizeof *c->out);
    if (!c->vt || !c->buf_of || !c->uses_left || !c->in || !c->out) {
        kiln_context_free(c);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory creating a context");
    }
    for (size_t i = 0; i < nv; i++) c->buf_of[i] = -1;
    kiln_status s = be->state_create(e->opts.device_index, &c->be_state);
    if (s != KILN_OK) {
        kiln_context_free(c);
        return s;
    }
    *out = c;
    return KILN_OK;
}

void kiln_context_free(kiln_context *c) {
    if (!c) return;
    for (int i = 0; i < c->n_bufs; i++) c->be->free(c->be_state, c->bufs[i].data);
    kiln__free(c->bufs);
    kiln__aligned_free(c->ws);
    kiln__pool_free(c->pool);
    if (c->be) c->be->state_free(c->be_state);
    kiln__free(c->vt);
    kiln__free(c->buf_of);
    kiln__free(c->uses_left);
    kiln__free(c->in);
    kiln__free(c->out);
    kiln__free(c);
}

kiln_status kiln_context_set_threads(kiln_context *c, int threads) {
    if (!c) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_threads: context is NULL");
    if (threads < 0 || threads > 1024)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "threads must be in 0..1024, got %d", threads);
    if (threads != c->threads) {
        kiln__pool_free(c->pool);
        c->pool = NULL;
        c->threads = threads;
    }
    return KILN_OK;
}

kiln_status kiln_context_set_stream(kiln_context *c, void *stream) {
    if (!c) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_stream: context is NULL");
    return c->be->set_stream(c->be_state, stream);
}

static int find_io(const kiln_graph *g, const int *list, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(g->values[list[i]].name, name)) return i;
    return -1;
}

static void names_list(const kiln_graph *g, const int *list, int n, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < n && len + 1 < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s'%s'", i ? ", " : "", g->values[list[i]].name);
}

kiln_status kiln_context_set_input(kiln_context *c, const char *name, kiln_dtype dtype, int rank,
                                   const int64_t *dims, const void *data) {
    char a[160], b[160], c2[160];
    if (!c || !name)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_input: NULL context or name");
    const kiln_graph *g = c->e->graph;
    int k = find_io(g, g->inputs, g->n_inputs, name);
    if (k < 0) {
        char list[512];
        names_list(g, g->inputs, g->n_inputs, list, sizeof list);
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "engine has no input named '%s' (inputs: %s)",
                         name, list);
    }
    const kiln_value *v = &g->values[g->inputs[k]];
    const kiln_profile *p = &c->e->profiles[k];
    if (dtype != v->info.dtype)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "input '%s': expected dtype %s, got %s", name,
                         kiln_dtype_name(v->info.dtype), kiln_dtype_name(dtype));
    if (rank != p->rank || (rank > 0 && !dims))
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "input '%s': expected rank %d %s, got rank %d",
                         name, p->rank, kiln__shape_str(v->info.rank, v->info.dims, a, sizeof a),
                         rank);
    for (int d = 0; d < rank; d++) {
        if (dims[d] < p->min[d] || dims[d] > p->max[d]) {
            if (p->min[d] == p->max[d])
                return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                                 "input '%s': shape %s does not match the engine's shape %s "
                                 "(dimension %d must be %lld)",
                                 name, kiln__shape_str(rank, dims, a, sizeof a),
                                 kiln__shape_str(p->rank, p->min, b, sizeof b), d,
                                 (long long)p->min[d]);
            return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                             "input '%s': shape %s is outside the engine's profile (min %s, max %s; "
                             "dimension %d must be in %lld..%lld)",
                             name, kiln__shape_str(rank, dims, a, sizeof a),
                             kiln__shape_str(p->rank, p->min, b, sizeof b),
                             kiln__shape_str(p->rank, p->max, c2, sizeof c2), d,
                             (long long)p->min[d], (long long)p->max[d]);
        }
    }
    if (!data && kiln__numel(rank, dims) > 0)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "input '%s': data is NULL", name);
    kiln_binding *bd = &c->in[k];
    bd->data = data;
    bd->bound = true;
    bd->dtype = dtype;
    bd->rank = rank;
    for (int d = 0; d < rank; d++) bd->dims[d] = dims[d];
    return KILN_OK;
}

kiln_status kiln_context_set_output(kiln_context *c, const char *name, void *data, size_t capacity) {
    if (!c || !name)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_set_output: NULL context or name");
    const kiln_graph *g = c->e->graph;
    int k = find_io(g, g->outputs, g->n_outputs, name);
    if (k < 0) {
        char list[512];
        names_list(g, g->outputs, g->n_outputs, list, sizeof list);
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "engine has no output named '%s' (outputs: %s)",
                         name, list);
    }
    c->out[k].data = data;
    c->out[k].cap = data ? capacity : 0;
    return KILN_OK;
}

/* Takes a pooled buffer of at least `size` bytes for value v. */
static kiln_status take_buf(kiln_context *c, int v, size_t size) {
    int best = -1;
    for (int i = 0; i < c->n_bufs; i++) {
        kiln_buf *b = &c->bufs[i];
        if (b->in_use || b->cap < size) continue;
        if (best < 0 || b->cap < c->bufs[best].cap) best = i;
    }
    if (best < 0) {
        /* Grow the largest free buffer, or make a new one. */
        for (int i = 0; i < c->n_bufs; i++)
            if (!c->bufs[i].in_use && (best < 0 || c->bufs[i].cap > c->bufs[best].cap)) best = i;
        if (best < 0) {
            KILN_TRY(kiln__grow((void **)&c->bufs, &c->cap_bufs, c->n_bufs + 1, sizeof *c->bufs));
            best = c->n_bufs++;
            c->bufs[best].data = NULL;
            c->bufs[best].cap = 0;
        }
        kiln_buf *b = &c->bufs[best];
        c->be->free(c->be_state, b->data);
        b->cap = 0;
        b->data = c->be->alloc(c->be_state, size + 64);
        if (!b->data)
            return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory: %zu bytes for tensor '%s'",
                             size, c->e->graph->values[v].name);
        b->cap = size + 64;
    }
    c->bufs[best].in_use = true;
    c->buf_of[v] = best;
    c->vt[v].data = c->bufs[best].data;
    return KILN_OK;
}

static void release_value(kiln_context *c, int v) {
    int b = c->buf_of[v];
    if (b >= 0) {
        c->bufs[b].in_use = false;
        c->buf_of[v] = -1;
    }
}

static kiln_status run_node(kiln_context *c, const kiln_node *n, int *out_slot) {
    const kiln_graph *g = c->e->graph;
    kiln_tinfo in_info[64], outs[64];
    const kiln_tinfo *in_ip[64];
    kiln_tinfo *out_ip[64];
    const kiln_tensor *in_tp[64];
    kiln_tensor *out_tp[64];
    if (n->n_in > 64 || n->n_out > 64)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': too many inputs/outputs", n->name);
    for (int i = 0; i < n->n_in; i++) {
        in_ip[i] = NULL;
        in_tp[i] = NULL;
        if (n->in[i] < 0) continue;
        const kiln_tensor *t = &c->vt[n->in[i]];
        in_info[i].dtype = t->dtype;
        in_info[i].rank = t->rank;
        memcpy(in_info[i].dims, t->dims, sizeof t->dims);
        in_info[i].data = t->data;
        in_ip[i] = &in_info[i];
        in_tp[i] = t;
    }
    for (int i = 0; i < n->n_out; i++) {
        memset(&outs[i], 0, sizeof outs[i]);
        out_ip[i] = &outs[i];
    }
    kiln_infer_args ia = {.op = n->op, .attrs = n->attrs, .node_name = n->name, .n_in = n->n_in,
                          .n_out = n->n_out, .in = in_ip, .out = out_ip, .runtime = true};
    KILN_TRY(n->op->infer(&ia));
    kiln_tensor scratch_out[64];
    int tmp_bufs[64], n_tmp = 0;
    for (int i = 0; i < n->n_out; i++) {
        if (outs[i].rank < 0 || outs[i].rank > KILN_MAX_RANK || kiln__numel(outs[i].rank, outs[i].dims) < 0)
            return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (%s): output %d has no exact shape at run time",
                             n->name, n->op->name, i);
        int v = n->out[i];
        kiln_tensor *t = v >= 0 ? &c->vt[v] : &scratch_out[i];
        t->dtype = outs[i].dtype;
        t->rank = outs[i].rank;
        memcpy(t->dims, outs[i].dims, sizeof t->dims);
        size_t nb = kiln__value_nbytes(&outs[i]);
        if (v >= 0) {
            int ok = out_slot[v];
            if (ok >= 0 && c->out[ok].data && c->out[ok].cap >= nb) {
                t->data = c->out[ok].data; /* write straight into caller memory */
            } else {
                if (ok >= 0 && c->out[ok].data)
                    return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                                     "output '%s' needs %zu bytes, but the bound buffer holds %zu",
                                     g->values[v].name, nb, c->out[ok].cap);
                KILN_TRY(take_buf(c, v, nb));
            }
        } else {
            /* An output nobody reads: still needs memory for the kernel,
             * held until the kernel has run. */
            int tmp = g->n_values; /* spare slot at the end of the arrays */
            kiln_status ts = take_buf(c, tmp, nb);
            if (ts != KILN_OK) {
                for (int j = 0; j < n_tmp; j++) c->bufs[tmp_bufs[j]].in_use = false;
                return ts;
            }
            t->data = c->vt[tmp].data;
            tmp_bufs[n_tmp++] = c->buf_of[tmp];
            c->buf_of[tmp] = -1;
        }
        out_tp[i] = t;
    }
    size_t ws = n->op->workspace ? n->op->workspace(&ia) : 0;
    if (ws > c->ws_cap) {
        kiln__aligned_free(c->ws);
        c->ws_cap = 0;
        c->ws = kiln__aligned_alloc(ws);
        if (!c->ws) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory: %zu bytes of workspace "
                                     "for node '%s'", ws, n->name);
        c->ws_cap = ws;
    }
    kiln_kernel_args ka = {.op = n->op, .attrs = n->attrs, .node_name = n->name, .n_in = n->n_in,
                           .n_out = n->n_out, .in = in_tp, .out = out_tp, .workspace = c->ws,
                           .workspace_size = ws, .pool = c->pool};
    kiln_status s = c->be->run(c->be_state, &ka);
    for (int j = 0; j < n_tmp; j++) c->bufs[tmp_bufs[j]].in_use = false;
    return s;
}

kiln_status kiln_context_run(kiln_context *c) {
    if (!c) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_run: context is NULL");
    const kiln_graph *g = c->e->graph;
    for (int k = 0; k < g->n_inputs; k++)
        if (!c->in[k].bound)
            return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "input '%s' is not set",
                             g->values[g->inputs[k]].name);
    if (!c->pool && (c->threads == 0 || c->threads > 1))
        KILN_TRY(kiln__pool_create(c->threads, &c->pool));
    c->ran = false;
    /* Reset: release every buffer, set up constants and inputs. */
    for (int i = 0; i < c->n_bufs; i++) c->bufs[i].in_use = false;
    int nv = g->n_values;
    int *slot = kiln__malloc(sizeof(int) * (size_t)(nv + 1));
    if (!slot) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i <= nv; i++) {
        slot[i] = -1;
        c->buf_of[i] = -1;
    }
    for (int k = 0; k < g->n_outputs; k++) slot[g->outputs[k]] = k;
    for (int i = 0; i < nv; i++) {
        const kiln_value *v = &g->values[i];
        c->uses_left[i] = v->n_uses;
        if (v->flags & KILN_VALUE_CONST) {
            c->vt[i].dtype = v->info.dtype;
            c->vt[i].rank = v->info.rank;
            memcpy(c->vt[i].dims, v->info.dims, sizeof c->vt[i].dims);
            c->vt[i].data = v->data;
        } else {
            c->vt[i].data = NULL;
        }
    }
    for (int k = 0; k < g->n_inputs; k++) {
        kiln_tensor *t = &c->vt[g->inputs[k]];
        t->dtype = c->in[k].dtype;
        t->rank = c->in[k].rank;
        memcpy(t->dims, c->in[k].dims, sizeof t->dims);
        t->data = (void *)c->in[k].data; /* read-only: kernels never write inputs */
    }
    kiln_status s = KILN_OK;
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        if ((s = run_node(c, n, slot)) != KILN_OK) {
            if (!strstr(kiln_last_error(), n->name))
                s = kiln__fail_prefix(s, "running node '%s' (%s)", n->name, n->op->name);
            goto done;
        }
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            if (v < 0) continue;
            /* a node may read the same value twice: count each read */
            if (--c->uses_left[v] == 0 && slot[v] < 0) release_value(c, v);
        }
        for (int k = 0; k < n->n_out; k++) {
            int v = n->out[k];
            if (v >= 0 && c->uses_left[v] == 0 && slot[v] < 0) release_value(c, v);
        }
    }
    /* Outputs that are constants or inputs, bound to caller memory: copy. */
    for (int k = 0; k < g->n_outputs; k++) {
        int v = g->outputs[k];
        kiln_tensor *t = &c->vt[v];
        kiln_tinfo ti = {.dtype = t->dtype, .rank = t->rank};
        memcpy(ti.dims, t->dims, sizeof ti.dims);
        size_t nb = kiln__value_nbytes(&ti);
        if (c->out[k].data && t->data != c->out[k].data) {
            if (c->out[k].cap < nb) {
                s = KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                              "output '%s' needs %zu bytes, but the bound buffer holds %zu",
                              g->values[v].name, nb, c->out[k].cap);
                goto done;
            }
            if (nb) memcpy(c->out[k].data, t->data, nb);
            t->data = c->out[k].data;
        }
    }
    c->ran = true;
done:
    kiln__free(slot);
    return s;
}

size_t kiln__context_memory(const kiln_context *c) {
    size_t total = c->ws_cap;
    for (int i = 0; i < c->n_bufs; i++) total += c->bufs[i].cap;
    return total;
}

kiln_status kiln_context_get_output(kiln_context *c, const char *name, kiln_dtype *dtype, int *rank,
                                    int64_t *dims, const void **data) {
    if (!c || !name)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_context_get_output: NULL context or name");
    const kiln_graph *g = c->e->graph;
    int k = find_io(g, g->outputs, g->n_outputs, name);
    if (k < 0) {
        char list[512];
        names_list(g, g->outputs, g->n_outputs, list, sizeof list);
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "engine has no output named '%s' (outputs: %s)",
                         name, list);
    }
    if (!c->ran)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "output '%s' is not available: the context has not run successfully", name);
    const kiln_tensor *t = &c->vt[g->outputs[k]];
    if (dtype) *dtype = t->dtype;
    if (rank) *rank = t->rank;
    if (dims)
        for (int d = 0; d < t->rank; d++) dims[d] = t->dims[d];
    if (data) *data = t->data;
    return KILN_OK;
}
