/* cuda_ops_misc.c -- the "misc" family on the GPU: random numbers
 * (RandomNormal, RandomUniform, their Like forms, Bernoulli), the windows
 * (Blackman, Hamming, Hann), DFT, STFT, MelWeightMatrix, Det and the two
 * losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss). supports()
 * checks dtypes; run() reads attributes and host parameters and launches
 * (kernels: k_misc.cu). The CPU kernels in src/ops/misc_*.c are the
 * reference; where the GPU differs, docs/cuda.md says so. */
#if KILN_HAVE_CUDA

#include "backends/cuda/cuda_internal.h"

#include <time.h>

/* ---- random numbers ---------------------------------------------------------------------
 * With a `seed` the values depend on the seed only (repeatable, but not
 * the CPU's values: another generator). Without one, the node keeps a
 * device counter in its state (seeded from the clock on first use) that
 * every launch advances, so each run (CUDA Graph replays included) draws
 * new values; without node state (constant folding never runs these ops)
 * each call takes a fresh seed from the clock. */

typedef struct rnd_state {
    uint64_t *ctr; /* device */
    uint64_t seed;
} rnd_state;

static void rnd_state_free(void *p) {
    rnd_state *s = p;
    if (!s) return;
    if (s->ctr) cudaFree(s->ctr);
    kiln__free(s);
}

static uint64_t rnd_clock_seed(const void *salt) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)salt;
}

/* The node's counter state, created on first use; NULL without node state
 * (or when another kernel's state is there). */
static kiln_status rnd_node(const kiln_kernel_args *a, rnd_state **out) {
    *out = NULL;
    kiln_node_state *ns = a->node_state;
    if (!ns) return KILN_OK;
    if (ns->p) {
        if (ns->free == rnd_state_free) *out = ns->p;
        return KILN_OK;
    }
    if (KCU_STATE(a)->capturing)
        return KILN_FAIL(KILN_ERR_UNSUPPORTED,
                         "node '%s' (%s): its random state must be created outside a CUDA Graph "
                         "capture", KCU_NODE(a), a->op->name);
    rnd_state *s = kiln__calloc(1, sizeof *s);
    if (!s) return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (%s): out of memory", KCU_NODE(a),
                             a->op->name);
    cudaError_t e = cudaMalloc((void **)&s->ctr, sizeof(uint64_t));
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        kiln__free(s);
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "node '%s' (%s): no device memory for its random "
                         "state: %s", KCU_NODE(a), a->op->name, cudaGetErrorString(e));
    }
    s->seed = rnd_clock_seed(s);
    e = kcu_random_ctr_init(s->ctr, 0, KCU_STREAM(a));
    if (e != cudaSuccess) {
        rnd_state_free(s);
        return kiln__cuda_fail(e, KCU_NODE(a), "kcu_random_ctr_init");
    }
    ns->p = s;
    ns->free = rnd_state_free;
    *out = s;
    return KILN_OK;
}

bool kiln__cu_random_supports(const kiln_graph *g, const kiln_node *n) {
    kiln_dtype y = kiln__cu_out_dtype(g, n, 0);
    if (n->op->code == RND_BERNOULLI)
        return kiln__cu_is_float(kiln__cu_in_dtype(g, n, 0)) && kcu_misc_store_has(y);
    return kiln__cu_is_float(y);
}

kiln_status kiln__cu_random_run(const kiln_kernel_args *a) {
    const kiln_random_attrs *at = a->attrs;
    kiln_tensor *y = a->out[0];
    int code = a->op->code;
    int kind = code == RND_NORMAL || code == RND_NORMAL_LIKE ? KCU_RND_NORMAL
               : code == RND_BERNOULLI                       ? KCU_RND_BERNOULLI
                                                             : KCU_RND_UNIFORM;
    const kiln_tensor *p = kind == KCU_RND_BERNOULLI ? a->in[0] : NULL;
    if (kind == KCU_RND_BERNOULLI ? !kcu_misc_store_has(y->dtype) : !kiln__cu_is_float(y->dtype))
        return kiln__cu_dtype_fail(a, y->dtype);
    if (p && !kiln__cu_is_float(p->dtype)) return kiln__cu_dtype_fail(a, p->dtype);
    int64_t n = kiln__tensor_numel(y);
    if (n <= 0) return KILN_OK;
    uint64_t seed;
    uint64_t *ctr = NULL;
    if (at->has_seed) {
        uint32_t bits;
        memcpy(&bits, &at->seed, 4);
        seed = 0x6b696c6e00000000ull ^ bits; /* as the CPU kernel */
    } else {
        rnd_state *s = NULL;
        KILN_TRY(rnd_node(a, &s));
        seed = s ? s->seed : rnd_clock_seed(y->data);
        ctr = s ? s->ctr : NULL;
    }
    KILN_CUDA_TRY(kcu_random(kind, y->dtype, y->data, n, seed, ctr, at->a, at->b,
                             p ? p->dtype : KILN_DTYPE_UNDEFINED, p ? p->data : NULL,
                             KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- windows ------------------------------------------------------------------------------ */

bool kiln__cu_window_supports(const kiln_graph *g, const kiln_node *n) {
    return kcu_misc_store_has(kiln__cu_out_dtype(g, n, 0));
}

kiln_status kiln__cu_window_run(const kiln_kernel_args *a) {
    const kiln_window_attrs *at = a->attrs;
    kiln_tensor *y = a->out[0];
    if (!kcu_misc_store_has(y->dtype)) return kiln__cu_dtype_fail(a, y->dtype);
    if (y->rank != 1)
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (%s): output must be 1-D, got rank %d",
                         KCU_NODE(a), a->op->name, y->rank);
    KILN_CUDA_TRY(kcu_window(a->op->code, at->periodic != 0, y->dtype, y->data, y->dims[0],
                             KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

/* ---- DFT, STFT ------------------------------------------------------------------------------
 * A direct sum per output bin (O(n) per bin) over a twiddle table in
 * scratch; the CPU kernel uses a radix-2 FFT for powers of two, so the
 * results agree to rounding. */

static kiln_status misc_one_int(const kiln_kernel_args *a, const kiln_tensor *t, const char *what,
                                int64_t *v) {
    int64_t n = 0;
    KILN_TRY(kiln__cuda_read_ints(a, t, v, 1, &n, what));
    if (n != 1)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): %s must hold one value", KCU_NODE(a),
                         a->op->name, what);
    return KILN_OK;
}

static kiln_status misc_dft_launch(const kiln_kernel_args *a, const kcu_dft_geo *g, const void *x,
                                   const void *w, void *y, kiln_dtype t) {
    if (g->outer * g->inner * g->n_out <= 0) return KILN_OK;
    void *tw = NULL;
    KILN_TRY(kiln__cuda_scratch(KCU_STATE(a), (size_t)g->n * 2 * sizeof(double), &tw, KCU_NODE(a)));
    KILN_CUDA_TRY(kcu_dft(t, g, x, w, y, tw, KCU_STREAM(a)), KCU_NODE(a));
    return KILN_OK;
}

bool kiln__cu_dft_supports(const kiln_graph *g, const kiln_node *n) {
    return kiln__cu_float_in_out(g, n);
}

kiln_status kiln__cu_dft_run(const kiln_kernel_args *a) {
    const kiln_dft_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0];
    const kiln_tensor *len = a->n_in > 1 ? a->in[1] : NULL;
    kiln_tensor *y = a->out[0];
    if (!kiln__cu_is_float(x->dtype) || y->dtype != x->dtype)
        return kiln__cu_dtype_fail(a, x->dtype);
    int r = x->rank;
    int ax = at->axis < 0 ? at->axis + r : at->axis;
    if (r < 2 || ax < 0 || ax >= r - 1 || (x->dims[r - 1] != 1 && x->dims[r - 1] != 2) ||
        y->rank != r)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (DFT): axis %d does not fit an input of rank %d (the last "
                         "dimension holds 1 or 2 real/imaginary parts)",
                         KCU_NODE(a), (int)at->axis, r);
    int64_t L = x->dims[ax], n = L;
    if (len) KILN_TRY(misc_one_int(a, len, "dft_length", &n));
    if (n < 1 || n > ((int64_t)1 << 40))
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "node '%s' (DFT): dft_length %lld is not in [1, 2^40]", KCU_NODE(a),
                         (long long)n);
    kcu_dft_geo g;
    memset(&g, 0, sizeof g);
    g.n = n;
    g.nin = L;
    g.n_out = y->dims[ax];
    if (g.n_out > n)
        return KILN_FAIL(KILN_ERR_INTERNAL, "node '%s' (DFT): %lld bins for a length of %lld",
                         KCU_NODE(a), (long long)g.n_out, (long long)n);
    g.outer = kiln__numel(ax, x->dims);
    g.inner = kiln__numel(r - 2 - ax, x->dims + ax + 1);
    g.comp = (int32_t)x->dims[r - 1];
    g.inverse = at->inverse != 0;
    g.in_sj = g.inner * g.comp;
    g.in_si = g.comp;
    g.in_so = L * g.in_sj;
    g.out_sk = g.inner * 2;
    g.out_si = 2;
    g.out_so = g.n_out * g.out_sk;
    return misc_dft_launch(a, &g, x->data, NULL, y->data, x->dtype);
}

bool kiln__cu_stft_supports(const kiln_graph *g, const kiln_node *n) {
    if (!kiln__cu_float_in_out(g, n)) return false;
    kiln_dtype w = kiln__cu_in_dtype(g, n, 2);
    return w == KILN_DTYPE_UNDEFINED || w == kiln__cu_in_dtype(g, n, 0);
}

kiln_status kiln__cu_stft_run(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0], *step = a->in[1];
    const kiln_tensor *win = a->n_in > 2 ? a->in[2] : NULL;
    const kiln_tensor *fl = a->n_in > 3 ? a->in[3] : NULL;
    kiln_tensor *y = a->out[0];
    if (!kiln__cu_is_float(x->dtype) || y->dtype != x->dtype)
        return kiln__cu_dtype_fail(a, x->dtype);
    if (win && win->dtype != x->dtype) return kiln__cu_dtype_fail(a, win->dtype);
    if (x->rank != 3 || y->rank != 4 || (x->dims[2] != 1 && x->dims[2] != 2) || (!win && !fl) ||
        (win && win->rank != 1))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (STFT): signal must be [batch, length, 1 or 2] "
                         "with a 1-D window or a frame_length", KCU_NODE(a));
    int64_t s = 0, flen = 0;
    KILN_TRY(misc_one_int(a, step, "frame_step", &s));
    if (fl) KILN_TRY(misc_one_int(a, fl, "frame_length", &flen));
    else flen = win->dims[0];
    int64_t B = x->dims[0], L = x->dims[1], frames = y->dims[1], bins = y->dims[2];
    if (s < 1 || flen < 1 || flen > L || (frames - 1) * s + flen > L || bins > flen ||
        (win && win->dims[0] < flen))
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "node '%s' (STFT): frame_step %lld / frame length %lld do not fit a signal "
                         "of %lld", KCU_NODE(a), (long long)s, (long long)flen, (long long)L);
    kcu_dft_geo g;
    memset(&g, 0, sizeof g);
    g.n = flen;
    g.nin = flen;
    g.n_out = bins;
    g.outer = B;
    g.inner = frames;
    g.comp = (int32_t)x->dims[2];
    g.in_sj = g.comp;
    g.in_si = s * g.comp;
    g.in_so = L * g.comp;
    g.out_sk = 2;
    g.out_si = bins * 2;
    g.out_so = frames * g.out_si;
    return misc_dft_launch(a, &g, x->data, win ? win->data : NULL, y->data, x->dtype);
}

/* ---- MelWeightMatrix ------------------------------------------------------------------------ */

bool kiln__cu_mel_supports(const kiln_graph *g, const kiln_node *n) {
    return kcu_misc_store_has(kiln__cu_out_dtype(g, n, 0));
}

kiln_status kiln__cu_mel_run(const kiln_kernel_args *a) {
    kiln_tensor *y = a->out[0];
    if (!kcu_misc_store_has(y->dtype)) return kiln__cu_dtype_fail(a, y->dtype);
    double f[5];
    int64_t v[5];
    for (int i = 0; i < 5; i++) KILN_TRY(kiln__cuda_read_scalar(a, a->in[i], &f[i], &v[i]));
    int64_t nmel = v[0], dftl = v[1], sr = v[2];
    double lo = f[3], hi = f[4];
    if (sr <= 0)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "node '%s' (MelWeightMatrix): sample_rate %lld must be positive",
                         KCU_NODE(a), (long long)sr);
    if (dftl < 1 || nmel < 0 || y->rank != 2 || y->dims[0] != dftl / 2 + 1 || y->dims[1] != nmel)
        return KILN_FAIL(KILN_ERR_MODEL,
                         "node '%s' (MelWeightMatrix): dft_length %lld / num_mel_bins %lld do not "
                         "match the output", KCU_NODE(a), (long long)dftl, (long long)nmel);
    /* the same expressions as the CPU kernel */
    double lm = 2595.0 * log10(1.0 + lo / 700.0), hm = 2595.0 * log10(1.0 + hi / 700.0);
    double step = (hm - lm) / (double)(nmel + 2);
    KILN_CUDA_TRY(kcu_mel(y->dtype, y->data, nmel, dftl, sr, lm, step, KCU_STREAM(a)), KCU_NODE(a));
    return KILN_OK;
}

/* ---- Det -------------------------------------------------------------------------------------- */

bool kiln__cu_det_supports(const kiln_graph *g, const kiln_node *n) {
    return kiln__cu_float_in_out(g, n);
}

kiln_status kiln__cu_det_run(const kiln_kernel_args *a) {
    const kiln_tensor *x = a->in[0];
    kiln_tensor *y = a->out[0];
    if (!kiln__cu_is_float(x->dtype) || y->dtype != x->dtype)
        return kiln__cu_dtype_fail(a, x->dtype);
    if (x->rank < 2 || x->dims[x->rank - 1] != x->dims[x->rank - 2])
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Det): input must be [..., M, M]", KCU_NODE(a));
    int64_t n = x->dims[x->rank - 1], batch = kiln__numel(x->rank - 2, x->dims);
    if (batch <= 0) return KILN_OK;
    void *ws = NULL;
    size_t wsz = kcu_det_scratch(batch, n);
    if (wsz) KILN_TRY(kiln__cuda_scratch(KCU_STATE(a), wsz, &ws, KCU_NODE(a)));
    KILN_CUDA_TRY(kcu_det(x->dtype, x->data, y->data, batch, n, ws, KCU_STREAM(a)), KCU_NODE(a));
    return KILN_OK;
}

/* ---- NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss --------------------------------------- */

bool kiln__cu_loss_supports(const kiln_graph *g, const kiln_node *n) {
    if (!kiln__cu_float_in_out(g, n)) return false;
    kiln_dtype t = kiln__cu_in_dtype(g, n, 0), tt = kiln__cu_in_dtype(g, n, 1);
    if (tt != KILN_DTYPE_INT32 && tt != KILN_DTYPE_INT64) return false;
    kiln_dtype w = kiln__cu_in_dtype(g, n, 2), lp = kiln__cu_out_dtype(g, n, 1);
    return (w == KILN_DTYPE_UNDEFINED || w == t) && (lp == KILN_DTYPE_UNDEFINED || lp == t);
}

kiln_status kiln__cu_loss_run(const kiln_kernel_args *a) {
    const kiln_loss_attrs *at = a->attrs;
    const kiln_tensor *x = a->in[0], *t = a->in[1];
    const kiln_tensor *w = a->n_in > 2 ? a->in[2] : NULL;
    kiln_tensor *y = a->out[0];
    kiln_tensor *lp = a->n_out > 1 && a->out[1] && a->out[1]->data ? a->out[1] : NULL;
    if (!kiln__cu_is_float(x->dtype) || y->dtype != x->dtype || (w && w->dtype != x->dtype) ||
        (lp && lp->dtype != x->dtype))
        return kiln__cu_dtype_fail(a, x->dtype);
    if (t->dtype != KILN_DTYPE_INT32 && t->dtype != KILN_DTYPE_INT64)
        return kiln__cu_dtype_fail(a, t->dtype);
    if (x->rank < 2 || at->reduction < LOSS_NONE || at->reduction > LOSS_MEAN)
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): input must be [N, C, ...]", KCU_NODE(a),
                         a->op->name);
    kcu_loss_geo g;
    memset(&g, 0, sizeof g);
    g.N = x->dims[0];
    g.C = x->dims[1];
    g.D = kiln__numel(x->rank - 2, x->dims + 2);
    g.sce = a->op->code == 1;
    g.reduction = at->reduction;
    g.has_ignore = at->has_ignore != 0;
    g.ignore_index = at->ignore_index;
    if (kiln__tensor_numel(t) != g.N * g.D || (w && kiln__tensor_numel(w) != g.C))
        return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (%s): target/weight do not match the input",
                         KCU_NODE(a), a->op->name);
    void *ws = NULL;
    size_t wsz = kcu_loss_scratch(g.N * g.D, g.reduction);
    if (wsz) KILN_TRY(kiln__cuda_scratch(KCU_STATE(a), wsz, &ws, KCU_NODE(a)));
    KILN_CUDA_TRY(kcu_loss(x->dtype, t->dtype, &g, x->data, t->data, w ? w->data : NULL, y->data,
                           g.sce && lp ? lp->data : NULL, ws, KCU_STREAM(a)),
                  KCU_NODE(a));
    return KILN_OK;
}

#else
typedef int kiln_cuda_ops_misc_disabled;
#endif
