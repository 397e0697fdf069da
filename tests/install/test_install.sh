#!/usr/bin/env bash
# Installs kiln from BUILD_DIR into a temporary prefix, then compiles and runs
# a program against the installed header, library and pkg-config file.
set -euo pipefail
BUILD_DIR=$1
SRC_DIR=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$BUILD_DIR" --prefix "$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig:$tmp/prefix/lib/x86_64-linux-gnu/pkgconfig:$tmp/prefix/lib64/pkgconfig"
cat > "$tmp/use_kiln.c" <<'C'
#include <kiln.h>
#include <stdio.h>
int main(int argc, char **argv) {
    if (kiln_version_number() != KILN_VERSION_NUMBER) return 2;
    kiln_model *m = NULL;
    if (kiln_model_load_onnx(argv[1], &m) != KILN_OK) { fprintf(stderr, "%s\n", kiln_last_error()); return 1; }
    printf("kiln %s: model has %d input(s)\n", kiln_version_string(), kiln_model_num_inputs(m));
    kiln_model_free(m);
    (void)argc;
    return 0;
}
C
# shared library
cc -std=c11 -Wall -Werror "$tmp/use_kiln.c" -o "$tmp/use_shared" $(pkg-config --cflags --libs kiln)
libdir=$(pkg-config --variable=libdir kiln)
LD_LIBRARY_PATH="$libdir" "$tmp/use_shared" "$SRC_DIR/tests/data/tiny_mlp.onnx"
# static library
cc -std=c11 -Wall -Werror "$tmp/use_kiln.c" -o "$tmp/use_static" $(pkg-config --cflags kiln) \
   "$libdir/libkiln.a" $(pkg-config --libs-only-l --static kiln | sed 's/-lkiln//')
"$tmp/use_static" "$SRC_DIR/tests/data/tiny_mlp.onnx"
[ -x "$tmp/prefix/bin/kiln" ] || { echo "kiln CLI not installed"; exit 1; }
"$tmp/prefix/bin/kiln" --help >/dev/null 2>&1 || LD_LIBRARY_PATH="$libdir" "$tmp/prefix/bin/kiln" --help >/dev/null
echo "1 passed, 0 failed"
