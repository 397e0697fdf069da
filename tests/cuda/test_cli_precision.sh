#!/usr/bin/env bash
# CLI options of the precision work (no GPU needed): `kiln run --compare`
# against the fp32 CPU plan, `kiln build --layer-precision` parsing and its
# unknown-layer error (the precision pass runs before the device is asked).
# Usage: test_cli_precision.sh KILN_BINARY (run from the source root)
set -u
K=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
check() { if eval "$2"; then echo "PASS $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi; }
"$K" build tests/data/tiny_mlp.onnx -o "$T/cpu.kiln" -q
out=$("$K" run "$T/cpu.kiln" --random-inputs --compare tests/data/tiny_mlp.onnx -q 2>&1); rc=$?
# the two builds may pick other CPU tactics (timed): equal up to rounding
rel=$(sed -n 's/.*y: max abs err [^,]*, max abs err \/ max|ref| \([^,]*\),.*/\1/p' <<<"$out")
check compare_same_plan '[ $rc -eq 0 ] && [ -n "$rel" ] && awk -v r="$rel" "BEGIN { exit !(r < 1e-5) }"'
out=$("$K" run "$T/cpu.kiln" --random-inputs --compare "$T/missing.onnx" -q 2>&1); rc=$?
check compare_missing_model '[ $rc -ne 0 ] && grep -q "missing.onnx" <<<"$out"'
out=$("$K" build tests/data/tiny_mlp.onnx -o "$T/x.kiln" --layer-precision foo 2>&1); rc=$?
check layer_precision_syntax '[ $rc -ne 0 ] && grep -q "expected name:fp32" <<<"$out"'
out=$("$K" build tests/data/tiny_mlp.onnx -o "$T/x.kiln" --device cuda --fp16 --layer-precision nope:fp32 2>&1); rc=$?
check layer_precision_unknown '[ $rc -ne 0 ] && grep -q "nope" <<<"$out"'
check help_mentions '"$K" run --help | grep -q -- "--compare" && "$K" build --help | grep -q -- "--layer-precision"'
echo "$((5 - fails)) passed, $fails failed"
[ $fails -eq 0 ]
