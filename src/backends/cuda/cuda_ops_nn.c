/* cuda_ops_nn.c -- normalization, softmax, pooling and reductions on the
 * GPU: GlobalAveragePool/GlobalMaxPool, Softmax/LogSoftmax,
 * LayerNormalization, kiln.AddLayerNorm, RMSNormalization,
 * BatchNormalization, MaxPool/AveragePool and the Reduce* family.
 * Kernels: k_norm.cu, k_pool.cu, k_reduce.cu. */
#if KILN_HAVE_CUDA

#include "backends/cuda/cuda_internal.h"
#include "ops/fused_norm.h"

static kiln_status dtype_fail(const kiln_kernel_args *a, kiln_dtype t) {
    return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s has no CUDA kernel",
                     KCU_NODE(a), a->op->name, kiln_dtype_name(t));
}

static bool float_in_out(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    return kiln__cu_is_float(t) && kiln__cu_out_dtype(g, n, 0) == t;
}

/* ---- GlobalAveragePool, GlobalMaxPool: a reduction over each plane ------------------------ */

/* The layout of a GlobalAveragePool (KILN_POOL_LAYOUT_*; 0 for the other
 * global pools, which have no attrs). */
static int global_pool_layout(const void *attrs, const kiln_op_def *op) {
    return attrs && kiln__op_id_of(op) == KILN_OP_GlobalAveragePool ? ((const kiln_pool_attrs *)attrs)->layout : 0;
}

/* NHWC (backends/cuda/cuda_layout.c): a 4-D input; nChw16c is the CPU's only */
bool kiln__cu_global_pool_supports(const kiln_graph *g, const kiln_node *n) {
    int lay = global_pool_layout(n->attrs, n->op);
    const kiln_tinfo *x = kiln__cu_in(g, n, 0);
    if (lay == KILN_POOL_LAYOUT_NHWC) return float_in_out(g, n) && x && x->rank == 4;
    return float_in_out(g, n) && lay == 0;
}

const char *kiln__cu_global_pool_name(const kiln_node *n) {
    return global_pool_layout(n->attrs, n->op) == KILN_POOL_LAYOUT_NHWC ? "cuda.global_pool.nhwc" : NULL;
}

/* kind (RK_MEAN, RK_MAX) over every plane of x [N, C, spatial...] (NCHW) into y [N, C] */
static kiln_status plane_reduce(const kiln_kernel_args *a, const kiln_tensor *x, int kind, void *y) {
    kcu_reduce g;
    memset(&g, 0, sizeof g);
    int64_t plane = kiln__numel(x->rank - 2, x->dims + 2);
    g.out_n = x->dims[0] * x->dims[1];
    g.R = plane;
    g.krank = 1;
    g.kdims[0] = g.out_n;
    g.kst[0] = plane;
    g.rrank = 1;
    g.rdims[0] = plane;
    g.rst[0] = 1;
    KILN_CUDA_TRY(kcu_reduce_run(kind, x->dtype, &g, x->data, y, KCU_STREAM(a)), KCU_NODE(a));
    return KILN_OK;
}

/* The mean of every [H, W] plane of x ([N, C, H, W] of a float type; its
 * bytes NHWC where nhwc) into y [N, C] (device); the NHWC kernel's partial
 * sums, where it needs them, in the state's scratch. GlobalAveragePool's
 * kernel, and kiln.SqueezeExcite's first step (cuda_se.c). */
kiln_status kiln__cu_gap_into(const kiln_kernel_args *a, const kiln_tensor *x, bool nhwc, void *y) {
    if (nhwc) {
        int64_t N = x->dims[0], HW = x->dims[2] * x->dims[3], C = x->dims[1];
        int64_t S = kcu_gap_nhwc_splits(N, HW, C);
        int clusters = KCU_STATE(a)->gap_clusters; /* thread-block clusters (sm_90) */
        void *part = NULL; /* the splits' partial sums, where they are not one cluster */
        if (S > 1 && !kcu_gap_nhwc_cluster(S, clusters))
            KILN_TRY(kiln__cuda_scratch(KCU_STATE(a), (size_t)(S * N * C) * sizeof(float), &part, KCU_NODE(a)));
        KILN_CUDA_TRY(kcu_gap_nhwc(x->dtype, N, HW, C, x->data, y, part, clusters, KCU_STREAM(a)), KCU_NODE(a));
        return KILN_OK;
    }
    return plane_reduce(a, x, RK_MEAN, y);
}

kiln_status kiln__cu_global_pool_run(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    if (!kiln__cu_is_float(x->dtype)) return dtype_fail(a, x->dtype);
    int lay = global_pool_layout(a->attrs, a->op);
    if (lay == KILN_POOL_LAYOUT_NHWC && x->rank == 4) return kiln__cu_gap_into(a, x, true, a->out[0]->data);
    if (lay)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): layout %d (the CUDA kernel reads NCHW, or NHWC "
                         "with rank 4)", KCU_NODE(a), a->op->name, lay);
    if (x->rank < 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): input must have rank >= 2, got %d",
                         KCU_NODE(a), a->op->name, x->rank);
    int kind = kiln__op_id_of(a->op) == KILN_OP_GlobalMaxPool ? RK_MAX : RK_MEAN;
    return plane_reduce(a, x, kind, a->out[0]->data);
}


/* ---- Softmax, LogSoftmax ---------------------------------------------------------------------- */

bool kiln__cu_softmax_supports(const kiln_graph *g, const kiln_node *n) {
    return float_in_out(g, n);
}

kiln_status kiln__cu_softmax_run(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    if (!kiln__cu_is_float(x->dtype)) return dtype_fail(a, x->dtype);
    int64_t outer, n, inner;
    KILN_TRY(kiln__cu_softmax_rows(a, &outer, &n, &inner));
    int kind = kiln__op_id_of(a->op) == KILN_OP_LogSoftmax ? 1 : 0;
    KILN_CUDA_TRY(kcu_softmax(kind, x->dtype, x->data, a->out[0]->data, outer, n, inner,
                              KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- LayerNormalization ------------------------------------------------------------------------- */

/* numel of a parameter when known; -1 otherwise */
static int64_t info_numel(const kiln_tinfo *t) {
    return t && t->rank >= 0 ? kiln__numel(t->rank, t->dims) : -1;
}

/* Scale and B (inputs p0 and p0 + 1) cover the normalized dims of input 0
 * densely, or are scalars (unknown shapes pass) */
static bool ln_params_fit(const kiln_graph *g, const kiln_node *n, int axis_attr, int p0) {
    const kiln_tinfo *x = kiln__cu_in(g, n, 0);
    if (!x || x->rank < 0) return true;
    int axis = axis_attr < 0 ? axis_attr + x->rank : axis_attr;
    if (axis < 0 || axis >= x->rank) return false;
    int64_t D = kiln__numel(x->rank - axis, x->dims + axis);
    for (int i = p0; i < p0 + 2; i++) {
        int64_t pn = info_numel(kiln__cu_in(g, n, i));
        if (D >= 0 && pn >= 0 && pn != D && pn != 1) return false;
    }
    return true;
}

bool kiln__cu_layernorm_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_ln_attrs *at = n->attrs;
    if (!float_in_out(g, n)) return false;
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    for (int i = 1; i < 3; i++) {
        kiln_dtype p = kiln__cu_in_dtype(g, n, i);
        if (p != KILN_DTYPE_UNDEFINED && p != t) return false;
    }
    for (int i = 1; i < 3; i++) {
        kiln_dtype s = kiln__cu_out_dtype(g, n, i);
        if (s != KILN_DTYPE_UNDEFINED && !kiln__cu_is_float(s)) return false;
    }
    return ln_params_fit(g, n, at->axis, 1);
}

kiln_status kiln__cu_layernorm_run(const kiln_kernel_args *a) {
    const kiln_ln_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0], *S = a->in[1], *B = a->n_in > 2 ? a->in[2] : NULL;
    if (!kiln__cu_is_float(x->dtype) || S->dtype != x->dtype || (B && B->dtype != x->dtype))
        return dtype_fail(a, x->dtype);
    int axis = 0;
    KILN_TRY(kiln__norm_axis(KCU_NODE(a), at->axis, x->rank, &axis));
    int64_t D = kiln__numel(x->rank - axis, x->dims + axis), rows = kiln__numel(axis, x->dims);
    int64_t sn = kiln__tensor_numel(S), bn = B ? kiln__tensor_numel(B) : 0;
    if ((sn != D && sn != 1) || (B && bn != D && bn != 1))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (LayerNormalization): Scale/B must have %lld elements (or 1) "
                         "on the GPU",
                         KCU_NODE(a), (long long)D);
    void *mean = NULL, *inv = NULL;
    kiln_dtype stat_t = KILN_DTYPE_FLOAT32;
    if (a->n_out > 1 && a->out[1] && a->out[1]->data) {
        mean = a->out[1]->data;
        stat_t = a->out[1]->dtype;
    }
    if (a->n_out > 2 && a->out[2] && a->out[2]->data) {
        inv = a->out[2]->data;
        stat_t = a->out[2]->dtype;
    }
    if (!kiln__cu_is_float(stat_t)) return dtype_fail(a, stat_t);
    KILN_CUDA_TRY(kcu_layernorm(x->dtype, x->data, S->data, sn == 1 && D != 1, B ? B->data : NULL,
                                bn == 1 && D != 1, a->out[0]->data, stat_t, mean, inv, rows, D,
                                at->epsilon, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- kiln.AddLayerNorm (src/ops/fused_norm.h) ---------------------------------------------------- */

bool kiln__cu_add_layernorm_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_add_ln_attrs *at = n->attrs;
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    if (!at || (t != KILN_DTYPE_FLOAT32 && t != KILN_DTYPE_FLOAT16 && t != KILN_DTYPE_BFLOAT16) ||
        kiln__cu_out_dtype(g, n, 0) != t)
        return false;
    for (int i = 1; i < 4; i++) {
        kiln_dtype p = kiln__cu_in_dtype(g, n, i);
        if ((i < 3 && p != t) || (p != KILN_DTYPE_UNDEFINED && p != t)) return false;
    }
    kiln_dtype so = kiln__cu_out_dtype(g, n, 1);
    if (so != KILN_DTYPE_UNDEFINED && so != t) return false;
    return ln_params_fit(g, n, at->axis, 2);
}

kiln_status kiln__cu_add_layernorm_run(const kiln_kernel_args *a) {
    const kiln_add_ln_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0], *r = a->in[1], *S = a->in[2], *B = a->n_in > 3 ? a->in[3] : NULL;
    kiln_tensor *sum = a->n_out > 1 && a->out[1] && a->out[1]->data ? a->out[1] : NULL;
    kiln_dtype t = x->dtype;
    if (r->dtype != t || S->dtype != t || (B && B->dtype != t) || a->out[0]->dtype != t ||
        (sum && sum->dtype != t) || t == KILN_DTYPE_FLOAT64 || !kiln__cu_is_float(t))
        return dtype_fail(a, t);
    int axis = 0;
    KILN_TRY(kiln__norm_axis(KCU_NODE(a), at->axis, x->rank, &axis));
    int64_t rows, D, r_rows;
    if (!kiln__add_ln_geom(x->rank, x->dims, r->rank, r->dims, axis, &rows, &D, &r_rows))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (AddLayerNorm): the addends do not fit", KCU_NODE(a));
    int64_t sn = kiln__tensor_numel(S), bn = B ? kiln__tensor_numel(B) : 0;
    if ((sn != D && sn != 1) || (B && bn != D && bn != 1))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (AddLayerNorm): Scale/B must have %lld elements (or 1) on the GPU",
                         KCU_NODE(a), (long long)D);
    if (rows == 0 || D == 0) return KILN_OK;
    KILN_CUDA_TRY(kcu_add_layernorm(t, x->data, r->data, r_rows, sum ? sum->data : NULL, S->data,
                                    sn == 1 && D != 1, B ? B->data : NULL, bn == 1 && D != 1, a->out[0]->data,
                                    rows, D, at->epsilon, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- RMSNormalization ---------------------------------------------------------------------------- */

/* X, scale and Y of one float type (the reference kernel runs mixed types);
 * scale dense over the normalized dims or a scalar */
bool kiln__cu_rmsnorm_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_ln_attrs *at = n->attrs;
    return at && float_in_out(g, n) && kiln__cu_in_dtype(g, n, 1) == kiln__cu_in_dtype(g, n, 0) &&
           ln_params_fit(g, n, at->axis, 1);
}

kiln_status kiln__cu_rmsnorm_run(const kiln_kernel_args *a) {
    const kiln_ln_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0], *S = a->in[1];
    if (!kiln__cu_is_float(x->dtype) || S->dtype != x->dtype || a->out[0]->dtype != x->dtype)
        return dtype_fail(a, x->dtype);
    int axis = 0;
    KILN_TRY(kiln__norm_axis(KCU_NODE(a), at->axis, x->rank, &axis));
    int64_t D = kiln__numel(x->rank - axis, x->dims + axis), rows = kiln__numel(axis, x->dims);
    int64_t sn = kiln__tensor_numel(S);
    if (sn != D && sn != 1)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (RMSNormalization): scale must have %lld elements (or 1) on the GPU",
                         KCU_NODE(a), (long long)D);
    KILN_CUDA_TRY(kcu_rmsnorm(x->dtype, x->data, S->data, sn == 1 && D != 1, a->out[0]->data, rows, D,
                              at->epsilon, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- BatchNormalization (inference) -------------------------------------------------------------- */

bool kiln__cu_batchnorm_supports(const kiln_graph *g, const kiln_node *n) {
    if (!float_in_out(g, n)) return false;
    kiln_dtype p = kiln__cu_in_dtype(g, n, 1);
    if (!kiln__cu_is_float(p)) return false;
    for (int i = 2; i < 5; i++)
        if (kiln__cu_in_dtype(g, n, i) != p) return false;
    return true;
}

kiln_status kiln__cu_batchnorm_run(const kiln_kernel_args *a) {
    const kiln_bn_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    if (!kiln__cu_is_float(x->dtype)) return dtype_fail(a, x->dtype);
    if (x->rank < 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (BatchNormalization): input rank %d < 2",
                         KCU_NODE(a), x->rank);
    kiln_dtype pt = a->in[1]->dtype;
    for (int i = 1; i < 5; i++)
        if (a->in[i]->dtype != pt || !kiln__cu_is_float(pt)) return dtype_fail(a, a->in[i]->dtype);
    int64_t N = x->dims[0], C = x->dims[1], plane = kiln__numel(x->rank - 2, x->dims + 2);
    int64_t np = kiln__tensor_numel(a->in[1]);
    bool per_elem = np != C;
    if (per_elem && np != C * plane)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (BatchNormalization): scale has %lld elements, expected %lld or "
                         "%lld",
                         KCU_NODE(a), (long long)np, (long long)C, (long long)(C * plane));
    for (int i = 2; i < 5; i++)
        if (kiln__tensor_numel(a->in[i]) != np)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (BatchNormalization): parameter %d has %lld elements, "
                             "scale has %lld",
                             KCU_NODE(a), i, (long long)kiln__tensor_numel(a->in[i]), (long long)np);
    void *coef = NULL;
    if (x->dtype != KILN_DTYPE_FLOAT64)
        KILN_TRY(kiln__cuda_scratch(KCU_STATE(a), (size_t)(2 * np + 1) * sizeof(float), &coef,
                                    KCU_NODE(a)));
    KILN_CUDA_TRY(kcu_batchnorm(x->dtype, x->data, a->out[0]->data, pt, a->in[1]->data,
                                a->in[2]->data, a->in[3]->data, a->in[4]->data, coef, N, C, plane,
                                per_elem, at->epsilon, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- MaxPool, AveragePool -------------------------------------------------------------------------- */

/* NHWC (backends/cuda/cuda_layout.c): 2-D, without MaxPool's indices */
bool kiln__cu_pool_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_pool_attrs *at = n->attrs;
    if (!float_in_out(g, n) || at->n_kernel < 1 || at->n_kernel > KCU_MAX_SP) return false;
    /* MaxPool indices in column-major order (storage_order 1) stay on the CPU */
    if (kiln__cu_out(g, n, 1) && at->storage_order) return false;
    if (at->layout == KILN_POOL_LAYOUT_NHWC) {
        const kiln_tinfo *x = kiln__cu_in(g, n, 0);
        return at->n_kernel == 2 && !kiln__cu_out(g, n, 1) && x && x->rank == 4;
    }
    return at->layout == 0;
}

const char *kiln__cu_pool_name(const kiln_node *n) {
    const kiln_pool_attrs *at = n->attrs;
    return at && at->layout == KILN_POOL_LAYOUT_NHWC ? "cuda.pool.nhwc" : NULL;
}

kiln_status kiln__cu_pool_run(const kiln_kernel_args *a) {
    const kiln_pool_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    const char *node = KCU_NODE(a);
    if (!kiln__cu_is_float(x->dtype)) return dtype_fail(a, x->dtype);
    int ns = x->rank - 2;
    if (ns < 1 || ns > KCU_MAX_SP || at->n_kernel != ns || y->rank != x->rank)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (%s): %d spatial dims (the GPU kernel handles 1 to %d)", node,
                         a->op->name, ns, KCU_MAX_SP);
    kcu_pool g;
    memset(&g, 0, sizeof g);
    g.ns = ns;
    g.kind = kiln__op_id_of(a->op) == KILN_OP_MaxPool ? 0 : 1;
    g.count_include_pad = at->count_include_pad != 0;
    g.planes = x->dims[0] * x->dims[1];
    g.in_sz = g.out_sz = 1;
    for (int i = 0; i < ns; i++) {
        int64_t in = x->dims[2 + i], k = at->kernel[i];
        int64_t s = at->n_strides ? at->strides[i] : 1, d = at->n_dilations ? at->dilations[i] : 1;
        int64_t pb = at->n_pads ? at->pads[i] : 0, pe = at->n_pads ? at->pads[ns + i] : 0;
        if (at->auto_pad == PAD_VALID) pb = pe = 0;
        if (at->auto_pad == PAD_SAME_UPPER || at->auto_pad == PAD_SAME_LOWER)
            (void)kiln__nn_same_pads(at->auto_pad, in, k, s, d, &pb, &pe);
        g.in[i] = in;
        g.out[i] = y->dims[2 + i];
        g.k[i] = k;
        g.s[i] = s;
        g.d[i] = d;
        g.pb[i] = pb;
        g.pe[i] = pe;
        g.in_sz *= in;
        g.out_sz *= g.out[i];
    }
    g.out_n = g.planes * g.out_sz;
    if (at->layout == KILN_POOL_LAYOUT_NHWC) { /* X [N,H,W,C], Y [N,Ho,Wo,C] under NCHW shapes */
        if (ns != 2 || (a->n_out > 1 && a->out[1] && a->out[1]->data))
            return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): NHWC pooling is 2-D without indices",
                             node, a->op->name);
        kcu_pool_nhwc p = {.kind = g.kind, .count_include_pad = g.count_include_pad,
                           .N = x->dims[0], .C = x->dims[1], .H = g.in[0], .W = g.in[1], .Ho = g.out[0],
                           .Wo = g.out[1], .kh = g.k[0], .kw = g.k[1], .sh = g.s[0], .sw = g.s[1],
                           .dh = g.d[0], .dw = g.d[1], .ph = g.pb[0], .pw = g.pb[1], .peh = g.pe[0],
                           .pew = g.pe[1]};
        KILN_CUDA_TRY(kcu_pool_nhwc_run(x->dtype, &p, x->data, y->data, KCU_STREAM(a)), node);
        return KILN_OK;
    }
    if (at->layout)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): layout %d (the CUDA kernel reads NCHW or NHWC)", node,
                         a->op->name, (int)at->layout);
    int64_t *ind = NULL;
    if (g.kind == 0 && a->n_out > 1 && a->out[1] && a->out[1]->data) {
        if (at->storage_order)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "node '%s' (MaxPool): indices with storage_order=1 have no CUDA kernel",
                             node);
        ind = a->out[1]->data;
    }
    KILN_CUDA_TRY(kcu_pool_run(x->dtype, &g, x->data, y->data, ind, KCU_STREAM(a)), node);
    return KILN_OK;
}



/* ---- Reduce* ------------------------------------------------------------------------------------------ */

/* The reductions of the Reduce* rows: the op's code (ops/reduce_codes.h). */
static int reduce_kind(const kiln_op_def *op) { return op->code >= 0 && op->code < RK_COUNT ? op->code : -1; }

bool kiln__cu_reduce_supports(const kiln_graph *g, const kiln_node *n) {
    return reduce_kind(n->op) >= 0 && float_in_out(g, n);
}

kiln_status kiln__cu_reduce_run(const kiln_kernel_args *a) {
    const kiln_reduce_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    const char *node = KCU_NODE(a);
    int kind = reduce_kind(a->op);
    if (kind < 0 || !kiln__cu_is_float(x->dtype) || y->dtype != x->dtype)
        return dtype_fail(a, x->dtype);
    const int r = x->rank;
    int64_t axes[KILN_MAX_RANK], n_axes = 0;
    const kiln_tensor *ax = a->n_in > 1 ? a->in[1] : NULL;
    if (ax) KILN_TRY(kiln__cuda_read_ints(a, ax, axes, KILN_MAX_RANK, &n_axes, "axes"));
    bool mask[KILN_MAX_RANK];
    for (int i = 0; i < r; i++) mask[i] = n_axes == 0;
    if (n_axes == 0 && at->noop_with_empty_axes)
        return kiln__cuda_memcpy(a, y->data, x->data,
                                 (size_t)kiln__tensor_numel(x) * kiln_dtype_size(x->dtype));
    for (int64_t i = 0; i < n_axes; i++) {
        int64_t v = axes[i];
        if (v < -r || v >= r)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (%s): axis %lld is out of range for an input of rank %d",
                             node, a->op->name, (long long)v, r);
        int k = (int)(v < 0 ? v + r : v);
        if (mask[k])
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): axis %lld is repeated in 'axes'",
                             node, a->op->name, (long long)v);
        mask[k] = true;
    }
    int64_t xst[KILN_MAX_RANK];
    kiln__cuda_strides(r, x->dims, xst);
    kcu_reduce g;
    memset(&g, 0, sizeof g);
    g.out_n = 1;
    g.R = 1;
    for (int d = 0; d < r; d++) {
        int64_t dim = x->dims[d], s = xst[d];
        if (mask[d]) g.R *= dim;
        else g.out_n *= dim;
        if (dim == 1) continue;
        int64_t *dims = mask[d] ? g.rdims : g.kdims, *st = mask[d] ? g.rst : g.kst;
        int *cnt = mask[d] ? &g.rrank : &g.krank;
        if (*cnt > 0 && st[*cnt - 1] == s * dim) {
            dims[*cnt - 1] *= dim;
            st[*cnt - 1] = s;
        } else {
            dims[*cnt] = dim;
            st[*cnt] = s;
            (*cnt)++;
        }
    }
    if (g.out_n != kiln__tensor_numel(y))
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (%s): output has %lld elements, expected %lld",
                         node, a->op->name, (long long)kiln__tensor_numel(y), (long long)g.out_n);
    KILN_CUDA_TRY(kcu_reduce_run(kind, x->dtype, &g, x->data, y->data, KCU_STREAM(a)), node);
    return KILN_OK;
}


#else
typedef int kiln_cuda_ops_nn_disabled;
#endif
