/* engine.h -- internal layout of kiln_model, kiln_builder, kiln_engine and
 * kiln_context. */
#ifndef KILN_ENGINE_H
#define KILN_ENGINE_H

#include "ir/ir.h"

#include <pthread.h>

struct kiln_model {
    kiln_graph *graph;     /* as imported, shapes inferred */
    char *producer;        /* producer_name + version, for inspect */
};

/* Shape range of one graph input. For inputs without dynamic dims
 * min == opt == max == the static shape. */
typedef struct kiln_profile {
    int rank;
    int64_t min[KILN_MAX_RANK], opt[KILN_MAX_RANK], max[KILN_MAX_RANK];
} kiln_profile;

typedef struct kiln_build_options {
    int32_t device;        /* kiln_device */
    int32_t device_index;
    int32_t precision;     /* kiln_precision */
    int32_t threads;       /* 0 = one per core */
    uint64_t workspace;    /* 0 = no limit */
} kiln_build_options;

typedef struct kiln_profile_req {
    char *name;
    kiln_profile p;
} kiln_profile_req;

struct kiln_builder {
    kiln_build_options opts;
    char *timing_cache;
    bool strict_device;
    int optimization;      /* 0 none, 1 all (default) */
    bool tuning;           /* time tactics (default true) */
    kiln_profile_req *profiles;
    int n_profiles, cap_profiles;
};

struct kiln_engine {
    kiln_graph *graph;           /* the optimized plan */
    kiln_profile *profiles;      /* one per graph input, same order as graph->inputs */
    kiln_build_options opts;
    char target[128];            /* what it was built for, e.g. "cpu x86_64 avx2 fma" */
    char builder_version[32];    /* kiln version that built it */
    /* Storage the graph's constants may borrow from. */
    void *blob;                  /* mmap'd file or kiln__aligned_alloc'd copy */
    size_t blob_size;
    int blob_kind;               /* 0 none, 1 mmap, 2 aligned_alloc */
    /* Device engines: constants read by device nodes, uploaded once at
     * when the first context is created and shared by all contexts
     * (dev_const[value] or NULL), and the backend state that owns them.
     * dev_lock guards the upload; the engine is otherwise immutable. */
    void **dev_const;
    void *dev_state;
    bool dev_ready;
    pthread_mutex_t dev_lock;
    /* Cached descriptions (kiln_engine_describe). */
    char *describe_text;
    char *describe_json;
};

/* Engine (de)serialization: src/format/. */
KILN_PRIVATE kiln_status kiln__format_write(const kiln_engine *e, void **data, size_t *size);
/* Parses `data` (which must stay alive as e->blob; constants borrow from it)
 * into e->graph, e->profiles, e->opts, e->target. Validates everything. */
KILN_PRIVATE kiln_status kiln__format_read(const void *data, size_t size, kiln_engine *e);

/* Allocates an engine with its lock initialized (free: kiln_engine_free). */
KILN_PRIVATE kiln_engine *kiln__engine_alloc(void);
/* Device engines: uploads the constants device nodes read, once (no-op for
 * CPU engines). Thread-safe; called by kiln_context_create. */
KILN_PRIVATE kiln_status kiln__engine_prepare(kiln_engine *e);
/* Frees what kiln__engine_prepare made. */
KILN_PRIVATE void kiln__engine_release(kiln_engine *e);

/* Bytes of activation buffers and scratch a context holds after its runs. */
/* Times the tactics of every layer that has several (src/builder/tune.c),
 * writing each choice into the node's kiln_tactic; reads and updates the
 * builder's timing cache file. With tuning off, leaves every tactic 0. */
KILN_PRIVATE kiln_status kiln__builder_tune(const kiln_builder *b, kiln_engine *e);
KILN_PRIVATE size_t kiln__context_memory(const kiln_context *c);

/* Target description of this machine (CPU features). */
KILN_PRIVATE void kiln__cpu_target(char *buf, size_t n);

#endif
