/* cuda_util.c -- host-side helpers of the CUDA backend: broadcast and copy
 * geometry, reading small integer inputs, scratch memory, the supports()
 * accessors. */
#if KILN_HAVE_CUDA

#include "backends/cuda/cuda_internal.h"

#include <stdint.h>

/* ---- supports() helpers ---------------------------------------------------------- */

const kiln_tinfo *kiln__cu_in(const kiln_graph *g, const kiln_node *n, int i) {
    if (i < 0 || i >= n->n_in || n->in[i] < 0 || n->in[i] >= g->n_values) return NULL;
    return &g->values[n->in[i]].info;
}

const kiln_tinfo *kiln__cu_out(const kiln_graph *g, const kiln_node *n, int i) {
    if (i < 0 || i >= n->n_out || n->out[i] < 0 || n->out[i] >= g->n_values) return NULL;
    return &g->values[n->out[i]].info;
}

kiln_dtype kiln__cu_in_dtype(const kiln_graph *g, const kiln_node *n, int i) {
    const kiln_tinfo *t = kiln__cu_in(g, n, i);
    return t ? t->dtype : KILN_DTYPE_UNDEFINED;
}

kiln_dtype kiln__cu_out_dtype(const kiln_graph *g, const kiln_node *n, int i) {
    const kiln_tinfo *t = kiln__cu_out(g, n, i);
    return t ? t->dtype : KILN_DTYPE_UNDEFINED;
}

bool kiln__cu_is_float(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT32 || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16 ||
           t == KILN_DTYPE_FLOAT64;
}

bool kiln__cu_float_in_out(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0);
    return kiln__cu_is_float(t) && kiln__cu_out_dtype(g, n, 0) == t;
}

kiln_status kiln__cu_dtype_fail(const kiln_kernel_args *a, kiln_dtype t) {
    return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s has no CUDA kernel",
                     KCU_NODE(a), a->op->name, kiln_dtype_name(t));
}

bool kiln__cu_infer_keeps_dtype(const kiln_graph *g, const kiln_node *n) {
    const kiln_tinfo *x = kiln__cu_in(g, n, 0);
    kiln_tinfo outs[KILN_CALL_MAX];
    if (!x || n->n_out < 1 || !n->op || !n->op->infer) return false;
    bool ok = kiln__node_infer(g, n, false, outs) == KILN_OK && outs[0].dtype == x->dtype;
    kiln__clear_error();
    return ok;
}

void kiln__cuda_strides(int rank, const int64_t *dims, int64_t *st) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        st[d] = s;
        s *= dims[d];
    }
}

/* ---- broadcast geometry ----------------------------------------------------------- */

void kiln__cuda_bcast_plan(int out_rank, const int64_t *out_dims, int nin, const int *in_rank,
                           const int64_t *const *in_dims, kcu_bcast *g) {
    memset(g, 0, sizeof *g);
    g->nin = nin;
    g->n = kiln__numel(out_rank, out_dims);
    int64_t full[KCU_EW_MAX_IN][KILN_MAX_RANK];
    for (int k = 0; k < nin; k++)
        kiln__bcast_strides(in_rank[k], in_dims[k], out_rank, out_dims, full[k]);
    /* drop size-1 dims; merge a dim into the previous one when every input
     * is contiguous (or broadcast) across the pair */
    int r = 0;
    for (int d = 0; d < out_rank; d++) {
        if (out_dims[d] == 1) continue;
        bool merge = r > 0;
        for (int k = 0; merge && k < nin; k++)
            if (g->st[k][r - 1] != full[k][d] * out_dims[d]) merge = false;
        if (merge) {
            g->dims[r - 1] *= out_dims[d];
            for (int k = 0; k < nin; k++) g->st[k][r - 1] = full[k][d];
        } else {
            g->dims[r] = out_dims[d];
            for (int k = 0; k < nin; k++) g->st[k][r] = full[k][d];
            r++;
        }
    }
    g->rank = r;
    int64_t dense[KILN_MAX_RANK];
    kiln__cuda_strides(r, g->dims, dense);
    g->all_flat = 1;
    bool fits = g->n < INT32_MAX;
    for (int k = 0; k < nin; k++) {
        bool same = true, scalar = true;
        int64_t maxoff = 0;
        for (int d = 0; d < r; d++) {
            if (g->st[k][d] != dense[d]) same = false;
            if (g->st[k][d] != 0) scalar = false;
            maxoff += (g->dims[d] - 1) * g->st[k][d];
        }
        g->flat[k] = same ? KCU_FLAT_SAME : scalar ? KCU_FLAT_SCALAR : KCU_FLAT_NONE;
        if (g->flat[k] == KCU_FLAT_NONE) g->all_flat = 0;
        if (maxoff >= INT32_MAX) fits = false;
    }
    g->idx32 = fits;
}

/* ---- strided copy ------------------------------------------------------------------ */

static bool aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

kiln_status kiln__cuda_copy(const kiln_kernel_args *a, size_t es, int rank, const int64_t *dims,
                            void *dst, const int64_t *dst_st, const void *src,
                            const int64_t *src_st) {
    if (rank > KCU_COPY_MAX_RANK)
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s': copy of rank %d", KCU_NODE(a), rank);
    int64_t dd[KCU_COPY_MAX_RANK];
    if (!dst_st) {
        kiln__cuda_strides(rank, dims, dd);
        dst_st = dd;
    }
    kcu_copy c;
    memset(&c, 0, sizeof c);
    c.n = 1;
    for (int d = 0; d < rank; d++) c.n *= dims[d];
    if (c.n <= 0) return KILN_OK;
    int r = 0;
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 1) continue;
        if (r > 0 && c.dst_st[r - 1] == dst_st[d] * dims[d] &&
            c.src_st[r - 1] == src_st[d] * dims[d]) {
            c.dims[r - 1] *= dims[d];
            c.dst_st[r - 1] = dst_st[d];
            c.src_st[r - 1] = src_st[d];
        } else {
            c.dims[r] = dims[d];
            c.dst_st[r] = dst_st[d];
            c.src_st[r] = src_st[d];
            r++;
        }
    }
    c.rank = r;
    /* one contiguous block: a plain copy */
    if (r == 0 || (r == 1 && c.dst_st[0] == 1 && c.src_st[0] == 1))
        return kiln__cuda_memcpy(a, dst, src, (size_t)c.n * es);
    /* wider elements when the innermost dim is contiguous on both sides */
    if (c.dst_st[r - 1] == 1 && c.src_st[r - 1] == 1) {
        static const size_t widths[3] = {16, 8, 4};
        for (int w = 0; w < 3; w++) {
            size_t we = widths[w];
            if (we <= es || we % es) continue;
            int64_t f = (int64_t)(we / es);
            bool ok = c.dims[r - 1] % f == 0 && aligned(dst, we) && aligned(src, we);
            for (int d = 0; ok && d < r - 1; d++)
                if (c.dst_st[d] % f || c.src_st[d] % f) ok = false;
            if (!ok) continue;
            c.dims[r - 1] /= f;
            for (int d = 0; d < r - 1; d++) {
                c.dst_st[d] /= f;
                c.src_st[d] /= f;
            }
            c.n /= f;
            es = we;
            break;
        }
    }
    int64_t dense[KCU_COPY_MAX_RANK];
    kiln__cuda_strides(r, c.dims, dense);
    c.dst_dense = 1;
    int64_t dmax = 0, smax = 0;
    for (int d = 0; d < r; d++) {
        if (c.dst_st[d] != dense[d]) c.dst_dense = 0;
        int64_t ds = c.dst_st[d] < 0 ? -c.dst_st[d] : c.dst_st[d];
        int64_t ss = c.src_st[d] < 0 ? -c.src_st[d] : c.src_st[d];
        dmax += (c.dims[d] - 1) * ds;
        smax += (c.dims[d] - 1) * ss;
    }
    c.idx32 = c.n < INT32_MAX && dmax < INT32_MAX && smax < INT32_MAX;
    /* transposed innermost pair (dense destination): tiled through shared memory */
    if (c.dst_dense && r >= 2 && es <= 8 && c.src_st[r - 2] == 1 && c.src_st[r - 1] != 1 &&
        c.dims[r - 1] >= 8 && c.dims[r - 2] >= 8) {
        kcu_copy b = c;
        b.rank = r - 2;
        KILN_CUDA_TRY(kcu_transpose2d(es, &b, c.dims[r - 2], c.dims[r - 1], c.src_st[r - 1], dst,
                                      src, KCU_STREAM(a)),
                      KCU_NODE(a));
        return KILN_OK;
    }
    KILN_CUDA_TRY(kcu_strided_copy(es, &c, dst, src, KCU_STREAM(a)), KCU_NODE(a));
    return KILN_OK;
}

kiln_status kiln__cuda_memcpy(const kiln_kernel_args *a, void *dst, const void *src, size_t n) {
    if (!n || dst == src) return KILN_OK;
    KILN_CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- host values ---------------------------------------------------------------------- */

bool kiln__cuda_is_device_ptr(const void *p) {
    if (!p) return false;
    struct cudaPointerAttributes at;
    cudaError_t e = cudaPointerGetAttributes(&at, p);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return at.type == cudaMemoryTypeDevice;
}

/* Whether t is one of a's inputs that the context says is in host memory
 * (a->host_in): then no driver query is needed to tell (none during a CUDA
 * Graph capture, none per run). */
static bool known_host(const kiln_kernel_args *a, const kiln_tensor *t) {
    for (int i = 0; i < a->n_in && i < 32; i++)
        if (a->in[i] == t) return (a->host_in >> i) & 1u;
    return false;
}

/* Copies the nb bytes of t to host memory `buf` when t lives on the device;
 * returns the host pointer to read. */
static kiln_status host_view(const kiln_kernel_args *a, const kiln_tensor *t, size_t nb, void *buf,
                             const void **out) {
    if (known_host(a, t) || !kiln__cuda_is_device_ptr(t->data)) {
        *out = t->data;
        return KILN_OK;
    }
    KILN_CUDA_TRY(cudaMemcpyAsync(buf, t->data, nb, cudaMemcpyDeviceToHost, KCU_STREAM(a)),
                  KCU_NODE(a));
    KILN_CUDA_TRY(cudaStreamSynchronize(KCU_STREAM(a)), KCU_NODE(a));
    *out = buf;
    return KILN_OK;
}

kiln_status kiln__cuda_read_ints(const kiln_kernel_args *a, const kiln_tensor *t, int64_t *out,
                                 int64_t cap, int64_t *n, const char *what) {
    *n = 0;
    if (!t) return KILN_OK;
    int64_t cnt = kiln__tensor_numel(t);
    if (!kiln__dtype_is_int(t->dtype))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): %s must be an integer tensor, got %s",
                         KCU_NODE(a), a->op->name, what, kiln_dtype_name(t->dtype));
    if (cnt > cap)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): %s has %lld values (at most %lld)",
                         KCU_NODE(a), a->op->name, what, (long long)cnt, (long long)cap);
    if (cnt <= 0) return KILN_OK;
    int64_t buf[2 * KCU_COPY_MAX_RANK];
    size_t nb = (size_t)cnt * kiln_dtype_size(t->dtype);
    if (nb > sizeof buf)
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s': %s too large", KCU_NODE(a), what);
    const void *p = NULL;
    KILN_TRY(host_view(a, t, nb, buf, &p));
    for (int64_t i = 0; i < cnt; i++) out[i] = kiln__load_i64(t->dtype, p, i);
    *n = cnt;
    return KILN_OK;
}

kiln_status kiln__cuda_read_scalar(const kiln_kernel_args *a, const kiln_tensor *t, double *f,
                                   int64_t *i) {
    int64_t buf[2];
    const void *p = NULL;
    size_t es = kiln_dtype_size(t->dtype);
    if (!es || es > sizeof buf)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': scalar of dtype %s", KCU_NODE(a),
                         kiln_dtype_name(t->dtype));
    KILN_TRY(host_view(a, t, es, buf, &p));
    *f = kiln__load_f64(t->dtype, p, 0);
    *i = kiln__load_i64(t->dtype, p, 0);
    return KILN_OK;
}

/* ---- node state ------------------------------------------------------------------------ */

static void cuda_node_free(void *p) {
    kiln_cuda_node *ns = p;
    if (!ns) return;
    kiln__plan_cache_clear(&ns->gemm, &kiln__cuda_gemm_plans);
    if (ns->conv && ns->conv_free) ns->conv_free(ns->conv);
    kiln__free(ns);
}

kiln_cuda_node *kiln__cuda_node(const kiln_kernel_args *a) {
    kiln_node_state *s = a->node_state;
    if (!s) return NULL;
    if (s->p) return s->free == cuda_node_free ? s->p : NULL;
    kiln_cuda_node *ns = kiln__calloc(1, sizeof *ns);
    if (!ns) return NULL;
    s->p = ns;
    s->free = cuda_node_free;
    return ns;
}

int32_t kiln__cuda_tactic(const kiln_kernel_args *a) {
    if (!a->op || !(a->op->flags & KILN_OP_FLAG_TACTICS) || !a->attrs) return 0;
    kiln_tactic t;
    memcpy(&t, a->attrs, sizeof t);
    return t.id;
}

/* ---- scratch --------------------------------------------------------------------------- */

kiln_status kiln__cuda_scratch(kiln_cuda_state *st, size_t n, void **out, const char *node) {
    if (n <= st->scratch_cap) {
        *out = st->scratch;
        return KILN_OK;
    }
    size_t cap = st->scratch_cap * 2 > n ? st->scratch_cap * 2 : n;
    cap = (cap + 255) & ~(size_t)255;
    if (st->capturing)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s': scratch must grow (%zu bytes) during a CUDA Graph capture", node,
                         n);
    if (st->scratch) {
        /* the stream may still use the old buffer */
        KILN_CUDA_TRY(cudaStreamSynchronize(st->stream), node);
        KILN_CUDA_TRY(cudaFree(st->scratch), node);
        st->scratch = NULL;
        st->scratch_cap = 0;
    }
    cudaError_t e = cudaMalloc(&st->scratch, cap);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        st->scratch = NULL;
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY,
                         "node '%s': out of device memory for %zu bytes of scratch: %s", node, cap,
                         cudaGetErrorString(e));
    }
    st->scratch_cap = cap;
    st->scratch_gen++;
    /* a tuning state: new scratch reads as NaN too (backend.h, poison_scratch) */
    if (st->strict_tactics) (void)cudaMemsetAsync(st->scratch, 0xff, cap, st->stream);
    *out = st->scratch;
    return KILN_OK;
}

#else
typedef int kiln_cuda_util_disabled;
#endif
