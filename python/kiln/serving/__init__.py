"""Serving kiln engines: behind LitServe on one machine, as a Ray Serve deployment across
many, and in Ray Data pipelines for offline batch inference.

    kiln serve model.kiln --port 8000 --workers 2 --max-batch 8 --timeout-ms 5
    python -m kiln.serving model.onnx --device cpu          (the same, without the script)

    from kiln.serving.litserve import KilnLitAPI, make_server
    from kiln.serving.ray import KilnDeployment, build_app, map_batches

The serving frameworks are an optional extra (``pip install kiln[serve]``:
litserve, ray[serve,data]); ``import kiln`` and ``import kiln.serving`` work without
them, and only kiln.serving.litserve / kiln.serving.ray import them. The request and
response formats, validation and batching shared by both live in kiln.serving.core.
"""

from .core import EngineSpec, RequestError, Runner, prepare_engine

__all__ = ["EngineSpec", "RequestError", "Runner", "prepare_engine"]
