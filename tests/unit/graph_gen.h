/* graph_gen.h -- the random graph grammar of the differential tests
 * (tests/unit/test_optimizer_diff.c: the optimizer on CPU plans;
 * tests/cuda/test_cuda_diff.c: CUDA plans on the emulated device): small
 * graphs built around each rewrite (Slices/Concat/Pad/Dropout/Transpose
 * chains, linear layers with layer scales and residuals, Conv chains,
 * elementwise chains, decomposed LayerNorm/RMSNorm/GELU, GPT-2's Conv1D,
 * multi-axis Slices, data movement), printing a graph, building and
 * running an engine on seeded inputs (NaN/inf here and there), and the
 * KILN_DIFF_* environment counts. Header-only (static functions) on top of
 * graph_build.h and test.h: include it in one test program. */
#ifndef KILN_TEST_GRAPH_GEN_H
#define KILN_TEST_GRAPH_GEN_H

#include <errno.h>
#include <stdbool.h>

#include "graph_build.h"

#include "ops/elementwise_impl.h"
#include "ops/nn_attrs.h"
#include "ops/reduce_attrs.h"
#include "ops/tensor_internal.h"

#define MAXN 4096
#define MAXO 8

/* uniform integer in [0, n) */
static int ri(int n) { return (int)((frand() + 1.0f) * 0.5f * (float)n) % n; }

static int add_i64(kiln_graph *g, const char *name, int n, const int64_t *x) {
    int v = add_val(g, name);
    int64_t d[1] = {n};
    if (kiln__value_set_const(&g->values[v], KILN_DTYPE_INT64, 1, d, x) != KILN_OK) abort();
    return v;
}

/* An index tensor of one value, int64 or (i32) int32 (saturated). */
static int add_index(kiln_graph *g, const char *name, int64_t x, bool i32) {
    if (!i32) return add_i64(g, name, 1, &x);
    int32_t y = x > INT32_MAX ? INT32_MAX : x < INT32_MIN ? INT32_MIN : (int32_t)x;
    int v = add_val(g, name);
    int64_t d[1] = {1};
    if (kiln__value_set_const(&g->values[v], KILN_DTYPE_INT32, 1, d, &y) != KILN_OK) abort();
    return v;
}

static int add_bool(kiln_graph *g, const char *name, bool x) {
    int v = add_val(g, name);
    uint8_t b = x;
    if (kiln__value_set_const(&g->values[v], KILN_DTYPE_BOOL, 0, NULL, &b) != KILN_OK) abort();
    return v;
}

/* ---- printing a graph ------------------------------------------------------ */

static void print_value(const kiln_graph *g, int v) {
    if (v < 0) {
        fprintf(stderr, " -");
        return;
    }
    const kiln_value *x = &g->values[v];
    fprintf(stderr, " %s[", x->name ? x->name : "?");
    for (int i = 0; i < x->info.rank; i++) fprintf(stderr, "%s%lld", i ? "," : "", (long long)x->info.dims[i]);
    fprintf(stderr, "]");
    int64_t n = kiln__numel(x->info.rank, x->info.dims);
    if ((x->flags & KILN_VALUE_CONST) && n <= 8 && x->data) {
        fprintf(stderr, "=");
        for (int64_t i = 0; i < n; i++) fprintf(stderr, "%s%g", i ? "," : "{", kiln__load_f64(x->info.dtype, x->data, i));
        fprintf(stderr, "}");
    }
}

static void print_graph(const kiln_graph *g) {
    fprintf(stderr, "  inputs:");
    for (int i = 0; i < g->n_inputs; i++) print_value(g, g->inputs[i]);
    fprintf(stderr, "\n");
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        if (n->dead) continue;
        fprintf(stderr, "  %s %s:", n->op->name, n->name);
        for (int i = 0; i < n->n_in; i++) print_value(g, n->in[i]);
        fprintf(stderr, " ->");
        print_value(g, n->out[0]);
        if (n->op_id == KILN_OP_Transpose) {
            const kiln_transpose_attrs *t = n->attrs;
            fprintf(stderr, " perm=%s", t->n_perm ? "" : "(reversed)");
            for (int i = 0; i < t->n_perm; i++) fprintf(stderr, "%s%d", i ? "," : "", t->perm[i]);
        } else if (n->op_id == KILN_OP_Concat) {
            fprintf(stderr, " axis=%d", ((const kiln_axis_attrs *)n->attrs)->axis);
        } else if (n->op_id == KILN_OP_Pad) {
            fprintf(stderr, " mode=%d", ((const kiln_pad_attrs *)n->attrs)->mode);
        } else if (n->op_id == KILN_OP_Gemm) {
            const kiln_gemm_attrs *a = n->attrs;
            fprintf(stderr, " alpha=%g beta=%g transA=%d transB=%d", a->alpha, a->beta, a->trans_a, a->trans_b);
        }
        fprintf(stderr, "\n");
    }
    fprintf(stderr, "  outputs:");
    for (int i = 0; i < g->n_outputs; i++) print_value(g, g->outputs[i]);
    fprintf(stderr, "\n");
}

/* ---- engines ----------------------------------------------------------------- */

/* A graph whose inputs' first dims were made one symbol: the sizes they
 * had (the ones it runs at; -1 for inputs left static). */
typedef struct dyn {
    bool on;
    bool special; /* inputs with NaN and infinite values here and there */
    bool tune;    /* kernel tuning on (build_for) */
    int64_t d0[8];
} dyn;

/* Builds m at optimization level opt for device dev at precision p,
 * tuning as dy->tune says, one thread; with dy->on, a profile [1, d0, d0 + 1] on the first dim of
 * each input that has one. */
static kiln_status build_for(const kiln_model *m, int opt, const dyn *dy, kiln_device dev, kiln_precision p,
                             kiln_engine **e) {
    kiln_builder *b = NULL;
    *e = NULL;
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_optimization(b, opt));
    CHECK_OK(kiln_builder_set_tuning(b, dy->tune));
    CHECK_OK(kiln_builder_set_threads(b, 1));
    if (dev != KILN_DEVICE_CPU) CHECK_OK(kiln_builder_set_device(b, dev, 0));
    if (p != KILN_PRECISION_FP32) CHECK_OK(kiln_builder_set_precision(b, p));
    for (int i = 0; dy->on && i < m->graph->n_inputs && i < 8; i++) {
        const kiln_value *v = &m->graph->values[m->graph->inputs[i]];
        if (dy->d0[i] < 0) continue;
        int64_t d[3][KILN_MAX_RANK];
        for (int k = 0; k < 3; k++) memcpy(d[k], v->info.dims, sizeof d[k]);
        d[0][0] = 1, d[1][0] = dy->d0[i], d[2][0] = dy->d0[i] + 1;
        CHECK_OK(kiln_builder_set_profile(b, v->name, v->info.rank, d[0], d[1], d[2]));
    }
    kiln_status st = kiln_build(b, m, e);
    kiln_builder_free(b);
    return st;
}

typedef struct result {
    int n_out;
    int rank[MAXO];
    int64_t dims[MAXO][8];
    int64_t n[MAXO];
    float y[MAXO][MAXN];
} result;

/* One run of context c of engine e on inputs from seed `seed` (floats in
 * [-3, 3), false / 0 for bool and integer inputs; first dims from dy);
 * false if a run step fails. */
static bool run_in(kiln_context *c, const kiln_engine *e, const dyn *dy, uint64_t seed, result *r) {
    static unsigned char in[8][MAXN * 8];
    const kiln_graph *g = e->graph;
    gb_rng_state = seed;
    bool ok = true;
    for (int i = 0; i < g->n_inputs && i < 8 && ok; i++) {
        const kiln_value *v = &g->values[g->inputs[i]];
        int64_t dims[KILN_MAX_RANK];
        memcpy(dims, v->info.dims, sizeof dims);
        if (dy->on && dy->d0[i] >= 0) dims[0] = dy->d0[i];
        int64_t n = kiln__numel(v->info.rank, dims);
        for (int64_t j = 0; j < n && j < MAXN; j++) {
            double x = 3.0 * frand();
            if (dy->special && ri(8) == 0) x = ri(3) == 0 ? NAN : ri(2) ? INFINITY : -INFINITY;
            if (v->info.dtype != KILN_DTYPE_FLOAT32) x = 0;
            kiln__store_f64(v->info.dtype, in[i], j, x);
        }
        ok = kiln_context_set_input(c, v->name, v->info.dtype, v->info.rank, dims, in[i]) == KILN_OK;
    }
    ok = ok && kiln_context_run(c) == KILN_OK;
    r->n_out = g->n_outputs < MAXO ? g->n_outputs : MAXO;
    for (int k = 0; ok && k < r->n_out; k++) {
        const void *data = NULL;
        kiln_dtype t;
        ok = kiln_context_get_output(c, g->values[g->outputs[k]].name, &t, &r->rank[k], r->dims[k], &data) == KILN_OK;
        if (!ok) break;
        r->n[k] = kiln__numel(r->rank[k], r->dims[k]);
        for (int64_t j = 0; data && j < r->n[k] && j < MAXN; j++) r->y[k][j] = (float)kiln__load_f64(t, data, j);
    }
    return ok;
}

/* run_in on a new context of e, with layer callback cb (NULL: none). */
static bool run_cb(const kiln_engine *e, const dyn *dy, uint64_t seed, result *r, kiln_layer_callback cb,
                   void *user) {
    kiln_context *c = NULL;
    if (kiln_context_create(e, &c) != KILN_OK) return false;
    if (cb && kiln_context_set_layer_callback(c, cb, user) != KILN_OK) {
        kiln_context_free(c);
        return false;
    }
    bool ok = run_in(c, e, dy, seed, r);
    kiln_context_free(c);
    return ok;
}

static bool run(const kiln_engine *e, const dyn *dy, uint64_t seed, result *r) {
    return run_cb(e, dy, seed, r, NULL, NULL);
}

/* Where a graph has a LayerNormalization (or kiln.AddLayerNorm) the
 * unoptimized plan computes as ReduceMean, Sub, ...: that plan rounds each
 * row's mean to float32 before x - mean, as ONNX Runtime's and PyTorch's
 * float32 LayerNorms do, and kiln's fused float32 row does too; a fused
 * layer whose gamma or beta broadcasts (or of another dtype) runs the
 * generic row, which keeps the mean in double. Where a row's values nearly
 * cancel (|x - mean| << |mean|: two close values), the mean's rounding,
 * at most about D u mean|x| (u = 2^-24, D the row's length: the float32
 * sum), is a large part of x - mean, and the two plans differ by up to
 * |gamma| D u mean|x| / sqrt(var + eps) (the fused one nearer the exact
 * value; seeds 118603 and 247558 with KILN_DIFF_NANS=2 and
 * KILN_DIFF_SEED=100000: 1.0e-5 and 1.3e-5 relative, bound 3.2e-5). That
 * bound over the rows each such layer of e normalizes, twice over, is
 * the slack the comparison allows on top of 1e-5 (ln_slack). */
typedef struct slack_run {
    const kiln_engine *e;
    double slack;
} slack_run;

static int ln_slack_cb(kiln_context *c, int layer, kiln_layer_event ev, void *user) {
    slack_run *sr = user;
    double *slack = &sr->slack;
    const kiln_engine *e = sr->e;
    if (ev != KILN_LAYER_BEFORE) return 0;
    kiln_layer_info li;
    if (kiln_engine_layer_info(e, layer, &li) != KILN_OK) return 0;
    bool add = !strcmp(li.op, "AddLayerNorm");
    if (!add && strcmp(li.op, "LayerNormalization")) return 0;
    const kiln_node *n = &e->graph->nodes[layer];
    const kiln_ln_attrs *at = n->attrs; /* (kiln_add_ln_attrs starts alike: axis, epsilon) */
    kiln_tensor_view x, r = {0}, s;
    if (kiln_context_tensor(c, kiln_engine_layer_input(e, layer, 0), &x) != KILN_OK ||
        (add && kiln_context_tensor(c, kiln_engine_layer_input(e, layer, 1), &r) != KILN_OK) ||
        kiln_context_tensor(c, kiln_engine_layer_input(e, layer, add ? 2 : 1), &s) != KILN_OK ||
        x.dtype != KILN_DTYPE_FLOAT32 || s.dtype != KILN_DTYPE_FLOAT32 || (add && r.dtype != KILN_DTYPE_FLOAT32)) {
        *slack = INFINITY; /* not understood: no slack taken for granted */
        return 0;
    }
    int axis = at->axis < 0 ? at->axis + x.rank : at->axis;
    int64_t D = kiln__numel(x.rank - axis, x.dims + axis), n_all = kiln__numel(x.rank, x.dims);
    int64_t n_r = add ? kiln__numel(r.rank, r.dims) : 1;
    double g = 0;
    for (int64_t i = 0; i < kiln__numel(s.rank, s.dims); i++) g = fmax(g, fabs(((const float *)s.data)[i]));
    const float *xp = x.data, *rp = r.data;
    for (int64_t row = 0; D > 0 && n_r > 0 && row < n_all / D; row++) {
        double sum = 0, sa = 0, ss = 0;
        for (int64_t i = 0; i < D; i++) {
            int64_t k = row * D + i;
            float v = add ? xp[k] + rp[k % n_r] : xp[k];
            sum += v, sa += fabs(v);
        }
        double m = sum / (double)D;
        for (int64_t i = 0; i < D; i++) {
            int64_t k = row * D + i;
            double d = (add ? xp[k] + rp[k % n_r] : xp[k]) - m;
            ss += d * d;
        }
        double b = 2.0 * g * (double)D * 0x1p-24 * (sa / (double)D) / sqrt(ss / (double)D + at->epsilon);
        if (isfinite(b) && b > *slack) *slack = b;
    }
    return 0;
}

static double ln_slack(const kiln_engine *e, const dyn *dy, uint64_t seed) {
    static result scratch;
    slack_run sr = {.e = e};
    if (!count_op(e, KILN_OP_LayerNormalization) && !count_op(e, KILN_OP_AddLayerNorm)) return 0;
    if (!run_cb(e, dy, seed, &scratch, ln_slack_cb, &sr)) return 0;
    return sr.slack;
}

/* ---- the grammar ----------------------------------------------------------- */

typedef struct gen {
    kiln_graph *g;
    int k; /* names */
    char nm[32][64]; /* a ring: one call's arguments may hold several names at once, in
                        whatever order the compiler evaluates them */
    bool *must_stay;  /* set by a Dropout whose training_mode is a graph input */
    int multi_slices; /* multi-axis Slices made */
} gen;

static const char *nm(gen *G, const char *op) {
    char *b = G->nm[G->k % 32];
    snprintf(b, sizeof G->nm[0], "%s%d", op, G->k++);
    return b;
}

static const kiln_tinfo *ti(gen *G, int v) { return &G->g->values[v].info; }

/* Another reader of v or v a graph output, sometimes. */
static void maybe_leak(gen *G, int v) {
    int r = ri(6);
    if (r == 0) mark_output(G->g, v);
    else if (r == 1) mark_output(G->g, add_unary(G->g, KILN_OP_Neg, nm(G, "neg"), v, NULL));
}

static int64_t rand_index(int64_t d) {
    switch (ri(6)) {
    case 0: return -1 - ri((int)d + 2); /* negative, maybe out of range */
    case 1: return d + ri(3);           /* out of range */
    case 2: return INT64_MAX;
    case 3: return INT64_MIN;
    default: return ri((int)d + 1);
    }
}

static int slice(gen *G, int x, int64_t start, int64_t end, int64_t axis, int64_t step, int form) {
    kiln_graph *g = G->g;
    bool i32 = ri(4) == 0;
    int in[5] = {x, add_index(g, nm(G, "st"), start, i32), add_index(g, nm(G, "en"), end, i32), -1, -1};
    int n = 3;
    if (form > 0 || axis != 0) in[n++] = add_index(g, nm(G, "ax"), axis, i32);
    if (form > 1 || step != 1) in[n++] = add_index(g, nm(G, "sp"), step, i32);
    return add_node(g, KILN_OP_Slice, nm(G, "slice"), n, in, NULL);
}

/* Slices of x along one axis, concatenated: a roll, or random ranges. */
static int gen_concat(gen *G, int x) {
    const kiln_tinfo *t = ti(G, x);
    int r = t->rank, a = ri(r);
    int64_t d = t->dims[a], sa = ri(2) ? a - r : a;
    int ca = ri(4) ? a : ri(r);
    int pieces[4], np = 0;
    if (ri(2)) { /* roll: x[s:], x[:s] (or three pieces) */
        int64_t s = 1 + ri((int)d - 1 > 0 ? (int)d - 1 : 1);
        int64_t s_neg = s - d;
        pieces[np++] = slice(G, x, ri(2) ? s : s_neg, ri(2) ? INT64_MAX : d + ri(3), sa, 1, ri(3));
        if (ri(3) == 0 && s > 1) {
            pieces[np++] = slice(G, x, 0, 1, sa, 1, ri(3));
            pieces[np++] = slice(G, x, 1, ri(2) ? s : s_neg, sa, 1, ri(3));
        } else {
            pieces[np++] = slice(G, x, ri(2) ? 0 : -d - ri(3), ri(2) ? s : s_neg, sa, 1, ri(3));
        }
        if (ri(4) == 0) { /* the other order */
            int p = pieces[0];
            pieces[0] = pieces[np - 1];
            pieces[np - 1] = p;
        }
    } else {
        np = 2 + ri(2);
        for (int i = 0; i < np; i++) {
            int64_t step = ri(4) ? 1 : ri(2) ? -1 : 2;
            if (ri(5) == 0) step = -2;
            pieces[i] = slice(G, x, rand_index(d), rand_index(d), sa, step, ri(3));
        }
    }
    int twist = ri(8);
    if (twist == 0) pieces[np - 1] = pieces[0]; /* one piece twice */
    if (twist == 1) {                           /* a piece of another value of x's shape */
        int x2 = add_unary(G->g, KILN_OP_Neg, nm(G, "neg"), x, NULL);
        int64_t s = 1;
        pieces[np - 1] = slice(G, x2, s, INT64_MAX, sa, 1, ri(3));
        pieces[0] = slice(G, x, 0, s, sa, 1, ri(3));
    }
    if (kiln__graph_infer(G->g) != KILN_OK) return -1;
    for (int i = 0; i < np; i++) maybe_leak(G, pieces[i]);
    kiln_axis_attrs aa = {.axis = ri(2) ? ca - r : ca};
    return add_node(G->g, KILN_OP_Concat, nm(G, "concat"), np, pieces, &aa);
}

static int gen_pad(gen *G, int x) {
    kiln_graph *g = G->g;
    const kiln_tinfo *t = ti(G, x);
    int64_t pads[16];
    bool zero = ri(2);
    for (int i = 0; i < 2 * t->rank; i++) pads[i] = zero ? 0 : ri(4) - 1;
    if (!zero && ri(3) == 0 && t->rank > 0) { /* shifted: same shape */
        pads[0] = 1;
        pads[t->rank] = -1;
    }
    kiln_pad_attrs pa = {.mode = ri(3)};
    int in[3] = {x, add_i64(g, nm(G, "pads"), 2 * t->rank, pads), -1};
    int n = 2;
    if (ri(2)) in[n++] = add_scalar(g, nm(G, "cval"), ri(2) ? 0.0f : 1.5f);
    return add_node(g, KILN_OP_Pad, nm(G, "pad"), n, in, &pa);
}

static int gen_dropout(gen *G, int x, bool *must_stay) {
    kiln_graph *g = G->g;
    int in[3] = {x, -1, -1}, n = 1;
    float ratio = ri(2) ? 0.5f : 0.0f;
    int r = ri(5);
    if (r >= 1) in[n++] = add_scalar(g, nm(G, "ratio"), ratio);
    if (r == 2) in[n++] = add_bool(g, nm(G, "train"), false);
    if (r == 3) in[n++] = add_bool(g, nm(G, "train"), ratio == 0.0f);
    if (r == 4) {
        char name[64];
        snprintf(name, sizeof name, "training%d", G->k++);
        int v = add_val(g, name);
        g->values[v].info.dtype = KILN_DTYPE_BOOL;
        g->values[v].info.rank = 0;
        g->values[v].flags |= KILN_VALUE_INPUT;
        if (kiln__grow((void **)&g->inputs, &g->cap_inputs, g->n_inputs + 1, sizeof(int)) != KILN_OK) abort();
        g->inputs[g->n_inputs++] = v;
        in[n++] = v;
        if (ratio != 0.0f) *must_stay = true;
    }
    kiln_dropout_attrs da = {0};
    return add_node(g, KILN_OP_Dropout, nm(G, "dropout"), n, in, &da);
}

static void rand_perm(int r, int32_t *p) {
    for (int i = 0; i < r; i++) p[i] = i;
    for (int i = r - 1; i > 0; i--) {
        int j = ri(i + 1), t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
}

static int transpose(gen *G, int x, const int32_t *perm, int r) {
    kiln_transpose_attrs ta = {.n_perm = r};
    memcpy(ta.perm, perm, sizeof(int32_t) * (size_t)r);
    bool reverse = true;
    for (int i = 0; i < r; i++) reverse = reverse && perm[i] == r - 1 - i;
    if (reverse && ri(2)) ta.n_perm = 0; /* perm absent: the dims reversed */
    return add_unary(G->g, KILN_OP_Transpose, nm(G, "tr"), x, &ta);
}

static int gen_transposes(gen *G, int x) {
    int r = ti(G, x)->rank;
    int32_t p1[8], p2[8];
    rand_perm(r, p1);
    int t = transpose(G, x, p1, r);
    maybe_leak(G, t);
    if (ri(2)) {
        for (int i = 0; i < r; i++) p2[p1[i]] = i; /* the inverse */
    } else {
        rand_perm(r, p2);
    }
    int y = transpose(G, t, p2, r);
    if (ri(3) == 0) {
        maybe_leak(G, y);
        rand_perm(r, p1);
        y = transpose(G, y, p1, r);
    }
    return y;
}

/* A constant scale of one of the shapes a layer scale has (or nearly). */
static int scale_const(gen *G, int r, const int64_t *yd, int feat) {
    int64_t d[8];
    int sr;
    switch (ri(7)) {
    case 0: sr = 1, d[0] = yd[feat]; break;                         /* [N] (right only if feat is last) */
    case 1: sr = r; for (int i = 0; i < r; i++) d[i] = i == feat ? yd[i] : 1; break; /* [1,N,1,..] */
    case 2: sr = r - feat; for (int i = 0; i < sr; i++) d[i] = i == 0 ? yd[feat] : 1; break; /* [N,1,1] */
    case 3: sr = 1, d[0] = 1; break;
    case 4: sr = 0; break;
    case 5: sr = r; for (int i = 0; i < r; i++) d[i] = yd[i]; break; /* full */
    default: { /* the wrong axis */
        int a = ri(r);
        sr = r - a;
        for (int i = 0; i < sr; i++) d[i] = i == 0 ? yd[a] : 1;
        break;
    }
    }
    return add_const(G->g, nm(G, "scale"), sr, d, -2.0f, 2.0f);
}

/* MatMul/Gemm [+ bias] [-> Transpose] -> Mul(scale) [-> Add residual]. */
static int gen_linear(gen *G, int *extra_in) {
    kiln_graph *g = G->g;
    int64_t M = 2 + ri(3), K = 2 + ri(4), N = ri(3) ? 2 + ri(4) : M;
    int y, B, pre_res = -1;
    bool gemm = ri(3) == 0;
    if (gemm) {
        kiln_gemm_attrs ga = {.alpha = ri(2) ? 1.0f : -0.5f, .beta = ri(3) ? 1.0f : ri(2) ? 0.0f : 2.0f,
                              .trans_a = ri(4) == 0, .trans_b = ri(2)};
        int64_t ad[2] = {ga.trans_a ? K : M, ga.trans_a ? M : K}, bd[2] = {ga.trans_b ? N : K, ga.trans_b ? K : N};
        int A = add_input(g, nm(G, "a"), 2, ad);
        B = add_const(g, nm(G, "W"), 2, bd, -1, 1);
        int in[3] = {A, B, -1}, n = 2;
        if (ri(3)) {
            int64_t cd[2];
            int cr;
            switch (ri(5)) {
            case 0: cr = 1, cd[0] = N; break;
            case 1: cr = 2, cd[0] = 1, cd[1] = N; break;
            case 2: cr = 2, cd[0] = M, cd[1] = N; break;
            case 3: cr = 2, cd[0] = M, cd[1] = 1; break;
            default: cr = 0; break;
            }
            in[n++] = add_const(g, nm(G, "C"), cr, cd, -1, 1);
        }
        y = add_node(g, KILN_OP_Gemm, nm(G, "gemm"), n, in, &ga);
    } else {
        int four = ri(3); /* 0: [M, K], 1: [1, M, 3, K], 2: [2, M, K] */
        int64_t ad[4] = {1, M, 3, K}, bd[2] = {K, N};
        if (four == 0) ad[0] = M, ad[1] = K;
        if (four == 2) ad[0] = 2, ad[1] = M, ad[2] = K;
        if (four == 1 && ri(2)) { /* a residual made [N, C, H, W] before the layer, as ConvNeXt's */
            int64_t rd[4] = {1, M, 3, N};
            int32_t p[4] = {0, 3, 1, 2};
            pre_res = transpose(G, add_input(g, nm(G, "r"), 4, rd), p, 4);
        }
        int ar = four == 1 ? 4 : four == 2 ? 3 : 2;
        int A = add_input(g, nm(G, "a"), ar, ad);
        B = add_const(g, nm(G, "W"), 2, bd, -1, 1);
        y = add_binary(g, KILN_OP_MatMul, nm(G, "matmul"), A, B);
        if (ri(4) == 0) { /* the weights shared */
            int A2 = add_input(g, nm(G, "a"), ar, ad);
            mark_output(g, add_binary(g, KILN_OP_MatMul, nm(G, "matmul"), A2, B));
        }
    }
    if (kiln__graph_infer(g) != KILN_OK) return -1;
    int r = ti(G, y)->rank;
    if (ri(2)) { /* bias */
        int64_t bd[8];
        int br = ri(2) ? 1 : r;
        for (int i = 0; i < br; i++) bd[i] = i == br - 1 ? N : 1;
        if (ri(5) == 0) bd[0] = ti(G, y)->dims[0], br = br == 1 ? 2 : br, bd[br - 1] = br == 2 ? N : bd[br - 1];
        int b = add_const(g, nm(G, "bias"), br, bd, -1, 1);
        y = ri(2) ? add_binary(g, KILN_OP_Add, nm(G, "badd"), y, b) : add_binary(g, KILN_OP_Add, nm(G, "badd"), b, y);
    }
    if (kiln__graph_infer(g) != KILN_OK) return -1;
    maybe_leak(G, y);
    int feat = r - 1;
    int tr = -1;
    if (ri(2)) { /* through a Transpose: ConvNeXt's (0,3,1,2) or another */
        int32_t p[8];
        if (r == 4 && ri(2)) p[0] = 0, p[1] = 3, p[2] = 1, p[3] = 2;
        else rand_perm(r, p);
        for (int i = 0; i < r; i++)
            if (p[i] == r - 1) feat = i;
        y = tr = transpose(G, y, p, r);
        if (kiln__graph_infer(g) != KILN_OK) return -1;
        maybe_leak(G, y);
    }
    int64_t yd[8];
    memcpy(yd, ti(G, y)->dims, sizeof(int64_t) * (size_t)r);
    int s = scale_const(G, r, yd, feat);
    if (ri(6) == 0) mark_output(g, add_binary(g, KILN_OP_Mul, nm(G, "sread"), s, s));
    y = ri(2) ? add_binary(g, KILN_OP_Mul, nm(G, "lscale"), y, s) : add_binary(g, KILN_OP_Mul, nm(G, "lscale"), s, y);
    if (kiln__graph_infer(g) != KILN_OK) return -1;
    if (ri(4) == 0) { /* a second scale (or a bias) after the first */
        int s2 = scale_const(G, r, yd, feat);
        y = add_binary(g, ri(3) ? KILN_OP_Mul : KILN_OP_Add, nm(G, "lscale"), y, s2);
        if (kiln__graph_infer(g) != KILN_OK) return -1;
    }
    if (ri(2)) { /* residual */
        const kiln_tinfo *yi = ti(G, y);
        int64_t d[8];
        int rr = yi->rank;
        memcpy(d, yi->dims, sizeof(int64_t) * (size_t)rr);
        int res;
        if (pre_res >= 0 && tr >= 0 && ri(4)) {
            res = pre_res;
        } else if (rr == 4 && tr >= 0 && ri(2)) { /* made by a Transpose(0,3,1,2) of [N,H,W,C] */
            int64_t nd[4] = {d[0], d[2], d[3], d[1]};
            int32_t p[4] = {0, 3, 1, 2};
            res = transpose(G, add_input(g, nm(G, "r"), 4, nd), p, 4);
            maybe_leak(G, res);
        } else {
            res = add_input(g, nm(G, "r"), rr, d);
        }
        y = ri(2) ? add_binary(g, KILN_OP_Add, nm(G, "radd"), y, res) : add_binary(g, KILN_OP_Add, nm(G, "radd"), res, y);
        if (ri(3) == 0) y = add_unary(g, KILN_OP_Relu, nm(G, "relu"), y, NULL);
    }
    (void)extra_in;
    return y;
}

/* Conv (1-D or 2-D; groups, depthwise, strides, dilations, pads or
 * auto_pad; bias or not) [-> BatchNormalization] [-> Add residual (same
 * shape, or a broadcast that must not fuse)] [-> activation], the
 * intermediates sometimes read elsewhere or graph outputs. */
static int gen_conv(gen *G) {
    kiln_graph *g = G->g;
    int ns = 1 + ri(2), r = ns + 2;
    int64_t grp = ri(3) == 0 ? 1 + ri(3) : 1;
    int64_t C = grp * (1 + ri(3)), M = grp * (1 + ri(3));
    if (ri(4) == 0) grp = C = M = 1 + ri(4); /* depthwise */
    kiln_conv_attrs ca;
    memset(&ca, 0, sizeof ca);
    ca.group = (int32_t)grp;
    int64_t xd[4] = {1 + ri(2), C, 0, 0}, wd[4] = {M, C / grp, 0, 0};
    for (int i = 0; i < ns; i++) {
        xd[2 + i] = 2 + ri(5);
        wd[2 + i] = 1 + ri(3);
    }
    if (ri(2)) {
        ca.n_strides = ns;
        for (int i = 0; i < ns; i++) ca.strides[i] = 1 + ri(2);
    }
    if (ri(3) == 0) {
        ca.n_dilations = ns;
        for (int i = 0; i < ns; i++) ca.dilations[i] = 1 + ri(2);
    }
    int pm = ri(5);
    if (pm <= 1) {
        ca.n_pads = 2 * ns;
        for (int i = 0; i < 2 * ns; i++) ca.pads[i] = ri(3);
    } else if (pm == 2) {
        ca.auto_pad = PAD_SAME_UPPER;
    } else if (pm == 3) {
        ca.auto_pad = ri(2) ? PAD_SAME_LOWER : PAD_VALID;
    }
    if (ri(2)) {
        ca.n_kernel = ns;
        for (int i = 0; i < ns; i++) ca.kernel[i] = wd[2 + i];
    }
    int x = add_input(g, nm(G, "x"), r, xd);
    int in[3] = {x, add_const(g, nm(G, "W"), r, wd, -1, 1), -1}, n = 2;
    int64_t md[4] = {M};
    if (ri(3)) in[n++] = add_const(g, nm(G, "B"), 1, md, -1, 1);
    int y = add_node(g, KILN_OP_Conv, nm(G, "conv"), n, in, &ca);
    if (kiln__graph_infer(g) != KILN_OK) return -1;
    if (ri(2)) {
        maybe_leak(G, y);
        static const float eps[4] = {1e-5f, 1e-3f, 0.1f, 0.0f};
        kiln_bn_attrs ba = {.epsilon = eps[ri(4)], .spatial = 1};
        int bi[5] = {y, add_const(g, nm(G, "bs"), 1, md, -2, 2), add_const(g, nm(G, "bb"), 1, md, -1, 1),
                     add_const(g, nm(G, "bm"), 1, md, -1, 1), add_const(g, nm(G, "bv"), 1, md, 0.05f, 3)};
        y = add_node(g, KILN_OP_BatchNormalization, nm(G, "bn"), 5, bi, &ba);
        if (kiln__graph_infer(g) != KILN_OK) return -1;
    }
    if (ri(2)) {
        maybe_leak(G, y);
        const kiln_tinfo *yi = ti(G, y);
        int64_t d[4];
        memcpy(d, yi->dims, sizeof d);
        int res;
        switch (ri(5)) {
        case 0: /* [1, M, 1..]: a broadcast */
            d[0] = 1;
            for (int i = 2; i < r; i++) d[i] = 1;
            res = add_const(g, nm(G, "rb"), r, d, -1, 1);
            break;
        case 1: /* [2, M, ..] over a batch of 1: the output grows */
            if (d[0] != 1) return -1;
            d[0] = 2;
            res = add_input(g, nm(G, "r"), r, d);
            break;
        case 2: res = y; break; /* y + y */
        default: res = add_input(g, nm(G, "r"), r, d); break;
        }
        y = ri(2) ? add_binary(g, KILN_OP_Add, nm(G, "radd"), y, res) : add_binary(g, KILN_OP_Add, nm(G, "radd"), res, y);
        if (kiln__graph_infer(g) != KILN_OK) return -1;
    }
    if (ri(5)) {
        maybe_leak(G, y);
        kiln_ew_act_attrs aa = {.alpha = 0.5f * frand() + 0.3f, .beta = 0.5f + 0.3f * frand()};
        switch (ri(8)) {
        case 0: y = add_unary(g, KILN_OP_Relu, nm(G, "relu"), y, NULL); break;
        case 1: {
            int ci[3] = {y, -1, -1}, cn = 1 + ri(3);
            if (cn > 1 && ri(4)) ci[1] = add_scalar(g, nm(G, "lo"), ri(2) ? 0.0f : -1.0f + frand());
            if (cn > 2) ci[2] = add_scalar(g, nm(G, "hi"), ri(2) ? 6.0f : 1.0f + frand());
            if (ri(8) == 0 && cn > 1) ci[1] = add_const(g, nm(G, "lo"), 1, (int64_t[]){1}, -1, 0);
            y = add_node(g, KILN_OP_Clip, nm(G, "clip"), cn, ci, NULL);
            break;
        }
        case 2: y = add_unary(g, KILN_OP_LeakyRelu, nm(G, "lrelu"), y, &aa); break;
        case 3: y = add_unary(g, KILN_OP_Sigmoid, nm(G, "sig"), y, NULL); break;
        case 4: y = add_unary(g, KILN_OP_HardSwish, nm(G, "hsw"), y, NULL); break;
        case 5: y = add_unary(g, KILN_OP_HardSigmoid, nm(G, "hsig"), y, &aa); break;
        default: { /* SiLU, the Mul's operands either way (or not a SiLU) */
            int sg = add_unary(g, KILN_OP_Sigmoid, nm(G, "sig"), y, NULL);
            if (ri(8) == 0) maybe_leak(G, sg);
            int other = ri(10) ? y : sg;
            y = ri(2) ? add_binary(g, KILN_OP_Mul, nm(G, "silu"), other, sg) : add_binary(g, KILN_OP_Mul, nm(G, "silu"), sg, other);
            break;
        }
        }
    }
    return y;
}

/* An operand for an elementwise op over x (shape xd, rank r): a scalar
 * constant, a constant or an input broadcast along some axes (or lower
 * rank, or growing a dim of 1), an earlier value, or x. */
static int pw_operand(gen *G, int x, int r, const int64_t *xd, const int *prev, int n_prev) {
    kiln_graph *g = G->g;
    int64_t d[4];
    int k = ri(8);
    if (k == 0) {
        static const float sc[6] = {2.0f, 0.5f, -1.0f, 0.0f, 3.0f, 1e-3f};
        return add_scalar(g, nm(G, "s"), sc[ri(6)]);
    }
    if (k == 1 && n_prev > 0) return prev[ri(n_prev)];
    if (k == 2) return x;
    int dr = r - ri(r + 1);
    for (int i = 0; i < dr; i++) {
        int64_t full = xd[r - dr + i];
        d[i] = ri(2) ? full : 1;
        if (full == 1 && ri(6) == 0) d[i] = 2; /* the output grows */
    }
    return ri(2) ? add_const(g, nm(G, "c"), dr, d, -2, 2) : add_input(g, nm(G, "p"), dr, d);
}

/* A chain of 2-6 elementwise ops (unary, binary with broadcasts, variadic
 * Min/Max/Sum/Mean, Where of a comparison, Clip, Casts through float16,
 * bool or int32), intermediates sometimes read elsewhere or outputs. */
static int gen_pointwise(gen *G, int x) {
    kiln_graph *g = G->g;
    static const int un[] = {KILN_OP_Neg, KILN_OP_Abs, KILN_OP_Sqrt, KILN_OP_Exp, KILN_OP_Tanh, KILN_OP_Erf,
                             KILN_OP_Sigmoid, KILN_OP_Relu, KILN_OP_Log, KILN_OP_Reciprocal, KILN_OP_Floor,
                             KILN_OP_Softplus, KILN_OP_HardSwish, KILN_OP_Sign};
    static const int bin[] = {KILN_OP_Add, KILN_OP_Sub, KILN_OP_Mul, KILN_OP_Div, KILN_OP_Pow, KILN_OP_PRelu};
    static const int var[] = {KILN_OP_Min, KILN_OP_Max, KILN_OP_Sum, KILN_OP_Mean};
    static const int cmp[] = {KILN_OP_Greater, KILN_OP_Less, KILN_OP_Equal, KILN_OP_GreaterOrEqual};
    int prev[8], n_prev = 0, len = 2 + ri(5);
    for (int s = 0; s < len; s++) {
        if (kiln__graph_infer(g) != KILN_OK) return -1;
        const kiln_tinfo *t = ti(G, x);
        int r = t->rank;
        int64_t xd[8];
        memcpy(xd, t->dims, sizeof(int64_t) * (size_t)(r > 0 ? r : 1));
        if (r > 4) return -1;
        if (s > 0) maybe_leak(G, x);
        prev[n_prev++ & 7] = x;
        if (n_prev > 8) n_prev = 8;
        int y;
        switch (ri(8)) {
        case 0:
        case 1: y = add_unary(g, un[ri((int)(sizeof un / sizeof un[0]))], nm(G, "u"), x, NULL); break;
        case 2:
        case 3: {
            int op = bin[ri((int)(sizeof bin / sizeof bin[0]))];
            int o = pw_operand(G, x, r, xd, prev, n_prev);
            y = ri(2) || op == KILN_OP_PRelu ? add_binary(g, op, nm(G, "b"), x, o) : add_binary(g, op, nm(G, "b"), o, x);
            break;
        }
        case 4: {
            int in[3] = {x, pw_operand(G, x, r, xd, prev, n_prev), pw_operand(G, x, r, xd, prev, n_prev)};
            int n = 1 + ri(3);
            if (ri(2)) {
                int t0 = in[0];
                in[0] = in[n - 1];
                in[n - 1] = t0;
            }
            y = add_node(g, var[ri(4)], nm(G, "v"), n, in, NULL);
            break;
        }
        case 5: { /* Where(x cmp o, x or o, o2) */
            int o = pw_operand(G, x, r, xd, prev, n_prev);
            int c = add_binary(g, cmp[ri(4)], nm(G, "cmp"), x, ri(4) ? o : add_scalar(g, nm(G, "s"), 0.0f));
            if (ri(6) == 0) c = add_unary(g, KILN_OP_Not, nm(G, "not"), c, NULL);
            int a = ri(2) ? x : o, b = pw_operand(G, x, r, xd, prev, n_prev);
            int in[3] = {c, ri(2) ? a : b, ri(2) ? b : a};
            y = add_node(g, KILN_OP_Where, nm(G, "where"), 3, in, NULL);
            break;
        }
        case 6: { /* Clip with scalar constants (either absent) */
            int in[3] = {x, -1, -1}, n = 1 + ri(3);
            if (n > 1 && ri(4)) in[1] = add_scalar(g, nm(G, "lo"), -1.0f + frand());
            if (n > 2) in[2] = add_scalar(g, nm(G, "hi"), ri(4) ? 1.0f + frand() : -2.0f);
            y = add_node(g, KILN_OP_Clip, nm(G, "clip"), n, in, NULL);
            break;
        }
        default: { /* Casts: through float16, bool, int32 or to float32 itself */
            static const kiln_dtype via[4] = {KILN_DTYPE_FLOAT16, KILN_DTYPE_BOOL, KILN_DTYPE_INT32, KILN_DTYPE_FLOAT32};
            kiln_ew_cast_attrs ca = {.to = via[ri(4)]}, cb = {.to = KILN_DTYPE_FLOAT32};
            int c = add_unary(g, KILN_OP_Cast, nm(G, "cast"), x, &ca);
            if (ri(5) == 0) maybe_leak(G, c);
            y = add_unary(g, KILN_OP_Cast, nm(G, "cast"), c, &cb);
            break;
        }
        }
        x = y;
    }
    return x;
}

static int reduce_mean(gen *G, int x, int n_axes, const int64_t *axes) {
    kiln_reduce_attrs ra = {.keepdims = 1};
    int in[2] = {x, add_i64(G->g, nm(G, "axes"), n_axes, axes)};
    return add_node(G->g, KILN_OP_ReduceMean, nm(G, "rmean"), 2, in, &ra);
}

/* a op b or b op a */
static int either(gen *G, int op, const char *name, int a, int b) {
    return ri(2) ? add_binary(G->g, op, nm(G, name), a, b) : add_binary(G->g, op, nm(G, name), b, a);
}

/* A constant near `want`, or (one time in `miss`) a wrong one. */
static int near_const(gen *G, float want, int miss) {
    return add_scalar(G->g, nm(G, "k"), ri(miss) ? want : want * (1.0f + 0.01f * (float)(1 + ri(3))));
}

/* A scale or shift over the last k axes of dims xd (rank r): [D], [1], [],
 * the last k dims, some of them 1, or (rarely) a shape reaching outside
 * the normalized axes. */
static int norm_param(gen *G, int r, const int64_t *xd, int k) {
    int64_t d[8];
    int pr;
    switch (ri(6)) {
    case 0: pr = 1, d[0] = 1; break;
    case 1: pr = 0; break;
    case 2: pr = k; for (int i = 0; i < k; i++) d[i] = ri(2) ? xd[r - k + i] : 1; break;
    case 3: pr = k + 1 <= r ? k + 1 : k; for (int i = 0; i < pr; i++) d[i] = xd[r - pr + i]; break;
    default: pr = k; for (int i = 0; i < k; i++) d[i] = xd[r - k + i]; break;
    }
    return add_const(G->g, nm(G, "gb"), pr, d, -2, 2);
}

/* Decomposed LayerNorm, RMSNorm or GELU (erf or tanh) over an input (after
 * a residual Add, sometimes), with near misses: a wrong constant, a
 * different or non-last axis, intermediates read elsewhere. */
static int gen_norm(gen *G) {
    kiln_graph *g = G->g;
    int r = 2 + ri(3);
    int64_t xd[4];
    for (int i = 0; i < r; i++) xd[i] = 1 + ri(4);
    xd[r - 1] = 2 + ri(6);
    int x = add_input(g, nm(G, "x"), r, xd);
    if (ri(3) == 0) x = either(G, KILN_OP_Add, "res", x, add_input(g, nm(G, "r"), r, xd));
    int leak = ri(12); /* which intermediate is read elsewhere, if any */
#define LEAK(v) do { if (leak-- == 0) maybe_leak(G, v); } while (0)
    switch (ri(4)) {
    case 0: { /* LayerNorm */
        int k = r >= 3 && ri(3) == 0 ? 2 : 1;
        int64_t ax[2], ax2[2];
        for (int i = 0; i < k; i++) ax[i] = ri(2) ? r - k + i : i - k;
        memcpy(ax2, ax, sizeof ax);
        if (ri(8) == 0) ax[0] = ri(r - k + 1) - 1 + 0 * ax[0]; /* maybe not the last axes */
        if (ri(10) == 0) ax2[k - 1] = ri(r);
        if (ax[0] < 0 && ax[0] < -r) ax[0] = 0;
        int mean = reduce_mean(G, x, k, ax);
        LEAK(mean);
        int d = add_binary(g, KILN_OP_Sub, nm(G, "sub"), x, mean);
        LEAK(d);
        int sq = ri(10) ? add_binary(g, KILN_OP_Pow, nm(G, "pow"), d, near_const(G, 2.0f, 10))
                        : add_binary(g, KILN_OP_Mul, nm(G, "sq"), d, d);
        LEAK(sq);
        int var = reduce_mean(G, sq, k, ax2);
        LEAK(var);
        static const float eps[4] = {1e-5f, 1e-12f, 0.1f, 1.0f};
        int ve = either(G, KILN_OP_Add, "eps", var, add_scalar(g, nm(G, "e"), eps[ri(4)]));
        LEAK(ve);
        int sd = add_unary(g, KILN_OP_Sqrt, nm(G, "sqrt"), ve, NULL);
        LEAK(sd);
        x = add_binary(g, KILN_OP_Div, nm(G, "div"), d, sd);
        if (ri(5)) {
            LEAK(x);
            x = either(G, KILN_OP_Mul, "gamma", x, norm_param(G, r, xd, k));
            if (ri(4)) {
                LEAK(x);
                x = either(G, KILN_OP_Add, "beta", x, norm_param(G, r, xd, k));
            }
        }
        break;
    }
    case 1: { /* RMSNorm */
        if (ri(5) == 0) {
            kiln_ew_cast_attrs ca = {.to = KILN_DTYPE_FLOAT32};
            x = add_unary(g, KILN_OP_Cast, nm(G, "cast"), x, &ca);
        }
        int sq = ri(2) ? add_binary(g, KILN_OP_Pow, nm(G, "pow"), x, near_const(G, 2.0f, 12))
                       : add_binary(g, KILN_OP_Mul, nm(G, "sq"), x, x);
        LEAK(sq);
        int64_t ax[1] = {ri(8) ? (ri(2) ? -1 : r - 1) : ri(r - 1)};
        int m = reduce_mean(G, sq, 1, ax);
        LEAK(m);
        int a = either(G, KILN_OP_Add, "eps", m, add_scalar(g, nm(G, "e"), ri(2) ? 1e-6f : 0.01f));
        LEAK(a);
        int y;
        switch (ri(5)) {
        case 0: y = either(G, KILN_OP_Mul, "nrm", x, add_binary(g, KILN_OP_Pow, nm(G, "rsq"), a, near_const(G, -0.5f, 12))); break;
        case 1: {
            int s = add_unary(g, KILN_OP_Sqrt, nm(G, "sqrt"), a, NULL);
            LEAK(s);
            y = either(G, KILN_OP_Mul, "nrm", x, add_unary(g, KILN_OP_Reciprocal, nm(G, "recip"), s, NULL));
            break;
        }
        case 2: {
            int s = add_unary(g, KILN_OP_Sqrt, nm(G, "sqrt"), a, NULL);
            y = either(G, KILN_OP_Mul, "nrm", x, add_binary(g, KILN_OP_Div, nm(G, "inv"), near_const(G, 1.0f, 12), s));
            break;
        }
        case 3:
            y = add_binary(g, KILN_OP_Div, nm(G, "nrm"), x, add_binary(g, KILN_OP_Pow, nm(G, "sqrt"), a, near_const(G, 0.5f, 12)));
            break;
        default: y = add_binary(g, KILN_OP_Div, nm(G, "nrm"), x, add_unary(g, KILN_OP_Sqrt, nm(G, "sqrt"), a, NULL)); break;
        }
        LEAK(y);
        int64_t wd[1] = {ri(6) ? xd[r - 1] : 1};
        x = either(G, KILN_OP_Mul, "w", y, ri(8) ? add_const(g, nm(G, "w"), 1, wd, -2, 2) : add_scalar(g, nm(G, "w"), 1.5f));
        break;
    }
    default: { /* GELU: erf or tanh form, the three orders of the tail */
        int f;
        if (ri(2)) {
            int t = ri(2) ? add_binary(g, KILN_OP_Div, nm(G, "div"), x, near_const(G, (float)M_SQRT2, 12))
                          : either(G, KILN_OP_Mul, "mul", x, near_const(G, (float)M_SQRT1_2, 12));
            LEAK(t);
            f = add_unary(g, KILN_OP_Erf, nm(G, "erf"), t, NULL);
        } else {
            int cube = ri(2) ? add_binary(g, KILN_OP_Pow, nm(G, "pow"), x, near_const(G, 3.0f, 12))
                             : add_binary(g, KILN_OP_Mul, nm(G, "cube"), add_binary(g, KILN_OP_Mul, nm(G, "sq"), x, x), x);
            LEAK(cube);
            int mc = either(G, KILN_OP_Mul, "mc", cube, near_const(G, 0.044715f, 12));
            int in = either(G, KILN_OP_Add, "inner", x, mc);
            LEAK(in);
            int u = either(G, KILN_OP_Mul, "u", in, near_const(G, 0.7978845608f, 12));
            f = add_unary(g, KILN_OP_Tanh, nm(G, "tanh"), u, NULL);
        }
        LEAK(f);
        int a = either(G, KILN_OP_Add, "one", f, near_const(G, 1.0f, 12));
        LEAK(a);
        switch (ri(3)) {
        case 0: x = either(G, KILN_OP_Mul, "half", either(G, KILN_OP_Mul, "mx", a, x), near_const(G, 0.5f, 12)); break;
        case 1: x = either(G, KILN_OP_Mul, "mx", either(G, KILN_OP_Mul, "half", a, near_const(G, 0.5f, 12)), x); break;
        default: x = either(G, KILN_OP_Mul, "mx", either(G, KILN_OP_Mul, "half", x, near_const(G, 0.5f, 12)), a); break;
        }
        break;
    }
    }
#undef LEAK
    return x;
}

/* GPT-2's Conv1D: x [B, S, K] -> Reshape [B*S or -1, K] -> Gemm or MatMul
 * (+ bias) -> Reshape [B, S, N] (or a shape that is not x's leading dims:
 * must not fold) [-> bias Add] [-> residual]. */
static int gen_flat_linear(gen *G) {
    kiln_graph *g = G->g;
    int64_t B = 1 + ri(3), S = 1 + ri(4), K = 2 + ri(4), N = 2 + ri(4);
    int64_t xd[3] = {B, S, K};
    int x = add_input(g, nm(G, "x"), 3, xd);
    int64_t t1[2] = {ri(2) ? B * S : -1, ri(4) ? K : -1};
    if (t1[0] < 0 && t1[1] < 0) t1[1] = K;
    kiln_reshape_attrs za = {0};
    int a = add_node(g, KILN_OP_Reshape, nm(G, "flat"), 2, (int[]){x, add_i64(g, nm(G, "shape"), 2, t1)}, &za);
    if (ri(8) == 0) maybe_leak(G, a);
    int64_t wd[2] = {K, N};
    int y;
    if (ri(2)) {
        kiln_gemm_attrs ga = {.alpha = ri(3) ? 1.0f : 0.5f, .beta = ri(3) ? 1.0f : 2.0f, .trans_b = ri(2)};
        if (ga.trans_b) wd[0] = N, wd[1] = K;
        int in[3] = {a, add_const(g, nm(G, "W"), 2, wd, -1, 1), -1}, n = 2;
        int64_t cd[1] = {N};
        if (ri(3)) in[n++] = add_const(g, nm(G, "C"), 1, cd, -1, 1);
        y = add_node(g, KILN_OP_Gemm, nm(G, "gemm"), n, in, &ga);
    } else {
        y = add_binary(g, KILN_OP_MatMul, nm(G, "matmul"), a, add_const(g, nm(G, "W"), 2, wd, -1, 1));
    }
    if (ri(8) == 0) maybe_leak(G, y);
    int64_t t2[3] = {ri(3) ? B : ri(2) ? -1 : 0, ri(3) ? S : 0, N};
    switch (ri(8)) {
    case 0: t2[0] = S, t2[1] = B; break; /* not x's leading dims (unless S == B) */
    case 1: t2[0] = B * S, t2[1] = 1; break;
    default: break;
    }
    int z = add_node(g, KILN_OP_Reshape, nm(G, "unflat"), 2, (int[]){y, add_i64(g, nm(G, "shape"), 3, t2)}, &za);
    if (kiln__graph_infer(g) != KILN_OK) return -1;
    if (ri(2)) {
        maybe_leak(G, z);
        int64_t bd[1] = {N};
        z = either(G, KILN_OP_Add, "badd", z, add_const(g, nm(G, "bias"), 1, bd, -1, 1));
    }
    if (ri(2)) {
        if (kiln__graph_infer(g) != KILN_OK) return -1;
        int64_t rd[8]; /* (a copy: adding a value may move z's) */
        int rr = ti(G, z)->rank;
        memcpy(rd, ti(G, z)->dims, sizeof(int64_t) * (size_t)rr);
        z = either(G, KILN_OP_Add, "radd", z, add_input(g, nm(G, "r"), rr, rd));
    }
    return z;
}

/* A Slice over several axes at once (distinct axes, some negative; some
 * ranges whole: an identity Slice when all are), steps 1 or others. */
static int gen_multi_slice(gen *G, int x) {
    const kiln_tinfo *t = ti(G, x);
    int r = t->rank;
    if (r < 2) return x;
    int n = 2 + ri(r - 1);
    int32_t p[8];
    rand_perm(r, p);
    int64_t st[8], en[8], ax[8], sp[8];
    bool steps = ri(3) == 0, whole = ri(2);
    for (int i = 0; i < n; i++) {
        int64_t d = t->dims[p[i]];
        ax[i] = ri(2) ? p[i] : p[i] - r;
        sp[i] = steps ? (ri(3) ? 1 : ri(2) ? -1 : 2) : 1;
        if (whole || ri(3) == 0) {
            st[i] = sp[i] > 0 ? (ri(2) ? 0 : -d - ri(3)) : -1;
            en[i] = sp[i] > 0 ? (ri(2) ? d : INT64_MAX) : INT64_MIN;
        } else {
            st[i] = rand_index(d);
            en[i] = rand_index(d);
        }
    }
    kiln_graph *g = G->g;
    int in[5] = {x, add_i64(g, nm(G, "st"), n, st), add_i64(g, nm(G, "en"), n, en), add_i64(g, nm(G, "ax"), n, ax), -1};
    int k = 4;
    if (steps || ri(2)) in[k++] = add_i64(g, nm(G, "sp"), n, sp);
    G->multi_slices++;
    return add_node(g, KILN_OP_Slice, nm(G, "mslice"), k, in, NULL);
}

/* A chain of data-movement layers on x (merge_movement, fuse_movement.c):
 * Transposes, Slices (strided, reversed, several axes), Gathers of constant
 * indices (negative, repeated, a scalar), Concats of Slices of one value (or
 * of two), Reshapes merging two dims; inner values sometimes read elsewhere. */
static int gen_movement(gen *G, int x) {
    int y = x, n = 2 + ri(4);
    for (int s = 0; s < n && y >= 0; s++) {
        if (kiln__graph_infer(G->g) != KILN_OK) return -1;
        const kiln_tinfo *t = ti(G, y);
        int r = t->rank;
        if (r < 1 || kiln__numel(r, t->dims) <= 0) return y;
        switch (ri(5)) {
        case 0: {
            int32_t p[8];
            rand_perm(r, p);
            y = transpose(G, y, p, r);
            break;
        }
        case 1: y = gen_multi_slice(G, y); break;
        case 2: {
            int a = ri(r), k = 1 + ri(2 * (int)t->dims[a]);
            int64_t idx[16], d = t->dims[a], one = k > 16 ? 16 : k;
            for (int i = 0; i < one; i++) idx[i] = ri((int)(2 * d)) - d; /* in [-d, d) */
            kiln_graph *g = G->g;
            int in[2] = {y, -1};
            if (r >= 2 && ri(4) == 0) {
                in[1] = add_index(g, nm(G, "gi"), idx[0], ri(2));
            } else {
                in[1] = add_i64(g, nm(G, "gi"), (int)one, idx);
            }
            kiln_axis_attrs aa = {.axis = ri(2) ? a : a - r};
            y = add_node(g, KILN_OP_Gather, nm(G, "gather"), 2, in, &aa);
            break;
        }
        case 3: y = gen_concat(G, y); break;
        default: {
            if (r < 2) break;
            int64_t d[8];
            int a = ri(r - 1);
            for (int i = 0, k = 0; i < r; i++) d[k++] = i == a ? t->dims[i] * t->dims[i + 1] : t->dims[i + (i > a)];
            int in[2] = {y, add_i64(G->g, nm(G, "shape"), r - 1, d)};
            kiln_reshape_attrs ra = {0};
            y = add_node(G->g, KILN_OP_Reshape, nm(G, "reshape"), 2, in, &ra);
        }
        }
        if (y >= 0 && s + 1 < n && ri(4) == 0) maybe_leak(G, y);
    }
    return y;
}
/* One step of the grammar: family fam (0 to 11) on y (-1: none yet; the
 * families that transform y make an input first); the new value, or -1
 * when the grammar made an invalid graph. */
static int gen_step(gen *G, int fam, int y) {
    kiln_graph *g = G->g;
    if ((fam < 4 || fam == 8 || fam == 9) && y < 0) { /* the families that transform y */
        int r = 2 + ri(3);
        int64_t d[4];
        for (int i = 0; i < r; i++) d[i] = 1 + ri(5);
        y = add_input(g, nm(G, "x"), r, d);
    }
    switch (fam) {
    case 0: return gen_concat(G, y);
    case 1: return ri(2) ? gen_pad(G, y) : gen_dropout(G, y, G->must_stay);
    case 2: return gen_transposes(G, y);
    case 3: return add_unary(g, KILN_OP_Neg, nm(G, "neg"), y, NULL);
    case 4: return gen_linear(G, NULL);
    case 5: return gen_conv(G);
    case 6: return gen_norm(G);
    case 7: return gen_flat_linear(G);
    case 8: return gen_multi_slice(G, y);
    case 9: return gen_movement(G, y);
    default: {
        int r = 1 + ri(4);
        int64_t d[4];
        for (int i = 0; i < r; i++) d[i] = 1 + ri(4);
        return gen_pointwise(G, add_input(g, nm(G, "x"), r, d));
    }
    }
}

/* After a step: -1 when y is invalid or too large, else 0 (and y maybe
 * read elsewhere when more steps follow). */
static int gen_step_done(gen *G, int y, bool last) {
    if (y < 0 || kiln__graph_infer(G->g) != KILN_OK) return -1;
    if (kiln__numel(ti(G, y)->rank, ti(G, y)->dims) > MAXN) return -1;
    if (!last) maybe_leak(G, y);
    return 0;
}

/* One random graph from seed (1 to 3 steps of the grammar); -1 when the
 * grammar made an invalid one. *must_stay: a Dropout whose training_mode
 * is a graph input; *multi_slices: multi-axis Slices made. */
static inline int gen_graph(kiln_graph *g, uint64_t seed, bool *must_stay, int *multi_slices) {
    gen G = {.g = g, .must_stay = must_stay};
    gb_rng_state = seed;
    int steps = 1 + ri(3), y = -1;
    for (int s = 0; s < steps; s++) {
        y = gen_step(&G, ri(12), y);
        if (gen_step_done(&G, y, s + 1 == steps) != 0) return -1;
    }
    mark_output(g, y);
    *multi_slices += G.multi_slices;
    return 0;
}

/* Makes the first dim of every input of g symbolic (their sizes into
 * dy->d0; -1 for scalars): one symbol "batch" for all, or (per_size) one
 * per size, so that inputs of other sizes do not claim to share a dim.
 * The shapes the first inference gave the other values are forgotten (kept,
 * they would act as declared shapes: a [2, ...] that a run at batch 1
 * contradicts). False when g has more than 8 inputs or no longer infers. */
static bool make_batch_symbolic(kiln_graph *g, dyn *dy, bool per_size) {
    if (g->n_inputs > 8) return false;
    for (int k = 0; k < g->n_inputs; k++) {
        kiln_tinfo *t = &g->values[g->inputs[k]].info;
        dy->d0[k] = t->rank > 0 ? t->dims[0] : -1;
        if (t->rank <= 0) continue;
        char sn[32];
        snprintf(sn, sizeof sn, per_size ? "batch%lld" : "batch", (long long)t->dims[0]);
        int sym = -1;
        for (int j = 0; j < g->n_symbols; j++)
            if (!strcmp(g->symbols[j], sn)) sym = j;
        if (sym < 0 && kiln__graph_add_symbol(g, sn, &sym) != KILN_OK) return false;
        t->dims[0] = KILN_DIM_SYM(sym);
    }
    for (int v = 0; v < g->n_values; v++)
        if (!(g->values[v].flags & (KILN_VALUE_INPUT | KILN_VALUE_CONST))) g->values[v].info.rank = -1;
    return kiln__graph_infer(g) == KILN_OK;
}

/* Environment variable `name` as a whole number in [lo, hi], `dflt` when
 * unset; anything else fails the test (KILN_DIFF_ITERS=abc or -5 ran no
 * graph at all and passed; tests/more_tests.cmake checks it). */
static int64_t env_count(const char *name, int64_t dflt, int64_t lo, int64_t hi) {
    const char *v = getenv(name);
    if (!v) return dflt;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "  %s='%s': expected a whole number from %lld to %lld\n", name, v, (long long)lo,
                (long long)hi);
        CHECK(false);
        return lo;
    }
    return x;
}

#endif
