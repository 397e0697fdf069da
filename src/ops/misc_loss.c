/* misc_loss.c -- NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
 *
 * input [N, C, d1..dk] (scores), target [N, d1..dk] (int32/int64 class ids),
 * optional weight [C]. Per element: loss = -w[t] * input[n, t, d], and 0 with
 * weight 0 where t == ignore_index. reduction none: the per-element losses;
 * sum: their sum; mean: their sum divided by the sum of the weights used
 * (the count of non-ignored elements without `weight`).
 * SoftmaxCrossEntropyLoss applies log_softmax over axis 1 first and can
 * return it as output 1 (log_prob). Arithmetic in double. */
#include "ops/misc_attrs.h" /* kiln_loss_attrs, loss_red */
#include "ops/op.h"

#include <math.h>

static kiln_status loss_import(kiln_import_ctx *ic, void *attrs) {
    kiln_loss_attrs *at = attrs;
    const char *r = kiln_attr_string(ic, "reduction", "mean");
    if (!strcmp(r, "none")) at->reduction = LOSS_NONE;
    else if (!strcmp(r, "sum")) at->reduction = LOSS_SUM;
    else if (!strcmp(r, "mean")) at->reduction = LOSS_MEAN;
    else return KILN_IMPORT_FAIL(ic, "attribute 'reduction' = '%s' is not supported", r);
    at->has_ignore = kiln_attr_has(ic, "ignore_index");
    at->ignore_index = kiln_attr_int(ic, "ignore_index", 0);
    return KILN_OK;
}

/* reduction a LOSS_*; has_ignore 0 or 1; ignore_index any value */
static kiln_status loss_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_loss_attrs *at = attrs;
    KILN_TRY(kiln__check_attr(op, node, "reduction", at->reduction, LOSS_NONE, LOSS_MEAN));
    return kiln__check_attr(op, node, "has_ignore", at->has_ignore, 0, 1);
}

static kiln_status loss_infer(const kiln_infer_args *a) {
    const kiln_loss_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    const kiln_tinfo *x = a->in[0], *t = a->in[1];
    const kiln_tinfo *w = a->n_in > 2 ? a->in[2] : NULL;
    if (!kiln__dtype_is_float(x->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): input dtype %s is not supported",
                         nm, a->op->name, kiln_dtype_name(x->dtype));
    if (t->dtype != KILN_DTYPE_INT32 && t->dtype != KILN_DTYPE_INT64)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): target must be int32 or int64, got %s",
                         nm, a->op->name, kiln_dtype_name(t->dtype));
    if (w && w->dtype != x->dtype)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): weight is %s but input is %s", nm,
                         a->op->name, kiln_dtype_name(w->dtype), kiln_dtype_name(x->dtype));
    if (x->rank >= 0 && x->rank < 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): input must be [N, C, ...], got rank %d",
                         nm, a->op->name, x->rank);
    if (x->rank >= 0 && t->rank >= 0) {
        bool bad = t->rank != x->rank - 1;
        for (int i = 0; !bad && i < t->rank; i++) {
            int64_t xd = x->dims[i == 0 ? 0 : i + 1], td = t->dims[i];
            if (xd >= 0 && td >= 0 && xd != td) bad = true;
        }
        if (bad) {
            char b1[128], b2[128];
            return KILN_FAIL(KILN_ERR_MODEL,
                             "node '%s' (%s): target %s does not match input %s ([N, d1..] vs "
                             "[N, C, d1..])", nm, a->op->name,
                             kiln__shape_str(t->rank, t->dims, b1, sizeof b1),
                             kiln__shape_str(x->rank, x->dims, b2, sizeof b2));
        }
    }
    if (w && w->rank >= 0 && (w->rank != 1 || (x->rank >= 2 && x->dims[1] >= 0 &&
                                                w->dims[0] >= 0 && w->dims[0] != x->dims[1])))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): weight must be [C]", nm, a->op->name);
    kiln_tinfo *y = a->out[0];
    y->dtype = x->dtype;
    y->data = NULL;
    if (at->reduction == LOSS_NONE) {
        if (t->rank >= 0) {
            y->rank = t->rank;
            memcpy(y->dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
        } else if (x->rank >= 0) {
            y->rank = x->rank - 1;
            y->dims[0] = x->dims[0];
            for (int i = 2; i < x->rank; i++) y->dims[i - 1] = x->dims[i];
        } else {
            y->rank = -1;
        }
    } else {
        y->rank = 0;
    }
    if (a->n_out > 1 && a->out[1]) {
        kiln__tinfo_copy_shape(a->out[1], x);
        a->out[1]->dtype = x->dtype;
        a->out[1]->data = NULL;
    }
    return KILN_OK;
}

static kiln_status loss_cpu(const kiln_kernel_args *a) {
    const kiln_loss_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    const kiln_tensor *x = a->in[0], *t = a->in[1];
    const kiln_tensor *w = a->n_in > 2 ? a->in[2] : NULL;
    kiln_tensor *y = a->out[0];
    kiln_tensor *lp = a->n_out > 1 ? a->out[1] : NULL;
    bool sce = a->op->code == 1;
    int64_t N = x->dims[0], C = x->dims[1], D = 1;
    for (int i = 2; i < x->rank; i++) D *= x->dims[i];
    kiln_dtype dt = x->dtype;
    int64_t nx = N * C * D;

    /* the (log-)probabilities the loss picks from */
    const void *src = x->data;
    kiln_dtype sdt = dt;
    double *logp = NULL;
    if (sce) {
        logp = kiln__malloc((size_t)(nx > 0 ? nx : 1) * sizeof(double));
        if (!logp) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (%s): out of memory", nm,
                                    a->op->name);
        for (int64_t n = 0; n < N; n++)
            for (int64_t d = 0; d < D; d++) {
                int64_t base = n * C * D + d;
                double mx = -INFINITY;
                for (int64_t c = 0; c < C; c++) {
                    double v = kiln__load_f64(dt, x->data, base + c * D);
                    if (v > mx) mx = v;
                }
                double s = 0.0;
                for (int64_t c = 0; c < C; c++) s += exp(kiln__load_f64(dt, x->data, base + c * D) - mx);
                double lse = log(s) + mx;
                for (int64_t c = 0; c < C; c++)
                    logp[base + c * D] = kiln__load_f64(dt, x->data, base + c * D) - lse;
            }
        if (lp)
            for (int64_t i = 0; i < nx; i++) kiln__store_f64(dt, lp->data, i, logp[i]);
        src = logp;
        sdt = KILN_DTYPE_FLOAT64;
    }
    double sum = 0.0, wsum = 0.0;
    kiln_status st = KILN_OK;
    for (int64_t n = 0; n < N && st == KILN_OK; n++)
        for (int64_t d = 0; d < D; d++) {
            int64_t tv = kiln__load_i64(t->dtype, t->data, n * D + d);
            double l = 0.0, wt = 0.0;
            if (!(at->has_ignore && tv == at->ignore_index)) {
                if (tv < 0 || tv >= C) {
                    st = KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                                   "node '%s' (%s): target value %lld at %lld is not a class in "
                                   "[0, %lld)", nm, a->op->name, (long long)tv,
                                   (long long)(n * D + d), (long long)C);
                    break;
                }
                wt = w ? kiln__load_f64(w->dtype, w->data, tv) : 1.0;
                l = -wt * kiln__load_f64(sdt, src, (n * C + tv) * D + d);
            }
            if (at->reduction == LOSS_NONE) kiln__store_f64(dt, y->data, n * D + d, l);
            sum += l;
            wsum += wt;
        }
    kiln__free(logp);
    if (st != KILN_OK) return st;
    if (at->reduction == LOSS_SUM) kiln__store_f64(dt, y->data, 0, sum);
    else if (at->reduction == LOSS_MEAN) kiln__store_f64(dt, y->data, 0, sum / wsum);
    return KILN_OK;
}

const kiln_op_def kiln_op_NegativeLogLikelihoodLoss = {
    .name = "NegativeLogLikelihoodLoss", .domain = "", .since = 12,
    .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .code = 0, .attr_size = sizeof(kiln_loss_attrs),
    .import = loss_import, .validate = loss_validate, .infer = loss_infer, .cpu = loss_cpu,
};

const kiln_op_def kiln_op_SoftmaxCrossEntropyLoss = {
    .name = "SoftmaxCrossEntropyLoss", .domain = "", .since = 12,
    .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 2,
    .code = 1, .attr_size = sizeof(kiln_loss_attrs),
    .import = loss_import, .validate = loss_validate, .infer = loss_infer, .cpu = loss_cpu,
};
