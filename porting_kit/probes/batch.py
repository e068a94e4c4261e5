"""Batch parity facts: a padded batch of requests against each request run alone.

Spec names (README "Batch parity"):

``batch_inputs() -> list[dict]``, optional
    Requests of different lengths, each a dict like ``inputs()`` (batch of one).
    Default: :func:`default_batch_inputs` truncates ``inputs()`` along the sequence axis.
``run_candidate_batch(model, requests) -> list[Tensor]``
    The candidate's batched forward as the engine runs it: pads the requests into one
    batch (its own padding side, attention/padding mask and position ids) and returns one
    output per request, its padding removed, ``[shape=(1, len_i, ...)]`` or
    ``[shape=(len_i, ...)]``. Without it the ``batch`` family is skipped.

:func:`measure_batch` runs each request alone (the spec's ``run_candidate``) and the batch,
compares every row with its solo run by relative error ``||row - solo|| / ||solo||``, and
for the first row beyond tolerance finds the first module (in the solo run's call order)
whose output for that row differs: the module's batched output is sliced to the row's
span, tried as a left-padded span (last ``len`` positions) and a right-padded one (first
``len``); an output with a batch axis of 1 (a position embedding computed once) is compared
broadcast, and when the first differing module holds the row's solo output at another
offset, the offset is recorded (positions that ignore the padding). Facts only; :mod:`porting_kit.checks.batch` judges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Relative error ``||row - solo|| / ||solo||`` allowed between a batched row and its solo run,
#: by dtype: batching changes reduction order (a few 1e-7 in float32 on CPU), never more.
BATCH_REL_TOL = {"float32": 1e-4, "float64": 1e-4, "bfloat16": 3e-2, "float16": 1e-2}


@dataclass
class RowResult:
    """One request's batched row against its solo run.

    Attributes
    ----------
    row : int
        Index in the batch (the order of ``batch_inputs()``).
    length : int
        The request's sequence length (tokens).
    rel_err : float
        ``||row - solo|| / ||solo||`` of the final output.
    max_abs : float
        max ``|row - solo|``.
    shape_ok : bool
        The batched output has the solo output's number of elements.
    """

    row: int
    length: int
    rel_err: float
    max_abs: float
    shape_ok: bool = True


@dataclass
class BatchMeasurement:
    """Rows of a padded batch against their solo runs, and where the first bad row diverges.

    Attributes
    ----------
    rows : list of RowResult
    tolerance : float
        Relative-error bound used (:data:`BATCH_REL_TOL` of ``dtype``).
    dtype : str
    first_bad_row : int or None
    first_module : str or None
        First module (solo call order) whose output differs for ``first_bad_row``.
    first_module_rel_err : float or None
    span : str or None
        ``"left"`` / ``"right"``: the padding side whose slice of the batched module outputs
        matched the solo run best at the modules before ``first_module``.
    lengths : list of int
    batch_size : int
        Requests in the batch.
    first_module_broadcast : bool
        ``first_module``'s batched output has a batch axis of 1 (shared by every row: a
        position embedding computed once), compared broadcast.
    position_offset : (int, int) or None
        ``(found, own)``: ``first_module``'s batched output holds the row's solo output at
        positions ``found..found+len-1`` instead of its own span ``own..own+len-1``: what
        it computes depends only on the position, counted from the batch's first slot
        rather than the row's first token (positions that ignore the padding).
    """

    rows: list[RowResult]
    tolerance: float
    dtype: str
    first_bad_row: int | None = None
    first_module: str | None = None
    first_module_rel_err: float | None = None
    span: str | None = None
    lengths: list[int] = field(default_factory=list)
    batch_size: int = 0
    first_module_broadcast: bool = False
    position_offset: tuple[int, int] | None = None


def _seq_len(inputs: dict) -> int:
    import torch

    for v in inputs.values():
        if isinstance(v, torch.Tensor) and v.dim() >= 2:
            return int(v.shape[1])
    raise ValueError("inputs() holds no (batch, seq) tensor to truncate")


def default_batch_inputs(inputs: dict, fractions: tuple[float, ...] = (1.0, 0.75, 0.5)) -> list[dict]:
    """Requests of different lengths cut from one example input.

    Parameters
    ----------
    inputs : dict
        ``inputs()``: tensors ``[shape=(1, seq, ...)]`` (token ids, masks); others kept.
    fractions : tuple of float, default (1.0, 0.75, 0.5)
        Each request keeps the first ``round(seq * f)`` positions (at least 1).

    Returns
    -------
    list of dict
        One dict per fraction, every tensor with a sequence axis truncated alike.

    Raises
    ------
    ValueError
        No tensor of ``inputs`` has a sequence axis.
    """
    import torch

    seq = _seq_len(inputs)
    out = []
    for f in fractions:
        n = max(1, round(seq * f))
        out.append({k: (v[:, :n] if isinstance(v, torch.Tensor) and v.dim() >= 2 and v.shape[1] == seq
                        else v) for k, v in inputs.items()})
    return out


def _rel(a, b) -> tuple[float, float]:
    import torch

    a, b = a.detach().double().reshape(-1), b.detach().double().reshape(-1)
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    if not torch.equal(fa, fb):  # NaN/Inf in one run only: a batching fault
        return float("inf"), float("inf")
    a, b = a[fa], b[fb]  # the same NaN/Inf in both runs is parity's business (nan_origin)
    d = (a - b)
    return float(d.norm() / b.norm().clamp_min(1e-30)), float(d.abs().max()) if d.numel() else 0.0


def _capture(model):
    """Forward hooks keeping every module's first tensor output (name -> tensor), in call order."""
    import torch

    outs: dict[str, Any] = {}
    handles = []
    for name, mod in model.named_modules():
        if not name:
            continue

        def hook(m, args, out, name=name):
            t = out[0] if isinstance(out, (tuple, list)) and out else out
            if isinstance(t, torch.Tensor) and name not in outs:
                outs[name] = t.detach()
        handles.append(mod.register_forward_hook(hook))
    return outs, handles


def measure_batch(run_solo, run_batch, model, requests: list[dict], dtype: str) -> BatchMeasurement:
    """Compare each request's batched row with its solo run; locate the first bad row's module.

    Parameters
    ----------
    run_solo : callable
        ``run_solo(model, request) -> Tensor [shape=(1, len, ...)]`` (the spec's ``run_candidate``).
    run_batch : callable
        ``run_batch(model, requests) -> list of Tensor`` (the spec's ``run_candidate_batch``).
    model : torch.nn.Module
        The candidate, weights loaded.
    requests : list of dict
        From ``batch_inputs()``.
    dtype : str
        The candidate's dtype name (picks :data:`BATCH_REL_TOL`).

    Returns
    -------
    BatchMeasurement
    """
    import torch

    tol = BATCH_REL_TOL.get(dtype, 1e-4)
    lengths = [_seq_len(r) for r in requests]
    solo_outs, solo_modules = [], []
    with torch.no_grad():
        for r in requests:
            outs, handles = _capture(model)
            try:
                solo_outs.append(run_solo(model, r))
            finally:
                for h in handles:
                    h.remove()
            solo_modules.append(outs)
        outs_b, handles = _capture(model)
        try:
            batch_outs = run_batch(model, requests)
        finally:
            for h in handles:
                h.remove()
    rows = []
    for i, (b, s) in enumerate(zip(batch_outs, solo_outs)):
        if b.numel() != s.numel():
            rows.append(RowResult(i, lengths[i], float("inf"), float("inf"), False))
            continue
        rel, mx = _rel(b, s)
        rows.append(RowResult(i, lengths[i], rel, mx))
    m = BatchMeasurement(rows, tol, dtype, lengths=lengths, batch_size=len(requests))
    bad = [r for r in rows if not r.rel_err <= tol]
    if bad:
        m.first_bad_row = bad[0].row
        _locate(m, solo_modules[bad[0].row], outs_b, bad[0].row, lengths[bad[0].row], tol)
    return m


def _row_span(t, row: int, n: int, side: str):
    """Row ``row``'s span of ``n`` positions in a batched module output; an output with a batch
    axis of 1 (a position embedding, a mask built once) is broadcast: every row reads row 0."""
    if t.dim() < 2 or t.shape[1] < n:
        return None
    if row >= t.shape[0]:
        if t.shape[0] != 1:
            return None
        row = 0
    return t[row:row + 1, -n:] if side == "left" else t[row:row + 1, :n]


def _shifted_match(t, solo, row: int, n: int, side: str, tol: float) -> int | None:
    """The offset ``o`` at which the batched output's positions ``o..o+n-1`` (row ``row``, or row
    0 when broadcast) equal the solo output, when it is not the row's own span; else None."""
    if t.dim() < 2 or t.shape[1] < n or (row >= t.shape[0] and t.shape[0] != 1):
        return None
    r = row if row < t.shape[0] else 0
    own = t.shape[1] - n if side == "left" else 0
    for o in range(t.shape[1] - n + 1):
        span = t[r:r + 1, o:o + n]
        if o != own and span.numel() == solo.numel() and _rel(span, solo)[0] <= tol:
            return o
    return None


def _locate(m: BatchMeasurement, solo: dict, batched: dict, row: int, n: int, tol: float) -> None:
    """First module whose batched row span differs from its solo output (sets ``m.first_module``)."""
    best_side, best_count = None, -1
    for side in ("right", "left"):  # the side under which more leading modules agree
        count = 0
        for name, s in solo.items():
            b = batched.get(name)
            span = None if b is None else _row_span(b, row, n, side)
            if span is None or span.numel() != s.numel() or _rel(span, s)[0] > tol:
                break
            count += 1
        if count > best_count:
            best_side, best_count = side, count
    m.span = best_side
    for name, s in solo.items():
        b = batched.get(name)
        span = None if b is None else _row_span(b, row, n, best_side)
        if span is None or span.numel() != s.numel():
            continue
        rel, _ = _rel(span, s)
        if rel > tol:
            m.first_module, m.first_module_rel_err = name, rel
            b = batched[name]
            m.first_module_broadcast = bool(b.shape[0] == 1 and m.batch_size > 1)
            o = _shifted_match(b, s, row, n, best_side, tol)
            if o is not None:
                m.position_offset = (o, (b.shape[1] - n) if best_side == "left" else 0)
            return
