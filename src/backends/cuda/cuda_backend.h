/* cuda_backend.h -- what the rest of kiln sees of the CUDA backend.
 *
 * Built only when KILN_HAVE_CUDA is set (cmake/cuda.cmake, KILN_CUDA=ON or
 * AUTO with nvcc and cuBLASLt found). kiln__backend_for(KILN_DEVICE_CUDA)
 * returns kiln__cuda_backend() in such builds. With no usable GPU at run
 * time the backend still exists: state_create fails with KILN_ERR_DEVICE
 * ("no CUDA device available: ...") and nothing else is reached. */
#ifndef KILN_CUDA_BACKEND_H
#define KILN_CUDA_BACKEND_H

#include "backends/backend.h"

/* The registry's getter (backends/registry.c): NULL without CUDA. */
#if KILN_HAVE_CUDA
#define KILN_CUDA_BACKEND_GET kiln__cuda_backend
#else
#define KILN_CUDA_BACKEND_GET NULL
#endif

#if KILN_HAVE_CUDA
KILN_PRIVATE const kiln_backend_i *kiln__cuda_backend(void);
/* Lets fp32 matrix products and convolutions of this state use TF32 tensor
 * cores (KILN_PRECISION_TF32). Off by default. */
KILN_PRIVATE kiln_status kiln__cuda_set_tf32(void *state, bool allow);
/* Device index, multiprocessor count and compute capability of a state
 * (for inspect and for refusing engines built for another architecture). */
KILN_PRIVATE void kiln__cuda_state_info(const void *state, int *device, int *sm_count,
                                        int *cc_major, int *cc_minor);
#endif

#endif
