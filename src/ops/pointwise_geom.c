/* pointwise_geom.c -- what kiln.Pointwise's validation, its reference
 * kernel (pointwise_interp.c) and its CUDA planner share:
 * the dtypes a program reads and writes, and the run's merged geometry.
 * (A file of its own, so that the op and the CPU kernel do not call each
 * other: scripts/dep_graph.py.) */
#include "ops/fused_pointwise.h"

bool kiln__pw_in_dtype_ok(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT32 || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16 ||
           t == KILN_DTYPE_BOOL || t == KILN_DTYPE_INT32 || t == KILN_DTYPE_INT64;
}

bool kiln__pw_out_dtype_ok(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT32 || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16 ||
           t == KILN_DTYPE_BOOL;
}

int kiln__pw_geometry(const kiln_kernel_args *a, int64_t *dims, int64_t (*st)[KILN_MAX_RANK]) {
    const kiln_tensor *o = a->out[0];
    int64_t full[KILN_PW_MAX_IN][KILN_MAX_RANK];
    for (int k = 0; k < a->n_in; k++) kiln__bcast_strides(a->in[k]->rank, a->in[k]->dims, o->rank, o->dims, full[k]);
    int R = 0;
    for (int d = 0; d < o->rank; d++) {
        if (o->dims[d] == 1) continue;
        bool merge = R > 0;
        for (int k = 0; k < a->n_in && merge; k++) merge = st[k][R - 1] == full[k][d] * o->dims[d];
        if (merge) {
            dims[R - 1] *= o->dims[d];
            for (int k = 0; k < a->n_in; k++) st[k][R - 1] = full[k][d];
        } else {
            dims[R] = o->dims[d];
            for (int k = 0; k < a->n_in; k++) st[k][R] = full[k][d];
            R++;
        }
    }
    if (R == 0) { /* one element */
        dims[0] = 1;
        for (int k = 0; k < a->n_in; k++) st[k][0] = 0;
        R = 1;
    }
    return R;
}
