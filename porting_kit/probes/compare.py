"""Full-tensor comparison of a reference and a candidate output.

The report follows ``torch.testing.assert_close``'s failure message: how many
elements mismatched out of how many, the greatest absolute difference and its
index, the greatest relative difference and its index, and the tolerance used;
plus the tensor-level relative error, the cosine similarity and NaN/Inf counts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from porting_kit.probes.tolerance import Tolerance


@dataclass
class TensorMetrics:
    """How two tensors of one shape compare (the figures of ``assert_close``'s message).

    Attributes
    ----------
    numel : int
        Elements compared.
    mismatched : int
        Elements outside ``atol + rtol * |ref|`` (NaN/Inf count as mismatched).
    max_abs, max_rel : float or None
        Greatest absolute / relative difference over the elements finite on both
        sides (``max_rel`` is ``None`` on the quick path).
    max_abs_index, max_rel_index : list of int
        Where they are, as an index in the tensor's shape (empty on the quick path).
    rel_err : float
        ``||cand - ref|| / ||ref||`` over the same elements.
    cosine : float or None
        Cosine similarity of the flattened tensors (``None`` on the quick path).
    nonfinite_reference, nonfinite_candidate : int
        NaN/Inf counts per side.
    within_tolerance : bool
    tolerance : str
        The tolerance used, in words (:meth:`Tolerance.describe`).
    """

    numel: int
    mismatched: int
    max_abs: float
    max_rel: float | None
    rel_err: float
    cosine: float | None
    nonfinite_reference: int
    nonfinite_candidate: int
    within_tolerance: bool
    tolerance: str
    max_abs_index: list[int] = field(default_factory=list)
    max_rel_index: list[int] = field(default_factory=list)

    def evidence(self) -> dict[str, Any]:
        """Flat numbers and strings for a finding's evidence.

        Returns
        -------
        dict
            Every field of the dataclass; the index lists become text (``"(0, 3, 17)"``) so the
            evidence stays flat.
        """
        return {k: (str(tuple(v)) if isinstance(v, list) else v) for k, v in asdict(self).items()}


def first_tensor(obj: Any):
    """The first tensor in ``obj``, searched depth first.

    Parameters
    ----------
    obj : Any
        A tensor, a tuple/list, a dict or a transformers ``ModelOutput`` (an ordered dict
        of its non-``None`` fields, so an absent ``loss`` is skipped), nested in any way.
        Other objects (``None``, numbers, dataclasses) hold no tensor.

    Returns
    -------
    torch.Tensor or None
        The tensor itself (not a copy, any dtype or shape); ``None`` when there is none.
    """
    import torch

    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, dict):  # ModelOutput is an OrderedDict of its non-None fields
        for v in obj.values():
            t = first_tensor(v)
            if t is not None:
                return t
        return None
    if isinstance(obj, (tuple, list)):
        for v in obj:
            t = first_tensor(v)
            if t is not None:
                return t
    return None


def _flat_pair(ref, cand):
    """Both tensors flattened, the candidate on the reference's device; ValueError when their
    element counts differ."""
    if ref.numel() != cand.numel():
        raise ValueError(f"cannot compare tensors of {ref.numel()} elements {tuple(ref.shape)} and "
                         f"{cand.numel()} elements {tuple(cand.shape)}")
    a = ref.detach().reshape(-1)
    return a, cand.detach().to(a.device).reshape(-1)


_CHUNK = 1 << 22  # elements per chunk: bounds the comparison's transient memory
#: On CUDA a chunk's reductions are launch-bound below ~10M elements: 64M float32 elements
#: (256 MB transient) compare a 512 x 151936 logit tensor in two chunks.
_CHUNK_CUDA = 1 << 26


def quick_metrics(ref, cand, tol: Tolerance) -> TensorMetrics | None:
    """The cheap path of :func:`tensor_metrics` for the common case of a match.

    Walks the tensors once with a handful of fused-friendly operations per chunk
    (difference, its norm and maximum, the elementwise bound) and one host sync at the end.

    Parameters
    ----------
    ref : torch.Tensor [shape=(...)]
        Reference output.
    cand : torch.Tensor [shape=(...)]
        Candidate output, same number of elements (compared flattened, in float32 on
        ``ref``'s device).
    tol : Tolerance
        Elementwise (``atol + rtol * |ref|``) or tensor-level (``rel``) bound.

    Returns
    -------
    TensorMetrics or None
        When every element is finite and within tolerance: the metrics with
        ``mismatched=0``, ``max_abs``, ``rel_err``, and ``max_rel`` / ``cosine`` ``None``
        and empty indices (not computed). ``None`` otherwise: the caller then runs
        :func:`tensor_metrics` for the full report.

    Raises
    ------
    ValueError
        When the element counts differ (a one-element candidate would otherwise broadcast).
    """
    import torch

    a_all, b_all = _flat_pair(ref, cand)
    n = a_all.numel()
    if not a_all.is_floating_point():
        a_all = a_all.float()
    f32 = torch.float64 if a_all.dtype == torch.float64 else torch.float32  # accumulation dtype
    chunk = _CHUNK_CUDA if a_all.is_cuda else _CHUNK
    # per chunk: ||a||, ||b - a|| and max |b - a| (norm reductions read bf16/fp16 in float32
    # without a copy on CUDA); the partial figures stay on the device until one host copy
    parts = []
    for start in range(0, n, chunk):
        a = a_all[start:start + chunk]
        d = b_all[start:start + chunk].to(f32, copy=True).sub_(a)  # never in place on cand
        norms = [torch.linalg.vector_norm(a, dtype=f32), torch.linalg.vector_norm(d),
                 torch.linalg.vector_norm(d, ord=float("inf"))]
        if tol.elementwise:
            norms.append((d.abs_() > torch.abs(a.to(f32)).mul_(tol.rtol).add_(tol.atol)).sum().to(f32))
        parts.append(torch.stack(norms))
    if not parts:
        return TensorMetrics(numel=0, mismatched=0, max_abs=0.0, max_rel=None, rel_err=0.0, cosine=None,
                             nonfinite_reference=0, nonfinite_candidate=0, within_tolerance=True,
                             tolerance=tol.describe())
    host = torch.stack(parts).double().cpu()
    aa_v = float((host[:, 0] ** 2).sum())
    dd_v = float((host[:, 1] ** 2).sum())
    mx_v = float(host[:, 2].max())
    mis_v = float(host[:, 3].sum()) if tol.elementwise else 0.0
    if not all(map(lambda v: v == v and abs(v) != float("inf"), (aa_v, dd_v, mx_v))):
        return None  # NaN/Inf somewhere: the full report counts and locates them
    ref_norm = aa_v ** 0.5
    rel_err = (dd_v ** 0.5) / ref_norm if ref_norm > 0 else dd_v ** 0.5
    within = mis_v == 0 if tol.elementwise else rel_err <= (tol.rel or 0.0)
    if not within:
        return None
    return TensorMetrics(numel=n, mismatched=0, max_abs=mx_v, max_rel=None, rel_err=rel_err, cosine=None,
                         nonfinite_reference=0, nonfinite_candidate=0, within_tolerance=True,
                         tolerance=tol.describe())


def tensor_metrics(ref, cand, tol: Tolerance) -> TensorMetrics:
    """Compare two tensors of the same shape elementwise and as a whole.

    Parameters
    ----------
    ref, cand : torch.Tensor [shape=(...)]
        Reference and candidate outputs. Shapes must match; dtypes may differ
        (both are compared in float32 on the reference's device, reductions
        accumulated in float64).
    tol : Tolerance

    Returns
    -------
    TensorMetrics

    Raises
    ------
    ValueError
        When the element counts differ (a one-element candidate would otherwise broadcast
        against every reference element and compare as if it were the whole tensor).

    Notes
    -----
    The tensors are walked in chunks of 2**22 elements so that comparing a
    ``(512, 151936)`` logits tensor costs about 150 MB of transient memory,
    not several GB, whatever the model depth.
    """
    import torch

    a_all, b_all = _flat_pair(ref, cand)
    n = a_all.numel()
    dev = a_all.device
    f64 = torch.float64
    acc = {k: torch.zeros((), dtype=f64, device=dev) for k in ("aa", "bb", "dd", "ab")}
    cnt = {k: torch.zeros((), dtype=torch.long, device=dev) for k in ("mis", "nfa", "nfb")}
    best_abs = (torch.tensor(-1.0, device=dev), torch.zeros((), dtype=torch.long, device=dev))
    best_rel = (torch.tensor(-1.0, device=dev), torch.zeros((), dtype=torch.long, device=dev))
    tiny = torch.finfo(torch.float32).tiny
    for start in range(0, n, _CHUNK):
        a = a_all[start:start + _CHUNK].float()
        b = b_all[start:start + _CHUNK].float()
        fa, fb = torch.isfinite(a), torch.isfinite(b)
        cnt["nfa"] += (~fa).sum()
        cnt["nfb"] += (~fb).sum()
        both = fa & fb
        d = (b - a).abs_()
        d = torch.where(both, d, torch.zeros_like(d))  # figures over finite elements only
        absa = a.abs()
        cnt["mis"] += (d > absa * tol.rtol + tol.atol).sum() + (~both).sum()  # NaN/Inf mismatch
        v, i = torch.max(d, 0)
        take = v > best_abs[0]
        best_abs = (torch.where(take, v, best_abs[0]), torch.where(take, i + start, best_abs[1]))
        rel = d / absa.clamp_min_(tiny)
        v, i = torch.max(rel, 0)
        take = v > best_rel[0]
        best_rel = (torch.where(take, v, best_rel[0]), torch.where(take, i + start, best_rel[1]))
        a0 = torch.where(both, a, 0.0)
        b0 = torch.where(both, b, 0.0)
        acc["aa"] += torch.sum(a0 * a0, dtype=f64)
        acc["bb"] += torch.sum(b0 * b0, dtype=f64)
        acc["ab"] += torch.sum(a0 * b0, dtype=f64)
        acc["dd"] += torch.sum((b0 - a0) ** 2, dtype=f64)
    vals = torch.stack([acc["aa"], acc["bb"], acc["ab"], acc["dd"], best_abs[0].double(),
                        best_rel[0].double(), best_abs[1].double(), best_rel[1].double(),
                        cnt["mis"].double(), cnt["nfa"].double(), cnt["nfb"].double()]).tolist()
    aa, bb, ab, dd, max_abs, max_rel, i_abs, i_rel, mis, nfa, nfb = vals
    ref_norm, cand_norm = aa ** 0.5, bb ** 0.5
    rel_err = (dd ** 0.5) / ref_norm if ref_norm > 0 else dd ** 0.5
    denom = ref_norm * cand_norm
    cosine = ab / denom if denom > 0 else (1.0 if cand_norm == 0 else 0.0)
    shape = tuple(ref.shape)
    mismatched, nf_a, nf_b = int(mis), int(nfa), int(nfb)
    if tol.elementwise:
        within = mismatched == 0 and nf_a == nf_b == 0
    else:
        within = rel_err <= (tol.rel or 0.0) and nf_a == nf_b == 0
    return TensorMetrics(
        numel=n,
        mismatched=mismatched,
        max_abs=max(max_abs, 0.0) if n else 0.0,
        max_abs_index=_unravel(int(i_abs), shape),
        max_rel=max(max_rel, 0.0) if n else 0.0,
        max_rel_index=_unravel(int(i_rel), shape),
        rel_err=rel_err,
        cosine=cosine,
        nonfinite_reference=nf_a,
        nonfinite_candidate=nf_b,
        within_tolerance=bool(within),
        tolerance=tol.describe(),
    )


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    idx = []
    for dim in reversed(shape):
        idx.append(flat % dim if dim else 0)
        flat = flat // dim if dim else 0
    return list(reversed(idx))


def describe_mismatch(m: TensorMetrics) -> str:
    """One sentence in the style of ``assert_close``: counts, greatest differences and where.

    Parameters
    ----------
    m : TensorMetrics
        From :func:`tensor_metrics` (the full path: ``max_rel`` and ``cosine`` must be set).

    Returns
    -------
    str
        E.g. ``"12 / 4096 elements differ beyond tolerance; greatest absolute difference
        0.031 at index (0, 3, 17), ... ||a-b||/||b|| = 0.02, cosine 0.999800 (float32:
        |a-b| <= 1e-05 + 1.3e-06*|b|)"``, prefixed by the NaN/Inf counts when there are any.

    Notes
    -----
    The wording follows ``torch.testing.assert_close``'s failure message
    (``torch/testing/_comparison.py``, ``_make_mismatch_msg``).
    """
    nf = ""
    if m.nonfinite_reference or m.nonfinite_candidate:
        nf = (f"NaN/Inf: {m.nonfinite_reference} in the reference, {m.nonfinite_candidate} in "
              "the candidate (finite elements compared below); ")
    return nf + (f"{m.mismatched} / {m.numel} elements differ beyond tolerance; greatest absolute "
                 f"difference {m.max_abs:.3g} at index {tuple(m.max_abs_index)}, greatest relative "
                 f"difference {m.max_rel:.3g} at index {tuple(m.max_rel_index)}; "
                 f"||a-b||/||b|| = {m.rel_err:.3g}, cosine {m.cosine:.6f} ({m.tolerance})")
