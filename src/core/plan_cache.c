/* plan_cache.c -- a layer's plans kept by key (plan_cache.h). */
#include "core/plan_cache.h"

#include <assert.h>
#include <string.h>

void *kiln__plan_cache_find(const kiln_plan_cache *c, const kiln_plan_type *t, const void *key) {
    for (int i = 0; i < KILN_PLAN_CACHE_CAP; i++)
        if (c->plan[i] && !memcmp((const char *)c->plan[i] + t->key_offset, key, t->key_size)) return c->plan[i];
    return NULL;
}

void kiln__plan_cache_put(kiln_plan_cache *c, const kiln_plan_type *t, void *plan) {
    /* the callers' contract (plan_cache.h): a type's cap in 1..KILN_PLAN_CACHE_CAP (0
     * divided by zero below, more wrote past plan[]), a destroy, a plan not held yet
     * (its slot would destroy it and keep the freed pointer) */
    assert(t->cap >= 1 && t->cap <= KILN_PLAN_CACHE_CAP && t->destroy && t->key_size > 0 && plan);
    assert(c->next >= 0 && c->next < t->cap);
    for (int i = 0; i < KILN_PLAN_CACHE_CAP; i++) assert(c->plan[i] != plan);
    void **slot = &c->plan[c->next];
    if (*slot) t->destroy(*slot);
    *slot = plan;
    c->next = (c->next + 1) % t->cap;
}

void kiln__plan_cache_clear(kiln_plan_cache *c, const kiln_plan_type *t) {
    for (int i = 0; i < KILN_PLAN_CACHE_CAP; i++)
        if (c->plan[i]) t->destroy(c->plan[i]);
    memset(c, 0, sizeof *c);
}
