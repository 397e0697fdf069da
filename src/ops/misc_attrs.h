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

enum {
    RND_NORMAL = 0, RND_UNIFORM = 1, RND_NORMAL_LIKE = 2, RND_UNIFORM_LIKE = 3, RND_BERNOULLI = 4
};

/* ---- BlackmanWindow, HammingWindow, HannWindow (misc_signal.c); op->code: WIN_* */
typedef struct kiln_window_attrs {
    int32_t output_datatype; /* default float32 */
    int32_t periodic;        /* default 1 */
} kiln_window_attrs;

enum { WIN_BLACKMAN = 0, WIN_HAMMING = 1, WIN_HANN = 2 };

/* ---- DFT, STFT, MelWeightMatrix (misc_signal.c) */
typedef struct kiln_dft_attrs {
    int32_t axis;     /* default 1 */
    int32_t inverse;
    int32_t onesided;
} kiln_dft_attrs;

typedef struct kiln_stft_attrs {
    int32_t onesided; /* default 1 */
} kiln_stft_attrs;

typedef struct kiln_mel_attrs {
    int32_t output_datatype;
} kiln_mel_attrs;

/* ---- NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss (misc_loss.c;
 * op->code 0 / 1) */
enum loss_red { LOSS_NONE = 0, LOSS_SUM = 1, LOSS_MEAN = 2 };

typedef struct kiln_loss_attrs {
    int32_t reduction;    /* loss_red, default mean */
    int32_t has_ignore;
    int64_t ignore_index;
} kiln_loss_attrs;

#endif
