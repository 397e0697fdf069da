# run16's one failure alone (test_fused_conv_nan_tactics), with the legacy algorithm named
# (KILN_CUDA_VERBOSE) and then without cuDNN's Find timing: for a call with little time left.
. scripts/device/pre.sh
KILN_TEST_ONLY=test_fused_conv_nan_tactics KILN_CUDA_VERBOSE=1 t nan_verbose 40 $B/test_cuda_ops
KILN_TEST_ONLY=test_fused_conv_nan_tactics KILN_CUDNN_FIND=0 t nan_nofind 30 $B/test_cuda_ops
grep -E 'passed|^FAIL' $L; grep -A3 -E 'legacy\+epilogue: output' $L | head -30; grep -E 'legacy convolution algorithm' $L | sort | uniq -c | head
