# One call for the session of 2026-12-06 (machines rarely start): the op tests (the legacy
# algorithms pinned, probe8's layout check through views, test_se_engine_layouts' failure of
# run21), test_cuda_precision and test_cuda_engine, memcheck on the legacy and NaN tactic
# tests, the test models built fp16/bf16 and run, the GPU's fp16 engines of tiny_mbv3 and
# se_block brought back (the engine reader on the CPU side), ResNet-50 and BERT at batch 1
# and 64, then the CUDA zoo in fp32, each where E leaves time. Few files under $OUT.
. scripts/device/pre.sh
t ops 200 $B/test_cuda_ops
grep -E '^[0-9]+ passed|^FAIL' $L; grep -B4 -E '^FAIL' $L | grep -vE '^PASS' | cut -c1-400 | head -30
grep -E 'other numbers|layout fields' $L | head; grep -E 'legacy_pinned|fp32 3x3' $L | cut -c1-300 | head -4
t precision 90 $B/test_cuda_precision
[ $(left) -gt 250 ] && t engine 100 $B/test_cuda_engine
KILN_TEST_ONLY=test_conv_legacy_pinned,test_fused_conv_nan_tactics,test_se_engine_layouts \
  t memcheck 120 compute-sanitizer --tool memcheck $B/test_cuda_ops
grep -E 'ERROR SUMMARY' $L | tail -2
for m in tiny_dyncnn tiny_convnext tiny_mbv3 se_block; do for p in --fp16 --bf16; do
  [ $(left) -gt 200 ] || break 2
  timeout 60 $B/kiln build tests/data/$m.onnx --device cuda $p -o /tmp/$m.kiln >> $L 2>&1; rc=$?
  timeout 30 $B/kiln run /tmp/$m.kiln --random-inputs --output-dir /tmp/o$m >> $L 2>&1
  echo "$m ${p}: build rc=$rc run rc=$?" | tee -a $L; done; done
se_engines 0
grep -E 'refusing to write|reads |outputs are nchw|as one layout' $L | head -10
bench main $(( $(left) - 60 > 200 ? 200 : $(left) - 60 )) --models resnet50,bert --batches 1,64
zoo fp32
cd $OUT && tar czf rest.tgz --exclude=tests.log --exclude=rest.tgz . && find . -type f ! -name tests.log ! -name rest.tgz -delete; ls $OUT
