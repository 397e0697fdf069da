#!/usr/bin/env python3
"""Train a small LightningModule, turn it into a kiln engine, and run the engine from
Python and from the `kiln` CLI: both give the same outputs as the trained model.

    cmake -S . -B build && cmake --build build -j2
    bash scripts/setup_python.sh          # .venv with Debian's torch + Lightning
    KILN_LIBRARY=build/libkiln.so .venv/bin/python examples/lightning_to_engine.py

Options: --out DIR (default: a temporary folder), --kiln PATH (the kiln CLI; default:
the `kiln` next to $KILN_LIBRARY, else `kiln` on PATH), --steps N (training steps).
Run from anywhere: it imports kiln from python/ of this checkout when kiln is not
installed.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import kiln
except ImportError:  # not installed: use this checkout's python/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import kiln

import kiln.lightning  # (import before Lightning: see kiln/lightning.py)
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

pl = kiln.lightning.pl  # lightning.pytorch, or pytorch_lightning


class DigitClassifier(kiln.lightning.EngineMixin, pl.LightningModule):
    """A small convolutional classifier for 1x28x28 images."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.1), nn.Linear(16 * 7 * 7, 10))
        # what Lightning (and kiln) export with: one positional input
        self.example_input_array = torch.randn(4, 1, 28, 28)

    def forward(self, images):
        return self.classifier(self.features(images))

    def training_step(self, batch, batch_idx):
        images, labels = batch
        loss = F.cross_entropy(self(images), labels)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def synthetic_digits(n, seed):
    """Images whose class is the quadrant/stripe pattern they carry, plus noise."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    images = 0.3 * torch.randn(n, 1, 28, 28, generator=g)
    for i, c in enumerate(labels.tolist()):
        images[i, 0, (c % 5) * 5:(c % 5) * 5 + 5, :] += 1.0
        images[i, 0, :, (c // 5) * 14:(c // 5) * 14 + 14] += 0.5
    return torch.utils.data.TensorDataset(images, labels)


def find_cli(given):
    if given:
        return given
    lib = os.environ.get("KILN_LIBRARY")
    if lib and (Path(lib).parent / "kiln").is_file():
        return str(Path(lib).parent / "kiln")
    return shutil.which("kiln")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for the engine and the CLI's outputs")
    ap.add_argument("--kiln", help="the kiln CLI")
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="kiln-example-"))
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)

    # 1. train
    model = DigitClassifier()
    loader = torch.utils.data.DataLoader(synthetic_digits(512, 1), batch_size=32, shuffle=True)
    trainer = pl.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=str(out))
    trainer.fit(model, loader)

    # 2. to an engine: batch 1..64 (tuned for 8), written atomically to model.kiln
    engine_path = out / "model.kiln"
    engine = model.to_engine(engine_path, dynamic_batch=(1, 8, 64))
    print(f"engine: {engine_path} ({engine_path.stat().st_size} bytes)")
    print(f"  inputs {engine.inputs}  outputs {engine.outputs}")

    # 3. run it from Python, next to the trained model in eval mode
    test_images, test_labels = synthetic_digits(16, 2).tensors
    model.eval()
    with torch.no_grad():
        expected = model(test_images)
    got = engine(test_images)
    print(f"python: max |engine - pytorch| = {(got - expected).abs().max().item():.2e}, "
          f"accuracy {(got.argmax(1) == test_labels).float().mean().item():.2f}")
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)

    # 4. run the same file with the kiln CLI
    cli = find_cli(args.kiln)
    if cli is None:
        print("kiln CLI not found (--kiln PATH): skipping the CLI run")
        return 0
    np.save(out / "images.npy", test_images.numpy())
    cmd = [cli, "run", str(engine_path), "--input", f"images={out / 'images.npy'}",
           "--output-dir", str(out / "cli")]
    print("$ " + " ".join(cmd))
    subprocess.run(cmd, check=True)
    from_cli = torch.from_numpy(np.load(out / "cli" / "output0.npy"))
    print(f"cli:    max |cli - python| = {(from_cli - got).abs().max().item():.2e}")
    torch.testing.assert_close(from_cli, got, atol=0, rtol=0)
    print("same outputs from PyTorch, the engine in Python, and the kiln CLI")
    return 0


if __name__ == "__main__":
    sys.exit(main())
