/* elementwise_common.c -- the broadcast loop driver and helpers shared by
 * the elementwise op family (see elementwise_impl.h). */
#include "ops/elementwise_impl.h"

int kiln__ew_native_index(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT32: return EW_T_F32;
    case KILN_DTYPE_FLOAT64: return EW_T_F64;
    case KILN_DTYPE_INT8: return EW_T_I8;
    case KILN_DTYPE_INT16: return EW_T_I16;
    case KILN_DTYPE_INT32: return EW_T_I32;
    case KILN_DTYPE_INT64: return EW_T_I64;
    case KILN_DTYPE_UINT8: return EW_T_U8;
    case KILN_DTYPE_UINT16: return EW_T_U16;
    case KILN_DTYPE_UINT32: return EW_T_U32;
    case KILN_DTYPE_UINT64: return EW_T_U64;
    case KILN_DTYPE_BOOL: return EW_T_BOOL;
    default: return -1;
    }
}

/* ---- loop driver ----------------------------------------------------------- */

void kiln__ew_loop_init(ew_loop *L, const kiln_tensor *out, int nin, const kiln_tensor *const *in,
                        ew_row_fn fn, const void *ctx) {
    KILN_ASSERT(nin + 1 <= EW_MAX_OPERANDS);
    memset(L, 0, sizeof *L);
    L->nops = nin + 1;
    L->fn = fn;
    L->ctx = ctx;
    const int R = out->rank;
    int64_t full[EW_MAX_OPERANDS][KILN_MAX_RANK];
    int64_t s = 1;
    for (int d = R - 1; d >= 0; d--) {
        full[0][d] = s;
        s *= out->dims[d];
    }
    L->base[0] = out->data;
    L->es[0] = kiln_dtype_size(out->dtype);
    for (int k = 0; k < nin; k++) {
        kiln__bcast_strides(in[k]->rank, in[k]->dims, R, out->dims, full[k + 1]);
        L->base[k + 1] = in[k]->data;
        L->es[k + 1] = kiln_dtype_size(in[k]->dtype);
    }
    L->total = kiln__numel(R, out->dims);
    /* drop size-1 dims, then merge dims contiguous for every operand */
    int r = 0;
    for (int d = 0; d < R; d++) {
        if (out->dims[d] == 1) continue;
        bool merge = r > 0;
        for (int k = 0; merge && k < L->nops; k++)
            if (L->st[k][r - 1] != full[k][d] * out->dims[d]) merge = false;
        if (merge) {
            L->dims[r - 1] *= out->dims[d];
            for (int k = 0; k < L->nops; k++) L->st[k][r - 1] = full[k][d];
        } else {
            L->dims[r] = out->dims[d];
            for (int k = 0; k < L->nops; k++) L->st[k][r] = full[k][d];
            r++;
        }
    }
    if (r == 0) {
        L->dims[0] = 1;
        for (int k = 0; k < L->nops; k++) L->st[k][0] = 1;
        r = 1;
    }
    L->rank = r;
}

static void ew_loop_chunk(void *vctx, int64_t begin, int64_t end) {
    const ew_loop *L = vctx;
    const int R = L->rank, nops = L->nops;
    const int64_t inner = L->dims[R - 1];
    int64_t idx[KILN_MAX_RANK] = {0};
    int64_t rem = begin / inner, pos_in = begin % inner;
    for (int d = R - 2; d >= 0; d--) {
        idx[d] = rem % L->dims[d];
        rem /= L->dims[d];
    }
    int64_t s[EW_MAX_OPERANDS];
    char *p[EW_MAX_OPERANDS];
    for (int k = 0; k < nops; k++) s[k] = L->st[k][R - 1];
    int64_t pos = begin;
    while (pos < end) {
        int64_t n = inner - pos_in;
        if (n > end - pos) n = end - pos;
        for (int k = 0; k < nops; k++) {
            int64_t off = pos_in * s[k];
            for (int d = 0; d < R - 1; d++) off += idx[d] * L->st[k][d];
            p[k] = L->base[k] + off * (int64_t)L->es[k];
        }
        L->fn(L->ctx, p, s, n);
        pos += n;
        pos_in = 0;
        for (int d = R - 2; d >= 0; d--) {
            if (++idx[d] < L->dims[d]) break;
            idx[d] = 0;
        }
    }
}

void kiln__ew_parallel(kiln_pool *pool, int64_t n, int64_t grain, kiln_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (!pool || n < 2 * grain || kiln__pool_threads(pool) <= 1)
        fn(ctx, 0, n);
    else
        kiln__parallel_for(pool, n, grain, fn, ctx);
}

void kiln__ew_loop_run(ew_loop *L, kiln_pool *pool) {
    if (L->total <= 0) return;
    kiln__ew_parallel(pool, L->total, EW_GRAIN, ew_loop_chunk, L);
}

/* ---- float16 / bfloat16 rows ----------------------------------------------- */

#define EW_HALF_BLOCK 256

void kiln__ew_half_row(const void *vctx, char *const *p, const int64_t *s, int64_t n) {
    const ew_half_ctx *c = vctx;
    float buf[EW_MAX_OPERANDS][EW_HALF_BLOCK];
    char *q[EW_MAX_OPERANDS];
    int64_t qs[EW_MAX_OPERANDS];
    for (int64_t i0 = 0; i0 < n; i0 += EW_HALF_BLOCK) {
        int64_t m = n - i0 < EW_HALF_BLOCK ? n - i0 : EW_HALF_BLOCK;
        for (int k = 1; k < c->nops; k++) {
            kiln_dtype t = c->dt[k];
            size_t es = kiln_dtype_size(t);
            if (!ew_is_half(t)) { /* e.g. the bool condition or an f32 operand */
                q[k] = p[k] + i0 * s[k] * (int64_t)es;
                qs[k] = s[k];
                continue;
            }
            const uint16_t *src = (const uint16_t *)(const void *)p[k];
            if (s[k] == 0) {
                buf[k][0] = ew_half_load(t, src[0]);
                qs[k] = 0;
            } else {
                for (int64_t i = 0; i < m; i++) buf[k][i] = ew_half_load(t, src[(i0 + i) * s[k]]);
                qs[k] = 1;
            }
            q[k] = (char *)buf[k];
        }
        bool out_half = ew_is_half(c->dt[0]);
        q[0] = out_half ? (char *)buf[0] : p[0] + i0 * (int64_t)kiln_dtype_size(c->dt[0]);
        qs[0] = 1;
        c->f32fn(c->f32ctx, q, qs, m);
        if (out_half) {
            uint16_t *dst = (uint16_t *)(void *)p[0];
            for (int64_t i = 0; i < m; i++) dst[i0 + i] = ew_half_store(c->dt[0], buf[0][i]);
        }
    }
}

/* ---- infer helpers ----------------------------------------------------------- */

kiln_status kiln__ew_check_dtype(const kiln_infer_args *a, int idx, kiln_dtype t, uint32_t mask) {
    if (t == KILN_DTYPE_UNDEFINED || ew_dtype_in(t, mask)) return KILN_OK;
    return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): input %d has unsupported dtype %s",
                     a->node_name ? a->node_name : "?", a->op->name, idx, kiln_dtype_name(t));
}

kiln_status kiln__ew_kernel_dtype_fail(const kiln_kernel_args *a, kiln_dtype t) {
    return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): no CPU kernel for dtype %s",
                     a->node_name ? a->node_name : "?", a->op->name, kiln_dtype_name(t));
}

kiln_status kiln__ew_legacy_shape(const char *node, const kiln_ew_bin_attrs *at, int rank0,
                                  int *rank1, int64_t *dims1) {
    if (!at || !at->legacy_bcast || rank0 < 0 || *rank1 < 0) return KILN_OK;
    int64_t axis = at->legacy_axis;
    if (at->legacy_bcast == EW_LEGACY_PRELU) {
        /* PRelu-6: a 1-D slope of C values applies along axis 1 */
        if (*rank1 != 1 || rank0 < 2 || dims1[0] == 1) return KILN_OK;
        axis = 1;
    }
    if (axis < 0) axis += rank0;
    if (axis < 0 || axis + *rank1 > rank0)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s': legacy broadcast axis %d does not fit input 1 of rank %d "
                         "into input 0 of rank %d",
                         node ? node : "?", (int)at->legacy_axis, *rank1, rank0);
    int64_t d[KILN_MAX_RANK];
    for (int i = 0; i < rank0; i++) d[i] = 1;
    for (int i = 0; i < *rank1; i++) d[axis + i] = dims1[i];
    memcpy(dims1, d, sizeof(int64_t) * (size_t)rank0);
    *rank1 = rank0;
    return KILN_OK;
}

kiln_status kiln__ew_import_legacy_bcast(kiln_import_ctx *ic, kiln_ew_bin_attrs *at) {
    if (kiln_import_opset(ic) >= 7) return KILN_OK;
    if (kiln_attr_int(ic, "broadcast", 0) && kiln_attr_has(ic, "axis")) {
        at->legacy_bcast = EW_LEGACY_AXIS;
        KILN_TRY(kiln_attr_int32(ic, "axis", 0, &at->legacy_axis));
    }
    /* broadcast=1 without axis is suffix alignment (numpy), and broadcast=0
     * requires equal shapes, which numpy broadcasting accepts as well. */
    return KILN_OK;
}
