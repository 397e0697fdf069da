# build time (plan threads serial vs auto, ABBA; warm timing cache), then the GPU LitServe row (issue 23)
. scripts/device/pre.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .carry/whl/*.whl && export PYTHONPATH=/tmp/site
tv_onnx efficientnet_b0 resnet50
# (KILN_CUDA_PLAN_THREADS=0: the serial path; auto is the default since this run)
for th in 0 auto auto 0; do
  for m in efficientnet_b0:32 resnet50:64; do KILN_CUDA_PLAN_THREADS=$th bt ${m%:*} ${m#*:} threads=$th; done
done
rm -f /tmp/tc; for k in cold warm; do KILN_CUDA_PLAN_THREADS=0 bt efficientnet_b0 32 "threads=0 cache=$k" --timing-cache /tmp/tc; done
cp BENCHMARKS.md $OUT/BENCHMARKS.md
KILN_LIBRARY=$PWD/$B/libkiln.so timeout $(( $(left) - 10 )) python3 bench/serve_vs_torch.py --concurrency 1,8,32 --requests 40,160,320 --rounds 2 --workers 1 --threads 16 --max-batch 8 --timeout-ms 5 --device cuda --write $OUT/BENCHMARKS.md --json $OUT/serve.json > $OUT/serve.log 2>&1; echo "rc=$? serve"
tail -15 $OUT/serve.log
