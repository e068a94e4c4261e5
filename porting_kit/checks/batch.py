"""Batch parity (family ``batch``): a padded batch of requests equals each request run alone.

Codes:

* ``batch.row_mismatch`` - a request's row of the padded batch differs from its solo run
  (row spans, attention/padding masks, position ids after left padding); evidence names
  the row, its length, the relative error and the first module (solo call order) whose
  output for that row differs;
* ``batch.position_ids`` - the first differing module (a position embedding) holds the row's
  solo output at another offset: positions counted from the batch's first slot rather than
  the row's first token (left padding without position ids); evidence: both offsets, the
  padding, whether the module's output is one row broadcast over the batch;
* ``batch.ok``; ``batch.skipped`` (no parity trio, or no ``run_candidate_batch``).

Measured by :func:`porting_kit.probes.batch.measure_batch`; requests from the spec's
``batch_inputs()`` or, by default, ``inputs()`` truncated to 100 %, 75 % and 50 % of its length.
"""

from __future__ import annotations

from porting_kit.context import CheckContext
from porting_kit.errors import InputError
from porting_kit.report.findings import Finding, Where, ok, skip

P = "batch"


def run(ctx: CheckContext) -> list[Finding]:
    """The batch family: see the module docstring.

    Parameters
    ----------
    ctx : CheckContext
        Needs the parity trio and ``run_candidate_batch``; uses the loaded pair.

    Returns
    -------
    list of Finding
        ``batch.position_ids`` or ``batch.row_mismatch`` (one, the first bad row), else
        ``batch.ok``; or ``batch.skipped``.

    Raises
    ------
    InputError
        ``batch_inputs()`` / ``run_candidate_batch`` fail or return something unusable.
    """
    spec = ctx.spec
    if not spec.has_parity:
        return [skip(P, "the spec has no reference()/candidate()/inputs(): nothing to batch")]
    if not callable(spec.get("run_candidate_batch")):
        return [skip(P, "the spec defines no run_candidate_batch(model, requests) (the candidate's "
                        "padded batched forward)")]
    from porting_kit.load import load_pair, move_inputs, run_side
    from porting_kit.probes.batch import default_batch_inputs, measure_batch
    from porting_kit.probes.compare import first_tensor

    pair = load_pair(ctx)
    if callable(spec.get("batch_inputs")):
        requests = spec.call("batch_inputs")
    else:
        try:
            requests = default_batch_inputs(spec.call("inputs"))
        except ValueError as exc:
            raise InputError(f"{spec.name}: cannot derive batch_inputs() from inputs(): {exc}") from exc
    if not isinstance(requests, list) or len(requests) < 2 or not all(isinstance(r, dict) for r in requests):
        raise InputError(f"{spec.name}: batch_inputs() must return a list of at least two dicts")
    requests = [move_inputs(r, ctx.device, None) for r in requests]
    dtype = str(next(pair.candidate.parameters()).dtype).replace("torch.", "")

    def solo(model, r):
        return first_tensor(run_side(spec, "candidate", model, r))

    def batched(model, rs):
        out = spec.call("run_candidate_batch", model, rs)
        if not isinstance(out, (list, tuple)) or len(out) != len(rs):
            raise InputError(f"{spec.name}: run_candidate_batch() must return one output per request")
        return list(out)

    m = measure_batch(solo, batched, pair.candidate, requests, dtype)
    ev = {"requests": len(requests), "lengths": ", ".join(map(str, m.lengths)),
          "tolerance_rel": m.tolerance, "dtype": m.dtype,
          "worst_rel_err": max(r.rel_err for r in m.rows)}
    if m.first_bad_row is None:
        return [ok(P, f"{len(requests)} requests of lengths {ev['lengths']} give the same output in "
                      "one padded batch as alone.", ev)]
    r = m.rows[m.first_bad_row]
    bad = [x.row for x in m.rows if not x.rel_err <= m.tolerance]
    where_mod = m.first_module or "the final output"
    ev.update({"row": r.row, "row_length": r.length, "row_rel_err": r.rel_err, "row_max_abs": r.max_abs,
               "bad_rows": ", ".join(map(str, bad)), "first_module": m.first_module or "",
               "first_module_rel_err": m.first_module_rel_err, "padding_side": m.span or ""})
    if m.first_module_broadcast:
        ev["first_module_broadcast"] = True
    if m.position_offset is not None and m.first_module:
        return [_position_ids_finding(m, r, ev)]
    shape = "" if r.shape_ok else " (its batched output has a different size)"
    return [Finding(P, "batch.row_mismatch", "fail",
                    f"Row {r.row} (length {r.length}) of the padded batch differs from the same request "
                    f"run alone{shape}: relative error {r.rel_err:.3g} (tolerance {m.tolerance:g}); "
                    f"first differing module for that row: {where_mod}; bad rows: {ev['bad_rows']}.",
                    {k: v for k, v in ev.items() if v is not None}, Where(None, m.first_module),
                    "Each row must see only its own tokens: mask padding in attention (padding mask "
                    "with the causal mask), start position ids at 0 after left padding "
                    "(positions = cumsum(mask) - 1), and slice each request's output from its own span.")]


def _position_ids_finding(m, r, ev: dict) -> Finding:
    """``batch.position_ids``: the first differing module holds the row's solo output at another
    offset (its positions count the batch's slots, not the row's tokens)."""
    found, own = m.position_offset
    pad = abs(own - found)
    shared = " (one output of batch 1 shared by every row)" if m.first_module_broadcast else ""
    ev.update({"position_offset_found": found, "position_offset_expected": own, "padding_tokens": pad})
    return Finding(
        P, "batch.position_ids", "fail",
        f"Row {r.row} (length {r.length}, {pad} padding tokens, {m.span or '?'} padding) of the padded batch "
        f"differs from its solo run (relative error {r.rel_err:.3g}): {m.first_module}{shared} gives it the "
        f"output of positions {found}..{found + r.length - 1} where its tokens sit at "
        f"{own}..{own + r.length - 1}: the positions ignore the padding (counted from the batch's "
        f"first slot, not the row's first token).",
        {k: v for k, v in ev.items() if v is not None}, Where(None, m.first_module),
        "Pass position ids that skip the padding (positions = attention_mask.cumsum(-1) - 1, "
        "clamped at 0) to the position embedding, per row; never arange(max_len) shared by the "
        "batch under left padding.")
