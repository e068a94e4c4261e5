"""Layer parity (family ``parity``): the findings built from :mod:`porting_kit.probes.layers`.

Codes: ``parity.first_divergence`` (the first aligned module pair beyond
tolerance, both module names), ``parity.nan_origin`` (the first module whose
output has NaN/Inf while its input had none), ``parity.unmapped_weights``
(reference tensors not loaded / candidate parameters never set),
``parity.weight_map_inconsistent`` (a repeated block whose parameters hold other
reference tensors than the same parameters of its sibling blocks of the same class,
e.g. layer 1's ``wk`` holding ``v_proj``: both tensors named;
:func:`porting_kit.probes.align.weight_map_outliers`), ``parity.fused_shard_order``
(inside the first divergence, a fused candidate weight — qkv, gate_up — holds the
reference's shards whole but stacked in another order than the reference's: a
weight-conversion fault; evidence: the shards in the candidate's order, the reference's
order and the permutation; :func:`porting_kit.probes.fused.fused_shard_orders`), ``parity.ok``.
How the first divergence is located: :mod:`porting_kit.probes.layers`.
"""

from __future__ import annotations

from porting_kit.context import CheckContext
from porting_kit.probes.compare import describe_mismatch
from porting_kit.probes.layers import ParityResult, alignment_table, display_name, get_result, names_text
from porting_kit.probes.tolerance import dtype_name
from porting_kit.report.findings import Finding, Where, ok, skip


def run(ctx: CheckContext) -> list[Finding]:
    """The parity family: unmapped weights, NaN origin, first divergence, or ``parity.ok``.

    Parameters
    ----------
    ctx : CheckContext
        Sets ``ctx.first_divergence`` (the report's record), ``ctx.extras["alignment"]``
        / ``ctx.extras["parity"]`` for the notebooks and ``ctx.extras["alignment_report"]``
        (the JSON report's ``"alignment"``: pairs and the unaligned modules of each side).

    Returns
    -------
    list of Finding
        ``parity.unmapped_weights``, ``parity.nan_origin`` (per side) and
        ``parity.first_divergence`` as they apply (all ``fail``), else one ``parity.ok``
        with the output's max |diff| and relative error; one ``parity.skipped`` when the
        spec has no parity trio.

    Raises
    ------
    InputError
        As :func:`get_result`.
    """
    if not ctx.spec.has_parity:
        return [skip("parity", f"{ctx.spec.name} defines no reference()/candidate()/inputs(); "
                               "layer parity skipped")]
    res = get_result(ctx)
    common = _common_evidence(res)
    ctx.extras["alignment"] = alignment_table(res)
    ctx.extras["alignment_report"] = {
        "pairs": ctx.extras["alignment"],
        "unaligned_reference": [display_name(r.key) for r in res.alignment.unaligned_reference],
        "unaligned_candidate": [display_name(c.key) for c in res.alignment.unaligned_candidate]}
    ctx.extras["parity"] = res
    findings = [*_unmapped_weights(res.pair.weights), *_weight_map_inconsistent(res),
                *_nan_origins(res)]
    fused = _fused_shard_order(res)
    diagnoses = [f for f in ("rope", "norm") if f in ctx.families]
    divergence, ctx.first_divergence = _first_divergence(res, common, fused, diagnoses)
    findings += divergence + fused
    if not findings:
        m = res.output_metric
        max_abs = m.max_abs if m is not None else None
        msg = (f"All {len(res.stats)} compared module pairs and the output match "
               f"within tolerance (output max |diff| {max_abs or 0:.3g}).")
        if res.output_within_noise:
            n = res.output_noise
            msg = (f"All {len(res.stats)} compared module pairs match within tolerance; the output "
                   f"(max |diff| {max_abs or 0:.3g}, ||a-b||/||b|| {m.rel_err:.3g}) exceeds the elementwise "
                   f"tolerance only by rounding noise: the reference's own {dtype_name(res.tolerance.dtype)} "
                   f"error against float64 is {n['noise_floor_rel']:.3g} (bound {n['noise_bound_rel']:.3g}).")
        findings.append(ok("parity", msg,
                           {**common, "output_max_abs": max_abs,
                            "output_rel_err": m.rel_err if m is not None else None,
                            **(res.output_noise or {})}))
    return findings


def _common_evidence(res: ParityResult) -> dict:
    """Alignment counts and the tolerance, shared by every parity finding's evidence."""
    al = res.alignment
    return {"aligned_modules": len(al.pairs), "compared_modules": len(res.stats),
            "unaligned_reference": len(al.unaligned_reference),
            "unaligned_candidate": len(al.unaligned_candidate),
            "unaligned_reference_modules": names_text(al.unaligned_reference),
            "unaligned_candidate_modules": names_text(al.unaligned_candidate),
            "tolerance": res.tolerance.describe(), "dtype": dtype_name(res.tolerance.dtype)}


def _unmapped_weights(w) -> list[Finding]:
    """``parity.unmapped_weights``: reference tensors never loaded / candidate parameters never set /
    converted names the candidate has no slot for."""
    unexpected = w.unexpected_keys
    if not (w.unmapped_reference or w.unset_candidate or unexpected):
        return []
    parts = []
    if w.unmapped_reference:
        parts.append(f"{len(w.unmapped_reference)} reference tensor(s) were not found in the "
                     f"candidate ({', '.join(w.unmapped_reference[:6])}): never loaded, or loaded "
                     "with changed values (list those in the spec's transformed_weights)")
    if w.unset_candidate:
        parts.append(f"{len(w.unset_candidate)} candidate parameter(s) were never set "
                     f"({', '.join(w.unset_candidate[:6])})")
    if unexpected:
        parts.append(f"convert_weights returned {len(unexpected)} name(s) the candidate has no "
                     f"parameter or buffer for ({', '.join(unexpected[:6])}): dropped by a non-strict load")
    return [Finding(
        "parity", "parity.unmapped_weights", "fail", "; ".join(parts) + ".",
        evidence={"method": w.method, "unmapped_reference": len(w.unmapped_reference),
                  "unset_candidate": len(w.unset_candidate),
                  "unmapped_reference_names": ", ".join(w.unmapped_reference[:20]),
                  "unset_candidate_names": ", ".join(w.unset_candidate[:20]),
                  "unexpected_keys": len(unexpected), "unexpected_key_names": ", ".join(unexpected[:20])},
        where=Where(reference=w.unmapped_reference[0].rsplit(".", 1)[0] if w.unmapped_reference else None,
                    candidate=w.unset_candidate[0].rsplit(".", 1)[0] if w.unset_candidate else None),
        hint="Map these names in the candidate's load_weights (stacked_params_mapping, renames) "
             "or the spec's convert_weights; a parameter never set keeps its random init.")]


def _weight_map_inconsistent(res: ParityResult) -> list[Finding]:
    """``parity.weight_map_inconsistent``: one finding per block that maps unlike its siblings."""
    from porting_kit.probes.align import weight_map_outliers

    by_block: dict[str, list] = {}
    for o in weight_map_outliers(res.pair.weights.weight_map, res.pair.candidate):
        by_block.setdefault(o.block, []).append(o)
    findings = []
    for block, outs in by_block.items():
        first = outs[0]
        pairs = "; ".join(f"{o.candidate_tensor} holds {o.reference_tensor} (siblings: {o.expected_reference})"
                          for o in outs)
        findings.append(Finding(
            "parity", "parity.weight_map_inconsistent", "fail",
            f"Block {block} ({first.block_type}) is loaded unlike its {first.siblings} sibling block(s): "
            f"{pairs}.",
            evidence={"block": block, "block_type": first.block_type,
                      "candidate_tensor": first.candidate_tensor, "reference_tensor": first.reference_tensor,
                      "expected_reference_tensor": first.expected_reference,
                      "inconsistent_tensors": len(outs), "mappings": pairs,
                      "sibling_blocks": first.siblings, "blocks": first.blocks},
            where=Where(reference=first.reference_tensor.rsplit(".", 1)[0],
                        candidate=first.candidate_tensor.rsplit(".", 1)[0]),
            hint="Fix the conversion's name map for this block (a rename table or an index "
                 "off by one); every block of one class must map its parameters the same way."))
    return findings


def _nan_origins(res: ParityResult) -> list[Finding]:
    """``parity.nan_origin`` per side: the first module whose output has NaN/Inf while its input had none."""
    findings: list[Finding] = []
    for side in ("candidate", "reference"):
        rec = res.nan_origin[side]
        if rec is not None:
            findings.append(Finding(
                "parity", "parity.nan_origin", "fail",
                f"The {side}'s first NaN/Inf appears in the output of {display_name(rec.key)} "
                f"({rec.type}) while its input was finite.",
                evidence={"side": side, "module": display_name(rec.key), "type": rec.type,
                          "numel": rec.out.numel},
                where=Where(**{side: display_name(rec.key)}),
                hint="Look at this module's own code: an uninitialised buffer (e.g. RoPE inv_freq after "
                     "meta-device init), a division by zero, or an overflow in low precision."))
    return findings


def _fused_shard_order(res: ParityResult) -> list[Finding]:
    """``parity.fused_shard_order``: a fused weight inside the first divergence whose shards are stacked
    in another order than the reference's (only there: a port whose forward splits its own order
    matches, and then nothing diverges)."""
    from porting_kit.probes.fused import fused_shard_orders

    fd = res.first_divergence
    if fd is None:
        return []
    prefix = fd.pair.candidate.key
    prefix = f"{prefix}." if prefix else ""
    inside = {c: r for c, r in res.pair.weights.weight_map.items() if len(r) > 1 and c.startswith(prefix)}
    if not inside:
        return []
    cand_sd = res.pair.candidate.state_dict()
    orders = fused_shard_orders(inside, res.pair.reference.state_dict(),
                                {c: cand_sd[c] for c in inside if c in cand_sd})
    findings = []
    for o in orders:
        if o.in_reference_order:
            continue
        module = o.candidate_tensor.rsplit(".", 1)[0]
        short = [s.rsplit(".", 2)[-2] if s.count(".") else s for s in o.shards]
        ref_short = [s.rsplit(".", 2)[-2] if s.count(".") else s for s in o.reference_order]
        findings.append(Finding(
            "parity", "parity.fused_shard_order", "fail",
            f"The fused weight {o.candidate_tensor} holds the reference's {', '.join(ref_short)} whole but "
            f"stacked as {', '.join(short)} (permutation {o.permutation}): the weight conversion writes the "
            "shards in another order than the forward splits them.",
            evidence={"candidate_tensor": o.candidate_tensor, "shards_in_candidate_order": ", ".join(o.shards),
                      "reference_order": ", ".join(o.reference_order),
                      "permutation": " ".join(str(i) for i in o.permutation),
                      "row_offsets": " ".join(str(i) for i in o.offsets)},
            where=Where(reference=o.reference_order[0].rsplit(".", 2)[0], candidate=module),
            hint="Fix the shard ids of the fused load (vLLM's stacked_params_mapping / the weight_loader's "
                 "shard_id, or the torch.cat order in convert_weights) to the order the forward splits: "
                 f"{', '.join(ref_short)}."))
    return findings


def _first_divergence(res: ParityResult, common: dict,
                      fused: list[Finding] = (), diagnoses: list[str] = ()) -> tuple[list[Finding], dict | None]:
    """``parity.first_divergence`` and the report's ``first_divergence`` record (or ``[]``, ``None``)."""
    found: list[Finding] = []
    first = None
    fd = res.first_divergence
    if fd is not None:
        m = res.divergence_metric
        ff = res.first_flagged
        inside = (ff is not None and ff is not fd)
        msg = (f"First divergence: reference {display_name(fd.pair.reference.key)} ~ candidate "
               f"{display_name(fd.pair.candidate.key)}: " + (describe_mismatch(m) if m is not None else
                                                          f"estimated ||a-b||/||b|| = {fd.rel_err:.3g}") + ".")
        if m is not None and m.within_tolerance:
            msg += (" Its output is still within tolerance, but the error its own code adds is the one "
                    "a later module (a norm rescaling it) carries past the tolerance.")
        elif fused:
            msg += (f" The fused weight {fused[0].evidence['candidate_tensor']} inside it holds the reference's "
                    "shards in another order: a weight-conversion fault (parity.fused_shard_order).")
        elif inside:
            msg += (f" Its child {display_name(ff.pair.reference.key)} ~ {display_name(ff.pair.candidate.key)} is "
                    "the first output to differ but its input already differed: the fault is in "
                    f"{display_name(fd.pair.reference.key)}'s own code.")
        ev = {"reference_module": display_name(fd.pair.reference.key), "reference_type": fd.pair.reference.type,
              "candidate_module": display_name(fd.pair.candidate.key), "candidate_type": fd.pair.candidate.type,
              "aligned_by": fd.pair.source, "estimated_rel_err": fd.rel_err,
              "first_differing_output_reference": display_name(ff.pair.reference.key) if ff else None,
              "first_differing_output_candidate": display_name(ff.pair.candidate.key) if ff else None,
              "input_already_differs": bool(ff.input_flagged) if ff else False}
        metric = m.evidence() if m is not None else {"estimated_rel_err": fd.rel_err}
        if m is not None:
            ev.update(metric)
        ev.update(common)
        found.append(Finding(
            "parity", "parity.first_divergence", "fail", msg, evidence=ev,
            where=Where(reference=display_name(fd.pair.reference.key), candidate=display_name(fd.pair.candidate.key)),
            hint="Compare the two modules' code and the weights loaded into them" + (
                f"; the {'/'.join(diagnoses)} diagnoses below name the cause when they recognise it."
                if diagnoses else "; run the rope and norm families too (no --only) to have them "
                "name the cause when they recognise it.")))
        first = {"reference_module": display_name(fd.pair.reference.key),
                 "candidate_module": display_name(fd.pair.candidate.key),
                 "metric": metric,
                 "order": next((i for i, p in enumerate(res.alignment.pairs)
                                if p.reference.key == fd.pair.reference.key), -1)}
    elif res.output_metric is not None and not res.output_metric.within_tolerance and not res.output_allowed \
            and not res.output_within_noise:
        m = res.output_metric
        found.append(Finding(
            "parity", "parity.first_divergence", "fail",
            "The outputs differ but no aligned module does: the fault is in code between the aligned "
            f"modules or in the unaligned ones; {describe_mismatch(m)}.",
            evidence={**m.evidence(), **common},
            where=Where(reference="<output>", candidate="<output>"),
            hint="Add module_map pairs for the unaligned modules listed in the evidence."))
        first = {"reference_module": "<output>", "candidate_module": "<output>",
                 "metric": m.evidence(), "order": len(res.alignment.pairs)}
    elif res.output_metric is None and not res.output_allowed:
        found.append(Finding(
            "parity", "parity.first_divergence", "fail",
            "The reference and candidate outputs have different shapes and no aligned module differs.",
            evidence=common, where=Where(reference="<output>", candidate="<output>"),
            hint="run_reference / run_candidate must return the same quantity (e.g. logits)."))
    return found, first
