/* elementwise_impl.h -- private to the elementwise op family
 * (src/ops/elementwise*.c): attribute structs, the broadcast loop driver,
 * dtype classes and small helpers shared by the unary, binary and cast
 * files. Not used outside the family. */
#ifndef KILN_ELEMENTWISE_IMPL_H
#define KILN_ELEMENTWISE_IMPL_H

#include "ops/elementwise_codes.h"
#include "ops/op.h"

/* Floating-point compares and arithmetic under `?:` only vectorize when the
 * compiler may assume they do not trap. kiln never enables FP traps, so the
 * family's kernel files say so (GCC; other compilers ignore it). */
#if defined(__GNUC__) && !defined(__clang__)
#define EW_VECTORIZE_FLOAT_SELECTS _Pragma("GCC optimize(\"no-trapping-math\")")
#else
#define EW_VECTORIZE_FLOAT_SELECTS
#endif

/* ---- attributes (POD, written verbatim into engine files) ---------------- */

/* Activations with float parameters: LeakyRelu(alpha), Elu(alpha),
 * Selu(alpha, gamma), Celu(alpha), HardSigmoid(alpha, beta),
 * ThresholdedRelu(alpha), Shrink(alpha = lambd, beta = bias). */
typedef struct kiln_ew_act_attrs {
    float alpha, beta, gamma;
} kiln_ew_act_attrs;
KILN_ATTRS_SIZE(kiln_ew_act_attrs, 12); KILN_ATTRS_AT(kiln_ew_act_attrs, alpha, 0);
KILN_ATTRS_AT(kiln_ew_act_attrs, beta, 4); KILN_ATTRS_AT(kiln_ew_act_attrs, gamma, 8);

typedef struct kiln_ew_isinf_attrs {
    int32_t detect_positive, detect_negative;
} kiln_ew_isinf_attrs;
KILN_ATTRS_SIZE(kiln_ew_isinf_attrs, 8); KILN_ATTRS_AT(kiln_ew_isinf_attrs, detect_positive, 0);
KILN_ATTRS_AT(kiln_ew_isinf_attrs, detect_negative, 4);

typedef struct kiln_ew_cast_attrs {
    int32_t to; /* kiln_dtype */
} kiln_ew_cast_attrs;
KILN_ATTRS_SIZE(kiln_ew_cast_attrs, 4); KILN_ATTRS_AT(kiln_ew_cast_attrs, to, 0);

/* Binary and variadic ops. legacy_bcast == EW_LEGACY_AXIS: opset < 7
 * broadcasting of input 1 aligned to input 0 at `legacy_axis` (normalized at
 * infer time); EW_LEGACY_PRELU: PRelu-6's per-channel slope. */
enum { EW_LEGACY_NONE = 0, EW_LEGACY_AXIS = 1, EW_LEGACY_PRELU = 2 };
typedef struct kiln_ew_bin_attrs {
    int32_t legacy_bcast;
    int32_t legacy_axis;
    int32_t fmod;        /* Mod */
    int32_t shift_right; /* BitShift: 0 LEFT, 1 RIGHT */
} kiln_ew_bin_attrs;
KILN_ATTRS_SIZE(kiln_ew_bin_attrs, 16); KILN_ATTRS_AT(kiln_ew_bin_attrs, legacy_bcast, 0);
KILN_ATTRS_AT(kiln_ew_bin_attrs, legacy_axis, 4); KILN_ATTRS_AT(kiln_ew_bin_attrs, fmod, 8);
KILN_ATTRS_AT(kiln_ew_bin_attrs, shift_right, 12);

/* ---- dtype classes -------------------------------------------------------- */

#define EW_BIT(t) (1u << (unsigned)(t))
#define EW_FLOATS                                                               \
    (EW_BIT(KILN_DTYPE_FLOAT32) | EW_BIT(KILN_DTYPE_FLOAT64) | EW_BIT(KILN_DTYPE_FLOAT16) | \
     EW_BIT(KILN_DTYPE_BFLOAT16))
#define EW_SINTS                                                                \
    (EW_BIT(KILN_DTYPE_INT8) | EW_BIT(KILN_DTYPE_INT16) | EW_BIT(KILN_DTYPE_INT32) | \
     EW_BIT(KILN_DTYPE_INT64))
#define EW_UINTS                                                                \
    (EW_BIT(KILN_DTYPE_UINT8) | EW_BIT(KILN_DTYPE_UINT16) | EW_BIT(KILN_DTYPE_UINT32) | \
     EW_BIT(KILN_DTYPE_UINT64))
#define EW_BOOL EW_BIT(KILN_DTYPE_BOOL)
#define EW_NUMERIC (EW_FLOATS | EW_SINTS | EW_UINTS)
#define EW_ALL (EW_NUMERIC | EW_BOOL)

static inline bool ew_dtype_in(kiln_dtype t, uint32_t mask) {
    return (unsigned)t < 32 && (mask & EW_BIT(t)) != 0;
}
static inline bool ew_is_half(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16;
}
static inline float ew_half_load(kiln_dtype t, uint16_t h) {
    return t == KILN_DTYPE_FLOAT16 ? kiln__f16_to_f32(h) : kiln__bf16_to_f32(h);
}
static inline uint16_t ew_half_store(kiln_dtype t, float f) {
    return t == KILN_DTYPE_FLOAT16 ? kiln__f32_to_f16(f) : kiln__f32_to_bf16(f);
}

/* The "native" C element types, in table order: every dtype except the
 * 16-bit floats (which go through float32) and string. -1 if not native. */
enum {
    EW_T_F32, EW_T_F64, EW_T_I8, EW_T_I16, EW_T_I32, EW_T_I64,
    EW_T_U8, EW_T_U16, EW_T_U32, EW_T_U64, EW_T_BOOL, EW_T_COUNT
};
KILN_PRIVATE int kiln__ew_native_index(kiln_dtype t);

/* X-macros over the native types:
 *   X(table index, suffix, C type, kind, wide unsigned type, kiln dtype)
 * kind: F float, S signed int, U unsigned int, B bool. */
#define EW_FOR_FLOAT(X)                                                          \
    X(EW_T_F32, f32, float, F, uint32_t, KILN_DTYPE_FLOAT32)                     \
    X(EW_T_F64, f64, double, F, uint64_t, KILN_DTYPE_FLOAT64)
#define EW_FOR_SINT(X)                                                           \
    X(EW_T_I8, i8, int8_t, S, uint32_t, KILN_DTYPE_INT8)                         \
    X(EW_T_I16, i16, int16_t, S, uint32_t, KILN_DTYPE_INT16)                     \
    X(EW_T_I32, i32, int32_t, S, uint32_t, KILN_DTYPE_INT32)                     \
    X(EW_T_I64, i64, int64_t, S, uint64_t, KILN_DTYPE_INT64)
#define EW_FOR_UINT(X)                                                           \
    X(EW_T_U8, u8, uint8_t, U, uint32_t, KILN_DTYPE_UINT8)                       \
    X(EW_T_U16, u16, uint16_t, U, uint32_t, KILN_DTYPE_UINT16)                   \
    X(EW_T_U32, u32, uint32_t, U, uint32_t, KILN_DTYPE_UINT32)                   \
    X(EW_T_U64, u64, uint64_t, U, uint64_t, KILN_DTYPE_UINT64)
#define EW_FOR_BOOLT(X) X(EW_T_BOOL, b, uint8_t, B, uint32_t, KILN_DTYPE_BOOL)
#define EW_FOR_INT(X) EW_FOR_SINT(X) EW_FOR_UINT(X)
#define EW_FOR_NUM(X) EW_FOR_FLOAT(X) EW_FOR_INT(X)
#define EW_FOR_ALL(X) EW_FOR_NUM(X) EW_FOR_BOOLT(X)

/* float -> integer conversions defined for every input (NaN and out of
 * range give the "integer indefinite" value x86 produces). */
static inline int64_t ew_f2i64(double v) {
    return (v >= -9223372036854775808.0 && v < 9223372036854775808.0) ? (int64_t)v : INT64_MIN;
}
static inline uint64_t ew_f2u64(double v) {
    if (v >= 0.0 && v < 18446744073709551616.0) return (uint64_t)v;
    return (uint64_t)ew_f2i64(v);
}

/* ---- the broadcast loop driver ------------------------------------------
 * Operand 0 is the output (dense, row-major); operands 1..n are inputs
 * broadcast to the output shape. The driver drops size-1 dims, merges dims
 * that are contiguous for every operand, and calls `fn` once per row of the
 * innermost merged dim, with element strides s[k] (0 for a broadcast input,
 * 1 for a contiguous one; s[0] is always 1). Large outputs are split across
 * the pool. */
#define EW_MAX_OPERANDS 4
typedef void (*ew_row_fn)(const void *ctx, char *const *p, const int64_t *s, int64_t n);

typedef struct ew_loop {
    int nops, rank;
    int64_t dims[KILN_MAX_RANK];
    int64_t st[EW_MAX_OPERANDS][KILN_MAX_RANK];
    size_t es[EW_MAX_OPERANDS];
    char *base[EW_MAX_OPERANDS];
    int64_t total;
    ew_row_fn fn;
    const void *ctx;
} ew_loop;

/* in[i] may have rank < out rank (numpy alignment). Input shapes must be
 * broadcast-compatible with out (checked by infer). */
KILN_PRIVATE void kiln__ew_loop_init(ew_loop *L, const kiln_tensor *out, int nin,
                                     const kiln_tensor *const *in, ew_row_fn fn, const void *ctx);
KILN_PRIVATE void kiln__ew_loop_run(ew_loop *L, kiln_pool *pool);

/* Elements per parallel chunk for cheap elementwise work. */
#define EW_GRAIN 32768
/* Runs fn(ctx, 0, n) inline when small, else on the pool. */
KILN_PRIVATE void kiln__ew_parallel(kiln_pool *pool, int64_t n, int64_t grain, kiln_range_fn fn,
                                    void *ctx);

/* Row wrapper for float16/bfloat16 operands: converts rows to float32 in
 * blocks, runs the float32 row function, converts float outputs back.
 * Output dtypes other than f16/bf16 (bool, float32) are written directly. */
typedef struct ew_half_ctx {
    ew_row_fn f32fn;
    const void *f32ctx;
    int nops;
    kiln_dtype dt[EW_MAX_OPERANDS];
} ew_half_ctx;
KILN_PRIVATE void kiln__ew_half_row(const void *ctx, char *const *p, const int64_t *s, int64_t n);

/* ---- infer helpers -------------------------------------------------------- */

/* Fails with KILN_ERR_UNSUPPORTED when dtype `t` (of input `idx`) is not in
 * `mask`. UNDEFINED dtypes (not yet known) pass. */
KILN_PRIVATE kiln_status kiln__ew_check_dtype(const kiln_infer_args *a, int idx, kiln_dtype t,
                                              uint32_t mask);
KILN_PRIVATE kiln_status kiln__ew_kernel_dtype_fail(const kiln_kernel_args *a, kiln_dtype t);

/* Applies opset < 7 legacy broadcasting (input 1 aligned at an axis of
 * input 0, or PRelu-6's per-channel slope) to a copy of input 1's shape
 * (rank1/dims1, updated in place). Leaves it unchanged when the attributes
 * ask for numpy broadcasting or a rank is unknown; fails when the axis does
 * not fit. */
KILN_PRIVATE kiln_status kiln__ew_legacy_shape(const char *node, const kiln_ew_bin_attrs *at,
                                               int rank0, int *rank1, int64_t *dims1);
/* Reads the opset < 7 `broadcast`/`axis` attributes into `at`. */
KILN_PRIVATE kiln_status kiln__ew_import_legacy_bcast(kiln_import_ctx *ic, kiln_ew_bin_attrs *at);

#endif
