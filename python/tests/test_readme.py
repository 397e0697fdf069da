"""The README's Python and Lightning quick starts, run as written (each in a fresh
interpreter, in a temporary folder), and the engine files they write run by the CLI."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def readme_blocks():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def block(word):
    found = [b for b in readme_blocks() if word in b]
    assert len(found) == 1, f"README.md: {len(found)} python blocks use {word}"
    return found[0]


def run_block(code, cwd):
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    if env.get("KILN_LIBRARY"):  # the block runs in another folder
        env["KILN_LIBRARY"] = str(Path(env["KILN_LIBRARY"]).resolve())
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def run_cli(kiln_cli, path):
    r = subprocess.run([kiln_cli, "run", str(path), "--random-inputs", "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_python_quick_start(tmp_path, kiln_cli):
    pytest.importorskip("torchvision")
    out = run_block(block("kiln.convert_method_to_engine"), tmp_path)
    err = float(out.strip().splitlines()[-1])  # the printed max abs difference to PyTorch
    assert err < 1e-4, out
    run_cli(kiln_cli, tmp_path / "resnet18.kiln")


def test_lightning_quick_start(tmp_path, kiln_cli):
    if importlib.util.find_spec("pytorch_lightning") is None:  # not imported here: the block
        pytest.skip("pytorch_lightning is not installed")      # repairs torch 1.13 first
    out = run_block(block("kiln.lightning"), tmp_path)
    assert "tensor(" in out and out.count("[") >= 4, out  # a 3 x 4 tensor printed
    run_cli(kiln_cli, tmp_path / "out" / "net.kiln")
