/* cuda_dnn_graph.c -- cuDNN's graph (backend) API from C (see cuda_dnn_graph.h). */
#if KILN_HAVE_CUDA && KILN_HAVE_CUDNN

#include "backends/cuda/cuda_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DG_TRY(call)                                         \
    do {                                                     \
        cudnnStatus_t dg_s_ = (call);                        \
        if (dg_s_ != CUDNN_STATUS_SUCCESS) return dg_s_;     \
    } while (0)

static cudnnStatus_t set_attr(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                              cudnnBackendAttributeType_t type, int64_t n, const void *v) {
    return cudnnBackendSetAttribute(d, name, type, n, v);
}

void kcu_dg_init(kcu_dg *g) { memset(g, 0, sizeof *g); }

void kcu_dg_free(kcu_dg *g) {
    if (g->graph) cudnnBackendDestroyDescriptor(g->graph);
    for (int i = g->n_own - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(g->own[i]);
    memset(g, 0, sizeof *g);
}

/* A new descriptor of type t owned by g. */
static cudnnStatus_t dg_new(kcu_dg *g, cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *out) {
    *out = NULL;
    if (g->n_own >= KCU_DG_MAX_DESC) return CUDNN_STATUS_NOT_SUPPORTED;
    DG_TRY(cudnnBackendCreateDescriptor(t, out));
    g->own[g->n_own++] = *out;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t kcu_dg_tensor(kcu_dg *g, int64_t uid, cudnnDataType_t dt, int rank, const int64_t *dims,
                            const int64_t *strides, int64_t align, bool virt,
                            cudnnBackendDescriptor_t *out) {
    cudnnBackendDescriptor_t d;
    DG_TRY(dg_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, &d));
    DG_TRY(set_attr(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    DG_TRY(set_attr(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, dims));
    DG_TRY(set_attr(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, strides));
    DG_TRY(set_attr(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    DG_TRY(set_attr(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    bool v = virt;
    DG_TRY(set_attr(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v));
    DG_TRY(cudnnBackendFinalize(d));
    *out = d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t kcu_dg_scalar(kcu_dg *g, int64_t uid, int rank, cudnnBackendDescriptor_t *out) {
    cudnnBackendDescriptor_t d;
    int64_t ones[8] = {1, 1, 1, 1, 1, 1, 1, 1}, align = 16;
    cudnnDataType_t dt = CUDNN_DATA_FLOAT;
    bool by_value = true;
    if (rank < 1 || rank > 8) return CUDNN_STATUS_BAD_PARAM;
    DG_TRY(dg_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, &d));
    DG_TRY(set_attr(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    DG_TRY(set_attr(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, ones));
    DG_TRY(set_attr(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, ones));
    DG_TRY(set_attr(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    DG_TRY(set_attr(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
    DG_TRY(set_attr(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value));
    DG_TRY(cudnnBackendFinalize(d));
    *out = d;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t dg_add_op(kcu_dg *g, cudnnBackendDescriptor_t op) {
    if (g->n_ops >= KCU_DG_MAX_OPS) return CUDNN_STATUS_NOT_SUPPORTED;
    g->ops[g->n_ops++] = op;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t kcu_dg_conv_fwd(kcu_dg *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t w,
                              cudnnBackendDescriptor_t y, int nsp, const int64_t *pre,
                              const int64_t *post, const int64_t *stride, const int64_t *dil,
                              cudnnDataType_t comp) {
    cudnnBackendDescriptor_t c, op;
    DG_TRY(dg_new(g, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &c));
    int64_t ns = nsp;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    DG_TRY(set_attr(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    DG_TRY(set_attr(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    DG_TRY(set_attr(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &ns));
    DG_TRY(set_attr(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, nsp, pre));
    DG_TRY(set_attr(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, nsp, post));
    DG_TRY(set_attr(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, nsp, stride));
    DG_TRY(set_attr(c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, nsp, dil));
    DG_TRY(cudnnBackendFinalize(c));
    DG_TRY(dg_new(g, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &op));
    /* alpha/beta are double for double compute, float otherwise */
    float af = 1.0f, bf = 0.0f;
    double ad = 1.0, bd = 0.0;
    bool dbl = comp == CUDNN_DATA_DOUBLE;
    cudnnBackendAttributeType_t abt = dbl ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT;
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, abt, 1,
                    dbl ? (const void *)&ad : (const void *)&af));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, abt, 1,
                    dbl ? (const void *)&bd : (const void *)&bf));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    DG_TRY(cudnnBackendFinalize(op));
    return dg_add_op(g, op);
}

cudnnStatus_t kcu_dg_matmul(kcu_dg *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                            cudnnBackendDescriptor_t c, cudnnDataType_t comp) {
    cudnnBackendDescriptor_t mm, op;
    DG_TRY(dg_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, &mm));
    DG_TRY(set_attr(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    DG_TRY(cudnnBackendFinalize(mm));
    DG_TRY(dg_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, &op));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm));
    DG_TRY(cudnnBackendFinalize(op));
    return dg_add_op(g, op);
}

cudnnStatus_t kcu_dg_reduction(kcu_dg *g, cudnnReduceTensorOp_t rop, cudnnBackendDescriptor_t x,
                               cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t rd, op;
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    DG_TRY(dg_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, &rd));
    DG_TRY(set_attr(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    DG_TRY(set_attr(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &rop));
    DG_TRY(cudnnBackendFinalize(rd));
    DG_TRY(dg_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, &op));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd));
    DG_TRY(cudnnBackendFinalize(op));
    return dg_add_op(g, op);
}

cudnnStatus_t kcu_dg_pointwise(kcu_dg *g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                               cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y, const kcu_dg_pw *p) {
    kcu_dg_pw dflt = {.relu_lower = 0, .relu_upper = 3.4028234663852886e38, .relu_slope = 0, .swish_beta = 1};
    if (!p) p = &dflt;
    cudnnBackendDescriptor_t pw, op;
    DG_TRY(dg_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw));
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    DG_TRY(set_attr(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
    DG_TRY(set_attr(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
    if (mode == CUDNN_POINTWISE_RELU_FWD) {
        double up = p->relu_upper > 3.4028234663852886e38 ? 3.4028234663852886e38 : p->relu_upper;
        DG_TRY(set_attr(pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP, CUDNN_TYPE_DOUBLE, 1, &p->relu_lower));
        DG_TRY(set_attr(pw, CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP, CUDNN_TYPE_DOUBLE, 1, &up));
        DG_TRY(set_attr(pw, CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE, CUDNN_TYPE_DOUBLE, 1, &p->relu_slope));
    }
    if (mode == CUDNN_POINTWISE_SWISH_FWD)
        DG_TRY(set_attr(pw, CUDNN_ATTR_POINTWISE_SWISH_BETA, CUDNN_TYPE_DOUBLE, 1, &p->swish_beta));
    DG_TRY(cudnnBackendFinalize(pw));
    DG_TRY(dg_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, &op));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    if (b) DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    DG_TRY(cudnnBackendFinalize(op));
    return dg_add_op(g, op);
}

cudnnStatus_t kcu_dg_sdpa_fwd(kcu_dg *g, cudnnBackendDescriptor_t q, cudnnBackendDescriptor_t k,
                              cudnnBackendDescriptor_t v, cudnnBackendDescriptor_t o,
                              cudnnBackendDescriptor_t scale) {
#if CUDNN_VERSION >= 91301
    if (cudnnGetVersion() < 91301) return CUDNN_STATUS_NOT_SUPPORTED;
    cudnnBackendDescriptor_t op;
    DG_TRY(dg_new(g, CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, &op));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &q));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o));
    DG_TRY(set_attr(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &scale));
    DG_TRY(cudnnBackendFinalize(op));
    return dg_add_op(g, op);
#else
    (void)g, (void)q, (void)k, (void)v, (void)o, (void)scale;
    return CUDNN_STATUS_NOT_SUPPORTED;
#endif
}

cudnnStatus_t kcu_dg_finalize(kcu_dg *g, cudnnHandle_t h) {
    if (g->graph || g->n_ops == 0) return CUDNN_STATUS_BAD_PARAM;
    DG_TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g->graph));
    DG_TRY(set_attr(g->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    DG_TRY(set_attr(g->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->n_ops, g->ops));
    return cudnnBackendFinalize(g->graph);
}

/* ---- engine configs --------------------------------------------------------------- */

/* FNV-1a over 64-bit words */
static uint64_t fnv(uint64_t h, int64_t v) {
    for (int i = 0; i < 8; i++) {
        h ^= (uint64_t)(v >> (8 * i)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The tactic id of config c, its flags (runtime compilation) and its
 * engine's global index (-1 until read); 0, or KCU_DG_DROP_* when the
 * config's engine is unusable for kiln (reduced-precision accumulation,
 * FFT) or cannot be read. */
static int cfg_identity(cudnnBackendDescriptor_t c, int32_t *id, uint32_t *flags, int64_t *engine) {
    cudnnBackendDescriptor_t eng = NULL, knobs[CUDNN_KNOB_TYPE_COUNTS] = {0};
    int why = KCU_DG_DROP_UNREADABLE;
    int nk_made = 0;
    *engine = -1;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS) {
        eng = NULL;
        goto done;
    }
    int64_t cnt = 0;
    if (cudnnBackendGetAttribute(c, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt,
                                 &eng) != CUDNN_STATUS_SUCCESS)
        goto done;
    int64_t gi = -1;
    if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, &gi) !=
        CUDNN_STATUS_SUCCESS)
        goto done;
    *engine = gi;
    cudnnBackendNumericalNote_t nn[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    cnt = 0;
    if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &cnt, nn) != CUDNN_STATUS_SUCCESS)
        cnt = 0;
    for (int64_t i = 0; i < cnt && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
        if (nn[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION || nn[i] == CUDNN_NUMERICAL_NOTE_FFT) {
            why = nn[i] == CUDNN_NUMERICAL_NOTE_FFT ? KCU_DG_DROP_FFT : KCU_DG_DROP_REDUCED;
            goto done;
        }
    cudnnBackendBehaviorNote_t bn[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    cnt = 0;
    if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                 CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &cnt, bn) != CUDNN_STATUS_SUCCESS)
        cnt = 0;
    *flags = 0;
    for (int64_t i = 0; i < cnt && i < CUDNN_BEHAVIOR_NOTE_TYPE_COUNT; i++)
        if (bn[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) *flags |= KCU_DG_CFG_RUNTIME_COMPILED;
    for (; nk_made < CUDNN_KNOB_TYPE_COUNTS; nk_made++)
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[nk_made]) !=
            CUDNN_STATUS_SUCCESS)
            goto done;
    int64_t nk = 0;
    if (cudnnBackendGetAttribute(c, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 CUDNN_KNOB_TYPE_COUNTS, &nk, knobs) != CUDNN_STATUS_SUCCESS)
        goto done;
    /* (type, value) pairs in type order: the hash does not depend on the listing order */
    int64_t kv[CUDNN_KNOB_TYPE_COUNTS][2];
    int n = 0;
    for (int64_t i = 0; i < nk && i < CUDNN_KNOB_TYPE_COUNTS; i++) {
        cudnnBackendKnobType_t t;
        int64_t v = 0;
        if (cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1,
                                     &cnt, &t) != CUDNN_STATUS_SUCCESS ||
            cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &cnt,
                                     &v) != CUDNN_STATUS_SUCCESS)
            goto done;
        int j = n++;
        while (j > 0 && kv[j - 1][0] > (int64_t)t) {
            kv[j][0] = kv[j - 1][0];
            kv[j][1] = kv[j - 1][1];
            j--;
        }
        kv[j][0] = (int64_t)t;
        kv[j][1] = v;
    }
    uint64_t h = fnv(0xcbf29ce484222325ull, gi);
    for (int i = 0; i < n; i++) h = fnv(fnv(h, kv[i][0]), kv[i][1]);
    *id = (int32_t)(KCU_DG_ID_BIT | ((uint32_t)(gi & 0xff) << 20) | (uint32_t)((h ^ (h >> 20) ^ (h >> 40)) & 0xfffff));
    why = 0;
done:
    for (int i = 0; i < nk_made; i++) cudnnBackendDestroyDescriptor(knobs[i]);
    if (eng) cudnnBackendDestroyDescriptor(eng);
    return why;
}

/* Appends the configs of heuristics mode `mode` (query number q of
 * kcu_dg_configs: A, B, fallback) not listed yet. */
static cudnnStatus_t configs_of(const kcu_dg *g, cudnnBackendHeurMode_t mode, int q, uint32_t flag,
                                kcu_dg_cfgs *out) {
    cudnnBackendDescriptor_t heur = NULL;
    cudnnBackendDescriptor_t got[KCU_DG_MAX_CFG] = {0};
    int64_t count = 0, made = 0;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
    out->heur_status[q] = s;
    if (s != CUDNN_STATUS_SUCCESS) return s;
    if ((s = set_attr(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->graph)) ||
        (s = set_attr(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode)) ||
        (s = cudnnBackendFinalize(heur)) ||
        (s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                      &count, NULL)))
        goto done;
    if (count > KCU_DG_MAX_CFG) count = KCU_DG_MAX_CFG;
    for (; made < count; made++)
        if ((s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &got[made])) != CUDNN_STATUS_SUCCESS)
            goto done;
    int64_t n = 0;
    if (count > 0 && (s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                   count, &n, got)) != CUDNN_STATUS_SUCCESS)
        goto done;
    out->heur_count[q] = (int)n;
    for (int64_t i = 0; i < n && i < count; i++) {
        int32_t id = 0;
        uint32_t fl = 0;
        int64_t engine = -1;
        int why = cfg_identity(got[i], &id, &fl, &engine);
        if (why) {
            if (out->n_dropped < KCU_DG_MAX_CFG) {
                out->dropped_engine[out->n_dropped] = (int16_t)(engine >= 0 && engine < 0x7fff ? engine : -1);
                out->dropped_why[out->n_dropped++] = (uint8_t)why;
            }
            continue;
        }
        int k = 0;
        while (k < out->n && out->id[k] != id) k++;
        if (k < out->n) {
            out->flags[k] |= flag;
            continue;
        }
        if (out->n >= KCU_DG_MAX_CFG) break;
        out->cfg[out->n] = got[i]; /* now owned by out */
        got[i] = NULL;
        out->id[out->n] = id;
        out->flags[out->n] = fl | flag;
        out->n++;
    }
done:
    out->heur_status[q] = s;
    for (int64_t i = 0; i < made; i++)
        if (got[i]) cudnnBackendDestroyDescriptor(got[i]);
    cudnnBackendDestroyDescriptor(heur);
    return s;
}

cudnnStatus_t kcu_dg_configs(const kcu_dg *g, kcu_dg_cfgs *cfgs) {
    memset(cfgs, 0, sizeof *cfgs);
    if (!g->graph) return CUDNN_STATUS_BAD_PARAM;
    /* a mode that fails (e.g. B on an unknown device) just lists nothing */
    cudnnStatus_t sa = configs_of(g, CUDNN_HEUR_MODE_A, 0, KCU_DG_CFG_HEUR_A, cfgs);
    cudnnStatus_t sb = configs_of(g, CUDNN_HEUR_MODE_B, 1, KCU_DG_CFG_HEUR_B, cfgs);
    cudnnStatus_t sf = configs_of(g, CUDNN_HEUR_MODE_FALLBACK, 2, KCU_DG_CFG_FALLBACK, cfgs);
    if (cfgs->n == 0 && sa != CUDNN_STATUS_SUCCESS) return sa;
    if (cfgs->n == 0 && sb != CUDNN_STATUS_SUCCESS) return sb;
    if (cfgs->n == 0 && sf != CUDNN_STATUS_SUCCESS) return sf;
    return CUDNN_STATUS_SUCCESS;
}

void kcu_dg_cfgs_free(kcu_dg_cfgs *cfgs) {
    for (int i = 0; i < cfgs->n; i++)
        if (cfgs->cfg[i]) cudnnBackendDestroyDescriptor(cfgs->cfg[i]);
    memset(cfgs, 0, sizeof *cfgs);
}

/* ---- diagnostics --------------------------------------------------------------------- */

/* Appends printf-style text to the string buf of capacity n (cut short when full). */
static void str_add(char *buf, size_t n, const char *fmt, ...) {
    size_t len = strlen(buf);
    if (len + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, n - len, fmt, ap);
    va_end(ap);
}

/* " rtc" / " reduced" when finalized engine e compiles at run time / reduces in reduced precision. */
static void engine_notes(cudnnBackendDescriptor_t e, char *buf, size_t n) {
    cudnnBackendBehaviorNote_t bn[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    cudnnBackendNumericalNote_t nn[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t cnt = 0;
    if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                 CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &cnt, bn) == CUDNN_STATUS_SUCCESS)
        for (int64_t i = 0; i < cnt && i < CUDNN_BEHAVIOR_NOTE_TYPE_COUNT; i++)
            if (bn[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) str_add(buf, n, " rtc");
    cnt = 0;
    if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &cnt, nn) == CUDNN_STATUS_SUCCESS)
        for (int64_t i = 0; i < cnt && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++) {
            if (nn[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) str_add(buf, n, " reduced");
            if (nn[i] == CUDNN_NUMERICAL_NOTE_FFT) str_add(buf, n, " fft");
        }
}

void kcu_dg_explain(const kcu_dg *g, const kcu_dg_cfgs *c, FILE *f) {
    static const char *const drop_name[] = {"?", "reduced-precision reduction", "FFT", "unreadable"};
    static const char *const mode_name[3] = {"A", "B", "fallback"};
    if (c) {
        fprintf(f, "kiln:   heuristics:");
        for (int m = 0; m < 3; m++)
            fprintf(f, " mode %s %d (%s)%s", mode_name[m], c->heur_count[m], cudnnGetErrorString(c->heur_status[m]),
                    m < 2 ? "," : ";");
        fprintf(f, " %d listed", c->n);
        for (int i = 0; i < c->n_dropped; i++)
            fprintf(f, "%s engine %d (%s)", i ? "," : "; dropped:", c->dropped_engine[i],
                    drop_name[c->dropped_why[i] < 4 ? c->dropped_why[i] : 0]);
        fputc('\n', f);
    }
    if (!g->graph) return;
    int64_t total = 0, got = 0;
    cudnnStatus_t s = cudnnBackendGetAttribute(g->graph, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT,
                                               CUDNN_TYPE_INT64, 1, &got, &total);
    if (s != CUDNN_STATUS_SUCCESS) {
        fprintf(f, "kiln:   engines: global count not read (%s)\n", cudnnGetErrorString(s));
        return;
    }
    /* the engines that take the graph (with their config's status), and the others grouped by status */
    enum { GROUPS = 8 };
    char ok[640] = "", idx[GROUPS][384], msg[GROUPS][200];
    cudnnStatus_t gst[GROUPS];
    int n_groups = 0;
    for (int64_t i = 0; i < total; i++) {
        cudnnBackendDescriptor_t e = NULL, cfg = NULL;
        char last[200] = "";
        cudnnStatus_t es = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e);
        if (es != CUDNN_STATUS_SUCCESS) e = NULL;
        if (es == CUDNN_STATUS_SUCCESS)
            es = set_attr(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->graph);
        if (es == CUDNN_STATUS_SUCCESS) es = set_attr(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &i);
        if (es == CUDNN_STATUS_SUCCESS) es = cudnnBackendFinalize(e);
        if (es != CUDNN_STATUS_SUCCESS) cudnnGetLastErrorString(last, sizeof last);
        if (es == CUDNN_STATUS_SUCCESS) {
            cudnnStatus_t cs = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg);
            if (cs != CUDNN_STATUS_SUCCESS) cfg = NULL;
            if (cs == CUDNN_STATUS_SUCCESS)
                cs = set_attr(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &e);
            if (cs == CUDNN_STATUS_SUCCESS) cs = cudnnBackendFinalize(cfg);
            char notes[64] = "";
            engine_notes(e, notes, sizeof notes);
            str_add(ok, sizeof ok, " %lld (config %s%s)", (long long)i, cudnnGetErrorString(cs), notes);
        } else {
            int k = 0;
            while (k < n_groups && gst[k] != es) k++;
            if (k == n_groups && n_groups < GROUPS) {
                gst[k] = es;
                idx[k][0] = 0;
                snprintf(msg[k], sizeof msg[k], "%s", last);
                for (char *q = msg[k]; *q; q++)
                    if (*q == '\n' || *q == '\r') *q = ' ';
                n_groups++;
            }
            if (k < n_groups) str_add(idx[k], sizeof idx[k], " %lld", (long long)i);
        }
        if (cfg) cudnnBackendDestroyDescriptor(cfg);
        if (e) cudnnBackendDestroyDescriptor(e);
    }
    fprintf(f, "kiln:   engines: %lld; taking the graph:%s\n", (long long)total, ok[0] ? ok : " none");
    for (int k = 0; k < n_groups; k++)
        fprintf(f, "kiln:   engines%s: %s%s%s\n", idx[k], cudnnGetErrorString(gst[k]), msg[k][0] ? ": " : "",
                msg[k]);
}

/* ---- plans -------------------------------------------------------------------------- */

void kcu_dg_plan_free(kcu_dg_plan *p) {
    if (p->vp) cudnnBackendDestroyDescriptor(p->vp);
    if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
    if (p->cfg) cudnnBackendDestroyDescriptor(p->cfg);
    memset(p, 0, sizeof *p);
}

cudnnStatus_t kcu_dg_plan_make(cudnnHandle_t h, cudnnBackendDescriptor_t *cfg, int32_t id, kcu_dg_plan *p) {
    memset(p, 0, sizeof *p);
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p->plan);
    if (s != CUDNN_STATUS_SUCCESS) {
        p->plan = NULL;
        return s;
    }
    int64_t cnt = 0;
    if ((s = set_attr(p->plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h)) ||
        (s = set_attr(p->plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, cfg)) ||
        (s = cudnnBackendFinalize(p->plan)) ||
        (s = cudnnBackendGetAttribute(p->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt,
                                      &p->ws))) {
        kcu_dg_plan_free(p);
        return s;
    }
    if (p->ws < 0) p->ws = 0;
    p->id = id;
    p->cfg = *cfg;
    *cfg = NULL;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t kcu_dg_execute(cudnnHandle_t h, kcu_dg_plan *p, int n, const int64_t *uids, void *const *ptrs,
                             void *ws) {
    if (n > KCU_DG_MAX_UIDS || !p->plan) return CUDNN_STATUS_BAD_PARAM;
    bool same = p->vp && p->n_vp == n && p->vp_ws == ws;
    for (int i = 0; same && i < n; i++) same = p->vp_uids[i] == uids[i] && p->vp_ptrs[i] == ptrs[i];
    if (!same) {
        if (p->vp) cudnnBackendDestroyDescriptor(p->vp);
        p->vp = NULL;
        cudnnBackendDescriptor_t vp;
        DG_TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
        cudnnStatus_t s;
        if ((s = set_attr(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids)) ||
            (s = set_attr(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs)) ||
            (s = set_attr(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws)) ||
            (s = cudnnBackendFinalize(vp))) {
            cudnnBackendDestroyDescriptor(vp);
            return s;
        }
        p->vp = vp;
        p->n_vp = n;
        p->vp_ws = ws;
        for (int i = 0; i < n; i++) {
            p->vp_uids[i] = uids[i];
            p->vp_ptrs[i] = ptrs[i];
        }
    }
    return cudnnBackendExecute(h, p->plan, p->vp);
}

void kcu_dg_id_name(int32_t id, char *buf, size_t n) {
    snprintf(buf, n, "cudnn-eng%d.%05x", kcu_dg_id_engine(id), (unsigned)(id & 0xfffff));
}

#else
typedef int kiln_cuda_dnn_graph_disabled;
#endif
