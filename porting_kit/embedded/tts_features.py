"""The tiny TTS's reference-audio features: a Whisper-style log-mel extractor and its torch port.

The reference (:func:`reference_features`) is computed in float64 with
``transformers.audio_utils`` (``mel_filter_bank`` with Slaney scale and norm, ``spectrogram``
with ``log_mel="log10"``), then Whisper's dynamic-range clamp and scaling:
``max(L, L.max() - 8)``, ``(L + 4) / 4``. The port (:func:`candidate_features`) is written as a
serving port writes it: float32 ``torch.stft`` + librosa's filter matrix + torch log. Both
resample the clip to :data:`SAMPLE_RATE` with ``scipy.signal.resample_poly``.

Planted faults (``porting-kit check --example tts:NAME --only features``):

* ``features_resample``: the port skips resampling (24 kHz samples read as 16 kHz);
* ``features_htk_mel``: the port's filters use the HTK mel scale (``htk=True``);
* ``features_mel_norm``: the port's filters have no Slaney area normalisation (``norm=None``);
* ``features_log_floor``: the port drops Whisper's dynamic-range clamp ``max(L, L.max() - 8)``;
* ``features_center``: the port frames with ``center=False`` (no ``n_fft / 2`` reflect padding).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

import numpy as np

FEATURE_VARIANTS = {
    "features_resample": "port's feature extractor skips resampling (24 kHz clip read as 16 kHz)",
    "features_htk_mel": "port's mel filters use the HTK mel scale (reference Slaney)",
    "features_mel_norm": "port's mel filters have no Slaney area normalisation (norm=None)",
    "features_log_floor": "port's log-mel drops Whisper's dynamic-range clamp max(L, L.max() - 8)",
    "features_center": "port frames with center=False (no n_fft/2 reflect padding)",
}

#: Extractor rate (Hz), FFT size and hop (samples at that rate), mel bins: Whisper's values.
SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
N_MELS = 80
#: Whisper's dynamic range of the log-mel (log10 units, i.e. 80 dB).
DYNAMIC_RANGE = 8.0


@dataclass
class FeatureFaults:
    """Fault knobs of :func:`candidate_features` (all off: the clean port)."""

    resample: bool = True
    htk: bool = False
    norm: str | None = "slaney"
    clamp: bool = True
    center: bool = True


def faults_for(variant: str | None) -> FeatureFaults:
    """The :class:`FeatureFaults` of a tts variant (clean for every non-features variant)."""
    return FeatureFaults(resample=variant != "features_resample", htk=variant == "features_htk_mel",
                         norm=None if variant == "features_mel_norm" else "slaney",
                         clamp=variant != "features_log_floor", center=variant != "features_center")


def _resample(waveform: np.ndarray, sample_rate: int, dtype) -> np.ndarray:
    """Polyphase resampling to :data:`SAMPLE_RATE` (identity when already there)."""
    from scipy.signal import resample_poly

    g = gcd(int(sample_rate), SAMPLE_RATE)
    return resample_poly(np.asarray(waveform, dtype), SAMPLE_RATE // g, int(sample_rate) // g).astype(dtype)


def reference_features(waveform, sample_rate: int) -> np.ndarray:
    """The reference processor's log-mel features (float64, ``transformers.audio_utils``).

    Parameters
    ----------
    waveform : np.ndarray [shape=(samples,)]
        Mono float in [-1, 1] at ``sample_rate``.
    sample_rate : int
        Hz; resampled to :data:`SAMPLE_RATE`.

    Returns
    -------
    np.ndarray [shape=(n_mels, frames)]
        ``frames = 1 + samples_16k // 160`` (centred frames), values about [-1, 1.5].
    """
    from porting_kit.adapters.torchaudio_guard import ensure_importable

    ensure_importable()
    from transformers.audio_utils import mel_filter_bank, spectrogram, window_function

    y = _resample(waveform, sample_rate, np.float64)
    fb = mel_filter_bank(N_FFT // 2 + 1, N_MELS, 0.0, SAMPLE_RATE / 2, SAMPLE_RATE,
                         norm="slaney", mel_scale="slaney")
    spec = spectrogram(y, window_function(N_FFT, "hann"), N_FFT, HOP_LENGTH, power=2.0,
                       mel_filters=fb, log_mel="log10", dtype=np.float64)
    spec = np.maximum(spec, spec.max() - DYNAMIC_RANGE)
    return (spec + 4.0) / 4.0


def candidate_features(waveform, sample_rate: int, faults: FeatureFaults | None = None):
    """The port's log-mel features (float32 torch).

    Parameters
    ----------
    waveform : np.ndarray [shape=(samples,)]
    sample_rate : int
        Hz.
    faults : FeatureFaults, optional
        Planted faults; default the clean port.

    Returns
    -------
    torch.Tensor [shape=(n_mels, frames)], float32
    """
    import librosa
    import torch

    f = faults or FeatureFaults()
    y = _resample(waveform, sample_rate, np.float32) if f.resample else np.asarray(waveform, np.float32)
    st = torch.stft(torch.from_numpy(y), N_FFT, HOP_LENGTH, window=torch.hann_window(N_FFT),
                    center=f.center, pad_mode="reflect", return_complex=True)
    fb = librosa.filters.mel(sr=SAMPLE_RATE, n_fft=N_FFT, n_mels=N_MELS, htk=f.htk, norm=f.norm)
    mel = torch.from_numpy(fb.astype(np.float32)) @ st.abs().pow(2)
    log = torch.clamp(mel, min=1e-10).log10()
    if f.clamp:
        log = torch.maximum(log, log.max() - DYNAMIC_RANGE)
    return (log + 4.0) / 4.0
