/* op.h -- how an operator is described to kiln.
 *
 * Every operator is one `kiln_op_def` descriptor (defined in a file under
 * src/ops/) plus one line in the registry (src/ops/ops.def, which includes
 * one fragment per op family). The descriptor carries everything the rest of
 * kiln needs:
 *
 *   import     ONNX attributes -> the op's POD attribute struct (attr_size
 *              bytes, serialized verbatim into engines). Older opset forms
 *              are normalized here to the newest form, e.g. Squeeze-11's
 *              `axes` attribute becomes a constant input, so kernels see one
 *              form only.
 *   infer      output dtypes and shapes from input infos. Used at build time
 *              (dims may be symbolic/unknown, data only known for constants)
 *              and at run time (all dims known, all input data present).
 *   workspace  optional: scratch bytes the kernel needs for given shapes.
 *   cpu        the reference kernel, on the host: dense row-major tensors.
 *              It folds constants at build time, runs control-flow
 *              subgraphs, and is the CPU backend's kernel for the op unless
 *              the backend's table (src/backends/cpu/cpu_table.c) names a
 *              tuned one. Other backends have their own tables
 *              (src/backends/kernel.h).
 *
 * Adding an operator: see docs/adding-an-op.md.
 */
#ifndef KILN_OP_H
#define KILN_OP_H

#include "core/core.h"

#include <stddef.h>

/* Attribute structs are written into engines verbatim: each one's size and
 * the offset of each of its fields are asserted right after its definition
 * (scripts/attrs_layout.py prints the lines), so that a change that would
 * misread the engines already written fails to compile. New fields go at
 * the end (kiln_op_def.attr_grew_in says from which format). */
#define KILN_ATTRS_SIZE(T, n) _Static_assert(sizeof(T) == (n), #T " is stored in engines: its size is fixed")
#define KILN_ATTRS_AT(T, f, off) \
    _Static_assert(offsetof(T, f) == (off), #T "." #f " is stored in engines: its offset is fixed")

/* ---- dimensions ---------------------------------------------------------
 * A dim >= 0 is known. A dim < 0 is dynamic: KILN_DIM_UNKNOWN (-1) is an
 * anonymous unknown; KILN_DIM_SYM(k) (<= -2) is the named symbol k of the
 * graph (ONNX dim_param), which two tensors share when equal. At run time
 * every dim is known. */
#define KILN_DIM_UNKNOWN (-1)
#define KILN_DIM_SYM(k) (-2 - (int64_t)(k))
#define KILN_DIM_SYM_ID(d) ((int)(-2 - (d)))
#define KILN_DIM_IS_SYM(d) ((d) <= -2)

/* Type, shape and (optionally) value of a tensor, as inference sees it. */
typedef struct kiln_tinfo {
    kiln_dtype dtype;
    int rank;                     /* -1: rank unknown (build time only) */
    int64_t dims[KILN_MAX_RANK];
    const void *data;             /* values when known (constants; always at run time) */
} kiln_tinfo;

/* A dense row-major tensor a kernel reads or writes. */
typedef struct kiln_tensor {
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_RANK];
    void *data;
} kiln_tensor;

/* How the bytes of a value are laid out, as the layer producing it writes
 * them (its shape is always the model's: [N, C, H, W] for the 4-D ones). */
enum {
    KILN_VLAYOUT_PLAIN = 0,     /* dense row-major in the order of the shape */
    KILN_VLAYOUT_NHWC = 1,      /* [N][H][W][C] */
    KILN_VLAYOUT_NHWC_BF16 = 2, /* [N][H][W][C], bf16 elements under a float32 type */
    KILN_VLAYOUT_C16 = 3,       /* nChw16c: [N][C/16][H][W][16] */
};
/* The layouts a layer reads input 0 in (x) and writes output 0 in (y);
 * r_in: the input that holds its residual (0: none), which arrives in y's
 * layout, or NHWC with r_nhwc (while its output is plain). Every other
 * input is plain. */
typedef struct kiln_io_layout {
    int x, y;
    bool r_nhwc;
    int r_in;
} kiln_io_layout;

typedef struct kiln_op_def kiln_op_def;
typedef struct kiln_node_state kiln_node_state;
typedef struct kiln_graph kiln_graph;

/* What the control-flow ops (If, Loop, Scan: src/ops/misc_control.c) need
 * from the layers above ops to load their subgraphs, handed to their infer
 * and kernels by whoever calls them (kiln_infer_args.sub,
 * kiln_kernel_args.sub: the sub of the graph the node is in, set by the
 * engine format's loader and the importer to kiln__subgraph_io,
 * src/format/subgraph.c). NULL: such a node can be neither inferred nor run. */
typedef struct kiln_subgraph_io {
    /* Loads a subgraph packed into `size` bytes at data: *graph borrows its
     * constants from *blob (free the graph with `free`, then
     * kiln__aligned_free(*blob)); `what` names it in messages. */
    kiln_status (*unpack)(const void *data, size_t size, const char *what, kiln_graph **graph, void **blob);
    void (*free)(kiln_graph *graph);
} kiln_subgraph_io;

typedef struct kiln_infer_args {
    const kiln_op_def *op;
    const void *attrs;
    const char *node_name;         /* for error messages */
    int n_in, n_out;
    const kiln_tinfo *const *in;   /* in[i] == NULL: optional input absent */
    kiln_tinfo *const *out;        /* filled by infer: dtype, rank, dims (data stays NULL).
                                      Outputs whose size depends on input values (NonZero,
                                      NonMaxSuppression) are sized at run time by scanning
                                      the inputs here. */
    bool runtime;                  /* all dims known and all input data present */
    kiln_node_state *node_state;   /* at run time: the node's state in this context (as in
                                      kiln_kernel_args; ops whose output shapes need the
                                      whole computation, e.g. Loop, compute there and keep
                                      the results for the kernel); else NULL */
    const kiln_subgraph_io *sub;   /* control flow: how to load subgraphs (may be NULL) */
} kiln_infer_args;

/* What a kernel keeps between runs of one context (prepacked weights,
 * library primitives, chosen algorithms): one per (context, node), empty
 * at first; a kernel that fills `p` sets `free`, which the context calls
 * when it is freed. */
struct kiln_node_state {
    void *p;
    void (*free)(void *p);
    size_t mem_budget; /* set by the context before a run's infer: the bytes a control-flow
                          node's subgraph tensors may hold under its memory limit (0: none) */
};

typedef struct kiln_kernel_args {
    const kiln_op_def *op;
    int op_id;                     /* op's id (0: not given; a backend then looks it up) */
    const void *attrs;
    const char *node_name;
    int n_in, n_out;
    const kiln_tensor *const *in;  /* in[i] == NULL: optional input absent */
    kiln_tensor *const *out;       /* shapes already set by infer, data allocated */
    void *workspace;               /* `workspace()` bytes, 64-byte aligned */
    size_t workspace_size;
    kiln_pool *pool;               /* may be NULL: run serially */
    void *stream;                  /* device backends: cudaStream_t (as void*) to launch on */
    void *device_state;            /* device backends: the backend's per-context state */
    kiln_node_state *node_state;   /* this node's state in this context; may be NULL
                                      (constant folding, build-time timing): then
                                      nothing can be kept */
    const kiln_subgraph_io *sub;   /* control flow: how to load subgraphs (may be NULL) */
    uint32_t host_in;              /* device backends: bit i set when in[i] is in host memory
                                      (a host input, op->host_inputs, handed over as its host
                                      copy by the context); clear: not known */
} kiln_kernel_args;

/* ---- import: the ONNX node being imported, as an op's import sees it ----
 * The functions below (src/ops/import_ctx.c) call through the importer's
 * kiln_import_i, which every import context holds as its first member, so
 * that ops depend on no importer (src/onnx/import.c fills it). */
typedef struct kiln_import_ctx kiln_import_ctx;
typedef struct kiln_import_i {
    int64_t (*opset)(const kiln_import_ctx *ic);
    const char *(*node_name)(const kiln_import_ctx *ic);
    const char *(*op_type)(const kiln_import_ctx *ic);
    int (*num_inputs)(const kiln_import_ctx *ic);
    int (*num_outputs)(const kiln_import_ctx *ic);
    bool (*has_input)(const kiln_import_ctx *ic, int i);
    const kiln_tinfo *(*input_info)(const kiln_import_ctx *ic, int i);
    bool (*attr_has)(const kiln_import_ctx *ic, const char *name);
    int64_t (*attr_int)(const kiln_import_ctx *ic, const char *name, int64_t dflt);
    kiln_status (*attr_int32)(const kiln_import_ctx *ic, const char *name, int64_t dflt, int32_t *out);
    float (*attr_float)(const kiln_import_ctx *ic, const char *name, float dflt);
    int (*attr_ints)(const kiln_import_ctx *ic, const char *name, int64_t *buf, int cap);
    int (*attr_floats)(const kiln_import_ctx *ic, const char *name, float *buf, int cap);
    int (*attr_strings)(const kiln_import_ctx *ic, const char *name, const char **buf, int cap);
    const char *(*attr_string)(const kiln_import_ctx *ic, const char *name, const char *dflt);
    kiln_status (*attr_tensor)(const kiln_import_ctx *ic, const char *name, kiln_tinfo *info);
    kiln_status (*set_const_input)(kiln_import_ctx *ic, int i, kiln_dtype dtype, int rank, const int64_t *dims,
                                   const void *data);
} kiln_import_i;

KILN_PRIVATE int64_t kiln_import_opset(const kiln_import_ctx *ic); /* of the node's domain */
KILN_PRIVATE const char *kiln_import_node_name(const kiln_import_ctx *ic);
KILN_PRIVATE int kiln_import_num_inputs(const kiln_import_ctx *ic);  /* absent optionals count */
KILN_PRIVATE int kiln_import_num_outputs(const kiln_import_ctx *ic);
KILN_PRIVATE bool kiln_import_has_input(const kiln_import_ctx *ic, int i); /* present, non-empty name */
/* Known info of input i (dtype/shape, data if constant) or NULL. At import
 * time only graph inputs and constants are known; intermediate values have
 * no shape yet (kiln__graph_infer runs after import). */
KILN_PRIVATE const kiln_tinfo *kiln_import_input_info(const kiln_import_ctx *ic, int i);
KILN_PRIVATE bool kiln_attr_has(const kiln_import_ctx *ic, const char *name);
KILN_PRIVATE int64_t kiln_attr_int(const kiln_import_ctx *ic, const char *name, int64_t dflt);
KILN_PRIVATE float kiln_attr_float(const kiln_import_ctx *ic, const char *name, float dflt);
/* An int attribute (default dflt) stored in an int32 field: values that do
 * not fit are KILN_ERR_MODEL naming the attribute. What the value means is
 * the op's validate's to check. */
KILN_PRIVATE kiln_status kiln_attr_int32(const kiln_import_ctx *ic, const char *name, int64_t dflt,
                                         int32_t *out);
/* Copies up to `cap` values; returns the attribute's count (-1 if absent).
 * A count > cap is an error the caller reports; buf may be NULL with cap 0
 * to ask for the count only. */
KILN_PRIVATE int kiln_attr_ints(const kiln_import_ctx *ic, const char *name, int64_t *buf, int cap);
KILN_PRIVATE int kiln_attr_floats(const kiln_import_ctx *ic, const char *name, float *buf, int cap);
/* String-list attribute: stores up to `cap` borrowed NUL-terminated strings
 * (valid until the import ends) and returns the count (-1 if absent). */
KILN_PRIVATE int kiln_attr_strings(const kiln_import_ctx *ic, const char *name, const char **buf,
                                   int cap);
/* Returns the string attribute (borrowed, NUL-terminated) or dflt. */
KILN_PRIVATE const char *kiln_attr_string(const kiln_import_ctx *ic, const char *name,
                                          const char *dflt);
/* Tensor attribute: returns KILN_OK and fills *info (data borrowed until the
 * import ends) or KILN_ERR_MODEL if absent/invalid. */
KILN_PRIVATE kiln_status kiln_attr_tensor(const kiln_import_ctx *ic, const char *name,
                                          kiln_tinfo *info);
/* Sets input i of the node to a new constant (copied), growing the input
 * list if needed. Used to normalize attribute forms of old opsets into the
 * input forms of new ones. */
KILN_PRIVATE kiln_status kiln_import_set_const_input(kiln_import_ctx *ic, int i, kiln_dtype dtype,
                                                     int rank, const int64_t *dims,
                                                     const void *data);
/* Error helper: "node 'name' (OpType): message" as KILN_ERR_MODEL. */
#define KILN_IMPORT_FAIL(ic, ...) kiln__import_fail((ic), __VA_ARGS__)
KILN_PRIVATE kiln_status kiln__import_fail(const kiln_import_ctx *ic, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- the descriptor ---------------------------------------------------- */

enum {
    KILN_OP_FLAG_INPLACE = 1u << 0,   /* out[0] may alias in[0] (same size) */
    KILN_OP_FLAG_NO_FOLD = 1u << 1,   /* never constant-fold (random ops) */
    KILN_OP_FLAG_SHAPE_ONLY = 1u << 2,/* reads only input shapes, not data (Shape, Size):
                                         folded whenever the input shape is fully known */
    KILN_OP_FLAG_TACTICS = 1u << 3,   /* attrs begin with a kiln_tactic (see below) */
    KILN_OP_FLAG_VIEW = 1u << 4,      /* out[0] holds in[0]'s bytes unchanged under another
                                         shape (Reshape, Flatten...): the memory planner lets
                                         them share one block, and kernels copy only when the
                                         two differ */
    KILN_OP_FLAG_REDUCIBLE = 1u << 5, /* fp16/bf16-eligible: its float tensors share one type
                                         and its kernels compute in fp32 inside, so the
                                         precision pass (passes/precision.c) may convert it
                                         (sum-like reductions are not: their results leave
                                         the fp16 range easily) */
    KILN_OP_FLAG_REDUCIBLE_OUT0 = 1u << 6, /* ...only while its outputs after the first are
                                              absent (LayerNormalization's Mean and InvStdDev
                                              are float32 by definition) */
    KILN_OP_FLAG_TYPED = 1u << 7,     /* its attrs fix the dtype of every input and output
                                         (kiln.Pointwise): made after the precision pass,
                                         which never converts it */
};

/* Tactics. A layer that several kernels can run (own SIMD kernels, a
 * library, different blockings) carries the choice in its attributes: the
 * op's attrs struct begins with a kiln_tactic, which the builder fills after
 * timing the candidates a backend's kernel lists (src/backends/kernel.h,
 * src/builder/tune.c), and which that kernel reads at run time. id 0 is
 * always valid: the kernel's own default choice. Being part of the attrs,
 * the choice is saved in the engine. */
typedef struct kiln_tactic {
    int32_t id;    /* which kernel (meaning is the op's / backend's) */
    float us;      /* its measured time in microseconds at build (0: not timed) */
} kiln_tactic;
KILN_ATTRS_SIZE(kiln_tactic, 8); KILN_ATTRS_AT(kiln_tactic, id, 0); KILN_ATTRS_AT(kiln_tactic, us, 4);

struct kiln_op_def {
    const char *name;     /* ONNX op type, e.g. "Conv" */
    const char *domain;   /* "" for ai.onnx, "com.microsoft", ... */
    int since;            /* oldest opset version supported */
    int min_inputs, max_inputs;   /* max_inputs < 0: variadic */
    int min_outputs, max_outputs; /* max_outputs < 0: variadic */
    int code;             /* free for the op family's shared code (e.g. which binary op) */
    uint32_t flags;
    size_t attr_size;     /* bytes of the POD attribute struct (0: none) */
    /* The attrs grew in engine format version attr_grew_in (0: never):
     * engines of older formats wrote the first attr_size_before bytes, and
     * the fields after them read as 0. */
    int attr_grew_in;
    size_t attr_size_before;
    uint32_t host_inputs; /* bit i: infer reads the *values* of input i (Reshape's shape,
                             Slice's starts...), so it must be on the host at run time */
    kiln_status (*import)(kiln_import_ctx *ic, void *attrs);            /* may be NULL */
    /* Checks the attribute struct: every value the op's infer and kernels
     * rely on (enum values, positive sizes, counts within their arrays,
     * axes within KILN_MAX_RANK...). Called on the attributes import made
     * (right after `import`) and on every node of an engine file when it
     * is written and when it is loaded, so that a damaged or hostile engine
     * is refused with the message the importer would give. Checks that
     * need shapes stay in `infer`, which sees the shapes. Required for
     * every op with attr_size > 0 (a unit test checks the registry). Fails
     * with KILN_ERR_MODEL, "node '<node>' (<Op>): ..."
     * (KILN_VALIDATE_FAIL). */
    kiln_status (*validate)(const kiln_op_def *op, const void *attrs, const char *node);
    kiln_status (*infer)(const kiln_infer_args *a);
    size_t (*workspace)(const kiln_infer_args *a);                      /* may be NULL */
    kiln_status (*cpu)(const kiln_kernel_args *a);
    /* Optional, for ops whose attrs say how their tensors are stored
     * (channels-last or blocked layers, set by a backend's layout choice:
     * src/backends/cpu/cpu_layout.c, src/backends/cuda/cuda_layout.c): the
     * int32 layout field of the attrs, and what a value of it means for
     * input 0, output 0 and the residual. NULL: always plain. */
    int32_t *(*layout_field)(void *attrs);
    void (*layout_io)(int32_t layout, kiln_io_layout *io);
};

/* Registry (generated from ops.def). Ids are stable: they are written into
 * engine files. */
enum kiln_op_id {
    KILN_OP_INVALID = 0,
#define KILN_OP(id, sym) KILN_OP_##sym = id,
#include "ops/ops.def"
#undef KILN_OP
};
#define KILN_OP_ID_LIMIT 2048
/* The number of operators in ops.def. Each backend's kernel table asserts
 * it (src/backends/cpu/cpu_table.c, src/backends/cuda/cuda_table.c), so
 * that adding an op means deciding whether each backend runs it. */
enum {
    KILN_OP_COUNT = 0
#define KILN_OP(id, sym) +1
#include "ops/ops.def"
#undef KILN_OP
};

KILN_PRIVATE const kiln_op_def *kiln__op_by_id(int id);
/* Whether op `id` computes each output element from its inputs' elements
 * at the same index (numpy broadcasting) and from nothing else, so that a
 * layer of it runs in any one byte order its output and its inputs of the
 * output's shape share: the elementwise layers a backend's NHWC chain
 * carries (src/backends/cuda/cuda_layout.c), which the engine checks let
 * pass a layout on (src/format/read.c). */
static inline bool kiln__op_same_index(int id) {
    switch (id) {
    case KILN_OP_Add: case KILN_OP_Sub: case KILN_OP_Mul: case KILN_OP_Div:
    case KILN_OP_Relu: case KILN_OP_LeakyRelu: case KILN_OP_Sigmoid: case KILN_OP_HardSigmoid:
    case KILN_OP_HardSwish: case KILN_OP_Tanh: case KILN_OP_Clip:
    case KILN_OP_Pointwise: /* (a fused chain of such ops) */
        return true;
    default: return false;
    }
}
/* Finds the op for (domain, type). Returns its id or 0. */
KILN_PRIVATE int kiln__op_find(const char *domain, const char *type);
KILN_PRIVATE int kiln__op_id_of(const kiln_op_def *op);

/* ---- helpers for infer and kernels (src/ops/common.c) ------------------ */

/* Message helper for validate functions: KILN_ERR_MODEL, "node 'n' (Op): ...". */
#define KILN_VALIDATE_FAIL(op, node, ...) kiln__validate_fail((op), (node), __VA_ARGS__)
KILN_PRIVATE kiln_status kiln__validate_fail(const kiln_op_def *op, const char *node,
                                             const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Validate helper: attribute `what` (its ONNX name) = v must lie in [lo, hi]
 * ("attribute 'axis' = 9 is out of range [-8, 7]"). */
KILN_PRIVATE kiln_status kiln__check_attr(const kiln_op_def *op, const char *node, const char *what,
                                          int64_t v, int64_t lo, int64_t hi);
/* Runs a->op->infer and checks what it gave: ranks within -1..KILN_MAX_RANK
 * and no output whose known dims make more than KILN_MAX_TENSOR_BYTES (or
 * overflow 64 bits). Every caller of an op's infer goes through it. */
KILN_PRIVATE kiln_status kiln__infer(const kiln_infer_args *a);
/* Checked shape arithmetic for infer functions (known, non-negative
 * dims): *out = x * y or x + y, or KILN_ERR_MODEL naming the node when the
 * result overflows 64 bits. */
KILN_PRIVATE kiln_status kiln__dim_mul(const char *node, int64_t x, int64_t y, int64_t *out);
KILN_PRIVATE kiln_status kiln__dim_add(const char *node, int64_t x, int64_t y, int64_t *out);

KILN_PRIVATE int64_t kiln__numel(int rank, const int64_t *dims); /* -1 if any dim unknown */
KILN_PRIVATE size_t kiln__value_nbytes(const kiln_tinfo *t); /* bytes; 0 if unknown or too large */
KILN_PRIVATE int64_t kiln__tensor_numel(const kiln_tensor *t);
/* Normalizes a possibly negative axis into [0, rank); fails with a message. */
KILN_PRIVATE kiln_status kiln__norm_axis(const char *node, int64_t axis, int rank, int *out);
/* Multidirectional (numpy) broadcast of n shapes into out (build or run time;
 * symbolic dims handled). */
KILN_PRIVATE kiln_status kiln__broadcast_shapes(const char *node, int n, const kiln_tinfo *const *in,
                                                kiln_tinfo *out);
/* Copies dtype/rank/dims of src into dst. */
KILN_PRIVATE void kiln__tinfo_copy_shape(kiln_tinfo *dst, const kiln_tinfo *src);
/* Reads element i of an integer tensor (int32/int64...) given by tinfo with data. */
KILN_PRIVATE int64_t kiln__tinfo_int(const kiln_tinfo *t, int64_t i);
/* Broadcast strides: for an input of rank r broadcast to rank R/dims, element
 * strides aligned to the output (0 where broadcast). */
KILN_PRIVATE void kiln__bcast_strides(int r, const int64_t *dims, int R, const int64_t *odims,
                                      int64_t *strides);
/* Shape mismatch message helper: "[1x3x224x224]" into buf. */
KILN_PRIVATE const char *kiln__shape_str(int rank, const int64_t *dims, char *buf, size_t n);
/* Kept kernel state (prepacked weights, primitives): the node's state if the
 * kernel that frees with free_fn made it, else NULL. */
KILN_PRIVATE void *kiln__node_state_get(const kiln_kernel_args *a, void (*free_fn)(void *));
/* Keeps p (freed with free_fn) as the node's state when the node has an
 * empty one: true. false (constant folding, build-time timing, or a state
 * already taken): the caller still owns p and frees it after the run. */
KILN_PRIVATE bool kiln__node_state_keep(const kiln_kernel_args *a, void *p, void (*free_fn)(void *));
/* Weights packed once per context (nf floats, 64-byte aligned): the ones
 * this node kept (*fresh false), else a new buffer the caller must fill
 * now (*fresh true), kept as the node's state where it can be, else the
 * caller's to free with kiln__aligned_free after the run (*own true).
 * NULL: out of memory (no error set: the caller names what it packs). */
KILN_PRIVATE float *kiln__node_packed(const kiln_kernel_args *a, size_t nf, bool *fresh, bool *own);

#endif
