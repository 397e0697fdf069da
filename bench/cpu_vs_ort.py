#!/usr/bin/env python3
"""kiln (CPU) against ONNX Runtime (CPU execution provider), in one process.

Usage (with the project venv, which has numpy and onnxruntime):
    .venv/bin/python bench/cpu_vs_ort.py [--models mobilenetv2,resnet50,bert,resnet50_b8]
        [--threads 1,2] [--repeats 20] [--warmup 3] [--quick] [--write BENCHMARKS.md]
        [--models-dir DIR] [--lib PATH/libkiln.so]

Both runtimes run the same ONNX files, made by scripts/gen_models.py (seeded weights):
    mobilenetv2   mobilenetv2_op17_fixed, batch 1
    resnet50      resnet50_op17_fixed, batch 1
    bert          bert_op13_fixed (BERT-base encoder, seq 128), batch 1
    resnet50_b8   resnet50_op17_dyn at batch 8 (kiln profile min=opt=max batch 8)
The variants missing from --models-dir are generated there first (with Debian's
/usr/bin/python3, as gen_models.py asks).

For each row (model x thread count):
  - the kiln engine is built once (C API through ctypes: kiln/_lib.py's bindings, loaded
    without the kiln package so that torch is not imported), threads = T;
  - one ORT session: intra_op_num_threads = T, inter_op_num_threads = 1, sequential
    execution, graph optimizations ORT_ENABLE_ALL;
  - each runtime runs in its own child process (a timing server the script drives over a
    pipe), so that one's threads and their placement cannot affect the other's; a row takes
    --rounds fresh pairs of such processes (default 3), sharing the repeats, since where the
    OS first puts a process's threads tends to stick for its life;
  - both are warmed up, then run alternately (kiln, ORT, kiln, ORT, ...) --repeats times
    each; only the run call is timed (inputs are bound / fed beforehand); before each timed
    call the script pauses, by default twice the longest time either runtime keeps a CPU
    busy after a run (ORT's workers spin ~20 ms by default; measured per row) plus 10 ms,
    so that no thread of the other runtime competes with the timed call;
  - the medians are reported with their ratio kiln/ORT (< 1: kiln is faster);
  - peak RSS of each runtime is measured in its own child process (one per runtime per
    row) that loads only that runtime, builds/creates it, and runs it a few times:
    resource.getrusage(RUSAGE_SELF).ru_maxrss, so the figure includes the Python
    interpreter, numpy and the inputs (the "baseline" child, which loads only those, is
    printed for reference);
  - agreement: max |kiln - ort| / max |ort| over all outputs.
"""

import argparse
import ctypes
import datetime
import importlib.util
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# row name -> (gen_models variant, batch the row runs at, label)
MODELS = {
    "mobilenetv2": ("mobilenetv2_op17_fixed", 1, "MobileNetV2"),
    "resnet50": ("resnet50_op17_fixed", 1, "ResNet-50"),
    "bert": ("bert_op13_fixed", 1, "BERT-base seq 128"),
    "resnet50_b8": ("resnet50_op17_dyn", 8, "ResNet-50"),
}
DEFAULT_MODELS = ["resnet50", "mobilenetv2", "bert", "resnet50_b8"]

KILN_DTYPES = {np.dtype(np.float32): 1, np.dtype(np.int32): 6, np.dtype(np.int64): 7}
NP_OF_KILN = {1: np.float32, 6: np.int32, 7: np.int64, 11: np.float64, 9: np.bool_}


# --------------------------------------------------------------------------- inputs

def load_manifest(models_dir):
    with open(os.path.join(models_dir, "manifest.json")) as f:
        return {m["name"]: m for m in json.load(f)["models"]}


def ensure_models(models_dir, variants):
    have = {}
    if os.path.exists(os.path.join(models_dir, "manifest.json")):
        have = load_manifest(models_dir)
    missing = [v for v in variants
               if v not in have or not os.path.isfile(os.path.join(models_dir, have[v]["onnx"]))]
    if missing:
        print("generating %s in %s (scripts/gen_models.py)" % (",".join(missing), models_dir),
              file=sys.stderr, flush=True)
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts", "gen_models.py"),
                        models_dir, "--only", ",".join(missing)], check=True)
    return load_manifest(models_dir)


def make_inputs(models_dir, entry, batch):
    """{name: array} at `batch`: the reference inputs when the batch matches, else
    seeded random data of the right kind (the reference sample repeated for int inputs)."""
    out = {}
    rng = np.random.default_rng(1234)
    for spec in entry["inputs"]:
        a = np.load(os.path.join(models_dir, spec["file"]))
        if a.shape[0] != batch:
            if a.dtype == np.float32:
                a = rng.standard_normal((batch,) + a.shape[1:], dtype=np.float32)
            else:
                a = np.concatenate([a[:1]] * batch, axis=0)
        out[spec["name"]] = np.ascontiguousarray(a)
    return out


# --------------------------------------------------------------------------- kiln

def load_kiln_lib(lib_path):
    """kiln/_lib.py (the package's ctypes bindings) loaded on its own: `import kiln` would
    import torch, which would distort the RSS figures and the load time."""
    os.environ["KILN_LIBRARY"] = lib_path
    spec = importlib.util.spec_from_file_location(
        "kiln_lib_standalone", os.path.join(ROOT, "python", "kiln", "_lib.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# kiln engine precision -> (kiln_precision, fast math: kiln_builder_set_fast_math)
PRECISIONS = {"fp32": (0, False), "fp32-fast": (0, True), "bf16": (3, False)}


def kiln_build_engine(K, onnx_path, inputs, threads, precision, engine_path):
    """Builds an engine from the ONNX file and saves it; returns the build time (s)."""
    L = K.lib()
    m, b, e = (ctypes.c_void_p() for _ in range(3))
    K.check(L.kiln_model_load_onnx(os.fsencode(onnx_path), ctypes.byref(m)))
    try:
        K.check(L.kiln_builder_create(ctypes.byref(b)))
        K.check(L.kiln_builder_set_threads(b, threads))
        K.check(L.kiln_builder_set_precision(b, PRECISIONS[precision][0]))
        K.check(L.kiln_builder_set_fast_math(b, PRECISIONS[precision][1]))
        for name, a in inputs.items():
            dims = (ctypes.c_int64 * a.ndim)(*a.shape)
            K.check(L.kiln_builder_set_profile(b, name.encode(), a.ndim, dims, dims, dims))
        t0 = time.perf_counter()
        K.check(L.kiln_build(b, m, ctypes.byref(e)))
        build_s = time.perf_counter() - t0
        K.check(L.kiln_engine_save(e, os.fsencode(engine_path)))
    finally:
        if e:
            L.kiln_engine_free(e)
        if b:
            L.kiln_builder_free(b)
        L.kiln_model_free(m)
    return build_s


class KilnRunner:
    """Runs a prebuilt engine file (mapped by kiln_engine_load), as a deployment would."""

    def __init__(self, K, engine_path, inputs, threads):
        self.K, L = K, K.lib()
        self.L = L
        self.inputs = inputs
        e, c = ctypes.c_void_p(), ctypes.c_void_p()
        K.check(L.kiln_engine_load(os.fsencode(engine_path), ctypes.byref(e)))
        self.e = e
        K.check(L.kiln_context_create(e, ctypes.byref(c)))
        self.c = c
        K.check(L.kiln_context_set_threads(c, threads))
        for name, a in inputs.items():
            dims = (ctypes.c_int64 * a.ndim)(*a.shape)
            K.check(L.kiln_context_set_input(c, name.encode(), KILN_DTYPES[a.dtype], a.ndim, dims,
                                             a.ctypes.data_as(ctypes.c_void_p)))
        info = K.IoInfo()
        self.output_names = []
        for i in range(L.kiln_engine_num_outputs(e)):
            K.check(L.kiln_engine_output_info(e, i, ctypes.byref(info)))
            self.output_names.append(info.name.decode())

    def run(self):
        self.K.check(self.L.kiln_context_run(self.c))

    def outputs(self):
        res = {}
        dt, rank = ctypes.c_int(), ctypes.c_int()
        dims = (ctypes.c_int64 * self.K.KILN_MAX_RANK)()
        ptr = ctypes.c_void_p()
        for name in self.output_names:
            self.K.check(self.L.kiln_context_get_output(self.c, name.encode(), ctypes.byref(dt),
                                                        ctypes.byref(rank), dims, ctypes.byref(ptr)))
            shape = tuple(dims[:rank.value])
            npdt = np.dtype(NP_OF_KILN[dt.value])
            n = int(np.prod(shape)) if shape else 1
            buf = ctypes.string_at(ptr.value, n * npdt.itemsize)
            res[name] = np.frombuffer(buf, dtype=npdt).reshape(shape).copy()
        return res

    def close(self):
        self.L.kiln_context_free(self.c)
        self.L.kiln_engine_free(self.e)


# --------------------------------------------------------------------------- ORT

class OrtRunner:
    def __init__(self, onnx_path, inputs, threads):
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        t0 = time.perf_counter()
        self.sess = ort.InferenceSession(onnx_path, sess_options=so,
                                         providers=["CPUExecutionProvider"])
        self.build_s = time.perf_counter() - t0
        self.feed = dict(inputs)
        self.output_names = [o.name for o in self.sess.get_outputs()]
        self.last = None

    def run(self):
        self.last = self.sess.run(self.output_names, self.feed)

    def outputs(self):
        return dict(zip(self.output_names, self.last))

    def close(self):
        self.sess = None


# --------------------------------------------------------------------------- child (RSS)

def child_main(args):
    """Loads only one runtime, builds it, runs it a few times, prints peak RSS (KiB)."""
    import resource
    manifest = load_manifest(args.models_dir)
    variant, batch, _ = MODELS[args.child_model]
    entry = manifest[variant]
    inputs = make_inputs(args.models_dir, entry, batch)
    onnx_path = os.path.join(args.models_dir, entry["onnx"])
    if args.child == "kiln-build":
        K = load_kiln_lib(args.lib)
        build_s = kiln_build_engine(K, onnx_path, inputs, args.child_threads, args.child_precision,
                                    args.child_engine)
        r = None
    elif args.child == "kiln":
        r = KilnRunner(load_kiln_lib(args.lib), args.child_engine, inputs, args.child_threads)
    elif args.child == "ort":
        r = OrtRunner(onnx_path, inputs, args.child_threads)
    else:
        r = None  # baseline: interpreter + numpy + inputs
    if args.serve:
        return serve(r)
    if r is not None:
        for _ in range(3):
            r.run()
    hwm = None
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    print(json.dumps({"maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                      "vmhwm_kib": hwm,
                      "build_s": build_s if args.child == "kiln-build" else None}))
    return 0


def serve(r):
    """Timing server (one per runtime, its own process): reads commands on stdin and
    answers one line each on stdout: "run" -> milliseconds of one run call; "spin" -> CPU
    ms this process spends in a pause right after one run (its spinning threads); "out
    PATH" -> the last outputs saved to PATH (.npz), "ok"; "quit"."""
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "run":
            t0 = time.perf_counter()
            r.run()
            reply = "%.6f" % ((time.perf_counter() - t0) * 1e3)
        elif cmd[0] == "spin":
            reply = "%.3f" % after_run_cpu_ms(r.run)
        elif cmd[0] == "out":
            np.savez(cmd[1], **r.outputs())
            reply = "ok"
        else:
            reply = "error: unknown command %r" % cmd[0]
        sys.stdout.write(reply + "\n")
        sys.stdout.flush()
    if hasattr(r, "close"):
        r.close()
    return 0


class Server:
    """The parent's handle on a timing server child (see serve())."""

    def __init__(self, args, runtime, model, threads, precision):
        cmd = [sys.executable, os.path.abspath(__file__), "--models-dir", args.models_dir,
               "--lib", args.lib, "--_child", runtime, "--_child-model", model,
               "--_child-threads", str(threads), "--_child-precision", precision,
               "--_child-engine", engine_file(args, model, threads, precision), "--_serve"]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  bufsize=1)

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        reply = self.p.stdout.readline().strip()
        if not reply or reply.startswith("error"):
            raise RuntimeError("timing server: %r -> %r" % (line, reply))
        return reply

    def run(self):
        return float(self.ask("run"))

    def outputs(self, tmpdir, name):
        path = os.path.join(tmpdir, name + ".npz")
        self.ask("out " + path)
        with np.load(path) as z:
            return {k: z[k] for k in z.files}

    def close(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.flush()
        except OSError:
            pass
        self.p.wait(timeout=60)


def engine_file(args, model, threads, precision):
    return os.path.join(args.engine_dir, "%s_t%d_%s.kiln" % (model, threads, precision))


def child_rss(args, runtime, model, threads, precision="fp32", want=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--models-dir", args.models_dir,
           "--lib", args.lib, "--_child", runtime, "--_child-model", model,
           "--_child-threads", str(threads), "--_child-precision", precision,
           "--_child-engine", engine_file(args, model, threads, precision)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr)
        return None
    r = json.loads(p.stdout.strip().splitlines()[-1])
    # On Linux a child's ru_maxrss starts from its parent's peak (the parent's high-water
    # mark is carried over by fork and exec), so these children are started while this
    # process is still small (before either runtime is loaded here); VmHWM, the new
    # address space's own peak, is the cross-check.
    if r["vmhwm_kib"] is not None and abs(r["maxrss_kib"] - r["vmhwm_kib"]) > 8192:
        print("warning: %s %s t%d: ru_maxrss %d KiB but VmHWM %d KiB" % (
            runtime, model, threads, r["maxrss_kib"], r["vmhwm_kib"]), file=sys.stderr)
    if want == "*":
        return r
    if want:
        return r[want]
    return r["maxrss_kib"] / 1024.0


# --------------------------------------------------------------------------- main

def agreement(ko, oo):
    worst, scale = 0.0, 0.0
    for name, ref in oo.items():
        ref = np.asarray(ref, dtype=np.float64)
        got = np.asarray(ko[name], dtype=np.float64)
        if got.shape != ref.shape:
            return float("inf")
        worst = max(worst, float(np.max(np.abs(got - ref))) if ref.size else 0.0)
        scale = max(scale, float(np.max(np.abs(ref))) if ref.size else 0.0)
    return worst / scale if scale > 0 else worst


def after_run_cpu_ms(run, window_s=0.2):
    """Process CPU time (ms) spent during a window_s pause right after one run():
    the other threads the runtime keeps busy once the call has returned."""
    import resource
    time.sleep(window_s)  # the other runtime's threads from earlier calls go idle first
    run()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(window_s)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1e3


def bench_row(args, model, threads, precision, rss, builds):
    variant, batch, label = MODELS[model]
    tk, to, spins = [], [], []
    # Rounds: each with a fresh pair of processes, because where the OS first places a
    # runtime's threads tends to stick for the life of the process (ORT at 2 threads after
    # pauses: 3.9 or 9-10 ms, process by process); the repeats are shared among rounds.
    rounds = max(1, min(args.rounds, args.repeats))
    for rnd in range(rounds):
        # each runtime in its own process (a timing server), so that neither's threads or
        # thread placement can affect the other's beyond sharing the CPUs
        kr = Server(args, "kiln", model, threads, precision)
        orr = Server(args, "ort", model, threads, precision)
        for _ in range(args.warmup):
            kr.run()
            orr.run()
        # How long each runtime keeps a CPU busy after a run (idle threads spinning): its
        # process's CPU time during a pause that follows one of its runs.
        spin = {"kiln": float(kr.ask("spin")), "ort": float(orr.ask("spin"))}
        spins.append(spin)
        if args.gap_ms is None:
            # the pause must outlast the other runtime's spinning, with a margin (spinning
            # threads that share the CPUs with a run spin for longer in wall time)
            gap_ms = max(20.0, 2.0 * max(spin.values()) + 10.0)
        else:
            gap_ms = args.gap_ms
        gap = gap_ms / 1e3
        n = args.repeats * (rnd + 1) // rounds - args.repeats * rnd // rounds
        for _ in range(n):
            # a pause before each timed call, so that the other runtime's idle threads (ORT's
            # spin for a while after each run, by default) are not running during it
            time.sleep(gap)
            tk.append(kr.run())
            time.sleep(gap)
            to.append(orr.run())
        if rnd == 0:
            tmp = tempfile.mkdtemp(prefix="kiln_bench_out_")
            agree = agreement(kr.outputs(tmp, "kiln"), orr.outputs(tmp, "ort"))
        kr.close()
        orr.close()
    spin = {k: statistics.median(sp[k] for sp in spins) for k in ("kiln", "ort")}
    row = {"model": model, "label": label, "variant": variant, "batch": batch,
           "threads": threads, "precision": precision, "kiln_ms": statistics.median(tk),
           "ort_ms": statistics.median(to), "kiln_build_s": builds[(model, threads, precision)][0],
           "kiln_build_rss_mb": builds[(model, threads, precision)][1],
           "agreement": agree,
           "kiln_all_ms": tk, "ort_all_ms": to, "gap_ms": gap_ms,
           "kiln_spin_ms": spin["kiln"], "ort_spin_ms": spin["ort"]}
    row["ratio"] = row["kiln_ms"] / row["ort_ms"]
    row["rounds"] = rounds
    row["kiln_rss_mb"], row["ort_rss_mb"] = rss[(model, threads, precision)]
    return row


def fmt_mb(v):
    return "?" if v is None else "%.0f" % v


def table(rows):
    lines = ["| model | batch | threads | kiln precision | kiln median (ms) | ORT fp32 median (ms) |"
             " kiln/ORT | kiln peak RSS (MB) | ORT peak RSS (MB) | max abs diff / max\\|ort\\| |"
             " kiln build (s) | spin after a run, kiln / ORT (ms CPU) | pause (ms) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %d | %d | %s | %.1f | %.1f | %.2f | %s | %s | %.1e | %.1f | %.1f / %.1f | %.0f |" % (
            r["label"], r["batch"], r["threads"], r["precision"], r["kiln_ms"], r["ort_ms"],
            r["ratio"], fmt_mb(r["kiln_rss_mb"]), fmt_mb(r["ort_rss_mb"]), r["agreement"],
            r["kiln_build_s"], r["kiln_spin_ms"], r["ort_spin_ms"], r["gap_ms"]))
    return "\n".join(lines)


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write_md(path, args, rows, baseline_mb, ort_version, kiln_version, command, started):
    lines = [
        "## kiln vs ONNX Runtime on CPU",
        "",
        "Written by `bench/cpu_vs_ort.py` from one real run (nothing edited by hand).",
        "",
        "- Date: %s (UTC)" % started,
        "- Machine: %s, %d cores visible to the process (`os.cpu_count()`)" % (cpu_model(),
                                                                              os.cpu_count()),
        "- kiln %s (libkiln: `%s`), ONNX Runtime %s (CPUExecutionProvider), numpy %s, Python %s"
        % (kiln_version, os.path.relpath(args.lib, ROOT), ort_version, np.__version__,
           platform.python_version()),
        "- Command: `%s`" % command,
        "",
        "**The machines are shared with other jobs and their speed drifts during a run, so the "
        "absolute times are only indicative; what matters is the ratio kiln/ORT, measured in "
        "the same run with the two runtimes alternating (kiln, ORT, kiln, ORT, ...), each in "
        "its own timing process.** "
        "A ratio below 1 means kiln is faster.",
        "",
        table(rows),
        "",
        "Method: for each row, one kiln engine is built from the ONNX file (with the row's "
        "thread count and precision; models with a dynamic batch get the profile min = opt = "
        "max = the row's batch; tuning on) in a separate process and saved, as kiln is meant "
        "to be used (build ahead of time, deploy the engine file); the benchmark loads that "
        "file. One ORT session (intra_op_num_threads = the same thread count, inter_op_num_threads "
        "= 1, sequential execution, ORT_ENABLE_ALL) is created. Each runtime runs in its own "
        "process, driven over a pipe by the script, so that the threads of one (and where they "
        "are placed) cannot affect the other beyond sharing the CPUs, and each row is timed in "
        "%d rounds of fresh processes that share the repeats (where the OS first puts a "
        "process's threads tends to stick for the process's life); each is warmed up %d times, then "
        "they run alternately %d times each, with a pause before each timed call so that the "
        "other runtime's idle threads are not running during it: ORT's worker threads spin after "
        "each run by default, and the \"spin after a run\" column gives the process CPU time each "
        "runtime spent in a 200 ms pause right after one of its runs (measured per row, before "
        "timing); the pause is %s. The medians of the run calls are reported. "
        "Inputs are the reference inputs written by `scripts/gen_models.py` (seeded random "
        "data for batch 8). Peak RSS is `ru_maxrss` of a child process that loads only that "
        "runtime, loads the engine file (kiln) / creates the session from the ONNX file (ORT) "
        "and runs it 3 times; it includes the Python interpreter, numpy and the inputs (a "
        "child that loads only those peaks at %s MB). The kiln build's own time is in the last "
        "column; its peak RSS is in the JSON output. bf16 rows compare a kiln bf16 engine with "
        "ORT in fp32 (ORT has no bf16 CPU path). Agreement is max |kiln - ORT| / max |ORT| over "
        "all outputs."
        % (args.rounds, args.warmup, args.repeats,
           "%g ms (--gap-ms)" % args.gap_ms if args.gap_ms is not None else
           "twice the larger of the two plus 10 ms, at least 20 ms (column \"pause\")",
           fmt_mb(baseline_mb)),
        "",
        "Models (`scripts/gen_models.py`, seeded weights): ResNet-50 = resnet50_op17_fixed "
        "(batch 1) and resnet50_op17_dyn (batch 8), MobileNetV2 = mobilenetv2_op17_fixed, "
        "BERT-base seq 128 = bert_op13_fixed.",
        "",
    ]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from mdsection import write_section
    write_section(path, "cpu_vs_ort", "\n".join(lines))


def default_lib():
    for d in ("build-bench", "build"):
        p = os.path.join(ROOT, d, "libkiln.so")
        if os.path.isfile(p):
            return p
    return os.path.join(ROOT, "build", "libkiln.so")


def main():
    ap = argparse.ArgumentParser(description="Benchmark kiln against ONNX Runtime on CPU.")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS),
                    help="comma-separated rows: %s (default: all)" % ",".join(MODELS))
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--precisions", default="fp32",
                    help="comma-separated kiln engine precisions: fp32, fp32-fast (fp32 with "
                         "kiln's fast math: Winograd convolutions allowed), bf16 (default fp32); "
                         "ORT always runs fp32")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs of each runtime (default 20)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed runs of each first (default 3)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="fresh pairs of runtime processes per row, sharing the repeats (default 3)")
    ap.add_argument("--gap-ms", type=float, default=None,
                    help="pause before each timed call, in ms; default: per row, twice the "
                         "longest CPU time either runtime spends spinning after a run "
                         "(measured first) plus 10 ms, at least 20, so that the other "
                         "runtime's spinning threads are idle during a timed call")
    ap.add_argument("--quick", action="store_true",
                    help="test the script: MobileNetV2 only, 5 repeats, 1 warm-up")
    ap.add_argument("--write", metavar="FILE", help="also write the results as markdown (BENCHMARKS.md)")
    ap.add_argument("--json", metavar="FILE", help="also write the raw results as JSON")
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "build-bench", "models"),
                    help="gen_models.py output folder (missing variants are generated)")
    ap.add_argument("--lib", default=None, help="libkiln.so (default: build-bench/ or build/)")
    ap.add_argument("--_child", dest="child", choices=["kiln-build", "kiln", "ort", "base"],
                    help=argparse.SUPPRESS)
    ap.add_argument("--_child-precision", dest="child_precision", help=argparse.SUPPRESS)
    ap.add_argument("--_child-engine", dest="child_engine", help=argparse.SUPPRESS)
    ap.add_argument("--_child-model", dest="child_model", help=argparse.SUPPRESS)
    ap.add_argument("--_child-threads", dest="child_threads", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--_serve", dest="serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.lib = os.path.abspath(args.lib or default_lib())
    args.models_dir = os.path.abspath(args.models_dir)
    if args.child:
        return child_main(args)

    if args.quick:
        args.models = "mobilenetv2"
    args.repeats = args.repeats or (5 if args.quick else 20)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        if m not in MODELS:
            ap.error("unknown model '%s' (known: %s)" % (m, ", ".join(MODELS)))
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    if not threads or min(threads) < 1:
        ap.error("--threads: positive integers, comma-separated")

    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    for p in precisions:
        if p not in PRECISIONS:
            ap.error("--precisions: unknown precision '%s' (known: %s)" % (p, ", ".join(PRECISIONS)))

    manifest = ensure_models(args.models_dir, sorted({MODELS[m][0] for m in models}))
    import tempfile
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as engine_dir:
        args.engine_dir = engine_dir
        return bench_all(args, models, threads, precisions, manifest)


def bench_all(args, models, threads, precisions, manifest):
    cases = [(m, t, p) for m in models for t in threads for p in precisions]
    # Engines first, each built in its own process and saved (kiln's deployment model).
    builds = {}
    for m, t, p in cases:
        print("building %s threads %d %s ..." % (m, t, p), end=" ", flush=True)
        r = child_rss(args, "kiln-build", m, t, p, want="*")
        builds[(m, t, p)] = (r["build_s"], r["maxrss_kib"] / 1024.0)
        print("%.1f s, peak RSS %.0f MB" % builds[(m, t, p)], flush=True)
    # Peak RSS next, while this process has loaded neither runtime (see child_rss).
    print("peak RSS (child processes) ...", flush=True)
    ort_rss = {(m, t): child_rss(args, "ort", m, t) for m in models for t in threads}
    rss = {(m, t, p): (child_rss(args, "kiln", m, t, p), ort_rss[(m, t)]) for m, t, p in cases}
    baseline = child_rss(args, "base", models[0], 1)
    import onnxruntime as ort
    K = load_kiln_lib(args.lib)
    kiln_version = K.lib().kiln_version_string().decode()
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    command = " ".join(shlex.quote(a) for a in [os.path.relpath(sys.executable, ROOT)
                                                 if sys.executable.startswith(ROOT) else sys.executable,
                                                 os.path.relpath(os.path.abspath(__file__), ROOT)]
                       + sys.argv[1:])
    print("kiln %s (%s), onnxruntime %s, %s, %d cpus; %d warm-up + %d alternating runs each"
          % (kiln_version, args.lib, ort.__version__, cpu_model(), os.cpu_count(), args.warmup,
             args.repeats), flush=True)
    rows = []
    for m, t, p in cases:
        t0 = time.time()
        r = bench_row(args, m, t, p, rss, builds)
        rows.append(r)
        print("  %-12s batch %d threads %d %s: kiln %.1f ms, ORT %.1f ms, ratio %.2f, "
              "RSS %s / %s MB, diff %.1e, spin %.1f / %.1f ms, pause %.0f ms  (%.0fs)" % (
                  m, r["batch"], t, p, r["kiln_ms"], r["ort_ms"], r["ratio"],
                  fmt_mb(r["kiln_rss_mb"]), fmt_mb(r["ort_rss_mb"]), r["agreement"],
                  r["kiln_spin_ms"], r["ort_spin_ms"], r["gap_ms"], time.time() - t0), flush=True)
    print()
    print(table(rows))
    print()
    print("peak RSS includes Python + numpy + inputs (baseline child: %s MB)" % fmt_mb(baseline))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": started, "command": command, "rows": rows,
                       "baseline_rss_mb": baseline}, f, indent=1)
    if args.write:
        write_md(args.write, args, rows, baseline, ort.__version__, kiln_version, command, started)
        print("wrote %s" % args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
