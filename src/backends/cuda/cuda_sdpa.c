/* cuda_sdpa.c -- kiln.Attention through cuDNN's fused attention (flash
 * attention for fp16/bf16 on Ampere and later, chosen by cuDNN's engines
 * for an operation graph of the pattern below), one of Attention's tactics
 * (cuda_fused.c; docs/cuda.md, "Attention").
 *
 * The graph, as cuDNN's fused attention engines recognize it (the order
 * and the tensors cudnn-frontend's composite SDPA forward node lowers to
 * for inference; every intermediate virtual, fp32 unless said):
 *   S1 = Q K^T           MATMUL, Q [B,H,Sq,D], K^T [B,H,D,Sk] (K's strides
 *                        with the last two swapped), compute fp32
 *   S2 = S1 * scale      POINTWISE MUL by a float passed by value
 *  [S3 = S2 + A]         POINTWISE ADD of the additive mask or bias A
 *                        [B|1, H|1, Sq|1, Sk] (element strides, broadcast dims 1)
 *   M  = max_k S3        REDUCTION MAX into [B,H,Sq,1]
 *   E  = exp(S3 - M)     POINTWISE SUB, EXP
 *   Z  = sum_k E         REDUCTION ADD into [B,H,Sq,1]
 *   L  = M + log Z       POINTWISE LOG, ADD: the softmax statistics [B,H,Sq,1],
 *                        a virtual tensor here (inference): the engines match
 *                        the pattern only with this branch present (the
 *                        frontend adds it, stats virtual, when none is asked for)
 *   P  = E / Z           POINTWISE DIV, in the I/O dtype (the second MATMUL's A)
 *   O  = P V             MATMUL, V [B,H,Sk,Dv], O [B,H,Sq,Dv], compute fp32
 * A layer without mask, bias or cond has one more form (variant 2): the
 * whole attention as ONE operation, cuDNN's SDPA forward descriptor
 * (cuDNN 9.13.1+; what the frontend uses there when it can), with K given
 * [B,H,Sk,D], not transposed.
 * Every kiln layout (BSHD, BHSD, QKV, SBHD, ...) is a strided view of its
 * input, so Q, K, V and O are described by kcu_attn's element strides.
 * KILN_CUDA_VERBOSE=1 prints, per graph, what the heuristics returned (each
 * mode), the configs dropped and which of cuDNN's engines take the graph
 * (kcu_dg_explain).
 *
 * A bool cond whose fill is added (or set to -inf, the same) becomes an
 * additive mask of the cond's shape, in scratch memory after cuDNN's
 * workspace, by one small kernel before the graph (kcu_attn_cond_add).
 * What cuDNN does not take, the tactic is not listed for: more than one of
 * mask, bias and cond, a cond set to a finite fill, a mask broadcast over the
 * keys, head sizes not multiples of 8 or over 128, and, where a mask, bias
 * or cond could hide every key of a row, the engines whose result for such
 * a row (probed once per context and engine: zeros or NaN) differs from
 * the layer's (nan_to_zero: zeros; else NaN, as the softmax of -inf gives).
 * (KILN_CUDNN_SDPA=any lists the configs whatever the probe says: rows that
 * are NaN for kiln may then be zeros, or the reverse; KILN_CUDNN_SDPA=0
 * lists none.) The builder times every config listed against kiln's kernel and checks
 * that they agree (judged by kiln's host reference where they do not).
 *
 * Plans are kept per node and shape (16, like the convolutions' graphs),
 * made on the node's first run at a shape (not while a CUDA Graph is being
 * captured: the engine's first run precedes its capture); the workspace is
 * the context's scratch memory. */
#if KILN_HAVE_CUDA && KILN_HAVE_CUDNN

#include "backends/cuda/cuda_internal.h"
#include "core/plan_cache.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

enum { UID_Q = 1, UID_K = 2, UID_V = 3, UID_O = 4, UID_A = 5, UID_SCALE = 6, UID_VIRT = 100 };

/* What a plan is made for: the geometry, dtype, tactic and pointer alignments. */
typedef struct sdpa_key {
    int64_t B, H, Sq, Sk, D, Dv;
    int64_t qs[4], ks[4], vs[4], os[4], as[4];
    float scale;
    int32_t dt, tactic, has_add;
    int32_t al[5]; /* Q, K, V, O, A */
    int32_t zero_strides; /* A's broadcast dims described full size with stride 0 (else size 1) */
    int32_t op;           /* the SDPA forward operation (variant 2), not the composite graph */
} sdpa_key;

/* Which graph a config id is for (the caller's bits of the id,
 * KCU_DG_ID_USER): 0 the composite graph, a broadcast mask's broadcast dims
 * of size 1; 1 the same with them of full size and stride 0 (whichever
 * cuDNN's engines take: both are listed); 2 the SDPA forward operation
 * (layers without mask, bias or cond). */
enum { SDPA_COMPOSITE = 0, SDPA_COMPOSITE_S0 = 1, SDPA_OP = 2 };
static int sdpa_variant(int32_t id) { return (int)((id & KCU_DG_ID_USER) >> KCU_DG_ID_USER_SHIFT); }

typedef struct sdpa_plan {
    sdpa_key key;
    bool declined;       /* no config of the graph runs here */
    float scale;         /* the by-value scale's host copy (the variant pack points here) */
    kcu_dg dg;
    kcu_dg_plan plan;
} sdpa_plan;

typedef struct sdpa_state {
    kiln_plan_cache plans; /* sdpa_plan, by shape (core/plan_cache.h) */
    bool warned;
} sdpa_state;

static void sdpa_plan_clear(sdpa_plan *p) {
    kcu_dg_plan_free(&p->plan);
    kcu_dg_free(&p->dg);
    memset(p, 0, sizeof *p);
}

static void sdpa_plan_destroy(void *p) {
    sdpa_plan_clear(p);
    kiln__free(p);
}

static const kiln_plan_type sdpa_plans = {offsetof(sdpa_plan, key), sizeof(sdpa_key), KILN_PLAN_CACHE_CAP,
                                          sdpa_plan_destroy};

static void sdpa_state_free(void *v) {
    sdpa_state *s = v;
    if (!s) return;
    kiln__plan_cache_clear(&s->plans, &sdpa_plans);
    kiln__free(s);
}

/* The additive input's strides: the mask's, the bias's or the cond's (at most one). */
static const int64_t *sdpa_add_strides(const kcu_attn *g) {
    return g->has_mask ? g->ms : g->has_bias ? g->bs : g->has_cond ? g->cs : NULL;
}

/* Whether a cond acts as an addition: its fill added (ADD), or set where
 * that is the same (SELECT of -inf). */
static bool sdpa_cond_adds(const kcu_attn *g) {
    return g->cond_mode == KILN_ATTN_COND_ADD || (g->cond_mode == KILN_ATTN_COND_SELECT && isinf(g->fill) && g->fill < 0);
}

/* Whether cuDNN's graph may run layer g (before asking its heuristics). */
static bool sdpa_takes(kiln_dtype t, const kcu_attn *g) {
    if (t != KILN_DTYPE_FLOAT16 && t != KILN_DTYPE_BFLOAT16) return false;
    if (g->has_mask + g->has_bias + g->has_cond > 1 || (g->has_cond && !sdpa_cond_adds(g))) return false;
    if (g->D < 8 || g->D > 128 || g->D % 8 || g->Dv < 8 || g->Dv > 128 || g->Dv % 8) return false;
    if (g->B < 1 || g->H < 1 || g->Sq < 1 || g->Sk < 1) return false;
    const int64_t *as = sdpa_add_strides(g);
    if (as && as[3] == 0 && g->Sk > 1) return false; /* cuDNN's bias spans the keys */
    /* Q, K, V and O with their head dim contiguous (cuDNN's layouts) */
    return g->qs[3] == 1 && g->ks[3] == 1 && g->vs[3] == 1 && g->os[3] == 1;
}

static void sdpa_key_make(sdpa_key *k, kiln_dtype t, const kcu_attn *g, int32_t tactic, const void *const *ptrs) {
    memset(k, 0, sizeof *k);
    k->B = g->B;
    k->H = g->H;
    k->Sq = g->Sq;
    k->Sk = g->Sk;
    k->D = g->D;
    k->Dv = g->Dv;
    memcpy(k->qs, g->qs, sizeof k->qs);
    memcpy(k->ks, g->ks, sizeof k->ks);
    memcpy(k->vs, g->vs, sizeof k->vs);
    memcpy(k->os, g->os, sizeof k->os);
    const int64_t *as = sdpa_add_strides(g);
    if (as) memcpy(k->as, as, sizeof k->as);
    k->has_add = as != NULL;
    k->scale = g->scale;
    k->dt = t == KILN_DTYPE_BFLOAT16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    k->tactic = tactic;
    k->zero_strides = kcu_dg_is_id(tactic) && sdpa_variant(tactic) == SDPA_COMPOSITE_S0;
    k->op = kcu_dg_is_id(tactic) && sdpa_variant(tactic) == SDPA_OP;
    for (int i = 0; i < 5; i++) k->al[i] = ptrs && ptrs[i] ? kcu_dg_align(ptrs[i]) : 16;
}

/* The operation graph of key k (the pattern at the top). */
static cudnnStatus_t sdpa_graph(cudnnHandle_t h, const sdpa_key *k, kcu_dg *dg) {
#define SD_TRY(call)                                      \
    do {                                                  \
        cudnnStatus_t sd_s_ = (call);                     \
        if (sd_s_ != CUDNN_STATUS_SUCCESS) return sd_s_;  \
    } while (0)
    const cudnnDataType_t dt = (cudnnDataType_t)k->dt, f32 = CUDNN_DATA_FLOAT;
    const int64_t B = k->B, H = k->H, Sq = k->Sq, Sk = k->Sk;
    const int64_t qd[4] = {B, H, Sq, k->D}, ktd[4] = {B, H, k->D, Sk}, vd[4] = {B, H, Sk, k->Dv};
    const int64_t od[4] = {B, H, Sq, k->Dv}, kts[4] = {k->ks[0], k->ks[1], k->ks[3], k->ks[2]};
    const int64_t kd[4] = {B, H, Sk, k->D};
    const int64_t sd[4] = {B, H, Sq, Sk}, ss[4] = {H * Sq * Sk, Sq * Sk, Sk, 1};
    const int64_t rd[4] = {B, H, Sq, 1}, rs[4] = {H * Sq, Sq, 1, 1};
    int64_t vuid = UID_VIRT;
    cudnnBackendDescriptor_t Q, K, V, O, A, scale, s1, s2, s3, mx, s4, e, z, lz, stats, p;
    if (k->op) {
        /* one SDPA forward operation: K as it is, the scale a by-value float of rank 1 */
        if (k->has_add) return CUDNN_STATUS_NOT_SUPPORTED; /* (no mask in this form) */
        SD_TRY(kcu_dg_tensor(dg, UID_Q, dt, 4, qd, k->qs, k->al[0], false, &Q));
        SD_TRY(kcu_dg_tensor(dg, UID_K, dt, 4, kd, k->ks, k->al[1], false, &K));
        SD_TRY(kcu_dg_tensor(dg, UID_V, dt, 4, vd, k->vs, k->al[2], false, &V));
        SD_TRY(kcu_dg_tensor(dg, UID_O, dt, 4, od, k->os, k->al[3], false, &O));
        SD_TRY(kcu_dg_scalar(dg, UID_SCALE, 1, &scale));
        SD_TRY(kcu_dg_sdpa_fwd(dg, Q, K, V, O, scale));
        return kcu_dg_finalize(dg, h);
    }
    SD_TRY(kcu_dg_tensor(dg, UID_Q, dt, 4, qd, k->qs, k->al[0], false, &Q));
    SD_TRY(kcu_dg_tensor(dg, UID_K, dt, 4, ktd, kts, k->al[1], false, &K));
    SD_TRY(kcu_dg_tensor(dg, UID_V, dt, 4, vd, k->vs, k->al[2], false, &V));
    SD_TRY(kcu_dg_tensor(dg, UID_O, dt, 4, od, k->os, k->al[3], false, &O));
    SD_TRY(kcu_dg_scalar(dg, UID_SCALE, 4, &scale));
    SD_TRY(kcu_dg_tensor(dg, vuid++, f32, 4, sd, ss, 16, true, &s1));
    SD_TRY(kcu_dg_matmul(dg, Q, K, s1, f32));
    SD_TRY(kcu_dg_tensor(dg, vuid++, f32, 4, sd, ss, 16, true, &s2));
    SD_TRY(kcu_dg_pointwise(dg, CUDNN_POINTWISE_MUL, s1, scale, s2, NULL));
    s3 = s2;
    if (k->has_add) {
        /* broadcast dims (stride 0): size 1 with the strides of a dense tensor, or
         * (zero_strides) the scores' size with stride 0 */
        int64_t ad[4], as[4], inner = 1;
        for (int i = 3; i >= 0; i--) {
            ad[i] = k->as[i] || k->zero_strides ? sd[i] : 1;
            as[i] = k->as[i] || k->zero_strides ? k->as[i] : inner;
            inner = (as[i] ? as[i] : inner) * ad[i];
        }
        SD_TRY(kcu_dg_tensor(dg, UID_A, dt, 4, ad, as, k->al[4], false, &A));
        SD_TRY(kcu_dg_tensor(dg, vuid++, f32, 4, sd, ss, 16, true, &s3));
        SD_TRY(kcu_dg_pointwise(dg, CUDNN_POINTWISE_ADD, s2, A, s3, NULL));
    }
    SD_TRY(kcu_dg_tensor(dg, vuid++, f32, 4, rd, rs, 16, true, &mx));
    SD_TRY(kcu_dg_reduction(dg, CUDNN_REDUCE_TENSOR_MAX, s3, mx));
    SD_TRY(kcu_dg_tensor(dg, vuid++, f32, 4, sd, ss, 16, true, &s4));
    SD_TRY(kcu_dg_pointwise(dg, CUDNN_POINTWISE_SUB, s3, mx, s4, NULL));
    SD_TRY(kcu_dg_tensor(dg, vuid++, f32, 4, sd, ss, 16, true, &e));
    SD_TRY(kcu_dg_pointwise(dg, CUDNN_POINTWISE_EXP, s4, NULL, e, NULL));
    SD_TRY(kcu_dg_tensor(dg, vuid++, f32, 4, rd, rs, 16, true, &z));
    SD_TRY(kcu_dg_reduction(dg, CUDNN_REDUCE_TENSOR_ADD, e, z));
    /* the softmax statistics M + log Z, virtual (nothing reads them at inference) */
    SD_TRY(kcu_dg_tensor(dg, vuid++, f32, 4, rd, rs, 16, true, &lz));
    SD_TRY(kcu_dg_pointwise(dg, CUDNN_POINTWISE_LOG, z, NULL, lz, NULL));
    SD_TRY(kcu_dg_tensor(dg, vuid++, f32, 4, rd, rs, 16, true, &stats));
    SD_TRY(kcu_dg_pointwise(dg, CUDNN_POINTWISE_ADD, mx, lz, stats, NULL));
    SD_TRY(kcu_dg_tensor(dg, vuid++, dt, 4, sd, ss, 16, true, &p)); /* the second MATMUL's A: I/O dtype */
    SD_TRY(kcu_dg_pointwise(dg, CUDNN_POINTWISE_DIV, e, z, p, NULL));
    SD_TRY(kcu_dg_matmul(dg, p, V, O, f32));
#undef SD_TRY
    return kcu_dg_finalize(dg, h);
}

/* The graph of key k and its configs (cfgs->n == 0: cuDNN does not take it;
 * KILN_CUDA_VERBOSE=1 says why). */
static void sdpa_configs(const kiln_cuda_state *st, const sdpa_key *k, kcu_dg *dg, kcu_dg_cfgs *cfgs) {
    memset(cfgs, 0, sizeof *cfgs);
    cudnnStatus_t gs = sdpa_graph(st->dnn, k, dg), cs = CUDNN_STATUS_NOT_SUPPORTED;
    char why[200] = "";
    if (gs != CUDNN_STATUS_SUCCESS && st->verbose) cudnnGetLastErrorString(why, sizeof why);
    if (gs == CUDNN_STATUS_SUCCESS) cs = kcu_dg_configs(dg, cfgs);
    if (st->verbose) {
        fprintf(stderr,
                "kiln: cuDNN attention graph [B %lld, H %lld, Sq %lld, Sk %lld, D %lld, Dv %lld]%s%s%s: %s, %d "
                "configs%s%s\n",
                (long long)k->B, (long long)k->H, (long long)k->Sq, (long long)k->Sk, (long long)k->D,
                (long long)k->Dv, k->op ? " as the SDPA operation" : "", k->has_add ? " + mask" : "",
                k->zero_strides ? " (stride 0)" : "", cudnnGetErrorString(gs != CUDNN_STATUS_SUCCESS ? gs : cs),
                cs == CUDNN_STATUS_SUCCESS ? cfgs->n : 0, why[0] ? ": " : "", why);
        if (gs == CUDNN_STATUS_SUCCESS) kcu_dg_explain(dg, cfgs, stderr);
    }
    if (cs != CUDNN_STATUS_SUCCESS) kcu_dg_cfgs_free(cfgs);
}

/* Runs plan p on the state's stream. */
static cudnnStatus_t sdpa_exec(kiln_cuda_state *st, sdpa_plan *p, const void *q, const void *k, const void *v,
                               const void *add, void *o, void *ws) {
    int64_t uids[6] = {UID_Q, UID_K, UID_V, UID_O, UID_SCALE, UID_A};
    void *ptrs[6] = {(void *)q, (void *)k, (void *)v, o, &p->scale, (void *)add};
    p->scale = p->key.scale;
    return kcu_dg_execute(st->dnn, &p->plan, p->key.has_add ? 6 : 5, uids, ptrs, ws);
}

/* What each of cuDNN's fused attention engines gives for a row whose every
 * key is masked with -inf (st->sdpa_masked, by engine global index): one
 * fp16 layer of 64 queries and keys, head size 64, Q = K = 0, V all ones,
 * query 0's bias row -inf, run by every config of its graph that can be
 * made (runtime-compiled ones: the first 3); an engine whose configs
 * disagree, or whose other rows are not the mean of V, counts as neither. */
static void sdpa_probe(kiln_cuda_state *st) {
    enum { S = 64, D = 64 };
    const size_t n_qkv = (size_t)S * D, n_bias = (size_t)S * S;
    const size_t bytes = (4 * n_qkv + n_bias) * sizeof(uint16_t);
    uint16_t *host = calloc(4 * n_qkv + n_bias, sizeof(uint16_t)), *back = calloc(n_qkv, sizeof(uint16_t));
    void *dev = NULL;
    kcu_dg dg;
    kcu_dg_cfgs cfgs;
    sdpa_plan *p = calloc(1, sizeof *p);
    kcu_dg_init(&dg);
    memset(&cfgs, 0, sizeof cfgs);
    memset(st->sdpa_masked, 0, sizeof st->sdpa_masked);
    st->sdpa_probed = true;
    if (!host || !back || !p || cudaMalloc(&dev, bytes) != cudaSuccess) {
        dev = NULL;
        goto done;
    }
    /* Q = K = 0, V = 1, bias row 0 = -inf (fp16 bits) */
    for (size_t i = 0; i < n_qkv; i++) host[2 * n_qkv + i] = 0x3c00;
    for (size_t j = 0; j < S; j++) host[4 * n_qkv + j] = 0xfc00;
    uint16_t *d = dev;
    if (cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, st->stream) != cudaSuccess) goto done;
    kcu_attn g;
    memset(&g, 0, sizeof g);
    g.B = g.H = 1;
    g.Sq = g.Sk = S;
    g.D = g.Dv = D;
    g.qs[0] = g.qs[1] = g.ks[0] = g.ks[1] = g.vs[0] = g.vs[1] = g.os[0] = g.os[1] = S * D;
    g.qs[2] = g.ks[2] = g.vs[2] = g.os[2] = D;
    g.qs[3] = g.ks[3] = g.vs[3] = g.os[3] = 1;
    g.has_mask = 1;
    g.ms[2] = S;
    g.ms[3] = 1;
    g.scale = 0.125f;
    sdpa_key_make(&p->key, KILN_DTYPE_FLOAT16, &g, 0, NULL);
    sdpa_configs(st, &p->key, &dg, &cfgs);
    for (int i = 0, rtc = 0; i < cfgs.n; i++) {
        if ((cfgs.flags[i] & KCU_DG_CFG_RUNTIME_COMPILED) && rtc++ >= 3) continue;
        int e = kcu_dg_id_engine(cfgs.id[i]), result = 3;
        kcu_dg_plan_free(&p->plan);
        if (kcu_dg_plan_make(st->dnn, &cfgs.cfg[i], cfgs.id[i], &p->plan) != CUDNN_STATUS_SUCCESS) continue;
        void *ws = NULL;
        if (p->plan.ws > 0 && kiln__cuda_scratch(st, (size_t)p->plan.ws, &ws, "cuDNN attention probe") != KILN_OK) {
            kiln__clear_error();
            continue;
        }
        memset(back, 0xff, n_qkv * sizeof(uint16_t));
        if (cudaMemsetAsync(d + 3 * n_qkv, 0xff, n_qkv * sizeof(uint16_t), st->stream) == cudaSuccess &&
            sdpa_exec(st, p, d, d + n_qkv, d + 2 * n_qkv, d + 4 * n_qkv, d + 3 * n_qkv, ws) == CUDNN_STATUS_SUCCESS &&
            cudaMemcpyAsync(back, d + 3 * n_qkv, n_qkv * sizeof(uint16_t), cudaMemcpyDeviceToHost, st->stream) ==
                cudaSuccess &&
            cudaStreamSynchronize(st->stream) == cudaSuccess) {
            /* row 0: all zeros (+0 or -0) or all NaN; the other rows the mean of V (1) */
            int zeros = 0, nans = 0, ones = 0;
            for (int j = 0; j < D; j++) {
                zeros += (back[j] & 0x7fff) == 0;
                nans += (back[j] & 0x7c00) == 0x7c00 && (back[j] & 0x3ff) != 0;
            }
            for (size_t j = D; j < n_qkv; j++) ones += back[j] == 0x3c00;
            if (ones == (int)(n_qkv - D)) result = zeros == D ? 1 : nans == D ? 2 : 3;
        }
        cudaGetLastError(); /* (a failed run leaves no error behind) */
        if (st->sdpa_masked[e] == 0 || st->sdpa_masked[e] == result)
            st->sdpa_masked[e] = (uint8_t)result;
        else
            st->sdpa_masked[e] = 3;
        if (st->verbose)
            fprintf(stderr, "kiln: cuDNN attention probe: engine %d gives %s for a row whose every key is masked\n",
                    e, result == 1 ? "zeros" : result == 2 ? "NaN" : "neither (or failed)");
    }
done:
    cudaGetLastError();
    if (dev) cudaStreamSynchronize(st->stream); /* (the copies are done before the buffer goes) */
    if (p) sdpa_plan_clear(p);
    free(p);
    kcu_dg_cfgs_free(&cfgs);
    kcu_dg_free(&dg);
    if (dev) cudaFree(dev);
    free(host);
    free(back);
}

int kiln__cu_sdpa_tactics(kiln_cuda_state *st, kiln_dtype t, const kcu_attn *g, int32_t *ids, int cap) {
    if (!st || !st->dnn || cap < 1 || !sdpa_takes(t, g)) return 0;
    const char *mode = getenv("KILN_CUDNN_SDPA"); /* 0: never; any: whatever cuDNN gives for masked rows */
    if (mode && strcmp(mode, "0") == 0) return 0;
    bool any = mode && strcmp(mode, "any") == 0;
    /* a mask may hide every key of a row: each engine must give what the layer does there */
    const int64_t *as = sdpa_add_strides(g);
    bool check = as && !any;
    if (check && !st->sdpa_probed) sdpa_probe(st);
    const uint8_t want_row = g->nan_to_zero ? 1 : 2;
    bool bcast = as && ((as[0] == 0 && g->B > 1) || (as[1] == 0 && g->H > 1) || (as[2] == 0 && g->Sq > 1));
    const char *env = getenv("KILN_CUDNN_CANDIDATES"); /* at most this many configs per graph (experiments) */
    int per = env && atoi(env) > 0 ? atoi(env) : cap;
    /* the graphs that describe the layer: the composite one, with a broadcast mask
     * described both ways, and, without mask, bias or cond, the SDPA operation */
    int variants[3], nv = 0, n = 0;
    variants[nv++] = SDPA_COMPOSITE;
    if (bcast) variants[nv++] = SDPA_COMPOSITE_S0;
    if (!as) variants[nv++] = SDPA_OP;
    for (int j = 0; j < nv; j++) {
        int v = variants[j];
        sdpa_key k;
        kcu_dg dg;
        kcu_dg_cfgs cfgs;
        kcu_dg_init(&dg);
        sdpa_key_make(&k, t, g, v ? KCU_DG_ID_BIT | v << KCU_DG_ID_USER_SHIFT : 0, NULL);
        sdpa_configs(st, &k, &dg, &cfgs);
        /* the room left, shared by the graphs left */
        int want = (cap - n) / (nv - j), got = 0, rtc = 0;
        for (int i = 0; i < cfgs.n && got < want && got < per; i++) {
            /* runtime-compiled configs (NVRTC: ~0.5 s a plan): the first 3 at most */
            if (check && st->sdpa_masked[kcu_dg_id_engine(cfgs.id[i])] != want_row) continue;
            if ((cfgs.flags[i] & KCU_DG_CFG_RUNTIME_COMPILED) && rtc++ >= 3) continue;
            ids[n++] = cfgs.id[i] | (int32_t)v << KCU_DG_ID_USER_SHIFT;
            got++;
        }
        kcu_dg_cfgs_free(&cfgs);
        kcu_dg_free(&dg);
    }
    if (n > 0) st->strict_tactics = true;
    return n;
}

/* The node's SDPA state (NULL: the args carry no node state). */
static sdpa_state *sdpa_state_of(const kiln_kernel_args *a) {
    kiln_cuda_node *ns = kiln__cuda_node(a);
    if (ns && !ns->conv) {
        ns->conv = kiln__calloc(1, sizeof(sdpa_state));
        if (ns->conv) ns->conv_free = sdpa_state_free;
    }
    return ns && ns->conv && ns->conv_free == sdpa_state_free ? ns->conv : NULL;
}

/* The plan of key k in s (made on first use; p->declined: none can be made). */
static kiln_status sdpa_plan_for(const kiln_kernel_args *a, sdpa_state *s, const sdpa_key *k, sdpa_plan **out) {
    sdpa_plan *p = kiln__plan_cache_find(&s->plans, &sdpa_plans, k);
    *out = p;
    if (p) return KILN_OK;
    kiln_cuda_state *st = KCU_STATE(a);
    if (!(p = kiln__calloc(1, sizeof *p)))
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s': cuDNN attention plan", KCU_NODE(a));
    kiln__plan_cache_put(&s->plans, &sdpa_plans, p);
    p->key = *k;
    p->declined = true;
    *out = p;
    kcu_dg_cfgs cfgs;
    sdpa_configs(st, k, &p->dg, &cfgs);
    int f = 0;
    while (f < cfgs.n && cfgs.id[f] != (k->tactic & ~KCU_DG_ID_USER)) f++;
    kiln_status r = KILN_OK;
    if (f < cfgs.n && kcu_dg_plan_make(st->dnn, &cfgs.cfg[f], k->tactic, &p->plan) == CUDNN_STATUS_SUCCESS) {
        p->declined = false;
    } else {
        char name[48], pn[256];
        kiln__cu_attention_tactic_describe(k->tactic, name, sizeof name);
        if (st->strict_tactics)
            r = KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': cuDNN attention config %s cannot be made here",
                          KCU_NODE(a), name);
        else if (!s->warned)
            fprintf(stderr,
                    "kiln: warning: node '%s': cuDNN attention config %s (chosen at build) is not available for "
                    "[B %lld, H %lld, Sq %lld, Sk %lld] with this cuDNN %zu and GPU; using kiln's kernel\n",
                    kiln_printable(KCU_NODE(a), pn, sizeof pn), name, (long long)k->B, (long long)k->H, (long long)k->Sq, (long long)k->Sk,
                    cudnnGetVersion());
        s->warned = true;
    }
    kcu_dg_cfgs_free(&cfgs);
    return r;
}

kiln_status kiln__cu_sdpa_run(const kiln_kernel_args *a, kiln_dtype t, const kcu_attn *g, const void *q,
                              const void *k, const void *v, const void *add, void *o, bool *handled) {
    kiln_cuda_state *st = KCU_STATE(a);
    *handled = false;
    if (!st->dnn || !sdpa_takes(t, g)) {
        if (st->strict_tactics)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s': cuDNN's fused attention does not take this layer",
                             KCU_NODE(a));
        return KILN_OK;
    }
    sdpa_state *s = sdpa_state_of(a), tmp;
    bool own = s == NULL;
    if (own) {
        memset(&tmp, 0, sizeof tmp);
        s = &tmp;
    }
    /* a cond becomes an additive mask of its own shape in scratch memory, after the workspace */
    const int64_t full[4] = {g->B, g->H, g->Sq, g->Sk};
    int64_t n_cond = 1;
    for (int i = 0; i < 4 && g->has_cond; i++) n_cond *= g->cs[i] ? full[i] : 1;
    const void *ptrs[5] = {q, k, v, o, g->has_cond ? NULL : add}; /* (scratch: 256-byte aligned) */
    sdpa_key key;
    sdpa_key_make(&key, t, g, kiln__cuda_tactic(a), ptrs);
    sdpa_plan *p = NULL;
    kiln_status r = sdpa_plan_for(a, s, &key, &p);
    if (r == KILN_OK && !p->declined) {
        void *ws = NULL;
        size_t ws_bytes = ((size_t)p->plan.ws + 255) & ~(size_t)255;
        size_t need = ws_bytes + (g->has_cond ? (size_t)n_cond * kiln_dtype_size(t) : 0);
        if (need) r = kiln__cuda_scratch(st, need, &ws, KCU_NODE(a));
        if (r == KILN_OK && g->has_cond) {
            void *m = (char *)ws + ws_bytes;
            cudaError_t ce = kcu_attn_cond_add(t, add, n_cond, g->cond_fill_if, g->fill, m, KCU_STREAM(a));
            if (ce != cudaSuccess) r = kiln__cuda_fail(ce, KCU_NODE(a), "the cond as an additive mask");
            add = m;
        }
        if (r == KILN_OK) {
            cudnnStatus_t cs = sdpa_exec(st, p, q, k, v, add, o, p->plan.ws ? ws : NULL);
            if (cs != CUDNN_STATUS_SUCCESS)
                r = KILN_FAIL(KILN_ERR_DEVICE, "node '%s': cuDNN attention graph execution failed: %s",
                              KCU_NODE(a), cudnnGetErrorString(cs));
            else
                *handled = true;
        }
    }
    if (own) kiln__plan_cache_clear(&tmp.plans, &sdpa_plans);
    return r;
}

#else
typedef int kiln_cuda_sdpa_disabled;
#endif
