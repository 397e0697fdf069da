/* test_attention_forms.c -- the attention matcher (src/passes/fuse_transformer.c)
 * on graphs exported by PyTorch itself: the .onnx files of tests/data/attention, made by
 * tests/data/attention/gen_attention_forms.py with torch 1.13 (TorchScript
 * exporter) and torch 2.11 (TorchScript and dynamo exporters; hand-written
 * blocks in every form: eager matmul + softmax with additive masks of
 * several shapes, the scale on Q or on the scores, K made transposed,
 * masked_fill and causal where, F.scaled_dot_product_attention with bool,
 * float and causal masks; torch's nn.MultiheadAttention sequence first and
 * batch first with key padding and causal masks, nn.TransformerEncoder and
 * torchvision's VisionTransformer (torch 1.13: rank-3 [B*H, S, D] products);
 * and tiny Hugging Face BERT, DistilBERT, GPT-2, T5 encoder and ViT models).
 * For every file of the manifest:
 *   - the optimized fp32 CPU engine has one kiln.Attention per attention
 *     block and agrees with the unoptimized engine (torch's own
 *     nn.MultiheadAttention and nn.TransformerEncoder: no Slice or Transpose
 *     left either);
 *   - the fp16 plan for the CUDA backend (the optimizer's passes only: no GPU
 *     needed) fuses every block too, with no Softmax left;
 *   - with a GPU: fp16 and bf16 CUDA engines agree with the fp32 CPU engine.
 * And (test dynamic_axes) encoders exported with dynamic batch and sequence
 * axes (gen_dynamic_axes.py), built once over a profile, at several shapes.
 * A matcher that does not fire, or fires wrongly, fails here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#include "backends/backend.h"
#include "ops/fused_transformer.h"
#include "graph_build.h"
#include "runtime/engine.h"

#define DIR "tests/data/attention/"
#define MAXIN 4

typedef struct spec {
    char name[64];
    char kind[16];
    int rank;
    int64_t dims[KILN_MAX_RANK];
} spec;

typedef struct form {
    char file[1024];
    int n_attn;
    int n_in;
    spec in[MAXIN];
} form;

static bool parse_line(char *line, form *f) {
    memset(f, 0, sizeof *f);
    char *tab1 = strchr(line, '\t');
    if (!tab1) return false;
    *tab1 = 0;
    snprintf(f->file, sizeof f->file, "%s", line);
    char *tab2 = strchr(tab1 + 1, '\t');
    if (!tab2) return false;
    *tab2 = 0;
    f->n_attn = atoi(tab1 + 1);
    char *save = NULL;
    for (char *tok = strtok_r(tab2 + 1, ";\n", &save); tok && f->n_in < MAXIN; tok = strtok_r(NULL, ";\n", &save)) {
        spec *s = &f->in[f->n_in];
        char *c1 = strchr(tok, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c1 || !c2) return false;
        *c1 = *c2 = 0;
        snprintf(s->name, sizeof s->name, "%s", tok);
        snprintf(s->kind, sizeof s->kind, "%s", c1 + 1);
        for (char *d = c2 + 1; *d && s->rank < KILN_MAX_RANK;) {
            s->dims[s->rank++] = strtoll(d, &d, 10);
            if (*d == 'x') d++;
        }
        f->n_in++;
    }
    return f->n_in > 0;
}

/* The spec of model input `name`, or NULL (the TorchScript exporter drops unused inputs). */
static const spec *spec_of(const form *f, const char *name) {
    for (int i = 0; i < f->n_in; i++)
        if (!strcmp(f->in[i].name, name)) return &f->in[i];
    return NULL;
}

typedef struct inputs {
    int n;
    const spec *s[MAXIN];
    kiln_dtype t[MAXIN];
    void *data[MAXIN];
} inputs;

static void make_inputs(const kiln_model *m, const form *f, inputs *in) {
    memset(in, 0, sizeof *in);
    const kiln_graph *g = m->graph;
    for (int k = 0; k < g->n_inputs && in->n < MAXIN; k++) {
        const kiln_value *v = &g->values[g->inputs[k]];
        const spec *s = spec_of(f, v->name);
        CHECK(s != NULL);
        if (!s) continue;
        int64_t n = kiln__numel(s->rank, s->dims);
        int i = in->n++;
        in->s[i] = s;
        if (!strcmp(s->kind, "f")) {
            float *d = malloc(sizeof(float) * (size_t)n);
            for (int64_t j = 0; j < n; j++) d[j] = frand();
            in->t[i] = KILN_DTYPE_FLOAT32;
            in->data[i] = d;
        } else {
            /* ids<V>: tokens in [0, V); m: a padding mask, the last 3 positions of every
             * sequence after the first masked out */
            int64_t *d = malloc(sizeof(int64_t) * (size_t)n);
            int64_t V = !strncmp(s->kind, "ids", 3) ? atoll(s->kind + 3) : 0;
            int64_t L = s->dims[s->rank - 1];
            for (int64_t j = 0; j < n; j++)
                d[j] = V ? (int64_t)((frand() * 0.5f + 0.5f) * (float)V) % V : (j >= L && j % L >= L - 3) ? 0 : 1;
            in->t[i] = KILN_DTYPE_INT64;
            in->data[i] = d;
        }
    }
}

static void free_inputs(inputs *in) {
    for (int i = 0; i < in->n; i++) free(in->data[i]);
}

/* m built for dev (optimization opt, precision prec; 0: fp32) with the pass pass_off (NULL: none) off and
 * tuning on or off (off: each layer's default kernel, so that two plans can be compared bit for bit; timed
 * choices depend on the machine's load). */
static kiln_engine *build_form_without(const kiln_model *m, const inputs *in, kiln_device dev, int opt,
                                       kiln_precision prec, const char *pass_off, int tune, kiln_status *st) {
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_optimization(b, opt));
    if (pass_off) CHECK_OK(kiln_builder_disable_pass(b, pass_off));
    CHECK_OK(kiln_builder_set_tuning(b, tune));
    CHECK_OK(kiln_builder_set_threads(b, 1));
    CHECK_OK(kiln_builder_set_device(b, dev, 0));
    if (prec) CHECK_OK(kiln_builder_set_precision(b, prec));
    for (int i = 0; i < in->n; i++)
        CHECK_OK(kiln_builder_set_profile(b, in->s[i]->name, in->s[i]->rank, in->s[i]->dims, in->s[i]->dims,
                                          in->s[i]->dims));
    *st = kiln_build(b, m, &e);
    kiln_builder_free(b);
    return e;
}

/* m built for dev (optimization opt, precision prec; 0: fp32) into an engine, *st its status. */
static kiln_engine *build_form(const kiln_model *m, const inputs *in, kiln_device dev, int opt,
                               kiln_precision prec, kiln_status *st) {
    return build_form_without(m, in, dev, opt, prec, NULL, 1, st);
}

/* Runs e on the inputs; returns output 0 as float32 (malloc'd), *n its size. */
static float *run_form(const kiln_engine *e, const inputs *in, int64_t *n) {
    kiln_context *c = NULL;
    float *y = NULL;
    *n = 0;
    CHECK_OK(kiln_context_create(e, &c));
    if (!c) return NULL;
    for (int i = 0; i < in->n; i++)
        CHECK_OK(kiln_context_set_input(c, in->s[i]->name, in->t[i], in->s[i]->rank, in->s[i]->dims, in->data[i]));
    CHECK_OK(kiln_context_run(c));
    const void *data = NULL;
    kiln_dtype t = KILN_DTYPE_UNDEFINED;
    int rank = 0;
    int64_t dims[KILN_MAX_RANK];
    const kiln_graph *g = e->graph;
    CHECK_OK(kiln_context_get_output(c, g->values[g->outputs[0]].name, &t, &rank, dims, &data));
    if (data && t == KILN_DTYPE_FLOAT32) {
        *n = kiln__numel(rank, dims);
        y = malloc(sizeof(float) * (size_t)(*n > 0 ? *n : 1));
        memcpy(y, data, sizeof(float) * (size_t)*n);
    }
    kiln_context_free(c);
    return y;
}

static kiln_graph *cuda_plan(const kiln_model *m, const inputs *in, uint32_t disabled);

/* The optimizer's plan of m for the CUDA backend in fp16 (no device needed),
 * the passes `disabled` off: the number of live nodes of op `op`. -1 when the
 * backend is not built. in NULL: the input dims stay as the model declares
 * them (symbolic). */
static int cuda_plan_count_without(const kiln_model *m, const inputs *in, int op, uint32_t disabled) {
    if (!kiln__backend_for(KILN_DEVICE_CUDA)) return -1;
    kiln_graph *g = cuda_plan(m, in, disabled);
    if (!g) return -3;
    int count = 0;
    for (int i = 0; i < g->n_nodes; i++) count += !g->nodes[i].dead && g->nodes[i].op_id == op;
    kiln__graph_free(g);
    return count;
}

static int cuda_plan_count(const kiln_model *m, const inputs *in, int op) {
    return cuda_plan_count_without(m, in, op, 0);
}

/* In m's CUDA fp16 plan (passes `disabled` off): *n_cond the kiln.Attention
 * layers that read a bool cond, *n_mask those that read an additive mask
 * made in the plan by a Where (share_attention_mask), *n_row those of them
 * whose mask is one row of keys per batch ([B, 1, 1, Sk]: made from the
 * padding mask the cond was broadcast from), *n_where the live Wheres. false when the CUDA backend is not built (or the plan fails). */
static bool cuda_plan_masks(const kiln_model *m, const inputs *in, uint32_t disabled, int *n_cond, int *n_mask,
                            int *n_row, int *n_where) {
    if (!kiln__backend_for(KILN_DEVICE_CUDA)) return false;
    kiln_graph *g = cuda_plan(m, in, disabled);
    if (!g) return false;
    *n_cond = *n_mask = *n_row = *n_where = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kiln_node *n = &g->nodes[i];
        if (n->dead) continue;
        *n_where += n->op_id == KILN_OP_Where;
        if (n->op_id != KILN_OP_Attention) continue;
        *n_cond += n->n_in > 4 && n->in[4] >= 0;
        int p = n->n_in > 3 && n->in[3] >= 0 ? g->values[n->in[3]].producer : -1;
        if (p < 0 || !strstr(g->nodes[p].name, "/kiln_attn_mask")) continue;
        (*n_mask)++;
        const kiln_tinfo *mi = &g->values[n->in[3]].info;
        *n_row += mi->rank == 4 && mi->dims[2] == 1;
    }
    kiln__graph_free(g);
    return true;
}

/* m's CUDA fp16 plan, optimized with the passes `disabled` off (NULL: failed). */
static kiln_graph *cuda_plan(const kiln_model *m, const inputs *in, uint32_t disabled) {
    kiln_graph *g = NULL;
    if (kiln__graph_clone(m->graph, &g) != KILN_OK) return NULL;
    /* fix the input dims (and their symbols everywhere), forget intermediate shapes */
    for (int i = 0; in && i < in->n; i++) {
        int v = kiln__graph_find_value(g, in->s[i]->name);
        kiln_tinfo *t = &g->values[v].info;
        for (int d = 0; d < t->rank && d < in->s[i]->rank; d++) {
            int64_t sym = t->dims[d];
            if (KILN_DIM_IS_SYM(sym))
                for (int x = 0; x < g->n_values; x++) {
                    kiln_tinfo *o = &g->values[x].info;
                    if (g->values[x].flags & KILN_VALUE_CONST) continue;
                    for (int j = 0; j < o->rank; j++)
                        if (o->dims[j] == sym) o->dims[j] = in->s[i]->dims[d];
                }
            t->dims[d] = in->s[i]->dims[d];
        }
    }
    for (int x = 0; x < g->n_values; x++) {
        kiln_value *v = &g->values[x];
        if (!(v->flags & (KILN_VALUE_CONST | KILN_VALUE_INPUT | KILN_VALUE_OUTPUT)) && v->producer >= 0)
            v->info.rank = -1;
    }
    kiln_optimize_opts oo = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP16, .disabled = disabled};
    if (kiln__graph_infer(g) == KILN_OK && kiln__pass_fold_constants(g) == KILN_OK && kiln__pass_dce(g) == KILN_OK &&
        kiln__graph_infer(g) == KILN_OK && kiln__pass_optimize(g, &oo) == KILN_OK)
        return g;
    fprintf(stderr, "  CUDA plan: %s\n", kiln_last_error());
    kiln__graph_free(g);
    return NULL;
}

static int n_forms, n_gpu;

/* The forms whose attention layers share one bool cond that adds -inf (torch
 * 2.x's TorchScript exports of the transformers models). */
static bool shares_cond(const char *file) {
    return strstr(file, "t211_ts_hf_bert_sdpa") || strstr(file, "t211_ts_hf_distilbert") ||
           strstr(file, "t211_ts_hf_gpt2");
}

/* The number of kiln.Attention layers of e that read a cond (input 4), and
 * in *n_mask those reading one additive mask that every masked layer shares. */
static int count_cond_layers(const kiln_engine *e, int *n_mask) {
    int n = 0, mask = -1;
    *n_mask = 0;
    for (int i = 0; i < e->graph->n_nodes; i++) {
        const kiln_node *an = &e->graph->nodes[i];
        if (an->op_id != KILN_OP_Attention) continue;
        n += an->n_in > 4 && an->in[4] >= 0;
        if (an->n_in > 3 && an->in[3] >= 0 && (mask < 0 || an->in[3] == mask)) {
            mask = an->in[3];
            (*n_mask)++;
        }
    }
    return n;
}

static void check_form(const form *f) {
    char path[1100];
    snprintf(path, sizeof path, DIR "%s", f->file);
    kiln_model *m = NULL;
    CHECK_OK(kiln_model_load_onnx(path, &m));
    if (!m) return;
    inputs in;
    make_inputs(m, f, &in);
    kiln_status s0, s1;
    kiln_engine *e0 = build_form(m, &in, KILN_DEVICE_CPU, 0, KILN_PRECISION_FP32, &s0);
    kiln_engine *e1 = build_form(m, &in, KILN_DEVICE_CPU, 1, KILN_PRECISION_FP32, &s1);
    CHECK_OK(s0);
    CHECK_OK(s1);
    int na = count_op(e1, KILN_OP_Attention);
    if (na != f->n_attn) fprintf(stderr, "  %s: %d kiln.Attention on the CPU, want %d\n", f->file, na, f->n_attn);
    CHECK(na == f->n_attn);
    CHECK(count_op(e1, KILN_OP_Softmax) == 0);
    /* torch's nn.MultiheadAttention: its packed in_proj (cross attention: its packed
     * K/V projection) read in place (no Slice left but the cross form's own
     * x[:S - 3]) and, sequence first or batch first, no Transpose left around the block */
    if (strstr(f->file, "_mha") || strstr(f->file, "_enc_")) {
        CHECK(count_op(e1, KILN_OP_Slice) == (strstr(f->file, "_cross") ? 1 : 0));
        CHECK(count_op(e1, KILN_OP_Transpose) == 0);
        /* the key padding mask read as the layer's cond from [B, 1, 1, S]: nothing
         * left of its Expand / Where to [B*H, 1, S] */
        if (strstr(f->file, "_kpm"))
            CHECK(count_op(e1, KILN_OP_Expand) + count_op(e1, KILN_OP_Where) + count_op(e1, KILN_OP_Pointwise) == 0);
    }
    /* GPT-2's merge of the heads, Transpose + Reshape to [B*S, H*D] for its
     * Conv1D's Gemm: the Transpose taken in (the layer writes [B, S, H*D]) */
    if (strstr(f->file, "_hf_gpt2")) CHECK(count_op(e1, KILN_OP_Transpose) == 0);
    /* BERT's token-type embedding, folded to a [B, S, E] constant of one repeated
     * row, is stored as [1, 1, E] (shrink_constants) */
    if (strstr(f->file, "_ts_hf_bert") && e1) {
        int tt = kiln__graph_find_value(e1->graph, "/m/embeddings/token_type_embeddings/Gather_output_0");
        const kiln_tinfo *ti = tt >= 0 ? &e1->graph->values[tt].info : NULL;
        CHECK(ti && ti->rank == 3 && ti->dims[0] == 1 && ti->dims[1] == 1 && ti->dims[2] > 1);
    }
    /* torchvision's Swin: its Pads to the window multiple and the Slices that
     * take the padding off again are no-ops at 56x56 (14x14 tokens, window 7)
     * and go, as do the inference Dropouts; Q, K, V are read in place from
     * the packed projection (match_gather_qkv: no Gather of it left); each
     * torch.roll (two Slices + Concat) is one Gather, two rolls of two axes
     * in the one shifted block (concat_of_slices) */
    if (!strncmp(f->file, "swin_", 5)) {
        CHECK(count_op(e1, KILN_OP_Pad) + count_op(e1, KILN_OP_Dropout) == 0);
    }
    /* merge_movement (fuse_movement.c): the shifted block's rolls and window
     * partition, and its window reverse and inverse rolls, one Gather each
     * (6 copies before); PatchMerging's 6 Slices and Concat one Gather
     * (swin_t113_b1); the one-window partition of stage 2 a view. The
     * Transposes left: the patch embedding's, the head's, and the
     * unshifted stage-1 block's partition and reverse. Pure data movement:
     * bit-identical to the plan without the pass. */
    int swin_gathers = strstr(f->file, "swin_t113_b1") ? 3 : 2;
    if (!strncmp(f->file, "swin_", 5)) {
        CHECK(count_op(e1, KILN_OP_Gather) == swin_gathers);
        CHECK(count_op(e1, KILN_OP_Slice) + count_op(e1, KILN_OP_Concat) == 0);
        CHECK(count_op(e1, KILN_OP_Transpose) == 4);
        kiln_status sm;
        /* both untuned: a timed tactic choice (a GEMM kernel) may differ between two builds under load */
        kiln_engine *et = build_form_without(m, &in, KILN_DEVICE_CPU, 1, KILN_PRECISION_FP32, NULL, 0, &sm);
        CHECK_OK(sm);
        kiln_engine *em = build_form_without(m, &in, KILN_DEVICE_CPU, 1, KILN_PRECISION_FP32, "merge_movement", 0, &sm);
        CHECK_OK(sm);
        CHECK(em && count_op(em, KILN_OP_Gather) == 4 && count_op(em, KILN_OP_Transpose) > 4);
        int64_t na1 = 0, nm = 0;
        float *ya = et ? run_form(et, &in, &na1) : NULL, *ym = em ? run_form(em, &in, &nm) : NULL;
        CHECK(ya && ym && na1 == nm && !memcmp(ya, ym, sizeof(float) * (size_t)nm));
        free(ya);
        free(ym);
        kiln_engine_free(et);
        kiln_engine_free(em);
    }
    int64_t n0 = 0, n1 = 0;
    float *y0 = e0 ? run_form(e0, &in, &n0) : NULL, *y1 = e1 ? run_form(e1, &in, &n1) : NULL;
    CHECK(y0 && y1 && n0 == n1 && n0 > 0);
    if (y0 && y1 && n0 == n1) {
        float amax = 0.0f; /* an output of zeros would compare equal whatever the layers did */
        for (int64_t j = 0; j < n0; j++) amax = fabsf(y0[j]) > amax ? fabsf(y0[j]) : amax;
        if (!(amax > 0.0f)) fprintf(stderr, "  %s: the output is all zeros\n", f->file);
        CHECK(amax > 0.0f);
        double err = rel_err(y1, y0, n0);
        if (!(err <= 1e-4)) fprintf(stderr, "  %s: optimized vs unoptimized: %g\n", f->file, err);
        CHECK(err <= 1e-4);
    }
    int nc = cuda_plan_count(m, &in, KILN_OP_Attention);
    if (nc != -1) {
        if (nc != f->n_attn) fprintf(stderr, "  %s: %d kiln.Attention in the CUDA fp16 plan, want %d\n", f->file, nc,
                                     f->n_attn);
        CHECK(nc == f->n_attn);
        CHECK(cuda_plan_count(m, &in, KILN_OP_Softmax) == 0);
        /* share_attention_mask: torch 2.x's TorchScript exports of BERT, DistilBERT
         * and GPT-2 give every layer the same bool cond (-inf added where
         * masked): the fp16 plan makes it one additive mask (one Where, fused
         * with the And before it), read by every layer instead of the cond,
         * converted once per run instead of once per layer (issue 21); with the
         * pass off, each layer reads the cond. A layer alone with its cond keeps it. */
        int nco, nma, nro, nwh, nco0, nma0, nro0, nwh0;
        CHECK(cuda_plan_masks(m, &in, 0, &nco, &nma, &nro, &nwh));
        CHECK(cuda_plan_masks(m, &in, 1u << KILN_PASS_SHARE_ATTENTION_MASK, &nco0, &nma0, &nro0, &nwh0));
        CHECK(nma0 == 0 && (nma == 0 || nma >= 2) && nco + nma == nco0);
        if (shares_cond(f->file)) {
            if (nco != 0 || nma != f->n_attn)
                fprintf(stderr, "  %s: %d layers read the cond, %d the shared mask (%d as one row per batch), "
                        "want 0 and %d\n", f->file, nco, nma, nro, f->n_attn);
            CHECK(nco == 0 && nma == f->n_attn && nco0 == f->n_attn);
            /* BERT's and DistilBERT's cond is their padding mask [B, 1, 1, S] And an
             * all-true [S, S]: the mask is made from the padding mask; GPT-2's is
             * And a causal mask: the full [B, 1, S, S] */
            CHECK(nro == (strstr(f->file, "gpt2") ? 0 : f->n_attn));
            /* attention_mask_rows off: the mask in the cond's shape */
            CHECK(cuda_plan_masks(m, &in, 1u << KILN_PASS_ATTENTION_MASK_ROWS, &nco0, &nma0, &nro0, &nwh0));
            CHECK(nco0 == 0 && nma0 == f->n_attn && nro0 == 0);
        } else if (f->n_attn < 2) {
            CHECK(nma == 0);
        }
        /* BERT's embeddings, word + token type + position: the two constants
         * summed at build (fold_addends), the one Add left taken by AddLayerNorm;
         * the fp32 CPU plan keeps its Add */
        if (strstr(f->file, "hf_bert")) {
            CHECK(cuda_plan_count(m, &in, KILN_OP_Add) == 0 && count_op(e1, KILN_OP_Add) == 1);
            CHECK(cuda_plan_count_without(m, &in, KILN_OP_Add, 1u << KILN_PASS_FOLD_ADDENDS) == 1);
        }
        /* BERT: one projection for Q, K and V; output, FFN in and FFN out */
        if (strstr(f->file, "hf_bert")) CHECK(cuda_plan_count(m, &in, KILN_OP_FusedMatMul) == 4 * f->n_attn);
        /* Swin: no Pad kept in float32 between two Casts (the input's and the output's only) */
        if (!strncmp(f->file, "swin_", 5)) {
            CHECK(cuda_plan_count(m, &in, KILN_OP_Cast) == 2);
            CHECK(cuda_plan_count(m, &in, KILN_OP_Gather) == swin_gathers);
            CHECK(cuda_plan_count(m, &in, KILN_OP_Slice) + cuda_plan_count(m, &in, KILN_OP_Concat) == 0);
            int nt = cuda_plan_count(m, &in, KILN_OP_Transpose);
            if (nt != 4) fprintf(stderr, "  %s: %d Transposes in the CUDA fp16 plan, want 4\n", f->file, nt);
            CHECK(nt == 4);
        }
    }
    /* on a GPU: fp16 and bf16 engines against fp32 */
    for (int p = 0; p < 2 && y0; p++) {
        kiln_status sg;
        kiln_engine *eg = build_form(m, &in, KILN_DEVICE_CUDA, 1, p ? KILN_PRECISION_BF16 : KILN_PRECISION_FP16, &sg);
        if (sg == KILN_ERR_DEVICE || sg == KILN_ERR_UNSUPPORTED) break; /* no GPU (or no CUDA backend) */
        CHECK_OK(sg);
        if (!eg) break;
        n_gpu++;
        CHECK(count_op(eg, KILN_OP_Attention) == f->n_attn);
        if (shares_cond(f->file)) { /* the engine, tuned: the layers read the shared mask */
            int n_mask = 0;
            CHECK(count_cond_layers(eg, &n_mask) == 0 && n_mask == f->n_attn);
        }
        /* the tactic the tuner kept for each attention layer, and its time (a note) */
        fprintf(stderr, "  %s %s attention:", f->file, p ? "bf16" : "fp16");
        for (int i = 0; i < eg->graph->n_nodes; i++) {
            const kiln_node *an = &eg->graph->nodes[i];
            if (an->op_id != KILN_OP_Attention || !an->attrs) continue;
            const kiln_tactic *tac = an->attrs;
            char tn[96];
            kiln__backend_tactic_describe(kiln__backend_for(an->device), an, tac->id, tn, sizeof tn);
            fprintf(stderr, " %s %.1fus", tn, (double)tac->us);
        }
        fprintf(stderr, "\n");
        int64_t ng = 0;
        float *yg = run_form(eg, &in, &ng);
        CHECK(yg && ng == n0);
        if (yg && ng == n0) {
            double err = rel_err(yg, y0, n0), tol = p ? 5e-2 : 1e-2;
            if (!(err <= tol)) fprintf(stderr, "  %s: %s CUDA vs fp32 CPU: %g\n", f->file, p ? "bf16" : "fp16", err);
            CHECK(err <= tol);
        }
        free(yg);
        kiln_engine_free(eg);
    }
    free(y0);
    free(y1);
    kiln_engine_free(e0);
    kiln_engine_free(e1);
    free_inputs(&in);
    kiln_model_free(m);
    n_forms++;
}

TEST(exported_forms) {
    FILE *fp = fopen(DIR "manifest.txt", "r");
    CHECK(fp != NULL);
    if (!fp) return;
    char line[1024];
    while (fgets(line, sizeof line, fp)) {
        form f;
        if (line[0] == '\n' || line[0] == '#') continue;
        CHECK(parse_line(line, &f));
        int before = test_failed_checks;
        check_form(&f);
        if (test_failed_checks != before) fprintf(stderr, "  ^ %s\n", f.file);
    }
    fclose(fp);
    printf("  %d exported graphs, %d GPU engines\n", n_forms, n_gpu);
    CHECK(n_forms >= 52);
}

/* Runs engines e0 (unoptimized) and e1 of m on inputs of f's shapes and
 * checks that they agree (and give n elements, unless n < 0). */
static void check_agree(const kiln_model *m, const form *f, const kiln_engine *e0, const kiln_engine *e1, int64_t n,
                        const char *at) {
    inputs in;
    make_inputs(m, f, &in);
    int64_t n0 = 0, n1 = 0;
    float *y0 = run_form(e0, &in, &n0), *y1 = run_form(e1, &in, &n1);
    CHECK(y0 && y1 && n0 == n1 && n0 > 0 && (n < 0 || n0 == n));
    if (y0 && y1 && n0 == n1) {
        double err = rel_err(y1, y0, n0);
        if (!(err <= 1e-4)) fprintf(stderr, "  %s: optimized vs unoptimized: %g\n", at, err);
        CHECK(err <= 1e-4);
    }
    free(y0);
    free(y1);
    free_inputs(&in);
}

/* Engine of m for one profile of x [B, S, 32] and mask [B, S]: B in [1, 4],
 * S in [4, 16], optimized at 2 x 8. */
static kiln_engine *build_dynamic(const kiln_model *m, int opt) {
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_optimization(b, opt));
    CHECK_OK(kiln_builder_set_threads(b, 1));
    CHECK_OK(kiln_builder_set_profile(b, "x", 3, (const int64_t[]){1, 4, 32}, (const int64_t[]){2, 8, 32},
                                      (const int64_t[]){4, 16, 32}));
    CHECK_OK(kiln_builder_set_profile(b, "mask", 2, (const int64_t[]){1, 4}, (const int64_t[]){2, 8},
                                      (const int64_t[]){4, 16}));
    CHECK_OK(kiln_build(b, m, &e));
    kiln_builder_free(b);
    return e;
}

/* Models exported with dynamic batch and sequence axes
 * (gen_dynamic_axes.py): their head split and merge reshape to targets made
 * at run time from Shape/Gather/Unsqueeze/Concat of the tensor itself. One
 * engine over a profile: the optimized one (one kiln.Attention per layer,
 * no shape computation left) agrees with the unoptimized one at several
 * batch sizes and sequence lengths. The badmerge model's merge,
 * view(S, B, E) with S and B read at run time, is not the attention's [B, S,
 * E]: its Reshape and shape computation stay. */
static void check_dynamic(const char *file, int n_attn, bool bad_merge) {
    char path[1100];
    snprintf(path, sizeof path, DIR "%s", file);
    kiln_model *m = NULL;
    CHECK_OK(kiln_model_load_onnx(path, &m));
    if (!m) return;
    kiln_engine *e0 = build_dynamic(m, 0), *e1 = build_dynamic(m, 1);
    CHECK(e0 && e1);
    if (e1) {
        int na = count_op(e1, KILN_OP_Attention);
        if (na != n_attn) fprintf(stderr, "  %s: %d kiln.Attention, want %d\n", file, na, n_attn);
        CHECK(na == n_attn);
        CHECK(count_op(e1, KILN_OP_Softmax) == 0);
        CHECK(count_op(e1, KILN_OP_Reshape) == (bad_merge ? 1 : 0));
        CHECK(count_op(e1, KILN_OP_Shape) == (bad_merge ? 2 : 0));
        CHECK(count_op(e1, KILN_OP_Concat) == (bad_merge ? 1 : 0));
    }
    /* the CUDA fp16 plan over the symbolic dims fuses too */
    int nc = cuda_plan_count(m, NULL, KILN_OP_Attention);
    if (nc != -1) {
        if (nc != n_attn) fprintf(stderr, "  %s: %d kiln.Attention in the CUDA fp16 plan, want %d\n", file, nc, n_attn);
        CHECK(nc == n_attn);
    }
    static const int64_t shapes[][2] = {{1, 4}, {3, 11}, {4, 16}, {2, 8}, {1, 13}};
    for (int k = 0; k < 5 && e0 && e1; k++) {
        form f = {.n_in = 2};
        f.in[0] = (spec){.name = "x", .kind = "f", .rank = 3, .dims = {shapes[k][0], shapes[k][1], 32}};
        f.in[1] = (spec){.name = "mask", .kind = "m", .rank = 2, .dims = {shapes[k][0], shapes[k][1]}};
        char at[96];
        snprintf(at, sizeof at, "%s at %lldx%lld", file, (long long)shapes[k][0], (long long)shapes[k][1]);
        check_agree(m, &f, e0, e1, shapes[k][0] * shapes[k][1] * 32, at);
    }
    kiln_engine_free(e0);
    kiln_engine_free(e1);
    kiln_model_free(m);
}

TEST(dynamic_axes) {
    check_dynamic("t113_ts_dynaxes_bert.onnx", 2, false);
    check_dynamic("t113_ts_dynaxes_badmerge.onnx", 1, true);
}

/* Engine of m over a profile of batch 1 to 4 (opt 2) along axis `bax` of
 * every input of f, the other dims as in f. */
static kiln_engine *build_batch_profile(const kiln_model *m, const form *f, int bax, int opt) {
    kiln_builder *b = NULL;
    kiln_engine *e = NULL;
    CHECK_OK(kiln_builder_create(&b));
    CHECK_OK(kiln_builder_set_optimization(b, opt));
    CHECK_OK(kiln_builder_set_threads(b, 1));
    for (int i = 0; i < m->graph->n_inputs; i++) {
        const spec *sp = spec_of(f, m->graph->values[m->graph->inputs[i]].name);
        if (!sp) continue;
        int64_t d[3][KILN_MAX_RANK];
        for (int k = 0; k < 3; k++) memcpy(d[k], sp->dims, sizeof d[k]);
        int ax = sp->rank == 2 ? 0 : bax; /* masks [B, S] */
        d[0][ax] = 1, d[1][ax] = 2, d[2][ax] = 4;
        CHECK_OK(kiln_builder_set_profile(b, sp->name, sp->rank, d[0], d[1], d[2]));
    }
    CHECK_OK(kiln_build(b, m, &e));
    kiln_builder_free(b);
    return e;
}

/* Models of the manifest exported with a dynamic batch (axis bax; masks:
 * axis 0), built once over batch 1 to 4: the batch stays a symbolic dim
 * through the shapes they compute at run time (Expand/Where/Equal chains of
 * Hugging Face's masks and embeddings), so that n_attn attention blocks fuse
 * (torch 1.13's nn.MultiheadAttention too, whose head split [S, B*H, D] is
 * read by meaning), and the optimized engine agrees with the unoptimized
 * one at batch 1, 3 and 4 (the profile's opt is 2). */
static void check_batch_profile(const char *file, const char *specs, int bax, int n_attn) {
    char line[1024];
    snprintf(line, sizeof line, "%s\t0\t%s", file, specs);
    form f;
    CHECK(parse_line(line, &f));
    char path[1100];
    snprintf(path, sizeof path, DIR "%s", file);
    kiln_model *m = NULL;
    CHECK_OK(kiln_model_load_onnx(path, &m));
    if (!m) return;
    kiln_engine *e0 = build_batch_profile(m, &f, bax, 0), *e1 = build_batch_profile(m, &f, bax, 1);
    CHECK(e0 && e1);
    if (e1 && n_attn >= 0) {
        int na = count_op(e1, KILN_OP_Attention);
        if (na != n_attn) fprintf(stderr, "  %s over a batch profile: %d kiln.Attention, want %d\n", file, na, n_attn);
        CHECK(na == n_attn);
        CHECK(count_op(e1, KILN_OP_Softmax) == 0);
        /* torch's nn.MultiheadAttention, sequence or batch first: no Transpose
         * left around the block, as at a static batch */
        if (strstr(file, "_mha") || strstr(file, "_enc_")) {
            int nt = count_op(e1, KILN_OP_Transpose);
            if (nt) fprintf(stderr, "  %s over a batch profile: %d Transpose left\n", file, nt);
            CHECK(nt == 0);
        }
        /* the residual Adds fuse into their LayerNorms as at the static batch of f */
        inputs in;
        make_inputs(m, &f, &in);
        kiln_status st = KILN_OK;
        kiln_engine *es = build_form(m, &in, KILN_DEVICE_CPU, 1, KILN_PRECISION_FP32, &st);
        CHECK(es != NULL);
        if (es) {
            int np = count_op(e1, KILN_OP_AddLayerNorm), ns = count_op(es, KILN_OP_AddLayerNorm);
            if (np != ns)
                fprintf(stderr, "  %s over a batch profile: %d kiln.AddLayerNorm, %d at a static batch\n", file, np,
                        ns);
            CHECK(np == ns);
            CHECK(count_op(e1, KILN_OP_LayerNormalization) == count_op(es, KILN_OP_LayerNormalization));
            if (strstr(file, "_hf_") && !strstr(file, "t5enc")) CHECK(ns > 0); /* T5: RMS norms, no LayerNorm */
        }
        kiln_engine_free(es);
        free_inputs(&in);
    }
    static const int64_t batches[] = {1, 3, 4};
    for (int k = 0; k < 3 && e0 && e1; k++) {
        form fb = f;
        for (int i = 0; i < fb.n_in; i++) fb.in[i].dims[fb.in[i].rank == 2 ? 0 : bax] = batches[k];
        char at[96];
        snprintf(at, sizeof at, "%s at batch %lld", file, (long long)batches[k]);
        check_agree(m, &fb, e0, e1, -1, at);
    }
    kiln_engine_free(e0);
    kiln_engine_free(e1);
    kiln_model_free(m);
}

TEST(batch_profile) {
    static const char ids[] = "input_ids:ids64:2x8;attention_mask:m:2x8";
    check_batch_profile("t211_ts_hf_bert_eager.onnx", ids, 0, 2);
    check_batch_profile("t211_ts_hf_distilbert.onnx", ids, 0, 2);
    check_batch_profile("t211_ts_hf_gpt2.onnx", ids, 0, 2);
    check_batch_profile("t211_ts_hf_t5enc.onnx", ids, 0, 2);
    check_batch_profile("t211_ts_hf_vit.onnx", "pixel_values:f:2x3x16x16", 0, 2);
    check_batch_profile("t113_ts_tv_vit.onnx", "x:f:2x3x16x16", 0, 2);
    check_batch_profile("t113_ts_mha_sf.onnx", "x:f:8x2x32", 1, 1);
    check_batch_profile("t113_ts_mha_sf_kpm.onnx", "x:f:8x2x32;mask:m:2x8", 1, 1);
    check_batch_profile("t113_ts_mha_sf_causal.onnx", "x:f:8x2x32", 1, 1);
    check_batch_profile("t113_ts_mha_sf_cross.onnx", "x:f:8x2x32", 1, 1);
    check_batch_profile("t113_ts_mha2w_sf.onnx", "x:f:8x2x32", 1, 1);
    check_batch_profile("t113_ts_mha2w_sf_kpm.onnx", "x:f:8x2x32;mask:m:2x8", 1, 1);
    check_batch_profile("t113_ts_mha_bf.onnx", "x:f:2x8x32", 0, 1);
    check_batch_profile("t113_ts_mha_bf_kpm_causal.onnx", "x:f:2x8x32;mask:m:2x8", 0, 1);
    check_batch_profile("t113_ts_mha2w_bf.onnx", "x:f:2x8x32", 0, 1);
    check_batch_profile("t113_ts_enc_postnorm.onnx", "x:f:2x8x32;mask:m:2x8", 0, 2);
    check_batch_profile("t113_ts_enc_prenorm.onnx", "x:f:2x8x32;mask:m:2x8", 0, 2);
}

int main(void) {
    RUN(exported_forms);
    RUN(dynamic_axes);
    RUN(batch_profile);
    return test_summary();
}
