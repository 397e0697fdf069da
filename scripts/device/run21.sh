# One call with the essentials, for a session whose machines rarely start (2026-12-05 late):
# run16's one failure with the legacy algorithm named, gpu_check's op tests and memcheck,
# VGG-16 (never measured), gpu_check's engine/debug/models sections, then the CUDA zoo
# in fp16, each step only where time is left (E seconds in all).
. scripts/device/pre.sh
KILN_TEST_ONLY=test_fused_conv_nan_tactics KILN_CUDA_VERBOSE=1 t nan_verbose 40 $B/test_cuda_ops
grep -E 'passed|^FAIL' $L; grep -B2 -A6 -E 'g101_2x2s2_relu_nhwc_f16_tactic_cudnn-legacy' $L | head -40
grep -E 'legacy convolution algorithm' $L | sort | uniq -c | head
gc() { [ $(left) -gt $2 ] || { echo "gpu_check $1: no time left"; return; }
  KILN_PREBUILT=$B ONLY="$1" timeout $(( $(left) - 10 )) bash scripts/gpu_check.sh 2>&1 | tee -a $OUT/gpu_check.log | grep -vE '^prebuilt:' | cut -c1-240 | head -60; }
gc "ops memcheck" 250
bench sweep $(( $(left) - 260 > 150 ? 150 : $(left) - 260 )) --models vgg16 --batches 1,32
gc "engine debug models" 120
zoo fp16
