#!/usr/bin/python3
"""Helper of run_model_tests.sh: reads the manifest written by scripts/gen_models.py
and compares kiln's outputs with PyTorch's.

    model_tool.py list MODELDIR [ONLY]            variant names (ONLY: comma-separated
                                                  names or family prefixes)
    model_tool.py check MODELDIR [ONLY]           exit 0 if every selected variant's files exist
    model_tool.py build-args MODELDIR NAME        kiln build arguments, one per line
    model_tool.py run-args MODELDIR NAME          kiln run --input arguments, one per line
    model_tool.py compare MODELDIR NAME OUTDIR [REL_TOL]
        prints "max_abs_err max_abs_ref ratio PASS|FAIL [detail]" (worst output) and
        exits 0 on PASS. Floating outputs pass when max|kiln - ref| <= REL_TOL * max|ref|
        (default 1e-4); integer and bool outputs must match exactly; shapes and
        dtypes must match; NaN where the reference has none fails.
"""
import json
import os
import sys

import numpy as np


def manifest(d):
    with open(os.path.join(d, "manifest.json")) as f:
        return json.load(f)


def entries(d, only):
    ms = manifest(d)["models"]
    if not only:
        return ms
    keys = [k.strip() for k in only.split(",") if k.strip()]
    return [m for m in ms if any(m["name"] == k or m["family"] == k or m["name"].startswith(k) for k in keys)]


def find(d, name):
    for m in manifest(d)["models"]:
        if m["name"] == name:
            return m
    sys.exit("model_tool.py: no model '%s' in %s/manifest.json" % (name, d))


def dims(shape):
    return "x".join(str(x) for x in shape)


def sanitize(name):
    s = "".join(c if (c.isascii() and c.isalnum()) or c in "._-" else "_" for c in name)
    return "_" + s if not s or s[0] == "." else s


def compare(d, name, outdir, rel_tol):
    m = find(d, name)
    worst = None  # (ratio, err, ref_max, detail)
    failures = []
    for o in m["outputs"]:
        ref = np.load(os.path.join(d, o["file"]))
        path = os.path.join(outdir, sanitize(o["name"]) + ".npy")
        if not os.path.exists(path):
            failures.append("%s: no output file %s" % (o["name"], path))
            continue
        got = np.load(path)
        if got.shape != ref.shape:
            failures.append("%s: shape %s, expected %s" % (o["name"], got.shape, ref.shape))
            continue
        if got.dtype != ref.dtype:
            failures.append("%s: dtype %s, expected %s" % (o["name"], got.dtype, ref.dtype))
            continue
        if ref.dtype.kind in "biu":
            err = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64)))) if ref.size else 0.0
            rmax = float(np.max(np.abs(ref.astype(np.float64)))) if ref.size else 0.0
            ratio = 0.0 if err == 0 else float("inf")
            if err != 0:
                failures.append("%s: integer values differ" % o["name"])
        else:
            g = got.astype(np.float64)
            r = ref.astype(np.float64)
            if np.isnan(g).sum() > np.isnan(r).sum():
                failures.append("%s: %d NaN values" % (o["name"], int(np.isnan(g).sum())))
            diff = np.abs(g - r)
            diff[np.isnan(r) & np.isnan(g)] = 0
            err = float(np.nanmax(diff)) if diff.size and not np.all(np.isnan(diff)) else 0.0
            if np.isnan(diff).any():
                err = float("inf")
            rmax = float(np.nanmax(np.abs(r))) if r.size else 0.0
            ratio = err / rmax if rmax > 0 else (0.0 if err == 0 else float("inf"))
            if not err <= rel_tol * rmax:
                idx = np.unravel_index(int(np.nanargmax(diff)), diff.shape) if diff.size else ()
                failures.append("%s: max abs err %.3g at %s (kiln %.6g, ref %.6g) > %.0e * %.4g"
                                % (o["name"], err, tuple(int(i) for i in idx), g[idx], r[idx], rel_tol, rmax))
        if worst is None or ratio > worst[0]:
            worst = (ratio, err, rmax)
    if worst is None:
        worst = (float("inf"), float("inf"), 0.0)
    status = "FAIL" if failures else "PASS"
    print("%.3e %.4g %.3e %s %s" % (worst[1], worst[2], worst[0], status, "; ".join(failures)))
    return 0 if not failures else 1


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    cmd, d = argv[1], argv[2]
    if cmd == "list":
        for m in entries(d, argv[3] if len(argv) > 3 else ""):
            print(m["name"])
        return 0
    if cmd == "check":
        try:
            ms = entries(d, argv[3] if len(argv) > 3 else "")
        except (OSError, ValueError, KeyError):
            return 1
        if not ms:
            return 1
        for m in ms:
            for p in [m["onnx"]] + [x["file"] for x in m["inputs"] + m["outputs"]]:
                if not os.path.isfile(os.path.join(d, p)):
                    return 1
        return 0
    if cmd == "build-args":
        m = find(d, argv[3])
        args = []
        if m.get("dynamic"):
            for key, opt in (("min", "--min-shapes"), ("opt", "--opt-shapes"), ("max", "--max-shapes")):
                args += [opt, ",".join("%s:%s" % (i["name"], dims(i[key])) for i in m["inputs"])]
        for a in args:
            print(a)
        return 0
    if cmd == "run-args":
        m = find(d, argv[3])
        for i in m["inputs"]:
            print("--input")
            print("%s=%s" % (i["name"], os.path.join(d, i["file"])))
        return 0
    if cmd == "compare":
        tol = float(argv[5]) if len(argv) > 5 else 1e-4
        return compare(d, argv[3], argv[4], tol)
    sys.exit("model_tool.py: unknown command '%s'" % cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
