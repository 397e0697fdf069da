/* test_limits.c -- models that would need absurd memory are refused at
 * import with a clear message, before anything of that size is allocated
 * (issue 6, item 5). The models are in tests/data/limits/ (written by
 * tests/data/limits/gen_limits.py): declared input shapes whose byte size
 * overflows or is beyond 256 TiB, initializers claiming 10^12..10^15
 * elements with a few bytes of data, and external data past the end of its
 * file; and shape rules whose arithmetic overflowed (issue 20 4.4).
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

/* Shapes that kiln infers get the same checks (issue 20 4.4): a Tile whose
 * dim product wrapped to a small number ran and returned uninitialized
 * memory with exit 0; Slice's INT64_MIN step, Pad's pads of INT64_MIN and
 * INT64_MAX, ConvTranspose's huge stride or output_shape overflowed; an
 * Expand to 4 EiB was only refused when a run tried to allocate it. */
TEST(test_shape_arithmetic) {
    expect_refused(DIR "tile_wrap.onnx",
                   "node 'Tile_0': shape arithmetic overflows (3 * 6148914691236517206)");
    expect_refused(DIR "pad_huge.onnx",
                   "node 'Pad_0' (Pad): pad -9223372036854775808 on axis 0 is out of range");
    expect_refused(DIR "convt_stride.onnx",
                   "node 'ConvTranspose_0' (ConvTranspose): output 0 would have shape "
                   "[1x1x2251797665153026] (float32), more than the 2^48 bytes (256 TiB) kiln "
                   "accepts for one tensor");
    expect_refused(DIR "convt_output_shape.onnx",
                   "attribute 'output_shape' has the value 4611686018427387904");
    expect_refused(DIR "expand_huge.onnx",
                   "node 'Expand_0' (Expand): output 0 would have shape [1073741824x1073741824] "
                   "(float32), more than the 2^48 bytes");
    /* the dynamic Tile: refused when the build infers it at the profile */
    kiln_model *m = NULL;
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    CHECK_OK(kiln_model_load_onnx(DIR "tile_wrap_dynamic.onnx", &m));
    CHECK_OK(kiln_builder_create(&b));
    int64_t three[1] = {3};
    CHECK_OK(kiln_builder_set_profile(b, "x", 1, three, three, three));
    if (m && b) CHECK_ERR(kiln_build(b, m, &e), KILN_ERR_MODEL, "shape arithmetic overflows");
    CHECK(e == NULL);
    kiln_builder_free(b);
    kiln_model_free(m);
    /* Slice [-1 : INT64_MIN : INT64_MIN] of 5 elements: the last one */
    m = NULL;
    b = NULL;
    kiln_context *c = NULL;
    CHECK_OK(kiln_model_load_onnx(DIR "slice_int64_min.onnx", &m));
    CHECK_OK(kiln_builder_create(&b));
    if (m && b) CHECK_OK(kiln_build(b, m, &e));
    if (e) CHECK_OK(kiln_context_create(e, &c));
    if (c) {
        float x[5] = {0, 1, 2, 3, 4};
        int64_t xd[1] = {5}, yd[KILN_MAX_RANK];
        int rank = -1;
        const void *y = NULL;
        CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 1, xd, x));
        CHECK_OK(kiln_context_run(c));
        CHECK_OK(kiln_context_get_output(c, "y", NULL, &rank, yd, &y));
        CHECK(rank == 1 && yd[0] == 1 && y && ((const float *)y)[0] == 4.0f);
    }
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_builder_free(b);
    kiln_model_free(m);
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
    RUN(test_shape_arithmetic);
    return test_summary();
}
