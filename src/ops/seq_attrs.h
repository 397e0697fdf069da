/* seq_attrs.h -- attribute structs of the "seq" ops (recurrent layers,
 * linear quantization, Einsum), shared by their CPU kernels
 * (src/ops/misc_rnn.c, misc_quant.c, nn_einsum.c) and the CUDA backend
 * (src/backends/cuda/cuda_ops_seq.c). POD, written verbatim into engine
 * files: never change a layout. */
#ifndef KILN_SEQ_ATTRS_H
#define KILN_SEQ_ATTRS_H

#include "ops/op.h"

/* ---- misc_rnn.c: RNN, GRU, LSTM ---------------------------------------- */

/* kiln_op_def.code of the three ops */
enum kiln_rnn_kind { KILN_RNN_SIMPLE = 0, KILN_RNN_GRU = 1, KILN_RNN_LSTM = 2 };
enum kiln_rnn_dir { KILN_RNN_FORWARD = 0, KILN_RNN_REVERSE = 1, KILN_RNN_BIDI = 2 };
enum kiln_rnn_act { KILN_RNN_ACT_SIGMOID = 0, KILN_RNN_ACT_TANH, KILN_RNN_ACT_RELU };

typedef struct kiln_rnn_attrs {
    int32_t hidden_size;         /* 0: taken from R */
    int32_t direction;           /* kiln_rnn_dir */
    int32_t layout;              /* 0 or 1 */
    int32_t linear_before_reset; /* GRU */
    int32_t input_forget;        /* LSTM */
    int32_t has_clip;
    float clip;
    int32_t act[6];              /* per direction: f, g, h (kiln_rnn_act) */
} kiln_rnn_attrs;
KILN_ATTRS_SIZE(kiln_rnn_attrs, 52); KILN_ATTRS_AT(kiln_rnn_attrs, hidden_size, 0);
KILN_ATTRS_AT(kiln_rnn_attrs, direction, 4); KILN_ATTRS_AT(kiln_rnn_attrs, layout, 8);
KILN_ATTRS_AT(kiln_rnn_attrs, linear_before_reset, 12); KILN_ATTRS_AT(kiln_rnn_attrs, input_forget, 16);
KILN_ATTRS_AT(kiln_rnn_attrs, has_clip, 20); KILN_ATTRS_AT(kiln_rnn_attrs, clip, 24);
KILN_ATTRS_AT(kiln_rnn_attrs, act, 28);

/* ---- misc_quant.c: QuantizeLinear, DequantizeLinear --------------------- */

typedef struct kiln_qdq_attrs {
    int32_t axis; /* default 1 */
} kiln_qdq_attrs;
KILN_ATTRS_SIZE(kiln_qdq_attrs, 4); KILN_ATTRS_AT(kiln_qdq_attrs, axis, 0);

/* ---- nn_einsum.c: Einsum -------------------------------------------------- */

#define KILN_ES_MAX_EQ 256
#define KILN_ES_MAX_OPS 16
#define KILN_ES_MAX_LABELS (52 + KILN_MAX_RANK) /* letters + ellipsis dims */

typedef struct kiln_einsum_attrs {
    char equation[KILN_ES_MAX_EQ]; /* spaces removed, NUL-terminated */
} kiln_einsum_attrs;
KILN_ATTRS_SIZE(kiln_einsum_attrs, 256); KILN_ATTRS_AT(kiln_einsum_attrs, equation, 0);

/* The loops of an Einsum for given operand shapes: every output element
 * (row-major over out_size) is the sum, over every index of the summed
 * labels (row-major over sum_size), of the product of the operands'
 * elements at offsets sum_k idx_k * out_str[op][k] + sum_k j_k *
 * sum_str[op][k] (diagonals add strides, broadcast size-1 dims get 0). */
typedef struct kiln_einsum_loops {
    int n_ops, n_out, n_sum;
    int64_t out_size[KILN_MAX_RANK];
    int64_t sum_size[KILN_ES_MAX_LABELS];
    int64_t out_str[KILN_ES_MAX_OPS][KILN_MAX_RANK];
    int64_t sum_str[KILN_ES_MAX_OPS][KILN_ES_MAX_LABELS];
} kiln_einsum_loops;

/* nn_einsum.c: parses equation eq for n_ops operands of the given ranks and
 * dims (unknown dims allowed: then sizes and strides are not meaningful,
 * the counts are) and fills *l. Fails on a malformed equation or mismatched
 * shapes, naming the node. */
KILN_PRIVATE kiln_status kiln__einsum_loops(const char *node, const char *eq, int n_ops,
                                            const int *ranks, const int64_t *const *dims,
                                            kiln_einsum_loops *l);

#endif
