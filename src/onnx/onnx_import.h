/* onnx_import.h -- the ONNX front end: ModelProto -> kiln_graph, and
 * TensorProto reading. Internal to kiln (the conformance runner and the CLI
 * link the static library and may use it). */
#ifndef KILN_ONNX_IMPORT_H
#define KILN_ONNX_IMPORT_H

#include "ir/ir.h"

/* Oldest and newest ai.onnx opsets kiln imports as it should: the ONNX node
 * tests cover opsets 1 to 17, and the opset-18 forms of the ops that changed
 * in 18 (ReduceX axes and Split num_outputs as inputs, Pad axes, Resize's
 * new attributes) are handled. A model of a newer opset still loads, with a
 * warning (kiln_model_warning): an op whose meaning changed after it would
 * be read with the older meaning. */
#define KILN_ONNX_OPSET_MIN 1
#define KILN_ONNX_OPSET_MAX 18

/* A type and shape the model declares for a value (value_info): value
 * index in the imported graph, and the declared info (data NULL). */
typedef struct kiln_onnx_decl {
    int value;
    kiln_tinfo info;
} kiln_onnx_decl;

/* What the importer reports beside the graph. */
typedef struct kiln_onnx_extras {
    char *producer;       /* "producer_name producer_version" (possibly ""); kiln__free */
    kiln_tinfo *declared; /* per graph output (g->n_outputs of them, in order): the type and
                             shape the model declares for it (dtype UNDEFINED / rank -1
                             where it declares none; data NULL); kiln__free */
    kiln_onnx_decl *vi;   /* the main graph's value_info entries of node outputs (n_vi of
                             them; a value may appear more than once); kiln__free */
    int n_vi;
} kiln_onnx_extras;

/* Parses a serialized ONNX ModelProto (`size` bytes at `data`, not retained)
 * into a new graph. External tensor data is read from files relative to
 * `base_dir` (NULL: external data is refused). On success *out is a graph
 * the caller frees with kiln__graph_free (nodes topologically sorted, value
 * infos from the model's inputs/outputs/value_info; shapes of other values
 * are left for kiln__graph_infer), and *extras (when not NULL) is filled.
 * Failures: KILN_ERR_MODEL for malformed models, KILN_ERR_UNSUPPORTED for
 * valid models using something kiln lacks (operator, dtype, opset, sparse
 * or non-tensor values), KILN_ERR_IO for unreadable external data. */
KILN_PRIVATE kiln_status kiln__onnx_import(const void *data, size_t size, const char *base_dir,
                                           kiln_graph **out, kiln_onnx_extras *extras);

/* Parses a serialized TensorProto (e.g. a test's input_0.pb). On success
 * `info` holds dtype/rank/dims, info->data == *owned_data, which the caller
 * frees with kiln__free (may be non-NULL for empty tensors). External data
 * is refused. The tensor's name is not returned; see
 * kiln__onnx_read_tensor_named. */
KILN_PRIVATE kiln_status kiln__onnx_read_tensor(const void *data, size_t size, kiln_tinfo *info,
                                                void **owned_data);

/* Like kiln__onnx_read_tensor, and also returns the tensor's name (a new
 * string freed with kiln__free; "" when unnamed) when `name` is not NULL. */
KILN_PRIVATE kiln_status kiln__onnx_read_tensor_named(const void *data, size_t size,
                                                      kiln_tinfo *info, void **owned_data,
                                                      char **name);

#endif
