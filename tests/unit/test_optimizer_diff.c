/* test_optimizer_diff.c -- a differential test of the graph optimizer:
 * small random graphs built around the rewrites of merge_transpose_reshape
 * (inference Dropouts, identity Pads and Slices, a Concat of Slices as one
 * Gather, Transpose pairs), fold_layer_scale and fuse_matmul (ConvNeXt's
 * residual through a Transpose, Transpose pairs that undo each other) run
 * on the CPU with every pass on and with optimization level 0; both must
 * give the same shapes and values (within 1e-5 relative), or both fail to
 * build (NaN and infinite values in the same places). Also Conv chains
 * for fuse_conv, elementwise chains for fuse_pointwise, decomposed
 * LayerNorm / RMSNorm / GELU for fuse_transformer, GPT-2's Conv1D,
 * multi-axis Slices; NaN/inf inputs in one graph in eight (KILN_DIFF_NANS=0:
 * none, =2: every graph). A failing
 * graph is printed with its seed. KILN_DIFF_ITERS=N runs N
 * graphs instead of the default (KILN_DIFF_SEED=S starts at seed S). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test.h"

#include "graph_gen.h"

#include "backends/backend.h"
#include "ops/elementwise_impl.h"
#include "ops/fused_conv.h"
#include "ops/fused_pointwise.h"
#include "ops/fused_transformer.h"
#include "ops/nn_attrs.h"
#include "ops/reduce_attrs.h"
#include "ops/tensor_internal.h"

static kiln_status build(const kiln_model *m, int opt, const dyn *dy, kiln_engine **e) {
    return build_for(m, opt, dy, KILN_DEVICE_CPU, KILN_PRECISION_FP32, e);
}

/* Dropouts of e whose training_mode is read at run time (ratio not 0). */
static int run_time_dropouts(const kiln_engine *e) {
    int n = 0;
    for (int i = 0; e && i < e->graph->n_nodes; i++) {
        const kiln_node *d = &e->graph->nodes[i];
        if (d->op_id != KILN_OP_Dropout || d->n_in < 3 || d->in[1] < 0 || d->in[2] < 0) continue;
        const kiln_value *ratio = &e->graph->values[d->in[1]];
        bool ratio0 = (ratio->flags & KILN_VALUE_CONST) && *(const float *)ratio->data == 0.0f;
        n += !ratio0 && !(e->graph->values[d->in[2]].flags & KILN_VALUE_CONST); /* (ratio 0: a copy) */
    }
    return n;
}

/* How often the rewrites under test fired (the grammar reaches them). */
static struct {
    int gathers, fused, fewer, no_dropout, no_pad_slice, unbuilt, residual_nhwc;
    int conv, conv_bn, conv_res, conv_act[KILN_FC_ACT_COUNT];
    int pw, pw_bcast, pw_multi_out;
    int ln, rms, gelu[2];
    int flat_linear, multi_slice, special, movement;
} fired;

/* Layers of e doing GELU of form `approx` (kiln.Gelu, or its instruction in a kiln.Pointwise). */
static int gelus(const kiln_engine *e, int approx) {
    int n = 0;
    for (int i = 0; e && i < e->graph->n_nodes; i++) {
        const kiln_node *nd = &e->graph->nodes[i];
        if (nd->op_id == KILN_OP_Gelu) n += ((const kiln_gelu_attrs *)nd->attrs)->approx == approx;
        if (nd->op_id != KILN_OP_Pointwise) continue;
        const kiln_pw_attrs *pa = nd->attrs;
        for (int k = 0; k < pa->n_instr; k++) n += pa->instr[k].op == (approx ? KILN_PW_GELU_TANH : KILN_PW_GELU_ERF);
    }
    return n;
}

/* Builds g both ways and compares; false (with the graph printed) on a
 * difference. Takes g. */
static bool check_graph(kiln_graph *g, const dyn *dy, uint64_t seed, const char *what, bool must_stay) {
    static result r0, r1;
    kiln_model *m = model_of(g);
    kiln_engine *e0 = NULL, *e1 = NULL;
    kiln_status s0 = build(m, 0, dy, &e0), s1 = build(m, 1, dy, &e1);
    bool ok = true;
    char why[200] = "";
    if ((s0 == KILN_OK) != (s1 == KILN_OK)) {
        ok = false;
        snprintf(why, sizeof why, "build: unoptimized %d, optimized %d: %s", s0, s1, kiln_last_error());
    } else if (s0 == KILN_OK) {
        bool k0 = run(e0, dy, seed * 7919 + 1, &r0), k1 = run(e1, dy, seed * 7919 + 1, &r1);
        if (k0 != k1) {
            ok = false;
            snprintf(why, sizeof why, "run: unoptimized %d, optimized %d: %s", k0, k1, kiln_last_error());
        }
        double slack = -1; /* ln_slack(e1), when needed */
        for (int k = 0; ok && k0 && k < r0.n_out; k++) {
            bool same = r0.rank[k] == r1.rank[k];
            for (int d = 0; same && d < r0.rank[k]; d++) same = r0.dims[k][d] == r1.dims[k][d];
            if (!same) {
                ok = false;
                snprintf(why, sizeof why, "output %d: shapes differ", k);
                break;
            }
            int64_t n = r0.n[k] < MAXN ? r0.n[k] : MAXN;
            double err = special_rel_err(r1.y[k], r0.y[k], n);
            if (!(err <= 1e-5) && isfinite(err) && slack < 0) slack = ln_slack(e1, dy, seed * 7919 + 1);
            if (!(err <= 1e-5 + fmax(slack, 0.0))) {
                ok = false;
                int64_t w = 0; /* the worst element */
                double wd = -1;
                for (int64_t j = 0; j < n; j++) {
                    double dj = special_rel_err(&r1.y[k][j], &r0.y[k][j], 1);
                    if (!(dj <= wd)) w = j, wd = dj;
                }
                snprintf(why, sizeof why, "output %d: relative error %g > 1e-5 + %g (element %lld: %.9g optimized, %.9g not)", k,
                         err, fmax(slack, 0.0), (long long)w, r1.y[k][w], r0.y[k][w]);
            }
        }
    }
    if (ok && must_stay && e1 && run_time_dropouts(e0) > run_time_dropouts(e1)) {
        ok = false;
        snprintf(why, sizeof why, "a Dropout with a run-time training_mode was removed");
    }
    fired.unbuilt += s0 != KILN_OK && s1 != KILN_OK;
    if (e0 && e1) {
        fired.gathers += count_op(e1, KILN_OP_Gather) > count_op(e0, KILN_OP_Gather);
        fired.fused += count_op(e1, KILN_OP_FusedMatMul) > 0;
        bool nhwc = false; /* a FusedMatMul taking the residual in its own frame */
        for (int i = 0; i < e1->graph->n_nodes; i++) {
            const kiln_node *n = &e1->graph->nodes[i];
            nhwc = nhwc || (n->op_id == KILN_OP_FusedMatMul && n->n_in > 3 && n->in[3] >= 0 &&
                            strstr(e1->graph->values[n->out[0]].name, "kiln_residual"));
        }
        fired.residual_nhwc += nhwc;
        bool conv = false, res = false, act[KILN_FC_ACT_COUNT] = {false};
        for (int i = 0; i < e1->graph->n_nodes; i++) {
            const kiln_node *n = &e1->graph->nodes[i];
            if (n->op_id != KILN_OP_FusedConv) continue;
            const kiln_fused_conv_attrs *fa = n->attrs;
            conv = true;
            res = res || fa->has_residual;
            if (fa->act >= 0 && fa->act < KILN_FC_ACT_COUNT) act[fa->act] = true;
        }
        fired.conv += conv;
        fired.conv_res += res;
        for (int k = 0; k < KILN_FC_ACT_COUNT; k++) fired.conv_act[k] += act[k];
        int pw = 0, pw_out = 0;
        bool pw_bcast = false;
        for (int i = 0; i < e1->graph->n_nodes; i++) {
            const kiln_node *n = &e1->graph->nodes[i];
            if (n->op_id != KILN_OP_Pointwise) continue;
            pw++;
            pw_out += n->n_out > 1;
            for (int k = 0; k < n->n_in; k++) {
                const kiln_tinfo *a = &e1->graph->values[n->in[k]].info, *o = &e1->graph->values[n->out[0]].info;
                pw_bcast = pw_bcast || kiln__numel(a->rank, a->dims) != kiln__numel(o->rank, o->dims);
            }
        }
        fired.pw += pw > 0;
        fired.pw_bcast += pw_bcast;
        fired.pw_multi_out += pw_out > 0;
        fired.ln += count_op(e1, KILN_OP_LayerNormalization) > count_op(e0, KILN_OP_LayerNormalization);
        fired.rms += count_op(e1, KILN_OP_RMSNormalization) > count_op(e0, KILN_OP_RMSNormalization);
        for (int k = 0; k < 2; k++) fired.gelu[k] += gelus(e1, k) > gelus(e0, k);
        for (int i = 0; i < e1->graph->n_nodes; i++) /* GPT-2's Conv1D: the Reshapes folded into the layer */
            if (e1->graph->nodes[i].op_id == KILN_OP_FusedMatMul && strstr(e1->graph->nodes[i].name, "flat")) {
                fired.flat_linear++;
                break;
            }
        fired.special += dy->special;
        for (int i = 0; i < e1->graph->n_nodes; i++) /* merge_movement: a chain as one Gather of rows */
            if (e1->graph->nodes[i].op_id == KILN_OP_Gather && strstr(e1->graph->nodes[i].name, "/kiln_rows")) {
                fired.movement++;
                break;
            }
        fired.conv_bn += count_op(e1, KILN_OP_BatchNormalization) < count_op(e0, KILN_OP_BatchNormalization);
        fired.fewer += e1->graph->n_nodes < e0->graph->n_nodes;
        fired.no_dropout += count_op(e1, KILN_OP_Dropout) < count_op(e0, KILN_OP_Dropout);
        fired.no_pad_slice += count_op(e1, KILN_OP_Pad) + count_op(e1, KILN_OP_Slice) <
                              count_op(e0, KILN_OP_Pad) + count_op(e0, KILN_OP_Slice);
    }
    if (!ok) {
        fprintf(stderr, "  FAIL %s, seed %llu%s: %s\n", what, (unsigned long long)seed,
                dy->on ? " (first input dims symbolic)" : "", why);
        print_graph(m->graph);
        if (e1) {
            fprintf(stderr, "  optimized plan:\n");
            print_graph(e1->graph);
        }
    }
    kiln_engine_free(e0);
    kiln_engine_free(e1);
    kiln_model_free(m);
    return ok;
}


TEST(test_random_graphs) {
    int iters = (int)env_count("KILN_DIFF_ITERS", 5000, 1, INT32_MAX);
    uint64_t seed0 = (uint64_t)env_count("KILN_DIFF_SEED", 1, 0, INT64_MAX);
    /* NaN and infinite inputs in one graph in eight (KILN_DIFF_NANS=0: in
     * none, =2: in every graph): a fused Relu epilogue (FusedMatMul,
     * FusedConv) made NaN 0 where Relu keeps it (seeds 237, 2765, 3317) */
    int nans = (int)env_count("KILN_DIFF_NANS", 1, 0, 2);
    int built = 0, skipped = 0, failed = 0, dynamic = 0;
    for (int i = 0; i < iters && failed < 5; i++) {
        uint64_t seed = seed0 + (uint64_t)i;
        kiln_graph *g;
        CHECK_OK(kiln__graph_create(&g));
        bool must_stay = false;
        if (gen_graph(g, seed, &must_stay, &fired.multi_slice) != 0) {
            kiln__graph_free(g);
            skipped++;
            continue;
        }
        /* one graph in four: the first dim of every float input one symbol
         * (a batch profile), where the grammar keeps that valid */
        dyn dy = {.on = seed % 4 == 3, .special = nans > 1 || (nans == 1 && seed % 8 == 5)};
        if (dy.on) {
            if (!make_batch_symbolic(g, &dy, false)) {
                kiln__graph_free(g);
                skipped++;
                continue;
            }
            dynamic++;
        }
        built++;
        if (!check_graph(g, &dy, seed, "random graph", must_stay)) failed++;
    }
    fprintf(stderr,
            "  %d graphs compared (%d with a symbolic batch), %d invalid ones skipped, %d refused by both builds; optimized plans with fewer layers %d, a Gather "
            "for Slices %d, a FusedMatMul %d, a Dropout gone %d, a Pad/Slice gone %d, a residual through a Transpose %d\n"
            "  fuse_conv: a FusedConv %d, a BatchNormalization folded %d, with a residual %d; activations:",
            built, dynamic, skipped, fired.unbuilt, fired.fewer, fired.gathers, fired.fused, fired.no_dropout, fired.no_pad_slice, fired.residual_nhwc,
            fired.conv, fired.conv_bn, fired.conv_res);
    for (int k = 0; k < KILN_FC_ACT_COUNT; k++) fprintf(stderr, " %s %d", kiln__fc_act_name(k), fired.conv_act[k]);
    fprintf(stderr, "\n  fuse_pointwise: a Pointwise %d, with a broadcast input %d, with several outputs %d\n", fired.pw,
            fired.pw_bcast, fired.pw_multi_out);
    fprintf(stderr, "  fuse_transformer: a LayerNormalization %d, an RMSNormalization %d, a GELU (erf) %d, (tanh) %d\n",
            fired.ln, fired.rms, fired.gelu[0], fired.gelu[1]);
    fprintf(stderr, "  GPT-2's Conv1D (Reshape, Gemm, Reshape) as one FusedMatMul %d, multi-axis Slices %d, graphs run on NaN/inf inputs %d, "
            "a chain of data movement as one Gather %d\n",
            fired.flat_linear, fired.multi_slice, fired.special, fired.movement);
    CHECK(failed == 0);
    CHECK(built >= iters / 2 && fired.unbuilt <= built / 10);
    if (iters >= 2000) { /* every family reached the rewrite it is for */
        CHECK(fired.gathers && fired.fused && fired.no_dropout && fired.no_pad_slice && fired.residual_nhwc);
        CHECK(fired.conv && fired.conv_bn && fired.conv_res);
        CHECK(fired.pw && fired.pw_bcast && fired.pw_multi_out);
        CHECK(fired.ln && fired.rms && fired.gelu[0] && fired.gelu[1]);
        CHECK(fired.flat_linear && fired.multi_slice && (fired.special || !nans) && fired.movement);
        for (int k = 0; k < KILN_FC_ACT_COUNT; k++) CHECK(fired.conv_act[k] > 0);
    }
}

/* ---- regressions found by the random graphs ------------------------------- */

/* Gemm(a, W, beta 0) + Add(b): fuse_matmul took b as the layer's bias and
 * scaled it by the Gemm's beta (0), which is for the Gemm's own C alone
 * (seeds 82, 167, 259, 442). With C present and beta 2 the Add's bias must
 * stay unscaled too (it is a residual-free second bias then: C is the
 * layer's bias and the Add stays). */
TEST(test_gemm_beta_bias_add) {
    for (int with_c = 0; with_c < 2; with_c++) {
        kiln_graph *g;
        CHECK_OK(kiln__graph_create(&g));
        gb_rng_state = 5;
        int64_t ad[2] = {3, 4}, wd[2] = {4, 5}, bd[1] = {5};
        int a = add_input(g, "a", 2, ad), w = add_const(g, "W", 2, wd, -1, 1);
        int in[3] = {a, w, with_c ? add_const(g, "C", 1, bd, -1, 1) : -1};
        kiln_gemm_attrs ga = {.alpha = 1.0f, .beta = with_c ? 2.0f : 0.0f};
        int y = add_node(g, KILN_OP_Gemm, "gemm", with_c ? 3 : 2, in, &ga);
        mark_output(g, add_binary(g, KILN_OP_Add, "badd", y, add_const(g, "b", 1, bd, 0.5f, 1.0f)));
        CHECK(check_graph(g, &(dyn){.on = false}, 1, with_c ? "Gemm beta 2 with C + Add" : "Gemm beta 0 + Add", false));
    }
}

/* Gemm(a [batch, 4], W, C [2, 1], beta 0) over a batch profile 1..3 (opt 2):
 * C fits batch 2 only. The unfused plan refuses a run at batch 1 (C cannot
 * be broadcast to 1x4); fuse_matmul dropped C (not read at beta 0) and the
 * optimized plans ran (test_cuda_diff, seed 3015 of its first grammar).
 * Now such a Gemm stays unfused, and both refuse batch 1 and run batch 2. */
TEST(test_gemm_beta0_c_rows) {
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(&g));
    gb_rng_state = 9;
    int sym;
    CHECK_OK(kiln__graph_add_symbol(g, "batch", &sym));
    int64_t ad[2] = {KILN_DIM_SYM(sym), 3}, wd[2] = {3, 4}, cd[2] = {2, 1};
    int a = add_input(g, "a", 2, ad);
    int in[3] = {a, add_const(g, "W", 2, wd, -1, 1), add_const(g, "C", 2, cd, -1, 1)};
    kiln_gemm_attrs ga = {.alpha = 1.0f, .beta = 0.0f};
    mark_output(g, add_node(g, KILN_OP_Gemm, "gemm", 3, in, &ga));
    kiln_model *m = model_of(g);
    static result r0, r1;
    for (int opt = 0; opt < 2; opt++) {
        kiln_engine *e = NULL;
        CHECK_OK(build(m, opt, &(dyn){.on = true, .d0 = {2}}, &e));
        CHECK(e && run(e, &(dyn){.on = true, .d0 = {2}}, 3, opt ? &r1 : &r0));
        CHECK(e && !run(e, &(dyn){.on = true, .d0 = {1}}, 3, &r1));
        kiln_engine_free(e);
    }
    CHECK(r0.n[0] == 8 && !memcmp(r0.y[0], r1.y[0], 8 * sizeof(float)));
    kiln_model_free(m);
}

/* Conv -> BatchNormalization after 0..40 other values: fold_bn passed
 * the weights' dims from g->values to kiln__graph_add_const, which may
 * move g->values before reading them (a use after free under ASan, found
 * by the random graphs; a wrong shape or a crash where the old block was
 * reused). One of the counts makes the values array grow right there. */
TEST(test_fold_bn_values_grow) {
    for (int extra = 0; extra <= 40; extra++) {
        kiln_graph *g;
        CHECK_OK(kiln__graph_create(&g));
        gb_rng_state = 7;
        int64_t xd[4] = {1, 2, 4, 4};
        int x = add_input(g, "x", 4, xd);
        char name[32];
        for (int i = 0; i < extra; i++) {
            snprintf(name, sizeof name, "neg%d", i);
            mark_output(g, add_unary(g, KILN_OP_Neg, name, x, NULL));
        }
        mark_output(g, add_bnorm(g, "bn", add_conv(g, "conv", x, 2, 3, 3, 1, 1, 1, 1), 3));
        snprintf(name, sizeof name, "Conv + BN after %d values", extra);
        CHECK(check_graph(g, &(dyn){.on = false}, 1, name, false));
    }
}

/* merge_movement (fuse_movement.c) on the forms it is for: PatchMerging's
 * four strided Slices of [B, H, W, C] concatenated on C (one Gather of rows
 * of C, the table one output image row's: 2 x H/2 blocks mapped block to
 * block), the same with a Slice read elsewhere too (then it all stays: the
 * Concat would read two values, x and that Slice's output),
 * and a Transpose + strided Slice moving single elements: one Gather when
 * its table is small, left as it is when the table would be as large as
 * the data (6144 rows of 4 bytes). */
TEST(test_movement_forms) {
    for (int form = 0; form < 2; form++) {
        kiln_graph *g;
        CHECK_OK(kiln__graph_create(&g));
        gb_rng_state = 11;
        int64_t xd[4] = {2, 8, 8, 16};
        int x = add_input(g, "x", 4, xd), parts[4];
        for (int k = 0; k < 4; k++) {
            int64_t st[2] = {k & 1, k >> 1}, en[2] = {INT64_MAX, INT64_MAX}, ax[2] = {1, 2}, sp[2] = {2, 2};
            char nm[4][16];
            for (int j = 0; j < 4; j++) snprintf(nm[j], sizeof nm[j], "%c%d", "seap"[j], k);
            int in[5] = {x, add_i64(g, nm[0], 2, st), add_i64(g, nm[1], 2, en), add_i64(g, nm[2], 2, ax),
                         add_i64(g, nm[3], 2, sp)};
            snprintf(nm[0], sizeof nm[0], "slice%d", k);
            parts[k] = add_node(g, KILN_OP_Slice, nm[0], 5, in, NULL);
        }
        if (form) mark_output(g, parts[2]);
        kiln_axis_attrs ca = {.axis = -1};
        mark_output(g, add_node(g, KILN_OP_Concat, "cat", 4, parts, &ca));
        kiln_graph *g2 = NULL; /* (the model owns its graph: check_graph takes g) */
        CHECK_OK(kiln__graph_clone(g, &g2));
        kiln_model *m = model_of(g2);
        kiln_engine *e = NULL;
        CHECK_OK(build(m, 1, &(dyn){.on = false}, &e));
        CHECK(e && count_op(e, KILN_OP_Gather) == !form && count_op(e, KILN_OP_Concat) == form &&
              count_op(e, KILN_OP_Slice) == 4 * form);
        for (int i = 0; e && i < e->graph->n_nodes; i++) {
            const kiln_node *n = &e->graph->nodes[i];
            const kiln_tinfo *t = &e->graph->values[n->n_in > 1 ? n->in[1] : n->in[0]].info;
            if (n->op_id == KILN_OP_Gather) CHECK(t->rank == 1 && t->dims[0] == 16); /* 4 x 4 rows of 16 */
        }
        kiln_engine_free(e);
        kiln_model_free(m);
        CHECK(check_graph(g, &(dyn){.on = false}, 1, form ? "PatchMerging, a Slice read elsewhere" : "PatchMerging",
                          false));
    }
    for (int big = 0; big < 2; big++) {
        kiln_graph *g;
        CHECK_OK(kiln__graph_create(&g));
        int64_t xd[2] = {big ? 128 : 8, 96};
        int x = add_input(g, "x", 2, xd);
        kiln_transpose_attrs ta = {.n_perm = 2, .perm = {1, 0}};
        int t = add_unary(g, KILN_OP_Transpose, "tr", x, &ta);
        int64_t st = 0, en = INT64_MAX, ax = 1, sp = 2;
        int in[5] = {t, add_i64(g, "st", 1, &st), add_i64(g, "en", 1, &en), add_i64(g, "ax", 1, &ax),
                     add_i64(g, "sp", 1, &sp)};
        mark_output(g, add_node(g, KILN_OP_Slice, "slice", 5, in, NULL));
        kiln_graph *g2 = NULL;
        CHECK_OK(kiln__graph_clone(g, &g2));
        kiln_model *m = model_of(g2);
        kiln_engine *e = NULL;
        CHECK_OK(build(m, 1, &(dyn){.on = false}, &e));
        CHECK(e && count_op(e, KILN_OP_Gather) == !big && count_op(e, KILN_OP_Transpose) == big &&
              count_op(e, KILN_OP_Slice) == big);
        kiln_engine_free(e);
        kiln_model_free(m);
        if (!big) CHECK(check_graph(g, &(dyn){.on = false}, 1, "Transpose + Slice, small", false));
        else kiln__graph_free(g);
    }
}

/* torch.roll of an axis of L elements, Concat(x[:, s:], x[:, :s]), is one
 * Gather with an int64 table of L indices, a new constant in the engine.
 * The table was bounded at 2^24 entries: a 2 kB model declaring an input
 * [1, 2^24] gave a 128 MiB engine. Up to 2^16 (512 KiB) it is a Gather;
 * beyond, the Slices and the Concat stay (issue 20). */
TEST(test_concat_slices_index_bound) {
    for (int64_t L = ((int64_t)1 << 16); L <= ((int64_t)1 << 16) + 1; L++) {
        kiln_graph *g;
        CHECK_OK(kiln__graph_create(&g));
        gen G = {.g = g};
        int64_t xd[2] = {1, L};
        int x = add_input(g, "x", 2, xd);
        int p[2] = {slice(&G, x, 3, INT64_MAX, 1, 1, 1), slice(&G, x, 0, 3, 1, 1, 1)};
        kiln_axis_attrs aa = {.axis = 1};
        mark_output(g, add_node(g, KILN_OP_Concat, "roll", 2, p, &aa));
        kiln_model *m = model_of(g);
        kiln_engine *e = NULL;
        CHECK_OK(build(m, 1, &(dyn){.on = false}, &e));
        int64_t bytes = 0;
        for (int v = 0; e && v < e->graph->n_values; v++) {
            const kiln_value *c = &e->graph->values[v];
            if ((c->flags & KILN_VALUE_CONST) && c->info.rank == 1) bytes += c->info.dims[0] * 8;
        }
        bool big = L > ((int64_t)1 << 16);
        CHECK(e && count_op(e, KILN_OP_Gather) == (big ? 0 : 1) && count_op(e, KILN_OP_Concat) == (big ? 1 : 0));
        CHECK(bytes <= 8 * ((int64_t)1 << 16) + 64);
        /* the roll's values, both ways */
        kiln_context *c = NULL;
        float *xin = malloc(sizeof(float) * (size_t)L);
        for (int64_t i = 0; xin && i < L; i++) xin[i] = (float)i;
        CHECK_OK(e ? kiln_context_create(e, &c) : KILN_ERR_INVALID_ARGUMENT);
        if (c && xin) {
            CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, xd, xin));
            CHECK_OK(kiln_context_run(c));
            const void *data = NULL;
            int rank = 0;
            int64_t yd[8];
            CHECK_OK(kiln_context_get_output(c, "roll_out", NULL, &rank, yd, &data));
            const float *y = data;
            bool same = y && rank == 2 && yd[1] == L;
            for (int64_t i = 0; same && i < L; i++) same = y[i] == (float)((i + 3) % L);
            CHECK(same);
        }
        kiln_context_free(c);
        free(xin);
        kiln_engine_free(e);
        kiln_model_free(m);
    }
}

/* ---- the optimizer's work grows with the graph linearly (issue 20) -------- */

/* The work (kiln__graph_link_visits) of optimizing for the CPU a graph of n
 * layers: form 0, n MatMuls reading one input and one weight, all summed
 * (fuse_matmul: one FusedMatMul each); form 1, a chain of n Conv +
 * BatchNormalization + Relu sharing one weight (fold_bn: a constant named
 * after it each, then fuse_conv); form 2, n MatMuls each a graph output.
 * Form 3: a chain of n Relu + Transpose + Reshape + Transpose (merge_movement:
 * one Gather of rows each, its nodes placed where the chain was).
 * Form 4 (CUDA fp16 plans): a chain of n pairs of Attentions, each pair
 * reading a bool cond of its own (share_attention_mask: both read one mask
 * made from it).
 * Relinking the whole graph after each rewrite, a scan of every node for a
 * value's reader, or of every output to tell whether a value is one, or
 * moving every node to place a rewrite's new ones, made it n^2. */
static uint64_t optimize_work(int form, int n) {
    kiln_graph *g = NULL;
    if (kiln__graph_create(&g) != KILN_OK) abort();
    int64_t xd[4] = {4, 4}, cd[4] = {1, 2, 2, 2}, wd[4] = {2, 2, 1, 1};
    int64_t md[2] = {6, 4}, ad[4] = {1, 2, 8, 8};
    int x = form == 4 ? add_input(g, "x", 4, ad) : add_input(g, "x", form == 1 ? 4 : 2, form == 1 ? cd : form == 3 ? md : xd);
    int w = form == 4 ? add_scalar(g, "w", 0.0f) : add_const(g, "w", form == 1 ? 4 : 2, form == 1 ? wd : xd, -1.0f, 1.0f);
    int *ys = malloc(sizeof(int) * (size_t)n), cur = x;
    if (!ys) abort();
    kiln_conv_attrs ca;
    memset(&ca, 0, sizeof ca);
    ca.group = 1;
    char name[24];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "l%d", i);
        if (form == 4) {
            kiln_attention_attrs aa = {.num_heads = 2, .q_layout = KILN_ATTN_BHSD, .k_layout = KILN_ATTN_BHSD,
                                       .v_layout = KILN_ATTN_BHSD, .out_layout = KILN_ATTN_BHSD, .scale = 0.35f,
                                       .cond_mode = KILN_ATTN_COND_ADD, .cond_fill_if = 1, .fill = -INFINITY};
            snprintf(name, sizeof name, "c%d", i);
            int c = add_binary(g, KILN_OP_Less, name, cur, w);
            snprintf(name, sizeof name, "r%d", i);
            int v2 = add_unary(g, KILN_OP_Relu, name, cur, NULL);
            snprintf(name, sizeof name, "a%d", i);
            int a1 = add_node(g, KILN_OP_Attention, name, 5, (int[]){cur, cur, cur, -1, c}, &aa);
            snprintf(name, sizeof name, "b%d", i);
            int a2 = add_node(g, KILN_OP_Attention, name, 5, (int[]){cur, cur, v2, -1, c}, &aa);
            snprintf(name, sizeof name, "s%d", i);
            cur = add_binary(g, KILN_OP_Add, name, a1, a2);
            continue;
        }
        if (form == 3) { /* [6,4] -> [4,6] -> [6,4] -> [4,6] (then back): moved twice */
            kiln_transpose_attrs ta = {.n_perm = 2, .perm = {1, 0}};
            int64_t sh[2] = {i & 1 ? 4 : 6, i & 1 ? 6 : 4};
            snprintf(name, sizeof name, "r%d", i);
            cur = add_unary(g, KILN_OP_Relu, name, cur, NULL);
            snprintf(name, sizeof name, "t%d", i);
            cur = add_unary(g, KILN_OP_Transpose, name, cur, &ta);
            snprintf(name, sizeof name, "s%d", i);
            int rin[2] = {cur, add_i64(g, name, 2, sh)};
            snprintf(name, sizeof name, "v%d", i);
            cur = add_node(g, KILN_OP_Reshape, name, 2, rin, &(kiln_reshape_attrs){.allowzero = 0});
            snprintf(name, sizeof name, "u%d", i);
            cur = add_unary(g, KILN_OP_Transpose, name, cur, &ta);
            continue;
        }
        if (form != 1) {
            ys[i] = add_binary(g, KILN_OP_MatMul, name, x, w);
            if (form == 2) mark_output(g, ys[i]);
            continue;
        }
        cur = add_node(g, KILN_OP_Conv, name, 2, (int[]){cur, w}, &ca);
        snprintf(name, sizeof name, "bn%d", i);
        cur = add_bnorm(g, name, cur, 2);
        snprintf(name, sizeof name, "relu%d", i);
        cur = add_unary(g, KILN_OP_Relu, name, cur, NULL);
    }
    if (form != 2) mark_output(g, form ? cur : add_node(g, KILN_OP_Sum, "sum", n, ys, NULL));
    int want = form == 1 ? KILN_OP_FusedConv : form == 3 ? KILN_OP_Gather : form == 4 ? KILN_OP_Attention : KILN_OP_FusedMatMul;
    free(ys);
    kiln_optimize_opts oo = {.device = form == 4 ? KILN_DEVICE_CUDA : KILN_DEVICE_CPU,
                             .precision = form == 4 ? KILN_PRECISION_FP16 : KILN_PRECISION_FP32};
    uint64_t work = UINT64_MAX;
    int fused = 0;
    if (kiln__graph_infer(g) == KILN_OK && kiln__pass_optimize(g, &oo) == KILN_OK) {
        work = kiln__graph_link_visits(g);
        for (int i = 0; i < g->n_nodes; i++)
            fused += !g->nodes[i].dead && g->nodes[i].op_id == want &&
                     (form != 4 || (g->nodes[i].in[3] >= 0 && (g->nodes[i].n_in < 5 || g->nodes[i].in[4] < 0)));
    }
    kiln__graph_free(g);
    if (fused != (form == 4 ? 2 * n : n)) printf("  form %d: %d layers made of %d\n", form, fused, n);
    return fused == (form == 4 ? 2 * n : n) ? work : UINT64_MAX;
}

static void test_rewrites_linear(void) {
    for (int form = 0; form < 5; form++) {
        if (form == 4 && !kiln__backend_for(KILN_DEVICE_CUDA)) continue; /* (a build without CUDA) */
        uint64_t w2 = optimize_work(form, 2000), w8 = optimize_work(form, 8000);
        printf("  form %d: work %llu for 2,000 layers, %llu for 8,000\n", form, (unsigned long long)w2,
               (unsigned long long)w8);
        /* linear: 4 times as much (n^2: 16 times); and a few dozen visits a node */
        CHECK(w2 != UINT64_MAX && w8 != UINT64_MAX);
        CHECK(w8 < 5 * w2);
        CHECK(w8 < (uint64_t)8000 * (form == 4 ? 200 : 100)); /* (form 4: 7 nodes a layer) */
    }
}

int main(void) {
    RUN(test_gemm_beta_bias_add);
    RUN(test_gemm_beta0_c_rows);
    RUN(test_fold_bn_values_grow);
    RUN(test_movement_forms);
    RUN(test_concat_slices_index_bound);
    RUN(test_random_graphs);
    RUN(test_rewrites_linear);
    return test_summary();
}
