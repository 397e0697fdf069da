#!/usr/bin/env bash
# Builds kiln with the CUDA backend on the GPU machine and runs the GPU tests:
# the CUDA op tests (plain and under compute-sanitizer memcheck), the C unit
# tests, the Python suite (torch there), and a CUDA-vs-CPU engine comparison.
# Results go to $OUT (or out/gpu). Usage: bash scripts/gpu_check.sh
# Sections: ops unit engine debug models bench memcheck pytest conformance (the build always
# runs). ONLY="unit bench" runs just those, SKIP="memcheck pytest" all but
# those. BENCH_BUDGET (seconds, default 200) bounds the PyTorch comparison.
# KILN_PREBUILT=DIR: no build; DIR holds what scripts/gpu_pack.sh packed on a
# machine with the same nvcc (kiln, libkiln.so.0, the GPU test programs and
# the Debian libraries they load), and build-gpu becomes a link to it; the
# sections run what DIR has.
# Needs: protobuf-c for the build; on a machine without protoc-c, a folder
# .deps with gen/onnx.pb-c.{c,h}, include/protobuf-c/protobuf-c.h and
# lib/libprotobuf-c.so* (made on a Debian machine: see docs/cuda.md).
set -uo pipefail
cd "$(dirname "$0")/.."
part() {
  if [ -n "${ONLY:-}" ]; then [[ " $ONLY " == *" $1 "* ]]; else [[ " ${SKIP:-} " != *" $1 "* ]]; fi
}
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
CUDNN=${KILN_CUDNN_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn}
ARGS=(-DCMAKE_BUILD_TYPE=Release ${KILN_CMAKE_ARGS:-})
[ -d "$CUDNN" ] && ARGS+=(-DKILN_CUDNN_ROOT="$CUDNN") && export LD_LIBRARY_PATH="$CUDNN/lib:${LD_LIBRARY_PATH:-}"
if [ -d .deps ]; then
  ARGS+=(-DKILN_PROTO_PREGENERATED="$PWD/.deps/gen" -DKILN_DEPS_PREFIX="$PWD/.deps")
  export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
fi
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv | tee "$OUT/gpu.txt"
t0=$(date +%s)
if [ -n "${KILN_PREBUILT:-}" ]; then
  [ -f "$KILN_PREBUILT/libkiln.so.0" ] || { echo "KILN_PREBUILT=$KILN_PREBUILT has no libkiln.so.0"; exit 1; }
  rm -rf build-gpu && ln -s "$(cd "$KILN_PREBUILT" && pwd)" build-gpu
  ln -sf libkiln.so.0 build-gpu/libkiln.so
  export LD_LIBRARY_PATH="$PWD/build-gpu:${LD_LIBRARY_PATH:-}"
  echo "prebuilt: $(ls build-gpu | tr '\n' ' ')"
else
  cmake -S . -B build-gpu "${ARGS[@]}" > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
  cmake --build build-gpu -j"$(nproc)" > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
fi
if part ops; then
echo "== CUDA op tests"
KILN_CUDA_SYNC=1 build-gpu/test_cuda_ops > "$OUT/cuda_ops.log" 2>&1; echo "rc=$?"
grep -E "FAIL|passed" "$OUT/cuda_ops.log" | tail -15
fi
if part unit; then
echo "== C unit tests"
for t in build-gpu/test_*; do
  [ -x "$t" ] || continue; n=$(basename "$t")
  timeout 120 "$t" > "$OUT/$n.log" 2>&1; echo "$n: $(tail -1 "$OUT/$n.log")"
  grep -E "^FAIL|CHECK failed|returned KILN|fp16:|bf16:" "$OUT/$n.log" | head -6 | cut -c1-300
done
fi
if part engine; then
echo "== CUDA engine vs CPU engine (tiny MLP, dynamic batch)"
python3 - <<'PY' 2>&1 | tee "$OUT/engine_compare.log"
import subprocess, numpy as np, os, tempfile
d = tempfile.mkdtemp()
x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
np.save(f"{d}/x.npy", x)
for dev in ("cpu", "cuda"):
    subprocess.run(["build-gpu/kiln", "build", "tests/data/tiny_mlp.onnx", "--device", dev, "-o", f"{d}/{dev}.kiln",
                    "--min-shapes", "x:1x16", "--opt-shapes", "x:2x16", "--max-shapes", "x:4x16"], check=True)
    subprocess.run(["build-gpu/kiln", "run", f"{d}/{dev}.kiln", "--input", f"x={d}/x.npy", "--output-dir", f"{d}/{dev}"],
                   check=True, stdout=subprocess.DEVNULL)
a, b = np.load(f"{d}/cpu/y.npy"), np.load(f"{d}/cuda/y.npy")
print("max abs diff cuda vs cpu:", float(np.abs(a - b).max()))
print(subprocess.run(["build-gpu/kiln", "inspect", f"{d}/cuda.kiln"], capture_output=True, text=True).stdout[-1500:])
# --strict-device: a NonZero (no GPU kernel: its output size depends on the data) between GPU layers
import onnx
from onnx import helper, TensorProto as TP
g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                       helper.make_node("NonZero", ["r"], ["y"], name="nz")], "g",
                      [helper.make_tensor_value_info("x", TP.FLOAT, [4, 4])],
                      [helper.make_tensor_value_info("y", TP.INT64, None)])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), f"{d}/nz.onnx")
loose = subprocess.run(["build-gpu/kiln", "build", f"{d}/nz.onnx", "--device", "cuda", "-o", f"{d}/nz.kiln", "-q"],
                       capture_output=True, text=True)
strict = subprocess.run(["build-gpu/kiln", "build", f"{d}/nz.onnx", "--device", "cuda", "--strict-device",
                         "-o", f"{d}/nz_strict.kiln"], capture_output=True, text=True)
ok = loose.returncode == 0 and strict.returncode != 0 and "nz" in strict.stderr \
    and not os.path.exists(f"{d}/nz_strict.kiln")
print("strict-device:", "PASS" if ok else "FAIL", strict.stderr.strip()[-300:])
PY
fi
if part debug; then
echo "== kiln debug compare on CUDA (docs/debugging.md; the stress CNN: Conv+Relu, Conv+Add, MaxPool, Gemm, LayerNorm)"
dm=tests/stress/stress_cnn.onnx
dbg() { # dbg WANT_RC LABEL ARGS...: runs kiln debug compare, checks its exit status
  local want=$1 label=$2; shift 2
  build-gpu/kiln debug compare "$dm" --device cuda --shapes x:2x3x32x32 "$@" > "$OUT/debug_$label.log" 2>&1
  local rc=$?
  echo "debug $label: rc=$rc (want $want) $([ $rc -eq "$want" ] && echo PASS || echo FAIL)"
  grep -E "^first layer|made from|^summary|^result" "$OUT/debug_$label.log" | cut -c1-300
}
dbg 0 fp32
dbg 0 fp32_no_reuse --no-memory-reuse
KILN_TEST_PLANT_BUG=FusedConv dbg 1 planted_fusedconv
KILN_TEST_PLANT_BUG=FusedConv dbg 0 planted_fuse_conv_off --disable-pass fuse_conv
dbg 0 fp16 --fp16
dbg 0 fp16_no_nhwc --fp16 --disable-pass cuda_nhwc
KILN_DEBUG_ARENA=1 dbg 0 fp16_debug_arena --fp16
fi
if part models; then
echo "== Real models on CUDA vs PyTorch (fp32; torchvision ResNet-18, MobileNetV2)"
python3 - <<'PY' 2>&1 | tee "$OUT/models_cuda.log"
import subprocess, tempfile, numpy as np, torch, torchvision
d = tempfile.mkdtemp()
torch.manual_seed(0)
def calibrated(m):
    # A freshly initialized torchvision model has BatchNorm running stats 0/1 whatever its
    # activations are; MobileNetV2's outputs then shrink to ~1e-9 (below fp16's range), so
    # reduced-precision errors relative to them mean nothing. Estimating the statistics on
    # random batches (train-mode passes, cumulative average) gives every layer normalized
    # activations and the model outputs of a sane scale, as a trained model has.
    for mod in m.modules():
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
            mod.reset_running_stats()
            mod.momentum = None
    m.train()
    with torch.no_grad():
        for _ in range(4):
            m(torch.randn(8, 3, 224, 224))
    return m.eval()
for name, ctor in (("resnet18", torchvision.models.resnet18), ("mobilenet_v2", torchvision.models.mobilenet_v2)):
    m = calibrated(ctor())
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        ref = m(x).numpy()
    torch.onnx.export(m, (x,), f"{d}/{name}.onnx", opset_version=17, dynamo=False,
                      input_names=["x"], output_names=["y"])
    np.save(f"{d}/x.npy", x.numpy())
    for dev in ("cuda", "cpu", "cuda-fp16"):
        extra = ["--fp16"] if dev.endswith("fp16") else []
        b = subprocess.run(["build-gpu/kiln", "build", f"{d}/{name}.onnx", "--device", dev.split("-")[0],
                            "-o", f"{d}/{name}_{dev}.kiln"] + extra, capture_output=True, text=True)
        if b.returncode:
            print(name, dev, "BUILD FAILED", b.stderr[-400:]); continue
        r = subprocess.run(["build-gpu/kiln", "run", f"{d}/{name}_{dev}.kiln", "--input", f"x={d}/x.npy",
                            "--output-dir", f"{d}/{name}_{dev}"] + (["--compare", f"{d}/{name}.onnx"] if extra else []),
                           capture_output=True, text=True)
        if r.returncode:
            print(name, dev, "RUN FAILED", r.stderr[-600:]); continue
        y = np.load(f"{d}/{name}_{dev}/y.npy")
        err = float(np.abs(y - ref).max()) / float(np.abs(ref).max())
        cos = float((y * ref).sum() / (np.linalg.norm(y) * np.linalg.norm(ref) + 1e-30))
        top1 = float((y.argmax(1) == ref.argmax(1)).mean())
        bench = subprocess.run(["build-gpu/kiln", "bench", f"{d}/{name}_{dev}.kiln", "--warmup", "3", "--iterations", "20"],
                               capture_output=True, text=True).stdout
        lat = [l for l in bench.splitlines() if l.startswith("latency")]
        tol = 3e-2 if extra else 1e-3
        cmp = [l.strip() for l in r.stdout.splitlines() if "max abs err /" in l]
        print(f"{name:13s} {dev:9s} max_abs_err/max|ref| = {err:.2e} (max|ref| {float(np.abs(ref).max()):.2g}, "
              f"cosine {cos:.6f}, top-1 agree {top1:.2f}) {'PASS' if err <= tol else 'FAIL'}  {lat[0] if lat else ''}"
              + (f"\n    --compare: {cmp[0]}" if cmp else ""))
    ins = subprocess.run(["build-gpu/kiln", "inspect", f"{d}/{name}_cuda.kiln"], capture_output=True, text=True).stdout
    print("\n".join(l for l in ins.splitlines() if l.startswith("cpu fallback")))
PY
fi
if part bench; then
echo "== kiln vs PyTorch (fp16; ResNet-50, BERT-base; bench/gpu_vs_torch.py)"
BB=${BENCH_BUDGET:-200}
timeout $((BB + 200)) python3 bench/gpu_vs_torch.py --lib build-gpu/libkiln.so --write "$OUT/BENCH_gpu.md" \
  --profile-dir "$OUT/profiles" --budget "$BB" > "$OUT/bench.log" 2>&1; echo "rc=$?"
grep -E "^(resnet50|bert)|skipped|wrote|Error" "$OUT/bench.log" | cut -c1-400 | tail -12
fi
if part memcheck; then
echo "== compute-sanitizer memcheck (CUDA op tests)"
timeout 150 compute-sanitizer --tool memcheck --print-limit 20 build-gpu/test_cuda_ops > "$OUT/memcheck.log" 2>&1; echo "rc=$?"
grep -E "ERROR SUMMARY|passed" "$OUT/memcheck.log" | tail -3
fi
if part pytest; then
echo "== Python suite (torch $(python3 -c 'import torch; print(torch.__version__)'))"
KILN_LIBRARY=$PWD/build-gpu/libkiln.so KILN_CLI=$PWD/build-gpu/kiln timeout 200 python3 -m pytest -q -rs -p no:cacheprovider python/tests > "$OUT/pytest.log" 2>&1; echo "rc=$?"
tail -25 "$OUT/pytest.log"
fi
if part conformance; then
# The ONNX node tests with CUDA engines (kiln_conformance --device cuda), in 8
# parallel shards (each test forks and initializes CUDA, which is slow alone).
NODE=${KILN_NODE_TESTS:-/usr/share/libonnx-testdata/data/node}
[ -d "$NODE" ] || NODE=.deps/testdata/node
echo "== conformance --device cuda ($NODE)"
if [ -d "$NODE" ]; then
  mkdir -p "$OUT/conf"
  ls -d "$NODE"/test_* | split -n r/8 - "$OUT/conf/shard_"
  ls "$OUT"/conf/shard_* | xargs -P 8 -I{} sh -c \
    'xargs build-gpu/kiln_conformance --device cuda --timeout 120 < {} > {}.log 2>&1'
  cat "$OUT"/conf/shard_*.log > "$OUT/cuda_node.log"
  awk '/^conformance: /{p+=$2; f+=$4; u+=$6; t+=substr($8,2)} END {printf "conformance --device cuda: %d passed, %d failed, %d unsupported (%d total)\n", p, f, u, t}' \
    "$OUT"/conf/shard_*.log
  grep -E "^FAIL" "$OUT/cuda_node.log" | cut -c1-160
  rm -rf "$OUT/conf"
else
  echo "no ONNX node tests found (set KILN_NODE_TESTS)"
fi
fi
