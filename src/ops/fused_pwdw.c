/* fused_pwdw.c -- kiln.PwDwConv: a 1x1 convolution, the depthwise 3x3
 * convolution that reads it and optionally the 1x1 convolution (with a
 * residual) that reads that, in one layer (contract: kiln_pwdw_attrs in
 * fused_conv.h). The graph optimizer makes it for CPU layers only, from
 * FusedConvs that have reference kernels; it has no reference kernel of
 * its own: the CPU backend's kernel is src/backends/cpu/kernels/
 * fused_pwdw_cpu.c (conv_pwdw.c). */
#include "ops/fused_conv.h"

#define NODE(a) ((a)->node_name ? (a)->node_name : "?")

static bool act_ok(int act) { return act >= 0 && act < KILN_FC_ACT_COUNT; }

/* Inputs a layer with these attrs has. */
static int want_inputs(const kiln_pwdw_attrs *at) {
    return at->has_residual ? 8 : at->has_project ? 7 : 5;
}

/* Activations, stride (1 or 2), pads (0 or 1), the flags and the layout
 * bits its kernel takes. */
static kiln_status pwdw_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_pwdw_attrs *at = attrs;
    (void)op;
    if (!act_ok(at->act1) || !act_ok(at->act2) || !act_ok(at->act3))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (PwDwConv): unknown activation %d/%d/%d", node,
                         (int)at->act1, (int)at->act2, (int)at->act3);
    if (at->stride != 1 && at->stride != 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (PwDwConv): stride %d (1 or 2 only)", node,
                         (int)at->stride);
    for (int i = 0; i < 4; i++)
        if (at->pads[i] != 0 && at->pads[i] != 1)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (PwDwConv): pad %d is %d (0 or 1 only)", node,
                             i, (int)at->pads[i]);
    if ((at->has_project != 0 && at->has_project != 1) || (at->has_residual != 0 && at->has_residual != 1) ||
        (at->no_expand != 0 && at->no_expand != 1) || (at->has_residual && !at->has_project) ||
        (at->no_expand && !at->has_project))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (PwDwConv): has_project %d, has_residual %d, no_expand %d",
                         node, (int)at->has_project, (int)at->has_residual, (int)at->no_expand);
    if (at->layout & ~(KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (PwDwConv): unknown layout bits 0x%x", node,
                         (unsigned)at->layout);
    return KILN_OK;
}

kiln_status kiln__pwdw_check_inputs(const char *node, const kiln_pwdw_attrs *at, int n_in) {
    if (n_in > want_inputs(at) || n_in < want_inputs(at) - 1 ||
        (at->has_residual && n_in != want_inputs(at)))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (PwDwConv): %d inputs, but its attributes want %d",
                         node, n_in, want_inputs(at));
    return KILN_OK;
}

/* Whether tensor t is float32 of rank r and dims d (-1 in d or t: any). */
static bool shape_is(const kiln_tinfo *t, int r, const int64_t *d) {
    if (!t || t->rank != r || t->dtype != KILN_DTYPE_FLOAT32) return false;
    for (int i = 0; i < r; i++)
        if (d[i] >= 0 && t->dims[i] >= 0 && t->dims[i] != d[i]) return false;
    return true;
}

static int64_t out_dim(int64_t n, int pa, int pb, int s) {
    return n >= 0 ? kiln__pwdw_out(n, pa, pb, s) : KILN_DIM_UNKNOWN;
}

static const kiln_tinfo *in_or_null(const kiln_infer_args *a, int i) {
    return i < a->n_in ? a->in[i] : NULL;
}

static kiln_status pwdw_infer(const kiln_infer_args *a) {
    const kiln_pwdw_attrs *at = a->attrs;
    KILN_TRY(kiln__pwdw_check_inputs(NODE(a), at, a->n_in));
    const kiln_tinfo *X = a->in[0], *W1 = a->in[1], *W2 = a->in[3], *W3 = in_or_null(a, 5);
    if (!X || X->rank != 4 || X->dtype != KILN_DTYPE_FLOAT32)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (PwDwConv): the input must be float32 of rank 4",
                         NODE(a));
    if (at->no_expand ? (W1 || a->in[2]) : (!W1 || W1->rank != 4 || W1->dims[0] < 1))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (PwDwConv): the first pointwise weights are %s",
                         NODE(a), at->no_expand ? "present but no_expand is set" : "missing or of unknown size");
    if (!W2 || W2->rank != 4 || W2->dims[0] < 1 || (at->has_project && (!W3 || W3->rank != 4 || W3->dims[0] < 1)))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (PwDwConv): weights missing or of unknown size",
                         NODE(a));
    int64_t E = W2->dims[0], C = X->dims[1], M = at->has_project ? W3->dims[0] : 0;
    int64_t w1[4] = {E, C, 1, 1}, w2[4] = {E, 1, 3, 3}, w3[4] = {M, E, 1, 1}, be[1] = {E}, bm[1] = {M};
    bool ok = (at->no_expand ? (C < 0 || C == E) : shape_is(W1, 4, w1)) && shape_is(W2, 4, w2) &&
              (!at->has_project || shape_is(W3, 4, w3));
    if (ok && in_or_null(a, 2) && !shape_is(a->in[2], 1, be)) ok = false;
    if (ok && in_or_null(a, 4) && !shape_is(a->in[4], 1, be)) ok = false;
    if (ok && in_or_null(a, 6) && !shape_is(a->in[6], 1, bm)) ok = false;
    if (!ok) {
        char s1[96], s2[96];
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (PwDwConv): weights %s and %s do not fit an input of %lld channels "
                         "(want [E, C, 1, 1], [E, 1, 3, 3], [M, E, 1, 1] and biases [E] / [M], float32)",
                         NODE(a), W1 ? kiln__shape_str(W1->rank, W1->dims, s1, sizeof s1) : "(none)",
                         kiln__shape_str(W2->rank, W2->dims, s2, sizeof s2), (long long)C);
    }
    int64_t Ho = out_dim(X->dims[2], at->pads[0], at->pads[2], at->stride);
    int64_t Wo = out_dim(X->dims[3], at->pads[1], at->pads[3], at->stride);
    if ((X->dims[2] >= 0 && Ho < 1) || (X->dims[3] >= 0 && Wo < 1))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (PwDwConv): input %lldx%lld is smaller than the 3x3 kernel",
                         NODE(a), (long long)X->dims[2], (long long)X->dims[3]);
    kiln_tinfo *Y = a->out[0];
    Y->dtype = KILN_DTYPE_FLOAT32;
    Y->rank = 4;
    Y->dims[0] = X->dims[0];
    Y->dims[1] = at->has_project ? M : E;
    Y->dims[2] = Ho;
    Y->dims[3] = Wo;
    if (at->has_residual) {
        const kiln_tinfo *R = a->in[7];
        if (!R || !shape_is(R, 4, Y->dims)) {
            char s1[96], s2[96];
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (PwDwConv): residual %s does not match the output %s",
                             NODE(a), R ? kiln__shape_str(R->rank, R->dims, s1, sizeof s1) : "(absent)",
                             kiln__shape_str(4, Y->dims, s2, sizeof s2));
        }
    }
    return KILN_OK;
}

static int32_t *pwdw_layout_field(void *attrs) { return &((kiln_pwdw_attrs *)attrs)->layout; }

static void pwdw_layout_io(int32_t l, kiln_io_layout *io) {
    io->x = (l & KILN_FC_LAYOUT_X_NHWC) ? KILN_VLAYOUT_NHWC : KILN_VLAYOUT_PLAIN;
    io->y = (l & KILN_FC_LAYOUT_Y_NHWC) ? KILN_VLAYOUT_NHWC : KILN_VLAYOUT_PLAIN;
    io->r_nhwc = false;
    io->r_in = 7; /* (the residual has Y's layout) */
}

const kiln_op_def kiln_op_PwDwConv = {
    .name = "PwDwConv", .domain = "kiln", .since = 1,
    .min_inputs = 1, .max_inputs = 8, .min_outputs = 1, .max_outputs = 1, /* infer checks which */
    .attr_size = sizeof(kiln_pwdw_attrs),
    .validate = pwdw_validate, .infer = pwdw_infer,
    .layout_field = pwdw_layout_field, .layout_io = pwdw_layout_io,
};
