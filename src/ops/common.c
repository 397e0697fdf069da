/* common.c -- shape helpers shared by operator infer functions and kernels
 * (the registry is registry.c). */
#include "ops/op.h"

#include <stdarg.h>
#include <stdio.h>

/* ---- validation and checked shape arithmetic ------------------------------ */

kiln_status kiln__validate_fail(const kiln_op_def *op, const char *node, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): %s", node ? node : "?", op ? op->name : "?",
                     msg);
}

kiln_status kiln__check_attr(const kiln_op_def *op, const char *node, const char *what,
                             int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
        return kiln__validate_fail(op, node, "attribute '%s' = %lld is out of range [%lld, %lld]",
                                   what, (long long)v, (long long)lo, (long long)hi);
    return KILN_OK;
}

kiln_status kiln__infer(const kiln_infer_args *a) {
    KILN_TRY(a->op->infer(a));
    for (int i = 0; i < a->n_out; i++) {
        const kiln_tinfo *t = a->out[i];
        if (!t) continue;
        if (t->rank < -1 || t->rank > KILN_MAX_RANK)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): output %d would have rank %d (at most %d)",
                             a->node_name ? a->node_name : "?", a->op->name, i, t->rank,
                             KILN_MAX_RANK);
        int64_t n = 1;
        bool ovf = false;
        for (int d = 0; d < t->rank; d++) /* unknown and symbolic dims are not counted */
            if (t->dims[d] >= 0 && !kiln__mul_ok(n, t->dims[d], &n)) ovf = true;
        size_t es = kiln_dtype_size(t->dtype);
        if (ovf || !kiln__mul_ok(n, (int64_t)(es ? es : 1), &n) || n > KILN_MAX_TENSOR_BYTES) {
            char sh[160];
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (%s): output %d would have shape %s (%s), more than the "
                             "2^48 bytes (256 TiB) kiln accepts for one tensor",
                             a->node_name ? a->node_name : "?", a->op->name, i,
                             kiln__shape_str(t->rank, t->dims, sh, sizeof sh),
                             kiln_dtype_name(t->dtype));
        }
    }
    return KILN_OK;
}

kiln_status kiln__dim_mul(const char *node, int64_t x, int64_t y, int64_t *out) {
    if (!kiln__mul_ok(x, y, out))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s': shape arithmetic overflows (%lld * %lld)",
                         node ? node : "?", (long long)x, (long long)y);
    return KILN_OK;
}

kiln_status kiln__dim_add(const char *node, int64_t x, int64_t y, int64_t *out) {
    if (!kiln__add_ok(x, y, out))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s': shape arithmetic overflows (%lld + %lld)",
                         node ? node : "?", (long long)x, (long long)y);
    return KILN_OK;
}

/* ---- shapes ------------------------------------------------------------ */

size_t kiln__value_nbytes(const kiln_tinfo *t) {
    int64_t n = kiln__numel(t->rank, t->dims);
    size_t es = kiln_dtype_size(t->dtype);
    int64_t b;
    if (n < 0 || !es || !kiln__mul_ok(n, (int64_t)es, &b)) return 0;
    return (size_t)b;
}

int64_t kiln__numel(int rank, const int64_t *dims) {
    if (rank < 0) return -1;
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0) return -1;
        if (!kiln__mul_ok(n, dims[i], &n)) return -1;
    }
    return n;
}

int64_t kiln__tensor_numel(const kiln_tensor *t) { return kiln__numel(t->rank, t->dims); }

kiln_status kiln__norm_axis(const char *node, int64_t axis, int rank, int *out) {
    if (axis < -rank || axis >= rank)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s': axis %lld is out of range for rank %d",
                         node ? node : "?", (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return KILN_OK;
}

const char *kiln__shape_str(int rank, const int64_t *dims, char *buf, size_t n) {
    size_t len = 0;
    if (n == 0) return buf;
    buf[0] = 0;
    if (rank < 0) {
        snprintf(buf, n, "[?]");
        return buf;
    }
    len += (size_t)snprintf(buf + len, n - len, "[");
    for (int i = 0; i < rank && len < n; i++) {
        if (dims[i] >= 0)
            len += (size_t)snprintf(buf + len, n - len, "%s%lld", i ? "x" : "", (long long)dims[i]);
        else
            len += (size_t)snprintf(buf + len, n - len, "%s?", i ? "x" : "");
    }
    if (len < n) snprintf(buf + len, n - len, "]");
    return buf;
}

kiln_status kiln__broadcast_shapes(const char *node, int n, const kiln_tinfo *const *in,
                                   kiln_tinfo *out) {
    int rank = 0;
    for (int i = 0; i < n; i++) {
        if (!in[i]) continue;
        if (in[i]->rank < 0) {
            out->rank = -1;
            return KILN_OK;
        }
        if (in[i]->rank > rank) rank = in[i]->rank;
    }
    out->rank = rank;
    for (int d = 0; d < rank; d++) {
        int64_t r = 1; /* result so far */
        bool have = false;
        for (int i = 0; i < n; i++) {
            if (!in[i]) continue;
            int k = d - (rank - in[i]->rank);
            if (k < 0) continue;
            int64_t v = in[i]->dims[k];
            if (!have) {
                r = v;
                have = true;
                continue;
            }
            if (v == 1) continue;
            if (r == 1) {
                r = v;
            } else if (v >= 0 && r >= 0) {
                if (v != r) {
                    char a[128], b[128];
                    return KILN_FAIL(KILN_ERR_MODEL,
                                     "node '%s': shapes %s and %s cannot be broadcast together",
                                     node ? node : "?",
                                     kiln__shape_str(in[0] ? in[0]->rank : 0,
                                                     in[0] ? in[0]->dims : NULL, a, sizeof a),
                                     kiln__shape_str(in[i]->rank, in[i]->dims, b, sizeof b));
                }
            } else if (v >= 0) {
                r = v; /* symbolic vs known > 1: must be that value */
            } else if (r >= 0) {
                /* keep known r */
            } else if (v != r) {
                r = KILN_DIM_UNKNOWN; /* two different symbols */
            }
        }
        out->dims[d] = r;
    }
    return KILN_OK;
}

void kiln__tinfo_copy_shape(kiln_tinfo *dst, const kiln_tinfo *src) {
    dst->dtype = src->dtype;
    dst->rank = src->rank;
    if (src->rank > 0) memcpy(dst->dims, src->dims, sizeof(int64_t) * (size_t)src->rank);
}

int64_t kiln__tinfo_int(const kiln_tinfo *t, int64_t i) { return kiln__load_i64(t->dtype, t->data, i); }

void kiln__bcast_strides(int r, const int64_t *dims, int R, const int64_t *odims, int64_t *strides) {
    int64_t s = 1;
    for (int d = R - 1; d >= 0; d--) {
        int k = d - (R - r);
        if (k < 0) {
            strides[d] = 0;
            continue;
        }
        strides[d] = (dims[k] == 1 && odims[d] != 1) ? 0 : s;
        s *= dims[k];
    }
}

void *kiln__node_state_get(const kiln_kernel_args *a, void (*free_fn)(void *)) {
    return a->node_state && a->node_state->free == free_fn ? a->node_state->p : NULL;
}

bool kiln__node_state_keep(const kiln_kernel_args *a, void *p, void (*free_fn)(void *)) {
    if (!a->node_state || a->node_state->p) return false;
    a->node_state->p = p;
    a->node_state->free = free_fn;
    return true;
}

/* The free function of kiln__node_packed's buffers (and the tag that tells
 * them from other node state). */
static void packed_free(void *p) { kiln__aligned_free(p); }

float *kiln__node_packed(const kiln_kernel_args *a, size_t nf, bool *fresh, bool *own) {
    float *p = kiln__node_state_get(a, packed_free);
    *fresh = *own = false;
    if (p) return p;
    p = kiln__aligned_alloc(sizeof(float) * nf);
    if (!p) return NULL;
    *fresh = true;
    *own = !kiln__node_state_keep(a, p, packed_free);
    return p;
}
