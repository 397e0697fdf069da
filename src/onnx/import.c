/* import.c -- ONNX ModelProto -> kiln_graph.
 *
 * The order of work:
 *   1. unpack the protobuf; read opset_import per domain; resolve the
 *      sequences whose structure is known at build into tensor edges
 *      (sequence.c: a rewritten copy of the graph's node list);
 *   2. initializers become constant values; graph inputs that are not
 *      initializers become graph inputs (initializers listed as inputs are
 *      constants, as ONNX Runtime treats them for IR >= 4);
 *   3. index which node defines which value (duplicates are errors) and sort
 *      the nodes topologically (undefined inputs and cycles are errors);
 *   4. import the nodes in that order: Constant nodes become constant
 *      values, every other node is looked up in the operator registry and
 *      its attributes are converted by the op's `import` through the
 *      kiln_import_ctx functions defined here;
 *   5. value_info and graph outputs give declared dtypes/shapes.
 * Shapes of node outputs are inferred later (kiln__graph_infer).
 *
 * Subgraphs (GRAPH attributes of If, Loop and Scan) are imported the same
 * way into graphs of their own. Every value a subgraph reads from an
 * enclosing graph (its free names, also those of subgraphs nested in it)
 * becomes a trailing input of that subgraph and an explicit input of its
 * node, so the node depends on it like on any other input (the sort in
 * step 3 counts it). Each subgraph is then serialized into a uint8 constant
 * input of its node (see src/ops/misc_control.h).
 */
#include "onnx/onnx_internal.h"
#include "format/format.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- a small string -> int map (keys borrowed) ------------------------- */

typedef struct strmap {
    const char **keys;
    int *vals;
    size_t cap; /* power of two; 0 when empty */
    size_t n;
} strmap;

static void strmap_free(strmap *m) {
    kiln__free(m->keys);
    kiln__free(m->vals);
    memset(m, 0, sizeof *m);
}

static size_t strmap_slot(const strmap *m, const char *key) {
    size_t mask = m->cap - 1;
    size_t i = (size_t)kiln__fnv1a(key, strlen(key), KILN_FNV_SEED) & mask;
    while (m->keys[i] && strcmp(m->keys[i], key))
        i = (i + 1) & mask;
    return i;
}

static kiln_status strmap_reserve(strmap *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 2) {
        if (cap > (SIZE_MAX >> 2) / sizeof(void *))
            return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "table too large");
        cap *= 2;
    }
    if (cap <= m->cap) return KILN_OK;
    strmap nm = {0};
    nm.keys = kiln__calloc(cap, sizeof *nm.keys);
    nm.vals = kiln__calloc(cap, sizeof *nm.vals);
    if (!nm.keys || !nm.vals) {
        strmap_free(&nm);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (name table)");
    }
    nm.cap = cap;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = strmap_slot(&nm, m->keys[i]);
        nm.keys[j] = m->keys[i];
        nm.vals[j] = m->vals[i];
        nm.n++;
    }
    strmap_free(m);
    *m = nm;
    return KILN_OK;
}

/* Returns true and *val if present. */
static bool strmap_get(const strmap *m, const char *key, int *val) {
    if (!m->cap) return false;
    size_t i = strmap_slot(m, key);
    if (!m->keys[i]) return false;
    *val = m->vals[i];
    return true;
}

/* Inserts key (must be absent). */
static kiln_status strmap_put(strmap *m, const char *key, int val) {
    KILN_TRY(strmap_reserve(m, m->n + 1));
    size_t i = strmap_slot(m, key);
    if (!m->keys[i]) m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
    return KILN_OK;
}

/* ---- importer state -------------------------------------------------------- */

enum { DEF_GRAPH = -1 }; /* defined by a graph input or initializer (>= 0: node index) */

enum { MAX_SUBGRAPH_DEPTH = 32 }; /* subgraphs nested deeper are refused */

/* A list of distinct names (borrowed), in the order first added. */
typedef struct namelist {
    const char **v;
    int n, cap;
    strmap seen;
} namelist;

static void names_free(namelist *l) {
    kiln__free(l->v);
    strmap_free(&l->seen);
    memset(l, 0, sizeof *l);
}

static kiln_status names_add(namelist *l, const char *s) {
    int d;
    if (strmap_get(&l->seen, s, &d)) return KILN_OK;
    KILN_TRY(kiln__grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v));
    KILN_TRY(strmap_put(&l->seen, s, l->n));
    l->v[l->n++] = s;
    return KILN_OK;
}

typedef struct importer {
    kiln_graph *g;
    const Onnx__ModelProto *model;
    const Onnx__GraphProto *gp;
    const char *base_dir;
    int depth;        /* 0: the main graph; k: a subgraph nested k deep */
    strmap defs;  /* value name -> DEF_GRAPH or index of the defining node */
    strmap inits; /* initializer names */
    int *order;   /* nodes in topological order */
    namelist *free_of; /* per node: free names of its subgraphs (extra dependencies) */
    kiln_tinfo *declared; /* main graph: per graph output, the type the model declares */
    kiln_onnx_decl *vi;   /* main graph: value_info entries of node outputs */
    int n_vi, cap_vi;
    kiln_onnx_arena seq_arena; /* gp, when sequences were resolved (sequence.c) */
} importer;

static void importer_free(importer *im) {
    strmap_free(&im->defs);
    strmap_free(&im->inits);
    kiln__free(im->order);
    kiln__free(im->declared);
    kiln__free(im->vi);
    if (im->free_of)
        for (size_t i = 0; i < im->gp->n_node; i++) names_free(&im->free_of[i]);
    kiln__free(im->free_of);
    kiln__onnx_arena_free(&im->seq_arena);
}

static bool domain_is_onnx(const char *d) { return !d || !*d || !strcmp(d, "ai.onnx"); }

static const char *str_or_empty(const char *s) { return s ? s : ""; }

/* Opset of `domain` imported by the model; false if the model lacks it. */
static bool find_opset(const importer *im, const char *domain, int64_t *out) {
    const Onnx__ModelProto *m = im->model;
    bool onnx = domain_is_onnx(domain);
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        bool match = onnx ? domain_is_onnx(o->domain) : (o->domain && !strcmp(o->domain, domain));
        if (match) {
            *out = o->has_version ? o->version : 1;
            return true;
        }
    }
    if (onnx && m->n_opset_import == 0 && (!m->has_ir_version || m->ir_version < 3)) {
        /* IR < 3 models have no opset_import: opset 1 */
        *out = 1;
        return true;
    }
    return false;
}

/* A name for messages and for the graph: the node's own, else "<op>_<index>". */
static void node_label(const Onnx__NodeProto *np, int index, char *buf, size_t n) {
    if (np->name && *np->name)
        snprintf(buf, n, "%s", np->name);
    else
        snprintf(buf, n, "%s_%d", np->op_type && *np->op_type ? np->op_type : "node", index);
}

/* Reads a TypeProto into info (dtype, rank, dims). `what` names the value.
 * With `required`, a missing type is an error; otherwise the info is left
 * unknown (dtype UNDEFINED, rank -1). */
static kiln_status parse_type(importer *im, const Onnx__TypeProto *tp, const char *what,
                              bool required, kiln_tinfo *info) {
    memset(info, 0, sizeof *info);
    info->rank = -1;
    if (!tp || tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET) {
        if (required) return KILN_FAIL(KILN_ERR_MODEL, "%s has no type", what);
        return KILN_OK;
    }
    switch (tp->value_case) {
    case ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE: break;
    case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE:
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "%s is a sequence; kiln supports only tensors",
                         what);
    case ONNX__TYPE_PROTO__VALUE_MAP_TYPE:
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "%s is a map; kiln supports only tensors", what);
    case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE:
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "%s is an optional; kiln supports only tensors",
                         what);
    case ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE:
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "%s is a sparse tensor; kiln supports only dense tensors", what);
    default:
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "%s has an unknown kind of type (%d)", what,
                         (int)tp->value_case);
    }
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    if (!tt || !tt->has_elem_type || tt->elem_type == 0) {
        if (required) return KILN_FAIL(KILN_ERR_MODEL, "%s has no element type", what);
    } else {
        KILN_TRY(kiln__onnx_dtype(tt->elem_type, what, &info->dtype));
    }
    if (!tt || !tt->shape) return KILN_OK; /* rank unknown */
    const Onnx__TensorShapeProto *sh = tt->shape;
    if (sh->n_dim > KILN_MAX_RANK)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "%s has rank %zu; kiln supports up to %d", what,
                         sh->n_dim, KILN_MAX_RANK);
    info->rank = (int)sh->n_dim;
    for (size_t i = 0; i < sh->n_dim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = sh->dim[i];
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            if (d->dim_value < 0)
                return KILN_FAIL(KILN_ERR_MODEL, "%s: dimension %zu is negative (%" PRId64 ")",
                                 what, i, d->dim_value);
            info->dims[i] = d->dim_value;
        } else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                   d->dim_param && *d->dim_param) {
            int k;
            KILN_TRY(kiln__graph_add_symbol(im->g, d->dim_param, &k)); /* same name, same k */
            info->dims[i] = KILN_DIM_SYM(k);
        } else {
            info->dims[i] = KILN_DIM_UNKNOWN;
        }
    }
    return kiln__onnx_check_size(what, info->dtype, info->rank, info->dims, NULL);
}

static kiln_status push_int(int **arr, int *n, int *cap, int v) {
    KILN_TRY(kiln__grow((void **)arr, cap, *n + 1, sizeof **arr));
    (*arr)[(*n)++] = v;
    return KILN_OK;
}

/* Adds a constant value named `name` holding info's data. */
static kiln_status add_const_value(kiln_graph *g, const char *name, const kiln_tinfo *info,
                                   int *out) {
    int v;
    KILN_TRY(kiln__graph_add_value(g, name, &v));
    KILN_TRY(kiln__value_set_const(&g->values[v], info->dtype, info->rank, info->dims, info->data));
    g->values[v].flags |= KILN_VALUE_CONST;
    if (out) *out = v;
    return KILN_OK;
}

/* ---- steps 2-3: graph-level values, definitions, order --------------------- */

static kiln_status import_initializers(importer *im) {
    const Onnx__GraphProto *gp = im->gp;
    if (gp->n_sparse_initializer) {
        const Onnx__SparseTensorProto *sp = gp->sparse_initializer[0];
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "sparse initializer '%s' is not supported",
                         sp->values && sp->values->name ? sp->values->name : "");
    }
    KILN_TRY(strmap_reserve(&im->inits, gp->n_initializer));
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *t = gp->initializer[i];
        const char *name = str_or_empty(t->name);
        if (!*name) return KILN_FAIL(KILN_ERR_MODEL, "initializer %zu has no name", i);
        int dummy;
        if (strmap_get(&im->inits, name, &dummy))
            return KILN_FAIL(KILN_ERR_MODEL, "initializer '%s' is defined twice", name);
        KILN_TRY(strmap_put(&im->inits, name, (int)i));
        KILN_TRY(strmap_put(&im->defs, name, DEF_GRAPH));

        char what[300];
        snprintf(what, sizeof what, "initializer '%s'", name);
        kiln_tinfo info;
        void *owned = NULL;
        KILN_TRY(kiln__onnx_tensor_decode(t, what, im->base_dir, &info, &owned));
        kiln_status s = add_const_value(im->g, name, &info, NULL);
        kiln__free(owned);
        if (s != KILN_OK) return s;
    }
    return KILN_OK;
}

static kiln_status import_inputs(importer *im) {
    const Onnx__GraphProto *gp = im->gp;
    kiln_graph *g = im->g;
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        const char *name = str_or_empty(vi->name);
        if (!*name) return KILN_FAIL(KILN_ERR_MODEL, "graph input %zu has no name", i);
        int d;
        if (strmap_get(&im->inits, name, &d)) continue; /* initializer: a constant */
        if (strmap_get(&im->defs, name, &d))
            return KILN_FAIL(KILN_ERR_MODEL, "graph input '%s' is listed twice", name);
        KILN_TRY(strmap_put(&im->defs, name, DEF_GRAPH));
        char what[300];
        snprintf(what, sizeof what, "graph input '%s'", name);
        kiln_tinfo info;
        KILN_TRY(parse_type(im, vi->type, what, im->depth == 0, &info));
        int v;
        KILN_TRY(kiln__graph_add_value(g, name, &v));
        g->values[v].info = info;
        g->values[v].flags |= KILN_VALUE_INPUT;
        KILN_TRY(push_int(&g->inputs, &g->n_inputs, &g->cap_inputs, v));
    }
    return KILN_OK;
}

/* Describes the definer of a value for messages. */
static void definer_str(const importer *im, int def, char *buf, size_t n) {
    if (def == DEF_GRAPH) {
        snprintf(buf, n, "a graph input or initializer");
    } else {
        char lab[200];
        node_label(im->gp->node[def], def, lab, sizeof lab);
        snprintf(buf, n, "node '%s' (index %d)", lab, def);
    }
}

/* ---- free names of subgraphs ------------------------------------------------- */

static bool is_graph_attr(const Onnx__AttributeProto *a);

static kiln_status graph_free_names(const Onnx__GraphProto *gp, int depth, namelist *out);

/* Free names of the subgraphs in node np's attributes. */
static kiln_status node_free_names(const Onnx__NodeProto *np, int depth, namelist *out) {
    for (size_t k = 0; k < np->n_attribute; k++) {
        const Onnx__AttributeProto *a = np->attribute[k];
        if (a->n_graphs)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "node '%s' (%s): attribute '%s' is a list of graphs, which kiln does "
                             "not support",
                             str_or_empty(np->name), str_or_empty(np->op_type),
                             str_or_empty(a->name));
        if (!is_graph_attr(a)) continue;
        namelist sub = {0};
        kiln_status s = graph_free_names(a->g, depth + 1, &sub);
        for (int i = 0; i < sub.n && s == KILN_OK; i++) s = names_add(out, sub.v[i]);
        names_free(&sub);
        KILN_TRY(s);
    }
    return KILN_OK;
}

/* Names graph gp reads (in its nodes and, recursively, their subgraphs)
 * that it does not define, in first-use order. */
static kiln_status graph_free_names(const Onnx__GraphProto *gp, int depth, namelist *out) {
    if (depth > MAX_SUBGRAPH_DEPTH)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "subgraphs are nested more than %d deep",
                         MAX_SUBGRAPH_DEPTH);
    strmap defined = {0};
    kiln_status s = strmap_reserve(&defined, gp->n_input + gp->n_initializer + gp->n_node * 2);
    for (size_t i = 0; i < gp->n_input && s == KILN_OK; i++)
        if (gp->input[i]->name && *gp->input[i]->name)
            s = strmap_put(&defined, gp->input[i]->name, 0);
    for (size_t i = 0; i < gp->n_initializer && s == KILN_OK; i++)
        if (gp->initializer[i]->name && *gp->initializer[i]->name)
            s = strmap_put(&defined, gp->initializer[i]->name, 0);
    for (size_t i = 0; i < gp->n_node && s == KILN_OK; i++)
        for (size_t j = 0; j < gp->node[i]->n_output && s == KILN_OK; j++)
            if (gp->node[i]->output[j] && *gp->node[i]->output[j])
                s = strmap_put(&defined, gp->node[i]->output[j], 0);
    int d;
    for (size_t i = 0; i < gp->n_node && s == KILN_OK; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        for (size_t j = 0; j < np->n_input && s == KILN_OK; j++) {
            const char *name = str_or_empty(np->input[j]);
            if (*name && !strmap_get(&defined, name, &d)) s = names_add(out, name);
        }
        namelist sub = {0};
        if (s == KILN_OK) s = node_free_names(np, depth, &sub);
        for (int k = 0; k < sub.n && s == KILN_OK; k++)
            if (!strmap_get(&defined, sub.v[k], &d)) s = names_add(out, sub.v[k]);
        names_free(&sub);
    }
    for (size_t i = 0; i < gp->n_output && s == KILN_OK; i++) { /* outputs passed through */
        const char *name = str_or_empty(gp->output[i]->name);
        if (*name && !strmap_get(&defined, name, &d)) s = names_add(out, name);
    }
    strmap_free(&defined);
    return s;
}

static kiln_status index_definitions(importer *im) {
    const Onnx__GraphProto *gp = im->gp;
    size_t total = im->defs.n;
    for (size_t i = 0; i < gp->n_node; i++)
        total += gp->node[i]->n_output;
    KILN_TRY(strmap_reserve(&im->defs, total));
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        for (size_t j = 0; j < np->n_output; j++) {
            const char *name = str_or_empty(np->output[j]);
            if (!*name) continue;
            int def;
            if (strmap_get(&im->defs, name, &def)) {
                char lab[200], other[260];
                node_label(np, (int)i, lab, sizeof lab);
                definer_str(im, def, other, sizeof other);
                return KILN_FAIL(KILN_ERR_MODEL,
                                 "value '%s' is produced by node '%s' (index %zu) but is already "
                                 "defined by %s",
                                 name, lab, i, other);
            }
            KILN_TRY(strmap_put(&im->defs, name, (int)i));
        }
    }
    return KILN_OK;
}

/* Depth-first topological sort that keeps an already sorted model's order. */
static kiln_status sort_nodes(importer *im) {
    const Onnx__GraphProto *gp = im->gp;
    int n = (int)gp->n_node;
    kiln_status s = KILN_OK;
    im->order = kiln__calloc((size_t)n + 1, sizeof *im->order);
    im->free_of = kiln__calloc((size_t)n + 1, sizeof *im->free_of);
    for (int i = 0; i < n && im->free_of && s == KILN_OK; i++)
        s = node_free_names(gp->node[i], im->depth, &im->free_of[i]);
    if (s != KILN_OK) return s;
    unsigned char *state = kiln__calloc((size_t)n + 1, 1); /* 0 new, 1 on stack, 2 done */
    int *stack = kiln__calloc((size_t)n + 1, sizeof *stack);
    size_t *pos = kiln__calloc((size_t)n + 1, sizeof *pos);
    if (!im->order || !im->free_of || !state || !stack || !pos) {
        s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (sorting nodes)");
        goto done;
    }
    int k = 0;
    for (int root = 0; root < n; root++) {
        if (state[root]) continue;
        int sp = 0;
        stack[sp++] = root;
        state[root] = 1;
        pos[root] = 0;
        while (sp > 0) {
            int cur = stack[sp - 1];
            const Onnx__NodeProto *np = gp->node[cur];
            const namelist *extra = &im->free_of[cur];
            if (pos[cur] < np->n_input + (size_t)extra->n) {
                size_t p = pos[cur]++;
                bool direct = p < np->n_input;
                const char *name = direct ? str_or_empty(np->input[p]) : extra->v[p - np->n_input];
                if (!*name) continue;
                int def;
                if (!strmap_get(&im->defs, name, &def)) {
                    char lab[200];
                    node_label(np, cur, lab, sizeof lab);
                    if (direct)
                        s = KILN_FAIL(KILN_ERR_MODEL,
                                      "node '%s' (%s, index %d): input %zu '%s' is not defined by "
                                      "any node, graph input or initializer%s",
                                      lab, str_or_empty(np->op_type), cur, p, name,
                                      im->depth ? " of the subgraph or an enclosing graph" : "");
                    else
                        s = KILN_FAIL(KILN_ERR_MODEL,
                                      "node '%s' (%s, index %d): its subgraph reads '%s', which is "
                                      "defined neither in it nor in an enclosing graph",
                                      lab, str_or_empty(np->op_type), cur, name);
                    goto done;
                }
                if (def == DEF_GRAPH || state[def] == 2) continue;
                if (state[def] == 1) {
                    char lab[200];
                    node_label(gp->node[def], def, lab, sizeof lab);
                    s = KILN_FAIL(KILN_ERR_MODEL,
                                  "the graph has a cycle through node '%s' (index %d), value '%s'",
                                  lab, def, name);
                    goto done;
                }
                state[def] = 1;
                pos[def] = 0;
                stack[sp++] = def;
            } else {
                sp--;
                state[cur] = 2;
                im->order[k++] = cur;
            }
        }
    }
done:
    kiln__free(state);
    kiln__free(stack);
    kiln__free(pos);
    return s;
}

/* ---- the import context ---------------------------------------------------- */

struct kiln_import_ctx {
    const kiln_import_i *vt; /* first, as op.h wants */
    importer *im;
    const Onnx__NodeProto *np;
    const char *name; /* node label */
    const char *op_type;
    int64_t opset;
    int *in; /* value indices, -1 absent */
    int n_in, cap_in;
    int n_out;
    kiln_tinfo **infos; /* per input: stable copies handed to the op */
    int cap_infos;
    void **owned; /* temporaries freed when the node is done */
    int n_owned, cap_owned;
};

static void ctx_free(kiln_import_ctx *ic) {
    kiln__free(ic->in);
    for (int i = 0; i < ic->cap_infos; i++)
        kiln__free(ic->infos[i]);
    kiln__free(ic->infos);
    for (int i = 0; i < ic->n_owned; i++)
        kiln__free(ic->owned[i]);
    kiln__free(ic->owned);
}

static kiln_status ctx_own(kiln_import_ctx *ic, void *p) {
    kiln_status s =
        kiln__grow((void **)&ic->owned, &ic->cap_owned, ic->n_owned + 1, sizeof(void *));
    if (s != KILN_OK) {
        kiln__free(p);
        return s;
    }
    ic->owned[ic->n_owned++] = p;
    return KILN_OK;
}

static int64_t ix_import_opset(const kiln_import_ctx *ic) { return ic->opset; }

static const char *ix_import_node_name(const kiln_import_ctx *ic) { return ic->name; }

static int ix_import_num_inputs(const kiln_import_ctx *ic) { return ic->n_in; }

static int ix_import_num_outputs(const kiln_import_ctx *ic) { return ic->n_out; }

static bool ix_import_has_input(const kiln_import_ctx *ic, int i) {
    return i >= 0 && i < ic->n_in && ic->in[i] >= 0;
}

static const kiln_tinfo *ix_import_input_info(const kiln_import_ctx *ic, int i) {
    if (!ix_import_has_input(ic, i)) return NULL;
    kiln_import_ctx *mic = (kiln_import_ctx *)ic; /* the cache is not observable state */
    if (kiln__grow((void **)&mic->infos, &mic->cap_infos, i + 1, sizeof(kiln_tinfo *)) != KILN_OK)
        return NULL;
    if (!mic->infos[i] && !(mic->infos[i] = kiln__malloc(sizeof(kiln_tinfo)))) return NULL;
    const kiln_value *v = &ic->im->g->values[ic->in[i]];
    *mic->infos[i] = v->info;
    mic->infos[i]->data = (v->flags & KILN_VALUE_CONST) ? v->data : NULL;
    return mic->infos[i];
}

static const Onnx__AttributeProto *find_attr(const kiln_import_ctx *ic, const char *name) {
    for (size_t i = 0; i < ic->np->n_attribute; i++) {
        const Onnx__AttributeProto *a = ic->np->attribute[i];
        if (a->name && !strcmp(a->name, name)) return a;
    }
    return NULL;
}

/* The attribute's type, guessing from the fields set for IR 1 models. */
static int attr_type(const Onnx__AttributeProto *a) {
    if (a->has_type && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED) return a->type;
    if (a->has_f) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    if (a->has_i) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    if (a->has_s) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    if (a->t) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
    if (a->g) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
    if (a->n_floats) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
    if (a->n_ints) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    if (a->n_strings) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
    return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED;
}

static bool is_graph_attr(const Onnx__AttributeProto *a) {
    return a->g && attr_type(a) == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
}

static bool ix_attr_has(const kiln_import_ctx *ic, const char *name) {
    return find_attr(ic, name) != NULL;
}

static int64_t ix_attr_int(const kiln_import_ctx *ic, const char *name, int64_t dflt) {
    const Onnx__AttributeProto *a = find_attr(ic, name);
    if (!a) return dflt;
    switch (attr_type(a)) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: return a->i;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        if (a->f >= -9.2e18f && a->f <= 9.2e18f) return (int64_t)a->f;
        return dflt;
    default: return dflt;
    }
}

static kiln_status ix_attr_int32(const kiln_import_ctx *ic, const char *name, int64_t dflt,
                            int32_t *out) {
    int64_t v = ix_attr_int(ic, name, dflt);
    if (v < INT32_MIN || v > INT32_MAX)
        return KILN_IMPORT_FAIL(ic, "attribute '%s' = %" PRId64 " is out of range", name, v);
    *out = (int32_t)v;
    return KILN_OK;
}

static float ix_attr_float(const kiln_import_ctx *ic, const char *name, float dflt) {
    const Onnx__AttributeProto *a = find_attr(ic, name);
    if (!a) return dflt;
    switch (attr_type(a)) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT: return a->f;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: return (float)a->i;
    default: return dflt;
    }
}

static int ix_attr_ints(const kiln_import_ctx *ic, const char *name, int64_t *buf, int cap) {
    const Onnx__AttributeProto *a = find_attr(ic, name);
    if (!a) return -1;
    switch (attr_type(a)) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS: {
        int n = a->n_ints > INT32_MAX ? INT32_MAX : (int)a->n_ints;
        for (int i = 0; i < n && i < cap; i++)
            buf[i] = a->ints[i];
        return n;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
        if (cap > 0) buf[0] = a->i;
        return 1;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED: return 0; /* an empty list */
    default: return -1;
    }
}

static int ix_attr_floats(const kiln_import_ctx *ic, const char *name, float *buf, int cap) {
    const Onnx__AttributeProto *a = find_attr(ic, name);
    if (!a) return -1;
    switch (attr_type(a)) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS: {
        int n = a->n_floats > INT32_MAX ? INT32_MAX : (int)a->n_floats;
        for (int i = 0; i < n && i < cap; i++)
            buf[i] = a->floats[i];
        return n;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS: {
        int n = a->n_ints > INT32_MAX ? INT32_MAX : (int)a->n_ints;
        for (int i = 0; i < n && i < cap; i++)
            buf[i] = (float)a->ints[i];
        return n;
    }
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
        if (cap > 0) buf[0] = a->f;
        return 1;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED: return 0;
    default: return -1;
    }
}

static const char *ix_attr_string(const kiln_import_ctx *ic, const char *name, const char *dflt) {
    const Onnx__AttributeProto *a = find_attr(ic, name);
    if (!a || attr_type(a) != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING) return dflt;
    char *s = kiln__malloc(a->s.len + 1);
    if (!s) return dflt;
    if (a->s.len) memcpy(s, a->s.data, a->s.len);
    s[a->s.len] = 0;
    if (ctx_own((kiln_import_ctx *)ic, s) != KILN_OK) return dflt;
    return s;
}

static int ix_attr_strings(const kiln_import_ctx *ic, const char *name, const char **buf, int cap) {
    const Onnx__AttributeProto *a = find_attr(ic, name);
    if (!a || attr_type(a) != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS) return -1;
    int n = a->n_strings > INT32_MAX ? INT32_MAX : (int)a->n_strings;
    for (int i = 0; i < n && i < cap; i++) {
        char *s = kiln__malloc(a->strings[i].len + 1);
        if (!s) return -1;
        if (a->strings[i].len) memcpy(s, a->strings[i].data, a->strings[i].len);
        s[a->strings[i].len] = 0;
        if (ctx_own((kiln_import_ctx *)ic, s) != KILN_OK) return -1;
        buf[i] = s;
    }
    return n;
}

static kiln_status ix_attr_tensor(const kiln_import_ctx *ic, const char *name, kiln_tinfo *info) {
    memset(info, 0, sizeof *info);
    const Onnx__AttributeProto *a = find_attr(ic, name);
    if (!a || !a->t)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): attribute '%s' is not a tensor", ic->name,
                         ic->op_type, name);
    char what[400];
    snprintf(what, sizeof what, "node '%s' (%s): attribute '%s'", ic->name, ic->op_type, name);
    void *owned = NULL;
    KILN_TRY(kiln__onnx_tensor_decode(a->t, what, ic->im->base_dir, info, &owned));
    if (owned) KILN_TRY(ctx_own((kiln_import_ctx *)ic, owned));
    return KILN_OK;
}

static kiln_status ix_import_set_const_input(kiln_import_ctx *ic, int i, kiln_dtype dtype, int rank,
                                        const int64_t *dims, const void *data) {
    if (i < 0 || i > 1024)
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s': bad constant input index %d", ic->name, i);
    if (rank < 0 || rank > KILN_MAX_RANK)
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s': bad constant rank %d", ic->name, rank);
    kiln_graph *g = ic->im->g;
    char name[300];
    snprintf(name, sizeof name, "%s:in%d", ic->name, i);
    int v, d;
    if (kiln__graph_find_value(g, name) >= 0 || strmap_get(&ic->im->defs, name, &d))
        KILN_TRY(kiln__graph_add_value(g, NULL, &v)); /* name taken: a fresh one */
    else
        KILN_TRY(kiln__graph_add_value(g, name, &v));
    KILN_TRY(kiln__value_set_const(&g->values[v], dtype, rank, dims, data));
    g->values[v].flags |= KILN_VALUE_CONST;
    KILN_TRY(kiln__grow((void **)&ic->in, &ic->cap_in, i + 1, sizeof(int)));
    while (ic->n_in <= i)
        ic->in[ic->n_in++] = -1;
    ic->in[i] = v;
    return KILN_OK;
}

static const char *ix_op_type(const kiln_import_ctx *ic) { return ic->op_type; }

/* What the ops' import functions call (op.h): this importer's side. */
static const kiln_import_i onnx_import_i = {
    .opset = ix_import_opset,
    .node_name = ix_import_node_name,
    .op_type = ix_op_type,
    .num_inputs = ix_import_num_inputs,
    .num_outputs = ix_import_num_outputs,
    .has_input = ix_import_has_input,
    .input_info = ix_import_input_info,
    .attr_has = ix_attr_has,
    .attr_int = ix_attr_int,
    .attr_int32 = ix_attr_int32,
    .attr_float = ix_attr_float,
    .attr_ints = ix_attr_ints,
    .attr_floats = ix_attr_floats,
    .attr_strings = ix_attr_strings,
    .attr_string = ix_attr_string,
    .attr_tensor = ix_attr_tensor,
    .set_const_input = ix_import_set_const_input,
};

/* ---- step 4: nodes ----------------------------------------------------------- */

static kiln_status import_constant(importer *im, const Onnx__NodeProto *np, const char *label) {
    if (np->n_output != 1 || !np->output[0] || !*np->output[0])
        return KILN_FAIL(KILN_ERR_MODEL, "Constant node '%s' must have exactly one output", label);
    const char *out = np->output[0];
    if (np->n_attribute != 1)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "Constant node '%s' must have exactly one attribute (has %zu)", label,
                         np->n_attribute);
    const Onnx__AttributeProto *a = np->attribute[0];
    const char *an = str_or_empty(a->name);
    kiln_tinfo info;
    memset(&info, 0, sizeof info);
    void *owned = NULL;
    if (!strcmp(an, "value")) {
        char what[300];
        snprintf(what, sizeof what, "Constant node '%s'", label);
        if (!a->t) return KILN_FAIL(KILN_ERR_MODEL, "%s: attribute 'value' is not a tensor", what);
        KILN_TRY(kiln__onnx_tensor_decode(a->t, what, im->base_dir, &info, &owned));
    } else if (!strcmp(an, "value_float")) {
        info.dtype = KILN_DTYPE_FLOAT32;
        info.rank = 0;
        info.data = &a->f;
    } else if (!strcmp(an, "value_int")) {
        info.dtype = KILN_DTYPE_INT64;
        info.rank = 0;
        info.data = &a->i;
    } else if (!strcmp(an, "value_floats")) {
        info.dtype = KILN_DTYPE_FLOAT32;
        info.rank = 1;
        info.dims[0] = (int64_t)a->n_floats;
        info.data = a->floats;
    } else if (!strcmp(an, "value_ints")) {
        info.dtype = KILN_DTYPE_INT64;
        info.rank = 1;
        info.dims[0] = (int64_t)a->n_ints;
        info.data = a->ints;
    } else if (!strcmp(an, "value_string") || !strcmp(an, "value_strings")) {
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "Constant node '%s': string constants are not supported", label);
    } else if (!strcmp(an, "sparse_value")) {
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "Constant node '%s': sparse constants are not supported", label);
    } else {
        return KILN_FAIL(KILN_ERR_MODEL, "Constant node '%s': unknown attribute '%s'", label, an);
    }
    kiln_status s = add_const_value(im->g, out, &info, NULL);
    kiln__free(owned);
    return s;
}

static kiln_status check_counts(const kiln_import_ctx *ic, const kiln_op_def *op, int index) {
    int n_in = ic->n_in;
    while (n_in > 0 && ic->in[n_in - 1] < 0)
        n_in--; /* trailing absent inputs */
    if (n_in < op->min_inputs || (op->max_inputs >= 0 && n_in > op->max_inputs)) {
        if (op->max_inputs < 0)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (%s, index %d) has %d inputs; %s takes at least %d",
                             ic->name, op->name, index, n_in, op->name, op->min_inputs);
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (%s, index %d) has %d inputs; %s takes %d to %d", ic->name,
                         op->name, index, n_in, op->name, op->min_inputs, op->max_inputs);
    }
    if (ic->n_out < op->min_outputs || (op->max_outputs >= 0 && ic->n_out > op->max_outputs)) {
        if (op->max_outputs < 0)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (%s, index %d) has %d outputs; %s makes at least %d",
                             ic->name, op->name, index, ic->n_out, op->name, op->min_outputs);
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (%s, index %d) has %d outputs; %s makes %d to %d", ic->name,
                         op->name, index, ic->n_out, op->name, op->min_outputs, op->max_outputs);
    }
    return KILN_OK;
}

/* ---- subgraphs ------------------------------------------------------------------ */

static kiln_status import_graph(importer *im, const namelist *free_names);

/* The graph attributes of the ops that have subgraphs, in the order their
 * subgraphs become the node's first inputs. */
static int subgraph_attrs(const char *domain, const char *op_type, const char **names) {
    if (*domain) return 0;
    if (!strcmp(op_type, "If")) {
        names[0] = "then_branch";
        names[1] = "else_branch";
        return 2;
    }
    if (!strcmp(op_type, "Loop") || !strcmp(op_type, "Scan")) {
        names[0] = "body";
        return 1;
    }
    return 0;
}

/* Imports subgraph gp of the node in ic; its inputs are its own, then the
 * values named in free_names (from enclosing graphs). */
static kiln_status import_subgraph(const kiln_import_ctx *ic, const char *attr,
                                   const Onnx__GraphProto *gp, const namelist *free_names,
                                   kiln_graph **out) {
    importer sub;
    memset(&sub, 0, sizeof sub);
    sub.model = ic->im->model;
    sub.gp = gp;
    sub.base_dir = ic->im->base_dir;
    sub.depth = ic->im->depth + 1;
    kiln_status s = sub.depth > MAX_SUBGRAPH_DEPTH
                        ? KILN_FAIL(KILN_ERR_UNSUPPORTED, "subgraphs are nested more than %d deep",
                                    MAX_SUBGRAPH_DEPTH)
                        : import_graph(&sub, free_names);
    importer_free(&sub);
    if (s != KILN_OK) {
        kiln__graph_free(sub.g);
        return kiln__fail_prefix(s, "node '%s' (%s), subgraph '%s'", ic->name, ic->op_type, attr);
    }
    *out = sub.g;
    return KILN_OK;
}

/* For a node with subgraphs: imports each, stores it in a uint8 constant,
 * and makes the node's inputs [subgraphs..., its own inputs..., outer
 * values its subgraphs read...]. */
static kiln_status attach_subgraphs(kiln_import_ctx *ic, int index) {
    const Onnx__NodeProto *np = ic->np;
    const char *names[2];
    const char *domain = domain_is_onnx(np->domain) ? "" : np->domain;
    int n_graphs = subgraph_attrs(domain, ic->op_type, names);
    for (size_t k = 0; k < np->n_attribute; k++) {
        const Onnx__AttributeProto *a = np->attribute[k];
        if (!is_graph_attr(a)) continue;
        bool known = false;
        for (int i = 0; i < n_graphs; i++) known |= a->name && !strcmp(a->name, names[i]);
        if (!known)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "node '%s' (%s): attribute '%s' is a graph; kiln supports subgraphs "
                             "only in If, Loop and Scan",
                             ic->name, ic->op_type, str_or_empty(a->name));
    }
    if (!n_graphs) return KILN_OK;
    kiln_graph *g = ic->im->g;
    const namelist *fv = &ic->im->free_of[index];
    int n_in = n_graphs + ic->n_in + fv->n;
    int *in = kiln__calloc((size_t)n_in + 1, sizeof *in);
    if (!in) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kiln_status s = KILN_OK;
    for (int i = 0; i < n_graphs && s == KILN_OK; i++) {
        const Onnx__AttributeProto *a = find_attr(ic, names[i]);
        if (!a || !is_graph_attr(a)) {
            s = KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): graph attribute '%s' is missing",
                          ic->name, ic->op_type, names[i]);
            break;
        }
        kiln_graph *sg = NULL;
        void *blob = NULL;
        size_t size = 0;
        s = import_subgraph(ic, names[i], a->g, fv, &sg);
        if (s == KILN_OK) s = kiln__subgraph_pack(sg, &blob, &size);
        kiln__graph_free(sg);
        if (s == KILN_OK && size > (size_t)INT64_MAX)
            s = KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': subgraph too large", ic->name);
        char cname[300];
        snprintf(cname, sizeof cname, "%s:%s", ic->name, names[i]);
        int v, d;
        if (s == KILN_OK) {
            bool taken =
                kiln__graph_find_value(g, cname) >= 0 || strmap_get(&ic->im->defs, cname, &d);
            s = kiln__graph_add_value(g, taken ? NULL : cname, &v);
        }
        if (s == KILN_OK) {
            int64_t dims[1] = {(int64_t)size};
            s = kiln__value_set_const(&g->values[v], KILN_DTYPE_UINT8, 1, dims, blob);
            g->values[v].flags |= KILN_VALUE_CONST;
            in[i] = v;
        }
        kiln__aligned_free(blob);
    }
    for (int i = 0; i < ic->n_in; i++) in[n_graphs + i] = ic->in[i];
    for (int i = 0; i < fv->n && s == KILN_OK; i++) {
        int v = kiln__graph_find_value(g, fv->v[i]);
        if (v < 0)
            s = KILN_FAIL(KILN_ERR_INTERNAL, "node '%s': outer value '%s' not found", ic->name,
                          fv->v[i]);
        in[n_graphs + ic->n_in + i] = v;
    }
    if (s != KILN_OK) {
        kiln__free(in);
        return s;
    }
    kiln__free(ic->in);
    ic->in = in;
    ic->n_in = ic->cap_in = n_in;
    /* the cached infos no longer match the inputs */
    for (int i = 0; i < ic->cap_infos; i++) kiln__free(ic->infos[i]);
    kiln__free(ic->infos);
    ic->infos = NULL;
    ic->cap_infos = 0;
    return KILN_OK;
}

static kiln_status import_node(importer *im, int index) {
    const Onnx__NodeProto *np = im->gp->node[index];
    kiln_graph *g = im->g;
    char label[256];
    node_label(np, index, label, sizeof label);
    const char *op_type = str_or_empty(np->op_type);
    const char *domain = domain_is_onnx(np->domain) ? "" : np->domain;
    if (!*op_type)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (index %d) has no op_type", label, index);

    if (!*domain && !strcmp(op_type, "Constant")) return import_constant(im, np, label);

    int op_id = kiln__op_find(domain, op_type);
    const kiln_op_def *op = op_id ? kiln__op_by_id(op_id) : NULL;
    if (!op)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "unsupported operator '%s' (domain '%s') at node '%s' (index %d)", op_type,
                         domain, label, index);
    int64_t opset;
    if (!find_opset(im, domain, &opset))
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (%s, index %d) uses domain '%s', which the model's "
                         "opset_import does not list",
                         label, op_type, index, domain);
    if (opset < op->since)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "operator '%s' at node '%s' (index %d): the model uses opset %" PRId64
                         "; kiln supports %s from opset %d",
                         op_type, label, index, opset, op_type, op->since);

    kiln_import_ctx ic;
    memset(&ic, 0, sizeof ic);
    ic.vt = &onnx_import_i;
    ic.im = im;
    ic.np = np;
    ic.name = label;
    ic.op_type = op_type;
    ic.opset = opset;
    void *attrs = NULL;
    kiln_status s = KILN_OK;
    int *outs = NULL;

    /* inputs: "" = absent; trailing absent ones dropped */
    int n_in = (int)np->n_input;
    while (n_in > 0 && !*str_or_empty(np->input[n_in - 1]))
        n_in--;
    if ((s = kiln__grow((void **)&ic.in, &ic.cap_in, n_in + 1, sizeof(int))) != KILN_OK) goto done;
    for (int i = 0; i < n_in; i++) {
        const char *name = str_or_empty(np->input[i]);
        int v = -1;
        if (*name && (v = kiln__graph_find_value(g, name)) < 0) {
            s = KILN_FAIL(KILN_ERR_INTERNAL, "node '%s': input '%s' not found after sorting", label,
                          name);
            goto done;
        }
        ic.in[ic.n_in++] = v;
    }

    /* outputs: trailing unnamed ones dropped, unnamed ones in between get
     * fresh values */
    int n_out = (int)np->n_output;
    while (n_out > 0 && !*str_or_empty(np->output[n_out - 1]))
        n_out--;
    ic.n_out = n_out;
    outs = kiln__calloc((size_t)n_out + 1, sizeof *outs);
    if (!outs) {
        s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    for (int j = 0; j < n_out; j++) {
        const char *name = str_or_empty(np->output[j]);
        if ((s = kiln__graph_add_value(g, *name ? name : NULL, &outs[j])) != KILN_OK) goto done;
        g->values[outs[j]].info.dtype = KILN_DTYPE_UNDEFINED;
        g->values[outs[j]].info.rank = -1;
    }

    if (op->attr_size) {
        attrs = kiln__calloc(1, op->attr_size);
        if (!attrs) {
            s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
            goto done;
        }
    }
    if (op->import && (s = op->import(&ic, attrs)) != KILN_OK) goto done;
    if (op->validate && (s = op->validate(op, attrs, label)) != KILN_OK) goto done;
    if ((s = attach_subgraphs(&ic, index)) != KILN_OK) goto done;
    if ((s = check_counts(&ic, op, index)) != KILN_OK) goto done;
    s = kiln__graph_add_node(g, op_id, label, ic.n_in, ic.in, n_out, outs, attrs, NULL);
done:
    kiln__free(outs);
    kiln__free(attrs);
    ctx_free(&ic);
    return s;
}

/* ---- step 5: declared types, outputs --------------------------------------- */

/* Applies a declared type to a node output whose type is still unknown
 * (a hint for the model's own inference: kiln_build infers every node
 * output again from the inputs' shape profiles and keeps only declared
 * ranks and symbolic dims of graph outputs, see resolve_profiles);
 * *declared_out (may be NULL): the declared type. The main graph's
 * value_info entries ("value") are listed in im->vi for the build's
 * warnings. */
static kiln_status apply_declared(importer *im, const Onnx__ValueInfoProto *vi, const char *kind,
                                  int *value_out, kiln_tinfo *declared_out) {
    kiln_graph *g = im->g;
    const char *name = str_or_empty(vi->name);
    char what[300];
    snprintf(what, sizeof what, "%s '%s'", kind, name);
    int v = *name ? kiln__graph_find_value(g, name) : -1;
    if (value_out) *value_out = v;
    if (v < 0) return KILN_OK;
    kiln_tinfo info;
    KILN_TRY(parse_type(im, vi->type, what, false, &info));
    if (declared_out) *declared_out = info;
    kiln_value *val = &g->values[v];
    if (val->flags & (KILN_VALUE_CONST | KILN_VALUE_INPUT)) return KILN_OK;
    if (im->depth == 0 && !declared_out) {
        KILN_TRY(kiln__grow((void **)&im->vi, &im->cap_vi, im->n_vi + 1, sizeof *im->vi));
        im->vi[im->n_vi].value = v;
        im->vi[im->n_vi++].info = info;
    }
    if (val->info.dtype == KILN_DTYPE_UNDEFINED) val->info.dtype = info.dtype;
    if (val->info.rank < 0 && info.rank >= 0) {
        val->info.rank = info.rank;
        memcpy(val->info.dims, info.dims, sizeof info.dims);
    }
    return KILN_OK;
}

static kiln_status import_outputs(importer *im) {
    const Onnx__GraphProto *gp = im->gp;
    kiln_graph *g = im->g;
    for (size_t i = 0; i < gp->n_value_info; i++)
        KILN_TRY(apply_declared(im, gp->value_info[i], "value", NULL, NULL));
    if (gp->n_output == 0) return KILN_FAIL(KILN_ERR_MODEL, "the graph has no outputs");
    if (im->depth == 0 &&
        !(im->declared = kiln__calloc(gp->n_output, sizeof *im->declared)))
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    strmap seen = {0}; /* (a pairwise check took 28 s for 100,000 outputs) */
    kiln_status s = strmap_reserve(&seen, gp->n_output);
    for (size_t i = 0; s == KILN_OK && i < gp->n_output; i++) {
        const char *name = str_or_empty(gp->output[i]->name);
        int d;
        if (!*name) s = KILN_FAIL(KILN_ERR_MODEL, "graph output %zu has no name", i);
        else if (strmap_get(&seen, name, &d))
            s = KILN_FAIL(KILN_ERR_MODEL, "graph output '%s' is listed twice", name);
        else s = strmap_put(&seen, name, 0);
    }
    strmap_free(&seen);
    KILN_TRY(s);
    for (size_t i = 0; i < gp->n_output; i++) {
        const char *name = str_or_empty(gp->output[i]->name);
        int v;
        KILN_TRY(apply_declared(im, gp->output[i], "graph output", &v,
                                im->declared ? &im->declared[i] : NULL));
        if (v < 0)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "graph output '%s' is not produced by any node, graph input or "
                             "initializer",
                             name);
        g->values[v].flags |= KILN_VALUE_OUTPUT;
        KILN_TRY(push_int(&g->outputs, &g->n_outputs, &g->cap_outputs, v));
    }
    return KILN_OK;
}

/* ---- entry point ------------------------------------------------------------- */

/* Imports im->gp into a new im->g. free_names (subgraphs only) are values
 * of enclosing graphs it reads: they become its last inputs. */
static kiln_status import_graph(importer *im, const namelist *free_names) {
    KILN_TRY(kiln__graph_create(&im->g));
    im->g->sub = &kiln__subgraph_io;
    int64_t opset = 0;
    if (find_opset(im, "", &opset)) im->g->opset = opset;
    KILN_TRY(kiln__onnx_resolve_sequences(im->gp, opset, &im->seq_arena, &im->gp));
    KILN_TRY(import_initializers(im));
    KILN_TRY(import_inputs(im));
    for (int i = 0; free_names && i < free_names->n; i++) {
        const char *name = free_names->v[i];
        int d, v;
        if (strmap_get(&im->defs, name, &d))
            return KILN_FAIL(KILN_ERR_MODEL,
                             "value '%s' is defined in the subgraph and also read from an "
                             "enclosing graph by another subgraph of the node",
                             name);
        KILN_TRY(strmap_put(&im->defs, name, DEF_GRAPH));
        KILN_TRY(kiln__graph_add_value(im->g, name, &v));
        im->g->values[v].info.rank = -1;
        im->g->values[v].flags |= KILN_VALUE_INPUT;
        KILN_TRY(push_int(&im->g->inputs, &im->g->n_inputs, &im->g->cap_inputs, v));
    }
    KILN_TRY(index_definitions(im));
    KILN_TRY(sort_nodes(im));
    for (size_t k = 0; k < im->gp->n_node; k++)
        KILN_TRY(import_node(im, im->order[k]));
    KILN_TRY(import_outputs(im));
    kiln__graph_link(im->g);
    return KILN_OK;
}

static kiln_status import_model(importer *im) {
    const Onnx__ModelProto *m = im->model;
    if (!m->graph) return KILN_FAIL(KILN_ERR_MODEL, "not a valid ONNX model: it has no graph");
    im->gp = m->graph;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if (o->has_version && o->version < 1)
            return KILN_FAIL(KILN_ERR_MODEL, "opset_import of domain '%s' has version %" PRId64,
                             str_or_empty(o->domain), o->version);
        /* a domain listed twice with two versions: which meaning its ops have is
         * not said (kiln read the first; Softmax's axis, Clip's bounds differ) */
        for (size_t j = 0; j < i; j++) {
            const Onnx__OperatorSetIdProto *p = m->opset_import[j];
            bool same = domain_is_onnx(o->domain) ? domain_is_onnx(p->domain)
                                                  : !strcmp(str_or_empty(o->domain), str_or_empty(p->domain));
            int64_t vo = o->has_version ? o->version : 1, vp = p->has_version ? p->version : 1;
            if (same && vo != vp)
                return KILN_FAIL(KILN_ERR_MODEL,
                                 "opset_import entries %zu (domain '%s', version %" PRId64 ") and %zu (domain "
                                 "'%s', version %" PRId64 ") give one domain two versions: which one the "
                                 "model's operators follow is not said",
                                 j, str_or_empty(p->domain), vp, i, str_or_empty(o->domain), vo);
        }
    }
    return import_graph(im, NULL);
}

static char *make_producer(const Onnx__ModelProto *m) {
    const char *n = str_or_empty(m->producer_name), *v = str_or_empty(m->producer_version);
    size_t ln = strlen(n), lv = strlen(v);
    char *p = kiln__malloc(ln + lv + 2);
    if (!p) return NULL;
    memcpy(p, n, ln);
    size_t k = ln;
    if (ln && lv) p[k++] = ' ';
    memcpy(p + k, v, lv);
    p[k + lv] = 0;
    return p;
}

kiln_status kiln__onnx_import(const void *data, size_t size, const char *base_dir, kiln_graph **out,
                              kiln_onnx_extras *extras) {
    if (!out) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln__onnx_import: out is NULL");
    *out = NULL;
    if (extras) memset(extras, 0, sizeof *extras);
    if (!data && size) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "model bytes are NULL");
    if (size == 0) return KILN_FAIL(KILN_ERR_MODEL, "not a valid ONNX model: it is empty");

    ProtobufCAllocator alloc;
    kiln__onnx_allocator(&alloc);
    if (!kiln__pb_depth_ok(&onnx__model_proto__descriptor, data, size))
        return KILN_FAIL(KILN_ERR_MODEL, "not a valid ONNX model: its messages are nested more than %d levels "
                         "deep (subgraphs in subgraphs, or types in types)",
                         KILN_PB_MAX_DEPTH);
    Onnx__ModelProto *m = onnx__model_proto__unpack(&alloc, size, data);
    if (!m) return KILN_FAIL(KILN_ERR_MODEL, "not a valid ONNX model: protobuf parse failed");

    importer im;
    memset(&im, 0, sizeof im);
    im.model = m;
    im.base_dir = base_dir;
    kiln_status s = import_model(&im);
    char *prod = NULL;
    if (s == KILN_OK && extras && !(prod = make_producer(m)))
        s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (s == KILN_OK && extras) {
        extras->producer = prod;
        extras->declared = im.declared; /* taken over */
        im.declared = NULL;
        extras->vi = im.vi;
        extras->n_vi = im.n_vi;
        im.vi = NULL;
    }
    importer_free(&im);
    onnx__model_proto__free_unpacked(m, &alloc);
    if (s != KILN_OK) {
        kiln__graph_free(im.g);
        return s;
    }
    *out = im.g;
    return KILN_OK;
}
