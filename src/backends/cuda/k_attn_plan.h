/* k_attn_plan.h -- how the tensor-core attention kernel (k_attn.cu) shares
 * out its work: a C header (plain types) so that the host code, the kernel's
 * launcher and the tests see one rule.
 *
 * A CTA takes 16 * q_warps query rows of one (batch, head) and splits each
 * step of keys over k_warps warps (slice keys each). Large batches: 32 or 64
 * rows per CTA, one warp per 16 rows, every warp over all keys (k_warps 1):
 * the fewest K/V reads. Small batches (the 32-row split would not fill two
 * waves of the multiprocessors; BERT-base at batch 1 has 12 heads x 4 tiles
 * = 48 CTAs on the H200's 132): 16 rows per CTA and 4 warps over the keys,
 * so b1 x 12 heads x 128 rows gives 96 CTAs of 4 warps, each warp with a
 * quarter of the serial chain (the kernel is latency-bound there). */
#ifndef KILN_K_ATTN_PLAN_H
#define KILN_K_ATTN_PLAN_H

#include <stdint.h>

typedef struct kcu_attn_plan {
    int q_warps; /* 16-row groups per CTA */
    int k_warps; /* key slices per CTA (1: no merge) */
    int slice;   /* keys per warp and step */
    int64_t ctas;
} kcu_attn_plan;

/* split: -1 choose, 0 never split the keys, 1 always (KILN_CUDA_ATTN_SPLIT) */
static inline kcu_attn_plan kcu_attn_choose(int64_t B, int64_t H, int64_t Sq, int64_t dmax, int sm_count,
                                            int split) {
    kcu_attn_plan p = {2, 1, 64, 0};
    const int64_t bh = B * H, sm = sm_count > 0 ? sm_count : 1;
    const int64_t ctas32 = bh * ((Sq + 31) / 32), ctas64 = bh * ((Sq + 63) / 64);
    if (split > 0 || (split < 0 && ctas32 < 2 * sm)) {
        p.q_warps = 1;
        p.k_warps = 4;
        p.slice = dmax > 64 ? 16 : 32; /* two K/V stages of 64 or 128 keys */
    } else if (ctas64 >= 2 * sm && Sq > 32) {
        p.q_warps = 4;
    }
    p.ctas = bh * ((Sq + 16 * p.q_warps - 1) / (16 * p.q_warps));
    return p;
}

#endif
