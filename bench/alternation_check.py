#!/usr/bin/env python3
"""Does alternating with another runtime slow kiln down in bench/cpu_vs_ort.py?

Times one kiln engine through cpu_vs_ort.py's timing servers (one process per
runtime, a pause before each timed call) in three modes, each round with fresh
processes: "alone" (kiln only), "ort" (kiln alternating with ONNX Runtime, as the
benchmark runs) and "kiln" (kiln alternating with a second kiln process). Prints
kiln's median per round and mode. Only kiln's times are reported.

    .venv/bin/python bench/alternation_check.py --model resnet50 --threads 1 \\
        --engine r50_t1.kiln --models-dir models --lib build-lead/libkiln.so
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_vs_ort as B  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, choices=sorted(B.MODELS),
                    help="cpu_vs_ort.py's model key (resnet50, resnet50_b8, ...)")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--engine", required=True, help="kiln engine built for that model and thread count")
    ap.add_argument("--models-dir", default="models")
    ap.add_argument("--lib", default="build-lead/libkiln.so")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=15, help="timed runs per round and mode")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--pause-ms", type=float, default=20.0,
                    help="pause before each call (longer than ORT's spinning at 2 threads: 80)")
    args = ap.parse_args()
    if not os.path.isfile(args.engine):
        sys.exit("alternation_check: no engine file %s" % args.engine)
    tmp = tempfile.mkdtemp(prefix="kiln_alt_")
    sargs = argparse.Namespace(models_dir=args.models_dir, lib=args.lib, engine_dir=tmp)
    # the servers open the engine by cpu_vs_ort.py's file name: link it there, no copy
    os.symlink(os.path.abspath(args.engine), B.engine_file(sargs, args.model, args.threads, "fp32"))
    gap = args.pause_ms / 1e3
    res = {}
    try:
        for _ in range(args.rounds):
            for mode in ("alone", "ort", "kiln"):
                k = B.Server(sargs, "kiln", args.model, args.threads, "fp32")
                other = None if mode == "alone" else B.Server(sargs, mode, args.model, args.threads, "fp32")
                for _ in range(args.warmup):
                    k.run()
                    if other:
                        other.run()
                t = []
                for _ in range(args.runs):
                    time.sleep(gap)
                    t.append(k.run())
                    if other:
                        time.sleep(gap)
                        other.run()
                res.setdefault(mode, []).append(statistics.median(t))
                k.close()
                if other:
                    other.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("kiln median per round (ms), %s, %d thread(s), pause %.0f ms" %
          (args.model, args.threads, args.pause_ms))
    for mode, label in (("alone", "alone"), ("ort", "alternating with ORT"),
                        ("kiln", "alternating with a second kiln")):
        print("  %-32s %s" % (label, " ".join("%.1f" % x for x in res[mode])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
