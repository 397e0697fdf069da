/* test_limits.c -- models that would need absurd memory are refused at
 * import with a clear message, before anything of that size is allocated
 * (issue 6, item 5). The models are in tests/data/limits/ (written by
 * tests/data/limits/gen_limits.py): declared input shapes whose byte size
 * overflows or is beyond 256 TiB, initializers claiming 10^12..10^15
 * elements with a few bytes of data, and external data past the end of its
 * file.
 *
 * "Before allocating" is checked by running with the address space limited
 * to what the process has mapped now plus 1 GiB (RLIMIT_AS): an importer
 * that allocated first and checked later would get NULL (or an abort from a
 * sanitizer's allocator) instead of the expected KILN_ERR_MODEL. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "test.h"

#define DIR "tests/data/limits/"

static void expect_refused(const char *file, const char *substr) {
    kiln_model *m = NULL;
    CHECK_ERR(kiln_model_load_onnx(file, &m), KILN_ERR_MODEL, substr);
    CHECK(m == NULL);
    kiln_model_free(m);
}

TEST(test_declared_shapes) {
    expect_refused(DIR "input_dims_overflow.onnx",
                   "graph input 'x': shape [4294967296x4294967296x4294967296] (float32) has a "
                   "byte size that overflows 64 bits; refused before allocating");
    expect_refused(DIR "input_huge.onnx",
                   "graph input 'x': shape [33554432x33554432] (float32) would need "
                   "4503599627370496 bytes");
    expect_refused(DIR "input_huge.onnx", "more than the 256 TiB kiln accepts for one tensor");
    /* 4 TiB declared: under the limit, and declaring costs nothing. */
    kiln_model *m = NULL;
    CHECK_OK(kiln_model_load_onnx(DIR "input_big_ok.onnx", &m));
    if (m) {
        kiln_io_info info;
        CHECK_OK(kiln_model_input_info(m, 0, &info));
        CHECK(info.rank == 2 && info.dims[0] == (1 << 20) && info.dims[1] == (1 << 20));
    }
    kiln_model_free(m);
}

TEST(test_initializers) {
    expect_refused(DIR "init_raw_tiny.onnx",
                   "initializer 'w': shape [1000000000000000] (float32) would need "
                   "4000000000000000 bytes");
    expect_refused(DIR "init_dims_overflow.onnx",
                   "initializer 'w': shape [1099511627776x1099511627776] (float32) has a byte "
                   "size that overflows 64 bits");
    /* Typed data fields: the count is checked before the buffer of
     * 4 TB / 8 GiB is allocated (under the address-space limit, allocating
     * first would fail with KILN_ERR_OUT_OF_MEMORY). */
    expect_refused(DIR "init_typed_tiny.onnx",
                   "initializer 'w': float_data holds 1 values but shape [1000000000000] "
                   "(float32) needs 1000000000000");
    expect_refused(DIR "init_typed_8g.onnx",
                   "initializer 'w': float_data holds 1 values but shape [2147483648] (float32) "
                   "needs 2147483648");
}

TEST(test_external_data) {
    expect_refused(DIR "ext_beyond_file.onnx",
                   "limits_weights.bin' has 16 bytes; 274877906944 bytes at offset 0 do not fit");
    expect_refused(DIR "ext_offset_beyond.onnx",
                   "limits_weights.bin' has 16 bytes; 16 bytes at offset 4096 do not fit");
    expect_refused(DIR "ext_length_huge.onnx",
                   "initializer 'w': external data length 1000000000000000 does not match its "
                   "shape and dtype (16 bytes)");
}

/* Limits the address space to what is mapped now plus 1 GiB. */
static void limit_address_space(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (!f || fscanf(f, "%lu", &pages) != 1) {
        if (f) fclose(f);
        printf("  (no /proc/self/statm: address space not limited)\n");
        return;
    }
    fclose(f);
    rlim_t want = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)1 << 30);
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > want)) {
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_AS, &rl) == 0) {
            printf("  address space limited to %.1f GiB (mapped now + 1 GiB)\n",
                   (double)want / (double)(1u << 30));
            return;
        }
    }
    printf("  (address space not limited)\n");
}

int main(void) {
    limit_address_space();
    RUN(test_declared_shapes);
    RUN(test_initializers);
    RUN(test_external_data);
    return test_summary();
}
