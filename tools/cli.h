/* cli.h -- what the `kiln` tool's command files share (definitions in
 * kiln.c): messages and exit codes, option parsing, shape lists, input
 * files and binding, shape profiles, the fp32 CPU reference engine and the
 * comparison of two tensors. */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

/* ---- messages: "kiln: error: ..." on stderr; each returns its exit code ---- */
int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A usage error (exit 2), then "Try 'kiln CMD --help'." */
int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A failed kiln call: "what: <kiln_last_error()>". */
int fail_kiln(kiln_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A failed load of `path` ("model", "engine"). */
int fail_load(kiln_status s, const char *what, const char *path);
double now_s(void);
/* A name from a model or engine (input, output, layer, tensor, source
 * node) for stdout: control characters as \xNN (kiln_printable, in buf,
 * a char array). Messages through fail() and the others are escaped whole. */
#define PRINTABLE(s, buf) kiln_printable((s), (buf), sizeof(buf))
#define NAME_CAP 1024
/* "[1x3x224x224]"; dynamic dims (< 0) as their name or "?"; "[unknown rank]" for rank -1. */
const char *fmt_dims(char *buf, size_t cap, int rank, const int64_t *dims, const char *const *names);
#define DIMS_CAP (KILN_MAX_RANK * 48 + 8)

/* ---- option parsing ---- */
typedef struct optdef {
    const char *name;  /* "--output" */
    const char *alias; /* "-o" or NULL */
    bool has_arg;
} optdef;

typedef struct argscan {
    int argc;
    char **argv;
    int i;
    const char *cmd;
    bool only_positional; /* after "--" */
} argscan;

enum { SCAN_END = -1, SCAN_POSITIONAL = -2, SCAN_ERROR = -3 };

/* The index of the next option in defs (and its value), SCAN_POSITIONAL
 * (value = the argument), SCAN_END, or SCAN_ERROR (message printed). */
int scan_next(argscan *s, const optdef *defs, int ndefs, const char **val);
bool parse_int64(const char *s, int64_t lo, int64_t hi, int64_t *out);
bool parse_double(const char *s, double lo, double hi, double *out);
/* An integer option value, or a usage error (false). */
bool opt_int(const char *cmd, const char *opt, const char *val, int64_t lo, int64_t hi, int64_t *out);
/* --device cpu | cuda | cuda:N, or a usage error (false). */
bool parse_device(const char *cmd, const char *val, int *device, int64_t *index);
/* --disable-pass NAME: sets NAME's bit (index in kiln_pass_name) in *mask,
 * or a usage error listing the passes (false). */
bool parse_pass(const char *cmd, const char *name, uint32_t *mask);
/* kiln_builder_disable_pass for every pass in mask; EXIT_OK or EXIT_FAIL (printed). */
int disable_passes(kiln_builder *b, uint32_t mask);
/* --layer-precision name:fp32[,name2:fp32...] on b; false (message printed) on error. */
bool set_layer_precisions(const char *cmd, kiln_builder *b, const char *list);
/* One of --fp32/--tf32/--fp16/--bf16 (p); a usage error (false) for a second, other one. */
bool set_precision_flag(const char *cmd, int *precision, int p);

/* ---- shape lists: "name:1x3x224x224,name2:1x128" ---- */
typedef struct shape_spec {
    char *name;
    int rank;
    int64_t dims[KILN_MAX_RANK];
} shape_spec;

typedef struct shape_list {
    shape_spec *v;
    int n, cap;
} shape_list;

void shapes_free(shape_list *l);
const shape_spec *shapes_find(const shape_list *l, const char *name);
bool shapes_parse(const char *cmd, const char *opt, const char *text, shape_list *l);
/* Sets b's shape profiles from --shapes, --min-shapes, --opt-shapes and
 * --max-shapes (sl[0..3]) after checking them against the model's inputs;
 * notes inputs with dynamic dims and no shapes unless quiet. EXIT_OK or
 * the exit code (message printed). */
int set_profiles(const char *cmd, const kiln_model *m, kiln_builder *b, const shape_list sl[4], bool quiet);

/* ---- elements ---- */
double load_f64(kiln_dtype t, const void *p, int64_t i);
bool dtype_is_float(kiln_dtype t);

/* ---- engine inputs: --input NAME=FILE.npy, random data otherwise ---- */
typedef struct input_file {
    char *name; /* NULL: the engine's only input */
    const char *path;
} input_file;

typedef struct input_files {
    input_file *v;
    int n, cap;
} input_files;

void input_files_free(input_files *l);
bool input_files_add(input_files *l, const char *spec);
/* An --input NAME=FILE.npy (or FILE.npy) option: added to files, or the exit code (message printed). */
int input_arg(const char *cmd, const char *val, input_files *files);

typedef struct bound_input {
    kiln_io_info info;
    kiln_dtype dtype;
    int rank;
    int64_t dims[KILN_MAX_RANK];
    void *data; /* owned */
    const char *source; /* file path, or NULL when random */
} bound_input;

/* Prepares and binds every input of e to c: from the files, else (when
 * random_ok; otherwise an error naming the input) random with the `shapes`
 * shape or the profile's opt shape. bufs: one per input. */
int bind_inputs(kiln_engine *e, kiln_context *c, const input_files *files, const shape_list *shapes,
                uint64_t seed, bool random_ok, bound_input *bufs, bool quiet);
void free_inputs(bound_input *bufs, int n);

/* ---- the reference: the fp32 CPU plan of a model ---- */
/* Builds model m (loaded from `model_path`, for messages) as an fp32 CPU
 * engine whose profile is the shapes of the n_in bound inputs (their order
 * is the model's), optimized (all passes) or not (the model's nodes as they
 * are, after constant folding), and a context with those inputs bound.
 * `what` prefixes messages ("--compare"). EXIT_OK or EXIT_FAIL (printed). */
int reference_engine(const kiln_model *m, const char *model_path, const bound_input *bufs, int n_in,
                     bool optimize, const char *what, kiln_engine **ref, kiln_context **rc);

/* ---- comparing a tensor with its reference ---- */
typedef struct tensor_diff {
    bool is_float;     /* both float: the errors below; else only `differ` */
    int64_t n;         /* elements */
    int64_t differ;    /* elements that differ (non-float tensors) */
    int64_t nonfinite; /* elements where NaN/Inf do not match */
    double max_abs;    /* max |a - ref| over finite pairs */
    int64_t at;        /* the element of max_abs */
    double max_ref;    /* max |ref| over finite elements */
    double max_rel;    /* max |a - ref| / |ref| over |ref| >= 1e-3 max|ref| */
} tensor_diff;
void tensor_diff_compute(kiln_dtype dt, const void *a, kiln_dtype rdt, const void *r, int64_t n, tensor_diff *d);
/* max_abs / max_ref (max_abs when max_ref is 0). */
double tensor_diff_norm(const tensor_diff *d);

/* ---- subcommands in their own files ---- */
int cmd_debug(int argc, char **argv); /* debug.c */

#endif
