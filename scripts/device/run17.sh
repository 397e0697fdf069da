# After run16: KILN_CUDA_SYNC=1 over every CUDA op test, the architecture sweep's rows not
# measured since 2026-12-04 (VGG-16, DistilBERT, ResNet-152) and the rest of the CUDA zoo,
# then the NaN probe's build-time cost (resnet50 b64, fp16, with and without the probe).
. scripts/device/pre.sh
KILN_CUDA_SYNC=1 t ops_sync 240 $B/test_cuda_ops
grep -E 'passed|^FAIL' $L | tail -3
bench sweep $(( ${SW:-200} )) --models vgg16,distilbert,resnet152,gpt2,swin_t --batches 1,32
tv_onnx resnet50
for probe in 0 1 1 0; do KILN_TUNE_NO_NAN_PROBE=$probe bt resnet50 64 no_nan_probe=$probe; done
zoo fp16 fp32
