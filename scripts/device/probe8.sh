# probe8 (issue 20): the layout check through views, AveragePool NHWC written, the debugger's
# layouts, on a GPU's plans (about 6 minutes; each step where time is left). Expected: every test
# "N passed, 0 failed"; every build and run rc=0 (tiny_dyncnn --fp16 failed before with "refusing
# to write an invalid engine: ... (AveragePool): attribute 'layout' = 1 is out of range [0, 0]");
# no "other numbers" line from test_se_engine_layouts; kiln debug compare naming no layer with an
# error near max|ref| (a chain's NHWC bytes read as NCHW gave errors of that size before).
. scripts/device/pre.sh
t precision 90 $B/test_cuda_precision
KILN_TEST_ONLY=test_se_engine_layouts t layouts 240 $B/test_cuda_ops
[ $(left) -gt 150 ] && t engine 120 $B/test_cuda_engine
for m in tiny_dyncnn tiny_convnext tiny_mbv3 se_block; do
  for p in --fp16 --bf16; do
    [ $(left) -gt 40 ] || break 2
    timeout 60 $B/kiln build tests/data/$m.onnx --device cuda $p -o /tmp/$m.kiln >> $L 2>&1
    rc=$?; timeout 30 $B/kiln run /tmp/$m.kiln --random-inputs --output-dir /tmp/o$m >> $L 2>&1
    echo "$m ${p}: build rc=$rc run rc=$?" | tee -a $L
    timeout 90 $B/kiln debug compare tests/data/$m.onnx --device cuda $p > $OUT/dbg_$m$p.log 2>&1
    echo "debug compare $m $p: rc=$? $(grep -E '^result' $OUT/dbg_$m$p.log)" | tee -a $L
  done
done
tv_fp16 convnext_tiny densenet121 efficientnet_b0
grep -E 'passed|^FAIL|layout fields|other numbers|refusing to write|reads |outputs are nchw|as one layout' $L | head -40
