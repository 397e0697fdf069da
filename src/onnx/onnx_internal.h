/* onnx_internal.h -- shared by the files of the ONNX front end (src/onnx/);
 * needs the protobuf-c code generated from onnx.proto on the include path. */
#ifndef KILN_ONNX_INTERNAL_H
#define KILN_ONNX_INTERNAL_H

#include "onnx/onnx_import.h"

#include "onnx.pb-c.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "kiln's ONNX importer assumes a little-endian host (ONNX raw_data is little-endian)"
#endif

/* Messages nested deeper than this are refused before protobuf-c unpacks
 * them (its unpack recurses once a level, with no limit): ModelProto ->
 * GraphProto -> NodeProto -> AttributeProto -> GraphProto ... is 3 levels a
 * subgraph, so the importer's 32 subgraph levels fit with room. */
#define KILN_PB_MAX_DEPTH 128

/* False when the message `data` (described by d) nests messages more than
 * KILN_PB_MAX_DEPTH deep (pb_depth.c). Malformed bytes give true: protobuf-c
 * refuses them itself, before it recurses. */
KILN_PRIVATE bool kiln__pb_depth_ok(const ProtobufCMessageDescriptor *d, const void *data, size_t size);

/* A protobuf-c allocator that allocates through kiln__malloc/kiln__free. */
KILN_PRIVATE void kiln__onnx_allocator(ProtobufCAllocator *a);

/* Decodes a TensorProto. `what` names it in messages (e.g. "initializer
 * 'w'"). External data is read relative to `base_dir` (NULL: refused).
 * On success info->dtype/rank/dims are set and info->data points to the
 * values: either into `t` itself (borrowed, *owned == NULL; valid while `t`
 * lives) or into a new buffer returned in *owned (free with kiln__free). */
KILN_PRIVATE kiln_status kiln__onnx_tensor_decode(const Onnx__TensorProto *t, const char *what,
                                                  const char *base_dir, kiln_tinfo *info,
                                                  void **owned);

/* Refuses (KILN_ERR_MODEL, naming `what`, the shape and the bytes) a tensor
 * whose byte size overflows or exceeds 2^48 bytes (256 TiB): declared shapes
 * of graph values and initializers, before anything is allocated. Dims < 0
 * (unknown or symbolic) are not counted. *nbytes (may be NULL): the size. */
KILN_PRIVATE kiln_status kiln__onnx_check_size(const char *what, kiln_dtype dt, int rank,
                                               const int64_t *dims, int64_t *nbytes);

/* Maps an ONNX TensorProto.DataType to a kiln dtype. Returns KILN_OK, or
 * KILN_ERR_UNSUPPORTED (STRING, complex, float8, unknown values) /
 * KILN_ERR_MODEL (UNDEFINED) with a message naming `what`. */
KILN_PRIVATE kiln_status kiln__onnx_dtype(int32_t onnx_type, const char *what, kiln_dtype *out);

/* Memory a rewritten graph lives in (sequence.c): freed after the import. */
typedef struct kiln_onnx_arena {
    void **p;
    int n, cap;
} kiln_onnx_arena;
KILN_PRIVATE void kiln__onnx_arena_free(kiln_onnx_arena *a);
/* Resolves the sequences of gp whose structure is known at build into
 * tensor edges (sequence.c says how). *out: gp itself when it has no
 * sequence ops, else a rewritten copy living in `a` (and in gp). A sequence
 * that cannot be resolved is KILN_ERR_UNSUPPORTED naming the node and why. */
KILN_PRIVATE kiln_status kiln__onnx_resolve_sequences(const Onnx__GraphProto *gp, int64_t opset,
                                                      kiln_onnx_arena *a,
                                                      const Onnx__GraphProto **out);
#endif
