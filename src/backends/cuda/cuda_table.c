/* cuda_table.c -- THE CUDA kernel table: one line per op that has a GPU
 * kernel, indexed by op id (src/ops/ops.def):
 *
 *     [KILN_OP_<Op>] = KCU_ENTRY("<name for inspect>", <fn>),
 *
 * where kiln__cu_<fn>_supports / kiln__cu_<fn>_run are declared with
 * KCU_DECLARE(<fn>) in cuda_internal.h. Rows are kiln_kernel
 * (backends/kernel.h): a kernel with tactics, or a name that depends on
 * the layout, fills those fields too. An op not listed here runs on the
 * CPU. Adding a GPU kernel: see docs/cuda.md. */
#if KILN_HAVE_CUDA

#include "backends/cuda/cuda_internal.h"

/* the kernels of the rows below (families with their own headers,
 * cuda_table_<family>.inc, declare theirs there) */
KCU_DECLARE(unary)
KCU_DECLARE(predicate)
KCU_DECLARE(binary)
KCU_DECLARE(variadic)
KCU_DECLARE(where)
KCU_DECLARE(clip)
KCU_DECLARE(cast)
KCU_DECLARE(copy)
KCU_DECLARE(dropout)
KCU_DECLARE(transpose)
KCU_DECLARE(concat)
KCU_DECLARE(split)
KCU_DECLARE(slice)
KCU_DECLARE(expand)
KCU_DECLARE(tile)
KCU_DECLARE(gather)
KCU_DECLARE(shape)
KCU_DECLARE(size)
KCU_DECLARE(global_pool)
KCU_DECLARE(softmax)
KCU_DECLARE(layernorm)
KCU_DECLARE(add_layernorm)
KCU_DECLARE(rmsnorm)
KCU_DECLARE(batchnorm)
KCU_DECLARE(pool)
KCU_DECLARE(reduce)
KCU_DECLARE(matmul)
KCU_DECLARE(gemm)
KCU_DECLARE(conv)
KCU_DECLARE(fused_conv)
KCU_DECLARE(se)
KCU_DECLARE(fused_matmul)
KCU_DECLARE(gelu)
KCU_DECLARE(attention)
KCU_DECLARE(pointwise)

/* Adding or removing an op: give it a row below if the GPU runs it (else it
 * runs on the CPU), then update the count. */
_Static_assert(KILN_OP_COUNT == 173, "the op registry changed: see this table, then update the count");

static const kiln_kernel kiln_cuda_kernels[KILN_OP_ID_LIMIT] = {
    /* elementwise: unary math and activations (cuda_ops_ew.c, k_elementwise.cu) */
    [KILN_OP_Abs] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Neg] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Sqrt] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Exp] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Log] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Reciprocal] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Floor] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Ceil] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Round] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Sign] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Sin] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Cos] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Tan] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Asin] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Acos] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Atan] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Sinh] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Cosh] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Asinh] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Acosh] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Atanh] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Erf] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Relu] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_LeakyRelu] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Elu] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Selu] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Celu] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Sigmoid] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_HardSigmoid] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_HardSwish] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Tanh] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Softplus] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Softsign] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Mish] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_ThresholdedRelu] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_Shrink] = KCU_ENTRY("cuda.unary", unary),
    [KILN_OP_IsNaN] = KCU_ENTRY("cuda.predicate", predicate),
    [KILN_OP_IsInf] = KCU_ENTRY("cuda.predicate", predicate),
    [KILN_OP_Not] = KCU_ENTRY("cuda.predicate", predicate),
    [KILN_OP_Clip] = KCU_ENTRY("cuda.clip", clip),
    /* elementwise: binary with broadcasting, variadic, Where */
    [KILN_OP_Add] = KCU_ENTRY("cuda.binary", binary),
    [KILN_OP_Sub] = KCU_ENTRY("cuda.binary", binary),
    [KILN_OP_Mul] = KCU_ENTRY("cuda.binary", binary),
    [KILN_OP_Div] = KCU_ENTRY("cuda.binary", binary),
    [KILN_OP_Pow] = KCU_ENTRY("cuda.binary", binary),
    [KILN_OP_Mod] = KCU_ENTRY("cuda.binary", binary),
    [KILN_OP_Equal] = KCU_ENTRY("cuda.binary", binary),
    [KILN_OP_Less] = KCU_ENTRY("cuda.binary", binary),
    [KILN_OP_LessOrEqual] = KCU_ENTRY("cuda.binary", binary),
    [KILN_OP_Greater] = KCU_ENTRY("cuda.binary", binary),
    [KILN_OP_GreaterOrEqual] = KCU_ENTRY("cuda.binary", binary),
    [KILN_OP_And] = KCU_ENTRY("cuda.binary", binary),
    [KILN_OP_Or] = KCU_ENTRY("cuda.binary", binary),
    [KILN_OP_Xor] = KCU_ENTRY("cuda.binary", binary),
    [KILN_OP_BitShift] = KCU_ENTRY("cuda.binary", binary),
    [KILN_OP_PRelu] = KCU_ENTRY("cuda.binary", binary),
    [KILN_OP_Max] = KCU_ENTRY("cuda.variadic", variadic),
    [KILN_OP_Min] = KCU_ENTRY("cuda.variadic", variadic),
    [KILN_OP_Sum] = KCU_ENTRY("cuda.variadic", variadic),
    [KILN_OP_Mean] = KCU_ENTRY("cuda.variadic", variadic),
    [KILN_OP_Where] = KCU_ENTRY("cuda.where", where),
    [KILN_OP_Cast] = KCU_ENTRY("cuda.cast", cast),
    [KILN_OP_CastLike] = KCU_ENTRY("cuda.cast", cast),
    /* data movement (cuda_ops_tensor.c, k_tensor.cu) */
    [KILN_OP_Reshape] = KCU_ENTRY("cuda.copy", copy),
    [KILN_OP_Flatten] = KCU_ENTRY("cuda.copy", copy),
    [KILN_OP_Squeeze] = KCU_ENTRY("cuda.copy", copy),
    [KILN_OP_Unsqueeze] = KCU_ENTRY("cuda.copy", copy),
    [KILN_OP_Identity] = KCU_ENTRY("cuda.copy", copy),
    [KILN_OP_Dropout] = KCU_ENTRY("cuda.copy", dropout),
    [KILN_OP_Shape] = KCU_ENTRY("cuda.shape", shape),
    [KILN_OP_Size] = KCU_ENTRY("cuda.shape", size),
    [KILN_OP_Transpose] = KCU_ENTRY("cuda.transpose", transpose),
    [KILN_OP_Concat] = KCU_ENTRY("cuda.concat", concat),
    [KILN_OP_Split] = KCU_ENTRY("cuda.split", split),
    [KILN_OP_Slice] = KCU_ENTRY("cuda.slice", slice),
    [KILN_OP_Expand] = KCU_ENTRY("cuda.expand", expand),
    [KILN_OP_Tile] = KCU_ENTRY("cuda.tile", tile),
    [KILN_OP_Gather] = KCU_ENTRY("cuda.gather", gather),
    /* nn (cuda_ops_nn.c, cuda_blas.c, cuda_conv.c) */
    [KILN_OP_GlobalAveragePool] = {.name = "cuda.reduce", .supports = kiln__cu_global_pool_supports,
                                   .run = kiln__cu_global_pool_run, .name_of = kiln__cu_global_pool_name},
    [KILN_OP_GlobalMaxPool] = KCU_ENTRY("cuda.reduce", global_pool),
    [KILN_OP_MatMul] = KCU_ENTRY("cublasLt", matmul),
    [KILN_OP_Gemm] = KCU_ENTRY("cublasLt", gemm),
    [KILN_OP_Conv] = KCU_ENTRY("cuda.conv", conv),
    [KILN_OP_MaxPool] = {.name = "cuda.pool", .supports = kiln__cu_pool_supports,
                         .run = kiln__cu_pool_run, .name_of = kiln__cu_pool_name},
    [KILN_OP_AveragePool] = {.name = "cuda.pool", .supports = kiln__cu_pool_supports,
                             .run = kiln__cu_pool_run, .name_of = kiln__cu_pool_name},
    [KILN_OP_BatchNormalization] = KCU_ENTRY("cuda.batchnorm", batchnorm),
    [KILN_OP_LayerNormalization] = KCU_ENTRY("cuda.layernorm", layernorm),
    [KILN_OP_AddLayerNorm] = KCU_ENTRY("cuda.add_layernorm", add_layernorm),
    [KILN_OP_RMSNormalization] = KCU_ENTRY("cuda.rmsnorm", rmsnorm),
    [KILN_OP_Softmax] = KCU_ENTRY("cuda.softmax", softmax),
    [KILN_OP_LogSoftmax] = KCU_ENTRY("cuda.softmax", softmax),
    /* fused layers (cuda_conv.c, k_fused.cu) */
    [KILN_OP_SqueezeExcite] = {.name = "cuda.squeeze_excite", .supports = kiln__cu_se_supports,
                               .run = kiln__cu_se_run, .name_of = kiln__cu_se_name, .tactics = kiln__cu_se_tactics,
                               .tactic_name = kiln__cu_se_tactic_name},
    [KILN_OP_FusedConv] = {.name = "cuda.conv+epilogue", .supports = kiln__cu_fused_conv_supports,
                           .run = kiln__cu_fused_conv_run, .name_of = kiln__cu_fused_conv_name,
                           .tactics = kiln__cu_fused_conv_tactics,
                           .tactics_ahead = kiln__cu_fused_conv_tactics_ahead,
                           .tactic_kind = kiln__cu_fused_conv_tactic_kind,
                           .tactic_name = kiln__cu_fused_conv_tactic_name,
                           .tactic_describe = kiln__cu_fused_conv_tactic_describe},
    /* transformer layers (cuda_fused.c, k_fused.cu) */
    [KILN_OP_FusedMatMul] = {.name = "cublasLt+epilogue", .supports = kiln__cu_fused_matmul_supports,
                             .run = kiln__cu_fused_matmul_run, .tactics = kiln__cu_fused_matmul_tactics,
                             .tactic_name = kiln__cu_fused_matmul_tactic_name},
    [KILN_OP_Gelu] = KCU_ENTRY("cuda.gelu", gelu),
    [KILN_OP_GeluOnnx] = KCU_ENTRY("cuda.gelu", gelu),
    [KILN_OP_Attention] = {.name = "cuda.attention", .supports = kiln__cu_attention_supports,
                           .run = kiln__cu_attention_run, .tactics = kiln__cu_attention_tactics,
                           .tactic_name = kiln__cu_attention_tactic_name,
                           .tactic_describe = kiln__cu_attention_tactic_describe},
    [KILN_OP_Pointwise] = KCU_ENTRY("cuda.pointwise", pointwise), /* cuda_ops_pw.c, k_pointwise.cu */
    /* reductions (cuda_ops_nn.c, k_reduce.cu) */
    [KILN_OP_ReduceSum] = KCU_ENTRY("cuda.reduce", reduce),
    [KILN_OP_ReduceMean] = KCU_ENTRY("cuda.reduce", reduce),
    [KILN_OP_ReduceMax] = KCU_ENTRY("cuda.reduce", reduce),
    [KILN_OP_ReduceMin] = KCU_ENTRY("cuda.reduce", reduce),
    [KILN_OP_ReduceProd] = KCU_ENTRY("cuda.reduce", reduce),
    [KILN_OP_ReduceL1] = KCU_ENTRY("cuda.reduce", reduce),
    [KILN_OP_ReduceL2] = KCU_ENTRY("cuda.reduce", reduce),
    [KILN_OP_ReduceLogSum] = KCU_ENTRY("cuda.reduce", reduce),
    [KILN_OP_ReduceLogSumExp] = KCU_ENTRY("cuda.reduce", reduce),
    [KILN_OP_ReduceSumSquare] = KCU_ENTRY("cuda.reduce", reduce),
    /* families with their own files (cuda_table_<family>.inc) */
#include "backends/cuda/cuda_table_index.inc"
#include "backends/cuda/cuda_table_spatial.inc"
#include "backends/cuda/cuda_table_seq.inc"
#include "backends/cuda/cuda_table_misc.inc"
};

const kiln_kernel *kiln__cuda_kernel_for(int op_id) {
    if (op_id <= 0 || op_id >= KILN_OP_ID_LIMIT) return NULL;
    const kiln_kernel *k = &kiln_cuda_kernels[op_id];
    return k->run ? k : NULL;
}

int kiln__cuda_kernel_count(void) {
    int n = 0;
    for (int i = 0; i < KILN_OP_ID_LIMIT; i++) n += kiln_cuda_kernels[i].run != NULL;
    return n;
}

#else
typedef int kiln_cuda_table_disabled;
#endif
