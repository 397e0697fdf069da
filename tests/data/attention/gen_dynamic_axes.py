#!/usr/bin/env python3
"""Exports tiny BERT-style encoders with dynamic batch and sequence axes (what
serving needs: torch.onnx.export(..., dynamic_axes=...)), for
tests/unit/test_attention_forms.c (test dynamic_axes). Their head split and
merge reshape to targets computed at run time,
Reshape(t, Concat(Unsqueeze(Gather(Shape(t), 0)), Unsqueeze(Gather(Shape(t), 1)), [H], [D])),
which the optimizer must read as [0, 0, H, D] to fuse the attention.

    /usr/bin/python3 tests/data/attention/gen_dynamic_axes.py tests/data/attention

writes (Debian's torch 1.13, TorchScript exporter, opset 17):
  t113_ts_dynaxes_bert.onnx   two encoder layers (BertSelfAttention's view/permute,
                              additive padding mask, output projection + residual,
                              LayerNorm, GELU FFN): one kiln.Attention per layer
  t113_ts_dynaxes_badmerge.onnx  one layer whose merge is view(S, B, E).transpose(0, 1)
                              with S and B read from the tensor: a run-time target
                              that is not the attention's [B, S, E] merge, which must
                              stay a Reshape
Inputs x [batch, seq, 32] float32 and mask [batch, seq] int64."""
import math
import os
import sys
import warnings

import torch

warnings.filterwarnings("ignore")
E, H = 32, 2
D = E // H


class Layer(torch.nn.Module):
    def __init__(self, bad_merge):
        super().__init__()
        self.bad_merge = bad_merge
        self.q, self.k, self.v, self.o = (torch.nn.Linear(E, E) for _ in range(4))
        self.ln1, self.ln2 = torch.nn.LayerNorm(E), torch.nn.LayerNorm(E)
        self.ff1, self.ff2 = torch.nn.Linear(E, 4 * E), torch.nn.Linear(4 * E, E)

    def split(self, t):  # transformers' BertSelfAttention.transpose_for_scores
        return t.view(t.size()[:-1] + (H, D)).permute(0, 2, 1, 3)

    def forward(self, x, add):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D) + add
        y = torch.matmul(torch.softmax(s, dim=-1), v).permute(0, 2, 1, 3).contiguous()
        if self.bad_merge:
            y = y.view(y.size(1), y.size(0), E).transpose(0, 1)
        else:
            y = y.view(y.size()[:-2] + (E,))
        h = self.ln1(self.o(y) + x)
        return self.ln2(self.ff2(torch.nn.functional.gelu(self.ff1(h))) + h)


class Encoder(torch.nn.Module):
    def __init__(self, n, bad_merge=False):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(Layer(bad_merge) for _ in range(n))

    def forward(self, x, mask):
        add = (1.0 - mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, add)
        return x


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    x = torch.randn(2, 8, E)
    mask = torch.ones(2, 8, dtype=torch.int64)
    axes = {"x": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}
    for name, model in (("bert", Encoder(2)), ("badmerge", Encoder(1, bad_merge=True))):
        model.eval()
        path = os.path.join(out, f"t113_ts_dynaxes_{name}.onnx")
        with torch.no_grad():
            torch.onnx.export(model, (x, mask), path, input_names=["x", "mask"], output_names=["y"],
                              opset_version=17, dynamic_axes=axes)
        print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
