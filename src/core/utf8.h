/* utf8.h -- the one UTF-8 character check, header-only.
 *
 * Shared by the library (core/core.h includes it: the engine's metadata
 * values, names in JSON) and the command line (tools/kiln.c includes this
 * file alone: it links only kiln.h's API, where a helper of this kind does
 * not belong). It depends on nothing but the C library's types, so that
 * the CLI gets no other private header with it. */
#ifndef KILN_CORE_UTF8_H
#define KILN_CORE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of the one well-formed UTF-8 character at the n bytes at s (1 to
 * 4, not NUL-terminated), or 0 where n is 0 or the bytes are not UTF-8: a
 * NUL, a stray continuation byte, a lead byte cut short (by a byte that
 * does not continue it or by the end), an overlong form, a surrogate,
 * past U+10FFFF. */
static inline size_t kiln__utf8_len(const void *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    if (!n || !p[0]) return 0;
    if (p[0] < 0x80) return 1;
    size_t len = p[0] >= 0xc2 && p[0] <= 0xdf ? 2 : p[0] >= 0xe0 && p[0] <= 0xef ? 3 : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : 0;
    if (!len || len > n) return 0;
    uint32_t cp = p[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0; /* a NUL stops here too: nothing past it is read */
        cp = cp << 6 | (p[i] & 0x3f);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000}; /* shorter forms are overlong */
    if (cp < least[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

/* The same at NUL-terminated s: a character cut short by the NUL is 0. */
static inline size_t kiln__utf8_at(const char *s) {
    size_t n = 0;
    while (n < 4 && s[n]) n++;
    return kiln__utf8_len(s, n);
}

#endif
