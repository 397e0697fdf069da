/* tensor_internal.h -- helpers shared by the tensor / data-movement operator
 * family (src/ops/tensor*.c). Private to that family. */
#ifndef KILN_OPS_TENSOR_INTERNAL_H
#define KILN_OPS_TENSOR_INTERNAL_H

#include "ops/op.h"

/* Internal rank limit of the strided copy engine: Tile and DepthToSpace view
 * a tensor of rank <= KILN_MAX_RANK as one of up to twice that rank. */
#define KILN_TX_MAX_RANK (2 * KILN_MAX_RANK)

/* Bytes moved per parallel task, roughly. */
#define KILN_TX_GRAIN_BYTES ((int64_t)32768)

/* Copies a strided view: for every index i of `dims` (rank <= KILN_TX_MAX_RANK),
 * dst[sum i_k*dst_st[k]] = src[sum i_k*src_st[k]], strides in elements of
 * `es` bytes (negative and zero source strides allowed; destination
 * positions must be distinct). Dims of 1 are dropped and contiguous axes
 * merged; contiguous rows become memcpy, and a transposed innermost pair is
 * copied in tiles. Runs on `pool` when the copy is big. */
KILN_PRIVATE void kiln__tx_copy(kiln_pool *pool, size_t es, int rank, const int64_t *dims,
                                void *dst, const int64_t *dst_st, const void *src,
                                const int64_t *src_st);
/* Row-major element strides of a dense tensor. */
KILN_PRIVATE void kiln__tx_strides(int rank, const int64_t *dims, int64_t *st);
/* Copies n bytes, splitting big copies over the pool. */
KILN_PRIVATE void kiln__tx_memcpy(kiln_pool *pool, void *dst, const void *src, size_t n);
/* Fills n elements of es bytes at dst with the element at `val`. */
KILN_PRIVATE void kiln__tx_fill(void *dst, int64_t n, const void *val, size_t es);

/* Element size of a dtype kiln can move (0 for STRING/unknown). On failure
 * reports "node 'x' (Op): dtype string is not supported". */
KILN_PRIVATE kiln_status kiln__tx_esize(const char *op, const char *node, kiln_dtype t,
                                        size_t *es);
/* Whether an element at p (dtype t, index i) is nonzero (true). -0.0 is zero,
 * NaN is nonzero. */
KILN_PRIVATE bool kiln__tx_nonzero(kiln_dtype t, const void *p, int64_t i);

/* Checks that input i of an infer call is an integer tensor of rank <= 1
 * (scalar allowed when allow_scalar) and returns its element count in *n
 * (-1 if unknown). */
KILN_PRIVATE kiln_status kiln__tx_int_vector(const kiln_infer_args *a, int i, const char *what,
                                             bool allow_scalar, int64_t *n);
/* Element i of an integer tensor (any integer dtype); kiln__tinfo_int
 * (common.c) is the same for a kiln_tinfo. */
static inline int64_t kiln__tx_tensor_int(const kiln_tensor *t, int64_t i) {
    return kiln__load_i64(t->dtype, t->data, i);
}

/* Merges two dims that must be equal (build time): a known value wins over a
 * symbol, a symbol over unknown. Fails when both are known and differ. */
KILN_PRIVATE kiln_status kiln__tx_merge_dim(const char *op, const char *node, int64_t a, int64_t b,
                                            int64_t *out);

/* Products of dims before and after `axis`: a tensor seen as [outer, dims[axis], inner]. */
static inline void kiln__tx_outer_inner(int rank, const int64_t *dims, int axis, int64_t *outer,
                                        int64_t *inner) {
    int64_t o = 1, n = 1;
    for (int k = 0; k < axis; k++) o *= dims[k];
    for (int k = axis + 1; k < rank; k++) n *= dims[k];
    *outer = o;
    *inner = n;
}

/* Validate helper: an attribute struct that is one axis in [-KILN_MAX_RANK,
 * KILN_MAX_RANK - 1] (kiln_axis_attrs). */
KILN_PRIVATE kiln_status kiln__tx_validate_axis(const kiln_op_def *op, const void *attrs,
                                                const char *node);

/* Import helper: attribute `attr` (ints) becomes input `input` as an int64
 * 1-D constant. Returns KILN_OK without change if the attribute is absent. */
KILN_PRIVATE kiln_status kiln__tx_ints_attr_to_input(kiln_import_ctx *ic, const char *attr,
                                                     int input);

/* Whether output i has memory to write (kernels skip optional outputs the
 * runtime did not allocate, e.g. zero-size ones). */
static inline bool kiln__tx_has_out(const kiln_kernel_args *a, int i) {
    return i < a->n_out && a->out[i] && a->out[i]->data;
}

static inline int64_t kiln__tx_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t kiln__tx_max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Standard "node 'x' (Op): " message prefix formatting. */
#define KILN_TX_FAIL(code, a, fmt, ...)                                                   \
    KILN_FAIL((code), "node '%s' (%s): " fmt, (a)->node_name ? (a)->node_name : "?",        \
              (a)->op ? (a)->op->name : "?", __VA_ARGS__)
#define KILN_TX_FAIL0(code, a, msg)                                                     \
    KILN_FAIL((code), "node '%s' (%s): %s", (a)->node_name ? (a)->node_name : "?",        \
              (a)->op ? (a)->op->name : "?", msg)

/* ---- attribute structs (POD, written into engine files verbatim) ---------- */

/* enum values stored in attributes (permanent) */
enum { RED_NONE = 0, RED_ADD = 1, RED_MUL = 2, RED_MAX = 3, RED_MIN = 4 };

enum { PAD_CONSTANT = 0, PAD_REFLECT = 1, PAD_EDGE = 2, PAD_WRAP = 3 };

/* RS_* (Resize modes, coordinate transformations, nearest modes): in
 * ops/spatial_sample.h, with the Resize arithmetic the CUDA kernels share */
#include "ops/spatial_sample.h"

/* tensor_gen.c */
typedef struct kiln_cos_attrs {
    int32_t dtype;
    uint8_t value[8];
} kiln_cos_attrs;
KILN_ATTRS_SIZE(kiln_cos_attrs, 12); KILN_ATTRS_AT(kiln_cos_attrs, dtype, 0);
KILN_ATTRS_AT(kiln_cos_attrs, value, 4);

/* tensor_gen.c */
typedef struct kiln_eyelike_attrs {
    int64_t k;
    int32_t dtype; /* 0: the input's */
    int32_t reserved;
} kiln_eyelike_attrs;
KILN_ATTRS_SIZE(kiln_eyelike_attrs, 16); KILN_ATTRS_AT(kiln_eyelike_attrs, k, 0);
KILN_ATTRS_AT(kiln_eyelike_attrs, dtype, 8); KILN_ATTRS_AT(kiln_eyelike_attrs, reserved, 12);

/* tensor_gen.c */
typedef struct kiln_trilu_attrs {
    int32_t upper;
} kiln_trilu_attrs;
KILN_ATTRS_SIZE(kiln_trilu_attrs, 4); KILN_ATTRS_AT(kiln_trilu_attrs, upper, 0);

/* tensor_gen.c */
typedef struct kiln_cumsum_attrs {
    int32_t exclusive, reverse;
} kiln_cumsum_attrs;
KILN_ATTRS_SIZE(kiln_cumsum_attrs, 8); KILN_ATTRS_AT(kiln_cumsum_attrs, exclusive, 0);
KILN_ATTRS_AT(kiln_cumsum_attrs, reverse, 4);

/* tensor_index.c */
typedef struct kiln_gathernd_attrs {
    int32_t batch_dims;
    int32_t reduction; /* ScatterND */
} kiln_gathernd_attrs;
KILN_ATTRS_SIZE(kiln_gathernd_attrs, 8); KILN_ATTRS_AT(kiln_gathernd_attrs, batch_dims, 0);
KILN_ATTRS_AT(kiln_gathernd_attrs, reduction, 4);

/* tensor_index.c */
typedef struct kiln_scatter_attrs {
    int32_t axis;
    int32_t reduction;
} kiln_scatter_attrs;
KILN_ATTRS_SIZE(kiln_scatter_attrs, 8); KILN_ATTRS_AT(kiln_scatter_attrs, axis, 0);
KILN_ATTRS_AT(kiln_scatter_attrs, reduction, 4);

/* tensor_layout.c */
typedef struct kiln_transpose_attrs {
    int32_t n_perm; /* 0: reverse the dims */
    int32_t perm[KILN_MAX_RANK];
} kiln_transpose_attrs;
KILN_ATTRS_SIZE(kiln_transpose_attrs, 36); KILN_ATTRS_AT(kiln_transpose_attrs, n_perm, 0);
KILN_ATTRS_AT(kiln_transpose_attrs, perm, 4);

/* tensor_layout.c */
typedef struct kiln_d2s_attrs {
    int32_t blocksize;
    int32_t crd; /* DepthToSpace mode CRD (else DCR) */
} kiln_d2s_attrs;
KILN_ATTRS_SIZE(kiln_d2s_attrs, 8); KILN_ATTRS_AT(kiln_d2s_attrs, blocksize, 0);
KILN_ATTRS_AT(kiln_d2s_attrs, crd, 4);

/* Concat, Gather, GatherElements, OneHot */
typedef struct kiln_axis_attrs {
    int32_t axis;
} kiln_axis_attrs;
KILN_ATTRS_SIZE(kiln_axis_attrs, 4); KILN_ATTRS_AT(kiln_axis_attrs, axis, 0);

/* tensor_layout.c */
typedef struct kiln_split_attrs {
    int32_t axis;
    int32_t num_outputs; /* opset 18 attribute; 0 if absent */
} kiln_split_attrs;
KILN_ATTRS_SIZE(kiln_split_attrs, 8); KILN_ATTRS_AT(kiln_split_attrs, axis, 0);
KILN_ATTRS_AT(kiln_split_attrs, num_outputs, 4);

/* tensor_pad.c */
typedef struct kiln_pad_attrs {
    int32_t mode;
} kiln_pad_attrs;
KILN_ATTRS_SIZE(kiln_pad_attrs, 4); KILN_ATTRS_AT(kiln_pad_attrs, mode, 0);

/* tensor_pad.c */
typedef struct kiln_revseq_attrs {
    int32_t batch_axis, time_axis;
} kiln_revseq_attrs;
KILN_ATTRS_SIZE(kiln_revseq_attrs, 8); KILN_ATTRS_AT(kiln_revseq_attrs, batch_axis, 0);
KILN_ATTRS_AT(kiln_revseq_attrs, time_axis, 4);

/* tensor_resize.c */
typedef struct kiln_resize_attrs {
    int32_t mode, ctm, nearest_mode, exclude_outside;
    float cubic_coeff_a, extrapolation_value;
    int32_t in_roi, in_scales, in_sizes; /* input index of each, or -1 */
} kiln_resize_attrs;
KILN_ATTRS_SIZE(kiln_resize_attrs, 36); KILN_ATTRS_AT(kiln_resize_attrs, mode, 0);
KILN_ATTRS_AT(kiln_resize_attrs, ctm, 4); KILN_ATTRS_AT(kiln_resize_attrs, nearest_mode, 8);
KILN_ATTRS_AT(kiln_resize_attrs, exclude_outside, 12); KILN_ATTRS_AT(kiln_resize_attrs, cubic_coeff_a, 16);
KILN_ATTRS_AT(kiln_resize_attrs, extrapolation_value, 20); KILN_ATTRS_AT(kiln_resize_attrs, in_roi, 24);
KILN_ATTRS_AT(kiln_resize_attrs, in_scales, 28); KILN_ATTRS_AT(kiln_resize_attrs, in_sizes, 32);

/* tensor_select.c */
typedef struct kiln_axis_opt_attrs {
    int32_t has_axis, axis;
    int32_t sorted; /* Unique */
} kiln_axis_opt_attrs;
KILN_ATTRS_SIZE(kiln_axis_opt_attrs, 12); KILN_ATTRS_AT(kiln_axis_opt_attrs, has_axis, 0);
KILN_ATTRS_AT(kiln_axis_opt_attrs, axis, 4); KILN_ATTRS_AT(kiln_axis_opt_attrs, sorted, 8);

/* tensor_shape.c */
typedef struct kiln_reshape_attrs {
    int32_t allowzero;
} kiln_reshape_attrs;
KILN_ATTRS_SIZE(kiln_reshape_attrs, 4); KILN_ATTRS_AT(kiln_reshape_attrs, allowzero, 0);

/* tensor_shape.c */
typedef struct kiln_flatten_attrs {
    int32_t axis;
} kiln_flatten_attrs;
KILN_ATTRS_SIZE(kiln_flatten_attrs, 4); KILN_ATTRS_AT(kiln_flatten_attrs, axis, 0);

/* tensor_shape.c */
typedef struct kiln_dropout_attrs {
    int32_t mask_like_input; /* opset < 10: mask has the input's dtype */
} kiln_dropout_attrs;
KILN_ATTRS_SIZE(kiln_dropout_attrs, 4); KILN_ATTRS_AT(kiln_dropout_attrs, mask_like_input, 0);

/* tensor_shape.c */
typedef struct kiln_shape_attrs {
    int64_t start, end;
    int32_t has_end;
    int32_t reserved;
} kiln_shape_attrs;
KILN_ATTRS_SIZE(kiln_shape_attrs, 24); KILN_ATTRS_AT(kiln_shape_attrs, start, 0);
KILN_ATTRS_AT(kiln_shape_attrs, end, 8); KILN_ATTRS_AT(kiln_shape_attrs, has_end, 16);
KILN_ATTRS_AT(kiln_shape_attrs, reserved, 20);

#endif
