# Why fp32 engines with pinned legacy tactics (tuned) run slower than tactic 0 (found) on
# mobilenet_v2 and shufflenet at batch 1 (run31): per-layer profiles, tactics with their build
# times, and latency with CUDA Graphs off, for both engines.
. scripts/device/pre.sh
MODELS=${MODELS:-mobilenet_v2 shufflenet_v2_x0_5}
tv_onnx $MODELS
for n in $MODELS; do
  for v in tuned found; do
    env $([ $v = found ] && echo KILN_CUDA_FP32_CONV_FIND=1) KILN_TUNE_VERBOSE=1 timeout 120 $B/kiln build /tmp/$n.onnx \
      --device cuda --shapes x:1x3x224x224 -o /tmp/$n.$v.kiln > $OUT/build_$n.$v.log 2>&1 || echo "build $n $v failed"
    $B/kiln inspect /tmp/$n.$v.kiln > $OUT/inspect_$n.$v.txt 2>&1
    for g in 1 0; do echo "$n $v graphs=$g: $(KILN_CUDA_GRAPHS=$g $B/kiln bench /tmp/$n.$v.kiln --warmup 10 --iterations 100 2>&1 | grep -E 'p50' | head -1)"; done
    $B/kiln bench /tmp/$n.$v.kiln --warmup 10 --iterations 50 --profile > $OUT/prof_$n.$v.txt 2>&1
    KILN_CUDA_VERBOSE=1 $B/kiln run /tmp/$n.$v.kiln --random-inputs --output-dir /tmp/o > $OUT/verbose_$n.$v.log 2>&1
  done
done
cd $OUT && tar czf r32.tgz *.txt *.log && rm -f *.txt build_* verbose_*
