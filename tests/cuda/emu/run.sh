#!/usr/bin/env bash
# Runs tests/cuda/test_cuda_ops.c on the CPU against cuda_emu.c (and the
# families' emu_*.c files next to it), a host
# emulation of the CUDA runtime, cuBLASLt and kiln's kernel launchers: checks
# the CUDA backend's host code and the test program without a GPU (not the
# kernels themselves); registry.c is compiled in with CUDA on, so that whole
# engines can be built for and run on the emulated device. Needs the CUDA headers (CUDA_INC, default
# /usr/local/cuda/include); builds a CPU-only libkiln.a in BUILD_DIR.
#   tests/cuda/emu/run.sh            (ops whose attribute headers exist)
#   KILN_EMU_INCLUDE=<dir> tests/cuda/emu/run.sh   (extra include folder first,
#                                    e.g. with ops/nn_attrs.h, ops/reduce_attrs.h)
set -euo pipefail
cd "$(dirname "$0")/../../.."
B=${BUILD_DIR:-build-cuda-emu}
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=OFF -DKILN_BUILD_TESTS=OFF >/dev/null
cmake --build "$B" -j2 --target kiln_static >/dev/null
PB=$(sed -n 's/^PROTOBUF_C_LIB:FILEPATH=//p' "$B/CMakeCache.txt")
LIBS=("$PB")
# libkiln.a uses oneDNN when CMake found it
if grep -q '^KILN_DNNL:STRING=\(AUTO\|ON\)' "$B/CMakeCache.txt"; then
  DL=$(sed -n 's/^DNNL_LIB:FILEPATH=//p' "$B/CMakeCache.txt")
  [ -n "$DL" ] && [ -e "$DL" ] && LIBS+=("$DL")
fi
INC=()
if [ -n "${KILN_EMU_INCLUDE:-}" ]; then INC+=(-I"$KILN_EMU_INCLUDE"); fi
CFLAGS=(-std=c11 -D_GNU_SOURCE -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer
        -Wall -Wextra -Iinclude -Isrc -Itests "${INC[@]}" -I"$CUDA_INC"
        -DKILN_HAVE_CUDA=1 -DKILN_HAVE_CUDNN=0 -DKILN_CUDA_EMU=1)
# the emulation and the backend once, for both programs
mkdir -p "$B/emu_obj"
SRCS=(tests/cuda/emu/*.c src/backends/cuda/*.c src/backends/registry.c)
OBJS=()
for f in "${SRCS[@]}"; do OBJS+=("$B/emu_obj/$(echo "$f" | tr / _).o"); done
printf '%s\n' "${SRCS[@]}" | xargs -P "${KILN_EMU_JOBS:-2}" -I{} \
  sh -c 'gcc "$@" -c -o "$0/emu_obj/$(echo {} | tr / _).o" {}' "$B" "${CFLAGS[@]}"
for p in test_cuda_ops test_cuda_diff; do
  out=$B/test_cuda_emu
  [ $p = test_cuda_diff ] && out=$B/test_cuda_diff_emu
  gcc "${CFLAGS[@]}" -o "$out" tests/cuda/$p.c "${OBJS[@]}" "$B/libkiln.a" "${LIBS[@]}" -lpthread -lm
done
"$B/test_cuda_emu"
# the differential test of CUDA plans (random graphs vs the CPU's level-0
# plan; KILN_DIFF_ITERS / KILN_DIFF_SEED as in test_optimizer_diff)
"$B/test_cuda_diff_emu"
