"""RNG isolation of per-request generation (family ``rng``).

Codes (DESIGN.md): ``rng.nondeterministic``, ``rng.global_state_mutated``,
``rng.crosstalk``, ``rng.request_key_collapse``, ``rng.generator_leak``.

Two spec forms are served:

* ``engine_model() -> model`` (generator-style, MOSS-TTS-Nano shape): the model is
  driven through vLLM-Omni's AR-runner contract by
  :func:`porting_kit.adapters.vllm_omni.engine.run_contract_suite` (solo runs,
  N >= 4 seeded requests interleaved / permuted / joining mid-stream, an abort
  of one of three in-flight requests, serial requests after an abort). Every
  code is judged from behaviour.
* ``synthesize_candidate(text, seed) -> (waveform, sample_rate)`` (optionally
  ``synthesize_reference``): only ``rng.nondeterministic`` and
  ``rng.global_state_mutated`` can be judged.

A spec with neither gets one ``skip``. The suite is computed once per run and
shared with ``checks/lifecycle.py`` through
:func:`porting_kit.probes.engine_suite.get_suite`.

How the diagnosis is made (differential)
----------------------------------------
For each batch scenario each request's chunks are compared with its solo run
(:func:`compare_to_solo`). At the first chunk that differs: if it equals a chunk
of *another* request's solo run, that request's per-request state was reached
through a shared key (``rng.request_key_collapse``); otherwise the rows disturb
each other's sampling (``rng.crosstalk``). Content that matches but ends early or
late is an EOS problem, reported by ``lifecycle``. Key collapse is also read
from the live per-request generators (fewer than live requests) and from a
serial request receiving an aborted request's remaining chunks. A model whose
solo run is not reproducible from the same process-RNG state gets
``rng.nondeterministic`` and no batch comparison (it would be meaningless).
"""

from __future__ import annotations

from typing import Any

from porting_kit.context import CheckContext
from porting_kit.errors import InputError
from porting_kit.probes.engine_suite import ATOL, compare_to_solo, determinism, first_diff, get_suite, same_chunk
from porting_kit.report.findings import Finding, Where, ok, skip

PREFIX = "rng"
SYNTH_TEXT = "porting kit checks that one seed gives one waveform"
SYNTH_SEED = 1234

HINT_GLOBAL = ("Draw from a per-request torch.Generator (torch.multinomial(..., generator=g), "
               "g = torch.Generator(device).manual_seed(seed)); where upstream code can only use the "
               "global RNG, save the process RNG state, swap the request's own state in around its "
               "step and restore it (torch.random.fork_rng), so the global state is left as it was.")


# ----------------------------------------------------------------------------
# The family
# ----------------------------------------------------------------------------

def run(ctx: CheckContext) -> list[Finding]:
    """Run the RNG-isolation checks on ``engine_model()`` or ``synthesize_candidate()``.

    Parameters
    ----------
    ctx : CheckContext
        ``engine_model()`` wins when both are defined; the engine suite is shared with
        the lifecycle family (:func:`porting_kit.probes.engine_suite.get_suite`).

    Returns
    -------
    list of Finding
        The ``rng.*`` faults found, else one ``rng.ok``; one ``rng.skipped`` when the spec
        defines neither. ``rng.nondeterministic`` on ``synthesize_candidate`` is ``warn``
        when ``synthesize_reference`` is not deterministic either.

    Raises
    ------
    InputError
        ``engine_model()`` fails or the model raises while driven; ``synthesize_*``
        raises or does not return ``(waveform, sample_rate)``.

    Notes
    -----
    The synthesize form calls ``synthesize_candidate(SYNTH_TEXT, SYNTH_SEED)`` three times:
    after resetting the process RNGs
    (:func:`~porting_kit.adapters.vllm_omni.engine.seed_process_rngs`) twice, then without a
    reset; waveforms are equal within ``ATOL`` (1e-6). The caller's RNG state is restored
    afterwards.
    """
    spec = ctx.spec
    if callable(spec.get("engine_model")):
        findings = _engine_findings(get_suite(ctx))
    elif callable(spec.get("synthesize_candidate")):
        findings = _synth_findings(ctx)
    else:
        return [skip(PREFIX, "the spec defines neither engine_model() nor synthesize_candidate()")]
    return findings or [ok(PREFIX, "Seeded requests are reproducible, isolated from each other and "
                                   "from the process RNG; aborted requests are cleaned up.")]


def _engine_findings(suite) -> list[Finding]:
    """Every rng finding the engine-contract suite supports, in code order."""
    intrinsic, continued, sample, diff = determinism(suite)
    mismatches = compare_to_solo(suite) if intrinsic else []
    found = [
        _nondeterministic(suite, intrinsic, continued, sample, diff),
        _global_state_mutated(suite),
        _request_key_collapse(suite, intrinsic, mismatches),
        _crosstalk(suite, mismatches),
        _generator_leak(suite),
    ]
    return [f for f in found if f is not None]


def _generators_observable(suite) -> bool:
    """The model exposes its live per-request generators (so their count can be judged)."""
    return any(c.live_generators > 0 for _, c in suite.all_calls())


def _nondeterministic(suite, intrinsic: bool, continued: bool, sample: int, diff: float) -> Finding | None:
    """``rng.nondeterministic``: a solo request is not reproducible from the same seed."""
    rid0 = suite.requests[0].request_id
    if not intrinsic:
        return Finding(
            PREFIX, "rng.nondeterministic", "fail",
            f"Request {rid0} (seed {suite.requests[0].seed}) gives different audio when run alone "
            "twice from the same process RNG state: the seed does not determine the output.",
            {"request": rid0, "seed": suite.requests[0].seed, "first_sample": sample,
             "max_abs_diff": diff, "through_process_rng": "no"},
            Where(None, "engine_model", [sample, sample + 1]),
            "Seed a per-request torch.Generator from the request's `seed` (a one-element list in "
            "runtime_additional_information) and draw every random number from it.")
    elif not continued:
        return Finding(
            PREFIX, "rng.nondeterministic", "fail",
            f"Request {rid0} (seed {suite.requests[0].seed}) gives different audio the second time "
            "it runs in the same process: it draws from the process RNG, so its output depends on "
            "what ran before it.",
            {"request": rid0, "seed": suite.requests[0].seed, "first_sample": sample,
             "max_abs_diff": diff, "through_process_rng": "yes"},
            Where(None, "engine_model", [sample, sample + 1]), HINT_GLOBAL)
    return None


def _global_state_mutated(suite) -> Finding | None:
    """``rng.global_state_mutated``: serving a seeded request changes the process RNG."""
    mutated = [(name, c) for name, c in suite.all_calls() if c.rng_changed]
    if mutated:
        name, first = mutated[0]
        which = sorted({r for _, c in mutated for r in c.rng_changed})
        return Finding(
            PREFIX, "rng.global_state_mutated", "fail",
            f"Serving a seeded request changes the process RNG ({', '.join(which)}): first in "
            f"{name} at step {first.step}; every other component that draws from it is disturbed "
            "and concurrent requests race on it.",
            {"rngs": ", ".join(which), "first_scenario": name, "first_step": first.step,
             "calls_mutating": len(mutated), "calls_total": len(suite.all_calls())},
            Where(None, "engine_model.forward"), HINT_GLOBAL)
    return None


def _request_key_collapse(suite, intrinsic: bool, mismatches) -> Finding | None:
    """``rng.request_key_collapse``: requests share per-request state (chunks, generator count,
    or a serial request receiving an aborted one's chunks)."""
    collapse_ev: dict[str, Any] = {}
    col = [m for m in mismatches if m.kind == "collapse"]
    if col:
        m = col[0]
        collapse_ev.update({"scenario": m.scenario, "request": m.request_id, "chunk": m.chunk,
                            "received_from": m.other_request, "their_chunk": m.other_chunk})
    observable = _generators_observable(suite)
    first_batch = suite.batches[0]
    if observable and first_batch.calls:
        c0 = first_batch.calls[0]
        in_flight = sum(1 for e in c0.eos if not e)
        if in_flight >= 2 and c0.live_generators < in_flight:
            collapse_ev.update({"requests_in_flight": in_flight, "live_generators": c0.live_generators})
    serial = suite.serial_after_abort
    a_id, b_id = suite.requests[0].request_id, suite.requests[1].request_id
    b_chunks = serial.results[b_id].chunks if b_id in serial.results else []
    a_solo = suite.solo[a_id].results[a_id].chunks
    if intrinsic and b_chunks and b_chunks[0] is not None:
        j = next((j for j, c in enumerate(a_solo) if c is not None and c.numel() > 0
                  and same_chunk(b_chunks[0], c)), None)
        if j is not None:
            collapse_ev.update({"serial_request": b_id, "serial_received_from": a_id,
                                "serial_their_chunk": j})
    if collapse_ev:
        parts = []
        if "received_from" in collapse_ev:
            parts.append(f"in the {collapse_ev['scenario']} batch {collapse_ev['request']} received "
                         f"{collapse_ev['received_from']}'s chunk {collapse_ev['their_chunk']}")
        if "live_generators" in collapse_ev:
            parts.append(f"{collapse_ev['requests_in_flight']} requests in flight hold only "
                         f"{collapse_ev['live_generators']} live generator(s)")
        if "serial_request" in collapse_ev:
            parts.append(f"after {a_id} was aborted, {b_id} alone received {a_id}'s remaining "
                         f"chunks (from chunk {collapse_ev['serial_their_chunk']})")
        return Finding(
            PREFIX, "rng.request_key_collapse", "fail",
            "Per-request state is keyed by something requests share: " + "; ".join(parts) + ".",
            collapse_ev, Where(None, "engine_model.forward"),
            "Key per-request state by the engine's global_request_id (unwrap the one-element list: "
            "info['global_request_id'][0]); never by a constant, a legacy key the engine does not set "
            "(_omni_req_id), or id() of the per-step dict.")
    return None


def _crosstalk(suite, mismatches) -> Finding | None:
    """``rng.crosstalk``: a batched request's audio differs from its solo run otherwise."""
    n_req = len(suite.requests)
    cross = [m for m in mismatches if m.kind == "crosstalk"]
    if cross:
        m = cross[0]
        scen = sorted({x.scenario for x in cross})
        return Finding(
            PREFIX, "rng.crosstalk", "fail",
            f"With {n_req} seeded requests in one batch ({', '.join(scen)}), {m.request_id}'s audio "
            f"differs from its solo run from chunk {m.chunk} (sample {m.sample}): interleaved requests "
            "disturb each other.",
            {"scenario": m.scenario, "request": m.request_id, "chunk": m.chunk,
             "first_sample": m.sample, "max_abs_diff": m.max_abs_diff,
             "requests_affected": len({(x.scenario, x.request_id) for x in cross}),
             "scenarios": ", ".join(scen), "solo_chunks": m.solo_chunks, "batch_chunks": m.batch_chunks},
            Where(None, "engine_model.forward", [m.sample, m.sample + 1]),
            "Keep every random draw and every streaming state per request (per-request "
            "torch.Generator, per-request decoder state keyed by global_request_id); nothing a row "
            "computes may depend on the other rows of the batch.")
    return None


def _generator_leak(suite) -> Finding | None:
    """``rng.generator_leak``: an aborted request leaves a live generator or temp files."""
    probe = suite.abort
    observable = _generators_observable(suite)
    leak_reasons = []
    if not probe.has_on_requests_finished:
        leak_reasons.append("the model has no on_requests_finished(), so the engine cannot tell it")
    if observable and probe.after_generators > probe.survivors_running:
        leak_reasons.append(f"{probe.after_generators} generators are still live for "
                            f"{probe.survivors_running} running requests")
    if probe.before_temp_files and len(probe.after_temp_files) >= len(probe.before_temp_files):
        leak_reasons.append(f"its temp files were not removed ({len(probe.after_temp_files)} of "
                            f"{len(probe.before_temp_files)} remain)")
    if leak_reasons:
        return Finding(
            PREFIX, "rng.generator_leak", "fail",
            f"Aborting {probe.aborted} (one of three in flight) through on_requests_finished leaves "
            "its state behind: " + "; ".join(leak_reasons) + ".",
            {"aborted": probe.aborted, "generators_before": probe.before_generators,
             "generators_after": probe.after_generators, "survivors_running": probe.survivors_running,
             "temp_files_before": len(probe.before_temp_files),
             "temp_files_after": len(probe.after_temp_files),
             "has_on_requests_finished": probe.has_on_requests_finished},
            Where(None, "engine_model.on_requests_finished"),
            "Implement on_requests_finished(finished_req_ids): pop each id's generator from the "
            "per-request dict (the same key forward() uses: the plain id string, not str() of the "
            "list) and call gen.close() so its finally block removes temp files.")
    return None


def _synthesize(spec, name: str, text: str, seed: int):
    import torch

    out = spec.call(name, text, seed)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise InputError(f"{spec.name}: {name}() must return (waveform, sample_rate)")
    return torch.as_tensor(out[0]).detach().to("cpu").float().reshape(-1), int(out[1])


def _synth_determinism(spec, name: str):
    """Three calls with one (text, seed): reset process RNG before the first two,
    not before the third. Returns (intrinsic_ok, continued_ok, rngs changed, sample, diff)."""
    from porting_kit.adapters.vllm_omni.engine import (
        capture_rng_state,
        preserved_rng_state,
        rng_state_changes,
        seed_process_rngs,
    )

    changed: list[str] = []
    waves = []
    with preserved_rng_state():
        for reset in (True, True, False):
            if reset:
                seed_process_rngs(0)
            before = capture_rng_state()
            waves.append(_synthesize(spec, name, SYNTH_TEXT, SYNTH_SEED)[0])
            changed += [r for r in rng_state_changes(before, capture_rng_state()) if r not in changed]

    def eq(a, b):
        return a.shape == b.shape and (a.numel() == 0 or bool((a - b).abs().max() <= ATOL))

    intrinsic, continued = eq(waves[0], waves[1]), eq(waves[0], waves[2])
    other = waves[1] if not intrinsic else waves[2]
    sample, diff = first_diff(other, waves[0])
    return intrinsic, continued, changed, sample, diff


def _synth_findings(ctx: CheckContext) -> list[Finding]:
    spec = ctx.spec
    findings: list[Finding] = []
    intrinsic, continued, changed, sample, diff = _synth_determinism(spec, "synthesize_candidate")
    ref = None
    if callable(spec.get("synthesize_reference")):
        ref = _synth_determinism(spec, "synthesize_reference")
    if not (intrinsic and continued):
        ref_det = ref is None or (ref[0] and ref[1])
        via = "no" if not intrinsic else "yes"
        findings.append(Finding(
            PREFIX, "rng.nondeterministic", "fail" if ref_det else "warn",
            f"synthesize_candidate({SYNTH_TEXT!r}, seed={SYNTH_SEED}) gives different audio on a "
            + ("second call from the same process RNG state" if not intrinsic else
               "later call in the same process (it draws from the process RNG)")
            + ("" if ref_det else "; the reference is not deterministic either") + ".",
            {"seed": SYNTH_SEED, "first_sample": sample, "max_abs_diff": diff,
             "through_process_rng": via,
             "reference_deterministic": "n/a" if ref is None else ("yes" if ref_det else "no")},
            Where(None, "synthesize_candidate", [sample, sample + 1]),
            "Seed a per-request torch.Generator from `seed` and pass it to every sampling call."))
    if changed:
        findings.append(Finding(
            PREFIX, "rng.global_state_mutated", "fail",
            f"synthesize_candidate(seed={SYNTH_SEED}) changes the process RNG ({', '.join(changed)}).",
            {"rngs": ", ".join(changed),
             "reference_mutates": "n/a" if ref is None else (", ".join(ref[2]) or "no")},
            Where(None, "synthesize_candidate"), HINT_GLOBAL))
    return findings
