# issue 20 GPU evidence (tests, memcheck, differential) then the issue-21 target rows
. scripts/device/pre.sh
t engine 150 $B/test_cuda_engine
KILN_TEST_ONLY=default_stream_inputs,nhwc_dynamic_batch t engine_memcheck 150 compute-sanitizer --tool memcheck --print-limit 20 $B/test_cuda_engine
KILN_CUDA_SYNC=1 t ops_sync 200 $B/test_cuda_ops
KILN_TEST_ONLY=test_grid_limits,test_squeeze_excite,test_se_engine,test_conv_gemm t ops_memcheck 200 compute-sanitizer --tool memcheck --print-limit 20 $B/test_cuda_ops
KILN_DIFF_ITERS=300 t diff300 150 $B/test_cuda_diff
t precision 60 $B/test_cuda_precision
t attention_forms 120 $B/test_attention_forms
grep -E 'passed|FAIL|ERROR SUMMARY|CHECK failed' $L | grep -v '^ok' | tail -30
bench tgt $(( $(left) - 30 )) --models bert,resnet50 --batches 1,64
