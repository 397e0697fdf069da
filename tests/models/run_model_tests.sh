#!/bin/bash
# run_model_tests.sh -- kiln's real-model tests: ResNet-50, MobileNetV2, BERT-base and
# an MLP exported from PyTorch (scripts/gen_models.py), each built with `kiln build`,
# run with `kiln run` on the saved inputs, and compared with PyTorch's outputs.
#
# Usage: tests/models/run_model_tests.sh MODELDIR BUILD_DIR [--only NAMES] [--threads N] [--keep]
#                                        [--bf16 TOL]
#
#   MODELDIR   where the models are (generated there with /usr/bin/python3 if the
#              manifest or a file is missing; ~1.4 GB, about a minute)
#   BUILD_DIR  a kiln build folder holding the `kiln` tool; engines and outputs go
#              to BUILD_DIR/model_tests/ (engines deleted after each model unless --keep)
#   --only     comma-separated variant names or families (mlp, mobilenetv2, resnet50, bert)
#   --threads  threads for kiln run (default: the engine's, i.e. one per core)
#   --bf16     build bf16 engines (`kiln build --bf16`) and compare with tolerance TOL
#              instead; a CPU without AVX512-BF16 (or a kiln without oneDNN) skips them
#
# A model passes when, for every float output, max|kiln - torch| <= 1e-4 * max|torch|
# (KILN_MODEL_TOL overrides 1e-4). Prints one line per model and ends with
# "N passed, M failed"; exits 1 if any failed. KILN_MODEL_TIMEOUT (seconds, default
# 1800) limits each build and run.
set -u

usage() { echo "usage: run_model_tests.sh MODELDIR BUILD_DIR [--only NAMES] [--threads N] [--keep] [--bf16 TOL]" >&2; exit 2; }
[ $# -ge 2 ] || usage
MODELDIR=$1
BUILD_DIR=$2
shift 2
ONLY=""
THREADS=()
KEEP=0
BF16=""
while [ $# -gt 0 ]; do
    case $1 in
        --only) ONLY=${2:?}; shift 2 ;;
        --threads) THREADS=(--threads "${2:?}"); shift 2 ;;
        --keep) KEEP=1; shift ;;
        --bf16) BF16=${2:?}; shift 2 ;;
        *) usage ;;
    esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=/usr/bin/python3
TOOL="$HERE/model_tool.py"
KILN="$BUILD_DIR/kiln"
TOL=${KILN_MODEL_TOL:-1e-4}
PREC=()
[ -n "$BF16" ] && { TOL=$BF16; PREC=(--bf16); }
TIMEOUT=${KILN_MODEL_TIMEOUT:-1800}
[ -x "$KILN" ] || { echo "run_model_tests.sh: no kiln tool at $KILN" >&2; exit 2; }

# gen_models.py skips variants that already exist, so this only fills in
# what a previous (possibly narrower, --only) run did not make.
echo "generating missing models in $MODELDIR ..."
GEN=("$PY" "$ROOT/scripts/gen_models.py" "$MODELDIR")
[ -n "$ONLY" ] && GEN+=(--only "$ONLY")
"${GEN[@]}" || { echo "run_model_tests.sh: model generation failed" >&2; echo "0 passed, 1 failed"; exit 1; }
$PY "$TOOL" check "$MODELDIR" "$ONLY" || { echo "run_model_tests.sh: models incomplete in $MODELDIR" >&2; echo "0 passed, 1 failed"; exit 1; }
mapfile -t MODELS < <($PY "$TOOL" list "$MODELDIR" "$ONLY")
[ ${#MODELS[@]} -gt 0 ] || { echo "run_model_tests.sh: no models selected" >&2; echo "0 passed, 1 failed"; exit 1; }

WORK="$BUILD_DIR/model_tests"
mkdir -p "$WORK"
now() { date +%s.%N; }
PASS=0
FAIL=0
FAILED=()
printf "%-22s %12s %10s %10s %-6s %8s %9s\n" model max_abs_err "max|ref|" ratio result build_s run_ms
for name in "${MODELS[@]}"; do
    engine="$WORK/$name.kiln"
    out="$WORK/$name.out"
    log="$WORK/$name.log"
    rm -rf "$out"
    mapfile -t BARGS < <($PY "$TOOL" build-args "$MODELDIR" "$name")
    mapfile -t RARGS < <($PY "$TOOL" run-args "$MODELDIR" "$name")
    onnx="$MODELDIR/$name/model.onnx"
    t0=$(now)
    timeout "$TIMEOUT" "$KILN" build "$onnx" -o "$engine" "${BARGS[@]}" "${PREC[@]}" >"$log" 2>&1
    brc=$?
    t1=$(now)
    build_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    result="" detail="" err="-" ref="-" ratio="-" run_ms="-"
    if [ $brc -ne 0 ] && [ -n "$BF16" ] && grep -q "precision bf16 on the CPU needs" "$log"; then
        echo "$name: skipped ($(grep -m1 'precision bf16' "$log"))"
        continue
    elif [ $brc -ne 0 ]; then
        result=FAIL
        detail="build failed (exit $brc): $(grep -m1 'error' "$log" || tail -n1 "$log")"
    else
        timeout "$TIMEOUT" "$KILN" run "$engine" "${RARGS[@]}" "${THREADS[@]}" --output-dir "$out" >>"$log" 2>&1
        rrc=$?
        run_ms=$(sed -n 's/^time: .*run \([0-9.]*\) ms.*/\1/p' "$log" | tail -n1)
        [ -n "$run_ms" ] || run_ms="-"
        if [ $rrc -ne 0 ]; then
            result=FAIL
            detail="run failed (exit $rrc): $(grep -m1 'error' "$log" || tail -n1 "$log")"
        else
            read -r err ref ratio result detail < <($PY "$TOOL" compare "$MODELDIR" "$name" "$out" "$TOL")
            [ -n "${result:-}" ] || { result=FAIL; detail="comparison failed"; }
        fi
    fi
    printf "%-22s %12s %10s %10s %-6s %8s %9s\n" "$name" "$err" "$ref" "$ratio" "$result" "$build_s" "$run_ms"
    if [ "$result" = PASS ]; then
        PASS=$((PASS + 1))
    else
        FAIL=$((FAIL + 1))
        FAILED+=("$name")
        [ -n "$detail" ] && echo "    $detail"
        echo "    log: $log"
    fi
    [ $KEEP = 1 ] || rm -f "$engine"
done
[ $FAIL -gt 0 ] && echo "failed: ${FAILED[*]}"
echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
