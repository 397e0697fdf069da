/* misc_control.h -- control-flow ops (If, Loop, Scan): how their subgraphs
 * travel.
 *
 * A subgraph (If's branches, the body of Loop and Scan) is an ordinary
 * kiln_graph, serialized with the engine writer (src/format, device CPU)
 * into the bytes of a uint8 constant that is an input of its node. The
 * importer (src/onnx/import.c) makes every outer-scope value a subgraph
 * reads an explicit input of the node and a trailing input of each of the
 * node's subgraphs, so passes, liveness, the engine format and the runtime
 * see ordinary nodes. Inputs of a control-flow node:
 *
 *     If     then_branch, else_branch, cond, outer values...
 *     Loop   body, M, cond, v_initial..., outer values...
 *     Scan   body, [sequence_lens (Scan-8)], initial states..., scan inputs..., outer values...
 *
 * where the ONNX inputs keep their positions (absent optionals are -1) and
 * the attribute struct's n_onnx_in says how many there are. The kernels
 * deserialize each subgraph once per context (kept in the node's
 * kiln_node_state) and run it with the CPU kernels. */
#ifndef KILN_MISC_CONTROL_H
#define KILN_MISC_CONTROL_H

#include "ir/ir.h"

/* Serializes subgraph g into a new buffer (*data, freed with
 * kiln__aligned_free) of *size bytes. */
KILN_PRIVATE kiln_status kiln__subgraph_pack(const kiln_graph *g, void **data, size_t *size);

/* Deserializes a subgraph packed by kiln__subgraph_pack. *graph's constants
 * borrow from *blob (a 64-byte aligned copy of data, freed with
 * kiln__aligned_free after the graph). `what` names it in messages. */
KILN_PRIVATE kiln_status kiln__subgraph_unpack(const void *data, size_t size, const char *what,
                                               kiln_graph **graph, void **blob);

#endif
