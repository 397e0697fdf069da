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
 * Threads: every oneDNN call runs on the kiln pool thread that makes it
 * alone (OpenMP's per-thread count set to 1 there: no OpenMP team exists,
 * so none spins between layers). The layer is split across the pool
 * instead: with several images each thread runs its share of the batch,
 * with one image each thread runs a band of output rows (first spatial
 * dimension; its input rows and top/bottom padding computed from it), or,
 * where the weights outweigh the input and output (CHANS_RATIO; NHWC
 * float32 layers at batch 1: ResNet-50's 7x7 stage), a share of the output
 * channels, so each thread streams only its share of the weights (the
 * part writes a dense scratch that is copied into the NHWC output, with
 * the residual copied in first: oneDNN has only reference code for a
 * strided destination). Each
 * part has its own primitive (created for one thread), stream and
 * scratchpad; parts laid out alike share the reordered weights. A part's
 * tensors are dense sub-tensors, except bands of NCHW tensors (strided
 * views, reordered through scratch).
 * Implementations oneDNN marks as reference code ("ref:") are refused:
 * kiln's own kernels are faster than those. */
#include "backends/cpu/kernels/fused_conv_cpu.h"
#include "backends/cpu/cpu_features.h"

#if KILN_HAVE_DNNL

#include <dlfcn.h>
#include <dnnl.h>
#include <stdatomic.h>
#include <stdio.h>

#define MAX_PARTS 64 /* pool threads used by one layer */
/* A layer at batch 1 is split by output channels where its weights are at
 * least this many times its input and output together. ResNet-50 at 2
 * threads (`kiln bench --idle-ms 60 --flush-mb 64 --profile`): layer4's
 * layers 15-25% faster than in bands of rows (its 3x3 ones 1.08-1.13 ->
 * 0.95 ms); layer3's 1x1 layers (weights about equal to the activations)
 * were 5% slower, the copies to and from the scratch costing more than the
 * halved weight stream saved. */
#define CHANS_RATIO 2.0

#define NODE(a) ((a)->node_name ? (a)->node_name : "?")

/* OpenMP's thread count for oneDNN's parallel regions in this thread,
 * looked up in the process (oneDNN's OpenMP runtime is loaded with it);
 * NULL when oneDNN uses another threading runtime. */
typedef void (*omp_set_fn)(int);
typedef int (*omp_get_fn)(void);
static omp_set_fn omp_setter(void) {
    return (omp_set_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "omp_set_num_threads");
}
static omp_get_fn omp_getter(void) {
    return (omp_get_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "omp_get_max_threads");
}

bool kiln__dnnl_conv_usable(const kiln_fused_conv_attrs *at, int rank, int tactic) {
    if (rank < 3 || rank > 5) return false;
    if (tactic != KILN_FC_TACTIC_DNNL_PLAIN && tactic != KILN_FC_TACTIC_DNNL_BLOCKED) return false;
    if (at->precision == KILN_PRECISION_BF16 && !kiln__cpu_has_bf16()) return false;
    return true;
}

/* One piece of a layer's work, run by one kiln pool thread: a sub-batch
 * (batch > 1) or a band of output rows (first spatial dimension, batch 1). */
typedef struct dpart {
    size_t x_off, y_off;         /* bytes into X and into Y */
    int64_t m0, mn;              /* channel split: output channels [m0, m0 + mn) (mn 0: other splits) */
    int64_t pixels;              /* channel split: output pixels */
    bool chan_copy;              /* channel split of NHWC tensors: the part's channels go
                                    through a dense scratch (nChw16c: they are dense) */
    size_t r_off;                /* bytes into the residual (y_off unless its layout differs) */
    size_t y_bytes;              /* this part's output when it is dense */
    dnnl_stream_t strm;
    dnnl_primitive_t conv;
    dnnl_primitive_t r_src, r_dst, r_res; /* NULL: no reorder needed */
    dnnl_memory_desc_t usrc_md, udst_md, src_md, dst_md, w_md;
    dnnl_memory_t m_usrc, m_udst, m_src, m_w, m_b, m_dst, m_res, m_scr;
    void *w_buf;                 /* owned when w_own, else part 0's */
    bool w_own;
    void *scr;                   /* oneDNN's scratchpad for this part */
    void *own_src, *own_dst;     /* reorder scratch when the workspace is too small */
    size_t src_bytes, dst_bytes, ws_off;
    int64_t dst_elems;           /* the convolution's output (dst_md, dense), for own_act */
} dpart;

typedef struct dconv {
    int tactic, nthreads;
    int split; /* KILN_DNNL_SPLIT_* */
    omp_set_fn set_threads;
    omp_get_fn get_threads;
    int rank, n_parts;
    int64_t xdims[KILN_MAX_RANK];
    const void *w_from;          /* the weights reordered into the parts' w_buf */
    dnnl_engine_t eng;
    dpart *parts;
    size_t ws_need;              /* the parts' reorder scratch laid end to end */
    size_t y_elem;               /* bytes per output element as passed (2: bf16) */
    bool own_act;                /* own_act(act): kiln applies it */
    bool y_bf16;                 /* the convolution's output is bfloat16 */
    int act;                     /* KILN_FC_ACT_* (with own_act) */
    float alpha, beta;
    char impl[64];
} dconv;

static void dconv_free(void *p) {
    dconv *s = p;
    if (!s) return;
    for (int k = 0; s->parts && k < s->n_parts; k++) {
        dpart *q = &s->parts[k];
        dnnl_primitive_t prims[] = {q->conv, q->r_src, q->r_dst, q->r_res};
        for (size_t i = 0; i < sizeof prims / sizeof *prims; i++)
            if (prims[i]) dnnl_primitive_destroy(prims[i]);
        dnnl_memory_t mems[] = {q->m_usrc, q->m_udst, q->m_src, q->m_w, q->m_b, q->m_dst, q->m_res, q->m_scr};
        for (size_t i = 0; i < sizeof mems / sizeof *mems; i++)
            if (mems[i]) dnnl_memory_destroy(mems[i]);
        if (q->strm) dnnl_stream_destroy(q->strm);
        if (q->w_own) kiln__aligned_free(q->w_buf);
        kiln__aligned_free(q->scr);
        kiln__aligned_free(q->own_src);
        kiln__aligned_free(q->own_dst);
    }
    kiln__free(s->parts);
    if (s->eng) dnnl_engine_destroy(s->eng);
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

static dnnl_status_t reorder(dnnl_stream_t strm, dnnl_primitive_t r, dnnl_memory_t from, dnnl_memory_t to) {
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    return dnnl_primitive_execute(r, strm, 2, args);
}

KILN_FC_ACT_ALL_HANDLED("dnnl_conv.c append_act, own_act");

/* Activations kiln applies itself, after the convolution, to each part's
 * output (float32 or bfloat16) while it is in cache: oneDNN 2.6's post-ops turn NaN into
 * 0 or a bound (relu with alpha 0 and clip as max/min with the bound
 * second, clip_v2 alike, logistic in the plain tactic), and its relu gives
 * NaN for -inf (0 * -inf); ONNX and PyTorch keep NaN and give 0
 * (test_fusion_conv's special_values_every_tactic). */
static bool own_act(int act) {
    return act == KILN_FC_ACT_RELU || act == KILN_FC_ACT_CLIP || act == KILN_FC_ACT_HARD_SIGMOID ||
           act == KILN_FC_ACT_SIGMOID;
}

/* The layer's activation as eltwise post-ops (none for KILN_FC_ACT_NONE).
 * HardSigmoid, which this oneDNN (2.6) has no eltwise kind for, is linear
 * (alpha x + beta) then clip to [0, 1]. An unknown act: invalid arguments. */
static dnnl_status_t append_act(dnnl_post_ops_t ops, int act, float alpha, float beta) {
    switch (act) {
    case KILN_FC_ACT_NONE: return dnnl_success;
    case KILN_FC_ACT_RELU: return dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
    case KILN_FC_ACT_LEAKY_RELU: /* alpha: negative slope */
        return dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_relu, alpha, 0.0f);
    case KILN_FC_ACT_CLIP: /* alpha, beta: bounds */
        return dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_clip, alpha, beta);
    case KILN_FC_ACT_SIGMOID: return dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_logistic, 0.0f, 0.0f);
    case KILN_FC_ACT_SILU: return dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_swish, 1.0f, 0.0f);
    case KILN_FC_ACT_HARD_SWISH:
        return dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_hardswish, 0.0f, 0.0f);
    case KILN_FC_ACT_HARD_SIGMOID: {
        dnnl_status_t s = dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_linear, alpha, beta);
        return s != dnnl_success ? s : dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_clip, 0.0f, 1.0f);
    }
    default: return dnnl_invalid_arguments;
    }
}

/* Dense strides of `d` (rank r) in NCHW order or, nhwc, channels last; given
 * in oneDNN's logical (n, c, spatial...) order. */
static void dense_strides(int r, const dnnl_dims_t d, bool nhwc, dnnl_dims_t out) {
    int64_t acc = 1;
    if (nhwc) {
        out[1] = 1;
        acc = d[1];
        for (int i = r - 1; i >= 2; i--) out[i] = acc, acc *= d[i];
        out[0] = acc;
    } else {
        for (int i = r - 1; i >= 0; i--) out[i] = acc, acc *= d[i];
    }
}

/* Common geometry of a layer, then each part's. */
typedef struct cgeom {
    int r, ns;
    dnnl_dims_t xd, yd, wd, bd, strides, dil, pl, pr;
    int wr;
    bool xb, yb; /* NHWC */
    bool xc, yc; /* nChw16c (KILN_FC_LAYOUT_X_C16 / Y_C16) */
    bool rb; /* the residual is NHWC float32 while Y is NCHW (KILN_FC_LAYOUT_R_NHWC) */
    dnnl_data_type_t cdt, xdt, ydt;
    dnnl_format_tag_t act_tag;
} cgeom;

/* How a layer is split over the pool's threads. */
typedef enum {
    SPLIT_BATCH = KILN_DNNL_SPLIT_BATCH,
    SPLIT_ROWS = KILN_DNNL_SPLIT_ROWS,
    SPLIT_CHANS = KILN_DNNL_SPLIT_CHANS
} split_kind;

/* Creates part `k` of `parts` (rows: split the first spatial dimension of
 * the output; chans: the output channels; batch: the images). */
static kiln_status part_create(const kiln_kernel_args *a, dconv *s, const cgeom *c, dnnl_primitive_attr_t pattr,
                               int k, int parts, split_kind split, bool probe) {
    const kiln_fused_conv_attrs *at = a->attrs;
    const kiln_tensor *W = a->in[1];
    const kiln_tensor *B = a->n_in > 2 ? a->in[2] : NULL;
    dpart *q = &s->parts[k];
    kiln_status st = KILN_OK;
    dnnl_primitive_desc_t pd = NULL;
    int r = c->r;
    dnnl_dims_t xd, yd, pl, pr, xs, ys, rs;
    memcpy(xd, c->xd, sizeof xd);
    memcpy(yd, c->yd, sizeof yd);
    memcpy(pl, c->pl, sizeof pl);
    memcpy(pr, c->pr, sizeof pr);
    dense_strides(r, c->xd, c->xb, xs);
    dense_strides(r, c->yd, c->yb, ys);
    dense_strides(r, c->yd, c->rb, rs);
    size_t xe = c->xdt == dnnl_bf16 ? 2 : 4, ye = c->ydt == dnnl_bf16 ? 2 : 4;
    bool view = false; /* the user's part is strided, not dense */
    const float *wsrc = W->data;
    dnnl_dims_t wd, bd;
    memcpy(wd, c->wd, sizeof wd);
    memcpy(bd, c->bd, sizeof bd);
    if (split == SPLIT_CHANS) {
        /* multiples of 16 channels (dconv_create checked M allows it) */
        int64_t M = c->yd[1], blocks = M / 16;
        q->m0 = blocks * k / parts * 16;
        q->mn = blocks * (k + 1) / parts * 16 - q->m0;
        q->pixels = c->yd[2] * c->yd[3];
        yd[1] = wd[0] = bd[0] = q->mn;
        wsrc += q->m0 * c->wd[1] * c->wd[2] * c->wd[3];
        q->x_off = q->y_off = q->r_off = 0;
        q->chan_copy = !c->yc;
        if (c->yc) /* nChw16c, one image: blocks [m0 / 16, (m0 + mn) / 16) are one dense run */
            q->y_off = q->r_off = (size_t)(q->m0 * q->pixels) * sizeof(float);
        else
            q->dst_bytes = (size_t)(q->mn * q->pixels) * sizeof(float); /* the dense scratch */
    } else if (split == SPLIT_ROWS) {
        int64_t H = c->xd[2], O = c->yd[2];
        int64_t o0 = O * k / parts, o1 = O * (k + 1) / parts;
        int64_t ext = (c->wd[c->wr - c->ns] - 1) * (c->dil[0] + 1) + 1;
        int64_t i0 = o0 * c->strides[0] - c->pl[0], i1 = (o1 - 1) * c->strides[0] - c->pl[0] + ext;
        pl[0] = i0 < 0 ? -i0 : 0;
        pr[0] = i1 > H ? i1 - H : 0;
        if (i0 < 0) i0 = 0;
        if (i1 > H) i1 = H;
        xd[2] = i1 - i0;
        yd[2] = o1 - o0;
        q->x_off = (size_t)(i0 * xs[2]) * xe;
        q->y_off = (size_t)(o0 * ys[2]) * ye;
        q->r_off = c->rb ? (size_t)(o0 * rs[2]) * sizeof(float) : q->y_off;
        view = !c->xb || !c->yb;
    } else {
        int64_t n0 = c->xd[0] * k / parts, n1 = c->xd[0] * (k + 1) / parts;
        xd[0] = yd[0] = n1 - n0;
        q->x_off = (size_t)(n0 * xs[0]) * xe;
        q->y_off = (size_t)(n0 * ys[0]) * ye;
        q->r_off = c->rb ? (size_t)(n0 * rs[0]) * sizeof(float) : q->y_off;
    }
    int64_t ny = 1;
    for (int i = 0; i < r; i++) ny *= yd[i];
    q->y_bytes = (size_t)ny * ye;
    dnnl_format_tag_t xtag = c->xb ? dnnl_nhwc : c->xc ? dnnl_nChw16c : plain_tag[r],
                      ytag = c->yb ? dnnl_nhwc : c->yc ? dnnl_nChw16c : plain_tag[r];
    if (view) {
        DN(dnnl_memory_desc_init_by_strides(&q->usrc_md, r, xd, c->xdt, xs), "src desc");
        DN(dnnl_memory_desc_init_by_strides(&q->udst_md, r, yd, c->ydt, ys), "dst desc");
    } else {
        DN(dnnl_memory_desc_init_by_tag(&q->usrc_md, r, xd, c->xdt, xtag), "src desc");
        DN(dnnl_memory_desc_init_by_tag(&q->udst_md, r, yd, c->ydt, ytag), "dst desc");
    }
    dnnl_memory_desc_t csrc, cw, cdst, uw, bmd;
    DN(dnnl_memory_desc_init_by_tag(&csrc, r, xd, c->cdt, c->xb || c->xc ? xtag : c->act_tag), "src desc");
    DN(dnnl_memory_desc_init_by_tag(&cdst, r, yd, c->ydt, c->yb || c->yc ? ytag : c->act_tag), "dst desc");
    DN(dnnl_memory_desc_init_by_tag(&cw, c->wr, wd, c->cdt, dnnl_format_tag_any), "weights desc");
    DN(dnnl_memory_desc_init_by_tag(&uw, c->wr, wd, dnnl_f32, c->wr > r ? gw_tag[r] : w_tag[r]),
       "weights desc");
    DN(dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_x), "bias desc");
    dnnl_convolution_desc_t cd;
    dnnl_dims_t strides, dil;
    memcpy(strides, c->strides, sizeof strides);
    memcpy(dil, c->dil, sizeof dil);
    DN(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct,
                                                  &csrc, &cw, B ? &bmd : NULL, &cdst, strides, dil, pl, pr),
       "convolution desc");
    DN(dnnl_primitive_desc_create(&pd, &cd, pattr, s->eng, NULL), "convolution setup");
    const char *impl = NULL;
    DN(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl), "query");
    if (k == 0) snprintf(s->impl, sizeof s->impl, "%s", impl ? impl : "?");
    /* NHWC in or out (at->layout): the layer must run, slow or not (the
     * builder checked it is not slow at the opt shapes) */
    if (impl && !strncmp(impl, "ref", 3) && (!at->layout || probe)) {
        st = KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (FusedConv): oneDNN has only its reference "
                                             "implementation for this layer", NODE(a));
        goto fail;
    }
    if (probe) goto fail; /* st == KILN_OK: a real kernel takes it */
    q->src_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    q->dst_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    q->dst_elems = (int64_t)(dnnl_memory_desc_get_size(&q->dst_md) / (c->ydt == dnnl_bf16 ? 2 : 4));
    q->w_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t sb = smd ? dnnl_memory_desc_get_size(smd) : 0;
    DN(dnnl_primitive_create(&q->conv, pd), "convolution creation");
    DN(dnnl_stream_create(&q->strm, s->eng, dnnl_stream_default_flags), "stream creation");
    q->scr = kiln__aligned_alloc(sb ? sb : 1);
    if (!q->scr) {
        st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (FusedConv): out of memory for scratchpad", NODE(a));
        goto fail;
    }
    if (sb) DN(dnnl_memory_create(&q->m_scr, smd, s->eng, q->scr), "scratchpad memory");

    /* weights, reordered once (shared with part 0 when laid out alike;
     * each part has its own channels' in a channel split) */
    if (k > 0 && split != SPLIT_CHANS && dnnl_memory_desc_equal(&q->w_md, &s->parts[0].w_md)) {
        q->w_buf = s->parts[0].w_buf;
    } else {
        size_t wb = dnnl_memory_desc_get_size(&q->w_md);
        q->w_buf = kiln__aligned_alloc(wb ? wb : 1);
        q->w_own = q->w_buf != NULL;
        if (!q->w_buf) {
            st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (FusedConv): out of memory for weights", NODE(a));
            goto fail;
        }
        dnnl_memory_t uwm = NULL, wm = NULL;
        dnnl_primitive_t wr_ = NULL;
        DN(dnnl_memory_create(&uwm, &uw, s->eng, (void *)wsrc), "weights memory");
        if (dnnl_memory_create(&wm, &q->w_md, s->eng, q->w_buf) != dnnl_success) wm = NULL;
        st = wm ? make_reorder(a, s->eng, &uw, &q->w_md, &wr_)
                : KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (FusedConv): oneDNN weights memory failed", NODE(a));
        dnnl_status_t ds = st == KILN_OK ? reorder(q->strm, wr_, uwm, wm) : dnnl_success;
        if (ds == dnnl_success && st == KILN_OK) ds = dnnl_stream_wait(q->strm);
        if (wr_) dnnl_primitive_destroy(wr_);
        if (wm) dnnl_memory_destroy(wm);
        dnnl_memory_destroy(uwm);
        if (st != KILN_OK) goto fail;
        DN(ds, "weights reorder");
    }
    DN(dnnl_memory_create(&q->m_w, &q->w_md, s->eng, q->w_buf), "weights memory");
    DN(dnnl_memory_create(&q->m_b, &bmd, s->eng, DNNL_MEMORY_NONE), "bias memory");
    DN(dnnl_memory_create(&q->m_usrc, &q->usrc_md, s->eng, DNNL_MEMORY_NONE), "src memory");
    DN(dnnl_memory_create(&q->m_udst, &q->udst_md, s->eng, DNNL_MEMORY_NONE), "dst memory");
    DN(dnnl_memory_create(&q->m_src, &q->src_md, s->eng, DNNL_MEMORY_NONE), "src memory");
    DN(dnnl_memory_create(&q->m_dst, &q->dst_md, s->eng, DNNL_MEMORY_NONE), "dst memory");
    if (!dnnl_memory_desc_equal(&q->src_md, &q->usrc_md)) {
        q->src_bytes = dnnl_memory_desc_get_size(&q->src_md);
        if ((st = make_reorder(a, s->eng, &q->usrc_md, &q->src_md, &q->r_src)) != KILN_OK) goto fail;
    }
    if (!dnnl_memory_desc_equal(&q->dst_md, &q->udst_md)) {
        q->dst_bytes = dnnl_memory_desc_get_size(&q->dst_md);
        if ((st = make_reorder(a, s->eng, &q->dst_md, &q->udst_md, &q->r_dst)) != KILN_OK) goto fail;
    }
    /* the residual, reordered into the sum's dst where it is laid out
     * otherwise: as the output when that goes through scratch, or NHWC
     * (float32) into an NCHW output */
    if (at->has_residual && (q->r_dst || c->rb)) {
        dnnl_memory_desc_t res_md = q->udst_md;
        if (c->rb) DN(dnnl_memory_desc_init_by_strides(&res_md, r, yd, dnnl_f32, rs), "residual desc");
        if ((st = make_reorder(a, s->eng, &res_md, &q->dst_md, &q->r_res)) != KILN_OK) goto fail;
        DN(dnnl_memory_create(&q->m_res, &res_md, s->eng, DNNL_MEMORY_NONE), "residual memory");
    }
    if (split == SPLIT_CHANS && (q->r_src || q->r_dst || q->r_res)) {
        st = KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (FusedConv): a channel part needs a reorder", NODE(a));
        goto fail;
    }
    q->ws_off = s->ws_need;
    s->ws_need += ((q->src_bytes + 63) & ~(size_t)63) + ((q->dst_bytes + 63) & ~(size_t)63);
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    return st;
}

/* Creates the primitives for the shapes in `a`: one per part, `nthreads`
 * parts at most (1 when probing). */
static kiln_status dconv_create(const kiln_kernel_args *a, int tactic, int nthreads, dconv *s,
                                bool probe) {
    const kiln_fused_conv_attrs *at = a->attrs;
    const kiln_tensor *X = a->in[0], *W = a->in[1];
    kiln_status st = KILN_OK;
    dnnl_primitive_attr_t pattr = NULL;
    dnnl_post_ops_t ops = NULL;
    kiln_conv_geom g;
    KILN_TRY(kiln__conv_geom(NODE(a), "FusedConv", &at->conv, X->rank, X->dims, W->rank, W->dims, &g));
    cgeom c;
    memset(&c, 0, sizeof c);
    int r = c.r = X->rank;
    c.ns = g.ns;
    s->tactic = tactic;
    s->nthreads = nthreads;
    s->rank = r;
    memcpy(s->xdims, X->dims, sizeof s->xdims);
    DN(dnnl_engine_create(&s->eng, dnnl_cpu, 0), "engine creation");

    bool bf16 = at->precision == KILN_PRECISION_BF16;
    c.cdt = bf16 ? dnnl_bf16 : dnnl_f32;
    for (int i = 0; i < r; i++) c.xd[i] = X->dims[i];
    c.yd[0] = g.N;
    c.yd[1] = g.M;
    for (int i = 0; i < g.ns; i++) {
        c.yd[2 + i] = g.out[i];
        c.strides[i] = g.s[i];
        c.dil[i] = g.d[i] - 1;
        c.pl[i] = g.pb[i];
        c.pr[i] = g.pe[i];
    }
    c.wr = r;
    if (g.G > 1) {
        c.wd[0] = g.G;
        c.wd[1] = g.Mg;
        c.wd[2] = g.Cg;
        for (int i = 0; i < g.ns; i++) c.wd[3 + i] = g.k[i];
        c.wr = r + 1;
    } else {
        c.wd[0] = g.M;
        c.wd[1] = g.Cg;
        for (int i = 0; i < g.ns; i++) c.wd[2 + i] = g.k[i];
    }
    c.bd[0] = g.M;
    c.act_tag = tactic == KILN_FC_TACTIC_DNNL_PLAIN ? plain_tag[r] : dnnl_format_tag_any;
    /* tensors passed NHWC between oneDNN layers (fused_conv.h); bf16
     * between bf16 layers (NHWC tensors only) */
    c.xb = (at->layout & KILN_FC_LAYOUT_X_NHWC) && r == 4;
    c.yb = (at->layout & KILN_FC_LAYOUT_Y_NHWC) && r == 4;
    c.rb = (at->layout & KILN_FC_LAYOUT_R_NHWC) && at->has_residual && !c.yb && r == 4;
    /* nChw16c in or out: float32, channels multiples of 16 (fc_cpu checked) */
    c.xc = (at->layout & KILN_FC_LAYOUT_X_C16) && r == 4;
    c.yc = (at->layout & KILN_FC_LAYOUT_Y_C16) && r == 4;
    c.xdt = c.xb && (at->layout & KILN_FC_LAYOUT_X_BF16) ? dnnl_bf16 : dnnl_f32;
    c.ydt = c.yb && (at->layout & KILN_FC_LAYOUT_Y_BF16) ? dnnl_bf16 : dnnl_f32;
    s->y_elem = c.ydt == dnnl_bf16 ? 2 : 4;
    DN(dnnl_primitive_attr_create(&pattr), "attr");
    DN(dnnl_primitive_attr_set_scratchpad_mode(pattr, dnnl_scratchpad_mode_user), "scratchpad mode");
    DN(dnnl_post_ops_create(&ops), "post-ops");
    if (at->has_residual) DN(dnnl_post_ops_append_sum(ops, 1.0f), "sum post-op");
    s->own_act = own_act(at->act);
    s->y_bf16 = c.ydt == dnnl_bf16;
    s->act = at->act, s->alpha = at->alpha, s->beta = at->beta;
    if (!s->own_act) DN(append_act(ops, at->act, at->alpha, at->beta), "activation post-ops");
    DN(dnnl_primitive_attr_set_post_ops(pattr, ops), "post-ops");

    /* the split: the batch when there are several images, else bands of
     * output rows (each at least one row, none entirely in the padding) */
    int parts = probe ? 1 : nthreads;
    if (parts > MAX_PARTS) parts = MAX_PARTS;
    /* a small layer runs on one thread: waking another costs more than it
     * saves (cost: multiply-adds plus 16 per element read or written) */
    double cost = (double)g.N * (double)g.M * (double)g.out_sz * (double)g.Cg * (double)g.k_sz +
                  16.0 * (double)g.N * ((double)g.C * (double)g.in_sz + (double)g.M * (double)g.out_sz);
    if (parts > kiln__parts_for_cost(cost)) parts = kiln__parts_for_cost(cost);
    bool rows = g.N == 1 && g.ns >= 1;
    /* one image whose weights outweigh its input and output (CHANS_RATIO),
     * NHWC float32 in and out: a share of the output channels per thread
     * (each streams only its share of the weights; layer4 of ResNet-50 at
     * 2 threads no longer splits 7 rows 4 / 3) */
    double wbytes = 4.0 * (double)g.M * (double)g.Cg * (double)g.k_sz,
           abytes = 4.0 * ((double)g.C * (double)g.in_sz + (double)g.M * (double)g.out_sz);
    bool chans = rows && parts > 1 && r == 4 && g.G == 1 && c.xb && c.yb && !c.rb && c.xdt == dnnl_f32 &&
                 c.ydt == dnnl_f32 && !bf16 && g.M % 16 == 0 && g.M / 16 >= parts && wbytes >= CHANS_RATIO * abytes;
    /* nChw16c: a band of rows is not dense (oneDNN would take its
     * reference kernel), a share of whole channel blocks is */
    if (rows && (c.xc || c.yc)) {
        chans = parts > 1 && c.xc && c.yc && g.G == 1 && g.M / 16 >= 2;
        if (chans && parts > g.M / 16) parts = (int)(g.M / 16);
        if (!chans) parts = 1;
    }
    int64_t span = rows ? g.out[0] : g.N;
    if (!chans && parts > span) parts = span > 0 ? (int)span : 1;
    if (parts == 1) rows = chans = false;
    if (chans) rows = false;
    if (rows && parts > 1) {
        int64_t ext = (g.k[0] - 1) * g.d[0] + 1;
        for (int k = 0; k < parts; k++) {
            int64_t o0 = span * k / parts, o1 = span * (k + 1) / parts;
            if ((o1 - 1) * g.s[0] - g.pb[0] + ext <= 0 || o0 * g.s[0] - g.pb[0] >= X->dims[2]) parts = 1;
        }
    }
    s->parts = kiln__calloc((size_t)parts, sizeof *s->parts);
    if (!s->parts) {
        st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (FusedConv): out of memory", NODE(a));
        goto fail;
    }
    s->n_parts = parts;
    split_kind split = chans ? SPLIT_CHANS : rows ? SPLIT_ROWS : SPLIT_BATCH;
    s->split = split;
    for (int k = 0; k < parts && st == KILN_OK; k++) st = part_create(a, s, &c, pattr, k, parts, split, probe);
fail:
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

/* Scratch for each part's reordered src/dst: the kernel's workspace when it
 * is large enough, else buffers owned by the part. */
static kiln_status scratch(const kiln_kernel_args *a, dconv *s, void **src, void **dst) {
    bool ws = a->workspace && a->workspace_size >= s->ws_need;
    for (int k = 0; k < s->n_parts; k++) {
        dpart *q = &s->parts[k];
        size_t sa = (q->src_bytes + 63) & ~(size_t)63;
        if (ws) {
            src[k] = (char *)a->workspace + q->ws_off;
            dst[k] = (char *)a->workspace + q->ws_off + sa;
            continue;
        }
        if (q->src_bytes && !q->own_src) q->own_src = kiln__aligned_alloc(q->src_bytes);
        if (q->dst_bytes && !q->own_dst) q->own_dst = kiln__aligned_alloc(q->dst_bytes);
        if ((q->src_bytes && !q->own_src) || (q->dst_bytes && !q->own_dst))
            return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (FusedConv): out of memory for scratch",
                             NODE(a));
        src[k] = q->own_src;
        dst[k] = q->own_dst;
    }
    return KILN_OK;
}

typedef struct exec_ctx {
    const kiln_kernel_args *a;
    dconv *s;
    void *sbuf[MAX_PARTS], *dbuf[MAX_PARTS];
    atomic_int failed; /* the first failing oneDNN status, 0: none */
} exec_ctx;

static dnnl_status_t part_exec(exec_ctx *c, int k) {
    const kiln_kernel_args *a = c->a;
    const dpart *q = &c->s->parts[k];
    char *x = (char *)a->in[0]->data + q->x_off, *y = (char *)a->out[0]->data + q->y_off;
    const kiln_tensor *B = a->n_in > 2 ? a->in[2] : NULL;
    const kiln_tensor *R = ((const kiln_fused_conv_attrs *)a->attrs)->has_residual ? a->in[3] : NULL;
    dnnl_status_t ds;
#define DS(call)                                  \
    do {                                          \
        if ((ds = (call)) != dnnl_success) return ds; \
    } while (0)
    DS(dnnl_memory_set_data_handle(q->m_usrc, x));
    DS(dnnl_memory_set_data_handle(q->m_udst, y));
    DS(dnnl_memory_set_data_handle(q->m_src, q->r_src ? c->sbuf[k] : x));
    void *dst = q->r_dst || q->chan_copy ? c->dbuf[k] : y;
    DS(dnnl_memory_set_data_handle(q->m_dst, dst));
    if (B) DS(dnnl_memory_set_data_handle(q->m_b, (float *)B->data + q->m0));
    if (q->r_src) DS(reorder(q->strm, q->r_src, q->m_usrc, q->m_src));
    /* channel split: this part's channels of every pixel (NHWC, M per
     * pixel) <-> the dense scratch; the residual goes in first (the sum
     * post-op adds what dst holds), also when it is the output itself */
    int64_t M = a->out[0]->rank == 4 ? a->out[0]->dims[1] : 0;
    size_t cb = (size_t)q->mn * sizeof(float);
    if (q->chan_copy && R)
        for (int64_t p = 0; p < q->pixels; p++)
            memcpy((char *)c->dbuf[k] + (size_t)p * cb, (const float *)R->data + p * M + q->m0, cb);
    if (R && !q->chan_copy) {
        if (q->r_res) {
            DS(dnnl_memory_set_data_handle(q->m_res, (char *)R->data + q->r_off));
            DS(reorder(q->strm, q->r_res, q->m_res, q->m_dst));
        } else if ((const char *)R->data + q->r_off != y) { /* else in place (fc_inplace_input) */
            memcpy(y, (const char *)R->data + q->r_off, q->y_bytes);
        }
    }
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, q->m_src},
                               {DNNL_ARG_WEIGHTS, q->m_w},
                               {DNNL_ARG_DST, q->m_dst},
                               {DNNL_ARG_SCRATCHPAD, q->m_scr},
                               {DNNL_ARG_BIAS, q->m_b}};
    int n = q->m_scr ? 4 : 3;
    if (B) {
        if (!q->m_scr) args[3] = args[4];
        n++;
    }
    DS(dnnl_primitive_execute(q->conv, q->strm, n, args));
    if (c->s->own_act) {
        DS(dnnl_stream_wait(q->strm));
        if (c->s->y_bf16) kiln__fc_act_bf16(dst, q->dst_elems, c->s->act, c->s->alpha, c->s->beta);
        else kiln__fc_act_f32(dst, q->dst_elems, c->s->act, c->s->alpha, c->s->beta);
    }
    if (q->r_dst) DS(reorder(q->strm, q->r_dst, q->m_dst, q->m_udst));
    DS(dnnl_stream_wait(q->strm));
    for (int64_t p = 0; q->chan_copy && p < q->pixels; p++)
        memcpy((float *)y + p * M + q->m0, (const char *)c->dbuf[k] + (size_t)p * cb, cb);
#undef DS
    return dnnl_success;
}

/* Runs on a kiln pool thread: its oneDNN calls run on it alone (an OpenMP
 * team would keep spinning on the other cores after the layer). */
static void run_parts(void *vc, int64_t p0, int64_t p1) {
    exec_ctx *c = vc;
    dconv *s = c->s;
    int prev = s->get_threads ? s->get_threads() : 1;
    if (s->set_threads && prev != 1) s->set_threads(1);
    for (int64_t k = p0; k < p1; k++) {
        dnnl_status_t ds = part_exec(c, (int)k);
        if (ds != dnnl_success) {
            int zero = 0;
            atomic_compare_exchange_strong(&c->failed, &zero, (int)ds);
        }
    }
    if (s->set_threads && prev != 1) s->set_threads(prev);
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
        s->set_threads = omp_setter();
        s->get_threads = omp_getter();
        /* created for one thread: oneDNN sizes its kernels by the calling
         * thread's OpenMP thread count */
        int prev = s->get_threads ? s->get_threads() : 1;
        if (s->set_threads && prev != 1) s->set_threads(1);
        kiln_status st = dconv_create(a, tactic, nthreads, s, false);
        if (s->set_threads && prev != 1) s->set_threads(prev);
        if (st != KILN_OK) {
            dconv_free(s);
            return st;
        }
        s->w_from = a->in[1]->data;
        if (keep) {
            a->node_state->p = s;
            a->node_state->free = dconv_free;
        }
    }
    exec_ctx c = {.a = a, .s = s};
    atomic_init(&c.failed, 0);
    kiln_status st = scratch(a, s, c.sbuf, c.dbuf);
    if (st == KILN_OK) {
        kiln__parallel_for(a->pool, s->n_parts, 1, run_parts, &c);
        int ds = atomic_load(&c.failed);
        if (ds)
            st = KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (FusedConv): oneDNN convolution failed (status %d)",
                           NODE(a), ds);
    }
    if (!keep) dconv_free(s);
    return st;
}

int kiln__dnnl_conv_split(const kiln_node_state *ns, int *parts) {
    const dconv *s = ns ? ns->p : NULL;
    if (!s) return -1;
    if (parts) *parts = s->n_parts;
    return s->split;
}

kiln_status kiln__dnnl_conv_probe(const kiln_kernel_args *a, int tactic) {
    dconv *s = kiln__calloc(1, sizeof *s);
    if (!s) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (FusedConv): out of memory", NODE(a));
    s->set_threads = omp_setter();
    s->get_threads = omp_getter();
    int prev = s->get_threads ? s->get_threads() : 1;
    if (s->set_threads && prev != 1) s->set_threads(1);
    kiln_status st = dconv_create(a, tactic, kiln__pool_threads(a->pool), s, true);
    if (s->set_threads && prev != 1) s->set_threads(prev);
    dconv_free(s);
    return st;
}

/* Bytes of an N x C x sz float tensor with C padded to 16; false on overflow. */
static bool blocked_bytes(int64_t n, int64_t c, int64_t sz, int64_t *out) {
    int64_t v;
    if (c > INT64_MAX - 15) return false;
    return kiln__mul_ok(n, (c + 15) / 16 * 16, &v) && kiln__mul_ok(v, sz, &v) &&
           kiln__mul_ok(v, (int64_t)sizeof(float), out);
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
    /* Bounds of the blocked layouts: channels padded to 16. SIZE_MAX when
     * the sizes overflow (shapes from engine files are not trusted: the
     * planner then refuses the workspace with a message). */
    int64_t src, dst = 0;
    if (!blocked_bytes(g.N, g.C, g.in_sz, &src)) return SIZE_MAX;
    if (tactic == KILN_FC_TACTIC_DNNL_BLOCKED && !blocked_bytes(g.N, g.M, g.out_sz, &dst)) return SIZE_MAX;
    if ((uint64_t)src > SIZE_MAX / 4 || (uint64_t)dst > SIZE_MAX / 4) return SIZE_MAX;
    return (((size_t)src + 63) & ~(size_t)63) + (((size_t)dst + 63) & ~(size_t)63);
}

#else
int kiln__dnnl_conv_split(const kiln_node_state *ns, int *parts) {
    (void)ns, (void)parts;
    return -1; /* oneDNN not built in */
}
#endif /* KILN_HAVE_DNNL */
