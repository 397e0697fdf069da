/* test_ops_nn.c -- kernel-level tests of the neural-network family
 * (src/ops/nn*.c, src/backends/cpu/kernels/gemm.c): kiln__sgemm against a naive triple loop,
 * and op->infer and the CPU backend's kernel (the op's reference kernel, or
 * its row in backends/cpu/cpu_table.c: MaxPool's NHWC and nChw16c layouts)
 * called directly on hand-built tensors, compared with reference loops
 * written here (double accumulation). Every output
 * buffer is followed by a canary that must survive the kernel. */
#include "ops/nn_attrs.h"
#include <math.h>
#include <stdlib.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/kernels/gemm.h"
#include "ops/op.h"
#include "test.h"

/* Attribute structs: these mirror the private structs of src/ops/nn_*.c
 * (engine-file POD). Keep them in sync. */
typedef struct {
    int32_t auto_pad, group;
    int32_t n_kernel, n_pads, n_strides, n_dilations, n_out_pad, n_out_shape;
    int64_t kernel[KILN_NN_MAX_SP], pads[2 * KILN_NN_MAX_SP], strides[KILN_NN_MAX_SP], dilations[KILN_NN_MAX_SP];
    int64_t output_padding[KILN_NN_MAX_SP], output_shape[KILN_MAX_RANK];
} conv_attrs;
typedef struct {
    int32_t auto_pad, ceil_mode, count_include_pad, storage_order;
    int32_t n_kernel, n_pads, n_strides, n_dilations;
    float p;
    int32_t layout; /* KILN_POOL_LAYOUT_* */
    int64_t kernel[KILN_NN_MAX_SP], pads[2 * KILN_NN_MAX_SP], strides[KILN_NN_MAX_SP], dilations[KILN_NN_MAX_SP];
} pool_attrs;
typedef struct {
    float alpha, beta;
    int32_t trans_a, trans_b;
} gemm_attrs;
typedef struct {
    int32_t axis, coerce_2d;
} softmax_attrs;
typedef struct {
    int32_t axis;
    float epsilon;
    int32_t stash_type;
} ln_attrs;
typedef struct {
    float epsilon;
    int32_t spatial;
} bn_attrs;
typedef struct {
    char equation[256];
} einsum_attrs;


#define CANARY 64
#define CANARY_BYTE 0xA5

/* ---- helpers --------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}
/* pools_special_values: rand_buf puts NaN and +-inf here and there */
static bool g_specials;

static float *rand_buf(int64_t n) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) p[i] = frand();
    for (int64_t i = 0; g_specials && i < n; i += 7 + i % 5) p[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
    return p;
}

typedef struct run_result {
    kiln_status st;
    int n_out;
    kiln_tensor out[4];
    unsigned char *mem[4];
    size_t nbytes[4];
} run_result;

static void result_free(run_result *r) {
    for (int i = 0; i < 4; i++) free(r->mem[i]);
    memset(r, 0, sizeof *r);
}

static kiln_tensor tensor(kiln_dtype dt, int rank, const int64_t *dims, void *data) {
    kiln_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.rank = rank;
    for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
    t.data = data;
    return t;
}

/* infer (run-time mode) + workspace + the CPU backend's kernel. Outputs and the workspace get a
 * canary after their bytes. */
static kiln_status run_op(int op_id, const void *attrs, int n_in, const kiln_tensor *const *in,
                          int n_out, kiln_pool *pool, run_result *r) {
    const kiln_op_def *op = kiln__op_by_id(op_id);
    memset(r, 0, sizeof *r);
    r->n_out = n_out;
    if (!op) return r->st = KILN_ERR_INTERNAL;
    kiln_tinfo ti[10], to[4];
    const kiln_tinfo *tip[10];
    kiln_tinfo *top[4];
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) {
            tip[i] = NULL;
            continue;
        }
        memset(&ti[i], 0, sizeof ti[i]);
        ti[i].dtype = in[i]->dtype;
        ti[i].rank = in[i]->rank;
        memcpy(ti[i].dims, in[i]->dims, sizeof ti[i].dims);
        ti[i].data = in[i]->data;
        tip[i] = &ti[i];
    }
    memset(to, 0, sizeof to);
    for (int i = 0; i < n_out; i++) top[i] = &to[i];
    kiln_infer_args ia = {.op = op, .attrs = attrs, .node_name = "t", .n_in = n_in,
                          .n_out = n_out, .in = tip, .out = top, .runtime = true};
    r->st = op->infer(&ia);
    if (r->st != KILN_OK) return r->st;
    size_t ws = op->workspace ? op->workspace(&ia) : 0;
    kiln_tensor *outp[4];
    for (int i = 0; i < n_out; i++) {
        r->out[i].dtype = to[i].dtype;
        r->out[i].rank = to[i].rank;
        memcpy(r->out[i].dims, to[i].dims, sizeof to[i].dims);
        int64_t n = kiln__numel(to[i].rank, to[i].dims);
        if (n < 0) return r->st = KILN_ERR_INTERNAL;
        r->nbytes[i] = (size_t)n * kiln_dtype_size(to[i].dtype);
        r->mem[i] = malloc(r->nbytes[i] + CANARY);
        memset(r->mem[i], 0x5A, r->nbytes[i]);
        memset(r->mem[i] + r->nbytes[i], CANARY_BYTE, CANARY);
        r->out[i].data = r->mem[i];
        outp[i] = &r->out[i];
    }
    unsigned char *wsm = ws ? kiln__aligned_alloc(ws + CANARY) : NULL;
    if (wsm) memset(wsm + ws, CANARY_BYTE, CANARY);
    kiln_kernel_args ka = {.op = op, .attrs = attrs, .node_name = "t", .n_in = n_in,
                           .n_out = n_out, .in = in, .out = outp, .workspace = wsm,
                           .workspace_size = ws, .pool = pool};
    const kiln_kernel *k = kiln__cpu_kernel_for(op_id);
    r->st = k ? k->run(&ka) : KILN_ERR_INTERNAL;
    for (int i = 0; i < n_out; i++)
        for (int j = 0; j < CANARY; j++)
            if (r->mem[i][r->nbytes[i] + j] != CANARY_BYTE) {
                fprintf(stderr, "  canary of output %d overwritten (op %s)\n", i, op->name);
                test_failed_checks++;
                break;
            }
    if (wsm) {
        for (int j = 0; j < CANARY; j++)
            if (wsm[ws + j] != CANARY_BYTE) {
                fprintf(stderr, "  canary of workspace overwritten (op %s)\n", op->name);
                test_failed_checks++;
                break;
            }
        kiln__aligned_free(wsm);
    }
    return r->st;
}

/* Compares n floats with a reference in double; reports the first mismatch. */
static bool compare_f32(const char *what, const float *got, const double *want, int64_t n,
                        double rtol, double atol) {
    double maxref = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(want[i])) maxref = fmax(maxref, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) {
        if ((double)got[i] == want[i] || (isnan(got[i]) && isnan(want[i]))) continue; /* also equal infinities */
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= atol + rtol * fmax(fabs(want[i]), 1e-3 * maxref))) {
            fprintf(stderr, "  %s: element %lld: got %.8g, want %.8g\n", what, (long long)i,
                    (double)got[i], want[i]);
            test_failed_checks++;
            return false;
        }
    }
    return true;
}

/* ---- sgemm ------------------------------------------------------------------ */

static void naive_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                       const float *C0, int64_t ldc, double *out) {
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double a = ta ? A[k * lda + i] : A[i * lda + k];
                double b = tb ? B[j * ldb + k] : B[k * ldb + j];
                acc += a * b;
            }
            double v = alpha * acc;
            if (beta != 0.0f) v += (double)beta * C0[i * ldc + j];
            out[i * N + j] = v;
        }
}

static void sgemm_case(int64_t M, int64_t N, int64_t K, bool ta, bool tb, float alpha, float beta,
                       kiln_pool *pool) {
    int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
    int64_t arows = ta ? K : M, brows = tb ? N : K;
    float *A = rand_buf(arows * lda), *B = rand_buf(brows * ldb);
    size_t cbytes = sizeof(float) * (size_t)(M * ldc);
    unsigned char *cm = malloc(cbytes + CANARY);
    float *C = (float *)cm;
    float *C0 = rand_buf(M * ldc);
    for (int64_t i = 0; i < M * ldc; i++) C[i] = beta == 0.0f ? NAN : C0[i];
    memset(cm + cbytes, CANARY_BYTE, CANARY);
    double *ref = malloc(sizeof(double) * (size_t)(M * N > 0 ? M * N : 1));
    naive_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C0, ldc, ref);
    CHECK_OK(kiln__sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, pool));
    char what[128];
    snprintf(what, sizeof what, "sgemm %lldx%lldx%lld ta=%d tb=%d alpha=%g beta=%g", (long long)M,
             (long long)N, (long long)K, ta, tb, alpha, beta);
    double tol = 1e-5 * sqrt((double)(K > 0 ? K : 1));
    for (int64_t i = 0; i < M; i++) {
        if (!compare_f32(what, C + i * ldc, ref + i * N, N, tol, tol)) break;
        /* padding between rows of C must be untouched */
        for (int64_t j = N; j < ldc; j++) {
            float want = beta == 0.0f ? NAN : C0[i * ldc + j];
            float got = C[i * ldc + j];
            if (!(isnan(want) ? isnan(got) : got == want)) {
                fprintf(stderr, "  %s: row padding (%lld, %lld) modified\n", what, (long long)i, (long long)j);
                test_failed_checks++;
                i = M;
                break;
            }
        }
    }
    for (int j = 0; j < CANARY; j++)
        if (cm[cbytes + j] != CANARY_BYTE) {
            fprintf(stderr, "  %s: canary overwritten\n", what);
            test_failed_checks++;
            break;
        }
    free(A);
    free(B);
    free(cm);
    free(C0);
    free(ref);
}

TEST(sgemm_vs_naive) {
    static const int64_t sizes[][3] = {
        {1, 1, 1},   {7, 13, 5},  {65, 33, 129}, {17, 19, 23}, {1, 50, 300},
        {50, 1, 300}, {6, 16, 256}, {13, 40, 600}, {150, 70, 40}, {3, 5, 0},
        {1, 1000, 1280}, {1, 77, 130}, /* a network head; tails of 16 and 64 */
    };
    static const float ab[][2] = {{1.0f, 0.0f}, {0.5f, 1.0f}, {-1.5f, 0.25f}};
    kiln_pool *pool = NULL;
    CHECK_OK(kiln__pool_create(2, &pool));
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int k = 0; k < 3; k++)
                sgemm_case(sizes[s][0], sizes[s][1], sizes[s][2], t & 1, (t >> 1) & 1, ab[k][0],
                           ab[k][1], (s + (size_t)t) % 2 ? pool : NULL);
    /* big enough to be split over the pool */
    sgemm_case(200, 310, 280, false, false, 1.0f, 0.0f, pool);
    sgemm_case(310, 200, 280, true, true, 1.0f, 1.0f, pool);
    kiln__pool_free(pool);
}

TEST(sgemm_empty) {
    float c[4] = {1, 2, 3, 4};
    CHECK_OK(kiln__sgemm(false, false, 0, 4, 3, 1.0f, NULL, 3, NULL, 4, 0.0f, c, 4, NULL));
    CHECK(c[0] == 1 && c[3] == 4);
    CHECK_OK(kiln__sgemm(false, false, 2, 2, 0, 1.0f, NULL, 1, NULL, 2, 2.0f, c, 2, NULL));
    CHECK(c[0] == 2 && c[1] == 4 && c[2] == 6 && c[3] == 8);
    CHECK_OK(kiln__sgemm(false, false, 2, 2, 0, 1.0f, NULL, 1, NULL, 2, 0.0f, c, 2, NULL));
    CHECK(c[0] == 0 && c[3] == 0);
    CHECK(strlen(kiln__sgemm_kernel_name()) > 0);
}

/* ---- Conv ------------------------------------------------------------------- */

/* Direct convolution in double: X [N, C, in...], W [M, C/G, k...], pads pb. */
static void naive_conv(int ns, int64_t N, int64_t C, int64_t M, int64_t G, const int64_t *in,
                       const int64_t *k, const int64_t *s, const int64_t *d, const int64_t *pb,
                       const int64_t *out, const float *X, const float *W, const float *B,
                       double *Y) {
    int64_t in_sz = 1, out_sz = 1, k_sz = 1;
    for (int i = 0; i < ns; i++) {
        in_sz *= in[i];
        out_sz *= out[i];
        k_sz *= k[i];
    }
    int64_t Cg = C / G, Mg = M / G;
    for (int64_t n = 0; n < N; n++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t p = 0; p < out_sz; p++) {
                int64_t o[KILN_NN_MAX_SP], r = p;
                for (int i = ns - 1; i >= 0; i--) {
                    o[i] = r % out[i];
                    r /= out[i];
                }
                double acc = B ? B[m] : 0.0;
                int64_t g = m / Mg;
                for (int64_t c = 0; c < Cg; c++)
                    for (int64_t kp = 0; kp < k_sz; kp++) {
                        int64_t kx[KILN_NN_MAX_SP], q = kp, idx = 0;
                        bool ok = true;
                        for (int i = ns - 1; i >= 0; i--) {
                            kx[i] = q % k[i];
                            q /= k[i];
                        }
                        for (int i = 0; i < ns; i++) {
                            int64_t pos = o[i] * s[i] - pb[i] + kx[i] * d[i];
                            if (pos < 0 || pos >= in[i]) ok = false;
                            idx = idx * in[i] + pos;
                        }
                        if (!ok) continue;
                        acc += (double)X[(n * C + g * Cg + c) * in_sz + idx] *
                               W[(m * Cg + c) * k_sz + kp];
                    }
                Y[(n * M + m) * out_sz + p] = acc;
            }
}

typedef struct conv_case {
    const char *name;
    int ns;
    int64_t N, C, M, G;
    int64_t in[3], k[3], s[3], d[3], pb[3], pe[3];
    int auto_pad;
    bool bias;
} conv_case;

static void conv_run(const conv_case *cc, kiln_pool *pool) {
    int ns = cc->ns;
    conv_attrs at;
    memset(&at, 0, sizeof at);
    at.group = (int32_t)cc->G;
    at.auto_pad = cc->auto_pad;
    at.n_kernel = ns;
    at.n_strides = at.n_dilations = ns;
    at.n_pads = cc->auto_pad == PAD_NOTSET ? 2 * ns : 0;
    int64_t pb[3], out[3];
    for (int i = 0; i < ns; i++) {
        at.kernel[i] = cc->k[i];
        at.strides[i] = cc->s[i];
        at.dilations[i] = cc->d[i];
        at.pads[i] = cc->pb[i];
        at.pads[ns + i] = cc->pe[i];
        int64_t dk = (cc->k[i] - 1) * cc->d[i] + 1;
        if (cc->auto_pad == PAD_NOTSET) {
            pb[i] = cc->pb[i];
            out[i] = (cc->in[i] + cc->pb[i] + cc->pe[i] - dk) / cc->s[i] + 1;
        } else {
            out[i] = (cc->in[i] + cc->s[i] - 1) / cc->s[i];
            int64_t total = (out[i] - 1) * cc->s[i] + dk - cc->in[i];
            if (total < 0) total = 0;
            pb[i] = cc->auto_pad == PAD_SAME_UPPER ? total / 2 : total - total / 2;
        }
    }
    int64_t xd[5] = {cc->N, cc->C}, wd[5] = {cc->M, cc->C / cc->G}, bd[1] = {cc->M};
    int64_t xn = cc->N * cc->C, wn = cc->M * (cc->C / cc->G), yn = cc->N * cc->M;
    for (int i = 0; i < ns; i++) {
        xd[2 + i] = cc->in[i];
        wd[2 + i] = cc->k[i];
        xn *= cc->in[i];
        wn *= cc->k[i];
        yn *= out[i];
    }
    float *X = rand_buf(xn), *W = rand_buf(wn), *B = rand_buf(cc->M);
    kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, ns + 2, xd, X);
    kiln_tensor tw = tensor(KILN_DTYPE_FLOAT32, ns + 2, wd, W);
    kiln_tensor tb = tensor(KILN_DTYPE_FLOAT32, 1, bd, B);
    const kiln_tensor *in[3] = {&tx, &tw, cc->bias ? &tb : NULL};
    run_result r;
    CHECK_OK(run_op(KILN_OP_Conv, &at, cc->bias ? 3 : 2, in, 1, pool, &r));
    if (r.st == KILN_OK) {
        bool shape_ok = r.out[0].rank == ns + 2 && r.out[0].dims[0] == cc->N && r.out[0].dims[1] == cc->M;
        for (int i = 0; i < ns; i++) shape_ok = shape_ok && r.out[0].dims[2 + i] == out[i];
        if (!shape_ok) {
            fprintf(stderr, "  conv %s: wrong output shape\n", cc->name);
            test_failed_checks++;
        } else {
            double *ref = malloc(sizeof(double) * (size_t)yn);
            naive_conv(ns, cc->N, cc->C, cc->M, cc->G, cc->in, cc->k, cc->s, cc->d, pb, out, X, W,
                       cc->bias ? B : NULL, ref);
            char what[96];
            snprintf(what, sizeof what, "conv %s", cc->name);
            compare_f32(what, (const float *)r.out[0].data, ref, yn, 1e-4, 1e-5);
            free(ref);
        }
    }
    result_free(&r);
    free(X);
    free(W);
    free(B);
}

TEST(conv_vs_naive) {
    static const conv_case cases[] = {
        {"basic 3x3 pad1", 2, 2, 3, 4, 1, {7, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, PAD_NOTSET, true},
        {"groups2 stride2 dil2 asym", 2, 1, 4, 6, 2, {9, 8}, {3, 2}, {2, 2}, {2, 2}, {1, 0}, {2, 1}, PAD_NOTSET, true},
        {"depthwise 3x3 s2", 2, 2, 5, 5, 5, {9, 10}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, PAD_NOTSET, true},
        {"depthwise s1 dil2", 2, 1, 4, 4, 4, {8, 7}, {3, 3}, {1, 1}, {2, 2}, {2, 2}, {2, 2}, PAD_NOTSET, false},
        {"depthwise mult2 s3", 2, 1, 3, 6, 3, {11, 9}, {3, 2}, {3, 3}, {1, 1}, {0, 1}, {1, 0}, PAD_NOTSET, true},
        {"pointwise 1x1", 2, 2, 8, 16, 1, {5, 7}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, PAD_NOTSET, false},
        {"pointwise 1x1 bias", 2, 1, 7, 9, 1, {4, 4}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, PAD_NOTSET, true},
        {"1x1 stride2", 2, 1, 6, 5, 1, {7, 8}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, PAD_NOTSET, true},
        {"1-D k3 dil2", 1, 2, 3, 5, 1, {12}, {3}, {1}, {2}, {2}, {1}, PAD_NOTSET, true},
        {"1-D depthwise", 1, 1, 4, 4, 4, {10}, {5}, {2}, {1}, {2}, {2}, PAD_NOTSET, true},
        {"3-D small", 3, 1, 2, 3, 1, {4, 5, 4}, {2, 3, 2}, {1, 2, 1}, {1, 1, 2}, {1, 1, 0}, {0, 1, 1}, PAD_NOTSET, true},
        {"3-D groups", 3, 2, 4, 4, 2, {3, 4, 5}, {1, 2, 3}, {1, 1, 2}, {1, 1, 1}, {0, 0, 1}, {0, 1, 1}, PAD_NOTSET, false},
        {"same_upper s2", 2, 1, 3, 4, 1, {7, 8}, {3, 4}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, PAD_SAME_UPPER, true},
        {"same_lower s2", 2, 1, 3, 4, 1, {7, 8}, {3, 4}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, PAD_SAME_LOWER, true},
        {"larger (pooled gemm)", 2, 1, 16, 32, 1, {20, 20}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, PAD_NOTSET, true},
    };
    kiln_pool *pool = NULL;
    CHECK_OK(kiln__pool_create(2, &pool));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        conv_run(&cases[i], NULL);
        conv_run(&cases[i], pool);
    }
    kiln__pool_free(pool);
}

TEST(conv_infer_errors) {
    conv_attrs at;
    memset(&at, 0, sizeof at);
    at.group = 1;
    int64_t xd[4] = {1, 3, 8, 8}, wd[4] = {4, 2, 3, 3}, bd[1] = {5};
    float x[192] = {0}, w[72] = {0}, b[5] = {0};
    kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, 4, xd, x), tw = tensor(KILN_DTYPE_FLOAT32, 4, wd, w);
    const kiln_tensor *in[3] = {&tx, &tw, NULL};
    run_result r;
    CHECK_ERR(run_op(KILN_OP_Conv, &at, 2, in, 1, NULL, &r), KILN_ERR_MODEL, "channels");
    result_free(&r);
    /* groups that do not divide the output channels */
    at.group = 3;
    int64_t wd2[4] = {4, 1, 3, 3};
    kiln_tensor tw2 = tensor(KILN_DTYPE_FLOAT32, 4, wd2, w);
    in[1] = &tw2;
    CHECK_ERR(run_op(KILN_OP_Conv, &at, 2, in, 1, NULL, &r), KILN_ERR_MODEL, "divisible");
    result_free(&r);
    /* bias of the wrong length */
    at.group = 1;
    int64_t wd3[4] = {4, 3, 3, 3};
    kiln_tensor tw3 = tensor(KILN_DTYPE_FLOAT32, 4, wd3, w), tb = tensor(KILN_DTYPE_FLOAT32, 1, bd, b);
    const kiln_tensor *in3[3] = {&tx, &tw3, &tb};
    CHECK_ERR(run_op(KILN_OP_Conv, &at, 3, in3, 1, NULL, &r), KILN_ERR_MODEL, "bias");
    result_free(&r);
    /* kernel larger than the padded input */
    int64_t xd4[4] = {1, 3, 2, 2};
    kiln_tensor tx4 = tensor(KILN_DTYPE_FLOAT32, 4, xd4, x);
    const kiln_tensor *in4[2] = {&tx4, &tw3};
    CHECK_ERR(run_op(KILN_OP_Conv, &at, 2, in4, 1, NULL, &r), KILN_ERR_MODEL, "kernel");
    result_free(&r);
    /* BatchNormalization with a wrong channel count */
    bn_attrs bat = {1e-5f, 1};
    int64_t pd[1] = {4};
    float p[4] = {1, 1, 1, 1};
    kiln_tensor tp = tensor(KILN_DTYPE_FLOAT32, 1, pd, p);
    const kiln_tensor *bin[5] = {&tx, &tp, &tp, &tp, &tp};
    CHECK_ERR(run_op(KILN_OP_BatchNormalization, &bat, 5, bin, 1, NULL, &r), KILN_ERR_MODEL, "channels");
    result_free(&r);
}

/* ---- ConvTranspose --------------------------------------------------------- */

static void naive_convt(int ns, int64_t N, int64_t C, int64_t M, int64_t G, const int64_t *in,
                        const int64_t *k, const int64_t *s, const int64_t *d, const int64_t *pb,
                        const int64_t *out, const float *X, const float *W, const float *B,
                        double *Y) {
    int64_t in_sz = 1, out_sz = 1, k_sz = 1;
    for (int i = 0; i < ns; i++) {
        in_sz *= in[i];
        out_sz *= out[i];
        k_sz *= k[i];
    }
    int64_t Cg = C / G, Mg = M / G;
    for (int64_t i = 0; i < N * M * out_sz; i++) Y[i] = B ? B[(i / out_sz) % M] : 0.0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t p = 0; p < in_sz; p++) {
                int64_t ip[KILN_NN_MAX_SP], r = p;
                for (int i = ns - 1; i >= 0; i--) {
                    ip[i] = r % in[i];
                    r /= in[i];
                }
                int64_t g = c / Cg;
                for (int64_t mm = 0; mm < Mg; mm++)
                    for (int64_t kp = 0; kp < k_sz; kp++) {
                        int64_t kx[KILN_NN_MAX_SP], q = kp, idx = 0;
                        bool ok = true;
                        for (int i = ns - 1; i >= 0; i--) {
                            kx[i] = q % k[i];
                            q /= k[i];
                        }
                        for (int i = 0; i < ns; i++) {
                            int64_t o = ip[i] * s[i] - pb[i] + kx[i] * d[i];
                            if (o < 0 || o >= out[i]) ok = false;
                            idx = idx * out[i] + o;
                        }
                        if (!ok) continue;
                        Y[(n * M + g * Mg + mm) * out_sz + idx] +=
                            (double)X[(n * C + c) * in_sz + p] * W[(c * Mg + mm) * k_sz + kp];
                    }
            }
}

TEST(convtranspose_vs_naive) {
    typedef struct {
        int ns;
        int64_t N, C, M, G, in[2], k[2], s[2], d[2], pb[2], pe[2], op[2];
    } ct_case;
    static const ct_case cases[] = {
        {2, 1, 2, 3, 1, {3, 4}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {1, 1}, {1, 0}},
        {2, 2, 4, 6, 2, {4, 3}, {2, 3}, {1, 2}, {2, 1}, {0, 1}, {0, 0}, {0, 1}},
        {1, 1, 3, 2, 1, {5}, {4}, {3}, {1}, {1}, {2}, {2}},
        {2, 1, 3, 3, 3, {5, 5}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const ct_case *cc = &cases[ci];
        int ns = cc->ns;
        conv_attrs at;
        memset(&at, 0, sizeof at);
        at.group = (int32_t)cc->G;
        at.n_kernel = at.n_strides = at.n_dilations = at.n_out_pad = ns;
        at.n_pads = 2 * ns;
        int64_t out[2], xd[4] = {cc->N, cc->C}, wd[4] = {cc->C, cc->M / cc->G}, bd[1] = {cc->M};
        int64_t xn = cc->N * cc->C, wn = cc->C * (cc->M / cc->G), yn = cc->N * cc->M;
        for (int i = 0; i < ns; i++) {
            at.kernel[i] = cc->k[i];
            at.strides[i] = cc->s[i];
            at.dilations[i] = cc->d[i];
            at.pads[i] = cc->pb[i];
            at.pads[ns + i] = cc->pe[i];
            at.output_padding[i] = cc->op[i];
            out[i] = cc->s[i] * (cc->in[i] - 1) + cc->op[i] + (cc->k[i] - 1) * cc->d[i] + 1 - cc->pb[i] - cc->pe[i];
            xd[2 + i] = cc->in[i];
            wd[2 + i] = cc->k[i];
            xn *= cc->in[i];
            wn *= cc->k[i];
            yn *= out[i];
        }
        float *X = rand_buf(xn), *W = rand_buf(wn), *B = rand_buf(cc->M);
        kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, ns + 2, xd, X);
        kiln_tensor tw = tensor(KILN_DTYPE_FLOAT32, ns + 2, wd, W);
        kiln_tensor tb = tensor(KILN_DTYPE_FLOAT32, 1, bd, B);
        const kiln_tensor *in[3] = {&tx, &tw, &tb};
        run_result r;
        CHECK_OK(run_op(KILN_OP_ConvTranspose, &at, 3, in, 1, NULL, &r));
        if (r.st == KILN_OK) {
            bool shape_ok = r.out[0].dims[1] == cc->M;
            for (int i = 0; i < ns; i++) shape_ok = shape_ok && r.out[0].dims[2 + i] == out[i];
            CHECK(shape_ok);
            if (shape_ok) {
                double *ref = malloc(sizeof(double) * (size_t)yn);
                naive_convt(ns, cc->N, cc->C, cc->M, cc->G, cc->in, cc->k, cc->s, cc->d, cc->pb, out,
                            X, W, B, ref);
                compare_f32("convtranspose", (const float *)r.out[0].data, ref, yn, 1e-4, 1e-5);
                free(ref);
            }
        }
        result_free(&r);
        free(X);
        free(W);
        free(B);
    }
}

/* ---- pools ------------------------------------------------------------------ */

/* 2-D pool reference. kind 0 max, 1 avg. Returns indices (row-major, with
 * plane offset) for max. */
static void naive_pool2d(int kind, bool include_pad, int64_t planes, int64_t H, int64_t W,
                         const int64_t *k, const int64_t *s, const int64_t *d, const int64_t *pads,
                         int64_t OH, int64_t OW, const float *x, double *y, int64_t *ind) {
    for (int64_t p = 0; p < planes; p++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                double best = -INFINITY, sum = 0.0;
                int64_t bi = -1, cnt = 0, cnt_pad = 0;
                for (int64_t i = 0; i < k[0]; i++)
                    for (int64_t j = 0; j < k[1]; j++) {
                        int64_t ih = oh * s[0] - pads[0] + i * d[0], iw = ow * s[1] - pads[1] + j * d[1];
                        if (ih >= -pads[0] && ih < H + pads[2] && iw >= -pads[1] && iw < W + pads[3]) cnt_pad++;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        double v = x[(p * H + ih) * W + iw];
                        if (v > best || bi < 0 || (v != v && best == best)) { /* NaN kept, as torch */
                            best = v;
                            bi = p * H * W + ih * W + iw;
                        }
                        sum += v;
                        cnt++;
                    }
                int64_t o = (p * OH + oh) * OW + ow;
                y[o] = kind == 0 ? best : sum / (double)(include_pad ? cnt_pad : cnt);
                if (ind) ind[o] = bi;
            }
}

TEST(pools_vs_naive) {
    typedef struct {
        int kind, ceil, include_pad;
        int64_t H, W, k[2], s[2], d[2], pads[4];
    } pc;
    static const pc cases[] = {
        {0, 0, 0, 9, 8, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},
        {0, 1, 0, 8, 7, {3, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}},
        {0, 0, 0, 10, 9, {2, 3}, {1, 2}, {2, 2}, {1, 0, 0, 2}},
        {1, 0, 0, 9, 8, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},
        {1, 0, 1, 9, 8, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},
        {1, 1, 1, 7, 7, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},
        {1, 1, 0, 6, 9, {2, 4}, {3, 2}, {1, 1}, {0, 1, 1, 0}},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const pc *c = &cases[ci];
        pool_attrs at;
        memset(&at, 0, sizeof at);
        at.ceil_mode = c->ceil;
        at.count_include_pad = c->include_pad;
        at.n_kernel = at.n_strides = at.n_dilations = 2;
        at.n_pads = 4;
        int64_t out[2], in[2] = {c->H, c->W};
        for (int i = 0; i < 2; i++) {
            at.kernel[i] = c->k[i];
            at.strides[i] = c->s[i];
            at.dilations[i] = c->d[i];
            int64_t dk = (c->k[i] - 1) * c->d[i] + 1, span = in[i] + c->pads[i] + c->pads[2 + i] - dk;
            out[i] = (c->ceil ? (span + c->s[i] - 1) / c->s[i] : span / c->s[i]) + 1;
            if (c->ceil && (out[i] - 1) * c->s[i] >= in[i] + c->pads[i]) out[i]--;
        }
        for (int i = 0; i < 4; i++) at.pads[i] = c->pads[i];
        int64_t xd[4] = {2, 3, c->H, c->W};
        int64_t planes = 6, yn = planes * out[0] * out[1];
        float *X = rand_buf(planes * c->H * c->W);
        kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, 4, xd, X);
        const kiln_tensor *inp[1] = {&tx};
        run_result r;
        int nout = c->kind == 0 && ci % 2 == 0 ? 2 : 1; /* MaxPool with indices and without */
        CHECK_OK(run_op(c->kind == 0 ? KILN_OP_MaxPool : KILN_OP_AveragePool, &at, 1, inp, nout, NULL, &r));
        if (r.st == KILN_OK) {
            bool shape_ok = r.out[0].dims[2] == out[0] && r.out[0].dims[3] == out[1];
            CHECK(shape_ok);
            if (shape_ok) {
                double *ref = malloc(sizeof(double) * (size_t)yn);
                int64_t *ind = malloc(sizeof(int64_t) * (size_t)yn);
                naive_pool2d(c->kind, c->include_pad, planes, c->H, c->W, c->k, c->s, c->d, c->pads,
                             out[0], out[1], X, ref, ind);
                compare_f32(c->kind == 0 ? "maxpool" : "avgpool", (const float *)r.out[0].data, ref,
                            yn, 1e-6, 1e-6);
                if (nout == 2) {
                    CHECK(r.out[1].dtype == KILN_DTYPE_INT64);
                    CHECK(memcmp(r.out[1].data, ind, sizeof(int64_t) * (size_t)yn) == 0);
                }
                free(ref);
                free(ind);
            }
        }
        result_free(&r);
        free(X);
    }
}

/* float32 MaxPool on NHWC data (layout KILN_POOL_LAYOUT_NHWC, as inside a
 * oneDNN chain) against the NCHW reference: channel counts below, at and
 * past the AVX-512 kernel's 16- and 64-channel blocks, windows over the
 * edges, dilation, a window wholly in the padding (-inf), one thread and
 * two, and a 9x9 window (more pixels than the AVX-512 path gathers: the
 * plain loop runs it). Where the channels are multiples of 16, the same on
 * nChw16c data (KILN_POOL_LAYOUT_C16); elsewhere that layout is refused. */
TEST(maxpool_nhwc_vs_naive) {
    typedef struct {
        int64_t C, H, W, k[2], s[2], d[2], pads[4];
    } pc;
    static const pc cases[] = {
        {3, 9, 8, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},
        {16, 9, 8, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},
        {37, 10, 9, {2, 3}, {1, 2}, {2, 2}, {1, 0, 0, 2}},
        {64, 11, 11, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},
        {80, 7, 6, {3, 2}, {1, 1}, {1, 1}, {0, 1, 2, 0}},
        {131, 8, 9, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},
        {20, 1, 1, {2, 2}, {1, 1}, {2, 2}, {1, 1, 1, 1}}, /* the window sees only padding */
        {70, 12, 12, {9, 9}, {1, 1}, {1, 1}, {4, 4, 4, 4}},
        {32, 12, 12, {9, 9}, {1, 1}, {1, 1}, {4, 4, 4, 4}},
        {32, 1, 1, {2, 2}, {1, 1}, {2, 2}, {1, 1, 1, 1}},
    };
    kiln_pool *tp = NULL;
    CHECK_OK(kiln__pool_create(2, &tp));
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int tl = 0; tl < 4; tl++) {
            int threads = 1 + tl % 2;
            bool c16 = tl >= 2;
            const pc *c = &cases[ci];
            pool_attrs at;
            memset(&at, 0, sizeof at);
            at.layout = c16 ? KILN_POOL_LAYOUT_C16 : KILN_POOL_LAYOUT_NHWC;
            at.n_kernel = at.n_strides = at.n_dilations = 2;
            at.n_pads = 4;
            int64_t out[2], in[2] = {c->H, c->W}, N = 2;
            for (int i = 0; i < 2; i++) {
                at.kernel[i] = c->k[i];
                at.strides[i] = c->s[i];
                at.dilations[i] = c->d[i];
                out[i] = (in[i] + c->pads[i] + c->pads[2 + i] - ((c->k[i] - 1) * c->d[i] + 1)) / c->s[i] + 1;
            }
            for (int i = 0; i < 4; i++) at.pads[i] = c->pads[i];
            int64_t xd[4] = {N, c->C, c->H, c->W}, planes = N * c->C, hw = c->H * c->W;
            int64_t ohw = out[0] * out[1], yn = planes * ohw;
            float *X = rand_buf(planes * hw), *Xp = malloc(sizeof(float) * (size_t)(planes * hw));
            /* index of (n, ch, pixel i of hw) in X's layout */
#define POOL_AT(n, ch, i, hw) \
    (c16 ? (((n) * (c->C / 16) + (ch) / 16) * (hw) + (i)) * 16 + (ch) % 16 : ((n) * (hw) + (i)) * c->C + (ch))
            bool refused = c16 && c->C % 16; /* nChw16c needs whole blocks of 16 channels */
            for (int64_t n = 0; n < N && !refused; n++) /* Xp: X's planes (NCHW), the reference's input */
                for (int64_t ch = 0; ch < c->C; ch++)
                    for (int64_t i = 0; i < hw; i++) Xp[(n * c->C + ch) * hw + i] = X[POOL_AT(n, ch, i, hw)];
            kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, 4, xd, X);
            const kiln_tensor *inp[1] = {&tx};
            run_result r;
            kiln_status rs = run_op(KILN_OP_MaxPool, &at, 1, inp, 1, threads == 2 ? tp : NULL, &r);
            if (refused) { /* with a message */
                CHECK(rs == KILN_ERR_MODEL && strstr(kiln_last_error(), "multiple of 16"));
                result_free(&r);
                free(X);
                free(Xp);
                continue;
            }
            CHECK_OK(rs);
            if (r.st == KILN_OK) {
                bool shape_ok = r.out[0].dims[1] == c->C && r.out[0].dims[2] == out[0] && r.out[0].dims[3] == out[1];
                CHECK(shape_ok);
                if (shape_ok) {
                    double *ref = malloc(sizeof(double) * (size_t)yn), *ref_nhwc = malloc(sizeof(double) * (size_t)yn);
                    naive_pool2d(0, false, planes, c->H, c->W, c->k, c->s, c->d, c->pads, out[0], out[1], Xp, ref,
                                 NULL);
                    for (int64_t n = 0; n < N; n++)
                        for (int64_t ch = 0; ch < c->C; ch++)
                            for (int64_t i = 0; i < ohw; i++)
                                ref_nhwc[POOL_AT(n, ch, i, ohw)] = ref[(n * c->C + ch) * ohw + i];
#undef POOL_AT
                    compare_f32(c16 ? "maxpool nchw16c" : "maxpool nhwc", (const float *)r.out[0].data, ref_nhwc,
                                yn, 0.0, 0.0);
                    free(ref);
                    free(ref_nhwc);
                }
            }
            result_free(&r);
            free(X);
            free(Xp);
        }
    kiln__pool_free(tp);
}

/* NaN and +-inf in the input: a window holding a NaN gives NaN (and its
 * index) wherever the NaN sits, as torch's max_pool2d, on every path (NCHW
 * with and without indices, NHWC and nChw16c, AVX-512 and plain, 3-D,
 * global); the max loops took a NaN only when it came first. */
TEST(pool3d_and_global);
TEST(pools_special_values) {
    g_specials = true;
    pools_vs_naive();
    maxpool_nhwc_vs_naive();
    pool3d_and_global();
    g_specials = false;
}

TEST(pool3d_and_global) {
    /* 3-D max pool 2x2x2 stride 2 against a direct loop */
    pool_attrs at;
    memset(&at, 0, sizeof at);
    at.n_kernel = at.n_strides = 3;
    for (int i = 0; i < 3; i++) at.kernel[i] = at.strides[i] = 2;
    int64_t xd[5] = {1, 2, 4, 4, 6};
    float *X = rand_buf(2 * 4 * 4 * 6);
    kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, 5, xd, X);
    const kiln_tensor *in[1] = {&tx};
    run_result r;
    CHECK_OK(run_op(KILN_OP_MaxPool, &at, 1, in, 1, NULL, &r));
    if (r.st == KILN_OK) {
        CHECK(r.out[0].dims[2] == 2 && r.out[0].dims[3] == 2 && r.out[0].dims[4] == 3);
        double ref[2 * 2 * 2 * 3];
        for (int c = 0; c < 2; c++)
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 2; b++)
                    for (int e = 0; e < 3; e++) {
                        double m = -INFINITY;
                        for (int i = 0; i < 8; i++) {
                            int z = 2 * a + (i >> 2), y = 2 * b + ((i >> 1) & 1), x = 2 * e + (i & 1);
                            float v = X[((c * 4 + z) * 4 + y) * 6 + x];
                            m = v > m || isnan(v) ? v : m;
                        }
                        ref[((c * 2 + a) * 2 + b) * 3 + e] = m;
                    }
        compare_f32("maxpool3d", (const float *)r.out[0].data, ref, 24, 0, 0);
    }
    result_free(&r);
    /* global average / max */
    CHECK_OK(run_op(KILN_OP_GlobalAveragePool, NULL, 1, in, 1, NULL, &r));
    if (r.st == KILN_OK) {
        CHECK(r.out[0].rank == 5 && r.out[0].dims[1] == 2 && r.out[0].dims[4] == 1);
        double ref[2];
        for (int c = 0; c < 2; c++) {
            double s = 0;
            for (int i = 0; i < 96; i++) s += X[c * 96 + i];
            ref[c] = s / 96;
        }
        compare_f32("globalaveragepool", (const float *)r.out[0].data, ref, 2, 1e-6, 1e-7);
    }
    result_free(&r);
    CHECK_OK(run_op(KILN_OP_GlobalMaxPool, NULL, 1, in, 1, NULL, &r));
    if (r.st == KILN_OK) {
        double ref[2];
        for (int c = 0; c < 2; c++) {
            double m = -INFINITY;
            for (int i = 0; i < 96; i++) m = X[c * 96 + i] > m || isnan(X[c * 96 + i]) ? X[c * 96 + i] : m;
            ref[c] = m;
        }
        compare_f32("globalmaxpool", (const float *)r.out[0].data, ref, 2, 0, 0);
    }
    result_free(&r);
    free(X);
}

/* ---- Softmax family --------------------------------------------------------- */

TEST(softmax_rows) {
    kiln_pool *pool = NULL;
    CHECK_OK(kiln__pool_create(2, &pool));
    int64_t dims[3] = {3, 7, 37};
    int64_t n = 3 * 7 * 37;
    float *X = rand_buf(n);
    for (int64_t i = 0; i < n; i++) X[i] *= 20.0f;
    X[5] = 80.0f; /* large values must not overflow */
    X[6] = -1e30f;
    kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, 3, dims, X);
    const kiln_tensor *in[1] = {&tx};
    for (int axis = 0; axis < 3; axis++)
        for (int kind = 0; kind < 3; kind++) {
            softmax_attrs at = {axis, 0};
            int op = kind == 0 ? KILN_OP_Softmax : kind == 1 ? KILN_OP_LogSoftmax : KILN_OP_Hardmax;
            run_result r;
            CHECK_OK(run_op(op, &at, 1, in, 1, axis == 2 ? pool : NULL, &r));
            if (r.st != KILN_OK) {
                result_free(&r);
                continue;
            }
            double *ref = malloc(sizeof(double) * (size_t)n);
            int64_t outer = 1, len = dims[axis], inner = 1;
            for (int i = 0; i < axis; i++) outer *= dims[i];
            for (int i = axis + 1; i < 3; i++) inner *= dims[i];
            const float *y = r.out[0].data;
            for (int64_t o = 0; o < outer; o++)
                for (int64_t j = 0; j < inner; j++) {
                    double m = -INFINITY, s = 0.0, ysum = 0.0;
                    int64_t arg = 0;
                    for (int64_t k = 0; k < len; k++) {
                        double v = X[(o * len + k) * inner + j];
                        if (v > m) {
                            m = v;
                            arg = k;
                        }
                    }
                    for (int64_t k = 0; k < len; k++) s += exp(X[(o * len + k) * inner + j] - m);
                    for (int64_t k = 0; k < len; k++) {
                        int64_t e = (o * len + k) * inner + j;
                        double v = X[e] - m;
                        ref[e] = kind == 0 ? exp(v) / s : kind == 1 ? v - log(s) : (k == arg ? 1.0 : 0.0);
                        ysum += y[e];
                    }
                    if (kind != 1 && fabs(ysum - 1.0) > 1e-5) {
                        fprintf(stderr, "  softmax kind %d axis %d: row sums to %.8g\n", kind, axis, ysum);
                        test_failed_checks++;
                    }
                }
            char what[64];
            snprintf(what, sizeof what, "softmax kind %d axis %d", kind, axis);
            compare_f32(what, y, ref, n, 1e-5, 1e-7);
            free(ref);
            result_free(&r);
        }
    /* opset < 13: coerced to 2-D at axis 1 */
    softmax_attrs legacy = {1, 1};
    run_result r;
    CHECK_OK(run_op(KILN_OP_Softmax, &legacy, 1, in, 1, NULL, &r));
    if (r.st == KILN_OK) {
        const float *y = r.out[0].data;
        for (int o = 0; o < 3; o++) {
            double s = 0;
            for (int i = 0; i < 7 * 37; i++) s += y[o * 7 * 37 + i];
            CHECK(fabs(s - 1.0) < 1e-5);
        }
    }
    result_free(&r);
    free(X);
    kiln__pool_free(pool);
}

/* ---- LayerNormalization / BatchNormalization ------------------------------- */

TEST(layernorm_vs_reference) {
    int64_t dims[3] = {4, 5, 24};
    int64_t n = 4 * 5 * 24;
    float *X = rand_buf(n);
    for (int64_t i = 0; i < n; i++) X[i] = X[i] * 3.0f + 100.0f; /* large mean */
    for (int axis = 1; axis <= 2; axis++) {
        int64_t D = axis == 2 ? 24 : 120, rows = n / D;
        float *S = rand_buf(D), *B = rand_buf(D);
        kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, 3, dims, X);
        kiln_tensor ts = tensor(KILN_DTYPE_FLOAT32, 3 - axis, dims + axis, S);
        kiln_tensor tb = tensor(KILN_DTYPE_FLOAT32, 3 - axis, dims + axis, B);
        const kiln_tensor *in[3] = {&tx, &ts, &tb};
        ln_attrs at = {axis == 2 ? -1 : 1, 1e-5f, 1};
        run_result r;
        CHECK_OK(run_op(KILN_OP_LayerNormalization, &at, 3, in, 3, NULL, &r));
        if (r.st == KILN_OK) {
            CHECK(r.out[1].rank == 3 && r.out[1].dims[0] == 4 && r.out[1].dims[2] == 1);
            CHECK(r.out[1].dims[1] == (axis == 2 ? 5 : 1));
            double *ref = malloc(sizeof(double) * (size_t)n), *rm = malloc(sizeof(double) * (size_t)rows),
                   *ri = malloc(sizeof(double) * (size_t)rows);
            for (int64_t row = 0; row < rows; row++) {
                double mean = 0, var = 0;
                for (int64_t i = 0; i < D; i++) mean += X[row * D + i];
                mean /= D;
                for (int64_t i = 0; i < D; i++) var += (X[row * D + i] - mean) * (X[row * D + i] - mean);
                var /= D;
                double inv = 1.0 / sqrt(var + 1e-5);
                for (int64_t i = 0; i < D; i++) ref[row * D + i] = (X[row * D + i] - mean) * inv * S[i] + B[i];
                rm[row] = mean;
                ri[row] = inv;
            }
            compare_f32("layernorm Y", (const float *)r.out[0].data, ref, n, 1e-4, 1e-5);
            compare_f32("layernorm Mean", (const float *)r.out[1].data, rm, rows, 1e-6, 0);
            compare_f32("layernorm InvStdDev", (const float *)r.out[2].data, ri, rows, 1e-5, 0);
            free(ref);
            free(rm);
            free(ri);
        }
        result_free(&r);
        free(S);
        free(B);
    }
    free(X);
}

/* RMSNormalization (opset 23): over the last axis and from axis 1, with a
 * dense and a one-element scale; float16 X with a float32 scale (Y is of the
 * scale's type); a scale that does not fit the normalized dims and an integer
 * X are refused. */
static void rms_ref(const float *X, const float *S, bool s_scalar, int64_t rows, int64_t D, double eps, double *ref) {
    for (int64_t row = 0; row < rows; row++) {
        double ms = 0;
        for (int64_t i = 0; i < D; i++) ms += (double)X[row * D + i] * X[row * D + i];
        double inv = 1.0 / sqrt(ms / (double)D + eps);
        for (int64_t i = 0; i < D; i++) ref[row * D + i] = X[row * D + i] * inv * S[s_scalar ? 0 : i];
    }
}

TEST(rmsnorm_vs_reference) {
    int64_t dims[3] = {4, 5, 24}, one[1] = {1};
    int64_t n = 4 * 5 * 24;
    float *X = rand_buf(n);
    for (int64_t i = 0; i < n; i++) X[i] = X[i] * 3.0f + 10.0f; /* a mean far from 0: not LayerNorm's result */
    double *ref = malloc(sizeof(double) * (size_t)n);
    for (int form = 0; form < 3; form++) {
        const int axis = form == 1 ? 1 : 2;
        const int64_t D = axis == 2 ? 24 : 120;
        float *S = rand_buf(D);
        kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, 3, dims, X);
        kiln_tensor ts = form == 2 ? tensor(KILN_DTYPE_FLOAT32, 1, one, S)
                                   : tensor(KILN_DTYPE_FLOAT32, 3 - axis, dims + axis, S);
        const kiln_tensor *in[2] = {&tx, &ts};
        ln_attrs at = {axis == 2 ? -1 : 1, 1e-6f, 1};
        run_result r;
        CHECK_OK(run_op(KILN_OP_RMSNormalization, &at, 2, in, 1, NULL, &r));
        if (r.st == KILN_OK) {
            CHECK(r.out[0].dtype == KILN_DTYPE_FLOAT32 && r.out[0].rank == 3 && r.out[0].dims[2] == 24);
            rms_ref(X, S, form == 2, n / D, D, 1e-6, ref);
            compare_f32("rmsnorm Y", (const float *)r.out[0].data, ref, n, 1e-5, 1e-6);
        }
        result_free(&r);
        free(S);
    }
    /* float16 X, float32 scale: Y float32, computed from X's float16 values */
    uint16_t *xh = malloc(sizeof(uint16_t) * (size_t)n);
    float *xr = malloc(sizeof(float) * (size_t)n), *S = rand_buf(24);
    for (int64_t i = 0; i < n; i++) {
        xh[i] = kiln__f32_to_f16(X[i]);
        xr[i] = kiln__f16_to_f32(xh[i]);
    }
    kiln_tensor tx = tensor(KILN_DTYPE_FLOAT16, 3, dims, xh), ts = tensor(KILN_DTYPE_FLOAT32, 1, dims + 2, S);
    const kiln_tensor *in[2] = {&tx, &ts};
    ln_attrs at = {-1, 1e-5f, 1};
    run_result r;
    CHECK_OK(run_op(KILN_OP_RMSNormalization, &at, 2, in, 1, NULL, &r));
    if (r.st == KILN_OK) {
        CHECK(r.out[0].dtype == KILN_DTYPE_FLOAT32);
        rms_ref(xr, S, false, n / 24, 24, 1e-5, ref);
        compare_f32("rmsnorm f16 X", (const float *)r.out[0].data, ref, n, 1e-5, 1e-6);
    }
    result_free(&r);
    /* a scale of 5 elements for a last axis of 24; an int32 X */
    int64_t five[1] = {5};
    kiln_tensor bad = tensor(KILN_DTYPE_FLOAT32, 1, five, S), xi = tensor(KILN_DTYPE_INT32, 3, dims, X);
    const kiln_tensor *in_bad[2] = {&tx, &bad}, *in_int[2] = {&xi, &ts};
    CHECK(run_op(KILN_OP_RMSNormalization, &at, 2, in_bad, 1, NULL, &r) == KILN_ERR_MODEL);
    CHECK(strstr(kiln_last_error(), "RMSNormalization") && strstr(kiln_last_error(), "scale of shape [5]"));
    result_free(&r);
    CHECK(run_op(KILN_OP_RMSNormalization, &at, 2, in_int, 1, NULL, &r) == KILN_ERR_UNSUPPORTED);
    result_free(&r);
    free(xh);
    free(xr);
    free(S);
    free(ref);
    free(X);
}

TEST(batchnorm_vs_reference) {
    int64_t dims[4] = {2, 3, 5, 4}, cd[1] = {3};
    float *X = rand_buf(120);
    float sc[3] = {0.5f, -1.0f, 2.0f}, bi[3] = {0.1f, 0.2f, -0.3f}, mu[3] = {0.05f, -0.1f, 0.3f},
          va[3] = {0.9f, 1.5f, 0.2f};
    kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, 4, dims, X), ts = tensor(KILN_DTYPE_FLOAT32, 1, cd, sc),
                tb = tensor(KILN_DTYPE_FLOAT32, 1, cd, bi), tm = tensor(KILN_DTYPE_FLOAT32, 1, cd, mu),
                tv = tensor(KILN_DTYPE_FLOAT32, 1, cd, va);
    const kiln_tensor *in[5] = {&tx, &ts, &tb, &tm, &tv};
    bn_attrs at = {1e-3f, 1};
    run_result r;
    CHECK_OK(run_op(KILN_OP_BatchNormalization, &at, 5, in, 1, NULL, &r));
    if (r.st == KILN_OK) {
        double ref[120];
        for (int i = 0; i < 120; i++) {
            int c = (i / 20) % 3;
            ref[i] = (X[i] - mu[c]) / sqrt(va[c] + 1e-3) * sc[c] + bi[c];
        }
        compare_f32("batchnorm", (const float *)r.out[0].data, ref, 120, 1e-5, 1e-6);
    }
    result_free(&r);
    free(X);
}

/* ---- MatMul / Gemm / Einsum -------------------------------------------------- */

TEST(matmul_broadcast) {
    kiln_pool *pool = NULL;
    CHECK_OK(kiln__pool_create(2, &pool));
    /* A [2, 1, 5, 7] x B [3, 7, 4] -> [2, 3, 5, 4] */
    int64_t ad[4] = {2, 1, 5, 7}, bd[3] = {3, 7, 4};
    float *A = rand_buf(70), *B = rand_buf(84);
    kiln_tensor ta = tensor(KILN_DTYPE_FLOAT32, 4, ad, A), tb = tensor(KILN_DTYPE_FLOAT32, 3, bd, B);
    const kiln_tensor *in[2] = {&ta, &tb};
    run_result r;
    CHECK_OK(run_op(KILN_OP_MatMul, NULL, 2, in, 1, pool, &r));
    if (r.st == KILN_OK) {
        CHECK(r.out[0].rank == 4 && r.out[0].dims[0] == 2 && r.out[0].dims[1] == 3 &&
              r.out[0].dims[2] == 5 && r.out[0].dims[3] == 4);
        double ref[120];
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                for (int m = 0; m < 5; m++)
                    for (int n = 0; n < 4; n++) {
                        double s = 0;
                        for (int k = 0; k < 7; k++) s += (double)A[(i * 5 + m) * 7 + k] * B[(j * 7 + k) * 4 + n];
                        ref[((i * 3 + j) * 5 + m) * 4 + n] = s;
                    }
        compare_f32("matmul batched", (const float *)r.out[0].data, ref, 120, 1e-5, 1e-6);
    }
    result_free(&r);
    /* 1-D x 2-D and 2-D x 1-D */
    int64_t vd[1] = {7}, md[2] = {7, 4}, md2[2] = {5, 7};
    kiln_tensor tv = tensor(KILN_DTYPE_FLOAT32, 1, vd, A), tm = tensor(KILN_DTYPE_FLOAT32, 2, md, B),
                tm2 = tensor(KILN_DTYPE_FLOAT32, 2, md2, B);
    const kiln_tensor *in2[2] = {&tv, &tm};
    CHECK_OK(run_op(KILN_OP_MatMul, NULL, 2, in2, 1, NULL, &r));
    if (r.st == KILN_OK) {
        CHECK(r.out[0].rank == 1 && r.out[0].dims[0] == 4);
        double ref[4];
        for (int n = 0; n < 4; n++) {
            double s = 0;
            for (int k = 0; k < 7; k++) s += (double)A[k] * B[k * 4 + n];
            ref[n] = s;
        }
        compare_f32("matmul vec-mat", (const float *)r.out[0].data, ref, 4, 1e-5, 1e-6);
    }
    result_free(&r);
    const kiln_tensor *in3[2] = {&tm2, &tv};
    CHECK_OK(run_op(KILN_OP_MatMul, NULL, 2, in3, 1, NULL, &r));
    if (r.st == KILN_OK) {
        CHECK(r.out[0].rank == 1 && r.out[0].dims[0] == 5);
        double ref[5];
        for (int m = 0; m < 5; m++) {
            double s = 0;
            for (int k = 0; k < 7; k++) s += (double)B[m * 7 + k] * A[k];
            ref[m] = s;
        }
        compare_f32("matmul mat-vec", (const float *)r.out[0].data, ref, 5, 1e-5, 1e-6);
    }
    result_free(&r);
    /* mismatched K */
    const kiln_tensor *bad[2] = {&tm2, &tm2};
    CHECK_ERR(run_op(KILN_OP_MatMul, NULL, 2, bad, 1, NULL, &r), KILN_ERR_MODEL, "inner dimensions");
    result_free(&r);
    /* int32 matmul (generic loop) */
    int32_t ia[6] = {1, 2, 3, 4, 5, 6}, ib[6] = {7, 8, 9, 10, 11, 12};
    int64_t id1[2] = {2, 3}, id2[2] = {3, 2};
    kiln_tensor tia = tensor(KILN_DTYPE_INT32, 2, id1, ia), tib = tensor(KILN_DTYPE_INT32, 2, id2, ib);
    const kiln_tensor *ii[2] = {&tia, &tib};
    CHECK_OK(run_op(KILN_OP_MatMul, NULL, 2, ii, 1, NULL, &r));
    if (r.st == KILN_OK) {
        const int32_t *y = r.out[0].data;
        CHECK(y[0] == 58 && y[1] == 64 && y[2] == 139 && y[3] == 154);
    }
    result_free(&r);
    free(A);
    free(B);
    kiln__pool_free(pool);
}

TEST(gemm_with_attrs) {
    /* transA, transB, alpha, beta with C broadcast along rows */
    int64_t ad[2] = {6, 4}, bd[2] = {5, 6}, cd[1] = {5};
    float *A = rand_buf(24), *B = rand_buf(30), *C = rand_buf(5);
    kiln_tensor ta = tensor(KILN_DTYPE_FLOAT32, 2, ad, A), tb = tensor(KILN_DTYPE_FLOAT32, 2, bd, B),
                tc = tensor(KILN_DTYPE_FLOAT32, 1, cd, C);
    const kiln_tensor *in[3] = {&ta, &tb, &tc};
    gemm_attrs at = {0.75f, -2.0f, 1, 1};
    run_result r;
    CHECK_OK(run_op(KILN_OP_Gemm, &at, 3, in, 1, NULL, &r));
    if (r.st == KILN_OK) {
        CHECK(r.out[0].dims[0] == 4 && r.out[0].dims[1] == 5);
        double ref[20];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 5; j++) {
                double s = 0;
                for (int k = 0; k < 6; k++) s += (double)A[k * 4 + i] * B[j * 6 + k];
                ref[i * 5 + j] = 0.75 * s - 2.0 * C[j];
            }
        compare_f32("gemm", (const float *)r.out[0].data, ref, 20, 1e-5, 1e-6);
    }
    result_free(&r);
    /* C that cannot broadcast */
    int64_t cd2[1] = {4};
    kiln_tensor tc2 = tensor(KILN_DTYPE_FLOAT32, 1, cd2, C);
    const kiln_tensor *in2[3] = {&ta, &tb, &tc2};
    CHECK_ERR(run_op(KILN_OP_Gemm, &at, 3, in2, 1, NULL, &r), KILN_ERR_MODEL, "broadcast");
    result_free(&r);
    free(A);
    free(B);
    free(C);
}

TEST(einsum_cases) {
    int64_t ad[3] = {2, 3, 4}, bd[3] = {2, 4, 5}, sq[2] = {4, 4};
    float *A = rand_buf(24), *B = rand_buf(40);
    kiln_tensor ta = tensor(KILN_DTYPE_FLOAT32, 3, ad, A), tb = tensor(KILN_DTYPE_FLOAT32, 3, bd, B);
    kiln_tensor ts = tensor(KILN_DTYPE_FLOAT32, 2, sq, B);
    einsum_attrs at;
    run_result r;
    /* batched matmul */
    memset(&at, 0, sizeof at);
    strcpy(at.equation, "bij,bjk->bik");
    const kiln_tensor *in[2] = {&ta, &tb};
    CHECK_OK(run_op(KILN_OP_Einsum, &at, 2, in, 1, NULL, &r));
    if (r.st == KILN_OK) {
        double ref[30];
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < 3; i++)
                for (int k = 0; k < 5; k++) {
                    double s = 0;
                    for (int j = 0; j < 4; j++) s += (double)A[(b * 3 + i) * 4 + j] * B[(b * 4 + j) * 5 + k];
                    ref[(b * 3 + i) * 5 + k] = s;
                }
        compare_f32("einsum bmm", (const float *)r.out[0].data, ref, 30, 1e-5, 1e-6);
    }
    result_free(&r);
    /* diagonal, trace, implicit transpose with ellipsis */
    const kiln_tensor *one[1] = {&ts};
    strcpy(at.equation, "ii->i");
    CHECK_OK(run_op(KILN_OP_Einsum, &at, 1, one, 1, NULL, &r));
    if (r.st == KILN_OK) {
        double ref[4] = {B[0], B[5], B[10], B[15]};
        CHECK(r.out[0].rank == 1 && r.out[0].dims[0] == 4);
        compare_f32("einsum diag", (const float *)r.out[0].data, ref, 4, 0, 0);
    }
    result_free(&r);
    strcpy(at.equation, "ii");
    CHECK_OK(run_op(KILN_OP_Einsum, &at, 1, one, 1, NULL, &r));
    if (r.st == KILN_OK) {
        double ref[1] = {(double)B[0] + B[5] + B[10] + B[15]};
        CHECK(r.out[0].rank == 0);
        compare_f32("einsum trace", (const float *)r.out[0].data, ref, 1, 1e-6, 1e-7);
    }
    result_free(&r);
    const kiln_tensor *onea[1] = {&ta};
    strcpy(at.equation, "...ji");
    CHECK_OK(run_op(KILN_OP_Einsum, &at, 1, onea, 1, NULL, &r));
    if (r.st == KILN_OK) {
        CHECK(r.out[0].rank == 3 && r.out[0].dims[0] == 2 && r.out[0].dims[1] == 4 && r.out[0].dims[2] == 3);
        double ref[24];
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 3; j++) ref[(b * 4 + i) * 3 + j] = A[(b * 3 + j) * 4 + i];
        compare_f32("einsum transpose", (const float *)r.out[0].data, ref, 24, 0, 0);
    }
    result_free(&r);
    strcpy(at.equation, "bij,bjk");
    int64_t bad_d[3] = {2, 5, 5};
    kiln_tensor tbad = tensor(KILN_DTYPE_FLOAT32, 3, bad_d, B);
    const kiln_tensor *bad[2] = {&ta, &tbad};
    CHECK_ERR(run_op(KILN_OP_Einsum, &at, 2, bad, 1, NULL, &r), KILN_ERR_MODEL, "size");
    result_free(&r);
    free(A);
    free(B);
}

int main(void) {
    RUN(sgemm_vs_naive);
    RUN(sgemm_empty);
    RUN(conv_vs_naive);
    RUN(conv_infer_errors);
    RUN(convtranspose_vs_naive);
    RUN(pools_vs_naive);
    RUN(maxpool_nhwc_vs_naive);
    RUN(pool3d_and_global);
    RUN(pools_special_values);
    RUN(softmax_rows);
    RUN(layernorm_vs_reference);
    RUN(rmsnorm_vs_reference);
    RUN(batchnorm_vs_reference);
    RUN(matmul_broadcast);
    RUN(gemm_with_attrs);
    RUN(einsum_cases);
    return test_summary();
}
