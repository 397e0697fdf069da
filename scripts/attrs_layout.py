#!/usr/bin/env python3
"""attrs_layout.py -- the layout asserts of the attribute structs engines store.

Every operator's attribute struct (kiln_op_def.attr_size = sizeof(T)) is
written into engine files verbatim, so its size and the offset of each field
are asserted next to its definition (KILN_ATTRS_SIZE / KILN_ATTRS_AT,
src/ops/op.h): a change that would misread older engines fails to compile.

  scripts/attrs_layout.py T...     print the assert lines of structs T
  scripts/attrs_layout.py --check  list the attribute structs without them
  scripts/attrs_layout.py --write  append them after every struct that lacks
                                   them (what was run once to add them all)

Sizes and offsets come from the compiler: each file defining a struct is
compiled (-fsyntax-only) with probe declarations whose diagnostics carry
the numbers, so nothing is computed by hand.
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS = os.path.join(ROOT, "src", "ops")


def read(p):
    with open(p, encoding="utf-8") as f:
        return f.read()


def attr_structs():
    """Names of the structs ops store (sizeof(T) in attr_size / ASIZE), plus kiln_tactic."""
    names = set()
    for n in os.listdir(OPS):
        if n.endswith(".c"):
            names.update(re.findall(r"sizeof\(((?:kiln_\w+_attrs)|cf_attrs)\)", read(os.path.join(OPS, n))))
    names.add("kiln_tactic")
    return sorted(names)


def find_def(name):
    """(file, start, end) of `typedef struct name { ... } name;` under src/ops."""
    pat = re.compile(r"typedef struct %s \{(.*?)\} %s;" % (re.escape(name), re.escape(name)), re.S)
    for n in sorted(os.listdir(OPS)):
        if n.endswith((".c", ".h")):
            p = os.path.join(OPS, n)
            m = pat.search(read(p))
            if m:
                return p, m
    return None, None


def fields(body):
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    body = re.sub(r"//[^\n]*", "", body)
    out = []
    for decl in body.split(";"):
        decl = re.sub(r"\[[^\]]*\]", "", decl).strip()
        if not decl:
            continue
        parts = [p.strip() for p in decl.split(",")]
        first = re.findall(r"[A-Za-z_]\w*", parts[0])
        out.append(first[-1])
        for p in parts[1:]:
            out.append(re.findall(r"[A-Za-z_]\w*", p)[-1])
    return out


def measure(path, name, flds):
    """sizeof and offsetof values from gcc's diagnostics (one probe a line)."""
    probes = ["char (*kiln_probe_size)[sizeof(%s)] = 1;" % name]
    probes += ["char (*kiln_probe_%d)[offsetof(%s, %s) + 1] = 1;" % (i, name, f) for i, f in enumerate(flds)]
    head = '#include <stddef.h>\n#include "%s"\n' % path
    with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as t:
        t.write(head + "\n".join(probes) + "\n")
        tmp = t.name
    try:
        r = subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-fsyntax-only",
                            "-I" + os.path.join(ROOT, "include"), "-I" + os.path.join(ROOT, "src"), tmp],
                           capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"))
    finally:
        os.unlink(tmp)
    first = head.count("\n") + 1
    vals = {}
    for line in r.stderr.splitlines():
        m = re.match(r".*?:(\d+):\d+: warning: initialization of 'char \(\*\)\[(\d+)\]'", line)
        if m:
            vals[int(m.group(1)) - first] = int(m.group(2))
    if any(k not in vals for k in range(len(probes))):
        sys.exit("attrs_layout: could not measure %s in %s:\n%s" % (name, path, r.stderr[:2000]))
    return vals[0], [vals[k + 1] - 1 for k in range(len(flds))]


def assert_lines(name):
    path, m = find_def(name)
    if not path:
        sys.exit("attrs_layout: no `typedef struct %s {...} %s;` under src/ops" % (name, name))
    flds = fields(m.group(1))
    size, offs = measure(path, name, flds)
    lines = ["KILN_ATTRS_SIZE(%s, %d);" % (name, size)]
    lines += ["KILN_ATTRS_AT(%s, %s, %d);" % (name, f, o) for f, o in zip(flds, offs)]
    return path, m, lines


def wrap(lines, width=110):
    """The assert lines joined into rows of at most `width` characters."""
    rows, cur = [], ""
    for l in lines:
        if cur and len(cur) + 1 + len(l) > width:
            rows.append(cur)
            cur = l
        else:
            cur = cur + " " + l if cur else l
    if cur:
        rows.append(cur)
    return rows


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2
    if args[0] in ("--check", "--write"):
        missing = [n for n in attr_structs() if "KILN_ATTRS_SIZE(%s," % n not in read(find_def(n)[0] or os.devnull)]
        if args[0] == "--check":
            for n in missing:
                print("no layout asserts:", n)
            return 1 if missing else 0
        for n in missing:
            path, m, lines = assert_lines(n)
            s = read(path)
            m = re.search(r"typedef struct %s \{.*?\} %s;\n" % (re.escape(n), re.escape(n)), s, re.S)
            s = s[:m.end()] + "\n".join(wrap(lines)) + "\n" + s[m.end():]
            with open(path, "w", encoding="utf-8") as f:
                f.write(s)
            print("%s: %d asserts" % (os.path.relpath(path, ROOT), len(lines)))
        return 0
    for n in args:
        print("\n".join(wrap(assert_lines(n)[2])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
