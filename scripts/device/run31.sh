# fp32 convolutions, tuned (cuDNN's first legacy algorithms pinned, timed; the default since
# 2026-12-06) against tactic 0 alone (KILN_CUDA_FP32_CONV_FIND=1: the algorithm found at the
# engine's first run, as before), on torchvision models at batch 1 and 8: build time, then
# `kiln bench` of the two engines in turns (3 rounds, p50 of each), the ratio tuned / found.
. scripts/device/pre.sh
MODELS=${MODELS:-resnet18 mobilenet_v2 efficientnet_b0 shufflenet_v2_x0_5}
tv_onnx $MODELS
p50() { $B/kiln bench $1 --warmup 10 --iterations 100 2>/dev/null | sed -nE 's/.*p50 ([0-9.]+).*/\1/p'; }
for n in $MODELS; do for b in 1 8; do
  [ $(left) -gt 60 ] || break 2
  for v in tuned found; do s=$(date +%s%N)
    env $([ $v = found ] && echo KILN_CUDA_FP32_CONV_FIND=1) timeout 120 $B/kiln build /tmp/$n.onnx --device cuda \
      --shapes x:${b}x3x224x224 -o /tmp/$n.$v.kiln -q >> $L 2>&1 || echo "build $n $v failed"
    echo "build $n b$b $v $(( ($(date +%s%N) - s) / 10000000 ))e-2 s" >> $L; done
  a=(); f=(); for r in 1 2 3; do a+=($(p50 /tmp/$n.tuned.kiln)); f+=($(p50 /tmp/$n.found.kiln)); done
  python3 -c "import statistics as s,sys; a=[float(x) for x in sys.argv[1].split()]; f=[float(x) for x in sys.argv[2].split()]; \
print(f'$n b$b fp32: tuned {s.median(a):.3f} ms, found {s.median(f):.3f} ms, tuned/found {s.median(a)/s.median(f):.2f}')" \
    "${a[*]}" "${f[*]}" | tee -a $L
done; done
grep -E '^build ' $L
