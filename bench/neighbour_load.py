#!/usr/bin/env python3
"""A neighbour that loads the machine on purpose, for seeing how kiln and ONNX
Runtime each take load they do not control (bench/cpu_vs_ort.py run beside it).

  --mode cpu   spin for --busy-ms, sleep for --idle-ms, forever: takes that share
               of a CPU from whatever else is scheduled there
  --mode mem   the same, but while busy touch one float in every 64-byte line of
               --mib MiB (default 64, twice this machine's L3), evicting the
               shared cache and using memory bandwidth

Runs until killed (or for --seconds). Pin it with taskset, e.g.

  taskset -c 1 .venv/bin/python bench/neighbour_load.py --mode mem --busy-ms 2 --idle-ms 8 &
  .venv/bin/python bench/cpu_vs_ort.py --models resnet50 --threads 2 --precisions fp32 \\
      --repeats 20 --rounds 3 --warmup 5 --models-dir models --lib build-lead/libkiln.so
  kill %1
"""
import argparse
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("cpu", "mem"), default="cpu")
    ap.add_argument("--busy-ms", type=float, default=2.0)
    ap.add_argument("--idle-ms", type=float, default=8.0)
    ap.add_argument("--mib", type=int, default=64, help="memory touched in --mode mem")
    ap.add_argument("--seconds", type=float, default=0.0, help="stop after this long (0: never)")
    args = ap.parse_args()
    if args.busy_ms <= 0 or args.idle_ms < 0 or args.mib <= 0:
        ap.error("--busy-ms and --mib must be positive, --idle-ms not negative")
    touch = None
    if args.mode == "mem":
        import numpy as np

        buf = np.ones(args.mib << 18, np.float32)
        lines = buf[::16]  # one float per 64-byte line
        step = 1 << 14     # lines per call (1 MiB of memory, a few tens of us), so that
        pos = 0            # --busy-ms is kept to that, not to a whole pass over --mib

        def touch():
            nonlocal pos
            part = lines[pos:pos + step]
            np.add(part, 1.0, out=part)
            pos = (pos + step) % len(lines)
    busy, idle = args.busy_ms / 1000.0, args.idle_ms / 1000.0
    end = time.monotonic() + args.seconds if args.seconds > 0 else None
    while end is None or time.monotonic() < end:
        t = time.perf_counter()
        while time.perf_counter() - t < busy:
            if touch:
                touch()
        if idle:
            time.sleep(idle)


if __name__ == "__main__":
    main()
