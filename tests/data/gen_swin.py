#!/usr/bin/env python3
"""Exports a tiny torchvision Swin Transformer (random weights) for the tests of
the window-attention forms and of CUDA plans without host reads
(tests/unit/test_attention_forms.c via tests/data/attention/manifest.txt,
tests/cuda/test_cuda_ops.c under the emulator).

    /usr/bin/python3 tests/data/gen_swin.py tests/data/attention

writes swin_t113_b1.onnx and swin_t113_b2.onnx and their lines of the
folder's manifest.txt (file, attention blocks, input; see
tests/data/attention/gen_attention_forms.py).

Made with Debian's torch 1.13 (TorchScript exporter, opset 17, fixed input
shape): torchvision's SwinTransformer with embed_dim 16, window 7, on
Bx3x56x56 inputs (14x14 tokens: 4 windows of 7x7, the second block of stage 1
shifted by 3 with its attention mask); swin_t113_b1.onnx: depths [2, 2],
heads [2, 4] (stage 2 is one window, unshifted), batch 1;
swin_t113_b2.onnx: depths [2], heads [2], batch 2 (the shift mask repeats
over the batch). The graphs have what swin_t's has: Pad to the window
multiple, Roll as Slice + Concat, the window partition as Reshape/Transpose,
the relative position bias gathered from its table, the shift mask added
through a [B, nW, H, 49, 49] view, PatchMerging's strided Slices."""
import os
import sys

import torch
from torchvision.models.swin_transformer import SwinTransformer

out = sys.argv[1] if len(sys.argv) > 1 else "."
lines = []
for b, depths, heads in ((1, [2, 2], [2, 4]), (2, [2], [2])):
    torch.manual_seed(0)
    m = SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=depths, num_heads=heads, window_size=[7, 7],
                        num_classes=10).eval()
    with torch.no_grad():  # the position bias tables start at zeros: make them matter
        for mod in m.modules():
            if hasattr(mod, "relative_position_bias_table"):
                mod.relative_position_bias_table.normal_(0, 0.5)
    name = f"swin_t113_b{b}.onnx"
    x = torch.randn(b, 3, 56, 56)
    torch.onnx.export(m, x, os.path.join(out, name), opset_version=17, input_names=["x"], output_names=["y"])
    lines.append(f"{name}\t{sum(depths)}\tx:f:{b}x3x56x56")
# the manifest of tests/data/attention (lines of other files kept)
man = os.path.join(out, "manifest.txt")
keep = []
if os.path.exists(man):
    with open(man) as fh:
        keep = [ln.rstrip("\n") for ln in fh if ln.strip() and not ln.startswith("swin_")]
with open(man, "w") as fh:
    fh.write("\n".join(sorted(keep + lines)) + "\n")
