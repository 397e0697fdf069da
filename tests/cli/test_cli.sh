#!/bin/bash
# test_cli.sh -- behaviour tests of the `kiln` command-line tool.
#
# Usage: tests/cli/test_cli.sh PATH/TO/kiln
#
# Makes a tiny ONNX model (MatMul + Add + Relu with a dynamic batch, plus a
# second output with an awkward name) in a temporary folder with
# /usr/bin/python3 + onnx, then checks exit codes and messages of every
# subcommand. Ends with "N passed, M failed"; exits 1 if anything failed.
set -u

KILN=${1:?usage: test_cli.sh PATH/TO/kiln}
KILN=$(cd "$(dirname "$KILN")" && pwd)/$(basename "$KILN")
PY=/usr/bin/python3
T=$(mktemp -d /tmp/kiln_cli_test.XXXXXX)
trap 'rm -rf "$T"' EXIT
PASS=0
FAIL=0

ok() { PASS=$((PASS + 1)); }
bad() { FAIL=$((FAIL + 1)); echo "FAIL: $*"; }

# expect NAME RC PATTERN CMD...   RC: a number, or "nz" for any non-zero status.
# PATTERN ("" for none) must appear in stdout+stderr (grep -F, case-insensitive).
# Failures must also print "kiln: error:" on stderr.
expect() {
    local name=$1 want=$2 pat=$3
    shift 3
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    local good=1
    if [ "$want" = nz ]; then
        [ $rc -ne 0 ] || good=0
        if [ $rc -ne 0 ] && ! grep -q '^kiln: error: ' "$T/err"; then good=0; fi
    else
        [ $rc -eq "$want" ] || good=0
    fi
    if [ -n "$pat" ] && ! cat "$T/out" "$T/err" | grep -qiF -- "$pat"; then good=0; fi
    if [ $good = 1 ]; then
        ok
    else
        bad "$name: exit $rc (wanted $want), pattern '$pat'"
        sed 's/^/    | /' "$T/out" "$T/err" | head -20
    fi
}

# ---- the tiny model and its inputs -------------------------------------------------
$PY - "$T" <<'EOF' || { echo "cannot make the test model (needs /usr/bin/python3 with onnx, numpy)"; echo "0 passed, 1 failed"; exit 1; }
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
d = sys.argv[1]
rng = np.random.default_rng(7)
w = rng.standard_normal((4, 3)).astype(np.float32)
b = rng.standard_normal((3,)).astype(np.float32)
nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
         helper.make_node("Add", ["h", "b"], ["hb"], name="add"),
         helper.make_node("Relu", ["hb"], ["y"], name="relu"),
         helper.make_node("Add", ["y", "y"], ["sub/out:0"], name="twice")]
g = helper.make_graph(nodes, "tiny",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3]),
                       helper.make_tensor_value_info("sub/out:0", TensorProto.FLOAT, ["batch", 3])],
                      initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
onnx.checker.check_model(m)
onnx.save(m, d + "/tiny.onnx")
x = rng.standard_normal((2, 4)).astype(np.float32)
np.save(d + "/x.npy", x)
np.save(d + "/y_ref.npy", np.maximum(x @ w + b, 0))
np.save(d + "/x_shape.npy", rng.standard_normal((2, 5)).astype(np.float32))
np.save(d + "/x_big.npy", rng.standard_normal((9, 4)).astype(np.float32))
np.save(d + "/x_f64.npy", x.astype(np.float64))
np.save(d + "/x_rank.npy", x.reshape(2, 2, 2))
np.save(d + "/x_fortran.npy", np.asfortranarray(rng.standard_normal((4, 4)).astype(np.float32)))
open(d + "/garbage.npy", "wb").write(bytes(range(200)))
# outputs whose names sanitize alike, and one that is another's '_<index>' form
xs = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
names = ["o_1", "o_1_2", "o:1", "o/1"]
g = helper.make_graph([helper.make_node("Mul", ["x", "k%d" % i], [n], name="m%d" % i) for i, n in enumerate(names)],
                      "collide", [xs], [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in names],
                      initializer=[numpy_helper.from_array(np.full((2,), i + 1, np.float32), "k%d" % i) for i in range(4)])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), d + "/collide.onnx")
np.save(d + "/x2.npy", np.ones((2,), np.float32))
# an output name of 240 characters
long = "L" * 240
g = helper.make_graph([helper.make_node("Relu", ["x"], [long])], "long", [xs],
                      [helper.make_tensor_value_info(long, TensorProto.FLOAT, [2])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), d + "/long.onnx")
# two inputs sharing the symbolic dim 'n'
g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["s"])], "sym",
                      [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 4]),
                       helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", 4])],
                      [helper.make_tensor_value_info("s", TensorProto.FLOAT, ["n", 4])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), d + "/sym.onnx")
np.save(d + "/a2.npy", np.ones((2, 4), np.float32))
np.save(d + "/b3.npy", np.ones((3, 4), np.float32))
# an If whose branches give outputs of rank 2 and rank 1
def const_graph(name, arr):
    return helper.make_graph([helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr))], name, [],
                             [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)])
g = helper.make_graph([helper.make_node("If", ["c"], ["r"], then_branch=const_graph("t", np.ones((2, 3), np.float32)),
                                        else_branch=const_graph("e", np.ones((2,), np.float32)))], "ifrank",
                      [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                      [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), d + "/ifrank.onnx")
np.save(d + "/c1.npy", np.array(True))
np.save(d + "/c0.npy", np.array(False))
# an output declared int64 [3] that the graph computes as float32 [2x4]; opset 19
g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"])], "decl",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                      [helper.make_tensor_value_info("r", TensorProto.INT64, [3])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), d + "/decl.onnx")
g.output[0].CopyFrom(helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 4]))
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]), d + "/opset19.onnx")
# value_info of the trace's batch 2 in a model of dynamic batch N (4.10): the Reshape's target
# goes through Cast, which inference cannot follow
g = helper.make_graph([helper.make_node("Shape", ["x"], ["sh"]),
                       helper.make_node("Cast", ["sh"], ["shf"], to=TensorProto.FLOAT),
                       helper.make_node("Cast", ["shf"], ["shi"], to=TensorProto.INT64),
                       helper.make_node("Reshape", ["x", "shi"], ["r"]),
                       helper.make_node("Transpose", ["r"], ["b"], perm=[0, 2, 1]),
                       helper.make_node("Reshape", ["b", "s2"], ["c"]),
                       helper.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 1, 3])], "vinfo",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 2, 4]),
                       helper.make_tensor_value_info("r", TensorProto.FLOAT, ["N", 4, 4])],
                      [numpy_helper.from_array(np.array([-1, 2, 2, 4], np.int64), "s2")],
                      value_info=[helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 4, 4]),
                                  helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 4, 4]),
                                  helper.make_tensor_value_info("c", TensorProto.INT64, [2, 2, 2, 4])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), d + "/vinfo.onnx")
# node names with a terminal escape and a newline (tiny.onnx's graph)
for nd in m.graph.node:
    nd.name = nd.name + "\x1b[2J\n"
onnx.save(m, d + "/ctrl.onnx")
# inputs, outputs, a symbolic dim and tensors named with terminal escapes, a BEL, a newline and
# a C1 CSI (U+009B); node names too
cx, cy, cd = "x\x1b]0;owned\x07", "y\x1b[31m\n", "b\x1b[1m"
g = helper.make_graph([helper.make_node("MatMul", [cx, "w"], ["h\x1b[2J"], name="mm\u009b2J"),
                       helper.make_node("Relu", ["h\x1b[2J"], [cy], name="relu\r")], "ctrl2",
                      [helper.make_tensor_value_info(cx, TensorProto.FLOAT, [cd, 4])],
                      [helper.make_tensor_value_info(cy, TensorProto.FLOAT, [cd, 5])],  # (a warning: 3)
                      initializer=[numpy_helper.from_array(w, "w")])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), d + "/ctrl2.onnx")
np.save(d + "/xbad.npy", rng.standard_normal((2, 5)).astype(np.float32))
open(d + "/random.kiln", "wb").write(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes())
EOF

cd "$T"

# ---- help, version, usage errors ---------------------------------------------------
expect "kiln --help" 0 "Usage: kiln" "$KILN" --help
expect "kiln help" 0 "Commands" "$KILN" help
expect "kiln -h" 0 "Usage: kiln" "$KILN" -h
expect "kiln version" 0 "kiln 0." "$KILN" version
expect "kiln --version" 0 "library" "$KILN" --version
for sub in build run inspect bench version; do
    expect "kiln $sub --help" 0 "Usage: kiln $sub" "$KILN" "$sub" --help
    expect "kiln $sub -h" 0 "Usage: kiln $sub" "$KILN" "$sub" -h
    expect "kiln help $sub" 0 "Usage: kiln $sub" "$KILN" help "$sub"
done
expect "no command" 2 "Usage" "$KILN"
expect "unknown command" 2 "unknown command 'frobnicate'" "$KILN" frobnicate
for sub in build run inspect bench; do
    expect "kiln $sub --bogus" 2 "unknown option '--bogus'" "$KILN" "$sub" --bogus x
    expect "kiln $sub without file" 2 "no " "$KILN" "$sub"
done
expect "option without value" 2 "needs a value" "$KILN" build tiny.onnx --shapes
expect "flag with value" 2 "takes no value" "$KILN" build tiny.onnx --fp32=yes
expect "two precisions" 2 "only one of" "$KILN" build tiny.onnx --fp32 --fp16
expect "bad --threads" 2 "--threads" "$KILN" build tiny.onnx --threads many
expect "bad --device" 2 "--device" "$KILN" build tiny.onnx --device tpu
expect "--device cpu:1 (the host is cpu:0)" 2 "--device" "$KILN" build tiny.onnx --device cpu:1
expect "--device cpu:0, as inspect prints it" 0 "layers" "$KILN" build tiny.onnx -o cpu0.kiln --device cpu:0 --shapes x:2x4
expect "--device cuda:x" 2 "--device" "$KILN" build tiny.onnx --device cuda:x
expect "--device with a long name" 2 "--device" "$KILN" build tiny.onnx --device "$(printf 'c%.0s' $(seq 1 300))"
expect "bad shapes syntax" 2 "name:dims" "$KILN" build tiny.onnx --shapes 1x4
expect "bad shapes dims" 2 "bad dims" "$KILN" build tiny.onnx --shapes x:1xfour
expect "bad shapes trailing x" 2 "trailing" "$KILN" build tiny.onnx --shapes x:1x
expect "bad --iterations" 2 "--iterations" "$KILN" bench x.kiln --iterations 0
expect "bad --duration" 2 "--duration" "$KILN" bench x.kiln --duration -1
expect "two engines" 2 "unexpected argument" "$KILN" run a.kiln b.kiln

# ---- missing and bad files ---------------------------------------------------------------
expect "build missing model" nz "no_such_model.onnx" "$KILN" build no_such_model.onnx -o z.kiln
expect "run missing engine" nz "no_such.kiln" "$KILN" run no_such.kiln
expect "inspect missing engine" nz "no_such.kiln" "$KILN" inspect no_such.kiln
expect "bench missing engine" nz "no_such.kiln" "$KILN" bench no_such.kiln
expect "build a non-onnx file" nz "garbage.npy" "$KILN" build garbage.npy -o z.kiln
expect "random bytes engine (run)" nz "not a kiln engine" "$KILN" run random.kiln
expect "random bytes engine (inspect)" nz "not a kiln engine" "$KILN" inspect random.kiln

# ---- build -------------------------------------------------------------------------------
expect "build unknown input in --shapes" nz "'nope'" "$KILN" build tiny.onnx -o t.kiln --shapes nope:1x4
expect "build wrong rank in --shapes" nz "rank" "$KILN" build tiny.onnx -o t.kiln --shapes x:1x4x1
expect "build fixed dim mismatch" nz "fixed dim 1" "$KILN" build tiny.onnx -o t.kiln --shapes x:1x5
expect "build min > max" nz "min <= opt <= max" "$KILN" build tiny.onnx -o t.kiln --min-shapes x:4x4 --max-shapes x:2x4
expect "build" 0 "layers" "$KILN" build tiny.onnx -o tiny.kiln --min-shapes x:1x4 --opt-shapes x:2x4 --max-shapes x:8x4
[ -s tiny.kiln ] && ok || bad "build wrote no engine"
grep -q "time:" out && ok || bad "build summary has no time"
expect "build --shapes, default output name" 0 "tiny.kiln" "$KILN" build tiny.onnx --shapes x:3x4 --threads 1 --workspace 64
expect "build note for missing profile" 0 "dynamic" "$KILN" build tiny.onnx -o noprof.kiln
expect "build --shapes with --min-shapes" 2 "both --shapes and --min-shapes" "$KILN" build tiny.onnx -o t.kiln --shapes x:1x4 --min-shapes x:1x4
expect "build min/max only (opt = max)" 0 "opt [6x4] max [6x4]" "$KILN" build tiny.onnx -o mm.kiln --min-shapes x:1x4 --max-shapes x:6x4
expect "help for an unknown command" 2 "unknown command 'bogus'" "$KILN" help bogus

# ---- run -----------------------------------------------------------------------------------
"$KILN" build tiny.onnx -o tiny.kiln --min-shapes x:1x4 --opt-shapes x:2x4 --max-shapes x:8x4 >/dev/null 2>&1
expect "run random inputs" 0 "output 'y'" "$KILN" run tiny.kiln --random-inputs
grep -q "\[2x3\]" out && ok || bad "random run did not use the opt shape 2x4"
expect "run with --shapes" 0 "[5x3]" "$KILN" run tiny.kiln --random-inputs --shapes x:5x4
expect "run --shapes outside profile" nz "'x'" "$KILN" run tiny.kiln --random-inputs --shapes x:9x4
expect "run --memory-limit too small" nz "memory limit of 104 bytes" "$KILN" run tiny.kiln --random-inputs --memory-limit 0.0001
expect "run --memory-limit enough" 0 "output 'y'" "$KILN" run tiny.kiln --random-inputs --memory-limit 1
expect "run bad --memory-limit" 2 "--memory-limit" "$KILN" run tiny.kiln --random-inputs --memory-limit lots
expect "inspect: activation arena and lower bound" 0 "lower bound" "$KILN" inspect tiny.kiln
expect "run with input and output dir" 0 "min" "$KILN" run tiny.kiln --input x=x.npy --output-dir outs/nested
[ -f outs/nested/y.npy ] && ok || bad "y.npy not written"
[ -f outs/nested/sub_out_0.npy ] && ok || bad "sanitized sub_out_0.npy not written"
if $PY -c "
import numpy as np, sys
y = np.load('outs/nested/y.npy'); r = np.load('y_ref.npy'); t = np.load('outs/nested/sub_out_0.npy')
sys.exit(0 if y.dtype == np.float32 and y.shape == (2, 3) and np.allclose(y, r, atol=1e-5) and np.allclose(t, 2 * r, atol=1e-5) else 1)"; then
    ok
else
    bad "outputs differ from numpy's"
fi
expect "run unnamed --input (one input)" 0 "x.npy" "$KILN" run tiny.kiln --input x.npy
expect "run --print" 0 "values" "$KILN" run tiny.kiln --input x=x.npy --print
expect "run wrong shape" nz "x" "$KILN" run tiny.kiln --input x=x_shape.npy
grep -qF "'x'" err && grep -qF "2x5" err && ok || bad "wrong-shape message lacks input name and shape: $(cat err)"
expect "run batch over profile" nz "9x4" "$KILN" run tiny.kiln --input x=x_big.npy
expect "run wrong rank" nz "rank" "$KILN" run tiny.kiln --input x=x_rank.npy
expect "run wrong dtype" nz "float64" "$KILN" run tiny.kiln --input x=x_f64.npy
grep -qF "float32" err && ok || bad "wrong-dtype message lacks the expected dtype"
expect "run wrong input name" nz "'bogus'" "$KILN" run tiny.kiln --input bogus=x.npy
expect "run --shapes wrong name" nz "'bogus'" "$KILN" run tiny.kiln --random-inputs --shapes bogus:1x4
expect "run missing npy" nz "missing.npy" "$KILN" run tiny.kiln --input x=missing.npy
expect "run garbage npy" nz "not a .npy file" "$KILN" run tiny.kiln --input x=garbage.npy
expect "run fortran npy" nz "fortran" "$KILN" run tiny.kiln --input x=x_fortran.npy
expect "run input given twice" nz "twice" "$KILN" run tiny.kiln --input x=x.npy --input x=x.npy
"$KILN" run tiny.kiln --random-inputs --seed 5 --output-dir s1 >/dev/null 2>&1
"$KILN" run tiny.kiln --random-inputs --seed 5 --output-dir s2 >/dev/null 2>&1
"$KILN" run tiny.kiln --random-inputs --seed 6 --output-dir s3 >/dev/null 2>&1
cmp -s s1/y.npy s2/y.npy && ok || bad "same --seed gave different outputs"
cmp -s s1/y.npy s3/y.npy && bad "different --seed gave the same outputs" || ok
expect "run --threads" 0 "output 'y'" "$KILN" run tiny.kiln --random-inputs --threads 1

# ---- issue 20, item 4: inputs, output files ----------------------------------------------
# an input left out is an error unless --random-inputs (4.8)
expect "run without inputs" nz "input 'x' not given" "$KILN" run tiny.kiln
grep -qF -- "--random-inputs" err && ok || bad "missing-input message does not mention --random-inputs: $(cat err)"
expect "run --shapes without --random-inputs" nz "input 'x' not given" "$KILN" run tiny.kiln --shapes x:5x4
expect "run --help mentions --random-inputs" 0 "--random-inputs" "$KILN" run --help
# inputs sharing a symbolic dim that disagree: named before any layer runs (4.8)
"$KILN" build sym.onnx -o sym.kiln -q --min-shapes a:1x4,b:1x4 --max-shapes a:8x4,b:8x4
expect "run shared dim mismatch" nz "'n'" "$KILN" run sym.kiln --input a=a2.npy --input b=b3.npy
grep -qF "'a'" err && grep -qF "'b'" err && ok || bad "shared-dim message lacks the inputs: $(cat err)"
expect "run one input left out" nz "input 'b' not given" "$KILN" run sym.kiln --input a=a2.npy
# --output-dir '' (4.7: read out of bounds)
expect "run --output-dir ''" 2 "--output-dir: empty" "$KILN" run tiny.kiln --random-inputs --output-dir ''
: >notadir
expect "run --output-dir over a file" nz "Not a directory" "$KILN" run tiny.kiln --random-inputs --output-dir notadir
# file names unique against all the others (4.6): 4 outputs, 4 files, each its own values
"$KILN" build collide.onnx -o collide.kiln -q
expect "run outputs that sanitize alike" 0 "o_1_2_1" "$KILN" run collide.kiln --input x=x2.npy --output-dir coll
if $PY -c "
import numpy as np, os, sys
fs = sorted(f for f in os.listdir('coll'))
vals = sorted(float(np.load('coll/' + f)[0]) for f in fs)
sys.exit(0 if len(fs) == 4 and vals == [1, 2, 3, 4] else 1)"; then ok; else bad "colliding outputs: $(ls coll)"; fi
# existing files that are not regular files are never replaced (4.5)
mkdir -p fifodir && mkfifo fifodir/y.npy
expect "run --output-dir over a FIFO" nz "exists and is a FIFO" "$KILN" run tiny.kiln --random-inputs --output-dir fifodir
[ -p fifodir/y.npy ] && ok || bad "the FIFO was replaced"
mkfifo engine.fifo
expect "build -o a FIFO" nz "exists and is a FIFO" "$KILN" build tiny.onnx -o engine.fifo
[ -p engine.fifo ] && ok || bad "build -o replaced the FIFO"
ln -s /dev/null nulldev
expect "build -o a link to a character device" nz "exists and is a character device" "$KILN" build tiny.onnx -o nulldev
[ -L nulldev ] && [ -c /dev/null ] && ok || bad "build -o replaced the link to /dev/null"
expect "build --timing-cache a FIFO" nz "FIFO" "$KILN" build tiny.onnx -o t.kiln --timing-cache engine.fifo
# a cache that could not be written after the tuning fails before it (it failed at the end)
expect "build --timing-cache in a missing folder" nz "timing cache 'nodir/c.txt': folder 'nodir': No such file" "$KILN" build tiny.onnx -o t.kiln --timing-cache nodir/c.txt
expect "build --timing-cache ''" nz "the path is empty" "$KILN" build tiny.onnx -o t.kiln --timing-cache ''
# -q prints nothing on success, the library's notes and tuning progress included (an old cache's note here)
printf 'kiln-timing-cache 2\n' >old.cache
expect "build --timing-cache of version 2: a note" 0 "is of version 2" "$KILN" build tiny.onnx -o t.kiln --timing-cache old.cache
printf 'kiln-timing-cache 2\n' >old.cache
"$KILN" build tiny.onnx -o t.kiln --timing-cache old.cache -q >out 2>&1 && [ ! -s out ] && ok ||
    bad "build -q printed: $(head -c 300 out)"
# -o naming the model or the timing cache (issue 20, probe6): the engine replaced the model, or
# the cache it had just written (the next build then failed: "not a kiln timing cache")
cp tiny.onnx self.onnx
expect "build -o the model itself" nz "is the model itself" "$KILN" build self.onnx -o self.onnx
cmp -s tiny.onnx self.onnx && ok || bad "build -o the model: the model was replaced"
expect "build -o the model by another path" nz "is the model itself" "$KILN" build self.onnx -o "$T/./self.onnx"
ln -s self.onnx selflink.onnx
expect "build a link to the model -o the model" nz "is the model itself" "$KILN" build selflink.onnx -o self.onnx
expect "build -o a link to the model (the link is replaced)" 0 "" "$KILN" build self.onnx -o selflink.onnx -q
cmp -s tiny.onnx self.onnx && [ ! -L selflink.onnx ] && ok || bad "build -o a link to the model: the model changed"
expect "build -o the timing cache" nz "is the timing cache" "$KILN" build tiny.onnx -o same.cache --timing-cache ./same.cache
[ ! -e same.cache ] && ok || bad "build -o the timing cache wrote it"
# -o naming the model's external data file: refused at the save (no engine replaces a file that
# is not one); the next build read the engine's bytes as weights
mkdir -p extm
$PY - "$T" <<'EOF'
import sys, onnx
m = onnx.load(sys.argv[1] + "/tiny.onnx")
onnx.save(m, sys.argv[1] + "/extm/m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
          location="w.bin", size_threshold=0)
EOF
cp extm/w.bin extm/w_orig.bin
expect "build -o the model's external data" nz "exists and is not a kiln engine" "$KILN" build extm/m.onnx -o extm/w.bin
cmp -s extm/w.bin extm/w_orig.bin && ok || bad "build -o the external data: the weights were replaced"
# an input both from a file and in --shapes: the file's shape was taken without a word (kiln bench
# measured another batch than asked for)
expect "run --shapes against the --input file" nz "--shapes gives [3x4] but x.npy holds [2x4]" "$KILN" run tiny.kiln --input x=x.npy --shapes x:3x4
expect "bench --shapes against the --input file" nz "--shapes gives [3x4] but x.npy holds [2x4]" "$KILN" bench tiny.kiln --input x=x.npy --shapes x:3x4 --iterations 1
expect "bench --shapes as the --input file" 0 "[2x4]" "$KILN" bench tiny.kiln --input x=x.npy --shapes x:2x4 --iterations 1
# --output-dir where an output's file is an --input file or the engine: it was replaced (issue 20, probe6)
mkdir -p iodir && cp x.npy iodir/y.npy
expect "run --output-dir over the --input file" nz "the --input file of input 'x'" "$KILN" run tiny.kiln --input x=iodir/y.npy --output-dir ./iodir/
cmp -s x.npy iodir/y.npy && [ ! -e iodir/sub_out_0.npy ] && ok || bad "run --output-dir over the --input file: files written"
cp tiny.kiln iodir/y.npy
expect "run --output-dir over the engine" nz "the engine" "$KILN" run iodir/y.npy --input x=x.npy --output-dir iodir
cmp -s tiny.kiln iodir/y.npy && ok || bad "run --output-dir over the engine: the engine was replaced"
# a model that is a device is refused before it is read (/dev/zero was read until memory
# ran out: 32 GiB asked for); a pipe is still read to its end
expect "build a model that is /dev/zero" nz "it is a character device, not a model file" timeout 20 "$KILN" build /dev/zero -o t.kiln
expect "build a model that is /dev/urandom" nz "it is a character device, not a model file" timeout 20 "$KILN" build /dev/urandom -o t.kiln
expect "build a model through a pipe" 0 "" sh -c "cat tiny.onnx | '$KILN' build /dev/stdin -o t.kiln -q"
mkfifo engine2.fifo
expect "run an engine that is a FIFO" nz "FIFO" timeout 20 "$KILN" run engine2.fifo
# long names (4.11): a 245-character -o and a 240-character output name
longo=$(printf 'E%.0s' $(seq 240)).kiln
expect "build -o of 245 characters" 0 "layers" "$KILN" build tiny.onnx -o "$longo"
[ -s "$longo" ] && ok || bad "long -o not written"
"$KILN" build long.onnx -o long.kiln -q
expect "run output name of 240 characters" 0 "" "$KILN" run long.kiln --input x=x2.npy --output-dir longout
[ "$(ls longout | wc -l)" = 1 ] && [ "$(ls longout)" = "$(printf 'L%.0s' $(seq 240)).npy" ] && ok || bad "long output name: $(ls longout)"
# an If whose branches differ in rank: the output's rank is unknown, not a scalar's (4.12)
expect "build If of two ranks" 0 "output r: float32 [unknown rank]" "$KILN" build ifrank.onnx -o ifrank.kiln
expect "inspect If of two ranks" 0 "r: float32 [unknown rank]" "$KILN" inspect ifrank.kiln
"$KILN" inspect ifrank.kiln --json | $PY -c "
import json, sys
d = json.load(sys.stdin)
sys.exit(0 if d['outputs'][0]['shape'] is None else 1)" && ok || bad "inspect --json: If output shape is not null"
expect "run If then-branch" 0 "output 'r': float32 [2x3]" "$KILN" run ifrank.kiln --input c=c1.npy
expect "run If else-branch" 0 "output 'r': float32 [2]" "$KILN" run ifrank.kiln --input c=c0.npy
# declarations that contradict the graph, opsets past the supported range: warnings (4.10)
expect "build declared type contradicts" 0 "kiln: warning: graph output 'r' is declared int64 [3], but the graph computes float32 [2x4]" "$KILN" build decl.onnx -o decl.kiln
grep -qF "kiln: warning:" err && ok || bad "the warning is not on stderr"
expect "build opset 19" 0 "kiln: warning: the model uses ai.onnx opset 19; kiln supports opsets 1 to 18" "$KILN" build opset19.onnx -o opset19.kiln
VP="--min-shapes x:1x4x4 --opt-shapes x:2x4x4 --max-shapes x:8x4x4"
expect "build declared value shape of the trace's batch" 0 "kiln: warning: value 'b' is declared float32 [2x4x4], but from the inputs' shape profiles the graph computes float32 [?x?x?]: the engine uses the computed type and shape" "$KILN" build vinfo.onnx -o vinfo.kiln $VP
grep -qF "kiln: warning: graph output 'r' is declared float32 [2x4x4], but from the inputs' shape profiles the graph computes float32 [?x?x?]" err && ok || bad "no warning for the declared shape of output r: $(cat err)"
grep -qF "kiln: warning: value 'c' is declared int64 [2x2x2x4], but from the inputs' shape profiles the graph computes float32 [?x2x2x4]" err && ok || bad "no warning for the declared dtype of c: $(cat err)"
expect "run at batch 1 what declares batch 2" 0 "output 'y': float32 [1x2x2x4]" "$KILN" run vinfo.kiln --random-inputs --shapes x:1x4x4
expect "build -q: no declared-shape warnings" 0 "" "$KILN" build vinfo.onnx -o vinfo.kiln $VP -q
[ -s "$T/out" ] || [ -s "$T/err" ] && bad "build -q printed: $(cat "$T/out" "$T/err")" || ok
expect "build a consistent model: no warning" 0 "" "$KILN" build tiny.onnx -o tiny2.kiln
grep -qF "warning" err && bad "warning for a consistent model: $(cat err)" || ok
[ -z "$(ls -A . | grep -F .tmp)" ] && ok || bad "temporary files left: $(ls -A | grep -F .tmp)"

# ---- damaged engines ------------------------------------------------------------------
size=$(stat -c %s tiny.kiln)
head -c $((size / 2)) tiny.kiln >half.kiln
head -c $((size - 1)) tiny.kiln >minus1.kiln
head -c 16 tiny.kiln >head16.kiln
: >empty.kiln
expect "truncated engine (half)" nz "truncated" "$KILN" run half.kiln
expect "truncated engine (-1 byte)" nz "truncated" "$KILN" run minus1.kiln
expect "truncated engine (16 bytes)" nz "truncated" "$KILN" inspect head16.kiln
expect "empty engine" nz "empty.kiln" "$KILN" run empty.kiln
expect "onnx file as engine" nz "not a kiln engine" "$KILN" run tiny.onnx

# ---- inspect -------------------------------------------------------------------------------
expect "inspect" 0 "x" "$KILN" inspect tiny.kiln
"$KILN" inspect tiny.kiln --json >inspect.json 2>&1 && $PY -m json.tool inspect.json >/dev/null 2>&1 && ok ||
    bad "inspect --json is not valid JSON: $(head -c 300 inspect.json)"
# fast math: off unless asked, and inspect says which
expect "inspect: accurate math by default" 0 "math:      accurate" "$KILN" inspect tiny.kiln
expect "build --fast-math" 0 "" "$KILN" build tiny.onnx -o fast.kiln --fast-math -q
expect "inspect: fast math" 0 "math:      fast (--fast-math" "$KILN" inspect fast.kiln
expect "inspect --json: fast math" 0 '"math": "fast"' "$KILN" inspect fast.kiln --json
expect "build --help: --fast-math" 0 "--fast-math" "$KILN" build --help
expect "build --help: KILN_TUNE_VERBOSE and KILN_CUDA_PLAN_THREADS" 0 "KILN_CUDA_PLAN_THREADS=N" "$KILN" build --help
expect "KILN_TUNE_VERBOSE=1: the build's tuning summary" 0 "kiln: tune summary: #1 mm+add+relu" env KILN_TUNE_VERBOSE=1 "$KILN" build tiny.onnx -o tv.kiln --shapes x:2x4
# names holding control characters come out escaped, never raw (a hostile model's terminal escapes)
expect "KILN_TUNE_VERBOSE=1: a name with ESC and a newline escaped" 0 'kiln: tune summary: #1 mm\x1b[2J\x0a+add' env KILN_TUNE_VERBOSE=1 "$KILN" build ctrl.onnx -o ctrl.kiln --shapes x:2x4
if grep -q "$(printf '\033')" out err; then bad "KILN_TUNE_VERBOSE printed a raw ESC"; else ok; fi
expect "inspect: a name with ESC and a newline escaped" 0 'mm\x1b[2J\x0a+add' "$KILN" inspect ctrl.kiln
if grep -q "$(printf '\033')" out err; then bad "inspect printed a raw ESC"; else ok; fi
# every command prints names from a model or engine escaped: inputs, outputs, dims, layers, sources
raw_ctrl() { LC_ALL=C grep -q "$(printf '[\033\007\r]\|\302[\200-\237]')" "$@"; }
ctrl_cmd() { # NAME RC PATTERN CMD...
    local name=$1
    expect "$@"
    if raw_ctrl out err; then bad "$name: printed a raw control character"; sed -n l out err | head -5; else ok; fi
}
ctrl_cmd "build: a warning naming an output, escaped" 0 "warning: graph output 'y\x1b[31m\x0a' is declared" "$KILN" build ctrl2.onnx -o ctrl2.kiln
ctrl_cmd "build: escaped names, dims" 0 "input 'x\x1b]0;owned\x07' [b\x1b[1m x 4] has dynamic dims" "$KILN" build ctrl2.onnx -o ctrl2.kiln
ctrl_cmd "build --shapes: escaped names" 0 "output y\x1b[31m\x0a: float32 [2x3]" "$KILN" build ctrl2.onnx -o ctrl2.kiln --shapes "$(printf 'x\033]0;owned\007'):2x4"
ctrl_cmd "run: escaped names" 0 "output 'y\x1b[31m\x0a'" "$KILN" run ctrl2.kiln --random-inputs
ctrl_cmd "run --compare: escaped names" 0 'y\x1b[31m\x0a: max abs err' "$KILN" run ctrl2.kiln --random-inputs --compare ctrl2.onnx
ctrl_cmd "run: an error naming the input, escaped" nz 'x\x1b]0;owned\x07' "$KILN" run ctrl2.kiln --input "$(printf 'x\033]0;owned\007')=xbad.npy"
ctrl_cmd "bench --profile: escaped layer names" 0 'relu\x0d' "$KILN" bench ctrl2.kiln --iterations 2 --profile
ctrl_cmd "inspect: escaped names, C1 too" 0 'mm\xc2\x9b2J' "$KILN" inspect ctrl2.kiln
ctrl_cmd "debug compare: escaped names" 0 "y\x1b[31m\x0a float32 [1x3]" "$KILN" debug compare ctrl2.onnx --verbose
# a planted bug (test_debug.sh) makes it name the layer and its source nodes
ctrl_cmd "debug compare: escaped layer and source names" 1 "made from: 'mm\xc2\x9b2J', 'relu\x0d'" env KILN_TEST_PLANT_BUG=FusedMatMul "$KILN" debug compare ctrl2.onnx
ctrl_cmd "debug compare: escaped node names (ctrl.onnx)" 1 "'mm\x1b[2J\x0a'" env KILN_TEST_PLANT_BUG=FusedMatMul "$KILN" debug compare ctrl.onnx

# ---- bench ------------------------------------------------------------------------------------
expect "bench" 0 "p50" "$KILN" bench tiny.kiln --warmup 1 --iterations 5
for k in p90 p99 min mean max throughput; do grep -q "$k" out && ok || bad "bench output lacks $k"; done
expect "bench --shapes, --duration" 0 "p99" "$KILN" bench tiny.kiln --shapes x:8x4 --iterations 3 --duration 0.05
"$KILN" bench tiny.kiln --iterations 3 --json >bench.json 2>&1 && $PY -c "
import json, sys
d = json.load(open('bench.json'))
sys.exit(0 if all(k in d['latency_ms'] for k in ('min', 'mean', 'p50', 'p90', 'p99', 'max')) and d['iterations'] == 3 else 1)" &&
    ok || bad "bench --json: $(head -c 300 bench.json)"
expect "bench bad engine" nz "not a kiln engine" "$KILN" bench random.kiln
# --idle-ms: a pause before each timed run (5 runs x 40 ms: at least 0.2 s of wall time)
t0=$(date +%s%N)
expect "bench --idle-ms" 0 "p50" "$KILN" bench tiny.kiln --warmup 0 --iterations 5 --idle-ms 40
[ $(( ($(date +%s%N) - t0) / 1000000 )) -ge 200 ] && ok || bad "bench --idle-ms 40 did not pause"
expect "bench --idle-ms bad" nz "--idle-ms" "$KILN" bench tiny.kiln --idle-ms -1
# --flush-mb: 64 MiB read and written before each timed run (the process's peak RSS shows it)
$PY -c "
import resource, subprocess, sys
subprocess.run([sys.argv[1], 'bench', 'tiny.kiln', '--warmup', '0', '--iterations', '2', '--flush-mb', '64'],
               check=True, capture_output=True)
sys.exit(0 if resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss >= 64 * 1024 else 1)" "$KILN" &&
    ok || bad "bench --flush-mb 64 did not write 64 MiB"
expect "bench --flush-mb bad" nz "--flush-mb" "$KILN" bench tiny.kiln --flush-mb -1
# --profile: one row per layer, shares summing to 100
expect "bench --profile" 0 "per-layer profile" "$KILN" bench tiny.kiln --iterations 3 --profile
layers=$("$KILN" inspect tiny.kiln --json | $PY -c "import json,sys; print(len(json.load(sys.stdin)['layers']))")
rows=$(awk '/per-layer profile/{p=1; getline; next} p && NF' out | wc -l)
[ "$rows" = "$layers" ] && ok || bad "bench --profile: $rows rows for $layers layers"
"$KILN" bench tiny.kiln --iterations 3 --profile --json >bench.json 2>&1 && $PY -c "
import json, sys
d = json.load(open('bench.json'))
p = d['profile']
ok = p['runs'] == 3 and len(p['layers']) > 0 and abs(sum(l['percent'] for l in p['layers']) - 100) < 0.5
ok = ok and all(l['mean_us'] >= 0 and l['name'] and l['op'] for l in p['layers'])
sys.exit(0 if ok else 1)" && ok || bad "bench --profile --json: $(head -c 400 bench.json)"

# names that are not UTF-8 (a model may hold any bytes): valid JSON from inspect and
# bench, each stray byte as \udcNN (json.load read raw bytes as an error; probe5)
$PY - "$T" <<'EOF2' && "$KILN" build "$T/bad_utf8.onnx" -o bad_utf8.kiln -q && ok || bad "bad_utf8 model"
import sys, onnx
from onnx import helper, TensorProto
g = helper.make_graph([helper.make_node("Relu", ["xQQ"], ["y"], name="nQQ")], "g",
                      [helper.make_tensor_value_info("xQQ", TensorProto.FLOAT, [2, 3])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
open(sys.argv[1] + "/bad_utf8.onnx", "wb").write(m.SerializeToString().replace(b"QQ", b"\xff\xc3"))
EOF2
for cmd in "inspect bad_utf8.kiln --json" "bench bad_utf8.kiln --iterations 1 --profile --json"; do
    "$KILN" $cmd >bad_utf8.json 2>&1 && $PY -c "
import json, sys
d = json.load(open('bad_utf8.json', 'rb'))
sys.exit(0 if d['inputs'][0]['name'] == 'x\udcff\udcc3' else 1)" && ok || bad "$cmd: $(head -c 300 bad_utf8.json)"
done

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
