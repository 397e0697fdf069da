#!/usr/bin/env python3
"""bf16 accuracy of kiln's CPU engines against PyTorch's own bf16, on the
test models of scripts/gen_models.py (ResNet-50, BERT-base).

For each model: the fp32 reference is the output stored by gen_models.py
(PyTorch fp32 on the stored inputs); kiln's bf16 engine is built and run with
the kiln CLI on the same inputs; PyTorch's bf16 is the same seeded model run
under torch.autocast("cpu", dtype=torch.bfloat16). Prints, per output,
max|y - ref| / max|ref| and the relative L2 error ||y - ref|| / ||ref||.

Run with Debian's python (torch 1.13):
  /usr/bin/python3 bench/bf16_accuracy.py --kiln build/kiln --models-dir models
"""
import argparse
import glob
import importlib.util
import os
import subprocess
import tempfile

import numpy as np
import torch

VARIANTS = {"resnet50": "resnet50_op17_fixed", "bert": "bert_op13_fixed"}


def errors(y, ref):
    y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    return np.abs(y - ref).max() / np.abs(ref).max(), np.linalg.norm(y - ref) / np.linalg.norm(ref)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--models-dir", default="models")
    ap.add_argument("--models", default="resnet50,bert")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("gen_models", os.path.join(here, "..", "scripts", "gen_models.py"))
    gm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gm)
    tmp = tempfile.mkdtemp(prefix="kiln_bf16_")
    print("| model | output | kiln bf16: max abs / max\\|ref\\| | kiln bf16: L2 rel | PyTorch autocast bf16: max abs / max\\|ref\\| | PyTorch bf16: L2 rel |")
    print("|---|---|---|---|---|---|")
    for family in args.models.split(","):
        d = os.path.join(args.models_dir, VARIANTS[family])
        engine = os.path.join(tmp, family + ".kiln")
        subprocess.run([args.kiln, "build", os.path.join(d, "model.onnx"), "--bf16", "-o", engine],
                       check=True, stdout=subprocess.DEVNULL)
        ins = sorted(glob.glob(os.path.join(d, "inputs", "*.npy")))
        cmd = [args.kiln, "run", engine, "-q", "--output-dir", os.path.join(tmp, family)]
        for f in ins:
            cmd += ["-i", "%s=%s" % (os.path.basename(f)[:-4], f)]
        subprocess.run(cmd, check=True)
        model, specs, out_names = gm.make_family(family)
        model.eval()
        feeds = [torch.from_numpy(np.load(os.path.join(d, "inputs", n + ".npy"))) for n, _, _ in specs]
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            ys = model(*feeds)
        ys = ys if isinstance(ys, (tuple, list)) else [ys]
        for name, yt in zip(out_names, ys):
            ref = np.load(os.path.join(d, "outputs", name + ".npy"))
            k = np.load(os.path.join(tmp, family, name + ".npy"))
            km, kl = errors(k, ref)
            tm, tl = errors(yt.float().numpy(), ref)
            print("| %s | %s | %.4f | %.4f | %.4f | %.4f |" % (family, name, km, kl, tm, tl), flush=True)


if __name__ == "__main__":
    main()
