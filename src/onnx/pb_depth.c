/* pb_depth.c -- how deep a protobuf's messages nest, measured before
 * protobuf-c unpacks it. protobuf-c's unpack recurses once per nested
 * message with no limit of its own, about 1 KiB of stack a level: an ONNX
 * file of 3,000 Ifs each holding the next in its then_branch (0.5 MB; the
 * subgraph depth check comes after the unpack) overflowed the stack
 * (SIGSEGV) in `kiln build`. The walk below reads only tags and lengths,
 * follows the fields the descriptor says are messages, and stops at
 * KILN_PB_MAX_DEPTH levels; the loops are its own, its recursion is bounded
 * by that limit. */
#include "onnx/onnx_internal.h"

/* Reads a varint at *p (< end); false if it is cut short or longer than 10 bytes. */
static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; shift < 70 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        x |= (uint64_t)(b & 0x7f) << (shift < 64 ? shift : 0);
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* 1: nested at most `left` more levels below this one; 0: deeper; -1: not a
 * well-formed message (left for protobuf-c to refuse) */
static int depth_ok(const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end, int left) {
    while (p < end) {
        uint64_t tag, len;
        if (!read_varint(&p, end, &tag)) return -1;
        switch (tag & 7) {
        case 0:
            if (!read_varint(&p, end, &len)) return -1;
            break;
        case 1:
            if (end - p < 8) return -1;
            p += 8;
            break;
        case 5:
            if (end - p < 4) return -1;
            p += 4;
            break;
        case 2: {
            if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p)) return -1;
            const ProtobufCFieldDescriptor *f =
                tag >> 3 <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(d, (unsigned)(tag >> 3)) : NULL;
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
                if (left <= 0) return 0;
                int r = depth_ok(f->descriptor, p, p + len, left - 1);
                if (r <= 0) return r;
            }
            p += len;
            break;
        }
        default: /* groups (3, 4) and 6, 7: protobuf-c refuses them */
            return -1;
        }
    }
    return 1;
}

bool kiln__pb_depth_ok(const ProtobufCMessageDescriptor *d, const void *data, size_t size) {
    const uint8_t *p = data;
    return depth_ok(d, p, p + size, KILN_PB_MAX_DEPTH) != 0;
}
