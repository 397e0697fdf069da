"""Helpers of the serving tests: the served model, a bounded load generator on loopback,
and the check of every response against the engine's direct output."""

import asyncio
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

PYTHON_DIR = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"  # every server of these tests listens on loopback only


class TwoHeads(torch.nn.Module):
    """x [batch, 16] -> y [batch, 10] (an MLP), z [batch] (a row statistic)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.l1 = torch.nn.Linear(16, 32)
        self.l2 = torch.nn.Linear(32, 10)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x))), (x * x).sum(dim=1)


def export_model(path):
    m = TwoHeads().eval()
    torch.onnx.export(m, torch.randn(3, 16), str(path), input_names=["x"],
                      output_names=["y", "z"], opset_version=17,
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}, "z": {0: "batch"}})
    return path


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """The served engine: TwoHeads, batch 1..8 (a test module imports this fixture)."""
    from kiln.serving.core import prepare_engine

    d = tmp_path_factory.mktemp("engine")
    return prepare_engine(export_model(d / "twoheads.onnx"), work_dir=d, max_batch=8)


@pytest.fixture(scope="module")
def runner(engine):
    """The engine run directly: the expected answers."""
    from kiln.serving.core import Runner

    r = Runner(engine, threads=1)
    yield r
    r.close()


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def serving_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PYTHON_DIR), env.get("PYTHONPATH")]))
    if env.get("KILN_LIBRARY"):
        env["KILN_LIBRARY"] = os.path.abspath(env["KILN_LIBRARY"])
    return env


def http(method, url, body=None, headers=None, timeout=30):
    """-> (status, headers, body bytes); HTTP errors are answers too."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def wait_healthy(url, proc=None, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before it was ready")
        try:
            if http("GET", url + "/health", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not healthy after {timeout} s")


def start_litserve(model, port, *args, log=None):
    """`python -m kiln.serving MODEL --host 127.0.0.1 --port PORT ARGS` (what `kiln serve`
    runs), waited for until /health answers 200."""
    cmd = [sys.executable, "-m", "kiln.serving", str(model), "--host", HOST, "--port", str(port),
           "--log-level", "warning", *args]
    # its own process group, so that whatever it leaves behind can be killed with it
    proc = subprocess.Popen(cmd, env=serving_env(), stdout=log or subprocess.DEVNULL,
                            stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_healthy(f"http://{HOST}:{port}", proc)
    except BaseException:
        kill_group(proc)
        raise
    return proc


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


def stop(proc, timeout=60):
    """SIGTERM (the server drains and stops), then its whole process group is killed in
    case anything was left; -> the server's exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    rc = proc.returncode
    kill_group(proc)
    return rc


# ---- requests and their expected answers ---------------------------------------------

def npy_bytes(arr):
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def post_chunked_unended(url, n_chunks, timeout=30):
    """POSTs n_chunks chunks of 16 KiB to url/predict with Transfer-Encoding: chunked (no
    Content-Length) and never the last chunk: the body does not end, so an answer comes
    only from a server that reads as the body streams in. -> (status, body)."""
    import http.client

    c = http.client.HTTPConnection(HOST, int(url.rsplit(":", 1)[1]), timeout=timeout)
    try:
        c.putrequest("POST", "/predict")
        c.putheader("Content-Type", "application/json")
        c.putheader("Transfer-Encoding", "chunked")
        c.endheaders()
        chunk = b" " * 16384
        for _ in range(n_chunks):
            c.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def npy_header(shape, descr="<f4"):
    """An .npy header (version 1.0) claiming `shape`, without the data."""
    d = repr({"descr": descr, "fortran_order": False, "shape": tuple(shape)})
    h = (d + " " * (118 - len(d)) + "\n").encode()
    return b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h


def npz_bytes(members, compression=zipfile.ZIP_STORED):
    """An .npz archive of {member name: bytes}."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def make_requests(runner, n, seed=0):
    """n requests of 1..3 rows each, alternately JSON and .npy, with the engine's direct
    output (runner.run, one request at a time) as the expected answer."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        x = rng.standard_normal((1 + i % 3, 16)).astype(np.float32)
        want = runner.run({"x": x})
        if i % 2:
            body, ctype = npy_bytes(x), "application/x-npy"
        else:
            body = json.dumps({"inputs": {"x": {"data": x.tolist(), "dtype": "float32"}}}).encode()
            ctype = "application/json"
        out.append((body, ctype, want))
    return out


def decode(body, ctype):
    from kiln.serving.core import decode_response

    return decode_response(body, ctype)


def matches(got, want):
    if set(got) != set(want):
        return False
    for k, w in want.items():
        g = got[k]
        if g.shape != w.shape or g.dtype != w.dtype:
            return False
        # batched runs may round differently from single ones; a misrouted or
        # mis-split answer is off by O(1)
        if not np.allclose(g, w, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(w).max()))):
            return False
    return True


class LoadResult:
    def __init__(self):
        self.ok = 0
        self.wrong = 0
        self.statuses = {}
        self.failures = []  # (index, status or exception text, body)
        self.latencies = []
        self.wall = 0.0
        self.batches = []  # (requests, rows) of the engine run behind each answer

    def batch_summary(self):
        if not self.batches:
            return "no X-Kiln-Batch headers"
        req = [b[0] for b in self.batches]
        rows = [b[1] for b in self.batches]
        return (f"runs behind the answers: up to {max(req)} requests / {max(rows)} rows, "
                f"mean {np.mean(req):.1f} requests")

    @property
    def answered(self):
        return self.ok + self.wrong + sum(self.statuses.values())

    def summary(self, label):
        lat = np.array(self.latencies) * 1000 if self.latencies else np.zeros(1)
        return (f"{label}: {self.ok} ok, {self.wrong} wrong, non-200 {self.statuses or 0}, "
                f"errors {len(self.failures) - sum(self.statuses.values())}; "
                f"p50 {np.percentile(lat, 50):.1f} ms, p99 {np.percentile(lat, 99):.1f} ms, "
                f"{(self.ok / self.wall) if self.wall else 0:.0f} req/s over {self.wall:.1f} s")


def run_load(url, requests, concurrency=32, timeout=300, on_progress=None, extra=None):
    """Sends `requests` (body, content type, expected outputs) to url at `concurrency`
    (aiohttp, keep-alive), checks every answer. extra: (body, content type, check) tuples
    interleaved with them, whose answers `check(status, body)` judges (bad requests).
    on_progress(done) is called (in a thread) after each answer. Bounded by `timeout`."""
    import aiohttp

    res = LoadResult()
    extra = list(extra or [])
    jobs = [(i, r) for i, r in enumerate(requests)]
    step = max(1, len(jobs) // (len(extra) + 1)) if extra else 0
    order = []
    for k, j in enumerate(jobs):
        order.append(("req", j))
        if step and k % step == step - 1 and extra:
            order.append(("extra", extra.pop()))
    order += [("extra", e) for e in extra]
    extra_bad = []

    async def main():
        conn = aiohttp.TCPConnector(limit=concurrency)
        t = aiohttp.ClientTimeout(total=120)
        queue = asyncio.Queue()
        for o in order:
            queue.put_nowait(o)
        done = 0
        loop = asyncio.get_running_loop()
        async with aiohttp.ClientSession(connector=conn, timeout=t) as s:
            async def worker():
                nonlocal done
                while True:
                    try:
                        kind, job = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        return
                    if kind == "extra":
                        body, ctype, check = job
                        async with s.post(url, data=body, headers={"Content-Type": ctype}) as r:
                            data = await r.read()
                            if not check(r.status, data):
                                extra_bad.append((r.status, data[:300]))
                        continue
                    i, (body, ctype, want) = job
                    t0 = time.perf_counter()
                    try:
                        async with s.post(url, data=body, headers={"Content-Type": ctype}) as r:
                            data = await r.read()
                            status, rtype = r.status, r.headers.get("Content-Type", "")
                    except Exception as e:  # noqa: BLE001 (counted: a lost request)
                        res.failures.append((i, repr(e), b""))
                        continue
                    dt = time.perf_counter() - t0
                    if status == 200:
                        got = decode(data, rtype)
                        if None in got:  # .npy: the one output
                            got = {next(iter(want)): got[None]}
                        if matches(got, want):
                            res.ok += 1
                            res.latencies.append(dt)
                            b = dict(kv.strip().split("=") for kv in
                                     r.headers.get("X-Kiln-Batch", "").split(",") if "=" in kv)
                            if b:
                                res.batches.append((int(b["requests"]), int(b["rows"])))
                        else:
                            res.wrong += 1
                            res.failures.append((i, "wrong", data[:300]))
                    else:
                        res.statuses[status] = res.statuses.get(status, 0) + 1
                        res.failures.append((i, status, data[:300]))
                    done += 1
                    if on_progress is not None:
                        await loop.run_in_executor(None, on_progress, done)

            t0 = time.perf_counter()
            await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(concurrency))),
                                   timeout)
            res.wall = time.perf_counter() - t0

    asyncio.run(main())
    res.extra_bad = extra_bad
    return res
