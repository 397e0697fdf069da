/* plan.c -- activation memory planning.
 *
 * For one set of input shapes (and the memory each input is bound in), the
 * planner walks the plan's nodes in order as a run would, without running
 * the heavy ones:
 *   1. sizes: each node's output shapes are inferred from its inputs'
 *      exact shapes. Small values computed from constants and input shapes
 *      only (Shape -> Gather -> Concat chains feeding a Reshape) are
 *      evaluated with the CPU kernels, so the shapes that depend on them are
 *      known too. A value whose size depends on the data of an input or of
 *      an activation (NonZero...) stays unplanned: the run sizes it (the
 *      context's overflow buffers).
 *   2. live ranges, per memory (host / device): from the node that produces
 *      the value there (or the first node that needs a copy there) to the
 *      last node that reads it there (or that copies it to the other
 *      memory); graph outputs live to the end of the run. Outputs nobody
 *      reads and per-node workspaces live for their node only. A node whose
 *      op may write out[0] over in[0] (KILN_OP_FLAG_INPLACE) reuses in[0]'s
 *      block when this node is its last reader (host memory only).
 *   3. offsets: each block goes at the lowest aligned offset of its memory's
 *      arena that does not overlap a block live at the same time. Blocks are
 *      placed in a few orders (by size, by start, by duration); the smallest
 *      arena wins. A new block's offset comes from an interval tree (few
 *      live neighbours: a chain) or a treap by offset (many: outputs all
 *      live to the end), not a look at every block placed (placer; that
 *      was n^2). If it is above the lower bound, a bounded search for a
 *      layout within the bound follows (place_within). The result depends on
 *      the engine and the shapes only, so replays of a run see the same
 *      addresses.
 * The lower bound reported with a plan is the largest sum of the (aligned)
 * sizes of blocks live at one time: no placement of these blocks fits in
 * less. */
#include "backends/backend.h"
#include "runtime/engine.h"

#include <stdio.h>
#include <stdlib.h>

#define EVAL_MAX_BYTES 4096             /* largest value evaluated while planning */
#define EVAL_MAX_WORKSPACE (1u << 20)   /* and the most scratch it may take */

typedef struct plan_blk {
    size_t size;      /* aligned */
    int start, end;   /* node indices, inclusive; end == n_nodes: the end of the run */
    int mem;
    int64_t off;
    int into;         /* -1, or the block this one was merged into (see merge_block) */
} plan_blk;

typedef struct planner {
    const kiln_engine *e;
    const kiln_graph *g;
    kiln_mem_plan *p;
    kiln_tinfo *info;     /* per value: shape at these inputs; data if known */
    bool *exact;          /* per value: shape exactly known */
    void **eval;          /* per value: bytes evaluated while planning (owned) */
    int *first[2], *last[2]; /* per value and memory: first/last node needing it there, or -1 */
    int *origin;          /* per value: bit m set when the value is born in memory m */
    int *blk[2];          /* per value and memory: block index or -1; read through block_of */
    plan_blk *blocks;
    int n_blocks, cap_blocks;
    int *aux_blk;         /* per aux entry: block index or -1 */
} planner;

int kiln__node_mem(const kiln_engine *e, const kiln_node *n) {
    return (e->opts.device != KILN_DEVICE_CPU && n->device != KILN_DEVICE_CPU) ? KILN_MEM_DEV
                                                                                : KILN_MEM_HOST;
}

static size_t mem_align(int m) { return m == KILN_MEM_DEV ? KILN_ARENA_ALIGN_DEV : KILN_ARENA_ALIGN_HOST; }

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

void kiln__plan_free(kiln_mem_plan *p) {
    if (!p) return;
    kiln__free(p->sig);
    kiln__free(p->off[0]);
    kiln__free(p->off[1]);
    kiln__free(p->nbytes);
    kiln__free(p->aux_first);
    kiln__free(p->aux_off);
    kiln__free(p->aux_bytes);
    kiln__free(p);
}

static bool dims_exact(const kiln_tinfo *t) {
    if (t->rank < 0 || t->rank > KILN_MAX_RANK) return false;
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i] < 0) return false;
    return true;
}

/* Bytes of an exactly known shape; false if unknown or too large. */
static bool exact_bytes(const kiln_tinfo *t, size_t *nb) {
    *nb = 0;
    if (!dims_exact(t)) return false;
    *nb = kiln__value_nbytes(t);
    return *nb > 0 || kiln__numel(t->rank, t->dims) == 0;
}

/* Runs node n's reference kernel on inputs whose data is known (c: its
 * call, inferred), keeping its (small) outputs as known data. Failure only
 * means "not known". */
static void eval_node(planner *P, const kiln_node *n, kiln_call *c, bool shape_only) {
    kiln_tensor *out_t = c->out_t;
    if (shape_only)
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] >= 0) c->in_t[i].data = NULL;
    bool ok = kiln__call_run_host(c, NULL, EVAL_MAX_WORKSPACE) == KILN_OK; /* outputs NULL when not */
    for (int i = 0; i < n->n_out; i++) {
        int v = n->out[i];
        if (ok && v >= 0 && !P->eval[v]) {
            P->eval[v] = out_t[i].data;
            P->info[v].data = out_t[i].data;
        } else {
            kiln__aligned_free(out_t[i].data);
        }
    }
    kiln__clear_error();
}

/* Step 1: the shape (and bytes) of every value, node by node. */
static void plan_sizes(planner *P) {
    const kiln_graph *g = P->g;
    kiln_mem_plan *p = P->p;
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        int aux = p->aux_first[ni];
        kiln_call c;
        if (kiln__node_check_inputs(n) != KILN_OK || kiln__call_begin(&c, g, n) != KILN_OK) {
            kiln__clear_error();
            for (int i = 0; i < n->n_out; i++)
                if (n->out[i] >= 0) P->exact[n->out[i]] = false;
            continue;
        }
        bool all_exact = true, all_data = true;
        for (int i = 0; i < n->n_in; i++) {
            int v = n->in[i];
            if (v < 0) continue;
            kiln__call_input(&c, i, &P->info[v], (void *)P->info[v].data);
            all_exact = all_exact && P->exact[v];
            all_data = all_data && P->info[v].data;
        }
        bool inferred = kiln__call_infer(&c, all_exact && all_data, NULL, false) == KILN_OK;
        kiln__clear_error();
        kiln_tinfo *outs = c.out;
        bool outs_exact = inferred;
        size_t out_bytes = 0;
        for (int i = 0; i < n->n_out; i++) {
            int v = n->out[i];
            size_t nb = 0;
            bool ex = inferred && exact_bytes(&outs[i], &nb);
            outs[i].data = NULL;
            outs_exact = outs_exact && ex;
            out_bytes += nb;
            if (v < 0) {
                p->aux_bytes[aux + i] = ex ? nb : 0;
                p->aux_off[aux + i] = ex ? 0 : -1; /* -1: the run sizes it */
                continue;
            }
            if (inferred && outs[i].rank >= 0) P->info[v] = outs[i];
            P->exact[v] = ex;
            p->nbytes[v] = ex ? nb : 0;
        }
        /* workspace: host nodes only (device backends keep their own), and
         * only of a node whose infer accepted it: an op's workspace() may
         * assume the attributes and shapes infer checks (a damaged engine's
         * zero stride would divide by zero there); such a node fails at run */
        int wsi = aux + n->n_out;
        p->aux_off[wsi] = -1;
        if (kiln__node_mem(P->e, n) == KILN_MEM_HOST && all_exact && inferred) {
            p->aux_bytes[wsi] = kiln__kernel_workspace(kiln__backend_kernel(kiln__backend_for(n->device), n), &c.ia);
            p->aux_off[wsi] = p->aux_bytes[wsi] ? 0 : -1;
            if (p->aux_bytes[wsi] > p->max_workspace) {
                p->max_workspace = p->aux_bytes[wsi];
                p->max_workspace_node = ni;
            }
        }
        bool shape_only = (n->op->flags & KILN_OP_FLAG_SHAPE_ONLY) != 0;
        if (outs_exact && out_bytes <= EVAL_MAX_BYTES && n->op->cpu &&
            !(n->op->flags & KILN_OP_FLAG_NO_FOLD) && all_exact && (all_data || shape_only))
            eval_node(P, n, &c, shape_only && !all_data);
        kiln__call_end(&c);
    }
}

int kiln__node_inplace_input(const kiln_engine *e, const kiln_node *n) {
    /* another input: as the node's kernel says (host memory only) */
    int k = (n->op->flags & KILN_OP_FLAG_INPLACE) ? 0
                                                   : kiln__backend_inplace_input(kiln__backend_for(n->device), n);
    if (k < 0 || k >= n->n_in || n->n_out < 1) return -1;
    if (kiln__node_mem(e, n) != KILN_MEM_HOST) return -1;
    return k;
}

static void need(planner *P, int v, int m, int t) {
    if (P->first[m][v] < 0) P->first[m][v] = t;
    P->last[m][v] = t;
}

static kiln_status add_block(planner *P, int m, size_t bytes, int start, int end, int *out) {
    /* (sizes come from engine files too: keep align_up and the layout's sums
     * far from overflow) */
    if (bytes > (size_t)KILN_MAX_TENSOR_BYTES)
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY,
                         "a tensor or workspace of %zu bytes is more than kiln plans (256 TiB)",
                         bytes);
    KILN_TRY(kiln__grow((void **)&P->blocks, &P->cap_blocks, P->n_blocks + 1, sizeof *P->blocks));
    plan_blk *b = &P->blocks[P->n_blocks];
    b->size = align_up(bytes, mem_align(m));
    b->start = start;
    b->end = end;
    b->mem = m;
    b->off = 0;
    b->into = -1;
    *out = P->n_blocks++;
    return KILN_OK;
}

/* The block value v lives in, in memory m, or -1. Several values share a
 * block once views and in-place nodes are merged (merge_block), and a block
 * may be merged again after values were pointed at it, so P->blk holds a
 * block that may since have been merged: follow `into` to the block that
 * is still laid out (and shorten the path for the next lookup). */
static int block_of(planner *P, int m, int v) {
    int b = P->blk[m][v];
    while (b >= 0 && P->blocks[b].into >= 0) b = P->blocks[b].into;
    P->blk[m][v] = b;
    return b;
}

/* Merges block `from` into block `to` (which lives at least as long): every
 * value of `from` (not only the one being merged: a view of it, say, merged
 * earlier) now lives in `to`, whose live range grows to cover them. */
static void merge_block(planner *P, int from, int to) {
    if (P->blocks[from].end > P->blocks[to].end) P->blocks[to].end = P->blocks[from].end;
    P->blocks[from].size = 0; /* unused: its values live in `to` */
    P->blocks[from].start = -1;
    P->blocks[from].into = to;
}

/* Step 2: live ranges and blocks. */
static kiln_status plan_blocks(planner *P) {
    const kiln_graph *g = P->g;
    kiln_mem_plan *p = P->p;
    int end_of_run = g->n_nodes;
    for (int v = 0; v < g->n_values; v++) {
        P->origin[v] = 0;
        if (g->values[v].flags & KILN_VALUE_CONST) P->origin[v] = 3;
        if (g->values[v].producer >= 0 && g->values[v].producer < g->n_nodes)
            P->origin[v] = 1 << kiln__node_mem(P->e, &g->nodes[g->values[v].producer]);
    }
    for (int k = 0; k < g->n_inputs; k++) P->origin[g->inputs[k]] = 1 << p->sig[k].mem;
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        int m = kiln__node_mem(P->e, n);
        for (int i = 0; i < n->n_in; i++) {
            int v = n->in[i];
            if (v < 0) continue;
            need(P, v, m, ni);
            if (m == KILN_MEM_DEV && i < 32 && (n->op->host_inputs & (1u << i))) need(P, v, KILN_MEM_HOST, ni);
        }
    }
    for (int v = 0; v < g->n_values; v++) {
        const kiln_value *val = &g->values[v];
        if (val->flags & KILN_VALUE_CONST) continue;
        bool out = (val->flags & KILN_VALUE_OUTPUT) != 0;
        for (int m = 0; m < 2; m++) {
            bool born = (P->origin[v] >> m) & 1;
            int start;
            if (born && val->producer >= 0) start = val->producer;
            else if (!born && P->first[m][v] >= 0) start = P->first[m][v];
            else continue; /* an input bound here, or never needed here */
            if (!P->exact[v]) {
                p->n_dynamic += born;
                continue;
            }
            int end = start > P->last[m][v] ? start : P->last[m][v];
            /* the copy to the other memory is made from this one */
            int other = 1 - m;
            if (!((P->origin[v] >> other) & 1) && P->first[other][v] > end) end = P->first[other][v];
            if (out) end = end_of_run;
            KILN_TRY(add_block(P, m, p->nbytes[v], start, end, &P->blk[m][v]));
        }
    }
    /* views: out[0] of a Reshape/Flatten/Squeeze/Unsqueeze/Identity is in[0]'s
     * bytes, so it takes in[0]'s block (extended to out[0]'s last use) in
     * either memory, and the kernel's copy becomes a no-op (both the CPU and
     * the CUDA kernels skip a copy onto itself). No node writes into a
     * block but its producer and an in-place node that reads the block's
     * values last (below), so readers of in[0] after this node still see
     * the same bytes; the in-place merge below sees the extended end. */
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        if (!(n->op->flags & KILN_OP_FLAG_VIEW) || n->n_in < 1 || n->n_out < 1) continue;
        int m = kiln__node_mem(P->e, n);
        int v = n->in[0], w = n->out[0];
        if (v < 0 || w < 0 || v == w) continue;
        int bv = block_of(P, m, v), bw = block_of(P, m, w);
        if (bv < 0 || bw < 0 || bv == bw || P->blocks[bw].start != ni) continue;
        if ((g->values[v].flags | g->values[w].flags) & (KILN_VALUE_OUTPUT | KILN_VALUE_INPUT)) continue;
        if (p->nbytes[v] != p->nbytes[w]) continue;
        merge_block(P, bw, bv);
        p->n_views++;
    }
    /* in place: out[0] takes in[k]'s block when this node reads in[k] last
     * (k = 0 for KILN_OP_FLAG_INPLACE ops, else the kernel's inplace_input,
     * e.g. a FusedConv's residual) */
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        int k = kiln__node_inplace_input(P->e, n);
        if (k < 0) continue;
        int v = n->in[k], w = n->out[0];
        if (v < 0 || w < 0 || v == w) continue;
        int bv = block_of(P, KILN_MEM_HOST, v), bw = block_of(P, KILN_MEM_HOST, w);
        if (bv < 0 || bw < 0 || P->blocks[bv].end != ni || P->blocks[bw].start != ni) continue;
        if (g->values[v].flags & (KILN_VALUE_OUTPUT | KILN_VALUE_INPUT)) continue;
        if (p->nbytes[v] != p->nbytes[w]) continue;
        /* another input in the same block (v itself, or a view of it or of
         * what v views) is read while out[0] is written: not in place */
        bool twice = false;
        for (int i = 0; i < n->n_in; i++)
            twice = twice || (i != k && n->in[i] >= 0 && block_of(P, KILN_MEM_HOST, n->in[i]) == bv);
        if (twice) continue;
        /* w's block may hold views of w already (the loop above): they
         * move with it (before this was a merge of blocks, they were left
         * in w's emptied block, at an offset no block reserved) */
        merge_block(P, bw, bv);
    }
    for (int ni = 0; ni < g->n_nodes; ni++) {
        const kiln_node *n = &g->nodes[ni];
        int m = kiln__node_mem(P->e, n);
        int aux = p->aux_first[ni];
        for (int i = 0; i <= n->n_out; i++) {
            P->aux_blk[aux + i] = -1;
            if (p->aux_off[aux + i] < 0) continue;
            if (i < n->n_out && n->out[i] >= 0) continue;
            KILN_TRY(add_block(P, i == n->n_out ? KILN_MEM_HOST : m, p->aux_bytes[aux + i], ni, ni,
                               &P->aux_blk[aux + i]));
        }
    }
    return KILN_OK;
}

/* Step 3: offsets. */
static int by_key(const plan_blk *a, const plan_blk *b, int mode, int ia, int ib) {
    long long ka[2], kb[2];
    long long da = a->end - a->start, db = b->end - b->start;
    switch (mode) {
    case 0: ka[0] = -(long long)a->size, kb[0] = -(long long)b->size;
            ka[1] = a->start, kb[1] = b->start; break;
    case 1: ka[0] = a->start, kb[0] = b->start;
            ka[1] = -(long long)a->size, kb[1] = -(long long)b->size; break;
    default: ka[0] = -da, kb[0] = -db;
             ka[1] = -(long long)a->size, kb[1] = -(long long)b->size; break;
    }
    for (int k = 0; k < 2; k++)
        if (ka[k] != kb[k]) return ka[k] < kb[k] ? -1 : 1;
    return ia < ib ? -1 : ia > ib;
}

/* A stable merge sort of block indices by the key of `mode`. */
static void sort_idx(const plan_blk *blocks, int *idx, int *tmp, int n, int mode) {
    for (int w = 1; w < n; w *= 2)
        for (int lo = 0; lo < n; lo += 2 * w) {
            int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = by_key(&blocks[idx[j]], &blocks[idx[i]], mode, idx[j], idx[i]) < 0 ? idx[j++]
                                                                                           : idx[i++];
            while (i < mid) tmp[k++] = idx[i++];
            while (j < hi) tmp[k++] = idx[j++];
            memcpy(idx + lo, tmp + lo, (size_t)(hi - lo) * sizeof *idx);
        }
}

/* The lowest offset of block b that overlaps none of the blocks list[0..n)
 * live with it, the list sorted by offset: the first gap that fits, where
 * `at` only grows past the blocks below it. The result is the lowest such
 * offset whatever the order of blocks at one offset, so any list of (at
 * least) the blocks live with b, by offset, gives the same. */
static size_t first_fit(const plan_blk *blocks, const plan_blk *b, const int *list, int n,
                        const int64_t *offs, uint64_t *work) {
    size_t at = 0;
    int r = 0;
    for (; r < n; r++) {
        const plan_blk *o = &blocks[list[r]];
        if (o->size == 0 || o->end < b->start || o->start > b->end) continue;
        size_t oo = (size_t)offs[list[r]];
        if (at + b->size <= oo) break;
        if (oo + o->size > at) at = oo + o->size;
    }
    *work += (uint64_t)r + 1;
    return at;
}

/* A stable merge sort of block indices a[0..n) by offset; tmp: n entries. */
static void sort_by_off(int *a, int *tmp, int n, const int64_t *offs, uint64_t *work) {
    for (int w = 1; w < n; w *= 2) {
        for (int lo = 0; lo < n; lo += 2 * w) {
            int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int i = lo, j = mid, k = lo;
            while (i < mid && j < hi) tmp[k++] = offs[a[j]] < offs[a[i]] ? a[j++] : a[i++];
            while (i < mid) tmp[k++] = a[i++];
            while (j < hi) tmp[k++] = a[j++];
            memcpy(a + lo, tmp + lo, (size_t)(hi - lo) * sizeof *a);
        }
        *work += (uint64_t)n;
    }
}

/* The blocks placed so far, for finding a new block's offset without
 * looking at every one of them (n^2, issue 20). Two structures:
 *  - a static interval tree over all blocks ordered by start (the node of
 *    positions [lo, hi) is (lo + hi) / 2), each node with the latest end of
 *    a placed block below it: a new block's k live neighbours are found in
 *    O((k + 1) log n), sorted by offset and looked through by first_fit.
 *    That is a chain's case (a few neighbours each).
 *  - a treap of the placed blocks by offset, each subtree knowing the
 *    range of its blocks' starts and ends, its lowest offset, its highest
 *    end (reach) and a bound on the gaps between its blocks: the first-fit
 *    look through all placed blocks in offset order (first_fit's) skips a
 *    subtree none of whose blocks is live with the new one, and passes over
 *    one whose blocks all are and leave no gap it fits in, in one step.
 *    That is the case of many neighbours (n outputs all live to the end:
 *    each new block goes above the others, found at the root), and it never
 *    looks at more blocks than the full look did.
 * Which one: the number of live neighbours, counted first (two Fenwick
 * trees over the steps: placed blocks that end before the new one starts,
 * or start after it ends), against what sorting them would cost. All give
 * first_fit's offset over all placed blocks (-DKILN_PLAN_CHECK compares). */
/* A placed block's node in the treap (placer): its children (-1: none)
 * and its subtree's summary (treap_pull). */
typedef struct tnode {
    int left, right;
    int min_start, max_start, min_end, max_end;
    int64_t lo_off, reach, gap;
} tnode;

typedef struct placer {
    const plan_blk *blocks;
    const int64_t *offs;
    int n, n_steps;
    const int *by_start; /* block indices by start */
    const int *pos;      /* per block: its position in by_start */
    int *smax;           /* per position: the latest end of a placed block below it, or -1 */
    bool *in;            /* per position: its block is placed */
    int *hits, n_hits, max_hits; /* the live neighbours found */
    long budget;                 /* tree nodes left to look at for them */
    int *fw_start, *fw_end;      /* Fenwick trees over steps 0..n_steps: placed blocks by start, end */
    int n_placed, n_counted, n_treap; /* blocks placed; of them, those counted, in the treap */
    int root;   /* the treap by offset (-1: empty) */
    tnode *t;   /* per block: its node */
    uint32_t seed;
    int *tmp;
    uint64_t work;
} placer;

/* Adds to P->hits the placed blocks at positions [lo, hi) live in steps
 * s..e; false when they are more than P->max_hits (or looking costs as
 * much). */
static bool live_with(placer *P, int lo, int hi, int s, int e) {
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        P->work++;
        if (--P->budget < 0) return false;
        if (P->smax[mid] < s) return true;
        if (!live_with(P, lo, mid, s, e)) return false;
        const plan_blk *o = &P->blocks[P->by_start[mid]];
        if (o->start > e) return true;
        if (P->in[mid] && o->end >= s) {
            if (P->n_hits == P->max_hits) return false;
            P->hits[P->n_hits++] = P->by_start[mid];
        }
        lo = mid + 1;
    }
    return true;
}

static void fw_add(int *fw, int n, int i, uint64_t *work) {
    for (i++; i <= n; i += i & -i, ++*work) fw[i]++;
}

/* Entries at 0..i (i < 0: none). */
static int fw_count(const int *fw, int i, uint64_t *work) {
    int c = 0;
    for (i++; i > 0; i -= i & -i, ++*work) c += fw[i];
    return c;
}

/* Placed blocks live in steps s..e: all but those that end before s and
 * those that start after e (no block does both). */
static int count_live(placer *P, int s, int e) {
    return fw_count(P->fw_start, e, &P->work) - fw_count(P->fw_end, s - 1, &P->work);
}

/* Block b's priority in the treap: a shuffle of the block indices, each
 * layout its own (P->seed: an engine file's author could otherwise order
 * its blocks so that the treap is one long path, n^2 and a deep
 * recursion; the offsets do not depend on the treap's shape). */
static uint32_t treap_prio(const placer *P, int b) {
    uint32_t x = ((uint32_t)b * 0x9E3779B9u) ^ P->seed;
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    return x;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* x's ranges of starts and ends widened by child c's. */
static void treap_span(tnode *x, const tnode *c) {
    if (c->min_start < x->min_start) x->min_start = c->min_start;
    if (c->max_start > x->max_start) x->max_start = c->max_start;
    if (c->min_end < x->min_end) x->min_end = c->min_end;
    if (c->max_end > x->max_end) x->max_end = c->max_end;
}

/* Block t's subtree summary from its children's. gap bounds, from above,
 * each block's offset less the highest end of the blocks before it in the
 * subtree (the first block has none: not counted). */
static void treap_pull(placer *P, int t) {
    tnode *x = &P->t[t];
    const plan_blk *b = &P->blocks[t];
    int64_t off = P->offs[t], top = off + (int64_t)b->size;
    x->min_start = x->max_start = b->start;
    x->min_end = x->max_end = b->end;
    int64_t gap = INT64_MIN, reach = top;
    x->lo_off = off;
    if (x->left >= 0) {
        const tnode *l = &P->t[x->left];
        treap_span(x, l);
        x->lo_off = l->lo_off;
        gap = max64(l->gap, off - l->reach);
        reach = max64(l->reach, top);
    }
    if (x->right >= 0) {
        const tnode *r = &P->t[x->right];
        treap_span(x, r);
        gap = max64(gap, max64(r->lo_off - reach, r->gap));
        reach = max64(reach, r->reach);
    }
    x->gap = gap;
    x->reach = reach;
}

/* The treap's order: by offset, then block index (a strict order: blocks
 * at one offset, which are many, would make a chain otherwise). */
static bool treap_before(const placer *P, int a, int b) {
    return P->offs[a] < P->offs[b] || (P->offs[a] == P->offs[b] && a < b);
}

/* Splits subtree t into blocks before block b (*l) and the rest (*r). */
static void treap_split(placer *P, int t, int b, int *l, int *r) {
    if (t < 0) {
        *l = *r = -1;
        return;
    }
    P->work++;
    if (treap_before(P, t, b)) {
        treap_split(P, P->t[t].right, b, &P->t[t].right, r);
        *l = t;
    } else {
        treap_split(P, P->t[t].left, b, l, &P->t[t].left);
        *r = t;
    }
    treap_pull(P, t);
}

static int treap_insert(placer *P, int t, int b) {
    if (t < 0) return b;
    P->work++;
    if (treap_prio(P, b) > treap_prio(P, t)) {
        treap_split(P, t, b, &P->t[b].left, &P->t[b].right);
        treap_pull(P, b);
        return b;
    }
    if (treap_before(P, b, t)) P->t[t].left = treap_insert(P, P->t[t].left, b);
    else P->t[t].right = treap_insert(P, P->t[t].right, b);
    treap_pull(P, t);
    return t;
}

/* first_fit's look through subtree t (in offset order) for block b, `at`
 * the lowest offset clear of the blocks before it: true when b fits at
 * *at below one of them, else *at is past those live with b. */
static bool treap_fit(placer *P, int t, const plan_blk *b, int64_t *at) {
    while (t >= 0) {
        P->work++;
        if (P->t[t].min_start > b->end || P->t[t].max_end < b->start) return false; /* none live */
        int64_t sz = (int64_t)b->size;
        if (P->t[t].max_start <= b->end && P->t[t].min_end >= b->start) { /* all live */
            if (*at + sz <= P->t[t].lo_off) return true;
            if (P->t[t].gap < sz) {
                *at = max64(*at, P->t[t].reach);
                return false;
            }
        }
        if (treap_fit(P, P->t[t].left, b, at)) return true;
        const plan_blk *o = &P->blocks[t];
        if (o->end >= b->start && o->start <= b->end) {
            if (*at + sz <= P->offs[t]) return true;
            *at = max64(*at, P->offs[t] + (int64_t)o->size);
        }
        t = P->t[t].right;
    }
    return false;
}

static void placer_add(placer *P, int b) {
    int p = P->pos[b], lo = 0, hi = P->n, end = P->blocks[b].end;
    P->in[p] = true;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (P->smax[mid] < end) P->smax[mid] = end;
        if (mid == p) break;
        if (p < mid) hi = mid;
        else lo = mid + 1;
    }
    P->n_placed++;
}

/* The counts and the treap learn of the blocks placed since they were last
 * asked (idx[0..q) are placed): a chain seldom asks. */
static void placer_sync_counts(placer *P, const int *idx, int q) {
    for (; P->n_counted < q; P->n_counted++) {
        const plan_blk *b = &P->blocks[idx[P->n_counted]];
        if (!b->size) continue;
        fw_add(P->fw_start, P->n_steps + 1, b->start, &P->work);
        fw_add(P->fw_end, P->n_steps + 1, b->end, &P->work);
    }
}

static void placer_sync_treap(placer *P, const int *idx, int q) {
    for (; P->n_treap < q; P->n_treap++) {
        int b = idx[P->n_treap];
        if (!P->blocks[b].size) continue;
        P->t[b].left = P->t[b].right = -1;
        treap_pull(P, b);
        P->root = treap_insert(P, P->root, b);
    }
}

#ifdef KILN_PLAN_CHECK
/* The placed blocks of subtree t in offset order, from list[*k]. */
static void treap_list(const placer *P, int t, int *list, int *k) {
    for (; t >= 0; t = P->t[t].right) {
        treap_list(P, P->t[t].left, list, k);
        list[(*k)++] = t;
    }
}
#endif

/* Places the blocks in order `idx`, each at the lowest offset clear of the
 * blocks placed before it that live at the same time; returns the arena
 * size. P: scratch for the n blocks (by_start, pos set). */
static size_t place(placer *P, const int *idx, int64_t *offs) {
    const plan_blk *blocks = P->blocks;
    int n = P->n;
    size_t arena = 0;
    P->offs = offs;
    P->n_placed = P->n_counted = P->n_treap = 0;
    P->root = -1;
    for (int q = 0; q < n; q++) {
        P->smax[q] = -1;
        P->in[q] = false;
    }
    memset(P->fw_start, 0, ((size_t)P->n_steps + 2) * sizeof *P->fw_start);
    memset(P->fw_end, 0, ((size_t)P->n_steps + 2) * sizeof *P->fw_end);
    for (int q = 0; q < n; q++) {
        const plan_blk *b = &blocks[idx[q]];
        /* a sort of k neighbours costs about k log2 k: list them while
         * that is below a look through all; a quick look first, then, if
         * they are more, a count */
        int lg = 1;
        while (lg < 31 && (1 << lg) < P->n_placed) lg++;
        P->n_hits = 0;
        P->max_hits = P->n_placed / lg + 1;
        P->budget = 4L * lg + 16;
        bool listed = live_with(P, 0, n, b->start, b->end);
        if (!listed) {
            placer_sync_counts(P, idx, q);
            if (count_live(P, b->start, b->end) <= P->max_hits) {
                P->n_hits = 0;
                P->budget = 2L * P->n_placed + 64;
                listed = live_with(P, 0, n, b->start, b->end);
            }
        }
        size_t at;
        if (listed) {
            sort_by_off(P->hits, P->tmp, P->n_hits, offs, &P->work);
            at = first_fit(blocks, b, P->hits, P->n_hits, offs, &P->work);
        } else {
            int64_t a = 0;
            placer_sync_treap(P, idx, q);
            treap_fit(P, P->root, b, &a);
            at = (size_t)a;
        }
#ifdef KILN_PLAN_CHECK
        /* debug builds: the old look through every placed block agrees */
        int k = 0;
        placer_sync_treap(P, idx, q);
        treap_list(P, P->root, P->hits, &k);
        if (first_fit(blocks, b, P->hits, k, offs, &P->work) != at) {
            fprintf(stderr, "kiln: plan check: block %d placed at %zu, a full look says otherwise\n", idx[q], at);
            abort();
        }
#endif
        offs[idx[q]] = (int64_t)at;
        if (b->size) placer_add(P, idx[q]);
        if (at + b->size > arena) arena = at + b->size;
    }
    return arena;
}

/* Removes block `b` from `placed` (n entries). */
static void unplace(int *placed, int n, int b) {
    for (int r = 0; r < n; r++)
        if (placed[r] == b) {
            memmove(placed + r, placed + r + 1, (size_t)(n - r - 1) * sizeof *placed);
            return;
        }
}

/* Candidate c of block b: the low or high end of the c/2-th gap, below
 * `target`, left by the placed blocks live with it; -1 if none. */
static int64_t candidate(const plan_blk *blocks, const plan_blk *b, const int *placed, int n_placed,
                         const int64_t *offs, size_t target, int c) {
    size_t g0 = 0;
    int seen = 0;
    for (int r = 0; r <= n_placed; r++) {
        size_t g1 = target, o_end = 0;
        if (r < n_placed) {
            const plan_blk *o = &blocks[placed[r]];
            if (o->size == 0 || o->end < b->start || o->start > b->end) continue;
            g1 = (size_t)offs[placed[r]];
            o_end = g1 + o->size;
            if (g1 > target) g1 = target;
        }
        if (g1 >= g0 && g1 - g0 >= b->size) {
            if (seen++ == c) return (int64_t)g0;
            if (g1 - b->size != g0 && seen++ == c) return (int64_t)(g1 - b->size);
        }
        if (o_end > g0) g0 = o_end;
    }
    return -1;
}

/* Places the blocks in order `idx` (by start) all below `target`: each at an
 * end of a gap left by the blocks live with it, backtracking when one fits
 * nowhere, for at most `budget` steps. Blocks live at the same time are
 * neighbours in this order, so a layout the greedy orders miss (a large
 * scratch block that must sit high so that the next ones fit) is usually
 * found without much backtracking. True when offs[] holds such a layout. */
static bool place_within(const plan_blk *blocks, const int *idx, int n, size_t target, long budget,
                         int *placed, int64_t *offs, int *next) {
    int n_placed = 0, k = 0;
    if (n) next[0] = 0;
    while (k < n) {
        if (budget-- <= 0) return false;
        const plan_blk *b = &blocks[idx[k]];
        int64_t at = candidate(blocks, b, placed, n_placed, offs, target, next[k]);
        if (at < 0) {
            if (k == 0) return false;
            k--; /* back: the previous block tries its next candidate */
            unplace(placed, n_placed--, idx[k]);
            continue;
        }
        next[k]++;
        offs[idx[k]] = at;
        int pos = 0;
        while (pos < n_placed && offs[placed[pos]] <= at) pos++;
        memmove(placed + pos + 1, placed + pos, (size_t)(n_placed - pos) * sizeof *placed);
        placed[pos] = idx[k];
        n_placed++;
        if (++k < n) next[k] = 0;
    }
    return true;
}

/* Lays out blocks[0..n) (one memory; live within steps 0..n_steps):
 * offsets into blocks[].off, the arena size and the lower bound. */
static kiln_status layout(plan_blk *blocks, int n, int n_steps, size_t *arena, size_t *lower,
                          uint64_t *work) {
    size_t cnt = (size_t)n + 1;
    int *idx = kiln__malloc(cnt * sizeof *idx), *tmp = kiln__malloc(cnt * sizeof *tmp);
    int *placed = kiln__malloc(cnt * sizeof *placed), *next = kiln__malloc(cnt * sizeof *next);
    int64_t *offs = kiln__malloc(cnt * sizeof *offs), *best = kiln__malloc(cnt * sizeof *best);
    int64_t *live = kiln__calloc((size_t)n_steps + 2, sizeof *live);
    int *by_start = kiln__malloc(cnt * sizeof *by_start), *pos = kiln__malloc(cnt * sizeof *pos);
    size_t steps = (size_t)n_steps + 2;
    placer P = {.blocks = blocks, .n = n, .n_steps = n_steps, .by_start = by_start, .pos = pos,
                .smax = kiln__malloc(cnt * sizeof *P.smax), .in = kiln__malloc(cnt * sizeof *P.in),
                .hits = kiln__malloc(cnt * sizeof *P.hits), .tmp = tmp,
                .fw_start = kiln__malloc(steps * sizeof *P.fw_start),
                .fw_end = kiln__malloc(steps * sizeof *P.fw_end),
                .t = kiln__malloc(cnt * sizeof *P.t)};
    kiln_status s = KILN_OK;
    P.seed = (uint32_t)(uintptr_t)&P ^ (uint32_t)(uint64_t)(kiln__now_us() * 1e3);
    *arena = *lower = 0;
    if (!idx || !tmp || !placed || !next || !offs || !best || !live || !by_start || !pos || !P.smax ||
        !P.in || !P.hits || !P.fw_start || !P.fw_end || !P.t) {
        s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory planning activation memory");
        goto done;
    }
    /* lower bound: the most bytes live at one time (the total bounds every
     * sum below) */
    uint64_t total = 0;
    for (int q = 0; q < n; q++)
        if ((total += blocks[q].size) > ((uint64_t)1 << 62)) {
            s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "activation memory of over 2^62 bytes");
            goto done;
        }
    for (int q = 0; q < n; q++) {
        idx[q] = q;
        live[blocks[q].start] += (int64_t)blocks[q].size;
        live[blocks[q].end + 1] -= (int64_t)blocks[q].size;
    }
    int64_t run = 0, peak = 0;
    for (int t = 0; t <= n_steps; t++) {
        run += live[t];
        if (run > peak) peak = run;
    }
    *lower = (size_t)peak;
    if (n <= 0) goto done;
    for (int q = 0; q < n; q++) by_start[q] = q;
    sort_idx(blocks, by_start, tmp, n, 1);
    for (int q = 0; q < n; q++) pos[by_start[q]] = q;
    size_t best_arena = SIZE_MAX;
    for (int mode = 0; mode < 3; mode++) {
        sort_idx(blocks, idx, tmp, n, mode);
        size_t a = place(&P, idx, offs);
        if (a < best_arena) {
            best_arena = a;
            memcpy(best, offs, (size_t)n * sizeof *best);
        }
    }
    /* not at the bound: search for a layout within it, else halfway to the
     * greedy result, in bounded work (steps x blocks) */
    long budget = 4L * n + 10000;
    if (budget > 100000000L / n) budget = 100000000L / n;
    size_t targets[2] = {*lower, *lower + (best_arena - *lower) / 2};
    for (int t = 0; t < 2 && best_arena > *lower && budget >= n; t++) {
        sort_idx(blocks, idx, tmp, n, 1);
        if (!place_within(blocks, idx, n, targets[t], budget, placed, offs, next)) continue;
        best_arena = 0;
        for (int q = 0; q < n; q++)
            if ((size_t)offs[q] + blocks[q].size > best_arena) best_arena = (size_t)offs[q] + blocks[q].size;
        memcpy(best, offs, (size_t)n * sizeof *best);
        break;
    }
    *arena = best_arena;
    for (int q = 0; q < n; q++) blocks[q].off = best[q];
done:
    kiln__free(idx);
    kiln__free(tmp);
    kiln__free(placed);
    kiln__free(next);
    kiln__free(offs);
    kiln__free(best);
    kiln__free(live);
    kiln__free(by_start);
    kiln__free(pos);
    kiln__free(P.smax);
    kiln__free(P.in);
    kiln__free(P.hits);
    kiln__free(P.fw_start);
    kiln__free(P.fw_end);
    kiln__free(P.t);
    if (work) *work += P.work;
    return s;
}

kiln_status kiln__plan_layout(int n, const size_t *size, const int *start, const int *end, int n_steps,
                              int64_t *offs, size_t *arena, size_t *lower, uint64_t *work) {
    plan_blk *b = kiln__calloc((size_t)n + 1, sizeof *b);
    if (!b) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory planning activation memory");
    for (int q = 0; q < n; q++) {
        if (start[q] < 0 || end[q] < start[q] || end[q] > n_steps) {
            kiln__free(b);
            return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "block %d: live range %d..%d outside 0..%d", q,
                             start[q], end[q], n_steps);
        }
        b[q] = (plan_blk){.size = size[q], .start = start[q], .end = end[q]};
    }
    if (work) *work = 0;
    kiln_status s = layout(b, n, n_steps, arena, lower, work);
    for (int q = 0; q < n && s == KILN_OK; q++) offs[q] = b[q].off;
    kiln__free(b);
    return s;
}

/* Step 3: offsets, one memory at a time. */
static kiln_status plan_offsets(planner *P) {
    kiln_mem_plan *p = P->p;
    plan_blk *mb = kiln__malloc(((size_t)P->n_blocks + 1) * sizeof *mb);
    int *from = kiln__malloc(((size_t)P->n_blocks + 1) * sizeof *from);
    kiln_status s = KILN_OK;
    if (!mb || !from) s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory planning activation memory");
    for (int m = 0; m < 2 && s == KILN_OK; m++) {
        int n = 0;
        for (int b = 0; b < P->n_blocks; b++)
            if (P->blocks[b].mem == m && P->blocks[b].start >= 0) {
                from[n] = b;
                mb[n++] = P->blocks[b];
            }
        p->n_blocks[m] = n;
        s = layout(mb, n, P->g->n_nodes, &p->arena[m], &p->lower[m], NULL);
        for (int q = 0; q < n && s == KILN_OK; q++) P->blocks[from[q]].off = mb[q].off;
    }
    kiln__free(mb);
    kiln__free(from);
    return s;
}

kiln_status kiln__plan_build(const kiln_engine *e, const kiln_plan_input *in, kiln_mem_plan **out) {
    *out = NULL;
    const kiln_graph *g = e->graph;
    size_t nv = (size_t)g->n_values + 1, nn = (size_t)g->n_nodes + 1;
    kiln_mem_plan *p = kiln__calloc(1, sizeof *p);
    planner P = {.e = e, .g = g, .p = p};
    kiln_status s = KILN_OK;
    if (!p) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory planning activation memory");
    p->max_workspace_node = -1;
    size_t n_aux = 0;
    for (int ni = 0; ni < g->n_nodes; ni++) n_aux += (size_t)g->nodes[ni].n_out + 1;
    p->n_sig = g->n_inputs;
    p->sig = kiln__calloc((size_t)g->n_inputs + 1, sizeof *p->sig);
    p->off[0] = kiln__malloc(nv * sizeof *p->off[0]);
    p->off[1] = kiln__malloc(nv * sizeof *p->off[1]);
    p->nbytes = kiln__calloc(nv, sizeof *p->nbytes);
    p->aux_first = kiln__calloc(nn, sizeof *p->aux_first);
    p->aux_off = kiln__calloc(n_aux + 1, sizeof *p->aux_off);
    p->aux_bytes = kiln__calloc(n_aux + 1, sizeof *p->aux_bytes);
    P.info = kiln__calloc(nv, sizeof *P.info);
    P.exact = kiln__calloc(nv, sizeof *P.exact);
    P.eval = kiln__calloc(nv, sizeof *P.eval);
    P.origin = kiln__calloc(nv, sizeof *P.origin);
    P.aux_blk = kiln__calloc(n_aux + 1, sizeof *P.aux_blk);
    for (int m = 0; m < 2; m++) {
        P.first[m] = kiln__malloc(nv * sizeof *P.first[m]);
        P.last[m] = kiln__malloc(nv * sizeof *P.last[m]);
        P.blk[m] = kiln__malloc(nv * sizeof *P.blk[m]);
    }
    if (!p->sig || !p->off[0] || !p->off[1] || !p->nbytes || !p->aux_first || !p->aux_off ||
        !p->aux_bytes || !P.info || !P.exact || !P.eval || !P.origin || !P.aux_blk || !P.first[0] ||
        !P.first[1] || !P.last[0] || !P.last[1] || !P.blk[0] || !P.blk[1]) {
        s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory planning activation memory");
        goto done;
    }
    memcpy(p->sig, in, (size_t)g->n_inputs * sizeof *p->sig);
    for (int ni = 0, a = 0; ni < g->n_nodes; ni++) {
        p->aux_first[ni] = a;
        a += g->nodes[ni].n_out + 1;
    }
    for (int v = 0; v < g->n_values; v++) {
        const kiln_value *val = &g->values[v];
        p->off[0][v] = p->off[1][v] = -1;
        for (int m = 0; m < 2; m++) P.first[m][v] = P.last[m][v] = P.blk[m][v] = -1;
        P.info[v] = val->info;
        P.info[v].data = NULL;
        if (val->flags & KILN_VALUE_CONST) {
            P.info[v].data = val->data;
            P.exact[v] = dims_exact(&val->info);
            p->nbytes[v] = val->nbytes;
        }
    }
    for (int k = 0; k < g->n_inputs; k++) {
        kiln_tinfo *t = &P.info[g->inputs[k]];
        t->rank = in[k].rank;
        memcpy(t->dims, in[k].dims, sizeof t->dims);
        P.exact[g->inputs[k]] = exact_bytes(t, &p->nbytes[g->inputs[k]]);
    }
    plan_sizes(&P);
    if ((s = plan_blocks(&P)) != KILN_OK) goto done;
    if ((s = plan_offsets(&P)) != KILN_OK) goto done;
    for (int m = 0, b; m < 2; m++)
        for (int v = 0; v < g->n_values; v++)
            if ((b = block_of(&P, m, v)) >= 0) p->off[m][v] = P.blocks[b].off;
    for (size_t a = 0; a < n_aux; a++)
        p->aux_off[a] = P.aux_blk[a] >= 0 ? P.blocks[P.aux_blk[a]].off : -1;
done:
    if (P.eval)
        for (int v = 0; v < g->n_values; v++) kiln__aligned_free(P.eval[v]);
    kiln__free(P.eval);
    kiln__free(P.info);
    kiln__free(P.exact);
    kiln__free(P.origin);
    kiln__free(P.aux_blk);
    for (int m = 0; m < 2; m++) {
        kiln__free(P.first[m]);
        kiln__free(P.last[m]);
        kiln__free(P.blk[m]);
    }
    kiln__free(P.blocks);
    if (s != KILN_OK) {
        kiln__plan_free(p);
        return s;
    }
    *out = p;
    return KILN_OK;
}

kiln_status kiln__plan_at_profile(const kiln_engine *e, int which, kiln_mem_plan **out) {
    *out = NULL;
    const kiln_graph *g = e->graph;
    kiln_plan_input *in = kiln__calloc((size_t)g->n_inputs + 1, sizeof *in);
    if (!in) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "out of memory planning activation memory");
    for (int k = 0; k < g->n_inputs; k++) {
        const kiln_profile *pr = &e->profiles[k];
        in[k].mem = KILN_MEM_HOST;
        in[k].rank = pr->rank;
        memcpy(in[k].dims, which == 0 ? pr->min : which == 1 ? pr->opt : pr->max, sizeof in[k].dims);
    }
    kiln_status s = kiln__plan_build(e, in, out);
    kiln__free(in);
    return s;
}

bool kiln__workspace_fits(const kiln_build_options *o, size_t bytes) {
    return o->workspace == 0 || bytes <= o->workspace;
}

kiln_status kiln__check_workspace_limit(const kiln_engine *e) {
    if (e->opts.workspace == 0) return KILN_OK;
    kiln_mem_plan *p;
    KILN_TRY(kiln__plan_at_profile(e, 2, &p));
    kiln_status s = KILN_OK;
    if (!kiln__workspace_fits(&e->opts, p->max_workspace) && p->max_workspace_node >= 0) {
        const kiln_node *n = &e->graph->nodes[p->max_workspace_node];
        s = KILN_FAIL(KILN_ERR_OUT_OF_MEMORY,
                      "layer '%s' (%s) needs %zu bytes of workspace at the profile's max shapes, "
                      "above the builder's workspace limit of %llu bytes "
                      "(kiln_builder_set_workspace / --workspace)",
                      n->name, n->op->name, p->max_workspace, (unsigned long long)e->opts.workspace);
    }
    kiln__plan_free(p);
    return s;
}
