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
    /* The ONNX nodes this node came from (kiln__node_source). n_src == 0:
     * the node itself (its name), unless `added`; a fused layer lists
     * every node it replaced, as n_src NUL-terminated names one after
     * another in src (owned). */
    char *src;
    int n_src;
    bool added;            /* made by kiln (a Cast, a layout conversion): no ONNX source */
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
    const kiln_subgraph_io *sub; /* how its control-flow nodes load their subgraphs (op.h;
                                    set by the importer and the engine loader) */
    /* name -> value index hash table */
    int *hash;
    int hash_cap;
    /* the readers of each value as of the last link (graph.c: kiln__graph_link,
       kiln__graph_relink, kiln__graph_uses); owned, NULL until linked */
    struct kiln_graph_links *links;
    /* kiln__graph_add_const: per base name, the number its next name tries
       first (every lower one is taken); owned, emptied when values go */
    struct kiln_const_seq *const_seq;
} kiln_graph;

/* One reader of a value: input `slot` of node `node`. */
typedef struct kiln_use {
    int node, slot;
} kiln_use;

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
/* Recomputes producer and n_uses from live nodes, and the readers of every
 * value (kiln__graph_uses): O(size of the graph). */
KILN_PRIVATE void kiln__graph_link(kiln_graph *g);
/* The same after a local rewrite that changed only nodes[0..count) (their
 * inputs, outputs or liveness; listing a node twice is harmless) and
 * appended nodes and values: O(size of those nodes), so that a pass making
 * one rewrite per layer stays linear. The graph's inputs and outputs must
 * not have changed, nor nodes moved (kiln__graph_link after those). Falls
 * back to kiln__graph_link when the readers are not known. */
KILN_PRIVATE void kiln__graph_relink(kiln_graph *g, const int *nodes, int count);
/* The live readers of value v as of the last link or relink, *count of
 * them in no particular order (a node reading v twice is there twice; a
 * graph output's extra use is not); NULL when they are not known (out of
 * memory, v added since): then scan the nodes. */
KILN_PRIVATE const kiln_use *kiln__graph_uses(const kiln_graph *g, int v, int *count);
/* The work done so far by linking (a node visited: one), relinking, the
 * optimizer's scans for readers and kiln__graph_add_const's search for a
 * free name (one a name tried), each adding with kiln__graph_note_visits:
 * a counter for tests, which check that optimizing a graph of n layers
 * does O(n) of it (test_optimizer_diff, test_rewrites_linear). */
KILN_PRIVATE uint64_t kiln__graph_link_visits(const kiln_graph *g);
KILN_PRIVATE void kiln__graph_note_visits(const kiln_graph *g, int64_t nodes);
/* Deep copy. */
KILN_PRIVATE kiln_status kiln__graph_clone(const kiln_graph *g, kiln_graph **out);

/* Source k (0 <= k < kiln__node_num_sources(n)) of node n: the name of an
 * ONNX node it came from. */
KILN_PRIVATE int kiln__node_num_sources(const kiln_node *n);
KILN_PRIVATE const char *kiln__node_source(const kiln_node *n, int k);
/* Sets n's sources to the sources of nodes from[0..n_from) of g (in that
 * order, each name once); n may be one of them. */
KILN_PRIVATE kiln_status kiln__node_merge_sources(kiln_graph *g, int n, const int *from, int n_from);
/* Sets n's sources to `count` names packed in `packed` (`bytes` bytes, each
 * NUL-terminated: copied). */
KILN_PRIVATE kiln_status kiln__node_set_sources(kiln_node *n, const char *packed, size_t bytes, int count);

/* Fails (KILN_ERR_MODEL, naming the node) if a required input of n (index
 * below op->min_inputs) is absent. Ops' infer functions rely on it. */
KILN_PRIVATE kiln_status kiln__node_check_inputs(const kiln_node *n);

/* Whether value v is one of the graph's outputs: O(1) once linked (the
 * flag kiln__graph_link sets), else a scan of the outputs. */
KILN_PRIVATE bool kiln__graph_is_output(const kiln_graph *g, int v);
/* Adds a new constant value (data copied) named after `base` and returns its index. */
KILN_PRIVATE kiln_status kiln__graph_add_const(kiln_graph *g, const char *base, kiln_dtype dtype,
                                               int rank, const int64_t *dims, const void *data,
                                               int *out);
/* Moves the nodes added to g after its first n_nodes0 ones so that each
 * follows node after[j - n_nodes0] (-1: before every node), in creation
 * order, then re-links g. Used by the rewrites that insert conversions. */
KILN_PRIVATE kiln_status kiln__nodes_place_after(kiln_graph *g, int n_nodes0, const int *after);

/* ---- calling one node (src/ir/call.c) -----------------------------------
 * The glue between a node and its op's infer and kernel, shared by every
 * caller: the runtime (context.c), the memory planner (plan.c), constant
 * folding (passes.c), control flow (misc_control.c) and the tuner:
 *
 *     kiln_call c;
 *     KILN_TRY(kiln__call_begin(&c, g, n));
 *     kiln__call_input(&c, i, &info, data);   for each present input i
 *     KILN_TRY(kiln__call_infer(&c, runtime, node_state, exact));
 *     c.out[i]: output infos; set c.out_t[i].data (shapes filled)
 *     kiln__call_args(&c, ws, ws_size, pool, node_state);
 *     then c.ka to a kernel (op->cpu, a backend's run), c.ia to workspace() */
#define KILN_CALL_MAX 64 /* outputs of one node; inputs held inline (more: on the heap) */
typedef struct kiln_call {
    const kiln_node *n;
    /* n_in each: the inline arrays below, or one heap block (in_heap) for a
     * node with more than KILN_CALL_MAX inputs (a Concat of 200 tensors) */
    kiln_tinfo *in_info;
    kiln_tensor *in_t;
    const kiln_tinfo **in_ip;
    const kiln_tensor **in_tp;
    void *in_heap;
    kiln_tinfo out[KILN_CALL_MAX];
    kiln_tensor out_t[KILN_CALL_MAX];
    kiln_tinfo *out_ip[KILN_CALL_MAX];
    kiln_tensor *out_tp[KILN_CALL_MAX];
    kiln_tinfo in_info_buf[KILN_CALL_MAX];
    kiln_tensor in_t_buf[KILN_CALL_MAX];
    const kiln_tinfo *in_ip_buf[KILN_CALL_MAX];
    const kiln_tensor *in_tp_buf[KILN_CALL_MAX];
    kiln_infer_args ia;
    kiln_kernel_args ka;
} kiln_call;
/* Starts a call of node n of graph g (its subgraph loader goes to the
 * args): every input absent until kiln__call_input. Fails for a node with
 * more than KILN_CALL_MAX outputs, or when memory for its inputs is short;
 * after it succeeds, kiln__call_end must follow. The call must not be
 * copied (its pointers point into it). */
KILN_PRIVATE kiln_status kiln__call_begin(kiln_call *c, const kiln_graph *g, const kiln_node *n);
/* Frees what kiln__call_begin allocated (nothing for most nodes). */
KILN_PRIVATE void kiln__call_end(kiln_call *c);
/* Input i: what infer sees (dtype, shape, data when known on the host) and
 * the bytes the kernel reads (data: in the kernel's memory; may be NULL
 * when no kernel runs or it reads shapes only). */
KILN_PRIVATE void kiln__call_input(kiln_call *c, int i, const kiln_tinfo *info, void *data);
/* Checks the required inputs and runs the op's infer (kiln__infer) into
 * c->out (rank -1 before, or 0 with exact); copies the shapes into c->out_t
 * (data NULL). exact: every output must have an exact shape (a kernel is
 * to run). */
KILN_PRIVATE kiln_status kiln__call_infer(kiln_call *c, bool runtime, kiln_node_state *ns, bool exact);
/* The rest of the kernel args (c->ka). */
KILN_PRIVATE void kiln__call_args(kiln_call *c, void *ws, size_t ws_size, kiln_pool *pool, kiln_node_state *ns);
/* Runs the node's reference kernel (op->cpu) on the host after
 * kiln__call_infer(exact): allocates each output (c->out_t[i].data, the
 * caller's to kiln__aligned_free after success; freed on failure) and the
 * op's workspace (freed), with `pool` (may be NULL) and no node state.
 * Fails without running when the workspace would exceed max_workspace
 * bytes (SIZE_MAX: no limit). Constant folding, the memory planner's
 * evaluation of small values (runtime/plan.c) and the tuner's host
 * reference (builder/tune.c) call it. */
KILN_PRIVATE kiln_status kiln__call_run_host(kiln_call *c, kiln_pool *pool, size_t max_workspace);

/* Inference (src/ir/infer.c) */
/* Shape and type inference over the whole graph (build time). */
KILN_PRIVATE kiln_status kiln__graph_infer(kiln_graph *g);
/* op->infer (kiln__infer) of node ni over the graph's value infos into
 * outs[0..n_out) (data left NULL). */
KILN_PRIVATE kiln_status kiln__graph_infer_node(kiln_graph *g, int ni, bool runtime, kiln_tinfo *outs);
/* The same for node n of g as the graph is now (e.g. with some dtypes
 * changed to ask whether the op would take them): every caller that asks
 * an op's inference about a node of a graph goes through it. outs holds
 * n->n_out entries (at most KILN_CALL_MAX, else it fails). */
KILN_PRIVATE kiln_status kiln__node_infer(const kiln_graph *g, const kiln_node *n, bool runtime, kiln_tinfo *outs);
/* Merges an inferred shape with what the model declared: known inferred
 * dims win; where inference knows nothing, a declared dim (known or
 * symbolic) is kept. */
KILN_PRIVATE void kiln__tinfo_merge(kiln_tinfo *dst, const kiln_tinfo *inferred);

/* Passes (src/passes/) */
/* Evaluates nodes whose inputs are all constant (with the CPU kernels). */
KILN_PRIVATE kiln_status kiln__pass_fold_constants(kiln_graph *g);
/* Gives the outputs of Expand, Reshape, ConstantOfShape and Range the dims
 * (known or symbolic) that their shape inputs, computed at run time from
 * Shape entries, make the same for every input shape
 * (src/passes/shape_values.c); infers the graph again as it goes. */
KILN_PRIVATE kiln_status kiln__pass_shape_values(kiln_graph *g);
/* Removes nodes whose outputs nobody uses, and unused constants. */
KILN_PRIVATE kiln_status kiln__pass_dce(kiln_graph *g);
/* The graph optimizer (src/passes/optimize.c): fusions and layout choices
 * for the given target device. A fusion is applied only where the device's
 * backend supports the fused layer. Keeps the graph's inputs, outputs and
 * their names; a fused node's name lists the nodes it came from. */
/* Optimizer passes that can be switched off one by one (bits of
 * kiln_optimize_opts.disabled; kiln_builder_disable_pass names them as
 * kiln_pass_name does, in this order: the order they run in). */
enum {
    KILN_PASS_FOLD_BN,                /* fuse_conv.c */
    KILN_PASS_FUSE_CONV,
    KILN_PASS_FUSE_PWDW,
    KILN_PASS_FUSE_SE,                /* fuse_se.c */
    KILN_PASS_MERGE_TRANSPOSE_RESHAPE, /* fuse_transformer.c */
    KILN_PASS_FUSE_LAYERNORM,
    KILN_PASS_FUSE_RMSNORM,
    KILN_PASS_FUSE_GELU,
    KILN_PASS_FUSE_ATTENTION,
    KILN_PASS_FOLD_LAYER_SCALE,
    KILN_PASS_FUSE_MATMUL,
    KILN_PASS_FUSE_QKV,
    KILN_PASS_SHARE_ATTENTION_MASK,
    KILN_PASS_ATTENTION_MASK_ROWS,
    KILN_PASS_MERGE_MOVEMENT,         /* fuse_movement.c */
    KILN_PASS_FOLD_ADDENDS,           /* fuse_norm.c */
    KILN_PASS_FUSE_ADD_LAYERNORM,
    KILN_PASS_FUSE_POINTWISE,         /* fuse_pointwise.c (after the precision pass) */
    KILN_PASS_SHRINK_CONSTANTS,       /* fuse_pointwise.c (after fuse_pointwise) */
    KILN_PASS_CPU_LAYOUT,             /* backends/cpu/cpu_layout.c (kiln__fc_choose_layouts) */
    KILN_PASS_CUDA_NHWC,              /* backends/cuda/cuda_layout.c */
    KILN_PASS_COUNT
};

typedef struct kiln_optimize_opts {
    int device;            /* kiln_device the plan is for */
    int precision;         /* kiln_precision */
    bool disable;          /* run no optimization (for debugging and tests) */
    uint32_t disabled;     /* bit KILN_PASS_x set: pass x does not run */
    /* fp16/bf16 device plans: layers kept in float32 (src/passes/precision.h) */
    const char *const *fp32_layers;
    int n_fp32_layers;
} kiln_optimize_opts;
KILN_PRIVATE kiln_status kiln__pass_optimize(kiln_graph *g, const kiln_optimize_opts *o);
/* The KILN_PASS_* id of the pass called `name` (kiln_pass_name), or -1. */
KILN_PRIVATE int kiln__pass_find(const char *name);
/* Whether pass `pass` (KILN_PASS_*) runs under o. */
static inline bool kiln__pass_on(const kiln_optimize_opts *o, int pass) {
    return !o->disable && !(o->disabled & (1u << pass));
}
/* Compacts the graph: drops dead nodes and unreferenced values. */
KILN_PRIVATE kiln_status kiln__graph_compact(kiln_graph *g);

#endif
