# The session of 2026-12-06 late, third call (short): probe8's torchvision fp16 builds
# (convnext_tiny, densenet121, efficientnet_b0 at batch 8, built and run), then the CUDA zoo
# rows in fp16 that run21 had no time for (shufflenet dynamic, vit_b_32, lraspp, r3d_18).
. scripts/device/pre.sh
[ $(left) -gt 90 ] && tv_onnx convnext_tiny densenet121 efficientnet_b0
for n in convnext_tiny densenet121 efficientnet_b0; do
  [ $(left) -gt 40 ] || break
  timeout 150 $B/kiln build /tmp/$n.onnx --device cuda --fp16 --shapes x:8x3x224x224 -o /tmp/$n.kiln >> $L 2>&1
  rc=$?; timeout 60 $B/kiln run /tmp/$n.kiln --random-inputs --output-dir /tmp/o$n >> $L 2>&1
  echo "tv $n fp16: build rc=$rc run rc=$?" | tee -a $L
done
grep -E 'refusing to write|reads .* layout|as one layout' $L | head
lb=$(( $(left) - 20 ))
[ $lb -gt 60 ] && { timeout $((lb + 10)) python3 bench/model_zoo.py --device cuda --precision fp16 --kiln $B/kiln \
  --models shufflenet_v2_x0_5:dynamic,vit_b_32,lraspp_mobilenet_v3_large,r3d_18:fixed --cache-dir /tmp/zoo \
  --budget $((lb - 10)) --write $OUT/zoo_fp16_rest.md > $OUT/zoo_fp16_rest.log 2>&1; echo "rc=$? zoo fp16 rest"
  grep -E '^\|' $OUT/zoo_fp16_rest.md | cut -c1-200; }
