/* misc_attrs.h -- attribute structs of the misc family's random, signal and
 * loss ops (src/ops/misc_random.c, misc_signal.c, misc_loss.c), shared with
 * device backends (src/backends/cuda/cuda_ops_misc.c). POD, written
 * verbatim into engine files: never reorder or retype a field. */
#ifndef KILN_MISC_ATTRS_H
#define KILN_MISC_ATTRS_H

#include "ops/op.h"

/* ---- RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike,
 * Bernoulli (misc_random.c); which one: op->code, RND_* */
typedef struct kiln_random_attrs {
    int32_t dtype;   /* output dtype; 0: the input's (Like/Bernoulli) */
    int32_t has_seed;
    float seed;
    float a, b;      /* normal: mean, scale; uniform: low, high */
    int32_t rank;    /* RandomNormal/RandomUniform: `shape` */
    int64_t shape[KILN_MAX_RANK];
} kiln_random_attrs;
KILN_ATTRS_SIZE(kiln_random_attrs, 88); KILN_ATTRS_AT(kiln_random_attrs, dtype, 0);
KILN_ATTRS_AT(kiln_random_attrs, has_seed, 4); KILN_ATTRS_AT(kiln_random_attrs, seed, 8);
KILN_ATTRS_AT(kiln_random_attrs, a, 12); KILN_ATTRS_AT(kiln_random_attrs, b, 16);
KILN_ATTRS_AT(kiln_random_attrs, rank, 20); KILN_ATTRS_AT(kiln_random_attrs, shape, 24);

enum {
    RND_NORMAL = 0, RND_UNIFORM = 1, RND_NORMAL_LIKE = 2, RND_UNIFORM_LIKE = 3, RND_BERNOULLI = 4
};

/* ---- BlackmanWindow, HammingWindow, HannWindow (misc_signal.c); op->code: WIN_* */
typedef struct kiln_window_attrs {
    int32_t output_datatype; /* default float32 */
    int32_t periodic;        /* default 1 */
} kiln_window_attrs;
KILN_ATTRS_SIZE(kiln_window_attrs, 8); KILN_ATTRS_AT(kiln_window_attrs, output_datatype, 0);
KILN_ATTRS_AT(kiln_window_attrs, periodic, 4);

enum { WIN_BLACKMAN = 0, WIN_HAMMING = 1, WIN_HANN = 2 };

/* ---- DFT, STFT, MelWeightMatrix (misc_signal.c) */
typedef struct kiln_dft_attrs {
    int32_t axis;     /* default 1 */
    int32_t inverse;
    int32_t onesided;
} kiln_dft_attrs;
KILN_ATTRS_SIZE(kiln_dft_attrs, 12); KILN_ATTRS_AT(kiln_dft_attrs, axis, 0);
KILN_ATTRS_AT(kiln_dft_attrs, inverse, 4); KILN_ATTRS_AT(kiln_dft_attrs, onesided, 8);

typedef struct kiln_stft_attrs {
    int32_t onesided; /* default 1 */
} kiln_stft_attrs;
KILN_ATTRS_SIZE(kiln_stft_attrs, 4); KILN_ATTRS_AT(kiln_stft_attrs, onesided, 0);

typedef struct kiln_mel_attrs {
    int32_t output_datatype;
} kiln_mel_attrs;
KILN_ATTRS_SIZE(kiln_mel_attrs, 4); KILN_ATTRS_AT(kiln_mel_attrs, output_datatype, 0);

/* ---- NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss (misc_loss.c;
 * op->code 0 / 1) */
enum loss_red { LOSS_NONE = 0, LOSS_SUM = 1, LOSS_MEAN = 2 };

typedef struct kiln_loss_attrs {
    int32_t reduction;    /* loss_red, default mean */
    int32_t has_ignore;
    int64_t ignore_index;
} kiln_loss_attrs;
KILN_ATTRS_SIZE(kiln_loss_attrs, 16); KILN_ATTRS_AT(kiln_loss_attrs, reduction, 0);
KILN_ATTRS_AT(kiln_loss_attrs, has_ignore, 4); KILN_ATTRS_AT(kiln_loss_attrs, ignore_index, 8);

#endif
