/* metadata.c -- public functions for user metadata (key/value strings kept
 * in the engine file; src/format/meta.h). */
#include "format/meta.h"
#include "runtime/engine.h"

kiln_status kiln_builder_set_metadata(kiln_builder *b, const char *key, const char *value) {
    if (!b)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_builder_set_metadata: builder is NULL");
    return kiln__meta_set(&b->meta, key, value, "kiln_builder_set_metadata");
}

kiln_status kiln_engine_set_metadata(kiln_engine *e, const char *key, const char *value) {
    if (!e)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_set_metadata: engine is NULL");
    KILN_TRY(kiln__meta_set(&e->meta, key, value, "kiln_engine_set_metadata"));
    /* the descriptions list the metadata: made again on the next call */
    kiln__free(e->describe_text);
    kiln__free(e->describe_json);
    e->describe_text = e->describe_json = NULL;
    return KILN_OK;
}

const char *kiln_engine_metadata(const kiln_engine *e, const char *key) {
    return e ? kiln__meta_get(&e->meta, key) : NULL;
}

int kiln_engine_num_metadata(const kiln_engine *e) { return e ? e->meta.n : 0; }

kiln_status kiln_engine_metadata_at(const kiln_engine *e, int index, const char **key,
                                    const char **value) {
    if (key) *key = NULL;
    if (value) *value = NULL;
    if (!e)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT, "kiln_engine_metadata_at: engine is NULL");
    if (index < 0 || index >= e->meta.n)
        return KILN_FAIL(KILN_ERR_INVALID_ARGUMENT,
                         "kiln_engine_metadata_at: index %d is out of range (the engine has %d "
                         "metadata entries)",
                         index, e->meta.n);
    if (key) *key = e->meta.items[index].key;
    if (value) *value = e->meta.items[index].value;
    return KILN_OK;
}
