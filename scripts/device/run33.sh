# Kernels of the fp32 mobilenet_v2 engines at batch 1, tuned (IMPLICIT_PRECOMP_GEMM pinned on most
# 1x1 layers) and found (IMPLICIT_GEMM): ncu's per-kernel GPU time of 3 runs without CUDA Graphs,
# to see what the pinned algorithm runs that the builder's timing of the layer alone did not.
. scripts/device/pre.sh
n=mobilenet_v2; tv_onnx $n
for v in tuned found; do
  env $([ $v = found ] && echo KILN_CUDA_FP32_CONV_FIND=1) timeout 120 $B/kiln build /tmp/$n.onnx \
    --device cuda --shapes x:1x3x224x224 -o /tmp/$n.$v.kiln -q >> $L 2>&1
  KILN_CUDA_GRAPHS=0 timeout 200 ncu --metrics gpu__time_duration.sum --print-summary per-kernel \
    $B/kiln bench /tmp/$n.$v.kiln --warmup 2 --iterations 3 > $OUT/ncu_$v.txt 2>&1; echo "ncu $v rc=$?"
  KILN_CUDA_GRAPHS=0 timeout 100 ncu --metrics gpu__time_duration.sum --launch-skip 300 --launch-count 120 \
    $B/kiln bench /tmp/$n.$v.kiln --warmup 2 --iterations 3 > $OUT/ncu_seq_$v.txt 2>&1; echo "ncu seq $v rc=$?"
done
cd $OUT && tar czf r33.tgz ncu_*.txt && rm -f ncu_*.txt
