/*
 * kiln.h -- the public C interface of kiln, an ahead-of-time inference
 * compiler and runtime.
 *
 * If a function, type or constant is not declared in this file, it is not
 * part of kiln's API and may change without notice.
 *
 * The life of a model, in four objects:
 *
 *   kiln_model    a parsed model (ONNX).              kiln_model_load_onnx
 *   kiln_builder  build configuration: device,        kiln_builder_create
 *                 precision, shape profiles, threads.
 *   kiln_engine   the optimized, immutable plan plus  kiln_build / kiln_engine_load
 *                 its weights; serializable, shared
 *                 by any number of contexts.
 *   kiln_context  per-thread activations and I/O      kiln_context_create
 *                 bindings; runs the engine.
 *
 * Conventions
 *   - Every fallible function returns a kiln_status. KILN_OK is 0. On failure
 *     kiln_last_error() returns a message (thread-local, valid until the next
 *     kiln call on the same thread) saying what went wrong and where.
 *   - Constructors take `T **out` last. On success the caller owns *out and
 *     releases it with the matching kiln_T_free(); on failure *out is NULL.
 *   - Every kiln_*_free() accepts NULL.
 *   - An engine is immutable (but for its user metadata:
 *     kiln_engine_set_metadata) and may be used from any number of threads.
 *     A context is used by one thread at a time; its engine must outlive it.
 *     A kiln_context_* call that finds its context in use by another call
 *     (another thread's, or the run whose layer callback made it) fails
 *     with KILN_ERR_INVALID_ARGUMENT and changes nothing (docs/c-api.md).
 *   - Pointers returned by getters are borrowed from the object that returned
 *     them and are valid while it lives (and, for outputs, until the next run).
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define KILN_API __declspec(dllexport)
#else
#define KILN_API __attribute__((visibility("default")))
#endif

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
#define KILN_VERSION_NUMBER \
    (KILN_VERSION_MAJOR * 10000 + KILN_VERSION_MINOR * 100 + KILN_VERSION_PATCH)

/* Largest tensor rank kiln handles. */
#define KILN_MAX_RANK 8

/* Status codes. Append-only: values are never renumbered. */
typedef enum kiln_status {
    KILN_OK = 0,
    KILN_ERR_INVALID_ARGUMENT = 1, /* caller misuse: bad name, shape, dtype, NULL */
    KILN_ERR_UNSUPPORTED = 2,      /* op, dtype, opset or option not implemented */
    KILN_ERR_MODEL = 3,            /* the model is malformed or inconsistent */
    KILN_ERR_FORMAT = 4,           /* an engine file is truncated, corrupt, foreign or too new */
    KILN_ERR_OUT_OF_MEMORY = 5,
    KILN_ERR_DEVICE = 6,           /* device (GPU) failure */
    KILN_ERR_IO = 7,               /* file system error */
    KILN_ERR_INTERNAL = 8          /* a kiln bug: please report */
} kiln_status;

/* Element types. Values match ONNX's TensorProto.DataType. */
typedef enum kiln_dtype {
    KILN_DTYPE_UNDEFINED = 0,
    KILN_DTYPE_FLOAT32 = 1,
    KILN_DTYPE_UINT8 = 2,
    KILN_DTYPE_INT8 = 3,
    KILN_DTYPE_UINT16 = 4,
    KILN_DTYPE_INT16 = 5,
    KILN_DTYPE_INT32 = 6,
    KILN_DTYPE_INT64 = 7,
    KILN_DTYPE_STRING = 8,
    KILN_DTYPE_BOOL = 9,
    KILN_DTYPE_FLOAT16 = 10,
    KILN_DTYPE_FLOAT64 = 11,
    KILN_DTYPE_UINT32 = 12,
    KILN_DTYPE_UINT64 = 13,
    KILN_DTYPE_BFLOAT16 = 16
} kiln_dtype;

typedef enum kiln_device {
    KILN_DEVICE_CPU = 0,
    KILN_DEVICE_CUDA = 1
} kiln_device;

typedef enum kiln_precision {
    KILN_PRECISION_FP32 = 0, /* full fp32 */
    KILN_PRECISION_TF32 = 1, /* fp32 storage, tf32 matrix math where available */
    KILN_PRECISION_FP16 = 2,
    KILN_PRECISION_BF16 = 3
} kiln_precision;

typedef struct kiln_model kiln_model;
typedef struct kiln_builder kiln_builder;
typedef struct kiln_engine kiln_engine;
typedef struct kiln_context kiln_context;

/* ---- library ---------------------------------------------------------- */

KILN_API int kiln_version_number(void);        /* KILN_VERSION_NUMBER of the library */
KILN_API const char *kiln_version_string(void); /* "0.1.0" */
KILN_API const char *kiln_status_name(kiln_status s); /* "KILN_ERR_MODEL" */
/* Message of the last failure on this thread ("" if none). */
KILN_API const char *kiln_last_error(void);
KILN_API const char *kiln_dtype_name(kiln_dtype t);   /* "float32"; "?" if unknown */
/* A name (of a model's or engine's node, tensor, input, output) fit to
 * print: s itself when it holds no control characters, else a copy in buf
 * (cap bytes, cut to fit; cap >= 4 * strlen(s) + 1 never cuts) with each
 * byte of a control character (0x01-0x1f, 0x7f, and U+0080..U+009F in
 * UTF-8) written as \xNN; "(null)" for NULL, "?" when buf is NULL or cap 0. Names come from model and engine files, which may hold terminal
 * escapes, carriage returns or newlines meant to forge or hide what a
 * terminal or log shows; kiln's own messages and `kiln` print names so. */
KILN_API const char *kiln_printable(const char *s, char *buf, size_t cap);
KILN_API size_t kiln_dtype_size(kiln_dtype t);        /* bytes per element; 0 if none */
/* Whether this kiln has a backend for `dev` and, for GPUs, at least one
 * device is present (1) or not (0). */
KILN_API int kiln_device_available(kiln_device dev);
/* The device a name stands for ("cpu", "cuda": the backends this kiln knows,
 * built in or not), as the CLI's --device takes it; KILN_ERR_INVALID_ARGUMENT
 * naming the known devices for any other name. */
KILN_API kiln_status kiln_device_from_name(const char *name, kiln_device *dev);
/* A device with its index, as the CLI's --device and Python take it: "NAME"
 * (index 0) or "NAME:N" with N decimal digits, 0 for the CPU and 0..1023 for
 * a GPU ("cpu", "cpu:0", "cuda", "cuda:1"). Whether that GPU is present is
 * for the builder / context to say. KILN_ERR_INVALID_ARGUMENT naming the
 * spec for anything else. */
KILN_API kiln_status kiln_device_parse(const char *spec, kiln_device *dev, int *index);
/* The name of a device ("cpu", "cuda"); NULL for a value kiln does not know. */
KILN_API const char *kiln_device_name(kiln_device dev);
/* Releases memory that kiln returned to the caller (kiln_engine_serialize). */
KILN_API void kiln_free(void *p);

/* Description of one model or engine input/output. dims[i] < 0 marks a
 * dynamic dimension; `dim_names[i]` is its symbolic name (or NULL). rank -1:
 * the rank itself is known only when the engine runs (an output of an If
 * whose branches give different ranks); dims are then unused. */
typedef struct kiln_io_info {
    const char *name;
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_RANK];
    const char *dim_names[KILN_MAX_RANK];
} kiln_io_info;

/* ---- model ------------------------------------------------------------ */

/* Parses an ONNX model file. External data files are read relative to the
 * model's folder. Free with kiln_model_free. */
KILN_API kiln_status kiln_model_load_onnx(const char *path, kiln_model **out);
/* Parses an ONNX model from memory. `base_dir` (may be NULL) is where external
 * data files are looked for. The bytes are not retained. */
KILN_API kiln_status kiln_model_load_onnx_memory(const void *data, size_t size,
                                                 const char *base_dir, kiln_model **out);
KILN_API void kiln_model_free(kiln_model *m);
KILN_API int kiln_model_num_inputs(const kiln_model *m);
KILN_API int kiln_model_num_outputs(const kiln_model *m);
KILN_API kiln_status kiln_model_input_info(const kiln_model *m, int index, kiln_io_info *out);
KILN_API kiln_status kiln_model_output_info(const kiln_model *m, int index, kiln_io_info *out);
/* Warnings loading found: a graph output whose declared dtype or shape
 * contradicts what the graph computes (the engine gives what the graph
 * computes), an ai.onnx opset newer than the ones kiln supports (1 to 18).
 * The model loads all the same; the CLI prints them on `kiln build`.
 * kiln_model_warning returns warning `index` (owned by the model) or NULL
 * past the last. */
KILN_API int kiln_model_num_warnings(const kiln_model *m);
KILN_API const char *kiln_model_warning(const kiln_model *m, int index);

/* ---- builder ---------------------------------------------------------- */

KILN_API kiln_status kiln_builder_create(kiln_builder **out);
KILN_API void kiln_builder_free(kiln_builder *b);
/* Device and index the engine is built for: the CPU is index 0 only, CUDA
 * GPUs 0..1023 (as kiln_device_parse reads "cpu" / "cuda:N"). */
KILN_API kiln_status kiln_builder_set_device(kiln_builder *b, kiln_device dev, int index);
KILN_API kiln_status kiln_builder_set_precision(kiln_builder *b, kiln_precision p);
/* Threads used by contexts of the built engine (CPU). 0 = one per core. */
KILN_API kiln_status kiln_builder_set_threads(kiln_builder *b, int threads);
/* Upper bound on scratch memory a layer may use, in bytes. 0 = no limit. */
KILN_API kiln_status kiln_builder_set_workspace(kiln_builder *b, size_t bytes);
/* File that keeps kernel timings between builds (read if present, written after). */
KILN_API kiln_status kiln_builder_set_timing_cache(kiln_builder *b, const char *path);
/* Graph optimization level: 0 = none (the plan runs the model's nodes as
 * they are, after constant folding), 1 = all fusions and layout choices
 * (default). */
KILN_API kiln_status kiln_builder_set_optimization(kiln_builder *b, int level);
/* Kernel tuning: when non-zero (default), layers that several kernels can
 * run are timed on the target and the fastest is kept; 0 takes each layer's
 * default kernel without timing. */
KILN_API kiln_status kiln_builder_set_tuning(kiln_builder *b, int on);
/* What kiln_build prints on stderr (errors are never printed: they come
 * back as a status and kiln_last_error). 0: nothing. 1 (default): progress
 * lines while tuning takes more than 2 s ("kiln: tuning: N layers timed
 * ..."), and notes: a timing cache of an older version is timed again, a
 * device layer's tactic that computes something else than the others is
 * not used, and warnings about values whose declared dtype or shape the
 * inputs' shape profiles do not give (the engine uses the computed one;
 * docs/onnx.md). 2: also every tuned layer's candidates with their times and a
 * summary of where the tuning time went (the environment variable
 * KILN_TUNE_VERBOSE=1 asks for these at any level). Other levels fail with
 * KILN_ERR_INVALID_ARGUMENT. */
KILN_API kiln_status kiln_builder_set_verbosity(kiln_builder *b, int level);
/* Fast math: when non-zero, the tuner may also choose kernels that trade
 * float32 accuracy for speed (on the CPU: kiln's Winograd F(4x4, 3x3) and
 * F(2x2, 3x3) convolutions, whose transforms round more than a direct
 * convolution: about 2 to 3 times PyTorch's own float32 error against
 * float64 on 100-layer networks). 0 (default): only kernels that keep
 * float32 results as close to exact as PyTorch's and ONNX Runtime's, as
 * cuDNN's FMA math mode and a TensorRT build without TF32 do. Recorded in
 * the engine (kiln_engine_describe, `kiln inspect`) and in the timing
 * cache's keys, so a cache made with one setting is not used for the other. */
KILN_API kiln_status kiln_builder_set_fast_math(kiln_builder *b, int on);
/* Shape profile of one input: every dimension that is dynamic in the model
 * gets a range. min <= opt <= max elementwise; rank must match the model.
 * Inputs with dynamic dimensions and no profile get min=opt=max=1 for them. */
KILN_API kiln_status kiln_builder_set_profile(kiln_builder *b, const char *input_name, int rank,
                                              const int64_t *min, const int64_t *opt,
                                              const int64_t *max);
/* Graph optimizer passes, each of which can be switched off for a build
 * (to find the one at fault when an engine's results are wrong; see
 * docs/debugging.md). For 0 <= index < kiln_pass_count(), kiln_pass_name
 * gives the pass's name ("fuse_conv") and kiln_pass_description a line
 * about what it does; NULL for other indices. Static strings. */
KILN_API int kiln_pass_count(void);
KILN_API const char *kiln_pass_name(int index);
KILN_API const char *kiln_pass_description(int index);
/* Switches pass `name` off for builds with b (once per pass; repeatable
 * for several). A name that is not a pass fails with
 * KILN_ERR_INVALID_ARGUMENT, listing the passes. Optimization level 0
 * (kiln_builder_set_optimization) switches every pass off. */
KILN_API kiln_status kiln_builder_disable_pass(kiln_builder *b, const char *name);
/* Device engines: when non-zero, a node without a kernel on the device makes
 * the build fail (with the list of such nodes) instead of running on the CPU. */
KILN_API kiln_status kiln_builder_set_strict_device(kiln_builder *b, int strict);
/* User metadata: a key/value string the built engine carries in its file
 * (see kiln_engine_metadata). `value` NULL removes the key. Keys are 1..255
 * bytes of printable ASCII without spaces ('!'..'~'); values are UTF-8
 * without NUL, at most 16 MiB; at most 1024 keys. kiln never interprets
 * them (front ends keep what they know about the model there; kiln's Python
 * package uses keys starting with "python."). Both strings are copied. */
KILN_API kiln_status kiln_builder_set_metadata(kiln_builder *b, const char *key, const char *value);
/* Builds an engine for `m` (which is not modified and may be freed after). */
KILN_API kiln_status kiln_build(const kiln_builder *b, const kiln_model *m, kiln_engine **out);

/* ---- engine ----------------------------------------------------------- */

/* Loads an engine file (mapped, not copied). Free with kiln_engine_free. */
KILN_API kiln_status kiln_engine_load(const char *path, kiln_engine **out);
/* Loads an engine from memory; the bytes are copied. */
KILN_API kiln_status kiln_engine_load_memory(const void *data, size_t size, kiln_engine **out);
/* Serializes to a new buffer the caller frees with kiln_free. */
KILN_API kiln_status kiln_engine_serialize(const kiln_engine *e, void **data, size_t *size);
/* Writes the engine to `path` atomically (temporary file, then rename).
 * An existing file there is replaced only if it is empty or an engine (a
 * link there is replaced itself): anything else (a model, its external
 * weights, a timing cache) fails with KILN_ERR_IO and is kept. */
KILN_API kiln_status kiln_engine_save(const kiln_engine *e, const char *path);
KILN_API void kiln_engine_free(kiln_engine *e);
KILN_API int kiln_engine_num_inputs(const kiln_engine *e);
KILN_API int kiln_engine_num_outputs(const kiln_engine *e);
KILN_API kiln_status kiln_engine_input_info(const kiln_engine *e, int index, kiln_io_info *out);
KILN_API kiln_status kiln_engine_output_info(const kiln_engine *e, int index, kiln_io_info *out);
/* Shape profile of input `index` (dims of rank info.rank). */
KILN_API kiln_status kiln_engine_input_profile(const kiln_engine *e, int index, int64_t *min,
                                               int64_t *opt, int64_t *max);
KILN_API kiln_device kiln_engine_device(const kiln_engine *e);
/* Index of the device (GPU) the engine runs on; 0 for CPU engines. */
KILN_API int kiln_engine_device_index(const kiln_engine *e);
/* Number of layers (nodes) in the engine's optimized plan. */
KILN_API int kiln_engine_num_layers(const kiln_engine *e);
/* One layer of the plan (strings owned by the engine). */
typedef struct kiln_layer_info {
    const char *name;    /* the layer's name (fused layers: "conv1+bn1+relu") */
    const char *op;      /* op type, e.g. "Conv", "FusedConv" */
    const char *kernel;  /* kernel that runs it, e.g. "cpu:FusedConv", "cuda.binary" */
    const char *tactic;  /* chosen tactic's name, or "" for layers without tactics */
    float tactic_us;     /* the tactic's time measured at build (0: not timed) */
    kiln_device device;  /* where it runs (a CUDA engine's CPU layers: KILN_DEVICE_CPU) */
} kiln_layer_info;
KILN_API kiln_status kiln_engine_layer_info(const kiln_engine *e, int layer, kiln_layer_info *out);
/* The tensors layer `layer` reads and writes: how many (-1 for a NULL
 * engine or a layer out of range), and the name of each (borrowed from the
 * engine; NULL for an absent optional input or output, or an index out of
 * range). Tensors keep the
 * model's names; those kiln made (a fused layer's constants, the fp16 copy
 * of a graph output, layout conversions) have "/kiln_" in their names. */
KILN_API int kiln_engine_layer_num_inputs(const kiln_engine *e, int layer);
KILN_API int kiln_engine_layer_num_outputs(const kiln_engine *e, int layer);
KILN_API const char *kiln_engine_layer_input(const kiln_engine *e, int layer, int index);
KILN_API const char *kiln_engine_layer_output(const kiln_engine *e, int layer, int index);
/* The model's (ONNX) nodes layer `layer` was made from: every node a fused
 * layer replaced, in the order of the pattern, or an unfused layer's own
 * node; 0 for a layer kiln added (the Casts of an fp16 engine, layout
 * conversions) and -1 for a NULL engine or a layer out of range. Names are
 * borrowed from the engine (NULL for an index out of range). Engines
 * written before kiln recorded sources give the layer name split at '+'. */
KILN_API int kiln_engine_layer_num_sources(const kiln_engine *e, int layer);
KILN_API const char *kiln_engine_layer_source(const kiln_engine *e, int layer, int index);
KILN_API kiln_precision kiln_engine_precision(const kiln_engine *e);
/* A human-readable (or JSON, when json != 0) description of the engine:
 * inputs, outputs, profiles, layers and their kernels, memory. The string is
 * owned by the engine; "" with kiln_last_error() set if e is NULL or memory
 * ran out. */
KILN_API const char *kiln_engine_describe(kiln_engine *e, int json);

/* User metadata (set with kiln_builder_set_metadata before the build or
 * kiln_engine_set_metadata after it). It is saved in the engine file (the
 * optional META section, docs/engine-format.md) and comes back when the file
 * is loaded, from a path or from memory; `kiln inspect` lists it.
 * kiln_engine_metadata returns the value of `key`, or NULL when the engine
 * has none. Entries are numbered 0..kiln_engine_num_metadata(e)-1 in key
 * order (bytewise); kiln_engine_metadata_at gives entry `index` (either
 * out-pointer may be NULL). Strings are borrowed from the engine: valid until
 * the key is set again or the engine is freed. */
KILN_API const char *kiln_engine_metadata(const kiln_engine *e, const char *key);
KILN_API int kiln_engine_num_metadata(const kiln_engine *e);
KILN_API kiln_status kiln_engine_metadata_at(const kiln_engine *e, int index, const char **key,
                                             const char **value);
/* Sets (or, with value NULL, removes) a metadata entry of an engine, with the
 * rules of kiln_builder_set_metadata; kiln_engine_serialize and
 * kiln_engine_save then write it. This is the one change an engine allows:
 * do not call it while another thread reads this engine's metadata or
 * description, or serializes or saves it (which write the metadata);
 * strings kiln_engine_describe and kiln_engine_metadata returned are freed
 * by it.
 * Contexts and runs are not affected. */
KILN_API kiln_status kiln_engine_set_metadata(kiln_engine *e, const char *key, const char *value);

/* ---- context ---------------------------------------------------------- */

KILN_API kiln_status kiln_context_create(const kiln_engine *e, kiln_context **out);
/* Frees c. While another thread's kiln_context_* call (a run) has c, waits
 * for it to return first; called from the layer callback of c's own run,
 * leaves c to that run, which frees it as it returns (docs/c-api.md). */
KILN_API void kiln_context_free(kiln_context *c);
/* Threads this context uses (overrides the engine's setting). 0 = one per core. */
KILN_API kiln_status kiln_context_set_threads(kiln_context *c, int threads);
/* Binds an input by name. The data is not copied: it must stay valid and
 * unchanged until kiln_context_run returns. (Host bytes this context handed
 * out, such as an output of its last run from kiln_context_get_output fed
 * back in a recurrent loop, are copied when the run starts, since the run
 * writes that memory; device bytes of the context are refused. So are host
 * bytes not aligned to their element size copied, to aligned memory.) The shape must lie inside the
 * engine's profile and the dtype must match. For a CUDA engine `data` may be
 * host memory or device memory of the engine's GPU (told apart by the CUDA
 * runtime; device memory is used without a copy). A bool input holds one
 * byte per element, 0 (false) or 1 (true), as numpy's and PyTorch's bools
 * do: kiln_context_run fails with KILN_ERR_INVALID_ARGUMENT, naming the
 * input and the element, on any other byte in host memory (convert other
 * data with x != 0 first); bool data in device memory is not checked and
 * must hold 0 and 1 only. */
KILN_API kiln_status kiln_context_set_input(kiln_context *c, const char *name, kiln_dtype dtype,
                                            int rank, const int64_t *dims, const void *data);
/* Optionally binds caller memory for an output (`capacity` bytes; host or,
 * for CUDA engines, device memory). If the output needs more, run fails with
 * KILN_ERR_INVALID_ARGUMENT. NULL unbinds. The bytes an output takes must
 * not overlap an input's or another output's: run fails with
 * KILN_ERR_INVALID_ARGUMENT naming both (layers may still read an input
 * when an output is written). */
KILN_API kiln_status kiln_context_set_output(kiln_context *c, const char *name, void *data,
                                             size_t capacity);
/* For CUDA engines: the cudaStream_t to run on (NULL: the context's own).
 * On the context's own stream a run first waits for the work queued before
 * it on the legacy default stream (stream 0: a cudaMemcpy into an input's
 * device buffer, a kernel writing it). On a stream given here, ordering
 * against other streams is the caller's, as with TensorRT's enqueue. */
KILN_API kiln_status kiln_context_set_stream(kiln_context *c, void *stream);
/* Runs the engine on the bound inputs. For CUDA engines the work is queued
 * on the context's stream and run returns once it is complete. */
KILN_API kiln_status kiln_context_run(kiln_context *c);
/* Reads an output of the last run. *data is host memory, borrowed: valid
 * until the next run or kiln_context_free (a CUDA engine's output is copied
 * to the host once, on the first call). Any of dtype/rank/dims/data may be
 * NULL. */
KILN_API kiln_status kiln_context_get_output(kiln_context *c, const char *name, kiln_dtype *dtype,
                                             int *rank, int64_t *dims, const void **data);
/* CUDA engines: the device address of an output of the last run (borrowed
 * like get_output's). Shape and dtype come from kiln_context_get_output. */
KILN_API kiln_status kiln_context_get_output_device(kiln_context *c, const char *name,
                                                    const void **data);

/* Limits the activation memory (intermediate tensors and kernel scratch,
 * host and device together; not the weights) this context may hold, in
 * bytes; 0 (the default) means no limit. A run whose memory plan needs
 * more fails with KILN_ERR_OUT_OF_MEMORY and a message giving the need and
 * the limit, before anything is allocated; so does a run whose
 * data-dependent tensors would take it past the limit. */
KILN_API kiln_status kiln_context_set_memory_limit(kiln_context *c, size_t bytes);

/* fp16/bf16 device engines: keeps layer `layer` (an ONNX node name; a
 * fused layer containing it counts) in float32, with casts around it.
 * Only KILN_PRECISION_FP32 is accepted. A name that matches no layer makes
 * kiln_build fail. */
KILN_API kiln_status kiln_builder_set_layer_precision(kiln_builder *b, const char *layer,
                                                     kiln_precision p);

/* Per-layer profiling, in the manner of trtexec --dumpProfile. While on,
 * every run times each layer (wall clock; a GPU layer's time ends when the
 * stream has finished it, so a profiled run is slower, and CUDA Graphs are
 * not used) and adds it to that layer's total. Turning it on (again) clears
 * the totals; off frees them. */
KILN_API kiln_status kiln_context_set_profiling(kiln_context *c, int on);
/* Total microseconds of layer `layer` (as kiln_engine_layer_info numbers
 * them) over the profiled runs, and the number of those runs. */
KILN_API kiln_status kiln_context_layer_time(const kiln_context *c, int layer, double *total_us,
                                             int64_t *runs);

/* Debug mode for the memory plan (off by default; the environment variable
 * KILN_DEBUG_ARENA=1 turns it on for new contexts, so that `kiln run` and
 * any program can use it unchanged). While on, every run checks that no
 * layer reads bytes of the activation arenas that it did not get from the
 * live producer of that input: the runtime records, per arena region, which
 * value owns it and which layer wrote it; before each layer runs it checks
 * that each input's region is still owned by that input and that no output
 * or workspace overlaps an input (except a view of it, or an output the
 * plan puts in place of it). Host regions are poisoned (a NaN pattern for
 * float types, 0xAB bytes otherwise) before a layer is handed them, and a
 * float output that still holds the pattern after its layer ran is an
 * error too. A failure is KILN_ERR_INTERNAL, naming the layer, the value
 * and the layer that overwrote it. Runs are slower (every output is written
 * twice and scanned once) and CUDA Graphs are not used; outputs of runs
 * that pass are the same as without it. See docs/memory.md. */
KILN_API kiln_status kiln_context_set_debug_arena(kiln_context *c, int on);

/* ---- debugging: the intermediate tensors of a run ----------------------
 * A layer callback sees every layer of a run as it happens, and may read
 * the tensors the layer reads (before it runs) and writes (after it ran),
 * e.g. to compare them with a reference (`kiln debug compare`,
 * docs/debugging.md). The run's memory plan is unchanged, so a tensor
 * read there holds what the engine's layers themselves read and wrote. */

/* A tensor as kiln_context_tensor gives it: host memory, dense and
 * row-major in the order of its shape, whatever layout the engine keeps it
 * in (tensors that convolution layers pass NHWC or channel-blocked are
 * converted to the NCHW order of their shape, and those they pass as bf16
 * under a float32 type are widened to float32). */
typedef struct kiln_tensor_view {
    const char *name;      /* the tensor's name in the engine (borrowed from it) */
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_RANK];
    const void *data;      /* borrowed: valid until the callback returns (NULL if empty) */
} kiln_tensor_view;

typedef enum kiln_layer_event {
    KILN_LAYER_BEFORE = 0, /* the layer is about to run */
    KILN_LAYER_AFTER = 1   /* the layer has run (a device layer's work is complete when
                              a tensor is read) */
} kiln_layer_event;

/* Called from kiln_context_run, on its thread, before and after every
 * layer (numbered as kiln_engine_layer_info numbers them). Return 0 to go
 * on; anything else stops the run, which then fails with
 * KILN_ERR_INVALID_ARGUMENT ("the layer callback stopped the run ...").
 * The callback may call kiln_context_tensor and the kiln_engine_* getters,
 * nothing that runs or changes the context (such calls fail: the context
 * is in use). */
typedef int (*kiln_layer_callback)(kiln_context *c, int layer, kiln_layer_event event, void *user);
/* Sets the context's layer callback and the pointer passed to it (NULL
 * cb: none, the default). While one is set, runs do not use CUDA Graphs. */
KILN_API kiln_status kiln_context_set_layer_callback(kiln_context *c, kiln_layer_callback cb, void *user);
/* Inside a layer callback only: the tensor `name` (kiln_engine_layer_input
 * and _output give the names) as the run holds it at this moment. Held are
 * the engine's inputs and constants and every tensor a layer has written
 * that a later layer (or the caller: graph outputs) still reads; so a
 * layer's inputs in its KILN_LAYER_BEFORE event and its outputs in its
 * KILN_LAYER_AFTER event (in that event, an input the layer read for the
 * last time may already hold its output: in-place layers). Device tensors
 * are copied to the host and layouts converted as needed into memory the
 * context owns. Fails with KILN_ERR_INVALID_ARGUMENT outside a callback,
 * for a name the engine does not have and for a tensor not held. */
KILN_API kiln_status kiln_context_tensor(kiln_context *c, const char *name, kiln_tensor_view *out);
/* With memory reuse off (on by default) the context neither plans nor
 * reuses activation memory: every tensor of a run gets a buffer of its own,
 * nothing is written over another tensor (no in-place layers, no views),
 * and all are kept to the end of the run. Runs need much more memory (the
 * memory limit still applies) and time. Results that change with reuse off
 * point at the memory plan. */
KILN_API kiln_status kiln_context_set_memory_reuse(kiln_context *c, int on);

/* CUDA engines: whether the context captures its launch sequence into a
 * CUDA Graph and replays it (on by default; see docs/cuda.md for when a
 * context can use one). Host inputs, and device inputs or outputs bound to
 * another address than at the last run, are copied through buffers of the
 * context's own from then on, one copy each per run, so that a graph can
 * replay. The environment variable KILN_CUDA_GRAPHS=0 turns it off for new
 * contexts. No-op for CPU engines. */
KILN_API kiln_status kiln_context_set_cuda_graphs(kiln_context *c, int on);

#ifdef __cplusplus
}
#endif
#endif /* KILN_H */
