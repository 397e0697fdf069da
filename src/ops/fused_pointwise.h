/* fused_pointwise.h -- kiln.Pointwise: a chain (or any connected group) of
 * elementwise ops run as one layer, made by the pointwise-fusion pass
 * (src/passes/fuse_pointwise.c) from what the other fusions left.
 *
 * Inputs: n_in tensors, each numpy-broadcast to the output shape (the
 * broadcast of all inputs); their dtypes are in_dtype[] (float32,
 * float16, bfloat16, bool, int32, int64). Outputs: n_out tensors of that
 * shape, of dtypes out_dtype[] (float32, float16, bfloat16, bool). The
 * computation is the program of instr[] over float32 registers
 * (src/ops/pointwise_codes.h); validate checks every index in it, so a
 * damaged engine cannot make a kernel read outside its registers. */
#ifndef KILN_FUSED_POINTWISE_H
#define KILN_FUSED_POINTWISE_H

#include "ops/op.h"
#include "ops/pointwise_codes.h"

typedef struct kiln_pw_instr {
    uint8_t op;       /* KILN_PW_* */
    uint8_t dst;      /* register written */
    uint8_t a, b, c;  /* registers read, as the arity says */
    uint8_t imm;      /* 0, or 1..arity: that operand is p0 instead of a register */
    uint8_t reserved[2];
    float p0, p1;     /* the constant, or the op's parameters */
} kiln_pw_instr;
KILN_ATTRS_SIZE(kiln_pw_instr, 16); KILN_ATTRS_AT(kiln_pw_instr, op, 0); KILN_ATTRS_AT(kiln_pw_instr, dst, 1);
KILN_ATTRS_AT(kiln_pw_instr, a, 2); KILN_ATTRS_AT(kiln_pw_instr, b, 3); KILN_ATTRS_AT(kiln_pw_instr, c, 4);
KILN_ATTRS_AT(kiln_pw_instr, imm, 5); KILN_ATTRS_AT(kiln_pw_instr, reserved, 6); KILN_ATTRS_AT(kiln_pw_instr, p0, 8);
KILN_ATTRS_AT(kiln_pw_instr, p1, 12);

typedef struct kiln_pw_attrs {
    int32_t n_in, n_out, n_instr, n_regs;
    int32_t in_dtype[KILN_PW_MAX_IN];   /* kiln_dtype of each input */
    int32_t out_dtype[KILN_PW_MAX_OUT]; /* kiln_dtype of each output */
    int32_t out_reg[KILN_PW_MAX_OUT];   /* the register each output is stored from */
    kiln_pw_instr instr[KILN_PW_MAX_INSTR];
} kiln_pw_attrs;
KILN_ATTRS_SIZE(kiln_pw_attrs, 848); KILN_ATTRS_AT(kiln_pw_attrs, n_in, 0); KILN_ATTRS_AT(kiln_pw_attrs, n_out, 4);
KILN_ATTRS_AT(kiln_pw_attrs, n_instr, 8); KILN_ATTRS_AT(kiln_pw_attrs, n_regs, 12);
KILN_ATTRS_AT(kiln_pw_attrs, in_dtype, 16); KILN_ATTRS_AT(kiln_pw_attrs, out_dtype, 48);
KILN_ATTRS_AT(kiln_pw_attrs, out_reg, 64); KILN_ATTRS_AT(kiln_pw_attrs, instr, 80);

/* Whether t may be a kiln.Pointwise input / output dtype. */
KILN_PRIVATE bool kiln__pw_in_dtype_ok(kiln_dtype t);
KILN_PRIVATE bool kiln__pw_out_dtype_ok(kiln_dtype t);

/* The kernels' view of a node's tensors (a->n_in inputs broadcast to
 * a->out[0]'s shape): the output's dims with size-1 dims dropped and
 * neighbours contiguous for every input merged (dims[0..R), R >= 1
 * returned; one element: R = 1, dims[0] = 1), and each input's element
 * strides over them (0 where broadcast). */
KILN_PRIVATE int kiln__pw_geometry(const kiln_kernel_args *a, int64_t *dims, int64_t (*st)[KILN_MAX_RANK]);

#endif
