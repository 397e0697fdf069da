/* nn_attrs.c -- attribute import helpers shared by the nn op family. */
#include "ops/nn_attrs.h"

kiln_status kiln__nn_read_ints(kiln_import_ctx *ic, const char *name, int64_t *dst, int cap,
                               int32_t *count) {
    int n = kiln_attr_ints(ic, name, dst, cap);
    if (n > cap)
        return KILN_IMPORT_FAIL(ic, "attribute '%s' has %d values; at most %d are supported", name,
                                n, cap);
    *count = n < 0 ? 0 : n;
    return KILN_OK;
}

kiln_status kiln__nn_parse_auto_pad(kiln_import_ctx *ic, int32_t *out) {
    const char *s = kiln_attr_string(ic, "auto_pad", "NOTSET");
    if (!strcmp(s, "NOTSET") || !s[0]) *out = PAD_NOTSET;
    else if (!strcmp(s, "SAME_UPPER")) *out = PAD_SAME_UPPER;
    else if (!strcmp(s, "SAME_LOWER")) *out = PAD_SAME_LOWER;
    else if (!strcmp(s, "VALID")) *out = PAD_VALID;
    else return KILN_IMPORT_FAIL(ic, "unknown auto_pad value '%s'", s);
    return KILN_OK;
}

int64_t kiln__nn_same_pads(int auto_pad, int64_t in, int64_t k, int64_t s, int64_t d, int64_t *pb,
                           int64_t *pe) {
    int64_t out = (in + s - 1) / s;
    int64_t total = (out - 1) * s + (k - 1) * d + 1 - in;
    if (total < 0) total = 0;
    if (auto_pad == PAD_SAME_UPPER) {
        *pb = total / 2;
        *pe = total - *pb;
    } else {
        *pe = total / 2;
        *pb = total - *pe;
    }
    return out;
}
