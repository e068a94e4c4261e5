"""Normalization diagnosis: name the norm fault behind a divergence.

Codes: ``norm.eps_mismatch``, ``norm.kind_mismatch``, ``norm.weight_offset``,
``norm.no_fp32_upcast``, ``norm.placement``, ``norm.missing_qk_norm``,
``norm.unexplained``; ``norm.ok``; ``norm.skipped``.

How it decides (:mod:`porting_kit.probes.norms` does the measuring)
----------------------------------------------------------------
1. Both models' norm calls are recorded in one forward (the parity pass's when the
   run includes parity, :mod:`porting_kit.probes.prefill`; else a forward of each here). Norm modules are
   paired by width and call order (hidden-size norms with hidden-size norms,
   head-size q/k norms with q/k norms).
2. *Structure.* The reference calls head-size norms inside its blocks and
   the candidate none: ``norm.missing_qk_norm``. The reference's blocks feed
   their first norm the block input (pre-norm) and the candidate's feed it
   ``x + sublayer(x)`` (or the reverse): ``norm.placement``.
   Functional norms (``F.rms_norm`` / ``F.layer_norm`` / ``F.group_norm``) are traced in
   the same forward with the eps they ran with
   (:func:`porting_kit.probes.norms.capture_functional_norms`): an eps hard-coded in a
   call that differs from the reference's (its functional call of that kind and width,
   else its norm module's ``eps``) is ``norm.eps_mismatch`` with both values.
3. *Function.* *Screen:* both modules of a pair run on the same probe rows, natively and in
   bfloat16 (:func:`porting_kit.probes.norms.norm_agreements`); a pair whose outputs agree
   within :data:`SCREEN_TOL` computes the same function and is not fingerprinted.
   Each other paired module is fingerprinted on synthetic rows (kind,
   effective weight, eps, bfloat16 error) and the fingerprints are compared
   in this order: kind (``norm.kind_mismatch``: RMS vs Layer); effective
   weight equal to ``1 + w_ref`` (or ``w_ref - 1``): ``norm.weight_offset``;
   fitted eps (``norm.eps_mismatch``, both values); bfloat16 error several
   times the reference's (``norm.no_fp32_upcast``; invisible in float32).
   Modules whose outputs on the probe rows differ while no hypothesis fits
   (or whose function is neither an RMS nor a Layer norm): ``norm.unexplained``
   with the numbers.

One finding per code (the first pair where it shows, and how many pairs
share it). The rope / parity findings locate *where* outputs diverge; this
family says *why* for norms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from porting_kit.context import CheckContext
from porting_kit.report.findings import Finding, Where, ok, skip
from porting_kit.locate import NormSite, find_norms
from porting_kit.probes.norms import (
    FunctionalNormCall,
    NormCall,
    capture_functional_norms,
    capture_norm_calls,
    fingerprint,
    norm_agreements,
    same_function_key,
    same_state,
    states_equal,
)
from porting_kit.load import run_side
from porting_kit.probes.prefill import get_facts

P = "norm"
_MISSING = object()  # "not fingerprinted yet" (None means "could not be fingerprinted")

#: A row-common bfloat16 error this many times the reference module's means no fp32 upcast
#: (measured on the embedded example: 0.0004 with the upcast, 0.002 without).
UPCAST_RATIO = 2.5
#: Fitted eps values further apart than this factor are a mismatch.
EPS_FACTOR = 1.05
#: The cheap screen before fingerprinting, by dtype: ``(element, row_common)`` bounds on
#: :class:`~porting_kit.probes.norms.NormAgreement`. Far below what the fingerprint names:
#: an eps off by EPS_FACTOR moves the alternating row at ``s^2 = eps`` by about 1.2 % (row
#: common), no fp32 upcast moves every row by about 1e-3 in bfloat16 (row common), a weight
#: offset or another kind moves elements by O(1); the element bounds are a few units in the
#: last place (bfloat16 rounds at 0.4 %).
SCREEN_TOL = {"float32": (1e-4, 1e-5), "float64": (1e-4, 1e-5), "float16": (4e-3, 3e-4),
              "bfloat16": (2e-2, 3e-4)}

_HINTS = {
    "norm.eps_mismatch": ("Take eps from the reference config (rms_norm_eps / layer_norm_eps / "
                          "norm_eps) and pass it to every norm of the port."),
    "norm.kind_mismatch": ("Use the reference's norm kind: RMSNorm does not subtract the mean "
                           "(x / sqrt(mean(x^2) + eps)); LayerNorm does."),
    "norm.weight_offset": ("The weight is applied as (1 + w) on one side and w on the other "
                           "(Gemma-style offset): apply it as the reference does, or shift the "
                           "weight by 1 in the conversion."),
    "norm.no_fp32_upcast": ("Compute the variance in float32 (x.float().pow(2).mean(...)), "
                            "normalise, then cast back to the activation dtype."),
    "norm.placement": ("Apply the norms where the reference does: pre-norm is "
                       "h = x + attn(norm1(x)); y = h + mlp(norm2(h))."),
    "norm.missing_qk_norm": ("The reference normalises q and k per head (q_norm / k_norm) before "
                             "RoPE; add them to the port's attention and load their weights."),
    "norm.unexplained": ("The norm modules compute different functions that no known fault "
                         "explains; compare their code (numbers in evidence)."),
}


@dataclass
class _Pair:
    ref: NormSite
    cand: NormSite


def _fail(code: str, message: str, evidence: dict, where: Where) -> Finding:
    return Finding(P, code, "fail", message, evidence, where, _HINTS[code])


def _g(x: float) -> float:
    """3 significant digits (eps values: 1e-05, 1e-06)."""
    return float(f"{x:.3g}") if math.isfinite(x) else x


def run(ctx: CheckContext) -> list[Finding]:
    """The norm family: see the module docstring.

    Parameters
    ----------
    ctx : CheckContext
        Needs the parity trio; the norm calls come from the parity pass's forward
        (:func:`porting_kit.probes.prefill.get_facts`) or, without it, from one more
        forward of each side. Writes ``ctx.extras["norm_pairs"]``.

    Returns
    -------
    list of Finding
        One per ``norm.*`` code found (``fail``; evidence gains ``first_divergence`` when
        parity located one), else one ``norm.ok``; one ``norm.skipped`` when there is no
        parity trio, no norm module, or no reference norm ran.

    Raises
    ------
    InputError
        The pair cannot be loaded or a forward raises.
    """
    if not ctx.spec.has_parity:
        return [skip(P, "the spec has no reference()/candidate()/inputs(): nothing to probe")]
    from porting_kit.load import load_pair

    pair = load_pair(ctx)
    facts = get_facts(ctx, "norm")
    if facts is not None:  # recorded by the parity pass's forward (probes/prefill.py)
        ref_sites, cand_sites = facts[0].norm_sites, facts[1].norm_sites
    else:
        ref_sites, cand_sites = find_norms(pair.reference), find_norms(pair.candidate)
    if not ref_sites and not cand_sites:
        return [skip(P, "no RMSNorm/LayerNorm module found on either side")]
    if facts is not None:
        rcalls, rfun = facts[0].norm_calls, facts[0].functional_norms
        ccalls, cfun = facts[1].norm_calls, facts[1].functional_norms
    else:  # the parity pass recorded nothing: this family's own forwards
        rcalls, rfun, ccalls, cfun = _capture(ctx, pair, ref_sites, cand_sites)
    ref_used = _used(ref_sites, rcalls)
    cand_used = _used(cand_sites, ccalls)
    if not ref_used:
        return [skip(P, "no norm module of the reference ran during its forward")]

    findings: list[Finding] = []
    findings += _structure(ref_used, cand_used, rcalls, ccalls)
    pairs = _pair(ref_used, cand_used)
    findings += _functions(pairs)
    if not any(f.code == "norm.eps_mismatch" for f in findings):
        findings += functional_eps_findings(rfun, cfun, ref_used)
    ctx.extras["norm_pairs"] = [(p.ref.name, p.cand.name) for p in pairs]
    fd = ctx.first_divergence
    for f in findings:
        if fd:
            f.evidence["first_divergence"] = f"{fd.get('reference_module')} ~ {fd.get('candidate_module')}"
    if findings:
        return findings
    what = (f"{len(pairs)} norm module pairs compute the same function (kind, weight, eps, bfloat16 "
            "error)") if pairs else "No norm module of the candidate pairs with the reference's"
    if cfun:
        what += f"; the candidate's {len(cfun)} functional norm call(s) use the reference's eps"
    return [ok(P, what + ".", {"pairs": len(pairs), "functional_calls": len(cfun or [])})]


def _capture(ctx: CheckContext, pair, ref_sites, cand_sites):
    """One forward per side with the norm calls and functional norm calls recorded;
    ``(ref_calls, ref_functional, cand_calls, cand_functional)``."""
    with capture_norm_calls(pair.reference, ref_sites) as rcalls, \
            capture_functional_norms(pair.reference) as rfun:
        run_side(ctx.spec, "reference", pair.reference, pair.inputs)
    with capture_norm_calls(pair.candidate, cand_sites) as ccalls, \
            capture_functional_norms(pair.candidate) as cfun:
        run_side(ctx.spec, "candidate", pair.candidate, pair.inputs)
    return rcalls, rfun, ccalls, cfun


def _reference_eps(fn: str, width: int, rfun: list[FunctionalNormCall],
                   ref_used: list[NormSite]) -> tuple[float | None, str]:
    """The reference's eps for a norm of this kind and width, and where it was read."""
    for c in rfun:
        if c.function == fn and c.width == width and c.eps is not None:
            return c.eps, f"reference F.{fn} call in {c.module}"
    for s in ref_used:
        if s.dim == width and s.eps is not None:
            return float(s.eps), f"reference {s.name} ({s.type}.eps)"
    return None, ""


def functional_eps_findings(rfun: list[FunctionalNormCall], cfun: list[FunctionalNormCall],
                            ref_used: list[NormSite]) -> list[Finding]:
    """``norm.eps_mismatch`` for an eps the candidate passes to a functional norm call.

    Parameters
    ----------
    rfun, cfun : list of FunctionalNormCall
        The functional norm calls of one forward of each side
        (:func:`porting_kit.probes.norms.capture_functional_norms`).
    ref_used : list of NormSite
        The reference's norm modules that ran (their ``eps`` attribute is the fallback
        reference value where the reference calls no functional norm of that width).

    Returns
    -------
    list of Finding
        At most one: the first candidate call whose explicit eps differs from the
        reference's by more than :data:`EPS_FACTOR`, with both values and how many calls
        share it. A call with the default eps, or with no reference value to compare,
        is not judged.
    """
    bad = []
    for c in cfun:
        if not c.explicit_eps or c.eps is None:
            continue
        ref_eps, source = _reference_eps(c.function, c.width, rfun, ref_used)
        if ref_eps is None or ref_eps <= 0 or c.eps <= 0:
            continue
        if max(c.eps / ref_eps, ref_eps / c.eps) > EPS_FACTOR:
            bad.append((c, ref_eps, source))
    if not bad:
        return []
    c, ref_eps, source = bad[0]
    return [_fail("norm.eps_mismatch",
                  f"The candidate calls F.{c.function} in {c.module} with eps={_g(c.eps)} hard-coded; "
                  f"the reference uses eps={_g(ref_eps)} ({len(bad)} such call"
                  f"{'s' if len(bad) > 1 else ''}, width {c.width}).",
                  {"reference_eps": ref_eps, "candidate_eps": c.eps, "function": c.function,
                   "candidate_module": c.module, "width": c.width, "calls": len(bad),
                   "reference_source": source, "read_from": "functional call (traced)"},
                  Where(None, c.module))]


def _used(sites: list[NormSite], calls: list[NormCall]) -> list[NormSite]:
    """Sites in first-call order (only those that ran)."""
    by = {s.name: s for s in sites}
    seen: list[NormSite] = []
    names: set[str] = set()
    for c in calls:
        if c.name not in names:
            names.add(c.name)
            seen.append(by[c.name])
    return seen


def _hidden_dim(calls: list[NormCall]) -> int | None:
    dims = [c.dim for c in calls if c.fed_block_input is not None]
    return dims[0] if dims else None


def _structure(ref_used, cand_used, rcalls, ccalls) -> list[Finding]:
    out: list[Finding] = []
    hr, hc = _hidden_dim(rcalls), _hidden_dim(ccalls)
    # q/k norms: norms narrower than the block width, called inside blocks
    r_in, c_in = _in_blocks(rcalls), _in_blocks(ccalls)
    rq = [s for s in ref_used if hr and s.dim < hr and s.name in r_in]
    cq = [s for s in cand_used if hc and s.dim < hc and s.name in c_in]
    if rq and not cq:
        out.append(_fail("norm.missing_qk_norm",
                         f"The reference normalises q/k per head ({len(rq)} norms of width {rq[0].dim}, "
                         f"e.g. {rq[0].name}); the candidate calls none.",
                         {"reference_qk_norms": len(rq), "candidate_qk_norms": 0,
                          "head_dim": rq[0].dim, "reference_example": rq[0].name},
                         Where(rq[0].name, None)))
    rp = [c for c in rcalls if c.fed_block_input is not None]
    cp = [c for c in ccalls if c.fed_block_input is not None]
    if rp and cp:
        rpre, cpre = rp[0].fed_block_input, cp[0].fed_block_input
        if rpre != cpre:
            out.append(_fail("norm.placement",
                             f"The reference is {_placement_name(rpre)} (block {rp[0].block}: first norm "
                             f"{'is fed the block input' if rpre else 'sees x + sublayer(x)'}), the "
                             f"candidate {_placement_name(cpre)} (block {cp[0].block}).",
                             {"reference_placement": "pre" if rpre else "post",
                              "candidate_placement": "pre" if cpre else "post",
                              "reference_first_norm": rp[0].name, "candidate_first_norm": cp[0].name,
                              "blocks_reference": sum(1 for c in rp if c.fed_block_input == rpre),
                              "blocks_candidate": sum(1 for c in cp if c.fed_block_input == cpre)},
                             Where(rp[0].block, cp[0].block)))
    return out


def _placement_name(pre: bool) -> str:
    """``pre-norm`` / ``post-norm``."""
    return "pre-norm" if pre else "post-norm"


def _in_blocks(calls: list[NormCall]) -> set[str]:
    """The norms called inside a block at least once."""
    return {c.name for c in calls if c.block is not None}


def _pair(ref_used: list[NormSite], cand_used: list[NormSite]) -> list[_Pair]:
    """Pair by width, then by first-call order within each width."""
    pairs = []
    for dim in dict.fromkeys(s.dim for s in ref_used):
        r = [s for s in ref_used if s.dim == dim]
        c = [s for s in cand_used if s.dim == dim]
        pairs += [_Pair(a, b) for a, b in zip(r, c)]
    return pairs


_Diagnosis = tuple[str, dict[str, Any], str]  # (code, evidence, message)


def _functions(pairs: list[_Pair]) -> list[Finding]:
    """Fingerprint both norms of every pair and name what each pair's function differs in;
    one finding per code (the first pair as the example, the count in the evidence). A module
    of the same class, plain attributes and parameter values as one already fingerprinted
    computes the same function: its fingerprint is reused (:func:`same_state`)."""
    hits: dict[str, list[tuple[_Pair, dict[str, Any], str]]] = {}
    cache: dict[int, Any] = {}
    twins: dict[tuple, list[tuple[Any, Any]]] = {}

    def fp(site: NormSite):
        if id(site.module) not in cache:
            key = same_function_key(site.module, site.dim)
            known = twins.get(key, []) if key is not None else []
            hit = next((f for m, f in known if same_state(m, site.module)), _MISSING)
            if hit is _MISSING:
                try:
                    hit = fingerprint(site.module, site.dim)
                except Exception:  # noqa: BLE001 - a module that cannot run on (rows, dim) alone
                    hit = None
                if key is not None:
                    twins.setdefault(key, []).append((site.module, hit))
            cache[id(site.module)] = hit
        return cache[id(site.module)]

    for p, same in zip(pairs, _screen(pairs)):
        if same:
            continue  # same outputs on the probe rows, natively and in bfloat16: same function
        fr, fc = fp(p.ref), fp(p.cand)
        if fr is None or fc is None:
            continue
        found = _diagnose_pair(p, fr, fc)
        if found is not None:
            code, ev, msg = found
            hits.setdefault(code, []).append((p, ev, msg))
    out = []
    for code, items in hits.items():
        p, ev, msg = items[0]
        ev = {**ev, "pairs_affected": len(items), "pairs_compared": len(pairs)}
        more = f" ({len(items)} of {len(pairs)} norm pairs)" if len(items) > 1 else ""
        out.append(_fail(code, msg.rstrip(".") + more + ".", ev, Where(p.ref.name, p.cand.name)))
    return out


def _screen(pairs: list[_Pair]) -> list[bool]:
    """The cheap screen for every pair: True where the pair computes the same function.

    A pair whose two modules share class, width, plain attributes and parameter layout
    (:func:`same_function_key`, each side) with an earlier pair, and whose two modules hold
    equal parameters (:func:`states_equal`), as that earlier pair's did, is the earlier
    pair's function with the same weights on both sides: it takes that pair's screen. Only
    the first pair of each such group, and every pair outside one, runs on the probe rows
    (:func:`norm_agreements`; a 28-layer model has 3 groups instead of 113 pairs)."""
    keys = [(same_function_key(p.ref.module, p.ref.dim), same_function_key(p.cand.module, p.cand.dim))
            for p in pairs]
    equal = states_equal([(p.ref.module, p.cand.module) for p in pairs])
    first: dict[tuple, int] = {}
    run: list[int] = []
    for i, key in enumerate(keys):
        if None in key or not equal[i]:
            run.append(i)
        elif key not in first:
            first[key] = i
            run.append(i)
    screens = norm_agreements([(pairs[i].ref.module, pairs[i].cand.module, pairs[i].ref.dim) for i in run])
    agree = {i: _agree(sc) for i, sc in zip(run, screens)}
    return [agree[i] if i in agree else agree[first[key]] for i, key in enumerate(keys)]


def _agree(screen) -> bool:
    """Whether the cheap screen (:func:`~porting_kit.probes.norms.norm_agreements`) shows
    the pair computing the same function: both figures within :data:`SCREEN_TOL` natively
    and in bfloat16. No screen (a module that could not run): False (fingerprint it)."""
    if screen is None:
        return False
    el, row = SCREEN_TOL.get(screen.dtype, SCREEN_TOL["float32"])
    el16, row16 = SCREEN_TOL["bfloat16"]
    # NaN compares False: not agreeing
    return bool(screen.element <= el and screen.row_common <= row
                and screen.element_bf16 <= el16 and screen.row_common_bf16 <= row16)


def _diagnose_pair(p: _Pair, fr, fc) -> _Diagnosis | None:
    """The hypotheses in order: kind, weight (offset), eps, fp32 upcast; else unexplained
    when the outputs still differ; ``None`` when the two norms compute the same function."""
    if fr.kind != fc.kind:
        return _kind_mismatch(p, fr, fc)
    found = _weight_mismatch(p, fr, fc)
    if found is None and _eps_differ(fr.eps, fc.eps):
        found = _eps_mismatch(p, fr, fc)
    if found is None:
        found = _no_fp32_upcast(p, fr, fc)
    if found is None:
        diff = _rel(fc.outputs, fr.outputs)
        if diff > 1e-4:
            found = ("norm.unexplained",
                     {"output_rel_diff": diff, "reference_kind": fr.kind, "candidate_kind": fc.kind,
                      "reference_eps": _g(fr.eps), "candidate_eps": _g(fc.eps)},
                     f"{p.ref.name} and {p.cand.name} give outputs {diff:.3g} apart (relative) on the "
                     "probe rows with the same kind, weight and eps: no known norm fault explains it.")
    return found


def _kind_mismatch(p: _Pair, fr, fc) -> _Diagnosis:
    """``norm.kind_mismatch`` (RMSNorm vs LayerNorm), or unexplained when a side fits neither."""
    code = "norm.kind_mismatch" if "unknown" not in (fr.kind, fc.kind) else "norm.unexplained"
    ev = {"reference_kind": fr.kind, "candidate_kind": fc.kind,
          "candidate_rms_fit_residual": fc.rel_diff_kinds["rms"],
          "candidate_layer_fit_residual": fc.rel_diff_kinds["layer"]}
    msg = (f"{p.ref.name} is {_kname(fr.kind)}, {p.cand.name} is {_kname(fc.kind)} "
           f"(fit residuals: rms {fc.rel_diff_kinds['rms']:.2g}, layer "
           f"{fc.rel_diff_kinds['layer']:.2g}).")
    return code, ev, msg


def _weight_mismatch(p: _Pair, fr, fc) -> _Diagnosis | None:
    """``norm.weight_offset`` ((1 + w) vs w), unexplained for other weight differences,
    ``None`` when the effective weights agree."""
    wdiff = _rel(fc.weight, fr.weight)
    if wdiff <= 1e-4:
        return None
    plus = _rel(fc.weight, fr.weight + 1)
    minus = _rel(fc.weight, fr.weight - 1)
    if min(plus, minus) <= 1e-4:
        form = "(1 + w)" if plus <= minus else "(w - 1)"
        return ("norm.weight_offset",
                {"reference_weight_form": "w", "candidate_weight_form": form,
                 "weight_rel_diff": wdiff, "offset_fit_rel_diff": min(plus, minus)},
                f"{p.cand.name} scales by {form} where {p.ref.name} scales by w "
                f"(weights differ by {wdiff:.2g} relative; by {min(plus, minus):.1g} after "
                "the offset).")
    return ("norm.unexplained",
            {"weight_rel_diff": wdiff, "offset_fit_rel_diff": min(plus, minus),
             "reference_eps": _g(fr.eps), "candidate_eps": _g(fc.eps)},
            f"{p.ref.name} and {p.cand.name} apply different weights "
            f"(relative difference {wdiff:.3g}), not explained by a (1 + w) offset.")


def _eps_mismatch(p: _Pair, fr, fc) -> _Diagnosis:
    """``norm.eps_mismatch``: both fitted eps values and the modules' own attributes."""
    return ("norm.eps_mismatch",
            {"reference_eps": _g(fr.eps), "candidate_eps": _g(fc.eps),
             "reference_eps_attr": p.ref.eps if p.ref.eps is not None else "",
             "candidate_eps_attr": p.cand.eps if p.cand.eps is not None else ""},
            f"The candidate's {p.cand.name} uses eps={_g(fc.eps):g}; the reference's "
            f"{p.ref.name} uses eps={_g(fr.eps):g} (fitted on rows whose mean square is of "
            "the order of eps).")


def _no_fp32_upcast(p: _Pair, fr, fc) -> _Diagnosis | None:
    """``norm.no_fp32_upcast``: the candidate's bf16 error is UPCAST_RATIO x the reference's."""
    if fr.bf16_error is None or fc.bf16_error is None or fc.bf16_error <= UPCAST_RATIO * fr.bf16_error:
        return None
    ratio = fc.bf16_error / max(fr.bf16_error, 1e-30)
    return ("norm.no_fp32_upcast",
            {"reference_bf16_rel_error": fr.bf16_error, "candidate_bf16_rel_error": fc.bf16_error,
             "ratio": ratio},
            f"In bfloat16, {p.cand.name} is {ratio:.2f}x further from its float64 result per row "
            f"than {p.ref.name} ({fc.bf16_error:.3g} vs {fr.bf16_error:.3g}): the variance is not "
            "computed in float32.")


def _kname(kind: str) -> str:
    return {"rms": "an RMSNorm", "layer": "a LayerNorm"}.get(kind, "no known norm")


def _rel(a, b) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def _eps_differ(a: float, b: float) -> bool:
    if a <= 1e-13 and b <= 1e-13:
        return False
    if a <= 1e-13 or b <= 1e-13:
        return True
    return abs(math.log(a / b)) > math.log(EPS_FACTOR)
