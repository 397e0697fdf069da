/* k_ew_math.cuh -- the float math of the unary elementwise ops on the
 * device (unary_f<EW_U_*, C>), shared by the elementwise kernels
 * (k_elementwise.cu) and kiln.Pointwise's interpreter (k_pointwise.cu).
 * Included by k_*.cu files only, after k_common.cuh. */
#ifndef KILN_K_EW_MATH_CUH
#define KILN_K_EW_MATH_CUH

#include "k_common.cuh"

namespace kcu {

template <typename C> __device__ __forceinline__ C clamp01(C v) {
    v = v > C(1) ? C(1) : v;
    return v < C(0) ? C(0) : v;
}

template <int OP, typename C>
__device__ __forceinline__ C unary_f(C v, C alpha, C beta, C gamma) {
    const C zero = C(0), one = C(1);
    switch (OP) {
    case EW_U_ABS: return m_fabs(v);
    case EW_U_NEG: return -v;
    case EW_U_SQRT: return m_sqrt(v);
    case EW_U_EXP: return m_exp(v);
    case EW_U_LOG: return m_log(v);
    case EW_U_RECIPROCAL: return one / v;
    case EW_U_FLOOR: return m_floor(v);
    case EW_U_CEIL: return m_ceil(v);
    case EW_U_ROUND: return m_rint(v);
    case EW_U_SIGN: return v > zero ? one : (v < zero ? -one : v);
    case EW_U_SIN: return m_sin(v);
    case EW_U_COS: return m_cos(v);
    case EW_U_TAN: return m_tan(v);
    case EW_U_ASIN: return m_asin(v);
    case EW_U_ACOS: return m_acos(v);
    case EW_U_ATAN: return m_atan(v);
    case EW_U_SINH: return m_sinh(v);
    case EW_U_COSH: return m_cosh(v);
    case EW_U_ASINH: return m_asinh(v);
    case EW_U_ACOSH: return m_acosh(v);
    case EW_U_ATANH: return m_atanh(v);
    case EW_U_ERF: return m_erf(v);
    case EW_U_RELU: return v < zero ? zero : v;
    case EW_U_LEAKYRELU: return v < zero ? v * alpha : v;
    case EW_U_ELU: return v < zero ? alpha * m_expm1(v) : v;
    case EW_U_SELU: return v > zero ? gamma * v : gamma * alpha * m_expm1(v);
    case EW_U_CELU: return v < zero ? alpha * m_expm1(v / alpha) : v;
    case EW_U_SIGMOID: return one / (one + m_exp(-v));
    case EW_U_HARDSIGMOID: return clamp01(alpha * v + beta);
    case EW_U_HARDSWISH: return v * clamp01(C(1.0 / 6.0) * v + C(0.5));
    case EW_U_TANH: return m_tanh(v);
    case EW_U_SOFTPLUS: return (v > zero ? v : zero) + m_log1p(m_exp(-m_fabs(v)));
    case EW_U_SOFTSIGN: return v / (one + m_fabs(v));
    case EW_U_MISH: return v * m_tanh((v > zero ? v : zero) + m_log1p(m_exp(-m_fabs(v))));
    case EW_U_THRESHOLDEDRELU: return v <= alpha ? zero : v;
    case EW_U_SHRINK: return v >= -alpha && v <= alpha ? zero : (v < -alpha ? v + beta : v - beta);
    default: return v;
    }
}

} /* namespace kcu */

#endif
