/* elementwise_codes.h -- the `code` of the elementwise ops' descriptors
 * (kiln_op_def.code): which unary function, which binary row kind. The CPU
 * kernels (src/ops/elementwise*.c) and the CUDA launchers
 * (src/backends/cuda/k_elementwise.cu) both switch on them, so this header
 * is plain C that C++ reads too: no includes, no kiln types. */
#ifndef KILN_ELEMENTWISE_CODES_H
#define KILN_ELEMENTWISE_CODES_H

/* Unary ops: math and activations (EW_U_ABS .. EW_U_SHRINK), then the
 * bool-output predicates. */
enum {
    EW_U_ABS = 1, EW_U_NEG, EW_U_SQRT, EW_U_EXP, EW_U_LOG, EW_U_RECIPROCAL, EW_U_FLOOR,
    EW_U_CEIL, EW_U_ROUND, EW_U_SIGN, EW_U_SIN, EW_U_COS, EW_U_TAN, EW_U_ASIN, EW_U_ACOS,
    EW_U_ATAN, EW_U_SINH, EW_U_COSH, EW_U_ASINH, EW_U_ACOSH, EW_U_ATANH, EW_U_ERF,
    EW_U_RELU, EW_U_LEAKYRELU, EW_U_ELU, EW_U_SELU, EW_U_CELU, EW_U_SIGMOID, EW_U_HARDSIGMOID,
    EW_U_HARDSWISH, EW_U_TANH, EW_U_SOFTPLUS, EW_U_SOFTSIGN, EW_U_MISH, EW_U_THRESHOLDEDRELU,
    EW_U_SHRINK,
    /* bool-output or special */
    EW_U_ISNAN, EW_U_ISINF, EW_U_NOT,
    EW_U_COUNT
};

/* Binary row kinds (comparisons EW_B_EQ .. EW_B_GE and logic EW_B_AND ..
 * EW_B_XOR stay contiguous: kernels test ranges), then the codes of ops
 * that are not a row kind themselves. */
enum {
    EW_B_ADD, EW_B_SUB, EW_B_MUL, EW_B_DIV, EW_B_MOD, EW_B_PYMOD, EW_B_MAX, EW_B_MIN,
    EW_B_EQ, EW_B_LT, EW_B_LE, EW_B_GT, EW_B_GE, EW_B_AND, EW_B_OR, EW_B_XOR,
    EW_B_SHL, EW_B_SHR, EW_B_PRELU, EW_B_POW,
    EW_B_COUNT,
    /* op codes that are not row kinds */
    EW_B_SUM = 100, EW_B_MEAN, EW_B_WHERE
};

/* The row kind of binary op `code` given its attributes: Mod is C's fmod
 * (EW_B_MOD) only with fmod = 1, else Python's (EW_B_PYMOD); BitShift
 * shifts right with direction RIGHT. */
static inline int kiln__ew_binary_kind(int code, int fmod, int shift_right) {
    if (code == EW_B_MOD && !fmod) return EW_B_PYMOD;
    if (code == EW_B_SHL && shift_right) return EW_B_SHR;
    return code;
}

/* The row kind a variadic op (Max, Min, Sum, Mean) folds its inputs with. */
static inline int kiln__ew_variadic_kind(int code) {
    return code == EW_B_MAX ? EW_B_MAX : code == EW_B_MIN ? EW_B_MIN : EW_B_ADD;
}

#endif
