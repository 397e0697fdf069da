/* test_cuda_plan.c -- how the tensor-core attention kernel shares out its
 * work (src/backends/cuda/k_attn_plan.h), checked without a GPU: BERT-base
 * at batch 1 on an H200 (132 multiprocessors) must fill the machine (the
 * latency-bound case: 16 query rows per CTA, 4 warps over the keys), large
 * batches keep the 64-row tiles that read K and V the fewest times, and the
 * KILN_CUDA_ATTN_SPLIT override wins both ways. */
#include "backends/cuda/k_attn_plan.h"
#include "test.h"

enum { H200_SMS = 132 };

TEST(small_batch_splits_the_keys) {
    /* BERT-base: 12 heads of 64, 128 tokens */
    kcu_attn_plan p = kcu_attn_choose(1, 12, 128, 64, H200_SMS, -1);
    CHECK(p.q_warps == 1 && p.k_warps == 4 && p.slice == 32);
    CHECK(p.ctas == 96 && p.ctas * p.q_warps * p.k_warps >= 2 * H200_SMS);
    p = kcu_attn_choose(4, 12, 128, 64, H200_SMS, -1); /* 192 CTAs of 32 rows: under two waves */
    CHECK(p.k_warps == 4 && p.ctas == 384);
    p = kcu_attn_choose(1, 16, 77, 128, H200_SMS, -1); /* head size 128: slices of 16 keys */
    CHECK(p.k_warps == 4 && p.slice == 16 && p.ctas == 16 * 5);
    p = kcu_attn_choose(1, 1, 1, 64, H200_SMS, -1); /* one query row */
    CHECK(p.k_warps == 4 && p.ctas == 1);
}

TEST(large_batch_keeps_tiles) {
    kcu_attn_plan p = kcu_attn_choose(64, 12, 128, 64, H200_SMS, -1);
    CHECK(p.q_warps == 4 && p.k_warps == 1 && p.slice == 64 && p.ctas == 64 * 12 * 2);
    p = kcu_attn_choose(8, 12, 128, 64, H200_SMS, -1); /* 384 CTAs of 32 rows (192 of 64: too few) */
    CHECK(p.k_warps == 1 && p.q_warps == 2 && p.ctas == 384);
    p = kcu_attn_choose(64, 12, 32, 64, H200_SMS, -1); /* short sequences: 32-row tiles */
    CHECK(p.k_warps == 1 && p.q_warps == 2);
}

TEST(override) {
    kcu_attn_plan p = kcu_attn_choose(64, 12, 128, 64, H200_SMS, 1);
    CHECK(p.k_warps == 4 && p.q_warps == 1 && p.ctas == 64 * 12 * 8);
    p = kcu_attn_choose(1, 12, 128, 64, H200_SMS, 0);
    CHECK(p.k_warps == 1 && p.q_warps == 2 && p.ctas == 48);
}

int main(void) {
    RUN(small_batch_splits_the_keys);
    RUN(large_batch_keeps_tiles);
    RUN(override);
    return test_summary();
}
