/* fused_pwdw_cpu.c -- the CPU backend's kernel of kiln.PwDwConv (the op:
 * src/ops/fused_pwdw.c): weights packed once per context, then
 * conv_pwdw.c's row-by-row kernel. */
#include "backends/cpu/kernels/conv_pwdw.h"
#include "backends/cpu/kernels/fused_conv_cpu.h"

#define NODE(a) ((a)->node_name ? (a)->node_name : "?")

/* Threads the workspace is sized for (the kernel uses no more than it has room for). */
static int ws_threads(void) {
    int n = kiln__cpu_count();
    return n < 1 ? 1 : n > 16 ? 16 : n;
}

/* (asked only after the op's infer accepted the layer) */
size_t kiln__cpu_pwdw_workspace(const kiln_infer_args *a) {
    const kiln_pwdw_attrs *at = a->attrs;
    const kiln_tinfo *X = a->in[0], *W2 = a->in[3];
    if (X->dims[3] < 1 || W2->dims[0] < 1) return 0;
    int64_t M = at->has_project ? a->in[5]->dims[0] : 0;
    return kiln__pwdw_workspace(X->dims[3], W2->dims[0], M, at->stride, at->pads[1], at->pads[3],
                                ws_threads());
}

static const float *data_or_null(const kiln_kernel_args *a, int i) {
    return i < a->n_in && a->in[i] ? a->in[i]->data : NULL;
}

/* PwDwConv pays off with the AVX-512 kernel only: without it the graph
 * optimizer keeps the FusedConv layers. */
bool kiln__cpu_pwdw_supports(const kiln_graph *g, const kiln_node *n) {
    (void)g, (void)n;
    return kiln__pwdw_fast_available();
}

kiln_status kiln__cpu_pwdw_run(const kiln_kernel_args *a) {
    const kiln_pwdw_attrs *at = a->attrs;
    KILN_TRY(kiln__pwdw_check_inputs(NODE(a), at, a->n_in));
    for (int i = 0; i < a->n_in; i++)
        if (a->in[i] && a->in[i]->dtype != KILN_DTYPE_FLOAT32)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (PwDwConv): input %d is %s, not float32",
                             NODE(a), i, kiln_dtype_name(a->in[i]->dtype));
    const kiln_tensor *X = a->in[0];
    kiln_tensor *Y = a->out[0];
    if (kiln__tensor_numel(Y) == 0) return KILN_OK;
    int64_t N = X->dims[0], C = X->dims[1], H = X->dims[2], W = X->dims[3], E = a->in[3]->dims[0];
    int64_t M = at->has_project ? a->in[5]->dims[0] : 0;
    size_t need = kiln__pwdw_workspace(W, E, M, at->stride, at->pads[1], at->pads[3], 1);
    if (need > a->workspace_size)
        return KILN_FAIL(KILN_ERR_INTERNAL,
                         "node '%s' (PwDwConv): needs %zu bytes of workspace, the plan gave %zu",
                         NODE(a), need, a->workspace_size);
    int64_t Cw = at->no_expand ? 0 : C; /* no first pointwise weights */
    bool fresh, own;
    float *packed = kiln__node_packed(a, (size_t)kiln__pwdw_packed_floats(Cw, E, M), &fresh, &own);
    if (!packed)
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (PwDwConv): out of memory packing weights", NODE(a));
    if (fresh)
        kiln__pwdw_pack(at->no_expand ? NULL : a->in[1]->data, data_or_null(a, 2), a->in[3]->data,
                        data_or_null(a, 4), M ? a->in[5]->data : NULL, data_or_null(a, 6), Cw, E, M, packed);
    kiln_pwdw_args p = {
        .x = X->data, .packed = packed, .r = at->has_residual ? a->in[7]->data : NULL, .y = Y->data,
        .N = N, .H = H, .W = W, .C = C, .E = E, .M = M, .no_expand = at->no_expand,
        .stride = at->stride, .pt = at->pads[0], .pl = at->pads[1], .pb = at->pads[2], .pr = at->pads[3],
        .x_nhwc = (at->layout & KILN_FC_LAYOUT_X_NHWC) != 0,
        .y_nhwc = (at->layout & KILN_FC_LAYOUT_Y_NHWC) != 0,
        .act1 = at->act1, .alpha1 = at->alpha1, .beta1 = at->beta1,
        .act2 = at->act2, .alpha2 = at->alpha2, .beta2 = at->beta2,
        .act3 = at->act3, .alpha3 = at->alpha3, .beta3 = at->beta3,
        .ws = a->workspace, .ws_bytes = a->workspace_size, .pool = a->pool};
    kiln__pwdw_run(&p);
    if (own) kiln__aligned_free(packed);
    return KILN_OK;
}

