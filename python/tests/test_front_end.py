"""The Python front end as Torch-TensorRT and Lightning users use it (issue 20, item 5):
tracing and scripting an EngineModule, file permissions, bad file paths, Torch-TensorRT's
option names, ScriptModules as input, operators the exporter cannot export, per-input
dynamic_batch, and the output structure inside the engine file. Messages are checked
word for word."""

import io
import json
import os
import subprocess
import warnings
from pathlib import Path
from typing import Dict

import pytest
import torch
import torch.nn as nn

import kiln
import kiln.lightning as kl
from conftest import assert_close, raises
from kiln import _compat
from models import MLP

TRACE = ("kiln.EngineModule cannot be traced ({how}): it runs a kiln engine outside "
         "PyTorch's operators, so a trace would record only the creation of its empty output "
         "tensors and return uninitialized memory. Trace or export the original module "
         "instead, or call the EngineModule from Python")
SCRIPT = ("kiln.EngineModule cannot be scripted (torch.jit.script): it runs a kiln engine "
          "through ctypes, which TorchScript cannot compile. Keep it in Python (script the "
          "parts around it); to save it, use kiln.save or torch.save (an EngineModule is "
          "state_dict-able)")


@pytest.fixture(scope="module")
def mlp():
    return MLP().eval()


@pytest.fixture(scope="module")
def mlp_bytes(mlp):
    """MLP.forward, batch 1..8 (torchscript exporter)."""
    return kiln.convert_method_to_engine(
        mlp, inputs=[kiln.Input(min_shape=(1, 16), opt_shape=(2, 16), max_shape=(8, 16))],
        exporter="torchscript")


@pytest.fixture(scope="module")
def embed_bytes(mlp):
    """MLP.embed: nested outputs (dict of a tensor, a tuple with None, a list)."""
    return kiln.convert_method_to_engine(mlp, "embed", inputs=[torch.randn(2, 16)],
                                         exporter="torchscript")


class Holder(nn.Module):
    def __init__(self, engine):
        super().__init__()
        self.pre = nn.Linear(16, 16)
        self.engine = kiln.EngineModule(engine)

    def forward(self, x):
        return self.engine(self.pre(x))


# ---- 1. tracing and scripting an EngineModule -------------------------------------------

def test_trace_refused(mlp_bytes):
    em = kiln.EngineModule(mlp_bytes)
    x = torch.randn(2, 16)
    with raises(RuntimeError, TRACE.format(how="torch.jit.trace, torch.onnx.export")):
        torch.jit.trace(em, x)
    with raises(RuntimeError, TRACE.format(how="torch.jit.trace, torch.onnx.export")):
        torch.jit.trace(Holder(mlp_bytes), x)  # inside another module
    with raises(RuntimeError, TRACE.format(how="torch.fx") + " (a torch.fx.Tracer whose "
                "is_leaf_module is true for it keeps it as one call)"):
        torch.fx.symbolic_trace(Holder(mlp_bytes))
    assert em(x).shape == (2, 4)  # still runs from Python


def test_script_refused(mlp_bytes):
    with raises(RuntimeError, SCRIPT):
        torch.jit.script(kiln.EngineModule(mlp_bytes))
    with raises(RuntimeError, SCRIPT):
        torch.jit.script(Holder(mlp_bytes))


# ---- 2. file permissions ----------------------------------------------------------------

def _mode(path):
    return os.stat(path).st_mode & 0o777


def test_saved_files_follow_the_umask(mlp_bytes, tmp_path):
    old = os.umask(0o022)
    try:
        kiln.save(mlp_bytes, tmp_path / "a.kiln")
        kiln.save(kiln.EngineModule(mlp_bytes), tmp_path / "b.kiln")
        os.umask(0o027)
        kiln.save(mlp_bytes, tmp_path / "c.kiln")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "a.kiln") == 0o644
    assert _mode(tmp_path / "b.kiln") == 0o644
    assert _mode(tmp_path / "c.kiln") == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.kiln", "b.kiln", "c.kiln"]


def test_to_engine_file_follows_the_umask(mlp, tmp_path, kiln_cli):
    old = os.umask(0o002)
    try:
        kl.to_engine(mlp, tmp_path / "m.kiln", torch.randn(2, 16), exporter="torchscript")
    finally:
        os.umask(old)
    # as the CLI's `kiln build -o` does
    model = Path(__file__).resolve().parents[2] / "tests" / "data" / "tiny_mlp.onnx"
    old = os.umask(0o002)
    try:
        r = subprocess.run([kiln_cli, "build", str(model), "-o", str(tmp_path / "cli.kiln")],
                           capture_output=True, text=True)
    finally:
        os.umask(old)
    assert r.returncode == 0, r.stderr
    assert _mode(tmp_path / "m.kiln") == _mode(tmp_path / "cli.kiln") == 0o664


# ---- 3. bad file paths fail first -------------------------------------------------------

@pytest.fixture
def no_export(monkeypatch):
    """Makes any export fail the test: the argument checks must come first."""
    def boom(*a, **k):
        raise AssertionError("exported before checking the arguments")

    monkeypatch.setattr(kl, "convert_method_to_engine", boom)
    monkeypatch.setattr(kiln._export, "export_torchscript", boom)
    monkeypatch.setattr(kiln._export, "export_dynamo", boom)


def test_to_engine_bad_file_path(mlp, tmp_path, no_export):
    x = torch.randn(2, 16)
    missing = tmp_path / "no" / "such" / "m.kiln"
    with raises(FileNotFoundError, f"[Errno 2] file_path '{missing}': the folder "
                                   f"'{missing.parent}' does not exist"):
        kl.to_engine(mlp, missing, x)
    with raises(IsADirectoryError, f"[Errno 21] file_path '{tmp_path}' is a folder; give a "
                                   f"file name inside it"):
        kl.to_engine(mlp, str(tmp_path), x)
    with raises(TypeError, "file_path must be a str, a pathlib.Path or a binary file object "
                           "(e.g. io.BytesIO); got int"):
        kl.to_engine(mlp, 42, x)
    with raises(TypeError, "file_path is a text-mode file object; engines are bytes: open "
                           "it in binary mode ('wb') or pass io.BytesIO()"):
        kl.to_engine(mlp, io.StringIO(), x)
    (tmp_path / "file").write_text("")
    with raises(NotADirectoryError, f"[Errno 20] file_path '{tmp_path}/file/m.kiln': "
                                    f"'{tmp_path}/file' is not a folder"):
        kl.to_engine(mlp, tmp_path / "file" / "m.kiln", x)
    os.mkfifo(tmp_path / "fifo")
    with raises(OSError, f"[Errno 22] file_path '{tmp_path}/fifo' exists and is not a regular "
                         f"file (a device, FIFO or socket); kiln replaces only regular files"):
        kl.to_engine(mlp, tmp_path / "fifo", x)
    with raises(TypeError, "file_path must be a str, a pathlib.Path or a binary file object "
                           "(e.g. io.BytesIO); got list"):
        kl.EngineExportCallback([1])
    with raises(IsADirectoryError, f"[Errno 21] file_path '{tmp_path}' is a folder; give a "
                                   f"file name inside it"):
        kl.EngineExportCallback(tmp_path)


def test_save_and_onnx_path_bad_paths(mlp, mlp_bytes, tmp_path, no_export):
    missing = tmp_path / "gone" / "m.kiln"
    with raises(FileNotFoundError, f"[Errno 2] kiln.save path '{missing}': the folder "
                                   f"'{missing.parent}' does not exist"):
        kiln.save(mlp_bytes, missing)
    with raises(FileNotFoundError, f"[Errno 2] onnx_path '{tmp_path}/gone/m.onnx': the "
                                   f"folder '{tmp_path}/gone' does not exist"):
        kiln.convert_method_to_engine(mlp, inputs=[torch.randn(2, 16)],
                                      onnx_path=tmp_path / "gone" / "m.onnx")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user that writes anywhere (root)")
        with raises(PermissionError, f"[Errno 13] kiln.save path '{ro}/m.kiln': the folder "
                                     f"'{ro}' is not writable"):
            kiln.save(mlp_bytes, ro / "m.kiln")
    finally:
        ro.chmod(0o700)


def test_save_replaces_only_engines(mlp, mlp_bytes, tmp_path, no_export):
    """kiln.save (and kiln.lightning.to_engine's file_path) replaced a model, its external
    weights or any other file without a word, where kiln_engine_save and `kiln build -o`
    refuse: only an engine or an empty file is replaced, and a link itself (probe7)."""
    for name, body in (("m.onnx", b"\x08\x07\x12\x04onnx"), ("w.bin", b"weights"),
                       ("cache.txt", b"kiln-timing-cache 4\n")):
        victim = tmp_path / name
        victim.write_bytes(body)
        tail = (f"'{victim}' exists and is not a kiln engine (a model, its weights, a timing "
                f"cache?); kiln replaces only engines and empty files: remove it or name another "
                f"file")
        with raises(FileExistsError, f"[Errno 17] kiln.save path {tail}"):
            kiln.save(mlp_bytes, victim)
        with raises(FileExistsError, f"[Errno 17] file_path {tail}"):
            kl.to_engine(mlp, victim, torch.randn(2, 16))
        assert victim.read_bytes() == body
    # an engine, an empty file and a link (to a model: the link is replaced, not the model)
    (tmp_path / "old.kiln").write_bytes(mlp_bytes)
    (tmp_path / "empty.kiln").write_bytes(b"")
    (tmp_path / "link.kiln").symlink_to(tmp_path / "m.onnx")
    for name in ("old.kiln", "empty.kiln", "link.kiln"):
        kiln.save(mlp_bytes, tmp_path / name)
        assert (tmp_path / name).read_bytes() == bytes(mlp_bytes)
    assert not (tmp_path / "link.kiln").is_symlink()
    assert (tmp_path / "m.onnx").read_bytes() == b"\x08\x07\x12\x04onnx"


def test_save_error_names_the_users_path(mlp_bytes, tmp_path, monkeypatch):
    """A failure while writing (after the checks) names the path given, not the temporary
    file, and leaves nothing behind."""
    real = os.replace

    def failing_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with raises(OSError, f"[Errno 28] cannot write '{tmp_path}/m.kiln': No space left on "
                         f"device"):
        kiln.save(mlp_bytes, tmp_path / "m.kiln")
    monkeypatch.setattr(os, "replace", real)
    assert list(tmp_path.iterdir()) == []


def test_long_names_and_links(mlp, mlp_bytes, tmp_path):
    """Names up to the file system's 255 bytes are written (the temporary name was the
    target's name plus 14 bytes: ENAMETOOLONG from 242 bytes on), and a symbolic link at
    the path is replaced, its target untouched, by kiln.save and onnx_path alike, as by
    `kiln build -o` (onnx_path was copied through the link over its target)."""
    for n in (240, 255):
        name = "a" * (n - 5) + ".kiln"
        kiln.save(mlp_bytes, tmp_path / name)
        assert (tmp_path / name).read_bytes() == bytes(mlp_bytes)
    kiln.convert_method_to_engine(mlp, inputs=[torch.randn(2, 16)],
                                  onnx_path=tmp_path / ("o" * 250 + ".onnx"))
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    for name, write in (("m.onnx", lambda p: kiln.convert_method_to_engine(
                            mlp, inputs=[torch.randn(2, 16)], onnx_path=p)),
                        ("m.kiln", lambda p: kiln.save(mlp_bytes, p))):
        link = tmp_path / name
        link.symlink_to(precious)
        write(link)
        assert precious.read_text() == "keep me\n"
        assert not link.is_symlink() and link.stat().st_size > 100
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_kept_onnx_with_external_data(tmp_path, kiln_cli):
    """The dynamo exporter stores weights beside the model (`model.onnx.data`, named in
    each tensor's external data). onnx_path keeps the model under the user's name and the
    weights as `<onnx_path>.data`: the kept model must name that file, or nothing can load
    its weights (it named the exporter's temporary `model.onnx.data`)."""
    onnx = pytest.importorskip("onnx")
    from onnx import helper, numpy_helper, TensorProto
    import numpy as np
    from kiln import _convert

    w = np.arange(16 * 4, dtype=np.float32).reshape(16, 4) / 7
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    export = tmp_path / "export"
    export.mkdir()
    onnx.save_model(model, str(export / "model.onnx"), save_as_external_data=True,
                    location="model.onnx.data", size_threshold=0)
    kept = tmp_path / "kept" / "mine.onnx"
    kept.parent.mkdir()
    _convert._keep_onnx(export / "model.onnx", kept)
    assert (kept.parent / "mine.onnx.data").is_file()
    assert not (kept.parent / "model.onnx.data").exists()
    again = onnx.load(str(kept))  # loads the weights from the kept file's folder
    np.testing.assert_array_equal(numpy_helper.to_array(again.graph.initializer[0]), w)
    out = tmp_path / "mine.kiln"
    r = subprocess.run([kiln_cli, "build", str(kept), "-o", str(out), "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # a name near the file system's limit (255 bytes): `<name>.data` cannot exist, so the
    # weights go to a shorter name, which the kept model names (ENAMETOOLONG on torch 2.x,
    # whose exporter stores weights outside the model, in test_long_names_and_links)
    for stem in ("o" * 250, "é" * 125):
        long_kept = tmp_path / "kept" / (stem + ".onnx")
        _convert._keep_onnx(export / "model.onnx", long_kept)
        data = [p for p in long_kept.parent.iterdir() if p.name.endswith(".data") and p.name.startswith(stem[:8])]
        assert len(data) == 1 and len(os.fsencode(data[0].name)) <= 255, data
        again = onnx.load(str(long_kept))
        np.testing.assert_array_equal(numpy_helper.to_array(again.graph.initializer[0]), w)
    # a model without external data is copied as it is
    plain = tmp_path / "plain.onnx"
    onnx.save_model(model, str(export / "p.onnx"))
    _convert._keep_onnx(export / "p.onnx", plain)
    assert plain.read_bytes() == (export / "p.onnx").read_bytes()
    assert not Path(str(plain) + ".data").exists()


# ---- 4. Torch-TensorRT's option names ---------------------------------------------------

def _precision(engine_bytes):
    return kiln.EngineModule(engine_bytes).precision


def test_enabled_precisions(mlp):
    x = [torch.randn(2, 16)]
    fp32 = kiln.convert_method_to_engine(mlp, inputs=x, enabled_precisions={torch.float})
    assert _precision(fp32) == "fp32"
    assert _precision(kiln.convert_method_to_engine(
        mlp, inputs=x, enabled_precisions=[torch.float32])) == "fp32"
    with raises(kiln.KilnError, "precision fp16 is not supported by the CPU backend (use "
                                "fp32)"):
        kiln.convert_method_to_engine(mlp, inputs=x, enabled_precisions={torch.half})
    # fp32 allowed too: the CPU cannot build fp16, so fp32, with a warning
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        both = kiln.convert_method_to_engine(mlp, inputs=x,
                                             enabled_precisions={torch.float, torch.half})
    assert _precision(both) == "fp32"
    assert [str(m.message) for m in w if "kiln:" in str(m.message)] == [
        "kiln: precision fp16 is not supported by the CPU backend (use fp32); building fp32, "
        "which enabled_precisions also allows"]
    with raises(ValueError, "enabled_precisions holds both fp16 and bf16; a kiln engine "
                            "computes in one reduced precision: keep one of them"):
        kiln.convert_method_to_engine(mlp, inputs=x,
                                      enabled_precisions={torch.half, torch.bfloat16})
    with raises(ValueError, "give precision= or enabled_precisions= (Torch-TensorRT's name), "
                            "not both"):
        kiln.convert_method_to_engine(mlp, inputs=x, precision="fp32",
                                      enabled_precisions={torch.float})
    with raises(ValueError, "each of enabled_precisions must be 'fp32', 'tf32', 'fp16' or "
                            "'bf16'; got torch.int8"):
        kiln.convert_method_to_engine(mlp, inputs=x, enabled_precisions={torch.int8})
    with raises(TypeError, "enabled_precisions must be a set of precisions, e.g. "
                           "{torch.half} or {'fp32', 'fp16'}; got set()"):
        kiln.convert_method_to_engine(mlp, inputs=x, enabled_precisions=set())


def test_ir_workspace_size_output_format(mlp, tmp_path):
    x = [torch.randn(2, 16)]
    ts = kiln.convert_method_to_engine(mlp, inputs=x, ir="ts")
    assert ts.spec["exporter"] == "torchscript"
    assert kiln.convert_method_to_engine(mlp, inputs=x, ir="default").spec["exporter"] in (
        "torchscript", "dynamo")
    with raises(ValueError, "ir='torch_compile' is not supported: kiln exports the method to "
                            "ONNX ahead of time; kiln's option is exporter= ('auto', "
                            "'torchscript' or 'dynamo'), and ir='default', 'ts' / "
                            "'torchscript' and 'dynamo' / 'exported_program' map to it"):
        kiln.convert_method_to_engine(mlp, inputs=x, ir="torch_compile")
    with raises(ValueError, "ir='dynamo' means exporter='dynamo', but exporter='torchscript' "
                            "was given"):
        kiln.convert_method_to_engine(mlp, inputs=x, ir="dynamo", exporter="torchscript")
    if _compat.torch_version() < _compat.MIN_TORCH_DYNAMO:
        with raises(RuntimeError, f"exporter='dynamo' needs torch 2.5 or newer; this is torch "
                                  f"{torch.__version__}"):
            kiln.convert_method_to_engine(mlp, inputs=x, ir="exported_program")
    # workspace_size is kiln's workspace (bytes): header field at offset 96
    ws = kiln.convert_method_to_engine(mlp, inputs=x, workspace_size=3 << 20)
    assert int.from_bytes(ws[96:104], "little") == 3 << 20
    with raises(ValueError, "give workspace= or workspace_size= (Torch-TensorRT's name), not "
                            "both"):
        kiln.convert_method_to_engine(mlp, inputs=x, workspace=1, workspace_size=1)
    msg = ("output_format='torchscript' is not supported: {where} makes kiln engines "
           "(output_format='kiln'); kiln.save(engine, path) writes the .kiln file, and an "
           "EngineModule goes into torch.save / state_dict like any module")
    with raises(ValueError, msg.format(where="kiln.convert_method_to_engine")):
        kiln.convert_method_to_engine(mlp, inputs=x, output_format="torchscript")
    with raises(ValueError, msg.format(where="kiln.save").replace("'torchscript'",
                                                                   "'exported_program'", 1)):
        kiln.save(ts, tmp_path / "m.kiln", output_format="exported_program")
    kiln.save(ts, tmp_path / "m.kiln", output_format="kiln")
    assert (tmp_path / "m.kiln").read_bytes() == ts


def test_unknown_option_lists_every_option(mlp, no_export):
    with raises(TypeError, "unknown option 'min_block_size'; kiln.convert_method_to_engine "
                           "takes: method_name, inputs, arg_inputs, kwarg_inputs, device, "
                           "precision, enabled_precisions, exporter, ir, opset, "
                           "dynamic_batch, onnx_path, workspace_size, output_format, threads, "
                           "workspace, timing_cache, fast_math"):
        kiln.convert_method_to_engine(mlp, inputs=[torch.randn(2, 16)], min_block_size=3)
    every = ("file_path, input_sample, method_name, device, precision, enabled_precisions, "
             "exporter, ir, opset, dynamic_batch, onnx_path, workspace_size, output_format, "
             "threads, workspace, timing_cache, fast_math")
    with raises(TypeError, f"unknown option 'input_samples' (did you mean 'input_sample'?); "
                           f"kiln.lightning.to_engine takes: {every}"):
        kl.to_engine(mlp, None, input_samples=torch.randn(2, 16))
    with raises(TypeError, f"unknown option 'dynamic_batches' (did you mean 'dynamic_batch'?); "
                           f"kiln.lightning.EngineExportCallback takes: {every}"):
        kl.EngineExportCallback(io.BytesIO(), dynamic_batches=(1, 2, 4))


# ---- 5. ScriptModules and traced modules --------------------------------------------------

class Scriptable(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.fc = nn.Linear(4, 6)
        self.out = nn.Linear(6, 3)

    def forward(self, x, scale: float = 2.0):
        h = self.fc(x)
        if bool(h.sum() > 0):  # data-dependent: ONNX If
            h = torch.relu(h) * scale
        else:
            h = -h
        return self.out(h)

    @torch.jit.export
    def parts(self, x) -> Dict[str, torch.Tensor]:
        h = self.fc(x)
        return {"hidden": h, "logits": self.out(torch.tanh(h))}


def test_script_module(tmp_path):
    model = Scriptable().eval()
    sm = torch.jit.script(model)
    spec = kiln.Input(min_shape=(1, 4), opt_shape=(4, 4), max_shape=(16, 4))
    em = kiln.EngineModule(kiln.convert_method_to_engine(sm, inputs=[spec]))
    assert em.spec["method"] == "Scriptable.forward" and em.input_names == ["x"]
    signs = set()
    for seed in range(6):
        x = torch.randn(3 + seed, 4, generator=torch.Generator().manual_seed(seed)) * 3
        with torch.no_grad():
            signs.add(bool(model.fc(x).sum() > 0))
            want = model(x)
        assert_close(em(x), want, atol=1e-5, rtol=1e-5)
    assert signs == {True, False}  # both branches of the scripted if ran
    # another (exported) method, with a dict output
    parts = kiln.EngineModule(kiln.convert_method_to_engine(sm, "parts", [torch.randn(2, 4)]))
    x = torch.randn(2, 4)
    with torch.no_grad():
        assert_close(parts(x), model.parts(x), atol=1e-5, rtol=1e-5)
    with raises(AttributeError, "Scriptable has no method 'helper'; method_name must name a "
                                "method of the module (a ScriptModule has the methods "
                                "TorchScript compiled: forward and those marked "
                                "@torch.jit.export)"):
        kiln.convert_method_to_engine(sm, "helper", [x])
    with raises(ValueError, "Scriptable is a ScriptModule (torch.jit.script or torch.jit.trace)"
                            "; only exporter='torchscript' exports TorchScript. Pass the "
                            "original torch.nn.Module to use the dynamo exporter"):
        kiln.convert_method_to_engine(sm, inputs=[x], exporter="dynamo")


def test_traced_module_keeps_train_flags():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).train()
    x = torch.randn(5, 4)
    traced = torch.jit.trace(model, x)
    traced.train()
    em = kiln.EngineModule(kiln.convert_method_to_engine(
        traced, inputs=[x], dynamic_batch=(1, 5, 10)))
    assert all(m.training for m in traced.modules())  # put back after the export
    for n in (1, 7):
        x = torch.randn(n, 4)
        with torch.no_grad():
            assert_close(em(x), model(x), atol=1e-5, rtol=1e-5)


# ---- 6. operators the exporter cannot export ----------------------------------------------

class Bessel(nn.Module):
    def forward(self, x):
        return torch.special.i0(x)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = Bessel()

    def forward(self, x):
        return self.act(self.fc(x))


class NoExport(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(6)
        self.blocks = nn.Sequential(Block(), nn.ReLU(), Block())

    def forward(self, x):
        return torch.fft.rfft(self.blocks(x)).abs()


def test_exporter_unsupported_operator():
    with pytest.raises(kiln.UnsupportedOperatorError) as e:
        kiln.convert_method_to_engine(NoExport(), inputs=[torch.randn(2, 4)],
                                      exporter="torchscript")
    assert str(e.value) == (
        "the torchscript exporter (torch.onnx.export, opset 17) cannot export 1 operator used "
        "by NoExport.forward, so kiln never saw the model:\n"
        "  aten::i0 in module blocks.0.act (Bessel), module blocks.2.act (Bessel)\n"
        "replace it in the model, or try exporter='dynamo' (torch >= 2.5 with onnxscript) or "
        "another opset")
    assert e.value.operators == {"aten::i0": [(None, "blocks.0.act"), (None, "blocks.2.act")]}
    assert e.value.status == kiln.Status.UNSUPPORTED
    assert isinstance(e.value.__cause__, torch.onnx.errors.OnnxExporterError) or \
        "aten::i0" in str(e.value.__cause__)

    class TopLevel(nn.Module):  # called by the method itself: no module to name
        def forward(self, x):
            return torch.fft.rfft(x).abs()

    with pytest.raises(kiln.UnsupportedOperatorError) as e:
        kiln.convert_method_to_engine(TopLevel(), inputs=[torch.randn(2, 4)],
                                      exporter="torchscript", opset=16)
    assert str(e.value).splitlines()[:2] == [
        "the torchscript exporter (torch.onnx.export, opset 16) cannot export 1 operator used "
        "by TopLevel.forward, so kiln never saw the model:",
        "  aten::fft_rfft"]
    assert e.value.operators == {"aten::fft_rfft": []}


# ---- 7. dynamic_batch per input -----------------------------------------------------------

class Biased(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(8)
        self.fc = nn.Linear(16, 8)

    def forward(self, x, bias):
        return self.fc(x) + bias  # bias: per feature, shape (8,)


def test_dynamic_batch_per_input():
    model = Biased().eval()
    x, bias = torch.randn(2, 16), torch.randn(8)
    em = kiln.EngineModule(kiln.convert_method_to_engine(
        model, inputs=[x, bias], dynamic_batch={"x": (1, 4, 32)}))
    assert [(i.name, i.min_shape, i.max_shape) for i in em.inputs] == [
        ("x", (1, 16), (32, 16)), ("bias", (8,), (8,))]
    for n in (1, 3, 32):
        x = torch.randn(n, 16)
        with torch.no_grad():
            assert_close(em(x, bias), model(x, bias), atol=1e-5, rtol=1e-5)
    # one range for every input: the bias has no batch, and the message says which
    with raises(ValueError, "dynamic_batch (1, 4, 32) makes dimension 0 of every input one "
                            "batch, but input 'x' of Biased.forward has 2 there and input "
                            "'bias' has 8; give dynamic_batch a dict, e.g. {'x': (1, 4, 32)}, "
                            "to choose the inputs"):
        kiln.convert_method_to_engine(model, inputs=[x[:2], bias], dynamic_batch=(1, 4, 32))
    with raises(ValueError, "dynamic_batch names input 'y', but the inputs of Biased.forward "
                            "are: x, bias"):
        kiln.convert_method_to_engine(model, inputs=[x, bias], dynamic_batch={"y": (1, 2, 4)})
    with raises(ValueError, "dynamic_batch names input 'x' of Biased.forward, which is a "
                            "kiln.Input: give its dynamic dimensions there (min_shape=, "
                            "opt_shape=, max_shape=)"):
        kiln.convert_method_to_engine(model, inputs=[kiln.Input((2, 16)), bias],
                                      dynamic_batch={"x": (1, 2, 4)})
    with raises(ValueError, "input 'x' of Biased.forward has batch size 9, outside "
                            "dynamic_batch (1, 2, 4)"):
        kiln.convert_method_to_engine(model, inputs=[torch.randn(9, 16), bias],
                                      dynamic_batch={"x": (1, 2, 4)})
    with raises(ValueError, "dynamic_batch['x'] must be (min, opt, max) with 0 <= min <= opt "
                            "<= max and max >= 1; got (4, 2, 1)"):
        kiln.convert_method_to_engine(model, inputs=[x, bias], dynamic_batch={"x": (4, 2, 1)})
    with raises(ValueError, "dynamic_batch must be (min, opt, max) with 0 <= min <= opt <= max "
                            "and max >= 1, or a dict {input name: (min, opt, max)} for the "
                            "inputs that have a batch; got 8"):
        kiln.convert_method_to_engine(model, inputs=[x, bias], dynamic_batch=8)
    with raises(ValueError, "dynamic_batch makes dimension 0 of input 'bias' of Biased.forward "
                            "dynamic, but it is a scalar (shape ())"):
        kiln.convert_method_to_engine(model, inputs=[x, torch.tensor(1.0)],
                                      dynamic_batch={"x": (1, 2, 4), "bias": (1, 2, 4)})
    with raises(ValueError, "dynamic_batch (1, 2, 4) makes dimension 0 of every input "
                            "dynamic, but input 'bias' of Biased.forward is a scalar (shape ()); "
                            "give dynamic_batch a dict, e.g. {'x': (1, 2, 4)}, to choose the "
                            "inputs"):
        kiln.convert_method_to_engine(model, inputs=[x, torch.tensor(1.0)],
                                      dynamic_batch=(1, 2, 4))


def test_dynamic_batch_per_input_lightning():
    """to_engine passes the dict through (keyword inputs by their key)."""
    model = Biased().eval()
    sample = {"x": torch.randn(2, 16), "bias": torch.randn(8)}
    em = kl.to_engine(model, None, sample, dynamic_batch={"x": (1, 2, 8)})
    x = torch.randn(5, 16)
    with torch.no_grad():
        assert_close(em(x=x, bias=sample["bias"]), model(x, sample["bias"]), atol=1e-5,
                     rtol=1e-5)


# ---- 8. the output structure inside the engine file ---------------------------------------

def test_spec_inside_the_engine(mlp, embed_bytes, tmp_path, kiln_cli):
    x = torch.randn(2, 16)
    with torch.no_grad():
        want = mlp.embed(x)
    em = kiln.EngineModule(embed_bytes)
    assert json.loads(em.engine.metadata["python.spec"]) == embed_bytes.spec
    path = tmp_path / "embed.kiln"
    kiln.save(embed_bytes, path)
    buf = io.BytesIO()
    kiln.save(embed_bytes, buf)
    assert path.read_bytes() == buf.getvalue() == bytes(embed_bytes)
    assert list(tmp_path.iterdir()) == [path]  # no side file
    for back in (kiln.load(path), kiln.load(io.BytesIO(buf.getvalue())),
                 kiln.EngineModule(buf.getvalue()), kiln.EngineModule(open(path, "rb"))):
        got = back(x)
        assert isinstance(got, dict) and got["pair"][1] is None
        assert_close(got, want, atol=1e-5, rtol=1e-5)
    # kiln inspect lists it
    r = subprocess.run([kiln_cli, "inspect", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    i = lines.index("metadata (1):")
    assert lines[i + 1].startswith('  python.spec: {"format":"kiln-python-spec","version":1,')
    r = subprocess.run([kiln_cli, "inspect", "--json", str(path)], capture_output=True,
                       text=True)
    assert json.loads(json.loads(r.stdout)["metadata"]["python.spec"]) == embed_bytes.spec


def test_lightning_bytesio_keeps_the_structure(mlp):
    buf = io.BytesIO()
    kl.to_engine(mlp, buf, torch.randn(3, 16), method_name="embed", exporter="torchscript")
    back = kiln.load(io.BytesIO(buf.getvalue()))
    x = torch.randn(3, 16)
    with torch.no_grad():
        assert_close(back(x), mlp.embed(x), atol=1e-5, rtol=1e-5)


def test_engines_with_a_side_json_still_load(mlp, embed_bytes, tmp_path):
    """Engines saved before the spec moved inside: the bytes without the metadata, the spec
    in '<path>.json' (tied to the file by its SHA-256). kiln.load reads it, and saving
    again puts the spec inside."""
    import hashlib

    eng = kiln._engine.Engine.from_bytes(embed_bytes)
    eng.set_metadata("python.spec", None)
    old = eng.serialize()
    path = tmp_path / "old.kiln"
    path.write_bytes(old)
    assert kiln.load(path)(torch.randn(2, 16)).__class__ is tuple  # flat without the spec
    (tmp_path / "old.kiln.json").write_text(json.dumps({
        "format": "kiln-python-spec", "engine_sha256": hashlib.sha256(old).hexdigest(),
        "spec": embed_bytes.spec}))
    back = kiln.load(path)
    x = torch.randn(2, 16)
    with torch.no_grad():
        assert_close(back(x), mlp.embed(x), atol=1e-5, rtol=1e-5)
    kiln.save(back, tmp_path / "new.kiln")
    assert kiln.EngineModule((tmp_path / "new.kiln").read_bytes()).spec == embed_bytes.spec
    # bytes whose .spec was given but not inside: kiln.save puts it inside
    plain = kiln.EngineBytes(old)
    plain.spec = embed_bytes.spec
    kiln.save(plain, tmp_path / "plain.kiln")
    assert isinstance(kiln.load(tmp_path / "plain.kiln")(x), dict)


def test_bad_embedded_spec(embed_bytes):
    eng = kiln._engine.Engine.from_bytes(embed_bytes)
    eng.set_metadata("python.spec", "{not json")
    bad = eng.serialize()
    with raises(ValueError, "EngineModule: the engine's metadata 'python.spec' is not valid "
                            "JSON (Expecting property name enclosed in double quotes: line 1 "
                            "column 2 (char 1)); pass spec= to override it"):
        kiln.EngineModule(bad)
    em = kiln.EngineModule(bad, spec=embed_bytes.spec)  # an explicit spec wins ...
    assert json.loads(em.engine.metadata["python.spec"]) == embed_bytes.spec  # ... and is kept


def test_embedded_spec_that_misnames_outputs(embed_bytes):
    # probe5: a spec from the engine file whose leaves named one output twice, or
    # output -1 (Python's last), loaded and returned the wrong tensors without a word;
    # one nested past Python's recursion limit raised a bare RecursionError
    good = embed_bytes.spec
    bad_trees = [
        {"dict": [["hidden", {"t": 0}], ["pair", {"tuple": [{"t": 0}, {"none": True}]}],
                  ["list", {"list": [{"t": 2}]}]]},
        {"dict": [["hidden", {"t": 0}], ["pair", {"tuple": [{"t": 1}, {"none": True}]}],
                  ["list", {"list": [{"t": -1}]}]]},
        {"tuple": [{"t": 0}, {"t": 1}, {"t": True}]},
        {"tuple": [{"t": 0}, {"t": 1}, {"t": 2}], "list": []},
    ]
    for tree in bad_trees:
        eng = kiln._engine.Engine.from_bytes(embed_bytes)
        eng.set_metadata("python.spec", json.dumps(dict(good, outputs=tree)))
        with raises(ValueError, "EngineModule: the spec (inputs ['x']) does not describe this "
                                "engine (inputs ['x'], 3 outputs, each once)"):
            kiln.EngineModule(eng.serialize())
    eng = kiln._engine.Engine.from_bytes(embed_bytes)
    eng.set_metadata("python.spec", "[" * 100000 + "]" * 100000)
    with pytest.raises(ValueError, match="is not valid JSON"):
        kiln.EngineModule(eng.serialize())
    eng.set_metadata("python.spec", json.dumps(good))
    assert isinstance(kiln.EngineModule(eng.serialize())(torch.randn(2, 16)), dict)
