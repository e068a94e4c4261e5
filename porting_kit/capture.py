"""Capture compact per-module summaries of one forward pass.

Copying every module output costs 25-54x two forwards on an H200 and keeping
clones on the device grows with depth (DESIGN.md, quality bars). Instead one
forward hook per module reduces each output (and its first input) to a
*summary* computed on the device, in one pass:

* ``proj``: the tensor viewed as ``(rows, last_dim)`` times a fixed random
  matrix ``R`` of shape ``(last_dim, k)`` (``k = 8``), so ``proj`` is
  ``(rows, k)``. ``R`` is drawn once per ``last_dim`` from a seeded generator,
  the same on both sides, so ``||proj_a - proj_b|| / ||proj_b||`` estimates
  ``||a - b|| / ||b||`` (Johnson-Lindenstrauss; with ``rows * k`` >= a few
  hundred projections the estimate is within a few percent);
* ``norm`` (2-norm), ``absmax``, ``nonfinite`` (NaN/Inf count).

Summaries stay on the device until the pass ends (one transfer, no per-module
host sync). Their size does not depend on the width and is tiny next to the
activations, so the check's extra memory does not grow with depth. Full
tensors are captured only on demand (:func:`capture_full`) for the few modules
around a divergence.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from porting_kit.compare import first_tensor

PROJ_K = 8
_SEED = 20261129


@dataclass
class Summary:
    """Summary of one tensor (see module docstring). ``proj`` is ``(rows, k)`` float32."""

    shape: tuple[int, ...]
    dtype: str
    numel: int
    norm: float
    absmax: float
    nonfinite: int
    proj: Any = field(repr=False)


@dataclass
class Record:
    """One module call.

    Attributes
    ----------
    key : str
        Module name; a second call of the same module is ``name#1`` and so on.
    name : str
        Qualified module name (``""`` is the root, shown as ``<root>``).
    type : str
        Class name (``LlamaAttention``).
    start, end : int
        Call order (pre-hook counter) and completion order (post-hook counter).
    depth : int
        Number of dots in the name (+1; the root is 0).
    inp, out : Summary or None
        First tensor input / first tensor output, when there is one.
    """

    key: str
    name: str
    type: str
    start: int
    end: int
    depth: int
    inp: Summary | None
    out: Summary | None


class _Projector:
    """Seeded random projection matrices, one per last-dimension size and device."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, str], Any] = {}

    def get(self, last_dim: int, device) -> Any:
        import torch

        key = (last_dim, str(device))
        if key not in self._cache:
            g = torch.Generator().manual_seed(_SEED + last_dim)
            r = torch.randn(last_dim, PROJ_K, generator=g, dtype=torch.float32)
            self._cache[key] = r.to(device)
        return self._cache[key]


def summarize(t, projector: _Projector) -> Summary:
    """Reduce tensor ``t`` [shape=(..., d)] to a :class:`Summary` (values stay on its device)."""
    import torch

    x = t.detach()
    if x.dim() == 0:
        x = x.reshape(1, 1)
    elif x.dim() == 1:
        x = x.reshape(1, -1)
    x = x.reshape(-1, x.shape[-1])
    if x.is_complex():
        x = torch.view_as_real(x).reshape(x.shape[0], -1)
    if x.dtype != torch.float32:
        x = x.float()
    finite = torch.isfinite(x)
    nonfinite = (~finite).sum()
    x0 = torch.where(finite, x, torch.zeros((), device=x.device)) if x.numel() else x
    proj = x0 @ projector.get(x0.shape[-1], x0.device)
    return Summary(shape=tuple(t.shape), dtype=str(t.dtype).replace("torch.", ""), numel=t.numel(),
                   norm=x0.norm(), absmax=x0.abs().amax() if x0.numel() else x0.sum(),
                   nonfinite=nonfinite, proj=proj)


def _first_input(args: tuple, kwargs: dict) -> Any:
    t = first_tensor(args)
    if t is None:
        t = first_tensor(kwargs)
    return t


@contextmanager
def capture_summaries(model, records: list[Record], *, prefix: str = "") -> Iterator[None]:
    """Hook every module of ``model``; each call appends a :class:`Record` to ``records``.

    Use as ``with capture_summaries(model, recs): run(model, inputs)``; the hooks
    are removed on exit. After the pass call :func:`finalize` to move the
    summaries to the host in one transfer.
    """
    import torch

    projector = _Projector()
    counter = {"start": 0, "end": 0}
    calls: dict[str, int] = {}
    stacks: dict[int, list[int]] = {}
    handles = []

    def make_hooks(name: str):
        def pre(module, args, kwargs):
            stacks.setdefault(id(module), []).append(counter["start"])
            counter["start"] += 1

        def post(module, args, kwargs, output):
            start = stacks[id(module)].pop()
            n = calls.get(name, 0)
            calls[name] = n + 1
            key = name if n == 0 else f"{name}#{n}"
            out = first_tensor(output)
            inp = _first_input(args, kwargs)
            floating = lambda t: t is not None and (t.is_floating_point() or t.is_complex())  # noqa: E731
            records.append(Record(
                key=key, name=name, type=type(module).__name__, start=start, end=counter["end"],
                depth=0 if not name else name.count(".") + 1,
                inp=summarize(inp, projector) if floating(inp) else None,
                out=summarize(out, projector) if floating(out) else None))
            counter["end"] += 1

        return pre, post

    try:
        for name, module in model.named_modules():
            pre, post = make_hooks(prefix + name)
            handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(module.register_forward_hook(post, with_kwargs=True))
        with torch.no_grad():
            yield
    finally:
        for h in handles:
            h.remove()


def finalize(records: list[Record]) -> None:
    """Move every summary's scalars and projections to the host (one stacked transfer per field)."""
    import torch

    sums = [s for r in records for s in (r.inp, r.out) if s is not None]
    if not sums:
        return
    scal = torch.stack([torch.stack([s.norm.float().cpu(), s.absmax.float().cpu(),
                                     s.nonfinite.float().cpu()]) for s in sums]).tolist()
    for s, (norm, absmax, nonfinite) in zip(sums, scal):
        s.norm, s.absmax, s.nonfinite = norm, absmax, int(nonfinite)
        s.proj = s.proj.cpu()


def estimate_rel_err(ref: Summary, cand: Summary) -> float:
    """``||P(a) - P(b)|| / ||P(b)||``: the projected estimate of ``||a-b|| / ||b||``
    (reference ``b``). ``inf`` when shapes differ."""
    if ref.shape != cand.shape or ref.proj.shape != cand.proj.shape:
        return float("inf")
    d = float((cand.proj - ref.proj).norm())
    n = float(ref.proj.norm())
    return d / n if n > 0 else d


def estimate_abs_err(ref: Summary, cand: Summary) -> float:
    """Projected estimate of ``||a - b||_2`` (the projection scales norms by sqrt(k))."""
    import math

    if ref.shape != cand.shape or ref.proj.shape != cand.proj.shape:
        return float("inf")
    return float((cand.proj - ref.proj).norm()) / math.sqrt(PROJ_K)


@contextmanager
def capture_full(model, names: set[str]) -> Iterator[dict[str, tuple[Any, Any]]]:
    """Capture full input/output tensors (first tensor of each) of the modules whose
    record key is in ``names``. Yields a dict ``key -> (input, output)`` filled by the pass."""
    import torch

    got: dict[str, tuple[Any, Any]] = {}
    calls: dict[str, int] = {}
    handles = []

    def make(name: str) -> Callable:
        def post(module, args, kwargs, output):
            n = calls.get(name, 0)
            calls[name] = n + 1
            key = name if n == 0 else f"{name}#{n}"
            if key in names:
                inp = _first_input(args, kwargs)
                out = first_tensor(output)
                got[key] = (None if inp is None else inp.detach().clone(),
                            None if out is None else out.detach().clone())
        return post

    base = {n.split("#")[0] for n in names}
    try:
        for name, module in model.named_modules():
            if name in base:
                handles.append(module.register_forward_hook(make(name), with_kwargs=True))
        with torch.no_grad():
            yield got
    finally:
        for h in handles:
            h.remove()
