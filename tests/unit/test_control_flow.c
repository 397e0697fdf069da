/* test_control_flow.c -- If, Loop and Scan on models written in memory with
 * protobuf-c: subgraphs reading outer-scope values, branches of different
 * output shapes, loop-carried values whose shape changes every iteration,
 * scan outputs, Scan directions, a Loop nested in an If, an engine with a
 * Loop saved and loaded back, and malformed subgraphs. */
#include <stdlib.h>

#include "test.h"

#include "onnx.pb-c.h"
#include "format/format.h"
#include "runtime/engine.h"

/* ---- writing models ----------------------------------------------------- */

typedef struct pool {
    void **p;
    int n, cap;
} pool;

static void *px(pool *a, size_t n) {
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 256;
        a->p = realloc(a->p, sizeof(void *) * (size_t)a->cap);
        if (!a->p) abort();
    }
    void *p = calloc(1, n ? n : 1);
    if (!p) abort();
    a->p[a->n++] = p;
    return p;
}

static char *pstr(pool *a, const char *s) { return strcpy(px(a, strlen(s) + 1), s); }

/* Splits "a,b,,c" into names ("" kept). */
static char **names(pool *a, const char *csv, size_t *n) {
    *n = 0;
    if (!*csv) return px(a, sizeof(char *));
    size_t cnt = 1;
    for (const char *q = csv; *q; q++) cnt += *q == ',';
    char **v = px(a, sizeof(char *) * (cnt + 1));
    const char *q = csv;
    for (size_t i = 0; i < cnt; i++) {
        size_t len = strcspn(q, ",");
        v[i] = px(a, len + 1);
        memcpy(v[i], q, len);
        q += len + (q[len] == ',');
    }
    *n = cnt;
    return v;
}

static Onnx__NodeProto *nd(pool *a, const char *op, const char *in, const char *out) {
    Onnx__NodeProto *n = px(a, sizeof *n);
    onnx__node_proto__init(n);
    n->op_type = pstr(a, op);
    n->input = names(a, in, &n->n_input);
    n->output = names(a, out, &n->n_output);
    n->attribute = px(a, sizeof(void *) * 8);
    return n;
}

static Onnx__AttributeProto *attr(pool *a, Onnx__NodeProto *n, const char *name, int type) {
    Onnx__AttributeProto *at = px(a, sizeof *at);
    onnx__attribute_proto__init(at);
    at->name = pstr(a, name);
    at->has_type = 1;
    at->type = type;
    n->attribute[n->n_attribute++] = at;
    return at;
}

static void a_graph(pool *a, Onnx__NodeProto *n, const char *name, Onnx__GraphProto *g) {
    attr(a, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH)->g = g;
}

static void a_int(pool *a, Onnx__NodeProto *n, const char *name, int64_t v) {
    Onnx__AttributeProto *at = attr(a, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    at->has_i = 1;
    at->i = v;
}

static void a_ints(pool *a, Onnx__NodeProto *n, const char *name, int cnt, const int64_t *v) {
    Onnx__AttributeProto *at = attr(a, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    at->n_ints = (size_t)cnt;
    at->ints = px(a, sizeof(int64_t) * (size_t)cnt);
    memcpy(at->ints, v, sizeof(int64_t) * (size_t)cnt);
}

/* A tensor type; rank < 0: no shape; dims < 0: unnamed dynamic dims. */
static Onnx__ValueInfoProto *vi(pool *a, const char *name, int elem, int rank,
                                const int64_t *dims) {
    Onnx__ValueInfoProto *v = px(a, sizeof *v);
    onnx__value_info_proto__init(v);
    v->name = pstr(a, name);
    Onnx__TypeProto *tp = px(a, sizeof *tp);
    onnx__type_proto__init(tp);
    Onnx__TypeProto__Tensor *tt = px(a, sizeof *tt);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = elem;
    if (rank >= 0) {
        Onnx__TensorShapeProto *sh = px(a, sizeof *sh);
        onnx__tensor_shape_proto__init(sh);
        sh->n_dim = (size_t)rank;
        sh->dim = px(a, sizeof(void *) * (size_t)(rank + 1));
        for (int i = 0; i < rank; i++) {
            sh->dim[i] = px(a, sizeof *sh->dim[i]);
            onnx__tensor_shape_proto__dimension__init(sh->dim[i]);
            if (dims[i] >= 0) {
                sh->dim[i]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
                sh->dim[i]->dim_value = dims[i];
            }
        }
        tt->shape = sh;
    }
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    v->type = tp;
    return v;
}

static Onnx__TensorProto *init(pool *a, const char *name, int dtype, int rank, const int64_t *dims,
                               const void *data, size_t nbytes) {
    Onnx__TensorProto *t = px(a, sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = pstr(a, name);
    t->has_data_type = 1;
    t->data_type = dtype;
    t->n_dims = (size_t)rank;
    t->dims = px(a, sizeof(int64_t) * (size_t)(rank + 1));
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
    t->has_raw_data = 1;
    t->raw_data.len = nbytes;
    t->raw_data.data = px(a, nbytes);
    memcpy(t->raw_data.data, data, nbytes);
    return t;
}

typedef struct gparts {
    Onnx__NodeProto *node[16];
    Onnx__ValueInfoProto *in[8], *out[8];
    Onnx__TensorProto *init[8];
    int n_node, n_in, n_out, n_init;
} gparts;

static Onnx__GraphProto *graph(pool *a, const gparts *p) {
    Onnx__GraphProto *g = px(a, sizeof *g);
    onnx__graph_proto__init(g);
    g->name = pstr(a, "g");
    g->n_node = (size_t)p->n_node;
    g->node = px(a, sizeof(void *) * 17);
    memcpy(g->node, p->node, sizeof(void *) * (size_t)p->n_node);
    g->n_input = (size_t)p->n_in;
    g->input = px(a, sizeof(void *) * 9);
    memcpy(g->input, p->in, sizeof(void *) * (size_t)p->n_in);
    g->n_output = (size_t)p->n_out;
    g->output = px(a, sizeof(void *) * 9);
    memcpy(g->output, p->out, sizeof(void *) * (size_t)p->n_out);
    g->n_initializer = (size_t)p->n_init;
    g->initializer = px(a, sizeof(void *) * 9);
    memcpy(g->initializer, p->init, sizeof(void *) * (size_t)p->n_init);
    return g;
}

static kiln_status load(pool *a, Onnx__GraphProto *g, int64_t opset, kiln_model **m) {
    Onnx__OperatorSetIdProto os = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    os.domain = pstr(a, "");
    os.has_version = 1;
    os.version = opset;
    Onnx__OperatorSetIdProto *osl[1] = {&os};
    Onnx__ModelProto mp = ONNX__MODEL_PROTO__INIT;
    mp.has_ir_version = 1;
    mp.ir_version = 8;
    mp.n_opset_import = 1;
    mp.opset_import = osl;
    mp.graph = g;
    size_t n = onnx__model_proto__get_packed_size(&mp);
    uint8_t *buf = px(a, n);
    onnx__model_proto__pack(&mp, buf);
    return kiln_model_load_onnx_memory(buf, n, NULL, m);
}

static void pool_free(pool *a) {
    for (int i = 0; i < a->n; i++) free(a->p[i]);
    free(a->p);
    memset(a, 0, sizeof *a);
}

enum {
    F = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT,
    I64 = ONNX__TENSOR_PROTO__DATA_TYPE__INT64,
    B = ONNX__TENSOR_PROTO__DATA_TYPE__BOOL
};

/* Builds an engine (optionally through serialize + load) and a context. */
static kiln_status make_ctx(kiln_model *m, int roundtrip, kiln_engine **e, kiln_context **c) {
    kiln_builder *b;
    *e = NULL;
    *c = NULL;
    kiln_status s = kiln_builder_create(&b);
    if (s != KILN_OK) return s;
    s = kiln_build(b, m, e);
    kiln_builder_free(b);
    if (s == KILN_OK && roundtrip) {
        void *data;
        size_t size;
        s = kiln_engine_serialize(*e, &data, &size);
        kiln_engine_free(*e);
        *e = NULL;
        if (s == KILN_OK) {
            s = kiln_engine_load_memory(data, size, e);
            kiln_free(data);
        }
    }
    if (s == KILN_OK) s = kiln_context_create(*e, c);
    return s;
}

static int out_is(kiln_context *c, const char *name, kiln_dtype dt, int rank, const int64_t *dims,
                  const float *vals) {
    kiln_dtype d;
    int r;
    int64_t od[8];
    const void *data;
    if (kiln_context_get_output(c, name, &d, &r, od, &data) != KILN_OK) return 0;
    if (d != dt || r != rank) return 0;
    int64_t n = 1;
    for (int i = 0; i < r; i++) {
        if (od[i] != dims[i]) return 0;
        n *= dims[i];
    }
    for (int64_t i = 0; i < n; i++) {
        double got = dt == KILN_DTYPE_FLOAT32 ? ((const float *)data)[i]
                                              : (double)((const int64_t *)data)[i];
        if (got != vals[i]) {
            fprintf(stderr, "  output '%s'[%lld] = %g, expected %g\n", name, (long long)i, got,
                    vals[i]);
            return 0;
        }
    }
    return 1;
}

/* ---- If ------------------------------------------------------------------ */

/* y = c ? x + x : Concat(x, x) -- both branches read the outer x; shapes differ. */
static Onnx__GraphProto *if_model(pool *a) {
    int64_t d3[] = {3};
    gparts tb = {0}, eb = {0}, mg = {0};
    tb.node[tb.n_node++] = nd(a, "Add", "x,x", "t");
    tb.out[tb.n_out++] = vi(a, "t", F, 1, d3);
    Onnx__NodeProto *cat = nd(a, "Concat", "x,x", "e");
    a_int(a, cat, "axis", 0);
    eb.node[eb.n_node++] = cat;
    eb.out[eb.n_out++] = vi(a, "e", F, -1, NULL);
    Onnx__NodeProto *n = nd(a, "If", "c", "y");
    a_graph(a, n, "then_branch", graph(a, &tb));
    a_graph(a, n, "else_branch", graph(a, &eb));
    mg.node[mg.n_node++] = nd(a, "Relu", "x0", "x");
    mg.node[mg.n_node++] = n;
    mg.in[mg.n_in++] = vi(a, "x0", F, 1, d3);
    mg.in[mg.n_in++] = vi(a, "c", B, 0, NULL);
    mg.out[mg.n_out++] = vi(a, "y", F, -1, NULL);
    return graph(a, &mg);
}

TEST(if_branches_read_outer_values) {
    pool a = {0};
    kiln_model *m = NULL;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    CHECK_OK(load(&a, if_model(&a), 13, &m));
    CHECK_OK(make_ctx(m, 0, &e, &c));
    float x[3] = {1, -2, 3};
    int64_t d3[] = {3}, d6[] = {6};
    for (int k = 0; k < 2 && c; k++) {
        bool cond = k == 0;
        CHECK_OK(kiln_context_set_input(c, "x0", KILN_DTYPE_FLOAT32, 1, d3, x));
        CHECK_OK(kiln_context_set_input(c, "c", KILN_DTYPE_BOOL, 0, NULL, &cond));
        CHECK_OK(kiln_context_run(c));
        if (cond)
            CHECK(out_is(c, "y", KILN_DTYPE_FLOAT32, 1, d3, (float[]){2, 0, 6}));
        else
            CHECK(out_is(c, "y", KILN_DTYPE_FLOAT32, 1, d6, (float[]){1, 0, 3, 1, 0, 3}));
    }
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_model_free(m);
    pool_free(&a);
}

/* Bool inputs hold bytes 0 and 1 only: a C API caller's other bytes (a
 * uint8 mask passed as bool) fail the run, naming the input and element,
 * where they reached undefined bool loads (UBSan: "load of value 2, which
 * is not a valid value for type 'bool'") in If's condition and Not. */
TEST(bool_input_bytes) {
    pool a = {0};
    kiln_model *m = NULL;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    CHECK_OK(load(&a, if_model(&a), 13, &m));
    CHECK_OK(make_ctx(m, 0, &e, &c));
    float x[3] = {1, -2, 3};
    int64_t d3[] = {3};
    uint8_t cond = 2;
    if (c) {
        CHECK_OK(kiln_context_set_input(c, "x0", KILN_DTYPE_FLOAT32, 1, d3, x));
        CHECK_OK(kiln_context_set_input(c, "c", KILN_DTYPE_BOOL, 0, NULL, &cond));
        CHECK_ERR(kiln_context_run(c), KILN_ERR_INVALID_ARGUMENT,
                  "input 'c': bool data holds byte 2 (0x02) at element 0 (byte offset 0)");
        cond = 1; /* the same binding, refilled */
        CHECK_OK(kiln_context_run(c));
        CHECK(out_is(c, "y", KILN_DTYPE_FLOAT32, 1, d3, (float[]){2, 0, 6}));
    }
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_model_free(m);
    gparts g = {0};
    int64_t d6[] = {6};
    g.node[g.n_node++] = nd(&a, "Not", "mask", "y");
    g.in[g.n_in++] = vi(&a, "mask", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 1, d6);
    g.out[g.n_out++] = vi(&a, "y", ONNX__TENSOR_PROTO__DATA_TYPE__BOOL, 1, d6);
    CHECK_OK(load(&a, graph(&a, &g), 13, &m));
    CHECK_OK(make_ctx(m, 0, &e, &c));
    uint8_t mask[6] = {0, 1, 1, 0, 255, 1};
    if (c) {
        CHECK_OK(kiln_context_set_input(c, "mask", KILN_DTYPE_BOOL, 1, d6, mask));
        CHECK_ERR(kiln_context_run(c), KILN_ERR_INVALID_ARGUMENT, "byte 255 (0xff) at element 4 (byte offset 4)");
        mask[4] = 1;
        CHECK_OK(kiln_context_run(c));
        const void *y = NULL;
        CHECK_OK(kiln_context_get_output(c, "y", NULL, NULL, NULL, &y));
        if (y) CHECK(!memcmp(y, (uint8_t[]){1, 0, 0, 1, 0, 0}, 6));
    }
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_model_free(m);
    pool_free(&a);
}

/* ---- Loop ---------------------------------------------------------------- */

/* Loop(M, cond) with carried v that grows by one element (outer x) each
 * iteration, scan output = iteration number as float; the body's cond is
 * iter < limit (an outer value). */
static Onnx__GraphProto *loop_body_decl(pool *a, const int64_t *dn) {
    gparts b = {0};
    int64_t d1[] = {1};
    Onnx__NodeProto *cat = nd(a, "Concat", "v_in,x", "v_out");
    a_int(a, cat, "axis", 0);
    b.node[b.n_node++] = cat;
    b.node[b.n_node++] = nd(a, "Less", "i,limit", "c_out");
    Onnx__NodeProto *cast = nd(a, "Cast", "i", "s");
    a_int(a, cast, "to", F);
    b.node[b.n_node++] = cast;
    b.in[b.n_in++] = vi(a, "i", I64, 0, NULL);
    b.in[b.n_in++] = vi(a, "c_in", B, 0, NULL);
    b.in[b.n_in++] = vi(a, "v_in", F, 1, dn);
    b.out[b.n_out++] = vi(a, "c_out", B, 0, NULL);
    b.out[b.n_out++] = vi(a, "v_out", F, 1, dn);
    b.out[b.n_out++] = vi(a, "s", F, 0, NULL);
    (void)d1;
    return graph(a, &b);
}

static Onnx__GraphProto *loop_body(pool *a) { return loop_body_decl(a, (int64_t[]){-1}); }

/* body_v: the shape the body declares for v_in and v_out (NULL: [?]); v0_dim:
 * the dim the graph declares for v0 (-1: dynamic). */
static Onnx__GraphProto *loop_model_decl(pool *a, const char *loop_inputs, const int64_t *body_v,
                                         int64_t v0_dim) {
    gparts mg = {0};
    int64_t d1[] = {1};
    Onnx__NodeProto *n = nd(a, "Loop", loop_inputs, "v_final,scan");
    a_graph(a, n, "body", body_v ? loop_body_decl(a, body_v) : loop_body(a));
    mg.node[mg.n_node++] = n;
    mg.in[mg.n_in++] = vi(a, "M", I64, 0, NULL);
    mg.in[mg.n_in++] = vi(a, "v0", F, 1, (int64_t[]){v0_dim});
    mg.in[mg.n_in++] = vi(a, "x", F, 1, d1);
    mg.in[mg.n_in++] = vi(a, "limit", I64, 0, NULL);
    float t = 1;
    bool tr = true;
    (void)t;
    mg.init[mg.n_init++] = init(a, "cond", B, 0, NULL, &tr, 1);
    mg.out[mg.n_out++] = vi(a, "v_final", F, 1, (int64_t[]){-1});
    mg.out[mg.n_out++] = vi(a, "scan", F, 1, (int64_t[]){-1});
    if (body_v) { /* its shape must not be folded from the body's declared shape */
        mg.node[mg.n_node++] = nd(a, "Shape", "v_final", "v_shape");
        mg.out[mg.n_out++] = vi(a, "v_shape", I64, 1, (int64_t[]){1});
    }
    return graph(a, &mg);
}

static Onnx__GraphProto *loop_model(pool *a, const char *loop_inputs) {
    return loop_model_decl(a, loop_inputs, NULL, 1);
}

static void run_loop(kiln_context *c, int64_t M, int64_t limit, int iters) {
    float v0 = 5, x = 7;
    int64_t d1[] = {1};
    CHECK_OK(kiln_context_set_input(c, "M", KILN_DTYPE_INT64, 0, NULL, &M));
    CHECK_OK(kiln_context_set_input(c, "v0", KILN_DTYPE_FLOAT32, 1, d1, &v0));
    CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 1, d1, &x));
    CHECK_OK(kiln_context_set_input(c, "limit", KILN_DTYPE_INT64, 0, NULL, &limit));
    CHECK_OK(kiln_context_run(c));
    float v[16] = {5}, s[16];
    for (int i = 0; i < iters; i++) {
        v[1 + i] = 7;
        s[i] = (float)i;
    }
    CHECK(out_is(c, "v_final", KILN_DTYPE_FLOAT32, 1, (int64_t[]){1 + iters}, v));
    CHECK(out_is(c, "scan", KILN_DTYPE_FLOAT32, 1, (int64_t[]){iters}, s));
}

TEST(loop_trip_count_and_cond) {
    pool a = {0};
    kiln_model *m = NULL;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    CHECK_OK(load(&a, loop_model(&a, "M,cond,v0"), 13, &m));
    CHECK_OK(make_ctx(m, 0, &e, &c));
    if (c) {
        run_loop(c, 3, 100, 3); /* M stops it */
        run_loop(c, 10, 4, 5); /* cond stops it: iterations 0..4 (i < 4 false at 4) */
        run_loop(c, 0, 4, 0); /* no iteration: empty scan output */
        run_loop(c, 2, 100, 2); /* same context again, other shapes */
    }
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_model_free(m);
    pool_free(&a);
}

/* torch's exporter declares a loop-carried body input with the shape of the
 * first iteration (Mask R-CNN's paste-masks loop: [0x320x320], then
 * [1x320x320], ...). The declared dims are a hint: the carried value may
 * grow, whether the Loop's own input is static or dynamic at build. */
TEST(loop_carried_declared_first_shape) {
    for (int64_t v0_dim = 1; v0_dim >= -1; v0_dim -= 2) {
        pool a = {0};
        kiln_model *m = NULL;
        kiln_engine *e = NULL;
        kiln_context *c = NULL;
        CHECK_OK(load(&a, loop_model_decl(&a, "M,cond,v0", (int64_t[]){1}, v0_dim), 13, &m));
        CHECK_OK(make_ctx(m, 0, &e, &c));
        for (int64_t it = 0; c && it < 6; it += 3) {
            run_loop(c, it, 100, (int)it);
            CHECK(out_is(c, "v_shape", KILN_DTYPE_INT64, 1, (int64_t[]){1}, (float[]){1 + it}));
        }
        if (c) run_loop(c, 10, 4, 5);
        kiln_context_free(c);
        kiln_engine_free(e);
        kiln_model_free(m);
        pool_free(&a);
    }
}

/* Loop-carried outputs that are not computed in the body: v passes through
 * (the body's input itself), w becomes the body's constant k ([2]) after the
 * first iteration while its initial value is [3]. */
TEST(loop_carried_passthrough_and_constant) {
    pool a = {0};
    gparts b = {0}, mg = {0};
    float k[2] = {4, 5}, v0[2] = {1, 2}, w0[3] = {7, 8, 9};
    b.init[b.n_init++] = init(&a, "k", F, 1, (int64_t[]){2}, k, sizeof k);
    b.in[b.n_in++] = vi(&a, "i", I64, 0, NULL);
    b.in[b.n_in++] = vi(&a, "c", B, 0, NULL);
    b.in[b.n_in++] = vi(&a, "v", F, 1, (int64_t[]){2});
    b.in[b.n_in++] = vi(&a, "w", F, 1, (int64_t[]){3});
    b.out[b.n_out++] = vi(&a, "c", B, 0, NULL);
    b.out[b.n_out++] = vi(&a, "v", F, 1, (int64_t[]){2});
    b.out[b.n_out++] = vi(&a, "k", F, 1, (int64_t[]){2});
    Onnx__NodeProto *n = nd(&a, "Loop", "M,,v0,w0", "v_final,w_final");
    a_graph(&a, n, "body", graph(&a, &b));
    mg.node[mg.n_node++] = n;
    mg.node[mg.n_node++] = nd(&a, "Shape", "w_final", "w_shape");
    mg.in[mg.n_in++] = vi(&a, "M", I64, 0, NULL);
    mg.in[mg.n_in++] = vi(&a, "v0", F, 1, (int64_t[]){2});
    mg.in[mg.n_in++] = vi(&a, "w0", F, 1, (int64_t[]){3});
    mg.out[mg.n_out++] = vi(&a, "v_final", F, 1, (int64_t[]){2});
    mg.out[mg.n_out++] = vi(&a, "w_final", F, 1, (int64_t[]){-1});
    mg.out[mg.n_out++] = vi(&a, "w_shape", I64, 1, (int64_t[]){1});
    kiln_model *m = NULL;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    CHECK_OK(load(&a, graph(&a, &mg), 13, &m));
    CHECK_OK(make_ctx(m, 0, &e, &c));
    for (int64_t M = 0; c && M < 3; M += 2) {
        CHECK_OK(kiln_context_set_input(c, "M", KILN_DTYPE_INT64, 0, NULL, &M));
        CHECK_OK(kiln_context_set_input(c, "v0", KILN_DTYPE_FLOAT32, 1, (int64_t[]){2}, v0));
        CHECK_OK(kiln_context_set_input(c, "w0", KILN_DTYPE_FLOAT32, 1, (int64_t[]){3}, w0));
        CHECK_OK(kiln_context_run(c));
        int64_t wn = M ? 2 : 3;
        CHECK(out_is(c, "v_final", KILN_DTYPE_FLOAT32, 1, (int64_t[]){2}, v0));
        CHECK(out_is(c, "w_final", KILN_DTYPE_FLOAT32, 1, &wn, M ? k : w0));
        CHECK(out_is(c, "w_shape", KILN_DTYPE_INT64, 1, (int64_t[]){1}, (float[]){(float)wn}));
    }
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_model_free(m);
    pool_free(&a);
}

TEST(loop_engine_saved_and_loaded) {
    pool a = {0};
    kiln_model *m = NULL;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    CHECK_OK(load(&a, loop_model(&a, "M,,v0"), 13, &m)); /* cond absent: a for loop */
    CHECK_OK(make_ctx(m, 1, &e, &c));
    if (c) run_loop(c, 4, 0, 4); /* the body's cond is ignored without a cond input */
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_model_free(m);
    pool_free(&a);
}

/* ---- Scan ---------------------------------------------------------------- */

/* Running sum over the rows of X[3,2] (reversed, or the columns with axis 1),
 * plus an outer bias; scan output = the running sums. */
static Onnx__GraphProto *scan_model(pool *a, int64_t in_dir, int64_t in_axis, int64_t out_dir) {
    gparts b = {0}, mg = {0};
    int64_t d2[] = {2}, dx[] = {3, 2}, dn[] = {-1};
    b.node[b.n_node++] = nd(a, "Add", "s_in,row", "t");
    b.node[b.n_node++] = nd(a, "Add", "t,bias", "s_out");
    b.node[b.n_node++] = nd(a, "Identity", "s_out", "y");
    b.in[b.n_in++] = vi(a, "s_in", F, 1, dn);
    b.in[b.n_in++] = vi(a, "row", F, 1, dn);
    b.out[b.n_out++] = vi(a, "s_out", F, 1, dn);
    b.out[b.n_out++] = vi(a, "y", F, 1, dn);
    Onnx__NodeProto *n = nd(a, "Scan", "s0,X", "s_final,Y");
    a_graph(a, n, "body", graph(a, &b));
    a_int(a, n, "num_scan_inputs", 1);
    a_ints(a, n, "scan_input_directions", 1, &in_dir);
    a_ints(a, n, "scan_input_axes", 1, &in_axis);
    a_ints(a, n, "scan_output_directions", 1, &out_dir);
    mg.node[mg.n_node++] = n;
    mg.in[mg.n_in++] = vi(a, "s0", F, 1, in_axis ? (int64_t[]){3} : d2);
    mg.in[mg.n_in++] = vi(a, "X", F, 2, dx);
    float bias = 0.5f;
    mg.init[mg.n_init++] = init(a, "bias", F, 0, NULL, &bias, 4);
    mg.out[mg.n_out++] = vi(a, "s_final", F, -1, NULL);
    mg.out[mg.n_out++] = vi(a, "Y", F, -1, NULL);
    return graph(a, &mg);
}

TEST(scan_directions_and_axes) {
    float X[6] = {1, 2, 3, 4, 5, 6};
    int64_t dx[] = {3, 2};
    for (int k = 0; k < 3; k++) {
        pool a = {0};
        kiln_model *m = NULL;
        kiln_engine *e = NULL;
        kiln_context *c = NULL;
        int in_dir = k == 1, axis = k == 2, out_dir = k == 1;
        CHECK_OK(load(&a, scan_model(&a, in_dir, axis, out_dir), 11, &m));
        CHECK_OK(make_ctx(m, k == 1, &e, &c));
        if (c) {
            float s0[3] = {0, 0, 0};
            CHECK_OK(kiln_context_set_input(c, "s0", KILN_DTYPE_FLOAT32, 1,
                                            (int64_t[]){axis ? 3 : 2}, s0));
            CHECK_OK(kiln_context_set_input(c, "X", KILN_DTYPE_FLOAT32, 2, dx, X));
            CHECK_OK(kiln_context_run(c));
            if (k == 0) { /* rows forward: 1.5,2.5 / 5,7 / 10.5,13.5 */
                CHECK(out_is(c, "s_final", KILN_DTYPE_FLOAT32, 1, (int64_t[]){2},
                             (float[]){10.5f, 13.5f}));
                CHECK(out_is(c, "Y", KILN_DTYPE_FLOAT32, 2, dx,
                             (float[]){1.5f, 2.5f, 5, 7, 10.5f, 13.5f}));
            } else if (k == 1) { /* rows reversed in, reversed out: step t lands at 2-t */
                /* steps: 5.5,6.5 / 9,11 / 10.5,13.5 -> written at rows 2,1,0 */
                CHECK(out_is(c, "s_final", KILN_DTYPE_FLOAT32, 1, (int64_t[]){2},
                             (float[]){10.5f, 13.5f}));
                CHECK(out_is(c, "Y", KILN_DTYPE_FLOAT32, 2, dx,
                             (float[]){10.5f, 13.5f, 9, 11, 5.5f, 6.5f}));
            } else { /* columns: [1,3,5] then [2,4,6]; output axis 0 -> Y[2,3] */
                CHECK(out_is(c, "s_final", KILN_DTYPE_FLOAT32, 1, (int64_t[]){3},
                             (float[]){4, 8, 12}));
                CHECK(out_is(c, "Y", KILN_DTYPE_FLOAT32, 2, (int64_t[]){2, 3},
                             (float[]){1.5f, 3.5f, 5.5f, 4, 8, 12}));
            }
        }
        kiln_context_free(c);
        kiln_engine_free(e);
        kiln_model_free(m);
        pool_free(&a);
    }
}

/* ---- nesting --------------------------------------------------------------- */

/* If(c) then: Loop(M) whose body adds the outer-outer x to its carried value;
 * else: Identity(v0). */
TEST(loop_nested_in_if) {
    pool a = {0};
    gparts body = {0}, tb = {0}, eb = {0}, mg = {0};
    int64_t d2[] = {2};
    body.node[body.n_node++] = nd(&a, "Add", "acc_in,x", "acc_out");
    body.node[body.n_node++] = nd(&a, "Identity", "c_in", "c_out");
    body.in[body.n_in++] = vi(&a, "i", I64, 0, NULL);
    body.in[body.n_in++] = vi(&a, "c_in", B, 0, NULL);
    body.in[body.n_in++] = vi(&a, "acc_in", F, 1, d2);
    body.out[body.n_out++] = vi(&a, "c_out", B, 0, NULL);
    body.out[body.n_out++] = vi(&a, "acc_out", F, 1, d2);
    Onnx__NodeProto *loop = nd(&a, "Loop", "M,,v0", "r");
    a_graph(&a, loop, "body", graph(&a, &body));
    tb.node[tb.n_node++] = loop;
    tb.out[tb.n_out++] = vi(&a, "r", F, 1, d2);
    eb.node[eb.n_node++] = nd(&a, "Identity", "v0", "r2");
    eb.out[eb.n_out++] = vi(&a, "r2", F, 1, d2);
    Onnx__NodeProto *n = nd(&a, "If", "c", "y");
    a_graph(&a, n, "then_branch", graph(&a, &tb));
    a_graph(&a, n, "else_branch", graph(&a, &eb));
    mg.node[mg.n_node++] = n;
    mg.in[mg.n_in++] = vi(&a, "c", B, 0, NULL);
    mg.in[mg.n_in++] = vi(&a, "M", I64, 0, NULL);
    mg.in[mg.n_in++] = vi(&a, "v0", F, 1, d2);
    mg.in[mg.n_in++] = vi(&a, "x", F, 1, d2);
    mg.out[mg.n_out++] = vi(&a, "y", F, 1, d2);
    kiln_model *m = NULL;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    CHECK_OK(load(&a, graph(&a, &mg), 13, &m));
    CHECK_OK(make_ctx(m, 1, &e, &c));
    float v0[2] = {1, 2}, x[2] = {10, 20};
    int64_t M = 3;
    for (int k = 0; k < 2 && c; k++) {
        bool cond = k == 0;
        CHECK_OK(kiln_context_set_input(c, "c", KILN_DTYPE_BOOL, 0, NULL, &cond));
        CHECK_OK(kiln_context_set_input(c, "M", KILN_DTYPE_INT64, 0, NULL, &M));
        CHECK_OK(kiln_context_set_input(c, "v0", KILN_DTYPE_FLOAT32, 1, d2, v0));
        CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 1, d2, x));
        CHECK_OK(kiln_context_run(c));
        CHECK(out_is(c, "y", KILN_DTYPE_FLOAT32, 1, d2, cond ? (float[]){31, 62} : v0));
    }
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_model_free(m);
    pool_free(&a);
}

/* ---- sequences resolved at build ---------------------------------------------- */

/* A sequence type whose elements are float tensors of rank `rank`. */
static Onnx__ValueInfoProto *vi_seq(pool *a, const char *name, int rank) {
    Onnx__ValueInfoProto *v = vi(a, name, F, rank, (int64_t[]){-1, -1, -1, -1});
    Onnx__TypeProto *tp = px(a, sizeof *tp), *el = v->type;
    onnx__type_proto__init(tp);
    Onnx__TypeProto__Sequence *sq = px(a, sizeof *sq);
    onnx__type_proto__sequence__init(sq);
    sq->elem_type = el;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
    tp->sequence_type = sq;
    v->type = tp;
    return v;
}

static Onnx__TensorProto *i64s(pool *a, const char *name, int rank, int n, const int64_t *v) {
    return init(a, name, I64, rank, (int64_t[]){n}, v, sizeof *v * (size_t)n);
}

/* torch's `tensor_split(x, (1, 3))` form (as mvit_v1_b's attention pooling
 * exports it): SequenceEmpty, a Loop of 2 iterations whose body
 * SequenceInserts x[idx[i]:idx[i+1]], one more SequenceInsert, SequenceAt;
 * then the other sequence ops on it. `m_input`: M is a graph input, so the
 * loop cannot be unrolled. */
static Onnx__GraphProto *seq_model(pool *a, bool m_input) {
    gparts b = {0}, mg = {0};
    int64_t d43[] = {4, 3};
    b.node[b.n_node++] = nd(a, "Gather", "idx,i", "st");
    b.node[b.n_node++] = nd(a, "Add", "i,one", "i1");
    b.node[b.n_node++] = nd(a, "Gather", "idx,i1", "en");
    b.node[b.n_node++] = nd(a, "Slice", "x,st,en,ax", "piece");
    b.node[b.n_node++] = nd(a, "SequenceInsert", "s_in,piece", "s_out");
    b.node[b.n_node++] = nd(a, "Identity", "cond", "c_out");
    b.init[b.n_init++] = i64s(a, "one", 1, 1, (int64_t[]){1});
    b.in[b.n_in++] = vi(a, "i", I64, 1, (int64_t[]){1});
    b.in[b.n_in++] = vi(a, "c", B, 0, NULL);
    b.in[b.n_in++] = vi_seq(a, "s_in", 2);
    b.out[b.n_out++] = vi(a, "c_out", B, 0, NULL);
    b.out[b.n_out++] = vi_seq(a, "s_out", 2);
    b.out[b.n_out++] = vi(a, "st", I64, 1, (int64_t[]){1}); /* a scan output */

    mg.node[mg.n_node++] = nd(a, "SequenceEmpty", "", "s0");
    Onnx__NodeProto *loop = nd(a, "Loop", "M,cond,s0", "s2,starts");
    loop->name = pstr(a, "split_loop");
    a_graph(a, loop, "body", graph(a, &b));
    mg.node[mg.n_node++] = loop;
    Onnx__NodeProto *c3 = nd(a, "Constant", "", "st3"), *c4 = nd(a, "Constant", "", "en4");
    attr(a, c3, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR)->t =
        i64s(a, "", 1, 1, (int64_t[]){3});
    attr(a, c4, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR)->t =
        i64s(a, "", 1, 1, (int64_t[]){4});
    mg.node[mg.n_node++] = c3;
    mg.node[mg.n_node++] = c4;
    mg.node[mg.n_node++] = nd(a, "Slice", "x,st3,en4,ax", "tail");
    mg.node[mg.n_node++] = nd(a, "SequenceInsert", "s2,tail", "s3");
    mg.node[mg.n_node++] = nd(a, "SequenceAt", "s3,p1", "y1");
    mg.node[mg.n_node++] = nd(a, "SequenceAt", "s3,pm1", "y2");
    mg.node[mg.n_node++] = nd(a, "SequenceLength", "s3", "n");
    Onnx__NodeProto *cat = nd(a, "ConcatFromSequence", "s3", "y3");
    a_int(a, cat, "axis", 0);
    mg.node[mg.n_node++] = cat;
    mg.node[mg.n_node++] = nd(a, "SequenceErase", "s3,p0", "s4");
    Onnx__NodeProto *cat4 = nd(a, "ConcatFromSequence", "s4", "y4");
    a_int(a, cat4, "axis", 0);
    mg.node[mg.n_node++] = cat4;
    mg.node[mg.n_node++] = nd(a, "SplitToSequence", "x,two", "s5"); /* 2 pieces of 2 rows */
    Onnx__NodeProto *stack = nd(a, "ConcatFromSequence", "s5", "y5");
    a_int(a, stack, "axis", 0);
    a_int(a, stack, "new_axis", 1);
    mg.node[mg.n_node++] = stack;
    Onnx__NodeProto *cols = nd(a, "SplitToSequence", "x", "s6"); /* 3 columns of [4] */
    a_int(a, cols, "axis", 1);
    a_int(a, cols, "keepdims", 0);
    mg.node[mg.n_node++] = cols;
    mg.node[mg.n_node++] = nd(a, "SequenceAt", "s6,pm1", "y6");
    bool tr = true;
    if (m_input)
        mg.in[mg.n_in++] = vi(a, "M", I64, 0, NULL);
    else
        mg.init[mg.n_init++] = i64s(a, "M", 0, 1, (int64_t[]){2});
    mg.init[mg.n_init++] = init(a, "cond", B, 0, NULL, &tr, 1);
    mg.init[mg.n_init++] = i64s(a, "idx", 1, 3, (int64_t[]){0, 1, 3});
    mg.init[mg.n_init++] = i64s(a, "ax", 1, 1, (int64_t[]){0});
    mg.init[mg.n_init++] = i64s(a, "p0", 0, 1, (int64_t[]){0});
    mg.init[mg.n_init++] = i64s(a, "p1", 0, 1, (int64_t[]){1});
    mg.init[mg.n_init++] = i64s(a, "pm1", 0, 1, (int64_t[]){-1});
    mg.init[mg.n_init++] = i64s(a, "two", 0, 1, (int64_t[]){2});
    mg.in[mg.n_in++] = vi(a, "x", F, 2, d43);
    const char *outs[] = {"y1", "y2", "n", "y3", "y4", "y5", "y6", "starts"};
    for (int k = 0; k < 8; k++)
        mg.out[mg.n_out++] = vi(a, outs[k], k == 2 || k == 7 ? I64 : F, -1, NULL);
    return graph(a, &mg);
}

TEST(sequences_resolved_at_build) {
    pool a = {0};
    kiln_model *m = NULL;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    CHECK_OK(load(&a, seq_model(&a, false), 13, &m));
    CHECK_OK(make_ctx(m, 1, &e, &c));
    float x[12];
    for (int i = 0; i < 12; i++) x[i] = (float)i;
    if (c) {
        CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, (int64_t[]){4, 3}, x));
        CHECK_OK(kiln_context_run(c));
        CHECK(out_is(c, "y1", KILN_DTYPE_FLOAT32, 2, (int64_t[]){2, 3}, x + 3));
        CHECK(out_is(c, "y2", KILN_DTYPE_FLOAT32, 2, (int64_t[]){1, 3}, x + 9));
        CHECK(out_is(c, "n", KILN_DTYPE_INT64, 0, NULL, (float[]){3}));
        CHECK(out_is(c, "y3", KILN_DTYPE_FLOAT32, 2, (int64_t[]){4, 3}, x));
        CHECK(out_is(c, "y4", KILN_DTYPE_FLOAT32, 2, (int64_t[]){3, 3}, x + 3));
        CHECK(out_is(c, "y5", KILN_DTYPE_FLOAT32, 3, (int64_t[]){2, 2, 3}, x));
        CHECK(out_is(c, "y6", KILN_DTYPE_FLOAT32, 1, (int64_t[]){4}, (float[]){2, 5, 8, 11}));
        CHECK(out_is(c, "starts", KILN_DTYPE_INT64, 2, (int64_t[]){2, 1}, (float[]){0, 1}));
    }
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_model_free(m);
    pool_free(&a);
}

/* Sequences whose structure is only known at run time are refused at load,
 * naming the node and why. */
TEST(sequences_not_static) {
    kiln_model *m = NULL;
    { /* the Loop's trip count is a graph input */
        pool a = {0};
        CHECK(load(&a, seq_model(&a, true), 13, &m) == KILN_ERR_UNSUPPORTED);
        CHECK(strstr(kiln_last_error(), "'split_loop' (Loop)") &&
              strstr(kiln_last_error(), "trip count M is computed at run time"));
        pool_free(&a);
    }
    { /* a position from a graph input; a sequence as a graph output */
        for (int k = 0; k < 2; k++) {
            pool a = {0};
            gparts mg = {0};
            mg.node[mg.n_node++] = nd(&a, "SequenceConstruct", "x,x", "s");
            if (!k) mg.node[mg.n_node++] = nd(&a, "SequenceAt", "s,p", "y");
            mg.in[mg.n_in++] = vi(&a, "x", F, 1, (int64_t[]){3});
            mg.in[mg.n_in++] = vi(&a, "p", I64, 0, NULL);
            mg.out[mg.n_out++] = k ? vi_seq(&a, "s", 1) : vi(&a, "y", F, 1, (int64_t[]){3});
            CHECK(load(&a, graph(&a, &mg), 13, &m) == KILN_ERR_UNSUPPORTED);
            CHECK(strstr(kiln_last_error(), k ? "graph output 's' is a sequence"
                                              : "position 'p' is computed at run time"));
            pool_free(&a);
        }
    }
}

/* A sequence op without a named output is a malformed model, not a crash. */
TEST(sequence_op_without_output) {
    pool a = {0};
    gparts mg = {0};
    mg.node[mg.n_node++] = nd(&a, "SequenceConstruct", "x", "s");
    mg.node[mg.n_node++] = nd(&a, "SequenceInsert", "s,x", ""); /* (output NULL) */
    mg.node[mg.n_node++] = nd(&a, "Neg", "x", "y");
    mg.in[mg.n_in++] = vi(&a, "x", F, 1, (int64_t[]){3});
    mg.out[mg.n_out++] = vi(&a, "y", F, 1, (int64_t[]){3});
    kiln_model *m = NULL;
    CHECK(load(&a, graph(&a, &mg), 13, &m) == KILN_ERR_MODEL);
    CHECK(strstr(kiln_last_error(), "must have one named output"));
    pool_free(&a);
}

/* An unroll bomb: a Loop of 4096 iterations whose body SequenceInserts 8
 * times. Each insert copies its list, so resolving it held 32768^2/2 names
 * (4.3 GB); a 1.4 MB file of 40000 chained inserts took 8 GB and 23 s. The
 * names held by all lists are bounded and the model is refused, naming the
 * node. */
TEST(sequence_unroll_bomb) {
    pool a = {0};
    gparts b = {0}, mg = {0};
    char in[32], out[32];
    for (int k = 0; k < 8; k++) {
        snprintf(in, sizeof in, "s%d,x", k);
        snprintf(out, sizeof out, k == 7 ? "s_out" : "s%d", k + 1);
        b.node[b.n_node++] = nd(&a, "SequenceInsert", k ? in : "s_in,x", out);
    }
    b.node[b.n_node++] = nd(&a, "Identity", "c", "c_out");
    b.in[b.n_in++] = vi(&a, "i", I64, 0, NULL);
    b.in[b.n_in++] = vi(&a, "c", B, 0, NULL);
    b.in[b.n_in++] = vi_seq(&a, "s_in", 1);
    b.out[b.n_out++] = vi(&a, "c_out", B, 0, NULL);
    b.out[b.n_out++] = vi_seq(&a, "s_out", 1);
    mg.node[mg.n_node++] = nd(&a, "SequenceEmpty", "", "s0");
    Onnx__NodeProto *loop = nd(&a, "Loop", "M,,s0", "s9");
    loop->name = pstr(&a, "bomb");
    a_graph(&a, loop, "body", graph(&a, &b));
    mg.node[mg.n_node++] = loop;
    mg.node[mg.n_node++] = nd(&a, "SequenceAt", "s9,p0", "y");
    mg.init[mg.n_init++] = i64s(&a, "M", 0, 1, (int64_t[]){4096});
    mg.init[mg.n_init++] = i64s(&a, "p0", 0, 1, (int64_t[]){0});
    mg.in[mg.n_in++] = vi(&a, "x", F, 1, (int64_t[]){3});
    mg.out[mg.n_out++] = vi(&a, "y", F, 1, (int64_t[]){3});
    kiln_model *m = NULL;
    CHECK(load(&a, graph(&a, &mg), 13, &m) == KILN_ERR_UNSUPPORTED);
    CHECK(strstr(kiln_last_error(), "(SequenceInsert): resolving sequences would hold more than") &&
          strstr(kiln_last_error(), "bomb/iter"));
    kiln_model_free(m);
    pool_free(&a);
}

/* SplitToSequence with one chunk length of INT64_MAX: one piece. The
 * piece count (len + c - 1) / c overflowed (UBSan: signed integer overflow). */
TEST(sequence_split_chunk_int64_max) {
    pool a = {0};
    gparts mg = {0};
    mg.node[mg.n_node++] = nd(&a, "SplitToSequence", "x,c", "s");
    mg.node[mg.n_node++] = nd(&a, "SequenceAt", "s,p0", "y");
    mg.node[mg.n_node++] = nd(&a, "SequenceLength", "s", "n");
    mg.init[mg.n_init++] = i64s(&a, "c", 0, 1, (int64_t[]){INT64_MAX});
    mg.init[mg.n_init++] = i64s(&a, "p0", 0, 1, (int64_t[]){0});
    mg.in[mg.n_in++] = vi(&a, "x", F, 1, (int64_t[]){3});
    mg.out[mg.n_out++] = vi(&a, "y", F, 1, (int64_t[]){3});
    mg.out[mg.n_out++] = vi(&a, "n", I64, 0, NULL);
    kiln_model *m = NULL;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    CHECK_OK(load(&a, graph(&a, &mg), 13, &m));
    CHECK_OK(make_ctx(m, 0, &e, &c));
    float x[3] = {1, 2, 3};
    if (c) {
        CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 1, (int64_t[]){3}, x));
        CHECK_OK(kiln_context_run(c));
        CHECK(out_is(c, "y", KILN_DTYPE_FLOAT32, 1, (int64_t[]){3}, x));
        CHECK(out_is(c, "n", KILN_DTYPE_INT64, 0, NULL, (float[]){1}));
    }
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_model_free(m);
    pool_free(&a);
}

/* A Loop whose carried value doubles every iteration (40 of them: 12 TB at
 * the end) under a context memory limit of 1 MiB: the body's tensors count
 * against the limit and the run fails naming the node. They were not
 * counted: the run took 19.7 GB under a 64 MiB limit before it died. */
TEST(loop_growth_under_memory_limit) {
    pool a = {0};
    gparts b = {0}, mg = {0};
    b.node[b.n_node++] = nd(&a, "Identity", "c", "c_out");
    Onnx__NodeProto *cat = nd(&a, "Concat", "v,v", "v_out");
    a_int(&a, cat, "axis", 0);
    b.node[b.n_node++] = cat;
    b.in[b.n_in++] = vi(&a, "i", I64, 0, NULL);
    b.in[b.n_in++] = vi(&a, "c", B, 0, NULL);
    b.in[b.n_in++] = vi(&a, "v", F, 1, (int64_t[]){3});
    b.out[b.n_out++] = vi(&a, "c_out", B, 0, NULL);
    b.out[b.n_out++] = vi(&a, "v_out", F, 1, (int64_t[]){3});
    Onnx__NodeProto *loop = nd(&a, "Loop", "M,,x", "y");
    loop->name = pstr(&a, "grow");
    a_graph(&a, loop, "body", graph(&a, &b));
    mg.node[mg.n_node++] = loop;
    mg.init[mg.n_init++] = i64s(&a, "M", 0, 1, (int64_t[]){40});
    mg.in[mg.n_in++] = vi(&a, "x", F, 1, (int64_t[]){3});
    mg.out[mg.n_out++] = vi(&a, "y", F, 1, (int64_t[]){-1});
    kiln_model *m = NULL;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    CHECK_OK(load(&a, graph(&a, &mg), 13, &m));
    CHECK_OK(make_ctx(m, 0, &e, &c));
    float x[3] = {1, 2, 3};
    if (c) {
        CHECK_OK(kiln_context_set_memory_limit(c, (size_t)1 << 20));
        CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 1, (int64_t[]){3}, x));
        CHECK(kiln_context_run(c) == KILN_ERR_OUT_OF_MEMORY);
        CHECK(strstr(kiln_last_error(), "'grow'") && strstr(kiln_last_error(), "memory limit"));
    }
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_model_free(m);
    pool_free(&a);
}

/* A position outside the sequence is named as the model gives it: -3 in a
 * sequence of 2 was reported as -1 (after adding the length). */
TEST(sequence_position_out_of_range) {
    pool a = {0};
    gparts mg = {0};
    mg.node[mg.n_node++] = nd(&a, "SequenceConstruct", "x,x", "s");
    mg.node[mg.n_node++] = nd(&a, "SequenceAt", "s,p", "y");
    mg.init[mg.n_init++] = i64s(&a, "p", 0, 1, (int64_t[]){-3});
    mg.in[mg.n_in++] = vi(&a, "x", F, 1, (int64_t[]){3});
    mg.out[mg.n_out++] = vi(&a, "y", F, 1, (int64_t[]){3});
    kiln_model *m = NULL;
    CHECK(load(&a, graph(&a, &mg), 13, &m) == KILN_ERR_MODEL);
    CHECK(strstr(kiln_last_error(), "(SequenceAt): position -3 is outside the sequence of 2"));
    kiln_model_free(m);
    pool_free(&a);
}

/* A position in a Constant's value_int form (opset 12+). */
TEST(sequence_position_value_int) {
    pool a = {0};
    gparts mg = {0};
    Onnx__NodeProto *p = nd(&a, "Constant", "", "p");
    a_int(&a, p, "value_int", -1);
    mg.node[mg.n_node++] = p;
    mg.node[mg.n_node++] = nd(&a, "Neg", "x", "nx");
    mg.node[mg.n_node++] = nd(&a, "SequenceConstruct", "x,nx", "s");
    mg.node[mg.n_node++] = nd(&a, "SequenceAt", "s,p", "y");
    mg.in[mg.n_in++] = vi(&a, "x", F, 1, (int64_t[]){3});
    mg.out[mg.n_out++] = vi(&a, "y", F, 1, (int64_t[]){3});
    kiln_model *m = NULL;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    CHECK_OK(load(&a, graph(&a, &mg), 13, &m));
    CHECK_OK(make_ctx(m, 0, &e, &c));
    float x[3] = {1, 2, 3};
    if (c) {
        CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 1, (int64_t[]){3}, x));
        CHECK_OK(kiln_context_run(c));
        CHECK(out_is(c, "y", KILN_DTYPE_FLOAT32, 1, (int64_t[]){3}, (float[]){-1, -2, -3}));
    }
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_model_free(m);
    pool_free(&a);
}

/* ---- errors ------------------------------------------------------------------ */

TEST(bad_subgraphs) {
    int64_t d3[] = {3};
    kiln_model *m = NULL;
    { /* a subgraph reads a name defined nowhere */
        pool a = {0};
        gparts tb = {0}, eb = {0}, mg = {0};
        tb.node[tb.n_node++] = nd(&a, "Relu", "nowhere", "t");
        tb.out[tb.n_out++] = vi(&a, "t", F, 1, d3);
        eb.node[eb.n_node++] = nd(&a, "Relu", "x", "e");
        eb.out[eb.n_out++] = vi(&a, "e", F, 1, d3);
        Onnx__NodeProto *n = nd(&a, "If", "c", "y");
        a_graph(&a, n, "then_branch", graph(&a, &tb));
        a_graph(&a, n, "else_branch", graph(&a, &eb));
        mg.node[mg.n_node++] = n;
        mg.in[mg.n_in++] = vi(&a, "x", F, 1, d3);
        mg.in[mg.n_in++] = vi(&a, "c", B, 0, NULL);
        mg.out[mg.n_out++] = vi(&a, "y", F, 1, d3);
        CHECK_ERR(load(&a, graph(&a, &mg), 13, &m), KILN_ERR_MODEL, "'nowhere'");
        /* a missing branch */
        tb.node[0] = nd(&a, "Relu", "x", "t");
        n->attribute[0]->g = graph(&a, &tb);
        n->n_attribute = 1;
        CHECK_ERR(load(&a, graph(&a, &mg), 13, &m), KILN_ERR_MODEL, "'else_branch' is missing");
        /* branches with different output counts */
        n->n_attribute = 2;
        tb.out[tb.n_out++] = vi(&a, "x", F, 1, d3);
        n->attribute[0]->g = graph(&a, &tb);
        CHECK_ERR(load(&a, graph(&a, &mg), 13, &m), KILN_ERR_MODEL,
                  "then_branch' has 1 inputs and 2 outputs");
        /* a graph attribute on an op without subgraphs */
        Onnx__NodeProto *r = nd(&a, "Relu", "x", "y");
        a_graph(&a, r, "body", graph(&a, &eb));
        mg.node[0] = r;
        CHECK_ERR(load(&a, graph(&a, &mg), 13, &m), KILN_ERR_UNSUPPORTED,
                  "only in If, Loop and Scan");
        pool_free(&a);
    }
    { /* Loop with neither M nor cond never ends: refused at run time */
        pool a = {0};
        kiln_engine *e = NULL;
        kiln_context *c = NULL;
        CHECK_OK(load(&a, loop_model(&a, ",,v0"), 13, &m));
        CHECK_OK(make_ctx(m, 0, &e, &c));
        float v0 = 1, x = 2;
        int64_t lim = 3, d1[] = {1};
        if (c) {
            kiln_context_set_input(c, "v0", KILN_DTYPE_FLOAT32, 1, d1, &v0);
            kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 1, d1, &x);
            kiln_context_set_input(c, "limit", KILN_DTYPE_INT64, 0, NULL, &lim);
            kiln_context_set_input(c, "M", KILN_DTYPE_INT64, 0, NULL, &lim);
            CHECK_ERR(kiln_context_run(c), KILN_ERR_MODEL, "would never end");
        }
        kiln_context_free(c);
        kiln_engine_free(e);
        kiln_model_free(m);
        m = NULL;
        pool_free(&a);
    }
    { /* Ifs nested 33 deep: refused (32 are allowed); 3,000 deep: refused before
       * protobuf-c's unpack, whose recursion overflowed the stack (SIGSEGV; probe5) */
        pool a = {0};
        int64_t d1[] = {1};
        static const int depths[] = {32, 33, 3000};
        for (int di = 0; di < 3; di++) {
            int depth = depths[di];
            gparts leaf = {0};
            leaf.node[leaf.n_node++] = nd(&a, "Identity", "x", "y0");
            leaf.out[leaf.n_out++] = vi(&a, "y0", F, 1, d1);
            Onnx__GraphProto *g = graph(&a, &leaf);
            for (int k = 1; k <= depth; k++) {
                char out[16], prev[16];
                snprintf(out, sizeof out, "y%d", k);
                snprintf(prev, sizeof prev, "y%d", k - 1);
                gparts lv = {0}, other = {0}; /* one branch nests, the other is flat */
                char oname[16];
                snprintf(oname, sizeof oname, "z%d", k);
                other.node[other.n_node++] = nd(&a, "Identity", "x", oname);
                other.out[other.n_out++] = vi(&a, oname, F, 1, d1);
                Onnx__NodeProto *n = nd(&a, "If", "c", out);
                a_graph(&a, n, "then_branch", g);
                a_graph(&a, n, "else_branch", graph(&a, &other));
                lv.node[lv.n_node++] = n;
                lv.out[lv.n_out++] = vi(&a, out, F, 1, d1);
                if (k == depth) {
                    lv.in[lv.n_in++] = vi(&a, "x", F, 1, d1);
                    lv.in[lv.n_in++] = vi(&a, "c", B, 0, NULL);
                }
                g = graph(&a, &lv);
            }
            kiln_status st = load(&a, g, 13, &m);
            if (depth == 32) {
                CHECK(st == KILN_OK);
                kiln_engine *e = NULL;
                kiln_context *c = NULL;
                CHECK_OK(make_ctx(m, 1, &e, &c));
                float x = 3;
                bool cond = true;
                if (c) {
                    CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 1, d1, &x));
                    CHECK_OK(kiln_context_set_input(c, "c", KILN_DTYPE_BOOL, 0, NULL, &cond));
                    CHECK_OK(kiln_context_run(c));
                    CHECK(out_is(c, "y32", KILN_DTYPE_FLOAT32, 1, d1, &x));
                }
                kiln_context_free(c);
                kiln_engine_free(e);
                kiln_model_free(m);
                m = NULL;
            } else if (depth == 33) {
                CHECK(st == KILN_ERR_UNSUPPORTED &&
                      strstr(kiln_last_error(), "nested more than 32 deep"));
            } else {
                CHECK(st == KILN_ERR_MODEL &&
                      strstr(kiln_last_error(), "its messages are nested more than 128 levels deep"));
            }
        }
        pool_free(&a);
    }
    { /* an engine whose stored body is damaged: refused when the node runs */
        pool a = {0};
        kiln_engine *e = NULL;
        kiln_context *c = NULL;
        CHECK_OK(load(&a, loop_model(&a, "M,cond,v0"), 13, &m));
        CHECK_OK(make_ctx(m, 0, &e, &c));
        int found = 0;
        for (int i = 0; e && i < e->graph->n_values; i++) {
            kiln_value *v = &e->graph->values[i];
            const char *nm = v->name, *suffix = strstr(nm, ":body");
            if (!suffix || suffix[5] || !(v->flags & KILN_VALUE_CONST) || v->nbytes < 600) continue;
            ((unsigned char *)v->data)[520] ^= 0xff; /* the section table: checksum fails */
            found = 1;
        }
        CHECK(found);
        float v0 = 1, x = 2;
        int64_t M = 2, d1[] = {1};
        if (c) {
            kiln_context_set_input(c, "M", KILN_DTYPE_INT64, 0, NULL, &M);
            kiln_context_set_input(c, "v0", KILN_DTYPE_FLOAT32, 1, d1, &v0);
            kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 1, d1, &x);
            kiln_context_set_input(c, "limit", KILN_DTYPE_INT64, 0, NULL, &M);
            CHECK_ERR(kiln_context_run(c), KILN_ERR_MODEL,
                      "subgraph 'body' is not a valid subgraph");
        }
        kiln_context_free(c);
        kiln_engine_free(e);
        kiln_model_free(m);
        m = NULL;
        pool_free(&a);
    }
    /* bytes that are not a subgraph */
    unsigned char junk[600] = {1, 2, 3};
    kiln_graph *g = NULL;
    void *blob = NULL;
    CHECK(kiln__subgraph_unpack(junk, sizeof junk, "test blob", &g, &blob) == KILN_ERR_MODEL);
    CHECK(strstr(kiln_last_error(), "test blob is not a valid subgraph") != NULL);
    CHECK(g == NULL && blob == NULL);
}

int main(void) {
    RUN(if_branches_read_outer_values);
    RUN(bool_input_bytes);
    RUN(loop_trip_count_and_cond);
    RUN(loop_carried_declared_first_shape);
    RUN(loop_carried_passthrough_and_constant);
    RUN(loop_engine_saved_and_loaded);
    RUN(scan_directions_and_axes);
    RUN(loop_nested_in_if);
    RUN(bad_subgraphs);
    RUN(sequences_resolved_at_build);
    RUN(sequences_not_static);
    RUN(sequence_position_value_int);
    RUN(sequence_op_without_output);
    RUN(sequence_unroll_bomb);
    RUN(sequence_split_chunk_int64_max);
    RUN(loop_growth_under_memory_limit);
    RUN(sequence_position_out_of_range);
    return test_summary();
}
