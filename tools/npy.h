/* npy.h -- reading and writing NumPy .npy files (format versions 1.0, 2.0, 3.0).
 *
 * Supported: little-endian (or byte-order-free) plain dtypes <f2 <f4 <f8 |i1 <i2
 * <i4 <i8 |u1 <u2 <u4 <u8 |b1, C order, rank 0..KILN_MAX_RANK. Anything else
 * (fortran_order True, big-endian, structured/object/complex dtypes, rank over
 * KILN_MAX_RANK, data that does not match the shape) is refused with a message.
 *
 * Headers are parsed as untrusted input: every length is bounds-checked, the
 * element count is checked for overflow and against the bytes actually present
 * before anything is allocated, and the header size is capped (NPY_MAX_HEADER).
 *
 * Errors: functions return 0 on success and -1 on failure, writing a message
 * (without a trailing newline) into `err` (of `errlen` bytes; may be NULL). No
 * global state; every function is thread-safe.
 */
#ifndef KILN_TOOLS_NPY_H
#define KILN_TOOLS_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "kiln.h"

#define NPY_MAX_HEADER (1 << 16) /* larger headers are refused */

typedef struct npy_array {
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_RANK];
    int64_t numel;
    size_t nbytes;
    void *data; /* malloc'ed (NULL only if nbytes == 0); owned, released by npy_free */
} npy_array;

/* Parses a whole .npy file image. On success *out owns a copy of the data. */
int npy_parse(const void *buf, size_t size, npy_array *out, char *err, size_t errlen);
/* Reads `path`. Messages start with the path. */
int npy_read(const char *path, npy_array *out, char *err, size_t errlen);
/* Encodes an array as a .npy image (version 1.0, or 2.0 if the header needs it)
 * into a new malloc'ed buffer (*data, *size), which the caller frees with free(). */
int npy_encode(kiln_dtype dtype, int rank, const int64_t *dims, const void *data, void **out,
               size_t *out_size, char *err, size_t errlen);
/* Writes an array to `path` atomically: a temporary file with a short name in the
 * same folder, then rename. Refuses a path that exists and is not a regular file
 * (a device, FIFO, socket or folder is never replaced). */
int npy_write(const char *path, kiln_dtype dtype, int rank, const int64_t *dims, const void *data,
              char *err, size_t errlen);
/* Releases a->data and zeroes *a. Accepts NULL. */
void npy_free(npy_array *a);
/* The numpy descr of a dtype ("<f4"), or NULL if .npy cannot hold it. */
const char *npy_descr(kiln_dtype dtype);

#endif /* KILN_TOOLS_NPY_H */
