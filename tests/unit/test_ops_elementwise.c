/* test_ops_elementwise.c -- kernel-level tests of the elementwise family
 * (src/ops/elementwise*.c): op->infer and op->cpu are called directly on
 * hand-built tensors and compared with straightforward reference loops
 * written here. Every output buffer is followed by a canary that must
 * survive the kernel. No ONNX involved. */
#include <math.h>
#include <stdlib.h>

#include "ops/elementwise_impl.h"
#include "test.h"

#define CANARY 64
#define CANARY_BYTE 0xA5
#define MAXN 8

/* ---- running one op ------------------------------------------------------- */

typedef struct run_result {
    kiln_status st;
    kiln_tensor out;
    unsigned char *mem;
    size_t nbytes;
} run_result;

static void result_free(run_result *r) {
    free(r->mem);
    memset(r, 0, sizeof *r);
}

static void tinfo_of(kiln_tinfo *ti, const kiln_tensor *t, bool with_data) {
    memset(ti, 0, sizeof *ti);
    ti->dtype = t->dtype;
    ti->rank = t->rank;
    memcpy(ti->dims, t->dims, sizeof ti->dims);
    ti->data = with_data ? t->data : NULL;
}

/* infer at build time (no data) and run time, then the kernel; the output
 * gets a canary after its bytes. */
static kiln_status run_op(const kiln_op_def *op, const void *attrs, int n_in,
                          const kiln_tensor *const *in, kiln_pool *pool, run_result *r) {
    memset(r, 0, sizeof *r);
    kiln_tinfo ti[MAXN], to, tb;
    const kiln_tinfo *tip[MAXN];
    kiln_tinfo *top[1] = {&to};
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n_in; i++) {
            tip[i] = in[i] ? &ti[i] : NULL;
            if (in[i]) tinfo_of(&ti[i], in[i], pass == 1);
        }
        memset(&to, 0, sizeof to);
        kiln_infer_args ia = {.op = op, .attrs = attrs, .node_name = "t", .n_in = n_in,
                              .n_out = 1, .in = tip, .out = top, .runtime = pass == 1};
        r->st = op->infer(&ia);
        if (r->st != KILN_OK) return r->st;
        if (pass == 0) tb = to;
    }
    /* build-time and run-time answers agree when everything is known */
    CHECK(tb.dtype == to.dtype && tb.rank == to.rank);
    r->out.dtype = to.dtype;
    r->out.rank = to.rank;
    memcpy(r->out.dims, to.dims, sizeof to.dims);
    int64_t n = kiln__numel(to.rank, to.dims);
    if (n < 0) return r->st = KILN_ERR_INTERNAL;
    r->nbytes = (size_t)n * kiln_dtype_size(to.dtype);
    r->mem = malloc(r->nbytes + CANARY);
    memset(r->mem, 0x5A, r->nbytes);
    memset(r->mem + r->nbytes, CANARY_BYTE, CANARY);
    r->out.data = r->mem;
    kiln_tensor *outp[1] = {&r->out};
    kiln_kernel_args ka = {.op = op, .attrs = attrs, .node_name = "t", .n_in = n_in,
                           .n_out = 1, .in = in, .out = outp, .pool = pool};
    r->st = op->cpu(&ka);
    for (int j = 0; j < CANARY; j++)
        if (r->mem[r->nbytes + j] != CANARY_BYTE) {
            fprintf(stderr, "  canary of the output overwritten (op %s)\n", op->name);
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

static void *alloc_tensor(kiln_tensor *t, kiln_dtype dt, int rank, const int64_t *dims) {
    *t = tensor(dt, rank, dims, NULL);
    int64_t n = kiln__numel(rank, dims);
    t->data = calloc((size_t)(n > 0 ? n : 1), kiln_dtype_size(dt));
    return t->data;
}

/* deterministic pseudo-random numbers */
static uint64_t rng_next(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}
static double rng_unit(uint64_t *s) { return (double)rng_next(s) / 2147483648.0; } /* [0,1) */

/* fills with values representable in dt: ints in [lo, hi], floats in [lo, hi) */
static void fill(kiln_tensor *t, uint64_t *rng, double lo, double hi) {
    int64_t n = kiln__tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        if (kiln__dtype_is_int(t->dtype) || t->dtype == KILN_DTYPE_BOOL) {
            int64_t span = (int64_t)(hi - lo) + 1;
            kiln__store_i64(t->dtype, t->data, i, (int64_t)lo + (int64_t)(rng_next(rng) % (uint64_t)span));
        } else {
            kiln__store_f64(t->dtype, t->data, i, lo + (hi - lo) * rng_unit(rng));
        }
    }
}

static bool close_enough(double got, double want, double rtol, double atol) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= atol + rtol * fabs(want);
}

static double tol_of(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT16: return 2e-3;
    case KILN_DTYPE_BFLOAT16: return 1.6e-2;
    case KILN_DTYPE_FLOAT32: return 2e-6;
    default: return 1e-12;
    }
}

/* flat index into a numpy-broadcast input for output index `o` */
static int64_t bcast_index(int64_t o, int orank, const int64_t *odims, int rank, const int64_t *dims) {
    int64_t idx = 0, stride = 1;
    for (int d = orank - 1; d >= 0; d--) {
        int64_t c = o % odims[d];
        o /= odims[d];
        int k = d - (orank - rank);
        if (k < 0) continue;
        if (dims[k] != 1) idx += c * stride;
        stride *= dims[k];
    }
    return idx;
}

static const kiln_op_def *op_of(int id) { return kiln__op_by_id(id); }

/* ---- unary ------------------------------------------------------------------ */

typedef double (*ref1_fn)(double x, const kiln_ew_act_attrs *at);

static double r_abs(double x, const kiln_ew_act_attrs *a) { (void)a; return fabs(x); }
static double r_neg(double x, const kiln_ew_act_attrs *a) { (void)a; return -x; }
static double r_sqrt(double x, const kiln_ew_act_attrs *a) { (void)a; return sqrt(x); }
static double r_exp(double x, const kiln_ew_act_attrs *a) { (void)a; return exp(x); }
static double r_log(double x, const kiln_ew_act_attrs *a) { (void)a; return log(x); }
static double r_recip(double x, const kiln_ew_act_attrs *a) { (void)a; return 1.0 / x; }
static double r_floor(double x, const kiln_ew_act_attrs *a) { (void)a; return floor(x); }
static double r_ceil(double x, const kiln_ew_act_attrs *a) { (void)a; return ceil(x); }
static double r_round(double x, const kiln_ew_act_attrs *a) {
    (void)a;
    double f = floor(x), d = x - f;
    if (d > 0.5) return f + 1;
    if (d < 0.5) return f;
    return fmod(f, 2.0) == 0 ? f : f + 1; /* half to even */
}
static double r_sign(double x, const kiln_ew_act_attrs *a) { (void)a; return x > 0 ? 1 : x < 0 ? -1 : x; }
static double r_sin(double x, const kiln_ew_act_attrs *a) { (void)a; return sin(x); }
static double r_cos(double x, const kiln_ew_act_attrs *a) { (void)a; return cos(x); }
static double r_tan(double x, const kiln_ew_act_attrs *a) { (void)a; return tan(x); }
static double r_asin(double x, const kiln_ew_act_attrs *a) { (void)a; return asin(x); }
static double r_acos(double x, const kiln_ew_act_attrs *a) { (void)a; return acos(x); }
static double r_atan(double x, const kiln_ew_act_attrs *a) { (void)a; return atan(x); }
static double r_sinh(double x, const kiln_ew_act_attrs *a) { (void)a; return sinh(x); }
static double r_cosh(double x, const kiln_ew_act_attrs *a) { (void)a; return cosh(x); }
static double r_asinh(double x, const kiln_ew_act_attrs *a) { (void)a; return asinh(x); }
static double r_acosh(double x, const kiln_ew_act_attrs *a) { (void)a; return acosh(x); }
static double r_atanh(double x, const kiln_ew_act_attrs *a) { (void)a; return atanh(x); }
static double r_erf(double x, const kiln_ew_act_attrs *a) { (void)a; return erf(x); }
static double r_relu(double x, const kiln_ew_act_attrs *a) { (void)a; return x > 0 ? x : 0; }
static double r_leaky(double x, const kiln_ew_act_attrs *a) { return x < 0 ? a->alpha * x : x; }
static double r_elu(double x, const kiln_ew_act_attrs *a) { return x < 0 ? a->alpha * (exp(x) - 1) : x; }
static double r_selu(double x, const kiln_ew_act_attrs *a) {
    return x > 0 ? a->gamma * x : a->gamma * (a->alpha * exp(x) - a->alpha);
}
static double r_celu(double x, const kiln_ew_act_attrs *a) {
    return fmax(0, x) + fmin(0, a->alpha * (exp(x / a->alpha) - 1));
}
static double r_sigmoid(double x, const kiln_ew_act_attrs *a) { (void)a; return 1 / (1 + exp(-x)); }
static double r_hsig(double x, const kiln_ew_act_attrs *a) {
    return fmax(0, fmin(1, a->alpha * x + a->beta));
}
static double r_hswish(double x, const kiln_ew_act_attrs *a) {
    (void)a;
    return x * fmax(0, fmin(1, x / 6 + 0.5));
}
static double r_tanh(double x, const kiln_ew_act_attrs *a) { (void)a; return tanh(x); }
static double r_softplus(double x, const kiln_ew_act_attrs *a) { (void)a; return log(exp(x) + 1); }
static double r_softsign(double x, const kiln_ew_act_attrs *a) { (void)a; return x / (1 + fabs(x)); }
static double r_mish(double x, const kiln_ew_act_attrs *a) { (void)a; return x * tanh(log1p(exp(x))); }
static double r_thr(double x, const kiln_ew_act_attrs *a) { return x > a->alpha ? x : 0; }
static double r_shrink(double x, const kiln_ew_act_attrs *a) {
    return x < -a->alpha ? x + a->beta : x > a->alpha ? x - a->beta : 0;
}

typedef struct unary_case {
    int id;
    ref1_fn ref;
    double lo, hi;
    kiln_ew_act_attrs at;
} unary_case;

static const unary_case unary_cases[] = {
    {KILN_OP_Abs, r_abs, -5, 5, {0, 0, 0}},
    {KILN_OP_Neg, r_neg, -5, 5, {0, 0, 0}},
    {KILN_OP_Sqrt, r_sqrt, 0, 100, {0, 0, 0}},
    {KILN_OP_Exp, r_exp, -20, 20, {0, 0, 0}},
    {KILN_OP_Log, r_log, 0.01, 100, {0, 0, 0}},
    {KILN_OP_Reciprocal, r_recip, 0.5, 10, {0, 0, 0}},
    {KILN_OP_Floor, r_floor, -5, 5, {0, 0, 0}},
    {KILN_OP_Ceil, r_ceil, -5, 5, {0, 0, 0}},
    {KILN_OP_Round, r_round, -5, 5, {0, 0, 0}},
    {KILN_OP_Sign, r_sign, -5, 5, {0, 0, 0}},
    {KILN_OP_Sin, r_sin, -3, 3, {0, 0, 0}},
    {KILN_OP_Cos, r_cos, -3, 3, {0, 0, 0}},
    {KILN_OP_Tan, r_tan, -1.2, 1.2, {0, 0, 0}},
    {KILN_OP_Asin, r_asin, -0.99, 0.99, {0, 0, 0}},
    {KILN_OP_Acos, r_acos, -0.99, 0.99, {0, 0, 0}},
    {KILN_OP_Atan, r_atan, -5, 5, {0, 0, 0}},
    {KILN_OP_Sinh, r_sinh, -3, 3, {0, 0, 0}},
    {KILN_OP_Cosh, r_cosh, -3, 3, {0, 0, 0}},
    {KILN_OP_Asinh, r_asinh, -5, 5, {0, 0, 0}},
    {KILN_OP_Acosh, r_acosh, 1, 10, {0, 0, 0}},
    {KILN_OP_Atanh, r_atanh, -0.99, 0.99, {0, 0, 0}},
    {KILN_OP_Erf, r_erf, -3, 3, {0, 0, 0}},
    {KILN_OP_Relu, r_relu, -5, 5, {0, 0, 0}},
    {KILN_OP_LeakyRelu, r_leaky, -5, 5, {0.1f, 0, 0}},
    {KILN_OP_Elu, r_elu, -5, 5, {1.5f, 0, 0}},
    {KILN_OP_Selu, r_selu, -5, 5, {1.67326319217681884765625f, 0, 1.05070102214813232421875f}},
    {KILN_OP_Celu, r_celu, -5, 5, {2.0f, 0, 0}},
    {KILN_OP_Sigmoid, r_sigmoid, -20, 20, {0, 0, 0}},
    {KILN_OP_HardSigmoid, r_hsig, -5, 5, {0.2f, 0.5f, 0}},
    {KILN_OP_HardSwish, r_hswish, -5, 5, {0, 0, 0}},
    {KILN_OP_Tanh, r_tanh, -6, 6, {0, 0, 0}},
    {KILN_OP_Softplus, r_softplus, -10, 10, {0, 0, 0}},
    {KILN_OP_Softsign, r_softsign, -5, 5, {0, 0, 0}},
    {KILN_OP_Mish, r_mish, -5, 5, {0, 0, 0}},
    {KILN_OP_ThresholdedRelu, r_thr, -5, 5, {1.0f, 0, 0}},
    {KILN_OP_Shrink, r_shrink, -5, 5, {1.5f, 0.5f, 0}},
};

/* runs one unary case on dtype dt with n elements; returns the number of mismatches */
static int check_unary(const unary_case *c, kiln_dtype dt, int64_t n, kiln_pool *pool) {
    const kiln_op_def *op = op_of(c->id);
    int64_t dims[2] = {n / 7 > 0 ? 7 : 1, n / 7 > 0 ? n / 7 : n};
    kiln_tensor x;
    alloc_tensor(&x, dt, 2, dims);
    uint64_t rng = 1234 + (uint64_t)c->id;
    fill(&x, &rng, c->lo, c->hi);
    if (c->id == KILN_OP_Round && n >= 8 && kiln__dtype_is_float(dt)) {
        const double halves[8] = {0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -3.5};
        for (int i = 0; i < 8; i++) kiln__store_f64(dt, x.data, i, halves[i]);
    }
    const kiln_tensor *in[1] = {&x};
    run_result r;
    int bad = 0;
    if (run_op(op, op->attr_size ? (const void *)&c->at : NULL, 1, in, pool, &r) != KILN_OK) {
        fprintf(stderr, "  %s %s: %s\n", op->name, kiln_dtype_name(dt), kiln_last_error());
        bad = 1;
    } else {
        CHECK(r.out.dtype == dt && r.out.rank == 2 && r.out.dims[1] == dims[1]);
        int64_t total = dims[0] * dims[1];
        for (int64_t i = 0; i < total; i++) {
            double xv = kiln__load_f64(dt, x.data, i);
            double want = c->ref(xv, &c->at);
            if (ew_is_half(dt)) { /* the exact result rounded to the type (overflow: inf) */
                uint16_t h;
                kiln__store_f64(dt, &h, 0, want);
                want = kiln__load_f64(dt, &h, 0);
            }
            double got = kiln__load_f64(dt, r.out.data, i);
            double tol = tol_of(dt);
            if (c->id == KILN_OP_Exp || c->id == KILN_OP_Sinh || c->id == KILN_OP_Cosh) tol *= 2;
            if (!close_enough(got, want, tol, dt == KILN_DTYPE_FLOAT64 ? 1e-14 : tol * 0.05)) {
                if (bad < 3)
                    fprintf(stderr, "  %s %s [%lld] x=%.9g: got %.9g want %.9g\n", op->name,
                            kiln_dtype_name(dt), (long long)i, xv, got, want);
                bad++;
            }
        }
    }
    result_free(&r);
    free(x.data);
    return bad;
}

/* NaN in gives NaN out for every unary op (float32 and float64), as
 * PyTorch: Celu, ThresholdedRelu and Shrink gave 0; and the activations'
 * values at +-inf are torch's. */
TEST(unary_special_values) {
    for (int d = 0; d < 2; d++) {
        kiln_dtype dt = d ? KILN_DTYPE_FLOAT64 : KILN_DTYPE_FLOAT32;
        for (size_t k = 0; k < sizeof unary_cases / sizeof unary_cases[0]; k++) {
            const unary_case *c = &unary_cases[k];
            const kiln_op_def *op = op_of(c->id);
            int64_t dims[1] = {3};
            kiln_tensor x;
            alloc_tensor(&x, dt, 1, dims);
            const double v[3] = {NAN, INFINITY, -INFINITY};
            for (int i = 0; i < 3; i++) kiln__store_f64(dt, x.data, i, v[i]);
            const kiln_tensor *in[1] = {&x};
            run_result r;
            CHECK_OK(run_op(op, op->attr_size ? (const void *)&c->at : NULL, 1, in, NULL, &r));
            if (r.st == KILN_OK) {
                double y[3];
                for (int i = 0; i < 3; i++) y[i] = kiln__load_f64(dt, r.out.data, i);
                if (!isnan(y[0])) fprintf(stderr, "  %s %s: NaN gave %g\n", op->name, kiln_dtype_name(dt), y[0]);
                CHECK(isnan(y[0]));
                /* torch: relu, leaky_relu(0.1), celu(2), hardsigmoid (slope 0.2, 0.5), threshold(1, 0),
                 * hardshrink/softshrink (1.5, bias 0.5) at +inf and -inf */
                double want[2] = {NAN, NAN};
                switch (c->id) {
                case KILN_OP_Relu: want[0] = INFINITY, want[1] = 0; break;
                case KILN_OP_LeakyRelu: want[0] = INFINITY, want[1] = -INFINITY; break;
                case KILN_OP_Celu: want[0] = INFINITY, want[1] = -2; break;
                case KILN_OP_HardSigmoid: want[0] = 1, want[1] = 0; break;
                case KILN_OP_ThresholdedRelu: want[0] = INFINITY, want[1] = 0; break;
                case KILN_OP_Shrink: want[0] = INFINITY, want[1] = -INFINITY; break;
                default: break;
                }
                for (int i = 0; i < 2; i++)
                    if (!isnan(want[i])) {
                        if (y[1 + i] != want[i])
                            fprintf(stderr, "  %s %s: %g gave %g, want %g\n", op->name, kiln_dtype_name(dt), v[1 + i],
                                    y[1 + i], want[i]);
                        CHECK(y[1 + i] == want[i]);
                    }
            }
            result_free(&r);
            free(x.data);
        }
    }
}

TEST(unary_float_types) {
    const kiln_dtype types[4] = {KILN_DTYPE_FLOAT32, KILN_DTYPE_FLOAT64, KILN_DTYPE_FLOAT16,
                                 KILN_DTYPE_BFLOAT16};
    for (size_t c = 0; c < sizeof unary_cases / sizeof unary_cases[0]; c++)
        for (int t = 0; t < 4; t++) CHECK(check_unary(&unary_cases[c], types[t], 301, NULL) == 0);
}

TEST(unary_parallel_large) {
    kiln_pool *pool = NULL;
    CHECK_OK(kiln__pool_create(3, &pool));
    for (size_t c = 0; c < sizeof unary_cases / sizeof unary_cases[0]; c++) {
        int id = unary_cases[c].id;
        if (id == KILN_OP_Sigmoid || id == KILN_OP_Tanh || id == KILN_OP_Relu || id == KILN_OP_Exp ||
            id == KILN_OP_Elu)
            CHECK(check_unary(&unary_cases[c], KILN_DTYPE_FLOAT32, 7 * 40009, pool) == 0);
    }
    kiln__pool_free(pool);
}

/* the branch-free float32 exp/tanh/sigmoid over their whole range, incl. specials */
TEST(unary_f32_fast_math_accuracy) {
    const int64_t n = 400000;
    int64_t dims[1] = {n};
    kiln_tensor x;
    float *xs = alloc_tensor(&x, KILN_DTYPE_FLOAT32, 1, dims);
    for (int64_t i = 0; i < n; i++) xs[i] = (float)(-110.0 + 200.0 * (double)i / (double)n);
    xs[0] = NAN;
    xs[1] = INFINITY;
    xs[2] = -INFINITY;
    xs[3] = 88.72283f;
    xs[4] = 88.7229f;
    xs[5] = -87.5f;
    xs[6] = -103.9f;
    xs[7] = 0.0f;
    xs[8] = -0.0f;
    xs[9] = 1e-8f;
    const int ids[3] = {KILN_OP_Exp, KILN_OP_Tanh, KILN_OP_Sigmoid};
    for (int k = 0; k < 3; k++) {
        const kiln_tensor *in[1] = {&x};
        run_result r;
        CHECK_OK(run_op(op_of(ids[k]), NULL, 1, in, NULL, &r));
        const float *y = r.out.data;
        int bad = 0;
        double worst = 0;
        for (int64_t i = 0; i < n && r.st == KILN_OK; i++) {
            double v = xs[i];
            double want = ids[k] == KILN_OP_Exp ? exp(v) : ids[k] == KILN_OP_Tanh ? tanh(v)
                                                                                  : 1 / (1 + exp(-v));
            want = (double)(float)want;
            double got = y[i];
            bool ok;
            if (isnan(want)) ok = isnan(got);
            else if (isinf(want)) ok = got == want;
            else {
                double err = fabs(got - want);
                /* 4 ulp of float, or an absolute 2^-149 * 4 in the subnormal range */
                double lim = 4 * ldexp(1.0, ilogb(want == 0 ? 1e-45 : want) - 23);
                if (lim < 4 * 1.4e-45) lim = 4 * 1.4e-45;
                /* sigmoid underflows to 0 where exp(-x) overflows, like float math */
                if (ids[k] == KILN_OP_Sigmoid && want < 1.2e-38) lim = 1.2e-38;
                ok = err <= lim;
                if (fabs(want) >= 1.2e-38 && err / fabs(want) > worst) worst = err / fabs(want);
            }
            if (!ok && bad++ < 3)
                fprintf(stderr, "  %s x=%.9g got %.9g want %.9g\n", op_of(ids[k])->name, v, got, want);
        }
        CHECK(bad == 0);
        CHECK(worst < 5e-7);
        /* tanh is odd and exact at 0; signs of zero are kept */
        if (ids[k] == KILN_OP_Tanh) CHECK(y[7] == 0 && !signbit(y[7]) && signbit(y[8]));
        result_free(&r);
    }
    free(x.data);
}

TEST(unary_integer_types) {
    const kiln_dtype types[4] = {KILN_DTYPE_INT8, KILN_DTYPE_INT32, KILN_DTYPE_INT64, KILN_DTYPE_INT16};
    const int ids[5] = {KILN_OP_Abs, KILN_OP_Neg, KILN_OP_Sign, KILN_OP_Relu, KILN_OP_Shrink};
    kiln_ew_act_attrs shrink = {2.0f, 1.0f, 0};
    for (int t = 0; t < 4; t++)
        for (int k = 0; k < 5; k++) {
            int64_t dims[1] = {41};
            kiln_tensor x;
            alloc_tensor(&x, types[t], 1, dims);
            for (int i = 0; i < 41; i++) kiln__store_i64(types[t], x.data, i, i - 20);
            /* the most negative value: Abs/Neg wrap like two's complement */
            int64_t minv = types[t] == KILN_DTYPE_INT8 ? INT8_MIN : types[t] == KILN_DTYPE_INT16 ? INT16_MIN
                           : types[t] == KILN_DTYPE_INT32 ? INT32_MIN : INT64_MIN;
            kiln__store_i64(types[t], x.data, 0, minv);
            const kiln_tensor *in[1] = {&x};
            run_result r;
            CHECK_OK(run_op(op_of(ids[k]), ids[k] == KILN_OP_Shrink ? &shrink : NULL, 1, in, NULL, &r));
            for (int i = 0; i < 41 && r.st == KILN_OK; i++) {
                int64_t v = kiln__load_i64(types[t], x.data, i), want;
                switch (ids[k]) {
                case KILN_OP_Abs: want = v < 0 ? (int64_t)(0 - (uint64_t)v) : v; break;
                case KILN_OP_Neg: want = (int64_t)(0 - (uint64_t)v); break;
                case KILN_OP_Sign: want = (v > 0) - (v < 0); break;
                case KILN_OP_Relu: want = v > 0 ? v : 0; break;
                default: want = v < -2 ? v + 1 : v > 2 ? v - 1 : 0; break;
                }
                if (ids[k] == KILN_OP_Shrink && i == 0) continue; /* min + 1 through double: skip */
                /* wrap the reference to the type */
                int64_t wrapped;
                kiln__store_i64(types[t], &wrapped, 0, want);
                want = kiln__load_i64(types[t], &wrapped, 0);
                int64_t got = kiln__load_i64(types[t], r.out.data, i);
                if (got != want) {
                    fprintf(stderr, "  %s %s x=%lld got %lld want %lld\n", op_of(ids[k])->name,
                            kiln_dtype_name(types[t]), (long long)v, (long long)got, (long long)want);
                    test_failed_checks++;
                    break;
                }
            }
            result_free(&r);
            free(x.data);
        }
    /* unsigned Abs/Sign */
    uint8_t u[4] = {0, 1, 200, 255};
    int64_t d4[1] = {4};
    kiln_tensor xu = tensor(KILN_DTYPE_UINT8, 1, d4, u);
    const kiln_tensor *in[1] = {&xu};
    run_result r;
    CHECK_OK(run_op(op_of(KILN_OP_Abs), NULL, 1, in, NULL, &r));
    CHECK(r.st == KILN_OK && memcmp(r.out.data, u, 4) == 0);
    result_free(&r);
    CHECK_OK(run_op(op_of(KILN_OP_Sign), NULL, 1, in, NULL, &r));
    CHECK(r.st == KILN_OK && ((uint8_t *)r.out.data)[0] == 0 && ((uint8_t *)r.out.data)[3] == 1);
    result_free(&r);
    /* ops without an integer kernel are rejected by infer */
    CHECK_ERR(run_op(op_of(KILN_OP_Sqrt), NULL, 1, in, NULL, &r), KILN_ERR_UNSUPPORTED, "uint8");
    result_free(&r);
    CHECK_ERR(run_op(op_of(KILN_OP_Neg), NULL, 1, in, NULL, &r), KILN_ERR_UNSUPPORTED, "Neg");
    result_free(&r);
}

TEST(isnan_isinf_not) {
    float xs[6] = {1.0f, NAN, INFINITY, -INFINITY, -0.0f, 3e38f};
    int64_t d[1] = {6};
    kiln_tensor x = tensor(KILN_DTYPE_FLOAT32, 1, d, xs);
    const kiln_tensor *in[1] = {&x};
    run_result r;
    CHECK_OK(run_op(op_of(KILN_OP_IsNaN), NULL, 1, in, NULL, &r));
    const uint8_t want_nan[6] = {0, 1, 0, 0, 0, 0};
    CHECK(r.out.dtype == KILN_DTYPE_BOOL && memcmp(r.out.data, want_nan, 6) == 0);
    result_free(&r);
    const kiln_ew_isinf_attrs modes[3] = {{1, 1}, {1, 0}, {0, 1}};
    const uint8_t want_inf[3][6] = {{0, 0, 1, 1, 0, 0}, {0, 0, 1, 0, 0, 0}, {0, 0, 0, 1, 0, 0}};
    for (int m = 0; m < 3; m++) {
        CHECK_OK(run_op(op_of(KILN_OP_IsInf), &modes[m], 1, in, NULL, &r));
        CHECK(r.out.dtype == KILN_DTYPE_BOOL && memcmp(r.out.data, want_inf[m], 6) == 0);
        result_free(&r);
    }
    /* float64 and float16 */
    double xd[3] = {NAN, -INFINITY, 2};
    uint16_t xh[3] = {0x7e00, 0xfc00, 0x3c00};
    int64_t d3[1] = {3};
    kiln_tensor xdt = tensor(KILN_DTYPE_FLOAT64, 1, d3, xd), xht = tensor(KILN_DTYPE_FLOAT16, 1, d3, xh);
    const uint8_t w1[3] = {1, 0, 0}, w2[3] = {0, 1, 0};
    for (int k = 0; k < 2; k++) {
        const kiln_tensor *inx[1] = {k ? &xht : &xdt};
        CHECK_OK(run_op(op_of(KILN_OP_IsNaN), NULL, 1, inx, NULL, &r));
        CHECK(memcmp(r.out.data, w1, 3) == 0);
        result_free(&r);
        CHECK_OK(run_op(op_of(KILN_OP_IsInf), &modes[0], 1, inx, NULL, &r));
        CHECK(memcmp(r.out.data, w2, 3) == 0);
        result_free(&r);
    }
    uint8_t b[3] = {0, 1, 0};
    kiln_tensor xb = tensor(KILN_DTYPE_BOOL, 1, d3, b);
    const kiln_tensor *inb[1] = {&xb};
    CHECK_OK(run_op(op_of(KILN_OP_Not), NULL, 1, inb, NULL, &r));
    const uint8_t wn[3] = {1, 0, 1};
    CHECK(r.out.dtype == KILN_DTYPE_BOOL && memcmp(r.out.data, wn, 3) == 0);
    result_free(&r);
}

/* ---- Clip ---------------------------------------------------------------------- */

TEST(clip_types_and_optional_bounds) {
    float xs[7] = {-3, -1, 0, 0.5f, 2, 7, NAN};
    int64_t d[1] = {7};
    kiln_tensor x = tensor(KILN_DTYPE_FLOAT32, 1, d, xs);
    float lo = -1.5f, hi = 1.0f;
    kiln_tensor tlo = tensor(KILN_DTYPE_FLOAT32, 0, NULL, &lo), thi = tensor(KILN_DTYPE_FLOAT32, 0, NULL, &hi);
    run_result r;
    {
        const kiln_tensor *in[3] = {&x, &tlo, &thi};
        CHECK_OK(run_op(op_of(KILN_OP_Clip), NULL, 3, in, NULL, &r));
        const float *y = r.out.data;
        CHECK(y[0] == -1.5f && y[1] == -1 && y[3] == 0.5f && y[4] == 1 && y[5] == 1 && isnan(y[6]));
        result_free(&r);
    }
    {
        const kiln_tensor *in[3] = {&x, NULL, &thi}; /* max only */
        CHECK_OK(run_op(op_of(KILN_OP_Clip), NULL, 3, in, NULL, &r));
        const float *y = r.out.data;
        CHECK(y[0] == -3 && y[5] == 1);
        result_free(&r);
    }
    {
        const kiln_tensor *in[1] = {&x}; /* no bounds */
        CHECK_OK(run_op(op_of(KILN_OP_Clip), NULL, 1, in, NULL, &r));
        CHECK(memcmp(r.out.data, xs, 6 * sizeof(float)) == 0);
        result_free(&r);
    }
    {
        float lo2 = 2, hi2 = 1; /* min > max: everything becomes max */
        kiln_tensor a = tensor(KILN_DTYPE_FLOAT32, 0, NULL, &lo2), b = tensor(KILN_DTYPE_FLOAT32, 0, NULL, &hi2);
        const kiln_tensor *in[3] = {&x, &a, &b};
        CHECK_OK(run_op(op_of(KILN_OP_Clip), NULL, 3, in, NULL, &r));
        const float *y = r.out.data;
        CHECK(y[0] == 1 && y[3] == 1 && y[5] == 1);
        result_free(&r);
    }
    {
        int8_t xi[5] = {-128, -5, 0, 5, 127}, l = -3, h = 4;
        int64_t d5[1] = {5};
        kiln_tensor a = tensor(KILN_DTYPE_INT8, 1, d5, xi);
        kiln_tensor tl = tensor(KILN_DTYPE_INT8, 0, NULL, &l), th = tensor(KILN_DTYPE_INT8, 0, NULL, &h);
        const kiln_tensor *in[3] = {&a, &tl, &th};
        CHECK_OK(run_op(op_of(KILN_OP_Clip), NULL, 3, in, NULL, &r));
        const int8_t want[5] = {-3, -3, 0, 4, 4};
        CHECK(memcmp(r.out.data, want, 5) == 0);
        result_free(&r);
        const kiln_tensor *in2[2] = {&a, &tl};
        CHECK_OK(run_op(op_of(KILN_OP_Clip), NULL, 2, in2, NULL, &r));
        const int8_t want2[5] = {-3, -3, 0, 5, 127};
        CHECK(memcmp(r.out.data, want2, 5) == 0);
        result_free(&r);
    }
    {
        uint64_t xu[3] = {0, 5, UINT64_MAX}, h = 7;
        int64_t d3[1] = {3};
        kiln_tensor a = tensor(KILN_DTYPE_UINT64, 1, d3, xu), th = tensor(KILN_DTYPE_UINT64, 0, NULL, &h);
        const kiln_tensor *in[3] = {&a, NULL, &th};
        CHECK_OK(run_op(op_of(KILN_OP_Clip), NULL, 3, in, NULL, &r));
        const uint64_t *y = r.out.data;
        CHECK(y[0] == 0 && y[1] == 5 && y[2] == 7);
        result_free(&r);
    }
    {
        uint16_t xh[3] = {0xc400 /* -4 */, 0x3c00 /* 1 */, 0x4600 /* 6 */};
        double l = -2, h = 3;
        int64_t d3[1] = {3};
        kiln_tensor a = tensor(KILN_DTYPE_FLOAT16, 1, d3, xh);
        kiln_tensor tl = tensor(KILN_DTYPE_FLOAT64, 0, NULL, &l), th = tensor(KILN_DTYPE_FLOAT64, 0, NULL, &h);
        const kiln_tensor *in[3] = {&a, &tl, &th};
        CHECK_OK(run_op(op_of(KILN_OP_Clip), NULL, 3, in, NULL, &r));
        const uint16_t *y = r.out.data;
        CHECK(y[0] == 0xc000 && y[1] == 0x3c00 && y[2] == 0x4200);
        result_free(&r);
    }
    {
        float two[2] = {1, 2};
        int64_t d2[1] = {2};
        kiln_tensor bad = tensor(KILN_DTYPE_FLOAT32, 1, d2, two);
        const kiln_tensor *in[2] = {&x, &bad};
        CHECK_ERR(run_op(op_of(KILN_OP_Clip), NULL, 2, in, NULL, &r), KILN_ERR_MODEL, "scalar");
        result_free(&r);
    }
}

/* ---- binary ------------------------------------------------------------------- */

enum { RK_FLOAT, RK_INT };
/* reference of one binary op: floats in double, integers in int64 with the
 * semantics kiln implements (then wrapped to the type) */
static double ref_bin_f(int id, double a, double b, const kiln_ew_bin_attrs *at) {
    switch (id) {
    case KILN_OP_Add: return a + b;
    case KILN_OP_Sub: return a - b;
    case KILN_OP_Mul: return a * b;
    case KILN_OP_Div: return a / b;
    case KILN_OP_Pow: return pow(a, b);
    case KILN_OP_Mod: {
        double r = fmod(a, b);
        if (!at->fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
        return r;
    }
    case KILN_OP_Max: return (isnan(a) || isnan(b)) ? NAN : a > b ? a : b;
    case KILN_OP_Min: return (isnan(a) || isnan(b)) ? NAN : a < b ? a : b;
    case KILN_OP_PRelu: return a < 0 ? a * b : a;
    case KILN_OP_Equal: return a == b;
    case KILN_OP_Less: return a < b;
    case KILN_OP_LessOrEqual: return a <= b;
    case KILN_OP_Greater: return a > b;
    case KILN_OP_GreaterOrEqual: return a >= b;
    default: return NAN;
    }
}

static int64_t ref_bin_i(int id, int64_t a, int64_t b, const kiln_ew_bin_attrs *at, bool is_signed,
                         int bits) {
    switch (id) {
    case KILN_OP_Add: return (int64_t)((uint64_t)a + (uint64_t)b);
    case KILN_OP_Sub: return (int64_t)((uint64_t)a - (uint64_t)b);
    case KILN_OP_Mul: return (int64_t)((uint64_t)a * (uint64_t)b);
    case KILN_OP_Div:
        if (b == 0) return 0;
        if (!is_signed) return (int64_t)((uint64_t)a / (uint64_t)b);
        if (b == -1) return (int64_t)(0 - (uint64_t)a);
        return a / b; /* truncates toward zero */
    case KILN_OP_Mod: {
        if (b == 0) return 0;
        if (!is_signed) return (int64_t)((uint64_t)a % (uint64_t)b);
        if (b == -1) return 0;
        int64_t r = a % b; /* sign of the dividend */
        if (!at->fmod && r != 0 && ((r < 0) != (b < 0))) r += b; /* sign of the divisor */
        return r;
    }
    case KILN_OP_Max:
        return is_signed ? (a > b ? a : b) : ((uint64_t)a > (uint64_t)b ? a : b);
    case KILN_OP_Min:
        return is_signed ? (a < b ? a : b) : ((uint64_t)a < (uint64_t)b ? a : b);
    case KILN_OP_Pow: {
        if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
        uint64_t r = 1;
        for (int64_t i = 0; i < b; i++) r *= (uint64_t)a;
        return (int64_t)r;
    }
    case KILN_OP_PRelu: return a < 0 ? (int64_t)((uint64_t)a * (uint64_t)b) : a;
    case KILN_OP_Equal: return a == b;
    case KILN_OP_Less: return is_signed ? a < b : (uint64_t)a < (uint64_t)b;
    case KILN_OP_LessOrEqual: return is_signed ? a <= b : (uint64_t)a <= (uint64_t)b;
    case KILN_OP_Greater: return is_signed ? a > b : (uint64_t)a > (uint64_t)b;
    case KILN_OP_GreaterOrEqual: return is_signed ? a >= b : (uint64_t)a >= (uint64_t)b;
    case KILN_OP_And: return (a != 0) && (b != 0);
    case KILN_OP_Or: return (a != 0) || (b != 0);
    case KILN_OP_Xor: return (a != 0) != (b != 0);
    case KILN_OP_BitShift:
        if ((uint64_t)b >= (uint64_t)bits) return 0;
        return at->shift_right ? (int64_t)((uint64_t)a >> b) : (int64_t)((uint64_t)a << b);
    default: return 0;
    }
}

static bool is_compare(int id) {
    return id == KILN_OP_Equal || id == KILN_OP_Less || id == KILN_OP_LessOrEqual ||
           id == KILN_OP_Greater || id == KILN_OP_GreaterOrEqual || id == KILN_OP_And ||
           id == KILN_OP_Or || id == KILN_OP_Xor;
}

/* A (dims ra) op B (dims rb) on dtype dt vs the reference, with values in
 * [lo, hi]; B can be kept away from zero (divisors). Returns mismatches. */
static int check_binary(int id, const kiln_ew_bin_attrs *at, kiln_dtype dt, kiln_dtype dtb, int ra,
                        const int64_t *da, int rb, const int64_t *db, double lo, double hi,
                        bool b_nonzero, kiln_pool *pool) {
    const kiln_op_def *op = op_of(id);
    kiln_ew_bin_attrs zero_at = {0, 0, 0, 0};
    if (!at) at = &zero_at;
    kiln_tensor A, B;
    alloc_tensor(&A, dt, ra, da);
    alloc_tensor(&B, dtb, rb, db);
    uint64_t rng = 99 + (uint64_t)id * 7 + (uint64_t)dt;
    fill(&A, &rng, lo, hi);
    fill(&B, &rng, lo, hi);
    int64_t nb = kiln__tensor_numel(&B);
    if (b_nonzero)
        for (int64_t i = 0; i < nb; i++)
            if (kiln__load_f64(dtb, B.data, i) == 0) kiln__store_f64(dtb, B.data, i, 3);
    const kiln_tensor *in[2] = {&A, &B};
    run_result r;
    int bad = 0;
    if (run_op(op, at, 2, in, pool, &r) != KILN_OK) {
        fprintf(stderr, "  %s %s: %s\n", op->name, kiln_dtype_name(dt), kiln_last_error());
        result_free(&r);
        free(A.data);
        free(B.data);
        return 1;
    }
    CHECK(r.out.dtype == (is_compare(id) ? KILN_DTYPE_BOOL : dt));
    int64_t n = kiln__tensor_numel(&r.out);
    bool fl = kiln__dtype_is_float(dt) || kiln__dtype_is_float(dtb);
    int bits = (int)kiln_dtype_size(dt) * 8;
    for (int64_t o = 0; o < n; o++) {
        int64_t ia = bcast_index(o, r.out.rank, r.out.dims, ra, da);
        int64_t ib = bcast_index(o, r.out.rank, r.out.dims, rb, db);
        bool ok;
        double want, got = kiln__load_f64(r.out.dtype, r.out.data, o);
        if (fl) {
            double a = kiln__load_f64(dt, A.data, ia), b = kiln__load_f64(dtb, B.data, ib);
            want = ref_bin_f(id, a, b, at);
            if (kiln__dtype_is_int(r.out.dtype)) want = trunc(want); /* int ^ float */
            double tol = is_compare(id) ? 0 : tol_of(dt);
            ok = close_enough(got, want, tol, tol * 1e-3);
        } else {
            int64_t a = kiln__load_i64(dt, A.data, ia), b = kiln__load_i64(dtb, B.data, ib);
            int64_t w = ref_bin_i(id, a, b, at, kiln__dtype_is_signed(dt), bits), wrapped;
            kiln__store_i64(r.out.dtype, &wrapped, 0, w);
            w = kiln__load_i64(r.out.dtype, &wrapped, 0);
            int64_t g = kiln__load_i64(r.out.dtype, r.out.data, o);
            ok = g == w;
            want = (double)w;
            got = (double)g;
        }
        if (!ok) {
            if (bad < 3)
                fprintf(stderr, "  %s %s out[%lld] (a[%lld] b[%lld]): got %.9g want %.9g\n", op->name,
                        kiln_dtype_name(dt), (long long)o, (long long)ia, (long long)ib, got, want);
            bad++;
        }
    }
    result_free(&r);
    free(A.data);
    free(B.data);
    return bad;
}

TEST(binary_broadcast_odd_shapes_all_dtypes) {
    const int64_t da[4] = {5, 7, 1, 3}, db[3] = {7, 11, 1};
    const kiln_dtype num[] = {KILN_DTYPE_FLOAT32, KILN_DTYPE_FLOAT64, KILN_DTYPE_FLOAT16,
                              KILN_DTYPE_BFLOAT16, KILN_DTYPE_INT8, KILN_DTYPE_INT16,
                              KILN_DTYPE_INT32, KILN_DTYPE_INT64, KILN_DTYPE_UINT8,
                              KILN_DTYPE_UINT16, KILN_DTYPE_UINT32, KILN_DTYPE_UINT64};
    const int arith[] = {KILN_OP_Add, KILN_OP_Sub, KILN_OP_Mul, KILN_OP_Div, KILN_OP_Max, KILN_OP_Min,
                         KILN_OP_Equal, KILN_OP_Less, KILN_OP_LessOrEqual, KILN_OP_Greater,
                         KILN_OP_GreaterOrEqual, KILN_OP_Mod};
    for (size_t t = 0; t < sizeof num / sizeof num[0]; t++)
        for (size_t k = 0; k < sizeof arith / sizeof arith[0]; k++) {
            kiln_dtype dt = num[t];
            bool uns = kiln__dtype_is_int(dt) && !kiln__dtype_is_signed(dt);
            double lo = uns ? 0 : -9, hi = uns ? 250 : 9;
            if (dt == KILN_DTYPE_INT8 || dt == KILN_DTYPE_UINT8) hi = uns ? 200 : 9;
            bool div = arith[k] == KILN_OP_Div || arith[k] == KILN_OP_Mod;
            kiln_ew_bin_attrs at = {0, 0, kiln__dtype_is_float(dt) ? 1 : 0, 0};
            if (arith[k] == KILN_OP_Div && !kiln__dtype_is_float(dt)) div = false; /* x/0 -> 0 */
            CHECK(check_binary(arith[k], &at, dt, dt, 4, da, 3, db, lo, hi, div, NULL) == 0);
            /* and the other way round (A broadcast) */
            CHECK(check_binary(arith[k], &at, dt, dt, 3, db, 4, da, lo, hi, div, NULL) == 0);
        }
    /* PRelu: the slope broadcasts to X (one way only) */
    const int64_t dx[4] = {5, 7, 11, 3}, ds[3] = {7, 1, 3};
    for (size_t t = 0; t < sizeof num / sizeof num[0]; t++) {
        bool uns = kiln__dtype_is_int(num[t]) && !kiln__dtype_is_signed(num[t]);
        CHECK(check_binary(KILN_OP_PRelu, NULL, num[t], num[t], 4, dx, 3, ds, uns ? 0 : -9, 9, false,
                           NULL) == 0);
    }
    {
        kiln_tinfo x = {KILN_DTYPE_FLOAT32, 3, {7, 1, 3}, NULL}, s = {KILN_DTYPE_FLOAT32, 2, {5, 1}, NULL}, o;
        const kiln_tinfo *in[2] = {&x, &s};
        kiln_tinfo *out[1] = {&o};
        kiln_ew_bin_attrs at = {0, 0, 0, 0};
        kiln_infer_args ia = {.op = op_of(KILN_OP_PRelu), .attrs = &at, .node_name = "p", .n_in = 2,
                              .n_out = 1, .in = in, .out = out, .runtime = false};
        CHECK_ERR(ia.op->infer(&ia), KILN_ERR_MODEL, "does not broadcast to X");
    }
    /* integer division and modulo signs: all sign combinations, fmod 0 and 1 */
    const kiln_dtype sints[4] = {KILN_DTYPE_INT8, KILN_DTYPE_INT16, KILN_DTYPE_INT32, KILN_DTYPE_INT64};
    const int64_t d1[1] = {19}, d2[2] = {19, 1};
    for (int t = 0; t < 4; t++)
        for (int f = 0; f < 2; f++) {
            kiln_ew_bin_attrs at = {0, 0, f, 0};
            CHECK(check_binary(KILN_OP_Mod, &at, sints[t], sints[t], 2, d2, 1, d1, -9, 9, false, NULL) == 0);
            CHECK(check_binary(KILN_OP_Div, &at, sints[t], sints[t], 2, d2, 1, d1, -9, 9, false, NULL) == 0);
        }
    /* float Mod with fmod=0 (sign of divisor) */
    kiln_ew_bin_attrs pym = {0, 0, 0, 0};
    CHECK(check_binary(KILN_OP_Mod, &pym, KILN_DTYPE_FLOAT32, KILN_DTYPE_FLOAT32, 2, d2, 1, d1, -9, 9,
                       true, NULL) == 0);
}

TEST(binary_int_edge_values) {
    int32_t a[6] = {INT32_MIN, INT32_MIN, 7, -7, 7, -7};
    int32_t b[6] = {-1, 0, -2, 2, 0, -1};
    int64_t d[1] = {6};
    kiln_tensor A = tensor(KILN_DTYPE_INT32, 1, d, a), B = tensor(KILN_DTYPE_INT32, 1, d, b);
    const kiln_tensor *in[2] = {&A, &B};
    kiln_ew_bin_attrs at = {0, 0, 0, 0};
    run_result r;
    CHECK_OK(run_op(op_of(KILN_OP_Div), &at, 2, in, NULL, &r));
    const int32_t wd[6] = {INT32_MIN, 0, -3, -3, 0, 7};
    CHECK(memcmp(r.out.data, wd, sizeof wd) == 0);
    result_free(&r);
    CHECK_OK(run_op(op_of(KILN_OP_Mod), &at, 2, in, NULL, &r));
    const int32_t wm[6] = {0, 0, -1, 1, 0, 0};
    CHECK(memcmp(r.out.data, wm, sizeof wm) == 0);
    result_free(&r);
    at.fmod = 1;
    CHECK_OK(run_op(op_of(KILN_OP_Mod), &at, 2, in, NULL, &r));
    const int32_t wf[6] = {0, 0, 1, -1, 0, 0};
    CHECK(memcmp(r.out.data, wf, sizeof wf) == 0);
    result_free(&r);
    at.fmod = 0;
    CHECK_OK(run_op(op_of(KILN_OP_Add), &at, 2, in, NULL, &r)); /* wraps, no UB */
    CHECK(((int32_t *)r.out.data)[0] == INT32_MAX);
    result_free(&r);
}

TEST(binary_scalar_and_bias_broadcasts) {
    kiln_pool *pool = NULL;
    CHECK_OK(kiln__pool_create(3, &pool));
    /* scalar (rank 0) on either side */
    const int64_t d2[2] = {4, 5};
    CHECK(check_binary(KILN_OP_Sub, NULL, KILN_DTYPE_FLOAT32, KILN_DTYPE_FLOAT32, 2, d2, 0, NULL, -5,
                       5, false, NULL) == 0);
    CHECK(check_binary(KILN_OP_Sub, NULL, KILN_DTYPE_FLOAT32, KILN_DTYPE_FLOAT32, 0, NULL, 2, d2, -5,
                       5, false, NULL) == 0);
    CHECK(check_binary(KILN_OP_Mul, NULL, KILN_DTYPE_INT64, KILN_DTYPE_INT64, 0, NULL, 0, NULL, -5, 5,
                       false, NULL) == 0);
    /* NCHW + C11 bias and BSH + H, large enough to run on the pool, with
     * chunk boundaries falling inside rows */
    const int64_t x4[4] = {3, 17, 61, 67}, b3[3] = {17, 1, 1}, x3[3] = {5, 97, 389}, h1[1] = {389};
    CHECK(check_binary(KILN_OP_Add, NULL, KILN_DTYPE_FLOAT32, KILN_DTYPE_FLOAT32, 4, x4, 3, b3, -5, 5,
                       false, pool) == 0);
    CHECK(check_binary(KILN_OP_Mul, NULL, KILN_DTYPE_FLOAT32, KILN_DTYPE_FLOAT32, 3, x3, 1, h1, -5, 5,
                       false, pool) == 0);
    CHECK(check_binary(KILN_OP_Div, NULL, KILN_DTYPE_FLOAT16, KILN_DTYPE_FLOAT16, 3, x3, 1, h1, -5, 5,
                       true, pool) == 0);
    CHECK(check_binary(KILN_OP_Greater, NULL, KILN_DTYPE_FLOAT32, KILN_DTYPE_FLOAT32, 4, x4, 4, x4, -5,
                       5, false, pool) == 0);
    /* general strides: both sides broadcast in different dims */
    const int64_t p[3] = {13, 1, 29}, q[3] = {1, 31, 29};
    CHECK(check_binary(KILN_OP_Sub, NULL, KILN_DTYPE_FLOAT64, KILN_DTYPE_FLOAT64, 3, p, 3, q, -5, 5,
                       false, pool) == 0);
    /* empty output */
    const int64_t e0[2] = {0, 3}, e1[1] = {3};
    CHECK(check_binary(KILN_OP_Add, NULL, KILN_DTYPE_FLOAT32, KILN_DTYPE_FLOAT32, 2, e0, 1, e1, -5, 5,
                       false, NULL) == 0);
    kiln__pool_free(pool);
}

TEST(binary_logic_bitshift_pow) {
    const int64_t da[3] = {3, 1, 5}, db[2] = {4, 1};
    const int logic[3] = {KILN_OP_And, KILN_OP_Or, KILN_OP_Xor};
    for (int k = 0; k < 3; k++)
        CHECK(check_binary(logic[k], NULL, KILN_DTYPE_BOOL, KILN_DTYPE_BOOL, 3, da, 2, db, 0, 1, false,
                           NULL) == 0);
    CHECK(check_binary(KILN_OP_Equal, NULL, KILN_DTYPE_BOOL, KILN_DTYPE_BOOL, 3, da, 2, db, 0, 1, false,
                       NULL) == 0);
    const kiln_dtype uints[4] = {KILN_DTYPE_UINT8, KILN_DTYPE_UINT16, KILN_DTYPE_UINT32, KILN_DTYPE_UINT64};
    for (int t = 0; t < 4; t++)
        for (int dir = 0; dir < 2; dir++) {
            kiln_ew_bin_attrs at = {0, 0, 0, dir};
            /* shifts from 0 to 70: past the width give 0 */
            CHECK(check_binary(KILN_OP_BitShift, &at, uints[t], uints[t], 3, da, 2, db, 0, 70, false,
                               NULL) == 0);
        }
    /* Pow: float^float, x^2 fast path, int^int, float^int, int^float */
    CHECK(check_binary(KILN_OP_Pow, NULL, KILN_DTYPE_FLOAT32, KILN_DTYPE_FLOAT32, 3, da, 2, db, 0.1, 3,
                       false, NULL) == 0);
    CHECK(check_binary(KILN_OP_Pow, NULL, KILN_DTYPE_FLOAT64, KILN_DTYPE_FLOAT64, 3, da, 2, db, 0.1, 3,
                       false, NULL) == 0);
    CHECK(check_binary(KILN_OP_Pow, NULL, KILN_DTYPE_FLOAT16, KILN_DTYPE_FLOAT16, 3, da, 2, db, 0.1, 3,
                       false, NULL) == 0);
    CHECK(check_binary(KILN_OP_Pow, NULL, KILN_DTYPE_INT32, KILN_DTYPE_INT32, 3, da, 2, db, -4, 6, false,
                       NULL) == 0);
    CHECK(check_binary(KILN_OP_Pow, NULL, KILN_DTYPE_INT64, KILN_DTYPE_INT32, 3, da, 2, db, -3, 9, false,
                       NULL) == 0);
    CHECK(check_binary(KILN_OP_Pow, NULL, KILN_DTYPE_FLOAT32, KILN_DTYPE_INT64, 3, da, 2, db, -3, 4, false,
                       NULL) == 0);
    CHECK(check_binary(KILN_OP_Pow, NULL, KILN_DTYPE_INT32, KILN_DTYPE_FLOAT32, 3, da, 2, db, 0.5, 3,
                       false, NULL) == 0);
    float two = 2;
    float xs[5] = {-3, -0.5f, 0, 1.5f, 1e20f};
    int64_t d5[1] = {5};
    kiln_tensor A = tensor(KILN_DTYPE_FLOAT32, 1, d5, xs), B = tensor(KILN_DTYPE_FLOAT32, 0, NULL, &two);
    const kiln_tensor *in[2] = {&A, &B};
    kiln_ew_bin_attrs at = {0, 0, 0, 0};
    run_result r;
    CHECK_OK(run_op(op_of(KILN_OP_Pow), &at, 2, in, NULL, &r));
    const float *y = r.out.data;
    CHECK(y[0] == 9 && y[1] == 0.25f && y[2] == 0 && y[3] == 2.25f && isinf(y[4]));
    result_free(&r);
}

TEST(binary_nan_max_min) {
    float a[4] = {NAN, 1, NAN, 2}, b[4] = {1, NAN, NAN, 3};
    int64_t d[1] = {4};
    kiln_tensor A = tensor(KILN_DTYPE_FLOAT32, 1, d, a), B = tensor(KILN_DTYPE_FLOAT32, 1, d, b);
    for (int k = 0; k < 2; k++) {
        const kiln_tensor *in[2] = {&A, &B};
        run_result r;
        CHECK_OK(run_op(op_of(k ? KILN_OP_Min : KILN_OP_Max), NULL, 2, in, NULL, &r));
        const float *y = r.out.data;
        CHECK(isnan(y[0]) && isnan(y[1]) && isnan(y[2]) && y[3] == (k ? 2 : 3));
        result_free(&r);
    }
    /* NaN in the third input of a variadic Max, float64 */
    double x1[2] = {1, 5}, x2[2] = {4, 2}, x3[1] = {NAN};
    int64_t d2[1] = {2}, d1[1] = {1};
    kiln_tensor t1 = tensor(KILN_DTYPE_FLOAT64, 1, d2, x1), t2 = tensor(KILN_DTYPE_FLOAT64, 1, d2, x2),
                t3 = tensor(KILN_DTYPE_FLOAT64, 1, d1, x3);
    const kiln_tensor *in[3] = {&t1, &t2, &t3};
    run_result r;
    CHECK_OK(run_op(op_of(KILN_OP_Max), NULL, 3, in, NULL, &r));
    CHECK(isnan(((double *)r.out.data)[0]) && isnan(((double *)r.out.data)[1]));
    result_free(&r);
    CHECK_OK(run_op(op_of(KILN_OP_Max), NULL, 2, in, NULL, &r));
    CHECK(((double *)r.out.data)[0] == 4 && ((double *)r.out.data)[1] == 5);
    result_free(&r);
}

TEST(variadic_broadcast) {
    const int64_t s1[2] = {3, 1}, s2[2] = {1, 4}, s3[1] = {4};
    const int ids[4] = {KILN_OP_Max, KILN_OP_Min, KILN_OP_Sum, KILN_OP_Mean};
    const kiln_dtype types[4] = {KILN_DTYPE_FLOAT32, KILN_DTYPE_FLOAT64, KILN_DTYPE_FLOAT16, KILN_DTYPE_BFLOAT16};
    for (int t = 0; t < 4; t++)
        for (int k = 0; k < 4; k++) {
            kiln_tensor x[3];
            uint64_t rng = 5 + (uint64_t)k;
            alloc_tensor(&x[0], types[t], 2, s1);
            alloc_tensor(&x[1], types[t], 2, s2);
            alloc_tensor(&x[2], types[t], 1, s3);
            for (int i = 0; i < 3; i++) fill(&x[i], &rng, -4, 4);
            const kiln_tensor *in[3] = {&x[0], &x[1], &x[2]};
            run_result r;
            CHECK_OK(run_op(op_of(ids[k]), NULL, 3, in, NULL, &r));
            CHECK(r.out.rank == 2 && r.out.dims[0] == 3 && r.out.dims[1] == 4);
            for (int o = 0; o < 12 && r.st == KILN_OK; o++) {
                double v[3] = {kiln__load_f64(types[t], x[0].data, o / 4),
                               kiln__load_f64(types[t], x[1].data, o % 4),
                               kiln__load_f64(types[t], x[2].data, o % 4)};
                double want = v[0];
                for (int i = 1; i < 3; i++)
                    want = ids[k] == KILN_OP_Max ? fmax(want, v[i])
                           : ids[k] == KILN_OP_Min ? fmin(want, v[i]) : want + v[i];
                if (ids[k] == KILN_OP_Mean) want /= 3;
                double got = kiln__load_f64(types[t], r.out.data, o);
                if (!close_enough(got, want, 2 * tol_of(types[t]), tol_of(types[t]))) {
                    fprintf(stderr, "  %s %s [%d]: got %g want %g\n", op_of(ids[k])->name,
                            kiln_dtype_name(types[t]), o, got, want);
                    test_failed_checks++;
                    break;
                }
            }
            result_free(&r);
            /* one input: a copy */
            const kiln_tensor *one[1] = {&x[1]};
            CHECK_OK(run_op(op_of(ids[k]), NULL, 1, one, NULL, &r));
            CHECK(memcmp(r.out.data, x[1].data, 4 * kiln_dtype_size(types[t])) == 0);
            result_free(&r);
            for (int i = 0; i < 3; i++) free(x[i].data);
        }
    /* Max on integers (opset 12+) */
    const int64_t sa[2] = {2, 3};
    CHECK(check_binary(KILN_OP_Max, NULL, KILN_DTYPE_UINT64, KILN_DTYPE_UINT64, 2, sa, 1, s1, 0, 1000,
                       false, NULL) == 0);
    /* Sum on int32 is not in the spec */
    kiln_tensor xi;
    alloc_tensor(&xi, KILN_DTYPE_INT32, 2, sa);
    const kiln_tensor *in[2] = {&xi, &xi};
    run_result r;
    CHECK_ERR(run_op(op_of(KILN_OP_Sum), NULL, 2, in, NULL, &r), KILN_ERR_UNSUPPORTED, "int32");
    result_free(&r);
    free(xi.data);
}

TEST(where_three_way_broadcast) {
    const int64_t dc[3] = {2, 1, 5}, dx[2] = {3, 1}, dy[1] = {5};
    const kiln_dtype types[4] = {KILN_DTYPE_FLOAT32, KILN_DTYPE_INT64, KILN_DTYPE_FLOAT16, KILN_DTYPE_BOOL};
    for (int t = 0; t < 4; t++) {
        kiln_tensor c, x, y;
        uint64_t rng = 77;
        alloc_tensor(&c, KILN_DTYPE_BOOL, 3, dc);
        alloc_tensor(&x, types[t], 2, dx);
        alloc_tensor(&y, types[t], 1, dy);
        fill(&c, &rng, 0, 1);
        fill(&x, &rng, -9, 9);
        fill(&y, &rng, -9, 9);
        const kiln_tensor *in[3] = {&c, &x, &y};
        run_result r;
        CHECK_OK(run_op(op_of(KILN_OP_Where), NULL, 3, in, NULL, &r));
        CHECK(r.out.dtype == types[t] && r.out.rank == 3 && r.out.dims[0] == 2 && r.out.dims[1] == 3 &&
              r.out.dims[2] == 5);
        for (int64_t o = 0; o < 30 && r.st == KILN_OK; o++) {
            int64_t ic = bcast_index(o, 3, r.out.dims, 3, dc), ix = bcast_index(o, 3, r.out.dims, 2, dx),
                    iy = bcast_index(o, 3, r.out.dims, 1, dy);
            double want = ((uint8_t *)c.data)[ic] ? kiln__load_f64(types[t], x.data, ix)
                                                  : kiln__load_f64(types[t], y.data, iy);
            if (kiln__load_f64(types[t], r.out.data, o) != want) {
                test_failed_checks++;
                break;
            }
        }
        result_free(&r);
        /* the condition must be bool */
        const kiln_tensor *bad[3] = {&x, &x, &x};
        if (types[t] != KILN_DTYPE_BOOL)
            CHECK_ERR(run_op(op_of(KILN_OP_Where), NULL, 3, bad, NULL, &r), KILN_ERR_UNSUPPORTED, "input 0");
        result_free(&r);
        free(c.data);
        free(x.data);
        free(y.data);
    }
}

TEST(legacy_broadcast_axis) {
    /* opset < 7: B [3,4] aligned at axis 1 of A [2,3,4,5] */
    const int64_t da[4] = {2, 3, 4, 5}, db[2] = {3, 4};
    kiln_tensor A, B;
    uint64_t rng = 3;
    alloc_tensor(&A, KILN_DTYPE_FLOAT32, 4, da);
    alloc_tensor(&B, KILN_DTYPE_FLOAT32, 2, db);
    fill(&A, &rng, -1, 1);
    fill(&B, &rng, -1, 1);
    kiln_ew_bin_attrs at = {EW_LEGACY_AXIS, 1, 0, 0};
    const kiln_tensor *in[2] = {&A, &B};
    run_result r;
    CHECK_OK(run_op(op_of(KILN_OP_Add), &at, 2, in, NULL, &r));
    CHECK(r.out.rank == 4 && r.out.dims[3] == 5);
    const float *a = A.data, *b = B.data, *y = r.out.data;
    for (int64_t i = 0; i < 120 && r.st == KILN_OK; i++) {
        int64_t j = (i / 5) % 12;
        if (y[i] != a[i] + b[j]) {
            test_failed_checks++;
            break;
        }
    }
    result_free(&r);
    at.legacy_axis = -3; /* negative axis counts from the end of A */
    CHECK_OK(run_op(op_of(KILN_OP_Add), &at, 2, in, NULL, &r));
    result_free(&r);
    at.legacy_axis = 3; /* does not fit */
    CHECK_ERR(run_op(op_of(KILN_OP_Add), &at, 2, in, NULL, &r), KILN_ERR_MODEL, "legacy broadcast");
    result_free(&r);
    /* PRelu-6: per-channel slope along axis 1 */
    const int64_t ds[1] = {3}, dx[3] = {2, 3, 4};
    kiln_tensor X, S;
    alloc_tensor(&X, KILN_DTYPE_FLOAT32, 3, dx);
    alloc_tensor(&S, KILN_DTYPE_FLOAT32, 1, ds);
    fill(&X, &rng, -1, 1);
    fill(&S, &rng, 0, 1);
    kiln_ew_bin_attrs pat = {EW_LEGACY_PRELU, 0, 0, 0};
    const kiln_tensor *pin[2] = {&X, &S};
    CHECK_OK(run_op(op_of(KILN_OP_PRelu), &pat, 2, pin, NULL, &r));
    const float *x = X.data, *s = S.data;
    y = r.out.data;
    for (int64_t i = 0; i < 24 && r.st == KILN_OK; i++) {
        float want = x[i] < 0 ? x[i] * s[(i / 4) % 3] : x[i];
        if (y[i] != want) {
            test_failed_checks++;
            break;
        }
    }
    result_free(&r);
    free(A.data);
    free(B.data);
    free(X.data);
    free(S.data);
}

TEST(infer_broadcast_errors_and_symbols) {
    const kiln_op_def *add = op_of(KILN_OP_Add);
    kiln_ew_bin_attrs at = {0, 0, 0, 0};
    kiln_tinfo a = {KILN_DTYPE_FLOAT32, 2, {2, 3}, NULL}, b = {KILN_DTYPE_FLOAT32, 1, {4}, NULL}, o;
    const kiln_tinfo *in[2] = {&a, &b};
    kiln_tinfo *out[1] = {&o};
    kiln_infer_args ia = {.op = add, .attrs = &at, .node_name = "bad_add", .n_in = 2, .n_out = 1,
                          .in = in, .out = out, .runtime = false};
    CHECK_ERR(add->infer(&ia), KILN_ERR_MODEL, "cannot be broadcast");
    CHECK(strstr(kiln_last_error(), "bad_add") != NULL);
    /* symbolic dims: sym vs 1 keeps the symbol, unknown rank gives rank -1 */
    kiln_tinfo s = {KILN_DTYPE_FLOAT32, 3, {KILN_DIM_SYM(0), 1, 8}, NULL};
    kiln_tinfo t = {KILN_DTYPE_FLOAT32, 2, {5, 1}, NULL};
    in[0] = &s;
    in[1] = &t;
    CHECK_OK(add->infer(&ia));
    CHECK(o.rank == 3 && o.dims[0] == KILN_DIM_SYM(0) && o.dims[1] == 5 && o.dims[2] == 8);
    kiln_tinfo u = {KILN_DTYPE_FLOAT32, -1, {0}, NULL};
    in[1] = &u;
    CHECK_OK(add->infer(&ia));
    CHECK(o.rank == -1 && o.dtype == KILN_DTYPE_FLOAT32);
    /* comparisons give bool; mixed dtypes are rejected */
    kiln_tinfo c = {KILN_DTYPE_INT32, 1, {8}, NULL};
    in[1] = &c;
    CHECK_ERR(add->infer(&ia), KILN_ERR_MODEL, "different dtypes");
    ia.op = op_of(KILN_OP_Less);
    in[0] = &c;
    CHECK_OK(ia.op->infer(&ia));
    CHECK(o.dtype == KILN_DTYPE_BOOL && o.rank == 1 && o.dims[0] == 8);
    /* Where on three incompatible shapes */
    kiln_tinfo cond = {KILN_DTYPE_BOOL, 1, {3}, NULL}, x = {KILN_DTYPE_FLOAT32, 1, {4}, NULL};
    const kiln_tinfo *w[3] = {&cond, &x, &x};
    kiln_infer_args iw = {.op = op_of(KILN_OP_Where), .attrs = NULL, .node_name = "w", .n_in = 3,
                          .n_out = 1, .in = w, .out = out, .runtime = false};
    CHECK_ERR(iw.op->infer(&iw), KILN_ERR_MODEL, "cannot be broadcast");
}

/* ---- Cast --------------------------------------------------------------------- */

TEST(cast_all_pairs) {
    const kiln_dtype all[] = {KILN_DTYPE_FLOAT32, KILN_DTYPE_FLOAT64, KILN_DTYPE_FLOAT16,
                              KILN_DTYPE_BFLOAT16, KILN_DTYPE_INT8, KILN_DTYPE_INT16,
                              KILN_DTYPE_INT32, KILN_DTYPE_INT64, KILN_DTYPE_UINT8,
                              KILN_DTYPE_UINT16, KILN_DTYPE_UINT32, KILN_DTYPE_UINT64,
                              KILN_DTYPE_BOOL};
    const size_t nt = sizeof all / sizeof all[0];
    /* values every type can hold exactly: small non-negative integers and
     * (for float sources) fractions that truncate */
    const double vals[8] = {0, 1, 2, 5, 100, 0.75, 7.5, 126.25};
    int64_t d[1] = {8};
    for (size_t s = 0; s < nt; s++)
        for (size_t t = 0; t < nt; t++) {
            kiln_tensor x;
            alloc_tensor(&x, all[s], 1, d);
            for (int i = 0; i < 8; i++) kiln__store_f64(all[s], x.data, i, vals[i]);
            kiln_ew_cast_attrs at = {(int32_t)all[t]};
            const kiln_tensor *in[1] = {&x};
            run_result r;
            CHECK_OK(run_op(op_of(KILN_OP_Cast), &at, 1, in, NULL, &r));
            CHECK(r.out.dtype == all[t]);
            for (int i = 0; i < 8 && r.st == KILN_OK; i++) {
                double src = kiln__load_f64(all[s], x.data, i);
                double want = all[t] == KILN_DTYPE_BOOL ? (src != 0)
                              : kiln__dtype_is_int(all[t]) ? trunc(src)
                              : src;
                if (all[t] == KILN_DTYPE_BFLOAT16 && src == 126.25) want = 126; /* 8 bits */
                double got = kiln__load_f64(all[t], r.out.data, i);
                if (got != want) {
                    fprintf(stderr, "  cast %s -> %s: %g gave %g, want %g\n", kiln_dtype_name(all[s]),
                            kiln_dtype_name(all[t]), src, got, want);
                    test_failed_checks++;
                    break;
                }
            }
            result_free(&r);
            /* CastLike takes the dtype of its second input */
            kiln_tensor like = tensor(all[t], 1, d, x.data);
            const kiln_tensor *in2[2] = {&x, &like};
            CHECK_OK(run_op(op_of(KILN_OP_CastLike), NULL, 2, in2, NULL, &r));
            CHECK(r.out.dtype == all[t]);
            result_free(&r);
            free(x.data);
        }
}

TEST(cast_rounding_and_negatives) {
    /* float -> int truncates toward zero; negative to signed keeps the sign */
    float xf[6] = {-2.9f, -0.5f, 0.5f, 2.9f, -128.0f, 3e9f};
    int64_t d6[1] = {6};
    kiln_tensor x = tensor(KILN_DTYPE_FLOAT32, 1, d6, xf);
    const kiln_tensor *in[1] = {&x};
    kiln_ew_cast_attrs at = {KILN_DTYPE_INT32};
    run_result r;
    CHECK_OK(run_op(op_of(KILN_OP_Cast), &at, 1, in, NULL, &r));
    const int32_t *yi = r.out.data;
    CHECK(yi[0] == -2 && yi[1] == 0 && yi[2] == 0 && yi[3] == 2 && yi[4] == -128);
    result_free(&r);
    at.to = KILN_DTYPE_INT64;
    CHECK_OK(run_op(op_of(KILN_OP_Cast), &at, 1, in, NULL, &r));
    CHECK(((int64_t *)r.out.data)[5] == 3000000000ll);
    result_free(&r);
    at.to = KILN_DTYPE_BOOL;
    CHECK_OK(run_op(op_of(KILN_OP_Cast), &at, 1, in, NULL, &r));
    CHECK(((uint8_t *)r.out.data)[1] == 1);
    result_free(&r);
    /* double -> float16 rounds once: 1 + 2^-11 + 2^-30 is just above the
     * half-way point between two halves, so it rounds up (a double rounding
     * through float would tie to even and round down) */
    double xd[4] = {1.0 + ldexp(1, -11) + ldexp(1, -30), 1.0 + ldexp(1, -11), 65520.0, NAN};
    int64_t d4[1] = {4};
    kiln_tensor xdt = tensor(KILN_DTYPE_FLOAT64, 1, d4, xd);
    const kiln_tensor *ind[1] = {&xdt};
    at.to = KILN_DTYPE_FLOAT16;
    CHECK_OK(run_op(op_of(KILN_OP_Cast), &at, 1, ind, NULL, &r));
    const uint16_t *h = r.out.data;
    CHECK(h[0] == 0x3c01 && h[1] == 0x3c00 && h[2] == 0x7c00 && (h[3] & 0x7c00) == 0x7c00 && (h[3] & 0x3ff));
    result_free(&r);
    /* float32 -> bfloat16 rounds to nearest even */
    float xb[3] = {1.0f + 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -3.0f};
    int64_t d3[1] = {3};
    kiln_tensor xbt = tensor(KILN_DTYPE_FLOAT32, 1, d3, xb);
    const kiln_tensor *inb[1] = {&xbt};
    at.to = KILN_DTYPE_BFLOAT16;
    CHECK_OK(run_op(op_of(KILN_OP_Cast), &at, 1, inb, NULL, &r));
    h = r.out.data;
    CHECK(h[0] == 0x3f80 && h[1] == 0x3f81 && h[2] == 0xc040);
    result_free(&r);
    /* string is not supported */
    at.to = KILN_DTYPE_STRING;
    CHECK_ERR(run_op(op_of(KILN_OP_Cast), &at, 1, in, NULL, &r), KILN_ERR_UNSUPPORTED, "string");
    result_free(&r);
}

int main(void) {
    RUN(unary_float_types);
    RUN(unary_special_values);
    RUN(unary_parallel_large);
    RUN(unary_f32_fast_math_accuracy);
    RUN(unary_integer_types);
    RUN(isnan_isinf_not);
    RUN(clip_types_and_optional_bounds);
    RUN(binary_broadcast_odd_shapes_all_dtypes);
    RUN(binary_int_edge_values);
    RUN(binary_scalar_and_bias_broadcasts);
    RUN(binary_logic_bitshift_pow);
    RUN(binary_nan_max_min);
    RUN(variadic_broadcast);
    RUN(where_three_way_broadcast);
    RUN(legacy_broadcast_axis);
    RUN(infer_broadcast_errors_and_symbols);
    RUN(cast_all_pairs);
    RUN(cast_rounding_and_negatives);
    return test_summary();
}
