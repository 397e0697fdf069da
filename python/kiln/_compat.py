"""Version checks and compatibility shims for the torch versions kiln supports."""

import contextlib
import dataclasses
import re
import sys

MIN_TORCH = (1, 13)
MIN_TORCH_DYNAMO = (2, 5)


def torch_version():
    """(major, minor) of the installed torch, from torch.__version__ (read on every call)."""
    import torch

    m = re.match(r"(\d+)\.(\d+)", str(torch.__version__))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def check_torch():
    """Raises RuntimeError when torch is older than kiln supports."""
    import torch

    if torch_version() < MIN_TORCH:
        raise RuntimeError(
            f"kiln needs torch {MIN_TORCH[0]}.{MIN_TORCH[1]} or newer; "
            f"this is torch {torch.__version__}"
        )


def onnxscript_available():
    try:
        import onnxscript  # noqa: F401
    except Exception:
        return False
    return True


@contextlib.contextmanager
def export_grad_mode(module):
    """The autograd mode kiln exports under: no-grad, with PyTorch's fused
    MultiheadAttention / TransformerEncoderLayer "fast path" turned off (that path has no
    ONNX export: it traces to aten::_transformer_encoder_layer_fwd or nested tensors).

    torch >= 2.1 can turn the fast path off (torch.backends.mha.set_fastpath_enabled).
    Older torch (1.13) cannot; there the only condition that keeps those modules off the
    fast path while tracing is "grad enabled and a weight requires grad", so for a module
    that contains one of them the export runs with grad mode enabled. Nothing is trained
    and no backward pass runs; the exported graph is the same."""
    import torch

    mha = getattr(getattr(torch.backends, "mha", None), "set_fastpath_enabled", None)
    if mha is not None:
        was = torch.backends.mha.get_fastpath_enabled()
        mha(False)
        try:
            with torch.no_grad():
                yield
        finally:
            mha(was)
        return
    fast_path_types = (torch.nn.MultiheadAttention, torch.nn.TransformerEncoderLayer,
                       torch.nn.TransformerEncoder)
    if any(isinstance(m, fast_path_types) for m in module.modules()):
        with torch.enable_grad():
            yield
    else:
        with torch.no_grad():
            yield


def fix_debian_torch_shard_import():
    """Makes `import torch.distributed._shard` work with Debian 12's torch 1.13 on Python
    3.11, where it fails with "ValueError: mutable default <class ...TensorProperties> for
    field tensor_properties is not allowed" (torch 1.13 predates Python 3.11's stricter
    dataclass check). PyTorch Lightning imports that module in every LightningModule's
    __init__ on torch < 2.1, so without this Lightning cannot be used on that torch at all.

    Does nothing unless that exact import fails that exact way; then imports the module
    once more with TensorProperties declared hashable (unsafe_hash=True, a field-wise hash
    consistent with its field-wise __eq__), which is what newer torch does. Returns True
    when it applied the fix."""
    if sys.version_info < (3, 11):
        return False
    try:
        import torch.distributed

        if not torch.distributed.is_available():
            return False
        import torch.distributed._shard.sharded_tensor  # noqa: F401

        return False
    except ValueError as e:
        if "mutable default" not in str(e) or "TensorProperties" not in str(e):
            raise
    real = dataclasses.dataclass
    target = "torch.distributed._shard.sharded_tensor.metadata"

    def patched(cls=None, /, **kw):
        def wrap(c):
            if c.__module__ == target and c.__name__ == "TensorProperties":
                kw2 = dict(kw)
                kw2["unsafe_hash"] = True
                return real(c, **kw2)
            return real(c, **kw)

        return wrap if cls is None else wrap(cls)

    dataclasses.dataclass = patched
    try:
        import torch.distributed._shard.sharded_tensor  # noqa: F401,F811
    finally:
        dataclasses.dataclass = real
    return True
