# For the session after s12: what gpu_check has not run on the final code yet (binaries packed at
# b7ed245 or later): the CUDA op tests (test_engine_changing_buffers is new), the ONNX node tests
# on CUDA (over 100 s alone in run37), then the ResNet-50/BERT bench with the time left.
# Each section's log into gc5.tgz. Usage: E=520 bash scripts/device/run38.sh
. scripts/device/pre.sh
mkdir -p /tmp/nt && tar xJf .carry/node.tar.xz -C /tmp/nt
gc() { local to=$1; shift; local s=$(date +%s)
  env KILN_NODE_TESTS=/tmp/nt/node KILN_PREBUILT=.gpu-bin OUT=/tmp/gc5 "$@" timeout $to bash scripts/gpu_check.sh >> /tmp/gc5.txt 2>&1
  echo "rc=$? gpu_check $* ($(( $(date +%s) - s )) s)" | tee -a $L; }
gc 150 ONLY=ops
gc 240 ONLY=conformance
[ $(left) -gt 140 ] && gc $(( $(left) - 10 )) ONLY=bench BENCH_BUDGET=$(( $(left) - 100 ))
grep -vE '^(PASS|ok) ' /tmp/gc5.txt | grep -v 'prebuilt:\|^name, driver\|^NVIDIA' | cut -c1-300 | head -80
tar czf $OUT/gc5.tgz -C /tmp gc5 gc5.txt
