/* misc_rnn.c -- the recurrent ops RNN, GRU and LSTM (float32).
 *
 * Inputs X, W, R, B, sequence_lens, initial_h (+ initial_c, P for LSTM);
 * outputs Y, Y_h (+ Y_c for LSTM). Directions forward, reverse and
 * bidirectional; layout 0 ([seq, batch, ...]) and 1 ([batch, seq, ...]);
 * per-batch sequence lengths (Y is zero past a sequence's end; Y_h/Y_c hold
 * the state after its last step, and the reverse direction starts at each
 * sequence's last valid step). Gate order: RNN i; GRU z, r, h; LSTM i, o,
 * f, c (peepholes i, o, f).
 *
 * Per direction: the input projection X * W^T (+ biases) for every step is
 * one GEMM; each step then does H * R^T (GRU with linear_before_reset = 0:
 * two GEMMs, the second on r (.) H) and the elementwise gate math.
 *
 * Activations: the defaults (RNN Tanh; GRU Sigmoid, Tanh; LSTM Sigmoid,
 * Tanh, Tanh), or Sigmoid/Tanh/Relu chosen per gate by `activations`. */
#include "backends/cpu/kernels/gemm.h"
#include "ops/op.h"
#include "ops/seq_attrs.h"

#include <math.h>


static int rnn_gates(int kind) { return kind == KILN_RNN_LSTM ? 4 : kind == KILN_RNN_GRU ? 3 : 1; }

static kiln_status rnn_import(kiln_import_ctx *ic, void *attrs, int kind) {
    kiln_rnn_attrs *at = attrs;
    KILN_TRY(kiln_attr_int32(ic, "hidden_size", 0, &at->hidden_size));
    const char *dir = kiln_attr_string(ic, "direction", "forward");
    if (!strcmp(dir, "forward")) at->direction = KILN_RNN_FORWARD;
    else if (!strcmp(dir, "reverse")) at->direction = KILN_RNN_REVERSE;
    else if (!strcmp(dir, "bidirectional")) at->direction = KILN_RNN_BIDI;
    else return KILN_IMPORT_FAIL(ic, "attribute 'direction' = '%s' is not supported", dir);
    KILN_TRY(kiln_attr_int32(ic, "layout", 0, &at->layout));
    at->linear_before_reset = kind == KILN_RNN_GRU && kiln_attr_int(ic, "linear_before_reset", 0) != 0;
    at->input_forget = kind == KILN_RNN_LSTM && kiln_attr_int(ic, "input_forget", 0) != 0;
    if (kiln_attr_has(ic, "clip")) {
        at->has_clip = 1;
        at->clip = kiln_attr_float(ic, "clip", 0.f);
    }
    if (kiln_attr_has(ic, "activation_alpha") || kiln_attr_has(ic, "activation_beta"))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s': attributes 'activation_alpha'/'activation_beta' are not "
                         "supported (only Sigmoid, Tanh and Relu activations are)",
                         kiln_import_node_name(ic));
    for (int d = 0; d < 2; d++) {
        if (kind == KILN_RNN_SIMPLE) {
            at->act[d * 3 + 0] = KILN_RNN_ACT_TANH;
        } else {
            at->act[d * 3 + 0] = KILN_RNN_ACT_SIGMOID;
            at->act[d * 3 + 1] = KILN_RNN_ACT_TANH;
            at->act[d * 3 + 2] = KILN_RNN_ACT_TANH;
        }
    }
    const char *acts[6];
    int per_dir = kind == KILN_RNN_LSTM ? 3 : kind == KILN_RNN_GRU ? 2 : 1;
    int n_dir = at->direction == KILN_RNN_BIDI ? 2 : 1;
    int n_act = kiln_attr_strings(ic, "activations", acts, 6);
    if (n_act >= 0) {
        if (n_act != per_dir * n_dir)
            return KILN_IMPORT_FAIL(ic, "attribute 'activations' has %d entries; %d expected", n_act,
                                    per_dir * n_dir);
        for (int i = 0; i < n_act; i++) {
            int a;
            if (!strcmp(acts[i], "Sigmoid")) a = KILN_RNN_ACT_SIGMOID;
            else if (!strcmp(acts[i], "Tanh")) a = KILN_RNN_ACT_TANH;
            else if (!strcmp(acts[i], "Relu")) a = KILN_RNN_ACT_RELU;
            else
                return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                                 "node '%s': activation '%s' is not supported (Sigmoid, Tanh and "
                                 "Relu are)", kiln_import_node_name(ic), acts[i]);
            at->act[(i / per_dir) * 3 + i % per_dir] = a;
        }
    }
    return KILN_OK;
}

/* hidden_size >= 0 (0: from R); direction, layout and the activations
 * within their enums; a clip, when there is one, positive; the flags of
 * the other kinds 0 */
static kiln_status rnn_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_rnn_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "hidden_size", at->hidden_size, 0, INT32_MAX));
    KILN_TRY(kiln__check_attr(op, node, "direction", at->direction, KILN_RNN_FORWARD, KILN_RNN_BIDI));
    KILN_TRY(kiln__check_attr(op, node, "layout", at->layout, 0, 1));
    KILN_TRY(kiln__check_attr(op, node, "linear_before_reset", at->linear_before_reset, 0,
                              op->code == KILN_RNN_GRU));
    KILN_TRY(kiln__check_attr(op, node, "input_forget", at->input_forget, 0,
                              op->code == KILN_RNN_LSTM));
    KILN_TRY(kiln__check_attr(op, node, "has_clip", at->has_clip, 0, 1));
    if (at->has_clip && !(at->clip > 0.f))
        return KILN_VALIDATE_FAIL(op, node, "attribute 'clip' must be positive");
    for (int i = 0; i < 6; i++)
        KILN_TRY(kiln__check_attr(op, node, "activations", at->act[i], KILN_RNN_ACT_SIGMOID,
                                  KILN_RNN_ACT_RELU));
    return KILN_OK;
}

static kiln_status rnn_import_simple(kiln_import_ctx *ic, void *attrs) {
    return rnn_import(ic, attrs, KILN_RNN_SIMPLE);
}
static kiln_status rnn_import_gru(kiln_import_ctx *ic, void *attrs) {
    return rnn_import(ic, attrs, KILN_RNN_GRU);
}
static kiln_status rnn_import_lstm(kiln_import_ctx *ic, void *attrs) {
    return rnn_import(ic, attrs, KILN_RNN_LSTM);
}

/* ---- shapes ------------------------------------------------------------ */

typedef struct rnn_dims {
    int64_t S, B, I, H, D, G;
} rnn_dims;

static bool dim_bad(int64_t have, int64_t want) { return have >= 0 && want >= 0 && have != want; }

/* Works on tinfo at build time (dims may be unknown: -1 results). */
static kiln_status rnn_check(const char *nm, const char *opname, const kiln_rnn_attrs *at, int kind,
                             int n_in, const kiln_tinfo *const *in, rnn_dims *d) {
    const kiln_tinfo *X = in[0], *W = in[1], *R = in[2];
    d->G = rnn_gates(kind);
    d->D = at->direction == KILN_RNN_BIDI ? 2 : 1;
    for (int i = 0; i < n_in; i++) {
        if (!in[i] || i == 4) continue;
        if (in[i]->dtype != KILN_DTYPE_FLOAT32)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): input %d has dtype %s; only "
                             "float32 is supported", nm, opname, i, kiln_dtype_name(in[i]->dtype));
    }
    if (n_in > 4 && in[4] && !kiln__dtype_is_int(in[4]->dtype))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): sequence_lens must be int32", nm, opname);
    if ((X->rank >= 0 && X->rank != 3) || (W->rank >= 0 && W->rank != 3) ||
        (R->rank >= 0 && R->rank != 3))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): X, W and R must have rank 3", nm, opname);
    d->S = X->rank == 3 ? X->dims[at->layout ? 1 : 0] : -1;
    d->B = X->rank == 3 ? X->dims[at->layout ? 0 : 1] : -1;
    d->I = X->rank == 3 ? X->dims[2] : -1;
    d->H = at->hidden_size > 0 ? at->hidden_size : (R->rank == 3 ? R->dims[2] : -1);
    int64_t GH = d->H >= 0 ? d->G * d->H : -1;
    if (W->rank == 3 && (dim_bad(W->dims[0], d->D) || dim_bad(W->dims[1], GH) ||
                         dim_bad(W->dims[2], d->I))) {
        char b[96];
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (%s): W is %s; expected [%lld, %lld, %lld] (directions, "
                         "gates*hidden_size, input_size)", nm, opname,
                         kiln__shape_str(3, W->dims, b, sizeof b), (long long)d->D,
                         (long long)GH, (long long)d->I);
    }
    if (R->rank == 3 && (dim_bad(R->dims[0], d->D) || dim_bad(R->dims[1], GH) ||
                         dim_bad(R->dims[2], d->H))) {
        char b[96];
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (%s): R is %s; expected [%lld, %lld, %lld]", nm, opname,
                         kiln__shape_str(3, R->dims, b, sizeof b), (long long)d->D, (long long)GH,
                         (long long)d->H);
    }
    const kiln_tinfo *Bi = n_in > 3 ? in[3] : NULL;
    if (Bi && Bi->rank >= 0 &&
        (Bi->rank != 2 || dim_bad(Bi->dims[0], d->D) || dim_bad(Bi->dims[1], GH >= 0 ? 2 * GH : -1)))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): B must be [%lld, %lld]", nm, opname,
                         (long long)d->D, (long long)(GH >= 0 ? 2 * GH : -1));
    const kiln_tinfo *sl = n_in > 4 ? in[4] : NULL;
    if (sl && sl->rank >= 0 && (sl->rank != 1 || dim_bad(sl->dims[0], d->B)))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): sequence_lens must be [%lld]", nm, opname,
                         (long long)d->B);
    for (int i = 5; i <= 6 && i < n_in; i++) {
        const kiln_tinfo *h = in[i];
        if (!h || h->rank < 0) continue;
        if (i == 6 && kind != KILN_RNN_LSTM) continue;
        int64_t e0 = at->layout ? d->B : d->D, e1 = at->layout ? d->D : d->B;
        if (h->rank != 3 || dim_bad(h->dims[0], e0) || dim_bad(h->dims[1], e1) ||
            dim_bad(h->dims[2], d->H))
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): %s must be [%lld, %lld, %lld]", nm,
                             opname, i == 5 ? "initial_h" : "initial_c", (long long)e0,
                             (long long)e1, (long long)d->H);
    }
    if (kind == KILN_RNN_LSTM && n_in > 7 && in[7] && in[7]->rank >= 0 &&
        (in[7]->rank != 2 || dim_bad(in[7]->dims[0], d->D) ||
         dim_bad(in[7]->dims[1], d->H >= 0 ? 3 * d->H : -1)))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): P must be [%lld, %lld]", nm, opname,
                         (long long)d->D, (long long)(d->H >= 0 ? 3 * d->H : -1));
    return KILN_OK;
}

static kiln_status rnn_infer(const kiln_infer_args *a) {
    const kiln_rnn_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    int kind = a->op->code;
    rnn_dims d;
    KILN_TRY(rnn_check(nm, a->op->name, at, kind, a->n_in, a->in, &d));
    for (int i = 0; i < a->n_out; i++) {
        kiln_tinfo *o = a->out[i];
        if (!o) continue;
        o->dtype = KILN_DTYPE_FLOAT32;
        o->data = NULL;
        if (i == 0) {
            o->rank = 4;
            if (at->layout) {
                o->dims[0] = d.B;
                o->dims[1] = d.S;
            } else {
                o->dims[0] = d.S;
                o->dims[1] = d.D;
                o->dims[2] = d.B;
            }
            if (at->layout) o->dims[2] = d.D;
            o->dims[3] = d.H;
        } else {
            o->rank = 3;
            o->dims[0] = at->layout ? d.B : d.D;
            o->dims[1] = at->layout ? d.D : d.B;
            o->dims[2] = d.H;
        }
    }
    return KILN_OK;
}

/* ---- kernel ------------------------------------------------------------ */

static inline float act_apply(int act, float v) {
    switch (act) {
    case KILN_RNN_ACT_SIGMOID: return 1.f / (1.f + expf(-v));
    case KILN_RNN_ACT_TANH: return tanhf(v);
    case KILN_RNN_ACT_RELU: return v < 0.f ? 0.f : v; /* NaN kept */
    default: return v;
    }
}

static inline float clipf(const kiln_rnn_attrs *at, float v) {
    if (!at->has_clip) return v;
    return v < -at->clip ? -at->clip : (v > at->clip ? at->clip : v);
}

static kiln_status rnn_cpu(const kiln_kernel_args *a) {
    const kiln_rnn_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    int kind = a->op->code;
    /* shapes via tinfo views of the tensors */
    kiln_tinfo ti[8];
    const kiln_tinfo *tip[8];
    int n_in = a->n_in < 8 ? a->n_in : 8;
    for (int i = 0; i < n_in; i++) {
        const kiln_tensor *t = a->in[i];
        if (!t) {
            tip[i] = NULL;
            continue;
        }
        ti[i].dtype = t->dtype;
        ti[i].rank = t->rank;
        memcpy(ti[i].dims, t->dims, sizeof t->dims);
        ti[i].data = t->data;
        tip[i] = &ti[i];
    }
    rnn_dims d;
    KILN_TRY(rnn_check(nm, a->op->name, at, kind, n_in, tip, &d));
    const int64_t S = d.S, Bt = d.B, I = d.I, H = d.H, D = d.D, G = d.G, GH = G * H;
    const float *X = a->in[0]->data, *W = a->in[1]->data, *R = a->in[2]->data;
    const float *Bias = n_in > 3 && a->in[3] ? a->in[3]->data : NULL;
    const kiln_tensor *sl = n_in > 4 ? a->in[4] : NULL;
    const float *h0 = n_in > 5 && a->in[5] ? a->in[5]->data : NULL;
    const float *c0 = kind == KILN_RNN_LSTM && n_in > 6 && a->in[6] ? a->in[6]->data : NULL;
    const float *P = kind == KILN_RNN_LSTM && n_in > 7 && a->in[7] ? a->in[7]->data : NULL;
    float *Y = a->n_out > 0 && a->out[0] ? a->out[0]->data : NULL;
    float *Yh = a->n_out > 1 && a->out[1] ? a->out[1]->data : NULL;
    float *Yc = kind == KILN_RNN_LSTM && a->n_out > 2 && a->out[2] ? a->out[2]->data : NULL;
    const bool lbr = at->linear_before_reset != 0;

    int64_t *lens = kiln__malloc((size_t)(Bt > 0 ? Bt : 1) * sizeof(int64_t));
    if (!lens) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (%s): out of memory", nm, a->op->name);
    for (int64_t b = 0; b < Bt; b++) {
        int64_t L = sl ? kiln__load_i64(sl->dtype, sl->data, b) : S;
        if (L < 0 || L > S) {
            kiln__free(lens);
            return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                             "node '%s' (%s): sequence_lens[%lld] = %lld is not in [0, %lld]", nm,
                             a->op->name, (long long)b, (long long)L, (long long)S);
        }
        lens[b] = L;
    }
    if (Y) memset(Y, 0, (size_t)(S * D * Bt * H) * sizeof(float));

    size_t n_xw = (size_t)(S * Bt * GH), n_hr = (size_t)(Bt * GH), n_st = (size_t)(Bt * H);
    float *buf = kiln__malloc((n_xw + n_hr + 3 * n_st + 1) * sizeof(float));
    if (!buf) {
        kiln__free(lens);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (%s): out of memory", nm, a->op->name);
    }
    float *XW = buf, *HR = XW + n_xw, *Hs = HR + n_hr, *Cs = Hs + n_st, *tmp = Cs + n_st;
    kiln_status st = KILN_OK;

    for (int64_t dir = 0; dir < D && st == KILN_OK; dir++) {
        bool reverse = at->direction == KILN_RNN_REVERSE || dir == 1;
        const float *Wd = W + dir * GH * I, *Rd = R + dir * GH * H;
        const float *Wb = Bias ? Bias + dir * 2 * GH : NULL;
        const float *Rb = Bias ? Wb + GH : NULL;
        const float *Pd = P ? P + dir * 3 * H : NULL;
        const int32_t *act = at->act + dir * 3;
        /* XW[row] = X[row] * Wd^T + folded biases; rows in X's memory order */
        st = kiln__sgemm(false, true, S * Bt, GH, I, 1.f, X, I, Wd, I, 0.f, XW, GH, a->pool);
        if (st != KILN_OK) break;
        if (Bias) {
            for (int64_t r = 0; r < S * Bt; r++) {
                float *row = XW + r * GH;
                for (int64_t j = 0; j < GH; j++) {
                    bool inner_rb = kind == KILN_RNN_GRU && lbr && j >= 2 * H;
                    row[j] += Wb[j] + (inner_rb ? 0.f : Rb[j]);
                }
            }
        }
        /* initial state */
        for (int64_t b = 0; b < Bt; b++) {
            int64_t off = at->layout ? (b * D + dir) * H : (dir * Bt + b) * H;
            for (int64_t j = 0; j < H; j++) {
                Hs[b * H + j] = h0 ? h0[off + j] : 0.f;
                Cs[b * H + j] = c0 ? c0[off + j] : 0.f;
            }
        }
        for (int64_t s = 0; s < S; s++) {
            /* HR = H * R^T (GRU without linear_before_reset: z and r only) */
            int64_t nrec = kind == KILN_RNN_GRU && !lbr ? 2 * H : GH;
            st = kiln__sgemm(false, true, Bt, nrec, H, 1.f, Hs, H, Rd, H, 0.f, HR, GH, a->pool);
            if (st != KILN_OK) break;
            if (kind == KILN_RNN_GRU && !lbr) {
                /* r = f(xw_r + hr_r); then HR_h = (r (.) H) * Rh^T */
                for (int64_t b = 0; b < Bt; b++) {
                    int64_t t = reverse ? lens[b] - 1 - s : s;
                    if (t < 0 || t >= lens[b]) {
                        for (int64_t j = 0; j < H; j++) tmp[b * H + j] = 0.f;
                        continue;
                    }
                    const float *xw = XW + (at->layout ? b * S + t : t * Bt + b) * GH;
                    for (int64_t j = 0; j < H; j++) {
                        float r = act_apply(act[0], clipf(at, xw[H + j] + HR[b * GH + H + j]));
                        tmp[b * H + j] = r * Hs[b * H + j];
                    }
                }
                st = kiln__sgemm(false, true, Bt, H, H, 1.f, tmp, H, Rd + 2 * H * H, H, 0.f,
                                 HR + 2 * H, GH, a->pool);
                if (st != KILN_OK) break;
            }
            for (int64_t b = 0; b < Bt; b++) {
                int64_t t = reverse ? lens[b] - 1 - s : s;
                if (t < 0 || t >= lens[b]) continue;
                const float *xw = XW + (at->layout ? b * S + t : t * Bt + b) * GH;
                const float *hr = HR + b * GH;
                float *h = Hs + b * H, *c = Cs + b * H;
                switch (kind) {
                case KILN_RNN_SIMPLE:
                    for (int64_t j = 0; j < H; j++) h[j] = act_apply(act[0], clipf(at, xw[j] + hr[j]));
                    break;
                case KILN_RNN_GRU:
                    for (int64_t j = 0; j < H; j++) {
                        float z = act_apply(act[0], clipf(at, xw[j] + hr[j]));
                        float hh;
                        if (lbr) {
                            float r = act_apply(act[0], clipf(at, xw[H + j] + hr[H + j]));
                            float rec = hr[2 * H + j] + (Rb ? Rb[2 * H + j] : 0.f);
                            hh = act_apply(act[1], clipf(at, xw[2 * H + j] + r * rec));
                        } else {
                            hh = act_apply(act[1], clipf(at, xw[2 * H + j] + hr[2 * H + j]));
                        }
                        h[j] = (1.f - z) * hh + z * h[j];
                    }
                    break;
                case KILN_RNN_LSTM:
                    for (int64_t j = 0; j < H; j++) {
                        float cp = c[j];
                        float gi = xw[j] + hr[j] + (Pd ? Pd[j] * cp : 0.f);
                        float it = act_apply(act[0], clipf(at, gi));
                        float ft;
                        if (at->input_forget) {
                            ft = 1.f - it;
                        } else {
                            float gf = xw[2 * H + j] + hr[2 * H + j] + (Pd ? Pd[2 * H + j] * cp : 0.f);
                            ft = act_apply(act[0], clipf(at, gf));
                        }
                        float ct = act_apply(act[1], clipf(at, xw[3 * H + j] + hr[3 * H + j]));
                        float cn = ft * cp + it * ct;
                        float go = xw[H + j] + hr[H + j] + (Pd ? Pd[H + j] * cn : 0.f);
                        float ot = act_apply(act[0], clipf(at, go));
                        c[j] = cn;
                        h[j] = ot * act_apply(act[2], cn);
                    }
                    break;
                default:
                    break;
                }
                if (Y) {
                    float *y = Y + (at->layout ? ((b * S + t) * D + dir) * H : ((t * D + dir) * Bt + b) * H);
                    memcpy(y, h, (size_t)H * sizeof(float));
                }
            }
        }
        if (st != KILN_OK) break;
        for (int64_t b = 0; b < Bt; b++) {
            int64_t off = at->layout ? (b * D + dir) * H : (dir * Bt + b) * H;
            if (Yh) memcpy(Yh + off, Hs + b * H, (size_t)H * sizeof(float));
            if (Yc) memcpy(Yc + off, Cs + b * H, (size_t)H * sizeof(float));
        }
    }
    kiln__free(buf);
    kiln__free(lens);
    return st;
}

const kiln_op_def kiln_op_RNN = {
    .name = "RNN", .domain = "", .since = 1,
    .min_inputs = 3, .max_inputs = 6, .min_outputs = 0, .max_outputs = 2,
    .code = KILN_RNN_SIMPLE, .attr_size = sizeof(kiln_rnn_attrs),
    .import = rnn_import_simple, .validate = rnn_validate, .infer = rnn_infer, .cpu = rnn_cpu,
};

const kiln_op_def kiln_op_GRU = {
    .name = "GRU", .domain = "", .since = 1,
    .min_inputs = 3, .max_inputs = 6, .min_outputs = 0, .max_outputs = 2,
    .code = KILN_RNN_GRU, .attr_size = sizeof(kiln_rnn_attrs),
    .import = rnn_import_gru, .validate = rnn_validate, .infer = rnn_infer, .cpu = rnn_cpu,
};

const kiln_op_def kiln_op_LSTM = {
    .name = "LSTM", .domain = "", .since = 1,
    .min_inputs = 3, .max_inputs = 8, .min_outputs = 0, .max_outputs = 3,
    .code = KILN_RNN_LSTM, .attr_size = sizeof(kiln_rnn_attrs),
    .import = rnn_import_lstm, .validate = rnn_validate, .infer = rnn_infer, .cpu = rnn_cpu,
};
