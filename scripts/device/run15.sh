# the rest of the architecture sweep (b1, b32), then the CUDA model zoo (issue 20)
. scripts/device/pre.sh
bench sweep $(( ${SW:-300} )) --models gpt2,vit_b_16,t5enc,regnet_y_1_6gf,vgg16,distilbert,resnet152 --batches 1,32
for p in fp16 fp32; do
  lb=$(( $(left) - 20 )); [ $lb -gt 40 ] || break
  timeout $((lb + 10)) python3 bench/model_zoo.py --ci --device cuda --precision $p --kiln $B/kiln \
    --cache-dir /tmp/zoo --budget $((lb - 10)) --write $OUT/zoo_$p.md > $OUT/zoo_$p.log 2>&1; echo "rc=$? zoo $p"
  grep -E '^\|' $OUT/zoo_$p.md | cut -c1-200 | head -20
done
