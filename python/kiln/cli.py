"""The `kiln` console script of the Python package.

`kiln serve ...` is the Python package's (kiln.serving.cli: a LitServe server). Every
other command (build, run, inspect, bench, --help) is the C command-line tool's: this
script runs it, found as $KILN_CLI, next to the libkiln this package loads (a build
folder, or <prefix>/bin of an installed kiln), or on PATH.
"""

import os
import subprocess
import sys
from pathlib import Path


def _is_this_script(path):
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"  # a script (this one); the C tool is a binary
    except OSError:
        return True


def find_c_cli():
    """Path of the C `kiln` tool, or None."""
    env = os.environ.get("KILN_CLI")
    if env:
        return env if os.access(env, os.X_OK) else None
    cands = []
    try:
        from ._lib import library_path

        lib = Path(library_path())
        if lib.is_absolute():
            cands += [lib.parent / "kiln", lib.parent.parent / "bin" / "kiln"]
    except Exception:  # noqa: BLE001 (no libkiln: look on PATH)
        pass
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d:
            cands.append(Path(d) / "kiln")
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK) and not _is_this_script(c):
            return str(c)
    return None


SERVE_HELP = ("  serve MODEL [--port --device --workers --max-batch --timeout-ms ...]\n"
              "        serve an engine (.kiln) or ONNX model over HTTP with LitServe "
              "(kiln serve --help)\n")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "serve":
        from .serving.cli import main as serve_main

        return serve_main(argv[1:])
    cli = find_c_cli()
    if argv in ([], ["--help"], ["-h"], ["help"]):
        rc = subprocess.call([cli] + argv) if cli else 0
        sys.stdout.write("\nfrom the Python package:\n" + SERVE_HELP)
        return rc
    if cli is None:
        sys.stderr.write(
            "kiln: the C command-line tool (kiln build/run/inspect/bench) was not found: set "
            "KILN_CLI to it, or install kiln (cmake --install). This Python package only adds:\n"
            + SERVE_HELP)
        return 2
    os.execv(cli, [cli] + argv)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
