/* cpu_layout.c -- the CPU backend's layout choice (cpu_layout.h): which
 * values pass NHWC or nChw16c between CPU layers, and its hook for the
 * builder (kiln__cpu_layouts), which also judges the direct kernel inside
 * the network. */
#include <stdlib.h>

#include "backends/cpu/cpu_layout.h"

#include "backends/cpu/cpu_features.h"
#include "backends/cpu/kernels/conv_direct.h"
#include "backends/cpu/kernels/fused_conv_cpu.h"

/* ---- NHWC between oneDNN layers -------------------------------------- */

/* A float32 2-D MaxPool without indices on the CPU: kiln's kernel reads and
 * writes NHWC too (KILN_POOL_LAYOUT_NHWC), so a stem conv -> MaxPool ->
 * conv chain needs no reorder. */
static bool layout_pool_ok(const kiln_graph *g, const kiln_node *n) {
    if (n->op_id != KILN_OP_MaxPool || n->n_in < 1 || n->in[0] < 0) return false;
    if (n->n_out > 1 && n->out[1] >= 0) return false;
    const kiln_tinfo *x = &g->values[n->in[0]].info;
    return x->rank == 4 && x->dtype == KILN_DTYPE_FLOAT32;
}

/* A live CPU node the layout choice may change (not vetoed). */
static bool layout_cpu_node(const kiln_graph *g, int ni, const bool *veto) {
    const kiln_node *n = &g->nodes[ni];
    return !n->dead && n->device == KILN_DEVICE_CPU && !(veto && veto[ni]);
}

/* A float32 4-D GlobalAveragePool on the CPU: reads an NHWC tensor
 * (kiln's kernel; its [N, C, 1, 1] output is the same in either layout), so
 * the last layer of ResNet's last stage need not turn its output NCHW. It
 * ends a chain: its output is never passed NHWC. */
static bool layout_sink_ok(const kiln_graph *g, int ni, const bool *veto) {
    const kiln_node *n = &g->nodes[ni];
    if (!layout_cpu_node(g, ni, veto)) return false;
    if (n->op_id != KILN_OP_GlobalAveragePool || n->n_in < 1 || n->in[0] < 0 || !n->attrs) return false;
    const kiln_tinfo *x = &g->values[n->in[0]].info;
    return x->rank == 4 && x->dtype == KILN_DTYPE_FLOAT32;
}

/* A FusedConv run by oneDNN (its tactics join NHWC chains and may read an
 * NHWC residual into an NCHW output). */
static bool layout_node_dnnl(const kiln_node *n) {
    int t = ((const kiln_fused_conv_attrs *)n->attrs)->tactic.id;
    return t == KILN_FC_TACTIC_DNNL_PLAIN || t == KILN_FC_TACTIC_DNNL_BLOCKED;
}

static bool layout_node_ok(const kiln_graph *g, int ni, const bool *veto) {
    const kiln_node *n = &g->nodes[ni];
    if (!layout_cpu_node(g, ni, veto)) return false;
    if (n->op_id == KILN_OP_MaxPool) return layout_pool_ok(g, n);
    if (n->op_id == KILN_OP_PwDwConv) return true; /* kiln's kernel: either layout */
    if (n->op_id != KILN_OP_FusedConv) return false;
    const kiln_fused_conv_attrs *fa = n->attrs;
    const kiln_tinfo *x = &g->values[n->in[0]].info, *w = &g->values[n->in[1]].info;
    if (kiln__fc_wino_tile(fa->tactic.id)) return kiln__fc_wino_fits(fa, x->rank, x->dims, w->rank, w->dims);
    if (fa->tactic.id == KILN_FC_TACTIC_DIRECT) return kiln__fc_direct_fits(fa, x->rank, x->dims, w->rank, w->dims);
    return layout_node_dnnl(n) && x->rank == 4;
}

int32_t *kiln__layout_attr(kiln_node *n) {
    return n->attrs && n->op->layout_field ? n->op->layout_field(n->attrs) : NULL;
}

void kiln__fc_clear_layouts(kiln_graph *g) {
    for (int ni = 0; ni < g->n_nodes; ni++) {
        if (g->nodes[ni].device != KILN_DEVICE_CPU) continue; /* device layouts are the device pass's */
        int32_t *l = kiln__layout_attr(&g->nodes[ni]);
        if (l) *l = 0;
    }
}

/* Whether every float32 NHWC value (blk 1) may be nChw16c instead: 4-D
 * with channels a multiple of 16, and every node that reads or writes one
 * has an nChw16c kernel (oneDNN or Winograd FusedConv of one group with
 * channels multiples of 16, MaxPool, GlobalAveragePool; not PwDwConv, nor
 * an NHWC residual into an NCHW output). */
static bool c16_all(const kiln_graph *g, const unsigned char *blk) {
    for (int v = 0; v < g->n_values; v++) {
        const kiln_tinfo *t = &g->values[v].info;
        if (blk[v] == 1 && (t->rank != 4 || t->dtype != KILN_DTYPE_FLOAT32 || t->dims[1] < 0 || t->dims[1] % 16))
            return false;
    }
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        if (n->dead) continue;
        bool touches = n->out[0] >= 0 && blk[n->out[0]] == 1;
        for (int i = 0; i < n->n_in; i++) touches = touches || (n->in[i] >= 0 && blk[n->in[i]] == 1);
        if (!touches) continue;
        if (n->op_id == KILN_OP_MaxPool || n->op_id == KILN_OP_GlobalAveragePool) continue;
        if (n->op_id != KILN_OP_FusedConv) return false;
        const kiln_fused_conv_attrs *fa = n->attrs;
        const kiln_tinfo *x = &g->values[n->in[0]].info, *w = &g->values[n->in[1]].info;
        if (fa->precision != KILN_PRECISION_FP32 || fa->conv.group != 1 || w->rank != 4) return false;
        if (n->n_in >= 4 && n->in[3] >= 0 && blk[n->in[3]] != blk[n->out[0]]) return false; /* R_NHWC */
        kiln_fused_conv_attrs probe = *fa;
        probe.layout = (blk[n->in[0]] ? KILN_FC_LAYOUT_X_C16 : 0) | (blk[n->out[0]] ? KILN_FC_LAYOUT_Y_C16 : 0);
        if (kiln__fc_c16_check(n->name, &probe, x->dtype, x->rank, w->rank, w->dims) != KILN_OK) {
            kiln__clear_error();
            return false;
        }
    }
    return true;
}

int kiln__fc_c16_values(const kiln_graph *g) {
    int count = 0;
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        if (!n->dead && n->op_id == KILN_OP_FusedConv &&
            (((const kiln_fused_conv_attrs *)n->attrs)->layout & KILN_FC_LAYOUT_Y_C16))
            count++;
    }
    return count;
}

int kiln__fc_choose_layouts(kiln_graph *g, const bool *veto, bool c16) {
    if (!kiln__have_dnnl()) return 0;
    kiln__graph_link(g);
    unsigned char *blk = kiln__calloc((size_t)g->n_values + 1, sizeof *blk); /* 1 NHWC, 2 NHWC bf16, 3 nChw16c */
    if (!blk) return 0; /* no memory: everything stays NCHW, which is always right */
    /* candidates: produced and only read (as X or residual) by such layers */
    for (int ni = 0; ni < g->n_nodes; ni++) {
        if (!layout_node_ok(g, ni, veto)) continue;
        int v = g->nodes[ni].out[0];
        const kiln_tinfo *t = &g->values[v].info;
        if (v < 0 || kiln__graph_is_output(g, v) || g->values[v].n_uses < 1 || t->rank != 4) continue;
        blk[v] = true;
    }
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        if (n->dead) continue;
        bool ok = layout_node_ok(g, ni, veto) || layout_sink_ok(g, ni, veto);
        /* NHWC inputs: X and the residual */
        int res = n->op_id == KILN_OP_FusedConv ? 3 : n->op_id == KILN_OP_PwDwConv ? 7 : 0;
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] >= 0 && blk[n->in[i]] && (!ok || (i != 0 && i != res))) blk[n->in[i]] = false;
    }
    /* a residual has the layout of its layer's output, except that a
     * oneDNN layer whose output leaves the chain (NCHW) may read an NHWC
     * residual (KILN_FC_LAYOUT_R_NHWC: else the NCHW reader at the end of
     * ResNet's last stage would make every block of the stage NCHW); a
     * MaxPool reads and writes one layout */
    for (bool changed = true; changed;) {
        changed = false;
        for (int ni = 0; ni < g->n_nodes; ni++) {
            const kiln_node *n = &g->nodes[ni];
            int r;
            if (n->dead) continue;
            if (n->op_id == KILN_OP_FusedConv && n->n_in >= 4 && n->in[3] >= 0) r = n->in[3];
            else if (n->op_id == KILN_OP_PwDwConv && n->n_in >= 8 && n->in[7] >= 0) r = n->in[7];
            else if (n->op_id == KILN_OP_MaxPool && n->in[0] >= 0) r = n->in[0];
            else continue;
            int y = n->out[0];
            if (blk[r] == blk[y]) continue;
            if (n->op_id == KILN_OP_FusedConv && blk[r] == 1 && blk[y] == 0 && layout_node_dnnl(n)) continue;
            blk[r] = blk[y] = 0;
            changed = true;
        }
    }
    /* between bf16 layers only, an NHWC tensor holds bf16 (blk 2) */
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        int v = n->out[0];
        if (n->dead || n->op_id != KILN_OP_FusedConv || v < 0 || !blk[v]) continue;
        bool bf16 = ((const kiln_fused_conv_attrs *)n->attrs)->precision == KILN_PRECISION_BF16;
        for (int ci = 0; bf16 && ci < g->n_nodes; ci++) {
            const kiln_node *c = &g->nodes[ci];
            if (c->dead) continue;
            for (int i = 0; i < c->n_in; i++)
                if (c->in[i] == v && (c->op_id != KILN_OP_FusedConv ||
                                      ((const kiln_fused_conv_attrs *)c->attrs)->precision != KILN_PRECISION_BF16))
                    bf16 = false;
        }
        if (bf16) blk[v] = 2;
    }
    /* a residual holds what its layer's NHWC output holds (Y_BF16 covers
     * both), and an NHWC residual into an NCHW output holds float32: where
     * they differ, float32 NHWC (which any layer of the chain reads) */
    for (bool changed = true; changed;) {
        changed = false;
        for (int ni = 0; ni < g->n_nodes; ni++) {
            const kiln_node *n = &g->nodes[ni];
            if (n->dead || n->op_id != KILN_OP_FusedConv || n->n_in < 4 || n->in[3] < 0) continue;
            int r = n->in[3], y = n->out[0];
            if (blk[r] == 2 && blk[y] != 2) blk[r] = 1, changed = true;
            if (blk[y] == 2 && blk[r] != 2) blk[y] = 1, changed = true;
        }
    }
    /* c16: the float32 NHWC values become nChw16c (blk 3), all or none */
    if (c16 && c16_all(g, blk))
        for (int v = 0; v < g->n_values; v++)
            if (blk[v] == 1) blk[v] = 3;
    int count = 0;
    for (int ni = 0; ni < g->n_nodes; ni++) {
        kiln_node *n = &g->nodes[ni];
        if (n->device != KILN_DEVICE_CPU) continue; /* (cuda_layout.c sets the GPU layers' layouts) */
        if (!n->dead && n->op_id == KILN_OP_MaxPool && layout_pool_ok(g, n)) {
            int y = blk[n->out[0]];
            ((kiln_pool_attrs *)n->attrs)->layout = y == 3 ? KILN_POOL_LAYOUT_C16 : y ? KILN_POOL_LAYOUT_NHWC : 0;
            count += y != 0;
        }
        if (!n->dead && n->op_id == KILN_OP_GlobalAveragePool && layout_sink_ok(g, ni, veto)) {
            /* float32 NHWC only: a tensor a GlobalAveragePool reads is never
             * bf16 (the bf16 pass above wants bf16 FusedConv readers alone) */
            int x = blk[n->in[0]];
            ((kiln_pool_attrs *)n->attrs)->layout = x == 3 ? KILN_POOL_LAYOUT_C16 : x == 1 ? KILN_POOL_LAYOUT_NHWC : 0;
            count += x == 1 || x == 3;
        }
        if (!n->dead && n->op_id == KILN_OP_PwDwConv) {
            int x = blk[n->in[0]], y = blk[n->out[0]];
            ((kiln_pwdw_attrs *)n->attrs)->layout =
                (x ? KILN_FC_LAYOUT_X_NHWC : 0) | (y ? KILN_FC_LAYOUT_Y_NHWC : 0);
            count += y != 0;
        }
        if (n->dead || n->op_id != KILN_OP_FusedConv) continue;
        kiln_fused_conv_attrs *fa = n->attrs;
        int x = blk[n->in[0]], y = blk[n->out[0]];
        bool rn = n->n_in >= 4 && n->in[3] >= 0 && blk[n->in[3]] == 1 && !y;
        fa->layout = (x == 1 || x == 2 ? KILN_FC_LAYOUT_X_NHWC : 0) | (y == 1 || y == 2 ? KILN_FC_LAYOUT_Y_NHWC : 0) |
                     (x == 2 ? KILN_FC_LAYOUT_X_BF16 : 0) | (y == 2 ? KILN_FC_LAYOUT_Y_BF16 : 0) |
                     (x == 3 ? KILN_FC_LAYOUT_X_C16 : 0) | (y == 3 ? KILN_FC_LAYOUT_Y_C16 : 0) |
                     (rn ? KILN_FC_LAYOUT_R_NHWC : 0);
        count += y != 0;
    }
    kiln__free(blk);
    return count;
}

/* ---- the choice, after tuning (kiln_backend_i.layouts) --------------------------- */

/* Times FusedConv layer ni with the layout in its attrs at the opt shapes:
 * *us the median (-1: it fails, or oneDNN has only a reference kernel for
 * it), left as it was (-2) when a shape is unknown. */
static kiln_status time_layout(kiln_layout_ctx *c, int ni, double *us) {
    const kiln_tactic *tac = c->g->nodes[ni].attrs;
    /* oneDNN's tactics: only where it has a real kernel for the layouts */
    bool dnnl = tac->id == KILN_FC_TACTIC_DNNL_PLAIN || tac->id == KILN_FC_TACTIC_DNNL_BLOCKED;
    return c->time_node(c, ni, dnnl ? kiln__cpu_fc_dnnl_real : NULL, us);
}

/* Every node's layout field (kiln__layout_attr; 0 for nodes without one)
 * into lay[n_nodes], or (set) back from it. */
static void layouts_io(kiln_graph *g, int32_t *lay, bool set) {
    for (int ni = 0; ni < g->n_nodes; ni++) {
        int32_t *l = kiln__layout_attr(&g->nodes[ni]);
        if (set && l) *l = lay[ni];
        else if (!set) lay[ni] = l ? *l : 0;
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of n doubles spaced `stride` apart (n <= KILN_TRIAL_MAX_RUNS). */
static double median_of(const double *x, int n, size_t stride) {
    double v[KILN_TRIAL_MAX_RUNS];
    for (int i = 0; i < n; i++) v[i] = x[(size_t)i * stride];
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return v[n / 2];
}

#define C16_MARGIN 0.98 /* nChw16c kept when its run takes at most this share of NHWC's */

typedef struct lay_variants {
    int32_t *lay; /* 2 x n_nodes layout fields */
} lay_variants;

static void set_layouts(kiln_graph *g, int v, void *arg) {
    layouts_io(g, ((lay_variants *)arg)->lay + (size_t)v * g->n_nodes, true);
}

/* The engine with the layouts of variant 0 (NHWC) and 1 (nChw16c)
 * (kiln_layout_ctx.trial). Blocked tensors pay off where they stream from memory
 * and cost where a batch-1 layer must split its channels over the threads,
 * which timing layers one by one, warm, does not show. Leaves the faster
 * variant's layouts (NHWC when a run fails). */
static kiln_status network_c16(kiln_layout_ctx *c, const bool *veto) {
    kiln_graph *g = c->g;
    lay_variants lv = {kiln__calloc(2 * (size_t)g->n_nodes + 1, sizeof *lv.lay)};
    if (!lv.lay) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (layouts)");
    layouts_io(g, lv.lay + g->n_nodes, false); /* the nChw16c layouts are in place now */
    kiln__fc_choose_layouts(g, veto, false);
    layouts_io(g, lv.lay, false);
    double t[2][KILN_TRIAL_MAX_RUNS];
    int runs = 0;
    kiln_status st = c->trial(c, set_layouts, &lv, t, NULL, &runs);
    /* by 2% at least: the two can tie within the noise of a few runs, and
     * where they tie NHWC keeps the batch-1 row split */
    int keep = st == KILN_OK && runs > 0 && median_of(t[1], runs, 1) < C16_MARGIN * median_of(t[0], runs, 1) ? 1 : 0;
    layouts_io(g, lv.lay + (size_t)keep * g->n_nodes, true);
    kiln__free(lv.lay);
    return st;
}

#define DIRECT_MARGIN 0.97 /* a layer takes the direct kernel where it runs in this share of the time */

typedef struct tac_variants {
    int32_t *id; /* 2 x n_nodes tactic ids (-1: no tactic) */
} tac_variants;

static void set_tactics(kiln_graph *g, int v, void *arg) {
    const int32_t *id = ((tac_variants *)arg)->id + (size_t)v * g->n_nodes;
    for (int ni = 0; ni < g->n_nodes; ni++)
        if (id[ni] >= 0) ((kiln_tactic *)g->nodes[ni].attrs)->id = id[ni];
}

/* kiln's direct kernel (KILN_FC_TACTIC_DIRECT) against each layer's tuned
 * tactic, inside the network. Timed alone, warm, oneDNN's kernels win most
 * layers; in the network, where the weights come from memory and the input
 * from the other core's cache, the direct kernel wins the weight-heavy ones
 * (ResNet-50's last stage at batch 1, 2 threads: 1x1 layers 410-500 us
 * against 510-610). So variant 1 runs it in every layer it fits (except
 * Winograd ones: 2.25 to 4 times fewer multiplications), variant 0 in
 * none; each layer takes it where its median time is under DIRECT_MARGIN
 * of the tuned tactic's; then that mix runs against variant 0 and is kept
 * only where the whole engine runs faster. Only layers whose opt shapes
 * are known (vi) take part. The choices go into the timing cache (the
 * layer's key + NET_KEY: tactic DIRECT, or another id for the tuned one); a
 * build that finds every candidate there takes them without a trial. */
#define NET_KEY "|in-network"
static kiln_status network_direct(kiln_layout_ctx *c) {
    kiln_graph *g = c->g;
    const kiln_tinfo *vi = c->vi;
    size_t nn = (size_t)g->n_nodes;
    tac_variants tv = {kiln__malloc(2 * nn * sizeof *tv.id + 1)};
    double *lus = kiln__calloc((size_t)KILN_TRIAL_MAX_RUNS * 2 * nn + 1, sizeof *lus);
    if (!tv.id || !lus) {
        kiln__free(tv.id);
        kiln__free(lus);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (direct-kernel trial)");
    }
    int cand = 0, cached = 0;
    for (size_t ni = 0; ni < nn; ni++) {
        kiln_node *n = &g->nodes[ni];
        tv.id[ni] = tv.id[nn + ni] = -1;
        if (n->dead || n->op_id != KILN_OP_FusedConv || n->device != KILN_DEVICE_CPU || n->n_in < 2 ||
            n->in[0] < 0 || n->in[1] < 0)
            continue;
        const kiln_fused_conv_attrs *fa = n->attrs;
        const kiln_tinfo *x = &vi[n->in[0]], *w = &vi[n->in[1]];
        if ((fa->layout & (KILN_FC_LAYOUT_X_BF16 | KILN_FC_LAYOUT_Y_BF16)) || fa->tactic.id == KILN_FC_TACTIC_DIRECT ||
            kiln__fc_wino_tile(fa->tactic.id) || x->rank < 0 || w->rank < 0 ||
            !kiln__fc_direct_fits(fa, x->rank, x->dims, w->rank, w->dims))
            continue;
        tv.id[ni] = fa->tactic.id;
        tv.id[nn + ni] = KILN_FC_TACTIC_DIRECT;
        cand++;
        int32_t cid;
        float cus;
        if (c->cache_get(c, n, NET_KEY, &cid, &cus)) {
            cached++;
            lus[ni] = cus;
            if (cid != KILN_FC_TACTIC_DIRECT) tv.id[nn + ni] = tv.id[ni];
        }
    }
    kiln_status st = KILN_OK;
    int keep = 0;
    if (cand > 0 && cached == cand) {
        keep = 1; /* the cache's choices */
    } else if (cand > 0) {
        for (size_t ni = 0; ni < nn; ni++)
            if (tv.id[ni] >= 0) tv.id[nn + ni] = KILN_FC_TACTIC_DIRECT;
        double t[2][KILN_TRIAL_MAX_RUNS];
        int runs = 0, chosen = 0;
        st = c->trial(c, set_tactics, &tv, t, lus, &runs);
        /* variant 1 becomes the mix of each layer's faster kernel; the
         * direct kernel's median goes into lus[ni] (its time for inspect) */
        for (size_t ni = 0; ni < nn; ni++) {
            if (tv.id[ni] < 0) continue;
            bool take = false;
            if (st == KILN_OK && runs > 0) {
                double m0 = median_of(lus + ni, runs, 2 * nn), m1 = median_of(lus + nn + ni, runs, 2 * nn);
                take = m1 < DIRECT_MARGIN * m0;
                lus[ni] = m1;
            }
            if (take) chosen++;
            else tv.id[nn + ni] = tv.id[ni];
        }
        /* the mix against the tuned tactics, whole runs: each layer was
         * timed among neighbours that had all changed too, and a layer's
         * time depends on where its neighbours left its tensors */
        if (st == KILN_OK && chosen > 0) {
            st = c->trial(c, set_tactics, &tv, t, NULL, &runs);
            keep = st == KILN_OK && runs > 0 && median_of(t[1], runs, 1) < median_of(t[0], runs, 1) ? 1 : 0;
        }
        for (size_t ni = 0; st == KILN_OK && ni < nn; ni++)
            if (tv.id[ni] >= 0) st = c->cache_put(c, &g->nodes[ni], NET_KEY, tv.id[(size_t)keep * nn + ni], (float)lus[ni]);
    }
    if (cand > 0) {
        set_tactics(g, keep, &tv);
        for (size_t ni = 0; ni < nn; ni++)
            if (tv.id[ni] >= 0 && ((kiln_tactic *)g->nodes[ni].attrs)->id == KILN_FC_TACTIC_DIRECT)
                ((kiln_tactic *)g->nodes[ni].attrs)->us = (float)lus[ni];
    }
    kiln__free(tv.id);
    kiln__free(lus);
    return st;
}

/* NHWC tensors between oneDNN layers (above). Each layer that gets
 * one is timed again: one that fails, or that oneDNN runs much slower that
 * way (a reference kernel), is vetoed and the choice made again. Then the
 * float32 ones in nChw16c instead, kept when the engine runs faster so
 * (network_c16). */
static kiln_status choose_layouts(kiln_layout_ctx *c) {
    kiln_graph *g = c->g;
    bool *veto = kiln__calloc((size_t)g->n_nodes + 1, sizeof *veto);
    int *checked = kiln__calloc((size_t)g->n_nodes + 1, sizeof *checked);
    if (!veto || !checked) {
        kiln__free(veto);
        kiln__free(checked);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (layouts)");
    }
    kiln_status st = KILN_OK;
    bool bad = true;
    for (int round = 0; round < 16 && bad; round++) {
        bad = false;
        if (kiln__fc_choose_layouts(g, veto, false) == 0) break;
        for (int ni = 0; ni < g->n_nodes && st == KILN_OK; ni++) {
            int lay = g->nodes[ni].op_id == KILN_OP_FusedConv ? ((kiln_fused_conv_attrs *)g->nodes[ni].attrs)->layout : 0;
            if (!lay || checked[ni] == lay + 1) continue;
            double us = -2;
            st = time_layout(c, ni, &us);
            if (us == -2) continue; /* shapes unknown at opt */
            checked[ni] = lay + 1; /* this layout of this layer was timed */
            const kiln_tactic *tac = g->nodes[ni].attrs;
            if (st == KILN_OK && (us < 0 || (tac->us > 0 && us > 2.0 * tac->us + 100.0))) {
                veto[ni] = true;
                bad = true;
            }
        }
    }
    if (bad || st != KILN_OK) { /* give up on NHWC: NCHW is always right */
        kiln__fc_clear_layouts(g);
    } else if (c->device == KILN_DEVICE_CPU && kiln__fc_choose_layouts(g, veto, true) > 0 &&
               kiln__fc_c16_values(g) > 0) {
        /* (a device engine's CPU layers keep NHWC: running that engine
         * here would prepare its device weights before the build is done) */
        st = network_c16(c, veto);
    }
    kiln__free(veto);
    kiln__free(checked);
    return st;
}

/* The CPU backend's layout hook: every layer's tactic first (layouts are
 * chosen for the kernels that run), then the NHWC / nChw16c chains
 * (unless the cpu_layout pass is off), then, for CPU engines, the direct
 * kernel against the tuned tactics inside the network. */
kiln_status kiln__cpu_layouts(kiln_layout_ctx *c) {
    KILN_TRY(c->tune(c));
    if (!c->cpu_tuned) return KILN_OK;
    if (!(c->disabled & (1u << KILN_PASS_CPU_LAYOUT))) KILN_TRY(choose_layouts(c));
    /* (CPU engines only, as network_c16) */
    if (c->device == KILN_DEVICE_CPU && kiln__direct_fast_available()) KILN_TRY(network_direct(c));
    return KILN_OK;
}
