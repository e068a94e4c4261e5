"""A quality pair nobody here recorded: Debian's ``espeak-ng`` speaks the prompts.

A port spec for the ``quality`` family (and the fixtures of ``porting-kit quality``'s
tests and walkthrough 07): ``synthesize_reference(text, seed)`` and
``synthesize_candidate(text, seed)`` return ``(waveform, 22050)``; ``quality_prompts``
lists the prompts. espeak-ng is deterministic, so each take draws a small speed and
pitch jitter from its seed: the reference's own take-to-take spread is then a real
spread, like a sampled TTS's. The clean candidate draws its jitter from another
stream for the same seed (as a sampling port's RNG does), so it never copies a
reference take and must still pass.

``DETERMINISTIC = True`` makes the candidate draw its jitter from the reference's stream:
a port with sampling off (or the same RNG), each seed repeating the reference's take, so the
intrusive metrics (STOI, PESQ) can compare the two take by take.

Variants (planted degradations of the candidate; ``VARIANT``):

============== =====================================================  ==================
variant        what the candidate does                                code it must get
============== =====================================================  ==================
time_stretch   plays 25 % slower (``librosa.effects.time_stretch``)   ``quality.duration``
noise          white noise at 5 dB SNR                                ``quality.mcd``
seam_click     a click at every chunk seam (``CHUNK_SAMPLES``)        ``quality.seam``
other_voice    espeak's ``en-us+f4`` voice instead of ``en-us``       ``quality.speaker``
dropped_words  stops early: the last half of each prompt's words gone  ``quality.wer``
sample_rate    served at 16 kHz instead of 22.05 kHz                  ``quality.sample_rate``
============== =====================================================  ==================

Needs the ``espeak-ng`` program (``apt-get install -y espeak-ng``); without it the
functions raise :class:`~porting_kit.errors.InputError`.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from typing import Any

from porting_kit.errors import InputError

VARIANTS = {
    "time_stretch": "the candidate plays 25 % slower",
    "noise": "white noise at 5 dB SNR on every candidate take",
    "seam_click": "a click at every chunk seam of the candidate",
    "other_voice": "the candidate speaks with another espeak voice (en-us+f4)",
    "dropped_words": "the candidate stops early: the last half of each prompt's words are dropped",
    "sample_rate": "the candidate serves 16 kHz instead of 22.05 kHz",
}
VARIANT: str | None = None
#: True: the candidate repeats the reference's take of each seed (then ``VARIANT``'s fault).
DETERMINISTIC = False

#: The prompts both sides speak (``quality_prompts``: a spec name of the quality family).
quality_prompts = {
    "p01": "The quick brown fox jumps over the lazy dog.",
    "p02": "Please call Stella and ask her to bring these things with her from the store.",
    "p03": "A port is as good as its reference when a listener cannot tell them apart.",
}
#: Seeds of the takes (``quality_seeds``): take k uses seed k on both sides.
quality_seeds = [0, 1, 2]
#: The candidate's streaming chunk in samples at 22.05 kHz (0.25 s): where seams are.
CHUNK_SAMPLES = 5512
quality_chunk_samples = CHUNK_SAMPLES

SAMPLE_RATE = 22050
VOICE = "en-us"


def espeak_available() -> bool:
    """True when the ``espeak-ng`` program is on ``PATH``."""
    return shutil.which("espeak-ng") is not None


def espeak_say(text: str, *, voice: str = VOICE, words_per_minute: int = 165, pitch: int = 50) -> tuple[Any, int]:
    """Speak ``text`` with espeak-ng.

    Parameters
    ----------
    text : str
        Passed on standard input (never as an option).
    voice : str
        An espeak-ng voice (``en-us``, ``en-us+f4``...).
    words_per_minute : int
        ``-s``.
    pitch : int
        ``-p``, 0..99.

    Returns
    -------
    y : np.ndarray [shape=(samples,)], float32
    sample_rate : int
        22050 Hz.

    Raises
    ------
    InputError
        espeak-ng is absent or failed.
    """
    import io

    import numpy as np
    import soundfile as sf

    exe = shutil.which("espeak-ng")
    if exe is None:
        raise InputError("espeak-ng is not installed: apt-get install -y espeak-ng")
    proc = subprocess.run([exe, "--stdout", "-v", voice, "-s", str(int(words_per_minute)), "-p", str(int(pitch))],
                          input=text.encode("utf-8"), capture_output=True, timeout=60, check=False)
    if proc.returncode != 0 or not proc.stdout:
        raise InputError(f"espeak-ng failed ({proc.returncode}): {proc.stderr.decode(errors='replace').strip()}")
    y, sr = sf.read(io.BytesIO(proc.stdout), dtype="float32")
    return np.asarray(y, dtype=np.float32), int(sr)


def jittered_take(text: str, seed: int, *, stream: str = "reference", voice: str = VOICE) -> tuple[Any, int]:
    """One take: speed 165 +- 8 wpm and pitch 50 +- 5 drawn from ``(stream, seed)``."""
    rng = random.Random(f"{stream}:{int(seed)}")
    return espeak_say(text, voice=voice, words_per_minute=165 + rng.randint(-8, 8), pitch=50 + rng.randint(-5, 5))


def synthesize_reference(text: str, seed: int) -> tuple[Any, int]:
    """The reference's take of ``text`` for ``seed``: espeak-ng ``en-us``, jittered."""
    return jittered_take(text, seed, stream="reference")


def drop_last_half(text: str) -> str:
    """``text`` without the last half of its words (an early stop)."""
    words = text.split()
    return " ".join(words[: (len(words) + 1) // 2])


def add_noise(y: Any, snr_db: float, seed: int) -> Any:
    """``y`` plus white Gaussian noise at ``snr_db`` dB below its power (seeded)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    power = float(np.mean(y.astype(np.float64) ** 2)) + 1e-12
    noise = rng.standard_normal(y.shape) * np.sqrt(power / 10 ** (snr_db / 10))
    return np.clip(y + noise, -1, 1).astype(np.float32)


def click_at_seams(y: Any, chunk_samples: int, amplitude: float = 0.6) -> Any:
    """``y`` with a one-sample step of ``amplitude`` at every multiple of ``chunk_samples``."""
    import numpy as np

    out = y.copy()
    for b in range(chunk_samples, len(out), chunk_samples):
        out[b] = np.clip(out[b] + amplitude * (1 if out[b - 1] <= 0 else -1), -1, 1)
    return out


def degrade(y: Any, sr: int, variant: str | None, seed: int = 0) -> tuple[Any, int]:
    """Apply a waveform-level planted degradation (``time_stretch``, ``noise``, ``seam_click``,
    ``sample_rate``) to one take; other variants return it unchanged."""
    import librosa
    import numpy as np

    if variant == "time_stretch":
        return np.asarray(librosa.effects.time_stretch(y, rate=0.8), dtype=np.float32), sr
    if variant == "noise":
        return add_noise(y, 5.0, seed), sr
    if variant == "seam_click":
        return click_at_seams(y, CHUNK_SAMPLES), sr
    if variant == "sample_rate":
        return np.asarray(librosa.resample(y, orig_sr=sr, target_sr=16000), dtype=np.float32), 16000
    return y, sr


def synthesize_candidate(text: str, seed: int) -> tuple[Any, int]:
    """The candidate's take: the same voice with its own jitter draw, then ``VARIANT``'s fault."""
    if VARIANT == "dropped_words":
        text = drop_last_half(text)
    voice = "en-us+f4" if VARIANT == "other_voice" else VOICE
    y, sr = jittered_take(text, seed, stream="reference" if DETERMINISTIC else "candidate", voice=voice)
    return degrade(y, sr, VARIANT, seed)
