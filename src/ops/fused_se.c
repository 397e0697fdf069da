/* fused_se.c -- kiln.SqueezeExcite (fused_se.h): validation, inference and
 * the reference kernel (the pool, then the two 1x1 layers as matrix-vector
 * products per image, each result rounded to the tensors' type as the
 * layers it replaces stored it). The CPU keeps those layers unfused (the
 * pass asks the backend: src/backends/cpu/cpu_table.c); this kernel is what
 * the CUDA tactics are checked against (the builder's host reference,
 * test_cuda_ops, kiln debug). */
#include "ops/fused_se.h"

#include "ops/fused_conv.h"

#include <math.h>

#define NODE(a) ((a)->node_name ? (a)->node_name : "?")

static kiln_status se_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_se_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "act1", at->act1, 0, KILN_FC_ACT_COUNT - 1));
    KILN_TRY(kiln__check_attr(op, node, "act2", at->act2, 0, KILN_FC_ACT_COUNT - 1));
    KILN_TRY(kiln__check_attr(op, node, "layout", at->layout, KILN_SE_LAYOUT_NCHW, KILN_SE_LAYOUT_NHWC));
    KILN_TRY(kiln__check_attr(op, node, "reserved", at->reserved, 0, 0));
    return KILN_OK;
}

/* dims of t equal `want` (4 entries; -2: any) where both are known */
static bool dims_fit(const kiln_tinfo *t, int rank, const int64_t *want) {
    if (t->rank < 0) return true;
    if (t->rank != rank) return false;
    for (int i = 0; i < rank; i++)
        if (want[i] >= 0 && t->dims[i] >= 0 && t->dims[i] != want[i]) return false;
    return true;
}

static kiln_status se_infer(const kiln_infer_args *a) {
    const kiln_tinfo *X = a->in[0], *W1 = a->in[1], *W2 = a->in[2];
    const kiln_tinfo *B1 = a->n_in > 3 ? a->in[3] : NULL, *B2 = a->n_in > 4 ? a->in[4] : NULL;
    const kiln_dtype t = X->dtype;
    if (!kiln__dtype_is_float(t))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (kiln.SqueezeExcite): dtype %s (a float type expected)",
                         NODE(a), kiln_dtype_name(t));
    const kiln_tinfo *ps[4] = {W1, W2, B1, B2};
    static const char *const names[4] = {"W1", "W2", "B1", "B2"};
    for (int i = 0; i < 4; i++)
        if (ps[i] && ps[i]->dtype != t)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (kiln.SqueezeExcite): %s is %s, X is %s", NODE(a),
                             names[i], kiln_dtype_name(ps[i]->dtype), kiln_dtype_name(t));
    if (X->rank >= 0 && X->rank != 4)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (kiln.SqueezeExcite): X has rank %d (4 expected)", NODE(a),
                         X->rank);
    const int64_t C = X->rank == 4 ? X->dims[1] : -2, R = W1->rank == 4 ? W1->dims[0] : -2;
    const int64_t w1[4] = {-2, C, 1, 1}, w2[4] = {C, R, 1, 1}, b1[1] = {R}, b2[1] = {C};
    if (!dims_fit(W1, 4, w1) || !dims_fit(W2, 4, w2) || (B1 && !dims_fit(B1, 1, b1)) || (B2 && !dims_fit(B2, 1, b2))) {
        char s[5][128];
        if (B1) kiln__shape_str(B1->rank, B1->dims, s[3], sizeof s[3]);
        if (B2) kiln__shape_str(B2->rank, B2->dims, s[4], sizeof s[4]);
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (kiln.SqueezeExcite): weights %s and %s, biases %s and %s do not fit X %s "
                         "([R, C, 1, 1] and [C, R, 1, 1] expected; biases [R] and [C])",
                         NODE(a), kiln__shape_str(W1->rank, W1->dims, s[0], sizeof s[0]),
                         kiln__shape_str(W2->rank, W2->dims, s[1], sizeof s[1]), B1 ? s[3] : "none",
                         B2 ? s[4] : "none", kiln__shape_str(X->rank, X->dims, s[2], sizeof s[2]));
    }
    kiln_tinfo *y = a->out[0];
    y->dtype = t;
    y->rank = X->rank < 0 ? -1 : 4;
    if (X->rank == 4) {
        y->dims[0] = X->dims[0];
        y->dims[1] = X->dims[1];
        y->dims[2] = y->dims[3] = 1;
    }
    return KILN_OK;
}

/* value rounded to type t (as a layer storing it would) */
static double round_to(kiln_dtype t, double v) {
    uint64_t b = 0;
    kiln__store_f64(t, &b, 0, v);
    return kiln__load_f64(t, &b, 0);
}

typedef struct se_ctx {
    const kiln_tensor *X, *W1, *B1, *W2, *B2;
    kiln_tensor *Y;
    const kiln_se_attrs *at;
    int64_t C, R, plane;
    double *ws; /* per image: C + R */
} se_ctx;

static void se_images(void *vc, int64_t n0, int64_t n1) {
    const se_ctx *c = vc;
    const kiln_dtype t = c->X->dtype;
    const int64_t C = c->C, R = c->R;
    for (int64_t n = n0; n < n1; n++) {
        double *p = c->ws + n * (C + R), *h = p + C;
        for (int64_t ch = 0; ch < C; ch++) {
            double s = 0;
            const int64_t base = (n * C + ch) * c->plane;
            for (int64_t i = 0; i < c->plane; i++) s += kiln__load_f64(t, c->X->data, base + i);
            p[ch] = round_to(t, s / (double)c->plane);
        }
        for (int64_t r = 0; r < R; r++) {
            double s = c->B1 ? kiln__load_f64(t, c->B1->data, r) : 0.0;
            for (int64_t ch = 0; ch < C; ch++) s += kiln__load_f64(t, c->W1->data, r * C + ch) * p[ch];
            h[r] = round_to(t, kiln__fc_act(c->at->act1, c->at->alpha1, c->at->beta1, (float)s));
        }
        for (int64_t ch = 0; ch < C; ch++) {
            double s = c->B2 ? kiln__load_f64(t, c->B2->data, ch) : 0.0;
            for (int64_t r = 0; r < R; r++) s += kiln__load_f64(t, c->W2->data, ch * R + r) * h[r];
            kiln__store_f64(t, c->Y->data, n * C + ch, kiln__fc_act(c->at->act2, c->at->alpha2, c->at->beta2, (float)s));
        }
    }
}

/* N * (C + R) doubles; SIZE_MAX past size_t (an engine's max shapes: the
 * planner refuses it) */
static size_t se_ws_bytes(int64_t N, int64_t C, int64_t R) {
    int64_t n;
    if (!kiln__add_ok(C, R, &n) || !kiln__mul_ok(n, N, &n)) return SIZE_MAX;
    return kiln__size_mul((size_t)n, sizeof(double));
}

static size_t se_workspace(const kiln_infer_args *a) {
    const kiln_tinfo *X = a->in[0], *W1 = a->in[1];
    if (X->rank != 4 || W1->rank != 4 || X->dims[0] < 0 || X->dims[1] < 0 || W1->dims[0] < 0) return 0;
    return se_ws_bytes(X->dims[0], X->dims[1], W1->dims[0]);
}

static kiln_status se_ref(const kiln_kernel_args *a) {
    const kiln_se_attrs *at = a->attrs;
    if (at->layout != KILN_SE_LAYOUT_NCHW)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (kiln.SqueezeExcite): the reference kernel reads NCHW "
                         "tensors only (layout %d: a device's kernel)", NODE(a), (int)at->layout);
    const kiln_tensor *X = a->in[0];
    se_ctx c = {.X = X, .W1 = a->in[1], .W2 = a->in[2], .B1 = a->n_in > 3 ? a->in[3] : NULL,
                .B2 = a->n_in > 4 ? a->in[4] : NULL,
                .Y = a->out[0], .at = at};
    if (X->rank != 4 || c.W1->rank != 4)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (kiln.SqueezeExcite): X and W1 must have rank 4", NODE(a));
    c.C = X->dims[1];
    c.R = c.W1->dims[0];
    c.plane = X->dims[2] * X->dims[3];
    const int64_t N = X->dims[0];
    if (N == 0 || c.C == 0) return KILN_OK;
    if (a->workspace_size < se_ws_bytes(N, c.C, c.R))
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (kiln.SqueezeExcite): workspace of %zu bytes is too small",
                         NODE(a), a->workspace_size);
    c.ws = a->workspace;
    kiln__parallel_for(a->pool, N, 1, se_images, &c);
    return KILN_OK;
}

static int32_t *se_layout_field(void *attrs) { return &((kiln_se_attrs *)attrs)->layout; }

/* X as the layout says; Y [N, C, 1, 1] is the same bytes in any layout */
static void se_layout_io(int32_t l, kiln_io_layout *io) {
    io->x = l == KILN_SE_LAYOUT_NHWC ? KILN_VLAYOUT_NHWC : KILN_VLAYOUT_PLAIN;
    io->y = KILN_VLAYOUT_PLAIN;
    io->r_nhwc = false;
    io->r_in = 0;
}

const kiln_op_def kiln_op_SqueezeExcite = {
    .name = "SqueezeExcite", .domain = "kiln", .since = 1,
    .min_inputs = 3, .max_inputs = 5, .min_outputs = 1, .max_outputs = 1,
    .flags = KILN_OP_FLAG_TACTICS | KILN_OP_FLAG_REDUCIBLE,
    .attr_size = sizeof(kiln_se_attrs),
    .validate = se_validate, .infer = se_infer, .workspace = se_workspace, .cpu = se_ref,
    .layout_field = se_layout_field, .layout_io = se_layout_io,
};
