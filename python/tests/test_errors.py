"""Every error of the Python front end, with its message checked word for word."""

import os
import re
import subprocess
import sys

import pytest
import torch

import kiln
from kiln import _compat
from conftest import raises
from models import MLP, Gated, GatedDynamo, Unsupported


@pytest.fixture(scope="module")
def mlp():
    return MLP().eval()


@pytest.fixture(scope="module")
def engine(mlp):
    """A dynamic-batch MLP engine: input x float32 [1..8, 16]."""
    return kiln.convert_method_to_engine(
        mlp, inputs=[kiln.Input(min_shape=(1, 16), opt_shape=(2, 16), max_shape=(8, 16))],
        exporter="torchscript")


# ---- convert_method_to_engine arguments -------------------------------------------------

def test_inputs_and_arg_inputs_both_given(mlp):
    x = torch.randn(2, 16)
    with raises(ValueError, "give inputs= or arg_inputs= (they are aliases), not both"):
        kiln.convert_method_to_engine(mlp, inputs=[x], arg_inputs=[x])


def test_no_inputs(mlp):
    with raises(ValueError, "no inputs given: pass inputs= (or arg_inputs=) and/or kwarg_inputs="):
        kiln.convert_method_to_engine(mlp)


def test_method_missing(mlp):
    with raises(AttributeError,
                "MLP has no method 'encode'; method_name must name a method of the module"):
        kiln.convert_method_to_engine(mlp, "encode", inputs=[torch.randn(2, 16)])


def test_inputs_not_matching_the_signature(mlp):
    with raises(TypeError, "the inputs do not match MLP.forward(x): too many positional "
                           "arguments"):
        kiln.convert_method_to_engine(mlp, inputs=[torch.randn(2, 16), torch.randn(2, 16)])


def test_input_not_a_tensor(mlp):
    with raises(TypeError, "input 'x' of MLP.forward is an int; kiln engines take tensors: pass "
                           "a torch.Tensor or a kiln.Input"):
        kiln.convert_method_to_engine(mlp, inputs=[3])


def test_output_not_a_tensor():
    class Counts(torch.nn.Module):
        def forward(self, x):
            return x + 1, x.shape[0]

    with raises(TypeError, "Counts.forward returned an int at output[1]; kiln engines return "
                           "tensors (alone or in tuples, lists and dicts)"):
        kiln.convert_method_to_engine(Counts(), inputs=[torch.randn(2, 3)])


def test_bad_precision_device_exporter_option(mlp):
    x = [torch.randn(2, 16)]
    with raises(ValueError, "precision must be 'fp32', 'tf32', 'fp16' or 'bf16'; got 'int8'"):
        kiln.convert_method_to_engine(mlp, inputs=x, precision="int8")
    with raises(ValueError, "device 'tpu': expected cpu, cpu:0, cuda or cuda:N (N in 0..1023)"):
        kiln.convert_method_to_engine(mlp, inputs=x, device="tpu")
    with raises(ValueError, "exporter must be 'auto', 'torchscript' or 'dynamo'; got 'onnx'"):
        kiln.convert_method_to_engine(mlp, inputs=x, exporter="onnx")
    with raises(TypeError, "unknown option 'thread' (did you mean 'threads'?); "
                           "kiln.convert_method_to_engine takes: method_name, inputs, "
                           "arg_inputs, kwarg_inputs, device, precision, enabled_precisions, "
                           "exporter, ir, opset, dynamic_batch, onnx_path, workspace_size, "
                           "output_format, threads, workspace, timing_cache, fast_math"):
        kiln.convert_method_to_engine(mlp, inputs=x, thread=2)


def test_unsupported_precision_is_kilns_error(mlp):
    """Precision is respected: no silent fp32 engine when fp16 was asked for."""
    with raises(kiln.KilnError, "precision fp16 is not supported by the CPU backend (use fp32)") as e:
        kiln.convert_method_to_engine(mlp, inputs=[torch.randn(2, 16)], precision=torch.float16)
    assert e.value.status == kiln.Status.UNSUPPORTED
    assert e.value.status_name == "KILN_ERR_UNSUPPORTED"


def test_unsupported_operators_torchscript():
    with pytest.raises(kiln.UnsupportedOperatorError) as e:
        kiln.convert_method_to_engine(Unsupported(), inputs=[torch.randn(2, 4)],
                                      exporter="torchscript")
    assert str(e.value) == (
        "kiln does not support 2 operators used by Unsupported.forward:\n"
        "  kiln_test::Frobnicate at node '/blocks/blocks.0/Frobnicate' (module blocks.0), "
        "node '/blocks/blocks.3/Frobnicate' (module blocks.3)\n"
        "  kiln_test::Wibble at node '/blocks/blocks.2/Wibble' (module blocks.2)")
    assert e.value.status == kiln.Status.UNSUPPORTED
    assert isinstance(e.value, kiln.KilnError)
    assert e.value.operators == {
        "kiln_test::Frobnicate": [("/blocks/blocks.0/Frobnicate", "blocks.0"),
                                  ("/blocks/blocks.3/Frobnicate", "blocks.3")],
        "kiln_test::Wibble": [("/blocks/blocks.2/Wibble", "blocks.2")],
    }


def _check_both_branches(module, exporter):
    """Data-dependent control flow (ONNX If) converts, and both branches agree with PyTorch."""
    x = torch.randn(3, 4)
    engine = kiln.EngineModule(kiln.convert_method_to_engine(module, inputs=[x], exporter=exporter))
    signs = set()
    for scale in (1.0, -1.0, 30.0, -30.0):
        for seed in range(4):
            x = torch.randn(3, 4, generator=torch.Generator().manual_seed(seed)) * scale
            with torch.no_grad():
                ref = module(x)
                signs.add(bool(module.fc(x).sum() > 0))
            torch.testing.assert_close(engine(x), ref, rtol=1e-5, atol=1e-6)
    assert signs == {True, False}  # both branches ran


def test_control_flow_torchscript():
    _check_both_branches(Gated(), "torchscript")


@pytest.mark.skipif("dynamo" not in __import__("conftest").exporters(),
                    reason="needs torch >= 2.5 and onnxscript")
def test_control_flow_dynamo():
    _check_both_branches(GatedDynamo(), "dynamo")


def test_torch_too_old(mlp, monkeypatch):
    monkeypatch.setattr(torch, "__version__", "1.12.1")
    with raises(RuntimeError, "kiln needs torch 1.13 or newer; this is torch 1.12.1"):
        kiln.convert_method_to_engine(mlp, inputs=[torch.randn(2, 16)])


def test_dynamo_needs_newer_torch(mlp, monkeypatch):
    if _compat.torch_version() >= _compat.MIN_TORCH_DYNAMO:
        monkeypatch.setattr(torch, "__version__", "2.4.1")
    with raises(RuntimeError,
                f"exporter='dynamo' needs torch 2.5 or newer; this is torch {torch.__version__}"):
        kiln.convert_method_to_engine(mlp, inputs=[torch.randn(2, 16)], exporter="dynamo")


# ---- kiln.Input ------------------------------------------------------------------------

def test_input_errors():
    with raises(ValueError, "kiln.Input: give either shape= or min_shape=/opt_shape=/max_shape=, "
                            "not both"):
        kiln.Input((1, 2), min_shape=(1, 2))
    with raises(ValueError, "kiln.Input: give shape= (static) or min_shape= and max_shape= "
                            "(dynamic)"):
        kiln.Input(min_shape=(1, 2))
    with raises(ValueError, "kiln.Input: min_shape, opt_shape and max_shape must have the same "
                            "rank, got (1, 2), (2, 2), (4,)"):
        kiln.Input(min_shape=(1, 2), opt_shape=(2, 2), max_shape=(4,))
    with raises(ValueError, "kiln.Input: need min_shape <= opt_shape <= max_shape in every "
                            "dimension, got (1, 2), (8, 2), (4, 2)"):
        kiln.Input(min_shape=(1, 2), opt_shape=(8, 2), max_shape=(4, 2))
    with raises(ValueError, "kiln.Input: shape must be a tuple of non-negative ints below 2**63, "
                            "got (1, -2)"):
        kiln.Input((1, -2))
    with raises(TypeError, "kiln.Input: dtype must be a torch dtype kiln supports, got "
                           "torch.complex64"):
        kiln.Input((1, 2), dtype=torch.complex64)
    with raises(ValueError, "kiln.Input: name must be a Python identifier, got 'my input'"):
        kiln.Input((1, 2), name="my input")
    i = kiln.Input(min_shape=(1, 4), max_shape=(8, 4))
    assert i.opt_shape == (8, 4) and i.dynamic_axes == [0]


# ---- EngineModule ----------------------------------------------------------------------

def test_engine_module_wrong_names(engine):
    em = kiln.EngineModule(engine)
    x = torch.randn(2, 16)
    with raises(TypeError, "EngineModule.forward got an unexpected input 'y'; the engine's inputs "
                           "are: x"):
        em(y=x)
    with raises(TypeError, "EngineModule.forward is missing input 'x'"):
        em()
    with raises(TypeError, "EngineModule.forward takes 1 input (x) but 2 were given"):
        em(x, x)
    with raises(TypeError, "EngineModule.forward got multiple values for input 'x'"):
        em(x, x=x)


def test_engine_module_wrong_shapes(engine):
    em = kiln.EngineModule(engine)
    with raises(ValueError, "input 'x' has shape (2, 16, 1), but the engine expects rank 2 "
                            "[1..8, 16]"):
        em(torch.randn(2, 16, 1))
    with raises(ValueError, "input 'x' has shape (2, 15), but the engine expects [1..8, 16] "
                            "(dimension 1 must be 16)"):
        em(torch.randn(2, 15))
    with raises(ValueError, "input 'x' has shape (9, 16), outside the engine's profile "
                            "[1..8, 16] (dimension 0 must be in 1..8)"):
        em(torch.randn(9, 16))


def test_engine_module_wrong_dtype(engine):
    em = kiln.EngineModule(engine)
    with raises(TypeError, "input 'x' has dtype torch.float64, but the engine expects "
                           "torch.float32"):
        em(torch.randn(2, 16, dtype=torch.float64))
    with raises(TypeError, "input 'x' must be a torch.Tensor, got list"):
        em([[0.0] * 16])


def test_engine_module_lazy_and_sparse_tensors(engine):
    # probe5: a tensor with torch's negative bit was read without its negation (a
    # silent wrong result); a sparse one failed in torch's data_ptr
    em = kiln.EngineModule(engine)
    x = torch.randn(2, 16)
    neg = torch._neg_view(x)
    assert neg.is_neg() and neg.is_contiguous()
    assert torch.equal(em(neg), em(-x))
    z = torch.randn(2, 16, dtype=torch.complex64)
    assert torch.equal(em(z.conj().imag), em(-z.imag))
    with raises(TypeError, "input 'x' is a torch.sparse_coo tensor; kiln reads dense tensors "
                           "(convert it with .to_dense())"):
        em(x.to_sparse())


def test_engine_module_wrong_device(engine):
    em = kiln.EngineModule(engine)
    assert em.device == torch.device("cpu")
    with raises(ValueError, "input 'x' is on meta, but the engine runs on cpu; move it with "
                            ".to('cpu')"):
        em(torch.empty(2, 16, device="meta"))


def test_engine_module_bad_engine():
    with raises(kiln.KilnError, "not a kiln engine file (bad magic)") as e:
        kiln.EngineModule(b"not an engine")
    assert e.value.status == kiln.Status.FORMAT
    with raises(TypeError, "EngineModule: engine must be bytes, a path or a binary file object; "
                           "got int"):
        kiln.EngineModule(42)
    with raises(RuntimeError, "EngineModule has no engine: construct it with one or "
                              "load_state_dict a state that holds one"):
        kiln.EngineModule()(torch.randn(1, 16))


def test_engine_module_missing_file(tmp_path):
    path = tmp_path / "missing.kiln"
    with raises(kiln.KilnError, f"{path}: cannot open engine: No such file or directory") as e:
        kiln.load(path)
    assert e.value.status == kiln.Status.IO


def test_values_c_would_cut_or_wrap(mlp, engine, tmp_path):
    """What ctypes and C strings would change silently is refused: a path or metadata with
    a NUL character (C reads up to it: kiln.load('a.kiln\\0b') loaded a.kiln, a value
    'a\\0b' was stored as 'a'), and ints past the C type (ctypes wraps them around: a
    max_shape of 2**64 + 2 built a profile of max 2, workspace 2**64 + 5 was 5 bytes,
    threads 2**32 + 1 was 1 thread)."""
    # device strings are kiln's to read, as the CLI's --device: torch 1.13 keeps an index
    # in 8 bits (torch.device('cuda:300') is cuda:44, 'cuda:1023' cuda:0: another GPU)
    from kiln._convert import parse_device
    assert [parse_device(d) for d in ("cpu", "cuda", "cuda:300", "cuda:1023")] == \
        [(0, 0), (1, 0), (1, 300), (1, 1023)]
    assert parse_device(torch.device("cuda", 3)) == (1, 3)
    with raises(ValueError, "device 'cpu\\x00' holds a NUL character"):
        parse_device("cpu\0")
    for d in ("cuda:1024", "cpu:1", "cuda: 1"):
        with raises(ValueError, f"device '{d}': expected cpu, cpu:0, cuda or cuda:N (N in 0..1023)"):
            parse_device(d)
    path = tmp_path / "e.kiln"
    kiln.save(engine, path)
    with pytest.raises(ValueError, match="e.kiln.x00other' holds a NUL character$"):
        kiln.load(str(path) + "\0other")
    e = kiln._engine.Engine.from_file(path)
    with raises(ValueError, "metadata 'k' value 'a\\x00b' holds a NUL character"):
        e.set_metadata("k", "a\0b")
    with raises(ValueError, "metadata key 'k\\x00' holds a NUL character"):
        e.get_metadata("k\0")
    with raises(ValueError, "memory limit (bytes) must be in 0..18446744073709551615, got "
                            "18446744073709551621"):
        e.set_memory_limit(2**64 + 5)
    e.close()
    with raises(ValueError, "kiln.Input: max_shape must be a tuple of non-negative ints below "
                            "2**63, got (18446744073709551618, 16)"):
        kiln.Input(min_shape=(1, 16), max_shape=(2**64 + 2, 16))
    x = torch.randn(2, 16)
    with raises(ValueError, "workspace (bytes) must be in 0..18446744073709551615, got "
                            "18446744073709551621"):
        kiln.convert_method_to_engine(mlp, inputs=[x], workspace=2**64 + 5)
    with raises(ValueError, "threads must be in 0..1024, got 4294967297"):
        kiln.convert_method_to_engine(mlp, inputs=[x], threads=2**32 + 1)
    with raises(TypeError, "threads must be an int, got 2.5"):  # (was cut to 2)
        kiln.convert_method_to_engine(mlp, inputs=[x], threads=2.5)
    with raises(ValueError, "threads must be in 0..1024, got 4294967297"):  # (was 1 thread)
        kiln.load(path, threads=2**32 + 1)(torch.randn(2, 16))


def test_state_not_an_engine_modules(engine):
    """load_state_dict of a state that is not an EngineModule's names what it expects (it
    failed with "'int' object is not subscriptable" or KeyError: 'kiln_engine')."""
    m = kiln.EngineModule(engine)
    want = ("EngineModule state: expected a dict with 'kiln_engine', the engine as a uint8 "
            "tensor (as EngineModule.state_dict() gives), got ")
    for state, got in ((5, "int"), ({"weights": torch.ones(2)}, "NoneType"),
                       ({"kiln_engine": torch.ones(2)}, "Tensor")):
        with raises(TypeError, want + got):
            m.load_state_dict({"_extra_state": state})


def test_load_empty_path():
    """kiln.load("") said "KilnError: .: the engine is a directory, not a regular file"
    (Path("") is "."); a bytes path was a TypeError from pathlib (probe7)."""
    for load in (kiln.load, kiln.EngineModule):
        with raises(ValueError, "engine path is empty"):
            load("")
    with raises(kiln.KilnError, "/nonexistent.kiln: cannot open engine: No such file or directory"):
        kiln.load(b"/nonexistent.kiln")


def test_load_engine_bytes(engine):
    """kiln.load(kiln.convert_method_to_engine(...)) took the engine's bytes for a path and
    failed with a message four times their size, the whole engine escaped in it; bytes
    that begin as an engine does (no path can: they hold NUL bytes) load as that engine,
    and a path refused for a NUL byte is named in a few hundred characters (probe8)."""
    m = kiln.load(engine)
    x = torch.randn(3, 16)
    assert torch.equal(m(x), kiln.EngineModule(engine)(x))
    assert torch.equal(kiln.load(bytearray(engine))(x), m(x))
    with pytest.raises(ValueError) as e:
        kiln.load(b"/tmp/" + b"x" * 1_000_000 + b"\0")
    msg = str(e.value)
    assert len(msg) < 400 and msg.endswith("... (1000006 characters) holds a NUL character"), msg
    with pytest.raises(kiln.KilnError, match="cannot open engine"):
        kiln.load(bytes(engine[:8]))  # (no NUL yet: a path, of no file)


def test_convert_leaves_the_inputs_alone():
    """A method writing its input in place (x.add_(1)) changed the caller's example tensor
    while kiln converted it (the eager check and the export each ran the method on it);
    the engine computes what the method returns (probe8)."""
    class AddInPlace(torch.nn.Module):
        def forward(self, x):
            x.add_(1)
            return x * 2

    x = torch.randn(2, 3)
    keep = x.clone()
    e = kiln.convert_method_to_engine(AddInPlace(), "forward", [x], exporter="torchscript")
    assert torch.equal(x, keep)
    assert torch.allclose(kiln.EngineModule(e)(x), (keep + 1) * 2)


def test_save_bad_argument():
    with raises(TypeError, "kiln.save: expected an EngineModule or engine bytes, got str"):
        kiln.save("engine", "out.kiln")


# ---- the library -----------------------------------------------------------------------

def test_library_not_found():
    code = "import kiln, torch; kiln.EngineModule(b'x')"
    env = dict(os.environ, KILN_LIBRARY="/nonexistent/libkiln.so",
               PYTHONPATH=os.path.dirname(kiln.__path__[0]))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1] == (
        "kiln._lib.LibraryNotFoundError: kiln: cannot load libkiln from "
        "KILN_LIBRARY=/nonexistent/libkiln.so: /nonexistent/libkiln.so")
