/* precision.c -- fp16/bf16 plans for device backends (see precision.h).
 *
 * 1. Decide which nodes run in the reduced type T: ops whose float inputs
 *    and outputs share one type (so converting all of them is the same
 *    computation in T), not listed in fp32_layers, with at least one
 *    float32 tensor, and supported by the device backend once converted
 *    (checked by setting the dtypes for a moment and asking supports()).
 * 2. Rewrite: float32 values produced by converted nodes become T (a graph
 *    output keeps its name and fp32: the node writes a new T value and a
 *    Cast follows); a converted node reads the T version of each float32
 *    input (a converted constant, or a Cast placed right after the
 *    producer / at the start for graph inputs); a float32 node reads the
 *    fp32 version of each input that became T (a Cast after the producer).
 *    Each version is made once per value.
 * 3. Reorder: every new Cast right after the node producing its input. */
#include "passes/precision.h"
#include "passes/pattern.h"

#include "backends/backend.h"
#include "ops/elementwise_impl.h"
#include "ops/fused_conv.h"
#include "ops/fused_transformer.h"

#include <math.h>
#include <stdio.h>

/* Whether n may run in fp16/bf16: its op is KILN_OP_FLAG_REDUCIBLE (float
 * tensors of one type, fp32 arithmetic inside), and with
 * KILN_OP_FLAG_REDUCIBLE_OUT0 its outputs after the first are absent. */
static bool op_reducible(const kiln_node *n) {
    if (!(n->op->flags & KILN_OP_FLAG_REDUCIBLE)) return false;
    if (n->op->flags & KILN_OP_FLAG_REDUCIBLE_OUT0)
        for (int k = 1; k < n->n_out; k++)
            if (n->out[k] >= 0) return false;
    return true;
}

bool kiln__layer_name_matches(const char *name, const char *want) {
    size_t wl = strlen(want);
    for (const char *p = name; p && *p;) {
        const char *e = strchr(p, '+');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == wl && !strncmp(p, want, wl)) return true;
        p = e ? e + 1 : NULL;
    }
    return !strcmp(name, want);
}

static kiln_status unmatched_name(const char *name) {
    return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "layer precision given for '%s', which is not a layer of the model",
                     name);
}

kiln_status kiln__layer_names_check(const kiln_graph *g, const kiln_optimize_opts *o) {
    for (int i = 0; i < o->n_fp32_layers; i++) {
        bool hit = false;
        for (int ni = 0; ni < g->n_nodes && !hit; ni++)
            hit = !g->nodes[ni].dead && g->nodes[ni].name &&
                  kiln__layer_name_matches(g->nodes[ni].name, o->fp32_layers[i]);
        if (!hit) return unmatched_name(o->fp32_layers[i]);
    }
    return KILN_OK;
}

void kiln__layer_fp32_apply(kiln_graph *g, const kiln_optimize_opts *o) {
    for (int ni = 0; ni < g->n_nodes; ni++) {
        kiln_node *n = &g->nodes[ni];
        int32_t *p = NULL;
        if (n->dead || !n->name) continue;
        if (n->op_id == KILN_OP_FusedConv) p = &((kiln_fused_conv_attrs *)n->attrs)->precision;
        if (n->op_id == KILN_OP_FusedMatMul) p = &((kiln_fused_matmul_attrs *)n->attrs)->precision;
        if (n->op_id == KILN_OP_Attention) p = &((kiln_attention_attrs *)n->attrs)->precision;
        for (int i = 0; p && i < o->n_fp32_layers; i++)
            if (kiln__layer_name_matches(n->name, o->fp32_layers[i])) *p = KILN_PRECISION_FP32;
    }
}

static bool overridden(const kiln_optimize_opts *o, const kiln_node *n, bool *used) {
    bool hit = false;
    for (int i = 0; i < o->n_fp32_layers; i++)
        if (kiln__layer_name_matches(n->name, o->fp32_layers[i])) {
            used[i] = true;
            hit = true;
        }
    return hit;
}

/* Whether n's shape inference accepts its inputs as they are in g now and
 * gives every output that is of type t in g type t too. */
static bool infer_agrees(const kiln_graph *g, const kiln_node *n, kiln_dtype t) {
    kiln_tinfo outs[KILN_CALL_MAX];
    if (kiln__node_infer(g, n, false, outs) != KILN_OK) {
        kiln__clear_error(); /* e.g. a layer whose inference wants float32 (or memory short: kept in float32) */
        return false;
    }
    for (int k = 0; k < n->n_out; k++)
        if (n->out[k] >= 0 && g->values[n->out[k]].info.dtype == t && outs[k].dtype != t) return false;
    return true;
}

/* Whether the backend supports n with every float32 tensor of n as t (and
 * the op's inference agrees). */
static bool supported_in(const kiln_backend_i *be, kiln_graph *g, const kiln_node *n, kiln_dtype t) {
    int vals[128], nv = 0;
    for (int pass = 0; pass < 2; pass++) {
        int cnt = pass ? n->n_out : n->n_in;
        const int *list = pass ? n->out : n->in;
        for (int i = 0; i < cnt && nv < 128; i++) {
            int v = list[i];
            if (v < 0 || g->values[v].info.dtype != KILN_DTYPE_FLOAT32) continue;
            g->values[v].info.dtype = t;
            vals[nv++] = v;
        }
    }
    bool ok = nv > 0 && nv < 128 && kiln__backend_supports(be, g, n) && infer_agrees(g, n, t);
    for (int i = 0; i < nv; i++) g->values[vals[i]].info.dtype = KILN_DTYPE_FLOAT32;
    return ok;
}

typedef struct prec_ctx {
    kiln_graph *g;
    kiln_dtype t;
    const char *suffix;     /* "fp16" / "bf16" */
    int n_values0, n_nodes0;
    bool *f32;              /* per original value: float32 before the pass */
    bool *reduced_val;      /* per original value: now of type t, written by a converted node */
    int *t_ver, *f_ver;     /* per original value: its t / fp32 version (-1: not made yet) */
    int *after;             /* per new node (index - n_nodes0): the node it follows, -1: first */
} prec_ctx;

static kiln_status new_value(prec_ctx *c, int like, kiln_dtype t, const char *tag, int *out) {
    char name[512];
    for (int k = 0;; k++) {
        snprintf(name, sizeof name, "%.400s/kiln_%.40s%s%d", c->g->values[like].name, tag, k ? "_" : "",
                 k); /* (the number always fits: a cut-off one would repeat forever) */
        if (kiln__graph_find_value(c->g, name) < 0) break;
    }
    KILN_TRY(kiln__graph_add_value(c->g, name, out));
    kiln_value *v = &c->g->values[*out];
    const kiln_tinfo *src = &c->g->values[like].info;
    v->info.dtype = t;
    v->info.rank = src->rank;
    memcpy(v->info.dims, src->dims, sizeof v->info.dims);
    v->producer = -1;
    return KILN_OK;
}

/* Adds Cast(in -> out) placed after node `after` (-1: before every node). */
static kiln_status add_cast(prec_ctx *c, int in, int out, kiln_dtype to, int after) {
    kiln_ew_cast_attrs at = {.to = (int32_t)to};
    char name[512];
    snprintf(name, sizeof name, "%s/kiln_cast_%s", c->g->values[out].name, kiln_dtype_name(to));
    int ni;
    KILN_TRY(kiln__graph_add_node(c->g, KILN_OP_Cast, name, 1, &in, 1, &out, &at, &ni));
    c->g->nodes[ni].added = true; /* no ONNX node behind it */
    c->g->nodes[ni].device = c->g->nodes[after >= 0 ? after : ni].device;
    c->after[ni - c->n_nodes0] = after;
    return KILN_OK;
}

/* float32 -> t for constants: round to nearest even; finite values beyond
 * the fp16 range become +-65504 instead of infinities. */
static uint16_t to_reduced(kiln_dtype t, float f) {
    if (t == KILN_DTYPE_BFLOAT16) return kiln__f32_to_bf16(f);
    if (isfinite(f) && fabsf(f) > 65504.0f) f = f > 0 ? 65504.0f : -65504.0f;
    return kiln__f32_to_f16(f);
}

/* The t version of original float32 value v, made on first use. */
static kiln_status t_version(prec_ctx *c, int v, int *out) {
    if (c->t_ver[v] >= 0) {
        *out = c->t_ver[v];
        return KILN_OK;
    }
    kiln_value *val = &c->g->values[v];
    int nv;
    if (val->flags & KILN_VALUE_CONST) {
        int64_t n = kiln__numel(val->info.rank, val->info.dims);
        if (n < 0) return KILN_FAIL(KILN_ERR_INTERNAL, "precision: constant '%s' has no shape", val->name);
        uint16_t *h = kiln__malloc((size_t)n * 2 + 2);
        if (!h) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory converting '%s'", val->name);
        const float *f = val->data;
        for (int64_t i = 0; i < n; i++) h[i] = to_reduced(c->t, f[i]);
        kiln_status s = new_value(c, v, c->t, c->suffix, &nv);
        if (s == KILN_OK) {
            kiln_value *x = &c->g->values[nv];
            s = kiln__value_set_const(x, c->t, x->info.rank, x->info.dims, h);
        }
        kiln__free(h);
        KILN_TRY(s);
    } else {
        KILN_TRY(new_value(c, v, c->t, c->suffix, &nv));
        KILN_TRY(add_cast(c, v, nv, c->t, c->g->values[v].producer));
    }
    c->t_ver[v] = nv;
    *out = nv;
    return KILN_OK;
}

/* The fp32 version of original value v that a converted node now writes as t. */
static kiln_status f_version(prec_ctx *c, int v, int *out) {
    if (c->f_ver[v] < 0) {
        int nv;
        KILN_TRY(new_value(c, v, KILN_DTYPE_FLOAT32, "fp32", &nv));
        KILN_TRY(add_cast(c, v, nv, KILN_DTYPE_FLOAT32, c->g->values[v].producer));
        c->f_ver[v] = nv;
    }
    *out = c->f_ver[v];
    return KILN_OK;
}

static kiln_status rewrite(prec_ctx *c, const bool *reduce) {
    kiln_graph *g = c->g;
    /* outputs of converted nodes */
    for (int ni = 0; ni < c->n_nodes0; ni++) {
        if (!reduce[ni]) continue;
        for (int k = 0; k < g->nodes[ni].n_out; k++) {
            int v = g->nodes[ni].out[k];
            if (v < 0 || !c->f32[v]) continue;
            if (kiln__graph_is_output(g, v)) {
                /* the node writes a new t value; a Cast back writes the output */
                int nv;
                KILN_TRY(new_value(c, v, c->t, c->suffix, &nv));
                g->nodes[ni].out[k] = nv;
                g->values[nv].producer = ni;
                c->t_ver[v] = nv;
                c->f_ver[v] = v;
                KILN_TRY(add_cast(c, nv, v, KILN_DTYPE_FLOAT32, ni));
                g->values[v].producer = g->n_nodes - 1;
            } else {
                g->values[v].info.dtype = c->t;
                c->reduced_val[v] = true;
                c->t_ver[v] = v;
            }
        }
    }
    /* inputs */
    for (int ni = 0; ni < c->n_nodes0; ni++) {
        if (g->nodes[ni].dead) continue;
        for (int i = 0; i < g->nodes[ni].n_in; i++) {
            int v = g->nodes[ni].in[i];
            if (v < 0 || v >= c->n_values0 || !c->f32[v]) continue;
            int nv = v;
            if (reduce[ni]) KILN_TRY(t_version(c, v, &nv));
            else if (c->reduced_val[v]) KILN_TRY(f_version(c, v, &nv));
            g->nodes[ni].in[i] = nv; /* g->nodes may have moved: index again */
        }
    }
    return KILN_OK;
}

/* The fusions run first, and the pass converts the fused layers, when every
 * fused layer (domain "kiln") the backend has a kernel for is
 * fp16/bf16-eligible (KILN_OP_FLAG_REDUCIBLE: its inference takes fp16 and
 * bf16, tests/unit/test_registry.c) or made after this pass with its types
 * fixed (KILN_OP_FLAG_TYPED: kiln.Pointwise); were one not, the pass would run
 * before the fusions, which then fuse the layers that stay float32. */
bool kiln__precision_first(const kiln_optimize_opts *o) {
    const kiln_backend_i *be = kiln__backend_for(o->device);
    if (!be || !be->reduced_tensors ||
        (o->precision != KILN_PRECISION_FP16 && o->precision != KILN_PRECISION_BF16))
        return false;
    for (int id = 1; id < KILN_OP_ID_LIMIT; id++) {
        const kiln_op_def *op = kiln__op_by_id(id);
        if (op && !strcmp(op->domain, "kiln") && be->kernel_for(id) &&
            !(op->flags & (KILN_OP_FLAG_REDUCIBLE | KILN_OP_FLAG_TYPED)))
            return true;
    }
    return false;
}

kiln_status kiln__pass_precision(kiln_graph *g, const kiln_optimize_opts *o) {
    if (o->precision != KILN_PRECISION_FP16 && o->precision != KILN_PRECISION_BF16) return KILN_OK;
    const kiln_backend_i *be = kiln__backend_for(o->device);
    if (!be || !be->reduced_tensors) return KILN_OK;
    kiln__graph_link(g);
    prec_ctx c = {.g = g, .t = o->precision == KILN_PRECISION_FP16 ? KILN_DTYPE_FLOAT16
                                                                     : KILN_DTYPE_BFLOAT16,
                  .suffix = o->precision == KILN_PRECISION_FP16 ? "fp16" : "bf16",
                  .n_values0 = g->n_values, .n_nodes0 = g->n_nodes};
    size_t nv = (size_t)g->n_values + 1, nn = (size_t)g->n_nodes + 1;
    bool *reduce = kiln__calloc(nn, sizeof *reduce);
    bool *used = kiln__calloc((size_t)o->n_fp32_layers + 1, sizeof *used);
    c.f32 = kiln__calloc(nv, sizeof *c.f32);
    c.reduced_val = kiln__calloc(nv, sizeof *c.reduced_val);
    c.t_ver = kiln__malloc(nv * sizeof *c.t_ver);
    c.f_ver = kiln__malloc(nv * sizeof *c.f_ver);
    /* at most two casts per original value */
    c.after = kiln__malloc((2 * nv + 1) * sizeof *c.after);
    kiln_status s = KILN_OK;
    if (!reduce || !used || !c.f32 || !c.reduced_val || !c.t_ver || !c.f_ver || !c.after) {
        s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (precision pass)");
        goto done;
    }
    for (int v = 0; v < g->n_values; v++) {
        c.f32[v] = g->values[v].info.dtype == KILN_DTYPE_FLOAT32;
        c.t_ver[v] = c.f_ver[v] = -1;
    }
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        if (n->dead) continue;
        bool keep = overridden(o, n, used);
        reduce[ni] = !keep && op_reducible(n) && supported_in(be, g, n, c.t);
    }
    for (int i = 0; i < o->n_fp32_layers; i++)
        if (!used[i]) {
            s = unmatched_name(o->fp32_layers[i]);
            goto done;
        }
    if ((s = rewrite(&c, reduce)) != KILN_OK) goto done;
    s = kiln__nodes_place_after(g, c.n_nodes0, c.after);
done:
    kiln__free(reduce);
    kiln__free(used);
    kiln__free(c.f32);
    kiln__free(c.reduced_val);
    kiln__free(c.t_ver);
    kiln__free(c.f_ver);
    kiln__free(c.after);
    return s;
}
