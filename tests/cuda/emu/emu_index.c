/* emu_index.c -- host emulation of the "index" family launchers (k_index.cu) for
 * tests/cuda/emu/run.sh: index math transcribed from the kernels, arithmetic
 * through kiln's load/store helpers (double for floating dtypes, wrapping
 * 64-bit for integers). Checks the host code (cuda_ops_index.c) and the test
 * cases (tests/cuda/cases_index.inc), not the kernels. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "backends/cuda/cuda_internal.h"

static bool fl(kiln_dtype t) {
    return kiln__dtype_is_float(t);
}
static bool uns(kiln_dtype t) {
    return t == KILN_DTYPE_UINT8 || t == KILN_DTYPE_UINT16 || t == KILN_DTYPE_UINT32 ||
           t == KILN_DTYPE_UINT64;
}
static int64_t li(const void *p, int i64, int64_t i) {
    return i64 ? ((const int64_t *)p)[i] : ((const int32_t *)p)[i];
}

int kcu_index_numeric(kiln_dtype t) {
    switch (t) {
    case KILN_DTYPE_FLOAT32:
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16:
    case KILN_DTYPE_FLOAT64:
    case KILN_DTYPE_INT8:
    case KILN_DTYPE_INT16:
    case KILN_DTYPE_INT32:
    case KILN_DTYPE_INT64:
    case KILN_DTYPE_UINT8:
    case KILN_DTYPE_UINT16:
    case KILN_DTYPE_UINT32:
    case KILN_DTYPE_UINT64:
        return 1;
    default:
        return 0;
    }
}
/* comparable key as in k_index.cu */
static uint64_t key(kiln_dtype t, const void *p, int64_t i) {
    if (fl(t)) {
        double d = kiln__load_f64(t, p, i);
        if (d != d)
            return ~0ull;
        if (d == 0)
            d = 0;
        if (t == KILN_DTYPE_FLOAT64) {
            uint64_t b;
            memcpy(&b, &d, 8);
            return (b >> 63) ? ~b : (b | (1ull << 63));
        }
        float f = (float)d;
        uint32_t b;
        memcpy(&b, &f, 4);
        b = (b >> 31) ? ~b : (b | 0x80000000u);
        return b;
    }
    if (uns(t))
        return (uint64_t)kiln__load_i64(t, p, i);
    return (uint64_t)kiln__load_i64(t, p, i) ^ (1ull << 63);
}
/* element a of x ordered against element b: -1, 0, 1, or 2 when unordered (NaN) */
static int ord(kiln_dtype t, const void *x, int64_t a, int64_t b) {
    if (fl(t)) {
        double u = kiln__load_f64(t, x, a), v = kiln__load_f64(t, x, b);
        return u < v ? -1 : u > v ? 1 : u == v ? 0 : 2;
    }
    uint64_t u = key(t, x, a), v = key(t, x, b);
    return u < v ? -1 : u > v;
}
cudaError_t kcu_argreduce(int is_max, int last, kiln_dtype t, const void *x, int64_t *y,
                          int64_t outer, int64_t R, int64_t inner, cudaStream_t s) {
    (void)s;
    if (outer <= 0 || inner <= 0)
        return cudaSuccess;
    if (R <= 0 || !kcu_index_numeric(t))
        return cudaErrorInvalidValue;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * R * inner + i, bi = 0;
            for (int64_t r = 1; r < R; r++) {
                /* the CPU loop: v > best (>= with last) for max, < (<=) for min */
                int c = ord(t, x, base + r * inner, base + bi * inner);
                bool tk = c != 2 && (is_max ? (c > 0 || (last && c == 0))
                                             : (c < 0 || (last && c == 0)));
                if (tk)
                    bi = r;
            }
            y[o * inner + i] = bi;
        }
    return cudaSuccess;
}
size_t kcu_topk_scratch(int64_t outer, int64_t R, int64_t inner) {
    int64_t P = 1;
    while (P < R)
        P <<= 1;
    if (P <= KCU_TOPK_SHARED || outer <= 0 || inner <= 0)
        return 0;
    return (size_t)(outer * inner * P) * 12;
}
typedef struct {
    uint64_t k;
    int64_t i;
} it_;
static int g_largest;
static int cmp_it(const void *a, const void *b) {
    const it_ *x = a, *y = b;
    if (x->k != y->k)
        return g_largest ? (x->k > y->k ? -1 : 1) : (x->k < y->k ? -1 : 1);
    return x->i < y->i ? -1 : x->i > y->i;
}
cudaError_t kcu_topk(int largest, kiln_dtype t, const void *x, void *v, int64_t *ix, int64_t outer,
                     int64_t R, int64_t inner, int64_t k, void *scratch, cudaStream_t s) {
    (void)s;
    if (outer <= 0 || inner <= 0 || k <= 0)
        return cudaSuccess;
    if (k > R || !kcu_index_numeric(t))
        return cudaErrorInvalidValue;
    if (kcu_topk_scratch(outer, R, inner) && !scratch)
        return cudaErrorInvalidValue;
    size_t es = kiln_dtype_size(t);
    it_ *items = malloc((size_t)R * sizeof *items);
    g_largest = largest;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            for (int64_t r = 0; r < R; r++) {
                items[r].k = key(t, x, (o * R + r) * inner + in);
                items[r].i = r;
            }
            qsort(items, (size_t)R, sizeof *items, cmp_it);
            for (int64_t j = 0; j < k; j++) {
                int64_t op = (o * k + j) * inner + in;
                memcpy((char *)v + op * es,
                       (const char *)x + ((o * R + items[j].i) * inner + in) * es, es);
                if (ix)
                    ix[op] = items[j].i;
            }
        }
    free(items);
    return cudaSuccess;
}
cudaError_t kcu_cumsum(kiln_dtype t, int exclusive, int reverse, const void *x, void *y,
                       int64_t outer, int64_t len, int64_t inner, cudaStream_t s) {
    (void)s;
    if (!kcu_index_numeric(t))
        return cudaErrorInvalidValue;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            double af = 0;
            uint64_t ai = 0;
            for (int64_t j = 0; j < len; j++) {
                int64_t jj = reverse ? len - 1 - j : j, p = (o * len + jj) * inner + in;
                if (fl(t)) {
                    double v = kiln__load_f64(t, x, p);
                    if (exclusive) {
                        kiln__store_f64(t, y, p, af);
                        af += v;
                    } else {
                        af += v;
                        kiln__store_f64(t, y, p, af);
                    }
                } else {
                    uint64_t v = (uint64_t)kiln__load_i64(t, x, p);
                    if (exclusive) {
                        kiln__store_i64(t, y, p, (int64_t)ai);
                        ai += v;
                    } else {
                        ai += v;
                        kiln__store_i64(t, y, p, (int64_t)ai);
                    }
                }
            }
        }
    return cudaSuccess;
}
static int64_t ebase(const kcu_elems *g, int64_t i) {
    int64_t rem = i, off = 0;
    for (int d = g->rank - 1; d >= 0; d--) {
        int64_t c = rem % g->idims[d];
        rem /= g->idims[d];
        if (d != g->axis)
            off += c * g->xst[d];
    }
    return off;
}
/* data offset of index element i, or -1 when its index is out of range */
static int64_t eoff(const kcu_elems *g, kiln_dtype it, const void *ind, int64_t i) {
    int64_t v = li(ind, it == KILN_DTYPE_INT64, i);
    if (v < 0)
        v += g->axis_dim;
    return v < 0 || v >= g->axis_dim ? -1 : ebase(g, i) + v * g->xst[g->axis];
}
cudaError_t kcu_gather_elements(size_t es, kiln_dtype it, const kcu_elems *g, const void *x,
                                const void *ind, void *y, cudaStream_t s) {
    (void)s;
    if (g->n <= 0)
        return cudaSuccess;
    if (it != KILN_DTYPE_INT32 && it != KILN_DTYPE_INT64)
        return cudaErrorInvalidValue;
    for (int64_t i = 0; i < g->n; i++) {
        int64_t o = eoff(g, it, ind, i);
        if (o < 0)
            memset((char *)y + i * es, 0, es);
        else
            memcpy((char *)y + i * es, (const char *)x + o * (int64_t)es, es);
    }
    return cudaSuccess;
}
int kcu_scatter_has(kiln_dtype t, int red) {
    if (red == KCU_RED_NONE) {
        size_t es = kiln_dtype_size(t);
        return t != KILN_DTYPE_STRING && (es == 1 || es == 2 || es == 4 || es == 8);
    }
    if (red < 1 || red > 4)
        return 0;
    return kcu_index_numeric(t) || t == KILN_DTYPE_BOOL;
}
static void red1(kiln_dtype t, int red, void *y, int64_t o, const void *u, int64_t i) {
    size_t es = kiln_dtype_size(t);
    if (red == 0) {
        memcpy((char *)y + o * es, (const char *)u + i * es, es);
        return;
    }
    if (t == KILN_DTYPE_BOOL) {
        bool a = ((uint8_t *)y)[o] != 0, b = ((const uint8_t *)u)[i] != 0;
        ((uint8_t *)y)[o] = (red == 1 || red == 3) ? (a || b) : (a && b);
        return;
    }
    if (fl(t)) {
        double a = kiln__load_f64(t, y, o), b = kiln__load_f64(t, u, i), r;
        if (t != KILN_DTYPE_FLOAT64) {
            a = (float)a;
            b = (float)b;
        }
        r = red == 1 ? a + b : red == 2 ? a * b : red == 3 ? (a > b ? a : b) : (a < b ? a : b);
        if (t != KILN_DTYPE_FLOAT64)
            r = (float)r;
        kiln__store_f64(t, y, o, r);
        return;
    }
    uint64_t a = (uint64_t)kiln__load_i64(t, y, o), b = (uint64_t)kiln__load_i64(t, u, i), r;
    if (red == 1)
        r = a + b;
    else if (red == 2)
        r = a * b;
    else {
        bool gt = uns(t) ? a > b : (int64_t)a > (int64_t)b;
        r = (red == 3) == gt ? a : b;
    }
    kiln__store_i64(t, y, o, (int64_t)r);
}
cudaError_t kcu_scatter_elements(kiln_dtype t, int red, kiln_dtype it, const kcu_elems *g,
                                 const void *ind, const void *upd, void *y, cudaStream_t s) {
    (void)s;
    if (g->n <= 0)
        return cudaSuccess;
    if (!kcu_scatter_has(t, red) || (it != KILN_DTYPE_INT32 && it != KILN_DTYPE_INT64))
        return cudaErrorInvalidValue;
    for (int64_t i = 0; i < g->n; i++) {
        int64_t o = eoff(g, it, ind, i);
        if (o >= 0)
            red1(t, red, y, o, upd, i);
    }
    return cudaSuccess;
}
static int64_t ndoff(const kcu_nd *g, const int64_t *ind, int64_t u) {
    int64_t off = (u / g->T) * g->batch_stride;
    for (int j = 0; j < g->m; j++) {
        int64_t v = ind[u * g->m + j];
        if (v < 0)
            v += g->ddim[j];
        if (v < 0 || v >= g->ddim[j])
            return -1;
        off += v * g->dst[j];
    }
    return off;
}
cudaError_t kcu_gather_nd(size_t es, const kcu_nd *g, const void *x, const int64_t *ind, void *y,
                          cudaStream_t s) {
    (void)s;
    int64_t n = g->B * g->T * g->slice;
    if (n <= 0)
        return cudaSuccess;
    if (g->T <= 0)
        return cudaErrorInvalidValue;
    for (int64_t e = 0; e < n; e++) {
        int64_t u = e / g->slice, o = ndoff(g, ind, u);
        if (o < 0)
            memset((char *)y + e * es, 0, es);
        else
            memcpy((char *)y + e * es, (const char *)x + (o + e % g->slice) * es, es);
    }
    return cudaSuccess;
}
cudaError_t kcu_scatter_nd(kiln_dtype t, int red, const kcu_nd *g, const int64_t *ind,
                           const void *upd, void *y, cudaStream_t s) {
    (void)s;
    int64_t n = g->B * g->T * g->slice;
    if (n <= 0)
        return cudaSuccess;
    if (!kcu_scatter_has(t, red) || g->T <= 0)
        return cudaErrorInvalidValue;
    for (int64_t e = 0; e < n; e++) {
        int64_t u = e / g->slice, o = ndoff(g, ind, u);
        if (o >= 0)
            red1(t, red, y, o + e % g->slice, upd, e);
    }
    return cudaSuccess;
}
cudaError_t kcu_onehot(size_t es, kiln_dtype it, const void *ind, const void *vals, void *y,
                       int64_t outer, int64_t depth, int64_t inner, cudaStream_t s) {
    (void)s;
    if (it != KILN_DTYPE_INT32 && it != KILN_DTYPE_INT64)
        return cudaErrorInvalidValue;
    for (int64_t e = 0; e < outer * depth * inner; e++) {
        int64_t i = e % inner, tt = e / inner, d = tt % depth, o = tt / depth;
        int64_t v = li(ind, it == KILN_DTYPE_INT64, o * inner + i);
        if (v < 0)
            v += depth;
        memcpy((char *)y + e * es, (const char *)vals + (v == d ? es : 0), es);
    }
    return cudaSuccess;
}
cudaError_t kcu_trilu(size_t es, int upper, const void *x, void *y, int64_t nmat, int64_t R,
                      int64_t C, int64_t k, const void *k_dev, kiln_dtype k_t, cudaStream_t s) {
    (void)s;
    if (k_dev)
        k = li(k_dev, k_t == KILN_DTYPE_INT64, 0);
    for (int64_t e = 0; e < nmat * R * C; e++) {
        int64_t j = e % C, i = (e / C) % R;
        bool keep = upper ? j >= i + k : j <= i + k;
        if (keep)
            memcpy((char *)y + e * es, (const char *)x + e * es, es);
        else
            memset((char *)y + e * es, 0, es);
    }
    return cudaSuccess;
}
cudaError_t kcu_range(kiln_dtype t, void *y, int64_t n, double sf, double df, int64_t si,
                      int64_t di, cudaStream_t s) {
    (void)s;
    if (!kcu_index_numeric(t))
        return cudaErrorInvalidValue;
    for (int64_t i = 0; i < n; i++) {
        if (t == KILN_DTYPE_FLOAT32)
            ((float *)y)[i] = (float)sf + (float)i * (float)df;
        else if (fl(t))
            kiln__store_f64(t, y, i, sf + (double)i * df);
        else
            kiln__store_i64(t, y, i, (int64_t)((uint64_t)si + (uint64_t)i * (uint64_t)di));
    }
    return cudaSuccess;
}
cudaError_t kcu_eyelike(size_t es, void *y, int64_t R, int64_t C, int64_t k, const void *one,
                        cudaStream_t s) {
    (void)s;
    for (int64_t e = 0; e < R * C; e++) {
        int64_t j = e % C, i = e / C;
        if (j == i + k)
            memcpy((char *)y + e * es, one, es);
        else
            memset((char *)y + e * es, 0, es);
    }
    return cudaSuccess;
}
