# CUDA Graphs for changing buffers and host inputs (graph_stage_io): test_cuda_engine, whether
# `kiln bench` (host inputs) now captures, kiln.load's module latency in a loop (torch's allocator
# hands two output buffers in turn), then run31's fp32 tuned/found A/B, now with graphs.
. scripts/device/pre.sh
t test_cuda_engine 120 $B/test_cuda_engine; grep -E 'FAIL|error|graph [01]' $L | head -20
n=mobilenet_v2; tv_onnx $n
for v in tuned found; do
  env $([ $v = found ] && echo KILN_CUDA_FP32_CONV_FIND=1) timeout 120 $B/kiln build /tmp/$n.onnx \
    --device cuda --shapes x:1x3x224x224 -o /tmp/$n.$v.kiln -q >> $L 2>&1
  echo "$v: $(KILN_CUDA_VERBOSE=1 $B/kiln bench /tmp/$n.$v.kiln --warmup 5 --iterations 100 2>&1 | grep -E 'Graph|p50' | sort | uniq -c | cut -c1-200 | tr '\n' ' ')"
  KILN_LIBRARY=$B/libkiln.so PYTHONPATH=python timeout 120 python3 - /tmp/$n.$v.kiln <<'PY' 2>&1 | tail -2
import sys, time, torch, kiln
m = kiln.load(sys.argv[1]); x = torch.randn(1, 3, 224, 224, device="cuda")
for _ in range(20): y = m(x)
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(300): y = m(x)
torch.cuda.synchronize(); print(f"module latency {(time.perf_counter() - t) / 300 * 1e3:.3f} ms")
PY
done
E=$(( $(left) )) MODELS="resnet18 mobilenet_v2 efficientnet_b0 shufflenet_v2_x0_5" bash scripts/device/run31.sh 2>&1 | grep -E 'fp32:'
