/* k_tensor.cu -- data movement: strided copy (Transpose, Slice, Expand,
 * Concat, Split, Tile...), tiled 2-D transpose, Gather, fill; the probe
 * that checks the build's kernels run on the device. */
#include "k_common.cuh"

namespace kcu {

/* ---- strided copy ---------------------------------------------------------------- */

template <typename E, typename IdxT>
__global__ void __launch_bounds__(KCU_THREADS)
    k_copy(E *__restrict__ dst, const E *__restrict__ src, const __grid_constant__ kcu_copy c) {
    typedef typename std::make_unsigned<IdxT>::type UIdx;
    KCU_GRID_STRIDE(i, c.n) {
        UIdx rem = (UIdx)i;
        IdxT so = 0, dof = 0;
        for (int d = c.rank - 1; d > 0; d--) {
            UIdx dim = (UIdx)c.dims[d];
            IdxT q = (IdxT)(rem % dim);
            rem /= dim;
            so += q * (IdxT)c.src_st[d];
            if (!c.dst_dense) dof += q * (IdxT)c.dst_st[d];
        }
        if (c.rank > 0) {
            so += (IdxT)rem * (IdxT)c.src_st[0];
            if (!c.dst_dense) dof += (IdxT)rem * (IdxT)c.dst_st[0];
        }
        dst[c.dst_dense ? (IdxT)i : dof] = src[so];
    }
}

template <typename E>
static cudaError_t copy_launch(const kcu_copy *c, void *dst, const void *src, cudaStream_t st) {
    if (c->idx32)
        k_copy<E, int32_t><<<grid_for(c->n), KCU_THREADS, 0, st>>>((E *)dst, (const E *)src, *c);
    else
        k_copy<E, int64_t><<<grid_for(c->n), KCU_THREADS, 0, st>>>((E *)dst, (const E *)src, *c);
    return cudaGetLastError();
}

/* ---- tiled transpose ------------------------------------------------------------------ */

#define KCU_TILE 32
#define KCU_TILE_ROWS 8

template <typename E>
__global__ void __launch_bounds__(KCU_TILE * KCU_TILE_ROWS)
    k_transpose2d(E *__restrict__ dst, const E *__restrict__ src, int64_t P, int64_t Q, int64_t sq,
                  int64_t batch, const __grid_constant__ kcu_copy bc) {
    __shared__ E tile[KCU_TILE][KCU_TILE + 1];
    const int64_t ptiles = (P + KCU_TILE - 1) / KCU_TILE;
    const int64_t qtiles = (Q + KCU_TILE - 1) / KCU_TILE;
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
        /* source offset of batch entry b */
        int64_t boff = 0, rem = b;
        for (int d = bc.rank - 1; d >= 0; d--) {
            int64_t q = rem % bc.dims[d];
            rem /= bc.dims[d];
            boff += q * bc.src_st[d];
        }
        const E *s = src + boff;
        E *o = dst + b * P * Q;
        for (int64_t pt = blockIdx.y; pt < ptiles; pt += gridDim.y) {
            for (int64_t qt = blockIdx.x; qt < qtiles; qt += gridDim.x) {
                const int64_t p0 = pt * KCU_TILE, q0 = qt * KCU_TILE;
                /* read: contiguous along p */
                for (int r = ty; r < KCU_TILE; r += KCU_TILE_ROWS) {
                    int64_t p = p0 + tx, q = q0 + r;
                    if (p < P && q < Q) tile[r][tx] = s[q * sq + p];
                }
                __syncthreads();
                /* write: contiguous along q */
                for (int r = ty; r < KCU_TILE; r += KCU_TILE_ROWS) {
                    int64_t p = p0 + r, q = q0 + tx;
                    if (p < P && q < Q) o[p * Q + q] = tile[tx][r];
                }
                __syncthreads();
            }
        }
    }
}

/* ---- gather -------------------------------------------------------------------------- */

template <typename E, typename I>
__global__ void __launch_bounds__(KCU_THREADS)
    k_gather(const E *__restrict__ x, const I *__restrict__ ind, E *__restrict__ y, int64_t total,
             int64_t axis_dim, int64_t n_ind, int64_t inner, int *oob, int tag) {
    KCU_GRID_STRIDE(i, total) {
        int64_t k = i % inner, t = i / inner;
        int64_t j = t % n_ind, o = t / n_ind;
        int64_t v = (int64_t)ind[j];
        if (v < 0) v += axis_dim;
        if (v < 0 || v >= axis_dim) {
            y[i] = E{};
            if (oob) *(volatile int *)oob = tag; /* (any writer's tag will do) */
        } else {
            y[i] = x[(o * axis_dim + v) * inner + k];
        }
    }
}

template <typename E>
static cudaError_t gather_launch(kiln_dtype it, const void *x, const void *ind, void *y,
                                 int64_t outer, int64_t axis_dim, int64_t n_ind, int64_t inner,
                                 int *oob, int tag, cudaStream_t st) {
    int64_t total = outer * n_ind * inner;
    if (it == KILN_DTYPE_INT64)
        k_gather<E, int64_t><<<grid_for(total), KCU_THREADS, 0, st>>>(
            (const E *)x, (const int64_t *)ind, (E *)y, total, axis_dim, n_ind, inner, oob, tag);
    else if (it == KILN_DTYPE_INT32)
        k_gather<E, int32_t><<<grid_for(total), KCU_THREADS, 0, st>>>(
            (const E *)x, (const int32_t *)ind, (E *)y, total, axis_dim, n_ind, inner, oob, tag);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

/* ---- fill ---------------------------------------------------------------------------------- */

template <typename E> __global__ void __launch_bounds__(KCU_THREADS) k_fill(E *dst, int64_t n, E v) {
    KCU_GRID_STRIDE(i, n) dst[i] = v;
}

__global__ void k_write_i64(int64_t *dst, int n, const __grid_constant__ kcu_i64s v) {
    if ((int)threadIdx.x < n) dst[threadIdx.x] = v.v[threadIdx.x];
}

template <typename E>
static cudaError_t fill_launch(void *dst, int64_t n, const void *val, cudaStream_t st) {
    E v;
    memcpy(&v, val, sizeof v);
    k_fill<E><<<grid_for(n), KCU_THREADS, 0, st>>>((E *)dst, n, v);
    return cudaGetLastError();
}

} /* namespace kcu */

using namespace kcu;

extern "C" {

cudaError_t kcu_strided_copy(size_t es, const kcu_copy *c, void *dst, const void *src,
                             cudaStream_t stream) {
    if (c->n <= 0) return cudaSuccess;
    switch (es) {
    case 1: return copy_launch<uint8_t>(c, dst, src, stream);
    case 2: return copy_launch<uint16_t>(c, dst, src, stream);
    case 4: return copy_launch<uint32_t>(c, dst, src, stream);
    case 8: return copy_launch<uint64_t>(c, dst, src, stream);
    case 16: return copy_launch<uint4>(c, dst, src, stream);
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t kcu_transpose2d(size_t es, const kcu_copy *batch, int64_t P, int64_t Q, int64_t sq,
                            void *dst, const void *src, cudaStream_t stream) {
    int64_t nb = 1;
    for (int d = 0; d < batch->rank; d++) nb *= batch->dims[d];
    if (nb <= 0 || P <= 0 || Q <= 0) return cudaSuccess;
    int64_t qt = (Q + KCU_TILE - 1) / KCU_TILE, pt = (P + KCU_TILE - 1) / KCU_TILE;
    dim3 grid((unsigned)(qt < 65535 ? qt : 65535), (unsigned)(pt < 65535 ? pt : 65535),
              (unsigned)(nb < 65535 ? nb : 65535));
    dim3 block(KCU_TILE, KCU_TILE_ROWS);
    switch (es) {
#define KCU_T2D(ES)                                                                          \
    case ES:                                                                                 \
        k_transpose2d<Bytes<ES>::T><<<grid, block, 0, stream>>>(                             \
            (Bytes<ES>::T *)dst, (const Bytes<ES>::T *)src, P, Q, sq, nb, *batch);           \
        break;
        KCU_T2D(1) KCU_T2D(2) KCU_T2D(4) KCU_T2D(8)
#undef KCU_T2D
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

cudaError_t kcu_gather(size_t es, kiln_dtype idx_t, const void *x, const void *ind, void *y,
                       int64_t outer, int64_t axis_dim, int64_t n_ind, int64_t inner, int *oob,
                       int tag, cudaStream_t stream) {
    if (outer <= 0 || n_ind <= 0 || inner <= 0) return cudaSuccess;
    switch (es) {
#define KCU_GATHER(ES, T) \
    case ES: return gather_launch<T>(idx_t, x, ind, y, outer, axis_dim, n_ind, inner, oob, tag, stream);
        KCU_GATHER(1, uint8_t) KCU_GATHER(2, uint16_t) KCU_GATHER(4, uint32_t) KCU_GATHER(8, uint64_t)
        KCU_GATHER(16, uint4)
#undef KCU_GATHER
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t kcu_fill(size_t es, void *dst, int64_t n, const void *val, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    switch (es) {
    case 1: return fill_launch<uint8_t>(dst, n, val, stream);
    case 2: return fill_launch<uint16_t>(dst, n, val, stream);
    case 4: return fill_launch<uint32_t>(dst, n, val, stream);
    case 8: return fill_launch<uint64_t>(dst, n, val, stream);
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t kcu_write_i64(int64_t *dst, int n, const kcu_i64s *vals, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (n > KILN_MAX_RANK) return cudaErrorInvalidValue;
    k_write_i64<<<1, 32, 0, stream>>>(dst, n, *vals);
    return cudaGetLastError();
}

cudaError_t kcu_probe(void) {
    cudaFuncAttributes attr;
    return cudaFuncGetAttributes(&attr, k_fill<uint8_t>);
}

} /* extern "C" */
