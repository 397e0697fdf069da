/* k_act.cuh -- the activations of fused layers (KILN_FC_ACT_*, ops/fused_act_codes.h)
 * in device code, for the epilogues of k_fused.cu and k_dwconv.cu.
 * Included by those .cu files only, after k_common.cuh. */
#ifndef KILN_K_ACT_CUH
#define KILN_K_ACT_CUH

#include "k_common.cuh"

namespace kcu {

static_assert(KILN_FC_ACT_COUNT == 8, "act_apply: handle every KILN_FC_ACT_* (then update this count)");

/* (callers pass only KILN_FC_ACT_* below KILN_FC_ACT_COUNT: the run functions check)
 * NaN in gives NaN out, as ONNX and PyTorch: each comparison sends a NaN x
 * down the branch that returns it (x < 0 ? 0 : x; fmaxf(x, 0) would give 0). */
template <typename C> __device__ __forceinline__ C act_apply(int act, C a, C b, C x) {
    switch (act) {
    case KILN_FC_ACT_NONE: return x;
    case KILN_FC_ACT_RELU: return x < C(0) ? C(0) : x;
    case KILN_FC_ACT_CLIP: return x < a ? a : (x > b ? b : x);
    case KILN_FC_ACT_LEAKY_RELU: return x >= C(0) ? x : a * x;
    case KILN_FC_ACT_SIGMOID: return C(1) / (C(1) + m_exp(-x));
    case KILN_FC_ACT_SILU: return x * (C(1) / (C(1) + m_exp(-x)));
    case KILN_FC_ACT_HARD_SWISH: {
        C t = x * (C(1) / C(6)) + C(0.5);
        t = t < C(0) ? C(0) : (t > C(1) ? C(1) : t);
        return x * t;
    }
    case KILN_FC_ACT_HARD_SIGMOID: {
        C t = a * x + b;
        return t < C(0) ? C(0) : (t > C(1) ? C(1) : t);
    }
    default: return x;
    }
}

} /* namespace kcu */

#endif
