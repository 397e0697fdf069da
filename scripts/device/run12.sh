# build time (plan threads serial vs auto, ABBA; warm timing cache), then the GPU LitServe row (issue 23)
. scripts/device/pre.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .carry/whl/*.whl && export PYTHONPATH=/tmp/site
python3 - <<'PY' >> $L 2>&1
import torch, torchvision
for n in ("efficientnet_b0", "resnet50"):
    m = getattr(torchvision.models, n)().eval()
    torch.onnx.export(m, (torch.randn(2, 3, 224, 224),), f"/tmp/{n}.onnx", opset_version=17, dynamo=False,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})
PY
bt() { local n=$1 b=$2 th=$3; shift 3; local s=$(date +%s%N)
  KILN_CUDA_PLAN_THREADS=$th timeout 150 $B/kiln build /tmp/$n.onnx --device cuda --fp16 --shapes x:${b}x3x224x224 -o /tmp/e.kiln "$@" >> $L 2>&1
  echo "build $n b$b threads=${th:-serial} $* rc=$? $(( ($(date +%s%N) - s) / 10000000 ))e-2 s" | tee -a $L; }
for th in "" auto auto ""; do bt efficientnet_b0 32 "$th"; bt resnet50 64 "$th"; done
rm -f /tmp/tc; bt efficientnet_b0 32 "" --timing-cache /tmp/tc; bt efficientnet_b0 32 "" --timing-cache /tmp/tc
cp BENCHMARKS.md $OUT/BENCHMARKS.md
KILN_LIBRARY=$PWD/$B/libkiln.so timeout $(( $(left) - 10 )) python3 bench/serve_vs_torch.py --concurrency 1,8,32 --requests 40,160,320 --rounds 2 --workers 1 --threads 16 --max-batch 8 --timeout-ms 5 --device cuda --write $OUT/BENCHMARKS.md --json $OUT/serve.json > $OUT/serve.log 2>&1; echo "rc=$? serve"
tail -15 $OUT/serve.log
