# The session of 2026-12-06 (s12), gpu_check's sections that run27 (E=340) left: memcheck of the
# op tests (its half 1 timed out there), then the Python suite and the ONNX node tests on CUDA,
# then the ResNet-50/BERT bench where E leaves time. Each section's log into gc3.tgz.
. scripts/device/pre.sh
mkdir -p /tmp/nt && tar xJf .carry/node.tar.xz -C /tmp/nt
gc() { local to=$1; shift; local s=$(date +%s)
  env KILN_NODE_TESTS=/tmp/nt/node KILN_PREBUILT=.gpu-bin OUT=/tmp/gc3 "$@" timeout $to bash scripts/gpu_check.sh >> /tmp/gc3.txt 2>&1
  echo "rc=$? gpu_check $* ($(( $(date +%s) - s )) s)" | tee -a $L; }
gc 170 ONLY=memcheck
gc $(( $(left) - 20 )) ONLY="pytest conformance"
[ $(left) -gt 140 ] && gc $(( $(left) - 10 )) ONLY=bench BENCH_BUDGET=$(( $(left) - 100 ))
grep -vE '^(PASS|ok) ' /tmp/gc3.txt | grep -v 'prebuilt:\|^name, driver\|^NVIDIA' | cut -c1-300 | head -80
tar czf $OUT/gc3.tgz -C /tmp gc3 gc3.txt
