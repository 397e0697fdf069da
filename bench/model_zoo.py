#!/usr/bin/env python3
"""Model-zoo sweep: every model of torchvision's classification, segmentation, detection and
video zoos, exported to ONNX (opset 17), built with kiln, run, and compared with PyTorch.

Usage (Debian's /usr/bin/python3: torch 1.13 + torchvision; or torch 2.x, exported with
dynamo=False):
    python3 bench/model_zoo.py [--all | --ci | --models NAME,...] [--families F,...]
        [--variants fixed,dynamic] [--device cpu|cuda] [--precision fp32|fp16]
        [--kiln build/kiln] [--cache-dir /tmp/zoo] [--write docs/model-zoo.md]
        [--debug-arena] [--timeout S] [--max-params N] [--list]

For each model and variant:
  1. (a child process, so that each model's memory is given back and a crash is one row)
     torch.manual_seed(0), the model with random weights (weights=None and, where the
     builder has it, weights_backbone=None; nothing is downloaded); BatchNorm running
     statistics calibrated on random data (see calibrate()) so that outputs have a sane
     scale; inputs from a fixed seed; the fp32 reference computed with PyTorch on the CPU;
     the model exported with torch.onnx.export at opset 17 (torch 2.x: dynamo=False).
     Variants: "fixed" (batch 1, static shapes) and "dynamic" (dynamic_axes on the batch of
     the input and of every output; kiln's profile min 1 / opt 2 / max 4, run at batch 2).
     The ONNX file, the inputs and the reference are cached in --cache-dir/<model>/<variant>/
     (remade when the recipe, torch or torchvision changes), so reruns skip this step.
  2. `kiln build` (device, precision), `kiln run` on the same inputs, `kiln bench` for the
     latency (--bench-iterations runs after one warm-up, the engine's threads).
  3. Every output compared: max|kiln - ref| <= tol * max|ref| (fp32: --tol, 1e-4), integer
     outputs equal, and for classifiers (and video classifiers) top-1 equal per batch row
     (a row whose two classes are within tol * max|ref| of each other in the reference is a
     tie, not a failure). fp16 engines (--precision fp16, CUDA): tol per output is twice
     torch's own fp16 error there, max|model.half() on CUDA - ref| / max|ref|.
  Detection models return boxes/labels/scores whose number and order depend on the data
  (score thresholds, NMS, top-k): they are compared element by element when kiln finds the
  same number of detections; otherwise the row says so (not comparable).

Results are kept in --cache-dir/results-<device>-<precision>.json (a rerun of some models
replaces their rows); --write FILE puts the table of every row there into FILE's section
for the device and precision (other sections are kept; bench/mdsection.py). The exit
status is 1 when a row fails (--fail-on: which outcomes count; CI uses fail,error).

--debug-arena runs kiln with KILN_DEBUG_ARENA=1 (the runtime's arena-poison checks).
--max-params skips models with more parameters (default 400M: vit_h_14, regnet_y_128gf;
their export needs several times their 2.5 GB of weights) with that reason.
"""

import argparse
import datetime
import importlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPE = 4  # bump when what is cached (model recipe, inputs, export) changes
FAMILIES = ("classification", "segmentation", "detection", "video")
FAMILY_MODULES = {
    "classification": "torchvision.models",
    "segmentation": "torchvision.models.segmentation",
    "detection": "torchvision.models.detection",
    "video": "torchvision.models.video",
}
# CI's subset: one of each kind of network (residual, depthwise/squeeze-excite, channel
# shuffle, transformer, segmentation, 3-D video), both variants but the video one's (the
# slowest: ~35 s fixed on 2 cores). NAME or NAME:VARIANT.
CI_MODELS = ["resnet18", "mobilenet_v3_small", "efficientnet_b0", "shufflenet_v2_x0_5",
             "vit_b_32", "lraspp_mobilenet_v3_large", "r3d_18:fixed"]
# per-model input (C, H, W) or (C, T, H, W) without the batch; default by family
INPUT_SHAPES = {
    "inception_v3": (3, 299, 299),
    "mvit_v1_b": (3, 16, 224, 224),
    "mvit_v2_s": (3, 16, 224, 224),
    "s3d": (3, 16, 224, 224),
}
FAMILY_SHAPES = {
    "classification": (3, 224, 224),
    "segmentation": (3, 224, 224),
    "detection": (3, 320, 320),
    "video": (3, 16, 112, 112),
}
PRECISION_FLAGS = {"fp32": [], "fp16": ["--fp16"]}


# --------------------------------------------------------------------------- model recipe
# (runs in the child process, with torch)

def family_of(name):
    import torchvision.models as tvm
    for fam in FAMILIES:
        if name in tvm.list_models(importlib.import_module(FAMILY_MODULES[fam])):
            return fam
    return None


def zoo_models(families):
    import torchvision.models as tvm
    out = []
    for fam in families:
        for name in sorted(tvm.list_models(importlib.import_module(FAMILY_MODULES[fam]))):
            out.append((name, fam))
    return out


def input_shape(name, family):
    return INPUT_SHAPES.get(name, FAMILY_SHAPES[family])


def build_model(name, family):
    import inspect
    import torchvision.models as tvm
    builder = tvm.get_model_builder(name)
    kwargs = {"weights": None}
    if "weights_backbone" in inspect.signature(builder).parameters:
        kwargs["weights_backbone"] = None
    if family == "detection":
        side = FAMILY_SHAPES["detection"][1]
        if not name.startswith("ssd"):
            kwargs.update(min_size=side, max_size=side)
        # Random weights give scores near 1/num_classes (R-CNN) or the prior 0.01 (RetinaNet,
        # FCOS), below the default thresholds: without these no detection is left to compare.
        if "rcnn" in name:
            kwargs["box_score_thresh"] = 0.0
        elif name.startswith(("retinanet", "fcos")):
            kwargs["score_thresh"] = 0.0
    model = builder(**kwargs)
    # Zero-initialized weight matrices (ViT's classifier head) would make the outputs all
    # zeros and every comparison empty: they get small random values instead.
    import torch
    zeroed = 0
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("weight") and p.dim() >= 2 and not bool(p.any()):
                torch.nn.init.trunc_normal_(p, std=0.02)
                zeroed += 1
    model.zoo_reinitialized = zeroed
    return model


class Flat(object):
    """Names the outputs of a model and flattens dicts / lists of dicts into a tuple."""

    @staticmethod
    def names(out):
        if isinstance(out, dict):
            return list(out.keys())
        if isinstance(out, (list, tuple)) and out and isinstance(out[0], dict):
            return [k for d in out for k in d.keys()]
        if isinstance(out, (list, tuple)):
            return ["output%d" % i for i in range(len(out))]
        return ["logits"]

    @staticmethod
    def values(out):
        if isinstance(out, dict):
            return tuple(out.values())
        if isinstance(out, (list, tuple)) and out and isinstance(out[0], dict):
            return tuple(v for d in out for v in d.values())
        if isinstance(out, (list, tuple)):
            return tuple(out)
        return (out,)


def wrapped(model, family):
    import torch

    class Wrapper(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            out = self.m([x] if family == "detection" else x)
            return Flat.values(out)

    return Wrapper(model).eval()


def calibrate(model, family, shape, gen):
    """A freshly initialized torchvision model has BatchNorm running statistics 0/1 whatever
    its activations are, so deep networks' outputs shrink or blow up (MobileNetV2: ~1e-9)
    and errors relative to them mean little. As scripts/gpu_check.sh's calibrated(): the
    statistics are estimated on random batches (cumulative average), here with only the
    BatchNorm layers in training mode (the rest in eval mode: no dropout, and detection
    models run their inference path without targets)."""
    import torch
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return 0
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
        bn.train()
    with torch.no_grad():
        for _ in range(2):
            if family == "detection":
                model([torch.randn(shape, generator=gen) for _ in range(2)])
            else:
                model(torch.randn((4,) + shape, generator=gen))
    model.eval()
    return len(bns)


def register_faithful_roi_align():
    """torchvision 0.14 exports roi_align with an opset-11 symbolic that leaves out
    coordinate_transformation_mode; from opset 16 on, RoiAlign's default is "half_pixel"
    (torchvision's aligned=True), so the R-CNN models (aligned=False) export a different
    computation (ONNX Runtime and kiln agree with each other on it, not with PyTorch). This
    symbolic, registered for opset 16, names the mode that `aligned` means, as later
    torchvision releases do."""
    import torch
    import torchvision.ops._register_onnx_ops as tv_onnx
    if any(hasattr(tv_onnx, a) for a in ("_ONNX_OPSET_VERSION_16", "_onnx_opset_version_16")):
        return  # torchvision >= 0.15 registers such a symbolic itself
    from torch.onnx import register_custom_op_symbolic, symbolic_helper

    def const(v):
        return torch.tensor(v, dtype=torch.long)

    @symbolic_helper.parse_args("v", "v", "f", "i", "i", "i", "i")
    def roi_align(g, x, rois, spatial_scale, pooled_h, pooled_w, sampling_ratio, aligned):
        idx = g.op("Gather", rois, g.op("Constant", value_t=const([0])), axis_i=1)
        idx = g.op("Cast", g.op("Squeeze", idx, g.op("Constant", value_t=const([1]))), to_i=7)
        boxes = g.op("Gather", rois, g.op("Constant", value_t=const([1, 2, 3, 4])), axis_i=1)
        return g.op("RoiAlign", x, boxes, idx, spatial_scale_f=spatial_scale,
                    output_height_i=pooled_h, output_width_i=pooled_w,
                    sampling_ratio_i=max(sampling_ratio, 0),  # < 0: adaptive, ONNX's 0
                    coordinate_transformation_mode_s="half_pixel" if aligned else "output_half_pixel")

    register_custom_op_symbolic("torchvision::roi_align", roi_align, 16)


def register_zero_symbolic():
    """torch 1.13's exporter has no symbolic for aten::zero, which Swin V2's attention calls
    (qkv_bias[k].zero_(): the key bias is zeroed on every call), so swin_v2_* do not export.
    This one gives zeros of the input's shape and type: CastLike(ConstantOfShape(Shape(x)), x)
    (ONNX Runtime then matches PyTorch: swin_v2_t 2.6e-6)."""
    from torch.onnx import register_custom_op_symbolic

    def zero(g, x):
        return g.op("CastLike", g.op("ConstantOfShape", g.op("Shape", x)), x)

    register_custom_op_symbolic("aten::zero", zero, 9)


def to_numpy(outs):
    return [o.detach().cpu().numpy() for o in outs]


def prepare(args):
    """The child: model, calibration, inputs, reference, ONNX export -> the case folder."""
    import torch
    import torchvision
    name, variant, case = args._prepare, args._variant, args._case
    os.makedirs(case, exist_ok=True)
    meta = {"recipe": RECIPE, "torch": torch.__version__, "torchvision": torchvision.__version__,
            "model": name, "variant": variant}

    def done(**kw):
        meta.update(kw)
        with open(os.path.join(case, "meta.json.tmp"), "w") as f:
            json.dump(meta, f, indent=1)
        os.replace(os.path.join(case, "meta.json.tmp"), os.path.join(case, "meta.json"))
        return 0

    family = family_of(name)
    if family is None:
        return done(error="not a model of torchvision's classification, segmentation, "
                          "detection or video zoos")
    meta["family"] = family
    if family == "detection" and variant == "dynamic":
        return done(skip="n/a: a detection model takes a list of images, whose length the "
                         "export fixes; only the fixed variant is made")
    shape = input_shape(name, family)
    torch.manual_seed(0)
    model = build_model(name, family).eval()
    nparams = sum(p.numel() for p in model.parameters())
    meta["params"] = nparams
    meta["zero_weights_reinitialized"] = model.zoo_reinitialized
    if nparams > args.max_params:
        return done(skip="%.0fM parameters (over --max-params %.0fM): export needs several "
                         "times the %.1f GB of weights" % (nparams / 1e6, args.max_params / 1e6,
                                                          nparams * 4 / 1e9))
    gen = torch.Generator().manual_seed(1)
    meta["batchnorms_calibrated"] = calibrate(model, family, shape, gen)
    if family == "detection":
        batch = None
        x = torch.randn(shape, generator=torch.Generator().manual_seed(2))
    else:
        batch = 1 if variant == "fixed" else 2
        x = torch.randn((batch,) + shape, generator=torch.Generator().manual_seed(2))
    w = wrapped(model, family)
    with torch.no_grad():
        raw = model([x] if family == "detection" else x)
        outs = Flat.values(raw)
    out_names = Flat.names(raw)
    np.save(os.path.join(case, "x.npy"), x.numpy())
    np.savez(os.path.join(case, "ref.npz"), **dict(zip(out_names, to_numpy(outs))))
    kw = {}
    if int(torch.__version__.split(".")[0]) >= 2:
        kw["dynamo"] = False
    if variant == "dynamic":
        kw["dynamic_axes"] = {n: {0: "batch"} for n in ["x"] + out_names}
    onnx_path = os.path.join(case, "model.onnx")
    register_faithful_roi_align()
    register_zero_symbolic()
    t0 = time.perf_counter()
    try:
        torch.onnx.export(w, (x,), onnx_path + ".tmp", opset_version=17, input_names=["x"],
                          output_names=out_names, **kw)
    except Exception as e:  # noqa: BLE001 - an exporter failure is this row's result
        msg = str(e).strip().splitlines()
        return done(error="torch.onnx.export: %s: %s" % (type(e).__name__, msg[0][:300] if msg else ""))
    export_s = time.perf_counter() - t0
    os.replace(onnx_path + ".tmp", onnx_path)
    try:
        import onnx
        m = onnx.load(onnx_path, load_external_data=False)
        ops = {}
        for node in m.graph.node:
            ops[node.op_type] = ops.get(node.op_type, 0) + 1
        del m
    except ImportError:
        ops = None  # no op counts without the onnx package
    return done(export_s=export_s, batch=batch, input_shape=list(x.shape), outputs=out_names,
                nodes=sum(ops.values()) if ops else None, ops=ops)


def prepare_other(args):
    """The child for another reference of a cached case, made from the same model (built
    again from the seed; its fp32 outputs must match the cached reference):
      --_other fp16: torch's own fp16 outputs (model.half() on --_device), for fp16 engines;
      --_other fp64: float64 outputs on the CPU, for telling kiln's error from the fp32
                     rounding error of PyTorch's own reference (see fp64_verdict)."""
    import torch
    with open(os.path.join(args._case, "meta.json")) as f:
        meta = json.load(f)
    name, family = meta["model"], meta["family"]
    torch.manual_seed(0)
    model = build_model(name, family).eval()
    calibrate(model, family, input_shape(name, family), torch.Generator().manual_seed(1))
    x = torch.from_numpy(np.load(os.path.join(args._case, "x.npy")))
    ref = np.load(os.path.join(args._case, "ref.npz"))
    with torch.no_grad():
        again = to_numpy(Flat.values(model([x] if family == "detection" else x)))
        for k, v in zip(ref.files, again):
            if v.shape != ref[k].shape or rel_err(v, ref[k]) > 1e-5:
                raise SystemExit("model_zoo: %s: the model made again differs from the cached "
                                 "one; remove %s" % (name, args._case))
        if args._other == "fp16":
            model, x = model.half().to(args._device), x.half().to(args._device)
        else:
            model, x = model.double(), x.double()
        outs = Flat.values(model([x] if family == "detection" else x))
        outs = [o.to(torch.float32 if args._other == "fp16" else torch.float64)
                if o.is_floating_point() else o for o in outs]
    np.savez(os.path.join(args._case, "torch_%s.npz" % args._other),
             **dict(zip(ref.files, to_numpy(outs))))
    return 0


# --------------------------------------------------------------------------- comparison

def rel_err(got, ref):
    """max|got - ref| / max|ref| (max|got - ref| when ref is all zeros)."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if ref.size == 0:
        return 0.0
    if not np.all(np.isfinite(got)):
        return float("inf")
    d = float(np.max(np.abs(got - ref)))
    s = float(np.max(np.abs(ref)))
    return d / s if s > 0 else d


def top1(got, ref, tol):
    """(agree, detail): argmax of each row equal, or a tie in the reference."""
    g = got.reshape(got.shape[0], -1).argmax(1)
    r = ref.reshape(ref.shape[0], -1).argmax(1)
    scale = float(np.max(np.abs(ref)))
    for i, (a, b) in enumerate(zip(g, r)):
        if a != b:
            row = ref.reshape(ref.shape[0], -1)[i]
            if abs(float(row[b]) - float(row[a])) > tol * scale:
                return False, "top-1 differs in row %d: class %d vs %d" % (i, a, b)
    return True, ""


MATCH_TOL = 1e-2  # detections are matched by label and box within this of max|boxes|


def match_detections(outs, ref):
    """kiln's detections matched one to one with torch's: the same label and the nearest box
    within MATCH_TOL of max|boxes| (the values are compared afterwards, at the tolerance).
    Detections whose scores tie to a few ulps come out of top-k and NMS in either order, so
    kiln's may be a permutation of torch's. Returns (perm, unmatched torch rows): kiln's
    row perm[i] is torch's row i (-1: none)."""
    rb, rl, kb, kl = ref["boxes"], ref["labels"], outs["boxes"], outs["labels"]
    bt = MATCH_TOL * max(float(np.max(np.abs(rb))), 1e-30)
    free = np.ones(len(kb), dtype=bool)
    perm, missing = [], []
    for i in range(len(rb)):
        d = np.max(np.abs(kb - rb[i]), axis=1)
        cand = np.where(free & (kl == rl[i]) & (d <= bt))[0]
        if len(cand) == 0:
            missing.append(i)
            perm.append(-1)
            continue
        j = int(cand[np.argmin(d[cand])])
        free[j] = False
        perm.append(j)
    return perm, missing


def aligned_detections(outs, ref):
    """(outs with its rows in torch's order, how many moved), or (None, why)."""
    if any(k not in outs or outs[k].shape != ref[k].shape for k in ref.files):
        return None, "the number of detections differs"
    perm, missing = match_detections(outs, ref)
    if missing:
        return None, "%d of %d detections have no match (label, box within %g)" % (
            len(missing), len(perm), MATCH_TOL)
    return {k: outs[k][perm] for k in ref.files}, sum(1 for i, j in enumerate(perm) if i != j)


def compare_detections(outs, ref, tols):
    """Detection outputs (boxes, labels, scores[, masks, keypoints...], one row per
    detection): element by element, else as a set (see match_detections)."""
    for k in ref.files:
        if k not in outs:
            return "error", None, "kiln gave no output %r" % k
        if outs[k].shape != ref[k].shape:
            return "incomparable", None, (
                "data-dependent: %s has shape %s, torch %s (the number of detections differs)"
                % (k, list(outs[k].shape), list(ref[k].shape)))
    st, worst, why = compare("", outs, ref, tols)
    if st == "pass":
        return st, worst, why
    perm, missing = match_detections(outs, ref)
    n = len(perm)
    if missing:
        # a different detection at the end of the list: a tie at the top-k boundary
        low = float(np.min(ref["scores"])) + tols["scores"] * float(np.max(np.abs(ref["scores"])))
        if all(ref["scores"][i] <= low for i in missing):
            return "incomparable", None, (
                "data-dependent: %d of %d detections differ, all with the lowest score (a tie "
                "at the top-k / detections-per-image boundary)" % (len(missing), n))
        return "fail", None, ("%d of %d detections of torch have no match in kiln's (label "
                              "and box within %g); first: row %d"
                              % (len(missing), n, MATCH_TOL, missing[0]))
    moved = sum(1 for i, j in enumerate(perm) if i != j)
    st, worst, why = compare("", {k: outs[k][perm] for k in ref.files}, ref, tols)
    return st, worst, (why + "; " if why else "") + (
        "%d of %d detections in another order (their scores tie within the tolerance)"
        % (moved, n))


def compare(family, outs, ref, tols):
    """Returns (status, worst error, reason)."""
    worst, reasons = 0.0, []
    if family == "detection":
        if all(ref[k].size == 0 for k in ref.files):
            return "incomparable", None, "degenerate: torch finds no detection"
        if all(k in ref.files for k in ("boxes", "labels", "scores")):
            return compare_detections(outs, ref, tols)
    for name in ref.files:
        r = ref[name]
        if name not in outs:
            return "error", None, "kiln gave no output %r" % name
        g = outs[name]
        if g.shape != r.shape:
            if family == "detection":
                return "incomparable", None, (
                    "data-dependent: %s has shape %s, torch %s (the number of detections "
                    "differs)" % (name, list(g.shape), list(r.shape)))
            return "fail", None, "%s: shape %s, torch %s" % (name, list(g.shape), list(r.shape))
        if not np.issubdtype(r.dtype, np.floating):
            if not np.array_equal(g, r):
                if family == "detection":
                    return "incomparable", None, (
                        "data-dependent: %s differ in %d of %d places (the order of the "
                        "detections)" % (name, int(np.sum(g != r)), r.size))
                reasons.append("%s: integer values differ" % name)
            continue
        if r.size > 1 and float(np.max(r)) == float(np.min(r)):
            return "incomparable", None, "degenerate: torch's %s is constant (%g)" % (
                name, float(r.flat[0]))
        e = rel_err(g, r)
        worst = max(worst, e)
        if not e <= tols[name]:
            reasons.append("%s: error %.2e > %.1e" % (name, e, tols[name]))
    if family in ("classification", "video") and "logits" in ref.files and "logits" in outs:
        ok, why = top1(outs["logits"], ref["logits"], tols["logits"])
        if not ok:
            reasons.append(why)
    return ("fail" if reasons else "pass"), worst, "; ".join(reasons)


def fp64_verdict(family, outs, ref, ref64, tol):
    """For a row that failed on numbers alone: kiln and PyTorch's fp32 reference both
    against float64. Deep networks with random weights (ResNet-101/152, DeepLabV3) are
    ill-conditioned enough that PyTorch's own fp32 output is more than 1e-4 off float64,
    and then so is any other correct fp32 implementation. Such a row passes ("pass-fp64")
    when every float output of kiln is within max(tol, 2 x PyTorch's fp32 error) of float64
    and top-1 equals float64's (ties within that bound). Returns (status, detail, worst
    kiln error vs fp64, worst torch fp32 error vs fp64)."""
    worst_k, worst_t, bad = 0.0, 0.0, []
    bounds = {}
    for name in ref.files:
        if not np.issubdtype(ref[name].dtype, np.floating):
            continue
        t = rel_err(ref[name], ref64[name])
        e = rel_err(outs[name], ref64[name])
        bounds[name] = max(tol, 2.0 * t)
        worst_k, worst_t = max(worst_k, e), max(worst_t, t)
        if not e <= bounds[name]:
            bad.append("%s: %.2e vs fp64, %.1fx PyTorch fp32's %.2e" % (name, e, e / t if t else
                                                                        float("inf"), t))
    if family in ("classification", "video") and "logits" in ref.files:
        ok, why = top1(outs["logits"], ref64["logits"], bounds["logits"])
        if not ok:
            bad.append(why + " (against fp64)")
    detail = "; ".join(bad) if bad else (
        "against fp64: kiln %.2e, PyTorch fp32 %.2e (its own rounding error is over %.0e)"
        % (worst_k, worst_t, tol))
    return ("fail" if bad else "pass-fp64"), detail, worst_k, worst_t


# --------------------------------------------------------------------------- kiln steps

def run_cmd(cmd, timeout, env=None):
    """(returncode or 'timeout', stdout, stderr, seconds)"""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        return p.returncode, p.stdout, p.stderr, time.perf_counter() - t0
    except subprocess.TimeoutExpired as e:
        def s(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        return "timeout", s(e.stdout), s(e.stderr), time.perf_counter() - t0


def last_line(text):
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1][:400] if lines else ""


def kiln_failure(stage, rc, err):
    """The status and reason of a failed kiln build/run: unsupported ops are told apart."""
    if rc == "timeout":
        return "error", "kiln %s: timed out" % stage
    msg = last_line(err)
    if rc < 0:
        return "error", "kiln %s: killed by signal %d. %s" % (stage, -rc, msg)
    # (the CLI prints kiln's message, not the status: KILN_ERR_UNSUPPORTED's messages say so)
    if re.search(r"unsupported|not supported|supports only|more than \d+ inputs", msg, re.I):
        return "unsupported", "kiln %s: %s" % (stage, msg)
    return "error", "kiln %s: %s" % (stage, msg)


def case_dir(args, name, variant):
    return os.path.join(args.cache_dir, name, variant)


def cached_meta(case, versions, fresh=False):
    path = os.path.join(case, "meta.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    if (meta.get("recipe"), meta.get("torch"), meta.get("torchvision")) != \
            (RECIPE, versions[0], versions[1]):
        return None
    if "error" in meta and not fresh:
        return None  # an export that failed is tried again (quick; the recipe may have changed)
    if "skip" not in meta and not os.path.exists(os.path.join(case, "model.onnx")):
        return None
    return meta


def child(args, extra, timeout):
    cmd = [sys.executable, "-W", "ignore", os.path.abspath(__file__), "--cache-dir", args.cache_dir,
           "--max-params", str(args.max_params)] + extra
    return run_cmd(cmd, timeout)


def other_reference(args, case, kind):
    """torch_<kind>.npz of the case (made by a child the first time), or why not (a str)."""
    path = os.path.join(case, "torch_%s.npz" % kind)
    if not os.path.exists(path):
        rc, out, err, secs = child(args, ["--_other", kind, "--_case", case,
                                          "--_device", args.device], args.timeout)
        if rc != 0 or not os.path.exists(path):
            return "timed out" if rc == "timeout" else last_line(err) or "exit %s" % rc
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def sweep_case(args, name, variant, versions, env):
    row = {"model": name, "variant": variant, "device": args.device, "precision": args.precision}
    case = case_dir(args, name, variant)
    meta = cached_meta(case, versions)
    if meta is None:
        shutil.rmtree(case, ignore_errors=True)
        rc, out, err, secs = child(args, ["--_prepare", name, "--_variant", variant,
                                          "--_case", case], args.timeout)
        meta = cached_meta(case, versions, fresh=True)
        if meta is None:
            row.update(status="export-fail", reason="model/export step: %s" % (
                "timed out" if rc == "timeout" else "exit %s: %s" % (rc, last_line(err))))
            return row
    row.update({k: meta.get(k) for k in ("family", "params", "nodes", "ops", "export_s",
                                         "input_shape", "batch")})
    if "skip" in meta:
        row.update(status="skipped", reason=meta["skip"])
        return row
    if "error" in meta:
        row.update(status="export-fail", reason=meta["error"])
        return row
    family = meta["family"]
    ref = np.load(os.path.join(case, "ref.npz"))
    if args.precision == "fp16":
        tref = other_reference(args, case, "fp16")
        if isinstance(tref, str):
            row.update(status="error", reason="torch fp16 reference: " + tref)
            return row
        tols, terr = {}, 0.0
        for k in ref.files:
            e = rel_err(tref[k], ref[k]) if tref[k].shape == ref[k].shape else float("inf")
            tols[k] = 2.0 * e
            if np.issubdtype(ref[k].dtype, np.floating):
                terr = max(terr, e)
        row["torch_fp16_error"] = terr
    else:
        tols = {k: args.tol for k in ref.files}
    # build
    shape = meta["input_shape"]
    engine = os.path.join(case, "%s_%s.kiln" % (args.device.replace(":", ""), args.precision))
    if variant == "dynamic":
        dims = lambda b: "x:" + "x".join(str(d) for d in [b] + shape[1:])  # noqa: E731
        prof = ["--min-shapes", dims(1), "--opt-shapes", dims(2), "--max-shapes", dims(4)]
    else:
        prof = ["--shapes", "x:" + "x".join(str(d) for d in shape)]
    cmd = [args.kiln, "build", os.path.join(case, "model.onnx"), "-o", engine,
           "--device", args.device] + PRECISION_FLAGS[args.precision] + prof
    if args.timing_cache:
        cmd += ["--timing-cache", args.timing_cache]
    rc, out, err, secs = run_cmd(cmd, args.timeout, env)
    if rc != 0:
        st, why = kiln_failure("build", rc, err)
        row.update(status=st, reason=why)
        return row
    m = re.search(r"build ([0-9.]+) s", out)
    row["build_s"] = float(m.group(1)) if m else secs
    try:
        outdir = os.path.join(case, "out_%s_%s" % (args.device.replace(":", ""), args.precision))
        shutil.rmtree(outdir, ignore_errors=True)
        xin = ["--input", "x=" + os.path.join(case, "x.npy")]
        rc, out, err, secs = run_cmd([args.kiln, "run", engine, "-q", "--output-dir", outdir] + xin,
                                     args.timeout, env)
        if rc != 0:
            st, why = kiln_failure("run", rc, err)
            row.update(status=st, reason=why)
            return row
        outs = {}
        for k in ref.files:
            p = os.path.join(outdir, re.sub(r"[^A-Za-z0-9._-]", "_", k) + ".npy")
            if os.path.exists(p):
                outs[k] = np.load(p)
        shutil.rmtree(outdir, ignore_errors=True)
        st, worst, why = compare(family, outs, ref, tols)
        row.update(status=st, error=worst, reason=why)
        if st == "fail" and worst is not None and args.precision == "fp32" and \
                all(outs[k].shape == ref[k].shape for k in ref.files):
            # numbers only: is it kiln, or the fp32 reference's own rounding error?
            ref64 = other_reference(args, case, "fp64")
            if not isinstance(ref64, str) and family == "detection":
                outs, _ = aligned_detections(outs, ref)  # (compare() matched them already)
                ref64, why64 = aligned_detections(ref64, ref)
                ref64 = why64 if ref64 is None else ref64
            if isinstance(ref64, str):
                row["reason"] = why + "; fp64 reference: " + ref64
            else:
                st, detail, e64, t64 = fp64_verdict(family, outs, ref, ref64, args.tol)
                row.update(status=st, error64=e64, torch_error64=t64,
                           reason=detail if st == "pass-fp64" else why + "; " + detail)
        if args.bench_iterations > 0:
            rc, out, err, secs = run_cmd([args.kiln, "bench", engine, "--json", "--warmup", "1",
                                          "--iterations", str(args.bench_iterations)] + xin,
                                         args.timeout, env)
            if rc == 0:
                row["latency_ms"] = json.loads(out)["latency_ms"]["p50"]
            else:
                row["reason"] = (row["reason"] + "; " if row["reason"] else "") + \
                    "bench: " + kiln_failure("bench", rc, err)[1]
                if row["status"] in ("pass", "pass-fp64"):
                    row["status"] = "error"
    finally:
        if not args.keep_engines and os.path.exists(engine):
            os.remove(engine)
    return row


# --------------------------------------------------------------------------- report

STATUS_ORDER = ["pass", "pass-fp64", "fail", "error", "unsupported", "incomparable", "export-fail",
                "skipped"]


def fmt(v, f):
    return "" if v is None else f % v


def table(rows, args, header):
    lines = [header, ""]
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    lines.append("Rows: %d; %s." % (len(rows), ", ".join(
        "%s %d" % (s, counts[s]) for s in STATUS_ORDER if s in counts)))
    lines.append("")
    err_col = "error (max abs / max\\|ref\\|)" if args.precision == "fp32" else \
        "error (kiln; torch fp16)"
    lines.append("| model | family | variant | input | ONNX nodes | export s | build s | latency ms "
                 "| %s | result | kiln |" % err_col)
    lines.append("|---|---|---|---|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        inp = "x".join(str(d) for d in r.get("input_shape") or [])
        err = fmt(r.get("error"), "%.1e")
        if r.get("error64") is not None:
            err += " (fp64: %.1e; torch %.1e)" % (r["error64"], r["torch_error64"])
        if r.get("torch_fp16_error") is not None:
            err += "; %.1e" % r["torch_fp16_error"]
        res = r["status"] if r["status"] == "pass" else ("%s: %s" if r["status"] == "pass-fp64"
                                                          else "**%s**: %s") % (
            r["status"], (r.get("reason") or "").replace("|", "\\|"))
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["model"], r.get("family") or "", r["variant"], inp, fmt(r.get("nodes"), "%d"),
            fmt(r.get("export_s"), "%.1f"), fmt(r.get("build_s"), "%.1f"),
            fmt(r.get("latency_ms"), "%.1f"), err, res, (r.get("kiln") or "?").split(" ")[0]))
    # the rows that do not pass, with their reasons, grouped by outcome
    bad = [r for r in rows if r["status"] not in ("pass", "pass-fp64")]
    if bad:
        lines += ["", "Rows that do not pass:", ""]
        for st in STATUS_ORDER:
            for r in (r for r in bad if r["status"] == st):
                lines.append("- %s (%s): **%s**: %s" % (r["model"], r["variant"], st,
                                                       r.get("reason") or ""))
    # op kinds per model (from the fixed variant, else the dynamic one)
    lines += ["", "ONNX op kinds per model (node count):", ""]
    seen = set()
    for r in rows:
        if r["model"] in seen or not r.get("ops"):
            continue
        seen.add(r["model"])
        ops = sorted(r["ops"].items(), key=lambda kv: (-kv[1], kv[0]))
        lines.append("- %s (%s): %s" % (r["model"], r["variant"],
                                        ", ".join("%s %d" % kv for kv in ops)))
    return "\n".join(lines) + "\n"


def git_describe():
    """The commit of the source tree (once per sweep: a commit made while it
    runs does not relabel later rows), '+' when src/ has uncommitted changes."""
    try:
        rev = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h %cs"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "src", "include"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev.replace(" ", "+ ", 1) if dirty else rev
    except (OSError, subprocess.SubprocessError):
        return "?"


# --------------------------------------------------------------------------- main

def seconds(text):
    """argparse type: a finite number of seconds >= 0 (--budget -5 skipped every case and passed)."""
    try:
        x = float(text)
    except ValueError:
        x = float("nan")
    if not (0 <= x < float("inf")):
        raise argparse.ArgumentTypeError("expected a finite number of seconds >= 0, got %r" % text)
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sel = ap.add_mutually_exclusive_group()
    sel.add_argument("--all", action="store_true", help="every model of the families (default)")
    sel.add_argument("--ci", action="store_true", help="CI's subset: " + ",".join(CI_MODELS))
    sel.add_argument("--models", help="comma-separated model names")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--variants", default="fixed,dynamic")
    ap.add_argument("--budget", type=seconds, default=0,
                    help="seconds; cases not started by then are skipped (0: no limit)")
    ap.add_argument("--device", default="cpu", help="kiln build --device (cpu, cuda, cuda:N)")
    ap.add_argument("--precision", default="fp32", choices=sorted(PRECISION_FLAGS))
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"), help="the kiln tool")
    ap.add_argument("--cache-dir", default="/tmp/zoo")
    ap.add_argument("--write", metavar="FILE", help="put the table into FILE (markdown)")
    ap.add_argument("--tol", type=float, default=1e-4, help="fp32 tolerance (max abs / max|ref|)")
    ap.add_argument("--timeout", type=seconds, default=1800, help="seconds per step")
    ap.add_argument("--max-params", type=float, default=400e6)
    ap.add_argument("--bench-iterations", type=int, default=5, help="0: no latency")
    ap.add_argument("--debug-arena", action="store_true", help="KILN_DEBUG_ARENA=1 for kiln")
    ap.add_argument("--timing-cache", metavar="FILE",
                    help="kiln build --timing-cache FILE for every build (shapes shared by models "
                         "are timed once)")
    ap.add_argument("--keep-engines", action="store_true")
    ap.add_argument("--keep-onnx", default="failed", choices=("all", "failed", "none"),
                    help="ONNX files kept in --cache-dir after a row (default: those of rows that "
                         "did not pass: every model's would take ~40 GB)")
    ap.add_argument("--fail-on", default="fail,error,unsupported",
                    help="outcomes that make the exit status 1")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    for hidden in ("--_prepare", "--_variant", "--_case", "--_device", "--_other"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._prepare:
        return prepare(args)
    if args._other:
        return prepare_other(args)
    if args.precision == "fp16" and not args.device.startswith("cuda"):
        ap.error("--precision fp16 needs --device cuda")

    try:
        import torch
        import torchvision
    except ImportError as e:
        print("model_zoo: skipped: needs torch and torchvision (%s)" % e)
        return 77  # ctest's SKIP_RETURN_CODE
    versions = (torch.__version__, torchvision.__version__)
    families = [f for f in args.families.split(",") if f]
    for f in families:
        if f not in FAMILIES:
            ap.error("unknown family %r (one of %s)" % (f, ", ".join(FAMILIES)))
    zoo = zoo_models(families)
    if args.ci:
        names = CI_MODELS
    elif args.models:
        names = [n for n in args.models.split(",") if n]
    else:
        names = [n for n, _ in zoo]
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in ("fixed", "dynamic"):
            ap.error("unknown variant %r (fixed, dynamic)" % v)
    known = dict(zoo_models(FAMILIES))
    cases = []
    for n in names:
        n, _, only = n.partition(":")
        if n not in known:
            ap.error("unknown model %r (see --list)" % n)
        if only and only not in ("fixed", "dynamic"):
            ap.error("unknown variant %r in %s:%s" % (only, n, only))
        cases += [(n, v) for v in variants if not only or v == only]
    if args.list:
        for n, v in cases:
            print(n, v, known[n])
        return 0
    args.kiln = os.path.abspath(args.kiln)
    if not os.access(args.kiln, os.X_OK):
        ap.error("no kiln tool at %s (--kiln)" % args.kiln)
    os.makedirs(args.cache_dir, exist_ok=True)
    env = dict(os.environ)
    if args.debug_arena:
        env["KILN_DEBUG_ARENA"] = "1"

    results_path = os.path.join(args.cache_dir, "results-%s-%s.json" % (
        args.device.replace(":", ""), args.precision))
    try:
        with open(results_path) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        saved = {"rows": []}
    rows = {(r["model"], r["variant"]): r for r in saved["rows"]}
    ran = []
    t_start = time.time()
    kiln_rev = git_describe()
    cmdline = "python3 bench/model_zoo.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    def write_table():
        if not args.write:
            return
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        from mdsection import write_section
        order = {n: i for i, (n, _) in enumerate(zoo_models(FAMILIES))}
        allrows = sorted(rows.values(), key=lambda r: (order.get(r["model"], 1e9),
                                                       r["variant"] != "fixed"))
        cmds = {}
        for r in allrows:
            key = (r.get("command", "?"), r.get("kiln", "?"), r.get("date", "?"))
            cmds[key] = cmds.get(key, 0) + 1
        made = "\n".join("- `%s` (kiln %s, %s): %d rows" % (c, k, d, n)
                         for (c, k, d), n in cmds.items())
        header = ("## %s %s\n\ntorch %s, torchvision %s; %s, %d cores. Made by (rows of a later "
                  "command replace those of an earlier one):\n\n%s" % (
                      args.device, args.precision, versions[0], versions[1], platform.machine(),
                      os.cpu_count(), made))
        write_section(args.write, "%s-%s" % (args.device.replace(":", ""), args.precision),
                      table(allrows, args, header))

    skipped = []
    for n, v in cases:
        if args.budget and time.time() - t_start > args.budget:
            skipped.append("%s:%s" % (n, v))  # not started: past --budget
            continue
        t0 = time.time()
        r = sweep_case(args, n, v, versions, env)
        r.update(debug_arena=args.debug_arena, wall_s=time.time() - t0, command=cmdline,
                 date=datetime.date.today().isoformat(), kiln=kiln_rev)
        rows[(n, v)] = r
        ran.append(r)
        onnx_file = os.path.join(case_dir(args, n, v), "model.onnx")
        if os.path.exists(onnx_file) and (args.keep_onnx == "none" or (
                args.keep_onnx == "failed" and r["status"] in ("pass", "pass-fp64", "incomparable"))):
            os.remove(onnx_file)  # the next run exports it again
        print("%-34s %-8s %-12s %8s %6.0f s  %s" % (n, v, r["status"], fmt(r.get("error"), "%.1e"),
                                                   r["wall_s"], (r.get("reason") or "")[:200]),
              flush=True)
        with open(results_path + ".tmp", "w") as f:
            json.dump({"rows": list(rows.values())}, f, indent=1)
        os.replace(results_path + ".tmp", results_path)
        write_table()  # after every row: a run cut short still leaves its table
    if skipped:
        print("model_zoo: not started (--budget %g s): %s" % (args.budget, " ".join(skipped)))
    counts = {}
    for r in ran:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print("model_zoo: %d rows in %.0f s: %s" % (len(ran), time.time() - t_start, ", ".join(
        "%s %d" % (s, counts[s]) for s in STATUS_ORDER if s in counts)))
    if args.write:
        write_table()
        print("wrote %s" % args.write)
    fail_on = set(args.fail_on.split(","))
    return 1 if any(r["status"] in fail_on for r in ran) else 0


if __name__ == "__main__":
    sys.exit(main())
