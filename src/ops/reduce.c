/* reduce.c -- the Reduce* family: ReduceSum, ReduceMean, ReduceMax,
 * ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp,
 * ReduceSumSquare.
 *
 * Every opset form is normalized to the opset-18 form: `axes` is input 1
 * (int64, 1-D, optional), attributes keepdims and noop_with_empty_axes.
 * Absent or empty axes reduce over every axis, unless noop_with_empty_axes is
 * set, in which case the op is the identity.
 *
 * Kernels. The reduced axes are first collapsed into groups: size-1 dims are
 * dropped and neighbouring dims that are both reduced (or both kept) merge.
 * Then float32 has two fast paths:
 *   [outer, R]          rows reduced contiguously (LayerNorm's ReduceMean
 *                       over the last axis), 16-lane accumulators;
 *   [outer, R, inner]   one reduced group followed by kept dims: columns are
 *                       accumulated into a chunk of `inner` doubles.
 * Everything else (other dtypes, several reduced groups) goes through a
 * generic walk over the input that scatters into one accumulator per output
 * element (double for floating types, 64-bit integer for integer types). */
#include "ops/reduce_attrs.h"
#include "ops/reduce_codes.h"
#include "ops/op.h"

#include <float.h>
#include <math.h>
#include <stdio.h>



/* ---- import ------------------------------------------------------------ */

static kiln_status reduce_import(kiln_import_ctx *ic, void *attrs) {
    kiln_reduce_attrs *at = attrs;
    at->keepdims = kiln_attr_int(ic, "keepdims", 1) != 0;
    at->noop_with_empty_axes = kiln_attr_int(ic, "noop_with_empty_axes", 0) != 0;
    if (kiln_attr_has(ic, "axes")) {
        int64_t axes[KILN_MAX_RANK];
        int n = kiln_attr_ints(ic, "axes", axes, KILN_MAX_RANK);
        if (n > KILN_MAX_RANK)
            return KILN_IMPORT_FAIL(ic, "attribute 'axes' has %d entries; at most %d are supported",
                                    n, KILN_MAX_RANK);
        /* An `axes` input, when the node has one, wins over the old attribute. */
        if (n > 0 && !kiln_import_has_input(ic, 1)) {
            int64_t dims[1] = {n};
            KILN_TRY(kiln_import_set_const_input(ic, 1, KILN_DTYPE_INT64, 1, dims, axes));
        }
    }
    return KILN_OK;
}

/* keepdims and noop_with_empty_axes 0 or 1 */
static kiln_status reduce_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_reduce_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "keepdims", at->keepdims, 0, 1));
    return kiln__check_attr(op, node, "noop_with_empty_axes", at->noop_with_empty_axes, 0, 1);
}

/* ---- axes -------------------------------------------------------------- */

/* Reads `n` axes (any integer dtype) into mask[rank]. Fails on out-of-range
 * or repeated axes. */
static kiln_status axes_to_mask(const char *node, const char *opname, kiln_dtype dt,
                                const void *data, int64_t n, int rank, bool *mask) {
    for (int i = 0; i < rank; i++) mask[i] = false;
    if (!kiln__dtype_is_int(dt))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): input 'axes' must be int64, got %s",
                         node, opname, kiln_dtype_name(dt));
    for (int64_t i = 0; i < n; i++) {
        int64_t a = kiln__load_i64(dt, data, i);
        if (a < -rank || a >= rank)
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (%s): axis %lld is out of range for an input of rank %d",
                             node, opname, (long long)a, rank);
        int k = (int)(a < 0 ? a + rank : a);
        if (mask[k])
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): axis %lld is repeated in 'axes'",
                             node, opname, (long long)a);
        mask[k] = true;
    }
    return KILN_OK;
}

static bool reduce_dtype_ok(kiln_dtype t) {
    return kiln__dtype_is_float(t) || kiln__dtype_is_int(t);
}

/* ---- infer ------------------------------------------------------------- */

static kiln_status reduce_infer(const kiln_infer_args *a) {
    const kiln_reduce_attrs *at = a->attrs;
    const kiln_tinfo *x = a->in[0];
    const kiln_tinfo *ax = a->n_in > 1 ? a->in[1] : NULL;
    kiln_tinfo *y = a->out[0];
    const char *nm = a->node_name ? a->node_name : "?";
    y->dtype = x->dtype;
    y->data = NULL;
    if (!reduce_dtype_ok(x->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s is not supported", nm,
                         a->op->name, kiln_dtype_name(x->dtype));
    if (ax && ax->rank > 1)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): input 'axes' must be 1-D, got rank %d",
                         nm, a->op->name, ax->rank);

    /* How many axes are listed: -1 when not known yet. */
    int64_t n_axes = 0;
    if (ax) {
        if (ax->rank == 0) n_axes = 1;
        else if (ax->rank == 1) n_axes = ax->dims[0] >= 0 ? ax->dims[0] : -1;
        else n_axes = -1;
    }
    bool axes_known = !ax || ax->data != NULL;

    if (n_axes == 0 && at->noop_with_empty_axes) { /* identity */
        kiln__tinfo_copy_shape(y, x);
        y->dtype = x->dtype;
        return KILN_OK;
    }
    if (x->rank < 0) {
        y->rank = (!at->keepdims && n_axes == 0) ? 0 : -1;
        return KILN_OK;
    }
    int r = x->rank;
    bool mask[KILN_MAX_RANK];
    if (n_axes == 0) {
        for (int i = 0; i < r; i++) mask[i] = true;
    } else if (axes_known) {
        KILN_TRY(axes_to_mask(nm, a->op->name, ax->dtype, ax->data, n_axes, r, mask));
    } else {
        /* Axes computed at run time: only the rank may be known. */
        if (at->keepdims) {
            y->rank = r;
            for (int i = 0; i < r; i++) y->dims[i] = x->dims[i] == 1 ? 1 : KILN_DIM_UNKNOWN;
        } else if (n_axes > 0 && n_axes <= r) {
            y->rank = (int)(r - n_axes);
            for (int i = 0; i < y->rank; i++) y->dims[i] = KILN_DIM_UNKNOWN;
        } else {
            y->rank = -1;
        }
        return KILN_OK;
    }
    int k = 0;
    for (int i = 0; i < r; i++) {
        if (!mask[i]) y->dims[k++] = x->dims[i];
        else if (at->keepdims) y->dims[k++] = 1;
    }
    y->rank = k;
    return KILN_OK;
}

/* ---- reduction plan ---------------------------------------------------- */

typedef struct red_plan {
    int n;                          /* groups after collapsing */
    int64_t size[KILN_MAX_RANK];
    bool red[KILN_MAX_RANK];
    int64_t R;                      /* elements reduced into each output */
    int64_t in_n, out_n;
} red_plan;

static void make_plan(int rank, const int64_t *dims, const bool *mask, red_plan *p) {
    p->n = 0;
    p->R = 1;
    p->in_n = 1;
    p->out_n = 1;
    for (int i = 0; i < rank; i++) {
        p->in_n *= dims[i];
        if (mask[i]) p->R *= dims[i];
        else p->out_n *= dims[i];
        if (dims[i] == 1) continue;
        if (p->n > 0 && p->red[p->n - 1] == mask[i]) {
            p->size[p->n - 1] *= dims[i];
        } else {
            p->size[p->n] = dims[i];
            p->red[p->n] = mask[i];
            p->n++;
        }
    }
}

/* ---- float32 fast paths ------------------------------------------------ */

#define LANES 16

/* Max (or min) of the first multiple-of-16 elements into acc[16], with GCC
 * vector extensions (plain C selects do not vectorize without fast-math).
 * A lane that saw a NaN becomes NaN. Returns the count consumed. */
typedef float red_v4f __attribute__((vector_size(16)));
typedef int32_t red_v4i __attribute__((vector_size(16)));

static int64_t minmax_f32(bool is_min, const float *x, int64_t n, float *acc) {
    red_v4f a[4], v;
    red_v4i nan[4];
    float init = is_min ? INFINITY : -INFINITY;
    for (int q = 0; q < 4; q++) {
        a[q] = (red_v4f){init, init, init, init};
        nan[q] = (red_v4i){0, 0, 0, 0};
    }
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int q = 0; q < 4; q++) {
            memcpy(&v, x + i + 4 * q, sizeof v);
            red_v4i take = is_min ? (v < a[q]) : (v > a[q]);
            a[q] = (red_v4f)(((red_v4i)v & take) | ((red_v4i)a[q] & ~take));
            nan[q] |= (v != v);
        }
    for (int q = 0; q < 4; q++)
        for (int j = 0; j < 4; j++) acc[4 * q + j] = nan[q][j] ? NAN : a[q][j];
    return i;
}

static float row_reduce_f32(int kind, const float *x, int64_t n) {
    float acc[LANES];
    int64_t i = 0;
    float s;
    switch (kind) {
    case RK_SUM:
    case RK_MEAN:
    case RK_LOGSUM:
        for (int j = 0; j < LANES; j++) acc[j] = 0.f;
        for (; i + LANES <= n; i += LANES)
            for (int j = 0; j < LANES; j++) acc[j] += x[i + j];
        break;
    case RK_L1:
        for (int j = 0; j < LANES; j++) acc[j] = 0.f;
        for (; i + LANES <= n; i += LANES)
            for (int j = 0; j < LANES; j++) acc[j] += fabsf(x[i + j]);
        break;
    case RK_L2:
    case RK_SUMSQUARE:
        for (int j = 0; j < LANES; j++) acc[j] = 0.f;
        for (; i + LANES <= n; i += LANES)
            for (int j = 0; j < LANES; j++) acc[j] += x[i + j] * x[i + j];
        break;
    case RK_PROD:
        for (int j = 0; j < LANES; j++) acc[j] = 1.f;
        for (; i + LANES <= n; i += LANES)
            for (int j = 0; j < LANES; j++) acc[j] *= x[i + j];
        break;
    case RK_MAX:
    case RK_LOGSUMEXP:
    case RK_MIN:
        i = minmax_f32(kind == RK_MIN, x, n, acc);
        break;
    default:
        return 0.f;
    }
    /* combine lanes and the tail */
    switch (kind) {
    case RK_PROD:
        s = 1.f;
        for (int j = 0; j < LANES; j++) s *= acc[j];
        for (; i < n; i++) s *= x[i];
        return s;
    case RK_MAX:
    case RK_LOGSUMEXP: {
        float m = -INFINITY;
        for (int j = 0; j < LANES; j++) m = (acc[j] > m || acc[j] != acc[j]) ? acc[j] : m;
        for (; i < n; i++) m = (x[i] > m || x[i] != x[i]) ? x[i] : m;
        if (kind == RK_MAX) return m;
        /* log(sum(exp(x - m))) + m, summed in double */
        float shift = isfinite(m) ? m : 0.f;
        double t = 0.0;
        for (int64_t q = 0; q < n; q++) t += exp((double)x[q] - shift);
        return (float)(log(t) + shift);
    }
    case RK_MIN: {
        float m = INFINITY;
        for (int j = 0; j < LANES; j++) m = (acc[j] < m || acc[j] != acc[j]) ? acc[j] : m;
        for (; i < n; i++) m = (x[i] < m || x[i] != x[i]) ? x[i] : m;
        return m;
    }
    default:
        break;
    }
    /* sums: pairwise combine of the lanes */
    for (int w = LANES / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    s = acc[0];
    for (; i < n; i++) {
        float v = x[i];
        s += kind == RK_L1 ? fabsf(v) : (kind == RK_L2 || kind == RK_SUMSQUARE) ? v * v : v;
    }
    switch (kind) {
    case RK_MEAN: return n > 0 ? s / (float)n : NAN;
    case RK_L2: return sqrtf(s);
    case RK_LOGSUM: return logf(s);
    default: return s;
    }
}

typedef struct red_f32_ctx {
    int kind;
    const float *x;
    float *y;
    int64_t R, inner, n_chunks; /* mid path: chunks of `inner` per outer */
} red_f32_ctx;

static void rows_f32_fn(void *vctx, int64_t b, int64_t e) {
    const red_f32_ctx *c = vctx;
    for (int64_t o = b; o < e; o++) c->y[o] = row_reduce_f32(c->kind, c->x + o * c->R, c->R);
}

#define MID_CHUNK 256

static void mid_f32_fn(void *vctx, int64_t b, int64_t e) {
    const red_f32_ctx *c = vctx;
    double acc[MID_CHUNK];
    double mx[MID_CHUNK];
    const int kind = c->kind;
    for (int64_t t = b; t < e; t++) {
        int64_t o = t / c->n_chunks;
        int64_t i0 = (t % c->n_chunks) * MID_CHUNK;
        int64_t w = c->inner - i0 < MID_CHUNK ? c->inner - i0 : MID_CHUNK;
        const float *x = c->x + o * c->R * c->inner + i0;
        float *y = c->y + o * c->inner + i0;
        double init = 0.0;
        if (kind == RK_PROD) init = 1.0;
        else if (kind == RK_MAX || kind == RK_LOGSUMEXP) init = -INFINITY;
        else if (kind == RK_MIN) init = INFINITY;
        for (int64_t i = 0; i < w; i++) acc[i] = init;
        for (int64_t r = 0; r < c->R; r++) {
            const float *row = x + r * c->inner;
            switch (kind) {
            case RK_SUM:
            case RK_MEAN:
            case RK_LOGSUM:
                for (int64_t i = 0; i < w; i++) acc[i] += row[i];
                break;
            case RK_L1:
                for (int64_t i = 0; i < w; i++) acc[i] += fabsf(row[i]);
                break;
            case RK_L2:
            case RK_SUMSQUARE:
                for (int64_t i = 0; i < w; i++) acc[i] += (double)row[i] * row[i];
                break;
            case RK_PROD:
                for (int64_t i = 0; i < w; i++) acc[i] *= row[i];
                break;
            case RK_MAX:
            case RK_LOGSUMEXP:
                for (int64_t i = 0; i < w; i++) {
                    double v = row[i];
                    acc[i] = (v > acc[i] || v != v) ? v : acc[i];
                }
                break;
            case RK_MIN:
                for (int64_t i = 0; i < w; i++) {
                    double v = row[i];
                    acc[i] = (v < acc[i] || v != v) ? v : acc[i];
                }
                break;
            default:
                break;
            }
        }
        if (kind == RK_LOGSUMEXP) {
            for (int64_t i = 0; i < w; i++) {
                mx[i] = isfinite(acc[i]) ? acc[i] : 0.0;
                acc[i] = 0.0;
            }
            for (int64_t r = 0; r < c->R; r++) {
                const float *row = x + r * c->inner;
                for (int64_t i = 0; i < w; i++) acc[i] += exp((double)row[i] - mx[i]);
            }
            for (int64_t i = 0; i < w; i++) y[i] = (float)(log(acc[i]) + mx[i]);
            continue;
        }
        for (int64_t i = 0; i < w; i++) {
            double v = acc[i];
            switch (kind) {
            case RK_MEAN: v = c->R > 0 ? v / (double)c->R : NAN; break;
            case RK_L2: v = sqrt(v); break;
            case RK_LOGSUM: v = log(v); break;
            default: break;
            }
            y[i] = (float)v;
        }
    }
}

/* ---- generic path ------------------------------------------------------ */

static inline double gload_f(kiln_dtype t, const void *p, int64_t i) {
    if (t == KILN_DTYPE_FLOAT32) return ((const float *)p)[i];
    if (t == KILN_DTYPE_FLOAT64) return ((const double *)p)[i];
    return kiln__load_f64(t, p, i);
}

/* Accumulates with double accumulators. pass 0: the reduction itself (or the
 * max for LogSumExp); pass 1 (LogSumExp only): sum of exp(x - shift[o]). */
static void gen_pass_f(int kind, int pass, const red_plan *p, kiln_dtype dt, const void *x,
                       double *acc, const double *shift) {
    int G = p->n;
    int64_t ostr[KILN_MAX_RANK];
    int64_t s = 1;
    for (int g = G - 1; g >= 0; g--) {
        ostr[g] = p->red[g] ? 0 : s;
        if (!p->red[g]) s *= p->size[g];
    }
    int64_t inner = G > 0 ? p->size[G - 1] : 1;
    bool inner_red = G > 0 && p->red[G - 1];
    int64_t n_outer = inner > 0 ? p->in_n / inner : 0;
    int64_t idx[KILN_MAX_RANK] = {0};
    int64_t ob = 0;
    for (int64_t o = 0; o < n_outer; o++) {
        int64_t base = o * inner;
        for (int64_t j = 0; j < inner; j++) {
            double v = gload_f(dt, x, base + j);
            double *A = &acc[inner_red ? ob : ob + j];
            if (pass == 1) {
                *A += exp(v - shift[inner_red ? ob : ob + j]);
                continue;
            }
            switch (kind) {
            case RK_SUM:
            case RK_MEAN:
            case RK_LOGSUM: *A += v; break;
            case RK_L1: *A += fabs(v); break;
            case RK_L2:
            case RK_SUMSQUARE: *A += v * v; break;
            case RK_PROD: *A *= v; break;
            case RK_MAX:
            case RK_LOGSUMEXP:
                if (v > *A || v != v) *A = v;
                break;
            case RK_MIN:
                if (v < *A || v != v) *A = v;
                break;
            default: break;
            }
        }
        for (int g = G - 2; g >= 0; g--) {
            idx[g]++;
            ob += ostr[g];
            if (idx[g] < p->size[g]) break;
            ob -= ostr[g] * p->size[g];
            idx[g] = 0;
        }
    }
}

/* Integer accumulation: values as int64 (wrapping arithmetic through
 * uint64), uint64 max/min compared with the sign bit flipped. */
static void gen_pass_i(int kind, const red_plan *p, kiln_dtype dt, const void *x, int64_t *acc) {
    int G = p->n;
    int64_t ostr[KILN_MAX_RANK];
    int64_t s = 1;
    for (int g = G - 1; g >= 0; g--) {
        ostr[g] = p->red[g] ? 0 : s;
        if (!p->red[g]) s *= p->size[g];
    }
    const uint64_t flip = dt == KILN_DTYPE_UINT64 ? (uint64_t)1 << 63 : 0;
    int64_t inner = G > 0 ? p->size[G - 1] : 1;
    bool inner_red = G > 0 && p->red[G - 1];
    int64_t n_outer = inner > 0 ? p->in_n / inner : 0;
    int64_t idx[KILN_MAX_RANK] = {0};
    int64_t ob = 0;
    for (int64_t o = 0; o < n_outer; o++) {
        int64_t base = o * inner;
        for (int64_t j = 0; j < inner; j++) {
            int64_t v = kiln__load_i64(dt, x, base + j);
            int64_t *A = &acc[inner_red ? ob : ob + j];
            switch (kind) {
            case RK_SUM:
            case RK_MEAN: *A = (int64_t)((uint64_t)*A + (uint64_t)v); break;
            case RK_L1: *A = (int64_t)((uint64_t)*A + (uint64_t)(v < 0 ? -(uint64_t)v : (uint64_t)v)); break;
            case RK_SUMSQUARE: *A = (int64_t)((uint64_t)*A + (uint64_t)v * (uint64_t)v); break;
            case RK_PROD: *A = (int64_t)((uint64_t)*A * (uint64_t)v); break;
            case RK_MAX: {
                int64_t fv = (int64_t)((uint64_t)v ^ flip);
                if (fv > *A) *A = fv;
                break;
            }
            case RK_MIN: {
                int64_t fv = (int64_t)((uint64_t)v ^ flip);
                if (fv < *A) *A = fv;
                break;
            }
            default: break;
            }
        }
        for (int g = G - 2; g >= 0; g--) {
            idx[g]++;
            ob += ostr[g];
            if (idx[g] < p->size[g]) break;
            ob -= ostr[g] * p->size[g];
            idx[g] = 0;
        }
    }
}

static kiln_status reduce_generic(const kiln_kernel_args *a, int kind, const red_plan *p,
                                  const kiln_tensor *x, kiln_tensor *y) {
    kiln_dtype dt = x->dtype;
    int64_t on = p->out_n;
    bool int_path = kiln__dtype_is_int(dt) && kind != RK_L2 && kind != RK_LOGSUM &&
                    kind != RK_LOGSUMEXP;
    if (on == 0) return KILN_OK;
    if (int_path) {
        int64_t *acc = kiln__malloc((size_t)on * sizeof(int64_t));
        if (!acc)
            return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (%s): out of memory", a->node_name,
                             a->op->name);
        const uint64_t flip = dt == KILN_DTYPE_UINT64 ? (uint64_t)1 << 63 : 0;
        int64_t init = 0;
        if (kind == RK_PROD) init = 1;
        else if (kind == RK_MAX) init = INT64_MIN; /* flipped space for uint64 */
        else if (kind == RK_MIN) init = INT64_MAX;
        if (kind == RK_MAX && !flip && !kiln__dtype_is_signed(dt)) init = 0;
        for (int64_t i = 0; i < on; i++) acc[i] = init;
        gen_pass_i(kind, p, dt, x->data, acc);
        for (int64_t i = 0; i < on; i++) {
            int64_t v = acc[i];
            if (kind == RK_MAX || kind == RK_MIN) v = (int64_t)((uint64_t)v ^ flip);
            if (kind == RK_MEAN) {
                if (p->R == 0) v = 0;
                else if (dt == KILN_DTYPE_UINT64) v = (int64_t)((uint64_t)v / (uint64_t)p->R);
                else v = v / p->R;
            }
            if (p->R == 0 && (kind == RK_MAX || kind == RK_MIN)) {
                /* empty max/min: the dtype's lowest/highest value */
                int bits = (int)kiln_dtype_size(dt) * 8;
                bool sgn = kiln__dtype_is_signed(dt);
                uint64_t hi = sgn ? ((uint64_t)1 << (bits - 1)) - 1
                                  : (bits == 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1);
                uint64_t lo = sgn ? (uint64_t)(-(int64_t)hi - 1) : 0;
                v = (int64_t)(kind == RK_MAX ? lo : hi);
            }
            kiln__store_i64(dt, y->data, i, v);
        }
        kiln__free(acc);
        return KILN_OK;
    }
    int passes = kind == RK_LOGSUMEXP ? 2 : 1;
    double *acc = kiln__malloc((size_t)on * passes * sizeof(double));
    if (!acc)
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (%s): out of memory", a->node_name,
                         a->op->name);
    double init = 0.0;
    if (kind == RK_PROD) init = 1.0;
    else if (kind == RK_MAX || kind == RK_LOGSUMEXP) init = -INFINITY;
    else if (kind == RK_MIN) init = INFINITY;
    for (int64_t i = 0; i < on; i++) acc[i] = init;
    gen_pass_f(kind, 0, p, dt, x->data, acc, NULL);
    if (kind == RK_LOGSUMEXP) {
        double *sum = acc + on;
        for (int64_t i = 0; i < on; i++) {
            if (!isfinite(acc[i])) acc[i] = 0.0;
            sum[i] = 0.0;
        }
        gen_pass_f(kind, 1, p, dt, x->data, sum, acc);
        for (int64_t i = 0; i < on; i++) acc[i] = log(sum[i]) + acc[i];
    }
    for (int64_t i = 0; i < on; i++) {
        double v = acc[i];
        switch (kind) {
        case RK_MEAN: v = p->R > 0 ? v / (double)p->R : NAN; break;
        case RK_L2: v = sqrt(v); break;
        case RK_LOGSUM: v = log(v); break;
        default: break;
        }
        kiln__store_f64(y->dtype, y->data, i, v);
    }
    kiln__free(acc);
    return KILN_OK;
}

/* ---- kernel ------------------------------------------------------------ */

static kiln_status reduce_cpu(const kiln_kernel_args *a) {
    const kiln_reduce_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    const kiln_tensor *ax = a->n_in > 1 ? a->in[1] : NULL;
    kiln_tensor *y = a->out[0];
    const char *nm = a->node_name ? a->node_name : "?";
    int kind = a->op->code;
    if (!reduce_dtype_ok(x->dtype) || y->dtype != x->dtype)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s is not supported", nm,
                         a->op->name, kiln_dtype_name(x->dtype));
    int64_t n_axes = ax ? kiln__tensor_numel(ax) : 0;
    int r = x->rank;
    bool mask[KILN_MAX_RANK];
    if (n_axes == 0) {
        if (at->noop_with_empty_axes) {
            size_t nb = (size_t)kiln__tensor_numel(x) * kiln_dtype_size(x->dtype);
            if (nb) memcpy(y->data, x->data, nb);
            return KILN_OK;
        }
        for (int i = 0; i < r; i++) mask[i] = true;
    } else {
        KILN_TRY(axes_to_mask(nm, a->op->name, ax->dtype, ax->data, n_axes, r, mask));
    }
    red_plan p;
    make_plan(r, x->dims, mask, &p);
    if (p.out_n != kiln__tensor_numel(y))
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (%s): output has %lld elements, expected %lld",
                         nm, a->op->name, (long long)kiln__tensor_numel(y), (long long)p.out_n);
    if (p.out_n == 0) return KILN_OK;

    if (x->dtype == KILN_DTYPE_FLOAT32 && p.in_n > 0) {
        red_f32_ctx c = {.kind = kind, .x = x->data, .y = y->data, .R = p.R};
        /* [outer..., R]: the last group is the only reduced one (or nothing is). */
        int n_red = 0;
        for (int g = 0; g < p.n; g++) n_red += p.red[g];
        if (n_red == 0 || (n_red == 1 && p.red[p.n - 1])) {
            int64_t grain = p.R >= 4096 ? 1 : 4096 / (p.R > 0 ? p.R : 1);
            kiln__parallel_for(a->pool, p.out_n, grain, rows_f32_fn, &c);
            return KILN_OK;
        }
        if (n_red == 1 && p.n >= 2 && p.red[p.n - 2]) {
            c.inner = p.size[p.n - 1];
            c.n_chunks = (c.inner + MID_CHUNK - 1) / MID_CHUNK;
            int64_t tasks = (p.out_n / c.inner) * c.n_chunks;
            int64_t per = p.R * (c.inner < MID_CHUNK ? c.inner : MID_CHUNK);
            int64_t grain = per >= 8192 ? 1 : 8192 / (per > 0 ? per : 1);
            kiln__parallel_for(a->pool, tasks, grain, mid_f32_fn, &c);
            return KILN_OK;
        }
    }
    return reduce_generic(a, kind, &p, x, y);
}

/* ---- descriptors ------------------------------------------------------- */

/* FLAGS: KILN_OP_FLAG_REDUCIBLE for Mean, Max, Min (the sum-like ones leave the
 * fp16 range easily) */
#define REDUCE_OP(SYM, NAME, KIND, FLAGS)                                              \
    const kiln_op_def kiln_op_##SYM = {                                                \
        .name = NAME,                                                                  \
        .flags = FLAGS,                                                                \
        .domain = "",                                                                  \
        .since = 1,                                                                    \
        .min_inputs = 1,                                                               \
        .max_inputs = 2,                                                               \
        .min_outputs = 1,                                                              \
        .max_outputs = 1,                                                              \
        .code = KIND,                                                                  \
        .attr_size = sizeof(kiln_reduce_attrs),                                        \
        .host_inputs = 1u << 1, /* axes: read by infer */                              \
        .import = reduce_import,                                                       \
        .validate = reduce_validate,                                                   \
        .infer = reduce_infer,                                                         \
        .cpu = reduce_cpu,                                                             \
    }

REDUCE_OP(ReduceSum, "ReduceSum", RK_SUM, 0);
REDUCE_OP(ReduceMean, "ReduceMean", RK_MEAN, KILN_OP_FLAG_REDUCIBLE);
REDUCE_OP(ReduceMax, "ReduceMax", RK_MAX, KILN_OP_FLAG_REDUCIBLE);
REDUCE_OP(ReduceMin, "ReduceMin", RK_MIN, KILN_OP_FLAG_REDUCIBLE);
REDUCE_OP(ReduceProd, "ReduceProd", RK_PROD, 0);
REDUCE_OP(ReduceL1, "ReduceL1", RK_L1, 0);
REDUCE_OP(ReduceL2, "ReduceL2", RK_L2, 0);
REDUCE_OP(ReduceLogSum, "ReduceLogSum", RK_LOGSUM, 0);
REDUCE_OP(ReduceLogSumExp, "ReduceLogSumExp", RK_LOGSUMEXP, 0);
REDUCE_OP(ReduceSumSquare, "ReduceSumSquare", RK_SUMSQUARE, 0);
