/* fuse_transformer.c -- transformer rewrites of the graph optimizer.
 *
 * In order:
 *   1. layout clean-up: Transpose of Transpose (composed, or removed when the
 *      result is the identity), Reshape of Reshape (the first one skipped);
 *   2. decomposed LayerNorm as PyTorch exports it before opset 17
 *        ReduceMean(x) -> Sub -> Pow 2 -> ReduceMean -> Add eps -> Sqrt -> Div
 *        -> Mul gamma (-> Add beta)
 *      into LayerNormalization (the ONNX op; its kernel is in nn_norm.c);
 *   3. GELU, erf form x * 0.5 * (1 + erf(x / sqrt 2)) (three orders of the
 *      multiplications) and tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
 *      x^3))), into kiln.Gelu;
 *   4. MatMul (constant 2-D B) or Gemm (transA 0, constant B; alpha and beta
 *      folded into scaled copies of B and C), + Add of a constant bias along the last axis, + Add of a residual
 *      tensor of the output's shape, + Relu or kiln.Gelu, into
 *      kiln.FusedMatMul;
 *   5. attention: MatMul(Q, K^T) -> Div or Mul by a constant -> Add mask ->
 *      Softmax(last axis) -> MatMul(., V) into kiln.Attention. The head
 *      splitting around it (Reshape [B,S,H*D] -> [B,S,H,D] + Transpose to
 *      [B,H,S,D] or [B,H,D,S]) and the merge after it (Transpose back +
 *      Reshape to [B,S,H*D]) are folded into the layer's operand layouts, so
 *      no transpose is left;
 *   6. the three projections making an Attention's Q, K and V from one input
 *      into one FusedMatMul with the weights side by side (Attention layout
 *      KILN_ATTN_QKV).
 * Each fusion is made only where the target's backend supports the new node.
 * The fused node replaces the pattern's last node and is named after all the
 * nodes it came from ("a+b+c"). */
#include "passes/pattern.h"

#include "backends/backend.h"
#include "ops/fused_transformer.h"
#include "ops/nn_attrs.h"
#include "ops/reduce_attrs.h"
#include "ops/tensor_internal.h"

#include <math.h>
#include <stdio.h>

#define MAX_PAT 16

/* A pattern being collected: node indices (in graph order of the pattern). */
typedef struct pat {
    int nodes[MAX_PAT];
    int n;
} pat;

static void pat_add(pat *p, int ni) {
    if (p->n < MAX_PAT) p->nodes[p->n++] = ni;
}

static const kiln_tinfo *info(const kiln_graph *g, int v) { return &g->values[v].info; }

/* The live node of op `op_id` producing v, if v has that one reader only. */
static int sole_producer(const kiln_graph *g, int v, int op_id) {
    if (!kiln__pat_sole_use(g, v)) return -1;
    return kiln__pat_producer(g, v, op_id);
}

/* The only consumer of v if it is of op `op_id`. */
static int sole_consumer_op(const kiln_graph *g, int v, int op_id) {
    int c = kiln__pat_sole_consumer(g, v);
    return c >= 0 && g->nodes[c].op_id == op_id ? c : -1;
}

/* Value of a scalar (one element) float or int constant. */
static bool const_scalar(const kiln_graph *g, int v, double *out) {
    if (v < 0) return false;
    const kiln_value *val = &g->values[v];
    if (!(val->flags & KILN_VALUE_CONST) || kiln__numel(val->info.rank, val->info.dims) != 1) return false;
    switch (val->info.dtype) {
    case KILN_DTYPE_FLOAT32: *out = *(const float *)val->data; return true;
    case KILN_DTYPE_FLOAT64: *out = *(const double *)val->data; return true;
    case KILN_DTYPE_INT64: *out = (double)*(const int64_t *)val->data; return true;
    default: return false;
    }
}

static bool near(double x, double want) { return fabs(x - want) <= 1e-6 * fabs(want); }

static bool const_scalar_near(const kiln_graph *g, int v, double want) {
    double x;
    return const_scalar(g, v, &x) && near(x, want);
}

/* For a binary node ni, the input that is not v (or -1 if neither is v). */
static int other_input(const kiln_graph *g, int ni, int v) {
    const kiln_node *n = &g->nodes[ni];
    if (n->n_in != 2) return -1;
    if (n->in[0] == v) return n->in[1];
    if (n->in[1] == v) return n->in[0];
    return -1;
}

static bool is_f32(const kiln_graph *g, int v) { return info(g, v)->dtype == KILN_DTYPE_FLOAT32; }

/* Replaces the pattern's last node by the fused node and marks the others
 * dead; names joined from every node of the pattern. */
static kiln_status pat_commit(kiln_graph *g, const pat *p, int op_id, int n_in, const int *in, int out,
                              const void *attrs) {
    int last = p->nodes[0];
    for (int i = 0; i < p->n; i++)
        if (p->nodes[i] > last) last = p->nodes[i];
    KILN_TRY(kiln__pat_replace(g, last, op_id, n_in, in, 1, &out, attrs, p->nodes, p->n));
    for (int i = 0; i < p->n; i++)
        if (p->nodes[i] != last) g->nodes[p->nodes[i]].dead = true;
    kiln__graph_link(g);
    return KILN_OK;
}

/* Makes every live reader of value `from` read `to` instead. */
static void redirect_uses(kiln_graph *g, int from, int to) {
    for (int ni = 0; ni < g->n_nodes; ni++) {
        kiln_node *n = &g->nodes[ni];
        if (n->dead) continue;
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] == from) n->in[i] = to;
    }
}

/* ======================================================================= */
/* 1. Transpose / Reshape clean-up                                          */
/* ======================================================================= */

static bool static_shape(const kiln_tinfo *t) { return t->rank >= 0 && kiln__numel(t->rank, t->dims) >= 0; }

static kiln_status opt_layout(kiln_graph *g, const kiln_optimize_opts *o) {
    for (int ni = 0; ni < g->n_nodes; ni++) {
        kiln_node *n = &g->nodes[ni];
        if (n->dead) continue;
        if (n->op_id == KILN_OP_Transpose) {
            int p = sole_producer(g, n->in[0], KILN_OP_Transpose);
            if (p < 0) continue;
            const kiln_transpose_attrs *a2 = n->attrs, *a1 = g->nodes[p].attrs;
            int r = info(g, n->out[0])->rank;
            if (r < 0 || a1->n_perm != r || a2->n_perm != r) continue;
            /* y[i] = t[p2[i]] and t[j] = x[p1[j]]: y = transpose(x, p1[p2[i]]) */
            kiln_transpose_attrs c = {.n_perm = r};
            bool ident = true;
            for (int i = 0; i < r; i++) {
                c.perm[i] = a1->perm[a2->perm[i]];
                if (c.perm[i] != i) ident = false;
            }
            int x = g->nodes[p].in[0], y = n->out[0];
            if (ident && !kiln__pat_is_output(g, y)) {
                redirect_uses(g, y, x);
                g->nodes[p].dead = true;
                n->dead = true;
                kiln__graph_link(g);
                continue;
            }
            if (ident) continue;
            if (!kiln__pat_supports(g, o->device, KILN_OP_Transpose, 1, &x, 1, &y, &c)) continue;
            pat pt = {.n = 0};
            pat_add(&pt, p);
            pat_add(&pt, ni);
            KILN_TRY(pat_commit(g, &pt, KILN_OP_Transpose, 1, &x, y, &c));
        } else if (n->op_id == KILN_OP_Reshape && n->n_in >= 2) {
            int p = sole_producer(g, n->in[0], KILN_OP_Reshape);
            if (p < 0) continue;
            /* Reshape(Reshape(x, s1), s2) == Reshape(x, s2) when s2 does not copy
             * dims (0 entries) from the intermediate shape: with a known static
             * output shape, the shape is made explicit. */
            kiln_tinfo yi = *info(g, n->out[0]);
            if (!static_shape(&yi)) continue;
            int shape, y = n->out[0];
            int64_t sd[1] = {yi.rank};
            char base[200];
            snprintf(base, sizeof base, "%s", g->values[y].name ? g->values[y].name : "reshape");
            KILN_TRY(kiln__pat_add_const(g, base, KILN_DTYPE_INT64, 1, sd, yi.dims, &shape));
            n = &g->nodes[ni];
            int in[2] = {g->nodes[p].in[0], shape};
            kiln_reshape_attrs ra = {0};
            if (!kiln__pat_supports(g, o->device, KILN_OP_Reshape, 2, in, 1, n->out, &ra)) continue;
            pat pt = {.n = 0};
            pat_add(&pt, p);
            pat_add(&pt, ni);
            KILN_TRY(pat_commit(g, &pt, KILN_OP_Reshape, 2, in, n->out[0], &ra));
        }
    }
    return KILN_OK;
}

/* ======================================================================= */
/* 2. LayerNorm                                                              */
/* ======================================================================= */

/* Whether ReduceMean node ri reduces exactly the last `*k` axes of its input
 * with keepdims (sets *k). */
static bool reduce_last_axes(const kiln_graph *g, int ri, int *k) {
    const kiln_node *r = &g->nodes[ri];
    const kiln_reduce_attrs *ra = r->attrs;
    int rank = info(g, r->in[0])->rank;
    if (!ra->keepdims || rank <= 0 || r->n_in < 2 || r->in[1] < 0) return false;
    const kiln_value *ax = &g->values[r->in[1]];
    if (!(ax->flags & KILN_VALUE_CONST) || ax->info.dtype != KILN_DTYPE_INT64) return false;
    int64_t n = kiln__numel(ax->info.rank, ax->info.dims);
    if (n <= 0 || n > rank) return false;
    bool seen[KILN_MAX_RANK] = {false};
    for (int64_t i = 0; i < n; i++) {
        int64_t a = ((const int64_t *)ax->data)[i];
        if (a < 0) a += rank;
        if (a < rank - n || a >= rank || seen[a]) return false;
        seen[a] = true;
    }
    *k = (int)n;
    return true;
}

static kiln_status match_layernorm(kiln_graph *g, const kiln_optimize_opts *o, int div) {
    const kiln_node *dn = &g->nodes[div];
    int d = dn->in[0], sq = dn->in[1];
    int sub = kiln__pat_producer(g, d, KILN_OP_Sub);
    int sqrt_n = sole_producer(g, sq, KILN_OP_Sqrt);
    if (sub < 0 || sqrt_n < 0 || g->values[d].n_uses != 2 || kiln__pat_is_output(g, d)) return KILN_OK;
    int x = g->nodes[sub].in[0];
    if (!is_f32(g, x)) return KILN_OK;
    int mean_r = sole_producer(g, g->nodes[sub].in[1], KILN_OP_ReduceMean);
    int k1, k2;
    if (mean_r < 0 || g->nodes[mean_r].in[0] != x || !reduce_last_axes(g, mean_r, &k1)) return KILN_OK;
    int add_eps = sole_producer(g, g->nodes[sqrt_n].in[0], KILN_OP_Add);
    if (add_eps < 0) return KILN_OK;
    const kiln_node *ae = &g->nodes[add_eps];
    int var = -1, epsv = -1;
    for (int i = 0; i < 2; i++)
        if (kiln__pat_producer(g, ae->in[i], KILN_OP_ReduceMean) >= 0) {
            var = ae->in[i];
            epsv = ae->in[1 - i];
        }
    double eps;
    if (var < 0 || !const_scalar(g, epsv, &eps)) return KILN_OK;
    int var_r = sole_producer(g, var, KILN_OP_ReduceMean);
    if (var_r < 0 || !reduce_last_axes(g, var_r, &k2) || k1 != k2) return KILN_OK;
    int pow_n = sole_producer(g, g->nodes[var_r].in[0], KILN_OP_Pow);
    if (pow_n < 0 || g->nodes[pow_n].in[0] != d || !const_scalar_near(g, g->nodes[pow_n].in[1], 2.0))
        return KILN_OK;
    /* scale and shift */
    int mul = sole_consumer_op(g, dn->out[0], KILN_OP_Mul);
    if (mul < 0) return KILN_OK;
    int gamma = other_input(g, mul, dn->out[0]);
    int rank = info(g, x)->rank;
    const kiln_tinfo *gi = gamma >= 0 ? info(g, gamma) : NULL;
    if (!gi || !kiln__pat_const_f32(g, gamma, NULL) || gi->rank > k1) return KILN_OK;
    int last = mul, beta = -1;
    int add_b = sole_consumer_op(g, g->nodes[mul].out[0], KILN_OP_Add);
    if (add_b >= 0) {
        beta = other_input(g, add_b, g->nodes[mul].out[0]);
        const kiln_tinfo *bi = beta >= 0 ? info(g, beta) : NULL;
        if (bi && kiln__pat_const_f32(g, beta, NULL) && bi->rank <= k1) last = add_b;
        else beta = -1;
    }
    /* outputs keep x's shape: the parameters broadcast within the normalized dims */
    int out = g->nodes[last].out[0];
    const kiln_tinfo *xi = info(g, x), *yi = info(g, out);
    if (yi->rank != xi->rank) return KILN_OK;
    for (int i = 0; i < rank; i++)
        if (yi->dims[i] != xi->dims[i]) return KILN_OK;
    kiln_ln_attrs la = {.axis = rank - k1, .epsilon = (float)eps, .stash_type = 1};
    int in[3] = {x, gamma, beta};
    int n_in = beta >= 0 ? 3 : 2;
    if (!kiln__pat_supports(g, o->device, KILN_OP_LayerNormalization, n_in, in, 1, &out, &la)) return KILN_OK;
    pat p = {.n = 0};
    int order[] = {mean_r, sub, pow_n, var_r, add_eps, sqrt_n, div, mul, add_b};
    for (int i = 0; i < 9; i++)
        if (order[i] >= 0 && (order[i] != add_b || last == add_b)) pat_add(&p, order[i]);
    return pat_commit(g, &p, KILN_OP_LayerNormalization, n_in, in, out, &la);
}

/* ======================================================================= */
/* 3. GELU                                                                   */
/* ======================================================================= */

/* Given t = f(x) with one reader (erf or tanh output), matches
 * Add(t, 1) and the multiplications by x and 0.5 in any of the three
 * export orders. Fills the pattern (after what is already in it) and
 * returns the output value, or -1. */
static int match_gelu_tail(const kiln_graph *g, int t, int x, pat *p) {
    int add = sole_consumer_op(g, t, KILN_OP_Add);
    if (add < 0 || !const_scalar_near(g, other_input(g, add, t), 1.0)) return -1;
    int a = g->nodes[add].out[0];
    int m = sole_consumer_op(g, a, KILN_OP_Mul);
    if (m < 0) return -1;
    int o = other_input(g, m, a);
    int mo = g->nodes[m].out[0];
    pat_add(p, add);
    if (o == x) { /* (x * (1 + f)) * 0.5 */
        int m2 = sole_consumer_op(g, mo, KILN_OP_Mul);
        if (m2 < 0 || !const_scalar_near(g, other_input(g, m2, mo), 0.5)) return -1;
        pat_add(p, m);
        pat_add(p, m2);
        return g->nodes[m2].out[0];
    }
    if (const_scalar_near(g, o, 0.5)) { /* x * ((1 + f) * 0.5) */
        int m2 = sole_consumer_op(g, mo, KILN_OP_Mul);
        if (m2 < 0 || other_input(g, m2, mo) != x) return -1;
        pat_add(p, m);
        pat_add(p, m2);
        return g->nodes[m2].out[0];
    }
    int h = sole_producer(g, o, KILN_OP_Mul); /* (x * 0.5) * (1 + f) */
    if (h < 0 || other_input(g, h, x) < 0 || !const_scalar_near(g, other_input(g, h, x), 0.5)) return -1;
    pat_add(p, h);
    pat_add(p, m);
    return mo;
}

static kiln_status match_gelu_erf(kiln_graph *g, const kiln_optimize_opts *o, int erf) {
    int e_in = g->nodes[erf].in[0];
    int s = sole_producer(g, e_in, 0);
    if (s < 0) return KILN_OK;
    const kiln_node *sn = &g->nodes[s];
    int x;
    if (sn->op_id == KILN_OP_Div && const_scalar_near(g, sn->in[1], sqrt(2.0))) x = sn->in[0];
    else if (sn->op_id == KILN_OP_Mul && const_scalar_near(g, sn->in[1], M_SQRT1_2)) x = sn->in[0];
    else if (sn->op_id == KILN_OP_Mul && const_scalar_near(g, sn->in[0], M_SQRT1_2)) x = sn->in[1];
    else return KILN_OK;
    if (!is_f32(g, x)) return KILN_OK;
    pat p = {.n = 0};
    pat_add(&p, s);
    pat_add(&p, erf);
    int y = match_gelu_tail(g, g->nodes[erf].out[0], x, &p);
    if (y < 0) return KILN_OK;
    kiln_gelu_attrs ga = {.approx = 0};
    if (!kiln__pat_supports(g, o->device, KILN_OP_Gelu, 1, &x, 1, &y, &ga)) return KILN_OK;
    return pat_commit(g, &p, KILN_OP_Gelu, 1, &x, y, &ga);
}

/* tanh form: tanh(c * (x + 0.044715 * x^3)), x^3 as Pow(x, 3) or x*x*x */
static kiln_status match_gelu_tanh(kiln_graph *g, const kiln_optimize_opts *o, int th) {
    int u = sole_producer(g, g->nodes[th].in[0], KILN_OP_Mul);
    if (u < 0) return KILN_OK;
    int inner = -1;
    for (int i = 0; i < 2; i++)
        if (const_scalar_near(g, g->nodes[u].in[1 - i], 0.7978845608028654)) inner = g->nodes[u].in[i];
    int add = inner >= 0 ? sole_producer(g, inner, KILN_OP_Add) : -1;
    if (add < 0) return KILN_OK;
    for (int i = 0; i < 2; i++) {
        int x = g->nodes[add].in[i], c = g->nodes[add].in[1 - i];
        int mc = sole_producer(g, c, KILN_OP_Mul);
        if (mc < 0 || !is_f32(g, x)) continue;
        int cube = -1;
        for (int j = 0; j < 2; j++)
            if (const_scalar_near(g, g->nodes[mc].in[1 - j], 0.044715)) cube = g->nodes[mc].in[j];
        if (cube < 0) continue;
        pat p = {.n = 0};
        int pw = sole_producer(g, cube, KILN_OP_Pow);
        if (pw >= 0 && g->nodes[pw].in[0] == x && const_scalar_near(g, g->nodes[pw].in[1], 3.0)) {
            pat_add(&p, pw);
        } else {
            int m3 = sole_producer(g, cube, KILN_OP_Mul); /* (x*x)*x */
            int sqv = m3 >= 0 ? other_input(g, m3, x) : -1;
            int m2 = sqv >= 0 ? sole_producer(g, sqv, KILN_OP_Mul) : -1;
            if (m2 < 0 || g->nodes[m2].in[0] != x || g->nodes[m2].in[1] != x) continue;
            pat_add(&p, m2);
            pat_add(&p, m3);
        }
        pat_add(&p, mc);
        pat_add(&p, add);
        pat_add(&p, u);
        pat_add(&p, th);
        int y = match_gelu_tail(g, g->nodes[th].out[0], x, &p);
        if (y < 0) return KILN_OK;
        kiln_gelu_attrs ga = {.approx = 1};
        if (!kiln__pat_supports(g, o->device, KILN_OP_Gelu, 1, &x, 1, &y, &ga)) return KILN_OK;
        return pat_commit(g, &p, KILN_OP_Gelu, 1, &x, y, &ga);
    }
    return KILN_OK;
}

/* ======================================================================= */
/* 4. FusedMatMul                                                            */
/* ======================================================================= */

/* Whether v is a float32 constant of N elements laid along the last axis. */
static bool is_bias(const kiln_graph *g, int v, int64_t N, int out_rank) {
    int64_t n;
    if (v < 0 || !kiln__pat_const_f32(g, v, &n) || n != N) return false;
    const kiln_tinfo *t = info(g, v);
    return t->rank >= 1 && t->rank <= out_rank && t->dims[t->rank - 1] == N;
}

/* A new float32 constant holding s times constant v. */
static kiln_status scaled_copy(kiln_graph *g, int v, float s, int *out) {
    int64_t n;
    const float *x = kiln__pat_const_f32(g, v, &n);
    float *y = kiln__malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!x || !y) {
        kiln__free(y);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (optimizer)");
    }
    for (int64_t i = 0; i < n; i++) y[i] = s * x[i];
    kiln_tinfo t = *info(g, v);
    char base[200];
    snprintf(base, sizeof base, "%s", g->values[v].name ? g->values[v].name : "scaled");
    kiln_status st = kiln__pat_add_const(g, base, KILN_DTYPE_FLOAT32, t.rank, t.dims, y, out);
    kiln__free(y);
    return st;
}

static kiln_status match_matmul(kiln_graph *g, const kiln_optimize_opts *o, int mm) {
    const kiln_node *n = &g->nodes[mm];
    int A = n->in[0], B = n->in[1], bias = -1;
    kiln_fused_matmul_attrs fa = {.tactic = {0, 0}, .act = KILN_FACT_NONE,
                                  .precision = o->precision == KILN_PRECISION_BF16 ? KILN_PRECISION_BF16
                                                                                   : KILN_PRECISION_FP32};
    const kiln_tinfo *ai = info(g, A), *bi = info(g, B);
    if (!is_f32(g, A) || !kiln__pat_const_f32(g, B, NULL) || bi->rank != 2 || ai->rank < 2) return KILN_OK;
    float alpha = 1.0f, beta = 1.0f; /* Gemm's scales, folded into copies of B and C */
    if (n->op_id == KILN_OP_Gemm) {
        const kiln_gemm_attrs *ga = n->attrs;
        if (ga->trans_a || ai->rank != 2 || !isfinite(ga->alpha) || !isfinite(ga->beta)) return KILN_OK;
        fa.trans_b = ga->trans_b != 0;
        alpha = ga->alpha;
        beta = ga->beta;
        if (n->n_in > 2 && n->in[2] >= 0 && beta != 0.0f) bias = n->in[2];
    }
    int64_t N = bi->dims[fa.trans_b ? 0 : 1];
    int out_rank = info(g, n->out[0])->rank;
    if (bias >= 0 && !is_bias(g, bias, N, out_rank)) return KILN_OK;
    pat p = {.n = 0};
    pat_add(&p, mm);
    int y = n->out[0];
    if (bias < 0) {
        int add = sole_consumer_op(g, y, KILN_OP_Add);
        int b = add >= 0 ? other_input(g, add, y) : -1;
        if (b >= 0 && is_bias(g, b, N, out_rank) && info(g, g->nodes[add].out[0])->rank == out_rank) {
            bias = b;
            pat_add(&p, add);
            y = g->nodes[add].out[0];
        }
    }
    /* residual: Add of a float32 tensor of the same shape */
    int res = -1, radd = sole_consumer_op(g, y, KILN_OP_Add);
    if (radd >= 0) {
        int r = other_input(g, radd, y);
        const kiln_tinfo *ri = r >= 0 ? info(g, r) : NULL, *yi = info(g, y), *oi = info(g, g->nodes[radd].out[0]);
        bool same = ri && r != y && is_f32(g, r) && ri->rank == yi->rank && oi->rank == yi->rank && yi->rank >= 0;
        for (int i = 0; same && i < yi->rank; i++)
            if (ri->dims[i] != yi->dims[i] || oi->dims[i] != yi->dims[i] || yi->dims[i] == KILN_DIM_UNKNOWN)
                same = false;
        if (same) {
            res = r;
            pat_add(&p, radd);
            y = g->nodes[radd].out[0];
        }
    }
    int act = kiln__pat_sole_consumer(g, y);
    if (act >= 0 && g->nodes[act].op_id == KILN_OP_Relu) {
        fa.act = KILN_FACT_RELU;
    } else if (act >= 0 && g->nodes[act].op_id == KILN_OP_Gelu) {
        fa.act = ((const kiln_gelu_attrs *)g->nodes[act].attrs)->approx ? KILN_FACT_GELU_TANH : KILN_FACT_GELU_ERF;
    } else {
        act = -1;
    }
    if (act >= 0) {
        pat_add(&p, act);
        y = g->nodes[act].out[0];
    }
    if (alpha != 1.0f) KILN_TRY(scaled_copy(g, B, alpha, &B));
    if (bias >= 0 && beta != 1.0f) KILN_TRY(scaled_copy(g, bias, beta, &bias));
    int in[4] = {A, B, bias, res};
    int n_in = res >= 0 ? 4 : bias >= 0 ? 3 : 2;
    if (!kiln__pat_supports(g, o->device, KILN_OP_FusedMatMul, n_in, in, 1, &y, &fa)) return KILN_OK;
    return pat_commit(g, &p, KILN_OP_FusedMatMul, n_in, in, y, &fa);
}

/* ======================================================================= */
/* 5. Attention                                                              */
/* ======================================================================= */

static const int32_t *transpose_perm(const kiln_graph *g, int ni, int rank) {
    const kiln_transpose_attrs *t = g->nodes[ni].attrs;
    return t->n_perm == rank ? t->perm : NULL;
}

static bool perm_is(const int32_t *p, int a, int b, int c, int d) {
    return p && p[0] == a && p[1] == b && p[2] == c && p[3] == d;
}

/* Whether Reshape node r turns [B, S, E] into [B, S, H, D] with H*D = E. */
static bool reshape_splits_heads(const kiln_graph *g, int r, int64_t *H) {
    const kiln_tinfo *x = info(g, g->nodes[r].in[0]), *y = info(g, g->nodes[r].out[0]);
    if (x->rank != 3 || y->rank != 4) return false;
    if (y->dims[2] <= 0 || y->dims[3] <= 0 || x->dims[2] != y->dims[2] * y->dims[3]) return false;
    if (x->dims[0] == KILN_DIM_UNKNOWN || x->dims[1] == KILN_DIM_UNKNOWN) return false;
    if (x->dims[0] != y->dims[0] || x->dims[1] != y->dims[1]) return false;
    *H = y->dims[2];
    return true;
}

/* Operand v of the attention in BHSD order (want_t: K given as [B,H,D,S]).
 * Looks through Transpose(Reshape(x)) head splitting; fills the layout, the
 * source value and the absorbed nodes (only those with no other reader). */
static void attn_operand(const kiln_graph *g, int v, bool is_k, int *layout, int *src, int64_t *H, pat *p) {
    *src = v;
    *layout = is_k ? KILN_ATTN_BHDS : KILN_ATTN_BHSD;
    *H = 0;
    int t = kiln__pat_producer(g, v, KILN_OP_Transpose);
    if (t < 0 || info(g, v)->rank != 4) return;
    const int32_t *pm = transpose_perm(g, t, 4);
    int r = kiln__pat_producer(g, g->nodes[t].in[0], KILN_OP_Reshape);
    int64_t h;
    if (r >= 0 && reshape_splits_heads(g, r, &h) &&
        (is_k ? perm_is(pm, 0, 2, 3, 1) : perm_is(pm, 0, 2, 1, 3))) {
        *src = g->nodes[r].in[0];
        *layout = KILN_ATTN_BSHD;
        *H = h;
        if (kiln__pat_sole_use(g, v)) {
            pat_add(p, t);
            if (kiln__pat_sole_use(g, g->nodes[t].in[0])) pat_add(p, r);
        }
        return;
    }
    if (is_k && perm_is(pm, 0, 1, 3, 2)) { /* K^T of a [B,H,S,D] K */
        *src = g->nodes[t].in[0];
        *layout = KILN_ATTN_BHSD;
        if (kiln__pat_sole_use(g, v)) pat_add(p, t);
    }
}

static kiln_status match_attention(kiln_graph *g, const kiln_optimize_opts *o, int sm) {
    const kiln_node *smn = &g->nodes[sm];
    const kiln_softmax_attrs *sa = smn->attrs;
    const kiln_tinfo *si = info(g, smn->in[0]);
    if (si->rank != 4 || !is_f32(g, smn->in[0])) return KILN_OK;
    if (sa->axis != -1 && sa->axis != 3) return KILN_OK;
    int pv = sole_consumer_op(g, smn->out[0], KILN_OP_MatMul);
    if (pv < 0 || g->nodes[pv].in[0] != smn->out[0]) return KILN_OK;
    /* scores: MatMul -> (Div|Mul const) -> (Add mask) */
    int s = smn->in[0], mask = -1, add = -1, scl = -1, qk;
    float scale = 1.0f;
    add = sole_producer(g, s, KILN_OP_Add);
    if (add >= 0) {
        for (int i = 0; i < 2; i++) {
            int a = g->nodes[add].in[i];
            if ((kiln__pat_producer(g, a, KILN_OP_MatMul) >= 0 || kiln__pat_producer(g, a, KILN_OP_Div) >= 0 ||
                 kiln__pat_producer(g, a, KILN_OP_Mul) >= 0) &&
                kiln__pat_sole_use(g, a)) {
                s = a;
                mask = g->nodes[add].in[1 - i];
                break;
            }
        }
        if (mask < 0 || !is_f32(g, mask) || info(g, mask)->rank < 0 || info(g, mask)->rank > 4) return KILN_OK;
        /* the mask broadcasts into the scores, not the scores into a bigger shape */
        const kiln_tinfo *ao = info(g, g->nodes[add].out[0]), *so = info(g, s);
        if (ao->rank != 4 || so->rank != 4) return KILN_OK;
        for (int i = 0; i < 4; i++)
            if (ao->dims[i] != so->dims[i] || ao->dims[i] == KILN_DIM_UNKNOWN) return KILN_OK;
    }
    double c;
    if ((scl = sole_producer(g, s, KILN_OP_Div)) >= 0 && const_scalar(g, g->nodes[scl].in[1], &c) && c != 0.0) {
        scale = (float)(1.0 / c);
        s = g->nodes[scl].in[0];
    } else if ((scl = sole_producer(g, s, KILN_OP_Mul)) >= 0) {
        int x = -1;
        for (int i = 0; i < 2; i++)
            if (const_scalar(g, g->nodes[scl].in[1 - i], &c)) x = g->nodes[scl].in[i];
        if (x < 0) return KILN_OK;
        scale = (float)c;
        s = x;
    } else {
        scl = -1;
    }
    qk = sole_producer(g, s, KILN_OP_MatMul);
    if (qk < 0) return KILN_OK;
    kiln_attention_attrs aa = {.tactic = {0, 0}, .scale = scale,
                               .precision = o->precision == KILN_PRECISION_BF16 ? KILN_PRECISION_BF16
                                                                                : KILN_PRECISION_FP32};
    pat p = {.n = 0};
    int q, k, v;
    int64_t hq, hk, hv;
    int qv = g->nodes[qk].in[0], kv = g->nodes[qk].in[1], vv = g->nodes[pv].in[1];
    if (info(g, qv)->rank != 4 || info(g, kv)->rank != 4 || info(g, vv)->rank != 4) return KILN_OK;
    if (!is_f32(g, qv) || !is_f32(g, kv) || !is_f32(g, vv)) return KILN_OK;
    attn_operand(g, qv, false, &aa.q_layout, &q, &hq, &p);
    attn_operand(g, kv, true, &aa.k_layout, &k, &hk, &p);
    attn_operand(g, vv, false, &aa.v_layout, &v, &hv, &p);
    for (int i = 0; i < 2; i++) { /* no batch or head broadcasting */
        int64_t d = info(g, qv)->dims[i];
        if (d == KILN_DIM_UNKNOWN || info(g, kv)->dims[i] != d || info(g, vv)->dims[i] != d) return KILN_OK;
    }
    int64_t H = info(g, qv)->dims[1];
    if (H <= 0 || H > INT32_MAX || (hq && hq != H) || (hk && hk != H) || (hv && hv != H)) return KILN_OK;
    aa.num_heads = (int32_t)H;
    pat_add(&p, qk);
    if (scl >= 0) pat_add(&p, scl);
    if (add >= 0) pat_add(&p, add);
    pat_add(&p, sm);
    pat_add(&p, pv);
    /* the merge back: Transpose(0,2,1,3) + Reshape [B,S,H*D] */
    int y = g->nodes[pv].out[0];
    aa.out_layout = KILN_ATTN_BHSD;
    int t = sole_consumer_op(g, y, KILN_OP_Transpose);
    if (t >= 0 && perm_is(transpose_perm(g, t, 4), 0, 2, 1, 3)) {
        int r = sole_consumer_op(g, g->nodes[t].out[0], KILN_OP_Reshape);
        const kiln_tinfo *ti = info(g, g->nodes[t].out[0]);
        const kiln_tinfo *ri = r >= 0 ? info(g, g->nodes[r].out[0]) : NULL;
        if (ri && ri->rank == 3 && ti->rank == 4 && ri->dims[0] == ti->dims[0] && ri->dims[1] == ti->dims[1] &&
            ti->dims[0] != KILN_DIM_UNKNOWN && ti->dims[1] != KILN_DIM_UNKNOWN && ti->dims[2] > 0 &&
            ti->dims[3] > 0 && ri->dims[2] == ti->dims[2] * ti->dims[3]) {
            aa.out_layout = KILN_ATTN_BSHD;
            pat_add(&p, t);
            pat_add(&p, r);
            y = g->nodes[r].out[0];
        }
    }
    int in[4] = {q, k, v, mask};
    int n_in = mask >= 0 ? 4 : 3;
    if (!kiln__pat_supports(g, o->device, KILN_OP_Attention, n_in, in, 1, &y, &aa)) return KILN_OK;
    return pat_commit(g, &p, KILN_OP_Attention, n_in, in, y, &aa);
}

/* ======================================================================= */
/* 6. One projection for Q, K and V                                         */
/* ======================================================================= */

/* An Attention whose Q, K and V (BSHD) are made by three FusedMatMuls of the
 * same input, read by it alone, without activation: one FusedMatMul with the
 * weights (and biases) side by side makes [B, S, 3*H*D], read by the
 * Attention in the QKV layout. */
static kiln_status match_qkv(kiln_graph *g, const kiln_optimize_opts *o, int an) {
    kiln_attention_attrs aa = *(const kiln_attention_attrs *)g->nodes[an].attrs;
    if (aa.q_layout != KILN_ATTN_BSHD || aa.k_layout != KILN_ATTN_BSHD || aa.v_layout != KILN_ATTN_BSHD)
        return KILN_OK;
    int mm[3];
    const kiln_fused_matmul_attrs *fa[3];
    for (int i = 0; i < 3; i++) {
        mm[i] = sole_producer(g, g->nodes[an].in[i], KILN_OP_FusedMatMul);
        if (mm[i] < 0) return KILN_OK;
        fa[i] = g->nodes[mm[i]].attrs;
        const kiln_node *n = &g->nodes[mm[i]];
        if (fa[i]->act != KILN_FACT_NONE || fa[i]->trans_b || n->n_in > 3 || n->in[0] != g->nodes[mm[0]].in[0] ||
            n->n_in != g->nodes[mm[0]].n_in || fa[i]->precision != fa[0]->precision)
            return KILN_OK;
        if (info(g, n->in[1])->rank != 2 || info(g, n->in[1])->dims[0] != info(g, g->nodes[mm[0]].in[1])->dims[0] ||
            info(g, n->in[1])->dims[1] != info(g, g->nodes[mm[0]].in[1])->dims[1])
            return KILN_OK;
    }
    if (mm[0] == mm[1] || mm[1] == mm[2] || mm[0] == mm[2]) return KILN_OK;
    bool has_bias = g->nodes[mm[0]].n_in > 2;
    int64_t K = info(g, g->nodes[mm[0]].in[1])->dims[0], N = info(g, g->nodes[mm[0]].in[1])->dims[1];
    float *w = kiln__malloc(sizeof(float) * (size_t)(K * 3 * N)), *bias = kiln__malloc(sizeof(float) * (size_t)(3 * N));
    if (!w || !bias) {
        kiln__free(w);
        kiln__free(bias);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (optimizer)");
    }
    for (int i = 0; i < 3; i++) {
        const float *wi = kiln__pat_const_f32(g, g->nodes[mm[i]].in[1], NULL);
        for (int64_t k = 0; k < K; k++) memcpy(w + k * 3 * N + i * N, wi + k * N, sizeof(float) * (size_t)N);
        if (has_bias) memcpy(bias + i * N, kiln__pat_const_f32(g, g->nodes[mm[i]].in[2], NULL), sizeof(float) * (size_t)N);
    }
    char base[200];
    snprintf(base, sizeof base, "%s", g->nodes[mm[0]].name ? g->nodes[mm[0]].name : "qkv");
    int wv, bv = -1, y;
    int64_t wd[2] = {K, 3 * N}, bd[1] = {3 * N};
    kiln_status st = kiln__pat_add_const(g, base, KILN_DTYPE_FLOAT32, 2, wd, w, &wv);
    if (st == KILN_OK && has_bias) st = kiln__pat_add_const(g, base, KILN_DTYPE_FLOAT32, 1, bd, bias, &bv);
    kiln__free(w);
    kiln__free(bias);
    KILN_TRY(st);
    char yname[240];
    snprintf(yname, sizeof yname, "%s/qkv", base);
    for (int k = 0; kiln__graph_find_value(g, yname) >= 0; k++) snprintf(yname, sizeof yname, "%s/qkv_%d", base, k);
    KILN_TRY(kiln__graph_add_value(g, yname, &y));
    /* the output's shape: A's with 3N columns (inference runs again after the optimizer) */
    kiln_tinfo yi = *info(g, g->nodes[mm[0]].out[0]);
    if (yi.rank >= 1) yi.dims[yi.rank - 1] = 3 * N;
    g->values[y].info = yi;
    kiln_fused_matmul_attrs nf = *fa[0];
    nf.tactic.id = 0;
    nf.tactic.us = 0;
    int in[3] = {g->nodes[mm[0]].in[0], wv, bv};
    int n_in = has_bias ? 3 : 2;
    aa.q_layout = aa.k_layout = aa.v_layout = KILN_ATTN_QKV;
    int ain[4] = {y, y, y, g->nodes[an].n_in > 3 ? g->nodes[an].in[3] : -1};
    if (!kiln__pat_supports(g, o->device, KILN_OP_FusedMatMul, n_in, in, 1, &y, &nf) ||
        !kiln__pat_supports(g, o->device, KILN_OP_Attention, g->nodes[an].n_in, ain, 1, g->nodes[an].out, &aa))
        return KILN_OK; /* the new constants are dropped by DCE */
    /* the first projection (in graph order) becomes the fused one: A is made before it */
    int first = mm[0] < mm[1] ? (mm[0] < mm[2] ? mm[0] : mm[2]) : (mm[1] < mm[2] ? mm[1] : mm[2]);
    KILN_TRY(kiln__pat_replace(g, first, KILN_OP_FusedMatMul, n_in, in, 1, &y, &nf, mm, 3));
    for (int i = 0; i < 3; i++)
        if (mm[i] != first) g->nodes[mm[i]].dead = true;
    kiln_node *a = &g->nodes[an];
    memcpy(a->attrs, &aa, sizeof aa);
    for (int i = 0; i < 3; i++) a->in[i] = y;
    kiln__graph_link(g);
    return KILN_OK;
}

/* ======================================================================= */

kiln_status kiln__opt_transformer(kiln_graph *g, const kiln_optimize_opts *o) {
    kiln__graph_link(g);
    if (kiln__pass_on(o, KILN_PASS_MERGE_TRANSPOSE_RESHAPE)) KILN_TRY(opt_layout(g, o));
    for (int ni = 0; kiln__pass_on(o, KILN_PASS_FUSE_LAYERNORM) && ni < g->n_nodes; ni++)
        if (!g->nodes[ni].dead && g->nodes[ni].op_id == KILN_OP_Div) KILN_TRY(match_layernorm(g, o, ni));
    for (int ni = 0; kiln__pass_on(o, KILN_PASS_FUSE_GELU) && ni < g->n_nodes; ni++) {
        if (g->nodes[ni].dead) continue;
        if (g->nodes[ni].op_id == KILN_OP_Erf) KILN_TRY(match_gelu_erf(g, o, ni));
        else if (g->nodes[ni].op_id == KILN_OP_Tanh) KILN_TRY(match_gelu_tanh(g, o, ni));
    }
    for (int ni = 0; kiln__pass_on(o, KILN_PASS_FUSE_ATTENTION) && ni < g->n_nodes; ni++)
        if (!g->nodes[ni].dead && g->nodes[ni].op_id == KILN_OP_Softmax) KILN_TRY(match_attention(g, o, ni));
    for (int ni = 0; kiln__pass_on(o, KILN_PASS_FUSE_MATMUL) && ni < g->n_nodes; ni++)
        if (!g->nodes[ni].dead && (g->nodes[ni].op_id == KILN_OP_MatMul || g->nodes[ni].op_id == KILN_OP_Gemm))
            KILN_TRY(match_matmul(g, o, ni));
    for (int ni = 0; kiln__pass_on(o, KILN_PASS_FUSE_QKV) && ni < g->n_nodes; ni++)
        if (!g->nodes[ni].dead && g->nodes[ni].op_id == KILN_OP_Attention) KILN_TRY(match_qkv(g, o, ni));
    return KILN_OK;
}
