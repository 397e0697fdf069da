/* precision.h -- the reduced-precision pass of the graph optimizer
 * (src/passes/precision.c), run by kiln__pass_optimize for fp16/bf16
 * engines of a device backend (CUDA). */
#ifndef KILN_PRECISION_H
#define KILN_PRECISION_H

#include "ir/ir.h"

/* Converts the graph to o->precision (KILN_PRECISION_FP16 or _BF16) where
 * the device backend (o->device) supports the converted node:
 *   - float32 constants read by converted nodes become fp16/bf16 copies
 *     (finite values beyond the fp16 range are clamped to +-65504);
 *   - float32 activations between converted nodes become fp16/bf16;
 *   - graph inputs and outputs stay float32: Cast nodes at the boundaries,
 *     and around every node that stays float32 (ops not known to be safe
 *     in reduced precision, sum-like reductions, nodes the device has no
 *     reduced-precision kernel for, and the layers named in
 *     o->fp32_layers).
 * Kernels keep fp32 arithmetic inside (statistics, accumulation). The graph
 * stays topologically ordered; the caller re-links and re-infers it.
 * Fails when a name in o->fp32_layers matches no layer. */
KILN_PRIVATE kiln_status kiln__pass_precision(kiln_graph *g, const kiln_optimize_opts *o);

/* Whether the precision pass should run before the fusions: true for
 * fp16/bf16 device plans while kiln's fused layers (FusedConv, FusedMatMul,
 * Gelu) take float32 only, so that the convolutions and matrix products
 * stay in the reduced type (unfused) instead of fused in float32. */
KILN_PRIVATE bool kiln__precision_first(const kiln_optimize_opts *o);

/* Whether layer `name` (possibly a fused name "a+b+c") is, or contains, the
 * layer `want`. */
KILN_PRIVATE bool kiln__layer_name_matches(const char *name, const char *want);

/* fp16/bf16 plans of a backend without reduced tensors (the CPU): the
 * precision is the fused layers' own (FusedConv, FusedMatMul, Attention).
 * kiln__layer_names_check fails when a name in o->fp32_layers matches no
 * node of g (before the fusions: ONNX node names); kiln__layer_fp32_apply
 * (after them) sets every fused layer whose name matches one to float32. */
KILN_PRIVATE kiln_status kiln__layer_names_check(const kiln_graph *g, const kiln_optimize_opts *o);
KILN_PRIVATE void kiln__layer_fp32_apply(kiln_graph *g, const kiln_optimize_opts *o);

#endif
