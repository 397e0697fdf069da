/* nn_attrs.h -- attribute structs of the nn op family (src/ops/nn_*.c),
 * shared with device backends that run these ops. POD, written verbatim
 * into engine files: never change a layout, only append new structs. */
#ifndef KILN_NN_ATTRS_H
#define KILN_NN_ATTRS_H

#include "ops/op.h"

#define KILN_NN_MAX_SP (KILN_MAX_RANK - 2) /* spatial dims of Conv/Pool */

enum { PAD_NOTSET = 0, PAD_SAME_UPPER = 1, PAD_SAME_LOWER = 2, PAD_VALID = 3 };
enum { POOL_MAX = 0, POOL_AVG = 1, POOL_LP = 2 };
enum { SM_SOFTMAX = 0, SM_LOGSOFTMAX = 1, SM_HARDMAX = 2 };

/* nn_conv.c: Conv, ConvTranspose, ConvInteger, QLinearConv. Counts of 0
 * mean "attribute absent" (defaults apply). */
typedef struct kiln_conv_attrs {
    int32_t auto_pad; /* PAD_* */
    int32_t group;
    int32_t n_kernel, n_pads, n_strides, n_dilations, n_out_pad, n_out_shape;
    int64_t kernel[KILN_NN_MAX_SP];
    int64_t pads[2 * KILN_NN_MAX_SP];
    int64_t strides[KILN_NN_MAX_SP];
    int64_t dilations[KILN_NN_MAX_SP];
    int64_t output_padding[KILN_NN_MAX_SP];
    int64_t output_shape[KILN_MAX_RANK];
} kiln_conv_attrs;
KILN_ATTRS_SIZE(kiln_conv_attrs, 384); KILN_ATTRS_AT(kiln_conv_attrs, auto_pad, 0);
KILN_ATTRS_AT(kiln_conv_attrs, group, 4); KILN_ATTRS_AT(kiln_conv_attrs, n_kernel, 8);
KILN_ATTRS_AT(kiln_conv_attrs, n_pads, 12); KILN_ATTRS_AT(kiln_conv_attrs, n_strides, 16);
KILN_ATTRS_AT(kiln_conv_attrs, n_dilations, 20); KILN_ATTRS_AT(kiln_conv_attrs, n_out_pad, 24);
KILN_ATTRS_AT(kiln_conv_attrs, n_out_shape, 28); KILN_ATTRS_AT(kiln_conv_attrs, kernel, 32);
KILN_ATTRS_AT(kiln_conv_attrs, pads, 80); KILN_ATTRS_AT(kiln_conv_attrs, strides, 176);
KILN_ATTRS_AT(kiln_conv_attrs, dilations, 224); KILN_ATTRS_AT(kiln_conv_attrs, output_padding, 272);
KILN_ATTRS_AT(kiln_conv_attrs, output_shape, 320);

/* CPU MaxPool layouts (kiln_pool_attrs.layout), set by kiln__fc_choose_layouts
 * for a float32 2-D MaxPool between layers that pass NHWC tensors. The
 * reference kernels read and write NCHW only: these layouts are the CPU
 * backend's kernels (backends/cpu/kernels/pool_cpu.c). */
enum {
    KILN_POOL_LAYOUT_NHWC = 1, /* MaxPool, AveragePool (CUDA): X and Y NHWC (rank 4); GlobalAveragePool: X NHWC */
    KILN_POOL_LAYOUT_C16 = 2,  /* the same, nChw16c (C % 16 == 0) */
};

/* nn_pool.c: MaxPool, AveragePool, LpPool and the global pools */
typedef struct kiln_pool_attrs {
    int32_t auto_pad;
    int32_t ceil_mode;
    int32_t count_include_pad;
    int32_t storage_order;
    int32_t n_kernel, n_pads, n_strides, n_dilations;
    float p; /* LpPool / GlobalLpPool */
    int32_t layout; /* KILN_POOL_LAYOUT_* (CPU MaxPool inside an NHWC chain, CPU
                     * GlobalAveragePool reading one; else 0) */
    int64_t kernel[KILN_NN_MAX_SP];
    int64_t pads[2 * KILN_NN_MAX_SP];
    int64_t strides[KILN_NN_MAX_SP];
    int64_t dilations[KILN_NN_MAX_SP];
} kiln_pool_attrs;
KILN_ATTRS_SIZE(kiln_pool_attrs, 280); KILN_ATTRS_AT(kiln_pool_attrs, auto_pad, 0);
KILN_ATTRS_AT(kiln_pool_attrs, ceil_mode, 4); KILN_ATTRS_AT(kiln_pool_attrs, count_include_pad, 8);
KILN_ATTRS_AT(kiln_pool_attrs, storage_order, 12); KILN_ATTRS_AT(kiln_pool_attrs, n_kernel, 16);
KILN_ATTRS_AT(kiln_pool_attrs, n_pads, 20); KILN_ATTRS_AT(kiln_pool_attrs, n_strides, 24);
KILN_ATTRS_AT(kiln_pool_attrs, n_dilations, 28); KILN_ATTRS_AT(kiln_pool_attrs, p, 32);
KILN_ATTRS_AT(kiln_pool_attrs, layout, 36); KILN_ATTRS_AT(kiln_pool_attrs, kernel, 40);
KILN_ATTRS_AT(kiln_pool_attrs, pads, 88); KILN_ATTRS_AT(kiln_pool_attrs, strides, 184);
KILN_ATTRS_AT(kiln_pool_attrs, dilations, 232);

/* nn_matmul.c: Gemm */
typedef struct kiln_gemm_attrs {
    float alpha, beta;
    int32_t trans_a, trans_b;
} kiln_gemm_attrs;
KILN_ATTRS_SIZE(kiln_gemm_attrs, 16); KILN_ATTRS_AT(kiln_gemm_attrs, alpha, 0);
KILN_ATTRS_AT(kiln_gemm_attrs, beta, 4); KILN_ATTRS_AT(kiln_gemm_attrs, trans_a, 8);
KILN_ATTRS_AT(kiln_gemm_attrs, trans_b, 12);

/* nn_norm.c */
typedef struct kiln_bn_attrs {
    float epsilon;
    int32_t spatial; /* opset <= 8: 0 means per-element parameters */
} kiln_bn_attrs;
KILN_ATTRS_SIZE(kiln_bn_attrs, 8); KILN_ATTRS_AT(kiln_bn_attrs, epsilon, 0);
KILN_ATTRS_AT(kiln_bn_attrs, spatial, 4);

typedef struct kiln_eps_attrs { /* InstanceNormalization */
    float epsilon;
} kiln_eps_attrs;
KILN_ATTRS_SIZE(kiln_eps_attrs, 4); KILN_ATTRS_AT(kiln_eps_attrs, epsilon, 0);

typedef struct kiln_ln_attrs { /* LayerNormalization, RMSNormalization */
    int32_t axis;
    float epsilon;
    int32_t stash_type;
} kiln_ln_attrs;
KILN_ATTRS_SIZE(kiln_ln_attrs, 12); KILN_ATTRS_AT(kiln_ln_attrs, axis, 0);
KILN_ATTRS_AT(kiln_ln_attrs, epsilon, 4); KILN_ATTRS_AT(kiln_ln_attrs, stash_type, 8);

typedef struct kiln_softmax_attrs { /* Softmax, LogSoftmax, Hardmax */
    int32_t axis;
    int32_t coerce_2d; /* opset < 13: flatten to [prod(dims[:axis]), prod(dims[axis:])] */
} kiln_softmax_attrs;
KILN_ATTRS_SIZE(kiln_softmax_attrs, 8); KILN_ATTRS_AT(kiln_softmax_attrs, axis, 0);
KILN_ATTRS_AT(kiln_softmax_attrs, coerce_2d, 4);

/* Import helpers shared by the nn family (src/ops/nn_attrs.c). */
/* Reads an int-list attribute into dst (at most cap values; more is an
 * error naming the attribute); *count = 0 when absent. */
KILN_PRIVATE kiln_status kiln__nn_read_ints(kiln_import_ctx *ic, const char *name, int64_t *dst,
                                            int cap, int32_t *count);
/* SAME_UPPER/SAME_LOWER padding of one spatial dim (input in >= 0, kernel k,
 * stride s, dilation d): sets the begin/end pads and returns the output size. */
KILN_PRIVATE int64_t kiln__nn_same_pads(int auto_pad, int64_t in, int64_t k, int64_t s, int64_t d,
                                        int64_t *pb, int64_t *pe);
/* Parses `auto_pad` into PAD_*. */
KILN_PRIVATE kiln_status kiln__nn_parse_auto_pad(kiln_import_ctx *ic, int32_t *out);

/* LayerNormalization of one float32 row x of D elements (RMSNormalization
 * when !center: no mean subtracted) into y, which may be x itself: float
 * lanes summed into double, as the reference kernel (src/ops/nn_norm.c);
 * Scale of D elements, bias of D or NULL. Sets *mean and *inv (the
 * statistics outputs) in double. */
KILN_PRIVATE void kiln__ln_row_f32(const float *x, float *y, const float *scale, const float *bias, int64_t D,
                                   float eps, bool center, double *mean, double *inv);

#endif
