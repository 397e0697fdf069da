#!/usr/bin/env bash
# Runs every test of kiln on a fresh Debian 12 machine: set-up, a release
# build with all ctest suites (unit, conformance against the ONNX backend node
# tests, CLI, real models vs PyTorch), then an AddressSanitizer +
# UndefinedBehaviorSanitizer build running the unit, CLI, stress and conformance
# suites, the CUDA backend's host code against an emulated CUDA runtime, a
# ThreadSanitizer build (clang) running the threaded tests, and the
# libFuzzer targets for 60 s each (clang, ASan + UBSan) after their regressions.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
JOBS=$(nproc)
# stage TITLE: ends the stage before (its seconds, and the total so far:
# CI is meant to finish within 30 minutes), then names the next
stage() {
  [ -z "${STAGE_T0:-}" ] || echo "   (stage: $((SECONDS - STAGE_T0)) s; total: $SECONDS s)"
  STAGE_T0=$SECONDS
  echo "== $1"
}

stage "release build"
BUILD_DIR=build bash scripts/build.sh -DKILN_MODEL_TESTS=ON
(cd build && ctest --output-on-failure -j"$JOBS" -E '^models(_bf16)?$' -LE '^zoo$')
stage "import circles: none may cross a folder (scripts/dep_graph.py, docs/architecture.md)"
/usr/bin/python3 scripts/dep_graph.py --objects build
stage "every attribute struct engines store has its layout asserts (scripts/attrs_layout.py)"
/usr/bin/python3 scripts/attrs_layout.py --check
stage "model zoo: a varied subset of torchvision's models vs PyTorch (bench/model_zoo.py --ci)"
(cd build && ctest --output-on-failure -V -L '^zoo$' | grep -vE '^[0-9]+: (Test command|Working Directory|Environment)')
stage "real models vs PyTorch (ResNet-50, MobileNetV2, BERT-base, MLP; then ResNet-50 and MobileNetV2 in bf16)"
(cd build && ctest --output-on-failure -V -R '^models(_bf16)?$' | grep -vE '^[0-9]+: (Test command|Working Directory|Environment)')

stage "Python front end (python/: pytest, Lightning)"
bash scripts/setup_python.sh
KILN_LIBRARY=build/libkiln.so KILN_CLI=build/kiln .venv/bin/python -m pytest -q -rs python/tests

stage "ASan + UBSan build"
# (the CUDA backend is left out here: no GPU in CI, and the release build compiles it)
BUILD_DIR=build-asan bash scripts/build.sh -DKILN_SANITIZE=ON -DKILN_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
(cd build-asan && ctest --output-on-failure -j"$JOBS" -E '^models(_bf16)?$' -LE '^zoo$')

stage "CUDA backend host code and GPU op tests against a CPU emulation of the CUDA runtime"
# tests/cuda/emu: the backend's host side (planners, kernel table, attributes,
# cuBLASLt mapping) and test_cuda_ops itself, with every kernel family in the
# table (the launchers are emulated on the host; the kernels run only on a GPU);
# then test_cuda_diff, random graphs' CUDA plans against the CPU's level-0 plan
# (about 3 s). The summary lines; on a failure the log's last 60 lines.
if [ -f /usr/local/cuda/include/cuda_runtime_api.h ] || [ -n "${CUDA_INC:-}" ]; then
  mkdir -p build-cuda-emu
  if ! BUILD_DIR=build-cuda-emu bash tests/cuda/emu/run.sh > build-cuda-emu/run.log 2>&1; then
    tail -60 build-cuda-emu/run.log
    exit 1
  fi
  grep -E '^[0-9]+ passed, [0-9]+ failed|graphs compared' build-cuda-emu/run.log
else
  echo "skipped: no CUDA headers (/usr/local/cuda/include)"
fi

stage "ThreadSanitizer build (clang): unit tests (thread pool, threads sharing an engine), stress test, conformance"
# -Werror stays with the gcc builds above: clang warns about other things.
CC=clang-14 BUILD_DIR=build-tsan bash scripts/build.sh -DKILN_TSAN=ON -DKILN_CUDA=OFF \
  -DKILN_WERROR=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
# ignore_noninstrumented_modules: oneDNN's OpenMP threads (libgomp, not built
# with TSan) synchronize in ways TSan cannot see; kiln's own code is checked.
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1 \
  ctest --output-on-failure -j"$JOBS" -L '^(unit|threads|conformance)$')

stage "fuzzing (libFuzzer, ASan + UBSan): regressions, then up to 60 s per target"
# A fixed seed and a fixed number of executions per target keep CI's runs
# repeatable (tests/fuzz/README.md); KILN_FUZZ_SEED=0 picks a random seed.
CC=clang-14 KILN_FUZZ_BUILD="$PWD/build-fuzz" KILN_FUZZ_SEED="${KILN_FUZZ_SEED:-1}" \
  bash tests/fuzz/build_and_run.sh 60
stage "all test suites passed"
