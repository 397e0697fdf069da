"""kiln.convert_method_to_engine: a method of a torch.nn.Module -> ONNX -> kiln engine."""

import ast
import contextlib
import ctypes
import difflib
import hashlib
import inspect
import json
import os
import re
import tempfile
import warnings
from pathlib import Path

import torch

from . import _compat, _export, _files, _lib
from ._lib import KilnError, Status, check, lib

_PRECISIONS = {"fp32": 0, "tf32": 1, "fp16": 2, "bf16": 3}
_TORCH_PRECISIONS = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
_PRECISION_ORDER = ("fp16", "bf16", "tf32", "fp32")  # the most reduced first
BUILD_OPTIONS = ("threads", "workspace", "timing_cache", "fast_math")
# Engine metadata key of the spec (EngineBytes.spec): what EngineModule needs to give
# back the method's output structure, inside the engine file.
SPEC_KEY = "python.spec"
# Torch-TensorRT's ir= values, as kiln exporters (None: exporter= decides)
_IR = {"default": None, "ts": "torchscript", "torchscript": "torchscript",
       "dynamo": "dynamo", "exported_program": "dynamo"}


class UnsupportedOperatorError(KilnError):
    """The exported graph uses operators kiln does not implement. ``operators`` maps each
    operator ("If", "my.domain::MyOp") to the list of (node name, module path or None)."""

    def __init__(self, message, operators):
        super().__init__(Status.UNSUPPORTED, message)
        self.operators = operators


class EngineBytes(bytes):
    """The serialized engine (the bytes of a .kiln file), plus ``spec``: what the Python
    side knows about the method it came from (input names, output structure). The bytes
    hold the spec too, as the engine's metadata 'python.spec'."""

    spec = None
    _spec_json = None  # the spec the bytes hold (spec_json form)


def spec_json(spec):
    """The spec as the engine's metadata holds it."""
    return json.dumps(spec, separators=(",", ":"))


def parse_precision(precision, what="precision"):
    if isinstance(precision, torch.dtype):
        if precision not in _TORCH_PRECISIONS:
            raise ValueError(f"{what} must be 'fp32', 'tf32', 'fp16' or 'bf16'; got {precision}")
        precision = _TORCH_PRECISIONS[precision]
    if not isinstance(precision, str) or precision not in _PRECISIONS:
        raise ValueError(f"{what} must be 'fp32', 'tf32', 'fp16' or 'bf16'; got {precision!r}")
    return precision


def parse_precisions(precision, enabled_precisions):
    """(the precision to build, the ones to fall back to) from kiln's precision= (one
    precision, always respected) or Torch-TensorRT's enabled_precisions= (a set of the
    precisions the engine may use: kiln builds the most reduced one, fp16/bf16 before
    tf32 before fp32, and falls back to the next when the device cannot build it)."""
    if enabled_precisions is None:
        return parse_precision("fp32" if precision is None else precision), ()
    if precision is not None:
        raise ValueError("give precision= or enabled_precisions= (Torch-TensorRT's name), "
                         "not both")
    items = enabled_precisions
    if isinstance(items, (str, torch.dtype)):
        items = {items}
    if not isinstance(items, (set, frozenset, list, tuple)) or not items:
        raise TypeError(f"enabled_precisions must be a set of precisions, e.g. {{torch.half}} "
                        f"or {{'fp32', 'fp16'}}; got {enabled_precisions!r}")
    got = {parse_precision(p, "each of enabled_precisions") for p in items}
    if {"fp16", "bf16"} <= got:
        raise ValueError("enabled_precisions holds both fp16 and bf16; a kiln engine computes "
                         "in one reduced precision: keep one of them")
    order = [p for p in _PRECISION_ORDER if p in got]
    return order[0], tuple(order[1:])


def map_ir(ir, exporter):
    """exporter= from Torch-TensorRT's ir= (None: exporter as given)."""
    if ir is None:
        return exporter
    if not isinstance(ir, str) or ir not in _IR:
        raise ValueError(
            f"ir={ir!r} is not supported: kiln exports the method to ONNX ahead of time; "
            f"kiln's option is exporter= ('auto', 'torchscript' or 'dynamo'), and ir='default', "
            f"'ts' / 'torchscript' and 'dynamo' / 'exported_program' map to it")
    mapped = _IR[ir]
    if mapped is None:
        return exporter
    if exporter != "auto" and exporter != mapped:
        raise ValueError(f"ir={ir!r} means exporter='{mapped}', but exporter={exporter!r} "
                         f"was given")
    return mapped


def check_output_format(output_format, where):
    """Torch-TensorRT's output_format=: kiln writes kiln engines only."""
    if output_format is None or output_format == "kiln":
        return
    raise ValueError(
        f"output_format={output_format!r} is not supported: {where} makes kiln engines "
        f"(output_format='kiln'); kiln.save(engine, path) writes the .kiln file, and an "
        f"EngineModule goes into torch.save / state_dict like any module")


def convert_options():
    """Every option of convert_method_to_engine (its keyword parameters and the build
    options), for the unknown-option message."""
    sig = inspect.signature(convert_method_to_engine)
    return [n for n, p in sig.parameters.items()
            if n != "module" and p.kind != p.VAR_KEYWORD] + list(BUILD_OPTIONS)


def check_options(opts, fn_label, names):
    """TypeError for the first key of opts not in names, listing every option."""
    for k in opts:
        if k not in names:
            close = difflib.get_close_matches(k, names, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise TypeError(f"unknown option '{k}'{hint}; {fn_label} takes: {', '.join(names)}")


def parse_device(device):
    """'cpu', 'cuda', 'cuda:N' or a torch.device -> (kiln device code, index). A string is
    read by kiln (kiln_device_parse, as the CLI's --device): torch 1.13 keeps a device
    index in 8 bits, so torch.device('cuda:300') is cuda:44 and 'cuda:1023' cuda:0."""
    if isinstance(device, str):
        dev, index = ctypes.c_int(), ctypes.c_int()
        try:
            check(lib().kiln_device_parse(_lib.c_text(device, "device"), ctypes.byref(dev),
                                          ctypes.byref(index)))
        except KilnError as e:
            raise ValueError(str(e)) from None
        return dev.value, index.value
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N'; got {device!r}") from None
    if d.type == "cpu":
        return 0, 0
    if d.type == "cuda":
        return 1, d.index or 0
    raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N'; got {device!r}")


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


# ---- operators the exporter cannot export --------------------------------------------

_EXPORT_UNSUPPORTED = (
    # torch.onnx.export's TorchScript exporter (torch 1.13 .. 2.x)
    re.compile(r"Exporting the operator '?([\w.:]+?)'? to ONNX opset version \d+ is not "
               r"supported"),
    re.compile(r"Unsupported: ONNX export of operator ([\w.:]+)"),
    # the dynamo exporter (torch >= 2.5)
    re.compile(r"No ONNX function found for <?(?:OpOverload\(op=')?([\w.:]+)"),
)


def _aten_name(raw):
    """'aten::i0' from 'aten::i0', 'aten.i0' or 'aten.i0.default'."""
    if "::" in raw:
        return raw
    parts = raw.split(".")
    return f"{parts[0]}::{parts[1]}" if len(parts) >= 2 else raw


def _exporter_ops(exc):
    """The operators an exporter's exception (or one it was raised from) says it cannot
    export, in order."""
    ops, seen = [], set()
    e = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        for pat in _EXPORT_UNSUPPORTED:
            for m in pat.finditer(str(e)):
                name = _aten_name(m.group(1))
                if name not in ops:
                    ops.append(name)
        e = e.__cause__ or e.__context__
    return ops


def _locate_ops(module, run, ops):
    """{op: [module paths]}: the submodules whose forward was running when `run()` (one
    eager call of the method) called each op, found with forward hooks and torch's
    dispatch and function modes (aten names at dispatch, 'fft_rfft'-style names at the
    function level). Best effort: [] where nothing is found (the method's own code, or
    ScriptModules, whose submodules take no hooks)."""
    found = {op: [] for op in ops}
    short = {op.split("::", 1)[1]: op for op in ops if op.startswith("aten::")}
    stack, handles = [], []

    def hit(op):
        path = stack[-1] if stack else ""
        if path and path not in found[op]:
            found[op].append(path)

    def enter(name):
        def pre_hook(mod, inp):  # returns None: the input stays as it is
            stack.append(name)
        return pre_hook

    def leave(mod, inp, out):  # returns None: the output stays as it is
        if stack:
            stack.pop()

    for name, m in module.named_modules():
        if not name:
            continue
        try:
            handles.append(m.register_forward_pre_hook(enter(name)))
            handles.append(m.register_forward_hook(leave))
        except RuntimeError:  # ScriptModules
            pass
    modes = []
    try:
        from torch.utils._python_dispatch import TorchDispatchMode

        class _Dispatch(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = getattr(getattr(func, "_schema", None), "name", None)
                if name in found:
                    hit(name)
                return func(*args, **(kwargs or {}))

        modes.append(_Dispatch())
    except Exception:  # noqa: BLE001 (an older or newer torch without it)
        pass
    try:
        from torch.overrides import TorchFunctionMode

        class _Function(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                op = short.get(getattr(func, "__name__", None))
                if op is not None:
                    hit(op)
                return func(*args, **(kwargs or {}))

        modes.append(_Function())
    except Exception:  # noqa: BLE001
        pass
    try:
        with contextlib.ExitStack() as ctx:
            for m in modes:
                ctx.enter_context(m)
            run()
    except Exception:  # noqa: BLE001 (locating is best effort; the export error stands)
        pass
    finally:
        for h in handles:
            h.remove()
    return found


def _drop_tracebacks(exc):
    """Clears the tracebacks of exc and the exceptions it chains. The exporter's frames
    hold its TorchScript graphs; on torch 1.13, two failed exports whose frames stay alive
    (a kiln error chaining them, kept by the caller or by pytest) make every later export
    in the process fail ("Unable to cast from non-held to held instance"). The messages
    stay."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc.__traceback__ = None
        exc = exc.__cause__ or exc.__context__


def _exporter_error(exc, module, run, label, which, opset):
    """kiln.UnsupportedOperatorError for an exporter's "cannot export operator X", naming
    each operator and the submodules that call it; None for other exporter errors."""
    ops = _exporter_ops(exc)
    if not ops:
        return None
    where = _locate_ops(module, run, ops)
    mods = dict(module.named_modules())
    opset = opset or (17 if which == "torchscript" else 18)
    n = len(ops)
    lines = [f"the {which} exporter (torch.onnx.export, opset {opset}) cannot export {n} "
             f"operator{'s' if n > 1 else ''} used by {label}, so kiln never saw the model:"]
    for op in ops:
        paths = where[op]
        shown = ", ".join(f"module {p} ({_export.module_name(mods[p])})" if p in mods
                          else f"module {p}" for p in paths[:5])
        more = f" and {len(paths) - 5} more" if len(paths) > 5 else ""
        lines.append(f"  {op}" + (f" in {shown}{more}" if paths else ""))
    other = ("exporter='dynamo' (torch >= 2.5 with onnxscript)" if which == "torchscript"
             else "exporter='torchscript'")
    lines.append(f"replace it in the model, or try {other} or another opset")
    return UnsupportedOperatorError(
        "\n".join(lines), {op: [(None, p) for p in where[op]] for op in ops})


# ---- building ------------------------------------------------------------------------

def _graph_tensors(graph):
    """Every TensorProto of an ONNX graph: initializers and tensor attributes, subgraphs
    included (where external data can be referred to)."""
    yield from graph.initializer
    for node in graph.node:
        yield from _node_tensors(node)


def _node_tensors(node):
    for a in node.attribute:
        if a.HasField("t"):
            yield a.t
        yield from a.tensors
        if a.HasField("g"):
            yield from _graph_tensors(a.g)
        for g in a.graphs:
            yield from _graph_tensors(g)


def _data_path(onnx_path):
    """The file beside `onnx_path` that keeps its external data: `<name>.data`, or, where
    that is longer than the folder's file system takes (a name near its 255-byte limit),
    the name cut short with 8 hex of its hash: `<first bytes of name>-<hash>.data`, so
    that two long names still differ (whole UTF-8 characters: the model names it in a
    protobuf string)."""
    onnx_path = Path(os.fsdecode(os.fspath(onnx_path)))
    name = os.fsencode(onnx_path.name)
    try:
        limit = os.pathconf(onnx_path.parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    if len(name) + 5 <= limit:
        return onnx_path.parent / os.fsdecode(name + b".data")
    tail = b"-" + hashlib.sha256(name).hexdigest()[:8].encode() + b".data"
    head = name[:max(1, limit - len(tail))]
    while head:
        try:
            head.decode("utf-8")
            break
        except UnicodeDecodeError:
            head = head[:-1]
    return onnx_path.parent / os.fsdecode(head + tail)


def _keep_onnx(path, onnx_path):
    """Copies the exported model at `path` to `onnx_path`, as kiln.save writes (atomically,
    replacing a link rather than writing through it). Weights the exporter stored beside it
    (`<path>.data`, the dynamo exporter's external data) go to `<onnx_path>.data`
    (_data_path: a shorter name where that one is too long), and the copy's tensors refer
    to that name: the exporter wrote the temporary file's name into them, which a model
    kept under another name would not find."""
    path = Path(path)
    data_file = Path(str(path) + ".data")
    if not data_file.exists():
        _files.atomic_write(onnx_path, source=path)
        return
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    new_data = _data_path(onnx_path)
    tensors = list(_graph_tensors(model.graph))
    for f in model.functions:
        for node in f.node:
            tensors.extend(_node_tensors(node))
    for t in tensors:
        for e in t.external_data:
            if e.key == "location" and e.value == data_file.name:
                e.value = new_data.name
    _files.atomic_write(new_data, source=data_file)
    _files.atomic_write(onnx_path, model.SerializeToString())


def _build(onnx_path, inputs, device, precision, opts, module, label, metadata):
    L = lib()
    model = ctypes.c_void_p()
    st = L.kiln_model_load_onnx(_lib.c_path(str(onnx_path)), ctypes.byref(model))
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
            check(L.kiln_builder_set_threads(builder, _lib.c_int(opts["threads"], 0, 1024,
                                                                 "threads")))
        if "workspace" in opts:
            check(L.kiln_builder_set_workspace(builder, _lib.c_int(opts["workspace"], 0, 2**64 - 1,
                                                                   "workspace (bytes)")))
        if opts.get("timing_cache") is not None:
            check(L.kiln_builder_set_timing_cache(builder, _lib.c_path(str(opts["timing_cache"]))))
        if "fast_math" in opts:
            if not isinstance(opts["fast_math"], bool):
                raise TypeError("fast_math must be True or False, got %r" % (opts["fast_math"],))
            check(L.kiln_builder_set_fast_math(builder, int(opts["fast_math"])))
        for key, value in metadata.items():
            check(L.kiln_builder_set_metadata(builder, _lib.c_text(key, "metadata key"),
                                              _lib.c_text(value, f"metadata '{key}' value")))
        for b in inputs:
            if b.spec.is_static:
                continue
            r = len(b.spec.min_shape)
            arr = [(ctypes.c_int64 * r)(*s) for s in (b.spec.min_shape, b.spec.opt_shape,
                                                       b.spec.max_shape)]
            check(L.kiln_builder_set_profile(builder, _lib.c_text(b.name, "input name"), r, *arr))
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


def _build_with_fallback(path, bound, device, precisions, opts, module, label, metadata):
    """_build at precisions[0]; where the device cannot build that precision
    (KILN_ERR_UNSUPPORTED naming it) and enabled_precisions allowed others, at the next
    one, with a warning."""
    for i, precision in enumerate(precisions):
        try:
            return _build(path, bound, device, precision, opts, module, label, metadata)
        except UnsupportedOperatorError:
            raise
        except KilnError as e:
            if (i + 1 == len(precisions) or e.status != Status.UNSUPPORTED
                    or f"precision {precision}" not in e.message):
                raise
            warnings.warn(f"kiln: {e.message}; building {precisions[i + 1]}, which "
                          f"enabled_precisions also allows", stacklevel=3)
    raise AssertionError("unreachable")


def convert_method_to_engine(module, method_name="forward", inputs=None, arg_inputs=None,
                             kwarg_inputs=None, *, device="cpu", precision=None,
                             enabled_precisions=None, exporter="auto", ir=None, opset=None,
                             dynamic_batch=None, onnx_path=None, workspace_size=None,
                             output_format=None, **build_options):
    """Exports ``module.<method_name>`` to ONNX, builds a kiln engine and returns it
    serialized (an :class:`EngineBytes`, i.e. bytes with a ``spec`` attribute; the spec is
    also inside the engine, as metadata 'python.spec').

    module: a torch.nn.Module, or a ScriptModule (torch.jit.script / torch.jit.trace; it
    is exported by the TorchScript exporter). inputs / arg_inputs: positional inputs
    (aliases: give one); kwarg_inputs: keyword inputs. Each is a torch.Tensor (that
    static shape and dtype; also the example exported with) or a :class:`kiln.Input`
    (dynamic shapes). dynamic_batch=(min, opt, max) makes dimension 0 of every tensor
    input dynamic (one batch); dynamic_batch={name: (min, opt, max)} only that of the
    inputs named.

    device: 'cpu' / 'cuda' / 'cuda:N'. precision: 'fp32' (default) | 'tf32' | 'fp16' |
    'bf16' (or torch.float32/float16/bfloat16); always respected: kiln fails rather than
    build another precision. enabled_precisions (Torch-TensorRT's name, instead of
    precision): a set of the precisions the engine may use; kiln builds the most reduced
    (fp16/bf16, then tf32, then fp32), and the next one, with a warning, where the device
    cannot build it. exporter: 'auto' | 'torchscript' | 'dynamo'; ir (Torch-TensorRT's
    name): 'default', 'ts'/'torchscript' or 'dynamo'/'exported_program', mapped to
    exporter. opset: ONNX opset to export (default 17 for torchscript, 18 for dynamo).
    onnx_path: also keep the exported ONNX model there (weights the exporter stores
    outside the model, as the dynamo exporter does, go to `<onnx_path>.data`, cut short
    with a hash where that name is too long for the file system, and the kept model names
    that file). build_options: threads,
    workspace (bytes; workspace_size is Torch-TensorRT's name), timing_cache (path),
    fast_math (True: the tuner may also choose kernels that are faster but round more,
    e.g. Winograd convolutions on the CPU; default False), one-to-one with
    kiln_builder_set_*. output_format: only 'kiln'.

    The module is exported in eval mode (each submodule's train/eval flag is restored
    afterwards, also on error) under no-grad (see kiln._compat.export_grad_mode)."""
    _compat.check_torch()
    lib()  # fail before exporting when libkiln cannot be found
    check_options(build_options, "kiln.convert_method_to_engine", convert_options())
    check_output_format(output_format, "kiln.convert_method_to_engine")
    if workspace_size is not None:
        if "workspace" in build_options:
            raise ValueError("give workspace= or workspace_size= (Torch-TensorRT's name), "
                             "not both")
        build_options["workspace"] = workspace_size
    precisions = parse_precisions(precision, enabled_precisions)
    precisions = (precisions[0],) + precisions[1]
    parse_device(device)
    if onnx_path is not None:
        _files.check_output_path(onnx_path, "onnx_path")
    label = _export.method_label(module, method_name)
    method = _export.resolve_method(module, method_name)
    pos, kw = _normalize_inputs(inputs, arg_inputs, kwarg_inputs)
    which = _export.choose_exporter_for(module, map_ir(ir, exporter))
    bound, optional = _export.bind_inputs(module, method_name, pos, kw, dynamic_batch)
    dev = _export.module_device(module)
    gen = torch.Generator().manual_seed(0)
    for b in bound:
        if b.example is None:
            b.example = b.spec.example(dev, gen)
        else:  # the method may write its inputs in place (x.add_(1)): never the caller's
            b.example = b.example.detach().clone()
    # a ScriptModule is exported through a plain module that calls it (see ScriptCall)
    target = _export.ScriptCall(module) if isinstance(module, torch.jit.ScriptModule) else module

    flags = [(m, m.training) for m in module.modules()]
    record = {"label": label}
    try:
        module.eval()
        with _compat.export_grad_mode(module):
            fwd = _export.make_forward(target, method, bound, record)
            examples = [b.example for b in bound]
            # one eager call: checks the outputs and counts them before exporting
            flat = fwd(target, *examples)
            out_names = [f"output{i}" for i in range(len(flat))]
            spec = {
                "format": "kiln-python-spec",
                "version": 1,
                "method": label,
                "inputs": [b.name for b in bound],
                "optional": optional,
                "outputs": record["tree"],
                "exporter": which,
            }
            with tempfile.TemporaryDirectory(prefix="kiln-export-") as tmp:
                path = Path(tmp) / "model.onnx"
                try:
                    if which == "dynamo":
                        _export.export_dynamo(target, fwd, bound, out_names, str(path), opset)
                    else:
                        _export.export_torchscript(target, fwd, bound, out_names, str(path),
                                                   opset)
                except Exception as e:
                    err = _exporter_error(e, module, lambda: fwd(target, *examples), label,
                                          which, opset)
                    if err is None:
                        raise
                    _drop_tracebacks(e)
                    raise err from e
                if onnx_path is not None:
                    _keep_onnx(path, onnx_path)
                metadata = {SPEC_KEY: spec_json(spec)}
                data = _build_with_fallback(path, bound, device, precisions,
                                                   build_options, module, label, metadata)
    finally:
        _restore_training(flags)
    out = EngineBytes(data)
    out.spec = spec
    out._spec_json = metadata[SPEC_KEY]
    return out
