"""The CUDA path: device='cuda' goes to kiln's builder; CUDA engines run on CUDA tensors
on torch's current stream. Until kiln has a CUDA backend, building fails with kiln's
own message and the engine tests skip; once it has one, they run on a GPU machine."""

import pytest
import torch

import kiln
from conftest import assert_close
from models import MLP

NO_CUDA_BACKEND = "device 'cuda' is not available: this kiln was built without it"
NO_CUDA_DEVICE = "building a cuda engine needs the device it will run on: no CUDA device available: "
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def mlp():
    return MLP().eval()


def _cuda_engine(mlp, **opts):
    spec = kiln.Input(min_shape=(1, 16), opt_shape=(4, 16), max_shape=(8, 16))
    try:
        return kiln.convert_method_to_engine(mlp, inputs=[spec], device="cuda", **opts)
    except kiln.KilnError as e:
        if e.status == kiln.Status.DEVICE:  # CUDA backend built in, but no GPU here
            assert str(e).startswith(NO_CUDA_DEVICE)
            pytest.skip("no CUDA device")
        assert e.status == kiln.Status.UNSUPPORTED
        assert str(e) == NO_CUDA_BACKEND
        pytest.skip("this kiln has no CUDA backend")


@needs_gpu
def test_cpu_engine_rejects_cuda_tensors(mlp):
    em = kiln.compile(mlp, [torch.randn(2, 16)])
    with pytest.raises(ValueError) as e:
        em(torch.randn(2, 16, device="cuda"))
    assert str(e.value) == ("input 'x' is on cuda:0, but the engine runs on cpu; move it with "
                            ".to('cpu')")


def test_cuda_build_goes_to_kiln(mlp):
    """Builds for CUDA where kiln can; else kiln's error, unchanged."""
    data = _cuda_engine(mlp)
    em = kiln.EngineModule(data)
    assert em.device.type == "cuda"


@needs_gpu
def test_cuda_engine_runs_on_current_stream(mlp):
    data = _cuda_engine(mlp)
    em = kiln.EngineModule(data)
    model = MLP().eval().cuda()
    x = torch.randn(5, 16, device="cuda")
    with torch.no_grad():
        want = model(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = em(x)
    side.synchronize()
    assert got.device.type == "cuda"
    assert_close(got, want)
    assert em.run_stats["outputs_copied"] == 0
    with pytest.raises(ValueError) as e:
        em(x.cpu())
    assert str(e.value) == ("input 'x' is on cpu, but the engine runs on cuda:0; move it with "
                            ".to('cuda:0')")


class _Convs(torch.nn.Module):
    """3x3 stride-1 convolutions of ResNet's stages, where cuDNN's legacy API offers its
    Winograd and FFT algorithms for fp32."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(64, 64, 3, padding=1)
        self.b = torch.nn.Conv2d(64, 128, 3, padding=1)
        self.c = torch.nn.Conv2d(128, 128, 3, padding=1)

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


@needs_gpu
@pytest.mark.parametrize("fast_math", [False, True])
def test_cuda_fp32_convolutions_accurate_unless_fast_math(monkeypatch, capfd, fast_math):
    """fp32 CUDA engines keep cuDNN's Winograd and FFT algorithms (chosen at run time by
    cudnnFind) out unless built with fast_math, as the CPU keeps out its Winograd
    kernels; KILN_CUDA_VERBOSE=1 names each layer's algorithm."""
    monkeypatch.setenv("KILN_CUDA_VERBOSE", "1")
    torch.manual_seed(0)
    model = _Convs().eval()
    x = torch.randn(8, 64, 56, 56)
    data = kiln.convert_method_to_engine(model, inputs=[x], device="cuda", fast_math=fast_math)
    em = kiln.EngineModule(data)
    got = em(x.cuda()).cpu().double()
    with torch.no_grad():
        want = model.double()(x.double())
    err = float((got - want).abs().max() / want.abs().max())
    lines = [ln for ln in capfd.readouterr().err.splitlines() if "legacy convolution algorithm" in ln]
    print("\n".join(lines), "\nerror vs float64: %.2e" % err)
    assert lines, "no layer ran cuDNN's legacy convolution API"
    if not fast_math:
        assert not [ln for ln in lines if "WINOGRAD" in ln or "FFT" in ln], lines
        assert err < 1e-5, err
