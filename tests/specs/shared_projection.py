"""A projection shared between a block and the top of the model (a fresh user's case, session 24).

One ``nn.Linear`` is registered inside layer 0 and on the model after the layer stack
(``named_modules()`` names it ``layers.0.extra``, inside the block). Variant ``eps0``: the
candidate's layer-0 norm has eps 1e-3 (reference 1e-5): located at ``layers.0.ln``, not at the
shared projection (whose layer-0 calls a coarse hook under its outer name would record).
"""
import torch
from torch import nn

VARIANTS = {"eps0": "candidate layers[0].ln eps=1e-3"}
VARIANT = None


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(16)
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        y = self.fc(self.ln(x))
        extra = self._modules.get("extra")
        return x + y + (extra(y) if extra is not None else 0)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(3))
        self.proj = nn.Linear(16, 16)        # registered after the stack...
        self.layers[0].extra = self.proj     # ...and inside layer 0 (tied)

    def forward(self, x):
        for b in self.layers:
            x = b(x)
        return self.proj(x)


def reference():
    torch.manual_seed(0)
    return Model()


def candidate():
    m = Model()
    if VARIANT == "eps0":
        m.layers[0].ln.eps = 1e-3
    return m


def inputs():
    torch.manual_seed(1)
    return {"x": torch.randn(1, 8, 16) * 0.05}
