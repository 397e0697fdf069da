"""RMSNorm at the ONNX level, through the CLI: ONNX's RMSNormalization
(opset 23) is imported, and the decomposed forms that exporters write (T5's
Cast, Pow, ReduceMean, Add, Sqrt, Div(1, .), Mul, Mul weight; LLaMA's with a
Cast back; Pow(-0.5)) become one RMSNormalization layer (fuse_rmsnorm). Each
engine's output is checked against numpy (and onnxruntime where it runs the
model), and the layer count against `kiln inspect --json`. The CUDA tests
build the same models for the GPU (fp32 and fp16 engines; skipped without a
GPU or a CUDA backend) and check that the layer runs there (cuda.rmsnorm)."""

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

D = 48
EPS = 1e-6


def rms_ref(x, w, eps=EPS, axis=-1):
    axes = tuple(range(axis % x.ndim, x.ndim))
    x64 = x.astype(np.float64)
    return (x64 / np.sqrt(np.mean(x64 * x64, axis=axes, keepdims=True) + eps) * w).astype(np.float32)


def weight():
    return (0.5 + np.arange(D, dtype=np.float32) / D).astype(np.float32)


def const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def decomposed(form):
    """x [B, 7, D] -> RMSNorm as an exporter writes it (opset 17)."""
    nodes = [const("two", np.float32(2.0)), const("eps", np.float32(EPS)), const("one", np.float32(1.0)),
             const("half", np.float32(-0.5))]
    x = "x"
    if form in ("t5", "llama"):
        nodes.append(helper.make_node("Cast", ["x"], ["xc"], to=TensorProto.FLOAT))
        x = "xc"
    nodes += [helper.make_node("Pow", [x, "two"], ["sq"]),
              helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
              helper.make_node("Add", ["ms", "eps"], ["t"])]
    if form == "pow":
        nodes += [helper.make_node("Pow", ["t", "half"], ["inv"]), helper.make_node("Mul", [x, "inv"], ["n"])]
    else:
        nodes += [helper.make_node("Sqrt", ["t"], ["s"]), helper.make_node("Div", ["one", "s"], ["inv"]),
                  helper.make_node("Mul", [x, "inv"], ["n"])]
    n = "n"
    if form == "llama":
        nodes.append(helper.make_node("Cast", ["n"], ["nc"], to=TensorProto.FLOAT))
        n = "nc"
    nodes.append(helper.make_node("Mul", ["w", n], ["y"]))
    if form == "t5":  # the residual reads the Cast's output (torch's .to(float32) is the tensor itself)
        nodes.append(helper.make_node("Add", [x, "y"], ["z"]))
    out = "z" if form == "t5" else "y"
    g = helper.make_graph(nodes, "rms_" + form,
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 7, D])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["B", 7, D])],
                          [numpy_helper.from_array(weight(), "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def onnx_op(opset, axis=-1, scale_shape=(D,)):
    attrs = {"epsilon": EPS} if axis == -1 else {"epsilon": EPS, "axis": axis}
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], **attrs)
    scale = np.resize(weight(), scale_shape).astype(np.float32)
    g = helper.make_graph([node], "rms_op", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7, D])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 7, D])],
                          [numpy_helper.from_array(scale, "scale")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), scale


def build_and_run(cli, model, tmp_path, x, shapes, extra=()):
    src, eng, out = tmp_path / "m.onnx", tmp_path / "m.kiln", tmp_path / "out"
    onnx.save(model, str(src))
    np.save(tmp_path / "x.npy", x)
    r = subprocess.run([cli, "build", str(src), "-o", str(eng), "--shapes", shapes, "-q", *extra],
                       capture_output=True, text=True)
    if r.returncode and "--device" in extra and ("no CUDA device" in r.stderr or "not available" in r.stderr):
        pytest.skip("no CUDA device or backend: " + r.stderr.strip())
    assert r.returncode == 0, r.stderr
    info = json.loads(subprocess.run([cli, "inspect", str(eng), "--json"], check=True, capture_output=True,
                                     text=True).stdout)
    subprocess.run([cli, "run", str(eng), "-i", f"x={tmp_path / 'x.npy'}", "--output-dir", str(out), "-q"],
                   check=True)
    y = np.load(next(out.glob("*.npy")))
    return y, [layer["op"] for layer in info["layers"]], [layer["kernel"] for layer in info["layers"]]


@pytest.mark.parametrize("form", ["t5", "llama", "pow"])
def test_decomposed_forms_fuse(kiln_cli, tmp_path, form):
    x = (np.random.RandomState(1).standard_normal((3, 7, D)) * 2 + 1).astype(np.float32)
    y, ops, _ = build_and_run(kiln_cli, decomposed(form), tmp_path, x, "x:3x7x48")
    want = rms_ref(x, weight())
    if form == "t5":
        want = want + x
        assert ops == ["RMSNormalization", "Add"], ops
    else:
        assert ops == ["RMSNormalization"], ops
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    # without the pass: the same values from the unfused nodes
    y0, ops0, _ = build_and_run(kiln_cli, decomposed(form), tmp_path, x, "x:3x7x48", ["--disable-pass", "fuse_rmsnorm"])
    assert "RMSNormalization" not in ops0
    np.testing.assert_allclose(y0, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis,scale_shape", [(-1, (D,)), (1, (7, D)), (-1, (1,))])
def test_onnx_rmsnormalization(kiln_cli, tmp_path, axis, scale_shape):
    model, scale = onnx_op(23, axis, scale_shape)
    x = (np.random.RandomState(2).standard_normal((2, 7, D)) * 3 + 2).astype(np.float32)
    y, ops, _ = build_and_run(kiln_cli, model, tmp_path, x, "x:2x7x48")
    assert ops == ["RMSNormalization"], ops
    np.testing.assert_allclose(y, rms_ref(x, scale, axis=axis), rtol=1e-5, atol=1e-5)
    try:
        import onnxruntime as ort
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:  # an onnxruntime without opset 23
        pytest.skip(f"onnxruntime cannot run RMSNormalization: {e}")
    np.testing.assert_allclose(y, sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_onnx_rmsnormalization_needs_opset_23(kiln_cli, tmp_path):
    model, _ = onnx_op(22)
    onnx.save(model, str(tmp_path / "m.onnx"))
    r = subprocess.run([kiln_cli, "build", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.kiln")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "RMSNormalization from opset 23" in r.stderr, r.stderr


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("form", ["t5", "llama", "pow", "onnx23"])
def test_cuda_rmsnorm(kiln_cli, tmp_path, form, precision):
    x = (np.random.RandomState(3).standard_normal((2, 7, D)) * 2 + 1).astype(np.float32)
    model = onnx_op(23)[0] if form == "onnx23" else decomposed(form)
    y, ops, kernels = build_and_run(kiln_cli, model, tmp_path, x, "x:2x7x48", ["--device", "cuda", "--" + precision])
    want = rms_ref(x, weight()) + (x if form == "t5" else 0)
    assert ops.count("RMSNormalization") == 1 and "ReduceMean" not in ops, ops
    assert kernels[ops.index("RMSNormalization")] == "cuda.rmsnorm:RMSNormalization", kernels
    tol = 1e-5 if precision == "fp32" else 5e-3
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol * np.abs(want).max())


@pytest.mark.parametrize("exporter", ["ts", "dy"])
def test_hf_t5_encoder_exports(kiln_cli, tmp_path, exporter):
    """transformers' T5 encoder (2 layers) exported by torch 2.11, TorchScript and dynamo
    (tests/data/attention): its five norms fuse, and the engine matches the unfused model."""
    src = str(Path(__file__).resolve().parents[2] / "tests" / "data" / "attention" / f"t211_{exporter}_hf_t5enc.onnx")
    shapes = ["--shapes", "input_ids:2x8,attention_mask:2x8"]
    eng = str(tmp_path / "t5.kiln")
    subprocess.run([kiln_cli, "build", src, "-o", eng, "-q", *shapes], check=True)
    info = json.loads(subprocess.run([kiln_cli, "inspect", eng, "--json"], check=True, capture_output=True,
                                     text=True).stdout)
    ops = [layer["op"] for layer in info["layers"]]
    assert ops.count("RMSNormalization") == 5 and "ReduceMean" not in ops and "Pow" not in ops, ops
    r = subprocess.run([kiln_cli, "debug", "compare", src, *shapes], capture_output=True, text=True)
    assert r.returncode == 0 and "every compared tensor is within tolerance" in r.stdout, r.stdout + r.stderr
