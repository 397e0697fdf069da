/* kernel.c -- what a backend says about one node, answered from the kernel
 * its table gives (kernel.h): written once for every backend. */
#include "backends/backend.h"

#include <stdio.h>
#include <string.h>

const kiln_kernel *kiln__backend_kernel(const kiln_backend_i *be, const kiln_node *n) {
    if (!be || !n || !n->op) return NULL;
    return be->kernel_for(n->op_id ? n->op_id : kiln__op_id_of(n->op));
}

bool kiln__backend_supports(const kiln_backend_i *be, const kiln_graph *g, const kiln_node *n) {
    const kiln_kernel *k = kiln__backend_kernel(be, n);
    return k && (!k->supports || k->supports(g, n));
}

const char *kiln__backend_kernel_name(const kiln_backend_i *be, const kiln_node *n) {
    const kiln_kernel *k = kiln__backend_kernel(be, n);
    if (!k) return "none";
    const char *s = k->name_of ? k->name_of(n) : NULL;
    return s ? s : k->name;
}

int kiln__backend_tactics(const kiln_backend_i *be, void *state, const kiln_infer_args *a,
                          bool fast_math, int32_t *ids, int cap) {
    if (cap < 1 || !a->op) return 0;
    const kiln_kernel *k = be->kernel_for(kiln__op_id_of(a->op));
    if (!k || !k->tactics || !(a->op->flags & KILN_OP_FLAG_TACTICS)) {
        ids[0] = 0;
        return 1;
    }
    int n = k->tactics(state, a, ids, cap);
    if (fast_math || !k->tactic_fast_math) return n;
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (!k->tactic_fast_math(ids[i])) ids[kept++] = ids[i];
    return kept;
}

void kiln__backend_tactics_ahead(const kiln_backend_i *be, void *state, const kiln_infer_args *a,
                                  const int32_t *ids, int n) {
    const kiln_kernel *k = a->op ? be->kernel_for(kiln__op_id_of(a->op)) : NULL;
    if (k && k->tactics_ahead && n > 0) k->tactics_ahead(state, a, ids, n);
}

int kiln__backend_tactic_kind(const kiln_backend_i *be, void *state, const kiln_node *n, int32_t id) {
    const kiln_kernel *k = kiln__backend_kernel(be, n);
    if (!k) return KILN_TACTIC_KIND_OTHER;
    if (k->tactic_kind) return k->tactic_kind(state, id);
    const char *s = kiln__backend_tactic_name(be, n, id);
    return !strncmp(s, "cublas", 6) ? KILN_TACTIC_KIND_BLAS
           : !strncmp(s, "kiln", 4) ? KILN_TACTIC_KIND_KILN
                                    : KILN_TACTIC_KIND_OTHER;
}

const char *kiln__backend_tactic_kind_name(int kind) {
    static const char *const names[KILN_TACTIC_KIND_COUNT] = {"other", "precompiled", "runtime-compiled",
                                                              "legacy", "blas", "kiln"};
    return kind >= 0 && kind < KILN_TACTIC_KIND_COUNT ? names[kind] : "other";
}

const char *kiln__backend_tactic_name(const kiln_backend_i *be, const kiln_node *n, int32_t id) {
    const kiln_kernel *k = kiln__backend_kernel(be, n);
    if (!k) return "?";
    return k->tactic_name ? k->tactic_name(id) : k->name;
}

void kiln__backend_tactic_describe(const kiln_backend_i *be, const kiln_node *n, int32_t id,
                                   char *buf, size_t cap) {
    const kiln_kernel *k = kiln__backend_kernel(be, n);
    if (k && k->tactic_describe) k->tactic_describe(id, buf, cap);
    else snprintf(buf, cap, "%s", kiln__backend_tactic_name(be, n, id));
}

size_t kiln__kernel_workspace(const kiln_kernel *k, const kiln_infer_args *a) {
    if (k && k->workspace) return k->workspace(a);
    return a->op->workspace ? a->op->workspace(a) : 0;
}

int kiln__backend_inplace_input(const kiln_backend_i *be, const kiln_node *n) {
    const kiln_kernel *k = kiln__backend_kernel(be, n);
    return k && k->inplace_input ? k->inplace_input(n->attrs) : -1;
}
