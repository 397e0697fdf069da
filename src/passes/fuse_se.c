/* fuse_se.c -- the squeeze-excite gate of MobileNetV3 and EfficientNet
 * (torchvision's SqueezeExcitation, as exported and after fuse_conv):
 *
 *   p = GlobalAveragePool(x)                       [N, C, 1, 1]
 *   h = FusedConv(p, W1, B1; 1x1, act1)            [N, R, 1, 1]  ReLU / SiLU
 *   s = FusedConv(h, W2, B2; 1x1, act2)            [N, C, 1, 1]  HardSigmoid / Sigmoid
 *     =>  s = kiln.SqueezeExcite(x, W1, W2, B1, B2)   (src/ops/fused_se.h)
 *
 * The channel Mul(x, s) that applies the gate stays a layer of its own (it
 * needs the whole scale before any of its outputs). Runs after the
 * convolution fusions (fuse_conv.c), which made the two FusedConvs and put
 * the activations inside them; each 1x1 layer must be one group, no pads,
 * no residual, plain layout, its weights of known shape, and p and h read by
 * nothing else. Only where the device's backend takes the layer
 * (kiln__pat_supports): CUDA does, with the three layers' kernels as its
 * tactic 0 and a one-launch kernel timed beside it; the CPU does not (its
 * unfused layers run tuned GEMMs: docs/cuda.md, "One squeeze-excite
 * layer"). */
#include "passes/pattern.h"

#include "ops/fused_conv.h"
#include "ops/fused_se.h"

/* FusedConv node ci as a squeeze-excite 1x1 layer reading value v: output
 * channels into *m, input channels into *k (from its weights' known shape) */
static bool se_conv(const kiln_graph *g, int ci, int v, int64_t *m, int64_t *k) {
    if (ci < 0) return false;
    const kiln_node *n = &g->nodes[ci];
    if (n->op_id != KILN_OP_FusedConv || n->n_in < 2 || n->in[0] != v || n->in[1] < 0 || n->n_out != 1) return false;
    const kiln_fused_conv_attrs *fa = n->attrs;
    const kiln_conv_attrs *ca = &fa->conv;
    if (fa->has_residual || fa->layout || fa->precision != KILN_PRECISION_FP32 || (ca->group != 0 && ca->group != 1))
        return false;
    if (ca->auto_pad != PAD_NOTSET && ca->auto_pad != PAD_VALID) return false;
    for (int i = 0; i < ca->n_pads; i++)
        if (ca->pads[i] != 0) return false;
    const kiln_tinfo *w = &g->values[n->in[1]].info;
    if (w->rank != 4 || w->dims[0] <= 0 || w->dims[1] <= 0 || w->dims[2] != 1 || w->dims[3] != 1) return false;
    *m = w->dims[0];
    *k = w->dims[1];
    return true;
}

static kiln_status match_se(kiln_graph *g, const kiln_optimize_opts *o, int gp) {
    const kiln_node *pool = &g->nodes[gp];
    const kiln_pool_attrs *pa = pool->attrs;
    if ((pa && pa->layout) || pool->n_in != 1 || pool->n_out != 1) return KILN_OK;
    const int x = pool->in[0], p = pool->out[0];
    const kiln_tinfo *xi = &g->values[x].info;
    if (xi->rank != 4 || xi->dims[1] <= 0 || !kiln__dtype_is_float(xi->dtype)) return KILN_OK;
    const int c1 = kiln__pat_sole_consumer(g, p);
    int64_t r, c, c_out, r_in;
    if (!se_conv(g, c1, p, &r, &c) || c != xi->dims[1]) return KILN_OK;
    const int h = g->nodes[c1].out[0];
    const int c2 = kiln__pat_sole_consumer(g, h);
    if (!se_conv(g, c2, h, &c_out, &r_in) || c_out != c || r_in != r) return KILN_OK;
    const kiln_node *n1 = &g->nodes[c1], *n2 = &g->nodes[c2];
    const kiln_fused_conv_attrs *f1 = n1->attrs, *f2 = n2->attrs;
    kiln_se_attrs sa = {.act1 = f1->act, .alpha1 = f1->alpha, .beta1 = f1->beta,
                        .act2 = f2->act, .alpha2 = f2->alpha, .beta2 = f2->beta, .layout = KILN_SE_LAYOUT_NCHW};
    const int b1 = n1->n_in > 2 ? n1->in[2] : -1, b2 = n2->n_in > 2 ? n2->in[2] : -1;
    int in[5] = {x, n1->in[1], n2->in[1], b1, b2};
    const int n_in = b2 >= 0 ? 5 : b1 >= 0 ? 4 : 3, out = n2->out[0];
    if (!kiln__pat_supports(g, o->device, KILN_OP_SqueezeExcite, n_in, in, 1, &out, &sa)) return KILN_OK;
    const int from[3] = {gp, c1, c2};
    KILN_TRY(kiln__pat_replace(g, c2, KILN_OP_SqueezeExcite, n_in, in, 1, &out, &sa, from, 3));
    g->nodes[gp].dead = true;
    g->nodes[c1].dead = true;
    kiln__graph_relink(g, from, 3);
    return KILN_OK;
}

kiln_status kiln__opt_se(kiln_graph *g, const kiln_optimize_opts *o) {
    if (!kiln__pass_on(o, KILN_PASS_FUSE_SE)) return KILN_OK;
    kiln__graph_link(g);
    for (int ni = 0; ni < g->n_nodes; ni++)
        if (!g->nodes[ni].dead && g->nodes[ni].op_id == KILN_OP_GlobalAveragePool) KILN_TRY(match_se(g, o, ni));
    return KILN_OK;
}
