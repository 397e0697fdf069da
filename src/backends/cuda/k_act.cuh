/* k_act.cuh -- the activations of fused layers (KCU_ACT_*, cuda_kernels.h)
 * in device code, for the epilogues of k_fused.cu and k_dwconv.cu.
 * Included by those .cu files only, after k_common.cuh. */
#ifndef KILN_K_ACT_CUH
#define KILN_K_ACT_CUH

#include "k_common.cuh"

namespace kcu {

static_assert(KCU_ACT_COUNT == 8, "act_apply: handle every KCU_ACT_* (then update this count)");

/* (callers pass only KCU_ACT_* below KCU_ACT_COUNT: the run functions check)
 * NaN in gives NaN out, as ONNX and PyTorch: each comparison sends a NaN x
 * down the branch that returns it (x < 0 ? 0 : x; fmaxf(x, 0) would give 0). */
template <typename C> __device__ __forceinline__ C act_apply(int act, C a, C b, C x) {
    switch (act) {
    case KCU_ACT_NONE: return x;
    case KCU_ACT_RELU: return x < C(0) ? C(0) : x;
    case KCU_ACT_CLIP: return x < a ? a : (x > b ? b : x);
    case KCU_ACT_LEAKY_RELU: return x >= C(0) ? x : a * x;
    case KCU_ACT_SIGMOID: return C(1) / (C(1) + m_exp(-x));
    case KCU_ACT_SILU: return x * (C(1) / (C(1) + m_exp(-x)));
    case KCU_ACT_HARD_SWISH: {
        C t = x * (C(1) / C(6)) + C(0.5);
        t = t < C(0) ? C(0) : (t > C(1) ? C(1) : t);
        return x * t;
    }
    case KCU_ACT_HARD_SIGMOID: {
        C t = a * x + b;
        return t < C(0) ? C(0) : (t > C(1) ? C(1) : t);
    }
    default: return x;
    }
}

} /* namespace kcu */

#endif
