/* dnnl_conv.c -- kiln.FusedConv tactics backed by oneDNN (KILN_HAVE_DNNL).
 *
 * One oneDNN convolution primitive per (context, node), created at the
 * first run and kept in the node's kiln_node_state together with the
 * weights reordered into the layout the primitive wants; a new input shape
 * recreates the primitive. Bias is a direct argument; the residual is a
 * `sum` post-op (the output is pre-filled with it) and the activation an
 * `eltwise` post-op, so the layer is one pass over the output.
 *
 *   tactic 1 (dnnl):          src and dst stay NCHW (plain);
 *   tactic 2 (dnnl-blocked):  oneDNN picks the layouts (e.g. nChw16c);
 *                             input/residual/output are reordered around
 *                             the convolution through scratch buffers.
 *   layout flags:             an input or output passed NHWC (in bf16
 *                             between bf16 layers)
 *                             between two oneDNN layers is used as is
 *                             (kiln__fc_choose_layouts sets them);
 *   precision bf16:           src and weights in bf16 (the input is
 *                             converted per run), fp32 accumulation, bias
 *                             and output.
 *
 * Threads: oneDNN uses its own OpenMP threads; the count is set to the
 * context's thread count before each primitive is created and run (the
 * kiln pool's workers sleep meanwhile), so there is no oversubscription.
 * Implementations oneDNN marks as reference code ("ref:") are refused:
 * kiln's own kernels are faster than those. */
#include "ops/fused_conv.h"

#if KILN_HAVE_DNNL

#include <dlfcn.h>
#include <dnnl.h>
#include <stdio.h>

#define NODE(a) ((a)->node_name ? (a)->node_name : "?")

/* OpenMP's thread count for oneDNN's parallel regions in this thread,
 * looked up in the process (oneDNN's OpenMP runtime is loaded with it);
 * NULL when oneDNN uses another threading runtime. */
typedef void (*omp_set_fn)(int);
static omp_set_fn omp_setter(void) {
    return (omp_set_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "omp_set_num_threads");
}

bool kiln__dnnl_conv_usable(const kiln_fused_conv_attrs *at, int rank, int tactic) {
    if (rank < 3 || rank > 5) return false;
    if (tactic != KILN_FC_TACTIC_DNNL_PLAIN && tactic != KILN_FC_TACTIC_DNNL_BLOCKED) return false;
    if (at->precision == KILN_PRECISION_BF16 && !kiln__cpu_has_bf16()) return false;
    return true;
}

typedef struct dconv {
    int tactic, nthreads;
    omp_set_fn set_threads;
    int rank;
    int64_t xdims[KILN_MAX_RANK];
    const void *w_from;          /* the weights reordered into w_buf */
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    dnnl_primitive_t conv;
    dnnl_primitive_t r_src, r_dst, r_res; /* NULL: no reorder needed */
    dnnl_memory_desc_t usrc_md, udst_md, src_md, dst_md, w_md, b_md;
    dnnl_memory_t m_usrc, m_udst, m_src, m_w, m_b, m_dst, m_res;
    void *w_buf;
    void *own_src, *own_dst;     /* scratch when the workspace is too small */
    size_t src_bytes, dst_bytes;
    size_t y_elem;               /* bytes per output element as passed (2: bf16) */
    char impl[64];
} dconv;

static void dconv_free(void *p) {
    dconv *s = p;
    if (!s) return;
    dnnl_primitive_t prims[] = {s->conv, s->r_src, s->r_dst, s->r_res};
    for (size_t i = 0; i < sizeof prims / sizeof *prims; i++)
        if (prims[i]) dnnl_primitive_destroy(prims[i]);
    dnnl_memory_t mems[] = {s->m_usrc, s->m_udst, s->m_src, s->m_w, s->m_b, s->m_dst, s->m_res};
    for (size_t i = 0; i < sizeof mems / sizeof *mems; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
    if (s->strm) dnnl_stream_destroy(s->strm);
    if (s->eng) dnnl_engine_destroy(s->eng);
    kiln__aligned_free(s->w_buf);
    kiln__aligned_free(s->own_src);
    kiln__aligned_free(s->own_dst);
    kiln__free(s);
}

static const dnnl_format_tag_t plain_tag[6] = {0, 0, 0, dnnl_ncw, dnnl_nchw, dnnl_ncdhw};
static const dnnl_format_tag_t w_tag[6] = {0, 0, 0, dnnl_oiw, dnnl_oihw, dnnl_oidhw};
static const dnnl_format_tag_t gw_tag[6] = {0, 0, 0, dnnl_goiw, dnnl_goihw, dnnl_goidhw};

#define DN(call, what)                                                                   \
    do {                                                                                 \
        dnnl_status_t ds_ = (call);                                                      \
        if (ds_ != dnnl_success) {                                                       \
            st = KILN_FAIL(ds_ == dnnl_unimplemented ? KILN_ERR_UNSUPPORTED : KILN_ERR_INTERNAL, \
                           "node '%s' (FusedConv): oneDNN %s failed (status %d)", NODE(a),  \
                           what, (int)ds_);                                              \
            goto fail;                                                                   \
        }                                                                                \
    } while (0)

static kiln_status make_reorder(const kiln_kernel_args *a, dnnl_engine_t eng,
                                const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                dnnl_primitive_t *out) {
    kiln_status st = KILN_OK;
    dnnl_primitive_desc_t pd = NULL;
    DN(dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, NULL), "reorder setup");
    DN(dnnl_primitive_create(out, pd), "reorder creation");
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    return st;
}

static kiln_status run_reorder(const kiln_kernel_args *a, dconv *s, dnnl_primitive_t r,
                               dnnl_memory_t from, dnnl_memory_t to) {
    kiln_status st = KILN_OK;
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    DN(dnnl_primitive_execute(r, s->strm, 2, args), "reorder");
fail:
    return st;
}

static dnnl_alg_kind_t act_alg(int act, float *alpha) {
    switch (act) {
    case KILN_FC_ACT_RELU: *alpha = 0.0f; return dnnl_eltwise_relu;
    case KILN_FC_ACT_LEAKY_RELU: return dnnl_eltwise_relu; /* alpha: negative slope */
    case KILN_FC_ACT_CLIP: return dnnl_eltwise_clip;      /* alpha, beta: bounds */
    case KILN_FC_ACT_SIGMOID: return dnnl_eltwise_logistic;
    case KILN_FC_ACT_SILU: *alpha = 1.0f; return dnnl_eltwise_swish;
    case KILN_FC_ACT_HARD_SWISH: return dnnl_eltwise_hardswish;
    default: return dnnl_alg_kind_undef;
    }
}

/* Creates the primitive for the shapes in `a`. */
static kiln_status dconv_create(const kiln_kernel_args *a, int tactic, int nthreads, dconv *s,
                                bool probe) {
    const kiln_fused_conv_attrs *at = a->attrs;
    const kiln_tensor *X = a->in[0], *W = a->in[1];
    const kiln_tensor *B = a->n_in > 2 ? a->in[2] : NULL;
    kiln_status st = KILN_OK;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_attr_t pattr = NULL;
    dnnl_post_ops_t ops = NULL;
    kiln_conv_geom g;
    KILN_TRY(kiln__conv_geom(NODE(a), "FusedConv", &at->conv, X->rank, X->dims, W->rank, W->dims, &g));
    int r = X->rank;
    s->tactic = tactic;
    s->nthreads = nthreads;
    s->rank = r;
    memcpy(s->xdims, X->dims, sizeof s->xdims);
    DN(dnnl_engine_create(&s->eng, dnnl_cpu, 0), "engine creation");
    DN(dnnl_stream_create(&s->strm, s->eng, dnnl_stream_default_flags), "stream creation");

    bool bf16 = at->precision == KILN_PRECISION_BF16;
    dnnl_data_type_t cdt = bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_dims_t xd, yd, wd, bd, strides, dil, pl, pr;
    for (int i = 0; i < r; i++) xd[i] = X->dims[i];
    yd[0] = g.N;
    yd[1] = g.M;
    for (int i = 0; i < g.ns; i++) {
        yd[2 + i] = g.out[i];
        strides[i] = g.s[i];
        dil[i] = g.d[i] - 1;
        pl[i] = g.pb[i];
        pr[i] = g.pe[i];
    }
    int wr = r;
    if (g.G > 1) {
        wd[0] = g.G;
        wd[1] = g.Mg;
        wd[2] = g.Cg;
        for (int i = 0; i < g.ns; i++) wd[3 + i] = g.k[i];
        wr = r + 1;
    } else {
        wd[0] = g.M;
        wd[1] = g.Cg;
        for (int i = 0; i < g.ns; i++) wd[2 + i] = g.k[i];
    }
    bd[0] = g.M;
    dnnl_format_tag_t any = dnnl_format_tag_any;
    dnnl_format_tag_t act_tag = tactic == KILN_FC_TACTIC_DNNL_PLAIN ? plain_tag[r] : any;
    /* tensors passed NHWC between oneDNN layers (fused_conv.h) */
    bool xb = (at->layout & KILN_FC_LAYOUT_X_NHWC) && r == 4;
    bool yb = (at->layout & KILN_FC_LAYOUT_Y_NHWC) && r == 4;
    dnnl_format_tag_t xtag = xb ? dnnl_nhwc : plain_tag[r], ytag = yb ? dnnl_nhwc : plain_tag[r];
    dnnl_memory_desc_t csrc, cw, cdst, uw;
    /* bf16 between bf16 layers (NHWC tensors only) */
    dnnl_data_type_t xdt = xb && (at->layout & KILN_FC_LAYOUT_X_BF16) ? dnnl_bf16 : dnnl_f32;
    dnnl_data_type_t ydt = yb && (at->layout & KILN_FC_LAYOUT_Y_BF16) ? dnnl_bf16 : dnnl_f32;
    s->y_elem = ydt == dnnl_bf16 ? 2 : 4;
    DN(dnnl_memory_desc_init_by_tag(&s->usrc_md, r, xd, xdt, xtag), "src desc");
    DN(dnnl_memory_desc_init_by_tag(&s->udst_md, r, yd, ydt, ytag), "dst desc");
    DN(dnnl_memory_desc_init_by_tag(&csrc, r, xd, cdt, xb ? xtag : act_tag), "src desc");
    DN(dnnl_memory_desc_init_by_tag(&cdst, r, yd, ydt, yb ? ytag : act_tag), "dst desc");
    DN(dnnl_memory_desc_init_by_tag(&cw, wr, wd, cdt, any), "weights desc");
    DN(dnnl_memory_desc_init_by_tag(&uw, wr, wd, dnnl_f32, g.G > 1 ? gw_tag[r] : w_tag[r]), "weights desc");
    DN(dnnl_memory_desc_init_by_tag(&s->b_md, 1, bd, dnnl_f32, dnnl_x), "bias desc");
    dnnl_convolution_desc_t cd;
    DN(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct,
                                                  &csrc, &cw, B ? &s->b_md : NULL, &cdst, strides,
                                                  dil, pl, pr),
       "convolution desc");
    DN(dnnl_primitive_attr_create(&pattr), "attr");
    DN(dnnl_post_ops_create(&ops), "post-ops");
    if (at->has_residual) DN(dnnl_post_ops_append_sum(ops, 1.0f), "sum post-op");
    float alpha = at->alpha, beta = at->beta;
    dnnl_alg_kind_t alg = act_alg(at->act, &alpha);
    if (alg != dnnl_alg_kind_undef) DN(dnnl_post_ops_append_eltwise(ops, 1.0f, alg, alpha, beta), "eltwise post-op");
    DN(dnnl_primitive_attr_set_post_ops(pattr, ops), "post-ops");
    s->set_threads = omp_setter();
    if (s->set_threads) s->set_threads(nthreads);
    DN(dnnl_primitive_desc_create(&pd, &cd, pattr, s->eng, NULL), "convolution setup");
    const char *impl = NULL;
    DN(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl), "query");
    snprintf(s->impl, sizeof s->impl, "%s", impl ? impl : "?");
    /* NHWC in or out (at->layout): the layer must run, slow or not (the
     * builder checked it is not slow at the opt shapes) */
    if (!strncmp(s->impl, "ref", 3) && (!at->layout || probe)) {
        st = KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (FusedConv): oneDNN has only its reference "
                                             "implementation for this layer", NODE(a));
        goto fail;
    }
    if (probe) goto fail; /* st == KILN_OK: a real kernel takes it */
    s->src_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    s->dst_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    s->w_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    DN(dnnl_primitive_create(&s->conv, pd), "convolution creation");

    /* weights, reordered once */
    size_t wb = dnnl_memory_desc_get_size(&s->w_md);
    s->w_buf = kiln__aligned_alloc(wb ? wb : 1);
    if (!s->w_buf) {
        st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (FusedConv): out of memory for weights", NODE(a));
        goto fail;
    }
    DN(dnnl_memory_create(&s->m_w, &s->w_md, s->eng, s->w_buf), "weights memory");
    {
        dnnl_memory_t uwm = NULL;
        dnnl_primitive_t wr_ = NULL;
        DN(dnnl_memory_create(&uwm, &uw, s->eng, W->data), "weights memory");
        st = make_reorder(a, s->eng, &uw, &s->w_md, &wr_);
        if (st == KILN_OK) st = run_reorder(a, s, wr_, uwm, s->m_w);
        if (wr_) dnnl_primitive_destroy(wr_);
        dnnl_memory_destroy(uwm);
        if (st != KILN_OK) goto fail;
        DN(dnnl_stream_wait(s->strm), "weights reorder");
    }
    s->w_from = W->data;
    DN(dnnl_memory_create(&s->m_b, &s->b_md, s->eng, DNNL_MEMORY_NONE), "bias memory");
    DN(dnnl_memory_create(&s->m_usrc, &s->usrc_md, s->eng, DNNL_MEMORY_NONE), "src memory");
    DN(dnnl_memory_create(&s->m_udst, &s->udst_md, s->eng, DNNL_MEMORY_NONE), "dst memory");
    DN(dnnl_memory_create(&s->m_src, &s->src_md, s->eng, DNNL_MEMORY_NONE), "src memory");
    DN(dnnl_memory_create(&s->m_dst, &s->dst_md, s->eng, DNNL_MEMORY_NONE), "dst memory");
    if (!dnnl_memory_desc_equal(&s->src_md, &s->usrc_md)) {
        s->src_bytes = dnnl_memory_desc_get_size(&s->src_md);
        if ((st = make_reorder(a, s->eng, &s->usrc_md, &s->src_md, &s->r_src)) != KILN_OK) goto fail;
    }
    if (!dnnl_memory_desc_equal(&s->dst_md, &s->udst_md)) {
        s->dst_bytes = dnnl_memory_desc_get_size(&s->dst_md);
        if ((st = make_reorder(a, s->eng, &s->dst_md, &s->udst_md, &s->r_dst)) != KILN_OK) goto fail;
        if (at->has_residual) {
            if ((st = make_reorder(a, s->eng, &s->udst_md, &s->dst_md, &s->r_res)) != KILN_OK) goto fail;
            DN(dnnl_memory_create(&s->m_res, &s->udst_md, s->eng, DNNL_MEMORY_NONE), "residual memory");
        }
    }
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (pattr) dnnl_primitive_attr_destroy(pattr);
    if (ops) dnnl_post_ops_destroy(ops);
    return st;
}

static bool dconv_matches(const dconv *s, const kiln_kernel_args *a, int tactic, int nthreads) {
    const kiln_tensor *X = a->in[0];
    if (s->tactic != tactic || s->nthreads != nthreads || s->rank != X->rank) return false;
    if (s->w_from != a->in[1]->data) return false;
    for (int i = 0; i < X->rank; i++)
        if (s->xdims[i] != X->dims[i]) return false;
    return true;
}

/* Scratch for the reordered src/dst: the kernel's workspace when it is
 * large enough, else buffers owned by the state. */
static kiln_status scratch(const kiln_kernel_args *a, dconv *s, void **src, void **dst) {
    size_t sa = (s->src_bytes + 63) & ~(size_t)63, da = (s->dst_bytes + 63) & ~(size_t)63;
    if (a->workspace && a->workspace_size >= sa + da) {
        *src = a->workspace;
        *dst = (char *)a->workspace + sa;
        return KILN_OK;
    }
    if (s->src_bytes && !s->own_src) s->own_src = kiln__aligned_alloc(s->src_bytes);
    if (s->dst_bytes && !s->own_dst) s->own_dst = kiln__aligned_alloc(s->dst_bytes);
    if ((s->src_bytes && !s->own_src) || (s->dst_bytes && !s->own_dst))
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (FusedConv): out of memory for scratch",
                         NODE(a));
    *src = s->own_src;
    *dst = s->own_dst;
    return KILN_OK;
}

static kiln_status dconv_exec(const kiln_kernel_args *a, dconv *s) {
    const kiln_fused_conv_attrs *at = a->attrs;
    const kiln_tensor *X = a->in[0], *Y = a->out[0];
    const kiln_tensor *B = a->n_in > 2 ? a->in[2] : NULL;
    const kiln_tensor *R = at->has_residual ? a->in[3] : NULL;
    kiln_status st = KILN_OK;
    void *sbuf = NULL, *dbuf = NULL;
    KILN_TRY(scratch(a, s, &sbuf, &dbuf));
    DN(dnnl_memory_set_data_handle(s->m_usrc, X->data), "src handle");
    DN(dnnl_memory_set_data_handle(s->m_udst, Y->data), "dst handle");
    DN(dnnl_memory_set_data_handle(s->m_src, s->r_src ? sbuf : X->data), "src handle");
    DN(dnnl_memory_set_data_handle(s->m_dst, s->r_dst ? dbuf : Y->data), "dst handle");
    if (B) DN(dnnl_memory_set_data_handle(s->m_b, B->data), "bias handle");
    if (s->r_src) KILN_TRY(run_reorder(a, s, s->r_src, s->m_usrc, s->m_src));
    if (R) {
        if (s->r_res) {
            DN(dnnl_memory_set_data_handle(s->m_res, R->data), "residual handle");
            KILN_TRY(run_reorder(a, s, s->r_res, s->m_res, s->m_dst));
        } else {
            memcpy(Y->data, R->data, (size_t)kiln__tensor_numel(Y) * s->y_elem);
        }
    }
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, s->m_src},
                               {DNNL_ARG_WEIGHTS, s->m_w},
                               {DNNL_ARG_DST, s->m_dst},
                               {DNNL_ARG_BIAS, s->m_b}};
    DN(dnnl_primitive_execute(s->conv, s->strm, B ? 4 : 3, args), "convolution");
    if (s->r_dst) KILN_TRY(run_reorder(a, s, s->r_dst, s->m_dst, s->m_udst));
    DN(dnnl_stream_wait(s->strm), "convolution");
fail:
    return st;
}

kiln_status kiln__dnnl_conv_run(const kiln_kernel_args *a, int tactic) {
    int nthreads = kiln__pool_threads(a->pool);
    dconv *s = a->node_state ? a->node_state->p : NULL;
    if (s && !dconv_matches(s, a, tactic, nthreads)) {
        dconv_free(s);
        a->node_state->p = NULL;
        s = NULL;
    }
    bool keep = a->node_state != NULL;
    if (!s) {
        s = kiln__calloc(1, sizeof *s);
        if (!s) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (FusedConv): out of memory", NODE(a));
        kiln_status st = dconv_create(a, tactic, nthreads, s, false);
        if (st != KILN_OK) {
            dconv_free(s);
            return st;
        }
        if (keep) {
            a->node_state->p = s;
            a->node_state->free = dconv_free;
        }
    }
    if (s->set_threads) s->set_threads(nthreads);
    kiln_status st = dconv_exec(a, s);
    if (!keep) dconv_free(s);
    return st;
}

kiln_status kiln__dnnl_conv_probe(const kiln_kernel_args *a, int tactic) {
    dconv *s = kiln__calloc(1, sizeof *s);
    if (!s) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (FusedConv): out of memory", NODE(a));
    kiln_status st = dconv_create(a, tactic, kiln__pool_threads(a->pool), s, true);
    dconv_free(s);
    return st;
}

size_t kiln__dnnl_conv_workspace(const kiln_infer_args *a, int tactic) {
    const kiln_fused_conv_attrs *at = a->attrs;
    const kiln_tinfo *X = a->in[0], *W = a->in[1];
    if (tactic != KILN_FC_TACTIC_DNNL_BLOCKED && at->precision != KILN_PRECISION_BF16) return 0;
    if (X->rank < 3 || W->rank != X->rank) return 0;
    kiln_conv_geom g;
    if (kiln__conv_geom(NODE(a), "FusedConv", &at->conv, X->rank, X->dims, W->rank, W->dims, &g) != KILN_OK) {
        kiln__clear_error();
        return 0;
    }
    if (g.N < 0 || g.C < 0 || g.M < 0 || g.in_sz < 0 || g.out_sz < 0) return 0;
    /* Bounds of the blocked layouts: channels padded to 16. */
    size_t src = (size_t)(g.N * ((g.C + 15) / 16 * 16) * g.in_sz) * sizeof(float);
    size_t dst = tactic == KILN_FC_TACTIC_DNNL_BLOCKED
                     ? (size_t)(g.N * ((g.M + 15) / 16 * 16) * g.out_sz) * sizeof(float)
                     : 0;
    return ((src + 63) & ~(size_t)63) + ((dst + 63) & ~(size_t)63);
}

#else
typedef int kiln_dnnl_conv_absent; /* oneDNN not built in: nothing here */
#endif /* KILN_HAVE_DNNL */
