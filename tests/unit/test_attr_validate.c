/* test_attr_validate.c -- the attribute checks of every operator
 * (kiln_op_def.validate, the one place the importer, the engine writer and
 * the engine loader check attribute values; issue 20 4.3):
 *
 *   - every op with attributes has one;
 *   - attribute structs with hostile values (each 32-bit word of a zeroed
 *     or 0xff-filled struct set to 0, 1, 2, -1, INT32_MIN, INT32_MAX, 2^30,
 *     ...) are either refused by validate, with a message naming the node
 *     and the op, or accepted, and then the op's shape rule runs on a few
 *     input shapes (build and run time) without crashing and gives shapes
 *     within kiln's limits (kiln__infer). Under ASan/UBSan (CI) an
 *     out-of-bounds access or an overflow is a failure too. */
#include <stdlib.h>

#include "ops/op.h"
#include "test.h"

TEST(test_every_op_with_attributes_validates) {
    int n_ops = 0, missing = 0;
    for (int id = 1; id < KILN_OP_ID_LIMIT; id++) {
        const kiln_op_def *op = kiln__op_by_id(id);
        if (!op || !op->attr_size) continue;
        n_ops++;
        if (!op->validate) {
            fprintf(stderr, "  op %d (%s) has attributes but no validate\n", id, op->name);
            missing++;
        }
    }
    printf("  %d ops with attributes\n", n_ops);
    CHECK(n_ops > 50);
    CHECK(missing == 0);
}

/* Runs op's infer (through kiln__infer) on n_in float32 inputs of the given
 * shape, with zero data at run time. Any status is fine; a crash is not. */
static void infer_on(const kiln_op_def *op, const void *attrs, int n_in, int rank,
                     const int64_t *dims, bool runtime) {
    static const int64_t zeros[4096];
    kiln_tinfo in[16], out[16];
    const kiln_tinfo *ip[16];
    kiln_tinfo *op_out[16];
    int n_out = op->min_outputs > 1 ? op->min_outputs : 1;
    if (n_in > 16 || n_out > 16) return;
    for (int i = 0; i < n_in; i++) {
        memset(&in[i], 0, sizeof in[i]);
        in[i].dtype = KILN_DTYPE_FLOAT32;
        in[i].rank = rank;
        memcpy(in[i].dims, dims, sizeof(int64_t) * (size_t)rank);
        in[i].data = runtime ? zeros : NULL;
        ip[i] = &in[i];
    }
    for (int i = 0; i < n_out; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].rank = -1;
        op_out[i] = &out[i];
    }
    kiln_infer_args a = {.op = op, .attrs = attrs, .node_name = "n", .n_in = n_in,
                         .n_out = n_out, .in = ip, .out = op_out, .runtime = runtime};
    if (kiln__infer(&a) != KILN_OK) return;
    for (int i = 0; i < n_out; i++) {
        CHECK(out[i].rank >= -1 && out[i].rank <= KILN_MAX_RANK);
        if (runtime && out[i].rank >= 0 && kiln__numel(out[i].rank, out[i].dims) < -1)
            CHECK(!"negative element count");
    }
}

/* validate, then (if accepted) the shape rule on a few shapes. */
static void try_attrs(const kiln_op_def *op, const void *attrs, int *accepted, int *refused) {
    kiln_status s = op->validate(op, attrs, "n");
    if (s != KILN_OK) {
        (*refused)++;
        const char *msg = kiln_last_error();
        if (!strstr(msg, "node 'n'") || !strstr(msg, op->name)) {
            fprintf(stderr, "  %s: message does not name the node and op: %s\n", op->name, msg);
            CHECK(!"validate message names the node and the op");
        }
        return;
    }
    (*accepted)++;
    static const int64_t d4[4] = {2, 3, 4, 5}, d2[2] = {3, 4}, d1[1] = {2};
    int lo = op->min_inputs > 0 ? op->min_inputs : 1;
    int hi = op->max_inputs < 0 ? lo + 2 : op->max_inputs;
    if (hi > 6) hi = 6;
    for (int n_in = lo; n_in <= hi; n_in++)
        for (int rt = 0; rt < 2; rt++) {
            infer_on(op, attrs, n_in, 4, d4, rt);
            infer_on(op, attrs, n_in, 2, d2, rt);
            infer_on(op, attrs, n_in, 1, d1, rt);
        }
}

TEST(test_hostile_attribute_values) {
    static const int32_t words[] = {0, 1, 2, 3, -1, -2, -9, 8, 9, 63, 64, 65, 1 << 20,
                                    (1 << 20) + 1, 1 << 30, INT32_MAX, INT32_MIN};
    int accepted = 0, refused = 0;
    for (int id = 1; id < KILN_OP_ID_LIMIT; id++) {
        const kiln_op_def *op = kiln__op_by_id(id);
        if (!op || !op->attr_size || !op->validate) continue;
        size_t n = op->attr_size;
        unsigned char *base = calloc(1, n), *at = malloc(n);
        if (!base || !at) {
            free(base);
            free(at);
            CHECK(!"out of memory");
            return;
        }
        for (int fill = 0; fill < 2; fill++) {
            memset(base, fill ? 0xff : 0, n);
            try_attrs(op, base, &accepted, &refused);
            for (size_t w = 0; w + 4 <= n; w += 4)
                for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
                    memcpy(at, base, n);
                    memcpy(at + w, &words[k], 4);
                    try_attrs(op, at, &accepted, &refused);
                }
        }
        free(base);
        free(at);
    }
    printf("  %d attribute structs accepted, %d refused\n", accepted, refused);
    CHECK(accepted > 0 && refused > 0);
}

int main(void) {
    RUN(test_every_op_with_attributes_validates);
    RUN(test_hostile_attribute_values);
    return test_summary();
}
