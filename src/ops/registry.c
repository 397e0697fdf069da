/* registry.c -- the operator registry built from ops.def: op id <->
 * descriptor, and the lookup of ONNX (domain, type) pairs. */
#include "ops/op.h"

#include <string.h>

#define KILN_OP(id, sym) extern const kiln_op_def kiln_op_##sym;
#include "ops/ops.def"
#undef KILN_OP

static const kiln_op_def *const kiln_op_table[KILN_OP_ID_LIMIT] = {
#define KILN_OP(id, sym) [id] = &kiln_op_##sym,
#include "ops/ops.def"
#undef KILN_OP
};

const kiln_op_def *kiln__op_by_id(int id) {
    if (id <= 0 || id >= KILN_OP_ID_LIMIT) return NULL;
    return kiln_op_table[id];
}

static bool domain_eq(const char *a, const char *b) {
    if (!a || !strcmp(a, "ai.onnx")) a = "";
    if (!b || !strcmp(b, "ai.onnx")) b = "";
    return !strcmp(a, b);
}

int kiln__op_find(const char *domain, const char *type) {
    for (int i = 1; i < KILN_OP_ID_LIMIT; i++) {
        const kiln_op_def *d = kiln_op_table[i];
        if (d && !strcmp(d->name, type) && domain_eq(d->domain, domain)) return i;
    }
    return 0;
}

int kiln__op_id_of(const kiln_op_def *op) {
    for (int i = 1; i < KILN_OP_ID_LIMIT; i++)
        if (kiln_op_table[i] == op) return i;
    return 0;
}
