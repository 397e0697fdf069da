#!/usr/bin/env bash
# Sets up the Python environment of kiln's Python front end (python/):
#   .venv  a virtual environment over Debian's /usr/bin/python3 that sees Debian's
#          torch 1.13 / torchvision / onnx / numpy (--system-site-packages), plus
#          pytest and PyTorch Lightning from PyPI at pinned versions.
#
# Every PyPI package is installed with --no-deps from an explicit list: Debian's torch
# calls itself "1.13.0a0+gitunknown", a PEP 440 pre-release that does not satisfy
# "torch>=1.13", so pip's resolver would otherwise download a second torch from PyPI.
# pytorch-lightning 2.0.9: its requirement (torch>=1.11) is met by Debian's torch, and
# unlike 2.1.x it does not misread "1.13.0a0" as older than 1.13 (2.1.4 then reaches for
# torch._UntypedStorage, which 1.13 lacks). Lightning on this torch also needs
# kiln._compat.fix_debian_torch_shard_import (applied by `import kiln.lightning`).
# The check at the end imports everything and fails if pip brought in a torch of its own.
#
# Idempotent and quick when nothing changed (a stamp file records the pinned set).
# Usage: bash scripts/setup_python.sh   (after scripts/setup.sh has installed the
# Debian packages, python3-venv among them)
set -euo pipefail
cd "$(dirname "$0")/.."

PY=/usr/bin/python3          # Debian's python3: the one with torch (not a pyenv one)
VENV=.venv
PINS=(
  pytest==8.3.4 pluggy==1.5.0 iniconfig==2.0.0 packaging==24.2
  pytorch-lightning==2.0.9.post0 torchmetrics==1.4.3 lightning-utilities==0.11.9
  tqdm==4.67.1 fsspec==2024.12.0
  # the CPU peer for bench/cpu_vs_ort.py; --no-deps keeps Debian's protobuf, which onnx
  # 1.12 needs (ORT runs with it, though its metadata asks for a newer one)
  onnxruntime==1.32.0 flatbuffers==25.12.19
)
STAMP="$VENV/.kiln-python-setup"
WANT="v1 ${PINS[*]}"

if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  echo "setup_python: $VENV up to date"
  exit 0
fi

if ! "$PY" -c 'import torch, onnx, numpy' 2>/dev/null; then
  echo "setup_python: $PY lacks torch/onnx/numpy; run scripts/setup.sh first" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup_python: creating $VENV (system site packages: Debian's torch)"
  "$PY" -m venv --system-site-packages "$VENV"
fi
echo "setup_python: installing ${PINS[*]}"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps "${PINS[@]}"

# Check: our packages' requirements are met (pip check also reports unrelated Debian
# packages: look only at ours), torch is still Debian's, and Lightning imports (through
# kiln.lightning, which applies kiln's fix for Debian's torch 1.13 on Python 3.11).
if "$VENV/bin/python" -m pip check 2>/dev/null |
     grep -iE '^(pytest|pluggy|iniconfig|packaging|pytorch-lightning|torchmetrics|lightning-utilities|tqdm|fsspec) '; then
  echo "setup_python: unmet requirements (above)" >&2
  exit 1
fi
"$VENV/bin/python" - <<'EOF'
import sys
sys.path.insert(0, "python")
import kiln.lightning  # first: it makes Lightning importable on Debian's torch
import torch, pytest, pytorch_lightning, torchmetrics, onnxruntime
if not torch.__file__.startswith("/usr/lib/python3/dist-packages/"):
    sys.exit(f"setup_python: torch comes from {torch.__file__}, not Debian's python3-torch")
if kiln.lightning.pl is None:
    sys.exit("setup_python: Lightning does not import")
print(f"setup_python: torch {torch.__version__}, pytorch-lightning {pytorch_lightning.__version__}, "
      f"torchmetrics {torchmetrics.__version__}, pytest {pytest.__version__}")
EOF
echo "$WANT" > "$STAMP"
