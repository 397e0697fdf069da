#!/usr/bin/env bash
# make_fixtures.sh KILN_CLI -- writes this format version's engine fixtures
# (NAME_v6.kiln) with the given `kiln` program. The fixtures are committed as
# written and never rewritten: tests/unit/test_engine_format.c
# (test_fixtures) and the `engine_fixtures` ctest load, inspect and run every
# one with today's kiln, so any change that stops kiln from reading what it
# once wrote (in a version it still reads) is caught. The *_v1.kiln files
# were written by kiln 0.1.0 with format version 1, the *_v2.kiln files with
# version 2, the *_v3.kiln files with version 3, the *_v4.kiln files with version 4,
# the *_v5.kiln files with version 5 (the same commands, named _v1 .. _v5;
# attn_block_v5.kiln, a kiln.Attention layer with the 36-byte attributes of
# format 5, by the kiln of main at f45d293). A new fixture may be added (a new name); when the format version
# changes, add fixtures of the new version beside these.
set -euo pipefail
KILN=${1:?usage: make_fixtures.sh path/to/kiln}
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=$HERE/..
# An MLP (MatMul+Add+Relu fused, Softmax), dynamic batch 1..8.
"$KILN" build "$DATA/tiny_mlp.onnx" -o "$HERE/tiny_mlp_v6.kiln" -q \
    --min-shapes x:1x16 --opt-shapes x:2x16 --max-shapes x:8x16
# A small CNN (Conv, MaxPool, GlobalAveragePool, Gemm, Softmax, ReduceMean,
# LayerNormalization), dynamic batch, H and W.
"$KILN" build "$DATA/../stress/stress_cnn.onnx" -o "$HERE/stress_cnn_v6.kiln" -q \
    --min-shapes x:1x3x4x4 --opt-shapes x:2x3x16x16 --max-shapes x:4x3x48x48
# One attention block (F.scaled_dot_product_attention with a float bias over the
# batch, TorchScript export):
# a kiln.Attention layer.
"$KILN" build "$DATA/attention/t211_ts_sdpa_scale_bias.onnx" -o "$HERE/attn_block_v6.kiln" -q
