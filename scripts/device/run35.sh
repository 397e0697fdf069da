# Whether the fp32 mobilenet_v2 engines at batch 1 (tuned: IMPLICIT_PRECOMP_GEMM pinned; found)
# run as a CUDA Graph (KILN_CUDA_VERBOSE=1), and which tactics the builder timed by plain runs.
. scripts/device/pre.sh
n=mobilenet_v2; tv_onnx $n
for v in tuned found; do
  env $([ $v = found ] && echo KILN_CUDA_FP32_CONV_FIND=1) KILN_TUNE_VERBOSE=1 timeout 120 $B/kiln build /tmp/$n.onnx \
    --device cuda --shapes x:1x3x224x224 -o /tmp/$n.$v.kiln > $OUT/build_$v.log 2>&1
  echo "$v: $(grep -c 'plain runs' $OUT/build_$v.log) layers with a candidate timed by plain runs"
  grep -m3 'plain runs' $OUT/build_$v.log | cut -c1-400
  KILN_CUDA_VERBOSE=1 $B/kiln bench /tmp/$n.$v.kiln --warmup 5 --iterations 50 2>&1 | grep -E 'Graph|p50' | sort | uniq -c | cut -c1-400
done
cd $OUT && tar czf r35.tgz build_*.log && rm -f build_*.log
