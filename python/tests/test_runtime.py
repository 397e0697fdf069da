"""EngineModule at run time: zero-copy binding, output-shape prediction and its
fallbacks, data-dependent shapes, threads, the DLPack copy path, engine files and
objects, kiln.compile."""

import ctypes
import io
import json
import threading

import pytest
import torch

import kiln
from conftest import assert_close
from kiln import _module
from models import MLP, TinyEncoder


@pytest.fixture(scope="module")
def mlp():
    return MLP().eval()


@pytest.fixture(scope="module")
def mlp_engine(mlp):
    return kiln.convert_method_to_engine(
        mlp, inputs=[kiln.Input(min_shape=(1, 16), opt_shape=(2, 16), max_shape=(8, 16))],
        exporter="torchscript")


class Positives(torch.nn.Module):
    """An output whose shape depends on the input's values (NonZero)."""

    def forward(self, x):
        return x[x > 0] * 2


def test_inputs_bound_in_place_outputs_returned_fresh(mlp, mlp_engine):
    em = kiln.EngineModule(mlp_engine)
    x = torch.randn(4, 16)
    a = em(x)
    b = em(x)
    assert a.data_ptr() != b.data_ptr()  # each call returns its own tensors
    assert_close(a, b, atol=0, rtol=0)


def test_non_contiguous_and_grad_inputs(mlp, mlp_engine):
    em = kiln.EngineModule(mlp_engine)
    x = torch.randn(16, 4).t()  # not contiguous
    assert not x.is_contiguous()
    with torch.no_grad():
        want = mlp(x)
    assert_close(em(x), want)
    xg = torch.randn(3, 16, requires_grad=True)
    out = em(xg)
    assert not out.requires_grad  # engines are not differentiable
    with torch.no_grad():
        assert_close(out, mlp(xg))


def test_output_shapes_not_tied_to_inputs_use_the_cache():
    """With torch 1.13's TorchScript exporter the transformer's output dims are not named
    after its inputs' (they are named afresh): the first call with new input shapes
    copies the output once; later calls with those shapes are written in place. (The
    dynamo exporter, the default on new torch, ties them: in place from the start.)"""
    enc = TinyEncoder().eval()
    eng = kiln.convert_method_to_engine(
        enc, inputs=[kiln.Input(min_shape=(1, 1, 8), opt_shape=(2, 4, 8), max_shape=(2, 8, 8))],
        exporter="auto")
    em = kiln.EngineModule(eng)
    rules = em._kiln_rt.out_rules
    src = torch.randn(2, 5, 8)
    first = em(src)
    second = em(src)
    assert_close(first, second, atol=0, rtol=0)
    stats = em.run_stats
    if rules[0] is None:
        assert stats == {"runs": 2, "outputs_in_place": 1, "outputs_copied": 1}
    else:  # an exporter that ties the dims: in place from the start
        assert stats == {"runs": 2, "outputs_in_place": 2, "outputs_copied": 0}


def test_data_dependent_output_shape():
    eng = kiln.convert_method_to_engine(Positives(), inputs=[torch.randn(10)],
                                        exporter="torchscript")
    em = kiln.EngineModule(eng)
    few = torch.tensor([1.0, -1, -1, -1, -1, -1, -1, -1, -1, 2])
    many = torch.tensor([1.0, 1, 1, 1, 1, 1, 1, 1, -1, 2])
    assert_close(em(few), few[few > 0] * 2)
    # the cached shape (2 elements) is too small for this run: retried unbound
    assert_close(em(many), many[many > 0] * 2)
    assert_close(em(few), few[few > 0] * 2)
    assert em.run_stats["outputs_copied"] == 3


def test_threads_share_one_engine(mlp, mlp_engine):
    em = kiln.EngineModule(mlp_engine, threads=1)
    xs = [torch.randn(b, 16) for b in (1, 2, 3, 4, 5, 6, 7, 8)]
    with torch.no_grad():
        want = [mlp(x) for x in xs]
    errors = []

    def work(i):
        try:
            for _ in range(5):
                assert_close(em(xs[i]), want[i])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    assert len(em.engine._all_contexts) >= 1


def test_dlpack_copy_path():
    """The path CUDA engines use for outputs kiln keeps (DLPack wrap + clone), run on CPU
    memory."""
    src = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    for dtype in (torch.float32, torch.int64, torch.bool, torch.float16, torch.uint8):
        t = src.to(dtype)
        out = _module.borrowed_to_tensor(t.data_ptr(), (3, 4), dtype, torch.device("meta"))
        assert out.dtype == dtype
        assert torch.equal(out, t) and out.data_ptr() != t.data_ptr()


def test_engine_module_sources(mlp_engine, tmp_path):
    path = tmp_path / "mlp.kiln"
    kiln.save(mlp_engine, path)
    x = torch.randn(2, 16)
    want = kiln.EngineModule(mlp_engine)(x)
    for source in (path, str(path), io.BytesIO(path.read_bytes()), bytearray(mlp_engine),
                   kiln.EngineModule(mlp_engine)):
        em = kiln.EngineModule(source)
        assert_close(em(x), want, atol=0, rtol=0)
    with open(path, "rb") as f:
        assert_close(kiln.load(f)(x), want, atol=0, rtol=0)


def test_engine_information(mlp_engine):
    em = kiln.EngineModule(mlp_engine)
    assert em.precision == "fp32"
    assert em.device == torch.device("cpu")
    assert repr(em) == ("EngineModule(inputs=[x: float32[x_dim0, 16]], "
                        "outputs=[output0: float32[x_dim0, 4]], device=cpu, precision=fp32)")
    info = em.inspect(json=True)
    assert info["inputs"][0]["name"] == "x" and info["inputs"][0]["max"] == [8, 16]
    assert "layers" in info
    assert em.inspect().startswith("kiln engine")
    assert em.inputs[0].min_shape == (1, 16) and em.inputs[0].max_shape == (8, 16)
    assert mlp_engine.spec["method"] == "MLP.forward"
    assert mlp_engine.spec["inputs"] == ["x"]
    assert kiln.library_version() == "0.1.0"
    json.dumps(mlp_engine.spec)


def test_compile(mlp):
    em = kiln.compile(mlp, [torch.randn(2, 16)], threads=1)
    x = torch.randn(2, 16)
    with torch.no_grad():
        assert_close(em(x), mlp(x))


def test_method_calling_self(mlp):
    """A method that calls self(...) exports (the module's forward is called inside)."""

    class Scaled(MLP):
        def scaled(self, x, k):
            return self(x) * k

    m = Scaled().eval()
    em = kiln.EngineModule(kiln.convert_method_to_engine(
        m, "scaled", inputs=[torch.randn(2, 16), torch.tensor(3.0)], exporter="torchscript"))
    x, k = torch.randn(2, 16), torch.tensor(0.5)
    with torch.no_grad():
        assert_close(em(x, k), m.scaled(x, k))
    assert "forward" not in m.__dict__  # the stand-in forward is gone again


def test_build_options_reach_the_builder(mlp, tmp_path):
    eng = kiln.convert_method_to_engine(
        mlp, inputs=[torch.randn(2, 16)], exporter="torchscript", opset=13, threads=3,
        workspace=1 << 20, timing_cache=tmp_path / "timings", onnx_path=tmp_path / "mlp.onnx")
    info = kiln.EngineModule(eng).inspect(json=True)
    assert info["threads"] == 3 and info["precision"] == "fp32" and info["device"] == "cpu"
    import onnx

    model = onnx.load(str(tmp_path / "mlp.onnx"))
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [13]
    assert [i.name for i in model.graph.input] == ["x"]
    assert [o.name for o in model.graph.output] == ["output0"]


def test_fast_math_option(mlp):
    """fast_math=True reaches kiln_builder_set_fast_math and the engine says so; the
    default engine is the accurate one; a value that is not a bool is refused."""
    assert kiln.compile(mlp, [torch.randn(2, 16)]).inspect(json=True)["math"] == "accurate"
    em = kiln.compile(mlp, [torch.randn(2, 16)], fast_math=True)
    assert em.inspect(json=True)["math"] == "fast"
    assert "--fast-math" in em.inspect()
    with pytest.raises(TypeError, match="fast_math must be True or False, got 'yes'"):
        kiln.compile(mlp, [torch.randn(2, 16)], fast_math="yes")


def test_tf32_precision_is_kept(mlp):
    em = kiln.compile(mlp, [torch.randn(2, 16)], precision="tf32")
    assert em.precision == "tf32"


def test_memory_limit_refuses_then_allows(mlp, mlp_engine):
    """Engine.set_memory_limit (kiln_context_set_memory_limit) on every context."""
    em = kiln.EngineModule(mlp_engine)
    x = torch.randn(8, 16)
    with torch.no_grad():
        want = mlp(x)
    em.engine.set_memory_limit(64)  # below any plan: refused before allocating
    with pytest.raises(kiln.KilnError) as err:
        em(x)
    assert err.value.status == kiln.Status.OUT_OF_MEMORY
    assert "memory limit of 64 bytes" in str(err.value)
    em.engine.set_memory_limit(None)  # no limit: the same context now runs
    assert_close(em(x), want)
    em.engine.set_memory_limit(64 << 20)  # a limit that fits
    assert_close(em(x), want)
    with pytest.raises(ValueError):
        em.engine.set_memory_limit(-1)


def test_close_and_memory_limit_while_other_threads_run(mlp, mlp_engine):
    """Engine.close() while a run holds a context leaves engine and context alive until
    that run releases it (they were freed under it: SIGSEGV with 3 threads running), and
    calls after it raise ValueError. set_memory_limit while other threads run reaches
    their contexts when they are free (C refuses a call on a context another thread is
    running: KilnError 'the context is in use')."""
    from kiln import _lib

    em = kiln.EngineModule(mlp_engine)
    x = torch.randn(8, 16)
    with torch.no_grad():
        want = mlp(x)
    eng = em.engine
    stop = threading.Event()
    errors = []

    def runs():
        try:
            while not stop.is_set():
                assert_close(em(x), want)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=runs) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for k in range(300):
            eng.set_memory_limit((64 << 20) + k)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    # a run in progress (its context acquired) when close() comes
    ctx = eng.acquire_context()
    eng.close()
    assert eng._finalizer.alive  # not freed under the run
    L = _lib.lib()
    dims = (ctypes.c_int64 * 2)(8, 16)
    assert L.kiln_context_set_input(ctx, b"x", 1, 2, dims, x.data_ptr()) == 0
    for o in eng.outputs:  # (bound by the last EngineModule run to a tensor since freed)
        assert L.kiln_context_set_output(ctx, _lib.c_text(o.name, "name"), None, 0) == 0
    assert L.kiln_context_run(ctx) == 0
    eng.release_context(ctx)
    assert not eng._finalizer.alive  # freed by the last release
    with pytest.raises(ValueError, match="the engine was closed"):
        em(x)
    with pytest.raises(ValueError, match="the engine was closed"):
        eng.set_memory_limit(0)


def test_names_that_are_not_utf8(tmp_path, kiln_cli):
    """An engine whose input and output names hold bytes that are not UTF-8 (ONNX's
    protobuf strings are not checked; the C library takes any bytes): the names come to
    Python as lone surrogates and go back to C as the same bytes, so the engine runs."""
    import subprocess

    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Relu", ["in_A"], ["out_B"])], "g",
                          [helper.make_tensor_value_info("in_A", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("out_B", TensorProto.FLOAT, [2, 3])])
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    data = data.replace(b"in_A", b"in\xff\xfe").replace(b"out_B", b"out\xc3(")  # same lengths
    (tmp_path / "m.onnx").write_bytes(data)
    subprocess.run([kiln_cli, "build", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.kiln"), "-q"],
                   check=True)
    m = kiln.load(tmp_path / "m.kiln")
    assert [i.name for i in m.engine.inputs] == [b"in\xff\xfe".decode("utf-8", "surrogateescape")]
    assert [o.name for o in m.engine.outputs] == [b"out\xc3(".decode("utf-8", "surrogateescape")]
    x = torch.tensor([[-1.0, 2.0, -3.0], [4.0, float("nan"), -0.5]])
    y = m(x)
    assert torch.equal(torch.nan_to_num(y, 7.0), torch.nan_to_num(torch.relu(x), 7.0))
