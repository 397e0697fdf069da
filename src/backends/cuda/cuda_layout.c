/* cuda_layout.c -- channels-last chains on CUDA (see cuda_layout.h).
 *
 * cuDNN's tensor-core convolutions for fp16/bf16 read and write NHWC; given
 * NCHW tensors they transpose them around every layer or pick slower
 * kernels. Here the eligible layers (FusedConv, depthwise and grouped FusedConv,
 * MaxPool/AveragePool, GlobalAveragePool, and the elementwise layers
 * between them) that pass values to one another keep those values NHWC,
 * and only the ends of a chain convert:
 *
 *   NCHW v into a FusedConv: the layer converts it (layout Y_NHWC alone:
 *     one kernel, channels padded to a multiple of 8 for cuDNN: ResNet's
 *     3-channel stem)
 *   NCHW v into a pool or a residual:
 *     Transpose(0,2,3,1) [N,H,W,C] -> Reshape [N,C,H,W] (NHWC bytes)
 *   NHWC v -> Reshape [N,H,W,C] -> Transpose(0,3,1,2) [N,C,H,W] (NCHW)
 *
 * (the Reshapes are views: no copy). Every value keeps its NCHW shape; a
 * value's bytes are NHWC exactly when an NHWC layer produced it. The
 * model's own Transposes between the layouts become views too where they
 * meet a chain (ConvNeXt's Permutes around its LayerNorms and MLPs):
 *
 *   Transpose(0,2,3,1) of NHWC bytes [N,C,H,W] -> Reshape [N,H,W,C]
 *   Transpose(0,3,1,2) of [N,H,W,C] read by a chain layer
 *     -> Reshape [N,C,H,W] (NHWC bytes)
 *
 * C, H and W must be known; the batch may be dynamic (an engine built for
 * a batch range: a symbol or unknown at build time): the Reshapes' targets
 * then hold 0 there (ONNX: copy the input's dim), resolved at run time, and
 * the layers read the batch from their tensors at every run.
 * GlobalAveragePool and kiln.SqueezeExcite read NHWC and write [N, C, 1, 1],
 * which is both (such values are never converted). An elementwise layer with a per-channel
 * operand (the SE block's Mul) computes over [N, H, W, C] views. */
#include "backends/cuda/cuda_layout.h"


#include <stdio.h>
#include <stdlib.h>

#include "ops/elementwise_impl.h"
#include "ops/fused_conv.h"
#include "ops/fused_se.h"
#include "ops/tensor_internal.h"

#if KILN_HAVE_CUDA && KILN_HAVE_CUDNN

static bool static_4d(const kiln_tinfo *t) {
    if (t->rank != 4) return false;
    for (int i = 0; i < 4; i++)
        if (t->dims[i] <= 0) return false;
    return true;
}

/* A 4-D value [N, C, H, W] with C, H and W known and the batch N known or
 * dynamic (< 0: a symbol, or unknown; every layer of a chain reads it from
 * its tensors at run time, and the conversions' Reshapes copy it). */
static bool nchw_4d(const kiln_tinfo *t) {
    if (t->rank != 4 || t->dims[0] == 0) return false;
    for (int i = 1; i < 4; i++)
        if (t->dims[i] <= 0) return false;
    return true;
}

static bool half_4d(const kiln_tinfo *t) {
    return (t->dtype == KILN_DTYPE_FLOAT16 || t->dtype == KILN_DTYPE_BFLOAT16) && nchw_4d(t);
}

/* What a layer is to the pass: K_DW a depthwise or grouped FusedConv
 * (kiln's NHWC kernels or cuDNN's grouped configs), K_EW an elementwise layer that runs
 * in either layout (its NHWC inputs and output keep their NCHW shapes; a
 * per-channel operand [N or 1, C, 1, 1] needs views, see ew_views), K_TIN
 * a Transpose(0,2,3,1) of an NHWC-held [N, C, H, W] value and K_TOUT a
 * Transpose(0,3,1,2) whose [N, C, H, W] output an NHWC layer reads: both
 * the identity on the bytes (ConvNeXt's Permutes around its LayerNorm and
 * MLP), so they become views. */
enum { K_NONE = 0, K_CONV, K_POOL, K_GAP, K_DW, K_EW, K_TIN, K_TOUT };

/* Whether value v's bytes are the same in both layouts: a 4-D value with
 * H = W = 1 ([N, C, 1, 1]: GlobalAveragePool's output, the SE block's
 * scales) or a single element. */
static bool neutral(const kiln_graph *g, int v) {
    if (v < 0) return true;
    const kiln_tinfo *t = &g->values[v].info;
    if (t->rank == 4 && t->dims[2] == 1 && t->dims[3] == 1) return true;
    if (t->rank < 0) return false;
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i] != 1) return false;
    return true;
}

/* Whether input i of n is a "full" 4-D operand of an elementwise layer:
 * the output's own static dims (not neutral). */
static bool full_in(const kiln_graph *g, const kiln_node *n, int i) {
    int v = n->in[i];
    if (v < 0 || neutral(g, v)) return false;
    const kiln_tinfo *t = &g->values[v].info, *y = &g->values[n->out[0]].info;
    return t->rank == 4 && y->rank == 4 && !memcmp(t->dims, y->dims, 4 * sizeof(int64_t));
}

/* t's dims as 4 (numpy broadcasting: leading 1s), false above rank 4. */
static bool dims4(const kiln_tinfo *t, int64_t *d) {
    if (t->rank < 0 || t->rank > 4) return false;
    int lead = 4 - t->rank;
    for (int i = 0; i < 4; i++) d[i] = i < lead ? 1 : t->dims[i - lead];
    return true;
}

/* Whether input i of n is a per-channel operand [1 or N, 1 or C, 1, 1]
 * (or of lower rank: [C, 1, 1], ConvNeXt's layer scale) of a 4-D output
 * [N, C, H, W] (the SE block's Mul). */
static bool chan_in(const kiln_graph *g, const kiln_node *n, int i) {
    int v = n->in[i];
    int64_t d[4];
    if (v < 0 || !dims4(&g->values[v].info, d)) return false;
    const kiln_tinfo *y = &g->values[n->out[0]].info;
    return d[2] == 1 && d[3] == 1 && (d[0] == 1 || d[0] == y->dims[0]) && (d[1] == 1 || d[1] == y->dims[1]) &&
           !(d[0] == 1 && d[1] == 1);
}

/* A FusedConv that cuDNN runs channels-last (graph or legacy API; the
 * input may come NCHW with any channel count: the layer converts it). */
static bool conv_ok(const kiln_graph *g, const kiln_node *n) {
    const kiln_fused_conv_attrs *fa = n->attrs;
    const kiln_conv_attrs *ca = &fa->conv;
    if (fa->layout || (ca->group != 0 && ca->group != 1)) return false;
    if (n->n_in < 2 || n->in[0] < 0 || n->in[1] < 0) return false;
    const kiln_tinfo *x = &g->values[n->in[0]].info, *w = &g->values[n->in[1]].info;
    const kiln_tinfo *y = &g->values[n->out[0]].info;
    if (!half_4d(x) || !static_4d(w) || !half_4d(y) || y->dims[1] % 8) return false;
    if (ca->auto_pad != PAD_NOTSET && ca->auto_pad != PAD_VALID) return false;
    if (ca->auto_pad == PAD_NOTSET && ca->n_pads)
        for (int i = 0; i < 2; i++)
            if (ca->pads[i] != ca->pads[2 + i]) return false; /* asymmetric: not the legacy API */
    if (fa->has_residual && (n->n_in < 4 || n->in[3] < 0)) return false;
    /* on [N, C, 1, 1] (the SE block's convolutions) both layouts are the same bytes: NCHW */
    if (neutral(g, n->in[0])) return false;
    return true;
}

/* What dw_ok and gc_ok ask of a FusedConv alike: still NCHW, fp16/bf16 4-D
 * input and output over a static 4-D weight, an input that is not
 * [N, C, 1, 1] (the same bytes in either layout), and its residual present
 * where it has one; *x, *w, *y its input, weight and output. */
static bool grouped_io(const kiln_graph *g, const kiln_node *n, const kiln_tinfo **x, const kiln_tinfo **w,
                       const kiln_tinfo **y) {
    const kiln_fused_conv_attrs *fa = n->attrs;
    if (fa->layout || n->n_in < 2 || n->in[0] < 0 || n->in[1] < 0) return false;
    if (fa->has_residual && (n->n_in < 4 || n->in[3] < 0)) return false;
    *x = &g->values[n->in[0]].info;
    *w = &g->values[n->in[1]].info;
    *y = &g->values[n->out[0]].info;
    return half_4d(*x) && static_4d(*w) && half_4d(*y) && !neutral(g, n->in[0]);
}

/* A depthwise FusedConv (group = C = M, weights [C, 1, kh, kw], 2-D): kiln's
 * NHWC kernel takes any channel count, pads and strides. */
static bool dw_ok(const kiln_graph *g, const kiln_node *n) {
    const kiln_tinfo *x, *w, *y;
    if (!grouped_io(g, n, &x, &w, &y)) return false;
    const int64_t C = x->dims[1];
    return C >= 2 && ((const kiln_fused_conv_attrs *)n->attrs)->conv.group == C && w->dims[0] == C &&
           w->dims[1] == 1 && y->dims[1] == C;
}

/* A grouped FusedConv with several input channels a group (RegNet's group
 * width 24 and up, ResNeXt's; 2-D, weights [M, C / G, kh, kw]) whose
 * groups have multiples of 8 input and output channels: kiln's tensor-core
 * kernel (k_gconv.cu) and cuDNN's NHWC engines take it. In NCHW, cuDNN
 * runs such layers with its legacy non-tensor-core kernel
 * (implicit_convolve_sgemm) or its engines with layout conversions around
 * them, and the layer cuts the NHWC chains of the 1x1 layers around it. */
static bool gc_ok(const kiln_graph *g, const kiln_node *n) {
    const kiln_tinfo *x, *w, *y;
    if (!grouped_io(g, n, &x, &w, &y)) return false;
    const int64_t G = ((const kiln_fused_conv_attrs *)n->attrs)->conv.group, C = x->dims[1], M = w->dims[0],
                  Cg = w->dims[1];
    if (G < 2 || Cg < 2 || Cg * G != C || M % G || y->dims[1] != M) return false;
    return Cg % 8 == 0 && (M / G) % 8 == 0;
}

/* An elementwise layer that computes the same in either layout: unary
 * activations, Clip (scalar bounds), Identity, Add/Sub/Mul/Div and
 * kiln.Pointwise (one output) whose inputs are full 4-D operands, single elements or
 * per-channel [N or 1, C, 1, 1] operands, at least one full (output
 * [N, C, H, W] with C, H, W known, not 1x1). A dynamic batch is the same
 * symbol in the operands it is equal in (shape inference); where two are
 * unknown (-1) they may differ at run time only by broadcasting over the
 * batch, which is the same in both layouts. */
static bool ew_ok(const kiln_graph *g, const kiln_node *n) {
    /* (Identity: a model's named output, `feat`, read by the next layer too) */
    if (!kiln__op_same_index(n->op_id) && n->op_id != KILN_OP_Identity) return false;
    if (n->op_id == KILN_OP_Add || n->op_id == KILN_OP_Sub || n->op_id == KILN_OP_Mul || n->op_id == KILN_OP_Div) {
        const kiln_ew_bin_attrs *ba = n->attrs;
        if (ba && ba->legacy_bcast) return false;
    }
    if (n->n_out != 1 || n->out[0] < 0 || neutral(g, n->out[0])) return false;
    const kiln_tinfo *y = &g->values[n->out[0]].info; /* (a Pointwise may end with a Cast to float32) */
    if (!nchw_4d(y) || (y->dtype != KILN_DTYPE_FLOAT32 && !half_4d(y))) return false;
    int full = 0;
    for (int i = 0; i < n->n_in; i++) {
        if (full_in(g, n, i)) full++;
        else if (n->in[i] >= 0 && !neutral(g, n->in[i]) && !chan_in(g, n, i)) return false;
    }
    return full > 0;
}

static const int32_t perm_to_nhwc[4] = {0, 2, 3, 1}, perm_to_nchw[4] = {0, 3, 1, 2};

/* A Transpose of a float 4-D value by `perm` (K_TIN or K_TOUT) whose
 * [N, C, H, W] side (the input of K_TIN, the output of K_TOUT) has C, H
 * and W known and is not [N, C, 1, 1] (the same bytes both ways: nothing
 * to gain). Whether the NHWC side meets the chain is pruned later. */
static int perm_kind(const kiln_graph *g, const kiln_node *n) {
    const kiln_transpose_attrs *ta = n->attrs;
    if (n->n_in < 1 || n->in[0] < 0 || ta->n_perm != 4) return K_NONE;
    bool tin = !memcmp(ta->perm, perm_to_nhwc, sizeof perm_to_nhwc);
    if (!tin && memcmp(ta->perm, perm_to_nchw, sizeof perm_to_nchw)) return K_NONE;
    int v = tin ? n->in[0] : n->out[0];
    const kiln_tinfo *t = &g->values[v].info;
    if (!nchw_4d(t) || neutral(g, v) || (t->dtype != KILN_DTYPE_FLOAT32 && !half_4d(t))) return K_NONE;
    return tin ? K_TIN : K_TOUT;
}

static int node_kind(const kiln_graph *g, const kiln_node *n) {
    if (n->dead || n->device != KILN_DEVICE_CUDA || n->n_out < 1 || n->out[0] < 0) return K_NONE;
    if (ew_ok(g, n)) return K_EW;
    if (!n->attrs) return K_NONE;
    if (n->op_id == KILN_OP_Transpose) return perm_kind(g, n);
    if (n->op_id == KILN_OP_FusedConv) return conv_ok(g, n) ? K_CONV : dw_ok(g, n) || gc_ok(g, n) ? K_DW : K_NONE;
    if (n->n_in < 1 || n->in[0] < 0) return K_NONE;
    const kiln_tinfo *x = &g->values[n->in[0]].info;
    const kiln_pool_attrs *pa = n->attrs;
    if (n->op_id == KILN_OP_MaxPool || n->op_id == KILN_OP_AveragePool) {
        if (n->n_out > 1 && n->out[1] >= 0) return K_NONE; /* MaxPool indices */
        if (pa->layout || pa->n_kernel != 2 || !half_4d(x) || x->dims[1] % 8) return K_NONE;
        return half_4d(&g->values[n->out[0]].info) ? K_POOL : K_NONE;
    }
    if (n->op_id == KILN_OP_GlobalAveragePool)
        return !pa->layout && half_4d(x) && x->dims[1] % 8 == 0 ? K_GAP : K_NONE;
    /* kiln.SqueezeExcite pools its input as GlobalAveragePool does: a chain's last reader */
    if (n->op_id == KILN_OP_SqueezeExcite)
        return !((const kiln_se_attrs *)n->attrs)->layout && half_4d(x) && x->dims[1] % 8 == 0 ? K_GAP : K_NONE;
    return K_NONE;
}

/* Whether kind k writes its output NHWC (K_TOUT: its [N, C, H, W] output is
 * the bytes of its [N, H, W, C] input). */
static bool makes_nhwc(int k) { return k == K_CONV || k == K_POOL || k == K_DW || k == K_EW || k == K_TOUT; }

/* Whether input i of layer ni (of kind kind[ni]) can be NHWC: X, FusedConv's
 * residual, an elementwise layer's full operands, K_TIN's input (K_TOUT
 * reads an ordinary [N, H, W, C] value). */
static bool reads_nhwc(const kiln_graph *g, const int *kind, int ni, int i) {
    int k = kind[ni];
    if (k == K_EW) return full_in(g, &g->nodes[ni], i);
    if (k == K_TOUT) return false;
    return (k != K_NONE && i == 0) || ((k == K_CONV || k == K_DW) && i == 3);
}

typedef struct nhwc_ctx {
    kiln_graph *g;
    int n_nodes0, n_values0;
    int *after;     /* per new node: the node it follows */
    int cap_after;
} nhwc_ctx;

static kiln_status new_value(nhwc_ctx *c, int like, const char *tag, const int64_t *dims, int *out) {
    char name[512];
    for (int k = 0;; k++) {
        /* (the number always fits: a cut-off one would repeat forever) */
        snprintf(name, sizeof name, "%.400s/kiln_%.40s%d", c->g->values[like].name, tag, k);
        if (kiln__graph_find_value(c->g, name) < 0) break;
    }
    KILN_TRY(kiln__graph_add_value(c->g, name, out));
    kiln_value *v = &c->g->values[*out];
    v->info.dtype = c->g->values[like].info.dtype;
    v->info.rank = 4;
    memcpy(v->info.dims, dims ? dims : c->g->values[like].info.dims, 4 * sizeof(int64_t));
    v->producer = -1;
    return KILN_OK;
}

static kiln_status add_node(nhwc_ctx *c, int op, const char *name, int n_in, const int *in, int out,
                            const void *attrs, int after) {
    KILN_TRY(kiln__grow((void **)&c->after, &c->cap_after, c->g->n_nodes - c->n_nodes0 + 1,
                        sizeof *c->after));
    int ni;
    KILN_TRY(kiln__graph_add_node(c->g, op, name, n_in, in, 1, &out, attrs, &ni));
    c->g->nodes[ni].device = KILN_DEVICE_CUDA;
    c->g->nodes[ni].added = true; /* a layout conversion: no ONNX node behind it */
    c->g->values[out].producer = ni;
    c->after[ni - c->n_nodes0] = after;
    return KILN_OK;
}

/* A Reshape of v to `dims` (a view: no copy) into dst (a new value when
 * dst < 0, tagged `tag`), placed after node `after`. A dynamic batch
 * (dims[0] < 0) is 0 in the target: v's own batch, at run time. */
static kiln_status reshape_view(nhwc_ctx *c, int v, const int64_t *dims, int dst, const char *tag, int after,
                                int *out) {
    kiln_graph *g = c->g;
    if (dst < 0) KILN_TRY(new_value(c, v, tag, dims, &dst));
    char name[600];
    snprintf(name, sizeof name, "%s/kiln_%s_shape", g->values[v].name, tag);
    int64_t four = 4, target[4] = {dims[0] < 0 ? 0 : dims[0], dims[1], dims[2], dims[3]};
    int in[2] = {v, -1};
    KILN_TRY(kiln__graph_add_const(g, name, KILN_DTYPE_INT64, 1, &four, target, &in[1]));
    snprintf(name, sizeof name, "%s/kiln_%s_view", g->values[v].name, tag);
    kiln_reshape_attrs ra = {0};
    KILN_TRY(add_node(c, KILN_OP_Reshape, name, 2, in, dst, &ra, after));
    *out = dst;
    return KILN_OK;
}

/* Converts v (4-D, bytes NCHW if to_nhwc else NHWC) into the other layout:
 * writes `dst` (a new value when dst < 0), placed after node `after`. */
static kiln_status convert(nhwc_ctx *c, int v, bool to_nhwc, int dst, int after, int *out) {
    kiln_graph *g = c->g;
    int64_t nchw[4], nhwc[4];
    memcpy(nchw, g->values[v].info.dims, sizeof nchw);
    nhwc[0] = nchw[0], nhwc[1] = nchw[2], nhwc[2] = nchw[3], nhwc[3] = nchw[1];
    kiln_transpose_attrs ta;
    memset(&ta, 0, sizeof ta);
    ta.n_perm = 4;
    static const int32_t p_in[4] = {0, 2, 3, 1}, p_out[4] = {0, 3, 1, 2};
    memcpy(ta.perm, to_nhwc ? p_in : p_out, sizeof p_in);
    char name[600];
    int mid;
    if (to_nhwc) {
        KILN_TRY(new_value(c, v, "nhwc_t", nhwc, &mid));
        snprintf(name, sizeof name, "%s/kiln_to_nhwc", g->values[v].name);
        KILN_TRY(add_node(c, KILN_OP_Transpose, name, 1, &v, mid, &ta, after));
        if (dst < 0) KILN_TRY(new_value(c, v, "nhwc", NULL, &dst));
        KILN_TRY(reshape_view(c, mid, nchw, dst, "to_nhwc", after, out));
    } else {
        KILN_TRY(reshape_view(c, v, nhwc, -1, "nhwc_r", after, &mid));
        if (dst < 0) KILN_TRY(new_value(c, v, "nchw", NULL, &dst));
        snprintf(name, sizeof name, "%s/kiln_to_nchw", g->values[v].name);
        KILN_TRY(add_node(c, KILN_OP_Transpose, name, 1, &mid, dst, &ta, after));
        *out = dst;
    }
    return KILN_OK;
}

/* The original node that added node j (or original node j) follows. */
static int anchor(const nhwc_ctx *c, int j) { return j >= c->n_nodes0 ? c->after[j - c->n_nodes0] : j; }

/* Moves the last added node to the front of those that follow node ni
 * (it must run before the conversions already placed there). */
static void place_first_after(nhwc_ctx *c, int ni) {
    kiln_graph *g = c->g;
    int last = g->n_nodes - 1, f = last, n0 = c->n_nodes0;
    for (int j = n0; j < last; j++)
        if (c->after[j - n0] == ni) {
            f = j;
            break;
        }
    if (f == last) return;
    kiln_node t = g->nodes[last];
    memmove(&g->nodes[f + 1], &g->nodes[f], (size_t)(last - f) * sizeof t);
    g->nodes[f] = t;
    memmove(&c->after[f + 1 - n0], &c->after[f - n0], (size_t)(last - f) * sizeof *c->after);
    c->after[f - n0] = ni;
}

/* An elementwise layer with a per-channel operand (the SE block's Mul of
 * [N, C, H, W] by [N, C, 1, 1]) broadcasts over NHWC bytes through views:
 * its full operands as [N, H, W, C], the per-channel ones as [n, 1, 1, c],
 * its output computed as [N, H, W, C] and viewed back under the NCHW shape
 * (Reshapes, which the memory planner aliases: no copies). Runs after the
 * layer's inputs were rewired (they hold NHWC bytes). */
static kiln_status ew_views(nhwc_ctx *c, int ni) {
    kiln_graph *g = c->g;
    int n_in = g->nodes[ni].n_in, role[8] = {0}; /* 1 full, 2 per-channel */
    bool any = false;
    for (int i = 0; i < n_in && i < 8; i++) {
        role[i] = full_in(g, &g->nodes[ni], i) ? 1 : chan_in(g, &g->nodes[ni], i) ? 2 : 0;
        any |= role[i] == 2;
    }
    if (!any || n_in > 8) return KILN_OK;
    for (int i = 0; i < n_in; i++) {
        if (!role[i]) continue;
        int v = g->nodes[ni].in[i], nv;
        int64_t d[4]; /* (a per-channel operand may have a lower rank: [C, 1, 1]) */
        if (!dims4(&g->values[v].info, d)) return KILN_FAIL(KILN_ERR_INTERNAL, "NHWC pass: operand rank");
        int64_t vd[4] = {d[0], role[i] == 1 ? d[2] : 1, role[i] == 1 ? d[3] : 1, d[1]};
        KILN_TRY(reshape_view(c, v, vd, -1, "nhwc_in", ni - 1, &nv));
        g->nodes[ni].in[i] = nv; /* g->nodes may have moved: index again */
    }
    int y = g->nodes[ni].out[0], yv;
    const int64_t *d = g->values[y].info.dims;
    int64_t yd[4] = {d[0], d[2], d[3], d[1]}, nchw[4];
    memcpy(nchw, d, sizeof nchw);
    KILN_TRY(new_value(c, y, "nhwc_out", yd, &yv));
    g->nodes[ni].out[0] = yv;
    g->values[yv].producer = ni;
    int dummy;
    KILN_TRY(reshape_view(c, yv, nchw, y, "nhwc_out", ni, &dummy));
    place_first_after(c, ni);
    return KILN_OK;
}

/* Whether input i of layer ni (kept: kind[ni]) is passed NHWC: the
 * residual and a pool's input always (converted where needed), a
 * FusedConv's X when its producer writes NHWC (else the layer converts). */
static bool passed_nhwc(const kiln_graph *g, const int *kind, int ni, int i) {
    const kiln_node *n = &g->nodes[ni];
    if (!reads_nhwc(g, kind, ni, i)) return false;
    if (kind[ni] == K_CONV && i == 0) {
        int pr = g->values[n->in[0]].producer;
        return pr >= 0 && makes_nhwc(kind[pr]);
    }
    return true;
}

/* Replaces Transpose node ni (K_TIN or K_TOUT) by a view of the same bytes:
 * K_TIN reads [N, C, H, W] NHWC bytes (its input, rewired) and K_TOUT
 * writes them (its output; an NHWC copy where it is a graph output,
 * converted back after it); each is the [N, H, W, C] value. The Reshape
 * runs first among the nodes that follow ni. */
static kiln_status perm_view(nhwc_ctx *c, int ni) {
    kiln_graph *g = c->g;
    int x = g->nodes[ni].in[0], y = g->nodes[ni].out[0], dummy;
    int64_t dims[4];
    memcpy(dims, g->values[y].info.dims, sizeof dims);
    g->nodes[ni].dead = true;
    KILN_TRY(reshape_view(c, x, dims, y, "relabel", ni, &dummy));
    place_first_after(c, ni);
    return KILN_OK;
}

static kiln_status rewrite(nhwc_ctx *c, const int *kind, bool *is_nhwc, int *nhwc_of, int *nchw_of) {
    kiln_graph *g = c->g;
    /* layouts first (passed_nhwc reads the kinds of the original nodes) */
    for (int ni = 0; ni < c->n_nodes0; ni++) {
        kiln_node *n = &g->nodes[ni];
        if (kind[ni] == K_CONV || kind[ni] == K_DW) {
            kiln_fused_conv_attrs *fa = n->attrs;
            fa->layout = KILN_FC_LAYOUT_Y_NHWC | (passed_nhwc(g, kind, ni, 0) ? KILN_FC_LAYOUT_X_NHWC : 0);
            /* a tactic chosen for another layout means nothing here */
            fa->tactic.id = 0;
            fa->tactic.us = 0;
        } else if (kind[ni] == K_GAP && n->op_id == KILN_OP_SqueezeExcite) {
            kiln_se_attrs *sa = n->attrs;
            sa->layout = KILN_SE_LAYOUT_NHWC;
            sa->tactic.id = 0;
            sa->tactic.us = 0;
        } else if (kind[ni] == K_POOL || kind[ni] == K_GAP) {
            ((kiln_pool_attrs *)n->attrs)->layout = KILN_POOL_LAYOUT_NHWC;
        }
    }
    /* outputs of NHWC writers hold NHWC bytes; a graph output gets a copy back */
    for (int ni = 0; ni < c->n_nodes0; ni++) {
        if (!makes_nhwc(kind[ni])) continue;
        int y = g->nodes[ni].out[0];
        if (!kiln__graph_is_output(g, y) || neutral(g, y)) {
            is_nhwc[y] = true;
            nhwc_of[y] = y;
            continue;
        }
        int y2, dummy;
        KILN_TRY(new_value(c, y, "nhwc", NULL, &y2));
        g->nodes[ni].out[0] = y2;
        g->values[y2].producer = ni;
        nhwc_of[y] = y2;
        KILN_TRY(convert(c, y2, false, y, ni, &dummy));
    }
    for (int ni = 0; ni < c->n_nodes0; ni++) {
        if (g->nodes[ni].dead) continue;
        for (int i = 0; i < g->nodes[ni].n_in; i++) {
            int v = g->nodes[ni].in[i];
            if (v < 0 || v >= c->n_values0) continue;
            bool want = passed_nhwc(g, kind, ni, i);
            int nv = v;
            if (neutral(g, v)) continue; /* the same bytes in both layouts */
            int at = g->values[v].producer < 0 ? -1 : anchor(c, g->values[v].producer);
            if (want && nhwc_of[v] < 0) KILN_TRY(convert(c, v, true, -1, at, &nhwc_of[v]));
            if (want) nv = nhwc_of[v];
            if (!want && is_nhwc[v] && nchw_of[v] < 0) KILN_TRY(convert(c, v, false, -1, at, &nchw_of[v]));
            if (!want && is_nhwc[v]) nv = nchw_of[v];
            g->nodes[ni].in[i] = nv; /* g->nodes may have moved: index again */
        }
    }
    /* the Transposes between [N, C, H, W] NHWC bytes and [N, H, W, C] values: views
     * (after the inputs were rewired: passed_nhwc reads the original producers) */
    for (int ni = 0; ni < c->n_nodes0; ni++)
        if (kind[ni] == K_TIN || kind[ni] == K_TOUT) KILN_TRY(perm_view(c, ni));
    for (int ni = 0; ni < c->n_nodes0; ni++)
        if (kind[ni] == K_EW) KILN_TRY(ew_views(c, ni));
    return KILN_OK;
}

/* An elementwise layer joins a chain only through a full operand that a
 * chain layer writes NHWC, a K_TIN only where its input is written NHWC
 * (else it stays a Transpose), and a K_TOUT only where a chain layer reads
 * its output NHWC (else its readers would need it converted back). Each
 * decision can undo another: repeated until none changes (forward in
 * topological order, producers first, then over the readers). */
static void prune_ew(const kiln_graph *g, int *kind, int *read) {
    for (bool changed = true; changed;) {
        changed = false;
        for (int ni = 0; ni < g->n_nodes; ni++) {
            if (kind[ni] != K_EW && kind[ni] != K_TIN) continue;
            const kiln_node *n = &g->nodes[ni];
            bool fed = false;
            for (int i = 0; i < n->n_in && !fed; i++) {
                int pr = n->in[i] >= 0 ? g->values[n->in[i]].producer : -1;
                fed = (kind[ni] == K_TIN ? i == 0 : full_in(g, n, i)) && pr >= 0 && makes_nhwc(kind[pr]);
            }
            if (!fed) kind[ni] = K_NONE, changed = true;
        }
        /* read[ni]: a chain layer reads node ni's output NHWC */
        for (int ni = 0; ni < g->n_nodes; ni++) read[ni] = 0;
        for (int j = 0; j < g->n_nodes; j++) {
            const kiln_node *n = &g->nodes[j];
            for (int i = 0; i < n->n_in; i++) {
                int pr = n->in[i] >= 0 ? g->values[n->in[i]].producer : -1;
                if (pr >= 0 && !n->dead && reads_nhwc(g, kind, j, i)) read[pr] = 1;
            }
        }
        for (int ni = 0; ni < g->n_nodes; ni++)
            if (kind[ni] == K_TOUT && !read[ni]) kind[ni] = K_NONE, changed = true;
    }
}

static int root(int *parent, int i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
}

/* Keeps kind[] only for chains worth converting: kept layers connected
 * through the values they pass NHWC form a chain, and a chain stays when
 * it has at least two layers per conversion it needs (a value coming in
 * NCHW, counted per reader, converted by a node or by the layer itself; a
 * value going out to an NCHW reader or a graph output); a lone 1x1
 * convolution between depthwise ones (MobileNet) would only add
 * conversions. sc: scratch of 3 * g->n_nodes ints. */
static void keep_long_chains(const kiln_graph *g, int *kind, int *sc) {
    int nn = g->n_nodes, *parent = sc, *layers = sc + nn, *convs = sc + 2 * nn;
    for (int i = 0; i < nn; i++) parent[i] = i, layers[i] = convs[i] = 0;
    for (int ni = 0; ni < nn; ni++) {
        const kiln_node *n = &g->nodes[ni];
        for (int i = 0; kind[ni] && i < n->n_in; i++) {
            int v = n->in[i], pr = v >= 0 ? g->values[v].producer : -1;
            if (reads_nhwc(g, kind, ni, i) && pr >= 0 && makes_nhwc(kind[pr]))
                parent[root(parent, ni)] = root(parent, pr);
        }
    }
    for (int ni = 0; ni < nn; ni++) {
        const kiln_node *n = &g->nodes[ni];
        if (n->dead) continue;
        if (kind[ni]) {
            /* elementwise layers run in either layout: they join chains but count for none;
             * a Transpose made a view saves a kernel as a layer does */
            if (kind[ni] != K_EW) layers[root(parent, ni)]++;
            if (makes_nhwc(kind[ni]) && kiln__graph_is_output(g, n->out[0]) && !neutral(g, n->out[0]))
                convs[root(parent, ni)]++;
        }
        for (int i = 0; i < n->n_in; i++) {
            int v = n->in[i], pr = v >= 0 ? g->values[v].producer : -1;
            bool want = reads_nhwc(g, kind, ni, i), have = pr >= 0 && makes_nhwc(kind[pr]);
            if (v < 0 || neutral(g, v)) continue;
            if (want && !have) convs[root(parent, ni)]++;
            if (!want && have) convs[root(parent, pr)]++;
        }
    }
    for (int ni = 0; ni < nn; ni++) {
        int r = root(parent, ni);
        if (kind[ni] && 2 * convs[r] > layers[r]) kind[ni] = K_NONE;
    }
}

kiln_status kiln__pass_cuda_nhwc(kiln_graph *g, int *n_layers) {
    if (n_layers) *n_layers = 0;
    const char *env = getenv("KILN_CUDA_NHWC");
    if (env && !strcmp(env, "0")) return KILN_OK;
    kiln__graph_link(g);
    nhwc_ctx c = {.g = g, .n_nodes0 = g->n_nodes, .n_values0 = g->n_values};
    int *kind = kiln__calloc((size_t)g->n_nodes + 1, sizeof *kind);
    bool *is_nhwc = kiln__calloc((size_t)g->n_values + 1, sizeof *is_nhwc);
    int *nhwc_of = kiln__malloc(((size_t)g->n_values + 1) * sizeof *nhwc_of);
    int *nchw_of = kiln__malloc(((size_t)g->n_values + 1) * sizeof *nchw_of);
    int *sc = kiln__malloc((3 * (size_t)g->n_nodes + 1) * sizeof *sc);
    kiln_status s = KILN_OK;
    if (!kind || !is_nhwc || !nhwc_of || !nchw_of || !sc) {
        s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (NHWC pass)");
        goto done;
    }
    int count = 0;
    for (int ni = 0; ni < g->n_nodes; ni++) kind[ni] = node_kind(g, &g->nodes[ni]);
    prune_ew(g, kind, sc);
    /* a chain needs a layer that writes NHWC: a lone GlobalAveragePool stays */
    keep_long_chains(g, kind, sc);
    for (int ni = 0; ni < g->n_nodes; ni++) count += kind[ni] ? 1 : 0;
    for (int v = 0; v < g->n_values; v++) nhwc_of[v] = nchw_of[v] = -1;
    if (!count) goto done;
    if ((s = rewrite(&c, kind, is_nhwc, nhwc_of, nchw_of)) != KILN_OK) goto done;
    if ((s = kiln__nodes_place_after(g, c.n_nodes0, c.after)) != KILN_OK) goto done;
    /* drop the Transposes made views: nothing after this pass (the tuner, the
     * memory plan, the runtime) skips dead nodes */
    if ((s = kiln__graph_compact(g)) != KILN_OK) goto done;
    kiln__graph_link(g);
    s = kiln__graph_infer(g);
    if (s == KILN_OK && n_layers) *n_layers = count;
done:
    kiln__free(kind);
    kiln__free(is_nhwc);
    kiln__free(nhwc_of);
    kiln__free(nchw_of);
    kiln__free(sc);
    kiln__free(c.after);
    return s;
}

#else

kiln_status kiln__pass_cuda_nhwc(kiln_graph *g, int *n_layers) {
    (void)g;
    if (n_layers) *n_layers = 0;
    return KILN_OK;
}

#endif
