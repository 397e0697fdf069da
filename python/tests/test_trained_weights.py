"""scripts/synthetic_images.py, scripts/train_resnet50.py and the trained-network
check of bench/bf16_accuracy.py, end to end on a tiny CPU training run (the real
weights are trained on a GPU and are not in git)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
import synthetic_images  # noqa: E402
import train_resnet50  # noqa: E402


def test_synthetic_images_seeded_and_class_dependent():
    table = synthetic_images.class_table()
    labels = torch.tensor([3, 3, 500])
    a = synthetic_images.render(labels, table, 32, torch.Generator().manual_seed(5))
    b = synthetic_images.render(labels, table, 32, torch.Generator().manual_seed(5))
    assert a.shape == (3, 3, 32, 32) and a.dtype == torch.float32
    assert torch.equal(a, b)
    assert 0.3 < float(a.std()) < 3.0
    # the class's gratings dominate: two samples of class 3 share a spectrum that class 500's lacks
    spec = torch.fft.fft2(a).abs().mean(1).flatten(1)
    sim = torch.nn.functional.cosine_similarity
    assert float(sim(spec[0:1], spec[1:2])) > float(sim(spec[0:1], spec[2:3]))


@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory):
    out = tmp_path_factory.mktemp("trained")
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "train_resnet50.py"), "--out", str(out),
                        "--device", "cpu", "--steps", "2", "--batch", "4", "--size", "64", "--lr", "0.01"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def test_weights_round_trip(tiny_weights):
    info = json.loads((tiny_weights / "train.json").read_text())
    assert info["steps_done"] == 2 and info["files"] >= 2
    files = sorted(tiny_weights.glob("resnet50_trained_*.npz"))
    assert len(files) == info["files"]
    assert all(f.stat().st_size <= train_resnet50.CHUNK_BYTES + 4096 for f in files)
    model = train_resnet50.load_weights(torchvision.models.resnet50(), str(tiny_weights))
    saved = {}
    for f in files:
        with np.load(f) as z:
            saved.update({k: z[k] for k in z.files})
    state = model.state_dict()
    assert saved["conv1.weight"].dtype == np.float16 and saved["bn1.running_var"].dtype == np.float32
    for k, v in saved.items():
        assert np.array_equal(state[k].numpy(), v.astype(np.float32)), k
    # a running mean changed by training, so the BatchNorm statistics really were saved
    assert np.abs(saved["bn1.running_mean"]).max() > 0


def test_save_weights_keeps_what_float16_cannot_hold(tmp_path):
    model = torchvision.models.resnet50()
    with torch.no_grad():
        model.conv1.weight[0, 0, 0, 0] = 1e6
    train_resnet50.save_weights(model, str(tmp_path / "big"))
    back = train_resnet50.load_weights(torchvision.models.resnet50(), str(tmp_path / "big"))
    assert float(back.conv1.weight[0, 0, 0, 0]) == 1e6
    assert back.layer1[0].conv1.weight.dtype == torch.float32
    with torch.no_grad():
        model.fc.weight[1, 2] = float("nan")
    with pytest.raises(ValueError, match="fc.weight is not finite"):
        train_resnet50.save_weights(model, str(tmp_path / "nan"))
    assert not (tmp_path / "nan").exists()


def test_load_weights_refuses_a_mismatch(tmp_path):
    np.savez(tmp_path / "resnet50_trained_0.npz", **{"conv1.weight": np.zeros((64, 3, 7, 7), np.float16)})
    with pytest.raises(ValueError, match="do not fit"):
        train_resnet50.load_weights(torchvision.models.resnet50(), str(tmp_path))
    with pytest.raises(FileNotFoundError):
        train_resnet50.load_weights(torchvision.models.resnet50(), str(tmp_path / "none"))


def test_bf16_accuracy_trained_rows(tiny_weights, kiln_cli):
    cmd = [sys.executable, str(ROOT / "bench" / "bf16_accuracy.py"), "--kiln", kiln_cli, "--models", "",
           "--samples", "1", "--trained-weights", str(tiny_weights)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode == 77:
        pytest.skip(r.stdout.strip())
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [x for x in r.stdout.splitlines() if x.startswith("| resnet50 trained")]
    assert len(rows) == 3  # one held-out sample, two randn images
    # the gate fails when the bar is below the measured error
    r = subprocess.run(cmd + ["--fail-above", "1e-12"], capture_output=True, text=True)
    assert r.returncode == 1 and "FAILED" in r.stdout, r.stdout + r.stderr
