/* test_engine_metadata.c -- user metadata of engines (kiln_builder_set_metadata,
 * kiln_engine_set_metadata, kiln_engine_metadata*, src/format/meta.c): set
 * through the builder and on an engine, kept through serialize /
 * load_memory and save / load (mmap), listed by describe, the same bytes
 * every time, and an engine without metadata written exactly as before (7
 * sections). Misuse is refused; so is every kind of damaged META section
 * (sizes past the limits or the section, bad keys or values, order,
 * padding, duplicates), patched with the checksum recomputed so the checks
 * themselves are reached, and a byte-by-byte mutation of the section never
 * crashes (run it under -DKILN_SANITIZE=ON). A reader that does not know
 * META (older kilns) skips it: shown by renaming the section. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "format/format.h"
#include "format/format.h"
#include "test.h"

#define MODEL "tests/data/tiny_mlp.onnx"
#define SPEC "{\"outputs\": {\"dict\": [[\"y\", {\"t\": 0}]]}, \"note\": \"caf\xc3\xa9 \xe2\x9c\x93\"}"

static char tmpdir[64];

static kiln_engine *build(const char *const *kv, int n) {
    kiln_model *m = NULL;
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    CHECK_OK(kiln_model_load_onnx(MODEL, &m));
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_threads(b, 1));
    CHECK_OK(kiln_builder_set_tuning(b, 0));
    for (int i = 0; i < n; i++) CHECK_OK(kiln_builder_set_metadata(b, kv[2 * i], kv[2 * i + 1]));
    if (m && b) CHECK_OK(kiln_build(b, m, &e));
    kiln_builder_free(b);
    kiln_model_free(m);
    return e;
}

static unsigned char *serialize(const kiln_engine *e, size_t *size) {
    void *data = NULL;
    *size = 0;
    CHECK_OK(kiln_engine_serialize(e, &data, size));
    return data;
}

/* The section table entry `id` of a serialized engine, or NULL. */
static unsigned char *section_entry(unsigned char *p, size_t size, const char *id) {
    if (size < KILN_FORMAT_HEADER_SIZE) return NULL;
    uint32_t n = kiln__le32(p + KILN_FMT_OFF_SECTION_COUNT);
    for (uint32_t i = 0; i < n; i++) {
        unsigned char *s = p + KILN_FORMAT_HEADER_SIZE + (size_t)i * KILN_FORMAT_SECTION_ENTRY;
        if (s + KILN_FORMAT_SECTION_ENTRY > p + size) return NULL;
        if (!memcmp(s, id, 4)) return s;
    }
    return NULL;
}

static void fix_checksum(unsigned char *p, size_t size) {
    kiln__put_le64(p + KILN_FMT_OFF_CHECKSUM, kiln__format_checksum(p, size));
}

/* Checks the three entries the builder test sets: a, b.empty, python.spec. */
static void check_entries(const kiln_engine *e) {
    CHECK(kiln_engine_num_metadata(e) == 3);
    const char *k = NULL, *v = NULL;
    CHECK_OK(kiln_engine_metadata_at(e, 0, &k, &v));
    CHECK(k && v && !strcmp(k, "a") && !strcmp(v, "first"));
    CHECK_OK(kiln_engine_metadata_at(e, 1, &k, &v));
    CHECK(k && v && !strcmp(k, "b.empty") && !strcmp(v, ""));
    CHECK_OK(kiln_engine_metadata_at(e, 2, &k, NULL));
    CHECK(k && !strcmp(k, "python.spec"));
    const char *spec = kiln_engine_metadata(e, "python.spec");
    CHECK(spec && !strcmp(spec, SPEC));
    CHECK(kiln_engine_metadata(e, "missing") == NULL);
    CHECK(kiln_engine_metadata(e, "removed") == NULL);
}

/* Set in this order on the builder: "python.spec" is replaced, "removed"
 * removed again, and removing a key never set is fine. */
static const char *const KV[] = {"python.spec", "placeholder", "removed",   "x",
                                 "b.empty",     "",            "a",         "first",
                                 "python.spec", SPEC,          "removed",   NULL,
                                 "never-set",   NULL};

static kiln_engine *build_with_metadata(void) { return build(KV, 7); }

TEST(test_builder_roundtrip) {
    /* (build frees the builder: the engine has its own copy) */
    kiln_engine *e = build_with_metadata();
    if (!e) return;
    check_entries(e);

    size_t n1 = 0, n2 = 0, n3 = 0;
    unsigned char *d1 = serialize(e, &n1);
    kiln_engine *e2 = NULL;
    if (d1) CHECK_OK(kiln_engine_load_memory(d1, n1, &e2));
    if (e2) {
        check_entries(e2);
        unsigned char *d2 = serialize(e2, &n2);
        CHECK(d2 && n2 == n1 && !memcmp(d1, d2, n1)); /* the same bytes again */
        kiln_free(d2);
    }
    char path[128];
    snprintf(path, sizeof path, "%s/meta.kiln", tmpdir);
    CHECK_OK(kiln_engine_save(e, path));
    kiln_engine *e3 = NULL;
    CHECK_OK(kiln_engine_load(path, &e3));
    if (e3) {
        check_entries(e3);
        unsigned char *d3 = serialize(e3, &n3);
        CHECK(d3 && n3 == n1 && !memcmp(d1, d3, n1));
        kiln_free(d3);
    }
    /* The layout: 9 sections (SRCS among them), META last, optional (flags 0), after the weights. */
    if (d1) {
        CHECK(kiln__le32(d1 + KILN_FMT_OFF_SECTION_COUNT) == 9);
        unsigned char *s = section_entry(d1, n1, "META");
        unsigned char *w = section_entry(d1, n1, "WGTS");
        CHECK(s && s == d1 + KILN_FORMAT_HEADER_SIZE + 8 * KILN_FORMAT_SECTION_ENTRY);
        if (s && w) {
            CHECK(kiln__le32(s + 4) == 0);
            CHECK(kiln__le64(s + 24) == 3);
            CHECK(kiln__le64(s + 8) >= kiln__le64(w + 8) + kiln__le64(w + 16));
            CHECK(kiln__le64(s + 8) + kiln__le64(s + 16) == n1);
        }
    }
    unlink(path);
    kiln_free(d1);
    kiln_engine_free(e3);
    kiln_engine_free(e2);
    kiln_engine_free(e);
}

TEST(test_no_metadata_unchanged) {
    /* Without metadata the file has the sections of before (the seven
     * required ones and the optional SRCS): an older kiln reads it exactly
     * as it did. */
    kiln_engine *e = build(NULL, 0);
    if (!e) return;
    CHECK(kiln_engine_num_metadata(e) == 0);
    CHECK(kiln_engine_metadata(e, "a") == NULL);
    size_t n = 0;
    unsigned char *d = serialize(e, &n);
    if (d) {
        CHECK(kiln__le32(d + KILN_FMT_OFF_SECTION_COUNT) == 8);
        CHECK(section_entry(d, n, "META") == NULL);
    }
    CHECK(strstr(kiln_engine_describe(e, 0), "metadata") == NULL);
    CHECK(strstr(kiln_engine_describe(e, 1), "metadata") == NULL);
    kiln_free(d);
    kiln_engine_free(e);
}

TEST(test_older_reader_skips) {
    /* A kiln that does not know META skips it (optional section): renaming
     * it to an id this kiln does not know shows what such a reader does. */
    kiln_engine *e = build_with_metadata();
    if (!e) return;
    size_t n = 0;
    unsigned char *d = serialize(e, &n);
    unsigned char *s = d ? section_entry(d, n, "META") : NULL;
    CHECK(s != NULL);
    if (s) {
        memcpy(s, "XTRA", 4);
        fix_checksum(d, n);
        kiln_engine *old = NULL;
        CHECK_OK(kiln_engine_load_memory(d, n, &old));
        CHECK(old && kiln_engine_num_metadata(old) == 0);
        CHECK(old && kiln_engine_num_inputs(old) == 1);
        kiln_engine_free(old);
        /* marked required, an unknown section is refused instead */
        kiln__put_le32(s + 4, KILN_FMT_SECTION_REQUIRED);
        fix_checksum(d, n);
        CHECK_ERR(kiln_engine_load_memory(d, n, &old), KILN_ERR_FORMAT,
                  "engine file needs section 'XTRA', which this kiln does not know");
    }
    kiln_free(d);
    kiln_engine_free(e);
}

TEST(test_describe) {
    kiln_engine *e = build_with_metadata();
    if (!e) return;
    const char *t = kiln_engine_describe(e, 0);
    CHECK(strstr(t, "metadata (3):\n  a: first\n  b.empty: \n  python.spec: {\"outputs\"") != NULL);
    const char *j = kiln_engine_describe(e, 1);
    CHECK(strstr(j, "\"metadata\": {\n    \"a\": \"first\",\n    \"b.empty\": \"\",\n"
                    "    \"python.spec\": \"{\\\"outputs\\\": ") != NULL);
    /* long values are cut in text (at a character boundary), whole in JSON */
    char big[400];
    memset(big, 'v', sizeof big);
    memcpy(big + 159, "\xc3\xa9", 2); /* a 2-byte character across the 160-byte cut */
    big[sizeof big - 1] = 0;
    CHECK_OK(kiln_engine_set_metadata(e, "long", big));
    CHECK_OK(kiln_engine_set_metadata(e, "nl", "one\ntwo"));
    t = kiln_engine_describe(e, 0);
    CHECK(strstr(t, "metadata (5):") != NULL);
    CHECK(strstr(t, "  nl: one\\x0atwo\n") != NULL);
    const char *cut = strstr(t, "  long: ");
    const char *eol = cut ? strchr(cut, '\n') : NULL;
    CHECK(eol && eol - cut == 8 + 159 + 16 && !memcmp(eol - 17, "v ... (399 bytes)", 17));
    j = kiln_engine_describe(e, 1);
    CHECK(strstr(j, "\"nl\": \"one\\u000atwo\"") != NULL);
    CHECK(strstr(j, big + 200) != NULL);
    kiln_engine_free(e);
}

TEST(test_engine_set) {
    kiln_engine *e = build(NULL, 0);
    if (!e) return;
    CHECK_OK(kiln_engine_set_metadata(e, "k", "v1"));
    CHECK_OK(kiln_engine_set_metadata(e, "k", "v2")); /* replaced */
    CHECK_OK(kiln_engine_set_metadata(e, "j", "w"));
    CHECK(kiln_engine_num_metadata(e) == 2);
    size_t n = 0;
    unsigned char *d = serialize(e, &n);
    kiln_engine *e2 = NULL;
    if (d) CHECK_OK(kiln_engine_load_memory(d, n, &e2));
    if (e2) {
        const char *k = NULL;
        CHECK_OK(kiln_engine_metadata_at(e2, 0, &k, NULL));
        CHECK(k && !strcmp(k, "j")); /* key order, not the order they were set in */
        CHECK(kiln_engine_metadata(e2, "k") && !strcmp(kiln_engine_metadata(e2, "k"), "v2"));
        /* removing the last key gives back the file without metadata */
        CHECK_OK(kiln_engine_set_metadata(e2, "k", NULL));
        CHECK_OK(kiln_engine_set_metadata(e2, "j", NULL));
        CHECK(kiln_engine_num_metadata(e2) == 0);
        size_t n0 = 0, n2 = 0;
        kiln_engine *plain = build(NULL, 0);
        unsigned char *d0 = plain ? serialize(plain, &n0) : NULL;
        unsigned char *d2 = serialize(e2, &n2);
        CHECK(d2 && kiln__le32(d2 + KILN_FMT_OFF_SECTION_COUNT) == 8);
        CHECK(d0 && d2 && n0 == n2 && !memcmp(d0, d2, n0));
        kiln_free(d0);
        kiln_free(d2);
        kiln_engine_free(plain);
    }
    kiln_free(d);
    kiln_engine_free(e2);
    kiln_engine_free(e);
}

TEST(test_misuse) {
    kiln_builder *b = NULL;
    CHECK_OK(kiln_builder_create(&b));
    if (!b) return;
    CHECK_ERR(kiln_builder_set_metadata(NULL, "k", "v"), KILN_ERR_INVALID_ARGUMENT,
              "kiln_builder_set_metadata: builder is NULL");
    CHECK_ERR(kiln_builder_set_metadata(b, NULL, "v"), KILN_ERR_INVALID_ARGUMENT,
              "kiln_builder_set_metadata: the object and key must not be NULL");
    CHECK_ERR(kiln_builder_set_metadata(b, "", "v"), KILN_ERR_INVALID_ARGUMENT,
              "kiln_builder_set_metadata: metadata key is 0 bytes; keys are 1..255");
    char key[300];
    memset(key, 'k', sizeof key);
    key[256] = 0;
    CHECK_ERR(kiln_builder_set_metadata(b, key, "v"), KILN_ERR_INVALID_ARGUMENT,
              "metadata key is 256 bytes; keys are 1..255");
    key[255] = 0;
    CHECK_OK(kiln_builder_set_metadata(b, key, "v"));
    CHECK_ERR(kiln_builder_set_metadata(b, "my key", "v"), KILN_ERR_INVALID_ARGUMENT,
              "metadata key 'my...' has byte 0x20 at offset 2; keys are printable ASCII "
              "without spaces");
    CHECK_ERR(kiln_builder_set_metadata(b, "k\xc3\xa9", "v"), KILN_ERR_INVALID_ARGUMENT,
              "has byte 0xc3 at offset 1");
    CHECK_ERR(kiln_builder_set_metadata(b, "k", "bad \xff byte"), KILN_ERR_INVALID_ARGUMENT,
              "metadata value of 'k' is not valid UTF-8 (at byte 4)");
    CHECK_ERR(kiln_builder_set_metadata(b, "k", "\xc0\x80"), KILN_ERR_INVALID_ARGUMENT,
              "not valid UTF-8 (at byte 0)"); /* overlong NUL */
    CHECK_ERR(kiln_builder_set_metadata(b, "k", "\xed\xa0\x80"), KILN_ERR_INVALID_ARGUMENT,
              "not valid UTF-8 (at byte 0)"); /* a surrogate */
    CHECK_ERR(kiln_builder_set_metadata(b, "k", "\xf4\x90\x80\x80"), KILN_ERR_INVALID_ARGUMENT,
              "not valid UTF-8 (at byte 0)"); /* past U+10FFFF */
    CHECK_ERR(kiln_builder_set_metadata(b, "k", "cut \xe2\x9c"), KILN_ERR_INVALID_ARGUMENT,
              "not valid UTF-8 (at byte 4)");
    size_t big = KILN_META_VALUE_MAX + 1;
    char *v = malloc(big + 1);
    if (v) {
        memset(v, 'x', big);
        v[big] = 0;
        CHECK_ERR(kiln_builder_set_metadata(b, "k", v), KILN_ERR_INVALID_ARGUMENT,
                  "metadata value of 'k' is 16777217 bytes, more than the 16777216 allowed");
        v[big - 1] = 0; /* exactly the limit */
        CHECK_OK(kiln_builder_set_metadata(b, "k", v));
        free(v);
    }
    CHECK_OK(kiln_builder_set_metadata(b, "k", NULL));
    for (int i = 1; i < KILN_META_MAX_ENTRIES; i++) { /* the 255-byte key is one */
        char k[32];
        snprintf(k, sizeof k, "key%04d", i);
        CHECK_OK(kiln_builder_set_metadata(b, k, "v"));
    }
    CHECK_ERR(kiln_builder_set_metadata(b, "one.more", "v"), KILN_ERR_INVALID_ARGUMENT,
              "cannot add metadata key 'one.more': an engine holds at most 1024 keys");
    CHECK_OK(kiln_builder_set_metadata(b, "key0001", "replacing is fine when full"));
    kiln_builder_free(b);

    CHECK_ERR(kiln_engine_set_metadata(NULL, "k", "v"), KILN_ERR_INVALID_ARGUMENT,
              "kiln_engine_set_metadata: engine is NULL");
    CHECK(kiln_engine_metadata(NULL, "k") == NULL);
    CHECK(kiln_engine_num_metadata(NULL) == 0);
    const char *k = "x", *val = "y";
    CHECK_ERR(kiln_engine_metadata_at(NULL, 0, &k, &val), KILN_ERR_INVALID_ARGUMENT,
              "kiln_engine_metadata_at: engine is NULL");
    CHECK(k == NULL && val == NULL);
    kiln_engine *e = build(NULL, 0);
    if (e) {
        CHECK(kiln_engine_metadata(e, NULL) == NULL);
        CHECK_ERR(kiln_engine_metadata_at(e, 0, &k, &val), KILN_ERR_INVALID_ARGUMENT,
                  "kiln_engine_metadata_at: index 0 is out of range (the engine has 0 metadata "
                  "entries)");
        CHECK_ERR(kiln_engine_set_metadata(e, "bad key", "v"), KILN_ERR_INVALID_ARGUMENT,
                  "kiln_engine_set_metadata: metadata key 'bad...'");
    }
    kiln_engine_free(e);
}

TEST(test_subgraph_with_metadata) {
    /* The branches and bodies of control-flow nodes are engine files too
     * (misc_control.c); kiln writes them without metadata, but a crafted one
     * may have some: it is read, checked and freed (LeakSanitizer in the
     * sanitizer build catches a leak). */
    kiln_engine *e = build_with_metadata();
    size_t n = 0;
    unsigned char *d = e ? serialize(e, &n) : NULL;
    kiln_graph *g = NULL;
    void *blob = NULL;
    if (d) CHECK_OK(kiln__subgraph_unpack(d, n, "test subgraph", &g, &blob));
    CHECK(g && g->n_inputs == 1);
    kiln__graph_free(g);
    kiln__aligned_free(blob);
    kiln_free(d);
    kiln_engine_free(e);
}

/* ---- damaged sections -------------------------------------------------- */

/* A serialized engine whose only metadata is {"a": "x", "bb": "yy"}: two
 * 16-byte records (8 + 1 + 1 -> 16; 8 + 2 + 2 -> 16). */
static unsigned char *two_entries(size_t *n, unsigned char **meta, unsigned char **entry) {
    static const char *const kv[] = {"bb", "yy", "a", "x"};
    kiln_engine *e = build(kv, 2);
    unsigned char *d = e ? serialize(e, n) : NULL;
    kiln_engine_free(e);
    *entry = d ? section_entry(d, *n, "META") : NULL;
    *meta = *entry ? d + kiln__le64(*entry + 8) : NULL;
    CHECK(*entry && kiln__le64(*entry + 16) == 32 && kiln__le64(*entry + 24) == 2);
    if (!*entry) {
        kiln_free(d);
        return NULL;
    }
    return d;
}

typedef void (*patch_fn)(unsigned char *d, size_t n, unsigned char *meta, unsigned char *entry);

static void expect_refused(patch_fn patch, const char *message) {
    size_t n = 0;
    unsigned char *meta, *entry;
    unsigned char *d = two_entries(&n, &meta, &entry);
    if (!d) return;
    patch(d, n, meta, entry);
    fix_checksum(d, n);
    kiln_engine *e = NULL;
    kiln_status st = kiln_engine_load_memory(d, n, &e);
    if (st != KILN_ERR_FORMAT || !strstr(kiln_last_error(), message)) {
        fprintf(stderr, "  expected KILN_ERR_FORMAT with \"%s\", got %s: \"%s\"\n", message,
                kiln_status_name(st), kiln_last_error());
        test_failed_checks++;
    }
    CHECK(e == NULL);
    kiln_engine_free(e);
    kiln_free(d);
}

static void p_value_huge(unsigned char *d, size_t n, unsigned char *m, unsigned char *s) {
    (void)d, (void)n, (void)s;
    kiln__put_le32(m + 4, 0xffffffffu);
}
static void p_value_over_limit(unsigned char *d, size_t n, unsigned char *m, unsigned char *s) {
    (void)d, (void)n, (void)s;
    kiln__put_le32(m + 4, (uint32_t)KILN_META_VALUE_MAX + 1);
}
static void p_value_past_section(unsigned char *d, size_t n, unsigned char *m, unsigned char *s) {
    (void)d, (void)n, (void)s;
    kiln__put_le32(m + 16 + 4, 100); /* the second record's value */
}
static void p_key_zero(unsigned char *d, size_t n, unsigned char *m, unsigned char *s) {
    (void)d, (void)n, (void)s;
    kiln__put_le32(m, 0);
}
static void p_key_long(unsigned char *d, size_t n, unsigned char *m, unsigned char *s) {
    (void)d, (void)n, (void)s;
    kiln__put_le32(m, 256);
}
static void p_key_control(unsigned char *d, size_t n, unsigned char *m, unsigned char *s) {
    (void)d, (void)n, (void)s;
    m[8] = '\n';
}
static void p_value_utf8(unsigned char *d, size_t n, unsigned char *m, unsigned char *s) {
    (void)d, (void)n, (void)s;
    m[16 + 8 + 2 + 1] = 0xff; /* "bb": "y\xff" */
}
static void p_value_nul(unsigned char *d, size_t n, unsigned char *m, unsigned char *s) {
    (void)d, (void)n, (void)s;
    m[8 + 1] = 0; /* "a": "\0" */
}
static void p_padding(unsigned char *d, size_t n, unsigned char *m, unsigned char *s) {
    (void)d, (void)n, (void)s;
    m[15] = 1;
}
static void p_order(unsigned char *d, size_t n, unsigned char *m, unsigned char *s) {
    (void)d, (void)n, (void)s;
    m[8] = 'c'; /* "c" > "bb" */
}
static void p_duplicate(unsigned char *d, size_t n, unsigned char *m, unsigned char *s) {
    (void)d, (void)n, (void)s;
    /* the second record becomes key "a", value "byy" (the same 16 bytes) */
    kiln__put_le32(m + 16, 1);
    kiln__put_le32(m + 16 + 4, 3);
    m[16 + 8] = 'a';
}
static void p_count_high(unsigned char *d, size_t n, unsigned char *m, unsigned char *s) {
    (void)d, (void)n, (void)m;
    kiln__put_le64(s + 24, 3);
}
static void p_count_low(unsigned char *d, size_t n, unsigned char *m, unsigned char *s) {
    (void)d, (void)n, (void)m;
    kiln__put_le64(s + 24, 1);
}
static void p_count_huge(unsigned char *d, size_t n, unsigned char *m, unsigned char *s) {
    (void)d, (void)n, (void)m;
    kiln__put_le64(s + 24, UINT64_MAX);
}
static void p_size_huge(unsigned char *d, size_t n, unsigned char *m, unsigned char *s) {
    (void)d, (void)n, (void)m;
    kiln__put_le64(s + 16, UINT64_MAX - 8);
}
static void p_twice(unsigned char *d, size_t n, unsigned char *m, unsigned char *s) {
    (void)n, (void)m;
    /* the WGTS entry renamed META: two META sections (the first has
     * weights' bytes, but "twice" is found before either is parsed) */
    unsigned char *w = section_entry(d, n, "WGTS");
    if (w) memcpy(w, "META", 4);
    (void)s;
}

TEST(test_damaged_sections) {
    expect_refused(p_value_huge, "engine file is malformed: metadata entry 0: value is 4294967295 "
                                 "bytes, more than the 16777216 allowed");
    expect_refused(p_value_over_limit, "metadata entry 0: value is 16777217 bytes, more than the "
                                       "16777216 allowed");
    expect_refused(p_value_past_section, "metadata entry 1: record (2-byte key, 100-byte value) "
                                         "runs past the section (32 bytes)");
    expect_refused(p_key_zero, "metadata entry 0: key is 0 bytes; keys are 1..255");
    expect_refused(p_key_long, "metadata entry 0: key is 256 bytes; keys are 1..255");
    expect_refused(p_key_control, "metadata entry 0: key has a byte outside printable ASCII");
    expect_refused(p_value_utf8, "metadata entry 1 ('bb'): value is not valid UTF-8 (at byte 1)");
    expect_refused(p_value_nul, "metadata entry 0 ('a'): value is not valid UTF-8 (at byte 0)");
    expect_refused(p_padding, "metadata entry 0: padding is not zero");
    expect_refused(p_order, "metadata entry 1 ('bb'): keys are not in strictly ascending order");
    expect_refused(p_duplicate, "metadata entry 1 ('a'): keys are not in strictly ascending order");
    expect_refused(p_count_high, "metadata entry 2: record runs past the section (32 bytes)");
    expect_refused(p_count_low, "metadata section has 16 bytes after its last entry");
    expect_refused(p_count_huge, "metadata section has 18446744073709551615 entries; at most 1024 "
                                 "are allowed");
    expect_refused(p_size_huge, "section 'META' (offset");
    expect_refused(p_twice, "section 'META' appears twice");
}

TEST(test_mutations) {
    /* Every byte of the META section and its table entry, each set to a few
     * values, checksum fixed: loads or fails with KILN_ERR_FORMAT, never
     * anything else (ASan/UBSan builds check the memory side). */
    size_t n = 0;
    unsigned char *meta, *entry;
    unsigned char *d = two_entries(&n, &meta, &entry);
    if (!d) return;
    unsigned char *copy = malloc(n);
    static const unsigned char vals[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
    int bad_status = 0, loaded = 0, refused = 0;
    for (int region = 0; region < 2 && copy; region++) {
        unsigned char *base = region ? entry : meta;
        size_t len = region ? KILN_FORMAT_SECTION_ENTRY : 32;
        for (size_t i = 0; i < len; i++)
            for (size_t v = 0; v < sizeof vals; v++) {
                memcpy(copy, d, n);
                unsigned char *p = copy + (base - d) + i;
                if (*p == vals[v]) continue;
                *p = vals[v];
                fix_checksum(copy, n);
                kiln_engine *e = NULL;
                kiln_status st = kiln_engine_load_memory(copy, n, &e);
                if (st == KILN_OK) {
                    loaded++;
                    /* whatever loaded is consistent */
                    for (int k = 0; k < kiln_engine_num_metadata(e); k++) {
                        const char *key = NULL, *val = NULL;
                        if (kiln_engine_metadata_at(e, k, &key, &val) != KILN_OK || !key || !val ||
                            kiln_engine_metadata(e, key) != val)
                            bad_status++;
                    }
                    (void)kiln_engine_describe(e, 0);
                    (void)kiln_engine_describe(e, 1);
                } else if (st == KILN_ERR_FORMAT) {
                    refused++;
                } else {
                    bad_status++;
                    fprintf(stderr, "  byte %zu -> 0x%02x: %s: %s\n", i, vals[v],
                            kiln_status_name(st), kiln_last_error());
                }
                kiln_engine_free(e);
            }
    }
    CHECK(bad_status == 0);
    CHECK(refused > 0 && loaded > 0);
    free(copy);
    kiln_free(d);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln_meta_test_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "cannot create a temporary folder: %s\n", strerror(errno));
        return 1;
    }
    RUN(test_builder_roundtrip);
    RUN(test_no_metadata_unchanged);
    RUN(test_older_reader_skips);
    RUN(test_describe);
    RUN(test_engine_set);
    RUN(test_misuse);
    RUN(test_subgraph_with_metadata);
    RUN(test_damaged_sections);
    RUN(test_mutations);
    rmdir(tmpdir);
    return test_summary();
}
