"""The package itself: `pip install ./python` offline without build isolation, and
finding libkiln through $KILN_LIBRARY, next to the package, or the install prefix."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kiln

PYTHON_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def libkiln():
    return Path(kiln.library_path()).resolve()


def _source_copy(dest):
    """python/ copied without build leftovers (pip builds in the source folder)."""
    shutil.copytree(PYTHON_DIR, dest, ignore=shutil.ignore_patterns(
        "__pycache__", "build", "*.egg-info", "tests", "libkiln.so*", ".pytest_cache"))
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory, libkiln):
    """One wheel, built offline without build isolation from a copy of python/ with
    libkiln.so copied into the package."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = _source_copy(tmp / "src")
    shutil.copyfile(libkiln, src / "kiln" / "libkiln.so")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-index",
                        "--no-build-isolation", "--no-deps", "-w", str(tmp / "dist"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = (tmp / "dist").glob("kiln-0.1.0-*.whl")
    return whl


def _pip_install(src, *where):
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           "--no-index", "--no-build-isolation", "--no-deps", "--no-compile", *where, str(src)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _where_is_libkiln(site, cwd, kiln_library_values=(None,)):
    """In a fresh interpreter importing kiln from `site`: where libkiln is found with
    $KILN_LIBRARY unset (None) or set to each given value."""
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    code = (
        "import os, sys, kiln\n"
        "from kiln import _lib\n"
        "print(kiln.__file__)\n"
        "for v in sys.argv[1:]:\n"
        "    os.environ.pop('KILN_LIBRARY', None)\n"
        "    if v != '-': os.environ['KILN_LIBRARY'] = v\n"
        "    print(_lib._load()[1])\n"
        "print(kiln.library_version())\n"
    )
    args = ["-" if v is None else str(v) for v in kiln_library_values]
    r = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=cwd,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert Path(lines[0]).resolve().is_relative_to(Path(site).resolve())  # the installed copy
    assert lines[len(args) + 1] == "0.1.0"
    return [Path(x) for x in lines[1:len(args) + 1]]


def test_pip_install_source_folder_offline(tmp_path):
    """`pip install ./python` itself (no wheel in between), offline."""
    src = _source_copy(tmp_path / "src")
    _pip_install(src, "--target", str(tmp_path / "target"))
    assert (tmp_path / "target" / "kiln" / "_module.py").is_file()


def test_library_next_to_package_or_kiln_library(tmp_path, wheel, libkiln):
    """Next to the package when $KILN_LIBRARY is unset; $KILN_LIBRARY (a file or a
    folder) wins over it."""
    _pip_install(wheel, "--target", str(tmp_path / "target"))
    installed = tmp_path / "target" / "kiln" / "libkiln.so"
    assert installed.is_file()
    folder = tmp_path / "libs"
    folder.mkdir()
    shutil.copyfile(libkiln, folder / "libkiln.so")
    assert _where_is_libkiln(tmp_path / "target", tmp_path, [None, folder, libkiln]) == [
        installed, folder / "libkiln.so", libkiln]


def test_library_in_install_prefix(tmp_path, wheel, libkiln):
    prefix = tmp_path / "prefix"
    _pip_install(wheel, "--prefix", str(prefix))
    init = next(prefix.rglob("kiln/__init__.py"))
    (init.parent / "libkiln.so").unlink()  # only the prefix's copy is left
    site = init.parent.parent  # <prefix>/lib/pythonX.Y/site-packages
    root = site.parent.parent.parent  # the prefix pip used (Debian may add local/)
    (root / "lib").mkdir(exist_ok=True)
    shutil.copyfile(libkiln, root / "lib" / "libkiln.so.0")  # as `cmake --install` puts it
    assert _where_is_libkiln(site, tmp_path) == [root / "lib" / "libkiln.so.0"]
