#!/usr/bin/env bash
# Installs what kiln needs on Debian 12 (only what is missing), as root or via sudo.
set -euo pipefail
PKGS=(build-essential cmake pkg-config libprotobuf-c-dev protobuf-c-compiler libonnx-dev
      libonnx-testdata python3-torch python3-torchvision python3-onnx python3-numpy
      python3-venv libdnnl-dev
      clang clang-14 libclang-rt-14-dev)  # ThreadSanitizer build and libFuzzer targets (issue 6)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: all packages present"
