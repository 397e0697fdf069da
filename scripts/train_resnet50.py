#!/usr/bin/env python3
"""Train torchvision's ResNet-50 on the procedural task of synthetic_images.py and
write its weights, so that accuracy checks can use a trained network, not only a
randomly initialised one (a random ResNet-50 turns a 2^-9 relative change of its
input into a few percent change of its output; trained networks are far calmer).

Needs a CUDA GPU for a useful run (a few minutes on an H200); --device cpu with a
small --size and --steps only checks that the script works.

  python3 scripts/train_resnet50.py --out DIR [--steps 2000] [--batch 256]

Writes DIR/resnet50_trained_<k>.npz (convolution and FC weights as float16, every
other tensor, and any weight float16 cannot hold, as float32, split so that no
file passes 15 MB; a diverged run, with a weight not finite, writes nothing) and DIR/train.json
(the settings, the time taken and the held-out accuracy). load_weights() reads
them back into a torchvision ResNet-50 (torch 1.13 or later).
"""
import argparse
import glob
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synthetic_images  # noqa: E402

CHUNK_BYTES = 15_000_000


def save_weights(model, out):
    chunks, cur, size = [], {}, 0
    for name, t in model.state_dict().items():
        a = t.detach().cpu().numpy()
        if name.endswith("num_batches_tracked"):
            continue
        a = a.astype(np.float32)
        if not np.isfinite(a).all():
            raise ValueError("tensor %s is not finite: the training diverged, nothing written" % name)
        if a.ndim >= 2 and np.abs(a).max() <= np.finfo(np.float16).max:
            a = a.astype(np.float16)  # else kept float32: it would overflow float16
        if cur and size + a.nbytes > CHUNK_BYTES:
            chunks.append(cur)
            cur, size = {}, 0
        cur[name] = a
        size += a.nbytes
    chunks.append(cur)
    os.makedirs(out, exist_ok=True)
    for old in glob.glob(os.path.join(out, "resnet50_trained_*.npz")):
        os.unlink(old)
    for k, c in enumerate(chunks):
        path = os.path.join(out, "resnet50_trained_%d.npz" % k)
        with open(path + ".tmp", "wb") as f:
            np.savez(f, **c)
        os.replace(path + ".tmp", path)
    return len(chunks)


def load_weights(model, directory):
    """Loads save_weights' files into a torchvision ResNet-50, as float32."""
    files = sorted(glob.glob(os.path.join(directory, "resnet50_trained_*.npz")))
    if not files:
        raise FileNotFoundError("no resnet50_trained_*.npz in %s" % directory)
    state = {}
    for f in files:
        with np.load(f) as z:
            for k in z.files:
                state[k] = torch.from_numpy(z[k].astype(np.float32))
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise ValueError("weights in %s do not fit: missing %s, unexpected %s"
                         % (directory, missing[:5], unexpected[:5]))
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--max-seconds", type=float, default=1e9,
                    help="stop early (the schedule is by steps) past this much training time")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    import torchvision
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
    table = synthetic_images.class_table()
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-5},
                           {"params": no_decay, "weight_decay": 0}],
                          lr=args.lr, momentum=0.9, nesterov=True)
    warm = max(1, args.steps // 20)

    def lr_at(step):
        if step < warm:
            return args.lr * (step + 1) / warm
        return 0.5 * args.lr * (1 + math.cos(math.pi * (step - warm) / max(1, args.steps - warm)))

    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    gen = torch.Generator().manual_seed(args.seed)
    model.train()
    t0 = time.time()
    done = 0
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        y = torch.randint(0, synthetic_images.NUM_CLASSES, (args.batch,), generator=gen)
        x = synthetic_images.render(y, table, args.size, gen, device=dev)
        x = x.contiguous(memory_format=torch.channels_last)
        y = y.to(dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        done = step + 1
        if step % 100 == 0 or step == args.steps - 1:
            print("step %5d  lr %.3f  loss %.3f  %.0f s" % (step, lr_at(step), loss.item(),
                                                          time.time() - t0), flush=True)
        if time.time() - t0 > args.max_seconds:
            print("stopping at step %d: --max-seconds reached" % done, flush=True)
            break
    seconds = time.time() - t0
    model.eval()
    correct, total = 0, 0
    egen = torch.Generator().manual_seed(args.seed + 1000)
    with torch.no_grad():
        for _ in range(4):
            y = torch.randint(0, synthetic_images.NUM_CLASSES, (min(args.batch, 256),), generator=egen)
            x = synthetic_images.render(y, table, args.size, egen, device=dev)
            correct += int((model(x).argmax(1).cpu() == y).sum())
            total += y.numel()
    model = model.float().to(memory_format=torch.contiguous_format)
    try:
        n = save_weights(model, args.out)
    except ValueError as e:
        sys.exit("train_resnet50.py: error: %s" % e)
    info = {"steps_planned": args.steps, "steps_done": done, "batch": args.batch, "size": args.size,
            "lr": args.lr, "seed": args.seed, "seconds": round(seconds, 1),
            "heldout_top1": correct / total, "files": n, "torch": torch.__version__}
    with open(os.path.join(args.out, "train.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
