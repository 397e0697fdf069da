"""kiln.EngineModule (an engine as a torch.nn.Module), kiln.compile, kiln.save, kiln.load.

How tensors cross into and out of the engine (no copies on the common path):

* Inputs: each tensor's memory is bound in place (kiln_context_set_input with
  tensor.data_ptr()). Only a non-contiguous input is first made contiguous, and a lazy
  negation or conjugation (torch's neg/conj bits) resolved (copies); sparse tensors are
  refused.
* Outputs: before the run, EngineModule predicts each output's shape and, when it can,
  allocates the output tensor with torch.empty on the engine's device and binds it
  (kiln_context_set_output), so the engine writes straight into the tensor it returns.
  A shape is predicted from (1) the engine's static output shape, (2) symbolic output
  dimensions named like an input dimension (e.g. "batch"), or (3) the shapes the same
  input shapes produced last time (a small per-module cache). When none applies (the
  first call with new input shapes of an engine whose output dims are not tied to input
  dims, or data-dependent shapes such as NonZero), the output is left unbound, the
  engine writes it to its own memory, and it is copied once into a new tensor. kiln's
  own output memory is never handed out without a copy: it is reused by the next run of
  the context, so a tensor viewing it would change under the caller's feet.
  If a predicted buffer turns out too small (data-dependent shapes), the run is retried
  once with that output unbound and its prediction is switched off.
* CUDA engines (designed; kiln's CUDA backend is a later issue): inputs and outputs must
  be CUDA tensors on the engine's device; the run is issued on torch's current stream
  (kiln_context_set_stream), so no synchronisation is added; outputs that could not be
  bound are copied on that stream through DLPack.

Engine outputs come back shaped like the original method's outputs (the spec recorded
at conversion: tuples, lists, dicts, None), which travels inside the engine file as its
metadata 'python.spec', so bytes, file objects and paths give the same module. An
engine without a spec (a .kiln file built by the CLI) returns one tensor, or a tuple for
several outputs. Engines saved by earlier versions kept the spec in '<path>.json' beside
the file; kiln.load still reads it.

An EngineModule cannot be traced (torch.jit.trace, torch.onnx.export, torch.fx) or
scripted (torch.jit.script): the engine runs outside PyTorch's operators, and a trace
would hold only the empty output tensors. Both raise an error saying so.
"""

import ctypes
import hashlib
import io
import json
import os
import threading
from pathlib import Path

import torch

from . import _files, _lib
from ._convert import SPEC_KEY, check_output_format, spec_json
from ._engine import DEVICE_CUDA, Engine
from ._export import KILN_TO_TORCH, tree_fits, unflatten_outputs
from ._lib import KILN_MAX_RANK, KilnError, Status, check, lib

SPEC_SUFFIX = ".json"  # the side file of engines saved by earlier versions
_CACHE_MAX = 64

TRACE_ERROR = (
    "kiln.EngineModule cannot be traced ({how}): it runs a kiln engine outside PyTorch's "
    "operators, so a trace would record only the creation of its empty output tensors and "
    "return uninitialized memory. Trace or export the original module instead, or call the "
    "EngineModule from Python")
SCRIPT_ERROR = (
    "kiln.EngineModule cannot be scripted (torch.jit.script): it runs a kiln engine through "
    "ctypes, which TorchScript cannot compile. Keep it in Python (script the parts around "
    "it); to save it, use kiln.save or torch.save (an EngineModule is state_dict-able)")


# ---- DLPack (copying out of device memory kiln owns) ---------------------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


def _dl_dtype(t):
    if t == torch.bool:
        return (1, 8)  # as uint8, viewed back as bool
    if t in (torch.float16, torch.float32, torch.float64):
        return (2, torch.finfo(t).bits)
    if t == torch.bfloat16:
        return (4, 16)
    if t == torch.uint8 or str(t) in ("torch.uint16", "torch.uint32", "torch.uint64"):
        return (1, torch.iinfo(t).bits)
    return (0, torch.iinfo(t).bits)


def borrowed_to_tensor(ptr, shape, dtype, device):
    """A new tensor holding a copy of `shape`/`dtype` data at `ptr` on `device` (memory
    the caller keeps alive during this call). CPU: one memmove. CUDA: the memory is
    wrapped through a DLPack capsule (no copy) and cloned on torch's current stream."""
    out_dtype = dtype
    if device.type == "cpu":
        t = torch.empty(shape, dtype=dtype)
        n = t.numel() * t.element_size()
        if n:
            ctypes.memmove(t.data_ptr(), ptr, n)
        return t
    shape_arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    code, bits = _dl_dtype(dtype)
    m = _DLManagedTensor()
    m.dl_tensor.data = ptr
    m.dl_tensor.device = _DLDevice(2 if device.type == "cuda" else 1, device.index or 0)
    m.dl_tensor.ndim = len(shape)
    m.dl_tensor.dtype = _DLDataType(code, bits, 1)
    m.dl_tensor.shape = shape_arr
    m.dl_tensor.strides = None
    m.dl_tensor.byte_offset = 0
    m.manager_ctx = None
    m.deleter = None  # memory stays kiln's; we clone before returning
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    capsule = new_capsule(ctypes.addressof(m), b"dltensor", None)
    view = torch.utils.dlpack.from_dlpack(capsule)
    out = view.clone()
    del view, capsule
    if out_dtype == torch.bool:
        out = out.view(torch.bool)
    return out


# ---- the engine as a module ----------------------------------------------------------

def _embedded_spec(eng):
    """The spec in the engine's metadata ('python.spec'), or None."""
    text = eng.get_metadata(SPEC_KEY)
    if text is None:
        return None
    try:
        spec = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"EngineModule: the engine's metadata '{SPEC_KEY}' is not valid JSON "
                         f"({e}); pass spec= to override it") from None
    if not isinstance(spec, dict) or spec.get("format") != "kiln-python-spec":
        raise ValueError(f"EngineModule: the engine's metadata '{SPEC_KEY}' is not a kiln "
                         f"output spec; pass spec= to override it")
    return spec


def _read_spec_file(path):
    """The spec that earlier versions of kiln.save kept next to engine file `path` (now it
    is inside the engine), if it belongs to this engine file (same SHA-256)."""
    side = Path(str(path) + SPEC_SUFFIX)
    if not side.is_file():
        return None
    try:
        doc = json.loads(side.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != "kiln-python-spec":
        return None
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return doc.get("spec") if doc.get("engine_sha256") == digest else None


def _shape_text(s):
    return "(" + ", ".join(str(int(d)) for d in s) + ("," if len(s) == 1 else "") + ")"


def _profile_text(info):
    parts = []
    for a, b in zip(info.min_shape, info.max_shape):
        parts.append(str(a) if a == b else f"{a}..{b}")
    return "[" + ", ".join(parts) + "]"


class _Runtime:
    """Per-module run state: input/output metadata, output-shape prediction, the shape
    cache. Not pickled (rebuilt from the engine)."""

    def __init__(self, engine):
        self.engine = engine
        self.lock = threading.Lock()
        self.cache = {}
        self.unpredictable = set()  # outputs whose shapes are data-dependent
        self.stats = {"runs": 0, "outputs_in_place": 0, "outputs_copied": 0}
        self.device = (torch.device("cuda", engine.device_index)
                       if engine.device_type == DEVICE_CUDA else torch.device("cpu"))
        self.in_names = [_lib.c_text(i.name, "input name") for i in engine.inputs]
        self.out_names = [_lib.c_text(o.name, "output name") for o in engine.outputs]
        self.out_dtypes = []
        for o in engine.outputs:
            if o.dtype not in KILN_TO_TORCH:
                raise KilnError(Status.UNSUPPORTED,
                                f"engine output '{o.name}' has dtype {o.dtype_name}, which this "
                                f"torch ({torch.__version__}) has no dtype for")
            self.out_dtypes.append(KILN_TO_TORCH[o.dtype])
        # symbolic dims of inputs: name -> (input index, axis)
        self.symbols = {}
        for i, inf in enumerate(engine.inputs):
            for a, n in enumerate(inf.dim_names or ()):
                if n and inf.shape[a] is None:
                    self.symbols.setdefault(n, (i, a))
        # each output: list of int | (input index, axis) | None, or None if unknown rank
        self.out_rules = []
        for o in engine.outputs:
            if o.shape is None:
                self.out_rules.append(None)
                continue
            rule = []
            for d, n in zip(o.shape, o.dim_names):
                rule.append(d if d is not None else self.symbols.get(n) if n else None)
            self.out_rules.append(None if any(r is None for r in rule) else rule)

    def predict(self, k, shapes, key):
        if k in self.unpredictable:
            return None
        rule = self.out_rules[k]
        if rule is not None:
            return tuple(r if isinstance(r, int) else shapes[r[0]][r[1]] for r in rule)
        cached = self.cache.get(key)
        return cached[k] if cached is not None else None

    def run(self, feeds):
        L = lib()
        eng = self.engine
        ctx = eng.acquire_context()
        try:
            shapes = [tuple(t.shape) for t in feeds]
            for name, info, t in zip(self.in_names, eng.inputs, feeds):
                r = t.dim()
                dims = (ctypes.c_int64 * max(r, 1))(*t.shape)
                check(L.kiln_context_set_input(ctx, name, info.dtype, r, dims,
                                               t.data_ptr() or None))
            if self.device.type == "cuda":
                stream = torch.cuda.current_stream(self.device).cuda_stream
                check(L.kiln_context_set_stream(ctx, ctypes.c_void_p(stream)))
            key = tuple(shapes)
            bufs = [None] * len(self.out_names)
            for k, name in enumerate(self.out_names):
                shape = self.predict(k, shapes, key)
                if shape is not None:
                    buf = torch.empty(shape, dtype=self.out_dtypes[k], device=self.device)
                    nbytes = buf.numel() * buf.element_size()
                    if nbytes:
                        bufs[k] = buf
                        check(L.kiln_context_set_output(ctx, name, buf.data_ptr(), nbytes))
                        continue
                check(L.kiln_context_set_output(ctx, name, None, 0))
            st = L.kiln_context_run(ctx)
            if st != 0:
                msg = _lib.last_error()
                if st == Status.INVALID_ARGUMENT and "bound buffer" in msg and any(b is not None for b in bufs):
                    # a predicted shape was too small: data-dependent output shapes
                    for k, name in enumerate(self.out_names):
                        if bufs[k] is not None and _lib.py_name(name) in msg:
                            self.unpredictable.add(k)
                            self.cache.pop(key, None)
                            bufs[k] = None
                            check(L.kiln_context_set_output(ctx, name, None, 0))
                    st = L.kiln_context_run(ctx)
                    msg = _lib.last_error() if st else msg
                if st != 0:
                    raise KilnError(st, msg)
            outs = []
            dtype = ctypes.c_int()
            rank = ctypes.c_int()
            dims = (ctypes.c_int64 * KILN_MAX_RANK)()
            ptr = ctypes.c_void_p()
            for k, name in enumerate(self.out_names):
                if self.device.type == "cuda":
                    # shape from get_output, device address from get_output_device
                    # (get_output's data would be a host copy)
                    check(L.kiln_context_get_output(ctx, name, ctypes.byref(dtype),
                                                    ctypes.byref(rank), dims, None))
                    check(L.kiln_context_get_output_device(ctx, name, ctypes.byref(ptr)))
                else:
                    check(L.kiln_context_get_output(ctx, name, ctypes.byref(dtype),
                                                    ctypes.byref(rank), dims, ctypes.byref(ptr)))
                shape = tuple(dims[: rank.value])
                tdtype = KILN_TO_TORCH[dtype.value]
                buf = bufs[k]
                if buf is not None and ptr.value == buf.data_ptr():
                    numel = 1
                    for d in shape:
                        numel *= d
                    out = buf if tuple(buf.shape) == shape else buf.reshape(-1)[:numel].view(shape)
                    self.stats["outputs_in_place"] += 1
                else:
                    out = borrowed_to_tensor(ptr.value, shape, tdtype, self.device)
                    self.stats["outputs_copied"] += 1
                outs.append(out)
            self.stats["runs"] += 1
            if len(self.cache) >= _CACHE_MAX:
                self.cache.clear()
            self.cache[key] = [tuple(o.shape) for o in outs]
            return outs
        finally:
            eng.release_context(ctx)


class EngineModule(torch.nn.Module):
    """A kiln engine as a torch.nn.Module.

    EngineModule(engine) with engine = bytes (e.g. from kiln.convert_method_to_engine),
    a path to a .kiln file (mapped, not copied), or a binary file object. forward(*args,
    **kwargs) takes tensors by position (in input_names order) or by input name and
    returns tensors shaped like the converted method's outputs (from the spec inside the
    engine; spec= overrides it and is kept in the engine from then on). threads= sets
    the CPU threads of its contexts (default: the engine's setting). It cannot be
    traced or scripted (see the module docstring).

    The engine's bytes are the module's extra state, so state_dict()/load_state_dict(),
    torch.save/torch.load of a model containing it, and copy.deepcopy all work. An
    EngineModule() made without an engine gets one from load_state_dict.
    """

    def __init__(self, engine=None, *, threads=None, spec=None):
        super().__init__()
        self._kiln_threads = threads
        self._kiln_engine = None
        self._kiln_spec = None
        self._kiln_rt = None
        if engine is not None:
            self._kiln_load(engine, spec)

    # ---- loading -------------------------------------------------------------------
    def _kiln_load(self, engine, spec=None):
        if isinstance(engine, EngineModule):
            spec = spec if spec is not None else engine.spec
            engine = engine.engine_bytes()
        legacy_path = None
        if isinstance(engine, (bytes, bytearray, memoryview)):
            if spec is None:
                spec = getattr(engine, "spec", None)
            eng = Engine.from_bytes(bytes(engine), threads=self._kiln_threads)
        elif isinstance(engine, (str, os.PathLike)):
            eng = Engine.from_file(engine, threads=self._kiln_threads)
            legacy_path = engine
        elif hasattr(engine, "read"):
            data = engine.read()
            if not isinstance(data, (bytes, bytearray)):
                raise TypeError("EngineModule: the file object must be opened in binary mode")
            eng = Engine.from_bytes(bytes(data), threads=self._kiln_threads)
        else:
            raise TypeError(
                f"EngineModule: engine must be bytes, a path or a binary file object; got "
                f"{type(engine).__name__}"
            )
        if spec is None:
            spec = _embedded_spec(eng)
        if spec is None and legacy_path is not None:
            spec = _read_spec_file(legacy_path)
        if spec is not None:
            names = [i.name for i in eng.inputs]
            n_out = len(eng.outputs)
            # each output once: a leaf read twice, or index -1 (the last output), gave
            # the wrong tensors without a word
            fits = isinstance(spec, dict) and tree_fits(spec.get("outputs"), n_out)
            if not fits or list(spec.get("inputs", [])) != names:
                raise ValueError(
                    f"EngineModule: the spec (inputs {spec.get('inputs') if isinstance(spec, dict) else spec!r}) "
                    f"does not describe this engine (inputs {names}, {n_out} outputs, each once)"
                )
            if eng.get_metadata(SPEC_KEY) != spec_json(spec):
                # the engine carries its spec from now on (engine_bytes, kiln.save, ...)
                eng.set_metadata(SPEC_KEY, spec_json(spec))
        rt = _Runtime(eng)
        self._kiln_engine = eng
        self._kiln_spec = spec
        self._kiln_rt = rt

    def _rt(self):
        if self._kiln_rt is None:
            raise RuntimeError("EngineModule has no engine: construct it with one or "
                               "load_state_dict a state that holds one")
        return self._kiln_rt

    # ---- information ---------------------------------------------------------------
    @property
    def engine(self):
        """The underlying kiln._engine.Engine."""
        return self._rt().engine

    @property
    def spec(self):
        return self._kiln_spec

    @property
    def input_names(self):
        return [i.name for i in self._rt().engine.inputs]

    @property
    def output_names(self):
        return [o.name for o in self._rt().engine.outputs]

    @property
    def inputs(self):
        return list(self._rt().engine.inputs)

    @property
    def outputs(self):
        return list(self._rt().engine.outputs)

    @property
    def device(self):
        return self._rt().device

    @property
    def precision(self):
        return self._rt().engine.precision

    @property
    def run_stats(self):
        """Counts since construction: runs, outputs the engine wrote straight into the
        returned tensor (outputs_in_place) and outputs copied once out of kiln's memory
        (outputs_copied; see the module docstring)."""
        return dict(self._rt().stats)

    def inspect(self, json=False):
        """kiln's description of the engine (as `kiln inspect` prints it); json=True: a dict
        (as `kiln inspect --json`)."""
        return self._rt().engine.describe(as_json=json)

    def engine_bytes(self):
        """The serialized engine (the bytes of a .kiln file)."""
        return self._rt().engine.serialize()

    def extra_repr(self):
        if self._kiln_rt is None:
            return "no engine"
        e = self._kiln_rt.engine
        ins = ", ".join(repr(i) for i in e.inputs)
        outs = ", ".join(repr(o) for o in e.outputs)
        return f"inputs=[{ins}], outputs=[{outs}], device={self.device}, precision={e.precision}"

    # ---- state ---------------------------------------------------------------------
    def get_extra_state(self):
        if self._kiln_rt is None:
            return {}
        data = self.engine_bytes()
        return {
            "kiln_engine": torch.frombuffer(bytearray(data), dtype=torch.uint8),
            "kiln_spec": json.dumps(self._kiln_spec) if self._kiln_spec else "",
        }

    def set_extra_state(self, state):
        if not state:
            return
        t = state.get("kiln_engine") if isinstance(state, dict) else None
        if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8:
            got = type(t if isinstance(state, dict) else state).__name__
            raise TypeError(f"EngineModule state: expected a dict with 'kiln_engine', the engine "
                            f"as a uint8 tensor (as EngineModule.state_dict() gives), got {got}")
        data = t.detach().cpu().contiguous().numpy().tobytes()
        spec = json.loads(state["kiln_spec"]) if state.get("kiln_spec") else None
        self._kiln_load(data, spec)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_kiln_engine"] = None
        state["_kiln_rt"] = None
        state["_kiln_engine_bytes"] = self.engine_bytes() if self._kiln_rt is not None else None
        return state

    def __setstate__(self, state):
        data = state.pop("_kiln_engine_bytes", None)
        super().__setstate__(state)
        if data is not None:
            self._kiln_load(data, self._kiln_spec)

    # ---- running -------------------------------------------------------------------
    def _bind(self, args, kwargs):
        rt = self._rt()
        infos = rt.engine.inputs
        names = [i.name for i in infos]
        if len(args) > len(names):
            raise TypeError(
                f"EngineModule.forward takes {len(names)} input{'s' if len(names) != 1 else ''} "
                f"({', '.join(names)}) but {len(args)} were given"
            )
        values = dict(zip(names, args))
        optional = set((self._kiln_spec or {}).get("optional", ()))
        for k, v in kwargs.items():
            if k in values:
                raise TypeError(f"EngineModule.forward got multiple values for input '{k}'")
            if k not in names:
                if k in optional and v is None:
                    continue
                raise TypeError(
                    f"EngineModule.forward got an unexpected input '{k}'; the engine's inputs "
                    f"are: {', '.join(names)}"
                )
            values[k] = v
        missing = [n for n in names if n not in values]
        if missing:
            raise TypeError(f"EngineModule.forward is missing input '{missing[0]}'")
        feeds = []
        for info in infos:
            t = values[info.name]
            feeds.append(self._check_input(info, t, rt.device))
        return feeds

    @staticmethod
    def _check_input(info, t, device):
        name = info.name
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"input '{name}' must be a torch.Tensor, got {type(t).__name__}")
        if t.layout != torch.strided:
            raise TypeError(f"input '{name}' is a {t.layout} tensor; kiln reads dense tensors "
                            "(convert it with .to_dense())")
        if t.device.type != device.type or (
            device.type == "cuda" and (t.device.index or 0) != (device.index or 0)
        ):
            raise ValueError(
                f"input '{name}' is on {t.device}, but the engine runs on {device}; move it "
                f"with .to('{device}')"
            )
        want = KILN_TO_TORCH.get(info.dtype)
        if t.dtype != want:
            raise TypeError(f"input '{name}' has dtype {t.dtype}, but the engine expects {want}")
        if t.dim() != len(info.min_shape):
            raise ValueError(
                f"input '{name}' has shape {_shape_text(t.shape)}, but the engine expects rank "
                f"{len(info.min_shape)} {_profile_text(info)}"
            )
        for d, (s, a, b) in enumerate(zip(t.shape, info.min_shape, info.max_shape)):
            if not a <= s <= b:
                if a == b:
                    raise ValueError(
                        f"input '{name}' has shape {_shape_text(t.shape)}, but the engine "
                        f"expects {_profile_text(info)} (dimension {d} must be {a})"
                    )
                raise ValueError(
                    f"input '{name}' has shape {_shape_text(t.shape)}, outside the engine's "
                    f"profile {_profile_text(info)} (dimension {d} must be in {a}..{b})"
                )
        if t.is_neg() or t.is_conj():
            # a lazy negation (torch._neg_view, the .imag of a conj()): data_ptr() holds
            # the values before it, which kiln read as they were
            t = t.resolve_neg().resolve_conj()
        if not t.is_contiguous():
            t = t.contiguous()
        return t.detach()

    def __prepare_scriptable__(self):  # torch.jit.script calls it (also on submodules)
        raise RuntimeError(SCRIPT_ERROR)

    def forward(self, *args, **kwargs):
        if torch.jit.is_tracing():
            raise RuntimeError(TRACE_ERROR.format(how="torch.jit.trace, torch.onnx.export"))
        if any(isinstance(a, torch.fx.Proxy) for a in list(args) + list(kwargs.values())):
            raise RuntimeError(TRACE_ERROR.format(how="torch.fx") + " (a torch.fx.Tracer "
                               "whose is_leaf_module is true for it keeps it as one call)")
        feeds = self._bind(args, kwargs)
        outs = self._rt().run(feeds)
        spec = self._kiln_spec
        if spec is not None:
            return unflatten_outputs(spec["outputs"], outs)
        return outs[0] if len(outs) == 1 else tuple(outs)


# ---- compile / save / load -----------------------------------------------------------

def compile(module, inputs=None, *, method_name="forward", arg_inputs=None, kwarg_inputs=None,
            threads=None, **options):
    """kiln.convert_method_to_engine(...) wrapped in an EngineModule. `threads` is both
    the build option and the module's context threads."""
    from ._convert import convert_method_to_engine

    if threads is not None:
        options["threads"] = threads
    data = convert_method_to_engine(module, method_name, inputs, arg_inputs, kwarg_inputs,
                                    **options)
    return EngineModule(data, threads=threads)


def _with_spec(data, spec):
    """Engine bytes that carry `spec` as their metadata (the same bytes when they do)."""
    eng = Engine.from_bytes(data)
    try:
        if eng.get_metadata(SPEC_KEY) == spec_json(spec):
            return data
        eng.set_metadata(SPEC_KEY, spec_json(spec))
        return eng.serialize()
    finally:
        eng.close()


def save(engine, path, *, output_format=None):
    """Writes an engine (EngineModule, or engine bytes from convert_method_to_engine) to
    `path` as a .kiln file, atomically (temporary file + rename) with the permissions the
    umask gives (as `kiln build -o`), runnable by the `kiln` CLI; `path` may also be a
    binary file object (io.BytesIO, open(..., 'wb')). The output structure of the
    method (the spec) is inside the engine, so kiln.load and EngineModule give it back
    from any of them. A bad path (missing folder, a folder, wrong type) fails before
    anything is written, naming it. output_format: only 'kiln' (Torch-TensorRT's name)."""
    check_output_format(output_format, "kiln.save")
    if isinstance(engine, EngineModule):
        _files.check_output_path(path, "kiln.save path")
        _files.check_engine_target(path, "kiln.save path")
        data = engine.engine_bytes()  # the spec is in its metadata (_kiln_load)
    elif isinstance(engine, (bytes, bytearray, memoryview)):
        _files.check_output_path(path, "kiln.save path")
        data, spec = bytes(engine), getattr(engine, "spec", None)
        if spec is not None and spec_json(spec) != getattr(engine, "_spec_json", None):
            data = _with_spec(data, spec)
    else:
        raise TypeError(f"kiln.save: expected an EngineModule or engine bytes, got "
                        f"{type(engine).__name__}")
    if hasattr(path, "write"):
        path.write(data)
    else:
        _files.check_engine_target(path, "kiln.save path")
        _files.atomic_write(path, data)


def load(path, *, threads=None):
    """An EngineModule for the engine file at `path` (or a binary file object, or the
    bytes of an engine, such as convert_method_to_engine returns: bytes that begin as
    an engine file does, which no path can, holding NUL bytes)."""
    if isinstance(path, io.IOBase) or hasattr(path, "read"):
        return EngineModule(path, threads=threads)
    if isinstance(path, (bytes, bytearray)) and bytes(path[:len(_files.ENGINE_MAGIC)]) == _files.ENGINE_MAGIC:
        return EngineModule(path, threads=threads)
    text = os.fsdecode(os.fspath(path))  # (a bytes path too: EngineModule takes bytes as an engine)
    if not text:
        raise ValueError("engine path is empty")  # (Path("") is ".": "a directory")
    return EngineModule(Path(text), threads=threads)
