#!/usr/bin/python3
"""Generate kiln's real-model test suite: ONNX models plus PyTorch reference data.

Usage:
    /usr/bin/python3 scripts/gen_models.py OUTDIR [--only NAME[,NAME...]] [--force] [--list]

NAME is a model family (resnet50, mobilenetv2, bert, mlp, swin_t) or a full variant name
such as resnet50_op13_fixed. Needs Debian's torch 1.13, torchvision 0.14, onnx 1.12
and numpy; nothing is downloaded. Every model is randomly initialised from a fixed
seed, so the output is the same on every run (up to PyTorch's own determinism).

Layout of OUTDIR:
    manifest.json                       every generated variant (see below)
    <variant>/model.onnx
    <variant>/inputs/<input name>.npy   the inputs PyTorch was run on
    <variant>/outputs/<output name>.npy PyTorch's outputs for them

Variants: <family>_op<13|17>_<fixed|dyn>. "fixed" models have batch 1 baked in and
reference data at batch 1; "dyn" models have dim 0 of every input and output
dynamic (named "batch") and reference data at batch 2, with a suggested build
profile min/opt/max batch = 1/2/4 recorded in the manifest.

BERT-base is ~420 MB per ONNX file, so only two of its four variants are made by
default: bert_op13_fixed and bert_op17_dyn (between them they cover both opsets,
both batch modes, and LayerNormalization as a decomposed graph (13) and as the
opset-17 op). The other two can be asked for by name with --only.

swin_t (torchvision's Swin-T, windowed attention) is made only when asked for by
name: swin_t_op17_fixed and swin_t_op17_dyn (ctest models_swin_t). Its window
partition and reverse reshape through shapes computed at run time
(Shape/Gather/Concat) after in-place Dropouts, the pattern of a memory-plan bug
that once put it 7.7% off (issue 20).

manifest.json:
    {"version": 1, "models": [
       {"name": "resnet50_op13_fixed", "family": "resnet50", "opset": 13,
        "dynamic": false, "batch": 1, "dir": "resnet50_op13_fixed",
        "onnx": "resnet50_op13_fixed/model.onnx",
        "inputs":  [{"name": "input", "dtype": "float32", "shape": [1, 3, 224, 224],
                     "file": "resnet50_op13_fixed/inputs/input.npy",
                     "min": [...], "opt": [...], "max": [...]}],
        "outputs": [{"name": "output", "dtype": "float32", "shape": [1, 1000],
                     "file": "resnet50_op13_fixed/outputs/output.npy"}],
        "gen_seconds": 12.3}, ...]}
    (min/opt/max appear on the inputs of dynamic variants only.) Paths are
    relative to OUTDIR.
"""

import argparse
import json
import math
import os
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn

FAMILIES = ["mlp", "mobilenetv2", "resnet50", "bert", "swin_t"]
OPSETS = [13, 17]
DEFAULT_SKIP = {"bert_op13_dyn", "bert_op17_fixed",  # size: see the docstring
                "swin_t_op13_fixed", "swin_t_op13_dyn", "swin_t_op17_fixed", "swin_t_op17_dyn"}
SEEDS = {"mlp": 1001, "mobilenetv2": 1002, "resnet50": 1003, "bert": 1004, "swin_t": 1005}
DYN_BATCH = 2          # reference batch of dynamic variants
PROFILE_BATCH = (1, 2, 4)


# --------------------------------------------------------------------------- models

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                                 nn.Linear(256, 10))

    def forward(self, x):
        return self.net(x)


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def split(self, x):  # [B, S, H] -> [B, heads, S, head_dim]
        return x.view(x.size(0), x.size(1), self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x, add_mask):
        q = self.split(self.query(x))
        k = self.split(self.key(x))
        v = self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores + add_mask
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        ctx = ctx.view(ctx.size(0), ctx.size(1), self.heads * self.head_dim)
        return self.out(ctx)


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, ffn, eps):
        super().__init__()
        self.attn = BertSelfAttention(hidden, heads)
        self.ln1 = nn.LayerNorm(hidden, eps=eps)
        self.ffn_in = nn.Linear(hidden, ffn)
        self.act = nn.GELU()
        self.ffn_out = nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x, add_mask):
        x = self.ln1(x + self.attn(x, add_mask))
        return self.ln2(x + self.ffn_out(self.act(self.ffn_in(x))))


class BertEncoder(nn.Module):
    """BERT-base: post-LN encoder, 12 layers, hidden 768, 12 heads, FFN 3072, exact GELU."""

    def __init__(self, vocab=30522, hidden=768, layers=12, heads=12, ffn=3072, max_pos=512,
                 eps=1e-12):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_pos, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.ln = nn.LayerNorm(hidden, eps=eps)
        self.layers = nn.ModuleList([BertLayer(hidden, heads, ffn, eps) for _ in range(layers)])
        self.pool = nn.Linear(hidden, hidden)
        self.register_buffer("position_ids", torch.arange(max_pos).unsqueeze(0), persistent=False)
        # BERT's initialisation: N(0, 0.02) weights, zero biases, LayerNorm 1/0.
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
                if isinstance(m, nn.Linear):
                    nn.init.zeros_(m.bias)

    def forward(self, input_ids, attention_mask):
        seq = input_ids.size(1)
        x = self.word(input_ids) + self.position(self.position_ids[:, :seq]) + self.token_type.weight[0]
        x = self.ln(x)
        add_mask = (1.0 - attention_mask.to(x.dtype)).unsqueeze(1).unsqueeze(2) * -10000.0
        for layer in self.layers:
            x = layer(x, add_mask)
        pooled = torch.tanh(self.pool(x[:, 0]))
        return x, pooled


def calibrate_batchnorm(model, shape, batches, gen):
    """Gives BatchNorm layers realistic statistics: random affine parameters, then
    running mean/var measured on random inputs (train-mode forward passes), so that the
    exported BN (folded by the compiler) is far from the identity and activations stay
    well scaled through the network."""
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    with torch.no_grad():
        for bn in bns:
            bn.weight.copy_(torch.empty_like(bn.weight).uniform_(0.5, 1.5, generator=gen))
            bn.bias.copy_(torch.empty_like(bn.bias).uniform_(-0.2, 0.2, generator=gen))
            bn.reset_running_stats()
            bn.momentum = None  # cumulative average over the calibration batches
        model.train()
        for _ in range(batches):
            model(torch.randn(*shape, generator=gen))
    model.eval()


def make_family(family):
    """Returns (model, input specs [(name, dtype, per-sample shape)], output names)."""
    torch.manual_seed(SEEDS[family])
    gen = torch.Generator().manual_seed(SEEDS[family] + 7)
    if family == "mlp":
        model = MLP()
        return model, [("input", "float32", [784])], ["output"]
    if family in ("resnet50", "mobilenetv2"):
        import torchvision
        model = torchvision.models.resnet50() if family == "resnet50" else \
            torchvision.models.mobilenet_v2()
        calibrate_batchnorm(model, (4, 3, 224, 224), 2, gen)
        return model, [("input", "float32", [3, 224, 224])], ["output"]
    if family == "swin_t":
        import torchvision
        return torchvision.models.swin_t(), [("input", "float32", [3, 224, 224])], ["output"]
    if family == "bert":
        model = BertEncoder()
        return model, [("input_ids", "int64", [128]), ("attention_mask", "int64", [128])], \
            ["last_hidden_state", "pooler_output"]
    raise ValueError(family)


def make_inputs(family, specs, batch, seed):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for name, dtype, shape in specs:
        shape = [batch] + shape
        if family == "bert" and name == "input_ids":
            t = torch.randint(0, 30522, shape, generator=gen, dtype=torch.int64)
        elif family == "bert" and name == "attention_mask":
            t = torch.ones(shape, dtype=torch.int64)
            for b in range(batch):  # every sample after the first ends with padding
                pad = (37 * b) % shape[1]
                if pad:
                    t[b, shape[1] - pad:] = 0
        else:
            t = torch.randn(*shape, generator=gen)
        out.append(t)
    return out


# --------------------------------------------------------------------------- output

def save_npy(path, array):
    """np.save to a temporary file, then rename (no half-written references)."""
    d = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp_", suffix=".npy")
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, np.ascontiguousarray(array))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def export_variant(outdir, family, model, specs, out_names, opset, dynamic):
    name = "%s_op%d_%s" % (family, opset, "dyn" if dynamic else "fixed")
    t0 = time.time()
    vdir = os.path.join(outdir, name)
    os.makedirs(os.path.join(vdir, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(vdir, "outputs"), exist_ok=True)
    batch = DYN_BATCH if dynamic else 1
    inputs = make_inputs(family, specs, batch, SEEDS[family] * 10 + batch)
    in_names = [s[0] for s in specs]
    # Trace with a batch other than the reference one for dynamic models, so that a
    # batch size baked in by mistake shows up as a mismatch.
    trace_inputs = make_inputs(family, specs, 3, 5) if dynamic else inputs
    dynamic_axes = None
    if dynamic:
        dynamic_axes = {n: {0: "batch"} for n in in_names + out_names}
    onnx_path = os.path.join(vdir, "model.onnx")
    tmp_onnx = onnx_path + ".tmp"
    with torch.no_grad():
        torch.onnx.export(model, tuple(trace_inputs), tmp_onnx, opset_version=opset,
                          do_constant_folding=True, input_names=in_names,
                          output_names=out_names, dynamic_axes=dynamic_axes)
        ref = model(*inputs)
    os.replace(tmp_onnx, onnx_path)
    if isinstance(ref, torch.Tensor):
        ref = (ref,)
    entry = {"name": name, "family": family, "opset": opset, "dynamic": dynamic,
             "batch": batch, "dir": name, "onnx": name + "/model.onnx", "inputs": [],
             "outputs": []}
    for (iname, dtype, shape), t in zip(specs, inputs):
        rel = "%s/inputs/%s.npy" % (name, iname)
        save_npy(os.path.join(outdir, rel), t.numpy())
        e = {"name": iname, "dtype": dtype, "shape": list(t.shape), "file": rel}
        if dynamic:
            e["min"] = [PROFILE_BATCH[0]] + shape
            e["opt"] = [PROFILE_BATCH[1]] + shape
            e["max"] = [PROFILE_BATCH[2]] + shape
        entry["inputs"].append(e)
    for oname, t in zip(out_names, ref):
        rel = "%s/outputs/%s.npy" % (name, oname)
        a = t.numpy()
        save_npy(os.path.join(outdir, rel), a)
        entry["outputs"].append({"name": oname, "dtype": str(a.dtype), "shape": list(a.shape),
                                 "file": rel})
    entry["gen_seconds"] = round(time.time() - t0, 2)
    return entry


def all_variants():
    return ["%s_op%d_%s" % (f, o, k) for f in FAMILIES for o in OPSETS for k in ("fixed", "dyn")]


def select(only):
    if not only:
        return [v for v in all_variants() if v not in DEFAULT_SKIP]
    chosen = []
    for item in only.split(","):
        item = item.strip()
        if not item:
            continue
        if item in FAMILIES:
            chosen += [v for v in all_variants() if v.startswith(item + "_") and v not in DEFAULT_SKIP]
        elif item in all_variants():
            chosen.append(item)
        else:
            sys.exit("gen_models.py: error: unknown model '%s' (families: %s; variants: %s)"
                     % (item, ", ".join(FAMILIES), ", ".join(all_variants())))
    return [v for v in all_variants() if v in chosen]  # stable order, no duplicates


def load_manifest(path):
    try:
        with open(path) as f:
            m = json.load(f)
        if isinstance(m, dict) and isinstance(m.get("models"), list):
            return m
    except (OSError, ValueError):
        pass
    return {"version": 1, "models": []}


def complete(outdir, entry):
    files = [entry["onnx"]] + [x["file"] for x in entry["inputs"] + entry["outputs"]]
    return all(os.path.isfile(os.path.join(outdir, p)) for p in files)


def main():
    ap = argparse.ArgumentParser(description="Generate kiln's real-model tests (ONNX + reference .npy).")
    ap.add_argument("outdir")
    ap.add_argument("--only", default="", help="comma-separated families or variant names")
    ap.add_argument("--force", action="store_true", help="regenerate variants that already exist")
    ap.add_argument("--list", action="store_true", help="print the variants that would be made and exit")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    args = ap.parse_args()
    wanted = select(args.only)
    if args.list:
        print("\n".join(wanted))
        return 0
    torch.set_num_threads(max(1, args.threads))
    os.makedirs(args.outdir, exist_ok=True)
    mpath = os.path.join(args.outdir, "manifest.json")
    manifest = load_manifest(mpath)
    existing = {m["name"]: m for m in manifest["models"] if isinstance(m, dict) and "name" in m}
    t_all = time.time()
    for family in FAMILIES:
        todo = [v for v in wanted if v.startswith(family + "_")]
        if not args.force:
            todo = [v for v in todo if not (v in existing and complete(args.outdir, existing[v]))]
        if not todo:
            continue
        t0 = time.time()
        model, specs, out_names = make_family(family)
        model.eval()
        print("%-22s built in %.1fs" % (family, time.time() - t0), flush=True)
        for v in todo:
            opset = int(v.split("_op")[1].split("_")[0])
            entry = export_variant(args.outdir, family, model, specs, out_names, opset, v.endswith("_dyn"))
            existing[v] = entry
            size = os.path.getsize(os.path.join(args.outdir, entry["onnx"]))
            print("%-22s %6.1fs  %7.1f MB" % (v, entry["gen_seconds"], size / 1e6), flush=True)
            # Keep the manifest current after each variant, so an interrupted run loses nothing.
            manifest["models"] = [existing[n] for n in all_variants() if n in existing]
            tmp = mpath + ".tmp"
            with open(tmp, "w") as f:
                json.dump(manifest, f, indent=1)
                f.write("\n")
            os.replace(tmp, mpath)
        del model
    if not os.path.exists(mpath):
        with open(mpath, "w") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
    print("done in %.1fs: %d variants in %s" % (time.time() - t_all, len(wanted), mpath))
    return 0


if __name__ == "__main__":
    sys.exit(main())
