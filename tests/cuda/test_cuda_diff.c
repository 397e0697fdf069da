/* test_cuda_diff.c -- a differential test of CUDA plans: small random graphs
 * (the grammar of tests/unit/graph_gen.h, shared with test_optimizer_diff,
 * plus families around the CUDA backend's own rewrites: squeeze-excite
 * gates for fuse_se, attention blocks in the exporters' forms for
 * kiln.Attention and kiln's attention kernels, convolutions that are one
 * GEMM (1x1, patchify) before pooling, shapes computed at run time on the
 * host and read by device layers, a transformer block's residual +
 * LayerNorm + MLP) built for the CUDA device with every
 * pass on, in fp32, fp16 and bf16, and compared with kiln's CPU fp32 plan at
 * optimization level 0 on the same inputs: the same shapes, values within
 * tolerance, NaN and infinite values in the same places (NaN/inf inputs in
 * one graph in eight), or both builds refuse with an error.
 *
 * Built by tests/cuda/emu/run.sh against the host emulation of the CUDA
 * runtime, cuBLASLt and kiln's kernel launchers (tests/cuda/emu), so it runs
 * in CI without a GPU; CUDA builds also register it as ctest `cuda_diff`
 * (tests/cuda/tests.cmake), which on a machine with a GPU compares the real
 * kernels (without one it prints "no CUDA device: skipping").
 *
 * fp32: within 1e-5 of the largest |value| (at least 1), plus the
 * LayerNormalization slack of graph_gen.h (ln_slack) and the fp16 distance
 * below scaled to fp32 (check_cuda_graph). fp16: the tolerance comes from
 * fp16's rounding on this very graph: the CPU's fp32 plan runs on three
 * copies of the graph whose inputs, constants and every float32 node output
 * are rounded to fp16 (a Cast to float16 and back after each; in two of
 * them then scaled by 1 + 2^-11 or 1 - 2^-11, every error in one direction,
 * so that they cannot cancel by luck); the largest distance d of their
 * results from the fp32 one is what rounding every value to fp16 (unit
 * roundoff 2^-11) does to this graph. The engine rounds at fewer points
 * (fused layers compute in fp32 inside) but at other ones, so it may be off
 * by 4 d, plus 4 fp16 ulps (2^-8) of the largest |value| for rounding ties
 * that go the other way. Graphs whose values jump under
 * rounding (comparisons, Where, Floor, Sign, casts to integers or bool) or
 * whose NaN/inf placement the fp16 copy changes (values beyond fp16's
 * range, a rounding that crosses a domain edge) are not compared in fp16.
 *
 * A failing graph is printed with its seed, precision and both plans.
 * KILN_DIFF_ITERS=N runs N graphs (default 200: about 3 s under ASan), KILN_DIFF_SEED=S starts at
 * seed S, KILN_DIFF_NANS=0/1/2 as in test_optimizer_diff, KILN_DIFF_FP16=0
 * skips the fp16 engines, KILN_DIFF_BF16=0 the bf16 ones, KILN_DIFF_MAX_FAILS=N stops after N failures
 * (default 5), KILN_DIFF_VERBOSE=1 prints each seed first. test_cuda_pinned_seeds
 * checks the seeds that failed once (pinned_seeds) on every run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test.h"

#include "unit/graph_gen.h"

#include "backends/backend.h"
#include "ops/fused_conv.h"
#include "ops/fused_pointwise.h"
#include "ops/fused_transformer.h"

/* ---- the CUDA families -------------------------------------------------------- */

static int add_i64s(gen *G, const char *what, int n, const int64_t *x) { return add_i64(G->g, nm(G, what), n, x); }

/* A 1x1 (or k x k, stride s, no pads) Conv C -> M, bias or not. */
static int conv_k(gen *G, int x, int64_t C, int64_t M, int k, int s, bool bias) {
    kiln_conv_attrs ca;
    memset(&ca, 0, sizeof ca);
    ca.group = 1;
    ca.n_strides = 2;
    ca.strides[0] = ca.strides[1] = s;
    int64_t wd[4] = {M, C, k, k}, bd[1] = {M};
    float sc = 1.0f / sqrtf((float)(C * k * k));
    int in[3] = {x, add_const(G->g, nm(G, "W"), 4, wd, -sc, sc), -1}, n = 2;
    if (bias) in[n++] = add_const(G->g, nm(G, "B"), 1, bd, -0.5f, 0.5f);
    return add_node(G->g, KILN_OP_Conv, nm(G, "conv"), n, in, &ca);
}

/* One of the activations fuse_conv folds (or none). */
static int conv_act(gen *G, int y) {
    kiln_graph *g = G->g;
    kiln_ew_act_attrs aa = {.alpha = 0.2f, .beta = 0.5f};
    switch (ri(6)) {
    case 0: return add_unary(g, KILN_OP_Relu, nm(G, "relu"), y, NULL);
    case 1: return add_unary(g, KILN_OP_HardSwish, nm(G, "hsw"), y, NULL);
    case 2: return add_binary(g, KILN_OP_Mul, nm(G, "silu"), y, add_unary(g, KILN_OP_Sigmoid, nm(G, "sig"), y, NULL));
    case 3: return add_unary(g, KILN_OP_HardSigmoid, nm(G, "hsig"), y, &aa);
    case 4: return add_unary(g, KILN_OP_Sigmoid, nm(G, "sig"), y, NULL);
    default: return y;
    }
}

/* The squeeze-excite gate (fuse_se): [conv ->] GlobalAveragePool -> 1x1
 * Conv C -> R + ReLU/SiLU -> 1x1 Conv R -> C + HardSigmoid/Sigmoid -> Mul
 * with x (either order) [-> residual Add]; near misses: the pooled or
 * hidden value read elsewhere, a second layer of other than C channels
 * (broadcast by the Mul), padded or grouped 1x1 layers. */
static int gen_se(gen *G) {
    kiln_graph *g = G->g;
    int64_t N = 1 + ri(3), C = 1 + ri(12), H = 1 + ri(5), W = ri(3) ? H : 1 + ri(5), R = 1 + ri(C + 1);
    int64_t xd[4] = {N, C, H, W};
    int x = add_input(g, nm(G, "x"), 4, xd);
    if (ri(3) == 0) x = conv_act(G, add_conv(g, nm(G, "conv"), x, C, C, 3, 1, 1, 1, 1));
    int p = add_unary(g, KILN_OP_GlobalAveragePool, nm(G, "gap"), x, NULL);
    if (ri(10) == 0) maybe_leak(G, p);
    int h = conv_k(G, p, C, R, 1, 1, ri(4) != 0);
    h = ri(2) ? add_unary(g, KILN_OP_Relu, nm(G, "relu"), h, NULL)
              : add_binary(g, KILN_OP_Mul, nm(G, "silu"), h, add_unary(g, KILN_OP_Sigmoid, nm(G, "sig"), h, NULL));
    if (ri(10) == 0) maybe_leak(G, h);
    int64_t C2 = ri(12) == 0 ? 1 : C;
    int s = conv_k(G, h, R, C2, 1, 1, ri(4) != 0);
    kiln_ew_act_attrs aa = {.alpha = 1.0f / 6.0f, .beta = 0.5f};
    s = ri(2) ? add_unary(g, KILN_OP_HardSigmoid, nm(G, "hsig"), s, &aa) : add_unary(g, KILN_OP_Sigmoid, nm(G, "sig"), s, NULL);
    int y = either(G, KILN_OP_Mul, "gate", x, s);
    if (ri(3) == 0) y = add_binary(g, KILN_OP_Add, nm(G, "res"), y, x);
    return y;
}

/* An attention block as the exporters write it: Q [B, H, Sq, D] (or BSHD
 * through a Transpose), K as [B, H, Sk, D] through a Transpose of its last
 * two dims or given as [B, H, D, Sk], scores scaled (Div by sqrt(D), Mul by
 * its inverse, or both Q and K scaled by D^-1/4), a mask (none, additive
 * [1|B, 1|H, Sq|1, Sk], masked_fill's Where(cond, scores, -inf|-1e9)),
 * Softmax over the last axis, MatMul by V, then maybe Transpose(0,2,1,3) +
 * Reshape [B, Sq, H*D]; near misses: Softmax not over the last axis, a
 * scale that is an input. */
static int gen_attention(gen *G) {
    kiln_graph *g = G->g;
    int64_t B = 1 + ri(2), H = 1 + ri(3), Sq = 1 + ri(6), Sk = ri(3) ? Sq : 1 + ri(6), D = 1 + ri(8);
    if (ri(3) == 0) { /* the tensor-core kernels' sizes: D of 16 to 64, longer rows */
        B = H = 1;
        D = (int64_t)16 << ri(3);
        Sq = 1 + ri(40), Sk = ri(2) ? Sq : 1 + ri(40);
    }
    bool bshd = ri(3) == 0;
    int32_t p0213[4] = {0, 2, 1, 3};
    int q, k, v;
    if (bshd) {
        int64_t qd[4] = {B, Sq, H, D}, kd[4] = {B, Sk, H, D};
        q = transpose(G, add_input(g, nm(G, "q"), 4, qd), p0213, 4);
        k = transpose(G, add_input(g, nm(G, "k"), 4, kd), p0213, 4);
        v = transpose(G, add_input(g, nm(G, "v"), 4, kd), p0213, 4);
    } else {
        int64_t qd[4] = {B, H, Sq, D}, kd[4] = {B, H, Sk, D};
        q = add_input(g, nm(G, "q"), 4, qd);
        k = add_input(g, nm(G, "k"), 4, kd);
        v = add_input(g, nm(G, "v"), 4, kd);
    }
    int kt;
    if (!bshd && ri(4) == 0) { /* K given transposed */
        int64_t kd[4] = {B, H, D, Sk};
        kt = add_input(g, nm(G, "kt"), 4, kd);
    } else {
        int32_t p[4] = {0, 1, 3, 2};
        kt = transpose(G, k, p, 4);
    }
    float scale = 1.0f / sqrtf((float)D);
    int form = ri(4), s;
    if (form == 2) { /* Q and K each scaled by D^-1/4 */
        float r = sqrtf(scale);
        s = add_binary(g, KILN_OP_MatMul, nm(G, "qk"), either(G, KILN_OP_Mul, "qs", q, add_scalar(g, nm(G, "c"), r)),
                       either(G, KILN_OP_Mul, "ks", kt, add_scalar(g, nm(G, "c"), r)));
    } else {
        s = add_binary(g, KILN_OP_MatMul, nm(G, "qk"), q, kt);
        if (form == 0) s = add_binary(g, KILN_OP_Div, nm(G, "scale"), s, add_scalar(g, nm(G, "c"), sqrtf((float)D)));
        else if (form == 1) s = either(G, KILN_OP_Mul, "scale", s, add_scalar(g, nm(G, "c"), scale));
        else if (ri(4) == 0) s = either(G, KILN_OP_Mul, "scale", s, add_input(g, nm(G, "c"), 0, (int64_t[]){1})); /* not a constant */
    }
    switch (ri(4)) {
    case 0: { /* additive */
        int64_t md[4] = {ri(2) ? B : 1, ri(3) == 0 ? H : 1, ri(2) ? Sq : 1, Sk};
        s = either(G, KILN_OP_Add, "mask", s, ri(2) ? add_const(g, nm(G, "m"), 4, md, -3, 0) : add_input(g, nm(G, "m"), 4, md));
        break;
    }
    case 1: { /* masked_fill: Where(cond, fill, s) from a comparison of an input */
        int64_t md[4] = {ri(2) ? B : 1, 1, ri(2) ? Sq : 1, Sk};
        int cond = add_binary(g, KILN_OP_Greater, nm(G, "cmp"), add_input(g, nm(G, "mk"), 4, md), add_scalar(g, nm(G, "z"), 1.5f));
        int fill = add_scalar(g, nm(G, "fill"), ri(2) ? -INFINITY : -1e9f);
        int in[3] = {cond, fill, s};
        s = add_node(g, KILN_OP_Where, nm(G, "where"), 3, in, NULL);
        break;
    }
    default: break;
    }
    kiln_softmax_attrs sa = {.axis = ri(10) ? (ri(2) ? -1 : 3) : 2};
    int a = add_unary(g, KILN_OP_Softmax, nm(G, "softmax"), s, &sa);
    if (ri(10) == 0) maybe_leak(G, a);
    int o = add_binary(g, KILN_OP_MatMul, nm(G, "av"), a, v);
    if (ri(2)) {
        o = transpose(G, o, p0213, 4);
        int64_t rd[3] = {B, Sq, H * D};
        if (ri(3) == 0) rd[0] = 0, rd[2] = -1;
        kiln_reshape_attrs ra = {0};
        o = add_node(g, KILN_OP_Reshape, nm(G, "merge"), 2, (int[]){o, add_i64s(G, "shape", 3, rd)}, &ra);
    }
    return o;
}

/* Convolutions that are one GEMM (1x1, or a patchify k x k stride k),
 * then an activation and a pool: MaxPool / AveragePool (kernel 2 or 3,
 * stride 1 or 2, pads, ceil_mode, count_include_pad), GlobalAveragePool,
 * GlobalMaxPool or none. */
static int gen_conv_pool(gen *G) {
    kiln_graph *g = G->g;
    int64_t N = 1 + ri(2), C = 1 + ri(8), M = 1 + ri(8), k = ri(2) ? 1 : 2 + ri(3);
    int64_t H = k * (1 + ri(4)) + (ri(3) == 0 ? ri((int)k) : 0), W = k * (1 + ri(4));
    int64_t xd[4] = {N, C, H, W};
    int y = conv_act(G, conv_k(G, add_input(g, nm(G, "x"), 4, xd), C, M, (int)k, (int)k, ri(3) != 0));
    if (ri(3) == 0) {
        if (kiln__graph_infer(g) != KILN_OK) return -1;
        int64_t rd[4];
        memcpy(rd, ti(G, y)->dims, sizeof rd);
        y = either(G, KILN_OP_Add, "res", y, add_input(g, nm(G, "r"), 4, rd));
    }
    switch (ri(5)) {
    case 0: return add_unary(g, KILN_OP_GlobalAveragePool, nm(G, "gap"), y, NULL);
    case 1: return add_unary(g, KILN_OP_GlobalMaxPool, nm(G, "gmp"), y, NULL);
    case 2:
    case 3: {
        kiln_pool_attrs pa;
        memset(&pa, 0, sizeof pa);
        pa.n_kernel = pa.n_strides = 2;
        pa.kernel[0] = pa.kernel[1] = 2 + ri(2);
        pa.strides[0] = pa.strides[1] = 1 + ri(2);
        if (ri(2)) {
            pa.n_pads = 4;
            for (int i = 0; i < 4; i++) pa.pads[i] = ri((int)pa.kernel[0] / 2 + 1);
        }
        pa.ceil_mode = ri(3) == 0;
        pa.count_include_pad = ri(2);
        return add_unary(g, ri(2) ? KILN_OP_MaxPool : KILN_OP_AveragePool, nm(G, "pool"), y, &pa);
    }
    default: return y;
    }
}

/* A shape computed at run time (host layers: Shape, Gather, Concat,
 * Unsqueeze, Mul) read by device layers: Reshape of a device value to
 * Shape(x)'s dims merged or split, or Expand of a small tensor to x's
 * shape. */
static int gen_shape_host(gen *G) {
    kiln_graph *g = G->g;
    int r = 2 + ri(3);
    int64_t xd[4];
    for (int i = 0; i < r; i++) xd[i] = 1 + ri(4);
    int x = add_input(g, nm(G, "x"), r, xd);
    int y = add_unary(g, KILN_OP_Neg, nm(G, "neg"), x, NULL); /* a device value */
    kiln_shape_attrs sh = {0};
    int shp = add_unary(g, KILN_OP_Shape, nm(G, "shape"), x, &sh);
    if (ri(3) == 0) { /* Expand of [1, .., d_last] to x's shape */
        int64_t cd[4] = {1, 1, 1, 1};
        cd[r - 1] = xd[r - 1];
        int c = ri(2) ? add_const(g, nm(G, "c"), r, cd, -1, 1) : add_input(g, nm(G, "c"), r, cd);
        int e = add_binary(g, KILN_OP_Expand, nm(G, "expand"), c, shp);
        return either(G, KILN_OP_Add, "add", e, y);
    }
    /* [prod of dims 0..a], dims a+1.. : Gather each, Mul the first ones */
    int a = ri(r - 1), parts[5], np = 0;
    kiln_axis_attrs ax0 = {.axis = 0};
    int64_t i0 = 0;
    int prod = add_node(g, KILN_OP_Gather, nm(G, "dim"), 2, (int[]){shp, add_i64s(G, "i", 1, &i0)}, &ax0);
    for (int64_t i = 1; i <= a; i++)
        prod = add_binary(g, KILN_OP_Mul, nm(G, "prod"), prod,
                          add_node(g, KILN_OP_Gather, nm(G, "dim"), 2, (int[]){shp, add_i64s(G, "i", 1, &i)}, &ax0));
    parts[np++] = prod;
    for (int64_t i = a + 1; i < r; i++) {
        int64_t idx = ri(4) == 0 ? i - r : i;
        parts[np++] = add_node(g, KILN_OP_Gather, nm(G, "dim"), 2, (int[]){shp, add_i64s(G, "i", 1, &idx)}, &ax0);
    }
    if (ri(3) == 0) { /* a trailing -1 (or 1) */
        int64_t m1 = ri(2) ? -1 : 1;
        parts[np++] = add_i64s(G, "tail", 1, &m1); /* (a name that ends in a digit could meet another) */
    }
    int cat = add_node(g, KILN_OP_Concat, nm(G, "cat"), np, parts, &ax0);
    kiln_reshape_attrs ra = {0};
    y = add_node(g, KILN_OP_Reshape, nm(G, "reshape"), 2, (int[]){y, cat}, &ra);
    if (ri(2)) y = add_unary(g, KILN_OP_Relu, nm(G, "relu"), y, NULL);
    return y;
}

/* A transformer block's tail: s = x + r (either order; s sometimes read
 * elsewhere), LayerNormalization of s over the last axis (scale, bias or
 * none) for kiln.AddLayerNorm, then an MLP: MatMul + bias -> GELU (erf or
 * tanh), ReLU or nothing -> MatMul + bias [-> + s] (FusedMatMul's bias and
 * activation epilogues, the residual through C). */
static int gen_block(gen *G) {
    kiln_graph *g = G->g;
    int64_t B = 1 + ri(2), S = 1 + ri(6), D = ri(2) ? 2 + ri(8) : (int64_t)8 << ri(3), F = ri(2) ? 2 + ri(8) : 2 * D;
    int64_t xd[3] = {B, S, D}, dd[1] = {D}, fd[1] = {F}, w1[2] = {D, F}, w2[2] = {F, D};
    int x = add_input(g, nm(G, "x"), 3, xd);
    int sum = either(G, KILN_OP_Add, "res", x, ri(4) ? add_input(g, nm(G, "r"), 3, xd) : add_const(g, nm(G, "r"), 1, dd, -1, 1));
    if (ri(4) == 0) maybe_leak(G, sum);
    kiln_ln_attrs la = {.axis = ri(2) ? -1 : 2, .epsilon = ri(2) ? 1e-5f : 1e-12f, .stash_type = 1};
    int in[3] = {sum, add_const(g, nm(G, "gamma"), 1, dd, 0.5f, 1.5f), -1}, n = 2;
    if (ri(3)) in[n++] = add_const(g, nm(G, "beta"), 1, dd, -0.5f, 0.5f);
    int y = add_node(g, KILN_OP_LayerNormalization, nm(G, "ln"), n, in, &la);
    if (ri(3) == 0) return y;
    float s1 = 1.0f / sqrtf((float)D), s2 = 1.0f / sqrtf((float)F);
    int h = add_binary(g, KILN_OP_MatMul, nm(G, "fc_a"), y, add_const(g, nm(G, "W"), 2, w1, -s1, s1));
    if (ri(4)) h = either(G, KILN_OP_Add, "bias_a", h, add_const(g, nm(G, "b"), 1, fd, -0.5f, 0.5f));
    switch (ri(4)) {
    case 0:
    case 1: {
        kiln_gelu_attrs ga = {.approx = ri(2)};
        h = add_unary(g, KILN_OP_Gelu, nm(G, "gelu"), h, &ga);
        break;
    }
    case 2: h = add_unary(g, KILN_OP_Relu, nm(G, "relu"), h, NULL); break;
    default: break;
    }
    int o = add_binary(g, KILN_OP_MatMul, nm(G, "fc_b"), h, add_const(g, nm(G, "W"), 2, w2, -s2, s2));
    if (ri(4)) o = either(G, KILN_OP_Add, "bias_b", o, add_const(g, nm(G, "b"), 1, dd, -0.5f, 0.5f));
    if (ri(2)) o = either(G, KILN_OP_Add, "resb", o, sum); /* (no name prefix ends in a digit: "b1" + 9 is "b" + 19) */
    return o;
}

#define N_FAMILIES 17 /* graph_gen.h's 12 and the five above */

/* One random graph from seed (1 to 3 steps; a CUDA family in one step in
 * two); -1 when the grammar made an invalid one. */
static int gen_cuda_graph(kiln_graph *g, uint64_t seed, bool *must_stay, int *multi_slices, int *fams) {
    gen G = {.g = g, .must_stay = must_stay};
    gb_rng_state = seed;
    int steps = 1 + ri(3), y = -1;
    for (int s = 0; s < steps; s++) {
        int fam = ri(2) ? 12 + ri(5) : ri(12);
        fams[fam]++;
        switch (fam) {
        case 12: y = gen_se(&G); break;
        case 13: y = gen_attention(&G); break;
        case 14: y = gen_conv_pool(&G); break;
        case 15: y = gen_shape_host(&G); break;
        case 16: y = gen_block(&G); break;
        default: /* (a run-time Reshape's dims are not known: the next family starts anew) */
            for (int d = 0; y >= 0 && d < ti(&G, y)->rank; d++)
                if (ti(&G, y)->dims[d] < 1) y = -1;
            y = gen_step(&G, fam, y);
            break;
        }
        if (gen_step_done(&G, y, s + 1 == steps) != 0) return -1;
    }
    mark_output(g, y);
    *multi_slices += G.multi_slices;
    return 0;
}

/* ---- fp16 rounding of the reference -------------------------------------------------- */

/* Whether g has an op whose output jumps where rounding moves an input
 * across a point (comparisons, Floor, Sign, casts to integers or bool...)
 * reading a value some node computed: there the engine and the rounded
 * copy may round to different sides. (Graph inputs and constants are
 * rounded alike in both; Where and Not follow their bool inputs.) */
static bool discontinuous(const kiln_graph *g) {
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        bool jump = false;
        switch (n->op_id) {
        case KILN_OP_Floor: case KILN_OP_Ceil: case KILN_OP_Round: case KILN_OP_Sign: case KILN_OP_Greater:
        case KILN_OP_Less: case KILN_OP_Equal: case KILN_OP_GreaterOrEqual: case KILN_OP_LessOrEqual:
        case KILN_OP_Mod: case KILN_OP_ArgMax: case KILN_OP_ArgMin:
            jump = true;
            break;
        case KILN_OP_Cast: jump = !kiln__dtype_is_float(((const kiln_ew_cast_attrs *)n->attrs)->to); break;
        default: break;
        }
        for (int k = 0; jump && k < n->n_in; k++) {
            const kiln_value *v = n->in[k] >= 0 ? &g->values[n->in[k]] : NULL;
            if (v && kiln__dtype_is_float(v->info.dtype) && !(v->flags & (KILN_VALUE_INPUT | KILN_VALUE_CONST)))
                return true;
        }
    }
    return false;
}

/* fp16's (2^-11) or bf16's (2^-8) unit roundoff */
static float unit_roundoff(kiln_dtype t) { return t == KILN_DTYPE_BFLOAT16 ? 0x1p-8f : 0x1p-11f; }

/* A copy of g (shapes inferred) whose float32 inputs, constants and node
 * outputs are each rounded to dtype t, fp16 or bf16 (Cast to t and back),
 * before any node reads them, and whose float32 outputs are rounded too;
 * with bias +1 or -1 each rounded value is then scaled by 1 + bias u (u:
 * t's unit roundoff, its largest relative rounding error, all in one
 * direction: where the errors of round-to-nearest happen to cancel, these
 * do not). */
static kiln_graph *half_rounded(const kiln_graph *g0, int bias, kiln_dtype t) {
    kiln_graph *g;
    if (kiln__graph_clone(g0, &g) != KILN_OK) abort();
    const int nv = g->n_values, nn = g->n_nodes, per = bias ? 3 : 2; /* nodes added per value */
    int *rounded = malloc(sizeof(int) * (size_t)nv), *cast = malloc(sizeof(int) * (size_t)nv);
    int *order = malloc(sizeof(int) * (size_t)(nn + per * nv + 1));
    bool *made = calloc((size_t)nv + 1, sizeof(bool));
    if (!rounded || !cast || !order || !made) abort();
    for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i].n_out; k++)
            if (g->nodes[i].out[k] >= 0) made[g->nodes[i].out[k]] = true;
    for (int v = 0; v < nv; v++) {
        rounded[v] = v, cast[v] = -1;
        const kiln_value *x = &g->values[v];
        if (x->info.dtype != KILN_DTYPE_FLOAT32 || !(made[v] || (x->flags & (KILN_VALUE_INPUT | KILN_VALUE_CONST))))
            continue;
        char name[120];
        snprintf(name, sizeof name, "%s/h", x->name);
        kiln_ew_cast_attrs to16 = {.to = t}, to32 = {.to = KILN_DTYPE_FLOAT32};
        int h = add_unary(g, KILN_OP_Cast, name, v, &to16);
        snprintf(name, sizeof name, "%s/r", g->values[v].name);
        rounded[v] = add_unary(g, KILN_OP_Cast, name, h, &to32);
        if (bias) {
            snprintf(name, sizeof name, "%s/b", g->values[v].name);
            char kn[124];
            snprintf(kn, sizeof kn, "%s/k", g->values[v].name);
            int k = add_scalar(g, kn, 1.0f + (float)bias * unit_roundoff(t));
            rounded[v] = add_binary(g, KILN_OP_Mul, name, rounded[v], k);
        }
        cast[v] = g->n_nodes - per; /* and the next ones */
    }
    /* readers of v read rounded[v] (the casts themselves excepted), and so do the outputs */
    for (int i = 0; i < nn; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] >= 0) g->nodes[i].in[k] = rounded[g->nodes[i].in[k]];
    for (int k = 0; k < g->n_outputs; k++) {
        int v = g->outputs[k];
        if (rounded[v] == v) continue;
        g->values[v].flags &= ~KILN_VALUE_OUTPUT;
        g->outputs[k] = rounded[v];
        g->values[rounded[v]].flags |= KILN_VALUE_OUTPUT;
    }
    /* in order: the casts of inputs and constants, then each node followed by its outputs' casts */
    int no = 0;
    for (int v = 0; v < nv; v++)
        for (int j = 0; cast[v] >= 0 && !made[v] && j < per; j++) order[no++] = cast[v] + j;
    for (int i = 0; i < nn; i++) {
        order[no++] = i;
        for (int k = 0; k < g->nodes[i].n_out; k++) {
            int v = g->nodes[i].out[k];
            for (int j = 0; v >= 0 && cast[v] >= 0 && j < per; j++) order[no++] = cast[v] + j;
        }
    }
    kiln_node *nodes = malloc(sizeof(kiln_node) * (size_t)g->n_nodes);
    if (!nodes || no != g->n_nodes) abort();
    for (int i = 0; i < no; i++) nodes[i] = g->nodes[order[i]];
    memcpy(g->nodes, nodes, sizeof(kiln_node) * (size_t)no);
    free(nodes);
    free(rounded);
    free(cast);
    free(order);
    free(made);
    kiln__graph_link(g);
    if (kiln__graph_infer(g) != KILN_OK) {
        fprintf(stderr, "fp16 copy: %s\n", kiln_last_error());
        abort();
    }
    return g;
}

/* The longest sum a node of g computes (a MatMul's or Gemm's K, a Conv's
 * C/group x kernel, a Softmax's, reduction's or pool's row): the fp32 CPU
 * plan's own rounding inside such a sum grows with its length (about
 * sqrt(K) u for K terms), which the fp16 copy, rounding node outputs
 * only, does not show. */
static int64_t longest_sum(const kiln_graph *g) {
    int64_t k = 1;
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        const kiln_tinfo *x = &g->values[n->in[0]].info, *y = &g->values[n->out[0]].info;
        int64_t nx = kiln__numel(x->rank, x->dims), ny = kiln__numel(y->rank, y->dims);
        int64_t len = 1;
        switch (n->op_id) {
        case KILN_OP_MatMul: case KILN_OP_Gemm: len = x->rank > 0 ? x->dims[x->rank - 1] : 1; break;
        case KILN_OP_Conv: {
            const kiln_tinfo *w = &g->values[n->in[1]].info;
            len = w->rank > 1 ? kiln__numel(w->rank - 1, w->dims + 1) : 1;
            break;
        }
        case KILN_OP_Softmax: len = x->rank > 0 ? x->dims[x->rank - 1] : 1; break;
        default: /* reductions and pools: input elements per output element */
            if ((n->op_id == KILN_OP_ReduceMean || n->op_id == KILN_OP_GlobalAveragePool ||
                 n->op_id == KILN_OP_AveragePool) && ny > 0)
                len = nx / ny;
            break;
        }
        if (len > k) k = len;
    }
    return k;
}

/* The CPU level-0 plans of the three rounded copies of a graph for one
 * dtype (half_rounded: to nearest, then all errors up, all down). */
typedef struct rounded {
    kiln_model *m[3];
    kiln_engine *e[3];
    bool ok;
} rounded;

static void rounded_make(rounded *R, const kiln_model *m, const dyn *dy, kiln_dtype t, bool want) {
    memset(R, 0, sizeof *R);
    R->ok = want;
    for (int c = 0; R->ok && c < 3; c++) {
        R->m[c] = model_of(half_rounded(m->graph, c == 0 ? 0 : c == 1 ? 1 : -1, t));
        R->ok = build_for(R->m[c], 0, dy, KILN_DEVICE_CPU, KILN_PRECISION_FP32, &R->e[c]) == KILN_OK;
    }
}

static void rounded_free(rounded *R) {
    for (int c = 0; c < 3; c++) {
        kiln_engine_free(R->e[c]);
        kiln_model_free(R->m[c]);
    }
}

/* How far the rounded copies' engines eh[0..2], run on the inputs of seed
 * `seed`, land from ref at most (special_rel_err over the outputs): the
 * effect of fp16's (bf16's) rounding on this graph at these inputs; -1 when
 * one fails or moves a NaN or an infinity. */
static double half_distance(kiln_engine *const *eh, const dyn *dy, uint64_t seed, const result *ref) {
    static result rh;
    double d = 0;
    for (int c = 0; c < 3; c++) {
        if (!eh[c] || !run(eh[c], dy, seed, &rh)) return -1;
        for (int k = 0; k < ref->n_out; k++) d = fmax(d, special_rel_err(rh.y[k], ref->y[k], ref->n[k] < MAXN ? ref->n[k] : MAXN));
    }
    return isfinite(d) ? d : -1;
}

/* ---- the comparison -------------------------------------------------------------------- */

static struct {
    int se, attn, fused_conv, fused_mm, gemm_conv, pool, pw, ln, movement, host_shape;
    int half_compared[3], half_skipped[3], refused_both, special, run_failed_both;
    double worst[3]; /* the largest error / tolerance seen, fp32, fp16, bf16 */
} fired;

static bool plan_has_name(const kiln_engine *e, int op, const char *part) {
    for (int i = 0; e && i < e->graph->n_nodes; i++)
        if (e->graph->nodes[i].op_id == op && (!part || strstr(e->graph->nodes[i].name, part))) return true;
    return false;
}

/* -1: a graph is built with tuning when its seed is 1 mod 3; 0 or 1: without
 * or with (test_cuda_pinned_seeds) */
static int tune_override = -1;

static void count_fired(const kiln_engine *e) {
    fired.se += count_op(e, KILN_OP_SqueezeExcite) > 0;
    fired.attn += count_op(e, KILN_OP_Attention) > 0;
    fired.fused_conv += count_op(e, KILN_OP_FusedConv) > 0;
    fired.fused_mm += count_op(e, KILN_OP_FusedMatMul) > 0;
    fired.pool += count_op(e, KILN_OP_MaxPool) + count_op(e, KILN_OP_AveragePool) + count_op(e, KILN_OP_GlobalAveragePool) > 0;
    fired.pw += count_op(e, KILN_OP_Pointwise) > 0;
    fired.ln += count_op(e, KILN_OP_LayerNormalization) + count_op(e, KILN_OP_AddLayerNorm) > 0;
    fired.movement += plan_has_name(e, KILN_OP_Gather, "/kiln_rows");
    fired.host_shape += count_op(e, KILN_OP_Shape) > 0 || plan_has_name(e, KILN_OP_Reshape, "reshape");
}

static void print_fail(const kiln_graph *g, const kiln_engine *e, uint64_t seed, const char *prec, const dyn *dy,
                       const char *why) {
    fprintf(stderr, "  FAIL seed %llu, CUDA %s%s: %s\n", (unsigned long long)seed, prec,
            dy->on ? " (first input dims symbolic)" : "", why);
    print_graph(g);
    if (e) {
        fprintf(stderr, "  CUDA plan:\n");
        print_graph(e->graph);
    }
}

/* y (CUDA) against r0 (CPU, level 0): shapes, then values within tol (+
 * the LayerNorm slack of e when needed); false with why filled. */
static bool compare(const result *y, const result *r0, double tol, const kiln_engine *e, const dyn *dy, uint64_t seed,
                    char *why, size_t nwhy, double *worst) {
    double slack = -1;
    for (int k = 0; k < r0->n_out; k++) {
        bool same = r0->rank[k] == y->rank[k];
        for (int d = 0; same && d < r0->rank[k]; d++) same = r0->dims[k][d] == y->dims[k][d];
        if (!same) {
            snprintf(why, nwhy, "output %d: shapes differ", k);
            return false;
        }
        int64_t n = r0->n[k] < MAXN ? r0->n[k] : MAXN;
        double err = special_rel_err(y->y[k], r0->y[k], n);
        if (!(err <= tol) && isfinite(err) && slack < 0) slack = ln_slack(e, dy, seed);
        if (err / (tol + fmax(slack, 0.0)) > *worst) *worst = err / (tol + fmax(slack, 0.0));
        if (!(err <= tol + fmax(slack, 0.0))) {
            int64_t w = 0;
            double wd = -1;
            for (int64_t j = 0; j < n; j++) {
                double dj = special_rel_err(&y->y[k][j], &r0->y[k][j], 1);
                if (!(dj <= wd)) w = j, wd = dj;
            }
            snprintf(why, nwhy, "output %d: relative error %g > %g + %g (element %lld: %.9g CUDA, %.9g CPU)", k, err, tol,
                     fmax(slack, 0.0), (long long)w, y->y[k][w], r0->y[k][w]);
            return false;
        }
    }
    return true;
}

/* Builds g for the CPU (level 0, fp32) and for CUDA (fp32, fp16, bf16:
 * those prec[] asks for) and compares; false (with the graph printed) on
 * a difference. Takes g. */
static bool check_cuda_graph(kiln_graph *g, const dyn *dy, uint64_t seed, const bool *prec) {
    static result r0, rb, y;
    kiln_model *m = model_of(g);
    kiln_engine *e0 = NULL;
    kiln_status s0 = build_for(m, 0, dy, KILN_DEVICE_CPU, KILN_PRECISION_FP32, &e0);
    char e0_err[300];
    snprintf(e0_err, sizeof e0_err, "%s", s0 == KILN_OK ? "" : kiln_last_error());
    bool k0 = s0 == KILN_OK && run(e0, dy, seed * 7919 + 1, &r0);
    if (getenv("KILN_DIFF_DEBUG") && s0 == KILN_OK && !k0) fprintf(stderr, "seed %llu: CPU run: %s\n", (unsigned long long)seed, kiln_last_error());
    bool ok = true;
    /* dh[1], dh[2]: the distance of the fp16- and bf16-rounded copies'
     * results from r0 (above); d16b fp16's on run 2's inputs; -1 where not
     * comparable */
    double dh[3] = {-1, -1, -1}, d16b = -1;
    rounded R[3];
    const bool continuous = k0 && !discontinuous(m->graph);
    for (int pi = 1; pi < 3; pi++) {
        /* (fp16's copies also for fp32's tolerance) */
        rounded_make(&R[pi], m, dy, pi == 1 ? KILN_DTYPE_FLOAT16 : KILN_DTYPE_BFLOAT16, continuous && (prec[pi] || pi == 1));
        if (R[pi].ok) dh[pi] = half_distance(R[pi].e, dy, seed * 7919 + 1, &r0);
    }
    const double d16 = dh[1];
    for (int pi = 0; pi < 3 && ok; pi++) {
        static const kiln_precision ps[3] = {KILN_PRECISION_FP32, KILN_PRECISION_FP16, KILN_PRECISION_BF16};
        static const char *const pns[3] = {"fp32", "fp16", "bf16"};
        if (!prec[pi]) continue;
        kiln_precision p = ps[pi];
        const char *pn = pns[pi];
        /* fp32: 1e-5, plus d16 scaled from fp16's unit roundoff to fp32's
         * (2^-11 -> 2^-24: rounding errors to first order are linear in
         * it), times 4 as for fp16 and sqrt of the longest sum (the CPU
         * plan's rounding inside it; a softmax over 64-term dot products
         * of |x| < 3 needs more than 1e-5: seeds 296, 44439) */
        const double c32 = 4.0 * sqrt((double)longest_sum(m->graph)) * 0x1p-13;
        double tol = 1e-5 + (d16 > 0 ? c32 * d16 : 0.0), tolb = 1e-5;
        char why[400] = "";
        if (pi) { /* 4 d + 4 ulps (2^-8 fp16, 2^-5 bf16) */
            if (dh[pi] < 0) {
                fired.half_skipped[pi]++;
                continue;
            }
            tol = 4.0 * dh[pi] + 8.0 * unit_roundoff(pi == 1 ? KILN_DTYPE_FLOAT16 : KILN_DTYPE_BFLOAT16);
            fired.half_compared[pi]++;
        }
        kiln_engine *e1 = NULL;
        dyn dt = *dy; /* one graph in three: every tactic timed (and checked against tactic 0) */
        dt.tune = tune_override >= 0 ? tune_override != 0 : seed % 3 == 1;
        kiln_status s1 = build_for(m, 1, &dt, KILN_DEVICE_CUDA, p, &e1);
        if ((s0 == KILN_OK) != (s1 == KILN_OK)) {
            ok = false;
            snprintf(why, sizeof why, "build: CPU level 0 %d%s%s, CUDA %d%s%s", s0, *e0_err ? ": " : "", e0_err, s1,
                     s1 ? ": " : "", s1 ? kiln_last_error() : "");
        } else if (s0 != KILN_OK) {
            fired.refused_both += !pi;
        } else {
            if (!pi) count_fired(e1);
            /* one context, three runs: the inputs of seed A, then (fp32) other
             * values (every symbolic first dim 1: the profile's min), then A
             * again (cached per-node plans, CUDA Graph replay, host inputs
             * borrowed for one run) */
            kiln_context *c = NULL;
            dyn db = *dy;
            for (int k = 0; k < 8; k++)
                if (db.on && db.d0[k] > 0) db.d0[k] = 1;
            for (int rn = 0; rn < 3 && ok; rn++) {
                if (rn == 1 && pi) continue;
                const dyn *dr = rn == 1 ? &db : dy;
                uint64_t sr = seed * 7919 + (rn == 1 ? 2 : 1);
                const result *ref = &r0;
                bool kr = k0;
                char cpu_err[300] = "";
                if (rn == 1) {
                    kr = k0 && run(e0, dr, sr, &rb);
                    if (k0 && !kr) snprintf(cpu_err, sizeof cpu_err, "%s", kiln_last_error());
                    ref = &rb;
                    if (kr && R[1].ok) d16b = half_distance(R[1].e, dr, sr, &rb);
                    if (d16b > 0) tolb += c32 * d16b;
                }
                bool k1 = (c || kiln_context_create(e1, &c) == KILN_OK) && run_in(c, e1, dr, sr, &y);
                if (kr != k1) {
                    ok = false;
                    snprintf(why, sizeof why, "run %d: CPU %d%s%s, CUDA %d%s%s", rn + 1, kr, *cpu_err ? ": " : "", cpu_err,
                             k1, k1 ? "" : ": ", k1 ? "" : kiln_last_error());
                } else if (kr) {
                    ok = compare(&y, ref, rn == 1 ? tolb : tol, e1, dr, sr, why, sizeof why, &fired.worst[pi]);
                    if (!ok && rn) {
                        char w2[sizeof why];
                        memcpy(w2, why, sizeof w2);
                        snprintf(why, sizeof why, "run %d of one context%s: %.340s", rn + 1,
                                 rn == 1 && dy->on ? " (batch 1)" : "", w2);
                    }
                } else if (rn == 0) {
                    fired.run_failed_both += !pi;
                }
            }
            kiln_context_free(c);
        }
        if (!ok) print_fail(m->graph, e1, seed, pn, dy, why);
        kiln_engine_free(e1);
    }
    rounded_free(&R[1]);
    rounded_free(&R[2]);
    kiln_engine_free(e0);
    kiln_model_free(m);
    return ok;
}

/* The graph of seed `seed` (NaN/inf inputs as KILN_DIFF_NANS says: 0
 * none, 1 one graph in eight, 2 all), checked: 0 when the grammar made an
 * invalid one, 1 (2 with a symbolic batch) when it passed, -1 (-2) when
 * it failed. */
static int check_seed(uint64_t seed, int nans, const bool *prec, int *multi_slices, int *fams) {
    if (getenv("KILN_DIFF_VERBOSE")) fprintf(stderr, "seed %llu\n", (unsigned long long)seed); /* (what a note is about) */
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(&g));
    bool must_stay = false;
    if (gen_cuda_graph(g, seed, &must_stay, multi_slices, fams) != 0) {
        kiln__graph_free(g);
        return 0;
    }
    dyn dy = {.on = seed % 4 == 3, .special = nans > 1 || (nans == 1 && seed % 8 == 5)};
    /* one symbol per size: inputs of other first dims do not share one */
    if (dy.on && !make_batch_symbolic(g, &dy, true)) {
        kiln__graph_free(g);
        return 0;
    }
    fired.special += dy.special;
    int r = dy.on ? 2 : 1;
    return check_cuda_graph(g, &dy, seed, prec) ? r : -r;
}

/* x [batch, 1, 3] (profile 1 to 4, opt 3) -> Gather(axis 0, indices 1, 2,
 * -1) [-> and, with `reshape`, Neg(x) -> Reshape [3, 3]: valid at batch 3
 * only], as the random graphs made them (seeds 11923, 6255, 111399 of the
 * grammar before the block family). */
static kiln_model *gather_model(bool reshape) {
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(&g));
    int sym;
    CHECK_OK(kiln__graph_add_symbol(g, "batch", &sym));
    int64_t xd[3] = {KILN_DIM_SYM(sym), 1, 3}, idx[3] = {1, 2, -1}, shape[2] = {3, 3};
    int x = add_input(g, "x", 3, xd);
    kiln_axis_attrs ax = {.axis = 0};
    mark_output(g, add_node(g, KILN_OP_Gather, "gather", 2, (int[]){x, add_i64(g, "idx", 3, idx)}, &ax));
    if (reshape) {
        kiln_reshape_attrs ra = {0};
        int n = add_unary(g, KILN_OP_Neg, "neg", x, NULL);
        mark_output(g, add_node(g, KILN_OP_Reshape, "reshape", 2, (int[]){n, add_i64(g, "shape", 2, shape)}, &ra));
    }
    return model_of(g);
}

/* A Gather index out of range at a run's shapes (constant indices valid at
 * the profile's opt batch, run at batch 1): the CUDA kernel wrote zeros
 * there and the run succeeded, where the CPU fails it (random graphs,
 * seeds 11923, 6255). The run fails now, naming the layer (kcu_gather's
 * report, read at the end of the run). And where such a run failed before
 * its end (a later layer refused the batch), its report stayed and failed
 * the next, valid, run (seed 111399): a failed kiln_context_run now
 * synchronizes and clears it. */
TEST(test_gather_out_of_range) {
    if (!kiln__backend_for(KILN_DEVICE_CUDA)) {
        printf("  (no CUDA backend in the registry: skipped)\n");
        return;
    }
    static result r0, r1;
    for (int reshape = 0; reshape < 2; reshape++) {
        kiln_model *m = gather_model(reshape);
        dyn d2 = {.on = true, .d0 = {3}}, d1 = {.on = true, .d0 = {1}}; /* (d2: batch 3) */
        kiln_engine *e0 = NULL, *e1 = NULL;
        kiln_context *c = NULL;
        CHECK_OK(build_for(m, 0, &d2, KILN_DEVICE_CPU, KILN_PRECISION_FP32, &e0));
        CHECK_OK(build_for(m, 1, &d2, KILN_DEVICE_CUDA, KILN_PRECISION_FP32, &e1));
        CHECK_OK(e1 ? kiln_context_create(e1, &c) : KILN_ERR_INVALID_ARGUMENT);
        if (e0 && c) {
            CHECK(run(e0, &d2, 7, &r0) && run_in(c, e1, &d2, 7, &r1));
            CHECK(r1.n[0] == 9 && !memcmp(r0.y[0], r1.y[0], sizeof(float) * 9));
            CHECK(!run(e0, &d1, 8, &r0)); /* the CPU refuses batch 1 */
            bool k1 = run_in(c, e1, &d1, 8, &r1);
            CHECK(!k1);
            if (!reshape && !k1) CHECK(strstr(kiln_last_error(), "'gather' (Gather): an index is out of range"));
            CHECK(run_in(c, e1, &d2, 9, &r1)); /* batch 3 again */
            CHECK(run(e0, &d2, 9, &r0) && r1.n[0] == 9 && !memcmp(r0.y[0], r1.y[0], sizeof(float) * 9));
        }
        kiln_context_free(c);
        kiln_engine_free(e1);
        kiln_engine_free(e0);
        kiln_model_free(m);
    }
}

/* Seeds that failed once, checked on every run whatever KILN_DIFF_SEED says
 * (NaN/inf inputs on: each is 5 mod 8), with why (issue 20):
 *   53   fp16 FusedConv 1x1 + Relu on x [1, 3, 3, 2], built without tuning
 *        (seed % 3 != 1): tactic 0, cuDNN's heuristic config with the ReLU
 *        inside, turned NaN into 0 (tactic 0 now applies a ReLU or Clip in
 *        kiln's epilogue; tuned builds have the NaN probe, tune.c)
 *   69   fp32 kiln.Attention [1, 2, 5, 3]: an inf in K gave a key of score
 *        -inf, which kiln-attn skipped, dropping 0 * NaN of its value
 *   101  fp16 FusedConv 2x2 stride 2 + Relu on x [1, 5, 2, 4], as 53
 * Each is checked built without tuning (as it failed: tactic 0) and with
 * tuning (every tactic timed, checked and NaN-probed), tune_override
 * saying which. A failure prints the graph, both plans and the first
 * element that differs. */
static const uint64_t pinned_seeds[] = {53, 69, 101};

TEST(test_cuda_pinned_seeds) {
    if (!kiln__backend_for(KILN_DEVICE_CUDA)) {
        printf("  (no CUDA backend in the registry: skipped)\n");
        return;
    }
    const bool prec[3] = {true, env_count("KILN_DIFF_FP16", 1, 0, 1) != 0, env_count("KILN_DIFF_BF16", 1, 0, 1) != 0};
    int multi_slices = 0, fams[N_FAMILIES] = {0};
    for (int tune = 0; tune < 2; tune++)
        for (size_t i = 0; i < sizeof pinned_seeds / sizeof pinned_seeds[0]; i++) {
            tune_override = tune;
            int r = check_seed(pinned_seeds[i], 1, prec, &multi_slices, fams);
            tune_override = -1;
            if (r < 0)
                fprintf(stderr, "  pinned seed %llu, built %s tuning, failed (see above)\n",
                        (unsigned long long)pinned_seeds[i], tune ? "with" : "without");
            CHECK(r > 0);
        }
}

TEST(test_cuda_random_graphs) {
    if (!kiln__backend_for(KILN_DEVICE_CUDA)) {
        printf("  (no CUDA backend in the registry: skipped)\n");
        return;
    }
    int iters = (int)env_count("KILN_DIFF_ITERS", 200, 1, INT32_MAX);
    uint64_t seed0 = (uint64_t)env_count("KILN_DIFF_SEED", 1, 0, INT64_MAX);
    int nans = (int)env_count("KILN_DIFF_NANS", 1, 0, 2);
    const bool prec[3] = {true, env_count("KILN_DIFF_FP16", 1, 0, 1) != 0, env_count("KILN_DIFF_BF16", 1, 0, 1) != 0};
    int built = 0, skipped = 0, failed = 0, dynamic = 0, multi_slices = 0, fams[N_FAMILIES] = {0};
    int max_fails = (int)env_count("KILN_DIFF_MAX_FAILS", 5, 1, INT32_MAX); /* stop after so many */
    for (int i = 0; i < iters && failed < max_fails; i++) {
        int r = check_seed(seed0 + (uint64_t)i, nans, prec, &multi_slices, fams);
        skipped += r == 0;
        built += r != 0;
        dynamic += r == 2 || r == -2;
        failed += r < 0;
    }
    fprintf(stderr,
            "  %d graphs compared (%d with a symbolic batch, %d on NaN/inf inputs), %d invalid ones skipped, %d refused by "
            "both builds, %d failed to run on both; fp16: %d compared, %d not comparable; bf16: %d compared, %d not "
            "comparable; largest error / tolerance: fp32 %.3g, fp16 %.3g, bf16 %.3g\n"
            "  CUDA plans with: kiln.SqueezeExcite %d, kiln.Attention %d, FusedConv %d, FusedMatMul %d, a pool %d, "
            "Pointwise %d, LayerNorm %d, a Gather of rows %d, a run-time Reshape %d; multi-axis Slices %d\n",
            built, dynamic, fired.special, skipped, fired.refused_both, fired.run_failed_both,
            fired.half_compared[1], fired.half_skipped[1], fired.half_compared[2], fired.half_skipped[2], fired.worst[0],
            fired.worst[1], fired.worst[2],
            fired.se, fired.attn, fired.fused_conv, fired.fused_mm, fired.pool, fired.pw, fired.ln, fired.movement,
            fired.host_shape, multi_slices);
    CHECK(failed == 0);
    CHECK(built >= iters / 2);
    if (iters >= 100) /* the CUDA families reached their rewrites */
        CHECK(fired.se && fired.attn && fired.fused_conv && fired.fused_mm && fired.pool && fired.host_shape &&
              (fired.half_compared[1] || !prec[1]) && (fired.half_compared[2] || !prec[2]));
}

int main(void) {
    const kiln_backend_i *be = kiln__backend_for(KILN_DEVICE_CUDA);
    void *st = NULL;
    if (be && be->state_create(0, &st) != KILN_OK) { /* a CUDA build on a machine without a GPU */
        printf("no CUDA device: skipping (%s)\n0 passed, 0 failed, 2 skipped\n", kiln_last_error());
        return 0;
    }
    if (be) be->state_free(st);
    RUN(test_gather_out_of_range);
    RUN(test_cuda_pinned_seeds);
    RUN(test_cuda_random_graphs);
    return test_summary();
}
