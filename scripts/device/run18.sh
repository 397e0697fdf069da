# After run16 (2026-12-05 night): the one failure of run16 (test_fused_conv_nan_tactics: the
# legacy NHWC fp16 tactic of the 2x2 stride-2 layer gave finite values where the CPU has 0),
# again with the legacy algorithm named (KILN_CUDA_VERBOSE) and without cuDNN's Find timing,
# then the sweep rows not measured since 2026-12-04 (VGG-16 never) and the CUDA zoo, fp16.
. scripts/device/pre.sh
KILN_TEST_ONLY=test_fused_conv_nan_tactics KILN_CUDA_VERBOSE=1 t nan_verbose 60 $B/test_cuda_ops
KILN_TEST_ONLY=test_fused_conv_nan_tactics KILN_CUDNN_FIND=0 t nan_nofind 60 $B/test_cuda_ops
grep -E 'passed|^FAIL' $L; grep -B3 -A3 -E 'NMSE [0-9.e+-]+ \(limit' $L | grep -v 'note: library' | grep -E 'legacy|cpu:|gpu:|algorithm' | head -30
bench sweep $(( ${SW:-170} )) --models ${MODELS:-vgg16,distilbert,resnet152} --batches 1,32
zoo fp16
