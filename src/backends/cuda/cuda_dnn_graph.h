/* cuda_dnn_graph.h -- cuDNN's graph (backend) API from C, for any op of the
 * CUDA backend that wants a fused cuDNN operation graph (cuda_conv.c: a
 * convolution with its bias, residual and activation as one graph).
 *
 * Use:
 *   kcu_dg g;  kcu_dg_init(&g);
 *   kcu_dg_tensor(&g, ...) for every tensor (real ones with a unique id the
 *     variant pack names, virtual ones for values between operations);
 *   kcu_dg_conv_fwd / kcu_dg_pointwise for the operations;
 *   kcu_dg_finalize(&g, handle)                    -> the operation graph;
 *   kcu_dg_configs(&g, &cfgs)                      -> engine configs of
 *     cuDNN's heuristics (modes A, B, then the fallback list), deduplicated,
 *     each with a stable tactic id (kcu_dg_cfgs.id);
 *   kcu_dg_plan_make(handle, cfg, &plan)           -> an execution plan;
 *   kcu_dg_execute(handle, &plan, uids, ptrs, ws)  -> runs it on the handle's stream.
 * kcu_dg_free / kcu_dg_cfgs_free / kcu_dg_plan_free release everything.
 *
 * Functions return cudnnStatus_t: whoever builds a graph decides whether a
 * failure means "cuDNN cannot run this, take another path" (setup, no
 * config) or an error (execution).
 *
 * Tactic ids: a config's id is KCU_DG_ID_BIT | (engine global index & 0xff)
 * << 20 | a 20-bit hash of its knob choices; bits 28-29 (KCU_DG_ID_USER)
 * are left to the caller (cuda_conv.c: how the input is laid out). The same cuDNN, device and
 * graph give the same configs, so an engine file that stores the id
 * re-creates the same execution plan at load without timing anything; with
 * another cuDNN the id may be missing, and the caller falls back to the
 * heuristics' first config. */
#ifndef KILN_CUDA_DNN_GRAPH_H
#define KILN_CUDA_DNN_GRAPH_H

#if KILN_HAVE_CUDNN

#include <cudnn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define KCU_DG_ID_BIT 0x40000000
/* Whether tactic id `id` names a graph engine config. */
static inline bool kcu_dg_is_id(int32_t id) { return id > 0 && (id & KCU_DG_ID_BIT); }
/* The engine global index of a config id (its low 10 bits). */
static inline int kcu_dg_id_engine(int32_t id) { return (id >> 20) & 0xff; }
/* The caller's two bits of an id (0 in the configs listed). */
#define KCU_DG_ID_USER_SHIFT 28
#define KCU_DG_ID_USER ((int32_t)3 << KCU_DG_ID_USER_SHIFT)

/* The byte alignment (16, 8, 4 or 2) a tensor descriptor may claim for data at p. */
static inline int32_t kcu_dg_align(const void *p) {
    uintptr_t u = (uintptr_t)p;
    return u % 16 == 0 ? 16 : u % 8 == 0 ? 8 : u % 4 == 0 ? 4 : 2;
}

#define KCU_DG_MAX_DESC 48
#define KCU_DG_MAX_OPS 12

/* An operation graph: the descriptors it owns (tensors, operation and
 * pointwise descriptors) and, once finalized, the graph descriptor. */
typedef struct kcu_dg {
    cudnnBackendDescriptor_t own[KCU_DG_MAX_DESC];
    int n_own;
    cudnnBackendDescriptor_t ops[KCU_DG_MAX_OPS];
    int n_ops;
    cudnnBackendDescriptor_t graph;
} kcu_dg;

KILN_PRIVATE void kcu_dg_init(kcu_dg *g);
KILN_PRIVATE void kcu_dg_free(kcu_dg *g);

/* A tensor: dtype, rank (<= 8) dims and element strides, byte alignment of
 * its data (16 at most is asked for), virtual (between operations of the
 * graph) or real (uid names its pointer in the variant pack). */
KILN_PRIVATE cudnnStatus_t kcu_dg_tensor(kcu_dg *g, int64_t uid, cudnnDataType_t dt, int rank,
                                         const int64_t *dims, const int64_t *strides, int64_t align,
                                         bool virt, cudnnBackendDescriptor_t *out);

/* A float scalar passed by value at execution (rank dims of 1: the second
 * operand of a pointwise op over rank-`rank` tensors); the variant pack
 * names a host float for uid. */
KILN_PRIVATE cudnnStatus_t kcu_dg_scalar(kcu_dg *g, int64_t uid, int rank, cudnnBackendDescriptor_t *out);

/* c = a b over the last two dims (batch dims broadcast where 1), accumulated
 * in `comp`. */
KILN_PRIVATE cudnnStatus_t kcu_dg_matmul(kcu_dg *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                                         cudnnBackendDescriptor_t c, cudnnDataType_t comp);

/* y = reduce(x) over the dims where y has size 1 (CUDNN_REDUCE_TENSOR_MAX,
 * CUDNN_REDUCE_TENSOR_ADD), in fp32. */
KILN_PRIVATE cudnnStatus_t kcu_dg_reduction(kcu_dg *g, cudnnReduceTensorOp_t op, cudnnBackendDescriptor_t x,
                                            cudnnBackendDescriptor_t y);

/* y = conv(x, w) (cross-correlation), nsp spatial dims, pre/post paddings,
 * strides, dilations; accumulation in `comp` (CUDNN_DATA_FLOAT). */
KILN_PRIVATE cudnnStatus_t kcu_dg_conv_fwd(kcu_dg *g, cudnnBackendDescriptor_t x,
                                           cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y,
                                           int nsp, const int64_t *pre, const int64_t *post,
                                           const int64_t *stride, const int64_t *dil,
                                           cudnnDataType_t comp);

/* Parameters of a pointwise operation (the ones its mode reads). */
typedef struct kcu_dg_pw {
    double relu_lower, relu_upper, relu_slope; /* RELU_FWD: clips and slope below the lower clip */
    double swish_beta;                         /* SWISH_FWD: x * sigmoid(beta x) */
} kcu_dg_pw;
/* y = mode(x[, b]) in fp32 (b: second operand of binary modes, broadcast
 * where its dims are 1; NULL for unary modes). p may be NULL (defaults:
 * plain ReLU, swish beta 1). */
KILN_PRIVATE cudnnStatus_t kcu_dg_pointwise(kcu_dg *g, cudnnPointwiseMode_t mode,
                                            cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                            cudnnBackendDescriptor_t y, const kcu_dg_pw *p);

/* o = softmax(scale * q k^T) v as ONE operation, cuDNN's SDPA forward
 * (CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, cuDNN 9.13.1 and later;
 * NOT_SUPPORTED before): q [B,H,Sq,D], k [B,H,Sk,D] (not transposed),
 * v [B,H,Sk,Dv], o [B,H,Sq,Dv], scale a by-value float (kcu_dg_scalar);
 * no softmax statistics output (inference). */
KILN_PRIVATE cudnnStatus_t kcu_dg_sdpa_fwd(kcu_dg *g, cudnnBackendDescriptor_t q, cudnnBackendDescriptor_t k,
                                           cudnnBackendDescriptor_t v, cudnnBackendDescriptor_t o,
                                           cudnnBackendDescriptor_t scale);

/* Finalizes the operation graph of the operations added so far. */
KILN_PRIVATE cudnnStatus_t kcu_dg_finalize(kcu_dg *g, cudnnHandle_t h);

/* Engine configs for a finalized graph. */
#define KCU_DG_MAX_CFG 48
enum {
    KCU_DG_CFG_RUNTIME_COMPILED = 1, /* the plan compiles a kernel when it is made (slow) */
    KCU_DG_CFG_HEUR_A = 2,           /* listed by heuristics mode A */
    KCU_DG_CFG_HEUR_B = 4,           /* by mode B */
    KCU_DG_CFG_FALLBACK = 8,         /* by the fallback list */
};
/* Why a config the heuristics returned is not listed (kcu_dg_cfgs.dropped_why). */
enum { KCU_DG_DROP_REDUCED = 1, KCU_DG_DROP_FFT = 2, KCU_DG_DROP_UNREADABLE = 3 };
typedef struct kcu_dg_cfgs {
    int n;
    cudnnBackendDescriptor_t cfg[KCU_DG_MAX_CFG];
    int32_t id[KCU_DG_MAX_CFG];
    uint32_t flags[KCU_DG_MAX_CFG];
    /* what each heuristics query (modes A, B, fallback) answered: its status and
     * how many configs it returned before deduplication and the filters */
    cudnnStatus_t heur_status[3];
    int heur_count[3];
    /* the configs left out by the filters: engine global index (-1: unread), KCU_DG_DROP_* */
    int n_dropped;
    int16_t dropped_engine[KCU_DG_MAX_CFG];
    uint8_t dropped_why[KCU_DG_MAX_CFG];
} kcu_dg_cfgs;
/* Lists the configs of heuristics modes A, B and the fallback list (in that
 * order, each id once), without those that accumulate in reduced precision
 * or use FFT. cfgs->n may be 0 (no engine runs the graph). */
KILN_PRIVATE cudnnStatus_t kcu_dg_configs(const kcu_dg *g, kcu_dg_cfgs *cfgs);
KILN_PRIVATE void kcu_dg_cfgs_free(kcu_dg_cfgs *cfgs);

/* Why finalized graph g has the configs it has (KILN_CUDA_VERBOSE's account,
 * to f): each heuristics mode's status and count and the configs the
 * filters dropped (cfgs: kcu_dg_configs' answer, or NULL), then the
 * engines cuDNN has for the graph (CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT)
 * and, per engine, whether it and a config of it (no knobs set) finalize
 * for the graph: the status names, with cuDNN's last error message for an
 * engine that fails other than by its graph pattern. */
KILN_PRIVATE void kcu_dg_explain(const kcu_dg *g, const kcu_dg_cfgs *cfgs, FILE *f);

/* An execution plan and the variant pack of its last run. */
#define KCU_DG_MAX_UIDS 8
typedef struct kcu_dg_plan {
    cudnnBackendDescriptor_t plan;
    cudnnBackendDescriptor_t cfg; /* its engine config (owned: kept alive with the plan) */
    int64_t ws;              /* workspace bytes */
    int32_t id;              /* tactic id of its config */
    cudnnBackendDescriptor_t vp;
    int n_vp;
    int64_t vp_uids[KCU_DG_MAX_UIDS];
    void *vp_ptrs[KCU_DG_MAX_UIDS];
    void *vp_ws;
} kcu_dg_plan;
/* Makes the plan of config `*cfg` whose id is `id` (NOT_SUPPORTED & co:
 * this config cannot run the graph here). On success the plan owns the
 * config: *cfg becomes NULL. */
KILN_PRIVATE cudnnStatus_t kcu_dg_plan_make(cudnnHandle_t h, cudnnBackendDescriptor_t *cfg,
                                            int32_t id, kcu_dg_plan *p);
/* Runs the plan with pointers ptrs[i] for uids[i] (n <= KCU_DG_MAX_UIDS)
 * and workspace ws (p->ws bytes); the variant pack is kept while the
 * pointers stay the same. */
KILN_PRIVATE cudnnStatus_t kcu_dg_execute(cudnnHandle_t h, kcu_dg_plan *p, int n,
                                          const int64_t *uids, void *const *ptrs, void *ws);
KILN_PRIVATE void kcu_dg_plan_free(kcu_dg_plan *p);

/* "cudnn-eng<engine>.<hash>" for a config id, into buf. */
KILN_PRIVATE void kcu_dg_id_name(int32_t id, char *buf, size_t n);

#endif /* KILN_HAVE_CUDNN */

#endif
