/* build.c -- the builder: configuration, and model -> engine. */
#include "backends/backend.h"
#include "backends/cpu/cpu_features.h"
#include "format/meta.h"
#include "runtime/engine.h"

#include <math.h>
#include <stdio.h>

kiln_status kiln_builder_create(kiln_builder **out) {
    if (!out) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_builder_create: out is NULL");
    *out = kiln__calloc(1, sizeof **out);
    if (!*out) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory creating a builder");
    (*out)->opts.device = KILN_DEVICE_CPU;
    (*out)->opts.precision = KILN_PRECISION_FP32;
    (*out)->opts.math = KILN_MATH_ACCURATE;
    (*out)->optimization = 1;
    (*out)->tuning = true;
    (*out)->verbosity = 1;
    return KILN_OK;
}

void kiln_builder_free(kiln_builder *b) {
    if (!b) return;
    for (int i = 0; i < b->n_profiles; i++) kiln__free(b->profiles[i].name);
    kiln__free(b->profiles);
    for (int i = 0; i < b->n_fp32_layers; i++) kiln__free(b->fp32_layers[i]);
    kiln__free(b->fp32_layers);
    kiln__free(b->timing_cache);
    kiln__meta_clear(&b->meta);
    kiln__free(b);
}

#define CHECK_BUILDER(b, fn) \
    if (!(b)) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, fn ": builder is NULL")

kiln_status kiln_builder_set_device(kiln_builder *b, kiln_device dev, int index) {
    CHECK_BUILDER(b, "kiln_builder_set_device");
    if (!kiln__device_name(dev)) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "unknown device %d", (int)dev);
    /* as kiln_device_parse reads them: an engine for "cpu:3" was built, which no device
     * string of the CLI or Python could then ask for */
    if (index < 0 || index > kiln__device_index_max(dev))
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "device index %d of %s is out of range 0..%d", index,
                         kiln__device_name(dev), kiln__device_index_max(dev));
    b->opts.device = dev;
    b->opts.device_index = index;
    return KILN_OK;
}

kiln_status kiln_builder_set_precision(kiln_builder *b, kiln_precision p) {
    CHECK_BUILDER(b, "kiln_builder_set_precision");
    if (p < KILN_PRECISION_FP32 || p > KILN_PRECISION_BF16)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "unknown precision %d", (int)p);
    b->opts.precision = p;
    return KILN_OK;
}

kiln_status kiln_builder_set_layer_precision(kiln_builder *b, const char *layer, kiln_precision p) {
    CHECK_BUILDER(b, "kiln_builder_set_layer_precision");
    if (!layer || !*layer)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_builder_set_layer_precision: no layer name");
    if (p != KILN_PRECISION_FP32)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "layer '%s': only fp32 can be set per layer (got precision %d)", layer,
                         (int)p);
    for (int i = 0; i < b->n_fp32_layers; i++)
        if (!strcmp(b->fp32_layers[i], layer)) return KILN_OK;
    KILN_TRY(kiln__grow((void **)&b->fp32_layers, &b->cap_fp32_layers, b->n_fp32_layers + 1,
                        sizeof *b->fp32_layers));
    char *c = kiln__strdup(layer);
    if (!c) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    b->fp32_layers[b->n_fp32_layers++] = c;
    return KILN_OK;
}

kiln_status kiln_builder_set_threads(kiln_builder *b, int threads) {
    CHECK_BUILDER(b, "kiln_builder_set_threads");
    if (threads < 0 || threads > 1024)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "threads must be in 0..1024, got %d", threads);
    b->opts.threads = threads;
    return KILN_OK;
}

kiln_status kiln_builder_set_workspace(kiln_builder *b, size_t bytes) {
    CHECK_BUILDER(b, "kiln_builder_set_workspace");
    b->opts.workspace = bytes;
    return KILN_OK;
}

kiln_status kiln_builder_set_timing_cache(kiln_builder *b, const char *path) {
    CHECK_BUILDER(b, "kiln_builder_set_timing_cache");
    if (path && !*path)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_builder_set_timing_cache: the path is empty (NULL: no cache)");
    char *p = path ? kiln__strdup(path) : NULL;
    if (path && !p) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
    kiln__free(b->timing_cache);
    b->timing_cache = p;
    return KILN_OK;
}

kiln_status kiln_builder_set_optimization(kiln_builder *b, int level) {
    CHECK_BUILDER(b, "kiln_builder_set_optimization");
    if (level < 0 || level > 1)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "optimization level must be 0 or 1, got %d", level);
    b->optimization = level;
    return KILN_OK;
}

kiln_status kiln_builder_set_tuning(kiln_builder *b, int on) {
    CHECK_BUILDER(b, "kiln_builder_set_tuning");
    b->tuning = on != 0;
    return KILN_OK;
}

kiln_status kiln_builder_set_verbosity(kiln_builder *b, int level) {
    CHECK_BUILDER(b, "kiln_builder_set_verbosity");
    if (level < 0 || level > 2)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_builder_set_verbosity: level %d is not 0, 1 or 2", level);
    b->verbosity = level;
    return KILN_OK;
}

kiln_status kiln_builder_disable_pass(kiln_builder *b, const char *name) {
    CHECK_BUILDER(b, "kiln_builder_disable_pass");
    int id = kiln__pass_find(name);
    if (id < 0) {
        kiln_sbuf names = {0};
        for (int i = 0; i < kiln_pass_count(); i++) kiln__sbuf_printf(&names, "%s%s", i ? ", " : "", kiln_pass_name(i));
        kiln_status s = KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "unknown pass '%s' (passes: %s)", name ? name : "(null)",
                                  names.data ? names.data : "?");
        kiln__sbuf_free(&names);
        return s;
    }
    b->disabled_passes |= 1u << id;
    return KILN_OK;
}

kiln_status kiln_builder_set_fast_math(kiln_builder *b, int on) {
    CHECK_BUILDER(b, "kiln_builder_set_fast_math");
    b->opts.math = on ? KILN_MATH_FAST : KILN_MATH_ACCURATE;
    return KILN_OK;
}

kiln_status kiln_builder_set_strict_device(kiln_builder *b, int strict) {
    CHECK_BUILDER(b, "kiln_builder_set_strict_device");
    b->strict_device = strict != 0;
    return KILN_OK;
}

kiln_status kiln_builder_set_profile(kiln_builder *b, const char *input_name, int rank,
                                     const int64_t *min, const int64_t *opt, const int64_t *max) {
    CHECK_BUILDER(b, "kiln_builder_set_profile");
    if (!input_name || !min || !opt || !max)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_builder_set_profile: NULL argument");
    if (rank < 0 || rank > KILN_MAX_RANK)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "profile for '%s': rank %d out of range 0..%d",
                         input_name, rank, KILN_MAX_RANK);
    for (int i = 0; i < rank; i++) {
        if (min[i] < 0 || !(min[i] <= opt[i] && opt[i] <= max[i]))
            return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                             "profile for '%s': dimension %d needs 0 <= min <= opt <= max, got "
                             "min=%lld opt=%lld max=%lld",
                             input_name, i, (long long)min[i], (long long)opt[i], (long long)max[i]);
    }
    kiln_profile_req *r = NULL;
    for (int i = 0; i < b->n_profiles; i++)
        if (!strcmp(b->profiles[i].name, input_name)) r = &b->profiles[i];
    if (!r) {
        KILN_TRY(kiln__grow((void **)&b->profiles, &b->cap_profiles, b->n_profiles + 1,
                            sizeof *b->profiles));
        r = &b->profiles[b->n_profiles];
        r->name = kiln__strdup(input_name);
        if (!r->name) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        b->n_profiles++;
    }
    r->p.rank = rank;
    for (int i = 0; i < rank; i++) {
        r->p.min[i] = min[i];
        r->p.opt[i] = opt[i];
        r->p.max[i] = max[i];
    }
    return KILN_OK;
}

/* Resolves the profile of every graph input, and specializes dims whose
 * range is a single value. */
static kiln_status resolve_profiles(const kiln_builder *b, kiln_graph *g, kiln_profile *profiles) {
    char s1[128], s2[128];
    for (int i = 0; i < b->n_profiles; i++) {
        bool found = false;
        for (int k = 0; k < g->n_inputs; k++)
            if (!strcmp(g->values[g->inputs[k]].name, b->profiles[i].name)) found = true;
        if (!found)
            return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                             "shape profile given for '%s', which is not an input of the model",
                             b->profiles[i].name);
    }
    for (int k = 0; k < g->n_inputs; k++) {
        kiln_value *v = &g->values[g->inputs[k]];
        kiln_profile *p = &profiles[k];
        const kiln_profile_req *r = NULL;
        for (int i = 0; i < b->n_profiles; i++)
            if (!strcmp(b->profiles[i].name, v->name)) r = &b->profiles[i];
        if (v->info.rank < 0) {
            if (!r)
                return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                                 "input '%s' has unknown rank: give it a shape profile", v->name);
            v->info.rank = r->p.rank;
            for (int d = 0; d < r->p.rank; d++) v->info.dims[d] = KILN_DIM_UNKNOWN;
        }
        p->rank = v->info.rank;
        if (r && r->p.rank != v->info.rank)
            return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                             "shape profile for '%s' has rank %d, but the input has rank %d %s",
                             v->name, r->p.rank, v->info.rank,
                             kiln__shape_str(v->info.rank, v->info.dims, s1, sizeof s1));
        for (int d = 0; d < p->rank; d++) {
            int64_t dim = v->info.dims[d];
            if (dim >= 0) {
                if (r && (r->p.min[d] != dim || r->p.max[d] != dim))
                    return KILN_FAIL(
                        KILN_ERR_INVALID_ARGUMENT,
                        "shape profile for '%s' sets dimension %d to %s..%s, but the model "
                        "fixes it to %lld",
                        v->name, d, kiln__shape_str(p->rank, r->p.min, s1, sizeof s1),
                        kiln__shape_str(p->rank, r->p.max, s2, sizeof s2), (long long)dim);
                p->min[d] = p->opt[d] = p->max[d] = dim;
            } else if (r) {
                p->min[d] = r->p.min[d];
                p->opt[d] = r->p.opt[d];
                p->max[d] = r->p.max[d];
            } else {
                p->min[d] = p->opt[d] = p->max[d] = 1;
            }
        }
    }
    /* A symbol whose every use has a single-value range becomes that value. */
    for (int k = 0; k < g->n_inputs; k++) {
        kiln_value *v = &g->values[g->inputs[k]];
        kiln_profile *p = &profiles[k];
        for (int d = 0; d < p->rank; d++) {
            int64_t dim = v->info.dims[d];
            if (dim >= 0 || p->min[d] != p->max[d]) continue;
            bool fixed = true;
            if (KILN_DIM_IS_SYM(dim)) {
                for (int k2 = 0; k2 < g->n_inputs; k2++) {
                    kiln_value *v2 = &g->values[g->inputs[k2]];
                    for (int d2 = 0; d2 < profiles[k2].rank; d2++)
                        if (v2->info.dims[d2] == dim &&
                            (profiles[k2].min[d2] != p->min[d] || profiles[k2].max[d2] != p->min[d]))
                            fixed = false;
                }
            }
            if (!fixed) continue;
            int64_t val = p->min[d];
            if (KILN_DIM_IS_SYM(dim)) {
                /* replace the symbol everywhere it appears */
                for (int i = 0; i < g->n_values; i++) {
                    kiln_value *x = &g->values[i];
                    if (x->flags & KILN_VALUE_CONST) continue;
                    for (int j = 0; j < x->info.rank; j++)
                        if (x->info.dims[j] == dim) x->info.dims[j] = val;
                }
            } else {
                v->info.dims[d] = val;
            }
        }
    }
    /* Intermediate shapes were inferred under the old dims, or declared by
     * the model (value_info; a shape of the trace's batch, say): forget
     * them. Graph outputs keep their declared rank and symbolic dims; their
     * fixed dims are inferred again like the others (a declared [2, 16]
     * where the graph computes [N, 16] would bake the 2 into the layers
     * that follow, such as merge_movement's Reshapes). */
    for (int i = 0; i < g->n_values; i++) {
        kiln_value *x = &g->values[i];
        if ((x->flags & (KILN_VALUE_CONST | KILN_VALUE_INPUT)) || x->producer < 0) continue;
        if (x->flags & KILN_VALUE_OUTPUT) {
            for (int j = 0; j < x->info.rank; j++)
                if (x->info.dims[j] >= 0) x->info.dims[j] = KILN_DIM_UNKNOWN;
            continue;
        }
        x->info.rank = -1;
    }
    return KILN_OK;
}

/* Whether a declared type is not what the build's inference gives: dtypes
 * or ranks differ, or a declared fixed dim is inferred otherwise (symbolic,
 * unknown, or another number). */
static bool declared_not_kept(const kiln_tinfo *d, const kiln_tinfo *t) {
    if (d->dtype != KILN_DTYPE_UNDEFINED && t->dtype != KILN_DTYPE_UNDEFINED && d->dtype != t->dtype)
        return true;
    if (d->rank < 0) return false;
    if (t->rank >= 0 && t->rank != d->rank) return true;
    for (int i = 0; i < d->rank; i++)
        if (d->dims[i] >= 0 && (t->rank < 0 || t->dims[i] != d->dims[i])) return true;
    return false;
}

#define DECLARED_WARN_MAX 10 /* warnings printed at most, then a count */

static void dims_str(const kiln_graph *g, const kiln_tinfo *t, kiln_sbuf *sb, bool json);

/* Warns (verbosity >= 1) about node outputs whose declared type or shape
 * the graph, inferred from the inputs' shape profiles, does not give: the
 * engine uses the inferred one (item 4.10 of issue 20). Graph outputs that
 * loading warned about already are left out. */
static void warn_declared(const kiln_builder *b, const kiln_model *m, const kiln_graph *g) {
    if (b->verbosity < 1) return;
    int n = 0;
    for (int i = 0; i < m->n_declared; i++) {
        const kiln_declared *d = &m->declared[i];
        if (d->reported) continue;
        const kiln_value *mv = &m->graph->values[d->value];
        int v = kiln__graph_find_value(g, mv->name);
        if (v < 0) continue; /* folded into a constant or unused */
        const kiln_tinfo *t = &g->values[v].info;
        if (!declared_not_kept(&d->info, t)) continue;
        if (n++ >= DECLARED_WARN_MAX) continue;
        kiln_sbuf sa = {0}, sc = {0};
        dims_str(g, &d->info, &sa, false); /* (the build's graph has the model's symbols) */
        dims_str(g, t, &sc, false);
        char a[256], c[256], pn[512];
        fprintf(stderr,
                "kiln: warning: %s '%s' is declared %s %s, but from the inputs' shape profiles the "
                "graph computes %s %s: the engine uses the computed type and shape\n",
                (mv->flags & KILN_VALUE_OUTPUT) ? "graph output" : "value",
                kiln_printable(mv->name, pn, sizeof pn), kiln_dtype_name(d->info.dtype),
                kiln_printable(sa.data ? sa.data : "?", a, sizeof a), kiln_dtype_name(t->dtype),
                kiln_printable(sc.data ? sc.data : "?", c, sizeof c));
        kiln__sbuf_free(&sa);
        kiln__sbuf_free(&sc);
    }
    if (n > DECLARED_WARN_MAX)
        fprintf(stderr, "kiln: warning: and %d more values whose declared type or shape the graph does not give\n",
                n - DECLARED_WARN_MAX);
}

/* The target an engine for `be` is built for: asks a state of the device
 * (for a GPU this needs the GPU: its architecture goes into the engine). */
static kiln_status build_target(const kiln_backend_i *be, int index, char *buf, size_t n) {
    void *state = NULL;
    kiln_status s = be->state_create(index, &state);
    if (s != KILN_OK)
        return kiln__fail_prefix(s, "building a %s engine needs the device it will run on", be->name);
    be->describe_target(state, buf, n);
    be->state_free(state);
    return KILN_OK;
}

/* Places every node: on the builder's device where that backend has a
 * kernel, else on the CPU (or, with strict_device, fails naming them). */
static kiln_status place_nodes(const kiln_builder *b, const kiln_backend_i *be, kiln_graph *g) {
    const kiln_backend_i *cpu = kiln__backend_for(KILN_DEVICE_CPU);
    kiln_sbuf missing = {0};
    int n_missing = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        kiln_node *n = &g->nodes[i];
        if (kiln__backend_supports(be, g, n)) {
            n->device = be->device;
            continue;
        }
        if (be->device == KILN_DEVICE_CPU)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s) has no CPU kernel", n->name,
                             n->op->name);
        if (!kiln__backend_supports(cpu, g, n))
            return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s) has no %s or CPU kernel", n->name,
                             n->op->name, be->name);
        n->device = KILN_DEVICE_CPU;
        if (n_missing < 20) kiln__sbuf_printf(&missing, "%s'%s' (%s)", n_missing ? ", " : "", n->name,
                                              n->op->name);
        n_missing++;
    }
    kiln_status s = KILN_OK;
    if (n_missing && b->strict_device)
        s = KILN_FAIL(KILN_ERR_UNSUPPORTED,
                      "strict device: %d node(s) have no %s kernel: %s%s", n_missing, be->name,
                      missing.data ? missing.data : "", n_missing > 20 ? ", ..." : "");
    kiln__sbuf_free(&missing);
    return s;
}

kiln_status kiln_build(const kiln_builder *b, const kiln_model *m, kiln_engine **out) {
    if (!out) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_build: out is NULL");
    *out = NULL;
    if (!b || !m) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_build: builder or model is NULL");
    const kiln_backend_i *be = kiln__backend_for(b->opts.device);
    if (!be)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "device '%s' is not available: this kiln was built without it",
                         kiln__device_name(b->opts.device) ? kiln__device_name(b->opts.device) : "?");
    if (b->opts.device == KILN_DEVICE_CPU && b->opts.precision == KILN_PRECISION_FP16)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "precision fp16 is not supported by the CPU backend (use fp32)");
    if (b->opts.device == KILN_DEVICE_CPU && b->opts.precision == KILN_PRECISION_BF16) {
        if (!kiln__cpu_has_bf16())
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "precision bf16 on the CPU needs a processor with AVX512-BF16 "
                             "(avx512_bf16), which this machine lacks (use fp32)");
        if (!KILN_HAVE_DNNL)
            return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                             "precision bf16 on the CPU needs oneDNN, and this kiln was built "
                             "without it (KILN_DNNL=OFF or libdnnl not found; use fp32)");
    }
    kiln_engine *e = kiln__engine_alloc();
    kiln_status s;
    if (!e) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory creating an engine");
    if ((s = kiln__graph_clone(m->graph, &e->graph)) != KILN_OK) goto fail;
    kiln_graph *g = e->graph;
    e->profiles = kiln__calloc((size_t)g->n_inputs + 1, sizeof *e->profiles);
    if (!e->profiles) {
        s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory");
        goto fail;
    }
    if ((s = resolve_profiles(b, g, e->profiles)) != KILN_OK) goto fail;
    if ((s = kiln__graph_infer(g)) != KILN_OK) goto fail;
    if ((s = kiln__pass_fold_constants(g)) != KILN_OK) goto fail;
    if ((s = kiln__pass_dce(g)) != KILN_OK) goto fail;
    if ((s = kiln__graph_infer(g)) != KILN_OK) goto fail;
    /* symbolic dims through shapes computed at run time; Shape entries they
     * make known fold */
    if ((s = kiln__pass_shape_values(g)) != KILN_OK) goto fail;
    if ((s = kiln__pass_fold_constants(g)) != KILN_OK) goto fail;
    if ((s = kiln__pass_dce(g)) != KILN_OK) goto fail;
    if ((s = kiln__graph_infer(g)) != KILN_OK) goto fail;
    warn_declared(b, m, g);
    kiln_optimize_opts oo = {.device = b->opts.device, .precision = b->opts.precision,
                             .disable = b->optimization == 0, .disabled = b->disabled_passes,
                             .fp32_layers = (const char *const *)b->fp32_layers,
                             .n_fp32_layers = b->n_fp32_layers};
    if ((s = kiln__pass_optimize(g, &oo)) != KILN_OK) goto fail;
    if ((s = place_nodes(b, be, g)) != KILN_OK) goto fail;
    e->opts = b->opts;
    if ((s = build_target(be, b->opts.device_index, e->target, sizeof e->target)) != KILN_OK) goto fail;
    /* tactics, and the layouts the backends choose (their layouts hooks) */
    if ((s = kiln__builder_tune(b, e)) != KILN_OK) goto fail;
    if ((s = kiln__check_workspace_limit(e)) != KILN_OK) goto fail;
    if ((s = kiln__meta_copy(&e->meta, &b->meta)) != KILN_OK) goto fail;
    snprintf(e->builder_version, sizeof e->builder_version, "%s", kiln_version_string());
    *out = e;
    return KILN_OK;
fail:
    kiln_engine_free(e);
    return s;
}

int kiln_engine_num_layers(const kiln_engine *e) { return e ? e->graph->n_nodes : 0; }

/* ---- describe (inspect) ------------------------------------------------- */

/* A shape: "[1x3xNx?]" (JSON: [1, 3, "N", "?"]); a rank not known before a
 * run (an If whose branches differ in rank) is "[unknown rank]" (JSON:
 * null), not the "[]" of a scalar. */
static void json_str(kiln_sbuf *sb, const char *s);
static void text_name(kiln_sbuf *sb, const char *s, int width);

static void dims_str(const kiln_graph *g, const kiln_tinfo *t, kiln_sbuf *sb, bool json) {
    if (t->rank < 0) {
        kiln__sbuf_printf(sb, json ? "null" : "[unknown rank]");
        return;
    }
    kiln__sbuf_printf(sb, "[");
    for (int i = 0; i < t->rank; i++) {
        int64_t d = t->dims[i];
        const char *sep = i ? (json ? ", " : "x") : "";
        if (d >= 0)
            kiln__sbuf_printf(sb, "%s%lld", sep, (long long)d);
        else if (KILN_DIM_IS_SYM(d) && KILN_DIM_SYM_ID(d) < g->n_symbols) {
            /* the name comes from the model: escaped as names are (it was written
             * raw: a quote in it broke the JSON, a newline forged a text line) */
            kiln__sbuf_printf(sb, "%s", sep);
            if (json) json_str(sb, g->symbols[KILN_DIM_SYM_ID(d)]);
            else text_name(sb, g->symbols[KILN_DIM_SYM_ID(d)], 0);
        } else
            kiln__sbuf_printf(sb, json ? "%s\"?\"" : "%s?", sep);
    }
    kiln__sbuf_printf(sb, "]");
}

/* s as a JSON string. JSON is UTF-8: a byte that is not part of a
 * well-formed character (names may hold any bytes) is written \udcNN, the
 * lone surrogate Python's surrogateescape gives it, so that json.loads
 * yields the name kiln's Python package uses. */
static void json_str(kiln_sbuf *sb, const char *s) {
    kiln__sbuf_printf(sb, "\"");
    while (*s) {
        unsigned char c = (unsigned char)*s;
        size_t n = kiln__utf8_at(s);
        if (c == '"' || c == '\\') kiln__sbuf_printf(sb, "\\%c", c);
        else if (c < 0x20) kiln__sbuf_printf(sb, "\\u%04x", c);
        else if (!n) kiln__sbuf_printf(sb, "\\udc%02x", c);
        else kiln__sbuf_printf(sb, "%.*s", (int)n, s);
        s += n ? n : 1;
    }
    kiln__sbuf_printf(sb, "\"");
}

/* s (n bytes) on a text line: control characters as \xNN (a hostile
 * model's or engine's names may hold terminal escapes, carriage returns or
 * newlines that would forge or hide lines of `kiln inspect`), padded with
 * spaces to `width` columns. */
static void text_str(kiln_sbuf *sb, const char *s, size_t n, int width) {
    int w = 0;
    for (size_t k = 0; k < n;) {
        size_t c = s[k] ? kiln__control_at(s + k) : 1; /* (a metadata value may hold a 0 byte) */
        if (!c) kiln__sbuf_printf(sb, "%c", s[k++]), w++;
        for (; c && k < n; c--, w += 4) kiln__sbuf_printf(sb, "\\x%02x", (unsigned char)s[k++]);
    }
    for (; w < width; w++) kiln__sbuf_printf(sb, " ");
}

static void text_name(kiln_sbuf *sb, const char *s, int width) { text_str(sb, s ? s : "", s ? strlen(s) : 0, width); }

static void profile_str(const kiln_profile *p, const int64_t *d, kiln_sbuf *sb, bool json) {
    (void)p;
    kiln__sbuf_printf(sb, "[");
    for (int i = 0; i < p->rank; i++)
        kiln__sbuf_printf(sb, "%s%lld", i ? (json ? ", " : "x") : "", (long long)d[i]);
    kiln__sbuf_printf(sb, "]");
}

static const char *device_name(int d) { return kiln__device_name(d) ? kiln__device_name(d) : "?"; }
static const char *precision_name(int p) {
    switch (p) {
    case KILN_PRECISION_TF32: return "tf32";
    case KILN_PRECISION_FP16: return "fp16";
    case KILN_PRECISION_BF16: return "bf16";
    default: return "fp32";
    }
}

/* kiln_build_options.math for inspect: "accurate", "fast" (fast math), or
 * "not recorded" (built before the setting existed). */
static const char *math_name(int m) {
    switch (m) {
    case KILN_MATH_ACCURATE: return "accurate";
    case KILN_MATH_FAST: return "fast";
    default: return "not recorded";
    }
}

static const char *node_kernel(const kiln_graph *g, const kiln_node *n) {
    const kiln_backend_i *nb = kiln__backend_for(n->device);
    (void)g;
    return nb ? kiln__backend_kernel_name(nb, n) : "?";
}

/* Name of the tactic chosen for a layer that has several; NULL otherwise. */
/* buf NULL: the short (static) name */
static const char *node_tactic_name(const kiln_node *n, char *buf, size_t cap) {
    if (!(n->op->flags & KILN_OP_FLAG_TACTICS) || !n->attrs) return NULL;
    const kiln_backend_i *nb = kiln__backend_for(n->device);
    int32_t id = ((const kiln_tactic *)n->attrs)->id;
    if (!nb) return "?";
    if (buf) {
        kiln__backend_tactic_describe(nb, n, id, buf, cap);
        return buf;
    }
    return kiln__backend_tactic_name(nb, n, id);
}

/* The tactic of a layer that has several (name, and its time measured at
 * build when it was timed). */
static void node_tactic(const kiln_node *n, kiln_sbuf *sb, bool json) {
    char buf[96];
    const char *name = node_tactic_name(n, buf, sizeof buf);
    if (!name) return;
    const kiln_tactic *t = n->attrs;
    if (json) {
        kiln__sbuf_printf(sb, ", \"tactic\": {\"id\": %d, \"name\": ", (int)t->id);
        json_str(sb, name);
        /* (an engine file's time may be anything: JSON has no NaN or inf) */
        if (isfinite(t->us)) kiln__sbuf_printf(sb, ", \"us\": %.1f}", (double)t->us);
        else kiln__sbuf_printf(sb, ", \"us\": null}");
    } else if (t->us > 0) {
        kiln__sbuf_printf(sb, "  tactic %s %.1f us", name, (double)t->us);
    } else {
        kiln__sbuf_printf(sb, "  tactic %s (not timed)", name);
    }
}

/* Tensors a layer reads and writes in NHWC or nChw16c (layers of the
 * chains a backend's layouts hook makes, kiln_op_def.layout_io): "x" the
 * input, "y" the output; bf16 where they hold bf16; "residual" where an
 * NHWC residual goes into an NCHW output. */
static const char *layout_word(int l) {
    return l == KILN_VLAYOUT_NHWC_BF16 ? "nhwc-bf16" : l == KILN_VLAYOUT_NHWC ? "nhwc" : l == KILN_VLAYOUT_C16 ? "nchw16c" : "nchw";
}

static void node_layout(const kiln_node *n, kiln_sbuf *sb, bool json) {
    if (!n->attrs || !n->op->layout_io) return;
    int32_t l = *n->op->layout_field(n->attrs);
    if (!l) return;
    kiln_io_layout io;
    n->op->layout_io(l, &io);
    const char *x = layout_word(io.x), *y = layout_word(io.y);
    if (json)
        kiln__sbuf_printf(sb, ", \"layout\": {\"x\": \"%s\", \"y\": \"%s\"%s}", x, y,
                          io.r_nhwc ? ", \"residual\": \"nhwc\"" : "");
    else kiln__sbuf_printf(sb, "  layout %s->%s%s", x, y, io.r_nhwc ? " (residual nhwc)" : "");
}

kiln_status kiln_engine_layer_info(const kiln_engine *e, int layer, kiln_layer_info *out) {
    if (!e || !out) return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_layer_info: NULL argument");
    memset(out, 0, sizeof *out);
    const kiln_graph *g = e->graph;
    if (layer < 0 || layer >= g->n_nodes)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_layer_info: layer %d of %d", layer,
                         g->n_nodes);
    const kiln_node *n = &g->nodes[layer];
    out->name = n->name;
    out->op = n->op->name;
    out->kernel = node_kernel(g, n);
    out->device = n->device;
    out->tactic = node_tactic_name(n, NULL, 0);
    if (out->tactic) out->tactic_us = ((const kiln_tactic *)n->attrs)->us;
    else out->tactic = "";
    return KILN_OK;
}

static const kiln_node *layer_node(const kiln_engine *e, int layer) {
    return e && layer >= 0 && layer < e->graph->n_nodes ? &e->graph->nodes[layer] : NULL;
}

int kiln_engine_layer_num_inputs(const kiln_engine *e, int layer) {
    const kiln_node *n = layer_node(e, layer);
    return n ? n->n_in : -1;
}

int kiln_engine_layer_num_outputs(const kiln_engine *e, int layer) {
    const kiln_node *n = layer_node(e, layer);
    return n ? n->n_out : -1;
}

static const char *layer_tensor(const kiln_engine *e, int layer, bool output, int index) {
    const kiln_node *n = layer_node(e, layer);
    if (!n || index < 0 || index >= (output ? n->n_out : n->n_in)) return NULL;
    int v = output ? n->out[index] : n->in[index];
    return v >= 0 ? e->graph->values[v].name : NULL;
}

const char *kiln_engine_layer_input(const kiln_engine *e, int layer, int index) {
    return layer_tensor(e, layer, false, index);
}

const char *kiln_engine_layer_output(const kiln_engine *e, int layer, int index) {
    return layer_tensor(e, layer, true, index);
}

int kiln_engine_layer_num_sources(const kiln_engine *e, int layer) {
    const kiln_node *n = layer_node(e, layer);
    return n ? kiln__node_num_sources(n) : -1;
}

const char *kiln_engine_layer_source(const kiln_engine *e, int layer, int index) {
    const kiln_node *n = layer_node(e, layer);
    return n ? kiln__node_source(n, index) : NULL;
}

/* The ONNX nodes a layer came from, where its name does not say it
 * already: text "  (added by kiln)" or "  sources a, b"; JSON always. */
static void node_sources(const kiln_node *n, kiln_sbuf *sb, bool json) {
    int k = kiln__node_num_sources(n);
    if (json) {
        kiln__sbuf_printf(sb, ", \"sources\": [");
        for (int i = 0; i < k; i++) {
            kiln__sbuf_printf(sb, "%s", i ? ", " : "");
            json_str(sb, kiln__node_source(n, i));
        }
        kiln__sbuf_printf(sb, "]");
        return;
    }
    if (!k) {
        kiln__sbuf_printf(sb, "  (added by kiln)");
        return;
    }
    /* the name is the sources joined by '+' unless a name holds a '+' */
    kiln_sbuf joined = {0};
    for (int i = 0; i < k; i++) kiln__sbuf_printf(&joined, "%s%s", i ? "+" : "", kiln__node_source(n, i));
    if (joined.data && strcmp(joined.data, n->name)) {
        kiln__sbuf_printf(sb, "  sources");
        for (int i = 0; i < k; i++) {
            kiln__sbuf_printf(sb, "%s'", i ? ", " : " ");
            text_name(sb, kiln__node_source(n, i), 0);
            kiln__sbuf_printf(sb, "'");
        }
    }
    kiln__sbuf_free(&joined);
}

/* Device engines: nodes that run on the CPU, and the host<->device copies
 * (tensors crossing between the two sides) they cost. */
static void fallback_summary(const kiln_engine *e, kiln_sbuf *sb, bool json) {
    const kiln_graph *g = e->graph;
    int n_cpu = 0, n_cross = 0;
    for (int i = 0; i < g->n_nodes; i++) n_cpu += g->nodes[i].device == KILN_DEVICE_CPU;
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            int v = n->in[k];
            /* constants are uploaded once; graph inputs come from the caller */
            if (v < 0 || (g->values[v].flags & (KILN_VALUE_CONST | KILN_VALUE_INPUT))) continue;
            int p = g->values[v].producer;
            if (p >= 0 && g->nodes[p].device != n->device) n_cross++;
        }
    }
    if (json) {
        kiln__sbuf_printf(sb, ",\n  \"cpu_fallback\": {\"nodes\": %d, \"copies\": %d, \"list\": [",
                          n_cpu, n_cross);
        int k = 0;
        for (int i = 0; i < g->n_nodes; i++) {
            const kiln_node *n = &g->nodes[i];
            if (n->device != KILN_DEVICE_CPU) continue;
            kiln__sbuf_printf(sb, "%s{\"name\": ", k++ ? ", " : "");
            json_str(sb, n->name);
            kiln__sbuf_printf(sb, ", \"op\": \"%s\"}", n->op->name);
        }
        kiln__sbuf_printf(sb, "]}");
        return;
    }
    kiln__sbuf_printf(sb, "cpu fallback: %d node(s) without a %s kernel run on the CPU, costing %d "
                          "host<->device copies per run%s\n",
                      n_cpu, device_name(e->opts.device), n_cross,
                      n_cpu ? ":" : "");
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->device != KILN_DEVICE_CPU) continue;
        kiln__sbuf_printf(sb, "  ");
        text_name(sb, n->name, 0);
        kiln__sbuf_printf(sb, " (%s)\n", n->op->name);
    }
}

/* User metadata (kiln_engine_metadata), when there is any: every value in
 * full in JSON; in text the first 160 bytes of each, control characters
 * escaped. */
#define KILN_DESCRIBE_META_TEXT 160
static void metadata_summary(const kiln_meta *m, kiln_sbuf *sb, bool json) {
    if (!m->n) return;
    if (json) {
        kiln__sbuf_printf(sb, ",\n  \"metadata\": {");
        for (int i = 0; i < m->n; i++) {
            kiln__sbuf_printf(sb, "%s\n    ", i ? "," : "");
            json_str(sb, m->items[i].key);
            kiln__sbuf_printf(sb, ": ");
            json_str(sb, m->items[i].value);
        }
        kiln__sbuf_printf(sb, "\n  }");
        return;
    }
    kiln__sbuf_printf(sb, "metadata (%d):\n", m->n);
    for (int i = 0; i < m->n; i++) {
        const kiln_meta_entry *x = &m->items[i];
        size_t n = x->value_len;
        if (n > KILN_DESCRIBE_META_TEXT) { /* cut before a UTF-8 continuation byte */
            n = KILN_DESCRIBE_META_TEXT;
            while (n > 0 && ((unsigned char)x->value[n] & 0xc0) == 0x80) n--;
        }
        kiln__sbuf_printf(sb, "  ");
        text_name(sb, x->key, 0);
        kiln__sbuf_printf(sb, ": ");
        text_str(sb, x->value, n, 0);
        if (n < x->value_len) kiln__sbuf_printf(sb, " ... (%zu bytes)", x->value_len);
        kiln__sbuf_printf(sb, "\n");
    }
}

/* Activation memory at the opt shapes, from the memory planner: the arena
 * (host and device for device engines) and the lower bound of its blocks. */
static void memory_summary(const kiln_engine *e, const kiln_mem_plan *p, kiln_sbuf *sb, bool json) {
    if (!p) return;
    size_t arena = p->arena[0] + p->arena[1], lower = p->lower[0] + p->lower[1];
    bool dev = e->opts.device != KILN_DEVICE_CPU;
    if (json) {
        kiln__sbuf_printf(sb,
                          ", \"activation_bytes_at_opt\": %zu, \"activation_arena_bytes\": %zu, "
                          "\"activation_lower_bound_bytes\": %zu, \"activation_dynamic_values\": %d",
                          arena, arena, lower, p->n_dynamic);
        if (dev)
            kiln__sbuf_printf(sb,
                              ", \"activation_arena_host_bytes\": %zu, \"activation_arena_device_bytes\": "
                              "%zu, \"activation_lower_bound_host_bytes\": %zu, "
                              "\"activation_lower_bound_device_bytes\": %zu",
                              p->arena[0], p->arena[1], p->lower[0], p->lower[1]);
        return;
    }
    kiln__sbuf_printf(sb, "  activations + scratch at opt shapes: %zu bytes in one arena (lower bound "
                          "%zu bytes; planned by liveness)\n",
                      arena, lower);
    if (dev)
        kiln__sbuf_printf(sb, "    host arena %zu bytes (lower bound %zu), device arena %zu bytes "
                              "(lower bound %zu)\n",
                          p->arena[0], p->lower[0], p->arena[1], p->lower[1]);
    if (p->n_dynamic)
        kiln__sbuf_printf(sb, "    plus %d tensor(s) whose size depends on data, sized during the run\n",
                          p->n_dynamic);
}

static void describe(const kiln_engine *e, kiln_sbuf *sb, bool json) {
    const kiln_graph *g = e->graph;
    kiln_mem_plan *plan = NULL; /* activation memory at the opt shapes (src/runtime/plan.c) */
    if (kiln__plan_at_profile(e, 1, &plan) != KILN_OK) kiln__clear_error();
    size_t weights = 0;
    int n_const = 0;
    for (int i = 0; i < g->n_values; i++)
        if (g->values[i].flags & KILN_VALUE_CONST) {
            weights += g->values[i].nbytes;
            n_const++;
        }
    if (json) {
        kiln__sbuf_printf(sb, "{\n  \"kiln_version\": ");
        json_str(sb, e->builder_version);
        kiln__sbuf_printf(sb, ",\n  \"target\": ");
        json_str(sb, e->target);
        kiln__sbuf_printf(sb, ",\n  \"device\": \"%s\",\n  \"precision\": \"%s\",\n  \"math\": \"%s\",\n"
                              "  \"threads\": %d,\n",
                          device_name(e->opts.device), precision_name(e->opts.precision),
                          math_name(e->opts.math), e->opts.threads);
        kiln__sbuf_printf(sb, "  \"inputs\": [");
        for (int k = 0; k < g->n_inputs; k++) {
            const kiln_value *v = &g->values[g->inputs[k]];
            kiln__sbuf_printf(sb, "%s\n    {\"name\": ", k ? "," : "");
            json_str(sb, v->name);
            kiln__sbuf_printf(sb, ", \"dtype\": \"%s\", \"shape\": ", kiln_dtype_name(v->info.dtype));
            dims_str(g, &v->info, sb, true);
            kiln__sbuf_printf(sb, ", \"min\": ");
            profile_str(&e->profiles[k], e->profiles[k].min, sb, true);
            kiln__sbuf_printf(sb, ", \"opt\": ");
            profile_str(&e->profiles[k], e->profiles[k].opt, sb, true);
            kiln__sbuf_printf(sb, ", \"max\": ");
            profile_str(&e->profiles[k], e->profiles[k].max, sb, true);
            kiln__sbuf_printf(sb, "}");
        }
        kiln__sbuf_printf(sb, "\n  ],\n  \"outputs\": [");
        for (int k = 0; k < g->n_outputs; k++) {
            const kiln_value *v = &g->values[g->outputs[k]];
            kiln__sbuf_printf(sb, "%s\n    {\"name\": ", k ? "," : "");
            json_str(sb, v->name);
            kiln__sbuf_printf(sb, ", \"dtype\": \"%s\", \"shape\": ", kiln_dtype_name(v->info.dtype));
            dims_str(g, &v->info, sb, true);
            kiln__sbuf_printf(sb, "}");
        }
        kiln__sbuf_printf(sb, "\n  ],\n  \"layers\": [");
        for (int i = 0; i < g->n_nodes; i++) {
            const kiln_node *n = &g->nodes[i];
            kiln__sbuf_printf(sb, "%s\n    {\"name\": ", i ? "," : "");
            json_str(sb, n->name);
            kiln__sbuf_printf(sb, ", \"op\": \"%s\", \"kernel\": \"%s:%s\", \"inputs\": [", n->op->name,
                              node_kernel(g, n), n->op->name);
            for (int k = 0; k < n->n_in; k++) {
                kiln__sbuf_printf(sb, "%s", k ? ", " : "");
                if (n->in[k] < 0) kiln__sbuf_printf(sb, "null");
                else json_str(sb, g->values[n->in[k]].name);
            }
            kiln__sbuf_printf(sb, "], \"outputs\": [");
            for (int k = 0; k < n->n_out; k++) {
                kiln__sbuf_printf(sb, "%s", k ? ", " : "");
                if (n->out[k] < 0) {
                    kiln__sbuf_printf(sb, "null");
                    continue;
                }
                kiln__sbuf_printf(sb, "{\"name\": ");
                json_str(sb, g->values[n->out[k]].name);
                kiln__sbuf_printf(sb, ", \"shape\": ");
                dims_str(g, &g->values[n->out[k]].info, sb, true);
                kiln__sbuf_printf(sb, "}");
            }
            kiln__sbuf_printf(sb, "]");
            node_sources(n, sb, true);
            node_tactic(n, sb, true);
            node_layout(n, sb, true);
            kiln__sbuf_printf(sb, "}");
        }
        kiln__sbuf_printf(sb, "\n  ],\n  \"memory\": {\"weights_bytes\": %zu, \"constants\": %d",
                          weights, n_const);
        memory_summary(e, plan, sb, true);
        kiln__sbuf_printf(sb, "}");
        if (e->opts.device != KILN_DEVICE_CPU) fallback_summary(e, sb, true);
        metadata_summary(&e->meta, sb, true);
        kiln__sbuf_printf(sb, "\n}\n");
        kiln__plan_free(plan);
        return;
    }
    /* the version and target strings come from the file, as names do */
    kiln__sbuf_printf(sb, "kiln engine (built by kiln ");
    text_name(sb, e->builder_version, 0);
    kiln__sbuf_printf(sb, ")\n  target:    ");
    text_name(sb, e->target, 0);
    kiln__sbuf_printf(sb, "\n  device:    %s:%d\n  precision: %s\n  math:      %s%s\n"
                          "  threads:   %d%s\n",
                      device_name(e->opts.device), e->opts.device_index,
                      precision_name(e->opts.precision), math_name(e->opts.math),
                      e->opts.math == KILN_MATH_FAST ? " (--fast-math: less accurate kernels allowed)" : "",
                      e->opts.threads, e->opts.threads ? "" : " (one per core)");
    kiln__sbuf_printf(sb, "inputs (%d):\n", g->n_inputs);
    for (int k = 0; k < g->n_inputs; k++) {
        const kiln_value *v = &g->values[g->inputs[k]];
        kiln__sbuf_printf(sb, "  ");
        text_name(sb, v->name, 0);
        kiln__sbuf_printf(sb, ": %s ", kiln_dtype_name(v->info.dtype));
        dims_str(g, &v->info, sb, false);
        kiln__sbuf_printf(sb, "  profile min ");
        profile_str(&e->profiles[k], e->profiles[k].min, sb, false);
        kiln__sbuf_printf(sb, " opt ");
        profile_str(&e->profiles[k], e->profiles[k].opt, sb, false);
        kiln__sbuf_printf(sb, " max ");
        profile_str(&e->profiles[k], e->profiles[k].max, sb, false);
        kiln__sbuf_printf(sb, "\n");
    }
    kiln__sbuf_printf(sb, "outputs (%d):\n", g->n_outputs);
    for (int k = 0; k < g->n_outputs; k++) {
        const kiln_value *v = &g->values[g->outputs[k]];
        kiln__sbuf_printf(sb, "  ");
        text_name(sb, v->name, 0);
        kiln__sbuf_printf(sb, ": %s ", kiln_dtype_name(v->info.dtype));
        dims_str(g, &v->info, sb, false);
        kiln__sbuf_printf(sb, "\n");
    }
    kiln__sbuf_printf(sb, "layers (%d):\n", g->n_nodes);
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        kiln__sbuf_printf(sb, "  %4d  %-22s ", i, n->op->name);
        text_name(sb, n->name, 28);
        kiln__sbuf_printf(sb, " kernel %s:%s  ->", node_kernel(g, n), n->op->name);
        for (int k = 0; k < n->n_out; k++) {
            if (n->out[k] < 0) continue;
            kiln__sbuf_printf(sb, " ");
            dims_str(g, &g->values[n->out[k]].info, sb, false);
        }
        node_tactic(n, sb, false);
        node_layout(n, sb, false);
        node_sources(n, sb, false);
        kiln__sbuf_printf(sb, "\n");
    }
    kiln__sbuf_printf(sb, "memory:\n  weights: %zu bytes in %d constants\n", weights, n_const);
    memory_summary(e, plan, sb, false);
    kiln__plan_free(plan);
    if (e->opts.device != KILN_DEVICE_CPU) fallback_summary(e, sb, false);
    metadata_summary(&e->meta, sb, false);
}

const char *kiln_engine_describe(kiln_engine *e, int json) {
    if (!e) {
        (void)KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_describe: engine is NULL");
        return "";
    }
    _Atomic(char *) *slot = json ? &e->describe_json : &e->describe_text;
    char *have = atomic_load(slot);
    if (have) return have;
    kiln_sbuf sb = {0};
    describe(e, &sb, json != 0);
    if (sb.oom || !sb.data) {
        kiln__sbuf_free(&sb);
        return "";
    }
    /* another thread may have described it meanwhile: the first string
     * stays (a caller may hold it), ours goes */
    if (!atomic_compare_exchange_strong(slot, &have, sb.data)) {
        kiln__sbuf_free(&sb);
        return have;
    }
    return sb.data;
}
