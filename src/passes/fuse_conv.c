/* fuse_conv.c -- conv rewrites of the graph optimizer (to be written). */
#include "passes/pattern.h"

kiln_status kiln__opt_conv(kiln_graph *g, const kiln_optimize_opts *o) {
    (void)g;
    (void)o;
    return KILN_OK;
}
