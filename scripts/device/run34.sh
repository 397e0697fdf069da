# CUDA runtime calls and copies of the fp32 mobilenet_v2 engines at batch 1, tuned and found
# (torch.profiler over kiln.load's module: kernels, memcpy/memset, cudaStreamSynchronize, graph
# capture), to find what the pinned IMPLICIT_PRECOMP_GEMM layers add at run time (run32/33).
. scripts/device/pre.sh
n=mobilenet_v2; tv_onnx $n
for v in tuned found; do
  env $([ $v = found ] && echo KILN_CUDA_FP32_CONV_FIND=1) timeout 120 $B/kiln build /tmp/$n.onnx \
    --device cuda --shapes x:1x3x224x224 -o /tmp/$n.$v.kiln -q >> $L 2>&1
  for g in 1 0; do
  KILN_CUDA_GRAPHS=$g KILN_LIBRARY=$B/libkiln.so PYTHONPATH=python timeout 120 python3 - /tmp/$n.$v.kiln > $OUT/api_${v}_g$g.txt 2>&1 <<'PY'
import sys, time, torch, kiln
from torch.profiler import profile, ProfilerActivity
m = kiln.load(sys.argv[1]); x = torch.randn(1, 3, 224, 224, device="cuda")
for _ in range(20): y = m(x)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
    for _ in range(10): y = m(x)
    torch.cuda.synchronize()
print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=70))
print(p.key_averages().table(sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=70))
t = time.perf_counter()
for _ in range(200): y = m(x)
torch.cuda.synchronize(); print(f"module latency {(time.perf_counter() - t) / 200 * 1e3:.3f} ms")
PY
  echo "$v g$g rc=$? $(tail -1 $OUT/api_${v}_g$g.txt)"; done
done
cd $OUT && tar czf r34.tgz api_*.txt && rm -f api_*.txt
