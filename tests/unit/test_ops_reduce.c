/* test_ops_reduce.c -- kernel-level tests of the reduction family and the
 * recurrent ops: op->infer and op->cpu are called directly on hand-built
 * tensors and compared with reference loops written here. Every output
 * buffer is followed by a canary that must survive the kernel. */
#include <math.h>
#include <stdlib.h>

#include "ops/op.h"
#include "test.h"

/* Attribute structs: these mirror the private structs of src/ops/reduce.c,
 * src/ops/reduce_index.c and src/ops/misc_rnn.c (engine-file POD). */
typedef struct {
    int32_t keepdims, noop_with_empty_axes;
} reduce_attrs;
typedef struct {
    int32_t axis, keepdims, select_last_index;
} arg_attrs;
typedef struct {
    int32_t axis, largest, sorted;
} topk_attrs;
typedef struct {
    int32_t hidden_size, direction, layout, linear_before_reset, input_forget, has_clip;
    float clip;
    int32_t act[6];
} rnn_attrs;

#define CANARY 64
#define CANARY_BYTE 0xA5

/* ---- running one op ----------------------------------------------------- */

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

/* infer (run-time mode) + cpu. Outputs get a canary after their bytes. */
static kiln_status run_op(const kiln_op_def *op, const void *attrs, int n_in,
                          const kiln_tensor *const *in, int n_out, kiln_pool *pool, run_result *r) {
    memset(r, 0, sizeof *r);
    r->n_out = n_out;
    kiln_tinfo ti[8], to[4];
    const kiln_tinfo *tip[8];
    kiln_tinfo *top[4];
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) {
            tip[i] = NULL;
            continue;
        }
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
    kiln_kernel_args ka = {.op = op, .attrs = attrs, .node_name = "t", .n_in = n_in,
                           .n_out = n_out, .in = in, .out = outp, .pool = pool};
    r->st = op->cpu(&ka);
    for (int i = 0; i < n_out; i++)
        for (int j = 0; j < CANARY; j++)
            if (r->mem[i][r->nbytes[i] + j] != CANARY_BYTE) {
                fprintf(stderr, "  canary of output %d overwritten (op %s)\n", i, op->name);
                test_failed_checks++;
                break;
            }
    return r->st;
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

static bool close_enough(double got, double want, double rtol, double atol) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= atol + rtol * fabs(want);
}

/* ---- reductions ---------------------------------------------------------- */

enum { K_SUM, K_MEAN, K_MAX, K_MIN, K_PROD, K_L1, K_L2, K_LOGSUM, K_LOGSUMEXP, K_SUMSQUARE, K_N };
static const int red_ids[K_N] = {
    KILN_OP_ReduceSum, KILN_OP_ReduceMean, KILN_OP_ReduceMax,       KILN_OP_ReduceMin,
    KILN_OP_ReduceProd, KILN_OP_ReduceL1,  KILN_OP_ReduceL2,        KILN_OP_ReduceLogSum,
    KILN_OP_ReduceLogSumExp, KILN_OP_ReduceSumSquare,
};

/* Reference reduction in double over a tensor of rank r. */
static void ref_reduce(int kind, int r, const int64_t *dims, const double *x, const bool *mask,
                       double *out, int64_t out_n) {
    double *acc = calloc((size_t)out_n, sizeof(double));
    double *mx = calloc((size_t)out_n, sizeof(double));
    int64_t *cnt = calloc((size_t)out_n, sizeof(int64_t));
    int64_t n = 1;
    for (int i = 0; i < r; i++) n *= dims[i];
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t o = 0; o < out_n; o++) {
            if (pass == 0) {
                acc[o] = kind == K_PROD ? 1.0 : kind == K_MAX ? -INFINITY : kind == K_MIN ? INFINITY : 0.0;
                mx[o] = -INFINITY;
            } else {
                acc[o] = 0.0;
            }
        }
        for (int64_t i = 0; i < n; i++) {
            int64_t rem = i, o = 0, os = 1;
            int64_t idx[8];
            for (int d = r - 1; d >= 0; d--) {
                idx[d] = rem % dims[d];
                rem /= dims[d];
            }
            for (int d = r - 1; d >= 0; d--)
                if (!mask[d]) {
                    o += idx[d] * os;
                    os *= dims[d];
                }
            double v = x[i];
            if (pass == 1) {
                acc[o] += exp(v - mx[o]);
                continue;
            }
            cnt[o]++;
            switch (kind) {
            case K_SUM: case K_MEAN: case K_LOGSUM: acc[o] += v; break;
            case K_MAX: acc[o] = v > acc[o] ? v : acc[o]; break;
            case K_MIN: acc[o] = v < acc[o] ? v : acc[o]; break;
            case K_PROD: acc[o] *= v; break;
            case K_L1: acc[o] += fabs(v); break;
            case K_L2: case K_SUMSQUARE: acc[o] += v * v; break;
            case K_LOGSUMEXP: mx[o] = v > mx[o] ? v : mx[o]; break;
            }
        }
        if (kind != K_LOGSUMEXP) break;
    }
    for (int64_t o = 0; o < out_n; o++) {
        double v = acc[o];
        switch (kind) {
        case K_MEAN: v /= (double)cnt[o]; break;
        case K_L2: v = sqrt(v); break;
        case K_LOGSUM: v = log(v); break;
        case K_LOGSUMEXP: v = log(v) + mx[o]; break;
        }
        out[o] = v;
    }
    free(acc);
    free(mx);
    free(cnt);
}

/* Runs one reduction of a float32/float64/int32 tensor and compares. */
static void check_reduce(int kind, kiln_dtype dt, int r, const int64_t *dims, const double *xd,
                         int n_axes, const int64_t *axes, bool keepdims, kiln_pool *pool) {
    int64_t n = 1;
    for (int i = 0; i < r; i++) n *= dims[i];
    size_t es = kiln_dtype_size(dt);
    void *xbuf = malloc((size_t)n * es);
    for (int64_t i = 0; i < n; i++) {
        if (dt == KILN_DTYPE_FLOAT32) ((float *)xbuf)[i] = (float)xd[i];
        else if (dt == KILN_DTYPE_FLOAT64) ((double *)xbuf)[i] = xd[i];
        else ((int32_t *)xbuf)[i] = (int32_t)xd[i];
    }
    kiln_tensor x = tensor(dt, r, dims, xbuf);
    int64_t adims[1] = {n_axes};
    kiln_tensor ax = tensor(KILN_DTYPE_INT64, 1, adims, (void *)axes);
    const kiln_tensor *in[2] = {&x, n_axes > 0 ? &ax : NULL};
    reduce_attrs at = {keepdims, 0};
    const kiln_op_def *op = kiln__op_by_id(red_ids[kind]);
    run_result res;
    kiln_status st = run_op(op, &at, 2, in, 1, pool, &res);
    if (st != KILN_OK) {
        fprintf(stderr, "  %s failed: %s\n", op->name, kiln_last_error());
        CHECK(st == KILN_OK);
        result_free(&res);
        free(xbuf);
        return;
    }
    bool mask[8];
    for (int i = 0; i < r; i++) mask[i] = n_axes == 0;
    for (int i = 0; i < n_axes; i++) mask[axes[i] < 0 ? axes[i] + r : axes[i]] = true;
    /* expected shape */
    int er = 0;
    int64_t ed[8];
    for (int i = 0; i < r; i++) {
        if (!mask[i]) ed[er++] = dims[i];
        else if (keepdims) ed[er++] = 1;
    }
    bool shape_ok = res.out[0].rank == er;
    for (int i = 0; shape_ok && i < er; i++) shape_ok = res.out[0].dims[i] == ed[i];
    if (!shape_ok) {
        char b1[64], b2[64];
        fprintf(stderr, "  %s: shape %s, expected %s\n", op->name,
                kiln__shape_str(res.out[0].rank, res.out[0].dims, b1, sizeof b1),
                kiln__shape_str(er, ed, b2, sizeof b2));
        CHECK(shape_ok);
    }
    int64_t on = kiln__numel(er, ed);
    double *ref = malloc((size_t)(on > 0 ? on : 1) * sizeof(double));
    /* the reference sees the values as the kernel does */
    double *xs = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) xs[i] = kiln__load_f64(dt, xbuf, i);
    ref_reduce(kind, r, dims, xs, mask, ref, on);
    int bad = 0;
    for (int64_t i = 0; shape_ok && i < on; i++) {
        double got = kiln__load_f64(dt, res.out[0].data, i);
        double want = ref[i];
        if (dt == KILN_DTYPE_INT32) want = (double)(int32_t)(kind == K_MEAN ? trunc(want) : want);
        double rtol = dt == KILN_DTYPE_FLOAT32 ? 5e-5 : 1e-12;
        if (!close_enough(got, want, rtol, dt == KILN_DTYPE_FLOAT32 ? 1e-4 : 1e-12)) {
            if (bad++ < 3)
                fprintf(stderr, "  %s %s axes(%d) keepdims=%d: out[%lld] = %.9g, want %.9g\n",
                        op->name, kiln_dtype_name(dt), n_axes, keepdims, (long long)i, got, want);
        }
    }
    CHECK(bad == 0);
    free(xs);
    free(ref);
    free(xbuf);
    result_free(&res);
}

static const int64_t dims3572[4] = {3, 5, 7, 2};

static double *make_data(int64_t n, bool positive, unsigned seed) {
    double *x = malloc((size_t)n * sizeof(double));
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        double u = (double)(s >> 8) / 16777216.0; /* [0, 1) */
        x[i] = positive ? 0.8 + 0.4 * u : -2.0 + 4.0 * u;
        x[i] = (double)(float)x[i];
    }
    return x;
}

TEST(reduce_all_kinds_axes_sets) {
    static const int64_t sets[][4] = {{0}, {1}, {2}, {3}, {-1}, {0, 1}, {1, 2}, {0, 2}, {1, 3},
                                      {0, 3}, {2, 3}, {0, 2, 3}, {-3, -1}, {0, 1, 2, 3}, {3, 0}};
    static const int set_n[] = {1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 2, 4, 2};
    double *pos = make_data(210, true, 1), *sig = make_data(210, false, 2);
    for (int k = 0; k < K_N; k++)
        for (int s = -1; s < (int)(sizeof set_n / sizeof set_n[0]); s++)
            for (int keep = 0; keep < 2; keep++) {
                const double *x = (k == K_LOGSUM || k == K_PROD) ? pos : sig;
                if (s < 0) check_reduce(k, KILN_DTYPE_FLOAT32, 4, dims3572, x, 0, NULL, keep, NULL);
                else check_reduce(k, KILN_DTYPE_FLOAT32, 4, dims3572, x, set_n[s], sets[s], keep, NULL);
            }
    free(pos);
    free(sig);
}

TEST(reduce_other_dtypes) {
    static const int64_t sets[][2] = {{1}, {3}, {0, 2}, {-1, 1}};
    static const int set_n[] = {1, 1, 2, 2};
    double *sig = make_data(210, false, 3), *pos = make_data(210, true, 4);
    double *ints = malloc(210 * sizeof(double));
    for (int i = 0; i < 210; i++) ints[i] = (double)((i * 37) % 19) - 9.0;
    for (int k = 0; k < K_N; k++)
        for (int s = 0; s < 4; s++) {
            const double *x = (k == K_LOGSUM || k == K_PROD) ? pos : sig;
            check_reduce(k, KILN_DTYPE_FLOAT64, 4, dims3572, x, set_n[s], sets[s], s & 1, NULL);
        }
    static const int int_kinds[] = {K_SUM, K_MEAN, K_MAX, K_MIN, K_L1, K_SUMSQUARE};
    for (int k = 0; k < 6; k++)
        for (int s = 0; s < 4; s++)
            check_reduce(int_kinds[k], KILN_DTYPE_INT32, 4, dims3572, ints, set_n[s], sets[s], 1,
                         NULL);
    free(sig);
    free(pos);
    free(ints);
}

TEST(reduce_large_parallel) {
    kiln_pool *pool = NULL;
    CHECK_OK(kiln__pool_create(2, &pool));
    /* BERT's LayerNorm: ReduceMean over the last axis of [2, 128, 768] */
    int64_t d1[3] = {2, 128, 768};
    double *x = make_data(2 * 128 * 768, false, 5);
    int64_t last[1] = {-1};
    check_reduce(K_MEAN, KILN_DTYPE_FLOAT32, 3, d1, x, 1, last, true, pool);
    check_reduce(K_SUMSQUARE, KILN_DTYPE_FLOAT32, 3, d1, x, 1, last, false, pool);
    check_reduce(K_LOGSUMEXP, KILN_DTYPE_FLOAT32, 3, d1, x, 1, last, true, pool);
    /* middle axis with a wide inner block (several chunks) */
    int64_t d2[3] = {3, 40, 600};
    int64_t mid[1] = {1};
    for (int k = 0; k < K_N; k++)
        if (k != K_LOGSUM && k != K_PROD) check_reduce(k, KILN_DTYPE_FLOAT32, 3, d2, x, 1, mid, false, pool);
    free(x);
    kiln__pool_free(pool);
}

TEST(reduce_empty_axes_and_noop) {
    const kiln_op_def *op = kiln__op_by_id(KILN_OP_ReduceSum);
    float xv[6] = {1, 2, 3, 4, 5, 6};
    int64_t xd[2] = {2, 3}, ed[1] = {0};
    kiln_tensor x = tensor(KILN_DTYPE_FLOAT32, 2, xd, xv);
    kiln_tensor empty = tensor(KILN_DTYPE_INT64, 1, ed, NULL);
    run_result r;
    /* empty axes input, noop=0: reduce everything */
    reduce_attrs a0 = {1, 0};
    const kiln_tensor *in0[2] = {&x, &empty};
    CHECK_OK(run_op(op, &a0, 2, in0, 1, NULL, &r));
    CHECK(r.out[0].rank == 2 && r.out[0].dims[0] == 1 && r.out[0].dims[1] == 1);
    CHECK(r.st == KILN_OK && ((float *)r.out[0].data)[0] == 21.f);
    result_free(&r);
    /* absent axes, keepdims=0: a scalar */
    reduce_attrs a1 = {0, 0};
    const kiln_tensor *in1[2] = {&x, NULL};
    CHECK_OK(run_op(op, &a1, 2, in1, 1, NULL, &r));
    CHECK(r.out[0].rank == 0 && ((float *)r.out[0].data)[0] == 21.f);
    result_free(&r);
    /* noop_with_empty_axes: identity, both for an empty and an absent axes */
    reduce_attrs a2 = {0, 1};
    CHECK_OK(run_op(op, &a2, 2, in0, 1, NULL, &r));
    CHECK(r.out[0].rank == 2 && r.out[0].dims[0] == 2 && r.out[0].dims[1] == 3);
    CHECK(r.st == KILN_OK && !memcmp(r.out[0].data, xv, sizeof xv));
    result_free(&r);
    CHECK_OK(run_op(kiln__op_by_id(KILN_OP_ReduceL2), &a2, 2, in1, 1, NULL, &r));
    CHECK(r.st == KILN_OK && r.out[0].rank == 2 && !memcmp(r.out[0].data, xv, sizeof xv));
    result_free(&r);
    /* reducing an axis of size 0: identity elements */
    int64_t zd[2] = {2, 0};
    kiln_tensor z = tensor(KILN_DTYPE_FLOAT32, 2, zd, xv);
    int64_t ax1[1] = {1}, ad[1] = {1};
    kiln_tensor axt = tensor(KILN_DTYPE_INT64, 1, ad, ax1);
    const kiln_tensor *in3[2] = {&z, &axt};
    CHECK_OK(run_op(kiln__op_by_id(KILN_OP_ReduceProd), &a1, 2, in3, 1, NULL, &r));
    CHECK(r.st == KILN_OK && r.out[0].rank == 1 && r.out[0].dims[0] == 2 &&
          ((float *)r.out[0].data)[0] == 1.f && ((float *)r.out[0].data)[1] == 1.f);
    result_free(&r);
    CHECK_OK(run_op(kiln__op_by_id(KILN_OP_ReduceMax), &a1, 2, in3, 1, NULL, &r));
    CHECK(r.st == KILN_OK && isinf(((float *)r.out[0].data)[0]) && ((float *)r.out[0].data)[0] < 0);
    result_free(&r);
}

TEST(reduce_nan_propagation) {
    float xv[80];
    for (int i = 0; i < 80; i++) xv[i] = (float)((i * 7) % 11) - 5.f;
    xv[5] = NAN;       /* row 0, inside the vectorized part */
    xv[40 + 37] = NAN; /* row 1, in the tail */
    int64_t xd[2] = {2, 40}, ad[1] = {1}, ax1[1] = {1};
    kiln_tensor x = tensor(KILN_DTYPE_FLOAT32, 2, xd, xv);
    kiln_tensor axt = tensor(KILN_DTYPE_INT64, 1, ad, ax1);
    const kiln_tensor *in[2] = {&x, &axt};
    reduce_attrs at = {0, 0};
    run_result r;
    for (int k = 0; k < 2; k++) {
        CHECK_OK(run_op(kiln__op_by_id(k ? KILN_OP_ReduceMin : KILN_OP_ReduceMax), &at, 2, in, 1,
                        NULL, &r));
        CHECK(r.st == KILN_OK && isnan(((float *)r.out[0].data)[0]) &&
              isnan(((float *)r.out[0].data)[1]));
        result_free(&r);
    }
    /* columns: [40, 2] over axis 0, NaN only in column 0 */
    float cv[80];
    for (int i = 0; i < 80; i++) cv[i] = (float)i;
    cv[4] = NAN;
    int64_t cd[2] = {40, 2}, ax0[1] = {0};
    kiln_tensor c = tensor(KILN_DTYPE_FLOAT32, 2, cd, cv);
    kiln_tensor axc = tensor(KILN_DTYPE_INT64, 1, ad, ax0);
    const kiln_tensor *inc[2] = {&c, &axc};
    CHECK_OK(run_op(kiln__op_by_id(KILN_OP_ReduceMax), &at, 2, inc, 1, NULL, &r));
    CHECK(r.st == KILN_OK && isnan(((float *)r.out[0].data)[0]) && ((float *)r.out[0].data)[1] == 79.f);
    result_free(&r);
}

TEST(reduce_build_time_infer) {
    /* axes not known at build time: rank from the axes count, dims unknown */
    const kiln_op_def *op = kiln__op_by_id(KILN_OP_ReduceMean);
    kiln_tinfo x = {.dtype = KILN_DTYPE_FLOAT32, .rank = 3, .dims = {KILN_DIM_SYM(0), 128, 768}};
    kiln_tinfo ax = {.dtype = KILN_DTYPE_INT64, .rank = 1, .dims = {1}};
    kiln_tinfo y;
    memset(&y, 0, sizeof y);
    const kiln_tinfo *in[2] = {&x, &ax};
    kiln_tinfo *out[1] = {&y};
    reduce_attrs a = {0, 0};
    kiln_infer_args ia = {.op = op, .attrs = &a, .node_name = "t", .n_in = 2, .n_out = 1,
                          .in = in, .out = out};
    CHECK_OK(op->infer(&ia));
    CHECK(y.rank == 2 && y.dims[0] == KILN_DIM_UNKNOWN);
    /* constant axes: symbolic dims are kept */
    int64_t last = -1;
    ax.data = &last;
    a.keepdims = 1;
    CHECK_OK(op->infer(&ia));
    CHECK(y.rank == 3 && y.dims[0] == KILN_DIM_SYM(0) && y.dims[1] == 128 && y.dims[2] == 1);
    /* unknown rank */
    x.rank = -1;
    CHECK_OK(op->infer(&ia));
    CHECK(y.rank == -1);
}

TEST(reduce_errors) {
    const kiln_op_def *op = kiln__op_by_id(KILN_OP_ReduceSum);
    float xv[6] = {0};
    int64_t xd[2] = {2, 3}, ad[1] = {1}, ad2[1] = {2};
    int64_t bad_axis[1] = {2}, rep[2] = {1, -1};
    kiln_tensor x = tensor(KILN_DTYPE_FLOAT32, 2, xd, xv);
    kiln_tensor a1 = tensor(KILN_DTYPE_INT64, 1, ad, bad_axis);
    kiln_tensor a2 = tensor(KILN_DTYPE_INT64, 1, ad2, rep);
    reduce_attrs at = {1, 0};
    run_result r;
    const kiln_tensor *in1[2] = {&x, &a1};
    CHECK_ERR(run_op(op, &at, 2, in1, 1, NULL, &r), KILN_ERR_MODEL, "axis 2 is out of range");
    CHECK(strstr(kiln_last_error(), "node 't'") != NULL);
    result_free(&r);
    const kiln_tensor *in2[2] = {&x, &a2};
    CHECK_ERR(run_op(op, &at, 2, in2, 1, NULL, &r), KILN_ERR_MODEL, "repeated");
    result_free(&r);
    kiln_tensor xb = tensor(KILN_DTYPE_BOOL, 2, xd, xv);
    const kiln_tensor *in3[2] = {&xb, NULL};
    CHECK_ERR(run_op(op, &at, 2, in3, 1, NULL, &r), KILN_ERR_UNSUPPORTED, "dtype bool");
    result_free(&r);
}

/* ---- ArgMax / ArgMin ------------------------------------------------------ */

TEST(argmax_ties_select_last) {
    /* rows with ties: [1, 5, 5, 2], [7, 7, 0, 7], [3, 3, 3, 3] */
    float xv[12] = {1, 5, 5, 2, 7, 7, 0, 7, 3, 3, 3, 3};
    int64_t xd[2] = {3, 4};
    kiln_tensor x = tensor(KILN_DTYPE_FLOAT32, 2, xd, xv);
    const kiln_tensor *in[1] = {&x};
    run_result r;
    struct {
        int id, axis, keep, last;
        int64_t want[4];
        int rank;
    } cases[] = {
        {KILN_OP_ArgMax, 1, 1, 0, {1, 0, 0}, 2},  {KILN_OP_ArgMax, 1, 0, 1, {2, 3, 3}, 1},
        {KILN_OP_ArgMax, -1, 0, 0, {1, 0, 0}, 1}, {KILN_OP_ArgMin, 1, 0, 0, {0, 2, 0}, 1},
        {KILN_OP_ArgMin, 1, 0, 1, {0, 2, 3}, 1},  {KILN_OP_ArgMax, 0, 1, 0, {1, 1, 0, 1}, 2},
        {KILN_OP_ArgMax, 0, 0, 1, {1, 1, 0, 1}, 1}, {KILN_OP_ArgMin, 0, 0, 1, {0, 2, 1, 0}, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        arg_attrs at = {cases[c].axis, cases[c].keep, cases[c].last};
        CHECK_OK(run_op(kiln__op_by_id(cases[c].id), &at, 1, in, 1, NULL, &r));
        if (r.st != KILN_OK) continue;
        CHECK(r.out[0].dtype == KILN_DTYPE_INT64 && r.out[0].rank == cases[c].rank);
        int64_t n = kiln__tensor_numel(&r.out[0]);
        for (int64_t i = 0; i < n; i++)
            if (((int64_t *)r.out[0].data)[i] != cases[c].want[i]) {
                fprintf(stderr, "  case %zu: out[%lld] = %lld, want %lld\n", c, (long long)i,
                        (long long)((int64_t *)r.out[0].data)[i], (long long)cases[c].want[i]);
                CHECK(0);
            }
        result_free(&r);
    }
    /* int64 input, generic path */
    int64_t iv[6] = {4, -2, 9, 9, 0, 4};
    int64_t id[1] = {6};
    kiln_tensor xi = tensor(KILN_DTYPE_INT64, 1, id, iv);
    const kiln_tensor *ini[1] = {&xi};
    arg_attrs at = {0, 0, 1};
    CHECK_OK(run_op(kiln__op_by_id(KILN_OP_ArgMax), &at, 1, ini, 1, NULL, &r));
    CHECK(r.st == KILN_OK && r.out[0].rank == 0 && ((int64_t *)r.out[0].data)[0] == 3);
    result_free(&r);
    at.axis = 1;
    CHECK_ERR(run_op(kiln__op_by_id(KILN_OP_ArgMax), &at, 1, ini, 1, NULL, &r), KILN_ERR_MODEL,
              "out of range");
    result_free(&r);
}

/* ---- TopK ------------------------------------------------------------------ */

TEST(topk_ties_order) {
    float xv[10] = {1, 3, 3, 2, 3, /**/ 5, 5, 4, 4, 5};
    int64_t xd[2] = {2, 5}, kd[1] = {1};
    int64_t k3 = 3, k2 = 2;
    kiln_tensor x = tensor(KILN_DTYPE_FLOAT32, 2, xd, xv);
    kiln_tensor K3 = tensor(KILN_DTYPE_INT64, 1, kd, &k3), K2 = tensor(KILN_DTYPE_INT64, 1, kd, &k2);
    run_result r;
    const kiln_op_def *op = kiln__op_by_id(KILN_OP_TopK);
    topk_attrs at = {-1, 1, 1};
    const kiln_tensor *in[2] = {&x, &K3};
    CHECK_OK(run_op(op, &at, 2, in, 2, NULL, &r));
    if (r.st == KILN_OK) {
        static const float wv[6] = {3, 3, 3, 5, 5, 5};
        static const int64_t wi[6] = {1, 2, 4, 0, 1, 4};
        CHECK(r.out[0].dims[0] == 2 && r.out[0].dims[1] == 3 && r.out[1].dims[1] == 3);
        CHECK(!memcmp(r.out[0].data, wv, sizeof wv));
        CHECK(!memcmp(r.out[1].data, wi, sizeof wi));
    }
    result_free(&r);
    at.largest = 0;
    const kiln_tensor *in2[2] = {&x, &K2};
    CHECK_OK(run_op(op, &at, 2, in2, 2, NULL, &r));
    if (r.st == KILN_OK) {
        static const float wv[4] = {1, 2, 4, 4};
        static const int64_t wi[4] = {0, 3, 2, 3};
        CHECK(!memcmp(r.out[0].data, wv, sizeof wv));
        CHECK(!memcmp(r.out[1].data, wi, sizeof wi));
    }
    result_free(&r);
    /* along axis 0 of a 2x5 int32 tensor */
    int32_t iv[10] = {1, 9, 3, 3, 0, /**/ 1, 2, 8, 3, -1};
    kiln_tensor xi = tensor(KILN_DTYPE_INT32, 2, xd, iv);
    int64_t k1 = 1;
    kiln_tensor K1 = tensor(KILN_DTYPE_INT64, 1, kd, &k1);
    topk_attrs a0 = {0, 1, 1};
    const kiln_tensor *in3[2] = {&xi, &K1};
    CHECK_OK(run_op(op, &a0, 2, in3, 2, NULL, &r));
    if (r.st == KILN_OK) {
        static const int32_t wv[5] = {1, 9, 8, 3, 0};
        static const int64_t wi[5] = {0, 0, 1, 0, 0};
        CHECK(r.out[0].rank == 2 && r.out[0].dims[0] == 1 && r.out[0].dims[1] == 5);
        CHECK(!memcmp(r.out[0].data, wv, sizeof wv));
        CHECK(!memcmp(r.out[1].data, wi, sizeof wi));
    }
    result_free(&r);
    int64_t k9 = 9;
    kiln_tensor K9 = tensor(KILN_DTYPE_INT64, 1, kd, &k9);
    const kiln_tensor *in4[2] = {&x, &K9};
    CHECK_ERR(run_op(op, &at, 2, in4, 2, NULL, &r), KILN_ERR_MODEL, "K = 9");
    result_free(&r);
}

TEST(topk_large_with_ties) {
    /* R = 1000 values from a small set (many ties), k small (heap path) and
     * k large (full sort), along the last and the first axis. */
    enum { O = 3, R = 1000 };
    static float xv[O * R];
    for (int i = 0; i < O * R; i++) xv[i] = (float)((i * 7919) % 13);
    const kiln_op_def *op = kiln__op_by_id(KILN_OP_TopK);
    int64_t ks[3] = {1, 7, 400};
    for (int kk = 0; kk < 3; kk++)
        for (int largest = 0; largest < 2; largest++)
            for (int axis = 0; axis < 2; axis++) {
                int64_t k = ks[kk], kd[1] = {1};
                int64_t xd[2] = {axis ? O : R, axis ? R : O};
                kiln_tensor x = tensor(KILN_DTYPE_FLOAT32, 2, xd, xv);
                kiln_tensor K = tensor(KILN_DTYPE_INT64, 1, kd, &k);
                const kiln_tensor *in[2] = {&x, &K};
                topk_attrs at = {axis ? -1 : 0, largest, 1};
                run_result r;
                CHECK_OK(run_op(op, &at, 2, in, 2, NULL, &r));
                if (r.st != KILN_OK) continue;
                int bad = 0;
                for (int o = 0; o < O; o++) {
                    static bool taken[R];
                    memset(taken, 0, sizeof taken);
                    for (int64_t j = 0; j < k; j++) {
                        int best = -1;
                        for (int q = 0; q < R; q++) {
                            if (taken[q]) continue;
                            float v = axis ? xv[o * R + q] : xv[q * O + o];
                            float bv = best < 0 ? 0 : axis ? xv[o * R + best] : xv[best * O + o];
                            if (best < 0 || (largest ? v > bv : v < bv)) best = q;
                        }
                        taken[best] = true;
                        int64_t pos = axis ? o * k + j : j * O + o;
                        float want = axis ? xv[o * R + best] : xv[best * O + o];
                        if (((int64_t *)r.out[1].data)[pos] != best ||
                            ((float *)r.out[0].data)[pos] != want)
                            bad++;
                    }
                }
                if (bad) fprintf(stderr, "  k=%lld largest=%d axis=%d: %d wrong\n", (long long)k,
                                 largest, axis, bad);
                CHECK(bad == 0);
                result_free(&r);
            }
}

/* ---- LSTM ------------------------------------------------------------------ */

static double sigm(double v) { return 1.0 / (1.0 + exp(-v)); }

/* Reference LSTM for one direction (gates i, o, f, c; peepholes i, o, f),
 * layout 0. Writes Y[t, dir, b, :] and the final h/c. */
static void ref_lstm_dir(int S, int B, int I, int H, int D, int dir, bool reverse, const float *X,
                         const float *W, const float *R, const float *Bias, const int32_t *lens,
                         const float *h0, const float *c0, const float *P, double *Y, double *hT,
                         double *cT) {
    (void)S;
    const float *Wd = W + dir * 4 * H * I, *Rd = R + dir * 4 * H * H;
    const float *Bd = Bias + dir * 8 * H, *Pd = P + dir * 3 * H;
    for (int b = 0; b < B; b++) {
        double h[16], c[16], hn[16];
        for (int j = 0; j < H; j++) {
            h[j] = h0[(dir * B + b) * H + j];
            c[j] = c0[(dir * B + b) * H + j];
        }
        for (int s = 0; s < lens[b]; s++) {
            int t = reverse ? lens[b] - 1 - s : s;
            const float *x = X + (t * B + b) * I;
            double g[4][16];
            for (int q = 0; q < 4; q++)
                for (int j = 0; j < H; j++) {
                    int row = q * H + j;
                    double v = Bd[row] + Bd[4 * H + row];
                    for (int k = 0; k < I; k++) v += x[k] * Wd[row * I + k];
                    for (int k = 0; k < H; k++) v += h[k] * Rd[row * H + k];
                    g[q][j] = v;
                }
            for (int j = 0; j < H; j++) {
                double it = sigm(g[0][j] + Pd[j] * c[j]);
                double ft = sigm(g[2][j] + Pd[2 * H + j] * c[j]);
                double ct = tanh(g[3][j]);
                c[j] = ft * c[j] + it * ct;
                double ot = sigm(g[1][j] + Pd[H + j] * c[j]);
                hn[j] = ot * tanh(c[j]);
            }
            for (int j = 0; j < H; j++) {
                h[j] = hn[j];
                Y[((t * D + dir) * B + b) * H + j] = h[j];
            }
        }
        for (int j = 0; j < H; j++) {
            hT[(dir * B + b) * H + j] = h[j];
            cT[(dir * B + b) * H + j] = c[j];
        }
    }
}

TEST(lstm_bidirectional_vs_reference) {
    enum { S = 4, B = 3, I = 3, H = 5, D = 2 };
    float X[S * B * I], W[D * 4 * H * I], R[D * 4 * H * H], Bias[D * 8 * H], h0[D * B * H],
        c0[D * B * H], P[D * 3 * H];
    int32_t lens[B] = {4, 2, 3};
    double *v;
    struct {
        float *p;
        int n;
    } fill[] = {{X, S * B * I}, {W, D * 4 * H * I}, {R, D * 4 * H * H}, {Bias, D * 8 * H},
                {h0, D * B * H}, {c0, D * B * H}, {P, D * 3 * H}};
    for (int f = 0; f < 7; f++) {
        v = make_data(fill[f].n, false, 10 + (unsigned)f);
        for (int i = 0; i < fill[f].n; i++) fill[f].p[i] = (float)(v[i] * 0.5);
        free(v);
    }
    int64_t xd[3] = {S, B, I}, wd[3] = {D, 4 * H, I}, rd[3] = {D, 4 * H, H}, bd[2] = {D, 8 * H},
            ld[1] = {B}, hd[3] = {D, B, H}, pd[2] = {D, 3 * H};
    kiln_tensor tX = tensor(KILN_DTYPE_FLOAT32, 3, xd, X), tW = tensor(KILN_DTYPE_FLOAT32, 3, wd, W),
                tR = tensor(KILN_DTYPE_FLOAT32, 3, rd, R), tB = tensor(KILN_DTYPE_FLOAT32, 2, bd, Bias),
                tL = tensor(KILN_DTYPE_INT32, 1, ld, lens), th = tensor(KILN_DTYPE_FLOAT32, 3, hd, h0),
                tc = tensor(KILN_DTYPE_FLOAT32, 3, hd, c0), tP = tensor(KILN_DTYPE_FLOAT32, 2, pd, P);
    const kiln_tensor *in[8] = {&tX, &tW, &tR, &tB, &tL, &th, &tc, &tP};
    rnn_attrs at = {.hidden_size = H, .direction = 2, .act = {0, 1, 1, 0, 1, 1}};
    run_result r;
    CHECK_OK(run_op(kiln__op_by_id(KILN_OP_LSTM), &at, 8, in, 3, NULL, &r));
    if (r.st != KILN_OK) return;
    CHECK(r.out[0].rank == 4 && r.out[0].dims[0] == S && r.out[0].dims[1] == D &&
          r.out[0].dims[2] == B && r.out[0].dims[3] == H);
    CHECK(r.out[1].rank == 3 && r.out[1].dims[0] == D && r.out[2].dims[2] == H);
    static double Y[S * D * B * H], hT[D * B * H], cT[D * B * H];
    memset(Y, 0, sizeof Y);
    for (int d = 0; d < D; d++)
        ref_lstm_dir(S, B, I, H, D, d, d == 1, X, W, R, Bias, lens, h0, c0, P, Y, hT, cT);
    int bad = 0;
    for (int i = 0; i < S * D * B * H; i++)
        if (!close_enough(((float *)r.out[0].data)[i], Y[i], 1e-4, 1e-5) && bad++ < 3)
            fprintf(stderr, "  Y[%d] = %g, want %g\n", i, ((float *)r.out[0].data)[i], Y[i]);
    for (int i = 0; i < D * B * H; i++) {
        if (!close_enough(((float *)r.out[1].data)[i], hT[i], 1e-4, 1e-5) && bad++ < 6)
            fprintf(stderr, "  Y_h[%d] = %g, want %g\n", i, ((float *)r.out[1].data)[i], hT[i]);
        if (!close_enough(((float *)r.out[2].data)[i], cT[i], 1e-4, 1e-5) && bad++ < 9)
            fprintf(stderr, "  Y_c[%d] = %g, want %g\n", i, ((float *)r.out[2].data)[i], cT[i]);
    }
    CHECK(bad == 0);
    result_free(&r);

    /* a W of the wrong shape is a clear error */
    int64_t wbad[3] = {D, 4 * H + 1, I};
    kiln_tensor tWb = tensor(KILN_DTYPE_FLOAT32, 3, wbad, W);
    const kiln_tensor *in2[3] = {&tX, &tWb, &tR};
    CHECK_ERR(run_op(kiln__op_by_id(KILN_OP_LSTM), &at, 3, in2, 3, NULL, &r), KILN_ERR_MODEL,
              "W is [2x21x3]");
    result_free(&r);
}

TEST(lstm_hand_computed) {
    /* one step, one unit, input 1: all weights 1, no bias:
     * i = o = f = sigmoid(x), c = tanh(x), C = i*c, H = o*tanh(C) */
    float X[1] = {0.5f}, W[4] = {1, 1, 1, 1}, R[4] = {1, 1, 1, 1};
    int64_t xd[3] = {1, 1, 1}, wd[3] = {1, 4, 1};
    kiln_tensor tX = tensor(KILN_DTYPE_FLOAT32, 3, xd, X), tW = tensor(KILN_DTYPE_FLOAT32, 3, wd, W),
                tR = tensor(KILN_DTYPE_FLOAT32, 3, wd, R);
    const kiln_tensor *in[3] = {&tX, &tW, &tR};
    rnn_attrs at = {.hidden_size = 1, .direction = 0, .act = {0, 1, 1, 0, 1, 1}};
    run_result r;
    CHECK_OK(run_op(kiln__op_by_id(KILN_OP_LSTM), &at, 3, in, 3, NULL, &r));
    if (r.st != KILN_OK) return;
    double s = 1.0 / (1.0 + exp(-0.5)), C = s * tanh(0.5), Hh = s * tanh(C);
    CHECK(fabs(((float *)r.out[0].data)[0] - Hh) < 1e-6);
    CHECK(fabs(((float *)r.out[1].data)[0] - Hh) < 1e-6);
    CHECK(fabs(((float *)r.out[2].data)[0] - C) < 1e-6);
    result_free(&r);
}

/* Reference GRU (gates z, r, h), one direction, layout 1 ([batch, seq, ...]). */
static void ref_gru(int S, int B, int I, int H, bool lbr, bool reverse, const float *X,
                    const float *W, const float *R, const float *Bias, const int32_t *lens,
                    double *Y, double *hT) {
    for (int b = 0; b < B; b++) {
        double h[8], hn[8];
        for (int j = 0; j < H; j++) h[j] = 0;
        for (int s = 0; s < lens[b]; s++) {
            int t = reverse ? lens[b] - 1 - s : s;
            const float *x = X + (b * S + t) * I;
            double xw[3][8], hr[3][8];
            for (int q = 0; q < 3; q++)
                for (int j = 0; j < H; j++) {
                    int row = q * H + j;
                    double v = Bias[row], u = Bias[3 * H + row];
                    for (int k = 0; k < I; k++) v += x[k] * W[row * I + k];
                    for (int k = 0; k < H; k++) u += h[k] * R[row * H + k];
                    xw[q][j] = v;
                    hr[q][j] = u;
                }
            for (int j = 0; j < H; j++) {
                double z = sigm(xw[0][j] + hr[0][j]);
                double r = sigm(xw[1][j] + hr[1][j]);
                double hh;
                if (lbr) {
                    hh = tanh(xw[2][j] + r * hr[2][j]);
                } else {
                    double u = Bias[3 * H + 2 * H + j];
                    for (int k = 0; k < H; k++) {
                        double rk = sigm(xw[1][k] + hr[1][k]);
                        u += rk * h[k] * R[(2 * H + j) * H + k];
                    }
                    hh = tanh(xw[2][j] + u);
                }
                hn[j] = (1 - z) * hh + z * h[j];
            }
            for (int j = 0; j < H; j++) {
                h[j] = hn[j];
                Y[(b * S + t) * H + j] = h[j];
            }
        }
        for (int j = 0; j < H; j++) hT[b * H + j] = h[j];
    }
}

TEST(gru_layout1_reverse_vs_reference) {
    enum { S = 3, B = 2, I = 2, H = 4 };
    float X[B * S * I], W[3 * H * I], R[3 * H * H], Bias[6 * H];
    int32_t lens[B] = {3, 2};
    struct {
        float *p;
        int n;
    } fill[] = {{X, B * S * I}, {W, 3 * H * I}, {R, 3 * H * H}, {Bias, 6 * H}};
    for (int f = 0; f < 4; f++) {
        double *v = make_data(fill[f].n, false, 30 + (unsigned)f);
        for (int i = 0; i < fill[f].n; i++) fill[f].p[i] = (float)(v[i] * 0.6);
        free(v);
    }
    int64_t xd[3] = {B, S, I}, wd[3] = {1, 3 * H, I}, rd[3] = {1, 3 * H, H}, bd[2] = {1, 6 * H},
            ld[1] = {B};
    kiln_tensor tX = tensor(KILN_DTYPE_FLOAT32, 3, xd, X), tW = tensor(KILN_DTYPE_FLOAT32, 3, wd, W),
                tR = tensor(KILN_DTYPE_FLOAT32, 3, rd, R), tB = tensor(KILN_DTYPE_FLOAT32, 2, bd, Bias),
                tL = tensor(KILN_DTYPE_INT32, 1, ld, lens);
    const kiln_tensor *in[5] = {&tX, &tW, &tR, &tB, &tL};
    for (int lbr = 0; lbr < 2; lbr++)
        for (int rev = 0; rev < 2; rev++) {
            rnn_attrs at = {.hidden_size = H, .direction = rev, .layout = 1,
                            .linear_before_reset = lbr, .act = {0, 1, 1, 0, 1, 1}};
            run_result r;
            CHECK_OK(run_op(kiln__op_by_id(KILN_OP_GRU), &at, 5, in, 2, NULL, &r));
            if (r.st != KILN_OK) continue;
            CHECK(r.out[0].rank == 4 && r.out[0].dims[0] == B && r.out[0].dims[1] == S &&
                  r.out[0].dims[2] == 1 && r.out[0].dims[3] == H);
            double Y[B * S * H], hT[B * H];
            memset(Y, 0, sizeof Y);
            ref_gru(S, B, I, H, lbr, rev, X, W, R, Bias, lens, Y, hT);
            int bad = 0;
            for (int i = 0; i < B * S * H; i++)
                if (!close_enough(((float *)r.out[0].data)[i], Y[i], 1e-4, 1e-5)) bad++;
            for (int i = 0; i < B * H; i++)
                if (!close_enough(((float *)r.out[1].data)[i], hT[i], 1e-4, 1e-5)) bad++;
            if (bad) fprintf(stderr, "  GRU lbr=%d reverse=%d: %d values differ\n", lbr, rev, bad);
            CHECK(bad == 0);
            result_free(&r);
        }
}

/* ---- DFT (misc_signal.c): radix-2 and direct paths vs the formula -------- */

TEST(dft_pow2_and_direct) {
    typedef struct {
        int32_t axis, inverse, onesided;
    } dft_attrs;
    const kiln_op_def *op = kiln__op_by_id(KILN_OP_DFT);
    for (int n = 5; n <= 8; n++)
        for (int inv = 0; inv < 2; inv++) {
            float xv[2 * 8 * 2];
            for (int i = 0; i < 2 * n * 2; i++) xv[i] = (float)((i * 5) % 7) - 3.f;
            int64_t xd[3] = {2, n, 2};
            kiln_tensor x = tensor(KILN_DTYPE_FLOAT32, 3, xd, xv);
            const kiln_tensor *in[1] = {&x};
            dft_attrs at = {1, inv, 0};
            run_result r;
            CHECK_OK(run_op(op, &at, 1, in, 1, NULL, &r));
            if (r.st != KILN_OK) continue;
            int bad = 0;
            for (int b = 0; b < 2; b++)
                for (int k = 0; k < n; k++) {
                    double re = 0, im = 0, sg = inv ? 1.0 : -1.0;
                    for (int j = 0; j < n; j++) {
                        double xr = xv[(b * n + j) * 2], xi = xv[(b * n + j) * 2 + 1];
                        double ang = sg * 2.0 * 3.14159265358979323846 * j * k / n;
                        re += xr * cos(ang) - xi * sin(ang);
                        im += xr * sin(ang) + xi * cos(ang);
                    }
                    if (inv) {
                        re /= n;
                        im /= n;
                    }
                    const float *y = (const float *)r.out[0].data + (b * n + k) * 2;
                    if (!close_enough(y[0], re, 1e-5, 1e-5) || !close_enough(y[1], im, 1e-5, 1e-5))
                        bad++;
                }
            if (bad) fprintf(stderr, "  DFT n=%d inverse=%d: %d wrong\n", n, inv, bad);
            CHECK(bad == 0);
            result_free(&r);
        }
}

int main(void) {
    RUN(reduce_all_kinds_axes_sets);
    RUN(reduce_other_dtypes);
    RUN(reduce_large_parallel);
    RUN(reduce_empty_axes_and_noop);
    RUN(reduce_nan_propagation);
    RUN(reduce_build_time_infer);
    RUN(reduce_errors);
    RUN(argmax_ties_select_last);
    RUN(topk_ties_order);
    RUN(topk_large_with_ties);
    RUN(lstm_bidirectional_vs_reference);
    RUN(lstm_hand_computed);
    RUN(gru_layout1_reverse_vs_reference);
    RUN(dft_pow2_and_direct);
    return test_summary();
}
