/* meta.h -- user metadata of an engine: key/value strings that travel
 * inside the engine file, in the optional "META" section (format.h,
 * docs/engine-format.md). kiln itself never reads them; front ends keep
 * what they know about the model there (the Python package: the output
 * structure of the converted method).
 *
 * Keys are 1..KILN_META_KEY_MAX bytes of printable ASCII other than space
 * ('!'..'~'); values are 0..KILN_META_VALUE_MAX bytes of UTF-8 without NUL.
 * At most KILN_META_MAX_ENTRIES entries, kept sorted by key (bytewise), so
 * that the section's bytes depend only on the set of entries. */
#ifndef KILN_FORMAT_META_H
#define KILN_FORMAT_META_H

#include "runtime/engine.h" /* kiln_meta */

#define KILN_META_KEY_MAX 255
#define KILN_META_VALUE_MAX ((size_t)16 << 20) /* 16 MiB */
#define KILN_META_MAX_ENTRIES 1024
#define KILN_FMT_META_ID "META"
#define KILN_FMT_META_RECORD 8 /* u32 key_size, u32 value_size; then the bytes */

/* Sets key to value (a copy), or removes key when value is NULL. Fails with
 * KILN_ERR_INVALID_ARGUMENT (message starting with `fn`) for a key or value
 * outside the rules above, or when the table is full. */
KILN_PRIVATE kiln_status kiln__meta_set(kiln_meta *m, const char *key, const char *value,
                                        const char *fn);
/* The value of key, or NULL. */
KILN_PRIVATE const char *kiln__meta_get(const kiln_meta *m, const char *key);
/* dst (empty) becomes a copy of src. */
KILN_PRIVATE kiln_status kiln__meta_copy(kiln_meta *dst, const kiln_meta *src);
KILN_PRIVATE void kiln__meta_clear(kiln_meta *m);

/* Bytes of the META section for m (0: no entries, no section); false when it
 * does not fit in 64 bits. */
KILN_PRIVATE bool kiln__meta_size(const kiln_meta *m, uint64_t *size);
/* Writes the section (kiln__meta_size bytes, zeroed beforehand) at dst. */
KILN_PRIVATE void kiln__meta_write(const kiln_meta *m, unsigned char *dst);
/* Parses a META section of `size` bytes holding `count` records into out
 * (empty). Checks everything: record bounds, sizes against the limits, key
 * and value rules, strictly ascending keys, zero padding, no bytes after the
 * last record. Fails with KILN_ERR_FORMAT ("metadata entry 2: ...") or
 * KILN_ERR_OUT_OF_MEMORY; out is left empty then. */
KILN_PRIVATE kiln_status kiln__meta_read(const unsigned char *p, uint64_t size, uint64_t count,
                                         kiln_meta *out);

#endif
