#!/usr/bin/env bash
# The main job: set up a fresh Debian 12 machine, build kiln, generate a real
# model with PyTorch (ResNet-50 by default; MODEL=mlp|mobilenetv2|bert for others),
# build an engine from it and run it on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
MODEL=${MODEL:-resnet50}
OUT=${OUT:-out/main}
mkdir -p "$OUT"
/usr/bin/python3 scripts/gen_models.py models --only "$MODEL"
onnx=$(ls models/"${MODEL}"*opset17*.onnx 2>/dev/null | head -n1 || true)
[ -n "$onnx" ] || onnx=$(ls models/"${MODEL}"*.onnx | head -n1)
echo "== kiln build $onnx"
./build/kiln build "$onnx" -o "$OUT/$MODEL.kiln"
echo "== kiln inspect (summary)"
./build/kiln inspect "$OUT/$MODEL.kiln" | head -n 20
echo "== kiln run"
./build/kiln run "$OUT/$MODEL.kiln" --output-dir "$OUT/outputs"
echo "== kiln bench"
./build/kiln bench "$OUT/$MODEL.kiln" --warmup 2 --iterations 10
