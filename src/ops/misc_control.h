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
 * kiln_node_state), with the loader their caller gives them
 * (kiln_kernel_args.sub: src/format/subgraph.c), and run it with the
 * ops' reference kernels. */
#ifndef KILN_MISC_CONTROL_H
#define KILN_MISC_CONTROL_H

#include "ir/ir.h"

#endif
