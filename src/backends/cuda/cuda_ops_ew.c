/* cuda_ops_ew.c -- the elementwise family on the GPU: unary math and
 * activations, IsNaN/IsInf/Not, binary ops with numpy (and opset < 7
 * legacy) broadcasting, Max/Min/Sum/Mean, Where, Clip, Cast/CastLike.
 * Kernels: k_elementwise.cu, k_cast.cu. */
#if KILN_HAVE_CUDA

#include "backends/cuda/cuda_internal.h"
#include "ops/elementwise_impl.h"

/* ---- op id -> kernel code ------------------------------------------------------------ */

static int unary_code(int op_id) {
    switch (op_id) {
    case KILN_OP_Abs: return KCU_U_ABS;
    case KILN_OP_Neg: return KCU_U_NEG;
    case KILN_OP_Sqrt: return KCU_U_SQRT;
    case KILN_OP_Exp: return KCU_U_EXP;
    case KILN_OP_Log: return KCU_U_LOG;
    case KILN_OP_Reciprocal: return KCU_U_RECIPROCAL;
    case KILN_OP_Floor: return KCU_U_FLOOR;
    case KILN_OP_Ceil: return KCU_U_CEIL;
    case KILN_OP_Round: return KCU_U_ROUND;
    case KILN_OP_Sign: return KCU_U_SIGN;
    case KILN_OP_Sin: return KCU_U_SIN;
    case KILN_OP_Cos: return KCU_U_COS;
    case KILN_OP_Tan: return KCU_U_TAN;
    case KILN_OP_Asin: return KCU_U_ASIN;
    case KILN_OP_Acos: return KCU_U_ACOS;
    case KILN_OP_Atan: return KCU_U_ATAN;
    case KILN_OP_Sinh: return KCU_U_SINH;
    case KILN_OP_Cosh: return KCU_U_COSH;
    case KILN_OP_Asinh: return KCU_U_ASINH;
    case KILN_OP_Acosh: return KCU_U_ACOSH;
    case KILN_OP_Atanh: return KCU_U_ATANH;
    case KILN_OP_Erf: return KCU_U_ERF;
    case KILN_OP_Relu: return KCU_U_RELU;
    case KILN_OP_LeakyRelu: return KCU_U_LEAKYRELU;
    case KILN_OP_Elu: return KCU_U_ELU;
    case KILN_OP_Selu: return KCU_U_SELU;
    case KILN_OP_Celu: return KCU_U_CELU;
    case KILN_OP_Sigmoid: return KCU_U_SIGMOID;
    case KILN_OP_HardSigmoid: return KCU_U_HARDSIGMOID;
    case KILN_OP_HardSwish: return KCU_U_HARDSWISH;
    case KILN_OP_Tanh: return KCU_U_TANH;
    case KILN_OP_Softplus: return KCU_U_SOFTPLUS;
    case KILN_OP_Softsign: return KCU_U_SOFTSIGN;
    case KILN_OP_Mish: return KCU_U_MISH;
    case KILN_OP_ThresholdedRelu: return KCU_U_THRESHOLDEDRELU;
    case KILN_OP_Shrink: return KCU_U_SHRINK;
    default: return -1;
    }
}

/* Binary op code; attrs may be NULL. -1: not a binary op. */
static int binary_code(int op_id, const kiln_ew_bin_attrs *at) {
    switch (op_id) {
    case KILN_OP_Add: return KCU_B_ADD;
    case KILN_OP_Sub: return KCU_B_SUB;
    case KILN_OP_Mul: return KCU_B_MUL;
    case KILN_OP_Div: return KCU_B_DIV;
    case KILN_OP_Pow: return KCU_B_POW;
    case KILN_OP_Mod: return at && at->fmod ? KCU_B_FMOD : KCU_B_PYMOD;
    case KILN_OP_Equal: return KCU_B_EQ;
    case KILN_OP_Less: return KCU_B_LT;
    case KILN_OP_LessOrEqual: return KCU_B_LE;
    case KILN_OP_Greater: return KCU_B_GT;
    case KILN_OP_GreaterOrEqual: return KCU_B_GE;
    case KILN_OP_And: return KCU_B_AND;
    case KILN_OP_Or: return KCU_B_OR;
    case KILN_OP_Xor: return KCU_B_XOR;
    case KILN_OP_BitShift: return at && at->shift_right ? KCU_B_SHR : KCU_B_SHL;
    case KILN_OP_PRelu: return KCU_B_PRELU;
    default: return -1;
    }
}

static kiln_status dtype_fail(const kiln_kernel_args *a, kiln_dtype t) {
    return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s has no CUDA kernel",
                     KCU_NODE(a), a->op->name, kiln_dtype_name(t));
}

/* ---- unary --------------------------------------------------------------------------- */

bool kiln__cu_unary_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    return kcu_unary_has(unary_code(n->op_id), t) && kiln__cu_out_dtype(g, n, 0) == t;
}

kiln_status kiln__cu_unary_run(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    int code = unary_code(kiln__op_id_of(a->op));
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
    if (n->op_id == KILN_OP_Not) return t == KILN_DTYPE_BOOL;
    return kiln__cu_is_float(t);
}

kiln_status kiln__cu_predicate_run(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    int id = kiln__op_id_of(a->op);
    int op = id == KILN_OP_Not ? KCU_P_NOT : id == KILN_OP_IsNaN ? KCU_P_ISNAN : KCU_P_ISINF;
    int pos = 1, neg = 1;
    if (id == KILN_OP_IsInf && a->attrs) {
        const kiln_ew_isinf_attrs *at = a->attrs;
        pos = at->detect_positive != 0;
        neg = at->detect_negative != 0;
    }
    if (op == KCU_P_NOT ? x->dtype != KILN_DTYPE_BOOL : !kiln__cu_is_float(x->dtype))
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
    return kcu_binary_has(binary_code(n->op_id, n->attrs), t);
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
    return binary_apply(a, binary_code(kiln__op_id_of(a->op), at), A, brank, bdims, B->data,
                        a->out[0]);
}

/* ---- Max, Min, Sum, Mean: a left fold into the output ------------------------------------------ */

static int variadic_code(int op_id) {
    return op_id == KILN_OP_Max ? KCU_B_MAX : op_id == KILN_OP_Min ? KCU_B_MIN : KCU_B_ADD;
}

bool kiln__cu_variadic_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    for (int i = 1; i < n->n_in; i++)
        if (kiln__cu_in_dtype(g, n, i) != t) return false;
    if ((n->op_id == KILN_OP_Sum || n->op_id == KILN_OP_Mean) && !kiln__cu_is_float(t))
        return false;
    return kcu_binary_has(variadic_code(n->op_id), t);
}

kiln_status kiln__cu_variadic_run(const kiln_kernel_args *a) {
    kiln_tensor *out = a->out[0];
    int id = kiln__op_id_of(a->op);
    int code = variadic_code(id);
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
    if (id == KILN_OP_Mean)
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
