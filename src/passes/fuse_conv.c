/* fuse_conv.c -- convolution rewrites of the graph optimizer.
 *
 * 1. BatchNormalization (inference form, per channel) reading only a Conv
 *    with constant float32 weights is folded into the Conv:
 *        s = scale / sqrt(var + eps);  W'[m] = W[m] * s[m];
 *        B'[m] = (B[m] - mean[m]) * s[m] + bias[m]
 * 2. Every float32 Conv becomes a kiln.FusedConv (which has tactics), taking
 *    along what follows it:
 *        Conv -> Add(other, same shape)           residual
 *             -> Relu | Clip(const min/max) | LeakyRelu | Sigmoid | HardSwish
 *             |  HardSigmoid(alpha, beta)         (MobileNetV3's squeeze-excite gate)
 *             |  Sigmoid + Mul(x, sigmoid(x))     (SiLU)
 *    Each step needs the intermediate value to be read by the next node only
 *    (SiLU: by the Sigmoid and the Mul only) and not be a graph output.
 * A rewrite is made only where the device's backend supports the new node.
 * The fused node replaces the pattern's last node and is named "a+b+c"
 * after the nodes it came from. */
#include "backends/backend.h"
#include "ops/elementwise_impl.h"
#include "ops/fused_conv.h"
#include "passes/pattern.h"
#include "passes/precision.h"

#include <math.h>

static bool is_const_f32(const kiln_graph *g, int v, int64_t n) {
    int64_t k = -1;
    return v >= 0 && kiln__pat_const_f32(g, v, &k) && (n < 0 || k == n);
}

/* ---- BatchNormalization folding ------------------------------------------- */

static kiln_status fold_bn(kiln_graph *g, int device, int bi) {
    kiln_node *bn = &g->nodes[bi];
    const kiln_bn_attrs *ba = bn->attrs;
    if (bn->n_out != 1 || bn->n_in != 5 || !ba || ba->spatial == 0) return KILN_OK;
    int x = bn->in[0];
    int ci = kiln__pat_producer(g, x, KILN_OP_Conv);
    if (ci < 0 || !kiln__pat_sole_use(g, x)) return KILN_OK;
    kiln_node *cv = &g->nodes[ci];
    int w = cv->in[1], b = cv->n_in > 2 ? cv->in[2] : -1;
    const kiln_tinfo *wi = &g->values[w].info;
    if (!is_const_f32(g, w, -1) || wi->rank < 3 || wi->dims[0] <= 0) return KILN_OK;
    int64_t M = wi->dims[0];
    if (b >= 0 && !is_const_f32(g, b, M)) return KILN_OK;
    for (int k = 1; k < 5; k++)
        if (!is_const_f32(g, bn->in[k], M)) return KILN_OK;
    if (!kiln__pat_supports(g, device, KILN_OP_Conv, cv->n_in, cv->in, 1, cv->out, cv->attrs))
        return KILN_OK;
    const float *W = g->values[w].data, *B0 = b >= 0 ? g->values[b].data : NULL;
    const float *sc = g->values[bn->in[1]].data, *bb = g->values[bn->in[2]].data;
    const float *mean = g->values[bn->in[3]].data, *var = g->values[bn->in[4]].data;
    int64_t per = kiln__numel(wi->rank, wi->dims) / M;
    float *nw = kiln__aligned_alloc((size_t)(M * per) * sizeof(float));
    float *nb = kiln__aligned_alloc((size_t)M * sizeof(float));
    kiln_status st = KILN_OK;
    if (!nw || !nb) {
        st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "optimizer: out of memory folding '%s'", bn->name);
        goto done;
    }
    for (int64_t m = 0; m < M; m++) {
        float s = (float)((double)sc[m] / sqrt((double)var[m] + (double)ba->epsilon));
        for (int64_t i = 0; i < per; i++) nw[m * per + i] = W[m * per + i] * s;
        nb[m] = ((B0 ? B0[m] : 0.0f) - mean[m]) * s + bb[m];
    }
    int in[3] = {cv->in[0], -1, -1}, out[1] = {bn->out[0]};
    int64_t wd[KILN_MAX_RANK]; /* a copy: adding a value may move g->values (and wi) */
    int wr = wi->rank;
    memcpy(wd, wi->dims, sizeof(int64_t) * (size_t)wr);
    if ((st = kiln__graph_add_const(g, g->values[w].name, KILN_DTYPE_FLOAT32, wr, wd, nw, &in[1])) != KILN_OK)
        goto done;
    int64_t bd[1] = {M};
    if ((st = kiln__graph_add_const(g, g->values[w].name, KILN_DTYPE_FLOAT32, 1, bd, nb, &in[2])) !=
        KILN_OK)
        goto done;
    /* pointers may have moved: values grew */
    cv = &g->nodes[ci];
    bn = &g->nodes[bi];
    kiln_conv_attrs ca = *(const kiln_conv_attrs *)cv->attrs;
    int from[2] = {ci, bi};
    st = kiln__pat_replace(g, bi, KILN_OP_Conv, 3, in, 1, out, &ca, from, 2);
    if (st != KILN_OK) goto done;
    g->nodes[ci].dead = true;
    kiln__graph_relink(g, from, 2);
done:
    kiln__aligned_free(nw);
    kiln__aligned_free(nb);
    return st;
}

/* ---- Conv (+ residual) (+ activation) -> FusedConv ------------------------- */

/* the same shape (kiln__pat_same_shape) and dtype */
static bool same_shape(const kiln_tinfo *a, const kiln_tinfo *b) {
    return a->dtype == b->dtype && kiln__pat_same_shape(a, b);
}

/* Live nodes reading v (up to cap, in graph order), count returned. */
static int consumers(const kiln_graph *g, int v, int *out, int cap) {
    int n = 0, nu = 0;
    const kiln_use *u = kiln__graph_uses(g, v, &nu);
    if (u && nu <= 2) { /* (match_act asks only of values read twice at most) */
        int a = nu > 0 ? u[0].node : -1, b = nu > 1 ? u[1].node : -1;
        if (a > b) {
            int t = a;
            a = b;
            b = t;
        }
        if (a >= 0 && n < cap) out[n] = a;
        if (a >= 0) n++;
        if (b >= 0 && b != a && n < cap) out[n] = b;
        if (b >= 0 && b != a) n++;
        return n;
    }
    kiln__graph_note_visits(g, g->n_nodes);
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *nd = &g->nodes[ni];
        if (nd->dead) continue;
        for (int i = 0; i < nd->n_in; i++)
            if (nd->in[i] == v) {
                if (n < cap) out[n] = ni;
                n++;
                break;
            }
    }
    return n;
}

/* Scalar float constant of input i of node n, or `dflt` when absent. */
static bool scalar_input(const kiln_graph *g, const kiln_node *n, int i, float dflt, float *out) {
    if (i >= n->n_in || n->in[i] < 0) {
        *out = dflt;
        return true;
    }
    int64_t k = 0;
    const float *p = kiln__pat_const_f32(g, n->in[i], &k);
    if (!p || k != 1) return false;
    *out = p[0];
    return true;
}

/* Tries to take an activation reading value `cur`; sets *last to the node
 * that ends it (and *mid to a middle node for SiLU). */
static bool match_act(const kiln_graph *g, int cur, kiln_fused_conv_attrs *fa, int *last, int *mid) {
    int cs[3];
    /* read more than twice (an output's use counts): neither SiLU nor a sole reader */
    if (kiln__graph_is_output(g, cur) || g->values[cur].n_uses > 2) return false;
    int nc = consumers(g, cur, cs, 3);
    *mid = -1;
    if (nc == 2) { /* SiLU: Sigmoid(cur) and Mul(cur, sigmoid) */
        for (int k = 0; k < 2; k++) {
            const kiln_node *s = &g->nodes[cs[k]], *m = &g->nodes[cs[1 - k]];
            if (s->op_id != KILN_OP_Sigmoid || m->op_id != KILN_OP_Mul || m->n_in != 2) continue;
            int so = s->out[0];
            if (!kiln__pat_sole_use(g, so) || g->values[cur].n_uses != 2) continue;
            bool ok = (m->in[0] == cur && m->in[1] == so) || (m->in[1] == cur && m->in[0] == so);
            const kiln_ew_bin_attrs *ma = m->attrs;
            if (!ok || (ma && ma->legacy_bcast != EW_LEGACY_NONE)) continue;
            if (!same_shape(&g->values[m->out[0]].info, &g->values[cur].info)) continue;
            fa->act = KILN_FC_ACT_SILU;
            *mid = cs[k];
            *last = cs[1 - k];
            return true;
        }
        return false;
    }
    if (nc != 1 || !kiln__pat_sole_use(g, cur)) return false;
    const kiln_node *n = &g->nodes[cs[0]];
    if (n->n_out != 1) return false;
    switch (n->op_id) {
    case KILN_OP_Relu: fa->act = KILN_FC_ACT_RELU; break;
    case KILN_OP_Sigmoid: fa->act = KILN_FC_ACT_SIGMOID; break;
    case KILN_OP_HardSwish: fa->act = KILN_FC_ACT_HARD_SWISH; break;
    case KILN_OP_HardSigmoid: {
        const kiln_ew_act_attrs *ha = n->attrs;
        if (!ha || isnan(ha->alpha) || isnan(ha->beta)) return false;
        fa->act = KILN_FC_ACT_HARD_SIGMOID;
        fa->alpha = ha->alpha;
        fa->beta = ha->beta;
        break;
    }
    case KILN_OP_LeakyRelu:
        fa->act = KILN_FC_ACT_LEAKY_RELU;
        fa->alpha = ((const kiln_ew_act_attrs *)n->attrs)->alpha;
        break;
    case KILN_OP_Clip:
        if (!scalar_input(g, n, 1, -INFINITY, &fa->alpha) ||
            !scalar_input(g, n, 2, INFINITY, &fa->beta) || isnan(fa->alpha) || isnan(fa->beta))
            return false;
        fa->act = KILN_FC_ACT_CLIP;
        break;
    default: return false;
    }
    *last = cs[0];
    return true;
}

static kiln_status fuse_conv(kiln_graph *g, const kiln_optimize_opts *o, int ci) {
    const kiln_node *cv = &g->nodes[ci];
    int y = cv->out[0];
    if (cv->n_out != 1 || y < 0) return KILN_OK;
    const kiln_tinfo *xi = &g->values[cv->in[0]].info, *yi = &g->values[y].info;
    if (xi->dtype != KILN_DTYPE_FLOAT32 || xi->rank < 3 || yi->rank != xi->rank) return KILN_OK;
    kiln_fused_conv_attrs fa;
    memset(&fa, 0, sizeof fa);
    fa.conv = *(const kiln_conv_attrs *)cv->attrs;
    fa.precision = o->precision == KILN_PRECISION_BF16 ? KILN_PRECISION_BF16 : KILN_PRECISION_FP32;
    for (int i = 0; i < o->n_fp32_layers; i++) /* --layer-precision NAME:fp32 */
        if (kiln__layer_name_matches(cv->name, o->fp32_layers[i])) fa.precision = KILN_PRECISION_FP32;
    int nodes[4] = {ci, -1, -1, -1}, n_nodes = 1;
    int in[4] = {cv->in[0], cv->in[1], cv->n_in > 2 ? cv->in[2] : -1, -1};
    int cur = y;
    /* residual */
    int ai = kiln__pat_sole_consumer(g, cur);
    if (ai >= 0 && g->nodes[ai].op_id == KILN_OP_Add && g->nodes[ai].n_in == 2) {
        const kiln_node *an = &g->nodes[ai];
        const kiln_ew_bin_attrs *aa = an->attrs;
        int other = an->in[0] == cur ? an->in[1] : an->in[0];
        if (other != cur && (!aa || aa->legacy_bcast == EW_LEGACY_NONE) &&
            same_shape(&g->values[other].info, yi) &&
            same_shape(&g->values[an->out[0]].info, yi)) {
            in[3] = other;
            fa.has_residual = 1;
            nodes[n_nodes++] = ai;
            cur = an->out[0];
        }
    }
    int last = -1, mid = -1;
    if (match_act(g, cur, &fa, &last, &mid)) {
        if (mid >= 0) nodes[n_nodes++] = mid;
        nodes[n_nodes++] = last;
        cur = g->nodes[last].out[0];
    }
    int n_in = fa.has_residual ? 4 : 3;
    int out[1] = {cur};
    int lastn = nodes[n_nodes - 1];
    if (!kiln__pat_supports(g, o->device, KILN_OP_FusedConv, n_in, in, 1, out, &fa))
        return KILN_OK; /* the device has no fused kernel: the nodes stay as they are */
    KILN_TRY(kiln__pat_replace(g, lastn, KILN_OP_FusedConv, n_in, in, 1, out, &fa, nodes, n_nodes));
    for (int i = 0; i < n_nodes - 1; i++) g->nodes[nodes[i]].dead = true;
    kiln__graph_relink(g, nodes, n_nodes);
    return KILN_OK;
}

/* ---- 1x1 FusedConv -> depthwise 3x3 FusedConv -> PwDwConv ------------------ */

/* The tensor between the two, per image, from which the fused layer pays
 * on the CPU: below it the tensor stays in the caches anyway and oneDNN's
 * kernels for the two layers apart are as fast (MobileNetV2, see
 * docs/cpu-conv.md). */
#define PWDW_MIN_BYTES (512.0 * 1024.0)

/* The resolved geometry of FusedConv n (false: unknown or not 2-D). */
static bool fc_geom(const kiln_graph *g, const kiln_node *n, kiln_conv_geom *cg) {
    const kiln_fused_conv_attrs *fa = n->attrs;
    const kiln_tinfo *x = &g->values[n->in[0]].info, *w = &g->values[n->in[1]].info;
    if (x->rank != 4 || w->rank != 4 || x->dtype != KILN_DTYPE_FLOAT32) return false;
    if (kiln__conv_geom(n->name, "FusedConv", &fa->conv, x->rank, x->dims, w->rank, w->dims, cg) !=
        KILN_OK) {
        kiln__clear_error();
        return false;
    }
    return cg->ns == 2;
}

/* A float32 FusedConv whose weights (and bias) are constants. */
static bool const_fc(const kiln_graph *g, const kiln_node *n) {
    if (n->dead || n->op_id != KILN_OP_FusedConv || n->n_out != 1 || n->n_in < 2) return false;
    const kiln_fused_conv_attrs *fa = n->attrs;
    if (fa->precision != KILN_PRECISION_FP32) return false;
    if (!is_const_f32(g, n->in[1], -1)) return false;
    return n->n_in < 3 || n->in[2] < 0 || is_const_f32(g, n->in[2], -1);
}

/* Without residual, too. */
static bool plain_fc(const kiln_graph *g, const kiln_node *n) {
    return const_fc(g, n) && !((const kiln_fused_conv_attrs *)n->attrs)->has_residual;
}

/* A 1x1 convolution: stride 1, no pads, one group, dims known (but the batch). */
static bool pointwise(const kiln_conv_geom *cg) {
    if (cg->G != 1 || cg->C < 1 || cg->M < 1 || cg->in[0] < 1 || cg->in[1] < 1) return false;
    for (int i = 0; i < 2; i++)
        if (cg->k[i] != 1 || cg->s[i] != 1 || cg->d[i] != 1 || cg->pb[i] || cg->pe[i]) return false;
    return true;
}

/* A depthwise 3x3 convolution the row kernel takes: stride 1 or 2, pads 0 or 1,
 * channels and spatial dims known. */
static bool depthwise3(const kiln_conv_geom *dg) {
    if (dg->C < 1 || dg->G != dg->C || dg->M != dg->C || dg->s[0] != dg->s[1] || dg->s[0] < 1 || dg->s[0] > 2 ||
        dg->in[0] < 1 || dg->in[1] < 1)
        return false;
    for (int i = 0; i < 2; i++)
        if (dg->k[i] != 3 || dg->d[i] != 1 || dg->pb[i] < 0 || dg->pb[i] > 1 || dg->pe[i] < 0 || dg->pe[i] > 1 ||
            dg->out[i] < 1)
            return false;
    return true;
}

/* The depthwise half of PwDwConv's attrs from FusedConv dw (geometry dg). */
static void dw_attrs(const kiln_node *dw, const kiln_conv_geom *dg, kiln_pwdw_attrs *at) {
    const kiln_fused_conv_attrs *da = dw->attrs;
    at->act2 = da->act;
    at->alpha2 = da->alpha;
    at->beta2 = da->beta;
    at->stride = (int32_t)dg->s[0];
    at->pads[0] = (int32_t)dg->pb[0];
    at->pads[1] = (int32_t)dg->pb[1];
    at->pads[2] = (int32_t)dg->pe[0];
    at->pads[3] = (int32_t)dg->pe[1];
}

/* The project half (FusedConv q: its activation and residual): attrs and
 * inputs 5..7; returns the input count. */
static int project_attrs(const kiln_node *q, kiln_pwdw_attrs *at, int in[8]) {
    const kiln_fused_conv_attrs *qa = q->attrs;
    at->has_project = 1;
    at->has_residual = qa->has_residual ? 1 : 0;
    at->act3 = qa->act;
    at->alpha3 = qa->alpha;
    at->beta3 = qa->beta;
    in[5] = q->in[1];
    in[6] = q->n_in > 2 ? q->in[2] : -1;
    in[7] = at->has_residual ? q->in[3] : -1;
    return at->has_residual ? 8 : 7;
}

/* Node `keep` becomes a PwDwConv (its output stays), named after nodes
 * `first` and `keep`; `first` dies. Nothing changes where the backend
 * has no kernel for it. */
static kiln_status make_pwdw(kiln_graph *g, const kiln_optimize_opts *o, int first, int keep,
                             const kiln_pwdw_attrs *at, const int *in, int n_in) {
    int out[1] = {g->nodes[keep].out[0]};
    if (!kiln__pat_supports(g, o->device, KILN_OP_PwDwConv, n_in, in, 1, out, at)) return KILN_OK;
    int from[2] = {first, keep};
    KILN_TRY(kiln__pat_replace(g, keep, KILN_OP_PwDwConv, n_in, in, 1, out, at, from, 2));
    g->nodes[first].dead = true;
    kiln__graph_relink(g, from, 2);
    return KILN_OK;
}

/* A depthwise FusedConv without a 1x1 layer before it whose output only a
 * 1x1 FusedConv reads (MobileNetV2's first block): one PwDwConv without the
 * first pointwise convolution, where the depthwise output is large. */
static kiln_status fuse_dwpw(kiln_graph *g, const kiln_optimize_opts *o, int di, const kiln_conv_geom *dg) {
    const kiln_node *dw = &g->nodes[di];
    int d = dw->out[0];
    int qi = kiln__pat_sole_consumer(g, d);
    if (qi < 0 || !kiln__pat_sole_use(g, d)) return KILN_OK;
    const kiln_node *q = &g->nodes[qi];
    kiln_conv_geom qg;
    if (!const_fc(g, q) || q->in[0] != d || !fc_geom(g, q, &qg) || !pointwise(&qg)) return KILN_OK;
    double bytes = 4.0 * (double)dg->C * (double)dg->out[0] * (double)dg->out[1];
    if (bytes < PWDW_MIN_BYTES) return KILN_OK;
    kiln_pwdw_attrs at;
    memset(&at, 0, sizeof at);
    at.no_expand = 1;
    dw_attrs(dw, dg, &at);
    int in[8] = {dw->in[0], -1, -1, dw->in[1], dw->n_in > 2 ? dw->in[2] : -1};
    int n_in = project_attrs(q, &at, in);
    return make_pwdw(g, o, di, qi, &at, in, n_in);
}

static kiln_status fuse_pwdw(kiln_graph *g, const kiln_optimize_opts *o, int di) {
    const kiln_node *dw = &g->nodes[di];
    kiln_conv_geom dg, pg;
    if (!plain_fc(g, dw) || !fc_geom(g, dw, &dg) || !depthwise3(&dg)) return KILN_OK;
    int t = dw->in[0];
    int pi = kiln__pat_producer(g, t, KILN_OP_FusedConv);
    const kiln_node *pw = pi >= 0 ? &g->nodes[pi] : NULL;
    /* the depthwise layer over the output of a 1x1 layer read by it alone */
    if (!pw || !kiln__pat_sole_use(g, t) || !plain_fc(g, pw) || !fc_geom(g, pw, &pg) || !pointwise(&pg) ||
        dg.C != pg.M)
        return fuse_dwpw(g, o, di, &dg);
    double bytes = 4.0 * (double)pg.M * (double)pg.in[0] * (double)pg.in[1];
    if (bytes < PWDW_MIN_BYTES) return KILN_OK;
    const kiln_fused_conv_attrs *pa = pw->attrs;
    kiln_pwdw_attrs at;
    memset(&at, 0, sizeof at);
    at.act1 = pa->act;
    at.alpha1 = pa->alpha;
    at.beta1 = pa->beta;
    dw_attrs(dw, &dg, &at);
    int in[5] = {pw->in[0], pw->in[1], pw->n_in > 2 ? pw->in[2] : -1, dw->in[1],
                 dw->n_in > 2 ? dw->in[2] : -1};
    return make_pwdw(g, o, pi, di, &at, in, 5);
}

/* PwDwConv -> 1x1 FusedConv (the project convolution, with its residual
 * and activation) into one PwDwConv. */
static kiln_status fuse_pwdw_project(kiln_graph *g, const kiln_optimize_opts *o, int qi) {
    const kiln_node *q = &g->nodes[qi];
    kiln_conv_geom qg;
    if (!const_fc(g, q) || !fc_geom(g, q, &qg) || !pointwise(&qg)) return KILN_OK;
    int d = q->in[0];
    int pi = kiln__pat_producer(g, d, KILN_OP_PwDwConv);
    if (pi < 0 || !kiln__pat_sole_use(g, d)) return KILN_OK;
    const kiln_node *p = &g->nodes[pi];
    const kiln_pwdw_attrs *pa = p->attrs;
    if (pa->has_project || p->n_in != 5) return KILN_OK;
    kiln_pwdw_attrs at = *pa;
    int in[8] = {p->in[0], p->in[1], p->in[2], p->in[3], p->in[4]};
    int n_in = project_attrs(q, &at, in);
    return make_pwdw(g, o, pi, qi, &at, in, n_in);
}

kiln_status kiln__opt_conv(kiln_graph *g, const kiln_optimize_opts *o) {
    if (!kiln__backend_for(o->device)) return KILN_OK;
    kiln__graph_link(g);
    for (int ni = 0; kiln__pass_on(o, KILN_PASS_FOLD_BN) && ni < g->n_nodes; ni++) {
        if (g->nodes[ni].dead || g->nodes[ni].op_id != KILN_OP_BatchNormalization) continue;
        KILN_TRY(fold_bn(g, o->device, ni));
    }
    int n = g->n_nodes;
    for (int ni = 0; kiln__pass_on(o, KILN_PASS_FUSE_CONV) && ni < n; ni++) {
        if (g->nodes[ni].dead || g->nodes[ni].op_id != KILN_OP_Conv) continue;
        KILN_TRY(fuse_conv(g, o, ni));
    }
    /* (only where the backend has a PwDwConv kernel: kiln__pat_supports) */
    if (kiln__pass_on(o, KILN_PASS_FUSE_PWDW)) {
        for (int ni = 0; ni < g->n_nodes; ni++) KILN_TRY(fuse_pwdw(g, o, ni));
        for (int ni = 0; ni < g->n_nodes; ni++) KILN_TRY(fuse_pwdw_project(g, o, ni));
    }
    return KILN_OK;
}
