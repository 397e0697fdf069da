"""kiln engines behind LitServe (kiln.serving.litserve, `kiln serve`), on 127.0.0.1 only:
metadata and health, the request formats, bad requests (each a 4xx naming the problem, the
server serving on), 2,000 requests at concurrency 32 checked against the engine's direct
output, and graceful shutdown (requests in flight finish). Bounded: each server is started
and stopped by the test, every request loop has a count and a time limit."""

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import zipfile

import numpy as np
import pytest

pytest.importorskip("litserve", reason="the serving extra (litserve) is not installed")
pytest.importorskip("aiohttp", reason="the serving extra (aiohttp) is not installed")

from kiln.serving.core import EngineSpec, RequestError, decode_response, prepare_engine  # noqa: E402
from serving_util import (HOST, engine, free_port, http, kill_group, make_requests,  # noqa: E402,F401
                          matches, npy_bytes, npy_header, npz_bytes, post_chunked_unended,
                          run_load, runner, serving_env, start_litserve, stop)

MAX_BODY_MB = 0.05  # 52 KB: a 3-row JSON request is ~1 KB


@pytest.fixture(scope="module")
def server(engine, tmp_path_factory):
    port = free_port()
    log = open(tmp_path_factory.mktemp("log") / "server.log", "wb")
    proc = start_litserve(engine, port, "--workers", "2", "--max-batch", "8", "--timeout-ms", "5",
                          "--max-body-mb", str(MAX_BODY_MB), log=log)
    yield f"http://{HOST}:{port}"
    rc = stop(proc)
    log.close()
    assert rc == 0, f"the server exited with {rc} on SIGTERM"


def post(url, body, ctype="application/json", accept=None):
    headers = {"Content-Type": ctype}
    if accept:
        headers["Accept"] = accept
    return http("POST", url + "/predict", body, headers)


def jbody(x, dtype="float32", name="x"):
    return json.dumps({"inputs": {name: {"data": x, "dtype": dtype}}}).encode()


def test_health_and_metadata(server):
    assert http("GET", server + "/health")[0] == 200
    st, _, body = http("GET", server + "/metadata")
    assert st == 200
    meta = json.loads(body)
    assert meta["inputs"] == [{"name": "x", "dtype": "float32", "shape": [None, 16],
                               "dim_names": ["batch", None],
                               "profile": {"min": [1, 16], "opt": [8, 16], "max": [8, 16]}}]
    assert [(o["name"], o["shape"]) for o in meta["outputs"]] == [("y", [None, 10]),
                                                                   ("z", [None])]
    assert meta["batch"] == {"dim": "batch", "min_rows": 1, "max_rows": 8}
    assert meta["device"] == "cpu" and meta["precision"] == "fp32"


def test_request_formats(server, runner):
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    want = runner.run({"x": x})
    # JSON in, JSON out (dtype given, or left to the engine's)
    for body in (jbody(x.tolist()), json.dumps({"inputs": {"x": x.tolist()}}).encode()):
        st, h, out = post(server, body)
        assert st == 200 and h["content-type"] == "application/json"
        assert matches(decode_response(out, h["content-type"]), want)
    # .npy in: .npz out (two outputs); Accept: application/json turns it into JSON
    st, h, out = post(server, npy_bytes(x), "application/x-npy")
    assert st == 200 and h["content-type"] == "application/x-npz"
    assert matches(decode_response(out, h["content-type"]), want)
    st, h, out = post(server, npy_bytes(x), "application/x-npy", accept="application/json")
    assert st == 200 and matches(json_outputs(out), want)
    # .npz in, and JSON in with Accept: .npz
    buf = __import__("io").BytesIO()
    np.savez(buf, x=x)
    st, h, out = post(server, buf.getvalue(), "application/x-npz")
    assert st == 200 and matches(decode_response(out, h["content-type"]), want)
    st, h, out = post(server, jbody(x.tolist()), accept="application/x-npz")
    assert st == 200 and h["content-type"] == "application/x-npz"


def json_outputs(body):
    return decode_response(body, "application/json")


# (what is sent, content type) -> (status, words the message must hold)
BAD = [
    ("wrong shape", jbody([[1.0] * 15]), "application/json", 400,
     "input 'x' has shape [1, 15], outside the engine's profile [1..8, 16] (dimension 1 must be 16)"),
    ("wrong rank", jbody([1.0] * 16), "application/json", 400,
     "input 'x' has shape [16], but the engine expects rank 2 [1..8, 16]"),
    ("too many rows", jbody([[1.0] * 16] * 9), "application/json", 400,
     "(dimension 0 must be in 1..8)"),
    ("wrong dtype", jbody([[1] * 16], dtype="int64"), "application/json", 400,
     "input 'x' has dtype int64, but the engine expects float32"),
    ("wrong .npy dtype", npy_bytes(np.ones((1, 16))), "application/x-npy", 400,
     "input 'x' has dtype float64, but the engine expects float32"),
    ("missing input", json.dumps({"inputs": {}}).encode(), "application/json", 400,
     "missing input 'x' (the engine's inputs: x)"),
    ("unknown input", json.dumps({"inputs": {"x": [[0.0] * 16], "w": [1]}}).encode(),
     "application/json", 400, "unknown input 'w' (the engine's inputs: x)"),
    ("malformed JSON", b'{"inputs": {"x": [[1.0, 2.0}}', "application/json", 400,
     "malformed JSON body:"),
    ("not the JSON layout", b'[1, 2, 3]', "application/json", 400,
     'the JSON body must be an object {"inputs":'),
    ("ragged lists", jbody([[1.0] * 16, [1.0] * 15]), "application/json", 400, "ragged"),
    ("strings", jbody([["a"] * 16]), "application/json", 400, "not numbers"),
    ("NaN", b'{"inputs": {"x": [[' + b", ".join([b"1.0"] * 15 + [b"NaN"]) + b"]]}}",
     "application/json", 400, "input 'x' contains NaN at index [0, 15]"),
    ("infinity in .npy", npy_bytes(np.array([[0.0] * 3 + [np.inf] + [0.0] * 12], np.float32)),
     "application/x-npy", 400, "input 'x' contains infinity at index [0, 3]"),
    ("malformed .npy", b"\x93NUMPY garbage", "application/x-npy", 400, "malformed .npy body"),
    ("pickled object .npy", npy_bytes(np.array([{"a": 1}], dtype=object)), "application/x-npy",
     400, "malformed .npy body"),
    ("unsupported type", b"x=1", "text/plain", 415, "unsupported Content-Type 'text/plain'"),
    # hostile bodies: each was a 500 (an exception the decoder let through)
    ("JSON nested 5000 deep", b'{"inputs": {"x": ' + b"[" * 5000 + b"]" * 5000 + b"}}",
     "application/json", 400, "malformed JSON body: nested too deeply"),
    ("a lone surrogate in a name", b'{"inputs": {"x\\ud800": [[1.0]]}}', "application/json", 400,
     "unknown input 'x\\ud800'"),
    (".npy claiming 4 TiB", npy_header([1 << 40]) + bytes(64), "application/x-npy", 400,
     "input 'x' has shape [1099511627776], but the engine expects rank 2"),
    (".npz member claiming 4 TiB", npz_bytes({"x.npy": npy_header([1 << 40, 16]) + bytes(64)}),
     "application/x-npz", 400, "input 'x' has shape [1099511627776, 16], outside the engine's"),
    # numpy's header tokenizer raised TokenError (a 500) on a header it cannot end
    (".npy header unended", b"\x93NUMPY\x01\x00\x76\x00" + b"{'descr': '<f4', 'fortran_order': False, "
     b"'shape': (2,}".ljust(117) + b"\n" + bytes(128), "application/x-npy", 400, "malformed .npy body: "),
    # numpy.dtype raised ValueError (a 500) on a dtype string it cannot read
    ("unreadable dtype", jbody([[1.0] * 16], dtype="999999999999999999999float32"), "application/json",
     400, "input 'x': unknown dtype '999999999999999999999float32'"),
    # a repeated key was read last-wins: {"x": A, "x": B} ran B (probe7)
    ("input named twice", b'{"inputs": {"x": [[0.0]], "x": [[1.0]]}}', "application/json", 400,
     "malformed JSON body: key 'x' appears more than once in an object"),
    ("inputs twice", b'{"inputs": {}, "inputs": {"x": [[1.0]]}}', "application/json", 400,
     "malformed JSON body: key 'inputs' appears more than once"),
    # JSON's true/false in a float input were read as 1.0 and 0.0 (probe8's Left)
    ("true in a float input", b'{"inputs": {"x": [[' + b", ".join([b"1.5"] * 15 + [b"true"]) + b"]]}}",
     "application/json", 400, "input 'x' holds true/false, but the engine expects float32 numbers"),
    ("all false in a float input", b'{"inputs": {"x": [[' + b", ".join([b"false"] * 16) + b"]]}}",
     "application/json", 400, "input 'x' holds true/false"),
    ("body over the limit", jbody([[0.123456789] * 16] * 8 * 50), "application/json", 413,
     "over the limit of 52428 bytes"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_request(server, runner, case):
    _, body, ctype, want_status, words = case
    st, h, out = post(server, body, ctype)
    assert st == want_status, out
    assert words in json.loads(out)["error"], out
    # and the server keeps serving
    x = np.ones((2, 16), np.float32)
    st, h, out = post(server, jbody(x.tolist()))
    assert st == 200 and matches(json_outputs(out), runner.run({"x": x}))


def test_body_over_limit_without_content_length(server):
    # chunked transfer: no Content-Length, the limit is found while reading (and answered
    # before the body ends)
    status, body = post_chunked_unended(server, 5)
    assert status == 413 and b"over the limit" in body


def test_load_2000_requests_concurrency_32(server, runner, capsys):
    """2,000 requests (1-3 rows, JSON and .npy) at concurrency 32, with 100 bad requests
    interleaved (they must get their 4xx without disturbing the batches they would have
    joined): none lost, none wrong."""
    reqs = make_requests(runner, 2000, seed=3)
    bad = []
    for k in range(100):
        case = BAD[k % 4]  # shape, rank, rows, dtype: each decoded fine, refused in validation
        bad.append((case[1], case[2], lambda st, body, w=case[3]: st == w))
    res = run_load(server + "/predict", reqs, concurrency=32, timeout=300, extra=bad)
    with capsys.disabled():
        print("\n" + res.summary("LitServe, 2 workers, max batch 8, 2000 requests at concurrency 32")
              + "\n  " + res.batch_summary())
    assert res.ok == 2000, res.failures[:5]
    assert res.wrong == 0 and not res.statuses and not res.failures
    assert not res.extra_bad, res.extra_bad[:3]
    # LitServe's batching put several requests in one engine run, never over the
    # profile's 8 rows (requests of 1-3 rows: at most 8 requests)
    assert len(res.batches) == 2000
    assert max(b[0] for b in res.batches) > 1, res.batch_summary()
    assert max(b[1] for b in res.batches) <= 8 and max(b[0] for b in res.batches) <= 8


@pytest.mark.parametrize("how", ["SIGTERM to the server", "SIGINT to its process group"])
def test_graceful_shutdown(engine, runner, how):
    """Requests in flight when the server is told to stop are answered (correctly); the
    server then stops by itself with exit code 0. A long batch window (1.5 s, batches of
    up to 8) keeps three requests in flight when the signal comes."""
    port = free_port()
    proc = start_litserve(engine, port, "--max-batch", "8", "--timeout-ms", "1500")
    url = f"http://{HOST}:{port}"
    try:
        xs = [np.full((1, 16), k, np.float32) for k in range(3)]
        results = [None] * 3

        def send(k):
            results[k] = post(url, jbody(xs[k].tolist()))

        threads = [threading.Thread(target=send, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.5)  # the three wait in the worker's batch window
        if how.startswith("SIGTERM"):
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
        time.sleep(0.2)
        if how.startswith("SIGTERM"):
            st, _, body = post(url, jbody(xs[0].tolist()))  # a new request while draining
            assert st == 503 and b"shutting down" in body
        for t in threads:
            t.join(30)
        for k, (st, h, body) in enumerate(results):
            assert st == 200, body
            assert matches(json_outputs(body), runner.run({"x": xs[k]}))
        assert proc.wait(60) == 0
    finally:
        kill_group(proc)  # the server and anything it left behind


def _spawned_children(pid):
    """PIDs of the processes `pid` spawned with multiprocessing's spawn (LitServe's
    inference workers), from /proc."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if ppid == pid and b"spawn_main" in cmd:
            out.append(int(d))
    return out


def test_worker_killed(engine, runner):
    """An inference worker killed (SIGKILL) while it holds requests: they get a 500,
    none is answered wrong, LitServe starts another worker, and the server answers
    correctly again."""
    port = free_port()
    proc = start_litserve(engine, port, "--workers", "2", "--max-batch", "8",
                          "--timeout-ms", "1500")
    url = f"http://{HOST}:{port}"
    try:
        workers = _spawned_children(proc.pid)
        assert len(workers) == 2, workers
        xs = [np.full((1, 16), k, np.float32) for k in range(6)]
        results = [None] * len(xs)

        def send(k):
            results[k] = post(url, jbody(xs[k].tolist()))

        threads = [threading.Thread(target=send, args=(k,)) for k in range(len(xs))]
        for t in threads:
            t.start()
        time.sleep(0.5)  # in the workers' batch windows
        os.kill(workers[0], signal.SIGKILL)
        for t in threads:
            t.join(60)
        statuses = [r[0] for r in results]
        assert set(statuses) <= {200, 500}, statuses
        for k, (st, _, body) in enumerate(results):
            if st == 200:
                assert matches(json_outputs(body), runner.run({"x": xs[k]}))
            else:
                assert b"died" in body
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            alive = _spawned_children(proc.pid)
            if len(alive) == 2 and workers[0] not in alive:
                break
            time.sleep(0.5)
        assert len(alive) == 2 and workers[0] not in alive, alive
        time.sleep(3)  # the new worker loads the engine
        for k in range(8):
            st, _, body = post(url, jbody(xs[k % 6].tolist()))
            assert st == 200 and matches(json_outputs(body), runner.run({"x": xs[k % 6]}))
    finally:
        kill_group(proc)


def test_validation_of_shared_dimensions(tmp_path):
    """Two inputs sharing the batch dimension must agree on it (checked before batching)."""
    import torch

    class Add(torch.nn.Module):
        def forward(self, a, b):
            return a + b

    torch.onnx.export(Add(), (torch.ones(2, 4), torch.ones(2, 4)), str(tmp_path / "add.onnx"),
                      input_names=["a", "b"], output_names=["c"], opset_version=17,
                      dynamic_axes={"a": {0: "batch"}, "b": {0: "batch"}, "c": {0: "batch"}})
    spec = EngineSpec.from_file(prepare_engine(tmp_path / "add.onnx", work_dir=tmp_path,
                                               max_batch=4))
    assert spec.batchable and spec.max_rows == 4
    with pytest.raises(RequestError, match=r"inputs 'a' and 'b' disagree on dimension 'batch': "
                                           r"2 and 3"):
        spec.validate({"a": np.ones((2, 4), np.float32), "b": np.ones((3, 4), np.float32)})
    with pytest.raises(RequestError, match=r"a \.npy body holds one array, but the engine has "
                                           r"2 inputs \(a, b\)"):
        spec.decode(npy_bytes(np.ones((1, 4), np.float32)), "application/x-npy")


def test_hostile_bodies_read_no_further_than_their_headers(engine):
    """.npy and .npz bodies are refused from their headers, before any data is read: a
    2 MB .npz whose member inflates to 2 GB took 22 s and 2 GB of memory in the API server
    (a 64 MB body: 64 GB), and 20,000 members not named after inputs were all read before
    the first unknown name was refused. Big-endian data of the right type is taken."""
    import resource

    spec = EngineSpec.from_file(engine)
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("x.npy", "w", force_zip64=True) as f:
            f.write(npy_header([1 << 29]))
            for _ in range(128):
                f.write(bytes(1 << 24))
    # a shape inside the profile, of items of 16 MiB each: 256 MiB inflated from 256 kB
    # before the dtype was checked (probe3); an .npy of items of 2 GB: numpy's MemoryError
    # was a 500
    void_bomb = io.BytesIO()
    with zipfile.ZipFile(void_bomb, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("x.npy", "w", force_zip64=True) as f:
            f.write(npy_header([1, 16], "|V16777216"))
            for _ in range(16):
                f.write(bytes(1 << 24))
    many = npz_bytes({f"m{i}.npy": npy_bytes(np.zeros(1, np.float32)) for i in range(20000)})
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    for body, words in ((bomb.getvalue(), "input 'x' has shape [536870912], but the engine"),
                        (void_bomb.getvalue(), "input 'x' has dtype void134217728, but the engine "
                                               "expects float32"),
                        (many, "unknown input 'm0'")):
        with pytest.raises(RequestError, match=re.escape(words)):
            spec.decode(body, "application/x-npz")
    with pytest.raises(RequestError, match=re.escape("input 'x' has dtype bytes16000000000")):
        spec.decode(npy_header([1, 16], "|S2000000000") + bytes(64), "application/x-npy")
    assert time.monotonic() - t0 < 2.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 200 << 10  # KiB
    with pytest.raises(RequestError, match="input 'x' is in it twice"):
        spec.decode(npz_bytes({"x.npy": npy_bytes(np.ones((1, 16), np.float32)),
                               "x": npy_bytes(np.ones((1, 16), np.float32))}), "application/x-npz")
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    for body, ctype in ((npy_bytes(x.astype(">f4")), "application/x-npy"),
                        (npz_bytes({"x.npy": npy_bytes(x.astype(">f4"))}), "application/x-npz"),
                        (json.dumps({"inputs": {"x": {"data": x.tolist(), "dtype": ">f4"}}}).encode(),
                         "application/json")):
        feeds, _ = spec.decode(body, ctype)
        assert feeds["x"].dtype == np.float32 and np.array_equal(feeds["x"], x)


def test_json_body_too_big_for_the_engine(engine):
    """A JSON body is parsed into Python numbers (24 to 32 bytes each) before its shape is
    checked: a 32 MB list of numbers for an input of 8 x 16 took 420 MB to refuse (a 64 MB
    body, the default limit: 850 MB a request). Refused from its commas before parsing
    when it holds more values than the inputs take at their largest shapes (probe8)."""
    import resource

    spec = EngineSpec.from_file(engine)
    n = 8_000_000
    body = b'{"inputs": {"x": [[' + b"1.5," * (n - 1) + b"1.5]]}}"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(RequestError, match=r"the JSON body holds over 7999999 values, more than "
                                           r"the engine's inputs take at their largest shapes "
                                           r"\(128 values: 'x' \[8, 16\]\)"):
        spec.decode(body, "application/json")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB
    x = np.arange(128, dtype=np.float32).reshape(8, 16)  # the largest request still reads
    feeds, _ = spec.decode(json.dumps({"inputs": {"x": x.tolist()}}, indent=1).encode(), "application/json")
    assert np.array_equal(feeds["x"], x)


def test_npz_members_zipfile_cannot_read(engine):
    """.npz members zipfile cannot read are a 400 naming the member: a corrupt deflate
    stream (numpy.savez_compressed's; zlib.error) or LZMA stream (LZMAError), an encrypted
    member (RuntimeError), a compression method zipfile lacks (NotImplementedError) were
    500s."""
    spec = EngineSpec.from_file(engine)
    x = npy_bytes(np.ones((1, 16), np.float32))

    def archive(method=zipfile.ZIP_STORED, flags=0, set_method=None, damage=False):
        b = bytearray(npz_bytes({"x.npy": x}, method))
        loc, cen = b.find(b"PK\x03\x04"), b.find(b"PK\x01\x02")
        b[loc + 6] |= flags
        b[cen + 8] |= flags
        if set_method is not None:
            b[loc + 8:loc + 10] = b[cen + 10:cen + 12] = set_method.to_bytes(2, "little")
        if damage:  # the stream's first bytes (just past the local header)
            start = loc + 30 + int.from_bytes(b[loc + 26:loc + 28], "little") + \
                int.from_bytes(b[loc + 28:loc + 30], "little")
            b[start:start + 4] = b"\xff\xff\xff\xff"
        return bytes(b)

    for body in (archive(zipfile.ZIP_DEFLATED, damage=True), archive(zipfile.ZIP_LZMA, damage=True),
                 archive(flags=1), archive(set_method=99)):
        with pytest.raises(RequestError, match=re.escape("malformed .npz member 'x.npy': ")) as e:
            spec.decode(body, "application/x-npz")
        assert e.value.status == 400
    feeds, _ = spec.decode(archive(zipfile.ZIP_LZMA), "application/x-npz")
    assert np.array_equal(feeds["x"], np.ones((1, 16), np.float32))


def test_bool_bytes_other_than_0_1(tmp_path):
    """A bool .npz member holding bytes other than 0/1 (numpy takes any byte as a bool) is a
    400 at decoding: it reached the engine, whose run refuses it, and so failed with a 500
    every request batched with it."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(
        [helper.make_node("Where", ["m", "x", "z"], ["y"])], "where",
        [helper.make_tensor_value_info("m", TensorProto.BOOL, ["b", 4]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])],
        initializer=[numpy_helper.from_array(np.zeros(1, np.float32), "z")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
              str(tmp_path / "where.onnx"))
    spec = EngineSpec.from_file(prepare_engine(tmp_path / "where.onnx", work_dir=tmp_path,
                                               max_batch=4))
    m = np.frombuffer(bytes([1, 0, 1, 1, 0, 0, 2, 255]), dtype=bool).reshape(2, 4)
    body = npz_bytes({"m.npy": npy_bytes(m), "x.npy": npy_bytes(np.ones((2, 4), np.float32))})
    with pytest.raises(RequestError, match=re.escape("input 'm' holds byte 2 at index [1, 2]: a "
                                                     "bool holds 0 (false) or 1 (true) only")):
        spec.decode(body, "application/x-npz")


def test_npz_answer_of_outputs_named_like_savez_arguments():
    """Outputs named "file" (numpy.savez's own argument) are answered as .npz; savez
    failed ("got multiple values for argument 'file'"): a 500 for every binary request."""
    from kiln.serving.core import encode_binary

    outs = {"file": np.arange(3, dtype=np.float32), "y": np.ones((2, 2), np.int64)}
    body, media = encode_binary(outs)
    got = decode_response(body, media)
    assert media == "application/x-npz" and got.keys() == outs.keys()
    assert all(np.array_equal(got[k], v) and got[k].dtype == v.dtype for k, v in outs.items())


def test_int64_range_exact(tmp_path):
    """JSON numbers for an int64 input are range-checked exactly: 2**63, as an int or as
    the float 9.223372036854775807e18, passed numpy's float64 comparison and became
    -2**63."""
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Identity", ["ids"], ["y"])], "ident",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, [1, 2])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
              str(tmp_path / "ident.onnx"))
    spec = EngineSpec.from_file(prepare_engine(tmp_path / "ident.onnx", work_dir=tmp_path))
    for v in ("9223372036854775808", "9.223372036854775807e18", "18446744073709551615",
              "-9.3e18"):
        with pytest.raises(RequestError, match="holds values outside int64's range"):
            spec.decode(b'{"inputs": {"ids": [[%s, 1]]}}' % v.encode(), "application/json")
    for v, want in (("9223372036854775807", 2**63 - 1), ("-9223372036854775808", -2**63),
                    ("-9.223372036854775808e18", -2**63), ("4.0", 4)):
        feeds, _ = spec.decode(b'{"inputs": {"ids": [[%s, 1]]}}' % v.encode(), "application/json")
        assert int(feeds["ids"][0, 0]) == want


def test_one_bad_request_does_not_fail_its_batch(tmp_path):
    """A request whose data kiln refuses at run time (an embedding id out of range) gets
    its own 400; the requests batched with it get their outputs (the batch's run failed
    and so did every request in it)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from kiln.serving.core import RunFailure, Runner

    w = np.arange(40, dtype=np.float32).reshape(10, 4)
    g = helper.make_graph(
        [helper.make_node("Gather", ["W", "ids"], ["y"])], "emb",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["b", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 3, 4])],
        initializer=[numpy_helper.from_array(w, "W")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
              str(tmp_path / "emb.onnx"))
    r = Runner(prepare_engine(tmp_path / "emb.onnx", work_dir=tmp_path, max_batch=8), threads=1)
    try:
        good = [{"ids": np.array([[1, 2, 3]] * n, np.int64)} for n in (1, 2)]
        bad = {"ids": np.array([[1, 99, 3]], np.int64)}
        out = r.run_batch([good[0], bad, good[1]])
        assert isinstance(out[1], RunFailure) and out[1].http_status == 400
        assert "index 99 is out of range for axis 0 of size 10" in out[1].message
        for o, f in ((out[0], good[0]), (out[2], good[1])):
            assert np.array_equal(o["y"], w[f["ids"]])
        assert isinstance(r.run_batch([bad])[0], RunFailure)
        # one bad request in a batch of 8: halves run again, not each request on its
        # own (9 runs of one request each before: one client took batching away from
        # every request batched with its bad ones)
        runs = []
        run = r.run
        r.run = lambda feeds: runs.append(len(feeds["ids"])) or run(feeds)
        reqs = [good[0]] * 5 + [bad] + [good[0]] * 2
        out = r.run_batch(reqs)
        assert [isinstance(o, RunFailure) for o in out] == [k == 5 for k in range(8)]
        assert runs == [8, 4, 4, 2, 1, 1, 2], runs
        for o in out[:5] + out[6:]:
            assert np.array_equal(o["y"], w[good[0]["ids"]])
        # every request bad: each still answered with its own failure
        runs.clear()
        out = r.run_batch([bad] * 4)
        assert all(isinstance(o, RunFailure) and o.http_status == 400 for o in out)
        assert len(runs) == 7
    finally:
        r.close()


def test_runner_run_reads_inputs_by_name(tmp_path):
    """Runner.run (public: kiln.serving.Runner) took the feeds' arrays in the dict's order
    and their bytes as the engine's dtype, C order: {"b": ..., "a": ...} swapped a and b
    without a word, a non-contiguous view was read as if contiguous, a float64 array was
    read as twice as many float32s, a float16 one read past its end. Each input is now
    taken by its name, made contiguous, and a wrong dtype or a missing or unknown input
    is a ValueError naming it (probe7)."""
    import onnx
    from onnx import TensorProto, helper

    from kiln.serving.core import Runner

    g = helper.make_graph(
        [helper.make_node("Sub", ["a", "b"], ["y"])], "sub",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", 4]) for n in ("a", "b")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
              str(tmp_path / "sub.onnx"))
    r = Runner(prepare_engine(tmp_path / "sub.onnx", work_dir=tmp_path, max_batch=4), threads=1)
    try:
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        b = np.ones((2, 4), np.float32)
        assert np.array_equal(r.run({"b": b, "a": a})["y"], a - b)
        wide = np.arange(16, dtype=np.float32).reshape(2, 8)
        assert np.array_equal(r.run({"a": wide[:, ::2], "b": b})["y"], wide[:, ::2] - b)
        for feeds, words in (({"a": a.astype(np.float64), "b": b}, "input 'a' has dtype float64"),
                             ({"a": a, "b": b.astype(np.float16)}, "input 'b' has dtype float16"),
                             ({"a": a}, "missing input 'b'"),
                             ({"a": a, "b": b, "c": b}, "unknown input 'c'")):
            with pytest.raises(ValueError, match=re.escape(words)):
                r.run(feeds)
        # the server's path (validated feeds) is unchanged
        feeds, _ = r.spec.decode(json.dumps({"inputs": {"b": b.tolist(), "a": a.tolist()}}),
                                 "application/json")
        assert np.array_equal(r.run(feeds)["y"], a - b)
    finally:
        r.close()


def test_prepare_engine_device_of_an_engine(engine):
    """An engine is served where --device names its device, read as kiln reads a device:
    'cpu:0' is a CPU engine's (it was refused: 'engine for cpu, but device cpu:0'), a
    malformed device is a ValueError naming it."""
    assert prepare_engine(engine, device="cpu:0") == engine
    assert prepare_engine(engine, device="cpu") == engine
    with pytest.raises(ValueError, match="is an engine for cpu, but device cuda:1 was asked"):
        prepare_engine(engine, device="cuda:1")
    with pytest.raises(ValueError, match=re.escape("device 'cuda: 1': expected cpu")):
        prepare_engine(engine, device="cuda: 1")


def test_batches_split_back_per_request(engine, runner):
    """Runner.run_batch: requests of 1-3 rows concatenated into runs of at most the
    profile's 8 rows, split back in order (each answer is its own request's)."""
    rng = np.random.default_rng(5)
    reqs = [{"x": rng.standard_normal((1 + k % 3, 16)).astype(np.float32)} for k in range(11)]
    outs = runner.run_batch(reqs)
    assert len(outs) == 11
    for r, o in zip(reqs, outs):
        assert matches(o, runner.run(r))


def test_runner_warmup_runs_every_batch_size(engine, runner):
    """Runner.warmup (what each worker does before it takes requests): every row count the
    server can send, capped by max_rows; past max_sizes of them the powers of two and the
    largest; the answers afterwards are the same."""
    from kiln.serving.core import Runner

    x = np.random.default_rng(9).standard_normal((3, 16)).astype(np.float32)
    want = runner.run({"x": x})
    r = Runner(engine, threads=1)
    try:
        assert r.warmup() == list(range(1, 9))
        assert r.warmup(3) == [1, 2, 3]
        assert r.warmup(100) == list(range(1, 9))
        assert r.warmup(max_sizes=3) == [1, 2, 4, 8]
        assert matches(r.run({"x": x}), want)
    finally:
        r.close()


@pytest.mark.parametrize("args,words", [
    (["--max-body-mb", "inf"], "argument --max-body-mb: 'inf' is not a finite number > 0"),
    (["--max-body-mb", "-1"], "argument --max-body-mb: '-1' is not a finite number > 0"),
    (["--timeout-ms", "nan"], "argument --timeout-ms: 'nan' is not a finite number >= 0"),
    (["--drain-timeout", "-1"], "argument --drain-timeout: '-1' is not a finite number >= 0"),
    (["--port", "99999"], "argument --port: '99999' is not a finite number in 1..65535"),
    (["--workers", "0"], "argument --workers: '0' is not a finite number >= 1"),
    (["--threads", "2.5"], "argument --threads: '2.5' is not an integer"),
])
def test_kiln_serve_bad_numbers(args, words, capsys):
    """Numbers kiln serve took and then failed on, or served with: --max-body-mb -1 (every
    request a 413), inf (a traceback), --timeout-ms nan (a server started), --port 99999
    (LitServe's traceback)."""
    from kiln.serving.cli import parser

    with pytest.raises(SystemExit) as e:
        parser().parse_args(["model.kiln"] + args)
    assert e.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.parametrize("kwargs, words", [
    ({"workers": 0}, "workers must be an integer >= 1, got 0"),
    ({"workers": 1.5}, "workers must be an integer >= 1, got 1.5"),
    ({"max_batch": 0}, "max_batch must be an integer >= 1 (or None), got 0"),
    ({"max_batch": 2.5}, "max_batch must be an integer >= 1 (or None), got 2.5"),
    ({"timeout_ms": float("nan")}, "timeout_ms must be a finite number >= 0, got nan"),
    ({"timeout_ms": -1}, "timeout_ms must be a finite number >= 0, got -1"),
    ({"threads": -3}, "threads must be an integer in 0..1024 (or None), got -3"),
    ({"threads": True}, "threads must be an integer in 0..1024 (or None), got True"),
    ({"max_body_bytes": -1}, "max_body_bytes must be an integer > 0, got -1"),
    ({"max_body_bytes": "64"}, "max_body_bytes must be an integer > 0, got '64'"),
])
def test_make_server_bad_numbers(kwargs, words):
    """make_server / KilnLitAPI check their numbers as the CLI does, before the engine is
    read: max_batch=0 or 2.5 was clamped or cut silently, timeout_ms=-1 or nan taken,
    max_body_bytes=-1 answered every request 413, threads=-3 failed in every worker."""
    from kiln.serving.litserve import make_server

    with pytest.raises(ValueError) as e:
        make_server("/nonexistent/model.kiln", **kwargs)
    assert str(e.value) == words


def test_kiln_serve_cli(engine, tmp_path):
    """`kiln serve --help` through the package's console script (kiln.cli), the C tool's
    commands through the same script, and a clear error for a model that is neither."""
    env = serving_env()
    out = subprocess.run([sys.executable, "-m", "kiln.serving", "--help"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--max-batch" in out.stdout and "--timeout-ms" in out.stdout
    assert "--no-warmup" in out.stdout
    bad = tmp_path / "model.txt"
    bad.write_text("hello")
    out = subprocess.run([sys.executable, "-c", "import sys, kiln.cli; sys.exit(kiln.cli.main())",
                          "serve", str(bad)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "not a kiln engine (.kiln) nor an ONNX model (.onnx)" in out.stderr
    out = subprocess.run([sys.executable, "-c", "import sys, kiln.cli; sys.exit(kiln.cli.main())",
                          "serve", str(engine), "--device", "cuda"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "is an engine for cpu, but device cuda was asked" in out.stderr
    if os.environ.get("KILN_CLI") or (env.get("KILN_LIBRARY") and os.path.isfile(
            os.path.join(os.path.dirname(env["KILN_LIBRARY"]), "kiln"))):
        out = subprocess.run([sys.executable, "-c",
                              "import sys, kiln.cli; sys.exit(kiln.cli.main())", "inspect",
                              str(engine)], env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "x" in out.stdout
