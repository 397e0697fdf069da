/* test_api.c -- the public C API end to end on a small committed model
 * (tests/data/tiny_mlp.onnx, from tests/data/gen_tiny.py): load, build with
 * a dynamic-batch profile, serialize/deserialize, run against numpy's
 * reference, misuse errors, and many contexts of one engine on threads. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#define MODEL "tests/data/tiny_mlp.onnx"
#define IO "tests/data/tiny_mlp_io.bin"

static float ref_x[3 * 16], ref_y[3 * 8];

static int load_ref(void) {
    FILE *f = fopen(IO, "rb");
    if (!f) return 0;
    int ok = fread(ref_x, sizeof ref_x, 1, f) == 1 && fread(ref_y, sizeof ref_y, 1, f) == 1;
    fclose(f);
    return ok;
}

static float max_err(const float *a, const float *b, int n) {
    float m = 0;
    for (int i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN counts as error */
    }
    return m;
}

static kiln_engine *build_tiny(int min_b, int opt_b, int max_b) {
    kiln_model *m = NULL;
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    int64_t mn[2] = {min_b, 16}, op[2] = {opt_b, 16}, mx[2] = {max_b, 16};
    CHECK_OK(kiln_model_load_onnx(MODEL, &m));
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_profile(b, "x", 2, mn, op, mx));
    CHECK_OK(kiln_builder_set_threads(b, 1));
    if (m && b) CHECK_OK(kiln_build(b, m, &e));
    kiln_builder_free(b);
    kiln_model_free(m);
    return e;
}

static int run_batch(kiln_context *c, const float *x, int batch, float *y) {
    int64_t dims[2] = {batch, 16};
    kiln_status s = kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, dims, x);
    if (s == KILN_OK) s = kiln_context_run(c);
    const void *out = NULL;
    int rank = 0;
    int64_t od[KILN_MAX_RANK];
    kiln_dtype dt;
    if (s == KILN_OK) s = kiln_context_get_output(c, "y", &dt, &rank, od, &out);
    if (s != KILN_OK) {
        fprintf(stderr, "  run_batch: %s\n", kiln_last_error());
        return 0;
    }
    if (dt != KILN_DTYPE_FLOAT32 || rank != 2 || od[0] != batch || od[1] != 8) return 0;
    memcpy(y, out, sizeof(float) * (size_t)batch * 8);
    return 1;
}

TEST(test_model_info) {
    kiln_model *m = NULL;
    CHECK_OK(kiln_model_load_onnx(MODEL, &m));
    if (!m) return;
    CHECK(kiln_model_num_inputs(m) == 1);
    CHECK(kiln_model_num_outputs(m) == 1);
    kiln_io_info info;
    CHECK_OK(kiln_model_input_info(m, 0, &info));
    CHECK(!strcmp(info.name, "x"));
    CHECK(info.dtype == KILN_DTYPE_FLOAT32);
    CHECK(info.rank == 2 && info.dims[0] < 0 && info.dims[1] == 16);
    CHECK(info.dim_names[0] && !strcmp(info.dim_names[0], "batch"));
    CHECK(kiln_model_input_info(m, 1, &info) == KILN_ERR_INVALID_ARGUMENT);
    kiln_model_free(m);
}

TEST(test_run_matches_reference) {
    kiln_engine *e = build_tiny(1, 3, 8);
    if (!e) return;
    kiln_context *c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    float y[3 * 8];
    CHECK(run_batch(c, ref_x, 3, y));
    CHECK(max_err(y, ref_y, 3 * 8) < 1e-5f);
    /* a smaller batch inside the profile, then the same again */
    CHECK(run_batch(c, ref_x, 1, y));
    CHECK(max_err(y, ref_y, 8) < 1e-5f);
    CHECK(run_batch(c, ref_x, 3, y));
    CHECK(max_err(y, ref_y, 3 * 8) < 1e-5f);
    kiln_context_free(c);
    kiln_engine_free(e);
}

TEST(test_serialize_roundtrip) {
    kiln_engine *e = build_tiny(1, 2, 4);
    if (!e) return;
    void *data = NULL;
    size_t size = 0;
    CHECK_OK(kiln_engine_serialize(e, &data, &size));
    kiln_engine *e2 = NULL;
    CHECK_OK(kiln_engine_load_memory(data, size, &e2));
    kiln_free(data);
    const char *path = "build-test-api.kiln";
    CHECK_OK(kiln_engine_save(e, path));
    kiln_engine *e3 = NULL;
    CHECK_OK(kiln_engine_load(path, &e3));
    remove(path);
    kiln_engine *es[2] = {e2, e3};
    for (int i = 0; i < 2; i++) {
        if (!es[i]) continue;
        int64_t mn[2], op[2], mx[2];
        CHECK_OK(kiln_engine_input_profile(es[i], 0, mn, op, mx));
        CHECK(mn[0] == 1 && op[0] == 2 && mx[0] == 4 && mx[1] == 16);
        kiln_context *c = NULL;
        CHECK_OK(kiln_context_create(es[i], &c));
        float y[3 * 8];
        if (c) CHECK(run_batch(c, ref_x, 3, y));
        CHECK(max_err(y, ref_y, 24) < 1e-5f);
        kiln_context_free(c);
    }
    kiln_engine_free(e3);
    kiln_engine_free(e2);
    kiln_engine_free(e);
}

TEST(test_bad_inputs) {
    kiln_engine *e = build_tiny(1, 2, 4);
    if (!e) return;
    kiln_context *c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    int64_t ok[2] = {2, 16}, too_big[2] = {5, 16}, wrong[2] = {2, 15};
    float x[5 * 16] = {0};
    int32_t xi[2 * 16] = {0};
    CHECK_ERR(kiln_context_set_input(c, "nope", KILN_DTYPE_FLOAT32, 2, ok, x),
              KILN_ERR_INVALID_ARGUMENT, "no input named 'nope'");
    CHECK_ERR(kiln_context_set_input(c, "x", KILN_DTYPE_INT32, 2, ok, xi),
              KILN_ERR_INVALID_ARGUMENT, "expected dtype float32, got int32");
    CHECK_ERR(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, too_big, x),
              KILN_ERR_INVALID_ARGUMENT, "outside the engine's profile");
    CHECK_ERR(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, wrong, x),
              KILN_ERR_INVALID_ARGUMENT, "[2x15]");
    CHECK_ERR(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 1, ok, x),
              KILN_ERR_INVALID_ARGUMENT, "expected rank 2");
    /* dims NULL at the right rank: said so (issue 20 4.9: was "expected rank
     * 2 ..., got rank 2") */
    CHECK_ERR(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, NULL, x),
              KILN_ERR_INVALID_ARGUMENT, "input 'x': dims is NULL");
    CHECK(!strstr(kiln_last_error(), "got rank"));
    CHECK_ERR(kiln_context_run(c), KILN_ERR_INVALID_ARGUMENT, "input 'x' is not set");
    CHECK_ERR(kiln_context_get_output(c, "y", NULL, NULL, NULL, NULL), KILN_ERR_INVALID_ARGUMENT,
              "has not run");
    CHECK_ERR(kiln_context_get_output(c, "zz", NULL, NULL, NULL, NULL), KILN_ERR_INVALID_ARGUMENT,
              "no output named 'zz'");
    /* output bound to a too-small buffer */
    float small[4];
    CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, ok, x));
    CHECK_OK(kiln_context_set_output(c, "y", small, sizeof small));
    CHECK_ERR(kiln_context_run(c), KILN_ERR_INVALID_ARGUMENT, "bound buffer");
    /* bound to a right-sized buffer: the result lands there */
    float big[2 * 8];
    CHECK_OK(kiln_context_set_output(c, "y", big, sizeof big));
    CHECK_OK(kiln_context_run(c));
    const void *p = NULL;
    CHECK_OK(kiln_context_get_output(c, "y", NULL, NULL, NULL, &p));
    CHECK(p == (const void *)big);
    kiln_context_free(c);
    kiln_engine_free(e);
}

/* ---- the public API misused: a table ------------------------------------
 * Each row: a call, the status it must give and words of its message (""
 * for KILN_OK). Every object kind and argument kind: NULLs, indices out of
 * range, ranks, dims, dtypes, sizes, devices, and calls in the wrong order.
 * Under ASan+UBSan none reads or writes out of bounds or leaks. */
static void misuse_row(const char *call, kiln_status got, kiln_status want, const char *words) {
    const char *msg = got == KILN_OK ? "" : kiln_last_error();
    if (got != want || !strstr(msg, words)) {
        fprintf(stderr, "  misuse: %s: expected %s with \"%s\", got %s: \"%s\"\n", call,
                kiln_status_name(want), words, kiln_status_name(got), msg);
        test_failed_checks++;
    }
}
#define ROW(call, want, words) misuse_row(#call, (call), (want), (words))
#define BAD KILN_ERR_INVALID_ARGUMENT

TEST(test_api_misuse_table) {
    kiln_model *m = NULL, *m2 = NULL;
    kiln_builder *b = NULL;
    kiln_engine *e = build_tiny(1, 2, 4), *e2 = NULL;
    kiln_context *c = NULL, *c2 = NULL;
    CHECK_OK(kiln_model_load_onnx(MODEL, &m));
    CHECK_OK(kiln_builder_create(&b));
    if (!e || !m || !b) goto done;
    CHECK_OK(kiln_context_create(e, &c));
    if (!c) goto done;
    static const char zeros[64];
    int64_t mn[2] = {1, 16}, op[2] = {2, 16}, mx[2] = {4, 16}, neg[2] = {-1, 16}, huge[2] = {INT64_MAX, 16};
    int64_t ok[2] = {2, 16}, zero[2] = {0, 16};
    float x[4 * 16] = {0}, y[4 * 8];
    kiln_device dv;
    kiln_io_info io;
    kiln_layer_info li;
    void *data = NULL;
    const void *cdata = NULL;
    size_t size = 0;
    int idx;
    /* model */
    ROW(kiln_model_load_onnx(NULL, &m2), BAD, "path is NULL");
    ROW(kiln_model_load_onnx(MODEL, NULL), BAD, "out is NULL");
    ROW(kiln_model_load_onnx("", &m2), KILN_ERR_IO, "cannot open ''");
    ROW(kiln_model_load_onnx("/", &m2), KILN_ERR_IO, "it is a directory");
    ROW(kiln_model_load_onnx("/dev/zero", &m2), KILN_ERR_IO, "it is a character device");
    ROW(kiln_model_load_onnx_memory(NULL, 10, NULL, &m2), BAD, "data is NULL");
    ROW(kiln_model_load_onnx_memory(zeros, 0, NULL, &m2), KILN_ERR_MODEL, "it is empty");
    ROW(kiln_model_load_onnx_memory(zeros, sizeof zeros, NULL, &m2), KILN_ERR_MODEL, "not a valid ONNX model");
    ROW(kiln_model_input_info(m, -1, &io), BAD, "index -1 out of range");
    ROW(kiln_model_output_info(m, INT32_MAX, &io), BAD, "out of range");
    ROW(kiln_model_input_info(m, 0, NULL), BAD, "is NULL");
    /* builder */
    ROW(kiln_builder_create(NULL), BAD, "");
    ROW(kiln_builder_set_device(b, (kiln_device)5, 0), BAD, "unknown device 5");
    ROW(kiln_builder_set_device(b, KILN_DEVICE_CPU, -1), BAD, "out of range 0..0");
    ROW(kiln_builder_set_device(b, KILN_DEVICE_CPU, 3), BAD, "device index 3 of cpu is out of range 0..0");
    ROW(kiln_builder_set_device(b, KILN_DEVICE_CUDA, 1024), BAD, "device index 1024 of cuda is out of range 0..1023");
    ROW(kiln_builder_set_device(b, KILN_DEVICE_CPU, 0), KILN_OK, "");
    ROW(kiln_builder_set_precision(b, (kiln_precision)-1), BAD, "unknown precision -1");
    ROW(kiln_builder_set_optimization(b, 7), BAD, "must be 0 or 1");
    ROW(kiln_builder_set_verbosity(b, 99), BAD, "level 99");
    ROW(kiln_builder_set_threads(b, -5), BAD, "");
    ROW(kiln_builder_set_profile(b, NULL, 2, mn, op, mx), BAD, "NULL argument");
    ROW(kiln_builder_set_profile(b, "x", 9, mn, op, mx), BAD, "rank 9 out of range 0..8");
    ROW(kiln_builder_set_profile(b, "x", 2, mx, op, mn), BAD, "needs 0 <= min <= opt <= max");
    ROW(kiln_builder_set_profile(b, "x", 2, neg, neg, neg), BAD, "min=-1");
    ROW(kiln_builder_disable_pass(b, "no_such_pass"), BAD, "unknown pass 'no_such_pass'");
    ROW(kiln_builder_disable_pass(b, NULL), BAD, "unknown pass");
    ROW(kiln_builder_set_metadata(b, NULL, "v"), BAD, "must not be NULL");
    ROW(kiln_builder_set_metadata(b, "", "v"), BAD, "keys are 1..255");
    ROW(kiln_builder_set_layer_precision(b, "x", KILN_PRECISION_FP16), BAD, "only fp32");
    ROW(kiln_build(NULL, m, &e2), BAD, "builder or model is NULL");
    ROW(kiln_build(b, m, NULL), BAD, "out is NULL");
    /* engine */
    ROW(kiln_engine_load(NULL, &e2), BAD, "must not be NULL");
    ROW(kiln_engine_load("/dev/null", &e2), KILN_ERR_IO, "is a character device");
    ROW(kiln_engine_load(MODEL, &e2), KILN_ERR_FORMAT, "not a kiln engine file");
    ROW(kiln_engine_load_memory(zeros, 0, &e2), KILN_ERR_FORMAT, "empty");
    ROW(kiln_engine_load_memory(zeros, sizeof zeros, &e2), KILN_ERR_FORMAT, "");
    ROW(kiln_engine_serialize(e, NULL, &size), BAD, "NULL argument");
    ROW(kiln_engine_save(e, ""), BAD, "path must be given");
    ROW(kiln_engine_save(e, "/"), KILN_ERR_IO, "is a directory");
    ROW(kiln_engine_save(e, "/dev/null"), KILN_ERR_IO, "is a character device");
    ROW(kiln_engine_input_info(e, 1, &io), BAD, "index 1 is out of range");
    ROW(kiln_engine_output_info(e, -1, &io), BAD, "index -1 is out of range");
    ROW(kiln_engine_input_profile(e, 5, mn, op, mx), BAD, "index 5 is out of range");
    ROW(kiln_engine_layer_info(e, -1, &li), BAD, "layer -1 of");
    ROW(kiln_engine_layer_info(e, 0, NULL), BAD, "NULL argument");
    ROW(kiln_engine_metadata_at(e, 100, NULL, NULL), BAD, "index 100 is out of range");
    ROW(kiln_engine_set_metadata(e, "k\xff", "v"), BAD, "has byte 0xff at offset 1");
    CHECK(kiln_engine_layer_num_inputs(e, -1) == -1 && kiln_engine_layer_input(e, 0, 99) == NULL);
    CHECK(kiln_engine_layer_source(e, 0, 1 << 20) == NULL && kiln_engine_num_inputs(NULL) == 0);
    /* context, in the wrong order and with wrong buffers */
    ROW(kiln_context_create(NULL, &c2), BAD, "engine is NULL");
    ROW(kiln_context_create(e, NULL), BAD, "out is NULL");
    ROW(kiln_context_run(c), BAD, "input 'x' is not set");
    ROW(kiln_context_get_output(c, "y", NULL, NULL, NULL, NULL), BAD, "has not run successfully");
    ROW(kiln_context_get_output_device(c, "y", &cdata), BAD, "a CPU engine has no device outputs");
    ROW(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, ok, NULL), BAD, "data is NULL");
    ROW(kiln_context_set_input(c, "x", (kiln_dtype)-3, 2, ok, x), BAD, "expected dtype float32, got ?");
    ROW(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, zero, x), BAD, "outside the engine's profile");
    ROW(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, huge, x), BAD, "outside the engine's profile");
    ROW(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, neg, x), BAD, "outside the engine's profile");
    ROW(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, -1, ok, x), BAD, "got rank -1");
    ROW(kiln_context_set_input(c, NULL, KILN_DTYPE_FLOAT32, 2, ok, x), BAD, "NULL context or name");
    ROW(kiln_context_set_output(c, "nosuch", y, sizeof y), BAD, "no output named 'nosuch'");
    ROW(kiln_context_set_output(c, "y", y, 1), KILN_OK, "");
    ROW(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, ok, x), KILN_OK, "");
    ROW(kiln_context_run(c), BAD, "needs 64 bytes, but the bound buffer holds 1");
    ROW(kiln_context_set_output(c, "y", NULL, 100), KILN_OK, ""); /* unbinds */
    ROW(kiln_context_run(c), KILN_OK, "");
    ROW(kiln_context_set_threads(c, 1025), BAD, "threads must be in 0..1024");
    ROW(kiln_context_set_stream(c, (void *)1), BAD, "a stream was given for a CPU engine");
    ROW(kiln_context_layer_time(c, 0, NULL, NULL), BAD, "profiling is off");
    ROW(kiln_context_tensor(c, "x", NULL), BAD, "NULL argument");
    ROW(kiln_context_set_memory_limit(c, 1), KILN_OK, "");
    ROW(kiln_context_run(c), KILN_ERR_OUT_OF_MEMORY, "above the context's memory limit of 1 bytes");
    ROW(kiln_context_get_output(c, "y", NULL, NULL, NULL, NULL), BAD, "has not run successfully");
    ROW(kiln_context_set_memory_limit(c, 0), KILN_OK, "");
    ROW(kiln_context_run(c), KILN_OK, "");
    ROW(kiln_device_from_name(NULL, &dv), BAD, "unknown device");
    ROW(kiln_device_parse("cpu:1", &dv, &idx), BAD, "expected cpu, cpu:0, cuda or cuda:N");
    (void)data;
done:
    kiln_free(data);
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_builder_free(b);
    kiln_model_free(m);
}
#undef ROW
#undef BAD

TEST(test_bad_models) {
    kiln_model *m = NULL;
    CHECK_ERR(kiln_model_load_onnx("tests/data/does_not_exist.onnx", &m), KILN_ERR_IO,
              "does_not_exist.onnx");
    CHECK(m == NULL);
    CHECK_ERR(kiln_model_load_onnx("tests/data/unknown_op.onnx", &m), KILN_ERR_UNSUPPORTED,
              "FancyOp");
    CHECK(strstr(kiln_last_error(), "my_fancy_node") != NULL);
    CHECK(m == NULL);
    const char junk[] = "this is not an onnx model at all";
    CHECK(kiln_model_load_onnx_memory(junk, sizeof junk, NULL, &m) == KILN_ERR_MODEL);
    CHECK(m == NULL);
    /* builder misuse */
    kiln_builder *b = NULL;
    CHECK_OK(kiln_builder_create(&b));
    int64_t mn[2] = {4, 16}, op[2] = {2, 16}, mx[2] = {8, 16};
    CHECK_ERR(kiln_builder_set_profile(b, "x", 2, mn, op, mx), KILN_ERR_INVALID_ARGUMENT,
              "min <= opt <= max");
    int64_t mn2[2] = {1, 16}, mx2[2] = {8, 16};
    CHECK_OK(kiln_builder_set_profile(b, "not_an_input", 2, mn2, mn2, mx2));
    CHECK_OK(kiln_model_load_onnx(MODEL, &m));
    kiln_engine *e = NULL;
    if (m) CHECK_ERR(kiln_build(b, m, &e), KILN_ERR_INVALID_ARGUMENT, "not_an_input");
    CHECK(e == NULL);
    kiln_builder_free(b);
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_precision(b, KILN_PRECISION_FP16));
    if (m) CHECK_ERR(kiln_build(b, m, &e), KILN_ERR_UNSUPPORTED, "fp16");
    /* verbosity: 0, 1, 2 (`kiln build -q` sets 0) */
    CHECK_ERR(kiln_builder_set_verbosity(b, 3), KILN_ERR_INVALID_ARGUMENT, "level 3 is not 0, 1 or 2");
    CHECK_ERR(kiln_builder_set_verbosity(b, -1), KILN_ERR_INVALID_ARGUMENT, "level -1");
    CHECK_ERR(kiln_builder_set_verbosity(NULL, 0), KILN_ERR_INVALID_ARGUMENT, "kiln_builder_set_verbosity");
    CHECK_OK(kiln_builder_set_verbosity(b, 0));
    kiln_builder_free(b);
    kiln_model_free(m);
    /* NULL is fine for every free */
    kiln_model_free(NULL);
    kiln_builder_free(NULL);
    kiln_engine_free(NULL);
    kiln_context_free(NULL);
}

/* Runs a fixed-shape model with one float input x of n elements; copies
 * output y (m elements) into y. Returns 1 on success. */
static int run_file(const char *path, const float *x, int64_t rank, const int64_t *dims, float *y,
                    size_t m) {
    kiln_model *md = NULL;
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    const void *out = NULL;
    int ok = kiln_model_load_onnx(path, &md) == KILN_OK && kiln_builder_create(&b) == KILN_OK &&
             kiln_build(b, md, &e) == KILN_OK && kiln_context_create(e, &c) == KILN_OK &&
             kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, (int)rank, dims, x) == KILN_OK &&
             kiln_context_run(c) == KILN_OK &&
             kiln_context_get_output(c, "y", NULL, NULL, NULL, &out) == KILN_OK;
    if (ok) memcpy(y, out, m * sizeof(float));
    else fprintf(stderr, "  %s: %s\n", path, kiln_last_error());
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_builder_free(b);
    kiln_model_free(md);
    return ok;
}

TEST(test_lstm_activations) {
    float x[4 * 2 * 3], y0[40], y1[40], y2[40];
    for (int i = 0; i < 24; i++) x[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    int64_t dims[3] = {4, 2, 3};
    CHECK(run_file("tests/data/lstm_default.onnx", x, 3, dims, y0, 40));
    CHECK(run_file("tests/data/lstm_explicit.onnx", x, 3, dims, y1, 40));
    CHECK(run_file("tests/data/lstm_relu.onnx", x, 3, dims, y2, 40));
    CHECK(max_err(y0, y1, 40) == 0.0f);    /* explicit defaults == defaults */
    CHECK(max_err(y0, y2, 40) > 1e-3f);    /* a different activation changes the result */
    kiln_model *m = NULL;
    CHECK_ERR(kiln_model_load_onnx("tests/data/lstm_bad_act.onnx", &m), KILN_ERR_UNSUPPORTED,
              "activation 'HardSigmoid' is not supported");
    CHECK(m == NULL);
}

/* Opset-18 forms: Reduce* axes as an input, Split num_outputs, Pad axes. */
TEST(test_opset18_forms) {
    kiln_model *m = NULL;
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    CHECK_OK(kiln_model_load_onnx("tests/data/opset18_forms.onnx", &m));
    CHECK_OK(kiln_builder_create(&b));
    if (m && b) CHECK_OK(kiln_build(b, m, &e));
    if (e) CHECK_OK(kiln_context_create(e, &c));
    if (!c) goto done;
    float x[12];
    for (int i = 0; i < 12; i++) x[i] = (float)i;
    int64_t dims[2] = {2, 6};
    CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, dims, x));
    CHECK_OK(kiln_context_run(c));
    const float *o;
    int rank;
    int64_t od[KILN_MAX_RANK];
    CHECK_OK(kiln_context_get_output(c, "m", NULL, &rank, od, (const void **)&o));
    CHECK(rank == 2 && od[0] == 2 && od[1] == 1 && o[0] == 2.5f && o[1] == 8.5f);
    CHECK_OK(kiln_context_get_output(c, "b", NULL, &rank, od, (const void **)&o));
    CHECK(rank == 2 && od[0] == 2 && od[1] == 3 && o[0] == 3.0f && o[3] == 9.0f);
    CHECK_OK(kiln_context_get_output(c, "p", NULL, &rank, od, (const void **)&o));
    CHECK(rank == 2 && od[0] == 2 && od[1] == 9);
    CHECK(o[0] == 0.0f && o[1] == 0.0f && o[6] == 5.0f && o[7] == 0.0f && o[8] == 0.0f &&
          o[10] == 6.0f);
done:
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_builder_free(b);
    kiln_model_free(m);
}

/* ---- many contexts of one engine on many threads ------------------------ */

typedef struct worker {
    kiln_engine *e;
    int id, iters, errors;
} worker;

static void *worker_main(void *arg) {
    worker *w = arg;
    kiln_context *c = NULL;
    if (kiln_context_create(w->e, &c) != KILN_OK) {
        w->errors++;
        return NULL;
    }
    kiln_context_set_threads(c, (w->id % 2) ? 1 : 2);
    float y[3 * 8];
    for (int i = 0; i < w->iters; i++) {
        int batch = 1 + (w->id + i) % 3;
        if (!run_batch(c, ref_x, batch, y) || max_err(y, ref_y, batch * 8) >= 1e-5f) w->errors++;
    }
    kiln_context_free(c);
    return NULL;
}

TEST(test_threads_share_engine) {
    kiln_engine *e = build_tiny(1, 2, 3);
    if (!e) return;
    enum { N = 8 };
    pthread_t th[N];
    worker w[N];
    for (int i = 0; i < N; i++) {
        w[i] = (worker){.e = e, .id = i, .iters = 200};
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    int errors = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        errors += w[i].errors;
    }
    CHECK(errors == 0);
    kiln_engine_free(e);
}

/* kiln_engine_describe's string is made by the first call: threads
 * describing a fresh engine at once all get the one string it keeps (they
 * raced for the cache: each made its own, all but one leaked, a data race
 * under TSan). A barrier starts them together; 20 fresh engines. */
typedef struct describer {
    kiln_engine *e;
    pthread_barrier_t *bar;
    const char *got[2];
} describer;

static void *describe_main(void *arg) {
    describer *d = arg;
    pthread_barrier_wait(d->bar);
    d->got[0] = kiln_engine_describe(d->e, 0);
    d->got[1] = kiln_engine_describe(d->e, 1);
    return NULL;
}

TEST(test_threads_describe_engine) {
    enum { N = 8 };
    int differ = 0;
    for (int round = 0; round < 20; round++) {
        kiln_engine *e = build_tiny(1, 2, 3);
        if (!e) return;
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, N);
        pthread_t th[N];
        describer d[N];
        for (int i = 0; i < N; i++) {
            d[i] = (describer){.e = e, .bar = &bar};
            pthread_create(&th[i], NULL, describe_main, &d[i]);
        }
        for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
        pthread_barrier_destroy(&bar);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < 2; j++) {
                CHECK(d[i].got[j] && d[i].got[j][0]);
                if (d[i].got[j] != kiln_engine_describe(e, j)) differ++;
            }
        kiln_engine_free(e);
    }
    CHECK(differ == 0);
}

/* A context is used by one thread at a time. A second thread's calls
 * while it runs, and a layer callback's calls that would run or change the
 * context under its run, fail naming the context in use (they crashed:
 * two threads running one context; a callback's kiln_context_run recursed
 * on the run's own state, its set_threads freed the thread pool under the
 * run). The run itself goes on and its result is right. */
typedef struct busy_probe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int in_run, other_done, calls;
    kiln_status inner[8], outer[6];
    char msg[512]; /* the message of the callback's kiln_context_run */
} busy_probe;

static int busy_cb(kiln_context *c, int layer, kiln_layer_event ev, void *user) {
    busy_probe *p = user;
    if (layer != 0 || ev != KILN_LAYER_AFTER || p->calls++) return 0;
    int64_t dims[2] = {3, 16};
    float out[3 * 8];
    const void *data = NULL;
    p->inner[0] = kiln_context_run(c);
    snprintf(p->msg, sizeof p->msg, "%s", kiln_last_error());
    p->inner[1] = kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, dims, ref_x);
    p->inner[2] = kiln_context_set_threads(c, 3);
    p->inner[3] = kiln_context_set_profiling(c, 1);
    p->inner[4] = kiln_context_set_debug_arena(c, 1);
    p->inner[5] = kiln_context_set_layer_callback(c, NULL, NULL);
    p->inner[6] = kiln_context_set_output(c, "y", out, sizeof out);
    p->inner[7] = kiln_context_get_output(c, "y", NULL, NULL, NULL, &data);
    /* hold the run here until the other thread has tried the context */
    pthread_mutex_lock(&p->mu);
    p->in_run = 1;
    pthread_cond_broadcast(&p->cv);
    while (!p->other_done) pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

typedef struct busy_other {
    kiln_context *c;
    busy_probe *p;
} busy_other;

static void *busy_other_main(void *arg) {
    busy_other *o = arg;
    busy_probe *p = o->p;
    pthread_mutex_lock(&p->mu);
    while (!p->in_run) pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    int64_t dims[2] = {1, 16};
    double us;
    int64_t runs;
    p->outer[0] = kiln_context_run(o->c);
    p->outer[1] = kiln_context_set_input(o->c, "x", KILN_DTYPE_FLOAT32, 2, dims, ref_x);
    p->outer[2] = kiln_context_set_memory_limit(o->c, 1);
    p->outer[3] = kiln_context_set_memory_reuse(o->c, 0);
    p->outer[4] = kiln_context_get_output(o->c, "y", NULL, NULL, NULL, NULL);
    p->outer[5] = kiln_context_layer_time(o->c, 0, &us, &runs);
    pthread_mutex_lock(&p->mu);
    p->other_done = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

TEST(test_context_in_use) {
    kiln_engine *e = build_tiny(1, 2, 3);
    if (!e) return;
    kiln_context *c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    CHECK_OK(kiln_context_set_threads(c, 2));
    busy_probe p = {.calls = 0};
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    CHECK_OK(kiln_context_set_layer_callback(c, busy_cb, &p));
    busy_other o = {c, &p};
    pthread_t th;
    pthread_create(&th, NULL, busy_other_main, &o);
    float y[3 * 8];
    CHECK(run_batch(c, ref_x, 2, y)); /* the callback's and the other thread's calls all fail */
    pthread_join(th, NULL);
    CHECK(max_err(y, ref_y, 2 * 8) < 1e-5f);
    for (int i = 0; i < 8; i++) CHECK(p.inner[i] == KILN_ERR_INVALID_ARGUMENT);
    for (int i = 0; i < 6; i++) CHECK(p.outer[i] == KILN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(p.msg, "kiln_context_run: the context is in use") != NULL);
    /* usable again after the run */
    CHECK_OK(kiln_context_set_threads(c, 1));
    CHECK_OK(kiln_context_set_layer_callback(c, NULL, NULL));
    CHECK(run_batch(c, ref_x, 1, y) && max_err(y, ref_y, 8) < 1e-5f);
    pthread_cond_destroy(&p.cv);
    pthread_mutex_destroy(&p.mu);
    kiln_context_free(c);
    kiln_engine_free(e);
}

/* kiln_context_free while another thread runs the context waits for that
 * run to end (it freed the context under the run: a use after free); from
 * the run's own layer callback, the context is freed as the run returns
 * (it freed the arena the run was writing). probe5. */
typedef struct free_probe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int in_run;
    atomic_int run_returned; /* set by the running thread after kiln_context_run returned */
    int hold_ms;             /* how long the callback holds the run */
    int free_in_cb;          /* the callback frees its own context */
    int calls;
    kiln_status inner;       /* the callback's kiln_context_run after its free */
} free_probe;

static int free_cb(kiln_context *c, int layer, kiln_layer_event ev, void *user) {
    free_probe *p = user;
    if (layer != 0 || ev != KILN_LAYER_AFTER || p->calls++) return 0;
    if (p->free_in_cb) {
        kiln_context_free(c); /* deferred: the run is still using c */
        p->inner = kiln_context_run(c); /* c is still claimed by its run */
        return 0;
    }
    pthread_mutex_lock(&p->mu);
    p->in_run = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    usleep((useconds_t)p->hold_ms * 1000); /* the other thread is freeing meanwhile */
    return 0;
}

typedef struct free_runner {
    kiln_context *c;
    free_probe *p;
    int ok;
    float y[3 * 8];
} free_runner;

static void *free_runner_main(void *arg) {
    free_runner *r = arg;
    r->ok = kiln_context_run(r->c) == KILN_OK; /* into the bound r->y: c is freed after */
    atomic_store(&r->p->run_returned, 1);
    return NULL;
}

/* Starts r->c's run of batch 2 on thread *th and returns once its callback
 * holds it (for p->hold_ms). */
static void start_held_run(free_runner *r, free_probe *p, pthread_t *th) {
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    CHECK_OK(kiln_context_set_layer_callback(r->c, free_cb, p));
    r->p = p;
    int64_t dims[2] = {2, 16};
    CHECK_OK(kiln_context_set_input(r->c, "x", KILN_DTYPE_FLOAT32, 2, dims, ref_x));
    CHECK_OK(kiln_context_set_output(r->c, "y", r->y, sizeof r->y));
    pthread_create(th, NULL, free_runner_main, r);
    pthread_mutex_lock(&p->mu);
    while (!p->in_run) pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* Joins the run start_held_run started; checks its outputs. */
static void end_held_run(free_runner *r, pthread_t th) {
    pthread_join(th, NULL);
    CHECK(r->ok && max_err(r->y, ref_y, 2 * 8) < 1e-5f);
    pthread_cond_destroy(&r->p->cv);
    pthread_mutex_destroy(&r->p->mu);
}

TEST(test_context_free_during_run) {
    kiln_engine *e = build_tiny(1, 2, 3);
    if (!e) return;
    kiln_context *c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    CHECK_OK(kiln_context_set_threads(c, 2));
    free_probe p = {.hold_ms = 100};
    free_runner r = {.c = c};
    pthread_t th;
    start_held_run(&r, &p, &th);
    kiln_context_free(c); /* waits for the run */
    CHECK(atomic_load(&p.run_returned) == 1);
    end_held_run(&r, th);

    /* freed by its own run's callback: the run ends right, then c is gone
     * (LeakSanitizer: nothing leaks; ASan: nothing is read after free) */
    c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    free_probe q = {.free_in_cb = 1};
    CHECK_OK(kiln_context_set_layer_callback(c, free_cb, &q));
    float y[2 * 8];
    int64_t dims[2] = {2, 16};
    CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, dims, ref_x));
    CHECK_OK(kiln_context_set_output(c, "y", y, sizeof y));
    CHECK_OK(kiln_context_run(c)); /* c is freed as it returns */
    CHECK(max_err(y, ref_y, 2 * 8) < 1e-5f);
    CHECK(q.calls == 1 && q.inner == KILN_ERR_INVALID_ARGUMENT);
    kiln_engine_free(e);
}

/* A fork() child using its parent's engine and context (PyTorch DataLoader
 * workers, multiprocessing's default start method): the context's thread
 * pool is the parent's, whose workers the child does not have. The child
 * runs right (on a pool of its own) and frees both without hanging; it hung
 * forever joining the parent's workers. Not under TSan (threads started after
 * a fork of a threaded process are outside what it supports). */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KILN_TEST_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define KILN_TEST_TSAN 1
#endif

/* A fork() child freeing a context that a thread of its parent was running
 * at the fork: no thread of the child will end that run, so the free does
 * not wait for it (it would hang forever). probe5. */
#ifndef KILN_TEST_TSAN
/* A child forked by a layer callback frees the context there: its copy of
 * the run goes on after the callback, so the context is freed as that run
 * returns (it was freed at once: the claim looked like another thread's). */
static int fork_cb(kiln_context *c, int layer, kiln_layer_event ev, void *user) {
    int *state = user; /* 0: not yet; 1: parent after the child; 2: the child */
    if (layer != 0 || ev != KILN_LAYER_AFTER || *state) return 0;
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        *state = 2;
        kiln_context_free(c);
        return 0;
    }
    int status = -1;
    if (pid > 0) waitpid(pid, &status, 0);
    *state = WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 1 : 3;
    return 0;
}

static void fork_in_callback_frees_context(kiln_engine *e) {
    kiln_context *c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    int state = 0;
    float y[2 * 8];
    int64_t dims[2] = {2, 16};
    CHECK_OK(kiln_context_set_layer_callback(c, fork_cb, &state));
    CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, dims, ref_x));
    CHECK_OK(kiln_context_set_output(c, "y", y, sizeof y));
    kiln_status st = kiln_context_run(c);
    if (state == 2) _exit(st == KILN_OK && max_err(y, ref_y, 16) < 1e-5f ? 0 : 4); /* the child: c is gone */
    CHECK_OK(st);
    CHECK(state == 1); /* the child's run ended right and freed c (3: it crashed or failed) */
    kiln_context_free(c);
}

static void fork_child_frees_context_in_use(kiln_engine *e) {
    kiln_context *c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    free_probe p = {.hold_ms = 300};
    free_runner r = {.c = c};
    pthread_t th;
    start_held_run(&r, &p, &th);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        kiln_context_free(c);
        _exit(0);
    }
    CHECK(pid > 0);
    int status = -1;
    if (pid > 0) waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0); /* SIGALRM: the free hung */
    end_held_run(&r, th);
    kiln_context_free(c);
}
#endif

TEST(test_fork_child_uses_parent_context) {
#ifdef KILN_TEST_TSAN
    fprintf(stderr, "  note: skipped under ThreadSanitizer\n");
#else
    kiln_engine *e = build_tiny(1, 2, 3);
    if (!e) return;
    kiln_context *c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    CHECK_OK(kiln_context_set_threads(c, 2));
    float y[3 * 8];
    CHECK(c && run_batch(c, ref_x, 3, y) && max_err(y, ref_y, 3 * 8) < 1e-5f);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int bad = 0;
        for (int i = 0; i < 20; i++) {
            memset(y, 0, sizeof y);
            if (!run_batch(c, ref_x, 1 + i % 3, y) || max_err(y, ref_y, (1 + i % 3) * 8) >= 1e-5f) bad++;
        }
        kiln_context_free(c);
        kiln_engine_free(e);
        _exit(bad ? 3 : 0);
    }
    CHECK(pid > 0);
    int status = -1, waited = 0;
    for (; pid > 0 && waited < 2000; waited++) { /* 20 s */
        if (waitpid(pid, &status, WNOHANG) == pid) break;
        usleep(10000);
    }
    if (pid > 0 && waited == 2000) {
        fprintf(stderr, "  the child hung\n");
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    CHECK(waited < 2000 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(run_batch(c, ref_x, 2, y) && max_err(y, ref_y, 2 * 8) < 1e-5f); /* the parent's still runs */
    kiln_context_free(c);
    fork_child_frees_context_in_use(e);
    fork_in_callback_frees_context(e);
    kiln_engine_free(e);
#endif
}

/* A loaded engine reads its weights from the file's pages: a file written in
 * place under it (cp new.kiln model.kiln) changed its outputs silently, and a
 * truncated one killed the process with SIGBUS. Its runs now fail, naming
 * the file, once they see it changed (at most 10 ms after); a file renamed
 * over or touched (same bytes) leaves the engine running. */
static int run_ok(kiln_engine *e) {
    kiln_context *c = NULL;
    float y[2 * 8];
    int ok = kiln_context_create(e, &c) == KILN_OK && run_batch(c, ref_x, 2, y) && max_err(y, ref_y, 16) < 1e-5f;
    kiln_context_free(c);
    return ok;
}

TEST(test_engine_file_written_in_place) {
    kiln_engine *e = build_tiny(1, 2, 3);
    if (!e) return;
    char path[64], other[80];
    snprintf(path, sizeof path, "/tmp/kiln_test_inplace_%ld.kiln", (long)getpid());
    snprintf(other, sizeof other, "%s.other", path);
    void *b2 = NULL;
    size_t n2 = 0;
    CHECK_OK(kiln_engine_set_metadata(e, "k", "bbbb"));
    CHECK_OK(kiln_engine_serialize(e, &b2, &n2)); /* the same size, other bytes */
    CHECK_OK(kiln_engine_set_metadata(e, "k", "aaaa"));
    struct timespec wait = {0, 30 * 1000 * 1000};
    for (int how = 0; how < 5 && b2; how++) {
        CHECK_OK(kiln_engine_save(e, path));
        kiln_engine *m = NULL;
        CHECK_OK(kiln_engine_load(path, &m));
        if (!m) break;
        CHECK(run_ok(m));
        if (how == 0 || how == 1) { /* in place: other bytes; or truncated */
            FILE *f = fopen(path, how == 0 ? "r+b" : "wb");
            if (f && how == 0) CHECK(fwrite(b2, 1, n2, f) == n2);
            if (f) fclose(f);
        } else if (how == 2) { /* renamed over */
            FILE *f = fopen(other, "wb");
            if (f) {
                CHECK(fwrite(b2, 1, n2, f) == n2);
                fclose(f);
            }
            CHECK(rename(other, path) == 0);
        } else if (how == 3) { /* touched */
            CHECK(utimensat(AT_FDCWD, path, NULL, 0) == 0);
        } else { /* in place, other bytes, its times set back (touch -r; probe5: it went unseen) */
            struct stat st0;
            CHECK(stat(path, &st0) == 0);
            FILE *f = fopen(path, "r+b");
            if (f) CHECK(fwrite(b2, 1, n2, f) == n2);
            if (f) fclose(f);
            struct timespec times[2] = {st0.st_atim, st0.st_mtim};
            CHECK(utimensat(AT_FDCWD, path, times, 0) == 0);
        }
        nanosleep(&wait, NULL);
        kiln_context *c = NULL;
        CHECK_OK(kiln_context_create(m, &c));
        float y[2 * 8];
        int64_t dims[2] = {2, 16};
        CHECK_OK(kiln_context_set_input(c, "x", KILN_DTYPE_FLOAT32, 2, dims, ref_x));
        if (how < 2 || how == 4) {
            CHECK_ERR(kiln_context_run(c), KILN_ERR_IO, "was written in place since it was loaded");
            CHECK(strstr(kiln_last_error(), path) != NULL);
            CHECK_ERR(kiln_context_run(c), KILN_ERR_IO, "was written in place"); /* and stays so */
        } else {
            CHECK(run_batch(c, ref_x, 2, y) && max_err(y, ref_y, 16) < 1e-5f);
        }
        kiln_context_free(c);
        kiln_engine_free(m);
    }
    kiln_free(b2);
    remove(path);
    kiln_engine_free(e);
}

/* Input bytes not aligned to their element (numpy.frombuffer(b, offset=1),
 * a packed record): the kernels' float loads there are undefined behaviour
 * (UBSan: "load of misaligned address" in the GEMM, unary and pool kernels).
 * The run reads an aligned copy: the layers see aligned data (a layer
 * callback looks) and the outputs equal the aligned run's. */
static int see_x(kiln_context *c, int layer, kiln_layer_event ev, void *user) {
    kiln_tensor_view v;
    if (layer == 0 && ev == KILN_LAYER_BEFORE && kiln_context_tensor(c, "x", &v) == KILN_OK)
        *(uintptr_t *)user = (uintptr_t)v.data;
    return 0;
}

TEST(test_misaligned_input) {
    kiln_engine *e = build_tiny(1, 2, 3);
    if (!e) return;
    kiln_context *c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    uintptr_t seen = 0;
    CHECK_OK(kiln_context_set_layer_callback(c, see_x, &seen));
    static unsigned char raw[3 * 16 * 4 + 16];
    float y[3 * 8];
    for (int off = 1; c && off < 4; off++) {
        memcpy(raw + off, ref_x, sizeof(float) * 3 * 16);
        CHECK(run_batch(c, (const float *)(const void *)(raw + off), 3, y));
        CHECK(max_err(y, ref_y, 3 * 8) < 1e-5f);
        CHECK(seen != 0 && seen % sizeof(float) == 0);
    }
    /* an output buffer at an odd address: written by a copy after the run */
    static unsigned char out_raw[3 * 8 * 4 + 16];
    for (int off = 1; c && off < 4; off++) {
        CHECK_OK(kiln_context_set_output(c, "y", out_raw + off, sizeof(float) * 3 * 8));
        CHECK(run_batch(c, ref_x, 3, y)); /* (run_batch copies the output out) */
        memcpy(y, out_raw + off, sizeof(float) * 3 * 8);
        CHECK(max_err(y, ref_y, 3 * 8) < 1e-5f);
    }
    kiln_context_free(c);
    kiln_engine_free(e);
}

/* Per-layer profiling: every layer timed once per run, totals cleared when
 * turned on again, refused when off; kiln_engine_layer_info in range. */
TEST(test_layer_profile) {
    kiln_engine *e = build_tiny(1, 3, 8);
    if (!e) return;
    kiln_context *c = NULL;
    CHECK_OK(kiln_context_create(e, &c));
    int n = kiln_engine_num_layers(e);
    CHECK(n > 0);
    double us = -1;
    int64_t runs = -1;
    CHECK(kiln_context_layer_time(c, 0, &us, &runs) == KILN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(kiln_last_error(), "profiling is off") != NULL);
    CHECK_OK(kiln_context_set_profiling(c, 1));
    float y[3 * 8];
    for (int k = 0; k < 3; k++) CHECK(run_batch(c, ref_x, 3, y));
    CHECK(max_err(y, ref_y, 3 * 8) < 1e-5f); /* profiled runs compute the same */
    double sum = 0;
    for (int i = 0; i < n; i++) {
        CHECK_OK(kiln_context_layer_time(c, i, &us, &runs));
        CHECK(runs == 3 && us >= 0);
        sum += us;
        kiln_layer_info li;
        CHECK_OK(kiln_engine_layer_info(e, i, &li));
        CHECK(li.name && li.name[0] && li.op && li.kernel && li.tactic && li.device == KILN_DEVICE_CPU);
    }
    CHECK(sum > 0);
    CHECK(kiln_context_layer_time(c, n, &us, &runs) == KILN_ERR_INVALID_ARGUMENT);
    kiln_layer_info li;
    CHECK(kiln_engine_layer_info(e, -1, &li) == KILN_ERR_INVALID_ARGUMENT);
    CHECK_OK(kiln_context_set_profiling(c, 1)); /* on again: cleared */
    CHECK_OK(kiln_context_layer_time(c, 0, &us, &runs));
    CHECK(runs == 0 && us == 0);
    CHECK_OK(kiln_context_set_profiling(c, 0));
    CHECK(kiln_context_layer_time(c, 0, &us, &runs) == KILN_ERR_INVALID_ARGUMENT);
    kiln_context_free(c);
    kiln_engine_free(e);
}

/* device names come from the backend registry (what the CLI's --device takes) */
TEST(test_device_names) {
    kiln_device d = (kiln_device)-1;
    CHECK_OK(kiln_device_from_name("cpu", &d));
    CHECK(d == KILN_DEVICE_CPU);
    CHECK_OK(kiln_device_from_name("cuda", &d)); /* known whether or not it is built in */
    CHECK(d == KILN_DEVICE_CUDA);
    CHECK_ERR(kiln_device_from_name("tpu", &d), KILN_ERR_INVALID_ARGUMENT, "known: cpu, cuda");
    CHECK_ERR(kiln_device_from_name("", &d), KILN_ERR_INVALID_ARGUMENT, "unknown device ''");
    CHECK_ERR(kiln_device_from_name("CPU", &d), KILN_ERR_INVALID_ARGUMENT, "unknown device");
    CHECK_ERR(kiln_device_from_name(NULL, &d), KILN_ERR_INVALID_ARGUMENT, "(null)");
    CHECK_ERR(kiln_device_from_name("cpu", NULL), KILN_ERR_INVALID_ARGUMENT, "dev is NULL");
    CHECK(d == KILN_DEVICE_CUDA); /* a failure leaves *dev alone */
    int idx = -1;
    CHECK_OK(kiln_device_parse("cuda:3", &d, &idx));
    CHECK(d == KILN_DEVICE_CUDA && idx == 3);
    CHECK_OK(kiln_device_parse("cpu", &d, &idx));
    CHECK(d == KILN_DEVICE_CPU && idx == 0);
    CHECK_OK(kiln_device_parse("cpu:0", &d, &idx));
    CHECK_OK(kiln_device_parse("cuda:1023", &d, &idx));
    CHECK(d == KILN_DEVICE_CUDA && idx == 1023);
    const char *bad[] = {"cpu:1", "cuda:", "cuda:1024", "cuda:-1", "cuda:+1", "cuda:1x", "cuda:99999999999999999999",
                         "tpu:0", ":0", "", "cuda:0:1", "cuda:\x1b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d = (kiln_device)7;
        CHECK_ERR(kiln_device_parse(bad[i], &d, &idx), KILN_ERR_INVALID_ARGUMENT, "expected cpu, cpu:0, cuda or cuda:N");
        CHECK(d == (kiln_device)7); /* untouched on error */
    }
    CHECK_ERR(kiln_device_parse("cuda:\x1b[31m", &d, &idx), KILN_ERR_INVALID_ARGUMENT, "\\x1b"); /* escaped */
    /* a spec of any length: the message still says what is expected, its
     * copy of the spec cut before a UTF-8 character (probe3) */
    {
        static char longspec[20000];
        memset(longspec, 'c', sizeof longspec - 1);
        CHECK_ERR(kiln_device_parse(longspec, &d, &idx), KILN_ERR_INVALID_ARGUMENT,
                  "cccccc...': expected cpu, cpu:0, cuda or cuda:N");
        CHECK_ERR(kiln_device_from_name(longspec, &d), KILN_ERR_INVALID_ARGUMENT, "...' (known: cpu, cuda)");
        char e8[100] = "a"; /* 'a', then 49 'é' (2 bytes each): byte 48 is inside one */
        for (int i = 0; i < 49; i++) strcat(e8, "\xc3\xa9");
        CHECK_ERR(kiln_device_parse(e8, &d, &idx), KILN_ERR_INVALID_ARGUMENT, "\xc3\xa9...': expected");
        CHECK_ERR(kiln_device_from_name(e8, &d), KILN_ERR_INVALID_ARGUMENT, "\xc3\xa9...' (known");
    }
    CHECK_ERR(kiln_device_parse(NULL, &d, &idx), KILN_ERR_INVALID_ARGUMENT, "spec is NULL");
    CHECK_ERR(kiln_device_parse("cpu", &d, NULL), KILN_ERR_INVALID_ARGUMENT, "index is NULL");
    CHECK(!strcmp(kiln_engine_describe(NULL, 0), "") && strstr(kiln_last_error(), "engine is NULL"));
    CHECK(!strcmp(kiln_device_name(KILN_DEVICE_CPU), "cpu"));
    CHECK(!strcmp(kiln_device_name(KILN_DEVICE_CUDA), "cuda"));
    CHECK(kiln_device_name((kiln_device)7) == NULL);
}

/* kiln_printable: names with control characters (C0, DEL, C1 in UTF-8) as
 * \xNN, cut to the buffer, never the raw name when there is no room. */
TEST(test_printable) {
    char buf[64];
    const char *plain = "conv/1:0 \xe4\xb8\xad"; /* UTF-8 passes through */
    CHECK(kiln_printable(plain, buf, sizeof buf) == plain);
    CHECK(!strcmp(kiln_printable("a\x1b[2J\n\x7f\xc2\x9b", buf, sizeof buf), "a\\x1b[2J\\x0a\\x7f\\xc2\\x9b"));
    CHECK(!strcmp(kiln_printable(NULL, buf, sizeof buf), "(null)"));
    CHECK(!strcmp(kiln_printable("a\x1b", NULL, 0), "?"));
    CHECK(!strcmp(kiln_printable("a\x1b", buf, 0), "?"));
    CHECK(!strcmp(kiln_printable("ab\x1b", buf, 5), "ab")); /* "\x1b" does not fit: cut before it */
    CHECK(!strcmp(kiln_printable("ab\x1b", buf, 7), "ab\\x1b"));
    char big[4 * 300 + 1], name[301];
    memset(name, 0x1b, 300);
    name[300] = 0;
    CHECK(strlen(kiln_printable(name, big, sizeof big)) == 1200);
    CHECK(strlen(kiln_printable(name, buf, sizeof buf)) == 60);
}

int main(void) {
    if (!load_ref()) {
        fprintf(stderr, "cannot read %s (run from the repository root)\n", IO);
        return 1;
    }
    RUN(test_model_info);
    RUN(test_run_matches_reference);
    RUN(test_serialize_roundtrip);
    RUN(test_bad_inputs);
    RUN(test_api_misuse_table);
    RUN(test_bad_models);
    RUN(test_lstm_activations);
    RUN(test_opset18_forms);
    RUN(test_threads_share_engine);
    RUN(test_threads_describe_engine);
    RUN(test_context_in_use);
    RUN(test_context_free_during_run);
    RUN(test_fork_child_uses_parent_context);
    RUN(test_engine_file_written_in_place);
    RUN(test_misaligned_input);
    RUN(test_layer_profile);
    RUN(test_device_names);
    RUN(test_printable);
    return test_summary();
}
