"""kiln.convert_method_to_engine: a method of a torch.nn.Module -> ONNX -> kiln engine."""

import ast
import ctypes
import os
import re
import tempfile
from pathlib import Path

import torch

from . import _compat, _export, _lib
from ._lib import KilnError, Status, check, lib

_PRECISIONS = {"fp32": 0, "tf32": 1, "fp16": 2, "bf16": 3}
_TORCH_PRECISIONS = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
BUILD_OPTIONS = ("threads", "workspace", "timing_cache")


class UnsupportedOperatorError(KilnError):
    """The exported graph uses operators kiln does not implement. ``operators`` maps each
    operator ("If", "my.domain::MyOp") to the list of (node name, module path or None)."""

    def __init__(self, message, operators):
        super().__init__(Status.UNSUPPORTED, message)
        self.operators = operators


class EngineBytes(bytes):
    """The serialized engine (the bytes of a .kiln file), plus ``spec``: what the Python
    side knows about the method it came from (input names, output structure)."""

    spec = None


def parse_precision(precision):
    if isinstance(precision, torch.dtype):
        if precision not in _TORCH_PRECISIONS:
            raise ValueError(f"precision must be 'fp32', 'tf32', 'fp16' or 'bf16'; got {precision}")
        precision = _TORCH_PRECISIONS[precision]
    if precision not in _PRECISIONS:
        raise ValueError(f"precision must be 'fp32', 'tf32', 'fp16' or 'bf16'; got {precision!r}")
    return precision


def parse_device(device):
    """'cpu', 'cuda', 'cuda:N' or a torch.device -> (kiln device code, index)."""
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N'; got {device!r}") from None
    if d.type == "cpu":
        return 0, 0
    if d.type == "cuda":
        return 1, d.index or 0
    raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N'; got {device!r}")


def _check_build_options(opts):
    for k in opts:
        if k not in BUILD_OPTIONS:
            raise TypeError(
                f"unknown build option '{k}'; build options are: {', '.join(BUILD_OPTIONS)} "
                f"(and device, precision)"
            )


# ---- unsupported operators -----------------------------------------------------------

def _op_label(domain, op_type):
    return op_type if domain in ("", "ai.onnx") else f"{domain}::{op_type}"


def _op_supported(onnx, domain, op_type, opsets):
    """Asks kiln whether it imports (domain, op_type) at the model's opset, by loading a
    one-node model (kiln.h has no "is this op supported" query)."""
    h = onnx.helper
    node = h.make_node(op_type, ["x"], ["y"], domain=domain)
    graph = h.make_graph(
        [node], "probe",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid(d, v) for d, v in opsets.items()])
    data = model.SerializeToString()
    out = ctypes.c_void_p()
    L = lib()
    st = L.kiln_model_load_onnx_memory(data, len(data), None, ctypes.byref(out))
    if st == 0:
        L.kiln_model_free(out)
        return True
    msg = _lib.last_error()
    if st == Status.UNSUPPORTED and f"'{op_type}'" in msg and (
        "unsupported operator" in msg or "kiln supports" in msg
    ):
        return False
    return True


def _node_module(node, root):
    """The module path a node comes from: from the dynamo exporter's name-scope metadata,
    or from the TorchScript exporter's scoped node name ('/layer1/layer1.0/conv1/Conv')
    resolved against the module tree. None when the node has no scope."""
    for p in getattr(node, "metadata_props", []):
        if p.key == "pkg.torch.onnx.name_scopes":
            # dynamo: the module stack, root first ('') and the op itself last
            try:
                scopes = ast.literal_eval(p.value)
            except (ValueError, SyntaxError):
                return None
            if not scopes or scopes[0] != "":
                return None  # a node made by an export pass, not by a module
            mods = [s for s in scopes[1:-1] if s]
            return mods[-1] if mods else None
    name = node.name or ""
    if not name.startswith("/"):
        return None
    segments = name.strip("/").split("/")[:-1]
    if not segments:
        return None
    path, cur = [], root
    for seg in segments:
        children = dict(cur.named_children()) if cur is not None else {}
        cands = [seg, seg.rsplit(".", 1)[-1], re.sub(r"_\d+$", "", seg)]
        hit = next((c for c in cands if c in children), None)
        if hit is None:
            path.append(seg)
            cur = None
        else:
            path.append(hit)
            cur = children[hit]
    return ".".join(path)


def _unsupported_operator_error(onnx_path, module, label):
    try:
        import onnx
    except ImportError:
        return None
    model = onnx.load(str(onnx_path), load_external_data=False)
    opsets = {o.domain: o.version for o in model.opset_import}
    kinds = {}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            continue
        kinds.setdefault((n.domain, n.op_type), []).append(n)
    bad = {}
    for (domain, op_type), nodes in kinds.items():
        if not _op_supported(onnx, domain, op_type, opsets):
            bad[_op_label(domain, op_type)] = [(n.name, _node_module(n, module)) for n in nodes]
    if not bad:
        return None
    lines = [f"kiln does not support {len(bad)} operator{'s' if len(bad) > 1 else ''} "
             f"used by {label}:"]
    for op, where in bad.items():
        shown = []
        for node, mod in where[:5]:
            shown.append(f"node '{node}'" + (f" (module {mod})" if mod else ""))
        more = f" and {len(where) - 5} more" if len(where) > 5 else ""
        lines.append(f"  {op} at {', '.join(shown)}{more}")
    return UnsupportedOperatorError("\n".join(lines), bad)


# ---- building ------------------------------------------------------------------------

def _build(onnx_path, inputs, device, precision, opts, module, label):
    L = lib()
    model = ctypes.c_void_p()
    st = L.kiln_model_load_onnx(os.fsencode(str(onnx_path)), ctypes.byref(model))
    if st != 0:
        msg = _lib.last_error()
        if st == Status.UNSUPPORTED:
            err = _unsupported_operator_error(onnx_path, module, label)
            if err is not None:
                raise err
        raise KilnError(st, msg)
    builder = ctypes.c_void_p()
    engine = ctypes.c_void_p()
    try:
        check(L.kiln_builder_create(ctypes.byref(builder)))
        dev, index = parse_device(device)
        check(L.kiln_builder_set_device(builder, dev, index))
        check(L.kiln_builder_set_precision(builder, _PRECISIONS[precision]))
        if "threads" in opts:
            check(L.kiln_builder_set_threads(builder, int(opts["threads"])))
        if "workspace" in opts:
            check(L.kiln_builder_set_workspace(builder, int(opts["workspace"])))
        if opts.get("timing_cache") is not None:
            check(L.kiln_builder_set_timing_cache(builder, os.fsencode(str(opts["timing_cache"]))))
        for b in inputs:
            if b.spec.is_static:
                continue
            r = len(b.spec.min_shape)
            arr = [(ctypes.c_int64 * r)(*s) for s in (b.spec.min_shape, b.spec.opt_shape,
                                                       b.spec.max_shape)]
            check(L.kiln_builder_set_profile(builder, b.name.encode(), r, *arr))
        check(L.kiln_build(builder, model, ctypes.byref(engine)))
        got = L.kiln_engine_precision(engine)
        if got != _PRECISIONS[precision]:
            raise KilnError(Status.INTERNAL, f"kiln built a {got} engine for precision "
                                             f"{precision}")
        data = ctypes.c_void_p()
        size = ctypes.c_size_t()
        check(L.kiln_engine_serialize(engine, ctypes.byref(data), ctypes.byref(size)))
        try:
            return ctypes.string_at(data.value, size.value)
        finally:
            L.kiln_free(data)
    finally:
        L.kiln_engine_free(engine)
        L.kiln_builder_free(builder)
        L.kiln_model_free(model)


def _normalize_inputs(inputs, arg_inputs, kwarg_inputs):
    if inputs is not None and arg_inputs is not None:
        raise ValueError("give inputs= or arg_inputs= (they are aliases), not both")
    pos = inputs if inputs is not None else arg_inputs
    if pos is None and not kwarg_inputs:
        raise ValueError("no inputs given: pass inputs= (or arg_inputs=) and/or kwarg_inputs=")
    if pos is None:
        pos = ()
    elif isinstance(pos, (torch.Tensor, _export.Input)):
        pos = (pos,)
    elif isinstance(pos, list):
        pos = tuple(pos)
    elif not isinstance(pos, tuple):
        raise TypeError(
            f"inputs must be a tuple or list of tensors / kiln.Input; got {type(pos).__name__}"
        )
    kw = dict(kwarg_inputs or {})
    return pos, kw


def _restore_training(flags):
    for m, t in flags:
        m.training = t


def convert_method_to_engine(module, method_name="forward", inputs=None, arg_inputs=None,
                             kwarg_inputs=None, *, device="cpu", precision="fp32",
                             exporter="auto", opset=None, dynamic_batch=None,
                             onnx_path=None, **build_options):
    """Exports ``module.<method_name>`` to ONNX, builds a kiln engine and returns it
    serialized (an :class:`EngineBytes`, i.e. bytes with a ``spec`` attribute).

    inputs / arg_inputs: positional inputs (aliases: give one); kwarg_inputs: keyword
    inputs. Each is a torch.Tensor (that static shape and dtype; also the example
    exported with) or a :class:`kiln.Input` (dynamic shapes). dynamic_batch=(min, opt,
    max) makes dimension 0 of every tensor input dynamic.

    device: 'cpu' / 'cuda' / 'cuda:N'. precision: 'fp32' | 'tf32' | 'fp16' | 'bf16'
    (or torch.float32/float16/bfloat16); always respected: kiln fails rather than build
    another precision. exporter: 'auto' | 'torchscript' | 'dynamo'. opset: ONNX opset to
    export (default 17 for torchscript, 18 for dynamo). onnx_path: also keep the exported
    ONNX model there. build_options: threads, workspace (bytes), timing_cache (path),
    one-to-one with kiln_builder_set_*.

    The module is exported in eval mode (each submodule's train/eval flag is restored
    afterwards, also on error) under no-grad (see kiln._compat.export_grad_mode)."""
    _compat.check_torch()
    lib()  # fail before exporting when libkiln cannot be found
    _check_build_options(build_options)
    precision = parse_precision(precision)
    parse_device(device)
    label = _export.method_label(module, method_name)
    method = _export.resolve_method(module, method_name)
    pos, kw = _normalize_inputs(inputs, arg_inputs, kwarg_inputs)
    which = _export.choose_exporter(exporter)
    bound, optional = _export.bind_inputs(module, method_name, pos, kw, dynamic_batch)
    dev = _export.module_device(module)
    gen = torch.Generator().manual_seed(0)
    for b in bound:
        if b.example is None:
            b.example = b.spec.example(dev, gen)

    flags = [(m, m.training) for m in module.modules()]
    record = {"label": label}
    try:
        module.eval()
        with _compat.export_grad_mode(module):
            fwd = _export.make_forward(module, method, bound, record)
            # one eager call: checks the outputs and counts them before exporting
            flat = fwd(module, *[b.example for b in bound])
            out_names = [f"output{i}" for i in range(len(flat))]
            with tempfile.TemporaryDirectory(prefix="kiln-export-") as tmp:
                path = Path(tmp) / "model.onnx"
                if which == "dynamo":
                    _export.export_dynamo(module, fwd, bound, out_names, str(path), opset)
                else:
                    _export.export_torchscript(module, fwd, bound, out_names, str(path), opset)
                if onnx_path is not None:
                    import shutil

                    shutil.copyfile(path, onnx_path)
                    data_file = Path(str(path) + ".data")
                    if data_file.exists():
                        shutil.copyfile(data_file, str(onnx_path) + ".data")
                data = _build(path, bound, device, precision, build_options, module, label)
    finally:
        _restore_training(flags)
    out = EngineBytes(data)
    out.spec = {
        "format": "kiln-python-spec",
        "version": 1,
        "method": label,
        "inputs": [b.name for b in bound],
        "optional": optional,
        "outputs": record["tree"],
        "exporter": which,
    }
    return out
