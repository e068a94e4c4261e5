"""Sampling parity (family ``sampling``): the candidate's logits -> token code vs transformers' processors.

The facts come from :mod:`porting_kit.probes.sampling`; this module judges them.

============================  ===============================================================
code                          meaning
============================  ===============================================================
``sampling.repetition_penalty``  the candidate's distribution matches the reference with the
                              repetition penalty applied twice, to negative logits by
                              division (wrong sign) or not at all (evidence: ``how``)
``sampling.order``              it matches top-p / min-p applied before temperature (top-k
                              commutes with temperature, so it cannot be told)
``sampling.codebook_routing``   it matches per-codebook parameters given to another codebook
                              (evidence: ``routing`` ``roll+1`` / ``roll-1`` / ``reversed`` /
                              ``permutation [..]`` / ``repeat_interleave`` / ``rows [[..]]``,
                              identified row by row from the data)
``sampling.seed_ignored``       two draws with generators seeded alike differ: the sampler does
                              not draw from the generator it is given
``sampling.unexplained``        the distributions differ (processed logits, or the sampler's
                              draws beyond their bound) and no hypothesis explains it
``sampling.ok``                 every parameter set gives the reference's distribution
``sampling.skipped``            the spec defines neither ``candidate_logits_processor`` nor
                              ``candidate_sampler``, or no ``sampling_params``
============================  ===============================================================

Spec names: ``candidate_logits_processor(logits, input_ids, params) -> logits``,
``candidate_sampler(logits, input_ids, params, generator) -> token ids``,
``sampling_params() -> list[dict]`` (``GenerationConfig`` keys: ``temperature``,
``top_k``, ``top_p``, ``min_p``, ``repetition_penalty``; a list value holds one value
per codebook), optional ``sampling_vocab_size`` (int, default 256) and ``sampling_draws``
(int >= 100, default 3000: draws per (batch, codebook) row). Processed logits match
when the total variation distance of every row is at most :data:`TV_MATCH`; a
hypothesis explains a mismatch when its distance is at most that too.

A ``candidate_sampler`` is compared through its draws when no processor fault is named
already (with ``candidate_sampler`` only, that is the whole comparison): ``sampling_draws``
tokens per row from one call on the test batch repeated (one call per draw, 1000 draws,
when the sampler rejects a repeated batch), generators seeded ``SEED + set index``. A row
fails when its empirical total variation distance from the reference exceeds
``0.5 * sum_i sqrt(p_i (1 - p_i) / n) + sqrt(ln(1 / delta) / (2 n))`` (mean bound plus
McDiarmid), ``delta = 1e-6 / rows``: a sampler drawing exactly the reference distribution
fails with probability below 1e-6. A hypothesis explains the draws when every row is within
the same bound of its distribution (the closest one is named). Findings from the draws
carry ``where.candidate = "candidate_sampler"`` and evidence ``tv``, ``tv_bound``, ``draws``,
``batched``, ``params``, ``hypothesis_excess`` (``tv - bound`` of the named hypothesis).
"""

from __future__ import annotations

from porting_kit.context import CheckContext
from porting_kit.errors import InputError
from porting_kit.report.findings import Finding, Where, ok, skip

PREFIX = "sampling"
#: Total variation distance under which two distributions are the same (float32 softmax noise ~1e-7).
TV_MATCH = 1e-4

_HINTS = {
    "repetition_penalty": ("sampling.repetition_penalty",
                           "Apply the penalty once per seen token: logit / p when positive, logit * p "
                           "when negative (transformers' RepetitionPenaltyLogitsProcessor)."),
    "order": ("sampling.order",
              "Apply temperature before top-p / min-p (GenerationConfig order: repetition penalty, "
              "temperature, top-k, top-p, min-p)."),
    "codebook_routing": ("sampling.codebook_routing",
                         "Index the per-codebook parameter lists with the codebook being sampled; "
                         "expand them over flattened (batch x codebook) rows with "
                         "params.repeat(batch), not repeat_interleave."),
}


def run(ctx: CheckContext) -> list[Finding]:
    """The sampling family.

    Parameters
    ----------
    ctx : CheckContext

    Returns
    -------
    list of Finding
        ``sampling.ok``, ``sampling.skipped``, or the fail findings (one diagnosis per
        mismatching parameter set, at most one per code; ``sampling.seed_ignored``).

    Raises
    ------
    InputError
        ``sampling_params`` not a list of dicts, an unknown key, or a candidate function that
        raises (exit 2).
    """
    import torch

    from porting_kit.probes import sampling as probe

    spec = ctx.spec
    has_proc, has_sampler = spec.has("candidate_logits_processor"), spec.has("candidate_sampler")
    if not (has_proc or has_sampler):
        return [skip(PREFIX, f"{spec.name} defines neither candidate_logits_processor nor "
                             "candidate_sampler; sampling parity skipped")]
    if not spec.has("sampling_params"):
        return [skip(PREFIX, f"{spec.name} defines no sampling_params(); sampling parity skipped")]
    params_list = spec.call("sampling_params")
    if not isinstance(params_list, list) or not params_list or not all(isinstance(p, dict) for p in params_list):
        raise InputError(f"{spec.name}: sampling_params() must return a non-empty list of dicts")
    try:
        n_cb = probe.n_codebooks(params_list)
    except ValueError as exc:
        raise InputError(f"{spec.name}: sampling_params(): {exc}") from exc
    vocab = spec.get("sampling_vocab_size", probe.VOCAB)
    logits, ids = probe.test_inputs(n_cb, int(vocab))
    ctx.progress("sampling: comparing distributions")
    findings: list[Finding] = []
    with torch.no_grad():
        if has_proc:
            proc = _wrapped(spec, "candidate_logits_processor")
            try:
                results = probe.compare_processor(proc, params_list, logits, ids)
            except ValueError as exc:
                raise InputError(f"{spec.name}: sampling_params(): {exc}") from exc
            findings += _diagnose(proc, results, logits, ids)
        if has_sampler:
            sampler = _wrapped(spec, "candidate_sampler")
            processor_faults = len(findings)
            findings += _seed_findings(probe.seed_use(sampler, params_list[0], logits, ids))
            if not processor_faults:  # a processor fault is named already: its draws would repeat it
                ctx.progress("sampling: drawing from candidate_sampler")
                drawn = _compare_draws(spec, sampler, params_list, n_cb, int(vocab))
                findings += drawn[0]
    if not findings:
        checked = ("processed distributions" if has_proc else "") + \
                  (" and the sampler's draws" if has_sampler and has_proc
                   else "the sampler's draws" if has_sampler else "")
        evidence = {"parameter_sets": len(params_list), "codebooks": n_cb, "vocab": int(vocab),
                    "tv_match": TV_MATCH}
        if has_sampler:
            evidence.update(drawn[1])
        return [ok(PREFIX, f"{len(params_list)} sampling parameter set(s): {checked} match transformers' "
                           "logits processors.", evidence)]
    return findings


def _seed_findings(use: dict) -> list[Finding]:
    """``sampling.seed_ignored`` when same-seed draws differ (``use``: :func:`~porting_kit.probes.sampling.seed_use`)."""
    if use["same_seed_equal"]:
        return []
    return [Finding(
        PREFIX, "sampling.seed_ignored", "fail",
        "Two draws with generators seeded alike gave different tokens: the sampler does "
        "not draw from the generator it is given (it uses the global RNG).",
        evidence={"draws": use["draws"], "same_seed_equal": False,
                  "other_seed_differs": use["other_seed_differs"]},
        where=Where(candidate="candidate_sampler"),
        hint="Pass the request's torch.Generator to torch.multinomial / exponential_ "
             "(generator=...); never draw from the global RNG in serving.")]


def _draws_per_row(spec) -> int:
    """The spec's ``sampling_draws`` (default :data:`porting_kit.probes.sampling.DRAWS`).

    Raises
    ------
    InputError
        Not an int of at least 100.
    """
    from porting_kit.probes.sampling import DRAWS

    draws = spec.get("sampling_draws", DRAWS)
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 100:
        raise InputError(f"{spec.name}: sampling_draws must be an int >= 100, got {draws!r}")
    return draws


def _compare_draws(spec, sampler, params_list, n_cb: int, vocab: int) -> tuple[list[Finding], dict]:
    """The sampler's draws against the reference distribution: findings and the ok evidence.

    Raises
    ------
    InputError
        The sampler returns ids outside the vocabulary or not one per (batch, codebook) row.
    """
    from porting_kit.probes import sampling as probe

    logits, ids = probe.sampler_inputs(n_cb, vocab)
    try:
        results = probe.compare_sampler(sampler, params_list, logits, ids, _draws_per_row(spec))
    except ValueError as exc:
        raise InputError(f"{spec.name}: candidate_sampler(): {exc}") from exc
    delta = probe.row_delta(params_list, logits)
    found: dict[str, Finding] = {}
    for res in results:
        if res.excess <= 0:
            continue
        tried = probe.draw_hypotheses(res, logits, ids, delta)
        fam, how, excess = min(tried, key=lambda t: t[2]) if tried else ("", "", 1.0)
        ev = {"parameter_set": res.index, "params": repr(res.params), "tv": res.tv, "tv_bound": res.bound,
              "draws": res.draws, "batched": res.batched, "false_alarm": probe.FALSE_ALARM,
              "worst_batch": res.worst_row[0], "worst_codebook": res.worst_row[1],
              "hypothesis_excess": excess,
              "hypotheses_tried": ", ".join(f"{f}:{h} {e:+.3g}" for f, h, e in tried)}
        _name(found, fam if excess <= 0 else "", how, res, ev, Where(candidate="candidate_sampler"),
              f"its draws are not from transformers' distribution (total variation {res.tv:.3g} over "
              f"{res.draws} draws, bound {res.bound:.3g})")
    ok_evidence = {"draws": results[0].draws, "batched": results[0].batched,
                   "tv_draws_max": max(r.tv for r in results),
                   "tv_bound_min": min(r.bound for r in results), "false_alarm": probe.FALSE_ALARM}
    return list(found.values()), ok_evidence


def _name(found: dict[str, Finding], fam: str, how: str, res, ev: dict, where: Where, gap: str) -> None:
    """Add the finding of one mismatching parameter set to ``found`` (at most one per code).

    ``fam`` is the explaining hypothesis's family, or ``""`` when none explains it
    (``sampling.unexplained``); ``gap`` says how the distributions differ.
    """
    if fam:
        code, hint = _HINTS[fam]
        if code in found:
            return
        ev["how" if fam == "repetition_penalty" else "routing" if fam == "codebook_routing" else "order"] = how
        found[code] = Finding(PREFIX, code, "fail", _message(fam, how, res), evidence=ev, where=where, hint=hint)
    elif "sampling.unexplained" not in found:
        found["sampling.unexplained"] = Finding(
            PREFIX, "sampling.unexplained", "fail",
            f"Parameter set {res.index} ({res.params!r}): {gap}, and no known fault explains it.",
            evidence=ev, where=where,
            hint="Compare each processing step with transformers' logits processors on these logits.")


def _wrapped(spec, name: str):
    def call(*args):
        return spec.call(name, *args)
    return call


def _diagnose(proc, results, logits, ids) -> list[Finding]:
    """One finding per code over the mismatching parameter sets: the best hypothesis, or unexplained."""
    from porting_kit.probes.sampling import hypotheses

    found: dict[str, Finding] = {}
    for res in results:
        if res.tv <= TV_MATCH:
            continue
        tried = hypotheses(proc, res.params, logits, ids)
        fam, how, tv = min(tried, key=lambda t: t[2]) if tried else ("", "", 1.0)
        ev = {"parameter_set": res.index, "params": repr(res.params), "tv": res.tv,
              "worst_batch": res.worst_row[0], "worst_codebook": res.worst_row[1],
              "hypothesis_tv": tv,
              "hypotheses_tried": ", ".join(f"{f}:{h} {t:.3g}" for f, h, t in tried)}
        _name(found, fam if tv <= TV_MATCH else "", how, res, ev, Where(candidate="candidate_logits_processor"),
              f"gives another distribution than transformers' processors (total variation {res.tv:.3g})")
    return list(found.values())


def _message(fam: str, how: str, res) -> str:
    head = f"Parameter set {res.index} ({res.params!r}): "
    if fam == "repetition_penalty":
        what = {"twice": "applied twice", "sign": "dividing negative logits (they move up)",
                "none": "not applied"}[how]
        return head + f"the candidate's distribution is the reference's with the repetition penalty {what}."
    if fam == "order":
        return head + "the candidate's distribution is the reference's with top-p / min-p applied before temperature."
    if how == "repeat_interleave":
        return head + ("the candidate's distribution is the reference's with the per-codebook parameters "
                       "expanded over the (batch x codebook) rows with repeat_interleave where repeat is "
                       "meant (row (b, k) gets the parameters of codebook (b * n_codebooks + k) // batch).")
    return head + (f"the candidate's distribution is the reference's with the per-codebook parameters "
                   f"routed {how} (codebook k gets another codebook's parameters).")
