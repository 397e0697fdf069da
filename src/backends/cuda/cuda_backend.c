/* cuda_backend.c -- the CUDA backend's vtable: per-context state, device
 * memory, host <-> device copies on the state's stream, and dispatch of a
 * node to its entry in the kernel table (cuda_table.c, which also says
 * which nodes run here, under which names and tactics). */
#if KILN_HAVE_CUDA

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/cuda_layout.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

kiln_status kiln__cuda_fail(cudaError_t e, const char *node, const char *what) {
    /* clear a non-sticky error so that later calls do not report it again */
    (void)cudaGetLastError();
    return KILN_FAIL(KILN_ERR_DEVICE, "node '%s': CUDA error %s (%s) in %s", node ? node : "?",
                     cudaGetErrorName(e), cudaGetErrorString(e), what);
}

/* ---- state ------------------------------------------------------------------------- */

static void cuda_state_free(void *state) {
    kiln_cuda_state *st = state;
    if (!st) return;
    (void)cudaSetDevice(st->device);
    if (st->own) (void)cudaStreamSynchronize(st->own);
    if (st->stream && st->stream != st->own) (void)cudaStreamSynchronize(st->stream);
    kiln__cu_conv_plans_end(st);
#if KILN_HAVE_CUDNN
    if (st->dnn) (void)cudnnDestroy(st->dnn);
#endif
    if (st->lt) (void)cublasLtDestroy(st->lt);
    if (st->lt_ws) (void)cudaFree(st->lt_ws);
    if (st->scratch) (void)cudaFree(st->scratch);
    if (st->legacy_done) (void)cudaEventDestroy(st->legacy_done);
    if (st->oob) (void)cudaFreeHost(st->oob);
    if (st->own) (void)cudaStreamDestroy(st->own);
    (void)cudaGetLastError();
    kiln__free(st);
}

/* KILN_CUDA_PLAN_THREADS: unset or empty (the default), "auto", or an
 * integer from 0 to 64, nothing after it; anything else is refused, naming
 * the variable, rather than read as 0 or a prefix (atoi) */
static kiln_status plan_threads_env(int *out) {
    const char *v = getenv("KILN_CUDA_PLAN_THREADS");
    if (!v || !v[0]) {
        *out = KCU_PLAN_THREADS_DEFAULT;
        return KILN_OK;
    }
    if (!strcmp(v, "auto")) {
        *out = KCU_PLAN_THREADS_AUTO;
        return KILN_OK;
    }
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || *v < '0' || *v > '9' || *end || n > 64)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "KILN_CUDA_PLAN_THREADS='%.32s': expected 'auto' or an integer from 0 to 64", v);
    *out = (int)n;
    return KILN_OK;
}

static kiln_status cuda_state_create(int index, void **out) {
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return KILN_FAIL(KILN_ERR_DEVICE, "no CUDA device available: %s", cudaGetErrorString(e));
    }
    if (count <= 0) return KILN_FAIL(KILN_ERR_DEVICE, "no CUDA device available: no device found");
    if (index < 0 || index >= count)
        return KILN_FAIL(KILN_ERR_DEVICE, "CUDA device %d does not exist (%d device%s found)", index,
                         count, count == 1 ? "" : "s");
    kiln_cuda_state *st = kiln__calloc(1, sizeof *st);
    if (!st) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory creating the CUDA state");
    st->device = index;
    kiln_status s = KILN_OK;
    const char *what = "?";
#define STATE_TRY(call)                                \
    do {                                               \
        cudaError_t e_ = (call);                       \
        if (e_ != cudaSuccess) {                       \
            what = #call;                              \
            e = e_;                                    \
            goto cuda_fail;                            \
        }                                              \
    } while (0)
    STATE_TRY(cudaSetDevice(index));
    struct cudaDeviceProp prop;
    STATE_TRY(cudaGetDeviceProperties(&prop, index));
    st->sm_count = prop.multiProcessorCount;
    st->cc_major = prop.major;
    st->cc_minor = prop.minor;
    e = kcu_probe();
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        s = KILN_FAIL(KILN_ERR_DEVICE,
                      "CUDA device %d (%s, compute capability %d.%d) cannot run this kiln's GPU "
                      "code: %s (kiln's CUDA code was built for other architectures; rebuild "
                      "with CMAKE_CUDA_ARCHITECTURES including %d%d)",
                      index, prop.name, prop.major, prop.minor, cudaGetErrorString(e), prop.major,
                      prop.minor);
        goto fail;
    }
    STATE_TRY(cudaStreamCreateWithFlags(&st->own, cudaStreamNonBlocking));
    STATE_TRY(cudaEventCreateWithFlags(&st->legacy_done, cudaEventDisableTiming));
    st->stream = st->own;
    STATE_TRY(cudaMalloc(&st->lt_ws, KILN_CUDA_LT_WORKSPACE));
    st->lt_ws_size = KILN_CUDA_LT_WORKSPACE;
    STATE_TRY(cudaHostAlloc((void **)&st->oob, sizeof(int), cudaHostAllocMapped));
    *st->oob = 0;
    STATE_TRY(cudaHostGetDevicePointer((void **)&st->oob_dev, st->oob, 0));
    cublasStatus_t bs = cublasLtCreate(&st->lt);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        s = KILN_FAIL(KILN_ERR_DEVICE, "cuBLASLt could not be initialized on CUDA device %d: %s",
                      index, cublasLtGetStatusString(bs));
        st->lt = NULL;
        goto fail;
    }
#if KILN_HAVE_CUDNN
    cudnnStatus_t ds = cudnnCreate(&st->dnn);
    if (ds != CUDNN_STATUS_SUCCESS) {
        /* cuDNN is optional: convolutions fall back to im2col + GEMM */
        st->dnn = NULL;
    } else if (cudnnSetStream(st->dnn, st->stream) != CUDNN_STATUS_SUCCESS) {
        (void)cudnnDestroy(st->dnn);
        st->dnn = NULL;
    }
#endif
    st->sync_each = kiln__env_flag("KILN_CUDA_SYNC");
    const char *as = getenv("KILN_CUDA_ATTN_SPLIT");
    st->attn_split = as && as[0] ? (strcmp(as, "0") != 0) : -1;
    st->exact_gelu = kiln__env_flag("KILN_CUDA_EXACT_GELU");
    st->verbose = kiln__env_flag("KILN_CUDA_VERBOSE");
    const char *find = getenv("KILN_CUDNN_FIND");
    st->conv_find = !(find && !strcmp(find, "0"));
    const char *fp32_find = getenv("KILN_CUDA_FP32_CONV_FIND");
    st->fp32_conv_find = fp32_find && atoi(fp32_find) == 1;
    st->attn_fa = kiln__env_flag_default("KILN_CUDA_ATTN_FA", true);
    st->dw_nchw_tiled = kiln__env_flag("KILN_CUDA_DW_NCHW");
    st->gap_clusters = st->cc_major >= 9 && kiln__env_flag_default("KILN_CUDA_GAP_CLUSTER", true);
    st->se_fused = kiln__env_flag_default("KILN_CUDA_SE_FUSED", true);
    s = plan_threads_env(&st->plan_threads);
    if (s != KILN_OK) goto fail;
    if (st->plan_threads == KCU_PLAN_THREADS_AUTO) {
        int cores = kiln__cpu_count() - 1;
        st->plan_threads = cores < 0 ? 0 : cores > 16 ? 16 : cores;
    }
    st->tune_verbose = kiln__env_flag("KILN_TUNE_VERBOSE");
    *out = st;
    return KILN_OK;
cuda_fail:
    (void)cudaGetLastError();
    s = KILN_FAIL(KILN_ERR_DEVICE, "CUDA device %d: %s failed: %s", index, what,
                  cudaGetErrorString(e));
fail:
    cuda_state_free(st);
    return s;
#undef STATE_TRY
}

static kiln_status cuda_set_stream(void *state, void *stream) {
    kiln_cuda_state *st = state;
    if (!st) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "set_stream: no CUDA state");
    cudaStream_t next = stream ? (cudaStream_t)stream : st->own;
    if (next != st->stream) {
        /* work queued on the old stream (uploads, earlier runs) comes first */
        KILN_CUDA_TRY(cudaSetDevice(st->device), "set_stream");
        KILN_CUDA_TRY(cudaStreamSynchronize(st->stream), "set_stream");
    }
    st->stream = next;
#if KILN_HAVE_CUDNN
    if (st->dnn && cudnnSetStream(st->dnn, st->stream) != CUDNN_STATUS_SUCCESS)
        return KILN_FAIL(KILN_ERR_DEVICE, "cuDNN rejected the stream given to the context");
#endif
    return KILN_OK;
}

kiln_status kiln__cuda_set_tf32(void *state, bool allow) {
    kiln_cuda_state *st = state;
    if (!st) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "set_tf32: no CUDA state");
    st->allow_tf32 = allow;
    return KILN_OK;
}

void kiln__cuda_state_info(const void *state, int *device, int *sm_count, int *cc_major,
                           int *cc_minor) {
    const kiln_cuda_state *st = state;
    if (device) *device = st ? st->device : -1;
    if (sm_count) *sm_count = st ? st->sm_count : 0;
    if (cc_major) *cc_major = st ? st->cc_major : 0;
    if (cc_minor) *cc_minor = st ? st->cc_minor : 0;
}

/* ---- memory -------------------------------------------------------------------------- */

/* state NULL: on the current device (device 0 unless the process chose
 * another), for memory shared by contexts (engine weights). */
static void *cuda_alloc(void *state, size_t bytes) {
    kiln_cuda_state *st = state;
    if (st && cudaSetDevice(st->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        (void)KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "cudaMalloc of %zu bytes failed: %s", bytes,
                  cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

static void cuda_free(void *state, void *p) {
    kiln_cuda_state *st = state;
    if (!p) return;
    if (st) {
        (void)cudaSetDevice(st->device);
        /* the stream may still read or write p */
        (void)cudaStreamSynchronize(st->stream);
    }
    (void)cudaFree(p);
    (void)cudaGetLastError();
}

/* With a NULL state (engine-level uploads, no context yet) copies are
 * synchronous, on the current device (see alloc). */
static kiln_status cuda_copy(kiln_cuda_state *st, void *dst, const void *src, size_t n, bool wait,
                             const char *what) {
    if (!n) return KILN_OK;
    if (!st) {
        KILN_CUDA_TRY(cudaMemcpy(dst, src, n, cudaMemcpyDefault), what);
        return KILN_OK;
    }
    KILN_CUDA_TRY(cudaSetDevice(st->device), what);
    KILN_CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, st->stream), what);
    if (wait) KILN_CUDA_TRY(cudaStreamSynchronize(st->stream), what);
    return KILN_OK;
}

static kiln_status cuda_to_device(void *state, void *dst, const void *src, size_t n) {
    return cuda_copy(state, dst, src, n, false, "copy to the device");
}

static kiln_status cuda_to_host(void *state, void *dst, const void *src, size_t n) {
    return cuda_copy(state, dst, src, n, true, "copy to the host");
}

int kiln__cuda_oob_tag(kiln_cuda_state *st, const char *node) {
    for (int i = 0; i < KCU_OOB_NAMES; i++) {
        if (!st->oob_names[i]) st->oob_names[i] = node;
        if (st->oob_names[i] == node) return i + 1;
    }
    return KCU_OOB_NAMES + 1;
}

/* Synchronizes the stream; then fails if a kernel since the last sync met
 * an index out of range (kcu_gather: it wrote zeros there; the CPU kernel
 * fails the run, and so does this one, at its end). */
static kiln_status cuda_sync(void *state) {
    kiln_cuda_state *st = state;
    if (!st) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "sync: no CUDA state");
    KILN_CUDA_TRY(cudaSetDevice(st->device), "synchronizing the stream");
    KILN_CUDA_TRY(cudaStreamSynchronize(st->stream), "synchronizing the stream");
    const int tag = st->oob ? *(volatile int *)st->oob : 0;
    if (tag) {
        *st->oob = 0;
        const char *node = tag <= KCU_OOB_NAMES ? st->oob_names[tag - 1] : NULL;
        char pn[256];
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "node '%s' (Gather): an index is out of range for the size of its axis at this run's "
                         "shapes (indices must lie in [-size, size - 1])",
                         node ? kiln_printable(node, pn, sizeof pn) : "a Gather layer");
    }
    return KILN_OK;
}

/* A run on the state's own stream (no kiln_context_set_stream) first waits
 * for the work queued before it on the legacy default stream: `own` is a
 * non-blocking stream, so without this a kernel could read an input that a
 * cudaMemcpy from pageable memory has not finished writing (it returns once
 * the bytes are staged, the DMA still in flight), or one a kernel of the
 * caller's on stream 0 is still writing. A caller's own stream is the
 * caller's to order, as with TensorRT's enqueue. */
static kiln_status cuda_run_begin(void *state) {
    kiln_cuda_state *st = state;
    if (!st) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "run_begin: no CUDA state");
    if (st->stream != st->own) return KILN_OK;
    KILN_CUDA_TRY(cudaSetDevice(st->device), "ordering the run after the default stream");
    KILN_CUDA_TRY(cudaEventRecord(st->legacy_done, cudaStreamLegacy), "ordering the run after the default stream");
    KILN_CUDA_TRY(cudaStreamWaitEvent(st->own, st->legacy_done, 0), "ordering the run after the default stream");
    return KILN_OK;
}

/* ---- running a node ------------------------------------------------------------------- */

static kiln_status cuda_run(void *state, const kiln_kernel_args *a) {
    kiln_cuda_state *st = state;
    const char *node = KCU_NODE(a);
    if (!st) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "node '%s': no CUDA state", node);
    const kiln_kernel *k = kiln__cuda_kernel_for(a->op_id ? a->op_id : kiln__op_id_of(a->op));
    if (!k)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): no CUDA kernel for this op", node,
                         a->op->name);
    KILN_CUDA_TRY(cudaSetDevice(st->device), node);
    kiln_kernel_args b = *a;
    b.stream = (void *)st->stream;
    b.device_state = st;
    kiln_status s = k->run(&b);
    if (s != KILN_OK) {
        (void)cudaGetLastError();
        return s;
    }
    KILN_CUDA_TRY(cudaGetLastError(), node);
    if (st->sync_each) KILN_CUDA_TRY(cudaStreamSynchronize(st->stream), node);
    return KILN_OK;
}

static bool cuda_owns_pointer(void *state, const void *p) {
    (void)state;
    struct cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

static void cuda_describe_target(void *state, char *buf, size_t n) {
    const kiln_cuda_state *st = state;
    if (st) snprintf(buf, n, "cuda sm_%d%d", st->cc_major, st->cc_minor);
    else snprintf(buf, n, "cuda");
}

static kiln_status cuda_set_precision(void *state, int precision, bool fast_math) {
    KILN_TRY(kiln__cuda_set_tf32(state, precision == KILN_PRECISION_TF32));
    ((kiln_cuda_state *)state)->fast_math = fast_math;
    return KILN_OK;
}

/* ---- layouts ----------------------------------------------------------------------------- */

/* Channels-last chains (cuda_nhwc), then the tuning: the builder times
 * each layer's tactics in the layout it will run in. */
static kiln_status cuda_layouts(kiln_layout_ctx *c) {
    if (c->optimize && !(c->disabled & (1u << KILN_PASS_CUDA_NHWC))) KILN_TRY(kiln__pass_cuda_nhwc(c->g, NULL));
    return c->tune(c);
}

/* ---- CUDA Graphs ----------------------------------------------------------------------- */

typedef struct kiln_cuda_graph {
    cudaGraphExec_t exec;
    uint64_t scratch_gen;     /* the scratch buffer the recorded kernels use */
} kiln_cuda_graph;

static kiln_status cuda_capture_begin(void *state) {
    kiln_cuda_state *st = state;
    if (!st) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "capture: no CUDA state");
    if (st->sync_each)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "no CUDA Graph capture with KILN_CUDA_SYNC=1");
    if (st->capturing) return KILN_FAIL(KILN_ERR_INTERNAL, "CUDA Graph capture already started");
    KILN_CUDA_TRY(cudaSetDevice(st->device), "starting a CUDA Graph capture");
    /* thread-local: other threads' contexts may allocate meanwhile */
    KILN_CUDA_TRY(cudaStreamBeginCapture(st->stream, cudaStreamCaptureModeThreadLocal),
                  "starting a CUDA Graph capture");
    st->capturing = true;
    return KILN_OK;
}

static kiln_status cuda_capture_end(void *state, void **out) {
    kiln_cuda_state *st = state;
    *out = NULL;
    if (!st || !st->capturing) return KILN_FAIL(KILN_ERR_INTERNAL, "no CUDA Graph capture to end");
    st->capturing = false;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(st->stream, &graph);
    if (e != cudaSuccess || !graph) {
        /* invalidated (a synchronizing call during the capture): nothing recorded ran */
        (void)cudaGetLastError();
        if (graph) (void)cudaGraphDestroy(graph);
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "CUDA Graph capture invalidated: %s",
                         e != cudaSuccess ? cudaGetErrorString(e) : "no graph");
    }
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "CUDA Graph not instantiated: %s", cudaGetErrorString(e));
    }
    kiln_cuda_graph *cg = kiln__calloc(1, sizeof *cg);
    if (!cg) {
        (void)cudaGraphExecDestroy(exec);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory keeping a CUDA Graph");
    }
    cg->exec = exec;
    cg->scratch_gen = st->scratch_gen;
    *out = cg;
    return KILN_OK;
}

static kiln_status cuda_graph_launch(void *state, void *graph, bool *launched) {
    kiln_cuda_state *st = state;
    kiln_cuda_graph *cg = graph;
    *launched = false;
    if (!st || !cg) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "graph launch: no state or graph");
    if (cg->scratch_gen != st->scratch_gen) return KILN_OK; /* scratch moved: stale */
    KILN_CUDA_TRY(cudaSetDevice(st->device), "launching a CUDA Graph");
    KILN_CUDA_TRY(cudaGraphLaunch(cg->exec, st->stream), "launching a CUDA Graph");
    if (st->sync_each) KILN_CUDA_TRY(cudaStreamSynchronize(st->stream), "launching a CUDA Graph");
    *launched = true;
    return KILN_OK;
}

static void cuda_graph_free(void *state, void *graph) {
    kiln_cuda_state *st = state;
    kiln_cuda_graph *cg = graph;
    if (!cg) return;
    if (st) {
        (void)cudaSetDevice(st->device);
        (void)cudaStreamSynchronize(st->stream);
    }
    (void)cudaGraphExecDestroy(cg->exec);
    (void)cudaGetLastError();
    kiln__free(cg);
}

static void cuda_poison_scratch(void *state) {
    kiln_cuda_state *st = state;
    if (!st) return;
    (void)cudaSetDevice(st->device);
    if (st->scratch) (void)cudaMemsetAsync(st->scratch, 0xff, st->scratch_cap, st->stream);
    if (st->lt_ws) (void)cudaMemsetAsync(st->lt_ws, 0xff, st->lt_ws_size, st->stream);
    (void)cudaGetLastError();
}

static kiln_status cuda_poison(void *state, void *p, size_t n) {
    kiln_cuda_state *st = state;
    if (!st) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "poison: no CUDA state");
    KILN_CUDA_TRY(cudaSetDevice(st->device), "filling memory");
    KILN_CUDA_TRY(cudaMemsetAsync(p, 0xff, n, st->stream), "filling memory");
    return KILN_OK;
}

static kiln_status cuda_to_host_strided(void *state, void *dst, const void *src, size_t elem, size_t stride,
                                        size_t count) {
    kiln_cuda_state *st = state;
    if (!st) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "strided copy: no CUDA state");
    if (!count) return KILN_OK;
    KILN_CUDA_TRY(cudaSetDevice(st->device), "strided copy to the host");
    KILN_CUDA_TRY(cudaMemcpy2DAsync(dst, elem, src, stride, elem, count, cudaMemcpyDefault, st->stream),
                  "strided copy to the host");
    KILN_CUDA_TRY(cudaStreamSynchronize(st->stream), "strided copy to the host");
    return KILN_OK;
}

static const kiln_backend_i kiln_backend_cuda = {
    .name = "cuda",
    .device = KILN_DEVICE_CUDA,
    .reduced_tensors = true,
    .kernel_for = kiln__cuda_kernel_for,
    .state_create = cuda_state_create,
    .state_free = cuda_state_free,
    .set_stream = cuda_set_stream,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .to_device = cuda_to_device,
    .to_host = cuda_to_host,
    .sync = cuda_sync,
    .run_begin = cuda_run_begin,
    .poison_scratch = cuda_poison_scratch,
    .poison = cuda_poison,
    .to_host_strided = cuda_to_host_strided,
    .owns_pointer = cuda_owns_pointer,
    .describe_target = cuda_describe_target,
    .set_precision = cuda_set_precision,
    .run = cuda_run,
    .layouts = cuda_layouts,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .graph_launch = cuda_graph_launch,
    .graph_free = cuda_graph_free,
};

const kiln_backend_i *kiln__cuda_backend(void) { return &kiln_backend_cuda; }

#else
typedef int kiln_cuda_backend_disabled;
#endif
