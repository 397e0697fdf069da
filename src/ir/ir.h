/* ir.h -- kiln's graph IR: the one place every front end leads to and every
 * backend starts from. A graph is a list of values (tensors) and nodes
 * (operator applications) in topological order; nodes refer to values by
 * index. An engine's plan is such a graph after the passes have run. */
#ifndef KILN_IR_H
#define KILN_IR_H

#include "ops/op.h"

enum {
    KILN_VALUE_INPUT = 1u << 0,   /* graph input bound at run time */
    KILN_VALUE_OUTPUT = 1u << 1,  /* graph output */
    KILN_VALUE_CONST = 1u << 2,   /* has data (initializer or folded) */
};

typedef struct kiln_value {
    char *name;
    kiln_tinfo info;       /* info.data == data when constant */
    void *data;            /* constant bytes (owned unless data_borrowed) */
    size_t nbytes;
    bool data_borrowed;    /* points into a mapped engine file */
    uint32_t flags;
    int producer;          /* node index, or -1 */
    int n_uses;            /* consumers among live nodes (+1 if graph output) */
} kiln_value;

typedef struct kiln_node {
    int op_id;
    const kiln_op_def *op;
    char *name;
    int n_in, n_out;
    int *in;               /* value indices; -1 for an absent optional input */
    int *out;
    void *attrs;           /* op->attr_size bytes, owned */
    int device;            /* kiln_device the node runs on (set by the builder) */
    bool dead;             /* removed by a pass; skipped everywhere */
} kiln_node;

typedef struct kiln_graph {
    kiln_value *values;
    int n_values, cap_values;
    kiln_node *nodes;
    int n_nodes, cap_nodes;
    int *inputs;           /* graph inputs (value indices), in model order */
    int n_inputs, cap_inputs;
    int *outputs;
    int n_outputs, cap_outputs;
    char **symbols;        /* names of symbolic dims; KILN_DIM_SYM(k) -> symbols[k] */
    int n_symbols, cap_symbols;
    int64_t opset;         /* ai.onnx opset of the source model */
    /* name -> value index hash table */
    int *hash;
    int hash_cap;
} kiln_graph;

KILN_PRIVATE kiln_status kiln__graph_create(kiln_graph **out);
KILN_PRIVATE void kiln__graph_free(kiln_graph *g);
/* Adds a value named `name` (copied; NULL or "" gets a fresh unique name).
 * Fails if the name exists. */
KILN_PRIVATE kiln_status kiln__graph_add_value(kiln_graph *g, const char *name, int *out);
KILN_PRIVATE int kiln__graph_find_value(const kiln_graph *g, const char *name); /* -1 if none */
/* Makes value v a constant holding a copy of `data` (or zeros if NULL). */
KILN_PRIVATE kiln_status kiln__value_set_const(kiln_value *v, kiln_dtype dtype, int rank,
                                               const int64_t *dims, const void *data);
/* Appends a node; copies `in`, `out` and `attrs` (op->attr_size bytes). */
KILN_PRIVATE kiln_status kiln__graph_add_node(kiln_graph *g, int op_id, const char *name, int n_in,
                                              const int *in, int n_out, const int *out,
                                              const void *attrs, int *node_out);
KILN_PRIVATE kiln_status kiln__graph_add_symbol(kiln_graph *g, const char *name, int *out);
/* Recomputes producer and n_uses from live nodes. */
KILN_PRIVATE void kiln__graph_link(kiln_graph *g);
/* Deep copy. */
KILN_PRIVATE kiln_status kiln__graph_clone(const kiln_graph *g, kiln_graph **out);
KILN_PRIVATE size_t kiln__value_nbytes(const kiln_tinfo *t); /* 0 if unknown */

/* Fails (KILN_ERR_MODEL, naming the node) if a required input of n (index
 * below op->min_inputs) is absent. Ops' infer functions rely on it. */
KILN_PRIVATE kiln_status kiln__node_check_inputs(const kiln_node *n);

/* Passes (src/passes/) */
/* Shape and type inference over the whole graph (build time). */
KILN_PRIVATE kiln_status kiln__pass_infer(kiln_graph *g);
/* Evaluates nodes whose inputs are all constant (with the CPU kernels). */
KILN_PRIVATE kiln_status kiln__pass_fold_constants(kiln_graph *g);
/* Removes nodes whose outputs nobody uses, and unused constants. */
KILN_PRIVATE kiln_status kiln__pass_dce(kiln_graph *g);
/* The graph optimizer (src/passes/optimize.c): fusions and layout choices
 * for the given target device. A fusion is applied only where the device's
 * backend supports the fused layer. Keeps the graph's inputs, outputs and
 * their names; a fused node's name lists the nodes it came from. */
typedef struct kiln_optimize_opts {
    int device;            /* kiln_device the plan is for */
    int precision;         /* kiln_precision */
    bool disable;          /* run no optimization (for debugging and tests) */
    /* fp16/bf16 device plans: layers kept in float32 (src/passes/precision.h) */
    const char *const *fp32_layers;
    int n_fp32_layers;
} kiln_optimize_opts;
KILN_PRIVATE kiln_status kiln__pass_optimize(kiln_graph *g, const kiln_optimize_opts *o);
/* Compacts the graph: drops dead nodes and unreferenced values. */
KILN_PRIVATE kiln_status kiln__graph_compact(kiln_graph *g);

#endif
