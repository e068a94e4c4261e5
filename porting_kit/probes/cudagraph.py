"""Capture a port's AR decode step in a CUDA graph, replay it, and compare with eager.

Facts for the ``cudagraph`` family (:mod:`porting_kit.checks.cudagraph`). A spec opts in
with ``decode_step() -> DecodeStep``: the port's decode step (one token per row), its
inputs per step, and the port's own graph runner (the code under test: what vLLM's
``CUDAGraphRunner`` / a model's ``capture_model`` does for it).

:func:`measure` runs ``steps`` decode steps twice on the same inputs:

* eager: ``step.eager(inputs(t))`` for ``t = 0..steps-1``, with every module's output
  shape recorded per step (forward hooks);
* graphed: ``runner = step.graph_runner(device)`` captures (the capture is whatever the
  runner does; an exception there is recorded with its message), then
  ``runner(inputs(t))`` per step. The returned tensors are kept *as returned* and read
  only after the last step, as a serving loop that hands them to the next stage does.

It reports per step: equal to eager (``torch.equal`` or within ``atol``), the output
shapes, and whether step ``t``'s kept output equals the *last* step's eager output (a
reused static buffer read after the next replay); plus the first module whose eager
output shape differs between step 0 (the capture) and a later step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ATOL = 1e-5


@dataclass
class DecodeStep:
    """What a spec's ``decode_step()`` returns.

    Attributes
    ----------
    eager : callable
        ``eager(inputs) -> torch.Tensor`` [shape=(batch, ...)]: one decode step without graphs.
    inputs : callable
        ``inputs(t, device) -> dict[str, torch.Tensor]``: step ``t``'s inputs (deterministic).
    graph_runner : callable
        ``graph_runner(device) -> runner`` with ``runner(inputs) -> torch.Tensor``: the port's
        CUDA-graph runner; it captures (on construction or first call) and replays.
    module : torch.nn.Module or None
        The model the eager step runs (its submodules' output shapes are recorded).
    steps : int
        Decode steps compared (the first is the capture step).
    """

    eager: Callable[[dict], Any]
    inputs: Callable[[int, str], dict]
    graph_runner: Callable[[str], Callable[[dict], Any]]
    module: Any = None
    steps: int = 4


@dataclass
class ShapeChange:
    """A module whose eager output shape at a later step differs from the capture step's."""

    module: str
    step: int
    capture_shape: tuple
    step_shape: tuple


@dataclass
class GraphRun:
    """Facts of one capture + replay against eager.

    Attributes
    ----------
    steps : int
    capture_error : str or None
        ``"TypeName: message"`` when capture (building the runner or its first call) raised.
    replay_error : str or None
        The same for a later replay (then fewer outputs were kept).
    eager_shapes, graph_shapes : list of tuple
        Output shape per step.
    equal : list of bool
        Kept graph output of step ``t`` equals eager step ``t`` (within :data:`ATOL`).
    max_abs_diff : list of float
        ``max |graph - eager|`` per step (``inf`` when shapes differ).
    equals_last : list of bool
        Kept output of step ``t`` equals the *last* step's eager output (stale buffer).
    aliased : bool
        Every kept output shares one storage (the runner returns its static buffer).
    shape_change : ShapeChange or None
        First module (in forward-completion order) whose eager output shape changed.
    """

    steps: int
    capture_error: str | None = None
    replay_error: str | None = None
    eager_shapes: list = field(default_factory=list)
    graph_shapes: list = field(default_factory=list)
    equal: list = field(default_factory=list)
    max_abs_diff: list = field(default_factory=list)
    equals_last: list = field(default_factory=list)
    aliased: bool = False
    shape_change: ShapeChange | None = None


def _describe(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {msg}"[:300]


def _close(a, b) -> tuple[bool, float]:
    import torch

    if tuple(a.shape) != tuple(b.shape):
        return False, float("inf")
    if a.numel() == 0:
        return True, 0.0
    d = float((a.double() - b.double()).abs().max())
    return (torch.equal(a, b) or d <= ATOL), d


def _eager_shapes(step: DecodeStep, device: str) -> tuple[list, list[dict[str, tuple]]]:
    """Eager outputs per step (cloned) and each step's module-name -> output shape."""
    import torch

    per_step: list[dict[str, tuple]] = []
    outs = []
    handles = []
    current: dict[str, tuple] = {}
    if step.module is not None:
        def hook(name):
            def fn(mod, args, out):
                if isinstance(out, torch.Tensor):
                    key, k = name, 1
                    while key in current:  # a module called twice in one step: "emb (call 2)"
                        k += 1
                        key = f"{name} (call {k})"
                    current[key] = tuple(out.shape)
            return fn
        handles = [m.register_forward_hook(hook(n)) for n, m in step.module.named_modules() if n]
    try:
        with torch.no_grad():
            for t in range(step.steps):
                current.clear()
                outs.append(step.eager(step.inputs(t, device)).detach().clone())
                per_step.append(dict(current))
    finally:
        for h in handles:
            h.remove()
    return outs, per_step


def first_shape_change(per_step: list[dict[str, tuple]]) -> ShapeChange | None:
    """The first module whose output shape at some step differs from step 0's (capture).

    Parameters
    ----------
    per_step : list of dict
        Module name -> output shape, one dict per step, in forward-completion order.

    Returns
    -------
    ShapeChange or None
    """
    if not per_step:
        return None
    base = per_step[0]
    for t, shapes in enumerate(per_step[1:], start=1):
        for name, shape in shapes.items():
            if name in base and base[name] != shape:
                return ShapeChange(name, t, base[name], shape)
    return None


def measure(step: DecodeStep, device: str) -> GraphRun:
    """Run the decode step eagerly and through the port's graph runner; compare.

    Parameters
    ----------
    step : DecodeStep
    device : str
        A CUDA device (``"cuda"``, ``"cuda:1"``).

    Returns
    -------
    GraphRun
        ``capture_error`` set (and the rest empty) when the runner's capture raised.
    """
    import torch

    run = GraphRun(steps=step.steps)
    eager, per_step = _eager_shapes(step, device)
    run.eager_shapes = [tuple(e.shape) for e in eager]
    run.shape_change = first_shape_change(per_step)
    kept = []
    try:
        with torch.no_grad():
            runner = step.graph_runner(device)
            kept.append(runner(step.inputs(0, device)))
        torch.cuda.synchronize(device)
    except Exception as exc:  # the capture itself is what is measured
        run.capture_error = _describe(exc)
        return run
    try:
        with torch.no_grad():
            for t in range(1, step.steps):
                kept.append(runner(step.inputs(t, device)))
        torch.cuda.synchronize(device)
    except Exception as exc:
        run.replay_error = _describe(exc)
    run.graph_shapes = [tuple(k.shape) for k in kept]
    for t, k in enumerate(kept):
        eq, d = _close(k, eager[t])
        run.equal.append(eq)
        run.max_abs_diff.append(d)
        run.equals_last.append(_close(k, eager[-1])[0])
    ptrs = {k.untyped_storage().data_ptr() for k in kept}
    run.aliased = len(kept) > 1 and len(ptrs) == 1
    return run
