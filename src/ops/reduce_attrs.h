/* reduce_attrs.h -- attribute struct of the Reduce* family (src/ops/reduce.c),
 * shared with device backends. POD, written verbatim into engine files. */
#ifndef KILN_REDUCE_ATTRS_H
#define KILN_REDUCE_ATTRS_H

#include "ops/op.h"

typedef struct kiln_reduce_attrs {
    int32_t keepdims;             /* default 1 */
    int32_t noop_with_empty_axes; /* default 0 */
} kiln_reduce_attrs;
KILN_ATTRS_SIZE(kiln_reduce_attrs, 8); KILN_ATTRS_AT(kiln_reduce_attrs, keepdims, 0);
KILN_ATTRS_AT(kiln_reduce_attrs, noop_with_empty_axes, 4);

#endif
