"""Decode parity (family ``decode``): teacher-forced single-token steps with each side's KV cache.

The facts come from :mod:`porting_kit.probes.decode` (how the sides are stepped,
localised and which hypotheses are tried); this module judges them.

=========================  ==================================================================
code                       meaning
=========================  ==================================================================
``decode.first_divergence``  the first step whose logits differ, and the module where they
                           first differ at that step (``where``: both modules; evidence:
                           ``step``, ``start_pos``). Step 0 is the prefill (then parity and
                           the rope / norm diagnoses explain it; an offset already wrong in
                           prefill stays ``rope.position_offset``).
``decode.position_offset``   a decode step matches the reference run at another RoPE position
                           while the prefill matched (evidence: ``position``, ``start_pos``,
                           ``offset``).
``decode.kv_cache``          a decode step matches the reference run with its KV cache one token
                           short (the previous token's K/V missing or overwritten), or with
                           the cache a static cache's wrong write slot leaves (a slot that
                           never advances or lags the position, unwritten slots read as
                           zeros or skipped: ``write_scheme``, ``zero_slots_read``,
                           ``positions_missing`` in the evidence).
``decode.ok``                prefill and every step within tolerance.
``decode.skipped``           no parity trio, no ``input_ids`` prompt, or a side that cannot be
                           stepped (no ``<side>_step`` and no ``past_key_values``).
=========================  ==================================================================

A hypothesis explains a step when the candidate's logits are within tolerance of
the reference rerun under it, or its relative error is under 5 % of the step's
unexplained error (the best one wins).
"""

from __future__ import annotations

from porting_kit.context import CheckContext
from porting_kit.errors import InputError
from porting_kit.report.findings import Finding, Where, ok, skip

PREFIX = "decode"
_EXPLAINS = 0.05


def get_trace(ctx: CheckContext):
    """Run (once, cached in ``ctx.state["decode"]``) the teacher-forced decode of this spec.

    Parameters
    ----------
    ctx : CheckContext

    Returns
    -------
    porting_kit.probes.decode.DecodeTrace or str
        The trace, or the reason decode parity cannot run (a ``skip``).

    Raises
    ------
    InputError
        A step that raises, a bad ``decode_steps``.
    """
    if "decode" in ctx.state:
        return ctx.state["decode"]
    from porting_kit.load import load_pair
    from porting_kit.probes.decode import DEFAULT_STEPS, prompt_of, run_decode, step_mode
    from porting_kit.probes.tolerance import tolerance_for

    spec = ctx.spec
    if not spec.has_parity:
        return f"{spec.name} defines no reference()/candidate()/inputs(); decode parity skipped"
    steps = spec.get("decode_steps", DEFAULT_STEPS)
    steps = steps() if callable(steps) else steps
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise InputError(f"{spec.name}: decode_steps must be a positive int, got {steps!r}")
    pair = load_pair(ctx)
    for side in ("reference", "candidate"):
        if step_mode(spec, side, getattr(pair, side)) is None:
            return (f"the {side} cannot be stepped: define {side}_step(model, tokens, start_pos) -> logits "
                    "in the spec (its forward takes no past_key_values)")
    if prompt_of(pair) is None:
        return "inputs() has no input_ids of shape (batch, T) to prefill; decode parity skipped"
    ref_param = next(iter(pair.reference.parameters()), None)
    tol = tolerance_for(ref_param.dtype if ref_param is not None else "float32", spec.get("tolerances"))
    ctx.progress("decode: prefill and steps")
    trace = run_decode(spec, pair, steps, tol, progress=ctx.progress)
    ctx.state["decode"] = trace
    return trace


def run(ctx: CheckContext) -> list[Finding]:
    """The decode family: ``decode.ok``, or the first diverging step located and diagnosed.

    Parameters
    ----------
    ctx : CheckContext
        ``ctx.extras["decode"]`` receives the per-step errors (plots, notebooks).

    Returns
    -------
    list of Finding
        One ``decode.ok`` / ``decode.skipped``, or ``decode.first_divergence`` (fail) plus
        ``decode.position_offset`` or ``decode.kv_cache`` (fail) when a hypothesis explains it.

    Raises
    ------
    InputError
        As :func:`get_trace`.
    """
    from porting_kit.probes.decode import locate_step

    trace = get_trace(ctx)
    if isinstance(trace, str):
        return [skip(PREFIX, trace)]
    ctx.extras["decode"] = {"steps": [m.step for m in trace.steps],
                            "rel_err": [m.rel_err for m in trace.steps],
                            "max_abs": [m.max_abs for m in trace.steps],
                            "layers": trace.layers, "layer_rel_err": trace.layer_rel_err}
    bad = trace.first_bad
    worst = max(trace.steps, key=lambda m: m.rel_err)
    if bad is None:
        return [ok(PREFIX, f"Prefill and {len(trace.steps) - 1} teacher-forced decode steps match "
                           f"(worst logits ||a-b||/||b|| {worst.rel_err:.3g} at step {worst.step}).",
                   {"steps": len(trace.steps) - 1, "prompt_len": trace.prompt_len,
                    "worst_step": worst.step, "worst_rel_err": worst.rel_err,
                    "reference_mode": trace.reference_mode, "candidate_mode": trace.candidate_mode,
                    "tolerance": trace.tolerance.describe()})]
    pair = ctx.state["pair"]
    ctx.progress(f"decode: locating step {bad.step}")
    loc = locate_step(ctx.spec, pair, trace, bad.step, module_map=ctx.spec.get("module_map"))
    if loc is not None:
        ctx.extras["decode"]["modules_at_first_divergence"] = loc.per_module
    findings = [_first_divergence(trace, bad, loc)]
    if bad.step >= 1:
        findings += _diagnose(ctx, trace, bad, loc)
    return findings


def _first_divergence(trace, bad, loc) -> Finding:
    """``decode.first_divergence`` at (step, module)."""
    stage = "the prefill" if bad.step == 0 else f"decode step {bad.step} (position {bad.start_pos})"
    ev = {"step": bad.step, "start_pos": bad.start_pos, "token": bad.token, "prompt_len": trace.prompt_len,
          "logits_max_abs": bad.max_abs, "logits_rel_err": bad.rel_err,
          "steps_before_ok": bad.step, "tolerance": trace.tolerance.describe(),
          "reference_mode": trace.reference_mode, "candidate_mode": trace.candidate_mode}
    if loc is None:
        msg = (f"The logits first differ at {stage} (||a-b||/||b|| = {bad.rel_err:.3g}) but no aligned "
               "module does: the fault is in unaligned code.")
        where = Where(reference="<output>", candidate="<output>")
    else:
        ev.update({"reference_module": loc.reference_module, "candidate_module": loc.candidate_module,
                   "reference_type": loc.reference_type, "candidate_type": loc.candidate_type,
                   "module_rel_err": loc.rel_err, "module_max_abs": loc.max_abs,
                   "input_already_differs": loc.input_already_differs,
                   "first_differing_output_reference": loc.first_output_reference,
                   "first_differing_output_candidate": loc.first_output_candidate})
        msg = (f"The logits first differ at {stage} (||a-b||/||b|| = {bad.rel_err:.3g}); at that step the "
               f"first module to differ is reference {loc.reference_module} ~ candidate {loc.candidate_module} "
               f"(||a-b||/||b|| = {loc.rel_err:.3g}).")
        where = Where(reference=loc.reference_module, candidate=loc.candidate_module)
    if bad.step == 0:
        msg += " The prefill already differs: the parity, rope and norm findings locate and name it."
    hint = ("Compare this module's decode path (one token, cache read/write, position) with the "
            "reference's; the prefill path passed." if bad.step >= 1 else
            "Fix the prefill first (parity.first_divergence); decode parity needs a matching prefill.")
    return Finding(PREFIX, "decode.first_divergence", "fail", msg, evidence=ev, where=where, hint=hint)


def _diagnose(ctx: CheckContext, trace, bad, loc) -> list[Finding]:
    """Try the position and cache hypotheses at the first diverging step; the best one that explains it."""
    from porting_kit.probes.decode import cache_hypotheses, position_hypotheses

    spec, pair = ctx.spec, ctx.state["pair"]
    within = trace.tolerance
    pos = position_hypotheses(spec, pair, trace, bad.step)
    kv = cache_hypotheses(spec, pair, trace, bad.step)
    bound = _EXPLAINS * bad.rel_err
    tried = [("position", q, e) for q, e in pos] + [("cache", name, e) for name, e in kv]
    if not tried:
        return []
    kind, what, err = min(tried, key=lambda t: t[2])
    if err > bound and not _within(err, within):
        return []
    short = next((t for t in tried if t[1] == "one_short"), None)
    if kind == "cache" and short is not None and (short[2] <= bound or _within(short[2], within)):
        kind, what, err = short  # the same cache as a scheme's at this step: the plainer name
    where = (Where(reference=loc.reference_module, candidate=loc.candidate_module) if loc is not None
             else Where(reference="<output>", candidate="<output>"))
    ev = {"step": bad.step, "start_pos": bad.start_pos, "logits_rel_err": bad.rel_err,
          "hypothesis_rel_err": err, "prompt_len": trace.prompt_len,
          "hypotheses_tried": ", ".join(f"position {q}: {e:.3g}" for q, e in pos) +
                              "".join(f", cache {n}: {e:.3g}" for n, e in kv)}
    if kind == "position":
        ev.update({"position": what, "offset": what - bad.start_pos})
        return [Finding(
            PREFIX, "decode.position_offset", "fail",
            f"Decode step {bad.step} matches the reference run with RoPE position {what} instead of "
            f"{bad.start_pos} (||a-b||/||b|| {err:.3g} vs {bad.rel_err:.3g} at the right position); the "
            "prefill matched.", evidence=ev, where=where,
            hint="Pass the request's running position (start_pos / positions tensor) to the rotary "
                 "embedding in the decode path, not 0 or the chunk-local index.")]
    if what != "one_short":
        return [_write_scheme_finding(trace, bad, what, err, ev, where)]
    ev.update({"cache_tokens_seen": bad.start_pos - 1, "cache_tokens_expected": bad.start_pos})
    return [Finding(
        PREFIX, "decode.kv_cache", "fail",
        f"Decode step {bad.step} matches the reference run with its KV cache one token short "
        f"({bad.start_pos - 1} cached tokens instead of {bad.start_pos}; ||a-b||/||b|| {err:.3g} vs "
        f"{bad.rel_err:.3g}): the previous token's K/V is missing or overwritten.", evidence=ev, where=where,
        hint="Write the new token's K/V at slot start_pos (slot_mapping) and read the cache up to "
             "start_pos + 1; check the cache update is not skipped in the one-token path.")]


_SCHEME_TEXT = {
    "slot_fixed_first_decode": "the KV write slot never advances (every step writes slot {T}, "
                               "the first decode slot)",
    "slot_fixed_last_prompt": "the KV write slot never advances (every step writes slot {T1}, the "
                              "last prompt token's)",
    "slot_lags_one": "each step writes its K/V one slot behind its position (start_pos - 1), "
                     "overwriting the previous token",
    "slot_lags_two": "each step writes its K/V two slots behind its position (start_pos - 2)",
}


def _write_scheme_finding(trace, bad, what: str, err: float, ev: dict, where: Where) -> Finding:
    """``decode.kv_cache`` for a static cache's wrong write slot (:data:`WRITE_SCHEMES`)."""
    from porting_kit.probes.decode import cache_slots

    scheme, _, zeros = what.partition(":")
    T = trace.prompt_len
    slots = cache_slots(scheme, bad.step, T, bool(zeros))
    n_zero = sum(p is None for p in slots)
    seen = len(slots) - n_zero + 1
    text = _SCHEME_TEXT[scheme].format(T=T, T1=T - 1)
    read = (f"and reads {n_zero} zero-filled slot{'s' if n_zero != 1 else ''} never written"
            if zeros else "and reads only the slots it wrote")
    ev.update({"write_scheme": scheme, "zero_slots_read": n_zero, "cache_tokens_seen": seen,
               "cache_tokens_expected": bad.start_pos + 1,
               "positions_missing": ", ".join(str(p) for p in sorted(set(range(bad.start_pos)) -
                                                                    {p for p in slots if p is not None}))})
    return Finding(
        PREFIX, "decode.kv_cache", "fail",
        f"Decode step {bad.step} (position {bad.start_pos}) matches the reference run with the cache a "
        f"wrong KV write leaves: {text}, {read} ({seen} real tokens attended instead of "
        f"{bad.start_pos + 1}; ||a-b||/||b|| {err:.3g} vs {bad.rel_err:.3g}).", evidence=ev, where=where,
        hint="Write each new token's K/V at slot start_pos (slot_mapping / cache_position from the "
             "request's running position, advanced every step) and read exactly start_pos + 1 "
             "slots; never attend to unwritten (zero) slots.")


def _within(rel_err: float, tol) -> bool:
    """A relative error below what the tolerance allows on logits (bf16/fp16's tensor-level bound)."""
    rel = getattr(tol, "rel", None)
    return rel is not None and rel_err <= rel
