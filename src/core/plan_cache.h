/* plan_cache.h -- a layer's plans kept by key: one per shape it has run
 * (a dynamic profile's runs change shape, e.g. a server's batches of 1 to
 * max-batch requests), so that a shape seen before does not make its plan
 * again (the CUDA backend's cuDNN plans: a legacy convolution's descriptors
 * and algorithm, a fused convolution's graph, an attention graph; making
 * one can take half a second).
 *
 * A ring of t->cap slots (at most KILN_PLAN_CACHE_CAP). Each plan is the caller's heap
 * object holding its key at t->key_offset (key_size bytes, compared with
 * memcmp: keys are memset before their fields are set). put takes a plan
 * over and puts it in the next slot of the ring, destroying the plan that
 * slot held (with t->destroy, once): the oldest one put once the ring is
 * full. A zeroed cache is empty; clear destroys every plan and empties it.
 *
 * Thread safety: one cache is one thread's (a node's state, run by its
 * context or by the tuner). Plans made on other threads (core/prep_pool.h)
 * are put by the thread that takes them. */
#ifndef KILN_PLAN_CACHE_H
#define KILN_PLAN_CACHE_H

#include "core/core.h"

#define KILN_PLAN_CACHE_CAP 16

typedef struct kiln_plan_type {
    size_t key_offset, key_size;  /* where a plan holds its key; key_size > 0 */
    int cap;                      /* plans kept: 1 to KILN_PLAN_CACHE_CAP */
    void (*destroy)(void *plan);  /* frees a plan the cache drops (all of it) */
} kiln_plan_type;

typedef struct kiln_plan_cache {
    void *plan[KILN_PLAN_CACHE_CAP]; /* owned; NULL: an empty slot */
    int next;                        /* the slot the next put takes */
} kiln_plan_cache;

/* The plan whose key is `key`, or NULL. */
KILN_PRIVATE void *kiln__plan_cache_find(const kiln_plan_cache *c, const kiln_plan_type *t, const void *key);
/* Takes plan over (not NULL; its key not in c) into the next slot. */
KILN_PRIVATE void kiln__plan_cache_put(kiln_plan_cache *c, const kiln_plan_type *t, void *plan);
/* Destroys every plan of c and empties it. */
KILN_PRIVATE void kiln__plan_cache_clear(kiln_plan_cache *c, const kiln_plan_type *t);

#endif
