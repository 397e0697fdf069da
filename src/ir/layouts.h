/* layouts.h -- in which layout each value of a plan is written (ir/layouts.c). */
#ifndef KILN_IR_LAYOUTS_H
#define KILN_IR_LAYOUTS_H

#include "ir/ir.h"

/* The layout (KILN_VLAYOUT_*, ops/op.h) each value of plan g is written in,
 * where the plan says it for sure, into lay[0..n_values) (-1: not known).
 * In node order: a graph input, a constant and any value that is not 4-D
 * plain; a layer whose attributes say a layout (kiln_op_def.layout_io:
 * NHWC or nChw16c chains) writes output 0 in it, its other outputs plain,
 * and must read its input and residual as they are written; an
 * elementwise layer (kiln__op_same_index) writes the one layout of its
 * inputs of its output's shape, beside operands that broadcast over the
 * batch alone; a view (its output holds its input's bytes in their order)
 * passes its input's layout on where it keeps the shape, NCHW from NCHW,
 * and relabels as a backend's chain does: NHWC bytes of [N, C, H, W] as an
 * NCHW [N, H, W, C] value, and (where `sources`: the nodes' `added` says
 * which nodes kiln made) a Reshape kiln added on a device from an NCHW
 * [N, H, W, C] value to [N, C, H, W] as NHWC bytes; every other layer
 * reads NCHW. Fails (KILN_ERR_FORMAT, naming the reader and the writer)
 * where a layer would read a value in another order than it is written,
 * or a graph output is not NCHW. */
KILN_PRIVATE kiln_status kiln__plan_layouts(const kiln_graph *g, bool sources, int *lay);

#endif
