/* misc_random.c -- RandomNormal, RandomUniform, RandomNormalLike,
 * RandomUniformLike, Bernoulli.
 *
 * Generator: xoshiro256** seeded through splitmix64. With a `seed`
 * attribute the values are the same on every run (but not numpy's values);
 * without one each run draws a fresh seed from the clock. These ops are
 * never constant-folded (KILN_OP_FLAG_NO_FOLD). */
#include "ops/misc_attrs.h" /* kiln_random_attrs, RND_* */
#include "ops/op.h"

#include <math.h>
#include <time.h>

typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng *r) {
    uint64_t *s = r->s;
    uint64_t res = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return res;
}

/* uniform in [0, 1) */
static double rng_unit(rng *r) { return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

static bool rnd_out_dtype_ok(kiln_dtype t, int code) {
    if (code == RND_BERNOULLI)
        return kiln__dtype_is_float(t) || kiln__dtype_is_int(t) || t == KILN_DTYPE_BOOL;
    return kiln__dtype_is_float(t);
}

static kiln_status rnd_import(kiln_import_ctx *ic, void *attrs, int code) {
    kiln_random_attrs *at = attrs;
    bool like = code != RND_NORMAL && code != RND_UNIFORM;
    KILN_TRY(kiln_attr_int32(ic, "dtype", like ? 0 : KILN_DTYPE_FLOAT32, &at->dtype));
    at->has_seed = kiln_attr_has(ic, "seed");
    at->seed = kiln_attr_float(ic, "seed", 0.f);
    if (code == RND_NORMAL || code == RND_NORMAL_LIKE) {
        at->a = kiln_attr_float(ic, "mean", 0.f);
        at->b = kiln_attr_float(ic, "scale", 1.f);
    } else if (code != RND_BERNOULLI) {
        at->a = kiln_attr_float(ic, "low", 0.f);
        at->b = kiln_attr_float(ic, "high", 1.f);
    }
    if (!like) {
        int n = kiln_attr_ints(ic, "shape", at->shape, KILN_MAX_RANK);
        if (n < 0) return KILN_IMPORT_FAIL(ic, "attribute 'shape' is required");
        at->rank = n;
    }
    return KILN_OK;
}

/* dtype: one the op makes (0, the input's, only for the Like ops and
 * Bernoulli); has_seed 0 or 1; RandomNormal/RandomUniform's shape of rank
 * 0..8 with dims >= 0 (the size limit is kiln__infer's) */
static kiln_status rnd_validate(const kiln_op_def *op, const void *attrs, const char *node) {
    const kiln_random_attrs *at = attrs;
    bool like = op->code != RND_NORMAL && op->code != RND_UNIFORM;
    if ((at->dtype != 0 || !like) &&
        (!kiln__dtype_valid(at->dtype) || !rnd_out_dtype_ok((kiln_dtype)at->dtype, op->code)))
        return KILN_VALIDATE_FAIL(op, node, "attribute 'dtype' = %d is not supported",
                                  (int)at->dtype);
    KILN_TRY(kiln__check_attr(op, node, "has_seed", at->has_seed, 0, 1));
    if (like) return KILN_OK;
    if (at->rank < 0 || at->rank > KILN_MAX_RANK)
        return KILN_VALIDATE_FAIL(op, node, "attribute 'shape' has rank %d; at most %d is supported",
                                  (int)at->rank, KILN_MAX_RANK);
    for (int i = 0; i < at->rank; i++)
        if (at->shape[i] < 0)
            return KILN_VALIDATE_FAIL(op, node, "attribute 'shape' has a negative dimension");
    return KILN_OK;
}

#define RND_IMPORT(name, code) \
    static kiln_status name(kiln_import_ctx *ic, void *attrs) { return rnd_import(ic, attrs, code); }
RND_IMPORT(rnd_import_normal, RND_NORMAL)
RND_IMPORT(rnd_import_uniform, RND_UNIFORM)
RND_IMPORT(rnd_import_normal_like, RND_NORMAL_LIKE)
RND_IMPORT(rnd_import_uniform_like, RND_UNIFORM_LIKE)
RND_IMPORT(rnd_import_bernoulli, RND_BERNOULLI)

static kiln_status rnd_infer(const kiln_infer_args *a) {
    const kiln_random_attrs *at = a->attrs;
    const char *nm = a->node_name ? a->node_name : "?";
    int code = a->op->code;
    kiln_tinfo *y = a->out[0];
    y->data = NULL;
    if (code == RND_NORMAL || code == RND_UNIFORM) {
        y->dtype = (kiln_dtype)at->dtype;
        y->rank = at->rank;
        memcpy(y->dims, at->shape, sizeof(int64_t) * (size_t)at->rank);
    } else {
        const kiln_tinfo *x = a->in[0];
        kiln__tinfo_copy_shape(y, x);
        y->dtype = at->dtype ? (kiln_dtype)at->dtype : x->dtype;
        if (code == RND_BERNOULLI && !kiln__dtype_is_float(x->dtype))
            return KILN_FAIL(KILN_ERR_MODEL, "node '%s' (Bernoulli): input must be floating, got %s",
                             nm, kiln_dtype_name(x->dtype));
    }
    if (!rnd_out_dtype_ok(y->dtype, code))
        return KILN_FAIL(KILN_ERR_UNSUPPORTED, "node '%s' (%s): output dtype %s is not supported",
                         nm, a->op->name, kiln_dtype_name(y->dtype));
    return KILN_OK;
}

static kiln_status rnd_cpu(const kiln_kernel_args *a) {
    const kiln_random_attrs *at = a->attrs;
    int code = a->op->code;
    kiln_tensor *y = a->out[0];
    uint64_t seed;
    if (at->has_seed) {
        uint32_t bits;
        memcpy(&bits, &at->seed, 4);
        seed = 0x6b696c6e00000000ull ^ bits; /* "kiln" */
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)y->data;
    }
    rng r;
    rng_seed(&r, seed);
    int64_t n = kiln__tensor_numel(y);
    for (int64_t i = 0; i < n; i++) {
        double v;
        switch (code) {
        case RND_NORMAL:
        case RND_NORMAL_LIKE: {
            /* Box-Muller */
            double u1 = 1.0 - rng_unit(&r), u2 = rng_unit(&r);
            v = at->a + at->b * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
            break;
        }
        case RND_UNIFORM:
        case RND_UNIFORM_LIKE:
            v = at->a + (at->b - at->a) * rng_unit(&r);
            break;
        default: {
            double p = kiln__load_f64(a->in[0]->dtype, a->in[0]->data, i);
            v = rng_unit(&r) < p ? 1.0 : 0.0;
            break;
        }
        }
        kiln__store_f64(y->dtype, y->data, i, v);
    }
    return KILN_OK;
}

#define RND_OP(SYM, NAME, CODE, NIN, IMPORT)                                                  \
    const kiln_op_def kiln_op_##SYM = {                                                       \
        .name = NAME, .domain = "", .since = 1,                                               \
        .min_inputs = NIN, .max_inputs = NIN, .min_outputs = 1, .max_outputs = 1,              \
        .code = CODE, .flags = KILN_OP_FLAG_NO_FOLD, .attr_size = sizeof(kiln_random_attrs),   \
        .import = IMPORT, .validate = rnd_validate, .infer = rnd_infer, .cpu = rnd_cpu,      \
    }

RND_OP(RandomNormal, "RandomNormal", RND_NORMAL, 0, rnd_import_normal);
RND_OP(RandomUniform, "RandomUniform", RND_UNIFORM, 0, rnd_import_uniform);
RND_OP(RandomNormalLike, "RandomNormalLike", RND_NORMAL_LIKE, 1, rnd_import_normal_like);
RND_OP(RandomUniformLike, "RandomUniformLike", RND_UNIFORM_LIKE, 1, rnd_import_uniform_like);
RND_OP(Bernoulli, "Bernoulli", RND_BERNOULLI, 1, rnd_import_bernoulli);
