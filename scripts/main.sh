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
VARIANT=${MODEL}_op17_fixed
[ "$MODEL" = bert ] && VARIANT=bert_op17_dyn
/usr/bin/python3 scripts/gen_models.py models --only "$VARIANT"
onnx=models/$VARIANT/model.onnx
echo "== kiln build $onnx"
./build/kiln build "$onnx" -o "$OUT/$MODEL.kiln"
echo "== kiln inspect (summary)"
./build/kiln inspect "$OUT/$MODEL.kiln" > "$OUT/inspect.txt"
head -n 20 "$OUT/inspect.txt"; echo "   ... (full listing in $OUT/inspect.txt)"
tail -n 3 "$OUT/inspect.txt"
echo "== kiln run"
./build/kiln run "$OUT/$MODEL.kiln" --random-inputs --output-dir "$OUT/outputs"
echo "== kiln bench"
./build/kiln bench "$OUT/$MODEL.kiln" --warmup 2 --iterations 10
