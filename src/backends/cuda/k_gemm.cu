/* k_gemm.cu -- a plain shared-memory tiled GEMM: the fallback of the
 * cuBLASLt path (no algorithm for a layout, K == 0). Correct first. */
#include "k_common.cuh"

namespace kcu {

#define KCU_GT 16

template <typename T>
__global__ void __launch_bounds__(KCU_GT * KCU_GT)
    k_gemm_simple(int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t batch, double alpha,
                  const T *__restrict__ A, int64_t lda, int64_t sa, const T *__restrict__ B,
                  int64_t ldb, int64_t sb, double beta, T *__restrict__ C, int64_t ldc, int64_t sc) {
    typedef typename Num<T>::C Acc;
    __shared__ Acc As[KCU_GT][KCU_GT + 1], Bs[KCU_GT][KCU_GT + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t mt = (M + KCU_GT - 1) / KCU_GT, nt = (N + KCU_GT - 1) / KCU_GT;
    for (int64_t b = blockIdx.z; b < batch; b += gridDim.z)
        for (int64_t bm = blockIdx.y; bm < mt; bm += gridDim.y)
            for (int64_t bn = blockIdx.x; bn < nt; bn += gridDim.x) {
                const T *a = A + b * sa;
                const T *bb = B + b * sb;
                const int64_t i = bm * KCU_GT + ty, j = bn * KCU_GT + tx;
                Acc acc = 0;
                for (int64_t k0 = 0; k0 < K; k0 += KCU_GT) {
                    int64_t ka = k0 + tx, kb = k0 + ty;
                    As[ty][tx] = (i < M && ka < K)
                                     ? Num<T>::load(ta ? a[ka * lda + i] : a[i * lda + ka])
                                     : Acc(0);
                    Bs[ty][tx] = (kb < K && j < N)
                                     ? Num<T>::load(tb ? bb[j * ldb + kb] : bb[kb * ldb + j])
                                     : Acc(0);
                    __syncthreads();
#pragma unroll
                    for (int k = 0; k < KCU_GT; k++) acc += As[ty][k] * Bs[k][tx];
                    __syncthreads();
                }
                if (i < M && j < N) {
                    T *c = C + b * sc + i * ldc + j;
                    Acc v = (Acc)alpha * acc;
                    if (beta != 0.0) v += (Acc)beta * Num<T>::load(*c);
                    *c = Num<T>::store(v);
                }
            }
}

} /* namespace kcu */

using namespace kcu;

extern "C" cudaError_t kcu_gemm_simple(kiln_dtype t, int ta, int tb, int64_t M, int64_t N,
                                       int64_t K, int64_t batch, double alpha, const void *A,
                                       int64_t lda, int64_t sa, const void *B, int64_t ldb,
                                       int64_t sb, double beta, void *C, int64_t ldc, int64_t sc,
                                       cudaStream_t stream) {
    if (M <= 0 || N <= 0 || batch <= 0) return cudaSuccess;
    int64_t mt = (M + KCU_GT - 1) / KCU_GT, nt = (N + KCU_GT - 1) / KCU_GT;
    dim3 grid((unsigned)(nt < 65535 ? nt : 65535), (unsigned)(mt < 65535 ? mt : 65535),
              (unsigned)(batch < 65535 ? batch : 65535));
    dim3 block(KCU_GT, KCU_GT);
    KCU_SWITCH_FLOAT(t, {
        k_gemm_simple<T_><<<grid, block, 0, stream>>>(ta, tb, M, N, K, batch, alpha, (const T_ *)A,
                                                      lda, sa, (const T_ *)B, ldb, sb, beta,
                                                      (T_ *)C, ldc, sc);
        return cudaGetLastError();
    })
    return cudaErrorInvalidValue;
}
