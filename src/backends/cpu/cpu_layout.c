/* cpu_layout.c -- the CPU backend's layout choice (cpu_layout.h). */
#include "backends/cpu/cpu_layout.h"

#include "backends/cpu/cpu_features.h"
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
    if (!n->attrs) return NULL;
    if (n->op_id == KILN_OP_FusedConv) return &((kiln_fused_conv_attrs *)n->attrs)->layout;
    if (n->op_id == KILN_OP_MaxPool || n->op_id == KILN_OP_GlobalAveragePool)
        return &((kiln_pool_attrs *)n->attrs)->layout;
    if (n->op_id == KILN_OP_PwDwConv) return &((kiln_pwdw_attrs *)n->attrs)->layout;
    return NULL;
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
        if (n->device != KILN_DEVICE_CPU) continue; /* (cuda_nhwc.c sets the GPU layers' layouts) */
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
