/* cpu_layout.h -- the CPU backend's layout choice (cpu_layout.c): NHWC or
 * blocked nChw16c tensors between the CPU layers whose kernels read and
 * write them (oneDNN, Winograd and direct FusedConv tactics, PwDwConv,
 * MaxPool, GlobalAveragePool). */
#ifndef KILN_CPU_LAYOUT_H
#define KILN_CPU_LAYOUT_H

#include "backends/backend.h"

/* Marks the values passed between FusedConv layers that run
 * oneDNN or Winograd tactics (on the CPU) as NHWC, so no reorder runs between them;
 * veto[node] (may be NULL) excludes nodes (their tensors stay NCHW). With
 * c16, the float32 ones become nChw16c instead where every one of them can
 * (channels multiples of 16, no reader or writer without that layout);
 * else they stay NHWC. Returns the number of NHWC or nChw16c values. */
KILN_PRIVATE int kiln__fc_choose_layouts(kiln_graph *g, const bool *veto, bool c16);
/* The number of live FusedConv layers whose output is nChw16c (0: the
 * last kiln__fc_choose_layouts left no nChw16c value). */
KILN_PRIVATE int kiln__fc_c16_values(const kiln_graph *g);
/* The layout field of a node's attrs (its op's layout_field: FusedConv,
 * PwDwConv, the pools), else NULL. */
KILN_PRIVATE int32_t *kiln__layout_attr(kiln_node *n);
/* Every layer back to NCHW (each kiln__layout_attr field 0). */
KILN_PRIVATE void kiln__fc_clear_layouts(kiln_graph *g);
/* The CPU backend's layouts hook (kiln_backend_i.layouts): tunes, then
 * chooses the chains (timing the layers that join one, vetoing those
 * oneDNN runs badly that way) and, for CPU engines, where kiln's direct
 * kernel runs faster inside the network than the tuned tactic. */
KILN_PRIVATE kiln_status kiln__cpu_layouts(kiln_layout_ctx *c);

#endif
