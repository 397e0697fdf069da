/* pattern.h -- helpers for the graph optimizer's rewrites (src/passes/).
 *
 * A rewrite finds a pattern of live nodes, replaces the pattern's last node
 * in place by the fused layer (so topological order holds: every input of
 * the pattern is produced before its last node) and marks the other nodes
 * dead. kiln__graph_relink(g, nodes, n) then updates producers, use counts
 * and the readers of each value (kiln__graph_uses) for the nodes it changed
 * (and those it added): O(the pattern), where kiln__graph_link() is
 * O(the graph) and runs once per pass, so that a model of n layers builds
 * in O(n) (issue 20: 50,000 fused MatMuls took 72 s). A rewrite that
 * changes a node it does not name leaves the links wrong: a build with
 * -DKILN_LINK_CHECK checks every relink against a full link
 * (docs/testing.md). DCE and compaction drop what became unused. */
#ifndef KILN_PATTERN_H
#define KILN_PATTERN_H

#include "ir/ir.h"

/* The live node producing value v if its op is `op_id` (0: any op), else -1. */
KILN_PRIVATE int kiln__pat_producer(const kiln_graph *g, int v, int op_id);
/* Whether value v has exactly one reader and is not a graph output (so the
 * node producing it can be folded into that reader). */
KILN_PRIVATE bool kiln__pat_sole_use(const kiln_graph *g, int v);
/* Whether the backend of `device` has a kernel for a node of op `op_id` with
 * these inputs, outputs and attrs (asked with a temporary node; g is not
 * changed). */
KILN_PRIVATE bool kiln__pat_supports(const kiln_graph *g, int device, int op_id, int n_in,
                                     const int *in, int n_out, const int *out, const void *attrs);
/* Whether a and b have provably the same shape: the same rank and every dim
 * known and equal (a named symbol equals itself); dtypes are not compared. */
KILN_PRIVATE bool kiln__pat_same_shape(const kiln_tinfo *a, const kiln_tinfo *b);
/* The only live node reading value v, or -1 (none, several, or a graph
 * output): from v's readers (kiln__graph_uses), a scan of every node where
 * they are not known. */
KILN_PRIVATE int kiln__pat_sole_consumer(const kiln_graph *g, int v);
/* Float32 data of constant value v (NULL if v is not a float32 constant);
 * *numel gets its element count when non-NULL. */
KILN_PRIVATE const float *kiln__pat_const_f32(const kiln_graph *g, int v, int64_t *numel);
/* The value of constant v of one element (any rank; float32, float64,
 * int64 or int32) into *out; false if v is no such constant. */
KILN_PRIVATE bool kiln__pat_const_scalar(const kiln_graph *g, int v, double *out);
/* Whether v is a constant with every element equal to x (any float dtype or int). */
KILN_PRIVATE bool kiln__pat_const_is(const kiln_graph *g, int v, double x);
/* The dims [*b, *e) of its input that Shape node sn reads (its start and end
 * attributes clamped as ONNX does); false when the input's rank is unknown. */
KILN_PRIVATE bool kiln__pat_shape_range(const kiln_graph *g, int sn, int *b, int *e);
/* Whether value v (int64, one element, rank 0 or 1) is a dim of another
 * value read at run time through Shape: Gather(Shape(x), i) with a scalar or
 * one-element index, that through an Unsqueeze to [1], or Shape(x, start=i,
 * end=i+1). Sets *x and *axis (in [0, rank of x)). */
KILN_PRIVATE bool kiln__pat_shape_dim(const kiln_graph *g, int v, int *x, int *axis);
/* The largest k in [1, rank) such that the dense tensor `data` (es-byte
 * elements, dims) equals its slice at index 0 of axes [0, k) along all of
 * them (its bytes repeat with period dims[k] x ... x dims[rank - 1]); 0 when
 * none: those k axes can be of size 1, broadcast by the reader. */
KILN_PRIVATE int kiln__pat_repeated_lead_axes(const void *data, size_t es, int rank, const int64_t *dims);
/* Replaces node ni in place by a node of op `op_id` with the given inputs,
 * outputs and attrs (op->attr_size bytes, copied), made from the nodes
 * from[0..n_from) (ni among them): named "a+b+c" after them, with their
 * ONNX source nodes as its sources (kiln__node_source). The node keeps its
 * device. */
KILN_PRIVATE kiln_status kiln__pat_replace(kiln_graph *g, int ni, int op_id, int n_in, const int *in,
                                           int n_out, const int *out, const void *attrs,
                                           const int *from, int n_from);

/* Rewrite families, in the order optimize.c runs them. Each returns KILN_OK
 * having changed the graph or not; they keep g linked (kiln__graph_link). */
KILN_PRIVATE kiln_status kiln__opt_conv(kiln_graph *g, const kiln_optimize_opts *o);        /* fuse_conv.c */
KILN_PRIVATE kiln_status kiln__opt_se(kiln_graph *g, const kiln_optimize_opts *o);          /* fuse_se.c */
KILN_PRIVATE kiln_status kiln__opt_transformer(kiln_graph *g, const kiln_optimize_opts *o); /* fuse_transformer.c */
KILN_PRIVATE kiln_status kiln__opt_movement(kiln_graph *g, const kiln_optimize_opts *o);    /* fuse_movement.c */
KILN_PRIVATE kiln_status kiln__opt_norm(kiln_graph *g, const kiln_optimize_opts *o);        /* fuse_norm.c */
KILN_PRIVATE kiln_status kiln__opt_pointwise(kiln_graph *g, const kiln_optimize_opts *o);   /* fuse_pointwise.c */
/* Constant operands of binary elementwise nodes (of the other operand's and
 * the output's shape, read by that node alone) whose values repeat along
 * their leading axes become that many axes of size 1 (broadcast again by
 * the node: the same results; BERT's token-type embedding, folded to a
 * [B, S, E] constant, is [1, 1, E]). fuse_pointwise.c, after the fusion. */
KILN_PRIVATE kiln_status kiln__opt_shrink_constants(kiln_graph *g, const kiln_optimize_opts *o);
/* One rewrite of the data-movement family (fuse_movement.c) that runs inside
 * kiln__opt_transformer's layout clean-up, node by node, before the
 * transformer patterns: Concat node ci of Slices of one axis of one value
 * becomes one Gather with constant indices (torch.roll). */
KILN_PRIVATE kiln_status kiln__opt_concat_of_slices(kiln_graph *g, const kiln_optimize_opts *o, int ci);

#endif
