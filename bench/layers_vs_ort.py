#!/usr/bin/env python3
"""Per-layer time of a kiln engine next to ONNX Runtime's per-node time on
the same model, same thread count and, for inputs not given as files, the
engine's opt shapes (the profile behind a row of bench/cpu_vs_ort.py).

kiln: `kiln bench ENGINE --profile --json` (mean per run over the profiled
runs). ORT: SessionOptions.enable_profiling, mean of the "_kernel_time"
events per node over the timed runs. Layers are matched by their first
output's name (ORT names its NCHWc nodes after their outputs, with a
"_nchwc" suffix); unmatched time is listed as such. Prints the two totals,
the time by op type on each side, and the layers where kiln loses most.

  .venv/bin/python bench/layers_vs_ort.py --kiln build/kiln --engine r50.kiln \\
      --model models/resnet50_op17_fixed/model.onnx --threads 1
"""
import argparse
import collections
import json
import os
import subprocess
import tempfile
import time

import numpy as np
import onnxruntime as ort


def ort_profile(model, threads, runs, inputs, shapes, idle_ms=0.0, flush_mb=0):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="kiln_ortprof_"), "ort")
    s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    feeds = {}
    for i in s.get_inputs():
        if i.name in inputs:
            feeds[i.name] = inputs[i.name]
            continue
        # the engine's opt shape (a dynamic model: the engine's batch), else 1 for dynamic dims
        shape = shapes.get(i.name) or [d if isinstance(d, int) else 1 for d in i.shape]
        feeds[i.name] = np.ones(shape, np.int64) if "int" in i.type else \
            np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    lat = []
    flush = np.zeros(flush_mb << 20, np.uint8) if flush_mb else None
    for r in range(runs):
        if idle_ms:
            time.sleep(idle_ms / 1e3)
        if flush is not None:
            flush += 1  # read and written through the caches (fill() may store around them)
        t0 = time.perf_counter()
        s.run(None, feeds)
        lat.append(time.perf_counter() - t0)
    events = json.load(open(s.end_profiling()))
    total, count, op = collections.defaultdict(float), collections.Counter(), {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][: -len("_kernel_time")]
            total[name] += e["dur"]
            count[name] += 1
            op[name] = e["args"].get("op_name", "?")
    nodes = {}
    for name, us in total.items():
        key = name[: -len("_nchwc")] if name.endswith("_nchwc") else name
        nodes[key] = (us / count[name], op[name])
    return float(np.median(lat)) * 1e3, nodes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--engine", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--inputs-dir", default=None, help="folder of <input>.npy (default: random)")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--unmatched", action="store_true", help="list the layers and nodes that were not matched")
    ap.add_argument("--idle-ms", type=float, default=0.0,
                    help="pause before each run, both runtimes (kiln bench --idle-ms)")
    ap.add_argument("--flush-mb", type=int, default=0,
                    help="MiB of other memory read and written before each run, both runtimes (kiln bench --flush-mb): "
                         "the profile with cold caches")
    args = ap.parse_args()
    inputs = {}
    if args.inputs_dir:
        for f in os.listdir(args.inputs_dir):
            if f.endswith(".npy"):
                inputs[f[:-4]] = np.load(os.path.join(args.inputs_dir, f))
    kb = json.loads(subprocess.run([args.kiln, "bench", args.engine, "--threads", str(args.threads),
                                    "--iterations", str(args.runs), "--profile", "--json",
                                    "--idle-ms", str(args.idle_ms), "--flush-mb", str(args.flush_mb)],
                                   check=True, capture_output=True, text=True).stdout)
    ki = json.loads(subprocess.run([args.kiln, "inspect", args.engine, "--json"], check=True,
                                   capture_output=True, text=True).stdout)
    ort_ms, nodes = ort_profile(args.model, args.threads, args.runs, inputs,
                                {i["name"]: i["opt"] for i in ki["inputs"]}, args.idle_ms, args.flush_mb)
    out_of = {i: l["outputs"][0]["name"] if l["outputs"] else "" for i, l in enumerate(ki["layers"])}
    print("kiln: median %.2f ms, layers sum %.2f ms; ORT: median %.2f ms, nodes sum %.2f ms (%d threads)" % (
        kb["latency_ms"]["p50"], kb["profile"]["total_us"] / 1e3, ort_ms,
        sum(v[0] for v in nodes.values()) / 1e3, args.threads))
    by_k, by_o = collections.defaultdict(float), collections.defaultdict(float)
    for l in kb["profile"]["layers"]:
        by_k[l["op"] + (" (" + l["tactic"] + ")" if l["tactic"] else "")] += l["mean_us"]
    for us, op in nodes.values():
        by_o[op] += us
    print("\nkiln by op (ms):", ", ".join("%s %.2f" % (k, v / 1e3) for k, v in sorted(by_k.items(), key=lambda x: -x[1])[:8]))
    print("ORT by op (ms): ", ", ".join("%s %.2f" % (k, v / 1e3) for k, v in sorted(by_o.items(), key=lambda x: -x[1])[:8]))
    rows, seen = [], set()
    for l in kb["profile"]["layers"]:
        o = nodes.get(out_of[l["layer"]])
        if o:
            seen.add(out_of[l["layer"]])
        rows.append((l["mean_us"], o[0] if o else None, l["op"], l["name"]))
    matched_k = sum(r[0] for r in rows if r[1] is not None)
    matched_o = sum(r[1] for r in rows if r[1] is not None)
    print("\nmatched layers: kiln %.2f ms, ORT %.2f ms; kiln unmatched %.2f ms, ORT unmatched %.2f ms" % (
        matched_k / 1e3, matched_o / 1e3, sum(r[0] for r in rows if r[1] is None) / 1e3,
        sum(v[0] for k, v in nodes.items() if k not in seen) / 1e3))
    if args.unmatched:
        print("\nkiln layers without an ORT node of the same output (us):")
        for r in sorted((r for r in rows if r[1] is None), key=lambda r: -r[0]):
            print("  %8.0f  %-12s %s" % (r[0], r[2], r[3][:90]))
        print("ORT nodes without a kiln layer of the same output (us):")
        for k, v in sorted(((k, v) for k, v in nodes.items() if k not in seen), key=lambda kv: -kv[1][0]):
            print("  %8.0f  %-12s %s" % (v[0], v[1], k[:90]))
    print("\nlayers where kiln loses most (us: kiln, ORT, kiln-ORT):")
    for r in sorted((r for r in rows if r[1] is not None), key=lambda r: r[1] - r[0])[: args.top]:
        print("  %8.0f %8.0f %+8.0f  %-12s %s" % (r[0], r[1], r[0] - r[1], r[2], r[3][:90]))


if __name__ == "__main__":
    main()
