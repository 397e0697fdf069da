"""A kiln engine behind LitServe (https://lightning.ai/docs/litserve), on one machine.

    from kiln.serving.litserve import make_server
    server = make_server("model.kiln", workers=2, max_batch=8, timeout_ms=5)
    server.run(host="127.0.0.1", port=8000)

or from the shell: ``kiln serve model.kiln --port 8000 --workers 2 --max-batch 8``.

Endpoints:
  POST /predict    JSON, .npy or .npz body (formats: kiln.serving.core); answers the
                   outputs as JSON, or .npy/.npz for binary requests / Accept
  GET  /metadata   inputs (dtype, shape, profile), outputs, device, precision, batching
  GET  /health     200 "ok" once every worker is ready; 503 while starting or draining
  GET  /info       LitServe's: server settings plus the same metadata

How it is put together: a KilnSpec (a LitServe LitSpec) owns the HTTP side. It reads the
body (413 past the size limit), decodes and validates it against the engine's description
in the API server process, so a bad request gets its 4xx there and never reaches a batch,
then queues the arrays for the inference workers. Each worker (a KilnLitAPI process) loads
the engine and holds one execution context; LitServe's batching (max_batch_size,
batch_timeout) collects up to max_batch requests, which Runner.run_batch concatenates along
the engine's batch dimension (at most the profile's max rows per run) and splits back.
A worker that dies is restarted (its requests get a 500); shutdown (SIGTERM or SIGINT to
the main process) first drains: new requests get 503, requests in flight finish, then
LitServe stops its processes.
"""

import asyncio
import multiprocessing as mp
import os
import pickle
import signal
import threading
import time
import uuid

import litserve as ls
from fastapi import HTTPException, Request, Response
from fastapi.responses import JSONResponse
from litserve.specs.base import LitSpec
from litserve.utils import LitAPIStatus, ResponseBufferItem

from .core import (DEFAULT_MAX_BODY_BYTES, EngineSpec, RequestError, RunFailure, Runner,
                   check_option, encode, read_body)

# bodies up to this size are decoded and encoded on the event loop; larger ones in a thread
_INLINE_BYTES = 256 << 10


def _error(status, message):
    return JSONResponse({"error": message}, status_code=status)


def _alive(pid):
    """Whether process `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return not os.path.isdir("/proc/self")  # no /proc entry on Linux: gone


def _batch_header(outputs):
    return {"X-Kiln-Batch": outputs.header()} if hasattr(outputs, "header") else {}


class KilnSpec(LitSpec):
    """The HTTP surface of a kiln engine under LitServe: POST /predict and GET /metadata,
    with decoding, validation and the body-size limit in the API server process."""

    def __init__(self, engine_spec, *, api_path="/predict", max_body_bytes=DEFAULT_MAX_BODY_BYTES):
        super().__init__()
        self.engine_spec = engine_spec
        self.api_path = api_path
        self.max_body_bytes = int(max_body_bytes)
        # shared with the main process (inherited by the forked API servers): set when
        # draining; the number of /predict requests in flight
        self.draining = mp.Event()
        self.inflight = mp.Value("i", 0)
        # pid of each inference worker (by LitServe worker id), written by the worker:
        # LitServe's own check for requests held by a dead worker looks at the main
        # process's response buffer, which is empty when the API servers are processes
        self.worker_pids = None
        self.add_endpoint(api_path, self.predict_endpoint, ["POST"])
        self.add_endpoint("/metadata", self.metadata_endpoint, ["GET"])

    def __getstate__(self):
        # the inference workers (spawned) get the spec too; they need only worker_pids
        state = super().__getstate__()
        state["draining"] = state["inflight"] = None
        return state

    def decode_request(self, request, context_kwargs=None):
        return request  # already decoded and validated by predict_endpoint

    def encode_response(self, output, context_kwargs=None):
        return output  # encoded by predict_endpoint

    async def metadata_endpoint(self, request: Request) -> Response:
        return JSONResponse(self.engine_spec.metadata())

    async def predict_endpoint(self, request: Request) -> Response:
        if self.draining is not None and self.draining.is_set():
            return _error(503, "the server is shutting down")
        with self.inflight.get_lock():
            self.inflight.value += 1
        try:
            return await self._predict(request)
        finally:
            with self.inflight.get_lock():
                self.inflight.value -= 1

    async def _predict(self, request):
        ctype = request.headers.get("content-type", "")
        try:
            body = await read_body(request, self.max_body_bytes, " (--max-body-mb)")
            if len(body) > _INLINE_BYTES:
                feeds, fmt = await asyncio.to_thread(self.engine_spec.decode, body, ctype)
            else:
                feeds, fmt = self.engine_spec.decode(body, ctype)
        except RequestError as e:
            return _error(e.status, e.message)
        uid = uuid.uuid4().hex
        event = asyncio.Event()
        item = self.response_buffer[uid] = ResponseBufferItem(event=event)
        self.request_queue.put((self.response_queue_id, uid, time.monotonic(), feeds))
        if not await self._wait(item):
            self.response_buffer.pop(uid, None)
            return _error(500, "the worker running this request died (it is being restarted)")
        response, status = self.response_buffer.pop(uid).response
        if status == LitAPIStatus.ERROR:
            return self._failure(response)
        if isinstance(response, RunFailure):
            return _error(response.http_status, response.message)
        accept = request.headers.get("accept", "")
        if sum(a.nbytes for a in response.values()) > _INLINE_BYTES:
            data, media = await asyncio.to_thread(encode, response, fmt, accept)
        else:
            data, media = encode(response, fmt, accept)
        return Response(content=data, media_type=media, headers=_batch_header(response))

    async def _wait(self, item):
        """Waits for the answer; False when the worker that took the request (LitServe
        tells which, restart_workers=True) has died."""
        pid = None
        while True:
            try:
                await asyncio.wait_for(item.event.wait(), 0.25)
                return True
            except asyncio.TimeoutError:
                pass
            if self.worker_pids is None or item.worker_id is None:
                continue
            if pid is None:
                pid = self.worker_pids[item.worker_id]
            if pid and not _alive(pid):
                return False

    @staticmethod
    def _failure(response):
        if isinstance(response, bytes):
            try:
                response = pickle.loads(response)
            except Exception:  # noqa: BLE001 (what the worker sent is all there is)
                pass
        if isinstance(response, HTTPException):
            return _error(response.status_code, str(response.detail))
        if response is None:  # LitServe's monitor: the worker died while running it
            return _error(500, "the worker running this request died (it is being restarted)")
        return _error(500, f"inference failed: {response}")


class KilnLitAPI(ls.LitAPI):
    """A LitServe LitAPI running a kiln engine file: one Runner (one execution context)
    per inference worker.

    engine_path: the .kiln file (see kiln.serving.prepare_engine to build one from ONNX).
    max_batch: requests per batch (LitServe's max_batch_size); None: the profile's max
      rows; clamped to it; 1 for engines without a dynamic batch dimension.
    timeout_ms: how long a worker waits to fill a batch (LitServe's batch_timeout).
    threads: CPU threads of each worker's context (None: the engine's setting).
    max_body_bytes: larger request bodies get a 413.
    warmup: each worker runs every batch size it can get once before it takes requests
      (Runner.warmup), so that no request waits for a shape's first run.
    """

    def __init__(self, engine_path, *, max_batch=None, timeout_ms=5.0, threads=None,
                 max_body_bytes=DEFAULT_MAX_BODY_BYTES, api_path="/predict", warmup=True):
        engine_path = os.fspath(engine_path)
        max_batch = check_option("max_batch", max_batch, int, 1, none_ok=True)
        timeout_ms = check_option("timeout_ms", timeout_ms, float, 0)
        threads = check_option("threads", threads, int, 0, 1024, none_ok=True)
        max_body_bytes = check_option("max_body_bytes", max_body_bytes, int, 0, above=True)
        spec = EngineSpec.from_file(engine_path)
        if spec.batchable:
            n = spec.max_rows if max_batch is None else min(int(max_batch), spec.max_rows)
        else:
            n = 1
        if n < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        timeout = max(float(timeout_ms), 0.0) / 1000.0 if n > 1 else 0.0
        if n > 1 and timeout == 0.0:
            # LitServe's batched loop polls its queue without waiting when batch_timeout is
            # 0: a busy loop on an idle server
            timeout = 0.001
        super().__init__(max_batch_size=n, batch_timeout=timeout,
                         spec=KilnSpec(spec, api_path=api_path, max_body_bytes=max_body_bytes))
        self.engine_path = engine_path
        self.engine_spec = spec
        self.threads = threads
        self.warmup = warmup
        self.runner = None

    def setup(self, device):
        # Ctrl-C reaches every process of the group: the workers keep running requests in
        # flight; the main process drains and then stops them
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.runner = Runner(self.engine_path, threads=self.threads)
        if self.warmup:
            self.runner.warmup(self.max_batch_size)
        pids = self._spec.worker_pids
        wid = os.environ.get("LITSERVE_WORKER_ID")
        if pids is not None and wid is not None and int(wid) < len(pids):
            pids[int(wid)] = os.getpid()

    def predict(self, x):
        if self.max_batch_size > 1:
            return self.runner.run_batch(x)  # x: a list of requests' inputs
        return self.runner.run_one(x)

    def health(self):
        draining = self._spec.draining
        return draining is None or not draining.is_set()


def make_server(engine_path, *, workers=1, max_batch=None, timeout_ms=5.0, threads=None,
                max_body_bytes=DEFAULT_MAX_BODY_BYTES, restart_workers=True, api_cls=None,
                api_kwargs=None, warmup=True, **server_kwargs):
    """A LitServer for a .kiln file with `workers` inference workers. threads=None gives
    each worker's context an equal share of the CPU cores. api_cls: a KilnLitAPI subclass
    (with api_kwargs) to use instead. warmup: see KilnLitAPI. Start it with serve_forever(server, ...) (graceful
    shutdown) or server.run(...)."""
    workers = check_option("workers", workers, int, 1)
    if threads is None:
        threads = max(1, (os.cpu_count() or 1) // workers)
    api = (api_cls or KilnLitAPI)(engine_path, max_batch=max_batch, timeout_ms=timeout_ms,
                                  threads=threads, max_body_bytes=max_body_bytes,
                                  warmup=warmup, **(api_kwargs or {}))
    # spawn context: the workers are spawned (a fork-context array crashes them)
    api.spec.worker_pids = mp.get_context("spawn").Array("i", workers, lock=False)
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=workers,
                          restart_workers=restart_workers,
                          model_metadata=api.engine_spec.metadata(), **server_kwargs)
    server.kiln_api = api
    return server


def serve_forever(server, *, host="127.0.0.1", port=8000, drain_timeout=30.0,
                  log_level="info", **run_kwargs):
    """server.run(...) with graceful shutdown: on SIGTERM or SIGINT new requests get 503,
    requests in flight finish (up to drain_timeout seconds), then the server stops; a
    second signal stops it without waiting. A signal while the workers are still
    starting stops them at once. Returns when the server has stopped."""
    spec = server.kiln_api.spec
    draining = threading.Event()
    serving = threading.Event()  # the workers are ready: LitServer.run is past start-up
    verify = server.verify_worker_status

    def verify_then_mark():
        verify()
        serving.set()

    server.verify_worker_status = verify_then_mark

    def stop_now():
        if server._shutdown_event is not None:
            server._shutdown_event.set()

    def drain_then_stop():
        deadline = time.monotonic() + drain_timeout
        while spec.inflight.value > 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        stop_now()

    def on_signal(signum, frame):
        if not serving.is_set():
            raise KeyboardInterrupt  # LitServe's start-up cannot be told to stop
        if draining.is_set():
            stop_now()
            return
        draining.set()
        spec.draining.set()
        threading.Thread(target=drain_then_stop, name="kiln-drain", daemon=True).start()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run(host=host, port=port, log_level=log_level, generate_client_file=False,
                   **run_kwargs)
    except KeyboardInterrupt:
        if serving.is_set():
            raise
        _stop_startup(server)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _stop_startup(server):
    """Stops what LitServer.run had started when it was interrupted during start-up."""
    for p in getattr(server, "inference_workers", None) or []:
        p.terminate()
    for p in getattr(server, "inference_workers", None) or []:
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join(5)
    manager = getattr(server.transport_config, "manager", None)
    if manager is not None:
        manager.shutdown()
