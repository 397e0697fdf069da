/* cuda_ops_pw.c -- kiln.Pointwise on the GPU: supports and run (the
 * geometry and the launch parameters); the kernel is k_pointwise.cu. */
#if KILN_HAVE_CUDA

#include "backends/cuda/cuda_internal.h"
#include "backends/cuda/k_pointwise.h"
#include "ops/fused_pointwise.h"

#include <limits.h>

_Static_assert(sizeof(kcu_pw_instr) == sizeof(kiln_pw_instr), "kcu_pw_instr holds kiln_pw_instr's bytes");
_Static_assert(sizeof(kcu_pw_params) < 4000, "kcu_pw_params is a kernel parameter (4 KB at most)");

bool kiln__cu_pointwise_supports(const kiln_graph *g, const kiln_node *n) {
    const kiln_pw_attrs *at = n->attrs;
    if (!at || n->n_in != at->n_in || n->n_out != at->n_out) return false;
    for (int k = 0; k < n->n_in; k++)
        if (kiln__cu_in_dtype(g, n, k) != (kiln_dtype)at->in_dtype[k]) return false;
    for (int j = 0; j < n->n_out; j++)
        if (kiln__cu_out_dtype(g, n, j) != (kiln_dtype)at->out_dtype[j]) return false;
    return true;
}

static bool aligned(const void *p, size_t bytes) { return ((uintptr_t)p % bytes) == 0; }

kiln_status kiln__cu_pointwise_run(const kiln_kernel_args *a) {
    const kiln_pw_attrs *at = a->attrs;
    if (a->n_in != at->n_in || a->n_out != at->n_out)
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (kiln.Pointwise): %d inputs and %d outputs, its program has "
                         "%d and %d", KCU_NODE(a), a->n_in, a->n_out, at->n_in, at->n_out);
    for (int k = 0; k < at->n_in; k++)
        if (!a->in[k] || a->in[k]->dtype != (kiln_dtype)at->in_dtype[k])
            return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (kiln.Pointwise): input %d is not of the program's "
                             "type %s", KCU_NODE(a), k, kiln_dtype_name((kiln_dtype)at->in_dtype[k]));
    kcu_pw_params p;
    memset(&p, 0, sizeof p);
    p.n = kiln__tensor_numel(a->out[0]);
    if (p.n <= 0) return KILN_OK;
    p.n_in = at->n_in;
    p.n_out = at->n_out;
    p.n_instr = at->n_instr;
    p.regs = at->n_regs <= 4 ? 4 : at->n_regs <= 8 ? 8 : 16;
    p.idx32 = p.n <= INT32_MAX;
    p.rank = kiln__pw_geometry(a, p.dims, p.st);
    const int64_t inner = p.dims[p.rank - 1];
    bool vec = inner % 4 == 0;
    p.all_flat = 1;
    for (int k = 0; k < at->n_in; k++) {
        const kiln_tensor *x = a->in[k];
        int64_t nx = kiln__tensor_numel(x);
        size_t es = kiln_dtype_size(x->dtype);
        p.in[k] = x->data;
        p.in_dtype[k] = at->in_dtype[k];
        p.flat[k] = nx == 1 ? KCU_PW_SCALAR : nx == p.n ? KCU_PW_SAME : KCU_PW_GENERAL;
        if (p.flat[k] == KCU_PW_GENERAL) {
            p.all_flat = 0;
            int64_t si = p.st[k][p.rank - 1];
            vec = vec && (si == 0 || si == 1); /* 0: one load per thread, at any offset */
            if (si == 1) {
                for (int d = 0; d + 1 < p.rank; d++) vec = vec && p.st[k][d] % 4 == 0;
                vec = vec && aligned(x->data, 4 * es);
            }
        } else if (p.flat[k] == KCU_PW_SAME) {
            vec = vec && aligned(x->data, 4 * es);
        }
    }
    for (int j = 0; j < at->n_out; j++) {
        p.out[j] = a->out[j]->data;
        p.out_dtype[j] = at->out_dtype[j];
        p.out_reg[j] = at->out_reg[j];
        vec = vec && aligned(p.out[j], 4 * kiln_dtype_size((kiln_dtype)at->out_dtype[j]));
    }
    p.vec = vec ? 4 : 1;
    memcpy(p.instr, at->instr, sizeof p.instr);
    KILN_CUDA_TRY(kcu_pointwise(&p, KCU_STREAM(a)), KCU_NODE(a));
    return KILN_OK;
}

#else
typedef int kiln_cuda_ops_pw_disabled;
#endif
