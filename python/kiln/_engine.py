"""A deserialized kiln engine (kiln_engine) and its execution contexts, over ctypes.

`Engine` owns one kiln_engine and a pool of kiln_contexts (a context is used by one
thread at a time; the pool hands one to each concurrent caller). Everything is freed
when the Engine is garbage collected or closed (contexts first, then the engine).
"""

import ctypes
import json
import os
import threading
import weakref
from pathlib import Path

from . import _lib
from ._lib import KILN_MAX_RANK, KilnError, Status, check, lib

DEVICE_CPU, DEVICE_CUDA = 0, 1
PRECISIONS = {0: "fp32", 1: "tf32", 2: "fp16", 3: "bf16"}


class TensorInfo:
    """Name, dtype (kiln dtype code) and shape of an engine input or output. Dynamic
    dimensions are None in `shape`; `dim_names` holds their symbolic names."""

    __slots__ = ("name", "dtype", "shape", "dim_names", "min_shape", "opt_shape", "max_shape")

    def __init__(self, info):
        self.name = _lib.py_name(info.name)
        self.dtype = info.dtype
        r = info.rank
        self.shape = tuple(int(d) if d >= 0 else None for d in info.dims[:r]) if r >= 0 else None
        self.dim_names = (
            tuple((_lib.py_name(n) if n else None) for n in info.dim_names[:r]) if r >= 0 else None
        )
        self.min_shape = self.opt_shape = self.max_shape = None

    @property
    def rank(self):
        return None if self.shape is None else len(self.shape)

    @property
    def dtype_name(self):
        return _lib.dtype_name(self.dtype)

    def shape_str(self):
        if self.shape is None:
            return "[?]"
        parts = []
        for d, n in zip(self.shape, self.dim_names):
            parts.append(str(d) if d is not None else (n or "?"))
        return "[" + ", ".join(parts) + "]"

    def __repr__(self):
        return f"{self.name}: {self.dtype_name}{self.shape_str()}"


def _free_all(handle, contexts):
    L = lib()
    while contexts:
        L.kiln_context_free(contexts.pop())
    if handle:
        L.kiln_engine_free(handle)


class Engine:
    """One kiln_engine. Construct with Engine.from_bytes / Engine.from_file."""

    def __init__(self, handle, threads=None):
        self._h = ctypes.c_void_p(handle)
        self._all_contexts = []  # every context created (freed with the engine)
        self._free_contexts = []  # contexts not in use
        self._lock = threading.Lock()
        self._threads = threads
        self._memory_limit = 0  # bytes of activation memory per context; 0 = none
        self._ctx_limit = {}  # context -> the memory limit it was given
        self._busy = 0  # contexts acquired and not yet released (runs in progress)
        self._closed = False
        self._finalizer = weakref.finalize(self, _free_all, handle, self._all_contexts)
        L = lib()
        info = _lib.IoInfo()
        self.inputs = []
        for i in range(L.kiln_engine_num_inputs(self._h)):
            check(L.kiln_engine_input_info(self._h, i, ctypes.byref(info)))
            t = TensorInfo(info)
            r = info.rank
            mn, op, mx = ((ctypes.c_int64 * KILN_MAX_RANK)() for _ in range(3))
            check(L.kiln_engine_input_profile(self._h, i, mn, op, mx))
            t.min_shape, t.opt_shape, t.max_shape = (tuple(a[:r]) for a in (mn, op, mx))
            self.inputs.append(t)
        self.outputs = []
        for i in range(L.kiln_engine_num_outputs(self._h)):
            check(L.kiln_engine_output_info(self._h, i, ctypes.byref(info)))
            self.outputs.append(TensorInfo(info))
        self.device_type = L.kiln_engine_device(self._h)
        self.precision = PRECISIONS.get(L.kiln_engine_precision(self._h), "?")
        self.num_layers = L.kiln_engine_num_layers(self._h)
        self.device_index = L.kiln_engine_device_index(self._h)

    # ---- construction --------------------------------------------------------------
    @classmethod
    def from_bytes(cls, data, threads=None):
        data = bytes(data) if not isinstance(data, bytes) else data
        out = ctypes.c_void_p()
        buf = ctypes.c_char_p(data)
        check(lib().kiln_engine_load_memory(buf, len(data), ctypes.byref(out)))
        return cls(out.value, threads)

    @classmethod
    def from_file(cls, path, threads=None):
        # (not Path(path): Path("") is ".", and loading "" said ". is a directory")
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise TypeError(f"engine path must be a str, bytes or a pathlib.Path; got "
                            f"{type(path).__name__}")
        if not os.fspath(path):
            raise ValueError("engine path is empty")
        out = ctypes.c_void_p()
        check(lib().kiln_engine_load(_lib.c_path(path), ctypes.byref(out)))
        return cls(out.value, threads)

    # ---- engine-level --------------------------------------------------------------
    @property
    def handle(self):
        if self._closed or not self._finalizer.alive:
            raise ValueError("the engine was closed")
        return self._h

    def serialize(self):
        data = ctypes.c_void_p()
        size = ctypes.c_size_t()
        L = lib()
        check(L.kiln_engine_serialize(self.handle, ctypes.byref(data), ctypes.byref(size)))
        try:
            return ctypes.string_at(data.value, size.value)
        finally:
            L.kiln_free(data)

    def save(self, path):
        check(lib().kiln_engine_save(self.handle, _lib.c_path(Path(path))))

    @property
    def metadata(self):
        """The engine's user metadata (kiln_engine_metadata): a dict of str -> str, in
        key order."""
        L = lib()
        out = {}
        key, value = ctypes.c_char_p(), ctypes.c_char_p()
        for i in range(L.kiln_engine_num_metadata(self.handle)):
            check(L.kiln_engine_metadata_at(self.handle, i, ctypes.byref(key), ctypes.byref(value)))
            out[_lib.py_name(key.value)] = _lib.py_name(value.value)
        return out

    def get_metadata(self, key):
        """The value of metadata `key`, or None."""
        v = lib().kiln_engine_metadata(self.handle, _lib.c_text(key, "metadata key"))
        return None if v is None else _lib.py_name(v)

    def set_metadata(self, key, value):
        """Sets metadata `key` to `value` (a str; None removes it). serialize() and save()
        then carry it."""
        check(lib().kiln_engine_set_metadata(
            self.handle, _lib.c_text(key, "metadata key"),
            None if value is None else _lib.c_text(value, f"metadata '{key}' value")))

    def describe(self, as_json=False):
        s = lib().kiln_engine_describe(self.handle, 1 if as_json else 0)
        if s is None:
            raise KilnError(Status.INTERNAL, _lib.last_error() or "kiln_engine_describe failed")
        s = s.decode("utf-8", "replace")
        return json.loads(s) if as_json else s

    def close(self):
        """Frees the engine and its contexts. Runs in progress on other threads finish
        first: the engine is freed when the last of them ends (it was freed under them: a
        use after free in C, SIGSEGV). Later calls raise ValueError."""
        with self._lock:
            self._closed = True
            idle = self._busy == 0
        if idle:
            self._finalizer()

    # ---- contexts ------------------------------------------------------------------
    # A context is used by one thread at a time (kiln.h): each run acquires one (a free
    # one, or a new one) and releases it after. Settings for all contexts (the memory
    # limit) reach a context while it is free: C refuses calls on a context that another
    # thread is running.
    def _apply_limit(self, ctx):
        if self._ctx_limit.get(ctx, 0) != self._memory_limit:
            check(lib().kiln_context_set_memory_limit(ctx, self._memory_limit))
            self._ctx_limit[ctx] = self._memory_limit

    def acquire_context(self):
        with self._lock:
            if self._closed or not self._finalizer.alive:
                raise ValueError("the engine was closed")
            self._busy += 1
            if self._free_contexts:
                ctx = self._free_contexts.pop()
                try:
                    self._apply_limit(ctx)
                except BaseException:
                    self._free_contexts.append(ctx)
                    self._busy -= 1
                    raise
                return ctx
        try:
            return self._new_context()
        except BaseException:
            self._done_with(None)
            raise

    def _new_context(self):
        L = lib()
        out = ctypes.c_void_p()
        check(L.kiln_context_create(self._h, ctypes.byref(out)))
        st = 0
        if self._threads is not None:
            try:
                n = _lib.c_int(self._threads, 0, 1024, "threads")
            except (TypeError, ValueError):
                L.kiln_context_free(out)
                raise
            st = L.kiln_context_set_threads(out, n)
        limit = self._memory_limit
        if st == 0 and limit:
            st = L.kiln_context_set_memory_limit(out, limit)
        if st != 0:
            msg = _lib.last_error()
            L.kiln_context_free(out)
            raise KilnError(st, msg)
        with self._lock:
            self._all_contexts.append(out.value)
            self._ctx_limit[out.value] = limit
        return out.value

    def set_memory_limit(self, nbytes):
        """Limits the activation memory (intermediate tensors and scratch, not weights) of
        each context of this engine to `nbytes` bytes; 0 or None removes the limit. A run
        that would need more raises KilnError (Status.OUT_OF_MEMORY) before allocating.
        Contexts running on other threads meanwhile get it when their run ends."""
        n = _lib.c_int(nbytes or 0, 0, 2**64 - 1, "memory limit (bytes)")
        with self._lock:
            if self._closed or not self._finalizer.alive:
                raise ValueError("the engine was closed")
            self._memory_limit = n
            for ctx in self._free_contexts:
                self._apply_limit(ctx)

    def _done_with(self, ctx):
        with self._lock:
            self._busy -= 1
            if ctx is not None:
                self._free_contexts.append(ctx)
            last = self._closed and self._busy == 0
        if last:
            self._finalizer()

    def release_context(self, ctx):
        self._done_with(ctx)
