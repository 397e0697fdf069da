/* format.h -- the kiln engine file format (version 5; versions 1 to 4 are read too).
 *
 * An engine file is the optimized plan of one model plus its weights, laid
 * out so that it can be mapped read-only and used in place: every constant
 * starts on a 256-byte boundary of the file. All integers are little-endian;
 * there is no implicit padding (every field's offset is given below) and
 * every padding or reserved byte is written as zero, so that the same engine
 * always serializes to the same bytes. docs/engine-format.md is the prose
 * version of this comment, with the compatibility rules.
 *
 * File
 * ----
 *     header          512 bytes (header_size)
 *     section table   section_count entries of 32 bytes
 *     sections        in the order of the table, ascending offsets, each
 *                     starting on an 8-byte boundary (WGTS: 256 bytes),
 *                     never overlapping; gaps are zero bytes
 *
 * Header (offsets in bytes)
 * ------
 *       0  u8[12]  signature: 'K' 'I' 'L' 'N' 0x89 0x0D 0x0A 0x1A 0x0A 0x00 0x00 0x00
 *                  ("KILN", then PNG's trick: a byte with the high bit set
 *                  catches 7-bit channels, CR LF catches CRLF->LF
 *                  conversion, 0x1A stops DOS `type`, the lone LF catches
 *                  LF->CRLF conversion, the NUL catches C-string copies)
 *      12  u32     format_version (5). Bytes 0..15 keep this meaning in
 *                  every version, so any kiln can tell "too new" apart from
 *                  "corrupt".
 *      16  u32     header_size (>= 512, multiple of 8; 512 in versions 1 to 5)
 *      20  u32     section_count
 *      24  u64     file_size: the exact size of the file
 *      32  u64     checksum (see below) of the whole file, computed with
 *                  these 8 bytes taken as zero
 *      40  u32     writer_version: KILN_VERSION_NUMBER of the kiln that
 *                  wrote the file
 *      44  u32     reserved (0)
 *      48  char[32] builder_version: version string of the kiln that built
 *                  the plan ("0.1.0"), NUL-terminated, NUL-padded
 *      80  i32     build options: device (kiln_device)
 *      84  i32                    device_index
 *      88  i32                    precision (kiln_precision)
 *      92  i32                    threads (0 = one per core)
 *      96  u64                    workspace (bytes, 0 = no limit)
 *     104  i32                    math: 1 accurate, 2 fast math
 *                                 (kiln_builder_set_fast_math); 0 in
 *                                 files written before the field existed
 *                                 (reserved then; their builds allowed
 *                                 what fast math allows). Older readers
 *                                 ignore it: the tactics mean the same.
 *     108  u8[20]  reserved (0)
 *     128  char[128] target: what the engine was built for, e.g.
 *                  "cpu x86_64 avx avx2 fma" (device kind, architecture,
 *                  features the build machine had: information only)
 *     256  char[128] required: space-separated CPU features the engine's
 *                  kernels need ("" = none). Load fails if the running CPU
 *                  lacks one, or if one is unknown to the loading kiln.
 *     384  u8[128] reserved (0)
 *
 * Section table entry (32 bytes)
 * -------------------
 *       0  u8[4]   id: four ASCII characters (below)
 *       4  u32     flags: bit 0 = required (a reader that does not know the
 *                  id must refuse the file; otherwise it skips the section)
 *       8  u64     offset from the start of the file
 *      16  u64     size in bytes
 *      24  u64     count: number of records (meaning per section)
 *
 * Sections of versions 1 to 5 (all required, each exactly once)
 * ---------------------
 *   "STRS"  string table. count = size. Strings are referenced by their
 *           u32 byte offset in the table and must be NUL-terminated inside
 *           it. Offset 0 is the empty string.
 *   "SYMS"  names of the symbolic dimensions: count u32 string offsets.
 *           A dim value d <= -2 refers to symbol -2 - d (KILN_DIM_SYM).
 *   "VALS"  values (tensors), count records of 96 bytes:
 *              0  u32     name (string offset; unique, non-empty)
 *              4  i32     dtype (kiln_dtype; 0 = unknown, not for constants)
 *              8  i32     rank (-1 = unknown, 0..8; constants 0..8)
 *             12  u32     flags (kiln_value flags: 1 input, 2 output, 4 const)
 *             16  i64[8]  dims (>= 0 known, -1 unknown, <= -2 symbol;
 *                         entries past rank are 0; constants all known)
 *             80  u64     data_offset: constants only, from the start of the
 *                         file, a multiple of 256, inside WGTS (else 0)
 *             88  u64     data_size: constants only; must equal
 *                         numel * dtype size (else 0)
 *   "NODS"  nodes in topological order, count variable-size records:
 *              0  u32     op id (KILN_OP_* from src/ops/ops.def; ids are
 *                         permanent)
 *              4  u32     name (string offset)
 *              8  u32     n_in
 *             12  u32     n_out
 *             16  u32     attr_size (must equal the op's attr_size)
 *             20  u32     device the node runs on (kiln_device): 0 (CPU) or
 *                         the engine's device (a CUDA engine runs nodes
 *                         without a GPU kernel on the CPU)
 *             24  i32[n_in]   input value indices (-1: absent optional)
 *                 i32[n_out]  output value indices
 *                 u8[attr_size] the op's POD attribute struct, verbatim
 *                 zero padding to a multiple of 8 bytes
 *   "GRPH"  graph interface. count = 1.
 *              0  i64     opset (ai.onnx opset of the source model)
 *              8  u32     n_inputs
 *             12  u32     n_outputs
 *             16  i32[n_inputs]  graph input value indices
 *                 i32[n_outputs] graph output value indices
 *   "PROF"  one shape profile per graph input, in the same order; count
 *           records of 200 bytes:
 *              0  i32     rank
 *              4  u32     reserved (0)
 *              8  i64[8]  min     (entries past rank are 0)
 *             72  i64[8]  opt
 *            136  i64[8]  max
 *   "SRCS"  (optional: section flag 0, written by kilns since sources were
 *           recorded; older readers skip it) source nodes: count = number
 *           of nodes; per node in NODS order: u32 n, then n u32 string
 *           offsets naming the ONNX nodes it was made from (n = 0: a node
 *           kiln added). Files without it: each node's name split at '+'.
 *   "WGTS"  weights. count = number of constants. Starts on a 256-byte
 *           boundary; each constant's bytes start on a 256-byte boundary
 *           (little-endian element encoding), zero padding in between.
 *
 * Optional sections (flags 0: a reader that does not know one skips it)
 * ---------------------
 *   "META"  user metadata (kiln_engine_metadata; src/format/meta.c), at most
 *           once, written only when the engine has some, after WGTS.
 *           count records (<= 1024), each:
 *              0  u32     key_size (1..255)
 *              4  u32     value_size (0..16 MiB)
 *              8  u8[key_size]   key: printable ASCII without space
 *                 u8[value_size] value: UTF-8 without NUL
 *                 zero padding to a multiple of 8 bytes
 *           Keys strictly ascending (bytewise); the records fill the
 *           section exactly.
 *
 * Checksum
 * --------
 * kiln__format_checksum: the file is read as 32-byte blocks (the last one
 * zero-padded) of four little-endian u64 words w0..w3. Four lanes start at
 * h[i] = 0xcbf29ce484222325 + i; each block does, for each lane i,
 *     h[i] = (h[i] ^ w_i) * 0x100000001b3;  h[i] ^= h[i] >> 32;
 * The result is 64-bit FNV-1a (offset basis 0xcbf29ce484222325, prime
 * 0x100000001b3) over the 40 bytes h[0..3] (little-endian) followed by the
 * u64 byte length of the file. Header bytes 32..39 count as zero.
 * (Word-parallel so that checking a multi-gigabyte engine stays fast.)
 *
 * Validation order on load (first failure wins, see docs/engine-format.md
 * for the messages): signature, format version, file size, checksum,
 * header fields, target, section table, sections and graph.
 */
#ifndef KILN_FORMAT_H
#define KILN_FORMAT_H

#include "format/meta.h"
#include "runtime/engine.h"

/* Version 2: the same layout as version 1; the attributes of CPU layers may
 * say more than a version-1 reader understands: MaxPool's layout field (was
 * reserved, 0) marks NHWC MaxPools inside NHWC chains, and FusedConv's
 * tactic 3 (Winograd) takes NHWC tensors, so a version-1 kiln, which would
 * run such layers as NCHW, must refuse these files. Version-1 files mean
 * the same to this kiln.
 * Version 3: the same layout again; FusedConv's layout may carry
 * KILN_FC_LAYOUT_R_NHWC (an NHWC residual with an NCHW output), which a
 * version-2 kiln would read as an NCHW residual. Version 1 and 2 files mean
 * the same to this kiln.
 * Version 4: the same layout; GlobalAveragePool has attributes (a
 * kiln_pool_attrs, whose `layout` marks an NHWC input at the end of an NHWC
 * chain) where version 3 had none, and FusedConv may carry tactic 4
 * (Winograd F(2x2), NHWC like tactic 3). A version-3 kiln refuses the
 * attribute size; version 1..3 files (GlobalAveragePool without
 * attributes: NCHW) mean the same to this kiln.
 * Version 5: the same layout; tensors between CPU layers may be blocked
 * nChw16c: FusedConv layout bits KILN_FC_LAYOUT_X_C16 (32) / Y_C16 (64),
 * MaxPool and GlobalAveragePool layout KILN_POOL_LAYOUT_C16 (2). A
 * version-4 kiln refuses the file by version (its layers would refuse
 * those values too, at run time); version 1..4 files mean the same to this
 * kiln.
 * Version 6: the same layout; kiln.Attention's attributes grew from 36 to 52
 * bytes (cond_mode, cond_fill_if, fill, nan_to_zero) and the layer may have
 * up to 6 inputs (cond, bias). A version-5 kiln refuses the attribute size;
 * version 1..5 files (36-byte attributes) are read with the new fields 0,
 * which is what those layers computed. */
#define KILN_FORMAT_VERSION 6          /* written by this kiln */
#define KILN_FORMAT_MIN_VERSION 1      /* oldest this kiln reads */
#define KILN_FORMAT_MAGIC "KILN\x89\r\n\x1a\n\0\0\0"
#define KILN_FORMAT_MAGIC_SIZE 12
#define KILN_FORMAT_HEADER_SIZE 512
#define KILN_FORMAT_ALIGN 256          /* constants, WGTS section */
#define KILN_FORMAT_SECTION_ENTRY 32

/* Header field offsets. */
#define KILN_FMT_OFF_VERSION 12
#define KILN_FMT_OFF_HEADER_SIZE 16
#define KILN_FMT_OFF_SECTION_COUNT 20
#define KILN_FMT_OFF_FILE_SIZE 24
#define KILN_FMT_OFF_CHECKSUM 32
#define KILN_FMT_OFF_WRITER_VERSION 40
#define KILN_FMT_OFF_BUILDER_VERSION 48
#define KILN_FMT_BUILDER_VERSION_LEN 32
#define KILN_FMT_OFF_DEVICE 80
#define KILN_FMT_OFF_DEVICE_INDEX 84
#define KILN_FMT_OFF_PRECISION 88
#define KILN_FMT_OFF_THREADS 92
#define KILN_FMT_OFF_WORKSPACE 96
#define KILN_FMT_OFF_MATH 104
#define KILN_FMT_OFF_TARGET 128
#define KILN_FMT_TARGET_LEN 128
#define KILN_FMT_OFF_REQUIRED 256
#define KILN_FMT_REQUIRED_LEN 128

/* Section flags. */
#define KILN_FMT_SECTION_REQUIRED 1u

/* Record sizes. */
#define KILN_FMT_VALUE_RECORD 96
#define KILN_FMT_NODE_HEADER 24
#define KILN_FMT_PROFILE_RECORD 200
#define KILN_FMT_GRAPH_HEADER 16

/* Checksum of a whole file (header bytes 32..39 taken as zero). */
KILN_PRIVATE uint64_t kiln__format_checksum(const void *data, size_t size);
/* The same; when `mapped`, data is a read-only file mapping whose pages are
 * handed back to the kernel as the checksum passes them (so that checking a
 * large engine does not make all of it resident at once). */
KILN_PRIVATE uint64_t kiln__format_checksum_ex(const void *data, size_t size, bool mapped);

/* Semantic checks of a plan, shared by the writer (which refuses to write an
 * engine it could not read back) and the reader (after rebuilding the
 * graph): value types and shapes, constant sizes, node ops and arities,
 * value indices, topological order (every input is a constant, a graph input
 * or an output of an earlier node; every value has at most one producer),
 * graph inputs/outputs, one consistent profile per input, and every layer
 * reading each value in the layout it is written in. `sources`: whether
 * the nodes' `added` says which nodes kiln added (a writer's graph, a file
 * with a SRCS section), which tells a backend's relabelling Reshapes from a
 * model's own. Fails with KILN_ERR_FORMAT and a message naming the value or
 * node. */
KILN_PRIVATE kiln_status kiln__format_check_graph(const kiln_graph *g, const kiln_profile *profiles,
                                                  bool sources);

/* Little-endian field access (the format's byte order, on any host). */
static inline uint32_t kiln__le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t kiln__le64(const unsigned char *p) {
    return (uint64_t)kiln__le32(p) | (uint64_t)kiln__le32(p + 4) << 32;
}
static inline void kiln__put_le32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}
static inline void kiln__put_le64(unsigned char *p, uint64_t v) {
    kiln__put_le32(p, (uint32_t)v);
    kiln__put_le32(p + 4, (uint32_t)(v >> 32));
}

/* ---- subgraphs of control-flow nodes (subgraph.c) ---- */
/* Serializes subgraph g into a new buffer (*data, freed with
 * kiln__aligned_free) of *size bytes. */
KILN_PRIVATE kiln_status kiln__subgraph_pack(const kiln_graph *g, void **data, size_t *size);

/* Deserializes a subgraph packed by kiln__subgraph_pack. *graph's constants
 * borrow from *blob (a 64-byte aligned copy of data, freed with
 * kiln__aligned_free after the graph). `what` names it in messages. */
KILN_PRIVATE kiln_status kiln__subgraph_unpack(const void *data, size_t size, const char *what,
                                               kiln_graph **graph, void **blob);
/* The loader control-flow ops get (kiln_graph.sub): unpack and free. */
KILN_PRIVATE extern const kiln_subgraph_io kiln__subgraph_io;

#endif
