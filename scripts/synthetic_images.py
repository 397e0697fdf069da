"""A procedural 1000-class image task, for training test networks without a dataset.

Each class owns three sinusoidal gratings (a spatial frequency, an orientation and
a colour each). A sample of class c is the sum of c's gratings with random phases
and amplitudes, a random colour cast, a random Gaussian blob that carries no class
information, and pixel noise; the image is roughly zero-mean and unit-variance per
channel, as a normalised ImageNet image is. Nothing is downloaded: the classes come
from a seed, the samples from a torch.Generator, on any device.

Used by scripts/train_resnet50.py (training, on a GPU) and bench/bf16_accuracy.py
(held-out inputs for the trained network's accuracy check).
"""
import math

import torch

NUM_CLASSES = 1000
GRATINGS = 3


def class_table(seed=2024, num_classes=NUM_CLASSES):
    """Per-class grating parameters: frequency (cycles per image), angle, colour."""
    g = torch.Generator().manual_seed(seed)
    freq = 2.0 + 22.0 * torch.rand(num_classes, GRATINGS, generator=g)
    angle = math.pi * torch.rand(num_classes, GRATINGS, generator=g)
    colour = torch.randn(num_classes, GRATINGS, 3, generator=g)
    colour = colour / colour.norm(dim=-1, keepdim=True)
    return {"freq": freq, "angle": angle, "colour": colour}


def render(labels, table, size, gen, device="cpu"):
    """Images [B, 3, size, size] (float32) of the given classes (a LongTensor)."""
    b = labels.shape[0]
    lab = labels.cpu()
    freq, angle, colour = table["freq"][lab], table["angle"][lab], table["colour"][lab]

    def rnd(*shape):
        return torch.rand(*shape, generator=gen)

    phase = 2 * math.pi * rnd(b, GRATINGS)
    amp = 0.6 + 0.8 * rnd(b, GRATINGS)
    cast = 0.3 * (rnd(b, 3) - 0.5)
    blob_xy = rnd(b, 2)
    blob_r = 0.05 + 0.25 * rnd(b)
    blob_c = rnd(b, 3) - 0.5
    noise_seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
    to = dict(device=device)
    freq, angle, colour = freq.to(**to), angle.to(**to), colour.to(**to)
    phase, amp, cast = phase.to(**to), amp.to(**to), cast.to(**to)
    blob_xy, blob_r, blob_c = blob_xy.to(**to), blob_r.to(**to), blob_c.to(**to)
    t = (torch.arange(size, device=device, dtype=torch.float32) + 0.5) / size
    v, u = torch.meshgrid(t, t, indexing="ij")                      # [H, W]
    kx = (freq * torch.cos(angle))[:, :, None, None]                # [B, G, 1, 1]
    ky = (freq * torch.sin(angle))[:, :, None, None]
    wave = torch.sin(2 * math.pi * (kx * u + ky * v) + phase[:, :, None, None])  # [B, G, H, W]
    wave = wave * amp[:, :, None, None]
    img = torch.einsum("bghw,bgc->bchw", wave, colour)              # [B, 3, H, W]
    d2 = (u - blob_xy[:, 0, None, None]) ** 2 + (v - blob_xy[:, 1, None, None]) ** 2
    blob = torch.exp(-d2 / (2 * blob_r[:, None, None] ** 2))        # [B, H, W]
    img = img + blob[:, None] * blob_c[:, :, None, None] * 2.0 + cast[:, :, None, None]
    ng = torch.Generator(device=device).manual_seed(noise_seed)
    img = img + 0.3 * torch.randn(img.shape, generator=ng, device=device)
    return img / 1.1
