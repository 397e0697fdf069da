/* onnx_import.h -- the ONNX front end: ModelProto -> kiln_graph, and
 * TensorProto reading. Internal to kiln (the conformance runner and the CLI
 * link the static library and may use it). */
#ifndef KILN_ONNX_IMPORT_H
#define KILN_ONNX_IMPORT_H

#include "ir/ir.h"

/* Parses a serialized ONNX ModelProto (`size` bytes at `data`, not retained)
 * into a new graph. External tensor data is read from files relative to
 * `base_dir` (NULL: external data is refused). On success *out is a graph
 * the caller frees with kiln__graph_free (nodes topologically sorted, value
 * infos from the model's inputs/outputs/value_info; shapes of other values
 * are left for kiln__pass_infer), and *producer (if `producer` is not NULL)
 * is "producer_name producer_version" (possibly ""), freed with kiln__free.
 * Failures: KILN_ERR_MODEL for malformed models, KILN_ERR_UNSUPPORTED for
 * valid models using something kiln lacks (operator, dtype, opset, sparse
 * or non-tensor values), KILN_ERR_IO for unreadable external data. */
KILN_PRIVATE kiln_status kiln__onnx_import(const void *data, size_t size, const char *base_dir,
                                           kiln_graph **out, char **producer);

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
