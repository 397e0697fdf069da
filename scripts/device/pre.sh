# sourced by the run scripts on the GPU machine: unpack the binaries, set paths
set -uo pipefail
T0=$(date +%s); E=${E:-540}
left() { echo $(( E - ($(date +%s) - T0) )); }
mkdir -p .gpu-bin && tar xJf .carry/kiln-gpu.tar.xz -C .gpu-bin && ln -sf libkiln.so.0 .gpu-bin/libkiln.so
CUDNN=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn
export LD_LIBRARY_PATH=$PWD/.gpu-bin:$CUDNN/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
B=.gpu-bin
L=$OUT/tests.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $L
echo "binaries packed at $(cat .carry/PACKED_AT)" | tee -a $L
# t NAME TIMEOUT CMD...: one test step, its output into tests.log, a one-line verdict
t() { local n=$1 to=$2; shift 2; echo "== $n" >> $L; local s=$(date +%s)
  timeout $to "$@" >> $L 2>&1; local rc=$?
  echo "rc=$rc $n ($(( $(date +%s) - s )) s)" | tee -a $L; }
# bench OUTNAME BUDGET ARGS...: gpu_vs_torch with its profiles tarred into one file
bench() { local n=$1 bud=$2; shift 2
  [ "$bud" -gt 40 ] || { echo "bench $n: no time left ($bud s)"; return; }
  timeout $((bud + 60)) python3 bench/gpu_vs_torch.py --lib $B/libkiln.so --write $OUT/$n.md \
    --profile-dir /tmp/prof_$n --budget $bud "$@" > $OUT/$n.log 2>&1; echo "rc=$? bench $n"
  grep -E '^\| [a-z]' $OUT/$n.md 2>/dev/null; grep -E 'skipped|Error' $OUT/$n.log | head -5
  [ -d /tmp/prof_$n ] && tar czf $OUT/prof_$n.tgz -C /tmp prof_$n; }
# zoo PRECISION...: bench/model_zoo.py's CI subset on CUDA, each in the time left
zoo() { local p lb; for p in "$@"; do
  lb=$(( $(left) - 20 )); [ $lb -gt 60 ] || break
  timeout $((lb + 10)) python3 bench/model_zoo.py --ci --device cuda --precision $p --kiln $B/kiln \
    --cache-dir /tmp/zoo --budget $((lb - 10)) --write $OUT/zoo_$p.md > $OUT/zoo_$p.log 2>&1; echo "rc=$? zoo $p"
  grep -E '^\|' $OUT/zoo_$p.md | cut -c1-200 | head -20
done; }
