# One call in what E allows (2026-12-05 late, when every start failed): the
# nan failure with the legacy algorithm named, probe7's layout check on a GPU's plans,
# VGG-16 (never measured), the CUDA op tests, then the CUDA zoo in fp16, each where time is left.
. scripts/device/pre.sh
KILN_TEST_ONLY=test_fused_conv_nan_tactics KILN_CUDA_VERBOSE=1 t nan_verbose 40 $B/test_cuda_ops
grep -E 'passed|^FAIL' $L; grep -B2 -A6 -E 'g101_2x2s2_relu_nhwc_f16_tactic_cudnn-legacy' $L | head -40
grep -E 'legacy convolution algorithm' $L | sort | uniq -c | head
KILN_TEST_ONLY=test_se_engine_layouts,test_se_engine t layouts 60 $B/test_cuda_ops
grep -E 'passed|^FAIL|other numbers|refusing to write' $L | tail -4
bench sweep $(( $(left) - 70 > 130 ? 130 : $(left) - 70 )) --models vgg16 --batches 1,32
[ $(left) -gt 130 ] && KILN_CUDA_SYNC=1 t ops $(( $(left) - 100 > 150 ? 150 : $(left) - 100 )) $B/test_cuda_ops
grep -E '^FAIL|passed' $L | tail -6
zoo fp16
grep -E 'refusing to write' $OUT/*.log | head
