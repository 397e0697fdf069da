"""ctypes bindings of libkiln (include/kiln.h): finding the library, the prototypes,
status codes and KilnError.

The library is looked for, in this order:
  1. $KILN_LIBRARY: the path of libkiln.so, or a folder holding it. When set, it is the
     only place looked at (an explicit choice is never silently overridden).
  2. next to this package: kiln/libkiln.so (copy it there before `pip install`, and the
     wheel carries it);
  3. the install prefix: <prefix>/lib, <prefix>/lib64 and <prefix>/lib/<multiarch> for the
     prefix this package is installed under (pip install --prefix P puts the package in
     P/lib/pythonX.Y/site-packages: P) and for sys.prefix (a venv, /usr/local, ...), which is
     where `cmake --install build --prefix P` puts libkiln;
  4. the system's library search path (LD_LIBRARY_PATH, ldconfig).
It is loaded once, on first use: `import kiln` works without it.
"""

import ctypes
import ctypes.util
import enum
import operator
import os
import sys
import sysconfig
import threading
from pathlib import Path

KILN_MAX_RANK = 8
_LIB_NAMES = ("libkiln.so", "libkiln.so.0", "libkiln.dylib")


class Status(enum.IntEnum):
    """kiln_status codes (kiln.h)."""

    OK = 0
    INVALID_ARGUMENT = 1
    UNSUPPORTED = 2
    MODEL = 3
    FORMAT = 4
    OUT_OF_MEMORY = 5
    DEVICE = 6
    IO = 7
    INTERNAL = 8


class KilnError(RuntimeError):
    """A failure reported by the kiln C library (or found by the Python front end on its
    behalf). ``status`` is a :class:`kiln.Status`; ``str(error)`` is kiln's message."""

    def __init__(self, status, message):
        try:
            status = Status(status)
        except ValueError:
            pass
        self.status = status
        self.message = message
        super().__init__(message)

    @property
    def status_name(self):
        s = self.status
        return f"KILN_ERR_{s.name}" if isinstance(s, Status) and s else f"status {int(s)}"


class LibraryNotFoundError(ImportError):
    """libkiln could not be found or loaded."""


class IoInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_int),
        ("dims", ctypes.c_int64 * KILN_MAX_RANK),
        ("dim_names", ctypes.c_char_p * KILN_MAX_RANK),
    ]


_p = ctypes.c_void_p
_pp = ctypes.POINTER(ctypes.c_void_p)
_i64p = ctypes.POINTER(ctypes.c_int64)
_st = ctypes.c_int
# name: (restype, argtypes)
_PROTOTYPES = {
    "kiln_version_number": (ctypes.c_int, []),
    "kiln_version_string": (ctypes.c_char_p, []),
    "kiln_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "kiln_last_error": (ctypes.c_char_p, []),
    "kiln_dtype_name": (ctypes.c_char_p, [ctypes.c_int]),
    "kiln_dtype_size": (ctypes.c_size_t, [ctypes.c_int]),
    "kiln_free": (None, [_p]),
    "kiln_model_load_onnx": (_st, [ctypes.c_char_p, _pp]),
    "kiln_model_load_onnx_memory": (_st, [_p, ctypes.c_size_t, ctypes.c_char_p, _pp]),
    "kiln_model_free": (None, [_p]),
    "kiln_model_num_inputs": (ctypes.c_int, [_p]),
    "kiln_model_num_outputs": (ctypes.c_int, [_p]),
    "kiln_model_input_info": (_st, [_p, ctypes.c_int, ctypes.POINTER(IoInfo)]),
    "kiln_model_output_info": (_st, [_p, ctypes.c_int, ctypes.POINTER(IoInfo)]),
    "kiln_builder_create": (_st, [_pp]),
    "kiln_builder_free": (None, [_p]),
    "kiln_builder_set_device": (_st, [_p, ctypes.c_int, ctypes.c_int]),
    "kiln_device_parse": (_st, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int),
                                ctypes.POINTER(ctypes.c_int)]),
    "kiln_builder_set_precision": (_st, [_p, ctypes.c_int]),
    "kiln_builder_set_threads": (_st, [_p, ctypes.c_int]),
    "kiln_builder_set_fast_math": (_st, [_p, ctypes.c_int]),
    "kiln_builder_set_workspace": (_st, [_p, ctypes.c_size_t]),
    "kiln_builder_set_timing_cache": (_st, [_p, ctypes.c_char_p]),
    "kiln_builder_set_profile": (_st, [_p, ctypes.c_char_p, ctypes.c_int, _i64p, _i64p, _i64p]),
    "kiln_builder_set_metadata": (_st, [_p, ctypes.c_char_p, ctypes.c_char_p]),
    "kiln_build": (_st, [_p, _p, _pp]),
    "kiln_engine_load": (_st, [ctypes.c_char_p, _pp]),
    "kiln_engine_load_memory": (_st, [_p, ctypes.c_size_t, _pp]),
    "kiln_engine_serialize": (_st, [_p, _pp, ctypes.POINTER(ctypes.c_size_t)]),
    "kiln_engine_save": (_st, [_p, ctypes.c_char_p]),
    "kiln_engine_free": (None, [_p]),
    "kiln_engine_num_inputs": (ctypes.c_int, [_p]),
    "kiln_engine_num_outputs": (ctypes.c_int, [_p]),
    "kiln_engine_input_info": (_st, [_p, ctypes.c_int, ctypes.POINTER(IoInfo)]),
    "kiln_engine_output_info": (_st, [_p, ctypes.c_int, ctypes.POINTER(IoInfo)]),
    "kiln_engine_input_profile": (_st, [_p, ctypes.c_int, _i64p, _i64p, _i64p]),
    "kiln_engine_device": (ctypes.c_int, [_p]),
    "kiln_engine_device_index": (ctypes.c_int, [_p]),
    "kiln_device_available": (ctypes.c_int, [ctypes.c_int]),
    "kiln_engine_num_layers": (ctypes.c_int, [_p]),
    "kiln_engine_precision": (ctypes.c_int, [_p]),
    "kiln_engine_describe": (ctypes.c_char_p, [_p, ctypes.c_int]),
    "kiln_engine_metadata": (ctypes.c_char_p, [_p, ctypes.c_char_p]),
    "kiln_engine_num_metadata": (ctypes.c_int, [_p]),
    "kiln_engine_metadata_at": (
        _st, [_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p)]),
    "kiln_engine_set_metadata": (_st, [_p, ctypes.c_char_p, ctypes.c_char_p]),
    "kiln_context_create": (_st, [_p, _pp]),
    "kiln_context_free": (None, [_p]),
    "kiln_context_set_threads": (_st, [_p, ctypes.c_int]),
    "kiln_context_set_memory_limit": (_st, [_p, ctypes.c_size_t]),
    "kiln_context_set_input": (_st, [_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, _i64p, _p]),
    "kiln_context_set_output": (_st, [_p, ctypes.c_char_p, _p, ctypes.c_size_t]),
    "kiln_context_set_stream": (_st, [_p, _p]),
    "kiln_context_run": (_st, [_p]),
    "kiln_context_get_output": (
        _st,
        [_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int), _i64p, _pp],
    ),
    "kiln_context_get_output_device": (_st, [_p, ctypes.c_char_p, _pp]),
}

_lock = threading.Lock()
_state = {"lib": None, "path": None}


def _multiarch():
    return sysconfig.get_config_var("MULTIARCH") or ""


def _prefixes():
    """Install prefixes: the one this package sits under, then sys.prefix."""
    out = []
    here = Path(__file__).resolve().parent  # .../kiln
    site = here.parent  # .../site-packages (or the source tree's python/)
    if site.name in ("site-packages", "dist-packages"):
        pyver = site.parent  # .../lib/pythonX.Y
        if pyver.name.startswith("python") and pyver.parent.name in ("lib", "lib64"):
            out.append(pyver.parent.parent)
    for p in (sys.prefix, sys.base_prefix):
        if Path(p) not in out:
            out.append(Path(p))
    return out


def candidates():
    """Where libkiln is looked for, in order (see the module's docstring)."""
    env = os.environ.get("KILN_LIBRARY")
    if env:
        p = Path(env)
        if p.is_dir():
            return [p / n for n in _LIB_NAMES]
        return [p]
    here = Path(__file__).resolve().parent
    out = [here / n for n in _LIB_NAMES]
    ma = _multiarch()
    for prefix in _prefixes():
        libdirs = [prefix / "lib", prefix / "lib64"] + ([prefix / "lib" / ma] if ma else [])
        for d in libdirs:
            out += [d / n for n in _LIB_NAMES]
    return out


def _load():
    tried = []
    for c in candidates():
        if c.is_file():
            try:
                return ctypes.CDLL(str(c)), str(c)
            except OSError as e:
                tried.append(f"{c} ({e})")
        else:
            tried.append(str(c))
    if os.environ.get("KILN_LIBRARY"):
        raise LibraryNotFoundError(
            f"kiln: cannot load libkiln from KILN_LIBRARY={os.environ['KILN_LIBRARY']}: "
            + "; ".join(tried)
        )
    for name in ("libkiln.so.0", "libkiln.so", ctypes.util.find_library("kiln")):
        if not name:
            continue
        try:
            return ctypes.CDLL(name), name
        except OSError:
            tried.append(f"{name} (system search path)")
    raise LibraryNotFoundError(
        "kiln: cannot find libkiln. Build it (cmake --build build) and set "
        "KILN_LIBRARY=/path/to/libkiln.so, copy libkiln.so into the kiln package folder, or "
        "install kiln with cmake --install. Looked in: " + ", ".join(tried)
    )


def lib():
    """The loaded library (loads it on first call)."""
    if _state["lib"] is not None:
        return _state["lib"]
    with _lock:
        if _state["lib"] is None:
            handle, path = _load()
            missing = []
            for name, (res, args) in _PROTOTYPES.items():
                try:
                    f = getattr(handle, name)
                except AttributeError:
                    missing.append(name)
                    continue
                f.restype = res
                f.argtypes = args
            if missing:
                raise LibraryNotFoundError(
                    f"kiln: {path} is not a compatible libkiln (missing {', '.join(missing)})"
                )
            major = handle.kiln_version_number() // 10000
            if major != 0:
                raise LibraryNotFoundError(
                    f"kiln: {path} is libkiln {handle.kiln_version_string().decode()}; "
                    "this Python package needs libkiln 0.x"
                )
            _state["path"] = path
            _state["lib"] = handle
    return _state["lib"]


def library_path():
    """The path (or name) libkiln was loaded from."""
    lib()
    return _state["path"]


def last_error():
    return (lib().kiln_last_error() or b"").decode("utf-8", "replace")


def check(status):
    """Raises KilnError with kiln's message when status is not KILN_OK."""
    if status != 0:
        msg = last_error() or f"kiln call failed with status {status}"
        raise KilnError(status, msg)


def clipped(text, limit=200):
    """repr(text) cut to about `limit` characters for a message (engine bytes taken for a
    path made a message of four times their size)."""
    r = repr(text)
    return r if len(r) <= limit else f"{r[:limit]}... ({len(text)} characters)"


def c_path(path):
    """A file path as C wants it (os.fsencode). A path holding a NUL character is refused:
    C would read the path only up to it, another file (Python's open() refuses it too)."""
    b = os.fsencode(path)
    if b"\0" in b:
        raise ValueError(f"path {clipped(os.fsdecode(b))} holds a NUL character")
    return b


def py_name(b):
    """A name or text from the C library (bytes) as a str. Bytes that are not UTF-8 (an
    engine or model may hold any) become lone surrogates (surrogateescape), so that
    c_text gives the same bytes back: the name still finds its input or output."""
    return b.decode("utf-8", "surrogateescape")


def c_text(s, what):
    """A str as a UTF-8 C string (lone surrogates from py_name back to their bytes); one
    holding a NUL character is refused (C would keep only what comes before it)."""
    b = s.encode("utf-8", "surrogateescape")
    if b"\0" in b:
        raise ValueError(f"{what} {clipped(s)} holds a NUL character")
    return b


def c_int(value, lo, hi, what):
    """value as an int, which must lie in lo..hi: ctypes would wrap a larger one around
    silently (2**64 + 5 bytes passed as size_t is 5). A float must be a whole number (1e9
    is taken; 2.5 is refused, not cut to 2)."""
    if isinstance(value, float) and value.is_integer():
        v = int(value)
    else:
        try:
            v = operator.index(value)
        except TypeError:
            raise TypeError(f"{what} must be an int, got {value!r}") from None
    if not lo <= v <= hi:
        raise ValueError(f"{what} must be in {lo}..{hi}, got {v}")
    return v


def dtype_name(code):
    return lib().kiln_dtype_name(int(code)).decode()
