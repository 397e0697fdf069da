/* index_attrs.h -- attribute structs of the "index" family ops whose CPU
 * kernels live in reduce_index.c (ArgMax, ArgMin, TopK), shared with the
 * CUDA backend (src/backends/cuda/cuda_ops_index.c). The other ops of the
 * family (tensor_index.c, tensor_gen.c, tensor_select.c) keep theirs in
 * tensor_internal.h. POD, saved verbatim in engine files: never reorder or
 * retype a field. */
#ifndef KILN_OPS_INDEX_ATTRS_H
#define KILN_OPS_INDEX_ATTRS_H

#include "ops/op.h" /* KILN_ATTRS_SIZE, KILN_ATTRS_AT */

/* ArgMax / ArgMin */
typedef struct kiln_argreduce_attrs {
    int32_t axis;              /* default 0 */
    int32_t keepdims;          /* default 1 */
    int32_t select_last_index; /* default 0 */
} kiln_argreduce_attrs;
KILN_ATTRS_SIZE(kiln_argreduce_attrs, 12); KILN_ATTRS_AT(kiln_argreduce_attrs, axis, 0);
KILN_ATTRS_AT(kiln_argreduce_attrs, keepdims, 4); KILN_ATTRS_AT(kiln_argreduce_attrs, select_last_index, 8);

/* TopK */
typedef struct kiln_topk_attrs {
    int32_t axis;    /* default -1 */
    int32_t largest; /* default 1 */
    int32_t sorted;  /* default 1 */
} kiln_topk_attrs;
KILN_ATTRS_SIZE(kiln_topk_attrs, 12); KILN_ATTRS_AT(kiln_topk_attrs, axis, 0);
KILN_ATTRS_AT(kiln_topk_attrs, largest, 4); KILN_ATTRS_AT(kiln_topk_attrs, sorted, 8);

#endif
