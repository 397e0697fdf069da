/* test_plan_cache.c -- the ring of plans kept by key (src/core/plan_cache.h;
 * the CUDA backend's cuDNN plans of convolutions and attention), with fake
 * plans in place of cuDNN's: a key put is found, another is not; keys are
 * compared as bytes at the type's offset (over key_size bytes only); once
 * full, each put evicts the oldest plan; every plan is destroyed exactly
 * once (evicted or cleared); a zeroed cache is empty and a cleared one is
 * usable again. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "test.h"

#include "core/plan_cache.h"

typedef struct fake_key {
    int32_t shape[3];
    float alpha;
} fake_key;

typedef struct fake_plan {
    int id;             /* (before the key: the key is not at offset 0) */
    fake_key key;
    int tail;           /* after the key: not compared */
} fake_plan;

#define MAX_PLANS (3 * KILN_PLAN_CACHE_CAP)
static int destroyed[MAX_PLANS]; /* by plan id */

static void fake_destroy(void *p) {
    fake_plan *f = p;
    if (f->id >= 0 && f->id < MAX_PLANS) destroyed[f->id]++;
    free(f);
}

static const kiln_plan_type fake_type = {offsetof(fake_plan, key), sizeof(fake_key), KILN_PLAN_CACHE_CAP,
                                         fake_destroy};

static fake_key key_of(int i) {
    fake_key k;
    memset(&k, 0, sizeof k);
    k.shape[0] = i;
    k.shape[1] = 7;
    k.shape[2] = -i;
    k.alpha = 0.5f;
    return k;
}

static fake_plan *plan_of(int id, int key) {
    fake_plan *p = calloc(1, sizeof *p);
    p->id = id;
    p->key = key_of(key);
    p->tail = 1000 + id;
    return p;
}

TEST(hit_and_miss) {
    memset(destroyed, 0, sizeof destroyed);
    kiln_plan_cache c;
    memset(&c, 0, sizeof c);
    fake_key k0 = key_of(0), k1 = key_of(1);
    CHECK(kiln__plan_cache_find(&c, &fake_type, &k0) == NULL); /* zeroed: empty */
    fake_plan *p0 = plan_of(0, 0);
    kiln__plan_cache_put(&c, &fake_type, p0);
    CHECK(kiln__plan_cache_find(&c, &fake_type, &k0) == p0);
    CHECK(kiln__plan_cache_find(&c, &fake_type, &k1) == NULL);
    fake_plan *p1 = plan_of(1, 1);
    kiln__plan_cache_put(&c, &fake_type, p1);
    CHECK(kiln__plan_cache_find(&c, &fake_type, &k0) == p0);
    CHECK(kiln__plan_cache_find(&c, &fake_type, &k1) == p1);
    CHECK(destroyed[0] == 0 && destroyed[1] == 0);
    kiln__plan_cache_clear(&c, &fake_type);
    CHECK(destroyed[0] == 1 && destroyed[1] == 1);
    CHECK(kiln__plan_cache_find(&c, &fake_type, &k0) == NULL);
    CHECK(kiln__plan_cache_find(&c, &fake_type, &k1) == NULL);
    /* usable again after clear; clearing an empty cache destroys nothing */
    kiln__plan_cache_put(&c, &fake_type, plan_of(2, 0));
    fake_plan *p2 = kiln__plan_cache_find(&c, &fake_type, &k0);
    CHECK(p2 && p2->id == 2);
    kiln__plan_cache_clear(&c, &fake_type);
    kiln__plan_cache_clear(&c, &fake_type);
    CHECK(destroyed[0] == 1 && destroyed[1] == 1 && destroyed[2] == 1);
}

/* Keys are bytes at key_offset: a key differing in any byte (a float's
 * sign: -0.0f == 0.0f as numbers) misses; the plan's other fields do not
 * count. */
TEST(keys_compare_as_bytes) {
    memset(destroyed, 0, sizeof destroyed);
    kiln_plan_cache c;
    memset(&c, 0, sizeof c);
    fake_plan *p = plan_of(0, 3);
    p->key.alpha = 0.0f;
    kiln__plan_cache_put(&c, &fake_type, p);
    fake_key k = p->key;
    CHECK(kiln__plan_cache_find(&c, &fake_type, &k) == p);
    k.alpha = -0.0f;
    CHECK(kiln__plan_cache_find(&c, &fake_type, &k) == NULL);
    k = p->key;
    k.shape[2] ^= 1 << 24; /* the last key field's high byte */
    CHECK(kiln__plan_cache_find(&c, &fake_type, &k) == NULL);
    k = p->key;
    p->id = 40; /* fields outside the key */
    p->tail = -1;
    CHECK(kiln__plan_cache_find(&c, &fake_type, &k) == p);
    p->id = 0;
    /* a type whose key is the first 4 bytes only (a key prefix, as the
     * legacy convolution plans' key is everything before `declined`) */
    const kiln_plan_type prefix = {offsetof(fake_plan, key), sizeof(int32_t), KILN_PLAN_CACHE_CAP, fake_destroy};
    k.shape[1] = 99;
    CHECK(kiln__plan_cache_find(&c, &fake_type, &k) == NULL);
    CHECK(kiln__plan_cache_find(&c, &prefix, &k) == p);
    kiln__plan_cache_clear(&c, &fake_type);
    CHECK(destroyed[0] == 1);
}

/* Once t->cap plans are in, each put evicts the oldest put (first in,
 * first out, whether or not it was found since), destroying it then and
 * only then. */
static void check_eviction(int cap) {
    memset(destroyed, 0, sizeof destroyed);
    const kiln_plan_type t = {offsetof(fake_plan, key), sizeof(fake_key), cap, fake_destroy};
    kiln_plan_cache c;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < cap; i++) kiln__plan_cache_put(&c, &t, plan_of(i, i));
    for (int i = 0; i < cap; i++) {
        fake_key k = key_of(i);
        fake_plan *p = kiln__plan_cache_find(&c, &t, &k);
        CHECK(p && p->id == i);
        CHECK(destroyed[i] == 0);
    }
    /* 2 * cap more: plan cap + j evicts plan j */
    for (int j = 0; j < 2 * cap; j++) {
        kiln__plan_cache_put(&c, &t, plan_of(cap + j, cap + j));
        for (int i = 0; i <= cap + j; i++) {
            fake_key k = key_of(i);
            fake_plan *p = kiln__plan_cache_find(&c, &t, &k);
            bool in = i > j;
            CHECK(in ? p && p->id == i : p == NULL);
            CHECK(destroyed[i] == (in ? 0 : 1));
        }
    }
    kiln__plan_cache_clear(&c, &t);
    for (int i = 0; i < 3 * cap; i++) CHECK(destroyed[i] == 1);
}

/* the cuDNN plans' 16, cuBLASLt's 4, and 1 */
TEST(eviction_order) {
    check_eviction(KILN_PLAN_CACHE_CAP);
    check_eviction(4);
    check_eviction(1);
}

int main(void) {
    RUN(hit_and_miss);
    RUN(keys_compare_as_bytes);
    RUN(eviction_order);
    return test_summary();
}
