"""Waveform comparison of a reference and a candidate: the signal work behind the audio checks.

A TTS port is judged by its waveform. :func:`analyse_waveforms` compares two
waveforms and names what differs, by trying the known fault hypotheses in
order (each one that fits explains the difference, so later steps compare
what is left):

1. sample rate (``hop.sample_rate_mismatch``): the reported rates differ;
   when the lengths follow the rates the candidate is resampled to the
   reference rate for the rest of the comparison;
2. output contract (``channel.shape_contract``): finite samples, within
   [-1, 1]; for a served output also mono, 1-D, float32;
3. channel layout: a stereo reference against a mono candidate is compared
   with the channel mean (correct), the interleaved flatten
   ``x.T.reshape(-1)`` and the channel-major concatenation
   (``channel.interleaved_flatten``), and each single channel
   (``channel.wrong_downmix``);
4. time axis: a time-scaled candidate (``hop.duration_drift``, tried by
   resampling the reference to the candidate's length), a lag found by
   cross-correlation (``hop.offset``), a length difference with a matching
   common prefix (``hop.length_mismatch``);
5. what is left: SNR / SI-SDR / log-mel distance of the aligned overlap; a
   difference no hypothesis explains is ``hop.unexplained``.

:func:`compare_files` runs this on two audio files (the ``porting-kit audio``
command); the ``hop`` and ``channel`` check families run it on the spec's
decoded codes (:mod:`porting_kit.probes.codec_pair`).

Conventions: waveforms are ``np.ndarray [shape=(channels, samples)]`` float;
sample rates in Hz; lags in samples (positive: the candidate is late).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from porting_kit.errors import InputError
from porting_kit.report.findings import Finding, Report, Where, ok

#: A structural hypothesis (layout, drift, offset, prefix) "fits" when the candidate
#: matches the transformed reference at least this well (dB SNR).
HYPOTHESIS_SNR_DB = 20.0
#: Default content tolerance of two files (16-bit PCM files of one signal are > 60 dB apart).
FILE_MIN_SNR_DB = 40.0
#: Content tolerance of a float32 decode of the same codes by two implementations.
FP32_MIN_SNR_DB = 60.0


# --------------------------------------------------------------------------- arrays


def as_channels_first(x: Any) -> np.ndarray:
    """A waveform as ``np.ndarray [shape=(channels, samples)]`` (float64 copy).

    Accepts numpy arrays or torch tensors of shape ``(samples,)``,
    ``(channels, samples)`` or ``(1, channels, samples)`` (a batch of one).
    A bfloat16 tensor is converted through float32.

    Raises
    ------
    ValueError
        Any other shape.
    """
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        if str(x.dtype) in ("torch.bfloat16", "torch.float16"):
            x = x.float()
        x = x.numpy()
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 3 and a.shape[0] == 1:
        a = a[0]
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise ValueError(f"waveform must be (samples,) or (channels, samples), got shape {a.shape}")
    return a


def dtype_name(x: Any) -> str:
    """``'float32'``, ``'bfloat16'``... of a numpy array or torch tensor."""
    return str(getattr(x, "dtype", type(x).__name__)).replace("torch.", "")


def snr_db(reference: np.ndarray, estimate: np.ndarray) -> float:
    """Signal-to-noise ratio of ``estimate`` against ``reference`` in dB.

    ``10 log10(sum(ref^2) / sum((ref - est)^2))`` over equal-shaped arrays;
    ``inf`` when they are identical, ``-inf`` for a silent reference.
    """
    ref = np.asarray(reference, dtype=np.float64)
    err = float(np.sum((ref - np.asarray(estimate, dtype=np.float64)) ** 2))
    sig = float(np.sum(ref ** 2))
    if err == 0.0:
        return math.inf
    if sig == 0.0:
        return -math.inf
    return 10.0 * math.log10(sig / err)


def si_sdr_db(reference: np.ndarray, estimate: np.ndarray) -> float:
    """Scale-invariant signal-to-distortion ratio in dB (Le Roux et al., ICASSP 2019).

    ``s = <est, ref> ref / |ref|^2``; ``SI-SDR = 10 log10(|s|^2 / |est - s|^2)``.
    Insensitive to a gain error, unlike :func:`snr_db`.
    """
    ref = np.asarray(reference, dtype=np.float64).ravel()
    est = np.asarray(estimate, dtype=np.float64).ravel()
    denom = float(np.dot(ref, ref))
    if denom == 0.0:
        return -math.inf
    target = np.dot(est, ref) / denom * ref
    noise = float(np.sum((est - target) ** 2))
    if noise == 0.0:
        return math.inf
    return 10.0 * math.log10(max(float(np.sum(target ** 2)), 1e-300) / noise)


def log_mel_distance(reference: np.ndarray, estimate: np.ndarray, sample_rate: int,
                     n_mels: int = 64) -> float:
    """Mean absolute difference of the two log-mel spectrograms, in dB.

    ``librosa.feature.melspectrogram`` (n_fft 1024 or shorter for short
    signals, hop n_fft/4) on mono signals of equal length, each converted with
    ``librosa.power_to_db(ref=1.0, amin=1e-10)``.
    """
    import librosa

    ref = np.asarray(reference, dtype=np.float32).ravel()
    est = np.asarray(estimate, dtype=np.float32).ravel()
    n = min(ref.size, est.size)
    if n < 64:
        return 0.0 if np.array_equal(ref[:n], est[:n]) else math.nan
    n_fft = min(1024, 1 << int(math.log2(n)))
    kw = dict(sr=sample_rate, n_fft=n_fft, hop_length=n_fft // 4, n_mels=min(n_mels, n_fft // 4))
    a = librosa.power_to_db(librosa.feature.melspectrogram(y=ref[:n], **kw), ref=1.0, amin=1e-10)
    b = librosa.power_to_db(librosa.feature.melspectrogram(y=est[:n], **kw), ref=1.0, amin=1e-10)
    return float(np.mean(np.abs(a - b)))


def estimate_lag(reference: np.ndarray, estimate: np.ndarray, max_lag: int) -> tuple[int, float]:
    """Lag of ``estimate`` behind ``reference`` by cross-correlation.

    Parameters
    ----------
    reference, estimate : np.ndarray [shape=(n,)], [shape=(m,)]
        Mono signals.
    max_lag : int
        Largest lag searched, in samples, both directions.

    Returns
    -------
    lag : int
        Samples; positive when ``estimate[t + lag] ~ reference[t]`` (the estimate is late).
    peak : float
        Correlation at that lag, normalised by both signals' energy (1.0 = identical shape).

    Notes
    -----
    ``scipy.signal.correlate(estimate, reference, method="fft")`` with
    ``scipy.signal.correlation_lags`` for the lag axis.
    """
    from scipy import signal

    ref = np.asarray(reference, dtype=np.float64)
    est = np.asarray(estimate, dtype=np.float64)
    if ref.size == 0 or est.size == 0:
        return 0, 0.0
    corr = signal.correlate(est, ref, mode="full", method="fft")
    lags = signal.correlation_lags(est.size, ref.size, mode="full")
    keep = np.abs(lags) <= max_lag
    corr, lags = corr[keep], lags[keep]
    i = int(np.argmax(corr))
    norm = math.sqrt(float(np.dot(ref, ref)) * float(np.dot(est, est))) or 1.0
    return int(lags[i]), float(corr[i] / norm)


def spectral_peak_hz(x: np.ndarray, sample_rate: float) -> float:
    """Frequency of the largest magnitude in the Hann-windowed spectrum, in Hz.

    Parabolic interpolation between the three bins around the peak (J. O.
    Smith, *Spectral Audio Signal Processing*, "Quadratic interpolation of
    spectral peaks"); DC excluded.
    """
    y = np.asarray(x, dtype=np.float64).ravel()
    if y.size < 4:
        return 0.0
    mag = np.abs(np.fft.rfft(y * np.hanning(y.size)))
    mag[0] = 0.0
    k = int(np.argmax(mag))
    if 0 < k < mag.size - 1:
        a, b, c = np.log(mag[k - 1:k + 2] + 1e-300)
        denom = a - 2 * b + c
        k = k + (0.5 * (a - c) / denom if denom != 0 else 0.0)
    return float(k * sample_rate / y.size)


def _resample_to_length(x: np.ndarray, n: int, method: str = "soxr_hq") -> np.ndarray:
    """``x`` (channels, m) resampled to ``n`` samples per channel.

    ``method``: ``"soxr_hq"`` (librosa's default band-limited resampler) or
    ``"fft"`` (``scipy.signal.resample``, periodic).
    """
    if x.shape[-1] == n:
        return x
    if method == "fft":
        from scipy import signal

        return signal.resample(x, n, axis=-1)
    import librosa

    y = librosa.resample(np.ascontiguousarray(x), orig_sr=x.shape[-1], target_sr=n, res_type=method)
    return y[..., :n] if y.shape[-1] >= n else np.pad(y, [(0, 0), (0, n - y.shape[-1])])


def _fmt(v: float, nd: int = 1) -> str:
    return "inf" if v == math.inf else ("-inf" if v == -math.inf else f"{v:.{nd}f}")


# --------------------------------------------------------------------------- analysis


@dataclass
class AudioComparison:
    """The result of :func:`analyse_waveforms`.

    Attributes
    ----------
    findings : list of Finding
        Faults found (``hop.*`` and ``channel.*``), empty when the two match.
    metrics : dict
        Flat numbers: lengths (samples, seconds), sample rates, channels, lag,
        SNR / SI-SDR / log-mel distance of the aligned overlap...
    reference, candidate : np.ndarray [shape=(channels, samples)]
        The two signals as compared, after the explained faults were undone
        (candidate resampled / re-laid-out / shifted / trimmed), for plots.
    sample_rate : int
        The rate of the aligned signals (the reference's), Hz.
    explained : bool
        True when every difference is explained by a finding or within tolerance.
    content_snr_db : float
        SNR of the aligned overlap, dB (``inf`` when identical).
    """

    findings: list[Finding] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    reference: np.ndarray | None = None
    candidate: np.ndarray | None = None
    sample_rate: int = 0
    explained: bool = True
    content_snr_db: float = math.inf


def _finding(code: str, message: str, evidence: dict[str, Any], hint: str,
             samples: list[int] | None = None, status: str = "fail") -> Finding:
    check = code.split(".", 1)[0]
    return Finding(check, code, status, message, evidence, Where(samples=samples), hint)


def analyse_waveforms(reference: Any, candidate: Any, sr_ref: int, sr_cand: int, *,
                      hop_length: int | None = None, frames: int | None = None,
                      served: bool = False, min_snr_db: float = FILE_MIN_SNR_DB,
                      names: tuple[str, str] = ("reference", "candidate")) -> AudioComparison:
    """Compare a candidate waveform with the reference and name what differs.

    Parameters
    ----------
    reference, candidate : np.ndarray or torch.Tensor
        ``(samples,)`` or ``(channels, samples)`` (a leading batch of one is
        dropped). The reference is the HF model's native output.
    sr_ref, sr_cand : int
        Sample rates in Hz.
    hop_length : int, optional
        Codec hop in samples (product of its upsampling ratios): lengths are
        also reported in frames.
    frames : int, optional
        Number of code frames decoded; with ``hop_length`` the length rule
        ``frames * hop_length - d`` is checked and the candidate's implied hop
        is reported.
    served : bool
        The candidate is a served output: it must be mono, 1-D, float32
        (``channel.shape_contract``) and a multi-channel reference is compared
        through its channel mean (the mono mixdown).
    min_snr_db : float
        The aligned overlap must reach this SNR, else ``hop.unexplained``
        (when no hypothesis explains the difference).
    names : (str, str)
        How the two sides are named in messages (file names for files).

    Returns
    -------
    AudioComparison
    """
    t0 = time.perf_counter()
    cmp = AudioComparison(sample_rate=int(sr_ref))
    rname, cname = names
    raw_cand = candidate
    ref = as_channels_first(reference)
    try:
        cand = as_channels_first(candidate)
    except ValueError:
        cmp.findings.append(_finding(
            "channel.shape_contract", f"{cname} has shape {tuple(np.shape(candidate))}; "
            "a waveform is (samples,) or (channels, samples).",
            {"shape": str(tuple(np.shape(candidate)))},
            "Return the served waveform as a 1-D float32 array of samples."))
        cmp.explained = True
        return cmp
    m = cmp.metrics
    m.update({"reference_samples": ref.shape[1], "candidate_samples": cand.shape[1],
              "reference_channels": ref.shape[0], "candidate_channels": cand.shape[0],
              "reference_sample_rate": int(sr_ref), "candidate_sample_rate": int(sr_cand),
              "reference_seconds": round(ref.shape[1] / sr_ref, 6),
              "candidate_seconds": round(cand.shape[1] / sr_cand, 6)})
    if hop_length:
        m["hop_length"] = int(hop_length)
    if frames is not None:
        m["frames"] = int(frames)

    # 1. output contract: finite and in range (both sides), served form.
    for side, arr, nm in (("reference", ref, rname), ("candidate", cand, cname)):
        bad = ~np.isfinite(arr)
        if bad.any():
            idx = int(np.argmax(bad.any(axis=0)))
            cmp.findings.append(_finding(
                "channel.shape_contract",
                f"{nm} has {int(bad.sum())} NaN/Inf samples (first at sample {idx}).",
                {"side": side, "nonfinite_samples": int(bad.sum()), "first_nonfinite": idx},
                "Find the first NaN upstream (porting-kit check reports parity.nan_origin); "
                "a served waveform must be finite.", [idx, idx + 1]))
    if any(f.code == "channel.shape_contract" for f in cmp.findings):
        return cmp  # values cannot be compared
    peak = float(np.max(np.abs(cand))) if cand.size else 0.0
    m["candidate_peak"] = peak
    contract: list[str] = []
    if served:
        shape = tuple(np.shape(raw_cand))
        if len(shape) != 1:
            contract.append(f"shape {shape} (must be 1-D mono samples)")
        if dtype_name(raw_cand) != "float32":
            contract.append(f"dtype {dtype_name(raw_cand)} (must be float32)")
    if peak > 1.0 + 1e-6:
        contract.append(f"peak |x| {peak:.3f} outside [-1, 1]")
    if contract:
        cmp.findings.append(_finding(
            "channel.shape_contract", f"{cname} breaks the output contract: " + "; ".join(contract) + ".",
            {"shape": str(tuple(np.shape(raw_cand))), "dtype": dtype_name(raw_cand), "peak": peak},
            "Serve mono 1-D float32 in [-1, 1]: squeeze the channel axis, mix stereo down by the "
            "channel mean, keep the codec output float32, clamp or rescale."))
    if served and cand.shape[0] > 1:
        cand = cand.mean(axis=0, keepdims=True)  # contract already reported; compare the mixdown

    # 2. sample rate.
    if int(sr_ref) != int(sr_cand):
        ratio_sr = sr_cand / sr_ref
        ratio_len = cand.shape[1] / max(ref.shape[1], 1)
        follows = abs(ratio_len - ratio_sr) < 0.01 * ratio_sr and abs(ratio_sr - 1) > 0.005
        cmp.findings.append(_finding(
            "hop.sample_rate_mismatch",
            f"{cname} is at {sr_cand} Hz, {rname} at {sr_ref} Hz"
            + (" (the samples were resampled to the new rate)." if follows
               else " (same samples, only the reported rate differs)." if cand.shape[1] == ref.shape[1]
               else "."),
            {"reference_sample_rate": int(sr_ref), "candidate_sample_rate": int(sr_cand),
             "rate_ratio": round(ratio_sr, 6), "length_ratio": round(ratio_len, 6),
             "resampled": bool(follows)},
            "Serve at the codec's sampling rate (its config's sampling_rate) or resample "
            "and report the rate you serve."))
        if follows:
            cand = _resample_to_length(cand, ref.shape[1])

    # 3. channel layout.
    if ref.shape[0] > 1 and cand.shape[0] == 1:
        cand, layout = _channel_layout(ref, cand, sr_ref, cmp, names)
        if layout in ("interleaved", "channel_major"):  # nothing left to align: plot as served
            return _finish(cmp, ref.mean(axis=0, keepdims=True), cand, t0)
        ref = ref.mean(axis=0, keepdims=True) if layout != "first" else ref[[int(m["downmix_channel"])]]
    elif ref.shape[0] == 1 and cand.shape[0] > 1:
        cmp.findings.append(_finding(
            "channel.shape_contract",
            f"{cname} has {cand.shape[0]} channels, {rname} has 1.",
            {"reference_channels": 1, "candidate_channels": cand.shape[0]},
            "Serve the codec's channel count; mix down by the channel mean when a mono output is served."))
        cand = cand.mean(axis=0, keepdims=True)
    elif ref.shape[0] != cand.shape[0]:
        cmp.findings.append(_finding(
            "channel.shape_contract", f"{cname} has {cand.shape[0]} channels, {rname} {ref.shape[0]}.",
            {"reference_channels": ref.shape[0], "candidate_channels": cand.shape[0]},
            "Keep the reference's channel layout."))
        ref, cand = ref.mean(axis=0, keepdims=True), cand.mean(axis=0, keepdims=True)

    # 4. time axis.
    ref, cand = _time_axis(ref, cand, int(sr_ref), cmp, names, hop_length, frames)

    # 5. content.
    n = min(ref.shape[1], cand.shape[1])
    r, c = ref[:, :n], cand[:, :n]
    cmp.content_snr_db = snr_db(r, c)
    m.update({"snr_db": cmp.content_snr_db, "si_sdr_db": si_sdr_db(r, c),
              "max_abs_diff": float(np.max(np.abs(r - c))) if n else 0.0,
              "compared_samples": int(n)})
    m["log_mel_distance_db"] = log_mel_distance(r.mean(axis=0), c.mean(axis=0), int(sr_ref))
    cmp.explained = cmp.content_snr_db >= min_snr_db
    if not cmp.explained and not cmp.findings:
        cmp.findings.append(_unexplained(cmp, min_snr_db, names))
    return _finish(cmp, ref, cand, t0)


def _unexplained(cmp: AudioComparison, min_snr_db: float, names: tuple[str, str]) -> Finding:
    m = cmp.metrics
    return _finding(
        "hop.unexplained",
        f"{names[1]} differs from {names[0]} (SNR {_fmt(cmp.content_snr_db)} dB, SI-SDR "
        f"{_fmt(m['si_sdr_db'])} dB, log-mel distance {_fmt(m['log_mel_distance_db'], 2)} dB) and no "
        "audio hypothesis fits (sample rate, layout, drift, offset, length).",
        {k: m[k] for k in ("snr_db", "si_sdr_db", "log_mel_distance_db", "max_abs_diff",
                           "compared_samples") if k in m} | {"min_snr_db": min_snr_db},
        "Compare the decoder layer by layer (porting-kit check on a spec) to find where the codec "
        "output diverges: weight conversion, normalisation, codes.")


def _finish(cmp: AudioComparison, ref: np.ndarray, cand: np.ndarray | None, t0: float) -> AudioComparison:
    cmp.reference, cmp.candidate = ref, cand
    cmp.metrics["analysis_seconds"] = round(time.perf_counter() - t0, 4)
    return cmp


def _channel_layout(ref: np.ndarray, cand: np.ndarray, sr: int, cmp: AudioComparison,
                    names: tuple[str, str]) -> tuple[np.ndarray, str]:
    """Try the channel-layout hypotheses for a (C, n) reference and a mono candidate.

    Returns the candidate (unchanged) and the layout that fits best:
    ``mean`` (correct), ``interleaved``, ``channel_major``, ``first`` (one channel).
    """
    c = cand[0]
    C = ref.shape[0]
    # Order breaks ties: the correct mixdown first, then one channel, then the flattens.
    hyps = {"mean": ref.mean(axis=0)}
    for ch in range(C):
        hyps[f"channel_{ch}"] = ref[ch]
    hyps["interleaved"] = ref.T.reshape(-1)
    if c.size > ref.shape[1]:  # a channel-major prefix of n samples is just channel 0
        hyps["channel_major"] = ref.reshape(-1)
    scores = {}
    for name, h in hyps.items():
        n = min(h.size, c.size)
        scores[name] = snr_db(h[:n], c[:n]) if n else -math.inf
    best = max(scores, key=lambda k: scores[k])  # first of equal scores wins
    m = cmp.metrics
    m["layout_snr_db"] = ", ".join(f"{k}={_fmt(v, 2)}" for k, v in scores.items())
    ratio = c.size / ref.shape[1]
    if best == "mean" or scores[best] < HYPOTHESIS_SNR_DB or scores[best] <= scores["mean"]:
        return cand, "mean"
    if best in ("interleaved", "channel_major"):
        ref_peak = spectral_peak_hz(ref.mean(axis=0), sr)
        cand_peak = spectral_peak_hz(c, sr)
        how = "x.T.reshape(-1)" if best == "interleaved" else "x.reshape(-1)"
        cmp.findings.append(_finding(
            "channel.interleaved_flatten",
            f"{names[1]} is the {C}-channel {names[0]} flattened into mono as {how}: "
            f"{ratio:.2f}x the length, played {ratio:.2f}x slower"
            + (f" (spectral peak {cand_peak:.1f} Hz vs {ref_peak:.1f} Hz)." if cand_peak > 0
               and abs(ref_peak / cand_peak - ratio) < 0.05 * ratio else "."),
            {"channels": C, "layout": best, "length_ratio": round(ratio, 6),
             "reference_peak_hz": round(ref_peak, 1), "candidate_peak_hz": round(cand_peak, 1),
             "hypothesis_snr_db": scores[best], "mean_downmix_snr_db": scores["mean"]},
            "Mix (channels, samples) down with x.mean(0) (or serve the channels separately); "
            "never reshape a (C, T) tensor into C*T mono samples.", [0, int(c.size)]))
        return cand, best
    ch = int(best.split("_")[1])
    m["downmix_channel"] = ch
    cmp.findings.append(_finding(
        "channel.wrong_downmix",
        f"{names[1]} is channel {ch} of the {C}-channel {names[0]}, not the channel mean.",
        {"channels": C, "channel_used": ch, "hypothesis_snr_db": scores[best],
         "mean_downmix_snr_db": scores["mean"]},
        "Mix down with x.mean(dim=channel_axis), not x[0] / x[:, 0]."))
    return cand, "first"


def _time_axis(ref: np.ndarray, cand: np.ndarray, sr: int, cmp: AudioComparison,
               names: tuple[str, str], hop: int | None, frames: int | None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Drift, offset and length hypotheses; returns the aligned (ref, cand)."""
    m = cmp.metrics
    rname, cname = names
    nr, nc = ref.shape[1], cand.shape[1]
    n = min(nr, nc)
    if n == 0:
        return ref, cand
    direct = snr_db(ref[:, :n], cand[:, :n])
    if direct >= HYPOTHESIS_SNR_DB and nr == nc:
        return ref, cand
    # duration drift: candidate == reference time-scaled to the candidate's length.
    ratio = nc / nr
    if abs(ratio - 1.0) > 0.002:
        # two resamplers: a port's resampler is one or the other kind (band-limited / FFT)
        inner = slice(nc // 50, nc - nc // 50)
        tries = [_resample_to_length(ref, nc, meth) for meth in ("soxr_hq", "fft")]
        scores = [snr_db(t[:, inner], cand[:, inner]) for t in tries]
        stretched, s = max(zip(tries, scores), key=lambda ts: ts[1])
        prefix = snr_db(ref[:, :n], cand[:, :n])
        if s >= HYPOTHESIS_SNR_DB and s > prefix + 6:
            cmp.findings.append(_finding(
                "hop.duration_drift",
                f"{cname} is {rname} time-scaled by {ratio:.4f} ({nc} vs {nr} samples at "
                f"{sr} Hz): it plays {100 * (1 / ratio - 1):+.2f}% fast and drifts "
                f"{abs(nc - nr)} samples by the end.",
                {"duration_ratio": round(ratio, 6), "reference_samples": nr, "candidate_samples": nc,
                 "drift_samples": nc - nr, "implied_sample_rate": round(sr * ratio, 1),
                 "hypothesis_snr_db": s, "unscaled_snr_db": prefix},
                "The candidate resamples or stretches the codec output: serve the decoder's samples "
                "at its own sampling_rate, or resample from the rate the samples really have."))
            return stretched, cand
    # offset by cross-correlation.
    max_lag = min(n - 1, max(sr // 2, 2 * (hop or 0)))
    lag, peak = estimate_lag(ref.mean(axis=0), cand.mean(axis=0), max_lag)
    m["lag_samples"], m["lag_correlation"] = lag, round(peak, 6)
    if lag != 0:
        if lag > 0:
            r2, c2 = ref, cand[:, lag:]
        else:
            r2, c2 = ref[:, -lag:], cand
        k = min(r2.shape[1], c2.shape[1])
        shifted = snr_db(r2[:, :k], c2[:, :k])
        if shifted >= HYPOTHESIS_SNR_DB and shifted > direct + 6:
            cmp.findings.append(_finding(
                "hop.offset",
                f"{cname} is {abs(lag)} samples ({1000 * abs(lag) / sr:.2f} ms) "
                f"{'late' if lag > 0 else 'early'} against {rname}"
                + (f" ({lag / hop:.2f} hops)." if hop else "."),
                {"lag_samples": lag, "lag_ms": round(1000 * lag / sr, 3),
                 "lag_hops": round(lag / hop, 4) if hop else "", "correlation": round(peak, 6),
                 "aligned_snr_db": shifted, "unaligned_snr_db": direct},
                "Remove the extra leading samples (or the missing ones): check the decoder's "
                "left padding/trim and any pre-roll or warm-up frames the port adds.",
                [0, abs(lag)]))
            orig_diff = nc - nr
            ref, cand = r2, c2
            nr, nc = ref.shape[1], cand.shape[1]
            n = min(nr, nc)
            if orig_diff in (0, lag):  # the length change is the shift itself
                return ref[:, :n], cand[:, :n]
    # length: common prefix matches, lengths differ.
    if nr != nc:
        prefix = snr_db(ref[:, :n], cand[:, :n])
        if prefix >= HYPOTHESIS_SNR_DB:
            ev: dict[str, Any] = {"reference_samples": nr, "candidate_samples": nc,
                                  "difference_samples": nc - nr,
                                  "difference_seconds": round((nc - nr) / sr, 6)}
            extra = ""
            if hop:
                ev["difference_hops"] = round((nc - nr) / hop, 4)
                extra = f" = {(nc - nr) / hop:+.2f} hops of {hop}"
            if hop and frames:
                ev["expected_samples"] = nr
                ev["trim_d"] = frames * hop - nr
                ev["implied_hop"] = round(nc / frames, 3)
                extra += (f"; {frames} frames x hop {hop} - d {frames * hop - nr} = {nr} expected, "
                          f"the candidate's length implies hop {nc / frames:.2f}")
            cmp.findings.append(_finding(
                "hop.length_mismatch",
                f"{cname} has {nc} samples, {rname} {nr} ({nc - nr:+d}{extra}); the common "
                "part matches.", ev,
                "Compute the output length as frames * hop_length (product of the codec's "
                "upsampling ratios) minus the codec's own trim; do not trim or pad by hand.",
                [n, max(nr, nc)]))
            return ref[:, :n], cand[:, :n]
    return ref, cand


# --------------------------------------------------------------------------- files


def read_audio(path: str | Path) -> tuple[np.ndarray, int]:
    """Read a WAV/FLAC/OGG file with soundfile.

    Returns
    -------
    y : np.ndarray [shape=(channels, samples)], float64
    sample_rate : int
        Hz.

    Raises
    ------
    InputError
        Missing, a directory, unreadable, corrupt or empty (one line naming the file).
    """
    import soundfile as sf

    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: audio file not found")
    if p.is_dir():
        raise InputError(f"{p}: is a directory; give an audio file (WAV/FLAC)")
    try:
        data, sr = sf.read(str(p), dtype="float64", always_2d=True)
    except Exception as exc:  # noqa: BLE001 - soundfile raises LibsndfileError/RuntimeError/TypeError
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{p}: cannot read audio ({msg}); give a WAV or FLAC file") from exc
    if data.shape[0] == 0:
        raise InputError(f"{p}: audio file has no samples")
    return np.ascontiguousarray(data.T), int(sr)


def compare_waveforms(ref: Any, cand: Any, sr_ref: int, sr_cand: int, hop_length: int | None = None,
                      **kwargs: Any) -> list[Finding]:
    """Findings of :func:`analyse_waveforms` (``hop.*`` and ``channel.*``), empty when they match.

    Parameters are those of :func:`analyse_waveforms`.
    """
    return analyse_waveforms(ref, cand, sr_ref, sr_cand, hop_length=hop_length, **kwargs).findings


def compare_files(ref_path: str | Path, cand_path: str | Path, *, hop_length: int | None = None,
                  sample_rate: int | None = None, plot: str | Path | None = None,
                  min_snr_db: float = FILE_MIN_SNR_DB) -> Report:
    """Compare two audio files: length, sample rate, channels, lag, SNR, log-mel distance.

    Parameters
    ----------
    ref_path, cand_path : str or Path
        Reference and candidate audio (any format soundfile reads: WAV, FLAC, OGG).
    hop_length : int, optional
        Codec hop in samples; lengths are also reported in hops.
    sample_rate : int, optional
        Expected sample rate in Hz; a file at another rate is
        ``hop.sample_rate_mismatch``.
    plot : str or Path, optional
        Write a PNG with the waveforms overlaid and the spectrogram difference.
    min_snr_db : float
        Content tolerance of the aligned overlap (default 40 dB).

    Returns
    -------
    Report
        Command ``audio``; families ``hop`` and ``channel`` (one ``<prefix>.ok``
        each when nothing was found). ``report.extras["comparison"]`` holds the
        :class:`AudioComparison`. Exit code 1 on a fault (a sample-rate mismatch
        between two readable files, NaN samples...).

    Raises
    ------
    InputError
        Missing, unreadable, corrupt or empty file (exit 2).
    """
    t0 = time.perf_counter()
    ref, sr_r = read_audio(ref_path)
    cand, sr_c = read_audio(cand_path)
    t_read = time.perf_counter() - t0
    cmp = analyse_waveforms(ref, cand, sr_r, sr_c, hop_length=hop_length, min_snr_db=min_snr_db,
                            names=(Path(ref_path).name, Path(cand_path).name))
    if sample_rate is not None:
        for nm, sr in ((ref_path, sr_r), (cand_path, sr_c)):
            if sr != sample_rate:
                cmp.findings.append(_finding(
                    "hop.sample_rate_mismatch", f"{Path(nm).name} is at {sr} Hz, expected {sample_rate} Hz.",
                    {"file": str(nm), "sample_rate": sr, "expected_sample_rate": int(sample_rate)},
                    "Write the audio at the codec's sampling_rate."))
    report = Report(command="audio")
    for fam in ("hop", "channel"):
        fs = [f for f in cmp.findings if f.check == fam]
        report.findings.extend(fs or [ok(fam, evidence=_ok_evidence(cmp.metrics))])
    if plot is not None:
        from porting_kit.report.plots import save_audio_comparison

        save_audio_comparison(cmp, plot)
    report.timing = {"read": t_read, "total": time.perf_counter() - t0}
    report.extras["comparison"] = cmp
    return report


def _ok_evidence(metrics: dict[str, Any]) -> dict[str, Any]:
    keys = ("reference_samples", "candidate_samples", "reference_sample_rate", "snr_db",
            "si_sdr_db", "log_mel_distance_db", "lag_samples")
    return {k: metrics[k] for k in keys if k in metrics}
