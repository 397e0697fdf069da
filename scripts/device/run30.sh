# The session of 2026-12-06 late, after run27/run28: fp32 FusedConv layers list cuDNN's legacy
# algorithms pinned (test_conv_legacy_pinned failed in run27: an fp32 layer listed tactic 0
# alone), each algorithm once; the kept ONNX's external data under a name the file system takes
# (test_long_names_and_links failed in run28, torch 2.11). In what E allows: the op tests,
# memcheck of the conv tactic tests, the Python front-end tests, gpu_check's real models (fp32
# builds now tuned), the CUDA zoo in fp32.
. scripts/device/pre.sh
t ops 150 $B/test_cuda_ops
grep -E '^[0-9]+ passed|^FAIL' $L; grep -B4 -E '^FAIL' $L | grep -vE '^PASS' | cut -c1-400 | head -20
grep -E 'fp32 3x3' $L | cut -c1-300 | head -3
KILN_LIBRARY=$PWD/$B/libkiln.so KILN_CLI=$PWD/$B/kiln t pytest_front_end 90 python3 -m pytest -q -p no:cacheprovider python/tests/test_front_end.py
grep -E 'passed|failed|^FAILED|^E ' $L | tail -5
KILN_TEST_ONLY=test_conv_legacy_pinned,test_fused_conv_nan_tactics t memcheck 60 compute-sanitizer --tool memcheck $B/test_cuda_ops
grep -E 'ERROR SUMMARY' $L | tail -1
[ $(left) -gt 100 ] && { KILN_PREBUILT=$B ONLY="models" OUT=/tmp/gcm timeout $(( $(left) - 60 )) bash scripts/gpu_check.sh 2>&1 | grep -E 'PASS|FAIL|fallback' | cut -c1-200; }
zoo fp32
