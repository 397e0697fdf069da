/* test_tune_judge.c -- the tuner's whole path for one device layer
 * (kiln__tune_layer, src/builder/tune.c: buffers, poisoned outputs, each
 * tactic's set-up run, sampled outputs, the host reference, the judgement,
 * the timing) on a planted device: a backend of this test whose memory is
 * the host's and whose FusedConv kernel has tactics named as cuDNN's are,
 * some of them wrong on purpose. The layer is the kind the H200 got wrong:
 * fp16, channels-last (X and Y NHWC, as CUDA's layout pass leaves them),
 * SiLU.
 *
 *   fake-eng7.00000   NaN in part of its output
 *   fake-eng4.0266c   two configs of one engine that read X as NCHW: the
 *   fake-eng4.3fe3b   same wrong answer (a descriptor bug)
 *   fake-legacy       right (and the slowest)
 *   fake-direct       right
 *   fake-eng9.0000a   right on finite inputs, but NaN comes out as 0, as a
 *   fake-eng9.0000b   max(x, 0) ReLU epilogue gives (issue 20: random CUDA
 *                     graphs 53 and 101): only the NaN probe sees them
 *   fake-eng5.00000   right on finite and on NaN inputs, but +-inf in X
 *                     read as +-65504 (a saturating conversion): only the
 *                     probe's second input (NaN and +-inf among random
 *                     values) sees it
 *
 * The host reference must run the layer as the device does (its NHWC
 * input converted, its output converted back before sampling, fp16 in
 * float32 math), or the right tactics would disagree with it. */
#include <math.h>
#include <stdlib.h>

#include "test.h"

#include "backends/backend.h"
#include "builder/tune_check.h"
#include "ops/fused_conv.h"
#include "runtime/engine.h"

enum { T_ENG7 = 70, T_ENG4A = 40, T_ENG4B = 41, T_LEGACY = 1, T_DIRECT = 2, T_RELU9A = 90, T_RELU9B = 91, T_SAT5 = 50 };

#define N_ 2
#define C_ 8
#define H_ 5
#define W_ 6
#define M_ 4

static void fake_describe(int32_t id, char *buf, size_t cap) {
    snprintf(buf, cap, "%s",
             id == T_ENG7    ? "fake-eng7.00000"
             : id == T_ENG4A ? "fake-eng4.0266c"
             : id == T_ENG4B ? "fake-eng4.3fe3b"
             : id == T_LEGACY ? "fake-legacy"
             : id == T_DIRECT ? "fake-direct"
             : id == T_RELU9A ? "fake-eng9.0000a"
             : id == T_RELU9B ? "fake-eng9.0000b"
             : id == T_SAT5   ? "fake-eng5.00000"
                              : "fake-?");
}

/* FusedConv 3x3, pads 1, bias, SiLU; X and Y NHWC fp16 (the eng4 configs
 * read X as NCHW) */
static kiln_status fake_conv(const kiln_kernel_args *a) {
    const kiln_fused_conv_attrs *at = a->attrs;
    const void *x = a->in[0]->data, *w = a->in[1]->data, *b = a->in[2]->data;
    void *y = a->out[0]->data;
    int32_t id = at->tactic.id;
    bool nchw_bug = id == T_ENG4A || id == T_ENG4B;
    int64_t i = 0;
    for (int n = 0; n < N_; n++)
        for (int h = 0; h < H_; h++)
            for (int wi = 0; wi < W_; wi++)
                for (int m = 0; m < M_; m++, i++) {
                    double acc = kiln__load_f64(KILN_DTYPE_FLOAT16, b, m);
                    for (int c = 0; c < C_; c++)
                        for (int kh = 0; kh < 3; kh++)
                            for (int kw = 0; kw < 3; kw++) {
                                int ih = h + kh - 1, iw = wi + kw - 1;
                                if (ih < 0 || ih >= H_ || iw < 0 || iw >= W_) continue;
                                int64_t xi = nchw_bug ? ((int64_t)(n * C_ + c) * H_ + ih) * W_ + iw
                                                      : ((int64_t)(n * H_ + ih) * W_ + iw) * C_ + c;
                                double xv = kiln__load_f64(KILN_DTYPE_FLOAT16, x, xi);
                                if (id == T_SAT5 && isinf(xv)) xv = xv > 0 ? 65504 : -65504;
                                acc += xv *
                                       kiln__load_f64(KILN_DTYPE_FLOAT16, w, ((m * C_ + c) * 3 + kh) * 3 + kw);
                            }
                    double v = acc / (1 + exp(-acc));
                    if (id == T_ENG7 && i % 5 == 0) v = NAN;
                    if ((id == T_RELU9A || id == T_RELU9B) && v != v) v = 0; /* fmaxf(x, 0)'s NaN */
                    kiln__store_f64(KILN_DTYPE_FLOAT16, y, i, v); /* (row-major i = NHWC order) */
                }
    return KILN_OK;
}

/* what setting each tactic up costs (KILN_TUNE_VERBOSE's account) */
static int fake_kind(void *state, int32_t id) {
    (void)state;
    return id == T_LEGACY ? KILN_TACTIC_KIND_LEGACY : id == T_DIRECT ? KILN_TACTIC_KIND_KILN
                                                                      : KILN_TACTIC_KIND_PRECOMPILED;
}

static const kiln_kernel fake_kernel = {.name = "fake.conv", .run = fake_conv, .tactic_describe = fake_describe,
                                        .tactic_kind = fake_kind};

static const kiln_kernel *fake_kernel_for(int op_id) { return op_id == KILN_OP_FusedConv ? &fake_kernel : NULL; }
static void *fake_alloc(void *st, size_t n) { (void)st; return kiln__aligned_alloc(n); }
static void fake_free(void *st, void *p) { (void)st; kiln__aligned_free(p); }
static kiln_status fake_copy(void *st, void *dst, const void *src, size_t n) {
    (void)st;
    memcpy(dst, src, n);
    return KILN_OK;
}
static kiln_status fake_sync(void *st) { (void)st; return KILN_OK; }
static void fake_poison_scratch(void *st) { (void)st; }
static kiln_status fake_poison(void *st, void *p, size_t n) {
    (void)st;
    memset(p, 0xff, n); /* fp16 NaN */
    return KILN_OK;
}
static kiln_status fake_strided(void *st, void *dst, const void *src, size_t elem, size_t stride, size_t count) {
    (void)st;
    for (size_t j = 0; j < count; j++) memcpy((char *)dst + j * elem, (const char *)src + j * stride, elem);
    return KILN_OK;
}
static kiln_status fake_run(void *st, const kiln_kernel_args *a) {
    (void)st;
    const kiln_fused_conv_attrs *at = a->attrs;
    for (int r = at->tactic.id == T_LEGACY ? 4 : 0; r > 0; r--) KILN_TRY(fake_conv(a)); /* (the slowest) */
    return fake_conv(a);
}

static const kiln_backend_i fake_device = {
    .name = "fake", .device = KILN_DEVICE_CUDA, .reduced_tensors = true, .kernel_for = fake_kernel_for,
    .alloc = fake_alloc, .free = fake_free, .to_device = fake_copy, .to_host = fake_copy, .sync = fake_sync,
    .poison_scratch = fake_poison_scratch, .poison = fake_poison, .to_host_strided = fake_strided, .run = fake_run,
};

/* The layer and its tuning: tactics ids[0..n), reference bound macs. */
typedef struct layer {
    kiln_fused_conv_attrs at;
    uint16_t w[M_ * C_ * 9], b[M_];
    kiln_tinfo x_i, w_i, b_i, y_i;
    const kiln_tinfo *in[3];
    int in_v[3], out_v[1];
    kiln_node n;
} layer;

static void layer_make(layer *L) {
    memset(L, 0, sizeof *L);
    L->at.conv = (kiln_conv_attrs){.auto_pad = PAD_NOTSET, .group = 1, .n_kernel = 2, .n_pads = 4, .n_strides = 2,
                                   .n_dilations = 2, .kernel = {3, 3}, .pads = {1, 1, 1, 1}, .strides = {1, 1},
                                   .dilations = {1, 1}};
    L->at.act = KILN_FC_ACT_SILU;
    L->at.precision = KILN_PRECISION_FP32;
    L->at.layout = KILN_FC_LAYOUT_X_NHWC | KILN_FC_LAYOUT_Y_NHWC;
    for (int i = 0; i < M_ * C_ * 9; i++) kiln__store_f64(KILN_DTYPE_FLOAT16, L->w, i, sin(0.7 * i) * 0.3);
    for (int i = 0; i < M_; i++) kiln__store_f64(KILN_DTYPE_FLOAT16, L->b, i, 0.1 * i - 0.1);
    L->x_i = (kiln_tinfo){.dtype = KILN_DTYPE_FLOAT16, .rank = 4, .dims = {N_, C_, H_, W_}};
    L->w_i = (kiln_tinfo){.dtype = KILN_DTYPE_FLOAT16, .rank = 4, .dims = {M_, C_, 3, 3}, .data = L->w};
    L->b_i = (kiln_tinfo){.dtype = KILN_DTYPE_FLOAT16, .rank = 1, .dims = {M_}, .data = L->b};
    L->y_i = (kiln_tinfo){.dtype = KILN_DTYPE_FLOAT16, .rank = 4, .dims = {N_, M_, H_, W_}};
    L->in[0] = &L->x_i;
    L->in[1] = &L->w_i;
    L->in[2] = &L->b_i;
    for (int i = 0; i < 3; i++) L->in_v[i] = i;
    L->out_v[0] = 3;
    L->n = (kiln_node){.op_id = KILN_OP_FusedConv, .op = kiln__op_by_id(KILN_OP_FusedConv), .name = "se/conv_reduce",
                       .n_in = 3, .n_out = 1, .in = L->in_v, .out = L->out_v, .attrs = &L->at,
                       .device = KILN_DEVICE_CUDA};
}

static kiln_status tune_stats(const int32_t *ids, int n_ids, double max_macs, int32_t *best, kiln_tune_stats *S) {
    layer *L = kiln__calloc(1, sizeof *L);
    if (!L) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "test");
    layer_make(L);
    kiln_status st = L->n.op->validate(L->n.op, &L->at, L->n.name);
    kiln_pool *pool = NULL;
    double us = -1;
    kiln_tune_layer tl = {.be = &fake_device, .pool = &pool, .threads = 2, .n = &L->n, .in = L->in,
                          .outs = &L->y_i, .ids = ids, .n_ids = n_ids, .notes = true, .ref_max_macs = max_macs,
                          .ref_max_bytes = 1e9, .stats = S};
    if (st == KILN_OK) st = kiln__tune_layer(&tl, best, &us);
    if (st == KILN_OK && us < 0) st = KILN_FAIL(KILN_ERR_INTERNAL, "test: no tactic was timed");
    kiln__pool_free(pool);
    kiln__free(L);
    return st;
}

static kiln_status tune(const int32_t *ids, int n_ids, double max_macs, int32_t *best) {
    return tune_stats(ids, n_ids, max_macs, best, NULL);
}

static const int32_t planted[4] = {T_ENG7, T_ENG4A, T_ENG4B, T_LEGACY};

/* Where a layer's tuning time went (kiln_tune_stats, KILN_TUNE_VERBOSE):
 * its candidates set up by kind, the host reference computed only when
 * they disagree, every phase within the layer's whole time. */
TEST(the_stats_say_where_the_time_went) {
    int32_t best = -1;
    kiln_tune_stats S;
    memset(&S, 0xff, sizeof S); /* (all of it is written) */
    S.list_us = 12.5;           /* (the tuner's, kept) */
    CHECK_OK(tune_stats(planted, 4, 1e9, &best, &S));
    CHECK(S.candidates == 4 && S.ref_runs == 1 && S.list_us == 12.5);
    CHECK(S.setup_n[KILN_TACTIC_KIND_PRECOMPILED] == 3 && S.setup_n[KILN_TACTIC_KIND_LEGACY] == 1);
    CHECK(S.setup_n[KILN_TACTIC_KIND_KILN] == 0 && S.setup_n[KILN_TACTIC_KIND_RUNTIME] == 0);
    CHECK(S.failed_n[KILN_TACTIC_KIND_PRECOMPILED] == 0);
    double parts = S.bufs_us + S.check_us + S.judge_us + S.time_us;
    for (int k = 0; k < KILN_TUNE_KINDS; k++) parts += S.setup_us[k];
    CHECK(S.judge_us > 0 && S.time_us > 0 && S.total_us > 0 && parts <= S.total_us * 1.001 + 1);
    /* agreeing tactics: no judge, no reference */
    static const int32_t right[2] = {T_DIRECT, T_LEGACY};
    CHECK_OK(tune_stats(right, 2, 1e9, &best, &S));
    CHECK(S.candidates == 2 && S.ref_runs == 0 && S.judge_us < S.total_us);
    CHECK(S.setup_n[KILN_TACTIC_KIND_KILN] == 1 && S.setup_n[KILN_TACTIC_KIND_LEGACY] == 1);
}

/* The H200's case: the plurality (the two eng4 configs) is wrong; the host
 * reference keeps the legacy tactic alone. */
TEST(the_host_reference_keeps_the_right_tactic) {
    int32_t best = -1;
    CHECK_OK(tune(planted, 4, 1e9, &best));
    CHECK(best == T_LEGACY);
    static const int32_t two_right[5] = {T_ENG4A, T_ENG7, T_DIRECT, T_ENG4B, T_LEGACY};
    CHECK_OK(tune(two_right, 5, 1e9, &best));
    CHECK(best == T_DIRECT || best == T_LEGACY);
}

/* Tactics that agree are kept as they are (no reference is needed). */
TEST(tactics_that_agree_are_timed) {
    int32_t best = -1;
    static const int32_t right[2] = {T_DIRECT, T_LEGACY};
    CHECK_OK(tune(right, 2, 0, &best));
    CHECK(best == T_DIRECT || best == T_LEGACY);
    static const int32_t wrong[2] = {T_ENG4A, T_ENG4B}; /* (agreeing: not judged) */
    CHECK_OK(tune(wrong, 2, 0, &best));
}

TEST(every_tactic_wrong_fails_the_build) {
    int32_t best = -1;
    CHECK_ERR(tune(planted, 3, 1e9, &best), KILN_ERR_DEVICE, "node 'se/conv_reduce' (FusedConv): none of its tactics");
    CHECK(strstr(kiln_last_error(), "fake-eng4.0266c (max |y - ref|"));
    CHECK(strstr(kiln_last_error(), "fake-eng7.00000 (max |y - ref| inf, 48 NaN/Inf)"));
}

/* Over the reference's bound (0 here): the engine families vote, and the
 * two eng4 configs count once. */
TEST(without_a_reference_families_vote_and_no_plurality_is_taken) {
    int32_t best = -1;
    CHECK_ERR(tune(planted, 4, 0, &best), KILN_ERR_DEVICE, "node 'se/conv_reduce' (FusedConv): its tactics disagree:");
    CHECK(strstr(kiln_last_error(), "no host reference checks them (the layer is over the host reference's bounds"));
    CHECK(strstr(kiln_last_error(), "fake-legacy (max |y|"));
    /* eng4 (2 configs) against legacy and direct: 2 of 3 families */
    static const int32_t fam[4] = {T_ENG4A, T_ENG4B, T_LEGACY, T_DIRECT};
    CHECK_OK(tune(fam, 4, 0, &best));
    CHECK(best == T_DIRECT || best == T_LEGACY);
}

/* The NaN probe (tune.c: nan_probe): the eng9 configs agree with the
 * others on random inputs and are the fastest, but turn a NaN input into
 * 0 where the host reference (and legacy) give NaN: they are not used,
 * with or without a host reference. Where every tactic drops NaN, all are
 * kept (a note says so) rather than failing the build. Without the probe
 * the fastest, eng9, was taken. */
TEST(the_nan_probe_drops_tactics_that_turn_nan_into_numbers) {
    int32_t best = -1;
    kiln_tune_stats S;
    static const int32_t relu[3] = {T_RELU9A, T_LEGACY, T_RELU9B};
    CHECK_OK(tune_stats(relu, 3, 1e9, &best, &S));
    CHECK(best == T_LEGACY); /* (eng9 is 5 times faster) */
    CHECK(S.candidates == 3 && S.ref_runs == 1 && S.probe_us > 0);
    CHECK_OK(tune(relu, 3, 0, &best)); /* no host reference: legacy's NaN is expected */
    CHECK(best == T_LEGACY);
    /* tactics that keep NaN agree: no host reference */
    static const int32_t right[2] = {T_DIRECT, T_LEGACY};
    CHECK_OK(tune_stats(right, 2, 1e9, &best, &S));
    CHECK(S.ref_runs == 0);
    /* every tactic drops NaN: kept, the build goes on */
    static const int32_t all_drop[2] = {T_RELU9A, T_RELU9B};
    CHECK_OK(tune(all_drop, 2, 1e9, &best));
    CHECK(best == T_RELU9A || best == T_RELU9B);
    /* KILN_TUNE_NO_NAN_PROBE=1 turns it off */
    setenv("KILN_TUNE_NO_NAN_PROBE", "1", 1);
    CHECK_OK(tune_stats(relu, 3, 1e9, &best, &S));
    unsetenv("KILN_TUNE_NO_NAN_PROBE");
    CHECK(best != T_LEGACY && S.ref_runs == 0);
}

/* The probe's second input: eng5 reads +-inf as +-65504 (the legacy API's
 * 2x2 stride-2 fp16 NHWC conv of 5 channels on the H100 gave numbers where
 * the CPU's ReLU of -inf gives 0): right on random and on all-NaN inputs,
 * and the fastest, it is dropped where a host reference checks the layer;
 * without one (over its bounds) nothing is decided, and without the probe
 * it is taken. */
TEST(the_probe_drops_tactics_wrong_on_infinities) {
    int32_t best = -1;
    kiln_tune_stats S;
    static const int32_t sat[2] = {T_SAT5, T_LEGACY};
    CHECK_OK(tune_stats(sat, 2, 1e9, &best, &S));
    CHECK(best == T_LEGACY);
    CHECK(S.ref_runs == 1); /* (the second input's: the first agreed) */
    static const int32_t three[3] = {T_DIRECT, T_SAT5, T_LEGACY};
    CHECK_OK(tune(three, 3, 1e9, &best));
    CHECK(best == T_DIRECT || best == T_LEGACY);
    CHECK_OK(tune(sat, 2, 0, &best)); /* no host reference */
    CHECK(best == T_SAT5);
    setenv("KILN_TUNE_NO_NAN_PROBE", "1", 1);
    CHECK_OK(tune(sat, 2, 1e9, &best));
    unsetenv("KILN_TUNE_NO_NAN_PROBE");
    CHECK(best == T_SAT5);
    setenv("KILN_TUNE_NO_INF_PROBE", "1", 1); /* (this input alone) */
    CHECK_OK(tune(sat, 2, 1e9, &best));
    unsetenv("KILN_TUNE_NO_INF_PROBE");
    CHECK(best == T_SAT5);
}

/* kiln__tune_specials_decide alone: a finite sample where the reference is
 * not finite, or far from it, drops the tactic; more non-finite values
 * than the reference has do not. */
TEST(specials_decide_rules) {
    float r[4] = {-INFINITY, NAN, 1, 2}, a[4] = {-INFINITY, NAN, 1, 2}, b[4] = {-65504, NAN, 1, 2},
          c[4] = {NAN, NAN, NAN, 2}, d[4] = {-INFINITY, NAN, 1.5f, 2};
    kiln_tune_sample ref = {.v = r, .n = 4, .valid = true, .max_abs = 2};
    kiln_tune_sample s[4] = {{.v = a, .n = 4, .valid = true}, {.v = b, .n = 4, .valid = true},
                             {.v = c, .n = 4, .valid = true}, {.v = d, .n = 4, .valid = true}};
    kiln_dtype dt[1] = {KILN_DTYPE_FLOAT16};
    bool ran[4] = {true, true, true, true}, keep[4];
    CHECK(kiln__tune_specials_decide(dt, s, 4, 1, ran, &ref, keep) == 2 && keep[0] && !keep[1] && keep[2] && !keep[3]);
    bool ran13[4] = {false, true, false, true};
    CHECK(kiln__tune_specials_decide(dt, s, 4, 1, ran13, &ref, keep) == -1 && keep[1] && keep[3]); /* all would go */
    ref.valid = false; /* (not a float output: not compared) */
    CHECK(kiln__tune_specials_decide(dt, s, 4, 1, ran, &ref, keep) == 0);
}

/* kiln__tune_nan_decide alone: NaN expected where the reference has it
 * (or, without one, where any tactic has it); extra NaN is no fault. */
TEST(nan_decide_rules) {
    float a[4] = {NAN, NAN, 1, 2}, b[4] = {0, NAN, 1, 2}, c[4] = {NAN, NAN, NAN, 2}, r[4] = {NAN, NAN, 1, 2};
    kiln_tune_sample s[3] = {{.v = a, .n = 4, .valid = true}, {.v = b, .n = 4, .valid = true},
                             {.v = c, .n = 4, .valid = true}};
    kiln_tune_sample ref = {.v = r, .n = 4, .valid = true};
    bool ran[3] = {true, true, true}, keep[3];
    CHECK(kiln__tune_nan_decide(s, 3, 1, ran, &ref, keep) == 1 && keep[0] && !keep[1] && keep[2]);
    CHECK(kiln__tune_nan_decide(s, 3, 1, ran, NULL, keep) == 2 && !keep[0] && !keep[1] && keep[2]);
    bool ran01[3] = {true, true, false};
    CHECK(kiln__tune_nan_decide(s, 3, 1, ran01, NULL, keep) == 1 && keep[0] && !keep[1] && keep[2]);
    float d[4] = {0, 0, 1, 2};
    kiln_tune_sample s2[2] = {{.v = b, .n = 4, .valid = true}, {.v = d, .n = 4, .valid = true}};
    CHECK(kiln__tune_nan_decide(s2, 2, 1, ran, &ref, keep) == -1 && keep[0] && keep[1]); /* all would go */
    s2[1].valid = false; /* (not a float output: not compared) */
    CHECK(kiln__tune_nan_decide(s2, 2, 1, ran, NULL, keep) == 0 && keep[0] && keep[1]);
}

int main(void) {
    RUN(the_host_reference_keeps_the_right_tactic);
    RUN(the_stats_say_where_the_time_went);
    RUN(tactics_that_agree_are_timed);
    RUN(every_tactic_wrong_fails_the_build);
    RUN(without_a_reference_families_vote_and_no_plurality_is_taken);
    RUN(the_nan_probe_drops_tactics_that_turn_nan_into_numbers);
    RUN(nan_decide_rules);
    RUN(the_probe_drops_tactics_wrong_on_infinities);
    RUN(specials_decide_rules);
    return test_summary();
}
