/* npy.c -- NumPy .npy reader/writer for the kiln tools. See npy.h.
 *
 * Format (numpy.lib.format): the magic "\x93NUMPY", major and minor version
 * bytes, the header length (uint16 LE for 1.0, uint32 LE for 2.0/3.0), then the
 * header: a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and ended by '\n', then the raw data in C order.
 */
#include "npy.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ---- dtypes --------------------------------------------------------------- */

typedef struct npy_type {
    char kind;  /* 'f', 'i', 'u', 'b' */
    int size;
    kiln_dtype dtype;
    const char *descr;
} npy_type;

static const npy_type npy_types[] = {
    {'f', 2, KILN_DTYPE_FLOAT16, "<f2"}, {'f', 4, KILN_DTYPE_FLOAT32, "<f4"},
    {'f', 8, KILN_DTYPE_FLOAT64, "<f8"}, {'i', 1, KILN_DTYPE_INT8, "|i1"},
    {'i', 2, KILN_DTYPE_INT16, "<i2"},   {'i', 4, KILN_DTYPE_INT32, "<i4"},
    {'i', 8, KILN_DTYPE_INT64, "<i8"},   {'u', 1, KILN_DTYPE_UINT8, "|u1"},
    {'u', 2, KILN_DTYPE_UINT16, "<u2"},  {'u', 4, KILN_DTYPE_UINT32, "<u4"},
    {'u', 8, KILN_DTYPE_UINT64, "<u8"},  {'b', 1, KILN_DTYPE_BOOL, "|b1"},
};
#define NPY_NTYPES ((int)(sizeof npy_types / sizeof npy_types[0]))

static const npy_type *type_of_dtype(kiln_dtype t) {
    for (int i = 0; i < NPY_NTYPES; i++)
        if (npy_types[i].dtype == t) return &npy_types[i];
    return NULL;
}

const char *npy_descr(kiln_dtype dtype) {
    const npy_type *t = type_of_dtype(dtype);
    return t ? t->descr : NULL;
}

static bool host_is_big_endian(void) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return true;
#else
    return false;
#endif
}

/* Reverses the bytes of each element in place (only used on big-endian hosts). */
static void swap_bytes(void *data, int64_t numel, int size) {
    unsigned char *p = data;
    if (size <= 1) return;
    for (int64_t i = 0; i < numel; i++, p += size)
        for (int a = 0, b = size - 1; a < b; a++, b--) {
            unsigned char t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

/* Maps a descr string to a type, or explains why not. */
static const npy_type *parse_descr(const char *d, char *err, size_t errlen) {
    size_t n = strlen(d);
    char order = d[0];
    if (n == 0) {
        fail(err, errlen, "empty dtype descr");
        return NULL;
    }
    if (order != '<' && order != '>' && order != '|' && order != '=') {
        fail(err, errlen, "unsupported dtype '%s'", d);
        return NULL;
    }
    const npy_type *t = NULL;
    if (n >= 3 && n <= 4) {
        int size = 0;
        for (size_t i = 2; i < n; i++) {
            if (d[i] < '0' || d[i] > '9') {
                size = -1;
                break;
            }
            size = size * 10 + (d[i] - '0');
        }
        for (int i = 0; i < NPY_NTYPES && size > 0; i++)
            if (npy_types[i].kind == d[1] && npy_types[i].size == size) t = &npy_types[i];
    }
    if (!t) {
        fail(err, errlen,
             "unsupported dtype '%s' (supported: <f2 <f4 <f8 |i1 <i2 <i4 <i8 |u1 <u2 <u4 <u8 |b1)",
             d);
        return NULL;
    }
    if (t->size > 1) {
        if (order == '>' || (order == '=' && host_is_big_endian())) {
            fail(err, errlen, "big-endian dtype '%s' is not supported (save it as '<%c%d')", d,
                 t->kind, t->size);
            return NULL;
        }
        if (order == '|') {
            fail(err, errlen, "invalid dtype '%s' ('|' is only for 1-byte types)", d);
            return NULL;
        }
    }
    return t;
}

/* ---- header parsing --------------------------------------------------------- */

typedef struct cursor {
    const char *p, *end;
} cursor;

typedef struct header {
    const npy_type *type;
    bool fortran;
    int rank;
    int64_t dims[KILN_MAX_RANK];
} header;

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool eat(cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

static bool peek(cursor *c, char ch) {
    skip_ws(c);
    return c->p < c->end && *c->p == ch;
}

/* Reads a quoted string (no escapes) into buf. */
static int parse_string(cursor *c, char *buf, size_t cap, const char *what, char *err, size_t errlen) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return fail(err, errlen, "bad header: expected a quoted string for %s", what);
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '\\' || ch < 0x20 || ch >= 0x7f)
            return fail(err, errlen, "bad header: unexpected character 0x%02x in %s", ch, what);
        if (n + 1 >= cap) return fail(err, errlen, "bad header: %s is too long", what);
        buf[n++] = *c->p++;
    }
    if (c->p >= c->end) return fail(err, errlen, "bad header: unterminated string in %s", what);
    c->p++;
    buf[n] = '\0';
    return 0;
}

static int parse_bool(cursor *c, bool *out, char *err, size_t errlen) {
    skip_ws(c);
    size_t left = (size_t)(c->end - c->p);
    if (left >= 4 && memcmp(c->p, "True", 4) == 0) {
        c->p += 4;
        *out = true;
    } else if (left >= 5 && memcmp(c->p, "False", 5) == 0) {
        c->p += 5;
        *out = false;
    } else {
        return fail(err, errlen, "bad header: 'fortran_order' must be True or False");
    }
    return 0;
}

static int parse_dim(cursor *c, int64_t *out, char *err, size_t errlen) {
    skip_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9')
        return fail(err, errlen, "bad header: shape entries must be non-negative integers");
    int64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        int d = *c->p++ - '0';
        if (v > (INT64_MAX - d) / 10) return fail(err, errlen, "bad header: shape entry is too large");
        v = v * 10 + d;
    }
    if (c->p < c->end && *c->p == 'L') c->p++; /* Python 2 long */
    *out = v;
    return 0;
}

static int parse_shape(cursor *c, header *h, char *err, size_t errlen) {
    if (!eat(c, '(')) return fail(err, errlen, "bad header: 'shape' must be a tuple");
    int n = 0;
    bool trailing_comma = false;
    while (!peek(c, ')')) {
        int64_t v = 0;
        if (n >= KILN_MAX_RANK)
            return fail(err, errlen, "rank is over %d (kiln's maximum)", KILN_MAX_RANK);
        if (parse_dim(c, &v, err, errlen)) return -1;
        h->dims[n++] = v;
        trailing_comma = eat(c, ',');
        if (!trailing_comma && !peek(c, ')'))
            return fail(err, errlen, "bad header: expected ',' or ')' in 'shape'");
    }
    c->p++; /* ')' */
    if (n == 1 && !trailing_comma)
        return fail(err, errlen, "bad header: 'shape' is not a tuple (one entry needs a trailing comma)");
    h->rank = n;
    return 0;
}

static int parse_header_dict(const char *text, size_t len, header *h, char *err, size_t errlen) {
    cursor c = {text, text + len};
    bool have_descr = false, have_fortran = false, have_shape = false;
    memset(h, 0, sizeof *h);
    if (!eat(&c, '{')) return fail(err, errlen, "bad header: not a dict");
    while (!peek(&c, '}')) {
        char key[32];
        if (c.p >= c.end) return fail(err, errlen, "bad header: unterminated dict");
        if (parse_string(&c, key, sizeof key, "a key", err, errlen)) return -1;
        if (!eat(&c, ':')) return fail(err, errlen, "bad header: expected ':' after '%s'", key);
        if (strcmp(key, "descr") == 0) {
            char d[16];
            if (have_descr) return fail(err, errlen, "bad header: duplicate key 'descr'");
            have_descr = true;
            if (peek(&c, '[')) return fail(err, errlen, "structured dtypes are not supported");
            if (parse_string(&c, d, sizeof d, "'descr'", err, errlen)) return -1;
            h->type = parse_descr(d, err, errlen);
            if (!h->type) return -1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (have_fortran) return fail(err, errlen, "bad header: duplicate key 'fortran_order'");
            have_fortran = true;
            if (parse_bool(&c, &h->fortran, err, errlen)) return -1;
        } else if (strcmp(key, "shape") == 0) {
            if (have_shape) return fail(err, errlen, "bad header: duplicate key 'shape'");
            have_shape = true;
            if (parse_shape(&c, h, err, errlen)) return -1;
        } else {
            return fail(err, errlen, "bad header: unexpected key '%s'", key);
        }
        if (!eat(&c, ',') && !peek(&c, '}'))
            return fail(err, errlen, "bad header: expected ',' or '}' after '%s'", key);
    }
    c.p++; /* '}' */
    skip_ws(&c);
    if (c.p != c.end) return fail(err, errlen, "bad header: unexpected text after the dict");
    if (!have_descr || !have_fortran || !have_shape)
        return fail(err, errlen, "bad header: missing key '%s'",
                    !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");
    if (h->fortran)
        return fail(err, errlen, "fortran_order=True arrays are not supported (save a C-contiguous "
                                 "array, e.g. np.ascontiguousarray)");
    return 0;
}

/* Parses the preamble and header at the start of buf (avail bytes). On success
 * sets *data_offset to where the data starts. */
static int parse_preamble(const unsigned char *buf, size_t avail, header *h, size_t *data_offset,
                          char *err, size_t errlen) {
    if (avail < 8 || memcmp(buf, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
        if (avail >= NPY_MAGIC_LEN && memcmp(buf, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
            return fail(err, errlen, "not a .npy file (bad magic)");
        return fail(err, errlen, "truncated: %zu bytes is too short for a .npy file", avail);
    }
    int major = buf[6], minor = buf[7];
    if (major < 1 || major > 3 || minor != 0)
        return fail(err, errlen, "unsupported .npy format version %d.%d", major, minor);
    size_t pre = major == 1 ? 10 : 12;
    if (avail < pre) return fail(err, errlen, "truncated: header length is missing");
    size_t hlen = major == 1 ? (size_t)buf[8] | (size_t)buf[9] << 8
                             : (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 |
                                   (size_t)buf[11] << 24;
    if (hlen > NPY_MAX_HEADER)
        return fail(err, errlen, "header of %zu bytes is larger than the %d allowed", hlen,
                    NPY_MAX_HEADER);
    if (avail - pre < hlen)
        return fail(err, errlen, "truncated: header needs %zu bytes, %zu present", hlen, avail - pre);
    if (memchr(buf + pre, '\0', hlen)) return fail(err, errlen, "bad header: contains a NUL byte");
    if (parse_header_dict((const char *)buf + pre, hlen, h, err, errlen)) return -1;
    *data_offset = pre + hlen;
    return 0;
}

/* Element count and byte size of a header's array, with overflow checks. */
static int header_sizes(const header *h, int64_t *numel, size_t *nbytes, char *err, size_t errlen) {
    /* Zero dims are skipped for the overflow check (like numpy), so that strides
     * computed from the other dims cannot overflow either. */
    int64_t n = 1, nz = 1, b;
    bool empty = false;
    for (int i = 0; i < h->rank; i++) {
        if (h->dims[i] == 0) empty = true;
        else if (__builtin_mul_overflow(nz, h->dims[i], &nz))
            return fail(err, errlen, "shape is too large (element count overflows)");
    }
    if (__builtin_mul_overflow(nz, (int64_t)h->type->size, &b) || (uint64_t)b > (uint64_t)SIZE_MAX)
        return fail(err, errlen, "shape is too large (byte count overflows)");
    n = empty ? 0 : nz;
    b = empty ? 0 : b;
    *numel = n;
    *nbytes = (size_t)b;
    return 0;
}

static void shape_string(const int64_t *dims, int rank, char *buf, size_t cap) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "(");
    for (int i = 0; i < rank && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? ", " : "", dims[i]);
    if (n < cap) n += (size_t)snprintf(buf + n, cap - n, rank == 1 ? ",)" : ")");
}

static int finish_array(const header *h, npy_array *out, char *err, size_t errlen) {
    int64_t numel = 0;
    size_t nbytes = 0;
    if (header_sizes(h, &numel, &nbytes, err, errlen)) return -1;
    out->dtype = h->type->dtype;
    out->rank = h->rank;
    for (int i = 0; i < h->rank; i++) out->dims[i] = h->dims[i];
    out->numel = numel;
    out->nbytes = nbytes;
    out->data = malloc(nbytes ? nbytes : 1);
    if (!out->data) return fail(err, errlen, "out of memory (%zu bytes)", nbytes);
    return 0;
}

static void fix_data(npy_array *a) {
    if (a->dtype == KILN_DTYPE_BOOL) {
        unsigned char *p = a->data;
        for (size_t i = 0; i < a->nbytes; i++) p[i] = p[i] != 0;
    } else if (host_is_big_endian()) {
        swap_bytes(a->data, a->numel, type_of_dtype(a->dtype)->size);
    }
}

static int size_mismatch(const header *h, size_t have, char *err, size_t errlen) {
    int64_t numel = 0;
    size_t need = 0;
    char shape[256];
    if (header_sizes(h, &numel, &need, err, errlen)) return -1;
    shape_string(h->dims, h->rank, shape, sizeof shape);
    if (have < need)
        return fail(err, errlen, "truncated: shape %s of %s needs %zu data bytes, %zu present", shape,
                    h->type->descr, need, have);
    if (have > need)
        return fail(err, errlen, "%zu unexpected bytes after the data of shape %s of %s",
                    have - need, shape, h->type->descr);
    return 0;
}

int npy_parse(const void *buf, size_t size, npy_array *out, char *err, size_t errlen) {
    header h;
    size_t off;
    memset(out, 0, sizeof *out);
    if (!buf && size) return fail(err, errlen, "NULL buffer");
    if (parse_preamble(buf, size, &h, &off, err, errlen)) return -1;
    if (size_mismatch(&h, size - off, err, errlen)) return -1;
    if (finish_array(&h, out, err, errlen)) return -1;
    if (out->nbytes) memcpy(out->data, (const unsigned char *)buf + off, out->nbytes);
    fix_data(out);
    return 0;
}

void npy_free(npy_array *a) {
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

/* ---- reading files -------------------------------------------------------- */

/* Reads up to n bytes; returns the count read (short only at EOF or on error). */
static size_t read_full(FILE *f, void *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        size_t r = fread((unsigned char *)buf + got, 1, n - got, f);
        if (r == 0) break;
        got += r;
    }
    return got;
}

int npy_read(const char *path, npy_array *out, char *err, size_t errlen) {
    unsigned char pre[12];
    header h;
    size_t off;
    char msg[512];
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        int e = errno;
        fclose(f);
        return fail(err, errlen, "%s: cannot read: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        fclose(f);
        return fail(err, errlen, "%s: is a directory", path);
    }
    size_t n = read_full(f, pre, sizeof pre);
    /* Validate the preamble on what we have, then read exactly the header. */
    size_t hdr_total = 0;
    if (n >= 8 && memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) == 0 && pre[6] >= 1 && pre[6] <= 3 &&
        pre[7] == 0 && n >= (pre[6] == 1 ? 10u : 12u)) {
        size_t p = pre[6] == 1 ? 10 : 12;
        size_t hlen = pre[6] == 1 ? (size_t)pre[8] | (size_t)pre[9] << 8
                                  : (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 |
                                        (size_t)pre[11] << 24;
        if (hlen <= NPY_MAX_HEADER) hdr_total = p + hlen;
    }
    unsigned char *hbuf = NULL;
    size_t have = n;
    if (hdr_total > n) {
        hbuf = malloc(hdr_total);
        if (!hbuf) {
            fclose(f);
            return fail(err, errlen, "%s: out of memory", path);
        }
        memcpy(hbuf, pre, n);
        have = n + read_full(f, hbuf + n, hdr_total - n);
    }
    int rc = parse_preamble(hbuf ? hbuf : pre, have, &h, &off, msg, sizeof msg);
    free(hbuf);
    if (rc) {
        fclose(f);
        return fail(err, errlen, "%s: %s", path, msg);
    }
    /* `off` bytes consumed; for v2/v3 with a tiny header some of pre[] may be data. */
    size_t extra = have > off ? have - off : 0; /* data bytes already in pre[] */
    if (S_ISREG(st.st_mode)) {
        size_t fsize = (uint64_t)st.st_size > SIZE_MAX ? SIZE_MAX : (size_t)st.st_size;
        if (size_mismatch(&h, fsize >= off ? fsize - off : 0, msg, sizeof msg)) {
            fclose(f);
            return fail(err, errlen, "%s: %s", path, msg);
        }
    }
    if (finish_array(&h, out, msg, sizeof msg)) {
        fclose(f);
        return fail(err, errlen, "%s: %s", path, msg);
    }
    size_t take = extra < out->nbytes ? extra : out->nbytes;
    if (take) memcpy(out->data, pre + off, take);
    size_t got = take + read_full(f, (unsigned char *)out->data + take, out->nbytes - take);
    int trailing = (extra > take) || fgetc(f) != EOF;
    int ioerr = ferror(f);
    fclose(f);
    if (ioerr) {
        npy_free(out);
        return fail(err, errlen, "%s: read error", path);
    }
    if (got < out->nbytes || trailing) {
        size_t size = got + (trailing ? 1 : 0);
        npy_free(out);
        size_mismatch(&h, size, msg, sizeof msg);
        return fail(err, errlen, "%s: %s", path, msg);
    }
    fix_data(out);
    return 0;
}

/* ---- writing ---------------------------------------------------------------- */

/* Builds preamble + header (padded to a multiple of 64, ending in '\n'). */
static int build_header(kiln_dtype dtype, int rank, const int64_t *dims, char *buf, size_t cap,
                        size_t *len, size_t *nbytes, char *err, size_t errlen) {
    const npy_type *t = type_of_dtype(dtype);
    if (!t) return fail(err, errlen, "dtype %d cannot be stored in a .npy file", (int)dtype);
    if (rank < 0 || rank > KILN_MAX_RANK) return fail(err, errlen, "invalid rank %d", rank);
    if (rank > 0 && !dims) return fail(err, errlen, "NULL dims");
    header h = {.type = t, .rank = rank};
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0) return fail(err, errlen, "invalid dimension %" PRId64, dims[i]);
        h.dims[i] = dims[i];
    }
    int64_t numel;
    if (header_sizes(&h, &numel, nbytes, err, errlen)) return -1;
    char shape[KILN_MAX_RANK * 24 + 8];
    shape_string(dims, rank, shape, sizeof shape);
    char dict[sizeof shape + 96];
    int dn = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                      t->descr, shape);
    size_t pre = 10;
    size_t total = (pre + (size_t)dn + 1 + 63) / 64 * 64;
    if (total > cap) return fail(err, errlen, "internal: header buffer too small");
    memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
    buf[6] = 1;
    buf[7] = 0;
    size_t hlen = total - pre;
    buf[8] = (char)(hlen & 0xff);
    buf[9] = (char)(hlen >> 8);
    memcpy(buf + pre, dict, (size_t)dn);
    memset(buf + pre + dn, ' ', total - pre - (size_t)dn - 1);
    buf[total - 1] = '\n';
    *len = total;
    return 0;
}

#define NPY_HEADER_CAP 512

int npy_encode(kiln_dtype dtype, int rank, const int64_t *dims, const void *data, void **out,
               size_t *out_size, char *err, size_t errlen) {
    char hdr[NPY_HEADER_CAP];
    size_t hlen, nbytes;
    *out = NULL;
    *out_size = 0;
    if (build_header(dtype, rank, dims, hdr, sizeof hdr, &hlen, &nbytes, err, errlen)) return -1;
    if (nbytes && !data) return fail(err, errlen, "NULL data");
    if (nbytes > SIZE_MAX - hlen) return fail(err, errlen, "array too large");
    unsigned char *b = malloc(hlen + nbytes);
    if (!b) return fail(err, errlen, "out of memory");
    memcpy(b, hdr, hlen);
    if (nbytes) memcpy(b + hlen, data, nbytes);
    if (host_is_big_endian()) {
        int es = type_of_dtype(dtype)->size;
        swap_bytes(b + hlen, (int64_t)(nbytes / (size_t)es), es);
    }
    *out = b;
    *out_size = hlen + nbytes;
    return 0;
}

static int write_all(int fd, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n) {
        ssize_t w = write(fd, b, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static const char *file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

int npy_write(const char *path, kiln_dtype dtype, int rank, const int64_t *dims, const void *data,
              char *err, size_t errlen) {
    char hdr[NPY_HEADER_CAP];
    size_t hlen, nbytes;
    char msg[256];
    if (build_header(dtype, rank, dims, hdr, sizeof hdr, &hlen, &nbytes, msg, sizeof msg))
        return fail(err, errlen, "%s: %s", path, msg);
    if (nbytes && !data) return fail(err, errlen, "%s: NULL data", path);
    struct stat st;
    /* never replace a device, FIFO, socket or folder with a file */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return fail(err, errlen, "%s: exists and is %s; only regular files are replaced", path,
                    file_kind(st.st_mode));
    /* "<folder>/.npy-<16 hex>.tmp": short, so that names near the file
     * system's 255-byte limit work; in the same folder, so that the rename
     * is atomic */
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    char *tmp = malloc(dlen + 32);
    if (!tmp) return fail(err, errlen, "%s: out of memory", path);
    memcpy(tmp, path, dlen);
    int fd = -1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t r = (uint64_t)getpid() << 40 ^ (uint64_t)ts.tv_nsec << 8 ^ (uint64_t)ts.tv_sec;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull; /* a new name each attempt */
        snprintf(tmp + dlen, 32, ".npy-%016llx.tmp", (unsigned long long)r);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return fail(err, errlen, "%s: cannot create: %s", path, strerror(e));
    }
    int rc = write_all(fd, hdr, hlen);
    if (rc == 0 && nbytes) {
        int es = type_of_dtype(dtype)->size;
        if (host_is_big_endian() && es > 1) {
            void *copy = malloc(nbytes);
            if (!copy) {
                rc = -1;
                errno = ENOMEM;
            } else {
                memcpy(copy, data, nbytes);
                swap_bytes(copy, (int64_t)(nbytes / (size_t)es), es);
                rc = write_all(fd, copy, nbytes);
                free(copy);
            }
        } else {
            rc = write_all(fd, data, nbytes);
        }
    }
    int e = errno;
    if (close(fd) != 0 && rc == 0) {
        rc = -1;
        e = errno;
    }
    /* again just before the rename, which would replace what was made at
     * the path meanwhile */
    if (rc == 0 && stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        unlink(tmp);
        free(tmp);
        return fail(err, errlen, "%s: exists and is %s; only regular files are replaced", path,
                    file_kind(st.st_mode));
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = -1;
        e = errno;
    }
    if (rc != 0) {
        unlink(tmp);
        free(tmp);
        return fail(err, errlen, "%s: cannot write: %s", path, strerror(e));
    }
    free(tmp);
    return 0;
}
