/* debug_arena.c -- the debug arena check (kiln_context_set_debug_arena,
 * KILN_DEBUG_ARENA=1): a run that verifies its own memory plan.
 *
 * The memory plan (plan.c) places values that are not live at the same
 * time in the same bytes of an arena. If it gets a live range or an alias
 * wrong, a layer reads bytes another layer has overwritten, and the result
 * is silently wrong (issue 20: swin_t 7.7% off). This check makes such a
 * mistake an error that names the layers:
 *   - ownership: for each granule of an arena (its alignment, 64 bytes on
 *     the host and 256 on the device; blocks never share one) the check
 *     keeps the value whose bytes are there and the layer that wrote them.
 *     A layer's outputs, its workspace and outputs nobody reads, and copies
 *     between host and device memory take over their granules when they
 *     are handed out. A view (Reshape... placed on its input's bytes) owns
 *     nothing: its bytes are its input's, and it reads as that input.
 *   - before each layer runs, every input it reads from an arena must still
 *     be owned by the value it is; and no output or workspace may overlap an
 *     input, or another output, except the aliases the plan makes on
 *     purpose (out[0] on the input it replaces in place, a view on in[0]);
 *   - poison: host regions handed to a producer (outputs, workspaces, also
 *     overflow buffers) are first filled with a NaN pattern (float types)
 *     or 0xAB bytes, so that bytes nobody wrote cannot pass for data; after
 *     the layer ran, a float output that still holds the pattern was not
 *     (fully) written, which is an error too;
 *   - graph outputs are checked once more at the end of the run.
 * Device arenas get the ownership and overlap checks (host bookkeeping
 * only), not the poison. Everything runs on the thread that runs the plan;
 * nothing changes which bytes a layer gets, so a run that passes gives the
 * same outputs as without the check. */
#include "runtime/debug.h"
#include "runtime/engine.h"

#include <stdio.h>

enum { FREE = -1 }; /* a granule nobody owns; <= -2: scratch of node -2 - owner */

struct kiln_arena_check {
    const kiln_engine *e;
    char *base[2];
    size_t cap[2];
    size_t n_gran[2], gran_cap[2];
    int32_t *owner[2];   /* per granule: value, FREE, or scratch (-2 - node) */
    int32_t *writer[2];  /* per granule: the node that wrote it (-1: after the run) */
    int32_t *src[2];     /* per value: the value whose bytes it is in memory m, or -1 */
    int *vlayout;        /* per value: its layout (kiln__value_layouts) */
};

static size_t gran_size(int m) { return m == KILN_MEM_DEV ? KILN_ARENA_ALIGN_DEV : KILN_ARENA_ALIGN_HOST; }
static const char *mem_word(int m) { return m == KILN_MEM_DEV ? "device" : "host"; }

size_t kiln__tensor_nbytes(const kiln_tensor *t) {
    kiln_tinfo i = {.dtype = t->dtype, .rank = t->rank};
    memcpy(i.dims, t->dims, sizeof i.dims);
    return kiln__value_nbytes(&i);
}

kiln_status kiln__acheck_create(const kiln_engine *e, kiln_arena_check **out) {
    *out = NULL;
    kiln_arena_check *a = kiln__calloc(1, sizeof *a);
    if (!a) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (debug arena check)");
    a->e = e;
    size_t nv = (size_t)e->graph->n_values + 1;
    if (!(a->vlayout = kiln__value_layouts(e->graph))) {
        kiln__acheck_free(a);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (debug arena check)");
    }
    for (int m = 0; m < 2; m++) {
        a->src[m] = kiln__malloc(nv * sizeof *a->src[m]);
        if (!a->src[m]) {
            kiln__acheck_free(a);
            return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (debug arena check)");
        }
    }
    *out = a;
    return KILN_OK;
}

void kiln__acheck_free(kiln_arena_check *a) {
    if (!a) return;
    for (int m = 0; m < 2; m++) {
        kiln__free(a->owner[m]);
        kiln__free(a->writer[m]);
        kiln__free(a->src[m]);
    }
    kiln__free(a->vlayout);
    kiln__free(a);
}

kiln_status kiln__acheck_begin(kiln_arena_check *a, void *const base[2], const size_t cap[2]) {
    for (int m = 0; m < 2; m++) {
        a->base[m] = base[m];
        a->cap[m] = base[m] ? cap[m] : 0;
        size_t n = a->cap[m] / gran_size(m) + 1;
        if (n > a->gran_cap[m]) {
            kiln__free(a->owner[m]);
            kiln__free(a->writer[m]);
            a->gran_cap[m] = 0;
            a->owner[m] = kiln__malloc(n * sizeof *a->owner[m]);
            a->writer[m] = kiln__malloc(n * sizeof *a->writer[m]);
            if (!a->owner[m] || !a->writer[m])
                return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (debug arena check)");
            a->gran_cap[m] = n;
        }
        a->n_gran[m] = n;
        for (size_t i = 0; i < n; i++) a->owner[m][i] = FREE, a->writer[m][i] = -1;
        for (int v = 0; v < a->e->graph->n_values; v++) a->src[m][v] = -1;
    }
    return KILN_OK;
}

/* The granules [*g0, *g1) of p..p+nb in arena m; false when p is not in it. */
static bool granules(const kiln_arena_check *a, int m, const void *p, size_t nb, size_t *g0, size_t *g1) {
    const char *c = p;
    if (!a->base[m] || !c || c < a->base[m] || c >= a->base[m] + a->cap[m] || !nb) return false;
    size_t off = (size_t)(c - a->base[m]), end = off + nb, G = gran_size(m);
    if (end > a->cap[m]) end = a->cap[m];
    *g0 = off / G;
    *g1 = (end + G - 1) / G;
    return true;
}

static void claim(kiln_arena_check *a, int m, int owner, int ni, const void *p, size_t nb) {
    size_t g0, g1;
    if (!granules(a, m, p, nb, &g0, &g1)) return;
    for (size_t i = g0; i < g1; i++) a->owner[m][i] = owner, a->writer[m][i] = ni;
}

static const char *value_name(const kiln_arena_check *a, int v) {
    return v >= 0 ? a->e->graph->values[v].name : "?";
}

/* "layer 'x' (Op)" or "the caller (after the run)" */
static void who(const kiln_arena_check *a, int ni, char *buf, size_t n) {
    if (ni < 0) {
        snprintf(buf, n, "the caller (after the run)");
        return;
    }
    const kiln_node *nd = &a->e->graph->nodes[ni];
    snprintf(buf, n, "layer '%s' (%s)", nd->name, nd->op->name);
}

kiln_status kiln__acheck_read(const kiln_arena_check *a, int ni, int v, int m, const void *p, size_t nb) {
    size_t g0, g1;
    if (v < 0 || !granules(a, m, p, nb, &g0, &g1)) return KILN_OK;
    int want = a->src[m][v];
    for (size_t i = g0; i < g1; i++) {
        int o = a->owner[m][i];
        if (o == want && o >= 0) continue;
        char rd[256], wr[256], by[768];
        who(a, ni, rd, sizeof rd);
        size_t G = gran_size(m), off = (size_t)((const char *)p - a->base[m]);
        if (want < 0)
            snprintf(by, sizeof by, "no layer was handed that region for it");
        else if (o == FREE)
            snprintf(by, sizeof by, "its bytes at offset %zu were never written in this run", i * G);
        else if (o <= -2) {
            who(a, -2 - o, wr, sizeof wr);
            snprintf(by, sizeof by, "its bytes at offset %zu were overwritten by the workspace or an "
                     "unread output of %s", i * G, wr);
        } else {
            who(a, a->writer[m][i], wr, sizeof wr);
            snprintf(by, sizeof by, "its bytes at offset %zu were overwritten by '%s', written by %s", i * G,
                     value_name(a, o), wr);
        }
        return KILN_FAIL(KILN_ERR_INTERNAL,
                         "debug arena check: %s reads '%s' (%zu bytes at offset %zu of the %s arena), but %s "
                         "(the memory plan let two live values overlap)",
                         rd, value_name(a, v), nb, off, mem_word(m), by);
    }
    return KILN_OK;
}

void kiln__acheck_copied(kiln_arena_check *a, int ni, int v, int m, const void *p, size_t nb) {
    if (v < 0) return;
    a->src[m][v] = v;
    claim(a, m, v, ni, p, nb);
}

static bool overlap(const void *p, size_t np, const void *q, size_t nq) {
    const char *a = p, *b = q;
    return a && b && np && nq && a < b + nq && b < a + np;
}

/* Poison patterns: a NaN with a payload for float types, else 0xAB bytes. */
#define POISON_F32 0xFFC0DEADu
#define POISON_F16 0xFEADu
#define POISON_BF16 0xFFADu
#define POISON_F64 0xFFF8DEADDEADDEADull

static void poison(void *p, size_t nb, kiln_dtype t) {
    if (!p || !nb) return;
    if (t == KILN_DTYPE_FLOAT32) {
        uint32_t w = POISON_F32;
        for (size_t i = 0; i + 4 <= nb; i += 4) memcpy((char *)p + i, &w, 4);
    } else if (t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16) {
        uint16_t h = t == KILN_DTYPE_FLOAT16 ? POISON_F16 : POISON_BF16;
        for (size_t i = 0; i + 2 <= nb; i += 2) memcpy((char *)p + i, &h, 2);
    } else if (t == KILN_DTYPE_FLOAT64) {
        uint64_t d = POISON_F64;
        for (size_t i = 0; i + 8 <= nb; i += 8) memcpy((char *)p + i, &d, 8);
    } else {
        memset(p, 0xAB, nb);
    }
}

size_t kiln__acheck_unwritten(const void *p, size_t nb, kiln_dtype t, size_t *first) {
    size_t n = 0, es = t == KILN_DTYPE_FLOAT32 ? 4 : t == KILN_DTYPE_FLOAT64 ? 8
                     : (t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16) ? 2 : 0;
    *first = 0;
    if (!p || !es) return 0; /* other types: any byte pattern may be data */
    for (size_t i = 0; i + es <= nb; i += es) {
        bool hit;
        if (es == 4) {
            uint32_t w;
            memcpy(&w, (const char *)p + i, 4);
            hit = w == POISON_F32;
        } else if (es == 8) {
            uint64_t d;
            memcpy(&d, (const char *)p + i, 8);
            hit = d == POISON_F64;
        } else {
            uint16_t h;
            memcpy(&h, (const char *)p + i, 2);
            hit = h == (t == KILN_DTYPE_FLOAT16 ? POISON_F16 : POISON_BF16);
        }
        if (hit && !n++) *first = i / es;
    }
    return n;
}

/* Whether node n's output i may sit on its input k at the same address:
 * out[0] of a view on in[0], out[0] on the input it replaces in place. */
static bool alias_allowed(const kiln_arena_check *a, const kiln_node *n, int i, int k) {
    if (i != 0) return false;
    if (k == 0 && (n->op->flags & KILN_OP_FLAG_VIEW)) return true;
    return k == kiln__node_inplace_input(a->e, n);
}

/* Output i's bytes are input k's, without a copy, on purpose (a view or in
 * place): true, with *k set, when out[i] sits exactly on an input it may. */
static bool aliases_input(const kiln_arena_check *a, const kiln_node *n, const kiln_kernel_args *ka, int i,
                          int *k) {
    for (int j = 0; j < ka->n_in; j++) {
        const kiln_tensor *t = ka->in[j];
        if (t && t->data && t->data == ka->out[i]->data && alias_allowed(a, n, i, j)) {
            *k = j;
            return true;
        }
    }
    return false;
}

/* How output i of a layer is stored: its dtype, or bfloat16 for a float32
 * value in the CPU's NHWC-bf16 layout (bf16 elements in the first half of
 * its bytes: the rest is never written); *nb: the bytes it fills. */
static kiln_dtype stored_dtype(const kiln_arena_check *a, int v, const kiln_tensor *t, size_t *nb) {
    *nb = kiln__tensor_nbytes(t);
    if (v < 0 || a->vlayout[v] != KILN_VLAYOUT_NHWC_BF16) return t->dtype;
    *nb = kiln__vlayout_stored_bytes(KILN_VLAYOUT_NHWC_BF16, t);
    return KILN_DTYPE_BFLOAT16;
}

kiln_status kiln__acheck_before(kiln_arena_check *a, int ni, int m, const kiln_kernel_args *ka) {
    const kiln_graph *g = a->e->graph;
    const kiln_node *n = &g->nodes[ni];
    char nm[256];
    /* 1. every input still holds the value it is */
    for (int k = 0; k < ka->n_in; k++) {
        /* a host input (op->host_inputs) is handed over as its host copy, wherever the layer runs */
        int mk = k < 32 && (n->op->host_inputs & (1u << k)) ? KILN_MEM_HOST : m;
        if (ka->in[k] && n->in[k] >= 0)
            KILN_TRY(kiln__acheck_read(a, ni, n->in[k], mk, ka->in[k]->data, kiln__tensor_nbytes(ka->in[k])));
    }
    /* 2. outputs and the workspace overlap no input (but the planned
     * aliases) and nothing else handed to this layer */
    for (int i = 0; i <= ka->n_out; i++) {
        bool ws = i == ka->n_out;
        const void *p = ws ? ka->workspace : ka->out[i]->data;
        size_t nb = ws ? ka->workspace_size : kiln__tensor_nbytes(ka->out[i]);
        const char *what = ws ? "workspace" : n->out[i] >= 0 ? value_name(a, n->out[i]) : "(unread output)";
        for (int k = 0; k < ka->n_in; k++) {
            const kiln_tensor *t = ka->in[k];
            if (!t || !overlap(p, nb, t->data, kiln__tensor_nbytes(t))) continue;
            if (!ws && p == t->data && alias_allowed(a, n, i, k)) continue;
            who(a, ni, nm, sizeof nm);
            return KILN_FAIL(KILN_ERR_INTERNAL,
                             "debug arena check: %s writes its %s '%s' over its input '%s', which it "
                             "reads while writing (the memory plan let two live values overlap)",
                             nm, ws ? "scratch" : "output", what, n->in[k] >= 0 ? value_name(a, n->in[k]) : "?");
        }
        for (int j = 0; j < i; j++) {
            const void *q = ka->out[j]->data;
            if (!overlap(p, nb, q, kiln__tensor_nbytes(ka->out[j]))) continue;
            who(a, ni, nm, sizeof nm);
            return KILN_FAIL(KILN_ERR_INTERNAL,
                             "debug arena check: %s is handed overlapping bytes for its %s '%s' and its "
                             "output '%s' (the memory plan let two live values overlap)",
                             nm, ws ? "workspace" : "output", what,
                             n->out[j] >= 0 ? value_name(a, n->out[j]) : "(unread output)");
        }
    }
    /* 3. hand them over: ownership, then poison (host memory only: the
     * device's bytes are not touched here) */
    for (int i = 0; i < ka->n_out; i++) {
        int v = n->out[i], k;
        void *p = ka->out[i]->data;
        size_t nb = kiln__tensor_nbytes(ka->out[i]);
        if (v >= 0 && aliases_input(a, n, ka, i, &k) && (n->op->flags & KILN_OP_FLAG_VIEW)) {
            a->src[m][v] = n->in[k] >= 0 ? a->src[m][n->in[k]] : -1; /* a view: its input's bytes */
            continue;
        }
        if (v >= 0) a->src[m][v] = v;
        claim(a, m, v >= 0 ? v : -2 - ni, ni, p, nb);
        size_t filled;
        kiln_dtype dt = stored_dtype(a, v, ka->out[i], &filled);
        if (m == KILN_MEM_HOST && !aliases_input(a, n, ka, i, &k)) poison(p, nb, dt);
    }
    if (ka->workspace && ka->workspace_size) {
        claim(a, KILN_MEM_HOST, -2 - ni, ni, ka->workspace, ka->workspace_size);
        poison(ka->workspace, ka->workspace_size, KILN_DTYPE_FLOAT32);
    }
    return KILN_OK;
}

kiln_status kiln__acheck_after(const kiln_arena_check *a, int ni, int m, const kiln_kernel_args *ka) {
    if (m != KILN_MEM_HOST) return KILN_OK;
    const kiln_node *n = &a->e->graph->nodes[ni];
    for (int i = 0; i < ka->n_out; i++) {
        int k;
        if (aliases_input(a, n, ka, i, &k)) continue; /* not poisoned: it started as its input */
        size_t nb, first;
        kiln_dtype dt = stored_dtype(a, n->out[i], ka->out[i], &nb);
        size_t bad = kiln__acheck_unwritten(ka->out[i]->data, nb, dt, &first);
        if (!bad) continue;
        char nm[256];
        who(a, ni, nm, sizeof nm);
        return KILN_FAIL(KILN_ERR_INTERNAL,
                         "debug arena check: %s left %zu of the %zu elements of its output '%s' unwritten "
                         "(the first at index %zu still holds the poison pattern)",
                         nm, bad, nb / kiln_dtype_size(dt),
                         n->out[i] >= 0 ? value_name(a, n->out[i]) : "(unread output)", first);
    }
    return KILN_OK;
}

void kiln__acheck_poison(void *p, size_t nb, kiln_dtype t) { poison(p, nb, t); }
