# First call after the legacy path's algorithms were pinned (2026-12-06): the op tests
# (their failures with the lines around them), compute-sanitizer memcheck on the conv
# tactic tests, the NaN probe's build cost with both inputs (ResNet-50 b32 fp16: default,
# KILN_TUNE_NO_INF_PROBE=1, KILN_TUNE_NO_NAN_PROBE=1), ResNet-50 and BERT at batch 1 and 64,
# then the CUDA zoo in fp32 (its convolutions take the legacy path) in the time left.
# Few files under $OUT: the device tool returns a limited number.
. scripts/device/pre.sh
t ops 240 $B/test_cuda_ops
grep -E '^[0-9]+ passed|^FAIL' $L; grep -B4 -E '^FAIL' $L | grep -vE '^PASS' | cut -c1-400 | head -40
grep -E 'NMSE|differ' $L | grep -vE 'note: library|NMSE 0 \(limit' | cut -c1-300 | head -20
KILN_TEST_ONLY=test_conv_legacy_pinned,test_fused_conv_tactics,test_fused_conv_nan_tactics,test_conv_gemm \
  t memcheck_fc 200 compute-sanitizer --tool memcheck $B/test_cuda_ops
grep -E 'ERROR SUMMARY|^[0-9]+ passed' $L | tail -3
tv_onnx resnet50
for e in "" KILN_TUNE_NO_INF_PROBE=1 KILN_TUNE_NO_NAN_PROBE=1 ""; do ( [ -n "$e" ] && export $e; bt resnet50 32 "${e:-both_probes}" ); done
bench main $(( $(left) - 150 > 200 ? 200 : $(left) - 150 )) --models resnet50,bert --batches 1,64
zoo fp32
tar czf $OUT/rest.tgz -C $OUT --exclude rest.tgz --exclude tests.log . 2>/dev/null; ls $OUT
