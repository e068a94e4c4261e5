"""Where a forward first produces Inf/NaN, and what that module computes in float32.

Facts for ``dtype.fp16_overflow`` (built in :mod:`porting_kit.checks.dtype`): the
first module, in the order modules finish their forward (so the innermost module
that produced the value, before its parents), whose output holds a non-finite
value; then the same module's output in a float32 copy of the model on the same
inputs. Finite in float32 and non-finite in float16 means the dtype's range (max
65504) caused it, not the code.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NonFinite:
    """The first module whose output holds Inf or NaN.

    Attributes
    ----------
    module : str
        Qualified module name (``talker.layers.0.mlp.down_proj``).
    type : str
        The module's class name.
    order : int
        Index of the module in forward-completion order (0 = first to finish).
    n_inf, n_nan : int
        Inf and NaN elements in that output.
    numel : int
        Elements in that output.
    """

    module: str
    type: str
    order: int
    n_inf: int
    n_nan: int
    numel: int


def _tensors(out) -> list[Any]:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _tensors(o)]
    return []  # transformers' ModelOutput is a dict: covered above


def first_nonfinite(model, forward: Callable[[], Any]) -> NonFinite | None:
    """Run ``forward()`` once with hooks on every submodule of ``model``; the first non-finite output.

    Parameters
    ----------
    model : torch.nn.Module
        The model ``forward`` runs (its submodules get forward hooks, removed after).
    forward : callable
        Runs the model once (e.g. ``lambda: run_side(spec, side, model, inputs)``).

    Returns
    -------
    NonFinite or None
        ``None`` when every floating output of every submodule was finite.
    """
    import torch

    found: list[NonFinite] = []
    counter = [0]

    def hook(name):
        def fn(mod, args, out):
            i = counter[0]
            counter[0] += 1
            if found:
                return
            for t in _tensors(out):
                if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                    found.append(NonFinite(name, type(mod).__name__, i, int(torch.isinf(t).sum()),
                                           int(torch.isnan(t).sum()), t.numel()))
                    return
        return fn

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules() if n]
    try:
        with torch.no_grad():
            forward()
    finally:
        for h in handles:
            h.remove()
    return found[0] if found else None


@dataclass(frozen=True)
class ModuleRange:
    """One module's output magnitude in a float32 run.

    Attributes
    ----------
    module : str
        Qualified module name.
    max_abs : float
        Largest ``|value|`` of its floating outputs (``inf`` / ``nan`` when they are not finite).
    finite : bool
        True when every value was finite.
    """

    module: str
    max_abs: float
    finite: bool


def float32_range(model, module: str, run: Callable[[Any], Any]) -> ModuleRange | None:
    """``module``'s output magnitude in a float32 copy of ``model``.

    Parameters
    ----------
    model : torch.nn.Module
        Not changed: a deep copy is cast to float32 (parameters and floating buffers).
    module : str
        Qualified name of the submodule to watch.
    run : callable
        ``run(model_copy)`` runs the copy once on the float32 inputs.

    Returns
    -------
    ModuleRange or None
        ``None`` when ``module`` never ran in the copy.

    Notes
    -----
    Costs one more model's memory in float32, and is called only after a non-finite value
    was found.
    """
    import torch

    twin = copy.deepcopy(model).float()
    sub = dict(twin.named_modules()).get(module)
    if sub is None:
        return None
    seen: list[ModuleRange] = []

    def fn(mod, args, out):
        if seen:
            return
        ts = [t for t in _tensors(out) if t.is_floating_point() and t.numel()]
        if ts:
            fin = all(bool(torch.isfinite(t).all()) for t in ts)
            seen.append(ModuleRange(module, max(float(t.detach().abs().max()) for t in ts), fin))

    h = sub.register_forward_hook(fn)
    try:
        with torch.no_grad():
            run(twin)
    finally:
        h.remove()
        del twin
    return seen[0] if seen else None
