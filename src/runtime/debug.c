/* debug.c -- what the runtime needs to show a run's intermediate tensors
 * (kiln_context_set_layer_callback, docs/debugging.md): the layout in which
 * a layer leaves a tensor's bytes, its conversion back to the dense
 * row-major order of the tensor's shape, and the test-only planted bug
 * (KILN_TEST_PLANT_BUG).
 *
 * Every value of a plan has the shape of the model's tensor it stands for.
 * Its bytes are in that row-major order except where the layer producing
 * it was told to leave them otherwise (its attrs' layout, set by the
 * builder for chains of convolution layers): NHWC (CPU oneDNN / Winograd
 * chains; CUDA cuDNN chains, their pools included), NHWC holding bf16 under a float32 type (CPU
 * bf16 chains) or channel-blocked nChw16c (CPU). The readers of such a
 * value know its layout; a debugger must be told. */
#include "runtime/debug.h"

#include "ir/layouts.h"

#include <stdio.h>
#include <stdlib.h>

/* The layout the producer of v writes it in by its attributes (layout_io), else plain. */
static int producer_layout(const kiln_graph *g, int v) {
    int p = g->values[v].producer;
    if (p < 0 || p >= g->n_nodes || g->values[v].info.rank != 4) return KILN_VLAYOUT_PLAIN;
    const kiln_node *n = &g->nodes[p];
    if (!n->attrs || n->n_out < 1 || n->out[0] != v || !n->op->layout_io) return KILN_VLAYOUT_PLAIN;
    kiln_io_layout io;
    n->op->layout_io(*n->op->layout_field(n->attrs), &io);
    return io.y;
}

int *kiln__value_layouts(const kiln_graph *g) {
    int *lay = kiln__malloc(((size_t)g->n_values + 1) * sizeof *lay);
    if (!lay) return NULL;
    bool known = kiln__plan_layouts(g, true, lay) == KILN_OK;
    if (!known) kiln__clear_error();
    for (int v = 0; v < g->n_values; v++)
        if (!known || lay[v] < 0) lay[v] = producer_layout(g, v);
    return lay;
}

int kiln__value_layout(const kiln_graph *g, int v) {
    if (v < 0 || v >= g->n_values) return KILN_VLAYOUT_PLAIN;
    int *lay = kiln__value_layouts(g);
    int l = lay ? lay[v] : producer_layout(g, v);
    kiln__free(lay);
    return l;
}

const char *kiln__vlayout_name(int layout) {
    switch (layout) {
    case KILN_VLAYOUT_NHWC: return "nhwc";
    case KILN_VLAYOUT_NHWC_BF16: return "nhwc-bf16";
    case KILN_VLAYOUT_C16: return "nchw16c";
    default: return "plain";
    }
}

size_t kiln__vlayout_stored_bytes(int layout, const kiln_tensor *t) {
    kiln_tinfo ti = {.dtype = t->dtype, .rank = t->rank};
    memcpy(ti.dims, t->dims, sizeof ti.dims);
    size_t nb = kiln__value_nbytes(&ti);
    return layout == KILN_VLAYOUT_NHWC_BF16 ? nb / 2 : nb;
}

/* Element (n, c, h, w) of a [N, C, H, W] tensor stored in `layout`: its index
 * among the stored elements. */
static int64_t stored_index(int layout, const int64_t *d, int64_t n, int64_t c, int64_t h, int64_t w) {
    int64_t C = d[1], H = d[2], W = d[3];
    if (layout == KILN_VLAYOUT_C16) return (((n * (C / 16) + c / 16) * H + h) * W + w) * 16 + c % 16;
    return ((n * H + h) * W + w) * C + c; /* NHWC */
}

/* Converts between the stored bytes `raw` of a value in `layout` (t: its
 * dtype and shape) and the dense row-major `logical` ones, in the direction
 * `to_logical` says. */
static kiln_status vlayout_convert(int layout, const kiln_tensor *t, void *raw, void *logical, bool to_logical) {
    size_t es = kiln_dtype_size(t->dtype);
    int64_t numel = kiln__numel(t->rank, t->dims);
    if (numel < 0 || !es) return KILN_FAIL(KILN_ERR_INTERNAL, "layout view: tensor of unknown size");
    if (layout == KILN_VLAYOUT_PLAIN) {
        if (numel) memcpy(to_logical ? logical : raw, to_logical ? raw : logical, (size_t)numel * es);
        return KILN_OK;
    }
    if (t->rank != 4 || (layout == KILN_VLAYOUT_C16 && t->dims[1] % 16) ||
        (layout == KILN_VLAYOUT_NHWC_BF16 && t->dtype != KILN_DTYPE_FLOAT32))
        return KILN_FAIL(KILN_ERR_INTERNAL, "layout view: a %s tensor of rank %d, dtype %s", kiln__vlayout_name(layout),
                         t->rank, kiln_dtype_name(t->dtype));
    const int64_t *d = t->dims;
    int64_t i = 0;
    for (int64_t n = 0; n < d[0]; n++)
        for (int64_t c = 0; c < d[1]; c++)
            for (int64_t h = 0; h < d[2]; h++)
                for (int64_t w = 0; w < d[3]; w++, i++) {
                    int64_t s = stored_index(layout, d, n, c, h, w);
                    char *lp = (char *)logical + (size_t)i * es;
                    if (layout == KILN_VLAYOUT_NHWC_BF16 && to_logical)
                        ((float *)logical)[i] = kiln__bf16_to_f32(((const uint16_t *)raw)[s]);
                    else if (layout == KILN_VLAYOUT_NHWC_BF16)
                        ((uint16_t *)raw)[s] = kiln__f32_to_bf16(((const float *)logical)[i]);
                    else if (to_logical)
                        memcpy(lp, (const char *)raw + (size_t)s * es, es);
                    else
                        memcpy((char *)raw + (size_t)s * es, lp, es);
                }
    return KILN_OK;
}

kiln_status kiln__vlayout_to_logical(int layout, const kiln_tensor *t, const void *raw, void *dst) {
    return vlayout_convert(layout, t, (void *)raw, dst, true);
}

kiln_status kiln__vlayout_from_logical(int layout, const kiln_tensor *t, const void *logical, void *raw) {
    return vlayout_convert(layout, t, raw, (void *)logical, false);
}

/* ---- KILN_TEST_PLANT_BUG ---------------------------------------------------- */

int kiln__plant_bug_layer(const kiln_graph *g, bool say) {
    const char *want = getenv("KILN_TEST_PLANT_BUG");
    if (!want || !*want) return -1;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && g->nodes[i].n_out > 0 && g->nodes[i].out[0] >= 0 &&
            !strcmp(g->nodes[i].op->name, want)) {
            char pn[512];
            if (say)
                fprintf(stderr,
                        "kiln: KILN_TEST_PLANT_BUG=%s: the output of layer %d '%s' is made wrong on purpose (a "
                        "test of kiln debug)\n",
                        want, i, kiln_printable(g->nodes[i].name, pn, sizeof pn));
            return i;
        }
    return -1;
}

void kiln__plant_bug_apply(int layout, const kiln_tensor *t, void *raw) {
    int64_t numel = kiln__numel(t->rank, t->dims);
    for (int64_t i = 0; i < numel; i++) {
        double x;
        if (layout == KILN_VLAYOUT_NHWC_BF16) {
            x = kiln__bf16_to_f32(((uint16_t *)raw)[i]);
            ((uint16_t *)raw)[i] = kiln__f32_to_bf16((float)(1.05 * x + 0.05));
        } else if (kiln__dtype_is_float(t->dtype)) {
            x = kiln__load_f64(t->dtype, raw, i);
            kiln__store_f64(t->dtype, raw, i, 1.05 * x + 0.05);
        } else if (t->dtype == KILN_DTYPE_BOOL) {
            ((uint8_t *)raw)[i] ^= 1;
        } else {
            kiln__store_i64(t->dtype, raw, i, kiln__load_i64(t->dtype, raw, i) + 1);
        }
    }
}
