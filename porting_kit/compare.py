"""Full-tensor comparison of a reference and a candidate output.

The report follows ``torch.testing.assert_close``'s failure message: how many
elements mismatched out of how many, the greatest absolute difference and its
index, the greatest relative difference and its index, and the tolerance used;
plus the tensor-level relative error, the cosine similarity and NaN/Inf counts.
"""

from __future__ import annotations

from typing import Any

from porting_kit.tolerance import Tolerance


def first_tensor(obj: Any):
    """The first tensor in ``obj``: a tensor, a tuple/list, a dict or a transformers
    ``ModelOutput`` (whose ``None`` fields, like an absent ``loss``, are skipped).
    Returns ``None`` when there is none."""
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


def tensor_metrics(ref, cand, tol: Tolerance) -> dict[str, Any]:
    """Compare two tensors of the same shape elementwise and as a whole.

    Parameters
    ----------
    ref, cand : torch.Tensor [shape=(...)]
        Reference and candidate outputs. Shapes must match; dtypes may differ
        (both are compared in float64 on the reference's device).
    tol : Tolerance

    Returns
    -------
    dict
        ``numel``, ``mismatched`` (elements outside ``atol + rtol*|ref|``),
        ``max_abs`` and ``max_abs_index``, ``max_rel`` and ``max_rel_index``,
        ``rel_err`` (``||cand-ref||/||ref||``), ``cosine``, ``nonfinite_reference``,
        ``nonfinite_candidate``, ``within_tolerance`` (bool) and ``tolerance`` (text).
        Indices are tuples in the tensor's shape.
    """
    import torch

    a = ref.detach().to(torch.float64)
    b = cand.detach().to(device=a.device, dtype=torch.float64)
    n = a.numel()
    nf_a = int((~torch.isfinite(a)).sum())
    nf_b = int((~torch.isfinite(b)).sum())
    diff = (b - a).abs()
    diff_f = torch.nan_to_num(diff, nan=float("inf"))
    allowed = tol.atol + tol.rtol * a.abs()
    mismatched = int((diff_f > allowed).sum())
    flat = int(torch.argmax(diff_f)) if n else 0
    rel = diff_f / a.abs().clamp_min(torch.finfo(torch.float64).tiny)
    flat_rel = int(torch.argmax(rel)) if n else 0
    finite = torch.isfinite(a) & torch.isfinite(b)
    a0, b0 = torch.where(finite, a, 0.0), torch.where(finite, b, 0.0)
    ref_norm = float(a0.norm())
    rel_err = float((b0 - a0).norm() / ref_norm) if ref_norm > 0 else float((b0 - a0).norm())
    denom = float(a0.norm() * b0.norm())
    cosine = float((a0 * b0).sum() / denom) if denom > 0 else (1.0 if float(b0.norm()) == 0 else 0.0)
    shape = tuple(a.shape)
    if tol.elementwise:
        within = mismatched == 0 and nf_a == nf_b == 0
    else:
        within = rel_err <= (tol.rel or 0.0) and nf_a == nf_b == 0
    return {
        "numel": n,
        "mismatched": mismatched,
        "max_abs": float(diff_f.reshape(-1)[flat]) if n else 0.0,
        "max_abs_index": _unravel(flat, shape),
        "max_rel": float(rel.reshape(-1)[flat_rel]) if n else 0.0,
        "max_rel_index": _unravel(flat_rel, shape),
        "rel_err": rel_err,
        "cosine": cosine,
        "nonfinite_reference": nf_a,
        "nonfinite_candidate": nf_b,
        "within_tolerance": bool(within),
        "tolerance": tol.describe(),
    }


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    idx = []
    for dim in reversed(shape):
        idx.append(flat % dim if dim else 0)
        flat = flat // dim if dim else 0
    return list(reversed(idx))


def describe_mismatch(m: dict[str, Any]) -> str:
    """One sentence in the style of ``assert_close``: counts, greatest differences and where."""
    nf = ""
    if m["nonfinite_reference"] or m["nonfinite_candidate"]:
        nf = (f"NaN/Inf: {m['nonfinite_reference']} in the reference, {m['nonfinite_candidate']} in "
              "the candidate (finite elements compared below); ")
    return nf + (f"{m['mismatched']} / {m['numel']} elements differ beyond tolerance; greatest absolute "
            f"difference {m['max_abs']:.3g} at index {tuple(m['max_abs_index'])}, greatest relative "
            f"difference {m['max_rel']:.3g} at index {tuple(m['max_rel_index'])}; "
            f"||a-b||/||b|| = {m['rel_err']:.3g}, cosine {m['cosine']:.6f} ({m['tolerance']})")
