/* debug.h -- the runtime's helpers for showing intermediate tensors
 * (src/runtime/debug.c; the public side is kiln_context_set_layer_callback). */
#ifndef KILN_RUNTIME_DEBUG_H
#define KILN_RUNTIME_DEBUG_H

#include "ir/ir.h"

/* The layout (KILN_VLAYOUT_*, ops/op.h) each value of plan g is written in
 * (kiln__plan_layouts: a layer's attributes, and the elementwise layers and
 * views that pass a layout on, such as a CUDA chain's Mul of a
 * squeeze-excite block), an array of g->n_values (kiln__free it), NULL when
 * out of memory. */
KILN_PRIVATE int *kiln__value_layouts(const kiln_graph *g);
/* The same for one value v (tests: computes the whole array). */
KILN_PRIVATE int kiln__value_layout(const kiln_graph *g, int v);
KILN_PRIVATE const char *kiln__vlayout_name(int layout);
/* Bytes a value of shape and dtype t takes in `layout`. */
KILN_PRIVATE size_t kiln__vlayout_stored_bytes(int layout, const kiln_tensor *t);
/* Writes the value stored at `raw` in `layout` (t: its dtype and shape) to
 * dst (numel * dtype size bytes) in dense row-major order. */
KILN_PRIVATE kiln_status kiln__vlayout_to_logical(int layout, const kiln_tensor *t, const void *raw, void *dst);
/* The reverse: writes the dense row-major value at `logical` to raw
 * (kiln__vlayout_stored_bytes bytes) in `layout` (the tuner's host
 * reference of a channels-last layer, builder/tune.c). */
KILN_PRIVATE kiln_status kiln__vlayout_from_logical(int layout, const kiln_tensor *t, const void *logical, void *raw);

/* KILN_TEST_PLANT_BUG=<op name> (tests of kiln debug only): the first layer
 * of g with that op, whose output 0 each run then makes wrong
 * (kiln__plant_bug_apply); -1 when the variable is unset or no layer matches.
 * Says so on stderr when `say`. */
KILN_PRIVATE int kiln__plant_bug_layer(const kiln_graph *g, bool say);
/* Perturbs the host bytes of a value stored in `layout`: x -> 1.05 x + 0.05. */
KILN_PRIVATE void kiln__plant_bug_apply(int layout, const kiln_tensor *t, void *raw);

#endif
