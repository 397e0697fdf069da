/* k_pointwise.cu -- kiln.Pointwise: one kernel interprets the layer's
 * program (src/ops/pointwise_codes.h) from its parameter block.
 *
 * A thread takes `V` consecutive output elements (4 where the geometry
 * allows 16-byte float / 8-byte half loads, else 1), loads every input
 * into registers (converted to float), runs the instructions lane by lane
 * and stores the outputs. The loop over instructions reads them from the
 * parameter block, uniformly across the warp, so its switches do not
 * diverge; the register file is a fixed array of R x V floats addressed
 * only through switches with constant indices, so it stays in registers
 * (no local memory). R is 4, 8 or 16, the smallest that holds the
 * program: fewer registers, more warps per SM for this memory-bound work.
 * The unary math is the elementwise kernels' own (k_ew_math.cuh). */
#include "k_common.cuh"
#include "k_ew_math.cuh"
#include "k_pointwise.h"

namespace kcu {

template <int R, int V>
__device__ __forceinline__ void reg_get(const float (&r)[R][V], int i, float (&o)[V]) {
    switch (i) {
#define KCU_PW_GET(k)                                                \
    case k:                                                          \
        if (k < R) {                                                 \
            _Pragma("unroll") for (int l = 0; l < V; l++) o[l] = r[k < R ? k : 0][l]; \
        }                                                            \
        break;
        KCU_PW_GET(0) KCU_PW_GET(1) KCU_PW_GET(2) KCU_PW_GET(3) KCU_PW_GET(4) KCU_PW_GET(5)
        KCU_PW_GET(6) KCU_PW_GET(7) KCU_PW_GET(8) KCU_PW_GET(9) KCU_PW_GET(10) KCU_PW_GET(11)
        KCU_PW_GET(12) KCU_PW_GET(13) KCU_PW_GET(14) KCU_PW_GET(15)
#undef KCU_PW_GET
    default: break;
    }
}

template <int R, int V>
__device__ __forceinline__ void reg_set(float (&r)[R][V], int i, const float (&v)[V]) {
    switch (i) {
#define KCU_PW_SET(k)                                                \
    case k:                                                          \
        if (k < R) {                                                 \
            _Pragma("unroll") for (int l = 0; l < V; l++) r[k < R ? k : 0][l] = v[l]; \
        }                                                            \
        break;
        KCU_PW_SET(0) KCU_PW_SET(1) KCU_PW_SET(2) KCU_PW_SET(3) KCU_PW_SET(4) KCU_PW_SET(5)
        KCU_PW_SET(6) KCU_PW_SET(7) KCU_PW_SET(8) KCU_PW_SET(9) KCU_PW_SET(10) KCU_PW_SET(11)
        KCU_PW_SET(12) KCU_PW_SET(13) KCU_PW_SET(14) KCU_PW_SET(15)
#undef KCU_PW_SET
    default: break;
    }
}

__device__ __forceinline__ float ld1(int dt, const void *base, int64_t o) {
    switch (dt) {
    case KILN_DTYPE_FLOAT32: return ((const float *)base)[o];
    case KILN_DTYPE_FLOAT16: return __half2float(((const __half *)base)[o]);
    case KILN_DTYPE_BFLOAT16: return __bfloat162float(((const __nv_bfloat16 *)base)[o]);
    case KILN_DTYPE_BOOL: return ((const uint8_t *)base)[o] ? 1.0f : 0.0f;
    case KILN_DTYPE_INT32: return (float)((const int32_t *)base)[o];
    case KILN_DTYPE_INT64: return (float)((const int64_t *)base)[o];
    default: return 0.0f;
    }
}

__device__ __forceinline__ float half_bits(int dt, uint32_t bits) {
    unsigned short h = (unsigned short)bits;
    return dt == KILN_DTYPE_FLOAT16 ? __half2float(__ushort_as_half(h))
                                    : __bfloat162float(__ushort_as_bfloat16(h));
}

/* V consecutive elements from offset o (contiguous), or one broadcast (bcast). */
template <int V>
__device__ __forceinline__ void ldv(int dt, const void *base, int64_t o, bool bcast, float (&v)[V]) {
    if (V == 1 || bcast) {
        float x = ld1(dt, base, o);
#pragma unroll
        for (int l = 0; l < V; l++) v[l] = x;
        return;
    }
    if constexpr (V == 4) {
        switch (dt) {
        case KILN_DTYPE_FLOAT32: {
            float4 q = *(const float4 *)((const float *)base + o);
            v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
            return;
        }
        case KILN_DTYPE_FLOAT16:
        case KILN_DTYPE_BFLOAT16: {
            uint2 q = *(const uint2 *)((const uint16_t *)base + o);
            v[0] = half_bits(dt, q.x & 0xffffu), v[1] = half_bits(dt, q.x >> 16);
            v[2] = half_bits(dt, q.y & 0xffffu), v[3] = half_bits(dt, q.y >> 16);
            return;
        }
        case KILN_DTYPE_BOOL: {
            uint32_t q = *(const uint32_t *)((const uint8_t *)base + o);
#pragma unroll
            for (int l = 0; l < 4; l++) v[l] = (q >> (8 * l)) & 0xffu ? 1.0f : 0.0f;
            return;
        }
        default:
#pragma unroll
            for (int l = 0; l < V; l++) v[l] = ld1(dt, base, o + l);
            return;
        }
    }
}

__device__ __forceinline__ uint32_t half_of(int dt, float x) {
    return dt == KILN_DTYPE_FLOAT16 ? (uint32_t)__half_as_ushort(__float2half_rn(x))
                                    : (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(x));
}

__device__ __forceinline__ void st1(int dt, void *base, int64_t o, float x) {
    switch (dt) {
    case KILN_DTYPE_FLOAT32: ((float *)base)[o] = x; return;
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: ((uint16_t *)base)[o] = (uint16_t)half_of(dt, x); return;
    case KILN_DTYPE_BOOL: ((uint8_t *)base)[o] = x != 0.0f; return;
    default: return;
    }
}

template <int V> __device__ __forceinline__ void stv(int dt, void *base, int64_t o, const float (&v)[V]) {
    if constexpr (V == 4) {
        switch (dt) {
        case KILN_DTYPE_FLOAT32: *(float4 *)((float *)base + o) = make_float4(v[0], v[1], v[2], v[3]); return;
        case KILN_DTYPE_FLOAT16:
        case KILN_DTYPE_BFLOAT16:
            *(uint2 *)((uint16_t *)base + o) =
                make_uint2(half_of(dt, v[0]) | half_of(dt, v[1]) << 16, half_of(dt, v[2]) | half_of(dt, v[3]) << 16);
            return;
        case KILN_DTYPE_BOOL:
            *(uint32_t *)((uint8_t *)base + o) = (uint32_t)(v[0] != 0.0f) | (uint32_t)(v[1] != 0.0f) << 8 |
                                                 (uint32_t)(v[2] != 0.0f) << 16 | (uint32_t)(v[3] != 0.0f) << 24;
            return;
        default: return;
        }
    } else {
#pragma unroll
        for (int l = 0; l < V; l++) st1(dt, base, o + l, v[l]);
    }
}

__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f)); }
__device__ __forceinline__ float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
}

/* One instruction over the V lanes. */
template <int R, int V> __device__ __forceinline__ void step(const kcu_pw_instr &in, float (&r)[R][V]) {
    const int op = in.op;
    const float p0 = in.p0, p1 = in.p1;
    float a[V], b[V], c[V], d[V];
    if (in.imm == 1) {
#pragma unroll
        for (int l = 0; l < V; l++) a[l] = p0;
    } else {
        reg_get<R, V>(r, in.a, a);
    }
    if (op >= KILN_PW_ADD) {
        if (in.imm == 2) {
#pragma unroll
            for (int l = 0; l < V; l++) b[l] = p0;
        } else {
            reg_get<R, V>(r, in.b, b);
        }
    }
    if (op >= KILN_PW_WHERE) {
        if (in.imm == 3) {
#pragma unroll
            for (int l = 0; l < V; l++) c[l] = p0;
        } else {
            reg_get<R, V>(r, in.c, c);
        }
    }
    switch (op) {
#define KCU_PW_L(OP, EXPR)                                   \
    case OP:                                                 \
        _Pragma("unroll") for (int l = 0; l < V; l++) {      \
            const float x = a[l];                            \
            d[l] = (EXPR);                                   \
        }                                                    \
        break;
#define KCU_PW_B(OP, EXPR)                                   \
    case OP:                                                 \
        _Pragma("unroll") for (int l = 0; l < V; l++) {      \
            const float x = a[l], y = b[l];                  \
            d[l] = (EXPR);                                   \
        }                                                    \
        break;
#define KCU_PW_U(OP, EW) KCU_PW_L(OP, (unary_f<EW, float>(x, p0, p1, p1)))
        KCU_PW_L(KILN_PW_MOV, x)
        KCU_PW_U(KILN_PW_NEG, EW_U_NEG)
        KCU_PW_U(KILN_PW_ABS, EW_U_ABS)
        KCU_PW_U(KILN_PW_SQRT, EW_U_SQRT)
        KCU_PW_U(KILN_PW_EXP, EW_U_EXP)
        KCU_PW_U(KILN_PW_LOG, EW_U_LOG)
        KCU_PW_U(KILN_PW_RECIP, EW_U_RECIPROCAL)
        KCU_PW_U(KILN_PW_FLOOR, EW_U_FLOOR)
        KCU_PW_U(KILN_PW_CEIL, EW_U_CEIL)
        KCU_PW_U(KILN_PW_ROUND, EW_U_ROUND)
        KCU_PW_U(KILN_PW_SIGN, EW_U_SIGN)
        KCU_PW_U(KILN_PW_SIN, EW_U_SIN)
        KCU_PW_U(KILN_PW_COS, EW_U_COS)
        KCU_PW_U(KILN_PW_TAN, EW_U_TAN)
        KCU_PW_U(KILN_PW_ASIN, EW_U_ASIN)
        KCU_PW_U(KILN_PW_ACOS, EW_U_ACOS)
        KCU_PW_U(KILN_PW_ATAN, EW_U_ATAN)
        KCU_PW_U(KILN_PW_SINH, EW_U_SINH)
        KCU_PW_U(KILN_PW_COSH, EW_U_COSH)
        KCU_PW_U(KILN_PW_ASINH, EW_U_ASINH)
        KCU_PW_U(KILN_PW_ACOSH, EW_U_ACOSH)
        KCU_PW_U(KILN_PW_ATANH, EW_U_ATANH)
        KCU_PW_U(KILN_PW_ERF, EW_U_ERF)
        KCU_PW_U(KILN_PW_RELU, EW_U_RELU)
        KCU_PW_U(KILN_PW_LEAKYRELU, EW_U_LEAKYRELU)
        KCU_PW_U(KILN_PW_ELU, EW_U_ELU)
        KCU_PW_U(KILN_PW_SELU, EW_U_SELU)
        KCU_PW_U(KILN_PW_CELU, EW_U_CELU)
        KCU_PW_U(KILN_PW_SIGMOID, EW_U_SIGMOID)
        KCU_PW_U(KILN_PW_HARDSIGMOID, EW_U_HARDSIGMOID)
        KCU_PW_U(KILN_PW_HARDSWISH, EW_U_HARDSWISH)
        KCU_PW_U(KILN_PW_TANH, EW_U_TANH)
        KCU_PW_U(KILN_PW_SOFTPLUS, EW_U_SOFTPLUS)
        KCU_PW_U(KILN_PW_SOFTSIGN, EW_U_SOFTSIGN)
        KCU_PW_U(KILN_PW_MISH, EW_U_MISH)
        KCU_PW_U(KILN_PW_THRESHOLDEDRELU, EW_U_THRESHOLDEDRELU)
        KCU_PW_U(KILN_PW_SHRINK, EW_U_SHRINK)
        KCU_PW_L(KILN_PW_ISNAN, x != x ? 1.0f : 0.0f)
        KCU_PW_L(KILN_PW_ISINF, ((p0 != 0.0f && x == INFINITY) || (p1 != 0.0f && x == -INFINITY)) ? 1.0f : 0.0f)
        KCU_PW_L(KILN_PW_NOT, x == 0.0f ? 1.0f : 0.0f)
        KCU_PW_L(KILN_PW_GELU_ERF, gelu_erf(x))
        KCU_PW_L(KILN_PW_GELU_TANH, gelu_tanh(x))
        KCU_PW_L(KILN_PW_TO_BOOL, x != 0.0f ? 1.0f : 0.0f)
        KCU_PW_L(KILN_PW_ROUND_F16, __half2float(__float2half_rn(x)))
        KCU_PW_L(KILN_PW_ROUND_BF16, __bfloat162float(__float2bfloat16_rn(x)))
        KCU_PW_B(KILN_PW_ADD, x + y)
        KCU_PW_B(KILN_PW_SUB, x - y)
        KCU_PW_B(KILN_PW_MUL, x * y)
        KCU_PW_B(KILN_PW_DIV, x / y)
        KCU_PW_B(KILN_PW_POW, powf(x, y))
        KCU_PW_B(KILN_PW_MAX, (x != x || x > y) ? x : y)
        KCU_PW_B(KILN_PW_MIN, (x != x || x < y) ? x : y)
        KCU_PW_B(KILN_PW_EQ, x == y ? 1.0f : 0.0f)
        KCU_PW_B(KILN_PW_LT, x < y ? 1.0f : 0.0f)
        KCU_PW_B(KILN_PW_LE, x <= y ? 1.0f : 0.0f)
        KCU_PW_B(KILN_PW_GT, x > y ? 1.0f : 0.0f)
        KCU_PW_B(KILN_PW_GE, x >= y ? 1.0f : 0.0f)
        KCU_PW_B(KILN_PW_AND, (x != 0.0f && y != 0.0f) ? 1.0f : 0.0f)
        KCU_PW_B(KILN_PW_OR, (x != 0.0f || y != 0.0f) ? 1.0f : 0.0f)
        KCU_PW_B(KILN_PW_XOR, ((x != 0.0f) != (y != 0.0f)) ? 1.0f : 0.0f)
        KCU_PW_B(KILN_PW_PRELU, x < 0.0f ? x * y : x)
        KCU_PW_B(KILN_PW_CLIP_LO, x < y ? y : x)
        KCU_PW_B(KILN_PW_CLIP_HI, x > y ? y : x)
    case KILN_PW_WHERE:
#pragma unroll
        for (int l = 0; l < V; l++) d[l] = a[l] != 0.0f ? b[l] : c[l];
        break;
#undef KCU_PW_U
#undef KCU_PW_B
#undef KCU_PW_L
    default:
#pragma unroll
        for (int l = 0; l < V; l++) d[l] = 0.0f;
        break;
    }
    reg_set<R, V>(r, in.dst, d);
}

template <int R, int V, typename I>
__global__ void __launch_bounds__(KCU_THREADS) k_pointwise(const __grid_constant__ kcu_pw_params p) {
    const I nv = (I)(p.n / V);
    const int last = p.rank - 1;
    for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < nv; t += (I)blockDim.x * gridDim.x) {
        const I e = t * (I)V;
        I off[KILN_PW_MAX_IN];
#pragma unroll
        for (int k = 0; k < KILN_PW_MAX_IN; k++) off[k] = p.flat[k] == KCU_PW_SAME ? e : 0;
        if (!p.all_flat) {
            I rem = e;
            for (int d = last; d >= 0; d--) {
                I dim = (I)p.dims[d];
                I cd = d ? rem % dim : rem;
                rem = d ? rem / dim : 0;
#pragma unroll
                for (int k = 0; k < KILN_PW_MAX_IN; k++)
                    if (k < p.n_in && p.flat[k] == KCU_PW_GENERAL) off[k] += cd * (I)p.st[k][d];
            }
        }
        float r[R][V];
#pragma unroll
        for (int k = 0; k < KILN_PW_MAX_IN && k < R; k++)
            if (k < p.n_in)
                ldv<V>(p.in_dtype[k], p.in[k], (int64_t)off[k],
                       p.flat[k] == KCU_PW_SCALAR || (p.flat[k] == KCU_PW_GENERAL && p.st[k][last] == 0), r[k]);
        for (int i = 0; i < p.n_instr; i++) step<R, V>(p.instr[i], r);
#pragma unroll
        for (int j = 0; j < KILN_PW_MAX_OUT; j++) {
            if (j >= p.n_out) break;
            float v[V];
            reg_get<R, V>(r, p.out_reg[j], v);
            stv<V>(p.out_dtype[j], p.out[j], (int64_t)e, v);
        }
    }
}

template <int R, int V> static cudaError_t launch(const kcu_pw_params *p, cudaStream_t st) {
    int64_t threads = p->n / V;
    if (p->idx32)
        k_pointwise<R, V, uint32_t><<<grid_for(threads), KCU_THREADS, 0, st>>>(*p);
    else
        k_pointwise<R, V, int64_t><<<grid_for(threads), KCU_THREADS, 0, st>>>(*p);
    return cudaGetLastError();
}

template <int R> static cudaError_t launch_r(const kcu_pw_params *p, cudaStream_t st) {
    return p->vec == 4 ? launch<R, 4>(p, st) : launch<R, 1>(p, st);
}

} /* namespace kcu */

extern "C" cudaError_t kcu_pointwise(const kcu_pw_params *p, cudaStream_t stream) {
    using namespace kcu;
    if (p->n <= 0) return cudaSuccess;
    if (p->vec != 1 && p->vec != 4) return cudaErrorInvalidValue;
    switch (p->regs) {
    case 4: return launch_r<4>(p, stream);
    case 8: return launch_r<8>(p, stream);
    case 16: return launch_r<16>(p, stream);
    default: return cudaErrorInvalidValue;
    }
}
