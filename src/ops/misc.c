/* misc.c -- Det and NonMaxSuppression. */
#include "ops/op.h"

#include <math.h>
#include <stdlib.h>

/* ---- Det ------------------------------------------------------------------
 * X: [..., M, M] -> Y: [...]. LU decomposition with partial pivoting in
 * double precision. */

static kiln_status det_infer(const kiln_infer_args *a) {
    const kiln_tinfo *x = a->in[0];
    kiln_tinfo *y = a->out[0];
    const char *nm = a->node_name ? a->node_name : "?";
    if (!kiln__dtype_is_float(x->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Det): dtype %s is not supported", nm,
                         kiln_dtype_name(x->dtype));
    y->dtype = x->dtype;
    y->data = NULL;
    if (x->rank < 0) {
        y->rank = -1;
        return KILN_OK;
    }
    if (x->rank < 2)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Det): input must have rank >= 2, got %d", nm,
                         x->rank);
    int64_t m = x->dims[x->rank - 1], n = x->dims[x->rank - 2];
    if (m >= 0 && n >= 0 && m != n) {
        char buf[128];
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Det): input %s is not made of square matrices",
                         nm, kiln__shape_str(x->rank, x->dims, buf, sizeof buf));
    }
    y->rank = x->rank - 2;
    for (int i = 0; i < y->rank; i++) y->dims[i] = x->dims[i];
    return KILN_OK;
}

static kiln_status det_cpu(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    const char *nm = a->node_name ? a->node_name : "?";
    if (!kiln__dtype_is_float(x->dtype))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (Det): dtype %s is not supported", nm,
                         kiln_dtype_name(x->dtype));
    int64_t n = x->dims[x->rank - 1];
    int64_t batch = kiln__numel(x->rank - 2, x->dims);
    if (batch == 0) return KILN_OK;
    double *m = kiln__malloc((size_t)(n * n > 0 ? n * n : 1) * sizeof(double));
    if (!m) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (Det): out of memory", nm);
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t i = 0; i < n * n; i++) m[i] = kiln__load_f64(x->dtype, x->data, b * n * n + i);
        double det = 1.0;
        for (int64_t c = 0; c < n; c++) {
            int64_t piv = c;
            double best = fabs(m[c * n + c]);
            for (int64_t r = c + 1; r < n; r++)
                if (fabs(m[r * n + c]) > best) {
                    best = fabs(m[r * n + c]);
                    piv = r;
                }
            if (best == 0.0) {
                det = 0.0;
                break;
            }
            if (piv != c) {
                for (int64_t j = 0; j < n; j++) {
                    double t = m[c * n + j];
                    m[c * n + j] = m[piv * n + j];
                    m[piv * n + j] = t;
                }
                det = -det;
            }
            double d = m[c * n + c];
            det *= d;
            for (int64_t r = c + 1; r < n; r++) {
                double f = m[r * n + c] / d;
                if (f == 0.0) continue;
                for (int64_t j = c + 1; j < n; j++) m[r * n + j] -= f * m[c * n + j];
            }
        }
        kiln__store_f64(y->dtype, y->data, b, det);
    }
    kiln__free(m);
    return KILN_OK;
}

const kiln_op_def kiln_op_Det = {
    .name = "Det", .domain = "", .since = 11,
    .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = det_infer, .cpu = det_cpu,
};

/* ---- NonMaxSuppression ----------------------------------------------------
 * boxes [B, N, 4], scores [B, C, N], max_output_boxes_per_class (int64,
 * optional, default 0), iou_threshold (float, optional, default 0),
 * score_threshold (float, optional: no filtering when absent).
 * Output: selected_indices [n_selected, 3] int64 of (batch, class, box). The
 * output size depends on the data, so infer runs the selection to count. */

typedef struct kiln_nms_attrs {
    int32_t center_point_box;
} kiln_nms_attrs;
KILN_ATTRS_SIZE(kiln_nms_attrs, 4); KILN_ATTRS_AT(kiln_nms_attrs, center_point_box, 0);

static kiln_status nms_import(kiln_import_ctx *ic, void *attrs) {
    kiln_nms_attrs *at = attrs;
    return kiln_attr_int32(ic, "center_point_box", 0, &at->center_point_box);
}

static kiln_status nms_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    return kiln__check_attr(op, node, "center_point_box",
                            ((const kiln_nms_attrs *)attrs)->center_point_box, 0, 1);
}

typedef struct nms_in {
    const float *boxes, *scores;
    int64_t B, N, C;
    int64_t max_out;
    float iou_th;
    bool has_score_th;
    float score_th;
    bool center;
} nms_in;

typedef struct nms_cand {
    float score;
    int64_t idx;
} nms_cand;

static int nms_cmp(const void *pa, const void *pb) {
    const nms_cand *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static void nms_box(const float *b, bool center, float *ymin, float *xmin, float *ymax, float *xmax) {
    if (center) {
        float xc = b[0], yc = b[1], w = b[2], h = b[3];
        *xmin = xc - w / 2;
        *xmax = xc + w / 2;
        *ymin = yc - h / 2;
        *ymax = yc + h / 2;
    } else {
        *ymin = fminf(b[0], b[2]);
        *ymax = fmaxf(b[0], b[2]);
        *xmin = fminf(b[1], b[3]);
        *xmax = fmaxf(b[1], b[3]);
    }
}

/* A box as {ymin, xmin, ymax, xmax} and its area, computed once per box. */
typedef struct nms_ext {
    float y0, x0, y1, x1, area;
} nms_ext;

static nms_ext nms_extent(const float *b, bool center) {
    nms_ext e;
    nms_box(b, center, &e.y0, &e.x0, &e.y1, &e.x1);
    e.area = (e.x1 - e.x0) * (e.y1 - e.y0);
    return e;
}

static bool nms_suppress(const nms_ext *a, const nms_ext *b, float th) {
    float ix0 = fmaxf(a->x0, b->x0), iy0 = fmaxf(a->y0, b->y0);
    float ix1 = fminf(a->x1, b->x1), iy1 = fminf(a->y1, b->y1);
    float inter = fmaxf(0.f, ix1 - ix0) * fmaxf(0.f, iy1 - iy0);
    if (inter <= 0.f) return false;
    float uni = a->area + b->area - inter;
    if (a->area <= 0.f || b->area <= 0.f || uni <= 0.f) return false;
    return inter / uni > th;
}

typedef struct nms_xkey {
    float x0;
    int64_t pos;
} nms_xkey;

static int nms_xcmp(const void *pa, const void *pb) {
    const nms_xkey *a = pa, *b = pb;
    if (a->x0 != b->x0) return a->x0 < b->x0 ? -1 : 1;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

/* Splits the nc candidates into groups whose boxes cannot overlap a box of
 * another group: sorted by xmin, a box that starts at or after the largest
 * xmax so far opens a new group. grp[i] is candidate i's group, or -1 for a
 * box that can neither suppress nor be suppressed (an area that is not
 * positive and finite: nms_suppress() is false for it with any box). Greedy
 * selection then compares a candidate only with the boxes selected in its
 * group and selects exactly the same boxes as comparing with all of them.
 * This is what makes torchvision's batched NMS, which offsets each class's
 * boxes so that classes never overlap (tens of thousands of boxes in one
 * NonMaxSuppression class), linear in the classes instead of quadratic. */
static void nms_group(const nms_ext *ext, int64_t nc, nms_xkey *key, int64_t *grp) {
    int64_t nk = 0;
    for (int64_t i = 0; i < nc; i++) {
        const nms_ext *e = &ext[i];
        if (!(e->area > 0.f) || !isfinite(e->area) || !isfinite(e->x0) || !isfinite(e->x1) ||
            !isfinite(e->y0) || !isfinite(e->y1)) {
            grp[i] = -1;
            continue;
        }
        key[nk].x0 = e->x0;
        key[nk].pos = i;
        nk++;
    }
    qsort(key, (size_t)nk, sizeof *key, nms_xcmp);
    int64_t g = -1;
    float xmax = 0.f;
    for (int64_t k = 0; k < nk; k++) {
        const nms_ext *e = &ext[key[k].pos];
        if (g < 0 || e->x0 >= xmax) {
            g++;
            xmax = e->x1;
        } else if (e->x1 > xmax) {
            xmax = e->x1;
        }
        grp[key[k].pos] = g;
    }
}

/* Runs the selection; writes up to `cap` triplets to out (if not NULL) and
 * the count of selected boxes. */
static kiln_status nms_run(const char *nm, const nms_in *p, int64_t *out, int64_t cap,
                           int64_t *count) {
    *count = 0;
    if (p->max_out <= 0 || p->N == 0) return KILN_OK;
    size_t n = (size_t)p->N;
    nms_cand *cand = kiln__malloc(n * sizeof *cand);
    nms_ext *ext = kiln__malloc(n * sizeof *ext);
    nms_xkey *key = kiln__malloc(n * sizeof *key);
    /* grp: each candidate's group; head: the last box selected in a group
     * (-1: none); prev: the box selected before it in its group. */
    int64_t *grp = kiln__malloc(n * sizeof *grp), *head = kiln__malloc(n * sizeof *head);
    int64_t *prev = kiln__malloc(n * sizeof *prev);
    kiln_status st = KILN_OK;
    if (!cand || !ext || !key || !grp || !head || !prev) {
        st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (NonMaxSuppression): out of memory", nm);
        goto done;
    }
    int64_t total = 0;
    for (int64_t b = 0; b < p->B; b++) {
        const float *boxes = p->boxes + b * p->N * 4;
        for (int64_t c = 0; c < p->C; c++) {
            const float *sc = p->scores + (b * p->C + c) * p->N;
            int64_t nc = 0;
            for (int64_t i = 0; i < p->N; i++) {
                if (sc[i] != sc[i]) continue; /* NaN scores are never selected */
                if (p->has_score_th && !(sc[i] > p->score_th)) continue;
                cand[nc].score = sc[i];
                cand[nc].idx = i;
                nc++;
            }
            qsort(cand, (size_t)nc, sizeof *cand, nms_cmp);
            for (int64_t i = 0; i < nc; i++) {
                ext[i] = nms_extent(boxes + cand[i].idx * 4, p->center);
                head[i] = -1;
            }
            nms_group(ext, nc, key, grp);
            int64_t ns = 0;
            for (int64_t i = 0; i < nc && ns < p->max_out; i++) {
                int64_t g = grp[i];
                bool keep = true;
                if (g >= 0) {
                    for (int64_t s = head[g]; s >= 0 && keep; s = prev[s])
                        if (nms_suppress(&ext[s], &ext[i], p->iou_th)) keep = false;
                    if (!keep) continue;
                    prev[i] = head[g];
                    head[g] = i;
                }
                ns++;
                if (out && total < cap) {
                    out[total * 3 + 0] = b;
                    out[total * 3 + 1] = c;
                    out[total * 3 + 2] = cand[i].idx;
                }
                total++;
            }
        }
    }
    *count = total;
done:
    kiln__free(cand);
    kiln__free(ext);
    kiln__free(key);
    kiln__free(grp);
    kiln__free(head);
    kiln__free(prev);
    return st;
}

/* Fills p from shapes and (optional) scalar inputs given as dtype/data/numel. */
static kiln_status nms_scalars(const char *nm, nms_in *p, const kiln_dtype *dt, const void *const *data,
                               const int64_t *numel) {
    p->max_out = 0;
    p->iou_th = 0.f;
    p->has_score_th = false;
    if (data[2] && numel[2] > 0) p->max_out = kiln__load_i64(dt[2], data[2], 0);
    if (data[3] && numel[3] > 0) p->iou_th = (float)kiln__load_f64(dt[3], data[3], 0);
    if (data[4] && numel[4] > 0) {
        p->has_score_th = true;
        p->score_th = (float)kiln__load_f64(dt[4], data[4], 0);
    }
    if (p->iou_th < 0.f || p->iou_th > 1.f)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "node '%s' (NonMaxSuppression): iou_threshold %g is not in [0, 1]", nm,
                         (double)p->iou_th);
    return KILN_OK;
}

static kiln_status nms_check_shapes(const char *nm, int rb, const int64_t *db, int rs,
                                    const int64_t *ds) {
    if (rb != 3 || rs != 3)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (NonMaxSuppression): boxes must be [B, N, 4] and scores "
                         "[B, C, N]; got ranks %d and %d", nm, rb, rs);
    if ((db[2] >= 0 && db[2] != 4) || (db[0] >= 0 && ds[0] >= 0 && db[0] != ds[0]) ||
        (db[1] >= 0 && ds[2] >= 0 && db[1] != ds[2])) {
        char b1[96], b2[96];
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (NonMaxSuppression): boxes %s and scores %s do not match "
                         "([B, N, 4] and [B, C, N])", nm, kiln__shape_str(rb, db, b1, sizeof b1),
                         kiln__shape_str(rs, ds, b2, sizeof b2));
    }
    return KILN_OK;
}

static kiln_status nms_infer(const kiln_infer_args *a) {
    const kiln_nms_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    const kiln_tinfo *bx = a->in[0], *sc = a->in[1];
    kiln_tinfo *y = a->out[0];
    y->dtype = KILN_DTYPE_INT64;
    y->data = NULL;
    y->rank = 2;
    y->dims[0] = KILN_DIM_UNKNOWN;
    y->dims[1] = 3;
    if (bx->dtype != KILN_DTYPE_FLOAT32 || sc->dtype != KILN_DTYPE_FLOAT32)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (NonMaxSuppression): boxes/scores must be float32, got %s/%s",
                         nm, kiln_dtype_name(bx->dtype), kiln_dtype_name(sc->dtype));
    if (bx->rank < 0 || sc->rank < 0) return KILN_OK;
    KILN_TRY(nms_check_shapes(nm, bx->rank, bx->dims, sc->rank, sc->dims));
    /* Count now if every input value is known. */
    kiln_dtype dt[5] = {0};
    const void *data[5] = {0};
    int64_t numel[5] = {0};
    for (int i = 2; i < 5 && i < a->n_in; i++) {
        if (!a->in[i]) continue;
        if (!a->in[i]->data) return KILN_OK;
        dt[i] = a->in[i]->dtype;
        data[i] = a->in[i]->data;
        numel[i] = kiln__numel(a->in[i]->rank, a->in[i]->dims);
    }
    if (!bx->data || !sc->data || kiln__numel(3, bx->dims) < 0 || kiln__numel(3, sc->dims) < 0)
        return KILN_OK;
    nms_in p = {.boxes = bx->data, .scores = sc->data, .B = bx->dims[0], .N = bx->dims[1],
                .C = sc->dims[1], .center = at->center_point_box != 0};
    KILN_TRY(nms_scalars(nm, &p, dt, data, numel));
    int64_t n;
    KILN_TRY(nms_run(nm, &p, NULL, 0, &n));
    y->dims[0] = n;
    return KILN_OK;
}

static kiln_status nms_cpu(const kiln_kernel_args *a) {
    const kiln_nms_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    const kiln_tensor *bx = a->in[0], *sc = a->in[1];
    kiln_tensor *y = a->out[0];
    KILN_TRY(nms_check_shapes(nm, bx->rank, bx->dims, sc->rank, sc->dims));
    kiln_dtype dt[5] = {0};
    const void *data[5] = {0};
    int64_t numel[5] = {0};
    for (int i = 2; i < 5 && i < a->n_in; i++) {
        if (!a->in[i]) continue;
        dt[i] = a->in[i]->dtype;
        data[i] = a->in[i]->data;
        numel[i] = kiln__tensor_numel(a->in[i]);
    }
    nms_in p = {.boxes = bx->data, .scores = sc->data, .B = bx->dims[0], .N = bx->dims[1],
                .C = sc->dims[1], .center = at->center_point_box != 0};
    KILN_TRY(nms_scalars(nm, &p, dt, data, numel));
    int64_t n;
    int64_t cap = y->rank == 2 && y->dims[1] == 3 ? y->dims[0] : 0;
    KILN_TRY(nms_run(nm, &p, y->data, cap, &n));
    if (n != cap)
        return KILN_FAIL(KILN_ERR_INTERNAL,
                         "node '%s' (NonMaxSuppression): selected %lld boxes, output holds %lld",
                         nm, (long long)n, (long long)cap);
    return KILN_OK;
}

const kiln_op_def kiln_op_NonMaxSuppression = {
    .name = "NonMaxSuppression", .domain = "", .since = 10,
    .min_inputs = 2, .max_inputs = 5, .min_outputs = 1, .max_outputs = 1,
    .attr_size = sizeof(kiln_nms_attrs),
    .import = nms_import, .validate = nms_validate, .infer = nms_infer, .cpu = nms_cpu,
};
