/* fused_transformer_dnnl.c -- oneDNN matmul for kiln.FusedMatMul (see
 * fused_transformer_dnnl.h). */
#include "backends/cpu/kernels/fused_transformer_dnnl.h"

#include "backends/cpu/kernels/fused_transformer_cpu.h"

#if KILN_HAVE_DNNL
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdatomic.h>
#include <stdio.h>

#define MAX_PRIMS 4   /* distinct row counts kept per part */
#define MAX_PARTS 64  /* pool threads used by one run */

typedef struct dnnl_prim {
    int64_t M;
    dnnl_primitive_t p;
    size_t scratch;   /* bytes of its scratchpad */
} dnnl_prim;

/* Columns [n0, n1) of the layer: their packed weights and primitives. */
typedef struct dnnl_part {
    int64_t n0, n1;
    dnnl_memory_desc_t wmd;  /* packed weights layout */
    dnnl_memory_t w;         /* packed weights, in the layer's w_all */
    dnnl_prim prims[MAX_PRIMS];
    int n_prims;
    dnnl_stream_t stream;
    void *scratch;
    size_t scratch_size;
    float *out;              /* dense [M, n1 - n0] result when the layer has several parts */
    size_t out_size;
} dnnl_part;

struct kiln_tf_dnnl_mm {
    void *w_all;                /* every part's packed weights (kiln__aligned_alloc) */
    int64_t K, N;
    bool has_bias, bf16, trans_b;
    int act;                 /* fused into oneDNN (KILN_FACT_NONE with a residual or ReLU) */
    int act_after;           /* applied by kiln (after adding the residual) */
    const float *B;          /* the engine's weights (row-major), packed on first use */
    dnnl_engine_t eng;
    dnnl_part parts[MAX_PARTS];
    int n_parts;             /* 0 until the first run */
    /* OpenMP's per-thread team size (oneDNN is built on OpenMP): looked up in
     * the already-loaded libgomp; NULL if absent. */
    void (*omp_set)(int);
    int (*omp_get)(void);
};

#define DN(call)                                                                  \
    do {                                                                          \
        dnnl_status_t s_ = (call);                                                \
        if (s_ != dnnl_success)                                                   \
            return KILN_FAIL(KILN_ERR_INTERNAL, "oneDNN: %s failed (status %d)", #call, (int)s_); \
    } while (0)

bool kiln__tf_dnnl_available(void) { return true; }

/* Primitive descriptor of rows x [n0, n1), dst dense (oneDNN's fast
 * brgemm kernels want dense rows; a part of several writes a scratch copy). */
static kiln_status make_desc(kiln_tf_dnnl_mm *m, int64_t M, int64_t n0, int64_t n1, const dnnl_memory_desc_t *wmd,
                             dnnl_primitive_desc_t *pd) {
    dnnl_memory_desc_t a, c, bias;
    int64_t n = n1 - n0;
    dnnl_dims_t da = {M, m->K}, dc = {M, n}, db = {1, n};
    dnnl_data_type_t t = m->bf16 ? dnnl_bf16 : dnnl_f32;
    DN(dnnl_memory_desc_init_by_tag(&a, 2, da, t, dnnl_ab));
    DN(dnnl_memory_desc_init_by_tag(&c, 2, dc, dnnl_f32, dnnl_ab));
    DN(dnnl_memory_desc_init_by_tag(&bias, 2, db, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t md;
    DN(dnnl_matmul_desc_init(&md, &a, wmd, m->has_bias ? &bias : NULL, &c));
    dnnl_primitive_attr_t at;
    DN(dnnl_primitive_attr_create(&at));
    dnnl_post_ops_t po = NULL;
    dnnl_status_t s = dnnl_primitive_attr_set_scratchpad_mode(at, dnnl_scratchpad_mode_user);
    if (s == dnnl_success && m->act != KILN_FACT_NONE) {
        /* GELU only (ReLU is kiln's: act_after) */
        dnnl_alg_kind_t alg = m->act == KILN_FACT_GELU_ERF ? dnnl_eltwise_gelu_erf : dnnl_eltwise_gelu_tanh;
        s = dnnl_post_ops_create(&po);
        if (s == dnnl_success) s = dnnl_post_ops_append_eltwise(po, 1.0f, alg, 0.0f, 0.0f);
        if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(at, po);
    }
    if (s == dnnl_success) s = dnnl_primitive_desc_create(pd, &md, at, m->eng, NULL);
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(at);
    if (s != dnnl_success)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "oneDNN has no matmul for %lldx%lldx%lld (%s), status %d",
                         (long long)M, (long long)m->K, (long long)n, m->bf16 ? "bf16" : "f32", (int)s);
    return KILN_OK;
}

static void part_free(dnnl_part *p) {
    for (int i = 0; i < p->n_prims; i++) dnnl_primitive_destroy(p->prims[i].p);
    if (p->stream) dnnl_stream_destroy(p->stream);
    if (p->w) dnnl_memory_destroy(p->w);
    kiln__aligned_free(p->scratch);
    kiln__aligned_free(p->out);
    memset(p, 0, sizeof *p);
}

void kiln__tf_dnnl_mm_free(void *vp) {
    kiln_tf_dnnl_mm *m = vp;
    if (!m) return;
    for (int i = 0; i < m->n_parts; i++) part_free(&m->parts[i]);
    kiln__aligned_free(m->w_all);
    if (m->eng) dnnl_engine_destroy(m->eng);
    kiln__free(m);
}

/* The layout oneDNN prefers for columns [n0, n1) of the weights at a
 * typical row count (M rows): p->wmd. */
static kiln_status part_layout(kiln_tf_dnnl_mm *m, dnnl_part *p, int64_t M) {
    dnnl_memory_desc_t wany;
    dnnl_dims_t dw = {m->K, p->n1 - p->n0};
    DN(dnnl_memory_desc_init_by_tag(&wany, 2, dw, m->bf16 ? dnnl_bf16 : dnnl_f32, dnnl_format_tag_any));
    dnnl_primitive_desc_t pd;
    KILN_TRY(make_desc(m, M, p->n0, p->n1, &wany, &pd));
    p->wmd = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_primitive_desc_destroy(pd);
    return KILN_OK;
}

/* Packs columns [n0, n1) of the row-major weights into buf, in p->wmd. */
static kiln_status part_pack(kiln_tf_dnnl_mm *m, dnnl_part *p, void *buf) {
    int64_t n = p->n1 - p->n0;
    dnnl_memory_desc_t src;
    dnnl_dims_t dw = {m->K, n};
    dnnl_dims_t ss = {m->trans_b ? 1 : m->N, m->trans_b ? m->K : 1};
    DN(dnnl_memory_desc_init_by_strides(&src, 2, dw, dnnl_f32, ss));
    const float *b0 = m->B + (m->trans_b ? p->n0 * m->K : p->n0);
    dnnl_memory_t ms;
    DN(dnnl_memory_create(&ms, &src, m->eng, (void *)b0));
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t rp = NULL;
    dnnl_status_t s = dnnl_memory_create(&p->w, &p->wmd, m->eng, buf);
    if (s == dnnl_success) s = dnnl_stream_create(&p->stream, m->eng, dnnl_stream_default_flags);
    if (s == dnnl_success) s = dnnl_reorder_primitive_desc_create(&rpd, &src, m->eng, &p->wmd, m->eng, NULL);
    if (s == dnnl_success) s = dnnl_primitive_create(&rp, rpd);
    if (s == dnnl_success) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, p->w}};
        s = dnnl_primitive_execute(rp, p->stream, 2, args);
        if (s == dnnl_success) s = dnnl_stream_wait(p->stream);
    }
    if (rp) dnnl_primitive_destroy(rp);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    dnnl_memory_destroy(ms);
    if (s != dnnl_success)
        return KILN_FAIL(KILN_ERR_INTERNAL, "oneDNN: packing %lldx%lld weights failed (status %d)",
                         (long long)m->K, (long long)n, (int)s);
    return KILN_OK;
}

kiln_status kiln__tf_dnnl_mm_create(int64_t K, int64_t N, const float *B, bool trans_b, bool has_bias,
                                    bool has_residual, int act, bool bf16, kiln_tf_dnnl_mm **out) {
    *out = NULL;
    kiln_tf_dnnl_mm *m = kiln__calloc(1, sizeof *m);
    if (!m) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (oneDNN matmul)");
    m->K = K;
    m->N = N;
    m->B = B;
    m->trans_b = trans_b;
    m->has_bias = has_bias;
    /* ReLU by kiln too: oneDNN's relu post-op (alpha 0: a max with 0, the 0
     * second) turns NaN into 0, where ONNX and PyTorch keep it (its GELUs
     * keep it: test_fusion_transformer's matmul_special_values) */
    bool after = has_residual || act == KILN_FACT_RELU;
    m->act = after ? KILN_FACT_NONE : act;
    m->act_after = after ? act : KILN_FACT_NONE;
    m->bf16 = bf16;
    *(void **)&m->omp_set = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    *(void **)&m->omp_get = dlsym(RTLD_DEFAULT, "omp_get_max_threads");
    if (dnnl_engine_create(&m->eng, dnnl_cpu, 0) != dnnl_success) {
        kiln__tf_dnnl_mm_free(m);
        return KILN_FAIL(KILN_ERR_INTERNAL, "oneDNN: cannot create a CPU engine");
    }
    *out = m;
    return KILN_OK;
}

/* Splits the N columns into `parts` parts (multiples of 16 columns) and packs
 * each: done on the first run and again when the thread count changes. The
 * parts' packed weights share one block (w_all, page-aligned offsets), so
 * that a layer's weights are one allocation large enough for huge pages
 * (kiln__aligned_alloc) even where each part's are not. */
static kiln_status split_columns(kiln_tf_dnnl_mm *m, int parts, int64_t M) {
    for (int i = 0; i < m->n_parts; i++) part_free(&m->parts[i]);
    kiln__aligned_free(m->w_all);
    m->w_all = NULL;
    m->n_parts = 0;
    int64_t blocks = (m->N + 15) / 16;
    if (parts > blocks) parts = (int)blocks;
    if (parts < 1) parts = 1;
    size_t off[MAX_PARTS + 1] = {0};
    for (int i = 0; i < parts; i++) {
        dnnl_part *p = &m->parts[i];
        p->n0 = blocks * i / parts * 16;
        p->n1 = i == parts - 1 ? m->N : blocks * (i + 1) / parts * 16;
        m->n_parts = i + 1;
        KILN_TRY(part_layout(m, p, M));
        off[i + 1] = off[i] + (dnnl_memory_desc_get_size(&p->wmd) + 4095) / 4096 * 4096;
    }
    m->w_all = kiln__aligned_alloc(off[parts] ? off[parts] : 1);
    if (!m->w_all) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory packing %lldx%lld weights (oneDNN matmul)",
                                    (long long)m->K, (long long)m->N);
    for (int i = 0; i < parts; i++) KILN_TRY(part_pack(m, &m->parts[i], (char *)m->w_all + off[i]));
    return KILN_OK;
}

static kiln_status get_prim(kiln_tf_dnnl_mm *m, dnnl_part *pt, int64_t M, dnnl_prim **out) {
    for (int i = 0; i < pt->n_prims; i++)
        if (pt->prims[i].M == M) {
            *out = &pt->prims[i];
            return KILN_OK;
        }
    if (pt->n_prims == MAX_PRIMS) { /* forget the oldest */
        dnnl_primitive_destroy(pt->prims[0].p);
        memmove(&pt->prims[0], &pt->prims[1], sizeof pt->prims[0] * (MAX_PRIMS - 1));
        pt->n_prims--;
    }
    dnnl_primitive_desc_t pd;
    KILN_TRY(make_desc(m, M, pt->n0, pt->n1, &pt->wmd, &pd));
    dnnl_prim *p = &pt->prims[pt->n_prims];
    p->M = M;
    p->scratch = dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
    dnnl_status_t s = dnnl_primitive_create(&p->p, pd);
    dnnl_primitive_desc_destroy(pd);
    if (s != dnnl_success) return KILN_FAIL(KILN_ERR_INTERNAL, "oneDNN: cannot create a matmul (status %d)", (int)s);
    pt->n_prims++;
    size_t osz = m->n_parts > 1 ? sizeof(float) * (size_t)(M * (pt->n1 - pt->n0)) : 0;
    if (osz > pt->out_size) {
        kiln__aligned_free(pt->out);
        pt->out = kiln__aligned_alloc(osz);
        pt->out_size = pt->out ? osz : 0;
        if (!pt->out) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (oneDNN matmul)");
    }
    if (p->scratch > pt->scratch_size) {
        kiln__aligned_free(pt->scratch);
        pt->scratch = kiln__aligned_alloc(p->scratch);
        pt->scratch_size = pt->scratch ? p->scratch : 0;
        if (!pt->scratch) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (oneDNN scratchpad)");
    }
    *out = p;
    return KILN_OK;
}

typedef struct run_ctx {
    kiln_tf_dnnl_mm *m;
    int64_t M;
    dnnl_prim *prim[MAX_PARTS];
    const float *A, *bias, *res;
    float *Y;
    uint16_t *abf;
    atomic_int failed;
} run_ctx;

static void convert_rows(void *vc, int64_t r0, int64_t r1) {
    run_ctx *c = vc;
    kiln__f32_to_bf16_row(c->A + r0 * c->m->K, c->abf + r0 * c->m->K, (r1 - r0) * c->m->K);
}

static void run_part(void *vc, int64_t p0, int64_t p1) {
    run_ctx *c = vc;
    kiln_tf_dnnl_mm *m = c->m;
    int prev = m->omp_get ? m->omp_get() : 1;
    if (m->omp_set && prev != 1) m->omp_set(1);
    for (int64_t i = p0; i < p1; i++) {
        dnnl_part *pt = &m->parts[i];
        dnnl_prim *pr = c->prim[i];
        int64_t n = pt->n1 - pt->n0;
        dnnl_memory_desc_t a, y, b, sc;
        dnnl_dims_t da = {c->M, m->K}, dy = {c->M, n}, db = {1, n}, ds = {(int64_t)pr->scratch};
        bool dense = m->n_parts == 1;
        float *yp = dense ? c->Y : pt->out;
        const void *ap = m->bf16 ? (const void *)c->abf : (const void *)c->A;
        dnnl_memory_t ma = NULL, my = NULL, mb = NULL, ms = NULL;
        bool ok = dnnl_memory_desc_init_by_tag(&a, 2, da, m->bf16 ? dnnl_bf16 : dnnl_f32, dnnl_ab) == dnnl_success &&
                  dnnl_memory_desc_init_by_tag(&y, 2, dy, dnnl_f32, dnnl_ab) == dnnl_success &&
                  dnnl_memory_desc_init_by_tag(&b, 2, db, dnnl_f32, dnnl_ab) == dnnl_success &&
                  dnnl_memory_desc_init_by_tag(&sc, 1, ds, dnnl_u8, dnnl_a) == dnnl_success &&
                  dnnl_memory_create(&ma, &a, m->eng, (void *)ap) == dnnl_success &&
                  dnnl_memory_create(&my, &y, m->eng, yp) == dnnl_success &&
                  dnnl_memory_create(&ms, &sc, m->eng, pt->scratch) == dnnl_success &&
                  (!m->has_bias ||
                   dnnl_memory_create(&mb, &b, m->eng, (void *)(c->bias + pt->n0)) == dnnl_success);
        if (ok) {
            dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, pt->w},
                                       {DNNL_ARG_DST, my}, {DNNL_ARG_SCRATCHPAD, ms},
                                       {DNNL_ARG_BIAS, mb}};
            ok = dnnl_primitive_execute(pr->p, pt->stream, m->has_bias ? 5 : 4, args) == dnnl_success &&
                 dnnl_stream_wait(pt->stream) == dnnl_success;
        }
        if (ok && !dense)
            for (int64_t r = 0; r < c->M; r++)
                memcpy(c->Y + r * m->N + pt->n0, yp + r * n, sizeof(float) * (size_t)n);
        if (ok && (c->res || m->act_after)) /* residual and/or the activation after it on this part's columns */
            kiln__fmm_epilogue(c->Y + pt->n0, m->N, c->M, n, NULL, c->res ? c->res + pt->n0 : NULL, m->N,
                               m->act_after);
        if (ma) dnnl_memory_destroy(ma);
        if (my) dnnl_memory_destroy(my);
        if (mb) dnnl_memory_destroy(mb);
        if (ms) dnnl_memory_destroy(ms);
        if (!ok) atomic_store(&c->failed, 1);
    }
    if (m->omp_set && prev != 1) m->omp_set(prev);
}

kiln_status kiln__tf_dnnl_mm_run(kiln_tf_dnnl_mm *m, int64_t M, const float *A, const float *bias,
                                 const float *res, float *Y, void *ws, kiln_pool *pool, const char *node) {
    if (M <= 0) return KILN_OK;
    int parts = kiln__pool_threads(pool);
    if (parts > MAX_PARTS) parts = MAX_PARTS;
    int64_t blocks = (m->N + 15) / 16;
    if (parts > blocks) parts = (int)blocks;
    run_ctx c = {.m = m, .M = M, .A = A, .bias = bias, .res = res, .Y = Y, .abf = ws};
    atomic_init(&c.failed, 0);
    /* oneDNN calls on this thread run on this thread alone (an OpenMP team
     * would spin on the other cores afterwards) */
    int prev = m->omp_get ? m->omp_get() : 1;
    if (m->omp_set && prev != 1) m->omp_set(1);
    kiln_status st = KILN_OK;
    if (m->n_parts != parts) st = split_columns(m, parts, M);
    for (int i = 0; st == KILN_OK && i < m->n_parts; i++) st = get_prim(m, &m->parts[i], M, &c.prim[i]);
    if (m->omp_set && prev != 1) m->omp_set(prev);
    if (st != KILN_OK) return kiln__fail_prefix(st, "node '%s'", node);
    if (m->bf16) kiln__parallel_for(pool, M, (8192 + m->K - 1) / m->K, convert_rows, &c);
    kiln__parallel_for(pool, m->n_parts, 1, run_part, &c);
    if (atomic_load(&c.failed))
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s': oneDNN matmul failed", node);
    return KILN_OK;
}

#else /* !KILN_HAVE_DNNL */

bool kiln__tf_dnnl_available(void) { return false; }

kiln_status kiln__tf_dnnl_mm_create(int64_t K, int64_t N, const float *B, bool trans_b, bool has_bias,
                                    bool has_residual, int act, bool bf16, kiln_tf_dnnl_mm **out) {
    (void)K, (void)N, (void)B, (void)trans_b, (void)has_bias, (void)has_residual, (void)act, (void)bf16;
    *out = NULL;
    return KILN_FAIL(KILN_ERR_UNSUPPORTED, "this kiln was built without oneDNN");
}

kiln_status kiln__tf_dnnl_mm_run(kiln_tf_dnnl_mm *m, int64_t M, const float *A, const float *bias,
                                 const float *res, float *Y, void *ws, kiln_pool *pool, const char *node) {
    (void)m, (void)M, (void)A, (void)bias, (void)res, (void)Y, (void)ws, (void)pool;
    return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': this kiln was built without oneDNN", node);
}

void kiln__tf_dnnl_mm_free(void *m) { (void)m; }

#endif
