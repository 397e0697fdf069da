/* fuse_transformer.c -- transformer rewrites of the graph optimizer.
 *
 * In order:
 *   1. layout clean-up: Transpose of Transpose (composed, or removed when the
 *      result is the identity), Reshape of Reshape (the first one skipped),
 *      Concat of one input (removed), Concat of Slices (torch.roll) into a
 *      Gather (kiln__opt_concat_of_slices, fuse_movement.c);
 *   2. decomposed LayerNorm as PyTorch exports it before opset 17
 *        ReduceMean(x) -> Sub -> Pow 2 -> ReduceMean -> Add eps -> Sqrt -> Div
 *        -> Mul gamma (-> Add beta)
 *      into LayerNormalization (the ONNX op; its kernel is in nn_norm.c);
 *      and RMSNorm as T5, LLaMA and the like export it (section 2b)
 *        [Cast fp32] -> Pow 2 (or x*x) -> ReduceMean(last axis) -> Add eps ->
 *        Sqrt -> Div, or 1/Sqrt, Reciprocal(Sqrt) or Pow -0.5 and Mul
 *        -> [Cast] -> Mul weight
 *      into RMSNormalization;
 *   3. GELU, erf form x * 0.5 * (1 + erf(x / sqrt 2)) (three orders of the
 *      multiplications) and tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
 *      x^3))), into kiln.Gelu;
 *   4. MatMul (constant 2-D B) or Gemm (transA 0, constant B; alpha and beta
 *      folded into scaled copies of B and C; a Reshape that flattens its
 *      input to 2-D and one that restores the leading dims after it are
 *      folded in: GPT-2's Conv1D), + Add of a constant bias along the last
 *      axis, + Add of a residual tensor of the output's shape, + Relu or
 *      kiln.Gelu, into kiln.FusedMatMul; before it, a constant per-feature
 *      Mul after the layer (ConvNeXt's layer scale, through its Transpose)
 *      folded into the weights and bias (fold_layer_scale), and after the
 *      layer ConvNeXt's Transpose(0,3,1,2) -> Add(residual) taken in the
 *      layer's own frame (the residual read as [N, H, W, C]);
 *   5. attention: MatMul(Q, K^T) -> Div or Mul by a constant -> Add mask ->
 *      Softmax(last axis) -> MatMul(., V) into kiln.Attention. The head
 *      splitting around it (Reshape [B,S,H*D] -> [B,S,H,D] + Transpose to
 *      [B,H,S,D] or [B,H,D,S]) and the merge after it (Transpose back +
 *      Reshape to [B,S,H*D]) are folded into the layer's operand layouts, so
 *      no transpose is left; also torch 1.13's nn.MultiheadAttention, whose
 *      rank-3 [B*H,S,D] operands are read from [S,B,H*D] (layout SBHD);
 *   6. the three projections making an Attention's Q, K and V from one input
 *      into one FusedMatMul with the weights side by side (Attention layout
 *      KILN_ATTN_QKV); or Q, K and V as a Split of one packed projection
 *      (GPT-2), or as three Slices of one (torch's nn.MultiheadAttention),
 *      read in that layout (KILN_ATTN_SQKV when sequence first; cross
 *      attention's K and V as two Slices of one: KILN_ATTN_KV/SKV); and the
 *      Transposes of a batch_first nn.MultiheadAttention dropped around the
 *      projections next to the Attention.
 * Each fusion is made only where the target's backend supports the new node.
 * The fused node replaces the pattern's last node and is named after all the
 * nodes it came from ("a+b+c"). */
#include "passes/pattern.h"

#include "backends/backend.h"
#include "ops/fused_transformer.h"
#include "ops/nn_attrs.h"
#include "ops/reduce_attrs.h"
#include "ops/tensor_internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

#define MAX_PAT 32

/* A pattern being collected: node indices (in graph order of the pattern).
 * One that outgrows MAX_PAT is never committed (overflow). */
typedef struct pat {
    int nodes[MAX_PAT];
    int n;
    bool overflow;
} pat;

static void pat_add(pat *p, int ni) {
    if (p->n < MAX_PAT) p->nodes[p->n++] = ni;
    else p->overflow = true;
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

static bool near(double x, double want) { return fabs(x - want) <= 1e-6 * fabs(want); }

static bool const_scalar_near(const kiln_graph *g, int v, double want) {
    double x;
    return kiln__pat_const_scalar(g, v, &x) && near(x, want);
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
    if (p->overflow) return KILN_OK; /* too many nodes to fold: left as they are */
    int last = p->nodes[0];
    for (int i = 0; i < p->n; i++)
        if (p->nodes[i] > last) last = p->nodes[i];
    KILN_TRY(kiln__pat_replace(g, last, op_id, n_in, in, 1, &out, attrs, p->nodes, p->n));
    for (int i = 0; i < p->n; i++)
        if (p->nodes[i] != last) g->nodes[p->nodes[i]].dead = true;
    kiln__graph_relink(g, p->nodes, p->n);
    return KILN_OK;
}

/* Makes every live reader of value `from` read `to` instead, and re-links
 * them with nodes more[0..n_more) (changed by the caller). */
static kiln_status redirect_uses(kiln_graph *g, int from, int to, const int *more, int n_more) {
    int nu = 0;
    const kiln_use *u = kiln__graph_uses(g, from, &nu);
    int *touched = u ? kiln__malloc(sizeof(int) * (size_t)(nu + n_more + 1)) : NULL;
    if (!touched) { /* the readers are not known: a scan, and a full link */
        kiln__graph_note_visits(g, g->n_nodes);
        for (int ni = 0; ni < g->n_nodes; ni++) {
            kiln_node *n = &g->nodes[ni];
            if (n->dead) continue;
            for (int i = 0; i < n->n_in; i++)
                if (n->in[i] == from) n->in[i] = to;
        }
        kiln__clear_error();
        kiln__graph_link(g);
        return KILN_OK;
    }
    int nt = 0;
    for (int k = 0; k < nu; k++) touched[nt++] = u[k].node; /* (u changes with the relink) */
    for (int k = 0; k < nt; k++) {
        kiln_node *n = &g->nodes[touched[k]];
        if (n->dead) continue;
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] == from) n->in[i] = to;
    }
    for (int k = 0; k < n_more; k++) touched[nt++] = more[k];
    kiln__graph_relink(g, touched, nt);
    kiln__free(touched);
    return KILN_OK;
}

/* ======================================================================= */
/* 1. Transpose / Reshape clean-up                                          */
/* ======================================================================= */

static bool static_shape(const kiln_tinfo *t) { return t->rank >= 0 && kiln__numel(t->rank, t->dims) >= 0; }

/* Reshape node n2 of Transpose(Reshape(x, [N, c, d]), [0, 2, 1]) to [a..., d, c],
 * where x is [a..., c, d] and N is the product of a...: the transpose of x's
 * last two dims, as the dynamo exporter writes key.transpose(-2, -1). Fills
 * the pattern and x. */
static bool swaps_last_two(const kiln_graph *g, int n2, int *x, pat *p) {
    const kiln_node *n = &g->nodes[n2];
    int t = sole_producer(g, n->in[0], KILN_OP_Transpose);
    if (t < 0) return false;
    const kiln_transpose_attrs *ta = g->nodes[t].attrs;
    if (ta->n_perm != 3 || ta->perm[0] != 0 || ta->perm[1] != 2 || ta->perm[2] != 1) return false;
    int r1 = sole_producer(g, g->nodes[t].in[0], KILN_OP_Reshape);
    if (r1 < 0) return false;
    const kiln_tinfo *xi = info(g, g->nodes[r1].in[0]), *mi = info(g, g->nodes[r1].out[0]);
    const kiln_tinfo *yi = info(g, n->out[0]);
    if (!static_shape(xi) || !static_shape(mi) || !static_shape(yi) || xi->rank < 3 || mi->rank != 3 ||
        yi->rank != xi->rank)
        return false;
    int r = xi->rank;
    if (mi->dims[0] != kiln__numel(r - 2, xi->dims) || mi->dims[1] != xi->dims[r - 2] ||
        mi->dims[2] != xi->dims[r - 1] || yi->dims[r - 2] != xi->dims[r - 1] || yi->dims[r - 1] != xi->dims[r - 2])
        return false;
    for (int i = 0; i < r - 2; i++)
        if (yi->dims[i] != xi->dims[i]) return false;
    *x = g->nodes[r1].in[0];
    pat_add(p, r1);
    pat_add(p, t);
    pat_add(p, n2);
    return true;
}

/* Dims as a known product and a list of symbols (a product of dims). */
typedef struct dprod {
    int64_t k;
    int n;
    int64_t sym[2 * KILN_MAX_RANK];
} dprod;

/* Multiplies dim d into *p; false when d is unknown or p is full. */
static bool dprod_mul(dprod *p, int64_t d) {
    if (d >= 0) {
        p->k *= d;
        return true;
    }
    if (!KILN_DIM_IS_SYM(d) || p->n >= 2 * KILN_MAX_RANK) return false;
    p->sym[p->n++] = d;
    return true;
}

/* Whether *a and *b are the same product. */
static bool dprod_same(const dprod *a, const dprod *b) {
    if (a->k != b->k || a->n != b->n) return false;
    bool used[2 * KILN_MAX_RANK] = {false};
    for (int i = 0; i < a->n; i++) {
        int j = 0;
        while (j < b->n && (used[j] || b->sym[j] != a->sym[i])) j++;
        if (j == b->n) return false;
        used[j] = true;
    }
    return true;
}

/* Target entry v (int64 [1]) read as Unsqueeze(Mul(a, b)), each factor a
 * dim read at run time (kiln__pat_shape_dim) or a scalar constant: torch
 * 1.13's view(S, B * H, D) of the head split, view(S * B, E) of the merge.
 * Multiplies the factors' dims into *p; false when it is not so made. */
static bool shape_product(const kiln_graph *g, int v, dprod *p) {
    const kiln_tinfo *vi = info(g, v);
    int u = kiln__pat_producer(g, v, KILN_OP_Unsqueeze);
    if (u < 0 || vi->dtype != KILN_DTYPE_INT64 || vi->rank != 1 || vi->dims[0] != 1) return false;
    int m = kiln__pat_producer(g, g->nodes[u].in[0], KILN_OP_Mul);
    if (m < 0 || info(g, g->nodes[m].out[0])->rank != 0) return false;
    for (int i = 0; i < 2; i++) {
        int f = g->nodes[m].in[i], s, a;
        const kiln_value *fv = &g->values[f];
        if ((fv->flags & KILN_VALUE_CONST) && fv->data && fv->info.dtype == KILN_DTYPE_INT64 && fv->info.rank == 0) {
            int64_t c = *(const int64_t *)fv->data;
            if (c < 0) return false;
            p->k *= c;
        } else if (!kiln__pat_shape_dim(g, f, &s, &a) || !dprod_mul(p, info(g, s)->dims[a])) {
            return false;
        }
    }
    return true;
}

/* The constant equal to Reshape node ri's target for every input shape the
 * engine accepts, when the target is a Concat (axis 0) of int64 constants
 * and dims read at run time through Shape (kiln__pat_shape_dim), as the
 * exporters write t.view(t.size(0), t.size(1), H, D) of a model with dynamic
 * axes: entry j that is dim a of value s becomes 0 (ONNX Reshape with
 * allowzero 0: copy the input's dim j) when that dim is the input's dim j,
 * being the same value and axis, or the same symbolic dim (inputs sharing a
 * dim's name are checked to agree at run time); a dim known at build time
 * becomes its value. One entry may be a product of such dims and constants
 * (shape_product: torch 1.13's [S, B*H, D] head split, a product of
 * symbolic dims that kiln's dims do not express): it becomes -1 when it is
 * what is left of the input's element count, the input's dims and the
 * other entries being products of known values and symbols. Fills
 * t[0..*n); false when any entry is none of these. */
static bool reshape_target_of_dims(const kiln_graph *g, int ri, int64_t *t, int *n) {
    const kiln_node *r = &g->nodes[ri];
    if (r->n_in < 2 || r->in[1] < 0 || ((const kiln_reshape_attrs *)r->attrs)->allowzero) return false;
    int c = kiln__pat_producer(g, r->in[1], KILN_OP_Concat);
    const kiln_tinfo *xi = info(g, r->in[0]);
    if (c < 0 || xi->rank < 0 || info(g, r->in[1])->dtype != KILN_DTYPE_INT64) return false;
    int axis = ((const kiln_axis_attrs *)g->nodes[c].attrs)->axis;
    if (axis != 0 && axis != -1) return false;
    *n = 0;
    int prod_at = -1;
    dprod whole = {.k = 1}, parts = {.k = 1};
    for (int i = 0; i < g->nodes[c].n_in; i++) {
        int p = g->nodes[c].in[i], s, a;
        const kiln_value *pv = &g->values[p];
        if ((pv->flags & KILN_VALUE_CONST) && pv->data && pv->info.dtype == KILN_DTYPE_INT64 && pv->info.rank == 1) {
            if (pv->info.dims[0] > KILN_MAX_RANK - *n) return false;
            for (int64_t k = 0; k < pv->info.dims[0]; k++) t[(*n)++] = ((const int64_t *)pv->data)[k];
            continue;
        }
        if (*n >= KILN_MAX_RANK) return false;
        if (!kiln__pat_shape_dim(g, p, &s, &a)) {
            if (prod_at >= 0 || !shape_product(g, p, &parts)) return false;
            prod_at = *n;
            t[(*n)++] = -1;
            continue;
        }
        int64_t d = info(g, s)->dims[a];
        if (*n < xi->rank && ((s == r->in[0] && a == *n) || (d != KILN_DIM_UNKNOWN && d == xi->dims[*n])))
            t[(*n)++] = 0;
        else if (d > 0)
            t[(*n)++] = d;
        else
            return false;
    }
    if (*n == 0) return false;
    if (prod_at < 0) return true;
    /* the product is what is left: x's element count = the other entries' times it */
    for (int i = 0; i < xi->rank; i++)
        if (!dprod_mul(&whole, xi->dims[i])) return false;
    for (int i = 0; i < *n; i++) {
        if (i == prod_at) continue;
        if (t[i] < 0 || (t[i] == 0 && i >= xi->rank)) return false;
        if (!dprod_mul(&parts, t[i] == 0 ? xi->dims[i] : t[i])) return false;
    }
    return whole.k > 0 && dprod_same(&whole, &parts);
}

/* Reshape targets computed at run time from the dims they copy (above)
 * become constants, so that the Reshape's result has the input's dims
 * (symbolic ones too) and the attention patterns see its shape; the Shape,
 * Gather, Unsqueeze and Concat nodes left unread go, and the graph is
 * inferred again. */
static kiln_status explicit_reshape_targets(kiln_graph *g) {
    bool changed = false;
    for (int ni = 0; ni < g->n_nodes; ni++) {
        if (g->nodes[ni].dead || g->nodes[ni].op_id != KILN_OP_Reshape) continue;
        int64_t t[KILN_MAX_RANK];
        int n, shape;
        if (!reshape_target_of_dims(g, ni, t, &n)) continue;
        int64_t sd[1] = {n};
        const char *base = g->values[g->nodes[ni].in[1]].name;
        KILN_TRY(kiln__graph_add_const(g, base ? base : "reshape_shape", KILN_DTYPE_INT64, 1, sd, t, &shape));
        g->nodes[ni].in[1] = shape;
        changed = true;
    }
    if (!changed) return KILN_OK;
    KILN_TRY(kiln__pass_dce(g));
    KILN_TRY(kiln__graph_infer(g));
    kiln__graph_link(g);
    return KILN_OK;
}

/* Whether Dropout node n copies its input: training_mode absent or a constant
 * false (or the ratio a constant 0), the mask not read, the output no graph
 * output. */
static bool inference_dropout(const kiln_graph *g, const kiln_node *n) {
    int train = n->n_in > 2 ? n->in[2] : -1, ratio = n->n_in > 1 ? n->in[1] : -1;
    const kiln_value *tv = train >= 0 ? &g->values[train] : NULL;
    bool off = !tv || ((tv->flags & KILN_VALUE_CONST) && tv->info.dtype == KILN_DTYPE_BOOL &&
                       kiln__numel(tv->info.rank, tv->info.dims) == 1 && !*(const uint8_t *)tv->data);
    if (!off && !kiln__pat_const_is(g, ratio, 0.0)) return false;
    int mask = n->n_out > 1 ? n->out[1] : -1;
    if (mask >= 0 && (g->values[mask].n_uses > 0 || kiln__graph_is_output(g, mask))) return false;
    return n->in[0] >= 0 && !kiln__graph_is_output(g, n->out[0]);
}

/* Whether Pad or Slice node n gives its input unchanged: the same known
 * shape out as in, a Pad's pads all 0, a Slice's steps absent or all 1 (a
 * whole range then). torchvision's Swin pads to a multiple of the window and
 * slices the padding off again, both no-ops where the size is a multiple
 * already (swin_t at 224: 15 Pads, each with a Cast to float32 and back in
 * an fp16 plan, and 24 Slices). */
static bool identity_pad_slice(const kiln_graph *g, const kiln_node *n) {
    if (n->op_id != KILN_OP_Pad && n->op_id != KILN_OP_Slice) return false;
    if (n->in[0] < 0 || kiln__graph_is_output(g, n->out[0])) return false;
    const kiln_tinfo *x = info(g, n->in[0]), *y = info(g, n->out[0]);
    if (!static_shape(x) || x->rank != y->rank || x->dtype != y->dtype) return false;
    for (int i = 0; i < x->rank; i++)
        if (x->dims[i] != y->dims[i]) return false;
    if (n->op_id == KILN_OP_Pad) return n->n_in > 1 && kiln__pat_const_is(g, n->in[1], 0.0);
    return n->n_in < 5 || n->in[4] < 0 || kiln__pat_const_is(g, n->in[4], 1.0);
}

static kiln_status opt_layout(kiln_graph *g, const kiln_optimize_opts *o) {
    KILN_TRY(explicit_reshape_targets(g));
    for (int ni = 0; ni < g->n_nodes; ni++) {
        if (g->nodes[ni].dead || g->nodes[ni].op_id != KILN_OP_Reshape) continue;
        pat pt = {.n = 0};
        int x;
        if (!swaps_last_two(g, ni, &x, &pt)) continue;
        int r = info(g, x)->rank, y = g->nodes[ni].out[0];
        kiln_transpose_attrs c = {.n_perm = r};
        for (int i = 0; i < r; i++) c.perm[i] = i;
        c.perm[r - 2] = r - 1;
        c.perm[r - 1] = r - 2;
        if (!kiln__pat_supports(g, o->device, KILN_OP_Transpose, 1, &x, 1, &y, &c)) continue;
        KILN_TRY(pat_commit(g, &pt, KILN_OP_Transpose, 1, &x, y, &c));
    }
    for (int ni = 0; ni < g->n_nodes; ni++) {
        kiln_node *n = &g->nodes[ni];
        if (n->dead) continue;
        if (n->op_id == KILN_OP_Concat && n->n_in == 1 && n->in[0] >= 0 && !kiln__graph_is_output(g, n->out[0])) {
            /* one input: its value (torch 2.x's GPT-2 concatenates the new keys
             * and values to a cache that is not there) */
            n->dead = true;
            KILN_TRY(redirect_uses(g, n->out[0], n->in[0], &ni, 1));
            continue;
        }
        if ((n->op_id == KILN_OP_Dropout && inference_dropout(g, n)) || identity_pad_slice(g, n)) {
            /* a copy (torch 1.13 exports F.dropout(p, training=False) as Dropout with
             * training_mode false: torchvision's Swin after its Softmax, where it kept
             * the attention from fusing) */
            n->dead = true;
            KILN_TRY(redirect_uses(g, n->out[0], n->in[0], &ni, 1));
            continue;
        }
        if (n->op_id == KILN_OP_Concat) {
            KILN_TRY(kiln__opt_concat_of_slices(g, o, ni)); /* fuse_movement.c */
            continue;
        }
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
            if (ident && !kiln__graph_is_output(g, y)) {
                g->nodes[p].dead = true;
                n->dead = true;
                KILN_TRY(redirect_uses(g, y, x, (const int[2]){p, ni}, 2));
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
            KILN_TRY(kiln__graph_add_const(g, base, KILN_DTYPE_INT64, 1, sd, yi.dims, &shape));
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
    if (sub < 0 || sqrt_n < 0 || g->values[d].n_uses != 2 || kiln__graph_is_output(g, d)) return KILN_OK;
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
    if (var < 0 || !kiln__pat_const_scalar(g, epsv, &eps)) return KILN_OK;
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
/* 2b. RMSNorm                                                               */
/* ======================================================================= */

static bool is_float_type(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT32 || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16;
}

/* 1/sqrt(t) computed from t by t's only reader (and the steps in between
 * by theirs): Pow(t, -0.5), or Sqrt(t) (or Pow(t, 0.5)) followed by
 * Reciprocal or Div(1, .). Sets *inv to that value; a Sqrt followed by
 * anything else matches too, with *inv the square root and *is_sqrt set
 * (the caller then wants a Div by it). Adds the nodes to p. */
static bool rms_inverse(const kiln_graph *g, int t, int *inv, bool *is_sqrt, pat *p) {
    int c = kiln__pat_sole_consumer(g, t);
    if (c < 0 || g->nodes[c].in[0] != t) return false;
    const kiln_node *n = &g->nodes[c];
    if (n->op_id == KILN_OP_Pow && const_scalar_near(g, n->in[1], -0.5)) {
        pat_add(p, c);
        *inv = n->out[0];
        *is_sqrt = false;
        return true;
    }
    if (n->op_id != KILN_OP_Sqrt && !(n->op_id == KILN_OP_Pow && const_scalar_near(g, n->in[1], 0.5))) return false;
    pat_add(p, c);
    int s = n->out[0], r = kiln__pat_sole_consumer(g, s);
    if (r >= 0 && g->nodes[r].op_id == KILN_OP_Reciprocal) {
        pat_add(p, r);
        *inv = g->nodes[r].out[0];
        *is_sqrt = false;
        return true;
    }
    if (r >= 0 && g->nodes[r].op_id == KILN_OP_Div && g->nodes[r].in[1] == s && g->nodes[r].in[0] != s &&
        const_scalar_near(g, g->nodes[r].in[0], 1.0)) {
        pat_add(p, r);
        *inv = g->nodes[r].out[0];
        *is_sqrt = false;
        return true;
    }
    *inv = s;
    *is_sqrt = true;
    return true;
}

/* From the ReduceMean `rm` of the squares: x * rsqrt(mean(x^2) + eps) * w.
 * Every intermediate value has its one reader in the pattern (x may have
 * others, unless it is an fp32 Cast the layer takes in: then only the
 * pattern reads it); the mean is over the last axis only, eps a scalar
 * constant, w a float constant broadcasting within the last axis. */
static kiln_status match_rmsnorm(kiln_graph *g, const kiln_optimize_opts *o, int rm) {
    int k = 0;
    if (!reduce_last_axes(g, rm, &k) || k != 1) return KILN_OK;
    pat p = {.n = 0};
    /* the squares: Pow(x, 2) or Mul(x, x) */
    int sqn = sole_producer(g, g->nodes[rm].in[0], 0);
    if (sqn < 0) return KILN_OK;
    const kiln_node *sq = &g->nodes[sqn];
    int x = sq->in[0];
    if (!((sq->op_id == KILN_OP_Pow && const_scalar_near(g, sq->in[1], 2.0)) ||
          (sq->op_id == KILN_OP_Mul && sq->n_in == 2 && sq->in[1] == x)))
        return KILN_OK;
    const kiln_dtype xt = info(g, x)->dtype;
    if (!is_float_type(xt) || info(g, x)->rank < 1) return KILN_OK;
    pat_add(&p, sqn);
    pat_add(&p, rm);
    /* + eps */
    int add = sole_consumer_op(g, g->nodes[rm].out[0], KILN_OP_Add);
    double eps;
    if (add < 0 || !kiln__pat_const_scalar(g, other_input(g, add, g->nodes[rm].out[0]), &eps) || !(eps >= 0.0) ||
        !(eps <= FLT_MAX))
        return KILN_OK;
    pat_add(&p, add);
    /* x / sqrt(.) or x * rsqrt(.) */
    int inv, nrm = -1;
    bool is_sqrt;
    if (!rms_inverse(g, g->nodes[add].out[0], &inv, &is_sqrt, &p)) return KILN_OK;
    int c = kiln__pat_sole_consumer(g, inv);
    if (c < 0) return KILN_OK;
    const kiln_node *cn = &g->nodes[c];
    if (is_sqrt ? (cn->op_id == KILN_OP_Div && cn->in[0] == x && cn->in[1] == inv)
                : (cn->op_id == KILN_OP_Mul && other_input(g, c, inv) == x && x != inv))
        nrm = cn->out[0];
    if (nrm < 0) return KILN_OK;
    pat_add(&p, c);
    /* [Cast to the weight's type] -> Mul(w) */
    int cur = nrm;
    int oc = sole_consumer_op(g, cur, KILN_OP_Cast);
    if (oc >= 0) {
        if (!is_float_type(info(g, g->nodes[oc].out[0])->dtype)) return KILN_OK;
        pat_add(&p, oc);
        cur = g->nodes[oc].out[0];
    }
    int mw = sole_consumer_op(g, cur, KILN_OP_Mul);
    int w = mw >= 0 ? other_input(g, mw, cur) : -1;
    if (w < 0 || w == cur || !(g->values[w].flags & KILN_VALUE_CONST) || info(g, w)->rank > 1) return KILN_OK;
    pat_add(&p, mw);
    const int y = g->nodes[mw].out[0];
    const kiln_dtype yt = info(g, y)->dtype;
    if (!is_float_type(yt) || info(g, w)->dtype != yt) return KILN_OK;
    /* x = Cast(x0) to float32: the layer reads x0 and computes in fp32 as the
     * Cast made it, where x0 is float32 (an identity Cast, which torch's
     * .to(float32) exports: its other readers, the residual, read x0 too)
     * or of y's type and only the pattern reads x (the squares once or
     * twice, the normalization) */
    int X = x, x0 = -1;
    bool drop_cast = false;
    const int xc = kiln__pat_producer(g, x, KILN_OP_Cast);
    if (xc >= 0 && xt == KILN_DTYPE_FLOAT32) {
        x0 = g->nodes[xc].in[0];
        const kiln_dtype t0 = info(g, x0)->dtype;
        const bool only_here = g->values[x].n_uses == (sq->op_id == KILN_OP_Mul ? 2 : 1) + 1;
        if (t0 == xt || (t0 == yt && only_here)) {
            X = x0;
            drop_cast = !kiln__graph_is_output(g, x) && p.n < MAX_PAT;
        }
    }
    /* y keeps X's shape: the weight broadcasts within the last axis */
    const kiln_tinfo *xi = info(g, X), *yi = info(g, y);
    if (yi->rank != xi->rank) return KILN_OK;
    for (int i = 0; i < xi->rank; i++)
        if (yi->dims[i] != xi->dims[i]) return KILN_OK;
    kiln_ln_attrs ra = {.axis = -1, .epsilon = (float)eps, .stash_type = 1};
    int in[2] = {X, w};
    if (!kiln__pat_supports(g, o->device, KILN_OP_RMSNormalization, 2, in, 1, &y, &ra)) return KILN_OK;
    if (drop_cast) {
        KILN_TRY(redirect_uses(g, x, x0, NULL, 0)); /* the same values (the pattern's own readers die with it) */
        memmove(p.nodes + 1, p.nodes, sizeof(int) * (size_t)p.n); /* first: it names the layer */
        p.nodes[0] = xc;
        p.n++;
    }
    return pat_commit(g, &p, KILN_OP_RMSNormalization, 2, in, y, &ra);
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

/* A new float32 constant: v's values, element i times s[(i / inner) % N]
 * (s one value or N), where v's elements scaled together are `inner` apart. */
static kiln_status feature_scaled_copy(kiln_graph *g, int v, const float *s, int64_t ns, int64_t N,
                                       int64_t inner, int *out) {
    int64_t n;
    const float *x = kiln__pat_const_f32(g, v, &n);
    float *y = kiln__malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!x || !y) {
        kiln__free(y);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (optimizer)");
    }
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s[ns == 1 ? 0 : (i / inner) % N];
    kiln_tinfo t = *info(g, v);
    char base[200];
    snprintf(base, sizeof base, "%s", g->values[v].name ? g->values[v].name : "scaled");
    kiln_status st = kiln__graph_add_const(g, base, KILN_DTYPE_FLOAT32, t.rank, t.dims, y, out);
    kiln__free(y);
    return st;
}

/* A new float32 constant holding s times constant v. */
static kiln_status scaled_copy(kiln_graph *g, int v, float s, int *out) {
    return feature_scaled_copy(g, v, &s, 1, 1, 1, out);
}

/* Gives value v (written by one node) a new name "<v>/<suffix>" for its
 * producer and readers: a rewrite changed what it holds (scaled it, added
 * a residual to it), and kiln debug compare must not compare it with the
 * model's tensor of that name. Sets *out to the new value. */
static kiln_status renamed_value(kiln_graph *g, int v, const char *suffix, int *out) {
    kiln_tinfo t = *info(g, v);
    int prod = g->values[v].producer;
    char name[240];
    snprintf(name, sizeof name, "%.200s/%s", g->values[v].name ? g->values[v].name : "value", suffix);
    KILN_TRY(kiln__graph_add_value(g, kiln__graph_find_value(g, name) < 0 ? name : NULL, out));
    t.data = NULL;
    g->values[*out].info = t;
    for (int k = 0; prod >= 0 && k < g->nodes[prod].n_out; k++)
        if (g->nodes[prod].out[k] == v) g->nodes[prod].out[k] = *out;
    return redirect_uses(g, v, *out, &prod, prod >= 0 ? 1 : 0);
}

/* Whether constant s broadcasts over a rank-r tensor along axis `axis`
 * only (N values there, or one value). */
static bool scales_axis(const kiln_graph *g, int s, int r, int axis, int64_t N) {
    int64_t n;
    if (!kiln__pat_const_f32(g, s, &n) || (n != N && n != 1)) return false;
    const kiln_tinfo *si = info(g, s);
    if (si->rank > r) return false;
    for (int j = 0; j < si->rank; j++)
        if (si->dims[j] != 1 && r - si->rank + j != axis) return false;
    return true;
}

/* The layer scale after a linear layer: Mul(y, g) with y = x W (+ b), seen
 * through a Transpose of y, and g a float32 constant that varies along y's
 * last axis (the layer's N output features) alone. torchvision's ConvNeXt:
 * Linear -> Transpose(0,3,1,2) -> Mul by gamma [C, 1, 1]. (x W + b) g =
 * x (W g) + b g: W's columns and b are scaled (new constants; the layer's
 * own stay for any other reader) and the Mul goes, its output written by
 * the node before it. Exact up to rounding: each product is multiplied by
 * g before the sum instead of after. */
static kiln_status fold_layer_scale(kiln_graph *g, int mul) {
    for (int side = 0; side < 2; side++) {
        const kiln_node *m = &g->nodes[mul];
        int s = m->in[side], x = m->in[1 - side];
        if (m->n_in != 2 || s < 0 || x < 0 || !kiln__pat_const_f32(g, s, NULL) || !is_f32(g, x)) continue;
        int r = info(g, x)->rank, feat = r - 1, y = x, t = kiln__pat_sole_use(g, x) ?
                                                            kiln__pat_producer(g, x, KILN_OP_Transpose) : -1;
        if (r < 2) continue;
        if (t >= 0) {
            const kiln_transpose_attrs *ta = g->nodes[t].attrs;
            if (ta->n_perm != r) continue;
            for (int i = 0; i < r; i++)
                if (ta->perm[i] == r - 1) feat = i;
            y = g->nodes[t].in[0];
        }
        int badd = sole_producer(g, y, KILN_OP_Add), bslot = -1, z = y;
        for (int k = 0; badd >= 0 && k < 2; k++) {
            int o = g->nodes[badd].in[1 - k];
            if (kiln__pat_const_f32(g, o, NULL) && !kiln__pat_const_f32(g, g->nodes[badd].in[k], NULL)) {
                bslot = 1 - k;
                z = g->nodes[badd].in[k];
            }
        }
        if (badd >= 0 && bslot < 0) continue;
        int mm = kiln__pat_sole_use(g, z) ? kiln__pat_producer(g, z, 0) : -1;
        if (mm < 0 || (g->nodes[mm].op_id != KILN_OP_MatMul && g->nodes[mm].op_id != KILN_OP_Gemm)) continue;
        const kiln_node *mn = &g->nodes[mm];
        int B = mn->in[1], C = mn->op_id == KILN_OP_Gemm && mn->n_in > 2 ? mn->in[2] : -1;
        bool trans_b = false;
        if (mn->op_id == KILN_OP_Gemm) {
            const kiln_gemm_attrs *ga = mn->attrs;
            trans_b = ga->trans_b != 0;
            if (ga->beta == 0.0f) C = -1; /* not read */
        }
        const kiln_tinfo *bi = info(g, B);
        if (!kiln__pat_const_f32(g, B, NULL) || bi->rank != 2 || info(g, mn->in[0])->rank < 2) continue;
        int64_t N = bi->dims[trans_b ? 0 : 1], ns;
        if (info(g, y)->rank != r || info(g, y)->dims[r - 1] != N) continue;
        if (C >= 0 && !is_bias(g, C, N, 2)) continue;
        if (bslot >= 0 && !is_bias(g, g->nodes[badd].in[bslot], N, r)) continue;
        if (!scales_axis(g, s, r, feat, N)) continue;
        const float *sv = kiln__pat_const_f32(g, s, &ns);
        int nb, nbias = -1, nc = -1;
        /* W [K, N]: element i is column i % N; transposed [N, K]: row i / K */
        KILN_TRY(feature_scaled_copy(g, B, sv, ns, N, trans_b ? bi->dims[1] : 1, &nb));
        sv = kiln__pat_const_f32(g, s, NULL); /* (adding a value may move the values) */
        if (bslot >= 0) KILN_TRY(feature_scaled_copy(g, g->nodes[badd].in[bslot], sv, ns, N, 1, &nbias));
        sv = kiln__pat_const_f32(g, s, NULL);
        if (C >= 0) KILN_TRY(feature_scaled_copy(g, C, sv, ns, N, 1, &nc));
        g->nodes[mm].in[1] = nb;
        if (C >= 0) g->nodes[mm].in[2] = nc;
        if (bslot >= 0) g->nodes[badd].in[bslot] = nbias;
        int last = t >= 0 ? t : badd >= 0 ? badd : mm, from[2] = {last, mul}, nv;
        if (last != mm) KILN_TRY(renamed_value(g, z, "kiln_scaled", &nv));
        if (t >= 0 && badd >= 0) KILN_TRY(renamed_value(g, y, "kiln_scaled", &nv));
        g->nodes[last].out[0] = g->nodes[mul].out[0];
        KILN_TRY(kiln__node_merge_sources(g, last, from, 2));
        g->nodes[mul].dead = true;
        int touched[4] = {mm, mul, last, badd >= 0 ? badd : mm};
        kiln__graph_relink(g, touched, 4);
        return KILN_OK;
    }
    return KILN_OK;
}

/* ConvNeXt's residual: the layer's [N, H, W, C] output y -> Transpose(0,3,1,2)
 * -> Add(r) with r [N, C, H, W]. The layer can add r in its own frame,
 * read as [N, H, W, C]: the input of the Transpose(0,3,1,2) making r where
 * there is one (the block before, or a LayerNorm2d), else a new
 * Transpose(r, 0,2,3,1); the Transpose after the layer then writes the
 * Add's output. On the CUDA fp16 plan both Transposes are views of NHWC
 * bytes (cuda_layout.c); on the CPU the Add goes and a Transpose is new
 * only where r is not a Transpose's output (a stage's first block). */
typedef struct residual_nchw {
    int tr, radd, r;  /* the Transpose after the layer, the Add, its other input */
    int res;          /* r read [N, H, W, C]: an existing value, or -1 (to make) */
    bool make;        /* res is new: a Transpose(r, 0,2,3,1) writes it */
} residual_nchw;

static bool perm_is4(const kiln_graph *g, int ni, int a, int b, int c, int d) {
    const kiln_transpose_attrs *t = g->nodes[ni].attrs;
    return t->n_perm == 4 && t->perm[0] == a && t->perm[1] == b && t->perm[2] == c && t->perm[3] == d;
}

static bool residual_through_nchw(const kiln_graph *g, int y, const pat *p, residual_nchw *rn) {
    if (info(g, y)->rank != 4) return false;
    int tr = sole_consumer_op(g, y, KILN_OP_Transpose);
    if (tr < 0 || !perm_is4(g, tr, 0, 3, 1, 2)) return false;
    int t = g->nodes[tr].out[0], radd = sole_consumer_op(g, t, KILN_OP_Add);
    int r = radd >= 0 ? other_input(g, radd, t) : -1;
    if (r < 0 || r == t || !is_f32(g, r) || !kiln__pat_same_shape(info(g, r), info(g, t)) ||
        !kiln__pat_same_shape(info(g, g->nodes[radd].out[0]), info(g, t)))
        return false;
    /* the fused layer takes the place of the pattern's last node: its
     * residual must be made before that */
    int last = p->nodes[0];
    for (int i = 0; i < p->n; i++)
        if (p->nodes[i] > last) last = p->nodes[i];
    int rt = kiln__pat_producer(g, r, KILN_OP_Transpose), res = -1;
    if (rt >= 0 && perm_is4(g, rt, 0, 3, 1, 2) && kiln__pat_same_shape(info(g, g->nodes[rt].in[0]), info(g, y)))
        res = g->nodes[rt].in[0];
    int made_by = g->values[res >= 0 ? res : r].producer;
    if (made_by >= last) return false;
    *rn = (residual_nchw){.tr = tr, .radd = radd, .r = r, .res = res};
    return true;
}

/* Commits match_matmul's pattern p with the residual rn (in[3]): the
 * Transpose after the layer writes the Add's output, and r is transposed
 * to [N, H, W, C] by a new node where rn->res was made for it. */
static kiln_status commit_residual_nchw(kiln_graph *g, const pat *p, const residual_nchw *rn, const int *in,
                                        int y, const kiln_fused_matmul_attrs *fa) {
    if (p->overflow) return KILN_OK;
    int ny;
    KILN_TRY(renamed_value(g, y, "kiln_residual", &ny));
    g->nodes[rn->tr].out[0] = g->nodes[rn->radd].out[0];
    int from[2] = {rn->tr, rn->radd};
    KILN_TRY(kiln__node_merge_sources(g, rn->tr, from, 2));
    g->nodes[rn->radd].dead = true;
    kiln__graph_relink(g, from, 2);
    KILN_TRY(pat_commit(g, p, KILN_OP_FusedMatMul, 4, in, ny, fa));
    if (!rn->make) return KILN_OK;
    int n0 = g->n_nodes, after = g->values[rn->r].producer, r = rn->r, res = rn->res, ni;
    kiln_transpose_attrs ta = {.n_perm = 4, .perm = {0, 2, 3, 1}};
    char name[240];
    snprintf(name, sizeof name, "%.200s/kiln_nhwc", g->values[r].name ? g->values[r].name : "residual");
    KILN_TRY(kiln__graph_add_node(g, KILN_OP_Transpose, name, 1, &r, 1, &res, &ta, &ni));
    g->nodes[ni].added = true; /* no ONNX node behind it */
    g->nodes[ni].device = g->nodes[after >= 0 ? after : rn->tr].device;
    return kiln__nodes_place_after(g, n0, &after);
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
        /* C not read (beta 0) but a rows dim other than 1 against rows M
         * not known to match: the Gemm's check that C broadcasts to [M, N]
         * stays, so that a run at another M fails as the unfused plan does
         * (test_optimizer_diff's test_gemm_beta0_c_rows) */
        const kiln_tinfo *ci = n->n_in > 2 && n->in[2] >= 0 ? info(g, n->in[2]) : NULL;
        if (beta == 0.0f && ci && ci->rank == 2 && ci->dims[0] != 1 && (ai->dims[0] < 0 || ci->dims[0] != ai->dims[0]))
            return KILN_OK;
    }
    /* beta scales Gemm's C only: a bias Add after a Gemm whose C is absent
     * or not read (beta 0) is taken as it is */
    bool bias_is_c = bias >= 0;
    int64_t N = bi->dims[fa.trans_b ? 0 : 1];
    pat p = {.n = 0};
    pat_add(&p, mm);
    int y = n->out[0];
    /* Linear layers applied to a flattened view (GPT-2's Conv1D: Reshape
     * x [.., K] -> [M, K], Gemm, Reshape -> [.., N]): the layer reads x and
     * writes the second Reshape's output (the same bytes), so that the bias,
     * residual and activation after it fuse too */
    int r1 = ai->rank == 2 ? sole_producer(g, A, KILN_OP_Reshape) : -1;
    int r2 = r1 >= 0 ? sole_consumer_op(g, y, KILN_OP_Reshape) : -1;
    if (r2 >= 0) {
        int x = g->nodes[r1].in[0], z = g->nodes[r2].out[0];
        const kiln_tinfo *xi = info(g, x), *zi = info(g, z);
        bool flat = is_f32(g, x) && xi->rank >= 3 && zi->rank == xi->rank &&
                    xi->dims[xi->rank - 1] == ai->dims[1] && zi->dims[zi->rank - 1] == N;
        for (int i = 0; flat && i < xi->rank - 1; i++)
            if (xi->dims[i] == KILN_DIM_UNKNOWN || zi->dims[i] != xi->dims[i]) flat = false;
        if (flat) {
            pat_add(&p, r1);
            pat_add(&p, r2);
            A = x;
            y = z;
        }
    }
    int out_rank = info(g, y)->rank;
    if (bias >= 0 && !is_bias(g, bias, N, out_rank)) return KILN_OK;
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
    residual_nchw rn = {.tr = -1, .res = -1};
    if (radd < 0 && residual_through_nchw(g, y, &p, &rn)) {
        /* the layer adds the residual in its own [N, H, W, C] frame (below) */
        if (rn.res < 0) {
            char name[240];
            snprintf(name, sizeof name, "%.200s/kiln_nhwc", g->values[rn.r].name ? g->values[rn.r].name : "residual");
            rn.make = true;
            KILN_TRY(kiln__graph_add_value(g, kiln__graph_find_value(g, name) < 0 ? name : NULL, &rn.res));
            g->values[rn.res].info = *info(g, y);
            g->values[rn.res].info.data = NULL;
        }
        int in[4] = {A, B, bias, rn.res};
        if (kiln__pat_supports(g, o->device, KILN_OP_FusedMatMul, 4, in, 1, &y, &fa)) {
            if (alpha != 1.0f) KILN_TRY(scaled_copy(g, B, alpha, &in[1]));
            if (bias_is_c && beta != 1.0f) KILN_TRY(scaled_copy(g, bias, beta, &in[2]));
            return commit_residual_nchw(g, &p, &rn, in, y, &fa);
        }
    }
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
    if (bias_is_c && beta != 1.0f) KILN_TRY(scaled_copy(g, bias, beta, &bias));
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

/* If node ni multiplies or divides value x by a scalar constant (and x is
 * its other input), the factor it applies to x. */
static bool scalar_factor(const kiln_graph *g, int ni, int *x, double *f) {
    const kiln_node *n = &g->nodes[ni];
    double c;
    if (n->n_in != 2) return false;
    if (n->op_id == KILN_OP_Div && kiln__pat_const_scalar(g, n->in[1], &c) && c != 0.0 && isfinite(c)) {
        *x = n->in[0];
        *f = 1.0 / c;
        return true;
    }
    if (n->op_id != KILN_OP_Mul) return false;
    for (int i = 0; i < 2; i++)
        if (kiln__pat_const_scalar(g, n->in[1 - i], &c) && isfinite(c)) {
            *x = n->in[i];
            *f = c;
            return true;
        }
    return false;
}

/* Follows v back through Mul/Div by scalar constants whose results have one
 * reader (they fold into the attention's scale); returns the value they
 * scale and multiplies *scale by their factors. */
static int strip_scales(const kiln_graph *g, int v, double *scale, pat *p) {
    for (int guard = 0; guard < 4; guard++) {
        int ni = sole_producer(g, v, 0), x;
        double f;
        if (ni < 0 || !scalar_factor(g, ni, &x, &f)) break;
        if (info(g, x)->rank != info(g, v)->rank) break; /* the factor must not broadcast x */
        *scale *= f;
        pat_add(p, ni);
        v = x;
    }
    return v;
}

static bool attn_operand_sf(const kiln_graph *g, int v, bool is_k, int *src, int64_t *B, int64_t *H, pat *p);

/* A [B, H, S, D] operand v made by Reshape([B*H, S, D] -> [B, H, S, D]) of the
 * sequence-first head split (attn_operand_sf): torch 2.x's
 * nn.MultiheadAttention before scaled_dot_product_attention. Fills the
 * source [S, B, H*D] (layout SBHD) and the absorbed nodes. With B symbolic
 * the [B*H, S, D] is unknown in its first dim; attn_operand_sf reads it
 * from the head split's target. */
static bool attn_operand_sf4(const kiln_graph *g, int v, int *src, int64_t *H, pat *p) {
    int r = kiln__pat_producer(g, v, KILN_OP_Reshape);
    if (r < 0) return false;
    const kiln_tinfo *x = info(g, g->nodes[r].in[0]), *y = info(g, v);
    if (x->rank != 3 || y->rank != 4 || (y->dims[0] <= 0 && !KILN_DIM_IS_SYM(y->dims[0])) || y->dims[1] <= 0 ||
        x->dims[0] != (y->dims[0] > 0 ? y->dims[0] * y->dims[1] : KILN_DIM_UNKNOWN) || x->dims[1] != y->dims[2] ||
        x->dims[2] != y->dims[3] || y->dims[2] <= 0 || y->dims[3] <= 0)
        return false;
    pat sub = {.n = 0};
    int64_t b;
    if (!attn_operand_sf(g, g->nodes[r].in[0], false, src, &b, H, &sub) || b != y->dims[0] || *H != y->dims[1])
        return false;
    if (kiln__pat_sole_use(g, v)) {
        for (int i = 0; i < sub.n; i++) pat_add(p, sub.nodes[i]);
        if (kiln__pat_sole_use(g, g->nodes[r].in[0])) pat_add(p, r);
    }
    return true;
}

/* Operand v of the attention in BHSD order (is_k: K given as [B,H,D,S]).
 * Looks through Transpose(Reshape(x)) head splitting; fills the layout, the
 * source value and the absorbed nodes (only those with no other reader). */
static void attn_operand(const kiln_graph *g, int v, bool is_k, int *layout, int *src, int64_t *H, pat *p) {
    *src = v;
    *layout = is_k ? KILN_ATTN_BHDS : KILN_ATTN_BHSD;
    *H = 0;
    if (!is_k && info(g, v)->rank == 4 && attn_operand_sf4(g, v, src, H, p)) {
        *layout = KILN_ATTN_SBHD;
        return;
    }
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
        pat sub = {.n = 0};
        int64_t h;
        if (attn_operand_sf4(g, *src, src, &h, &sub)) {
            *layout = KILN_ATTN_SBHD;
            *H = h;
        }
        if (kiln__pat_sole_use(g, v)) {
            pat_add(p, t);
            for (int i = 0; i < sub.n; i++) pat_add(p, sub.nodes[i]);
        }
    }
}

/* The scores' shape: [B, H, Sq, Sk], or [B*H, Sq, Sk] (rank 3: the
 * sequence-first form of torch's nn.MultiheadAttention), dims known. */
typedef struct sshape {
    int rank;
    int64_t d[4];
} sshape;

/* Whether value m (rank <= the scores', dims known) broadcasts into the
 * scores' shape sd. The rank-3 scores' B*H may be unknown (B symbolic): a
 * mask's unknown dim there is taken, and attn_operands_sf has mask_as4
 * prove it B*H. */
static bool broadcasts_into(const kiln_graph *g, int m, const sshape *sd) {
    const kiln_tinfo *mi = info(g, m);
    if (mi->rank < 0 || mi->rank > sd->rank) return false;
    for (int i = 0; i < mi->rank; i++) {
        int64_t md = mi->dims[i], fd = sd->d[sd->rank - mi->rank + i];
        if (md == KILN_DIM_UNKNOWN && fd == KILN_DIM_UNKNOWN && sd->rank == 3 && i == 0 && mi->rank == 3) continue;
        if (md == KILN_DIM_UNKNOWN || (md != 1 && md != fd)) return false;
    }
    return true;
}

/* Whether value v has the scores' shape sd. */
static bool has_shape(const kiln_graph *g, int v, const sshape *sd) {
    const kiln_tinfo *t = info(g, v);
    if (t->rank != sd->rank) return false;
    for (int i = 0; i < sd->rank; i++)
        if (t->dims[i] != sd->d[i]) return false;
    return true;
}

/* A bool condition for the scores: looks through an Expand that only
 * broadcasts (the kernel broadcasts itself). */
static int cond_source(const kiln_graph *g, int c, const sshape *sd) {
    int e = kiln__pat_producer(g, c, KILN_OP_Expand);
    if (e >= 0 && broadcasts_into(g, g->nodes[e].in[0], sd) && info(g, g->nodes[e].in[0])->dtype == KILN_DTYPE_BOOL)
        return g->nodes[e].in[0];
    return c;
}

/* Whether the chain of single-reader Add / Where / Mul / Div nodes of the
 * scores' shape that makes v starts at a MatMul (depth-limited). */
static bool reaches_qk(const kiln_graph *g, int v, const sshape *sd, int depth) {
    int ni = sole_producer(g, v, 0);
    if (ni < 0 || depth > 12 || !has_shape(g, v, sd)) return false;
    const kiln_node *n = &g->nodes[ni];
    if (n->op_id == KILN_OP_MatMul) return true;
    if (n->op_id == KILN_OP_Add)
        return reaches_qk(g, n->in[0], sd, depth + 1) || reaches_qk(g, n->in[1], sd, depth + 1);
    if (n->op_id == KILN_OP_Where && n->n_in == 3)
        return reaches_qk(g, n->in[1], sd, depth + 1) || reaches_qk(g, n->in[2], sd, depth + 1);
    int x;
    double f;
    return scalar_factor(g, ni, &x, &f) && reaches_qk(g, x, sd, depth + 1);
}

static int mask_as4(const kiln_graph *g, int m, int64_t B, int64_t H);

/* Whether node ni, a scalar_factor of x, gives x's shape: its factor has
 * no more dims than x (and one element). */
static bool keeps_shape(const kiln_graph *g, int ni, int x) {
    int c = other_input(g, ni, x);
    return c >= 0 && info(g, x)->rank >= 0 && info(g, c)->rank <= info(g, x)->rank;
}

/* The Reshape node that views a [B*H, a, b] mask as [B, H, a, b] (m) for
 * the [B, H, Sq, Sk] scores sd: torch 2.x's nn.MultiheadAttention; or -1.
 * B known, or symbolic: B*H is then unknown to kiln, and so may be m's a
 * (view(B, H, -1, S)), the same by the Reshape's element count. */
static int bh_view(const kiln_graph *g, int m, const sshape *sd) {
    int rv = sd->rank == 4 ? sole_producer(g, m, KILN_OP_Reshape) : -1;
    if (rv < 0 || (sd->d[0] <= 0 && !KILN_DIM_IS_SYM(sd->d[0])) || sd->d[1] <= 0) return -1;
    const kiln_tinfo *x3 = info(g, g->nodes[rv].in[0]), *m4 = info(g, m);
    int64_t bh = sd->d[0] > 0 ? sd->d[0] * sd->d[1] : KILN_DIM_UNKNOWN;
    if (x3->rank != 3 || m4->rank != 4 || m4->dims[0] != sd->d[0] || m4->dims[1] != sd->d[1] || x3->dims[0] != bh ||
        x3->dims[1] <= 0 || x3->dims[2] <= 0 || x3->dims[2] != m4->dims[3] ||
        (x3->dims[1] != m4->dims[2] && (bh != KILN_DIM_UNKNOWN || m4->dims[2] != KILN_DIM_UNKNOWN)))
        return -1;
    sshape sdw = {.rank = 3, .d = {bh, sd->d[2], sd->d[3]}};
    return broadcasts_into(g, g->nodes[rv].in[0], &sdw) ? rv : -1;
}

/* Where node w as Where(cond, -inf, m2) or Where(cond, m2, -inf), m2 a
 * float32 tensor broadcasting into the scores: m2, and in *fill_if the cond
 * value that gives -inf; else -1. */
static int where_inf_mask(const kiln_graph *g, int w, const sshape *sd, int *fill_if) {
    const kiln_node *n = &g->nodes[w];
    double f;
    if (n->n_in != 3) return -1;
    for (int i = 1; i <= 2; i++) {
        int m2 = n->in[3 - i];
        if (kiln__pat_const_scalar(g, n->in[i], &f) && isinf(f) && f < 0 && is_f32(g, m2) && broadcasts_into(g, m2, sd) &&
            kiln__numel(info(g, m2)->rank, info(g, m2)->dims) != 1) { /* a tensor, not the fill (unknown count: B*H) */
            *fill_if = i == 1 ? 1 : 0;
            return m2;
        }
    }
    return -1;
}

/* Whether m2 is zeros of cond c's shape: ConstantOfShape(Shape(c)) (c
 * through an identity Cast) of value 0, as torch 1.13 writes
 * key_padding_mask's zeros when the batch is dynamic (a constant when it is
 * not). */
static bool zeros_of_cond_shape(const kiln_graph *g, int m2, int c) {
    int z = kiln__pat_producer(g, m2, KILN_OP_ConstantOfShape);
    if (z < 0) return false;
    const kiln_cos_attrs *ca = g->nodes[z].attrs;
    float v;
    memcpy(&v, ca->value, sizeof v);
    if (info(g, m2)->dtype != KILN_DTYPE_FLOAT32 || v != 0.0f) return false;
    int sh = kiln__pat_producer(g, g->nodes[z].in[0], KILN_OP_Shape), b, e;
    if (sh < 0 || !kiln__pat_shape_range(g, sh, &b, &e) || b != 0 || e != info(g, g->nodes[sh].in[0])->rank)
        return false;
    int x = g->nodes[sh].in[0], cc = kiln__pat_producer(g, c, KILN_OP_Cast);
    return x == c || (cc >= 0 && g->nodes[cc].in[0] == x && info(g, x)->dtype == info(g, c)->dtype);
}

/* The score chain of an attention, read back from the Softmax input:
 *   scores = scale * MatMul(Q, K^T)    (Mul/Div by scalar constants, also on Q and K)
 *   scores = Where(cond, scores, fill) or Where(cond, fill, scores)   (at most one)
 *   scores = scores + m                (each m: a float mask, at most two, or
 *                                       Where(cond, 0, fill) / Where(cond, fill, 0))
 * in this order (what comes later in the computation is read first). */
typedef struct attn_scores {
    int qk;           /* the MatMul node */
    double scale;
    int masks[2], n_masks;
    int cond;         /* bool value or -1 */
    int cond_mode, cond_fill_if;
    float fill;
    /* Swin's shifted windows: masks[win_slot] is the constant mask of a
     * [B, nW, H, Sq, Sk] view of the scores (win_b = B), to be made one of the
     * [B*nW, H, Sq, Sk] scores (window_mask_4d); win_slot -1: none */
    int win_slot;
    int64_t win_b;
} attn_scores;

/* Most elements of a window mask repeated over the batch (window_mask_4d):
 * 8M (32 MiB in float32; swin_t's first stage at batch 32 takes 4.9M, read
 * once a layer where the unfused scores [B*nW, H, 49, 49] go through memory
 * about six times); a larger one is left unfused. */
#define WIN_MASK_MAX ((int64_t)1 << 23)

/* Swin's shifted-window mask (torchvision's shifted_window_attention):
 *   s5 = Reshape(s, [B, nW, H, Sq, Sk]); a = Add(s5, m); Reshape(a, [B*nW, H, Sq, Sk])
 * with m a float32 constant broadcasting into [B, nW, H, Sq, Sk] that does not
 * vary over B (attn_mask.unsqueeze(1).unsqueeze(0): [1, nW, 1, Sq, Sk]).
 * Reshape node rs (reading `a`) and the scores' shape sd: s (the chain, of
 * the scores' shape), m and B; the Add and both Reshapes go into p. */
static bool window_mask(const kiln_graph *g, int rs, const sshape *sd, int *s, int *m, int64_t *B, pat *p) {
    int a = g->nodes[rs].in[0];
    const kiln_tinfo *a5 = info(g, a);
    if (sd->rank != 4 || a5->rank != 5 || a5->dims[0] <= 0 || a5->dims[1] <= 0 ||
        a5->dims[0] * a5->dims[1] != sd->d[0] || a5->dims[2] != sd->d[1] || a5->dims[3] != sd->d[2] ||
        a5->dims[4] != sd->d[3])
        return false;
    int ad = sole_producer(g, a, KILN_OP_Add);
    if (ad < 0) return false;
    for (int i = 0; i < 2; i++) {
        int x5 = g->nodes[ad].in[i], mv = g->nodes[ad].in[1 - i];
        int r5 = sole_producer(g, x5, KILN_OP_Reshape);
        const kiln_tinfo *mi = info(g, mv);
        if (r5 < 0 || !has_shape(g, g->nodes[r5].in[0], sd) || !kiln__pat_const_f32(g, mv, NULL) ||
            mi->rank > 5 || (mi->rank == 5 && mi->dims[0] != 1))
            continue;
        bool fits = true;
        for (int k = 0; k < mi->rank; k++) {
            int64_t md = mi->dims[k], fd = a5->dims[5 - mi->rank + k];
            fits = fits && (md == 1 || md == fd);
        }
        if (!fits) continue;
        *s = g->nodes[r5].in[0];
        *m = mv;
        *B = a5->dims[0];
        pat_add(p, rs);
        pat_add(p, ad);
        pat_add(p, r5);
        return true;
    }
    return false;
}

/* The constant of window_mask's m as a mask of the [B*nW, H, Sq, Sk] scores:
 * m's [nW, h, Sq', Sk'] (h, Sq', Sk' 1 or the full dim) repeated B times
 * along the first dim (not repeated where m does not vary over the windows
 * either). Fails (*out = -1) past WIN_MASK_MAX elements. */
static kiln_status window_mask_4d(kiln_graph *g, int m, int64_t B, int *out) {
    *out = -1;
    const kiln_tinfo *mi = info(g, m);
    int64_t d5[5] = {1, 1, 1, 1, 1};
    for (int k = 0; k < mi->rank; k++) d5[5 - mi->rank + k] = mi->dims[k];
    int64_t reps = d5[1] > 1 ? B : 1, per = d5[1] * d5[2] * d5[3] * d5[4];
    if (per <= 0 || reps > WIN_MASK_MAX / per) return KILN_OK;
    int64_t n4;
    const float *x = kiln__pat_const_f32(g, m, &n4);
    float *y = kiln__malloc(sizeof(float) * (size_t)(reps * per));
    if (!x || !y) {
        kiln__free(y);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (optimizer)");
    }
    for (int64_t b = 0; b < reps; b++) memcpy(y + b * per, x, sizeof(float) * (size_t)per);
    int64_t dims[4] = {reps * d5[1], d5[2], d5[3], d5[4]};
    char base[200];
    snprintf(base, sizeof base, "%s_windows", g->values[m].name ? g->values[m].name : "mask");
    kiln_status st = kiln__graph_add_const(g, base, KILN_DTYPE_FLOAT32, 4, dims, y, out);
    kiln__free(y);
    return st;
}

static bool match_scores(const kiln_graph *g, int s, const sshape *sd, attn_scores *r, pat *p) {
    r->scale = 1.0;
    r->n_masks = 0;
    r->cond = -1;
    r->cond_mode = KILN_ATTN_COND_NONE;
    r->cond_fill_if = 0;
    r->fill = 0.0f;
    r->win_slot = -1;
    r->win_b = 0;
    int phase = 0; /* 0: additions, 1: after a select, 2: scales */
    for (int guard = 0; guard < 12; guard++) {
        int ni = sole_producer(g, s, 0);
        if (ni < 0) return false;
        const kiln_node *n = &g->nodes[ni];
        if (n->op_id == KILN_OP_MatMul) {
            r->qk = ni;
            return has_shape(g, s, sd);
        }
        if (!has_shape(g, s, sd)) return false;
        int x;
        double f;
        int m5, c4;
        int64_t wb;
        if (n->op_id == KILN_OP_Cast && info(g, n->in[0])->dtype == info(g, s)->dtype) { /* identity */
            pat_add(p, ni);
            s = n->in[0];
        } else if (n->op_id == KILN_OP_Reshape && phase == 0 && r->win_slot < 0 && r->n_masks < 2 &&
                   window_mask(g, ni, sd, &c4, &m5, &wb, p)) {
            r->win_slot = r->n_masks;
            r->win_b = wb;
            r->masks[r->n_masks++] = m5;
            s = c4;
        } else if (n->op_id == KILN_OP_Add && phase == 0) {
            /* which input is the chain: the one of the scores' shape that is made by the
             * chain's ops; the other must broadcast into the scores */
            int chain = -1, m = -1;
            for (int i = 0; i < 2 && chain < 0; i++) {
                int a = n->in[i], b = n->in[1 - i];
                if ((broadcasts_into(g, b, sd) || bh_view(g, b, sd) >= 0) && reaches_qk(g, a, sd, 0)) {
                    chain = a;
                    m = b;
                }
            }
            if (chain < 0) return false;
            pat_add(p, ni);
            /* a factor of exactly 1 on the mask: torch 1.13's baddbmm(mask, Q, K^T) (beta = 1) */
            int mul = sole_producer(g, m, 0), mx;
            double one;
            if (mul >= 0 && scalar_factor(g, mul, &mx, &one) && one == 1.0 && keeps_shape(g, mul, mx)) {
                pat_add(p, mul);
                m = mx;
            }
            /* torch 2.x's nn.MultiheadAttention: its [B*H, a, b] mask viewed as [B, H, a, b]
             * (the Where below is then read on the [B*H, Sq, Sk] scores and its
             * operands taken back to [B, H, ...] by mask_as4) */
            int mw = m, rv = bh_view(g, m, sd);
            sshape sdw = *sd;
            if (rv >= 0) {
                mw = g->nodes[rv].in[0];
                sdw = (sshape){.rank = 3, .d = {info(g, mw)->dims[0], sd->d[2], sd->d[3]}};
            }
            int w = kiln__pat_producer(g, mw, KILN_OP_Where);
            double z, fv;
            int m2 = -1, fill_if = 0, c0 = w >= 0 ? g->nodes[w].in[0] : -1;
            if (w >= 0 && r->cond < 0 && info(g, c0)->dtype == KILN_DTYPE_BOOL && broadcasts_into(g, c0, &sdw) &&
                ((kiln__pat_const_scalar(g, g->nodes[w].in[1], &z) && z == 0.0 && kiln__pat_const_scalar(g, g->nodes[w].in[2], &fv)) ||
                 (kiln__pat_const_scalar(g, g->nodes[w].in[2], &z) && z == 0.0 && kiln__pat_const_scalar(g, g->nodes[w].in[1], &fv)) ||
                 (m2 = where_inf_mask(g, w, &sdw, &fill_if)) >= 0)) {
                bool inf_form = m2 >= 0,
                     zeros = inf_form && (kiln__pat_const_is(g, m2, 0.0) || zeros_of_cond_shape(g, m2, c0));
                if (rv >= 0) { /* back to [B, H, ...] */
                    c0 = mask_as4(g, c0, sd->d[0], sd->d[1]);
                    if (inf_form && !zeros) m2 = mask_as4(g, m2, sd->d[0], sd->d[1]);
                    if (c0 < 0 || (inf_form && m2 < 0)) return false;
                }
                if (inf_form) {
                    /* Add(s, Where(cond, -inf, m2)) = s + m2 + (-inf where cond == fill_if):
                     * torch's nn.MultiheadAttention with a key_padding_mask (m2 zeros)
                     * and an attn_mask (m2 that mask) */
                    if (!zeros) {
                        if (r->n_masks == 2) return false;
                        r->masks[r->n_masks++] = m2;
                    }
                    r->cond_fill_if = fill_if;
                    fv = -INFINITY;
                } else { /* Add(s, Where(cond, 0, fill)): fill is added where cond is false */
                    bool fill_in_else = kiln__pat_const_scalar(g, g->nodes[w].in[1], &z) && z == 0.0;
                    r->cond_fill_if = fill_in_else ? 0 : 1;
                }
                r->cond = cond_source(g, c0, sd);
                r->cond_mode = KILN_ATTN_COND_ADD;
                r->fill = (float)fv;
                if (rv >= 0) pat_add(p, rv);
                if (kiln__pat_sole_use(g, mw)) pat_add(p, w); /* read in reverse: Where, then Add */
            } else {
                if (r->n_masks == 2 || !is_f32(g, m) || !broadcasts_into(g, m, sd)) return false;
                r->masks[r->n_masks++] = m;
            }
            s = chain;
        } else if (n->op_id == KILN_OP_Where && phase <= 1 && r->cond < 0) {
            double fv;
            int c = n->in[0], chain;
            if (info(g, c)->dtype != KILN_DTYPE_BOOL || !broadcasts_into(g, c, sd)) return false;
            if (kiln__pat_const_scalar(g, n->in[2], &fv)) { /* Where(cond, s, fill): fill where cond is false */
                chain = n->in[1];
                r->cond_fill_if = 0;
            } else if (kiln__pat_const_scalar(g, n->in[1], &fv)) {
                chain = n->in[2];
                r->cond_fill_if = 1;
            } else {
                return false;
            }
            r->cond = cond_source(g, c, sd);
            r->cond_mode = KILN_ATTN_COND_SELECT;
            r->fill = (float)fv;
            pat_add(p, ni);
            s = chain;
            phase = 1;
        } else if (scalar_factor(g, ni, &x, &f)) {
            r->scale *= f;
            pat_add(p, ni);
            s = x;
            phase = 2;
        } else {
            return false;
        }
    }
    return false;
}

/* Softmax output -> [IsNaN + Where(isnan, 0, p)] -> MatMul(., V): the MatMul
 * node (or -1); *nan_zero set when the NaN rule is there. */
static int skip_identity_cast(const kiln_graph *g, int y, pat *p) {
    int c = sole_consumer_op(g, y, KILN_OP_Cast);
    if (c < 0 || info(g, g->nodes[c].out[0])->dtype != info(g, y)->dtype) return y;
    pat_add(p, c);
    return g->nodes[c].out[0];
}

static int match_probs(const kiln_graph *g, int y, int *nan_zero, pat *p) {
    *nan_zero = 0;
    y = skip_identity_cast(g, y, p);
    if (!kiln__graph_is_output(g, y) && g->values[y].n_uses == 2) {
        int isn = -1, wh = -1, nu = 0;
        const kiln_use *u = kiln__graph_uses(g, y, &nu);
        if (!u) kiln__graph_note_visits(g, g->n_nodes);
        for (int k = 0; k < (u ? nu : g->n_nodes); k++) { /* y's readers (in graph order: the last wins) */
            int ni = u ? u[k].node : k;
            const kiln_node *n = &g->nodes[ni];
            if (n->dead || (u && ((n->op_id == KILN_OP_IsNaN && ni < isn) || (n->op_id == KILN_OP_Where && ni < wh))))
                continue;
            if (n->op_id == KILN_OP_IsNaN && n->in[0] == y) isn = ni;
            else if (n->op_id == KILN_OP_Where && n->n_in == 3 && n->in[2] == y) wh = ni;
        }
        if (isn < 0 || wh < 0 || g->nodes[wh].in[0] != g->nodes[isn].out[0] ||
            !kiln__pat_sole_use(g, g->nodes[isn].out[0]) || !kiln__pat_const_is(g, g->nodes[wh].in[1], 0.0) ||
            kiln__numel(info(g, g->nodes[wh].in[1])->rank, info(g, g->nodes[wh].in[1])->dims) != 1)
            return -1;
        pat_add(p, isn);
        pat_add(p, wh);
        *nan_zero = 1;
        y = skip_identity_cast(g, g->nodes[wh].out[0], p);
    }
    int pv = sole_consumer_op(g, y, KILN_OP_MatMul);
    return pv >= 0 && g->nodes[pv].in[0] == y ? pv : -1;
}

/* Operand v of a rank-3 attention in the sequence-first form of torch's
 * nn.MultiheadAttention: [B*H, S, D] (K: [B*H, D, S]) made by Transpose(1,0,2)
 * (K: (1,2,0)) of Reshape([S, B, H*D] -> [S, B*H, D]). B may be symbolic
 * (an engine over a batch profile): B*H is then a dim kiln's dims do not
 * express, unknown in the Reshape's result, and it is read from the
 * target instead, a constant [S or 0, -1, D] (explicit_reshape_targets
 * makes torch's [S, B*H, D] so): -1 is B*H*D*S/(S*D). Fills the source
 * [S, B, H*D] (layout SBHD), B, H and the absorbed nodes (those with no
 * other reader); false when v is not made so. */
static bool attn_operand_sf(const kiln_graph *g, int v, bool is_k, int *src, int64_t *B, int64_t *H, pat *p) {
    int t = kiln__pat_producer(g, v, KILN_OP_Transpose);
    if (t < 0 || info(g, v)->rank != 3) return false;
    const int32_t *pm = transpose_perm(g, t, 3);
    if (!pm || pm[0] != 1 || pm[1] != (is_k ? 2 : 0) || pm[2] != (is_k ? 0 : 2)) return false;
    int r = kiln__pat_producer(g, g->nodes[t].in[0], KILN_OP_Reshape);
    if (r < 0) return false;
    const kiln_tinfo *x = info(g, g->nodes[r].in[0]), *y = info(g, g->nodes[r].out[0]);
    if (x->rank != 3 || y->rank != 3) return false;
    if (x->dims[0] <= 0 || x->dims[2] <= 0 || y->dims[0] <= 0 || y->dims[2] <= 0 || x->dims[0] != y->dims[0] ||
        x->dims[2] % y->dims[2])
        return false;
    if (x->dims[1] > 0) {
        if (x->dims[1] * (x->dims[2] / y->dims[2]) != y->dims[1]) return false;
    } else { /* B symbolic: the target is [S or 0, -1, D] */
        const kiln_value *tv = &g->values[g->nodes[r].in[1]];
        const int64_t *td = tv->data;
        if (!KILN_DIM_IS_SYM(x->dims[1]) || y->dims[1] != KILN_DIM_UNKNOWN || !(tv->flags & KILN_VALUE_CONST) ||
            !td || tv->info.dtype != KILN_DTYPE_INT64 || tv->info.rank != 1 || tv->info.dims[0] != 3 ||
            (td[0] != 0 && td[0] != x->dims[0]) || td[1] != -1 || td[2] != y->dims[2])
            return false;
    }
    *src = g->nodes[r].in[0];
    *B = x->dims[1];
    *H = x->dims[2] / y->dims[2];
    if (kiln__pat_sole_use(g, v)) {
        pat_add(p, t);
        if (kiln__pat_sole_use(g, g->nodes[t].in[0])) pat_add(p, r);
    }
    return true;
}

/* A mask or cond m of rank-3 scores [B*H, Sq, Sk] as a value that
 * broadcasts into [B, H, Sq, Sk]: m itself when it does not vary over B*H
 * (rank < 3, or first dim 1), else the [B, H, a, b] value a Reshape made it
 * from (through an identity Cast: torch's key_padding_mask.view(B, 1, 1,
 * S).expand(-1, H, -1, -1).reshape(B*H, 1, S)); -1 when neither. The
 * Reshape's element count makes m's first dim B*H, also where B is
 * symbolic and that dim unknown to kiln. */
static int mask_as4(const kiln_graph *g, int m, int64_t B, int64_t H) {
    const kiln_tinfo *mi = info(g, m);
    if (mi->rank < 3 || mi->dims[0] == 1) return m;
    int c = kiln__pat_producer(g, m, KILN_OP_Cast);
    if (c >= 0 && info(g, g->nodes[c].in[0])->dtype == mi->dtype) m = g->nodes[c].in[0];
    int r = kiln__pat_producer(g, m, KILN_OP_Reshape);
    if (r < 0) return -1;
    int x = g->nodes[r].in[0];
    const kiln_tinfo *xi = info(g, x);
    if (xi->rank != 4 || xi->dims[0] != B || xi->dims[1] != H || xi->dims[2] != mi->dims[1] ||
        xi->dims[3] != mi->dims[2])
        return -1;
    return x;
}

/* Q, K, V of a rank-3 attention (attn_operand_sf), their layouts SBHD and
 * the masks turned into masks of the [B, H, Sq, Sk] scores; false if any
 * does not fit. */
static bool attn_operands_sf(const kiln_graph *g, const int *qkv, const sshape *sd, attn_scores *sc,
                             kiln_attention_attrs *aa, int *in, int64_t *batch, pat *p) {
    int64_t B[3], H[3];
    for (int i = 0; i < 3; i++)
        if (!attn_operand_sf(g, qkv[i], i == 1, &in[i], &B[i], &H[i], p)) return false;
    if (B[1] != B[0] || B[2] != B[0] || H[1] != H[0] || H[2] != H[0] || H[0] > INT32_MAX)
        return false;
    /* the scores' B*H: known, or unknown with B symbolic (then the operands
     * are B*H by their targets, and so is every mask by mask_as4) */
    if (B[0] > 0 ? B[0] * H[0] != sd->d[0] : sd->d[0] != KILN_DIM_UNKNOWN) return false;
    *batch = B[0];
    aa->num_heads = (int32_t)H[0];
    aa->q_layout = aa->k_layout = aa->v_layout = KILN_ATTN_SBHD;
    sshape sd4 = {.rank = 4, .d = {B[0], H[0], sd->d[1], sd->d[2]}};
    for (int i = 0; i < sc->n_masks; i++)
        if ((sc->masks[i] = mask_as4(g, sc->masks[i], B[0], H[0])) < 0) return false;
    if (sc->cond >= 0) {
        if ((sc->cond = mask_as4(g, sc->cond, B[0], H[0])) < 0) return false;
        sc->cond = cond_source(g, sc->cond, &sd4);
    }
    return true;
}

/* Whether Reshape node r's target is a constant without 0 entries: its
 * result depends on its input's element count only, not on its dims. */
static bool reshape_target_explicit(const kiln_graph *g, int r) {
    const kiln_node *n = &g->nodes[r];
    if (n->n_in < 2 || n->in[1] < 0) return false;
    const kiln_value *t = &g->values[n->in[1]];
    if (!(t->flags & KILN_VALUE_CONST) || t->info.dtype != KILN_DTYPE_INT64 || t->info.rank != 1) return false;
    for (int64_t i = 0; i < t->info.dims[0]; i++)
        if (((const int64_t *)t->data)[i] == 0) return false;
    return true;
}

/* The merge back to sequence first after P V: Transpose node t (to
 * [Sq, B*H, Dv] or [Sq, B, H, Dv]) and the Reshape reading it, to [Sq, B,
 * H*Dv] (taken in) or another shape (the output projection's [Sq*B, H*Dv]:
 * kept, reading the layer's [Sq, B, H*Dv]; only when its target is
 * explicit, or computed at run time as torch 1.13 writes it with a
 * symbolic B, [Mul(Sq, B), H*Dv], which becomes the constant [-1, H*Dv]:
 * reshape_target_of_dims of the layer's [Sq, B, H*Dv]; a target without 0
 * entries reads the same from the Transpose's result). Sets the output
 * layout SBHD and *y, or leaves them. */
static kiln_status merge_seq_first(kiln_graph *g, int t, int64_t Sq, int64_t B, int64_t H, int64_t Dv,
                                   kiln_attention_attrs *aa, pat *p, int *y, int *retyped, kiln_tinfo *old_info) {
    int r = sole_consumer_op(g, g->nodes[t].out[0], KILN_OP_Reshape);
    if (r < 0 || Dv <= 0 || (B <= 0 && !KILN_DIM_IS_SYM(B))) return KILN_OK;
    sshape want = {.rank = 3, .d = {Sq, B, H * Dv}};
    int tv = g->nodes[t].out[0];
    kiln_tinfo w = {.dtype = info(g, tv)->dtype, .rank = 3, .dims = {Sq, B, H * Dv}};
    if (has_shape(g, g->nodes[r].out[0], &want)) {
        pat_add(p, t);
        pat_add(p, r);
        *y = g->nodes[r].out[0];
    } else if (reshape_target_explicit(g, r)) {
        pat_add(p, t);
        *y = *retyped = tv;
        *old_info = *info(g, tv);
        g->values[tv].info = w;
    } else if (!(g->values[tv].flags & KILN_VALUE_OUTPUT)) {
        kiln_tinfo was = *info(g, tv);
        int64_t tgt[KILN_MAX_RANK];
        int n, shape;
        g->values[tv].info = w;
        bool ok = reshape_target_of_dims(g, r, tgt, &n);
        g->values[tv].info = was;
        for (int i = 0; ok && i < n; i++) ok = tgt[i] != 0;
        if (!ok) return KILN_OK;
        int64_t sd[1] = {n};
        const char *base = g->values[g->nodes[r].in[1]].name;
        KILN_TRY(kiln__graph_add_const(g, base ? base : "reshape_shape", KILN_DTYPE_INT64, 1, sd, tgt, &shape));
        g->nodes[r].in[1] = shape;
        kiln__graph_relink(g, &r, 1);
        pat_add(p, t);
        *y = *retyped = tv;
        *old_info = was;
        g->values[tv].info = w;
    } else {
        return KILN_OK;
    }
    aa->out_layout = KILN_ATTN_SBHD;
    return KILN_OK;
}

static kiln_status match_attention(kiln_graph *g, const kiln_optimize_opts *o, int sm) {
    const kiln_node *smn = &g->nodes[sm];
    const kiln_softmax_attrs *sa = smn->attrs;
    const kiln_tinfo *si = info(g, smn->in[0]);
    if ((si->rank != 4 && si->rank != 3) || !is_f32(g, smn->in[0])) return KILN_OK;
    if (sa->axis != -1 && sa->axis != si->rank - 1) return KILN_OK;
    sshape sd = {.rank = si->rank};
    for (int i = 0; i < si->rank; i++) {
        sd.d[i] = si->dims[i]; /* known or symbolic (the same symbol: the same dim) */
        /* rank 3: B*H unknown when B is symbolic (attn_operands_sf proves it) */
        if (sd.d[i] == KILN_DIM_UNKNOWN && (si->rank != 3 || i != 0)) return KILN_OK;
    }
    /* the layer is named after its nodes in computation order: operands, Q K^T,
     * the score chain, Softmax, the NaN rule, P V, the merge */
    pat p = {.n = 0}, probs = {.n = 0}, chain = {.n = 0};
    int nan_zero;
    int pv = match_probs(g, smn->out[0], &nan_zero, &probs);
    if (pv < 0) return KILN_OK;
    attn_scores sc;
    if (!match_scores(g, smn->in[0], &sd, &sc, &chain)) return KILN_OK;
    int qk = sc.qk;
    for (int i = 0; i < sc.n_masks; i++)
        if (!is_f32(g, sc.masks[i])) return KILN_OK;
    if (sc.win_slot >= 0) { /* (an unused constant, should the layer not be made, goes with DCE) */
        KILN_TRY(window_mask_4d(g, sc.masks[sc.win_slot], sc.win_b, &sc.masks[sc.win_slot]));
        if (sc.masks[sc.win_slot] < 0) return KILN_OK;
        smn = &g->nodes[sm];
        si = info(g, smn->in[0]);
    }
    /* scales on Q and on K^T fold in too */
    pat scl = {.n = 0};
    int qv = strip_scales(g, g->nodes[qk].in[0], &sc.scale, &scl);
    int kv = strip_scales(g, g->nodes[qk].in[1], &sc.scale, &scl);
    int vv = g->nodes[pv].in[1];
    if (!isfinite(sc.scale) || fabs(sc.scale) > FLT_MAX) return KILN_OK;
    kiln_attention_attrs aa = {.tactic = {0, 0}, .scale = (float)sc.scale,
                               .precision = o->precision == KILN_PRECISION_BF16 ? KILN_PRECISION_BF16
                                                                                : KILN_PRECISION_FP32,
                               .cond_mode = sc.cond_mode, .cond_fill_if = sc.cond_fill_if,
                               .fill = sc.cond >= 0 ? sc.fill : 0.0f, .nan_to_zero = nan_zero};
    int in[6];
    int64_t batch = 0;
    if (info(g, qv)->rank != sd.rank || info(g, kv)->rank != sd.rank || info(g, vv)->rank != sd.rank) return KILN_OK;
    if (!is_f32(g, qv) || !is_f32(g, kv) || !is_f32(g, vv)) return KILN_OK;
    if (sd.rank == 3) {
        if (!attn_operands_sf(g, (const int[3]){qv, kv, vv}, &sd, &sc, &aa, in, &batch, &p)) return KILN_OK;
    } else {
        int64_t hq, hk, hv;
        attn_operand(g, qv, false, &aa.q_layout, &in[0], &hq, &p);
        attn_operand(g, kv, true, &aa.k_layout, &in[1], &hk, &p);
        attn_operand(g, vv, false, &aa.v_layout, &in[2], &hv, &p);
        for (int i = 0; i < 2; i++) { /* no batch or head broadcasting */
            int64_t d = info(g, qv)->dims[i];
            if (d == KILN_DIM_UNKNOWN || info(g, kv)->dims[i] != d || info(g, vv)->dims[i] != d) return KILN_OK;
        }
        int64_t H = info(g, qv)->dims[1];
        if (H <= 0 || H > INT32_MAX || (hq && hq != H) || (hk && hk != H) || (hv && hv != H)) return KILN_OK;
        aa.num_heads = (int32_t)H;
    }
    for (int i = 0; i < scl.n; i++) pat_add(&p, scl.nodes[i]);
    pat_add(&p, qk);
    for (int i = chain.n - 1; i >= 0; i--) pat_add(&p, chain.nodes[i]);
    pat_add(&p, sm);
    for (int i = 0; i < probs.n; i++) pat_add(&p, probs.nodes[i]);
    pat_add(&p, pv);
    p.overflow |= scl.overflow || chain.overflow || probs.overflow;
    int y = g->nodes[pv].out[0], retyped = -1; /* the rank-3 merge gives a value a new shape */
    kiln_tinfo old_info;
    if (sd.rank == 4) {
        /* the merge back: Transpose(0,2,1,3) + Reshape [B,S,H*D] */
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
            } else if (r >= 0 && !(g->values[g->nodes[t].out[0]].flags & KILN_VALUE_OUTPUT) && ti->rank == 4 &&
                       ti->dims[0] > 0 && ti->dims[1] > 0 && ti->dims[2] > 0 &&
                       ti->dims[3] > 0 && reshape_target_explicit(g, r)) {
                /* merged to another shape (GPT-2's Conv1D flattens to [B*S, H*D]
                 * for its Gemm): the Reshape is kept and reads the layer's
                 * [B, S, H*D] (the same bytes), the Transpose is taken in */
                aa.out_layout = KILN_ATTN_BSHD;
                pat_add(&p, t);
                y = retyped = g->nodes[t].out[0];
                old_info = *ti;
                kiln_tinfo w = old_info;
                w.rank = 3;
                w.dims[2] = ti->dims[2] * ti->dims[3];
                w.dims[3] = 0;
                g->values[y].info = w;
            }
        } else if (t >= 0 && perm_is(transpose_perm(g, t, 4), 2, 0, 1, 3)) {
            /* sequence first (torch 2.x's nn.MultiheadAttention): [S, B, H, D] + a Reshape */
            KILN_TRY(merge_seq_first(g, t, sd.d[2], sd.d[0], aa.num_heads, info(g, y)->dims[3], &aa, &p, &y,
                                     &retyped, &old_info));
        }
    } else {
        /* the merge back, sequence first: Transpose(1,0,2) to [Sq, B*H, Dv] + a
         * Reshape (to [Sq, B, H*Dv], taken in; to [Sq*B, H*Dv] for the output
         * projection's Gemm, kept: it reads the layer's [Sq, B, H*Dv]) */
        int t = sole_consumer_op(g, y, KILN_OP_Transpose);
        const int32_t *pm = t >= 0 ? transpose_perm(g, t, 3) : NULL;
        if (!pm || pm[0] != 1 || pm[1] != 0 || pm[2] != 2) return KILN_OK;
        KILN_TRY(merge_seq_first(g, t, sd.d[1], batch, aa.num_heads, info(g, y)->dims[2], &aa, &p,
                                 &y, &retyped, &old_info));
        if (aa.out_layout != KILN_ATTN_SBHD) return KILN_OK;
    }
    int n_in = sc.n_masks > 1 ? 6 : sc.cond >= 0 ? 5 : sc.n_masks > 0 ? 4 : 3;
    in[3] = sc.n_masks > 0 ? sc.masks[0] : -1;
    in[4] = sc.cond;
    in[5] = sc.n_masks > 1 ? sc.masks[1] : -1;
    if (p.overflow || !kiln__pat_supports(g, o->device, KILN_OP_Attention, n_in, in, 1, &y, &aa)) {
        if (retyped >= 0) g->values[retyped].info = old_info;
        return KILN_OK;
    }
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
    kiln_status st = kiln__graph_add_const(g, base, KILN_DTYPE_FLOAT32, 2, wd, w, &wv);
    if (st == KILN_OK && has_bias) st = kiln__graph_add_const(g, base, KILN_DTYPE_FLOAT32, 1, bd, bias, &bv);
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
    int ain[6] = {y, y, y, -1, -1, -1}; /* Q, K, V from y; the masks stay */
    for (int i = 3; i < g->nodes[an].n_in && i < 6; i++) ain[i] = g->nodes[an].in[i];
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
    int touched[4] = {mm[0], mm[1], mm[2], an};
    kiln__graph_relink(g, touched, 4);
    return KILN_OK;
}

/* Makes Attention node a (attrs aa) read Q, K and V from the packed x
 * [B, S, 3*H*D] (layout QKV) where the device runs it so; false if not. */
static bool read_packed_qkv(kiln_graph *g, const kiln_optimize_opts *o, kiln_node *a, kiln_attention_attrs aa, int x) {
    aa.q_layout = aa.k_layout = aa.v_layout = KILN_ATTN_QKV;
    int ain[6] = {x, x, x, -1, -1, -1}; /* the masks stay */
    for (int i = 3; i < a->n_in && i < 6; i++) ain[i] = a->in[i];
    if (!kiln__pat_supports(g, o->device, KILN_OP_Attention, a->n_in, ain, 1, a->out, &aa)) return false;
    memcpy(a->attrs, &aa, sizeof aa);
    for (int i = 0; i < 3; i++) a->in[i] = x;
    return true;
}

/* An Attention whose Q, K and V (BSHD) are the three outputs of one Split of
 * a [B, S, 3E] value along its last axis into equal parts (GPT-2's packed
 * c_attn projection), read by it alone: it reads the packed value in the
 * QKV layout, and the Split (three copies) goes. */
static kiln_status match_split_qkv(kiln_graph *g, const kiln_optimize_opts *o, int an) {
    kiln_node *a = &g->nodes[an];
    kiln_attention_attrs aa = *(const kiln_attention_attrs *)a->attrs;
    if (aa.q_layout != KILN_ATTN_BSHD || aa.k_layout != KILN_ATTN_BSHD || aa.v_layout != KILN_ATTN_BSHD)
        return KILN_OK;
    int sp = kiln__pat_producer(g, a->in[0], KILN_OP_Split);
    if (sp < 0) return KILN_OK;
    const kiln_node *s = &g->nodes[sp];
    int x = s->in[0];
    const kiln_tinfo *xi = info(g, x);
    const kiln_split_attrs *sa = s->attrs;
    if (s->n_out != 3 || !is_f32(g, x) || xi->rank != 3 || xi->dims[2] <= 0 || xi->dims[2] % 3 ||
        (sa->axis != -1 && sa->axis != 2))
        return KILN_OK;
    for (int i = 0; i < 3; i++) {
        const kiln_tinfo *oi = info(g, s->out[i]);
        if (a->in[i] != s->out[i] || !kiln__pat_sole_use(g, s->out[i]) || oi->rank != 3 ||
            oi->dims[2] != xi->dims[2] / 3)
            return KILN_OK;
    }
    if (!read_packed_qkv(g, o, a, aa, x)) return KILN_OK;
    g->nodes[sp].dead = true;
    kiln__graph_relink(g, (const int[2]){sp, an}, 2);
    return KILN_OK;
}

/* Swin's (torchvision's) split of its packed projection into Q, K, V:
 *   t = Transpose(Reshape(x [B, S, 3*H*D] -> [B, S, 3, H, D]), perm (2, 0, 3, 1, 4));
 *   Gather(t, i, axis 0) -> [B, H, S, D]
 * Part i of value v made so (the Gather read by nothing else): *x and the
 * Gather, Transpose and Reshape nodes, else -1. */
static int window_gather_part(const kiln_graph *g, int v, int *x, int nodes[3]) {
    int ga = sole_producer(g, v, KILN_OP_Gather);
    double idx;
    if (ga < 0 || g->nodes[ga].n_in < 2 || !kiln__pat_const_scalar(g, g->nodes[ga].in[1], &idx) ||
        info(g, g->nodes[ga].in[1])->rank != 0 || ((const kiln_axis_attrs *)g->nodes[ga].attrs)->axis != 0 ||
        idx < 0 || idx > 2)
        return -1;
    int tr = kiln__pat_producer(g, g->nodes[ga].in[0], KILN_OP_Transpose);
    const int32_t *pm = tr >= 0 ? transpose_perm(g, tr, 5) : NULL;
    if (!pm || pm[0] != 2 || pm[1] != 0 || pm[2] != 3 || pm[3] != 1 || pm[4] != 4) return -1;
    int rs = kiln__pat_producer(g, g->nodes[tr].in[0], KILN_OP_Reshape);
    if (rs < 0) return -1;
    const kiln_tinfo *xi = info(g, g->nodes[rs].in[0]), *ri = info(g, g->nodes[rs].out[0]);
    if (xi->rank != 3 || ri->rank != 5 || ri->dims[0] != xi->dims[0] || ri->dims[1] != xi->dims[1] ||
        ri->dims[2] != 3 || ri->dims[3] <= 0 || ri->dims[4] <= 0 || xi->dims[2] != 3 * ri->dims[3] * ri->dims[4])
        return -1;
    *x = g->nodes[rs].in[0];
    nodes[0] = ga;
    nodes[1] = tr;
    nodes[2] = rs;
    return (int)idx;
}

/* An Attention (BHSD operands) whose Q, K and V are parts 0, 1, 2 of one
 * window_gather_part split reads the projection's output in place (QKV):
 * the three Gathers and the Transpose go (swin_t: 36 Gathers, 12 Transposes). */
static kiln_status match_gather_qkv(kiln_graph *g, const kiln_optimize_opts *o, int an) {
    kiln_node *a = &g->nodes[an];
    kiln_attention_attrs aa = *(const kiln_attention_attrs *)a->attrs;
    if (aa.q_layout != KILN_ATTN_BHSD || aa.k_layout != KILN_ATTN_BHSD || aa.v_layout != KILN_ATTN_BHSD)
        return KILN_OK;
    int x = -1, nodes[3][3];
    for (int i = 0; i < 3; i++) {
        int xi = -1;
        if (window_gather_part(g, a->in[i], &xi, nodes[i]) != i || (x >= 0 && xi != x) ||
            (i > 0 && nodes[i][1] != nodes[0][1]))
            return KILN_OK;
        x = xi;
    }
    const kiln_tinfo *ri = info(g, g->nodes[nodes[0][2]].out[0]);
    if (!is_f32(g, x) || ri->dims[3] != aa.num_heads || g->values[g->nodes[nodes[0][1]].out[0]].n_uses != 3)
        return KILN_OK;
    if (!read_packed_qkv(g, o, a, aa, x)) return KILN_OK;
    for (int i = 0; i < 3; i++) g->nodes[nodes[i][0]].dead = true;
    g->nodes[nodes[0][1]].dead = true;
    if (kiln__pat_sole_use(g, g->nodes[nodes[0][2]].out[0])) g->nodes[nodes[0][2]].dead = true;
    int touched[6] = {an, nodes[0][0], nodes[1][0], nodes[2][0], nodes[0][1], nodes[0][2]};
    kiln__graph_relink(g, touched, 6);
    return KILN_OK;
}

/* Whether Slice node sl takes columns [lo, hi) of the last axis of its
 * rank-3 input (constant starts, ends and axes, step 1). */
static bool slices_columns(const kiln_graph *g, int sl, int64_t lo, int64_t hi) {
    const kiln_node *n = &g->nodes[sl];
    double st, en, ax = -1, step = 1;
    if (n->n_in < 3 || !kiln__pat_const_scalar(g, n->in[1], &st) || !kiln__pat_const_scalar(g, n->in[2], &en) ||
        (n->n_in > 3 && n->in[3] >= 0 && !kiln__pat_const_scalar(g, n->in[3], &ax)) ||
        (n->n_in > 4 && n->in[4] >= 0 && !kiln__pat_const_scalar(g, n->in[4], &step)))
        return false;
    int64_t d = info(g, n->in[0])->dims[2];
    if (st < 0) st += (double)d;
    if (en < 0) en += (double)d;
    if (en > (double)d) en = (double)d; /* ends past the end (INT64_MAX) */
    return (ax == -1 || ax == 2) && step == 1 && st == (double)lo && en == (double)hi;
}

/* Whether node n (Squeeze or Unsqueeze) has the one constant axis `axis`
 * (counted in a tensor of rank `rank`). */
static bool one_axis(const kiln_graph *g, const kiln_node *n, int64_t axis, int rank) {
    double a;
    if (n->n_in < 2 || !kiln__pat_const_scalar(g, n->in[1], &a)) return false;
    return (int64_t)a == axis || (int64_t)a + rank == axis;
}

/* torch 2.x's packed self-attention projection split into Q, K, V:
 *   p = Reshape(x [S, B, 3E] -> [S, B, 3, E]); Unsqueeze(p, 0); Transpose perm
 *   (3, 1, 2, 0, 4); Squeeze(axis 3) -> [3, S, B, E]; Gather(axis 0, i)
 * gives columns [iE, (i+1)E) of x. The x and i of value v made so, else -1. */
static int packed_gather_part(const kiln_graph *g, int v, int *x) {
    int ga = kiln__pat_producer(g, v, KILN_OP_Gather);
    double idx;
    if (ga < 0 || g->nodes[ga].n_in < 2 || !kiln__pat_const_scalar(g, g->nodes[ga].in[1], &idx) ||
        info(g, g->nodes[ga].in[1])->rank != 0 || ((const kiln_axis_attrs *)g->nodes[ga].attrs)->axis != 0)
        return -1;
    int sq = kiln__pat_producer(g, g->nodes[ga].in[0], KILN_OP_Squeeze);
    if (sq < 0 || !one_axis(g, &g->nodes[sq], 3, 5)) return -1;
    int tr = kiln__pat_producer(g, g->nodes[sq].in[0], KILN_OP_Transpose);
    const int32_t *pm = tr >= 0 ? transpose_perm(g, tr, 5) : NULL;
    if (!pm || pm[0] != 3 || pm[1] != 1 || pm[2] != 2 || pm[3] != 0 || pm[4] != 4) return -1;
    int un = kiln__pat_producer(g, g->nodes[tr].in[0], KILN_OP_Unsqueeze);
    if (un < 0 || !one_axis(g, &g->nodes[un], 0, 5)) return -1;
    int rs = kiln__pat_producer(g, g->nodes[un].in[0], KILN_OP_Reshape);
    if (rs < 0) return -1;
    const kiln_tinfo *xi = info(g, g->nodes[rs].in[0]), *ri = info(g, g->nodes[rs].out[0]);
    if (xi->rank != 3 || ri->rank != 4 || ri->dims[0] != xi->dims[0] || ri->dims[1] != xi->dims[1] ||
        ri->dims[2] != 3 || xi->dims[2] != 3 * ri->dims[3] || idx < 0 || idx > 2)
        return -1;
    *x = g->nodes[rs].in[0];
    return (int)idx;
}

/* The Slice node making v (read by nothing else) when it takes part `part`
 * of `parts` equal column blocks of a rank-3 float32 value: that value *x
 * (set when *x < 0, else it must be *x); else -1. */
static int packed_slice(const kiln_graph *g, int v, int part, int parts, int *x) {
    int sl = sole_producer(g, v, KILN_OP_Slice);
    if (sl < 0 || (*x >= 0 && g->nodes[sl].in[0] != *x)) return -1;
    int src = g->nodes[sl].in[0];
    const kiln_tinfo *xi = info(g, src);
    if (!is_f32(g, src) || xi->rank != 3 || xi->dims[2] <= 0 || xi->dims[2] % parts ||
        !slices_columns(g, sl, part * xi->dims[2] / parts, (part + 1) * xi->dims[2] / parts))
        return -1;
    *x = src;
    return sl;
}

/* Marks dead the nodes making value v, and those before them along their
 * first inputs, while nothing reads their outputs any more (the split
 * nodes an in-place read leaves, so that the values before them have their
 * true readers for the rewrites that follow); g linked before, and after. */
static void drop_unread(kiln_graph *g, int v) {
    for (int guard = 0; guard < 8 && v >= 0; guard++) {
        int ni = g->values[v].producer;
        if (ni < 0) return;
        kiln_node *n = &g->nodes[ni];
        for (int k = 0; k < n->n_out; k++)
            if (n->out[k] >= 0 && g->values[n->out[k]].n_uses > 0) return;
        n->dead = true;
        kiln__graph_relink(g, &ni, 1);
        v = n->n_in > 0 ? n->in[0] : -1;
    }
}

/* An Attention whose Q, K and V (BSHD, or SBHD) are three Slices of one
 * [B, S, 3E] (or [S, B, 3E]) value along its last axis, at columns [0, E),
 * [E, 2E), [2E, 3E), read by it alone (torch 1.13's nn.MultiheadAttention
 * with its packed in_proj), or the three Gathers of torch 2.x's split of it
 * (packed_gather_part): it reads the packed value in the QKV (SQKV) layout,
 * and the copies go. */
static kiln_status match_slice_qkv(kiln_graph *g, const kiln_optimize_opts *o, int an) {
    kiln_node *a = &g->nodes[an];
    kiln_attention_attrs aa = *(const kiln_attention_attrs *)a->attrs;
    int lay = aa.q_layout;
    if ((lay != KILN_ATTN_BSHD && lay != KILN_ATTN_SBHD) || aa.k_layout != lay || aa.v_layout != lay) return KILN_OK;
    int sl[3] = {-1, -1, -1}, x = -1;
    for (int i = 0; i < 3; i++) {
        int xg = -1;
        if (kiln__pat_sole_use(g, a->in[i]) && packed_gather_part(g, a->in[i], &xg) == i &&
            (i == 0 || xg == x)) { /* torch 2.x: its split nodes go when nothing else reads them */
            x = xg;
            if (!is_f32(g, x)) return KILN_OK;
            continue;
        }
        if ((sl[i] = packed_slice(g, a->in[i], i, 3, &x)) < 0) return KILN_OK;
    }
    aa.q_layout = aa.k_layout = aa.v_layout = lay == KILN_ATTN_SBHD ? KILN_ATTN_SQKV : KILN_ATTN_QKV;
    int ain[6] = {x, x, x, -1, -1, -1}; /* the masks stay */
    for (int i = 3; i < a->n_in && i < 6; i++) ain[i] = a->in[i];
    if (!kiln__pat_supports(g, o->device, KILN_OP_Attention, a->n_in, ain, 1, a->out, &aa)) return KILN_OK;
    memcpy(a->attrs, &aa, sizeof aa);
    int gv[3], ng = 0; /* torch 2.x's split: the Gathers' outputs */
    for (int i = 0; i < 3; i++) {
        if (sl[i] >= 0) g->nodes[sl[i]].dead = true;
        else gv[ng++] = a->in[i];
        a->in[i] = x;
    }
    int touched[4] = {an, sl[0], sl[1], sl[2]}, nt = 1;
    for (int i = 0; i < 3; i++)
        if (sl[i] >= 0) touched[nt++] = sl[i];
    kiln__graph_relink(g, touched, nt);
    for (int i = 0; i < ng; i++) drop_unread(g, gv[i]);
    return KILN_OK;
}

/* Whether every live reader of value v is node ni (and v is no graph output). */
static bool read_only_by(const kiln_graph *g, int v, int ni) {
    if (kiln__graph_is_output(g, v)) return false;
    int nu = 0;
    const kiln_use *u = kiln__graph_uses(g, v, &nu);
    if (u) {
        for (int k = 0; k < nu; k++)
            if (u[k].node != ni) return false;
        return true;
    }
    kiln__graph_note_visits(g, g->n_nodes);
    for (int k = 0; k < g->n_nodes; k++) {
        const kiln_node *n = &g->nodes[k];
        if (n->dead || k == ni) continue;
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] == v) return false;
    }
    return true;
}

/* The transpose [B, S, E] <-> [S, B, E] of a rank-3 value info (dims 0 and 1 swapped). */
static void swap01(kiln_tinfo *t) {
    int64_t d = t->dims[0];
    t->dims[0] = t->dims[1];
    t->dims[1] = d;
}

/* A new value for v's tensor with its first two axes swapped (info of
 * `swapped`), named after it: v's name stays with the model's [S, B, E]
 * tensor, so that `kiln debug compare` does not read the [B, S, E] as it.
 * Node `prod` writes the new value and node `reader` reads it instead of v. */
static kiln_status swapped_value(kiln_graph *g, int v, const kiln_tinfo *swapped, int prod, int reader) {
    char name[256];
    snprintf(name, sizeof name, "%s.batch_first", g->values[v].name ? g->values[v].name : "");
    int nv;
    KILN_TRY(kiln__graph_add_value(g, kiln__graph_find_value(g, name) < 0 ? name : NULL, &nv));
    g->values[nv].info = *swapped;
    kiln_node *pn = &g->nodes[prod], *rn = &g->nodes[reader];
    for (int i = 0; i < pn->n_out; i++)
        if (pn->out[i] == v) pn->out[i] = nv;
    for (int i = 0; i < rn->n_in; i++)
        if (rn->in[i] == v) rn->in[i] = nv;
    return KILN_OK;
}

/* The Transpose(1, 0, 2) node making v (rank 3) if v has that one reader, else -1. */
static int swap01_producer(const kiln_graph *g, int v) {
    int t = sole_producer(g, v, KILN_OP_Transpose);
    const int32_t *pm = t >= 0 ? transpose_perm(g, t, 3) : NULL;
    return pm && pm[0] == 1 && pm[1] == 0 && pm[2] == 2 ? t : -1;
}

/* nn.MultiheadAttention(batch_first=True) as torch 1.13 exports it: the
 * sequence-first block between Transpose(1,0,2) of its [B, S, E] input and
 * Transpose(1,0,2) of its output. A projection (a FusedMatMul without a
 * residual) mixes the last axis only, so it runs as well on [B, S, E]:
 *   FusedMatMul(Transpose(x)) -> Attention (SQKV)  becomes
 *   FusedMatMul(x) -> Attention (QKV), and
 *   Attention (out SBHD) -> FusedMatMul -> Transpose  becomes
 *   Attention (out BSHD) -> FusedMatMul,
 * each where the values between are read by the block alone: two
 * transposes fewer per attention block (ViT). */
static kiln_status match_batch_first(kiln_graph *g, const kiln_optimize_opts *o, int an) {
    kiln_node *a = &g->nodes[an];
    kiln_attention_attrs aa = *(const kiln_attention_attrs *)a->attrs;
    int x = a->in[0], y = a->out[0];
    int f1 = aa.q_layout == KILN_ATTN_SQKV && a->in[1] == x && a->in[2] == x && read_only_by(g, x, an)
                 ? kiln__pat_producer(g, x, KILN_OP_FusedMatMul) : -1;
    int t1 = f1 >= 0 && g->nodes[f1].n_in <= 3 ? swap01_producer(g, g->nodes[f1].in[0]) : -1;
    int f2 = aa.out_layout == KILN_ATTN_SBHD ? sole_consumer_op(g, y, KILN_OP_FusedMatMul) : -1;
    int t2 = -1;
    if (f2 >= 0 && g->nodes[f2].n_in <= 3 && g->nodes[f2].in[0] == y && info(g, y)->rank == 3) {
        t2 = sole_consumer_op(g, g->nodes[f2].out[0], KILN_OP_Transpose);
        const int32_t *pm = t2 >= 0 ? transpose_perm(g, t2, 3) : NULL;
        if (!pm || pm[0] != 1 || pm[1] != 0 || pm[2] != 2) t2 = -1;
    }
    if (t1 < 0 && t2 < 0) return KILN_OK;
    kiln_tinfo xi = *info(g, x), yi = *info(g, y);
    if (t1 >= 0) {
        aa.q_layout = aa.k_layout = aa.v_layout = KILN_ATTN_QKV;
        swap01(&g->values[x].info);
    }
    if (t2 >= 0) {
        aa.out_layout = KILN_ATTN_BSHD;
        swap01(&g->values[y].info);
    }
    if (!kiln__pat_supports(g, o->device, KILN_OP_Attention, a->n_in, a->in, 1, a->out, &aa)) {
        g->values[x].info = xi;
        g->values[y].info = yi;
        return KILN_OK;
    }
    memcpy(a->attrs, &aa, sizeof aa);
    kiln_tinfo xs = *info(g, x), ys = *info(g, y);
    g->values[x].info = xi;
    g->values[y].info = yi;
    if (t1 >= 0) {
        g->nodes[f1].in[0] = g->nodes[t1].in[0];
        g->nodes[t1].dead = true;
        KILN_TRY(swapped_value(g, x, &xs, f1, an));
    }
    if (t2 >= 0) {
        g->nodes[f2].out[0] = g->nodes[t2].out[0];
        g->nodes[t2].dead = true;
        KILN_TRY(swapped_value(g, y, &ys, an, f2));
    }
    int touched[5] = {an, f1, t1, f2, t2}, nt = 0;
    for (int i = 0; i < 5; i++)
        if (touched[i] >= 0) touched[nt++] = touched[i];
    kiln__graph_relink(g, touched, nt);
    return KILN_OK;
}

/* Cross attention (torch's nn.MultiheadAttention with a separate key/value
 * input): K and V (BSHD, or SBHD) are two Slices of one [B, S', 2E] (or
 * [S', B, 2E]) projection at columns [0, E) and [E, 2E), read by it alone:
 * the Attention reads that value in the KV (SKV) layout and the Slices go. */
static kiln_status match_slice_kv(kiln_graph *g, const kiln_optimize_opts *o, int an) {
    kiln_node *a = &g->nodes[an];
    kiln_attention_attrs aa = *(const kiln_attention_attrs *)a->attrs;
    int lay = aa.k_layout;
    if ((lay != KILN_ATTN_BSHD && lay != KILN_ATTN_SBHD) || aa.v_layout != lay) return KILN_OK;
    int sl[2], x = -1;
    for (int i = 0; i < 2; i++)
        if ((sl[i] = packed_slice(g, a->in[1 + i], i, 2, &x)) < 0) return KILN_OK;
    aa.k_layout = aa.v_layout = lay == KILN_ATTN_SBHD ? KILN_ATTN_SKV : KILN_ATTN_KV;
    int ain[6] = {a->in[0], x, x, -1, -1, -1}; /* the masks stay */
    for (int i = 3; i < a->n_in && i < 6; i++) ain[i] = a->in[i];
    if (!kiln__pat_supports(g, o->device, KILN_OP_Attention, a->n_in, ain, 1, a->out, &aa)) return KILN_OK;
    memcpy(a->attrs, &aa, sizeof aa);
    for (int i = 0; i < 2; i++) {
        a->in[1 + i] = x;
        g->nodes[sl[i]].dead = true;
    }
    kiln__graph_relink(g, (const int[3]){an, sl[0], sl[1]}, 3);
    return KILN_OK;
}

/* ======================================================================= */
/* 7. One additive mask for the attention layers that share a cond          */
/* ======================================================================= */

/* Whether Attention node n takes a bool cond that can become an additive
 * mask without changing what it computes: the cond's fill is -inf, added
 * (ADD) or set (SELECT: -inf set or added is the same for finite scores),
 * and the layer has no additive mask or bias of its own. */
static bool cond_as_mask(const kiln_graph *g, const kiln_node *n) {
    if (n->dead || n->op_id != KILN_OP_Attention || n->n_in < 5 || n->in[4] < 0 || n->in[3] >= 0) return false;
    if (n->n_in > 5 && n->in[5] >= 0) return false;
    const kiln_attention_attrs *aa = n->attrs;
    if (aa->cond_mode != KILN_ATTN_COND_ADD && aa->cond_mode != KILN_ATTN_COND_SELECT) return false;
    return isinf(aa->fill) && aa->fill < 0 && info(g, n->in[4])->dtype == KILN_DTYPE_BOOL;
}

/* Whether Attention node n reads cond c as cond_as_mask allows, c's fill applying where c == fill_if. */
static bool reads_cond(const kiln_graph *g, const kiln_node *n, int c, int fill_if) {
    return cond_as_mask(g, n) && n->in[4] == c && ((const kiln_attention_attrs *)n->attrs)->cond_fill_if == fill_if;
}

/* Attention node n with its cond replaced by the additive mask m (attrs *aa, in[6]). */
static void cond_to_mask_args(const kiln_node *n, int m, kiln_attention_attrs *aa, int in[6]) {
    *aa = *(const kiln_attention_attrs *)n->attrs;
    aa->cond_mode = KILN_ATTN_COND_NONE;
    aa->cond_fill_if = 0;
    aa->fill = 0.0f;
    for (int i = 0; i < 6; i++) in[i] = i < n->n_in ? n->in[i] : -1;
    in[3] = m;
    in[4] = -1;
}

/* Whether v is a bool constant with every element true. */
static bool const_all_true(const kiln_graph *g, int v) {
    const kiln_value *val = v >= 0 ? &g->values[v] : NULL;
    if (!val || !(val->flags & KILN_VALUE_CONST) || val->info.dtype != KILN_DTYPE_BOOL || !val->data) return false;
    int64_t n = kiln__numel(val->info.rank, val->info.dims);
    for (int64_t i = 0; i < n; i++)
        if (!((const uint8_t *)val->data)[i]) return false;
    return n > 0;
}

/* What cond c is made from when it is And(x, all true) (the all-true side a
 * constant, as HF's SDPA mask for a bidirectional encoder folds to): x,
 * through every such And, where x broadcasts into c's shape (each of its
 * dims 1 or c's, right-aligned), so that x read as a mask broadcast to the
 * scores gives what c does. BERT's cond [B, 1, S, S] comes from its padding
 * mask [B, 1, 1, S]: the additive mask is made from that, S times smaller,
 * and the kernels read it as one row of keys per batch. Else c. */
static int cond_broadcast_source(const kiln_graph *g, int c) {
    const kiln_tinfo *ci = info(g, c);
    int x = c;
    for (int depth = 0; depth < 8; depth++) {
        int p = kiln__pat_producer(g, x, KILN_OP_And);
        if (p < 0 || g->nodes[p].n_in != 2) break;
        int a = g->nodes[p].in[0], b = g->nodes[p].in[1];
        int y = const_all_true(g, b) ? a : const_all_true(g, a) ? b : -1;
        if (y < 0) break;
        const kiln_tinfo *yi = info(g, y);
        if (yi->dtype != KILN_DTYPE_BOOL || yi->rank < 0 || yi->rank > ci->rank) break;
        bool fits = true;
        for (int k = 0; k < yi->rank && fits; k++) {
            int64_t dy = yi->dims[yi->rank - 1 - k], dc = ci->dims[ci->rank - 1 - k];
            fits = dy == 1 || (dy == dc && dy != KILN_DIM_UNKNOWN);
        }
        if (!fits) break;
        x = y;
    }
    return x;
}

/* share_attention_mask's scratch over the pass: the layers sharing a cond,
 * and where each Where it adds goes (node n0 + j after node after[j] of the
 * graph as it was), all placed when the pass ends (placing each at once
 * moved every node: n^2 for n shared conds, issue 20). */
typedef struct mask_places {
    int n0;
    int *after, cap_after;
    int *share, cap_share;
} mask_places;

/* The attention layers of an fp16/bf16 device plan that read one bool cond
 * (BERT's padding mask, read by every layer) read one additive mask made
 * from it once, by Where(cond, -inf, 0) (or Where(cond, 0, -inf)), instead:
 * a layer whose kernel wants an additive mask (cuDNN's fused attention)
 * then does not convert the cond itself, once per layer. Layer an is the
 * first of them; nothing changes unless at least two share the cond and
 * the backend supports every rewritten layer. fp32 plans (the CPU's among
 * them) keep the cond: their kernels read it as it is. */
static kiln_status share_attention_mask(kiln_graph *g, const kiln_optimize_opts *o, int an, mask_places *pl) {
    if (!cond_as_mask(g, &g->nodes[an])) return KILN_OK;
    const kiln_attention_attrs *a0 = g->nodes[an].attrs;
    int c = g->nodes[an].in[4], fill_if = a0->cond_fill_if, n_share = 0, n_uses;
    /* the layers from an on that read the cond: from its use list (a scan
     * of the nodes from each layer made n layers with a cond each n^2) */
    const kiln_use *u = kiln__graph_uses(g, c, &n_uses);
    kiln__graph_note_visits(g, n_uses);
    KILN_TRY(kiln__grow((void **)&pl->share, &pl->cap_share, n_uses + 1, sizeof *pl->share));
    for (int k = 0; k < n_uses; k++)
        if (u[k].slot == 4 && u[k].node >= an && reads_cond(g, &g->nodes[u[k].node], c, fill_if))
            pl->share[n_share++] = u[k].node;
    if (n_share < 2) return KILN_OK;
    /* the mask value: float32 (the precision pass makes it fp16/bf16 with its
     * readers), the shape of what the cond is made from (cond_broadcast_source) */
    char name[512];
    int m, k0 = 0;
    const char *cn = g->values[c].name ? g->values[c].name : "cond";
    snprintf(name, sizeof name, "%.400s/kiln_attn_mask", cn);
    while (kiln__graph_find_value(g, name) >= 0 && ++k0 < 1000)
        snprintf(name, sizeof name, "%.400s/kiln_attn_mask_%d", cn, k0);
    KILN_TRY(kiln__graph_add_value(g, name, &m));
    int x = kiln__pass_on(o, KILN_PASS_ATTENTION_MASK_ROWS) ? cond_broadcast_source(g, c) : c;
    g->values[m].info = *info(g, x);
    g->values[m].info.dtype = KILN_DTYPE_FLOAT32;
    g->values[m].producer = -1;
    for (int k = 0; k < n_share; k++) {
        const kiln_node *n = &g->nodes[pl->share[k]];
        kiln_attention_attrs aa;
        int in[6];
        cond_to_mask_args(n, m, &aa, in);
        if (!kiln__pat_supports(g, o->device, KILN_OP_Attention, 4, in, 1, n->out, &aa))
            return KILN_OK; /* (m, read by nothing, goes with compaction) */
    }
    /* Where(x, -inf, 0) where the fill applies to cond == 1, else Where(x, 0, -inf) */
    const float ninf = -INFINITY, zero = 0.0f;
    int vf, vz, ni;
    KILN_TRY(kiln__graph_add_const(g, name, KILN_DTYPE_FLOAT32, 0, NULL, &ninf, &vf));
    KILN_TRY(kiln__graph_add_const(g, name, KILN_DTYPE_FLOAT32, 0, NULL, &zero, &vz));
    int win[3] = {x, fill_if ? vf : vz, fill_if ? vz : vf};
    KILN_TRY(kiln__graph_add_node(g, KILN_OP_Where, name, 3, win, 1, &m, NULL, &ni));
    KILN_TRY(kiln__grow((void **)&pl->after, &pl->cap_after, g->n_nodes - pl->n0, sizeof *pl->after));
    pl->after[ni - pl->n0] = kiln__pat_producer(g, x, 0);
    g->nodes[ni].added = true; /* no ONNX node behind it */
    g->nodes[ni].device = g->nodes[an].device;
    for (int k = 0; k < n_share; k++) {
        kiln_node *n = &g->nodes[pl->share[k]];
        kiln_attention_attrs aa;
        int in[6];
        cond_to_mask_args(n, m, &aa, in);
        memcpy(n->attrs, &aa, sizeof aa);
        n->in[3] = m;
        n->in[4] = -1;
        n->n_in = 4; /* (no bias: cond_as_mask) */
    }
    kiln__graph_relink(g, pl->share, n_share); /* (and the Where) */
    return KILN_OK;
}

/* ======================================================================= */

/* A Transpose undoing the Transpose that makes its input (whatever else
 * reads that): its readers read the first one's input. What the ConvNeXt
 * residual above leaves before a downsampling LayerNorm2d. */
static void cancel_transpose_pairs(kiln_graph *g) {
    for (int ni = 0; ni < g->n_nodes; ni++) {
        kiln_node *n = &g->nodes[ni];
        if (n->dead || n->op_id != KILN_OP_Transpose || kiln__graph_is_output(g, n->out[0])) continue;
        int p = kiln__pat_producer(g, n->in[0], KILN_OP_Transpose), r = info(g, n->out[0])->rank;
        if (p < 0 || r < 0) continue;
        const kiln_transpose_attrs *a2 = n->attrs, *a1 = g->nodes[p].attrs;
        bool ident = a1->n_perm == r && a2->n_perm == r;
        for (int i = 0; ident && i < r; i++) ident = a1->perm[a2->perm[i]] == i;
        if (!ident) continue;
        n->dead = true;
        if (redirect_uses(g, n->out[0], g->nodes[p].in[0], &ni, 1) != KILN_OK) return;
    }
}

kiln_status kiln__opt_transformer(kiln_graph *g, const kiln_optimize_opts *o) {
    kiln__graph_link(g);
    /* ONNX Gelu (opset 20) is kiln.Gelu with the same attributes (part of fuse_gelu) */
    for (int ni = 0; kiln__pass_on(o, KILN_PASS_FUSE_GELU) && ni < g->n_nodes; ni++) {
        kiln_node *n = &g->nodes[ni];
        if (n->dead || n->op_id != KILN_OP_GeluOnnx) continue;
        int x = n->in[0], y = n->out[0];
        if (!kiln__pat_supports(g, o->device, KILN_OP_Gelu, 1, &x, 1, &y, n->attrs)) continue;
        n->op_id = KILN_OP_Gelu;
        n->op = kiln__op_by_id(KILN_OP_Gelu);
    }
    if (kiln__pass_on(o, KILN_PASS_MERGE_TRANSPOSE_RESHAPE)) KILN_TRY(opt_layout(g, o));
    for (int ni = 0; kiln__pass_on(o, KILN_PASS_FUSE_LAYERNORM) && ni < g->n_nodes; ni++)
        if (!g->nodes[ni].dead && g->nodes[ni].op_id == KILN_OP_Div) KILN_TRY(match_layernorm(g, o, ni));
    for (int ni = 0; kiln__pass_on(o, KILN_PASS_FUSE_RMSNORM) && ni < g->n_nodes; ni++)
        if (!g->nodes[ni].dead && g->nodes[ni].op_id == KILN_OP_ReduceMean) KILN_TRY(match_rmsnorm(g, o, ni));
    for (int ni = 0; kiln__pass_on(o, KILN_PASS_FUSE_GELU) && ni < g->n_nodes; ni++) {
        if (g->nodes[ni].dead) continue;
        if (g->nodes[ni].op_id == KILN_OP_Erf) KILN_TRY(match_gelu_erf(g, o, ni));
        else if (g->nodes[ni].op_id == KILN_OP_Tanh) KILN_TRY(match_gelu_tanh(g, o, ni));
    }
    for (int ni = 0; kiln__pass_on(o, KILN_PASS_FUSE_ATTENTION) && ni < g->n_nodes; ni++)
        if (!g->nodes[ni].dead && g->nodes[ni].op_id == KILN_OP_Softmax) KILN_TRY(match_attention(g, o, ni));
    for (int ni = 0; kiln__pass_on(o, KILN_PASS_FOLD_LAYER_SCALE) && ni < g->n_nodes; ni++)
        if (!g->nodes[ni].dead && g->nodes[ni].op_id == KILN_OP_Mul) KILN_TRY(fold_layer_scale(g, ni));
    for (int ni = 0; kiln__pass_on(o, KILN_PASS_FUSE_MATMUL) && ni < g->n_nodes; ni++)
        if (!g->nodes[ni].dead && (g->nodes[ni].op_id == KILN_OP_MatMul || g->nodes[ni].op_id == KILN_OP_Gemm))
            KILN_TRY(match_matmul(g, o, ni));
    if (kiln__pass_on(o, KILN_PASS_FUSE_MATMUL)) cancel_transpose_pairs(g);
    /* the shape arithmetic the fused layers no longer read goes: torch 1.13's
     * run-time Reshape targets read Shape of nn.MultiheadAttention's input,
     * and match_batch_first wants the Transpose that makes it read by the
     * projection alone */
    KILN_TRY(kiln__pass_dce(g));
    kiln__graph_link(g);
    for (int ni = 0; kiln__pass_on(o, KILN_PASS_FUSE_QKV) && ni < g->n_nodes; ni++)
        if (!g->nodes[ni].dead && g->nodes[ni].op_id == KILN_OP_Attention) {
            KILN_TRY(match_qkv(g, o, ni));
            if (!g->nodes[ni].dead && g->nodes[ni].op_id == KILN_OP_Attention) KILN_TRY(match_split_qkv(g, o, ni));
            if (!g->nodes[ni].dead && g->nodes[ni].op_id == KILN_OP_Attention) KILN_TRY(match_gather_qkv(g, o, ni));
            if (!g->nodes[ni].dead && g->nodes[ni].op_id == KILN_OP_Attention) KILN_TRY(match_slice_qkv(g, o, ni));
            if (!g->nodes[ni].dead && g->nodes[ni].op_id == KILN_OP_Attention) KILN_TRY(match_slice_kv(g, o, ni));
            if (!g->nodes[ni].dead && g->nodes[ni].op_id == KILN_OP_Attention) KILN_TRY(match_batch_first(g, o, ni));
        }
    /* fp16/bf16 device plans: one additive mask for the layers that share a cond */
    const kiln_backend_i *be = kiln__backend_for(o->device);
    if (be && be->reduced_tensors && (o->precision == KILN_PRECISION_FP16 || o->precision == KILN_PRECISION_BF16) &&
        kiln__pass_on(o, KILN_PASS_SHARE_ATTENTION_MASK)) {
        kiln__graph_link(g);
        mask_places pl = {.n0 = g->n_nodes};
        kiln_status st = KILN_OK;
        for (int ni = 0; st == KILN_OK && ni < pl.n0; ni++)
            if (!g->nodes[ni].dead && g->nodes[ni].op_id == KILN_OP_Attention) st = share_attention_mask(g, o, ni, &pl);
        /* the Wheres in the order they had when each was placed as it was
         * made: right after its node, before those placed there earlier
         * (two conds made from one value; the last place_after links) */
        for (int a = pl.n0, b = g->n_nodes - 1; st == KILN_OK && a < b; a++, b--) {
            kiln_node t = g->nodes[a];
            g->nodes[a] = g->nodes[b];
            g->nodes[b] = t;
            int ta = pl.after[a - pl.n0];
            pl.after[a - pl.n0] = pl.after[b - pl.n0];
            pl.after[b - pl.n0] = ta;
        }
        if (st == KILN_OK) st = kiln__nodes_place_after(g, pl.n0, pl.after);
        kiln__free(pl.after);
        kiln__free(pl.share);
        return st;
    }
    return KILN_OK;
}
