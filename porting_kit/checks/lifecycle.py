"""Per-request engine lifecycle contract of generator-style models (family ``lifecycle``).

Codes (DESIGN.md): ``lifecycle.dummy_not_finished``, ``lifecycle.eos_mask_misaligned``,
``lifecycle.cumulative_output``, ``lifecycle.missing_model_outputs``; and, for the
served waveform, ``channel.shape_contract`` (emitted here with ``check="channel"``,
since only the engine drive sees the served chunks).

Needs ``engine_model()``; the facts come from the same
:func:`porting_kit.probes.engine_suite.get_suite` run the ``rng`` family judges (computed
once per check run). What is checked:

* dummy / profile calls (``runtime_additional_information=[]`` and rows flagged
  ``_is_dummy``): ``compute_logits`` finishes every row and no per-request state
  (generator, temp file) is left behind;
* every return path of ``forward`` carries ``multimodal_outputs["model_outputs"]``
  with one entry per row;
* ``compute_logits`` returns one row per batch row and marks EOS exactly on the
  rows whose last chunk was yielded: batched requests whose audio matches their
  solo run must also end on the same chunk (no truncation, no run-on), and no
  request may run until the step backstop;
* each step's chunk is a delta, not the waveform so far;
* every served chunk is mono 1-D float32 within [-1, 1].
"""

from __future__ import annotations

from itertools import pairwise

from porting_kit.context import CheckContext
from porting_kit.report.findings import Finding, Where, ok, skip

PREFIX = "lifecycle"


def run(ctx: CheckContext) -> list[Finding]:
    """Run the lifecycle checks on the spec's ``engine_model()``.

    Parameters
    ----------
    ctx : CheckContext
        The engine suite is shared with the rng family
        (:func:`porting_kit.probes.engine_suite.get_suite`).

    Returns
    -------
    list of Finding
        The ``lifecycle.*`` findings; when none fails, ``lifecycle.ok`` first (followed by
        any warnings). The ``channel.shape_contract`` findings on the served chunks are
        appended last. One ``lifecycle.skipped`` without ``engine_model()``.

    Raises
    ------
    InputError
        ``engine_model()`` fails or the model raises while driven.
    """
    if not callable(ctx.spec.get("engine_model")):
        return [skip(PREFIX, "the lifecycle contract needs engine_model() (a generator-style model); "
                             "this spec does not define it")]
    from porting_kit.probes.engine_suite import get_suite

    suite = get_suite(ctx)
    findings: list[Finding] = []
    findings += _dummy(suite)
    findings += _missing_outputs(suite)
    findings += _eos(suite)
    findings += _cumulative(suite)
    shape = _shape_contract(suite)
    if not any(f.status == "fail" for f in findings):
        findings = [ok(PREFIX, f"{len(suite.requests)} interleaved requests: dummy calls finish, every "
                               "path returns model_outputs, EOS lands on each request's last chunk, "
                               "outputs are deltas.")] + findings
    return findings + shape


def _dummy(suite) -> list[Finding]:
    out = []
    bad = [c for c in suite.dummy if not all(c.eos)]
    if bad or suite.dummy_generators or suite.dummy_temp_files:
        c = bad[0] if bad else suite.dummy[-1]
        running = sum(1 for e in c.eos if not e)
        what = []
        if bad:
            what.append(f"compute_logits leaves {running} of {len(c.eos)} rows of the {c.kind} call "
                        "running (no EOS)")
        if suite.dummy_generators or suite.dummy_temp_files:
            what.append(f"it left {suite.dummy_generators} live generator(s) and "
                        f"{suite.dummy_temp_files} temp file(s) behind")
        out.append(Finding(
            PREFIX, "lifecycle.dummy_not_finished", "fail",
            "A dummy/profile call must finish every row at once: " + "; ".join(what) + ".",
            {"call": c.kind, "rows": len(c.eos), "rows_running": running,
             "live_generators_after": suite.dummy_generators,
             "temp_files_after": suite.dummy_temp_files},
            Where(None, "engine_model.forward"),
            "In forward(), when runtime_additional_information is empty or every row has "
            "_is_dummy, set the per-row EOS flags to True for every row, return empty chunks, and "
            "create no per-request state."))
    return out


def _missing_outputs(suite) -> list[Finding]:
    bad = [(name, c) for name, c in suite.all_calls() if c.model_outputs_problem]
    if not bad:
        return []
    name, c = bad[0]
    where = f"the {c.kind} call" if c.step < 0 else f"step {c.step} of {name}"
    return [Finding(
        PREFIX, "lifecycle.missing_model_outputs", "fail",
        f"forward() returned without a usable multimodal_outputs['model_outputs'] on {where}: "
        f"{c.model_outputs_problem}; the runner then serves nothing for those rows.",
        {"scenario": name, "call": c.kind, "step": c.step, "problem": c.model_outputs_problem,
         "calls_affected": len(bad), "calls_total": len(suite.all_calls())},
        Where(None, "engine_model.forward"),
        "Return OmniOutput(text_hidden_states=..., multimodal_outputs={'model_outputs': [one tensor "
        "per row], 'sr': [...]}) from every path, including the dummy/warm-up branch (empty "
        "tensors there).")]


def _eos(suite) -> list[Finding]:
    from porting_kit.probes.engine_suite import compare_to_solo, determinism

    ev: dict = {}
    reasons = []
    rows_bad = [(name, c) for name, c in suite.all_calls() if c.kind == "step"
                and c.logits_rows != len(c.req_ids)]
    if rows_bad:
        name, c = rows_bad[0]
        ev.update({"scenario": name, "step": c.step, "batch_rows": len(c.req_ids),
                   "logits_rows": c.logits_rows})
        reasons.append(f"compute_logits returned {c.logits_rows} rows for a batch of "
                       f"{len(c.req_ids)} at step {c.step} of {name}")
    stuck = [(sc.name, r) for sc in suite.scenarios() for r in sc.results.values()
             if r.finished_by == "max_steps"]
    if stuck:
        name, r = stuck[0]
        ev.update({"never_finished": r.request_id, "never_finished_scenario": name,
                   "steps_run": r.steps})
        reasons.append(f"{r.request_id} was never finished by compute_logits ({r.steps} steps in "
                       f"{name})")
    if determinism(suite)[0]:
        lens = [m for m in compare_to_solo(suite) if m.kind in ("early", "late")]
        if lens:
            m = lens[0]
            ev.update({"scenario": m.scenario, "request": m.request_id, "solo_chunks": m.solo_chunks,
                       "batch_chunks": m.batch_chunks, "requests_affected": len(lens)})
            verb = "finished early" if m.kind == "early" else "kept running past its last chunk"
            reasons.append(f"in the {m.scenario} batch {m.request_id} {verb} ({m.batch_chunks} "
                           f"chunks vs {m.solo_chunks} alone) although its audio matches")
            # where did the flags go? the step where this request's EOS should have been
            sc = next(s for s in suite.batches if s.name == m.scenario)
            for c in sc.calls:
                if m.request_id in c.req_ids:
                    i = c.req_ids.index(m.request_id)
                    if c.chunk_index[i] == m.solo_chunks - 1 or (m.kind == "early" and c.eos[i]):
                        ev.update({"step": c.step,
                                   "rows_flagged": [j for j, e in enumerate(c.eos) if e],
                                   "row_of_request": i})
                        break
    if not reasons:
        return []
    return [Finding(
        PREFIX, "lifecycle.eos_mask_misaligned", "fail",
        "compute_logits must mark EOS on exactly the rows whose last chunk was yielded: "
        + "; ".join(reasons) + ".",
        ev, Where(None, "engine_model.compute_logits"),
        "Build the per-row EOS flags in forward() in the order of runtime_additional_information "
        "(the batch rows of this step), one per row, and read them by row index in compute_logits.")]


def _cumulative(suite) -> list[Finding]:
    for sc in suite.solo.values():
        for r in sc.results.values():
            chunks = [c for c in r.chunks if c is not None and c.numel() > 0]
            if len(chunks) < 2:
                continue
            pairs = list(pairwise(chunks))
            if all(b.shape[-1] > a.shape[-1] and a.abs().max() > 0
                   and bool((b[..., :a.shape[-1]] - a).abs().max() <= 1e-6) for a, b in pairs):
                lens = [int(c.shape[-1]) for c in chunks]
                return [Finding(
                    PREFIX, "lifecycle.cumulative_output", "fail",
                    f"Each step returns the whole waveform so far, not the new chunk: {r.request_id}'s "
                    f"chunks grow {lens[:6]} samples and each starts with the previous one, so the "
                    "client hears the beginning again at every step.",
                    {"request": r.request_id, "chunk_samples": lens[:16], "chunks": len(lens)},
                    Where(None, "engine_model.forward", [0, lens[-1]]),
                    "Return only the samples produced in this step (keep the running total, if you "
                    "need one, inside the request's state).")]
    return []


def _shape_contract(suite) -> list[Finding]:
    import torch

    for sc in suite.solo.values():
        for r in sc.results.values():
            for k, c in enumerate(r.chunks):
                if c is None or c.numel() == 0:
                    continue
                peak = float(c.detach().float().abs().max()) if c.is_floating_point() else float("nan")
                problems = []
                if c.ndim != 1:
                    problems.append(f"shape {tuple(c.shape)} (not 1-D mono)")
                if c.dtype != torch.float32:
                    problems.append(f"dtype {str(c.dtype).replace('torch.', '')} (not float32)")
                if not c.is_floating_point() or not bool(torch.isfinite(c).all()):
                    problems.append("non-finite samples")
                elif peak > 1.0:
                    problems.append(f"peak {peak:.3g} outside [-1, 1]")
                if problems:
                    return [Finding(
                        "channel", "channel.shape_contract", "fail",
                        f"The served waveform must be mono 1-D float32 in [-1, 1]; chunk {k} of "
                        f"{r.request_id} has " + ", ".join(problems) + ".",
                        {"request": r.request_id, "chunk": k, "shape": str(tuple(c.shape)),
                         "dtype": str(c.dtype).replace("torch.", ""), "peak": peak},
                        Where(None, "engine_model.forward"),
                        "Mix (channels, samples) down by the channel mean (waveform.mean(0)), never "
                        "by .reshape(-1) / .T.reshape(-1); cast to float32 on the way out.")]
    return []  # the channel family's own ok finding comes from checks/channel.py
