"""PyTorch Lightning integration: LightningModule -> kiln engine.

    import kiln.lightning
    engine = kiln.lightning.to_engine(model, "model.kiln")          # uses example_input_array
    class Model(kiln.lightning.EngineMixin, L.LightningModule): ...   # model.to_engine(...)
    trainer = L.Trainer(callbacks=[kiln.lightning.EngineExportCallback("model.kiln")])

Works with the `lightning` package (lightning.pytorch) and with `pytorch_lightning`; the
callback is a Callback of whichever of them is installed (of both, when both are).
to_engine itself needs neither: it works on any module following LightningModule's
conventions (example_input_array, batch-transfer hooks).

Importing this module also applies kiln._compat.fix_debian_torch_shard_import (only
when Debian's torch 1.13 + Python 3.11 would otherwise make every LightningModule()
fail; see there).
"""

import os
import weakref
from pathlib import Path

import torch

from . import _compat, _files
from ._convert import check_options, convert_method_to_engine, convert_options
from ._export import Input
from ._module import EngineModule, save

_compat.fix_debian_torch_shard_import()

_callback_bases = []
for _mod in ("lightning.pytorch", "pytorch_lightning"):
    try:
        _pl = __import__(_mod, fromlist=["Callback"])
        _callback_bases.append(_pl.Callback)
    except Exception:  # not installed, or broken: the other one may do
        pass
# the Lightning package used by default (tests and examples use it too)
pl = None
for _mod in ("lightning.pytorch", "pytorch_lightning"):
    try:
        pl = __import__(_mod, fromlist=["Trainer"])
        break
    except Exception:
        pass

NO_SAMPLE = (
    "kiln.lightning.to_engine: no input_sample was given and the module has no "
    "example_input_array; pass input_sample=... or set self.example_input_array"
)


def _has_input_specs(sample):
    if isinstance(sample, Input):
        return True
    if isinstance(sample, (tuple, list)):
        return any(_has_input_specs(s) for s in sample)
    if isinstance(sample, dict):
        return any(_has_input_specs(s) for s in sample.values())
    return False


def _module_device(module):
    dev = getattr(module, "device", None)
    if isinstance(dev, torch.device):
        return dev
    for p in module.parameters():
        return p.device
    return torch.device("cpu")


def _trainer_usable(module):
    """False when the module's trainer reference is a weak proxy to a Trainer that is
    gone (Lightning's own batch-hook helpers then fail with ReferenceError)."""
    try:
        bool(getattr(module, "_trainer", None))
    except ReferenceError:
        return False
    return True


def _transfer(module, sample, device):
    """The sample through the module's batch-transfer hooks, as Lightning does for
    to_onnx: on_before_batch_transfer, transfer_batch_to_device, on_after_batch_transfer
    (through Lightning's helpers, which also run a datamodule's hooks, while the module's
    Trainer exists; else the module's own hooks directly)."""
    if (hasattr(module, "_on_before_batch_transfer")
            and hasattr(module, "_apply_batch_transfer_handler") and _trainer_usable(module)):
        sample = module._on_before_batch_transfer(sample)
        return module._apply_batch_transfer_handler(sample, device=device)
    if hasattr(module, "on_before_batch_transfer"):
        sample = module.on_before_batch_transfer(sample, 0)
    if hasattr(module, "transfer_batch_to_device"):
        sample = module.transfer_batch_to_device(sample, device, 0)
    if hasattr(module, "on_after_batch_transfer"):
        sample = module.on_after_batch_transfer(sample, 0)
    return sample


def to_engine_options():
    """Every option of to_engine: its own and those of convert_method_to_engine it passes
    on."""
    own = ["file_path", "input_sample", "method_name"]
    return own + [n for n in convert_options()
                  if n not in own and n not in ("inputs", "arg_inputs", "kwarg_inputs")]


def to_engine(module, file_path=None, input_sample=None, method_name="forward",
              **build_options):
    """Builds a kiln engine of ``module.<method_name>`` and returns it as an EngineModule;
    also writes it to ``file_path`` (str/Path: atomically; BytesIO / binary file object)
    when given.

    input_sample: a Tensor (one positional input), a tuple/list (positional inputs) or a
    dict (keyword inputs); elements may be kiln.Input for dynamic shapes. Default: the
    module's example_input_array. A tensor sample goes through the module's batch-transfer
    hooks (on_before_batch_transfer, transfer_batch_to_device, on_after_batch_transfer),
    to the module's device, as in Lightning's to_onnx; samples holding kiln.Input are
    passed as they are.

    build_options: everything kiln.convert_method_to_engine takes (device, precision,
    exporter, opset, dynamic_batch, threads, workspace, timing_cache, ...).

    Export happens in eval mode under no-grad; each submodule's train/eval flag and the
    module's device are restored afterwards, also when the export fails. No GPU needed
    (CPU engines).

    Bad arguments fail before the export: an unknown option (the message lists every
    option), or a file_path of the wrong type, in a folder that does not exist, or that
    is a folder (the message names file_path)."""
    check_options(build_options, "kiln.lightning.to_engine", to_engine_options())
    if file_path is not None:
        _files.check_output_path(file_path, "file_path")
        _files.check_engine_target(file_path, "file_path")
    if input_sample is None:
        input_sample = getattr(module, "example_input_array", None)
        if input_sample is None:
            raise ValueError(NO_SAMPLE)
    flags = [(m, m.training) for m in module.modules()]
    device = _module_device(module)
    detached, proxy = False, None
    try:
        if not _has_input_specs(input_sample):
            input_sample = _transfer(module, input_sample, device)
        if isinstance(input_sample, dict):
            args, kwargs = None, dict(input_sample)
        elif isinstance(input_sample, (tuple, list)):
            args, kwargs = tuple(input_sample), None
        else:
            args, kwargs = (input_sample,), None
        # A LightningModule refers to its Trainer through a weak proxy, which dies with the
        # Trainer (at any garbage collection); on torch < 2.1, Lightning's sharded-tensor
        # state_dict hook then fails on every state_dict(), which the exporters call.
        # Detach it for the export and put it back afterwards.
        proxy = module.__dict__.get("_trainer")
        if isinstance(proxy, (weakref.ProxyType, weakref.CallableProxyType)):
            module.__dict__["_trainer"] = None
            detached = True
        data = convert_method_to_engine(module, method_name, inputs=args, kwarg_inputs=kwargs,
                                        **build_options)
    finally:
        for m, t in flags:
            m.training = t
        if _module_device(module) != device:
            module.to(device)
        if detached:
            module.__dict__["_trainer"] = proxy
    engine = EngineModule(data)
    if file_path is not None:
        save(data, file_path)  # paths atomically; the output structure is inside the engine
    return engine


class EngineMixin:
    """Gives a LightningModule subclass a ``to_engine`` method:

        class Model(kiln.lightning.EngineMixin, L.LightningModule): ...
        model.to_engine("model.kiln", dynamic_batch=(1, 8, 64))
    """

    def to_engine(self, file_path=None, input_sample=None, method_name="forward",
                  **build_options):
        return to_engine(self, file_path, input_sample, method_name, **build_options)


class _NoLightning:
    def __init__(self, *a, **k):
        raise ImportError("kiln.lightning.EngineExportCallback needs lightning or "
                          "pytorch_lightning installed")


_Base = type("_EngineExportBase", tuple(_callback_bases) or (_NoLightning,), {})


class EngineExportCallback(_Base):
    """A Lightning Callback that builds a kiln engine of the trained module at the end
    of ``fit`` and writes it to ``file_path`` (on global rank 0 only). input_sample,
    method_name and build options as for to_engine. The EngineModule is kept in
    ``self.engine`` (None before fit ends)."""

    def __init__(self, file_path, input_sample=None, method_name="forward", **build_options):
        # wrong arguments fail here, not after training (the folder may be made at fit end)
        check_options(build_options, "kiln.lightning.EngineExportCallback",
                      to_engine_options())
        if not isinstance(file_path, (str, os.PathLike)) or Path(file_path).is_dir():
            _files.check_output_path(file_path, "file_path")
        super().__init__()
        self.file_path = file_path
        self.input_sample = input_sample
        self.method_name = method_name
        self.build_options = build_options
        self.engine = None

    def on_fit_end(self, trainer, pl_module):
        if not getattr(trainer, "is_global_zero", True):
            return
        if isinstance(self.file_path, (str, os.PathLike)):
            Path(self.file_path).parent.mkdir(parents=True, exist_ok=True)
        self.engine = to_engine(pl_module, self.file_path, self.input_sample, self.method_name,
                                **self.build_options)


__all__ = ["to_engine", "EngineMixin", "EngineExportCallback", "NO_SAMPLE", "pl"]
