/* subgraph.c -- the subgraphs of control-flow nodes (If's branches, the
 * bodies of Loop and Scan): each is an ordinary kiln_graph serialized with
 * the engine writer (device CPU) into the bytes of a uint8 constant input
 * of its node (src/ops/misc_control.h says how the inputs line up).
 * kiln__subgraph_io is what the control-flow ops load them with: the
 * importer and the engine loader give it to the graphs they make
 * (kiln_graph.sub), and the graph's callers hand it to the ops' infer and
 * kernels (kiln_infer_args.sub / kiln_kernel_args.sub), so that ops/ calls
 * nothing of format/. */
#include "format/format.h"

#include "backends/cpu/cpu_features.h"

#include <stdio.h>

kiln_status kiln__subgraph_pack(const kiln_graph *g, void **data, size_t *size) {
    kiln_engine e;
    memset(&e, 0, sizeof e);
    e.graph = (kiln_graph *)g;
    e.profiles = kiln__calloc((size_t)g->n_inputs + 1, sizeof *e.profiles);
    if (!e.profiles) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory packing a subgraph");
    /* Profiles are formal here: subgraph inputs take any shape at run time. */
    for (int i = 0; i < g->n_inputs; i++) {
        const kiln_tinfo *t = &g->values[g->inputs[i]].info;
        kiln_profile *p = &e.profiles[i];
        p->rank = t->rank < 0 ? 0 : t->rank;
        for (int d = 0; d < p->rank; d++)
            p->min[d] = p->opt[d] = p->max[d] = t->dims[d] >= 0 ? t->dims[d] : 0;
    }
    e.opts.device = KILN_DEVICE_CPU;
    e.opts.precision = KILN_PRECISION_FP32;
    kiln__cpu_target(e.target, sizeof e.target);
    snprintf(e.builder_version, sizeof e.builder_version, "%s", kiln_version_string());
    kiln_status s = kiln__format_write(&e, data, size);
    kiln__free(e.profiles);
    return s;
}

static kiln_status subgraph_unpack(const void *data, size_t size, const char *what, kiln_graph **graph,
                                   void **blob) {
    *graph = NULL;
    *blob = NULL;
    void *b = kiln__aligned_alloc(size ? size : 1);
    if (!b) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory loading %s", what);
    if (size) memcpy(b, data, size);
    kiln_engine e;
    memset(&e, 0, sizeof e);
    kiln_status s = kiln__format_read(b, size, &e);
    if (s != KILN_OK) {
        kiln__aligned_free(b);
        return kiln__fail_prefix(KILN_ERR_MODEL, "%s is not a valid subgraph", what);
    }
    kiln__free(e.profiles);
    kiln__meta_clear(&e.meta); /* a subgraph's metadata (kiln writes none) is not used */
    if (e.opts.device != KILN_DEVICE_CPU) {
        kiln__graph_free(e.graph);
        kiln__aligned_free(b);
        return KILN_FAIL(KILN_ERR_MODEL, "%s is not a CPU subgraph", what);
    }
    e.graph->sub = &kiln__subgraph_io; /* nested control flow */
    *graph = e.graph;
    *blob = b;
    return KILN_OK;
}

const kiln_subgraph_io kiln__subgraph_io = {.unpack = subgraph_unpack, .free = kiln__graph_free};

kiln_status kiln__subgraph_unpack(const void *data, size_t size, const char *what, kiln_graph **graph,
                                  void **blob) {
    return subgraph_unpack(data, size, what, graph, blob);
}
