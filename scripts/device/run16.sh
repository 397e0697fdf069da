# First GPU check of the 2026-12-05 evening merges (nanprop, gconv, bert64, probe5), then their
# benches: the new kernels' tests (plain, memcheck, racecheck), the differential test with its
# pinned seeds, the engine tests, then BERT b1/b64 (with A/B of the mask passes) and RegNetY b1/b32.
. scripts/device/pre.sh
KILN_TEST_ONLY=test_gconv_nhwc,test_attention_nan_tactics,test_fused_conv_nan_tactics,test_shared_attention_mask,test_fused_transformer,test_attention_tactics,test_fused_conv_tactics,test_fused_conv_special_values,test_dwconv_nhwc,test_fused_conv_nhwc,test_pool,test_global_pool,test_reduce,test_softmax t ops_new 240 $B/test_cuda_ops
grep -E '^  note:|runs differ from the CPU|grouped s[12]:' $L | head -20
KILN_TEST_ONLY=test_gconv_nhwc,test_attention_nan_tactics,test_fused_conv_nan_tactics,test_shared_attention_mask t ops_memcheck 240 compute-sanitizer --tool memcheck --print-limit 20 $B/test_cuda_ops
KILN_TEST_ONLY=test_gconv_nhwc t gconv_racecheck 200 compute-sanitizer --tool racecheck --print-limit 10 $B/test_cuda_ops
t engine 150 $B/test_cuda_engine
KILN_DIFF_ITERS=300 t diff300 200 $B/test_cuda_diff
t attention_forms 120 $B/test_attention_forms
t precision 60 $B/test_cuda_precision
grep -E 'passed|^FAIL|ERROR SUMMARY|RACECHECK SUMMARY|CHECK failed' $L | tail -30
bench tgt $(( $(left) - 200 )) --models bert,resnet50 --batches 1,64
bench rg $(( $(left) - 100 )) --models regnet_y_1_6gf --batches 1,32
timeout 100 python3 bench/gpu_vs_torch.py --lib $B/libkiln.so --models bert --batches 64 --no-compile --write $OUT/ab_nomask.md --disable-pass share_attention_mask > /dev/null 2>&1; grep -E '^\| bert' $OUT/ab_nomask.md
