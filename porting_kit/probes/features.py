"""Reference-audio feature facts: the candidate's log-mel features of a clip against the reference's.

Spec names (README "Port spec: feature names"):

``reference_features(waveform, sample_rate) -> features``
    The reference processor's features (e.g. a transformers feature extractor after its
    resampling). ``waveform`` is a 1-D float32 numpy array in [-1, 1] ``[shape=(samples,)]``,
    ``sample_rate`` in Hz (the clip's rate, not the extractor's).
``candidate_features(waveform, sample_rate) -> features``
    The port's features of the same clip.
``feature_clip() -> (waveform, sample_rate)``, optional
    The clip; default the shipped ``reference_audio/speech_en_gb_24k.flac`` (24 kHz, 3.1 s).
``feature_layout``, optional
    ``"mels_frames"`` (default: features ``[shape=(n_mels, frames)]``) or ``"frames_mels"``
    (``[shape=(frames, n_mels)]``, transposed before comparing). A leading batch axis of size 1
    is dropped; a candidate whose shape is the reference's transposed is read transposed
    (the evidence says so).

:func:`compare_features` measures the two feature maps and, when they differ, tries the
hypotheses below in order; each is an exact reproduction test, never a guess from the size of
the error:

``source_rate``
    The time axis is scaled (frame counts differ by more than 3 %): the reference processor is
    run again telling it the clip has rate ``S'`` (``S' = sr * frames_ref / frames_cand`` and the
    common rates nearest it). At the extractor's own rate the reference does not resample, so a
    fit at that rate means "did not resample"; at another rate, "resampled from the wrong rate".
``time_offset``
    Frame counts differ by a few frames: the frames agree unshifted (frames added or dropped at
    the end), or the reference is run on the clip shifted by ``d``
    samples (``x[d:]``, or ``d`` zeros prepended), ``d`` a multiple of an eighth of a hop, and
    compared on the interior frames (``center=False`` against ``center=True`` fits at
    ``d = n_fft / 2``).
``edge_frames``
    Same shape; the entries beyond tolerance all lie in the first or last :data:`EDGE_FRAMES`
    frames (padding mode, window offset at the edges).
``floor_only``
    Same shape; every entry beyond tolerance sits at the floor (the minimum) of one side: a
    different log floor/clamp (``log(max(x, 1e-5))`` against ``1e-10``, a dynamic-range clamp
    ``max(x, x.max() - 8)`` present on one side only).
``log_affine``
    Same shape; off the floors, ``cand = a * ref + b`` with ``(a, b) != (1, 0)``: another log
    base (``a = ln 10`` for ln where log10) or scaling of the log.
``per_bin_offset``
    Same shape; off the floors, ``cand - ref`` is constant along time within each mel bin but
    differs between bins: a per-filter gain (``norm="slaney"`` area normalisation on one side only).
``filter_centres``
    A logarithmic chirp is run through both extractors; the frame where each mel bin peaks gives
    the bin's centre frequency on each side. Centres that differ mean another mel scale
    (Slaney against HTK); each side's centres are matched to the Slaney, HTK and Kaldi scales
    (``transformers.audio_utils.hertz_to_mel``) to name them.
``resampler``
    Same shape; the reference fed the clip already resampled (to each common rate below the
    clip's) by another resampler (soxr, ``scipy.signal.resample_poly``, FFT ``resample``)
    reproduces the candidate: a legitimate but different resampling filter (a warning, not a fault
    of the port's logic; different resamplers differ by up to 0.3 on the top mel bin here).

Tolerance: ``FEATURE_TOL`` x the reference's value range, on the absolute error. Measured on
the shipped clip (Whisper-style log-mel, 80 bins, n_fft 400, hop 160 at 16 kHz): a float32
torch candidate (``torch.stft`` + librosa's filters) against the float64
``transformers.audio_utils`` reference has a max abs error of 3.9e-5 (99.9th percentile
1.4e-5) on a range of 2.0, i.e. 1.9e-5 of the range; :data:`FEATURE_TOL` is 1e-3 of the range
(50x margin). The planted faults are 0.47 or more.

Facts only; :mod:`porting_kit.checks.features` judges.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Allowed max abs error as a fraction of the reference's value range (max - min); see the module
#: docstring for the measured clean figure (1.9e-5 of the range).
FEATURE_TOL = 1e-3
#: Frames at each end that padding and resampling edges may disturb.
EDGE_FRAMES = 3
#: Sample rates tried for the ``source_rate`` hypothesis besides the frame-ratio estimate (Hz).
COMMON_RATES = (8000, 16000, 22050, 24000, 32000, 44100, 48000)
#: Frame counts differing by more than this fraction are a scaled time axis (not framing).
RATE_RATIO_SLACK = 0.03

FeatureFn = Callable[[np.ndarray, int], Any]


@dataclass
class Hypothesis:
    """One fault hypothesis tried against the candidate.

    Attributes
    ----------
    name : str
        ``source_rate``, ``time_offset``, ``edge_frames``, ``floor_only``, ``log_affine``,
        ``per_bin_offset``, ``filter_centres``.
    fits : bool
        The hypothesis reproduces the candidate within tolerance.
    detail : str
        What was tried and found, one phrase.
    error : float
        Max abs error of the hypothesis' reproduction (``nan`` when not a reproduction).
    evidence : dict
        Flat numbers and strings (assumed rate, offset in samples, fitted a/b, centres in Hz).
    """

    name: str
    fits: bool
    detail: str
    error: float = float("nan")
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class FeatureComparison:
    """Reference and candidate features of one clip, and the hypothesis that explains a mismatch.

    Attributes
    ----------
    reference_shape, candidate_shape : tuple of int
        ``(n_mels, frames)`` after layout handling.
    sample_rate : int
        The clip's rate (Hz); ``clip_samples`` its length.
    clip_samples : int
    tolerance : float
        Max abs error allowed (:data:`FEATURE_TOL` x the reference's range).
    max_abs_err, max_rel_err : float
        Over the common ``(n_mels, frames)`` overlap; ``inf`` when the candidate has NaN/Inf;
        ``max_rel_err`` is relative to the reference's range.
    worst_bin, worst_frame : int
        Where ``max_abs_err`` occurs.
    transposed : bool
        The candidate was read as ``(frames, n_mels)`` (its shape was the reference's transposed).
    nonfinite : int
        NaN/Inf entries in the candidate (no hypothesis is tried then).
    hypotheses : list of Hypothesis
        Those tried, in order; the last one fits when any does.
    """

    reference_shape: tuple[int, ...]
    candidate_shape: tuple[int, ...]
    sample_rate: int
    clip_samples: int
    tolerance: float
    max_abs_err: float
    max_rel_err: float
    worst_bin: int
    worst_frame: int
    transposed: bool = False
    nonfinite: int = 0
    hypotheses: list[Hypothesis] = field(default_factory=list)

    @property
    def matches(self) -> bool:
        """Same shape and max abs error within tolerance."""
        return self.reference_shape == self.candidate_shape and self.max_abs_err <= self.tolerance

    @property
    def fit(self) -> Hypothesis | None:
        """The first hypothesis that fits, or None."""
        return next((h for h in self.hypotheses if h.fits), None)


def default_clip() -> tuple[np.ndarray, int]:
    """The shipped speech clip ``reference_audio/speech_en_gb_24k.flac``.

    Returns
    -------
    waveform : np.ndarray [shape=(samples,)]
        float32 mono in [-1, 1] (75555 samples).
    sample_rate : int
        24000 Hz.
    """
    import soundfile as sf

    from porting_kit.resources import shipped

    wav, sr = sf.read(str(shipped("reference_audio") / "speech_en_gb_24k.flac"), dtype="float32")
    return (wav if wav.ndim == 1 else wav.mean(axis=1)).astype(np.float32), int(sr)


def as_feature_map(x: Any, layout: str = "mels_frames", source: str = "features") -> np.ndarray:
    """A feature output as float64 ``(n_mels, frames)``.

    Parameters
    ----------
    x : np.ndarray or torch.Tensor
        ``[shape=(n_mels, frames)]`` or ``(frames, n_mels)`` per ``layout``; leading axes of size 1
        are dropped.
    layout : {"mels_frames", "frames_mels"}
    source : str, default "features"
        Who returned ``x``, for the error (``"candidate_features(waveform, sample_rate)"``).

    Returns
    -------
    np.ndarray [shape=(n_mels, frames)], float64

    Raises
    ------
    ValueError
        Not 2-D after dropping size-1 leading axes, or an unknown layout.
    """
    if layout not in ("mels_frames", "frames_mels"):
        raise ValueError(f"feature_layout {layout!r}: use 'mels_frames' or 'frames_mels'")
    if hasattr(x, "detach"):
        x = x.detach().cpu().double().numpy()
    want = "expected (n_mels, frames) or (frames, n_mels), a 2-D feature map"
    if x is None or isinstance(x, (str, bytes, dict)):
        raise ValueError(f"{source} returned {'None' if x is None else 'a ' + type(x).__name__}: {want}")
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{source} returned a {type(x).__name__} that is not numeric: {want}") from None
    while a.ndim > 2 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 2:
        raise ValueError(f"{source} returned features of shape {tuple(np.shape(x))}: {want}")
    return a.T if layout == "frames_mels" else a


def _err(ref: np.ndarray, cand: np.ndarray) -> tuple[float, int, int]:
    """Max abs error over the common overlap and its (bin, frame); inf where NaN/Inf."""
    m, t = min(ref.shape[0], cand.shape[0]), min(ref.shape[1], cand.shape[1])
    d = np.abs(cand[:m, :t] - ref[:m, :t])
    d = np.where(np.isfinite(d), d, np.inf)
    if d.size == 0:
        return float("inf"), 0, 0
    i = int(np.argmax(d))
    b, f = divmod(i, t)
    return float(d.flat[i]), b, f


def compare_features(reference_fn: FeatureFn, candidate_fn: FeatureFn, waveform: np.ndarray,
                     sample_rate: int, layout: str = "mels_frames",
                     names: tuple[str, str] = ("reference_features", "candidate_features")
                     ) -> FeatureComparison:
    """Run both extractors on the clip, compare, and try the fault hypotheses on a mismatch.

    Parameters
    ----------
    reference_fn, candidate_fn : callable
        ``fn(waveform, sample_rate) -> features`` (the spec's ``reference_features`` /
        ``candidate_features``).
    waveform : np.ndarray [shape=(samples,)]
        float32 mono clip in [-1, 1].
    sample_rate : int
        The clip's rate in Hz.
    layout : {"mels_frames", "frames_mels"}
        Layout of both outputs (the spec's ``feature_layout``).
    names : (str, str)
        The two functions' names, for the error when one returns no feature map.

    Returns
    -------
    FeatureComparison

    Raises
    ------
    ValueError
        An output that is not a 2-D feature map, naming the function that returned it
        (the check turns it into exit 2).
    """
    ref = as_feature_map(reference_fn(waveform, sample_rate), layout, f"{names[0]}(waveform, sample_rate)")
    cand = as_feature_map(candidate_fn(waveform, sample_rate), layout, f"{names[1]}(waveform, sample_rate)")
    transposed = False
    if cand.shape != ref.shape and cand.shape[::-1] == ref.shape:
        cand, transposed = cand.T, True
    finite = ref[np.isfinite(ref)]
    span = float(finite.max() - finite.min()) if finite.size else 0.0
    tol = FEATURE_TOL * max(span, 1e-6)
    err, b, f = _err(ref, cand)
    cmp = FeatureComparison(ref.shape, cand.shape, int(sample_rate), int(len(waveform)), tol,
                            err, err / max(span, 1e-30), b, f, transposed,
                            int((~np.isfinite(cand)).sum()))
    if cmp.matches or ref.shape[0] != cand.shape[0] or not np.all(np.isfinite(cand)):
        return cmp
    ctx = _Ctx(reference_fn, candidate_fn, np.asarray(waveform, np.float32), int(sample_rate),
               layout, transposed, ref, cand, tol)
    for test in _hypotheses(ref, cand):
        h = test(ctx)
        if h is None:
            continue
        cmp.hypotheses.append(h)
        if h.fits:
            break
    return cmp


@dataclass
class _Ctx:
    reference_fn: FeatureFn
    candidate_fn: FeatureFn
    wav: np.ndarray
    sr: int
    layout: str
    transposed: bool
    ref: np.ndarray
    cand: np.ndarray
    tol: float

    def run_ref(self, wav: np.ndarray, sr: int) -> np.ndarray | None:
        """The reference on another input; None when it refuses it (an unsupported rate)."""
        try:
            return as_feature_map(self.reference_fn(wav, sr), self.layout)
        except Exception:  # noqa: BLE001 - a processor refusing a rate is a non-fit, not a crash
            return None

    def run_cand(self, wav: np.ndarray, sr: int) -> np.ndarray | None:
        try:
            out = as_feature_map(self.candidate_fn(wav, sr), self.layout)
        except Exception:  # noqa: BLE001
            return None
        return out.T if self.transposed else out


def _hypotheses(ref: np.ndarray, cand: np.ndarray) -> list[Callable[[_Ctx], Hypothesis | None]]:
    """The hypotheses that apply to these shapes, in the order they are tried."""
    fr, fc = ref.shape[1], cand.shape[1]
    if abs(fc / fr - 1) > RATE_RATIO_SLACK:
        return [_source_rate]
    if fc != fr:
        return [_time_offset]
    return [_edge_frames, _floor_only, _log_affine, _per_bin_offset, _filter_centres, _resampler]


def _source_rate(c: _Ctx) -> Hypothesis:
    fr, fc = c.ref.shape[1], c.cand.shape[1]
    est = c.sr * fr / fc
    rates = [int(round(est))] + sorted(COMMON_RATES, key=lambda r: abs(r - est))[:3]
    ev: dict[str, Any] = {"frame_ratio": fc / fr, "estimated_rate": round(est, 1)}
    best = (float("inf"), 0)
    for rate in dict.fromkeys(rates):
        if rate == c.sr:
            continue
        out = c.run_ref(c.wav, rate)
        if out is None or abs(out.shape[1] - fc) > 1 or out.shape[0] != c.cand.shape[0]:
            continue
        err = _err(out, c.cand)[0]
        if err < best[0]:
            best = (err, rate)
        if err <= c.tol:
            ev["assumed_rate"] = rate
            return Hypothesis("source_rate", True, f"the reference told the clip is at {rate} Hz "
                              f"(it is {c.sr} Hz) reproduces the candidate", err, ev)
    if best[1]:
        ev["closest_rate"] = best[1]
    return Hypothesis("source_rate", False, f"time axis scaled by {fc / fr:.4g}; no source rate tried "
                      f"({', '.join(map(str, dict.fromkeys(rates)))} Hz) reproduces the candidate",
                      best[0], ev)


def _time_offset(c: _Ctx) -> Hypothesis:
    fr, fc = c.ref.shape[1], c.cand.shape[1]
    hop = len(c.wav) / max(fr - 1, 1)  # the reference's hop in clip samples (approximately)
    step = max(1, int(round(hop / 8)))
    e, t = EDGE_FRAMES, min(fr, fc)
    if t > 2 * EDGE_FRAMES + 1:  # no shift: frames added or dropped at the end (Whisper's [:, :-1])
        err = _err(c.ref[:, e:t - e], c.cand[:, e:t - e])[0]
        if err <= c.tol:
            return Hypothesis("time_offset", True, f"the frames agree without a shift; the candidate has "
                              f"{fc - fr:+d} frames at the end", err,
                              {"offset_samples": 0, "frame_count_difference": fc - fr})
    best = (float("inf"), 0)
    for k in range(1, 17):
        for d in (k * step, -k * step):
            wav = c.wav[d:] if d > 0 else np.concatenate([np.zeros(-d, np.float32), c.wav])
            out = c.run_ref(wav, c.sr)
            if out is None or out.shape[0] != c.cand.shape[0]:
                continue
            t = min(out.shape[1], fc)
            if t <= 2 * EDGE_FRAMES + 1:
                continue
            err = _err(out[:, e:t - e], c.cand[:, e:t - e])[0]
            if err < best[0]:
                best = (err, d)
            if err <= c.tol:
                return Hypothesis("time_offset", True, f"the reference on the clip shifted by {d} samples "
                                  f"({d / hop:.3g} hops) reproduces the candidate's interior frames", err,
                                  {"offset_samples": d, "offset_hops": round(d / hop, 4),
                                   "hop_samples": round(hop, 2)})
    return Hypothesis("time_offset", False, f"frame count off by {fc - fr}; no shift of up to 2 hops "
                      "reproduces the candidate", best[0],
                      {"closest_offset_samples": best[1], "hop_samples": round(hop, 2)})


def _bad(c: _Ctx) -> np.ndarray:
    return ~(np.abs(c.cand - c.ref) <= c.tol)


def _edge_frames(c: _Ctx) -> Hypothesis | None:
    bad = _bad(c)
    frames = np.nonzero(bad.any(axis=0))[0]
    t, e = bad.shape[1], EDGE_FRAMES
    if t <= 2 * e or not np.all((frames < e) | (frames >= t - e)):
        return None
    return Hypothesis("edge_frames", True, f"only edge frames differ ({', '.join(map(str, frames))} of {t}); "
                      "the interior matches", _err(c.ref, c.cand)[0],
                      {"differing_frames": ", ".join(map(str, frames))})


def _floors(c: _Ctx) -> np.ndarray:
    """Entries at the floor (minimum) of either side."""
    return (c.ref <= c.ref.min() + c.tol) | (c.cand <= c.cand.min() + c.tol)


def _floor_only(c: _Ctx) -> Hypothesis:
    bad, floor = _bad(c), _floors(c)
    ev = {"reference_floor": float(c.ref.min()), "candidate_floor": float(c.cand.min()),
          "differing_entries": int(bad.sum()), "at_floor": int((bad & floor).sum())}
    fits = bool(bad.any() and not (bad & ~floor).any())
    return Hypothesis("floor_only", fits, f"{ev['at_floor']} of {ev['differing_entries']} differing entries "
                      "sit at the floor of one side", float("nan"), ev)


def _log_affine(c: _Ctx) -> Hypothesis | None:
    keep = ~_floors(c)
    if keep.sum() < 10:
        return None
    r, y = c.ref[keep], c.cand[keep]
    a, b = np.polyfit(r, y, 1)
    err = float(np.abs(a * r + b - y).max())
    # a log base or scale maps the reference's values onto the candidate's: a > 0, and the
    # candidate varies (a candidate constant off the floors - features cast to int - fits a = 0)
    varies = a > 0 and float(np.ptp(y)) > c.tol
    fits = varies and err <= c.tol and (abs(a - 1) > 1e-3 or abs(b) > c.tol)
    return Hypothesis("log_affine", bool(fits), f"off the floors cand = {a:.6g} * ref + {b:.6g} "
                      f"(residual {err:.3g})", err, {"scale": float(a), "offset": float(b),
                                                      "scale_over_ln10": float(a / np.log(10))})


def _per_bin_offset(c: _Ctx) -> Hypothesis | None:
    keep = ~_floors(c)
    d = c.cand - c.ref
    offs, spread = [], 0.0
    for m in range(d.shape[0]):
        v = d[m][keep[m]]
        if v.size == 0:
            continue
        offs.append(float(np.median(v)))
        spread = max(spread, float(np.abs(v - offs[-1]).max()))
    if len(offs) < 2:
        return None
    fits = spread <= c.tol and (max(offs) - min(offs)) > c.tol
    return Hypothesis("per_bin_offset", bool(fits), f"cand - ref is constant in time per mel bin "
                      f"(spread {spread:.3g}), offsets {min(offs):.4g} .. {max(offs):.4g} across bins",
                      spread, {"bin_offset_min": min(offs), "bin_offset_max": max(offs)})


def _resamplers() -> dict[str, Callable[[np.ndarray, int, int], np.ndarray]]:
    """Resamplers tried for the ``resampler`` hypothesis: name -> ``fn(waveform, sr_from, sr_to)``."""
    from math import gcd

    import librosa
    from scipy.signal import resample, resample_poly

    def poly(w, a, b):
        g = gcd(a, b)
        return resample_poly(w, b // g, a // g)

    return {"soxr_hq": lambda w, a, b: librosa.resample(w, orig_sr=a, target_sr=b, res_type="soxr_hq"),
            "scipy.resample_poly": poly,
            "scipy.resample (FFT)": lambda w, a, b: resample(w, int(round(len(w) * b / a)))}


def _resampler(c: _Ctx) -> Hypothesis | None:
    """The candidate equals the reference fed the clip resampled by another resampler."""
    best = (float("inf"), "", 0)
    for rate in COMMON_RATES:
        if rate >= c.sr:
            continue
        for name, fn in _resamplers().items():
            y = np.asarray(fn(c.wav.astype(np.float64), c.sr, rate), np.float32)
            out = c.run_ref(y, rate)
            if out is None or out.shape != c.cand.shape:
                break  # this rate is not the extractor's (or the processor refuses it)
            err = _err(out, c.cand)[0]
            if err < best[0]:
                best = (err, name, rate)
            if err <= c.tol:
                return Hypothesis("resampler", True, f"the reference fed the clip resampled to {rate} Hz "
                                  f"by {name} reproduces the candidate: the port resamples with another "
                                  "filter than the processor", err, {"resampler": name, "target_rate": rate})
    if not best[1]:
        return None
    return Hypothesis("resampler", False, f"no other resampler tried reproduces the candidate (closest "
                      f"{best[1]} at {best[2]} Hz, error {best[0]:.3g})", best[0])


def chirp(sample_rate: int, seconds: float = 4.0, f0: float = 30.0) -> tuple[np.ndarray, float, float]:
    """A logarithmic sine sweep from ``f0`` to 0.45 x ``sample_rate``.

    Returns
    -------
    waveform : np.ndarray [shape=(samples,)], float32, amplitude 0.5
    f0, f1 : float
        Start and end frequency in Hz; at time ``t`` s the frequency is ``f0 * (f1/f0)**(t/seconds)``.
    """
    from scipy.signal import chirp as sweep

    f1 = 0.45 * sample_rate
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    return (0.5 * sweep(t, f0, seconds, f1, method="logarithmic")).astype(np.float32), f0, f1


def _centres(feat: np.ndarray, n: int, sr: int, seconds: float, f0: float, f1: float) -> np.ndarray:
    """Each mel bin's centre frequency (Hz): the chirp frequency at the frame where the bin peaks."""
    t = np.argmax(feat, axis=1) * (n / sr) / max(feat.shape[1] - 1, 1)
    return f0 * (f1 / f0) ** (t / seconds)


def _scale_of(centres: np.ndarray) -> str:
    """The mel scale whose mel values of ``centres`` are most evenly spaced (linear in the bin):
    ``"slaney"`` or ``"htk"``. Kaldi's scale, ``1127 ln(1 + f/700)``, is HTK's ``2595 log10(1 + f/700)``
    times 1.000009, so the two cannot be told apart by spacing (which one won was float noise,
    platform-dependent): both are named ``"htk"``."""
    from porting_kit.adapters.torchaudio_guard import ensure_importable

    ensure_importable()
    from transformers.audio_utils import hertz_to_mel

    best, name = float("inf"), "unknown"
    idx = np.arange(len(centres))
    for scale in ("slaney", "htk"):
        mel = hertz_to_mel(np.maximum(centres, 1.0), mel_scale=scale)
        a, b = np.polyfit(idx, mel, 1)
        res = float(np.abs(a * idx + b - mel).max() / max(abs(a), 1e-12))  # in bins
        if res < best:
            best, name = res, scale
    return name


def _filter_centres(c: _Ctx) -> Hypothesis | None:
    seconds = 4.0
    wav, f0, f1 = chirp(c.sr, seconds)
    r, k = c.run_ref(wav, c.sr), c.run_cand(wav, c.sr)
    if r is None or k is None or r.shape != k.shape:
        return None
    rc = _centres(r, len(wav), c.sr, seconds, f0, f1)
    kc = _centres(k, len(wav), c.sr, seconds, f0, f1)
    ratio = np.abs(np.log(kc / rc))
    frame_step = np.log(f1 / f0) / max(r.shape[1] - 1, 1)  # log-frequency per frame
    moved = ratio > 3 * frame_step
    if moved.sum() < max(2, 0.1 * len(rc)):
        return Hypothesis("filter_centres", False, f"chirp peaks of {int(moved.sum())} of {len(rc)} mel bins "
                          "move: the filter centres agree", float("nan"))
    audible = (rc > 2 * f0) & (kc > 2 * f0)  # bins peaking at the sweep's start are degenerate
    w = int(np.argmax(np.where(audible, ratio, -1.0)))
    ev = {"moved_bins": int(moved.sum()), "worst_centre_bin": w,
          "reference_centre_hz": round(float(rc[w]), 1), "candidate_centre_hz": round(float(kc[w]), 1),
          "median_centre_ratio": round(float(np.median((kc / rc)[audible])), 4) if audible.any() else 1.0,
          "reference_mel_scale": _scale_of(rc[rc > 2 * f0]), "candidate_mel_scale": _scale_of(kc[kc > 2 * f0])}
    moved_text = (f"chirp peaks of {ev['moved_bins']} of {len(rc)} mel bins move (bin {w}: "
                  f"{ev['reference_centre_hz']} Hz in the reference, {ev['candidate_centre_hz']} Hz in the "
                  "candidate")
    if ev["reference_mel_scale"] == ev["candidate_mel_scale"]:
        # the peaks move, but not along another mel scale: quantised features (ties in argmax)
        # or another STFT size move them too; a filter-centre fault is not shown
        return Hypothesis("filter_centres", False, f"{moved_text}, median ratio {ev['median_centre_ratio']}) "
                          f"but both follow the {ev['reference_mel_scale']} mel scale", float("nan"), ev)
    return Hypothesis("filter_centres", True, f"{moved_text}; the reference follows the "
                      f"{ev['reference_mel_scale']} mel scale, the candidate {ev['candidate_mel_scale']})",
                      float("nan"), ev)
