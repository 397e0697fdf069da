#!/usr/bin/env bash
# build_and_run.sh [SECONDS] -- builds kiln's libFuzzer targets with clang
# (-fsanitize=fuzzer,address,undefined) and fuzzes each for SECONDS (default 60).
#
# Targets: onnx (ONNX importer + build), engine (engine loader + describe),
# npy (tools/npy.c npy_parse). For each target, the regression inputs under
# tests/fuzz/regressions/<target>/ are run once first, then the fuzzer runs on
# a copy of tests/fuzz/corpus/<target>/ with -max_total_time=SECONDS.
# A crash, leak or timeout is saved under tests/fuzz/crashes/<target>/ and
# makes the script exit non-zero. Prints "N passed, M failed" at the end.
#
# Environment: CC (default clang), KILN_FUZZ_BUILD (build folder, default
# <repo>/build-fuzz), KILN_FUZZ_JOBS (parallel compiles, default 2),
# KILN_FUZZ_TARGETS (default "onnx engine npy"), KILN_FUZZ_SEED (libFuzzer
# -seed; default 0 = a random seed, printed in the log; CI passes a fixed one
# so that its runs are repeatable), KILN_FUZZ_RUNS (with a fixed seed: stop
# each target after this many executions, or after SECONDS, whichever comes
# first; default: per target, about what 60 s give on a 2-core CI machine, so
# that the amount of fuzzing does not depend on the machine's speed; 0 = no
# count, SECONDS only).
set -u
SECONDS_PER_TARGET=${1:-60}
case $SECONDS_PER_TARGET in '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CC=${CC:-clang}
BUILD=${KILN_FUZZ_BUILD:-$ROOT/build-fuzz}
JOBS=${KILN_FUZZ_JOBS:-2}
TARGETS=${KILN_FUZZ_TARGETS:-onnx engine npy}
CRASHES=$HERE/crashes

die() { echo "build_and_run.sh: $*" >&2; exit 2; }
command -v "$CC" > /dev/null || die "$CC not found (apt-get install clang libclang-rt-14-dev)"
command -v cmake > /dev/null || die "cmake not found (bash scripts/setup.sh)"

mkdir -p "$BUILD/run" || die "cannot create $BUILD"

# ---- build: kiln's own CMake build, all of it instrumented ------------------
# (so that the fuzzed code is compiled exactly as kiln is: same sources,
# definitions and libraries; only the compiler and the flags differ)
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
echo "== building the fuzz targets with $CC ($($CC --version | head -1)) in $BUILD"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS="$SAN -fsanitize=fuzzer-no-link -fno-omit-frame-pointer" \
    -DCMAKE_EXE_LINKER_FLAGS="$SAN" -DKILN_FUZZ=ON -DKILN_CUDA=OFF -DKILN_WERROR=OFF \
    > "$BUILD/run/cmake.log" 2>&1 || { tail -20 "$BUILD/run/cmake.log"; die "cmake failed"; }
fuzz_bins=""
for t in $TARGETS; do fuzz_bins="$fuzz_bins fuzz_$t"; done
# shellcheck disable=SC2086
for t in $fuzz_bins; do
    cmake --build "$BUILD" -j"$JOBS" --target "$t" > "$BUILD/run/build_$t.log" 2>&1 ||
        { grep -E 'error|Error' "$BUILD/run/build_$t.log" | head -20; die "building $t failed"; }
done

# ---- run each target ------------------------------------------------------------
# Stacks for UBSan reports too; sanitizer options given by the caller win.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# allocator_may_return_null + max_allocation_size_mb: an allocation over 2 GiB
# asked for by a hostile file comes back as NULL (kiln then reports
# KILN_ERR_OUT_OF_MEMORY) instead of tripping libFuzzer's malloc limit (which
# equals -rss_limit_mb and would count as a crash); -rss_limit_mb still bounds
# what a run really uses.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}:allocator_may_return_null=1:max_allocation_size_mb=2048
passed=0
failed=0
for t in $TARGETS; do
    bin=$BUILD/fuzz_$t
    [ -x "$bin" ] || die "unknown target $t (no $bin)"
    mkdir -p "$CRASHES/$t"
    printf '*\n' > "$CRASHES/.gitignore" # reproducers are not committed
    opts="-rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 -artifact_prefix=$CRASHES/$t/"
    ok=1

    # Regression inputs: each is run once.
    regs=$(find "$HERE/regressions/$t" -type f ! -name '.*' 2> /dev/null | sort)
    if [ -n "$regs" ]; then
        # shellcheck disable=SC2086
        if ! "$bin" $opts $regs > "$BUILD/run/$t.regressions.log" 2>&1; then
            echo "== $t: regression input failed (log: $BUILD/run/$t.regressions.log)"
            tail -30 "$BUILD/run/$t.regressions.log"
            ok=0
        fi
    fi

    # Fuzzing, on a copy of the seed corpus (new inputs go to the copy).
    work=$BUILD/run/corpus_$t
    rm -rf "$work"
    mkdir -p "$work"
    cp "$HERE/corpus/$t"/* "$work"/ 2> /dev/null
    log=$BUILD/run/$t.log
    # shellcheck disable=SC2086
    runs=${KILN_FUZZ_RUNS:-}
    if [ -z "$runs" ]; then
        case $t in onnx) runs=200000 ;; engine) runs=250000 ;; npy) runs=25000000 ;; *) runs=0 ;; esac
    fi
    [ "${KILN_FUZZ_SEED:-0}" = 0 ] && runs=0 # a random seed: time-bounded only
    runs_opt=""
    [ "$runs" -gt 0 ] && runs_opt="-runs=$runs"
    "$bin" $opts -seed="${KILN_FUZZ_SEED:-0}" -max_total_time="$SECONDS_PER_TARGET" $runs_opt \
        -print_final_stats=1 "$work" > "$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    [ -n "$execs" ] || execs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -1)
    [ -n "$execs" ] || execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
    if [ $rc -ne 0 ]; then
        ok=0
        artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
        echo "== $t: ${execs:-?} executions, CRASH (exit $rc); reproducer: ${artifact:-none written}; log: $log"
        grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error' "$log"
        grep -E '^ +#[0-9]+ ' "$log" | head -12
    else
        echo "== $t: ${execs:-?} executions, no crash (corpus $(ls "$work" | wc -l) files)"
    fi
    if [ $ok -eq 1 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
