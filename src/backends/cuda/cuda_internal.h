/* cuda_internal.h -- private to the CUDA backend (the .c files of src/backends/cuda).
 *
 * Layout of the backend:
 *   cuda_backend.c   the kiln_backend_i vtable: per-context state (device,
 *                    stream, cuBLASLt/cuDNN handles, workspaces), memory,
 *                    copies, dispatch of a node to its kernel-table entry.
 *   cuda_table.c     THE kernel table: one line per supported op id.
 *   cuda_util.c      geometry planners (broadcast, strided copy), reading
 *                    small integer inputs on the host, scratch memory.
 *   cuda_ops_*.c     per op family: `supports` (dtype checks on the graph)
 *                    and `run` (attributes -> launcher arguments).
 *   cuda_blas.c      GEMM through cuBLASLt (MatMul, Gemm, Conv fallback).
 *   cuda_conv.c      Conv/FusedConv: one fused cuDNN graph (fp16/bf16), cuDNN's
 *                    legacy API, or im2col + GEMM / direct kernel.
 *   cuda_dnn_graph.c cuDNN's graph (backend) API from C.
 *   k_*.cu           the CUDA kernels and their launchers (cuda_kernels.h).
 *
 * Everything here is compiled only when KILN_HAVE_CUDA is set (cmake/cuda.cmake). */
#ifndef KILN_CUDA_INTERNAL_H
#define KILN_CUDA_INTERNAL_H

#include "backends/backend.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_kernels.h"
#include "core/plan_cache.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#if KILN_HAVE_CUDNN
#include <cudnn.h>
#endif
#include "backends/cuda/cuda_dnn_graph.h"

/* the attribute structs the kernels read */
#include "ops/fused_conv.h"
#include "ops/fused_transformer.h"
#include "ops/nn_attrs.h"
#include "ops/reduce_attrs.h"

/* cuBLASLt workspace per context (NVIDIA recommends 32 MiB on Hopper). */
#define KILN_CUDA_LT_WORKSPACE ((size_t)32 << 20)

#define KCU_OOB_NAMES 32

typedef struct kiln_cuda_state {
    int device;
    cudaStream_t stream;      /* where work is queued: `own` or the caller's */
    cudaStream_t own;
    cudaEvent_t legacy_done;  /* recorded on the legacy default stream at the start of a run on
                                 `own`, which waits for it (cuda_run_begin) */
    cublasLtHandle_t lt;
    void *lt_ws;
    size_t lt_ws_size;
#if KILN_HAVE_CUDNN
    cudnnHandle_t dnn;
#endif
    void *scratch;            /* device scratch shared by kernels, grown on demand */
    size_t scratch_cap;
    int sm_count, cc_major, cc_minor;
    bool allow_tf32;          /* fp32 GEMM/conv may use TF32 tensor cores */
    bool fast_math;           /* the engine's --fast-math: fp32/fp64 convolutions may use
                                 cuDNN's Winograd and FFT algorithms (kcu_algo_rounds_more) */
    bool sync_each;           /* KILN_CUDA_SYNC=1: synchronize after every node (debugging) */
    bool verbose;             /* KILN_CUDA_VERBOSE=1: choices made at run time to stderr (the
                                 legacy convolution algorithms) */
    int attn_split;           /* tensor-core attention over the keys too (k_attn_plan.h): -1 by
                                 its rule, 0 never, 1 always (KILN_CUDA_ATTN_SPLIT=0|1) */
    bool exact_gelu;          /* KILN_CUDA_EXACT_GELU=1: fp16/bf16 FusedMatMul keeps the erf GELU
                                 as a second pass instead of cuBLASLt's tanh-form epilogue */
    bool conv_find;           /* time cuDNN's candidate algorithms on a node's first run
                                 (KILN_CUDNN_FIND=0: take the heuristic's first choice) */
    bool fp32_conv_find;      /* KILN_CUDA_FP32_CONV_FIND=1: an fp32 FusedConv lists tactic 0
                                 alone, its algorithm found at the first run, instead of cuDNN's
                                 first legacy algorithms pinned and timed */
    bool attn_fa;             /* list Attention's kiln-attn-fa64/128 tactics (default;
                                 KILN_CUDA_ATTN_FA=0: not listed) */
    bool dw_nchw_tiled;       /* KILN_CUDA_DW_NCHW=1: NCHW depthwise layers run the tiled
                                 kernel (opt-in until its speed against the direct
                                 kernel is measured) */
    bool gap_clusters;        /* the NHWC GlobalAveragePool's splits as thread-block clusters
                                 (compute capability 9 and above, unless KILN_CUDA_GAP_CLUSTER=0;
                                 else partial sums and a second kernel) */
    bool se_fused;            /* list kiln.SqueezeExcite's one-launch kernel (kcu_se) among its
                                 tactics (default; KILN_CUDA_SE_FUSED=0: not listed) */
    bool capturing;           /* a CUDA Graph capture is in progress on `stream` */
    bool strict_tactics;      /* a builder's tuning state (its tactics were listed): a
                                 tactic that cannot be made fails instead of falling back */
    bool sdpa_probed;         /* cuda_sdpa.c's probe ran: sdpa_masked[e] says what cuDNN's engine
                                 e gives for a row whose every key is masked with -inf: 1 zeros,
                                 2 NaN, 3 neither (or it failed), 0 not probed */
    uint8_t sdpa_masked[256];
    uint64_t scratch_gen;     /* bumped whenever `scratch` is reallocated (graphs refer to it) */
    int plan_threads;         /* KILN_CUDA_PLAN_THREADS=N (default KCU_PLAN_THREADS_DEFAULT): a
                                 tuning state makes the cuDNN graph plans of the layers the tuner
                                 announces (kiln_kernel.tactics_ahead) on N host threads, each with
                                 its own cuDNN handle, while its own thread times; 0: each plan is
                                 made on the tuner's thread as its candidate is set up */
    struct kiln_prep *plan_prep; /* those threads (cuda_conv.c; made at the first announcement) */
    int plan_group;           /* layers announced so far */
    const char **plan_nodes;  /* [plan_group]: the name (pointer) of each layer announced, by
                                 which its set-up moves the threads' window (owned array) */
    int plan_nodes_cap, plan_at; /* plan_at: the layer being set up (its index) */
    bool tune_verbose;        /* KILN_TUNE_VERBOSE=1: the plan threads' account when the state ends */
    uint8_t dg_engine_kind[256]; /* graph engines seen listing tactics, by global index: 1
                                 precompiled, 2 runtime-compiled (KILN_TACTIC_KIND_*) */
    int *oob;                 /* an index out of range (Gather): mapped host memory the kernels
                                 write a layer's tag into (0: none); read and cleared by `sync` */
    int *oob_dev;             /* its device address */
    const char *oob_names[KCU_OOB_NAMES]; /* the layer (name pointer) of tag i + 1 */
} kiln_cuda_state;

/* The layer a kernel's out-of-range tag names (1 + its slot in oob_names;
 * KCU_OOB_NAMES + 1 once the slots are taken: "a Gather layer"), taking a
 * slot for a name first seen. */
KILN_PRIVATE int kiln__cuda_oob_tag(kiln_cuda_state *st, const char *node);

/* The plan threads of a state whose KILN_CUDA_PLAN_THREADS is unset:
 * KCU_PLAN_THREADS_AUTO, the host's cores less one, at most 16 (the H100
 * run of 2026-12-05 in docs/cuda.md, "Making plans ahead": EfficientNet-B0
 * b32 fp16 builds in 8.6-8.9 s against 19-44 s serially); 0 is the serial
 * path (KILN_CUDA_PLAN_THREADS=0). */
#define KCU_PLAN_THREADS_AUTO (-1)
#define KCU_PLAN_THREADS_DEFAULT KCU_PLAN_THREADS_AUTO
/* Ends a state's plan threads (their account to stderr with KILN_TUNE_VERBOSE),
 * freeing the plans nobody took (cuda_conv.c); before the state's handles go. */
KILN_PRIVATE void kiln__cu_conv_plans_end(kiln_cuda_state *st);

/* ---- errors ----------------------------------------------------------------
 * Every CUDA failure becomes KILN_ERR_DEVICE naming the node (or what was
 * being done) and the CUDA error. Never aborts. */
KILN_PRIVATE kiln_status kiln__cuda_fail(cudaError_t e, const char *node, const char *what);
#define KILN_CUDA_TRY(call, node)                                       \
    do {                                                                \
        cudaError_t kiln__ce_ = (call);                                 \
        if (kiln__ce_ != cudaSuccess) return kiln__cuda_fail(kiln__ce_, (node), #call); \
    } while (0)
/* node name of kernel args, never NULL */
#define KCU_NODE(a) ((a)->node_name ? (a)->node_name : "?")
#define KCU_STREAM(a) ((cudaStream_t)(a)->stream)
#define KCU_STATE(a) ((kiln_cuda_state *)(a)->device_state)

/* ---- the kernel table --------------------------------------------------------- */

/* Rows are kiln_kernel (backends/kernel.h): `supports` checks the dtypes
 * (and shapes/attributes, as far as known at build time) of node n in g;
 * `run` gets a->stream and a->device_state set and tensors in device memory
 * (see docs/cuda.md); tactics are the state's (kiln_cuda_state). */

/* The entry of op `op_id`, or NULL when the op has no CUDA kernel. */
KILN_PRIVATE const kiln_kernel *kiln__cuda_kernel_for(int op_id);
/* Number of ops in the table (for tests and docs). */
KILN_PRIVATE int kiln__cuda_kernel_count(void);

/* The mean of every plane of x [N, C, H, W] (bytes NHWC where nhwc) into
 * y [N, C] on the device: GlobalAveragePool's kernels (cuda_ops_nn.c), which
 * kiln.SqueezeExcite's composed path runs too (cuda_se.c). */
KILN_PRIVATE kiln_status kiln__cu_gap_into(const kiln_kernel_args *a, const kiln_tensor *x, bool nhwc, void *y);

/* Declares the supports/run pair of a kernel family member: KCU_DECLARE(binary)
 * declares kiln__cu_binary_supports and kiln__cu_binary_run (in cuda_table.c,
 * beside the rows; families with their own header declare theirs there). */
#define KCU_DECLARE(fn)                                                              \
    KILN_PRIVATE bool kiln__cu_##fn##_supports(const kiln_graph *g, const kiln_node *n); \
    KILN_PRIVATE kiln_status kiln__cu_##fn##_run(const kiln_kernel_args *a);
#define KCU_ENTRY(nm, fn) {.name = nm, .supports = kiln__cu_##fn##_supports, .run = kiln__cu_##fn##_run}

/* kernel names of the channels-last pools (kiln_kernel.name_of) */
KILN_PRIVATE const char *kiln__cu_pool_name(const kiln_node *n);
KILN_PRIVATE const char *kiln__cu_global_pool_name(const kiln_node *n);
#if KILN_HAVE_CUDNN
/* Whether a legacy-API convolution algorithm rounds more than a direct or
 * GEMM one (Winograd transforms, FFT): chosen for fp32/fp64 data only under
 * the engine's --fast-math (st->fast_math), as the CPU's Winograd tactics
 * are (docs/cpu-conv.md, "Fast math"); fp16/bf16 take every algorithm. */
static inline bool kcu_fwd_algo_rounds_more(cudnnConvolutionFwdAlgo_t a) {
    return a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING;
}
static inline bool kcu_bwd_data_algo_rounds_more(cudnnConvolutionBwdDataAlgo_t a) {
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING;
}
/* cuDNN's name of a forward algorithm without its prefix ("WINOGRAD_NONFUSED"). */
static inline const char *kcu_fwd_algo_name(cudnnConvolutionFwdAlgo_t a) {
    switch (a) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "?";
    }
}
/* Whether data type dt keeps only the algorithms that round as a direct one does. */
static inline bool kcu_conv_accurate_only(const kiln_cuda_state *st, cudnnDataType_t dt) {
    return !st->fast_math && (dt == CUDNN_DATA_FLOAT || dt == CUDNN_DATA_DOUBLE);
}
#endif

/* FusedConv's tactics: 0 = cuDNN's heuristics' first engine config for the
 * fused graph (else the legacy path); KCU_CONV_TACTIC_LEGACY = the legacy
 * API + kiln's epilogue kernel, the algorithm found by timing them all at
 * the layer's first run (engines of before 2026-12-06; what a layer runs
 * where the algorithm of the tactic below does not); KCU_CONV_TACTIC_LEGACY
 * | (a + 1) << KCU_CONV_TACTIC_CAND_SHIFT = the same with cuDNN's forward
 * algorithm a pinned (kcu_conv_legacy_algo), as the builder timed it and
 * its NaN probe checked it: an algorithm found at run time may treat NaN
 * and infinities otherwise than the one checked (issue 20: a 2x2 stride-2
 * fp16 NHWC layer gave numbers for -inf inputs in one run of the op tests
 * and not in the next); kcu_dg_is_id(id) = one engine config of the fused
 * graph (cuda_dnn_graph.h). */
#define KCU_CONV_TACTIC_LEGACY 1
/* cuDNN's forward algorithms (CUDNN_CONVOLUTION_FWD_ALGO_COUNT, asserted in cuda_conv.c) */
#define KCU_CONV_LEGACY_ALGOS 8
/* ... KCU_CONV_TACTIC_DW = kiln's NHWC depthwise kernel (kcu_dwconv_nhwc), the
 * first candidate of an NHWC depthwise layer (tactic 0 runs it too) */
#define KCU_CONV_TACTIC_DW 2
/* ... convolutions that are one GEMM (cuda_conv.c, conv_as_gemm), with
 * cuBLASLt's bias (and ReLU) epilogue and the residual as its C:
 * KCU_CONV_TACTIC_GEMM = a 1x1 unpadded layer of one group whose input is
 * a row-major [N * P, C] matrix (NHWC input, or every spatial size 1: the
 * SE blocks' layers), multiplied as is; KCU_CONV_TACTIC_PATCH = a 2-D
 * layer of one group without padding or dilation whose kernel is at most
 * its stride (ViT's and ConvNeXt's patchify layers): kiln's patch gather
 * (kcu_patches) + one GEMM */
#define KCU_CONV_TACTIC_GEMM 3
#define KCU_CONV_TACTIC_PATCH 4
/* ... KCU_CONV_TACTIC_GEMV = a 1x1 layer of one group on [N, C, 1, 1]
 * values (the SE blocks' layers, any layout: the same bytes) as kiln's
 * kernel with the whole epilogue inside (kcu_conv_gemv, one launch: hard
 * sigmoid and SiLU too, which cuBLASLt's epilogue leaves to a second pass) */
#define KCU_CONV_TACTIC_GEMV 5
/* ... KCU_CONV_TACTIC_GCONV = a 2-D grouped NHWC layer (several input
 * channels a group) as kiln's tensor-core kernel, epilogue inside
 * (kcu_gconv_nhwc, k_gconv.cu): id | 1 << 8 with 64 pixels a block, id |
 * 2 << 8 with 128 (kcu_conv_gconv_bm); tactic 0 runs it too where no cuDNN
 * config or legacy algorithm does */
#define KCU_CONV_TACTIC_GCONV 6
/* ... each with cuBLASLt's k-th heuristic candidate: id | k << 8 */
#define KCU_CONV_TACTIC_CAND_SHIFT 8
/* The pixels a block of kiln's grouped kernel takes under tactic id (64 or
 * 128), -1 where id is no KCU_CONV_TACTIC_GCONV one */
static inline int kcu_conv_gconv_bm(int32_t id) {
    return id == (KCU_CONV_TACTIC_GCONV | 1 << KCU_CONV_TACTIC_CAND_SHIFT)   ? 64
           : id == (KCU_CONV_TACTIC_GCONV | 2 << KCU_CONV_TACTIC_CAND_SHIFT) ? 128
                                                                             : -1;
}
/* Whether tactic id is a legacy-path one (plain or with an algorithm pinned). */
static inline bool kcu_conv_is_legacy(int32_t id) {
    return (id & 0xff) == KCU_CONV_TACTIC_LEGACY && id > 0 &&
           (id >> KCU_CONV_TACTIC_CAND_SHIFT) <= KCU_CONV_LEGACY_ALGOS;
}
/* The forward algorithm legacy tactic id pins (0 .. KCU_CONV_LEGACY_ALGOS - 1),
 * -1 where it pins none (the plain KCU_CONV_TACTIC_LEGACY, or not a legacy tactic) */
static inline int kcu_conv_legacy_algo(int32_t id) {
    return kcu_conv_is_legacy(id) ? (int)(id >> KCU_CONV_TACTIC_CAND_SHIFT) - 1 : -1;
}
/* KCU_CONV_TACTIC_GEMM or _PATCH where tactic id names one of them, else 0 */
static inline int32_t kcu_conv_gemm_kind(int32_t id) {
    const int32_t kind = id & 0xff;
    return id > 0 && id < (16 << KCU_CONV_TACTIC_CAND_SHIFT) &&
                   (kind == KCU_CONV_TACTIC_GEMM || kind == KCU_CONV_TACTIC_PATCH)
               ? kind
               : 0;
}
KILN_PRIVATE int kiln__cu_fused_conv_tactics(void *state, const kiln_infer_args *a, int32_t *ids,
                                             int cap);
KILN_PRIVATE const char *kiln__cu_fused_conv_tactic_name(int32_t id);
KILN_PRIVATE void kiln__cu_fused_conv_tactics_ahead(void *state, const kiln_infer_args *a, const int32_t *ids, int n);
KILN_PRIVATE int kiln__cu_fused_conv_tactic_kind(void *state, int32_t id);
KILN_PRIVATE void kiln__cu_fused_conv_tactic_describe(int32_t id, char *buf, size_t n);
/* "cuda.conv.nhwc" / "cuda.dwconv.nhwc" (depthwise) / "cuda.conv.nchw-in.nhwc" for
 * channels-last layers */
KILN_PRIVATE const char *kiln__cu_fused_conv_name(const kiln_node *n);
/* kiln.SqueezeExcite (cuda_se.c): "cuda.squeeze_excite.nhwc" for an NHWC
 * input; its tactics (0 the pool and two GEMV launches, 5 the pool and two
 * cuBLASLt GEMMs, 1..4 kcu_se with clusters of 1..8 blocks) and their names */
KILN_PRIVATE const char *kiln__cu_se_name(const kiln_node *n);
KILN_PRIVATE int kiln__cu_se_tactics(void *state, const kiln_infer_args *a, int32_t *ids, int cap);
KILN_PRIVATE const char *kiln__cu_se_tactic_name(int32_t id);
/* FusedMatMul's tactics: cuBLASLt's heuristic candidates for its shapes */
KILN_PRIVATE int kiln__cu_fused_matmul_tactics(void *state, const kiln_infer_args *a, int32_t *ids,
                                               int cap);
KILN_PRIVATE const char *kiln__cu_fused_matmul_tactic_name(int32_t id); /* "cublasLt#<id>" */

/* Attention's tactics: 0 = kiln's tensor-core kernel by its plan's rule
 * (k_attn_plan.h; KILN_CUDA_ATTN_SPLIT overrides it), ROWS / SPLIT = that
 * kernel with the keys never / always split over warps, FA64 / FA128 = the
 * tensor-core kernel with the masks staged in shared memory, 64 / 128 query
 * rows per CTA (kcu_attention_fa), kcu_dg_is_id(id) = an engine config of
 * cuDNN's fused attention graph (cuda_sdpa.c). */
#define KCU_ATTN_TACTIC_ROWS 1
#define KCU_ATTN_TACTIC_SPLIT 2
#define KCU_ATTN_TACTIC_FA64 3
#define KCU_ATTN_TACTIC_FA128 4
KILN_PRIVATE int kiln__cu_attention_tactics(void *state, const kiln_infer_args *a, int32_t *ids, int cap);
KILN_PRIVATE const char *kiln__cu_attention_tactic_name(int32_t id);
KILN_PRIVATE void kiln__cu_attention_tactic_describe(int32_t id, char *buf, size_t n);
#if KILN_HAVE_CUDNN
/* cuDNN's fused attention (flash attention through the graph API,
 * cuda_sdpa.c) for an Attention of geometry g (kcu_attn, cuda_kernels.h):
 * fp16/bf16, head sizes multiples of 8 up to 128, at most one of mask,
 * bias and cond (a cond that adds its fill, or sets -inf). _tactics lists
 * the engine configs of the layer's graph (none: cuDNN does not take it);
 * _run runs tactic kiln__cuda_tactic(a) with Q, K, V at q, k, v (offsets
 * applied) and the mask, bias or cond (bool) at `add`; *handled = false: no config runs it
 * here (a stored config missing outside a tuning state: warned once), the
 * caller runs kiln's kernel. */
KILN_PRIVATE int kiln__cu_sdpa_tactics(kiln_cuda_state *st, kiln_dtype t, const kcu_attn *g, int32_t *ids, int cap);
KILN_PRIVATE kiln_status kiln__cu_sdpa_run(const kiln_kernel_args *a, kiln_dtype t, const kcu_attn *g, const void *q,
                                           const void *k, const void *v, const void *add, void *o, bool *handled);
#endif

/* families with their own headers */
#include "backends/cuda/cuda_index.h"
#include "backends/cuda/cuda_spatial.h"
#include "backends/cuda/cuda_seq.h"
#include "backends/cuda/cuda_misc.h"

/* ---- helpers for supports() ---------------------------------------------------- */

/* Info of input/output i of n as inferred in g; NULL when absent. */
KILN_PRIVATE const kiln_tinfo *kiln__cu_in(const kiln_graph *g, const kiln_node *n, int i);
KILN_PRIVATE const kiln_tinfo *kiln__cu_out(const kiln_graph *g, const kiln_node *n, int i);
/* dtype of input/output i (UNDEFINED when absent) */
KILN_PRIVATE kiln_dtype kiln__cu_in_dtype(const kiln_graph *g, const kiln_node *n, int i);
KILN_PRIVATE kiln_dtype kiln__cu_out_dtype(const kiln_graph *g, const kiln_node *n, int i);
KILN_PRIVATE bool kiln__cu_is_float(kiln_dtype t); /* f32 f16 bf16 f64 */
/* input 0 is floating and output 0 has its dtype */
KILN_PRIVATE bool kiln__cu_float_in_out(const kiln_graph *g, const kiln_node *n);
/* Whether the op's own inference accepts n's inputs as typed in g and gives
 * output 0 the dtype of input 0 (kiln's fused layers: float32 only until
 * their inference takes fp16/bf16). */
KILN_PRIVATE bool kiln__cu_infer_keeps_dtype(const kiln_graph *g, const kiln_node *n);

/* ---- helpers for run() ------------------------------------------------------------ */

/* KILN_ERR_UNSUPPORTED: "node 'x' (Op): dtype T has no CUDA kernel" */
KILN_PRIVATE kiln_status kiln__cu_dtype_fail(const kiln_kernel_args *a, kiln_dtype t);

/* Broadcast geometry of `nin` inputs (ranks <= out rank, numpy aligned)
 * onto the dense output shape. */
KILN_PRIVATE void kiln__cuda_bcast_plan(int out_rank, const int64_t *out_dims, int nin,
                                        const int *in_rank, const int64_t *const *in_dims,
                                        kcu_bcast *g);
/* Plans and launches a strided copy of es-byte elements (see kcu_copy):
 * merges dims, widens elements to 16/8/4 bytes where alignment allows,
 * uses the tiled transpose for transposed 2-D views. dst_st NULL: dense. */
KILN_PRIVATE kiln_status kiln__cuda_copy(const kiln_kernel_args *a, size_t es, int rank,
                                         const int64_t *dims, void *dst, const int64_t *dst_st,
                                         const void *src, const int64_t *src_st);
/* Device-to-device copy of n bytes on the stream (no-op when dst == src). */
KILN_PRIVATE kiln_status kiln__cuda_memcpy(const kiln_kernel_args *a, void *dst, const void *src,
                                           size_t n);
/* Whether p is device memory (cudaPointerGetAttributes); host pointers and
 * unknown ones are false. */
KILN_PRIVATE bool kiln__cuda_is_device_ptr(const void *p);
/* Reads the values of a small integer tensor (Slice starts, Reduce axes...)
 * on the host, wherever it lives (a device copy synchronizes the stream).
 * *n = element count (<= cap). */
KILN_PRIVATE kiln_status kiln__cuda_read_ints(const kiln_kernel_args *a, const kiln_tensor *t,
                                              int64_t *out, int64_t cap, int64_t *n,
                                              const char *what);
/* Reads element 0 of a scalar tensor on the host as double and int64. */
KILN_PRIVATE kiln_status kiln__cuda_read_scalar(const kiln_kernel_args *a, const kiln_tensor *t,
                                                double *f, int64_t *i);
/* Device scratch of at least n bytes (256-byte aligned), valid until the
 * next call on this state; stream-ordered reuse is safe. */
KILN_PRIVATE kiln_status kiln__cuda_scratch(kiln_cuda_state *st, size_t n, void **out,
                                            const char *node);
/* Row-major element strides of a dense shape. */
KILN_PRIVATE void kiln__cuda_strides(int rank, const int64_t *dims, int64_t *st);

/* ---- GEMM (cuda_blas.c) -------------------------------------------------------------
 * Row-major, batched: for b in [0, batch):
 *   C_b = alpha * op(A_b) * op(B_b) + beta * C_b
 * with op(A) M x K (A is M x K with row stride lda, or K x M when ta), op(B)
 * K x N (B is K x N, or N x K when tb), C M x N with row stride ldc; X_b =
 * X + b * stride_x (elements). beta == 0: C is only written. Floating dtypes;
 * fp32 accumulation (fp64 for fp64). */
typedef struct kiln_cuda_gemm {
    kiln_dtype t;
    bool ta, tb;
    int64_t M, N, K, batch;
    double alpha, beta;
    const void *A, *B;
    void *C;
    int64_t lda, ldb, ldc;
    int64_t sa, sb, sc;
    /* Epilogue (cuBLASLt), applied to alpha*AB + beta*C: KCU_EPI_* ; bias
     * (epi with BIAS) is a vector of N elements of dtype t added to every
     * row. batch must be 1 when epi != 0. */
    int epi;
    const void *bias;
    int32_t tactic;  /* index into cuBLASLt's heuristic list (0: its first choice) */
    /* Optional: the C read by beta * C when it is not the output (cuBLASLt's
     * separate C and D, same layout): C_b = alpha op(A_b) op(B_b) + beta Cin_b,
     * e.g. a residual with beta = 1. Needs cuBLASLt (no fallback kernel). */
    const void *Cin;
} kiln_cuda_gemm;
enum {
    KCU_EPI_NONE = 0,
    KCU_EPI_RELU = 1,
    KCU_EPI_GELU = 2,      /* tanh approximation (cuBLASLt's GELU) */
    KCU_EPI_BIAS = 4,      /* combined with the above: BIAS, RELU_BIAS, GELU_BIAS */
};
KILN_PRIVATE kiln_status kiln__cuda_gemm(const kiln_kernel_args *a, const kiln_cuda_gemm *p);
/* Number of cuBLASLt heuristic candidates for p (shapes and dtypes only;
 * pointers are taken as 256-byte aligned), at most cap; 0 if none. */
/* The most cuBLASLt heuristic candidates a GEMM asks for (the tactics `cublasLt#k`
 * of FusedMatMul, k < this): the builder times them all. 8 before 2026-12-05;
 * BERT-base's GEMMs at batch 64 chose the 7th of 8 (issue 21). An engine stores
 * k, its plan asks for this many again and takes the k-th. */
#define KCU_GEMM_MAX_CANDIDATES 32
KILN_PRIVATE int kiln__cuda_gemm_candidates(kiln_cuda_state *st, const kiln_cuda_gemm *p, int cap);
/* A 1x1 convolution on rows (cuda_conv.c): Y [rows, M] = act(X [rows, K]
 * W [M, K]^T + b + R), all row-major, as one GEMM: the `cublasLt-1x1`
 * tactic of kiln.FusedConv (NHWC, or every spatial size 1) and the two
 * layers of kiln.SqueezeExcite's `cublasLt-1x1+gap`. Fills p without
 * pointers (the caller sets A = X, B = W, C = Y, bias = b where has_b, Cin
 * = R with beta 1 where has_r) with the bias in cuBLASLt's epilogue and
 * the activation where the epilogue runs it as kiln does (KILN_FC_ACT_RELU
 * only); returns whether it did, else the caller runs act as one
 * kcu_bias_act pass after the GEMM. The one policy for both ops. */
KILN_PRIVATE bool kiln__cu_conv_rows_gemm(kiln_cuda_gemm *p, kiln_dtype t, int64_t rows, int64_t K, int64_t M,
                                          bool has_b, int act, bool has_r);

/* ---- per-(context, node) state ------------------------------------------------------
 * What a node's kernel keeps between runs in a->node_state->p: cuBLASLt
 * descriptors + chosen algorithm per GEMM shape, and the convolution plan
 * (cuDNN descriptors + algorithm). Created on first use; freed by the
 * context. Everything is keyed by shapes, so a shape change rebuilds it. */
/* GEMM plans a node keeps: one per key (shapes, epilogue, tactic, pointer
 * alignments), so a layer of several GEMMs a run (grouped convolutions,
 * batched MatMul loops, SqueezeExcite's two) at a few batch sizes (a server's
 * dynamic batch) keeps them all instead of rebuilding them every run; 4 was
 * too few for two GEMMs at 3 batch sizes (probe3). */
#define KCU_GEMM_PLANS 16
typedef struct kiln_cuda_gemm_key {
    int32_t t, ta, tb, tf32, epi, tactic;
    uint32_t al[4];
    int64_t M, N, K, batch, lda, ldb, ldc, sa, sb, sc;
} kiln_cuda_gemm_key;
typedef struct kiln_cuda_gemm_plan {
    kiln_cuda_gemm_key key;
    bool simple;                 /* cuBLASLt has no algorithm: the fallback kernel */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t l[3]; /* first operand (B), second (A), C/D */
    cublasLtMatmulAlgo_t algo;
} kiln_cuda_gemm_plan;
typedef struct kiln_cuda_node {
    kiln_plan_cache gemm;        /* kiln_cuda_gemm_plan, KCU_GEMM_PLANS of them (kiln__cuda_gemm_plans) */
    void *conv;                  /* cuda_conv.c's plans (a conv node), cuda_sdpa.c's (an attention node) */
    void (*conv_free)(void *);
} kiln_cuda_node;
/* The node's CUDA state, created on first use; NULL when the args carry no
 * node state (constant folding, build-time timing) or memory is short:
 * then nothing is kept and the kernel sets itself up every call. */
KILN_PRIVATE kiln_cuda_node *kiln__cuda_node(const kiln_kernel_args *a);
/* What kiln_cuda_node.gemm keeps (cuda_blas.c). */
KILN_PRIVATE extern const kiln_plan_type kiln__cuda_gemm_plans;
/* The tactic id of a node whose op has KILN_OP_FLAG_TACTICS (0 otherwise). */
KILN_PRIVATE int32_t kiln__cuda_tactic(const kiln_kernel_args *a);

#endif
