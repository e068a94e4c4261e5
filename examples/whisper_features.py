"""Real feature pair: transformers ``WhisperFeatureExtractor`` (reference) vs a torch log-mel port (candidate).

The reference is the processor a Whisper-encoder TTS / ASR front end ships (80 mel bins, n_fft 400,
hop 160 at 16 kHz, Slaney filters, log10 floored at 1e-10, dynamic-range clamp to 8, last frame
dropped), called without padding to 30 s. The candidate is the embedded tiny TTS's torch extractor
(:mod:`porting_kit.embedded.tts_features`: ``torch.stft`` + librosa's filters) with Whisper's
``[:, :-1]``. Both get the clip resampled to 16 kHz with ``scipy.signal.resample_poly`` (the
processor refuses any other rate).

Run: ``porting-kit check examples/whisper_features.py --only features [--variant NAME]``.
Feature names: see README "Reference-audio features".
"""

from __future__ import annotations

VARIANTS = {
    "keep_last_frame": "port keeps the last frame Whisper drops (one frame more)",
    "htk_mel": "port's mel filters use the HTK mel scale (Whisper: Slaney)",
    "no_resample": "port skips resampling (the 24 kHz clip read as 16 kHz)",
    "no_clamp": "port drops Whisper's dynamic-range clamp max(L, L.max() - 8)",
}
VARIANT = None

_FE = {}


def _extractor():
    if "fe" not in _FE:
        from porting_kit.adapters.torchaudio_guard import ensure_importable

        ensure_importable()
        from transformers import WhisperFeatureExtractor

        _FE["fe"] = WhisperFeatureExtractor()  # the default config: 80 bins, 16 kHz
    return _FE["fe"]


def reference_features(waveform, sample_rate):
    """Whisper's log-mel of the clip, ``(80, frames)`` float32 (frames = samples_16k // 160)."""
    from porting_kit.embedded.tts_features import SAMPLE_RATE, _resample

    y = _resample(waveform, sample_rate, "float32")
    return _extractor()(y, sampling_rate=SAMPLE_RATE, return_tensors="np", padding="longest").input_features[0]


def candidate_features(waveform, sample_rate):
    """The torch port's log-mel, ``(80, frames)`` float32 tensor."""
    from porting_kit.embedded import tts_features as tf

    faults = tf.FeatureFaults(resample=VARIANT != "no_resample", htk=VARIANT == "htk_mel",
                              clamp=VARIANT != "no_clamp")
    out = tf.candidate_features(waveform, sample_rate, faults)
    return out if VARIANT == "keep_last_frame" else out[:, :-1]
