"""Capture compact per-module summaries of one forward pass.

Copying every module output costs 25-54x two forwards on an H200 and keeping
clones on the device grows with depth (DESIGN.md, quality bars). Instead one
forward hook per module reduces each output (and its first input) to a
fixed-size *summary* computed on the device, in the same pass:

* ``proj``: a sketch of the tensor viewed as ``x`` of shape ``(rows, d)``:
  ``S @ x @ R`` with seeded Gaussian ``S`` of shape ``(8, rows)`` and ``R`` of
  shape ``(d, 8)``, flattened to 64 numbers. ``S`` and ``R`` depend only on the
  shape, so both sides use the same ones and ``||proj_a - proj_b|| / ||proj_b||``
  estimates ``||a - b|| / ||b||`` (a Kronecker-structured Johnson-Lindenstrauss
  projection: ``E||S X R||^2 = 64 ||X||^2``; with 64 numbers the estimate is
  typically within ~20 %, ample to screen against tolerances that faults exceed
  by orders of magnitude; the located pair is then compared in full);
* ``norm`` (exact 2-norm), ``absmax``, ``nonfinite`` (NaN/Inf count).

All summaries of a pass are written into one preallocated device buffer (67
floats a tensor), so the check's extra memory is that buffer plus one hook's
transients, whatever the depth, and there is no host sync per module: the
buffer is copied to the host once when the pass ends (:func:`finalize`). Full
tensors are captured only on demand (:func:`capture_full`) for the one pair
around a divergence. In bf16/fp16 the sketch's first product runs in the
tensor's dtype (fp32 accumulation, result rounded to ~0.4 %), far below the
low-precision tolerances.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from porting_kit.compare import first_tensor

SKETCH_ROWS = 8
SKETCH_COLS = 8
PROJ_K = SKETCH_ROWS * SKETCH_COLS
_WIDTH = 3 + PROJ_K  # norm, absmax, nonfinite, proj
_SEED = 20261129


@dataclass
class Summary:
    """Summary of one tensor (see module docstring). After :func:`finalize`, ``norm``,
    ``absmax`` are floats, ``nonfinite`` an int and ``proj`` a CPU float32 tensor of 64."""

    shape: tuple[int, ...]
    dtype: str
    numel: int
    slot: int = -1
    norm: float = 0.0
    absmax: float = 0.0
    nonfinite: int = 0
    proj: Any = field(default=None, repr=False)


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


class _Sketcher:
    """Seeded sketch matrices (one per size and device) and the summary buffer of one pass."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, int, str, str], Any] = {}
        self.buf = None
        self.n = 0

    def _mat(self, kind: str, size: int, device, dtype) -> Any:
        import torch

        key = (kind, size, str(device), str(dtype))
        if key not in self._cache:
            g = torch.Generator().manual_seed(_SEED + 2 * size + (kind == "S"))
            shape = (SKETCH_ROWS, size) if kind == "S" else (size, SKETCH_COLS)
            self._cache[key] = torch.randn(*shape, generator=g).to(device=device, dtype=dtype)
        return self._cache[key]

    def allocate(self, device) -> None:
        """Create the buffer up front, outside any ``torch.inference_mode`` a model's forward
        may enter (a buffer born inside it could not be written by the root module's hook,
        which runs outside)."""
        import torch

        self.buf = torch.zeros(512, _WIDTH, device=device)

    def slot(self, device) -> Any:
        import torch

        if self.buf is None:
            self.allocate(device)
        elif self.n >= self.buf.shape[0]:
            grown = torch.zeros(2 * self.buf.shape[0], _WIDTH, device=self.buf.device)
            grown[: self.n] = self.buf
            self.buf = grown
        self.n += 1
        return self.n - 1

    def summarize(self, t, col_perm=None) -> Summary:
        """Write the summary of tensor ``t`` [shape=(..., d)] into the buffer.

        ``col_perm`` (LongTensor (d,)): the tensor's last dimension holds the reference's
        features reordered (feature ``j`` is reference feature ``col_perm[j]``); the sketch
        then uses ``R[col_perm]`` so it equals the reference layout's sketch.
        """
        import torch

        x = t.detach()
        if x.is_complex():
            x = torch.view_as_real(x).flatten(-2)
        if x.dim() < 2:
            x = x.reshape(1, -1)
        x = x.reshape(-1, x.shape[-1])
        if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            x = x.float()
        i = self.slot(x.device)
        row = self.buf[i]
        if x.numel():
            mn, mx = torch.aminmax(x)
            row[0] = torch.linalg.vector_norm(x, dtype=torch.float32)
            row[1] = torch.maximum(mn.abs(), mx.abs()).float()
            row[2] = (~torch.isfinite(x)).sum()
            sx = self._mat("S", x.shape[0], x.device, x.dtype) @ x          # (8, d)
            r = self._mat("R", x.shape[1], x.device, torch.float32)
            if col_perm is not None and col_perm.numel() == x.shape[1]:
                r = r[col_perm.to(x.device)]
            row[3:] = (sx.float() @ r).reshape(-1)
        return Summary(shape=tuple(t.shape), dtype=str(t.dtype).replace("torch.", ""),
                       numel=t.numel(), slot=i)


def _first_input(args: tuple, kwargs: dict) -> Any:
    t = first_tensor(args)
    if t is None:
        t = first_tensor(kwargs)
    return t


@contextmanager
def capture_summaries(model, records: list[Record], *, prefix: str = "",
                      output_permutation: dict[str, Any] | None = None) -> Iterator[None]:
    """Hook every module of ``model``; each call appends a :class:`Record` to ``records``.

    ``output_permutation`` maps module names whose output features are a reordering of
    the reference's (see :class:`porting_kit.weights.WeightLoad`) to that reordering.

    Use as ``with capture_summaries(model, recs): run(model, inputs)``; the hooks
    are removed on exit, and the summaries are then moved to the host in one
    transfer (:func:`finalize`).
    """
    import torch

    sketcher = _Sketcher()
    perms = output_permutation or {}
    first = next(iter(model.parameters()), None)
    sketcher.allocate(first.device if first is not None else "cpu")
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
                inp=sketcher.summarize(inp) if floating(inp) else None,
                out=sketcher.summarize(out, perms.get(name)) if floating(out) else None))
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
    finalize(records, sketcher)


def finalize(records: list[Record], sketcher: _Sketcher) -> None:
    """Copy the pass's summary buffer to the host once and fill each :class:`Summary`."""
    if sketcher.buf is None:
        return
    host = sketcher.buf[: sketcher.n].cpu()
    scal = host[:, :3].tolist()
    for r in records:
        for s in (r.inp, r.out):
            if s is not None and s.slot >= 0:
                s.norm, s.absmax, s.nonfinite = scal[s.slot][0], scal[s.slot][1], int(scal[s.slot][2])
                s.proj = host[s.slot, 3:]


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
