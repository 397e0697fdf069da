/* k_pointwise.h -- the launcher of kiln.Pointwise's CUDA kernel
 * (k_pointwise.cu; host side in cuda_ops_pw.c). Plain C (C11 and C++17
 * both compile it), like cuda_kernels.h. */
#ifndef KILN_K_POINTWISE_H
#define KILN_K_POINTWISE_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kiln.h"
#include "ops/pointwise_codes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One instruction: the bytes of kiln_pw_instr (src/ops/fused_pointwise.h). */
typedef struct kcu_pw_instr {
    uint8_t op, dst, a, b, c, imm, reserved[2];
    float p0, p1;
} kcu_pw_instr;

/* Input k is read at element offset sum_d coord[d] * st[k][d], coord being
 * the output coordinate in the merged shape dims[0..rank) (dims[rank-1]
 * innermost); flat[k] KCU_PW_SAME: offset = output index, KCU_PW_SCALAR:
 * offset 0 (no coordinates needed when every input is flat). vec (1 or
 * 4): elements per thread; 4 only when dims[rank-1] % 4 == 0, every
 * input's innermost stride is 0 or 1 and its other strides multiples of
 * 4, and every pointer is aligned to 4 elements. regs: the register file
 * the kernel is compiled for (4, 8 or 16, >= the program's n_regs). The
 * program was validated (kiln.Pointwise's validate): every index in it is
 * in range. */
enum { KCU_PW_GENERAL = 0, KCU_PW_SAME = 1, KCU_PW_SCALAR = 2 };
typedef struct kcu_pw_params {
    int n_in, n_out, n_instr, rank;
    int vec, regs, idx32, all_flat;
    int in_dtype[KILN_PW_MAX_IN];
    int flat[KILN_PW_MAX_IN];
    int out_dtype[KILN_PW_MAX_OUT];
    int out_reg[KILN_PW_MAX_OUT];
    int64_t n;
    int64_t dims[KILN_MAX_RANK];
    int64_t st[KILN_PW_MAX_IN][KILN_MAX_RANK];
    const void *in[KILN_PW_MAX_IN];
    void *out[KILN_PW_MAX_OUT];
    kcu_pw_instr instr[KILN_PW_MAX_INSTR];
} kcu_pw_params;

/* Runs the program over p->n output elements (nothing when 0). */
cudaError_t kcu_pointwise(const kcu_pw_params *p, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
