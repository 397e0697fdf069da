/* meta.c -- user metadata of an engine (meta.h) and its "META" section:
 *
 *     count records, each:
 *       0  u32  key_size   (1..255)
 *       4  u32  value_size (0..16 MiB)
 *       8  u8[key_size]    key (printable ASCII, no space)
 *          u8[value_size]  value (UTF-8, no NUL)
 *          zero padding to a multiple of 8 bytes
 *     keys strictly ascending (bytewise); the records fill the section. */
#include "format/meta.h"
#include "format/format.h"


/* Offset of the first byte that breaks the value rules, or n when none does. */
static size_t value_bad_at(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t k = kiln__utf8_len(s + i, n - i);
        if (!k) return i;
        i += k;
    }
    return n;
}

/* Offset of the first byte that breaks the key rules, or n when none does. */
static size_t key_bad_at(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] <= 0x20 || s[i] >= 0x7f) return i;
    return n;
}

/* Bytewise comparison of a stored key with a[0..an). */
static int key_cmp(const char *stored, const unsigned char *a, size_t an) {
    size_t sn = strlen(stored);
    int c = memcmp(stored, a, sn < an ? sn : an);
    if (c) return c;
    return sn < an ? -1 : sn > an;
}

/* Index of key in m, or -(insertion point) - 1. */
static int find(const kiln_meta *m, const unsigned char *key, size_t n) {
    int lo = 0, hi = m->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int c = key_cmp(m->items[mid].key, key, n);
        if (c == 0) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -lo - 1;
}

static char *copy_bytes(const void *s, size_t n) {
    char *d = kiln__malloc(n + 1);
    if (d) {
        if (n) memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* Inserts (key, value) at position `at`; takes ownership of both on success. */
static kiln_status insert(kiln_meta *m, int at, char *key, char *value, size_t value_len) {
    void *items = m->items;
    kiln_status st = kiln__grow(&items, &m->cap, m->n + 1, sizeof *m->items);
    m->items = items;
    if (st != KILN_OK) return st;
    memmove(m->items + at + 1, m->items + at, (size_t)(m->n - at) * sizeof *m->items);
    m->items[at] = (kiln_meta_entry){key, value, value_len};
    m->n++;
    return KILN_OK;
}

kiln_status kiln__meta_set(kiln_meta *m, const char *key, const char *value, const char *fn) {
    if (!m || !key)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "%s: the object and key must not be NULL", fn);
    size_t kn = strlen(key);
    if (kn == 0 || kn > KILN_META_KEY_MAX)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "%s: metadata key is %zu bytes; keys are 1..%d",
                         fn, kn, KILN_META_KEY_MAX);
    size_t bad = key_bad_at((const unsigned char *)key, kn);
    if (bad < kn)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "%s: metadata key '%.*s...' has byte 0x%02x at offset %zu; keys are "
                         "printable ASCII without spaces",
                         fn, (int)bad, key, (unsigned char)key[bad], bad);
    int at = find(m, (const unsigned char *)key, kn);
    if (!value) {
        if (at >= 0) {
            kiln__free(m->items[at].key);
            kiln__free(m->items[at].value);
            memmove(m->items + at, m->items + at + 1, (size_t)(m->n - at - 1) * sizeof *m->items);
            m->n--;
        }
        return KILN_OK;
    }
    size_t vn = strlen(value);
    if (vn > KILN_META_VALUE_MAX)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "%s: metadata value of '%s' is %zu bytes, more than the %zu allowed", fn,
                         key, vn, KILN_META_VALUE_MAX);
    bad = value_bad_at((const unsigned char *)value, vn);
    if (bad < vn)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "%s: metadata value of '%s' is not valid UTF-8 (at byte %zu)", fn, key,
                         bad);
    if (at < 0 && m->n >= KILN_META_MAX_ENTRIES)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "%s: cannot add metadata key '%s': an engine holds at most %d keys", fn,
                         key, KILN_META_MAX_ENTRIES);
    char *v = copy_bytes(value, vn);
    if (!v) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory (%zu bytes)", fn, vn);
    if (at >= 0) {
        kiln__free(m->items[at].value);
        m->items[at].value = v;
        m->items[at].value_len = vn;
        return KILN_OK;
    }
    char *k = copy_bytes(key, kn);
    kiln_status st = k ? insert(m, -at - 1, k, v, vn)
                       : KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    if (st != KILN_OK) {
        kiln__free(k);
        kiln__free(v);
    }
    return st;
}

const char *kiln__meta_get(const kiln_meta *m, const char *key) {
    if (!m || !key) return NULL;
    int at = find(m, (const unsigned char *)key, strlen(key));
    return at >= 0 ? m->items[at].value : NULL;
}

void kiln__meta_clear(kiln_meta *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++) {
        kiln__free(m->items[i].key);
        kiln__free(m->items[i].value);
    }
    kiln__free(m->items);
    memset(m, 0, sizeof *m);
}

kiln_status kiln__meta_copy(kiln_meta *dst, const kiln_meta *src) {
    for (int i = 0; src && i < src->n; i++) {
        const kiln_meta_entry *s = &src->items[i];
        char *k = copy_bytes(s->key, strlen(s->key)), *v = copy_bytes(s->value, s->value_len);
        kiln_status st = k && v ? insert(dst, dst->n, k, v, s->value_len)
                                : KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory copying metadata");
        if (st != KILN_OK) {
            kiln__free(k);
            kiln__free(v);
            kiln__meta_clear(dst);
            return st;
        }
    }
    return KILN_OK;
}

/* ---- the section ------------------------------------------------------- */

static uint64_t record_size(uint64_t key_size, uint64_t value_size) {
    return (KILN_FMT_META_RECORD + key_size + value_size + 7) & ~(uint64_t)7;
}

bool kiln__meta_size(const kiln_meta *m, uint64_t *size) {
    uint64_t total = 0;
    for (int i = 0; m && i < m->n; i++)
        if (__builtin_add_overflow(total, record_size(strlen(m->items[i].key), m->items[i].value_len),
                                   &total))
            return false;
    *size = total;
    return true;
}

void kiln__meta_write(const kiln_meta *m, unsigned char *dst) {
    for (int i = 0; m && i < m->n; i++) {
        const kiln_meta_entry *e = &m->items[i];
        size_t kn = strlen(e->key);
        kiln__put_le32(dst, (uint32_t)kn);
        kiln__put_le32(dst + 4, (uint32_t)e->value_len);
        memcpy(dst + KILN_FMT_META_RECORD, e->key, kn);
        if (e->value_len) memcpy(dst + KILN_FMT_META_RECORD + kn, e->value, e->value_len);
        dst += record_size(kn, e->value_len);
    }
}

/* Callers prefix "engine file is malformed" (read.c). */
#define BAD_META(fmt, ...) KILN_FAIL(KILN_ERR_FORMAT, "metadata " fmt, __VA_ARGS__)

static kiln_status read_records(const unsigned char *p, uint64_t size, uint64_t count,
                                kiln_meta *out) {
    if (count > KILN_META_MAX_ENTRIES)
        return BAD_META("section has %llu entries; at most %d are allowed",
                        (unsigned long long)count, KILN_META_MAX_ENTRIES);
    uint64_t pos = 0;
    for (uint64_t i = 0; i < count; i++) {
        if (size - pos < KILN_FMT_META_RECORD)
            return BAD_META("entry %llu: record runs past the section (%llu bytes)",
                            (unsigned long long)i, (unsigned long long)size);
        const unsigned char *q = p + pos;
        uint32_t kn = kiln__le32(q), vn = kiln__le32(q + 4);
        if (kn == 0 || kn > KILN_META_KEY_MAX)
            return BAD_META("entry %llu: key is %u bytes; keys are 1..%d", (unsigned long long)i,
                            kn, KILN_META_KEY_MAX);
        if (vn > KILN_META_VALUE_MAX)
            return BAD_META("entry %llu: value is %u bytes, more than the %zu allowed",
                            (unsigned long long)i, vn, KILN_META_VALUE_MAX);
        uint64_t rec = record_size(kn, vn);
        if (rec > size - pos)
            return BAD_META("entry %llu: record (%u-byte key, %u-byte value) runs past the "
                            "section (%llu bytes)",
                            (unsigned long long)i, kn, vn, (unsigned long long)size);
        const unsigned char *key = q + KILN_FMT_META_RECORD, *value = key + kn;
        if (key_bad_at(key, kn) < kn)
            return BAD_META("entry %llu: key has a byte outside printable ASCII",
                            (unsigned long long)i);
        size_t vbad = value_bad_at(value, vn);
        if (vbad < vn)
            return BAD_META("entry %llu ('%.*s'): value is not valid UTF-8 (at byte %zu)",
                            (unsigned long long)i, (int)kn, (const char *)key, vbad);
        for (uint64_t z = KILN_FMT_META_RECORD + (uint64_t)kn + vn; z < rec; z++)
            if (q[z]) return BAD_META("entry %llu: padding is not zero", (unsigned long long)i);
        if (out->n && key_cmp(out->items[out->n - 1].key, key, kn) >= 0)
            return BAD_META("entry %llu ('%.*s'): keys are not in strictly ascending order",
                            (unsigned long long)i, (int)kn, (const char *)key);
        char *k = copy_bytes(key, kn), *v = copy_bytes(value, vn);
        kiln_status st = k && v ? insert(out, out->n, k, v, vn)
                                : KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory reading metadata");
        if (st != KILN_OK) {
            kiln__free(k);
            kiln__free(v);
            return st;
        }
        pos += rec;
    }
    if (pos != size)
        return BAD_META("section has %llu bytes after its last entry",
                        (unsigned long long)(size - pos));
    return KILN_OK;
}

kiln_status kiln__meta_read(const unsigned char *p, uint64_t size, uint64_t count, kiln_meta *out) {
    kiln_status st = read_records(p, size, count, out);
    if (st != KILN_OK) kiln__meta_clear(out);
    return st;
}
