/* import_ctx.c -- what an op's import calls (op.h), forwarded to the
 * importer whose context it is (its kiln_import_i, the context's first
 * member). */
#include "ops/op.h"

#include <stdarg.h>
#include <stdio.h>

static const kiln_import_i *vt(const kiln_import_ctx *ic) { return *(const kiln_import_i *const *)(const void *)ic; }

int64_t kiln_import_opset(const kiln_import_ctx *ic) { return vt(ic)->opset(ic); }
const char *kiln_import_node_name(const kiln_import_ctx *ic) { return vt(ic)->node_name(ic); }
int kiln_import_num_inputs(const kiln_import_ctx *ic) { return vt(ic)->num_inputs(ic); }
int kiln_import_num_outputs(const kiln_import_ctx *ic) { return vt(ic)->num_outputs(ic); }
bool kiln_import_has_input(const kiln_import_ctx *ic, int i) { return vt(ic)->has_input(ic, i); }
const kiln_tinfo *kiln_import_input_info(const kiln_import_ctx *ic, int i) { return vt(ic)->input_info(ic, i); }
bool kiln_attr_has(const kiln_import_ctx *ic, const char *name) { return vt(ic)->attr_has(ic, name); }

int64_t kiln_attr_int(const kiln_import_ctx *ic, const char *name, int64_t dflt) {
    return vt(ic)->attr_int(ic, name, dflt);
}

kiln_status kiln_attr_int32(const kiln_import_ctx *ic, const char *name, int64_t dflt, int32_t *out) {
    return vt(ic)->attr_int32(ic, name, dflt, out);
}

float kiln_attr_float(const kiln_import_ctx *ic, const char *name, float dflt) {
    return vt(ic)->attr_float(ic, name, dflt);
}

int kiln_attr_ints(const kiln_import_ctx *ic, const char *name, int64_t *buf, int cap) {
    return vt(ic)->attr_ints(ic, name, buf, cap);
}

int kiln_attr_floats(const kiln_import_ctx *ic, const char *name, float *buf, int cap) {
    return vt(ic)->attr_floats(ic, name, buf, cap);
}

int kiln_attr_strings(const kiln_import_ctx *ic, const char *name, const char **buf, int cap) {
    return vt(ic)->attr_strings(ic, name, buf, cap);
}

const char *kiln_attr_string(const kiln_import_ctx *ic, const char *name, const char *dflt) {
    return vt(ic)->attr_string(ic, name, dflt);
}

kiln_status kiln_attr_tensor(const kiln_import_ctx *ic, const char *name, kiln_tinfo *info) {
    return vt(ic)->attr_tensor(ic, name, info);
}

kiln_status kiln_import_set_const_input(kiln_import_ctx *ic, int i, kiln_dtype dtype, int rank, const int64_t *dims,
                                        const void *data) {
    return vt(ic)->set_const_input(ic, i, dtype, rank, dims, data);
}

kiln_status kiln__import_fail(const kiln_import_ctx *ic, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): %s", vt(ic)->node_name(ic), vt(ic)->op_type(ic), msg);
}
