"""Small test models: an MLP, ResNet-18 and a transformer encoder, each with a second
method, seeded so every run is the same."""

import torch
import torch.nn as nn
import torchvision

import kiln


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                                 nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)

    def embed(self, x, scale=None):
        """Second method: nested outputs and an optional keyword input."""
        h = self.net[1](self.net[0](x))
        if scale is not None:
            h = h * scale
        return {"hidden": h, "pair": (self.net(x), None), "list": [h.sum(-1)]}


class ResNet18(torchvision.models.ResNet):
    def __init__(self):
        torch.manual_seed(2)
        super().__init__(torchvision.models.resnet.BasicBlock, [2, 2, 2, 2], num_classes=10)
        # non-trivial batch-norm statistics, as after training
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)

    def features(self, x):
        """Second method: the pooled features before the classifier."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(self.avgpool(x), 1)


class TinyEncoder(nn.Module):
    def __init__(self, d_in=8, d_model=32, heads=4, layers=2, d_out=4):
        super().__init__()
        torch.manual_seed(3)
        self.proj = nn.Linear(d_in, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=64, dropout=0.1,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d_model, d_out)

    def forward(self, src, mask=None):
        return self.head(self.encoder(self.proj(src), src_key_padding_mask=mask))

    def encode(self, src, mask=None):
        """Second method: a dict of the hidden states and their mean over the sequence."""
        h = self.encoder(self.proj(src), src_key_padding_mask=mask)
        return {"hidden": h, "pooled": h.mean(dim=1)}


class Pipeline(nn.Module):
    """A model that holds an engine as a submodule (for the torch.save tests)."""

    def __init__(self, engine=None):
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.engine = kiln.EngineModule(engine)

    def forward(self, src, mask):
        return self.engine(self.pre(src), mask=mask)


# ---- a model kiln cannot build ----------------------------------------------------------

class _Frobnicate(torch.autograd.Function):
    """A custom operator: exported (TorchScript exporter) as kiln_test::Frobnicate."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def symbolic(g, x):
        return g.op("kiln_test::Frobnicate", x)


class Frobnicate(nn.Module):
    def forward(self, x):
        return _Frobnicate.apply(x)


class _Wibble(torch.autograd.Function):
    """Another custom operator: exported as kiln_test::Wibble."""

    @staticmethod
    def forward(ctx, x):
        return x + 1

    @staticmethod
    def symbolic(g, x):
        return g.op("kiln_test::Wibble", x)


class Wibble(nn.Module):
    def forward(self, x):
        return _Wibble.apply(x)


@torch.jit.script
def _gate(x: torch.Tensor) -> torch.Tensor:
    if bool(x.sum() > 0):
        return x
    return -x


class Gate(nn.Module):
    """Data-dependent control flow (a scripted function): exported as ONNX If."""

    def forward(self, x):
        return _gate(x)


class Unsupported(nn.Module):
    """Uses two operators kiln does not implement (TorchScript exporter)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(4)
        self.fc = nn.Linear(4, 4)
        self.blocks = nn.Sequential(Frobnicate(), nn.ReLU(), Wibble(), Frobnicate())

    def forward(self, x):
        return self.blocks(self.fc(x))


class Gated(nn.Module):
    """Data-dependent control flow in a scripted function (TorchScript exporter: ONNX If)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(4)
        self.fc = nn.Linear(4, 4)
        self.gate = Gate()

    def forward(self, x):
        return self.gate(self.fc(x))


class GatedDynamo(nn.Module):
    """Data-dependent control flow written with torch.cond: exported (dynamo) as If."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(4)
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        return torch.cond(h.sum() > 0, lambda t: t * 2, lambda t: -t, (h,))
