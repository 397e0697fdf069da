/* spatial_attrs.h -- attribute structs of spatial ops whose CPU kernels kept
 * them private (src/ops/nn_norm.c: LRN, MeanVarianceNormalization;
 * nn_pool.c: MaxRoiPool; misc_sample.c: GridSample, RoiAlign), and the
 * pooling and ConvTranspose geometry (nn_pool.c, nn_conv.c), shared with the
 * CUDA backend (src/backends/cuda/cuda_ops_spatial.c). The structs are POD,
 * written verbatim into engine files: never change a layout. */
#ifndef KILN_SPATIAL_ATTRS_H
#define KILN_SPATIAL_ATTRS_H

#include "ops/op.h"

/* nn_norm.c: LRN */
typedef struct kiln_lrn_attrs {
    float alpha, beta, bias;
    int32_t size;
} kiln_lrn_attrs;
KILN_ATTRS_SIZE(kiln_lrn_attrs, 16); KILN_ATTRS_AT(kiln_lrn_attrs, alpha, 0);
KILN_ATTRS_AT(kiln_lrn_attrs, beta, 4); KILN_ATTRS_AT(kiln_lrn_attrs, bias, 8);
KILN_ATTRS_AT(kiln_lrn_attrs, size, 12);

/* nn_norm.c: MeanVarianceNormalization */
typedef struct kiln_mvn_attrs {
    int32_t n_axes;
    int32_t reserved;
    int64_t axes[KILN_MAX_RANK];
} kiln_mvn_attrs;
KILN_ATTRS_SIZE(kiln_mvn_attrs, 72); KILN_ATTRS_AT(kiln_mvn_attrs, n_axes, 0);
KILN_ATTRS_AT(kiln_mvn_attrs, reserved, 4); KILN_ATTRS_AT(kiln_mvn_attrs, axes, 8);

/* nn_pool.c: MaxRoiPool */
typedef struct kiln_maxroipool_attrs {
    int32_t pooled_h, pooled_w;
    float spatial_scale;
} kiln_maxroipool_attrs;
KILN_ATTRS_SIZE(kiln_maxroipool_attrs, 12); KILN_ATTRS_AT(kiln_maxroipool_attrs, pooled_h, 0);
KILN_ATTRS_AT(kiln_maxroipool_attrs, pooled_w, 4); KILN_ATTRS_AT(kiln_maxroipool_attrs, spatial_scale, 8);

/* misc_sample.c: GridSample (mode GS_*, padding_mode GS_ZEROS.. in
 * ops/spatial_sample.h) */
typedef struct kiln_gridsample_attrs {
    int32_t mode;
    int32_t padding_mode;
    int32_t align_corners;
} kiln_gridsample_attrs;
KILN_ATTRS_SIZE(kiln_gridsample_attrs, 12); KILN_ATTRS_AT(kiln_gridsample_attrs, mode, 0);
KILN_ATTRS_AT(kiln_gridsample_attrs, padding_mode, 4); KILN_ATTRS_AT(kiln_gridsample_attrs, align_corners, 8);

/* misc_sample.c: RoiAlign */
typedef struct kiln_roialign_attrs {
    int32_t half_pixel; /* coordinate_transformation_mode: 1 half_pixel, 0 output_half_pixel */
    int32_t max_mode;
    int64_t out_h, out_w;
    int64_t sampling_ratio;
    float spatial_scale;
    int32_t pad_;
} kiln_roialign_attrs;
KILN_ATTRS_SIZE(kiln_roialign_attrs, 40); KILN_ATTRS_AT(kiln_roialign_attrs, half_pixel, 0);
KILN_ATTRS_AT(kiln_roialign_attrs, max_mode, 4); KILN_ATTRS_AT(kiln_roialign_attrs, out_h, 8);
KILN_ATTRS_AT(kiln_roialign_attrs, out_w, 16); KILN_ATTRS_AT(kiln_roialign_attrs, sampling_ratio, 24);
KILN_ATTRS_AT(kiln_roialign_attrs, spatial_scale, 32); KILN_ATTRS_AT(kiln_roialign_attrs, pad_, 36);

/* nn_pool.c: resolved geometry of MaxPool/AveragePool/LpPool (pads from
 * auto_pad, output sizes with ceil_mode) from the input shape. */
typedef struct kiln_pool_geom {
    int ns;
    int64_t N, C;
    int64_t in[KILN_MAX_RANK - 2], out[KILN_MAX_RANK - 2], k[KILN_MAX_RANK - 2],
        s[KILN_MAX_RANK - 2], d[KILN_MAX_RANK - 2], pb[KILN_MAX_RANK - 2], pe[KILN_MAX_RANK - 2];
    int64_t in_sz, out_sz;
} kiln_pool_geom;
struct kiln_pool_attrs;
KILN_PRIVATE kiln_status kiln__pool_geom(const char *node, const char *op,
                                         const struct kiln_pool_attrs *at, int rank,
                                         const int64_t *dims, kiln_pool_geom *g);
/* nn_pool.c: the taps [*a, *b) of a window starting at s, k taps d apart
 * (d >= 1), that land in [lo, hi) (the pooling kernels visit only these). */
KILN_PRIVATE void kiln__pool_taps(int64_t s, int64_t k, int64_t d, int64_t lo, int64_t hi, int64_t *a,
                                  int64_t *b);

/* nn_conv.c: ConvTranspose's geometry (pads resolved from auto_pad,
 * output_shape, output_padding) from X [N, C, in...] and W [C, M/group, k...]
 * shapes; the struct kiln_conv_geom of ops/fused_conv.h. */
struct kiln_conv_attrs;
struct kiln_conv_geom;
KILN_PRIVATE kiln_status kiln__convt_geom(const char *node, const struct kiln_conv_attrs *at,
                                          int xr, const int64_t *xd, int wr, const int64_t *wd,
                                          struct kiln_conv_geom *g);

#endif
