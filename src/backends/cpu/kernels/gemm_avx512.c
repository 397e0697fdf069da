/* gemm_avx512.c -- kiln's own AVX-512 matrix product with prepacked weights,
 * for kiln.FusedMatMul (tactic KILN_FMM_TACTIC_AVX512):
 *
 *     C[M, N] = act(A[M, K] B[K, N] + bias)
 *
 * B is packed once into panels of 32 columns ([N/32][K][32], the last panel
 * zero padded), so that one k step of a panel is two aligned vectors. The
 * micro-kernel keeps a 12-row x 32-column tile of C in 24 zmm registers over
 * the whole K (A elements broadcast from their rows), then adds the bias,
 * stores (masked at the right edge) and applies the activation on the rows
 * while they are in L1. Threads take whole panels, so each streams only its
 * share of the weights. Compiled for x86-64 with target attributes; callers
 * check kiln__sgemm512_available() (AVX-512F) first. */
#include "backends/cpu/kernels/fused_transformer_cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define INLINE __attribute__((always_inline)) inline
#define NR 32
#define MR 12
/* K is not blocked: a panel (K x 32 floats) and a row tile of A stay in L2;
 * blocking K for L1 measured slower on BERT's shapes (K = 768, 3072). */
#define KC (INT64_MAX / 2)

bool kiln__sgemm512_available(void) { return __builtin_cpu_supports("avx512f"); }

size_t kiln__sgemm512_packed_floats(int64_t K, int64_t N) { return (size_t)((N + NR - 1) / NR * NR * K); }

void kiln__sgemm512_pack(const float *B, bool trans_b, int64_t K, int64_t N, float *Bp) {
    int64_t np = (N + NR - 1) / NR;
    for (int64_t p = 0; p < np; p++) {
        float *dst = Bp + p * K * NR;
        int64_t n0 = p * NR, nn = N - n0 < NR ? N - n0 : NR;
        for (int64_t k = 0; k < K; k++) {
            float *d = dst + k * NR;
            if (trans_b)
                for (int64_t j = 0; j < nn; j++) d[j] = B[(n0 + j) * K + k];
            else
                memcpy(d, B + k * N + n0, sizeof(float) * (size_t)nn);
            for (int64_t j = nn; j < NR; j++) d[j] = 0.0f;
        }
    }
}

/* Rows [0, R) x one panel, k steps [0, K) of A and P; C accumulated into
 * unless `first`; the bias added on the `last` pass. */
static AVX512 INLINE void tile(int R, const float *A, int64_t lda, const float *P, int64_t K, const float *bias,
                               float *C, int64_t ldc, __mmask16 m0, __mmask16 m1, bool first) {
    __m512 acc[MR][2];
    for (int r = 0; r < R; r++) {
        if (first) {
            acc[r][0] = acc[r][1] = _mm512_setzero_ps();
        } else {
            acc[r][0] = _mm512_maskz_loadu_ps(m0, C + r * ldc);
            acc[r][1] = _mm512_maskz_loadu_ps(m1, C + r * ldc + 16);
        }
    }
    for (int64_t k = 0; k < K; k++) {
        __m512 b0 = _mm512_load_ps(P + k * NR), b1 = _mm512_load_ps(P + k * NR + 16);
        for (int r = 0; r < R; r++) {
            __m512 a = _mm512_set1_ps(A[r * lda + k]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    __m512 c0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    __m512 c1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    for (int r = 0; r < R; r++) {
        _mm512_mask_storeu_ps(C + r * ldc, m0, _mm512_add_ps(acc[r][0], c0));
        _mm512_mask_storeu_ps(C + r * ldc + 16, m1, _mm512_add_ps(acc[r][1], c1));
    }
}

static AVX512 void tile_rows(int R, const float *A, int64_t lda, const float *P, int64_t K, const float *bias,
                             float *C, int64_t ldc, __mmask16 m0, __mmask16 m1, bool f) {
    switch (R) {
    case 12: tile(12, A, lda, P, K, bias, C, ldc, m0, m1, f); break;
    case 11: tile(11, A, lda, P, K, bias, C, ldc, m0, m1, f); break;
    case 10: tile(10, A, lda, P, K, bias, C, ldc, m0, m1, f); break;
    case 9: tile(9, A, lda, P, K, bias, C, ldc, m0, m1, f); break;
    case 8: tile(8, A, lda, P, K, bias, C, ldc, m0, m1, f); break;
    case 7: tile(7, A, lda, P, K, bias, C, ldc, m0, m1, f); break;
    case 6: tile(6, A, lda, P, K, bias, C, ldc, m0, m1, f); break;
    case 5: tile(5, A, lda, P, K, bias, C, ldc, m0, m1, f); break;
    case 4: tile(4, A, lda, P, K, bias, C, ldc, m0, m1, f); break;
    case 3: tile(3, A, lda, P, K, bias, C, ldc, m0, m1, f); break;
    case 2: tile(2, A, lda, P, K, bias, C, ldc, m0, m1, f); break;
    default: tile(1, A, lda, P, K, bias, C, ldc, m0, m1, f); break;
    }
}

typedef struct run_ctx {
    const float *A, *Bp, *bias, *res;
    float *C;
    int64_t M, K, N;
    int act;
} run_ctx;

static AVX512 void run_panels(void *vc, int64_t p0, int64_t p1) {
    const run_ctx *c = vc;
    for (int64_t p = p0; p < p1; p++) {
        int64_t n0 = p * NR, nn = c->N - n0 < NR ? c->N - n0 : NR;
        __mmask16 m0 = nn >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nn) - 1u);
        __mmask16 m1 = nn >= 32 ? (__mmask16)0xffff : nn > 16 ? (__mmask16)((1u << (nn - 16)) - 1u) : 0;
        const float *P = c->Bp + p * c->K * NR;
        for (int64_t k0 = 0; k0 < c->K; k0 += KC) {
            int64_t kl = c->K - k0 < KC ? c->K - k0 : KC;
            bool last = k0 + kl == c->K;
            for (int64_t r = 0; r < c->M; r += MR) {
                int R = c->M - r < MR ? (int)(c->M - r) : MR;
                tile_rows(R, c->A + r * c->K + k0, c->K, P + k0 * NR, kl, last && c->bias ? c->bias + n0 : NULL,
                          c->C + r * c->N + n0, c->N, m0, m1, k0 == 0);
            }
        }
        if (c->act != KILN_FACT_NONE || c->res)
            kiln__fmm_epilogue(c->C + n0, c->N, c->M, nn, NULL, c->res ? c->res + n0 : NULL, c->N, c->act);
    }
}

void kiln__sgemm512_run(const float *A, int64_t M, int64_t K, int64_t N, const float *Bp, const float *bias,
                        const float *res, int act, float *C, kiln_pool *pool) {
    run_ctx c = {.A = A, .Bp = Bp, .bias = bias, .res = res, .C = C, .M = M, .K = K, .N = N, .act = act};
    kiln__parallel_for(pool, (N + NR - 1) / NR, 1, run_panels, &c);
}

#else

bool kiln__sgemm512_available(void) { return false; }
size_t kiln__sgemm512_packed_floats(int64_t K, int64_t N) {
    (void)K, (void)N;
    return 0;
}
void kiln__sgemm512_pack(const float *B, bool trans_b, int64_t K, int64_t N, float *Bp) {
    (void)B, (void)trans_b, (void)K, (void)N, (void)Bp;
}
void kiln__sgemm512_run(const float *A, int64_t M, int64_t K, int64_t N, const float *Bp, const float *bias,
                        const float *res, int act, float *C, kiln_pool *pool) {
    (void)A, (void)M, (void)K, (void)N, (void)Bp, (void)bias, (void)res, (void)act, (void)C, (void)pool;
}

#endif
