"""Layer parity measurements: sketch passes over both forwards, alignment, screening, location.

The facts behind the ``parity`` family (:mod:`porting_kit.checks.parity` builds its
findings from the :class:`ParityResult` this module returns).

How the first divergence is located
-----------------------------------
Each side runs once with sketch hooks (:mod:`porting_kit.probes.capture`) on the
modules outside repeated blocks plus one per block (``coarse_names``: one hook
per decoder layer, not fifteen). Aligned pairs (:mod:`porting_kit.probes.align`) are
screened in reference completion order with the sketch error against the
dtype's tolerance (:mod:`porting_kit.probes.tolerance`); the outputs are compared in
full. When a block differs, both sides run again with hooks on everything
inside that block only, and the screen repeats there. For the first flagged module ``M``: if its
input already differed, the fault lies in code of the nearest aligned
ancestor that is not itself a module (attention math between ``q_proj`` and
``o_proj``, a residual add), so that ancestor is the location; otherwise
``M`` is. Only then both models run once more, capturing the full tensors of
that pair, and the finding reports ``assert_close``-style figures.

Confirmation with full tensors (:func:`_confirm`). Sketches estimate norms; an
elementwise tolerance can fail while every norm is under its bound. So when the
location would be the root (or a wrapper above the layer stack) while aligned
pairs below it exist, when the output differs and nothing was located, or (float32
/ float64) when nothing was located but some pair's estimated relative error
exceeds ``rtol``, both sides run again capturing every aligned pair below the root
in full; the first failing one is refined inside its block (fine pass + full
tensors). When the first failing module's input is within tolerance but carries
most of its error (a norm rescaling a small upstream error past ``atol``), the
location is the earlier pair whose own code makes that error: its output's
relative error is over twice its input's and at least a quarter of the traced one
(:func:`_creation_point`; a softmax scale off by 0.03 % lands in that layer's
attention). The spec's ``module_tolerances`` and ``allow_divergence``
(:func:`module_rules`) apply per pair throughout.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from porting_kit.errors import InputError
from porting_kit.load import LoadedPair, load_pair
from porting_kit.probes.align import AlignedPair, Alignment, align
from porting_kit.probes.capture import (
    Record,
    capture_full,
    capture_summaries,
    coarse_walk,
    estimate_errors,
    subtree_names,
)
from porting_kit.probes.prefill import capture_prefill_facts, wanted
from porting_kit.probes.compare import TensorMetrics, first_tensor, quick_metrics, tensor_metrics
from porting_kit.probes.tolerance import Tolerance, tolerance_for

_MAX_VERIFY = 3


@dataclass
class PairStat:
    """An aligned pair with its screened error (sketch estimates of
    :mod:`porting_kit.probes.capture`).

    Attributes
    ----------
    pair : AlignedPair
        The reference / candidate module calls (comparable: equal output shapes).
    rel_err : float
        Estimated ``||cand - ref|| / ||ref||`` of the outputs (unitless; ~20 % accurate).
    abs_err : float
        Estimated ``||cand - ref||_2``, in the outputs' units.
    flagged : bool
        Either sketch is non-finite, or ``abs_err`` exceeds
        :meth:`Tolerance.tensor_bound` (a bound every in-tolerance pair satisfies).
    input_flagged : bool, default False
        The full-tensor inputs differ beyond tolerance; known only for the pair that was
        located (full re-run).
    tolerance : Tolerance or None
        This pair's tolerance (the spec's ``module_tolerances`` applied); ``None``: the dtype's.
    allowed : bool, default False
        The pair matches the spec's ``allow_divergence``: never flagged nor located.
    """

    pair: AlignedPair
    rel_err: float
    abs_err: float
    flagged: bool
    input_flagged: bool = False
    tolerance: Tolerance | None = None
    allowed: bool = False
    noise: dict | None = None


@dataclass
class ParityResult:
    """Everything layer parity found; cached in ``ctx.state['parity']``.

    Attributes
    ----------
    pair : LoadedPair
    alignment : Alignment
    stats : list of PairStat
        Comparable aligned pairs in reference completion order.
    first_divergence : PairStat or None
        The located pair (possibly the ancestor of the first flagged module).
    first_flagged : PairStat or None
        The first module whose output differs (may be inside ``first_divergence``).
    divergence_metric : TensorMetrics or None
        Full-tensor metrics of the located pair (:func:`porting_kit.probes.compare.tensor_metrics`).
    output_metric : TensorMetrics or None
        Full-tensor metrics of the compared outputs (``run_reference`` vs ``run_candidate``).
    nan_origin : dict
        ``{"reference": Record|None, "candidate": Record|None}``.
    tolerance : Tolerance
    timing : dict
        Seconds: ``forward_reference``, ``forward_candidate``, ``compare``, ``locate``. On
        CUDA the reference's figure is the time to queue its forward (no sync between the
        two passes); its GPU time that had not ended by then counts in the candidate's.
    output_allowed : bool
        The spec's ``allow_divergence`` matches the root (``<root>``): an output mismatch is no
        finding.
    output_noise : dict or None
        When the output fails the tolerance: ``noise_floor_rel`` (the reference's own float32
        error against float64, or ``None``), ``noise_bound_rel`` and ``within_noise`` (the
        output's error is at that noise level: no finding; :mod:`porting_kit.probes.noise`).
    """

    pair: LoadedPair
    alignment: Alignment
    stats: list[PairStat]
    first_divergence: PairStat | None
    first_flagged: PairStat | None
    divergence_metric: TensorMetrics | None
    output_metric: TensorMetrics | None
    nan_origin: dict
    tolerance: Tolerance
    reference_records: list[Record] = field(repr=False, default_factory=list)
    candidate_records: list[Record] = field(repr=False, default_factory=list)
    timing: dict = field(default_factory=dict)
    output_allowed: bool = False
    output_noise: dict | None = None

    @property
    def output_within_noise(self) -> bool:
        """The output fails the elementwise tolerance only by the reference's own rounding noise."""
        return bool(self.output_noise and self.output_noise["within_noise"])


def _run(spec, side: str, model, inputs):
    fn_name = f"run_{side}"
    if spec.has(fn_name):
        out = spec.call(fn_name, model, inputs)
    else:
        try:
            out = model(**inputs)
        except Exception as exc:
            raise InputError(f"{spec.name}: {side} forward model(**inputs) raised "
                             f"{type(exc).__name__}: {exc}; define run_{side}(model, inputs)") from exc
    t = first_tensor(out)
    if t is None:
        raise InputError(f"{spec.name}: the {side} forward returned no tensor")
    return t


def _forward(spec, side, model, inputs, records, output_permutation=None, only=None):
    import torch

    with capture_summaries(model, records, output_permutation=output_permutation, only=only), \
            torch.no_grad():
        out = _run(spec, side, model, inputs)
    _sync(out)
    return out


def _sync(t) -> None:
    import torch

    if t.is_cuda:
        torch.cuda.synchronize(t.device)


@dataclass
class ModuleRules:
    """The spec's per-module overrides: ``module_tolerances`` and ``allow_divergence``.

    Attributes
    ----------
    tolerances : list of (str, dict)
        ``(glob, {"atol": float, "rtol": float, "rel": float})`` in the spec's order; the
        first glob matching a pair's reference or candidate module name wins; keys left out
        keep the dtype's value.
    allowed : list of str
        Globs of modules allowed to differ: such pairs are compared and listed, never flagged
        nor located (modules after them are still compared).
    """

    tolerances: list[tuple[str, dict]] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)

    def _matches(self, pat: str, p: AlignedPair) -> bool:
        import fnmatch

        return any(fnmatch.fnmatchcase(display_name(n), pat) for n in (p.reference.key, p.candidate.key))

    def tolerance(self, p: AlignedPair, tol: Tolerance) -> Tolerance:
        """``tol`` with the first matching ``module_tolerances`` entry applied."""
        for pat, over in self.tolerances:
            if self._matches(pat, p):
                return Tolerance(tol.dtype, rtol=over.get("rtol", tol.rtol), atol=over.get("atol", tol.atol),
                                 rel=over.get("rel", tol.rel))
        return tol

    def is_allowed(self, p: AlignedPair) -> bool:
        """True when a glob of ``allow_divergence`` matches either module name."""
        return any(self._matches(pat, p) for pat in self.allowed)


def module_rules(spec) -> ModuleRules:
    """The spec's ``module_tolerances`` / ``allow_divergence``, checked.

    Parameters
    ----------
    spec : porting_kit.spec.Spec
        ``module_tolerances``: ``{glob: {"atol": x, "rtol": y}}`` (``"rel"`` also accepted, the
        bf16/fp16 tensor-level bound); ``allow_divergence``: a list of globs. Globs match
        module names (``fnmatch``: ``model.layers.*.mlp``, ``<root>`` for the model itself).

    Returns
    -------
    ModuleRules

    Raises
    ------
    InputError
        Not a dict of dicts of non-negative numbers with keys among atol / rtol / rel, or not a
        list of strings (exit 2).
    """
    mt = spec.get("module_tolerances") or {}
    ad = spec.get("allow_divergence") or []
    if not isinstance(mt, dict):
        raise InputError(f"{spec.name}: module_tolerances must be a dict {{glob: {{'atol': .., 'rtol': ..}}}}")
    rules = ModuleRules()
    for pat, over in mt.items():
        if not isinstance(pat, str) or not isinstance(over, dict) or not over or \
                set(over) - {"atol", "rtol", "rel"} or \
                not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in over.values()):
            raise InputError(f"{spec.name}: module_tolerances[{pat!r}] must be a dict of non-negative numbers "
                             f"with keys atol, rtol, rel; got {over!r}")
        rules.tolerances.append((pat, {k: float(v) for k, v in over.items()}))
    if isinstance(ad, str) or not isinstance(ad, (list, tuple)) or not all(isinstance(x, str) for x in ad):
        raise InputError(f"{spec.name}: allow_divergence must be a list of module-name globs, got {ad!r}")
    rules.allowed = list(ad)
    return rules


def screen_pairs(pairs: list[AlignedPair], tol: Tolerance, rules: ModuleRules | None = None) -> list[PairStat]:
    """Screen the comparable pairs on their sketches: flagged when the estimated absolute error
    is over the pair's tolerance (the spec's ``module_tolerances`` applied) or an output has
    NaN/Inf, unless ``allow_divergence`` matches. The errors are estimated in one batch (one
    host copy for all pairs, not one per pair)."""
    comp = [p for p in pairs if p.comparable]
    errs = estimate_errors([(p.reference.out, p.candidate.out) for p in comp])
    rules = rules or ModuleRules()
    stats = []
    for p, (rel, ab) in zip(comp, errs):
        r, c = p.reference.out, p.candidate.out
        own = rules.tolerance(p, tol)
        allowed = rules.is_allowed(p)
        flagged = not allowed and (bool(r.nonfinite or c.nonfinite) or ab > own.tensor_bound(r.numel, r.norm))
        stats.append(PairStat(p, rel, ab, flagged, tolerance=own, allowed=allowed))
    return stats


def _is_ancestor(a: str, b: str) -> bool:
    return (a == "" and b != "") or b.startswith(a + ".")


def _ancestors(stats: list[PairStat], st: PairStat) -> list[PairStat]:
    """Aligned comparable pairs enclosing ``st`` on both sides, innermost first."""
    r, c = st.pair.reference.name, st.pair.candidate.name
    anc = [s for s in stats if s is not st and _is_ancestor(s.pair.reference.name, r)
           and _is_ancestor(s.pair.candidate.name, c)]
    return sorted(anc, key=lambda s: -s.pair.reference.depth)


def _locate(spec, pair: LoadedPair, stats: list[PairStat], first: PairStat,
            tol: Tolerance) -> tuple[PairStat, dict | None]:
    """Re-run both models once, capturing the full tensors of ``first`` and its aligned
    ancestors. When ``first``'s input already differed, the fault is in the own code of
    the nearest flagged ancestor (attention math between ``q_proj`` and ``o_proj``, a
    residual add): that ancestor is the location. Returns (location, its full metrics)."""
    anc = _ancestors(stats, first)
    group = [first] + anc
    got_r, got_c = _full(spec, pair, {s.pair.reference.key for s in group},
                         {s.pair.candidate.key for s in group})

    def metrics(st: PairStat, which: int) -> TensorMetrics | None:
        r = got_r.get(st.pair.reference.key, (None, None))[which]
        c = got_c.get(st.pair.candidate.key, (None, None))[which]
        if r is None or c is None or tuple(r.shape) != tuple(c.shape):
            return None
        if which == 1:
            perm = pair.weights.output_permutation.get(st.pair.candidate.name)
            if perm is not None and perm.numel() == c.shape[-1]:
                import torch

                c = c[..., torch.argsort(perm.to(c.device))]  # back to the reference's order
        return tensor_metrics(r, c, tol)

    m_in = metrics(first, 0)
    first.input_flagged = bool(m_in is not None and not m_in.within_tolerance)
    if first.input_flagged:
        for a in anc:
            if a.flagged:
                return a, metrics(a, 1)
    return first, metrics(first, 1)


def _needs_confirmation(first: PairStat | None, stats: list[PairStat], output_metric,
                        tol: Tolerance) -> bool:
    """Whether the sketches may have missed the real location, so full tensors per block must decide.

    True when the location is the root, or a module enclosing aligned repeated blocks
    (decoder layers), while aligned pairs below it exist (the root's own
    code is rarely the fault: a small error spread over the blocks reaches the screen only
    after the final norm), when the output differs but no pair was located, or, for the
    elementwise tolerances (float32 / float64), when nothing was located but some pair's
    estimated relative error exceeds ``rtol`` (clean float32 pairs stay well below it; an
    ``assert_close`` failure can hide under the norm bound the sketches are screened with).
    """
    below = [s for s in stats if s.pair.reference.name != "" and not s.allowed]
    if not below:
        return False
    if first is not None:
        # the root, or a wrapper above the layer stack (``model`` inside ``LlamaForCausalLM``)
        loc = first.pair.reference.name
        return loc == "" or any(_is_ancestor(loc, s.pair.reference.name)
                                and re.search(r"\.\d+$", s.pair.reference.name) for s in below)
    if output_metric is not None and not output_metric.within_tolerance:
        return True
    return tol.elementwise and any(s.rel_err > tol.rtol for s in below)


def _pair_metrics(pair: LoadedPair, got_r: dict, got_c: dict, st: PairStat, which: int,
                  tol: Tolerance) -> TensorMetrics | None:
    """Full metrics of ``st``'s input (``which=0``) or output (``which=1``) from captured tensors;
    the candidate's output is mapped back through its row permutation first."""
    r = got_r.get(st.pair.reference.key, (None, None))[which]
    c = got_c.get(st.pair.candidate.key, (None, None))[which]
    if r is None or c is None or tuple(r.shape) != tuple(c.shape) or not r.is_floating_point():
        return None
    if which == 1:
        perm = pair.weights.output_permutation.get(st.pair.candidate.name)
        if perm is not None and perm.numel() == c.shape[-1]:
            import torch

            c = c[..., torch.argsort(perm.to(c.device))]  # back to the reference's order
    return tensor_metrics(r, c, st.tolerance or tol)


def _confirm(spec, pair: LoadedPair, stats: list[PairStat], tol: Tolerance,
             refine) -> tuple[PairStat, PairStat, TensorMetrics] | None:
    """Full tensors per aligned pair below the root: the first pair failing ``assert_close``-style
    comparison, refined inside its block, placed in the module whose own code differs.

    One re-run of both sides captures the outputs (and inputs) of every aligned pair
    below the root; the first failing one, when it is a block with insides, gets a fine
    pass and a second full capture of its inner pairs. The first failing inner output
    whose input still matched is the location; when its input already differed, the
    nearest failing enclosing pair is. Returns ``(location, first failing output, its
    metrics)``, or ``None`` when every pair below the root passes (or the first failing
    one's input already differed at the top level: the root's own code is then at fault).
    """
    group = [s for s in stats if s.pair.reference.name != "" and not s.allowed]
    got_r, got_c = _full(spec, pair, {s.pair.reference.key for s in group},
                         {s.pair.candidate.key for s in group})
    outs = {id(s): _pair_metrics(pair, got_r, got_c, s, 1, tol) for s in group}
    failing = _beyond_noise(spec, pair, [s for s in group if outs[id(s)] is not None
                                         and not outs[id(s)].within_tolerance], outs, got_r)
    if not failing:
        return None
    top = failing[0]
    inner = refine(top)
    if inner:
        group = inner + [top] + _ancestors(stats, top)
        got_r, got_c = _full(spec, pair, {s.pair.reference.key for s in group},
                             {s.pair.candidate.key for s in group})
        outs = {id(s): _pair_metrics(pair, got_r, got_c, s, 1, tol) for s in group}
        failing = _beyond_noise(spec, pair, [s for s in inner + [top] if not s.allowed and outs[id(s)] is not None
                                             and not outs[id(s)].within_tolerance], outs, got_r)
        if not failing:
            return None
        failing.sort(key=lambda s: s.pair.reference.end if s is not top else 10**12)
    first = failing[0]
    first.flagged = True
    m_in = _pair_metrics(pair, got_r, got_c, first, 0, tol)
    first.input_flagged = bool(m_in is not None and not m_in.within_tolerance)
    m_out = outs[id(first)]
    if not first.input_flagged and m_in is not None and m_in.rel_err > 0 \
            and m_in.rel_err >= _CARRIED * m_out.rel_err:
        # its input is within tolerance yet carries the error it shows (a norm rescaling a
        # small upstream error past atol): find where that error was made
        made = _creation_point(spec, pair, stats, first, m_in.rel_err, tol, refine)
        if made is not None:
            return made[0], made[0], made[1]
    if not first.input_flagged:
        return first, first, m_out
    for a in _ancestors(stats, first):
        m_a = outs.get(id(a))
        if a.pair.reference.name and m_a is not None and not m_a.within_tolerance:
            a.flagged = True
            return a, first, m_a
    return None


def _output_noise(spec, pair: LoadedPair, out_r, m: TensorMetrics) -> dict:
    """The output's noise figures (:attr:`ParityResult.output_noise`): the reference run in
    float64 gives its own rounding of the output; the candidate's error within
    ``NOISE_FACTOR`` times that is noise."""
    from porting_kit.probes.noise import NOISE_FACTOR, measure_floor, within_noise

    floor = measure_floor(pair.reference, pair.inputs, lambda mod, x: _run(spec, "reference", mod, x),
                          set(), {}, out_r)
    if floor is None or floor.output_rel is None:
        return {"noise_floor_rel": None, "noise_bound_rel": None, "within_noise": False}
    bound = NOISE_FACTOR * floor.output_rel
    return {"noise_floor_rel": floor.output_rel, "noise_bound_rel": bound,
            "within_noise": within_noise(m.rel_err, bound)}


def _beyond_noise(spec, pair: LoadedPair, stats: list[PairStat], outs: dict, got_r: dict) -> list[PairStat]:
    """``stats`` less the pairs whose output error is at the reference's own rounding level.

    The reference runs once more in float64 (:func:`porting_kit.probes.noise.measure_floor`,
    only when ``stats`` is not empty) and each pair's candidate error (``outs[id(pair)]``, full
    metrics) is compared with ``NOISE_FACTOR`` times the reference's own error there (or the
    op's ``u * sqrt(K)`` where no floor is measured). The noise figures go on each pair
    (``noise_floor`` / ``noise_bound`` in ``PairStat.noise``)."""
    if not stats:
        return []
    from porting_kit.probes.noise import NOISE_FACTOR, measure_floor, op_floor, within_noise
    from porting_kit.probes.tolerance import dtype_name

    ref_p = next(iter(pair.reference.parameters()), None)
    dtype = dtype_name(ref_p.dtype) if ref_p is not None else "float32"
    if dtype not in ("float32", "float64"):
        # bf16 / fp16 compare tensor-level with a bound measured on clean pairs already; their
        # own rounding (~1e-2) times NOISE_FACTOR would hide a missing q/k permutation (7e-2)
        return list(stats)
    keys = {s.pair.reference.key for s in stats}
    floor = measure_floor(pair.reference, pair.inputs, lambda m, x: _run(spec, "reference", m, x), keys, got_r)
    kept = []
    for s in stats:
        m = outs.get(id(s))
        try:
            module = pair.reference.get_submodule(s.pair.reference.name)
        except AttributeError:
            module = None
        bound = floor.bound(s.pair.reference.key, module) if floor is not None \
            else NOISE_FACTOR * op_floor(module, dtype)
        s.noise = {"noise_floor_rel": floor.rel.get(s.pair.reference.key) if floor is not None else None,
                   "noise_bound_rel": bound}
        if m is None or m.nonfinite_reference or m.nonfinite_candidate or not within_noise(m.rel_err, bound):
            kept.append(s)
    return kept


#: An input carrying at least this share of a module's output error (relative) brought it in.
_CARRIED = 0.5
#: A pair *makes* an error when its output's relative error is over this many times its input's...
_JUMP = 2.0
#: ...and at least this share of the error being traced.
_SHARE = 0.25


def _makes_error(m_in: TensorMetrics | None, m_out: TensorMetrics | None, target: float) -> bool:
    """Whether a pair's own code adds a relative error of the size of ``target`` (unitless)."""
    if m_out is None:
        return False
    rel_in = m_in.rel_err if m_in is not None else 0.0
    return m_out.rel_err >= _SHARE * target and m_out.rel_err > _JUMP * rel_in


def _creation_point(spec, pair: LoadedPair, stats: list[PairStat], failing: PairStat, target: float,
                    tol: Tolerance, refine) -> tuple[PairStat, TensorMetrics] | None:
    """The aligned pair before ``failing`` (completion order) whose own code makes the error that
    ``failing`` shows, refined inside its block; ``None`` when none does.

    Parameters
    ----------
    failing : PairStat
        The first pair failing the tolerance, whose input (within tolerance) already carried
        relative error ``target``.
    refine : callable
        ``refine(block) -> inner pairs`` (the fine pass of :func:`get_result`).

    Notes
    -----
    A pair makes the error when its output's relative error is at least ``_SHARE * target``
    and more than ``_JUMP`` times its input's: a block adding a small error that a later norm
    rescales past ``atol`` (a softmax scale off by 0.03 %) is placed in that block, then
    inside it in the first module that makes the block's error (its attention).
    """
    earlier = [s for s in stats[:stats.index(failing)] if s.pair.reference.name and not s.allowed
               and not _is_ancestor(s.pair.reference.name, failing.pair.reference.name)]
    got_r, got_c = _full(spec, pair, {s.pair.reference.key for s in earlier},
                         {s.pair.candidate.key for s in earlier})
    outs = {id(s): _pair_metrics(pair, got_r, got_c, s, 1, tol) for s in earlier}
    makers = [s for s in earlier if _makes_error(_pair_metrics(pair, got_r, got_c, s, 0, tol), outs[id(s)], target)]
    # an error at the reference's own rounding level is no error made (fp32 growth in a deep stack)
    made = next(iter(_beyond_noise(spec, pair, makers, outs, got_r)), None)
    if made is None:
        return None
    m_made = outs[id(made)]
    inner = refine(made)
    if inner:
        inner = sorted(inner, key=lambda s: s.pair.reference.end)
        got_r, got_c = _full(spec, pair, {s.pair.reference.key for s in inner},
                             {s.pair.candidate.key for s in inner})
        outs = {id(s): _pair_metrics(pair, got_r, got_c, s, 1, tol) for s in inner}
        makers = [s for s in inner if not s.allowed
                  and _makes_error(_pair_metrics(pair, got_r, got_c, s, 0, tol), outs[id(s)], m_made.rel_err)]
        inner_made = next(iter(_beyond_noise(spec, pair, makers, outs, got_r)), None)
        if inner_made is not None:
            made, m_made = inner_made, outs[id(inner_made)]
    made.flagged = True
    return made, m_made


def _full(spec, pair: LoadedPair, ref_keys: set[str], cand_keys: set[str]):
    with capture_full(pair.reference, ref_keys) as got_r:
        _run(spec, "reference", pair.reference, pair.inputs)
    with capture_full(pair.candidate, cand_keys) as got_c:
        _run(spec, "candidate", pair.candidate, pair.inputs)
    return got_r, got_c


def get_result(ctx) -> ParityResult:
    """Run layer parity once for this context (cached in ``ctx.state['parity']``).

    Parameters
    ----------
    ctx : CheckContext
        Its spec must define the parity trio; the loaded pair comes from
        :func:`porting_kit.load.load_pair` (also cached there).

    Returns
    -------
    ParityResult
        The alignment, the screened pairs, the located first divergence (at most three
        flagged blocks are verified with full tensors; sketch false alarms are dropped)
        with its full-tensor metrics, the output metrics, the NaN origins and per-stage
        timing in seconds. The tolerance is that of the reference's first parameter's
        dtype with the spec's ``tolerances``.

    Raises
    ------
    InputError
        A spec without the parity trio, a failing spec call, weights that cannot be
        loaded, a forward that raises or returns no tensor, bad ``tolerances`` or
        ``module_map`` (exit 2).
    """
    if "parity" in ctx.state:
        return ctx.state["parity"]
    spec = ctx.spec
    if not spec.has_parity:
        raise InputError(f"{spec.name}: layer parity needs reference(), candidate() and inputs()")
    pair = load_pair(ctx)
    ref_param = next(iter(pair.reference.parameters()), None)
    tol = tolerance_for(ref_param.dtype if ref_param is not None else "float32", spec.get("tolerances"))
    timing: dict[str, float] = {}

    # Pass 1 hooks the modules outside repeated blocks plus one hook per block (coarse_walk,
    # which never enters the blocks); only when a block differs does a second, fine pass hook
    # everything inside it.
    cw_r, cw_c = coarse_walk(pair.reference), coarse_walk(pair.candidate)
    coarse_r = coarse_c = None
    if cw_r is not None and cw_c is not None:
        coarse_r, coarse_c = {n for n, _ in cw_r}, {n for n, _ in cw_c}
    # No host sync between the two passes: on a GPU the candidate's kernels queue while the
    # reference's still run; both sketch buffers come to the host once both are queued.
    import torch

    # The prefill families' facts (rope's q/k and cos/sin, norm's calls) come from this same
    # forward when the run includes them (ctx.families): they run no forward of their own.
    # They look at every module (one full walk of each model, made there, only when wanted).
    want_rope, want_norm = wanted(getattr(ctx, "families", ()))
    ctx.progress("parity: reference forward")
    t0 = time.perf_counter()
    rrec: list[Record] = []
    with capture_summaries(pair.reference, rrec, only=coarse_r, defer=True,
                           modules=dict(cw_r or ())) as pass_r, \
            capture_prefill_facts(pair.reference, "reference", rope=want_rope,
                                  norm=want_norm) as facts_r, \
            torch.no_grad():
        out_r = _run(spec, "reference", pair.reference, pair.inputs)
    timing["forward_reference"] = time.perf_counter() - t0
    ctx.progress("parity: candidate forward")
    t0 = time.perf_counter()
    crec: list[Record] = []
    with capture_summaries(pair.candidate, crec, output_permutation=pair.weights.output_permutation,
                           only=coarse_c, defer=True, modules=dict(cw_c or ())) as pass_c, \
            capture_prefill_facts(pair.candidate, "candidate", rope=want_rope,
                                  norm=want_norm) as facts_c, \
            torch.no_grad():
        out_c = _run(spec, "candidate", pair.candidate, pair.inputs)
    if facts_r is not None:
        ctx.state["prefill_facts"] = {"reference": facts_r, "candidate": facts_c}
    pass_r.finish()
    pass_c.finish()
    _sync(out_c)
    timing["forward_candidate"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    module_map = spec.get("module_map")
    alignment = align(rrec, crec, module_map=module_map, weight_map=pair.weights.weight_map)
    rules = module_rules(spec)
    stats = screen_pairs(alignment.pairs, tol, rules)
    # the output takes the root pair's rules (a glob matching <root> loosens or allows it)
    root = next((st for st in stats if st.pair.reference.name == ""), None)
    out_tol = root.tolerance if root is not None and root.tolerance is not None else tol
    output_allowed = bool(root is not None and root.allowed)
    if tuple(out_r.shape) == tuple(out_c.shape):
        output_metric = quick_metrics(out_r, out_c, out_tol) or tensor_metrics(out_r, out_c, out_tol)
    else:
        output_metric = None
    output_noise = None
    if output_metric is not None and not output_metric.within_tolerance and not output_allowed \
            and out_tol.elementwise \
            and not (output_metric.nonfinite_reference or output_metric.nonfinite_candidate):
        output_noise = _output_noise(spec, pair, out_r, output_metric)
    timing["compare"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    first, first_flagged, metric = None, None, None
    fine: dict[str, list[Record]] = {"reference": [], "candidate": []}

    def refine(block: PairStat) -> list[PairStat]:
        """Fine pass inside ``block``: sketch every module in it, align, screen; the new pairs
        go into ``stats`` / ``alignment`` just before the block. Returns the block's inner pairs."""
        sub_r = subtree_names(pair.reference, block.pair.reference.name) if coarse_r is not None else set()
        sub_c = subtree_names(pair.candidate, block.pair.candidate.name) if coarse_c is not None else set()
        if len(sub_r) <= 1 and len(sub_c) <= 1:
            return []
        ctx.progress("parity: fine pass in " + display_name(block.pair.reference.name))
        fine_r, fine_c = [], []
        _forward(spec, "reference", pair.reference, pair.inputs, fine_r, only=sub_r)
        _forward(spec, "candidate", pair.candidate, pair.inputs, fine_c,
                 output_permutation=pair.weights.output_permutation, only=sub_c)
        fine["reference"], fine["candidate"] = fine_r, fine_c
        fine_al = align(fine_r, fine_c, module_map=module_map, weight_map=pair.weights.weight_map)
        scope = screen_pairs(fine_al.pairs, tol, rules)
        known = {st.pair.reference.key for st in stats}
        # the block's insides go in just before the block (they complete before it)
        inner = [st for st in scope if st.pair.reference.key not in known]
        at = stats.index(block)
        stats[at:at] = inner  # in place: callers holding ``stats`` see the new pairs
        pos = alignment.pairs.index(block.pair)
        alignment.pairs[pos:pos] = [st.pair for st in inner]
        alignment.unaligned_reference.extend(r for r in fine_al.unaligned_reference if r.key not in known)
        alignment.unaligned_reference[:] = [
            r for r in alignment.unaligned_reference
            if r.key not in {st.pair.reference.key for st in stats}]
        alignment.unaligned_candidate.extend(fine_al.unaligned_candidate)
        return [st for st in scope if st is not block and _is_ancestor(block.pair.reference.name,
                                                                       st.pair.reference.name)]

    pending = [s for s in stats if s.flagged]
    for _ in range(_MAX_VERIFY):
        if not pending:
            break
        block = pending[0]
        cand_first, scope = block, stats
        inner = refine(block)
        if inner:
            scope = stats
            flagged = [st for st in inner if st.flagged]
            if flagged:
                cand_first = flagged[0]
        loc, m = _locate(spec, pair, scope, cand_first, tol)
        if m is None or not m.within_tolerance:
            first, first_flagged, metric = loc, cand_first, m
            break
        # a false alarm of the sketch screen: drop this block and what it located
        pending = [s for s in pending if s is not block and s is not loc and s is not cand_first]
    # an output within the noise floor still gets its modules confirmed: a fault a layer scale
    # dilutes to noise level at the output (Mimi's attention without the q/k permutation: 1.6e-2
    # at the attention, 9.7e-7 at the audio) is judged per module, each against its own floor
    if _needs_confirmation(first, stats, None if output_allowed else output_metric, tol):
        ctx.progress("parity: confirming with full tensors per block")
        confirmed = _confirm(spec, pair, stats, tol, refine)
        if confirmed is not None:
            first, first_flagged, metric = confirmed
    fine_r, fine_c = fine["reference"], fine["candidate"]
    nan_origin = {}
    for side, coarse_recs, fine_recs in (("reference", rrec, fine_r), ("candidate", crec, fine_c)):
        origin = _nan_origin(spec, pair, side, fine_recs) if fine_recs else None
        nan_origin[side] = origin or _nan_origin(spec, pair, side, coarse_recs)
    timing["locate"] = time.perf_counter() - t0

    result = ParityResult(pair=pair, alignment=alignment, stats=stats, first_divergence=first,
                          first_flagged=first_flagged, divergence_metric=metric,
                          output_metric=output_metric, nan_origin=nan_origin, tolerance=tol,
                          reference_records=rrec, candidate_records=crec, timing=timing,
                          output_allowed=output_allowed, output_noise=output_noise)
    ctx.state["parity"] = result
    return result


def _nan_origin(spec, pair: LoadedPair, side: str, records: list[Record]) -> Record | None:
    """The first module (completion order: innermost first) whose output holds NaN/Inf.
    When its input already held NaN/Inf (made by the parent's own code between its
    children), the parent is the origin; that is checked by one re-run of this side."""
    import torch

    first = next((r for r in records if r.out is not None and r.out.nonfinite), None)
    if first is None:
        return None
    model = getattr(pair, side)
    with capture_full(model, {first.key}) as got:
        _run(spec, side, model, pair.inputs)
    inp = got.get(first.key, (None, None))[0]
    if inp is not None and (inp.is_floating_point() or inp.is_complex()) \
            and not bool(torch.isfinite(inp).all()):
        names = {r.name: r for r in records}
        parent = first.name
        while parent:
            parent = parent.rsplit(".", 1)[0] if "." in parent else ""
            if parent in names:
                return names[parent]
    return first


def display_name(name: str) -> str:
    """A module's qualified name for messages: ``"<root>"`` for the model itself.

    Parameters
    ----------
    name : str
        Qualified module name as ``nn.Module.named_modules`` gives it (``""`` for the root).

    Returns
    -------
    str
    """
    return name or "<root>"


def names_text(records, limit: int = 12) -> str:
    """A one-line list of captured modules, ``"name (Type), ..."``, cut after ``limit``.

    Parameters
    ----------
    records : sequence of capture records
        Each with ``.key`` (qualified module name) and ``.type`` (class name).
    limit : int, default 12
        Modules shown before ``", ... (+N more)"``.

    Returns
    -------
    str
    """
    shown = [f"{display_name(r.key)} ({r.type})" for r in records[:limit]]
    more = len(records) - limit
    return ", ".join(shown) + (f", ... (+{more} more)" if more > 0 else "")


def alignment_table(result: ParityResult) -> list[dict[str, Any]]:
    """Rows for notebooks and the JSON extras, one per aligned pair.

    Parameters
    ----------
    result : ParityResult
        From :func:`get_result`.

    Returns
    -------
    list of dict
        In reference completion order: ``order`` (int), ``reference`` / ``candidate``
        (record keys, ``<root>`` for the root), ``reference_type`` / ``candidate_type``,
        ``source`` (how it was aligned), ``shape`` (reference output shape as text),
        ``rel_err`` (estimated relative output error, ``None`` when not compared) and
        ``status`` (``"match"``, ``"differs"`` or ``"not compared"``).
    """
    by_pair = {id(s.pair): s for s in result.stats}
    rows = []
    for i, p in enumerate(result.alignment.pairs):
        s = by_pair.get(id(p))
        rows.append({
            "order": i, "reference": display_name(p.reference.key), "candidate": display_name(p.candidate.key),
            "reference_type": p.reference.type, "candidate_type": p.candidate.type, "source": p.source,
            "shape": str(p.reference.out.shape if p.reference.out is not None else None),
            "rel_err": None if s is None else s.rel_err,
            "status": "not compared" if s is None else ("differs" if s.flagged else "match"),
        })
    return rows
