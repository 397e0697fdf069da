#!/usr/bin/env python3
"""ResNet-50 served by LitServe: a kiln engine against PyTorch eager, in the same run.

Usage (project venv, kiln built; CPU, or --device cuda on a GPU machine):
    KILN_LIBRARY=build/libkiln.so .venv/bin/python bench/serve_vs_torch.py \
        [--concurrency 1,8,32] [--rounds 2] [--requests 40,160,320] [--workers 1] \
        [--threads 2] [--max-batch 8] [--timeout-ms 5] [--work DIR] [--write BENCHMARKS.md]

Both servers are the same LitServe server (kiln.serving.litserve: the same HTTP front end,
request decoding and validation in the API server, LitServe batching of up to --max-batch
requests with --timeout-ms to fill a batch, --workers inference workers with --threads
CPU threads each); only the worker's model differs: the kiln engine (kiln.serving.Runner)
or torchvision's ResNet-50 in PyTorch eager (torch.inference_mode, the same weights:
scripts/gen_models.py's seeded ResNet-50). The kiln engine is built from the same model's
ONNX export with batch profile 1..max-batch.

Requests: one 1x3x224x224 float32 image as an .npy body (16 distinct images, sent in turn);
answers: the 1x1000 logits as .npy. For each concurrency C, the client (aiohttp, in this
process, keep-alive) sends the given number of requests with C in flight after a warm-up,
and reports throughput (requests / wall time) and latency percentiles. The servers run one
at a time, alternating between rounds (kiln, torch, then torch, kiln, ...), each started
fresh; the table has the median over rounds. A check compares the two servers' answers.
"""

import argparse
import asyncio
import datetime
import io
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
HOST = "127.0.0.1"

from kiln.serving.litserve import KilnLitAPI  # noqa: E402


# ---- the two servers ------------------------------------------------------------------

class TorchResNet50API(KilnLitAPI):
    """KilnLitAPI (the same HTTP side, batching and splitting) with PyTorch eager as the
    model: the batch's images concatenated, one forward, rows split back."""

    def __init__(self, engine_path, *, weights, device="cpu", **kw):
        super().__init__(engine_path, **kw)
        self.weights = weights
        self.torch_device = device

    def setup(self, device):
        import torch
        import torchvision

        signal.signal(signal.SIGINT, signal.SIG_IGN)
        torch.set_num_threads(int(self.threads))
        self.torch = torch
        self.model = torchvision.models.resnet50()
        self.model.load_state_dict(torch.load(self.weights))
        self.model.eval().to(self.torch_device)

    def _forward(self, x):
        with self.torch.inference_mode():
            y = self.model(self.torch.from_numpy(x).to(self.torch_device))
            return {"output": y.cpu().numpy()}  # (.cpu() waits for the GPU)

    def predict(self, x):
        if self.max_batch_size == 1:
            return self._forward(x["input"])
        rows = [r["input"].shape[0] for r in x]
        y = self._forward(np.concatenate([r["input"] for r in x]))["output"]
        out, s = [], 0
        for n in rows:
            out.append({"output": y[s:s + n]})
            s += n
        return out


def serve_main(args):
    from kiln.serving.litserve import make_server, serve_forever

    engine = engine_path(args.work, args.device)
    kw = {}
    if args.serve == "torch":
        kw = {"api_cls": TorchResNet50API,
              "api_kwargs": {"weights": os.path.join(args.work, "resnet50.pt"),
                             "device": args.device}}
    # timeout: LitServe's limit on a request's wait in the queue (30 s by default), far
    # beyond any latency measured here, so that a slow server is measured, not cut off
    server = make_server(engine, workers=args.workers, max_batch=args.max_batch,
                         timeout_ms=args.timeout_ms, threads=args.threads, timeout=600, **kw)
    serve_forever(server, host=HOST, port=args.port, log_level="warning")


# ---- preparing the model -----------------------------------------------------------------

def engine_path(work, device):
    return os.path.join(work, "resnet50.kiln" if device == "cpu" else
                        f"resnet50_{device.replace(':', '')}.kiln")


def prepare(work, max_batch, threads, device="cpu"):
    """resnet50.pt (weights), resnet50.onnx (batch dynamic) and the engine in `work`."""
    os.makedirs(work, exist_ok=True)
    pt, onnx = (os.path.join(work, f"resnet50.{e}") for e in ("pt", "onnx"))
    eng = engine_path(work, device)
    if not os.path.exists(onnx):
        import torch

        sys.path.insert(0, os.path.join(ROOT, "scripts"))
        import gen_models

        model = gen_models.make_family("resnet50")[0].eval()
        torch.save(model.state_dict(), pt)
        torch.onnx.export(model, torch.randn(2, 3, 224, 224), onnx, input_names=["input"],
                          output_names=["output"], opset_version=17,
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    if not os.path.exists(eng):
        from kiln.serving.core import build_from_onnx

        t0 = time.time()
        build_from_onnx(onnx, eng, max_batch=max_batch, threads=threads, device=device)
        print(f"built {eng} ({device}, batch 1..{max_batch}, {threads} threads) in "
              f"{time.time() - t0:.1f} s",
              flush=True)
    return eng


# ---- the client ----------------------------------------------------------------------------

def npy(arr):
    b = io.BytesIO()
    np.save(b, arr)
    return b.getvalue()


def measure(url, bodies, n, concurrency):
    """n POSTs at `concurrency` -> (latencies in s, wall s, answers by body index)."""
    import aiohttp

    lat, answers = [], {}

    async def main():
        conn = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=conn,
                                         timeout=aiohttp.ClientTimeout(total=300)) as s:
            it = iter(range(n))

            async def worker():
                for i in it:
                    t0 = time.perf_counter()
                    async with s.post(url, data=bodies[i % len(bodies)],
                                      headers={"Content-Type": "application/x-npy"}) as r:
                        data = await r.read()
                        if r.status != 200:
                            raise RuntimeError(f"HTTP {r.status}: {data[:200]!r}")
                    lat.append(time.perf_counter() - t0)
                    answers.setdefault(i % len(bodies), data)

            t0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            return time.perf_counter() - t0

    wall = asyncio.run(main())
    return lat, wall, answers


def start(kind, args, port):
    cmd = [sys.executable, os.path.abspath(__file__), "--serve", kind, "--port", str(port),
           "--work", args.work, "--workers", str(args.workers), "--threads", str(args.threads),
           "--max-batch", str(args.max_batch), "--timeout-ms", str(args.timeout_ms),
           "--device", args.device]
    proc = subprocess.Popen(cmd, start_new_session=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the {kind} server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise TimeoutError(f"the {kind} server did not start")


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def free_port():
    import socket

    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def run(args):
    prepare(args.work, args.max_batch, args.threads, args.device)
    args.load_before = os.getloadavg()[0]
    rng = np.random.default_rng(0)
    bodies = [npy(rng.standard_normal((1, 3, 224, 224)).astype(np.float32)) for _ in range(16)]
    conc = [int(c) for c in args.concurrency.split(",")]
    counts = [int(c) for c in args.requests.split(",")]
    if len(counts) != len(conc):
        sys.exit("--requests needs one count per --concurrency value")
    results = {k: {c: [] for c in conc} for k in ("kiln", "torch")}
    answers = {}
    for rnd in range(args.rounds):
        for kind in (("kiln", "torch") if rnd % 2 == 0 else ("torch", "kiln")):
            port = free_port()
            proc = start(kind, args, port)
            url = f"http://{HOST}:{port}/predict"
            try:
                measure(url, bodies, args.warmup, max(conc))  # warm-up: every batch size
                for c, n in zip(conc, counts):
                    lat, wall, ans = measure(url, bodies, n, c)
                    answers.setdefault(kind, ans)
                    ms = np.array(lat) * 1000
                    row = {"rps": n / wall, "p50": float(np.percentile(ms, 50)),
                           "p99": float(np.percentile(ms, 99)), "n": n}
                    results[kind][c].append(row)
                    print(f"round {rnd + 1} {kind:5s} c={c:2d}: {row['rps']:6.1f} req/s  p50 "
                          f"{row['p50']:7.1f} ms  p99 {row['p99']:7.1f} ms", flush=True)
            finally:
                stop(proc)
    # the two servers' answers for the same images
    diff = 0.0
    for i in answers["kiln"]:
        if i in answers["torch"]:
            a = np.load(io.BytesIO(answers["kiln"][i]))
            b = np.load(io.BytesIO(answers["torch"][i]))
            diff = max(diff, float(np.abs(a - b).max() / np.abs(b).max()))
    return results, conc, diff


def table(results, conc, diff, args):
    med = {k: {c: {m: statistics.median(r[m] for r in results[k][c]) for m in ("rps", "p99", "p50")}
               for c in conc} for k in results}
    lines = [
        "| concurrency | kiln req/s | PyTorch req/s | kiln / PyTorch throughput | kiln p50 / p99 (ms) "
        "| PyTorch p50 / p99 (ms) |",
        "|---|---|---|---|---|---|",
    ]
    for c in conc:
        k, t = med["kiln"][c], med["torch"][c]
        lines.append(f"| {c} | {k['rps']:.1f} | {t['rps']:.1f} | {k['rps'] / t['rps']:.2f}x | "
                     f"{k['p50']:.0f} / {k['p99']:.0f} | {t['p50']:.0f} / {t['p99']:.0f} |")
    cmd = ("KILN_LIBRARY=build/libkiln.so .venv/bin/python bench/serve_vs_torch.py "
           f"--concurrency {args.concurrency} --requests {args.requests} --rounds {args.rounds} "
           f"--workers {args.workers} --threads {args.threads} --max-batch {args.max_batch} "
           f"--timeout-ms {args.timeout_ms:g}" + (f" --device {args.device}"
                                                  if args.device != "cpu" else ""))
    where = "the CPU" if args.device == "cpu" else args.device
    head = (f"ResNet-50 (fp32) behind LitServe on {where}, kiln engine vs PyTorch "
            f"{__import__('torch').__version__} eager, {datetime.date.today()}, "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
            f"{args.workers} worker(s) x {args.threads} threads, batches of up to "
            f"{args.max_batch} requests ({args.timeout_ms:g} ms to fill), 1 image per request "
            f"(.npy), median of {args.rounds} alternating rounds; answers agree to "
            f"{diff:.1e} of max|PyTorch|; 1-minute load average of the (shared) machine "
            f"{args.load_before:.1f} before the run, {os.getloadavg()[0]:.1f} after. "
            f"Command:\n\n    {cmd}\n")
    return head + "\n" + "\n".join(lines) + "\n", med


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--concurrency", default="1,8,32")
    p.add_argument("--requests", default="40,160,320", help="requests per concurrency")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--warmup", type=int, default=32)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--timeout-ms", type=float, default=5.0)
    p.add_argument("--work", default="/tmp/kiln-serve-bench")
    p.add_argument("--device", default="cpu",
                   help="cpu, or cuda / cuda:N: a CUDA engine against PyTorch on that GPU "
                        "(fp32 both)")
    p.add_argument("--write", default=None, help="BENCHMARKS.md: write the table's section")
    p.add_argument("--json", default=None, help="write the raw results here")
    p.add_argument("--serve", choices=("kiln", "torch"), help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        return serve_main(args)
    results, conc, diff = run(args)
    text, med = table(results, conc, diff, args)
    print("\n" + text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "median": med, "diff": diff}, f, indent=1)
    if args.write:
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        from mdsection import write_section

        name = "serve_vs_torch" + ("" if args.device == "cpu" else "_gpu")
        title = "CPU" if args.device == "cpu" else "GPU"
        write_section(args.write, name,
                      f"## Serving: kiln vs PyTorch behind LitServe ({title})\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
