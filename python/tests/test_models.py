"""End to end: MLP, ResNet-18 and a transformer encoder converted with
kiln.convert_method_to_engine (forward and a second method, keyword inputs, a dynamic
batch dimension), run through kiln.EngineModule, compared with eager PyTorch (fp32
tolerance); save/load round trips; torch.save of a model holding an EngineModule."""

import copy
import io

import pytest
import torch

import kiln
from conftest import assert_close
from models import MLP, Pipeline, ResNet18, TinyEncoder


def eager(fn, *args, slow_path=False, **kwargs):
    """The reference: eager PyTorch in eval mode. slow_path: with grad enabled, which
    keeps nn.TransformerEncoder off its fused fast path on torch < 2.1 (the fast path
    zeroes padded positions; kiln, like the slow path, computes them)."""
    with (torch.enable_grad() if slow_path else torch.no_grad()):
        out = fn(*args, **kwargs)
    return out


# ---- MLP ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mlp():
    return MLP().eval()


@pytest.fixture(scope="module")
def mlp_engines(mlp, exporter):
    dyn = kiln.convert_method_to_engine(
        mlp, inputs=[kiln.Input(min_shape=(1, 16), opt_shape=(4, 16), max_shape=(8, 16))],
        exporter=exporter)
    static = kiln.convert_method_to_engine(mlp, arg_inputs=(torch.randn(3, 16),),
                                           exporter=exporter)
    embed = kiln.convert_method_to_engine(
        mlp, "embed", inputs=[kiln.Input(min_shape=(1, 16), opt_shape=(2, 16), max_shape=(4, 16),
                                         dim_names={0: "batch"})],
        kwarg_inputs={"scale": torch.tensor(2.0)}, exporter=exporter)
    return {"dynamic": dyn, "static": static, "embed": embed}


def test_mlp_forward_dynamic_batch(mlp, mlp_engines):
    em = kiln.EngineModule(mlp_engines["dynamic"])
    assert em.input_names == ["x"] and em.output_names == ["output0"]
    for batch in (1, 3, 8, 3):
        x = torch.randn(batch, 16)
        assert_close(em(x), eager(mlp, x))
    assert_close(em(x=x), eager(mlp, x))  # by name


def test_mlp_outputs_written_in_place(mlp_engines):
    """The output's batch dim is tied to the input's: every output is allocated by torch
    and written by the engine directly (no copy), from the first call on."""
    em = kiln.EngineModule(mlp_engines["dynamic"])
    for batch in (2, 5, 7):
        em(torch.randn(batch, 16))
    assert em.run_stats == {"runs": 3, "outputs_in_place": 3, "outputs_copied": 0}


def test_mlp_static(mlp, mlp_engines):
    em = kiln.EngineModule(mlp_engines["static"])
    x = torch.randn(3, 16)
    assert_close(em(x), eager(mlp, x))
    assert em.inputs[0].shape == (3, 16)


def test_mlp_second_method_kwargs_nested_outputs(mlp, mlp_engines):
    em = kiln.EngineModule(mlp_engines["embed"])
    assert em.input_names == ["x", "scale"]
    for batch in (1, 4):
        x = torch.randn(batch, 16)
        s = torch.tensor(0.5)
        got = em(x, scale=s)
        want = eager(mlp.embed, x, scale=s)
        assert_close(got, want)
        assert got["pair"][1] is None
        assert_close(em(x, s), want)  # keyword inputs may also be given by position


def test_mlp_optional_input_left_out(mlp, exporter):
    """A parameter with default None that was not converted may be passed as None."""
    eng = kiln.convert_method_to_engine(mlp, "embed", inputs=[torch.randn(2, 16)],
                                        exporter=exporter)
    em = kiln.EngineModule(eng)
    x = torch.randn(2, 16)
    assert em.input_names == ["x"]
    assert_close(em(x, scale=None), eager(mlp.embed, x))


# ---- ResNet-18 ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def resnet():
    return ResNet18().eval()


@pytest.fixture(scope="module")
def resnet_engines(resnet, exporter):
    dyn = kiln.convert_method_to_engine(
        resnet, inputs=[kiln.Input(min_shape=(1, 3, 32, 32), opt_shape=(2, 3, 32, 32),
                                   max_shape=(4, 3, 32, 32))], exporter=exporter)
    feats = kiln.convert_method_to_engine(resnet, "features", inputs=[torch.randn(2, 3, 32, 32)],
                                          exporter=exporter)
    return {"dynamic": dyn, "features": feats}


def test_resnet18_forward_dynamic_batch(resnet, resnet_engines):
    em = kiln.EngineModule(resnet_engines["dynamic"])
    for batch in (1, 4, 2):
        x = torch.randn(batch, 3, 32, 32)
        assert_close(em(x), eager(resnet, x), atol=2e-4, rtol=1e-3)


def test_resnet18_second_method(resnet, resnet_engines):
    em = kiln.EngineModule(resnet_engines["features"])
    x = torch.randn(2, 3, 32, 32)
    got = em(x)
    assert got.shape == (2, 512)
    assert_close(got, eager(resnet.features, x), atol=2e-4, rtol=1e-3)


def test_resnet18_save_load_round_trip(resnet, resnet_engines, tmp_path):
    em = kiln.EngineModule(resnet_engines["dynamic"])
    path = tmp_path / "resnet18.kiln"
    kiln.save(em, path)
    assert path.read_bytes() == em.engine_bytes()
    assert not (tmp_path / "resnet18.kiln.json").exists()  # plain output: no spec file
    back = kiln.load(path)
    x = torch.randn(3, 3, 32, 32)
    assert_close(back(x), em(x), atol=0, rtol=0)
    assert back.inspect() == em.inspect()


# ---- transformer encoder ---------------------------------------------------------------

def _seq_input(dim_names=True):
    names = {0: "batch", 1: "seq"} if dim_names else None
    return (kiln.Input(min_shape=(1, 1, 8), opt_shape=(2, 6, 8), max_shape=(4, 12, 8),
                       dim_names=names),
            kiln.Input(min_shape=(1, 1), opt_shape=(2, 6), max_shape=(4, 12), dtype=torch.bool,
                       dim_names=names))


def _padding_mask(batch, seq):
    lengths = torch.randint(1, seq + 1, (batch,))
    lengths[0] = seq
    return torch.arange(seq)[None, :] >= lengths[:, None]


@pytest.fixture(scope="module")
def encoder():
    return TinyEncoder().eval()


@pytest.fixture(scope="module")
def encoder_engines(encoder, exporter):
    src, mask = _seq_input()
    fwd = kiln.convert_method_to_engine(encoder, inputs=[src], kwarg_inputs={"mask": mask},
                                        exporter=exporter)
    try:
        kiln.EngineModule(fwd)(torch.randn(3, 5, 8), mask=_padding_mask(3, 5))
    except kiln.KilnError:
        if exporter == "torchscript" and kiln._compat.torch_version() >= (2, 0):
            pytest.xfail(f"the TorchScript exporter of torch {torch.__version__} bakes "
                         f"nn.MultiheadAttention's batch and sequence sizes into Reshape "
                         f"constants (use the dynamo exporter, the default there)")
        raise
    enc = kiln.convert_method_to_engine(encoder, "encode", inputs=[src],
                                        kwarg_inputs={"mask": mask}, exporter=exporter)
    return {"forward": fwd, "encode": enc}


def test_encoder_forward_dynamic_batch_and_sequence(encoder, encoder_engines):
    em = kiln.EngineModule(encoder_engines["forward"])
    assert em.input_names == ["src", "mask"]
    torch.manual_seed(5)
    for batch, seq in ((2, 6), (1, 1), (4, 12), (3, 5)):
        src = torch.randn(batch, seq, 8)
        mask = _padding_mask(batch, seq)
        assert_close(em(src, mask=mask), eager(encoder, src, mask=mask, slow_path=True))


def test_encoder_second_method(encoder, encoder_engines):
    em = kiln.EngineModule(encoder_engines["encode"])
    src = torch.randn(2, 7, 8)
    mask = _padding_mask(2, 7)
    got = em(src, mask=mask)
    assert list(got) == ["hidden", "pooled"]
    assert_close(got, eager(encoder.encode, src, mask=mask, slow_path=True))


def test_encoder_torch_save_of_model_holding_engine(encoder, encoder_engines, tmp_path):
    """A model that contains an EngineModule goes through torch.save / torch.load, both
    as a state_dict (engine bytes are extra state) and as a pickled module."""

    torch.manual_seed(6)
    model = Pipeline(encoder_engines["forward"])
    src, mask = torch.randn(2, 5, 8), _padding_mask(2, 5)
    want = model(src, mask)

    path = tmp_path / "state.pt"
    torch.save(model.state_dict(), path)
    fresh = Pipeline()  # an EngineModule without an engine: load_state_dict fills it
    fresh.load_state_dict(torch.load(path))
    assert_close(fresh(src, mask), want, atol=0, rtol=0)

    path = tmp_path / "model.pt"
    torch.save(model, path)
    loaded = torch.load(path, weights_only=False)
    assert_close(loaded(src, mask), want, atol=0, rtol=0)

    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    assert_close(torch.load(buf, weights_only=False)(src, mask), want, atol=0, rtol=0)
    assert_close(copy.deepcopy(model)(src, mask), want, atol=0, rtol=0)


def test_encoder_nested_outputs_save_load(encoder, encoder_engines, tmp_path):
    """The nested output structure travels inside the engine file (metadata
    'python.spec'): a path, a BytesIO and the bytes give back the same dict, and kiln.save
    writes no side file."""
    em = kiln.EngineModule(encoder_engines["encode"])
    path = tmp_path / "enc.kiln"
    kiln.save(em, path)
    assert list(tmp_path.iterdir()) == [path]
    buf = io.BytesIO()
    kiln.save(em, buf)
    assert buf.getvalue() == path.read_bytes() == em.engine_bytes()
    src, mask = torch.randn(1, 4, 8), _padding_mask(1, 4)
    want = em(src, mask=mask)
    assert isinstance(want, dict)
    for back in (kiln.load(path), kiln.load(io.BytesIO(buf.getvalue())),
                 kiln.EngineModule(path.read_bytes())):
        assert_close(back(src, mask=mask), want, atol=0, rtol=0)
