"""RoPE diagnosis: name the rotary fault behind a divergence in attention.

Codes: ``rope.inv_freq_uninitialized``, ``rope.theta_mismatch``,
``rope.layout_mismatch``, ``rope.partial_rotary_mismatch``,
``rope.position_offset``, ``rope.scaling_ignored``, ``rope.low_precision``,
``rope.unexplained``; ``rope.ok``; ``rope.skipped``.

How it decides (differential, :mod:`porting_kit.probes.rotary` does the measuring)
--------------------------------------------------------------------------
1. *Stored tables.* The candidate's ``inv_freq`` / ``cos_sin_cache`` /
   ``freqs_cis`` / ``cos_cached``+``sin_cached`` must be a RoPE table (finite,
   positive, decreasing, at most 1 rad/position; a precomputed table's first rows
   of one magnitude, angle 0 at position 0 and position ``p`` at ``p`` times
   position 1's); otherwise ``rope.inv_freq_uninitialized`` -- except a
   table that ends in one regular block of zeros after a valid prefix
   (partial rotary by padding: zero ``inv_freq``, identity cos/sin), which is
   compared as partial rotary: a rotated fraction different from the
   reference's is ``rope.partial_rotary_mismatch`` (both fractions in the
   evidence), an equal one goes on to the measured rotation.
2. *Measured rotation.* The first attention call's q/k are captured on each side
   (from the parity pass's forward when the run includes parity,
   :mod:`porting_kit.probes.prefill`; else both models run once, up to that call).
   *Screen:* when the candidate's post-rotary q/k equal the reference's at every
   position within a quarter of the angle tolerance, it is ``rope.ok`` and nothing
   below runs. The reference's rotation
   is undone with its own ``cos``/``sin``, giving pre-rotary q/k. If the
   candidate's post-rotary vectors do not have the same per-token norms
   (rotation preserves them), q/k already differ *before* RoPE: not a RoPE
   fault (the norm check and parity locate it) and ``rope.ok`` says so.
   Before that verdict the *mixed layouts* are tried: cos/sin built in the
   half-split (HF cache) layout but applied with the interleaved rotation, or
   built interleaved and applied with rotate-half; when one reproduces the
   candidate's q/k it is ``rope.layout_mismatch`` (either direction).
3. The candidate's pairing of dims is found by fitting every structure
   (rotate-half / interleaved, through the Llama q/k permutation or not,
   rotary over r dims). Rotate-half, or interleaved through the permutation,
   is what the weight map makes equivalent to the reference; the other
   pairings are ``rope.layout_mismatch``; fewer rotated dims than the
   reference is ``rope.partial_rotary_mismatch``.
4. The fitted angles ``theta[t, i]`` are compared with the reference's and
   with each hypothesis in turn: positions shifted by an integer ``k``;
   the reference's base without its ``rope_scaling`` (recomputed with
   transformers' own ``ROPE_INIT_FUNCTIONS``); another ``rope_theta`` (fitted,
   with the reference's scaling kept); low-precision angles (error growing
   with position). The first that explains the angles within tolerance is
   named with its numbers; when none does, ``rope.unexplained`` shows them.
   The fitted magnitude is compared with the reference's attention scaling too;
   an attention scaling multiplies cos and sin, so it scales q and k alike, and
   the closer of q's and k's factors is taken: a factor on one of them only is
   the softmax scale folded into q (or k), which the parity pass judges, not RoPE.

Only what the weight map leaves invariant is compared, and never position 0
alone (the rotation is the identity there): on the clean Meta-vs-HF Llama pair
(interleaved Meta, rotate-half HF, q/k permutation in the conversion) the
structure found is "interleaved through the permutation", the reference's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from porting_kit.context import CheckContext
from porting_kit.report.findings import Finding, Where, ok, skip
from porting_kit.locate import RotarySite, find_rotary
from porting_kit.probes.rotary import (
    HALF,
    INTERLEAVED,
    Structure,
    capture_cos_sin,
    capture_qk,
    default_inv_freq,
    fit_base,
    fit_frequencies,
    garbage_reason,
    measure_rotation,
    mixed_layout_residuals,
    padded_table,
    qk_residual,
    reference_inv_freq,
    rotary_permutation,
    sliced_width,
    rope_parameters,
    structures,
    table_rows_reason,
    undo_reference_rotation,
    wrap,
)
from porting_kit.load import run_side
from porting_kit.probes.prefill import get_facts
from porting_kit.probes.tolerance import ROPE_TOLERANCES

P = "rope"

#: Tolerances by the dtype of the captured q/k (measured: probes/tolerance.py).
_TOL = ROPE_TOLERANCES
#: The screen passes when q/k agree within this fraction of the angle tolerance (a rotation
#: off by ``d`` rad moves a vector by about ``d`` of its norm, so a fault the angle test would
#: name moves q/k by more than the bound at some position).
SCREEN_FRACTION = 0.25

_HINTS = {
    "rope.inv_freq_uninitialized": (
        "inv_freq is a non-persistent buffer: after meta-device init / to_empty() it holds garbage "
        "and load_weights never sets it. Recompute it after loading (base ** (-arange(0, dim, 2) / dim)) "
        "or build the rotary module on the real device."),
    "rope.theta_mismatch": (
        "Read rope_theta where the config keeps it (transformers 5.x: config.rope_parameters"
        "['rope_theta']) instead of a top-level attribute with a default."),
    "rope.layout_mismatch": (
        "The candidate pairs dims differently from its weights' row order: either apply rotate-half "
        "(NeoX) to HF-ordered q/k, or permute the q/k projection rows (interleaved <-> rotate-half, "
        "as convert_llama_weights_to_hf does) for an interleaved (GPT-J / complex) kernel."),
    "rope.partial_rotary_mismatch": (
        "Rotate exactly rotary_dim = head_dim * partial_rotary_factor dims, pass the rest through, and "
        "compute inv_freq over rotary_dim."),
    "rope.position_offset": (
        "Positions must start where the reference's do (0 for a prompt, the cache length in decode); "
        "check how the port builds positions / slices the cos-sin cache."),
    "rope.scaling_ignored": (
        "Apply the config's rope scaling (rope_parameters['rope_type'] and factor: linear, dynamic, "
        "yarn, llama3) when computing inv_freq, e.g. with transformers' ROPE_INIT_FUNCTIONS."),
    "rope.low_precision": (
        "Compute inv_freq, position * inv_freq and cos/sin in float32 (autocast off), then cast the "
        "result to the activation dtype."),
    "rope.unexplained": (
        "Compare the candidate's rotary code line by line with the reference's: none of the known "
        "faults explains the measured rotation (numbers in evidence)."),
}


@dataclass
class Probe:
    """What the behavioural probe captured (the first attention call of each side).

    Attributes
    ----------
    q_pre, k_pre : torch.Tensor [shape=(batch, heads, seq, head_dim), float64]
        The reference's pre-rotary q / k (its rotation undone with its own cos/sin), in
        the reference's dim order; k brought to the candidate's head count.
    q_post, k_post : torch.Tensor [shape=(batch, heads, seq, head_dim), float64]
        The candidate's post-rotary q / k as fed to its attention kernel.
    theta_ref : torch.Tensor [shape=(seq, rotary_dim_ref // 2)]
        The reference's rotation angles in radians (batch row 0).
    scale_ref : float
        The reference's attention scaling (magnitude of cos/sin; 1 for plain RoPE).
    positions : torch.Tensor [shape=(seq,), float64]
        Positions of the reference's rotary call (``arange(seq)`` when not passed).
    head_dim : int
    rotary_dim_ref : int
        Dims the reference rotates (last axis of its cos/sin).
    dtype : str
        dtype of the candidate's q (picks the tolerances).
    ref_site, cand_site : str
        Innermost module running at each side's attention call.
    """

    q_pre: Any = field(repr=False)
    k_pre: Any = field(repr=False)
    q_post: Any = field(repr=False)
    k_post: Any = field(repr=False)
    theta_ref: Any = field(repr=False)  # (T, n_ref)
    scale_ref: float
    positions: Any = field(repr=False)  # (T,)
    head_dim: int
    rotary_dim_ref: int
    dtype: str
    ref_site: str
    cand_site: str


def _fail(code: str, message: str, evidence: dict, where: Where) -> Finding:
    return Finding(P, code, "fail", message, evidence, where, _HINTS[code])


def _nice(x: float) -> str:
    """3 significant digits, integers without exponent: 10000, 1000000, 500000, 0.5."""
    if not math.isfinite(x):
        return str(x)
    v = float(f"{x:.3g}")
    return f"{v:.0f}" if v >= 1 and v == int(v) else f"{v:g}"


def run(ctx: CheckContext) -> list[Finding]:
    """The rope family: see the module docstring.

    Parameters
    ----------
    ctx : CheckContext
        Needs the parity trio; reads ``ctx.first_divergence`` (when parity ran first) and
        writes ``ctx.extras["rope_sites"]`` / ``ctx.extras["rope_probe"]``.

    Returns
    -------
    list of Finding
        Exactly one: a ``rope.*`` fault code (``fail``), ``rope.ok``, or
        ``rope.skipped`` (no parity trio, or no rotary table on either side).

    Raises
    ------
    InputError
        The pair cannot be loaded or a forward raises (:func:`porting_kit.load.run_side`).
    """
    if not ctx.spec.has_parity:
        return [skip(P, "the spec has no reference()/candidate()/inputs(): nothing to probe")]
    from porting_kit.load import load_pair

    pair = load_pair(ctx)
    facts = get_facts(ctx, "rope")
    if facts is not None:  # found by the parity pass's instrumented forward (probes/prefill.py)
        ref_sites, cand_sites = facts[0].rotary_sites, facts[1].rotary_sites
    else:
        ref_sites, cand_sites = find_rotary(pair.reference), find_rotary(pair.candidate)
    ctx.extras["rope_sites"] = {"reference": [s.name for s in ref_sites],
                                "candidate": [s.name for s in cand_sites]}
    if not ref_sites and not cand_sites:
        return [skip(P, "no rotary module (inv_freq / cos_sin_cache / freqs_cis) found on either side")]
    where = Where(ref_sites[0].module_name if ref_sites else None,
                  cand_sites[0].module_name if cand_sites else None)

    ref_ok = not ref_sites or garbage_reason(ref_sites[0].inv_freq) is None \
        or padded_table(ref_sites[0].inv_freq) is not None
    for s in cand_sites:
        rows_reason = table_rows_reason(s.rows)
        reason = rows_reason or garbage_reason(s.inv_freq)
        if reason and not rows_reason and ref_ok and padded_table(s.inv_freq) is not None:
            padded = padding_finding(ref_sites, s, Where(where.reference, s.module_name))
            if padded is not None:
                return [_with_divergence(padded, ctx)]
            continue  # deliberate padding, same rotated fraction: the rotation is measured below
        if reason and ref_ok:
            ev = {"candidate_table": s.name, "reason": reason,
                  "candidate_inv_freq_head": [float(v) for v in s.inv_freq[:5]]}
            if ref_sites:
                ev["reference_inv_freq_head"] = [float(v) for v in ref_sites[0].inv_freq[:5]]
            return [_fail("rope.inv_freq_uninitialized",
                          f"The candidate's {s.name} is not a RoPE table ({reason}): the buffer was "
                          "left uninitialised.", ev, Where(where.reference, s.module_name))]

    if facts is None:  # the parity pass did not record them: this family's own forwards
        rq, cq, cs = _capture(ctx, pair, ref_sites)
    else:  # recorded by the parity pass's forward (probes/prefill.py): no forward here
        rq, cq, cs = facts[0].qk, facts[1].qk, facts[0].cos_sin or []
    screened = _screen(rq, cq, ref_sites, where, ctx.extras)
    if screened is not None:
        return [screened]
    probe, why = _probe(ref_sites, rq, cq, cs)
    if probe is None:
        return [_static_diagnosis(ref_sites, cand_sites, where, why)]
    ctx.extras["rope_probe"] = probe
    cand_where = where.candidate if where.candidate not in (None, "<root>") else probe.cand_site
    where = Where(where.reference or probe.ref_site, cand_where)
    return [_with_divergence(_diagnose(probe, ref_sites[0], cand_sites, where, ctx), ctx)]


def padding_finding(ref_sites: list[RotarySite], cand: RotarySite, where: Where) -> Finding | None:
    """``rope.partial_rotary_mismatch`` for a zero-padded candidate table whose rotated
    fraction differs from the reference's; None when the fractions agree.

    Parameters
    ----------
    ref_sites : list of RotarySite
        The reference's tables (the first is compared; none: nothing to compare, None).
    cand : RotarySite
        A candidate table that :func:`porting_kit.probes.rotary.padded_table` recognises.
    where : Where

    Returns
    -------
    Finding or None
        The fractions are of the candidate's padded width (``head_dim / 2`` pairs when the
        table spans the head): candidate ``rotating / width``, reference its own rotating
        pairs (padded or not) over the same width.
    """
    pad = padded_table(cand.inv_freq)
    if pad is None or not ref_sites:
        return None
    ref_pad = padded_table(ref_sites[0].inv_freq)
    ref_rot = ref_pad.rotating_pairs if ref_pad else int(ref_sites[0].inv_freq.numel())
    ref_frac = min(ref_rot, pad.total_pairs) / pad.total_pairs
    if ref_rot == pad.rotating_pairs:
        return None
    ev = {"candidate_table": cand.name, "candidate_rotary_fraction": pad.fraction,
          "reference_rotary_fraction": ref_frac, "candidate_rotating_pairs": pad.rotating_pairs,
          "candidate_table_pairs": pad.total_pairs, "reference_rotating_pairs": ref_rot,
          "candidate_rotary_dim": 2 * pad.rotating_pairs, "reference_rotary_dim": 2 * ref_rot,
          "padding": "zero inv_freq entries (identity cos/sin)"}
    return _fail("rope.partial_rotary_mismatch",
                 f"The candidate rotates {pad.rotating_pairs} of {pad.total_pairs} pairs (fraction "
                 f"{pad.fraction:.3g}: its {cand.name} is zero-padded, partial rotary by padding), the "
                 f"reference {ref_rot} (fraction {ref_frac:.3g}).", ev, where)


def _mixed_layout(pr: Probe, tol: dict[str, float], where: Where, reason: str) -> Finding | None:
    """``rope.layout_mismatch`` when cos/sin built in one layout and applied with the other
    rotation explain the candidate's q and k (:func:`~porting_kit.probes.rotary.mixed_layout_residuals`):
    on the reference's dim order or through the conversion's q/k permutation over the rotary
    dims, with tables of the rotary width or zero-padded to the full head (partial rotary by
    padding)."""
    head_dim, r = pr.q_pre.shape[-1], 2 * pr.theta_ref.shape[-1]
    res: dict[str, float] = {}
    spans: dict[str, tuple[int, str]] = {}
    # the candidate's dims in interleaved order through the conversion's q/k permutation over
    # the rotary dims (a Meta-style interleaved model whose port builds HF-layout tables)
    perm = rotary_permutation(r, head_dim).to(pr.q_pre.device) if r <= head_dim else None
    for span in dict.fromkeys((r, head_dim - head_dim % 2)):
        if span < r:
            continue
        pad = "" if span == r else f"_padded_to_{span}"
        for through, (q, k) in ((False, (pr.q_pre, pr.k_pre)),
                                (True, (None, None) if perm is None else (pr.q_pre[..., perm], pr.k_pre[..., perm]))):
            if q is None:
                continue
            rq = mixed_layout_residuals(q, pr.q_post, pr.theta_ref, pr.scale_ref, span)
            rk = mixed_layout_residuals(k, pr.k_post, pr.theta_ref, pr.scale_ref, span)
            for h in rq:
                key = h + (_THROUGH if through else "") + pad
                res[key], spans[key] = max(rq[h], rk[h]), (span, h)
    best = min(res, key=lambda k: res[k])
    if res[best] > tol["structure"]:
        return None
    span, hypothesis = spans[best]
    through = _THROUGH in best
    table, rotation = (("half-split (cat(f, f), HF cache)", "interleaved pairs")
                       if hypothesis == "half_table_interleaved_rotation"
                       else ("interleaved (repeat_interleave(f, 2))", "rotate-half"))
    ev = {"hypothesis": hypothesis, "cos_sin_layout": table.split(" ")[0], "rotation_layout": rotation,
          "hypothesis_residual": res[best], "probe_site_candidate": pr.cand_site,
          "through_qk_permutation": through, "table_span": span,
          "reference_layout": HALF, **{f"residual_{k}": v for k, v in res.items()}}
    via = " (its q/k rows in the interleaved order of the conversion's q/k permutation)" if through else ""
    if span != r:
        via += f" (its tables zero-padded from {r} to {span} dims: partial rotary by padding)"
    return _fail("rope.layout_mismatch",
                 f"The candidate builds cos/sin in the {table} layout but rotates {rotation}{via}: that "
                 f"mix reproduces its q/k (relative residual {res[best]:.2g}); {reason}.", ev, where)


_THROUGH = "_through_permutation"


def _with_divergence(f: Finding, ctx: CheckContext) -> Finding:
    """Name the parity first divergence (when parity ran first) beside a failing diagnosis."""
    fd = ctx.first_divergence
    if f.status == "fail" and fd:
        f.evidence["first_divergence"] = f"{fd.get('reference_module')} ~ {fd.get('candidate_module')}"
    return f


# ------------------------------------------------------------------- probe

def _capture(ctx: CheckContext, pair, ref_sites: list[RotarySite]):
    """This family's own forwards (when the parity pass recorded no facts): layer-0 q/k on
    both sides and the reference's cos/sin. Returns ``(ref_qk, cand_qk, cos_sin)`` lists."""
    if not ref_sites:
        return [], [], []
    spec = ctx.spec
    # each forward stops at its first attention call (layer 0): the rest is not needed
    with capture_cos_sin(ref_sites[0].module) as cs, capture_qk(pair.reference, stop=True) as rq:
        run_side(spec, "reference", pair.reference, pair.inputs)
    with capture_qk(pair.candidate, stop=True) as cq:
        run_side(spec, "candidate", pair.candidate, pair.inputs)
    return rq, cq, cs


def _screen(rq, cq, ref_sites: list[RotarySite], where: Where, extras: dict) -> Finding | None:
    """The cheap screen: ``rope.ok`` when the candidate's post-rotary q and k at its first
    attention call equal the reference's, position by position, within a quarter of the
    dtype's angle tolerance (relative residual, :func:`~porting_kit.probes.rotary.qk_residual`);
    None (diagnose: fit the pairing, the angles and the hypotheses) otherwise, or when the
    shapes do not line up as they are (a permuted or interleaved layout is diagnosed in full).
    On a pass, writes ``extras["rope_error_vs_position"]``: ``(position, residual)`` pairs,
    the residual standing for the angle error (radians) the full fit would measure."""
    if not ref_sites or not rq or not cq:
        return None
    r, c = rq[0], cq[0]
    q_post, k_post = _match_shape(c.q, r.q), _match_shape(c.k, r.k)
    if q_post is None or k_post is None or q_post.shape != r.q.shape:
        return None
    k_ref, k_post = _same_heads(r.k, k_post)
    if k_ref.shape != k_post.shape:
        return None
    dtype = str(c.q.dtype).replace("torch.", "")
    bound = _TOL.get(dtype, _TOL["float32"])["angle"] * SCREEN_FRACTION
    res = qk_residual(r.q, q_post, k_ref, k_post)
    if not res.max_residual <= bound:  # NaN fails too
        return None
    # the notebooks' error-vs-position plot: the residual is about the angle error (radians)
    extras["rope_error_vs_position"] = list(enumerate(res.per_position))
    return ok(P, f"The candidate's post-rotary q/k equal the reference's at its first attention call "
                 f"(max relative residual {res.max_residual:.2g} over {res.positions} positions, "
                 f"bound {bound:.2g}): its RoPE matches.",
              {"qk_relative_residual": res.max_residual, "screen_bound": bound,
               "positions": res.positions, "probe_site_candidate": c.site,
               "probe_site_reference": where.reference or r.site})


def _probe(ref_sites: list[RotarySite], rq, cq, cs) -> tuple[Probe | None, str]:
    """Build the :class:`Probe` from layer-0 q/k of both sides and the reference's cos/sin."""
    import torch

    if not ref_sites:
        return None, "the reference has no rotary module to take cos/sin from"
    if not cs:
        return None, f"the reference's {ref_sites[0].module_name} did not return (cos, sin)"
    if not rq or not cq:
        side = "reference" if not rq else "candidate"
        return None, f"no attention call (scaled_dot_product_attention / q @ k^T) seen in the {side}"
    cos, sin, pos = (None if t is None else t.cpu() for t in cs[0])
    r, c = rq[0], cq[0]
    r.q, r.k, c.q, c.k = r.q.cpu(), r.k.cpu(), c.q.cpu(), c.k.cpu()  # small: one layer's q/k
    q_post, k_post = _match_shape(c.q, r.q), _match_shape(c.k, r.k)
    if q_post is None or k_post is None:
        return None, (f"attention q/k shapes differ: reference {tuple(r.q.shape)}/{tuple(r.k.shape)}, "
                      f"candidate {tuple(c.q.shape)}/{tuple(c.k.shape)}")
    k_ref, k_post = _same_heads(r.k, k_post)
    if cos.shape[-1] > r.q.shape[-1] or cos.shape[-2] != r.q.shape[-2]:
        return None, f"reference cos/sin shape {tuple(cos.shape)} does not fit q {tuple(r.q.shape)}"
    q_pre, theta_ref, scale = undo_reference_rotation(r.q, cos, sin)
    k_pre, _, _ = undo_reference_rotation(k_ref, cos, sin)
    t = r.q.shape[-2]
    positions = (pos[0].to(torch.float64) if pos is not None and pos.numel() >= t
                 else torch.arange(t, dtype=torch.float64))
    dtype = str(c.q.dtype).replace("torch.", "")
    return Probe(q_pre, k_pre, q_post.to(torch.float64), k_post.to(torch.float64), theta_ref, scale,
                 positions.reshape(-1)[-t:], r.q.shape[-1], cos.shape[-1], dtype, r.site, c.site), ""


def _match_shape(x, like):
    if x.shape == like.shape:
        return x
    if x.ndim == 4 and x.transpose(1, 2).shape == like.shape:
        return x.transpose(1, 2)
    if x.ndim == 4 and x.shape[0] == like.shape[0] and x.shape[2] == like.shape[2] \
            and x.shape[-1] == like.shape[-1]:
        return x  # head counts differ (GQA repeat): settled by _same_heads
    return None


def _same_heads(ref_k, cand_k):
    """Bring k of both sides to the same number of heads (undo a repeat_kv on one side)."""
    hr, hc = ref_k.shape[1], cand_k.shape[1]
    if hr == hc:
        return ref_k, cand_k
    if hr > hc and hr % hc == 0:
        return ref_k[:, :: hr // hc], cand_k
    if hc > hr and hc % hr == 0:
        return ref_k, cand_k[:, :: hc // hr]
    return ref_k, cand_k


# --------------------------------------------------------------- diagnosis

def _diagnose(pr: Probe, ref_site: RotarySite, cand_sites, where: Where, ctx: CheckContext) -> Finding:
    """Gate on finite q/k and kept norms, fit the pairing, then the layout, the rotary
    dims and the angles; :func:`_explain` tries the angle hypotheses in order."""
    import torch

    tol = _TOL.get(pr.dtype, _TOL["float32"])
    if not (torch.isfinite(pr.q_post).all() and torch.isfinite(pr.k_post).all()):
        return _fail("rope.unexplained", "The candidate's post-rotary q/k hold NaN/Inf while its "
                     "frequency table looks valid.", {"candidate_nonfinite_q": int((~torch.isfinite(
                         pr.q_post)).sum())}, where)

    # Gate: a rotation keeps every head vector's norm (up to a constant attention scaling).
    spread = max(_norm_spread(pr.q_pre, pr.q_post), _norm_spread(pr.k_pre, pr.k_post))
    if spread > tol["gate"]:
        mixed = _mixed_layout(pr, tol, where, f"its rotation changes per-token norms by {spread:.3g}, "
                              "which no consistent RoPE does")
        if mixed is not None:
            return mixed
        return ok(P, "q/k already differ before the rotary embedding (per-token norms differ by "
                  f"{spread:.3g}): not a RoPE fault; see the norm and parity findings.",
                  {"qk_norm_spread": spread, "probe_site_candidate": pr.cand_site})

    fit = _fit_structure(pr, tol)
    evidence: dict[str, Any] = {"probe_site_reference": where.reference or "",
                                "probe_site_candidate": pr.cand_site,
                                "reference_structure": fit.ref_equiv[0].describe(),
                                "candidate_structure": fit.st.describe(),
                                "structure_residual": fit.residual,
                                "reference_structure_residual": fit.ref_residual}
    if fit.residual > tol["structure"]:
        mixed = _mixed_layout(pr, tol, where, f"no consistent pairing fits (best residual {fit.residual:.3g})")
        if mixed is not None:
            return mixed
        evidence["qk_norm_spread"] = spread
        return _fail("rope.unexplained", "The candidate rotates q/k in a way no RoPE dim pairing "
                     f"explains (best residual {fit.residual:.3g} for {fit.st.describe()}).", evidence, where)

    pairing = _pairing_finding(pr, fit, evidence, where)
    if pairing is not None:
        return pairing

    # Angles: reference, then the hypotheses in order.
    n_ref = pr.theta_ref.shape[-1]
    th_q, th_k = fit.fq.theta[:, :n_ref], fit.fk.theta[:, :n_ref]
    e_ref = max(_angle_error(th_q, pr.theta_ref), _angle_error(th_k, pr.theta_ref))
    # An attention scaling (YaRN's mscale) multiplies cos and sin, so it scales q and k alike; a
    # factor on one of them only is the softmax scale folded into q (or k) before the product,
    # not a RoPE matter (the parity pass judges the attention output). So the candidate's
    # attention scaling is the one of q's and k's factors closer to the reference's.
    scale_q, scale_k = float(fit.fq.scale.mean()), float(fit.fk.scale.mean())
    scale_c = min((scale_q, scale_k), key=lambda x: abs(x - pr.scale_ref))
    evidence.update({"angle_error_rad": e_ref, "reference_attention_scaling": pr.scale_ref,
                     "candidate_attention_scaling": scale_c, "candidate_q_scale": scale_q,
                     "candidate_k_scale": scale_k})
    series = _error_series(th_q, pr.theta_ref, pr.positions)
    ctx.extras["rope_error_vs_position"] = series
    if e_ref <= tol["angle"] and abs(scale_c - pr.scale_ref) <= 10 * tol["angle"]:
        return ok(P, f"The candidate's RoPE matches the reference ({fit.st.describe()}; max angle error "
                  f"{e_ref:.2g} rad).", {"angle_error_rad": e_ref, "candidate_structure": fit.st.describe()})
    return _explain(pr, ref_site, th_q, th_k, e_ref, tol, evidence, series, where)


@dataclass
class _StructureFit:
    """The best dim pairing for the candidate's rotation, and the reference's under the map."""

    residual: float
    st: Structure
    fq: Any
    fk: Any
    ref_equiv: list[Structure]
    ref_residual: float


def _fit_structure(pr: Probe, tol: dict[str, float]) -> _StructureFit:
    """Fit every RoPE dim pairing to the candidate's q and k rotations; the best one first
    (within tolerance, the reference's equivalent pairing and the widest rotary dims win)."""
    fits = []
    base = structures(pr.head_dim, pr.rotary_dim_ref)
    # a slice at a width that is no quarter fraction of the head: found on the data
    sliced = sliced_width(pr.q_pre, pr.q_post, {s.rotary_dim for s in base})
    for st in structures(pr.head_dim, pr.rotary_dim_ref, extra=() if sliced is None else (sliced,)):
        fq, fk = measure_rotation(pr.q_pre, pr.q_post, st), measure_rotation(pr.k_pre, pr.k_post, st)
        fits.append((max(fq.residual, fk.residual), st, fq, fk))
    ref_equiv = _reference_equivalent(pr)
    fits.sort(key=lambda f: (f[0] > tol["structure"], f[0] if f[0] > tol["structure"] else 0,
                             not _equiv(f[1], ref_equiv), -f[1].rotary_dim))
    best_res, st, fq, fk = fits[0]
    ref_fit = next(f for f in fits if f[1] == ref_equiv[0])
    return _StructureFit(best_res, st, fq, fk, ref_equiv, ref_fit[0])


def _pairing_finding(pr: Probe, fit: _StructureFit, evidence: dict[str, Any],
                     where: Where) -> Finding | None:
    """``rope.layout_mismatch`` or ``rope.partial_rotary_mismatch`` when the fitted pairing
    or the number of rotating dims differs from the reference's; None when both agree."""
    n_ref = pr.theta_ref.shape[-1]
    rot_dim = 2 * _rotating_pairs(fit.fq.theta, pr.theta_ref)
    evidence.update({"reference_rotary_dim": pr.rotary_dim_ref, "candidate_rotary_dim": rot_dim})
    if not _equiv(fit.st, fit.ref_equiv):
        evidence["reference_layout"] = HALF
        evidence["candidate_layout"] = fit.st.layout + (" (q/k rows permuted)" if fit.st.permuted else "")
        if fit.fq.theta.shape[-1] >= n_ref:
            evidence["angle_error_rad"] = _angle_error(fit.fq.theta[:, :n_ref], pr.theta_ref)
        return _fail("rope.layout_mismatch",
                     f"The candidate pairs q/k dims as {fit.st.describe()}, the reference (through the weight "
                     f"map) as {fit.ref_equiv[0].describe()}: the rotary layouts differ (residual "
                     f"{fit.ref_residual:.3g} under the reference's pairing, {fit.residual:.2g} under the "
                     "candidate's).", evidence, where)
    if rot_dim != pr.rotary_dim_ref:
        return _fail("rope.partial_rotary_mismatch",
                     f"The candidate rotates {rot_dim} of {pr.head_dim} head dims, the reference "
                     f"{pr.rotary_dim_ref}.", evidence, where)
    if fit.st.rotary_dim != pr.rotary_dim_ref and fit.ref_residual > _TOL.get(pr.dtype, _TOL["float32"])["structure"]:
        # as many rotating pairs, but paired across the full head: inv_freq (or the cos/sin
        # table) zero-padded to head_dim / 2 and applied with rotate-half pairs (i, i + head_dim/2)
        evidence.update({"candidate_pairing_span": fit.st.rotary_dim, "reference_pairing_span": pr.rotary_dim_ref,
                         "padding": "rotary table zero-padded to the full head dim (identity pairs)"})
        return _fail("rope.partial_rotary_mismatch",
                     f"The candidate rotates {rot_dim} of {pr.head_dim} head dims like the reference, but "
                     f"pairs them across {fit.st.rotary_dim} dims ({fit.st.describe()}) where the reference "
                     f"pairs across {pr.rotary_dim_ref}: partial rotary done by zero-padding the rotary table "
                     f"to the full head dim (residual {fit.ref_residual:.3g} under the reference's pairing).",
                     evidence, where)
    return None


def _explain(pr: Probe, ref_site: RotarySite, th_q, th_k, e_ref, tol, evidence, series,
             where: Where) -> Finding:
    """Try the angle hypotheses in order — position offset, scaling ignored, another
    rope_theta, low precision — and name the first that explains the angles; else
    ``rope.unexplained`` with the numbers."""
    pos = pr.positions
    w_ref, _ = fit_frequencies(pr.theta_ref, pos)
    params = rope_parameters(ref_site)
    base_ref = params.get("rope_theta") or float(_nice(fit_base(w_ref)[0]))
    rope_type = params.get("rope_type", "default")

    kq, eq = _best_offset(th_q, w_ref, pos)
    found = (_offset_hypothesis(th_k, w_ref, pos, kq, eq, tol, evidence, where)
             or _scaling_hypothesis(ref_site, rope_type, base_ref, params, th_q, th_k, pos, tol, evidence,
                                    where))
    if found is not None:
        return found
    w_c, _ = fit_frequencies(th_q, pos)
    b_fit, e_theta = _fit_theta(w_c, ref_site, rope_type, th_q, th_k, pos, tol["angle"])
    evidence["candidate_rope_theta_fit"] = b_fit
    found = (_theta_hypothesis(b_fit, e_theta, base_ref, tol, evidence, where)
             or _low_precision_hypothesis(w_c, w_ref, e_ref, series, evidence, where))
    if found is not None:
        return found
    evidence.update({"best_offset_q": kq, "best_offset_error_rad": eq, "theta_fit_error_rad": e_theta,
                     "reference_rope_theta": base_ref})
    return _fail("rope.unexplained",
                 f"The candidate's RoPE angles differ from the reference's by up to {e_ref:.3g} rad, "
                 f"and no known fault explains it (fitted base {_nice(b_fit)}, best offset {kq}).",
                 evidence, where)


def _offset_hypothesis(th_k, w_ref, pos, kq: int, eq: float, tol, evidence, where: Where) -> Finding | None:
    """1. ``rope.position_offset``: q (offset ``kq``, error ``eq``) and k fitted separately."""
    kk, ek = _best_offset(th_k, w_ref, pos)
    if not ((kq or kk) and max(eq, ek) <= tol["angle"]):
        return None
    evidence.update({"offset": kq if kq else kk, "offset_q": kq, "offset_k": kk})
    msg = (f"The candidate's rotation matches the reference's at positions shifted by "
           f"k={kq if kq else kk} (q shifted {kq}, k shifted {kk}; angle error {max(eq, ek):.2g} rad)")
    if kq == kk:
        # q and k shifted alike: RoPE scores depend on q/k position differences only, so the
        # attention output is the reference's; a warning (absolute positions matter past the
        # table's length, under position-dependent scaling, or to another part of the model)
        return Finding(P, "rope.position_offset", "warn",
                       msg + ": q and k alike, so the attention scores are unchanged (RoPE is relative); "
                       "it matters where the absolute position does (table length, dynamic scaling).",
                       evidence, where, _HINTS["rope.position_offset"])
    return _fail("rope.position_offset", msg + ".", evidence, where)


def _scaling_hypothesis(ref_site: RotarySite, rope_type, base_ref: float, params, th_q, th_k, pos, tol,
                        evidence, where: Where) -> Finding | None:
    """2. ``rope.scaling_ignored``: the reference's base without its rope scaling."""
    if rope_type in (None, "default"):
        return None
    w_plain = reference_inv_freq(ref_site, scaled=False)
    if w_plain is None or w_plain.numel() != th_q.shape[-1]:
        return None
    e = _angle_error_hyp(th_q, th_k, pos, w_plain)
    if e > tol["angle"]:
        return None
    evidence.update({"reference_rope_type": rope_type, "candidate_rope_type": "default",
                     "reference_rope_theta": base_ref,
                     "scaling_factor": params.get("factor", ""), "hypothesis_error_rad": e})
    return _fail("rope.scaling_ignored",
                 f"The candidate matches the reference's base {_nice(base_ref)} without its "
                 f"'{rope_type}' rope scaling (angle error {e:.2g} rad).", evidence, where)


def _theta_hypothesis(b_fit: float, e_theta: float, base_ref: float, tol, evidence,
                      where: Where) -> Finding | None:
    """3. ``rope.theta_mismatch``: another rope_theta (the reference's scaling kept)."""
    if not (math.isfinite(b_fit) and abs(b_fit / base_ref - 1) > 1e-2 and e_theta <= tol["angle"]):
        return None
    evidence.update({"reference_rope_theta": base_ref, "candidate_rope_theta": float(_nice(b_fit)),
                     "hypothesis_error_rad": e_theta})
    return _fail("rope.theta_mismatch",
                 f"The candidate matches the reference with rope_theta={_nice(b_fit)}; the reference "
                 f"uses {_nice(base_ref)} (angle error {e_theta:.2g} rad under that base).",
                 evidence, where)


def _low_precision_hypothesis(w_c, w_ref, e_ref: float, series, evidence, where: Where) -> Finding | None:
    """4. ``rope.low_precision``: a small error that grows with position. Records the error
    series and the inv_freq relative error in ``evidence`` either way."""
    import torch

    errs = torch.tensor([e for _, e in series], dtype=torch.float64)
    rel_w = float(((w_c - w_ref).abs() / w_ref.abs().clamp_min(1e-30)).max()) if w_c.numel() else 1.0
    short = _short(series)
    evidence["error_positions"] = [int(p) for p, _ in short]
    evidence["error_rad"] = [float(f"{e:.3g}") for _, e in short]
    evidence["inv_freq_max_rel_error"] = rel_w
    if not (_grows(errs) and e_ref < 0.5 and rel_w < 2e-2):
        return None
    return _fail("rope.low_precision",
                 f"The candidate's rotation angles drift from the reference's as position grows (max "
                 f"{e_ref:.2g} rad at the last positions, {float(errs[: max(1, len(errs) // 4)].mean()):.2g} "
                 "at the first): cos/sin or inv_freq computed in low precision.", evidence, where)


# ----------------------------------------------------------------- helpers

def _reference_equivalent(pr: Probe) -> list[Structure]:
    return [Structure(HALF, False, pr.rotary_dim_ref), Structure(INTERLEAVED, True, pr.rotary_dim_ref)]


def _equiv(st: Structure, ref_equiv: list[Structure]) -> bool:
    """Same pairing as the reference (rotate-half on reference order) under the weight map."""
    return _effective_layout(st) == HALF


def _effective_layout(st: Structure) -> str:
    """The layout in the reference's dim order: interleaved through the q/k permutation is
    rotate-half; rotate-half through it is neither (reported as interleaved)."""
    return INTERLEAVED if (st.layout == INTERLEAVED) != st.permuted else HALF


def _norm_spread(pre, post) -> float:
    import torch

    a = pre.to(torch.float64).norm(dim=-1).flatten()
    b = post.to(torch.float64).norm(dim=-1).flatten()
    keep = a > a.max() * 1e-6
    r = b[keep] / a[keep]
    med = r.median()
    return float(((r / med) - 1).abs().max()) if r.numel() else 0.0


def _rotating_pairs(theta_c, theta_ref) -> int:
    """Number of candidate pairs that rotate (a contiguous prefix; the tail passes through)."""
    import torch

    n = theta_c.shape[-1]
    amp_c = wrap(theta_c).abs().amax(0)
    amp_r = torch.zeros(n, dtype=torch.float64)
    m = min(n, theta_ref.shape[-1])
    amp_r[:m] = wrap(theta_ref[:, :m]).abs().amax(0)
    count = n
    while count > 0:
        i = count - 1
        ref_amp = amp_r[i] if i < m else amp_r[m - 1]
        if amp_c[i] < max(1e-3 * float(ref_amp), 1e-9):
            count -= 1
        else:
            break
    return count


def _angle_error(theta_c, theta_ref) -> float:
    return float(wrap(theta_c - theta_ref).abs().max())


def _angle_error_hyp(th_q, th_k, pos, inv_freq) -> float:
    import torch

    th = pos[:, None].to(torch.float64) * inv_freq[None, :]
    return max(_angle_error(th_q, th), _angle_error(th_k, th))


def _best_offset(theta_c, w_ref, pos) -> tuple[int, float]:
    """Integer k minimising the angle error of ``(pos + k) * inv_freq``; (k, error)."""
    import torch

    t = pos.numel()
    ks = torch.arange(-2 * t, 2 * t + 1, dtype=torch.float64)
    th = (pos[None, :, None] + ks[:, None, None]) * w_ref[None, None, :]
    err = wrap(theta_c[None] - th).abs().amax(dim=(1, 2))
    i = int(torch.argmin(err))
    return int(ks[i]), float(err[i])


def _fit_theta(w_c, ref_site, rope_type, th_q, th_k, pos, tol: float) -> tuple[float, float]:
    """The base that, with the reference's scaling kept, best explains the candidate's angles.

    The fitted base is tried rounded to 1, 2 and 3 significant digits first; the simplest one
    within ``tol`` wins (bfloat16 angles fit 9930 as well as 10000). Returns (base, error in rad).
    """
    import torch

    b0, _ = fit_base(w_c)
    if not math.isfinite(b0):
        return float("nan"), float("inf")
    raw = [b0]
    if rope_type not in (None, "default"):
        grid = torch.logspace(2, 8, 121, dtype=torch.float64).tolist()
        raw.append(min(grid, key=lambda b: _table_err(reference_inv_freq(ref_site, base=b), w_c)))
    cands = [float(f"{b:.{d}g}") for d in (1, 2, 3) for b in raw] + raw
    errors = []
    for b in cands:
        w = reference_inv_freq(ref_site, base=b) if rope_type not in (None, "default") else None
        if w is None or w.numel() != w_c.numel():
            w = default_inv_freq(b, 2 * w_c.numel())
        e = _angle_error_hyp(th_q, th_k, pos, w)
        if e <= tol:
            return b, e
        errors.append((e, b))
    e, b = min(errors)
    return b, e


def _table_err(w, w_c) -> float:
    if w is None or w.numel() != w_c.numel():
        return float("inf")
    return float(((w - w_c).abs() / w_c.abs().clamp_min(1e-30)).max())


def _error_series(theta_c, theta_ref, positions) -> list[tuple[int, float]]:
    """Max angle error per position (over pairs), in position order."""
    import torch

    e = wrap(theta_c - theta_ref).abs().amax(-1)
    order = torch.argsort(positions)
    return [(int(positions[i]), float(e[i])) for i in order]


def _short(series, n: int = 8):
    if len(series) <= n:
        return series
    idx = [round(i * (len(series) - 1) / (n - 1)) for i in range(n)]
    return [series[i] for i in idx]


def _grows(errs) -> bool:
    """True when errors grow with position: last quarter >= 3x first quarter and correlated."""
    import torch

    n = errs.numel()
    if n < 8:
        return False
    q = max(1, n // 4)
    first, last = float(errs[:q].mean()), float(errs[-q:].mean())
    x = torch.arange(n, dtype=torch.float64)
    xm, em = x - x.mean(), errs - errs.mean()
    corr = float((xm * em).sum() / ((xm.norm() * em.norm()).clamp_min(1e-300)))
    return last > 3 * first + 1e-9 and corr > 0.5


# ------------------------------------------------------------ static fallback

def _static_diagnosis(ref_sites, cand_sites, where: Where, why: str) -> Finding:
    """Compare stored frequency tables only (no forward capture was possible)."""

    if not ref_sites or not cand_sites:
        return skip(P, f"cannot compare RoPE: {why}; rotary tables found: reference "
                       f"{len(ref_sites)}, candidate {len(cand_sites)}")
    r, c = ref_sites[0], cand_sites[0]
    ev: dict[str, Any] = {"note": f"static comparison only ({why})", "reference_table": r.name,
                          "candidate_table": c.name}
    if r.inv_freq.numel() != c.inv_freq.numel():
        ev.update({"reference_rotary_dim": 2 * r.inv_freq.numel(),
                   "candidate_rotary_dim": 2 * c.inv_freq.numel()})
        return _fail("rope.partial_rotary_mismatch", f"The candidate's table covers "
                     f"{2 * c.inv_freq.numel()} rotary dims, the reference's {2 * r.inv_freq.numel()}.",
                     ev, where)
    rel = float(((c.inv_freq - r.inv_freq).abs() / r.inv_freq.abs().clamp_min(1e-30)).max())
    ev["inv_freq_max_rel_error"] = rel
    if rel <= 1e-5:
        return ok(P, "The stored RoPE tables agree (static comparison; no forward capture).", ev)
    params = rope_parameters(r)
    rope_type = params.get("rope_type", "default")
    base_ref = params.get("rope_theta") or float(_nice(fit_base(r.inv_freq)[0]))
    if rope_type not in (None, "default"):
        plain = reference_inv_freq(r, scaled=False)
        if plain is not None and _table_err(plain, c.inv_freq) <= 1e-5:
            ev.update({"reference_rope_type": rope_type, "reference_rope_theta": base_ref})
            return _fail("rope.scaling_ignored", f"The candidate's table is the reference's base "
                         f"{_nice(base_ref)} without its '{rope_type}' scaling.", ev, where)
    b, res = fit_base(c.inv_freq)
    if res <= 1e-4 and abs(b / base_ref - 1) > 1e-2:
        ev.update({"reference_rope_theta": base_ref, "candidate_rope_theta": float(_nice(b))})
        return _fail("rope.theta_mismatch", f"The candidate matches the reference with rope_theta="
                     f"{_nice(b)}; the reference uses {_nice(base_ref)}.", ev, where)
    if c.dtype in ("bfloat16", "float16") and rel < 2e-2:
        ev["candidate_dtype"] = c.dtype
        return _fail("rope.low_precision", f"The candidate keeps inv_freq in {c.dtype}.", ev, where)
    return _fail("rope.unexplained", f"The stored RoPE tables differ (max relative error {rel:.3g}) "
                 "and no known fault explains it.", ev, where)
