"""Exporting one method of a torch.nn.Module to ONNX: input specs (kiln.Input), binding
them to the method's parameters, flattening nested outputs, and the two exporters.

Output flattening order (documented in python/README.md): depth first, left to right;
tuples and lists in index order, dicts in their iteration (insertion) order. Tensors
become engine outputs output0, output1, ... in that order; None leaves are kept in the
structure (EngineModule returns None there) but are not engine outputs. Named tuples
come back as plain tuples.
"""

import contextlib
import inspect
import keyword
import types
import warnings

import torch

from . import _compat

# torch dtype <-> kiln dtype (ONNX numbering)
TORCH_TO_KILN = {
    torch.float32: 1, torch.uint8: 2, torch.int8: 3, torch.int16: 5, torch.int32: 6,
    torch.int64: 7, torch.bool: 9, torch.float16: 10, torch.float64: 11, torch.bfloat16: 16,
}
for _name, _code in (("uint16", 4), ("uint32", 12), ("uint64", 13)):
    if hasattr(torch, _name):
        TORCH_TO_KILN[getattr(torch, _name)] = _code
KILN_TO_TORCH = {v: k for k, v in TORCH_TO_KILN.items()}


def a_type(value):
    """'an int', 'a list': the article and type name of value, for messages."""
    n = type(value).__name__
    return ("an " if n[:1].lower() in "aeiou" else "a ") + n


def _shape_tuple(what, shape):
    if isinstance(shape, torch.Size):
        shape = tuple(shape)
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**63 for d in shape
    ):  # (a dim past int64 was wrapped around by ctypes: 2**64 + 2 became 2)
        raise ValueError(f"kiln.Input: {what} must be a tuple of non-negative ints below 2**63, "
                         f"got {shape!r}")
    return tuple(shape)


class Input:
    """Describes one engine input.

    kiln.Input(shape=(8, 3, 224, 224))                       static shape
    kiln.Input(min_shape=(1, 784), opt_shape=(8, 784), max_shape=(64, 784))   dynamic
    dtype: a torch dtype (default torch.float32). name: the engine input's name (default:
    the method's parameter name). dim_names: optional {axis: name} for dynamic axes;
    axes given the same name across inputs are declared equal (e.g. a shared batch).
    opt_shape defaults to max_shape.
    """

    def __init__(self, shape=None, *, min_shape=None, opt_shape=None, max_shape=None,
                 dtype=torch.float32, name=None, dim_names=None):
        if shape is not None:
            if min_shape is not None or opt_shape is not None or max_shape is not None:
                raise ValueError(
                    "kiln.Input: give either shape= or min_shape=/opt_shape=/max_shape=, not both"
                )
            shape = _shape_tuple("shape", shape)
            min_shape = opt_shape = max_shape = shape
        else:
            if min_shape is None or max_shape is None:
                raise ValueError(
                    "kiln.Input: give shape= (static) or min_shape= and max_shape= (dynamic)"
                )
            min_shape = _shape_tuple("min_shape", min_shape)
            max_shape = _shape_tuple("max_shape", max_shape)
            opt_shape = max_shape if opt_shape is None else _shape_tuple("opt_shape", opt_shape)
            if not (len(min_shape) == len(opt_shape) == len(max_shape)):
                raise ValueError(
                    f"kiln.Input: min_shape, opt_shape and max_shape must have the same rank, "
                    f"got {min_shape}, {opt_shape}, {max_shape}"
                )
            for a, b, c in zip(min_shape, opt_shape, max_shape):
                if not a <= b <= c:
                    raise ValueError(
                        f"kiln.Input: need min_shape <= opt_shape <= max_shape in every "
                        f"dimension, got {min_shape}, {opt_shape}, {max_shape}"
                    )
        if not isinstance(dtype, torch.dtype) or dtype not in TORCH_TO_KILN:
            raise TypeError(f"kiln.Input: dtype must be a torch dtype kiln supports, got {dtype!r}")
        if name is not None and (not isinstance(name, str) or not name.isidentifier()
                                 or keyword.iskeyword(name)):
            raise ValueError(f"kiln.Input: name must be a Python identifier, got {name!r}")
        self.min_shape, self.opt_shape, self.max_shape = min_shape, opt_shape, max_shape
        self.dtype = dtype
        self.name = name
        names = {}
        if dim_names:
            items = dim_names.items() if isinstance(dim_names, dict) else enumerate(dim_names)
            for axis, n in items:
                if n is None:
                    continue
                if not (isinstance(axis, int) and 0 <= axis < len(min_shape)):
                    raise ValueError(f"kiln.Input: dim_names has axis {axis!r} outside the shape")
                if not (isinstance(n, str) and n.isidentifier()):
                    raise ValueError(f"kiln.Input: dim name {n!r} must be an identifier")
                names[axis] = n
        self.dim_names = names

    @property
    def dynamic_axes(self):
        return [i for i, (a, b) in enumerate(zip(self.min_shape, self.max_shape)) if a != b]

    @property
    def is_static(self):
        return not self.dynamic_axes

    def example_shape(self):
        """The shape exported with: opt_shape, except that a dynamic dimension whose opt
        is 0 or 1 is exported at 2 (when the range allows): both exporters specialize
        size-1 dimensions (broadcasting), which would freeze them."""
        out = list(self.opt_shape)
        for i in self.dynamic_axes:
            if out[i] < 2 <= self.max_shape[i]:
                out[i] = 2
        return tuple(out)

    def example(self, device, generator=None):
        shape = self.example_shape()
        if self.dtype.is_floating_point:
            return torch.randn(shape, generator=generator).to(device=device, dtype=self.dtype)
        if self.dtype == torch.bool:
            return torch.zeros(shape, dtype=torch.bool, device=device)
        return torch.ones(shape, dtype=self.dtype, device=device)

    def __repr__(self):
        if self.is_static:
            s = f"shape={self.min_shape}"
        else:
            s = f"min_shape={self.min_shape}, opt_shape={self.opt_shape}, max_shape={self.max_shape}"
        n = f", name={self.name!r}" if self.name else ""
        return f"kiln.Input({s}, dtype={self.dtype}{n})"

    @classmethod
    def from_tensor(cls, t, dynamic_batch=None, name=None, dim_name="batch"):
        """An Input for tensor t's shape and dtype; dynamic_batch=(min, opt, max) makes
        dimension 0 dynamic (named dim_name)."""
        shape = tuple(t.shape)
        if dynamic_batch is None:
            return cls(shape, dtype=t.dtype, name=name)
        mn, op, mx = batch_range(dynamic_batch, "dynamic_batch")
        if not shape:
            who = f"input '{name}'" if name else "the tensor"
            raise ValueError(f"dynamic_batch makes dimension 0 of {who} dynamic, but it is a "
                             f"scalar (shape ())")
        return cls(min_shape=(mn,) + shape[1:], opt_shape=(op,) + shape[1:],
                   max_shape=(mx,) + shape[1:], dtype=t.dtype, name=name,
                   dim_names={0: dim_name})


class BoundInput:
    """One engine input: its name, its spec and the example tensor exported with."""

    __slots__ = ("name", "param", "keyword", "spec", "example")

    def __init__(self, name, param, keyword_, spec, example):
        self.name, self.param, self.keyword, self.spec, self.example = (
            name, param, keyword_, spec, example)


def module_name(module):
    """The class name of a module; for a ScriptModule (scripted or traced), the class
    it was made from."""
    if isinstance(module, torch.jit.ScriptModule):
        return getattr(module, "original_name", None) or type(module).__name__
    return type(module).__name__


def method_label(module, method_name):
    return f"{module_name(module)}.{method_name}"


def resolve_method(module, method_name):
    """The bound method `method_name` of module, or AttributeError with kiln's message."""
    fn = getattr(module, method_name, None) if isinstance(method_name, str) else None
    if fn is None or not callable(fn):
        scripted = ""
        if isinstance(module, torch.jit.ScriptModule):
            scripted = (" (a ScriptModule has the methods TorchScript compiled: forward and "
                        "those marked @torch.jit.export)")
        raise AttributeError(
            f"{module_name(module)} has no method '{method_name}'; method_name must name "
            f"a method of the module{scripted}"
        )
    return fn


def method_signature(fn):
    """inspect.Signature of a bound method; for a TorchScript method, built from its
    schema when inspect cannot read it (traced modules). None when neither works."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        pass
    schema = getattr(fn, "schema", None)
    if schema is None:
        return None
    P = inspect.Parameter
    params = []
    for a in list(schema.arguments)[1:]:  # [0] is self
        kind = P.KEYWORD_ONLY if a.kwarg_only else P.POSITIONAL_OR_KEYWORD
        default = a.default_value if a.has_default_value() else P.empty
        params.append(P(a.name, kind, default=default))
    return inspect.Signature(params)


def module_device(module):
    for p in module.parameters():
        return p.device
    for b in module.buffers():
        return b.device
    return torch.device("cpu")


# ---- dynamic_batch ----------------------------------------------------------------------

def batch_range(value, what):
    """(min, opt, max) from a dynamic_batch value, or ValueError naming `what`."""
    if (not isinstance(value, (tuple, list)) or len(value) != 3
            or not all(isinstance(d, int) and not isinstance(d, bool) for d in value)
            or not 0 <= value[0] <= value[1] <= value[2] or value[2] < 1):
        more = (", or a dict {input name: (min, opt, max)} for the inputs that have a batch"
                if what == "dynamic_batch" else "")
        raise ValueError(f"{what} must be (min, opt, max) with 0 <= min <= opt <= max and "
                         f"max >= 1{more}; got {value!r}")
    return tuple(value)


def _batch_plan(dynamic_batch, entries, label):
    """For each (name, value) in entries: the (min, opt, max) of its dimension 0 and
    that dimension's symbolic name, or None (static). dynamic_batch is None, one range
    (every tensor input) or a dict {input name: range} (only those inputs)."""
    plan = {name: None for name, _ in entries}
    if dynamic_batch is None:
        return plan
    values = dict(entries)
    if isinstance(dynamic_batch, dict):
        ranges = {}
        for k, v in dynamic_batch.items():
            if k not in values:
                raise ValueError(f"dynamic_batch names input {k!r}, but the inputs of {label} "
                                 f"are: {', '.join(n for n, _ in entries)}")
            if isinstance(values[k], Input):
                raise ValueError(f"dynamic_batch names input '{k}' of {label}, which is a "
                                 f"kiln.Input: give its dynamic dimensions there (min_shape=, "
                                 f"opt_shape=, max_shape=)")
            ranges[k] = batch_range(v, f"dynamic_batch['{k}']")
        # inputs given one range share one batch dimension; different ranges, their own
        shared = len(set(ranges.values())) <= 1
        for k, r in ranges.items():
            if isinstance(values[k], torch.Tensor) and values[k].dim() == 0:
                raise ValueError(f"dynamic_batch makes dimension 0 of input '{k}' of {label} "
                                 f"dynamic, but it is a scalar (shape ())")
            plan[k] = (r, "batch" if shared else f"{k}_batch")
        return plan
    r = batch_range(dynamic_batch, "dynamic_batch")
    tensors = [(n, v) for n, v in entries if isinstance(v, torch.Tensor)]
    hint = f"give dynamic_batch a dict, e.g. {{'{tensors[0][0]}': {r}}}, to choose the inputs" \
        if tensors else ""
    first = None
    for n, v in tensors:
        if v.dim() == 0:
            raise ValueError(f"dynamic_batch {r} makes dimension 0 of every input dynamic, but "
                             f"input '{n}' of {label} is a scalar (shape ()); {hint}")
        if first is None:
            first = (n, v.shape[0])
        elif v.shape[0] != first[1]:
            raise ValueError(
                f"dynamic_batch {r} makes dimension 0 of every input one batch, but input "
                f"'{first[0]}' of {label} has {first[1]} there and input '{n}' has "
                f"{v.shape[0]}; {hint}")
        plan[n] = (r, "batch")
    return plan


def _to_spec(value, what, batch):
    """(spec, example) of one input; batch: None or ((min, opt, max), dim name)."""
    if isinstance(value, Input):
        return value, None
    if isinstance(value, torch.Tensor):
        if value.dtype not in TORCH_TO_KILN:
            raise TypeError(f"{what} has dtype {value.dtype}, which kiln does not support")
        if batch is not None:
            rng, dim_name = batch
            spec = Input.from_tensor(value, rng, dim_name=dim_name)
            if not spec.min_shape[0] <= value.shape[0] <= spec.max_shape[0]:
                raise ValueError(
                    f"{what} has batch size {value.shape[0]}, outside dynamic_batch {rng}"
                )
            example = value
            if value.shape[0] < 2 <= spec.max_shape[0]:  # see Input.example_shape
                example = value.repeat((2 // max(value.shape[0], 1),) + (1,) * (value.dim() - 1))
                if value.shape[0] == 0:
                    example = torch.zeros((2,) + tuple(value.shape[1:]), dtype=value.dtype,
                                          device=value.device)
            return spec, example
        return Input(tuple(value.shape), dtype=value.dtype), value
    raise TypeError(
        f"{what} is {a_type(value)}; kiln engines take tensors: pass a torch.Tensor "
        f"or a kiln.Input"
    )


def bind_inputs(module, method_name, args, kwargs, dynamic_batch=None):
    """Binds positional specs `args` and keyword specs `kwargs` to the method's
    parameters. Returns (inputs: [BoundInput], optional: [names of parameters left out
    whose default is None])."""
    fn = resolve_method(module, method_name)
    label = method_label(module, method_name)
    sig = method_signature(fn)
    params = list(sig.parameters.values()) if sig else []
    if sig is not None:
        try:
            sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"the inputs do not match {label}{sig}: {e}") from None
    var_pos = next((p for p in params if p.kind == p.VAR_POSITIONAL), None)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    given = []  # (parameter name, keyword, value)
    for i, value in enumerate(args):
        if i < len(positional):
            pname = positional[i].name
        elif var_pos is not None:
            pname = f"{var_pos.name}_{i - len(positional)}"
        else:
            pname = f"input{i}"
        given.append((pname, False, value))
    for key, value in kwargs.items():
        if isinstance(value, Input) and value.name is not None and value.name != key:
            raise ValueError(
                f"kwarg_inputs['{key}'] is a kiln.Input named '{value.name}'; keyword inputs "
                f"are named by their key"
            )
        given.append((key, True, value))

    def engine_name(pname, value):
        return (value.name if isinstance(value, Input) else None) or pname

    plan = _batch_plan(dynamic_batch, [(engine_name(p, v), v) for p, _, v in given], label)
    bound = []
    for pname, kw, value in given:
        name = engine_name(pname, value)
        spec, example = _to_spec(value, f"input '{pname}' of {label}", plan[name])
        bound.append(BoundInput(name, pname, kw, spec, example))
    names = [b.name for b in bound]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise ValueError(f"two inputs of {label} are named '{dup}'")
    given = set(b.param for b in bound)
    optional = [p.name for p in params
                if p.name not in given and p.default is None
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return bound, optional


# ---- output structure ----------------------------------------------------------------

def flatten_outputs(obj, label):
    leaves = []

    def walk(o, path):
        if isinstance(o, torch.Tensor):
            if o.dtype not in TORCH_TO_KILN:
                raise TypeError(f"{label} returned a tensor of dtype {o.dtype} at {path}, "
                                f"which kiln does not support")
            leaves.append(o)
            return {"t": len(leaves) - 1}
        if o is None:
            return {"none": True}
        if isinstance(o, tuple):
            return {"tuple": [walk(x, f"{path}[{i}]") for i, x in enumerate(o)]}
        if isinstance(o, list):
            return {"list": [walk(x, f"{path}[{i}]") for i, x in enumerate(o)]}
        if isinstance(o, dict):
            items = []
            for k, v in o.items():
                if not isinstance(k, (str, int)) or isinstance(k, bool):
                    raise TypeError(f"{label} returned a dict with key {k!r} at {path}; kiln "
                                    f"keeps str and int keys only")
                items.append([k, walk(v, f"{path}[{k!r}]")])
            return {"dict": items}
        raise TypeError(
            f"{label} returned {a_type(o)} at {path}; kiln engines return tensors "
            f"(alone or in tuples, lists and dicts)"
        )

    tree = walk(obj, "output")
    if not leaves:
        raise TypeError(f"{label} returned no tensors")
    return leaves, tree


def unflatten_outputs(tree, leaves):
    if "t" in tree:
        return leaves[tree["t"]]
    if "none" in tree:
        return None
    if "tuple" in tree:
        return tuple(unflatten_outputs(t, leaves) for t in tree["tuple"])
    if "list" in tree:
        return [unflatten_outputs(t, leaves) for t in tree["list"]]
    if "dict" in tree:
        return {k: unflatten_outputs(t, leaves) for k, t in tree["dict"]}
    raise ValueError(f"bad output structure {tree!r}")


def tree_fits(tree, n_out):
    """Whether `tree` (a spec's "outputs", maybe from a hostile engine file) is a
    well-formed output structure whose leaves name each of the n_out outputs once.
    Walked with a stack: no recursion limit to hit."""
    seen = set()
    stack = [tree]
    while stack:
        t = stack.pop()
        if not isinstance(t, dict) or len(t) != 1:
            return False
        (key, val), = t.items()
        if key == "t":
            if type(val) is not int or not 0 <= val < n_out or val in seen:
                return False
            seen.add(val)
        elif key == "none":
            continue
        elif key in ("tuple", "list") and isinstance(val, list):
            stack.extend(val)
        elif key == "dict" and isinstance(val, list):
            for item in val:
                if not isinstance(item, list) or len(item) != 2:
                    return False
                stack.append(item[1])
        else:
            return False
    return len(seen) == n_out


# ---- exporting -----------------------------------------------------------------------

def choose_exporter(exporter):
    import torch as _t

    if exporter not in ("auto", "torchscript", "dynamo"):
        raise ValueError(
            f"exporter must be 'auto', 'torchscript' or 'dynamo'; got {exporter!r}"
        )
    new_enough = _compat.torch_version() >= _compat.MIN_TORCH_DYNAMO
    if exporter == "auto":
        return "dynamo" if new_enough and _compat.onnxscript_available() else "torchscript"
    if exporter == "dynamo":
        if not new_enough:
            raise RuntimeError(
                f"exporter='dynamo' needs torch {_compat.MIN_TORCH_DYNAMO[0]}."
                f"{_compat.MIN_TORCH_DYNAMO[1]} or newer; this is torch {_t.__version__}"
            )
        if not _compat.onnxscript_available():
            raise RuntimeError("exporter='dynamo' needs the onnxscript package "
                               "(pip install onnxscript)")
    return exporter


class ScriptCall(torch.nn.Module):
    """Stands in for a ScriptModule (scripted or traced) while exporting. The ONNX
    exporter cannot trace a call into a ScriptModule as it traces a Python module, and
    exporting the ScriptModule itself would give neither another method nor the
    flattened outputs; so this module's forward (make_forward's, calling the scripted
    method) is first traced with torch.jit.trace, which inlines the scripted code
    (control flow included), and the traced module is exported. Node names keep the
    ScriptModule's submodule paths ('/layer1/conv/Conv')."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs)


def choose_exporter_for(module, exporter):
    """choose_exporter, for this module: a ScriptModule is exported by the TorchScript
    exporter only (torch.export cannot take TorchScript)."""
    if not isinstance(module, torch.jit.ScriptModule):
        return choose_exporter(exporter)
    if exporter not in ("auto", "torchscript", "dynamo"):
        choose_exporter(exporter)  # its message
    if exporter == "dynamo":
        raise ValueError(f"{module_name(module)} is a ScriptModule (torch.jit.script or "
                         f"torch.jit.trace); only exporter='torchscript' exports TorchScript. "
                         f"Pass the original torch.nn.Module to use the dynamo exporter")
    return "torchscript"


@contextlib.contextmanager
def patched_forward(module, fn):
    """Temporarily makes `fn` the module's forward (an instance attribute), so that the
    exporters trace the module itself: node names and scopes then follow the module's
    own attribute paths."""
    had = "forward" in module.__dict__
    old = module.__dict__.get("forward")
    object.__setattr__(module, "forward", types.MethodType(fn, module))
    try:
        yield
    finally:
        if had:
            object.__setattr__(module, "forward", old)
        else:
            del module.__dict__["forward"]


def make_forward(module, method, inputs, record):
    """The function that stands in for module.forward while exporting: called with the
    engine inputs (in engine order, by position or name), it calls `method` with them
    bound as the user gave them (positionally or by keyword) and returns the flat output
    tuple. Its __signature__ names the inputs, so both exporters name the engine inputs
    and dynamo matches dynamic_shapes by name. A nested call (the method calling
    self(...)) goes to the module's real forward."""
    names = [b.name for b in inputs]
    pos = [b.name for b in inputs if not b.keyword]
    kw = [(b.param, b.name) for b in inputs if b.keyword]
    label = record["label"]
    original = module.__dict__.get("forward") or type(module).forward.__get__(module)
    depth = [0]

    def forward(self, *args, **kwargs):
        if depth[0]:
            return original(*args, **kwargs)
        values = dict(zip(names, args))
        values.update(kwargs)
        depth[0] += 1
        try:
            out = method(*[values[n] for n in pos], **{p: values[n] for p, n in kw})
        finally:
            depth[0] -= 1
        leaves, tree = flatten_outputs(out, label)
        record["tree"] = tree
        return tuple(leaves)

    P = inspect.Parameter
    forward.__signature__ = inspect.Signature(
        [P("self", P.POSITIONAL_OR_KEYWORD)] + [P(n, P.POSITIONAL_OR_KEYWORD) for n in names])
    forward.__name__ = "forward"
    forward.__qualname__ = f"{type(module).__name__}.forward"
    return forward


def dim_symbol(b, axis):
    return b.spec.dim_names.get(axis) or f"{b.name}_dim{axis}"


def export_torchscript(module, fwd, inputs, out_names, path, opset):
    dynamic_axes = {}
    for b in inputs:
        axes = {a: dim_symbol(b, a) for a in b.spec.dynamic_axes}
        if axes:
            dynamic_axes[b.name] = axes
    kwargs = dict(
        input_names=[b.name for b in inputs],
        output_names=out_names,
        dynamic_axes=dynamic_axes or None,
        opset_version=opset or 17,
        do_constant_folding=True,
    )
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    examples = tuple(b.example for b in inputs)
    with patched_forward(module, fwd), warnings.catch_warnings():
        target = module
        if isinstance(module, ScriptCall):  # see ScriptCall
            target = torch.jit.trace(module, examples, check_trace=False)
            # torch cannot read a traced module's signature and says so; nothing is lost
            warnings.filterwarnings("ignore", message=".*skipping _decide_input_format")
        torch.onnx.export(target, examples, path, **kwargs)


def export_dynamo(module, fwd, inputs, out_names, path, opset):
    from torch.export import Dim

    dims = {}
    dynamic_shapes = {}
    for b in inputs:
        spec = {}
        for a in b.spec.dynamic_axes:
            sym = dim_symbol(b, a)
            if sym not in dims:
                dims[sym] = Dim(sym, min=b.spec.min_shape[a], max=b.spec.max_shape[a])
            spec[a] = dims[sym]
        dynamic_shapes[b.name] = spec or None
    kwargs = dict(
        input_names=[b.name for b in inputs],
        output_names=out_names,
        dynamo=True,
        opset_version=opset or 18,
        verbose=False,
    )
    if any(v for v in dynamic_shapes.values()):
        kwargs["dynamic_shapes"] = dynamic_shapes
    params = inspect.signature(torch.onnx.export).parameters
    if "external_data" in params:
        kwargs["external_data"] = True
    with patched_forward(module, fwd):
        torch.onnx.export(module, tuple(b.example for b in inputs), path, **kwargs)
