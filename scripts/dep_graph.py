#!/usr/bin/env python3
"""dep_graph.py -- the dependency graph of kiln's sources, and its circles.

Two graphs, both between the source files of src/:

  includes   file A -> file B when A says #include "B" (src/-relative or
             next to A). Read from the sources: no build needed.
  symbols    file A -> file B when A's object uses a symbol that B's object
             defines (`nm` over the objects of a build: what the linker
             sees, so it also catches a function declared in a shared
             header such as core/core.h but defined elsewhere).

An *import circle* is a strongly connected component of more than one
file. The rule (docs/architecture.md): no circle spans more than one
folder (a folder is a file's directory under src/, e.g. backends/cpu), so
that dependencies between folders point one way. The script prints every
circle and the folder-level edges, and exits 1 when a circle crosses a
folder.

  scripts/dep_graph.py                   includes only
  scripts/dep_graph.py --objects build   also symbols, from build's objects
  scripts/dep_graph.py --objects build --folders   print folder -> folder edges
  scripts/dep_graph.py --objects build --folder-circles
                         also print the circles of the folder graph (folder A
                         -> B when a file of A uses one of B), and the file
                         edges that close each: a coarser view, not failing;
                         docs/architecture.md says which ones are by design
"""
import argparse
import os
import re
import subprocess
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
EXTS = (".c", ".h", ".cu", ".cuh", ".inc", ".def")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def source_files():
    out = []
    for d, _, names in os.walk(SRC):
        for n in names:
            if n.endswith(EXTS):
                out.append(os.path.relpath(os.path.join(d, n), SRC))
    return sorted(out)


def folder(f):
    return os.path.dirname(f) or "."


def include_graph(files):
    known = set(files)
    g = defaultdict(set)
    for f in files:
        with open(os.path.join(SRC, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for inc in INCLUDE.findall(text):
            cands = [os.path.normpath(inc), os.path.normpath(os.path.join(folder(f), inc))]
            for c in cands:
                if c in known and c != f:
                    g[f].add(c)
                    break
    return g


def symbol_graph(objdir):
    """Edges between the .c/.cu files of src/ whose objects are under objdir."""
    objs = []
    for d, _, names in os.walk(objdir):
        for n in names:
            if n.endswith(".o"):
                p = os.path.join(d, n)
                rel = p.replace(os.sep, "/")
                i = rel.rfind("/src/")
                if i < 0:
                    continue
                src = rel[i + 5:-2]  # "ops/gemm.c"
                if os.path.exists(os.path.join(SRC, src)):  # not a stale object of a moved file
                    objs.append((src, p))
    if not objs:
        sys.exit(f"dep_graph: no objects of src/ under {objdir}")
    defs, uses = {}, defaultdict(set)
    # one nm call for all objects: fast
    res = subprocess.run(["nm", "-P", "-A"] + [p for _, p in objs], capture_output=True,
                         text=True, check=True)
    by_path = {p: s for s, p in objs}
    for line in res.stdout.splitlines():
        head, _, rest = line.partition(": ")
        parts = rest.split()
        if len(parts) < 2 or head not in by_path:
            continue
        name, kind = parts[0], parts[1]
        src = by_path[head]
        if kind == "U":
            uses[src].add(name)
        elif kind in "TDBRCGSV" or kind in "tdbr" and False:
            defs.setdefault(name, src)
    g = defaultdict(set)
    for src, names in uses.items():
        for n in names:
            d = defs.get(n)
            if d and d != src:
                g[src].add(d)
    return g, [s for s, _ in objs]


def sccs(nodes, g):
    """Tarjan's algorithm, iterative."""
    index, low, onstack, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(g.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        onstack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    onstack.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                    advanced = True
                    break
                if w in onstack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    onstack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def folder_circles(kind, nodes, g):
    """Circles of the folder graph. For each pair of its folders with edges
    both ways, the file edges of the lighter way (the ones that point back)."""
    fe = defaultdict(list)
    for a, bs in g.items():
        for b in bs:
            if folder(a) != folder(b):
                fe[(folder(a), folder(b))].append((a, b))
    fg = defaultdict(set)
    for fa, fb in fe:
        fg[fa].add(fb)
    for c in sccs(sorted({folder(f) for f in nodes}), fg):
        if len(c) < 2:
            continue
        print(f"{kind}: folder circle of {', '.join(c)}:")
        for fa in c:
            for fb in c:
                back = fe.get((fb, fa), [])
                if fa < fb and fe.get((fa, fb)) and back:
                    light = min(fe[(fa, fb)], back, key=len)
                    heavy = len(fe[(fa, fb)]) + len(back) - len(light)
                    print(f"    {fa} <-> {fb}: {heavy} file edges one way, these {len(light)} back:")
                    for a, b in sorted(light):
                        print(f"        {a} -> {b}")


def report(kind, nodes, g, show_folders):
    bad = 0
    circles = [c for c in sccs(nodes, g) if len(c) > 1]
    for c in sorted(circles, key=len, reverse=True):
        folders = sorted({folder(f) for f in c})
        crosses = len(folders) > 1
        bad += crosses
        tag = "CROSSES FOLDERS " + ", ".join(folders) if crosses else "within " + folders[0]
        print(f"{kind}: circle of {len(c)} files, {tag}:")
        if crosses:
            # the edges that leave a folder inside the circle
            for a in c:
                for b in sorted(g.get(a, ())):
                    if b in c and folder(a) != folder(b):
                        print(f"    {a} -> {b}")
        else:
            print("    " + " ".join(c))
    if show_folders:
        fe = defaultdict(int)
        for a, bs in g.items():
            for b in bs:
                if folder(a) != folder(b):
                    fe[(folder(a), folder(b))] += 1
        for (a, b), k in sorted(fe.items()):
            print(f"{kind}: folder {a} -> {b} ({k})")
    print(f"{kind}: {len(circles)} circle(s), {bad} crossing folders")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--objects", help="a build folder: also check the symbol graph of its objects")
    ap.add_argument("--folders", action="store_true", help="print the folder -> folder edges")
    ap.add_argument("--folder-circles", action="store_true",
                    help="print the circles of the folder graph (not failing)")
    args = ap.parse_args()
    files = source_files()
    ig = include_graph(files)
    bad = report("includes", files, ig, args.folders)
    if args.folder_circles:
        folder_circles("includes", files, ig)
    if args.objects:
        g, objs = symbol_graph(args.objects)
        bad += report("symbols", objs, g, args.folders)
        if args.folder_circles:
            folder_circles("symbols", objs, g)
    if bad:
        print("dep_graph: import circles cross folders (see docs/architecture.md)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
