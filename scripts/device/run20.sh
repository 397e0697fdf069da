# First call of the session of 2026-12-05 late (binaries of fb7b820): run16's one failure
# (test_fused_conv_nan_tactics) with the legacy algorithm named and without cuDNN's Find,
# the sweep rows not measured since 2026-12-04 (VGG-16 never), then the CUDA zoo in fp16
# and fp32, each in the time left.
. scripts/device/pre.sh
KILN_TEST_ONLY=test_fused_conv_nan_tactics KILN_CUDA_VERBOSE=1 t nan_verbose 60 $B/test_cuda_ops
KILN_TEST_ONLY=test_fused_conv_nan_tactics KILN_CUDNN_FIND=0 t nan_nofind 60 $B/test_cuda_ops
grep -E 'passed|^FAIL' $L; grep -B2 -A6 -E 'g101_2x2s2_relu_nhwc_f16_tactic_cudnn-legacy' $L | head -60
grep -E 'legacy convolution algorithm' $L | sort | uniq -c | head
bench sweep $(( ${SW:-200} )) --models ${MODELS:-vgg16,distilbert,resnet152} --batches 1,32
zoo fp16 fp32
