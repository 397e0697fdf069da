/* fused_norm.h -- kiln.AddLayerNorm: LayerNormalization of a sum, the
 * residual Add before it fused into the normalization (made by
 * src/passes/fuse_norm.c).
 *
 *   inputs   A (float32/float16/bfloat16), R (A's dtype), Scale, B (optional)
 *   outputs  Y, Sum (optional)
 *   Sum = A + R, rounded to A's type (what the Add it replaces wrote)
 *   Y   = LayerNormalization(Sum; Scale, B, axis, epsilon)
 *
 * R has A's shape, or broadcasts to it over leading dims only (its shape,
 * right-aligned, is 1 ... 1 followed by A's trailing dims, and covers whole
 * normalized rows: BERT's position embeddings [1, S, D] added to [N, S, D]),
 * so R's row of output row r is r % (rows of R). Scale and B broadcast to
 * the normalized dims as in LayerNormalization. Mean and InvStdDev are not
 * outputs (a LayerNormalization whose statistics are read is not fused). */
#ifndef KILN_FUSED_NORM_H
#define KILN_FUSED_NORM_H

#include "ops/op.h"

typedef struct kiln_add_ln_attrs {
    int32_t axis;  /* first normalized axis, as LayerNormalization's (negative counts from the end) */
    float epsilon;
} kiln_add_ln_attrs;
KILN_ATTRS_SIZE(kiln_add_ln_attrs, 8);
KILN_ATTRS_AT(kiln_add_ln_attrs, axis, 0);
KILN_ATTRS_AT(kiln_add_ln_attrs, epsilon, 4);

/* Whether R (r_dims of rank r_rank) broadcasts to A (rank/dims) as an
 * AddLayerNorm over axis needs, provably for every size its dynamic dims
 * take: the normalized dims known, the dims before them known or named
 * symbols (KILN_DIM_SYM: R's dim equals A's where it is the same symbol).
 * What the fusion pass checks on an engine over a profile. */
KILN_PRIVATE bool kiln__add_ln_fits(int rank, const int64_t *dims, int r_rank, const int64_t *r_dims, int axis);

/* The rows of an AddLayerNorm over A of rank/dims: rows, normalized size D
 * and the rows of R (r_dims of rank r_rank) that repeat over them; false when
 * R does not broadcast that way (or a dim is not known). The kernels call it
 * on the tensors' run-time dims. */
KILN_PRIVATE bool kiln__add_ln_geom(int rank, const int64_t *dims, int r_rank, const int64_t *r_dims, int axis,
                                    int64_t *rows, int64_t *D, int64_t *r_rows);

/* Workspace of the reference kernel: the sum's bytes when Sum is not an output. */
KILN_PRIVATE size_t kiln__add_ln_ref_workspace(const kiln_infer_args *a);

#endif
