/* fuse_pointwise.c -- the pointwise-fusion pass: every connected group of
 * elementwise nodes that the other fusions left (SiLU written as
 * Sigmoid + Mul, HardSwish chains, mask preparation with Cast/Where/IsNaN,
 * the Casts of fp16 plans, bias + activation no epilogue took) becomes one
 * kiln.Pointwise layer (src/ops/fused_pointwise.h): one pass over memory
 * and one kernel launch instead of one per node.
 *
 * Groups grow in topological order: a node joins the groups of its
 * producers whose outputs have its own output shape (inputs from outside
 * may broadcast), when the union stays convex (no path leaves the group
 * and comes back, checked on the producers of its outside inputs) and its
 * program fits kiln.Pointwise's limits. Values read outside the group (or
 * graph outputs) become the layer's outputs. Groups of two or more nodes
 * the device supports are replaced; the graph is then sorted again, since
 * a reader of an intermediate value may lie between the group's nodes.
 * It runs last, after the precision pass, so that it sees the Casts that
 * pass adds and the fused layers keep their patterns. */
#include "passes/pattern.h"

#include "ops/elementwise_impl.h"
#include "ops/fused_pointwise.h"
#include "ops/fused_transformer.h"

#include <stdio.h>

/* ---- which nodes may join, and their instructions -------------------------- */

static int unary_opcode(int op_id) {
    switch (op_id) {
    case KILN_OP_Neg: return KILN_PW_NEG;
    case KILN_OP_Abs: return KILN_PW_ABS;
    case KILN_OP_Sqrt: return KILN_PW_SQRT;
    case KILN_OP_Exp: return KILN_PW_EXP;
    case KILN_OP_Log: return KILN_PW_LOG;
    case KILN_OP_Reciprocal: return KILN_PW_RECIP;
    case KILN_OP_Floor: return KILN_PW_FLOOR;
    case KILN_OP_Ceil: return KILN_PW_CEIL;
    case KILN_OP_Round: return KILN_PW_ROUND;
    case KILN_OP_Sign: return KILN_PW_SIGN;
    case KILN_OP_Sin: return KILN_PW_SIN;
    case KILN_OP_Cos: return KILN_PW_COS;
    case KILN_OP_Tan: return KILN_PW_TAN;
    case KILN_OP_Asin: return KILN_PW_ASIN;
    case KILN_OP_Acos: return KILN_PW_ACOS;
    case KILN_OP_Atan: return KILN_PW_ATAN;
    case KILN_OP_Sinh: return KILN_PW_SINH;
    case KILN_OP_Cosh: return KILN_PW_COSH;
    case KILN_OP_Asinh: return KILN_PW_ASINH;
    case KILN_OP_Acosh: return KILN_PW_ACOSH;
    case KILN_OP_Atanh: return KILN_PW_ATANH;
    case KILN_OP_Erf: return KILN_PW_ERF;
    case KILN_OP_Relu: return KILN_PW_RELU;
    case KILN_OP_LeakyRelu: return KILN_PW_LEAKYRELU;
    case KILN_OP_Elu: return KILN_PW_ELU;
    case KILN_OP_Selu: return KILN_PW_SELU;
    case KILN_OP_Celu: return KILN_PW_CELU;
    case KILN_OP_Sigmoid: return KILN_PW_SIGMOID;
    case KILN_OP_HardSigmoid: return KILN_PW_HARDSIGMOID;
    case KILN_OP_HardSwish: return KILN_PW_HARDSWISH;
    case KILN_OP_Tanh: return KILN_PW_TANH;
    case KILN_OP_Softplus: return KILN_PW_SOFTPLUS;
    case KILN_OP_Softsign: return KILN_PW_SOFTSIGN;
    case KILN_OP_Mish: return KILN_PW_MISH;
    case KILN_OP_ThresholdedRelu: return KILN_PW_THRESHOLDEDRELU;
    case KILN_OP_Shrink: return KILN_PW_SHRINK;
    case KILN_OP_IsNaN: return KILN_PW_ISNAN;
    case KILN_OP_IsInf: return KILN_PW_ISINF;
    case KILN_OP_Not: return KILN_PW_NOT;
    default: return 0;
    }
}

static int binary_opcode(int op_id) {
    switch (op_id) {
    case KILN_OP_Add: return KILN_PW_ADD;
    case KILN_OP_Sub: return KILN_PW_SUB;
    case KILN_OP_Mul: return KILN_PW_MUL;
    case KILN_OP_Div: return KILN_PW_DIV;
    case KILN_OP_Pow: return KILN_PW_POW;
    case KILN_OP_Equal: return KILN_PW_EQ;
    case KILN_OP_Less: return KILN_PW_LT;
    case KILN_OP_LessOrEqual: return KILN_PW_LE;
    case KILN_OP_Greater: return KILN_PW_GT;
    case KILN_OP_GreaterOrEqual: return KILN_PW_GE;
    case KILN_OP_And: return KILN_PW_AND;
    case KILN_OP_Or: return KILN_PW_OR;
    case KILN_OP_Xor: return KILN_PW_XOR;
    case KILN_OP_PRelu: return KILN_PW_PRELU;
    default: return 0;
    }
}

static bool variadic(int op_id) {
    return op_id == KILN_OP_Max || op_id == KILN_OP_Min || op_id == KILN_OP_Sum || op_id == KILN_OP_Mean;
}

static bool is_float(kiln_dtype t) {
    return t == KILN_DTYPE_FLOAT32 || t == KILN_DTYPE_FLOAT16 || t == KILN_DTYPE_BFLOAT16;
}

/* Every dim known or a symbol: shapes can be compared. */
static bool shape_known(const kiln_tinfo *t) {
    if (t->rank < 0) return false;
    for (int d = 0; d < t->rank; d++)
        if (t->dims[d] == KILN_DIM_UNKNOWN) return false;
    return true;
}


static const kiln_tinfo *vinfo(const kiln_graph *g, int v) { return &g->values[v].info; }

/* Whether node n can be part of a group: an elementwise op the instruction
 * set has, on float (or bool) tensors, one output of a comparable shape. */
static bool eligible(const kiln_graph *g, const kiln_node *n) {
    if (n->dead || n->n_out != 1 || n->out[0] < 0) return false;
    const kiln_tinfo *o = vinfo(g, n->out[0]);
    if (!kiln__pw_out_dtype_ok(o->dtype) || !shape_known(o)) return false;
    int id = n->op_id;
    bool cast = id == KILN_OP_Cast;
    if (!cast && !unary_opcode(id) && !binary_opcode(id) && !variadic(id) && id != KILN_OP_Where &&
        id != KILN_OP_Clip && id != KILN_OP_Gelu && id != KILN_OP_GeluOnnx)
        return false;
    if (binary_opcode(id)) {
        const kiln_ew_bin_attrs *at = n->attrs;
        if (at && at->legacy_bcast != EW_LEGACY_NONE) return false;
    }
    if (variadic(id) && (n->n_in < 1 || n->n_in > 4)) return false;
    for (int i = 0; i < n->n_in; i++) {
        int v = n->in[i];
        if (v < 0) {
            if (id == KILN_OP_Clip) continue;
            return false;
        }
        const kiln_tinfo *t = vinfo(g, v);
        if (t->rank < 0) return false;
        bool ok = is_float(t->dtype) || t->dtype == KILN_DTYPE_BOOL ||
                  (cast && (t->dtype == KILN_DTYPE_INT32 || t->dtype == KILN_DTYPE_INT64));
        if (!ok) return false;
        if (id == KILN_OP_Clip && i > 0 && kiln__numel(t->rank, t->dims) != 1) return false;
    }
    if (id == KILN_OP_Pow && vinfo(g, n->in[0])->dtype != vinfo(g, n->in[1])->dtype) return false;
    return true;
}

/* ---- compiling a group into a program ------------------------------------- */

typedef struct opnd {
    int reg;      /* -1: the constant */
    float value;
} opnd;

typedef struct pw_compiler {
    const kiln_graph *g;
    const bool *in_group;  /* per node */
    kiln_pw_attrs at;
    int ins[KILN_PW_MAX_IN], outs[KILN_PW_MAX_OUT];
    int *reg;              /* per value: its register, -1 none */
    int *uses;             /* per value: reads left inside the group */
    uint32_t busy;         /* registers holding live values */
    bool fail;
    bool const_inputs;     /* scalar constants are inputs, not immediates */
} pw_compiler;

static int take_reg(pw_compiler *c) {
    for (int r = 0; r < KILN_PW_MAX_REGS; r++)
        if (!(c->busy & (1u << r))) {
            c->busy |= 1u << r;
            if (r >= c->at.n_regs) c->at.n_regs = r + 1;
            return r;
        }
    c->fail = true;
    return 0;
}

static void drop_reg(pw_compiler *c, int r) { c->busy &= ~(1u << r); }

/* The scalar value of constant v (numel 1), or false. */
static bool const_scalar(const kiln_graph *g, int v, float *out) {
    const kiln_value *val = &g->values[v];
    if (!(val->flags & KILN_VALUE_CONST) || kiln__numel(val->info.rank, val->info.dims) != 1) return false;
    *out = (float)kiln__load_f64(val->info.dtype, val->data, 0);
    return true;
}

/* Emits op(srcs) into a fresh register (sources freed by the caller). At
 * most one constant operand per instruction: others go through MOV. */
static int emit(pw_compiler *c, int op, int n_src, opnd *src, float p0, float p1) {
    if (c->fail) return 0;
    int imm = 0;
    for (int s = 0; s < n_src; s++) {
        if (src[s].reg >= 0) continue;
        if (!imm && (n_src > 1 || op == KILN_PW_MOV)) { /* p0 of a unary op is its parameter */
            imm = s + 1;
            p0 = src[s].value;
            continue;
        }
        opnd k = src[s];
        src[s].reg = emit(c, KILN_PW_MOV, 1, &k, 0, 0);
        src[s].value = 0;
        src[s].reg |= 1 << 8; /* a temporary: dropped below */
    }
    if (c->at.n_instr >= KILN_PW_MAX_INSTR) {
        c->fail = true;
        return 0;
    }
    kiln_pw_instr *in = &c->at.instr[c->at.n_instr++];
    memset(in, 0, sizeof *in);
    in->op = (uint8_t)op;
    in->imm = (uint8_t)imm;
    in->p0 = p0;
    in->p1 = p1;
    uint8_t *slot[3] = {&in->a, &in->b, &in->c};
    for (int s = 0; s < n_src; s++)
        if (src[s].reg >= 0) *slot[s] = (uint8_t)(src[s].reg & 0xff);
    for (int s = 0; s < n_src; s++)
        if (src[s].reg >= 0 && (src[s].reg >> 8)) drop_reg(c, src[s].reg & 0xff);
    int d = take_reg(c);
    in->dst = (uint8_t)d;
    return d;
}

/* Operand for value v read by a group node. */
static opnd operand(pw_compiler *c, int v) {
    opnd o = {c->reg[v], 0};
    if (o.reg < 0) {
        if (!const_scalar(c->g, v, &o.value)) c->fail = true; /* cannot happen: inputs were given registers */
    }
    return o;
}

/* After node n: values no longer read inside the group and not outputs free their registers. */
static void release(pw_compiler *c, const kiln_node *n) {
    for (int i = 0; i < n->n_in; i++) {
        int v = n->in[i];
        if (v < 0 || --c->uses[v] > 0 || c->reg[v] < 0) continue;
        bool out = false;
        for (int j = 0; j < c->at.n_out; j++) out |= c->outs[j] == v;
        if (!out) drop_reg(c, c->reg[v]);
    }
}

/* Emits node n; returns the register of its output. */
static int emit_node(pw_compiler *c, const kiln_node *n) {
    const kiln_graph *g = c->g;
    int id = n->op_id;
    opnd s[4];
    for (int i = 0; i < n->n_in && i < 4; i++)
        if (n->in[i] >= 0) s[i] = operand(c, n->in[i]);
    int op;
    if ((op = unary_opcode(id))) {
        float p0 = 0, p1 = 0;
        if (id == KILN_OP_IsInf) {
            const kiln_ew_isinf_attrs *at = n->attrs;
            p0 = (float)at->detect_positive;
            p1 = (float)at->detect_negative;
        } else if (n->op->attr_size == sizeof(kiln_ew_act_attrs) && n->attrs) {
            const kiln_ew_act_attrs *at = n->attrs;
            p0 = at->alpha;
            p1 = id == KILN_OP_Selu ? at->gamma : at->beta;
        }
        return emit(c, op, 1, s, p0, p1);
    }
    if ((op = binary_opcode(id))) {
        if (id == KILN_OP_Pow && s[1].reg < 0 && s[1].value == 2.0f && s[0].reg >= 0) {
            opnd sq[2] = {s[0], s[0]};
            return emit(c, KILN_PW_MUL, 2, sq, 0, 0);
        }
        return emit(c, op, 2, s, 0, 0);
    }
    if (variadic(id)) {
        int kind = id == KILN_OP_Max ? KILN_PW_MAX : id == KILN_OP_Min ? KILN_PW_MIN : KILN_PW_ADD;
        if (n->n_in == 1) return emit(c, KILN_PW_MOV, 1, s, 0, 0);
        int r = emit(c, kind, 2, s, 0, 0);
        for (int i = 2; i < n->n_in; i++) {
            opnd t[2] = {{r | 1 << 8, 0}, s[i]};
            r = emit(c, kind, 2, t, 0, 0);
        }
        if (id == KILN_OP_Mean) {
            opnd t[2] = {{r | 1 << 8, 0}, {-1, (float)n->n_in}};
            r = emit(c, KILN_PW_DIV, 2, t, 0, 0);
        }
        return r;
    }
    switch (id) {
    case KILN_OP_Where: return emit(c, KILN_PW_WHERE, 3, s, 0, 0);
    case KILN_OP_Gelu:
    case KILN_OP_GeluOnnx: {
        const kiln_gelu_attrs *at = n->attrs;
        return emit(c, at && at->approx ? KILN_PW_GELU_TANH : KILN_PW_GELU_ERF, 1, s, 0, 0);
    }
    case KILN_OP_Clip: {
        int r = -1;
        opnd x = s[0];
        for (int i = 1; i < 3 && i < n->n_in; i++) {
            if (n->in[i] < 0) continue;
            opnd t[2] = {x, s[i]};
            if (r >= 0) t[0].reg |= 1 << 8;
            r = emit(c, i == 1 ? KILN_PW_CLIP_LO : KILN_PW_CLIP_HI, 2, t, 0, 0);
            x.reg = r;
        }
        return r >= 0 ? r : emit(c, KILN_PW_MOV, 1, s, 0, 0);
    }
    case KILN_OP_Cast: {
        kiln_dtype to = vinfo(g, n->out[0])->dtype;
        op = to == KILN_DTYPE_FLOAT16 ? KILN_PW_ROUND_F16 : to == KILN_DTYPE_BFLOAT16 ? KILN_PW_ROUND_BF16
             : to == KILN_DTYPE_BOOL ? KILN_PW_TO_BOOL : KILN_PW_MOV;
        return emit(c, op, 1, s, 0, 0);
    }
    default: c->fail = true; return 0;
    }
}

/* Whether value v (made by a member) is read outside the group or is a graph output. */
static bool is_member_output(const kiln_graph *g, const int *members, int m, int v) {
    if (kiln__graph_is_output(g, v)) return true;
    int readers_in = 0;
    for (int k = 0; k < m; k++) {
        const kiln_node *n = &g->nodes[members[k]];
        for (int i = 0; i < n->n_in; i++) readers_in += n->in[i] == v;
    }
    return g->values[v].n_uses > readers_in;
}

/* Compiles the nodes of group (in_group, ascending indices members[0..m)):
 * c->at, c->ins, c->outs. false: it does not fit kiln.Pointwise. */
static bool compile_as(pw_compiler *c, const int *members, int m) {
    const kiln_graph *g = c->g;
    memset(&c->at, 0, sizeof c->at);
    c->busy = 0;
    c->fail = false;
    for (int k = 0; k < m; k++) {
        const kiln_node *n = &g->nodes[members[k]];
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] >= 0) c->reg[n->in[i]] = -1, c->uses[n->in[i]] = 0;
        c->reg[n->out[0]] = -1;
        c->uses[n->out[0]] = 0;
    }
    /* inputs: values from outside, except scalar constants (immediates) */
    for (int k = 0; k < m; k++) {
        const kiln_node *n = &g->nodes[members[k]];
        for (int i = 0; i < n->n_in; i++) {
            int v = n->in[i];
            if (v < 0) continue;
            c->uses[v]++;
            int p = g->values[v].producer;
            float x;
            if ((p >= 0 && c->in_group[p]) || c->reg[v] >= 0 || (!c->const_inputs && const_scalar(g, v, &x)))
                continue;
            if (c->at.n_in >= KILN_PW_MAX_IN) return false;
            c->reg[v] = c->at.n_in;
            c->ins[c->at.n_in] = v;
            c->at.in_dtype[c->at.n_in++] = vinfo(g, v)->dtype;
        }
    }
    if (!c->at.n_in) return false; /* only constants: folding's job */
    c->busy = (1u << c->at.n_in) - 1;
    c->at.n_regs = c->at.n_in;
    /* outputs: values read outside the group or graph outputs */
    for (int k = 0; k < m; k++) {
        int v = g->nodes[members[k]].out[0];
        if (!is_member_output(g, members, m, v)) continue;
        if (c->at.n_out >= KILN_PW_MAX_OUT) return false;
        c->outs[c->at.n_out] = v;
        c->at.out_dtype[c->at.n_out++] = vinfo(g, v)->dtype;
    }
    for (int k = 0; k < m && !c->fail; k++) {
        const kiln_node *n = &g->nodes[members[k]];
        int r = emit_node(c, n);
        c->reg[n->out[0]] = r;
        release(c, n);
        if (c->uses[n->out[0]] == 0) { /* read by no group node: an output (or dead) */
            bool out = false;
            for (int j = 0; j < c->at.n_out; j++) out |= c->outs[j] == n->out[0];
            if (!out) drop_reg(c, r);
        }
    }
    if (c->fail || !c->at.n_out) return false;
    for (int j = 0; j < c->at.n_out; j++) c->at.out_reg[j] = c->reg[c->outs[j]];
    /* the inputs must broadcast to the group's shape (a constant folded
     * into the program could have carried a dim) */
    const kiln_tinfo *ip[KILN_PW_MAX_IN];
    for (int k = 0; k < c->at.n_in; k++) ip[k] = vinfo(g, c->ins[k]);
    kiln_tinfo b;
    memset(&b, 0, sizeof b);
    if (kiln__broadcast_shapes(NULL, c->at.n_in, ip, &b) != KILN_OK) {
        kiln__clear_error();
        return false;
    }
    return kiln__pat_same_shape(&b, vinfo(g, c->outs[0]));
}

/* Scalar constants are immediates, unless one of them carries a dim the
 * output needs (a [1,1,1] constant against [4] inputs): then inputs. */
static bool compile(pw_compiler *c, const int *members, int m) {
    c->const_inputs = false;
    if (compile_as(c, members, m)) return true;
    c->const_inputs = true;
    return compile_as(c, members, m);
}

/* ---- groups ------------------------------------------------------------------ */

typedef struct pw_pass {
    kiln_graph *g;
    int *group;    /* per node: its group (the index of its first node), -1 none */
    bool *in_u;    /* per node: in the union being tried */
    int *stamp;    /* per node: DFS visit mark */
    int *stack;
    int mark;
    int *members;
    int *last;     /* per group id: its last node (replace_groups) */
    pw_compiler c;
} pw_pass;

/* Whether node p (outside U) depends on a node of U; nodes before `lo` cannot. */
static bool depends_on_u(pw_pass *s, int p, int lo) {
    kiln_graph *g = s->g;
    int top = 0;
    s->mark++;
    s->stack[top++] = p;
    s->stamp[p] = s->mark;
    while (top) {
        int ni = s->stack[--top];
        const kiln_node *n = &g->nodes[ni];
        for (int i = 0; i < n->n_in; i++) {
            if (n->in[i] < 0) continue;
            int q = g->values[n->in[i]].producer;
            if (q < lo || q < 0 || g->nodes[q].dead || s->stamp[q] == s->mark) continue;
            if (s->in_u[q]) return true;
            s->stamp[q] = s->mark;
            s->stack[top++] = q;
        }
    }
    return false;
}

/* Gathers U (nodes with in_u set) into s->members, ascending; returns its size. */
static int gather(pw_pass *s, int lo, int hi) {
    int m = 0;
    for (int ni = lo; ni <= hi; ni++)
        if (s->in_u[ni]) s->members[m++] = ni;
    return m;
}

/* Whether U (members[0..m)) is convex and compiles. */
static bool union_ok(pw_pass *s, int m) {
    kiln_graph *g = s->g;
    int lo = s->members[0];
    for (int k = 0; k < m; k++) {
        const kiln_node *n = &g->nodes[s->members[k]];
        for (int i = 0; i < n->n_in; i++) {
            if (n->in[i] < 0) continue;
            int p = g->values[n->in[i]].producer;
            if (p >= lo && !s->in_u[p] && depends_on_u(s, p, lo)) return false;
        }
    }
    s->c.in_group = s->in_u;
    return compile(&s->c, s->members, m);
}

static void set_u(pw_pass *s, int gid, int hi, bool on) {
    for (int ni = gid; ni <= hi; ni++)
        if (s->group[ni] == gid) s->in_u[ni] = on;
}

/* Node ni joins the groups of its producers of the same shape, if it can. */
static void grow(pw_pass *s, int ni) {
    kiln_graph *g = s->g;
    const kiln_node *n = &g->nodes[ni];
    int cand[8], nc = 0;
    for (int i = 0; i < n->n_in; i++) {
        if (n->in[i] < 0) continue;
        int p = g->values[n->in[i]].producer;
        if (p < 0 || s->group[p] < 0 || !kiln__pat_same_shape(vinfo(g, n->in[i]), vinfo(g, n->out[0]))) continue;
        bool seen = false;
        for (int k = 0; k < nc; k++) seen |= cand[k] == s->group[p];
        if (!seen && nc < 8) cand[nc++] = s->group[p];
    }
    /* try all candidate groups together, then each alone (first that works) */
    for (int attempt = nc > 1 ? -1 : 0; attempt < nc; attempt++) {
        int lo = ni;
        for (int k = 0; k < nc; k++) {
            if (attempt >= 0 && k != attempt) continue;
            set_u(s, cand[k], ni, true);
            if (cand[k] < lo) lo = cand[k];
        }
        s->in_u[ni] = true;
        int m = gather(s, lo, ni);
        bool ok = union_ok(s, m);
        for (int k = 0; k < m; k++) s->in_u[s->members[k]] = false;
        if (!ok) continue;
        for (int k = 0; k < m; k++) s->group[s->members[k]] = lo;
        return;
    }
    s->group[ni] = ni; /* a group of its own */
}

/* Stable topological sort of the live nodes (producers first, else in
 * index order); dead nodes go last. */
static kiln_status toposort(kiln_graph *g, int *state, int *stack) {
    kiln__graph_link(g);
    kiln_node *nn = kiln__malloc(sizeof *nn * (size_t)(g->cap_nodes > g->n_nodes ? g->cap_nodes : g->n_nodes));
    if (!nn) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (pointwise fusion)");
    int k = 0;
    memset(state, 0, sizeof *state * (size_t)g->n_nodes);
    for (int root = 0; root < g->n_nodes; root++) {
        if (g->nodes[root].dead || state[root]) continue;
        int top = 0;
        stack[top++] = root;
        state[root] = 1;
        while (top) {
            int ni = stack[top - 1];
            const kiln_node *n = &g->nodes[ni];
            int next = -1;
            for (int i = 0; i < n->n_in && next < 0; i++) {
                int p = n->in[i] >= 0 ? g->values[n->in[i]].producer : -1;
                if (p < 0 || g->nodes[p].dead || state[p] == 2) continue;
                if (state[p] == 1) {
                    kiln__free(nn);
                    return KILN_FAIL(KILN_ERR_INTERNAL, "pointwise fusion made a cycle through node '%s'",
                                     g->nodes[p].name);
                }
                next = p;
            }
            if (next >= 0) {
                state[next] = 1;
                stack[top++] = next;
                continue;
            }
            state[ni] = 2;
            nn[k++] = *n;
            top--;
        }
    }
    for (int ni = 0; ni < g->n_nodes; ni++)
        if (g->nodes[ni].dead) nn[k++] = g->nodes[ni];
    kiln__free(g->nodes);
    g->nodes = nn;
    if (g->cap_nodes < g->n_nodes) g->cap_nodes = g->n_nodes;
    kiln__graph_link(g);
    return KILN_OK;
}

static kiln_status replace_groups(pw_pass *s, const kiln_optimize_opts *o, bool *changed) {
    kiln_graph *g = s->g;
    int n_nodes = g->n_nodes;
    /* each group's last node, in one pass (a scan per group took 4 s for
     * 200,000 one-node groups) */
    for (int ni = 0; ni < n_nodes; ni++)
        if (s->group[ni] >= 0) s->last[s->group[ni]] = ni;
    for (int gid = 0; gid < n_nodes; gid++) {
        if (s->group[gid] != gid) continue;
        int hi = s->last[gid];
        if (hi == gid) continue; /* one node */
        set_u(s, gid, hi, true);
        int m = gather(s, gid, hi);
        s->c.in_group = s->in_u;
        bool ok = compile(&s->c, s->members, m);
        set_u(s, gid, hi, false);
        if (!ok) continue;
        const kiln_pw_attrs *at = &s->c.at;
        if (!kiln__pat_supports(g, o->device, KILN_OP_Pointwise, at->n_in, s->c.ins, at->n_out, s->c.outs, at))
            continue;
        kiln_pw_attrs copy = *at;
        int ins[KILN_PW_MAX_IN], outs[KILN_PW_MAX_OUT];
        memcpy(ins, s->c.ins, sizeof ins);
        memcpy(outs, s->c.outs, sizeof outs);
        KILN_TRY(kiln__pat_replace(g, hi, KILN_OP_Pointwise, copy.n_in, ins, copy.n_out, outs, &copy, s->members, m));
        for (int k = 0; k < m; k++)
            if (s->members[k] != hi) g->nodes[s->members[k]].dead = true;
        *changed = true;
    }
    return KILN_OK;
}

kiln_status kiln__opt_pointwise(kiln_graph *g, const kiln_optimize_opts *o) {
    if (!kiln__pass_on(o, KILN_PASS_FUSE_POINTWISE)) return KILN_OK;
    kiln__graph_link(g);
    size_t nn = (size_t)g->n_nodes + 1, nv = (size_t)g->n_values + 1;
    pw_pass s = {.g = g, .c = {.g = g}};
    s.group = kiln__malloc(nn * sizeof *s.group);
    s.in_u = kiln__calloc(nn, sizeof *s.in_u);
    s.stamp = kiln__calloc(nn, sizeof *s.stamp);
    s.stack = kiln__malloc(nn * sizeof *s.stack);
    s.members = kiln__malloc(nn * sizeof *s.members);
    s.last = kiln__malloc(nn * sizeof *s.last);
    s.c.reg = kiln__malloc(nv * sizeof *s.c.reg);
    s.c.uses = kiln__malloc(nv * sizeof *s.c.uses);
    kiln_status st = KILN_OK;
    if (!s.group || !s.in_u || !s.stamp || !s.stack || !s.members || !s.last || !s.c.reg || !s.c.uses) {
        st = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory (pointwise fusion)");
        goto done;
    }
    for (int ni = 0; ni < g->n_nodes; ni++) {
        s.group[ni] = -1;
        if (eligible(g, &g->nodes[ni])) grow(&s, ni);
    }
    bool changed = false;
    st = replace_groups(&s, o, &changed);
    if (st == KILN_OK && changed) st = toposort(g, s.stamp, s.stack);
done:
    kiln__free(s.group);
    kiln__free(s.in_u);
    kiln__free(s.stamp);
    kiln__free(s.stack);
    kiln__free(s.members);
    kiln__free(s.last);
    kiln__free(s.c.reg);
    kiln__free(s.c.uses);
    return st;
}

/* ---- constants that repeat along their leading axes ------------------------ */

kiln_status kiln__opt_shrink_constants(kiln_graph *g, const kiln_optimize_opts *o) {
    if (!kiln__pass_on(o, KILN_PASS_SHRINK_CONSTANTS)) return KILN_OK;
    kiln__graph_link(g);
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        if (n->dead || n->n_in != 2 || n->n_out != 1 || !binary_opcode(n->op_id) || n->op_id == KILN_OP_PRelu)
            continue;
        for (int k = 0; k < 2; k++) {
            int c = n->in[k], x = n->in[1 - k], y = n->out[0];
            if (c < 0 || x < 0 || y < 0) continue;
            kiln_value *cv = &g->values[c];
            if (!(cv->flags & KILN_VALUE_CONST) || (cv->flags & (KILN_VALUE_INPUT | KILN_VALUE_OUTPUT)) ||
                cv->n_uses != 1)
                continue;
            /* x and the output have the constant's shape: a constant broadcast
             * over its leading axes gives the same output */
            const kiln_tinfo *ci = &cv->info;
            size_t es = kiln_dtype_size(ci->dtype);
            if (ci->rank < 2 || !es || !kiln__pat_same_shape(ci, &g->values[x].info) ||
                !kiln__pat_same_shape(ci, &g->values[y].info))
                continue;
            int lead = kiln__pat_repeated_lead_axes(cv->data, es, ci->rank, ci->dims);
            if (lead < 1) continue;
            int64_t dims[KILN_MAX_RANK];
            for (int i = 0; i < ci->rank; i++) dims[i] = i < lead ? 1 : ci->dims[i];
            KILN_TRY(kiln__value_set_const(cv, ci->dtype, ci->rank, dims, cv->data));
        }
    }
    return KILN_OK;
}
