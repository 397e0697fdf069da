# The session of 2026-12-06 late, first call: scripts/gpu_check.sh's first half on the final
# code (op tests under KILN_CUDA_SYNC=1, the C unit tests, CUDA vs CPU engine, kiln debug
# compare, real models, compute-sanitizer memcheck of the op tests), its logs tarred into
# gc1.tgz, then the GPU's fp16 engines of tiny_mbv3 and se_block brought back and the test
# models built fp16/bf16 and run, where E leaves time. Few files under $OUT.
. scripts/device/pre.sh
s=$(date +%s)
KILN_PREBUILT=.gpu-bin ONLY="ops unit engine debug models memcheck" OUT=/tmp/gc1 \
  timeout $(( $(left) - 60 )) bash scripts/gpu_check.sh > /tmp/gc1.txt 2>&1; echo "rc=$? gpu_check half 1 ($(( $(date +%s) - s )) s)" | tee -a $L
grep -vE '^(PASS|ok) ' /tmp/gc1.txt | cut -c1-300 | head -120
tar czf $OUT/gc1.tgz -C /tmp gc1 gc1.txt
se_engines 20
for m in tiny_dyncnn tiny_convnext tiny_mbv3 se_block; do for p in --fp16 --bf16; do
  [ $(left) -gt 15 ] || break 2
  timeout 30 $B/kiln build tests/data/$m.onnx --device cuda $p -o /tmp/$m.kiln >> $L 2>&1; rc=$?
  timeout 20 $B/kiln run /tmp/$m.kiln --random-inputs --output-dir /tmp/o$m >> $L 2>&1
  echo "$m ${p}: build rc=$rc run rc=$?" | tee -a $L; done; done
grep -E 'refusing to write|reads .* layout|as one layout' $L | head -10
