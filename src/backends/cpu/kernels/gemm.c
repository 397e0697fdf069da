/* gemm.c -- blocked, packed single-precision GEMM (see gemm.h).
 *
 * Structure (the classic Goto/BLIS scheme):
 *
 *   for jc in N step NC            columns of C (and B) in chunks of NC
 *     for pc in K step KC          depth in chunks of KC
 *       pack B[pc:pc+KC, jc:jc+NC] into NR-wide column panels (k-major)
 *       for ic in M step MC        rows of C in chunks of MC
 *         pack alpha*A[ic:ic+MC, pc:pc+KC] into MR-tall row panels
 *         for jr in NC step NR, ir in MC step MR
 *           micro-kernel: C[MR x NR] (+)= Apanel[MR x KC] * Bpanel[KC x NR]
 *
 * Packing zero-pads edge panels, so the micro-kernel always computes a full
 * MR x NR tile and only the final store is masked. Micro-kernels (GCC
 * vector extensions, no intrinsics):
 *   - x86-64 with AVX2+FMA (picked at run time): the 6x16 tile in twelve
 *     8-float accumulators, one FMA per accumulator per k;
 *   - baseline (SSE2, NEON, ...): two 6x8 halves with 4-float vectors, so
 *     that 12 accumulators + 3 temporaries fit 16 registers;
 *   - without vector extensions: a scalar loop.
 * Measured on the 2-core AMD EPYC dev box (shared, so noisy), one thread:
 * AVX2 ~50-70 GFLOP/s on square 256..512 problems, 35-60 on ResNet/BERT
 * shapes; baseline SSE2 ~12 GFLOP/s; the naive triple loop 0.4-1.3.
 *
 * Threads: the problem is cut into as many independent sub-problems as the
 * pool has threads (slices of M or of N, whichever has more tiles); each
 * runs the serial algorithm above with its own packing buffers. M == 1 and
 * N == 1 (matrix-vector) go to dedicated loops; tiny problems to a plain
 * triple loop. */
#include "backends/cpu/kernels/gemm.h"

#define GEMM_MR 6
#define GEMM_NR 16
#define GEMM_MC 144 /* multiple of MR */
#define GEMM_KC 256
#define GEMM_NC 2048 /* multiple of NR */

/* Problems with M*N*K below this use the triple loop (no packing). */
#define GEMM_SMALL 512
/* Minimum flops (2*M*N*K) per thread before splitting. */
#define GEMM_MIN_FLOPS_PER_TASK (1 << 21)

typedef void (*gemm_ukernel_fn)(int64_t kc, const float *restrict a, const float *restrict b,
                                float *restrict c, int64_t ldc, float beta, int mr, int nr);

/* ---- micro-kernel ------------------------------------------------------ */

#if defined(__GNUC__)
#define GEMM_HAVE_VEC 1
typedef float gemm_v8 __attribute__((vector_size(32)));

/* Vectors never cross function boundaries (that would change the ABI
 * between the generic and the AVX2 copy), so these are macros. */
#define V8_SPLAT(x) ((gemm_v8){(x), (x), (x), (x), (x), (x), (x), (x)})
#define V8_LOAD(v, p) memcpy(&(v), (p), sizeof(gemm_v8))
#define V8_STORE(p, v) memcpy((p), &(v), sizeof(gemm_v8))
/* Writes one finished 8-wide accumulator to C (full width). */
#define V8_UPDATE(cp, acc, beta)                    \
    do {                                            \
        float *c_ = (cp);                           \
        if ((beta) == 0.0f) {                       \
            V8_STORE(c_, acc);                      \
        } else {                                    \
            gemm_v8 o_;                             \
            V8_LOAD(o_, c_);                        \
            if ((beta) == 1.0f)                     \
                o_ += (acc);                        \
            else                                    \
                o_ = V8_SPLAT(beta) * o_ + (acc);       \
            V8_STORE(c_, o_);                       \
        }                                           \
    } while (0)

/* a: MR floats per k step; b: NR floats per k step (both packed). */
static inline __attribute__((always_inline)) void ukernel_body(int64_t kc, const float *restrict a,
                                                               const float *restrict b,
                                                               float *restrict c, int64_t ldc,
                                                               float beta, int mr, int nr) {
    gemm_v8 c0a = {0}, c0b = {0}, c1a = {0}, c1b = {0}, c2a = {0}, c2b = {0};
    gemm_v8 c3a = {0}, c3b = {0}, c4a = {0}, c4b = {0}, c5a = {0}, c5b = {0};
    for (int64_t k = 0; k < kc; k++) {
        gemm_v8 b0, b1;
        V8_LOAD(b0, b);
        V8_LOAD(b1, b + 8);
        gemm_v8 av;
        av = V8_SPLAT(a[0]);
        c0a += av * b0;
        c0b += av * b1;
        av = V8_SPLAT(a[1]);
        c1a += av * b0;
        c1b += av * b1;
        av = V8_SPLAT(a[2]);
        c2a += av * b0;
        c2b += av * b1;
        av = V8_SPLAT(a[3]);
        c3a += av * b0;
        c3b += av * b1;
        av = V8_SPLAT(a[4]);
        c4a += av * b0;
        c4b += av * b1;
        av = V8_SPLAT(a[5]);
        c5a += av * b0;
        c5b += av * b1;
        a += GEMM_MR;
        b += GEMM_NR;
    }
    if (mr == GEMM_MR && nr == GEMM_NR) {
        V8_UPDATE(c + 0 * ldc, c0a, beta);
        V8_UPDATE(c + 0 * ldc + 8, c0b, beta);
        V8_UPDATE(c + 1 * ldc, c1a, beta);
        V8_UPDATE(c + 1 * ldc + 8, c1b, beta);
        V8_UPDATE(c + 2 * ldc, c2a, beta);
        V8_UPDATE(c + 2 * ldc + 8, c2b, beta);
        V8_UPDATE(c + 3 * ldc, c3a, beta);
        V8_UPDATE(c + 3 * ldc + 8, c3b, beta);
        V8_UPDATE(c + 4 * ldc, c4a, beta);
        V8_UPDATE(c + 4 * ldc + 8, c4b, beta);
        V8_UPDATE(c + 5 * ldc, c5a, beta);
        V8_UPDATE(c + 5 * ldc + 8, c5b, beta);
        return;
    }
    float t[GEMM_MR * GEMM_NR];
    V8_STORE(t + 0 * GEMM_NR, c0a);
    V8_STORE(t + 0 * GEMM_NR + 8, c0b);
    V8_STORE(t + 1 * GEMM_NR, c1a);
    V8_STORE(t + 1 * GEMM_NR + 8, c1b);
    V8_STORE(t + 2 * GEMM_NR, c2a);
    V8_STORE(t + 2 * GEMM_NR + 8, c2b);
    V8_STORE(t + 3 * GEMM_NR, c3a);
    V8_STORE(t + 3 * GEMM_NR + 8, c3b);
    V8_STORE(t + 4 * GEMM_NR, c4a);
    V8_STORE(t + 4 * GEMM_NR + 8, c4b);
    V8_STORE(t + 5 * GEMM_NR, c5a);
    V8_STORE(t + 5 * GEMM_NR + 8, c5b);
    for (int r = 0; r < mr; r++) {
        float *cr = c + r * ldc;
        const float *tr = t + r * GEMM_NR;
        if (beta == 0.0f)
            for (int j = 0; j < nr; j++) cr[j] = tr[j];
        else
            for (int j = 0; j < nr; j++) cr[j] = beta * cr[j] + tr[j];
    }
}

/* Baseline ISA (SSE2, NEON, ...): 8-float vectors would be emulated, so the
 * tile is done as two 6x8 halves with 4-float vectors: 12 accumulators, 2 B
 * vectors and a broadcast fit the 16 registers of SSE2. */
typedef float gemm_v4 __attribute__((vector_size(16)));
#define V4_SPLAT(x) ((gemm_v4){(x), (x), (x), (x)})
#define V4_LOAD(v, p) memcpy(&(v), (p), sizeof(gemm_v4))
#define V4_STORE(p, v) memcpy((p), &(v), sizeof(gemm_v4))

static void ukernel_generic(int64_t kc, const float *restrict a, const float *restrict b,
                            float *restrict c, int64_t ldc, float beta, int mr, int nr) {
    float t[GEMM_MR * GEMM_NR];
    for (int h = 0; h < 2; h++) {
        gemm_v4 c0a = {0}, c0b = {0}, c1a = {0}, c1b = {0}, c2a = {0}, c2b = {0};
        gemm_v4 c3a = {0}, c3b = {0}, c4a = {0}, c4b = {0}, c5a = {0}, c5b = {0};
        const float *ap = a, *bp = b + 8 * h;
        for (int64_t k = 0; k < kc; k++) {
            gemm_v4 b0, b1, av;
            V4_LOAD(b0, bp);
            V4_LOAD(b1, bp + 4);
            av = V4_SPLAT(ap[0]);
            c0a += av * b0;
            c0b += av * b1;
            av = V4_SPLAT(ap[1]);
            c1a += av * b0;
            c1b += av * b1;
            av = V4_SPLAT(ap[2]);
            c2a += av * b0;
            c2b += av * b1;
            av = V4_SPLAT(ap[3]);
            c3a += av * b0;
            c3b += av * b1;
            av = V4_SPLAT(ap[4]);
            c4a += av * b0;
            c4b += av * b1;
            av = V4_SPLAT(ap[5]);
            c5a += av * b0;
            c5b += av * b1;
            ap += GEMM_MR;
            bp += GEMM_NR;
        }
        float *th = t + 8 * h;
        V4_STORE(th + 0 * GEMM_NR, c0a);
        V4_STORE(th + 0 * GEMM_NR + 4, c0b);
        V4_STORE(th + 1 * GEMM_NR, c1a);
        V4_STORE(th + 1 * GEMM_NR + 4, c1b);
        V4_STORE(th + 2 * GEMM_NR, c2a);
        V4_STORE(th + 2 * GEMM_NR + 4, c2b);
        V4_STORE(th + 3 * GEMM_NR, c3a);
        V4_STORE(th + 3 * GEMM_NR + 4, c3b);
        V4_STORE(th + 4 * GEMM_NR, c4a);
        V4_STORE(th + 4 * GEMM_NR + 4, c4b);
        V4_STORE(th + 5 * GEMM_NR, c5a);
        V4_STORE(th + 5 * GEMM_NR + 4, c5b);
    }
    for (int r = 0; r < mr; r++) {
        float *cr = c + r * ldc;
        const float *tr = t + r * GEMM_NR;
        if (beta == 0.0f)
            for (int j = 0; j < nr; j++) cr[j] = tr[j];
        else
            for (int j = 0; j < nr; j++) cr[j] = beta * cr[j] + tr[j];
    }
}

#if defined(__x86_64__) || defined(__i386__)
#define GEMM_HAVE_AVX2 1
/* In ISO C mode GCC does not contract a*b+c into FMA on its own; clang
 * contracts within an expression by default and has no such attribute. */
#if defined(__clang__)
#define GEMM_FMA_ATTR __attribute__((target("avx2,fma")))
#else
#define GEMM_FMA_ATTR __attribute__((target("avx2,fma"), optimize("fp-contract=fast")))
#endif
GEMM_FMA_ATTR static void
ukernel_avx2(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c,
             int64_t ldc, float beta, int mr, int nr) {
    ukernel_body(kc, a, b, c, ldc, beta, mr, nr);
}
#endif

#else /* no vector extensions: scalar kernel */

static void ukernel_generic(int64_t kc, const float *restrict a, const float *restrict b,
                            float *restrict c, int64_t ldc, float beta, int mr, int nr) {
    float acc[GEMM_MR][GEMM_NR];
    for (int r = 0; r < GEMM_MR; r++)
        for (int j = 0; j < GEMM_NR; j++) acc[r][j] = 0.0f;
    for (int64_t k = 0; k < kc; k++) {
        for (int r = 0; r < GEMM_MR; r++)
            for (int j = 0; j < GEMM_NR; j++) acc[r][j] += a[r] * b[j];
        a += GEMM_MR;
        b += GEMM_NR;
    }
    for (int r = 0; r < mr; r++) {
        float *cr = c + r * ldc;
        if (beta == 0.0f)
            for (int j = 0; j < nr; j++) cr[j] = acc[r][j];
        else
            for (int j = 0; j < nr; j++) cr[j] = beta * cr[j] + acc[r][j];
    }
}
#endif

static gemm_ukernel_fn gemm_pick_kernel(const char **name) {
#if defined(GEMM_HAVE_AVX2)
    /* libgcc fills the CPU model in a constructor: no __builtin_cpu_init
     * (which would write shared state from several threads). */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        if (name) *name = "avx2-fma 6x16";
        return ukernel_avx2;
    }
#endif
    if (name) {
#if defined(GEMM_HAVE_VEC)
        *name = "generic-vec 6x16";
#else
        *name = "scalar 6x16";
#endif
    }
    return ukernel_generic;
}

const char *kiln__sgemm_kernel_name(void) {
    const char *name = "?";
    (void)gemm_pick_kernel(&name);
    return name;
}

/* ---- problem description ----------------------------------------------- */

typedef struct gemm_prob {
    bool ta, tb;
    int64_t M, N, K;
    float alpha, beta;
    const float *A;
    int64_t lda;
    const float *B;
    int64_t ldb;
    float *C;
    int64_t ldc;
    gemm_ukernel_fn ukr;
    bool gemv512; /* M == 1 products with AVX-512F kernels (gemv_row) */
} gemm_prob;

static inline float gemm_a(const gemm_prob *p, int64_t i, int64_t k) {
    return p->ta ? p->A[k * p->lda + i] : p->A[i * p->lda + k];
}
static inline float gemm_b(const gemm_prob *p, int64_t k, int64_t j) {
    return p->tb ? p->B[j * p->ldb + k] : p->B[k * p->ldb + j];
}

/* ---- packing ------------------------------------------------------------ */

/* alpha * A[i0:i0+mc, p0:p0+kc] -> MR-row panels, each kc x MR (k-major),
 * rows past mc zero. */
static void pack_a(const gemm_prob *p, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                   float *restrict dst) {
    const float alpha = p->alpha;
    for (int64_t ir = 0; ir < mc; ir += GEMM_MR) {
        int64_t mr = mc - ir < GEMM_MR ? mc - ir : GEMM_MR;
        float *d = dst + ir * kc;
        if (!p->ta) {
            const float *src = p->A + (i0 + ir) * p->lda + p0;
            if (mr == GEMM_MR) {
                const float *s0 = src, *s1 = src + p->lda, *s2 = src + 2 * p->lda;
                const float *s3 = src + 3 * p->lda, *s4 = src + 4 * p->lda, *s5 = src + 5 * p->lda;
                for (int64_t k = 0; k < kc; k++) {
                    d[0] = alpha * s0[k];
                    d[1] = alpha * s1[k];
                    d[2] = alpha * s2[k];
                    d[3] = alpha * s3[k];
                    d[4] = alpha * s4[k];
                    d[5] = alpha * s5[k];
                    d += GEMM_MR;
                }
            } else {
                for (int64_t k = 0; k < kc; k++) {
                    int64_t r = 0;
                    for (; r < mr; r++) d[r] = alpha * src[r * p->lda + k];
                    for (; r < GEMM_MR; r++) d[r] = 0.0f;
                    d += GEMM_MR;
                }
            }
        } else {
            /* A is K x M: row k of the panel is contiguous in memory. */
            const float *src = p->A + p0 * p->lda + i0 + ir;
            for (int64_t k = 0; k < kc; k++) {
                const float *s = src + k * p->lda;
                int64_t r = 0;
                for (; r < mr; r++) d[r] = alpha * s[r];
                for (; r < GEMM_MR; r++) d[r] = 0.0f;
                d += GEMM_MR;
            }
        }
    }
}

/* B[p0:p0+kc, j0:j0+nc] -> NR-column panels, each kc x NR (k-major),
 * columns past nc zero. */
static void pack_b(const gemm_prob *p, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                   float *restrict dst) {
    if (!p->tb) {
        /* A few rows of B at a time across every panel: B is read in
         * (nearly) sequential streams and each panel receives a contiguous
         * run. Walking one panel down all of k instead would touch a new
         * row of B (far apart) on every step. */
        int64_t full = nc / GEMM_NR * GEMM_NR;
        for (int64_t k0 = 0; k0 < kc; k0 += 8) {
            int64_t k1 = k0 + 8 < kc ? k0 + 8 : kc;
            const float *s0 = p->B + (p0 + k0) * p->ldb + j0;
            for (int64_t jr = 0; jr < full; jr += GEMM_NR) {
                float *d = dst + jr * kc + k0 * GEMM_NR;
                const float *s = s0 + jr;
                for (int64_t k = k0; k < k1; k++) {
                    memcpy(d, s, GEMM_NR * sizeof(float));
                    d += GEMM_NR;
                    s += p->ldb;
                }
            }
            if (full < nc) {
                float *d = dst + full * kc + k0 * GEMM_NR;
                const float *s = s0 + full;
                for (int64_t k = k0; k < k1; k++) {
                    int64_t j = 0;
                    for (; j < nc - full; j++) d[j] = s[j];
                    for (; j < GEMM_NR; j++) d[j] = 0.0f;
                    d += GEMM_NR;
                    s += p->ldb;
                }
            }
        }
        return;
    }
    for (int64_t jr = 0; jr < nc; jr += GEMM_NR) {
        int64_t nr = nc - jr < GEMM_NR ? nc - jr : GEMM_NR;
        float *d = dst + jr * kc;
        /* B is N x K: column j of op(B) is row j of B, contiguous in k. */
        const float *src = p->B + (j0 + jr) * p->ldb + p0;
        for (int64_t j = 0; j < nr; j++) {
            const float *s = src + j * p->ldb;
            for (int64_t k = 0; k < kc; k++) d[k * GEMM_NR + j] = s[k];
        }
        for (int64_t j = nr; j < GEMM_NR; j++)
            for (int64_t k = 0; k < kc; k++) d[k * GEMM_NR + j] = 0.0f;
    }
}

/* ---- serial blocked algorithm on C[m0:m1, n0:n1] ------------------------ */

static void gemm_blocked(const gemm_prob *p, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                         float *packA, float *packB) {
    for (int64_t jc = n0; jc < n1; jc += GEMM_NC) {
        int64_t nc = n1 - jc < GEMM_NC ? n1 - jc : GEMM_NC;
        for (int64_t pc = 0; pc < p->K; pc += GEMM_KC) {
            int64_t kc = p->K - pc < GEMM_KC ? p->K - pc : GEMM_KC;
            float beta = pc == 0 ? p->beta : 1.0f;
            pack_b(p, pc, kc, jc, nc, packB);
            for (int64_t ic = m0; ic < m1; ic += GEMM_MC) {
                int64_t mc = m1 - ic < GEMM_MC ? m1 - ic : GEMM_MC;
                pack_a(p, ic, mc, pc, kc, packA);
                for (int64_t jr = 0; jr < nc; jr += GEMM_NR) {
                    int nr = (int)(nc - jr < GEMM_NR ? nc - jr : GEMM_NR);
                    const float *bp = packB + jr * kc;
                    for (int64_t ir = 0; ir < mc; ir += GEMM_MR) {
                        int mr = (int)(mc - ir < GEMM_MR ? mc - ir : GEMM_MR);
                        p->ukr(kc, packA + ir * kc, bp, p->C + (ic + ir) * p->ldc + jc + jr, p->ldc,
                               beta, mr, nr);
                    }
                }
            }
        }
    }
}

/* ---- small and matrix-vector cases -------------------------------------- */

static void gemm_naive(const gemm_prob *p) {
    for (int64_t i = 0; i < p->M; i++) {
        float *c = p->C + i * p->ldc;
        for (int64_t j = 0; j < p->N; j++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < p->K; k++) acc += gemm_a(p, i, k) * gemm_b(p, k, j);
            c[j] = p->beta == 0.0f ? p->alpha * acc : p->alpha * acc + p->beta * c[j];
        }
    }
}

/* sum x[i*sx] * y[i] for i < n (y contiguous). */
static float dot_f32(const float *x, int64_t sx, const float *y, int64_t n) {
    if (sx == 1) {
        float acc[16] = {0};
        int64_t i = 0;
        for (; i + 16 <= n; i += 16)
            for (int j = 0; j < 16; j++) acc[j] += x[i + j] * y[i + j];
        float s = 0.0f;
        for (; i < n; i++) s += x[i] * y[i];
        for (int j = 0; j < 16; j++) s += acc[j];
        return s;
    }
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += x[i * sx] * y[i];
    return s;
}

/* Matrix-vector products are split over outputs in chunks of this size,
 * over several threads when they read at least GEMV_MIN_SPLIT elements of
 * the matrix (memory-bound: two cores stream a network head's 8 MB of
 * weights about twice as fast as one; below this a thread's wake-up costs
 * more than it saves). */
#define GEMV_GRAIN 64
#define GEMV_MIN_SPLIT (1 << 17)

typedef struct gemv_ctx {
    const gemm_prob *p;
} gemv_ctx;

#if defined(__x86_64__) && defined(__GNUC__)
#include "backends/cpu/kernels/simd_mask.h"
#define HAVE_GEMV512 1
#define AVX512 __attribute__((target("avx512f")))

/* M == 1, B given as N rows of K (tb), A contiguous: c[j] = alpha * dot(A,
 * B row j) (+ beta c[j]) with four 16-float FMA chains per row. The classic
 * network head (1 x 1280 or 2048 times 1000 rows) streams its weights
 * once; the baseline build's 4-wide loop could not keep up with memory when
 * they come from DRAM (MobileNetV2's head: 0.44 ms cold, 0.2 ms warm). */
static AVX512 void gemv_row_tb512(const gemm_prob *p, int64_t j0, int64_t j1) {
    const float *a = p->A;
    const int64_t K = p->K;
    for (int64_t j = j0; j < j1; j++) {
        const float *b = p->B + j * p->ldb;
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        int64_t k = 0;
        for (; k + 64 <= K; k += 64) {
            s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), s0);
            s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k + 16), _mm512_loadu_ps(b + k + 16), s1);
            s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k + 32), _mm512_loadu_ps(b + k + 32), s2);
            s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k + 48), _mm512_loadu_ps(b + k + 48), s3);
        }
        for (; k < K; k += 16) {
            __mmask16 m = kiln__mask16(K - k);
            s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), _mm512_maskz_loadu_ps(m, b + k), s0);
        }
        __m512 s = _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3));
        float v = p->alpha * _mm512_reduce_add_ps(s);
        p->C[j] = p->beta == 0.0f ? v : v + p->beta * p->C[j];
    }
}

/* M == 1, B given as K rows of N: c[j0:j1] = beta c + sum_k alpha A(0,k)
 * B[k, j0:j1], 64 outputs at a time kept in registers over all of K. */
static AVX512 void gemv_row_nb512(const gemm_prob *p, int64_t j0, int64_t j1) {
    const int64_t sa = p->ta ? p->lda : 1;
    for (int64_t jb = j0; jb < j1; jb += 64) {
        int64_t left = j1 - jb;
        __mmask16 m[4];
        __m512 acc[4];
        for (int q = 0; q < 4; q++) {
            m[q] = kiln__mask16(left - 16 * q);
            acc[q] = _mm512_setzero_ps();
            if (p->beta != 0.0f) /* else C is not read (it may hold anything) */
                acc[q] = _mm512_mul_ps(_mm512_set1_ps(p->beta), _mm512_maskz_loadu_ps(m[q], p->C + jb + 16 * q));
        }
        for (int64_t k = 0; k < p->K; k++) {
            const __m512 s = _mm512_set1_ps(p->alpha * p->A[k * sa]);
            const float *b = p->B + k * p->ldb + jb;
            for (int q = 0; q < 4; q++)
                acc[q] = _mm512_fmadd_ps(s, _mm512_maskz_loadu_ps(m[q], b + 16 * q), acc[q]);
        }
        for (int q = 0; q < 4; q++) _mm512_mask_storeu_ps(p->C + jb + 16 * q, m[q], acc[q]);
    }
}
#endif

/* M == 1: c[j] for j in [j0, j1). */
static void gemv_row(void *vctx, int64_t j0, int64_t j1) {
    const gemm_prob *p = ((const gemv_ctx *)vctx)->p;
    float *c = p->C;
    const int64_t sa = p->ta ? p->lda : 1; /* stride of A(0, k) */
#ifdef HAVE_GEMV512
    if (p->gemv512 && (!p->tb || sa == 1)) {
        if (p->tb) gemv_row_tb512(p, j0, j1);
        else gemv_row_nb512(p, j0, j1);
        return;
    }
#endif
    if (p->tb) {
        /* c[j] = dot(A row, B row j) */
        for (int64_t j = j0; j < j1; j++) {
            float v = p->alpha * dot_f32(p->A, sa, p->B + j * p->ldb, p->K);
            c[j] = p->beta == 0.0f ? v : v + p->beta * c[j];
        }
        return;
    }
    /* c[j0:j1] = beta*c + sum_k alpha*A(0,k) * B[k, j0:j1] */
    if (p->beta == 0.0f)
        for (int64_t j = j0; j < j1; j++) c[j] = 0.0f;
    else if (p->beta != 1.0f)
        for (int64_t j = j0; j < j1; j++) c[j] *= p->beta;
    for (int64_t k = 0; k < p->K; k++) {
        const float s = p->alpha * p->A[k * sa];
        const float *restrict b = p->B + k * p->ldb;
        float *restrict cc = c;
        for (int64_t j = j0; j < j1; j++) cc[j] += s * b[j];
    }
}

/* N == 1: c[i*ldc] for i in [i0, i1). */
static void gemv_col(void *vctx, int64_t i0, int64_t i1) {
    const gemm_prob *p = ((const gemv_ctx *)vctx)->p;
    const int64_t sb = p->tb ? 1 : p->ldb; /* stride of B(k, 0) */
    if (!p->ta) {
        for (int64_t i = i0; i < i1; i++) {
            const float *arow = p->A + i * p->lda;
            float v = sb == 1 ? p->alpha * dot_f32(arow, 1, p->B, p->K)
                              : p->alpha * dot_f32(p->B, sb, arow, p->K);
            float *c = p->C + i * p->ldc;
            *c = p->beta == 0.0f ? v : v + p->beta * *c;
        }
        return;
    }
    /* A is K x M: c[i] = sum_k A[k, i] * b[k] */
    for (int64_t i = i0; i < i1; i++) {
        float *c = p->C + i * p->ldc;
        *c = p->beta == 0.0f ? 0.0f : p->beta * *c;
    }
    if (p->ldc == 1) {
        float *restrict c = p->C;
        for (int64_t k = 0; k < p->K; k++) {
            const float s = p->alpha * p->B[k * sb];
            const float *restrict a = p->A + k * p->lda;
            for (int64_t i = i0; i < i1; i++) c[i] += s * a[i];
        }
    } else {
        for (int64_t k = 0; k < p->K; k++) {
            const float s = p->alpha * p->B[k * sb];
            const float *a = p->A + k * p->lda;
            for (int64_t i = i0; i < i1; i++) p->C[i * p->ldc] += s * a[i];
        }
    }
}

/* ---- threaded driver ---------------------------------------------------- */

typedef struct gemm_task_ctx {
    const gemm_prob *p;
    bool split_n;      /* slices of N (else of M) */
    int64_t step;      /* slice size (multiple of NR or MR) */
    float *buf;        /* per task: packA then packB */
    size_t a_floats, b_floats;
} gemm_task_ctx;

static void gemm_task(void *vctx, int64_t t0, int64_t t1) {
    const gemm_task_ctx *t = vctx;
    const gemm_prob *p = t->p;
    for (int64_t ti = t0; ti < t1; ti++) {
        float *packA = t->buf + (size_t)ti * (t->a_floats + t->b_floats);
        float *packB = packA + t->a_floats;
        int64_t lo = ti * t->step;
        if (t->split_n) {
            int64_t hi = lo + t->step < p->N ? lo + t->step : p->N;
            if (lo < hi) gemm_blocked(p, 0, p->M, lo, hi, packA, packB);
        } else {
            int64_t hi = lo + t->step < p->M ? lo + t->step : p->M;
            if (lo < hi) gemm_blocked(p, lo, hi, 0, p->N, packA, packB);
        }
    }
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

kiln_status kiln__sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha,
                        const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                        float *C, int64_t ldc, kiln_pool *pool) {
    if (M < 0 || N < 0 || K < 0)
        return KILN_FAIL(KILN_ERR_INTERNAL, "sgemm: negative size %lldx%lldx%lld", (long long)M,
                         (long long)N, (long long)K);
    if (M == 0 || N == 0) return KILN_OK;
    if (K == 0 || alpha == 0.0f) {
        for (int64_t i = 0; i < M; i++) {
            float *c = C + i * ldc;
            if (beta == 0.0f)
                for (int64_t j = 0; j < N; j++) c[j] = 0.0f;
            else if (beta != 1.0f)
                for (int64_t j = 0; j < N; j++) c[j] *= beta;
        }
        return KILN_OK;
    }
    gemm_prob p = {.ta = transA, .tb = transB, .M = M, .N = N, .K = K, .alpha = alpha,
                   .beta = beta, .A = A, .lda = lda, .B = B, .ldb = ldb, .C = C, .ldc = ldc,
                   .ukr = NULL};
    double work = (double)M * (double)N * (double)K;
    if (work < GEMM_SMALL) {
        gemm_naive(&p);
        return KILN_OK;
    }
    int nt = kiln__pool_threads(pool);
    if (M == 1 || N == 1) {
#ifdef HAVE_GEMV512
        p.gemv512 = M == 1 && __builtin_cpu_supports("avx512f");
#endif
        gemv_ctx g = {&p};
        int64_t n = M == 1 ? N : M;
        int64_t grain = GEMV_GRAIN;
        if (nt > 1 && work < (double)GEMV_MIN_SPLIT) grain = n;
        kiln__parallel_for(nt > 1 ? pool : NULL, n, grain, M == 1 ? gemv_row : gemv_col, &g);
        return KILN_OK;
    }
    p.ukr = gemm_pick_kernel(NULL);

    /* How many independent slices. */
    int64_t tasks = 1;
    if (nt > 1) {
        double per = (double)GEMM_MIN_FLOPS_PER_TASK;
        int64_t by_work = (int64_t)(2.0 * work / per);
        tasks = min64(nt, by_work < 1 ? 1 : by_work);
    }
    int64_t m_tiles = (M + GEMM_MR - 1) / GEMM_MR, n_tiles = (N + GEMM_NR - 1) / GEMM_NR;
    bool split_n = n_tiles >= m_tiles;
    int64_t step;
    if (split_n) {
        tasks = min64(tasks, n_tiles);
        step = round_up((N + tasks - 1) / tasks, GEMM_NR);
        tasks = (N + step - 1) / step;
    } else {
        tasks = min64(tasks, m_tiles);
        step = round_up((M + tasks - 1) / tasks, GEMM_MR);
        tasks = (M + step - 1) / step;
    }
    int64_t m_slice = split_n ? M : step, n_slice = split_n ? step : N;
    int64_t kc = min64(K, GEMM_KC);
    size_t a_floats = (size_t)(kc * min64(GEMM_MC, round_up(m_slice, GEMM_MR)));
    size_t b_floats = (size_t)(kc * min64(GEMM_NC, round_up(n_slice, GEMM_NR)));
    /* keep every buffer 64-byte aligned */
    a_floats = (size_t)round_up((int64_t)a_floats, 16);
    b_floats = (size_t)round_up((int64_t)b_floats, 16);
    float *buf = kiln__aligned_alloc((size_t)tasks * (a_floats + b_floats) * sizeof(float));
    if (!buf)
        return KILN_FAIL(KILN_ERR_OUT_OF_MEMORY, "sgemm %lldx%lldx%lld: out of memory for packing",
                         (long long)M, (long long)N, (long long)K);
    gemm_task_ctx t = {.p = &p, .split_n = split_n, .step = step, .buf = buf,
                       .a_floats = a_floats, .b_floats = b_floats};
    if (tasks == 1)
        gemm_task(&t, 0, 1);
    else
        kiln__parallel_for(pool, tasks, 1, gemm_task, &t);
    kiln__aligned_free(buf);
    return KILN_OK;
}
