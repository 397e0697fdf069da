# sourced by the run scripts on the GPU machine: unpack the binaries, set paths
set -uo pipefail
T0=$(date +%s); E=${E:-540}
left() { echo $(( E - ($(date +%s) - T0) )); }
mkdir -p .gpu-bin && tar xJf .carry/kiln-gpu.tar.xz -C .gpu-bin && ln -sf libkiln.so.0 .gpu-bin/libkiln.so
# (.carry/quick.txz, where packed: a few of the binaries (kiln, libkiln.so.0, a test program),
# newer than the tarball's, for a quick look at a change before all are packed again)
[ -f .carry/quick.txz ] && tar xJf .carry/quick.txz -C .gpu-bin
CUDNN=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn
export LD_LIBRARY_PATH=$PWD/.gpu-bin:$CUDNN/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
B=.gpu-bin
L=$OUT/tests.log
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $L
echo "binaries packed at $(cat .carry/PACKED_AT)$([ -f .carry/quick.txz ] && echo ", quick.txz's at $(cat .carry/QUICK_AT)")" | tee -a $L
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
# tv_onnx NAME...: torchvision's NAME (random weights) as /tmp/NAME.onnx, opset 17, batch dynamic
tv_onnx() { python3 - "$@" <<'PY' >> $L 2>&1
import sys, torch, torchvision
for n in sys.argv[1:]:
    m = getattr(torchvision.models, n)().eval()
    torch.onnx.export(m, (torch.randn(2, 3, 224, 224),), f"/tmp/{n}.onnx", opset_version=17, dynamo=False,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})
PY
}
# bt NAME BATCH LABEL [ARGS...]: times `kiln build /tmp/NAME.onnx --device cuda --fp16` at BATCH
# (environment set for the call applies: KILN_CUDA_PLAN_THREADS=0 bt ...)
bt() { local n=$1 b=$2 label=$3; shift 3; local s=$(date +%s%N)
  timeout 150 $B/kiln build /tmp/$n.onnx --device cuda --fp16 --shapes x:${b}x3x224x224 -o /tmp/e.kiln "$@" >> $L 2>&1
  echo "build $n b$b $label $* rc=$? $(( ($(date +%s%N) - s) / 10000000 ))e-2 s" | tee -a $L; }
# tv_fp16 NAME...: torchvision's NAME exported (tv_onnx), built fp16 at batch 8 and run on random
# inputs, each where time is left; one line of exit statuses each
tv_fp16() { local n rc; [ $(left) -gt 90 ] && tv_onnx "$@"
  for n in "$@"; do [ $(left) -gt 40 ] || break
    timeout 150 $B/kiln build /tmp/$n.onnx --device cuda --fp16 --shapes x:8x3x224x224 -o /tmp/$n.kiln >> $L 2>&1
    rc=$?; timeout 60 $B/kiln run /tmp/$n.kiln --random-inputs --output-dir /tmp/o$n >> $L 2>&1
    echo "tv $n fp16: build rc=$rc run rc=$?" | tee -a $L; done; }
# se_engines MIN_LEFT: the GPU's fp16 engines of tiny_mbv3 and se_block (squeeze-excite fused)
# into $OUT, to load with the engine reader on the build machine, each with MIN_LEFT s left
se_engines() { local m n c; for m in tiny_mbv3:32 se_block:16; do [ $(left) -gt $1 ] || break
    n=${m%%:*}; c=3; [ $n = se_block ] && c=32
    KILN_CUDA_SE_FUSED=1 timeout 20 $B/kiln build tests/data/$n.onnx --device cuda --fp16 \
      --shapes x:1x${c}x${m##*:}x${m##*:} -o $OUT/${n}_fp16.kiln >> $L 2>&1; echo "build $n rc=$?"; done; }
# gc DIR TIMEOUT VAR=VALUE...: gpu_check.sh's sections (ONLY=...) on the packed binaries, with
# the ONNX node tests of .carry/node.tar.xz, logs into DIR and DIR.txt; one line of exit status
gc() { local d=$1 to=$2; shift 2; local s=$(date +%s)
  [ -d /tmp/nt/node ] || { mkdir -p /tmp/nt && tar xJf .carry/node.tar.xz -C /tmp/nt; }
  env KILN_NODE_TESTS=/tmp/nt/node KILN_PREBUILT=.gpu-bin OUT=$d "$@" timeout $to bash scripts/gpu_check.sh >> $d.txt 2>&1
  echo "rc=$? gpu_check $* ($(( $(date +%s) - s )) s)" | tee -a $L; }
# gc_done DIR: gc's lines other than passes, then its logs into $OUT/<DIR's name>.tgz
gc_done() { local n=$(basename $1)
  grep -vE '^(PASS|ok) ' $1.txt | grep -v 'prebuilt:\|^name, driver\|^NVIDIA' | cut -c1-300 | head -80
  tar czf $OUT/$n.tgz -C $(dirname $1) $n $n.txt; }
