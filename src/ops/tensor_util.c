/* tensor_util.c -- shared machinery of the tensor operator family: the
 * strided copy engine every layout op (Transpose, Slice, Concat, Expand,
 * Tile, DepthToSpace...) reduces to, and small infer/import helpers. */
#include "ops/tensor_internal.h"

#include <stddef.h>
#include <stdio.h>

/* ---- strided copy engine ------------------------------------------------ */

enum { TX_ROWS_CONTIG = 0, TX_ROWS_STRIDED = 1, TX_TILED = 2 };

/* Address of element `off` (may be negative: reversed slices) of `es` bytes. */
#define TX_AT(base, off, es) ((base) + (ptrdiff_t)(off) * (ptrdiff_t)(es))

#define TX_TILE 32

typedef struct tx_plan {
    int kind;
    size_t es;
    char *dst;
    const char *src;
    int orank;                           /* outer axes, iterated by counters */
    int64_t odims[KILN_TX_MAX_RANK];
    int64_t ods[KILN_TX_MAX_RANK], oss[KILN_TX_MAX_RANK];
    /* inner part */
    int64_t n, ds, ss;                   /* innermost axis (rows kinds) */
    int64_t split, piece;                /* TX_ROWS_CONTIG: pieces per row, elements per piece */
    int64_t A, dA, sB, ntA;              /* TX_TILED: rows A (src stride 1), cols n (dst stride 1) */
} tx_plan;

void kiln__tx_strides(int rank, const int64_t *dims, int64_t *st) {
    int64_t s = 1;
    for (int k = rank - 1; k >= 0; k--) {
        st[k] = s;
        s *= dims[k];
    }
}

/* Offsets (elements) of outer row `row` for both sides. */
static void tx_row_offsets(const tx_plan *p, int64_t row, int64_t *idx, int64_t *doff,
                           int64_t *soff) {
    int64_t d = 0, s = 0;
    for (int k = p->orank - 1; k >= 0; k--) {
        int64_t i = p->odims[k] ? row % p->odims[k] : 0;
        row = p->odims[k] ? row / p->odims[k] : 0;
        idx[k] = i;
        d += i * p->ods[k];
        s += i * p->oss[k];
    }
    *doff = d;
    *soff = s;
}

/* Advances the outer counter by one row, updating offsets. */
static void tx_row_next(const tx_plan *p, int64_t *idx, int64_t *doff, int64_t *soff) {
    for (int k = p->orank - 1; k >= 0; k--) {
        idx[k]++;
        *doff += p->ods[k];
        *soff += p->oss[k];
        if (idx[k] < p->odims[k]) return;
        *doff -= p->ods[k] * p->odims[k];
        *soff -= p->oss[k] * p->odims[k];
        idx[k] = 0;
    }
}

#define TX_STRIDED_LOOP(T)                                         \
    do {                                                           \
        T *d_ = (T *)dst;                                          \
        const T *s_ = (const T *)src;                              \
        if (ss == 0) {                                             \
            T v_ = s_[0];                                          \
            for (int64_t j = 0; j < n; j++) d_[j * ds] = v_;       \
        } else if (ds == 1) {                                      \
            for (int64_t j = 0; j < n; j++) d_[j] = s_[j * ss];    \
        } else {                                                   \
            for (int64_t j = 0; j < n; j++) d_[j * ds] = s_[j * ss]; \
        }                                                          \
    } while (0)

static void tx_strided_row(size_t es, char *dst, int64_t ds, const char *src, int64_t ss,
                           int64_t n) {
    switch (es) {
    case 1: TX_STRIDED_LOOP(uint8_t); break;
    case 2: TX_STRIDED_LOOP(uint16_t); break;
    case 4: TX_STRIDED_LOOP(uint32_t); break;
    case 8: TX_STRIDED_LOOP(uint64_t); break;
    default:
        for (int64_t j = 0; j < n; j++)
            memcpy(TX_AT(dst, j * ds, es), TX_AT(src, j * ss, es), es);
        break;
    }
}

/* dst[a*dA + b] = src[a + b*sB] for a in [a0,a1), b in [0,n), in tiles of
 * TX_TILE x TX_TILE; inside a tile the source is read contiguously. */
#define TX_TILE_LOOP(T)                                                                \
    do {                                                                               \
        T *d_ = (T *)dst;                                                              \
        const T *s_ = (const T *)src;                                                  \
        for (int64_t b0 = 0; b0 < n; b0 += TX_TILE) {                                  \
            int64_t b1 = b0 + TX_TILE < n ? b0 + TX_TILE : n;                          \
            for (int64_t b = b0; b < b1; b++)                                          \
                for (int64_t a = a0; a < a1; a++) d_[a * dA + b] = s_[a + b * sB];     \
        }                                                                              \
    } while (0)

static void tx_tile_block(size_t es, char *dst, int64_t dA, const char *src, int64_t sB,
                          int64_t a0, int64_t a1, int64_t n) {
    switch (es) {
    case 1: TX_TILE_LOOP(uint8_t); break;
    case 2: TX_TILE_LOOP(uint16_t); break;
    case 4: TX_TILE_LOOP(uint32_t); break;
    case 8: TX_TILE_LOOP(uint64_t); break;
    default:
        for (int64_t a = a0; a < a1; a++)
            for (int64_t b = 0; b < n; b++)
                memcpy(TX_AT(dst, a * dA + b, es), TX_AT(src, a + b * sB, es), es);
        break;
    }
}

/* Copies one contiguous row. Common small sizes use constant-size copies the
 * compiler inlines as vector moves (much faster than a libc call per row). */
static inline void tx_copy_row(char *d, const char *s, size_t n) {
    switch (n) {
    case 4: memcpy(d, s, 4); break;
    case 8: memcpy(d, s, 8); break;
    case 12: memcpy(d, s, 12); break;
    case 16: memcpy(d, s, 16); break;
    case 32: memcpy(d, s, 32); break;
    case 48: memcpy(d, s, 48); break;
    case 64: memcpy(d, s, 64); break;
    case 96: memcpy(d, s, 96); break;
    case 128: memcpy(d, s, 128); break;
    case 192: memcpy(d, s, 192); break;
    case 256: memcpy(d, s, 256); break;
    case 384: memcpy(d, s, 384); break;
    case 512: memcpy(d, s, 512); break;
    default: memcpy(d, s, n); break;
    }
}

static void tx_run(void *ctx, int64_t begin, int64_t end) {
    const tx_plan *p = (const tx_plan *)ctx;
    int64_t idx[KILN_TX_MAX_RANK];
    int64_t doff, soff;
    size_t es = p->es;
    if (begin >= end) return;
    if (p->kind == TX_ROWS_CONTIG && p->split == 1 && p->orank > 0) {
        /* whole rows: run along the innermost outer axis in a tight loop */
        int k = p->orank - 1;
        int64_t dk = p->ods[k], sk = p->oss[k], nk = p->odims[k];
        size_t rb = (size_t)p->n * es;
        tx_row_offsets(p, begin, idx, &doff, &soff);
        for (int64_t u = begin; u < end;) {
            int64_t m = nk - idx[k];
            if (m > end - u) m = end - u;
            char *d = TX_AT(p->dst, doff, es);
            const char *s = TX_AT(p->src, soff, es);
            for (int64_t j = 0; j < m; j++)
                tx_copy_row(TX_AT(d, j * dk, es), TX_AT(s, j * sk, es), rb);
            u += m;
            if (u >= end) break;
            /* idx[k] reaches nk: step back to its last value, then carry */
            idx[k] += m - 1;
            doff += (m - 1) * dk;
            soff += (m - 1) * sk;
            tx_row_next(p, idx, &doff, &soff);
        }
    } else if (p->kind == TX_ROWS_CONTIG) {
        int64_t row = begin / p->split, piece = begin % p->split;
        tx_row_offsets(p, row, idx, &doff, &soff);
        for (int64_t u = begin; u < end; u++) {
            int64_t off = piece * p->piece;
            int64_t cnt = p->n - off < p->piece ? p->n - off : p->piece;
            tx_copy_row(TX_AT(p->dst, doff + off, es), TX_AT(p->src, soff + off, es),
                        (size_t)cnt * es);
            if (++piece == p->split) {
                piece = 0;
                tx_row_next(p, idx, &doff, &soff);
            }
        }
    } else if (p->kind == TX_ROWS_STRIDED) {
        tx_row_offsets(p, begin, idx, &doff, &soff);
        for (int64_t u = begin; u < end; u++) {
            tx_strided_row(es, TX_AT(p->dst, doff, es), p->ds, TX_AT(p->src, soff, es), p->ss,
                           p->n);
            tx_row_next(p, idx, &doff, &soff);
        }
    } else {
        int64_t row = begin / p->ntA, t = begin % p->ntA;
        tx_row_offsets(p, row, idx, &doff, &soff);
        for (int64_t u = begin; u < end; u++) {
            int64_t a0 = t * TX_TILE, a1 = a0 + TX_TILE < p->A ? a0 + TX_TILE : p->A;
            tx_tile_block(es, TX_AT(p->dst, doff, es), p->dA, TX_AT(p->src, soff, es), p->sB,
                          a0, a1, p->n);
            if (++t == p->ntA) {
                t = 0;
                tx_row_next(p, idx, &doff, &soff);
            }
        }
    }
}

void kiln__tx_copy(kiln_pool *pool, size_t es, int rank, const int64_t *dims, void *dst,
                   const int64_t *dst_st, const void *src, const int64_t *src_st) {
    int64_t d[KILN_TX_MAX_RANK], ds[KILN_TX_MAX_RANK], ss[KILN_TX_MAX_RANK];
    int r = 0;
    for (int k = 0; k < rank; k++)
        if (dims[k] == 0) return;
    /* Drop unit dims, then merge axes (from the inside out). */
    for (int k = 0; k < rank; k++) {
        if (dims[k] == 1) continue;
        d[r] = dims[k];
        ds[r] = dst_st[k];
        ss[r] = src_st[k];
        r++;
    }
    if (r > 1) {
        int w = r - 1; /* write position, going outward */
        int64_t md[KILN_TX_MAX_RANK], mds[KILN_TX_MAX_RANK], mss[KILN_TX_MAX_RANK];
        md[w] = d[r - 1];
        mds[w] = ds[r - 1];
        mss[w] = ss[r - 1];
        for (int k = r - 2; k >= 0; k--) {
            if (ds[k] == mds[w] * md[w] && ss[k] == mss[w] * md[w]) {
                md[w] *= d[k];
            } else {
                w--;
                md[w] = d[k];
                mds[w] = ds[k];
                mss[w] = ss[k];
            }
        }
        r = r - w;
        memcpy(d, md + w, sizeof(int64_t) * (size_t)r);
        memcpy(ds, mds + w, sizeof(int64_t) * (size_t)r);
        memcpy(ss, mss + w, sizeof(int64_t) * (size_t)r);
    }
    if (r == 0) {
        memcpy(dst, src, es);
        return;
    }
    tx_plan p;
    memset(&p, 0, sizeof p);
    p.es = es;
    p.dst = (char *)dst;
    p.src = (const char *)src;
    p.n = d[r - 1];
    p.ds = ds[r - 1];
    p.ss = ss[r - 1];
    int64_t units, unit_bytes;
    if (p.ds == 1 && p.ss == 1) {
        p.kind = TX_ROWS_CONTIG;
        p.orank = r - 1;
        int64_t rows = 1;
        for (int k = 0; k < r - 1; k++) rows *= d[k];
        int64_t row_bytes = p.n * (int64_t)es;
        p.split = 1;
        if (pool && rows < 4 * kiln__pool_threads(pool) && row_bytes > 4 * KILN_TX_GRAIN_BYTES) {
            p.split = row_bytes / (2 * KILN_TX_GRAIN_BYTES);
            if (p.split < 1) p.split = 1;
        }
        p.piece = (p.n + p.split - 1) / p.split;
        p.split = (p.n + p.piece - 1) / p.piece;
        units = rows * p.split;
        unit_bytes = p.piece * (int64_t)es;
    } else if (r >= 2 && p.ds == 1 && ss[r - 2] == 1 && ds[r - 2] != 1 && p.n >= 4 && d[r - 2] >= 4) {
        p.kind = TX_TILED;
        p.orank = r - 2;
        p.A = d[r - 2];
        p.dA = ds[r - 2];
        p.sB = p.ss;
        p.ntA = (p.A + TX_TILE - 1) / TX_TILE;
        int64_t rows = 1;
        for (int k = 0; k < r - 2; k++) rows *= d[k];
        units = rows * p.ntA;
        unit_bytes = TX_TILE * p.n * (int64_t)es;
    } else {
        p.kind = TX_ROWS_STRIDED;
        p.orank = r - 1;
        int64_t rows = 1;
        for (int k = 0; k < r - 1; k++) rows *= d[k];
        units = rows;
        unit_bytes = p.n * (int64_t)es;
    }
    for (int k = 0; k < p.orank; k++) {
        p.odims[k] = d[k];
        p.ods[k] = ds[k];
        p.oss[k] = ss[k];
    }
    int64_t grain = unit_bytes > 0 ? KILN_TX_GRAIN_BYTES / unit_bytes : 1;
    if (grain < 1) grain = 1;
    if (!pool || units <= grain)
        tx_run(&p, 0, units);
    else
        kiln__parallel_for(pool, units, grain, tx_run, &p);
}

typedef struct tx_memcpy_ctx {
    char *dst;
    const char *src;
    size_t n, piece;
} tx_memcpy_ctx;

static void tx_memcpy_run(void *ctx, int64_t begin, int64_t end) {
    const tx_memcpy_ctx *c = (const tx_memcpy_ctx *)ctx;
    for (int64_t u = begin; u < end; u++) {
        size_t off = (size_t)u * c->piece;
        size_t cnt = c->n - off < c->piece ? c->n - off : c->piece;
        memcpy(c->dst + off, c->src + off, cnt);
    }
}

void kiln__tx_memcpy(kiln_pool *pool, void *dst, const void *src, size_t n) {
    if (n == 0 || dst == src) return;
    if (!pool || n < (size_t)(8 * KILN_TX_GRAIN_BYTES) || kiln__pool_threads(pool) < 2) {
        memcpy(dst, src, n);
        return;
    }
    tx_memcpy_ctx c = {(char *)dst, (const char *)src, n, (size_t)(2 * KILN_TX_GRAIN_BYTES)};
    kiln__parallel_for(pool, (int64_t)((n + c.piece - 1) / c.piece), 1, tx_memcpy_run, &c);
}

void kiln__tx_fill(void *dst, int64_t n, const void *val, size_t es) {
    if (n <= 0) return;
    switch (es) {
    case 1: memset(dst, *(const uint8_t *)val, (size_t)n); break;
    case 2: {
        uint16_t v;
        memcpy(&v, val, 2);
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = v;
        break;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, val, 4);
        for (int64_t i = 0; i < n; i++) ((uint32_t *)dst)[i] = v;
        break;
    }
    case 8: {
        uint64_t v;
        memcpy(&v, val, 8);
        for (int64_t i = 0; i < n; i++) ((uint64_t *)dst)[i] = v;
        break;
    }
    default:
        for (int64_t i = 0; i < n; i++) memcpy((char *)dst + (size_t)i * es, val, es);
        break;
    }
}

/* ---- dtype helpers -------------------------------------------------------- */

kiln_status kiln__tx_esize(const char *op, const char *node, kiln_dtype t, size_t *es) {
    size_t s = kiln__dtype_valid((int)t) ? kiln_dtype_size(t) : 0;
    if (s == 0)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): dtype %s is not supported",
                         node ? node : "?", op ? op : "?", kiln_dtype_name(t));
    *es = s;
    return KILN_OK;
}

bool kiln__tx_nonzero(kiln_dtype t, const void *p, int64_t i) {
    switch (t) {
    case KILN_DTYPE_FLOAT32: {
        uint32_t u;
        memcpy(&u, (const char *)p + 4 * i, 4);
        return (u & 0x7fffffffu) != 0;
    }
    case KILN_DTYPE_FLOAT64: {
        uint64_t u;
        memcpy(&u, (const char *)p + 8 * i, 8);
        return (u & 0x7fffffffffffffffull) != 0;
    }
    case KILN_DTYPE_FLOAT16: case KILN_DTYPE_BFLOAT16:
        return (((const uint16_t *)p)[i] & 0x7fffu) != 0;
    case KILN_DTYPE_BOOL: case KILN_DTYPE_UINT8: case KILN_DTYPE_INT8:
        return ((const uint8_t *)p)[i] != 0;
    case KILN_DTYPE_UINT16: case KILN_DTYPE_INT16: return ((const uint16_t *)p)[i] != 0;
    case KILN_DTYPE_UINT32: case KILN_DTYPE_INT32: return ((const uint32_t *)p)[i] != 0;
    case KILN_DTYPE_UINT64: case KILN_DTYPE_INT64: return ((const uint64_t *)p)[i] != 0;
    default: return false;
    }
}

/* ---- infer helpers ------------------------------------------------------ */

kiln_status kiln__tx_int_vector(const kiln_infer_args *a, int i, const char *what,
                                bool allow_scalar, int64_t *n) {
    const kiln_tinfo *t = i < a->n_in ? a->in[i] : NULL;
    *n = -1;
    if (!t) return KILN_TX_FAIL(KILN_ERR_MODEL, a, "input '%s' is missing", what);
    if (!kiln__dtype_is_int(t->dtype))
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "input '%s' must be an integer tensor, not %s", what,
                            kiln_dtype_name(t->dtype));
    if (t->rank < 0) return KILN_OK;
    if (t->rank == 0) {
        if (!allow_scalar)
            return KILN_TX_FAIL(KILN_ERR_MODEL, a, "input '%s' must be 1-D, not a scalar", what);
        *n = 1;
        return KILN_OK;
    }
    if (t->rank != 1)
        return KILN_TX_FAIL(KILN_ERR_MODEL, a, "input '%s' must be 1-D, not of rank %d", what,
                            t->rank);
    *n = t->dims[0] >= 0 ? t->dims[0] : -1;
    return KILN_OK;
}

kiln_status kiln__tx_merge_dim(const char *op, const char *node, int64_t a, int64_t b,
                               int64_t *out) {
    if (a >= 0 && b >= 0) {
        if (a != b)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): dimension %lld does not match %lld",
                             node ? node : "?", op ? op : "?", (long long)a, (long long)b);
        *out = a;
    } else if (a >= 0) {
        *out = a;
    } else if (b >= 0) {
        *out = b;
    } else if (KILN_DIM_IS_SYM(a)) {
        *out = a;
    } else {
        *out = b;
    }
    return KILN_OK;
}

/* ---- import helpers ----------------------------------------------------- */

kiln_status kiln__tx_validate_axis(const kiln_op_def *op, const void *attrs, const char *node) {
    return kiln__check_attr(op, node, "axis", ((const kiln_axis_attrs *)attrs)->axis,
                            -KILN_MAX_RANK, KILN_MAX_RANK - 1);
}

kiln_status kiln__tx_ints_attr_to_input(kiln_import_ctx *ic, const char *attr, int input) {
    int64_t buf[4 * KILN_MAX_RANK];
    int n = kiln_attr_ints(ic, attr, buf, (int)(sizeof buf / sizeof buf[0]));
    if (n < 0) return KILN_OK;
    if (n > (int)(sizeof buf / sizeof buf[0]))
        return KILN_IMPORT_FAIL(ic, "attribute '%s' has %d values (at most %d supported)", attr, n,
                                (int)(sizeof buf / sizeof buf[0]));
    int64_t dims[1] = {n};
    return kiln_import_set_const_input(ic, input, KILN_DTYPE_INT64, 1, dims, buf);
}
