/* cuda_ops_ew.c -- the elementwise family on the GPU: unary math and
 * activations, IsNaN/IsInf/Not, binary ops with numpy (and opset < 7
 * legacy) broadcasting, Max/Min/Sum/Mean, Where, Clip, Cast/CastLike.
 * Kernels: k_elementwise.cu, k_cast.cu. */
#if KILN_HAVE_CUDA

#include "backends/cuda/cuda_internal.h"
#include "ops/elementwise_impl.h"

/* The launchers take the ops' own codes (op->code, ops/elementwise_codes.h). */

/* Binary row kind of node/args (attrs may be NULL). */
static int binary_kind(const kiln_op_def *op, const kiln_ew_bin_attrs *at) {
    return at ? kiln__ew_binary_kind(op->code, at->fmod, at->shift_right) : op->code;
}

static kiln_status dtype_fail(const kiln_kernel_args *a, kiln_dtype t) {
    return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s has no CUDA kernel",
                     KCU_NODE(a), a->op->name, kiln_dtype_name(t));
}

/* ---- unary --------------------------------------------------------------------------- */

bool kiln__cu_unary_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    return kcu_unary_has(n->op->code, t) && kiln__cu_out_dtype(g, n, 0) == t;
}

kiln_status kiln__cu_unary_run(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    int code = a->op->code;
    if (!kcu_unary_has(code, x->dtype) || y->dtype != x->dtype) return dtype_fail(a, x->dtype);
    float alpha = 0, beta = 0, gamma = 0;
    if (a->op->attr_size == sizeof(kiln_ew_act_attrs) && a->attrs) {
        const kiln_ew_act_attrs *at = a->attrs;
        alpha = at->alpha;
        beta = at->beta;
        gamma = at->gamma;
    }
    KILN_CUDA_TRY(kcu_unary(code, x->dtype, x->data, y->data, kiln__tensor_numel(x), alpha, beta,
                            gamma, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- IsNaN / IsInf / Not ------------------------------------------------------------------ */

bool kiln__cu_predicate_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    if (kiln__cu_out_dtype(g, n, 0) != KILN_DTYPE_BOOL) return false;
    if (n->op->code == EW_U_NOT) return t == KILN_DTYPE_BOOL;
    return kiln__cu_is_float(t);
}

kiln_status kiln__cu_predicate_run(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    int op = a->op->code;
    int pos = 1, neg = 1;
    if (op == EW_U_ISINF && a->attrs) {
        const kiln_ew_isinf_attrs *at = a->attrs;
        pos = at->detect_positive != 0;
        neg = at->detect_negative != 0;
    }
    if (op == EW_U_NOT ? x->dtype != KILN_DTYPE_BOOL : !kiln__cu_is_float(x->dtype))
        return dtype_fail(a, x->dtype);
    KILN_CUDA_TRY(kcu_predicate(op, x->dtype, x->data, a->out[0]->data, kiln__tensor_numel(x), pos,
                                neg, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- binary ------------------------------------------------------------------------------- */

bool kiln__cu_binary_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    if (kiln__cu_in_dtype(g, n, 1) != t) return false; /* mixed-type Pow stays on the CPU */
    return kcu_binary_has(binary_kind(n->op, n->attrs), t);
}

/* out = op(A, B) with A/B broadcast to out (B already legacy-reshaped) */
static kiln_status binary_apply(const kiln_kernel_args *a, int code, const kiln_tensor *A,
                                int brank, const int64_t *bdims, const void *bdata,
                                kiln_tensor *out) {
    if (!kcu_binary_has(code, A->dtype)) return dtype_fail(a, A->dtype);
    kcu_bcast g;
    const int ranks[2] = {A->rank, brank};
    const int64_t *dims[2] = {A->dims, bdims};
    kiln__cuda_bcast_plan(out->rank, out->dims, 2, ranks, dims, &g);
    KILN_CUDA_TRY(kcu_binary(code, A->dtype, &g, out->data, A->data, bdata, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

kiln_status kiln__cu_binary_run(const kiln_kernel_args *a) {
    const kiln_ew_bin_attrs *at = a->attrs;
    const kiln_tensor *A = a->in[0], *B = a->in[1];
    if (A->dtype != B->dtype) return dtype_fail(a, B->dtype);
    int brank = B->rank;
    int64_t bdims[KILN_MAX_RANK];
    memcpy(bdims, B->dims, sizeof bdims);
    KILN_TRY(kiln__ew_legacy_shape(a->node_name, at, A->rank, &brank, bdims));
    return binary_apply(a, binary_kind(a->op, at), A, brank, bdims, B->data,
                        a->out[0]);
}

/* ---- Max, Min, Sum, Mean: a left fold into the output ------------------------------------------ */

bool kiln__cu_variadic_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    for (int i = 1; i < n->n_in; i++)
        if (kiln__cu_in_dtype(g, n, i) != t) return false;
    if ((n->op->code == EW_B_SUM || n->op->code == EW_B_MEAN) && !kiln__cu_is_float(t))
        return false;
    return kcu_binary_has(kiln__ew_variadic_kind(n->op->code), t);
}

kiln_status kiln__cu_variadic_run(const kiln_kernel_args *a) {
    kiln_tensor *out = a->out[0];
    int code = kiln__ew_variadic_kind(a->op->code);
    if (!kcu_binary_has(code, out->dtype)) return dtype_fail(a, out->dtype);
    if (a->n_in == 1)
        return kiln__cuda_memcpy(a, out->data, a->in[0]->data,
                                 (size_t)kiln__tensor_numel(out) * kiln_dtype_size(out->dtype));
    const kiln_tensor *B = a->in[1];
    KILN_TRY(binary_apply(a, code, a->in[0], B->rank, B->dims, B->data, out));
    for (int i = 2; i < a->n_in; i++) {
        B = a->in[i];
        KILN_TRY(binary_apply(a, code, out, B->rank, B->dims, B->data, out));
    }
    if (a->op->code == EW_B_MEAN)
        KILN_CUDA_TRY(kcu_div_scalar(out->dtype, out->data, kiln__tensor_numel(out), (float)a->n_in,
                                     KCU_STREAM(a)),
                      KCU_NODE(a));
    return KILN_OK;
}

/* ---- Where ------------------------------------------------------------------------------------- */

static bool where_es_ok(kiln_dtype t) {
    size_t es = kiln_dtype_size(t);
    return t != KILN_DTYPE_STRING && (es == 1 || es == 2 || es == 4 || es == 8);
}

bool kiln__cu_where_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 1);
    return kiln__cu_in_dtype(g, n, 0) == KILN_DTYPE_BOOL && kiln__cu_in_dtype(g, n, 2) == t &&
           where_es_ok(t);
}

kiln_status kiln__cu_where_run(const kiln_kernel_args *a) {
    kiln_tensor *out = a->out[0];
    const kiln_tensor *C = a->in[0], *X = a->in[1], *Y = a->in[2];
    if (C->dtype != KILN_DTYPE_BOOL) return dtype_fail(a, C->dtype);
    if (!where_es_ok(out->dtype) || X->dtype != out->dtype || Y->dtype != out->dtype)
        return dtype_fail(a, out->dtype);
    kcu_bcast g;
    const int ranks[3] = {C->rank, X->rank, Y->rank};
    const int64_t *dims[3] = {C->dims, X->dims, Y->dims};
    kiln__cuda_bcast_plan(out->rank, out->dims, 3, ranks, dims, &g);
    KILN_CUDA_TRY(kcu_where(kiln_dtype_size(out->dtype), &g, out->data, C->data, X->data, Y->data,
                            KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- Clip -------------------------------------------------------------------------------------- */

bool kiln__cu_clip_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    if (!kcu_clip_has(t)) return false;
    for (int i = 1; i < 3; i++) {
        kiln_dtype b = kiln__cu_in_dtype(g, n, i);
        if (b != KILN_DTYPE_UNDEFINED && b != t) return false;
    }
    return true;
}

kiln_status kiln__cu_clip_run(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    if (!kcu_clip_has(x->dtype)) return dtype_fail(a, x->dtype);
    kcu_clip_bounds b;
    memset(&b, 0, sizeof b);
    for (int i = 1; i < 3 && i < a->n_in; i++) {
        const kiln_tensor *t = a->in[i];
        if (!t || kiln__tensor_numel(t) <= 0) continue;
        if (i == 1) b.has_lo = 1;
        else b.has_hi = 1;
        if (kiln__cuda_is_device_ptr(t->data)) {
            /* read by the kernel: no synchronization */
            if (t->dtype != x->dtype) return dtype_fail(a, t->dtype);
            if (i == 1) b.lo_dev = t->data;
            else b.hi_dev = t->data;
        } else {
            double f;
            int64_t v;
            KILN_TRY(kiln__cuda_read_scalar(a, t, &f, &v));
            if (i == 1) {
                b.lo_f = f;
                b.lo_i = v;
            } else {
                b.hi_f = f;
                b.hi_i = v;
            }
        }
    }
    KILN_CUDA_TRY(kcu_clip(x->dtype, x->data, a->out[0]->data, kiln__tensor_numel(x), &b,
                           KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- Cast, CastLike ------------------------------------------------------------------------------- */

bool kiln__cu_cast_supports(const kiln_graph *g, const kiln_node *n) {
    return kcu_cast_has(kiln__cu_in_dtype(g, n, 0)) && kcu_cast_has(kiln__cu_out_dtype(g, n, 0));
}

kiln_status kiln__cu_cast_run(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    if (!kcu_cast_has(x->dtype)) return dtype_fail(a, x->dtype);
    if (!kcu_cast_has(y->dtype)) return dtype_fail(a, y->dtype);
    int64_t n = kiln__tensor_numel(x);
    if (x->dtype == y->dtype)
        return kiln__cuda_memcpy(a, y->data, x->data, (size_t)n * kiln_dtype_size(x->dtype));
    KILN_CUDA_TRY(kcu_cast(x->dtype, y->dtype, x->data, y->data, n, KCU_STREAM(a)), KCU_NODE(a));
    return KILN_OK;
}

#else
typedef int kiln_cuda_ops_ew_disabled;
#endif
