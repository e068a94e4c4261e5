"""Channel-mix family (``channel.*``): how the candidate lays out and serves channels.

Codes (DESIGN.md):

* ``channel.interleaved_flatten`` - a (C, T) waveform flattened into C*T mono
  samples (``x.T.reshape(-1)``; also the channel-major ``x.reshape(-1)``):
  C times the length, played C times slower, an octave down for C = 2;
* ``channel.wrong_downmix`` - one channel served instead of the channel mean; or,
  with ``served_channels`` C > 1, a C-channel reference served as one channel
  (evidence: what the mono samples are, ``mean`` or ``channel_k``);
* ``channel.axis_mismatch`` - a multi-channel output whose channel and sample axes
  were confused: served ``(samples, channels)`` (``x.T``), or a ``(samples, channels)``
  array read as ``(channels, samples)`` with ``reshape(C, -1)`` (each row interleaved);
* ``channel.shape_contract`` - the served output is not float32, finite, within
  [-1, 1] and of the declared shape (``served_channels`` 1: mono 1-D; C: ``(C, samples)``).

Every finding's evidence carries both lengths (``reference_samples``,
``candidate_samples``; :meth:`porting_kit.probes.waveform.AudioMetrics.lengths`).

Each is found by trying the hypothesis on the reference's decode of the same
codes (:func:`porting_kit.probes.waveform.analyse_waveforms` measures,
:func:`waveform_findings` judges); the decode is shared with the ``hop`` and
``dtype`` families (:func:`porting_kit.probes.codec_pair.get_audio_pair`).
Runs when the spec defines the audio names; else ``skip`` with the reason.
"""

from __future__ import annotations

from porting_kit.probes.waveform import WaveformComparison
from porting_kit.report.findings import Finding, Where, ok, skip

#: A served waveform's peak |x| may exceed 1 by this much (float rounding) before it is out of range.
PEAK_SLACK = 1e-6


def _finding(code: str, message: str, evidence: dict, hint: str,
             samples: list[int] | None = None) -> Finding:
    return Finding("channel", code, "fail", message, evidence, Where(samples=samples), hint)


def waveform_findings(cmp: WaveformComparison,
                      names: tuple[str, str] = ("reference", "candidate")) -> list[Finding]:
    """The ``channel.*`` faults of a waveform comparison, in the order the facts were measured.

    Parameters
    ----------
    cmp : WaveformComparison
        From :func:`porting_kit.probes.waveform.analyse_waveforms`.
    names : (str, str)
        How the reference and the candidate are named in messages (file names for files).

    Returns
    -------
    list of Finding
        ``channel.shape_contract`` (not a waveform shape; NaN/Inf samples; a served
        output that is not mono 1-D float32 in [-1, 1]; channel counts that differ),
        ``channel.interleaved_flatten``, ``channel.wrong_downmix``; empty when none applies.
    """
    rname, cname = names
    if cmp.unusable_shape is not None:
        return [_finding(
            "channel.shape_contract", f"{cname} has shape {cmp.unusable_shape}; "
            "a waveform is (samples,) or (channels, samples).",
            {"shape": str(cmp.unusable_shape)},
            "Return the served waveform as a 1-D float32 array of samples.")]
    if cmp.nonfinite:
        return [_finding(
            "channel.shape_contract",
            f"{rname if nf.side == 'reference' else cname} has {nf.count} NaN/Inf samples "
            f"(first at sample {nf.first_index}).",
            {"side": nf.side, "nonfinite_samples": nf.count, "first_nonfinite": nf.first_index},
            "Find the first NaN upstream (porting-kit check reports parity.nan_origin); "
            "a served waveform must be finite.", [nf.first_index, nf.first_index + 1])
            for nf in cmp.nonfinite]
    found = []
    contract = _contract_breaches(cmp)
    if contract:
        form = cmp.form
        found.append(_finding(
            "channel.shape_contract", f"{cname} breaks the output contract: " + "; ".join(contract) + ".",
            {"shape": str(form.shape), "dtype": form.dtype, "peak": form.peak},
            "Serve mono 1-D float32 in [-1, 1]: squeeze the channel axis, mix stereo down by the "
            "channel mean, keep the codec output float32, clamp or rescale."))
    if cmp.axis is not None:
        found.append(_axis_finding(cmp, names))
    if cmp.mono_for_stereo is not None:
        found.append(_mono_for_stereo_finding(cmp, names))
    if cmp.layout is not None:
        found.append(_layout_finding(cmp, names))
    elif cmp.channel_counts is not None:
        cc = cmp.channel_counts
        if cc.reference_channels == 1:
            found.append(_finding(
                "channel.shape_contract",
                f"{cname} has {cc.candidate_channels} channels, {rname} has 1.",
                {"reference_channels": 1, "candidate_channels": cc.candidate_channels},
                "Serve the codec's channel count; mix down by the channel mean when a mono output "
                "is served."))
        else:
            found.append(_finding(
                "channel.shape_contract",
                f"{cname} has {cc.candidate_channels} channels, {rname} {cc.reference_channels}.",
                {"reference_channels": cc.reference_channels, "candidate_channels": cc.candidate_channels},
                "Keep the reference's channel layout."))
    return found


def _contract_breaches(cmp: WaveformComparison) -> list[str]:
    """What the candidate's form breaks of the served contract (mono 1-D float32 in [-1, 1])."""
    form = cmp.form
    if form is None:
        return []
    out = []
    want = form.served_channels
    if form.served and cmp.axis is None:
        if want == 1 and len(form.shape) != 1:
            out.append(f"shape {form.shape} (must be 1-D mono samples)")
        elif want > 1 and cmp.mono_for_stereo is None and (
                len(form.shape) != 2 or form.shape[0] != want):
            out.append(f"shape {form.shape} (must be ({want}, samples): served_channels = {want})")
        if form.dtype != "float32":
            out.append(f"dtype {form.dtype} (must be float32)")
    if form.peak > 1.0 + PEAK_SLACK:
        out.append(f"peak |x| {form.peak:.3f} outside [-1, 1]")
    return out


def _axis_finding(cmp: WaveformComparison, names: tuple[str, str]) -> Finding:
    """``channel.axis_mismatch`` from the axis hypothesis that fits."""
    fit = cmp.axis
    how = ("served as (samples, channels) (x.T)" if fit.layout == "transposed" else
           "a (samples, channels) array read as (channels, samples) with reshape(C, -1): each "
           "row holds interleaved samples of every channel")
    return _finding(
        "channel.axis_mismatch",
        f"{names[1]} confuses the channel and sample axes of the {fit.channels}-channel "
        f"{names[0]}: {how} (shape {fit.candidate_shape}, {names[0]} {fit.reference_shape}).",
        {"layout": fit.layout, "channels": fit.channels, "reference_shape": str(fit.reference_shape),
         "candidate_shape": str(fit.candidate_shape), "hypothesis_snr_db": fit.hypothesis_snr_db,
         "given_snr_db": fit.given_snr_db},
        "Keep one axis convention: codec output is (channels, samples); transpose explicitly "
        "(x.T, not reshape) when a library wants (samples, channels), and pass axis= to "
        "resamplers and mixers.")


def _mono_for_stereo_finding(cmp: WaveformComparison, names: tuple[str, str]) -> Finding:
    """``channel.wrong_downmix``: a C-channel reference served as one channel."""
    f = cmp.mono_for_stereo
    what = ("its channel mean" if f.matches == "mean" else
            f"its channel {f.matches.split('_')[1]}" if f.matches else "neither its mean nor one channel")
    return _finding(
        "channel.wrong_downmix",
        f"{names[1]} serves one channel ({what}) where the port declares served_channels = "
        f"{f.served_channels} and {names[0]} has {f.reference_channels}.",
        {"served_channels": f.served_channels, "reference_channels": f.reference_channels,
         "candidate_channels": 1, "mono_matches": f.matches or "none", "mono_snr_db": f.snr_db},
        f"Serve all {f.served_channels} channels as ({f.served_channels}, samples); mix down only "
        "when the deploy config serves mono (then declare served_channels = 1).")


def _layout_finding(cmp: WaveformComparison, names: tuple[str, str]) -> Finding:
    """``channel.interleaved_flatten`` or ``channel.wrong_downmix`` from the layout that fits."""
    fit = cmp.layout
    C, ratio = fit.channels, fit.length_ratio
    if fit.layout == "first":
        return _finding(
            "channel.wrong_downmix",
            f"{names[1]} is channel {fit.channel_used} of the {C}-channel {names[0]}, not the channel mean.",
            {"channels": C, "channel_used": fit.channel_used, "hypothesis_snr_db": fit.hypothesis_snr_db,
             "mean_downmix_snr_db": fit.mean_downmix_snr_db},
            "Mix down with x.mean(dim=channel_axis), not x[0] / x[:, 0].")
    if fit.layout == "channel_axis_resampled":
        m = cmp.metrics
        return _finding(
            "channel.axis_mismatch",
            f"{names[1]} ({m.candidate_samples} samples) is a fixed mix {list(fit.mix_weights)} of the "
            f"{C} channels of {names[0]} ({m.reference_samples} samples) left at a time scale "
            f"{ratio:.4f}x off: the resampler ran along the channel axis of a (samples, channels) "
            f"clip (channels resampled, samples untouched), then the channels were mixed down.",
            {"layout": fit.layout, "channels": C, "length_ratio": round(ratio, 6),
             "mix_weights": list(fit.mix_weights), "hypothesis_snr_db": fit.hypothesis_snr_db,
             "mean_downmix_snr_db": fit.mean_downmix_snr_db,
             "reference_samples": m.reference_samples, "candidate_samples": m.candidate_samples},
            "Resample along the sample axis: (channels, samples) clips with axis=-1, or transpose "
            "a soundfile (samples, channels) array first (librosa.resample(x.T, ...)).",
            [0, fit.candidate_samples])
    ref_peak, cand_peak = fit.reference_peak_hz, fit.candidate_peak_hz
    how = "x.T.reshape(-1)" if fit.layout == "interleaved" else "x.reshape(-1)"
    octave = cand_peak > 0 and abs(ref_peak / cand_peak - ratio) < 0.05 * ratio
    return _finding(
        "channel.interleaved_flatten",
        f"{names[1]} is the {C}-channel {names[0]} flattened into mono as {how}: "
        f"{ratio:.2f}x the length, played {ratio:.2f}x slower"
        + (f" (spectral peak {cand_peak:.1f} Hz vs {ref_peak:.1f} Hz)." if octave else "."),
        {"channels": C, "layout": fit.layout, "length_ratio": round(ratio, 6),
         "reference_peak_hz": round(ref_peak, 1), "candidate_peak_hz": round(cand_peak, 1),
         "hypothesis_snr_db": fit.hypothesis_snr_db, "mean_downmix_snr_db": fit.mean_downmix_snr_db},
        "Mix (channels, samples) down with x.mean(0) (or serve the channels separately); "
        "never reshape a (C, T) tensor into C*T mono samples.", [0, fit.candidate_samples])


def run(ctx) -> list[Finding]:
    """The ``channel.*`` findings of the spec's decoded pair (or ``channel.ok`` / a skip).

    Parameters
    ----------
    ctx : CheckContext
        The run's context (spec, device, shared state).

    Returns
    -------
    list of Finding
    """
    from porting_kit.probes.codec_pair import get_audio_pair

    pair = get_audio_pair(ctx)
    if isinstance(pair, str):
        return [skip("channel", pair)]
    found = waveform_findings(pair.comparison)
    m = pair.comparison.metrics.as_dict()
    want = pair.comparison.form.served_channels if pair.comparison.form else 1
    served = ("mono 1-D float32 in [-1, 1] and matches the reference's channel mean" if want == 1
              else f"({want}, samples) float32 in [-1, 1] and matches the reference channel by channel")
    out = found or [ok("channel", "served output is " + served,
                       {k: m[k] for k in ("reference_channels", "candidate_channels",
                                          "candidate_peak") if k in m})]
    lengths = pair.comparison.metrics.lengths()
    for f in out:  # length first: every audio finding carries both lengths
        f.evidence = {**lengths, **f.evidence}
    return out
