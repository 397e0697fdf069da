/* sequence.c -- ONNX sequences whose structure is known at build time,
 * rewritten into plain tensor edges before a graph is imported.
 *
 * kiln's values are tensors. A sequence whose length and elements are fixed
 * by the graph itself (torch's exporter writes `tensor_split`, `unbind` and
 * `split` with a list result this way: SequenceEmpty, a Loop with a constant
 * trip count that SequenceInserts slices, then SequenceAt with constant
 * positions) is a list of tensor names here:
 *
 *   SequenceEmpty / SequenceConstruct     -> a list (of none / the inputs)
 *   SequenceInsert / SequenceErase        -> a new list (constant or absent position)
 *   SequenceAt (constant position)        -> Identity of that element
 *   SequenceLength                        -> a constant
 *   ConcatFromSequence                    -> Concat (new_axis: Unsqueeze each first)
 *   SplitToSequence (constant split, or a
 *     split axis whose length is declared) -> Split (keepdims=0: Squeeze each)
 *   Identity of a sequence                -> the same list
 *   Loop carrying a sequence              -> unrolled: the body's nodes once per
 *                                            iteration, when the trip count is a
 *                                            constant and the condition stays a
 *                                            constant (renamed "<loop>/iter<k>/...")
 *
 * Everything else that touches a sequence (a position computed at run
 * time, a Loop whose trip count is an input, a sequence as a graph input or
 * output, a sequence read by an If branch) is refused with
 * KILN_ERR_UNSUPPORTED naming the node and why.
 *
 * The rewritten graph is a shallow copy of the original: the nodes kept are
 * the original's, the new ones (and every array) live in an arena freed
 * after the import. */
#include "onnx/onnx_internal.h"

#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>

enum { SEQ_MAX_UNROLL = 4096 }; /* iterations of one unrolled Loop */
enum { SEQ_MAX_NODES = 1 << 20 }; /* nodes of a rewritten graph */
/* Tensor names held by all sequence lists and Loop scan lists together (each
 * SequenceInsert copies its list, so a chain of n inserts holds n^2/2 names:
 * without a bound a 1.4 MB file of 40000 inserts took 8 GB) */
enum { SEQ_MAX_SLOTS = 1 << 24 };

/* ---- the arena ------------------------------------------------------------------ */

void kiln__onnx_arena_free(kiln_onnx_arena *a) {
    for (int i = 0; i < a->n; i++) kiln__free(a->p[i]);
    kiln__free(a->p);
    memset(a, 0, sizeof *a);
}

static void *ar_alloc(kiln_onnx_arena *a, size_t size) {
    if (kiln__grow((void **)&a->p, &a->cap, a->n + 1, sizeof *a->p) != KILN_OK) return NULL;
    void *p = kiln__calloc(1, size ? size : 1);
    if (p) a->p[a->n++] = p;
    return p;
}

static char *ar_printf(kiln_onnx_arena *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? ar_alloc(a, (size_t)n + 1) : NULL;
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static kiln_status oom(void) {
    return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory resolving sequences");
}

/* ---- name index: name -> int, open addressing (a later put replaces) ------------------ */

/* The lists of names the resolver looks up in (sequences, constants, an
 * iteration's renames) grow with the model: searched linearly, a body of
 * 100000 nodes unrolled once took 10 s (a plain graph of as many, 0.1 s). */
typedef struct ix_slot {
    const char *k; /* NULL: empty */
    int v;
} ix_slot;

typedef struct name_ix {
    ix_slot *slot;
    int cap, n; /* cap: 0 or a power of two */
} name_ix;

static uint64_t ix_hash(const char *s) { return kiln__fnv1a(s, strlen(s), KILN_FNV_SEED); }

static int ix_get(const name_ix *ix, const char *k) {
    if (!ix->cap || !k) return -1;
    for (uint64_t i = ix_hash(k) & (uint64_t)(ix->cap - 1);; i = (i + 1) & (uint64_t)(ix->cap - 1)) {
        if (!ix->slot[i].k) return -1;
        if (!strcmp(ix->slot[i].k, k)) return ix->slot[i].v;
    }
}

static kiln_status ix_put(name_ix *ix, const char *k, int v) {
    if ((ix->n + 1) * 2 > ix->cap) {
        if (ix->cap > INT_MAX / 4) return oom();
        int cap = ix->cap ? ix->cap * 2 : 64;
        ix_slot *ns = kiln__calloc((size_t)cap, sizeof *ns);
        if (!ns) return oom();
        for (int j = 0; j < ix->cap; j++) {
            if (!ix->slot[j].k) continue;
            uint64_t i = ix_hash(ix->slot[j].k) & (uint64_t)(cap - 1);
            while (ns[i].k) i = (i + 1) & (uint64_t)(cap - 1);
            ns[i] = ix->slot[j];
        }
        kiln__free(ix->slot);
        ix->slot = ns;
        ix->cap = cap;
    }
    uint64_t i = ix_hash(k) & (uint64_t)(ix->cap - 1);
    while (ix->slot[i].k && strcmp(ix->slot[i].k, k)) i = (i + 1) & (uint64_t)(ix->cap - 1);
    if (!ix->slot[i].k) ix->n++;
    ix->slot[i] = (ix_slot){.k = k, .v = v};
    return KILN_OK;
}

static void ix_free(name_ix *ix) {
    kiln__free(ix->slot);
    memset(ix, 0, sizeof *ix);
}

/* ---- resolver state ----------------------------------------------------------------- */

typedef struct seq_list {
    const char *name;
    const char **el; /* element tensor names (arena) */
    int n;
} seq_list;

typedef struct seq_const {
    const char *name;
    const Onnx__TensorProto *t;
} seq_const;

typedef struct resolver {
    kiln_onnx_arena *ar;
    const Onnx__GraphProto *gp;
    int64_t opset;
    Onnx__NodeProto **nodes; /* the new node list */
    int n_nodes, cap_nodes;
    seq_list *seqs;
    int n_seqs, cap_seqs;
    name_ix seq_ix; /* name -> index in seqs (the latest) */
    seq_const *consts;
    int n_consts, cap_consts;
    name_ix const_ix;  /* name -> index in consts (the latest) */
    name_ix init_ix;   /* name -> index of gp's initializer (the first) */
    int fresh; /* counter for new names */
    int64_t slots; /* names held by sequence and scan lists (SEQ_MAX_SLOTS) */
} resolver;

static const char *str0(const char *s) { return s ? s : ""; }

static bool onnx_domain(const Onnx__NodeProto *np) {
    return !np->domain || !*np->domain || !strcmp(np->domain, "ai.onnx");
}

static bool is_op(const Onnx__NodeProto *np, const char *op) {
    return onnx_domain(np) && !strcmp(str0(np->op_type), op);
}

static const char *label(const Onnx__NodeProto *np) {
    if (np->name && *np->name) return np->name;
    return np->n_output ? str0(np->output[0]) : str0(np->op_type);
}


/* Room for n more names in sequence or scan lists, for node np. */
static kiln_status charge_slots(resolver *r, const Onnx__NodeProto *np, int64_t n) {
    if (n > SEQ_MAX_SLOTS - r->slots)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (%s): resolving sequences would hold more than %d tensor "
                         "names in all (each sequence op copies its list); kiln resolves "
                         "sequences at build and bounds what that takes",
                         label(np), str0(np->op_type), SEQ_MAX_SLOTS);
    r->slots += n;
    return KILN_OK;
}

static seq_list *seq_find(resolver *r, const char *name) {
    if (!name || !*name) return NULL;
    int i = ix_get(&r->seq_ix, name);
    return i < 0 ? NULL : &r->seqs[i];
}

/* A new list `name` of n elements (copied from el, NULL: unset). */
static kiln_status seq_add(resolver *r, const Onnx__NodeProto *np, const char *name,
                           const char *const *el, int n, seq_list **out) {
    KILN_TRY(charge_slots(r, np, (int64_t)n + 1));
    KILN_TRY(kiln__grow((void **)&r->seqs, &r->cap_seqs, r->n_seqs + 1, sizeof *r->seqs));
    KILN_TRY(ix_put(&r->seq_ix, name, r->n_seqs));
    seq_list *s = &r->seqs[r->n_seqs];
    s->name = name;
    s->n = n;
    s->el = ar_alloc(r->ar, sizeof *s->el * (size_t)(n + 1));
    if (!s->el) return oom();
    if (el && n) memcpy(s->el, el, sizeof *s->el * (size_t)n);
    r->n_seqs++;
    if (out) *out = s;
    return KILN_OK;
}

static const Onnx__TensorProto *const_find(const resolver *r, const char *name) {
    if (!name || !*name) return NULL;
    int i = ix_get(&r->const_ix, name);
    if (i >= 0) return r->consts[i].t;
    i = ix_get(&r->init_ix, name);
    return i < 0 ? NULL : r->gp->initializer[i];
}

static kiln_status const_add(resolver *r, const char *name, const Onnx__TensorProto *t) {
    KILN_TRY(kiln__grow((void **)&r->consts, &r->cap_consts, r->n_consts + 1, sizeof *r->consts));
    KILN_TRY(ix_put(&r->const_ix, name, r->n_consts));
    r->consts[r->n_consts++] = (seq_const){.name = name, .t = t};
    return KILN_OK;
}

/* The integer values of constant `name` (at most cap). *n = -1: not a
 * constant known here. */
static kiln_status const_ints(const resolver *r, const char *name, int64_t *buf, int cap,
                              int *n, int *rank) {
    *n = -1;
    const Onnx__TensorProto *t = const_find(r, name);
    if (!t) return KILN_OK;
    kiln_tinfo info;
    void *owned = NULL;
    char what[300];
    snprintf(what, sizeof what, "constant '%s'", name);
    KILN_TRY(kiln__onnx_tensor_decode(t, what, NULL, &info, &owned));
    int64_t cnt = kiln__numel(info.rank, info.dims);
    kiln_status s = KILN_OK;
    if (!(kiln__dtype_is_int(info.dtype) || info.dtype == KILN_DTYPE_BOOL) || cnt > cap)
        s = KILN_OK; /* not an integer list we use: unknown */
    else {
        for (int64_t i = 0; i < cnt; i++) buf[i] = kiln__load_i64(info.dtype, info.data, i);
        *n = (int)cnt;
        *rank = info.rank;
    }
    kiln__free(owned);
    return s;
}


static int64_t attr_int(const Onnx__NodeProto *np, const char *name, int64_t dflt) {
    for (size_t k = 0; k < np->n_attribute; k++)
        if (!strcmp(str0(np->attribute[k]->name), name)) return np->attribute[k]->i;
    return dflt;
}

/* ---- writing nodes --------------------------------------------------------------- */

static char *fresh_name(resolver *r, const char *base, const char *what) {
    return ar_printf(r->ar, "%s/kiln_seq_%s_%d", base, what, r->fresh++);
}

static kiln_status push_node(resolver *r, Onnx__NodeProto *np) {
    if (r->n_nodes >= SEQ_MAX_NODES)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "resolving sequences would make more than %d nodes (at node '%s')",
                         SEQ_MAX_NODES, label(np));
    KILN_TRY(kiln__grow((void **)&r->nodes, &r->cap_nodes, r->n_nodes + 1, sizeof *r->nodes));
    r->nodes[r->n_nodes++] = np;
    return KILN_OK;
}

/* A new node (up to 4 attributes); inputs and outputs are borrowed names. */
static kiln_status emit(resolver *r, const char *op, const char *name, int n_in,
                        const char *const *in, int n_out, const char *const *out,
                        Onnx__NodeProto **np_out) {
    Onnx__NodeProto *np = ar_alloc(r->ar, sizeof *np);
    char **iv = ar_alloc(r->ar, sizeof(char *) * (size_t)(n_in + 1));
    char **ov = ar_alloc(r->ar, sizeof(char *) * (size_t)(n_out + 1));
    Onnx__AttributeProto **av = ar_alloc(r->ar, sizeof(void *) * 4);
    if (!np || !iv || !ov || !av) return oom();
    onnx__node_proto__init(np);
    np->op_type = (char *)op;
    np->name = (char *)name;
    for (int i = 0; i < n_in; i++) iv[i] = (char *)in[i];
    for (int i = 0; i < n_out; i++) ov[i] = (char *)out[i];
    np->input = iv;
    np->n_input = (size_t)n_in;
    np->output = ov;
    np->n_output = (size_t)n_out;
    np->attribute = av;
    KILN_TRY(push_node(r, np));
    if (np_out) *np_out = np;
    return KILN_OK;
}

static kiln_status add_attr(resolver *r, Onnx__NodeProto *np, const char *name, int type,
                            Onnx__AttributeProto **out) {
    Onnx__AttributeProto *a = ar_alloc(r->ar, sizeof *a);
    if (!a) return oom();
    onnx__attribute_proto__init(a);
    a->name = (char *)name;
    a->has_type = 1;
    a->type = type;
    np->attribute[np->n_attribute++] = a;
    *out = a;
    return KILN_OK;
}

static kiln_status attr_i(resolver *r, Onnx__NodeProto *np, const char *name, int64_t v) {
    Onnx__AttributeProto *a = NULL;
    KILN_TRY(add_attr(r, np, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, &a));
    a->has_i = 1;
    a->i = v;
    return KILN_OK;
}

static kiln_status attr_ints(resolver *r, Onnx__NodeProto *np, const char *name, int n,
                             const int64_t *v) {
    Onnx__AttributeProto *a = NULL;
    KILN_TRY(add_attr(r, np, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, &a));
    a->ints = ar_alloc(r->ar, sizeof *a->ints * (size_t)(n + 1));
    if (!a->ints) return oom();
    memcpy(a->ints, v, sizeof *a->ints * (size_t)n);
    a->n_ints = (size_t)n;
    return KILN_OK;
}

/* A tensor of n int64 (or bool) values v, of rank 0 (n = 1) or 1. */
static Onnx__TensorProto *int_tensor(resolver *r, int rank, int n, const int64_t *v, int32_t dtype) {
    Onnx__TensorProto *t = ar_alloc(r->ar, sizeof *t);
    int64_t *dims = ar_alloc(r->ar, sizeof *dims);
    uint8_t *raw = ar_alloc(r->ar, sizeof(int64_t) * (size_t)(n + 1));
    if (!t || !dims || !raw) return NULL;
    onnx__tensor_proto__init(t);
    t->has_data_type = 1;
    t->data_type = dtype;
    t->n_dims = (size_t)rank;
    dims[0] = n;
    t->dims = dims;
    size_t esz = dtype == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL ? 1 : sizeof(int64_t);
    for (int i = 0; i < n; i++) {
        if (esz == 1)
            raw[i] = v[i] != 0;
        else
            memcpy(raw + (size_t)i * esz, &v[i], esz);
    }
    t->has_raw_data = 1;
    t->raw_data.data = raw;
    t->raw_data.len = esz * (size_t)n;
    return t;
}

/* A Constant node `out` holding int64 (or bool) values v (rank 0 or 1). */
static kiln_status emit_const(resolver *r, const char *out, int rank, int n, const int64_t *v,
                              int32_t dtype) {
    Onnx__NodeProto *np = NULL;
    KILN_TRY(emit(r, "Constant", out, 0, NULL, 1, &out, &np));
    Onnx__TensorProto *t = int_tensor(r, rank, n, v, dtype);
    if (!t) return oom();
    Onnx__AttributeProto *a = NULL;
    KILN_TRY(add_attr(r, np, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR, &a));
    a->t = t;
    return const_add(r, out, t);
}

/* out = Unsqueeze(in, [axis]) or Squeeze, in the form of the model's opset. */
static kiln_status emit_squeeze(resolver *r, const char *op, const char *in, int64_t axis,
                                const char *out) {
    Onnx__NodeProto *np = NULL;
    if (r->opset >= 13) {
        const char *ax = fresh_name(r, out, "axes");
        if (!ax) return oom();
        KILN_TRY(emit_const(r, ax, 1, 1, &axis, ONNX__TENSOR_PROTO__DATA_TYPE__INT64));
        const char *ins[2] = {in, ax};
        return emit(r, op, out, 2, ins, 1, &out, &np);
    }
    KILN_TRY(emit(r, op, out, 1, &in, 1, &out, &np));
    return attr_ints(r, np, "axes", 1, &axis);
}

static kiln_status emit_identity(resolver *r, const char *in, const char *out) {
    KILN_TRY(emit(r, "Identity", out, 1, &in, 1, &out, NULL));
    const Onnx__TensorProto *t = const_find(r, in);
    return t ? const_add(r, out, t) : KILN_OK;
}

/* out = Concat of els along axis (new_axis: each Unsqueezed at axis first). */
static kiln_status emit_concat(resolver *r, const char *node, const char *const *els, int n,
                               int64_t axis, bool new_axis, const char *out) {
    if (n == 0)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s': the sequence is empty, so the dtype and shape of its "
                         "concatenation are not known",
                         node);
    const char **ins = ar_alloc(r->ar, sizeof *ins * (size_t)n);
    if (!ins) return oom();
    for (int i = 0; i < n; i++) {
        ins[i] = els[i];
        if (!new_axis) continue;
        if (!(ins[i] = fresh_name(r, out, "unsqueeze"))) return oom();
        KILN_TRY(emit_squeeze(r, "Unsqueeze", els[i], axis, ins[i]));
    }
    Onnx__NodeProto *np = NULL;
    KILN_TRY(emit(r, "Concat", out, n, ins, 1, &out, &np));
    return attr_i(r, np, "axis", axis);
}

/* The value of a Constant node as a tensor: its `value`, `value_int` or
 * `value_ints` (NULL: another form, or out of memory). */
static const Onnx__TensorProto *constant_value(resolver *r, const Onnx__NodeProto *np) {
    for (size_t k = 0; k < np->n_attribute; k++) {
        const Onnx__AttributeProto *a = np->attribute[k];
        const char *name = str0(a->name);
        if (!strcmp(name, "value")) return a->t;
        if (!strcmp(name, "value_int"))
            return int_tensor(r, 0, 1, &a->i, ONNX__TENSOR_PROTO__DATA_TYPE__INT64);
        if (!strcmp(name, "value_ints") && a->n_ints <= SEQ_MAX_UNROLL)
            return int_tensor(r, 1, (int)a->n_ints, a->ints, ONNX__TENSOR_PROTO__DATA_TYPE__INT64);
    }
    return NULL;
}

/* ---- sequence ops ------------------------------------------------------------------- */

static kiln_status need_seq(resolver *r, const Onnx__NodeProto *np, int i, seq_list **out) {
    const char *name = i < (int)np->n_input ? str0(np->input[i]) : "";
    *out = seq_find(r, name);
    for (size_t k = 0; !*out && k < r->gp->n_input; k++)
        if (!strcmp(str0(r->gp->input[k]->name), name))
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "node '%s' (%s): input %d is graph input '%s', a sequence; kiln has "
                             "no sequence values at run time, so its engines take tensors only",
                             label(np), str0(np->op_type), i, name);
    if (!*out)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (%s): input %d ('%s') is not a sequence kiln can resolve at "
                         "build (kiln has no sequence values at run time: a sequence must be made "
                         "in the graph with a structure known at build)",
                         label(np), str0(np->op_type), i, name);
    return KILN_OK;
}

/* The constant position in input i (absent: *has = false). */
static kiln_status position(resolver *r, const Onnx__NodeProto *np, int i, bool *has,
                            int64_t *pos) {
    const char *name = i < (int)np->n_input ? str0(np->input[i]) : "";
    *has = *name != 0;
    if (!*has) return KILN_OK;
    int n, rank;
    KILN_TRY(const_ints(r, name, pos, 1, &n, &rank));
    if (n != 1)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (%s): position '%s' is computed at run time; kiln resolves "
                         "sequences only with constant positions",
                         label(np), str0(np->op_type), name);
    return KILN_OK;
}

/* The sequence in input 0 and the position in input pos_in, made
 * non-negative and checked against the sequence's n elements (plus `extra`:
 * 1 where a position may be one past the end); an absent position is
 * n + dflt (dflt < -n: a position is required). */
static kiln_status seq_and_pos(resolver *r, const Onnx__NodeProto *np, int pos_in, int64_t dflt,
                               int extra, seq_list **s, int64_t *pos) {
    KILN_TRY(need_seq(r, np, 0, s));
    bool has;
    KILN_TRY(position(r, np, pos_in, &has, pos));
    int n = (*s)->n;
    if (!has && dflt < -n)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): no position", label(np),
                         str0(np->op_type));
    if (!has) *pos = n + dflt;
    int64_t given = *pos; /* the message names the model's value, not the one made positive */
    if (*pos < 0) *pos += n;
    if (*pos < 0 || *pos >= n + extra)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (%s): position %" PRId64 " is outside the sequence of %d "
                         "tensors",
                         label(np), str0(np->op_type), given, n);
    return KILN_OK;
}

static kiln_status seq_insert(resolver *r, const Onnx__NodeProto *np) {
    seq_list *s = NULL;
    int64_t pos;
    KILN_TRY(seq_and_pos(r, np, 2, 0, 1, &s, &pos));
    if (np->n_input < 2 || !*str0(np->input[1]))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (SequenceInsert): no tensor to insert",
                         label(np));
    int n = s->n;
    const char **el = kiln__calloc((size_t)n + 1, sizeof *el);
    if (!el) return oom();
    for (int i = 0, j = 0; i <= n; i++) el[i] = i == pos ? np->input[1] : s->el[j++];
    kiln_status st = seq_add(r, np, np->output[0], el, n + 1, NULL);
    kiln__free(el);
    return st;
}

static kiln_status seq_erase(resolver *r, const Onnx__NodeProto *np) {
    seq_list *s = NULL, *o = NULL;
    int64_t pos;
    KILN_TRY(seq_and_pos(r, np, 1, -1, 0, &s, &pos));
    int n = s->n;
    KILN_TRY(seq_add(r, np, np->output[0], NULL, n - 1, &o));
    s = seq_find(r, np->input[0]); /* seq_add may have moved it */
    for (int i = 0, j = 0; i < n; i++)
        if (i != pos) o->el[j++] = s->el[i];
    return KILN_OK;
}

static kiln_status seq_at(resolver *r, const Onnx__NodeProto *np) {
    seq_list *s = NULL;
    int64_t pos;
    KILN_TRY(seq_and_pos(r, np, 1, INT64_MIN, 0, &s, &pos));
    return emit_identity(r, s->el[pos], np->output[0]);
}

/* The declared length of axis `axis` of value `name` (-1: not declared). */
static int64_t declared_dim(const resolver *r, const char *name, int64_t axis) {
    const Onnx__GraphProto *gp = r->gp;
    for (int l = 0; l < 2; l++) {
        size_t n = l ? gp->n_value_info : gp->n_input;
        Onnx__ValueInfoProto **v = l ? gp->value_info : gp->input;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(str0(v[i]->name), name)) continue;
            const Onnx__TypeProto *tp = v[i]->type;
            if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ||
                !tp->tensor_type->shape)
                return -1;
            const Onnx__TensorShapeProto *sh = tp->tensor_type->shape;
            int64_t ax = axis < 0 ? axis + (int64_t)sh->n_dim : axis;
            if (ax < 0 || ax >= (int64_t)sh->n_dim) return -1;
            const Onnx__TensorShapeProto__Dimension *d = sh->dim[ax];
            return d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE
                       ? d->dim_value
                       : -1;
        }
    }
    return -1;
}

enum { SEQ_MAX_SPLIT = 4096 };

static kiln_status split_to_seq_in(resolver *r, const Onnx__NodeProto *np, int64_t *sizes,
                                   int64_t *v) {
    const char *x = np->n_input ? str0(np->input[0]) : "";
    int64_t axis = attr_int(np, "axis", 0), keep = attr_int(np, "keepdims", 1);
    const char *sname = np->n_input > 1 ? str0(np->input[1]) : "";
    int n = -1, rank = 1;
    bool ones = false; /* no split: chunks of 1 (keepdims applies) */
    if (*sname) {
        KILN_TRY(const_ints(r, sname, v, SEQ_MAX_SPLIT, &n, &rank));
        if (n >= 0 && rank == 0) { /* one chunk length: needs the axis' length */
            int64_t len = declared_dim(r, x, axis), c = v[0];
            if (len < 0 || c <= 0) n = -1;
            else {
                int64_t pieces = len / c + (len % c != 0); /* (len + c - 1) / c overflowed */
                n = pieces > SEQ_MAX_SPLIT ? -1 : (int)pieces;
                for (int i = 0; i < n; i++) sizes[i] = i < n - 1 || len % c == 0 ? c : len % c;
            }
        } else if (n >= 0) {
            memcpy(sizes, v, sizeof *v * (size_t)n);
        }
    } else {
        int64_t len = declared_dim(r, x, axis);
        n = len >= 0 && len <= SEQ_MAX_SPLIT ? (int)len : -1;
        for (int i = 0; i < n; i++) sizes[i] = 1;
        ones = true;
    }
    if (n < 0)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (SplitToSequence): the number of pieces is not known at build "
                         "(give a constant 'split' list, or declare the length of axis %" PRId64
                         " of '%s')",
                         label(np), axis, x);
    seq_list *o = NULL;
    KILN_TRY(seq_add(r, np, np->output[0], NULL, n, &o));
    const char **outs = ar_alloc(r->ar, sizeof *outs * (size_t)(n + 1));
    if (!outs) return oom();
    for (int i = 0; i < n; i++)
        if (!(outs[i] = fresh_name(r, np->output[0], "piece"))) return oom();
    if (n) {
        Onnx__NodeProto *sp = NULL;
        if (r->opset >= 13) {
            const char *sn = fresh_name(r, np->output[0], "split");
            if (!sn) return oom();
            KILN_TRY(emit_const(r, sn, 1, n, sizes, ONNX__TENSOR_PROTO__DATA_TYPE__INT64));
            const char *ins[2] = {x, sn};
            KILN_TRY(emit(r, "Split", label(np), 2, ins, n, outs, &sp));
        } else {
            KILN_TRY(emit(r, "Split", label(np), 1, &x, n, outs, &sp));
            KILN_TRY(attr_ints(r, sp, "split", n, sizes));
        }
        KILN_TRY(attr_i(r, sp, "axis", axis));
    }
    o = seq_find(r, np->output[0]);
    for (int i = 0; i < n; i++) {
        o->el[i] = outs[i];
        if (!ones || keep) continue;
        if (!(o->el[i] = fresh_name(r, np->output[0], "squeeze"))) return oom();
        KILN_TRY(emit_squeeze(r, "Squeeze", outs[i], axis, o->el[i]));
    }
    return KILN_OK;
}

/* SplitToSequence, with its two lists of SEQ_MAX_SPLIT on the heap (in the
 * arena they stayed for the whole import: 64 kB per node, per iteration). */
static kiln_status split_to_seq(resolver *r, const Onnx__NodeProto *np) {
    int64_t *sizes = kiln__calloc(SEQ_MAX_SPLIT, sizeof *sizes);
    int64_t *v = kiln__calloc(SEQ_MAX_SPLIT, sizeof *v);
    kiln_status s = sizes && v ? split_to_seq_in(r, np, sizes, v) : oom();
    kiln__free(sizes);
    kiln__free(v);
    return s;
}

/* ---- Loop unrolling -------------------------------------------------------------- */

static kiln_status node(resolver *r, const Onnx__NodeProto *np);

/* Name map of one iteration: body names -> names in the graph. */
typedef struct name_pair {
    const char *from, *to;
} name_pair;

typedef struct name_map {
    name_pair *p;
    int n, cap;
    name_ix ix; /* from -> index in p (the latest) */
} name_map;

static const char *mapped(const name_map *m, const char *name) {
    int i = ix_get(&m->ix, name);
    return i < 0 ? name : m->p[i].to; /* absent: an outer name */
}

static kiln_status map_put(name_map *m, const char *from, const char *to) {
    KILN_TRY(kiln__grow((void **)&m->p, &m->cap, m->n + 1, sizeof *m->p));
    KILN_TRY(ix_put(&m->ix, from, m->n));
    m->p[m->n++] = (name_pair){.from = from, .to = to};
    return KILN_OK;
}

static bool has_graph_attr(const Onnx__NodeProto *np) {
    for (size_t k = 0; k < np->n_attribute; k++)
        if (np->attribute[k]->g || np->attribute[k]->n_graphs) return true;
    return false;
}

/* Whether the Loop carries a sequence (an initial value that is one, or a
 * body input typed as one). */
static bool loop_carries_seq(resolver *r, const Onnx__NodeProto *np, const Onnx__GraphProto *body) {
    for (size_t i = 2; i < np->n_input; i++)
        if (seq_find(r, np->input[i])) return true;
    for (size_t i = 2; body && i < body->n_input; i++) {
        const Onnx__TypeProto *tp = body->input[i]->type;
        if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE) return true;
    }
    return false;
}

static const Onnx__GraphProto *body_of(const Onnx__NodeProto *np) {
    for (size_t k = 0; k < np->n_attribute; k++)
        if (!strcmp(str0(np->attribute[k]->name), "body")) return np->attribute[k]->g;
    return NULL;
}

static kiln_status not_static(const Onnx__NodeProto *np, const char *why) {
    return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                     "node '%s' (Loop) carries a sequence, which kiln resolves only by unrolling "
                     "a loop whose iterations are known at build; %s",
                     label(np), why);
}

/* One iteration: the body's nodes, renamed, into r; *cond_out: the body's
 * cond output (a constant, or not_static). */
static kiln_status unroll_once(resolver *r, const Onnx__NodeProto *np, const Onnx__GraphProto *body,
                               int64_t k, const char **carry, const char *cond_name,
                               const char **outs, bool *cond_out) {
    name_map m = {0};
    kiln_status s = KILN_OK;
    const char *pre = ar_printf(r->ar, "%s/iter%" PRId64 "/", label(np), k);
    const char *iter = pre ? ar_printf(r->ar, "%si", pre) : NULL;
    if (!pre || !iter) return oom();
    /* the iteration number, in the shape the body declares ([1] from torch, else a scalar) */
    int irank = 0;
    const Onnx__TypeProto *it = body->input[0]->type;
    if (it && it->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && it->tensor_type->shape &&
        it->tensor_type->shape->n_dim == 1)
        irank = 1;
    if ((s = emit_const(r, iter, irank, 1, &k, ONNX__TENSOR_PROTO__DATA_TYPE__INT64)) != KILN_OK)
        goto done;
    if ((s = map_put(&m, str0(body->input[0]->name), iter)) != KILN_OK) goto done;
    if ((s = map_put(&m, str0(body->input[1]->name), cond_name)) != KILN_OK) goto done;
    for (size_t j = 2; j < body->n_input; j++)
        if ((s = map_put(&m, str0(body->input[j]->name), carry[j - 2])) != KILN_OK) goto done;
    for (size_t j = 0; j < body->n_initializer; j++) { /* the body's initializers: Constants */
        const Onnx__TensorProto *t = body->initializer[j];
        const char *cn = ar_printf(r->ar, "%s%s", pre, str0(t->name));
        Onnx__NodeProto *cp = NULL;
        Onnx__AttributeProto *at = NULL;
        if (!cn) s = oom();
        if (s == KILN_OK) s = emit(r, "Constant", cn, 0, NULL, 1, &cn, &cp);
        if (s == KILN_OK)
            s = add_attr(r, cp, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR, &at);
        if (s == KILN_OK) {
            at->t = (Onnx__TensorProto *)t;
            s = const_add(r, cn, t);
        }
        if (s == KILN_OK) s = map_put(&m, str0(t->name), cn);
        if (s != KILN_OK) goto done;
    }
    for (size_t i = 0; i < body->n_node && s == KILN_OK; i++) {
        const Onnx__NodeProto *bn = body->node[i];
        if (has_graph_attr(bn)) {
            s = KILN_FAIL(KILN_ERR_UNSUPPORTED,
                          "node '%s' (Loop): its body, which kiln unrolls to resolve a sequence, "
                          "holds node '%s' (%s) with a subgraph; kiln does not unroll those",
                          label(np), label(bn), str0(bn->op_type));
            break;
        }
        if ((s = charge_slots(r, np, (int64_t)bn->n_input + (int64_t)bn->n_output)) != KILN_OK)
            break;
        Onnx__NodeProto *c = ar_alloc(r->ar, sizeof *c);
        char **iv = ar_alloc(r->ar, sizeof(char *) * (bn->n_input + 1));
        char **ov = ar_alloc(r->ar, sizeof(char *) * (bn->n_output + 1));
        if (!c || !iv || !ov) {
            s = oom();
            break;
        }
        *c = *bn; /* attributes shared (read only) */
        for (size_t j = 0; j < bn->n_input; j++)
            iv[j] = (char *)(*str0(bn->input[j]) ? mapped(&m, bn->input[j]) : "");
        for (size_t j = 0; j < bn->n_output && s == KILN_OK; j++) {
            const char *o = str0(bn->output[j]);
            ov[j] = *o ? ar_printf(r->ar, "%s%s", pre, o) : (char *)"";
            if (!ov[j]) s = oom();
            else if (*o) s = map_put(&m, o, ov[j]);
        }
        if (s != KILN_OK) break;
        c->input = iv;
        c->output = ov;
        c->name = ar_printf(r->ar, "%s%s", pre, label(bn));
        if (!c->name) s = oom();
        else s = node(r, c);
    }
    if (s != KILN_OK) goto done;
    for (size_t j = 0; j < body->n_output; j++) outs[j] = mapped(&m, str0(body->output[j]->name));
    int64_t cv;
    int n, rank;
    if ((s = const_ints(r, outs[0], &cv, 1, &n, &rank)) != KILN_OK) goto done;
    if (n != 1)
        s = not_static(np, "its body computes the loop condition at run time");
    else
        *cond_out = cv != 0;
done:
    kiln__free(m.p);
    ix_free(&m.ix);
    return s;
}

static kiln_status unroll(resolver *r, const Onnx__NodeProto *np, const Onnx__GraphProto *body) {
    const char *mname = np->n_input > 0 ? str0(np->input[0]) : "";
    const char *cname = np->n_input > 1 ? str0(np->input[1]) : "";
    int n_carry = np->n_input > 2 ? (int)np->n_input - 2 : 0;
    int n_out = (int)np->n_output, n_scan = n_out - n_carry;
    if (body->n_input != (size_t)n_carry + 2 || body->n_output != (size_t)n_carry + 1 + (size_t)(n_scan > 0 ? n_scan : 0) || n_scan < 0)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (Loop): the body has %zu inputs and %zu outputs for %d "
                         "loop-carried values and %d outputs",
                         label(np), body->n_input, body->n_output, n_carry, n_out);
    int64_t trips = -1, v;
    int n, rank;
    if (*mname) {
        KILN_TRY(const_ints(r, mname, &v, 1, &n, &rank));
        if (n != 1) return not_static(np, "its trip count M is computed at run time");
        trips = v < 0 ? 0 : v;
    }
    bool cond = true;
    if (*cname) {
        KILN_TRY(const_ints(r, cname, &v, 1, &n, &rank));
        if (n != 1) return not_static(np, "its condition is computed at run time");
        cond = v != 0;
    } else {
        if (!(cname = fresh_name(r, label(np), "cond"))) return oom();
        int64_t one = 1;
        KILN_TRY(emit_const(r, cname, 0, 1, &one, ONNX__TENSOR_PROTO__DATA_TYPE__BOOL));
    }
    const char **carry = ar_alloc(r->ar, sizeof *carry * (size_t)(n_carry + 1));
    const char **outs = ar_alloc(r->ar, sizeof *outs * (body->n_output + 1));
    const char ***scans = ar_alloc(r->ar, sizeof *scans * (size_t)(n_scan + 1));
    if (!carry || !outs || !scans) return oom();
    for (int j = 0; j < n_carry; j++) carry[j] = np->input[2 + j];
    int64_t k = 0, scap = 0;
    for (; (trips < 0 || k < trips) && cond; k++) {
        if (k >= SEQ_MAX_UNROLL)
            return not_static(np, trips < 0 ? "it has no trip count and its condition stays true"
                                             : "it runs more than 4096 iterations");
        KILN_TRY(unroll_once(r, np, body, k, carry, cname, outs, &cond));
        for (int j = 0; j < n_carry; j++) carry[j] = outs[1 + j];
        if (n_scan && k == scap) { /* the scan lists double (the arena frees them) */
            scap = scap ? 2 * scap : 16;
            KILN_TRY(charge_slots(r, np, (int64_t)n_scan * scap));
            for (int q = 0; q < n_scan; q++) {
                const char **grown = ar_alloc(r->ar, sizeof *grown * (size_t)scap);
                if (!grown) return oom();
                if (k) memcpy(grown, scans[q], sizeof *grown * (size_t)k);
                scans[q] = grown;
            }
        }
        for (int q = 0; q < n_scan; q++) scans[q][k] = outs[1 + n_carry + q];
        if (!(cname = fresh_name(r, label(np), "cond"))) return oom();
        int64_t c = cond;
        KILN_TRY(emit_const(r, cname, 0, 1, &c, ONNX__TENSOR_PROTO__DATA_TYPE__BOOL));
    }
    for (int j = 0; j < n_carry; j++) {
        const char *o = str0(np->output[j]);
        if (!*o) continue;
        seq_list *s = seq_find(r, carry[j]);
        if (s)
            KILN_TRY(seq_add(r, np, o, s->el, s->n, NULL));
        else
            KILN_TRY(emit_identity(r, carry[j], o));
    }
    for (int q = 0; q < n_scan; q++) {
        const char *o = str0(np->output[n_carry + q]);
        if (!*o) continue;
        if (!k)
            return not_static(np, "it runs no iteration, so the shape of its scan outputs is "
                                   "not known");
        KILN_TRY(charge_slots(r, np, k));
        KILN_TRY(emit_concat(r, label(np), scans[q], (int)k, 0, true, o));
    }
    return KILN_OK;
}

/* ---- the walk ---------------------------------------------------------------------- */

/* Whether subgraph gp (or one nested in it) reads a sequence of r. */
static const char *graph_reads_seq(resolver *r, const Onnx__GraphProto *gp, int depth) {
    if (!gp || depth > 32) return NULL;
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *np = gp->node[i];
        for (size_t j = 0; j < np->n_input; j++)
            if (seq_find(r, np->input[j])) return np->input[j];
        for (size_t k = 0; k < np->n_attribute; k++) {
            const char *s = graph_reads_seq(r, np->attribute[k]->g, depth + 1);
            if (s) return s;
        }
    }
    return NULL;
}

static bool is_seq_op(const Onnx__NodeProto *np);

static kiln_status node(resolver *r, const Onnx__NodeProto *np) {
    if (!onnx_domain(np)) goto other;
    const char *op = str0(np->op_type);
    const char *out0 = np->n_output ? str0(np->output[0]) : "";
    bool seq_identity = !strcmp(op, "Identity") && np->n_input == 1 && seq_find(r, np->input[0]);
    if ((is_seq_op(np) || seq_identity) && (np->n_output != 1 || !*out0))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s) must have one named output", label(np),
                         op);
    if (!strcmp(op, "SequenceEmpty")) return seq_add(r, np, out0, NULL, 0, NULL);
    if (!strcmp(op, "SequenceConstruct")) {
        for (size_t i = 0; i < np->n_input; i++)
            if (!*str0(np->input[i]) || seq_find(r, np->input[i]))
                return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                                 "node '%s' (SequenceConstruct): input %zu is absent or a "
                                 "sequence",
                                 label(np), i);
        return seq_add(r, np, out0, (const char *const *)np->input, (int)np->n_input, NULL);
    }
    if (!strcmp(op, "SequenceInsert")) return seq_insert(r, np);
    if (!strcmp(op, "SequenceErase")) return seq_erase(r, np);
    if (!strcmp(op, "SequenceAt")) return seq_at(r, np);
    if (!strcmp(op, "SequenceLength")) {
        seq_list *s = NULL;
        KILN_TRY(need_seq(r, np, 0, &s));
        int64_t n = s->n;
        return emit_const(r, out0, 0, 1, &n, ONNX__TENSOR_PROTO__DATA_TYPE__INT64);
    }
    if (!strcmp(op, "ConcatFromSequence")) {
        seq_list *s = NULL;
        KILN_TRY(need_seq(r, np, 0, &s));
        KILN_TRY(charge_slots(r, np, s->n)); /* emit_concat's copy */
        return emit_concat(r, label(np), s->el, s->n, attr_int(np, "axis", 0),
                           attr_int(np, "new_axis", 0) != 0, out0);
    }
    if (!strcmp(op, "SplitToSequence")) return split_to_seq(r, np);
    if (seq_identity) {
        seq_list *s = seq_find(r, np->input[0]);
        return seq_add(r, np, out0, s->el, s->n, NULL);
    }
    if (!strcmp(op, "Constant")) {
        const Onnx__TensorProto *t = constant_value(r, np);
        if (t && *out0) KILN_TRY(const_add(r, out0, t));
        return push_node(r, (Onnx__NodeProto *)np);
    }
    if (!strcmp(op, "Identity") && np->n_input == 1 && const_find(r, np->input[0])) {
        KILN_TRY(const_add(r, out0, const_find(r, np->input[0])));
        return push_node(r, (Onnx__NodeProto *)np);
    }
    if (!strcmp(op, "Loop")) {
        const Onnx__GraphProto *body = body_of(np);
        if (body && body->n_input >= 2 && loop_carries_seq(r, np, body)) return unroll(r, np, body);
    }
other:
    for (size_t i = 0; i < np->n_input; i++)
        if (seq_find(r, np->input[i]))
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "node '%s' (%s) reads sequence '%s'; kiln has no sequence values at "
                             "run time and resolves a sequence only into the sequence ops that "
                             "take it apart at build (SequenceAt, SequenceLength, "
                             "ConcatFromSequence, ...)",
                             label(np), str0(np->op_type), np->input[i]);
    for (size_t k = 0; r->n_seqs && k < np->n_attribute; k++) {
        const char *s = graph_reads_seq(r, np->attribute[k]->g, 0);
        if (s)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "node '%s' (%s): its subgraph '%s' reads sequence '%s'; kiln "
                             "resolves sequences only in the graph that makes them",
                             label(np), str0(np->op_type), str0(np->attribute[k]->name), s);
    }
    return push_node(r, (Onnx__NodeProto *)np);
}

static bool is_seq_op(const Onnx__NodeProto *np) {
    static const char *const ops[] = {"SequenceEmpty",   "SequenceConstruct", "SequenceInsert",
                                      "SequenceErase",   "SequenceAt",        "SequenceLength",
                                      "ConcatFromSequence", "SplitToSequence"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (is_op(np, ops[i])) return true;
    return false;
}

kiln_status kiln__onnx_resolve_sequences(const Onnx__GraphProto *gp, int64_t opset,
                                         kiln_onnx_arena *ar, const Onnx__GraphProto **out) {
    *out = gp;
    bool any = false;
    for (size_t i = 0; i < gp->n_node && !any; i++) any = is_seq_op(gp->node[i]);
    if (!any) return KILN_OK;
    resolver r;
    memset(&r, 0, sizeof r);
    r.ar = ar;
    r.gp = gp;
    r.opset = opset;
    kiln_status s = KILN_OK;
    if (gp->n_initializer > INT_MAX / 4)
        s = KILN_FAIL(KILN_ERR_MODEL, "graph has %zu initializers", gp->n_initializer);
    for (size_t i = 0; i < gp->n_initializer && s == KILN_OK; i++)
        if (ix_get(&r.init_ix, str0(gp->initializer[i]->name)) < 0) /* the first one counts */
            s = ix_put(&r.init_ix, str0(gp->initializer[i]->name), (int)i);
    for (size_t i = 0; i < gp->n_node && s == KILN_OK; i++) s = node(&r, gp->node[i]);
    for (size_t i = 0; i < gp->n_output && s == KILN_OK; i++)
        if (seq_find(&r, gp->output[i]->name))
            s = KILN_FAIL(KILN_ERR_UNSUPPORTED,
                          "graph output '%s' is a sequence; kiln has no sequence values at run "
                          "time, so a graph's (and a subgraph's) outputs must be tensors",
                          gp->output[i]->name);
    Onnx__GraphProto *g = s == KILN_OK ? ar_alloc(ar, sizeof *g) : NULL;
    Onnx__NodeProto **nodes =
        g ? ar_alloc(ar, sizeof *nodes * (size_t)(r.n_nodes + 1)) : NULL;
    if (s == KILN_OK && (!g || !nodes)) s = oom();
    if (s == KILN_OK) {
        *g = *gp;
        if (r.n_nodes) memcpy(nodes, r.nodes, sizeof *nodes * (size_t)r.n_nodes);
        g->node = nodes;
        g->n_node = (size_t)r.n_nodes;
        *out = g;
    }
    kiln__free(r.nodes);
    kiln__free(r.seqs);
    kiln__free(r.consts);
    ix_free(&r.seq_ix);
    ix_free(&r.const_ix);
    ix_free(&r.init_ix);
    return s;
}
