#!/usr/bin/env bash
# Packs a CUDA build made on this machine for a run on a GPU machine that has
# no build tools set up: kiln, libkiln.so.0, the GPU test programs, the
# conformance runner and the Debian libraries they load (oneDNN, protobuf-c,
# OpenCL), into one xz tarball (the test programs link kiln statically, so
# they share one CUDA fat binary: xz -9's window keeps the tarball ~16 MB).
# Usage: bash scripts/gpu_pack.sh [BUILD_DIR] [OUT.tar.xz]
# On the GPU machine: mkdir -p .gpu-bin && tar xJf OUT.tar.xz -C .gpu-bin &&
#   KILN_PREBUILT=.gpu-bin bash scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
OUTF=${2:-.carry/kiln-gpu.tar.xz}
[ -f "$B/libkiln.so.0" ] && [ -x "$B/test_cuda_ops" ] || {
  echo "gpu_pack: $B has no CUDA build (libkiln.so.0, test_cuda_ops); build with nvcc first" >&2; exit 1; }
# (a build of PTX alone, as CI's: the GPU would compile every kernel at load and time that)
if grep -q '^CMAKE_CUDA_ARCHITECTURES:.*=.*virtual' "$B/CMakeCache.txt" 2>/dev/null; then
  echo "gpu_pack: $B was built for PTX alone (CMAKE_CUDA_ARCHITECTURES *-virtual); rebuild it with 90a" >&2; exit 1; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in kiln libkiln.so.0 kiln_conformance test_cuda_ops test_cuda_engine test_cuda_precision test_cuda_diff \
         test_attention_forms test_debug; do
  [ -e "$B/$f" ] && cp -L "$B/$f" "$tmp/"
done
for l in libdnnl.so.2 libprotobuf-c.so.1 libOpenCL.so.1; do
  # (awk reads all of ldconfig's output: an early exit is a SIGPIPE that pipefail turns into the script's)
  p=$(ldconfig -p | awk -v l="$l" '$1 == l && /x86-64/ && !f {print $NF; f = 1}')
  [ -n "$p" ] && cp -L "$p" "$tmp/"
done
mkdir -p "$(dirname "$OUTF")"
tar cf - -C "$tmp" . | xz -T2 -9 > "$OUTF.tmp" && mv "$OUTF.tmp" "$OUTF"
echo "gpu_pack: $OUTF ($(du -h "$OUTF" | cut -f1)): $(ls "$tmp" | tr '\n' ' ')"
