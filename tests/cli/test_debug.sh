#!/bin/bash
# test_debug.sh -- `kiln debug` (docs/debugging.md) and `kiln build --disable-pass`.
#
# Usage: tests/cli/test_debug.sh PATH/TO/kiln
#
# Makes a small CNN in ONNX (Conv+BN+Relu, Conv+Add+Relu, GlobalAveragePool,
# MatMul+Add+Relu; dynamic batch) with /usr/bin/python3 + onnx, then checks
# that `kiln debug compare` passes it, names the layer of a planted bug
# (KILN_TEST_PLANT_BUG=<op>, a test-only hook that makes the first layer of
# that op wrong) and the ONNX nodes it came from, that switching the pass
# that made that layer off makes the comparison pass again, and the errors.
# Ends with "N passed, M failed"; exits 1 if anything failed. About 2 s.
set -u

KILN=${1:?usage: test_debug.sh PATH/TO/kiln}
KILN=$(cd "$(dirname "$KILN")" && pwd)/$(basename "$KILN")
ATT=$(cd "$(dirname "$0")/../data/attention" && pwd)
PY=/usr/bin/python3
T=$(mktemp -d /tmp/kiln_debug_test.XXXXXX)
trap 'rm -rf "$T"' EXIT
PASS=0
FAIL=0

ok() { PASS=$((PASS + 1)); }
bad() { FAIL=$((FAIL + 1)); echo "FAIL: $*"; }

# expect NAME RC PATTERN CMD...   RC: a number. PATTERN ("" for none) must
# appear in stdout+stderr (grep -F). A failure (RC 2, or 1 without a
# comparison result) must also print "kiln: error:".
expect() {
    local name=$1 want=$2 pat=$3
    shift 3
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    local good=1
    [ $rc -eq "$want" ] || good=0
    if [ "$want" -ne 0 ] && ! grep -q '^result: ' "$T/out" && ! grep -q '^kiln: error: ' "$T/err"; then good=0; fi
    if [ -n "$pat" ] && ! cat "$T/out" "$T/err" | grep -qF -- "$pat"; then good=0; fi
    if [ $good = 1 ]; then
        ok
    else
        bad "$name: exit $rc (wanted $want), pattern '$pat'"
        sed 's/^/    | /' "$T/out" "$T/err" | head -30
    fi
}

$PY - "$T" <<'EOF' || { echo "cannot make the test model (needs /usr/bin/python3 with onnx, numpy)"; echo "0 passed, 1 failed"; exit 1; }
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
d = sys.argv[1]
rng = np.random.default_rng(3)
def w(*s): return (rng.standard_normal(s) * 0.3).astype(np.float32)
inits = [numpy_helper.from_array(w(16, 3, 3, 3), "w1"), numpy_helper.from_array(w(16), "b1"),
         numpy_helper.from_array(np.abs(w(16)) + 0.5, "bn_s"), numpy_helper.from_array(w(16), "bn_b"),
         numpy_helper.from_array(w(16), "bn_m"), numpy_helper.from_array(np.abs(w(16)) + 0.5, "bn_v"),
         numpy_helper.from_array(w(16, 16, 3, 3), "w2"), numpy_helper.from_array(w(16), "b2"),
         numpy_helper.from_array(w(16, 10), "fc_w"), numpy_helper.from_array(w(10), "fc_b")]
nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["n1"], name="bn1"),
         helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
         helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
         helper.make_node("Add", ["c2", "r1"], ["a2"], name="add2"),
         helper.make_node("Relu", ["a2"], ["r2"], name="relu2"),
         helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
         helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
         helper.make_node("MatMul", ["f", "fc_w"], ["mm"], name="fc_mm"),
         helper.make_node("Add", ["mm", "fc_b"], ["fa"], name="fc_add"),
         helper.make_node("Relu", ["fa"], ["y"], name="fc_relu")]
g = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16, 16])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])], initializer=inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
onnx.checker.check_model(m)
onnx.save(m, d + "/cnn.onnx")
np.save(d + "/x.npy", rng.standard_normal((2, 3, 16, 16)).astype(np.float32))
np.save(d + "/x_channels.npy", np.zeros((2, 4, 16, 16), np.float32))
np.save(d + "/x_rank.npy", np.zeros((2, 3, 16), np.float32))
np.save(d + "/x_f64.npy", np.zeros((2, 3, 16, 16)))
EOF

cd "$T"

# ---- help, passes, usage errors -----------------------------------------------------
expect "debug --help" 0 "Usage: kiln debug compare MODEL.onnx" "$KILN" debug --help
expect "help debug" 0 "--disable-pass NAME" "$KILN" help debug
expect "debug compare --help" 0 "--no-memory-reuse" "$KILN" debug compare --help
expect "kiln --help lists debug" 0 "debug compare MODEL.onnx" "$KILN" --help
expect "build --help" 0 "--disable-pass NAME" "$KILN" build --help
expect "debug passes" 0 "fuse_conv" "$KILN" debug passes
expect "debug passes (cpu_layout)" 0 "cpu_layout" "$KILN" debug passes
expect "debug without subcommand" 2 "compare or passes" "$KILN" debug
expect "debug bogus subcommand" 2 "unknown subcommand 'frob'" "$KILN" debug frob
expect "compare without model" 2 "no model given" "$KILN" debug compare
expect "compare unknown option" 2 "unknown option '--bogus'" "$KILN" debug compare cnn.onnx --bogus
expect "compare bad --atol" 2 "--atol: expected a number" "$KILN" debug compare cnn.onnx --atol -1
expect "compare two precisions" 2 "only one of" "$KILN" debug compare cnn.onnx --fp32 --fp16
expect "compare unknown pass" 2 "unknown pass 'fuse_all' (passes: fold_bn, fuse_conv," \
    "$KILN" debug compare cnn.onnx --disable-pass fuse_all
expect "compare bad --layer-precision" 1 "expected name:fp32, got 'conv1'" "$KILN" debug compare cnn.onnx --layer-precision conv1
expect "build unknown pass" 2 "unknown pass 'nope'" "$KILN" build cnn.onnx -o e.kiln --disable-pass nope

# ---- input errors (before the build) --------------------------------------------------
expect "missing input file" 1 "no_such.npy" "$KILN" debug compare cnn.onnx --input x=no_such.npy
expect "missing model" 1 "no_such.onnx" "$KILN" debug compare no_such.onnx
expect "wrong shape" 1 "x_channels.npy has float32 [2x4x16x16], the model's input is float32 [batch x 3 x 16 x 16] (a wrong shape)" \
    "$KILN" debug compare cnn.onnx --input x=x_channels.npy
expect "wrong rank" 1 "(a wrong rank)" "$KILN" debug compare cnn.onnx --input x_rank.npy
expect "wrong dtype" 1 "(a wrong dtype)" "$KILN" debug compare cnn.onnx --input x_f64.npy
expect "unknown input name" 1 "the model has no input named 'z' (inputs: 'x')" \
    "$KILN" debug compare cnn.onnx --input z=x.npy
expect "shape outside the profile" 1 "x.npy has shape [2x3x16x16], but dim 0 must be 1" \
    "$KILN" debug compare cnn.onnx --input x.npy --shapes x:1x3x16x16

# ---- comparisons ----------------------------------------------------------------------
expect "clean model" 0 "result: every compared tensor is within tolerance" "$KILN" debug compare cnn.onnx --input x=x.npy
expect "clean: file shape sets the profile" 0 "input  'x': float32 [2x3x16x16]  (x.npy)" \
    "$KILN" debug compare cnn.onnx --input x.npy
expect "random input, verbose: every tensor" 0 " r1 float32 [1x16x16x16]" "$KILN" debug compare cnn.onnx --verbose --no-tuning
expect "engine without memory reuse" 0 "memory reuse off)" "$KILN" debug compare cnn.onnx --no-memory-reuse
expect "fuse_conv off" 0 "passes off: fuse_conv" "$KILN" debug compare cnn.onnx --disable-pass fuse_conv
# torch 1.13's nn.MultiheadAttention(batch_first=True): the [B, S, E] tensors
# the block reads and writes once its transposes go are not the model's
# [S, B, E] ones of the same names; over a batch profile, B*H read by meaning
expect "batch-first attention" 0 "result: every compared tensor is within tolerance" \
    "$KILN" debug compare "$ATT/t113_ts_mha_bf.onnx" --shapes x:2x8x32
expect "batch-first attention over a batch profile" 0 "result: every compared tensor is within tolerance" \
    "$KILN" debug compare "$ATT/t113_ts_tv_vit.onnx" --min-shapes x:1x3x16x16 --opt-shapes x:3x3x16x16 \
    --max-shapes x:4x3x16x16

# a planted bug in the first fused convolution
export KILN_TEST_PLANT_BUG=FusedConv
expect "planted FusedConv: layer" 1 "first layer whose output differs: layer 0 of 5, FusedConv 'conv1+bn1+relu1'" \
    "$KILN" debug compare cnn.onnx --input x=x.npy
expect "planted FusedConv: sources" 1 "made from: 'conv1', 'bn1', 'relu1' (ONNX nodes)" \
    "$KILN" debug compare cnn.onnx --input x=x.npy
expect "planted FusedConv: output" 1 "output 0 'r1': float32 [2x16x16x16]" "$KILN" debug compare cnn.onnx --input x=x.npy
expect "planted FusedConv: not the memory" 1 "it still differs" "$KILN" debug compare cnn.onnx --input x=x.npy
expect "planted FusedConv: graph output" 1 "DIFFERS" "$KILN" debug compare cnn.onnx --input x=x.npy
expect "planted FusedConv, fuse_conv off" 0 "result: every compared tensor is within tolerance" \
    "$KILN" debug compare cnn.onnx --input x=x.npy --disable-pass fuse_conv
expect "planted FusedConv, huge tolerance" 0 "within tolerance" "$KILN" debug compare cnn.onnx --atol 100
# ... and in the fused matrix product
export KILN_TEST_PLANT_BUG=FusedMatMul
expect "planted FusedMatMul: layer and sources" 1 "made from: 'fc_mm', 'fc_add', 'fc_relu' (ONNX nodes)" \
    "$KILN" debug compare cnn.onnx --input x=x.npy
expect "planted FusedMatMul, fuse_matmul off" 0 "passes off: fuse_matmul" \
    "$KILN" debug compare cnn.onnx --input x=x.npy --disable-pass fuse_matmul
unset KILN_TEST_PLANT_BUG

# ---- kiln build --disable-pass, sources in inspect ----------------------------------------
expect "build with fuse_conv off" 0 "" "$KILN" build cnn.onnx -o off.kiln --disable-pass fuse_conv --disable-pass fold_bn -q
expect "inspect: no FusedConv" 0 "BatchNormalization" "$KILN" inspect off.kiln
if grep -q "FusedConv" "$T/out"; then bad "build --disable-pass fuse_conv still has a FusedConv"; else ok; fi
expect "build" 0 "" "$KILN" build cnn.onnx -o on.kiln -q
expect "inspect --json: sources" 0 '"sources": ["conv1", "bn1", "relu1"]' "$KILN" inspect on.kiln --json

# ---- kiln run --compare shares the reference builder -------------------------------------
expect "build b2" 0 "" "$KILN" build cnn.onnx -o b2.kiln -q --shapes x:2x3x16x16
expect "run --compare" 0 "compare against the fp32 CPU plan of cnn.onnx" "$KILN" run b2.kiln -i x.npy --compare cnn.onnx -q
expect "run --compare: y" 0 "  y: max abs err " "$KILN" run b2.kiln -i x.npy --compare cnn.onnx -q

echo "$PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
