"""Reference-audio features (family ``features``): the port's feature extraction against the reference's.

A TTS that clones a voice turns a reference clip into log-mel features; a port that computes
them differently conditions the model on another voice, with no error anywhere.

Codes, each named only when its hypothesis reproduces the candidate (measured by
:func:`porting_kit.probes.features.compare_features`; every finding is built here):

* ``features.resample`` - the time axis is scaled and the reference run with the clip declared
  at another rate reproduces the candidate: the port did not resample to the extractor's rate
  (fit at the extractor's rate), or resampled from the wrong rate; a ``warn`` (not a fail) when
  the reference fed the clip resampled by another resampler (soxr, scipy polyphase or FFT)
  reproduces the candidate: the same rate through another filter;
* ``features.framing`` - frames shifted or the frame count off: the frames agree unshifted
  (frames added or dropped at the end), or the reference on the clip shifted by ``d`` samples
  reproduces the candidate's interior frames (``center=False`` against
  ``center=True``: ``d = n_fft / 2``), or only the edge frames differ (padding mode);
* ``features.log_floor`` - a different log floor or clamp (every differing entry sits at the
  floor of one side: ``log(max(x, 1e-5))`` against ``1e-10``, Whisper's dynamic-range clamp
  missing), or another log base/scale (``cand = a * ref + b`` off the floors with ``a > 0``
  and a candidate that varies; ``a = ln 10`` for ln where log10);
* ``features.mel_filterbank`` - the mel filters differ: a per-bin constant gain (Slaney area
  normalisation on one side only), or other filter centres (mel scale: Slaney against HTK,
  measured with a chirp; evidence names the scale each side follows; named only when the two
  sides follow different mel scales: peaks that move along one scale - features cast to int,
  another n_fft - are ``features.mismatch``);
* ``features.mel_filterbank`` also when the mel bin counts differ (``n_mels``);
* ``features.mismatch`` - the features differ and no hypothesis fits (worst mel bin and frame),
  or the candidate has NaN/Inf entries;
* ``features.ok``; ``features.skipped`` (no ``reference_features`` / ``candidate_features``).

Every finding's evidence carries both shapes, both frame counts, the max abs and relative
error (relative to the reference's value range) and the tolerance (see
:data:`porting_kit.probes.features.FEATURE_TOL`: 1e-3 of the range; clean float32 torch against
the float64 reference measured at 1.9e-5 of the range).
"""

from __future__ import annotations

from typing import Any

from porting_kit.context import CheckContext
from porting_kit.errors import InputError
from porting_kit.report.findings import Finding, Where, ok, skip

P = "features"

#: Hypothesis (probe) -> fault code and the fix.
_CODES = {
    "source_rate": ("features.resample",
                    "Resample the clip to the extractor's sampling_rate before the STFT "
                    "(the reference's resampler), using the clip's real sample rate."),
    "time_offset": ("features.framing",
                    "Frame as the reference does: center=True pads n_fft // 2 on both sides "
                    "(pad_mode as the processor's), same hop_length and window."),
    "edge_frames": ("features.framing",
                    "Pad the edges as the reference does (pad_mode 'reflect' vs 'constant', "
                    "center padding of n_fft // 2)."),
    "floor_only": ("features.log_floor",
                   "Use the reference's log floor and clamp: the same mel_floor in log(max(x, floor)) "
                   "and, for Whisper, max(L, L.max() - 8.0) before (L + 4) / 4."),
    "log_affine": ("features.log_floor",
                   "Use the reference's log base and scaling (log10 vs ln, dB = 10 * log10)."),
    "per_bin_offset": ("features.mel_filterbank",
                       "Build the mel filters with the reference's norm (norm='slaney' area "
                       "normalisation or None)."),
    "resampler": ("features.resample",
                  "Resample with the processor's resampler (same library and filter) if the model "
                  "was trained on its features; the difference is largest near the extractor's Nyquist."),
    "filter_centres": ("features.mel_filterbank",
                       "Build the mel filters with the reference's mel_scale ('slaney' vs 'htk'), "
                       "f_min/f_max and n_mels (e.g. copy the processor's mel_filters)."),
}


def run(ctx: CheckContext) -> list[Finding]:
    """The features family: see the module docstring.

    Parameters
    ----------
    ctx : CheckContext
        Needs the spec names ``reference_features`` and ``candidate_features``; optional
        ``feature_clip`` and ``feature_layout``.

    Returns
    -------
    list of Finding
        One fail finding (the first hypothesis that fits, else ``features.mismatch``), or
        ``features.ok``, or ``features.skipped``.

    Raises
    ------
    InputError
        ``feature_clip()`` returns no mono waveform and rate, ``feature_layout`` is unknown,
        or an extractor raises or returns something that is not a 2-D feature map.
    """
    spec = ctx.spec
    missing = [n for n in ("reference_features", "candidate_features") if not callable(spec.get(n))]
    if missing:
        return [skip(P, f"the spec defines no {' / '.join(m + '(waveform, sample_rate)' for m in missing)}: "
                        "no feature extraction to compare")]
    from porting_kit.probes.features import compare_features

    wav, sr = _clip(ctx)
    layout = spec.get("feature_layout", "mels_frames")

    def side(name):
        return lambda w, s: spec.call(name, w, s)

    try:
        cmp = compare_features(side("reference_features"), side("candidate_features"), wav, sr, layout)
    except ValueError as exc:
        raise InputError(f"{spec.name}: {exc}") from exc
    return [_judge(cmp)]


def _clip(ctx: CheckContext):
    """The spec's ``feature_clip()`` or the shipped speech clip, as (float32 1-D, int Hz)."""
    import numpy as np

    from porting_kit.probes.features import default_clip

    spec = ctx.spec
    if not callable(spec.get("feature_clip")):
        return default_clip()
    got = spec.call("feature_clip")
    try:
        wav, sr = got
        wav = wav.detach().cpu().numpy() if hasattr(wav, "detach") else np.asarray(wav)
        wav = np.asarray(wav, np.float32).reshape(-1) if wav.ndim == 2 and 1 in wav.shape else wav
        ok_shape = wav.ndim == 1 and wav.size > 0 and int(sr) > 0
    except (TypeError, ValueError):
        ok_shape = False
    if not ok_shape:
        raise InputError(f"{spec.name}: feature_clip() must return (waveform, sample_rate): a 1-D "
                         "mono float array in [-1, 1] and a rate in Hz")
    return np.asarray(wav, np.float32), int(sr)


def _evidence(cmp) -> dict[str, Any]:
    return {"reference_shape": str(cmp.reference_shape), "candidate_shape": str(cmp.candidate_shape),
            "reference_frames": cmp.reference_shape[1], "candidate_frames": cmp.candidate_shape[1],
            "clip_sample_rate": cmp.sample_rate, "clip_samples": cmp.clip_samples,
            "max_abs_err": cmp.max_abs_err, "max_rel_err": cmp.max_rel_err,
            "tolerance_abs": cmp.tolerance, "candidate_transposed": cmp.transposed}


def _judge(cmp) -> Finding:
    """One finding from a :class:`~porting_kit.probes.features.FeatureComparison`."""
    ev = _evidence(cmp)
    shapes = f"reference {cmp.reference_shape}, candidate {cmp.candidate_shape} (n_mels, frames)"
    if cmp.matches:
        return ok(P, f"The candidate's features of the {cmp.clip_samples}-sample clip match the "
                     f"reference's: {shapes}, max abs error {cmp.max_abs_err:.3g} "
                     f"(tolerance {cmp.tolerance:.3g}).", ev)
    if cmp.reference_shape[0] != cmp.candidate_shape[0]:
        ev.update({"reference_n_mels": cmp.reference_shape[0], "candidate_n_mels": cmp.candidate_shape[0]})
        return Finding(P, "features.mel_filterbank", "fail",
                       f"The candidate has {cmp.candidate_shape[0]} mel bins, the reference "
                       f"{cmp.reference_shape[0]} ({shapes}).", ev, Where(),
                       "Build the mel filters with the processor's n_mels (feature_size).")
    if cmp.nonfinite:
        ev.update({"nonfinite_entries": cmp.nonfinite, "worst_mel_bin": cmp.worst_bin,
                   "worst_frame": cmp.worst_frame})
        return Finding(P, "features.mismatch", "fail",
                       f"The candidate's features have {cmp.nonfinite} NaN/Inf entries (first at mel bin "
                       f"{cmp.worst_bin}, frame {cmp.worst_frame}; {shapes}).", ev, Where(),
                       "Clamp before the log (log(max(x, mel_floor))) and check the STFT input is finite.")
    fit = cmp.fit
    if fit is not None:
        code, hint = _CODES[fit.name]
        ev.update({"hypothesis": fit.name, "hypothesis_error": fit.error})
        ev.update(fit.evidence)
        status = "warn" if fit.name == "resampler" else "fail"
        return Finding(P, code, status, f"Features differ ({shapes}, max abs error {cmp.max_abs_err:.3g}, "
                                        f"tolerance {cmp.tolerance:.3g}): {fit.detail}.",
                       ev, Where(), hint)
    tried = "; ".join(f"{h.name}: {h.detail}" for h in cmp.hypotheses) or "none applies to these shapes"
    ev.update({"worst_mel_bin": cmp.worst_bin, "worst_frame": cmp.worst_frame, "hypotheses_tried": tried})
    return Finding(P, "features.mismatch", "fail",
                   f"Features differ ({shapes}): max abs error {cmp.max_abs_err:.3g} at mel bin "
                   f"{cmp.worst_bin}, frame {cmp.worst_frame} (tolerance {cmp.tolerance:.3g}); no fault "
                   f"hypothesis reproduces the candidate ({tried}).", ev, Where(),
                   "Compare the port's extractor step by step with the processor's: resampling, "
                   "framing (center, hop, window), mel filters (scale, norm), log (floor, base).")
