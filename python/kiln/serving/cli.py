"""`kiln serve MODEL [...]`: a kiln engine behind LitServe (kiln.serving.litserve).

MODEL is a .kiln engine file or an .onnx model (built into an engine first, in a temporary
folder removed on exit). Also runnable as `python -m kiln.serving MODEL [...]`.
"""

import argparse
import math
import shutil
import sys
import tempfile
from pathlib import Path

USAGE_EXAMPLE = """\
example:
  kiln serve model.kiln --port 8000 --workers 2 --max-batch 8 --timeout-ms 5
  curl -s localhost:8000/metadata
  curl -s localhost:8000/predict -H 'Content-Type: application/json' \\
       -d '{"inputs": {"x": {"data": [[0.5, 1.0, 2.0, 4.0]], "dtype": "float32"}}}'
"""


def _number(kind, lo, hi=None, above=False):
    """An argparse type: an int or finite float in lo..hi (above: > lo). nan, inf and
    negative sizes were taken (--max-body-mb -1 refused every request, inf was a
    traceback, --timeout-ms nan started the server)."""
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not {'an integer' if kind is int else 'a number'}")
        if not math.isfinite(v) or v < lo or (above and v == lo) or (hi is not None and v > hi):
            rng = f"> {lo}" if above else f">= {lo}" if hi is None else f"in {lo}..{hi}"
            raise argparse.ArgumentTypeError(f"'{text}' is not a finite number {rng}")
        return v
    return parse


def parser():
    p = argparse.ArgumentParser(
        prog="kiln serve", description="Serve a kiln engine over HTTP with LitServe: POST "
        "/predict (JSON, .npy or .npz), GET /metadata, GET /health.",
        epilog=USAGE_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a .kiln engine file, or an .onnx model to build one from")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on: 127.0.0.1 (default), 0.0.0.0 or ::")
    p.add_argument("--port", type=_number(int, 1, 65535), default=8000, help="port (default 8000)")
    p.add_argument("--device", default="cpu",
                   help="cpu (default), cuda or cuda:N: the device to build an ONNX model for; "
                        "a .kiln file must have been built for it")
    p.add_argument("--workers", type=_number(int, 1), default=1,
                   help="inference worker processes, each with one execution context (default 1)")
    p.add_argument("--max-batch", type=_number(int, 1), default=None,
                   help="requests batched into one run (default: the engine profile's max "
                        "batch; for an ONNX model also the profile's max batch, default 8)")
    p.add_argument("--timeout-ms", type=_number(float, 0), default=5.0,
                   help="how long a worker waits to fill a batch, in ms (default 5)")
    p.add_argument("--threads", type=_number(int, 0, 1024), default=None,
                   help="CPU threads per worker (default: the cores divided among the workers)")
    p.add_argument("--max-body-mb", type=_number(float, 0, above=True), default=64.0,
                   help="larger request bodies get 413 (default 64)")
    p.add_argument("--api-servers", type=_number(int, 1), default=None,
                   help="HTTP server processes (default: one per worker)")
    p.add_argument("--drain-timeout", type=_number(float, 0), default=30.0,
                   help="on SIGTERM/SIGINT, seconds to let requests in flight finish (default 30)")
    p.add_argument("--precision", default="fp32",
                   help="precision of an engine built from ONNX: fp32, tf32, fp16, bf16")
    for k in ("min", "opt", "max"):
        p.add_argument(f"--{k}-shapes", default=None, metavar="NAME:D0xD1x...[,...]",
                       help=f"{k} shapes of dynamic ONNX inputs (as `kiln build`)")
    p.add_argument("--no-warmup", action="store_true",
                   help="take requests at once: by default each worker first runs every batch "
                        "size once, so that no request waits for a shape's first run")
    p.add_argument("--log-level", default="info", help="LitServe/uvicorn log level (default info)")
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        from .litserve import make_server, serve_forever
    except ImportError as e:
        sys.exit(f"kiln serve: LitServe is not installed ({e}); install the serving extra: "
                 f"pip install 'kiln[serve]'")
    from .._lib import KilnError
    from .core import prepare_engine

    work = None
    try:
        if Path(args.model).suffix.lower() == ".onnx":
            work = tempfile.mkdtemp(prefix="kiln-serve-")
            print(f"kiln serve: building an engine from {args.model} for {args.device}",
                  file=sys.stderr)
        try:
            engine = prepare_engine(args.model, device=args.device, max_batch=args.max_batch or 8,
                                    precision=args.precision, threads=args.threads,
                                    work_dir=work, min_shapes=args.min_shapes,
                                    opt_shapes=args.opt_shapes, max_shapes=args.max_shapes)
            server = make_server(engine, workers=args.workers, max_batch=args.max_batch,
                                 timeout_ms=args.timeout_ms, threads=args.threads,
                                 max_body_bytes=int(args.max_body_mb * (1 << 20)),
                                 warmup=not args.no_warmup)
        except (OSError, ValueError, KilnError) as e:
            sys.exit(f"kiln serve: {e}")
        serve_forever(server, host=args.host, port=args.port, drain_timeout=args.drain_timeout,
                      log_level=args.log_level, num_api_servers=args.api_servers)
    finally:
        if work:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
