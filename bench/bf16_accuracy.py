#!/usr/bin/env python3
"""bf16 accuracy of kiln's CPU engines against PyTorch's own bf16, on the
test models of scripts/gen_models.py (ResNet-50, BERT-base).

For each model: the fp32 reference is the output stored by gen_models.py
(PyTorch fp32 on the stored inputs); kiln's bf16 engine is built and run with
the kiln CLI on the same inputs; PyTorch's bf16 is the same seeded model run
under torch.autocast("cpu", dtype=torch.bfloat16). Prints, per output,
max|y - ref| / max|ref| and the relative L2 error ||y - ref|| / ||ref||.

With --trained-weights DIR (the output of scripts/train_resnet50.py) it also
checks a trained ResNet-50: the network with those weights is exported to ONNX,
its fp32 reference is PyTorch fp32 on the CPU, and the inputs are held-out
samples of the training task (scripts/synthetic_images.py) and randn images,
each run at batch 1.

Run with Debian's python (torch 1.13):
  /usr/bin/python3 bench/bf16_accuracy.py --kiln build/kiln --models-dir models \
      [--trained-weights models/resnet50_trained] [--write BENCHMARKS.md]
"""
import argparse
import glob
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

SKIPPED = 77  # exit status when this CPU has no bf16 (ctest's SKIP_RETURN_CODE)
VARIANTS = {"resnet50": "resnet50_op17_fixed", "bert": "bert_op13_fixed"}


def errors(y, ref):
    y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    return np.abs(y - ref).max() / np.abs(ref).max(), np.linalg.norm(y - ref) / np.linalg.norm(ref)


def run_kiln(kiln, engine, inputs, outdir):
    """Runs a kiln engine on {input name: .npy path}; returns {output name: array}
    (the CLI writes one .npy per output into outdir, a folder of its own)."""
    cmd = [kiln, "run", engine, "-q", "--output-dir", outdir]
    for name, path in inputs.items():
        cmd += ["-i", "%s=%s" % (name, path)]
    subprocess.run(cmd, check=True)
    return {f[:-4]: np.load(os.path.join(outdir, f)) for f in os.listdir(outdir) if f.endswith(".npy")}


def trained_resnet50(args, here, tmp, emit):
    """Rows for the trained ResNet-50 of scripts/train_resnet50.py."""
    import torchvision
    sys.path.insert(0, os.path.join(here, "..", "scripts"))
    import synthetic_images
    import train_resnet50
    model = train_resnet50.load_weights(torchvision.models.resnet50(), args.trained_weights).eval()
    onnx_path = os.path.join(tmp, "resnet50_trained.onnx")
    g = torch.Generator().manual_seed(4242)  # not the training or held-out seeds of the trainer
    labels = torch.randint(0, synthetic_images.NUM_CLASSES, (args.samples,), generator=g)
    inputs = [("synthetic %d" % i, x[None]) for i, x in
              enumerate(synthetic_images.render(labels, synthetic_images.class_table(), 224, g))]
    inputs += [("randn %d" % i, torch.randn(1, 3, 224, 224, generator=g)) for i in range(2)]
    with torch.no_grad():
        torch.onnx.export(model, (inputs[0][1],), onnx_path, opset_version=17,
                          input_names=["input"], output_names=["output"])
    engine = os.path.join(tmp, "resnet50_trained.kiln")
    b = subprocess.run([args.kiln, "build", onnx_path, "--bf16", "-o", engine],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if b.returncode != 0 and "precision bf16 on the CPU needs" in b.stderr:
        emit("skipped: " + b.stderr.strip().splitlines()[-1])
        return None
    if b.returncode != 0:
        raise RuntimeError("kiln build --bf16 failed:\n" + b.stderr)
    worst = 0.0
    for i, (what, x) in enumerate(inputs):
        with torch.no_grad():
            ref = model(x).numpy()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                yt = model(x).float().numpy()
        path = os.path.join(tmp, "trained_input_%d.npy" % i)
        np.save(path, x.numpy())
        k = run_kiln(args.kiln, engine, {"input": path}, os.path.join(tmp, "trained_%d" % i))["output"]
        km, kl = errors(k, ref)
        tm, tl = errors(yt, ref)
        same = "yes" if int(k.argmax()) == int(ref.argmax()) else "NO"
        emit("| resnet50 trained | output, %s (top-1 same: %s) | %.4f | %.4f | %.4f | %.4f |"
             % (what, same, km, kl, tm, tl))
        worst = max(worst, km) if np.isfinite(km) else float("inf")  # NaN output fails the gate
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--models-dir", default="models")
    ap.add_argument("--models", default="resnet50,bert",
                    help="test models of gen_models.py to check (comma-separated; empty for none)")
    ap.add_argument("--trained-weights", default="",
                    help="directory of scripts/train_resnet50.py's weights: also check that network")
    ap.add_argument("--fail-above", type=float, default=0.0,
                    help="exit 1 if a trained-network row's kiln max abs / max|ref| passes this")
    ap.add_argument("--samples", type=int, default=4,
                    help="held-out synthetic inputs for the trained network (default 4)")
    ap.add_argument("--write", default="",
                    help="also write the table into section bf16_accuracy of this markdown file")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("gen_models", os.path.join(here, "..", "scripts", "gen_models.py"))
    gm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gm)
    tmp = tempfile.mkdtemp(prefix="kiln_bf16_")
    try:
        rc, lines = check_all(args, here, gm, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.write and rc == 0:
        write_section(args, here, lines)
    return rc


def write_section(args, here, lines):
    """Puts the table, with how it was made, in section bf16_accuracy of args.write."""
    import datetime
    sys.path.insert(0, here)
    import mdsection
    from cpu_vs_ort import cpu_model
    text = ["## bf16 accuracy of kiln's CPU engines", "",
            "Written by `bench/bf16_accuracy.py` from one real run (nothing edited by hand).", "",
            "- Date: %s (UTC)" % datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"),
            "- Machine: %s, %d cores visible" % (cpu_model(), os.cpu_count() or 0),
            "- kiln: `%s`; PyTorch %s" % (args.kiln, torch.__version__),
            "- Command: `%s`" % shlex.join(["/usr/bin/python3", "bench/bf16_accuracy.py"] + sys.argv[1:]), ""]
    text += lines
    text += ["",
             "Each row: a kiln engine built with `kiln build --bf16` and PyTorch's "
             "`torch.autocast(\"cpu\", dtype=torch.bfloat16)`, each against the fp32 model run by "
             "PyTorch, as max |y - ref| / max |ref| and ||y - ref|| / ||ref||. resnet50 and bert are "
             "the seeded random test models of `scripts/gen_models.py` on their stored inputs. "
             "\"resnet50 trained\" is torchvision's ResNet-50 with the weights of "
             "`scripts/train_resnet50.py` (trained on a GPU on the synthetic task of "
             "`scripts/synthetic_images.py`), on held-out samples of that task and on randn "
             "images, at batch 1."]
    if args.trained_weights:
        try:
            with open(os.path.join(args.trained_weights, "train.json")) as f:
                info = json.load(f)
            text.append("Its training: %d steps of batch %d at %dx%d, %.0f s, held-out top-1 %.3f, torch %s."
                        % (info["steps_done"], info["batch"], info["size"], info["size"],
                           info["seconds"], info["heldout_top1"], info["torch"]))
        except (OSError, ValueError, KeyError):
            pass
    mdsection.write_section(args.write, "bf16_accuracy", "\n".join(text) + "\n")


def check_all(args, here, gm, tmp):
    lines = []

    def emit(line):
        print(line, flush=True)
        lines.append(line)

    emit("| model | output | kiln bf16: max abs / max\\|ref\\| | kiln bf16: L2 rel | PyTorch autocast bf16: max abs / max\\|ref\\| | PyTorch bf16: L2 rel |")
    emit("|---|---|---|---|---|---|")
    for family in [f for f in args.models.split(",") if f]:
        d = os.path.join(args.models_dir, VARIANTS[family])
        engine = os.path.join(tmp, family + ".kiln")
        subprocess.run([args.kiln, "build", os.path.join(d, "model.onnx"), "--bf16", "-o", engine],
                       check=True, stdout=subprocess.DEVNULL)
        ins = {os.path.basename(f)[:-4]: f for f in sorted(glob.glob(os.path.join(d, "inputs", "*.npy")))}
        outs = run_kiln(args.kiln, engine, ins, os.path.join(tmp, family))
        model, specs, out_names = gm.make_family(family)
        model.eval()
        feeds = [torch.from_numpy(np.load(os.path.join(d, "inputs", n + ".npy"))) for n, _, _ in specs]
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            ys = model(*feeds)
        ys = ys if isinstance(ys, (tuple, list)) else [ys]
        for name, yt in zip(out_names, ys):
            ref = np.load(os.path.join(d, "outputs", name + ".npy"))
            k = outs[name]
            km, kl = errors(k, ref)
            tm, tl = errors(yt.float().numpy(), ref)
            emit("| %s | %s | %.4f | %.4f | %.4f | %.4f |" % (family, name, km, kl, tm, tl))
    if args.trained_weights:
        worst = trained_resnet50(args, here, tmp, emit)
        if worst is None:
            return SKIPPED, lines
        if args.fail_above and worst > args.fail_above:
            print("FAILED: the trained ResNet-50's bf16 engine is %.4f of max|fp32| away, over %g"
                  % (worst, args.fail_above))
            return 1, lines
    return 0, lines


if __name__ == "__main__":
    raise SystemExit(main())
