# The session of 2026-12-06 late, third call (short): probe8's torchvision fp16 builds
# (convnext_tiny, densenet121, efficientnet_b0 at batch 8, built and run), then the CUDA zoo
# rows in fp16 that run21 had no time for (shufflenet dynamic, vit_b_32, lraspp, r3d_18).
. scripts/device/pre.sh
tv_fp16 convnext_tiny densenet121 efficientnet_b0
grep -E 'refusing to write|reads .* layout|as one layout' $L | head
lb=$(( $(left) - 20 ))
[ $lb -gt 60 ] && { timeout $((lb + 10)) python3 bench/model_zoo.py --device cuda --precision fp16 --kiln $B/kiln \
  --models shufflenet_v2_x0_5:dynamic,vit_b_32,lraspp_mobilenet_v3_large,r3d_18:fixed --cache-dir /tmp/zoo \
  --budget $((lb - 10)) --write $OUT/zoo_fp16_rest.md > $OUT/zoo_fp16_rest.log 2>&1; echo "rc=$? zoo fp16 rest"
  grep -E '^\|' $OUT/zoo_fp16_rest.md | cut -c1-200; }
