"""Streaming decode: chunked decoding with left context measured against one full decode.

A streaming TTS server decodes the codes chunk by chunk as they arrive
(vLLM-Omni's ``async_chunk``). Each chunk of ``chunk_frames`` frames is
decoded together with ``context_frames`` frames of left context (``context_frames
* hop_length`` samples) whose audio is thrown away, so that the decoder's
receptive field (convolutions, LSTM state) sees what the full decode saw. Two
faults give clicks at the seams:

* too little left context for the decoder's receptive field: fixed by more context;
* a decoder whose output is ``frames * hop_length - d`` samples (transposed or
  valid convolutions trimming ``d`` samples) sliced with a fixed
  ``out[context_frames * hop_length:]``: each chunk then misses the ``d``
  samples the previous chunk could not produce - more context does not fix it,
  the slice must start at ``context_frames * hop_length - d``.

:func:`stream_decode` is a correct chunked decode of any ``decode(codes) ->
(waveform, sample_rate)`` (missing samples assumed at the end, as in causal
decoders); :func:`measure_stream` measures the port's own streaming decode
(spec ``decode_candidate_stream``) against its full decode, seam by seam, and
with more left context; :func:`porting_kit.checks.hop.stream_findings` says which
fault it is (``hop.stream_boundary``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from porting_kit.probes.waveform import as_channels_first

#: A seam is clean when the streamed audio is within this fraction of the full decode's peak (-60 dB).
SEAM_TOLERANCE = 1e-3
DEFAULT_CHUNK_FRAMES = 10
DEFAULT_CONTEXT_FRAMES = 8


def output_trim(n_frames: int, n_samples: int, hop_length: int) -> int:
    """``d`` in ``samples = frames * hop_length - d`` (0 for EnCodec; > 0 for decoders that trim).

    Parameters
    ----------
    n_frames : int
        Code frames decoded.
    n_samples : int
        Samples the decoder returned.
    hop_length : int
        Samples per frame.

    Returns
    -------
    int
        Samples the decoder trims (negative when it returns extra samples).
    """
    return int(n_frames * hop_length - n_samples)


def stream_decode(decode: Callable[[Any], tuple[Any, int]], codes, chunk_frames: int,
                  context_frames: int, hop_length: int) -> tuple[np.ndarray, int]:
    """Decode ``codes`` chunk by chunk with left context and concatenate: a correct streaming decode.

    Parameters
    ----------
    decode : callable
        ``decode(codes[:, a:e]) -> (waveform (channels, samples) or (samples,), sample_rate)``.
    codes : torch.LongTensor [shape=(num_codebooks, frames)]
    chunk_frames : int
        Frames emitted per chunk (> 0).
    context_frames : int
        Frames of left context decoded before each chunk and dropped (>= 0).
    hop_length : int
        Samples per frame.

    Returns
    -------
    waveform : np.ndarray [shape=(channels, samples)]
        ``frames * hop_length - d`` samples, like the full decode, when
        ``context_frames * hop_length >= d``.
    sample_rate : int

    Notes
    -----
    The decoder's ``d`` missing samples are measured per call from its output
    length and assumed to be at the end of each decode (causal / valid
    convolutions). Chunk ``[s, e)`` is decoded from frame ``a = s - context``;
    its output covers full-decode samples ``[a*hop, e*hop - d)``, so the part
    after the previous chunk starts at ``(s - a)*hop - d``.
    """
    if chunk_frames <= 0 or context_frames < 0:
        raise ValueError("chunk_frames must be > 0 and context_frames >= 0")
    T = int(codes.shape[-1])
    parts, sr = [], 0
    for s in range(0, T, chunk_frames):
        e = min(T, s + chunk_frames)
        a = max(0, s - context_frames)
        wav, sr = decode(codes[:, a:e])
        y = as_channels_first(wav)
        d = output_trim(e - a, y.shape[1], hop_length)
        start = 0 if s == 0 else max((s - a) * hop_length - d, 0)
        parts.append(y[:, start:])
    return np.concatenate(parts, axis=1), int(sr)


def seam_errors(full: np.ndarray, streamed: np.ndarray, seams: list[int]) -> list[float]:
    """Max |full - streamed| in each chunk region ``[seams[i], seams[i+1])`` (mono, equal prefix).

    ``seams[0]`` is 0; the last region runs to the shorter signal's end.

    Parameters
    ----------
    full, streamed : np.ndarray [shape=(samples,) or (channels, samples)]
        The full decode and the streamed decode; compared over their common prefix.
    seams : list of int
        Region starts, in samples (clipped to ``[0, n]``).

    Returns
    -------
    list of float
        Max |full - streamed| per region (max over channels), in waveform units;
        0.0 for an empty region.
    """
    n = min(full.shape[-1], streamed.shape[-1])
    diff = np.abs(full[..., :n] - streamed[..., :n])
    if diff.ndim > 1:
        diff = diff.max(axis=0)
    bounds = sorted({min(max(b, 0), n) for b in seams} | {0, n})
    return [float(diff[bounds[i]:bounds[i + 1]].max()) if bounds[i + 1] > bounds[i] else 0.0
            for i in range(len(bounds) - 1)]


@dataclass
class SeamMeasurement:
    """How one streamed decode differs from the full decode, per chunk region.

    Attributes
    ----------
    errors : list of float
        Max |full - streamed| in each chunk region (mono, equal prefix).
    worst : int
        Index of the region with the largest error.
    worst_err : float
        Its error (same unit as the waveform samples).
    first_bad : int or None
        First region above the tolerance.
    missing : int
        Samples the stream lacks against the full decode (negative: extra samples).
    clean : bool
        Every region within the tolerance and the lengths equal.
    """

    errors: list[float]
    worst: int
    worst_err: float
    first_bad: int | None
    missing: int
    clean: bool


@dataclass
class StreamMeasurement:
    """The port's streaming decode against its full decode, and with more left context.

    Attributes
    ----------
    chunk_frames, context_frames : int
        The port's configured chunk and left context (frames).
    hop_length : int
        Samples per frame.
    trim_d : int
        The decoder's ``d`` (``frames * hop_length - samples``), samples.
    seams : list of int
        Start sample of each chunk region in the full decode (``seams[0] == 0``).
    peak : float
        Max |x| of the full decode (1.0 for silence).
    tolerance : float
        Absolute error a seam may have: ``max(SEAM_TOLERANCE * peak, 4 * precision_floor)``.
    streamed : SeamMeasurement
        The port's stream at its own context.
    more_context_frames : int or None
        The last larger left context tried (the smallest that made the seams clean,
        when one did); ``None`` when the stream was clean or none was tried.
    more_context : SeamMeasurement or None
        The stream at ``more_context_frames``.
    """

    chunk_frames: int
    context_frames: int
    hop_length: int
    trim_d: int
    seams: list[int]
    peak: float
    tolerance: float
    streamed: SeamMeasurement
    more_context_frames: int | None = None
    more_context: SeamMeasurement | None = None


def _measure(full: np.ndarray, streamed: np.ndarray, seams: list[int], tol: float) -> SeamMeasurement:
    errs = seam_errors(full, streamed, seams)
    worst = int(np.argmax(errs)) if errs else 0
    bad = [i for i, e in enumerate(errs) if e > tol]
    return SeamMeasurement(errs, worst, errs[worst] if errs else 0.0, bad[0] if bad else None,
                           int(full.shape[-1] - streamed.shape[-1]),
                           not bad and full.shape[-1] == streamed.shape[-1])


def _configured(spec, name: str, default: int) -> int:
    v = spec.get(name, default)
    return int(v() if callable(v) else v)


def measure_stream(spec, codes, hop_length: int, full_candidate: Any, trim_d: int | None = None,
                   precision_floor: float = 0.0) -> StreamMeasurement | None:
    """Measure the port's streaming decode against its full decode, seam by seam.

    Parameters
    ----------
    spec : Spec
        Defines ``decode_candidate_stream(codes, chunk_frames, context_frames)``
        and optionally ``stream_chunk_frames`` / ``stream_context_frames`` (ints, or
        functions returning ints, so that a variant can change them).
    codes : torch.LongTensor [shape=(num_codebooks, frames)]
    hop_length : int
        Samples per frame.
    full_candidate : np.ndarray or torch.Tensor [shape=(samples,) or (channels, samples)]
        ``decode_candidate(codes)``'s waveform (served form).
    trim_d : int, optional
        The codec's ``d`` in samples (``frames * hop_length - samples`` of the
        reference decode); default: measured on ``full_candidate``.
    precision_floor : float
        The candidate's own error against the reference (max |diff|) when it
        decodes in low precision: a chunked decode cannot be closer to the
        full decode than that, so the tolerance is at least 4x this.

    Returns
    -------
    StreamMeasurement or None
        ``None`` when ``decode_candidate_stream`` returns ``None`` (the layout
        does not stream). When the stream is not clean, a few larger left
        contexts are tried (2x, 4x, +16, +32 frames, all frames) up to the first
        that makes it clean.

    Raises
    ------
    InputError
        ``decode_candidate_stream`` (or a ``stream_*_frames`` function) raised.
    """
    chunk = _configured(spec, "stream_chunk_frames", DEFAULT_CHUNK_FRAMES)
    context = _configured(spec, "stream_context_frames", DEFAULT_CONTEXT_FRAMES)
    T = int(codes.shape[-1])
    full = as_channels_first(full_candidate).mean(axis=0)
    peak = float(np.max(np.abs(full))) or 1.0
    tol = max(SEAM_TOLERANCE * peak, 4.0 * precision_floor)
    d = output_trim(T, full.size, hop_length) if trim_d is None else int(trim_d)
    seams = [0] + [max(s * hop_length - d, 0) for s in range(chunk, T, chunk)]

    def run(ctx_frames: int) -> SeamMeasurement | None:
        out = spec.call("decode_candidate_stream", codes, chunk, ctx_frames)
        if out is None:
            return None
        return _measure(full, as_channels_first(out[0]).mean(axis=0), seams, tol)

    got = run(context)
    if got is None:  # the spec says this layout does not stream
        return None
    sm = StreamMeasurement(chunk, context, hop_length, d, seams, peak, tol, got)
    if got.clean:
        return sm
    # more left context: the smallest of a few larger contexts that makes the seams clean
    for more in sorted({min(T, x) for x in (2 * context, 4 * context, context + 16,
                                              context + 32, T)} - {context}):
        sm.more_context_frames, sm.more_context = more, run(more)
        if sm.more_context is None or sm.more_context.clean:
            break
    return sm
