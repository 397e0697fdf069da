#!/bin/bash
# test_cli_docs.sh -- the user documentation against the code (ctest cli_docs).
#
# Usage: tests/cli/test_cli_docs.sh PATH/TO/kiln PATH/TO/readme_quickstart
#
# 1. Every command of `kiln --help` and every long option and environment
#    variable of `kiln COMMAND --help` is in docs/cli.md (the full reference).
# 2. The README's C quick start, compiled from README.md as written (target
#    readme_quickstart, tests/cli.cmake), builds, saves and runs an engine of a
#    small model with its input and output names; `kiln run` runs the file.
# 3. Every markdown link of the README, BENCHMARKS.md, docs/*.md and
#    python/README.md leads to a file that exists, and its #anchor to a heading
#    there; every .md path they mention exists.
# Ends with "N passed, M failed"; exits 1 if anything failed. About 2 s.
set -u

KILN=${1:?usage: test_cli_docs.sh PATH/TO/kiln PATH/TO/readme_quickstart}
QUICK=${2:?usage: test_cli_docs.sh PATH/TO/kiln PATH/TO/readme_quickstart}
KILN=$(cd "$(dirname "$KILN")" && pwd)/$(basename "$KILN")
QUICK=$(cd "$(dirname "$QUICK")" && pwd)/$(basename "$QUICK")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
T=$(mktemp -d /tmp/kiln_docs_test.XXXXXX)
trap 'rm -rf "$T"' EXIT
PASS=0
FAIL=0
ok() { PASS=$((PASS + 1)); }
bad() { FAIL=$((FAIL + 1)); echo "FAIL: $*"; }

# ---- 1. docs/cli.md has every command, option and variable of the help texts
CLI_MD=$ROOT/docs/cli.md
in_cli_md() { grep -qE -- "(^|[^A-Za-z0-9_-])$1([^A-Za-z0-9_-]|\$)" "$CLI_MD"; }
"$KILN" --help >"$T/help" 2>&1
cmds=$(sed -n '/^Commands:/,/^$/p' "$T/help" | awk 'NF {print $1}' | grep -v '^Commands:')
[ -n "$cmds" ] || bad "kiln --help lists no commands"
for c in $cmds; do
    if in_cli_md "kiln $c"; then ok; else bad "docs/cli.md does not mention 'kiln $c'"; fi
done
for c in build run inspect bench debug; do
    "$KILN" "$c" --help >"$T/help_$c" 2>&1 || { bad "kiln $c --help failed"; continue; }
    for opt in $(grep -oE -- '--[a-z][a-z0-9-]*' "$T/help_$c" | sort -u) \
               $(grep -oE 'KILN_[A-Z_]+' "$T/help_$c" | sort -u); do
        if in_cli_md "$opt"; then ok; else bad "docs/cli.md lacks '$opt' of 'kiln $c --help'"; fi
    done
done

# ---- 2. the README's C quick start
$PY - "$T" <<'EOF' || { bad "cannot make the test model (needs /usr/bin/python3 with onnx, numpy)"; echo "$PASS passed, $FAIL failed"; exit 1; }
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
rng = np.random.default_rng(5)
inits = [numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")]
nodes = [helper.make_node("Conv", ["input", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[4, 4]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("GlobalAveragePool", ["r"], ["p"]),
         helper.make_node("Flatten", ["p"], ["output"])]
g = helper.make_graph(nodes, "quickstart",
                      [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 224, 224])],
                      [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 8])],
                      initializer=inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
onnx.checker.check_model(m)
onnx.save(m, sys.argv[1] + "/model.onnx")
EOF
(cd "$T" && "$QUICK" model.onnx) >"$T/quick.out" 2>&1
rc=$?
# the model's output at an all-zero input: relu(b) averaged, so y[0] = max(b[0], 0)
if [ $rc -eq 0 ] && grep -q '^output: rank 2, \[2 x 8\], y\[0\] = ' "$T/quick.out"; then ok
else bad "README's C quick start: exit $rc"; sed 's/^/    | /' "$T/quick.out" | head -20; fi
if "$KILN" run "$T/model.kiln" --random-inputs -q >"$T/run.out" 2>&1; then ok
else bad "kiln run of the quick start's model.kiln"; sed 's/^/    | /' "$T/run.out" | head; fi
if "$QUICK" >/dev/null 2>&1; [ $? -eq 2 ]; then ok; else bad "quick start without a model: exit status not 2"; fi
if "$QUICK" "$T/missing.onnx" >"$T/miss.out" 2>&1; then bad "quick start on a missing model succeeded"
elif grep -q 'missing.onnx' "$T/miss.out"; then ok
else bad "quick start on a missing model: no message naming it"; cat "$T/miss.out"; fi

# ---- 3. links and anchors
$PY - "$ROOT" >"$T/links.out" 2>&1 <<'EOF'
import os, re, sys
root = sys.argv[1]
files = ["README.md", "BENCHMARKS.md", "python/README.md"]
files += sorted("docs/" + f for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))

def strip_code(text):
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)

def anchors(path):
    """GitHub's heading ids: lower case, punctuation dropped, spaces to '-', -N for repeats."""
    seen, out = {}, set()
    for line in strip_code(open(path, encoding="utf-8").read()).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        a = re.sub(r"[^\w\- ]", "", m.group(1).lower().replace("`", "")).replace(" ", "-")
        n = seen.get(a, 0)
        seen[a] = n + 1
        out.add(a if n == 0 else "%s-%d" % (a, n))
    return out

bad = checked = 0
for f in files:
    text = strip_code(open(os.path.join(root, f), encoding="utf-8").read())
    base = os.path.dirname(f)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, frag = target.partition("#")
        dest = os.path.normpath(os.path.join(base, path)) if path else f
        checked += 1
        if not os.path.exists(os.path.join(root, dest)):
            print("%s: link to %s: no such file" % (f, target)); bad += 1
        elif frag and dest.endswith(".md") and frag not in anchors(os.path.join(root, dest)):
            print("%s: link to %s: no heading #%s in %s" % (f, target, frag, dest)); bad += 1
    for p in set(re.findall(r"(?<![\w/.-])((?:docs|python|tests|bench|scripts|examples)/[\w./-]*\.md"
                            r"|README\.md|BENCHMARKS\.md)(?![\w/-])", text)):
        checked += 1
        if not os.path.exists(os.path.join(root, p)):
            print("%s: mentions %s, which does not exist" % (f, p)); bad += 1
print("links checked: %d, bad: %d" % (checked, bad))
sys.exit(1 if bad else 0)
EOF
if [ $? -eq 0 ]; then ok; else bad "links"; sed 's/^/    | /' "$T/links.out"; fi

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
