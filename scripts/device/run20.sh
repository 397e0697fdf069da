# First call of the session of 2026-12-05 late (binaries of the head then): run16's one failure
# (test_fused_conv_nan_tactics) with the legacy algorithm named and without cuDNN's Find,
# the sweep rows not measured since 2026-12-04 (VGG-16 never), then the CUDA zoo in fp16
# and fp32, each in the time left; before the sweep, the NaN probe's build-time cost (ResNet-50
# b32 fp16, KILN_TUNE_NO_NAN_PROBE=1 against the default, twice each).
. scripts/device/pre.sh
KILN_TEST_ONLY=test_fused_conv_nan_tactics KILN_CUDA_VERBOSE=1 t nan_verbose 60 $B/test_cuda_ops
KILN_TEST_ONLY=test_fused_conv_nan_tactics KILN_CUDNN_FIND=0 t nan_nofind 60 $B/test_cuda_ops
grep -E 'passed|^FAIL' $L; grep -B2 -A6 -E 'g101_2x2s2_relu_nhwc_f16_tactic_cudnn-legacy' $L | head -60
grep -E 'legacy convolution algorithm' $L | sort | uniq -c | head
tv_onnx resnet50
for probe in ${PROBES:-0 1 0 1}; do KILN_TUNE_NO_NAN_PROBE=$probe bt resnet50 32 no_nan_probe=$probe; done
bench sweep $(( ${SW:-200} )) --models ${MODELS:-vgg16,distilbert,resnet152} --batches 1,32
zoo fp16 fp32
