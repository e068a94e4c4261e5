"""End-to-end quality family (``quality.*``): does the port sound like the reference?

Both sides speak the same prompts with the same seeds, N takes each
(:mod:`porting_kit.probes.quality` measures). Per metric the reference's own
spread -- its worst take-to-take value -- sets the bar: the candidate fails only
when its value at its worst prompt (the mean over its takes against every
reference take) lies beyond ``factor * spread + floor`` (:data:`MARGINS`). A
sampled TTS never repeats a waveform, so nothing here compares samples.

Codes:

* ``quality.duration`` -- speech length off (``|log(d_cand / d_ref)|``): a time-stretched
  or rate-mislabelled output, words dropped or repeated;
* ``quality.mcd`` -- mel-cepstral distortion along a DTW path beyond the reference's: noise,
  a broken vocoder, another voice (MFCC scale, comparable only within one run);
* ``quality.seam`` -- a discontinuity at the candidate's chunk boundaries (the first-difference
  jump over the clip's 99th-percentile ``|diff|``, median over seams): a click per chunk;
* ``quality.wer`` -- ASR round-trip word error rate beyond the reference's worst take: dropped,
  repeated or garbled words (the evidence names the worst prompts with both transcripts);
* ``quality.speaker`` -- speaker-embedding distance beyond the reference's: another voice;
* ``quality.mos`` -- DNSMOS overall score dropped beyond the reference's spread;
* ``quality.stoi`` / ``quality.pesq`` -- intrusive: the STOI / PESQ drop of the candidate's take
  against the reference's take of the same (prompt, seed), only where the two line up in time
  (a deterministic port); with sampling on they are "not applicable" (``quality.skipped``);
* ``quality.sample_rate`` -- the candidate's clips are at another sample rate than the
  reference's (measured after resampling; exit 1 like ``hop.sample_rate_mismatch``);
* ``quality.ok`` -- every metric that ran lies within the reference's spread;
* ``quality.skipped`` -- a metric (or the family) could not run: the reason and the install
  command (status ``skip``).

What these metrics cannot see (:data:`CANNOT_SEE`) is written into every report.
"""

from __future__ import annotations

from typing import Any

from porting_kit.probes.quality import QualityMeasurement
from porting_kit.report.findings import Finding, ok, skip

#: metric -> (factor, floor): the candidate fails beyond ``factor * reference_spread + floor``.
MARGINS: dict[str, tuple[float, float]] = {
    "duration": (2.0, 0.05),   # |log ratio|: 0.05 is a 5 % length change on top of twice the spread
    "mcd": (1.5, 2.0),         # dB (MFCC scale)
    "seam": (3.0, 1.0),        # seam jump over the clip's p99 |diff|: 1.0 is a step as large as speech's
    "wer": (1.0, 0.15),        # absolute WER above the reference's worst take
    "speaker": (2.0, 0.05),    # 1 - cos of GE2E embeddings
    "mos": (1.0, 0.3),         # DNSMOS points below the reference's mean beyond its range
    # STOI / PESQ drop of an aligned (deterministic) pair. The spread comes from reference takes that
    # share a seed; with one take per seed it is 0 and the floor alone judges. Measured on the espeak
    # pair: bf16-rounded output drops STOI 0.000 / PESQ 0.03, signal-proportional noise at 40 dB SNR
    # 0.000 / 0.66, at 20 dB 0.030 / 3.0; white noise at 5 dB SNR 0.07-0.10 / 3.6.
    "stoi": (2.0, 0.05),       # an intelligibility loss, beyond anything numerical (20 dB noise: 0.03)
    "pesq": (2.0, 1.0),        # one MOS-LQO point (excellent -> good): bf16 and 40 dB noise pass
}

_WHAT = {
    "duration": ("the candidate's speech length differs from the reference's",
                 "a time-stretch, a sample rate mislabelled on write, dropped or repeated words",
                 "compare the served sample rate, the hop/upsampling factor and the stop condition "
                 "(max tokens, EOS) with the reference's"),
    "mcd": ("the candidate's spectrum differs from the reference's beyond its own take-to-take spread",
            "added noise, a broken vocoder or codec decode, another voice",
            "check the codec decode and dtype path (porting-kit check --only decode,dtype,hop), "
            "then the speaker conditioning"),
    "seam": ("the candidate jumps at its chunk boundaries",
             "a click per chunk: overlap-add missing, a decoder state reset per chunk, a cross-fade off by one",
             "carry the decoder state across chunks and cross-fade the overlap as the reference's "
             "streaming decode does (porting-kit check --only hop)"),
    "wer": ("the ASR round trip hears more word errors in the candidate than in the reference's worst take",
            "dropped, repeated or garbled words: a stop condition, a text normaliser or a tokenizer that differ",
            "compare the text frontend (normaliser, tokenizer, phonemizer) and the stop condition with the "
            "reference's"),
    "speaker": ("the candidate's speaker embedding is further from the reference's than its takes are from "
                "each other",
                "another voice: the speaker prompt or reference audio not passed, or the wrong speaker id",
                "pass the same speaker prompt / speaker id / reference audio to the candidate"),
    "mos": ("the predicted MOS (DNSMOS) of the candidate dropped beyond the reference's spread",
            "noise, distortion or artefacts",
            "listen to the worst prompt; then check the decode path (porting-kit check)"),
    "stoi": ("the candidate's take is less intelligible (STOI) than the reference's take of the same seed",
             "noise or distortion strong enough to cost intelligibility, a band cut off, a broken decode",
             "listen to the worst prompt; check the codec decode and dtype path "
             "(porting-kit check --only decode,dtype,hop)"),
    "pesq": ("the candidate's take scores a lower PESQ against the reference's take of the same seed",
             "added noise, quantisation or distortion in the decode, a lossy resampling",
             "listen to the worst prompt; check the codec decode and dtype path "
             "(porting-kit check --only decode,dtype,hop)"),
}

#: What the metrics cannot see; written into every quality report.
CANNOT_SEE = (
    "prosody beyond what DNSMOS scores (stress, intonation, emphasis, pacing within the length)",
    "languages the bundled ASR does not cover (pocketsphinx ships US English only): "
    "pass --asr module:function for others",
    "speaker traits GE2E does not encode (age, accent within a voice); a clone's similarity is not "
    "checked against a no-reference control",
    "the reference's own spread when it has one take: then only the floors judge (give N >= 3 takes)",
    "waveform-level detail when sampling is on: STOI and PESQ need takes that line up in time "
    "(a deterministic port) and are not applicable otherwise",
)
#: How to plug in models the user already has.
HOOKS = ("--asr module:function (waveform float32 [samples], sample_rate) -> str, e.g. a Whisper "
         "pipeline on local weights; --speaker module:function (waveform, sample_rate) -> vector, "
         "e.g. a WavLM/ECAPA encoder; in a spec: quality_asr / quality_speaker")


def threshold(metric: str, spread: float) -> float:
    """The bar of ``metric`` for a reference spread: ``factor * spread + floor``."""
    factor, floor = MARGINS[metric]
    return factor * spread + floor


def metric_rows(m: QualityMeasurement) -> list[dict[str, Any]]:
    """One row per metric: spread, candidate, threshold, verdict, worst prompt (the report's table).

    Returns
    -------
    list of dict
        ``metric``, ``unit``, ``reference_spread``, ``candidate``, ``threshold``, ``verdict``
        (``pass``/``fail``/``skip``), ``worst_prompt``, ``note`` (the skip reason).
    """
    rows = []
    for name, r in m.metrics.items():
        if r.skipped:
            rows.append({"metric": name, "unit": r.unit, "reference_spread": None, "candidate": None,
                         "threshold": None, "verdict": "skip", "worst_prompt": None, "note": r.skipped})
            continue
        bar = threshold(name, r.reference_spread)
        rows.append({"metric": name, "unit": r.unit, "reference_spread": round(r.reference_spread, 4),
                     "candidate": round(r.candidate, 4), "threshold": round(bar, 4),
                     "verdict": "fail" if r.candidate > bar else "pass", "worst_prompt": r.worst_prompt,
                     "note": ", ".join(f"{k}: {v}" for k, v in r.detail.items() if isinstance(v, (str, int)))})
    return rows


def _worst_prompts(metric: str, m: QualityMeasurement, count: int = 2) -> dict[str, Any]:
    r = m.metrics[metric]
    order = sorted(r.per_prompt, key=lambda k: r.per_prompt[k]["candidate"] - r.per_prompt[k]["reference_spread"],
                   reverse=True)[:count]
    ev: dict[str, Any] = {"worst_prompts": ", ".join(order)}
    for i, pid in enumerate(order, 1):
        row = r.per_prompt[pid]
        ev[f"prompt{i}"] = pid
        ev[f"prompt{i}_text"] = m.reference.prompts[pid]
        ev[f"prompt{i}_reference_spread"] = round(row["reference_spread"], 4)
        ev[f"prompt{i}_candidate"] = round(row["candidate"], 4)
        for key in ("reference_transcript", "candidate_transcript", "ratio", "reference_mos", "candidate_mos",
                    "candidate_jump_max", "seams", "candidate_worst", "aligned_pairs"):
            if key in row:
                val = row[key]
                ev[f"prompt{i}_{key}"] = round(val, 4) if isinstance(val, float) else val
    return ev


def findings(m: QualityMeasurement) -> list[Finding]:
    """The ``quality.*`` verdicts of one measurement.

    Parameters
    ----------
    m : QualityMeasurement
        From :func:`porting_kit.probes.quality.measure_quality`.

    Returns
    -------
    list of Finding
        ``quality.sample_rate`` first, then one fail per metric beyond its bar (in metric order),
        one ``quality.skipped`` per metric that could not run; ``quality.ok`` when no fail.
    """
    out: list[Finding] = []
    sr_ref, sr_cand = m.sample_rates
    if sr_ref != sr_cand:
        out.append(Finding("quality", "quality.sample_rate", "fail",
                           f"the candidate's takes are at {sr_cand} Hz, the reference's at {sr_ref} Hz "
                           f"(the other metrics were measured after resampling the candidate)",
                           {"reference_sample_rate": sr_ref, "candidate_sample_rate": sr_cand,
                            "source": m.candidate.source},
                           hint="serve the model's native rate (the codec's sampling_rate in its config), or "
                                "resample explicitly and say so in the deploy config"))
    for name, r in m.metrics.items():
        if r.skipped:
            out.append(skip("quality", f"{name}: {r.skipped}"))
            continue
        bar = threshold(name, r.reference_spread)
        if r.candidate <= bar:
            continue
        what, causes, hint = _WHAT[name]
        factor, floor = MARGINS[name]
        ev = {"metric": name, "unit": r.unit, "reference_spread": round(r.reference_spread, 4),
              "candidate": round(r.candidate, 4), "threshold": round(bar, 4), "margin_factor": factor,
              "margin_floor": floor, "takes": m.reference.n_takes, "likely": causes}
        ev.update({k: v for k, v in r.detail.items() if isinstance(v, (str, int, float))})
        ev.update(_worst_prompts(name, m))
        out.append(Finding("quality", f"quality.{name}", "fail",
                           f"{what}: {r.candidate:.3g} {r.unit} at prompt {r.worst_prompt}, beyond "
                           f"{factor:g} x the reference's spread {r.reference_spread:.3g} + {floor:g}",
                           ev, hint=hint))
    if not any(f.status == "fail" for f in out):
        ran = [row for row in metric_rows(m) if row["verdict"] != "skip"]
        ev = {"takes": m.reference.n_takes, "prompts": len(m.reference.prompts)}
        for row in ran:
            ev[f"{row['metric']}_reference_spread"] = row["reference_spread"]
            ev[f"{row['metric']}_candidate"] = row["candidate"]
            ev[f"{row['metric']}_threshold"] = row["threshold"]
        out.append(ok("quality", f"quality: {', '.join(r['metric'] for r in ran) or 'no metric'} within the "
                                 f"reference's own take-to-take spread", ev))
    return out


def summary(m: QualityMeasurement) -> dict[str, Any]:
    """The JSON report's ``quality`` object: the metric table, the prompts, the limits and the hooks."""
    return {"metrics": metric_rows(m), "prompts": dict(m.reference.prompts), "takes": m.reference.n_takes,
            "seeds": list(m.reference.seeds), "sample_rates": {"reference": m.sample_rates[0],
                                                               "candidate": m.sample_rates[1]},
            "margins": {k: {"factor": f, "floor": fl} for k, (f, fl) in MARGINS.items() if k in m.metrics},
            "cannot_see": list(CANNOT_SEE), "hooks": HOOKS}


def run(ctx: Any) -> list[Finding]:
    """The family in ``porting-kit check``: runs when the spec can synthesise both sides.

    Needs ``synthesize_reference``, ``synthesize_candidate`` and ``quality_prompts`` (a list of
    texts or a dict id -> text); optional ``quality_seeds`` (default ``[0, 1, 2]``),
    ``quality_chunk_samples``, ``quality_metrics``, ``quality_asr``, ``quality_speaker`` (a function
    or ``"module:function"``). Otherwise one ``quality.skipped``.
    """
    from porting_kit.probes.quality import METRICS, load_callable, measure_quality, spec_take_sets

    spec = ctx.spec
    lacking = [n for n in ("synthesize_reference", "synthesize_candidate", "quality_prompts") if not spec.has(n)]
    if lacking:
        return [skip("quality", f"the spec lacks {', '.join(lacking)} (both sides must synthesise a prompt list)")]
    ref, cand = spec_take_sets(spec)
    hooks = {}
    for name, what in (("quality_asr", "quality_asr"), ("quality_speaker", "quality_speaker")):
        fn = spec.get(name, None)
        hooks[name] = load_callable(fn, f"{spec.name}: {what}") if isinstance(fn, str) else fn
    m = measure_quality(ref, cand, metrics=spec.get("quality_metrics", None) or METRICS,
                        asr=hooks["quality_asr"], speaker=hooks["quality_speaker"])
    ctx.extras["quality"] = m
    ctx.extras["quality_summary"] = summary(m)
    return findings(m)
