"""What LitServe and Ray Serve share when serving a kiln engine: the engine's description
(EngineSpec), request decoding and validation, response encoding, and a Runner that owns
one execution context and runs batches of requests through it.

Requests (POST body):
  application/json      {"inputs": {NAME: {"data": NESTED_LISTS, "dtype": "float32"}, ...}}
                        ("dtype" may be left out: the engine's dtype is used; a value may
                        also be the nested lists alone: {"inputs": {"x": [[1, 2]]}})
  application/x-npy     one .npy array: the engine's only input
  application/x-npz     an .npz archive (numpy.savez), one array per input name
Responses:
  JSON                  {"outputs": {NAME: {"data": ..., "dtype": "float32", "shape": [...]}}}
  .npy / .npz           the outputs (.npy when there is one), for binary requests or when
                        the Accept header asks for application/x-npy or application/x-npz
A request is refused with a 4xx and a message naming the problem (RequestError) before it
reaches an engine: malformed JSON or .npy, an unknown or missing input, a wrong dtype, a
shape outside the engine's profile, inputs that disagree on a shared dimension, NaN or
infinity in a floating-point input, an unsupported Content-Type, a body over the limit.

Batching: requests whose inputs share dimension 0 as the engine's dynamic batch dimension
(the same symbolic name on every input and output, e.g. "batch") are concatenated along it,
in chunks of at most the profile's maximum, run once, and the outputs split back by rows.
Engines without such a batch dimension run one request at a time.
"""

import ctypes
import io
import json
import math
import os
import tempfile
import tokenize
import types
import zipfile
import zlib
from pathlib import Path

import numpy as np

from .._engine import DEVICE_CUDA, Engine
from .._lib import KILN_MAX_RANK, KilnError, Status, c_path, c_text, check, lib

try:
    from lzma import LZMAError
except ImportError:  # a Python built without lzma: zipfile cannot read such members either
    LZMAError = ValueError

# what reading a malformed .npy body or .npz archive raises (a 400, not a 500): numpy's
# and zipfile's own errors, an .npy header numpy's tokenizer cannot end (TokenError), a
# member's corrupt deflate / LZMA stream (zlib.error, LZMAError), an encrypted member
# (RuntimeError), a compression method zipfile lacks (NotImplementedError)
_BODY_ERRORS = (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, LZMAError,
                RuntimeError, NotImplementedError, tokenize.TokenError, SyntaxError)

# kiln dtype codes (ONNX numbering) that numpy has a dtype for
KILN_TO_NUMPY = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
                 7: "int64", 9: "bool", 10: "float16", 11: "float64", 12: "uint32",
                 13: "uint64"}
JSON_TYPE = "application/json"
NPY_TYPE = "application/x-npy"
NPZ_TYPE = "application/x-npz"
DEFAULT_MAX_BODY_BYTES = 64 << 20


def check_option(name, value, kind, lo, hi=None, *, above=False, none_ok=False):
    """`value` of the option `name` as `kind` (int or float), or ValueError naming it: a
    finite number in lo..hi (above: > lo), an int kind taking whole numbers only. bools and
    strings are refused. For the Python APIs what the CLI's argument types check
    (serving.cli): build_app(num_replicas=2.7) ran 2 replicas, timeout_ms=nan reached Ray
    Serve's batcher, request_timeout_s=-1 answered every request 504, max_body_bytes=-1
    413, threads=-3 failed in every replica after the deploy."""
    if value is None and none_ok:
        return None
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if ok:
        v = float(value)
        ok = v == v and abs(v) != float("inf") and (kind is float or v == int(v))
    if ok:
        v = kind(value)
        ok = v > lo if above else v >= lo
        ok = ok and (hi is None or v <= hi)
    if not ok:
        rng = f"> {lo}" if above else f">= {lo}" if hi is None else f"in {lo}..{hi}"
        what = "an integer" if kind is int else "a finite number"
        extra = " (or None)" if none_ok else ""
        raise ValueError(f"{name} must be {what} {rng}{extra}, got {value!r}")
    return v


class RequestError(Exception):
    """A request the server refuses: an HTTP status (4xx) and a message naming the
    problem. The message quotes names from the request, made encodable as UTF-8 (a lone
    surrogate from a JSON escape written as \\udXXX) so that the error response can be
    sent."""

    def __init__(self, status, message):
        message = message.encode("utf-8", "backslashreplace").decode("utf-8")
        super().__init__(message)
        self.status = status
        self.message = message


def _bad(message):
    return RequestError(400, message)


def _object_once(pairs):
    """A JSON object as a dict, each key once: json.loads keeps the last of a repeated
    key, so {"x": A, "x": B} ran B where whatever read the body before the server (a
    proxy, a log, a client's own check) may have seen A."""
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"key {key!r} appears more than once in an object")
    return doc


async def read_body(request, limit, hint=""):
    """The body of a Starlette request, read as it streams in: RequestError 413 as soon as
    Content-Length says, or the bytes read show, that it is over `limit` bytes (a chunked
    body has no Content-Length: reading it whole first would hold any size in memory).
    hint: what sets the limit, for the message (" (--max-body-mb)")."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise RequestError(413, f"request body of {int(length)} bytes is over the limit of "
                                f"{limit} bytes{hint}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"request body is over the limit of {limit} bytes{hint}")
        chunks.append(chunk)
    return b"".join(chunks)


def _holds_bool(data):
    """Whether nested lists data hold a JSON true/false (iteratively: no recursion limit)."""
    stack = [data]
    while stack:
        v = stack.pop()
        if v is True or v is False:
            return True
        if isinstance(v, list):
            stack.extend(v)
    return False


def _shape_text(shape):
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def _profile_text(info):
    parts = []
    for a, b in zip(info["min"], info["max"]):
        parts.append(str(a) if a == b else f"{a}..{b}")
    return "[" + ", ".join(parts) + "]"


def _media_type(content_type):
    return (content_type or "").split(";", 1)[0].strip().lower()


class EngineSpec:
    """The inputs, outputs, profile and batching of an engine, as plain data: it is what
    the HTTP front ends validate requests against (no engine needed there), and what
    /metadata shows. Built from a kiln._engine.Engine."""

    def __init__(self, engine):
        self.inputs, self.outputs = [], []
        for kind, infos in (("input", engine.inputs), ("output", engine.outputs)):
            for t in infos:
                if t.dtype not in KILN_TO_NUMPY:
                    raise ValueError(
                        f"engine {kind} '{t.name}' has dtype {t.dtype_name}, which numpy has no "
                        f"dtype for: kiln's servers cannot take or return it")
                d = {"name": t.name, "dtype": KILN_TO_NUMPY[t.dtype],
                     "shape": list(t.shape) if t.shape is not None else None,
                     "dim_names": list(t.dim_names) if t.dim_names is not None else None}
                if kind == "input":
                    d.update(min=list(t.min_shape), opt=list(t.opt_shape), max=list(t.max_shape))
                    self.inputs.append(d)
                else:
                    self.outputs.append(d)
        self.device = (f"cuda:{engine.device_index}" if engine.device_type == DEVICE_CUDA
                       else "cpu")
        self.precision = engine.precision
        self.input_names = [i["name"] for i in self.inputs]
        # the most values a JSON body can hold for the engine: every input at its profile's
        # largest shape, with fewer separators between nested lists than values (_decode_json)
        self.max_json_values = sum(math.prod(max(int(d), 1) for d in i["max"]) for i in self.inputs)
        self.batch_dim = self._find_batch_dim()
        if self.batch_dim is not None:
            self.min_rows = max(i["min"][0] for i in self.inputs)
            self.max_rows = min(i["max"][0] for i in self.inputs)
        else:
            self.min_rows = self.max_rows = None

    def _find_batch_dim(self):
        """The symbolic name of dimension 0 when it is a dynamic batch dimension shared
        by every input and output, else None."""
        names = set()
        for i in self.inputs:
            if not i["min"] or i["min"][0] == i["max"][0] or not i["dim_names"]:
                return None
            names.add(i["dim_names"][0])
        for o in self.outputs:
            if not o["dim_names"] or o["shape"] is None or o["shape"][0] is not None:
                return None
            names.add(o["dim_names"][0])
        if len(names) != 1 or None in names:
            return None
        return names.pop()

    @classmethod
    def from_file(cls, path):
        """The description of the engine in a .kiln file (loaded, read, closed)."""
        eng = Engine.from_file(path)
        try:
            return cls(eng)
        finally:
            eng.close()

    @property
    def batchable(self):
        return self.batch_dim is not None

    def metadata(self):
        """What /metadata answers: inputs (with their profile), outputs, batching."""
        return {
            "inputs": [{"name": i["name"], "dtype": i["dtype"], "shape": i["shape"],
                        "dim_names": i["dim_names"],
                        "profile": {"min": i["min"], "opt": i["opt"], "max": i["max"]}}
                       for i in self.inputs],
            "outputs": [dict(o) for o in self.outputs],
            "device": self.device, "precision": self.precision,
            "batch": ({"dim": self.batch_dim, "min_rows": self.min_rows,
                       "max_rows": self.max_rows} if self.batchable else None),
        }

    # ---- requests ------------------------------------------------------------------
    def decode(self, body, content_type):
        """Request body -> ({name: ndarray}, "json" | "npy" | "npz"), validated (see
        validate). Raises RequestError."""
        media = _media_type(content_type)
        if media in ("", JSON_TYPE) or media.endswith("+json"):
            return self.validate(self._decode_json(body)), "json"
        if media in (NPY_TYPE, "application/octet-stream"):
            if len(self.inputs) != 1:
                raise _bad(f"a .npy body holds one array, but the engine has "
                           f"{len(self.inputs)} inputs ({', '.join(self.input_names)}): send "
                           f"{NPZ_TYPE} (numpy.savez) or JSON")
            arr = self._load_npy(body)
            return self.validate({self.input_names[0]: arr}), "npy"
        if media == NPZ_TYPE:
            return self.validate(self._load_npz(body)), "npz"
        raise RequestError(415, f"unsupported Content-Type '{content_type}': send {JSON_TYPE}, "
                                f"{NPY_TYPE} or {NPZ_TYPE}")

    def _decode_json(self, body):
        # Python's json holds a number as an object of 24 to 32 bytes (and numpy the array
        # after it): a body many times larger than any the engine takes (a 32 MB list of
        # numbers: 420 MB) is refused before it is parsed, from its commas
        cap = 2 * self.max_json_values + 16 * len(self.inputs) + 64
        commas = body.count(b"," if isinstance(body, (bytes, bytearray)) else ",")
        if commas > cap:
            raise _bad(f"the JSON body holds over {commas} values, more than the engine's inputs "
                       f"take at their largest shapes ({self.max_json_values} values: "
                       + ", ".join(f"'{i['name']}' {_shape_text(i['max'])}" for i in self.inputs)
                       + ")")
        try:
            doc = json.loads(body, object_pairs_hook=_object_once)
        except (ValueError, UnicodeDecodeError) as e:
            raise _bad(f"malformed JSON body: {e}") from None
        except RecursionError:  # [[[[...]]]] past Python's recursion limit
            raise _bad("malformed JSON body: nested too deeply") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), dict):
            raise _bad('the JSON body must be an object {"inputs": {NAME: {"data": [...], '
                       '"dtype": "float32"}}}; the engine\'s inputs: '
                       + ", ".join(self.input_names))
        # (JSON's true/false in a number input: numpy reads them as 1 and 0 without a word;
        # looked for only where the body holds the words)
        words = (b"true", b"false") if isinstance(body, (bytes, bytearray)) else ("true", "false")
        maybe_bools = words[0] in body or words[1] in body
        feeds = {}
        for name, value in doc["inputs"].items():
            if isinstance(value, dict):
                if "data" not in value:
                    raise _bad(f"input '{name}' has no \"data\"")
                data, dtype = value["data"], value.get("dtype")
            else:
                data, dtype = value, None
            feeds[name] = self._array_from_json(name, data, dtype, maybe_bools)
        return feeds

    def _array_from_json(self, name, data, dtype, maybe_bools=False):
        info = self._input(name)
        want = np.dtype(info["dtype"])
        if maybe_bools and want.kind != "b" and _holds_bool(data):
            raise _bad(f"input '{name}' holds true/false, but the engine expects {want.name} "
                       f"numbers")
        if dtype is not None:
            try:
                got = np.dtype(str(dtype))
            except (TypeError, ValueError, SyntaxError):  # "999999999999999999999f4": ValueError
                raise _bad(f"input '{name}': unknown dtype '{dtype}'") from None
            if got.byteorder in "<>" and got.newbyteorder("=") == want:
                got = want  # ">f4": JSON numbers have no byte order
            if got != want:
                raise _bad(f"input '{name}' has dtype {got.name}, but the engine expects "
                           f"{want.name}")
        try:
            arr = np.asarray(data)
        except ValueError as e:
            raise _bad(f"input '{name}': the nested lists are ragged ({e})") from None
        if arr.dtype.kind not in "biuf":
            raise _bad(f"input '{name}' holds {arr.dtype.name} values, not numbers "
                       f"(ragged nested lists, strings or nulls)")
        if arr.dtype.kind == "f" and want.kind in "biu":
            if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
                raise _bad(f"input '{name}' holds non-integer numbers, but the engine expects "
                           f"{want.name}")
        if want.kind in "iu" and arr.size:
            lo, hi = int(np.iinfo(want).min), int(np.iinfo(want).max)
            # compared exactly: numpy compares uint64 with int64 (and 2**63 - 1 with a float)
            # as float64, which let 2**63 through, to become -2**63
            if arr.dtype.kind == "f":
                out = arr.min() < float(lo) or arr.max() >= float(hi) + 1.0
            else:
                out = int(arr.min()) < lo or int(arr.max()) > hi
            if out:
                raise _bad(f"input '{name}' holds values outside {want.name}'s range "
                           f"[{lo}, {hi}]")
        if want.kind == "b" and arr.size and not np.all((arr == 0) | (arr == 1)):
            raise _bad(f"input '{name}' holds values other than 0/1 (true/false), but the "
                       f"engine expects bool")
        return arr.astype(want, copy=False)

    def _read_npy(self, name, open_stream, what):
        """The array of input `name` from an .npy stream (open_stream() opens it at its
        start). Its header is read first, and shapes the engine cannot take (and object
        dtypes) are refused before any data is read or memory allocated: a few bytes may
        claim terabytes, and an .npz member of a 64 MB body may inflate to 64 GB."""
        try:
            with open_stream() as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, _fortran, dtype = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, _fortran, dtype = np.lib.format.read_array_header_2_0(f)
                else:
                    raise ValueError(f".npy format version {version[0]}.{version[1]} is not read")
            if dtype.hasobject:
                raise ValueError("object arrays are not accepted")
            self._check_shape(self._input(name), shape)
            # the dtype too: a shape inside the profile of a dtype of gigabytes per item
            # ('|V1000000000') would make numpy allocate or inflate all of it
            want = self._dtype(name)
            got = dtype.newbyteorder("=") if dtype.byteorder in "<>" else dtype
            if got != want:
                raise _bad(f"input '{name}' has dtype {dtype.name}, but the engine expects "
                           f"{want.name}")
            with open_stream() as f:
                arr = np.lib.format.read_array(f, allow_pickle=False)
        except _BODY_ERRORS as e:
            raise _bad(f"malformed {what}: {e}") from None
        if arr.dtype.byteorder in "<>" and arr.dtype.newbyteorder("=") == self._dtype(name):
            arr = arr.astype(arr.dtype.newbyteorder("="))  # big-endian data: the same values
        return arr

    def _load_npy(self, body):
        return self._read_npy(self.input_names[0], lambda: io.BytesIO(body), ".npy body")

    def _load_npz(self, body):
        try:
            z = zipfile.ZipFile(io.BytesIO(body))
        except _BODY_ERRORS as e:
            raise _bad(f"malformed .npz body: {e}") from None
        with z:
            members = {}
            for m in z.namelist():  # names first: nothing is read for an unknown one
                key = m[:-4] if m.endswith(".npy") else m
                self._input(key)
                if key in members:
                    raise _bad(f"malformed .npz body: input '{key}' is in it twice")
                members[key] = m
            return {k: self._read_npy(k, lambda m=m: z.open(m), f".npz member '{m}'")
                    for k, m in members.items()}

    def _input(self, name):
        for i in self.inputs:
            if i["name"] == name:
                return i
        raise _bad(f"unknown input '{name}' (the engine's inputs: {', '.join(self.input_names)})")

    def _dtype(self, name):
        return np.dtype(self._input(name)["dtype"])

    def _check_shape(self, info, shape):
        """Raises RequestError (400) when `shape` is not of the input's rank or lies
        outside its profile."""
        name = info["name"]
        if len(shape) != len(info["min"]):
            raise _bad(f"input '{name}' has shape {_shape_text(shape)}, but the engine "
                       f"expects rank {len(info['min'])} {_profile_text(info)}")
        for d, (s, a, b) in enumerate(zip(shape, info["min"], info["max"])):
            if not a <= s <= b:
                rule = f"must be {a}" if a == b else f"must be in {a}..{b}"
                raise _bad(f"input '{name}' has shape {_shape_text(shape)}, outside the "
                           f"engine's profile {_profile_text(info)} (dimension {d} {rule})")

    def validate(self, feeds):
        """Checks names, dtypes, shapes against the profile, shared symbolic dimensions
        and non-finite values; returns {name: C-contiguous ndarray} in engine input order.
        Raises RequestError (400) naming the first problem."""
        for name in feeds:
            self._input(name)
        out = {}
        symbols = {}
        for info in self.inputs:
            name = info["name"]
            if name not in feeds:
                raise _bad(f"missing input '{name}' (the engine's inputs: "
                           f"{', '.join(self.input_names)})")
            arr = feeds[name]
            want = np.dtype(info["dtype"])
            if arr.dtype != want:
                raise _bad(f"input '{name}' has dtype {arr.dtype.name}, but the engine expects "
                           f"{want.name}")
            self._check_shape(info, arr.shape)
            for d, s in enumerate(arr.shape):
                sym = info["dim_names"][d] if info["dim_names"] else None
                if sym and info["shape"][d] is None:
                    prev = symbols.setdefault(sym, (name, s))
                    if prev[1] != s:
                        raise _bad(f"inputs '{prev[0]}' and '{name}' disagree on dimension "
                                   f"'{sym}': {prev[1]} and {s}")
            if want.kind == "b" and arr.size:
                # numpy takes any byte as a bool from .npy data; kiln refuses bytes other
                # than 0/1 at run time, which would fail every request batched with this one
                raw = np.ascontiguousarray(arr).view(np.uint8)
                if (raw > 1).any():
                    idx = tuple(int(i) for i in np.argwhere(raw > 1)[0])
                    raise _bad(f"input '{name}' holds byte {int(raw[idx])} at index {list(idx)}: a "
                               f"bool holds 0 (false) or 1 (true) only")
            if want.kind == "f" and arr.size:
                bad = ~np.isfinite(arr)
                if bad.any():
                    idx = tuple(int(i) for i in np.argwhere(bad)[0])
                    what = "NaN" if np.isnan(arr[idx]) else "infinity"
                    raise _bad(f"input '{name}' contains {what} at index {list(idx)}: "
                               f"only finite values are accepted")
            out[name] = np.ascontiguousarray(arr)
        return out

    def rows(self, feeds):
        return int(feeds[self.input_names[0]].shape[0]) if self.batchable else 1


# ---- responses -----------------------------------------------------------------------

def wants_binary(request_format, accept):
    """Whether the response should be .npy/.npz: asked by Accept, else like the request."""
    accept = (accept or "").lower()
    if NPY_TYPE in accept or NPZ_TYPE in accept:
        return True
    if JSON_TYPE in accept:
        return False
    return request_format in ("npy", "npz")


def encode_json(outputs):
    """{name: ndarray} -> JSON bytes."""
    doc = {"outputs": {k: {"data": v.tolist(), "dtype": v.dtype.name, "shape": list(v.shape)}
                       for k, v in outputs.items()}}
    return json.dumps(doc).encode()


def encode_binary(outputs):
    """{name: ndarray} -> (bytes, media type): .npy for one output, .npz for several."""
    buf = io.BytesIO()
    if len(outputs) == 1:
        np.save(buf, next(iter(outputs.values())), allow_pickle=False)
        return buf.getvalue(), NPY_TYPE
    # as numpy.savez writes it, without passing the names as keywords (an output named
    # "file" made savez fail: a 500 for every binary request)
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, arr in outputs.items():
            with z.open(name + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(arr), allow_pickle=False)
    return buf.getvalue(), NPZ_TYPE


def encode(outputs, request_format, accept):
    """-> (body bytes, media type)."""
    if wants_binary(request_format, accept):
        return encode_binary(outputs)
    return encode_json(outputs), JSON_TYPE


def decode_response(body, content_type):
    """A client's helper: response body -> {name: ndarray} (JSON, .npy or .npz)."""
    media = _media_type(content_type)
    if media == NPY_TYPE:
        return {None: np.load(io.BytesIO(body), allow_pickle=False)}
    if media == NPZ_TYPE:
        with np.load(io.BytesIO(body), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    doc = json.loads(body)
    return {k: np.asarray(v["data"], dtype=v["dtype"]).reshape(v["shape"])
            for k, v in doc["outputs"].items()}


# ---- running -------------------------------------------------------------------------

class Outputs(dict):
    """{output name: ndarray} of one request, plus the engine run that computed them:
    batch_requests (requests in it) and batch_rows (rows in it). The servers send them
    as the header X-Kiln-Batch: requests=N, rows=R."""

    batch_requests = 1
    batch_rows = 0

    def header(self):
        return f"requests={self.batch_requests}, rows={self.batch_rows}"


class RunFailure:
    """The answer to a request whose own run failed (kiln refused its data at run time,
    e.g. an index out of range): `status` (kiln Status), `message`; the servers answer it
    with http_status: 400 where kiln refused the data (INVALID_ARGUMENT; MODEL, which
    the run of data the profile admits gives for values a layer cannot take, as an
    index out of range), else 500. run_batch gives one in place of
    the request's Outputs, so that the other requests batched with it are still answered."""

    def __init__(self, status, message):
        self.status = int(status)
        self.message = message

    @property
    def http_status(self):
        return 400 if self.status in (Status.INVALID_ARGUMENT, Status.MODEL) else 500


def _copy_out(ptr, shape, dtype):
    arr = np.empty(shape, dtype=dtype)
    if arr.nbytes:
        ctypes.memmove(arr.ctypes.data, ptr, arr.nbytes)
    return arr


class Runner:
    """One engine loaded from a .kiln file and one execution context (a worker's or a
    replica's): run() runs one request, run_batch() several, batched along the engine's
    batch dimension. Not for concurrent use: one Runner per thread."""

    def __init__(self, engine_path, threads=None):
        self.engine = Engine.from_file(engine_path, threads=threads)
        self.spec = EngineSpec(self.engine)
        self._ctx = self.engine.acquire_context()
        self._in = [(c_text(i["name"], "input name"), t.dtype) for i, t in zip(self.spec.inputs,
                                                                     self.engine.inputs)]
        self._out = [o["name"] for o in self.spec.outputs]
        self._dims = (ctypes.c_int64 * KILN_MAX_RANK)()

    def close(self):
        if self._ctx is not None:
            self.engine.release_context(self._ctx)
            self._ctx = None
        self.engine.close()

    def warmup(self, max_rows=None, max_sizes=64):
        """Runs the engine once at each batch size a server can send (zeros): batchable
        engines at every row count from the profile's min to min(max_rows, its max) (over
        max_sizes of them: the powers of two and the largest), others once at the opt
        shape. A device engine makes its per-shape state (cuDNN plans, algorithm choice)
        at a shape's first run: without this, the first batches of each size pay for it
        while requests wait. Returns the row counts run (None for an unbatched engine)."""
        spec = self.spec
        opt = {i["name"]: list(i["opt"]) for i in spec.inputs}
        if not spec.batchable:
            self.run({n: np.zeros(opt[n], dtype=i["dtype"]) for n, i in zip(opt, spec.inputs)})
            return [None]
        hi = spec.max_rows if max_rows is None else max(min(int(max_rows), spec.max_rows),
                                                         spec.min_rows)
        sizes = list(range(spec.min_rows, hi + 1))
        if len(sizes) > max_sizes:
            sizes = sorted({r for r in (1 << k for k in range(hi.bit_length()))
                            if r >= spec.min_rows} | {hi})
        for rows in sizes:
            self.run({i["name"]: np.zeros([rows] + opt[i["name"]][1:], dtype=i["dtype"])
                      for i in spec.inputs})
        return sizes

    def _feed(self, feeds, k):
        """The array of the engine's k-th input from feeds, by its name, C-contiguous
        (the bytes kiln reads), or ValueError naming what is wrong. Feeds from
        EngineSpec.validate pass as they are; a direct caller's dict may be in any order
        and hold views or other dtypes, which read as they were gave silent wrong results
        (or a read past a float16 array's end)."""
        info = self.spec.inputs[k]
        name = info["name"]
        if name not in feeds:
            raise ValueError(f"missing input '{name}' (the engine's inputs: "
                             f"{', '.join(self.spec.input_names)})")
        arr = np.asarray(feeds[name])
        if arr.dtype != np.dtype(info["dtype"]):
            raise ValueError(f"input '{name}' has dtype {arr.dtype.name}, but the engine "
                             f"expects {np.dtype(info['dtype']).name}")
        return np.ascontiguousarray(arr)

    def run(self, feeds):
        """{input name: ndarray} -> Outputs {output name: ndarray} (fresh copies). Inputs
        are taken by name; shapes are kiln's to check (validate() checks requests first).
        ValueError for a missing or unknown input or a wrong dtype."""
        L = lib()
        ctx = self._ctx
        for name in feeds:
            if name not in self.spec.input_names:
                raise ValueError(f"unknown input '{name}' (the engine's inputs: "
                                 f"{', '.join(self.spec.input_names)})")
        arrays = [self._feed(feeds, k) for k in range(len(self._in))]  # alive through the run
        for (name, code), arr in zip(self._in, arrays):
            dims = (ctypes.c_int64 * max(arr.ndim, 1))(*arr.shape)
            check(L.kiln_context_set_input(ctx, name, code, arr.ndim, dims,
                                           arr.ctypes.data or None))
        check(L.kiln_context_run(ctx))
        out = Outputs()
        out.batch_rows = self.spec.rows(feeds)
        rank, ptr = ctypes.c_int(), ctypes.c_void_p()
        for name, o in zip(self._out, self.spec.outputs):
            check(L.kiln_context_get_output(ctx, c_text(name, "output name"), None, ctypes.byref(rank),
                                            self._dims, ctypes.byref(ptr)))
            out[name] = _copy_out(ptr.value, tuple(self._dims[:rank.value]), o["dtype"])
        return out

    def run_one(self, feeds):
        """run(), with a failure of kiln's run as a RunFailure instead of KilnError."""
        try:
            return self.run(feeds)
        except KilnError as e:
            return RunFailure(e.status, str(e))

    def run_batch(self, requests):
        """A list of validated feeds -> a list of Outputs (or RunFailure), one per request,
        in order. Batchable engines: requests whose non-batch dimensions agree are
        concatenated along dimension 0 in chunks of at most the profile's max rows. When a
        chunk's run fails, it is split in two halves, each run again (and split again
        where it fails), down to single requests: the request at fault gets its
        RunFailure, the others their outputs (one request's bad data, an index out of
        range, failed every request batched with it). Halving bounds what one bad
        request costs a batch of B requests to about 2 log2(B) + 1 runs, each still
        batched (run one by one, one bad request per batch made every batch B + 1 runs
        of single requests: a cheap way to take batching away from every client)."""
        if not self.spec.batchable or len(requests) == 1:
            return [self.run_one(r) for r in requests]
        results = [None] * len(requests)
        for chunk in self._chunks(requests):
            self._run_chunk(requests, chunk, results)
        return results

    def _run_chunk(self, requests, chunk, results):
        """Runs the requests of chunk (indices) as one batch into results; where that
        fails, each half of it the same way (run_batch)."""
        if len(chunk) == 1:
            results[chunk[0]] = self.run_one(requests[chunk[0]])
            return
        feeds = {n: np.concatenate([requests[k][n] for k in chunk], axis=0)
                 for n in self.spec.input_names}
        rows = [self.spec.rows(requests[k]) for k in chunk]
        total = sum(rows)
        try:
            outs = self.run(feeds)
        except KilnError:
            half = len(chunk) // 2
            self._run_chunk(requests, chunk[:half], results)
            self._run_chunk(requests, chunk[half:], results)
            return
        for name, arr in outs.items():
            if arr.shape[:1] != (total,):
                raise RuntimeError(
                    f"output '{name}' of a batch of {total} rows has shape "
                    f"{_shape_text(arr.shape)}: its dimension 0 is not the batch")
        start = 0
        for k, r in zip(chunk, rows):
            res = results[k] = Outputs((n, a[start:start + r]) for n, a in outs.items())
            res.batch_requests, res.batch_rows = len(chunk), total
            start += r

    def _chunks(self, requests):
        """Groups of request indices: same trailing shapes, at most max_rows rows each,
        in arrival order within a group."""
        groups = {}
        for k, r in enumerate(requests):
            key = tuple(a.shape[1:] for a in r.values())
            groups.setdefault(key, []).append(k)
        chunks = []
        for idx in groups.values():
            cur, rows = [], 0
            for k in idx:
                r = self.spec.rows(requests[k])
                if cur and rows + r > self.spec.max_rows:
                    chunks.append(cur)
                    cur, rows = [], 0
                cur.append(k)
                rows += r
            if cur:
                chunks.append(cur)
        return chunks


# ---- building or loading the engine ---------------------------------------------------

def _parse_shapes(text, what):
    """'x:1x3x224x224,y:1x8' -> {'x': (1, 3, 224, 224), 'y': (1, 8)}."""
    out = {}
    for part in filter(None, (text or "").split(",")):
        name, sep, dims = part.rpartition(":")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = tuple(int(d) for d in dims.split("x"))
        except ValueError:
            raise ValueError(f"{what}: '{part}' is not NAME:D0xD1x... (e.g. x:1x3x224x224)") from None
    return out


def _model_inputs(onnx_path):
    """[(name, dims with None for dynamic, dim names)] of an ONNX model, read by kiln."""
    from .._lib import IoInfo

    L = lib()
    model = ctypes.c_void_p()
    check(L.kiln_model_load_onnx(c_path(str(onnx_path)), ctypes.byref(model)))
    try:
        out = []
        info = IoInfo()
        for i in range(L.kiln_model_num_inputs(model)):
            check(L.kiln_model_input_info(model, i, ctypes.byref(info)))
            r = info.rank
            out.append((info.name.decode(),
                        [int(d) if d >= 0 else None for d in info.dims[:r]],
                        [n.decode() if n else None for n in info.dim_names[:r]]))
        return out
    finally:
        L.kiln_model_free(model)


def build_from_onnx(onnx_path, out_path, *, device="cpu", max_batch=8, precision="fp32",
                    threads=None, min_shapes=None, opt_shapes=None, max_shapes=None):
    """Builds an engine from an ONNX model and writes it to out_path. A dynamic dimension 0
    gets the profile 1..max_batch (opt max_batch); other dynamic dimensions need
    min/opt/max shapes ({name: shape}, as `kiln build --min-shapes` etc.)."""
    from .. import Input
    from .._convert import _build, parse_precision

    min_shapes, opt_shapes, max_shapes = min_shapes or {}, opt_shapes or {}, max_shapes or {}
    bound = []
    for name, dims, _names in _model_inputs(onnx_path):
        if name in max_shapes:
            mx = max_shapes[name]
            spec = Input(min_shape=min_shapes.get(name, mx), opt_shape=opt_shapes.get(name, mx),
                         max_shape=mx)
        elif None not in dims:
            spec = Input(shape=dims)
        else:
            dyn = [a for a, d in enumerate(dims) if d is None]
            if dyn != [0]:
                raise ValueError(
                    f"{onnx_path}: input '{name}' has dynamic dimension(s) {dyn}; give its "
                    f"range with --min-shapes/--opt-shapes/--max-shapes {name}:D0xD1x...")
            rest = tuple(dims[1:])
            spec = Input(min_shape=(1,) + rest, opt_shape=(max_batch,) + rest,
                         max_shape=(max_batch,) + rest)
        bound.append(types.SimpleNamespace(name=name, spec=spec))
    opts = {} if threads is None else {"threads": int(threads)}
    data = _build(onnx_path, bound, device, parse_precision(precision), opts, None,
                  Path(onnx_path).name, {})
    tmp = Path(out_path).with_suffix(".kiln.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, out_path)
    return Path(out_path)


def prepare_engine(model, *, device="cpu", max_batch=8, precision="fp32", threads=None,
                   work_dir=None, min_shapes=None, opt_shapes=None, max_shapes=None):
    """The .kiln file to serve: `model` itself when it is an engine file (checked against
    `device`), or an engine built from an .onnx model into work_dir (a temporary folder
    when None; the caller removes it). Shapes: {name: dims} or 'x:1x8,...' strings."""
    path = Path(model)
    if not path.is_file():
        raise FileNotFoundError(f"{model}: no such file")
    shapes = [_parse_shapes(s, w) if isinstance(s, str) else s
              for s, w in ((min_shapes, "--min-shapes"), (opt_shapes, "--opt-shapes"),
                           (max_shapes, "--max-shapes"))]
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"KILN":
        from .._convert import parse_device

        got = EngineSpec.from_file(path).device
        want = "cpu" if device in (None, "cpu") else str(device)
        (gd, gi), (wd, wi) = parse_device(got), parse_device(want)
        if gd != wd or (":" in want and gi != wi):  # "cuda" takes any GPU's, "cuda:01" is cuda:1
            raise ValueError(f"{model} is an engine for {got}, but device {want} was asked "
                             f"for: build the engine for {want}, or serve it on {got}")
        return path
    if path.suffix.lower() != ".onnx":
        raise ValueError(f"{model}: not a kiln engine (.kiln) nor an ONNX model (.onnx)")
    out_dir = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="kiln-serve-"))
    return build_from_onnx(path, out_dir / (path.stem + ".kiln"), device=device or "cpu",
                           max_batch=max_batch, precision=precision, threads=threads,
                           min_shapes=shapes[0], opt_shapes=shapes[1], max_shapes=shapes[2])
