"""Writes one named section of a markdown file (BENCHMARKS.md holds the CPU and the GPU
benchmark, each written by its own script), leaving the other sections as they are.

A section is the text between `<!-- begin NAME -->` and `<!-- end NAME -->`; a file
without it gets it appended. The file is replaced atomically (temp file + rename).

    python3 bench/mdsection.py FILE NAME SOURCE   # put SOURCE's text in section NAME of FILE
"""
import os
import sys


def write_section(path, name, text):
    begin, end = "<!-- begin %s -->" % name, "<!-- end %s -->" % name
    block = "%s\n%s\n%s\n" % (begin, text.rstrip("\n"), end)
    try:
        with open(path) as f:
            old = f.read()
    except FileNotFoundError:
        old = ""
    i, j = old.find(begin), old.find(end)
    if i >= 0 and j > i:
        new = old[:i] + block + old[j + len(end):].lstrip("\n")
    else:
        new = old + ("\n" if old and not old.endswith("\n\n") else "") + block
    with open(path + ".tmp", "w") as f:
        f.write(new)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    with open(sys.argv[3]) as f:
        write_section(sys.argv[1], sys.argv[2], f.read())
