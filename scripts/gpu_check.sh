#!/usr/bin/env bash
# Builds kiln with the CUDA backend on the GPU machine and runs the GPU tests:
# the CUDA op tests (plain and under compute-sanitizer memcheck), the C unit
# tests, the Python suite (torch there), and a CUDA-vs-CPU engine comparison.
# Results go to $OUT (or out/gpu). Usage: bash scripts/gpu_check.sh
# Needs: protobuf-c for the build; on a machine without protoc-c, a folder
# .deps with gen/onnx.pb-c.{c,h}, include/protobuf-c/protobuf-c.h and
# lib/libprotobuf-c.so* (made on a Debian machine: see docs/cuda.md).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
CUDNN=${KILN_CUDNN_ROOT:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn}
ARGS=(-DCMAKE_BUILD_TYPE=Release)
[ -d "$CUDNN" ] && ARGS+=(-DKILN_CUDNN_ROOT="$CUDNN") && export LD_LIBRARY_PATH="$CUDNN/lib:${LD_LIBRARY_PATH:-}"
if [ -d .deps ]; then
  ARGS+=(-DKILN_PROTO_PREGENERATED="$PWD/.deps/gen" -DKILN_DEPS_PREFIX="$PWD/.deps")
  export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
fi
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv | tee "$OUT/gpu.txt"
t0=$(date +%s)
cmake -S . -B build-gpu "${ARGS[@]}" > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
cmake --build build-gpu -j"$(nproc)" > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
echo "== CUDA op tests"
KILN_CUDA_SYNC=1 build-gpu/test_cuda_ops > "$OUT/cuda_ops.log" 2>&1; echo "rc=$?"
grep -E "FAIL|passed" "$OUT/cuda_ops.log" | tail -15
echo "== C unit tests"
for t in build-gpu/test_*; do [ -x "$t" ] || continue; r=$("$t" 2>&1 | tail -1); echo "$(basename "$t"): $r"; done
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
PY
echo "== Real models on CUDA vs PyTorch (fp32; torchvision ResNet-18, MobileNetV2)"
python3 - <<'PY' 2>&1 | tee "$OUT/models_cuda.log"
import subprocess, tempfile, numpy as np, torch, torchvision
d = tempfile.mkdtemp()
torch.manual_seed(0)
for name, ctor in (("resnet18", torchvision.models.resnet18), ("mobilenet_v2", torchvision.models.mobilenet_v2)):
    m = ctor().eval()
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        ref = m(x).numpy()
    torch.onnx.export(m, (x,), f"{d}/{name}.onnx", opset_version=17, dynamo=False,
                      input_names=["x"], output_names=["y"])
    np.save(f"{d}/x.npy", x.numpy())
    for dev in ("cuda", "cpu"):
        b = subprocess.run(["build-gpu/kiln", "build", f"{d}/{name}.onnx", "--device", dev, "-o", f"{d}/{name}_{dev}.kiln"],
                           capture_output=True, text=True)
        if b.returncode:
            print(name, dev, "BUILD FAILED", b.stderr[-400:]); continue
        r = subprocess.run(["build-gpu/kiln", "run", f"{d}/{name}_{dev}.kiln", "--input", f"x={d}/x.npy",
                            "--output-dir", f"{d}/{name}_{dev}"], capture_output=True, text=True)
        if r.returncode:
            print(name, dev, "RUN FAILED", r.stderr[-600:]); continue
        y = np.load(f"{d}/{name}_{dev}/y.npy")
        err = float(np.abs(y - ref).max()) / float(np.abs(ref).max())
        bench = subprocess.run(["build-gpu/kiln", "bench", f"{d}/{name}_{dev}.kiln", "--warmup", "3", "--iterations", "20"],
                               capture_output=True, text=True).stdout
        lat = [l for l in bench.splitlines() if l.startswith("latency")]
        print(f"{name:13s} {dev:4s} max_abs_err/max|ref| = {err:.2e} {'PASS' if err <= 1e-3 else 'FAIL'}  {lat[0] if lat else ''}")
    ins = subprocess.run(["build-gpu/kiln", "inspect", f"{d}/{name}_cuda.kiln"], capture_output=True, text=True).stdout
    print("\n".join(l for l in ins.splitlines() if l.startswith("cpu fallback")))
PY
echo "== compute-sanitizer memcheck (CUDA op tests)"
timeout 240 compute-sanitizer --tool memcheck --print-limit 20 build-gpu/test_cuda_ops > "$OUT/memcheck.log" 2>&1; echo "rc=$?"
grep -E "ERROR SUMMARY|passed" "$OUT/memcheck.log" | tail -3
echo "== Python suite (torch $(python3 -c 'import torch; print(torch.__version__)'))"
KILN_LIBRARY=$PWD/build-gpu/libkiln.so KILN_CLI=$PWD/build-gpu/kiln timeout 300 python3 -m pytest -q -rs -p no:cacheprovider python/tests > "$OUT/pytest.log" 2>&1; echo "rc=$?"
tail -25 "$OUT/pytest.log"
