# The session of 2026-12-06 (s12), gpu_check's sections that run27 (E=340) left: memcheck of the
# op tests (its half 1 timed out there), then the Python suite and the ONNX node tests on CUDA,
# then the ResNet-50/BERT bench where E leaves time. Each section's log into gc3.tgz.
. scripts/device/pre.sh
gc /tmp/gc3 170 ONLY=memcheck
gc /tmp/gc3 $(( $(left) - 20 )) ONLY="pytest conformance"
[ $(left) -gt 140 ] && gc /tmp/gc3 $(( $(left) - 10 )) ONLY=bench BENCH_BUDGET=$(( $(left) - 100 ))
gc_done /tmp/gc3
