/* test_cuda_ops.c -- the CUDA backend against the CPU kernels.
 *
 * Every case builds host inputs (odd shapes, broadcasting, NaN/inf where
 * the op's semantics define them), infers the output shapes, runs the CPU
 * kernel (op->cpu) and the CUDA backend (through its kiln_backend_i: alloc,
 * to_device, run, sync, to_host) on the same inputs, and compares:
 *   floating outputs: NaN/inf positions must agree, and the normalized mean
 *     squared error sum((gpu-cpu)^2) / sum(cpu^2) must stay under a limit
 *     (1e-7 for fp32 by default, looser for fp16/bf16);
 *   integer/bool outputs: exact.
 * Device outputs are allocated with GUARD bytes of a pattern on both sides,
 * which must survive the kernel (out-of-bounds writes). Integer parameter
 * inputs that kiln keeps on the host (Slice starts, Reduce axes, ...) are
 * passed as host pointers and, in a second run, as device pointers.
 * Each case also checks that supports() accepts the node.
 *
 * Without a GPU the program prints "no CUDA device: skipping", checks that
 * the backend fails cleanly, and reports 0 passed, 0 failed, N skipped. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_internal.h"
#include "ops/elementwise_impl.h"
#include "ops/fused_norm.h"
#include "ops/fused_se.h"
#include "ops/tensor_internal.h"
#include "runtime/engine.h"
#include "test.h"

#define GUARD 256
#define GUARD_BYTE 0xA5
#define MAXIO 9 /* QLinearConv has 9 inputs */

static const kiln_backend_i *be;
static void *st;
static bool covered[KILN_OP_ID_LIMIT];
static int n_cases;
/* node state the GPU runs of the cases use (NULL: none, the kernels keep nothing) */
static kiln_node_state *case_ns;

/* ---- host tensors (an arena freed after each test) ------------------------------ */

#define ARENA 4096
static kiln_tensor arena_t[ARENA];
static void *arena_m[ARENA];
static int arena_n;

static void arena_reset(void) {
    for (int i = 0; i < arena_n; i++) free(arena_m[i]);
    arena_n = 0;
}

static size_t tbytes(const kiln_tensor *t) {
    return (size_t)kiln__tensor_numel(t) * kiln_dtype_size(t->dtype);
}

static kiln_tensor *tnew(kiln_dtype dt, int rank, const int64_t *dims) {
    if (arena_n >= ARENA) {
        fprintf(stderr, "test arena full\n");
        exit(2);
    }
    kiln_tensor *t = &arena_t[arena_n];
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
    arena_m[arena_n] = calloc(tbytes(t) + 16, 1);
    t->data = arena_m[arena_n++];
    return t;
}

/* xorshift64* */
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnext(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717ull;
}
static double runif(double lo, double hi) {
    return lo + (hi - lo) * ((double)(rnext() >> 11) / 9007199254740992.0);
}

/* random values in [lo, hi] (integers: whole numbers in that range; bool: 0/1) */
static kiln_tensor *trand(kiln_dtype dt, double lo, double hi, int rank, const int64_t *dims) {
    kiln_tensor *t = tnew(dt, rank, dims);
    int64_t n = kiln__tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        if (dt == KILN_DTYPE_BOOL) kiln__store_i64(dt, t->data, i, (int64_t)(rnext() & 1));
        else if (kiln__dtype_is_int(dt)) kiln__store_i64(dt, t->data, i, (int64_t)floor(runif(lo, hi + 1)));
        else kiln__store_f64(dt, t->data, i, runif(lo, hi));
    }
    return t;
}

/* random bytes (integers over their full range) */
static kiln_tensor *tbits(kiln_dtype dt, int rank, const int64_t *dims) {
    kiln_tensor *t = tnew(dt, rank, dims);
    unsigned char *p = t->data;
    for (size_t i = 0; i < tbytes(t); i++) p[i] = (unsigned char)rnext();
    if (dt == KILN_DTYPE_BOOL)
        for (size_t i = 0; i < tbytes(t); i++) p[i] &= 1;
    return t;
}

static kiln_tensor *tvals(kiln_dtype dt, int n, const double *v) {
    int64_t d[1] = {n};
    kiln_tensor *t = tnew(dt, 1, d);
    for (int i = 0; i < n; i++) kiln__store_f64(dt, t->data, i, v[i]);
    return t;
}

static kiln_tensor *tscalar(kiln_dtype dt, double v) {
    kiln_tensor *t = tnew(dt, 0, NULL);
    kiln__store_f64(dt, t->data, 0, v);
    return t;
}

/* NaN, +-inf, -0 and 0 at a few places of a floating tensor */
static kiln_tensor *specials(kiln_tensor *t) {
    static const double sv[5] = {NAN, INFINITY, -INFINITY, -0.0, 0.0};
    int64_t n = kiln__tensor_numel(t);
    for (int k = 0; k < 5 && k < n; k++) kiln__store_f64(t->dtype, t->data, (k * 7919) % n, sv[k]);
    return t;
}

#define S(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}
#define V(...) (int)(sizeof((double[]){__VA_ARGS__}) / sizeof(double)), (double[]){__VA_ARGS__}

static const kiln_dtype F32 = KILN_DTYPE_FLOAT32, F16 = KILN_DTYPE_FLOAT16,
                        BF16 = KILN_DTYPE_BFLOAT16, F64 = KILN_DTYPE_FLOAT64,
                        I8 = KILN_DTYPE_INT8, U8 = KILN_DTYPE_UINT8, I32 = KILN_DTYPE_INT32,
                        I64 = KILN_DTYPE_INT64, BOOL = KILN_DTYPE_BOOL;

/* ---- comparing ------------------------------------------------------------------------- */

static double default_tol(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT16: return 1e-5;
    case KILN_DTYPE_BFLOAT16: return 1e-4;
    case KILN_DTYPE_FLOAT64: return 1e-14;
    default: return 1e-7;
    }
}

static bool compare(const char *node, int out, kiln_dtype t, const void *cpu, const void *gpu,
                    int64_t n, double tol) {
    if (kiln__dtype_is_float(t)) {
        double num = 0, den = 0;
        int64_t bad = -1;
        for (int64_t i = 0; i < n; i++) {
            double c = kiln__load_f64(t, cpu, i), g = kiln__load_f64(t, gpu, i);
            if (isnan(c) || isnan(g) || isinf(c) || isinf(g)) {
                bool same = (isnan(c) && isnan(g)) || c == g;
                if (!same && bad < 0) bad = i;
                continue;
            }
            num += (g - c) * (g - c);
            den += c * c;
        }
        double nmse = den > 0 ? num / den : num;
        if (bad >= 0 || nmse > (tol > 0 ? tol : default_tol(t))) {
            if (bad < 0)
                for (int64_t i = 0; i < n && bad < 0; i++)
                    if (kiln__load_f64(t, cpu, i) != kiln__load_f64(t, gpu, i)) bad = i;
            fprintf(stderr, "  %s: output %d (%s, %lld elements): NMSE %.3g (limit %.3g)%s", node, out,
                    kiln_dtype_name(t), (long long)n, nmse, tol > 0 ? tol : default_tol(t),
                    bad >= 0 ? "" : "\n");
            if (bad >= 0)
                fprintf(stderr, "; first difference at %lld: cpu %.9g gpu %.9g\n", (long long)bad,
                        kiln__load_f64(t, cpu, bad), kiln__load_f64(t, gpu, bad));
            if (n <= 32) { /* small outputs in full: where the NaN, inf and finite values went */
                fprintf(stderr, "    cpu:");
                for (int64_t i = 0; i < n; i++) fprintf(stderr, " %.5g", kiln__load_f64(t, cpu, i));
                fprintf(stderr, "\n    gpu:");
                for (int64_t i = 0; i < n; i++) fprintf(stderr, " %.5g", kiln__load_f64(t, gpu, i));
                fprintf(stderr, "\n");
            }
            return false;
        }
        return true;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t c = kiln__load_i64(t, cpu, i), g = kiln__load_i64(t, gpu, i);
        if (t == KILN_DTYPE_BOOL) {
            c = c != 0;
            g = g != 0;
        }
        if (c != g) {
            fprintf(stderr, "  %s: output %d (%s): element %lld: cpu %lld gpu %lld\n", node, out,
                    kiln_dtype_name(t), (long long)i, (long long)c, (long long)g);
            return false;
        }
    }
    return true;
}

/* ---- running one case ------------------------------------------------------------------- */

#define FAILF(...)                              \
    do {                                        \
        fprintf(stderr, "  " __VA_ARGS__);      \
        fprintf(stderr, "\n");                  \
        test_failed_checks++;                   \
    } while (0)

/* infer + graph for supports(); returns false (after reporting) on failure */
static bool infer_case(const char *node, const kiln_op_def *op, const void *attrs, int n_in,
                       kiln_tensor *const *in, int n_out, kiln_tinfo *ti, kiln_tinfo *to,
                       bool *supported) {
    const kiln_tinfo *tip[MAXIO];
    kiln_tinfo *top[MAXIO];
    for (int i = 0; i < n_in; i++) {
        tip[i] = NULL;
        memset(&ti[i], 0, sizeof ti[i]);
        if (!in[i]) continue;
        ti[i].dtype = in[i]->dtype;
        ti[i].rank = in[i]->rank;
        memcpy(ti[i].dims, in[i]->dims, sizeof ti[i].dims);
        ti[i].data = in[i]->data;
        tip[i] = &ti[i];
    }
    for (int j = 0; j < n_out; j++) {
        memset(&to[j], 0, sizeof to[j]);
        top[j] = &to[j];
    }
    kiln_infer_args ia = {.op = op, .attrs = attrs, .node_name = node, .n_in = n_in,
                          .n_out = n_out, .in = tip, .out = top, .runtime = true};
    kiln_status s = op->infer(&ia);
    if (s != KILN_OK) {
        FAILF("%s: infer failed (test bug?): %s", node, kiln_last_error());
        return false;
    }
    /* a one-node graph for supports(): build-time view (no data) */
    kiln_value vals[2 * MAXIO];
    int vin[MAXIO], vout[MAXIO], nv = 0;
    memset(vals, 0, sizeof vals);
    for (int i = 0; i < n_in; i++) {
        vin[i] = -1;
        if (!in[i]) continue;
        vals[nv].name = (char *)"in";
        vals[nv].info = ti[i];
        vals[nv].info.data = NULL;
        vin[i] = nv++;
    }
    for (int j = 0; j < n_out; j++) {
        vals[nv].name = (char *)"out";
        vals[nv].info = to[j];
        vout[j] = nv++;
    }
    kiln_node nd;
    memset(&nd, 0, sizeof nd);
    nd.op_id = kiln__op_id_of(op);
    nd.op = op;
    nd.name = (char *)node;
    nd.n_in = n_in;
    nd.in = vin;
    nd.n_out = n_out;
    nd.out = vout;
    nd.attrs = (void *)attrs;
    kiln_graph g;
    memset(&g, 0, sizeof g);
    g.values = vals;
    g.n_values = nv;
    g.nodes = &nd;
    g.n_nodes = 1;
    *supported = kiln__backend_supports(be, &g, &nd);
    return true;
}

/* The tactics the backend lists (into ids, at most cap) for a one-output
 * layer `node` of op op_id with attributes at, its shapes inferred with
 * ref's (a layout or a tactic changes no shape); -1 where inference fails
 * (infer_case reports it). */
static int list_tactics(const char *node, int op_id, const void *ref, const void *at, int n_in,
                        kiln_tensor *const *in, int32_t *ids, int cap) {
    const kiln_op_def *op = kiln__op_by_id(op_id);
    kiln_tinfo ti[MAXIO], yo;
    const kiln_tinfo *tip[MAXIO];
    bool sup = false;
    if (!infer_case(node, op, ref, n_in, in, 1, ti, &yo, &sup)) return -1;
    for (int i = 0; i < n_in; i++) tip[i] = in[i] ? &ti[i] : NULL;
    kiln_tinfo *top[1] = {&yo};
    kiln_infer_args ia = {.op = op, .attrs = at, .node_name = node, .n_in = n_in, .n_out = 1, .in = tip, .out = top};
    return kiln__backend_tactics(be, st, &ia, false, ids, cap);
}

/* Runs op's CPU kernel (with its workspace) on in -> out; ti/to: their infos. */
static kiln_status cpu_kernel_run(const kiln_op_def *op, const void *attrs, const char *node, int n_in,
                                  const kiln_tensor *const *in, const kiln_tinfo *const *tip, int n_out,
                                  kiln_tensor *const *out, kiln_tinfo *const *top) {
    kiln_infer_args ia = {.op = op, .attrs = attrs, .node_name = node, .n_in = n_in,
                          .n_out = n_out, .in = (const kiln_tinfo **)tip, .out = (kiln_tinfo **)top,
                          .runtime = true};
    size_t wsz = op->workspace ? op->workspace(&ia) : 0;
    void *ws = wsz ? aligned_alloc(64, (wsz + 63) & ~(size_t)63) : NULL;
    kiln_kernel_args ka = {.op = op, .attrs = attrs, .node_name = node, .n_in = n_in,
                           .n_out = n_out, .in = in, .out = out, .workspace = ws, .workspace_size = wsz};
    kiln_status s = op->cpu(&ka);
    free(ws);
    return s;
}

/* The CPU reference of a layer whose CPU kernel takes float32 only (kiln's
 * fused layers) given float16/bfloat16 tensors: computed on float32 copies
 * of the inputs, the outputs rounded to their type. */
static kiln_status cpu_ref_in_f32(const kiln_op_def *op, const void *attrs, const char *node, int n_in,
                                  kiln_tensor *const *in, int n_out, kiln_tensor *const *out) {
    kiln__clear_error();
    kiln_tensor *fin[MAXIO], *fout[MAXIO];
    kiln_tinfo ti[MAXIO], to[MAXIO];
    const kiln_tinfo *tip[MAXIO];
    kiln_tinfo *top[MAXIO];
    for (int i = 0; i < n_in; i++) {
        fin[i] = NULL;
        tip[i] = NULL;
        if (!in[i]) continue;
        bool red = in[i]->dtype == F16 || in[i]->dtype == BF16;
        fin[i] = red ? tnew(F32, in[i]->rank, in[i]->dims) : in[i];
        int64_t n = kiln__tensor_numel(in[i]);
        for (int64_t k = 0; red && k < n; k++)
            kiln__store_f64(F32, fin[i]->data, k, kiln__load_f64(in[i]->dtype, in[i]->data, k));
        memset(&ti[i], 0, sizeof ti[i]);
        ti[i].dtype = fin[i]->dtype;
        ti[i].rank = fin[i]->rank;
        memcpy(ti[i].dims, fin[i]->dims, sizeof ti[i].dims);
        tip[i] = &ti[i];
    }
    for (int j = 0; j < n_out; j++) {
        fout[j] = tnew(out[j]->dtype == F16 || out[j]->dtype == BF16 ? F32 : out[j]->dtype, out[j]->rank,
                       out[j]->dims);
        memset(&to[j], 0, sizeof to[j]);
        top[j] = &to[j];
    }
    kiln_status s = cpu_kernel_run(op, attrs, node, n_in, (const kiln_tensor *const *)fin, tip, n_out,
                                   fout, top);
    for (int j = 0; s == KILN_OK && j < n_out; j++) {
        int64_t n = kiln__tensor_numel(out[j]);
        for (int64_t k = 0; k < n; k++)
            kiln__store_f64(out[j]->dtype, out[j]->data, k, kiln__load_f64(fout[j]->dtype, fout[j]->data, k));
    }
    return s;
}

static void run_case(const char *what, int op_id, const void *attrs, int n_in,
                     kiln_tensor *const *in, int n_out, uint32_t host_in, double tol) {
    const kiln_op_def *op = kiln__op_by_id(op_id);
    char node[192];
    snprintf(node, sizeof node, "%s/%s", op ? op->name : "?", what);
    if (!op) {
        FAILF("%s: no op with id %d", node, op_id);
        return;
    }
    covered[op_id] = true;
    n_cases++;
    kiln_tinfo ti[MAXIO], to[MAXIO];
    bool sup = false;
    if (!infer_case(node, op, attrs, n_in, in, n_out, ti, to, &sup)) return;
    if (!sup) FAILF("%s: supports() says no", node);

    /* CPU reference */
    kiln_tensor cout[MAXIO], *coutp[MAXIO];
    size_t nb[MAXIO];
    for (int j = 0; j < n_out; j++) {
        memset(&cout[j], 0, sizeof cout[j]);
        cout[j].dtype = to[j].dtype;
        cout[j].rank = to[j].rank;
        memcpy(cout[j].dims, to[j].dims, sizeof cout[j].dims);
        nb[j] = tbytes(&cout[j]);
        cout[j].data = calloc(nb[j] + 1, 1);
        coutp[j] = &cout[j];
    }
    const kiln_tinfo *tip[MAXIO];
    kiln_tinfo *top[MAXIO];
    for (int i = 0; i < n_in; i++) tip[i] = in[i] ? &ti[i] : NULL;
    for (int j = 0; j < n_out; j++) top[j] = &to[j];
    kiln_status s = cpu_kernel_run(op, attrs, node, n_in, (const kiln_tensor *const *)in, tip, n_out,
                                   coutp, top);
    if (s == KILN_ERR_UNSUPPORTED) s = cpu_ref_in_f32(op, attrs, node, n_in, in, n_out, coutp);
    if (s != KILN_OK) {
        FAILF("%s: CPU kernel failed (test bug?): %s", node, kiln_last_error());
        goto out;
    }

    /* GPU, once with parameter inputs on the host and once on the device */
    for (int variant = 0; variant < (host_in ? 2 : 1); variant++) {
        kiln_tensor din[MAXIO], gout[MAXIO], *goutp[MAXIO];
        const kiln_tensor *dinp[MAXIO];
        void *dmem[MAXIO] = {0}, *gmem[MAXIO] = {0};
        bool ok = true;
        for (int i = 0; i < n_in; i++) {
            dinp[i] = NULL;
            if (!in[i]) continue;
            din[i] = *in[i];
            if (!(variant == 0 && (host_in >> i) & 1)) {
                size_t b = tbytes(in[i]);
                dmem[i] = be->alloc(st, b ? b : 1);
                if (!dmem[i] || be->to_device(st, dmem[i], in[i]->data, b) != KILN_OK) {
                    FAILF("%s: device input %d: %s", node, i, kiln_last_error());
                    ok = false;
                }
                din[i].data = dmem[i];
            }
            dinp[i] = &din[i];
        }
        for (int j = 0; j < n_out && ok; j++) {
            gout[j] = cout[j];
            size_t tot = nb[j] + 2 * GUARD;
            unsigned char *pat = malloc(tot);
            memset(pat, GUARD_BYTE, tot);
            gmem[j] = be->alloc(st, tot);
            if (!gmem[j] || be->to_device(st, gmem[j], pat, tot) != KILN_OK) {
                FAILF("%s: device output %d: %s", node, j, kiln_last_error());
                ok = false;
            }
            free(pat);
            gout[j].data = (char *)gmem[j] + GUARD;
            goutp[j] = &gout[j];
        }
        if (ok) {
            kiln_kernel_args kg = {.op = op, .attrs = attrs, .node_name = node, .n_in = n_in,
                                   .n_out = n_out, .in = dinp, .out = goutp,
                                   .node_state = case_ns};
            s = be->run(st, &kg);
            if (s == KILN_OK) s = be->sync(st);
            if (s != KILN_OK) {
                FAILF("%s%s: CUDA run failed: %s: %s", node, variant ? " (device params)" : "",
                      kiln_status_name(s), kiln_last_error());
                ok = false;
            }
        }
        for (int j = 0; j < n_out && ok; j++) {
            size_t tot = nb[j] + 2 * GUARD;
            unsigned char *hb = malloc(tot);
            if (be->to_host(st, hb, gmem[j], tot) != KILN_OK) {
                FAILF("%s: copy back: %s", node, kiln_last_error());
                free(hb);
                break;
            }
            for (size_t k = 0; k < GUARD; k++)
                if (hb[k] != GUARD_BYTE || hb[GUARD + nb[j] + k] != GUARD_BYTE) {
                    FAILF("%s: output %d: write outside the tensor (guard byte %s+%zu)", node, j,
                          hb[k] != GUARD_BYTE ? "before" : "after", k);
                    break;
                }
            if (!compare(node, j, cout[j].dtype, cout[j].data, hb + GUARD,
                         kiln__tensor_numel(&cout[j]), tol))
                test_failed_checks++;
            free(hb);
        }
        for (int i = 0; i < n_in; i++) be->free(st, dmem[i]);
        for (int j = 0; j < n_out; j++) be->free(st, gmem[j]);
    }
out:
    for (int j = 0; j < n_out; j++) free(cout[j].data);
}

/* supports() must refuse this node */
static void refuse_case(const char *what, int op_id, const void *attrs, int n_in,
                        kiln_tensor *const *in, int n_out) {
    const kiln_op_def *op = kiln__op_by_id(op_id);
    char node[192];
    snprintf(node, sizeof node, "%s/%s", op->name, what);
    kiln_tinfo ti[MAXIO], to[MAXIO];
    bool sup = true;
    if (!infer_case(node, op, attrs, n_in, in, n_out, ti, to, &sup)) return;
    if (sup) FAILF("%s: supports() accepts a node it should leave to the CPU", node);
}

#define CASE(what, OP, attrs, n_out, host_in, tol, ...)                                          \
    do {                                                                                         \
        kiln_tensor *ins_[] = {__VA_ARGS__};                                                     \
        run_case(what, KILN_OP_##OP, attrs, (int)(sizeof ins_ / sizeof ins_[0]), ins_, n_out,    \
                 host_in, tol);                                                                  \
    } while (0)
#define REFUSE(what, OP, attrs, n_out, ...)                                                      \
    do {                                                                                         \
        kiln_tensor *ins_[] = {__VA_ARGS__};                                                     \
        refuse_case(what, KILN_OP_##OP, attrs, (int)(sizeof ins_ / sizeof ins_[0]), ins_, n_out); \
    } while (0)

/* ---- the backend itself ----------------------------------------------------------------- */

TEST(test_api) {
    /* copies round-trip, on the own stream and on a caller's stream */
    float h[1000], back[1000];
    for (int i = 0; i < 1000; i++) h[i] = (float)i * 0.5f;
    void *d = be->alloc(st, sizeof h);
    CHECK(d != NULL);
    CHECK_OK(be->to_device(st, d, h, sizeof h));
    memset(back, 0, sizeof back);
    CHECK_OK(be->to_host(st, back, d, sizeof back));
    CHECK(memcmp(h, back, sizeof h) == 0);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s) == cudaSuccess);
    CHECK_OK(be->set_stream(st, (void *)s));
    int64_t dims[1] = {1000};
    kiln_tensor *x = specials(trand(F32, -3, 3, 1, dims));
    CASE("caller_stream", Relu, NULL, 1, 0, 0, x);
    CHECK_OK(be->to_device(st, d, h, sizeof h));
    CHECK_OK(be->sync(st));
    CHECK_OK(be->set_stream(st, NULL));
    CHECK(cudaStreamDestroy(s) == cudaSuccess);
    be->free(st, d);
    be->free(st, NULL);
    /* engine-level memory: no state, synchronous copies */
    void *w = be->alloc(NULL, sizeof h);
    CHECK(w != NULL);
    memset(back, 0, sizeof back);
    CHECK_OK(be->to_device(NULL, w, h, sizeof h));
    CHECK_OK(be->to_host(NULL, back, w, sizeof back));
    CHECK(memcmp(h, back, sizeof h) == 0);
    be->free(NULL, w);
    /* an op with no CUDA kernel: a clean KILN_ERR_UNSUPPORTED */
    const kiln_op_def *op = kiln__op_by_id(KILN_OP_TfIdfVectorizer);
    CHECK(op != NULL && kiln__cuda_kernel_for(KILN_OP_TfIdfVectorizer) == NULL);
    if (op) {
        kiln_tensor t = *x;
        const kiln_tensor *ins[1] = {&t};
        kiln_tensor o = *x, *outs[1] = {&o};
        kiln_kernel_args ka = {.op = op, .node_name = "hm", .n_in = 1, .n_out = 1, .in = ins,
                               .out = outs};
        CHECK_ERR(be->run(st, &ka), KILN_ERR_UNSUPPORTED, "no CUDA kernel");
    }
    CHECK(strcmp(be->name, "cuda") == 0 && be->device == KILN_DEVICE_CUDA);
    /* a state for a device that does not exist */
    void *bad = NULL;
    CHECK_ERR(be->state_create(4096, &bad), KILN_ERR_DEVICE, "does not exist");
    CHECK(bad == NULL);
    /* KILN_CUDA_PLAN_THREADS: "auto" or 0..64, nothing else (atoi read "abc" as 0 and "8x" as 8) */
    static const char *const badv[] = {"abc", "8x", "-5", "65", "99999999999999999999", " 4"};
    for (size_t i = 0; i < sizeof badv / sizeof badv[0]; i++) {
        setenv("KILN_CUDA_PLAN_THREADS", badv[i], 1);
        CHECK_ERR(be->state_create(0, &bad), KILN_ERR_INVALID_ARGUMENT, "KILN_CUDA_PLAN_THREADS=");
        CHECK(bad == NULL);
    }
    static const char *const goodv[] = {"0", "16", "64", "auto", ""};
    for (size_t i = 0; i < sizeof goodv / sizeof goodv[0]; i++) {
        setenv("KILN_CUDA_PLAN_THREADS", goodv[i], 1);
        CHECK_OK(be->state_create(0, &bad));
        if (bad) be->state_free(bad);
        bad = NULL;
    }
    unsetenv("KILN_CUDA_PLAN_THREADS");
    /* KILN_CUDA_ATTN_FA, _GAP_CLUSTER and _SE_FUSED are on unless "0" (GAP clusters on compute capability 9 and
     * above); KILN_CUDA_DW_NCHW is on only where set (and not "0") */
    static const char *const fv[] = {NULL, "", "0", "1", "yes"};
    static const char *const fnames[] = {"KILN_CUDA_ATTN_FA", "KILN_CUDA_GAP_CLUSTER", "KILN_CUDA_SE_FUSED",
                                         "KILN_CUDA_DW_NCHW"};
    char *fkeep[4];
    for (int k = 0; k < 4; k++) fkeep[k] = getenv(fnames[k]) ? strdup(getenv(fnames[k])) : NULL;
    for (size_t i = 0; i < sizeof fv / sizeof fv[0]; i++) {
        for (int k = 0; k < 4; k++) {
            if (fv[i]) setenv(fnames[k], fv[i], 1);
            else unsetenv(fnames[k]);
        }
        CHECK_OK(be->state_create(0, &bad));
        if (!bad) continue;
        const kiln_cuda_state *fs = bad;
        const bool on = !fv[i] || strcmp(fv[i], "0") != 0, set_on = fv[i] && fv[i][0] && strcmp(fv[i], "0") != 0;
        const bool ok = fs->attn_fa == on && fs->se_fused == on && fs->gap_clusters == (on && fs->cc_major >= 9) &&
                        fs->dw_nchw_tiled == set_on;
        CHECK(ok);
        if (!ok)
            printf("  flags with \"%s\": attn_fa %d se_fused %d gap_clusters %d dw_nchw %d\n", fv[i] ? fv[i] : "(unset)",
                   fs->attn_fa, fs->se_fused, fs->gap_clusters, fs->dw_nchw_tiled);
        be->state_free(bad);
        bad = NULL;
    }
    for (int k = 0; k < 4; k++) {
        if (fkeep[k]) setenv(fnames[k], fkeep[k], 1);
        else unsetenv(fnames[k]);
        free(fkeep[k]);
    }
}

/* ---- elementwise ---------------------------------------------------------------------- */

typedef struct unary_spec {
    int op;
    double lo, hi;
    kiln_ew_act_attrs at;
} unary_spec;

TEST(test_unary) {
    static const unary_spec u[] = {
        {KILN_OP_Abs, -3, 3, {0, 0, 0}}, {KILN_OP_Neg, -3, 3, {0, 0, 0}}, {KILN_OP_Sqrt, 0, 4, {0, 0, 0}},
        {KILN_OP_Exp, -5, 5, {0, 0, 0}}, {KILN_OP_Log, 0.01, 5, {0, 0, 0}},
        {KILN_OP_Reciprocal, 0.1, 3, {0, 0, 0}}, {KILN_OP_Floor, -5, 5, {0, 0, 0}},
        {KILN_OP_Ceil, -5, 5, {0, 0, 0}}, {KILN_OP_Round, -5, 5, {0, 0, 0}}, {KILN_OP_Sign, -2, 2, {0, 0, 0}},
        {KILN_OP_Sin, -4, 4, {0, 0, 0}}, {KILN_OP_Cos, -4, 4, {0, 0, 0}}, {KILN_OP_Tan, -1.2, 1.2, {0, 0, 0}},
        {KILN_OP_Asin, -1, 1, {0, 0, 0}}, {KILN_OP_Acos, -1, 1, {0, 0, 0}}, {KILN_OP_Atan, -4, 4, {0, 0, 0}},
        {KILN_OP_Sinh, -3, 3, {0, 0, 0}}, {KILN_OP_Cosh, -3, 3, {0, 0, 0}}, {KILN_OP_Asinh, -4, 4, {0, 0, 0}},
        {KILN_OP_Acosh, 1, 5, {0, 0, 0}}, {KILN_OP_Atanh, -0.99, 0.99, {0, 0, 0}},
        {KILN_OP_Erf, -3, 3, {0, 0, 0}}, {KILN_OP_Relu, -3, 3, {0, 0, 0}},
        {KILN_OP_LeakyRelu, -3, 3, {0.01f, 0, 0}}, {KILN_OP_Elu, -3, 3, {1.0f, 0, 0}},
        {KILN_OP_Selu, -3, 3, {1.67326319f, 0, 1.05070102f}}, {KILN_OP_Celu, -3, 3, {1.5f, 0, 0}},
        {KILN_OP_Sigmoid, -8, 8, {0, 0, 0}}, {KILN_OP_HardSigmoid, -4, 4, {0.2f, 0.5f, 0}},
        {KILN_OP_HardSwish, -5, 5, {0, 0, 0}}, {KILN_OP_Tanh, -4, 4, {0, 0, 0}},
        {KILN_OP_Softplus, -8, 8, {0, 0, 0}}, {KILN_OP_Softsign, -4, 4, {0, 0, 0}},
        {KILN_OP_Mish, -5, 5, {0, 0, 0}}, {KILN_OP_ThresholdedRelu, -3, 3, {1.0f, 0, 0}},
        {KILN_OP_Shrink, -3, 3, {0.5f, 0.3f, 0}},
    };
    for (size_t k = 0; k < sizeof u / sizeof u[0]; k++) {
        const kiln_op_def *op = kiln__op_by_id(u[k].op);
        const void *at = op->attr_size ? (const void *)&u[k].at : NULL;
        uint32_t host = 0;
        run_case("f32", u[k].op, at, 1, (kiln_tensor *[]){specials(trand(F32, u[k].lo, u[k].hi, S(3, 5, 7)))}, 1, host, 0);
        run_case("f16", u[k].op, at, 1, (kiln_tensor *[]){trand(F16, u[k].lo, u[k].hi, S(257))}, 1, host, 0);
        run_case("bf16", u[k].op, at, 1, (kiln_tensor *[]){trand(BF16, u[k].lo, u[k].hi, S(2, 33))}, 1, host, 0);
        run_case("f64", u[k].op, at, 1, (kiln_tensor *[]){specials(trand(F64, u[k].lo, u[k].hi, S(17)))}, 1, host, 0);
    }
    static const int iops[4] = {KILN_OP_Abs, KILN_OP_Neg, KILN_OP_Sign, KILN_OP_Relu};
    for (int k = 0; k < 4; k++) {
        run_case("i32", iops[k], NULL, 1, (kiln_tensor *[]){tbits(I32, S(31))}, 1, 0, 0);
        run_case("i64", iops[k], NULL, 1, (kiln_tensor *[]){tbits(I64, S(4, 5))}, 1, 0, 0);
    }
    CASE("empty", Relu, NULL, 1, 0, 0, trand(F32, -1, 1, S(2, 0, 3)));
    CASE("big", Sigmoid, NULL, 1, 0, 0, trand(F32, -6, 6, S(3, 1000, 77)));
}

TEST(test_predicates) {
    kiln_ew_isinf_attrs pos = {1, 0}, both = {1, 1};
    CASE("f32", IsNaN, NULL, 1, 0, 0, specials(trand(F32, -2, 2, S(4, 9))));
    CASE("f16", IsNaN, NULL, 1, 0, 0, specials(trand(F16, -2, 2, S(33))));
    CASE("pos", IsInf, &pos, 1, 0, 0, specials(trand(F32, -2, 2, S(4, 9))));
    CASE("both_f64", IsInf, &both, 1, 0, 0, specials(trand(F64, -2, 2, S(21))));
    CASE("bool", Not, NULL, 1, 0, 0, trand(BOOL, 0, 1, S(5, 13)));
}

TEST(test_clip) {
    CASE("minmax", Clip, NULL, 1, 0x6, 0, specials(trand(F32, -3, 3, S(5, 31))), tscalar(F32, -1),
         tscalar(F32, 1.5));
    CASE("min", Clip, NULL, 1, 0x2, 0, trand(F32, -3, 3, S(40)), tscalar(F32, 0.25));
    CASE("max", Clip, NULL, 1, 0x4, 0, trand(F32, -3, 3, S(40)), NULL, tscalar(F32, 0.25));
    CASE("none", Clip, NULL, 1, 0, 0, trand(F32, -3, 3, S(40)));
    CASE("f16", Clip, NULL, 1, 0x6, 0, trand(F16, -3, 3, S(3, 9)), tscalar(F16, -0.5), tscalar(F16, 2));
    CASE("i32", Clip, NULL, 1, 0x6, 0, trand(I32, -100, 100, S(50)), tscalar(I32, -7), tscalar(I32, 9));
    CASE("u8", Clip, NULL, 1, 0x6, 0, tbits(U8, S(50)), tscalar(U8, 20), tscalar(U8, 200));
}

/* shape pairs for broadcasting */
typedef struct bpair {
    const char *name;
    int ra, rb;
    int64_t a[KILN_MAX_RANK], b[KILN_MAX_RANK];
} bpair;
static const bpair pairs[] = {
    {"same", 3, 3, {3, 4, 5}, {3, 4, 5}},
    {"3x1x5+4x1", 3, 2, {3, 1, 5}, {4, 1}},
    {"4d+row", 4, 1, {2, 3, 4, 5}, {5}},
    {"scalar+2d", 0, 2, {0}, {7, 9}},
    {"bias", 2, 1, {64, 257}, {257}},
    {"rank8", 8, 8, {2, 1, 3, 1, 2, 1, 2, 3}, {1, 2, 3, 4, 1, 1, 2, 1}},
    {"col", 2, 2, {37, 1}, {1, 41}},
    {"empty", 3, 1, {2, 0, 3}, {3}},
};
#define NPAIRS (int)(sizeof pairs / sizeof pairs[0])

static void bin_cases(int op, const kiln_ew_bin_attrs *at, kiln_dtype t, double lo, double hi,
                      bool all_pairs, bool spec) {
    for (int p = 0; p < NPAIRS; p++) {
        if (!all_pairs && p != 1 && p != 3 && p != 5) continue;
        kiln_tensor *A = trand(t, lo, hi, pairs[p].ra, pairs[p].a);
        kiln_tensor *B = trand(t, lo, hi, pairs[p].rb, pairs[p].b);
        if (spec && kiln__dtype_is_float(t)) specials(A);
        char what[96];
        snprintf(what, sizeof what, "%s/%s", kiln_dtype_name(t), pairs[p].name);
        run_case(what, op, at, 2, (kiln_tensor *[]){A, B}, 1, 0, 0);
    }
}

TEST(test_binary) {
    kiln_ew_bin_attrs none = {0, 0, 0, 0};
    static const int arith[] = {KILN_OP_Add, KILN_OP_Sub, KILN_OP_Mul, KILN_OP_Div};
    for (int k = 0; k < 4; k++) {
        bin_cases(arith[k], &none, F32, -3, 3, true, true);
        bin_cases(arith[k], &none, F16, -3, 3, false, false);
        bin_cases(arith[k], &none, BF16, -3, 3, false, false);
        bin_cases(arith[k], &none, F64, -3, 3, false, false);
        bin_cases(arith[k], &none, I32, -3, 3, false, false); /* Div by 0 and -1 included */
        bin_cases(arith[k], &none, I64, -50, 50, false, false);
        bin_cases(arith[k], &none, I8, -100, 100, false, false); /* wrapping */
        bin_cases(arith[k], &none, KILN_DTYPE_INT16, -300, 300, false, false);
        bin_cases(arith[k], &none, U8, 0, 255, false, false);
        bin_cases(arith[k], &none, KILN_DTYPE_UINT16, 0, 9, false, false);
        bin_cases(arith[k], &none, KILN_DTYPE_UINT32, 0, 1e6, false, false);
        bin_cases(arith[k], &none, KILN_DTYPE_UINT64, 0, 1e9, false, false);
    }
    /* fp16/bf16 rows of 8k channels by one row per image (k_binary_chan8): the
     * SE block's Mul over NHWC bytes [N, H, W, C] x [N, 1, 1, C], one image
     * (merged to [P, C] by [C]), the per-channel operand first, a row bias */
    CASE("se_mul_nhwc_f16", Mul, &none, 1, 0, 0, trand(F16, -3, 3, S(3, 5, 7, 24)), trand(F16, -3, 3, S(3, 1, 1, 24)));
    CASE("se_mul_n1_bf16", Mul, &none, 1, 0, 0, trand(BF16, -3, 3, S(1, 6, 5, 32)), trand(BF16, -3, 3, S(1, 1, 1, 32)));
    CASE("chan_first_sub_f16", Sub, &none, 1, 0, 0, trand(F16, -3, 3, S(2, 1, 1, 16)), trand(F16, -3, 3, S(2, 4, 3, 16)));
    CASE("chan_first_div_bf16", Div, &none, 1, 0, 0, trand(BF16, 1, 3, S(2, 1, 1, 8)), trand(BF16, 1, 3, S(2, 9, 1, 8)));
    CASE("row_bias_f16", Add, &none, 1, 0, 0, trand(F16, -3, 3, S(37, 40)), trand(F16, -3, 3, S(40)));
    CASE("chan_odd_f16", Mul, &none, 1, 0, 0, trand(F16, -3, 3, S(2, 3, 3, 12)), trand(F16, -3, 3, S(2, 1, 1, 12)));
    static const int minmax[] = {KILN_OP_Max, KILN_OP_Min};
    for (int k = 0; k < 2; k++) {
        bin_cases(minmax[k], NULL, I8, -100, 100, false, false);
        bin_cases(minmax[k], NULL, KILN_DTYPE_UINT32, 0, 1e6, false, false);
        bin_cases(minmax[k], NULL, KILN_DTYPE_UINT64, 0, 1e9, false, false);
    }
    kiln_ew_bin_attrs fmod1 = {0, 0, 1, 0}, pymod = {0, 0, 0, 0};
    bin_cases(KILN_OP_Mod, &fmod1, F32, -5, 5, false, false);
    bin_cases(KILN_OP_Mod, &pymod, F32, -5, 5, false, false);
    bin_cases(KILN_OP_Mod, &fmod1, I32, -7, 7, false, false);
    bin_cases(KILN_OP_Mod, &pymod, I64, -7, 7, false, false);
    bin_cases(KILN_OP_Mod, &pymod, F16, -5, 5, false, false);
    bin_cases(KILN_OP_Mod, &pymod, I8, -20, 20, false, false);
    bin_cases(KILN_OP_Mod, &fmod1, KILN_DTYPE_INT16, -20, 20, false, false);
    bin_cases(KILN_OP_Mod, &pymod, U8, 0, 40, false, false);
    bin_cases(KILN_OP_Mod, &pymod, KILN_DTYPE_UINT64, 0, 40, false, false);
    bin_cases(KILN_OP_Pow, &none, F32, 0.1, 3, false, false);
    bin_cases(KILN_OP_Pow, &none, F16, 0.1, 2, false, false);
    bin_cases(KILN_OP_Pow, &none, F64, 0.1, 3, false, false);
    static const int cmp[] = {KILN_OP_Equal, KILN_OP_Less, KILN_OP_LessOrEqual, KILN_OP_Greater,
                              KILN_OP_GreaterOrEqual};
    for (int k = 0; k < 5; k++) {
        const kiln_ew_bin_attrs *at = kiln__op_by_id(cmp[k])->attr_size ? &none : NULL;
        /* whole numbers so that equality happens */
        bin_cases(cmp[k], at, F32, -2, 2, true, false);
        bin_cases(cmp[k], at, I64, -2, 2, false, false);
        bin_cases(cmp[k], at, F16, -2, 2, false, false);
        bin_cases(cmp[k], at, U8, 0, 3, false, false);
    }
    {
        /* float compares with NaN */
        kiln_tensor *A = specials(trand(F32, -2, 2, S(50))), *B = specials(trand(F32, -2, 2, S(50)));
        CASE("nan", Less, &none, 1, 0, 0, A, B);
        CASE("nan", Equal, &none, 1, 0, 0, A, B);
        CASE("bool", Equal, &none, 1, 0, 0, trand(BOOL, 0, 1, S(3, 1, 5)), trand(BOOL, 0, 1, S(4, 1)));
    }
    static const int logic[] = {KILN_OP_And, KILN_OP_Or, KILN_OP_Xor};
    for (int k = 0; k < 3; k++) bin_cases(logic[k], &none, BOOL, 0, 1, true, false);
    kiln_ew_bin_attrs left = {0, 0, 0, 0}, right = {0, 0, 0, 1};
    bin_cases(KILN_OP_BitShift, &left, U8, 0, 9, false, false);
    bin_cases(KILN_OP_BitShift, &right, U8, 0, 9, false, false);
    bin_cases(KILN_OP_BitShift, &left, KILN_DTYPE_UINT32, 0, 40, false, false);
    bin_cases(KILN_OP_BitShift, &right, KILN_DTYPE_UINT64, 0, 70, false, false);
    /* PRelu: the slope broadcasts to X */
    CASE("f32", PRelu, &none, 1, 0, 0, specials(trand(F32, -3, 3, S(2, 3, 4, 5))), trand(F32, 0, 1, S(3, 1, 1)));
    CASE("f16", PRelu, &none, 1, 0, 0, trand(F16, -3, 3, S(4, 6)), trand(F16, 0, 1, S(6)));
    /* opset < 7 broadcasting of B at an axis of A */
    kiln_ew_bin_attrs legacy = {EW_LEGACY_AXIS, 1, 0, 0};
    CASE("legacy_axis", Add, &legacy, 1, 0, 0, trand(F32, -3, 3, S(2, 3, 4, 5)), trand(F32, -3, 3, S(3, 4)));
    /* left to the CPU */
    REFUSE("mixed_pow", Pow, &none, 1, trand(F32, 0.5, 2, S(5)), trand(I64, 0, 3, S(5)));
    REFUSE("u8_prelu", PRelu, &none, 1, trand(U8, 0, 9, S(5)), trand(U8, 0, 9, S(5)));
}

TEST(test_variadic) {
    CASE("sum3", Sum, NULL, 1, 0, 0, trand(F32, -3, 3, S(3, 1, 5)), trand(F32, -3, 3, S(4, 1)),
         trand(F32, -3, 3, S(5)));
    CASE("sum1", Sum, NULL, 1, 0, 0, trand(F32, -3, 3, S(3, 7)));
    CASE("mean_f16", Mean, NULL, 1, 0, 0, trand(F16, -3, 3, S(6, 7)), trand(F16, -3, 3, S(7)));
    CASE("mean3", Mean, NULL, 1, 0, 0, trand(F32, -3, 3, S(2, 3)), trand(F32, -3, 3, S(2, 3)),
         trand(F32, -3, 3, S(1)));
    CASE("max_i32", Max, NULL, 1, 0, 0, tbits(I32, S(4, 5)), tbits(I32, S(5)), tbits(I32, S(4, 1)));
    CASE("min_nan", Min, NULL, 1, 0, 0, specials(trand(F32, -3, 3, S(40))),
         specials(trand(F32, -3, 3, S(40))));
    CASE("max_bf16", Max, NULL, 1, 0, 0, trand(BF16, -3, 3, S(9, 9)), trand(BF16, -3, 3, S(9, 1)));
}

TEST(test_where) {
    CASE("f32", Where, NULL, 1, 0, 0, trand(BOOL, 0, 1, S(3, 1, 5)), trand(F32, -3, 3, S(4, 5)),
         tscalar(F32, 7));
    CASE("i64", Where, NULL, 1, 0, 0, trand(BOOL, 0, 1, S(6)), tbits(I64, S(6)), tbits(I64, S(1)));
    CASE("f16", Where, NULL, 1, 0, 0, trand(BOOL, 0, 1, S(2, 1, 4)), trand(F16, -3, 3, S(3, 4)),
         trand(F16, -3, 3, S(2, 3, 1)));
    CASE("bool", Where, NULL, 1, 0, 0, trand(BOOL, 0, 1, S(10)), trand(BOOL, 0, 1, S(10)),
         trand(BOOL, 0, 1, S(10)));
    CASE("rank8", Where, NULL, 1, 0, 0, trand(BOOL, 0, 1, S(2, 1, 3, 1, 2, 1, 2, 3)),
         trand(F32, -3, 3, S(1, 2, 3, 4, 1, 1, 2, 1)), trand(F32, -3, 3, S(3)));
}

TEST(test_cast) {
    static const kiln_dtype all[] = {
        KILN_DTYPE_FLOAT32, KILN_DTYPE_FLOAT64, KILN_DTYPE_FLOAT16, KILN_DTYPE_BFLOAT16,
        KILN_DTYPE_INT8,    KILN_DTYPE_INT16,   KILN_DTYPE_INT32,   KILN_DTYPE_INT64,
        KILN_DTYPE_UINT8,   KILN_DTYPE_UINT16,  KILN_DTYPE_UINT32,  KILN_DTYPE_UINT64,
        KILN_DTYPE_BOOL};
    const int n = (int)(sizeof all / sizeof all[0]);
    for (int i = 0; i < n; i++) {
        kiln_tensor *x;
        if (kiln__dtype_is_float(all[i])) {
            x = specials(trand(all[i], -300, 300, S(61)));
            kiln__store_f64(all[i], x->data, 10, 3.0e9);  /* out of int32 range */
            kiln__store_f64(all[i], x->data, 11, -1.0e20); /* out of int64 range */
            kiln__store_f64(all[i], x->data, 12, 255.5);
        } else {
            x = tbits(all[i], S(61));
        }
        for (int j = 0; j < n; j++) {
            kiln_ew_cast_attrs at = {(int32_t)all[j]};
            char what[64];
            snprintf(what, sizeof what, "%s->%s", kiln_dtype_name(all[i]), kiln_dtype_name(all[j]));
            run_case(what, KILN_OP_Cast, &at, 1, (kiln_tensor *[]){x}, 1, 0, 1e-30);
        }
    }
    CASE("like", CastLike, NULL, 1, 0, 0, trand(F32, -9, 9, S(3, 4)), trand(F16, 0, 1, S(1)));
}

/* ---- data movement ------------------------------------------------------------------------ */

TEST(test_copies) {
    kiln_reshape_attrs rs = {0};
    kiln_flatten_attrs fl = {2};
    kiln_dropout_attrs dr = {0}, drl = {1};
    CASE("reshape", Reshape, &rs, 1, 0x2, 0, trand(F32, -3, 3, S(2, 3, 4)), tvals(I64, V(4, -1)));
    CASE("flatten", Flatten, &fl, 1, 0, 0, trand(F16, -3, 3, S(2, 3, 4, 5)));
    CASE("squeeze", Squeeze, NULL, 1, 0x2, 0, trand(I64, -3, 3, S(2, 1, 4)), tvals(I64, V(1)));
    CASE("unsqueeze", Unsqueeze, NULL, 1, 0x2, 0, trand(BOOL, 0, 1, S(2, 4)), tvals(I64, V(0, 3)));
    CASE("identity", Identity, NULL, 1, 0, 0, trand(BF16, -3, 3, S(7, 3)));
    CASE("empty", Identity, NULL, 1, 0, 0, trand(F32, -3, 3, S(7, 0)));
    CASE("mask", Dropout, &dr, 2, 0, 0, trand(F32, -3, 3, S(5, 6)));
    CASE("mask_like", Dropout, &drl, 2, 0, 0, trand(F16, -3, 3, S(5, 6)));
    /* Shape and Size read dims only (the kernel writes them; nothing is copied) */
    kiln_shape_attrs all = {0}, mid = {.start = 1, .end = -1, .has_end = 1}, neg = {.start = -2},
                     none = {.start = 3, .end = 1, .has_end = 1};
    CASE("all", Shape, &all, 1, 0, 0, trand(F16, -1, 1, S(2, 3, 4, 5)));
    CASE("mid", Shape, &mid, 1, 0, 0, trand(F32, -1, 1, S(2, 3, 4, 5)));
    CASE("neg_start", Shape, &neg, 1, 0, 0, trand(I64, -1, 1, S(6, 1, 7)));
    CASE("scalar", Shape, &all, 1, 0, 0, trand(F32, -1, 1, 0, NULL));
    CASE("empty_range", Shape, &none, 1, 0, 0, trand(F32, -1, 1, S(2, 3, 4)));
    CASE("4d", Size, NULL, 1, 0, 0, trand(BF16, -1, 1, S(2, 3, 4, 5)));
    CASE("empty", Size, NULL, 1, 0, 0, trand(F32, -1, 1, S(3, 0)));
}

TEST(test_transpose) {
    kiln_transpose_attrs bert = {4, {0, 2, 1, 3}}, rev = {0, {0, 0, 0}}, p021 = {3, {0, 2, 1}},
                         p201 = {3, {2, 0, 1}}, p10 = {2, {1, 0}};
    CASE("bert", Transpose, &bert, 1, 0, 0, trand(F32, -3, 3, S(2, 5, 3, 16)));
    CASE("bert_f16", Transpose, &bert, 1, 0, 0, trand(F16, -3, 3, S(2, 33, 4, 64)));
    CASE("2d", Transpose, &rev, 1, 0, 0, trand(F32, -3, 3, S(33, 65)));
    CASE("2d_tiles", Transpose, &p10, 1, 0, 0, trand(F32, -3, 3, S(64, 48)));
    CASE("batched", Transpose, &p021, 1, 0, 0, trand(F16, -3, 3, S(3, 40, 50)));
    CASE("i8", Transpose, &p201, 1, 0, 0, trand(I8, -100, 100, S(5, 7, 9)));
    CASE("rev4", Transpose, &rev, 1, 0, 0, trand(F64, -3, 3, S(2, 3, 4, 5)));
    CASE("bool", Transpose, &p10, 1, 0, 0, trand(BOOL, 0, 1, S(9, 17)));
    CASE("rank1", Transpose, &rev, 1, 0, 0, trand(F32, -3, 3, S(11)));
}

TEST(test_concat_split) {
    kiln_axis_attrs ax1 = {1}, axm1 = {-1}, ax0 = {0};
    CASE("axis1", Concat, &ax1, 1, 0, 0, trand(F32, -3, 3, S(2, 3, 4)), trand(F32, -3, 3, S(2, 1, 4)),
         trand(F32, -3, 3, S(2, 5, 4)));
    CASE("last_f16", Concat, &axm1, 1, 0, 0, trand(F16, -3, 3, S(3, 5)), trand(F16, -3, 3, S(3, 2)));
    CASE("axis0_i64", Concat, &ax0, 1, 0, 0, tbits(I64, S(2, 3)), tbits(I64, S(1, 3)), tbits(I64, S(4, 3)));
    CASE("empty_part", Concat, &ax1, 1, 0, 0, trand(F32, -3, 3, S(2, 0, 4)), trand(F32, -3, 3, S(2, 3, 4)));
    kiln_split_attrs s1 = {1, 0}, s0n = {0, 3};
    CASE("sizes", Split, &s1, 3, 0x2, 0, trand(F32, -3, 3, S(6, 10)), tvals(I64, V(2, 5, 3)));
    CASE("even", Split, &s0n, 3, 0, 0, trand(F16, -3, 3, S(9, 4)));
}

TEST(test_slice) {
    kiln_tensor *x = trand(F32, -3, 3, S(10, 11, 12));
    CASE("steps", Slice, NULL, 1, 0x1e, 0, x, tvals(I64, V(1, -3)), tvals(I64, V(9, 100)),
         tvals(I64, V(0, 2)), tvals(I64, V(2, 1)));
    CASE("negative_step", Slice, NULL, 1, 0x1e, 0, x, tvals(I64, V(-1)), tvals(I64, V(-100)),
         tvals(I64, V(1)), tvals(I64, V(-2)));
    CASE("i32_params", Slice, NULL, 1, 0x6, 0, trand(F16, -3, 3, S(4, 7)), tvals(I32, V(1, 2)),
         tvals(I32, V(3, 6)));
    CASE("empty", Slice, NULL, 1, 0xe, 0, x, tvals(I64, V(5)), tvals(I64, V(5)), tvals(I64, V(2)));
    CASE("inner_contig", Slice, NULL, 1, 0xe, 0, trand(BF16, -3, 3, S(8, 64)), tvals(I64, V(2)),
         tvals(I64, V(7)), tvals(I64, V(0)));
}

TEST(test_expand_tile) {
    CASE("f32", Expand, NULL, 1, 0x2, 0, trand(F32, -3, 3, S(3, 1)), tvals(I64, V(2, 3, 4)));
    CASE("f16", Expand, NULL, 1, 0x2, 0, trand(F16, -3, 3, S(1, 5)), tvals(I64, V(6, 1)));
    CASE("bool", Expand, NULL, 1, 0x2, 0, trand(BOOL, 0, 1, S(4)), tvals(I64, V(3, 1, 4)));
    CASE("f32", Tile, NULL, 1, 0x2, 0, trand(F32, -3, 3, S(2, 3)), tvals(I64, V(2, 3)));
    CASE("i32", Tile, NULL, 1, 0x2, 0, trand(I32, -9, 9, S(2, 1, 5)), tvals(I64, V(1, 4, 2)));
}

TEST(test_gather) {
    kiln_axis_attrs ax0 = {0}, ax1 = {1}, axm1 = {-1};
    CASE("embed", Gather, &ax0, 1, 0, 0, trand(F32, -3, 3, S(50, 64)), trand(I64, -50, 49, S(4, 7)));
    CASE("embed_f16", Gather, &ax0, 1, 0, 0, trand(F16, -3, 3, S(30, 64)), trand(I32, 0, 29, S(9)));
    CASE("axis1", Gather, &ax1, 1, 0, 0, trand(F32, -3, 3, S(3, 10, 4)), trand(I32, -10, 9, S(5)));
    CASE("last", Gather, &axm1, 1, 0, 0, tbits(I8, S(3, 5, 7)), trand(I64, 0, 6, S(2, 2)));
    CASE("scalar_index", Gather, &ax0, 1, 0, 0, trand(F32, -3, 3, S(6, 5)), tscalar(I64, -2));
}

TEST(test_global_pool) {
    CASE("avg", GlobalAveragePool, NULL, 1, 0, 0, trand(F32, -3, 3, S(2, 3, 5, 7)));
    CASE("avg_f16", GlobalAveragePool, NULL, 1, 0, 0, trand(F16, -3, 3, S(2, 64, 7, 7)));
    CASE("avg_big", GlobalAveragePool, NULL, 1, 0, 0, trand(F32, -3, 3, S(1, 3, 100, 100)));
    CASE("max", GlobalMaxPool, NULL, 1, 0, 0, trand(F32, -3, 3, S(2, 3, 9)));
    CASE("max_f16", GlobalMaxPool, NULL, 1, 0, 0, trand(F16, -3, 3, S(2, 5, 40)));
    /* NaN and inf (issue 20): a NaN anywhere in a plane gives NaN, as the CPU (kiln__max_keep_nan) */
    CASE("max_nan", GlobalMaxPool, NULL, 1, 0, 0, specials(trand(F32, -3, 3, S(2, 3, 9))));
    CASE("max_nan_f16", GlobalMaxPool, NULL, 1, 0, 0, specials(trand(F16, -3, 3, S(2, 5, 40))));
    CASE("max_nan_bf16", GlobalMaxPool, NULL, 1, 0, 0, specials(trand(BF16, -3, 3, S(3, 4, 7, 7))));
}

TEST(test_matmul) {
    CASE("2d", MatMul, NULL, 1, 0, 1e-10, trand(F32, -1, 1, S(5, 7)), trand(F32, -1, 1, S(7, 3)));
    CASE("fold", MatMul, NULL, 1, 0, 1e-10, trand(F32, -1, 1, S(2, 3, 5, 7)), trand(F32, -1, 1, S(7, 4)));
    CASE("bcast", MatMul, NULL, 1, 0, 1e-10, trand(F32, -1, 1, S(2, 1, 5, 7)),
         trand(F32, -1, 1, S(3, 7, 4)));
    CASE("bcast2", MatMul, NULL, 1, 0, 1e-10, trand(F32, -1, 1, S(2, 3, 5, 7)),
         trand(F32, -1, 1, S(2, 1, 7, 4)));
    CASE("vec_left", MatMul, NULL, 1, 0, 1e-10, trand(F32, -1, 1, S(7)), trand(F32, -1, 1, S(2, 7, 3)));
    CASE("vec_right", MatMul, NULL, 1, 0, 1e-10, trand(F32, -1, 1, S(4, 7)), trand(F32, -1, 1, S(7)));
    CASE("f16", MatMul, NULL, 1, 0, 1e-5, trand(F16, -1, 1, S(3, 64, 32)), trand(F16, -1, 1, S(3, 32, 48)));
    CASE("bf16", MatMul, NULL, 1, 0, 1e-4, trand(BF16, -1, 1, S(2, 17, 33)), trand(BF16, -1, 1, S(33, 9)));
    CASE("f64", MatMul, NULL, 1, 0, 1e-14, trand(F64, -1, 1, S(6, 5)), trand(F64, -1, 1, S(5, 8)));
    CASE("big", MatMul, NULL, 1, 0, 1e-10, trand(F32, -1, 1, S(130, 257)), trand(F32, -1, 1, S(257, 129)));
    CASE("k0", MatMul, NULL, 1, 0, 1e-10, trand(F32, -1, 1, S(3, 0)), trand(F32, -1, 1, S(0, 4)));
    CASE("odd_f16", MatMul, NULL, 1, 0, 1e-5, trand(F16, -1, 1, S(7, 13)), trand(F16, -1, 1, S(13, 5)));
}

/* ---- nn, reduce and fused layers ----------------------------------------------------------- */

TEST(test_gemm) {
    kiln_gemm_attrs plain = {1.0f, 1.0f, 0, 0}, tt = {0.5f, 2.0f, 1, 1}, ta = {1.0f, 0.0f, 1, 0};
    CASE("plain", Gemm, &plain, 1, 0, 1e-10, trand(F32, -1, 1, S(5, 7)), trand(F32, -1, 1, S(7, 3)));
    CASE("bias_row", Gemm, &plain, 1, 0, 1e-10, trand(F32, -1, 1, S(5, 7)), trand(F32, -1, 1, S(7, 3)),
         trand(F32, -1, 1, S(3)));
    CASE("tt_col", Gemm, &tt, 1, 0, 1e-10, trand(F32, -1, 1, S(7, 5)), trand(F32, -1, 1, S(3, 7)),
         trand(F32, -1, 1, S(5, 1)));
    CASE("beta0", Gemm, &ta, 1, 0, 1e-10, trand(F32, -1, 1, S(7, 5)), trand(F32, -1, 1, S(7, 3)),
         trand(F32, -1, 1, S(5, 3)));
    CASE("f16_full", Gemm, &tt, 1, 0, 1e-5, trand(F16, -1, 1, S(32, 16)), trand(F16, -1, 1, S(24, 32)),
         trand(F16, -1, 1, S(16, 24)));
    CASE("scalar_c", Gemm, &plain, 1, 0, 1e-10, trand(F32, -1, 1, S(4, 6)), trand(F32, -1, 1, S(6, 2)),
         tscalar(F32, 0.5));
}

static kiln_conv_attrs conv_at(int auto_pad, int group, int ns, int64_t k, int64_t s, int64_t d,
                               int64_t pb, int64_t pe) {
    kiln_conv_attrs at;
    memset(&at, 0, sizeof at);
    at.auto_pad = auto_pad;
    at.group = group;
    at.n_strides = at.n_dilations = at.n_kernel = ns;
    at.n_pads = 2 * ns;
    for (int i = 0; i < ns; i++) {
        at.kernel[i] = k;
        at.strides[i] = s;
        at.dilations[i] = d;
        at.pads[i] = pb;
        at.pads[ns + i] = pe;
    }
    return at;
}

TEST(test_conv) {
    kiln_conv_attrs a3 = conv_at(PAD_NOTSET, 1, 2, 3, 1, 1, 1, 1);
    CASE("3x3", Conv, &a3, 1, 0, 1e-9, trand(F32, -1, 1, S(2, 3, 9, 11)), trand(F32, -1, 1, S(8, 3, 3, 3)),
         trand(F32, -1, 1, S(8)));
    kiln_conv_attrs s2 = conv_at(PAD_NOTSET, 1, 2, 3, 2, 1, 1, 0); /* asymmetric: fallback */
    CASE("asym_stride2", Conv, &s2, 1, 0, 1e-9, trand(F32, -1, 1, S(1, 4, 10, 9)),
         trand(F32, -1, 1, S(6, 4, 3, 3)));
    kiln_conv_attrs same = conv_at(PAD_SAME_UPPER, 1, 2, 2, 1, 1, 0, 0);
    CASE("same_upper_k2", Conv, &same, 1, 0, 1e-9, trand(F32, -1, 1, S(1, 2, 7, 7)),
         trand(F32, -1, 1, S(3, 2, 2, 2)));
    kiln_conv_attrs grp = conv_at(PAD_NOTSET, 2, 2, 3, 1, 2, 2, 2);
    CASE("groups_dil", Conv, &grp, 1, 0, 1e-9, trand(F32, -1, 1, S(2, 4, 8, 8)),
         trand(F32, -1, 1, S(6, 2, 3, 3)), trand(F32, -1, 1, S(6)));
    kiln_conv_attrs dw = conv_at(PAD_NOTSET, 6, 2, 3, 1, 1, 1, 1);
    CASE("depthwise", Conv, &dw, 1, 0, 1e-9, trand(F32, -1, 1, S(2, 6, 9, 9)),
         trand(F32, -1, 1, S(12, 1, 3, 3)), trand(F32, -1, 1, S(12)));
    kiln_conv_attrs c1 = conv_at(PAD_NOTSET, 1, 1, 5, 2, 1, 2, 2);
    CASE("1d", Conv, &c1, 1, 0, 1e-9, trand(F32, -1, 1, S(2, 3, 20)), trand(F32, -1, 1, S(4, 3, 5)));
    kiln_conv_attrs c3 = conv_at(PAD_NOTSET, 1, 3, 3, 1, 1, 1, 1);
    CASE("3d", Conv, &c3, 1, 0, 1e-9, trand(F32, -1, 1, S(1, 2, 5, 6, 7)),
         trand(F32, -1, 1, S(3, 2, 3, 3, 3)), trand(F32, -1, 1, S(3)));
    kiln_conv_attrs p1 = conv_at(PAD_NOTSET, 1, 2, 1, 1, 1, 0, 0);
    CASE("1x1", Conv, &p1, 1, 0, 1e-9, trand(F32, -1, 1, S(2, 16, 5, 5)), trand(F32, -1, 1, S(8, 16, 1, 1)),
         trand(F32, -1, 1, S(8)));
    CASE("f16", Conv, &a3, 1, 0, 1e-5, trand(F16, -1, 1, S(1, 8, 12, 12)),
         trand(F16, -1, 1, S(16, 8, 3, 3)), trand(F16, -1, 1, S(16)));
}

static kiln_pool_attrs pool_at(int auto_pad, int ns, int64_t k, int64_t s, int64_t pb, int64_t pe,
                               int ceil_mode, int cip) {
    kiln_pool_attrs at;
    memset(&at, 0, sizeof at);
    at.auto_pad = auto_pad;
    at.ceil_mode = ceil_mode;
    at.count_include_pad = cip;
    at.n_kernel = at.n_strides = ns;
    at.n_pads = 2 * ns;
    for (int i = 0; i < ns; i++) {
        at.kernel[i] = k;
        at.strides[i] = s;
        at.pads[i] = pb;
        at.pads[ns + i] = pe;
    }
    return at;
}

/* ---- channels-last layers --------------------------------------------------------------- */

/* A 4-D tensor's bytes NCHW <-> NHWC (a new tensor from the test arena). */
static kiln_tensor *relayout(const kiln_tensor *t, bool to_nhwc) {
    kiln_tensor *o = tnew(t->dtype, t->rank, t->dims);
    size_t es = kiln_dtype_size(t->dtype);
    int64_t N = t->dims[0], C = t->dims[1], H = t->dims[2], W = t->dims[3];
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++) {
                    int64_t nchw = ((n * C + c) * H + h) * W + w, nhwc = ((n * H + h) * W + w) * C + c;
                    memcpy((char *)o->data + (size_t)(to_nhwc ? nhwc : nchw) * es,
                           (const char *)t->data + (size_t)(to_nhwc ? nchw : nhwc) * es, es);
                }
    return o;
}

/* Runs one layer of op `op_id` on the GPU (own node state) into y (host;
 * its shape set). */
static bool gpu_run_op(const char *node, int op_id, const void *at, int n_in, kiln_tensor *const *in,
                       kiln_tensor *y) {
    kiln_tensor din[MAXIO];
    const kiln_tensor *dinp[MAXIO] = {0};
    kiln_tensor dy = *y, *dyp = &dy;
    void *mem[MAXIO + 1] = {0};
    bool ok = n_in <= MAXIO;
    for (int i = 0; i < n_in && ok; i++) {
        if (!in[i]) continue;
        din[i] = *in[i];
        size_t b = tbytes(in[i]);
        mem[i] = be->alloc(st, b ? b : 1);
        ok = mem[i] && be->to_device(st, mem[i], in[i]->data, b) == KILN_OK;
        din[i].data = mem[i];
        dinp[i] = &din[i];
    }
    mem[MAXIO] = ok ? be->alloc(st, tbytes(y)) : NULL;
    dy.data = mem[MAXIO];
    kiln_node_state ns = {0};
    kiln_kernel_args kg = {.op = kiln__op_by_id(op_id), .attrs = at, .node_name = node,
                           .n_in = n_in, .n_out = 1, .in = dinp, .out = &dyp, .node_state = &ns};
    kiln_status s = mem[MAXIO] ? be->run(st, &kg) : KILN_ERR_OUT_OF_MEMORY;
    if (s == KILN_OK) s = be->sync(st);
    if (s == KILN_OK) s = be->to_host(st, y->data, mem[MAXIO], tbytes(y));
    if (s != KILN_OK) FAILF("%s: CUDA run failed: %s", node, kiln_last_error());
    if (ns.free) ns.free(ns.p);
    for (int i = 0; i <= MAXIO; i++) be->free(st, mem[i]);
    return ok && s == KILN_OK;
}

/* Layer `op_id` with attrs `nhwc_at` (an NHWC layout) on the GPU against
 * the CPU reference of the NCHW layer (attrs `ref_at`; fp32 copies for the
 * fused layers): inputs listed in nhwc_in (bit i) go in transposed, the
 * output comes back transposed when y_nhwc. */
static void nhwc_case(const char *what, int op_id, const void *ref_at, const void *nhwc_at, int n_in,
                      kiln_tensor *const *in, uint32_t nhwc_in, bool y_nhwc, double tol) {
    const kiln_op_def *op = kiln__op_by_id(op_id);
    char node[160];
    snprintf(node, sizeof node, "%s/%s", op->name, what);
    kiln_tinfo ti[MAXIO], to[MAXIO];
    bool supported = false;
    n_cases++;
    covered[op_id] = true;
    if (!infer_case(node, op, ref_at, n_in, in, 1, ti, to, &supported)) return;
    kiln_tensor *ref = tnew(to[0].dtype, to[0].rank, to[0].dims), *y = tnew(to[0].dtype, to[0].rank, to[0].dims);
    kiln_status s;
    bool red = in[0]->dtype == F16 || in[0]->dtype == BF16;
    if (op_id == KILN_OP_FusedConv && red) {
        s = cpu_ref_in_f32(op, ref_at, node, n_in, in, 1, &ref);
    } else {
        const kiln_tinfo *tip[MAXIO];
        kiln_tinfo *top[1] = {&to[0]};
        for (int i = 0; i < n_in; i++) tip[i] = in[i] ? &ti[i] : NULL;
        s = cpu_kernel_run(op, ref_at, node, n_in, (const kiln_tensor *const *)in, tip, 1, &ref, top);
    }
    if (s != KILN_OK) {
        FAILF("%s: CPU reference failed: %s", node, kiln_last_error());
        return;
    }
    kiln_tensor *gin[MAXIO];
    for (int i = 0; i < n_in; i++) gin[i] = in[i] && (nhwc_in >> i & 1) ? relayout(in[i], true) : in[i];
    if (!gpu_run_op(node, op_id, nhwc_at, n_in, gin, y)) return;
    if (!compare(node, 0, y->dtype, ref->data, (y_nhwc ? relayout(y, false) : y)->data, kiln__tensor_numel(y),
                 tol))
        test_failed_checks++;
}

/* NHWC MaxPool / AveragePool / GlobalAveragePool (KILN_POOL_LAYOUT_NHWC,
 * backends/cuda/cuda_layout.c) against the CPU's NCHW pooling: 16-byte vectors
 * (channels multiples of 8), and the scalar path (odd channels). */
TEST(test_pool_nhwc) {
    static const struct { int op; int k, s, pb, pe, cip; int64_t C; kiln_dtype t; const char *name; } cs[] = {
        {KILN_OP_MaxPool, 3, 2, 1, 1, 0, 64, KILN_DTYPE_FLOAT16, "max3s2_f16"},
        {KILN_OP_MaxPool, 3, 2, 1, 1, 0, 24, KILN_DTYPE_BFLOAT16, "max3s2_bf16"},
        {KILN_OP_MaxPool, 2, 2, 0, 1, 0, 5, KILN_DTYPE_FLOAT16, "max2_odd_c"},
        {KILN_OP_MaxPool, 3, 1, 1, 1, 0, 12, KILN_DTYPE_FLOAT32, "max3_f32"},
        {KILN_OP_AveragePool, 3, 2, 1, 1, 0, 16, KILN_DTYPE_FLOAT16, "avg_excl_f16"},
        {KILN_OP_AveragePool, 3, 2, 1, 0, 1, 16, KILN_DTYPE_FLOAT16, "avg_incl_f16"},
        {KILN_OP_AveragePool, 2, 2, 0, 0, 0, 7, KILN_DTYPE_BFLOAT16, "avg_odd_c"},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        kiln_pool_attrs ref = pool_at(PAD_NOTSET, 2, cs[k].k, cs[k].s, cs[k].pb, cs[k].pe, 0, cs[k].cip);
        kiln_pool_attrs nh = ref;
        nh.layout = KILN_POOL_LAYOUT_NHWC;
        kiln_tensor *x = trand(cs[k].t, -3, 3, S(2, cs[k].C, 11, 13));
        nhwc_case(cs[k].name, cs[k].op, &ref, &nh, 1, &x, 1, true, 0);
    }
    kiln_pool_attrs g0, gn;
    memset(&g0, 0, sizeof g0);
    gn = g0;
    gn.layout = KILN_POOL_LAYOUT_NHWC;
    nhwc_case("gap_f16", KILN_OP_GlobalAveragePool, &g0, &gn, 1, (kiln_tensor *[]){trand(F16, -3, 3, S(3, 2048, 7, 7))},
              1, false, 0);
    nhwc_case("gap_big_plane", KILN_OP_GlobalAveragePool, &g0, &gn, 1,
              (kiln_tensor *[]){trand(BF16, -3, 3, S(1, 64, 56, 56))}, 1, false, 0);
    nhwc_case("gap_odd_c", KILN_OP_GlobalAveragePool, &g0, &gn, 1, (kiln_tensor *[]){trand(F32, -3, 3, S(2, 45, 5, 6))},
              1, false, 0);
    /* large planes split over blocks (kcu_gap_nhwc_splits > 1), partial sums added by a second kernel:
     * EfficientNet's SE shapes (96 channels: 12 vectors per block row), 24 channels, odd channels */
    CHECK(kcu_gap_nhwc_splits(4, 56 * 56, 96) > 1 && kcu_gap_nhwc_splits(1, 40 * 40, 45) > 1);
    /* 32-bit grid-stride loops (k_pool_nhwc, k_bias_act) leave room for the loop's last step past n */
    CHECK(kcu_i32_loop(64LL * 112 * 112 * 96) && kcu_i32_loop(INT32_MAX - (int64_t)KCU_THREADS * KCU_MAX_BLOCKS));
    CHECK(!kcu_i32_loop(INT32_MAX - 1000000LL) && !kcu_i32_loop(INT32_MAX) && !kcu_i32_loop(-1));
    nhwc_case("gap_split_c96_f16", KILN_OP_GlobalAveragePool, &g0, &gn, 1,
              (kiln_tensor *[]){trand(F16, -3, 3, S(4, 96, 56, 56))}, 1, false, 0);
    nhwc_case("gap_split_c24_bf16", KILN_OP_GlobalAveragePool, &g0, &gn, 1,
              (kiln_tensor *[]){trand(BF16, -3, 3, S(3, 24, 30, 31))}, 1, false, 0);
    nhwc_case("gap_split_odd_c_f32", KILN_OP_GlobalAveragePool, &g0, &gn, 1,
              (kiln_tensor *[]){trand(F32, -3, 3, S(1, 45, 40, 40))}, 1, false, 0);
    /* batch 1 (MobileNetV3-Large's squeeze-excite planes and its last pool, EfficientNet-B0's first SE
     * plane): splits of one channel block that form a thread-block cluster (sm_90: one launch, the sums
     * added through distributed shared memory), 7 x 7 planes (8 splits of 7 positions: the last one empty),
     * 3 x 3 and 5 x 5 ones (clusters of 2 and 4), and a plane whose
     * splits outnumber a cluster (partial sums and the second kernel) */
    CHECK(kcu_gap_nhwc_splits(1, 28 * 28, 72) == KCU_GAP_CLUSTER && kcu_gap_nhwc_splits(1, 7 * 7, 960) == 8);
    CHECK(kcu_gap_nhwc_splits(1, 3 * 3, 960) == 2 && kcu_gap_nhwc_splits(1, 5 * 5, 960) == 4);
    CHECK(kcu_gap_nhwc_splits(1, 112 * 112, 32) > KCU_GAP_CLUSTER && kcu_gap_nhwc_splits(64, 7 * 7, 2048) == 1);
    CHECK(kcu_gap_nhwc_cluster(8, 1) && !kcu_gap_nhwc_cluster(8, 0) && !kcu_gap_nhwc_cluster(1, 1) &&
          !kcu_gap_nhwc_cluster(KCU_GAP_CLUSTER + 1, 1));
    {
        static const struct { int64_t N, C, H, W; kiln_dtype t; const char *name; } gs[] = {
            {1, 72, 28, 28, KILN_DTYPE_FLOAT16, "gap_b1_c72_28"},     {1, 120, 28, 28, KILN_DTYPE_FLOAT16, "gap_b1_c120_28"},
            {1, 480, 14, 14, KILN_DTYPE_FLOAT16, "gap_b1_c480_14"},   {1, 960, 7, 7, KILN_DTYPE_FLOAT16, "gap_b1_c960_7"},
            {1, 672, 7, 7, KILN_DTYPE_BFLOAT16, "gap_b1_c672_7_bf16"}, {1, 32, 112, 112, KILN_DTYPE_FLOAT16, "gap_b1_c32_112"},
            {2, 40, 14, 14, KILN_DTYPE_FLOAT32, "gap_b2_c40_f32"},    {1, 44, 9, 9, KILN_DTYPE_FLOAT16, "gap_b1_c44_odd"},
            {32, 960, 7, 7, KILN_DTYPE_FLOAT16, "gap_b32_c960_7"},    {32, 72, 28, 28, KILN_DTYPE_FLOAT16, "gap_b32_c72_28"},
            {1, 960, 3, 3, KILN_DTYPE_FLOAT16, "gap_b1_c960_3"},      {1, 512, 5, 5, KILN_DTYPE_BFLOAT16, "gap_b1_c512_5"},
        };
        kiln_cuda_state *cst = st;
        const bool keep = cst->gap_clusters;
        for (int pass = 0; pass < 2; pass++) {
            /* pass 0: with clusters where the device has them (the default; KILN_CUDA_GAP_CLUSTER=0 turns them
             * off); pass 1: without (partial sums and the second kernel at every split count) */
            cst->gap_clusters = pass == 0 ? cst->cc_major >= 9 : false;
            for (size_t k = 0; k < sizeof gs / sizeof gs[0]; k++) {
                char nm[64];
                snprintf(nm, sizeof nm, "%s%s", gs[k].name, pass ? "_nocluster" : "");
                nhwc_case(nm, KILN_OP_GlobalAveragePool, &g0, &gn, 1,
                          (kiln_tensor *[]){trand(gs[k].t, -3, 3, S(gs[k].N, gs[k].C, gs[k].H, gs[k].W))}, 1, false,
                          0);
            }
        }
        cst->gap_clusters = keep;
    }
    /* more images than a grid's y extent holds (65535): the batch shares blockIdx.x with the channel blocks */
    nhwc_case("gap_batch_70000_f16", KILN_OP_GlobalAveragePool, &g0, &gn, 1,
              (kiln_tensor *[]){trand(F16, -3, 3, S(70000, 16, 2, 2))}, 1, false, 0);
}

TEST(test_pool) {
    kiln_pool_attrs m = pool_at(PAD_NOTSET, 2, 3, 2, 1, 1, 0, 0);
    CASE("max3s2", MaxPool, &m, 1, 0, 0, specials(trand(F32, -3, 3, S(2, 3, 11, 12))));
    /* NaN/inf in reduced precision (issue 20): a window with a NaN gives NaN */
    CASE("max3s2_nan_f16", MaxPool, &m, 1, 0, 0, specials(trand(F16, -3, 3, S(2, 3, 11, 12))));
    CASE("max3s2_nan_bf16", MaxPool, &m, 1, 0, 0, specials(trand(BF16, -3, 3, S(1, 4, 9, 10))));
    CASE("max_indices", MaxPool, &m, 2, 0, 0, trand(F32, -3, 3, S(1, 2, 8, 8)));
    kiln_pool_attrs mc = pool_at(PAD_NOTSET, 2, 2, 2, 0, 0, 1, 0);
    CASE("max_ceil", MaxPool, &mc, 1, 0, 0, trand(F16, -3, 3, S(1, 3, 7, 9)));
    kiln_pool_attrs a0 = pool_at(PAD_NOTSET, 2, 3, 1, 1, 1, 0, 0), a1 = pool_at(PAD_NOTSET, 2, 3, 1, 1, 1, 0, 1);
    CASE("avg_excl", AveragePool, &a0, 1, 0, 0, trand(F32, -3, 3, S(2, 3, 6, 7)));
    CASE("avg_incl", AveragePool, &a1, 1, 0, 0, trand(F32, -3, 3, S(2, 3, 6, 7)));
    kiln_pool_attrs a3 = pool_at(PAD_SAME_UPPER, 3, 2, 2, 0, 0, 0, 0);
    CASE("avg_3d_same", AveragePool, &a3, 1, 0, 0, trand(F32, -3, 3, S(1, 2, 5, 6, 7)));
    kiln_pool_attrs m1 = pool_at(PAD_NOTSET, 1, 4, 3, 0, 2, 0, 0);
    CASE("max_1d", MaxPool, &m1, 1, 0, 0, trand(BF16, -3, 3, S(2, 3, 20)));
    kiln_pool_attrs so = m;
    so.storage_order = 1;
    REFUSE("col_major_indices", MaxPool, &so, 2, trand(F32, -3, 3, S(1, 2, 8, 8)));
}

TEST(test_norm) {
    kiln_bn_attrs bn = {1e-5f, 1};
    CASE("bn", BatchNormalization, &bn, 1, 0, 1e-10, trand(F32, -3, 3, S(2, 3, 4, 5)),
         trand(F32, 0.5, 2, S(3)), trand(F32, -1, 1, S(3)), trand(F32, -1, 1, S(3)),
         trand(F32, 0.1, 2, S(3)));
    CASE("bn_f16", BatchNormalization, &bn, 1, 0, 0, trand(F16, -3, 3, S(2, 8, 7)),
         trand(F32, 0.5, 2, S(8)), trand(F32, -1, 1, S(8)), trand(F32, -1, 1, S(8)),
         trand(F32, 0.1, 2, S(8)));
    CASE("bn_f64", BatchNormalization, &bn, 1, 0, 0, trand(F64, -3, 3, S(3, 2)),
         trand(F64, 0.5, 2, S(2)), trand(F64, -1, 1, S(2)), trand(F64, -1, 1, S(2)),
         trand(F64, 0.1, 2, S(2)));
    kiln_ln_attrs ln = {-1, 1e-5f, 1}, ln1 = {1, 1e-5f, 1};
    CASE("ln_last", LayerNormalization, &ln, 1, 0, 1e-10, trand(F32, -3, 3, S(4, 7, 33)),
         trand(F32, 0.5, 2, S(33)), trand(F32, -1, 1, S(33)));
    CASE("ln_bert", LayerNormalization, &ln, 1, 0, 1e-10, trand(F32, -3, 3, S(2, 16, 768)),
         trand(F32, 0.5, 2, S(768)), trand(F32, -1, 1, S(768)));
    CASE("ln_wide", LayerNormalization, &ln, 1, 0, 1e-10, trand(F32, -3, 3, S(3, 5000)),
         trand(F32, 0.5, 2, S(5000)), trand(F32, -1, 1, S(5000)));
    CASE("ln_axis1_stats", LayerNormalization, &ln1, 3, 0, 1e-10, trand(F32, -3, 3, S(3, 4, 5)),
         trand(F32, 0.5, 2, S(4, 5)));
    CASE("ln_f16", LayerNormalization, &ln, 1, 0, 0, trand(F16, -3, 3, S(6, 64)),
         trand(F16, 0.5, 2, S(64)), trand(F16, -1, 1, S(64)));
    /* the fp16/bf16 warp-per-row kernel (values in registers): BERT's width, a
     * partial last vector per lane, the widest, the statistics outputs, no bias */
    CASE("ln_bert_f16", LayerNormalization, &ln, 1, 0, 0, trand(F16, -3, 3, S(3, 43, 768)),
         trand(F16, 0.5, 2, S(768)), trand(F16, -1, 1, S(768)));
    CASE("ln_264_bf16_stats", LayerNormalization, &ln, 3, 0, 0, trand(BF16, -3, 3, S(9, 264)),
         trand(BF16, 0.5, 2, S(264)), trand(BF16, -1, 1, S(264)));
    CASE("ln_1600_f16_nobias", LayerNormalization, &ln, 1, 0, 0, trand(F16, -3, 3, S(5, 1600)),
         trand(F16, 0.5, 2, S(1600)));
    /* more than 1024 rows: 4 rows per block (fewer: a warp per block) */
    CASE("ln_rows1200_f16", LayerNormalization, &ln, 1, 0, 0, trand(F16, -3, 3, S(3, 400, 256)),
         trand(F16, 0.5, 2, S(256)), trand(F16, -1, 1, S(256)));

    /* kiln.AddLayerNorm (src/ops/fused_norm.h): Y = LN(A + R), Sum = A + R
     * rounded to the type, as an output or not; R of A's shape or repeating
     * over leading dims (BERT's position embeddings); the vectorized kernel
     * (fp16/bf16, D = 8k <= 2048: one warp per block up to 1024 rows, then 4)
     * and the general one (fp32, odd widths, scalar Scale) */
    kiln_add_ln_attrs aln = {-1, 1e-5f}, aln1 = {1, 1e-6f};
    CASE("aln_bert_b1_f16", AddLayerNorm, &aln, 1, 0, 0, trand(F16, -3, 3, S(1, 128, 768)),
         trand(F16, -3, 3, S(1, 128, 768)), trand(F16, 0.5, 2, S(768)), trand(F16, -1, 1, S(768)));
    CASE("aln_bert_sum_f16", AddLayerNorm, &aln, 2, 0, 0, trand(F16, -3, 3, S(2, 128, 768)),
         trand(F16, -3, 3, S(2, 128, 768)), trand(F16, 0.5, 2, S(768)), trand(F16, -1, 1, S(768)));
    CASE("aln_pos_rows_bf16", AddLayerNorm, &aln, 1, 0, 0, trand(BF16, -3, 3, S(3, 40, 768)),
         trand(BF16, -3, 3, S(1, 40, 768)), trand(BF16, 0.5, 2, S(768)), trand(BF16, -1, 1, S(768)));
    CASE("aln_1024_sum_bf16", AddLayerNorm, &aln, 2, 0, 0, trand(BF16, -3, 3, S(2, 9, 1024)),
         trand(BF16, -3, 3, S(2, 9, 1024)), trand(BF16, 0.5, 2, S(1024)), trand(BF16, -1, 1, S(1024)));
    CASE("aln_rows1200_sum_f16", AddLayerNorm, &aln, 2, 0, 0, trand(F16, -3, 3, S(30, 40, 64)),
         trand(F16, -3, 3, S(40, 64)), trand(F16, 0.5, 2, S(64)), trand(F16, -1, 1, S(64)));
    CASE("aln_1600_nobias_f16", AddLayerNorm, &aln, 1, 0, 0, trand(F16, -3, 3, S(5, 1600)),
         trand(F16, -3, 3, S(5, 1600)), trand(F16, 0.5, 2, S(1600)));
    CASE("aln_odd100_sum_f16", AddLayerNorm, &aln, 2, 0, 0, trand(F16, -3, 3, S(7, 100)),
         trand(F16, -3, 3, S(7, 100)), trand(F16, 0.5, 2, S(100)), trand(F16, -1, 1, S(100)));
    CASE("aln_768_sum_f32", AddLayerNorm, &aln, 2, 0, 1e-10, trand(F32, -3, 3, S(2, 16, 768)),
         trand(F32, -3, 3, S(16, 768)), trand(F32, 0.5, 2, S(768)), trand(F32, -1, 1, S(768)));
    CASE("aln_odd37_scalar_f32", AddLayerNorm, &aln, 1, 0, 1e-10, trand(F32, -3, 3, S(5, 37)),
         trand(F32, -3, 3, S(5, 37)), trand(F32, 0.5, 2, S(1)));
    CASE("aln_wide3000_f32", AddLayerNorm, &aln, 2, 0, 1e-10, trand(F32, -3, 3, S(3, 3000)),
         trand(F32, -3, 3, S(3, 3000)), trand(F32, 0.5, 2, S(3000)), trand(F32, -1, 1, S(3000)));
    CASE("aln_axis1_f32", AddLayerNorm, &aln1, 1, 0, 1e-10, trand(F32, -3, 3, S(4, 6, 5)),
         trand(F32, -3, 3, S(6, 5)), trand(F32, 0.5, 2, S(6, 5)), trand(F32, -1, 1, S(6, 5)));

    /* RMSNormalization (opset 23; fuse_rmsnorm makes it from T5's and LLaMA's
     * exports): the vectorized fp16/bf16 kernel (D = 8k <= 2048: T5's 512,
     * more than 1024 rows, the widest), the general ones (fp16 past 2048 and
     * at an odd width, fp32 warp and block rows, a scalar scale, axis 1,
     * fp64); a float16 X with a float32 scale is left to the CPU */
    kiln_ln_attrs rms = {-1, 1e-6f, 1}, rms1 = {1, 1e-5f, 1};
    CASE("rms_t5_f16", RMSNormalization, &rms, 1, 0, 0, trand(F16, -3, 3, S(1, 128, 512)),
         trand(F16, 0.5, 2, S(512)));
    CASE("rms_rows1200_bf16", RMSNormalization, &rms, 1, 0, 0, trand(BF16, -3, 3, S(30, 40, 256)),
         trand(BF16, 0.5, 2, S(256)));
    CASE("rms_2048_bf16", RMSNormalization, &rms, 1, 0, 0, trand(BF16, -3, 3, S(3, 2048)),
         trand(BF16, 0.5, 2, S(2048)));
    CASE("rms_4096_f16", RMSNormalization, &rms, 1, 0, 0, trand(F16, -3, 3, S(2, 4096)),
         trand(F16, 0.5, 2, S(4096)));
    CASE("rms_odd100_f16", RMSNormalization, &rms, 1, 0, 0, trand(F16, -3, 3, S(7, 100)),
         trand(F16, 0.5, 2, S(100)));
    CASE("rms_512_f32", RMSNormalization, &rms, 1, 0, 1e-10, trand(F32, -3, 3, S(2, 16, 512)),
         trand(F32, 0.5, 2, S(512)));
    CASE("rms_wide3000_f32", RMSNormalization, &rms, 1, 0, 1e-10, trand(F32, -3, 3, S(3, 3000)),
         trand(F32, 0.5, 2, S(3000)));
    CASE("rms_scalar_f32", RMSNormalization, &rms, 1, 0, 1e-10, trand(F32, -3, 3, S(5, 37)),
         trand(F32, 0.5, 2, S(1)));
    CASE("rms_axis1_f32", RMSNormalization, &rms1, 1, 0, 1e-10, trand(F32, -3, 3, S(4, 6, 5)),
         trand(F32, 0.5, 2, S(6, 5)));
    CASE("rms_f64", RMSNormalization, &rms, 1, 0, 0, trand(F64, -3, 3, S(3, 20)), trand(F64, 0.5, 2, S(20)));
    REFUSE("rms_mixed_types", RMSNormalization, &rms, 1, trand(F16, -3, 3, S(2, 64)), trand(F32, 0.5, 2, S(64)));
}

TEST(test_softmax) {
    kiln_softmax_attrs last = {-1, 0}, ax1 = {1, 0}, legacy = {1, 1};
    CASE("last", Softmax, &last, 1, 0, 1e-10, trand(F32, -5, 5, S(4, 100)));
    CASE("wide", Softmax, &last, 1, 0, 1e-10, trand(F32, -5, 5, S(3, 2000)));
    CASE("strided", Softmax, &ax1, 1, 0, 1e-10, trand(F32, -5, 5, S(2, 5, 7)));
    CASE("legacy_2d", Softmax, &legacy, 1, 0, 1e-10, trand(F32, -5, 5, S(2, 3, 4)));
    CASE("f16", Softmax, &last, 1, 0, 0, trand(F16, -5, 5, S(8, 128)));
    CASE("log", LogSoftmax, &last, 1, 0, 1e-10, trand(F32, -5, 5, S(6, 30)));
    CASE("log_strided", LogSoftmax, &ax1, 1, 0, 1e-10, trand(F32, -5, 5, S(2, 9, 3)));
    /* NaN/inf (issue 20): a row with a NaN or +inf is NaN (its max and sum), -inf weighs 0 */
    CASE("last_nan", Softmax, &last, 1, 0, 1e-10, specials(trand(F32, -5, 5, S(4, 100))));
    CASE("wide_nan", Softmax, &last, 1, 0, 1e-10, specials(trand(F32, -5, 5, S(3, 2000))));
    CASE("strided_nan", Softmax, &ax1, 1, 0, 1e-10, specials(trand(F32, -5, 5, S(2, 5, 7))));
    CASE("f16_nan", Softmax, &last, 1, 0, 0, specials(trand(F16, -5, 5, S(8, 128))));
    CASE("log_nan", LogSoftmax, &last, 1, 0, 1e-10, specials(trand(F32, -5, 5, S(6, 30))));
}

TEST(test_reduce) {
    kiln_reduce_attrs keep = {1, 0}, drop = {0, 0}, noop = {1, 1};
    CASE("mean_last", ReduceMean, &keep, 1, 0x2, 0, trand(F32, -3, 3, S(8, 768)), tvals(I64, V(-1)));
    CASE("sum_02", ReduceSum, &drop, 1, 0x2, 0, trand(F32, -3, 3, S(3, 4, 5)), tvals(I64, V(0, 2)));
    CASE("sum_all", ReduceSum, &drop, 1, 0, 0, trand(F32, -3, 3, S(3, 4, 5)));
    CASE("noop", ReduceSum, &noop, 1, 0, 0, trand(F32, -3, 3, S(3, 4)));
    CASE("max_nan", ReduceMax, &keep, 1, 0x2, 0, specials(trand(F32, -3, 3, S(6, 40))), tvals(I64, V(1)));
    CASE("min_col", ReduceMin, &keep, 1, 0x2, 0, trand(F32, -3, 3, S(40, 6)), tvals(I64, V(0)));
    /* NaN/inf (issue 20): max and min propagate NaN in every type and layout */
    CASE("max_nan_f16", ReduceMax, &keep, 1, 0x2, 0, specials(trand(F16, -3, 3, S(6, 40))), tvals(I64, V(1)));
    CASE("min_col_nan", ReduceMin, &keep, 1, 0x2, 0, specials(trand(F32, -3, 3, S(40, 6))), tvals(I64, V(0)));
    CASE("max_all_nan_bf16", ReduceMax, &drop, 1, 0, 0, specials(trand(BF16, -3, 3, S(3, 70))));
    CASE("sum_f16", ReduceSum, &keep, 1, 0x2, 0, trand(F16, -3, 3, S(4, 50)), tvals(I64, V(1)));
    CASE("mean_bf16_mid", ReduceMean, &drop, 1, 0x2, 0, trand(BF16, -3, 3, S(3, 7, 9)), tvals(I64, V(1)));
    CASE("l1", ReduceL1, &keep, 1, 0x2, 0, trand(F32, -3, 3, S(5, 9)), tvals(I64, V(1)));
    CASE("l2", ReduceL2, &keep, 1, 0x2, 0, trand(F32, -3, 3, S(5, 9)), tvals(I64, V(0, 1)));
    CASE("logsum", ReduceLogSum, &keep, 1, 0x2, 0, trand(F32, 0.1, 3, S(5, 9)), tvals(I64, V(1)));
    CASE("logsumexp", ReduceLogSumExp, &keep, 1, 0x2, 0, trand(F32, -3, 3, S(5, 64)), tvals(I64, V(1)));
    CASE("sumsquare", ReduceSumSquare, &drop, 1, 0x2, 0, trand(F32, -3, 3, S(2, 3, 4)), tvals(I64, V(-1, 0)));
    CASE("prod", ReduceProd, &keep, 1, 0x2, 0, trand(F32, 0.9, 1.1, S(4, 33)), tvals(I64, V(1)));
    CASE("mean_block", ReduceMean, &keep, 1, 0x2, 0, trand(F32, -3, 3, S(2, 10000)), tvals(I64, V(1)));
    CASE("f64", ReduceSum, &keep, 1, 0x2, 0, trand(F64, -3, 3, S(3, 100)), tvals(I64, V(1)));
}

/* Kernels that keep state between runs (cuBLASLt plans, cuDNN plans):
 * the same node state across runs at the same and at other shapes. */
TEST(test_node_state) {
    kiln_node_state ns;
    memset(&ns, 0, sizeof ns);
    case_ns = &ns;
    for (int rep = 0; rep < 2; rep++) {
        CASE("state_a", MatMul, NULL, 1, 0, 1e-10, trand(F32, -1, 1, S(5, 7)), trand(F32, -1, 1, S(7, 3)));
        CASE("state_b", MatMul, NULL, 1, 0, 1e-10, trand(F32, -1, 1, S(2, 9, 7)), trand(F32, -1, 1, S(7, 4)));
        CASE("state_f16", MatMul, NULL, 1, 0, 1e-5, trand(F16, -1, 1, S(64, 32)), trand(F16, -1, 1, S(32, 48)));
    }
    CHECK(ns.p != NULL && ns.free != NULL);
    if (ns.free) ns.free(ns.p);
    memset(&ns, 0, sizeof ns);
    kiln_conv_attrs a3 = conv_at(PAD_NOTSET, 1, 2, 3, 1, 1, 1, 1);
    for (int rep = 0; rep < 2; rep++) {
        CASE("state_3x3", Conv, &a3, 1, 0, 1e-9, trand(F32, -1, 1, S(2, 3, 9, 11)),
             trand(F32, -1, 1, S(8, 3, 3, 3)), trand(F32, -1, 1, S(8)));
        CASE("state_3x3_n1", Conv, &a3, 1, 0, 1e-9, trand(F32, -1, 1, S(1, 3, 12, 10)),
             trand(F32, -1, 1, S(8, 3, 3, 3)), trand(F32, -1, 1, S(8)));
        CASE("state_f16", Conv, &a3, 1, 0, 1e-5, trand(F16, -1, 1, S(1, 8, 12, 12)),
             trand(F16, -1, 1, S(16, 8, 3, 3)), trand(F16, -1, 1, S(16)));
    }
    CHECK(ns.p != NULL && ns.free != NULL);
    if (ns.free) ns.free(ns.p);
    case_ns = NULL;
}

/* An engine whose device layers read host inputs (op->host_inputs: Slice's
 * starts/ends/axes/steps, a Reshape's shape) that are constants: torch
 * 1.13's tiny Swin Transformer (tests/data/gen_swin.py), built with
 * merge_movement off (`pass_off`) so that PatchMerging's strided Slices
 * stay, and with it on (its Gathers of rows). The kernels get
 * the host copies, so a run copies nothing back (the output comes to the
 * host when it is read): against the emulated runtime the device-to-host
 * copies of a run are counted (none; 24 when the kernels got the device
 * copies); on a GPU a CUDA Graph is captured by the second run (a copy back
 * would synchronize and end the capture). Both agree with the CPU engine. */
#if KILN_CUDA_EMU
KILN_PRIVATE int kiln_emu_dtoh_count(void);
KILN_PRIVATE int kiln_emu_gemv_count(void);
KILN_PRIVATE int kiln_emu_se_count(void);
KILN_PRIVATE int kiln_emu_lt_epilogue_count(int ep);
#endif
static float *engine_run_swin(kiln_device dev, const char *pass_off, int runs, int *dtoh, bool *graph) {
    kiln_model *m = NULL;
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    float *y = NULL;
    CHECK_OK(kiln_model_load_onnx("tests/data/attention/swin_t113_b1.onnx", &m));
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_device(b, dev, 0));
    if (pass_off) CHECK_OK(kiln_builder_disable_pass(b, pass_off));
    if (m && b && kiln_build(b, m, &e) == KILN_OK && kiln_context_create(e, &c) == KILN_OK) {
        int64_t dims[4] = {1, 3, 56, 56};
        float *x = malloc(sizeof(float) * 3 * 56 * 56);
        uint64_t r = 12345;
        for (int i = 0; i < 3 * 56 * 56; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        }
        /* on the device (a CUDA Graph needs device inputs) */
        void *dx = NULL;
        size_t nx = sizeof(float) * 3 * 56 * 56;
        if (dev == KILN_DEVICE_CUDA) {
            CHECK(cudaMalloc(&dx, nx) == cudaSuccess);
            CHECK(cudaMemcpy(dx, x, nx, cudaMemcpyHostToDevice) == cudaSuccess);
        }
        CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 4, dims, dx ? dx : x));
        for (int k = 0; k < runs; k++) {
#if KILN_CUDA_EMU
            int before = kiln_emu_dtoh_count();
#endif
            CHECK_OK(kiln_context_run(c));
#if KILN_CUDA_EMU
            *dtoh = kiln_emu_dtoh_count() - before;
#else
            (void)dtoh;
#endif
        }
        *graph = kiln__context_graph_active(c);
        const void *data = NULL;
        kiln_dtype t;
        int rank = 0;
        int64_t od[KILN_MAX_RANK];
        CHECK_OK(kiln_context_get_output(c, "y", &t, &rank, od, &data));
        if (data && t == KILN_DTYPE_FLOAT32 && rank == 2 && od[0] == 1 && od[1] == 10) {
            y = malloc(sizeof(float) * 10);
            memcpy(y, data, sizeof(float) * 10);
        }
        cudaFree(dx);
        free(x);
    } else {
        FAILF("swin engine for device %d: %s", (int)dev, kiln_last_error());
    }
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_builder_free(b);
    kiln_model_free(m);
    return y;
}

/* The Swin engine on the CPU and on the device, merge_movement off or on (pass_off). */
static void check_swin_host_inputs(const char *pass_off) {
    int dtoh = -1;
    bool graph = false, unused;
    float *ref = engine_run_swin(KILN_DEVICE_CPU, pass_off, 1, &dtoh, &unused);
    float *y = engine_run_swin(KILN_DEVICE_CUDA, pass_off, 3, &dtoh, &graph);
    CHECK(ref && y);
    if (ref && y) {
        double num = 0, den = 0;
        for (int i = 0; i < 10; i++) {
            num += (double)(y[i] - ref[i]) * (y[i] - ref[i]);
            den += (double)ref[i] * ref[i];
        }
        if (!(den > 0 && num <= 1e-8 * den)) FAILF("swin: CUDA vs CPU NMSE %g", den > 0 ? num / den : -1.0);
    }
#if KILN_CUDA_EMU
    if (dtoh != 0) FAILF("swin: %d device-to-host copies in a run, want 0", dtoh);
    (void)graph;
#else
    /* KILN_CUDA_SYNC=1 (a debugging mode that syncs after every layer) never
     * captures a graph (cuda_backend.c refuses it), so there is none to find */
    if (!graph && !kiln__env_flag("KILN_CUDA_SYNC")) FAILF("swin: no CUDA Graph captured after 3 runs");
#endif
    free(ref);
    free(y);
}

TEST(test_engine_host_inputs) {
    if (!kiln__backend_for(KILN_DEVICE_CUDA)) {
        printf("  (no CUDA backend in the registry: skipped)\n");
        return;
    }
    check_swin_host_inputs("merge_movement"); /* PatchMerging's Slices kept */
    check_swin_host_inputs(NULL);
}

/* A context whose caller binds other device buffers at each run (two in turn, as torch's
 * allocator hands them) and then host ones (graph_stage_io: such inputs are read from the
 * context's copy and such outputs written to its memory, then copied): every run's output equals
 * the CPU engine's for that run's input, lands in the buffer bound for that run, and leaves the
 * other buffer as it was. On a GPU the runs from the third on replay a CUDA Graph
 * (test_cuda_engine's graphs_new_buffers checks that); the emulation, which captures none, runs
 * the staging and the copies under ASan. */
TEST(test_engine_changing_buffers) {
    if (!kiln__backend_for(KILN_DEVICE_CUDA)) {
        printf("  (no CUDA backend in the registry: skipped)\n");
        return;
    }
    enum { N = 3, NX = N * 16, NY = N * 8 };
    kiln_model *m = NULL;
    kiln_engine *e[2] = {NULL, NULL}; /* CPU, device */
    CHECK_OK(kiln_model_load_onnx("tests/data/tiny_mlp.onnx", &m));
    for (int d = 0; d < 2 && m; d++) {
        kiln_builder *b = NULL;
        int64_t sh[2] = {N, 16};
        CHECK_OK(kiln_builder_create(&b));
        if (!b) break;
        CHECK_OK(kiln_builder_set_profile(b, "x", 2, sh, sh, sh));
        CHECK_OK(kiln_builder_set_device(b, d ? KILN_DEVICE_CUDA : KILN_DEVICE_CPU, 0));
        CHECK_OK(kiln_build(b, m, &e[d]));
        kiln_builder_free(b);
    }
    kiln_context *c[2] = {NULL, NULL};
    float *dx[2] = {NULL, NULL}, *dy[2] = {NULL, NULL};
    for (int d = 0; d < 2; d++) {
        if (e[d]) CHECK_OK(kiln_context_create(e[d], &c[d]));
        CHECK(cudaMalloc((void **)&dx[d], sizeof(float) * NX) == cudaSuccess);
        CHECK(cudaMalloc((void **)&dy[d], sizeof(float) * NY) == cudaSuccess);
    }
    const int64_t dims[2] = {N, 16};
    float x[NX], want[NY], y[NY], other[NY], mark[NY];
    for (int i = 0; i < NY; i++) mark[i] = -1234.5f;
    for (int r = 0; c[0] && c[1] && dx[1] && dy[1] && r < 8; r++) {
        const bool host = r >= 5; /* runs 0-4: device buffers in turn; 5-7: host buffers */
        for (int i = 0; i < NX; i++) x[i] = sinf(0.31f * (float)i + 0.9f * (float)r);
        CHECK_OK(kiln_context_set_input(c[0], "x", KILN_DTYPE_FLOAT32, 2, dims, x));
        CHECK_OK(kiln_context_set_output(c[0], "y", want, sizeof want));
        CHECK_OK(kiln_context_run(c[0]));
        const int k = r % 2;
        if (host) {
            memcpy(y, mark, sizeof y);
            CHECK_OK(kiln_context_set_input(c[1], "x", KILN_DTYPE_FLOAT32, 2, dims, x));
            CHECK_OK(kiln_context_set_output(c[1], "y", y, sizeof y));
        } else {
            CHECK(cudaMemcpy(dx[k], x, sizeof x, cudaMemcpyHostToDevice) == cudaSuccess);
            for (int j = 0; j < 2; j++) CHECK(cudaMemcpy(dy[j], mark, sizeof mark, cudaMemcpyHostToDevice) == cudaSuccess);
            CHECK_OK(kiln_context_set_input(c[1], "x", KILN_DTYPE_FLOAT32, 2, dims, dx[k]));
            CHECK_OK(kiln_context_set_output(c[1], "y", dy[k], sizeof(float) * NY));
        }
        CHECK_OK(kiln_context_run(c[1]));
        if (!host) {
            CHECK(cudaMemcpy(y, dy[k], sizeof y, cudaMemcpyDeviceToHost) == cudaSuccess);
            CHECK(cudaMemcpy(other, dy[1 - k], sizeof other, cudaMemcpyDeviceToHost) == cudaSuccess);
            if (memcmp(other, mark, sizeof mark)) FAILF("run %d: the other output buffer was written", r);
        }
        double md = 0;
        for (int i = 0; i < NY; i++) md = fmax(md, fabs((double)y[i] - want[i]));
        if (!(md < 1e-5)) FAILF("run %d (%s buffers): max abs diff %g from the CPU engine", r, host ? "host" : "device", md);
    }
    for (int d = 0; d < 2; d++) {
        kiln_context_free(c[d]);
        kiln_engine_free(e[d]);
        cudaFree(dx[d]);
        cudaFree(dy[d]);
    }
    kiln_model_free(m);
}

/* BERT's two attention layers (torch 2.11's TorchScript export, SDPA
 * attention: both read one bool padding cond [2, 1, 8, 8] that adds -inf)
 * built for `dev` at precision p (pass_off: a pass switched off), run on
 * token ids and a padding mask (the second sequence's last 3 tokens masked
 * out); its output [2, 8, 32] into y (true: it ran). *n_cond gets the
 * engine's Attention layers that read the cond, *n_mask those that read an
 * additive mask [2, 1, 1, 8] (made from the padding mask the cond is
 * broadcast from) made by a layer named after the shared mask
 * (share_attention_mask), *n_made the layers making one. */
static bool bert_mask_run(kiln_device dev, kiln_precision p, const char *pass_off, float *y, int *n_cond,
                          int *n_mask, int *n_made) {
    kiln_model *m = NULL;
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    kiln_context *ctx = NULL;
    bool ok = false;
    int64_t dims[2] = {2, 8}, ids[16], mask[16];
    for (int i = 0; i < 16; i++) {
        ids[i] = (i * 37 + 11) % 64;
        mask[i] = i >= 13 ? 0 : 1;
    }
    *n_cond = *n_mask = *n_made = 0;
    CHECK_OK(kiln_model_load_onnx("tests/data/attention/t211_ts_hf_bert_sdpa.onnx", &m));
    CHECK_OK(kiln_builder_create(&b));
    if (m && b) {
        CHECK_OK(kiln_builder_set_profile(b, "input_ids", 2, dims, dims, dims));
        CHECK_OK(kiln_builder_set_profile(b, "attention_mask", 2, dims, dims, dims));
        CHECK_OK(kiln_builder_set_device(b, dev, 0));
        CHECK_OK(kiln_builder_set_precision(b, p));
        if (pass_off) CHECK_OK(kiln_builder_disable_pass(b, pass_off));
    }
    if (m && b && kiln_build(b, m, &e) == KILN_OK && kiln_context_create(e, &ctx) == KILN_OK) {
        const kiln_graph *g = e->graph;
        for (int i = 0; i < g->n_nodes; i++) {
            const kiln_node *n = &g->nodes[i];
            *n_made += strstr(n->name, "/kiln_attn_mask") != NULL;
            if (n->op_id != KILN_OP_Attention) continue;
            *n_cond += n->n_in > 4 && n->in[4] >= 0;
            int pm = n->n_in > 3 && n->in[3] >= 0 ? g->values[n->in[3]].producer : -1;
            if (pm < 0 || !strstr(g->nodes[pm].name, "/kiln_attn_mask")) continue;
            const kiln_tinfo *mi = &g->values[n->in[3]].info;
            *n_mask += mi->rank == 4 && mi->dims[0] == 2 && mi->dims[1] == 1 && mi->dims[2] == 1 && mi->dims[3] == 8;
        }
        CHECK_OK(kiln_context_set_input(ctx, "input_ids", KILN_DTYPE_INT64, 2, dims, ids));
        CHECK_OK(kiln_context_set_input(ctx, "attention_mask", KILN_DTYPE_INT64, 2, dims, mask));
        CHECK_OK(kiln_context_set_output(ctx, "y", y, sizeof(float) * 2 * 8 * 32));
        for (int k = 0; k < 3; k++) CHECK_OK(kiln_context_run(ctx)); /* (a CUDA Graph from the second on a GPU) */
        ok = true;
    } else {
        FAILF("BERT engine for device %d: %s", (int)dev, kiln_last_error());
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
    kiln_builder_free(b);
    kiln_model_free(m);
    return ok;
}

/* share_attention_mask (issue 21): in an fp16/bf16 device engine, BERT's
 * layers read one additive mask made once per run from their shared bool
 * cond (one layer makes it), instead of converting the cond each (cuDNN's
 * fused attention did, once per layer), and made from the [B, 1, 1, S]
 * padding mask the cond broadcasts (And with an all-true constant), one row
 * of keys per batch rather than [B, 1, S, S]; the outputs agree with the CPU's
 * fp32 engine (which keeps the cond) and with the device engine without
 * the pass. */
TEST(test_shared_attention_mask) {
    if (!kiln__backend_for(KILN_DEVICE_CUDA)) {
        printf("  (no CUDA backend in the registry: skipped)\n");
        return;
    }
    static float ref[512], y[512], y0[512], yf[512];
    int nc, nm, nd;
    CHECK(bert_mask_run(KILN_DEVICE_CPU, KILN_PRECISION_FP32, NULL, ref, &nc, &nm, &nd));
    CHECK(nc == 2 && nm == 0 && nd == 0); /* fp32 plans keep the cond */
    for (int p = 0; p < 2; p++) {
        kiln_precision pr = p ? KILN_PRECISION_BF16 : KILN_PRECISION_FP16;
        CHECK(bert_mask_run(KILN_DEVICE_CUDA, pr, NULL, y, &nc, &nm, &nd));
        if (nc != 0 || nm != 2 || nd != 1)
            FAILF("BERT %s: %d layers read the cond, %d the shared mask, %d make it; want 0, 2, 1",
                  p ? "bf16" : "fp16", nc, nm, nd);
        CHECK(bert_mask_run(KILN_DEVICE_CUDA, pr, "share_attention_mask", y0, &nc, &nm, &nd));
        CHECK(nc == 2 && nm == 0 && nd == 0);
        /* attention_mask_rows off: one shared mask in the cond's shape [2, 1, 8, 8] */
        CHECK(bert_mask_run(KILN_DEVICE_CUDA, pr, "attention_mask_rows", yf, &nc, &nm, &nd));
        CHECK(nc == 0 && nm == 0 && nd == 1);
        double num = 0, num0 = 0, numf = 0, den = 0;
        for (int i = 0; i < 512; i++) {
            num += (double)(y[i] - ref[i]) * (y[i] - ref[i]);
            num0 += (double)(y[i] - y0[i]) * (y[i] - y0[i]);
            numf += (double)(yf[i] - y0[i]) * (yf[i] - y0[i]);
            den += (double)ref[i] * ref[i];
        }
        double tol = p ? 1e-3 : 1e-5;
        if (!(den > 0 && num <= tol * den && num0 <= tol * den && numf <= tol * den))
            FAILF("BERT %s: NMSE %g vs the CPU, %g vs the pass off, %g full mask vs the pass off", p ? "bf16" : "fp16",
                  den > 0 ? num / den : -1.0, den > 0 ? num0 / den : -1.0, den > 0 ? numf / den : -1.0);
    }
}

/* Output "y" of `path` (input "x" [n, c, hw, hw], the values below) built for
 * `dev` at precision p, on the host; with KILN_CUDA_SE_FUSED=1 in the
 * environment while it is built (the tuning state lists the fused tactics,
 * as by default, even where the caller's environment has it "0"). *desc
 * gets a copy of the engine's description. */
static float *se_engine_run(const char *path, kiln_device dev, kiln_precision p, int64_t n, int64_t c, int64_t hw,
                            int64_t ny, char **desc) {
    kiln_model *m = NULL;
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    kiln_context *ctx = NULL;
    float *y = NULL;
    int64_t dims[4] = {n, c, hw, hw};
    setenv("KILN_CUDA_SE_FUSED", "1", 1);
    CHECK_OK(kiln_model_load_onnx(path, &m));
    CHECK_OK(kiln_builder_create(&b));
    if (m && b) {
        CHECK_OK(kiln_builder_set_profile(b, "x", 4, dims, dims, dims));
        CHECK_OK(kiln_builder_set_device(b, dev, 0));
        CHECK_OK(kiln_builder_set_precision(b, p));
    }
    if (m && b && kiln_build(b, m, &e) == KILN_OK && kiln_context_create(e, &ctx) == KILN_OK) {
        const char *d = kiln_engine_describe(e, 0);
        *desc = d ? strdup(d) : NULL;
        const int64_t nx = n * c * hw * hw;
        float *x = malloc(sizeof(float) * (size_t)nx);
        for (int64_t i = 0; i < nx; i++) x[i] = (float)((i * 7919) % 2001 - 1000) / 400.0f;
        y = malloc(sizeof(float) * (size_t)ny);
        CHECK_OK(kiln_context_set_input(ctx, "x", KILN_DTYPE_FLOAT32, 4, dims, x));
        CHECK_OK(kiln_context_set_output(ctx, "y", y, sizeof(float) * (size_t)ny));
        CHECK_OK(kiln_context_run(ctx));
        free(x);
    } else {
        FAILF("%s engine for device %d: %s", path, (int)dev, kiln_last_error());
    }
    unsetenv("KILN_CUDA_SE_FUSED");
    kiln_context_free(ctx);
    kiln_engine_free(e);
    kiln_builder_free(b);
    kiln_model_free(m);
    return y;
}

/* Engines with squeeze-excite gates (fuse_se): tiny_mbv3 (MobileNetV3's
 * and EfficientNet's gates) and se_block.onnx at batches 1 and 32, fp32
 * and fp16 (batches 1 and 3 on the emulator), built for the device with every tactic of kiln.SqueezeExcite
 * listed (the builder sets each up, checks them against tactic 0 and times
 * them), against the CPU's fp32 engine (which keeps the three layers). */
TEST(test_se_engine) {
    if (!kiln__backend_for(KILN_DEVICE_CUDA)) {
        printf("  (no CUDA backend in the registry: skipped)\n");
        return;
    }
    static const struct { const char *path; int64_t c, hw, ny, ses; } ms[2] = {
        {"tests/data/tiny_mbv3.onnx", 3, 32, 10, 2}, {"tests/data/se_block.onnx", 32, 16, 16 * 16 * 16, 1}};
#if KILN_CUDA_EMU
    static const int64_t ns[2] = {1, 3}; /* (the emulated tuner runs each tactic dozens of times) */
#else
    static const int64_t ns[2] = {1, 32};
#endif
    static const kiln_precision ps[2] = {KILN_PRECISION_FP32, KILN_PRECISION_FP16};
    for (int k = 0; k < 2; k++)
        for (int bi = 0; bi < 2; bi++) {
            const int64_t n = ns[bi], ny = n * ms[k].ny;
            char *dc = NULL;
            float *ref = se_engine_run(ms[k].path, KILN_DEVICE_CPU, KILN_PRECISION_FP32, n, ms[k].c, ms[k].hw, ny, &dc);
            CHECK(dc && !strstr(dc, "SqueezeExcite"));
            free(dc);
            for (int pi = 0; pi < 2 && ref; pi++) {
                char *d = NULL;
                float *y = se_engine_run(ms[k].path, KILN_DEVICE_CUDA, ps[pi], n, ms[k].c, ms[k].hw, ny, &d);
                int ses = 0;
                for (const char *q = d; q && (q = strstr(q, " SqueezeExcite ")) != NULL; q++) ses++;
                CHECK(ses == ms[k].ses);
                for (const char *q = d; q && (q = strstr(q, " SqueezeExcite ")) != NULL; q++) {
                    const char *eol = strchr(q, '\n');
                    printf("  %s b%lld %s:%.*s\n", ms[k].path, (long long)n, pi ? "fp16" : "fp32",
                           eol ? (int)(eol - q) : (int)strlen(q), q);
                }
                if (y) {
                    double num = 0, den = 0;
                    for (int64_t i = 0; i < ny; i++) {
                        num += (double)(y[i] - ref[i]) * (y[i] - ref[i]);
                        den += (double)ref[i] * ref[i];
                    }
                    const double nmse = den > 0 ? num / den : -1.0;
                    if (!(den > 0 && nmse <= (pi ? 1e-5 : 1e-10)))
                        FAILF("%s b%lld %s: NMSE against the CPU %g", ms[k].path, (long long)n, pi ? "fp16" : "fp32",
                              nmse);
                }
                free(y);
                free(d);
            }
            free(ref);
        }
}

/* Runs engine e on x [1, c, hw, hw] (filled as se_engine_run fills it);
 * its output y (ny floats, malloc'd) or NULL where the run fails. */
static float *layout_engine_run(const kiln_engine *e, int64_t c, int64_t hw, int64_t ny) {
    kiln_context *ctx = NULL;
    const int64_t dims[4] = {1, c, hw, hw}, nx = c * hw * hw;
    float *x = malloc(sizeof(float) * (size_t)nx), *y = malloc(sizeof(float) * (size_t)ny);
    for (int64_t i = 0; i < nx; i++) x[i] = (float)((i * 7919) % 2001 - 1000) / 400.0f;
    bool ok = kiln_context_create(e, &ctx) == KILN_OK &&
              kiln_context_set_input(ctx, "x", KILN_DTYPE_FLOAT32, 4, dims, x) == KILN_OK &&
              kiln_context_set_output(ctx, "y", y, sizeof(float) * (size_t)ny) == KILN_OK && kiln_context_run(ctx) == KILN_OK;
    kiln_context_free(ctx);
    free(x);
    if (!ok) free(y);
    return ok ? y : NULL;
}

/* CUDA engines (se_block.onnx: FusedConv -> SqueezeExcite -> Mul ->
 * FusedConv; tiny_mbv3.onnx, tiny_convnext.onnx, tiny_dyncnn.onnx; fp32,
 * and fp16, whose layers a GPU chains NHWC, through views where a
 * Transpose was) with each layer's layout field set to every value its op takes, as
 * a file damaged and resealed would hold it: the FusedConv reading the
 * graph's NCHW input as NHWC and the SqueezeExcite reading the FusedConv's
 * NCHW output as NHWC ran and gave wrong numbers. Each such plan is
 * refused by the writer (and so by the loader, which runs the same check);
 * what is written must run right or fail with an error (probe7). */
TEST(test_se_engine_layouts) {
    if (!kiln__backend_for(KILN_DEVICE_CUDA)) {
        printf("  (no CUDA backend in the registry: skipped)\n");
        return;
    }
    /* (tiny_convnext and tiny_dyncnn: a GPU's fp16 chains hold views that relabel
     * [N, H, W, C] values as NHWC bytes, conversions and an NHWC AveragePool; probe8) */
    static const struct { const char *path; int64_t c, hw, ny; } ms[4] = {
        {"tests/data/se_block.onnx", 32, 16, 16 * 16 * 16}, {"tests/data/tiny_mbv3.onnx", 3, 32, 10},
        {"tests/data/tiny_convnext.onnx", 3, 32, 10}, {"tests/data/tiny_dyncnn.onnx", 8, 32, 10}};
    for (int k = 0; k < 4; k++)
        for (int pi = 0; pi < 2; pi++) {
            kiln_model *m = NULL;
            kiln_builder *b = NULL;
            kiln_engine *e = NULL;
            const int64_t dims[4] = {1, ms[k].c, ms[k].hw, ms[k].hw};
            setenv("KILN_CUDA_SE_FUSED", "1", 1);
            CHECK_OK(kiln_model_load_onnx(ms[k].path, &m));
            CHECK_OK(kiln_builder_create(&b));
            if (m && b) {
                CHECK_OK(kiln_builder_set_profile(b, "x", 4, dims, dims, dims));
                CHECK_OK(kiln_builder_set_device(b, KILN_DEVICE_CUDA, 0));
                CHECK_OK(kiln_builder_set_precision(b, pi ? KILN_PRECISION_FP16 : KILN_PRECISION_FP32));
                CHECK_OK(kiln_builder_set_tuning(b, 0));
                CHECK_OK(kiln_build(b, m, &e));
            }
            unsetenv("KILN_CUDA_SE_FUSED");
            kiln_builder_free(b);
            kiln_model_free(m);
            float *ref = e ? layout_engine_run(e, ms[k].c, ms[k].hw, ms[k].ny) : NULL;
            CHECK(ref != NULL);
            int written = 0, refused = 0, failed = 0, fields = 0;
            for (int ni = 0; ref && ni < e->graph->n_nodes; ni++) {
                kiln_node *n = &e->graph->nodes[ni];
                if (!n->op->layout_field || !n->attrs) continue;
                int32_t *field = n->op->layout_field(n->attrs), keep = *field;
                fields++;
                for (int32_t l = 0; l < 128; l++) {
                    if (l == keep) continue;
                    *field = l;
                    void *data = NULL;
                    size_t size = 0;
                    kiln_engine *d = NULL;
                    if (n->op->validate(n->op, n->attrs, n->name) != KILN_OK) {
                        *field = keep;
                        continue; /* a value out of the field's range (the loader's attribute check) */
                    }
                    if (kiln_engine_serialize(e, &data, &size) != KILN_OK) {
                        CHECK(strstr(kiln_last_error(), "reads ") || strstr(kiln_last_error(), "outputs are nchw"));
                        refused++;
                        *field = keep;
                        continue;
                    }
                    CHECK_OK(kiln_engine_load_memory(data, size, &d));
                    kiln_free(data);
                    float *y = d ? layout_engine_run(d, ms[k].c, ms[k].hw, ms[k].ny) : NULL;
                    written++;
                    if (!y) failed++; /* an error naming the layer: fine */
                    double num = 0, den = 0;
                    for (int64_t i = 0; y && i < ms[k].ny; i++) {
                        num += (double)(y[i] - ref[i]) * (y[i] - ref[i]);
                        den += (double)ref[i] * ref[i];
                    }
                    if (y && !(den > 0 && num / den <= (pi ? 1e-5 : 1e-10)))
                        FAILF("%s %s: node %d '%s' (%s) with layout %d ran and gave other numbers (NMSE %g)",
                              ms[k].path, pi ? "fp16" : "fp32", ni, n->name, n->op->name, (int)l,
                              den > 0 ? num / den : -1.0);
                    free(y);
                    kiln_engine_free(d);
                    *field = keep;
                }
            }
            printf("  %s %s: %d layout fields; %d layouts refused when written, %d written (%d of them failed "
                   "at run)\n", ms[k].path, pi ? "fp16" : "fp32", fields, refused, written, failed);
            CHECK(fields >= 3 && refused > 0);
            free(ref);
            kiln_engine_free(e);
        }
}

static kiln_fused_conv_attrs fc_at(kiln_conv_attrs conv, int act, float alpha, float beta, int res) {
    kiln_fused_conv_attrs at;
    memset(&at, 0, sizeof at);
    at.conv = conv;
    at.act = act;
    at.alpha = alpha;
    at.beta = beta;
    at.has_residual = res;
    return at;
}

TEST(test_fused_conv) {
    kiln_conv_attrs a3 = conv_at(PAD_NOTSET, 1, 2, 3, 1, 1, 1, 1);
    kiln_conv_attrs s2 = conv_at(PAD_NOTSET, 1, 2, 3, 2, 1, 1, 0); /* asymmetric: im2col path */
    kiln_conv_attrs dw = conv_at(PAD_NOTSET, 6, 2, 3, 1, 1, 1, 1);
    kiln_fused_conv_attrs relu = fc_at(a3, KILN_FC_ACT_RELU, 0, 0, 0);
    CASE("relu", FusedConv, &relu, 1, 0, 1e-9, trand(F32, -1, 1, S(2, 3, 9, 11)),
         trand(F32, -1, 1, S(8, 3, 3, 3)), trand(F32, -1, 1, S(8)));
    kiln_fused_conv_attrs res = fc_at(a3, KILN_FC_ACT_RELU, 0, 0, 1);
    CASE("residual_relu", FusedConv, &res, 1, 0, 1e-9, trand(F32, -1, 1, S(2, 4, 7, 7)),
         trand(F32, -1, 1, S(4, 4, 3, 3)), trand(F32, -1, 1, S(4)), trand(F32, -1, 1, S(2, 4, 7, 7)));
    kiln_fused_conv_attrs clip = fc_at(s2, KILN_FC_ACT_CLIP, 0.0f, 0.5f, 0);
    CASE("clip_im2col", FusedConv, &clip, 1, 0, 1e-9, trand(F32, -1, 1, S(1, 4, 10, 9)),
         trand(F32, -1, 1, S(6, 4, 3, 3)), trand(F32, -1, 1, S(6)));
    kiln_fused_conv_attrs hs = fc_at(dw, KILN_FC_ACT_HARD_SWISH, 0, 0, 0);
    CASE("depthwise_hswish", FusedConv, &hs, 1, 0, 1e-9, trand(F32, -1, 1, S(2, 6, 9, 9)),
         trand(F32, -1, 1, S(12, 1, 3, 3)), trand(F32, -1, 1, S(12)));
    kiln_fused_conv_attrs silu = fc_at(a3, KILN_FC_ACT_SILU, 0, 0, 1);
    CASE("silu_nobias_res", FusedConv, &silu, 1, 0, 1e-9, trand(F32, -1, 1, S(1, 3, 6, 6)),
         trand(F32, -1, 1, S(5, 3, 3, 3)), NULL, trand(F32, -1, 1, S(1, 5, 6, 6)));
    kiln_fused_conv_attrs lr = fc_at(a3, KILN_FC_ACT_LEAKY_RELU, 0.1f, 0, 0), sg = fc_at(a3, KILN_FC_ACT_SIGMOID, 0, 0, 0);
    CASE("leaky", FusedConv, &lr, 1, 0, 1e-9, trand(F32, -1, 1, S(1, 3, 5, 5)),
         trand(F32, -1, 1, S(4, 3, 3, 3)), trand(F32, -1, 1, S(4)));
    CASE("sigmoid", FusedConv, &sg, 1, 0, 1e-9, trand(F32, -1, 1, S(1, 3, 5, 5)),
         trand(F32, -1, 1, S(4, 3, 3, 3)), trand(F32, -1, 1, S(4)));
    /* fp16/bf16 layers (the precision pass converts fused layers): reference in fp32 */
    CASE("residual_relu_f16", FusedConv, &res, 1, 0, 1e-5, trand(F16, -1, 1, S(2, 8, 7, 7)),
         trand(F16, -1, 1, S(8, 8, 3, 3)), trand(F16, -1, 1, S(8)), trand(F16, -1, 1, S(2, 8, 7, 7)));
    CASE("relu_bf16", FusedConv, &relu, 1, 0, 1e-4, trand(BF16, -1, 1, S(1, 8, 9, 9)),
         trand(BF16, -1, 1, S(16, 8, 3, 3)), trand(BF16, -1, 1, S(16)));
}

/* kiln.FusedConv's activations with their parameters (ReLU6: a clip at 0.5
 * so that random inputs reach it) */
static const struct fc_act { int act; float alpha, beta; const char *name; } fc_acts[] = {
    {KILN_FC_ACT_NONE, 0, 0, "none"},           {KILN_FC_ACT_RELU, 0, 0, "relu"},
    {KILN_FC_ACT_CLIP, 0, 0.5f, "relu6"},        {KILN_FC_ACT_CLIP, -0.25f, 0.5f, "clip"},
    {KILN_FC_ACT_LEAKY_RELU, 0.1f, 0, "leaky"}, {KILN_FC_ACT_SIGMOID, 0, 0, "sigmoid"},
    {KILN_FC_ACT_SILU, 0, 0, "silu"},           {KILN_FC_ACT_HARD_SWISH, 0, 0, "hswish"},
    {KILN_FC_ACT_HARD_SIGMOID, 1.0f / 6.0f, 0.5f, "hsigmoid"}, {KILN_FC_ACT_HARD_SIGMOID, 0.2f, 0.5f, "hsigmoid02"},
};
_Static_assert(KILN_FC_ACT_COUNT == 8, "fc_acts: list every KILN_FC_ACT_* (then update this count)");

/* NaN and +-inf through every activation of a FusedConv come out as the
 * CPU's (NaN stays NaN: torch.relu(nan) is nan; fmaxf(x, 0) would give 0):
 * in the residual (the epilogue) and in the input (the convolution). A GPU
 * run checks cuDNN's fused pointwise ReLU here (docs/cuda.md). */
TEST(test_fused_conv_special_values) {
    kiln_conv_attrs a3 = conv_at(PAD_NOTSET, 1, 2, 3, 1, 1, 1, 1), p1 = conv_at(PAD_NOTSET, 1, 2, 1, 1, 0, 1, 1);
    char name[64];
    for (size_t a = 0; a < sizeof fc_acts / sizeof fc_acts[0]; a++) {
        kiln_fused_conv_attrs at = fc_at(a3, fc_acts[a].act, fc_acts[a].alpha, fc_acts[a].beta, 1);
        snprintf(name, sizeof name, "%s_specials_residual", fc_acts[a].name);
        CASE(name, FusedConv, &at, 1, 0, 1e-9, trand(F32, -1, 1, S(2, 8, 9, 9)), trand(F32, -1, 1, S(16, 8, 3, 3)),
             trand(F32, -1, 1, S(16)), specials(trand(F32, -1, 1, S(2, 16, 9, 9))));
        kiln_fused_conv_attrs pw = fc_at(p1, fc_acts[a].act, fc_acts[a].alpha, fc_acts[a].beta, 0);
        snprintf(name, sizeof name, "%s_specials_1x1", fc_acts[a].name);
        CASE(name, FusedConv, &pw, 1, 0, 1e-9, specials(trand(F32, -1, 1, S(2, 8, 9, 9))),
             trand(F32, -1, 1, S(16, 8, 1, 1)), trand(F32, -1, 1, S(16)));
    }
}

/* NaN and inf through FusedConv + ReLU / Clip(0, 6) (issue 20: random CUDA
 * graphs 53 and 101, fp16, gave 0 where the CPU gives NaN: the tactic the
 * builder timed fastest dropped NaN through its ReLU). Every tactic the
 * builder would time is forced in turn at those graphs' shapes (a 1x1 conv
 * 3 -> 4 on [1, 3, 3, 2]: cuBLASLt's 1x1 GEMM; a 2x2 stride-2 conv 5 -> 4 on
 * [1, 5, 2, 4]: the patchify GEMM; cuDNN's graph configs, the legacy API +
 * kiln's epilogue), NCHW and NHWC, fp16 and bf16, with NaN, inf and -inf in
 * X, against the CPU, and tactic 0 (what a build without tuning runs:
 * graphs 53 and 101 were not tuned, so the culprit was cuDNN's heuristic
 * config with the ReLU inside; now its graph stops before a ReLU or Clip
 * and kiln's epilogue applies it). kiln's own paths (tactic 0, the legacy
 * API + kiln's epilogue, kiln's kernels) must keep NaN: a failure names the
 * tactic ("..._tactic_
 * <name>: ... first difference at i: cpu nan gpu 0"). A library tactic
 * whose fused epilogue drops NaN (cuDNN's configs and heuristic, cuBLASLt's
 * RELU epilogue: the likely culprits of graphs 53 and 101) is printed as a
 * note instead: the builder's NaN probe (tune.c) keeps such a tactic out of
 * engines (test_cuda_pinned_seeds in test_cuda_diff checks that), and the
 * note says which one it is. */
static bool conv_tactic_is_library(int32_t id) {
#if KILN_HAVE_CUDNN
    /* (tactic 0: cuDNN's heuristic graph, but a ReLU or Clip comes after it, in
     * kiln's epilogue; without cuDNN, kiln's GEMM + epilogue) */
    if (kcu_dg_is_id(id)) return true;
    /* (cuDNN's legacy algorithm, pinned: its arithmetic on infinities is
     * cuDNN's, and the probe judges it as it will run, test_conv_legacy_pinned) */
    if (kcu_conv_legacy_algo(id) >= 0) return true;
#endif
    return kcu_conv_gemm_kind(id) != 0;
}

#if KILN_HAVE_CUDNN
/* The legacy path's tactics pin cuDNN's forward algorithm
 * (kcu_conv_legacy_algo), so that an engine runs the algorithm its builder
 * timed and its NaN probe checked: one found by timing at the engine's
 * first run may treat infinities otherwise (issue 20: the 2x2 stride-2
 * fp16 NHWC layer of test_fused_conv_nan_tactics gave numbers for -inf in
 * one run of the op tests and not in the next). An fp32 layer lists its
 * first algorithms, each pinned, none twice, each computing the layer; an
 * algorithm that does not run it here (FFT pinned in an engine without
 * --fast-math, which must not round so) fails in a tuning state and runs
 * the found algorithm, with a warning, in an engine. fp32 layers list
 * these alone (before, none: their one tactic found its algorithm at the
 * engine's first run). */
TEST(test_conv_legacy_pinned) {
    kiln_fused_conv_attrs ref = fc_at(conv_at(PAD_NOTSET, 1, 2, 3, 1, 1, 1, 1), KILN_FC_ACT_RELU, 0, 0, 0);
    kiln_tensor *in[3] = {trand(F32, -1, 1, S(2, 8, 9, 11)), trand(F32, -0.5, 0.5, S(16, 8, 3, 3)),
                          trand(F32, -1, 1, S(16))};
    kiln_cuda_state *cst = st;
    const bool strict = cst->strict_tactics, fast = cst->fast_math;
    cst->fast_math = false;
    int32_t ids[32];
    int n = list_tactics("FusedConv/legacy_pinned", KILN_OP_FusedConv, &ref, &ref, 3, in, ids, 32), pinned = 0;
    if (n < 0) {
        cst->fast_math = fast;
        return;
    }
    unsigned seen = 0;
    printf("  fp32 3x3: %d tactics:", n);
    for (int k = 0; k < n; k++) {
        char nm[64], what[96];
        kiln__cu_fused_conv_tactic_describe(ids[k], nm, sizeof nm);
        printf(" %s", nm);
        CHECK(ids[k] != KCU_CONV_TACTIC_LEGACY); /* (the algorithm found at run time: not listed) */
        const int algo = kcu_conv_legacy_algo(ids[k]);
        if (algo < 0) continue;
        pinned++;
        CHECK(!(seen & 1u << algo));
        seen |= 1u << algo;
        CHECK(!kcu_fwd_algo_rounds_more((cudnnConvolutionFwdAlgo_t)algo));
        kiln_fused_conv_attrs t = ref;
        t.tactic.id = ids[k];
        snprintf(what, sizeof what, "legacy_pinned_%s", nm);
        nhwc_case(what, KILN_OP_FusedConv, &ref, &t, 3, in, 0, false, 1e-6);
    }
    printf("\n");
    CHECK(pinned >= 1 && pinned <= 4);
    /* fp16: at most two, none twice (cuDNN's list names an algorithm once per
     * math type: IMPLICIT_PRECOMP_GEMM was listed twice on an H100) */
    kiln_tensor *hin[3] = {trand(F16, -1, 1, S(2, 8, 9, 11)), trand(F16, -0.5, 0.5, S(16, 8, 3, 3)),
                           trand(F16, -1, 1, S(16))};
    n = list_tactics("FusedConv/legacy_pinned_f16", KILN_OP_FusedConv, &ref, &ref, 3, hin, ids, 32);
    int hpinned = 0;
    seen = 0;
    for (int k = 0; k < n; k++) {
        const int algo = kcu_conv_legacy_algo(ids[k]);
        if (algo < 0) continue;
        hpinned++;
        CHECK(!(seen & 1u << algo));
        seen |= 1u << algo;
    }
    CHECK(n < 0 || (hpinned >= 1 && hpinned <= 2));
    kiln_fused_conv_attrs fft = ref;
    fft.tactic.id = KCU_CONV_TACTIC_LEGACY | (CUDNN_CONVOLUTION_FWD_ALGO_FFT + 1) << KCU_CONV_TACTIC_CAND_SHIFT;
    CHECK(kcu_conv_legacy_algo(fft.tactic.id) == CUDNN_CONVOLUTION_FWD_ALGO_FFT);
    cst->strict_tactics = true;
    kiln_tensor *y = tnew(F32, S(2, 16, 9, 11));
    int before = test_failed_checks;
    bool ran = gpu_run_op("FusedConv/legacy_fft_tuning", KILN_OP_FusedConv, &fft, 3, in, y);
    CHECK(!ran && strstr(kiln_last_error(), "does not run this layer") != NULL);
    test_failed_checks = before + (ran ? 1 : 0); /* gpu_run_op counted the expected failure */
    cst->strict_tactics = false;
    nhwc_case("legacy_fft_in_an_engine", KILN_OP_FusedConv, &ref, &fft, 3, in, 0, false, 1e-6);
    cst->strict_tactics = strict;
    cst->fast_math = fast;
}
#endif

TEST(test_fused_conv_nan_tactics) {
    int lib_notes = 0;
    /* inputs of their own, whatever ran before (the shared generator's state moves
     * with every test added ahead of this one) */
    rng = 0x5EED0053ull;
    bool capped = !getenv("KILN_CUDNN_CANDIDATES");
    if (capped) setenv("KILN_CUDNN_CANDIDATES", "4", 1);
    const kiln_conv_attrs convs[2] = {conv_at(PAD_NOTSET, 1, 2, 1, 1, 1, 0, 0), conv_at(PAD_NOTSET, 1, 2, 2, 2, 1, 0, 0)};
    for (int g = 0; g < 2; g++)
        for (int a = 0; a < 2; a++)
            for (int lay = 0; lay < 2; lay++)
                for (int h = 0; h < 2; h++) {
                    kiln_dtype t = h ? BF16 : F16;
                    int act = a ? KILN_FC_ACT_CLIP : KILN_FC_ACT_RELU;
                    kiln_fused_conv_attrs ref = fc_at(convs[g], act, 0, a ? 6.0f : 0, 0), nh = ref;
                    nh.layout = lay ? KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC : 0;
                    kiln_tensor *in[3] = {specials(g ? trand(t, -1, 1, S(1, 5, 2, 4)) : trand(t, -1, 1, S(1, 3, 3, 2))),
                                          g ? trand(t, -1, 1, S(4, 5, 2, 2)) : trand(t, -1, 1, S(4, 3, 1, 1)),
                                          trand(t, -1, 1, S(4))};
                    char what[40];
                    snprintf(what, sizeof what, "%s_%s_%s_%s", g ? "g101_2x2s2" : "g53_1x1", a ? "relu6" : "relu",
                             lay ? "nhwc" : "nchw", h ? "bf16" : "f16");
                    /* with cuDNN, tactic 0 first (what untuned builds run: not listed), then
                     * those listed (without cuDNN 0 is listed where it runs the layer) */
                    int32_t ids[33] = {0};
                    int n = list_tactics(what, KILN_OP_FusedConv, &ref, &nh, 3, in, ids + 1, 32);
                    if (n < 0) continue;
                    CHECK(n >= 1);
                    const int k0 = KILN_HAVE_CUDNN && ids[1] != 0 ? 0 : 1, kn = n + 1;
                    printf("  %s: %d tactics:", what, kn - k0);
                    for (int k = k0; k < kn; k++) {
                        char nm[48], name[104];
                        kiln__cu_fused_conv_tactic_describe(ids[k], nm, sizeof nm);
                        printf(" %s", nm);
                        kiln_fused_conv_attrs tc = nh;
                        tc.tactic.id = ids[k];
                        snprintf(name, sizeof name, "%s_tactic_%s", what, nm);
                        int before = test_failed_checks;
                        /* this test is about where NaN and inf land; the values' accuracy
                         * per tactic is test_fused_conv_tactics' (on 24 fp16 outputs one
                         * random draw gave an NMSE of 1.05e-5 on the emulator, against
                         * the default 1e-5) */
                        nhwc_case(name, KILN_OP_FusedConv, &ref, &tc, 3, in, lay ? 1u : 0u, lay != 0, 1e-4);
                        if (test_failed_checks > before && conv_tactic_is_library(ids[k])) {
                            printf("\n  note: library tactic %s differs from the CPU on NaN/inf inputs here (line "
                                   "above); the builder's NaN probe must keep it out of engines\n ",
                                   nm);
                            test_failed_checks = before;
                            lib_notes++;
                        }
                    }
                    printf("\n");
                }
    printf("  %d library tactic runs differ from the CPU on NaN/inf inputs (notes above)\n", lib_notes);
#if KILN_HAVE_CUDNN
    /* an engine whose stored config is missing here (another cuDNN or GPU; a state that
     * is not tuning): cuDNN's heuristics run the graph (a warning says so), the ReLU
     * after it in kiln's epilogue, as for tactic 0 */
    kiln_cuda_state *cst = st;
    const bool strict = cst->strict_tactics;
    cst->strict_tactics = false;
    for (int lay = 0; lay < 2; lay++) {
        kiln_fused_conv_attrs ref = fc_at(convs[0], KILN_FC_ACT_RELU, 0, 0, 0), miss = ref;
        miss.layout = lay ? KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC : 0;
        miss.tactic.id = KCU_DG_ID_BIT | 0x0ff00000 | 0xfffff;
        kiln_tensor *in[3] = {specials(trand(F16, -1, 1, S(1, 3, 3, 2))), trand(F16, -1, 1, S(4, 3, 1, 1)),
                              trand(F16, -1, 1, S(4))};
        nhwc_case(lay ? "g53_1x1_relu_missing_config_nhwc" : "g53_1x1_relu_missing_config_nchw", KILN_OP_FusedConv,
                  &ref, &miss, 3, in, lay ? 1u : 0u, lay != 0, 1e-5);
    }
    cst->strict_tactics = strict;
#endif
    if (capped) unsetenv("KILN_CUDNN_CANDIDATES");
}

/* NHWC depthwise FusedConv (kiln's kernel, k_dwconv.cu) against the CPU's
 * fp32 NCHW layer: the row-tiled kernels (3x3, 5x5 and 7x7, stride 1 and 2, one
 * output per thread at small sizes and TW per thread at large ones, tails
 * of W not a multiple of the tile), the general vector kernel (dilation,
 * stride 3), the scalar kernel (channels not a multiple of 8, fp32),
 * every activation, bias and residual, fp16 and bf16. */
static void dw_case(const char *name, kiln_dtype t, int64_t N, int64_t C, int64_t H, int64_t W, int64_t k,
                    int64_t s, int64_t d, int64_t pb, int64_t pe, int act, float alpha, float beta, bool bias,
                    bool res, int32_t tactic) {
    kiln_conv_attrs ca = conv_at(PAD_NOTSET, (int)C, 2, k, s, d, pb, pe);
    kiln_fused_conv_attrs ref = fc_at(ca, act, alpha, beta, res), nh = ref;
    nh.layout = KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
    nh.tactic.id = tactic;
    int64_t Ho = (H + pb + pe - d * (k - 1) - 1) / s + 1, Wo = (W + pb + pe - d * (k - 1) - 1) / s + 1;
    kiln_tensor *in[4] = {trand(t, -1, 1, S(N, C, H, W)), trand(t, -0.5, 0.5, S(C, 1, k, k)),
                          bias ? trand(t, -1, 1, S(C)) : NULL, res ? trand(t, -1, 1, S(N, C, Ho, Wo)) : NULL};
    nhwc_case(name, KILN_OP_FusedConv, &ref, &nh, res ? 4 : 3, in, 1u | 8u, true,
              t == BF16 ? 1e-4 : t == F16 ? 1e-5 : 1e-9);
}

TEST(test_dwconv_nhwc) {
    char name[96];
    for (size_t a = 0; a < sizeof fc_acts / sizeof fc_acts[0]; a++) {
        kiln_dtype t = a % 2 ? BF16 : F16;
        snprintf(name, sizeof name, "dw3_%s_%s", fc_acts[a].name, t == BF16 ? "bf16" : "f16");
        dw_case(name, t, 2, 24, 9, 11, 3, 1, 1, 1, 1, fc_acts[a].act, fc_acts[a].alpha, fc_acts[a].beta, a % 3 != 0, a % 4 == 1, 0);
        snprintf(name, sizeof name, "dw5s2_%s_odd_c", fc_acts[a].name);
        dw_case(name, F16, 1, 13, 10, 9, 5, 2, 1, 2, 2, fc_acts[a].act, fc_acts[a].alpha, fc_acts[a].beta, true, a % 2 == 0, 0);
    }
    /* the row-tiled kernels, one output per thread (small) and TW per thread (large) */
    dw_case("dw3s1_small_f16", F16, 2, 16, 7, 7, 3, 1, 1, 1, 1, KILN_FC_ACT_RELU, 0, 0, true, true, 0);
    dw_case("dw3s2_small_bf16", BF16, 3, 32, 15, 13, 3, 2, 1, 1, 1, KILN_FC_ACT_HARD_SWISH, 0, 0, true, false, 0);
    dw_case("dw5s1_small_f16", F16, 1, 40, 14, 15, 5, 1, 1, 2, 2, KILN_FC_ACT_SILU, 0, 0, false, true, 0);
    dw_case("dw5s2_small_f16", F16, 2, 8, 16, 17, 5, 2, 1, 2, 2, KILN_FC_ACT_SIGMOID, 0, 0, true, false, 0);
    dw_case("dw3s1_wide_f16", F16, 8, 128, 34, 63, 3, 1, 1, 1, 1, KILN_FC_ACT_CLIP, 0, 6, true, true, 0);
    dw_case("dw3s2_wide_bf16", BF16, 8, 256, 64, 47, 3, 2, 1, 0, 1, KILN_FC_ACT_SILU, 0, 0, true, false, 0);
    dw_case("dw5s1_wide_f16", F16, 8, 192, 32, 45, 5, 1, 1, 2, 2, KILN_FC_ACT_HARD_SWISH, 0, 0, true, true, 0);
    dw_case("dw5s2_wide_bf16", BF16, 8, 192, 56, 60, 5, 2, 1, 1, 2, KILN_FC_ACT_RELU, 0, 0, false, true, 0);
    /* ConvNeXt's 7x7 pad 3 with bias: small (one output per thread) and wide (TW per thread), stride 2 */
    dw_case("dw7s1_small_f16", F16, 1, 96, 7, 7, 7, 1, 1, 3, 3, KILN_FC_ACT_NONE, 0, 0, true, false, 0);
    dw_case("dw7s1_small_bf16", BF16, 2, 40, 15, 13, 7, 1, 1, 3, 3, KILN_FC_ACT_NONE, 0, 0, true, true, 0);
    dw_case("dw7s1_wide_f16", F16, 8, 256, 32, 31, 7, 1, 1, 3, 3, KILN_FC_ACT_NONE, 0, 0, true, false, 0);
    dw_case("dw7s1_res_bf16", BF16, 2, 64, 28, 27, 7, 1, 1, 3, 3, KILN_FC_ACT_SILU, 0, 0, true, true, 0);
    dw_case("dw7s2_f16", F16, 2, 24, 17, 18, 7, 2, 1, 3, 3, KILN_FC_ACT_RELU, 0, 0, true, false, 0);
    /* asymmetric and no padding, the general vector kernel, the scalar one */
    dw_case("dw3s2_asym_f16", F16, 2, 16, 12, 11, 3, 2, 1, 0, 1, KILN_FC_ACT_NONE, 0, 0, true, false, 0);
    dw_case("dw3_nopad_f16", F16, 2, 16, 6, 9, 3, 1, 1, 0, 0, KILN_FC_ACT_RELU, 0, 0, true, true, 0);
    dw_case("dw3_dil2_f16", F16, 2, 16, 11, 12, 3, 1, 2, 2, 2, KILN_FC_ACT_LEAKY_RELU, 0.2f, 0, true, true, 0);
    dw_case("dw7_bf16", BF16, 1, 8, 13, 12, 7, 1, 1, 3, 3, KILN_FC_ACT_NONE, 0, 0, true, false, 0);
    dw_case("dw3s3_f16", F16, 2, 24, 13, 14, 3, 3, 1, 1, 1, KILN_FC_ACT_RELU, 0, 0, true, false, 0);
    dw_case("dw1x1_f16", F16, 2, 16, 5, 6, 1, 1, 1, 0, 0, KILN_FC_ACT_SIGMOID, 0, 0, true, true, 0);
    dw_case("dw3_c5_bf16", BF16, 2, 5, 8, 9, 3, 1, 1, 1, 1, KILN_FC_ACT_HARD_SWISH, 0, 0, true, true, 0);
    dw_case("dw3_f32", F32, 2, 12, 9, 8, 3, 2, 1, 1, 1, KILN_FC_ACT_RELU, 0, 0, true, true, 0);
    dw_case("dw3_tactic_dw", F16, 2, 32, 9, 9, 3, 1, 1, 1, 1, KILN_FC_ACT_CLIP, 0, 6, true, false, KCU_CONV_TACTIC_DW);
    /* an NHWC depthwise layer whose input comes NCHW is refused */
    kiln_fused_conv_attrs bad = fc_at(conv_at(PAD_NOTSET, 8, 2, 3, 1, 1, 1, 1), KILN_FC_ACT_RELU, 0, 0, 0);
    bad.layout = KILN_FC_LAYOUT_Y_NHWC;
    kiln_tensor *y = tnew(F16, 4, (int64_t[]){1, 8, 5, 5});
    int before = test_failed_checks;
    bool ran = gpu_run_op("FusedConv/dw_nchw_in", KILN_OP_FusedConv, &bad, 3,
                          (kiln_tensor *[]){trand(F16, -1, 1, S(1, 8, 5, 5)), trand(F16, -1, 1, S(8, 1, 3, 3)),
                                            trand(F16, -1, 1, S(8))},
                          y);
    CHECK(!ran && strstr(kiln_last_error(), "depthwise") != NULL);
    test_failed_checks = before + (ran ? 1 : 0); /* gpu_run_op counted the expected failure */
}

/* NHWC grouped FusedConv (several input channels a group: RegNet's group
 * width 24, ResNeXt's) against the CPU's fp32 NCHW layer: kiln's
 * tensor-core kernel (k_gconv.cu) with 64 and 128 pixels a block and tactic
 * 0 (cuDNN's heuristics where cuDNN is, else kiln's kernel), group widths
 * 8, 16, 24, 32, 64 (one to four m16n8 column tiles a warp, K not a
 * multiple of the kernel's step of 32), more output than input channels a
 * group, strides 1 and 2, batch 1, 3 and 32, odd sizes, partial pixel
 * tiles, asymmetric pads, dilation, 1x1 and 5x5, every activation with and
 * without bias and residual, NaN and +-inf in the input and residual,
 * fp16 and bf16; the scalar kernel for group widths that are not multiples
 * of 8 and for fp32. */
#if KILN_CUDA_EMU
int kiln_emu_gconv_count(void);
#endif
static int gc_kiln_cases; /* cases whose tactic runs kiln's kernel (the emulator counts its launches) */
static void gc_case(const char *name, kiln_dtype t, int64_t N, int64_t G, int64_t Cg, int64_t Mg, int64_t H,
                    int64_t W, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe, const struct fc_act *fa,
                    bool bias, bool res, bool spec, int32_t tactic) {
    kiln_conv_attrs ca = conv_at(PAD_NOTSET, (int)G, 2, k, s, d, pb, pe);
    kiln_fused_conv_attrs ref = fc_at(ca, fa->act, fa->alpha, fa->beta, res), nh = ref;
    nh.layout = KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
    nh.tactic.id = tactic;
    int64_t Ho = (H + pb + pe - d * (k - 1) - 1) / s + 1, Wo = (W + pb + pe - d * (k - 1) - 1) / s + 1;
    kiln_tensor *x = trand(t, -1, 1, S(N, G * Cg, H, W)), *r = res ? trand(t, -1, 1, S(N, G * Mg, Ho, Wo)) : NULL;
    kiln_tensor *in[4] = {spec ? specials(x) : x, trand(t, -0.25, 0.25, S(G * Mg, Cg, k, k)),
                          bias ? trand(t, -1, 1, S(G * Mg)) : NULL, r && spec ? specials(r) : r};
#if KILN_HAVE_CUDNN
    gc_kiln_cases += kcu_conv_gconv_bm(tactic) > 0 || !((kiln_cuda_state *)st)->dnn;
#else
    gc_kiln_cases++;
#endif
    nhwc_case(name, KILN_OP_FusedConv, &ref, &nh, res ? 4 : 3, in, 1u | 8u, true,
              t == BF16 ? 1e-4 : t == F16 ? 1e-5 : 1e-9);
}

TEST(test_gconv_nhwc) {
#if KILN_CUDA_EMU
    const int launches = kiln_emu_gconv_count();
#endif
    gc_kiln_cases = 0;
    const size_t n_acts = sizeof fc_acts / sizeof fc_acts[0];
    const int32_t tacs[3] = {0, KCU_CONV_TACTIC_GCONV | 1 << KCU_CONV_TACTIC_CAND_SHIFT,
                             KCU_CONV_TACTIC_GCONV | 2 << KCU_CONV_TACTIC_CAND_SHIFT};
    static const int64_t widths[5] = {8, 16, 24, 32, 64};
    char name[96];
    int c = 0;
    for (int i = 0; i < 5; i++) {
        const int64_t w = widths[i], G = w == 64 ? 2 : 3;
        for (int64_t s = 1; s <= 2; s++)
            for (int k = 0; k < 3; k++, c++) {
                const kiln_dtype t = c % 4 == 3 ? BF16 : F16;
                const struct fc_act *fa = &fc_acts[c % n_acts];
                snprintf(name, sizeof name, "g%lld_w%lld_s%lld_t%d_%s_%s", (long long)G, (long long)w, (long long)s, k,
                         fa->name, t == BF16 ? "bf16" : "f16");
                gc_case(name, t, c % 2 ? 1 : 3, G, w, w, 11 + s, 13, 3, s, 1, 1, 1, fa, c % 3 != 2, c % 2 == 0,
                        c % 5 == 1, tacs[k]);
            }
        /* batch 32, odd sizes: several pixel tiles of both heights */
        snprintf(name, sizeof name, "b32_w%lld_f16", (long long)w);
        gc_case(name, F16, 32, 2, w, w, w >= 32 ? 5 : 9, 7, 3, 1 + i % 2, 1, 1, 1, &fc_acts[1], true, i % 2 == 0, i == 2,
                tacs[1 + i % 2]);
    }
    /* RegNetY-1.6GF's group width 24 (its layers' spatial sizes, fewer groups): 28x28 stride 1, and
     * stride 2 into 14x14 with the residual */
    gc_case("regnet_w24_s1_f16", F16, 2, 2, 24, 24, 28, 28, 3, 1, 1, 1, 1, &fc_acts[1], true, false, false, tacs[2]);
    gc_case("regnet_w24_s2_bf16", BF16, 1, 5, 24, 24, 28, 28, 3, 2, 1, 1, 1, &fc_acts[1], true, true, false, tacs[1]);
    /* more output than input channels a group; 40 a group (five 8-column tiles); no bias, specials */
    gc_case("cg16_mg32_f16", F16, 2, 3, 16, 32, 10, 9, 3, 1, 1, 1, 1, &fc_acts[6], true, true, true, tacs[1]);
    gc_case("cg24_mg48_s2_f16", F16, 1, 2, 24, 48, 15, 16, 3, 2, 1, 1, 1, &fc_acts[7], false, false, false, tacs[2]);
    gc_case("w40_bf16", BF16, 2, 2, 40, 40, 9, 9, 3, 1, 1, 1, 1, &fc_acts[5], true, true, true, tacs[1]);
    /* asymmetric pads, no padding, dilation 2, 1x1 and 5x5 */
    gc_case("asym_s2_f16", F16, 2, 4, 8, 8, 12, 11, 3, 2, 1, 0, 1, &fc_acts[0], true, false, false, tacs[1]);
    gc_case("nopad_f16", F16, 1, 2, 16, 16, 9, 10, 3, 1, 1, 0, 0, &fc_acts[3], true, true, false, tacs[2]);
    gc_case("dil2_f16", F16, 2, 2, 32, 32, 11, 12, 3, 1, 2, 2, 2, &fc_acts[4], true, true, false, tacs[1]);
    gc_case("k1_f16", F16, 2, 4, 16, 8, 7, 6, 1, 1, 1, 0, 0, &fc_acts[8], true, false, false, tacs[1]);
    gc_case("k5s2_bf16", BF16, 2, 2, 24, 24, 13, 14, 5, 2, 1, 2, 2, &fc_acts[9], true, true, false, tacs[2]);
    /* the scalar kernel: 4 and 12 channels a group, fp32 */
    gc_case("w4_scalar_f16", F16, 2, 4, 4, 4, 9, 8, 3, 1, 1, 1, 1, &fc_acts[1], true, true, true, tacs[1]);
    gc_case("w12_scalar_bf16", BF16, 1, 2, 12, 12, 7, 9, 3, 2, 1, 1, 1, &fc_acts[6], true, false, false, tacs[2]);
    gc_case("w8_f32", F32, 2, 3, 8, 8, 9, 9, 3, 1, 1, 1, 1, &fc_acts[2], true, true, true, tacs[1]);
    /* every tactic the tuner would time for a RegNet layer (kiln's kernel first; with cuDNN its NHWC
     * graph configs and the legacy algorithm too) computes it */
    for (int layer = 0; layer < 2; layer++) {
        const int64_t s = 1 + layer, H = 14 - layer;
        kiln_fused_conv_attrs ref = fc_at(conv_at(PAD_NOTSET, 4, 2, 3, s, 1, 1, 1), KILN_FC_ACT_RELU, 0, 0, layer == 0),
                              nh = ref;
        nh.layout = KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
        const int64_t Ho = (H + 2 - 3) / s + 1;
        kiln_tensor *in[4] = {trand(F16, -1, 1, S(2, 96, H, H)), trand(F16, -0.25, 0.25, S(96, 24, 3, 3)),
                              trand(F16, -1, 1, S(96)), layer == 0 ? trand(F16, -1, 1, S(2, 96, Ho, Ho)) : NULL};
        const int n_in = layer == 0 ? 4 : 3;
        int32_t ids[32];
        const int n = list_tactics("FusedConv/gconv_tactics", KILN_OP_FusedConv, &ref, &nh, n_in, in, ids, 32);
        if (n < 0) return;
        int kiln_ids = 0;
        for (int k = 0; k < n; k++) kiln_ids += kcu_conv_gconv_bm(ids[k]) > 0;
        CHECK(kiln_ids == 2 && n >= 2);
        printf("  grouped s%lld: %d tactics:", (long long)s, n);
        for (int k = 0; k < n; k++) {
            char nm[64];
            kiln__cu_fused_conv_tactic_describe(ids[k], nm, sizeof nm);
            printf(" %s", nm);
            CHECK(kcu_conv_gconv_bm(ids[k]) < 0 || kiln__cu_fused_conv_tactic_kind(st, ids[k]) == KILN_TACTIC_KIND_KILN);
            kiln_fused_conv_attrs tk = nh;
            tk.tactic.id = ids[k];
#if KILN_HAVE_CUDNN
            gc_kiln_cases += kcu_conv_gconv_bm(ids[k]) > 0 || !((kiln_cuda_state *)st)->dnn;
#else
            gc_kiln_cases++;
#endif
            char what[96];
            snprintf(what, sizeof what, "gconv_s%lld_tactic_%s", (long long)s, nm);
            nhwc_case(what, KILN_OP_FusedConv, &ref, &tk, n_in, in, 1u | 8u, true, 1e-5);
        }
        printf("\n");
    }
#if KILN_CUDA_EMU
    CHECK(gc_kiln_cases >= 40 && kiln_emu_gconv_count() - launches == gc_kiln_cases);
#endif
    /* an NHWC grouped layer whose input comes NCHW is refused */
    kiln_fused_conv_attrs bad = fc_at(conv_at(PAD_NOTSET, 2, 2, 3, 1, 1, 1, 1), KILN_FC_ACT_RELU, 0, 0, 0);
    bad.layout = KILN_FC_LAYOUT_Y_NHWC;
    kiln_tensor *y = tnew(F16, 4, (int64_t[]){1, 16, 5, 5});
    int before = test_failed_checks;
    bool ran = gpu_run_op("FusedConv/gconv_nchw_in", KILN_OP_FusedConv, &bad, 3,
                          (kiln_tensor *[]){trand(F16, -1, 1, S(1, 16, 5, 5)), trand(F16, -1, 1, S(16, 8, 3, 3)),
                                            trand(F16, -1, 1, S(16))},
                          y);
    CHECK(!ran && strstr(kiln_last_error(), "grouped") != NULL);
    test_failed_checks = before + (ran ? 1 : 0); /* gpu_run_op counted the expected failure */
}

/* NCHW depthwise layers (2-D, one output channel per group: kiln's tiled
 * kernel kcu_dwconv_nchw, k_dwconv.cu) against the CPU: ConvNeXt's 7x7 pad 3
 * with bias at odd sizes, output widths that pick each tile width (8, 16,
 * 32) with partial tiles, strides, dilations, asymmetric pads, every
 * activation with and without the residual (FusedConv), fp16, bf16, fp32,
 * fp64; a window too large for shared memory falls back to the direct
 * kernel, and so does a channel multiplier of 2. */
static void dw_nchw_case(const char *name, kiln_dtype t, int64_t N, int64_t C, int64_t H, int64_t W, int64_t k,
                         int64_t s, int64_t d, int64_t pb, int64_t pe, int act, float alpha, float beta, bool bias,
                         bool res) {
    kiln_conv_attrs ca = conv_at(PAD_NOTSET, (int)C, 2, k, s, d, pb, pe);
    kiln_fused_conv_attrs fa = fc_at(ca, act, alpha, beta, res);
    int64_t Ho = (H + pb + pe - d * (k - 1) - 1) / s + 1, Wo = (W + pb + pe - d * (k - 1) - 1) / s + 1;
    kiln_tensor *x = trand(t, -1, 1, S(N, C, H, W)), *w = trand(t, -0.5, 0.5, S(C, 1, k, k));
    kiln_tensor *b = bias ? trand(t, -1, 1, S(C)) : NULL, *r = res ? trand(t, -1, 1, S(N, C, Ho, Wo)) : NULL;
    double tol = t == BF16 ? 1e-4 : t == F16 ? 1e-5 : 1e-9;
    if (res) CASE(name, FusedConv, &fa, 1, 0, tol, x, w, b, r);
    else if (act != KILN_FC_ACT_NONE) CASE(name, FusedConv, &fa, 1, 0, tol, x, w, b);
    else if (bias) CASE(name, Conv, &ca, 1, 0, tol, x, w, b);
    else CASE(name, Conv, &ca, 1, 0, tol, x, w);
}

TEST(test_dwconv_nchw) {
    kiln_cuda_state *cst = st;
    const bool keep_tiled = cst->dw_nchw_tiled;
    cst->dw_nchw_tiled = true; /* the opt-in tiled kernel (KILN_CUDA_DW_NCHW=1) is checked here */
    /* ConvNeXt's layer: 7x7, pad 3, bias; widths 11 (TX 16), 7 (TX 8), 40 (TX 32) */
    dw_nchw_case("dw7_f16", F16, 2, 24, 13, 11, 7, 1, 1, 3, 3, KILN_FC_ACT_NONE, 0, 0, true, false);
    dw_nchw_case("dw7_bf16", BF16, 3, 16, 7, 7, 7, 1, 1, 3, 3, KILN_FC_ACT_NONE, 0, 0, true, false);
    dw_nchw_case("dw7_wide_f16", F16, 1, 8, 37, 40, 7, 1, 1, 3, 3, KILN_FC_ACT_NONE, 0, 0, true, false);
    dw_nchw_case("dw7_f32", F32, 2, 5, 19, 23, 7, 1, 1, 3, 3, KILN_FC_ACT_NONE, 0, 0, true, false);
    dw_nchw_case("dw7_nobias_f16", F16, 1, 9, 15, 17, 7, 1, 1, 3, 3, KILN_FC_ACT_NONE, 0, 0, false, false);
    dw_nchw_case("dw7s2_bf16", BF16, 2, 12, 21, 34, 7, 2, 1, 3, 3, KILN_FC_ACT_NONE, 0, 0, true, false);
    /* strides, dilations, asymmetric pads, no padding, f64 */
    dw_nchw_case("dw3s2_asym_f16", F16, 2, 16, 12, 11, 3, 2, 1, 0, 1, KILN_FC_ACT_NONE, 0, 0, true, false);
    dw_nchw_case("dw3_dil2_f32", F32, 1, 6, 14, 35, 3, 1, 2, 2, 2, KILN_FC_ACT_NONE, 0, 0, true, false);
    dw_nchw_case("dw5s3_nopad_f16", F16, 2, 4, 17, 19, 5, 3, 1, 0, 0, KILN_FC_ACT_NONE, 0, 0, true, false);
    dw_nchw_case("dw3_f64", F64, 2, 3, 9, 10, 3, 1, 1, 1, 1, KILN_FC_ACT_NONE, 0, 0, true, false);
    /* FusedConv's epilogue inside the kernel */
    char name[96];
    for (size_t a = 0; a < sizeof fc_acts / sizeof fc_acts[0]; a++) {
        kiln_dtype t = a % 3 == 0 ? F32 : a % 3 == 1 ? F16 : BF16;
        snprintf(name, sizeof name, "dw7_%s_%s", fc_acts[a].name, kiln_dtype_name(t));
        dw_nchw_case(name, t, 2, 8, 9, 13, 7, 1, 1, 3, 3, fc_acts[a].act, fc_acts[a].alpha, fc_acts[a].beta,
                     a % 4 != 3, a % 2 == 0);
    }
    /* the direct kernel: a window over shared memory, a channel multiplier */
    dw_nchw_case("dw3_dil200_f32", F32, 1, 2, 403, 402, 3, 1, 200, 0, 0, KILN_FC_ACT_NONE, 0, 0, true, false);
    kiln_conv_attrs mult = conv_at(PAD_NOTSET, 6, 2, 7, 1, 1, 3, 3);
    CASE("dw7_mult2_f16", Conv, &mult, 1, 0, 1e-5, trand(F16, -1, 1, S(2, 6, 9, 10)),
         trand(F16, -0.5, 0.5, S(12, 1, 7, 7)), trand(F16, -1, 1, S(12)));
    cst->dw_nchw_tiled = keep_tiled;
}

#if KILN_HAVE_CUDNN
/* NHWC layers (layout X|Y, cuda_layout.c): the same numbers as the NCHW layer,
 * with the input, residual and output transposed. */
TEST(test_fused_conv_nhwc) {
    for (int k = 0; k < 3; k++) {
        kiln_dtype t = k == 2 ? BF16 : F16;
        int64_t C = k == 1 ? 16 : 8, M = k == 1 ? 8 : 16, ks = k == 1 ? 1 : 3;
        kiln_conv_attrs ca = conv_at(PAD_NOTSET, 1, 2, ks, k == 1 ? 2 : 1, 1, ks / 2, ks / 2);
        int64_t H = 9, W = 7, Ho = k == 1 ? 5 : 9, Wo = k == 1 ? 4 : 7;
        kiln_fused_conv_attrs nchw = fc_at(ca, KILN_FC_ACT_RELU, 0, 0, k != 1);
        kiln_fused_conv_attrs nhwc = nchw;
        nhwc.layout = KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
        kiln_tensor *x = trand(t, -1, 1, S(2, C, H, W)), *w = trand(t, -1, 1, S(M, C, ks, ks));
        kiln_tensor *b = trand(t, -1, 1, S(M)), *r = trand(t, -1, 1, S(2, M, Ho, Wo));
        kiln_tensor *y1 = tnew(t, 4, (int64_t[]){2, M, Ho, Wo}), *y2 = tnew(t, 4, y1->dims);
        int n_in = k != 1 ? 4 : 3;
        char node[64];
        snprintf(node, sizeof node, "FusedConv/nhwc_%d", k);
        bool ok = gpu_run_op(node, KILN_OP_FusedConv, &nchw, n_in, (kiln_tensor *[]){x, w, b, r}, y1) &&
                  gpu_run_op(node, KILN_OP_FusedConv, &nhwc, n_in,
                             (kiln_tensor *[]){relayout(x, true), w, b, relayout(r, true)}, y2);
        CHECK(ok);
        if (ok && !compare(node, 0, t, y1->data, relayout(y2, false)->data, kiln__tensor_numel(y1),
                           t == BF16 ? 1e-4 : 1e-5))
            test_failed_checks++;
    }
}

/* FusedConv as one cuDNN graph (conv + bias + residual + activation,
 * cuda_conv.c) against the CPU's fp32 layer: every activation with and
 * without bias and residual (hard swish and hard sigmoid, which have no
 * cuDNN mode, composed of four and three pointwise operations), bf16, the first layer of a chain converting
 * its NCHW input with 3 channels (padded to 8), NCHW layers with odd
 * channel counts, strides, asymmetric pads, dilations and groups. */
TEST(test_fused_conv_graph) {
    kiln_conv_attrs a3 = conv_at(PAD_NOTSET, 1, 2, 3, 1, 1, 1, 1);
    const int32_t both = KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
    const struct fc_act *acts = fc_acts;
    char name[96];
    for (size_t k = 0; k < sizeof fc_acts / sizeof fc_acts[0]; k++)
        for (int v = 0; v < 4; v++) {
            bool bias = v & 1, res = v & 2;
            kiln_fused_conv_attrs ref = fc_at(a3, acts[k].act, acts[k].alpha, acts[k].beta, res), nh = ref;
            nh.layout = both;
            kiln_tensor *in[4] = {trand(F16, -1, 1, S(2, 16, 9, 7)), trand(F16, -0.3, 0.3, S(24, 16, 3, 3)),
                                  bias ? trand(F16, -1, 1, S(24)) : NULL, res ? trand(F16, -1, 1, S(2, 24, 9, 7)) : NULL};
            snprintf(name, sizeof name, "graph_%s%s%s", acts[k].name, bias ? "_bias" : "", res ? "_res" : "");
            nhwc_case(name, KILN_OP_FusedConv, &ref, &nh, res ? 4 : 3, in, 1u | 8u, true, 1e-5);
        }
    /* bf16 */
    kiln_fused_conv_attrs rr = fc_at(a3, KILN_FC_ACT_RELU, 0, 0, 1), rrn = rr;
    rrn.layout = both;
    nhwc_case("graph_bf16", KILN_OP_FusedConv, &rr, &rrn, 4,
              (kiln_tensor *[]){trand(BF16, -1, 1, S(2, 32, 8, 8)), trand(BF16, -0.2, 0.2, S(32, 32, 3, 3)),
                                trand(BF16, -1, 1, S(32)), trand(BF16, -1, 1, S(2, 32, 8, 8))},
              1u | 8u, true, 1e-4);
    /* the stem: NCHW input of 3 channels, 7x7 stride 2, converted and padded by the layer */
    kiln_conv_attrs st7 = conv_at(PAD_NOTSET, 1, 2, 7, 2, 1, 3, 3);
    kiln_fused_conv_attrs stem = fc_at(st7, KILN_FC_ACT_RELU, 0, 0, 0), stemn = stem;
    stemn.layout = KILN_FC_LAYOUT_Y_NHWC;
    nhwc_case("stem_c3_f16", KILN_OP_FusedConv, &stem, &stemn, 3,
              (kiln_tensor *[]){trand(F16, -1, 1, S(2, 3, 30, 29)), trand(F16, -0.3, 0.3, S(16, 3, 7, 7)),
                                trand(F16, -1, 1, S(16))},
              0, true, 1e-5);
    nhwc_case("nchw_in_c16_bf16", KILN_OP_FusedConv, &rr, &(kiln_fused_conv_attrs){.conv = a3, .act = KILN_FC_ACT_RELU,
                                                                                  .has_residual = 1,
                                                                                  .layout = KILN_FC_LAYOUT_Y_NHWC},
              4,
              (kiln_tensor *[]){trand(BF16, -1, 1, S(1, 16, 6, 6)), trand(BF16, -0.2, 0.2, S(16, 16, 3, 3)),
                                trand(BF16, -1, 1, S(16)), trand(BF16, -1, 1, S(1, 16, 6, 6))},
              8u, true, 1e-4);
    /* NCHW fp16 layers: odd channels, stride, asymmetric pads, dilation, groups */
    kiln_fused_conv_attrs odd = fc_at(a3, KILN_FC_ACT_RELU, 0, 0, 1);
    CASE("graph_nchw_odd", FusedConv, &odd, 1, 0, 1e-5, trand(F16, -1, 1, S(2, 5, 9, 11)),
         trand(F16, -0.3, 0.3, S(12, 5, 3, 3)), trand(F16, -1, 1, S(12)), trand(F16, -1, 1, S(2, 12, 9, 11)));
    kiln_fused_conv_attrs s2 = fc_at(conv_at(PAD_NOTSET, 1, 2, 3, 2, 1, 1, 0), KILN_FC_ACT_SILU, 0, 0, 0);
    CASE("graph_s2_asym", FusedConv, &s2, 1, 0, 1e-5, trand(F16, -1, 1, S(1, 16, 10, 9)),
         trand(F16, -0.3, 0.3, S(16, 16, 3, 3)), trand(F16, -1, 1, S(16)));
    kiln_fused_conv_attrs dil = fc_at(conv_at(PAD_NOTSET, 1, 2, 3, 1, 2, 2, 2), KILN_FC_ACT_RELU, 0, 0, 0);
    CASE("graph_dilated", FusedConv, &dil, 1, 0, 1e-5, trand(F16, -1, 1, S(1, 8, 12, 12)),
         trand(F16, -0.3, 0.3, S(16, 8, 3, 3)), trand(F16, -1, 1, S(16)));
    kiln_fused_conv_attrs grp = fc_at(conv_at(PAD_NOTSET, 4, 2, 3, 1, 1, 1, 1), KILN_FC_ACT_RELU, 0, 0, 0);
    CASE("graph_groups4", FusedConv, &grp, 1, 0, 1e-5, trand(F16, -1, 1, S(2, 32, 7, 7)),
         trand(F16, -0.3, 0.3, S(32, 8, 3, 3)), trand(F16, -1, 1, S(32)));
    kiln_fused_conv_attrs c1 = fc_at(conv_at(PAD_NOTSET, 1, 1, 3, 1, 1, 1, 1), KILN_FC_ACT_RELU, 0, 0, 0);
    CASE("graph_conv1d", FusedConv, &c1, 1, 0, 1e-5, trand(F16, -1, 1, S(2, 16, 20)),
         trand(F16, -0.3, 0.3, S(8, 16, 3)), trand(F16, -1, 1, S(8)));
}

/* Every tactic the builder would time (cuDNN's engine configs by id, then
 * the legacy path) makes its plan from the id alone and computes the layer:
 * an NHWC layer with a residual, and a stem converting its 3-channel NCHW
 * input (padded to 8 or 4 channels, or space-to-depth); an id no config
 * has fails in a tuning state. */
TEST(test_fused_conv_tactics) {
    kiln_conv_attrs a3 = conv_at(PAD_NOTSET, 1, 2, 3, 1, 1, 1, 1), s7 = conv_at(PAD_NOTSET, 1, 2, 7, 2, 1, 3, 3);
    for (int layer = 0; layer < 2; layer++) {
        bool stem = layer == 1;
        kiln_fused_conv_attrs ref = fc_at(stem ? s7 : a3, KILN_FC_ACT_RELU, 0, 0, !stem), nh = ref;
        nh.layout = stem ? KILN_FC_LAYOUT_Y_NHWC : KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
        int n_in = stem ? 3 : 4;
        kiln_tensor *in[4];
        if (stem) {
            in[0] = trand(F16, -1, 1, S(2, 3, 33, 30));
            in[1] = trand(F16, -0.2, 0.2, S(64, 3, 7, 7));
            in[2] = trand(F16, -1, 1, S(64));
            in[3] = NULL;
        } else {
            in[0] = trand(F16, -1, 1, S(4, 64, 14, 14));
            in[1] = trand(F16, -0.1, 0.1, S(64, 64, 3, 3));
            in[2] = trand(F16, -1, 1, S(64));
            in[3] = trand(F16, -1, 1, S(4, 64, 14, 14));
        }
        int32_t ids[32];
        int n = list_tactics("FusedConv/tactics", KILN_OP_FusedConv, &ref, &nh, n_in, in, ids, 32);
        if (n < 0) return;
        CHECK(n >= 2 && kcu_conv_is_legacy(ids[n - 1]));
        int s2d = 0;
        printf("  %s: %d tactics:", stem ? "stem" : "3x3", n);
        for (int k = 0; k < n; k++) {
            char nm[64];
            kiln__cu_fused_conv_tactic_describe(ids[k], nm, sizeof nm);
            printf(" %s", nm);
            s2d += strstr(nm, "/s2d") != NULL;
            kiln_fused_conv_attrs t = nh;
            t.tactic.id = ids[k];
            char what[96];
            snprintf(what, sizeof what, "%s_tactic_%s", stem ? "stem" : "3x3", nm);
            nhwc_case(what, KILN_OP_FusedConv, &ref, &t, n_in, in, stem ? 0 : 1u | 8u, true, 1e-5);
        }
        printf("\n");
        if (stem) CHECK(s2d > 0);
    }
    /* a depthwise NHWC layer: kiln's kernel first, then cuDNN's configs for the grouped graph
     * (no legacy path); each computes the layer */
    kiln_conv_attrs dwa = conv_at(PAD_NOTSET, 48, 2, 3, 2, 1, 1, 1);
    kiln_fused_conv_attrs dref = fc_at(dwa, KILN_FC_ACT_RELU, 0, 0, 1), dnh = dref;
    dnh.layout = KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
    kiln_tensor *din[4] = {trand(F16, -1, 1, S(4, 48, 15, 14)), trand(F16, -0.5, 0.5, S(48, 1, 3, 3)),
                           trand(F16, -1, 1, S(48)), trand(F16, -1, 1, S(4, 48, 8, 7))};
    int32_t ids[32];
    const int n = list_tactics("FusedConv/dw_tactics", KILN_OP_FusedConv, &dref, &dnh, 4, din, ids, 32);
    if (n >= 0) {
        CHECK(n >= 1 && ids[0] == KCU_CONV_TACTIC_DW);
        printf("  depthwise: %d tactics:", n);
        for (int k = 0; k < n; k++) {
            char nm[64];
            kiln__cu_fused_conv_tactic_describe(ids[k], nm, sizeof nm);
            printf(" %s", nm);
            CHECK(!kcu_conv_is_legacy(ids[k]));
            kiln_fused_conv_attrs t = dnh;
            t.tactic.id = ids[k];
            char what[96];
            snprintf(what, sizeof what, "dw_tactic_%s", nm);
            nhwc_case(what, KILN_OP_FusedConv, &dref, &t, 4, din, 1u | 8u, true, 1e-5);
        }
        printf("\n");
    }
    /* an id no config has (another cuDNN's): a tuning state refuses it */
    kiln_fused_conv_attrs bad = fc_at(a3, KILN_FC_ACT_RELU, 0, 0, 1);
    bad.layout = KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
    bad.tactic.id = KCU_DG_ID_BIT | 0x0ff00000 | 0xfffff;
    kiln_tensor *x = trand(F16, -1, 1, S(1, 16, 5, 5)), *r = trand(F16, -1, 1, S(1, 16, 5, 5));
    kiln_tensor *y = tnew(F16, 4, r->dims);
    kiln_tensor *gin[4] = {relayout(x, true), trand(F16, -1, 1, S(16, 16, 3, 3)), trand(F16, -1, 1, S(16)),
                           relayout(r, true)};
    int before = test_failed_checks;
    bool ran = gpu_run_op("FusedConv/missing_tactic", KILN_OP_FusedConv, &bad, 4, gin, y);
    CHECK(!ran && strstr(kiln_last_error(), "cannot be made") != NULL);
    test_failed_checks = before + (ran ? 1 : 0); /* gpu_run_op counted the expected failure */
}
#endif

/* One conv layer by one of the GEMM tactics (KCU_CONV_TACTIC_GEMM / _PATCH,
 * cuda_conv.c's conv_as_gemm) against the CPU's fp32 NCHW layer: layout
 * 0 (NCHW), X|Y (NHWC) or Y alone (the layer reads its NCHW input). */
static void gemm_conv_case(const char *name, int32_t tactic, int32_t layout, kiln_dtype t, int64_t N, int64_t C,
                           int64_t H, int64_t W, int64_t M, int64_t k, int64_t s, int act, float alpha, float beta,
                           bool bias, bool res) {
    kiln_conv_attrs ca = conv_at(PAD_NOTSET, 1, 2, k, s, 1, 0, 0);
    kiln_fused_conv_attrs ref = fc_at(ca, act, alpha, beta, res), at = ref;
    at.layout = layout;
    at.tactic.id = tactic;
    int64_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
    kiln_tensor *in[4] = {trand(t, -1, 1, S(N, C, H, W)), trand(t, -0.5, 0.5, S(M, C, k, k)),
                          bias ? trand(t, -1, 1, S(M)) : NULL, res ? trand(t, -1, 1, S(N, M, Ho, Wo)) : NULL};
    const bool x_nhwc = layout & KILN_FC_LAYOUT_X_NHWC, y_nhwc = layout & KILN_FC_LAYOUT_Y_NHWC;
    nhwc_case(name, KILN_OP_FusedConv, &ref, &at, res ? 4 : 3, in, (x_nhwc ? 1u : 0u) | (y_nhwc ? 8u : 0u), y_nhwc,
              t == BF16 ? 1e-4 : t == F16 ? 1e-5 : 1e-6);
}

/* kiln.SqueezeExcite (cuda_se.c) by tactic `tactic` on x [N, C, H, W] (NHWC
 * bytes where nhwc) with R hidden units against the reference kernel on
 * the same (fp16/bf16) tensors, which rounds the pooled and hidden vectors
 * to the type as the kernels do; bias1/bias2: B1/B2 present; nan: one value
 * of image 0 NaN (its whole scale NaN, the other images' not). */
static int se_fused_cases; /* cases whose tactic runs kcu_se (the emulator counts its launches) */
static void se_case(const char *name, int32_t tactic, bool nhwc, kiln_dtype t, int64_t N, int64_t C, int64_t H,
                    int64_t W, int64_t R, int act1, float alpha1, float beta1, int act2, float alpha2, float beta2,
                    bool bias1, bool bias2, bool nan) {
    se_fused_cases += tactic >= 1 && tactic <= 4 && kcu_se_fits(C, R) && (tactic == 1 || ((kiln_cuda_state *)st)->cc_major >= 9);
    kiln_se_attrs ref = {.act1 = act1, .alpha1 = alpha1, .beta1 = beta1, .act2 = act2, .alpha2 = alpha2,
                         .beta2 = beta2},
                  at = ref;
    at.layout = nhwc ? KILN_SE_LAYOUT_NHWC : KILN_SE_LAYOUT_NCHW;
    at.tactic.id = tactic;
    kiln_tensor *in[5] = {trand(t, -1, 1, S(N, C, H, W)), trand(t, -0.5, 0.5, S(R, C, 1, 1)),
                          trand(t, -0.5, 0.5, S(C, R, 1, 1)), bias1 ? trand(t, -1, 1, S(R)) : NULL,
                          bias2 ? trand(t, -1, 1, S(C)) : NULL};
    if (nan) kiln__store_f64(t, in[0]->data, (C / 2) * H * W + 1, NAN);
    nhwc_case(name, KILN_OP_SqueezeExcite, &ref, &at, bias2 ? 5 : bias1 ? 4 : 3, in, nhwc ? 1u : 0u, false,
              t == BF16 ? 1e-4 : t == F16 ? 1e-5 : 1e-6);
}

/* kiln.SqueezeExcite: the composed paths (tactic 0: the pool, then two GEMV
 * launches; 5: the pool, then two cuBLASLt GEMMs) and the one-launch kernel with clusters of 1, 2, 4 and 8 blocks
 * per image (tactics 1..4; 2..4 need sm_90, which the GPUs kiln targets
 * have), NHWC and NCHW, fp16 / bf16 / fp32, batches 1 and 32, on
 * MobileNetV3-Large's blocks (72/24 and 120/32 on 28 x 28, 480/120 and
 * 672/168 on 14 x 14, 672/168 and 960/240 on 7 x 7) and EfficientNet-B0's
 * (32/8 on 112 x 112, 144/6 on 56 x 56 and 28 x 28, 672/28 on 14 x 14,
 * 1152/48 on 7 x 7), every activation pair of the two models (ReLU /
 * HardSigmoid, SiLU / Sigmoid) and others, without biases, odd channel
 * counts (the scalar loads), NaN in one image; which tactics are listed. */
TEST(test_squeeze_excite) {
    static const struct {
        const char *name;
        int64_t N, C, H, W, R;
        kiln_dtype t;
        bool mb; /* MobileNetV3's activations (else EfficientNet's) */
    } ms[] = {
        {"mbv3_c72_28", 1, 72, 28, 28, 24, F16, true},      {"mbv3_c120_28_b32", 32, 120, 28, 28, 32, F16, true},
        {"mbv3_c480_14", 1, 480, 14, 14, 120, BF16, true},  {"mbv3_c672_14_b32", 32, 672, 14, 14, 168, BF16, true},
        {"mbv3_c672_7", 1, 672, 7, 7, 168, F16, true},      {"mbv3_c960_7", 1, 960, 7, 7, 240, F16, true},
        {"mbv3_c960_7_b32", 32, 960, 7, 7, 240, F16, true}, {"mbv3_c960_7_f32", 2, 960, 7, 7, 240, F32, true},
        {"effb0_c32_112", 1, 32, 112, 112, 8, F16, false},  {"effb0_c144_56", 1, 144, 56, 56, 6, BF16, false},
        {"effb0_c144_28_b32", 32, 144, 28, 28, 6, F16, false}, {"effb0_c672_14", 1, 672, 14, 14, 28, F16, false},
        {"effb0_c1152_7", 1, 1152, 7, 7, 48, F16, false},   {"effb0_c1152_7_b32", 32, 1152, 7, 7, 48, BF16, false},
        {"effb0_c1152_7_f32", 3, 1152, 7, 7, 48, F32, false},
    };
    char name[96];
#if KILN_CUDA_EMU
    const int se_before = kiln_emu_se_count();
#endif
    se_fused_cases = 0;
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        for (int32_t tac = 0; tac <= 5; tac++) {
            /* the 32-image cases: tactics 0, 1 and 4 (enough: the slices do not depend on N) */
            if (ms[i].N == 32 && (tac == 2 || tac == 3)) continue;
            const bool nhwc = i % 3 != 2;
            snprintf(name, sizeof name, "%s_%s_t%d", ms[i].name, nhwc ? "nhwc" : "nchw", (int)tac);
            if (ms[i].mb)
                se_case(name, tac, nhwc, ms[i].t, ms[i].N, ms[i].C, ms[i].H, ms[i].W, ms[i].R, KILN_FC_ACT_RELU, 0, 0,
                        KILN_FC_ACT_HARD_SIGMOID, 1.0f / 6.0f, 0.5f, true, true, false);
            else
                se_case(name, tac, nhwc, ms[i].t, ms[i].N, ms[i].C, ms[i].H, ms[i].W, ms[i].R, KILN_FC_ACT_SILU, 0, 0,
                        KILN_FC_ACT_SIGMOID, 0, 0, true, true, false);
        }
    /* other activations, absent biases, odd channels and hidden sizes (scalar loads), a plane of 1 */
    for (size_t a = 0; a < sizeof fc_acts / sizeof fc_acts[0]; a++) {
        const struct fc_act *f = &fc_acts[a], *g = &fc_acts[(a + 3) % (sizeof fc_acts / sizeof fc_acts[0])];
        const kiln_dtype ts[3] = {F16, BF16, F32};
        snprintf(name, sizeof name, "acts_%s_%s", f->name, g->name);
        se_case(name, (int32_t)(a % 6), a % 2 == 0, ts[a % 3], 1 + (int64_t)(a % 3), 40, 5, 6, 12, f->act, f->alpha,
                f->beta, g->act, g->alpha, g->beta, a % 4 != 1, a % 4 != 2, false);
    }
    for (int32_t tac = 0; tac <= 5; tac++) {
        snprintf(name, sizeof name, "odd_c45_r7_nhwc_t%d", (int)tac);
        se_case(name, tac, true, F16, 2, 45, 5, 5, 7, KILN_FC_ACT_RELU, 0, 0, KILN_FC_ACT_HARD_SIGMOID, 0.2f, 0.5f,
                true, true, false);
        snprintf(name, sizeof name, "odd_c45_r7_nchw_t%d", (int)tac);
        se_case(name, tac, false, BF16, 3, 45, 3, 7, 7, KILN_FC_ACT_SILU, 0, 0, KILN_FC_ACT_SIGMOID, 0, 0, false, true,
                false);
        snprintf(name, sizeof name, "plane1_t%d", (int)tac);
        se_case(name, tac, true, F16, 2, 16, 1, 1, 8, KILN_FC_ACT_RELU, 0, 0, KILN_FC_ACT_SIGMOID, 0, 0, true, false,
                false);
        /* NaN: ReLU and the gates keep it (max(NaN, 0) would give 0) */
        snprintf(name, sizeof name, "nan_relu_t%d", (int)tac);
        se_case(name, tac, tac % 2 == 0, F16, 3, 64, 7, 7, 16, KILN_FC_ACT_RELU, 0, 0, KILN_FC_ACT_HARD_SIGMOID,
                1.0f / 6.0f, 0.5f, true, true, true);
        /* more channels or hidden units than one launch holds in shared memory: tactic 0's path */
        snprintf(name, sizeof name, "too_wide_t%d", (int)tac);
        se_case(name, tac, true, F16, 1, KCU_SE_MAX_C + 8, 2, 2, 8, KILN_FC_ACT_RELU, 0, 0, KILN_FC_ACT_SIGMOID, 0, 0,
                true, true, false);
    }
#if KILN_CUDA_EMU
    /* each case of a fused tactic that fits launched kcu_se once (the others: the composed path) */
    CHECK(se_fused_cases >= 70 && kiln_emu_se_count() - se_before == se_fused_cases);
    /* tactic 5's GEMMs are the 1x1 FusedConvs' (kiln__cu_conv_rows_gemm, one policy): a ReLU layer has it in
     * cuBLASLt's epilogue (RELU_BIAS, RELU without its bias), the other activations a BIAS GEMM and a pass;
     * a 1x1 FusedConv with ReLU by `cublasLt-1x1` gets the same RELU_BIAS */
    {
        const int rb0 = kiln_emu_lt_epilogue_count(CUBLASLT_EPILOGUE_RELU_BIAS),
                  r0 = kiln_emu_lt_epilogue_count(CUBLASLT_EPILOGUE_RELU),
                  b0 = kiln_emu_lt_epilogue_count(CUBLASLT_EPILOGUE_BIAS);
        se_case("epi_relu_bias_t5", 5, true, F16, 2, 64, 3, 3, 16, KILN_FC_ACT_RELU, 0, 0,
                KILN_FC_ACT_HARD_SIGMOID, 1.0f / 6.0f, 0.5f, true, true, false);
        se_case("epi_relu_t5", 5, false, BF16, 2, 64, 3, 3, 16, KILN_FC_ACT_RELU, 0, 0,
                KILN_FC_ACT_SIGMOID, 0, 0, false, true, false);
        CHECK(kiln_emu_lt_epilogue_count(CUBLASLT_EPILOGUE_RELU_BIAS) - rb0 == 1 &&
              kiln_emu_lt_epilogue_count(CUBLASLT_EPILOGUE_RELU) - r0 == 1 &&
              kiln_emu_lt_epilogue_count(CUBLASLT_EPILOGUE_BIAS) - b0 == 2);
        gemm_conv_case("se1x1_relu_epi_f16", KCU_CONV_TACTIC_GEMM, 0, F16, 2, 64, 1, 1, 16, 1, 1, KILN_FC_ACT_RELU, 0,
                       0, true, false);
        CHECK(kiln_emu_lt_epilogue_count(CUBLASLT_EPILOGUE_RELU_BIAS) - rb0 == 2);
    }
#endif
    CHECK(kcu_se_fits(960, 240) && kcu_se_fits(KCU_SE_MAX_C, KCU_SE_MAX_R) && !kcu_se_fits(KCU_SE_MAX_C + 1, 8) &&
          !kcu_se_fits(64, KCU_SE_MAX_R + 1) && !kcu_se_fits(0, 8));
    /* the tactics listed: tactic 0, then the cuBLASLt one (not for fp64); the fused kernel with 1 block
     * per image, and clusters of 2, 4, 8 on sm_90, only where the state's se_fused (default on; off with
     * KILN_CUDA_SE_FUSED=0)
     * and where the vectors fit */
    kiln_cuda_state *cs = st;
    const bool fused0 = cs->se_fused;
    static const struct { int64_t C, R; kiln_dtype t; int fits; } ls[] = {
        {960, 240, F16, 1}, {32, 8, BF16, 1}, {KCU_SE_MAX_C + 8, 8, F16, 0}, {64, 16, KILN_DTYPE_FLOAT64, 0}};
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++)
        for (int on = 0; on < 2; on++) {
            cs->se_fused = on;
            kiln_se_attrs at = {.act1 = KILN_FC_ACT_RELU, .act2 = KILN_FC_ACT_SIGMOID};
            kiln_tinfo ti[3], yo;
            memset(ti, 0, sizeof ti);
            const int64_t d[3][4] = {{1, ls[i].C, 7, 7}, {ls[i].R, ls[i].C, 1, 1}, {ls[i].C, ls[i].R, 1, 1}};
            for (int k = 0; k < 3; k++) {
                ti[k].dtype = ls[i].t;
                ti[k].rank = 4;
                memcpy(ti[k].dims, d[k], sizeof d[k]);
            }
            const kiln_tinfo *tip[3] = {&ti[0], &ti[1], &ti[2]};
            kiln_tinfo *top[1] = {&yo};
            kiln_infer_args ia = {.op = kiln__op_by_id(KILN_OP_SqueezeExcite), .attrs = &at, .node_name = "se/tactics",
                                  .n_in = 3, .n_out = 1, .in = tip, .out = top};
            int32_t ids[16];
            int n = kiln__backend_tactics(be, st, &ia, false, ids, 16);
            const int blas = ls[i].t != KILN_DTYPE_FLOAT64;
            const int want = 1 + blas + (on && ls[i].fits ? (cs->cc_major >= 9 ? 4 : 1) : 0);
            CHECK(n == want && ids[0] == 0 && (!blas || ids[1] == 5));
            if (n != want) printf("  se tactics (C %lld, R %lld, on %d): %d, want %d\n", (long long)ls[i].C,
                                  (long long)ls[i].R, on, n, want);
            for (int k = 1 + blas; k < n; k++) CHECK(ids[k] == k - blas);
        }
    cs->se_fused = fused0;
    CHECK(!strcmp(kiln__cu_se_tactic_name(0), "kiln-gap+gemv") && !strcmp(kiln__cu_se_tactic_name(4), "kiln-se-c8") &&
          !strcmp(kiln__cu_se_tactic_name(5), "cublasLt-1x1+gap"));
}

/* Convolutions that are one GEMM: the 1x1 layers of squeeze-excite blocks
 * ([N, C, 1, 1] NCHW, batches 1 and 32) and NHWC 1x1 layers (MobileNetV3's
 * expansions with hard swish) by the GEMM tactic; patchify layers (ViT's
 * 16x16 stride 16 on 3 channels, ConvNeXt's 4x4 stem and 2x2 downsamples,
 * a 1x1 stride 2, odd channel counts and sizes whose last rows no patch
 * covers) by the PATCH tactic in every layout; every activation, with and
 * without bias and residual, fp16, bf16 and fp32. With cuDNN: the tactics
 * the builder times for such layers include the GEMM one. */
TEST(test_conv_gemm) {
    const int32_t both = KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
    const kiln_dtype ts[3] = {F16, BF16, F32};
    char name[96];
    for (size_t a = 0; a < sizeof fc_acts / sizeof fc_acts[0]; a++) {
        const struct fc_act *f = &fc_acts[a];
        kiln_dtype t = ts[a % 3];
        const char *tn = t == F16 ? "f16" : t == BF16 ? "bf16" : "f32";
        snprintf(name, sizeof name, "se1x1_%s_%s", f->name, tn);
        gemm_conv_case(name, KCU_CONV_TACTIC_GEMM, 0, t, a % 2 ? 32 : 1, 72, 1, 1, 24, 1, 1, f->act, f->alpha, f->beta,
                       a % 4 != 3, a % 3 == 1);
        snprintf(name, sizeof name, "nhwc1x1_%s_%s", f->name, tn);
        gemm_conv_case(name, KCU_CONV_TACTIC_GEMM, both, t, 2, 24, 5, 7, 40, 1, 1, f->act, f->alpha, f->beta,
                       a % 4 != 2, a % 2 == 0);
        snprintf(name, sizeof name, "patch2x2_%s_%s", f->name, tn);
        gemm_conv_case(name, KCU_CONV_TACTIC_PATCH, 0, t, 3, 5, 9, 10, 12, 2, 2, f->act, f->alpha, f->beta,
                       a % 4 != 1, a % 2 == 1);
    }
    gemm_conv_case("se1x1_b32_odd_f16", KCU_CONV_TACTIC_GEMM, 0, F16, 32, 13, 1, 1, 7, 1, 1, KILN_FC_ACT_HARD_SWISH,
                   0, 0, true, false);
    gemm_conv_case("se1x1_nchw_in_f16", KCU_CONV_TACTIC_GEMM, KILN_FC_LAYOUT_Y_NHWC, F16, 4, 32, 1, 1, 16, 1, 1,
                   KILN_FC_ACT_RELU, 0, 0, true, false);
    gemm_conv_case("vit16_f16", KCU_CONV_TACTIC_PATCH, 0, F16, 2, 3, 32, 48, 24, 16, 16, KILN_FC_ACT_NONE, 0, 0, true,
                   false);
    gemm_conv_case("vit16_b32_bf16", KCU_CONV_TACTIC_PATCH, 0, BF16, 32, 3, 32, 32, 16, 16, 16, KILN_FC_ACT_NONE, 0,
                   0, true, false);
    gemm_conv_case("stem4_rest_f16", KCU_CONV_TACTIC_PATCH, 0, F16, 1, 3, 17, 13, 16, 4, 4, KILN_FC_ACT_NONE, 0, 0,
                   true, false);
    gemm_conv_case("stem4_f32", KCU_CONV_TACTIC_PATCH, 0, F32, 2, 3, 16, 12, 8, 4, 4, KILN_FC_ACT_RELU, 0, 0, false,
                   true);
    gemm_conv_case("stem4_nchw_in_f16", KCU_CONV_TACTIC_PATCH, KILN_FC_LAYOUT_Y_NHWC, F16, 2, 3, 16, 20, 16, 4, 4,
                   KILN_FC_ACT_HARD_SWISH, 0, 0, true, false);
    gemm_conv_case("down2_nhwc_bf16", KCU_CONV_TACTIC_PATCH, both, BF16, 2, 24, 8, 11, 48, 2, 2, KILN_FC_ACT_SILU, 0,
                   0, true, true);
    gemm_conv_case("down2_odd_f16", KCU_CONV_TACTIC_PATCH, 0, F16, 2, 7, 7, 9, 9, 2, 2, KILN_FC_ACT_NONE, 0, 0, true,
                   true);
    gemm_conv_case("k1s2_nhwc_f16", KCU_CONV_TACTIC_PATCH, both, F16, 2, 16, 9, 9, 32, 1, 2, KILN_FC_ACT_RELU, 0, 0,
                   true, false);
    gemm_conv_case("k1s2_nchw_f16", KCU_CONV_TACTIC_PATCH, 0, F16, 2, 16, 9, 8, 24, 1, 2, KILN_FC_ACT_NONE, 0, 0,
                   false, false);
    /* cuBLASLt's second candidate (the first where it has one alone) */
    gemm_conv_case("nhwc1x1_cand1_f16", KCU_CONV_TACTIC_GEMM | 1 << KCU_CONV_TACTIC_CAND_SHIFT, both, F16, 4, 64, 7, 7,
                   128, 1, 1, KILN_FC_ACT_HARD_SWISH, 0, 0, true, true);
    gemm_conv_case("vit16_cand1_f16", KCU_CONV_TACTIC_PATCH | 1 << KCU_CONV_TACTIC_CAND_SHIFT, 0, F16, 4, 3, 32, 32,
                   64, 16, 16, KILN_FC_ACT_NONE, 0, 0, true, false);
    /* kiln's GEMV kernel (KCU_CONV_TACTIC_GEMV) on the squeeze-excite layers: every activation with and
     * without bias and residual, fp16 / bf16 / fp32, batches 1, 2, 3 (images per warp 1, 2 and a last
     * group of 4 with one image), 32; MobileNetV3-Large's and EfficientNet-B0's largest pairs; odd K (the
     * scalar path) */
#if KILN_CUDA_EMU
    const int gemv_before = kiln_emu_gemv_count();
#endif
    for (size_t a = 0; a < sizeof fc_acts / sizeof fc_acts[0]; a++) {
        const struct fc_act *f = &fc_acts[a];
        kiln_dtype t = ts[a % 3];
        const char *tn = t == F16 ? "f16" : t == BF16 ? "bf16" : "f32";
        static const int64_t batches[4] = {1, 2, 5, 32};
        snprintf(name, sizeof name, "gemv_%s_%s", f->name, tn);
        gemm_conv_case(name, KCU_CONV_TACTIC_GEMV, a % 5 == 4 ? both : 0, t, batches[a % 4], 72, 1, 1, 24, 1, 1, f->act,
                       f->alpha, f->beta, a % 4 != 3, a % 3 == 1);
    }
    gemm_conv_case("gemv_mbv3_fc1_f16", KCU_CONV_TACTIC_GEMV, 0, F16, 1, 960, 1, 1, 240, 1, 1, KILN_FC_ACT_RELU, 0, 0,
                   true, false);
    gemm_conv_case("gemv_mbv3_fc2_f16", KCU_CONV_TACTIC_GEMV, 0, F16, 1, 240, 1, 1, 960, 1, 1,
                   KILN_FC_ACT_HARD_SIGMOID, 1.0f / 6.0f, 0.5f, true, false);
    gemm_conv_case("gemv_effb0_fc1_b32_bf16", KCU_CONV_TACTIC_GEMV, 0, BF16, 32, 1152, 1, 1, 48, 1, 1,
                   KILN_FC_ACT_SILU, 0, 0, true, false);
    gemm_conv_case("gemv_effb0_fc2_b3_f16", KCU_CONV_TACTIC_GEMV, 0, F16, 3, 48, 1, 1, 1152, 1, 1, KILN_FC_ACT_SIGMOID,
                   0, 0, true, false);
    gemm_conv_case("gemv_odd_k_f16", KCU_CONV_TACTIC_GEMV, 0, F16, 2, 13, 1, 1, 7, 1, 1, KILN_FC_ACT_HARD_SWISH, 0, 0,
                   true, true);
    gemm_conv_case("gemv_nchw_in_f16", KCU_CONV_TACTIC_GEMV, KILN_FC_LAYOUT_Y_NHWC, F16, 4, 32, 1, 1, 16, 1, 1,
                   KILN_FC_ACT_RELU, 0, 0, true, false);
    /* a layer that is not one (7 x 7 input): tactic 0's path */
    gemm_conv_case("gemv_not_fit_f16", KCU_CONV_TACTIC_GEMV, 0, F16, 2, 16, 7, 7, 8, 1, 1, KILN_FC_ACT_RELU, 0, 0,
                   true, false);
    /* the tuning account counts it as kiln's own kernel */
    CHECK(kiln__cu_fused_conv_tactic_kind(st, KCU_CONV_TACTIC_GEMV) == KILN_TACTIC_KIND_KILN);
#if KILN_CUDA_EMU
    /* each of the cases above but the last ran the kernel once */
    CHECK(kiln_emu_gemv_count() - gemv_before == (int)(sizeof fc_acts / sizeof fc_acts[0]) + 6);
#endif
    /* a tactic that does not fit the layer (a 3x3 padded one): tactic 0's path */
    kiln_fused_conv_attrs ref3 = fc_at(conv_at(PAD_NOTSET, 1, 2, 3, 1, 1, 1, 1), KILN_FC_ACT_RELU, 0, 0, 0), g3 = ref3;
    g3.tactic.id = KCU_CONV_TACTIC_PATCH;
    nhwc_case("patch_not_fit", KILN_OP_FusedConv, &ref3, &g3, 3,
              (kiln_tensor *[]){trand(F16, -1, 1, S(1, 8, 6, 6)), trand(F16, -0.5, 0.5, S(8, 8, 3, 3)),
                                trand(F16, -1, 1, S(8))},
              0, false, 1e-5);
    /* the tactics listed for such layers (fp16): the GEMM ones (before the legacy path with cuDNN) */
    static const struct { int64_t C, H, W, M, k, s; int32_t layout, want; } ls[] = {
        {72, 1, 1, 24, 1, 1, 0, KCU_CONV_TACTIC_GEMM},          {24, 14, 14, 40, 1, 1, 3, KCU_CONV_TACTIC_GEMM},
        {3, 224, 224, 768, 16, 16, 0, KCU_CONV_TACTIC_PATCH},  {96, 56, 56, 192, 2, 2, 3, KCU_CONV_TACTIC_PATCH},
        {16, 14, 14, 32, 3, 1, 3, 0},
    };
    for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) {
        kiln_fused_conv_attrs at = fc_at(conv_at(PAD_NOTSET, 1, 2, ls[i].k, ls[i].s, 1, 0, 0), KILN_FC_ACT_HARD_SWISH,
                                         0, 0, 0);
        at.layout = ls[i].layout;
        kiln_tensor *in[3] = {tnew(F16, 4, (int64_t[]){2, ls[i].C, ls[i].H, ls[i].W}),
                              tnew(F16, 4, (int64_t[]){ls[i].M, ls[i].C, ls[i].k, ls[i].k}),
                              tnew(F16, 1, (int64_t[]){ls[i].M})};
        int32_t ids[32];
        int n = list_tactics("FusedConv/gemm_tactics", KILN_OP_FusedConv, &at, &at, 3, in, ids, 32), found = 0, gemv = 0;
        if (n < 0) continue;
        for (int j = 0; j < n; j++) found += kcu_conv_gemm_kind(ids[j]) == ls[i].want && ls[i].want;
        for (int j = 0; j < n; j++) gemv += ids[j] == KCU_CONV_TACTIC_GEMV;
        /* [N, C, 1, 1] layers: kiln's GEMV kernel too, after the GEMM ones */
        const bool se = ls[i].H == 1 && ls[i].W == 1;
        CHECK(gemv == (se ? 1 : 0));
#if KILN_HAVE_CUDNN
        /* ... GEMM tactics, [GEMV,] then the legacy ones (each pinning an algorithm) */
        int nl = 0;
        while (nl < n && kcu_conv_is_legacy(ids[n - 1 - nl])) nl++;
        const int end = n - nl - (se ? 1 : 0); /* the end of the list before them */
        CHECK(nl >= 1 && nl <= 2);
        CHECK(!se || (end >= 0 && ids[end] == KCU_CONV_TACTIC_GEMV));
        CHECK(ls[i].want ? found >= 1 && end >= 1 && kcu_conv_gemm_kind(ids[end - 1]) == ls[i].want
                         : end < 1 || !kcu_conv_gemm_kind(ids[end - 1]));
#else
        const int last = n - (se ? 1 : 0); /* the end of the list before the GEMV tactic */
        CHECK(!se || ids[n - 1] == KCU_CONV_TACTIC_GEMV);
        CHECK(n >= 1 && (ls[i].want ? found >= 1 && kcu_conv_gemm_kind(ids[last - 1]) == ls[i].want : found == 0));
#endif
    }
#if KILN_HAVE_CUDNN
    /* hard swish and hard sigmoid as cuDNN graphs (composed of MUL, ADD, clipped RELU_FWD[, MUL]):
     * a 3x3 NHWC layer with a residual lists engine configs, and each computes it */
    static const struct fc_act composed[2] = {{KILN_FC_ACT_HARD_SWISH, 0, 0, "hswish"},
                                              {KILN_FC_ACT_HARD_SIGMOID, 1.0f / 6.0f, 0.5f, "hsigmoid"}};
    for (int c = 0; c < 2; c++) {
        kiln_fused_conv_attrs href = fc_at(conv_at(PAD_NOTSET, 1, 2, 3, 1, 1, 1, 1), composed[c].act,
                                           composed[c].alpha, composed[c].beta, 1),
                              hnh = href;
        hnh.layout = both;
        kiln_tensor *hin[4] = {trand(F16, -1, 1, S(2, 16, 9, 7)), trand(F16, -0.3, 0.3, S(24, 16, 3, 3)),
                               trand(F16, -1, 1, S(24)), trand(F16, -1, 1, S(2, 24, 9, 7))};
        snprintf(name, sizeof name, "FusedConv/%s_tactics", composed[c].name);
        int32_t ids[32];
        int n = list_tactics(name, KILN_OP_FusedConv, &href, &hnh, 4, hin, ids, 32), n_dnn = 0;
        if (n < 0) continue;
        printf("  %s 3x3: %d tactics:", composed[c].name, n);
        for (int k = 0; k < n; k++) {
            char nm[64], cn[96];
            kiln__cu_fused_conv_tactic_describe(ids[k], nm, sizeof nm);
            printf(" %s", nm);
            n_dnn += kcu_dg_is_id(ids[k]);
            kiln_fused_conv_attrs t = hnh;
            t.tactic.id = ids[k];
            snprintf(cn, sizeof cn, "%s_tactic_%s", composed[c].name, nm);
            nhwc_case(cn, KILN_OP_FusedConv, &href, &t, 4, hin, 1u | 8u, true, 1e-5);
        }
        printf("\n");
        CHECK(n_dnn > 0);
    }
#endif
}

TEST(test_fused_transformer) {
    {
        /* FusedMatMul's tactics: up to KCU_GEMM_MAX_CANDIDATES of cuBLASLt's
         * heuristic candidates (8 before: BERT-base's GEMMs at batch 64 chose
         * the 7th), each named. BERT-base's QKV GEMM at batch 64: M 8192, K 768,
         * N 2304, fp16, bias epilogue (the count is a note: cuBLASLt's) */
        kiln_cuda_gemm p = {.t = F16, .M = 8192, .N = 2304, .K = 768, .batch = 1, .lda = 768, .ldb = 2304,
                            .ldc = 2304, .epi = KCU_EPI_BIAS, .alpha = 1.0};
        int n = kiln__cuda_gemm_candidates((kiln_cuda_state *)st, &p, 64);
        printf("  cuBLASLt candidates for BERT-base's QKV GEMM at batch 64: %d\n", n);
        CHECK(n >= 1 && n <= KCU_GEMM_MAX_CANDIDATES);
        char want[32];
        for (int k = 0; k < KCU_GEMM_MAX_CANDIDATES; k++) {
            snprintf(want, sizeof want, "cublasLt#%d", k);
            CHECK(!strcmp(kiln__cu_fused_matmul_tactic_name(k), want));
        }
        CHECK(!strcmp(kiln__cu_fused_matmul_tactic_name(KCU_GEMM_MAX_CANDIDATES), "cublasLt#?"));
        CHECK(KCU_GEMM_MAX_CANDIDATES >= 32);
    }
    for (int act = KILN_FACT_NONE; act <= KILN_FACT_GELU_TANH; act++) {
        kiln_fused_matmul_attrs at = {.act = act}, tb = {.act = act, .trans_b = 1};
        char name[32];
        snprintf(name, sizeof name, "act%d_bias", act);
        /* GELU(tanh) inside cuBLASLt may differ from the CPU's by a little more */
        double tol = act == KILN_FACT_GELU_TANH ? 1e-8 : 1e-10;
        CASE(name, FusedMatMul, &at, 1, 0, tol, trand(F32, -1, 1, S(2, 9, 32)),
             trand(F32, -1, 1, S(32, 24)), trand(F32, -1, 1, S(24)));
        snprintf(name, sizeof name, "act%d_tb_nobias", act);
        CASE(name, FusedMatMul, &tb, 1, 0, tol, trand(F32, -1, 1, S(7, 16)), trand(F32, -1, 1, S(8, 16)));
    }
    kiln_gelu_attrs erf = {0}, tanh_ = {1};
    CASE("erf", Gelu, &erf, 1, 0, 1e-10, trand(F32, -4, 4, S(3, 1000)));
    CASE("tanh", Gelu, &tanh_, 1, 0, 1e-10, trand(F32, -4, 4, S(5, 77)));
    kiln_attention_attrs bshd = {.num_heads = 4, .q_layout = KILN_ATTN_BSHD, .k_layout = KILN_ATTN_BSHD,
                                 .v_layout = KILN_ATTN_BSHD, .out_layout = KILN_ATTN_BSHD,
                                 .scale = 0.25f};
    CASE("bshd_mask", Attention, &bshd, 1, 0, 1e-9, trand(F32, -1, 1, S(2, 70, 64)),
         trand(F32, -1, 1, S(2, 70, 64)), trand(F32, -1, 1, S(2, 70, 64)), trand(F32, -2, 0, S(2, 1, 1, 70)));
    kiln_attention_attrs mixed = {.num_heads = 2, .q_layout = KILN_ATTN_BHSD, .k_layout = KILN_ATTN_BHDS,
                                  .v_layout = KILN_ATTN_BHSD, .out_layout = KILN_ATTN_BHSD,
                                  .scale = 0.125f};
    CASE("bhds_nomask", Attention, &mixed, 1, 0, 1e-9, trand(F32, -1, 1, S(1, 2, 33, 64)),
         trand(F32, -1, 1, S(1, 2, 64, 40)), trand(F32, -1, 1, S(1, 2, 40, 64)));
    kiln_attention_attrs d128 = {.num_heads = 1, .q_layout = KILN_ATTN_BHSD, .k_layout = KILN_ATTN_BHSD,
                                 .v_layout = KILN_ATTN_BHSD, .out_layout = KILN_ATTN_BSHD,
                                 .scale = 0.1f};
    CASE("d100_full_mask", Attention, &d128, 1, 0, 1e-9, trand(F32, -1, 1, S(2, 1, 5, 100)),
         trand(F32, -1, 1, S(2, 1, 9, 100)), trand(F32, -1, 1, S(2, 1, 9, 100)),
         trand(F32, -1, 1, S(2, 1, 5, 9)));
    /* Y = act(A B + bias + residual): the residual before the activation */
    for (int act = KILN_FACT_NONE; act <= KILN_FACT_GELU_TANH; act++) {
        kiln_fused_matmul_attrs ra = {.act = act};
        char name[32];
        snprintf(name, sizeof name, "act%d_bias_residual", act);
        CASE(name, FusedMatMul, &ra, 1, 0, act == KILN_FACT_GELU_TANH ? 1e-8 : 1e-10,
             trand(F32, -1, 1, S(3, 5, 32)), trand(F32, -1, 1, S(32, 24)), trand(F32, -1, 1, S(24)),
             trand(F32, -1, 1, S(3, 5, 24)));
    }
    /* NaN and +-inf in A and in the residual (cuBLASLt's ReLU epilogue must keep NaN: a GPU run checks) */
    for (int act = KILN_FACT_NONE; act <= KILN_FACT_GELU_TANH; act++) {
        kiln_fused_matmul_attrs ra = {.act = act};
        char name[40];
        snprintf(name, sizeof name, "act%d_specials", act);
        CASE(name, FusedMatMul, &ra, 1, 0, act == KILN_FACT_GELU_TANH ? 1e-8 : 1e-10,
             specials(trand(F32, -1, 1, S(3, 5, 32))), trand(F32, -1, 1, S(32, 24)), trand(F32, -1, 1, S(24)),
             specials(trand(F32, -1, 1, S(3, 5, 24))));
        snprintf(name, sizeof name, "act%d_specials_nores", act);
        CASE(name, FusedMatMul, &ra, 1, 0, act == KILN_FACT_GELU_TANH ? 1e-8 : 1e-10,
             specials(trand(F32, -1, 1, S(3, 5, 32))), trand(F32, -1, 1, S(32, 24)), trand(F32, -1, 1, S(24)));
    }
    /* fp16/bf16 layers (the precision pass converts fused layers): reference in fp32 */
    kiln_fused_matmul_attrs gl = {.act = KILN_FACT_GELU_ERF};
    CASE("gelu_bias_res_f16", FusedMatMul, &gl, 1, 0, 1e-5, trand(F16, -1, 1, S(2, 9, 64)),
         trand(F16, -1, 1, S(64, 48)), trand(F16, -1, 1, S(48)), trand(F16, -1, 1, S(2, 9, 48)));
    CASE("bias_bf16", FusedMatMul, &gl, 1, 0, 1e-4, trand(BF16, -1, 1, S(17, 32)),
         trand(BF16, -1, 1, S(32, 16)), trand(BF16, -1, 1, S(16)));
    CASE("erf_f16", Gelu, &erf, 1, 0, 1e-5, trand(F16, -4, 4, S(3, 1000)));
    CASE("bshd_mask_f16", Attention, &bshd, 1, 0, 1e-5, trand(F16, -1, 1, S(2, 70, 64)),
         trand(F16, -1, 1, S(2, 70, 64)), trand(F16, -1, 1, S(2, 70, 64)), trand(F16, -2, 0, S(2, 1, 1, 70)));
    CASE("bhds_nomask_bf16", Attention, &mixed, 1, 0, 1e-4, trand(BF16, -1, 1, S(1, 2, 33, 64)),
         trand(BF16, -1, 1, S(1, 2, 64, 40)), trand(BF16, -1, 1, S(1, 2, 40, 64)));
    CASE("gelu_onnx_tanh_f16", GeluOnnx, &tanh_, 1, 0, 1e-5, trand(F16, -4, 4, S(7, 33)));
    CASE("gelu_onnx_erf", GeluOnnx, &erf, 1, 0, 1e-10, trand(F32, -4, 4, S(2, 50)));

    /* the exporters' forms (src/passes/fuse_transformer.c): a bool cond (SDPA's
     * Where(mask, 0, -inf) + Add, masked_fill's select), a second additive mask,
     * IsNaN + Where after the softmax; the QKV layout of one fused projection */
    kiln_attention_attrs qkv = {.num_heads = 3, .q_layout = KILN_ATTN_QKV, .k_layout = KILN_ATTN_QKV,
                                .v_layout = KILN_ATTN_QKV, .out_layout = KILN_ATTN_BSHD, .scale = 0.125f,
                                .cond_mode = KILN_ATTN_COND_ADD, .cond_fill_if = 0, .fill = -INFINITY,
                                .nan_to_zero = 1};
    for (int k = 0; k < 2; k++) {
        kiln_dtype t = k ? BF16 : F16;
        kiln_tensor *x = trand(t, -1, 1, S(2, 77, 3 * 3 * 64)), *c = trand(BOOL, 0, 1, S(2, 1, 1, 77));
        for (int j = 0; j < 77; j++) ((uint8_t *)c->data)[77 + j] = 0; /* batch 1: every key masked out */
        CASE(k ? "qkv_cond_nan_bf16" : "qkv_cond_nan_f16", Attention, &qkv, 1, 0, k ? 1e-4 : 1e-5, x, x, x,
             NULL, c);
    }
    kiln_attention_attrs nonan = qkv;
    nonan.nan_to_zero = 0;
    {
        kiln_tensor *x = trand(F16, -1, 1, S(1, 19, 3 * 3 * 32)), *c = tnew(BOOL, 4, (int64_t[]){1, 1, 1, 19});
        CASE("qkv_all_masked_nan_f16", Attention, &nonan, 1, 0, 1e-5, x, x, x, NULL, c);
    }
    /* select with a huge fill (every key of some rows masked: uniform weights),
     * a padding mask and a position bias, cross attention over 2+ key tiles */
    kiln_attention_attrs sel = {.num_heads = 2, .q_layout = KILN_ATTN_BHSD, .k_layout = KILN_ATTN_BHSD,
                                .v_layout = KILN_ATTN_BHSD, .out_layout = KILN_ATTN_BHSD, .scale = 0.3f,
                                .cond_mode = KILN_ATTN_COND_SELECT, .cond_fill_if = 1, .fill = -3.4e38f};
    for (int k = 0; k < 3; k++) {
        kiln_dtype t = k == 0 ? F32 : k == 1 ? F16 : BF16;
        kiln_tensor *c = trand(BOOL, 0, 1, S(45, 150));
        for (int j = 0; j < 150; j++) ((uint8_t *)c->data)[3 * 150 + j] = 1; /* row 3: every key filled */
        CASE(k == 0 ? "select_bias_f32" : k == 1 ? "select_bias_f16" : "select_bias_bf16", Attention, &sel, 1, 0,
             k == 0 ? 1e-9 : k == 1 ? 1e-5 : 1e-4, trand(t, -1, 1, S(2, 2, 45, 32)), trand(t, -1, 1, S(2, 2, 150, 32)),
             trand(t, -1, 1, S(2, 2, 150, 48)), trand(t, -2, 0, S(2, 1, 1, 150)), c, trand(t, -1, 1, S(1, 2, 45, 150)));
    }
    /* head sizes the tensor-core kernel pads (80, 128), one it loads element by
     * element (20: rows not whole 16-byte chunks), K given transposed */
    kiln_attention_attrs big = {.num_heads = 2, .q_layout = KILN_ATTN_BSHD, .k_layout = KILN_ATTN_BSHD,
                                .v_layout = KILN_ATTN_BSHD, .out_layout = KILN_ATTN_BSHD, .scale = 0.1f};
    CASE("d128_f16", Attention, &big, 1, 0, 1e-5, trand(F16, -1, 1, S(3, 200, 256)),
         trand(F16, -1, 1, S(3, 130, 256)), trand(F16, -1, 1, S(3, 130, 256)));
    CASE("d80_bf16", Attention, &big, 1, 0, 1e-4, trand(BF16, -1, 1, S(2, 65, 160)),
         trand(BF16, -1, 1, S(2, 64, 160)), trand(BF16, -1, 1, S(2, 64, 160)), trand(BF16, -3, 0, S(2, 1, 65, 64)));
    CASE("d20_f16", Attention, &big, 1, 0, 1e-5, trand(F16, -1, 1, S(2, 9, 40)),
         trand(F16, -1, 1, S(2, 70, 40)), trand(F16, -1, 1, S(2, 70, 40)));
    CASE("bhds_d64_f16", Attention, &mixed, 1, 0, 1e-5, trand(F16, -1, 1, S(2, 2, 128, 64)),
         trand(F16, -1, 1, S(2, 2, 64, 128)), trand(F16, -1, 1, S(2, 2, 128, 64)), NULL, NULL,
         trand(F16, -1, 1, S(2, 1, 128, 128)));

    /* sequence first (torch's nn.MultiheadAttention): Q, K, V and O [S, B, H*D]
     * (SBHD), or Q, K, V side by side in one [S, B, 3*H*D] (SQKV) with its key
     * padding mask as a cond ([B, 1, 1, Sk], -inf added) and a float [S, S]
     * attn_mask */
    kiln_attention_attrs sbhd = {.num_heads = 2, .q_layout = KILN_ATTN_SBHD, .k_layout = KILN_ATTN_SBHD,
                                 .v_layout = KILN_ATTN_SBHD, .out_layout = KILN_ATTN_SBHD, .scale = 0.2f};
    kiln_attention_attrs sqkv = {.num_heads = 3, .q_layout = KILN_ATTN_SQKV, .k_layout = KILN_ATTN_SQKV,
                                 .v_layout = KILN_ATTN_SQKV, .out_layout = KILN_ATTN_SBHD, .scale = 0.125f,
                                 .cond_mode = KILN_ATTN_COND_ADD, .cond_fill_if = 1, .fill = -INFINITY};
    for (int k = 0; k < 3; k++) {
        kiln_dtype t = k == 0 ? F32 : k == 1 ? F16 : BF16;
        double tol = k == 0 ? 1e-9 : k == 1 ? 1e-5 : 1e-4;
        CASE(k == 0 ? "sbhd_mask_f32" : k == 1 ? "sbhd_mask_f16" : "sbhd_mask_bf16", Attention, &sbhd, 1, 0, tol,
             trand(t, -1, 1, S(9, 3, 64)), trand(t, -1, 1, S(70, 3, 64)), trand(t, -1, 1, S(70, 3, 64)),
             trand(t, -2, 0, S(3, 1, 1, 70)));
        kiln_attention_attrs skv = sbhd; /* cross attention: K and V side by side, Sk != Sq */
        skv.k_layout = skv.v_layout = KILN_ATTN_SKV;
        kiln_tensor *kv = trand(t, -1, 1, S(70, 3, 2 * 2 * 64));
        CASE(k == 0 ? "skv_cross_f32" : k == 1 ? "skv_cross_f16" : "skv_cross_bf16", Attention, &skv, 1, 0, tol,
             trand(t, -1, 1, S(9, 3, 2 * 64)), kv, kv);
        kiln_attention_attrs bkv = skv; /* batch first */
        bkv.q_layout = bkv.out_layout = KILN_ATTN_BSHD;
        bkv.k_layout = bkv.v_layout = KILN_ATTN_KV;
        kiln_tensor *kvb = trand(t, -1, 1, S(3, 33, 2 * 2 * 64));
        CASE(k == 0 ? "kv_cross_f32" : k == 1 ? "kv_cross_f16" : "kv_cross_bf16", Attention, &bkv, 1, 0, tol,
             trand(t, -1, 1, S(3, 9, 2 * 64)), kvb, kvb, trand(t, -2, 0, S(3, 1, 1, 33)));
        kiln_tensor *x = trand(t, -1, 1, S(77, 2, 3 * 3 * 64)), *c = tnew(BOOL, 4, (int64_t[]){2, 1, 1, 77});
        for (int j = 70; j < 77; j++) ((uint8_t *)c->data)[77 + j] = 1; /* batch 1: the last 7 keys padded */
        CASE(k == 0 ? "sqkv_kpm_causal_f32" : k == 1 ? "sqkv_kpm_causal_f16" : "sqkv_kpm_causal_bf16", Attention,
             &sqkv, 1, 0, tol, x, x, x, trand(t, -2, 0, S(77, 77)), c);
    }

    /* The tensor-core kernel's ways of sharing out the work (k_attn_plan.h),
     * each forced in turn, then chosen: 16 rows per CTA with 4 warps over the
     * keys (small batches; partials merged in shared memory), the 32/64-row
     * tiles of large batches. Batch 1 with BERT's 12 heads, sequences that
     * are not multiples of 16 or of a key step (1, 77, 200), a single key,
     * key slices with no keys at all, every mask form. */
    kiln_cuda_state *cst = st;
    const int keep_split = cst->attn_split;
    kiln_attention_attrs bert = {.num_heads = 12, .q_layout = KILN_ATTN_BSHD, .k_layout = KILN_ATTN_BSHD,
                                 .v_layout = KILN_ATTN_BSHD, .out_layout = KILN_ATTN_BSHD, .scale = 0.125f};
    kiln_attention_attrs qkv_b1 = qkv;
    qkv_b1.num_heads = 4;
    kiln_attention_attrs h2 = {.num_heads = 2, .q_layout = KILN_ATTN_BHSD, .k_layout = KILN_ATTN_BHSD,
                               .v_layout = KILN_ATTN_BHSD, .out_layout = KILN_ATTN_BSHD, .scale = 0.09f};
    for (int mode = 1; mode >= -1; mode--) {
        cst->attn_split = mode;
        char nm[64];
#define SPLIT_NAME(what) (snprintf(nm, sizeof nm, "%s_split%d", what, mode), nm)
        CASE(SPLIT_NAME("b1_bert_s128_f16"), Attention, &bert, 1, 0, 1e-5, trand(F16, -1, 1, S(1, 128, 768)),
             trand(F16, -1, 1, S(1, 128, 768)), trand(F16, -1, 1, S(1, 128, 768)),
             trand(F16, -3, 0, S(1, 1, 1, 128)));
        CASE(SPLIT_NAME("b1_bert_s77_bf16"), Attention, &bert, 1, 0, 1e-4, trand(BF16, -1, 1, S(1, 77, 768)),
             trand(BF16, -1, 1, S(1, 77, 768)), trand(BF16, -1, 1, S(1, 77, 768)),
             trand(BF16, -3, 0, S(1, 1, 1, 77)));
        CASE(SPLIT_NAME("b1_q1_k33_f16"), Attention, &bert, 1, 0, 1e-5, trand(F16, -1, 1, S(1, 1, 768)),
             trand(F16, -1, 1, S(1, 33, 768)), trand(F16, -1, 1, S(1, 33, 768)));
        CASE(SPLIT_NAME("b1_k1_f16"), Attention, &bert, 1, 0, 1e-5, trand(F16, -1, 1, S(1, 20, 768)),
             trand(F16, -1, 1, S(1, 1, 768)), trand(F16, -1, 1, S(1, 1, 768)));
        {
            kiln_tensor *x = trand(F16, -1, 1, S(1, 77, 3 * 4 * 64)), *c = trand(BOOL, 0, 1, S(1, 1, 1, 77));
            ((uint8_t *)c->data)[0] = 1; /* cond_fill_if 0: a key kept */
            CASE(SPLIT_NAME("b1_qkv_cond_s77_f16"), Attention, &qkv_b1, 1, 0, 1e-5, x, x, x, NULL, c);
        }
        for (int k = 0; k < 2; k++) {
            kiln_dtype t = k ? BF16 : F16;
            kiln_tensor *c = trand(BOOL, 0, 1, S(45, 150));
            for (int j = 0; j < 150; j++) ((uint8_t *)c->data)[3 * 150 + j] = 1; /* row 3: every key filled */
            CASE(SPLIT_NAME(k ? "b2_select_bias_bf16" : "b2_select_bias_f16"), Attention, &sel, 1, 0, k ? 1e-4 : 1e-5,
                 trand(t, -1, 1, S(2, 2, 45, 32)), trand(t, -1, 1, S(2, 2, 150, 32)), trand(t, -1, 1, S(2, 2, 150, 48)),
                 trand(t, -2, 0, S(2, 1, 1, 150)), c, trand(t, -1, 1, S(1, 2, 45, 150)));
        }
        /* head size 128 (key slices of 16, steps of 64 keys: 4 steps, double-buffered) */
        CASE(SPLIT_NAME("b1_d128_s200_bias_f16"), Attention, &h2, 1, 0, 1e-5, trand(F16, -1, 1, S(1, 2, 200, 128)),
             trand(F16, -1, 1, S(1, 2, 200, 128)), trand(F16, -1, 1, S(1, 2, 200, 128)),
             trand(F16, -2, 0, S(1, 1, 1, 200)), NULL, trand(F16, -1, 1, S(1, 2, 200, 200)));
        CASE(SPLIT_NAME("b1_d32_s300_bf16"), Attention, &h2, 1, 0, 1e-4, trand(BF16, -1, 1, S(1, 2, 300, 32)),
             trand(BF16, -1, 1, S(1, 2, 300, 32)), trand(BF16, -1, 1, S(1, 2, 300, 32)));
        /* ViT-B/16 at batch 1: 197 tokens, 12 heads of 64, Q, K, V packed sequence first */
        {
            kiln_attention_attrs vit = {.num_heads = 12, .q_layout = KILN_ATTN_SQKV, .k_layout = KILN_ATTN_SQKV,
                                        .v_layout = KILN_ATTN_SQKV, .out_layout = KILN_ATTN_SBHD, .scale = 0.125f};
            kiln_tensor *x = trand(F16, -1, 1, S(197, 1, 3 * 768));
            CASE(SPLIT_NAME("b1_vit_sqkv_s197_f16"), Attention, &vit, 1, 0, 1e-5, x, x, x);
        }
        /* every key masked out (NaN, or 0 with nan_to_zero) */
        {
            kiln_tensor *x = trand(F16, -1, 1, S(1, 19, 3 * 3 * 32)), *c = tnew(BOOL, 4, (int64_t[]){1, 1, 1, 19});
            CASE(SPLIT_NAME("b1_all_masked_nan_f16"), Attention, &nonan, 1, 0, 1e-5, x, x, x, NULL, c);
            CASE(SPLIT_NAME("b1_all_masked_zero_f16"), Attention, &qkv, 1, 0, 1e-5, x, x, x, NULL, c);
        }
#undef SPLIT_NAME
    }
    cst->attn_split = keep_split;
}

/* Set by test_attention_nan_tactics: a cuDNN fused attention config that
 * differs from the CPU is a note (attn_lib_notes counts them), not a failure. */
static bool attn_lib_as_note;
static int attn_lib_notes;

/* cuDNN's attention configs listed so far per graph form (cuda_sdpa.c):
 * the composite graph, its stride-0 mask form (/s0), the SDPA operation (/op). */
static int attn_dnn_forms[3];

/* Every tactic the builder would time for an Attention (kiln's kernel with
 * the keys never / always split, then cuDNN's fused attention configs)
 * computes the layer as the CPU reference does. Returns how many of cuDNN's
 * configs were listed (attn_dnn_forms counts them by form). */
static int attn_tactic_cases(const char *what, const kiln_attention_attrs *at, int n_in, kiln_tensor *const *in,
                             double tol) {
    int32_t ids[32];
    int n = list_tactics(what, KILN_OP_Attention, at, at, n_in, in, ids, 32), n_dnn = 0;
    if (n < 0) return 0;
    bool half = in[0]->dtype == F16 || in[0]->dtype == BF16;
    CHECK(n >= 1);
    if (half)
        CHECK(n >= 4 && ids[0] == KCU_ATTN_TACTIC_ROWS && ids[1] == KCU_ATTN_TACTIC_SPLIT &&
              ids[2] == KCU_ATTN_TACTIC_FA64 && ids[3] == KCU_ATTN_TACTIC_FA128);
    printf("  %s: %d tactics:", what, n);
    for (int k = 0; k < n; k++) {
        char nm[64], name[160];
        kiln__cu_attention_tactic_describe(ids[k], nm, sizeof nm);
        printf(" %s", nm);
        if (strncmp(nm, "cudnn-sdpa", 10) == 0) {
            n_dnn++;
            attn_dnn_forms[strstr(nm, "/op") ? 2 : strstr(nm, "/s0") ? 1 : 0]++;
        }
        kiln_attention_attrs t = *at;
        t.tactic.id = ids[k];
        snprintf(name, sizeof name, "%s_tactic_%s", what, nm);
        int before = test_failed_checks;
        run_case(name, KILN_OP_Attention, &t, n_in, in, 1, 0, tol);
        if (attn_lib_as_note && test_failed_checks > before && strncmp(nm, "cudnn-sdpa", 10) == 0) {
            printf("\n  note: cuDNN config %s differs from the CPU on NaN/inf inputs here (line above); the "
                   "builder's NaN probe must keep it out where the input is NaN\n ", nm);
            test_failed_checks = before;
            attn_lib_notes++;
        }
    }
    printf("\n");
    return n_dnn;
}

#define ATTN_TACTICS(what, attrs, tol, ...)                                                              \
    attn_tactic_cases(what, attrs, (int)(sizeof((kiln_tensor *[]){__VA_ARGS__}) / sizeof(kiln_tensor *)), \
                      (kiln_tensor *[]){__VA_ARGS__}, tol)

/* Attention's tactics on the forms the exporters give (src/passes/fuse_transformer.c):
 * each tactic forced in turn against the CPU reference. With cuDNN, its fused
 * attention is listed for the layers it takes (BERT's padding mask, a
 * position bias, packed QKV, sequence-first layouts, cross attention, head
 * size 128, a bool cond that adds -inf) and not for those it does not (a
 * select of a finite fill, mask and cond together, head size 20). */
TEST(test_attention_tactics) {
    /* 4 of cuDNN's configs per graph (the builder times them all and checks them
     * against kiln's host reference); KILN_CUDNN_CANDIDATES=N in the environment: N */
    bool capped = !getenv("KILN_CUDNN_CANDIDATES");
    if (capped) setenv("KILN_CUDNN_CANDIDATES", "4", 1);
    kiln_cuda_state *fst = st;
    const bool keep_fa = fst->attn_fa;
    fst->attn_fa = true; /* the fa64/fa128 tactics (on unless KILN_CUDA_ATTN_FA=0) are checked here */
    kiln_attention_attrs bshd = {.num_heads = 2, .q_layout = KILN_ATTN_BSHD, .k_layout = KILN_ATTN_BSHD,
                                 .v_layout = KILN_ATTN_BSHD, .out_layout = KILN_ATTN_BSHD, .scale = 0.125f};
    kiln_attention_attrs bhsd = {.num_heads = 2, .q_layout = KILN_ATTN_BHSD, .k_layout = KILN_ATTN_BHSD,
                                 .v_layout = KILN_ATTN_BHSD, .out_layout = KILN_ATTN_BSHD, .scale = 0.09f};
    kiln_attention_attrs vit = {.num_heads = 12, .q_layout = KILN_ATTN_SQKV, .k_layout = KILN_ATTN_SQKV,
                                .v_layout = KILN_ATTN_SQKV, .out_layout = KILN_ATTN_SBHD, .scale = 0.125f};
    kiln_attention_attrs qkv = {.num_heads = 3, .q_layout = KILN_ATTN_QKV, .k_layout = KILN_ATTN_QKV,
                                .v_layout = KILN_ATTN_QKV, .out_layout = KILN_ATTN_BSHD, .scale = 0.125f};
    kiln_attention_attrs sbhd = {.num_heads = 2, .q_layout = KILN_ATTN_SBHD, .k_layout = KILN_ATTN_SBHD,
                                 .v_layout = KILN_ATTN_SBHD, .out_layout = KILN_ATTN_SBHD, .scale = 0.2f};
    kiln_attention_attrs bkv = {.num_heads = 2, .q_layout = KILN_ATTN_BSHD, .k_layout = KILN_ATTN_KV,
                                .v_layout = KILN_ATTN_KV, .out_layout = KILN_ATTN_BSHD, .scale = 0.1f};
    int dnn = 0, dnn_bert = 0;
    memset(attn_dnn_forms, 0, sizeof attn_dnn_forms);
    for (int k = 0; k < 2; k++) {
        kiln_dtype t = k ? BF16 : F16;
        double tol = k ? 1e-4 : 1e-5;
        char nm[64];
#define TNAME(w) (snprintf(nm, sizeof nm, "%s_%s", w, k ? "bf16" : "f16"), nm)
        /* BERT: [B, S, H*D] with its padding mask [B, 1, 1, S] (and the same at batch 8, s128) */
        dnn_bert += ATTN_TACTICS(TNAME("bert_mask"), &bshd, tol, trand(t, -1, 1, S(2, 77, 128)),
                                 trand(t, -1, 1, S(2, 77, 128)), trand(t, -1, 1, S(2, 77, 128)),
                                 trand(t, -3, 0, S(2, 1, 1, 77)));
        dnn += ATTN_TACTICS(TNAME("bert_b8_s128"), &bshd, tol, trand(t, -1, 1, S(8, 128, 128)),
                            trand(t, -1, 1, S(8, 128, 128)), trand(t, -1, 1, S(8, 128, 128)),
                            trand(t, -3, 0, S(8, 1, 1, 128)));
        /* a position bias per head over [Sq, Sk] (input 5), head size 128 */
        dnn += ATTN_TACTICS(TNAME("bhsd_d128_bias"), &bhsd, tol, trand(t, -1, 1, S(1, 2, 200, 128)),
                            trand(t, -1, 1, S(1, 2, 200, 128)), trand(t, -1, 1, S(1, 2, 200, 128)), NULL, NULL,
                            trand(t, -1, 1, S(1, 2, 200, 200)));
        /* ViT-B/16: Q, K, V packed sequence first, no mask */
        kiln_tensor *x = trand(t, -1, 1, S(197, 1, 3 * 768));
        dnn += ATTN_TACTICS(TNAME("vit_sqkv"), &vit, tol, x, x, x);
        /* one fused projection, batch first */
        kiln_tensor *xq = trand(t, -1, 1, S(2, 33, 3 * 3 * 64));
        dnn += ATTN_TACTICS(TNAME("qkv"), &qkv, tol, xq, xq, xq);
        /* sequence first with a key padding mask, cross attention (Sq 9, Sk 70) */
        dnn += ATTN_TACTICS(TNAME("sbhd_cross_mask"), &sbhd, tol, trand(t, -1, 1, S(9, 3, 128)),
                            trand(t, -1, 1, S(70, 3, 128)), trand(t, -1, 1, S(70, 3, 128)),
                            trand(t, -2, 0, S(3, 1, 1, 70)));
        /* K and V side by side, head size 128 */
        kiln_tensor *kv = trand(t, -1, 1, S(3, 40, 2 * 2 * 128));
        dnn += ATTN_TACTICS(TNAME("kv_cross_d128"), &bkv, tol, trand(t, -1, 1, S(3, 17, 2 * 128)), kv, kv);
        /* every key of batch 1 masked with -inf: NaN rows (or zeros with nan_to_zero) */
        for (int z = 0; z < 2; z++) {
            kiln_attention_attrs m = bshd;
            m.nan_to_zero = z;
            kiln_tensor *mk = trand(t, -3, 0, S(2, 1, 1, 40));
            for (int j = 0; j < 40; j++) kiln__store_f64(t, mk->data, 40 + j, -INFINITY);
            ATTN_TACTICS(TNAME(z ? "all_masked_zero" : "all_masked_nan"), &m, tol, trand(t, -1, 1, S(2, 40, 128)),
                         trand(t, -1, 1, S(2, 40, 128)), trand(t, -1, 1, S(2, 40, 128)), mk);
        }
        /* torch 2.x's SDPA export: a bool key padding cond adding -inf, IsNaN + Where after
         * the softmax (cuDNN: the cond as an additive mask); masked_fill's select of -inf */
        kiln_attention_attrs cq = qkv;
        cq.cond_mode = KILN_ATTN_COND_ADD;
        cq.fill = -INFINITY;
        cq.nan_to_zero = 1;
        kiln_tensor *c = trand(BOOL, 0, 1, S(2, 1, 1, 33));
        ((uint8_t *)c->data)[0] = 0; /* batch 0: a key kept */
        for (int j = 0; j < 33; j++) ((uint8_t *)c->data)[33 + j] = 0; /* batch 1: every key masked */
        ATTN_TACTICS(TNAME("qkv_cond_add"), &cq, tol, xq, xq, xq, NULL, c);
        kiln_attention_attrs cs = bhsd;
        cs.cond_mode = KILN_ATTN_COND_SELECT;
        cs.cond_fill_if = 1;
        cs.fill = -INFINITY;
        kiln_tensor *c2 = trand(BOOL, 0, 1, S(64, 64));
        for (int j = 0; j < 64; j++) ((uint8_t *)c2->data)[j * 64 + j] = 0; /* the diagonal kept */
        ATTN_TACTICS(TNAME("causal_select"), &cs, tol, trand(t, -1, 1, S(2, 2, 64, 64)),
                     trand(t, -1, 1, S(2, 2, 64, 64)), trand(t, -1, 1, S(2, 2, 64, 64)), NULL, c2);
        /* what cuDNN's graph does not take: a select of a finite fill (rows of it give
         * uniform weights, an addition would not), mask and cond together, head size 20 */
        kiln_attention_attrs fin = cs;
        fin.fill = -3.4e38f;
        CHECK(ATTN_TACTICS(TNAME("select_finite"), &fin, tol, trand(t, -1, 1, S(2, 2, 64, 64)),
                           trand(t, -1, 1, S(2, 2, 64, 64)), trand(t, -1, 1, S(2, 2, 64, 64)), NULL, c2) == 0);
        CHECK(ATTN_TACTICS(TNAME("mask_and_cond"), &cs, tol, trand(t, -1, 1, S(2, 2, 64, 64)),
                           trand(t, -1, 1, S(2, 2, 64, 64)), trand(t, -1, 1, S(2, 2, 64, 64)),
                           trand(t, -2, 0, S(2, 1, 1, 64)), c2) == 0);
        kiln_attention_attrs d20 = bshd;
        CHECK(ATTN_TACTICS(TNAME("d20"), &d20, tol, trand(t, -1, 1, S(2, 9, 40)), trand(t, -1, 1, S(2, 70, 40)),
                           trand(t, -1, 1, S(2, 70, 40))) == 0);
        /* the masks of kiln-attn-fa64/128 (staged in shared memory): rows of 16-byte
         * chunks (Sk 144: a float mask and a causal cond together, 3 steps of keys, 3
         * or 2 query tiles), rows element by element (Sk 77, 150, 197: not 16-byte
         * aligned), mask, cond and bias at once with a finite select fill, head size 128
         * with a causal select whose first row keeps no key (nan_to_zero) */
        kiln_tensor *c144 = tnew(BOOL, 2, (int64_t[]){144, 144});
        for (int i = 0; i < 144; i++)
            for (int j = i + 1; j < 144; j++) ((uint8_t *)c144->data)[i * 144 + j] = 1; /* keys after the query */
        ATTN_TACTICS(TNAME("causal_mask_s144"), &cs, tol, trand(t, -1, 1, S(2, 2, 144, 64)),
                     trand(t, -1, 1, S(2, 2, 144, 64)), trand(t, -1, 1, S(2, 2, 144, 64)),
                     trand(t, -2, 0, S(1, 1, 144, 144)), c144);
        ATTN_TACTICS(TNAME("full_mask_s77"), &bshd, tol, trand(t, -1, 1, S(2, 77, 128)), trand(t, -1, 1, S(2, 77, 128)),
                     trand(t, -1, 1, S(2, 77, 128)), trand(t, -3, 0, S(2, 1, 77, 77)));
        kiln_attention_attrs sel3 = fin;
        sel3.scale = 0.3f;
        kiln_tensor *c3 = trand(BOOL, 0, 1, S(45, 150));
        for (int j = 0; j < 150; j++) ((uint8_t *)c3->data)[3 * 150 + j] = 1; /* row 3: every key filled */
        ATTN_TACTICS(TNAME("select_mask_bias"), &sel3, tol, trand(t, -1, 1, S(2, 2, 45, 32)),
                     trand(t, -1, 1, S(2, 2, 150, 32)), trand(t, -1, 1, S(2, 2, 150, 48)),
                     trand(t, -2, 0, S(2, 1, 1, 150)), c3, trand(t, -1, 1, S(1, 2, 45, 150)));
        kiln_attention_attrs c128 = cs;
        c128.nan_to_zero = 1;
        kiln_tensor *c197 = tnew(BOOL, 2, (int64_t[]){197, 197});
        for (int i = 0; i < 197; i++)
            for (int j = i + 1; j < 197; j++) ((uint8_t *)c197->data)[i * 197 + j] = 1;
        ((uint8_t *)c197->data)[0] = 1; /* query 0: no key left */
        ATTN_TACTICS(TNAME("causal_d128_s197"), &c128, tol, trand(t, -1, 1, S(1, 2, 197, 128)),
                     trand(t, -1, 1, S(1, 2, 197, 128)), trand(t, -1, 1, S(1, 2, 197, 128)), NULL, c197);
#undef TNAME
    }
    /* float32 layers: kiln's kernel alone */
    CHECK(ATTN_TACTICS("bert_mask_f32", &bshd, 1e-9, trand(F32, -1, 1, S(2, 20, 128)), trand(F32, -1, 1, S(2, 20, 128)),
                       trand(F32, -1, 1, S(2, 20, 128)), trand(F32, -3, 0, S(2, 1, 1, 20))) == 0);
#if KILN_HAVE_CUDNN
    /* cuDNN takes the unmasked layers on every GPU it runs fused attention on (sm80+) */
    kiln_cuda_state *cst = st;
    if (cst->dnn && cst->cc_major >= 8 && !getenv("KILN_CUDNN_SDPA")) {
        CHECK(dnn > 0);
        /* the composite graph (what masked layers need) and, from cuDNN 9.13.1, the SDPA
         * operation each have configs for the unmasked forms (vit, qkv, kv) */
        CHECK(attn_dnn_forms[0] > 0);
        if (cudnnGetVersion() >= 91301) CHECK(attn_dnn_forms[2] > 0);
    }
    printf("  cuDNN fused attention: %d configs over the forms (composite graph %d, stride-0 mask %d, SDPA "
           "operation %d), %d for BERT's mask; a fully masked row per engine:",
           dnn + dnn_bert, attn_dnn_forms[0], attn_dnn_forms[1], attn_dnn_forms[2], dnn_bert);
    for (int e = 0; e < 256; e++)
        if (cst->sdpa_masked[e])
            printf(" eng%d %s", e, cst->sdpa_masked[e] == 1 ? "zeros" : cst->sdpa_masked[e] == 2 ? "NaN" : "neither");
    printf("\n");
#else
    CHECK(dnn == 0 && dnn_bert == 0);
#endif
    if (capped) unsetenv("KILN_CUDNN_CANDIDATES");
    fst->attn_fa = keep_fa;
}

/* x with value v at element i (a NaN or an infinity planted), returned */
static kiln_tensor *plant(kiln_tensor *x, int64_t i, double v) {
    kiln__store_f64(x->dtype, x->data, i, v);
    return x;
}

/* NaN and inf in Q, K and V of an Attention, each tactic forced in turn
 * (kiln-attn for fp32; kiln-attn-rows/split/fa64/fa128 and cuDNN's fused
 * attention configs for fp16/bf16) against the CPU, whose softmax and P V
 * propagate them (issue 20: random CUDA graph 69, fp32, gave finite values
 * where the CPU gives NaN). A failure names the case and the tactic:
 *   nan_q       a NaN in one query: that row is NaN
 *   nan_k       a NaN in one key: every row of that head is NaN
 *   nan_v       a NaN in one value: that column is NaN in every row
 *   inf_k_nan_v random graph 69's form: +inf in a key where every query is
 *               negative, so that key's score is -inf (weight 0) in every row,
 *               and NaN / inf in its value: 0 * NaN, 0 * inf are NaN in P V,
 *               so those columns are NaN (kiln-attn skipped keys of score
 *               -inf: finite values)
 *   masked_nan_v a key masked with -inf whose value holds NaN: NaN column
 *   all_masked_nan_v every key of batch 1 masked, nan_to_zero: its rows are
 *               zeros but for the column where a masked value is NaN (the
 *               CPU's IsNaN/Where zeros P, then P V gives 0 * NaN)
 * kiln's kernels must match (a failure); a cuDNN config that differs is a
 * note (attn_lib_as_note): cuDNN's semantics are not ours to fix, and
 * the builder's NaN probe checks a NaN input per layer. */
static void attn_nan_cases(kiln_dtype t) {
    const char *tn = t == F32 ? "f32" : t == F16 ? "f16" : "bf16";
    double tol = t == F32 ? 1e-9 : t == F16 ? 1e-5 : 1e-4;
    char nm[96];
#define NNAME(w) (snprintf(nm, sizeof nm, "nan_%s_%s", w, tn), nm)
    /* random graph 69's layer: [1, 2, 5, 3] heads first, scale 1/sqrt(3) */
    kiln_attention_attrs g69 = {.num_heads = 2, .q_layout = KILN_ATTN_BHSD, .k_layout = KILN_ATTN_BHSD,
                                .v_layout = KILN_ATTN_BHSD, .out_layout = KILN_ATTN_BSHD, .scale = 0.57735027f};
    /* [2, 150, 2 heads of 64]: three tiles of keys for the tensor-core kernels */
    kiln_attention_attrs bshd = {.num_heads = 2, .q_layout = KILN_ATTN_BSHD, .k_layout = KILN_ATTN_BSHD,
                                 .v_layout = KILN_ATTN_BSHD, .out_layout = KILN_ATTN_BSHD, .scale = 0.125f};
#define QKV69 S(1, 2, 5, 3)
#define QKV S(2, 150, 128)
    ATTN_TACTICS(NNAME("q_g69"), &g69, tol, plant(trand(t, -1, 1, QKV69), 4 * 3 + 1, NAN), trand(t, -1, 1, QKV69),
                 trand(t, -1, 1, QKV69));
    ATTN_TACTICS(NNAME("k_g69"), &g69, tol, trand(t, -1, 1, QKV69), plant(trand(t, -1, 1, QKV69), 2 * 3, NAN),
                 trand(t, -1, 1, QKV69));
    ATTN_TACTICS(NNAME("v_g69"), &g69, tol, trand(t, -1, 1, QKV69), trand(t, -1, 1, QKV69),
                 plant(trand(t, -1, 1, QKV69), 15 + 3 + 2, NAN));
    /* head 0, key 2: k[.., 2, 1] = +inf, every q[.., 1] < 0; v[.., 2, 0] = inf, v[.., 2, 1] = NaN */
    kiln_tensor *q69 = trand(t, -1, 1, QKV69);
    for (int i = 0; i < 5; i++) kiln__store_f64(t, q69->data, i * 3 + 1, -0.25 - 0.1 * i);
    ATTN_TACTICS(NNAME("inf_k_nan_v_g69"), &g69, tol, q69, plant(trand(t, -1, 1, QKV69), 2 * 3 + 1, INFINITY),
                 plant(plant(trand(t, -1, 1, QKV69), 2 * 3, INFINITY), 2 * 3 + 1, NAN));
    ATTN_TACTICS(NNAME("q"), &bshd, tol, plant(trand(t, -1, 1, QKV), 3 * 128 + 5, NAN), trand(t, -1, 1, QKV),
                 trand(t, -1, 1, QKV));
    ATTN_TACTICS(NNAME("k"), &bshd, tol, trand(t, -1, 1, QKV), plant(trand(t, -1, 1, QKV), 140 * 128 + 70, NAN),
                 trand(t, -1, 1, QKV));
    ATTN_TACTICS(NNAME("v"), &bshd, tol, trand(t, -1, 1, QKV), trand(t, -1, 1, QKV),
                 plant(trand(t, -1, 1, QKV), (150 + 9) * 128 + 2, NAN));
    /* batch 0, key 100 (the second tile): +inf in column 64 (head 1), every q of head 1's column 0 < 0 */
    kiln_tensor *qn = trand(t, -1, 1, QKV);
    for (int i = 0; i < 300; i++) kiln__store_f64(t, qn->data, i * 128 + 64, -0.5);
    ATTN_TACTICS(NNAME("inf_k_nan_v"), &bshd, tol, qn, plant(trand(t, -1, 1, QKV), 100 * 128 + 64, INFINITY),
                 plant(plant(trand(t, -1, 1, QKV), 100 * 128 + 64, INFINITY), 100 * 128 + 65, NAN));
    /* key 4 of batch 0 masked with -inf, its value NaN in column 3 */
    kiln_tensor *mk = trand(t, -3, 0, S(2, 1, 1, 150));
    kiln__store_f64(t, mk->data, 4, -INFINITY);
    ATTN_TACTICS(NNAME("masked_v"), &bshd, tol, trand(t, -1, 1, QKV), trand(t, -1, 1, QKV),
                 plant(trand(t, -1, 1, QKV), 4 * 128 + 3, NAN), mk);
    /* every key of batch 1 masked, nan_to_zero: zeros, but NaN in column 2 (key 0's value) */
    kiln_attention_attrs z = bshd;
    z.nan_to_zero = 1;
    kiln_tensor *ma = trand(t, -3, 0, S(2, 1, 1, 150));
    for (int j = 0; j < 150; j++) kiln__store_f64(t, ma->data, 150 + j, -INFINITY);
    ATTN_TACTICS(NNAME("all_masked_zero_v"), &z, tol, trand(t, -1, 1, QKV), trand(t, -1, 1, QKV),
                 plant(trand(t, -1, 1, QKV), 150 * 128 + 2, NAN), ma);
#undef QKV
#undef QKV69
#undef NNAME
}

TEST(test_attention_nan_tactics) {
    bool capped = !getenv("KILN_CUDNN_CANDIDATES");
    if (capped) setenv("KILN_CUDNN_CANDIDATES", "4", 1);
    kiln_cuda_state *fst = st;
    const bool keep_fa = fst->attn_fa;
    fst->attn_fa = true;
    attn_lib_as_note = true;
    attn_lib_notes = 0;
    attn_nan_cases(F32);
    attn_nan_cases(F16);
    attn_nan_cases(BF16);
    attn_lib_as_note = false;
    printf("  %d cuDNN fused attention config runs differ from the CPU on NaN/inf inputs (notes above)\n",
           attn_lib_notes);
    fst->attn_fa = keep_fa;
    if (capped) unsetenv("KILN_CUDNN_CANDIDATES");
}

/* Launch geometry past CUDA's grid limits (gridDim.y and z <= 65535, x <= 2^31 - 1):
 * the helpers both the launchers (k_fused.cu) and the emulator use, then layers whose
 * old grids put a shape-sized count in gridDim.y and failed with "invalid
 * configuration argument": kiln's GEMV kernel on a batch of 4 x 65535 + 5 images
 * (it put the groups of 4 images in y; a FusedConv by the GEMV tactic and
 * SqueezeExcite's default path), the thread-per-row attention kernel (fp32) on
 * 65535 x 64 + 1 query rows (it put the 64-row chunks in y). GPU memory: about
 * 10 MB, 10 MB and 140 MB. */
TEST(test_grid_limits) {
    CHECK(kcu_grid_ok(1, 1, 1) && kcu_grid_ok(KCU_GRID_X_MAX, 65535, 65535));
    CHECK(!kcu_grid_ok(KCU_GRID_X_MAX + 1, 1, 1) && !kcu_grid_ok(1, 65536, 1) && !kcu_grid_ok(1, 1, 65536) &&
          !kcu_grid_ok(0, 1, 1));
    /* GEMV: every image in exactly one (block row, step) for batches around the limit */
    static const int64_t ns[] = {1, 2, 3, 4, 5, 4 * 65535, 4 * 65535 + 1, 4 * 65535 + 5, 1000003};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        int nb = 0;
        int64_t gx = 0, gy = 0;
        CHECK(kcu_conv_gemv_grid(ns[i], 24, &nb, &gx, &gy));
        CHECK(kcu_grid_ok(gx, gy, 1) && gx == 3);
        /* the kernel's walk: block row y takes the groups of nb images at y, y + gy, ... */
        uint8_t *hit = calloc((size_t)ns[i], 1);
        CHECK(hit != NULL);
        if (!hit) continue;
        bool once = true;
        for (int64_t y = 0; y < gy; y++)
            for (int64_t n0 = y * nb; n0 < ns[i]; n0 += gy * nb)
                for (int64_t n = n0; n < n0 + nb && n < ns[i]; n++) once = once && hit[n]++ == 0;
        for (int64_t n = 0; n < ns[i]; n++) once = once && hit[n] == 1;
        free(hit);
        CHECK(once);
    }
    /* the thread-per-row attention: all of (batch, head, chunk) in gridDim.x */
    int64_t chunks = 0, gx = 0;
    CHECK(kcu_attention_grid(1, 1, 65535 * 64 + 1, &chunks, &gx) && chunks == 65536 && gx == 65536);
    CHECK(kcu_attention_grid(4096, 16, 128, &chunks, &gx) && chunks == 2 && gx == 4096 * 16 * 2);
    CHECK(kcu_attention_grid(1, 1, 0, &chunks, &gx) && gx == 0);
    CHECK(!kcu_attention_grid(1 << 20, 1 << 11, 64 * 2, &chunks, &gx)); /* 2^32 blocks */
    CHECK(!kcu_attention_grid(INT64_MAX / 2, 4, 64, &chunks, &gx));    /* B H overflows */
    /* the layers */
    gemm_conv_case("gemv_batch_past_grid_y_f16", KCU_CONV_TACTIC_GEMV, 0, F16, 4 * 65535 + 5, 16, 1, 1, 8, 1, 1,
                   KILN_FC_ACT_RELU, 0, 0, true, true);
    /* kiln.SqueezeExcite's default path (tactic 0: the pool, then two kcu_conv_gemv launches) at that batch */
    se_case("se_gemv_batch_past_grid_y_f16", 0, false, F16, 4 * 65535 + 5, 8, 1, 1, 4, KILN_FC_ACT_RELU, 0, 0,
            KILN_FC_ACT_SIGMOID, 0, 0, true, true, false);
    kiln_attention_attrs bhsd = {.num_heads = 1, .q_layout = KILN_ATTN_BHSD, .k_layout = KILN_ATTN_BHSD,
                                 .v_layout = KILN_ATTN_BHSD, .out_layout = KILN_ATTN_BHSD, .scale = 0.5f};
    const int64_t sq = 65535 * 64 + 1;
    CASE("attention_rows_past_grid_y_f32", Attention, &bhsd, 1, 0, 1e-5, trand(F32, -1, 1, S(1, 1, sq, 4)),
         trand(F32, -1, 1, S(1, 1, 3, 4)), trand(F32, -1, 1, S(1, 1, 3, 4)));
    /* launches that cap a grid (y or z at 65535, or x at 65535 or KCU_MAX_BLOCKS) and
     * step over the rest in the kernel, at shapes past the cap (70000 batch entries,
     * rows or lines): the steps were never run on a GPU before (about 60 MB in all) */
    const int64_t big = 70000;
    kiln_transpose_attrs p021 = {3, {0, 2, 1}};
    CASE("transpose_batch_past_grid_z_f32", Transpose, &p021, 1, 0, 0, trand(F32, -3, 3, S(big, 8, 8)));
    CASE("matmulinteger_batch_past_grid_z", MatMulInteger, NULL, 1, 0, 0, tbits(U8, S(big, 2, 3)),
         tbits(U8, S(big, 3, 2)));
    kiln_softmax_attrs last = {-1, 0};
    CASE("softmax_rows_past_max_blocks_f32", Softmax, &last, 1, 0, 1e-10, trand(F32, -5, 5, S(big, 16)));
    kiln_ln_attrs ln = {-1, 1e-5f, 1};
    CASE("layernorm_rows_past_max_blocks_f32", LayerNormalization, &ln, 1, 0, 1e-10, trand(F32, -3, 3, S(big, 16)),
         trand(F32, 0.5, 2, S(16)), trand(F32, -1, 1, S(16)));
    kiln_reduce_attrs keep = {1, 0};
    CASE("reducesum_rows_past_max_blocks_f32", ReduceSum, &keep, 1, 0x2, 0, trand(F32, -3, 3, S(big, 32)),
         tvals(I64, V(1)));
    kiln_topk_attrs lg = {-1, 1, 1};
    CASE("topk_rows_past_grid_cap_f32", TopK, &lg, 2, 0x2, 0, trand(F32, -3, 3, S(big, 8)), tvals(I64, V(2)));
#if !KILN_CUDA_EMU
    /* CumSum's line kernel (integers, lines of KCU_CUMSUM_LINE or more) over 65537 lines:
     * 2 x 134 MB on the GPU (GPU only: the emulator does not model the grid) */
    kiln_cumsum_attrs plain = {0, 0};
    CASE("cumsum_lines_past_grid_cap_i8", CumSum, &plain, 1, 0x2, 0, tbits(I8, S(65537, KCU_CUMSUM_LINE)),
         tscalar(I64, 1));
#endif
}

/* every op of the table has at least one case */
#include "cuda/cases_index.inc"
#include "cuda/cases_spatial.inc"
#include "cuda/cases_seq.inc"
#include "cuda/cases_misc.inc"
#include "cuda/cases_pointwise.inc"

TEST(test_coverage) {
    for (int id = 1; id < KILN_OP_ID_LIMIT; id++)
        if (kiln__cuda_kernel_for(id) && !covered[id]) {
            const kiln_op_def *op = kiln__op_by_id(id);
            FAILF("op %s (id %d) is in the CUDA table but has no test case", op ? op->name : "?", id);
        }
    printf("  %d cases, %d ops in the CUDA table\n", n_cases, kiln__cuda_kernel_count());
}

#define TESTS_BASE(X)                                                                         \
    X(test_api) X(test_unary) X(test_predicates) X(test_clip) X(test_binary) X(test_variadic) \
    X(test_where) X(test_cast) X(test_copies) X(test_transpose) X(test_concat_split)          \
    X(test_slice) X(test_expand_tile) X(test_gather) X(test_global_pool) X(test_matmul)
#define TESTS_NN(X) X(test_gemm) X(test_conv) X(test_pool) X(test_pool_nhwc) X(test_dwconv_nhwc) X(test_gconv_nhwc) X(test_dwconv_nchw) X(test_norm) X(test_softmax)
#define TESTS_REDUCE(X) X(test_reduce)
#if KILN_HAVE_CUDNN
#define TESTS_FC(X) X(test_fused_conv) X(test_fused_conv_special_values) X(test_fused_conv_nhwc) X(test_fused_conv_graph) X(test_fused_conv_tactics) X(test_fused_conv_nan_tactics) X(test_conv_legacy_pinned) X(test_conv_gemm) X(test_squeeze_excite) X(test_se_engine) X(test_se_engine_layouts)
#else
#define TESTS_FC(X) X(test_fused_conv) X(test_fused_conv_special_values) X(test_fused_conv_nan_tactics) X(test_conv_gemm) X(test_squeeze_excite) X(test_se_engine) X(test_se_engine_layouts)
#endif
#define TESTS_FT(X) X(test_fused_transformer) X(test_attention_tactics) X(test_attention_nan_tactics) X(test_grid_limits)
#define ALL_TESTS(X) \
    TESTS_BASE(X) TESTS_NN(X) TESTS_REDUCE(X) TESTS_FC(X) TESTS_FT(X) TESTS_INDEX(X) \
    TESTS_SPATIAL(X) TESTS_SEQ(X) TESTS_MISC(X) TESTS_PW(X) X(test_node_state) X(test_engine_host_inputs) X(test_engine_changing_buffers) X(test_shared_attention_mask) \
    X(test_coverage)

#define COUNT_ONE(t) +1
/* KILN_TEST_ONLY=test_a,test_b runs just those (tests/test.h) */
#define RUN_ONE(t)                      \
    do {                                \
        if (test_selected(#t)) {        \
            RUN(t);                     \
            arena_reset();              \
        }                               \
    } while (0);

int main(void) {
    const int n_tests = 0 ALL_TESTS(COUNT_ONE);
    be = kiln__cuda_backend();
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0) {
        (void)cudaGetLastError();
        printf("no CUDA device: skipping (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "no device found");
        /* the backend must still fail cleanly */
        void *s = (void *)1;
        kiln_status rs = be->state_create(0, &s);
        int bad = !(rs == KILN_ERR_DEVICE && s == NULL &&
                    strstr(kiln_last_error(), "no CUDA device available") != NULL);
        if (bad)
            fprintf(stderr, "  state_create without a device: %s, \"%s\"\n", kiln_status_name(rs),
                    kiln_last_error());
        printf("0 passed, %d failed, %d skipped\n", bad, n_tests);
        return bad;
    }
    kiln_status s = be->state_create(0, &st);
    if (s != KILN_OK) {
        printf("FAIL state_create: %s: %s\n", kiln_status_name(s), kiln_last_error());
        printf("0 passed, 1 failed\n");
        return 1;
    }
    ALL_TESTS(RUN_ONE)
    be->state_free(st);
    return test_summary();
}
