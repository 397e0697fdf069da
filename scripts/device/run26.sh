# The shortest useful call (little device time left, 2026-12-06): the CUDA op tests (the
# legacy algorithms pinned, the layout check through views: run21's two failures), then
# test_cuda_precision and the GPU's fp16 engines of tiny_mbv3 and se_block, where E allows.
. scripts/device/pre.sh
t ops $(( $(left) - 15 )) $B/test_cuda_ops
grep -E '^[0-9]+ passed|^FAIL' $L; grep -B4 -E '^FAIL' $L | grep -vE '^PASS' | cut -c1-400 | head -30
grep -E 'other numbers|layout fields|fp32 3x3' $L | cut -c1-300 | head -12
[ $(left) -gt 40 ] && t precision $(( $(left) - 15 )) $B/test_cuda_precision
se_engines 10
grep -E 'refusing to write|^rc=' $L | head
