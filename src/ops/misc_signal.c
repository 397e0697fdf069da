/* misc_signal.c -- signal-processing ops of opset 17: BlackmanWindow,
 * HammingWindow, HannWindow, DFT, STFT, MelWeightMatrix.
 *
 * Complex tensors are real tensors with a trailing dimension of 2 (real,
 * imaginary); real input may have a trailing dimension of 1. Transforms are
 * computed in double: radix-2 FFT when the length is a power of two, a
 * direct O(n^2) sum with a twiddle table otherwise. */
#include "ops/misc_attrs.h" /* window, DFT, STFT and mel attribute structs */
#include "ops/op.h"

#include <math.h>

#define KILN_PI 3.14159265358979323846

static bool scalar_int_info(const kiln_tinfo *t) {
    return t && kiln__dtype_is_int(t->dtype) && (t->rank == 0 || (t->rank == 1 && t->dims[0] == 1));
}

/* ---- windows --------------------------------------------------------------- */

static kiln_status window_import(kiln_import_ctx *ic, void *attrs) {
    kiln_window_attrs *at = attrs;
    at->periodic = kiln_attr_int(ic, "periodic", 1) != 0;
    return kiln_attr_int32(ic, "output_datatype", KILN_DTYPE_FLOAT32, &at->output_datatype);
}

/* An output dtype kiln has (not undefined, not string). */
static kiln_status out_dtype_validate(const kiln_op_def *op, const char *node, int32_t dt) {
    if (!kiln__dtype_valid(dt) || kiln_dtype_size((kiln_dtype)dt) == 0)
        return KILN_VALIDATE_FAIL(op, node, "attribute 'output_datatype' = %d is not supported",
                                  (int)dt);
    return KILN_OK;
}

static kiln_status window_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_window_attrs *at = attrs;
    KILN_TRY(out_dtype_validate(op, node, at->output_datatype));
    return kiln__check_attr(op, node, "periodic", at->periodic, 0, 1);
}

static kiln_status window_infer(const kiln_infer_args *a) {
    const kiln_window_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    const kiln_tinfo *n = a->in[0];
    kiln_tinfo *y = a->out[0];
    if (n->rank >= 0 && !scalar_int_info(n))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): size must be an integer scalar", nm,
                         a->op->name);
    y->dtype = (kiln_dtype)at->output_datatype;
    y->data = NULL;
    y->rank = 1;
    y->dims[0] = KILN_DIM_UNKNOWN;
    if (n->data) {
        int64_t s = kiln__tinfo_int(n, 0);
        if (s < 0)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): size %lld is negative", nm,
                             a->op->name, (long long)s);
        y->dims[0] = s;
    }
    return KILN_OK;
}

static kiln_status window_cpu(const kiln_kernel_args *a) {
    const kiln_window_attrs *at = a->attrs;
    kiln_tensor *y = a->out[0];
    int64_t n = y->dims[0];
    double N = at->periodic ? (double)n : (double)(n - 1);
    for (int64_t i = 0; i < n; i++) {
        double v = 1.0;
        if (N > 0) {
            double t = 2.0 * KILN_PI * (double)i / N;
            switch (a->op->code) {
            case WIN_BLACKMAN: v = 0.42 - 0.5 * cos(t) + 0.08 * cos(2.0 * t); break;
            case WIN_HAMMING: v = 25.0 / 46.0 - (21.0 / 46.0) * cos(t); break;
            default: v = 0.5 - 0.5 * cos(t); break;
            }
        }
        kiln__store_f64(y->dtype, y->data, i, v);
    }
    return KILN_OK;
}

#define WINDOW_OP(SYM, NAME, CODE)                                                            \
    const kiln_op_def kiln_op_##SYM = {                                                       \
        .name = NAME, .domain = "", .since = 17,                                              \
        .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,                \
        .code = CODE, .attr_size = sizeof(kiln_window_attrs),                                  \
        .host_inputs = 1u << 0, /* size: read by infer */                                     \
        .import = window_import, .validate = window_validate, .infer = window_infer,         \
        .cpu = window_cpu,                                                                    \
    }

WINDOW_OP(BlackmanWindow, "BlackmanWindow", WIN_BLACKMAN);
WINDOW_OP(HammingWindow, "HammingWindow", WIN_HAMMING);
WINDOW_OP(HannWindow, "HannWindow", WIN_HANN);

/* ---- transform engine -------------------------------------------------- */

typedef struct dft_plan {
    int64_t n;        /* transform length */
    bool inverse;
    bool pow2;
    double *tw;       /* 2n: cos, sin of 2*pi*m/n */
    double *buf;      /* 2n: work line (interleaved re, im) */
} dft_plan;

static kiln_status dft_plan_init(dft_plan *p, int64_t n, bool inverse, const char *nm,
                                 const char *opname) {
    p->n = n;
    p->inverse = inverse;
    p->pow2 = n > 0 && (n & (n - 1)) == 0;
    p->tw = kiln__malloc((size_t)(4 * (n > 0 ? n : 1)) * sizeof(double));
    if (!p->tw) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (%s): out of memory", nm, opname);
    p->buf = p->tw + 2 * (n > 0 ? n : 1);
    for (int64_t m = 0; m < n; m++) {
        double ang = 2.0 * KILN_PI * (double)m / (double)n;
        p->tw[2 * m] = cos(ang);
        p->tw[2 * m + 1] = sin(ang);
    }
    return KILN_OK;
}

static void dft_plan_free(dft_plan *p) { kiln__free(p->tw); }

/* Transforms p->buf in place into out[0..n_out) (interleaved), scaled by
 * 1/n when inverse. */
static void dft_run(dft_plan *p, double *out, int64_t n_out) {
    int64_t n = p->n;
    double sgn = p->inverse ? 1.0 : -1.0;
    double scale = p->inverse && n > 0 ? 1.0 / (double)n : 1.0;
    double *x = p->buf;
    if (p->pow2) {
        /* bit reversal */
        for (int64_t i = 1, j = 0; i < n; i++) {
            int64_t bit = n >> 1;
            for (; j & bit; bit >>= 1) j ^= bit;
            j ^= bit;
            if (i < j) {
                double t0 = x[2 * i], t1 = x[2 * i + 1];
                x[2 * i] = x[2 * j];
                x[2 * i + 1] = x[2 * j + 1];
                x[2 * j] = t0;
                x[2 * j + 1] = t1;
            }
        }
        for (int64_t len = 2; len <= n; len <<= 1) {
            int64_t step = n / len;
            for (int64_t i = 0; i < n; i += len)
                for (int64_t k = 0; k < len / 2; k++) {
                    double wr = p->tw[2 * k * step], wi = sgn * p->tw[2 * k * step + 1];
                    double *u = x + 2 * (i + k), *v = x + 2 * (i + k + len / 2);
                    double vr = v[0] * wr - v[1] * wi, vi = v[0] * wi + v[1] * wr;
                    v[0] = u[0] - vr;
                    v[1] = u[1] - vi;
                    u[0] += vr;
                    u[1] += vi;
                }
        }
        for (int64_t k = 0; k < n_out; k++) {
            out[2 * k] = x[2 * k] * scale;
            out[2 * k + 1] = x[2 * k + 1] * scale;
        }
        return;
    }
    for (int64_t k = 0; k < n_out; k++) {
        double re = 0.0, im = 0.0;
        int64_t m = 0;
        for (int64_t j = 0; j < n; j++) {
            double wr = p->tw[2 * m], wi = sgn * p->tw[2 * m + 1];
            re += x[2 * j] * wr - x[2 * j + 1] * wi;
            im += x[2 * j] * wi + x[2 * j + 1] * wr;
            m += k;
            if (m >= n) m -= n;
        }
        out[2 * k] = re * scale;
        out[2 * k + 1] = im * scale;
    }
}

/* ---- DFT --------------------------------------------------------------------- */

static kiln_status dft_import(kiln_import_ctx *ic, void *attrs) {
    kiln_dft_attrs *at = attrs;
    at->inverse = kiln_attr_int(ic, "inverse", 0) != 0;
    at->onesided = kiln_attr_int(ic, "onesided", 0) != 0;
    return kiln_attr_int32(ic, "axis", 1, &at->axis);
}

static kiln_status dft_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_dft_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "axis", at->axis, -KILN_MAX_RANK, KILN_MAX_RANK - 1));
    KILN_TRY(kiln__check_attr(op, node, "inverse", at->inverse, 0, 1));
    return kiln__check_attr(op, node, "onesided", at->onesided, 0, 1);
}

/* Axis of the signal: not the last (complex) dimension. */
static kiln_status dft_axis(const char *nm, int32_t axis, int rank, int *out) {
    int ax = axis < 0 ? axis + rank : axis;
    if (ax < 0 || ax >= rank - 1)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (DFT): axis %d is out of range for an input of rank %d (the "
                         "last dimension holds real/imaginary parts)", nm, (int)axis, rank);
    *out = ax;
    return KILN_OK;
}

static kiln_status dft_infer(const kiln_infer_args *a) {
    const kiln_dft_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    const kiln_tinfo *x = a->in[0];
    const kiln_tinfo *len = a->n_in > 1 ? a->in[1] : NULL;
    kiln_tinfo *y = a->out[0];
    if (!kiln__dtype_is_float(x->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (DFT): dtype %s is not supported", nm,
                         kiln_dtype_name(x->dtype));
    if (len && len->rank >= 0 && !scalar_int_info(len))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (DFT): dft_length must be an integer scalar", nm);
    y->dtype = x->dtype;
    y->data = NULL;
    if (x->rank < 0) {
        y->rank = -1;
        return KILN_OK;
    }
    if (x->rank < 2 || (x->dims[x->rank - 1] >= 0 && x->dims[x->rank - 1] != 1 &&
                        x->dims[x->rank - 1] != 2))
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (DFT): input must be [batch, ..., 1 or 2], got rank %d", nm,
                         x->rank);
    int ax = 0;
    KILN_TRY(dft_axis(nm, at->axis, x->rank, &ax));
    int64_t n = x->dims[ax];
    if (len) {
        n = KILN_DIM_UNKNOWN;
        if (len->data) {
            n = kiln__tinfo_int(len, 0);
            if (n < 1)
                return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (DFT): dft_length %lld must be >= 1",
                                 nm, (long long)n);
        }
    }
    kiln__tinfo_copy_shape(y, x);
    y->dtype = x->dtype;
    y->dims[ax] = n < 0 ? KILN_DIM_UNKNOWN : (at->onesided ? n / 2 + 1 : n);
    y->dims[x->rank - 1] = 2;
    return KILN_OK;
}

static kiln_status dft_cpu(const kiln_kernel_args *a) {
    const kiln_dft_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    const kiln_tensor *x = a->in[0];
    const kiln_tensor *len = a->n_in > 1 ? a->in[1] : NULL;
    kiln_tensor *y = a->out[0];
    int r = x->rank, ax = 0;
    KILN_TRY(dft_axis(nm, at->axis, r, &ax));
    int64_t comp = x->dims[r - 1];
    int64_t L = x->dims[ax];
    int64_t n = len ? kiln__load_i64(len->dtype, len->data, 0) : L;
    if (n < 1 || n > ((int64_t)1 << 40))
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "node '%s' (DFT): dft_length %lld is not in [1, 2^40]", nm, (long long)n);
    int64_t n_out = y->dims[ax];
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; i++) outer *= x->dims[i];
    for (int i = ax + 1; i < r - 1; i++) inner *= x->dims[i];
    dft_plan p;
    KILN_TRY(dft_plan_init(&p, n, at->inverse != 0, nm, "DFT"));
    double *res = kiln__malloc((size_t)(2 * n_out + 2) * sizeof(double));
    if (!res) {
        dft_plan_free(&p);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (DFT): out of memory", nm);
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            for (int64_t j = 0; j < n; j++) {
                double re = 0.0, im = 0.0;
                if (j < L) {
                    int64_t e = ((o * L + j) * inner + i) * comp;
                    re = kiln__load_f64(x->dtype, x->data, e);
                    im = comp == 2 ? kiln__load_f64(x->dtype, x->data, e + 1) : 0.0;
                }
                p.buf[2 * j] = re;
                p.buf[2 * j + 1] = im;
            }
            dft_run(&p, res, n_out);
            for (int64_t k = 0; k < n_out; k++) {
                int64_t e = ((o * n_out + k) * inner + i) * 2;
                kiln__store_f64(y->dtype, y->data, e, res[2 * k]);
                kiln__store_f64(y->dtype, y->data, e + 1, res[2 * k + 1]);
            }
        }
    kiln__free(res);
    dft_plan_free(&p);
    return KILN_OK;
}

const kiln_op_def kiln_op_DFT = {
    .name = "DFT", .domain = "", .since = 17,
    .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_dft_attrs),
    .host_inputs = 1u << 1, /* dft_length: read by infer */
    .import = dft_import, .validate = dft_validate, .infer = dft_infer, .cpu = dft_cpu,
};

/* ---- STFT -------------------------------------------------------------------
 * signal [batch, length, 1 or 2], frame_step (scalar), window [frame_length]
 * (optional), frame_length (scalar, optional) -> [batch, frames, bins, 2]. */

static kiln_status stft_import(kiln_import_ctx *ic, void *attrs) {
    kiln_stft_attrs *at = attrs;
    at->onesided = kiln_attr_int(ic, "onesided", 1) != 0;
    return KILN_OK;
}

static kiln_status stft_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    return kiln__check_attr(op, node, "onesided", ((const kiln_stft_attrs *)attrs)->onesided, 0, 1);
}

/* frame length from the window and/or frame_length input; -1 if unknown */
static kiln_status stft_frame_length(const char *nm, const kiln_tinfo *win, const kiln_tinfo *fl,
                                     int64_t *out) {
    int64_t w = win ? (win->rank == 1 ? win->dims[0] : -2) : -1;
    if (w == -2) return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (STFT): window must be 1-D", nm);
    int64_t f = -1;
    if (fl) {
        if (fl->rank >= 0 && !scalar_int_info(fl))
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (STFT): frame_length must be an integer "
                             "scalar", nm);
        if (fl->data) f = kiln__tinfo_int(fl, 0);
    }
    if (!win && !fl)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (STFT): needs a window or a frame_length", nm);
    if (w >= 0 && f >= 0 && w != f)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (STFT): window has %lld elements but frame_length is %lld", nm,
                         (long long)w, (long long)f);
    *out = f >= 0 ? f : w;
    if (fl && !fl->data && w < 0) *out = -1;
    return KILN_OK;
}

static kiln_status stft_infer(const kiln_infer_args *a) {
    const kiln_stft_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    const kiln_tinfo *x = a->in[0], *step = a->in[1];
    const kiln_tinfo *win = a->n_in > 2 ? a->in[2] : NULL;
    const kiln_tinfo *fl = a->n_in > 3 ? a->in[3] : NULL;
    kiln_tinfo *y = a->out[0];
    if (!kiln__dtype_is_float(x->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (STFT): dtype %s is not supported", nm,
                         kiln_dtype_name(x->dtype));
    if (step->rank >= 0 && !scalar_int_info(step))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (STFT): frame_step must be an integer scalar", nm);
    if (x->rank >= 0 && (x->rank != 3 || (x->dims[2] >= 0 && x->dims[2] != 1 && x->dims[2] != 2)))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (STFT): signal must be [batch, length, 1 or 2]",
                         nm);
    int64_t flen = -1;
    KILN_TRY(stft_frame_length(nm, win, fl, &flen));
    y->dtype = x->dtype;
    y->data = NULL;
    y->rank = 4;
    y->dims[0] = x->rank == 3 ? x->dims[0] : KILN_DIM_UNKNOWN;
    y->dims[1] = KILN_DIM_UNKNOWN;
    y->dims[2] = flen >= 0 ? (at->onesided ? flen / 2 + 1 : flen) : KILN_DIM_UNKNOWN;
    y->dims[3] = 2;
    if (step->data && flen >= 0 && x->rank == 3 && x->dims[1] >= 0) {
        int64_t s = kiln__tinfo_int(step, 0);
        if (s < 1)
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (STFT): frame_step %lld must be >= 1", nm,
                             (long long)s);
        if (flen < 1 || flen > x->dims[1])
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (STFT): frame length %lld is not in [1, signal length %lld]",
                             nm, (long long)flen, (long long)x->dims[1]);
        y->dims[1] = (x->dims[1] - flen) / s + 1;
    }
    return KILN_OK;
}

static kiln_status stft_cpu(const kiln_kernel_args *a) {
    const kiln_stft_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    const kiln_tensor *x = a->in[0], *step = a->in[1];
    const kiln_tensor *win = a->n_in > 2 ? a->in[2] : NULL;
    const kiln_tensor *fl = a->n_in > 3 ? a->in[3] : NULL;
    kiln_tensor *y = a->out[0];
    int64_t s = kiln__load_i64(step->dtype, step->data, 0);
    int64_t flen = fl ? kiln__load_i64(fl->dtype, fl->data, 0) : win->dims[0];
    int64_t B = x->dims[0], L = x->dims[1], comp = x->dims[2];
    int64_t frames = y->dims[1], bins = y->dims[2];
    (void)at;
    if (s < 1 || flen < 1 || flen > L || (frames - 1) * s + flen > L)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "node '%s' (STFT): frame_step %lld / frame length %lld do not fit a signal "
                         "of %lld", nm, (long long)s, (long long)flen, (long long)L);
    dft_plan p;
    KILN_TRY(dft_plan_init(&p, flen, false, nm, "STFT"));
    double *res = kiln__malloc((size_t)(2 * bins + 2) * sizeof(double));
    if (!res) {
        dft_plan_free(&p);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (STFT): out of memory", nm);
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t f = 0; f < frames; f++) {
            for (int64_t j = 0; j < flen; j++) {
                int64_t e = (b * L + f * s + j) * comp;
                double w = win ? kiln__load_f64(win->dtype, win->data, j) : 1.0;
                p.buf[2 * j] = w * kiln__load_f64(x->dtype, x->data, e);
                p.buf[2 * j + 1] = comp == 2 ? w * kiln__load_f64(x->dtype, x->data, e + 1) : 0.0;
            }
            dft_run(&p, res, bins);
            for (int64_t k = 0; k < bins; k++) {
                int64_t e = ((b * frames + f) * bins + k) * 2;
                kiln__store_f64(y->dtype, y->data, e, res[2 * k]);
                kiln__store_f64(y->dtype, y->data, e + 1, res[2 * k + 1]);
            }
        }
    kiln__free(res);
    dft_plan_free(&p);
    return KILN_OK;
}

const kiln_op_def kiln_op_STFT = {
    .name = "STFT", .domain = "", .since = 17,
    .min_inputs = 2, .max_inputs = 4, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_stft_attrs),
    .host_inputs = (1u << 1) | (1u << 3), /* frame_step, frame_length: read by infer */
    .import = stft_import, .validate = stft_validate, .infer = stft_infer, .cpu = stft_cpu,
};

/* ---- MelWeightMatrix --------------------------------------------------------
 * Triangular filters between mel-spaced points; output
 * [dft_length / 2 + 1, num_mel_bins]. Mel points are spaced by
 * (mel(upper) - mel(lower)) / (num_mel_bins + 2) and mapped to spectrogram
 * bins with floor((dft_length + 1) * f / sample_rate), as in ONNX's
 * reference. */

static kiln_status mel_import(kiln_import_ctx *ic, void *attrs) {
    kiln_mel_attrs *at = attrs;
    return kiln_attr_int32(ic, "output_datatype", KILN_DTYPE_FLOAT32, &at->output_datatype);
}

static kiln_status mel_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    return out_dtype_validate(op, node, ((const kiln_mel_attrs *)attrs)->output_datatype);
}

static kiln_status mel_infer(const kiln_infer_args *a) {
    const kiln_mel_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    kiln_tinfo *y = a->out[0];
    for (int i = 0; i < 5; i++) {
        const kiln_tinfo *t = a->in[i];
        bool scalar = t->rank == 0 || (t->rank == 1 && t->dims[0] == 1);
        if (t->rank >= 0 && (!scalar || (i < 3 ? !kiln__dtype_is_int(t->dtype)
                                               : !kiln__dtype_is_float(t->dtype))))
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (MelWeightMatrix): input %d must be a %s "
                             "scalar", nm, i, i < 3 ? "integer" : "float");
    }
    y->dtype = (kiln_dtype)at->output_datatype;
    y->data = NULL;
    y->rank = 2;
    y->dims[0] = a->in[1]->data ? kiln__tinfo_int(a->in[1], 0) / 2 + 1 : KILN_DIM_UNKNOWN;
    y->dims[1] = a->in[0]->data ? kiln__tinfo_int(a->in[0], 0) : KILN_DIM_UNKNOWN;
    if ((a->in[1]->data && kiln__tinfo_int(a->in[1], 0) < 1) ||
        (a->in[0]->data && kiln__tinfo_int(a->in[0], 0) < 0))
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (MelWeightMatrix): dft_length must be >= 1 and num_mel_bins >= 0",
                         nm);
    return KILN_OK;
}

static kiln_status mel_cpu(const kiln_kernel_args *a) {
    const char *nm = a->node_name ? a->node_name : "?";
    kiln_tensor *y = a->out[0];
    int64_t nmel = kiln__load_i64(a->in[0]->dtype, a->in[0]->data, 0);
    int64_t dftl = kiln__load_i64(a->in[1]->dtype, a->in[1]->data, 0);
    int64_t sr = kiln__load_i64(a->in[2]->dtype, a->in[2]->data, 0);
    double lo = kiln__load_f64(a->in[3]->dtype, a->in[3]->data, 0);
    double hi = kiln__load_f64(a->in[4]->dtype, a->in[4]->data, 0);
    int64_t nb = dftl / 2 + 1;
    if (sr <= 0)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "node '%s' (MelWeightMatrix): sample_rate %lld must be positive", nm,
                         (long long)sr);
    int64_t *pt = kiln__malloc((size_t)(nmel + 2) * sizeof(int64_t));
    if (!pt) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (MelWeightMatrix): out of memory", nm);
    double lm = 2595.0 * log10(1.0 + lo / 700.0), hm = 2595.0 * log10(1.0 + hi / 700.0);
    double step = (hm - lm) / (double)(nmel + 2);
    for (int64_t i = 0; i < nmel + 2; i++) {
        double f = 700.0 * (pow(10.0, ((double)i * step + lm) / 2595.0) - 1.0);
        double b = floor(((double)dftl + 1.0) * f / (double)sr); /* no int64 overflow */
        /* bounded (NaN -> -1) so that the conversion is defined; the loops
         * below only write inside the spectrogram */
        pt[i] = b >= -1.0 ? (int64_t)fmin(b, 4.0e15) : -1;
    }
    int64_t total = nb * nmel;
    for (int64_t i = 0; i < total; i++) kiln__store_f64(y->dtype, y->data, i, 0.0);
    for (int64_t m = 0; m < nmel; m++) {
        int64_t l = pt[m], c = pt[m + 1], h = pt[m + 2];
        if (c == l) {
            if (c >= 0 && c < nb) kiln__store_f64(y->dtype, y->data, c * nmel + m, 1.0);
        } else {
            for (int64_t j = l > 0 ? l : 0; j <= c && j < nb; j++)
                kiln__store_f64(y->dtype, y->data, j * nmel + m, (double)(j - l) / (double)(c - l));
        }
        if (h > c)
            for (int64_t j = c > 0 ? c : 0; j < h && j < nb; j++)
                kiln__store_f64(y->dtype, y->data, j * nmel + m, (double)(h - j) / (double)(h - c));
    }
    kiln__free(pt);
    return KILN_OK;
}

const kiln_op_def kiln_op_MelWeightMatrix = {
    .name = "MelWeightMatrix", .domain = "", .since = 17,
    .min_inputs = 5, .max_inputs = 5, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_mel_attrs),
    .host_inputs = 0x1fu, /* num_mel_bins, dft_length: read by infer; the other scalars are
                             kept on the host too, so the CUDA kernel reads them without a sync */
    .import = mel_import, .validate = mel_validate, .infer = mel_infer, .cpu = mel_cpu,
};
