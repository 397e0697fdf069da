/* cuda_ops_seq.c -- the "seq" family on the GPU: RNN, GRU, LSTM (cuBLASLt
 * GEMMs + gate kernels), QuantizeLinear, DequantizeLinear,
 * DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, Einsum, ConvInteger
 * and QLinearConv (kernels in k_seq.cu). The CPU kernels
 * (src/ops/misc_rnn.c, misc_quant.c, nn_matmul.c, nn_einsum.c, nn_conv.c)
 * are the reference; docs/cuda.md says where the GPU differs. */
#if KILN_HAVE_CUDA

#include "backends/cuda/cuda_internal.h"

static kiln_status dtype_fail(const kiln_kernel_args *a, int i, kiln_dtype t) {
    return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): input %d of dtype %s has no CUDA kernel",
                     KCU_NODE(a), a->op->name, i, kiln_dtype_name(t));
}

static const kiln_tensor *opt_in(const kiln_kernel_args *a, int i) {
    return i < a->n_in ? a->in[i] : NULL;
}
static kiln_tensor *opt_out(const kiln_kernel_args *a, int i) {
    return i < a->n_out ? a->out[i] : NULL;
}

static bool is_q8(kiln_dtype t) { return t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT8; }

/* elements of a tensor, 256-byte rounded, in floats (scratch carving) */
static int64_t pad64(int64_t n) { return (n + 63) & ~(int64_t)63; }

/* ---- RNN, GRU, LSTM -------------------------------------------------------------------------- */

bool kiln__cu_rnn_supports(const kiln_graph *g, const kiln_node *n) {
    if (n->n_in < 3) return false;
    for (int i = 0; i < n->n_in && i < 8; i++) {
        kiln_dtype t = kiln__cu_in_dtype(g, n, i);
        if (t == KILN_DTYPE_UNDEFINED) continue;
        if (i == 4 ? (t != KILN_DTYPE_INT32 && t != KILN_DTYPE_INT64) : t != KILN_DTYPE_FLOAT32)
            return false;
    }
    for (int i = 0; i < n->n_out; i++) {
        kiln_dtype t = kiln__cu_out_dtype(g, n, i);
        if (t != KILN_DTYPE_UNDEFINED && t != KILN_DTYPE_FLOAT32) return false;
    }
    const kiln_rnn_attrs *at = n->attrs;
    for (int i = 0; i < 6; i++)
        if (at->act[i] < KILN_RNN_ACT_SIGMOID || at->act[i] > KILN_RNN_ACT_RELU) return false;
    return at->direction >= KILN_RNN_FORWARD && at->direction <= KILN_RNN_BIDI;
}

/* t has exactly the dims d[0..r) */
static bool dims_are(const kiln_tensor *t, int r, const int64_t *d) {
    if (t->rank != r) return false;
    for (int i = 0; i < r; i++)
        if (t->dims[i] != d[i]) return false;
    return true;
}

kiln_status kiln__cu_rnn_run(const kiln_kernel_args *a) {
    const kiln_rnn_attrs *at = a->attrs;
    const char *node = KCU_NODE(a), *opn = a->op->name;
    const int kind = a->op->code;
    const kiln_tensor *X = a->in[0], *W = a->in[1], *R = a->in[2];
    const kiln_tensor *Bi = opt_in(a, 3), *sl = opt_in(a, 4), *h0 = opt_in(a, 5);
    const kiln_tensor *c0 = kind == KILN_RNN_LSTM ? opt_in(a, 6) : NULL;
    const kiln_tensor *P = kind == KILN_RNN_LSTM ? opt_in(a, 7) : NULL;
    for (int i = 0; i < a->n_in && i < 8; i++) {
        const kiln_tensor *t = a->in[i];
        if (!t) continue;
        if (i == 4 ? (t->dtype != KILN_DTYPE_INT32 && t->dtype != KILN_DTYPE_INT64)
                   : t->dtype != KILN_DTYPE_FLOAT32)
            return dtype_fail(a, i, t->dtype);
    }
    if (X->rank != 3 || W->rank != 3 || R->rank != 3)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): X, W and R must have rank 3", node, opn);
    kcu_rnn p;
    memset(&p, 0, sizeof p);
    p.kind = kind;
    p.direction = at->direction;
    p.layout = at->layout != 0;
    p.lbr = kind == KILN_RNN_GRU && at->linear_before_reset != 0;
    p.input_forget = kind == KILN_RNN_LSTM && at->input_forget != 0;
    p.has_clip = at->has_clip != 0;
    p.clip = at->clip;
    memcpy(p.act, at->act, sizeof p.act);
    p.G = kind == KILN_RNN_LSTM ? 4 : kind == KILN_RNN_GRU ? 3 : 1;
    p.D = at->direction == KILN_RNN_BIDI ? 2 : 1;
    p.S = X->dims[p.layout ? 1 : 0];
    p.B = X->dims[p.layout ? 0 : 1];
    const int64_t I = X->dims[2];
    p.H = at->hidden_size > 0 ? at->hidden_size : R->dims[2];
    const int64_t S = p.S, Bt = p.B, H = p.H, D = p.D, GH = p.G * p.H;
    /* shapes (inference checked them; the kernels index by them) */
    const int64_t wd[3] = {D, GH, I}, rd[3] = {D, GH, H}, bd[2] = {D, 2 * GH}, pd[2] = {D, 3 * H};
    const int64_t hd[3] = {p.layout ? Bt : D, p.layout ? D : Bt, H}, sd[1] = {Bt};
    if (!dims_are(W, 3, wd) || !dims_are(R, 3, rd) || (Bi && !dims_are(Bi, 2, bd)) ||
        (P && !dims_are(P, 2, pd)) || (h0 && !dims_are(h0, 3, hd)) || (c0 && !dims_are(c0, 3, hd)) ||
        (sl && !dims_are(sl, 1, sd)))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): input shapes do not match X, W and R",
                         node, opn);
    kiln_tensor *Y = opt_out(a, 0), *Yh = opt_out(a, 1);
    kiln_tensor *Yc = kind == KILN_RNN_LSTM ? opt_out(a, 2) : NULL;
    if ((Y && kiln__tensor_numel(Y) != S * D * Bt * H) ||
        (Yh && kiln__tensor_numel(Yh) != D * Bt * H) || (Yc && kiln__tensor_numel(Yc) != D * Bt * H))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): output sizes do not match", node, opn);
    const float zero = 0.f;
    if (Y) KILN_CUDA_TRY(kcu_fill(sizeof(float), Y->data, S * D * Bt * H, &zero, KCU_STREAM(a)), node);
    if (Bt == 0 || H == 0) return KILN_OK;
    /* scratch: xw [D, S*B, GH] | hr [D, B, GH] | h, c, tmp [D, B, H] */
    const int64_t n_xw = pad64(D * S * Bt * GH), n_hr = pad64(D * Bt * GH), n_st = pad64(D * Bt * H);
    float *buf = NULL;
    KILN_TRY(kiln__cuda_scratch(KCU_STATE(a), (size_t)(n_xw + n_hr + 3 * n_st) * sizeof(float),
                                (void **)&buf, node));
    float *xw = buf, *hr = xw + n_xw;
    p.xw = xw;
    p.hr = hr;
    p.h = hr + n_hr;
    p.c = p.h + n_st;
    p.tmp = p.c + n_st;
    p.bias = Bi ? Bi->data : NULL;
    p.P = P ? P->data : NULL;
    p.lens = sl ? sl->data : NULL;
    p.lens_i64 = sl && sl->dtype == KILN_DTYPE_INT64;
    p.h0 = h0 ? h0->data : NULL;
    p.c0 = c0 ? c0->data : NULL;
    p.y = Y ? Y->data : NULL;
    p.yh = Yh ? Yh->data : NULL;
    p.yc = Yc ? Yc->data : NULL;
    /* xw = X * W^T for both directions: rows of X in memory order */
    kiln_cuda_gemm g;
    memset(&g, 0, sizeof g);
    g.t = KILN_DTYPE_FLOAT32;
    g.tb = true;
    g.alpha = 1.0;
    g.M = S * Bt;
    g.N = GH;
    g.K = I;
    g.batch = D;
    g.A = X->data;
    g.lda = I;
    g.sa = 0;
    g.B = W->data;
    g.ldb = I;
    g.sb = GH * I;
    g.C = xw;
    g.ldc = GH;
    g.sc = S * Bt * GH;
    KILN_TRY(kiln__cuda_gemm(a, &g));
    KILN_CUDA_TRY(kcu_rnn_init(&p, KCU_STREAM(a)), node);
    const bool gru_split = kind == KILN_RNN_GRU && !p.lbr;
    kiln_cuda_gemm rec = g, rh = g;
    rec.M = Bt;
    rec.N = gru_split ? 2 * H : GH;
    rec.K = H;
    rec.A = p.h;
    rec.lda = H;
    rec.sa = Bt * H;
    rec.B = R->data;
    rec.ldb = H;
    rec.sb = GH * H;
    rec.C = hr;
    rec.ldc = GH;
    rec.sc = Bt * GH;
    rh = rec;
    rh.N = H;
    rh.A = p.tmp;
    rh.B = (const float *)R->data + 2 * H * H;
    rh.C = hr + 2 * H;
    for (int64_t s = 0; s < S; s++) {
        KILN_TRY(kiln__cuda_gemm(a, &rec));
        if (gru_split) {
            KILN_CUDA_TRY(kcu_rnn_gru_reset(&p, s, KCU_STREAM(a)), node);
            KILN_TRY(kiln__cuda_gemm(a, &rh));
        }
        KILN_CUDA_TRY(kcu_rnn_step(&p, s, KCU_STREAM(a)), node);
    }
    KILN_CUDA_TRY(kcu_rnn_final(&p, KCU_STREAM(a)), node);
    return KILN_OK;
}

/* ---- QuantizeLinear / DequantizeLinear ---------------------------------------------------------- */

static bool is_dq(const kiln_op_def *op) { return kiln__op_id_of(op) == KILN_OP_DequantizeLinear; }

bool kiln__cu_qdq_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype x = kiln__cu_in_dtype(g, n, 0), z = kiln__cu_in_dtype(g, n, 2);
    kiln_dtype y = kiln__cu_out_dtype(g, n, 0);
    if (kiln__cu_in_dtype(g, n, 1) != KILN_DTYPE_FLOAT32) return false;
    if (is_dq(n->op))
        return (is_q8(x) || x == KILN_DTYPE_INT32) && (z == KILN_DTYPE_UNDEFINED || z == x) &&
               y == KILN_DTYPE_FLOAT32;
    return (x == KILN_DTYPE_FLOAT32 || x == KILN_DTYPE_INT32) &&
           (z == KILN_DTYPE_UNDEFINED ? y == KILN_DTYPE_UINT8 : (is_q8(z) && y == z));
}

kiln_status kiln__cu_qdq_run(const kiln_kernel_args *a) {
    const kiln_qdq_attrs *at = a->attrs;
    const char *node = KCU_NODE(a);
    const kiln_tensor *x = a->in[0], *s = a->in[1], *z = opt_in(a, 2);
    kiln_tensor *y = a->out[0];
    const bool dq = is_dq(a->op);
    bool ok = s->dtype == KILN_DTYPE_FLOAT32 &&
              (dq ? (is_q8(x->dtype) || x->dtype == KILN_DTYPE_INT32) && (!z || z->dtype == x->dtype) &&
                        y->dtype == KILN_DTYPE_FLOAT32
                  : (x->dtype == KILN_DTYPE_FLOAT32 || x->dtype == KILN_DTYPE_INT32) && is_q8(y->dtype) &&
                        (!z || z->dtype == y->dtype));
    if (!ok) return dtype_fail(a, 0, x->dtype);
    if (s->rank > 1 || (z && z->rank > 1))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): scale and zero point must be scalars or 1-D",
                         node, a->op->name);
    int64_t sn = kiln__tensor_numel(s), C = 1, inner = 1;
    if (z && kiln__tensor_numel(z) != sn)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (%s): zero point and scale must have the same shape", node,
                         a->op->name);
    if (sn != 1) {
        int ax;
        KILN_TRY(kiln__norm_axis(node, at->axis, x->rank, &ax));
        if (x->dims[ax] != sn)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (%s): scale has %lld elements but axis %d has %lld", node,
                             a->op->name, (long long)sn, ax, (long long)x->dims[ax]);
        C = sn;
        inner = kiln__numel(x->rank - ax - 1, x->dims + ax + 1);
    }
    int64_t n = kiln__tensor_numel(x);
    if (n == 0) return KILN_OK;
    KILN_CUDA_TRY(kcu_qdq(dq, x->dtype, y->dtype, x->data, s->data, z ? z->data : NULL, y->data, n,
                          C, inner, KCU_STREAM(a)),
                  node);
    return KILN_OK;
}

/* ---- DynamicQuantizeLinear ----------------------------------------------------------------------- */

bool kiln__cu_dyn_quant_supports(const kiln_graph *g, const kiln_node *n) {
    return kiln__cu_in_dtype(g, n, 0) == KILN_DTYPE_FLOAT32;
}

kiln_status kiln__cu_dyn_quant_run(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    if (x->dtype != KILN_DTYPE_FLOAT32) return dtype_fail(a, 0, x->dtype);
    kiln_tensor *ys = opt_out(a, 1), *yz = opt_out(a, 2);
    float *params = NULL;
    KILN_TRY(kiln__cuda_scratch(KCU_STATE(a), KCU_DQ_SCRATCH * sizeof(float), (void **)&params,
                                KCU_NODE(a)));
    KILN_CUDA_TRY(kcu_dyn_quant(x->data, kiln__tensor_numel(x), a->out[0]->data,
                                ys ? ys->data : NULL, yz ? yz->data : NULL, params, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- MatMulInteger / QLinearMatMul ---------------------------------------------------------------- */

static bool is_qlmm(const kiln_op_def *op) { return kiln__op_id_of(op) == KILN_OP_QLinearMatMul; }

bool kiln__cu_mmi_supports(const kiln_graph *g, const kiln_node *n) {
    if (!is_qlmm(n->op))
        return is_q8(kiln__cu_in_dtype(g, n, 0)) && is_q8(kiln__cu_in_dtype(g, n, 1));
    return n->n_in == 8 && is_q8(kiln__cu_in_dtype(g, n, 0)) && is_q8(kiln__cu_in_dtype(g, n, 3)) &&
           is_q8(kiln__cu_in_dtype(g, n, 7)) && kiln__cu_in_dtype(g, n, 1) == KILN_DTYPE_FLOAT32 &&
           kiln__cu_in_dtype(g, n, 4) == KILN_DTYPE_FLOAT32 &&
           kiln__cu_in_dtype(g, n, 6) == KILN_DTYPE_FLOAT32;
}

/* count of a per-row/column parameter: 1 or len (0: absent); -1 when wrong */
static int64_t param_count(const kiln_tensor *t, int64_t len) {
    if (!t) return 0;
    int64_t n = kiln__tensor_numel(t);
    return t->rank <= 1 && (n == 1 || n == len) ? n : -1;
}

/* y_scale, y_zero_point of QLinearMatMul / QLinearConv (the first value of
 * each is read): float32 and 8-bit, Y of the zero point's dtype */
static bool qlinear_out_ok(const kiln_tensor *ys, const kiln_tensor *yz, const kiln_tensor *Y) {
    return kiln__tensor_numel(ys) >= 1 && kiln__tensor_numel(yz) >= 1 &&
           ys->dtype == KILN_DTYPE_FLOAT32 && is_q8(yz->dtype) && Y->dtype == yz->dtype;
}

kiln_status kiln__cu_mmi_run(const kiln_kernel_args *a) {
    const char *node = KCU_NODE(a), *opn = a->op->name;
    const bool ql = is_qlmm(a->op);
    const kiln_tensor *A = a->in[0], *B = a->in[ql ? 3 : 1];
    const kiln_tensor *az = opt_in(a, 2), *bz = opt_in(a, ql ? 5 : 3);
    kiln_tensor *Y = a->out[0];
    if (!is_q8(A->dtype)) return dtype_fail(a, 0, A->dtype);
    if (!is_q8(B->dtype)) return dtype_fail(a, ql ? 3 : 1, B->dtype);
    if ((az && az->dtype != A->dtype) || (bz && bz->dtype != B->dtype))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): zero points must have their operand's dtype",
                         node, opn);
    if (A->rank < 1 || B->rank < 1)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): inputs must have rank >= 1", node, opn);
    kcu_mmi p;
    memset(&p, 0, sizeof p);
    const int ra = A->rank, rb = B->rank;
    p.M = ra >= 2 ? A->dims[ra - 2] : 1;
    p.K = A->dims[ra - 1];
    p.N = rb >= 2 ? B->dims[rb - 1] : 1;
    if ((rb >= 2 ? B->dims[rb - 2] : B->dims[0]) != p.K)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): inner dimensions differ", node, opn);
    int bra = ra > 2 ? ra - 2 : 0, brb = rb > 2 ? rb - 2 : 0;
    p.nbr = bra > brb ? bra : brb;
    for (int i = 0; i < p.nbr; i++) {
        int ka = i - (p.nbr - bra), kb = i - (p.nbr - brb);
        int64_t da = ka >= 0 ? A->dims[ka] : 1, db = kb >= 0 ? B->dims[kb] : 1;
        if (da != db && da != 1 && db != 1)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): batch dimensions do not broadcast",
                             node, opn);
        p.bdims[i] = da == 1 ? db : da;
    }
    kiln__bcast_strides(bra, A->dims, p.nbr, p.bdims, p.astr);
    kiln__bcast_strides(brb, B->dims, p.nbr, p.bdims, p.bstr);
    p.nbatch = 1;
    for (int i = 0; i < p.nbr; i++) {
        p.astr[i] *= p.M * p.K;
        p.bstr[i] *= p.K * p.N;
        p.nbatch *= p.bdims[i];
    }
    if (kiln__tensor_numel(Y) != p.nbatch * p.M * p.N)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): output size does not match", node, opn);
    p.at = A->dtype;
    p.bt = B->dtype;
    p.A = A->data;
    p.B = B->data;
    p.az = az ? az->data : NULL;
    p.bz = bz ? bz->data : NULL;
    p.naz = param_count(az, p.M);
    p.nbz = param_count(bz, p.N);
    p.Y = Y->data;
    bool bad = p.naz < 0 || p.nbz < 0;
    if (ql) {
        const kiln_tensor *as = a->in[1], *bs = a->in[4], *ys = a->in[6], *yz = a->in[7];
        p.qlinear = 1;
        p.nas = param_count(as, p.M);
        p.nbs = param_count(bs, p.N);
        bad = bad || p.nas <= 0 || p.nbs <= 0 || as->dtype != KILN_DTYPE_FLOAT32 ||
              bs->dtype != KILN_DTYPE_FLOAT32 || !qlinear_out_ok(ys, yz, Y);
        p.as = as->data;
        p.bs = bs->data;
        p.ys = ys->data;
        p.yz = yz->data;
        p.yt = yz->dtype;
    } else {
        bad = bad || Y->dtype != KILN_DTYPE_INT32;
    }
    if (bad)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (%s): scales and zero points must be scalars or 1-D per row "
                         "of A / column of B (float32 scales, 8-bit zero points)",
                         node, opn);
    KILN_CUDA_TRY(kcu_mmi_run(&p, KCU_STREAM(a)), node);
    return KILN_OK;
}

/* ---- Einsum ------------------------------------------------------------------------------------- */

static bool es_dtype_ok(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT32: case KILN_DTYPE_FLOAT16: case KILN_DTYPE_BFLOAT16:
    case KILN_DTYPE_FLOAT64: case KILN_DTYPE_INT8: case KILN_DTYPE_UINT8: case KILN_DTYPE_INT16:
    case KILN_DTYPE_UINT16: case KILN_DTYPE_INT32: case KILN_DTYPE_UINT32: case KILN_DTYPE_INT64:
    case KILN_DTYPE_UINT64:
        return true;
    default:
        return false;
    }
}

/* The loops of an Einsum over operands of these ranks/dims, when the GPU
 * kernel can run them (at most KCU_ES_OPS operands, KCU_ES_SUM summed labels). */
static kiln_status es_gpu_loops(const char *node, const kiln_einsum_attrs *at, int n_ops,
                                const int *ranks, const int64_t *const *dims, kiln_einsum_loops *l) {
    if (n_ops < 1 || n_ops > KCU_ES_OPS)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (Einsum): %d operands (the GPU kernel takes 1 to %d)", node,
                         n_ops, KCU_ES_OPS);
    KILN_TRY(kiln__einsum_loops(node, at->equation, n_ops, ranks, dims, l));
    if (l->n_sum > KCU_ES_SUM || l->n_out > KILN_MAX_RANK)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (Einsum): %d summed subscripts (the GPU kernel takes %d)", node,
                         l->n_sum, KCU_ES_SUM);
    return KILN_OK;
}

bool kiln__cu_einsum_supports(const kiln_graph *g, const kiln_node *n) {
    if (n->n_in < 1 || n->n_in > KCU_ES_OPS) return false;
    int ranks[KCU_ES_OPS];
    const int64_t *dims[KCU_ES_OPS];
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    if (!es_dtype_ok(t) || kiln__cu_out_dtype(g, n, 0) != t) return false;
    for (int i = 0; i < n->n_in; i++) {
        const kiln_tinfo *x = kiln__cu_in(g, n, i);
        if (!x || x->dtype != t || x->rank < 0) return false;
        ranks[i] = x->rank;
        dims[i] = x->dims;
    }
    kiln_einsum_loops *l = kiln__calloc(1, sizeof *l);
    if (!l) return false;
    bool ok = es_gpu_loops(n->name ? n->name : "?", n->attrs, n->n_in, ranks, dims, l) == KILN_OK;
    if (!ok) kiln__clear_error();
    kiln__free(l);
    return ok;
}

/* Matrix operand of one GEMM from its strides along the rows (sr) and
 * columns (sc) of an R x C matrix: row-major (sc == 1) or transposed (sr
 * == 1); *ld its leading dimension. False when neither fits. */
static bool es_gemm_operand(int64_t sr, int64_t sc, int64_t R, int64_t C, bool *trans, int64_t *ld) {
    if (sc == 1 && (sr >= C || R == 1)) {
        *trans = false;
        *ld = R == 1 ? (C > 0 ? C : 1) : sr;
        return true;
    }
    if (sr == 1 && (sc >= R || C == 1)) {
        *trans = true;
        *ld = C == 1 ? (R > 0 ? R : 1) : sc;
        return true;
    }
    return false;
}

/* Merges n dims (outer to inner: sizes sz, strides sa/sb/sc of up to three
 * tensors, sc may be NULL) into one of *tot elements with the innermost
 * strides: true when every tensor's strides are linear in that order.
 * Size-1 dims are skipped; no dims: *tot = 1, strides 0. */
static bool es_merge(int n, const int64_t *sz, const int64_t *sa, const int64_t *sb,
                     const int64_t *sc, int64_t *tot, int64_t *oa, int64_t *ob, int64_t *oc) {
    *tot = 1;
    *oa = *ob = *oc = 0;
    bool any = false;
    for (int k = n - 1; k >= 0; k--) {
        if (sz[k] == 1) continue;
        int64_t c = sc ? sc[k] : 0;
        if (!any) {
            *oa = sa[k];
            *ob = sb[k];
            *oc = c;
            any = true;
        } else if (sa[k] != *oa * *tot || sb[k] != *ob * *tot || c != *oc * *tot) {
            return false;
        }
        *tot *= sz[k];
    }
    return true;
}

/* The Einsum as one (batched) GEMM, when it is one: two floating operands;
 * the output labels are [batch..., m..., n...] where the m labels are read
 * by one operand only (A) and the n labels by the other only (B); every
 * summed label is read by both; each group merges into one dimension
 * (strides linear; the summed labels in A's memory order) and each operand
 * is then a row-major or transposed matrix. Covers matrix products, their
 * batched and transposed-output forms, attention's "bhqd,bhkd->bhqk",
 * contractions over several labels ("ijk,jkl->il"), matrix-vector. The
 * rest runs the generic kernel. */
static bool es_as_gemm(const kiln_einsum_loops *l, const kiln_kernel_args *a, kiln_cuda_gemm *g) {
    kiln_dtype t = a->out[0]->dtype;
    if (l->n_ops != 2 || l->n_sum < 1 || !kiln__cu_is_float(t)) return false;
    /* trailing run of labels read by one operand only: n (that operand is B) */
    int k = l->n_out - 1;
    while (k >= 0 && l->out_size[k] == 1) k--;
    if (k < 0 || (l->out_str[0][k] != 0) == (l->out_str[1][k] != 0)) return false;
    const int ib = l->out_str[1][k] != 0 ? 1 : 0, ia = 1 - ib;
    int n_end = k + 1;
    while (k >= 0 && (l->out_size[k] == 1 || (l->out_str[ib][k] != 0 && l->out_str[ia][k] == 0))) k--;
    int n_beg = k + 1, m_end = k + 1;
    while (k >= 0 && (l->out_size[k] == 1 || (l->out_str[ia][k] != 0 && l->out_str[ib][k] == 0))) k--;
    int m_beg = k + 1, nbatch = k + 1;
    /* summed labels: read by both, merged in A's memory order (largest stride first) */
    int order[KCU_ES_SUM], nk = 0;
    for (int s = 0; s < l->n_sum; s++) {
        if (l->sum_size[s] == 1) continue;
        if (l->sum_str[ia][s] == 0 || l->sum_str[ib][s] == 0) return false;
        int at = nk++;
        while (at > 0 && l->sum_str[ia][order[at - 1]] < l->sum_str[ia][s]) {
            order[at] = order[at - 1];
            at--;
        }
        order[at] = s;
    }
    int64_t ksz[KCU_ES_SUM], kas[KCU_ES_SUM], kbs[KCU_ES_SUM], K = 1, ak = 1, bk = 1, u;
    for (int q = 0; q < nk; q++) {
        ksz[q] = l->sum_size[order[q]];
        kas[q] = l->sum_str[ia][order[q]];
        kbs[q] = l->sum_str[ib][order[q]];
    }
    if (nk > 0 && !es_merge(nk, ksz, kas, kbs, NULL, &K, &ak, &bk, &u)) return false;
    int64_t M, N, am, bn, zero[KILN_MAX_RANK] = {0};
    if (!es_merge(m_end - m_beg, l->out_size + m_beg, l->out_str[ia] + m_beg, zero, NULL, &M, &am,
                  &u, &u) ||
        !es_merge(n_end - n_beg, l->out_size + n_beg, zero, l->out_str[ib] + n_beg, NULL, &N, &u,
                  &bn, &u))
        return false;
    /* output strides of the batch labels (dense [batch..., M, N]) */
    int64_t cst[KILN_MAX_RANK], c = M * N, bsz, bsa, bsb, bsc;
    for (int q = nbatch - 1; q >= 0; q--) {
        cst[q] = c;
        c *= l->out_size[q];
    }
    if (!es_merge(nbatch, l->out_size, l->out_str[ia], l->out_str[ib], cst, &bsz, &bsa, &bsb, &bsc))
        return false;
    memset(g, 0, sizeof *g);
    g->t = t;
    g->M = M;
    g->N = N;
    g->K = K;
    g->alpha = 1.0;
    if (!es_gemm_operand(am, ak, M, K, &g->ta, &g->lda) ||
        !es_gemm_operand(bk, bn, K, N, &g->tb, &g->ldb))
        return false;
    g->ldc = N;
    g->batch = bsz;
    g->sa = bsa;
    g->sb = bsb;
    g->sc = bsc;
    g->A = a->in[ia]->data;
    g->B = a->in[ib]->data;
    g->C = a->out[0]->data;
    return true;
}

kiln_status kiln__cu_einsum_run(const kiln_kernel_args *a) {
    const char *node = KCU_NODE(a);
    kiln_tensor *Y = a->out[0];
    int ranks[KCU_ES_OPS];
    const int64_t *dims[KCU_ES_OPS];
    if (a->n_in < 1 || a->n_in > KCU_ES_OPS)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (Einsum): %d operands (the GPU kernel takes 1 to %d)", node,
                         a->n_in, KCU_ES_OPS);
    for (int i = 0; i < a->n_in; i++) {
        if (!a->in[i] || a->in[i]->dtype != Y->dtype || !es_dtype_ok(Y->dtype))
            return dtype_fail(a, i, a->in[i] ? a->in[i]->dtype : KILN_DTYPE_UNDEFINED);
        ranks[i] = a->in[i]->rank;
        dims[i] = a->in[i]->dims;
    }
    kiln_einsum_loops *l = kiln__calloc(1, sizeof *l);
    if (!l) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (Einsum): out of memory", node);
    kiln_status st = es_gpu_loops(node, a->attrs, a->n_in, ranks, dims, l);
    kcu_einsum p;
    memset(&p, 0, sizeof p);
    if (st == KILN_OK) {
        p.n_ops = l->n_ops;
        p.n_out = l->n_out;
        p.n_sum = l->n_sum;
        p.n = 1;
        for (int k = 0; k < l->n_out; k++) p.n *= l->out_size[k];
        p.n_sum_total = 1;
        for (int k = 0; k < l->n_sum; k++) p.n_sum_total *= l->sum_size[k];
        memcpy(p.out_size, l->out_size, sizeof p.out_size);
        memcpy(p.sum_size, l->sum_size, (size_t)l->n_sum * sizeof(int64_t));
        for (int i = 0; i < l->n_ops; i++) {
            memcpy(p.out_str[i], l->out_str[i], sizeof p.out_str[i]);
            memcpy(p.sum_str[i], l->sum_str[i], (size_t)l->n_sum * sizeof(int64_t));
            p.in[i] = a->in[i]->data;
        }
        if (p.n != kiln__tensor_numel(Y))
            st = KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Einsum): output size does not match", node);
    }
    kiln_cuda_gemm g;
    bool gemm = st == KILN_OK && es_as_gemm(l, a, &g);
    kiln__free(l);
    KILN_TRY(st);
    if (gemm) return kiln__cuda_gemm(a, &g);
    KILN_CUDA_TRY(kcu_einsum_run(Y->dtype, &p, Y->data, KCU_STREAM(a)), node);
    return KILN_OK;
}

/* ---- ConvInteger / QLinearConv ------------------------------------------------------------------ */


static bool is_qlconv(const kiln_op_def *op) { return kiln__op_id_of(op) == KILN_OP_QLinearConv; }

bool kiln__cu_qconv_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_tinfo *x = kiln__cu_in(g, n, 0);
    if (!x || x->rank < 3 || x->rank > 2 + KCU_MAX_SP) return false;
    if (!is_qlconv(n->op))
        return is_q8(x->dtype) && is_q8(kiln__cu_in_dtype(g, n, 1));
    kiln_dtype b = kiln__cu_in_dtype(g, n, 8);
    return n->n_in >= 8 && is_q8(x->dtype) && is_q8(kiln__cu_in_dtype(g, n, 3)) &&
           is_q8(kiln__cu_in_dtype(g, n, 7)) && kiln__cu_in_dtype(g, n, 1) == KILN_DTYPE_FLOAT32 &&
           kiln__cu_in_dtype(g, n, 4) == KILN_DTYPE_FLOAT32 &&
           kiln__cu_in_dtype(g, n, 6) == KILN_DTYPE_FLOAT32 &&
           (b == KILN_DTYPE_UNDEFINED || b == KILN_DTYPE_INT32);
}

kiln_status kiln__cu_qconv_run(const kiln_kernel_args *a) {
    const char *node = KCU_NODE(a), *opn = a->op->name;
    const bool ql = is_qlconv(a->op);
    const kiln_tensor *X = a->in[0], *W = a->in[ql ? 3 : 1];
    const kiln_tensor *xz = opt_in(a, 2), *wz = opt_in(a, ql ? 5 : 3);
    kiln_tensor *Y = a->out[0];
    if (!is_q8(X->dtype)) return dtype_fail(a, 0, X->dtype);
    if (!is_q8(W->dtype)) return dtype_fail(a, ql ? 3 : 1, W->dtype);
    kiln_conv_geom cg;
    KILN_TRY(kiln__conv_geom(node, opn, a->attrs, X->rank, X->dims, W->rank, W->dims, &cg));
    if (cg.ns < 1 || cg.ns > KCU_MAX_SP)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (%s): %d spatial dims (the GPU kernel handles 1 to %d)", node,
                         opn, cg.ns, KCU_MAX_SP);
    kcu_qconv p;
    memset(&p, 0, sizeof p);
    p.g.ns = cg.ns;
    p.g.N = cg.N;
    p.g.C = cg.C;
    p.g.M = cg.M;
    p.g.G = cg.G;
    p.g.Cg = cg.Cg;
    p.g.Mg = cg.Mg;
    p.g.in_sz = cg.in_sz;
    p.g.out_sz = cg.out_sz;
    p.g.k_sz = cg.k_sz;
    for (int i = 0; i < cg.ns; i++) {
        p.g.in[i] = cg.in[i];
        p.g.out[i] = cg.out[i];
        p.g.k[i] = cg.k[i];
        p.g.s[i] = cg.s[i];
        p.g.d[i] = cg.d[i];
        p.g.pb[i] = cg.pb[i];
    }
    if (kiln__tensor_numel(Y) != cg.N * cg.M * cg.out_sz)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): output size does not match", node, opn);
    p.xt = X->dtype;
    p.wt = W->dtype;
    p.x = X->data;
    p.w = W->data;
    p.xz = xz ? xz->data : NULL;
    p.wz = wz ? wz->data : NULL;
    p.nwz = param_count(wz, cg.M);
    p.y = Y->data;
    bool bad = (xz && (xz->dtype != X->dtype || kiln__tensor_numel(xz) < 1)) ||
               (wz && wz->dtype != W->dtype) || p.nwz < 0;
    if (ql) {
        const kiln_tensor *xs = a->in[1], *ws = a->in[4], *ys = a->in[6], *yz = a->in[7];
        const kiln_tensor *B = opt_in(a, 8);
        p.qlinear = 1;
        p.nws = param_count(ws, cg.M);
        bad = bad || p.nws <= 0 || kiln__tensor_numel(xs) < 1 || xs->dtype != KILN_DTYPE_FLOAT32 ||
              ws->dtype != KILN_DTYPE_FLOAT32 || !qlinear_out_ok(ys, yz, Y) ||
              (B && (B->dtype != KILN_DTYPE_INT32 || kiln__tensor_numel(B) != cg.M));
        p.xs = xs->data;
        p.ws = ws->data;
        p.ys = ys->data;
        p.yz = yz->data;
        p.yt = yz->dtype;
        p.bias = B ? B->data : NULL;
    } else {
        bad = bad || Y->dtype != KILN_DTYPE_INT32;
    }
    if (bad)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (%s): zero points must have their operand's dtype (w's: 1 or M "
                         "values), scales float32 (w's: 1 or M), bias int32 of M values",
                         node, opn);
    KILN_CUDA_TRY(kcu_qconv_run(&p, KCU_STREAM(a)), node);
    return KILN_OK;
}


#else
typedef int kiln_cuda_ops_seq_disabled;
#endif
