/* kiln.c -- the `kiln` command-line tool: build, run, inspect and benchmark
 * engines. Uses only the public API (kiln.h) and the .npy helpers (npy.h).
 *
 * Exit status: 0 success; 1 a failure (bad model, engine or input file,
 * build or run error); 2 a usage error (unknown command or option, missing
 * or malformed argument). Errors go to stderr as "kiln: error: <message>".
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "kiln.h"
#include "npy.h"
#include "../src/core/utf8.h" /* header-only: the library's UTF-8 check, compiled in */

/* ---- messages --------------------------------------------------------------- */

/* "kiln: error: " and the message on stderr, control characters as \xNN
 * (kiln_printable): messages name a model's inputs, outputs and layers,
 * whose names may hold terminal escapes or newlines. */
static void print_error(const char *fmt, va_list ap) {
    char msg[4096], esc[4 * sizeof msg];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "kiln: error: %s", kiln_printable(msg, esc, sizeof esc));
}

int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    print_error(fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return EXIT_FAIL;
}

int usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    print_error(fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (cmd) fprintf(stderr, "Try 'kiln %s --help'.\n", cmd);
    else fprintf(stderr, "Try 'kiln --help'.\n");
    return EXIT_USAGE;
}

/* A failed kiln call: "what: <status>: <kiln_last_error()>". */
int fail_kiln(kiln_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    print_error(fmt, ap);
    const char *msg = kiln_last_error(); /* (kiln's messages come with control characters made '?') */
    fprintf(stderr, ": %s\n", msg && *msg ? msg : kiln_status_name(s));
    va_end(ap);
    return EXIT_FAIL;
}

/* A failed load of `path`: names the file once even when kiln's message does too. */
int fail_load(kiln_status s, const char *what, const char *path) {
    const char *msg = kiln_last_error();
    if (msg && *msg && strstr(msg, path)) return fail("cannot load %s: %s", what, msg);
    return fail_kiln(s, "cannot load %s '%s'", what, path);
}

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "[1x3x224x224]" ("[]" for a scalar, "[unknown rank]" for rank -1); dynamic dims
 * (< 0) print their name or "?" and then " x " separates the dims ("[batch x 784]"). */
const char *fmt_dims(char *buf, size_t cap, int rank, const int64_t *dims, const char *const *names) {
    if (rank < 0) { /* not known before a run (an If whose branches differ in rank) */
        snprintf(buf, cap, "[unknown rank]");
        return buf;
    }
    bool symbolic = false;
    for (int i = 0; i < rank; i++) symbolic = symbolic || dims[i] < 0;
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < rank && n < cap; i++) {
        const char *sep = i ? (symbolic ? " x " : "x") : "";
        char pn[NAME_CAP]; /* a symbolic dim's name comes from the model */
        if (dims[i] >= 0) n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, sep, dims[i]);
        else n += (size_t)snprintf(buf + n, cap - n, "%s%s", sep, names && names[i] ? PRINTABLE(names[i], pn) : "?");
    }
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

/* ---- option parsing ----------------------------------------------------------- */

/* Returns the index of the next option in defs (and its value), SCAN_POSITIONAL
 * (value = the argument), SCAN_END, or SCAN_ERROR (message printed). */
int scan_next(argscan *s, const optdef *defs, int ndefs, const char **val) {
    *val = NULL;
    if (s->i >= s->argc) return SCAN_END;
    const char *arg = s->argv[s->i++];
    if (s->only_positional || arg[0] != '-' || arg[1] == '\0') {
        *val = arg;
        return SCAN_POSITIONAL;
    }
    if (strcmp(arg, "--") == 0) {
        s->only_positional = true;
        return scan_next(s, defs, ndefs, val);
    }
    const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    for (int k = 0; k < ndefs; k++) {
        bool match = (strlen(defs[k].name) == len && strncmp(defs[k].name, arg, len) == 0) ||
                     (defs[k].alias && strlen(defs[k].alias) == len && strncmp(defs[k].alias, arg, len) == 0);
        if (!match) continue;
        if (!defs[k].has_arg) {
            if (eq) {
                usage_error(s->cmd, "option %s takes no value", defs[k].name);
                return SCAN_ERROR;
            }
            return k;
        }
        if (eq) {
            *val = eq + 1;
        } else {
            if (s->i >= s->argc) {
                usage_error(s->cmd, "option %s needs a value", defs[k].name);
                return SCAN_ERROR;
            }
            *val = s->argv[s->i++];
        }
        return k;
    }
    usage_error(s->cmd, "unknown option '%s'", arg);
    return SCAN_ERROR;
}

bool parse_int64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s || isspace((unsigned char)*s)) return false;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool parse_double(const char *s, double lo, double hi, double *out) {
    if (!s || !*s || isspace((unsigned char)*s)) return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

/* Parses an integer option value or prints a usage error. */
bool opt_int(const char *cmd, const char *opt, const char *val, int64_t lo, int64_t hi, int64_t *out) {
    if (parse_int64(val, lo, hi, out)) return true;
    usage_error(cmd, "%s: expected an integer in [%" PRId64 ", %" PRId64 "], got '%s'", opt, lo, hi, val);
    return false;
}

bool parse_device(const char *cmd, const char *val, int *device, int64_t *index) {
    kiln_device dev = KILN_DEVICE_CPU;
    int i = 0;
    if (kiln_device_parse(val, &dev, &i) != KILN_OK) {
        usage_error(cmd, "--device: %s", kiln_last_error());
        return false;
    }
    *device = dev;
    *index = i;
    return true;
}

bool set_precision_flag(const char *cmd, int *precision, int p) {
    if (*precision >= 0 && *precision != p) {
        usage_error(cmd, "give only one of --fp32, --tf32, --fp16, --bf16");
        return false;
    }
    *precision = p;
    return true;
}

/* ---- shape lists: "name:1x3x224x224,name2:1x128" ------------------------------- */

void shapes_free(shape_list *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i].name);
    free(l->v);
    memset(l, 0, sizeof *l);
}

const shape_spec *shapes_find(const shape_list *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->v[i].name, name) == 0) return &l->v[i];
    return NULL;
}

/* Appends the specs in `text`; the name is everything before the last ':' of an
 * item (so names such as "input:0" work); dims are 'x'-separated (empty for a
 * scalar). Returns false after printing a usage error. */
bool shapes_parse(const char *cmd, const char *opt, const char *text, shape_list *l) {
    const char *p = text;
    if (!*p) {
        usage_error(cmd, "%s: empty value (expected name:dims, e.g. input:1x3x224x224)", opt);
        return false;
    }
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char *item = malloc(len + 1);
        if (!item) {
            fail("out of memory");
            return false;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        char *colon = strrchr(item, ':');
        if (!colon || colon == item) {
            usage_error(cmd, "%s: '%s' is not name:dims (e.g. input:1x3x224x224)", opt, item);
            free(item);
            return false;
        }
        *colon = '\0';
        shape_spec sp = {.name = item, .rank = 0};
        char *d = colon + 1;
        while (*d) {
            char *x = strchr(d, 'x');
            if (x) *x = '\0';
            int64_t v;
            if (sp.rank >= KILN_MAX_RANK || !parse_int64(d, 0, INT64_MAX / 2, &v)) {
                usage_error(cmd, "%s: bad dims for '%s' (expected non-negative integers joined by 'x', "
                                 "at most %d)", opt, item, KILN_MAX_RANK);
                free(item);
                return false;
            }
            sp.dims[sp.rank++] = v;
            if (!x) break;
            d = x + 1;
            if (!*d) {
                usage_error(cmd, "%s: bad dims for '%s' (trailing 'x')", opt, item);
                free(item);
                return false;
            }
        }
        if (shapes_find(l, item)) {
            usage_error(cmd, "%s: input '%s' given twice", opt, item);
            free(item);
            return false;
        }
        if (l->n == l->cap) {
            int cap = l->cap ? l->cap * 2 : 4;
            shape_spec *nv = realloc(l->v, (size_t)cap * sizeof *nv);
            if (!nv) {
                free(item);
                fail("out of memory");
                return false;
            }
            l->v = nv;
            l->cap = cap;
        }
        l->v[l->n++] = sp;
        p += len;
        if (*p == ',') {
            p++;
            if (!*p) {
                usage_error(cmd, "%s: trailing ','", opt);
                return false;
            }
        }
    }
    return true;
}

/* ---- element conversion and statistics ---------------------------------------- */

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else {
        bits = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to inf */
    if (absx < 0x38800000u) {                                   /* subnormal or zero */
        if (absx < 0x33000000u) return (uint16_t)sign;
        uint32_t man = (absx & 0x7fffff) | 0x800000;
        int shift = 126 - (int)(absx >> 23); /* 14..24 */
        uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((absx >> 13) - ((127 - 15) << 10)), rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static float bf16_to_float(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t float_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

double load_f64(kiln_dtype t, const void *p, int64_t i) {
    switch (t) {
    case KILN_DTYPE_FLOAT32: return ((const float *)p)[i];
    case KILN_DTYPE_FLOAT64: return ((const double *)p)[i];
    case KILN_DTYPE_FLOAT16: return half_to_float(((const uint16_t *)p)[i]);
    case KILN_DTYPE_BFLOAT16: return bf16_to_float(((const uint16_t *)p)[i]);
    case KILN_DTYPE_INT8: return ((const int8_t *)p)[i];
    case KILN_DTYPE_INT16: return ((const int16_t *)p)[i];
    case KILN_DTYPE_INT32: return ((const int32_t *)p)[i];
    case KILN_DTYPE_INT64: return (double)((const int64_t *)p)[i];
    case KILN_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    case KILN_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case KILN_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    case KILN_DTYPE_UINT64: return (double)((const uint64_t *)p)[i];
    case KILN_DTYPE_BOOL: return ((const uint8_t *)p)[i] ? 1 : 0;
    default: return NAN;
    }
}

bool dtype_is_float(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT32 || t == KILN_DTYPE_FLOAT64 || t == KILN_DTYPE_FLOAT16 ||
           t == KILN_DTYPE_BFLOAT16;
}

static void print_value(kiln_dtype t, const void *p, int64_t i) {
    if (dtype_is_float(t)) printf("%.6g", load_f64(t, p, i));
    else if (t == KILN_DTYPE_INT64) printf("%" PRId64, ((const int64_t *)p)[i]);
    else if (t == KILN_DTYPE_UINT64) printf("%" PRIu64, ((const uint64_t *)p)[i]);
    else if (t == KILN_DTYPE_BOOL) printf("%s", ((const uint8_t *)p)[i] ? "true" : "false");
    else printf("%.0f", load_f64(t, p, i));
}

/* ---- random inputs ------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Floats uniform in [-1, 1); integers in [0, 10); bools 0/1. */
static bool fill_random(kiln_dtype t, void *data, int64_t n, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = splitmix64(&s);
        float u = (float)((double)(r >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
        switch (t) {
        case KILN_DTYPE_FLOAT32: ((float *)data)[i] = u; break;
        case KILN_DTYPE_FLOAT64: ((double *)data)[i] = (double)(r >> 11) / (double)(1ull << 53) * 2.0 - 1.0; break;
        case KILN_DTYPE_FLOAT16: ((uint16_t *)data)[i] = float_to_half(u); break;
        case KILN_DTYPE_BFLOAT16: ((uint16_t *)data)[i] = float_to_bf16(u); break;
        case KILN_DTYPE_INT8: ((int8_t *)data)[i] = (int8_t)(r % 10); break;
        case KILN_DTYPE_INT16: ((int16_t *)data)[i] = (int16_t)(r % 10); break;
        case KILN_DTYPE_INT32: ((int32_t *)data)[i] = (int32_t)(r % 10); break;
        case KILN_DTYPE_INT64: ((int64_t *)data)[i] = (int64_t)(r % 10); break;
        case KILN_DTYPE_UINT8: ((uint8_t *)data)[i] = (uint8_t)(r % 10); break;
        case KILN_DTYPE_UINT16: ((uint16_t *)data)[i] = (uint16_t)(r % 10); break;
        case KILN_DTYPE_UINT32: ((uint32_t *)data)[i] = (uint32_t)(r % 10); break;
        case KILN_DTYPE_UINT64: ((uint64_t *)data)[i] = r % 10; break;
        case KILN_DTYPE_BOOL: ((uint8_t *)data)[i] = (uint8_t)(r >> 63); break;
        default: return false;
        }
    }
    return true;
}

/* ---- engine inputs ---------------------------------------------------------------- */

void input_files_free(input_files *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i].name);
    free(l->v);
    memset(l, 0, sizeof *l);
}

bool input_files_add(input_files *l, const char *spec) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        input_file *nv = realloc(l->v, (size_t)cap * sizeof *nv);
        if (!nv) return false;
        l->v = nv;
        l->cap = cap;
    }
    const char *eq = strchr(spec, '=');
    input_file f = {NULL, spec};
    if (eq) {
        f.name = malloc((size_t)(eq - spec) + 1);
        if (!f.name) return false;
        memcpy(f.name, spec, (size_t)(eq - spec));
        f.name[eq - spec] = '\0';
        f.path = eq + 1;
    }
    l->v[l->n++] = f;
    return true;
}

int input_arg(const char *cmd, const char *val, input_files *files) {
    if (!*val || (strchr(val, '=') && !strchr(val, '=')[1]))
        return usage_error(cmd, "--input: expected NAME=FILE.npy, got '%s'", val);
    return input_files_add(files, val) ? EXIT_OK : fail("out of memory");
}

static void list_names(const kiln_engine *e, bool inputs, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    int count = inputs ? kiln_engine_num_inputs(e) : kiln_engine_num_outputs(e);
    for (int i = 0; i < count && n < cap; i++) {
        kiln_io_info info;
        if ((inputs ? kiln_engine_input_info(e, i, &info) : kiln_engine_output_info(e, i, &info)) != KILN_OK)
            continue;
        n += (size_t)snprintf(buf + n, cap - n, "%s'%s'", i ? ", " : "", info.name);
    }
}

static int engine_input_index(const kiln_engine *e, const char *name) {
    for (int i = 0; i < kiln_engine_num_inputs(e); i++) {
        kiln_io_info info;
        if (kiln_engine_input_info(e, i, &info) == KILN_OK && strcmp(info.name, name) == 0) return i;
    }
    return -1;
}

/* Checks a shape against input k's rank and profile; prints the error. */
static bool check_shape(const kiln_engine *e, int k, const kiln_io_info *info, int rank, const int64_t *dims,
                        const char *source) {
    /* `source` is a file name or "--shapes": "x.npy has shape ..." / "--shapes gives shape ..." */
    const char *verb = strcmp(source, "--shapes") == 0 ? " gives" : " has";
    char a[DIMS_CAP], b[DIMS_CAP], c[DIMS_CAP];
    if (rank != info->rank) {
        fail("input '%s': %s%s shape %s (rank %d), the engine expects rank %d %s", info->name, source, verb,
             fmt_dims(a, sizeof a, rank, dims, NULL), rank, info->rank,
             fmt_dims(b, sizeof b, info->rank, info->dims, info->dim_names));
        return false;
    }
    int64_t mn[KILN_MAX_RANK], opt[KILN_MAX_RANK], mx[KILN_MAX_RANK];
    if (kiln_engine_input_profile(e, k, mn, opt, mx) != KILN_OK) {
        for (int i = 0; i < rank; i++) mn[i] = mx[i] = info->dims[i];
    }
    for (int i = 0; i < rank; i++) {
        if (mn[i] >= 0 && mx[i] >= 0 && (dims[i] < mn[i] || dims[i] > mx[i])) {
            if (mn[i] == mx[i])
                fail("input '%s': %s%s shape %s, but dim %d must be %" PRId64 " (engine shape %s)", info->name,
                     source, verb, fmt_dims(a, sizeof a, rank, dims, NULL), i, mn[i],
                     fmt_dims(b, sizeof b, info->rank, info->dims, info->dim_names));
            else
                fail("input '%s': %s%s shape %s, outside the engine's profile: dim %d must be in "
                     "[%" PRId64 ", %" PRId64 "] (min %s, max %s)", info->name, source, verb,
                     fmt_dims(a, sizeof a, rank, dims, NULL), i, mn[i], mx[i],
                     fmt_dims(b, sizeof b, rank, mn, NULL), fmt_dims(c, sizeof c, rank, mx, NULL));
            return false;
        }
    }
    return true;
}

/* Prepares and binds every engine input: from --input files, else (when
 * `random_ok`) random with the --shapes shape or the profile's opt shape; an
 * input left out without `random_ok` is an error naming it. bufs has one
 * slot per input. */
int bind_inputs(kiln_engine *e, kiln_context *c, const input_files *files, const shape_list *shapes,
                uint64_t seed, bool random_ok, bound_input *bufs, bool quiet) {
    int n_in = kiln_engine_num_inputs(e);
    char names[2048], a[DIMS_CAP];
    /* Every --input and --shapes name must be an engine input. */
    for (int j = 0; j < files->n; j++) {
        if (!files->v[j].name) {
            if (n_in != 1) {
                list_names(e, true, names, sizeof names);
                return fail("--input %s: name the input (name=file.npy); the engine has %d inputs: %s",
                            files->v[j].path, n_in, names);
            }
            kiln_io_info info;
            if (kiln_engine_input_info(e, 0, &info) != KILN_OK) return fail_kiln(KILN_ERR_INTERNAL, "input 0");
            files->v[j].name = strdup(info.name);
            if (!files->v[j].name) return fail("out of memory");
        }
        if (engine_input_index(e, files->v[j].name) < 0) {
            list_names(e, true, names, sizeof names);
            return fail("--input: the engine has no input named '%s' (inputs: %s)", files->v[j].name, names);
        }
        for (int k = 0; k < j; k++)
            if (strcmp(files->v[k].name, files->v[j].name) == 0)
                return fail("--input: input '%s' given twice", files->v[j].name);
    }
    for (int j = 0; j < shapes->n; j++)
        if (engine_input_index(e, shapes->v[j].name) < 0) {
            list_names(e, true, names, sizeof names);
            return fail("--shapes: the engine has no input named '%s' (inputs: %s)", shapes->v[j].name, names);
        }
    if (!random_ok) { /* every input from a file: name the ones left out */
        size_t n = 0;
        int missing = 0;
        names[0] = '\0';
        for (int k = 0; k < n_in; k++) {
            kiln_io_info info;
            if (kiln_engine_input_info(e, k, &info) != KILN_OK) continue;
            bool given = false;
            for (int j = 0; j < files->n; j++)
                given = given || strcmp(files->v[j].name, info.name) == 0;
            if (given || n >= sizeof names) continue;
            n += (size_t)snprintf(names + n, sizeof names - n, "%s'%s'", missing++ ? ", " : "", info.name);
        }
        if (missing)
            return fail("input%s %s not given: pass --input NAME=FILE.npy for %s, or --random-inputs to run "
                        "on random data", missing > 1 ? "s" : "", names, missing > 1 ? "each" : "it");
    }
    for (int k = 0; k < n_in; k++) {
        bound_input *b = &bufs[k];
        kiln_status st = kiln_engine_input_info(e, k, &b->info);
        if (st != KILN_OK) return fail_kiln(st, "reading input %d of the engine", k);
        const input_file *f = NULL;
        for (int j = 0; j < files->n; j++)
            if (strcmp(files->v[j].name, b->info.name) == 0) f = &files->v[j];
        if (f) {
            npy_array arr;
            char err[1024];
            if (npy_read(f->path, &arr, err, sizeof err)) return fail("input '%s': %s", b->info.name, err);
            b->dtype = arr.dtype;
            b->rank = arr.rank;
            memcpy(b->dims, arr.dims, sizeof b->dims);
            b->data = arr.data; /* take ownership */
            b->source = f->path;
            if (arr.dtype != b->info.dtype)
                return fail("input '%s': %s has dtype %s (shape %s), the engine expects %s", b->info.name, f->path,
                            kiln_dtype_name(arr.dtype), fmt_dims(a, sizeof a, arr.rank, arr.dims, NULL),
                            kiln_dtype_name(b->info.dtype));
            if (!check_shape(e, k, &b->info, arr.rank, arr.dims, f->path)) return EXIT_FAIL;
            /* --shapes for an input read from a file: the file's shape wins,
             * and a measurement at another shape than asked for went unseen */
            const shape_spec *sp = shapes_find(shapes, b->info.name);
            if (sp && (sp->rank != arr.rank || memcmp(sp->dims, arr.dims, sizeof(int64_t) * (size_t)arr.rank))) {
                char a2[DIMS_CAP];
                return fail("input '%s': --shapes gives %s but %s holds %s (leave the input out of --shapes, or "
                            "give a file of that shape)",
                            b->info.name, fmt_dims(a2, sizeof a2, sp->rank, sp->dims, NULL), f->path,
                            fmt_dims(a, sizeof a, arr.rank, arr.dims, NULL));
            }
        } else {
            const shape_spec *sp = shapes_find(shapes, b->info.name);
            b->dtype = b->info.dtype;
            b->source = NULL;
            if (sp) {
                b->rank = sp->rank;
                memcpy(b->dims, sp->dims, sizeof b->dims);
                if (!check_shape(e, k, &b->info, sp->rank, sp->dims, "--shapes")) return EXIT_FAIL;
            } else {
                int64_t mn[KILN_MAX_RANK], opt[KILN_MAX_RANK], mx[KILN_MAX_RANK];
                b->rank = b->info.rank;
                if (kiln_engine_input_profile(e, k, mn, opt, mx) == KILN_OK)
                    memcpy(b->dims, opt, sizeof(int64_t) * (size_t)b->rank);
                else
                    memcpy(b->dims, b->info.dims, sizeof(int64_t) * (size_t)b->rank);
                for (int i = 0; i < b->rank; i++)
                    if (b->dims[i] < 0)
                        return fail("input '%s': dim %d is dynamic and has no profile; give --shapes %s:...",
                                    b->info.name, i, b->info.name);
            }
            int64_t numel = 1;
            for (int i = 0; i < b->rank; i++)
                if (__builtin_mul_overflow(numel, b->dims[i], &numel))
                    return fail("input '%s': shape is too large", b->info.name);
            size_t es = kiln_dtype_size(b->dtype);
            if (es == 0 || (uint64_t)numel > SIZE_MAX / es)
                return fail("input '%s': cannot make random data of dtype %s", b->info.name,
                            kiln_dtype_name(b->dtype));
            b->data = malloc((size_t)numel * es + 1);
            if (!b->data) return fail("input '%s': out of memory", b->info.name);
            if (!fill_random(b->dtype, b->data, numel, seed * 1000003u + (uint64_t)k))
                return fail("input '%s': cannot make random data of dtype %s", b->info.name,
                            kiln_dtype_name(b->dtype));
        }
        st = kiln_context_set_input(c, b->info.name, b->dtype, b->rank, b->dims, b->data);
        if (st != KILN_OK)
            return fail_kiln(st, "input '%s' (%s %s from %s)", b->info.name, kiln_dtype_name(b->dtype),
                             fmt_dims(a, sizeof a, b->rank, b->dims, NULL), b->source ? b->source : "random data");
        char pn[NAME_CAP];
        if (!quiet)
            printf("input  '%s': %s %s  (%s)\n", PRINTABLE(b->info.name, pn), kiln_dtype_name(b->dtype),
                   fmt_dims(a, sizeof a, b->rank, b->dims, NULL), b->source ? b->source : "random");
    }
    return EXIT_OK;
}

void free_inputs(bound_input *bufs, int n) {
    if (!bufs) return;
    for (int i = 0; i < n; i++) free(bufs[i].data);
    free(bufs);
}

/* ---- build -------------------------------------------------------------------------- */

static const char build_help[] =
    "Usage: kiln build MODEL.onnx [-o ENGINE.kiln] [options]\n"
    "\n"
    "Compiles an ONNX model into an engine file.\n"
    "\n"
    "Options:\n"
    "  -o, --output FILE        engine file to write (default: MODEL with .onnx replaced by .kiln)\n"
    "                           (never the model itself or the --timing-cache file)\n"
    "  --shapes SPECS           shape of inputs, min = opt = max; SPECS is\n"
    "                           name:1x3x224x224[,name2:dims...] (a name may contain ':';\n"
    "                           the last ':' separates the dims; 'name:' is a scalar)\n"
    "  --min-shapes SPECS       smallest shapes of the profile\n"
    "  --opt-shapes SPECS       shapes to optimize for\n"
    "  --max-shapes SPECS       largest shapes of the profile\n"
    "                           (for an input given only some of min/opt/max: opt defaults to\n"
    "                           max, else min; min and max default to opt. Inputs with dynamic\n"
    "                           dims and no shapes get 1 for those dims.)\n"
    "  --fp32 | --tf32 | --fp16 | --bf16   precision (default fp32)\n"
    "  --fast-math              let the tuner also choose kernels that are faster but round\n"
    "                           more (CPU: Winograd 3x3 convolutions, ~2-3x the float32 error\n"
    "                           of PyTorch against float64 on deep networks; CUDA fp32: cuDNN's\n"
    "                           Winograd and FFT convolution algorithms). Default: only\n"
    "                           kernels as accurate as PyTorch's and ONNX Runtime's float32\n"
    "  --layer-precision LIST   fp16/bf16 engines: layers kept in fp32, as\n"
    "                           name:fp32[,name2:fp32...] (ONNX node names; the last ':'\n"
    "                           separates the precision)\n"
    "  --device DEV             cpu (default, also cpu:0), cuda or cuda:N\n"
    "  --strict-device          refuse to build when a layer has no kernel on DEV and would run\n"
    "                           on the CPU between device layers (the error names the layers)\n"
    "  --threads N              threads for contexts of the engine (0 = one per core; default 0)\n"
    "  --workspace MIB          largest scratch memory a layer may use, in MiB (0 = no limit)\n"
    "  --timing-cache FILE      kernel timing cache (read if present, written after)\n"
    "  --disable-pass NAME      switch graph optimizer pass NAME off (repeatable; 'kiln debug\n"
    "                           passes' lists them), e.g. to find the pass at fault with\n"
    "                           'kiln debug compare'\n"
    "  -q, --quiet              print nothing on success (no warnings, no tuning progress)\n"
    "  -h, --help               show this help\n"
    "\n"
    "Environment (tuning):\n"
    "  KILN_TUNE_VERBOSE=1      every tuned layer's candidates and times, where the layer's\n"
    "                           tuning time went, and a summary with the 10 longest layers\n"
    "  KILN_CUDA_PLAN_THREADS=N make the cuDNN plans of the convolutions to tune on N host\n"
    "                           threads while the GPU times (auto, the default: the host's\n"
    "                           cores less one, at most 16; 0: one at a time)\n";

/* Path p made absolute with its folder's symbolic links resolved (its
 * last name kept as given: it may not exist yet, and a file written there
 * replaces a link of that name, not what it points to); malloc'd, NULL
 * where its folder cannot be resolved. */
static char *canonical_path(const char *p) {
    const char *slash = strrchr(p, '/'), *base = slash ? slash + 1 : p;
    size_t nd = slash ? (slash == p ? 1 : (size_t)(slash - p)) : 1;
    char *dir = malloc(nd + 1);
    if (!dir) return NULL;
    memcpy(dir, slash ? p : ".", nd);
    dir[nd] = '\0';
    char *rd = realpath(dir, NULL);
    free(dir);
    if (!rd) return NULL;
    size_t n = strlen(rd) + strlen(base) + 2;
    char *out = malloc(n);
    if (out) snprintf(out, n, "%s%s%s", rd, strcmp(rd, "/") ? "/" : "", base);
    free(rd);
    return out;
}

/* Whether writing file `out` (a temporary file renamed over it) replaces
 * file `in` as read: out's name (its folder resolved; a link of that name
 * is replaced, not what it points to) is where in's links lead. A hard
 * link keeps the old file under its other name. kiln build refuses to
 * write its engine over the model it reads or over its timing cache: the
 * engine replaced either without a word. */
static bool replaces_file(const char *out, const char *in) {
    char *co = canonical_path(out), *ci = realpath(in, NULL);
    if (!ci) ci = canonical_path(in);
    bool same = co && ci ? !strcmp(co, ci) : !strcmp(out, in);
    free(co);
    free(ci);
    return same;
}

/* --layer-precision name:fp32[,name2:fp32...]; false (message printed) on error */
bool set_layer_precisions(const char *cmd, kiln_builder *b, const char *list) {
    const char *p = list;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[1024];
        if (len == 0 || len >= sizeof item) {
            usage_error(cmd, "--layer-precision: bad item in '%s'", list);
            return false;
        }
        memcpy(item, p, len);
        item[len] = 0;
        char *colon = strrchr(item, ':');
        if (!colon || colon == item || strcmp(colon + 1, "fp32") != 0) {
            usage_error(cmd, "--layer-precision: expected name:fp32, got '%s'", item);
            return false;
        }
        *colon = 0;
        kiln_status st = kiln_builder_set_layer_precision(b, item, KILN_PRECISION_FP32);
        if (st != KILN_OK) {
            fail_kiln(st, "--layer-precision");
            return false;
        }
        p += len;
        if (*p == ',') p++;
    }
    return true;
}

typedef struct prof_entry {
    const char *name;
    int rank;
    int64_t mn[KILN_MAX_RANK], opt[KILN_MAX_RANK], mx[KILN_MAX_RANK];
    bool have_mn, have_opt, have_mx;
} prof_entry;

int set_profiles(const char *cmd, const kiln_model *m, kiln_builder *b, const shape_list sl[4], bool quiet) {
    static const char *const opts[4] = {"--shapes", "--min-shapes", "--opt-shapes", "--max-shapes"};
    int n_in = kiln_model_num_inputs(m), rc = EXIT_FAIL;
    /* every named input must exist, ranks must match */
    prof_entry *pe;
    pe = calloc((size_t)(n_in > 0 ? n_in : 1), sizeof *pe);
    if (!pe) {
        fail("out of memory");
        goto done;
    }
    for (int q = 0; q < 4; q++)
        for (int j = 0; j < sl[q].n; j++) {
            const shape_spec *sp = &sl[q].v[j];
            int k = -1;
            kiln_io_info info;
            for (int i = 0; i < n_in; i++)
                if (kiln_model_input_info(m, i, &info) == KILN_OK && strcmp(info.name, sp->name) == 0) k = i;
            if (k < 0) {
                char names[2048];
                size_t n = 0;
                names[0] = '\0';
                for (int i = 0; i < n_in && n < sizeof names; i++)
                    if (kiln_model_input_info(m, i, &info) == KILN_OK)
                        n += (size_t)snprintf(names + n, sizeof names - n, "%s'%s'", i ? ", " : "", info.name);
                fail("%s: the model has no input named '%s' (inputs: %s)", opts[q], sp->name,
                     names);
                goto done;
            }
            kiln_model_input_info(m, k, &info);
            char a[DIMS_CAP], bb[DIMS_CAP];
            if (sp->rank != info.rank) {
                fail("%s: input '%s' has rank %d %s in the model, %d dims given", opts[q],
                     sp->name, info.rank, fmt_dims(a, sizeof a, info.rank, info.dims, info.dim_names), sp->rank);
                goto done;
            }
            for (int i = 0; i < info.rank; i++)
                if (info.dims[i] >= 0 && sp->dims[i] != info.dims[i]) {
                    fail("%s: input '%s' has fixed dim %d = %" PRId64 " in the model %s, %s given",
                         opts[q], sp->name, i, info.dims[i],
                         fmt_dims(a, sizeof a, info.rank, info.dims, info.dim_names),
                         fmt_dims(bb, sizeof bb, sp->rank, sp->dims, NULL));
                    goto done;
                }
            prof_entry *p = &pe[k];
            if (q > 0 && shapes_find(&sl[0], sp->name)) {
                usage_error(cmd, "input '%s' is in both --shapes and %s (--shapes sets min, opt and max)",
                            sp->name, opts[q]);
                rc = EXIT_USAGE;
                goto done;
            }
            p->name = sp->name;
            p->rank = sp->rank;
            size_t bytes = sizeof(int64_t) * (size_t)sp->rank;
            if (q == 0 || q == 1) { memcpy(p->mn, sp->dims, bytes); p->have_mn = true; }
            if (q == 0 || q == 2) { memcpy(p->opt, sp->dims, bytes); p->have_opt = true; }
            if (q == 0 || q == 3) { memcpy(p->mx, sp->dims, bytes); p->have_mx = true; }
        }

    for (int k = 0; k < n_in; k++) {
        prof_entry *p = &pe[k];
        kiln_io_info info;
        if (kiln_model_input_info(m, k, &info) != KILN_OK) continue;
        if (!p->name) {
            bool dynamic = false;
            for (int i = 0; i < info.rank; i++) dynamic = dynamic || info.dims[i] < 0;
            char a[DIMS_CAP], pn[NAME_CAP];
            if (dynamic && !quiet)
                fprintf(stderr, "kiln: note: input '%s' %s has dynamic dims and no shapes: using 1 for them\n",
                        PRINTABLE(info.name, pn), fmt_dims(a, sizeof a, info.rank, info.dims, info.dim_names));
            continue;
        }
        size_t bytes = sizeof(int64_t) * (size_t)p->rank;
        if (!p->have_opt) memcpy(p->opt, p->have_mx ? p->mx : p->mn, bytes);
        if (!p->have_mn) memcpy(p->mn, p->opt, bytes);
        if (!p->have_mx) memcpy(p->mx, p->opt, bytes);
        for (int i = 0; i < p->rank; i++)
            if (!(p->mn[i] <= p->opt[i] && p->opt[i] <= p->mx[i])) {
                char a[DIMS_CAP], bb[DIMS_CAP], c[DIMS_CAP];
                fail("input '%s': shapes must satisfy min <= opt <= max in every dim, got min %s opt %s max %s",
                     p->name, fmt_dims(a, sizeof a, p->rank, p->mn, NULL), fmt_dims(bb, sizeof bb, p->rank, p->opt, NULL),
                     fmt_dims(c, sizeof c, p->rank, p->mx, NULL));
                goto done;
            }
        kiln_status st = kiln_builder_set_profile(b, p->name, p->rank, p->mn, p->opt, p->mx);
        if (st != KILN_OK) {
            fail_kiln(st, "profile of input '%s'", p->name);
            goto done;
        }
    }
    rc = EXIT_OK;
done:
    free(pe);
    return rc;
}

bool parse_pass(const char *cmd, const char *name, uint32_t *mask) {
    char names[1024];
    size_t len = 0;
    names[0] = '\0';
    for (int i = 0; i < kiln_pass_count(); i++) {
        if (strcmp(kiln_pass_name(i), name) == 0) {
            *mask |= 1u << i;
            return true;
        }
        len += (size_t)snprintf(names + len, len < sizeof names ? sizeof names - len : 0, "%s%s", i ? ", " : "",
                                kiln_pass_name(i));
    }
    usage_error(cmd, "--disable-pass: unknown pass '%s' (passes: %s; 'kiln debug passes' describes them)", name,
                names);
    return false;
}

int disable_passes(kiln_builder *b, uint32_t mask) {
    for (int i = 0; i < kiln_pass_count(); i++) {
        kiln_status st = (mask >> i & 1) ? kiln_builder_disable_pass(b, kiln_pass_name(i)) : KILN_OK;
        if (st != KILN_OK) return fail_kiln(st, "--disable-pass %s", kiln_pass_name(i));
    }
    return EXIT_OK;
}

static int cmd_build(int argc, char **argv) {
    static const optdef defs[] = {
        {"--output", "-o", true},  {"--shapes", NULL, true},     {"--min-shapes", NULL, true},
        {"--opt-shapes", NULL, true}, {"--max-shapes", NULL, true}, {"--fp32", NULL, false},
        {"--tf32", NULL, false},   {"--fp16", NULL, false},      {"--bf16", NULL, false},
        {"--device", NULL, true},  {"--threads", NULL, true},    {"--workspace", NULL, true},
        {"--timing-cache", NULL, true}, {"--help", "-h", false}, {"--quiet", "-q", false},
        {"--layer-precision", NULL, true}, {"--disable-pass", NULL, true}, {"--strict-device", NULL, false},
        {"--fast-math", NULL, false},
    };
    enum { O_OUT, O_SHAPES, O_MIN, O_OPT, O_MAX, O_FP32, O_TF32, O_FP16, O_BF16, O_DEVICE, O_THREADS,
           O_WORKSPACE, O_TCACHE, O_HELP, O_QUIET, O_LAYER_PREC, O_DISABLE_PASS, O_STRICT, O_FAST_MATH };
    argscan s = {argc, argv, 0, "build", false};
    const char *model_path = NULL, *out_path = NULL, *tcache = NULL, *layer_prec = NULL, *val;
    shape_list sl[4] = {{0}}; /* shapes, min, opt, max */
    int precision = -1, device = KILN_DEVICE_CPU;
    int64_t device_index = 0, threads = -1, workspace = -1;
    bool quiet = false, strict = false, fast_math = false;
    int rc = EXIT_USAGE, id;
    char *default_out = NULL;
    kiln_model *m = NULL;
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    uint32_t disabled = 0; /* --disable-pass */

    while ((id = scan_next(&s, defs, (int)(sizeof defs / sizeof defs[0]), &val)) != SCAN_END) {
        switch (id) {
        case SCAN_ERROR: goto done;
        case SCAN_POSITIONAL:
            if (model_path) {
                usage_error("build", "unexpected argument '%s' (one model only)", val);
                goto done;
            }
            model_path = val;
            break;
        case O_HELP: fputs(build_help, stdout); rc = EXIT_OK; goto done;
        case O_OUT: out_path = val; break;
        case O_SHAPES: case O_MIN: case O_OPT: case O_MAX:
            if (!shapes_parse("build", defs[id].name, val, &sl[id - O_SHAPES])) goto done;
            break;
        case O_FP32: case O_TF32: case O_FP16: case O_BF16:
            if (!set_precision_flag("build", &precision, id - O_FP32 + KILN_PRECISION_FP32)) goto done;
            break;
        case O_DEVICE: if (!parse_device("build", val, &device, &device_index)) goto done; break;
        case O_THREADS: if (!opt_int("build", "--threads", val, 0, 4096, &threads)) goto done; break;
        case O_WORKSPACE:
            if (!opt_int("build", "--workspace", val, 0, (int64_t)(SIZE_MAX >> 21), &workspace)) goto done;
            break;
        case O_TCACHE: tcache = val; break;
        case O_QUIET: quiet = true; break;
        case O_LAYER_PREC: layer_prec = val; break;
        case O_DISABLE_PASS: if (!parse_pass("build", val, &disabled)) goto done; break;
        case O_STRICT: strict = true; break;
        case O_FAST_MATH: fast_math = true; break;
        default: goto done;
        }
    }
    if (!model_path) {
        usage_error("build", "no model given");
        goto done;
    }
    rc = EXIT_FAIL;
    if (!out_path) {
        size_t n = strlen(model_path);
        default_out = malloc(n + 6);
        if (!default_out) {
            fail("out of memory");
            goto done;
        }
        memcpy(default_out, model_path, n + 1);
        if (n > 5 && strcmp(default_out + n - 5, ".onnx") == 0) default_out[n - 5] = '\0';
        strcat(default_out, ".kiln");
        out_path = default_out;
    }

    if (replaces_file(out_path, model_path)) {
        fail("-o '%s' is the model itself: the engine would replace it (name another file)", out_path);
        goto done;
    }
    if (tcache && replaces_file(out_path, tcache)) {
        fail("-o '%s' is the timing cache '%s': the engine would replace it (name another file)", out_path, tcache);
        goto done;
    }
    double t0 = now_s();
    kiln_status st = kiln_model_load_onnx(model_path, &m);
    if (st != KILN_OK) {
        fail_load(st, "model", model_path);
        goto done;
    }
    double t_load = now_s() - t0;
    if (!quiet)
        for (int i = 0; i < kiln_model_num_warnings(m); i++)
            fprintf(stderr, "kiln: warning: %s\n", kiln_model_warning(m, i));
    int n_in = kiln_model_num_inputs(m), n_out = kiln_model_num_outputs(m);

    st = kiln_builder_create(&b);
    if (st != KILN_OK) {
        fail_kiln(st, "cannot create a builder");
        goto done;
    }
    if ((st = kiln_builder_set_device(b, (kiln_device)device, (int)device_index)) != KILN_OK) {
        fail_kiln(st, "--device");
        goto done;
    }
    if (precision >= 0 && (st = kiln_builder_set_precision(b, (kiln_precision)precision)) != KILN_OK) {
        fail_kiln(st, "precision");
        goto done;
    }
    if (quiet && (st = kiln_builder_set_verbosity(b, 0)) != KILN_OK) { /* not the tuner's progress either */
        fail_kiln(st, "--quiet");
        goto done;
    }
    if (strict && (st = kiln_builder_set_strict_device(b, 1)) != KILN_OK) {
        fail_kiln(st, "--strict-device");
        goto done;
    }
    if (fast_math && (st = kiln_builder_set_fast_math(b, 1)) != KILN_OK) {
        fail_kiln(st, "--fast-math");
        goto done;
    }
    if (threads >= 0 && (st = kiln_builder_set_threads(b, (int)threads)) != KILN_OK) {
        fail_kiln(st, "--threads");
        goto done;
    }
    if (workspace >= 0 && (st = kiln_builder_set_workspace(b, (size_t)workspace << 20)) != KILN_OK) {
        fail_kiln(st, "--workspace");
        goto done;
    }
    if (tcache && (st = kiln_builder_set_timing_cache(b, tcache)) != KILN_OK) {
        fail_kiln(st, "--timing-cache");
        goto done;
    }
    if (layer_prec && !set_layer_precisions("build", b, layer_prec)) goto done;
    if ((rc = set_profiles("build", m, b, sl, quiet)) != EXIT_OK) goto done;
    rc = EXIT_FAIL;
    if (disable_passes(b, disabled) != EXIT_OK) goto done;

    t0 = now_s();
    st = kiln_build(b, m, &e);
    double t_build = now_s() - t0;
    if (st != KILN_OK) {
        fail_kiln(st, "cannot build '%s'", model_path);
        goto done;
    }
    t0 = now_s();
    st = kiln_engine_save(e, out_path);
    double t_save = now_s() - t0;
    if (st != KILN_OK) {
        fail_kiln(st, "cannot write engine '%s'", out_path);
        goto done;
    }
    if (!quiet) {
        char a[DIMS_CAP], bb[DIMS_CAP], c[DIMS_CAP], d[DIMS_CAP], pn[NAME_CAP];
        printf("model:   %s (%d inputs, %d outputs)\n", model_path, n_in, n_out);
        for (int k = 0; k < kiln_engine_num_inputs(e); k++) {
            kiln_io_info info;
            int64_t mn[KILN_MAX_RANK], opt[KILN_MAX_RANK], mx[KILN_MAX_RANK];
            if (kiln_engine_input_info(e, k, &info) != KILN_OK) continue;
            printf("  input  %s: %s %s", PRINTABLE(info.name, pn), kiln_dtype_name(info.dtype),
                   fmt_dims(a, sizeof a, info.rank, info.dims, info.dim_names));
            if (kiln_engine_input_profile(e, k, mn, opt, mx) == KILN_OK)
                printf("  profile min %s opt %s max %s", fmt_dims(bb, sizeof bb, info.rank, mn, NULL),
                       fmt_dims(c, sizeof c, info.rank, opt, NULL), fmt_dims(d, sizeof d, info.rank, mx, NULL));
            printf("\n");
        }
        for (int k = 0; k < kiln_engine_num_outputs(e); k++) {
            kiln_io_info info;
            if (kiln_engine_output_info(e, k, &info) != KILN_OK) continue;
            printf("  output %s: %s %s\n", PRINTABLE(info.name, pn), kiln_dtype_name(info.dtype),
                   fmt_dims(a, sizeof a, info.rank, info.dims, info.dim_names));
        }
        int layers = kiln_engine_num_layers(e);
        struct stat sb;
        double size = stat(out_path, &sb) == 0 ? (double)sb.st_size : 0;
        if (layers >= 0) printf("layers:  %d\n", layers);
        if (size >= 1e6) printf("engine:  %s (%.1f MB)\n", out_path, size / 1e6);
        else printf("engine:  %s (%.1f kB)\n", out_path, size / 1e3);
        printf("time:    load %.3f s, build %.3f s, save %.3f s\n", t_load, t_build, t_save);
    }
    rc = EXIT_OK;
done:
    kiln_engine_free(e);
    kiln_builder_free(b);
    kiln_model_free(m);
    free(default_out);
    for (int q = 0; q < 4; q++) shapes_free(&sl[q]);
    return rc;
}

/* ---- run ------------------------------------------------------------------------------ */

static const char run_help[] =
    "Usage: kiln run ENGINE.kiln [options]\n"
    "\n"
    "Runs an engine once and reports its outputs.\n"
    "\n"
    "Options:\n"
    "  -i, --input NAME=FILE.npy  an input from a .npy file (repeatable; FILE.npy alone if the\n"
    "                           engine has one input). Every input must be given, unless\n"
    "                           --random-inputs is.\n"
    "  --random-inputs          inputs not given by --input get random data: floats uniform\n"
    "                           in [-1, 1), integers in [0, 10), random bools\n"
    "  --shapes SPECS           shapes of the random inputs (name:1x3x224x224[,...]);\n"
    "                           default: the profile's opt shape (an input read by --input\n"
    "                           has the file's shape: --shapes may only repeat it)\n"
    "  --output-dir DIR         write each output as DIR/<name>.npy (characters other than\n"
    "                           A-Z a-z 0-9 . _ - in names become '_', names that would\n"
    "                           collide get '_<index>'; DIR is created; existing files\n"
    "                           that are not regular files are never replaced, nor an\n"
    "                           --input file or the engine)\n"
    "  --seed S                 seed of the random inputs (default 0)\n"
    "  --threads N              threads (0 = one per core; default: the engine's setting)\n"
    "  --memory-limit MIB       fail (before allocating) if the run needs more than MIB MiB\n"
    "                           of activation memory: intermediate tensors and scratch,\n"
    "                           not weights (may be fractional; 0 = no limit, the default)\n"
    "  --print                  print every output value\n"
    "  --compare MODEL.onnx     also build MODEL as an fp32 CPU engine (at the bound input\n"
    "                           shapes), run it on the same inputs and print, per output, the\n"
    "                           max abs error, max abs error / max|ref| and the max relative\n"
    "                           error (over elements with |ref| >= 1e-3 max|ref|) of ENGINE\n"
    "                           against it (e.g. for an fp16/bf16 CUDA engine)\n"
    "  -q, --quiet              print only errors\n"
    "  -h, --help               show this help\n"
    "\n"
    "Environment:\n"
    "  KILN_DEBUG_ARENA=1       check the memory plan while running (slower): poison every\n"
    "                           activation region before a layer is handed it, and fail\n"
    "                           (exit 1) naming the layer, the tensor and the layer that\n"
    "                           overwrote it if a layer reads bytes that are no longer its\n"
    "                           input's, writes over an input it reads, or leaves part of a\n"
    "                           float output unwritten (kiln_context_set_debug_arena;\n"
    "                           docs/memory.md)\n";

/* Creates folder `path` and its parents. false with errno set (ENOTDIR when
 * something other than a folder is in the way). */
static bool make_dirs(const char *path) {
    if (!*path) {
        errno = ENOENT;
        return false;
    }
    char *p = strdup(path);
    if (!p) return false;
    for (char *q = p + 1; *q; q++) {
        if (*q != '/') continue;
        *q = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            int err = errno;
            free(p);
            errno = err;
            return false;
        }
        *q = '/';
    }
    bool ok = mkdir(p, 0777) == 0 || errno == EEXIST;
    int err = errno;
    free(p);
    struct stat sb;
    if (!ok) {
        errno = err;
        return false;
    }
    if (stat(path, &sb) != 0) return false;
    if (!S_ISDIR(sb.st_mode)) {
        errno = ENOTDIR;
        return false;
    }
    return true;
}

/* Output file name: unsafe characters become '_'; never empty, never hidden;
 * at most cap - 1 bytes. */
static void sanitize(const char *name, char *out, size_t cap) {
    size_t n = 0;
    if (name[0] == '.' || name[0] == '\0') out[n++] = '_';
    for (const char *p = name; *p && n + 1 < cap; p++) {
        unsigned char ch = (unsigned char)*p;
        out[n++] = (isalnum(ch) || ch == '.' || ch == '_' || ch == '-') ? (char)ch : '_';
    }
    out[n] = '\0';
}

/* Longest output file name before ".npy": within the 255-byte limit of a name. */
#define OUT_NAME_MAX 250

static bool name_in(char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (names[i] && strcmp(names[i], name) == 0) return true;
    return false;
}

/* DIR/NAME.npy of an output (malloc'd; NULL: out of memory). */
static char *output_path(const char *outdir, const char *fname) {
    size_t plen = strlen(outdir) + strlen(fname) + 8, dlen = strlen(outdir);
    char *path = malloc(plen);
    if (path) snprintf(path, plen, "%s%s%s.npy", outdir, dlen && outdir[dlen - 1] == '/' ? "" : "/", fname);
    return path;
}

/* --output-dir file names (without ".npy") of the engine's n_out outputs
 * (malloc'ed, NULL on out of memory): sanitized, and unique against every
 * other output's. The first output whose name sanitizes to a given name
 * keeps it; a later one gets "_<index>" (then "_<index>_<n>") added, chosen
 * so that it is no other output's name either. */
static char **output_file_names(const kiln_engine *e, int n_out) {
    char **base = calloc((size_t)n_out + 1, sizeof *base), **fin = calloc((size_t)n_out + 1, sizeof *fin);
    bool ok = base && fin;
    for (int k = 0; k < n_out && ok; k++) {
        kiln_io_info info;
        char buf[OUT_NAME_MAX + 1];
        sanitize(kiln_engine_output_info(e, k, &info) == KILN_OK ? info.name : "", buf, sizeof buf);
        ok = (base[k] = strdup(buf)) != NULL;
    }
    for (int k = 0; k < n_out && ok; k++) {
        if (!name_in(base, k, base[k])) { /* the first with this name */
            ok = (fin[k] = strdup(base[k])) != NULL;
            continue;
        }
        char cand[OUT_NAME_MAX + 64];
        for (int m = 0;; m++) {
            char suffix[48];
            if (m) snprintf(suffix, sizeof suffix, "_%d_%d", k, m);
            else snprintf(suffix, sizeof suffix, "_%d", k);
            int keep = (int)strlen(base[k]);
            if (keep + strlen(suffix) > OUT_NAME_MAX) keep = OUT_NAME_MAX - (int)strlen(suffix);
            snprintf(cand, sizeof cand, "%.*s%s", keep, base[k], suffix);
            if (!name_in(base, n_out, cand) && !name_in(fin, k, cand)) break;
        }
        ok = (fin[k] = strdup(cand)) != NULL;
    }
    for (int k = 0; k < n_out && base; k++) free(base[k]);
    free(base);
    if (!ok && fin) {
        for (int k = 0; k < n_out; k++) free(fin[k]);
        free(fin);
        fin = NULL;
    }
    return fin;
}

static void print_output(const char *name, kiln_dtype dt, int rank, const int64_t *dims, const void *data,
                         bool all) {
    char a[DIMS_CAP], pn[NAME_CAP];
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= dims[i];
    printf("output '%s': %s %s\n", PRINTABLE(name, pn), kiln_dtype_name(dt), fmt_dims(a, sizeof a, rank, dims, NULL));
    if (n == 0) {
        printf("  (empty)\n");
        return;
    }
    int64_t show = all ? n : (n < 8 ? n : 8);
    printf("  values:");
    for (int64_t i = 0; i < show; i++) {
        printf(all && i % 8 == 0 ? "\n   " : " ");
        print_value(dt, data, i);
    }
    if (show < n) printf(" ... (%" PRId64 " values)", n);
    printf("\n");
    double mn = INFINITY, mx = -INFINITY, sum = 0;
    int64_t nans = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = load_f64(dt, data, i);
        if (isnan(v)) {
            nans++;
            continue;
        }
        if (v < mn) mn = v;
        if (v > mx) mx = v;
        sum += v;
    }
    if (nans < n) printf("  min %.6g  max %.6g  mean %.6g", mn, mx, sum / (double)(n - nans));
    if (nans) printf("  (%" PRId64 " NaN)", nans);
    printf("\n");
}

int reference_engine(const kiln_model *m, const char *model_path, const bound_input *bufs, int n_in,
                     bool optimize, const char *what, kiln_engine **ref, kiln_context **rc) {
    kiln_builder *b = NULL;
    *ref = NULL;
    *rc = NULL;
    int ret = EXIT_FAIL;
    kiln_status st = kiln_builder_create(&b);
    if (st != KILN_OK) {
        fail_kiln(st, "%s: cannot create a builder", what);
        goto done;
    }
    if (!optimize && (st = kiln_builder_set_optimization(b, 0)) != KILN_OK) {
        fail_kiln(st, "%s: optimization level", what);
        goto done;
    }
    for (int k = 0; k < n_in; k++) {
        const bound_input *bi = &bufs[k];
        if ((st = kiln_builder_set_profile(b, bi->info.name, bi->rank, bi->dims, bi->dims, bi->dims)) !=
            KILN_OK) {
            fail_kiln(st, "%s: input '%s'", what, bi->info.name);
            goto done;
        }
    }
    if ((st = kiln_build(b, m, ref)) != KILN_OK) {
        fail_kiln(st, "%s: building the fp32 CPU reference of '%s'", what, model_path);
        goto done;
    }
    if ((st = kiln_context_create(*ref, rc)) != KILN_OK) {
        fail_kiln(st, "%s: cannot create a context", what);
        goto done;
    }
    for (int k = 0; k < n_in; k++) {
        const bound_input *bi = &bufs[k];
        if ((st = kiln_context_set_input(*rc, bi->info.name, bi->dtype, bi->rank, bi->dims, bi->data)) != KILN_OK) {
            fail_kiln(st, "%s: input '%s' of the reference", what, bi->info.name);
            goto done;
        }
    }
    ret = EXIT_OK;
done:
    kiln_builder_free(b);
    if (ret != EXIT_OK) {
        kiln_context_free(*rc);
        kiln_engine_free(*ref);
        *rc = NULL;
        *ref = NULL;
    }
    return ret;
}

void tensor_diff_compute(kiln_dtype dt, const void *a, kiln_dtype rdt, const void *r, int64_t n, tensor_diff *d) {
    memset(d, 0, sizeof *d);
    d->n = n;
    d->is_float = dtype_is_float(dt) && dtype_is_float(rdt);
    if (!d->is_float) {
        for (int64_t i = 0; i < n; i++) d->differ += load_f64(dt, a, i) != load_f64(rdt, r, i);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        double x = fabs(load_f64(rdt, r, i));
        if (isfinite(x) && x > d->max_ref) d->max_ref = x;
    }
    for (int64_t i = 0; i < n; i++) {
        double x = load_f64(dt, a, i), y = load_f64(rdt, r, i);
        if (!isfinite(x) || !isfinite(y)) {
            d->nonfinite += (isfinite(x) != isfinite(y)) || (isnan(x) != isnan(y)) || (x != y && !isnan(x));
            continue;
        }
        double e = fabs(x - y);
        if (e > d->max_abs) {
            d->max_abs = e;
            d->at = i;
        }
        if (fabs(y) >= 1e-3 * d->max_ref && fabs(y) > 0 && e / fabs(y) > d->max_rel) d->max_rel = e / fabs(y);
    }
}

double tensor_diff_norm(const tensor_diff *d) { return d->max_ref > 0 ? d->max_abs / d->max_ref : d->max_abs; }

/* kiln run --compare: the fp32 CPU plan of `model_path` on the inputs bound
 * in bufs, against the outputs of context c. */
static int run_compare(const char *model_path, const kiln_engine *e, kiln_context *c,
                       const bound_input *bufs, int n_in) {
    kiln_model *m = NULL;
    kiln_engine *ref = NULL;
    kiln_context *rc = NULL;
    int ret = EXIT_FAIL;
    kiln_status st = kiln_model_load_onnx(model_path, &m);
    if (st != KILN_OK) {
        fail_load(st, "model", model_path);
        goto done;
    }
    if (reference_engine(m, model_path, bufs, n_in, true, "--compare", &ref, &rc) != EXIT_OK) goto done;
    if ((st = kiln_context_run(rc)) != KILN_OK) {
        fail_kiln(st, "--compare: the reference run failed");
        goto done;
    }
    printf("compare against the fp32 CPU plan of %s:\n", model_path);
    int n_out = kiln_engine_num_outputs(e);
    for (int k = 0; k < n_out; k++) {
        kiln_io_info info;
        kiln_dtype dt, rdt;
        int rank, rrank;
        int64_t dims[KILN_MAX_RANK], rdims[KILN_MAX_RANK];
        const void *data, *rdata;
        if ((st = kiln_engine_output_info(e, k, &info)) != KILN_OK ||
            (st = kiln_context_get_output(c, info.name, &dt, &rank, dims, &data)) != KILN_OK) {
            fail_kiln(st, "--compare: output %d", k);
            goto done;
        }
        if ((st = kiln_context_get_output(rc, info.name, &rdt, &rrank, rdims, &rdata)) != KILN_OK) {
            fail_kiln(st, "--compare: output '%s' of the reference", info.name);
            goto done;
        }
        int64_t n = 1;
        bool same = rank == rrank;
        for (int i = 0; i < rank && same; i++) {
            same = dims[i] == rdims[i];
            n *= dims[i];
        }
        if (!same) {
            fail("--compare: output '%s' has another shape in the reference", info.name);
            goto done;
        }
        tensor_diff d;
        tensor_diff_compute(dt, data, rdt, rdata, n, &d);
        char pn[NAME_CAP];
        if (!d.is_float) {
            printf("  %s: %lld of %lld elements differ\n", PRINTABLE(info.name, pn), (long long)d.differ, (long long)n);
            continue;
        }
        printf("  %s: max abs err %.3g, max abs err / max|ref| %.3g, max rel err %.3g", PRINTABLE(info.name, pn),
               d.max_abs, tensor_diff_norm(&d), d.max_rel);
        if (d.nonfinite) printf(", %lld non-finite mismatches", (long long)d.nonfinite);
        printf("\n");
    }
    ret = EXIT_OK;
done:
    kiln_context_free(rc);
    kiln_engine_free(ref);
    kiln_model_free(m);
    return ret;
}

static int cmd_run(int argc, char **argv) {
    static const optdef defs[] = {
        {"--input", "-i", true}, {"--output-dir", NULL, true}, {"--shapes", NULL, true},
        {"--seed", NULL, true},  {"--threads", NULL, true},    {"--print", NULL, false},
        {"--help", "-h", false}, {"--quiet", "-q", false},  {"--memory-limit", NULL, true},
        {"--compare", NULL, true}, {"--random-inputs", NULL, false},
    };
    enum { O_INPUT, O_OUTDIR, O_SHAPES, O_SEED, O_THREADS, O_PRINT, O_HELP, O_QUIET, O_MEMLIMIT,
           O_COMPARE, O_RANDOM };
    argscan s = {argc, argv, 0, "run", false};
    const char *engine_path = NULL, *outdir = NULL, *compare = NULL, *val;
    input_files files = {0};
    shape_list shapes = {0};
    int64_t seed = 0, threads = -1;
    double mem_limit = 0;
    bool print_all = false, quiet = false, random_inputs = false;
    int rc = EXIT_USAGE, id;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    bound_input *bufs = NULL;
    char **fnames = NULL;
    int n_in = 0;

    while ((id = scan_next(&s, defs, (int)(sizeof defs / sizeof defs[0]), &val)) != SCAN_END) {
        switch (id) {
        case SCAN_ERROR: goto done;
        case SCAN_POSITIONAL:
            if (engine_path) {
                usage_error("run", "unexpected argument '%s' (one engine only)", val);
                goto done;
            }
            engine_path = val;
            break;
        case O_HELP: fputs(run_help, stdout); rc = EXIT_OK; goto done;
        case O_INPUT:
            if ((rc = input_arg("run", val, &files)) != EXIT_OK) goto done;
            rc = EXIT_USAGE;
            break;
        case O_OUTDIR:
            if (!*val) {
                usage_error("run", "--output-dir: empty folder name");
                goto done;
            }
            outdir = val;
            break;
        case O_SHAPES: if (!shapes_parse("run", "--shapes", val, &shapes)) goto done; break;
        case O_SEED: if (!opt_int("run", "--seed", val, 0, INT64_MAX, &seed)) goto done; break;
        case O_THREADS: if (!opt_int("run", "--threads", val, 0, 4096, &threads)) goto done; break;
        case O_MEMLIMIT:
            if (!parse_double(val, 0, (double)(SIZE_MAX >> 21), &mem_limit)) {
                usage_error("run", "--memory-limit: expected a number of MiB >= 0, got '%s'", val);
                goto done;
            }
            break;
        case O_PRINT: print_all = true; break;
        case O_QUIET: quiet = true; break;
        case O_COMPARE: compare = val; break;
        case O_RANDOM: random_inputs = true; break;
        default: goto done;
        }
    }
    if (!engine_path) {
        usage_error("run", "no engine given");
        goto done;
    }
    rc = EXIT_FAIL;
    double t0 = now_s();
    kiln_status st = kiln_engine_load(engine_path, &e);
    if (st != KILN_OK) {
        fail_load(st, "engine", engine_path);
        goto done;
    }
    double t_load = now_s() - t0;
    if ((st = kiln_context_create(e, &c)) != KILN_OK) {
        fail_kiln(st, "cannot create a context");
        goto done;
    }
    if (threads >= 0 && (st = kiln_context_set_threads(c, (int)threads)) != KILN_OK) {
        fail_kiln(st, "--threads");
        goto done;
    }
    size_t limit_bytes = (size_t)(mem_limit * 1048576.0);
    if (mem_limit > 0 && !limit_bytes) limit_bytes = 1; /* a limit, however small */
    if (limit_bytes && (st = kiln_context_set_memory_limit(c, limit_bytes)) != KILN_OK) {
        fail_kiln(st, "--memory-limit");
        goto done;
    }
    n_in = kiln_engine_num_inputs(e);
    bufs = calloc((size_t)(n_in > 0 ? n_in : 1), sizeof *bufs);
    if (!bufs) {
        fail("out of memory");
        goto done;
    }
    if (bind_inputs(e, c, &files, &shapes, (uint64_t)seed, random_inputs, bufs, quiet) != EXIT_OK) goto done;
    t0 = now_s();
    st = kiln_context_run(c);
    double t_run = now_s() - t0;
    if (st != KILN_OK) {
        fail_kiln(st, "run failed");
        goto done;
    }
    if (outdir && !make_dirs(outdir)) {
        fail("--output-dir: cannot create folder '%s': %s", outdir, strerror(errno));
        goto done;
    }
    int n_out = kiln_engine_num_outputs(e);
    if (outdir && !(fnames = output_file_names(e, n_out))) {
        fail("out of memory");
        goto done;
    }
    /* no output file replaces an --input file or the engine (they were
     * read, but the user's file was gone): checked before any is written */
    for (int k = 0; outdir && k < n_out; k++) {
        char *path = output_path(outdir, fnames[k]);
        if (!path) {
            fail("out of memory");
            goto done;
        }
        const char *hit = replaces_file(path, engine_path) ? "the engine" : NULL, *in_name = NULL;
        for (int j = 0; !hit && j < files.n; j++)
            if (replaces_file(path, files.v[j].path)) {
                hit = files.v[j].path;
                in_name = files.v[j].name;
            }
        kiln_io_info info;
        if (hit && kiln_engine_output_info(e, k, &info) == KILN_OK) {
            char pn[NAME_CAP];
            if (in_name)
                fail("--output-dir: output '%s' would be written to '%s', the --input file of input '%s' "
                     "(name another folder)", PRINTABLE(info.name, pn), path, in_name);
            else
                fail("--output-dir: output '%s' would be written to '%s', %s (name another folder)",
                     PRINTABLE(info.name, pn), path, hit);
        }
        free(path);
        if (hit) goto done;
    }
    int orc = EXIT_OK;
    for (int k = 0; k < n_out && orc == EXIT_OK; k++) {
        kiln_io_info info;
        kiln_dtype dt;
        int rank;
        int64_t dims[KILN_MAX_RANK];
        const void *data;
        if ((st = kiln_engine_output_info(e, k, &info)) != KILN_OK ||
            (st = kiln_context_get_output(c, info.name, &dt, &rank, dims, &data)) != KILN_OK) {
            orc = fail_kiln(st, "reading output %d", k);
            break;
        }
        if (!quiet) print_output(info.name, dt, rank, dims, data, print_all);
        if (!outdir) continue;
        char *path = output_path(outdir, fnames[k]);
        if (!path) {
            orc = fail("out of memory");
            break;
        }
        char err[1024];
        int wrc;
        if (dt == KILN_DTYPE_BFLOAT16) { /* .npy has no bfloat16: widen to float32 */
            int64_t n = 1;
            for (int i = 0; i < rank; i++) n *= dims[i];
            float *f = malloc((size_t)n * sizeof(float) + 1);
            if (!f) {
                free(path);
                orc = fail("out of memory");
                break;
            }
            for (int64_t i = 0; i < n; i++) f[i] = bf16_to_float(((const uint16_t *)data)[i]);
            wrc = npy_write(path, KILN_DTYPE_FLOAT32, rank, dims, f, err, sizeof err);
            free(f);
            if (!quiet) printf("  (bfloat16 written as float32)\n");
        } else {
            wrc = npy_write(path, dt, rank, dims, data, err, sizeof err);
        }
        if (wrc) orc = fail("output '%s': %s", info.name, err);
        else if (!quiet) printf("  -> %s\n", path);
        free(path);
    }
    if (orc != EXIT_OK) goto done;
    if (!quiet) printf("time: load %.3f s, run %.3f ms\n", t_load, t_run * 1e3);
    if (compare && run_compare(compare, e, c, bufs, n_in) != EXIT_OK) goto done;
    rc = EXIT_OK;
done:
    if (fnames)
        for (int k = 0; k < kiln_engine_num_outputs(e); k++) free(fnames[k]);
    free(fnames);
    kiln_context_free(c);
    free_inputs(bufs, n_in);
    kiln_engine_free(e);
    input_files_free(&files);
    shapes_free(&shapes);
    return rc;
}

/* ---- inspect --------------------------------------------------------------------------- */

static const char inspect_help[] =
    "Usage: kiln inspect ENGINE.kiln [--json]\n"
    "\n"
    "Describes an engine: inputs, outputs, profiles, layers and kernels, memory.\n"
    "\n"
    "Each layer line gives its index, op, name (the ONNX nodes it came from,\n"
    "joined by '+'), kernel, output shape at the opt shapes, and where they\n"
    "apply the tactic the build chose with its time (\"tactic wino 1772.0 us\") and\n"
    "the layouts of its input and output on the CPU (\"layout nchw->nchw16c\":\n"
    "nchw, nhwc, nhwc-bf16 or the blocked nchw16c). CPU convolution tactics: own,\n"
    "dnnl, dnnl-blocked (oneDNN), wino, wino2 (Winograd), direct (kiln's direct\n"
    "convolution; its time is the layer's median inside the engine at build).\n"
    "A layer whose name does not list the ONNX nodes it came from says so\n"
    "(\"sources 'a', 'b'\", or \"(added by kiln)\" for a Cast or layout conversion\n"
    "kiln made); --json gives every layer's \"sources\".\n"
    "An engine with user metadata (kiln_engine_metadata) lists it last: each key\n"
    "with its value (the first 160 bytes; all of it with --json).\n"
    "\n"
    "Options:\n"
    "  --json       print JSON\n"
    "  -h, --help   show this help\n";

static int cmd_inspect(int argc, char **argv) {
    static const optdef defs[] = {{"--json", NULL, false}, {"--help", "-h", false}};
    argscan s = {argc, argv, 0, "inspect", false};
    const char *path = NULL, *val;
    bool json = false;
    int id;
    while ((id = scan_next(&s, defs, 2, &val)) != SCAN_END) {
        if (id == SCAN_ERROR) return EXIT_USAGE;
        if (id == SCAN_POSITIONAL) {
            if (path) return usage_error("inspect", "unexpected argument '%s' (one engine only)", val);
            path = val;
        } else if (id == 0) {
            json = true;
        } else {
            fputs(inspect_help, stdout);
            return EXIT_OK;
        }
    }
    if (!path) return usage_error("inspect", "no engine given");
    kiln_engine *e = NULL;
    kiln_status st = kiln_engine_load(path, &e);
    if (st != KILN_OK) return fail_load(st, "engine", path);
    const char *d = kiln_engine_describe(e, json);
    int rc = EXIT_OK;
    if (!d || !*d) {
        rc = fail("cannot describe engine '%s'", path);
    } else {
        fputs(d, stdout);
        if (d[strlen(d) - 1] != '\n') fputc('\n', stdout);
    }
    kiln_engine_free(e);
    return rc;
}

/* ---- bench ------------------------------------------------------------------------------- */

static const char bench_help[] =
    "Usage: kiln bench ENGINE.kiln [options]\n"
    "\n"
    "Measures latency: warm-up runs, then timed runs (CLOCK_MONOTONIC) until both\n"
    "--iterations and --duration are reached.\n"
    "\n"
    "Options:\n"
    "  --warmup N           untimed runs first (default 3)\n"
    "  --iterations N       at least N timed runs (default 10)\n"
    "  --duration S         run for at least S seconds (default 0)\n"
    "  --idle-ms MS         sleep MS milliseconds before each timed (and profiled) run,\n"
    "                       as a server between requests does: caches, the thread pool\n"
    "                       and the CPUs go cold (default 0: back to back; throughput\n"
    "                       then counts run time only)\n"
    "  --flush-mb N         before each timed (and profiled) run, after --idle-ms, read\n"
    "                       and write N MiB of other memory, as other work on a server\n"
    "                       between requests does: the engine's weights and activations\n"
    "                       then come from memory, not the caches (default 0)\n"
    "  --shapes SPECS       shapes of the inputs (default: the profile's opt shapes)\n"
    "                       (an input read by --input has the file's shape: --shapes\n"
    "                       may only repeat it)\n"
    "  -i, --input NAME=FILE.npy  use an input from a file instead of random data\n"
    "  --seed S             seed of the random inputs (default 0)\n"
    "  --threads N          threads (0 = one per core; default: the engine's setting)\n"
    "  --json               print the results as JSON only\n"
    "  --profile            after the timed runs, run as many again with per-layer timing\n"
    "                       and print each layer's mean time, its share of the total,\n"
    "                       op, kernel and tactic, slowest first (GPU layers are timed\n"
    "                       to the end of their work, without CUDA Graphs)\n"
    "  -h, --help           show this help\n";

/* s as a JSON string; bytes that are not UTF-8 as \udcNN (as
 * kiln_engine_describe writes them, and Python's surrogateescape reads them) */
static void json_string(const char *s) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        size_t n = kiln__utf8_at((const char *)p);
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if (*p < 0x20) printf("\\u%04x", *p);
        else if (!n) printf("\\udc%02x", *p);
        else fwrite(p, 1, n, stdout);
        p += n ? n : 1;
    }
    putchar('"');
}

typedef struct layer_row {
    int layer;
    double us; /* mean per run */
} layer_row;

static int cmp_layer_row(const void *a, const void *b) {
    double x = ((const layer_row *)a)->us, y = ((const layer_row *)b)->us;
    return x > y ? -1 : x < y;
}

/* What kiln bench does before each timed run: --idle-ms, --flush-mb. */
typedef struct between_runs {
    double idle_ms;
    size_t flush_bytes;
    unsigned char *flush; /* flush_bytes, owned */
    unsigned char fill;
} between_runs;

/* Sleeps idle_ms milliseconds (nothing for 0), then reads and writes every
 * cache line of the flush buffer. Not memset: for large sizes it may store
 * around the caches (non-temporal stores), which leaves them as they were. */
static void before_run(between_runs *b) {
    if (b->idle_ms > 0) {
        double ms = b->idle_ms;
        struct timespec ts = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    if (b->flush) {
        b->fill++;
        for (size_t i = 0; i < b->flush_bytes; i += 64) b->flush[i] = (unsigned char)(b->flush[i] + b->fill);
    }
}

/* kiln bench --profile: `runs` profiled runs (each after before_run), then the per-layer table. */
static int bench_profile(kiln_engine *e, kiln_context *c, int64_t runs, between_runs *br, bool json) {
    kiln_status st = kiln_context_set_profiling(c, 1);
    if (st != KILN_OK) return fail_kiln(st, "--profile");
    for (int64_t i = 0; i < runs; i++) {
        before_run(br);
        if ((st = kiln_context_run(c)) != KILN_OK) return fail_kiln(st, "profiled run %" PRId64 " failed", i);
    }
    int n = kiln_engine_num_layers(e);
    layer_row *rows = calloc((size_t)(n > 0 ? n : 1), sizeof *rows);
    if (!rows) return fail("out of memory");
    double total = 0;
    for (int i = 0; i < n; i++) {
        double us = 0;
        int64_t k = 0;
        kiln_context_layer_time(c, i, &us, &k);
        rows[i].layer = i;
        rows[i].us = k > 0 ? us / (double)k : 0;
        total += rows[i].us;
    }
    qsort(rows, (size_t)n, sizeof *rows, cmp_layer_row);
    if (json) printf("  \"profile\": {\"runs\": %" PRId64 ", \"total_us\": %.3f, \"layers\": [\n", runs, total);
    else printf("per-layer profile (%" PRId64 " profiled runs; mean per run; sum %.3f ms):\n"
                "  %10s %6s %6s  %-18s %-16s %-16s %s\n", runs, total / 1e3, "us", "%", "cum%", "op",
                "kernel", "tactic", "layer");
    double cum = 0;
    for (int i = 0; i < n; i++) {
        kiln_layer_info li;
        if (kiln_engine_layer_info(e, rows[i].layer, &li) != KILN_OK) continue;
        double pct = total > 0 ? 100.0 * rows[i].us / total : 0;
        cum += pct;
        if (json) {
            printf("    {\"layer\": %d, \"name\": ", rows[i].layer);
            json_string(li.name);
            printf(", \"op\": ");
            json_string(li.op);
            printf(", \"kernel\": ");
            json_string(li.kernel);
            printf(", \"tactic\": ");
            json_string(li.tactic);
            printf(", \"mean_us\": %.3f, \"percent\": %.2f}%s\n", rows[i].us, pct, i + 1 < n ? "," : "");
        } else {
            char op[NAME_CAP], pn[NAME_CAP];
            printf("  %10.1f %6.2f %6.2f  %-18s %-16s %-16s %s\n", rows[i].us, pct, cum, PRINTABLE(li.op, op),
                   li.kernel, li.tactic[0] ? li.tactic : "-", PRINTABLE(li.name, pn));
        }
    }
    if (json) printf("  ]},\n");
    free(rows);
    return EXIT_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted array. */
static double percentile(const double *v, int64_t n, double q) {
    int64_t r = (int64_t)ceil(q / 100.0 * (double)n);
    if (r < 1) r = 1;
    if (r > n) r = n;
    return v[r - 1];
}


static int cmd_bench(int argc, char **argv) {
    static const optdef defs[] = {
        {"--warmup", NULL, true}, {"--iterations", NULL, true}, {"--duration", NULL, true},
        {"--shapes", NULL, true}, {"--threads", NULL, true},    {"--json", NULL, false},
        {"--help", "-h", false},  {"--input", "-i", true},      {"--seed", NULL, true},
        {"--profile", NULL, false}, {"--idle-ms", NULL, true},     {"--flush-mb", NULL, true},
    };
    enum { O_WARMUP, O_ITERS, O_DURATION, O_SHAPES, O_THREADS, O_JSON, O_HELP, O_INPUT, O_SEED, O_PROFILE,
           O_IDLE, O_FLUSH };
    argscan s = {argc, argv, 0, "bench", false};
    const char *path = NULL, *val;
    int64_t warmup = 3, iters = 10, threads = -1, seed = 0, flush_mb = 0;
    double duration = 0;
    between_runs br = {0}; /* --idle-ms, --flush-mb */
    bool json = false, profile = false;
    shape_list shapes = {0};
    input_files files = {0};
    int rc = EXIT_USAGE, id, n_in = 0;
    kiln_engine *e = NULL;
    kiln_context *c = NULL;
    bound_input *bufs = NULL;
    double *lat = NULL;

    while ((id = scan_next(&s, defs, (int)(sizeof defs / sizeof defs[0]), &val)) != SCAN_END) {
        switch (id) {
        case SCAN_ERROR: goto done;
        case SCAN_POSITIONAL:
            if (path) {
                usage_error("bench", "unexpected argument '%s' (one engine only)", val);
                goto done;
            }
            path = val;
            break;
        case O_HELP: fputs(bench_help, stdout); rc = EXIT_OK; goto done;
        case O_WARMUP: if (!opt_int("bench", "--warmup", val, 0, 100000000, &warmup)) goto done; break;
        case O_ITERS: if (!opt_int("bench", "--iterations", val, 1, 100000000, &iters)) goto done; break;
        case O_DURATION:
            if (!parse_double(val, 0, 1e6, &duration)) {
                usage_error("bench", "--duration: expected seconds in [0, 1e6], got '%s'", val);
                goto done;
            }
            break;
        case O_SHAPES: if (!shapes_parse("bench", "--shapes", val, &shapes)) goto done; break;
        case O_THREADS: if (!opt_int("bench", "--threads", val, 0, 4096, &threads)) goto done; break;
        case O_SEED: if (!opt_int("bench", "--seed", val, 0, INT64_MAX, &seed)) goto done; break;
        case O_JSON: json = true; break;
        case O_PROFILE: profile = true; break;
        case O_IDLE:
            if (!parse_double(val, 0, 1e5, &br.idle_ms)) {
                usage_error("bench", "--idle-ms: expected milliseconds in [0, 1e5], got '%s'", val);
                goto done;
            }
            break;
        case O_FLUSH: if (!opt_int("bench", "--flush-mb", val, 0, 65536, &flush_mb)) goto done; break;
        case O_INPUT:
            if (!input_files_add(&files, val)) {
                rc = fail("out of memory");
                goto done;
            }
            break;
        default: goto done;
        }
    }
    if (!path) {
        usage_error("bench", "no engine given");
        goto done;
    }
    rc = EXIT_FAIL;
    kiln_status st = kiln_engine_load(path, &e);
    if (st != KILN_OK) {
        fail_load(st, "engine", path);
        goto done;
    }
    if ((st = kiln_context_create(e, &c)) != KILN_OK) {
        fail_kiln(st, "cannot create a context");
        goto done;
    }
    if (threads >= 0 && (st = kiln_context_set_threads(c, (int)threads)) != KILN_OK) {
        fail_kiln(st, "--threads");
        goto done;
    }
    n_in = kiln_engine_num_inputs(e);
    bufs = calloc((size_t)(n_in > 0 ? n_in : 1), sizeof *bufs);
    if (!bufs) {
        fail("out of memory");
        goto done;
    }
    if (bind_inputs(e, c, &files, &shapes, (uint64_t)seed, true, bufs, json) != EXIT_OK) goto done;
    br.flush_bytes = (size_t)flush_mb << 20;
    if (br.flush_bytes && !(br.flush = calloc(br.flush_bytes, 1))) {
        fail("--flush-mb: out of memory for %" PRId64 " MiB", flush_mb);
        goto done;
    }
    double t0 = now_s();
    for (int64_t i = 0; i < warmup; i++)
        if ((st = kiln_context_run(c)) != KILN_OK) {
            fail_kiln(st, "run failed (warm-up %" PRId64 ")", i);
            goto done;
        }
    double t_warm = now_s() - t0;
    int64_t cap = iters, n = 0;
    lat = malloc((size_t)cap * sizeof *lat);
    if (!lat) {
        fail("out of memory");
        goto done;
    }
    double start = now_s(), t_end = start;
    while (n < iters || t_end - start < duration) {
        if (n == cap) {
            int64_t ncap = cap * 2;
            double *nl = realloc(lat, (size_t)ncap * sizeof *nl);
            if (!nl) break; /* keep what we have */
            lat = nl;
            cap = ncap;
        }
        before_run(&br);
        double a = now_s();
        if ((st = kiln_context_run(c)) != KILN_OK) {
            fail_kiln(st, "run failed (iteration %" PRId64 ")", n);
            goto done;
        }
        t_end = now_s();
        lat[n++] = (t_end - a) * 1e3;
    }
    double total = t_end - start, sum = 0;
    for (int64_t i = 0; i < n; i++) sum += lat[i];
    qsort(lat, (size_t)n, sizeof *lat, cmp_double);
    if (br.idle_ms > 0 || br.flush) total = sum / 1e3; /* run time only */
    double mean = sum / (double)n, p50 = percentile(lat, n, 50), p90 = percentile(lat, n, 90),
           p99 = percentile(lat, n, 99), tput = total > 0 ? (double)n / total : 0;
    if (json) {
        printf("{\n  \"engine\": ");
        json_string(path);
        printf(",\n  \"inputs\": [");
        for (int k = 0; k < n_in; k++) {
            printf("%s{\"name\": ", k ? ", " : "");
            json_string(bufs[k].info.name);
            printf(", \"dtype\": \"%s\", \"shape\": [", kiln_dtype_name(bufs[k].dtype));
            for (int i = 0; i < bufs[k].rank; i++) printf("%s%" PRId64, i ? ", " : "", bufs[k].dims[i]);
            printf("]}");
        }
        printf("],\n  \"warmup\": %" PRId64 ",\n  \"iterations\": %" PRId64 ",\n  \"total_s\": %.6f,\n", warmup,
               n, total);
        if (profile && bench_profile(e, c, n, &br, true) != EXIT_OK) goto done;
        printf("  \"latency_ms\": {\"min\": %.6f, \"mean\": %.6f, \"p50\": %.6f, \"p90\": %.6f, \"p99\": %.6f, "
               "\"max\": %.6f},\n", lat[0], mean, p50, p90, p99, lat[n - 1]);
        printf("  \"throughput_per_s\": %.3f\n}\n", tput);
    } else {
        printf("warm-up:    %" PRId64 " runs in %.3f s\n", warmup, t_warm);
        printf("iterations: %" PRId64 " runs in %.3f s\n", n, total);
        printf("latency (ms): min %.3f  mean %.3f  p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n", lat[0], mean, p50,
               p90, p99, lat[n - 1]);
        printf("throughput: %.2f inferences/s\n", tput);
        if (profile && bench_profile(e, c, n, &br, false) != EXIT_OK) goto done;
    }
    rc = EXIT_OK;
done:
    free(br.flush);
    free(lat);
    kiln_context_free(c);
    free_inputs(bufs, n_in);
    kiln_engine_free(e);
    shapes_free(&shapes);
    input_files_free(&files);
    return rc;
}

/* ---- main -------------------------------------------------------------------------------- */

static const char main_help[] =
    "Usage: kiln COMMAND [options]\n"
    "\n"
    "kiln compiles ONNX models into engines and runs them.\n"
    "\n"
    "Commands:\n"
    "  build MODEL.onnx -o ENGINE.kiln   compile a model (kiln build --help)\n"
    "  run ENGINE.kiln                   run once on .npy or random inputs, save outputs\n"
    "  inspect ENGINE.kiln [--json]      describe an engine\n"
    "  bench ENGINE.kiln                 measure latency and throughput\n"
    "  debug compare MODEL.onnx          find the first layer whose output is wrong\n"
    "  debug passes                      list the optimizer passes (--disable-pass NAME)\n"
    "  version                           print kiln's version\n"
    "  help [COMMAND]                    show help\n"
    "\n"
    "Example:\n"
    "  kiln build resnet50.onnx -o resnet50.kiln --shapes input:1x3x224x224\n"
    "  kiln run resnet50.kiln --input input=x.npy --output-dir out/\n"
    "\n"
    "Exit status: 0 success, 1 failure (bad model, engine or input; build or run\n"
    "error), 2 usage error (unknown command or option, bad argument).\n";

static int cmd_version(int argc, char **argv) {
    (void)argv;
    if (argc > 0 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        printf("Usage: kiln version\n\nPrints the versions of the kiln tool and library.\n");
        return EXIT_OK;
    }
    if (argc > 0) return usage_error("version", "unexpected argument '%s'", argv[0]);
    printf("kiln %d.%d.%d (library %s)\n", KILN_VERSION_MAJOR, KILN_VERSION_MINOR, KILN_VERSION_PATCH,
           kiln_version_string());
    return EXIT_OK;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(main_help, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    int sub_argc = argc - 2;
    char **sub_argv = argv + 2;
    if (strcmp(cmd, "build") == 0) return cmd_build(sub_argc, sub_argv);
    if (strcmp(cmd, "run") == 0) return cmd_run(sub_argc, sub_argv);
    if (strcmp(cmd, "inspect") == 0) return cmd_inspect(sub_argc, sub_argv);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(sub_argc, sub_argv);
    if (strcmp(cmd, "debug") == 0) return cmd_debug(sub_argc, sub_argv);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) return cmd_version(sub_argc, sub_argv);
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        if (sub_argc == 0) {
            fputs(main_help, stdout);
            return EXIT_OK;
        }
        char help_flag[] = "--help";
        char *hv[] = {help_flag, NULL};
        const char *c = sub_argv[0];
        if (strcmp(c, "build") == 0) return cmd_build(1, hv);
        if (strcmp(c, "run") == 0) return cmd_run(1, hv);
        if (strcmp(c, "inspect") == 0) return cmd_inspect(1, hv);
        if (strcmp(c, "bench") == 0) return cmd_bench(1, hv);
        if (strcmp(c, "debug") == 0) return cmd_debug(1, hv);
        if (strcmp(c, "version") == 0) return cmd_version(1, hv);
        return usage_error(NULL, "unknown command '%s'", c);
    }
    return usage_error(NULL, "unknown command '%s'", cmd);
}
