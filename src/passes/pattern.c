/* pattern.c -- the helpers the graph optimizer's rewrites share (pattern.h). */
#include "passes/pattern.h"

#include "backends/backend.h"
#include "ops/tensor_internal.h"

#include <stdio.h>

int kiln__pat_producer(const kiln_graph *g, int v, int op_id) {
    if (v < 0 || v >= g->n_values) return -1;
    int p = g->values[v].producer;
    if (p < 0 || g->nodes[p].dead) return -1;
    if (op_id && g->nodes[p].op_id != op_id) return -1;
    return p;
}

bool kiln__pat_supports(const kiln_graph *g, int device, int op_id, int n_in, const int *in, int n_out,
                        const int *out, const void *attrs) {
    const kiln_backend_i *be = kiln__backend_for(device);
    const kiln_op_def *op = kiln__op_by_id(op_id);
    if (!be || !op) return false;
    kiln_node t = {.op_id = op_id, .op = op, .name = NULL, .n_in = n_in, .n_out = n_out,
                   .in = (int *)in, .out = (int *)out, .attrs = (void *)attrs, .device = device};
    return kiln__backend_supports(be, g, &t);
}

bool kiln__pat_same_shape(const kiln_tinfo *a, const kiln_tinfo *b) {
    if (a->rank < 0 || a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] == KILN_DIM_UNKNOWN || a->dims[i] != b->dims[i]) return false;
    return true;
}

bool kiln__pat_sole_use(const kiln_graph *g, int v) {
    return v >= 0 && g->values[v].n_uses == 1 && !kiln__graph_is_output(g, v);
}

int kiln__pat_sole_consumer(const kiln_graph *g, int v) {
    if (!kiln__pat_sole_use(g, v)) return -1;
    int nu = 0;
    const kiln_use *u = kiln__graph_uses(g, v, &nu);
    if (u && nu == 1 && u[0].node < g->n_nodes) {
        const kiln_node *n = &g->nodes[u[0].node];
        if (!n->dead && u[0].slot < n->n_in && n->in[u[0].slot] == v) return u[0].node;
    }
    kiln__graph_note_visits(g, g->n_nodes); /* the readers are not known: a scan */
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        if (n->dead) continue;
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] == v) return ni;
    }
    return -1;
}

const float *kiln__pat_const_f32(const kiln_graph *g, int v, int64_t *numel) {
    if (v < 0) return NULL;
    const kiln_value *val = &g->values[v];
    if (!(val->flags & KILN_VALUE_CONST) || val->info.dtype != KILN_DTYPE_FLOAT32) return NULL;
    if (numel) *numel = kiln__numel(val->info.rank, val->info.dims);
    return val->data;
}

bool kiln__pat_const_scalar(const kiln_graph *g, int v, double *out) {
    if (v < 0) return false;
    const kiln_value *val = &g->values[v];
    if (!(val->flags & KILN_VALUE_CONST) || kiln__numel(val->info.rank, val->info.dims) != 1) return false;
    switch (val->info.dtype) {
    case KILN_DTYPE_FLOAT32: *out = *(const float *)val->data; return true;
    case KILN_DTYPE_FLOAT64: *out = *(const double *)val->data; return true;
    case KILN_DTYPE_INT64: *out = (double)*(const int64_t *)val->data; return true;
    case KILN_DTYPE_INT32: *out = *(const int32_t *)val->data; return true;
    default: return false;
    }
}

bool kiln__pat_const_is(const kiln_graph *g, int v, double x) {
    if (v < 0) return false;
    const kiln_value *val = &g->values[v];
    if (!(val->flags & KILN_VALUE_CONST)) return false;
    int64_t n = kiln__numel(val->info.rank, val->info.dims);
    if (n <= 0) return false;
    for (int64_t i = 0; i < n; i++) {
        double e;
        switch (val->info.dtype) {
        case KILN_DTYPE_FLOAT32: e = ((const float *)val->data)[i]; break;
        case KILN_DTYPE_FLOAT64: e = ((const double *)val->data)[i]; break;
        case KILN_DTYPE_FLOAT16: e = kiln__f16_to_f32(((const uint16_t *)val->data)[i]); break;
        case KILN_DTYPE_INT64: e = (double)((const int64_t *)val->data)[i]; break;
        case KILN_DTYPE_INT32: e = ((const int32_t *)val->data)[i]; break;
        default: return false;
        }
        if (e != x) return false;
    }
    return true;
}

/* Dims [b, e) of x that Shape node sn (start/end attributes) returns; false
 * if x's rank is unknown. */
bool kiln__pat_shape_range(const kiln_graph *g, int sn, int *b, int *e) {
    const kiln_shape_attrs *at = g->nodes[sn].attrs;
    int rank = g->values[g->nodes[sn].in[0]].info.rank;
    if (rank < 0) return false;
    int64_t s = at->start, t = at->has_end ? at->end : rank;
    if (s < 0) s += rank;
    if (t < 0) t += rank;
    s = s < 0 ? 0 : s > rank ? rank : s;
    t = t < 0 ? 0 : t > rank ? rank : t;
    *b = (int)s;
    *e = (int)(t > s ? t : s);
    return true;
}

bool kiln__pat_shape_dim(const kiln_graph *g, int v, int *x, int *axis) {
    if (v < 0 || g->values[v].info.dtype != KILN_DTYPE_INT64) return false;
    const kiln_tinfo *vi = &g->values[v].info;
    if (vi->rank > 1 || (vi->rank == 1 && vi->dims[0] != 1)) return false;
    int u = kiln__pat_producer(g, v, KILN_OP_Unsqueeze);
    if (u >= 0) { /* a scalar to [1] */
        if (vi->rank != 1 || g->values[g->nodes[u].in[0]].info.rank != 0) return false;
        v = g->nodes[u].in[0];
    }
    int b, e, sn = kiln__pat_producer(g, v, KILN_OP_Shape);
    if (sn >= 0) { /* Shape(x, start=i, end=i+1) */
        if (!kiln__pat_shape_range(g, sn, &b, &e) || e - b != 1) return false;
        *x = g->nodes[sn].in[0];
        *axis = b;
        return true;
    }
    int gi = kiln__pat_producer(g, v, KILN_OP_Gather);
    if (gi < 0 || ((const kiln_axis_attrs *)g->nodes[gi].attrs)->axis != 0) return false;
    const kiln_value *idx = &g->values[g->nodes[gi].in[1]];
    if (!(idx->flags & KILN_VALUE_CONST) || !idx->data || kiln__numel(idx->info.rank, idx->info.dims) != 1 ||
        idx->info.rank > 1 || g->values[v].info.rank != idx->info.rank)
        return false;
    sn = kiln__pat_producer(g, g->nodes[gi].in[0], KILN_OP_Shape);
    if (sn < 0 || !kiln__pat_shape_range(g, sn, &b, &e)) return false;
    int64_t i = kiln__load_i64(idx->info.dtype, idx->data, 0);
    if (i < 0) i += e - b;
    if (i < 0 || i >= e - b) return false;
    *x = g->nodes[sn].in[0];
    *axis = b + (int)i;
    return true;
}

kiln_status kiln__pat_replace(kiln_graph *g, int ni, int op_id, int n_in, const int *in, int n_out,
                              const int *out, const void *attrs, const int *from, int n_from) {
    const kiln_op_def *op = kiln__op_by_id(op_id);
    if (!op) return KILN_FAIL(KILN_ERR_INTERNAL, "optimizer: unknown op id %d", op_id);
    kiln_sbuf nm = {0};
    for (int i = 0; i < n_from; i++) {
        const char *name = g->nodes[from[i]].name;
        kiln__sbuf_printf(&nm, "%s%s", i ? "+" : "", name ? name : "?");
    }
    int *nin = kiln__calloc((size_t)n_in + 1, sizeof *nin);
    int *nout = kiln__calloc((size_t)n_out + 1, sizeof *nout);
    void *na = op->attr_size ? kiln__calloc(1, op->attr_size) : NULL;
    kiln_status s = KILN_OK;
    if (!nm.data || !nin || !nout || (op->attr_size && !na))
        s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (optimizer)");
    /* the ONNX nodes behind every node of the pattern (before n's name changes) */
    if (s == KILN_OK) s = kiln__node_merge_sources(g, ni, from, n_from);
    if (s != KILN_OK) {
        kiln__sbuf_free(&nm);
        kiln__free(nin);
        kiln__free(nout);
        kiln__free(na);
        return s;
    }
    if (n_in) memcpy(nin, in, sizeof *nin * (size_t)n_in);
    if (n_out) memcpy(nout, out, sizeof *nout * (size_t)n_out);
    if (na && attrs) memcpy(na, attrs, op->attr_size);
    kiln_node *n = &g->nodes[ni];
    kiln__free(n->name);
    kiln__free(n->in);
    kiln__free(n->out);
    kiln__free(n->attrs);
    n->name = nm.data; /* the sbuf's buffer changes owner */
    n->in = nin;
    n->out = nout;
    n->attrs = na;
    n->n_in = n_in;
    n->n_out = n_out;
    n->op_id = op_id;
    n->op = op;
    for (int i = 0; i < n_out; i++)
        if (out[i] >= 0) g->values[out[i]].producer = ni;
    return KILN_OK;
}

int kiln__pat_repeated_lead_axes(const void *data, size_t es, int rank, const int64_t *dims) {
    const unsigned char *d = data;
    int64_t n = kiln__numel(rank, dims);
    if (!d || !es || n <= 1) return 0;
    for (int k = rank - 1; k >= 1; k--) { /* the largest k (the shortest period) first */
        int64_t period = kiln__numel(rank - k, dims + k);
        if (period <= 0 || period == n || n % period) continue;
        bool rep = true;
        for (int64_t off = period; off < n && rep; off += period)
            rep = !memcmp(d + (size_t)off * es, d, (size_t)period * es);
        if (rep) return k;
    }
    return 0;
}
