/* fused_conv.c -- kiln.FusedConv: Conv + bias + residual Add + activation
 * in one layer (see fused_conv.h for the contract): attributes, inference
 * and the reference kernel (kiln's Conv kernel, then one pass adding the
 * residual and applying the activation while the output is in cache per
 * plane). The CPU backend's kernel, with its tactics (oneDNN, Winograd,
 * direct), is src/backends/cpu/kernels/fused_conv_cpu.c. */
#include "ops/fused_conv.h"

#include <math.h>

#define NODE(a) ((a)->node_name ? (a)->node_name : "?")

KILN_FC_ACT_ALL_HANDLED("kiln__fc_act_name, kiln__fc_act");

const char *kiln__fc_act_name(int act) {
    switch (act) {
    case KILN_FC_ACT_NONE: return "none";
    case KILN_FC_ACT_RELU: return "relu";
    case KILN_FC_ACT_CLIP: return "clip";
    case KILN_FC_ACT_LEAKY_RELU: return "leaky_relu";
    case KILN_FC_ACT_SIGMOID: return "sigmoid";
    case KILN_FC_ACT_SILU: return "silu";
    case KILN_FC_ACT_HARD_SWISH: return "hard_swish";
    case KILN_FC_ACT_HARD_SIGMOID: return "hard_sigmoid";
    default: return "?";
    }
}

/* NaN in gives NaN out for every activation, as ONNX and PyTorch do:
 * comparisons are written so that a NaN x takes the branch that returns
 * it (x < 0 ? 0 : x, not x > 0 ? x : 0). The vector kernels do the same
 * (backends/cpu/kernels/simd_act.h). */
float kiln__fc_act(int act, float alpha, float beta, float x) {
    switch (act) {
    case KILN_FC_ACT_RELU: return x < 0.0f ? 0.0f : x;
    case KILN_FC_ACT_CLIP: return x < alpha ? alpha : x > beta ? beta : x;
    case KILN_FC_ACT_LEAKY_RELU: return x >= 0.0f ? x : alpha * x;
    case KILN_FC_ACT_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case KILN_FC_ACT_SILU: return x * (1.0f / (1.0f + expf(-x)));
    case KILN_FC_ACT_HARD_SWISH: {
        float t = x * (1.0f / 6.0f) + 0.5f;
        t = t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
        return x * t;
    }
    case KILN_FC_ACT_HARD_SIGMOID: {
        float t = alpha * x + beta;
        return t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
    }
    default: return x; /* KILN_FC_ACT_NONE (fc_validate refuses the others) */
    }
}

/* ---- infer ------------------------------------------------------------------ */

/* The embedded Conv attributes as Conv's; an activation, precision (fp32
 * or bf16) and layout bits kiln knows, in combinations its kernels take. */
static kiln_status fc_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_fused_conv_attrs *at = attrs;
    KILN_TRY(kiln__conv_validate_attrs(op, &at->conv, node));
    if (at->act < 0 || at->act >= KILN_FC_ACT_COUNT)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (FusedConv): unknown activation %d", node,
                         (int)at->act);
    KILN_TRY(kiln__check_attr(op, node, "has_residual", at->has_residual, 0, 1));
    if (at->precision != KILN_PRECISION_FP32 && at->precision != KILN_PRECISION_BF16)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (FusedConv): unsupported precision %d", node,
                         (int)at->precision);
    if (at->layout & ~KILN_FC_LAYOUT_ALL)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (FusedConv): unknown layout bits 0x%x", node,
                         (unsigned)at->layout);
    if ((at->layout & KILN_FC_LAYOUT_R_NHWC) &&
        (!at->has_residual || (at->layout & (KILN_FC_LAYOUT_Y_NHWC | KILN_FC_LAYOUT_Y_BF16))))
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (FusedConv): an NHWC residual needs a residual input and an NCHW "
                         "output (layout 0x%x)", node, (unsigned)at->layout);
    if (((at->layout & KILN_FC_LAYOUT_X_C16) && (at->layout & (KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_X_BF16))) ||
        ((at->layout & KILN_FC_LAYOUT_Y_C16) &&
         (at->layout & (KILN_FC_LAYOUT_Y_NHWC | KILN_FC_LAYOUT_Y_BF16 | KILN_FC_LAYOUT_R_NHWC))) ||
        ((at->layout & (KILN_FC_LAYOUT_X_C16 | KILN_FC_LAYOUT_Y_C16)) && at->precision != KILN_PRECISION_FP32))
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (FusedConv): layout 0x%x mixes the blocked nChw16c layout with NHWC or "
                         "bf16 for one tensor, or a bf16 layer", node, (unsigned)at->layout);
    return KILN_OK;
}

kiln_status kiln__fc_c16_check(const char *node, const kiln_fused_conv_attrs *at, kiln_dtype xt, int xr,
                               int wr, const int64_t *wd) {
    if (!(at->layout & (KILN_FC_LAYOUT_X_C16 | KILN_FC_LAYOUT_Y_C16))) return KILN_OK;
    bool ok = xr == 4 && wr == 4 && at->conv.group == 1 && xt == KILN_DTYPE_FLOAT32;
    if (ok && (at->layout & KILN_FC_LAYOUT_X_C16)) ok = wd[1] >= 0 && wd[1] % 16 == 0;
    if (ok && (at->layout & KILN_FC_LAYOUT_Y_C16)) ok = wd[0] >= 0 && wd[0] % 16 == 0;
    if (!ok) {
        char s1[96];
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (FusedConv): the blocked nChw16c layout (0x%x) needs a float32 2-D "
                         "convolution of one group whose channels are multiples of 16 (weights %s)",
                         node, (unsigned)at->layout, kiln__shape_str(wr, wd, s1, sizeof s1));
    }
    return KILN_OK;
}

/* The Conv view of a FusedConv: attrs -> the conv attrs, inputs X, W[, B]. */
static kiln_infer_args conv_view_infer(const kiln_infer_args *a) {
    const kiln_fused_conv_attrs *at = a->attrs;
    kiln_infer_args c = *a;
    c.attrs = &at->conv;
    c.n_in = a->n_in > 3 ? 3 : a->n_in;
    return c;
}

/* has_residual agrees with the node's inputs */
static kiln_status fc_check_inputs(const char *node, const kiln_fused_conv_attrs *at, int n_in) {
    if (at->has_residual != (n_in > 3))
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (FusedConv): has_residual is %d but there are %d inputs", node,
                         (int)at->has_residual, n_in);
    return KILN_OK;
}

static kiln_status fc_infer(const kiln_infer_args *a) {
    const kiln_fused_conv_attrs *at = a->attrs;
    KILN_TRY(fc_check_inputs(NODE(a), at, a->n_in));
    /* float16/bfloat16 layers are for device backends (fc_cpu refuses them) */
    kiln_dtype xt = a->in[0]->dtype;
    if (xt != KILN_DTYPE_FLOAT32 && xt != KILN_DTYPE_FLOAT16 && xt != KILN_DTYPE_BFLOAT16)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (FusedConv): input dtype %s (float32, float16 or bfloat16 only)",
                         NODE(a), kiln_dtype_name(xt));
    kiln_infer_args c = conv_view_infer(a);
    KILN_TRY(kiln__conv_infer(&c));
    KILN_TRY(kiln__fc_c16_check(NODE(a), at, a->in[0]->dtype, a->in[0]->rank, a->in[1]->rank, a->in[1]->dims));
    if (!at->has_residual) return KILN_OK;
    const kiln_tinfo *R = a->in[3], *Y = a->out[0];
    if (!R)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (FusedConv): the residual input is absent",
                         NODE(a));
    bool ok = R->dtype == xt && (R->rank < 0 || Y->rank < 0 || R->rank == Y->rank);
    for (int i = 0; ok && R->rank >= 0 && i < R->rank && i < Y->rank; i++)
        if (R->dims[i] >= 0 && Y->dims[i] >= 0 && R->dims[i] != Y->dims[i]) ok = false;
    if (!ok) {
        char s1[96], s2[96];
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (FusedConv): residual %s %s does not match the output %s",
                         NODE(a), kiln_dtype_name(R->dtype), kiln__shape_str(R->rank, R->dims, s1, sizeof s1),
                         kiln__shape_str(Y->rank, Y->dims, s2, sizeof s2));
    }
    return KILN_OK;
}

/* ---- kernel ------------------------------------------------------------------- */

typedef struct epi_ctx {
    float *y;
    const float *r; /* NULL: no residual */
    int64_t plane;
    int act;
    float alpha, beta;
} epi_ctx;

static void epi_planes(void *vctx, int64_t p0, int64_t p1) {
    const epi_ctx *c = vctx;
    for (int64_t p = p0; p < p1; p++) {
        float *restrict y = c->y + p * c->plane;
        if (c->r) {
            const float *restrict r = c->r + p * c->plane;
            for (int64_t i = 0; i < c->plane; i++) y[i] += r[i];
        }
        switch (c->act) {
        case KILN_FC_ACT_NONE: break;
        case KILN_FC_ACT_RELU:
            for (int64_t i = 0; i < c->plane; i++) y[i] = y[i] < 0.0f ? 0.0f : y[i]; /* NaN kept */
            break;
        case KILN_FC_ACT_CLIP: {
            float lo = c->alpha, hi = c->beta;
            for (int64_t i = 0; i < c->plane; i++) {
                float v = y[i] < lo ? lo : y[i];
                y[i] = v > hi ? hi : v;
            }
            break;
        }
        default:
            for (int64_t i = 0; i < c->plane; i++)
                y[i] = kiln__fc_act(c->act, c->alpha, c->beta, y[i]);
            break;
        }
    }
}

kiln_status kiln__fc_check_run(const kiln_kernel_args *a) {
    const kiln_fused_conv_attrs *at = a->attrs;
    KILN_TRY(fc_check_inputs(NODE(a), at, a->n_in));
    for (int i = 0; i < a->n_in; i++)
        if (a->in[i] && a->in[i]->dtype != KILN_DTYPE_FLOAT32)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "node '%s' (FusedConv): the CPU kernel takes float32 tensors, input %d is %s "
                             "(run this layer on a device backend or in float32)",
                             NODE(a), i, kiln_dtype_name(a->in[i]->dtype));
    const kiln_tensor *X = a->in[0], *W = a->in[1];
    return kiln__fc_c16_check(NODE(a), at, X->dtype, X->rank, W->rank, W->dims);
}

static kiln_status fc_own(const kiln_kernel_args *a) {
    const kiln_fused_conv_attrs *at = a->attrs;
    const kiln_tensor *Y = a->out[0];
    int64_t n = kiln__tensor_numel(Y);
    /* the plan put the output over the residual (the CPU kernel's inplace_input) for a
     * tactic that could not run here: keep the residual aside first */
    const float *r = at->has_residual ? a->in[3]->data : NULL;
    float *saved = NULL;
    if (r && r == (const float *)Y->data && n > 0) {
        saved = kiln__aligned_alloc((size_t)n * sizeof(float));
        if (!saved)
            return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (FusedConv): out of memory for the residual",
                             NODE(a));
        memcpy(saved, r, (size_t)n * sizeof(float));
        r = saved;
    }
    kiln_kernel_args c = *a;
    c.attrs = &at->conv;
    c.n_in = a->n_in > 3 ? 3 : a->n_in;
    kiln_status st = kiln__conv_cpu(&c);
    if (st == KILN_OK && (at->act != KILN_FC_ACT_NONE || at->has_residual) && n > 0) {
        int64_t planes = Y->dims[0] * Y->dims[1];
        epi_ctx e = {.y = Y->data, .r = r, .plane = planes > 0 ? n / planes : 0, .act = at->act,
                     .alpha = at->alpha, .beta = at->beta};
        int64_t grain = e.plane > 0 ? (16384 + e.plane - 1) / e.plane : planes;
        kiln__parallel_for(a->pool, planes, grain, epi_planes, &e);
    }
    kiln__aligned_free(saved);
    return st;
}

/* The reference kernel: NCHW tensors (the other layouts are the CPU
 * backend's tuned kernels'). */
static kiln_status fc_ref(const kiln_kernel_args *a) {
    const kiln_fused_conv_attrs *at = a->attrs;
    KILN_TRY(kiln__fc_check_run(a));
    if (kiln__tensor_numel(a->out[0]) == 0) return KILN_OK;
    if (at->layout)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (FusedConv): the reference kernel reads and writes NCHW tensors "
                         "only (layout 0x%x)", NODE(a), (unsigned)at->layout);
    return fc_own(a);
}

static size_t fc_workspace(const kiln_infer_args *a) {
    kiln_infer_args c = conv_view_infer(a);
    return kiln__conv_workspace(&c);
}

static int32_t *fc_layout_field(void *attrs) { return &((kiln_fused_conv_attrs *)attrs)->layout; }

static int fc_side(int32_t l, int32_t c16, int32_t nhwc, int32_t bf16) {
    return (l & c16) ? KILN_VLAYOUT_C16 : (l & nhwc) ? ((l & bf16) ? KILN_VLAYOUT_NHWC_BF16 : KILN_VLAYOUT_NHWC)
                                                     : KILN_VLAYOUT_PLAIN;
}

static void fc_layout_io(int32_t l, kiln_io_layout *io) {
    io->x = fc_side(l, KILN_FC_LAYOUT_X_C16, KILN_FC_LAYOUT_X_NHWC, KILN_FC_LAYOUT_X_BF16);
    io->y = fc_side(l, KILN_FC_LAYOUT_Y_C16, KILN_FC_LAYOUT_Y_NHWC, KILN_FC_LAYOUT_Y_BF16);
    io->r_nhwc = (l & KILN_FC_LAYOUT_R_NHWC) != 0;
    io->r_in = 3;
}

const kiln_op_def kiln_op_FusedConv = {
    .name = "FusedConv", .domain = "kiln", .since = 1,
    .min_inputs = 2, .max_inputs = 4, .min_outputs = 1, .max_outputs = 1,
    .flags = KILN_OP_FLAG_TACTICS | KILN_OP_FLAG_REDUCIBLE,
    .attr_size = sizeof(kiln_fused_conv_attrs),
    .validate = fc_validate, .infer = fc_infer, .workspace = fc_workspace, .cpu = fc_ref,
    .layout_field = fc_layout_field, .layout_io = fc_layout_io,
};
