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
# KILN_FUZZ_TARGETS (default "onnx engine npy").
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
command -v protoc-c > /dev/null || die "protoc-c not found (apt-get install protobuf-c-compiler)"
[ -f /usr/include/onnx/onnx.proto ] || die "/usr/include/onnx/onnx.proto not found (apt-get install libonnx-dev)"

mkdir -p "$BUILD/gen" "$BUILD/obj" "$BUILD/run" || die "cannot create $BUILD"

# ---- generated protobuf-c code (as CMakeLists.txt does) ---------------------
if [ ! -f "$BUILD/gen/onnx.pb-c.c" ] || [ /usr/include/onnx/onnx.proto -nt "$BUILD/gen/onnx.pb-c.c" ]; then
    cp /usr/include/onnx/onnx.proto "$BUILD/gen/onnx.proto" &&
        protoc-c --proto_path="$BUILD/gen" --c_out="$BUILD/gen" "$BUILD/gen/onnx.proto" ||
        die "protoc-c failed"
fi

# ---- compile the library (objects are reused while up to date) -------------
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
CFLAGS_COMMON="-g -O1 -fno-omit-frame-pointer -D_GNU_SOURCE -I$ROOT/include -I$ROOT/src -I$ROOT/tools -I$BUILD/gen"
export CC BUILD ROOT CFLAGS_COMMON SAN
cat > "$BUILD/cpu_supports_compat.h.tmp" << 'HDR'
/* Written by tests/fuzz/build_and_run.sh: __builtin_cpu_supports for clang
 * versions that reject some feature names (clang 14: "f16c"). */
#if defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#include <string.h>
static inline int kiln_fuzz_cpu_supports(const char *f) {
    unsigned a, b, c, d;
    if (!strcmp(f, "f16c")) return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
#define KILN_FUZZ_F(n) if (!strcmp(f, n)) return __builtin_cpu_supports(n);
    KILN_FUZZ_F("sse4.2") KILN_FUZZ_F("avx") KILN_FUZZ_F("avx2") KILN_FUZZ_F("fma")
    KILN_FUZZ_F("avx512f") KILN_FUZZ_F("avx512bw") KILN_FUZZ_F("avx512vl") KILN_FUZZ_F("avx512vnni")
#undef KILN_FUZZ_F
    return 0;
}
#define __builtin_cpu_supports(f) kiln_fuzz_cpu_supports(f)
#endif
HDR
cmp -s "$BUILD/cpu_supports_compat.h.tmp" "$BUILD/cpu_supports_compat.h" ||
    mv "$BUILD/cpu_supports_compat.h.tmp" "$BUILD/cpu_supports_compat.h"
rm -f "$BUILD/cpu_supports_compat.h.tmp"
# Newest header/def file: a change to any of them recompiles everything.
STAMP=$BUILD/obj/.headers
NEWEST=$(find "$ROOT/src" "$ROOT/include" "$ROOT/tools" \( -name '*.h' -o -name '*.def' \) -newer "$STAMP" 2> /dev/null | head -1)
if [ ! -f "$STAMP" ] || [ -n "$NEWEST" ]; then
    rm -f "$BUILD"/obj/*.o
    touch "$STAMP"
fi
compile_one() { # source file -> object under $BUILD/obj (flattened name)
    src=$1
    rel=${src#"$ROOT"/}
    obj=$BUILD/obj/$(echo "$rel" | tr '/' '_').o
    [ -f "$obj" ] && [ "$obj" -nt "$src" ] && exit 0
    extra=""
    case $src in
    */onnx.pb-c.c) extra="-w" ;; # generated code
    # clang 14's __builtin_cpu_supports does not know "f16c" (a compile error);
    # until src/format/read.c avoids it, route the builtin through cpuid.
    */src/format/read.c) extra="-include $BUILD/cpu_supports_compat.h" ;;
    esac
    # shellcheck disable=SC2086
    "$CC" -c $CFLAGS_COMMON $SAN -fsanitize=fuzzer-no-link $extra "$src" -o "$obj.tmp" &&
        mv "$obj.tmp" "$obj" || { echo "compile failed: $rel" >&2; exit 1; }
}
export -f compile_one
SOURCES=$(find "$ROOT/src" -name '*.c' -not -path '*/src/backends/cuda/*' | sort)
GEN_C=$BUILD/gen/onnx.pb-c.c
echo "== compiling kiln with $CC ($($CC --version | head -1))"
printf '%s\n' $SOURCES "$GEN_C" "$ROOT/tools/npy.c" "$HERE"/fuzz_*.c |
    xargs -P "$JOBS" -I{} bash -c 'compile_one "$1"' _ {} || die "compilation failed"
LIB_OBJS=""
for s in $SOURCES "$GEN_C"; do
    rel=${s#"$ROOT"/}
    LIB_OBJS="$LIB_OBJS $BUILD/obj/$(echo "$rel" | tr '/' '_').o"
done

# ---- link, then run each target ------------------------------------------------
# Stacks for UBSan reports too; sanitizer options given by the caller win.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# allocator_may_return_null: a huge allocation asked for by a hostile file must
# come back as NULL (kiln then reports KILN_ERR_OUT_OF_MEMORY), as malloc does in
# a normal build; -rss_limit_mb still bounds what a run really uses.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}:allocator_may_return_null=1
passed=0
failed=0
for t in $TARGETS; do
    src=$HERE/fuzz_$t.c
    [ -f "$src" ] || die "unknown target $t"
    bin=$BUILD/fuzz_$t
    objs="$LIB_OBJS $BUILD/obj/tests_fuzz_fuzz_$t.c.o"
    [ "$t" = npy ] && objs="$objs $BUILD/obj/tools_npy.c.o"
    # shellcheck disable=SC2086
    if ! "$CC" -fsanitize=fuzzer $SAN $objs -o "$bin" -lprotobuf-c -lpthread -lm; then
        echo "== $t: FAILED (link)"
        failed=$((failed + 1))
        continue
    fi
    mkdir -p "$CRASHES/$t"
    printf '*\n' > "$CRASHES/.gitignore" # reproducers are not committed
    opts="-rss_limit_mb=2048 -timeout=10 -artifact_prefix=$CRASHES/$t/"
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
    "$bin" $opts -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 "$work" > "$log" 2>&1
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
