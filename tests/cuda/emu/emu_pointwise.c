/* emu_pointwise.c -- host emulation of kcu_pointwise (k_pointwise.cu) for
 * tests/cuda/emu/run.sh: checks the parameters the host side builds
 * (register-file size, the program, the 4-a-thread conditions: inner size,
 * strides, alignment) the way the kernel relies on them, gathers each
 * input at the offsets the kernel computes (flat kinds, merged dims and
 * strides), and runs the program with the CPU interpreter. */
#include "ops/pointwise_interp.h"
#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/k_pointwise.h"

#include <limits.h>
#include <stdlib.h>

static size_t es_of(int dt) { return kiln_dtype_size((kiln_dtype)dt); }

cudaError_t kcu_pointwise(const kcu_pw_params *p, cudaStream_t s) {
    (void)s;
    if (p->n <= 0) return cudaSuccess;
    if ((p->vec != 1 && p->vec != 4) || (p->regs != 4 && p->regs != 8 && p->regs != 16) || p->rank < 1 ||
        p->rank > KILN_MAX_RANK || (p->idx32 && p->n > INT32_MAX))
        return cudaErrorInvalidValue;
    kiln_pw_attrs at;
    memset(&at, 0, sizeof at);
    at.n_in = p->n_in, at.n_out = p->n_out, at.n_instr = p->n_instr, at.n_regs = p->regs;
    for (int k = 0; k < p->n_in; k++) at.in_dtype[k] = p->in_dtype[k];
    for (int j = 0; j < p->n_out; j++) at.out_dtype[j] = p->out_dtype[j], at.out_reg[j] = p->out_reg[j];
    memcpy(at.instr, p->instr, sizeof at.instr);
    const kiln_op_def *op = kiln__op_by_id(KILN_OP_Pointwise);
    if (op->validate(op, &at, "emu") != KILN_OK) return cudaErrorInvalidValue;
    int64_t numel = 1;
    for (int d = 0; d < p->rank; d++) numel *= p->dims[d];
    if (numel != p->n) return cudaErrorInvalidValue;
    const int last = p->rank - 1;
    bool all_flat = true;
    for (int k = 0; k < p->n_in; k++) {
        all_flat = all_flat && p->flat[k] != KCU_PW_GENERAL;
        if (p->vec != 4) continue;
        size_t al = 4 * es_of(p->in_dtype[k]);
        bool contig = p->flat[k] == KCU_PW_SAME || (p->flat[k] == KCU_PW_GENERAL && p->st[k][last] == 1);
        if (p->flat[k] == KCU_PW_GENERAL && p->st[k][last] != 0 && p->st[k][last] != 1) return cudaErrorInvalidValue;
        if (p->flat[k] == KCU_PW_GENERAL && p->st[k][last] == 1)
            for (int d = 0; d < last; d++)
                if (p->st[k][d] % 4) return cudaErrorMisalignedAddress;
        if (contig && (uintptr_t)p->in[k] % al) return cudaErrorMisalignedAddress;
    }
    if (all_flat != (p->all_flat != 0)) return cudaErrorInvalidValue;
    if (p->vec == 4) {
        if (p->dims[last] % 4) return cudaErrorInvalidValue;
        for (int j = 0; j < p->n_out; j++)
            if ((uintptr_t)p->out[j] % (4 * es_of(p->out_dtype[j]))) return cudaErrorMisalignedAddress;
    }
    /* each input gathered into a dense [n] tensor at the kernel's offsets */
    kiln_tensor tin[KILN_PW_MAX_IN], tout[KILN_PW_MAX_OUT];
    const kiln_tensor *ins[KILN_PW_MAX_IN];
    kiln_tensor *outs[KILN_PW_MAX_OUT];
    cudaError_t rc = cudaSuccess;
    for (int k = 0; k < p->n_in; k++) {
        size_t es = es_of(p->in_dtype[k]);
        char *buf = malloc((size_t)p->n * es);
        for (int64_t e = 0; e < p->n; e++) {
            int64_t off = p->flat[k] == KCU_PW_SAME ? e : 0;
            if (p->flat[k] == KCU_PW_GENERAL) {
                int64_t rem = e;
                for (int d = last; d >= 0; d--) {
                    int64_t c = d ? rem % p->dims[d] : rem;
                    rem = d ? rem / p->dims[d] : 0;
                    off += c * p->st[k][d];
                }
            }
            memcpy(buf + (size_t)e * es, (const char *)p->in[k] + (size_t)off * es, es);
        }
        tin[k] = (kiln_tensor){(kiln_dtype)p->in_dtype[k], 1, {p->n}, buf};
        ins[k] = &tin[k];
    }
    for (int j = 0; j < p->n_out; j++) {
        tout[j] = (kiln_tensor){(kiln_dtype)p->out_dtype[j], 1, {p->n}, p->out[j]};
        outs[j] = &tout[j];
    }
    kiln_kernel_args a = {.op = op, .attrs = &at, .node_name = "emu", .n_in = p->n_in, .n_out = p->n_out,
                          .in = ins, .out = outs};
    if (kiln__pw_cpu_run(&a) != KILN_OK) rc = cudaErrorInvalidValue;
    for (int k = 0; k < p->n_in; k++) free(tin[k].data);
    return rc;
}
