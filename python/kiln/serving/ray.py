"""A kiln engine as a Ray Serve deployment (online, across a Ray cluster) and in Ray Data
pipelines (offline batch inference).

    import ray
    from ray import serve
    from kiln.serving.ray import build_app, map_batches, put_engine

    ray.init()                                        # or ray.init(address="auto") on a cluster
    serve.run(build_app("/shared/model.kiln", num_replicas=2, max_batch=8), route_prefix="/")
    # POST http://HOST:8000/predict, GET /metadata, GET /health (formats: kiln.serving.core)

    out = map_batches(ray.data.from_numpy(x).rename_columns({"data": "x"}),
                      "/shared/model.kiln", actors=2)        # a Dataset with the outputs

The engine (`engine` below) is a .kiln path every node can read (shared storage: NFS, a
cluster file system, or the same path copied to every node), the engine's bytes, or an
ObjectRef of them (put_engine: the object store ships it to the nodes that need it; the
driver that put it owns it and must stay alive). ONNX models are built into an engine
first (kiln.serving.prepare_engine).

Each replica / actor loads the engine once and holds one execution context (Runner).
Requests are decoded and validated in the replica before they join a batch, so a bad one
gets its 4xx alone; @serve.batch collects up to max_batch requests, whose rows run as
engine runs of at most the profile's max rows (in a thread, so the replica keeps
accepting requests) and are split back.
"""

import asyncio
import os
import tempfile
from pathlib import Path

import numpy as np
import ray
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .core import (DEFAULT_MAX_BODY_BYTES, EngineSpec, RequestError, RunFailure, Runner,
                   check_option, encode, read_body)


def put_engine(path):
    """Puts an engine file's bytes in Ray's object store; pass the ObjectRef as `engine`."""
    return ray.put(Path(path).read_bytes())


def _local_engine(engine):
    """(path of the engine on this node, temporary file to remove or None)."""
    if isinstance(engine, (list, tuple)) and len(engine) == 1:
        engine = engine[0]  # [ref]: a reference Ray passed through unresolved
    if isinstance(engine, ray.ObjectRef):
        engine = ray.get(engine)
    if isinstance(engine, (bytes, bytearray, memoryview)):
        fd, tmp = tempfile.mkstemp(prefix="kiln-engine-", suffix=".kiln")
        with os.fdopen(fd, "wb") as f:
            f.write(engine)
        return tmp, tmp
    path = os.fspath(engine)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"engine file {path} is not on this node "
                                f"({ray.util.get_node_ip_address()}): put it on shared "
                                f"storage, or pass its bytes / put_engine(path)")
    return path, None


def _error(status, message):
    return JSONResponse({"error": message}, status_code=status)


class _EngineHolder:
    """A Runner for `engine` (path, bytes or ObjectRef) on this node; a temporary copy of
    the engine made for it is removed with the object."""

    def __init__(self, engine, threads):
        path, self._tmp = _local_engine(engine)
        self.runner = Runner(path, threads=threads)
        self.spec = self.runner.spec

    def __del__(self):
        if getattr(self, "_tmp", None):
            try:
                os.unlink(self._tmp)
            except OSError:
                pass


class KilnServer(_EngineHolder):
    """The body of the Ray Serve deployment (KilnDeployment below): one Runner per
    replica; POST /predict (or POST /), GET /metadata, GET /health."""

    def __init__(self, engine, *, max_batch=None, timeout_ms=5.0, threads=None,
                 max_body_bytes=DEFAULT_MAX_BODY_BYTES, request_timeout_s=60.0, warmup=True):
        super().__init__(engine, threads)
        self.max_body_bytes = int(max_body_bytes)
        self.request_timeout_s = float(request_timeout_s)
        if self.spec.batchable:
            n = self.spec.max_rows if max_batch is None else int(max_batch)
        else:
            n = 1
        self._batched.set_max_batch_size(max(n, 1))
        self._batched.set_batch_wait_timeout_s(max(float(timeout_ms), 0.0) / 1000.0)
        if warmup:  # every batch size once before the replica takes requests (Runner.warmup)
            self.runner.warmup(n if self.spec.batchable else None)

    def check_health(self):
        pass  # Ray Serve's health check: the replica answers

    async def __call__(self, request: Request) -> Response:
        path = request.url.path.rstrip("/")
        if request.method == "GET" and path.endswith("/metadata"):
            return JSONResponse(self.spec.metadata())
        if request.method == "GET" and path.endswith("/health"):
            return Response("ok")
        if request.method != "POST":
            return _error(405, f"{request.method} {request.url.path}: POST /predict, GET "
                               f"/metadata or GET /health")
        try:
            body = await read_body(request, self.max_body_bytes)
            feeds, fmt = self.spec.decode(body, request.headers.get("content-type", ""))
        except RequestError as e:
            return _error(e.status, e.message)
        try:
            outputs = await asyncio.wait_for(self._batched(feeds), self.request_timeout_s)
        except asyncio.TimeoutError:
            return _error(504, f"no answer within {self.request_timeout_s:g} s")
        if isinstance(outputs, RunFailure):
            return _error(outputs.http_status, outputs.message)
        data, media = encode(outputs, fmt, request.headers.get("accept", ""))
        return Response(content=data, media_type=media,
                        headers={"X-Kiln-Batch": outputs.header()})

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.005)
    async def _batched(self, requests):
        # up to max_batch requests; run_batch packs their rows into runs of at most the
        # profile's max rows
        return await asyncio.to_thread(self.runner.run_batch, requests)


KilnDeployment = serve.deployment(KilnServer, name="kiln")


def _autoscaling_keys():
    """The keys Ray Serve's autoscaling_config takes (its pydantic model's fields)."""
    from ray.serve.config import AutoscalingConfig

    fields = getattr(AutoscalingConfig, "model_fields", None) or AutoscalingConfig.__fields__
    return sorted(fields)


def _check_serve_options(num_replicas, autoscaling_config, max_batch, timeout_ms, num_cpus,
                         num_gpus, threads, max_ongoing_requests, max_body_bytes,
                         request_timeout_s):
    """build_app's numbers, checked on the driver before anything is deployed (values Ray
    Serve does not refuse itself were taken: 2.7 replicas ran 2, timeout_ms=nan, a
    request_timeout_s of -1 (every request a 504), max_body_bytes=-1 (every request a 413),
    threads=-3 (every replica failing at start), an autoscaling_config key misspelt
    (ignored))."""
    if autoscaling_config is not None:
        if num_replicas is not None:
            raise ValueError("give num_replicas or autoscaling_config, not both")
        if not isinstance(autoscaling_config, dict):
            raise TypeError(f"autoscaling_config must be a dict (Ray Serve's keys), got "
                            f"{type(autoscaling_config).__name__}")
        keys = _autoscaling_keys()
        unknown = [k for k in autoscaling_config if k not in keys]
        if unknown:
            raise ValueError(f"autoscaling_config: unknown key(s) {', '.join(map(repr, unknown))} "
                             f"(Ray Serve takes: {', '.join(keys)})")
    out = {
        "num_replicas": check_option("num_replicas", 1 if num_replicas is None else num_replicas,
                                     int, 1),
        "max_batch": check_option("max_batch", max_batch, int, 1, none_ok=True),
        "timeout_ms": check_option("timeout_ms", timeout_ms, float, 0),
        "num_cpus": check_option("num_cpus", num_cpus, float, 0),
        "num_gpus": check_option("num_gpus", num_gpus, float, 0),
        "threads": check_option("threads", threads, int, 0, 1024, none_ok=True),
        "max_ongoing_requests": check_option("max_ongoing_requests", max_ongoing_requests, int, 1,
                                             none_ok=True),
        "max_body_bytes": check_option("max_body_bytes", max_body_bytes, int, 0, above=True),
        "request_timeout_s": check_option("request_timeout_s", request_timeout_s, float, 0,
                                          above=True),
    }
    return out


def build_app(engine, *, num_replicas=None, autoscaling_config=None, max_batch=None,
              timeout_ms=5.0, num_cpus=1.0, num_gpus=0.0, threads=None,
              max_ongoing_requests=None, max_body_bytes=DEFAULT_MAX_BODY_BYTES,
              request_timeout_s=60.0, name="kiln", warmup=True):
    """A Ray Serve application serving `engine` (path, bytes or ObjectRef; see the module).

    num_replicas: fixed replica count (default 1), or autoscaling_config (a dict as Ray
      Serve takes: min_replicas, max_replicas, target_ongoing_requests, ...) instead.
    Every number is checked here, before anything is deployed (ValueError naming it).
    num_cpus / num_gpus: Ray resources each replica reserves (CUDA engines: num_gpus=1).
    threads: CPU threads of each replica's context (default: num_cpus rounded, at least 1).
    max_batch / timeout_ms: @serve.batch's max requests per batch and wait to fill one
      (their rows run in chunks of at most the profile's max rows).
    request_timeout_s: a request not answered by then gets a 504 from the replica.
    warmup: each replica runs every batch size it can get once before it takes requests.
    max_ongoing_requests: requests a replica takes at once (default 2 * max_batch, or 32).
    Run it with serve.run(app, route_prefix="/")."""
    o = _check_serve_options(num_replicas, autoscaling_config, max_batch, timeout_ms, num_cpus,
                             num_gpus, threads, max_ongoing_requests, max_body_bytes,
                             request_timeout_s)
    num_replicas, max_batch, timeout_ms = o["num_replicas"], o["max_batch"], o["timeout_ms"]
    num_cpus, num_gpus, threads = o["num_cpus"], o["num_gpus"], o["threads"]
    max_ongoing_requests, max_body_bytes = o["max_ongoing_requests"], o["max_body_bytes"]
    request_timeout_s = o["request_timeout_s"]
    if threads is None:
        threads = max(1, int(round(num_cpus)))
    opts = {"ray_actor_options": {"num_cpus": num_cpus, "num_gpus": num_gpus}, "name": name}
    if autoscaling_config is not None:
        opts["autoscaling_config"] = autoscaling_config
        opts["num_replicas"] = "auto"
    else:
        opts["num_replicas"] = int(num_replicas)
    if max_ongoing_requests is None:
        # one batch running while the next one fills (Ray Serve's default, 5, would keep
        # batches small)
        max_ongoing_requests = 2 * max_batch if max_batch else 32
    opts["max_ongoing_requests"] = int(max_ongoing_requests)
    if isinstance(engine, ray.ObjectRef):
        engine = [engine]  # keep it a reference: each replica fetches it itself
    return KilnDeployment.options(**opts).bind(
        engine, max_batch=max_batch, timeout_ms=timeout_ms, threads=threads,
        max_body_bytes=max_body_bytes, request_timeout_s=request_timeout_s, warmup=warmup)


class KilnPredictor(_EngineHolder):
    """A Ray Data callable class: an engine in each actor of a pool. Takes numpy batches
    holding a column per engine input (columns={input: column} renames), returns them
    with a column per output added (or only the outputs: keep_columns=False). Batches
    larger than the profile's max rows run in chunks."""

    def __init__(self, engine, threads=None, columns=None, keep_columns=True):
        super().__init__(engine, threads)
        self.columns = dict(columns or {})
        self.keep_columns = keep_columns

    def __call__(self, batch):
        feeds = {}
        for info in self.spec.inputs:
            col = self.columns.get(info["name"], info["name"])
            if col not in batch:
                raise KeyError(f"the batch has no column '{col}' for engine input "
                               f"'{info['name']}' (columns: {', '.join(batch)}); map them "
                               f"with columns={{input: column}}")
            feeds[info["name"]] = np.asarray(batch[col])
        out = self.run_rows(feeds)
        if self.keep_columns:
            return {**batch, **out}
        return out

    def run_rows(self, feeds):
        n = next(iter(feeds.values())).shape[0]
        step = self.spec.max_rows if self.spec.batchable else None
        if step is None or n <= step:
            return self.runner.run(self.spec.validate(feeds))
        parts = [self.runner.run(self.spec.validate({k: v[s:s + step] for k, v in feeds.items()}))
                 for s in range(0, n, step)]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def map_batches(ds, engine, *, actors=1, batch_size=None, num_cpus=1.0, num_gpus=0.0,
                threads=None, columns=None, keep_columns=True):
    """ds.map_batches with a kiln engine in a pool of `actors` actors (Ray Data's
    ActorPoolStrategy), each reserving num_cpus / num_gpus. batch_size defaults to the
    engine profile's max rows. Returns the (lazy) Dataset."""
    actors = check_option("actors", actors, int, 1)
    batch_size = check_option("batch_size", batch_size, int, 1, none_ok=True)
    num_cpus = check_option("num_cpus", num_cpus, float, 0)
    num_gpus = check_option("num_gpus", num_gpus, float, 0)
    threads = check_option("threads", threads, int, 0, 1024, none_ok=True)
    if isinstance(engine, ray.ObjectRef):
        engine = [engine]
    if threads is None:
        threads = max(1, int(round(num_cpus)))
    if batch_size is None:
        path, tmp = _local_engine(engine)
        try:
            spec = EngineSpec.from_file(path)
        finally:
            if tmp:
                os.unlink(tmp)
        batch_size = spec.max_rows if spec.batchable else 1
    return ds.map_batches(
        KilnPredictor, fn_constructor_kwargs={"engine": engine, "threads": threads,
                                              "columns": columns,
                                              "keep_columns": keep_columns},
        batch_size=batch_size, batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=int(actors)),
        num_cpus=num_cpus, num_gpus=num_gpus)
