"""kiln.lightning: a real LightningModule trained for a few steps with a real Trainer,
then exported with to_engine / the mixin / the Callback; the engine runs from Python and
from the kiln CLI with the same outputs as eager PyTorch."""

import io
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln
import kiln.lightning as kl
from conftest import assert_close

pl = kl.pl
if pl is None:
    pytest.skip("needs lightning or pytorch_lightning", allow_module_level=True)


class LitClassifier(kl.EngineMixin, pl.LightningModule):
    def __init__(self, sample="tensor"):
        super().__init__()
        torch.manual_seed(7)
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.2))
        self.head = nn.Linear(32, 3)
        if sample == "tensor":
            self.example_input_array = torch.randn(4, 16)
        elif sample == "tuple":
            self.example_input_array = (torch.randn(4, 16), torch.randn(4, 3))
        elif sample == "dict":
            self.example_input_array = {"x": torch.randn(4, 16), "bias": torch.randn(4, 3)}
        self.hook_calls = []

    def forward(self, x, bias=None):
        out = self.head(self.body(x))
        return out if bias is None else out + bias

    def probabilities(self, x):
        return F.softmax(self(x), dim=-1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def on_before_batch_transfer(self, batch, dataloader_idx):
        self.hook_calls.append("before")
        return batch

    def on_after_batch_transfer(self, batch, dataloader_idx):
        self.hook_calls.append("after")
        # samples may arrive as float64: the hooks make them float32 (as a real
        # pipeline's transforms would)
        if isinstance(batch, torch.Tensor) and batch.dtype == torch.float64:
            return batch.float()
        return batch


def _loader():
    g = torch.Generator().manual_seed(8)
    x = torch.randn(64, 16, generator=g)
    y = torch.randint(0, 3, (64,), generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)


def _trainer(tmp_path, callbacks=()):
    return pl.Trainer(max_steps=4, accelerator="cpu", devices=1, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=str(tmp_path),
                      callbacks=list(callbacks))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    model = LitClassifier()
    before = [p.detach().clone() for p in model.parameters()]
    _trainer(tmp_path_factory.mktemp("fit")).fit(model, _loader())
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))  # it trained
    return model


def _eager(model, *args, **kwargs):
    was = model.training
    model.eval()
    with torch.no_grad():
        out = model(*args, **kwargs)
    model.train(was)
    return out


def test_to_engine_example_input_array(trained, tmp_path):
    trained.train()
    trained.body[2].eval()  # a submodule in its own mode: must come back as it was
    modes = [m.training for m in trained.modules()]
    path = tmp_path / "clf.kiln"
    em = kl.to_engine(trained, path)
    assert isinstance(em, kiln.EngineModule)
    assert [m.training for m in trained.modules()] == modes
    assert path.read_bytes() == em.engine_bytes()
    x = torch.randn(4, 16)
    assert_close(em(x), _eager(trained, x))
    assert_close(kiln.load(path)(x), em(x), atol=0, rtol=0)
    assert trained.hook_calls[-2:] == ["before", "after"]  # the sample went through the hooks


def test_mixin_bytesio_dynamic_batch(trained):
    buf = io.BytesIO()
    em = trained.to_engine(buf, dynamic_batch=(1, 4, 16))
    assert buf.getvalue() == em.engine_bytes()
    for batch in (1, 9, 16):
        x = torch.randn(batch, 16)
        assert_close(em(x), _eager(trained, x))


def test_second_method_and_explicit_sample(trained):
    sample = kiln.Input(min_shape=(1, 16), opt_shape=(4, 16), max_shape=(8, 16))
    em = kl.to_engine(trained, input_sample=sample, method_name="probabilities")
    x = torch.randn(5, 16)
    with torch.no_grad():
        want = trained.eval().probabilities(x)
    assert_close(em(x), want)


def test_sample_through_transfer_hooks(trained):
    """A float64 sample becomes float32 in on_after_batch_transfer: the engine's input
    is float32."""
    em = kl.to_engine(trained, input_sample=torch.randn(2, 16, dtype=torch.float64))
    assert em.inputs[0].dtype_name == "float32"


@pytest.mark.parametrize("sample", ["tuple", "dict"])
def test_tuple_and_dict_samples(tmp_path, sample):
    model = LitClassifier(sample)
    _trainer(tmp_path).fit(model, _loader())
    em = model.to_engine()
    assert em.input_names == ["x", "bias"]
    x, b = torch.randn(4, 16), torch.randn(4, 3)
    want = _eager(model, x, bias=b)
    assert_close(em(x, b) if sample == "tuple" else em(x=x, bias=b), want)


def test_callback_exports_at_fit_end(tmp_path, kiln_cli):
    path = tmp_path / "out" / "final.kiln"
    cb = kl.EngineExportCallback(path, dynamic_batch=(1, 8, 32))
    model = LitClassifier()
    _trainer(tmp_path, [cb]).fit(model, _loader())
    assert path.is_file() and cb.engine is not None
    x = torch.randn(5, 16)
    want = _eager(model, x)
    got = kiln.load(path)(x)
    assert_close(got, want)
    assert_close(cb.engine(x), want)

    # the same engine file from the kiln CLI gives the same outputs
    np.save(tmp_path / "x.npy", x.numpy())
    r = subprocess.run([kiln_cli, "run", str(path), "--input", f"x={tmp_path / 'x.npy'}",
                        "--output-dir", str(tmp_path / "cli")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    cli_out = torch.from_numpy(np.load(tmp_path / "cli" / "output0.npy"))
    assert_close(cli_out, got, atol=0, rtol=0)


# ---- errors ------------------------------------------------------------------------

def test_no_sample_no_example_input_array():
    model = LitClassifier(sample=None)
    with pytest.raises(ValueError) as e:
        kl.to_engine(model)
    assert str(e.value) == (
        "kiln.lightning.to_engine: no input_sample was given and the module has no "
        "example_input_array; pass input_sample=... or set self.example_input_array")


def test_method_missing_restores_mode_and_device(tmp_path):
    model = LitClassifier()
    model.train()
    model.head.eval()
    modes = [m.training for m in model.modules()]
    path = tmp_path / "never.kiln"
    with pytest.raises(AttributeError) as e:
        model.to_engine(path, method_name="embed")
    assert str(e.value) == ("LitClassifier has no method 'embed'; method_name must name a "
                            "method of the module")
    assert [m.training for m in model.modules()] == modes
    assert model.device == torch.device("cpu")
    assert list(tmp_path.iterdir()) == []


def test_failed_export_restores_mode_and_writes_nothing(tmp_path):
    class Broken(LitClassifier):
        def forward(self, x, bias=None):
            raise RuntimeError("broken forward")

    model = Broken()
    model.train()
    with pytest.raises(RuntimeError, match="broken forward"):
        model.to_engine(tmp_path / "never.kiln")
    assert model.training and all(m.training for m in model.modules())
    assert list(tmp_path.iterdir()) == []


def test_unsupported_precision_through_lightning(trained):
    with pytest.raises(kiln.KilnError) as e:
        trained.to_engine(precision="fp16")
    assert str(e.value) == "precision fp16 is not supported by the CPU backend (use fp32)"
