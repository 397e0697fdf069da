# probe7 (issue 20, was its run21): the engine loader's and writer's layout check on a GPU's plans. The new test
# (test_se_engine_layouts: se_block and tiny_mbv3, fp32 and fp16, every layout field set to every
# value: refused, or right numbers, or an error) and the CUDA tests that build plans (an fp16 NHWC
# chain the check refused would fail them); then torchvision models in fp16 / bf16 / fp32 with
# NHWC chains built, loaded back and run once (a plan the check refuses: "refusing to write").
. scripts/device/pre.sh
KILN_TEST_ONLY=test_se_engine_layouts,test_se_engine t layouts 150 $B/test_cuda_ops
t ops $(( $(left) > 300 ? 240 : $(left) / 2 )) $B/test_cuda_ops
t engine 120 $B/test_cuda_engine
t forms 120 $B/test_attention_forms
tv_onnx resnet50 mobilenet_v3_large efficientnet_b0 convnext_tiny regnet_y_400mf
for n in resnet50 mobilenet_v3_large efficientnet_b0 convnext_tiny regnet_y_400mf; do
  for p in --fp16 --bf16 ""; do
    [ $(left) -gt 30 ] || break 2
    timeout 150 $B/kiln build /tmp/$n.onnx --device cuda $p --shapes x:8x3x224x224 -o /tmp/$n.kiln >> $L 2>&1
    rc=$?; timeout 60 $B/kiln run /tmp/$n.kiln --random-inputs --output-dir /tmp/o$n >> $L 2>&1
    echo "tv $n ${p:-fp32}: build rc=$rc run rc=$?" | tee -a $L
  done
done
grep -E 'passed|^FAIL|layout fields|other numbers|refusing to write|reads its|outputs are nchw|as one layout' $L | head -40
