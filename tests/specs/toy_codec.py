"""Audio-only port spec: a tiny linear codec (numpy-fast) and a port's serving glue, with faults.

Only the audio names are defined (``codes``, ``decode_reference``,
``decode_candidate``, ``hop_length``, ``served_channels``): the audio families run,
every other family reports ``skip``. The codec is linear and causal: each code of
codebook ``k`` has an embedding (``DIM`` numbers); a frame's latent is the sum over
codebooks; each frame is synthesised as ``HOP`` samples from a fixed sinusoidal basis
(one per channel) and smoothed by a causal moving average, so a frame's audio leaks
into the next one as a convolutional decoder's does.

Variants plant one field fault each in the candidate's glue; ``CHANNELS`` (1 or 2)
and ``SERVED`` (the spec's ``served_channels``) say the layout.
"""

from __future__ import annotations

import numpy as np

SAMPLE_RATE = 16000  #: Hz
HOP = 64  #: samples per frame
DIM = 8
CODEBOOK = 64
K, T = 4, 40  #: codebooks x frames

VARIANTS = {
    "stereo": "clean 2-channel codec served as stereo (served_channels = 2)",
    "delay_tail": "the delay pattern's K-1 padding frames (special tokens clamped to 0) decoded "
                  "as audio",
    "codebook_offset": "codebooks 2.. read one frame early after undoing the delay pattern "
                       "(one frame short)",
    "stereo_as_mono": "stereo reference served as a mono downmix although served_channels = 2",
    "stereo_mixed_wrong_axis": "stereo output made (samples, channels) then read back as "
                               "(channels, samples) with reshape(2, -1)",
    "stereo_transposed": "stereo output served as (samples, channels)",
}
VARIANT: str | None = None


def _channels() -> int:
    return 2 if VARIANT in ("stereo", "stereo_as_mono", "stereo_mixed_wrong_axis",
                                    "stereo_transposed") else 1


def served_channels() -> int:
    """Channels the port serves (2 for the stereo variants)."""
    return _channels()


hop_length = HOP


def _tables():
    g = np.random.default_rng(7)
    emb = g.normal(0.0, 0.3, size=(K, CODEBOOK, DIM))
    n = np.arange(HOP) / SAMPLE_RATE
    bases = []
    for ch in range(2):
        freqs = 300.0 * (1 + np.arange(DIM)) * (1.0 + 0.37 * ch)
        bases.append(np.sin(2 * np.pi * freqs[:, None] * n[None, :] + ch))
    return emb, np.stack(bases)  # (K, CODEBOOK, DIM), (2, DIM, HOP)


def _decode(codes, channels: int) -> np.ndarray:
    emb, basis = _tables()
    codes = np.asarray(codes)
    latent = sum(emb[k][codes[k]] for k in range(codes.shape[0]))  # (frames, DIM)
    out = []
    for ch in range(channels):
        y = (latent @ basis[ch]).reshape(-1)  # frames * HOP
        kernel = np.ones(HOP // 2) / (HOP // 2)
        y = np.convolve(y, kernel)[: y.size]  # causal smoothing across frame edges
        out.append(0.2 * y)
    return np.stack(out).astype(np.float32)  # (channels, frames * HOP)


def codes():
    """Seeded codes, ``torch.LongTensor [shape=(4, 40)]``, codebook-major."""
    import torch

    g = torch.Generator().manual_seed(11)
    return torch.randint(0, CODEBOOK, (K, T), generator=g)


def decode_reference(codes):
    """The reference codec: ``(channels, frames * 64)`` float32 at 16 kHz."""
    return _decode(codes.numpy(), _channels()), SAMPLE_RATE


def decode_candidate(codes):
    """The port's served waveform (mono 1-D, or (2, samples) when served as stereo)."""
    c = codes.numpy()
    if VARIANT == "delay_tail":
        c = np.concatenate([c, np.zeros((K, K - 1), dtype=c.dtype)], axis=1)
    if VARIANT == "codebook_offset":
        c = np.concatenate([c[:2, :-1], c[2:, 1:]], axis=0)
    y = _decode(c, _channels())
    if VARIANT == "stereo":
        return y, SAMPLE_RATE
    if VARIANT == "stereo_transposed":
        return np.ascontiguousarray(y.T), SAMPLE_RATE
    if VARIANT == "stereo_mixed_wrong_axis":
        t = y.T  # (samples, channels)
        return np.ascontiguousarray(t.reshape(2, -1)), SAMPLE_RATE  # channels guessed from shape
    return y.mean(axis=0), SAMPLE_RATE
