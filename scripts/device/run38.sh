# For the session after s12: what gpu_check has not run on the final code yet (binaries packed at
# b7ed245 or later): the CUDA op tests (test_engine_changing_buffers is new), the ONNX node tests
# on CUDA (over 100 s alone in run37), then the ResNet-50/BERT bench with the time left.
# Each section's log into gc5.tgz. Usage: E=520 bash scripts/device/run38.sh
. scripts/device/pre.sh
gc /tmp/gc5 150 ONLY=ops
gc /tmp/gc5 240 ONLY=conformance
[ $(left) -gt 140 ] && gc /tmp/gc5 $(( $(left) - 10 )) ONLY=bench BENCH_BUDGET=$(( $(left) - 100 ))
gc_done /tmp/gc5
