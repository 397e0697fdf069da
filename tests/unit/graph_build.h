/* graph_build.h -- helpers for unit tests that build kiln graphs in memory
 * (values, constants, nodes, inputs/outputs) and wrap them as models,
 * without going through ONNX. Header-only (static functions): include it in
 * one test program. Failures of the graph API abort (a test bug). */
#ifndef KILN_TEST_GRAPH_BUILD_H
#define KILN_TEST_GRAPH_BUILD_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "ops/nn_attrs.h"
#include "runtime/engine.h"

static inline int add_val(kiln_graph *g, const char *name) {
    int v = -1;
    if (kiln__graph_add_value(g, name, &v) != KILN_OK) {
        fprintf(stderr, "add_val: %s\n", kiln_last_error());
        abort();
    }
    return v;
}

/* A float32 graph input. */
static inline int add_input(kiln_graph *g, const char *name, int rank, const int64_t *dims) {
    int v = add_val(g, name);
    g->values[v].info.dtype = KILN_DTYPE_FLOAT32;
    g->values[v].info.rank = rank;
    memcpy(g->values[v].info.dims, dims, sizeof(int64_t) * (size_t)rank);
    g->values[v].flags |= KILN_VALUE_INPUT;
    if (kiln__grow((void **)&g->inputs, &g->cap_inputs, g->n_inputs + 1, sizeof(int)) != KILN_OK) abort();
    g->inputs[g->n_inputs++] = v;
    return v;
}

static inline void mark_output(kiln_graph *g, int v) {
    g->values[v].flags |= KILN_VALUE_OUTPUT;
    if (kiln__grow((void **)&g->outputs, &g->cap_outputs, g->n_outputs + 1, sizeof(int)) != KILN_OK) abort();
    g->outputs[g->n_outputs++] = v;
}

static uint64_t gb_rng_state = 12345;
/* Deterministic uniform float in [-1, 1). */
static inline float frand(void) {
    gb_rng_state = gb_rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(gb_rng_state >> 40) / 16777216.0 * 2.0 - 1.0);
}

/* A float32 constant with random values in [lo, hi). */
static inline int add_const(kiln_graph *g, const char *name, int rank, const int64_t *dims, float lo, float hi) {
    int64_t n = kiln__numel(rank, dims);
    float *d = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!d) abort();
    for (int64_t i = 0; i < n; i++) d[i] = lo + (hi - lo) * (frand() * 0.5f + 0.5f);
    int v = add_val(g, name);
    if (kiln__value_set_const(&g->values[v], KILN_DTYPE_FLOAT32, rank, dims, d) != KILN_OK) abort();
    free(d);
    return v;
}

static inline int add_scalar(kiln_graph *g, const char *name, float x) {
    int v = add_val(g, name);
    if (kiln__value_set_const(&g->values[v], KILN_DTYPE_FLOAT32, 0, NULL, &x) != KILN_OK) abort();
    return v;
}

/* A one-output node; its output is named "<name>_out". */
static inline int add_node(kiln_graph *g, int op, const char *name, int n_in, const int *in,
                    const void *attrs) {
    char oname[160];
    snprintf(oname, sizeof oname, "%s_out", name);
    int out = add_val(g, oname);
    if (kiln__graph_add_node(g, op, name, n_in, in, 1, &out, attrs, NULL) != KILN_OK) abort();
    return out;
}

static inline int add_unary(kiln_graph *g, int op, const char *name, int x, const void *attrs) {
    return add_node(g, op, name, 1, (int[]){x}, attrs);
}

/* A two-input node with zeroed (default) attributes. */
static inline int add_binary(kiln_graph *g, int op, const char *name, int a, int b) {
    unsigned char zero[64] = {0}; /* more than any binary op's attrs */
    return add_node(g, op, name, 2, (int[]){a, b}, zero);
}

/* Conv with a random k x k weight and bias: C -> M channels. */
static inline int add_conv(kiln_graph *g, const char *name, int x, int64_t C, int64_t M, int k, int stride,
                           int pad, int group, int dil) {
    kiln_conv_attrs ca;
    memset(&ca, 0, sizeof ca);
    ca.group = group;
    ca.n_strides = ca.n_pads = ca.n_dilations = 0;
    ca.n_strides = 2;
    ca.strides[0] = ca.strides[1] = stride;
    ca.n_pads = 4;
    for (int i = 0; i < 4; i++) ca.pads[i] = pad;
    ca.n_dilations = 2;
    ca.dilations[0] = ca.dilations[1] = dil;
    char wn[400], bn[400];
    snprintf(wn, sizeof wn, "%s_W", name);
    snprintf(bn, sizeof bn, "%s_B", name);
    int64_t wd[4] = {M, C / group, k, k}, bd[1] = {M};
    float s = 1.0f / sqrtf((float)(C / group * k * k));
    int in[3] = {x, add_const(g, wn, 4, wd, -s, s), add_const(g, bn, 1, bd, -0.1f, 0.1f)};
    return add_node(g, KILN_OP_Conv, name, 3, in, &ca);
}

/* BatchNormalization (inference) with random per-channel parameters. */
static inline int add_bnorm(kiln_graph *g, const char *name, int x, int64_t C) {
    kiln_bn_attrs ba = {.epsilon = 1e-5f, .spatial = 1};
    int64_t d[1] = {C};
    char n[5][64];
    const char *sfx[4] = {"scale", "bias", "mean", "var"};
    for (int i = 0; i < 4; i++) snprintf(n[i], sizeof n[i], "%s_%s", name, sfx[i]);
    int in[5] = {x, add_const(g, n[0], 1, d, 0.5f, 1.5f), add_const(g, n[1], 1, d, -0.2f, 0.2f),
                 add_const(g, n[2], 1, d, -0.2f, 0.2f), add_const(g, n[3], 1, d, 0.5f, 2.0f)};
    return add_node(g, KILN_OP_BatchNormalization, name, 5, in, &ba);
}

/* Wraps g (shapes inferred) as a model that owns it. */
static inline kiln_model *model_of(kiln_graph *g) {
    kiln_model *m = kiln__calloc(1, sizeof *m);
    if (!m) abort();
    m->graph = g;
    if (kiln__graph_infer(g) != KILN_OK) {
        fprintf(stderr, "infer: %s\n", kiln_last_error());
        abort();
    }
    return m;
}

/* Layers of the engine's plan with op id `op` (0 for a NULL engine). */
static inline int count_op(const kiln_engine *e, int op) {
    int n = 0;
    for (int i = 0; e && i < e->graph->n_nodes; i++) n += e->graph->nodes[i].op_id == op;
    return n;
}

/* The plan's layer named `name`, or NULL (with a note on stderr). */
static inline const kiln_node *find_layer(const kiln_engine *e, const char *name) {
    for (int i = 0; e && i < e->graph->n_nodes; i++)
        if (!strcmp(e->graph->nodes[i].name, name)) return &e->graph->nodes[i];
    fprintf(stderr, "  no layer named %s\n", name);
    return NULL;
}

/* max |a - b| / max(1, max |b|); infinite when NaNs differ. */
static inline double rel_err(const float *a, const float *b, int64_t n) {
    double m = 1.0, d = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (fabs(b[i]) > m) m = fabs(b[i]);
        if (fabs((double)a[i] - b[i]) > d) d = fabs((double)a[i] - b[i]);
        if (isnan(a[i]) != isnan(b[i])) d = INFINITY;
    }
    return d / m;
}

/* max |a - b| / max(1, max finite |b|) over finite pairs; infinite when NaN
 * or infinite values differ in place (or sign). */
static inline double special_rel_err(const float *a, const float *b, int64_t n) {
    double m = 1.0, d = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(b[i]) && fabs(b[i]) > m) m = fabs(b[i]);
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) {
            if (isnan(a[i]) != isnan(b[i])) d = INFINITY;
        } else if (isinf(a[i]) || isinf(b[i])) {
            if (a[i] != b[i]) d = INFINITY;
        } else if (fabs((double)a[i] - b[i]) > d) {
            d = fabs((double)a[i] - b[i]);
        }
    }
    return d / m;
}

#endif
