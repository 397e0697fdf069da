#!/usr/bin/env python3
"""How much a ResNet-50 moves under bf16 rounding, in PyTorch alone: for the random
test model and for trained weights (scripts/train_resnet50.py), per input, the
relative change of the output when (a) only the input is rounded to bf16 and the
network runs in fp32, (b) the network runs under bf16 autocast. Prints max abs /
max|ref| and the L2 ratio, the measures of bench/bf16_accuracy.py. Without
--weights the network is gen_models.py's seeded random ResNet-50 (BatchNorm
statistics calibrated on random inputs), the model of the test suite.

  python3 scripts/bf16_sensitivity.py [--weights DIR] [--device cuda] [--n 4]
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import synthetic_images  # noqa: E402
import train_resnet50  # noqa: E402
from bf16_accuracy import errors  # noqa: E402  (the same two measures)


def rel(y, ref):
    return errors(y.detach().cpu().numpy(), ref.detach().cpu().numpy())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", default="")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n", type=int, default=4)
    args = ap.parse_args()
    import torchvision
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(args.device)
    if args.weights:
        model = train_resnet50.load_weights(torchvision.models.resnet50(), args.weights)
    else:
        import gen_models
        model = gen_models.make_family("resnet50")[0]
    model = model.eval().to(dev)
    g = torch.Generator().manual_seed(99)
    table = synthetic_images.class_table()
    y = torch.randint(0, 1000, (args.n,), generator=g)
    inputs = {"synthetic": synthetic_images.render(y, table, 224, g),
              "randn": torch.randn(args.n, 3, 224, 224, generator=g)}
    with torch.no_grad():
        for kind, x in inputs.items():
            for i in range(args.n):
                xi = x[i:i + 1].to(dev)
                ref = model(xi)
                a = rel(model(xi.bfloat16().float()), ref)
                with torch.autocast(dev.type, dtype=torch.bfloat16):
                    b = rel(model(xi).float(), ref)
                print("%-9s %d  input rounded: %.4f %.4f   autocast bf16: %.4f %.4f   top1 %d"
                      % (kind, i, a[0], a[1], b[0], b[1], int(ref.argmax())), flush=True)


if __name__ == "__main__":
    sys.exit(main())
