"""Shared fixtures of the kiln Python tests.

Run from the repository root after building kiln:
    KILN_LIBRARY=build/libkiln.so .venv/bin/python -m pytest -q python/tests
The tests import kiln from python/ (this checkout), not from an installed copy.
KILN_CLI (default: the `kiln` next to KILN_LIBRARY) is the CLI used by the CLI tests.
"""

import os
import sys
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[1]
REPO = PYTHON_DIR.parent
sys.path.insert(0, str(PYTHON_DIR))

if not os.environ.get("KILN_LIBRARY") and (REPO / "build" / "libkiln.so").exists():
    os.environ["KILN_LIBRARY"] = str(REPO / "build" / "libkiln.so")

import torch  # noqa: E402

import kiln  # noqa: E402,F401  (fails early when the package is broken)
from kiln import _compat  # noqa: E402

torch.set_num_threads(1)  # the machines running this are small and shared


def exporters():
    out = ["torchscript"]
    if _compat.torch_version() >= _compat.MIN_TORCH_DYNAMO and _compat.onnxscript_available():
        out.append("dynamo")
    return out


@pytest.fixture(params=exporters(), scope="session")
def exporter(request):
    return request.param


@pytest.fixture(scope="session")
def kiln_cli():
    cli = os.environ.get("KILN_CLI")
    if not cli:
        lib = os.environ.get("KILN_LIBRARY", "")
        cand = Path(lib).parent / "kiln" if lib else None
        cli = str(cand) if cand and cand.is_file() else None
    if not cli or not Path(cli).is_file():
        pytest.skip("no kiln CLI found (set KILN_CLI)")
    return cli


def assert_close(got, want, atol=1e-4, rtol=1e-4):
    """got/want: tensors or nested tuples/lists/dicts of them (same structure)."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), type(got)
        assert got.shape == want.shape, (got.shape, want.shape)
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        torch.testing.assert_close(got, want.detach(), atol=atol, rtol=rtol)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want)
        for k in want:
            assert_close(got[k], want[k], atol, rtol)
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_close(g, w, atol, rtol)
    else:
        assert got == want


def raises(exc, message):
    """pytest.raises that checks the whole message, not a pattern."""
    class _Ctx:
        def __enter__(self):
            self.cm = pytest.raises(exc)
            self.info = self.cm.__enter__()
            return self.info

        def __exit__(self, *a):
            r = self.cm.__exit__(*a)
            assert str(self.info.value) == message, f"\n got: {self.info.value!s}\nwant: {message}"
            return r

    return _Ctx()
