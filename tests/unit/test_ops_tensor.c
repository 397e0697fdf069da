/* test_ops_tensor.c -- kernel-level tests of the tensor / data-movement
 * family (src/ops/tensor_*.c): op->infer and op->cpu are called directly on
 * hand-built tensors (no ONNX) and compared with reference index loops
 * written here or with hand-computed values. Every output buffer is followed
 * by a canary that must survive the kernel. */
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "ops/tensor_internal.h"
#include "test.h"

#define CANARY 64
#define CANARY_BYTE 0xA5
#define MAXIO 8

/* ---- running one op --------------------------------------------------------- */

typedef struct run_result {
    kiln_status st;
    int n_out;
    kiln_tensor out[MAXIO];
    unsigned char *mem[MAXIO];
    size_t nbytes[MAXIO];
} run_result;

static void result_free(run_result *r) {
    for (int i = 0; i < MAXIO; i++) free(r->mem[i]);
    memset(r, 0, sizeof *r);
}

static void to_info(const kiln_tensor *t, kiln_tinfo *ti) {
    memset(ti, 0, sizeof *ti);
    ti->dtype = t->dtype;
    ti->rank = t->rank;
    memcpy(ti->dims, t->dims, sizeof ti->dims);
    ti->data = t->data;
}

/* Run-time infer + cpu, outputs followed by a canary. */
static kiln_status run_op(int op_id, const void *attrs, int n_in, const kiln_tensor *const *in,
                          int n_out, kiln_pool *pool, run_result *r) {
    const kiln_op_def *op = kiln__op_by_id(op_id);
    memset(r, 0, sizeof *r);
    r->n_out = n_out;
    kiln_tinfo ti[MAXIO], to[MAXIO];
    const kiln_tinfo *tip[MAXIO];
    kiln_tinfo *top[MAXIO];
    for (int i = 0; i < n_in; i++) {
        tip[i] = NULL;
        if (!in[i]) continue;
        to_info(in[i], &ti[i]);
        tip[i] = &ti[i];
    }
    memset(to, 0, sizeof to);
    for (int i = 0; i < n_out; i++) top[i] = &to[i];
    kiln_infer_args ia = {.op = op, .attrs = attrs, .node_name = "t", .n_in = n_in, .n_out = n_out,
                          .in = tip, .out = top, .runtime = true};
    r->st = op->infer(&ia);
    if (r->st != KILN_OK) return r->st;
    kiln_tensor *outp[MAXIO];
    for (int i = 0; i < n_out; i++) {
        r->out[i].dtype = to[i].dtype;
        r->out[i].rank = to[i].rank;
        memcpy(r->out[i].dims, to[i].dims, sizeof to[i].dims);
        int64_t n = kiln__numel(to[i].rank, to[i].dims);
        if (n < 0) return r->st = KILN_ERR_INTERNAL;
        r->nbytes[i] = (size_t)n * kiln_dtype_size(to[i].dtype);
        r->mem[i] = (unsigned char *)malloc(r->nbytes[i] + CANARY);
        memset(r->mem[i], 0x5A, r->nbytes[i]);
        memset(r->mem[i] + r->nbytes[i], CANARY_BYTE, CANARY);
        r->out[i].data = r->mem[i];
        outp[i] = &r->out[i];
    }
    kiln_kernel_args ka = {.op = op, .attrs = attrs, .node_name = "t", .n_in = n_in, .n_out = n_out,
                           .in = in, .out = outp, .pool = pool};
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

/* Build-time infer only. */
static kiln_status infer_op(int op_id, const void *attrs, int n_in, const kiln_tinfo *const *in,
                            int n_out, kiln_tinfo *out) {
    const kiln_op_def *op = kiln__op_by_id(op_id);
    kiln_tinfo *top[MAXIO];
    memset(out, 0, sizeof(kiln_tinfo) * (size_t)n_out);
    for (int i = 0; i < n_out; i++) top[i] = &out[i];
    kiln_infer_args ia = {.op = op, .attrs = attrs, .node_name = "t", .n_in = n_in, .n_out = n_out,
                          .in = in, .out = top, .runtime = false};
    return op->infer(&ia);
}

static kiln_tensor tensor(kiln_dtype dt, int rank, const int64_t *dims, const void *data) {
    kiln_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.rank = rank;
    for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
    t.data = (void *)data;
    return t;
}

static kiln_tinfo tinfo(kiln_dtype dt, int rank, const int64_t *dims, const void *data) {
    kiln_tinfo t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.rank = rank;
    for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
    t.data = data;
    return t;
}

static bool same_dims(const kiln_tensor *t, int rank, const int64_t *dims) {
    if (t->rank != rank) return false;
    for (int i = 0; i < rank; i++)
        if (t->dims[i] != dims[i]) return false;
    return true;
}

static bool info_dims(const kiln_tinfo *t, int rank, const int64_t *dims) {
    if (t->rank != rank) return false;
    for (int i = 0; i < rank; i++)
        if (t->dims[i] != dims[i]) return false;
    return true;
}

static int64_t numel(int rank, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= dims[i];
    return n;
}

/* Deterministic pseudo-random fill (bytes distinct per element). */
static void fill_pattern(void *p, int64_t n, size_t es, uint32_t seed) {
    unsigned char *b = (unsigned char *)p;
    uint32_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < n * (int64_t)es; i++) {
        s = s * 1103515245u + 12345u;
        b[i] = (unsigned char)(s >> 16);
    }
}

static void strides_of(int rank, const int64_t *dims, int64_t *st) {
    int64_t s = 1;
    for (int k = rank - 1; k >= 0; k--) {
        st[k] = s;
        s *= dims[k];
    }
}

static kiln_pool *test_pool(void) {
    kiln_pool *p = NULL;
    if (kiln__pool_create(3, &p) != KILN_OK) return NULL;
    return p;
}

/* ---- Transpose ------------------------------------------------------------------ */

/* Transposes with kiln and compares every byte with out[i] = in[perm index]. */
static void check_transpose(int rank, const int64_t *dims, const int *perm, size_t es,
                            kiln_pool *pool) {
    static const kiln_dtype by_size[9] = {0, KILN_DTYPE_UINT8, KILN_DTYPE_FLOAT16, 0, KILN_DTYPE_FLOAT32,
                                          0, 0, 0, KILN_DTYPE_INT64};
    kiln_dtype dt = by_size[es];
    int64_t n = numel(rank, dims);
    unsigned char *x = (unsigned char *)malloc((size_t)n * es + 1);
    fill_pattern(x, n, es, (uint32_t)(rank * 31 + (int)es));
    kiln_transpose_attrs at;
    memset(&at, 0, sizeof at);
    at.n_perm = perm ? rank : 0;
    for (int k = 0; perm && k < rank; k++) at.perm[k] = perm[k];
    kiln_tensor tx = tensor(dt, rank, dims, x);
    const kiln_tensor *in[1] = {&tx};
    run_result r;
    CHECK_OK(run_op(KILN_OP_Transpose, &at, 1, in, 1, pool, &r));
    if (r.st == KILN_OK) {
        int p[KILN_MAX_RANK];
        int64_t odims[KILN_MAX_RANK], xst[KILN_MAX_RANK];
        for (int k = 0; k < rank; k++) p[k] = perm ? perm[k] : rank - 1 - k;
        for (int k = 0; k < rank; k++) odims[k] = dims[p[k]];
        CHECK(same_dims(&r.out[0], rank, odims));
        strides_of(rank, dims, xst);
        int64_t idx[KILN_MAX_RANK] = {0}, bad = 0;
        for (int64_t o = 0; o < n; o++) {
            int64_t src = 0;
            for (int k = 0; k < rank; k++) src += idx[k] * xst[p[k]];
            if (memcmp(r.mem[0] + (size_t)o * es, x + (size_t)src * es, es)) bad++;
            for (int k = rank - 1; k >= 0; k--) {
                if (++idx[k] < odims[k]) break;
                idx[k] = 0;
            }
        }
        if (bad) fprintf(stderr, "  transpose rank %d es %zu: %lld wrong elements\n", rank, es, (long long)bad);
        CHECK(bad == 0);
    }
    result_free(&r);
    free(x);
}

TEST(transpose_odd_shapes) {
    size_t sizes[4] = {1, 2, 4, 8};
    for (int s = 0; s < 4; s++) {
        size_t es = sizes[s];
        int64_t d1[1] = {13};
        check_transpose(1, d1, NULL, es, NULL);
        int64_t d2[2] = {37, 53};
        check_transpose(2, d2, NULL, es, NULL);
        int64_t d3[3] = {5, 7, 11};
        int p3[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
        for (int i = 0; i < 6; i++) check_transpose(3, d3, p3[i], es, NULL);
        int64_t d4[4] = {3, 5, 7, 11};
        int p4[4][4] = {{0, 2, 1, 3}, {0, 2, 3, 1}, {0, 3, 1, 2}, {3, 2, 1, 0}};
        for (int i = 0; i < 4; i++) check_transpose(4, d4, p4[i], es, NULL);
        int64_t d5[5] = {2, 1, 3, 1, 5}; /* unit dims */
        int p5[5] = {4, 3, 2, 1, 0};
        check_transpose(5, d5, p5, es, NULL);
        int64_t d6[6] = {2, 3, 2, 3, 2, 3};
        int p6[6] = {1, 3, 5, 0, 2, 4};
        check_transpose(6, d6, p6, es, NULL);
    }
    int64_t d0[1] = {0};
    check_transpose(1, d0, NULL, 4, NULL);
}

TEST(transpose_bert_and_nchw_parallel) {
    kiln_pool *pool = test_pool();
    CHECK(pool != NULL);
    int64_t bshd[4] = {2, 67, 12, 64}; /* [B,S,H,D] -> [B,H,S,D] */
    int p0213[4] = {0, 2, 1, 3};
    check_transpose(4, bshd, p0213, 4, pool);
    int p0231[4] = {0, 2, 3, 1}; /* K^T: [B,H,D,S]-like */
    check_transpose(4, bshd, p0231, 4, pool);
    int64_t nchw[4] = {1, 61, 29, 31};
    int p_nhwc[4] = {0, 2, 3, 1};
    check_transpose(4, nchw, p_nhwc, 4, pool);
    int p_nchw[4] = {0, 3, 1, 2};
    check_transpose(4, nchw, p_nchw, 2, pool);
    int64_t big2[2] = {300, 517};
    check_transpose(2, big2, NULL, 4, pool);
    check_transpose(2, big2, NULL, 1, pool);
    kiln__pool_free(pool);
}

TEST(transpose_infer_symbolic_and_errors) {
    int64_t d[3] = {KILN_DIM_SYM(0), 12, 64};
    kiln_tinfo x = tinfo(KILN_DTYPE_FLOAT32, 3, d, NULL);
    const kiln_tinfo *in[1] = {&x};
    kiln_tinfo y;
    kiln_transpose_attrs at;
    memset(&at, 0, sizeof at);
    at.n_perm = 3;
    at.perm[0] = 1;
    at.perm[1] = 0;
    at.perm[2] = 2;
    CHECK_OK(infer_op(KILN_OP_Transpose, &at, 1, in, 1, &y));
    int64_t want[3] = {12, KILN_DIM_SYM(0), 64};
    CHECK(info_dims(&y, 3, want));
    x.rank = -1; /* unknown rank, no perm -> unknown rank */
    memset(&at, 0, sizeof at);
    CHECK_OK(infer_op(KILN_OP_Transpose, &at, 1, in, 1, &y));
    CHECK(y.rank == -1);
    x.rank = 2;
    at.n_perm = 3;
    CHECK_ERR(infer_op(KILN_OP_Transpose, &at, 1, in, 1, &y), KILN_ERR_MODEL, "rank 2");
    at.n_perm = 2;
    at.perm[0] = 1;
    at.perm[1] = 1;
    CHECK_ERR(infer_op(KILN_OP_Transpose, &at, 1, in, 1, &y), KILN_ERR_MODEL, "not a permutation");
}

/* ---- Slice ------------------------------------------------------------------------ */

/* Reference for one axis: the indices numpy's slicing gives. */
static int ref_slice_axis(int64_t d, int64_t b, int64_t e, int64_t s, int64_t *out) {
    if (b < 0) b += d;
    if (e < 0) e += d;
    int n = 0;
    if (s > 0) {
        if (b < 0) b = 0;
        if (b > d) b = d;
        if (e < 0) e = 0;
        if (e > d) e = d;
        for (int64_t i = b; i < e; i += s) out[n++] = i;
    } else {
        if (b < -1) b = -1;
        if (b > d - 1) b = d - 1;
        if (e < -1) e = -1;
        if (e > d - 1) e = d - 1;
        for (int64_t i = b; i > e; i += s) out[n++] = i;
    }
    return n;
}

static void check_slice_2d(int64_t R, int64_t C, int64_t b0, int64_t e0, int64_t s0, int64_t b1,
                           int64_t e1, int64_t s1, bool reversed_axes) {
    int64_t dims[2] = {R, C};
    float *x = (float *)malloc(sizeof(float) * (size_t)(R * C));
    for (int64_t i = 0; i < R * C; i++) x[i] = (float)i;
    int64_t starts[2] = {b0, b1}, ends[2] = {e0, e1}, axes[2] = {0, -1}, steps[2] = {s0, s1};
    if (reversed_axes) { /* axes given as [1, 0] (and values swapped) */
        starts[0] = b1, starts[1] = b0, ends[0] = e1, ends[1] = e0, steps[0] = s1, steps[1] = s0;
        axes[0] = 1, axes[1] = -2;
    }
    int64_t two[1] = {2};
    kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, 2, dims, x), ts = tensor(KILN_DTYPE_INT64, 1, two, starts),
                te = tensor(KILN_DTYPE_INT64, 1, two, ends), ta = tensor(KILN_DTYPE_INT64, 1, two, axes),
                tp = tensor(KILN_DTYPE_INT64, 1, two, steps);
    const kiln_tensor *in[5] = {&tx, &ts, &te, &ta, &tp};
    run_result r;
    CHECK_OK(run_op(KILN_OP_Slice, NULL, 5, in, 1, NULL, &r));
    int64_t ri[64], ci[64];
    int nr = ref_slice_axis(R, b0, e0, s0, ri), nc = ref_slice_axis(C, b1, e1, s1, ci);
    int64_t want[2] = {nr, nc};
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 2, want));
    if (r.st == KILN_OK && same_dims(&r.out[0], 2, want)) {
        const float *y = (const float *)r.out[0].data;
        int bad = 0;
        for (int i = 0; i < nr; i++)
            for (int j = 0; j < nc; j++)
                if (y[i * nc + j] != x[ri[i] * C + ci[j]]) bad++;
        CHECK(bad == 0);
    }
    result_free(&r);
    free(x);
}

TEST(slice_negative_steps_and_clamping) {
    check_slice_2d(4, 5, 0, 4, 1, 0, 5, 1, false);                /* identity */
    check_slice_2d(4, 5, -1, -5, -1, 4, -10, -2, false);          /* reverse, clamped ends */
    check_slice_2d(4, 5, 3, 0, -2, -1, INT64_MIN, -1, false);     /* -inf end */
    check_slice_2d(7, 9, 100, -100, -3, -100, 100, 4, true);      /* out-of-bounds starts */
    check_slice_2d(7, 9, 1, 1, 1, 2, 8, 3, false);                /* empty axis */
    check_slice_2d(7, 9, INT64_MAX, INT64_MIN, -1, 0, INT64_MAX, 1, true);
    check_slice_2d(6, 11, -2, 100, 1, 10, 0, -3, false);
}

TEST(slice_infer_symbolic) {
    int64_t d[3] = {KILN_DIM_SYM(0), KILN_DIM_SYM(1), 10};
    kiln_tinfo x = tinfo(KILN_DTYPE_FLOAT32, 3, d, NULL);
    int64_t one[1] = {1};
    int64_t st[1] = {2}, en[1] = {-1}, ax[1] = {2};
    kiln_tinfo ts = tinfo(KILN_DTYPE_INT64, 1, one, st), te = tinfo(KILN_DTYPE_INT64, 1, one, en),
               ta = tinfo(KILN_DTYPE_INT64, 1, one, ax);
    const kiln_tinfo *in[4] = {&x, &ts, &te, &ta};
    kiln_tinfo y;
    CHECK_OK(infer_op(KILN_OP_Slice, NULL, 4, in, 1, &y));
    int64_t w1[3] = {KILN_DIM_SYM(0), KILN_DIM_SYM(1), 7};
    CHECK(info_dims(&y, 3, w1));
    /* whole symbolic axis keeps its symbol; partial slice is unknown */
    int64_t st2[1] = {0}, en2[1] = {INT64_MAX}, ax2[1] = {1};
    ts.data = st2, te.data = en2, ta.data = ax2;
    CHECK_OK(infer_op(KILN_OP_Slice, NULL, 4, in, 1, &y));
    CHECK(info_dims(&y, 3, d));
    int64_t st3[1] = {1};
    ts.data = st3;
    CHECK_OK(infer_op(KILN_OP_Slice, NULL, 4, in, 1, &y));
    int64_t w3[3] = {KILN_DIM_SYM(0), KILN_DIM_UNKNOWN, 10};
    CHECK(info_dims(&y, 3, w3));
    /* non-constant starts, constant axes: other axes keep dims */
    ts.data = NULL;
    CHECK_OK(infer_op(KILN_OP_Slice, NULL, 4, in, 1, &y));
    CHECK(info_dims(&y, 3, w3));
    /* step 0 */
    int64_t zero[1] = {0};
    ts.data = st3;
    kiln_tinfo tp = tinfo(KILN_DTYPE_INT64, 1, one, zero);
    const kiln_tinfo *in5[5] = {&x, &ts, &te, &ta, &tp};
    CHECK_ERR(infer_op(KILN_OP_Slice, NULL, 5, in5, 1, &y), KILN_ERR_MODEL, "step is 0");
}

/* ---- Concat ------------------------------------------------------------------------ */

TEST(concat_each_axis) {
    int64_t base[3] = {3, 4, 5};
    for (int axis = -3; axis < 3; axis++) {
        int ax = axis < 0 ? axis + 3 : axis;
        int64_t sizes[3] = {2, 1, 3};
        int64_t dims[3][3];
        float *xs[3];
        kiln_tensor t[3];
        const kiln_tensor *in[3];
        for (int i = 0; i < 3; i++) {
            memcpy(dims[i], base, sizeof base);
            dims[i][ax] = sizes[i];
            int64_t n = numel(3, dims[i]);
            xs[i] = (float *)malloc(sizeof(float) * (size_t)n);
            for (int64_t j = 0; j < n; j++) xs[i][j] = (float)(i * 1000 + j);
            t[i] = tensor(KILN_DTYPE_FLOAT32, 3, dims[i], xs[i]);
            in[i] = &t[i];
        }
        kiln_axis_attrs at = {axis};
        run_result r;
        CHECK_OK(run_op(KILN_OP_Concat, &at, 3, in, 1, NULL, &r));
        int64_t od[3];
        memcpy(od, base, sizeof od);
        od[ax] = 6;
        CHECK(r.st == KILN_OK && same_dims(&r.out[0], 3, od));
        if (r.st == KILN_OK) {
            const float *y = (const float *)r.out[0].data;
            int bad = 0;
            for (int64_t a = 0; a < od[0]; a++)
                for (int64_t b = 0; b < od[1]; b++)
                    for (int64_t c = 0; c < od[2]; c++) {
                        int64_t idx[3] = {a, b, c};
                        int src = 0;
                        int64_t k = idx[ax];
                        while (k >= sizes[src]) k -= sizes[src++];
                        idx[ax] = k;
                        int64_t st[3];
                        strides_of(3, dims[src], st);
                        float want = xs[src][idx[0] * st[0] + idx[1] * st[1] + idx[2] * st[2]];
                        if (y[(a * od[1] + b) * od[2] + c] != want) bad++;
                    }
            CHECK(bad == 0);
        }
        result_free(&r);
        for (int i = 0; i < 3; i++) free(xs[i]);
    }
}

TEST(concat_dtypes_empty_and_errors) {
    /* int64 + bool-sized inputs, one empty input */
    int64_t a[4] = {1, 2, 3, 4}, b[2] = {5, 6};
    int64_t da[2] = {2, 2}, db[2] = {2, 1}, de[2] = {2, 0};
    kiln_tensor ta = tensor(KILN_DTYPE_INT64, 2, da, a), tb = tensor(KILN_DTYPE_INT64, 2, db, b),
                te = tensor(KILN_DTYPE_INT64, 2, de, NULL);
    const kiln_tensor *in[3] = {&ta, &te, &tb};
    kiln_axis_attrs at = {1};
    run_result r;
    CHECK_OK(run_op(KILN_OP_Concat, &at, 3, in, 1, NULL, &r));
    int64_t want[6] = {1, 2, 5, 3, 4, 6};
    CHECK(r.st == KILN_OK && !memcmp(r.out[0].data, want, sizeof want));
    result_free(&r);
    uint8_t ba[3] = {1, 0, 1}, bb[1] = {0};
    int64_t d3[1] = {3}, d1[1] = {1};
    kiln_tensor tba = tensor(KILN_DTYPE_BOOL, 1, d3, ba), tbb = tensor(KILN_DTYPE_BOOL, 1, d1, bb);
    const kiln_tensor *inb[2] = {&tbb, &tba};
    kiln_axis_attrs at0 = {0};
    CHECK_OK(run_op(KILN_OP_Concat, &at0, 2, inb, 1, NULL, &r));
    uint8_t wb[4] = {0, 1, 0, 1};
    CHECK(r.st == KILN_OK && !memcmp(r.out[0].data, wb, 4));
    result_free(&r);
    /* symbolic build-time infer: non-axis dims merge, axis dim sums */
    int64_t s1[2] = {KILN_DIM_SYM(0), 3}, s2[2] = {KILN_DIM_SYM(0), 4}, s3[2] = {5, KILN_DIM_SYM(1)};
    kiln_tinfo i1 = tinfo(KILN_DTYPE_FLOAT32, 2, s1, NULL), i2 = tinfo(KILN_DTYPE_FLOAT32, 2, s2, NULL),
               i3 = tinfo(KILN_DTYPE_FLOAT32, 2, s3, NULL);
    const kiln_tinfo *ii[2] = {&i1, &i2};
    kiln_tinfo y;
    CHECK_OK(infer_op(KILN_OP_Concat, &at, 2, ii, 1, &y));
    int64_t w1[2] = {KILN_DIM_SYM(0), 7};
    CHECK(info_dims(&y, 2, w1));
    const kiln_tinfo *ij[2] = {&i1, &i3};
    CHECK_OK(infer_op(KILN_OP_Concat, &at, 2, ij, 1, &y));
    int64_t w2[2] = {5, KILN_DIM_UNKNOWN};
    CHECK(info_dims(&y, 2, w2));
    /* mismatch */
    int64_t m1[2] = {2, 3}, m2[2] = {3, 3};
    kiln_tinfo j1 = tinfo(KILN_DTYPE_FLOAT32, 2, m1, NULL), j2 = tinfo(KILN_DTYPE_FLOAT32, 2, m2, NULL);
    const kiln_tinfo *ik[2] = {&j1, &j2};
    CHECK_ERR(infer_op(KILN_OP_Concat, &at, 2, ik, 1, &y), KILN_ERR_MODEL, "(Concat): input 1 has shape [3x3]");
    kiln_tinfo j3 = tinfo(KILN_DTYPE_INT32, 2, m1, NULL);
    const kiln_tinfo *il[2] = {&j1, &j3};
    CHECK_ERR(infer_op(KILN_OP_Concat, &at, 2, il, 1, &y), KILN_ERR_MODEL, "dtype int32");
}

/* ---- Gather ------------------------------------------------------------------------ */

TEST(gather_negative_indices) {
    float data[15];
    for (int i = 0; i < 15; i++) data[i] = (float)i;
    int64_t dd[2] = {5, 3};
    int64_t idx[4] = {-1, 0, -5, 2};
    int64_t di[1] = {4};
    kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, 2, dd, data), ti = tensor(KILN_DTYPE_INT64, 1, di, idx);
    const kiln_tensor *in[2] = {&tx, &ti};
    kiln_axis_attrs at0 = {0};
    run_result r;
    CHECK_OK(run_op(KILN_OP_Gather, &at0, 2, in, 1, NULL, &r));
    float w0[12] = {12, 13, 14, 0, 1, 2, 0, 1, 2, 6, 7, 8};
    int64_t wd0[2] = {4, 3};
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 2, wd0) && !memcmp(r.out[0].data, w0, sizeof w0));
    result_free(&r);
    /* axis -1 with 2-D int32 indices */
    int32_t idx2[4] = {-1, 0, 1, -3};
    int64_t di2[2] = {2, 2};
    kiln_tensor ti2 = tensor(KILN_DTYPE_INT32, 2, di2, idx2);
    const kiln_tensor *in2[2] = {&tx, &ti2};
    kiln_axis_attrs at1 = {-1};
    CHECK_OK(run_op(KILN_OP_Gather, &at1, 2, in2, 1, NULL, &r));
    int64_t wd1[3] = {5, 2, 2};
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 3, wd1));
    if (r.st == KILN_OK) {
        const float *y = (const float *)r.out[0].data;
        int bad = 0;
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 4; j++) {
                int c = idx2[j] < 0 ? idx2[j] + 3 : idx2[j];
                if (y[i * 4 + j] != data[i * 3 + c]) bad++;
            }
        CHECK(bad == 0);
    }
    result_free(&r);
    /* out of range */
    int64_t badidx[2] = {1, 5};
    int64_t d2[1] = {2};
    kiln_tensor tb = tensor(KILN_DTYPE_INT64, 1, d2, badidx);
    const kiln_tensor *in3[2] = {&tx, &tb};
    CHECK_ERR(run_op(KILN_OP_Gather, &at0, 2, in3, 1, NULL, &r), KILN_ERR_MODEL,
              "index 5 is out of range for axis 0 of size 5");
    result_free(&r);
}

TEST(gather_embedding_parallel_f16) {
    kiln_pool *pool = test_pool();
    int64_t V = 1000, H = 96, N = 257;
    uint16_t *emb = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(V * H));
    fill_pattern(emb, V * H, 2, 7);
    int64_t *ids = (int64_t *)malloc(sizeof(int64_t) * (size_t)N);
    for (int64_t i = 0; i < N; i++) ids[i] = (i * 7919) % V - (i % 3 == 0 ? V : 0);
    int64_t de[2] = {V, H}, di[2] = {1, N};
    kiln_tensor te = tensor(KILN_DTYPE_FLOAT16, 2, de, emb), ti = tensor(KILN_DTYPE_INT64, 2, di, ids);
    const kiln_tensor *in[2] = {&te, &ti};
    kiln_axis_attrs at = {0};
    run_result r;
    CHECK_OK(run_op(KILN_OP_Gather, &at, 2, in, 1, pool, &r));
    int64_t wd[3] = {1, N, H};
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 3, wd));
    if (r.st == KILN_OK) {
        int bad = 0;
        for (int64_t i = 0; i < N; i++) {
            int64_t row = ids[i] < 0 ? ids[i] + V : ids[i];
            if (memcmp((uint16_t *)r.out[0].data + i * H, emb + row * H, (size_t)H * 2)) bad++;
        }
        CHECK(bad == 0);
    }
    result_free(&r);
    free(emb);
    free(ids);
    kiln__pool_free(pool);
}

/* ---- Reshape / Flatten / Squeeze / Unsqueeze ---------------------------------------------- */

static kiln_status reshape_run(const int64_t *xd, int xr, const int64_t *shape, int n, bool allowzero,
                               run_result *r) {
    static float buf[4096];
    kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, xr, xd, buf);
    int64_t sd[1] = {n};
    kiln_tensor ts = tensor(KILN_DTYPE_INT64, 1, sd, shape);
    const kiln_tensor *in[2] = {&tx, &ts};
    kiln_reshape_attrs at = {allowzero};
    for (int i = 0; i < 4096; i++) buf[i] = (float)i;
    return run_op(KILN_OP_Reshape, &at, 2, in, 1, NULL, r);
}

TEST(reshape_zero_and_minus_one) {
    run_result r;
    int64_t xd[3] = {2, 3, 4};
    int64_t s1[2] = {0, -1};
    CHECK_OK(reshape_run(xd, 3, s1, 2, false, &r));
    int64_t w1[2] = {2, 12};
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 2, w1));
    if (r.st == KILN_OK) CHECK(((float *)r.out[0].data)[23] == 23.0f);
    result_free(&r);
    int64_t s2[4] = {-1, 0, 2, 2};
    CHECK_OK(reshape_run(xd, 3, s2, 4, false, &r));
    int64_t w2[4] = {2, 3, 2, 2};
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 4, w2));
    result_free(&r);
    /* allowzero: 0 is a real zero dim */
    int64_t xz[2] = {0, 3}, s3[2] = {3, 0};
    CHECK_OK(reshape_run(xz, 2, s3, 2, true, &r));
    int64_t w3[2] = {3, 0};
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 2, w3));
    result_free(&r);
    /* errors */
    int64_t x23[2] = {2, 3}, s4[2] = {4, 2};
    CHECK_ERR(reshape_run(x23, 2, s4, 2, false, &r), KILN_ERR_MODEL,
              "node 't' (Reshape): cannot reshape [2x3] to [4x2]");
    result_free(&r);
    int64_t s5[2] = {4, -1};
    CHECK_ERR(reshape_run(x23, 2, s5, 2, false, &r), KILN_ERR_MODEL, "cannot reshape [2x3] to [4x-1]");
    result_free(&r);
    int64_t s6[2] = {-1, -1};
    CHECK_ERR(reshape_run(x23, 2, s6, 2, false, &r), KILN_ERR_MODEL, "more than one -1");
    result_free(&r);
    int64_t s7[3] = {1, 1, 0};
    CHECK_ERR(reshape_run(x23, 2, s7, 3, false, &r), KILN_ERR_MODEL, "input has rank 2");
    result_free(&r);
}

TEST(reshape_build_time_symbolic) {
    int64_t N = KILN_DIM_SYM(0), S = KILN_DIM_SYM(1);
    kiln_reshape_attrs at = {0};
    kiln_tinfo y;
    /* [N,12,64] with [0,-1] -> [N,768] */
    int64_t xd[3] = {N, 12, 64}, s1[2] = {0, -1}, sd2[1] = {2};
    kiln_tinfo x = tinfo(KILN_DTYPE_FLOAT32, 3, xd, NULL), s = tinfo(KILN_DTYPE_INT64, 1, sd2, s1);
    const kiln_tinfo *in[2] = {&x, &s};
    CHECK_OK(infer_op(KILN_OP_Reshape, &at, 2, in, 1, &y));
    int64_t w1[2] = {N, 768};
    CHECK(info_dims(&y, 2, w1));
    /* [N,S,768] with [0,0,12,64] -> [N,S,12,64] */
    int64_t xd2[3] = {N, S, 768}, s2[4] = {0, 0, 12, 64}, sd4[1] = {4};
    x = tinfo(KILN_DTYPE_FLOAT32, 3, xd2, NULL);
    s = tinfo(KILN_DTYPE_INT64, 1, sd4, s2);
    CHECK_OK(infer_op(KILN_OP_Reshape, &at, 2, in, 1, &y));
    int64_t w2[4] = {N, S, 12, 64};
    CHECK(info_dims(&y, 4, w2));
    /* [N,S,12,64] with [-1,768]: -1 is N*S, not a single symbol -> unknown */
    int64_t s3[2] = {-1, 768};
    x = tinfo(KILN_DTYPE_FLOAT32, 4, w2, NULL);
    s = tinfo(KILN_DTYPE_INT64, 1, sd2, s3);
    CHECK_OK(infer_op(KILN_OP_Reshape, &at, 2, in, 1, &y));
    int64_t w3[2] = {KILN_DIM_UNKNOWN, 768};
    CHECK(info_dims(&y, 2, w3));
    /* [N*? : N,768] with [-1,12,64] -> the symbol N */
    int64_t xd4[2] = {N, 768}, s4[3] = {-1, 12, 64}, sd3[1] = {3};
    x = tinfo(KILN_DTYPE_FLOAT32, 2, xd4, NULL);
    s = tinfo(KILN_DTYPE_INT64, 1, sd3, s4);
    CHECK_OK(infer_op(KILN_OP_Reshape, &at, 2, in, 1, &y));
    int64_t w4[3] = {N, 12, 64};
    CHECK(info_dims(&y, 3, w4));
    /* non-constant shape of length 3: rank 3, dims unknown */
    s.data = NULL;
    CHECK_OK(infer_op(KILN_OP_Reshape, &at, 2, in, 1, &y));
    int64_t w5[3] = {KILN_DIM_UNKNOWN, KILN_DIM_UNKNOWN, KILN_DIM_UNKNOWN};
    CHECK(info_dims(&y, 3, w5));
    /* known dims mismatch is caught at build time */
    int64_t xd6[2] = {N, 10}, s6[2] = {0, 3};
    x = tinfo(KILN_DTYPE_FLOAT32, 2, xd6, NULL);
    s = tinfo(KILN_DTYPE_INT64, 1, sd2, s6);
    CHECK_ERR(infer_op(KILN_OP_Reshape, &at, 2, in, 1, &y), KILN_ERR_MODEL, "cannot reshape [?x10] to [0x3]");
    /* Flatten [N,3,4] axis 1 -> [N,12]; axis 0 -> [1, ?] */
    int64_t fd[3] = {N, 3, 4};
    kiln_tinfo fx = tinfo(KILN_DTYPE_FLOAT32, 3, fd, NULL);
    const kiln_tinfo *fin[1] = {&fx};
    kiln_flatten_attrs fa = {1};
    CHECK_OK(infer_op(KILN_OP_Flatten, &fa, 1, fin, 1, &y));
    int64_t wf[2] = {N, 12};
    CHECK(info_dims(&y, 2, wf));
    fa.axis = 0;
    CHECK_OK(infer_op(KILN_OP_Flatten, &fa, 1, fin, 1, &y));
    int64_t wf0[2] = {1, KILN_DIM_UNKNOWN};
    CHECK(info_dims(&y, 2, wf0));
    fa.axis = -4;
    CHECK_ERR(infer_op(KILN_OP_Flatten, &fa, 1, fin, 1, &y), KILN_ERR_MODEL, "out of range");
}

TEST(squeeze_unsqueeze) {
    int64_t xd[4] = {1, 3, 1, 2};
    float x[6] = {1, 2, 3, 4, 5, 6};
    kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, 4, xd, x);
    run_result r;
    const kiln_tensor *in1[1] = {&tx};
    CHECK_OK(run_op(KILN_OP_Squeeze, NULL, 1, in1, 1, NULL, &r));
    int64_t w1[2] = {3, 2};
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 2, w1) && !memcmp(r.out[0].data, x, sizeof x));
    result_free(&r);
    int64_t ax[1] = {-2}, d1[1] = {1};
    kiln_tensor ta = tensor(KILN_DTYPE_INT64, 1, d1, ax);
    const kiln_tensor *in2[2] = {&tx, &ta};
    CHECK_OK(run_op(KILN_OP_Squeeze, NULL, 2, in2, 1, NULL, &r));
    int64_t w2[3] = {1, 3, 2};
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 3, w2));
    result_free(&r);
    int64_t ax3[1] = {1};
    ta.data = ax3;
    CHECK_ERR(run_op(KILN_OP_Squeeze, NULL, 2, in2, 1, NULL, &r), KILN_ERR_MODEL,
              "cannot squeeze axis 1 of shape [1x3x1x2]: dimension is 3, not 1");
    result_free(&r);
    /* Unsqueeze [3,2] at axes [0,-1] -> [1,3,2,1] */
    int64_t ud[2] = {3, 2}, uax[2] = {-1, 0}, d2[1] = {2};
    kiln_tensor tu = tensor(KILN_DTYPE_FLOAT32, 2, ud, x), tua = tensor(KILN_DTYPE_INT64, 1, d2, uax);
    const kiln_tensor *in3[2] = {&tu, &tua};
    CHECK_OK(run_op(KILN_OP_Unsqueeze, NULL, 2, in3, 1, NULL, &r));
    int64_t w3[4] = {1, 3, 2, 1};
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 4, w3));
    result_free(&r);
    int64_t dup[2] = {1, 1};
    tua.data = dup;
    CHECK_ERR(run_op(KILN_OP_Unsqueeze, NULL, 2, in3, 1, NULL, &r), KILN_ERR_MODEL, "repeated");
    result_free(&r);
    /* build time: squeeze without axes on a symbolic dim -> unknown rank */
    int64_t sd[2] = {KILN_DIM_SYM(0), 1};
    kiln_tinfo sx = tinfo(KILN_DTYPE_FLOAT32, 2, sd, NULL);
    const kiln_tinfo *sin[1] = {&sx};
    kiln_tinfo y;
    CHECK_OK(infer_op(KILN_OP_Squeeze, NULL, 1, sin, 1, &y));
    CHECK(y.rank == -1);
}

/* ---- Pad ------------------------------------------------------------------------------ */

static kiln_status pad_run(int mode, const float *x, const int64_t *xd, const int64_t *pads,
                           const float *value, run_result *r) {
    kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, 2, xd, x);
    int64_t pd[1] = {4};
    kiln_tensor tp = tensor(KILN_DTYPE_INT64, 1, pd, pads);
    kiln_tensor tv = tensor(KILN_DTYPE_FLOAT32, 0, NULL, value);
    const kiln_tensor *in[3] = {&tx, &tp, value ? &tv : NULL};
    kiln_pad_attrs at = {mode};
    return run_op(KILN_OP_Pad, &at, 3, in, 1, NULL, r);
}

TEST(pad_modes) {
    float x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}; /* [3,4] */
    int64_t xd[2] = {3, 4};
    run_result r;
    /* reflect: pads rows (1,1), cols (2,1): numpy.pad(x, ((1,1),(2,1)), 'reflect') */
    int64_t p1[4] = {1, 2, 1, 1};
    CHECK_OK(pad_run(PAD_REFLECT, x, xd, p1, NULL, &r));
    float w1[5 * 7] = {7,  6, 5, 6,  7,  8,  7,  3, 2, 1, 2, 3,  4,  3, 7, 6, 5, 6,
                       7,  8, 7, 11, 10, 9,  10, 11, 12, 11, 7, 6, 5, 6, 7, 8, 7};
    int64_t wd1[2] = {5, 7};
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 2, wd1) && !memcmp(r.out[0].data, w1, sizeof w1));
    result_free(&r);
    /* reflect beyond the size: repeated reflection (cols pad 5 on a dim of 4) */
    int64_t p1b[4] = {0, 5, 0, 0};
    CHECK_OK(pad_run(PAD_REFLECT, x, xd, p1b, NULL, &r));
    float row0[9] = {2, 3, 4, 3, 2, 1, 2, 3, 4};
    CHECK(r.st == KILN_OK && !memcmp(r.out[0].data, row0, sizeof row0));
    result_free(&r);
    /* edge */
    int64_t p2[4] = {0, 1, 1, 2};
    CHECK_OK(pad_run(PAD_EDGE, x, xd, p2, NULL, &r));
    float w2[4 * 7] = {1, 1, 2, 3, 4, 4, 4, 5, 5,  6,  7,  8,  8,  8,
                       9, 9, 10, 11, 12, 12, 12, 9, 9, 10, 11, 12, 12, 12};
    CHECK(r.st == KILN_OK && !memcmp(r.out[0].data, w2, sizeof w2));
    result_free(&r);
    /* constant with value and negative pads (crop) */
    int64_t p3[4] = {-1, 1, 0, -2};
    float v = 9.5f;
    CHECK_OK(pad_run(PAD_CONSTANT, x, xd, p3, &v, &r));
    float w3[2 * 3] = {9.5f, 5, 6, 9.5f, 9, 10};
    int64_t wd3[2] = {2, 3};
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 2, wd3) && !memcmp(r.out[0].data, w3, sizeof w3));
    result_free(&r);
    /* wrap */
    int64_t p4[4] = {0, 1, 0, 2};
    CHECK_OK(pad_run(PAD_WRAP, x, xd, p4, NULL, &r));
    float r4[7] = {4, 1, 2, 3, 4, 1, 2};
    CHECK(r.st == KILN_OK && !memcmp(r.out[0].data, r4, sizeof r4));
    result_free(&r);
    /* negative output size */
    int64_t p5[4] = {-2, 0, -2, 0};
    CHECK_ERR(pad_run(PAD_CONSTANT, x, xd, p5, NULL, &r), KILN_ERR_MODEL, "negative");
    result_free(&r);
}

/* ---- Resize ------------------------------------------------------------------------------- */

static kiln_resize_attrs resize_attrs(int mode, int ctm) {
    kiln_resize_attrs at;
    memset(&at, 0, sizeof at);
    at.mode = mode;
    at.ctm = ctm;
    at.nearest_mode = RS_ROUND_PREFER_FLOOR;
    at.cubic_coeff_a = -0.75f;
    at.in_roi = 1;
    at.in_scales = 2;
    at.in_sizes = 3;
    return at;
}

static bool all_close(const float *got, const float *want, int n, float tol) {
    for (int i = 0; i < n; i++)
        if (!(fabsf(got[i] - want[i]) <= tol)) {
            fprintf(stderr, "  [%d]: got %g, want %g\n", i, got[i], want[i]);
            return false;
        }
    return true;
}

TEST(resize_linear_small) {
    float x[4] = {1, 2, 3, 4};
    int64_t xd[4] = {1, 1, 2, 2}, d4[1] = {4};
    float scales[4] = {1, 1, 2, 2};
    kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, 4, xd, x), ts = tensor(KILN_DTYPE_FLOAT32, 1, d4, scales);
    const kiln_tensor *in[4] = {&tx, NULL, &ts, NULL};
    kiln_resize_attrs at = resize_attrs(RS_LINEAR, RS_HALF_PIXEL);
    run_result r;
    CHECK_OK(run_op(KILN_OP_Resize, &at, 4, in, 1, NULL, &r));
    /* half_pixel: source coords -0.25, 0.25, 0.75, 1.25 -> weights (clamped) */
    float want[16] = {1.0f, 1.25f, 1.75f, 2.0f, 1.5f, 1.75f, 2.25f, 2.5f,
                      2.5f, 2.75f, 3.25f, 3.5f, 3.0f, 3.25f, 3.75f, 4.0f};
    int64_t wd[4] = {1, 1, 4, 4};
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 4, wd) && all_close(r.out[0].data, want, 16, 1e-6f));
    result_free(&r);
    /* align_corners: 2 -> 3 gives the midpoint */
    at = resize_attrs(RS_LINEAR, RS_ALIGN_CORNERS);
    float sc2[4] = {1, 1, 1, 1.5f};
    ts.data = sc2;
    CHECK_OK(run_op(KILN_OP_Resize, &at, 4, in, 1, NULL, &r));
    float want2[6] = {1, 1.5f, 2, 3, 3.5f, 4};
    CHECK(r.st == KILN_OK && all_close(r.out[0].data, want2, 6, 1e-6f));
    result_free(&r);
    /* nearest via sizes on int8 (byte path), asymmetric floor: 2 -> 5 */
    int8_t xi[4] = {-1, 2, -3, 4};
    int64_t sizes[4] = {1, 1, 2, 5};
    kiln_tensor txi = tensor(KILN_DTYPE_INT8, 4, xd, xi), tsz = tensor(KILN_DTYPE_INT64, 1, d4, sizes);
    const kiln_tensor *in2[4] = {&txi, NULL, NULL, &tsz};
    at = resize_attrs(RS_NEAREST, RS_ASYMMETRIC);
    at.nearest_mode = RS_FLOOR;
    CHECK_OK(run_op(KILN_OP_Resize, &at, 4, in2, 1, NULL, &r));
    /* x = o * 2/5: 0, .4, .8, 1.2, 1.6 -> 0,0,0,1,1 */
    int8_t want3[10] = {-1, -1, -1, 2, 2, -3, -3, -3, 4, 4};
    CHECK(r.st == KILN_OK && !memcmp(r.out[0].data, want3, 10));
    result_free(&r);
    /* neither scales nor sizes */
    const kiln_tensor *in3[4] = {&tx, NULL, NULL, NULL};
    CHECK_ERR(run_op(KILN_OP_Resize, &at, 4, in3, 1, NULL, &r), KILN_ERR_MODEL, "scales or sizes");
    result_free(&r);
}

TEST(resize_infer_build_time) {
    int64_t xd[4] = {KILN_DIM_SYM(0), 3, 10, 10}, d4[1] = {4};
    float scales[4] = {1, 1, 2, 0.5f};
    kiln_tinfo x = tinfo(KILN_DTYPE_FLOAT32, 4, xd, NULL), s = tinfo(KILN_DTYPE_FLOAT32, 1, d4, scales);
    const kiln_tinfo *in[4] = {&x, NULL, &s, NULL};
    kiln_resize_attrs at = resize_attrs(RS_LINEAR, RS_HALF_PIXEL);
    kiln_tinfo y;
    CHECK_OK(infer_op(KILN_OP_Resize, &at, 4, in, 1, &y));
    int64_t w[4] = {KILN_DIM_SYM(0), 3, 20, 5};
    CHECK(info_dims(&y, 4, w));
    s.data = NULL;
    CHECK_OK(infer_op(KILN_OP_Resize, &at, 4, in, 1, &y));
    CHECK(y.rank == 4 && y.dims[2] == KILN_DIM_UNKNOWN);
}

/* ---- other ops: small reference checks ------------------------------------------------------ */

TEST(expand_tile_split) {
    float x[3] = {1, 2, 3};
    int64_t xd[2] = {3, 1}, shape[3] = {2, 3, 4}, d3[1] = {3};
    kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, 2, xd, x), ts = tensor(KILN_DTYPE_INT64, 1, d3, shape);
    const kiln_tensor *in[2] = {&tx, &ts};
    run_result r;
    CHECK_OK(run_op(KILN_OP_Expand, NULL, 2, in, 1, NULL, &r));
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 3, shape));
    if (r.st == KILN_OK) {
        const float *y = (const float *)r.out[0].data;
        int bad = 0;
        for (int i = 0; i < 24; i++)
            if (y[i] != x[(i / 4) % 3]) bad++;
        CHECK(bad == 0);
    }
    result_free(&r);
    int64_t badshape[2] = {2, 2}, d2[1] = {2};
    kiln_tensor tb = tensor(KILN_DTYPE_INT64, 1, d2, badshape);
    const kiln_tensor *inb[2] = {&tx, &tb};
    CHECK_ERR(run_op(KILN_OP_Expand, NULL, 2, inb, 1, NULL, &r), KILN_ERR_MODEL, "cannot expand [3x1] to [2x2]");
    result_free(&r);
    /* Tile [2,3] by [2,3] on uint16 */
    uint16_t t[6] = {1, 2, 3, 4, 5, 6};
    int64_t td[2] = {2, 3}, reps[2] = {2, 3};
    kiln_tensor tt = tensor(KILN_DTYPE_UINT16, 2, td, t), tr = tensor(KILN_DTYPE_INT64, 1, d2, reps);
    const kiln_tensor *in2[2] = {&tt, &tr};
    CHECK_OK(run_op(KILN_OP_Tile, NULL, 2, in2, 1, NULL, &r));
    int64_t wt[2] = {4, 9};
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 2, wt));
    if (r.st == KILN_OK) {
        const uint16_t *y = (const uint16_t *)r.out[0].data;
        int bad = 0;
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 9; j++)
                if (y[i * 9 + j] != t[(i % 2) * 3 + j % 3]) bad++;
        CHECK(bad == 0);
    }
    result_free(&r);
    /* Split [2,5] axis 1 into [2,3] */
    float s[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    int64_t sd[2] = {2, 5}, parts[2] = {2, 3};
    kiln_tensor tsx = tensor(KILN_DTYPE_FLOAT32, 2, sd, s), tsp = tensor(KILN_DTYPE_INT64, 1, d2, parts);
    const kiln_tensor *in3[2] = {&tsx, &tsp};
    kiln_split_attrs sa = {1, 0};
    CHECK_OK(run_op(KILN_OP_Split, &sa, 2, in3, 2, NULL, &r));
    float w0[4] = {0, 1, 5, 6}, w1[6] = {2, 3, 4, 7, 8, 9};
    CHECK(r.st == KILN_OK && !memcmp(r.out[0].data, w0, sizeof w0) && !memcmp(r.out[1].data, w1, sizeof w1));
    result_free(&r);
    const kiln_tensor *in4[2] = {&tsx, NULL};
    CHECK_ERR(run_op(KILN_OP_Split, &sa, 2, in4, 2, NULL, &r), KILN_ERR_MODEL, "cannot be split evenly");
    result_free(&r);
}

TEST(depth_space_roundtrip) {
    int64_t xd[4] = {2, 8, 3, 5};
    int64_t n = numel(4, xd);
    float *x = (float *)malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = (float)i;
    for (int crd = 0; crd < 2; crd++) {
        kiln_d2s_attrs at = {2, crd};
        kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, 4, xd, x);
        const kiln_tensor *in[1] = {&tx};
        run_result r;
        CHECK_OK(run_op(KILN_OP_DepthToSpace, &at, 1, in, 1, NULL, &r));
        int64_t wd[4] = {2, 2, 6, 10};
        CHECK(r.st == KILN_OK && same_dims(&r.out[0], 4, wd));
        if (r.st == KILN_OK) {
            const float *y = (const float *)r.out[0].data;
            int bad = 0;
            for (int b = 0; b < 2; b++)
                for (int c = 0; c < 2; c++)
                    for (int h = 0; h < 6; h++)
                        for (int w = 0; w < 10; w++) {
                            int bh = h % 2, bw = w % 2;
                            int ic = crd ? c * 4 + bh * 2 + bw : (bh * 2 + bw) * 2 + c;
                            float want = x[((b * 8 + ic) * 3 + h / 2) * 5 + w / 2];
                            if (y[((b * 2 + c) * 6 + h) * 10 + w] != want) bad++;
                        }
            CHECK(bad == 0);
            if (!crd) { /* SpaceToDepth inverts DCR DepthToSpace */
                kiln_d2s_attrs sa = {2, 0};
                const kiln_tensor *in2[1] = {&r.out[0]};
                run_result r2;
                CHECK_OK(run_op(KILN_OP_SpaceToDepth, &sa, 1, in2, 1, NULL, &r2));
                CHECK(r2.st == KILN_OK && same_dims(&r2.out[0], 4, xd) &&
                      !memcmp(r2.out[0].data, x, sizeof(float) * (size_t)n));
                result_free(&r2);
            }
        }
        result_free(&r);
    }
    free(x);
}

TEST(data_dependent_ops) {
    run_result r;
    /* NonZero on float with -0.0 and NaN */
    float nz[6] = {0.0f, -0.0f, 3.0f, NAN, 0.0f, 1.0f};
    int64_t nd[2] = {2, 3};
    kiln_tensor tn = tensor(KILN_DTYPE_FLOAT32, 2, nd, nz);
    const kiln_tensor *in[1] = {&tn};
    CHECK_OK(run_op(KILN_OP_NonZero, NULL, 1, in, 1, NULL, &r));
    int64_t wn[2] = {2, 3}, wv[6] = {0, 1, 1, 2, 0, 2};
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 2, wn) && !memcmp(r.out[0].data, wv, sizeof wv));
    result_free(&r);
    /* Unique sorted, all outputs */
    float u[6] = {2, 1, 1, 3, 4, 3};
    int64_t ud[1] = {6};
    kiln_tensor tu = tensor(KILN_DTYPE_FLOAT32, 1, ud, u);
    const kiln_tensor *inu[1] = {&tu};
    kiln_axis_opt_attrs ua = {0, 0, 1};
    CHECK_OK(run_op(KILN_OP_Unique, &ua, 1, inu, 4, NULL, &r));
    float wy[4] = {1, 2, 3, 4};
    int64_t wi[4] = {1, 0, 3, 4}, winv[6] = {1, 0, 0, 2, 3, 2}, wc[4] = {2, 1, 2, 1};
    CHECK(r.st == KILN_OK && r.out[0].dims[0] == 4 && !memcmp(r.out[0].data, wy, sizeof wy) &&
          !memcmp(r.out[1].data, wi, sizeof wi) && !memcmp(r.out[2].data, winv, sizeof winv) &&
          !memcmp(r.out[3].data, wc, sizeof wc));
    result_free(&r);
    ua.sorted = 0;
    CHECK_OK(run_op(KILN_OP_Unique, &ua, 1, inu, 4, NULL, &r));
    float wy2[4] = {2, 1, 3, 4};
    int64_t winv2[6] = {0, 1, 1, 2, 3, 2};
    CHECK(r.st == KILN_OK && !memcmp(r.out[0].data, wy2, sizeof wy2) &&
          !memcmp(r.out[2].data, winv2, sizeof winv2));
    result_free(&r);
    /* CumSum exclusive reverse on int32 */
    int32_t c[4] = {1, 2, 3, 4}, axis = 0;
    int64_t cd[1] = {4};
    kiln_tensor tc = tensor(KILN_DTYPE_INT32, 1, cd, c), tax = tensor(KILN_DTYPE_INT32, 0, NULL, &axis);
    const kiln_tensor *inc[2] = {&tc, &tax};
    kiln_cumsum_attrs ca = {1, 1};
    CHECK_OK(run_op(KILN_OP_CumSum, &ca, 2, inc, 1, NULL, &r));
    int32_t wcs[4] = {9, 7, 4, 0};
    CHECK(r.st == KILN_OK && !memcmp(r.out[0].data, wcs, sizeof wcs));
    result_free(&r);
    /* Compress with axis */
    float cx[6] = {1, 2, 3, 4, 5, 6};
    uint8_t cond[2] = {0, 1};
    int64_t cxd[2] = {3, 2}, cdd[1] = {2};
    kiln_tensor tcx = tensor(KILN_DTYPE_FLOAT32, 2, cxd, cx), tcc = tensor(KILN_DTYPE_BOOL, 1, cdd, cond);
    const kiln_tensor *incx[2] = {&tcx, &tcc};
    kiln_axis_opt_attrs cpa = {1, 1, 0};
    CHECK_OK(run_op(KILN_OP_Compress, &cpa, 2, incx, 1, NULL, &r));
    float wcx[3] = {2, 4, 6};
    CHECK(r.st == KILN_OK && r.out[0].dims[1] == 1 && !memcmp(r.out[0].data, wcx, sizeof wcx));
    result_free(&r);
}

TEST(scatter_and_gather_nd) {
    run_result r;
    /* ScatterElements with reduction add and duplicate indices */
    float d[5] = {1, 2, 3, 4, 5}, up[3] = {10, 20, 30};
    int64_t idx[3] = {1, -1, 1};
    int64_t dd[2] = {1, 5}, id[2] = {1, 3};
    kiln_tensor td = tensor(KILN_DTYPE_FLOAT32, 2, dd, d), ti = tensor(KILN_DTYPE_INT64, 2, id, idx),
                tu = tensor(KILN_DTYPE_FLOAT32, 2, id, up);
    const kiln_tensor *in[3] = {&td, &ti, &tu};
    kiln_scatter_attrs sa = {1, 1};
    CHECK_OK(run_op(KILN_OP_ScatterElements, &sa, 3, in, 1, NULL, &r));
    float w[5] = {1, 42, 3, 4, 25};
    CHECK(r.st == KILN_OK && !memcmp(r.out[0].data, w, sizeof w));
    result_free(&r);
    /* GatherND batch_dims 1 */
    int32_t gd[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    int64_t gdd[3] = {2, 2, 2}, gi[2] = {1, 0}, gid[2] = {2, 1};
    kiln_tensor tgd = tensor(KILN_DTYPE_INT32, 3, gdd, gd), tgi = tensor(KILN_DTYPE_INT64, 2, gid, gi);
    const kiln_tensor *in2[2] = {&tgd, &tgi};
    kiln_gathernd_attrs ga = {1, 0};
    CHECK_OK(run_op(KILN_OP_GatherND, &ga, 2, in2, 1, NULL, &r));
    int32_t wg[4] = {2, 3, 4, 5};
    int64_t wgd[2] = {2, 2};
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 2, wgd) && !memcmp(r.out[0].data, wg, sizeof wg));
    result_free(&r);
}

TEST(opset18_forms) {
    run_result r;
    /* Split with num_outputs (no split input): ceil-sized chunks, last smaller */
    float x[7] = {0, 1, 2, 3, 4, 5, 6};
    int64_t xd[1] = {7};
    kiln_tensor tx = tensor(KILN_DTYPE_FLOAT32, 1, xd, x);
    const kiln_tensor *in[1] = {&tx};
    kiln_split_attrs sa = {0, 3};
    CHECK_OK(run_op(KILN_OP_Split, &sa, 1, in, 3, NULL, &r));
    CHECK(r.st == KILN_OK && r.out[0].dims[0] == 3 && r.out[1].dims[0] == 3 && r.out[2].dims[0] == 1);
    if (r.st == KILN_OK) CHECK(((float *)r.out[2].data)[0] == 6.0f && ((float *)r.out[1].data)[0] == 3.0f);
    result_free(&r);
    /* Pad with an axes input: pad only axis -1 of a [2,2] */
    float p[4] = {1, 2, 3, 4};
    int64_t pd[2] = {2, 2}, pads[2] = {1, 0}, axes[1] = {-1}, d2[1] = {2}, d1[1] = {1};
    kiln_tensor tp = tensor(KILN_DTYPE_FLOAT32, 2, pd, p), tpp = tensor(KILN_DTYPE_INT64, 1, d2, pads),
                ta = tensor(KILN_DTYPE_INT64, 1, d1, axes);
    const kiln_tensor *inp[4] = {&tp, &tpp, NULL, &ta};
    kiln_pad_attrs pa = {PAD_EDGE};
    CHECK_OK(run_op(KILN_OP_Pad, &pa, 4, inp, 1, NULL, &r));
    float want[6] = {1, 1, 2, 3, 3, 4};
    int64_t wd[2] = {2, 3};
    CHECK(r.st == KILN_OK && same_dims(&r.out[0], 2, wd) && !memcmp(r.out[0].data, want, sizeof want));
    result_free(&r);
    /* ScatterElements reduction max/min */
    float d[3] = {5, 5, 5}, up[2] = {7, 1};
    int64_t idx[2] = {0, 2}, dd[1] = {3}, id[1] = {2};
    kiln_tensor td = tensor(KILN_DTYPE_FLOAT32, 1, dd, d), ti = tensor(KILN_DTYPE_INT64, 1, id, idx),
                tu = tensor(KILN_DTYPE_FLOAT32, 1, id, up);
    const kiln_tensor *ins[3] = {&td, &ti, &tu};
    kiln_scatter_attrs smax = {0, RED_MAX};
    CHECK_OK(run_op(KILN_OP_ScatterElements, &smax, 3, ins, 1, NULL, &r));
    float wmax[3] = {7, 5, 5};
    CHECK(r.st == KILN_OK && !memcmp(r.out[0].data, wmax, sizeof wmax));
    result_free(&r);
    kiln_scatter_attrs smin = {0, RED_MIN};
    CHECK_OK(run_op(KILN_OP_ScatterElements, &smin, 3, ins, 1, NULL, &r));
    float wmin[3] = {5, 5, 1};
    CHECK(r.st == KILN_OK && !memcmp(r.out[0].data, wmin, sizeof wmin));
    result_free(&r);
}

/* ---- build time with unknown ranks ------------------------------------------------------ */

TEST(infer_unknown_rank_tolerated) {
    /* Every op of the family accepts inputs of unknown rank without data at
     * build time: it either infers something (rank -1 allowed) or fails cleanly. */
    typedef struct {
        int id, n_in, n_out;
        kiln_dtype dt[5];
    } op_case;
    const kiln_dtype F = KILN_DTYPE_FLOAT32, I = KILN_DTYPE_INT64, B = KILN_DTYPE_BOOL;
    const op_case cases[] = {
        {KILN_OP_Reshape, 2, 1, {F, I}},         {KILN_OP_Flatten, 1, 1, {F}},
        {KILN_OP_Transpose, 1, 1, {F}},          {KILN_OP_Concat, 2, 1, {F, F}},
        {KILN_OP_Split, 2, 2, {F, I}},           {KILN_OP_Slice, 5, 1, {F, I, I, I, I}},
        {KILN_OP_Squeeze, 2, 1, {F, I}},         {KILN_OP_Unsqueeze, 2, 1, {F, I}},
        {KILN_OP_Gather, 2, 1, {F, I}},          {KILN_OP_GatherElements, 2, 1, {F, I}},
        {KILN_OP_GatherND, 2, 1, {F, I}},        {KILN_OP_ScatterElements, 3, 1, {F, I, F}},
        {KILN_OP_ScatterND, 3, 1, {F, I, F}},    {KILN_OP_Scatter, 3, 1, {F, I, F}},
        {KILN_OP_Expand, 2, 1, {F, I}},          {KILN_OP_Tile, 2, 1, {F, I}},
        {KILN_OP_Pad, 3, 1, {F, I, F}},          {KILN_OP_Shape, 1, 1, {F}},
        {KILN_OP_Size, 1, 1, {F}},               {KILN_OP_ConstantOfShape, 1, 1, {I}},
        {KILN_OP_Range, 3, 1, {F, F, F}},        {KILN_OP_Identity, 1, 1, {F}},
        {KILN_OP_Dropout, 1, 2, {F}},            {KILN_OP_OneHot, 3, 1, {I, I, F}},
        {KILN_OP_DepthToSpace, 1, 1, {F}},       {KILN_OP_SpaceToDepth, 1, 1, {F}},
        {KILN_OP_NonZero, 1, 1, {F}},            {KILN_OP_Compress, 2, 1, {F, B}},
        {KILN_OP_Trilu, 2, 1, {F, I}},           {KILN_OP_EyeLike, 1, 1, {F}},
        {KILN_OP_ReverseSequence, 2, 1, {F, I}}, {KILN_OP_Resize, 3, 1, {F, F, F}},
        {KILN_OP_Upsample, 2, 1, {F, F}},        {KILN_OP_CumSum, 2, 1, {F, I}},
        {KILN_OP_Unique, 1, 4, {F}},
    };
    unsigned char attrs[256];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const op_case *oc = &cases[c];
        const kiln_op_def *op = kiln__op_by_id(oc->id);
        CHECK(op != NULL && op->attr_size <= sizeof attrs);
        if (!op) continue;
        memset(attrs, 0, sizeof attrs);
        if (oc->id == KILN_OP_DepthToSpace || oc->id == KILN_OP_SpaceToDepth) {
            kiln_d2s_attrs d = {2, 0};
            memcpy(attrs, &d, sizeof d);
        } else if (oc->id == KILN_OP_Resize || oc->id == KILN_OP_Upsample) {
            kiln_resize_attrs r = resize_attrs(RS_LINEAR, RS_HALF_PIXEL);
            if (oc->id == KILN_OP_Upsample) r.in_roi = -1, r.in_scales = 1, r.in_sizes = -1;
            memcpy(attrs, &r, sizeof r);
        } else if (oc->id == KILN_OP_ReverseSequence) {
            kiln_revseq_attrs r = {1, 0};
            memcpy(attrs, &r, sizeof r);
        } else if (oc->id == KILN_OP_Trilu) {
            kiln_trilu_attrs t = {1};
            memcpy(attrs, &t, sizeof t);
        }
        kiln_tinfo ti[5];
        const kiln_tinfo *in[5];
        for (int i = 0; i < oc->n_in; i++) {
            memset(&ti[i], 0, sizeof ti[i]);
            ti[i].dtype = oc->dt[i];
            ti[i].rank = -1;
            in[i] = &ti[i];
        }
        kiln_tinfo out[4];
        kiln_status st = infer_op(oc->id, attrs, oc->n_in, in, oc->n_out, out);
        if (st != KILN_OK) fprintf(stderr, "  %s: %s\n", op->name, kiln_last_error());
        CHECK(st == KILN_OK);
        for (int o = 0; o < oc->n_out && st == KILN_OK; o++) CHECK(out[o].rank >= -1 && out[o].rank <= KILN_MAX_RANK);
    }
}

/* ---- NonMaxSuppression (src/ops/misc.c) -------------------------------------------- */

static uint64_t nms_rng = 99;
static float nms_rand(void) { /* uniform in [-1, 1) */
    nms_rng = nms_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(nms_rng >> 40) / 16777216.0 * 2.0 - 1.0);
}

typedef struct nms_ref_cand {
    float score;
    int64_t idx;
} nms_ref_cand;

static int nms_ref_order(const void *pa, const void *pb) { /* score down, index up */
    const nms_ref_cand *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* ONNX's greedy selection written plainly: every candidate against every box
 * selected before it in its class. Returns the number of triplets in sel. */
static int64_t nms_reference(const float *boxes, const float *scores, int64_t B, int64_t C, int64_t N,
                             bool center, int64_t max_out, float iou, const float *score_th,
                             int64_t *sel) {
    int64_t total = 0, *order = malloc(sizeof(int64_t) * (size_t)N);
    int64_t *kept = malloc(sizeof(int64_t) * (size_t)N);
    nms_ref_cand *rc = malloc(sizeof(nms_ref_cand) * (size_t)N);
    for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < C; c++) {
            const float *sc = scores + (b * C + c) * N;
            int64_t n = 0, nk = 0;
            for (int64_t i = 0; i < N; i++)
                if (sc[i] == sc[i] && (!score_th || sc[i] > *score_th)) rc[n++] = (nms_ref_cand){sc[i], i};
            qsort(rc, (size_t)n, sizeof *rc, nms_ref_order);
            for (int64_t i = 0; i < n; i++) order[i] = rc[i].idx;
            for (int64_t i = 0; i < n && nk < max_out; i++) {
                bool keep = true;
                for (int64_t k = 0; k < nk && keep; k++) {
                    float e[2][4];
                    const int64_t id[2] = {kept[k], order[i]};
                    for (int q = 0; q < 2; q++) {
                        const float *x = boxes + (b * N + id[q]) * 4;
                        if (center) {
                            e[q][0] = x[1] - x[3] / 2, e[q][1] = x[0] - x[2] / 2;
                            e[q][2] = x[1] + x[3] / 2, e[q][3] = x[0] + x[2] / 2;
                        } else {
                            e[q][0] = fminf(x[0], x[2]), e[q][1] = fminf(x[1], x[3]);
                            e[q][2] = fmaxf(x[0], x[2]), e[q][3] = fmaxf(x[1], x[3]);
                        }
                    }
                    float ih = fmaxf(0.f, fminf(e[0][2], e[1][2]) - fmaxf(e[0][0], e[1][0]));
                    float iw = fmaxf(0.f, fminf(e[0][3], e[1][3]) - fmaxf(e[0][1], e[1][1]));
                    float inter = iw * ih;
                    float a0 = (e[0][3] - e[0][1]) * (e[0][2] - e[0][0]);
                    float a1 = (e[1][3] - e[1][1]) * (e[1][2] - e[1][0]);
                    float uni = a0 + a1 - inter;
                    if (inter > 0.f && a0 > 0.f && a1 > 0.f && uni > 0.f && inter / uni > iou) keep = false;
                }
                if (!keep) continue;
                kept[nk++] = order[i];
                sel[total * 3 + 0] = b, sel[total * 3 + 1] = c, sel[total * 3 + 2] = order[i];
                total++;
            }
        }
    free(order);
    free(kept);
    free(rc);
    return total;
}

/* Runs kiln's NonMaxSuppression and checks it against nms_reference(). */
static void nms_check(const float *boxes, const float *scores, int64_t B, int64_t C, int64_t N, bool center,
                      int64_t max_out, float iou, const float *score_th) {
    int32_t attrs[1] = {center};
    const int64_t db[3] = {B, N, 4}, ds[3] = {B, C, N}, d1[1] = {1};
    kiln_tensor tb = tensor(KILN_DTYPE_FLOAT32, 3, db, boxes), ts = tensor(KILN_DTYPE_FLOAT32, 3, ds, scores);
    kiln_tensor tm = tensor(KILN_DTYPE_INT64, 1, d1, &max_out), ti = tensor(KILN_DTYPE_FLOAT32, 1, d1, &iou);
    kiln_tensor tt = tensor(KILN_DTYPE_FLOAT32, 1, d1, score_th);
    const kiln_tensor *in[5] = {&tb, &ts, &tm, &ti, score_th ? &tt : NULL};
    run_result r;
    CHECK_OK(run_op(KILN_OP_NonMaxSuppression, attrs, 5, in, 1, NULL, &r));
    int64_t *want = malloc(sizeof(int64_t) * 3 * (size_t)(B * C * N + 1));
    int64_t n = nms_reference(boxes, scores, B, C, N, center, max_out, iou, score_th, want);
    CHECK(r.st == KILN_OK && r.out[0].rank == 2 && r.out[0].dims[0] == n && r.out[0].dims[1] == 3);
    if (r.st == KILN_OK && r.out[0].dims[0] == n)
        CHECK(memcmp(r.out[0].data, want, sizeof(int64_t) * 3 * (size_t)n) == 0);
    free(want);
    result_free(&r);
}

/* Random boxes in a few clumps (so that some overlap and some do not), some
 * flipped, empty, NaN or infinite, in both box formats and with and without
 * a score threshold and an output limit: the same selection as the plain
 * greedy algorithm. */
TEST(nms_matches_reference) {
    const int64_t B = 2, C = 3, N = 700;
    float *boxes = malloc(sizeof(float) * (size_t)(B * N * 4)), *scores = malloc(sizeof(float) * (size_t)(B * C * N));
    for (int64_t i = 0; i < B * N; i++) {
        float cx = 10.f * (float)(int)(4.f * (nms_rand() + 1.f)), cy = 10.f * (float)(int)(4.f * (nms_rand() + 1.f));
        float *x = boxes + i * 4;
        x[0] = cy + 4.f * nms_rand(), x[1] = cx + 4.f * nms_rand();
        x[2] = x[0] + 6.f * nms_rand(), x[3] = x[1] + 6.f * nms_rand(); /* negative: flipped */
        if (i % 37 == 0) x[2] = x[0];                          /* empty */
        if (i % 53 == 0) x[1] = NAN;
        if (i % 59 == 0) x[3] = INFINITY;
    }
    for (int64_t i = 0; i < B * C * N; i++) scores[i] = i % 41 == 0 ? NAN : (float)(int)(50.f * nms_rand()) / 50.f;
    const float th = 0.2f;
    for (int center = 0; center < 2; center++) {
        nms_check(boxes, scores, B, C, N, center, 1000000, 0.5f, NULL);
        nms_check(boxes, scores, B, C, N, center, 1000000, 0.f, NULL);
        nms_check(boxes, scores, B, C, N, center, 1000000, 1.f, NULL);
        nms_check(boxes, scores, B, C, N, center, 25, 0.3f, &th);
    }
    free(boxes);
    free(scores);
}

/* torchvision's batched_nms as exported: each of 90 classes' 1000 boxes
 * offset by class * (max coordinate + 1), all in one NonMaxSuppression class
 * of 90000 boxes (Faster R-CNN's postprocessing): the same selection as 90
 * NMS of 1000 boxes. Its speed (the x-sweep groups: milliseconds instead of
 * about a minute) is a benchmark's business, not this test's: the model-zoo
 * sweep's fasterrcnn latency rows (docs/model-zoo.md); the time is printed. */
TEST(nms_offset_classes) {
    const int64_t K = 90, M = 1000, N = K * M;
    float *boxes = malloc(sizeof(float) * (size_t)N * 4), *scores = malloc(sizeof(float) * (size_t)N);
    float *by_class = malloc(sizeof(float) * (size_t)(K * N));
    for (int64_t i = 0; i < N; i++) {
        float off = (float)(i % K) * 321.f, *x = boxes + i * 4;
        x[0] = 160.f + 150.f * nms_rand(), x[1] = 160.f + 150.f * nms_rand();
        x[2] = x[0] + 5.f + 20.f * (nms_rand() + 1.f), x[3] = x[1] + 5.f + 20.f * (nms_rand() + 1.f);
        for (int q = 0; q < 4; q++) x[q] = fminf(x[q], 320.f) + off;
        scores[i] = 0.5f + 0.5f * nms_rand();
        for (int64_t k = 0; k < K; k++) by_class[k * N + i] = k == i % K ? scores[i] : -1.f;
    }
    int32_t attrs[1] = {0};
    int64_t max_out = N;
    float iou = 0.5f, zero = 0.f;
    const int64_t db[3] = {1, N, 4}, ds[3] = {1, 1, N}, d1[1] = {1};
    kiln_tensor tb = tensor(KILN_DTYPE_FLOAT32, 3, db, boxes), ts = tensor(KILN_DTYPE_FLOAT32, 3, ds, scores);
    kiln_tensor tm = tensor(KILN_DTYPE_INT64, 1, d1, &max_out), ti = tensor(KILN_DTYPE_FLOAT32, 1, d1, &iou);
    const kiln_tensor *in[4] = {&tb, &ts, &tm, &ti};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    run_result r;
    CHECK_OK(run_op(KILN_OP_NonMaxSuppression, attrs, 4, in, 1, NULL, &r));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("  NMS of %lld offset boxes: %.3f s\n", (long long)N, secs);
    /* The reference: the same boxes with one NMS class per offset class
     * (the others' scores under a threshold), merged in score order. */
    int64_t *want = malloc(sizeof(int64_t) * 3 * (size_t)N);
    int64_t n = nms_reference(boxes, by_class, 1, K, N, false, N, iou, &zero, want);
    nms_ref_cand *w = malloc(sizeof *w * (size_t)n);
    for (int64_t i = 0; i < n; i++) w[i] = (nms_ref_cand){scores[want[i * 3 + 2]], want[i * 3 + 2]};
    qsort(w, (size_t)n, sizeof *w, nms_ref_order);
    CHECK(n > K && n < N); /* some boxes suppressed, not all */
    CHECK(r.st == KILN_OK && r.out[0].dims[0] == n);
    if (r.st == KILN_OK && r.out[0].dims[0] == n) {
        const int64_t *got = r.out[0].data;
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) bad += got[i * 3] != 0 || got[i * 3 + 1] != 0 || got[i * 3 + 2] != w[i].idx;
        CHECK(bad == 0);
    }
    result_free(&r);
    free(w);
    free(want);
    free(by_class);
    free(boxes);
    free(scores);
}

int main(void) {
    RUN(transpose_odd_shapes);
    RUN(transpose_bert_and_nchw_parallel);
    RUN(transpose_infer_symbolic_and_errors);
    RUN(slice_negative_steps_and_clamping);
    RUN(slice_infer_symbolic);
    RUN(concat_each_axis);
    RUN(concat_dtypes_empty_and_errors);
    RUN(gather_negative_indices);
    RUN(gather_embedding_parallel_f16);
    RUN(reshape_zero_and_minus_one);
    RUN(reshape_build_time_symbolic);
    RUN(squeeze_unsqueeze);
    RUN(pad_modes);
    RUN(resize_linear_small);
    RUN(resize_infer_build_time);
    RUN(expand_tile_split);
    RUN(depth_space_roundtrip);
    RUN(data_dependent_ops);
    RUN(scatter_and_gather_nd);
    RUN(opset18_forms);
    RUN(infer_unknown_rank_tolerated);
    RUN(nms_matches_reference);
    RUN(nms_offset_classes);
    return test_summary();
}
