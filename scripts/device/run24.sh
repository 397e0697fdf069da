# First call after the legacy path's algorithms were pinned (2026-12-06): the op tests
# (their failures with the lines around them), compute-sanitizer memcheck on the legacy
# and NaN tactic tests, the NaN probe's build cost with both inputs (ResNet-50 b32 fp16: default,
# KILN_TUNE_NO_INF_PROBE=1, KILN_TUNE_NO_NAN_PROBE=1), ResNet-50 and BERT at batch 1 and 64,
# then the CUDA zoo in fp32 (its convolutions take the legacy path) in the time left.
# Few files under $OUT: the device tool returns a limited number.
. scripts/device/pre.sh
t ops 240 $B/test_cuda_ops
grep -E '^[0-9]+ passed|^FAIL' $L; grep -B4 -E '^FAIL' $L | grep -vE '^PASS' | cut -c1-400 | head -40
grep -E 'NMSE|differ' $L | grep -vE 'note: library|NMSE 0 \(limit' | cut -c1-300 | head -20
KILN_TEST_ONLY=test_conv_legacy_pinned,test_fused_conv_nan_tactics \
  t memcheck_fc 100 compute-sanitizer --tool memcheck $B/test_cuda_ops
grep -E 'ERROR SUMMARY|^[0-9]+ passed' $L | tail -3
# the GPU's fp16 plans of the two models test_se_engine_layouts mutates, for the CPU side
# (kiln inspect and the engine reader run there on CUDA engines)
for m in tiny_mbv3:32 se_block:16; do n=${m%%:*}; c=3; [ $n = se_block ] && c=32
  KILN_CUDA_SE_FUSED=1 $B/kiln build tests/data/$n.onnx --device cuda --fp16 --shapes x:1x${c}x${m##*:}x${m##*:} \
    -o $OUT/${n}_fp16.kiln >> $L 2>&1; echo "build $n rc=$?"; $B/kiln inspect $OUT/${n}_fp16.kiln >> $L 2>&1; done
tv_onnx resnet50
for e in "" KILN_TUNE_NO_INF_PROBE=1 KILN_TUNE_NO_NAN_PROBE=1 ""; do ( [ -n "$e" ] && export $e; bt resnet50 32 "${e:-both_probes}" ); done
bench main $(( $(left) - 70 > 200 ? 200 : $(left) - 70 )) --models resnet50,bert --batches 1,64
zoo fp32
cd $OUT && tar czf rest.tgz --exclude=tests.log --exclude=rest.tgz . && find . -type f ! -name tests.log ! -name rest.tgz -delete; ls $OUT
