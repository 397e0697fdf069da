/* tensor.c -- ONNX TensorProto decoding: dtypes, shapes, raw and typed
 * data fields, external data files. */
#include "onnx/onnx_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- allocator ----------------------------------------------------------- */

static void *onnx_alloc(void *data, size_t size) {
    (void)data;
    return kiln__malloc(size);
}

static void onnx_free(void *data, void *p) {
    (void)data;
    kiln__free(p);
}

void kiln__onnx_allocator(ProtobufCAllocator *a) {
    a->alloc = onnx_alloc;
    a->free = onnx_free;
    a->allocator_data = NULL;
}

/* ---- dtypes -------------------------------------------------------------- */

kiln_status kiln__onnx_dtype(int32_t t, const char *what, kiln_dtype *out) {
    switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__UNDEFINED:
        return KILN_FAIL(KILN_ERR_MODEL, "%s has no (or an UNDEFINED) data type", what);
    case ONNX__TENSOR_PROTO__DATA_TYPE__STRING:
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "%s has data type STRING, which kiln does not support", what);
    case ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX64:
    case ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX128:
        return KILN_FAIL(
            KILN_ERR_UNSUPPORTED, "%s has data type %s, which kiln does not support", what,
            t == ONNX__TENSOR_PROTO__DATA_TYPE__COMPLEX64 ? "COMPLEX64" : "COMPLEX128");
    default: break;
    }
    if (!kiln__dtype_valid(t))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "%s has ONNX data type %" PRId32 ", which kiln does not support", what, t);
    *out = (kiln_dtype)t;
    return KILN_OK;
}

/* ---- external data ------------------------------------------------------- */

/* Parses a non-negative decimal integer occupying all of s. */
static bool parse_size(const char *s, int64_t *out) {
    if (!s || !*s) return false;
    int64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return false;
        if (!kiln__mul_ok(v, 10, &v) || v > INT64_MAX - (*p - '0')) return false;
        v += *p - '0';
    }
    *out = v;
    return true;
}

/* A location must stay inside the model's folder: relative, no ".." parts. */
static bool location_safe(const char *loc) {
    if (!*loc || loc[0] == '/' || loc[0] == '\\') return false;
    if (strlen(loc) >= 2 && loc[1] == ':') return false; /* "C:..." */
    const char *p = loc;
    while (*p) {
        const char *e = p;
        while (*e && *e != '/' && *e != '\\')
            e++;
        if (e - p == 2 && p[0] == '.' && p[1] == '.') return false;
        p = *e ? e + 1 : e;
    }
    return true;
}

/* Resolves `path` (symbolic links, "." and "..") and checks that it lies in
 * the folder `base_dir` (resolved too). *real: the resolved path (free()). */
static kiln_status inside_folder(const char *base_dir, const char *path, const char *what,
                                 char **real) {
    *real = NULL;
    char *base = realpath(base_dir, NULL);
    if (!base)
        return KILN_FAIL(KILN_ERR_IO, "%s: cannot resolve the model's folder '%s': %s", what,
                         base_dir, strerror(errno));
    char *r = realpath(path, NULL);
    if (!r) {
        kiln_status s = KILN_FAIL(KILN_ERR_IO, "%s: cannot open external data file '%s': %s", what,
                                  path, strerror(errno));
        free(base);
        return s;
    }
    size_t bl = strlen(base);
    bool inside = !strcmp(base, "/") || (!strncmp(r, base, bl) && r[bl] == '/');
    if (!inside) {
        kiln_status s = KILN_FAIL(KILN_ERR_MODEL,
                                  "%s: external data file '%s' resolves to '%s', which is outside "
                                  "the model's folder '%s'; kiln reads external data only from "
                                  "inside it",
                                  what, path, r, base);
        free(base);
        free(r);
        return s;
    }
    free(base);
    *real = r;
    return KILN_OK;
}

static kiln_status read_external(const Onnx__TensorProto *t, const char *what, const char *base_dir,
                                 int64_t nbytes, void **owned) {
    const char *location = NULL;
    int64_t offset = 0, length = -1;
    for (size_t i = 0; i < t->n_external_data; i++) {
        const Onnx__StringStringEntryProto *kv = t->external_data[i];
        if (!kv->key) continue;
        if (!strcmp(kv->key, "location")) {
            location = kv->value ? kv->value : "";
        } else if (!strcmp(kv->key, "offset")) {
            if (!parse_size(kv->value, &offset))
                return KILN_FAIL(KILN_ERR_MODEL,
                                 "%s: external data offset '%s' is not a valid size", what,
                                 kv->value ? kv->value : "");
        } else if (!strcmp(kv->key, "length")) {
            if (!parse_size(kv->value, &length))
                return KILN_FAIL(KILN_ERR_MODEL,
                                 "%s: external data length '%s' is not a valid size", what,
                                 kv->value ? kv->value : "");
        }
    }
    if (!location) return KILN_FAIL(KILN_ERR_MODEL, "%s: external data without a 'location'", what);
    if (!location_safe(location))
        return KILN_FAIL(KILN_ERR_MODEL,
                         "%s: external data location '%s' is not a relative path inside the "
                         "model's folder",
                         what, location);
    if (!base_dir)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "%s: uses external data file '%s' but no base folder was given (load "
                         "the model from a file, or pass base_dir)",
                         what, location);
    if (length >= 0 && length != nbytes)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "%s: external data length %" PRId64 " does not match its shape and "
                         "dtype (%" PRId64 " bytes)",
                         what, length, nbytes);

    size_t blen = strlen(base_dir), llen = strlen(location);
    char *path = kiln__malloc(blen + llen + 2);
    if (!path) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(path, base_dir, blen);
    size_t n = blen;
    if (n && path[n - 1] != '/') path[n++] = '/';
    memcpy(path + n, location, llen + 1);

    kiln_status s = KILN_OK;
    void *buf = NULL;
    char *real = NULL;
    int fd = -1;
    int64_t fsize = 0;
    /* The file, once symbolic links are followed, must lie in the model's
     * folder (also followed): a link inside the folder may point elsewhere
     * in it, not at /etc/passwd. */
    if ((s = inside_folder(base_dir, path, what, &real)) != KILN_OK) goto done;
    if ((s = kiln__open_regular(real, "external data file", &fd, &fsize)) != KILN_OK) {
        s = kiln__fail_prefix(s, "%s: external data '%s'", what, location);
        goto done;
    }
    if (offset > fsize || nbytes > fsize - offset) {
        s = KILN_FAIL(KILN_ERR_MODEL,
                      "%s: external data file '%s' has %" PRId64 " bytes; %" PRId64
                      " bytes at offset %" PRId64 " do not fit",
                      what, path, fsize, nbytes, offset);
        goto done;
    }
    buf = kiln__malloc((size_t)nbytes);
    if (!buf) {
        s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory (%" PRId64 " bytes)", what,
                      nbytes);
        goto done;
    }
    int64_t got = 0;
    while (got < nbytes) {
        ssize_t r = pread(fd, (char *)buf + got, (size_t)(nbytes - got), (off_t)(offset + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            s = KILN_FAIL(KILN_ERR_IO, "%s: reading external data file '%s' failed: %s", what, path,
                          r < 0 ? strerror(errno) : "unexpected end of file");
            goto done;
        }
        got += r;
    }
    *owned = buf;
    buf = NULL;
done:
    if (fd >= 0) close(fd);
    kiln__free(buf);
    free(real); /* from realpath */
    kiln__free(path);
    return s;
}

/* ---- size limits ---------------------------------------------------------- */

/* A model may declare or hold tensors up to KILN_MAX_TENSOR_BYTES (core.h);
 * checked before anything is allocated. */

kiln_status kiln__onnx_check_size(const char *what, kiln_dtype dt, int rank, const int64_t *dims,
                                  int64_t *nbytes) {
    int64_t numel = 1, bytes;
    bool overflow = false;
    for (int i = 0; i < rank; i++) /* unknown and symbolic dims (< 0) are not counted */
        if (dims[i] >= 0 && !kiln__mul_ok(numel, dims[i], &numel)) overflow = true;
    int64_t esize = (int64_t)kiln_dtype_size(dt);
    if (esize < 1) esize = 1; /* dtype not declared: count elements */
    char shape[160];
    if (overflow || !kiln__mul_ok(numel, esize, &bytes))
        return KILN_FAIL(KILN_ERR_MODEL,
                         "%s: shape %s (%s) has a byte size that overflows 64 bits; refused "
                         "before allocating",
                         what, kiln__shape_str(rank, dims, shape, sizeof shape),
                         kiln_dtype_name(dt));
    if (bytes > KILN_MAX_TENSOR_BYTES)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "%s: shape %s (%s) would need %" PRId64 " bytes (%.3g TiB), more than "
                         "the 256 TiB kiln accepts for one tensor; refused before allocating",
                         what, kiln__shape_str(rank, dims, shape, sizeof shape),
                         kiln_dtype_name(dt), bytes, (double)bytes / (double)(INT64_C(1) << 40));
    if (nbytes) *nbytes = bytes;
    return KILN_OK;
}

/* ---- decoding -------------------------------------------------------------- */

static kiln_status count_mismatch(const char *what, const char *field, int64_t have, int64_t want,
                                  const kiln_tinfo *info) {
    char shape[128];
    return KILN_FAIL(KILN_ERR_MODEL,
                     "%s: %s holds %" PRId64 " values but shape %s (%s) needs %" PRId64, what,
                     field, have, kiln__shape_str(info->rank, info->dims, shape, sizeof shape),
                     kiln_dtype_name(info->dtype), want);
}

kiln_status kiln__onnx_tensor_decode(const Onnx__TensorProto *t, const char *what,
                                     const char *base_dir, kiln_tinfo *info, void **owned) {
    memset(info, 0, sizeof *info);
    *owned = NULL;
    if (!t) return KILN_FAIL(KILN_ERR_MODEL, "%s: missing tensor", what);
    kiln_dtype dt;
    KILN_TRY(kiln__onnx_dtype(t->has_data_type ? t->data_type : 0, what, &dt));
    if (t->segment)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "%s: segmented tensors are not supported", what);
    if (t->n_dims > KILN_MAX_RANK)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "%s: rank %zu exceeds kiln's maximum rank %d", what,
                         t->n_dims, KILN_MAX_RANK);
    info->dtype = dt;
    info->rank = (int)t->n_dims;
    for (size_t i = 0; i < t->n_dims; i++) {
        if (t->dims[i] < 0)
            return KILN_FAIL(KILN_ERR_MODEL, "%s: dimension %zu is negative (%" PRId64 ")", what, i,
                             t->dims[i]);
        info->dims[i] = t->dims[i];
    }
    int64_t nbytes;
    KILN_TRY(kiln__onnx_check_size(what, dt, info->rank, info->dims, &nbytes));
    int64_t numel = 1;
    for (int i = 0; i < info->rank; i++) numel *= info->dims[i]; /* no overflow: checked above */

    if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        KILN_TRY(read_external(t, what, base_dir, nbytes, owned));
        info->data = *owned;
    } else if (t->has_raw_data) {
        if ((int64_t)t->raw_data.len != nbytes) {
            char shape[128];
            return KILN_FAIL(
                KILN_ERR_MODEL, "%s: raw_data has %zu bytes but shape %s (%s) needs %" PRId64, what,
                t->raw_data.len, kiln__shape_str(info->rank, info->dims, shape, sizeof shape),
                kiln_dtype_name(dt), nbytes);
        }
        info->data = t->raw_data.data;
    } else {
        /* typed fields: the count is checked before the buffer is allocated,
         * so that a huge shape with a few values costs nothing */
        const char *field = "int32_data"; /* int32 and narrower, bool, float16, bfloat16 */
        size_t have = t->n_int32_data;
        switch (dt) {
        case KILN_DTYPE_FLOAT32: field = "float_data", have = t->n_float_data; break;
        case KILN_DTYPE_FLOAT64: field = "double_data", have = t->n_double_data; break;
        case KILN_DTYPE_INT64: field = "int64_data", have = t->n_int64_data; break;
        case KILN_DTYPE_UINT64:
        case KILN_DTYPE_UINT32: field = "uint64_data", have = t->n_uint64_data; break;
        default: break;
        }
        if ((int64_t)have != numel) return count_mismatch(what, field, (int64_t)have, numel, info);
        void *buf = kiln__malloc((size_t)nbytes);
        if (!buf)
            return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory (%" PRId64 " bytes)", what,
                             nbytes);
        switch (dt) {
        case KILN_DTYPE_FLOAT32:
            if (numel) memcpy(buf, t->float_data, (size_t)nbytes);
            break;
        case KILN_DTYPE_FLOAT64:
            if (numel) memcpy(buf, t->double_data, (size_t)nbytes);
            break;
        case KILN_DTYPE_INT64:
            if (numel) memcpy(buf, t->int64_data, (size_t)nbytes);
            break;
        case KILN_DTYPE_UINT64:
        case KILN_DTYPE_UINT32:
            if (dt == KILN_DTYPE_UINT64) {
                if (numel) memcpy(buf, t->uint64_data, (size_t)nbytes);
            } else {
                for (int64_t i = 0; i < numel; i++)
                    ((uint32_t *)buf)[i] = (uint32_t)t->uint64_data[i];
            }
            break;
        default:
            for (int64_t i = 0; i < numel; i++) {
                int32_t v = t->int32_data[i];
                switch (dt) {
                case KILN_DTYPE_INT32: ((int32_t *)buf)[i] = v; break;
                case KILN_DTYPE_INT16: ((int16_t *)buf)[i] = (int16_t)v; break;
                case KILN_DTYPE_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
                case KILN_DTYPE_UINT16:
                case KILN_DTYPE_FLOAT16:
                case KILN_DTYPE_BFLOAT16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
                case KILN_DTYPE_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
                case KILN_DTYPE_BOOL: ((uint8_t *)buf)[i] = v != 0; break;
                default: break;
                }
            }
            break;
        }
        *owned = buf;
        info->data = buf;
    }

    /* Booleans must be 0/1 bytes; normalize anything else. */
    if (dt == KILN_DTYPE_BOOL && numel > 0) {
        const uint8_t *b = info->data;
        int64_t i = 0;
        while (i < numel && b[i] <= 1)
            i++;
        if (i < numel) {
            uint8_t *nb = *owned;
            if (!nb) {
                nb = kiln__malloc((size_t)numel);
                if (!nb) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
                memcpy(nb, b, (size_t)numel);
                *owned = nb;
                info->data = nb;
            }
            for (; i < numel; i++)
                nb[i] = nb[i] != 0;
        }
    }
    return KILN_OK;
}

/* ---- standalone .pb tensors ---------------------------------------------------- */

kiln_status kiln__onnx_read_tensor_named(const void *data, size_t size, kiln_tinfo *info,
                                         void **owned_data, char **name) {
    memset(info, 0, sizeof *info);
    *owned_data = NULL;
    if (name) *name = NULL;
    if (!data && size) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "tensor bytes are NULL");
    ProtobufCAllocator alloc;
    kiln__onnx_allocator(&alloc);
    Onnx__TensorProto *t = onnx__tensor_proto__unpack(&alloc, size, data);
    if (!t) return KILN_FAIL(KILN_ERR_MODEL, "not a valid ONNX TensorProto: protobuf parse failed");

    kiln_status s;
    char what[300];
    snprintf(what, sizeof what, "tensor '%s'", t->name ? t->name : "");
    void *owned = NULL;
    s = kiln__onnx_tensor_decode(t, what, NULL, info, &owned);
    if (s == KILN_OK && !owned) { /* borrowed from t: copy out */
        size_t n = kiln_dtype_size(info->dtype);
        for (int i = 0; i < info->rank; i++)
            n *= (size_t)info->dims[i];
        owned = kiln__malloc(n);
        if (!owned) {
            s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
        } else {
            if (n) memcpy(owned, info->data, n);
            info->data = owned;
        }
    }
    if (s == KILN_OK && name) {
        *name = kiln__strdup(t->name ? t->name : "");
        if (!*name) s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (s != KILN_OK) {
        kiln__free(owned);
        memset(info, 0, sizeof *info);
        owned = NULL;
    }
    *owned_data = owned;
    onnx__tensor_proto__free_unpacked(t, &alloc);
    return s;
}

kiln_status kiln__onnx_read_tensor(const void *data, size_t size, kiln_tinfo *info,
                                   void **owned_data) {
    return kiln__onnx_read_tensor_named(data, size, info, owned_data, NULL);
}
