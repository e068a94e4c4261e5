"""Capture compact per-module summaries of one forward pass.

Copying every module output costs 25-54x two forwards on an H200 and keeping
clones on the device grows with depth (DESIGN.md, quality bars). Instead one
forward hook per module reduces its output to a fixed-size *sketch* on the
device, in the same pass, with two small matrix products:

``proj = (S @ x) @ R`` for the output viewed as ``x`` of shape ``(rows, d)``,
with seeded Gaussian ``S`` ``(8, rows)`` and ``R`` ``(d, 8)``: 64 numbers. ``S``
and ``R`` depend only on the shape, so both sides use the same ones and
``||proj_a - proj_b|| / ||proj_b||`` estimates ``||a - b|| / ||b||`` (a
Kronecker-structured Johnson-Lindenstrauss projection, ``E||S X R||^2 =
64 ||X||^2``; with 64 numbers the estimate is typically within ~20 %, ample to
screen against tolerances that faults exceed by orders of magnitude). NaN/Inf
in ``x`` propagate into the sketch, which is how they are detected; ``||x||``
is estimated as ``||proj|| / 8``.

The sketches of a pass are written (``out=``) into one preallocated device
buffer (256 bytes a module call, grown by doubling), copied to the host once
when the pass ends: no host sync per module, no small allocations scattered
between the activations, and the check's extra memory is that buffer plus one
product's transient ``(8, d)``, whatever the depth. Full tensors are
captured only on demand (:func:`capture_full`) for the few modules around a
divergence. In bf16/fp16 the first product reads the tensor in its dtype with
fp32 accumulation; on CUDA its result is float32 (``out_dtype``), elsewhere it
is rounded to the tensor's dtype (~0.4 %, far below the low-precision
tolerances) and cast; the second runs in fp32.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from porting_kit.probes.compare import first_tensor
from porting_kit.probes.tolerance import dtype_name

SKETCH_ROWS = 8
SKETCH_COLS = 8
PROJ_K = SKETCH_ROWS * SKETCH_COLS
_SEED = 20261129
#: Sketch matrices by (kind, size, device, dtype); a few MB at most (R for a 152k vocabulary).
_MATRICES: dict[tuple, Any] = {}


@dataclass
class Summary:
    """Sketch of one tensor (see module docstring).

    Attributes
    ----------
    shape : tuple of int
        Shape of the sketched tensor as produced (e.g. ``(batch, seq, hidden)``).
    dtype : str
        Its dtype without ``torch.`` (``"bfloat16"``).
    numel : int
        Number of elements.
    slot : int, default -1
        Row of the pass's sketch buffer holding it; ``-1`` before a pass wrote it.
    norm : float, default 0.0
        Estimated 2-norm of the tensor, ``||proj|| / 8`` (non-finite entries counted as 0).
    nonfinite : int, default 0
        1 when the tensor held NaN/Inf (the sketch is then non-finite), else 0.
    proj : torch.Tensor [shape=(64,), float32, CPU] or None
        The sketch ``(S @ x) @ R`` flattened; ``None`` until the pass ends.
    """

    shape: tuple[int, ...]
    dtype: str
    numel: int
    slot: int = -1
    norm: float = 0.0
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
    end : int
        Completion order (children complete before their parents).
    depth : int
        Number of dots in the name (+1; the root is 0).
    out : Summary or None
        Sketch of the first tensor output, when there is a floating/complex one.
    """

    key: str
    name: str
    type: str
    end: int
    depth: int
    out: Summary | None


class _Sketcher:
    """Seeded sketch matrices (one per size, dtype and device) and the sketches of one pass."""

    def __init__(self, device) -> None:
        import torch

        self._cache = _MATRICES  # shared across passes: both sides and re-runs reuse them
        self._perm_cache: dict[str, Any] = {}
        # one buffer for the whole pass, created outside any torch.inference_mode a model's
        # forward may enter (the root module's hook runs outside it and must write too)
        self.buf = torch.zeros(256, SKETCH_ROWS, SKETCH_COLS, device=device)
        self.n = 0

    def _mat(self, kind: str, size: int, device, dtype) -> Any:
        key = (kind, size, device, dtype)
        m = self._cache.get(key)
        if m is None:
            import torch

            g = torch.Generator().manual_seed(_SEED + 2 * size + (kind == "S"))
            shape = (SKETCH_ROWS, size) if kind == "S" else (size, SKETCH_COLS)
            m = self._cache[key] = torch.randn(*shape, generator=g).to(device=device, dtype=dtype)
        return m

    def summarize(self, t, name: str = "", col_perm=None) -> Summary:
        """Sketch tensor ``t`` [shape=(..., d)]: two matrix products on its device, no sync.

        ``col_perm`` (LongTensor (d,)): the last dimension holds the reference's features
        reordered (feature ``j`` is reference feature ``col_perm[j]``); the sketch then uses
        ``R[col_perm]`` so it equals the sketch of the reference layout.
        """
        import torch

        x = t.detach() if t.requires_grad else t  # hooks run under no_grad: usually not
        if x.is_complex():
            x = torch.view_as_real(x).flatten(-2)
        if x.dim() != 2:
            x = x.reshape(1, -1) if x.dim() < 2 else x.reshape(-1, x.shape[-1])
        if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            x = x.float()
        slot = self.n
        if slot >= self.buf.shape[0]:
            grown = torch.zeros(2 * slot, SKETCH_ROWS, SKETCH_COLS, device=self.buf.device)
            grown[:slot] = self.buf
            self.buf = grown
        self.n += 1
        if x.numel():
            dev, dt = x.device, x.dtype
            sx = _mm_float32(self._mat("S", x.shape[0], dev, dt), x)  # (8, d) in float32
            if col_perm is not None and col_perm.numel() == x.shape[1]:
                r = self._perm_cache.get(name)
                if r is None:
                    r = self._mat("R", x.shape[1], dev, torch.float32)[col_perm.to(dev)]
                    self._perm_cache[name] = r
            else:
                r = self._mat("R", x.shape[1], dev, torch.float32)
            torch.mm(sx, r, out=self.buf[slot])
        else:
            self.buf[slot].zero_()  # an empty tensor: a zero sketch, equal on both sides
        return Summary(shape=tuple(t.shape), dtype=dtype_name(t.dtype), numel=t.numel(), slot=slot)


#: (device type, dtype) -> whether ``torch.mm(..., out_dtype=torch.float32)`` runs there
_MM_OUT_DTYPE: dict[tuple[str, Any], bool] = {}


def _mm_float32(a, b):
    """``a @ b`` [shape=(n, m) @ (m, k)] as float32: for bfloat16/float16 on CUDA one matrix
    product with a float32 result (``out_dtype``, where this torch build has it: no rounding to the input
    dtype, no cast); elsewhere the product (fp32 accumulation) then a cast."""
    import torch

    if b.dtype == torch.float32:
        return torch.mm(a, b)
    key = (b.device.type, b.dtype)
    ok = _MM_OUT_DTYPE.get(key)
    if ok is None and key[0] == "cuda" and b.dtype in (torch.bfloat16, torch.float16):
        try:
            torch.mm(a[:1, :1], b[:1, :1], out_dtype=torch.float32)
            ok = True
        except (TypeError, RuntimeError, NotImplementedError):
            ok = False
        _MM_OUT_DTYPE[key] = ok
    if ok:
        return torch.mm(a, b, out_dtype=torch.float32)
    return torch.mm(a, b).float()


def _first_input(args: tuple, kwargs: dict) -> Any:
    t = first_tensor(args)
    if t is None:
        t = first_tensor(kwargs)
    return t


def _floating(t) -> bool:
    return t is not None and (t.is_floating_point() or t.is_complex())


def coarse_names(model) -> set[str] | None:
    """The modules of ``model`` that a first, coarse pass hooks.

    Every module that is not inside a repeated block. A repeated block is a child with
    children of its own of a ``ModuleList`` / ``Sequential`` holding two or more modules
    (``model.layers.3``); the block is kept, its insides are not.

    Parameters
    ----------
    model : torch.nn.Module

    Returns
    -------
    set of str or None
        Module names as ``named_modules`` gives them (``""`` is the root), a module reached
        twice counted at its first name. ``None`` when the model has no such stack (hook
        everything).

    Notes
    -----
    One hook per decoder layer instead of fifteen keeps Python hook overhead small next to
    a GPU forward; the insides of the first block that differs are captured in a second,
    fine pass (:mod:`porting_kit.checks.parity`). Found by :func:`coarse_walk`.
    """
    got = coarse_walk(model)
    return None if got is None else {n for n, _ in got}


def coarse_walk(model) -> list[tuple[str, Any]] | None:
    """The modules :func:`coarse_names` keeps, found without entering the repeated blocks.

    In ``named_modules()`` order (pre-order, a module reached twice kept at its first name),
    without building the names inside the repeated blocks: their modules are only marked as
    seen (a module shared with a block that comes first there, such as a projection a layer
    also calls, stays out: a hook on it would record the layer's calls as its own).
    On a model whose modules sit mostly inside its blocks (decoder layers, codec stages)
    this costs a fraction of a named walk.

    Parameters
    ----------
    model : torch.nn.Module

    Returns
    -------
    list of (str, torch.nn.Module) or None
        ``(name, module)`` pairs (``""`` is the root); None when the model has no stack
        of blocks (as :func:`coarse_names`).
    """
    import torch

    stacks = (torch.nn.ModuleList, torch.nn.Sequential)
    out: list[tuple[str, Any]] = []
    seen: set[int] = set()
    found = False
    todo: list[tuple[str, Any, bool]] = [("", model, False)]  # (name, module, is a block)
    while todo:
        name, mod, is_block = todo.pop()
        if id(mod) in seen:
            continue
        seen.add(id(mod))
        out.append((name, mod))
        if is_block:  # kept; its insides are not, but are marked seen as named_modules would
            _mark_inside(mod, seen)
            continue
        repeated = isinstance(mod, stacks) and len(mod) >= 2
        prefix = f"{name}." if name else ""
        for child_name, child in reversed(mod._modules.items()):
            if child is not None:
                block = repeated and bool(child._modules)
                found = found or block
                todo.append((prefix + child_name, child, block))
    return out if found else None


def _mark_inside(block, seen: set[int]) -> None:
    """Add the ids of every module below ``block`` to ``seen`` (level by level, no names)."""
    level = list(block._modules.values())
    while level:
        below: list[Any] = []
        for sub in level:
            if sub is not None and id(sub) not in seen:
                seen.add(id(sub))
                if sub._modules:
                    below.extend(sub._modules.values())
        level = below


def subtree_names(model, root: str) -> set[str]:
    """``root`` and every module below it (names as ``named_modules`` gives them).

    Parameters
    ----------
    model : torch.nn.Module
    root : str
        Qualified module name; ``""`` (the root) selects every module.

    Returns
    -------
    set of str
        Empty when ``root`` is not a module of ``model``.
    """
    return {n for n, _ in model.named_modules()
            if n == root or root == "" or n.startswith(root + ".")}


class SketchPass:
    """The sketches of one :func:`capture_summaries` pass, not yet on the host.

    ``finish()`` copies the pass's sketch buffer to the host (one transfer, a host sync on
    CUDA) and fills each record's :class:`Summary`; later calls do nothing.
    """

    def __init__(self, records: list[Record], sketcher: _Sketcher) -> None:
        self.records = records
        self._sketcher = sketcher
        self.done = False

    def finish(self) -> None:
        """Fill ``proj`` / ``norm`` / ``nonfinite`` of the pass's records (idempotent)."""
        if not self.done:
            _finalize(self.records, self._sketcher)
            self.done = True


@contextmanager
def capture_summaries(model, records: list[Record], *, prefix: str = "",
                      output_permutation: dict[str, Any] | None = None,
                      only: set[str] | None = None, defer: bool = False,
                      modules: dict[str, Any] | None = None) -> Iterator[SketchPass]:
    """Hook the modules of ``model``; each call appends a :class:`Record` to ``records``.

    Use as ``with capture_summaries(model, recs): run(model, inputs)``; the hooks are
    removed on exit and the sketches copied to the host in one transfer (at exit, or at
    ``finish()`` with ``defer=True``).

    Parameters
    ----------
    model : torch.nn.Module
        Sketch matrices live on the device of its first parameter (CPU without one).
    records : list of Record
        Appended to in completion order (children before parents); ``Record.end`` is the
        index in this list. The ``Summary`` fields ``proj``/``norm``/``nonfinite`` are
        filled only when the ``with`` block exits normally.
    prefix : str, default ""
        Prepended to every module name in the records (to keep two models apart).
    output_permutation : dict of str to torch.LongTensor, optional
        Module name (with ``prefix``) -> ``perm`` [shape=(features,)] when that module's
        output features are a reordering of the reference's (see
        :class:`porting_kit.load.WeightLoad`); its sketch then uses ``R[perm]``, so it is
        comparable with the reference's sketch.
    only : set of str, optional
        Names (without ``prefix``) of the modules to hook, e.g. :func:`coarse_names`;
        ``None`` hooks all.

    Raises
    ------
    AttributeError
        A name in ``only`` that is not a submodule of ``model``.

    modules : dict of str to torch.nn.Module, optional
        ``dict(model.named_modules())`` when the caller has it: ``only``'s names are looked
        up there instead of with ``get_submodule``.
    defer : bool, default False
        Leave the sketches on the device at exit; the caller calls ``finish()`` on the
        yielded :class:`SketchPass` (so a second model's forward can be queued on the GPU
        before the first pass's host copy waits for it).

    Yields
    ------
    SketchPass
        The body runs under ``torch.no_grad()``. Unless ``defer``, its ``finish()`` runs
        when the block exits normally.

    Notes
    -----
    Only the first floating/complex tensor of each output is sketched
    (:func:`porting_kit.probes.compare.first_tensor`); an output with none gets
    ``out=None``.
    """
    import torch

    first = next(iter(model.parameters()), None)
    sketcher = _Sketcher(first.device if first is not None else "cpu")
    perms = output_permutation or {}
    calls: dict[str, int] = {}
    handles = []

    def make_hook(name: str, type_name: str, depth: int, perm) -> Callable:
        def post(module, args, output):
            n = calls.get(name, 0)
            calls[name] = n + 1
            out = first_tensor(output)
            records.append(Record(
                key=name if n == 0 else f"{name}#{n}", name=name, type=type_name, end=len(records),
                depth=depth, out=sketcher.summarize(out, name, perm) if _floating(out) else None))
        return post

    try:
        # with ``only``, look the few hooked modules up by name instead of walking the model
        look = model.get_submodule if modules is None else (
            lambda n: modules[n] if n in modules else model.get_submodule(n))
        named = model.named_modules() if only is None else ((name, look(name)) for name in sorted(only))
        for name, module in named:
            full = prefix + name
            handles.append(module.register_forward_hook(
                make_hook(full, type(module).__name__, 0 if not full else full.count(".") + 1,
                          perms.get(full))))
        sketch_pass = SketchPass(records, sketcher)
        with torch.no_grad():
            yield sketch_pass
    finally:
        for h in handles:
            h.remove()
    if not defer:
        sketch_pass.finish()


def _finalize(records: list[Record], sketcher: _Sketcher) -> None:
    """Copy the pass's sketch buffer to the host once and fill each :class:`Summary`."""
    import torch

    if not sketcher.n:
        return
    host = sketcher.buf[: sketcher.n].reshape(sketcher.n, -1).cpu()
    finite = torch.isfinite(host).all(dim=1).tolist()
    norms = (torch.nan_to_num(host, nan=0.0, posinf=0.0, neginf=0.0).norm(dim=1)
             / math.sqrt(PROJ_K)).tolist()
    for r in records:
        s = r.out
        if s is not None and 0 <= s.slot < sketcher.n:
            s.proj, s.norm, s.nonfinite = host[s.slot], norms[s.slot], 0 if finite[s.slot] else 1


def estimate_rel_err(ref: Summary, cand: Summary) -> float:
    """Projected estimate of the relative error ``||a - b|| / ||b||`` (reference ``b``).

    Parameters
    ----------
    ref : Summary
        Sketch of the reference tensor ``b`` (after the pass: ``proj`` set).
    cand : Summary
        Sketch of the candidate tensor ``a``, same shape.

    Returns
    -------
    float
        ``||P(a) - P(b)|| / ||P(b)||`` (unitless; typically within ~20 % of the true
        ratio, see the module docstring). ``inf`` when shapes differ; the absolute
        ``||P(a) - P(b)||`` when ``||P(b)|| == 0``; NaN when either sketch is non-finite.
    """
    if ref.shape != cand.shape or ref.proj.shape != cand.proj.shape:
        return float("inf")
    d = float((cand.proj - ref.proj).norm())
    n = float(ref.proj.norm())
    return d / n if n > 0 else d


def estimate_abs_err(ref: Summary, cand: Summary) -> float:
    """Projected estimate of ``||a - b||_2`` (the projection scales norms by ``sqrt(64)``).

    Parameters
    ----------
    ref, cand : Summary
        Sketches of the reference and candidate tensors, same shape.

    Returns
    -------
    float
        In the tensors' units; ``inf`` when shapes differ.
    """
    if ref.shape != cand.shape or ref.proj.shape != cand.proj.shape:
        return float("inf")
    return float((cand.proj - ref.proj).norm()) / math.sqrt(PROJ_K)


def estimate_errors(pairs: list[tuple[Summary, Summary]]) -> list[tuple[float, float]]:
    """:func:`estimate_rel_err` and :func:`estimate_abs_err` of many pairs at once.

    Parameters
    ----------
    pairs : list of (Summary, Summary)
        ``(reference, candidate)`` sketches after their passes.

    Returns
    -------
    list of (float, float)
        ``(rel_err, abs_err)`` per pair, equal to the two functions' results (one stacked
        norm over all pairs instead of a few small tensor operations per pair).
    """
    import torch

    idx = [i for i, (r, c) in enumerate(pairs)
           if r.shape == c.shape and tuple(r.proj.shape) == tuple(c.proj.shape) == (PROJ_K,)]
    got: dict[int, tuple[float, float]] = {}
    if idx:
        ref = torch.stack([pairs[i][0].proj for i in idx])
        d = (torch.stack([pairs[i][1].proj for i in idx]) - ref).norm(dim=1).tolist()
        n = ref.norm(dim=1).tolist()
        for j, i in enumerate(idx):
            got[i] = (d[j] / n[j] if n[j] > 0 else d[j], d[j] / math.sqrt(PROJ_K))
    return [got[i] if i in got else (estimate_rel_err(r, c), estimate_abs_err(r, c))
            for i, (r, c) in enumerate(pairs)]


@contextmanager
def capture_full(model, names: set[str]) -> Iterator[dict[str, tuple[Any, Any]]]:
    """Capture full input/output tensors of the modules whose record key is in ``names``.

    Parameters
    ----------
    model : torch.nn.Module
    names : set of str
        Record keys without a prefix: ``"layers.3.mlp"`` for the first call,
        ``"layers.3.mlp#1"`` for the second, and so on.

    Yields
    ------
    dict of str to (torch.Tensor or None, torch.Tensor or None)
        ``key -> (input, output)``, filled by the pass run inside the ``with`` block:
        detached clones of the first tensor among the positional then keyword arguments,
        and of the first tensor of the output (any shape, on the model's device).
        Keys whose call never happened are absent.
    """
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


def summarize_calls(calls: list[tuple[str, str, str, int, Any]], device="cpu") -> list[Record]:
    """Records, with sketches, of module outputs captured elsewhere (e.g. gathered from
    tensor-parallel ranks by :mod:`porting_kit.probes.tp`).

    Parameters
    ----------
    calls : list of (key, name, type, depth, tensor or None)
        In completion order (children before parents), as :func:`capture_summaries`
        would record them; ``tensor`` is the full output [shape=(..., d)].
    device : str or torch.device, default "cpu"
        Where the sketch products run.

    Returns
    -------
    list of Record
        ``Record.end`` is the index in ``calls``; sketched with the same seeded matrices
        as :func:`capture_summaries`, so they compare with a capture of the other side.
    """
    sketcher = _Sketcher(device)
    records: list[Record] = []
    for key, name, type_name, depth, t in calls:
        out = sketcher.summarize(t.to(device), key) if _floating(t) else None
        records.append(Record(key=key, name=name, type=type_name, end=len(records), depth=depth, out=out))
    _finalize(records, sketcher)
    return records
