/* pointwise_codes.h -- the instruction set of kiln.Pointwise (a fused chain
 * of elementwise ops, src/ops/fused_pointwise.h): opcodes and limits. The
 * values are written into engine files (the layer's attributes): never
 * renumber one. Plain C without includes, so that the CUDA side reads it
 * too (src/backends/cuda/k_pointwise.cu).
 *
 * A program runs per output element over float32 registers: registers
 * 0 .. n_in-1 start as the inputs (converted to float32: bool is 0 or 1,
 * integers are converted like Cast), each instruction writes register
 * `dst` from registers a, b, c (as its arity says), one of which may be the
 * instruction's constant p0 instead (`imm`), and the outputs are registers
 * out_reg[j], stored in their dtypes (float16/bfloat16 rounded to nearest
 * even, bool as value != 0). Predicates and comparisons give 1 or 0. */
#ifndef KILN_POINTWISE_CODES_H
#define KILN_POINTWISE_CODES_H

#define KILN_PW_MAX_IN 8
#define KILN_PW_MAX_OUT 4
#define KILN_PW_MAX_INSTR 48
#define KILN_PW_MAX_REGS 16

enum {
    /* d = a (a is usually the constant: imm 1) */
    KILN_PW_MOV = 1,
    /* unary: as the ONNX op of the same name (parameters p0, p1) */
    KILN_PW_NEG = 2, KILN_PW_ABS = 3, KILN_PW_SQRT = 4, KILN_PW_EXP = 5, KILN_PW_LOG = 6,
    KILN_PW_RECIP = 7, KILN_PW_FLOOR = 8, KILN_PW_CEIL = 9, KILN_PW_ROUND = 10, KILN_PW_SIGN = 11,
    KILN_PW_SIN = 12, KILN_PW_COS = 13, KILN_PW_TAN = 14, KILN_PW_ASIN = 15, KILN_PW_ACOS = 16,
    KILN_PW_ATAN = 17, KILN_PW_SINH = 18, KILN_PW_COSH = 19, KILN_PW_ASINH = 20, KILN_PW_ACOSH = 21,
    KILN_PW_ATANH = 22, KILN_PW_ERF = 23, KILN_PW_RELU = 24,
    KILN_PW_LEAKYRELU = 25,  /* p0 alpha */
    KILN_PW_ELU = 26,        /* p0 alpha */
    KILN_PW_SELU = 27,       /* p0 alpha, p1 gamma */
    KILN_PW_CELU = 28,       /* p0 alpha (not 0) */
    KILN_PW_SIGMOID = 29,
    KILN_PW_HARDSIGMOID = 30, /* p0 alpha, p1 beta */
    KILN_PW_HARDSWISH = 31, KILN_PW_TANH = 32, KILN_PW_SOFTPLUS = 33, KILN_PW_SOFTSIGN = 34,
    KILN_PW_MISH = 35,
    KILN_PW_THRESHOLDEDRELU = 36, /* p0 alpha */
    KILN_PW_SHRINK = 37,          /* p0 lambd, p1 bias */
    KILN_PW_ISNAN = 38,
    KILN_PW_ISINF = 39,      /* p0 detect_positive (0/1), p1 detect_negative (0/1) */
    KILN_PW_NOT = 40,        /* a == 0 */
    KILN_PW_GELU_ERF = 41,   /* x/2 (1 + erf(x / sqrt 2)) */
    KILN_PW_GELU_TANH = 42,  /* x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    KILN_PW_TO_BOOL = 43,    /* a != 0 (Cast to bool) */
    KILN_PW_ROUND_F16 = 44,  /* a rounded to float16 (Cast to float16) */
    KILN_PW_ROUND_BF16 = 45, /* a rounded to bfloat16 */
    KILN_PW_UNARY_END,
    /* binary */
    KILN_PW_ADD = 64, KILN_PW_SUB = 65, KILN_PW_MUL = 66, KILN_PW_DIV = 67, KILN_PW_POW = 68,
    KILN_PW_MAX = 69, KILN_PW_MIN = 70, /* NaN propagates, as Max/Min */
    KILN_PW_EQ = 71, KILN_PW_LT = 72, KILN_PW_LE = 73, KILN_PW_GT = 74, KILN_PW_GE = 75,
    KILN_PW_AND = 76, KILN_PW_OR = 77, KILN_PW_XOR = 78, /* of a != 0, b != 0 */
    KILN_PW_PRELU = 79,   /* a < 0 ? a b : a */
    KILN_PW_CLIP_LO = 80, /* a < b ? b : a (Clip's min: NaN a stays) */
    KILN_PW_CLIP_HI = 81, /* a > b ? b : a */
    KILN_PW_BINARY_END,
    /* ternary */
    KILN_PW_WHERE = 96,   /* a != 0 ? b : c */
    KILN_PW_TERNARY_END
};

/* Operands an opcode reads (1, 2 or 3); 0: not an opcode. */
static inline int kiln__pw_arity(int op) {
    if (op >= KILN_PW_MOV && op < KILN_PW_UNARY_END) return 1;
    if (op >= KILN_PW_ADD && op < KILN_PW_BINARY_END) return 2;
    if (op >= KILN_PW_WHERE && op < KILN_PW_TERNARY_END) return 3;
    return 0;
}

#endif
