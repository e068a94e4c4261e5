"""Waveform measurements of a reference and a candidate: the signal work behind the audio checks.

A TTS port is judged by its waveform. :func:`analyse_waveforms` measures how
two waveforms differ by trying the known fault hypotheses in order (each one
that fits is undone, so later steps compare what is left) and records each
fit as a typed fact (:class:`WaveformComparison`):

1. finite samples on both sides, and the candidate's raw form (shape, dtype,
   peak) for the served-output contract;
2. sample rate (:class:`SampleRateFit`): the reported rates differ; when the
   lengths follow the rates the candidate is resampled to the reference rate
   for the rest of the comparison;
3. channel layout (:class:`LayoutFit`, :class:`ChannelCounts`): a stereo
   reference against a mono candidate is compared with the channel mean
   (correct), the interleaved flatten ``x.T.reshape(-1)``, the channel-major
   concatenation and each single channel;
4. time axis: a time-scaled candidate (:class:`DriftFit`, tried by resampling
   the reference to the candidate's length), a lag found by cross-correlation
   (:class:`OffsetFit`), a length difference with a matching common prefix
   (:class:`LengthFit`);
5. what is left: SNR / SI-SDR / log-mel distance of the aligned overlap
   (:class:`AudioMetrics`).

This module measures and never judges: the ``hop`` and ``channel`` check
families (:mod:`porting_kit.checks.hop`, :mod:`porting_kit.checks.channel`)
turn the facts into findings; :func:`porting_kit.audio_files.compare_files`
composes the two for the ``porting-kit audio`` command.

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

#: A structural hypothesis (layout, drift, offset, prefix) "fits" when the candidate
#: matches the transformed reference at least this well (dB SNR).
HYPOTHESIS_SNR_DB = 20.0
#: Content tolerance of a float32 decode of the same codes by two implementations (dB SNR).
FP32_MIN_SNR_DB = 60.0


# --------------------------------------------------------------------------- arrays


def as_channels_first(x: Any) -> np.ndarray:
    """A waveform as ``np.ndarray [shape=(channels, samples)]`` (float64 copy).

    Accepts numpy arrays or torch tensors of shape ``(samples,)``,
    ``(channels, samples)`` or ``(1, channels, samples)`` (a batch of one).
    A bfloat16 tensor is converted through float32.

    Parameters
    ----------
    x : np.ndarray or torch.Tensor [shape=(samples,), (channels, samples) or (1, channels, samples)]
        A waveform.

    Returns
    -------
    np.ndarray [shape=(channels, samples)], float64

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
    """``'float32'``, ``'bfloat16'``... of a numpy array or torch tensor.

    Parameters
    ----------
    x : np.ndarray, torch.Tensor or any object
        Anything; without a ``dtype`` attribute its type name is returned.

    Returns
    -------
    str
        The dtype without the ``torch.`` prefix.
    """
    return str(getattr(x, "dtype", type(x).__name__)).replace("torch.", "")


def snr_db(reference: np.ndarray, estimate: np.ndarray) -> float:
    """Signal-to-noise ratio of ``estimate`` against ``reference`` in dB.

    ``10 log10(sum(ref^2) / sum((ref - est)^2))`` over equal-shaped arrays;
    ``inf`` when they are identical, ``-inf`` for a silent reference.

    Parameters
    ----------
    reference, estimate : np.ndarray [shape=(..., samples)]
        Equal-shaped signals.

    Returns
    -------
    float
        dB.
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

    Parameters
    ----------
    reference, estimate : np.ndarray [shape=(..., samples)]
        Equal-sized signals (flattened).

    Returns
    -------
    float
        dB; ``inf`` when ``estimate`` is a scaled ``reference``, ``-inf`` for a silent reference.
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

    Parameters
    ----------
    reference, estimate : np.ndarray [shape=(samples,)]
        Mono signals; compared over their common prefix.
    sample_rate : int
        Hz.
    n_mels : int, default 64
        Mel bands (at most ``n_fft // 4``).

    Returns
    -------
    float
        dB; for fewer than 64 samples 0.0 when equal, else NaN.
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

    Parameters
    ----------
    x : np.ndarray [shape=(samples,)]
        A mono signal (flattened).
    sample_rate : float
        Hz.

    Returns
    -------
    float
        Hz; 0.0 for fewer than 4 samples.
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


def fmt_db(v: float, nd: int = 1) -> str:
    """A dB figure for a message: ``inf`` / ``-inf`` spelled out, else ``nd`` decimals.

    Parameters
    ----------
    v : float
        dB.
    nd : int, default 1
        Decimals.

    Returns
    -------
    str
    """
    return "inf" if v == math.inf else ("-inf" if v == -math.inf else f"{v:.{nd}f}")


# --------------------------------------------------------------------------- records


@dataclass
class AudioMetrics:
    """The numbers of one waveform comparison (``None``: not measured on this path).

    Lengths in samples, durations in seconds, rates in Hz, SNRs and distances
    in dB; the content figures are of the aligned overlap (after every
    hypothesis that fits has been undone).
    """

    reference_samples: int | None = None
    candidate_samples: int | None = None
    reference_channels: int | None = None
    candidate_channels: int | None = None
    reference_sample_rate: int | None = None
    candidate_sample_rate: int | None = None
    reference_seconds: float | None = None
    candidate_seconds: float | None = None
    hop_length: int | None = None
    frames: int | None = None
    #: max |x| of the candidate (its native layout).
    candidate_peak: float | None = None
    #: ``"mean=..., channel_0=..., interleaved=..."``: SNR (dB) of each channel-layout hypothesis.
    layout_snr_db: str | None = None
    #: the reference channel the candidate matches (a one-channel downmix).
    downmix_channel: int | None = None
    lag_samples: int | None = None
    lag_correlation: float | None = None
    snr_db: float | None = None
    si_sdr_db: float | None = None
    max_abs_diff: float | None = None
    compared_samples: int | None = None
    log_mel_distance_db: float | None = None
    analysis_seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The measured figures as a flat dict (fields left ``None`` are omitted)."""
        return {k: v for k, v in vars(self).items() if v is not None}

    def lengths(self) -> dict[str, Any]:
        """Both sides' lengths (samples) and rates (Hz): what every audio finding's evidence
        carries (fields left ``None`` are omitted)."""
        keys = ("reference_samples", "candidate_samples", "reference_sample_rate",
                "candidate_sample_rate")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}


@dataclass
class NonFinite:
    """NaN/Inf samples of one side: ``side`` (``"reference"``/``"candidate"``), their
    ``count`` and the first sample index (``first_index``, samples)."""

    side: str
    count: int
    first_index: int


@dataclass
class CandidateForm:
    """The candidate as handed over: ``shape`` and ``dtype`` of the raw object, ``peak``
    max |x|, whether it is a ``served`` output (the float32 contract applies) and how many
    channels the port declares it serves (``served_channels``: 1 = mono 1-D samples,
    C > 1 = ``(C, samples)``)."""

    shape: tuple
    dtype: str
    peak: float
    served: bool
    served_channels: int = 1


@dataclass
class AxisFit:
    """A multi-channel candidate whose channel and sample axes were confused.

    ``layout``: ``"transposed"`` (served ``(samples, channels)``, i.e. ``x.T``) or
    ``"reshaped"`` (a ``(samples, channels)`` array read as ``(channels, samples)`` with
    ``reshape(C, -1)``: each row holds interleaved samples). SNRs in dB of the hypothesis
    and of the candidate as given; ``channels`` C; shapes as handed over.
    """

    layout: str
    channels: int
    reference_shape: tuple
    candidate_shape: tuple
    hypothesis_snr_db: float
    given_snr_db: float


@dataclass
class MonoForStereo:
    """The port declares ``served_channels`` C > 1 but serves one channel.

    ``matches``: what the mono samples are (``"mean"``: the channel mean, ``"channel_k"``:
    one channel, ``""``: neither fits at ``HYPOTHESIS_SNR_DB``), with its SNR in dB.
    """

    served_channels: int
    reference_channels: int
    matches: str
    snr_db: float


@dataclass
class SampleRateFit:
    """The two sides report different rates (Hz); ``rate_ratio`` = candidate / reference
    rate, ``length_ratio`` = candidate / reference samples; ``resampled``: the lengths follow
    the rates (the candidate was resampled back to the reference rate before the other
    steps); ``same_length``: only the reported rate differs."""

    reference_sample_rate: int
    candidate_sample_rate: int
    rate_ratio: float
    length_ratio: float
    resampled: bool
    same_length: bool


@dataclass
class LayoutFit:
    """A multi-channel reference against a mono candidate: the layout that fits.

    ``layout``: ``"interleaved"`` (``x.T.reshape(-1)``), ``"channel_major"``
    (``x.reshape(-1)``), ``"first"`` (one channel, ``channel_used``) or
    ``"channel_axis_resampled"`` (a fixed mix, ``mix_weights``, of the channels at the time
    scale ``length_ratio`` off the reference's: a resampler run along the channel axis). SNRs in dB;
    ``length_ratio`` = candidate / reference samples; spectral peaks (Hz) of the
    reference mixdown and the candidate, measured for the two flattens.
    """

    layout: str
    channels: int
    candidate_samples: int
    length_ratio: float
    hypothesis_snr_db: float
    mean_downmix_snr_db: float
    channel_used: int | None = None
    reference_peak_hz: float | None = None
    candidate_peak_hz: float | None = None
    mix_weights: tuple[float, ...] | None = None


@dataclass
class ChannelCounts:
    """Channel counts that differ where no layout hypothesis applies (after a served mixdown)."""

    reference_channels: int
    candidate_channels: int


@dataclass
class DriftFit:
    """The candidate is the reference time-scaled by ``duration_ratio`` (candidate /
    reference samples, at ``sample_rate`` Hz); SNRs in dB of the time-scaled and the
    plain overlap."""

    duration_ratio: float
    reference_samples: int
    candidate_samples: int
    sample_rate: int
    hypothesis_snr_db: float
    unscaled_snr_db: float


@dataclass
class OffsetFit:
    """A constant lag found by cross-correlation: ``lag_samples`` (positive: the candidate
    is late), normalised ``correlation`` at that lag, SNRs in dB after and before the shift;
    ``sample_rate`` in Hz, ``hop_length`` in samples (or ``None``)."""

    lag_samples: int
    sample_rate: int
    hop_length: int | None
    correlation: float
    aligned_snr_db: float
    unaligned_snr_db: float


@dataclass
class LengthFit:
    """Lengths (samples) differ and the common prefix matches; ``frames`` and
    ``hop_length`` when known (the length rule ``frames * hop_length - d``)."""

    reference_samples: int
    candidate_samples: int
    sample_rate: int
    hop_length: int | None
    frames: int | None


@dataclass
class WaveformComparison:
    """The measurements of :func:`analyse_waveforms`: facts, no verdict.

    Attributes
    ----------
    metrics : AudioMetrics
        Lengths (samples, seconds), sample rates (Hz), channels, lag (samples),
        SNR / SI-SDR / log-mel distance (dB) of the aligned overlap.
    reference, candidate : np.ndarray [shape=(channels, samples)] or None
        The two signals as compared, after every fitting hypothesis was undone
        (candidate resampled / re-laid-out / shifted / trimmed), for plots.
        ``None`` when the values could not be compared (bad shape, NaN/Inf).
    sample_rate : int
        The rate of the aligned signals (the reference's), Hz.
    content_snr_db : float
        SNR of the aligned overlap, dB (``inf`` when identical or not measured).
    unusable_shape : tuple or None
        The candidate's shape when it is not a waveform (nothing else measured).
    nonfinite : list of NonFinite
        NaN/Inf samples per side (when any, nothing else is measured).
    form : CandidateForm or None
    sample_rate_fit, layout, axis, mono_for_stereo, channel_counts, drift, offset, length
        The hypotheses that fit, in the order tried (``None``: does not apply).
    """

    metrics: AudioMetrics = field(default_factory=AudioMetrics)
    reference: np.ndarray | None = None
    candidate: np.ndarray | None = None
    sample_rate: int = 0
    content_snr_db: float = math.inf
    unusable_shape: tuple | None = None
    nonfinite: list[NonFinite] = field(default_factory=list)
    form: CandidateForm | None = None
    sample_rate_fit: SampleRateFit | None = None
    layout: LayoutFit | None = None
    axis: AxisFit | None = None
    mono_for_stereo: MonoForStereo | None = None
    channel_counts: ChannelCounts | None = None
    drift: DriftFit | None = None
    offset: OffsetFit | None = None
    length: LengthFit | None = None

    def structural(self) -> list[str]:
        """Names of the structural hypotheses that fit (sample rate, channel layout, drift,
        offset, length): what explains the difference other than the samples' values."""
        names = ("sample_rate_fit", "layout", "axis", "mono_for_stereo", "drift", "offset", "length")
        return [n for n in names if getattr(self, n) is not None]


# --------------------------------------------------------------------------- analysis


def analyse_waveforms(reference: Any, candidate: Any, sr_ref: int, sr_cand: int, *,
                      hop_length: int | None = None, frames: int | None = None,
                      served: bool = False, served_channels: int = 1) -> WaveformComparison:
    """Measure how a candidate waveform differs from the reference, hypothesis by hypothesis.

    Parameters
    ----------
    reference, candidate : np.ndarray or torch.Tensor [shape=(samples,) or (channels, samples)]
        A leading batch of one is dropped. The reference is the HF model's
        native output.
    sr_ref, sr_cand : int
        Sample rates in Hz.
    hop_length : int, optional
        Codec hop in samples (product of its upsampling ratios).
    frames : int, optional
        Number of code frames decoded (with ``hop_length``: the length rule
        ``frames * hop_length - d``).
    served : bool
        The candidate is a served output: its raw shape and dtype are recorded
        for the served contract, and (``served_channels`` 1) a multi-channel
        candidate is compared through its channel mean (the mono mixdown).
    served_channels : int, default 1
        Channels the port declares it serves (served outputs and files alike): 1 = mono
        (for a served output: 1-D samples); C > 1 = a
        ``(C, samples)`` waveform compared channel by channel with a C-channel
        reference (after the axis hypotheses: ``x.T`` served, ``(samples, C)`` read
        with ``reshape(C, -1)``); a mono candidate then is a :class:`MonoForStereo`.

    Returns
    -------
    WaveformComparison
        The facts; the ``hop`` and ``channel`` check families
        (:mod:`porting_kit.checks.hop`, :mod:`porting_kit.checks.channel`)
        turn them into findings.

    Raises
    ------
    ValueError
        The reference is not ``(samples,)`` or ``(channels, samples)``.

    Notes
    -----
    Steps in order, each undoing what fits before the next: sample rate
    (resample when the lengths follow the rates), channel layout (mean,
    single channel, interleaved / channel-major flatten), time axis (drift
    by resampling, lag by cross-correlation, common prefix), then the content
    figures of the aligned overlap. A hypothesis fits when the transformed
    reference matches at ``HYPOTHESIS_SNR_DB`` (20 dB) or better.
    """
    t0 = time.perf_counter()
    cmp = WaveformComparison(sample_rate=int(sr_ref))
    raw_cand = candidate
    ref = as_channels_first(reference)
    try:
        cand = as_channels_first(candidate)
    except ValueError:
        cmp.unusable_shape = tuple(np.shape(candidate))
        return cmp
    if served_channels > 1:
        cand = _undo_axis(ref, cand, cmp)
    _record_sizes(cmp.metrics, ref, cand, sr_ref, sr_cand, hop_length, frames)

    # 1. finite samples (both sides); the served form.
    for side, arr in (("reference", ref), ("candidate", cand)):
        bad = ~np.isfinite(arr)
        if bad.any():
            cmp.nonfinite.append(NonFinite(side, int(bad.sum()), int(np.argmax(bad.any(axis=0)))))
    if cmp.nonfinite:
        return cmp  # values cannot be compared
    peak = float(np.max(np.abs(cand))) if cand.size else 0.0
    cmp.metrics.candidate_peak = peak
    cmp.form = CandidateForm(tuple(np.shape(raw_cand)), dtype_name(raw_cand), peak, bool(served),
                             int(served_channels))
    if served and cand.shape[0] > 1 and served_channels == 1:
        cand = cand.mean(axis=0, keepdims=True)  # compare the mixdown
    if served_channels > 1 and ref.shape[0] > 1 and cand.shape[0] == 1:
        cmp.mono_for_stereo = _mono_for_stereo(ref, cand, served_channels)
        ref = ref.mean(axis=0, keepdims=True)  # what is left to compare: the mixdown

    # 2. sample rate.
    if int(sr_ref) != int(sr_cand):
        cmp.sample_rate_fit = _sample_rate_fit(ref, cand, int(sr_ref), int(sr_cand))
        if cmp.sample_rate_fit.resampled:
            cand = _resample_to_length(cand, ref.shape[1])

    # 3. channel layout.
    if ref.shape[0] > 1 and cand.shape[0] == 1:
        cmp.layout = _channel_layout(ref, cand, sr_ref, cmp.metrics)
        layout = cmp.layout.layout if cmp.layout else "mean"
        if layout in ("interleaved", "channel_major", "channel_axis_resampled"):  # plot as served
            return _finish(cmp, ref.mean(axis=0, keepdims=True), cand, t0)
        ref = ref.mean(axis=0, keepdims=True) if layout != "first" else ref[[cmp.layout.channel_used]]
    elif ref.shape[0] != cand.shape[0]:
        cmp.channel_counts = ChannelCounts(ref.shape[0], cand.shape[0])
        if ref.shape[0] == 1:
            cand = cand.mean(axis=0, keepdims=True)
        else:
            ref, cand = ref.mean(axis=0, keepdims=True), cand.mean(axis=0, keepdims=True)

    # 4. time axis.
    ref, cand = _time_axis(ref, cand, int(sr_ref), cmp, hop_length, frames)

    # 5. content.
    _content(cmp, ref, cand, int(sr_ref))
    return _finish(cmp, ref, cand, t0)


def _undo_axis(ref: np.ndarray, cand: np.ndarray, cmp: WaveformComparison) -> np.ndarray:
    """Try the channel-axis hypotheses on a multi-channel reference; the candidate with the
    fitting one undone (records :class:`AxisFit`), else unchanged."""
    C, n = ref.shape
    if C < 2:
        return cand
    given = snr_db(ref, cand) if cand.shape == ref.shape else -math.inf
    hyps = {}
    if cand.shape == (n, C):
        hyps["transposed"] = (ref.T, cand.T)
    if cand.shape == (C, n):
        hyps["reshaped"] = (np.ascontiguousarray(ref.T).reshape(C, n),
                            np.ascontiguousarray(cand.reshape(-1).reshape(n, C).T))
    for layout, (h, undone) in hyps.items():
        s = snr_db(h, cand)
        if s >= HYPOTHESIS_SNR_DB and s > given + 6:
            cmp.axis = AxisFit(layout, C, tuple(ref.shape), tuple(cand.shape), s, given)
            return undone
    return cand


def _mono_for_stereo(ref: np.ndarray, cand: np.ndarray, served_channels: int) -> MonoForStereo:
    """What a mono candidate is, against a (C, n) reference that should be served as C channels."""
    hyps = {"mean": ref.mean(axis=0)} | {f"channel_{c}": ref[c] for c in range(ref.shape[0])}
    n = min(ref.shape[1], cand.shape[1])
    scores = {k: snr_db(h[:n], cand[0, :n]) for k, h in hyps.items()}
    best = max(scores, key=lambda k: scores[k])
    fits = scores[best] >= HYPOTHESIS_SNR_DB
    return MonoForStereo(int(served_channels), int(ref.shape[0]), best if fits else "",
                         float(scores[best]))


def _record_sizes(m: AudioMetrics, ref: np.ndarray, cand: np.ndarray, sr_ref: int, sr_cand: int,
                  hop_length: int | None, frames: int | None) -> None:
    m.reference_samples, m.candidate_samples = ref.shape[1], cand.shape[1]
    m.reference_channels, m.candidate_channels = ref.shape[0], cand.shape[0]
    m.reference_sample_rate, m.candidate_sample_rate = int(sr_ref), int(sr_cand)
    m.reference_seconds = round(ref.shape[1] / sr_ref, 6)
    m.candidate_seconds = round(cand.shape[1] / sr_cand, 6)
    if hop_length:
        m.hop_length = int(hop_length)
    if frames is not None:
        m.frames = int(frames)


def _sample_rate_fit(ref: np.ndarray, cand: np.ndarray, sr_ref: int, sr_cand: int) -> SampleRateFit:
    ratio_sr = sr_cand / sr_ref
    ratio_len = cand.shape[1] / max(ref.shape[1], 1)
    follows = abs(ratio_len - ratio_sr) < 0.01 * ratio_sr and abs(ratio_sr - 1) > 0.005
    return SampleRateFit(sr_ref, sr_cand, ratio_sr, ratio_len, bool(follows),
                         cand.shape[1] == ref.shape[1])


def _content(cmp: WaveformComparison, ref: np.ndarray, cand: np.ndarray, sr: int) -> None:
    """SNR / SI-SDR / max |diff| / log-mel distance of the aligned overlap."""
    n = min(ref.shape[1], cand.shape[1])
    r, c = ref[:, :n], cand[:, :n]
    m = cmp.metrics
    cmp.content_snr_db = m.snr_db = snr_db(r, c)
    m.si_sdr_db = si_sdr_db(r, c)
    m.max_abs_diff = float(np.max(np.abs(r - c))) if n else 0.0
    m.compared_samples = int(n)
    m.log_mel_distance_db = log_mel_distance(r.mean(axis=0), c.mean(axis=0), sr)


def _finish(cmp: WaveformComparison, ref: np.ndarray, cand: np.ndarray | None,
            t0: float) -> WaveformComparison:
    cmp.reference, cmp.candidate = ref, cand
    cmp.metrics.analysis_seconds = round(time.perf_counter() - t0, 4)
    return cmp


def _channel_layout(ref: np.ndarray, cand: np.ndarray, sr: int, m: AudioMetrics) -> LayoutFit | None:
    """Try the channel-layout hypotheses for a (C, n) reference and a mono candidate.

    Returns the layout that fits better than the channel mean (``None`` when the
    mean, the correct mixdown, fits best or nothing fits).
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
    m.layout_snr_db = ", ".join(f"{k}={fmt_db(v, 2)}" for k, v in scores.items())
    if best == "mean" or scores[best] < HYPOTHESIS_SNR_DB or scores[best] <= scores["mean"]:
        return _channel_axis_resampled(ref, c)
    fit = LayoutFit(layout=best, channels=C, candidate_samples=int(c.size),
                    length_ratio=c.size / ref.shape[1], hypothesis_snr_db=scores[best],
                    mean_downmix_snr_db=scores["mean"])
    if best in ("interleaved", "channel_major"):
        fit.reference_peak_hz = spectral_peak_hz(ref.mean(axis=0), sr)
        fit.candidate_peak_hz = spectral_peak_hz(c, sr)
        return fit
    fit.layout, fit.channel_used = "first", int(best.split("_")[1])
    m.downmix_channel = fit.channel_used
    return fit


def _channel_axis_resampled(ref: np.ndarray, c: np.ndarray) -> LayoutFit | None:
    """A (C, n) reference and a mono candidate of another length: is the candidate a fixed mix
    of the channels left at the source time scale (resampling run along the channel axis of a
    ``(samples, channels)`` clip, then a mixdown), with weights that are not the mean's?

    The reference's channels are time-scaled to the candidate's length (band-limited, for a
    reference length rounded by up to a sample: eighths tried) and the mix weights fitted by least
    squares; fits at
    ``HYPOTHESIS_SNR_DB`` and 6 dB better than the time-scaled channel mean.
    """
    C, nr = ref.shape
    nc = c.size
    if nc < 16 or abs(nc / nr - 1.0) <= 0.002:
        return None
    import librosa

    inner = slice(nc // 50, nc - nc // 50)
    best = None
    for j in sorted(range(-8, 9), key=abs):  # the reference's length was rounded: exact within +-1
        y = librosa.resample(np.ascontiguousarray(ref), orig_sr=8 * nr + j, target_sr=8 * nc)
        if y.shape[-1] < nc:
            continue
        scaled = y[:, :nc][:, inner]
        w, *_ = np.linalg.lstsq(scaled.T, c[inner], rcond=None)
        fit, mean = snr_db(w @ scaled, c[inner]), snr_db(scaled.mean(axis=0), c[inner])
        if best is None or fit > best[0]:
            best = (fit, mean, w)
        if fit >= HYPOTHESIS_SNR_DB + 20:
            break
    if best is None:
        return None
    fit, mean, w = best
    if fit < HYPOTHESIS_SNR_DB or fit <= mean + 6:
        return None
    return LayoutFit(layout="channel_axis_resampled", channels=C, candidate_samples=int(nc),
                     length_ratio=nc / nr, hypothesis_snr_db=fit, mean_downmix_snr_db=mean,
                     mix_weights=tuple(round(float(x), 4) for x in w))


def _time_axis(ref: np.ndarray, cand: np.ndarray, sr: int, cmp: WaveformComparison,
               hop: int | None, frames: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Drift, offset and length hypotheses; records those that fit, returns the aligned (ref, cand)."""
    nr, nc = ref.shape[1], cand.shape[1]
    n = min(nr, nc)
    if n == 0:
        if nr != nc:  # one side served no samples at all: a length fault, never a pass
            cmp.length = LengthFit(nr, nc, sr, hop, frames)
        return ref, cand
    direct = snr_db(ref[:, :n], cand[:, :n])
    if direct >= HYPOTHESIS_SNR_DB and nr == nc:
        return ref, cand
    stretched = _drift(ref, cand, sr, cmp)
    if stretched is not None:
        return stretched, cand
    # offset by cross-correlation.
    max_lag = min(n - 1, max(sr // 2, 2 * (hop or 0)))
    lag, peak = estimate_lag(ref.mean(axis=0), cand.mean(axis=0), max_lag)
    cmp.metrics.lag_samples, cmp.metrics.lag_correlation = lag, round(peak, 6)
    if lag != 0:
        if lag > 0:
            r2, c2 = ref, cand[:, lag:]
        else:
            r2, c2 = ref[:, -lag:], cand
        k = min(r2.shape[1], c2.shape[1])
        shifted = snr_db(r2[:, :k], c2[:, :k])
        if shifted >= HYPOTHESIS_SNR_DB and shifted > direct + 6:
            cmp.offset = OffsetFit(lag, sr, hop, peak, shifted, direct)
            orig_diff = nc - nr
            ref, cand = r2, c2
            nr, nc = ref.shape[1], cand.shape[1]
            n = min(nr, nc)
            if orig_diff in (0, lag):  # the length change is the shift itself
                return ref[:, :n], cand[:, :n]
    # length: common prefix matches, lengths differ.
    if nr != nc and snr_db(ref[:, :n], cand[:, :n]) >= HYPOTHESIS_SNR_DB:
        cmp.length = LengthFit(nr, nc, sr, hop, frames)
        return ref[:, :n], cand[:, :n]
    return ref, cand


def _drift(ref: np.ndarray, cand: np.ndarray, sr: int, cmp: WaveformComparison) -> np.ndarray | None:
    """The reference time-scaled to the candidate's length when that fits (else ``None``)."""
    nr, nc = ref.shape[1], cand.shape[1]
    ratio = nc / nr
    if abs(ratio - 1.0) <= 0.002:
        return None
    # two resamplers: a port's resampler is one or the other kind (band-limited / FFT)
    inner = slice(nc // 50, nc - nc // 50)
    tries = [_resample_to_length(ref, nc, meth) for meth in ("soxr_hq", "fft")]
    scores = [snr_db(t[:, inner], cand[:, inner]) for t in tries]
    stretched, s = max(zip(tries, scores), key=lambda ts: ts[1])
    n = min(nr, nc)
    prefix = snr_db(ref[:, :n], cand[:, :n])
    if s >= HYPOTHESIS_SNR_DB and s > prefix + 6:
        cmp.drift = DriftFit(ratio, nr, nc, sr, s, prefix)
        return stretched
    return None


# --------------------------------------------------------------------------- files


#: Longest file ``read_audio`` accepts, in seconds: the comparison and its plots stay bounded.
MAX_AUDIO_SECONDS = 300.0


def read_audio(path: str | Path) -> tuple[np.ndarray, int]:
    """Read a WAV/FLAC/OGG file with soundfile.

    Parameters
    ----------
    path : str or pathlib.Path
        The audio file.

    Returns
    -------
    y : np.ndarray [shape=(channels, samples)], float64
    sample_rate : int
        Hz.

    Raises
    ------
    InputError
        Missing, a directory, not a regular file (a FIFO is never opened), longer than
        :data:`MAX_AUDIO_SECONDS`, unreadable, corrupt or empty (one line naming the file).
    """
    import soundfile as sf

    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: audio file not found")
    if p.is_dir():
        raise InputError(f"{p}: is a directory; give an audio file (WAV/FLAC)")
    if not p.is_file():
        raise InputError(f"{p}: not a regular file (a FIFO, a device or a socket); give an audio file")
    try:
        info = sf.info(str(p))
    except Exception as exc:  # noqa: BLE001 - as below
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{p}: cannot read audio ({msg}); give a WAV or FLAC file") from exc
    if info.samplerate > 0 and info.frames / info.samplerate > MAX_AUDIO_SECONDS:
        raise InputError(f"{p}: {info.frames / info.samplerate:.0f} s of audio, over the "
                         f"{MAX_AUDIO_SECONDS:.0f} s cap of a file comparison; cut a clip first "
                         "(e.g. sox in.wav clip.wav trim 0 60)")
    try:
        data, sr = sf.read(str(p), dtype="float64", always_2d=True)
    except Exception as exc:  # noqa: BLE001 - soundfile raises LibsndfileError/RuntimeError/TypeError
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{p}: cannot read audio ({msg}); give a WAV or FLAC file") from exc
    if data.shape[0] == 0:
        raise InputError(f"{p}: audio file has no samples")
    return np.ascontiguousarray(data.T), int(sr)
