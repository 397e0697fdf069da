/* test_npy.c -- tests of the .npy reader/writer used by the kiln tools
 * (tools/npy.c, compiled into this program). Prints "N passed, M failed". */
#include "../../tools/npy.c"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tally {
    int passed, failed;
} tally;

#define CHECK(t, cond, ...)                                   \
    do {                                                      \
        if (cond) {                                           \
            (t)->passed++;                                    \
        } else {                                              \
            (t)->failed++;                                    \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);       \
            printf(__VA_ARGS__);                              \
            printf("\n");                                     \
        }                                                     \
    } while (0)

static const kiln_dtype all_dtypes[] = {
    KILN_DTYPE_FLOAT16, KILN_DTYPE_FLOAT32, KILN_DTYPE_FLOAT64, KILN_DTYPE_INT8,
    KILN_DTYPE_INT16,   KILN_DTYPE_INT32,   KILN_DTYPE_INT64,   KILN_DTYPE_UINT8,
    KILN_DTYPE_UINT16,  KILN_DTYPE_UINT32,  KILN_DTYPE_UINT64,  KILN_DTYPE_BOOL,
};
#define N_DTYPES ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

static size_t esize(kiln_dtype t) { return (size_t)type_of_dtype(t)->size; }

/* Builds a .npy image from a header dict text (padded like numpy does unless raw). */
static unsigned char *make_file(int major, const char *dict, const void *data, size_t nbytes,
                                size_t *size) {
    size_t pre = major == 1 ? 10 : 12;
    size_t dn = strlen(dict);
    size_t total = (pre + dn + 1 + 63) / 64 * 64;
    unsigned char *b = calloc(1, total + nbytes + 1);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = 0;
    size_t hlen = total - pre;
    b[8] = (unsigned char)(hlen & 0xff);
    b[9] = (unsigned char)(hlen >> 8);
    if (major != 1) {
        b[10] = (unsigned char)(hlen >> 16);
        b[11] = (unsigned char)(hlen >> 24);
    }
    memcpy(b + pre, dict, dn);
    memset(b + pre + dn, ' ', total - pre - dn - 1);
    b[total - 1] = '\n';
    if (nbytes) memcpy(b + total, data, nbytes);
    *size = total + nbytes;
    return b;
}

static void expect_fail(tally *t, const void *buf, size_t size, const char *needle, const char *what) {
    npy_array a;
    char err[512] = "";
    int rc = npy_parse(buf, size, &a, err, sizeof err);
    CHECK(t, rc != 0, "%s: parsed but should fail", what);
    CHECK(t, rc != 0 && err[0] != '\0', "%s: no message", what);
    if (needle) CHECK(t, strstr(err, needle) != NULL, "%s: message '%s' lacks '%s'", what, err, needle);
    CHECK(t, a.data == NULL, "%s: data left allocated on failure", what);
    if (rc == 0) npy_free(&a);
}

static void expect_dict_fail(tally *t, const char *dict, size_t nbytes, const char *needle) {
    size_t size;
    unsigned char *data = calloc(1, nbytes + 1);
    unsigned char *b = make_file(1, dict, data, nbytes, &size);
    expect_fail(t, b, size, needle, dict);
    free(b);
    free(data);
}

static void fill(void *data, size_t nbytes, kiln_dtype dt, unsigned seed) {
    unsigned char *p = data;
    for (size_t i = 0; i < nbytes; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (unsigned char)(seed >> 16);
        if (dt == KILN_DTYPE_BOOL) p[i] &= 1;
    }
}

static void test_round_trips(tally *t, const char *tmpdir) {
    static const int64_t shapes[][KILN_MAX_RANK] = {
        {0}, {0}, {7}, {2, 3}, {2, 0, 4}, {1, 2, 3, 2, 1, 2, 1, 3},
    };
    static const int ranks[] = {0, 1, 1, 2, 3, 8};
    char path[1024];
    for (int d = 0; d < N_DTYPES; d++) {
        for (int s = 0; s < (int)(sizeof ranks / sizeof ranks[0]); s++) {
            kiln_dtype dt = all_dtypes[d];
            int rank = ranks[s];
            int64_t numel = 1;
            for (int i = 0; i < rank; i++) numel *= shapes[s][i];
            size_t nbytes = (size_t)numel * esize(dt);
            void *data = malloc(nbytes + 1);
            fill(data, nbytes, dt, (unsigned)(d * 31 + s));
            char err[512] = "";
            void *img;
            size_t isz;
            int rc = npy_encode(dt, rank, shapes[s], data, &img, &isz, err, sizeof err);
            CHECK(t, rc == 0, "encode %s rank %d: %s", npy_descr(dt), rank, err);
            if (rc) {
                free(data);
                continue;
            }
            size_t hdr = isz - nbytes;
            CHECK(t, hdr % 64 == 0 && ((char *)img)[hdr - 1] == '\n', "header alignment %zu", hdr);
            npy_array a;
            rc = npy_parse(img, isz, &a, err, sizeof err);
            CHECK(t, rc == 0, "parse %s rank %d: %s", npy_descr(dt), rank, err);
            if (rc == 0) {
                bool same = a.dtype == dt && a.rank == rank && a.numel == numel && a.nbytes == nbytes &&
                            a.data != NULL && memcmp(a.data, data, nbytes) == 0;
                for (int i = 0; i < rank; i++) same = same && a.dims[i] == shapes[s][i];
                CHECK(t, same, "memory round trip %s rank %d differs", npy_descr(dt), rank);
                npy_free(&a);
            }
            free(img);
            snprintf(path, sizeof path, "%s/a_%d_%d.npy", tmpdir, d, s);
            rc = npy_write(path, dt, rank, shapes[s], data, err, sizeof err);
            CHECK(t, rc == 0, "write %s: %s", path, err);
            rc = npy_read(path, &a, err, sizeof err);
            CHECK(t, rc == 0, "read %s: %s", path, err);
            if (rc == 0) {
                bool same = a.dtype == dt && a.rank == rank && a.nbytes == nbytes &&
                            memcmp(a.data, data, nbytes) == 0;
                for (int i = 0; i < rank; i++) same = same && a.dims[i] == shapes[s][i];
                CHECK(t, same, "file round trip %s rank %d differs", npy_descr(dt), rank);
                npy_free(&a);
            }
            free(data);
        }
    }
}

/* Files as numpy writes them (headers typed from numpy 1.24's output). */
static void test_numpy_files(tally *t) {
    float f[6] = {0, 1, 2, 3, 4, 5};
    size_t size;
    npy_array a;
    char err[512];
    for (int major = 1; major <= 3; major++) {
        unsigned char *b =
            make_file(major, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f, sizeof f, &size);
        int rc = npy_parse(b, size, &a, err, sizeof err);
        CHECK(t, rc == 0, "v%d: %s", major, err);
        if (rc == 0) {
            CHECK(t, a.dtype == KILN_DTYPE_FLOAT32 && a.rank == 2 && a.dims[0] == 2 && a.dims[1] == 3 &&
                         memcmp(a.data, f, sizeof f) == 0, "v%d contents", major);
            npy_free(&a);
        }
        free(b);
    }
    double x = 3.5;
    unsigned char *b = make_file(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }", &x, 8, &size);
    int rc = npy_parse(b, size, &a, err, sizeof err);
    CHECK(t, rc == 0 && a.rank == 0 && a.numel == 1 && *(double *)a.data == 3.5, "0-d f8: %s", err);
    if (rc == 0) npy_free(&a);
    free(b);
    b = make_file(1, "{'descr': '<i2', 'fortran_order': False, 'shape': (0, 3), }", NULL, 0, &size);
    rc = npy_parse(b, size, &a, err, sizeof err);
    CHECK(t, rc == 0 && a.rank == 2 && a.numel == 0 && a.nbytes == 0 && a.data != NULL, "empty i2: %s", err);
    if (rc == 0) npy_free(&a);
    free(b);
    /* Variations a Python-literal parser must accept. */
    static const char *ok[] = {
        "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (6,)}",
        "{'shape': (6,), 'fortran_order': False, 'descr': '<f4'}",
        "{'descr':'=f4','fortran_order':False,'shape':(6L,),}",
        "{ 'descr' : '<f4' ,\n 'fortran_order' : False , 'shape' : ( 2 , 3 ) , }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 6, 1, 1), }",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        b = make_file(1, ok[i], f, sizeof f, &size);
        rc = npy_parse(b, size, &a, err, sizeof err);
        CHECK(t, rc == 0 && a.numel == 6 && a.dtype == KILN_DTYPE_FLOAT32, "accept %s: %s", ok[i], err);
        if (rc == 0) npy_free(&a);
        free(b);
    }
    /* 1-byte types with any byte order mark; bool values normalised to 0/1. */
    unsigned char u[3] = {0, 7, 1};
    static const char *one[] = {"<u1", "|u1", ">u1", "=u1"};
    for (size_t i = 0; i < 4; i++) {
        char dict[128];
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (3,), }", one[i]);
        b = make_file(1, dict, u, 3, &size);
        rc = npy_parse(b, size, &a, err, sizeof err);
        CHECK(t, rc == 0 && a.dtype == KILN_DTYPE_UINT8, "accept %s: %s", one[i], err);
        if (rc == 0) npy_free(&a);
        free(b);
    }
    b = make_file(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", u, 3, &size);
    rc = npy_parse(b, size, &a, err, sizeof err);
    CHECK(t, rc == 0 && ((unsigned char *)a.data)[1] == 1 && ((unsigned char *)a.data)[0] == 0,
          "bool normalised: %s", err);
    if (rc == 0) npy_free(&a);
    free(b);
}

static void test_malformed(tally *t) {
    float f[6] = {0, 1, 2, 3, 4, 5};
    size_t size;
    /* Truncated at every length, for each format version. */
    for (int major = 1; major <= 3; major++) {
        unsigned char *b =
            make_file(major, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f, sizeof f, &size);
        int bad = 0;
        for (size_t n = 0; n < size; n++) {
            npy_array a;
            char err[256] = "";
            unsigned char *copy = malloc(n ? n : 1); /* exact-size copy so ASan sees overreads */
            memcpy(copy, b, n);
            if (npy_parse(copy, n, &a, err, sizeof err) == 0) {
                bad++;
                npy_free(&a);
            } else if (!strstr(err, "truncated")) {
                bad++;
                printf("  truncated at %zu: message '%s'\n", n, err);
            }
            free(copy);
        }
        CHECK(t, bad == 0, "v%d: %d truncations accepted or not called 'truncated'", major, bad);
        /* One byte too many. */
        unsigned char *longer = malloc(size + 1);
        memcpy(longer, b, size);
        longer[size] = 0;
        expect_fail(t, longer, size + 1, "unexpected bytes", "trailing byte");
        free(longer);
        free(b);
    }
    unsigned char *b =
        make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f, sizeof f, &size);
    unsigned char *c = malloc(size);
    memcpy(c, b, size);
    c[0] = 'X';
    expect_fail(t, c, size, "magic", "bad magic");
    memcpy(c, b, size);
    c[3] = 'n';
    expect_fail(t, c, size, "magic", "bad magic 2");
    memcpy(c, b, size);
    c[6] = 4;
    expect_fail(t, c, size, "version", "version 4.0");
    memcpy(c, b, size);
    c[7] = 1;
    expect_fail(t, c, size, "version", "version 1.1");
    memcpy(c, b, size);
    c[8] = 0xff;
    c[9] = 0xff; /* header longer than the file */
    expect_fail(t, c, size, "truncated", "header length past end");
    memcpy(c, b, size);
    c[8] = 0;
    c[9] = 0; /* empty header */
    expect_fail(t, c, size, "bad header", "empty header");
    memcpy(c, b, size);
    c[20] = '\0';
    expect_fail(t, c, size, "NUL", "NUL in header");
    free(c);
    free(b);
    /* v2 header length of 4 GiB - 1. */
    unsigned char big[16] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0xff, 0xff, 0xff, 0xff, '{', '}', ' ', '\n'};
    expect_fail(t, big, sizeof big, "larger than", "huge v2 header length");
    expect_fail(t, "", 0, "truncated", "empty file");

    /* Bad dicts (data of 24 bytes = 6 floats where a shape is valid). */
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24, "fortran_order");
    expect_dict_fail(t, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24, "big-endian");
    expect_dict_fail(t, "{'descr': '>i8', 'fortran_order': False, 'shape': (3,), }", 24, "big-endian");
    expect_dict_fail(t, "{'descr': '|f4', 'fortran_order': False, 'shape': (2, 3), }", 24, "|");
    expect_dict_fail(t, "{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", 24, "unsupported dtype");
    expect_dict_fail(t, "{'descr': '<U3', 'fortran_order': False, 'shape': (2,), }", 24, "unsupported dtype");
    expect_dict_fail(t, "{'descr': '|O', 'fortran_order': False, 'shape': (3,), }", 24, "unsupported dtype");
    expect_dict_fail(t, "{'descr': '<f16', 'fortran_order': False, 'shape': (3,), }", 48, "unsupported dtype");
    expect_dict_fail(t, "{'descr': '<f4x', 'fortran_order': False, 'shape': (6,), }", 24, "unsupported dtype");
    expect_dict_fail(t, "{'descr': 'f4', 'fortran_order': False, 'shape': (6,), }", 24, "unsupported dtype");
    expect_dict_fail(t, "{'descr': '', 'fortran_order': False, 'shape': (6,), }", 24, "descr");
    expect_dict_fail(t, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,), }", 24, "structured");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False}", 24, "missing key 'shape'");
    expect_dict_fail(t, "{'fortran_order': False, 'shape': (6,)}", 24, "missing key 'descr'");
    expect_dict_fail(t, "{'descr': '<f4', 'shape': (6,)}", 24, "missing key 'fortran_order'");
    expect_dict_fail(t, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}", 24, "duplicate");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}", 24, "unexpected key");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': 0, 'shape': (6,)}", 24, "True or False");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False, 'shape': [6]}", 24, "tuple");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", 24, "tuple");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False, 'shape': (-6,)}", 24, "non-negative");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False, 'shape': (6.0,)}", 24, "shape");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", 24, "shape");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,,3)}", 24, "non-negative");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,", 24, "shape");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,)", 24, "bad header");
    expect_dict_fail(t, "{'descr': '<f4 , 'fortran_order': False, 'shape': (6,)}", 24, "dtype");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,)} x", 24, "after the dict");
    expect_dict_fail(t, "['descr', '<f4']", 24, "not a dict");
    expect_dict_fail(t, "{descr: '<f4', 'fortran_order': False, 'shape': (6,)}", 24, "quoted string");
    expect_dict_fail(t, "{'descr' '<f4', 'fortran_order': False, 'shape': (6,)}", 24, "':'");
    expect_dict_fail(t, "{'descr': '<\\f4', 'fortran_order': False, 'shape': (6,)}", 24, "character");
    expect_dict_fail(t, "{'descriptiondescriptiondescriptiondescription': 1}", 24, "too long");
    /* Sizes: mismatch, overflow of elements, of bytes, rank too large, huge entry. */
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }", 24, "truncated");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", 24, "unexpected bytes");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 24,
                     "overflow");
    expect_dict_fail(t, "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904,), }", 24,
                     "overflow");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }", 24,
                     "truncated");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 24,
                     "too large");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,6), }", 24,
                     "rank");
    expect_dict_fail(t, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4294967296, 4294967296, 4294967296), }",
                     0, "overflow");
}

static void test_files(tally *t, const char *tmpdir) {
    char path[1024], err[512];
    npy_array a;
    float f[2] = {1, 2};
    int64_t dims[1] = {2};
    snprintf(path, sizeof path, "%s/no/such/dir/x.npy", tmpdir);
    CHECK(t, npy_write(path, KILN_DTYPE_FLOAT32, 1, dims, f, err, sizeof err) != 0 && strstr(err, path),
          "write into a missing folder: '%s'", err);
    CHECK(t, npy_read(path, &a, err, sizeof err) != 0 && strstr(err, path), "read missing: '%s'", err);
    CHECK(t, npy_read(tmpdir, &a, err, sizeof err) != 0 && strstr(err, "directory"), "read dir: '%s'", err);
    CHECK(t, npy_write(path, KILN_DTYPE_STRING, 1, dims, f, err, sizeof err) != 0, "write string dtype");
    CHECK(t, npy_write(path, KILN_DTYPE_BFLOAT16, 1, dims, f, err, sizeof err) != 0, "write bf16");
    int64_t neg[1] = {-1};
    CHECK(t, npy_write(path, KILN_DTYPE_FLOAT32, 1, neg, f, err, sizeof err) != 0, "write negative dim");
    CHECK(t, npy_write(path, KILN_DTYPE_FLOAT32, 9, dims, f, err, sizeof err) != 0, "write rank 9");
    /* Overwrite in place; no temporary files left. */
    snprintf(path, sizeof path, "%s/over.npy", tmpdir);
    CHECK(t, npy_write(path, KILN_DTYPE_FLOAT32, 1, dims, f, err, sizeof err) == 0, "write: %s", err);
    f[1] = 9;
    CHECK(t, npy_write(path, KILN_DTYPE_FLOAT32, 1, dims, f, err, sizeof err) == 0, "overwrite: %s", err);
    if (npy_read(path, &a, err, sizeof err) == 0) {
        CHECK(t, ((float *)a.data)[1] == 9, "overwritten value");
        npy_free(&a);
    } else {
        CHECK(t, 0, "read back: %s", err);
    }
    int leftovers = 0;
    DIR *d = opendir(tmpdir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        if (strstr(de->d_name, ".tmp")) leftovers++;
    if (d) closedir(d);
    CHECK(t, leftovers == 0, "%d temporary files left", leftovers);
    remove(path);
    /* A FIFO, a folder or a link to a character device at the path is
     * refused, not replaced (issue 20 4.5), naming the path and its kind. */
    snprintf(path, sizeof path, "%s/fifo.npy", tmpdir);
    CHECK(t, mkfifo(path, 0600) == 0, "mkfifo");
    CHECK(t, npy_write(path, KILN_DTYPE_FLOAT32, 1, dims, f, err, sizeof err) != 0 &&
                 strstr(err, path) && strstr(err, "exists and is a FIFO"),
          "write over a FIFO: '%s'", err);
    struct stat sb;
    CHECK(t, lstat(path, &sb) == 0 && S_ISFIFO(sb.st_mode), "the FIFO stays");
    remove(path);
    snprintf(path, sizeof path, "%s/null.npy", tmpdir);
    CHECK(t, symlink("/dev/null", path) == 0, "symlink");
    CHECK(t, npy_write(path, KILN_DTYPE_FLOAT32, 1, dims, f, err, sizeof err) != 0 &&
                 strstr(err, "exists and is a character device"),
          "write over a device: '%s'", err);
    CHECK(t, lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode), "the link stays");
    remove(path);
    snprintf(path, sizeof path, "%s/adir.npy", tmpdir);
    CHECK(t, mkdir(path, 0700) == 0, "mkdir");
    CHECK(t, npy_write(path, KILN_DTYPE_FLOAT32, 1, dims, f, err, sizeof err) != 0 &&
                 strstr(err, "exists and is a directory"),
          "write over a folder: '%s'", err);
    rmdir(path);
    /* A 250-byte file name (the limit is 255): the temporary name is short
     * (issue 20 4.11: the old "<name>.tmp.<pid>..." was too long). */
    char name[251];
    memset(name, 'n', 246);
    memcpy(name + 246, ".npy", 5);
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    CHECK(t, npy_write(path, KILN_DTYPE_FLOAT32, 1, dims, f, err, sizeof err) == 0, "long name: %s", err);
    CHECK(t, npy_read(path, &a, err, sizeof err) == 0, "read long name: %s", err);
    npy_free(&a);
    remove(path);
    /* Truncated file on disk: the reader checks the size before allocating. */
    snprintf(path, sizeof path, "%s/trunc.npy", tmpdir);
    FILE *fp = fopen(path, "wb");
    size_t size;
    unsigned char *b = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }",
                                 f, 8, &size);
    fwrite(b, 1, size, fp);
    fclose(fp);
    free(b);
    CHECK(t, npy_read(path, &a, err, sizeof err) != 0 && strstr(err, "truncated"), "huge shape file: '%s'", err);
    b = make_file(3, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", f, 8, &size);
    fp = fopen(path, "wb");
    fwrite(b, 1, size, fp);
    fclose(fp);
    free(b);
    CHECK(t, npy_read(path, &a, err, sizeof err) != 0 && strstr(err, "truncated"), "short file: '%s'", err);
    /* Tiny v1 header followed by data read in the preamble buffer. */
    unsigned char tiny[14] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 1, 0, '{', 1, 2, 3};
    fp = fopen(path, "wb");
    fwrite(tiny, 1, sizeof tiny, fp);
    fclose(fp);
    CHECK(t, npy_read(path, &a, err, sizeof err) != 0 && strstr(err, "bad header"), "tiny header: '%s'", err);
    remove(path);
    snprintf(path, sizeof path, "%s/over.npy", tmpdir);
    remove(path);
}

/* Random corruption of valid files: must never crash; results either parse or fail cleanly. */
static void test_mutations(tally *t) {
    float f[6] = {0, 1, 2, 3, 4, 5};
    size_t size;
    unsigned char *b =
        make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f, sizeof f, &size);
    unsigned seed = 12345;
    int ok = 0, failed_clean = 0, bad = 0;
    for (int it = 0; it < 20000; it++) {
        unsigned char *c = malloc(size);
        memcpy(c, b, size);
        int flips = 1 + it % 4;
        for (int k = 0; k < flips; k++) {
            seed = seed * 1103515245u + 12345u;
            size_t pos = (seed >> 8) % 80; /* mostly in the header */
            seed = seed * 1103515245u + 12345u;
            c[pos] = (unsigned char)(seed >> 16);
        }
        seed = seed * 1103515245u + 12345u;
        size_t n = it % 3 == 0 ? (seed >> 8) % (size + 1) : size;
        npy_array a;
        char err[256] = "";
        if (npy_parse(c, n, &a, err, sizeof err) == 0) {
            if (a.nbytes != (size_t)a.numel * esize(a.dtype)) bad++;
            ok++;
            npy_free(&a);
        } else {
            if (!err[0]) bad++;
            failed_clean++;
        }
        free(c);
    }
    free(b);
    CHECK(t, bad == 0, "%d mutated inputs gave inconsistent results", bad);
    CHECK(t, ok + failed_clean == 20000, "mutation count");
}

int main(void) {
    tally t = {0, 0};
    char tmpl[] = "/tmp/kiln_test_npy_XXXXXX";
    char *tmpdir = mkdtemp(tmpl);
    if (!tmpdir) {
        printf("cannot create a temporary folder\n0 passed, 1 failed\n");
        return 1;
    }
    test_round_trips(&t, tmpdir);
    test_numpy_files(&t);
    test_malformed(&t);
    test_files(&t, tmpdir);
    test_mutations(&t);
    /* Clean up the round-trip files. */
    char path[1024];
    for (int d = 0; d < N_DTYPES; d++)
        for (int s = 0; s < 6; s++) {
            snprintf(path, sizeof path, "%s/a_%d_%d.npy", tmpdir, d, s);
            remove(path);
        }
    rmdir(tmpdir);
    printf("%d passed, %d failed\n", t.passed, t.failed);
    return t.failed ? 1 : 0;
}
