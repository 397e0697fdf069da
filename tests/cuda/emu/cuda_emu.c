/* cuda_emu.c -- a host emulation of the CUDA runtime calls, cuBLASLt and
 * kiln's kcu_* launchers (src/backends/cuda/cuda_kernels.h), so that
 * tests/cuda/test_cuda_ops.c can run on a machine without a GPU (run.sh).
 *
 * What it checks: the backend's host code (planners, kernel table, attribute
 * handling, the cuBLASLt column-major mapping, the conv fallback) and the
 * test program itself. What it does not: the CUDA kernels (their index math
 * is transcribed here, their arithmetic is done in double). cuDNN is not
 * emulated (build with KILN_HAVE_CUDNN=0). Not part of libkiln. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/k_dwconv.h"
#include "backends/cuda/k_gconv.h"

/* ---- runtime ---- */
#define NREG 100000
static void *reg_p[NREG]; static size_t reg_n[NREG]; static int nreg;
static int find_reg(const void *p) {
    for (int i = 0; i < nreg; i++)
        if (reg_p[i] && (const char *)p >= (char *)reg_p[i] && (const char *)p < (char *)reg_p[i] + reg_n[i]) return i;
    return -1;
}
cudaError_t cudaGetDeviceCount(int *c) { *c = 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int d) { (void)d; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties_v2(struct cudaDeviceProp *p, int d) {
    (void)d; memset(p, 0, sizeof *p); strcpy(p->name, "emu"); p->major = 9; p->minor = 0; p->multiProcessorCount = 132; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) { return cudaGetDeviceProperties_v2(p, d); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned f) { (void)f; *s = (cudaStream_t)malloc(8); return cudaSuccess; }
cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = (cudaStream_t)malloc(8); return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t s) { free(s); return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return cudaSuccess; }
/* events: work runs when it is queued here, so an event is complete once
 * recorded (allocated, so that ASan sees a leak or a double destroy) */
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f) { (void)f; *e = (cudaEvent_t)malloc(8); return *e ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaEventDestroy(cudaEvent_t e) { free(e); return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { (void)s; return e ? cudaSuccess : cudaErrorInvalidResourceHandle; }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f) { (void)s, (void)f; return e ? cudaSuccess : cudaErrorInvalidResourceHandle; }
/* A freed cuBLASLt workspace kept for the next state's: mapping and
 * unmapping 32 MiB (and, under ASan, its shadow) for each of
 * test_cuda_diff's hundreds of contexts was most of its time. */
static void *spare_ws;
cudaError_t cudaMalloc(void **p, size_t n) {
    if (n == KILN_CUDA_LT_WORKSPACE && spare_ws) {
        *p = spare_ws;
        spare_ws = NULL;
    } else {
        *p = malloc(n + 64);
    }
    /* poison; not cuBLASLt's workspace, which the emulated matmul never
     * reads */
    if (*p && n != KILN_CUDA_LT_WORKSPACE) memset(*p, 0xCD, n);
    int slot = -1;
    for (int i = 0; i < nreg; i++) if (!reg_p[i]) { slot = i; break; }
    if (slot < 0) slot = nreg++;
    reg_p[slot] = *p; reg_n[slot] = n;
    return cudaSuccess;
}
/* mapped pinned host memory: the host's own (the emulated kernels run on the host) */
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) { (void)flags; *p = malloc(n ? n : 1); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned int flags) { (void)flags; *d = h; return cudaSuccess; }
cudaError_t cudaFreeHost(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    int i = find_reg(p);
    bool ws = i >= 0 && reg_n[i] == KILN_CUDA_LT_WORKSPACE;
    if (i >= 0) reg_p[i] = NULL;
    if (ws && !spare_ws) spare_ws = p;
    else free(p);
    return cudaSuccess;
}
/* copies from device memory to the host, counted (test_engine_host_inputs) */
static int n_dtoh;
int kiln_emu_dtoh_count(void);
int kiln_emu_dtoh_count(void) { return n_dtoh; }
/* launches of kcu_conv_gemv (test_conv_gemm: the GEMV tactic ran its kernel) */
static int n_gemv;
int kiln_emu_gemv_count(void);
int kiln_emu_gemv_count(void) { return n_gemv; }
/* launches of kcu_se (test_squeeze_excite: the fused tactics ran the one-launch kernel) */
static int n_se;
int kiln_emu_se_count(void);
int kiln_emu_se_count(void) { return n_se; }
/* launches of kcu_gconv_nhwc (test_gconv_nhwc: the grouped tactics ran kiln's kernel) */
static int n_gconv;
int kiln_emu_gconv_count(void);
int kiln_emu_gconv_count(void) { return n_gconv; }
static void count_dtoh(void *d, const void *s) { n_dtoh += find_reg(s) >= 0 && find_reg(d) < 0; }
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st) { (void)k; (void)st; count_dtoh(d, s); memmove(d, s, n); return cudaSuccess; }
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k) { (void)k; count_dtoh(d, s); memmove(d, s, n); return cudaSuccess; }
/* (not into cuBLASLt's workspace, which the emulated matmul never reads:
 * the tuner's poisoning of it before every tactic was most of the time of
 * test_cuda_diff's tuned graphs, page faults of 32 MiB blocks) */
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t st) {
    (void)st;
    int r = find_reg(p);
    if (r < 0 || reg_n[r] != KILN_CUDA_LT_WORKSPACE) memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, enum cudaMemcpyKind k, cudaStream_t st) {
    (void)k; (void)st;
    for (size_t r = 0; r < h; r++) memmove((char *)d + r * dp, (const char *)s + r * sp, w);
    return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    memset(a, 0, sizeof *a); a->type = find_reg(p) >= 0 ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered; return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
/* graphs: a capture is accepted and then reported invalidated (nothing recorded) */
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode m) { (void)s; (void)m; return cudaSuccess; }
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) { (void)s; *g = NULL; return cudaErrorStreamCaptureInvalidated; }
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long f) { (void)g; (void)f; *e = NULL; return cudaErrorNotSupported; }
cudaError_t cudaGraphDestroy(cudaGraph_t g) { (void)g; return cudaSuccess; }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) { (void)e; return cudaSuccess; }
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) { (void)e; (void)s; return cudaErrorNotSupported; }
const char *cudaGetErrorString(cudaError_t e) { (void)e; return "emu error"; }
const char *cudaGetErrorName(cudaError_t e) { (void)e; return "cudaErrorEmu"; }

/* ---- cuBLASLt ---- */
typedef struct { int ct; cublasOperation_t ta, tb; cublasLtEpilogue_t epi; const void *bias; } emu_desc;
typedef struct { cudaDataType_t t; uint64_t rows, cols; int64_t ld; int32_t batch; int64_t stride; } emu_layout;
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = (cublasLtHandle_t)malloc(8); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { free(h); return CUBLAS_STATUS_SUCCESS; }
const char *cublasLtGetStatusString(cublasStatus_t s) { (void)s; return "emu"; }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t c, cudaDataType_t s) {
    (void)s; emu_desc *e = calloc(1, sizeof *e); e->ct = c; *d = (cublasLtMatmulDesc_t)e; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { free(d); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v, size_t n) {
    (void)n; emu_desc *e = (emu_desc *)d;
    if (a == CUBLASLT_MATMUL_DESC_TRANSA) memcpy(&e->ta, v, sizeof e->ta);
    if (a == CUBLASLT_MATMUL_DESC_TRANSB) memcpy(&e->tb, v, sizeof e->tb);
    if (a == CUBLASLT_MATMUL_DESC_EPILOGUE) memcpy(&e->epi, v, sizeof e->epi);
    if (a == CUBLASLT_MATMUL_DESC_BIAS_POINTER) memcpy(&e->bias, v, sizeof e->bias);
    return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t r, uint64_t c, int64_t ld) {
    emu_layout *e = calloc(1, sizeof *e); e->t = t; e->rows = r; e->cols = c; e->ld = ld; e->batch = 1;
    if (ld < (int64_t)r) { fprintf(stderr, "EMU: ld %lld < rows %llu\n", (long long)ld, (unsigned long long)r); return CUBLAS_STATUS_INVALID_VALUE; }
    *l = (cublasLtMatrixLayout_t)e; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { free(l); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const void *v, size_t n) {
    (void)n; emu_layout *e = (emu_layout *)l;
    if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) memcpy(&e->batch, v, 4);
    if (a == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET) memcpy(&e->stride, v, 8);
    return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) { *p = (cublasLtMatmulPreference_t)malloc(8); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { free(p); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *v, size_t n) {
    (void)p; (void)a; (void)v; (void)n; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
    cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t p, int req, cublasLtMatmulHeuristicResult_t r[], int *ret) {
    (void)h; (void)d; (void)A; (void)B; (void)C; (void)D; (void)p; (void)req; memset(r, 0, sizeof r[0]); *ret = 1; return CUBLAS_STATUS_SUCCESS; }
static kiln_dtype kt(cudaDataType_t t) { return t == CUDA_R_16F ? KILN_DTYPE_FLOAT16 : t == CUDA_R_16BF ? KILN_DTYPE_BFLOAT16 : t == CUDA_R_64F ? KILN_DTYPE_FLOAT64 : KILN_DTYPE_FLOAT32; }
/* column-major element (i, j) of a stored matrix */
static double cm(const emu_layout *l, const void *p, int64_t b, uint64_t i, uint64_t j) {
    if (i >= l->rows || j >= l->cols) { fprintf(stderr, "EMU: index out of layout\n"); exit(3); }
    return kiln__load_f64(kt(l->t), p, b * l->stride + (int64_t)j * l->ld + (int64_t)i); }
/* products by the epilogue of their descriptor (0: none set; test_squeeze_excite: a SqueezeExcite's GEMMs
 * have the 1x1 FusedConvs' epilogues) */
static int n_lt_epi[1024];
int kiln_emu_lt_epilogue_count(int ep);
int kiln_emu_lt_epilogue_count(int ep) { return ep >= 0 && ep < 1024 ? n_lt_epi[ep] : 0; }
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *A, cublasLtMatrixLayout_t Al,
    const void *B, cublasLtMatrixLayout_t Bl, const void *beta, const void *C, cublasLtMatrixLayout_t Cl, void *D, cublasLtMatrixLayout_t Dl,
    const cublasLtMatmulAlgo_t *algo, void *ws, size_t wss, cudaStream_t st) {
    (void)h; (void)algo; (void)ws; (void)wss; (void)st;
    emu_desc *d = (emu_desc *)desc; emu_layout *a = (emu_layout *)Al, *b = (emu_layout *)Bl, *c = (emu_layout *)Cl, *dl = (emu_layout *)Dl;
    double al, be_;
    if (d->ct == CUBLAS_COMPUTE_64F) { al = *(const double *)alpha; be_ = *(const double *)beta; }
    else { al = *(const float *)alpha; be_ = *(const float *)beta; }
    uint64_t m = d->ta == CUBLAS_OP_N ? a->rows : a->cols, k = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
    uint64_t kb = d->tb == CUBLAS_OP_N ? b->rows : b->cols, n = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
    if (k != kb || c->rows != m || c->cols != n) { fprintf(stderr, "EMU: shape mismatch m%llu k%llu kb%llu n%llu c %llux%llu\n",
        (unsigned long long)m, (unsigned long long)k, (unsigned long long)kb, (unsigned long long)n, (unsigned long long)c->rows, (unsigned long long)c->cols); exit(3); }
    if ((int)d->epi >= 0 && (int)d->epi < 1024) n_lt_epi[(int)d->epi]++;
    int32_t batch = c->batch;
    for (int32_t bb = 0; bb < batch; bb++)
        for (uint64_t i = 0; i < m; i++) for (uint64_t j = 0; j < n; j++) {
            double acc = 0;
            for (uint64_t q = 0; q < k; q++) {
                double x = d->ta == CUBLAS_OP_N ? cm(a, A, a->batch > 1 ? bb : 0, i, q) : cm(a, A, a->batch > 1 ? bb : 0, q, i);
                double y = d->tb == CUBLAS_OP_N ? cm(b, B, b->batch > 1 ? bb : 0, q, j) : cm(b, B, b->batch > 1 ? bb : 0, j, q);
                acc += x * y;
            }
            int64_t off = bb * dl->stride + (int64_t)j * dl->ld + (int64_t)i;
            /* C and D share the layout; C may be apart from D (a residual) */
            double v = al * acc + (be_ != 0 ? be_ * kiln__load_f64(kt(dl->t), C, off) : 0.0);
            cublasLtEpilogue_t ep = d->epi;
            if (ep == CUBLASLT_EPILOGUE_BIAS || ep == CUBLASLT_EPILOGUE_RELU_BIAS || ep == CUBLASLT_EPILOGUE_GELU_BIAS) {
                if (!d->bias) { fprintf(stderr, "EMU: bias epilogue without a bias pointer\n"); exit(3); }
                v += kiln__load_f64(kt(dl->t), d->bias, (int64_t)i); /* one bias per row of D */
            }
            if (ep == CUBLASLT_EPILOGUE_RELU || ep == CUBLASLT_EPILOGUE_RELU_BIAS) v = v < 0 ? 0 : v; /* NaN kept: a GPU run checks cuBLASLt */
            if (ep == CUBLASLT_EPILOGUE_GELU || ep == CUBLASLT_EPILOGUE_GELU_BIAS)
                v = 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
            kiln__store_f64(kt(dl->t), D, off, v);
        }
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- launchers ---- */
static bool isf(kiln_dtype t) { return kiln__dtype_is_float(t); }
static double ld(kiln_dtype t, const void *p, int64_t i) { return kiln__load_f64(t, p, i); }
static void st_(kiln_dtype t, void *p, int64_t i, double v) { kiln__store_f64(t, p, i, v); }
static double clamp01(double v) { v = v > 1 ? 1 : v; return v < 0 ? 0 : v; }

int kcu_unary_has(int op, kiln_dtype t) {
    if (op < EW_U_ABS || op > EW_U_SHRINK) return 0;
    if (isf(t)) return 1;
    if (t == KILN_DTYPE_INT32 || t == KILN_DTYPE_INT64) return op == EW_U_ABS || op == EW_U_NEG || op == EW_U_SIGN || op == EW_U_RELU;
    return 0;
}
cudaError_t kcu_unary(int op, kiln_dtype t, const void *x, void *y, int64_t n, float alpha, float beta, float gamma, cudaStream_t s) {
    (void)s;
    if (!kcu_unary_has(op, t)) return cudaErrorInvalidValue;
    for (int64_t i = 0; i < n; i++) {
        if (!isf(t)) {
            int64_t v = kiln__load_i64(t, x, i), r = v;
            if (op == EW_U_ABS) r = v < 0 ? (int64_t)(0 - (uint64_t)v) : v;
            if (op == EW_U_NEG) r = (int64_t)(0 - (uint64_t)v);
            if (op == EW_U_SIGN) r = (v > 0) - (v < 0);
            if (op == EW_U_RELU) r = v < 0 ? 0 : v;
            kiln__store_i64(t, y, i, r);
            continue;
        }
        double v = ld(t, x, i), r = v, a = alpha, b = beta, g = gamma;
        switch (op) {
        case EW_U_ABS: r = fabs(v); break; case EW_U_NEG: r = -v; break; case EW_U_SQRT: r = sqrt(v); break;
        case EW_U_EXP: r = exp(v); break; case EW_U_LOG: r = log(v); break; case EW_U_RECIPROCAL: r = 1 / v; break;
        case EW_U_FLOOR: r = floor(v); break; case EW_U_CEIL: r = ceil(v); break; case EW_U_ROUND: r = rint(v); break;
        case EW_U_SIGN: r = v > 0 ? 1 : (v < 0 ? -1 : v); break;
        case EW_U_SIN: r = sin(v); break; case EW_U_COS: r = cos(v); break; case EW_U_TAN: r = tan(v); break;
        case EW_U_ASIN: r = asin(v); break; case EW_U_ACOS: r = acos(v); break; case EW_U_ATAN: r = atan(v); break;
        case EW_U_SINH: r = sinh(v); break; case EW_U_COSH: r = cosh(v); break; case EW_U_ASINH: r = asinh(v); break;
        case EW_U_ACOSH: r = acosh(v); break; case EW_U_ATANH: r = atanh(v); break; case EW_U_ERF: r = erf(v); break;
        case EW_U_RELU: r = v < 0 ? 0 : v; break; case EW_U_LEAKYRELU: r = v < 0 ? v * a : v; break;
        case EW_U_ELU: r = v < 0 ? a * expm1(v) : v; break;
        case EW_U_SELU: r = v > 0 ? g * v : g * a * expm1(v); break;
        case EW_U_CELU: r = v < 0 ? a * expm1(v / a) : v; break;
        case EW_U_SIGMOID: r = 1 / (1 + exp(-v)); break; case EW_U_HARDSIGMOID: r = clamp01(a * v + b); break;
        case EW_U_HARDSWISH: r = v * clamp01(v / 6 + 0.5); break; case EW_U_TANH: r = tanh(v); break;
        case EW_U_SOFTPLUS: r = (v > 0 ? v : 0) + log1p(exp(-fabs(v))); break; case EW_U_SOFTSIGN: r = v / (1 + fabs(v)); break;
        case EW_U_MISH: r = v * tanh((v > 0 ? v : 0) + log1p(exp(-fabs(v)))); break;
        case EW_U_THRESHOLDEDRELU: r = v <= a ? 0 : v; break;
        case EW_U_SHRINK: r = v >= -a && v <= a ? 0 : (v < -a ? v + b : v - b); break;
        }
        if (t == KILN_DTYPE_FLOAT32 || kiln_dtype_size(t) == 2) r = (float)r;
        st_(t, y, i, r);
    }
    return cudaSuccess;
}
cudaError_t kcu_predicate(int op, kiln_dtype t, const void *x, uint8_t *y, int64_t n, int pos, int neg, cudaStream_t s) {
    (void)s;
    for (int64_t i = 0; i < n; i++) {
        if (op == EW_U_NOT) { y[i] = !((const uint8_t *)x)[i]; continue; }
        double v = ld(t, x, i);
        y[i] = op == EW_U_ISNAN ? isnan(v) : ((pos && v == INFINITY) || (neg && v == -INFINITY));
    }
    return cudaSuccess;
}
#define KB(t) (1u << (unsigned)(t))
static unsigned FLO = KB(KILN_DTYPE_FLOAT32) | KB(KILN_DTYPE_FLOAT16) | KB(KILN_DTYPE_BFLOAT16) | KB(KILN_DTYPE_FLOAT64);
static unsigned bin_mask(int op) {
    unsigned ui = KB(KILN_DTYPE_UINT8) | KB(KILN_DTYPE_UINT16) | KB(KILN_DTYPE_UINT32) | KB(KILN_DTYPE_UINT64);
    unsigned si = KB(KILN_DTYPE_INT8) | KB(KILN_DTYPE_INT16) | KB(KILN_DTYPE_INT32) | KB(KILN_DTYPE_INT64);
    unsigned ar = FLO | si | ui;
    switch (op) {
    case EW_B_ADD: case EW_B_SUB: case EW_B_MUL: case EW_B_DIV: case EW_B_MOD: case EW_B_PYMOD: case EW_B_MAX: case EW_B_MIN: return ar;
    case EW_B_PRELU: return FLO | si;
    case EW_B_POW: return FLO;
    case EW_B_EQ: case EW_B_LT: case EW_B_LE: case EW_B_GT: case EW_B_GE: return ar | KB(KILN_DTYPE_BOOL);
    case EW_B_AND: case EW_B_OR: case EW_B_XOR: return KB(KILN_DTYPE_BOOL);
    case EW_B_SHL: case EW_B_SHR: return ui;
    default: return 0;
    }
}
int kcu_binary_has(int op, kiln_dtype t) { return (unsigned)t < 32 && (bin_mask(op) & KB(t)) != 0; }
static void bc_off(const kcu_bcast *g, int nin, int64_t i, int64_t *off) {
    if (g->all_flat) { for (int k = 0; k < nin; k++) off[k] = g->flat[k] == KCU_FLAT_SAME ? i : 0; return; }
    for (int k = 0; k < nin; k++) off[k] = 0;
    int64_t rem = i;
    for (int d = g->rank - 1; d > 0; d--) { int64_t c = rem % g->dims[d]; rem /= g->dims[d]; for (int k = 0; k < nin; k++) off[k] += c * g->st[k][d]; }
    if (g->rank > 0) for (int k = 0; k < nin; k++) off[k] += rem * g->st[k][0];
}
static int64_t pymod(int64_t a, int64_t b) { if (b == 0 || b == -1) return 0; int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
cudaError_t kcu_binary(int op, kiln_dtype t, const kcu_bcast *g, void *y, const void *A, const void *B, cudaStream_t s) {
    (void)s;
    if (!kcu_binary_has(op, t)) return cudaErrorInvalidValue;
    bool cmp = op >= EW_B_EQ && op <= EW_B_XOR;
    for (int64_t i = 0; i < g->n; i++) {
        int64_t off[2]; bc_off(g, 2, i, off);
        if (cmp) {
            double a = ld(t, A, off[0]), b = ld(t, B, off[1]); int r = 0;
            switch (op) { case EW_B_EQ: r = a == b; break; case EW_B_LT: r = a < b; break; case EW_B_LE: r = a <= b; break;
            case EW_B_GT: r = a > b; break; case EW_B_GE: r = a >= b; break; case EW_B_AND: r = (a != 0) & (b != 0); break;
            case EW_B_OR: r = (a != 0) | (b != 0); break; default: r = (a != 0) ^ (b != 0); }
            ((uint8_t *)y)[i] = (uint8_t)r; continue;
        }
        if (isf(t)) {
            double a = ld(t, A, off[0]), b = ld(t, B, off[1]), r = 0;
            bool f32 = t != KILN_DTYPE_FLOAT64;
            if (f32) { a = (float)a; b = (float)b; }
            switch (op) {
            case EW_B_ADD: r = f32 ? (double)((float)a + (float)b) : a + b; break;
            case EW_B_SUB: r = f32 ? (double)((float)a - (float)b) : a - b; break;
            case EW_B_MUL: r = f32 ? (double)((float)a * (float)b) : a * b; break;
            case EW_B_DIV: r = f32 ? (double)((float)a / (float)b) : a / b; break;
            case EW_B_MOD: r = fmod(a, b); break;
            case EW_B_PYMOD: { double m = fmod(a, b); r = (m != 0 && ((m < 0) != (b < 0))) ? m + b : m; break; }
            case EW_B_MAX: r = (a != a || a > b) ? a : b; break; case EW_B_MIN: r = (a != a || a < b) ? a : b; break;
            case EW_B_PRELU: r = a < 0 ? (f32 ? (double)((float)a * (float)b) : a * b) : a; break;
            case EW_B_POW: r = f32 ? (double)powf((float)a, (float)b) : pow(a, b); break;
            }
            st_(t, y, i, r); continue;
        }
        if (t == KILN_DTYPE_UINT64 || t == KILN_DTYPE_UINT32 || t == KILN_DTYPE_UINT16 || t == KILN_DTYPE_UINT8) {
            uint64_t a = (uint64_t)kiln__load_i64(t, A, off[0]), b = (uint64_t)kiln__load_i64(t, B, off[1]), r = 0;
            unsigned bits = 8 * (unsigned)kiln_dtype_size(t);
            switch (op) {
            case EW_B_SHL: r = b >= bits ? 0 : a << b; break;
            case EW_B_SHR: r = b >= bits ? 0 : a >> b; break;
            case EW_B_ADD: r = a + b; break; case EW_B_SUB: r = a - b; break; case EW_B_MUL: r = a * b; break;
            case EW_B_DIV: r = b == 0 ? 0 : a / b; break;
            case EW_B_MOD: case EW_B_PYMOD: r = b == 0 ? 0 : a % b; break;
            case EW_B_MAX: r = a > b ? a : b; break; case EW_B_MIN: r = a < b ? a : b; break;
            default: r = a; break;
            }
            kiln__store_i64(t, y, i, (int64_t)r); continue;
        }
        int64_t a = kiln__load_i64(t, A, off[0]), b = kiln__load_i64(t, B, off[1]), r = 0;
        switch (op) {
        case EW_B_ADD: r = (int64_t)((uint64_t)a + (uint64_t)b); break; case EW_B_SUB: r = (int64_t)((uint64_t)a - (uint64_t)b); break;
        case EW_B_MUL: r = (int64_t)((uint64_t)a * (uint64_t)b); break;
        case EW_B_DIV: r = b == 0 ? 0 : b == -1 ? (int64_t)(0 - (uint64_t)a) : a / b; break;
        case EW_B_MOD: r = (b == 0 || b == -1) ? 0 : a % b; break;
        case EW_B_PYMOD: r = pymod(a, b); break;
        case EW_B_MAX: r = a > b ? a : b; break; case EW_B_MIN: r = a < b ? a : b; break;
        case EW_B_PRELU: r = a < 0 ? (int64_t)((uint64_t)a * (uint64_t)b) : a; break;
        }
        kiln__store_i64(t, y, i, r);
    }
    return cudaSuccess;
}
cudaError_t kcu_div_scalar(kiln_dtype t, void *y, int64_t n, float d, cudaStream_t s) {
    (void)s; for (int64_t i = 0; i < n; i++) st_(t, y, i, t == KILN_DTYPE_FLOAT64 ? ld(t, y, i) / d : (float)ld(t, y, i) / d); return cudaSuccess; }
cudaError_t kcu_where(size_t es, const kcu_bcast *g, void *out, const uint8_t *c, const void *x, const void *y, cudaStream_t s) {
    (void)s;
    for (int64_t i = 0; i < g->n; i++) { int64_t off[3]; bc_off(g, 3, i, off);
        memcpy((char *)out + i * es, c[off[0]] ? (const char *)x + off[1] * es : (const char *)y + off[2] * es, es); }
    return cudaSuccess;
}
int kcu_clip_has(kiln_dtype t) { return isf(t) || t == KILN_DTYPE_INT8 || t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_INT32 || t == KILN_DTYPE_INT64; }
cudaError_t kcu_clip(kiln_dtype t, const void *x, void *y, int64_t n, const kcu_clip_bounds *b, cudaStream_t s) {
    (void)s;
    if (isf(t)) {
        double lo = b->has_lo ? (b->lo_dev ? ld(t, b->lo_dev, 0) : b->lo_f) : -INFINITY;
        double hi = b->has_hi ? (b->hi_dev ? ld(t, b->hi_dev, 0) : b->hi_f) : INFINITY;
        if (t != KILN_DTYPE_FLOAT64) { lo = (float)lo; hi = (float)hi; }
        for (int64_t i = 0; i < n; i++) { double v = ld(t, x, i); v = v < lo ? lo : v; st_(t, y, i, v > hi ? hi : v); }
    } else {
        int64_t lo = b->lo_dev ? kiln__load_i64(t, b->lo_dev, 0) : b->lo_i, hi = b->hi_dev ? kiln__load_i64(t, b->hi_dev, 0) : b->hi_i;
        for (int64_t i = 0; i < n; i++) { int64_t v = kiln__load_i64(t, x, i); if (b->has_lo && v < lo) v = lo; if (b->has_hi && v > hi) v = hi; kiln__store_i64(t, y, i, v); }
    }
    return cudaSuccess;
}
int kcu_cast_has(kiln_dtype t) { return t != KILN_DTYPE_STRING && t != KILN_DTYPE_UNDEFINED && kiln__dtype_valid(t); }
static int64_t f2i64(double v) { return (v >= -9223372036854775808.0 && v < 9223372036854775808.0) ? (int64_t)v : INT64_MIN; }
static uint64_t f2u64(double v) { if (v >= 0.0 && v < 18446744073709551616.0) return (uint64_t)v; return (uint64_t)f2i64(v); }
static float odd(double d) {
    float f = (float)d;
    if (isnan(d) || isinf(d) || (double)f == d) return f;
    if (isinf(f) || fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
    uint32_t u; memcpy(&u, &f, 4); u |= 1u; memcpy(&f, &u, 4); return f;
}
cudaError_t kcu_cast(kiln_dtype from, kiln_dtype to, const void *x, void *y, int64_t n, cudaStream_t s) {
    (void)s;
    bool half_to = to == KILN_DTYPE_FLOAT16 || to == KILN_DTYPE_BFLOAT16;
    for (int64_t i = 0; i < n; i++) {
        if (to == KILN_DTYPE_BOOL) { ((uint8_t *)y)[i] = from == KILN_DTYPE_BOOL ? ((const uint8_t *)x)[i] != 0 : (isf(from) ? ld(from, x, i) != 0 : kiln__load_i64(from, x, i) != 0); continue; }
        if (isf(from)) {
            double v = ld(from, x, i);
            if (half_to) st_(to, y, i, from == KILN_DTYPE_FLOAT64 ? odd(v) : (float)v);
            else if (isf(to)) st_(to, y, i, v);
            else if (kiln__dtype_is_signed(to)) kiln__store_i64(to, y, i, f2i64(v));
            else kiln__store_i64(to, y, i, (int64_t)f2u64(v));
            continue;
        }
        if (from == KILN_DTYPE_BOOL) { int b = ((const uint8_t *)x)[i] != 0; if (isf(to)) st_(to, y, i, b); else kiln__store_i64(to, y, i, b); continue; }
        if (from == KILN_DTYPE_UINT64) {
            uint64_t u = ((const uint64_t *)x)[i];
            if (half_to || to == KILN_DTYPE_FLOAT32) st_(to, y, i, (float)u); else if (isf(to)) st_(to, y, i, (double)u); else kiln__store_i64(to, y, i, (int64_t)u);
            continue;
        }
        int64_t v = kiln__load_i64(from, x, i);
        if (half_to || to == KILN_DTYPE_FLOAT32) st_(to, y, i, (float)v); else if (isf(to)) st_(to, y, i, (double)v); else kiln__store_i64(to, y, i, v);
    }
    return cudaSuccess;
}
cudaError_t kcu_strided_copy(size_t es, const kcu_copy *c, void *dst, const void *src, cudaStream_t s) {
    (void)s;
    for (int64_t i = 0; i < c->n; i++) {
        int64_t rem = i, so = 0, dof = 0;
        for (int d = c->rank - 1; d > 0; d--) { int64_t q = rem % c->dims[d]; rem /= c->dims[d]; so += q * c->src_st[d]; dof += q * c->dst_st[d]; }
        if (c->rank > 0) { so += rem * c->src_st[0]; dof += rem * c->dst_st[0]; }
        memcpy((char *)dst + (c->dst_dense ? i : dof) * (int64_t)es, (const char *)src + so * (int64_t)es, es);
    }
    return cudaSuccess;
}
cudaError_t kcu_transpose2d(size_t es, const kcu_copy *bc, int64_t P, int64_t Q, int64_t sq, void *dst, const void *src, cudaStream_t s) {
    (void)s;
    int64_t nb = 1; for (int d = 0; d < bc->rank; d++) nb *= bc->dims[d];
    for (int64_t b = 0; b < nb; b++) {
        int64_t boff = 0, rem = b;
        for (int d = bc->rank - 1; d >= 0; d--) { int64_t q = rem % bc->dims[d]; rem /= bc->dims[d]; boff += q * bc->src_st[d]; }
        for (int64_t p = 0; p < P; p++) for (int64_t q = 0; q < Q; q++)
            memcpy((char *)dst + (b * P * Q + p * Q + q) * (int64_t)es, (const char *)src + (boff + q * sq + p) * (int64_t)es, es);
    }
    return cudaSuccess;
}
cudaError_t kcu_gather(size_t es, kiln_dtype it, const void *x, const void *ind, void *y, int64_t outer, int64_t A, int64_t ni, int64_t inner, int *oob, int tag, cudaStream_t s) {
    (void)s;
    int64_t total = outer * ni * inner;
    for (int64_t i = 0; i < total; i++) {
        int64_t k = i % inner, t = i / inner, j = t % ni, o = t / ni;
        int64_t v = kiln__load_i64(it, ind, j); if (v < 0) v += A;
        if ((v < 0 || v >= A) && oob) *oob = tag;
        if (v < 0 || v >= A) memset((char *)y + i * (int64_t)es, 0, es);
        else memcpy((char *)y + i * (int64_t)es, (const char *)x + ((o * A + v) * inner + k) * (int64_t)es, es);
    }
    return cudaSuccess;
}
cudaError_t kcu_write_i64(int64_t *dst, int n, const kcu_i64s *vals, cudaStream_t s) { (void)s; if (n < 0 || n > KILN_MAX_RANK) return cudaErrorInvalidValue; for (int i = 0; i < n; i++) dst[i] = vals->v[i]; return cudaSuccess; }
cudaError_t kcu_fill(size_t es, void *dst, int64_t n, const void *val, cudaStream_t s) { (void)s; for (int64_t i = 0; i < n; i++) memcpy((char *)dst + i * (int64_t)es, val, es); return cudaSuccess; }
cudaError_t kcu_probe(void) { return cudaSuccess; }
cudaError_t kcu_softmax(int kind, kiln_dtype t, const void *x, void *y, int64_t outer, int64_t n, int64_t inner, cudaStream_t s) {
    (void)s;
    for (int64_t r = 0; r < outer * inner; r++) {
        int64_t o = r / inner, j = r % inner, base = o * n * inner + j;
        double m = -INFINITY; for (int64_t k = 0; k < n; k++) { double v = ld(t, x, base + k * inner); m = (v > m || v != v) ? v : m; }
        double sm = 0; for (int64_t k = 0; k < n; k++) sm += exp(ld(t, x, base + k * inner) - m);
        for (int64_t k = 0; k < n; k++) { double v = ld(t, x, base + k * inner) - m; st_(t, y, base + k * inner, kind == 0 ? exp(v) / sm : v - log(sm)); }
    }
    return cudaSuccess;
}
cudaError_t kcu_layernorm(kiln_dtype t, const void *x, const void *sc, int ss, const void *b, int bs, void *y, kiln_dtype stt, void *mean, void *inv, int64_t rows, int64_t D, float eps, cudaStream_t s) {
    (void)s;
    for (int64_t r = 0; r < rows; r++) {
        double sm = 0; for (int64_t j = 0; j < D; j++) sm += ld(t, x, r * D + j);
        double mu = D ? sm / D : 0, q = 0; for (int64_t j = 0; j < D; j++) { double d = ld(t, x, r * D + j) - mu; q += d * d; }
        double iv = 1 / sqrt((D ? q / D : 0) + eps);
        for (int64_t j = 0; j < D; j++) { double v = (ld(t, x, r * D + j) - mu) * iv * ld(t, sc, ss ? 0 : j); if (b) v += ld(t, b, bs ? 0 : j); st_(t, y, r * D + j, v); }
        if (mean) st_(stt, mean, r, mu);
        if (inv) st_(stt, inv, r, iv);
    }
    return cudaSuccess;
}
cudaError_t kcu_rmsnorm(kiln_dtype t, const void *x, const void *sc, int ss, void *y, int64_t rows, int64_t D, float eps, cudaStream_t s) {
    (void)s;
    for (int64_t r = 0; r < rows; r++) {
        double q = 0; for (int64_t j = 0; j < D; j++) { double v = ld(t, x, r * D + j); q += v * v; }
        double iv = 1 / sqrt((D ? q / D : 0) + eps);
        for (int64_t j = 0; j < D; j++) st_(t, y, r * D + j, ld(t, x, r * D + j) * iv * ld(t, sc, ss ? 0 : j));
    }
    return cudaSuccess;
}
cudaError_t kcu_add_layernorm(kiln_dtype t, const void *x, const void *r, int64_t rr, void *sum, const void *sc, int ss, const void *b, int bs, void *y, int64_t rows, int64_t D, float eps, cudaStream_t s) {
    (void)s;
    if (rows <= 0) return cudaSuccess;
    if (rr <= 0 || rows % rr) return cudaErrorInvalidValue;
    double *v = malloc(sizeof(double) * (size_t)(D > 0 ? D : 1));
    if (!v) return cudaErrorMemoryAllocation;
    for (int64_t i = 0; i < rows; i++) {
        double sm = 0;
        for (int64_t j = 0; j < D; j++) {
            st_(t, y, i * D + j, ld(t, x, i * D + j) + ld(t, r, (i % rr) * D + j)); /* rounded to t */
            v[j] = ld(t, y, i * D + j);
            if (sum) st_(t, sum, i * D + j, v[j]);
            sm += v[j];
        }
        double mu = D ? sm / D : 0, q = 0; for (int64_t j = 0; j < D; j++) q += (v[j] - mu) * (v[j] - mu);
        double iv = 1 / sqrt((D ? q / D : 0) + eps);
        for (int64_t j = 0; j < D; j++) { double w = (v[j] - mu) * iv * ld(t, sc, ss ? 0 : j); if (b) w += ld(t, b, bs ? 0 : j); st_(t, y, i * D + j, w); }
    }
    free(v);
    return cudaSuccess;
}
cudaError_t kcu_batchnorm(kiln_dtype t, const void *x, void *y, kiln_dtype pt, const void *sc, const void *bi, const void *mn, const void *var, float *coef, int64_t N, int64_t C, int64_t plane, int pe, float eps, cudaStream_t s) {
    (void)s; (void)coef;
    for (int64_t i = 0; i < N * C * plane; i++) {
        int64_t p = i / plane, ch = p % C, k = pe ? ch * plane + (i % plane) : ch;
        double mul = ld(pt, sc, k) / sqrt(ld(pt, var, k) + eps), add = ld(pt, bi, k) - ld(pt, mn, k) * mul;
        st_(t, y, i, ld(t, x, i) * mul + add);
    }
    return cudaSuccess;
}
cudaError_t kcu_reduce_run(int kind, kiln_dtype t, const kcu_reduce *g, const void *x, void *y, cudaStream_t s) {
    (void)s;
    for (int64_t o = 0; o < g->out_n; o++) {
        int64_t ko = 0, rem = o;
        for (int d = g->krank - 1; d >= 0; d--) { ko += (rem % g->kdims[d]) * g->kst[d]; rem /= g->kdims[d]; }
        double a = kind == RK_PROD ? 1 : (kind == RK_MAX || kind == RK_LOGSUMEXP) ? -INFINITY : kind == RK_MIN ? INFINITY : 0;
        for (int pass = 0; pass < (kind == RK_LOGSUMEXP ? 2 : 1); pass++) {
            double shift = isfinite(a) ? a : 0, sm = 0;
            for (int64_t r = 0; r < g->R; r++) {
                int64_t ro = 0, rr = r;
                for (int d = g->rrank - 1; d >= 0; d--) { ro += (rr % g->rdims[d]) * g->rst[d]; rr /= g->rdims[d]; }
                double v = ld(t, x, ko + ro);
                if (pass == 1) { sm += exp(v - shift); continue; }
                switch (kind) { case RK_L1: a += fabs(v); break; case RK_L2: case RK_SUMSQUARE: a += v * v; break;
                case RK_PROD: a *= v; break; case RK_MAX: case RK_LOGSUMEXP: a = (v > a || v != v) ? v : a; break;
                case RK_MIN: a = (v < a || v != v) ? v : a; break; default: a += v; }
            }
            if (pass == 1) a = log(sm) + shift;
        }
        if (kind == RK_MEAN) a = g->R > 0 ? a / g->R : NAN;
        if (kind == RK_L2) a = sqrt(a);
        if (kind == RK_LOGSUM) a = log(a);
        st_(t, y, o, a);
    }
    return cudaSuccess;
}
static void unravel(int ns, const int64_t *dims, int64_t p, int64_t *c) { for (int i = ns - 1; i >= 0; i--) { c[i] = p % dims[i]; p /= dims[i]; } }
cudaError_t kcu_pool_run(kiln_dtype t, const kcu_pool *g, const void *x, void *y, int64_t *ind, cudaStream_t s) {
    (void)s;
    for (int64_t i = 0; i < g->out_n; i++) {
        int64_t pl = i / g->out_sz, p = i % g->out_sz, o[3] = {0, 0, 0}; unravel(g->ns, g->out, p, o);
        int64_t kn = 1; for (int d = 0; d < g->ns; d++) kn *= g->k[d];
        double best = -INFINITY, acc = 0; int64_t bi = -1, nv = 0, np = 0;
        for (int64_t kp = 0; kp < kn; kp++) {
            int64_t kx[3] = {0, 0, 0}, idx = 0; unravel(g->ns, g->k, kp, kx); bool in = true, pd = true;
            for (int d = 0; d < g->ns; d++) { int64_t q = o[d] * g->s[d] - g->pb[d] + kx[d] * g->d[d]; if (q < 0 || q >= g->in[d]) in = false; if (q < -g->pb[d] || q >= g->in[d] + g->pe[d]) pd = false; idx = idx * g->in[d] + q; }
            if (in) { double v = ld(t, x, pl * g->in_sz + idx); if (g->kind == 0) { if (v > best || bi < 0 || (v != v && best == best)) { best = v; bi = idx; } } else acc += v; nv++; } else if (pd) np++;
        }
        st_(t, y, i, g->kind == 0 ? best : acc / (double)(g->count_include_pad ? nv + np : nv));
        if (ind) ind[i] = pl * g->in_sz + bi;
    }
    return cudaSuccess;
}
cudaError_t kcu_pool_nhwc_run(kiln_dtype t, const kcu_pool_nhwc *g, const void *x, void *y, cudaStream_t s) {
    (void)s;
    for (int64_t n = 0; n < g->N; n++) for (int64_t ho = 0; ho < g->Ho; ho++) for (int64_t wo = 0; wo < g->Wo; wo++) for (int64_t c = 0; c < g->C; c++) {
        double best = -INFINITY, acc = 0; int64_t nv = 0, np = 0;
        for (int64_t i = 0; i < g->kh; i++) for (int64_t j = 0; j < g->kw; j++) {
            int64_t h = ho * g->sh - g->ph + i * g->dh, w = wo * g->sw - g->pw + j * g->dw;
            if (h >= 0 && h < g->H && w >= 0 && w < g->W) { double v = ld(t, x, ((n * g->H + h) * g->W + w) * g->C + c); if (g->kind == 0) { if (nv == 0 || v > best || (v != v && best == best)) best = v; } else acc += v; nv++; }
            else if (h >= -g->ph && h < g->H + g->peh && w >= -g->pw && w < g->W + g->pew) np++;
        }
        st_(t, y, ((n * g->Ho + ho) * g->Wo + wo) * g->C + c, g->kind == 0 ? best : acc / (double)(g->count_include_pad ? nv + np : nv));
    }
    return cudaSuccess;
}
cudaError_t kcu_gap_nhwc(kiln_dtype t, int64_t N, int64_t HW, int64_t C, const void *x, void *y, float *part, int clusters, cudaStream_t s) {
    (void)s;
    if (N * C <= 0) return cudaSuccess;
    int64_t S = kcu_gap_nhwc_splits(N, HW, C);
    bool need = S > 1 && !kcu_gap_nhwc_cluster(S, clusters); /* partial sums in `part` */
    if (S > 65535 || (need && !part)) return cudaErrorInvalidValue;
    /* k_pool.cu's grid: (channel blocks of every image, 1, S), 16-byte vectors where C and the pointers allow */
    const int64_t vw = 16 / (int64_t)kiln_dtype_size(t);
    const int64_t v = vw > 1 && C % vw == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0 ? vw : 1;
    const int64_t cv = C / v, tx = cv < 32 ? cv : 32;
    if (!kcu_grid_ok((cv + tx - 1) / tx * N, 1, S)) return cudaErrorInvalidConfiguration;
    if (need) memset(part, 0, (size_t)(S * N * C) * sizeof(float)); /* the whole buffer: ASan checks its size */
    else if (part) return cudaErrorInvalidValue; /* the caller sized scratch it does not need */
    for (int64_t n = 0; n < N; n++) for (int64_t c = 0; c < C; c++) {
        double acc = 0; for (int64_t p = 0; p < HW; p++) acc += ld(t, x, (n * HW + p) * C + c);
        st_(t, y, n * C + c, acc / (double)HW);
    }
    return cudaSuccess;
}
cudaError_t kcu_s2d_nhwc(kiln_dtype t, int64_t N, int64_t C, int64_t H, int64_t W, int64_t ph, int64_t pw, int64_t Lh, int64_t Lw, int64_t Cp, const void *x, void *y, cudaStream_t s) {
    (void)s;
    if (Cp < 4 * C) return cudaErrorInvalidValue;
    for (int64_t n = 0; n < N; n++) for (int64_t l = 0; l < Lh; l++) for (int64_t m = 0; m < Lw; m++) for (int64_t cc = 0; cc < Cp; cc++) {
        int64_t c = cc / 4, h = 2 * l + (cc / 2) % 2 - ph, w = 2 * m + cc % 2 - pw;
        st_(t, y, ((n * Lh + l) * Lw + m) * Cp + cc, c < C && h >= 0 && h < H && w >= 0 && w < W ? ld(t, x, ((n * C + c) * H + h) * W + w) : 0);
    }
    return cudaSuccess;
}
cudaError_t kcu_nchw_to_nhwc(kiln_dtype t, int64_t N, int64_t C, int64_t HW, int64_t Cp, const void *x, void *y, cudaStream_t s) {
    (void)s;
    if (Cp < C) return cudaErrorInvalidValue;
    for (int64_t n = 0; n < N; n++) for (int64_t p = 0; p < HW; p++) for (int64_t c = 0; c < Cp; c++)
        st_(t, y, (n * HW + p) * Cp + c, c < C ? ld(t, x, (n * C + c) * HW + p) : 0);
    return cudaSuccess;
}
cudaError_t kcu_im2col(kiln_dtype t, const kcu_conv *g, const void *x, int64_t n, int64_t grp, void *col, cudaStream_t s) {
    (void)s;
    for (int64_t i = 0; i < g->Cg * g->k_sz * g->out_sz; i++) {
        int64_t p = i % g->out_sz, row = i / g->out_sz, kk = row % g->k_sz, c = row / g->k_sz, o[3] = {0, 0, 0}, kx[3] = {0, 0, 0}, idx = 0; bool in = true;
        unravel(g->ns, g->out, p, o); unravel(g->ns, g->k, kk, kx);
        for (int d = 0; d < g->ns; d++) { int64_t q = o[d] * g->s[d] - g->pb[d] + kx[d] * g->d[d]; if (q < 0 || q >= g->in[d]) in = false; idx = idx * g->in[d] + q; }
        st_(t, col, i, in ? ld(t, x, (n * g->C + grp * g->Cg + c) * g->in_sz + idx) : 0);
    }
    return cudaSuccess;
}
cudaError_t kcu_patches(kiln_dtype t, const kcu_patch *p, const void *x, void *col, cudaStream_t s) {
    (void)s;
    int64_t ckk = p->C * p->kh * p->kw;
    if (p->Kp < ckk + (p->one_col ? 1 : 0) || p->kh > p->sh || p->kw > p->sw || (p->Ho - 1) * p->sh + p->kh > p->H ||
        (p->Wo - 1) * p->sw + p->kw > p->W)
        return cudaErrorInvalidValue;
    for (int64_t r = 0; r < p->N * p->Ho * p->Wo; r++) for (int64_t j = 0; j < p->Kp; j++) {
        int64_t ow = r % p->Wo, oh = (r / p->Wo) % p->Ho, n = r / (p->Wo * p->Ho), c, i, k;
        if (j >= ckk) { st_(t, col, r * p->Kp + j, j == ckk && p->one_col ? 1 : 0); continue; }
        if (p->nhwc_in) { c = j % p->C; k = (j / p->C) % p->kw; i = j / (p->C * p->kw); }
        else { k = j % p->kw; i = (j / p->kw) % p->kh; c = j / (p->kw * p->kh); }
        int64_t h = oh * p->sh + i, w = ow * p->sw + k;
        st_(t, col, r * p->Kp + j, ld(t, x, p->nhwc_in ? ((n * p->H + h) * p->W + w) * p->C + c : ((n * p->C + c) * p->H + h) * p->W + w));
    }
    return cudaSuccess;
}
cudaError_t kcu_conv_direct(kiln_dtype t, const kcu_conv *g, const void *x, const void *w, const void *b, void *y, cudaStream_t s) {
    (void)s;
    for (int64_t i = 0; i < g->N * g->M * g->out_sz; i++) {
        int64_t p = i % g->out_sz, tt = i / g->out_sz, m = tt % g->M, n = tt / g->M, grp = m / g->Mg, o[3] = {0, 0, 0}; unravel(g->ns, g->out, p, o);
        double acc = b ? ld(t, b, m) : 0;
        for (int64_t kk = 0; kk < g->k_sz; kk++) { int64_t kx[3] = {0, 0, 0}, idx = 0; bool in = true; unravel(g->ns, g->k, kk, kx);
            for (int d = 0; d < g->ns; d++) { int64_t q = o[d] * g->s[d] - g->pb[d] + kx[d] * g->d[d]; if (q < 0 || q >= g->in[d]) in = false; idx = idx * g->in[d] + q; }
            if (!in) continue;
            for (int64_t c = 0; c < g->Cg; c++) acc += ld(t, x, (n * g->C + grp * g->Cg + c) * g->in_sz + idx) * ld(t, w, (m * g->Cg + c) * g->k_sz + kk); }
        st_(t, y, i, acc);
    }
    return cudaSuccess;
}
cudaError_t kcu_gemm_simple(kiln_dtype t, int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t batch, double alpha, const void *A, int64_t lda, int64_t sa,
                            const void *B, int64_t ldb, int64_t sb, double beta, void *C, int64_t ldc, int64_t sc, cudaStream_t s) {
    (void)s;
    for (int64_t b = 0; b < batch; b++) for (int64_t i = 0; i < M; i++) for (int64_t j = 0; j < N; j++) {
        double acc = 0;
        for (int64_t k = 0; k < K; k++) acc += ld(t, A, b * sa + (ta ? k * lda + i : i * lda + k)) * ld(t, B, b * sb + (tb ? j * ldb + k : k * ldb + j));
        int64_t o = b * sc + i * ldc + j; double v = alpha * acc; if (beta != 0) v += beta * ld(t, C, o); st_(t, C, o, v);
    }
    return cudaSuccess;
}

/* ---- fused layers (k_fused.cu) ---- */
_Static_assert(KILN_FC_ACT_COUNT == 8, "emu_act: handle every KILN_FC_ACT_* (then update this count)");
static double emu_act(int act, double a, double b, double x) {
    switch (act) {
    case KILN_FC_ACT_RELU: return x < 0 ? 0 : x;
    case KILN_FC_ACT_CLIP: return x < a ? a : (x > b ? b : x);
    case KILN_FC_ACT_LEAKY_RELU: return x >= 0 ? x : a * x;
    case KILN_FC_ACT_SIGMOID: return 1 / (1 + exp(-x));
    case KILN_FC_ACT_SILU: return x / (1 + exp(-x));
    case KILN_FC_ACT_HARD_SWISH: { double t = x / 6 + 0.5; t = t < 0 ? 0 : t > 1 ? 1 : t; return x * t; }
    case KILN_FC_ACT_HARD_SIGMOID: { double t = a * x + b; return t < 0 ? 0 : t > 1 ? 1 : t; }
    case KCU_ACT_GELU_ERF: return x * 0.5 * (1 + erf(x / sqrt(2.0)));
    case KCU_ACT_GELU_TANH: return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    default: return x;
    }
}
cudaError_t kcu_bias_act(kiln_dtype t, const void *x, void *y, const void *bias, const void *r, int64_t N, int64_t M,
                         int64_t plane, int act, float alpha, float beta, cudaStream_t s) {
    (void)s;
    if (!isf(t)) return cudaErrorInvalidValue;
    for (int64_t i = 0; i < N * M * plane; i++) {
        double v = ld(t, x, i);
        if (bias) v += ld(t, bias, (i / plane) % M);
        if (r) v += ld(t, r, i);
        st_(t, y, i, emu_act(act, alpha, beta, v));
    }
    return cudaSuccess;
}
cudaError_t kcu_conv_gemv(kiln_dtype t, int64_t N, int64_t K, int64_t M, const void *x, const void *w, const void *bias,
                          const void *r, void *y, int act, float alpha, float beta, cudaStream_t s) {
    (void)s;
    if (N <= 0 || M <= 0) return cudaSuccess;
    if (!isf(t) || K <= 0 || act < 0 || act >= KILN_FC_ACT_COUNT) return cudaErrorInvalidValue;
    /* the launch k_fused.cu makes (a grid past CUDA's limits fails there), then
     * the images in the order its blocks take them: block row y, groups y, y + gy, ... */
    int nb;
    int64_t gx, gy;
    if (!kcu_conv_gemv_grid(N, M, &nb, &gx, &gy)) return cudaErrorInvalidValue;
    if (!kcu_grid_ok(gx, gy, 1)) return cudaErrorInvalidConfiguration;
    n_gemv++;
    for (int64_t by = 0; by < gy; by++)
        for (int64_t n0 = by * nb; n0 < N; n0 += gy * nb)
            for (int64_t n = n0; n < n0 + nb && n < N; n++)
                for (int64_t m = 0; m < M; m++) {
                    double acc = bias ? ld(t, bias, m) : 0;
                    for (int64_t k = 0; k < K; k++) acc += ld(t, w, m * K + k) * ld(t, x, n * K + k);
                    if (r) acc += ld(t, r, n * M + m);
                    st_(t, y, n * M + m, emu_act(act, alpha, beta, acc));
                }
    return cudaSuccess;
}
static double emu_round(kiln_dtype t, double v) {
    uint64_t b = 0;
    st_(t, &b, 0, v);
    return ld(t, &b, 0);
}
/* The kernel's arguments as it checks them, then its blocks' work in its
 * own order (k_se.cu): per image, block k's sums of position slice k of
 * every channel (NHWC: TX x TY threads, the two-step shared-memory sum) or
 * the means of channel slice k (NCHW), block k's means of slice k over the
 * cluster, the copies of the other slices, hidden slice k, the copies,
 * output slice k; each block's shared vectors start NaN, so a slot no step
 * writes and a later one reads shows in the output. Arithmetic in double,
 * the pooled and hidden vectors rounded to T. */
#define EMU_SE_THREADS 256
cudaError_t kcu_se(kiln_dtype t, const kcu_se_geom *g, int S, const void *x, const void *w1, const void *w2,
                   const void *b1, const void *b2, void *y, cudaStream_t s) {
    (void)s;
    if (g->N <= 0 || g->C <= 0) return cudaSuccess;
    if (!kcu_se_fits(g->C, g->R) || g->HW <= 0 || g->act1 < 0 || g->act1 >= KILN_FC_ACT_COUNT || g->act2 < 0 ||
        g->act2 >= KILN_FC_ACT_COUNT || (S != 1 && S != 2 && S != 4 && S != 8) ||
        (t != KILN_DTYPE_FLOAT32 && t != KILN_DTYPE_FLOAT16 && t != KILN_DTYPE_BFLOAT16))
        return cudaErrorInvalidValue;
    if (!kcu_grid_ok(g->N * S, 1, 1)) return cudaErrorInvalidConfiguration; /* k_se.cu's grid: S blocks per image in x */
    n_se++;
    const int64_t C = g->C, R = g->R, HW = g->HW, vw = 16 / (int64_t)kiln_dtype_size(t);
    const int64_t V = g->nhwc && C % vw == 0 && (uintptr_t)x % 16 == 0 ? vw : 1;
    const int64_t cv = C / V, per = (cv + S - 1) / S, rper = (R + S - 1) / S, pper = (HW + S - 1) / S;
    double *pooled = malloc((size_t)(S * C) * sizeof *pooled), *hidden = malloc((size_t)(S * R) * sizeof *hidden);
    double *fin = malloc((size_t)C * sizeof *fin);
    double *red = malloc((size_t)(EMU_SE_THREADS * V) * sizeof *red), *red2 = malloc((size_t)(EMU_SE_THREADS * V) * sizeof *red2);
    if (!pooled || !hidden || !fin || !red || !red2) {
        free(pooled), free(hidden), free(fin), free(red), free(red2);
        return cudaErrorMemoryAllocation;
    }
#define V0(k) ((k) * per < cv ? (k) * per : cv)
#define V1(k) (V0(k) + per < cv ? V0(k) + per : cv)
#define R0(k) ((k) * rper < R ? (k) * rper : R)
#define R1(k) (R0(k) + rper < R ? R0(k) + rper : R)
    for (int64_t n = 0; n < g->N; n++) {
        for (int64_t i = 0; i < S * C; i++) pooled[i] = NAN;
        for (int64_t i = 0; i < S * R; i++) hidden[i] = NAN;
        for (int k = 0; k < S; k++) {
            double *pk = pooled + k * C;
            if (g->nhwc) {
                const int64_t p0 = k * pper < HW ? k * pper : HW, p1 = p0 + pper < HW ? p0 + pper : HW;
                const int TX = cv >= EMU_SE_THREADS ? EMU_SE_THREADS : (int)cv, TY = EMU_SE_THREADS / TX;
                const int O = TX * (int)V, RR = O >= EMU_SE_THREADS ? 1 : EMU_SE_THREADS / O;
                for (int64_t base = 0; base < cv; base += TX) {
                    for (int64_t i = 0; i < EMU_SE_THREADS * V; i++) red[i] = red2[i] = NAN;
                    for (int th = 0; th < TY * TX; th++) {
                        const int tx = th % TX, ty = th / TX;
                        for (int64_t j = 0; j < V; j++) {
                            double acc = 0;
                            for (int64_t q = p0 + ty; base + tx < cv && q < p1; q += TY)
                                acc += ld(t, x, (n * HW + q) * C + (base + tx) * V + j);
                            red[(ty * TX + tx) * V + j] = acc;
                        }
                    }
                    for (int i = 0; i < RR * O; i++) {
                        double acc = 0;
                        for (int k2 = i / O; k2 < TY; k2 += RR) acc += red[k2 * O + i % O];
                        red2[i] = acc;
                    }
                    for (int o = 0; o < O; o++)
                        if (base + o / V < cv) {
                            double acc = 0;
                            for (int r = 0; r < RR; r++) acc += red2[r * O + o];
                            pk[base * V + o] = acc;
                        }
                }
            } else {
                for (int64_t c = V0(k) * V; c < V1(k) * V; c++) {
                    double acc = 0;
                    for (int64_t q = 0; q < HW; q++) acc += ld(t, x, (n * C + c) * HW + q);
                    pk[c] = emu_round(t, acc / (double)HW);
                }
            }
        }
        if (g->nhwc) /* block k: its slice's sums over the cluster */
            for (int k = 0; k < S; k++) {
                for (int64_t c = V0(k) * V; c < V1(k) * V; c++) {
                    double acc = pooled[k * C + c];
                    for (int b = 0; b < S; b++)
                        if (b != k) acc += pooled[b * C + c];
                    fin[c] = emu_round(t, acc / (double)HW);
                }
                for (int64_t c = V0(k) * V; c < V1(k) * V; c++) pooled[k * C + c] = fin[c];
            }
        for (int k = 0; k < S; k++) /* the other slices */
            for (int b = 0; b < S; b++)
                for (int64_t c = V0(b) * V; b != k && c < V1(b) * V; c++) pooled[k * C + c] = pooled[b * C + c];
        for (int k = 0; k < S; k++)
            for (int64_t r = R0(k); r < R1(k); r++) {
                double acc = b1 ? ld(t, b1, r) : 0;
                for (int64_t c = 0; c < C; c++) acc += ld(t, w1, r * C + c) * pooled[k * C + c];
                hidden[k * R + r] = emu_round(t, emu_act(g->act1, g->alpha1, g->beta1, acc));
            }
        for (int k = 0; k < S; k++)
            for (int b = 0; b < S; b++)
                for (int64_t r = R0(b); b != k && r < R1(b); r++) hidden[k * R + r] = hidden[b * R + r];
        for (int k = 0; k < S; k++)
            for (int64_t c = V0(k) * V; c < V1(k) * V; c++) {
                double acc = b2 ? ld(t, b2, c) : 0;
                for (int64_t r = 0; r < R; r++) acc += ld(t, w2, c * R + r) * hidden[k * R + r];
                st_(t, y, n * C + c, emu_act(g->act2, g->alpha2, g->beta2, acc));
            }
    }
#undef V0
#undef V1
#undef R0
#undef R1
    free(pooled), free(hidden), free(fin), free(red), free(red2);
    return cudaSuccess;
}
cudaError_t kcu_dwconv_nhwc(kiln_dtype t, const kcu_dw_nhwc *g, const void *x, const void *wt, const void *bias,
                            const void *r, void *y, cudaStream_t s) {
    (void)s;
    if (!isf(t) || g->act >= KILN_FC_ACT_COUNT) return cudaErrorInvalidValue;
    for (int64_t i = 0; i < g->N * g->Ho * g->Wo * g->C; i++) {
        int64_t c = i % g->C, p = i / g->C, wo = p % g->Wo, q = p / g->Wo, ho = q % g->Ho, n = q / g->Ho;
        double acc = bias ? ld(t, bias, c) : 0;
        for (int64_t kh = 0; kh < g->kh; kh++)
            for (int64_t kw = 0; kw < g->kw; kw++) {
                int64_t ih = ho * g->sh - g->ph + kh * g->dh, iw = wo * g->sw - g->pw + kw * g->dw;
                if (ih >= 0 && ih < g->H && iw >= 0 && iw < g->W)
                    acc += ld(t, x, ((n * g->H + ih) * g->W + iw) * g->C + c) * ld(t, wt, (kh * g->kw + kw) * g->C + c);
            }
        if (r) acc += ld(t, r, i);
        st_(t, y, i, emu_act(g->act, g->alpha, g->beta, acc));
    }
    return cudaSuccess;
}
cudaError_t kcu_gconv_nhwc(kiln_dtype t, const kcu_gc_nhwc *g, const void *x, const void *wt, const void *bias,
                           const void *r, void *y, cudaStream_t s) {
    (void)s;
    if (!isf(t) || g->act < 0 || g->act >= KILN_FC_ACT_COUNT || g->kh < 1 || g->kw < 1 || g->sh < 1 || g->sw < 1 ||
        g->dh < 1 || g->dw < 1 || g->Cg < 1 || g->Mg < 1 || (g->bm != 0 && g->bm != 64 && g->bm != 128))
        return cudaErrorInvalidValue;
    n_gconv++;
    const int64_t C = g->G * g->Cg, M = g->G * g->Mg;
    for (int64_t i = 0; i < g->N * g->Ho * g->Wo * M; i++) {
        int64_t m = i % M, p = i / M, wo = p % g->Wo, q = p / g->Wo, ho = q % g->Ho, n = q / g->Ho;
        int64_t c0 = m / g->Mg * g->Cg;
        double acc = bias ? ld(t, bias, m) : 0;
        for (int64_t kh = 0; kh < g->kh; kh++)
            for (int64_t kw = 0; kw < g->kw; kw++) {
                int64_t ih = ho * g->sh - g->ph + kh * g->dh, iw = wo * g->sw - g->pw + kw * g->dw;
                if (ih >= 0 && ih < g->H && iw >= 0 && iw < g->W)
                    for (int64_t c = 0; c < g->Cg; c++)
                        acc += ld(t, x, ((n * g->H + ih) * g->W + iw) * C + c0 + c) *
                               ld(t, wt, ((m * g->kh + kh) * g->kw + kw) * g->Cg + c);
            }
        if (r) acc += ld(t, r, i);
        st_(t, y, i, emu_act(g->act, g->alpha, g->beta, acc));
    }
    return cudaSuccess;
}
cudaError_t kcu_dwconv_nchw(kiln_dtype t, const kcu_dw_nhwc *g, const void *x, const void *w, const void *bias,
                            const void *r, void *y, cudaStream_t s) {
    (void)s;
    int tx_log2;
    int64_t blocks;
    size_t smem;
    if (!isf(t) || g->act >= KILN_FC_ACT_COUNT || !kcu_dw_nchw_tile(t, g, &tx_log2, &blocks, &smem))
        return cudaErrorInvalidValue;
    for (int64_t i = 0; i < g->N * g->C * g->Ho * g->Wo; i++) {
        int64_t wo = i % g->Wo, q = i / g->Wo, ho = q % g->Ho, nc = q / g->Ho, c = nc % g->C;
        double acc = bias ? ld(t, bias, c) : 0;
        for (int64_t kh = 0; kh < g->kh; kh++)
            for (int64_t kw = 0; kw < g->kw; kw++) {
                int64_t ih = ho * g->sh - g->ph + kh * g->dh, iw = wo * g->sw - g->pw + kw * g->dw;
                if (ih >= 0 && ih < g->H && iw >= 0 && iw < g->W)
                    acc += ld(t, x, (nc * g->H + ih) * g->W + iw) * ld(t, w, (c * g->kh + kh) * g->kw + kw);
            }
        if (r) acc += ld(t, r, i);
        st_(t, y, i, emu_act(g->act, g->alpha, g->beta, acc));
    }
    return cudaSuccess;
}
cudaError_t kcu_attention(kiln_dtype t, const kcu_attn *g, const void *q, const void *k, const void *v,
                          const void *mask, const uint8_t *cond, const void *bias, void *o, cudaStream_t s) {
    (void)s;
    if (g->D > KCU_ATTN_MAX_D || g->Dv > KCU_ATTN_MAX_D) return cudaErrorInvalidValue;
    /* the launch k_fused.cu makes (a grid past CUDA's limits fails there),
     * then its blocks' rows: block x = (b H + h) chunks + c */
    int64_t chunks, gx;
    if (!kcu_attention_grid(g->B, g->H, g->Sq, &chunks, &gx)) return cudaErrorInvalidConfiguration;
    if (gx <= 0) return cudaSuccess;
    if (!kcu_grid_ok(gx, 1, 1)) return cudaErrorInvalidConfiguration;
    double *sc = malloc(sizeof(double) * (size_t)(g->Sk + 1));
    if (!sc) return cudaErrorMemoryAllocation;
    for (int64_t bx = 0; bx < gx; bx++)
        for (int64_t i = bx % chunks * KCU_ATTN_ROWS; i < (bx % chunks + 1) * KCU_ATTN_ROWS && i < g->Sq; i++) {
            const int64_t b = bx / chunks / g->H, h = bx / chunks % g->H;
            {
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < g->Sk; j++) {
                    double d = 0;
                    for (int64_t c = 0; c < g->D; c++)
                        d += ld(t, q, b * g->qs[0] + h * g->qs[1] + i * g->qs[2] + c * g->qs[3]) *
                             ld(t, k, b * g->ks[0] + h * g->ks[1] + j * g->ks[2] + c * g->ks[3]);
                    d *= g->scale;
                    if (g->has_cond &&
                        (cond[b * g->cs[0] + h * g->cs[1] + i * g->cs[2] + j * g->cs[3]] != 0) == (g->cond_fill_if != 0))
                        d = g->cond_mode == 1 ? g->fill : d + g->fill;
                    if (g->has_mask) d += ld(t, mask, b * g->ms[0] + h * g->ms[1] + i * g->ms[2] + j * g->ms[3]);
                    if (g->has_bias) d += ld(t, bias, b * g->bs[0] + h * g->bs[1] + i * g->bs[2] + j * g->bs[3]);
                    sc[j] = d;
                    if (d > mx) mx = d;
                }
                if (mx == -INFINITY) mx = 0; /* every key masked: exp gives 0, 0/0 below */
                for (int64_t j = 0; j < g->Sk; j++) sum += (sc[j] = exp(sc[j] - mx));
                /* k_common.cuh's kcu_attn_norm: all masked (sum 0) with nan_to_zero keeps 0 * V's NaN */
                bool zero = g->nan_to_zero && sum != sum;
                double inv = g->nan_to_zero && sum == 0 ? 0.0 : 1.0 / sum;
                for (int64_t c = 0; c < g->Dv; c++) {
                    double acc = 0;
                    for (int64_t j = 0; j < g->Sk; j++)
                        acc += sc[j] * ld(t, v, b * g->vs[0] + h * g->vs[1] + j * g->vs[2] + c * g->vs[3]);
                    st_(t, o, b * g->os[0] + h * g->os[1] + i * g->os[2] + c * g->os[3], zero ? 0.0 : acc * inv);
                }
            }
        }
    free(sc);
    return cudaSuccess;
}
cudaError_t kcu_attention_mma(kiln_dtype t, const kcu_attn *g, const void *q, const void *k, const void *v,
                              const void *mask, const uint8_t *cond, const void *bias, void *o, int sm_count,
                              int split, cudaStream_t s) {
    (void)sm_count;
    (void)split;
    if (t != KILN_DTYPE_FLOAT16 && t != KILN_DTYPE_BFLOAT16) return cudaErrorNotSupported;
    return kcu_attention(t, g, q, k, v, mask, cond, bias, o, s);
}
cudaError_t kcu_attention_fa(kiln_dtype t, const kcu_attn *g, const void *q, const void *k, const void *v,
                             const void *mask, const uint8_t *cond, const void *bias, void *o, int rows,
                             cudaStream_t s) {
    if (t != KILN_DTYPE_FLOAT16 && t != KILN_DTYPE_BFLOAT16) return cudaErrorNotSupported;
    if (rows != 64 && rows != 128) return cudaErrorNotSupported;
    return kcu_attention(t, g, q, k, v, mask, cond, bias, o, s);
}
