# After run16: KILN_CUDA_SYNC=1 over every CUDA op test, the architecture sweep's rows not
# measured since 2026-12-04 (VGG-16, DistilBERT, ResNet-152) and the rest of the CUDA zoo,
# then the NaN probe's build-time cost (resnet50 b64, fp16, with and without the probe).
. scripts/device/pre.sh
KILN_CUDA_SYNC=1 t ops_sync 240 $B/test_cuda_ops
grep -E 'passed|^FAIL' $L | tail -3
bench sweep $(( ${SW:-200} )) --models vgg16,distilbert,resnet152,gpt2,swin_t --batches 1,32
python3 - <<'PY' >> $L 2>&1
import torch, torchvision
m = torchvision.models.resnet50().eval()
torch.onnx.export(m, (torch.randn(2, 3, 224, 224),), "/tmp/resnet50.onnx", opset_version=17, dynamo=False,
                  input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})
PY
for probe in "" 1 1 ""; do s=$(date +%s%N)
  KILN_TUNE_NO_NAN_PROBE=$probe timeout 120 $B/kiln build /tmp/resnet50.onnx --device cuda --fp16 --shapes x:64x3x224x224 -o /tmp/e.kiln >> $L 2>&1
  echo "build resnet50 b64 no_nan_probe=${probe:-0} rc=$? $(( ($(date +%s%N) - s) / 10000000 ))e-2 s" | tee -a $L; done
zoo fp16 fp32
