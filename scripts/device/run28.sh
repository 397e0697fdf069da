# The session of 2026-12-06 late, second call: scripts/gpu_check.sh's second half (the Python
# suite with torch, the ONNX node tests on CUDA, bench/gpu_vs_torch.py's ResNet-50 and BERT),
# its logs tarred into gc2.tgz, then the CUDA zoo in fp32 where E leaves time.
. scripts/device/pre.sh
mkdir -p /tmp/nt && tar xJf .carry/node.tar.xz -C /tmp/nt   # the ONNX node tests (Debian's libonnx-testdata)
s=$(date +%s)
KILN_NODE_TESTS=/tmp/nt/node KILN_PREBUILT=.gpu-bin ONLY="pytest conformance bench" OUT=/tmp/gc2 BENCH_BUDGET=${BB:-150} \
  timeout $(( $(left) - 30 )) bash scripts/gpu_check.sh > /tmp/gc2.txt 2>&1; echo "rc=$? gpu_check half 2 ($(( $(date +%s) - s )) s)" | tee -a $L
grep -vE '^(PASS|ok) ' /tmp/gc2.txt | cut -c1-300 | head -120
tar czf $OUT/gc2.tgz -C /tmp gc2 gc2.txt
zoo fp32
cd $OUT && tar czf rest.tgz --exclude=tests.log --exclude=rest.tgz --exclude=gc2.tgz . && find . -type f ! -name tests.log ! -name rest.tgz ! -name gc2.tgz -delete; ls $OUT
