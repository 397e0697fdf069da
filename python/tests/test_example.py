"""examples/lightning_to_engine.py runs end to end (few training steps)."""

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lightning_to_engine.py"


def test_lightning_example(tmp_path, kiln_cli):
    env = dict(os.environ, KILN_CLI=kiln_cli)
    r = subprocess.run([sys.executable, str(EXAMPLE), "--out", str(tmp_path), "--steps", "5",
                        "--kiln", kiln_cli], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "same outputs from PyTorch, the engine in Python, and the kiln CLI" in r.stdout
    assert (tmp_path / "model.kiln").is_file()
