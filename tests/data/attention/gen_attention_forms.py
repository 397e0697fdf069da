#!/usr/bin/env python3
"""Exports small transformer blocks in every attention form the PyTorch
exporters emit, for the pattern-matcher tests (tests/unit/test_attention_forms.c).

Run it with each torch: Debian's torch 1.13 (TorchScript exporter only) and a
torch 2.x (TorchScript and dynamo exporters, plus the Hugging Face models when
`transformers` is importable). The committed files came from Debian's
/usr/bin/python3 (torch 1.13) and from a venv with torch 2.11.0, transformers
5.17.0, onnxscript 0.7.2 and onnx 1.23.1 from PyPI (the versions of the GPU
machine; exporting needs no GPU):

    /usr/bin/python3 tests/data/attention/gen_attention_forms.py tests/data/attention
    VENV/bin/python tests/data/attention/gen_attention_forms.py tests/data/attention

Files are named t<major><minor>_<exporter>_<form>.onnx (exporter: ts =
TorchScript, dy = dynamo). Each run appends one line per file to
OUTDIR/manifest.txt (old lines of the same torch/exporter are replaced):

    file  n_attention  input[;input...]

with input = name:kind:d0xd1x... (kind: f = float32 randn, ids<V> = int64
in [0, V), m = int64 0/1 padding mask, b = bool mask). n_attention is the
number of attention blocks the model has: the matcher must fuse every one of
them into kiln.Attention (for the CUDA plan in fp16 and the CPU plan), and the
optimized engine must agree with the unoptimized one.

Weights are random; sizes are tiny (hidden 32, 2 heads, sequence 8) so the
files stay a few kB."""
import contextlib
import math
import os
import sys
import warnings

import torch
import torch.nn.functional as F

warnings.filterwarnings("ignore")
B, S, E, H = 2, 8, 32, 2
D = E // H
TV = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
TAG = f"t{TV[0]}{TV[1]}"
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


class Block(torch.nn.Module):
    """Projections, one attention in form `form`, output projection + residual."""

    def __init__(self, form):
        super().__init__()
        torch.manual_seed(0)
        self.form = form
        self.q, self.k, self.v, self.o = (torch.nn.Linear(E, E) for _ in range(4))
        self.bias = torch.nn.Parameter(torch.randn(1, H, S, S) * 0.1)  # T5-style, over batch

    def split(self, t):  # [B,S,E] -> [B,H,S,D]
        return t.view(t.shape[0], t.shape[1], H, D).transpose(1, 2)

    def forward(self, x, mask):
        f = self.form
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        add = (1.0 - mask[:, None, None, :].to(x.dtype)) * -10000.0  # [B,1,1,S] additive
        if f == "div_addmask":  # BERT eager, torch 1.x transformers
            s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D) + add
            y = torch.matmul(torch.softmax(s, dim=-1), v)
        elif f == "mulq_mask_bss":  # scale on Q, mask [B,1,S,S]
            m2 = add.expand(x.shape[0], 1, S, S)
            s = torch.matmul(q * (1.0 / math.sqrt(D)), k.transpose(-1, -2)) + m2
            y = torch.matmul(F.softmax(s, dim=-1), v)
        elif f == "kT_bias_mask":  # K made transposed; bias [1,H,S,S] and mask, no scale (T5)
            kt = self.k(x).view(x.shape[0], S, H, D).permute(0, 2, 3, 1)
            s = torch.matmul(q, kt) + (self.bias + add)
            y = torch.matmul(F.softmax(s.float(), dim=-1).type_as(s), v)
        elif f == "two_adds":  # scores + bias + mask as two Adds
            s = torch.matmul(q, k.transpose(-1, -2)) * 0.25 + self.bias + add
            y = torch.matmul(F.softmax(s, dim=-1), v)
        elif f == "masked_fill":  # DistilBERT eager: masked_fill(mask == 0, min)
            s = torch.matmul(q / math.sqrt(D), k.transpose(2, 3))
            mm = (mask == 0).view(x.shape[0], 1, 1, S).expand_as(s)
            s = s.masked_fill(mm, torch.tensor(torch.finfo(s.dtype).min))
            y = torch.matmul(F.softmax(s, dim=-1), v)
        elif f == "causal_where":  # GPT-2 eager: where(causal, scores, min)
            s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D)
            causal = torch.tril(torch.ones(S, S, dtype=torch.bool))[None, None]
            s = torch.where(causal, s, torch.tensor(torch.finfo(s.dtype).min, dtype=s.dtype))
            y = torch.matmul(F.softmax(s + add, dim=-1), v)
        elif f == "sdpa_bool":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :].bool())
        elif f == "sdpa_float_bss":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=add.expand(x.shape[0], 1, S, S))
        elif f == "sdpa_nomask":
            y = F.scaled_dot_product_attention(q, k, v)
        elif f == "sdpa_causal":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif f == "sdpa_scale_bias":  # explicit scale, float bias over batch [1,H,S,S]
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias, scale=0.3)
        else:
            raise ValueError(f)
        y = y.transpose(1, 2).reshape(x.shape[0], S, E)
        return self.o(y) + x


class Mha(torch.nn.Module):
    """torch's nn.MultiheadAttention (fused in_proj, out_proj) in form `form`:
    mha_sf (sequence first, x [S, B, E]), mha_bf (batch_first, x [B, S, E]),
    with _kpm a key_padding_mask (mask == 0), with _causal a float attn_mask
    [S, S] of -inf above the diagonal; mha_sf_cross: cross attention to the
    first S - 3 positions (K and V from one packed [S', B, 2E] projection),
    need_weights left at its default (the weights unused). torch 1.13 exports these as rank-3
    [B*H, S, D] products (baddbmm when a mask is given); torch 2.x without
    need_weights through scaled_dot_product_attention."""

    def __init__(self, form):
        super().__init__()
        torch.manual_seed(0)
        self.form = form
        self.a = torch.nn.MultiheadAttention(E, H, batch_first="_bf" in form)

    def forward(self, x, mask):
        kpm = (mask == 0) if "_kpm" in self.form else None
        am = torch.triu(torch.full((S, S), float("-inf")), 1) if "_causal" in self.form else None
        if self.form == "mha_sf_cross":
            mem = x[: S - 3]
            return self.a(x, mem, mem)[0] + x
        return self.a(x, x, x, need_weights=False, key_padding_mask=kpm, attn_mask=am)[0] + x


class Mha2Written(torch.nn.Module):
    """torch 2.x's F.multi_head_attention_forward (need_weights=False) written
    out, as its TorchScript export reads: the packed projection split by
    view(S, B, 3, E).unsqueeze(0).transpose(0, -2).squeeze(-2)[i], the
    sequence-first head split viewed as [B, H, S, D], the exporter's
    scaled_dot_product_attention (Q and K^T each scaled by sqrt(1/sqrt(D))),
    permute(2, 0, 1, 3) back; mha2w_sf_kpm with the key padding mask as torch
    2.x merges it (a float [B*H, 1, S] viewed as [B, H, 1, S]), mha2w_bf batch
    first. (A torch 2.x run exports torch's own module as mha_* too.)"""

    def __init__(self, form):
        super().__init__()
        torch.manual_seed(0)
        self.form = form
        self.in_proj, self.out_proj = torch.nn.Linear(E, 3 * E), torch.nn.Linear(E, E)

    def forward(self, x, mask):
        y = x.transpose(1, 0) if "_bf" in self.form else x
        S_, B_ = y.shape[0], y.shape[1]
        p = self.in_proj(y).view(S_, B_, 3, E).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()
        q, k, v = (t.view(S_, B_ * H, D).transpose(0, 1) for t in (p[0], p[1], p[2]))
        am = None
        if "_kpm" in self.form:
            kp = (mask == 0).view(B_, 1, 1, S_).expand(-1, H, -1, -1).reshape(B_ * H, 1, S_)
            am = torch.zeros_like(kp, dtype=q.dtype).masked_fill_(kp, float("-inf")).view(B_, H, -1, S_)
        q, k, v = (t.view(B_, H, S_, D) for t in (q, k, v))
        sc = math.sqrt(1.0 / math.sqrt(D))
        w = torch.matmul(q * sc, k.transpose(-2, -1) * sc)
        o = torch.matmul(torch.softmax(w if am is None else w + am, dim=-1), v)
        o = self.out_proj(o.permute(2, 0, 1, 3).contiguous().view(B_ * S_, E)).view(S_, B_, E)
        return (o.transpose(1, 0) if "_bf" in self.form else o) + x


class EncoderStack(torch.nn.Module):
    """nn.TransformerEncoder of two nn.TransformerEncoderLayer (batch_first,
    dropout 0, GELU, norm_first for `enc_prenorm`) with a key padding mask."""

    def __init__(self, form):
        super().__init__()
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(E, H, 64, dropout=0.0, activation="gelu", batch_first=True,
                                                 norm_first=form == "enc_prenorm")
        kw = {"enable_nested_tensor": False} if "enable_nested_tensor" in torch.nn.TransformerEncoder.__init__.__code__.co_varnames else {}
        self.enc = torch.nn.TransformerEncoder(layer, 2, **kw)

    def forward(self, x, mask):
        return self.enc(x, src_key_padding_mask=(mask == 0))


def tv_vit():
    """torchvision's VisionTransformer (vit_b_16's class) at a tiny size: two
    encoder blocks of nn.MultiheadAttention(batch_first=True)."""
    from torchvision.models.vision_transformer import VisionTransformer
    torch.manual_seed(0)
    m = VisionTransformer(image_size=16, patch_size=8, num_layers=2, num_heads=H, hidden_dim=E, mlp_dim=64,
                          num_classes=10)
    torch.nn.init.normal_(m.heads.head.weight, std=0.5)  # torchvision makes it zeros: the output would be 0
    px = torch.randn(B, 3, 16, 16, generator=torch.Generator().manual_seed(3))
    return ("tv_vit", m, (px,), [("x", "f", (B, 3, 16, 16))], 2)


MHA_FORMS = ["mha_sf", "mha_sf_kpm", "mha_sf_causal", "mha_sf_cross", "mha_bf", "mha_bf_kpm_causal"]
MHA2W_FORMS = ["mha2w_sf", "mha2w_sf_kpm", "mha2w_bf"]
ENC_FORMS = ["enc_postnorm", "enc_prenorm"]

FORMS = ["div_addmask", "mulq_mask_bss", "kT_bias_mask", "two_adds", "masked_fill", "causal_where"]
SDPA_FORMS = ["sdpa_bool", "sdpa_float_bss", "sdpa_nomask", "sdpa_causal", "sdpa_scale_bias"]


def block_inputs():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, S, E, generator=g)
    mask = torch.ones(B, S, dtype=torch.int64)
    mask[1, 5:] = 0
    return (x, mask), [("x", "f", (B, S, E)), ("mask", "m", (B, S))]


def hf_models():
    """(name, model, inputs, specs, n_attention) of tiny Hugging Face models."""
    import transformers as tf
    out = []
    ids = torch.randint(0, 64, (B, S), generator=torch.Generator().manual_seed(2))
    am = torch.ones(B, S, dtype=torch.int64)
    am[1, 6:] = 0
    spec_txt = [("input_ids", "ids64", (B, S)), ("attention_mask", "m", (B, S))]

    class TextWrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    class ImgWrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, pixel_values):
            return self.m(pixel_values=pixel_values).last_hidden_state

    common = dict(vocab_size=64, hidden_size=E, num_hidden_layers=2, num_attention_heads=H,
                  intermediate_size=64, max_position_embeddings=16)
    for impl in ("sdpa", "eager"):
        torch.manual_seed(0)
        m = tf.BertModel(tf.BertConfig(**common, attn_implementation=impl), add_pooling_layer=False)
        out.append((f"hf_bert_{impl}", TextWrap(m), (ids, am), spec_txt, 2))
    torch.manual_seed(0)
    m = tf.DistilBertModel(tf.DistilBertConfig(vocab_size=64, dim=E, n_layers=2, n_heads=H, hidden_dim=64,
                                               max_position_embeddings=16))
    out.append(("hf_distilbert", TextWrap(m), (ids, am), spec_txt, 2))
    torch.manual_seed(0)
    m = tf.GPT2Model(tf.GPT2Config(vocab_size=64, n_embd=E, n_layer=2, n_head=H, n_positions=16))
    out.append(("hf_gpt2", TextWrap(m), (ids, am), spec_txt, 2))
    torch.manual_seed(0)
    m = tf.T5EncoderModel(tf.T5Config(vocab_size=64, d_model=E, d_kv=D, d_ff=64, num_layers=2, num_heads=H))
    out.append(("hf_t5enc", TextWrap(m), (ids, am), spec_txt, 2))
    torch.manual_seed(0)
    m = tf.ViTModel(tf.ViTConfig(image_size=16, patch_size=8, num_channels=3, hidden_size=E, num_hidden_layers=2,
                                 num_attention_heads=H, intermediate_size=64), add_pooling_layer=False)
    px = torch.randn(B, 3, 16, 16, generator=torch.Generator().manual_seed(3))
    out.append(("hf_vit", ImgWrap(m), (px,), [("pixel_values", "f", (B, 3, 16, 16))], 2))
    return out


def export(model, args, specs, path, dynamo, opset=14, seq_first=None):
    """seq_first: None for the hand-written blocks and Hugging Face models
    (exported under no_grad); True/False for torch's own attention modules."""
    names = [s[0] for s in specs]
    bdim = {n: 1 if seq_first is True and n in ("x", "y") else 0 for n in names + ["y"]}  # x [S, B, E]: batch is dim 1
    model.eval()
    # nn.MultiheadAttention / nn.TransformerEncoderLayer in eval mode under no_grad take
    # torch's fused fast path (aten::_native_multi_head_attention), which the
    # TorchScript exporter cannot export; exported with grad enabled (as
    # bench/model_zoo.py exports torchvision's ViT), they write the decomposed form.
    with (contextlib.nullcontext() if seq_first is not None else torch.no_grad()):
        if dynamo:
            torch.onnx.export(model, args, path, input_names=names, output_names=["y"], dynamo=True, external_data=False,
                              optimize=True, verbose=False)
        else:
            kw = {"dynamo": False} if TV >= (2, 5) else {}
            torch.onnx.export(model, args, path, input_names=names, output_names=["y"], opset_version=17
                              if TV >= (2, 0) else opset, dynamic_axes={n: {bdim[n]: "batch"} for n in names + ["y"]},
                              **kw)


def shrink(path):
    """drops doc strings and per-node metadata (the dynamo exporter's stack traces)"""
    import onnx
    m = onnx.load(path)
    m.doc_string = ""
    del m.metadata_props[:]
    for n in m.graph.node:
        n.doc_string = ""
        if hasattr(n, "metadata_props"):  # onnx >= 1.16
            del n.metadata_props[:]
    for v in list(m.graph.value_info):
        m.graph.value_info.remove(v)
    onnx.save(m, path)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    os.makedirs(out_dir, exist_ok=True)
    exporters = ["ts"] + (["dy"] if TV >= (2, 5) else [])
    cases = []
    bargs, bspecs = block_inputs()
    for f in FORMS + (SDPA_FORMS if HAS_SDPA else []):
        cases.append((f, Block(f), bargs, bspecs, 1))
    (x, mask), _ = block_inputs()
    for f in MHA_FORMS:  # sequence first: x [S, B, E]
        xf = x if "_bf" in f else x.transpose(0, 1).contiguous()
        cases.append((f, Mha(f), (xf, mask), [("x", "f", tuple(xf.shape)), ("mask", "m", (B, S))], 1))
    for f in MHA2W_FORMS:
        xf = x if "_bf" in f else x.transpose(0, 1).contiguous()
        cases.append((f, Mha2Written(f), (xf, mask), [("x", "f", tuple(xf.shape)), ("mask", "m", (B, S))], 1))
    for f in ENC_FORMS:
        cases.append((f, EncoderStack(f), bargs, bspecs, 2))
    try:
        cases.append(tv_vit())
    except ImportError as ex:
        print(f"no torchvision: {ex}")
    try:
        cases += hf_models()
    except ImportError as ex:
        print(f"no Hugging Face models: {ex}")
    lines = []
    for exp in exporters:
        for name, model, args, specs, n_attn in cases:
            fn = f"{TAG}_{exp}_{name}.onnx"
            try:
                new = name.startswith(("mha", "enc_", "tv_"))  # added later: at opset 17, as torchvision's zoo
                export(model, args, specs, os.path.join(out_dir, fn), exp == "dy", opset=17 if new else 14,
                       seq_first=name.startswith(("mha_sf", "mha2w_sf")) if new else None)
                shrink(os.path.join(out_dir, fn))
            except Exception as ex:  # report and go on: one form failing must not hide the others
                print(f"{fn}: export failed: {type(ex).__name__}: {str(ex)[:300]}")
                continue
            spec = ";".join(f"{n}:{k}:{'x'.join(str(d) for d in shp)}" for n, k, shp in specs)
            lines.append(f"{fn}\t{n_attn}\t{spec}")
            print(f"{fn}: {os.path.getsize(os.path.join(out_dir, fn))} bytes")
    man = os.path.join(out_dir, "manifest.txt")
    keep = []
    if os.path.exists(man):
        with open(man) as fh:
            keep = [ln.rstrip("\n") for ln in fh if ln.strip() and not ln.startswith(f"{TAG}_")]
    with open(man, "w") as fh:
        fh.write("\n".join(sorted(keep + lines)) + "\n")


if __name__ == "__main__":
    main()
