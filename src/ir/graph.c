/* graph.c -- building, linking, cloning and compacting kiln graphs. */
#include "ir/ir.h"

#include <stdio.h>
#include <stdlib.h>

kiln_status kiln__graph_create(kiln_graph **out) {
    *out = kiln__calloc(1, sizeof **out);
    if (!*out) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory creating a graph");
    return KILN_OK;
}

static void value_clear(kiln_value *v) {
    kiln__free(v->name);
    if (!v->data_borrowed) kiln__aligned_free(v->data);
}

static void node_clear(kiln_node *n) {
    kiln__free(n->src);
    kiln__free(n->name);
    kiln__free(n->in);
    kiln__free(n->out);
    kiln__free(n->attrs);
}

static void links_free(struct kiln_graph_links *L);

/* ---- kiln__graph_add_const's names: base -> the next number to try -------- */

typedef struct const_seq_entry {
    char *base;
    int next;
} const_seq_entry;

struct kiln_const_seq {
    const_seq_entry *e; /* open addressing; base NULL: empty */
    int n, cap;
};

static void const_seq_free(struct kiln_const_seq *cs) {
    if (!cs) return;
    for (int i = 0; i < cs->cap; i++) kiln__free(cs->e[i].base);
    kiln__free(cs->e);
    kiln__free(cs);
}

/* The entry of `base` (added with next 0 when missing); NULL when out of
 * memory (then the names are searched from 0, as without the table). */
static const_seq_entry *const_seq_get(kiln_graph *g, const char *base) {
    struct kiln_const_seq *cs = g->const_seq;
    if (!cs && !(cs = g->const_seq = kiln__calloc(1, sizeof *cs))) return NULL;
    if ((cs->n + 1) * 2 > cs->cap) {
        int cap = cs->cap ? cs->cap * 2 : 64;
        const_seq_entry *e = kiln__calloc((size_t)cap, sizeof *e);
        if (!e) return NULL;
        for (int i = 0; i < cs->cap; i++) {
            if (!cs->e[i].base) continue;
            uint64_t k = kiln__fnv1a(cs->e[i].base, strlen(cs->e[i].base), KILN_FNV_SEED) & (uint64_t)(cap - 1);
            while (e[k].base) k = (k + 1) & (uint64_t)(cap - 1);
            e[k] = cs->e[i];
        }
        kiln__free(cs->e);
        cs->e = e;
        cs->cap = cap;
    }
    uint64_t k = kiln__fnv1a(base, strlen(base), KILN_FNV_SEED) & (uint64_t)(cs->cap - 1);
    while (cs->e[k].base) {
        if (!strcmp(cs->e[k].base, base)) return &cs->e[k];
        k = (k + 1) & (uint64_t)(cs->cap - 1);
    }
    if (!(cs->e[k].base = kiln__strdup(base))) return NULL;
    cs->e[k].next = 0;
    cs->n++;
    return &cs->e[k];
}

void kiln__graph_free(kiln_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_values; i++) value_clear(&g->values[i]);
    for (int i = 0; i < g->n_nodes; i++) node_clear(&g->nodes[i]);
    for (int i = 0; i < g->n_symbols; i++) kiln__free(g->symbols[i]);
    kiln__free(g->values);
    kiln__free(g->nodes);
    kiln__free(g->inputs);
    kiln__free(g->outputs);
    kiln__free(g->symbols);
    kiln__free(g->hash);
    links_free(g->links);
    const_seq_free(g->const_seq);
    kiln__free(g);
}

/* ---- name hash table (open addressing, value index + 1, 0 = empty) ------ */

static uint64_t name_hash(const char *s) { return kiln__fnv1a(s, strlen(s), KILN_FNV_SEED); }

static kiln_status hash_rebuild(kiln_graph *g, int cap) {
    int *h = kiln__calloc((size_t)cap, sizeof *h);
    if (!h) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (graph names)");
    for (int i = 0; i < g->n_values; i++) {
        uint64_t k = name_hash(g->values[i].name) & (uint64_t)(cap - 1);
        while (h[k]) k = (k + 1) & (uint64_t)(cap - 1);
        h[k] = i + 1;
    }
    kiln__free(g->hash);
    g->hash = h;
    g->hash_cap = cap;
    return KILN_OK;
}

int kiln__graph_find_value(const kiln_graph *g, const char *name) {
    if (!g->hash_cap || !name) return -1;
    uint64_t k = name_hash(name) & (uint64_t)(g->hash_cap - 1);
    while (g->hash[k]) {
        int i = g->hash[k] - 1;
        if (!strcmp(g->values[i].name, name)) return i;
        k = (k + 1) & (uint64_t)(g->hash_cap - 1);
    }
    return -1;
}

kiln_status kiln__graph_add_value(kiln_graph *g, const char *name, int *out) {
    char fresh[64];
    if (!name || !*name) {
        int k = g->n_values;
        do {
            snprintf(fresh, sizeof fresh, "kiln_tmp_%d", k++);
        } while (kiln__graph_find_value(g, fresh) >= 0);
        name = fresh;
    } else if (kiln__graph_find_value(g, name) >= 0) {
        return KILN_FAIL(KILN_ERR_MODEL, "tensor name '%s' is defined twice", name);
    }
    KILN_TRY(kiln__grow((void **)&g->values, &g->cap_values, g->n_values + 1, sizeof *g->values));
    if ((g->n_values + 1) * 2 > g->hash_cap)
        KILN_TRY(hash_rebuild(g, g->hash_cap ? g->hash_cap * 2 : 64));
    kiln_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->name = kiln__strdup(name);
    if (!v->name) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (value name)");
    v->producer = -1;
    v->info.rank = -1;
    int idx = g->n_values++;
    uint64_t k = name_hash(v->name) & (uint64_t)(g->hash_cap - 1);
    while (g->hash[k]) k = (k + 1) & (uint64_t)(g->hash_cap - 1);
    g->hash[k] = idx + 1;
    if (out) *out = idx;
    return KILN_OK;
}

kiln_status kiln__value_set_const(kiln_value *v, kiln_dtype dtype, int rank, const int64_t *dims,
                                  const void *data) {
    if (rank < 0 || rank > KILN_MAX_RANK)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "tensor '%s': rank %d is not supported (max %d)",
                         v->name, rank, KILN_MAX_RANK);
    kiln_tinfo t = {.dtype = dtype, .rank = rank};
    for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
    int64_t n = kiln__numel(rank, t.dims);
    if (n < 0) return KILN_FAIL(KILN_ERR_MODEL, "tensor '%s': invalid constant shape", v->name);
    size_t nb = kiln__value_nbytes(&t);
    if (n > 0 && !nb) return KILN_FAIL(KILN_ERR_MODEL, "tensor '%s': constant too large", v->name);
    void *p = kiln__aligned_alloc(nb);
    if (!p) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory for constant '%s' (%zu bytes)",
                             v->name, nb);
    if (data && nb) memcpy(p, data, nb);
    else memset(p, 0, nb);
    if (!v->data_borrowed) kiln__aligned_free(v->data);
    v->data = p;
    v->data_borrowed = false;
    v->nbytes = nb;
    v->info = t;
    v->info.data = p;
    v->flags |= KILN_VALUE_CONST;
    return KILN_OK;
}

kiln_status kiln__graph_add_node(kiln_graph *g, int op_id, const char *name, int n_in, const int *in,
                                 int n_out, const int *out, const void *attrs, int *node_out) {
    const kiln_op_def *op = kiln__op_by_id(op_id);
    if (!op) return KILN_FAIL(KILN_ERR_INTERNAL, "unknown op id %d", op_id);
    KILN_TRY(kiln__grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes));
    kiln_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->op_id = op_id;
    n->op = op;
    n->n_in = n_in;
    n->n_out = n_out;
    char fresh[64];
    if (!name || !*name) {
        snprintf(fresh, sizeof fresh, "%s_%d", op->name, g->n_nodes);
        name = fresh;
    }
    n->name = kiln__strdup(name);
    n->in = kiln__calloc((size_t)n_in + 1, sizeof(int));
    n->out = kiln__calloc((size_t)n_out + 1, sizeof(int));
    n->attrs = op->attr_size ? kiln__calloc(1, op->attr_size) : NULL;
    if (!n->name || !n->in || !n->out || (op->attr_size && !n->attrs)) {
        node_clear(n);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (node)");
    }
    if (n_in) memcpy(n->in, in, sizeof(int) * (size_t)n_in);
    if (n_out) memcpy(n->out, out, sizeof(int) * (size_t)n_out);
    if (op->attr_size && attrs) memcpy(n->attrs, attrs, op->attr_size);
    int idx = g->n_nodes++;
    for (int i = 0; i < n_out; i++)
        if (out[i] >= 0) g->values[out[i]].producer = idx;
    if (node_out) *node_out = idx;
    return KILN_OK;
}

kiln_status kiln__graph_add_symbol(kiln_graph *g, const char *name, int *out) {
    for (int i = 0; i < g->n_symbols; i++)
        if (!strcmp(g->symbols[i], name)) {
            *out = i;
            return KILN_OK;
        }
    KILN_TRY(kiln__grow((void **)&g->symbols, &g->cap_symbols, g->n_symbols + 1, sizeof(char *)));
    g->symbols[g->n_symbols] = kiln__strdup(name);
    if (!g->symbols[g->n_symbols]) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (symbol)");
    *out = g->n_symbols++;
    return KILN_OK;
}

/* ---- linking: producers, use counts and the readers of each value -------- */

typedef struct use_list {
    kiln_use *u;
    int n, cap;
} use_list;

/* What node ni contributed at its last link: where each of its input slots
 * sits in its value's use list (pos), its inputs and outputs then. */
typedef struct node_link {
    int *in, *pos, *out;
    int n_in, n_out, cap_in, cap_pos, cap_out;
} node_link;

struct kiln_graph_links {
    bool ok;            /* the lists below match the graph as of the last link */
    use_list *v;        /* per value */
    int n_v, cap_v;
    node_link *n;       /* per node */
    int n_n, cap_n;
    uint64_t visits;    /* kiln__graph_link_visits */
    int n_outputs;      /* the graph's outputs at the last full link (their values flagged) */
};

static void links_free(struct kiln_graph_links *L) {
    if (!L) return;
    for (int i = 0; i < L->cap_v; i++) kiln__free(L->v[i].u);
    for (int i = 0; i < L->cap_n; i++) {
        kiln__free(L->n[i].in);
        kiln__free(L->n[i].pos);
        kiln__free(L->n[i].out);
    }
    kiln__free(L->v);
    kiln__free(L->n);
    kiln__free(L);
}

/* Room for n values and nodes; new entries empty. */
static bool links_reserve(struct kiln_graph_links *L, int nv, int nn) {
    if (kiln__grow((void **)&L->v, &L->cap_v, nv, sizeof *L->v) != KILN_OK ||
        kiln__grow((void **)&L->n, &L->cap_n, nn, sizeof *L->n) != KILN_OK) {
        kiln__clear_error();
        return false;
    }
    for (int i = L->n_v; i < nv; i++) L->v[i].n = 0;
    for (int i = L->n_n; i < nn; i++) L->n[i].n_in = L->n[i].n_out = 0;
    if (nv > L->n_v) L->n_v = nv;
    if (nn > L->n_n) L->n_n = nn;
    return true;
}

static bool grow_ints(int **p, int *cap, int n) {
    if (n <= *cap) return true;
    int c = *cap;
    if (kiln__grow((void **)p, &c, n, sizeof(int)) != KILN_OK) {
        kiln__clear_error();
        return false;
    }
    *cap = c;
    return true;
}

/* Takes back what node ni contributed at its last link. */
static void unlink_node(kiln_graph *g, struct kiln_graph_links *L, int ni) {
    node_link *nl = &L->n[ni];
    for (int k = 0; k < nl->n_out; k++)
        if (g->values[nl->out[k]].producer == ni) g->values[nl->out[k]].producer = -1;
    for (int k = 0; k < nl->n_in; k++) {
        int v = nl->in[k];
        if (v < 0) continue;
        g->values[v].n_uses--;
        use_list *ul = &L->v[v];
        int p = nl->pos[k];
        ul->u[p] = ul->u[--ul->n];
        if (p < ul->n) L->n[ul->u[p].node].pos[ul->u[p].slot] = p;
    }
    nl->n_in = nl->n_out = 0;
}

/* Adds node ni's inputs and outputs as they are now (after unlink_node). */
static bool link_node(kiln_graph *g, struct kiln_graph_links *L, int ni) {
    const kiln_node *n = &g->nodes[ni];
    node_link *nl = &L->n[ni];
    if (n->dead) return true;
    if (!grow_ints(&nl->in, &nl->cap_in, n->n_in) || !grow_ints(&nl->pos, &nl->cap_pos, n->n_in) ||
        !grow_ints(&nl->out, &nl->cap_out, n->n_out))
        return false;
    for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        nl->in[k] = v;
        if (v < 0) continue;
        use_list *ul = &L->v[v];
        if (ul->n == ul->cap && kiln__grow((void **)&ul->u, &ul->cap, ul->n + 1, sizeof *ul->u) != KILN_OK) {
            kiln__clear_error();
            nl->n_in = k; /* what is linked so far, so that it can be taken back */
            return false;
        }
        nl->pos[k] = ul->n;
        ul->u[ul->n++] = (kiln_use){.node = ni, .slot = k};
        g->values[v].n_uses++;
    }
    nl->n_in = n->n_in;
    for (int k = 0; k < n->n_out; k++) {
        int v = n->out[k];
        if (v < 0) continue;
        nl->out[nl->n_out++] = v;
        g->values[v].producer = ni;
    }
    return true;
}

void kiln__graph_link(kiln_graph *g) {
    for (int i = 0; i < g->n_values; i++) {
        g->values[i].producer = -1;
        g->values[i].n_uses = 0;
        g->values[i].flags &= ~(uint32_t)(KILN_VALUE_INPUT | KILN_VALUE_OUTPUT);
    }
    for (int i = 0; i < g->n_inputs; i++) g->values[g->inputs[i]].flags |= KILN_VALUE_INPUT;
    for (int i = 0; i < g->n_outputs; i++) {
        g->values[g->outputs[i]].flags |= KILN_VALUE_OUTPUT;
        g->values[g->outputs[i]].n_uses++;
    }
    if (!g->links) g->links = kiln__calloc(1, sizeof *g->links);
    struct kiln_graph_links *L = g->links;
    if (L) {
        L->n_outputs = g->n_outputs;
        L->visits += (uint64_t)g->n_nodes;
        L->n_v = L->n_n = 0;
        L->ok = links_reserve(L, g->n_values, g->n_nodes);
    }
    bool ok = L && L->ok;
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        if (ok) {
            ok = link_node(g, L, i);
            if (ok) continue;
            /* out of memory: counted without the lists */
            for (int k = 0; k < L->n[i].n_in; k++)
                if (L->n[i].in[k] >= 0) g->values[L->n[i].in[k]].n_uses--;
        }
        if (n->dead) continue;
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0) g->values[n->out[k]].producer = i;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0) g->values[n->in[k]].n_uses++;
    }
    if (L) L->ok = ok;
}

#ifdef KILN_LINK_CHECK
/* Debug builds with -DKILN_LINK_CHECK: every relink is checked against a
 * full link (a rewrite that changed a node it did not name shows here). */
static void relink_check(kiln_graph *g) {
    int *prod = kiln__malloc(sizeof(int) * (size_t)(3 * g->n_values + 1));
    if (!prod) return;
    int *uses = prod + g->n_values, *outs = uses + g->n_values;
    for (int i = 0; i < g->n_values; i++) prod[i] = -1, uses[i] = outs[i] = 0;
    for (int i = 0; i < g->n_outputs; i++) uses[g->outputs[i]]++, outs[g->outputs[i]]++;
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0) prod[n->out[k]] = i;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0) uses[n->in[k]]++;
    }
    for (int i = 0; i < g->n_values; i++) {
        const kiln_value *v = &g->values[i];
        int nu = 0;
        const kiln_use *u = kiln__graph_uses(g, i, &nu);
        bool bad = v->producer != prod[i] || v->n_uses != uses[i] ||
                   (u && nu + outs[i] != uses[i]);
        for (int k = 0; u && !bad && k < nu; k++)
            bad = g->nodes[u[k].node].dead || g->nodes[u[k].node].in[u[k].slot] != i;
        if (bad) {
            fprintf(stderr, "kiln__graph_relink: value '%s' producer %d uses %d, a full link gives %d and %d\n",
                    v->name, v->producer, v->n_uses, prod[i], uses[i]);
            for (int k = 0; u && k < nu; k++)
                fprintf(stderr, "  use %d: node %d '%s' slot %d dead %d reads %d\n", k, u[k].node,
                        g->nodes[u[k].node].name, u[k].slot, g->nodes[u[k].node].dead,
                        u[k].slot < g->nodes[u[k].node].n_in ? g->nodes[u[k].node].in[u[k].slot] : -9);
            abort();
        }
    }
    kiln__free(prod);
}
#endif

void kiln__graph_relink(kiln_graph *g, const int *nodes, int count) {
    struct kiln_graph_links *L = g->links;
    if (!L || !L->ok || L->n_n > g->n_nodes || L->n_v > g->n_values) {
        kiln__graph_link(g);
        return;
    }
    int first_new = L->n_n;
    if (!links_reserve(L, g->n_values, g->n_nodes)) {
        kiln__graph_link(g);
        return;
    }
    L->visits += (uint64_t)(count + g->n_nodes - first_new);
    for (int i = 0; i < count; i++) unlink_node(g, L, nodes[i]);
    bool ok = true;
    for (int i = 0; ok && i < count; i++) {
        unlink_node(g, L, nodes[i]);
        ok = link_node(g, L, nodes[i]);
    }
    for (int i = first_new; ok && i < g->n_nodes; i++) {
        unlink_node(g, L, i);
        ok = link_node(g, L, i);
    }
    if (!ok) {
        kiln__graph_link(g);
        return;
    }
#ifdef KILN_LINK_CHECK
    relink_check(g);
#endif
}

const kiln_use *kiln__graph_uses(const kiln_graph *g, int v, int *count) {
    const struct kiln_graph_links *L = g->links;
    *count = 0;
    if (!L || !L->ok || v < 0 || v >= L->n_v) return NULL;
    *count = L->v[v].n;
    return L->v[v].u;
}

uint64_t kiln__graph_link_visits(const kiln_graph *g) { return g->links ? g->links->visits : 0; }

void kiln__graph_note_visits(const kiln_graph *g, int64_t nodes) {
    if (g->links) g->links->visits += (uint64_t)nodes;
}

/* ---- sources: the ONNX nodes a node came from ----------------------------- */

int kiln__node_num_sources(const kiln_node *n) { return n->added ? 0 : n->n_src ? n->n_src : 1; }

const char *kiln__node_source(const kiln_node *n, int k) {
    if (k < 0 || k >= kiln__node_num_sources(n)) return NULL;
    if (!n->n_src) return n->name;
    const char *p = n->src;
    for (int i = 0; i < k; i++) p += strlen(p) + 1;
    return p;
}

kiln_status kiln__node_set_sources(kiln_node *n, const char *packed, size_t bytes, int count) {
    char *copy = NULL;
    if (count > 0) {
        if (!(copy = kiln__malloc(bytes))) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (node sources)");
        memcpy(copy, packed, bytes);
    }
    kiln__free(n->src);
    n->src = copy;
    n->n_src = count > 0 ? count : 0;
    return KILN_OK;
}

kiln_status kiln__node_merge_sources(kiln_graph *g, int ni, const int *from, int n_from) {
    kiln_sbuf sb = {0};
    int count = 0;
    for (int i = 0; i < n_from; i++) {
        const kiln_node *f = &g->nodes[from[i]];
        for (int k = 0; k < kiln__node_num_sources(f); k++) {
            const char *name = kiln__node_source(f, k);
            bool seen = false;
            for (size_t off = 0; off < sb.len && !seen; off += strlen(sb.data + off) + 1)
                seen = !strcmp(sb.data + off, name);
            if (seen) continue;
            kiln__sbuf_printf(&sb, "%s", name);
            kiln__sbuf_printf(&sb, "%c", 0);
            count++;
        }
    }
    kiln_status s = KILN_OK;
    if (sb.oom) s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (node sources)");
    else s = kiln__node_set_sources(&g->nodes[ni], sb.data, sb.len, count);
    if (s == KILN_OK) g->nodes[ni].added = count == 0; /* made only of kiln's own nodes */
    kiln__sbuf_free(&sb);
    return s;
}

static kiln_status int_list_push(int **p, int *n, int *cap, int v) {
    KILN_TRY(kiln__grow((void **)p, cap, *n + 1, sizeof(int)));
    (*p)[(*n)++] = v;
    return KILN_OK;
}

kiln_status kiln__graph_clone(const kiln_graph *g, kiln_graph **out) {
    kiln_graph *c = NULL;
    kiln_status s;
    *out = NULL;
    if ((s = kiln__graph_create(&c)) != KILN_OK) return s;
    c->opset = g->opset;
    c->sub = g->sub;
    for (int i = 0; i < g->n_symbols; i++) {
        int k;
        if ((s = kiln__graph_add_symbol(c, g->symbols[i], &k)) != KILN_OK) goto fail;
    }
    for (int i = 0; i < g->n_values; i++) {
        const kiln_value *v = &g->values[i];
        int k;
        if ((s = kiln__graph_add_value(c, v->name, &k)) != KILN_OK) goto fail;
        kiln_value *cv = &c->values[k];
        if (v->flags & KILN_VALUE_CONST) {
            if ((s = kiln__value_set_const(cv, v->info.dtype, v->info.rank, v->info.dims, v->data)) !=
                KILN_OK)
                goto fail;
        } else {
            cv->info = v->info;
            cv->info.data = NULL;
        }
        cv->flags = v->flags;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead) continue;
        int k;
        if ((s = kiln__graph_add_node(c, n->op_id, n->name, n->n_in, n->in, n->n_out, n->out,
                                      n->attrs, &k)) != KILN_OK)
            goto fail;
        c->nodes[k].device = n->device;
        c->nodes[k].added = n->added;
        if (n->n_src) {
            const char *last = kiln__node_source(n, n->n_src - 1);
            size_t bytes = (size_t)(last - n->src) + strlen(last) + 1;
            if ((s = kiln__node_set_sources(&c->nodes[k], n->src, bytes, n->n_src)) != KILN_OK) goto fail;
        }
    }
    for (int i = 0; i < g->n_inputs; i++)
        if ((s = int_list_push(&c->inputs, &c->n_inputs, &c->cap_inputs, g->inputs[i])) != KILN_OK)
            goto fail;
    for (int i = 0; i < g->n_outputs; i++)
        if ((s = int_list_push(&c->outputs, &c->n_outputs, &c->cap_outputs, g->outputs[i])) !=
            KILN_OK)
            goto fail;
    kiln__graph_link(c);
    *out = c;
    return KILN_OK;
fail:
    kiln__graph_free(c);
    return s;
}

kiln_status kiln__graph_compact(kiln_graph *g) {
    kiln__graph_link(g);
    /* keep: values used, produced by live nodes, graph inputs/outputs */
    int *map = kiln__malloc(sizeof(int) * (size_t)(g->n_values + 1));
    if (!map) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (compact)");
    int nv = 0;
    for (int i = 0; i < g->n_values; i++) {
        kiln_value *v = &g->values[i];
        bool keep = v->n_uses > 0 || v->producer >= 0 || (v->flags & KILN_VALUE_INPUT);
        if (keep) {
            map[i] = nv;
            if (nv != i) g->values[nv] = *v;
            nv++;
        } else {
            map[i] = -1;
            value_clear(v);
        }
    }
    g->n_values = nv;
    const_seq_free(g->const_seq); /* names may be free again */
    g->const_seq = NULL;
    int nn = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        if (n->dead) {
            node_clear(n);
            continue;
        }
        for (int k = 0; k < n->n_in; k++) n->in[k] = n->in[k] >= 0 ? map[n->in[k]] : -1;
        for (int k = 0; k < n->n_out; k++) n->out[k] = n->out[k] >= 0 ? map[n->out[k]] : -1;
        if (nn != i) g->nodes[nn] = *n;
        nn++;
    }
    g->n_nodes = nn;
    for (int i = 0; i < g->n_inputs; i++) g->inputs[i] = map[g->inputs[i]];
    for (int i = 0; i < g->n_outputs; i++) g->outputs[i] = map[g->outputs[i]];
    kiln__free(map);
    kiln_status s = hash_rebuild(g, g->hash_cap ? g->hash_cap : 64);
    kiln__graph_link(g);
    return s;
}

bool kiln__graph_is_output(const kiln_graph *g, int v) {
    /* linked since the outputs last changed (they are only appended to, or
       renumbered by compaction, which links): the flag link sets */
    if (g->links && g->links->n_outputs == g->n_outputs && v >= 0 && v < g->n_values)
        return (g->values[v].flags & KILN_VALUE_OUTPUT) != 0;
    kiln__graph_note_visits(g, g->n_outputs);
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == v) return true;
    return false;
}

kiln_status kiln__graph_add_const(kiln_graph *g, const char *base, kiln_dtype dtype, int rank,
                                  const int64_t *dims, const void *data, int *out) {
    char name[256], cut[201];
    /* the lowest free number: from where the last search of this base ended
       (the names below it stay taken until values go: kiln__graph_compact),
       so that n constants named after one value take O(n), not O(n^2) */
    snprintf(cut, sizeof cut, "%.200s", base);
    const_seq_entry *e = const_seq_get(g, cut);
    int k = e ? e->next : 0;
    for (int k0 = k;; k++) { /* (a long base is cut short: the number must stay, else this never ends) */
        snprintf(name, sizeof name, "%s/kiln_%d", cut, k);
        if (kiln__graph_find_value(g, name) >= 0) continue;
        kiln__graph_note_visits(g, k - k0); /* (the names tried: the tests' measure of work) */
        break;
    }
    KILN_TRY(kiln__graph_add_value(g, name, out));
    if (e) e->next = k + 1;
    return kiln__value_set_const(&g->values[*out], dtype, rank, dims, data);
}

kiln_status kiln__nodes_place_after(kiln_graph *g, int n_nodes0, const int *after) {
    int total = g->n_nodes, extra = total - n_nodes0;
    if (!extra) return KILN_OK;
    kiln_node *nn = kiln__malloc(sizeof *nn * (size_t)(g->cap_nodes > total ? g->cap_nodes : total));
    if (!nn) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (reordering nodes)");
    int k = 0;
    for (int j = 0; j < extra; j++)
        if (after[j] < 0) nn[k++] = g->nodes[n_nodes0 + j];
    for (int i = 0; i < n_nodes0; i++) {
        nn[k++] = g->nodes[i];
        for (int j = 0; j < extra; j++)
            if (after[j] == i) nn[k++] = g->nodes[n_nodes0 + j];
    }
    if (k != total) {
        kiln__free(nn);
        return KILN_FAIL(KILN_ERR_INTERNAL, "graph pass: reordering lost nodes (%d of %d)", k,
                         total);
    }
    kiln__free(g->nodes);
    g->nodes = nn;
    if (g->cap_nodes < total) g->cap_nodes = total;
    kiln__graph_link(g);
    return KILN_OK;
}
