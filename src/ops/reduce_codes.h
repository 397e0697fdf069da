/* reduce_codes.h -- the `code` of the Reduce* ops' descriptors
 * (kiln_op_def.code): which reduction. The CPU kernels (src/ops/reduce.c)
 * and the CUDA launcher (src/backends/cuda/k_reduce.cu) both switch on
 * them, so this header is plain C that C++ reads too: no includes, no kiln
 * types. */
#ifndef KILN_REDUCE_CODES_H
#define KILN_REDUCE_CODES_H

enum {
    RK_SUM = 0,
    RK_MEAN,
    RK_MAX,
    RK_MIN,
    RK_PROD,
    RK_L1,
    RK_L2,
    RK_LOGSUM,
    RK_LOGSUMEXP,
    RK_SUMSQUARE,
    RK_COUNT
};

#endif
