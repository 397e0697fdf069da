#!/usr/bin/env python3
"""kiln vs PyTorch on one NVIDIA GPU, fp16, in one process.

For ResNet-50 (torchvision, random weights) and BERT-base (transformers
BertModel from its default config, random weights, sequence 128) by default,
or the architecture sweep (`--models all`: deeper ResNet, MobileNetV3,
EfficientNet, RegNet, VGG, ConvNeXt, ViT, Swin, GPT-2 small, DistilBERT,
T5-small's encoder; BatchNorm statistics calibrated on random batches), at
each batch size: exports the fp32 model to ONNX with the torch at hand
(dynamo=False), builds a kiln fp16 CUDA engine for that fixed shape (C API
through ctypes; `--max-batch N`: for batches 1 to N, tuned at the row's,
as a server's engine is), and measures in the same process

  * PyTorch eager, fp16 (model.half())
  * torch.compile(mode="reduce-overhead"), fp16
  * kiln, running on torch CUDA tensors (device pointers, torch's current
    stream; no copies)

with CUDA events: `--repeats` rounds, the methods alternating inside each
round, each round timing `--iters` back-to-back calls; the median round is
reported. kiln's outputs are checked against PyTorch's fp32 outputs (max abs
error / max |ref|, next to the same number for PyTorch's own fp16 eager; the
target is at most twice torch's). Kernels per inference are counted with
torch.profiler (kernels inside CUDA Graph replays one by one).
Writes a markdown table (with the command that made it) to --write, and a
per-kernel profile of each kiln case (torch.profiler) to --profile-dir.

Usage (GPU machine; libkiln.so built with CUDA):
  python3 bench/gpu_vs_torch.py --lib build-gpu/libkiln.so --write BENCH.md
  python3 bench/gpu_vs_torch.py --lib build-gpu/libkiln.so --write BENCH.md --models all --batches 1,32
  python3 bench/gpu_vs_torch.py --lib build-gpu/libkiln.so --write BENCH.md --max-batch 64
  python3 bench/gpu_vs_torch.py --lib build-gpu/libkiln.so --write AB.md --models bert --disable-pass share_attention_mask
"""
import argparse
import copy
import ctypes
import os
import shlex
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

F32, I64, F16 = 1, 7, 10
CUDA = 1
FP16 = 2


class Kiln:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        L = self.lib
        p, c_int, c_sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        i64p = ctypes.POINTER(ctypes.c_int64)
        sigs = {
            "kiln_last_error": ([], ctypes.c_char_p),
            "kiln_model_load_onnx": ([ctypes.c_char_p, ctypes.POINTER(p)], c_int),
            "kiln_model_free": ([p], None),
            "kiln_builder_create": ([ctypes.POINTER(p)], c_int),
            "kiln_builder_free": ([p], None),
            "kiln_builder_set_device": ([p, c_int, c_int], c_int),
            "kiln_builder_set_precision": ([p, c_int], c_int),
            "kiln_builder_set_profile": ([p, ctypes.c_char_p, c_int, i64p, i64p, i64p], c_int),
            "kiln_builder_disable_pass": ([p, ctypes.c_char_p], c_int),
            "kiln_build": ([p, p, ctypes.POINTER(p)], c_int),
            "kiln_engine_free": ([p], None),
            "kiln_engine_describe": ([p, c_int], ctypes.c_char_p),
            "kiln_context_create": ([p, ctypes.POINTER(p)], c_int),
            "kiln_context_free": ([p], None),
            "kiln_context_set_stream": ([p, p], c_int),
            "kiln_context_set_input": ([p, ctypes.c_char_p, c_int, c_int, i64p, p], c_int),
            "kiln_context_set_output": ([p, ctypes.c_char_p, p, c_sz], c_int),
            "kiln_context_run": ([p], c_int),
        }
        for name, (args, res) in sigs.items():
            f = getattr(L, name)
            f.argtypes, f.restype = args, res

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: {self.lib.kiln_last_error().decode()}")

    def build(self, onnx_path, shapes, precision, max_batch=0, disabled=()):
        """An engine for these shapes; max_batch > 0: for batches 1 to max_batch
        (dim 0 of every input) instead, tuned at the given shapes (the opt);
        the graph passes named in `disabled` off ('kiln debug passes')."""
        L, p = self.lib, ctypes.c_void_p
        m, b, e = p(), p(), p()
        self.check(L.kiln_model_load_onnx(onnx_path.encode(), ctypes.byref(m)), "load")
        try:
            self.check(L.kiln_builder_create(ctypes.byref(b)), "builder")
            self.check(L.kiln_builder_set_device(b, CUDA, 0), "device")
            self.check(L.kiln_builder_set_precision(b, precision), "precision")
            for name in disabled:
                self.check(L.kiln_builder_disable_pass(b, name.encode()), "disable pass " + name)
            for name, shape in shapes.items():
                arr = (ctypes.c_int64 * len(shape))(*shape)
                lo, hi = list(shape), list(shape)
                if max_batch > 0:
                    lo[0], hi[0] = 1, max(max_batch, shape[0])
                lo, hi = (ctypes.c_int64 * len(shape))(*lo), (ctypes.c_int64 * len(shape))(*hi)
                self.check(L.kiln_builder_set_profile(b, name.encode(), len(shape), lo, arr, hi), "profile")
            self.check(L.kiln_build(b, m, ctypes.byref(e)), "build")
        finally:
            L.kiln_builder_free(b)
            L.kiln_model_free(m)
        return e


class KilnRunner:
    """A context bound to torch CUDA tensors (inputs and outputs), on torch's stream."""

    def __init__(self, k, engine, inputs, outputs):
        self.k, self.e = k, engine
        L = k.lib
        self.c = ctypes.c_void_p()
        k.check(L.kiln_context_create(engine, ctypes.byref(self.c)), "context")
        k.check(L.kiln_context_set_stream(self.c, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)),
                "stream")
        self.keep = []
        for name, t in inputs.items():
            dt = {torch.float32: F32, torch.int64: I64, torch.float16: F16}[t.dtype]
            dims = (ctypes.c_int64 * t.dim())(*t.shape)
            self.keep.append(dims)
            k.check(L.kiln_context_set_input(self.c, name.encode(), dt, t.dim(), dims,
                                             ctypes.c_void_p(t.data_ptr())), f"input {name}")
        for name, t in outputs.items():
            k.check(L.kiln_context_set_output(self.c, name.encode(), ctypes.c_void_p(t.data_ptr()),
                                              t.numel() * t.element_size()), f"output {name}")
        self.outputs = outputs

    def __call__(self):
        self.k.check(self.k.lib.kiln_context_run(self.c), "run")
        return self.outputs

    def close(self):
        self.k.lib.kiln_context_free(self.c)


def rel_err(a, ref):
    a, ref = a.float(), ref.float()
    m = ref.abs().max().item()
    return (a - ref).abs().max().item() / (m if m > 0 else 1.0)


def time_methods(methods, iters, repeats):
    """median ms per call of each method; the methods alternate inside each round"""
    times = {name: [] for name in methods}
    for _ in range(repeats):
        for name, fn in methods.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) / iters)
    return {name: statistics.median(v) for name, v in times.items()}


def calibrated(m):
    """BatchNorm statistics estimated on random batches (a fresh torchvision model has
    running stats 0/1 whatever its activations are, so deep nets' outputs shrink below
    fp16's range and reduced-precision errors relative to them mean nothing)."""
    bns = [mod for mod in m.modules() if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return m.eval()
    for mod in bns:
        mod.reset_running_stats()
        mod.momentum = None
    m.train()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for _ in range(3):
            m(torch.randn(4, 3, 224, 224, generator=g))
    return m.eval()


def no_zero_weights(m):
    """Weight matrices a constructor leaves all zero (ViT's classifier head) get small
    random values: otherwise every output is the bias and every error 0."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() >= 2 and not p.any():
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    return m


def make_vision(ctor_name):
    def make():
        import torchvision
        torch.manual_seed(0)
        m = calibrated(no_zero_weights(getattr(torchvision.models, ctor_name)()))

        def inputs(batch, dev="cpu"):
            g = torch.Generator().manual_seed(1)
            return {"x": torch.randn(batch, 3, 224, 224, generator=g).to(dev)}

        return m, inputs, ["y"], {"x": {0: "batch"}}, {"y": {0: "batch"}}
    return make


class FirstOutput(torch.nn.Module):
    """A transformers model called with keyword inputs, returning last_hidden_state."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *args, **kwargs):
        kwargs.update(zip(self.names, args))
        return self.model(**kwargs).last_hidden_state


def make_text(kind):
    def make():
        import transformers as tf
        torch.manual_seed(0)
        seq = 128
        if kind == "bert":
            cfg = tf.BertConfig()  # bert-base: 12 layers, hidden 768, 12 heads
            m = tf.BertModel(cfg, add_pooling_layer=False)
        elif kind == "distilbert":
            cfg = tf.DistilBertConfig()
            m = tf.DistilBertModel(cfg)
        elif kind == "gpt2":
            cfg = tf.GPT2Config()  # GPT-2 small
            m = tf.GPT2Model(cfg)
        elif kind == "t5enc":
            cfg = tf.T5Config(d_model=512, d_ff=2048, num_layers=6, num_heads=8)  # t5-small's encoder
            m = tf.T5EncoderModel(cfg)
        else:
            raise ValueError(kind)
        names = ["input_ids"] if kind == "gpt2" else ["input_ids", "attention_mask"]

        def inputs(batch, dev="cpu"):
            g = torch.Generator().manual_seed(1)
            out = {"input_ids": torch.randint(0, cfg.vocab_size, (batch, seq), generator=g)}
            if "attention_mask" in names:
                mask = torch.ones(batch, seq, dtype=torch.int64)
                mask[batch // 2:, 96:] = 0  # padding in half the batch
                out["attention_mask"] = mask
            return {n: t.to(dev) for n, t in out.items()}

        axes = {n: {0: "batch"} for n in names}
        return FirstOutput(m.eval(), names).eval(), inputs, ["y"], axes, {"y": {0: "batch"}}
    return make


# The first two are the headline cases; the rest, the architecture sweep
# (--models all): CNNs of several families, vision transformers, text transformers.
MODELS = {
    "resnet50": make_vision("resnet50"),
    "bert": make_text("bert"),
    "resnet152": make_vision("resnet152"),
    "mobilenet_v3_large": make_vision("mobilenet_v3_large"),
    "efficientnet_b0": make_vision("efficientnet_b0"),
    "regnet_y_1_6gf": make_vision("regnet_y_1_6gf"),
    "vgg16": make_vision("vgg16"),
    "convnext_tiny": make_vision("convnext_tiny"),
    "vit_b_16": make_vision("vit_b_16"),
    "swin_t": make_vision("swin_t"),
    "gpt2": make_text("gpt2"),
    "distilbert": make_text("distilbert"),
    "t5enc": make_text("t5enc"),
}


def count_kernels(fn, runs=3):
    """CUDA kernels launched per call of fn (torch.profiler; kernels inside CUDA Graph
    replays are counted one by one), and the profile for the per-kernel table."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    n = 0
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA and not ev.name.startswith("Memcpy") \
                and not ev.name.startswith("Memset"):
            n += 1
    return n / runs, prof





def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default="build-gpu/libkiln.so", help="libkiln.so built with CUDA")
    ap.add_argument("--write", required=True, help="markdown file to write the table to")
    ap.add_argument("--models", default="resnet50,bert",
                    help="comma-separated, or 'all' for: " + ",".join(MODELS))
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--iters", type=int, default=20, help="calls per timed round")
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds (median)")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--budget", type=float, default=420.0,
                    help="seconds; cases not started by then are skipped")
    ap.add_argument("--profile-dir", default=None, help="write kiln's per-kernel profiles here")
    ap.add_argument("--max-batch", type=int, default=0,
                    help="build kiln's engines for batches 1 to this (a server's engine; opt = the row's "
                         "batch) instead of the row's fixed shape")
    ap.add_argument("--disable-pass", action="append", default=[], metavar="NAME",
                    help="switch kiln's graph pass NAME off (repeatable; 'kiln debug passes' lists them): "
                         "an A/B of a pass, e.g. share_attention_mask")
    args = ap.parse_args()
    t_start = time.time()
    cmd = "python3 " + " ".join(shlex.quote(a) for a in sys.argv)
    k = Kiln(args.lib)
    dev = torch.device("cuda")
    # one non-default stream for everything: torch's work and kiln's (kiln_context_set_stream)
    torch.cuda.set_stream(torch.cuda.Stream())
    gpu = torch.cuda.get_device_name(0)
    tmp = tempfile.mkdtemp(prefix="kiln_bench_")
    rows, notes = [], []
    names = list(MODELS) if args.models == "all" else args.models.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {','.join(unknown)}; known: {','.join(MODELS)}")
    for model_name in names:
        if time.time() - t_start > args.budget:
            notes.append(f"{model_name}: skipped (time budget)")
            continue
        try:
            model, make_inputs, out_names, in_axes, out_axes = MODELS[model_name]()
        except Exception as ex:  # e.g. transformers missing
            notes.append(f"{model_name}: skipped ({type(ex).__name__}: {ex})")
            print(notes[-1], flush=True)
            continue
        onnx_path = os.path.join(tmp, model_name + ".onnx")
        ex_in = make_inputs(2)
        t0 = time.time()
        try:
            torch.onnx.export(model, tuple(ex_in.values()), onnx_path, opset_version=17, dynamo=False,
                              input_names=list(ex_in), output_names=out_names,
                              dynamic_axes={**in_axes, **out_axes})
        except Exception as ex:
            notes.append(f"{model_name}: ONNX export failed ({type(ex).__name__}: {str(ex)[:200]})")
            print(notes[-1], flush=True)
            continue
        print(f"{model_name}: exported in {time.time() - t0:.1f} s", flush=True)
        m32 = model.to(dev)
        m16 = copy.deepcopy(m32).half().eval()
        compiled = None
        for batch in [int(b) for b in args.batches.split(",")]:
            if time.time() - t_start > args.budget:
                notes.append(f"{model_name} b{batch}: skipped (time budget)")
                continue
            ins = make_inputs(batch, dev)
            ins16 = {n: (t.half() if t.is_floating_point() else t) for n, t in ins.items()}
            with torch.inference_mode():
                ref = m32(**ins).float()
                eager16 = lambda: m16(**ins16)
                out16 = eager16()
            t0 = time.time()
            try:
                e = k.build(onnx_path, {n: list(t.shape) for n, t in ins.items()}, FP16, args.max_batch, args.disable_pass)
            except RuntimeError as ex:
                notes.append(f"{model_name} b{batch}: kiln build failed: {str(ex)[:300]}")
                print(notes[-1], flush=True)
                continue
            t_build = time.time() - t0
            desc = k.lib.kiln_engine_describe(e, 0).decode()
            fallback = [l for l in desc.splitlines() if l.startswith("cpu fallback")]
            y = torch.empty(ref.shape, dtype=torch.float32, device=dev)
            runner = KilnRunner(k, e, ins, {out_names[0]: y})
            runner()
            torch.cuda.synchronize()
            err_kiln, err_t16 = rel_err(y, ref), rel_err(out16, ref)
            methods = {"eager": lambda: eager16(), "kiln": runner}
            comp_note = ""
            if not args.no_compile and time.time() - t_start < args.budget:
                try:
                    t0 = time.time()
                    torch._dynamo.reset()  # a static graph for this batch size
                    compiled = torch.compile(m16, mode="reduce-overhead")
                    with torch.inference_mode():
                        for _ in range(3):
                            compiled(**ins16)
                    torch.cuda.synchronize()
                    comp_note = f"compile+warmup {time.time() - t0:.0f} s"

                    def run_compiled():
                        with torch.inference_mode():
                            return compiled(**ins16)
                    methods["compile"] = run_compiled
                except Exception as ex:
                    notes.append(f"{model_name} b{batch}: torch.compile failed: {type(ex).__name__}: {ex}")
            with torch.inference_mode():
                t = time_methods(methods, args.iters, args.repeats)
            kernels, prof = count_kernels(runner)
            kernels_c = None
            if "compile" in methods:
                with torch.inference_mode():
                    kernels_c, _ = count_kernels(methods["compile"])
            if args.profile_dir:
                os.makedirs(args.profile_dir, exist_ok=True)
                with open(os.path.join(args.profile_dir, f"kiln_{model_name}_b{batch}.txt"), "w") as f:
                    f.write(f"kiln {model_name} batch {batch}, 3 runs, by CUDA kernel\n")
                    f.write(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25))
                    f.write("\n" + desc)
            tc = t.get("compile")
            row = (model_name, batch, t["eager"], tc, t["kiln"], err_kiln, err_t16, t_build, kernels, kernels_c)
            rows.append(row)
            print(f"{model_name} b{batch}: eager {t['eager']:.3f} ms, compile "
                  f"{'%.3f' % tc if tc else '-'} ms, kiln {t['kiln']:.3f} ms"
                  f"{' (%.2fx compile)' % (t['kiln'] / tc) if tc else ''}; err kiln {err_kiln:.1e} "
                  f"torch-fp16 {err_t16:.1e}; kernels/inference kiln {kernels:.0f} compile "
                  f"{'%.0f' % kernels_c if kernels_c is not None else '-'}; kiln build {t_build:.1f} s; {comp_note}; "
                  f"{fallback[0] if fallback else ''}", flush=True)
            runner.close()
            k.lib.kiln_engine_free(e)
        del m32, m16, compiled
        torch.cuda.empty_cache()
    import io
    f = io.StringIO()
    f.write(f"## kiln vs PyTorch, fp16, {gpu}\n\n")
    f.write(f"torch {torch.__version__}; CUDA events, median of {args.repeats} rounds of "
            f"{args.iters} calls; random weights; error = max abs error / max |fp32 PyTorch output|"
            + (f"; kiln's engines built for batches 1 to {args.max_batch} (opt: the row's batch)"
               if args.max_batch > 0 else "") + ".\n\n")
    f.write("| model | batch | eager fp16 (ms) | torch.compile reduce-overhead (ms) | kiln fp16 (ms) "
            "| kiln / compile | kiln error | torch fp16 error | error within 2x torch's | kernels / inference "
            "(kiln, compile) | kiln build (s) |\n")
    f.write("|---|---|---|---|---|---|---|---|---|---|---|\n")
    for (mn, b, te, tc, tk, ek, et, tb, kk, kc) in rows:
        ratio = f"{tk / tc:.2f}" if tc else "-"
        ok = "yes" if ek <= 2 * et else "NO"
        f.write(f"| {mn} | {b} | {te:.3f} | {'%.3f' % tc if tc else '-'} | {tk:.3f} | {ratio} "
                f"| {ek:.1e} | {et:.1e} | {ok} | {kk:.0f}, {'%.0f' % kc if kc is not None else '-'} "
                f"| {tb:.1f} |\n")
    for n in notes:
        f.write(f"\n{n}\n")
    f.write(f"\nMade by: `{cmd}`\n")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from mdsection import write_section
    write_section(args.write, "gpu_vs_torch", f.getvalue())
    print(f"wrote {args.write} ({time.time() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
