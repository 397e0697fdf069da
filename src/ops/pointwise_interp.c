/* pointwise_interp.c -- kiln.Pointwise on the host (pointwise_interp.h): the
 * op's reference kernel, which the CPU backend runs as its kernel.
 *
 * The output is walked in blocks of up to PW_BLOCK elements along its
 * innermost (merged) dim; each input's block is converted to float32 into
 * its register, and every instruction is one loop over the block (the
 * unary ops and the arithmetic rows are the elementwise ops' own float32
 * kernels, so a fused float32 chain gives the unfused results bit for bit).
 * Blocks of the output are split across the pool. */
#include "ops/pointwise_interp.h"

#include "backends/cpu/kernels/fused_transformer_math.h"
#include "ops/elementwise_impl.h"

#include <math.h>

EW_VECTORIZE_FLOAT_SELECTS

#define PW_BLOCK 1024

typedef struct pw_geom {
    const kiln_pw_attrs *at;
    int rank; /* merged, >= 1 */
    int64_t dims[KILN_MAX_RANK];
    int64_t st[KILN_PW_MAX_IN][KILN_MAX_RANK];
    const void *in[KILN_PW_MAX_IN];
    void *out[KILN_PW_MAX_OUT];
} pw_geom;

/* the elementwise ops' code of a unary opcode that has one (0: none) */
static int pw_unary_code(int op) {
    static const unsigned char codes[KILN_PW_UNARY_END] = {
        [KILN_PW_NEG] = EW_U_NEG, [KILN_PW_ABS] = EW_U_ABS, [KILN_PW_SQRT] = EW_U_SQRT,
        [KILN_PW_EXP] = EW_U_EXP, [KILN_PW_LOG] = EW_U_LOG, [KILN_PW_RECIP] = EW_U_RECIPROCAL,
        [KILN_PW_FLOOR] = EW_U_FLOOR, [KILN_PW_CEIL] = EW_U_CEIL, [KILN_PW_ROUND] = EW_U_ROUND,
        [KILN_PW_SIGN] = EW_U_SIGN, [KILN_PW_SIN] = EW_U_SIN, [KILN_PW_COS] = EW_U_COS,
        [KILN_PW_TAN] = EW_U_TAN, [KILN_PW_ASIN] = EW_U_ASIN, [KILN_PW_ACOS] = EW_U_ACOS,
        [KILN_PW_ATAN] = EW_U_ATAN, [KILN_PW_SINH] = EW_U_SINH, [KILN_PW_COSH] = EW_U_COSH,
        [KILN_PW_ASINH] = EW_U_ASINH, [KILN_PW_ACOSH] = EW_U_ACOSH, [KILN_PW_ATANH] = EW_U_ATANH,
        [KILN_PW_ERF] = EW_U_ERF, [KILN_PW_RELU] = EW_U_RELU, [KILN_PW_LEAKYRELU] = EW_U_LEAKYRELU,
        [KILN_PW_ELU] = EW_U_ELU, [KILN_PW_SELU] = EW_U_SELU, [KILN_PW_CELU] = EW_U_CELU,
        [KILN_PW_SIGMOID] = EW_U_SIGMOID, [KILN_PW_HARDSIGMOID] = EW_U_HARDSIGMOID,
        [KILN_PW_HARDSWISH] = EW_U_HARDSWISH, [KILN_PW_TANH] = EW_U_TANH,
        [KILN_PW_SOFTPLUS] = EW_U_SOFTPLUS, [KILN_PW_SOFTSIGN] = EW_U_SOFTSIGN,
        [KILN_PW_MISH] = EW_U_MISH, [KILN_PW_THRESHOLDEDRELU] = EW_U_THRESHOLDEDRELU,
        [KILN_PW_SHRINK] = EW_U_SHRINK,
    };
    return op > 0 && op < KILN_PW_UNARY_END ? codes[op] : 0;
}

/* the binary row kind of an arithmetic opcode (-1: none) */
static int pw_binary_kind(int op) {
    switch (op) {
    case KILN_PW_ADD: return EW_B_ADD;
    case KILN_PW_SUB: return EW_B_SUB;
    case KILN_PW_MUL: return EW_B_MUL;
    case KILN_PW_DIV: return EW_B_DIV;
    case KILN_PW_POW: return EW_B_POW;
    case KILN_PW_MAX: return EW_B_MAX;
    case KILN_PW_MIN: return EW_B_MIN;
    case KILN_PW_PRELU: return EW_B_PRELU;
    default: return -1;
    }
}

static void pw_load(kiln_dtype t, const void *base, int64_t off, int64_t s, float *r, int64_t n) {
    switch (t) {
    case KILN_DTYPE_FLOAT32: {
        const float *x = (const float *)base + off;
        if (s == 1) memcpy(r, x, sizeof(float) * (size_t)n);
        else
            for (int64_t i = 0; i < n; i++) r[i] = x[i * s];
        return;
    }
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: {
        const uint16_t *x = (const uint16_t *)base + off;
        for (int64_t i = 0; i < n; i++) r[i] = ew_half_load(t, x[i * s]);
        return;
    }
    case KILN_DTYPE_BOOL: {
        const uint8_t *x = (const uint8_t *)base + off;
        for (int64_t i = 0; i < n; i++) r[i] = x[i * s] ? 1.0f : 0.0f;
        return;
    }
    case KILN_DTYPE_INT32: {
        const int32_t *x = (const int32_t *)base + off;
        for (int64_t i = 0; i < n; i++) r[i] = (float)x[i * s];
        return;
    }
    case KILN_DTYPE_INT64: {
        const int64_t *x = (const int64_t *)base + off;
        for (int64_t i = 0; i < n; i++) r[i] = (float)x[i * s];
        return;
    }
    default: return; /* refused before */
    }
}

static void pw_store(kiln_dtype t, void *base, int64_t off, const float *r, int64_t n) {
    switch (t) {
    case KILN_DTYPE_FLOAT32: memcpy((float *)base + off, r, sizeof(float) * (size_t)n); return;
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: {
        uint16_t *y = (uint16_t *)base + off;
        for (int64_t i = 0; i < n; i++) y[i] = ew_half_store(t, r[i]);
        return;
    }
    case KILN_DTYPE_BOOL: {
        uint8_t *y = (uint8_t *)base + off;
        for (int64_t i = 0; i < n; i++) y[i] = r[i] != 0.0f;
        return;
    }
    default: return;
    }
}

/* d[i] = EXPR(x = A[i], y = B[i]) with either operand possibly the
 * constant (stride 0): loops the compiler vectorizes */
#define PW_LOOP1(EXPR, XA, YB)                              \
    for (int64_t i = 0; i < n; i++) {                       \
        const float x = (XA), y = (YB);                     \
        (void)y;                                            \
        d[i] = (EXPR);                                      \
    }
#define PW_LOOP(EXPR)                                       \
    if (sa && sb) {                                         \
        PW_LOOP1(EXPR, A[i], B[i])                          \
    } else if (sa) {                                        \
        PW_LOOP1(EXPR, A[i], B[0])                          \
    } else {                                                \
        PW_LOOP1(EXPR, A[0], B[i])                          \
    }                                                       \
    break

/* One instruction over n elements of the registers r. */
static void pw_exec(const kiln_pw_instr *in, float (*r)[PW_BLOCK], int64_t n) {
    const float imm = in->p0;
    const float *A = in->imm == 1 ? &imm : r[in->a];
    const float *B = in->imm == 2 ? &imm : r[in->b];
    const int64_t sa = in->imm == 1 ? 0 : 1, sb = in->imm == 2 ? 0 : 1;
    float *d = r[in->dst];
    int code = pw_unary_code(in->op);
    if (code) {
        kiln_ew_act_attrs at = {in->p0, in->p1, in->p1};
        if (in->imm == 1) {
            for (int64_t i = 0; i < n; i++) d[i] = imm;
            A = d;
        }
        kiln__ew_unary_f32(code, &at, A, d, n);
        return;
    }
    int kind = pw_binary_kind(in->op);
    if (kind >= 0) {
        if (in->op == KILN_PW_MUL && !in->imm && in->a == in->b) { /* x * x: Pow(x, 2) */
            for (int64_t i = 0; i < n; i++) d[i] = A[i] * A[i];
            return;
        }
        char *p[3] = {(char *)d, (char *)(uintptr_t)A, (char *)(uintptr_t)B};
        const int64_t s[3] = {1, sa, sb};
        kiln__ew_binary_row_f32(kind)(NULL, p, s, n);
        return;
    }
    switch (in->op) {
    case KILN_PW_MOV: PW_LOOP(x);
    case KILN_PW_ISNAN: PW_LOOP(x != x ? 1.0f : 0.0f);
    case KILN_PW_ISINF:
        PW_LOOP(((in->p0 != 0.0f && x == INFINITY) || (in->p1 != 0.0f && x == -INFINITY)) ? 1.0f : 0.0f);
    case KILN_PW_NOT: PW_LOOP(x == 0.0f ? 1.0f : 0.0f);
    case KILN_PW_TO_BOOL: PW_LOOP(x != 0.0f ? 1.0f : 0.0f);
    case KILN_PW_ROUND_F16: PW_LOOP(kiln__f16_to_f32(kiln__f32_to_f16(x)));
    case KILN_PW_ROUND_BF16: PW_LOOP(kiln__bf16_to_f32(kiln__f32_to_bf16(x)));
    case KILN_PW_GELU_ERF:
    case KILN_PW_GELU_TANH:
        for (int64_t i = 0; i < n; i++) d[i] = A[i * sa];
        kiln__gelu_f32(d, n, in->op == KILN_PW_GELU_TANH);
        return;
    case KILN_PW_EQ: PW_LOOP(x == y ? 1.0f : 0.0f);
    case KILN_PW_LT: PW_LOOP(x < y ? 1.0f : 0.0f);
    case KILN_PW_LE: PW_LOOP(x <= y ? 1.0f : 0.0f);
    case KILN_PW_GT: PW_LOOP(x > y ? 1.0f : 0.0f);
    case KILN_PW_GE: PW_LOOP(x >= y ? 1.0f : 0.0f);
    case KILN_PW_AND: PW_LOOP((x != 0.0f && y != 0.0f) ? 1.0f : 0.0f);
    case KILN_PW_OR: PW_LOOP((x != 0.0f || y != 0.0f) ? 1.0f : 0.0f);
    case KILN_PW_XOR: PW_LOOP(((x != 0.0f) != (y != 0.0f)) ? 1.0f : 0.0f);
    case KILN_PW_CLIP_LO: PW_LOOP(x < y ? y : x);
    case KILN_PW_CLIP_HI: PW_LOOP(x > y ? y : x);
    case KILN_PW_WHERE: {
        const float *C = in->imm == 3 ? &imm : r[in->c];
        const int64_t sc = in->imm == 3 ? 0 : 1;
        if (sa && sb && sc) {
            for (int64_t i = 0; i < n; i++) d[i] = A[i] != 0.0f ? B[i] : C[i];
        } else {
            for (int64_t i = 0; i < n; i++) d[i] = A[i * sa] != 0.0f ? B[i * sb] : C[i * sc];
        }
        return;
    }
    default: return; /* validate refuses other opcodes */
    }
}

/* Output elements [b, e): blocks along the innermost dim. */
static void pw_range(void *ctx, int64_t b, int64_t e) {
    const pw_geom *g = ctx;
    const kiln_pw_attrs *at = g->at;
    const int R = g->rank;
    const int64_t L = g->dims[R - 1];
    float r[KILN_PW_MAX_REGS][PW_BLOCK];
    int64_t c[KILN_MAX_RANK] = {0}, off[KILN_PW_MAX_IN] = {0};
    int64_t row = b / L, col = b % L;
    for (int d = R - 2; d >= 0; d--) {
        c[d] = row % g->dims[d];
        row /= g->dims[d];
        for (int k = 0; k < at->n_in; k++) off[k] += c[d] * g->st[k][d];
    }
    while (b < e) {
        int64_t n = L - col;
        if (n > e - b) n = e - b;
        if (n > PW_BLOCK) n = PW_BLOCK;
        for (int k = 0; k < at->n_in; k++)
            pw_load((kiln_dtype)at->in_dtype[k], g->in[k], off[k] + col * g->st[k][R - 1], g->st[k][R - 1], r[k], n);
        for (int i = 0; i < at->n_instr; i++) pw_exec(&at->instr[i], r, n);
        for (int j = 0; j < at->n_out; j++) pw_store((kiln_dtype)at->out_dtype[j], g->out[j], b, r[at->out_reg[j]], n);
        b += n;
        col += n;
        if (col < L) continue;
        col = 0;
        for (int d = R - 2; d >= 0; d--) { /* next row: carry through the outer dims */
            for (int k = 0; k < at->n_in; k++) off[k] += g->st[k][d];
            if (++c[d] < g->dims[d]) break;
            for (int k = 0; k < at->n_in; k++) off[k] -= c[d] * g->st[k][d];
            c[d] = 0;
        }
    }
}

kiln_status kiln__pw_cpu_run(const kiln_kernel_args *a) {
    const kiln_pw_attrs *at = a->attrs;
    const kiln_tensor *o = a->out[0];
    if (a->n_in != at->n_in || a->n_out != at->n_out)
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (kiln.Pointwise): %d inputs and %d outputs, its program "
                         "has %d and %d", a->node_name ? a->node_name : "?", a->n_in, a->n_out, at->n_in, at->n_out);
    for (int k = 0; k < at->n_in; k++)
        if (!a->in[k] || a->in[k]->dtype != (kiln_dtype)at->in_dtype[k])
            return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (kiln.Pointwise): input %d is not of the "
                             "program's type %s", a->node_name ? a->node_name : "?", k,
                             kiln_dtype_name((kiln_dtype)at->in_dtype[k]));
    int64_t total = kiln__tensor_numel(o);
    if (total <= 0) return KILN_OK;
    pw_geom g = {.at = at};
    for (int k = 0; k < at->n_in; k++) g.in[k] = a->in[k]->data;
    for (int j = 0; j < at->n_out; j++) g.out[j] = a->out[j]->data;
    g.rank = kiln__pw_geometry(a, g.dims, g.st);
    kiln__parallel_for(a->pool, total, 4096, pw_range, &g);
    return KILN_OK;
}
