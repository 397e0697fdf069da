#!/usr/bin/env bash
# Build time with tuning, serial vs plans made ahead on host threads
# (KILN_CUDA_PLAN_THREADS, docs/cuda.md "Making plans ahead"), on the GPU
# machine, for torchvision models exported here (random weights, fp16):
#
#   scripts/gpu_tune_build_time.sh OUT MODEL BATCHES THREADS [KILN]
#   e.g. scripts/gpu_tune_build_time.sh $OUT efficientnet_b0 1,32 0,8,16 ./kiln
#
# For each batch and each thread count: `kiln build --device cuda --fp16`
# with KILN_TUNE_VERBOSE=1 (its log: every layer's candidates and where the
# time went, the summary with the 10 longest layers), its wall time, and
# `kiln inspect` of the engine. Then, per batch, every thread count against
# the first (0: serial) with scripts/tune_log_compare.py: the candidates
# each layer set up must be the same (exit 1 otherwise), tactics that
# differ are listed with their times (ties or not). The last thread
# count's build writes a timing cache; a build from it follows (target
# <= 5 s), and
# `kiln debug compare` of the first batch's engine built with the last
# thread count against kiln's CPU reference. Everything goes to
# OUT/MODEL_*; OUT/times.txt gets one line per build.
# Needs python3 (or $PYTHON) with torch and torchvision (the GPU machine's), kiln and
# its libraries on LD_LIBRARY_PATH (libkiln, cuDNN).
set -uo pipefail
OUT=${1:?OUT}; MODEL=${2:?MODEL}; BATCHES=${3:-1}; THREADS=${4:-0,16}; KILN=${5:-kiln}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
T=${THREADS##*,}
mkdir -p "$OUT"
rc=0
for B in ${BATCHES//,/ }; do
  P="$OUT/${MODEL}_b$B"
  "$PY" - "$MODEL" "$B" "$P.onnx" <<'EOF' || { echo "export of $MODEL b$B failed"; rc=1; continue; }
import sys, torch, torchvision
name, b, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
torch.manual_seed(0)
m = getattr(torchvision.models, name)(weights=None).eval()
kw = dict(opset_version=17, input_names=["input"], output_names=["output"])
try:
    torch.onnx.export(m, (torch.randn(b, 3, 224, 224),), path, dynamo=False, **kw)
except TypeError:  # (torch before 2.5: no dynamo argument)
    torch.onnx.export(m, (torch.randn(b, 3, 224, 224),), path, **kw)
EOF
  SH="input:${B}x3x224x224"
  FIRST=
  LAST=${THREADS##*,}
  rm -f "$P.cache"
  for T in ${THREADS//,/ }; do
    CACHE=()  # the last thread count's build writes a timing cache (from empty: it times every layer)
    [ "$T" = "$LAST" ] && CACHE=(--timing-cache "$P.cache")
    t0=$(date +%s.%N)
    KILN_CUDA_PLAN_THREADS=$T KILN_TUNE_VERBOSE=1 "$KILN" build "$P.onnx" -o "$P.t$T.kiln" --device cuda --fp16 \
      --shapes "$SH" -q "${CACHE[@]}" 2> "$P.t$T.log"
    brc=$?
    t1=$(date +%s.%N)
    s=$("$PY" -c "print(f'{$t1 - $t0:.1f}')")
    echo "$MODEL b$B KILN_CUDA_PLAN_THREADS=$T: build $s s (rc $brc)" | tee -a "$OUT/times.txt"
    [ $brc -eq 0 ] || { rc=1; tail -5 "$P.t$T.log"; continue; }
    "$KILN" inspect "$P.t$T.kiln" > "$P.t$T.inspect"
    grep "tune summary\|plans made ahead" "$P.t$T.log" | head -12
    if [ -z "$FIRST" ]; then FIRST=$T; continue; fi
    echo "-- candidates and tactics, threads $FIRST vs $T:"
    "$PY" "$HERE/tune_log_compare.py" "$P.t$FIRST.log" "$P.t$FIRST.inspect" "$P.t$T.log" "$P.t$T.inspect" \
      > "$P.cmp$FIRST-$T.txt"
    crc=$?
    tail -25 "$P.cmp$FIRST-$T.txt"
    [ $crc -eq 0 ] || rc=1
  done
  # from the warm timing cache the last build wrote
  t0=$(date +%s.%N)
  KILN_CUDA_PLAN_THREADS=$T KILN_TUNE_VERBOSE=1 "$KILN" build "$P.onnx" -o "$P.c.kiln" --device cuda --fp16 \
    --shapes "$SH" -q --timing-cache "$P.cache" 2> "$P.warm.log"
  t1=$(date +%s.%N)
  echo "$MODEL b$B warm timing cache: build $("$PY" -c "print(f'{$t1 - $t0:.1f}')") s" | tee -a "$OUT/times.txt"
  grep "tune summary: [0-9]" "$P.warm.log"
done
# outputs against kiln's CPU reference, plans made on the last thread count
B=${BATCHES%%,*}
KILN_CUDA_PLAN_THREADS=$T "$KILN" debug compare "$OUT/${MODEL}_b$B.onnx" --device cuda --fp16 \
  --shapes "input:${B}x3x224x224" > "$OUT/${MODEL}_b$B.compare.txt" 2>&1
echo "$MODEL b$B debug compare (KILN_CUDA_PLAN_THREADS=$T): rc $?" | tee -a "$OUT/times.txt"
tail -4 "$OUT/${MODEL}_b$B.compare.txt"
exit $rc
