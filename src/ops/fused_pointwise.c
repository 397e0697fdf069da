/* fused_pointwise.c -- kiln.Pointwise (fused_pointwise.h): validation,
 * inference and the reference kernel (the host interpreter in
 * pointwise_interp.c, which the CPU backend runs too). */
#include "ops/fused_pointwise.h"

#include "ops/pointwise_interp.h"

static bool all_zero(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i]) return false;
    return true;
}

/* Every count within its array, every dtype one the kernels take, every
 * register index below n_regs and written before it is read (registers
 * 0..n_in-1 hold the inputs), every opcode known, and the slots past the
 * counts and the operands an opcode does not read zero: the interpreters
 * index their register files with these bytes. */
static kiln_status pw_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_pw_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "n_in", at->n_in, 1, KILN_PW_MAX_IN));
    KILN_TRY(kiln__check_attr(op, node, "n_out", at->n_out, 1, KILN_PW_MAX_OUT));
    KILN_TRY(kiln__check_attr(op, node, "n_instr", at->n_instr, 1, KILN_PW_MAX_INSTR));
    KILN_TRY(kiln__check_attr(op, node, "n_regs", at->n_regs, at->n_in, KILN_PW_MAX_REGS));
    for (int k = 0; k < KILN_PW_MAX_IN; k++)
        if (k < at->n_in ? !kiln__pw_in_dtype_ok((kiln_dtype)at->in_dtype[k]) : at->in_dtype[k] != 0)
            return KILN_VALIDATE_FAIL(op, node, "input %d has dtype %d, which the program cannot read", k,
                                      at->in_dtype[k]);
    uint32_t defined = (1u << at->n_in) - 1;
    for (int i = 0; i < KILN_PW_MAX_INSTR; i++) {
        const kiln_pw_instr *in = &at->instr[i];
        if (i >= at->n_instr) {
            if (!all_zero(in, sizeof *in))
                return KILN_VALIDATE_FAIL(op, node, "instruction %d lies past the program's %d and is not zero", i,
                                          at->n_instr);
            continue;
        }
        int ar = kiln__pw_arity(in->op);
        if (!ar) return KILN_VALIDATE_FAIL(op, node, "instruction %d has unknown opcode %d", i, in->op);
        if (in->imm > ar || in->reserved[0] || in->reserved[1])
            return KILN_VALIDATE_FAIL(op, node, "instruction %d: constant slot %d is not one of its %d operands "
                                      "(or reserved bytes are set)", i, in->imm, ar);
        const uint8_t src[3] = {in->a, in->b, in->c};
        for (int s = 0; s < 3; s++) {
            bool reads = s < ar && in->imm != s + 1;
            if (!reads) {
                if (src[s])
                    return KILN_VALIDATE_FAIL(op, node, "instruction %d: operand %d is unused and must be 0", i, s);
                continue;
            }
            if (src[s] >= at->n_regs || !(defined & (1u << src[s])))
                return KILN_VALIDATE_FAIL(op, node, "instruction %d reads register %d, which is %s", i, src[s],
                                          src[s] >= at->n_regs ? "out of range" : "not written before");
        }
        if (in->dst >= at->n_regs)
            return KILN_VALIDATE_FAIL(op, node, "instruction %d writes register %d of %d", i, in->dst, at->n_regs);
        if (in->op == KILN_PW_CELU && in->p0 == 0.0f)
            return KILN_VALIDATE_FAIL(op, node, "instruction %d: Celu's alpha must not be 0", i);
        defined |= 1u << in->dst;
    }
    for (int j = 0; j < KILN_PW_MAX_OUT; j++) {
        if (j >= at->n_out) {
            if (at->out_dtype[j] || at->out_reg[j])
                return KILN_VALIDATE_FAIL(op, node, "output slot %d lies past the %d outputs and is not zero", j,
                                          at->n_out);
            continue;
        }
        if (!kiln__pw_out_dtype_ok((kiln_dtype)at->out_dtype[j]))
            return KILN_VALIDATE_FAIL(op, node, "output %d has dtype %d, which the program cannot write", j,
                                      at->out_dtype[j]);
        if (at->out_reg[j] < 0 || at->out_reg[j] >= at->n_regs || !(defined & (1u << at->out_reg[j])))
            return KILN_VALIDATE_FAIL(op, node, "output %d is register %d, which the program does not write", j,
                                      at->out_reg[j]);
    }
    return KILN_OK;
}

/* The outputs have the broadcast shape of the inputs and the program's dtypes. */
static kiln_status pw_infer(const kiln_infer_args *a) {
    const kiln_pw_attrs *at = a->attrs;
    const char *node = a->node_name ? a->node_name : "?";
    if (a->n_in != at->n_in || a->n_out != at->n_out)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (kiln.Pointwise): %d inputs and %d outputs, its program has %d "
                         "and %d", node, a->n_in, a->n_out, at->n_in, at->n_out);
    for (int k = 0; k < a->n_in; k++) {
        if (!a->in[k]) return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (kiln.Pointwise): input %d is missing", node, k);
        kiln_dtype t = a->in[k]->dtype;
        if (t != KILN_DTYPE_UNDEFINED && t != (kiln_dtype)at->in_dtype[k])
            return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (kiln.Pointwise): input %d is %s, the program reads %s",
                             node, k, kiln_dtype_name(t), kiln_dtype_name((kiln_dtype)at->in_dtype[k]));
    }
    kiln_tinfo shape;
    memset(&shape, 0, sizeof shape);
    KILN_TRY(kiln__broadcast_shapes(a->node_name, a->n_in, a->in, &shape));
    for (int j = 0; j < a->n_out; j++) {
        kiln__tinfo_copy_shape(a->out[j], &shape);
        a->out[j]->dtype = (kiln_dtype)at->out_dtype[j];
    }
    return KILN_OK;
}

const kiln_op_def kiln_op_Pointwise = {
    .name = "Pointwise", .domain = "kiln", .since = 1,
    .min_inputs = 1, .max_inputs = KILN_PW_MAX_IN, .min_outputs = 1, .max_outputs = KILN_PW_MAX_OUT,
    .flags = KILN_OP_FLAG_TYPED,
    .attr_size = sizeof(kiln_pw_attrs),
    .validate = pw_validate, .infer = pw_infer, .cpu = kiln__pw_cpu_run,
};
