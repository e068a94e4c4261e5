"""Streaming decode: chunked decoding with left context and lookahead measured against one full decode.

A streaming TTS server decodes the codes chunk by chunk as they arrive
(vLLM-Omni's ``async_chunk``). Each chunk of ``chunk_frames`` frames is
decoded together with ``context_frames`` frames of left context (``context_frames
* hop_length`` samples) whose audio is thrown away, so that the decoder's
receptive field (convolutions, LSTM state) sees what the full decode saw. A
non-causal decoder (Mimi, Qwen3-TTS code2wav) also needs right context: each
chunk is decoded with ``lookahead_frames`` future frames (fewer at the end of
the codes) whose samples are trimmed from the chunk's end. Faults at the seams:

* too little left context (or lookahead) for the decoder's receptive field:
  fixed by more context (or lookahead);
* a decoder whose output is ``frames * hop_length - d`` samples (transposed or
  valid convolutions trimming ``d`` samples) sliced with a fixed
  ``out[context_frames * hop_length:]``: each chunk then misses the ``d``
  samples the previous chunk could not produce - more context does not fix it,
  the slice must start at ``context_frames * hop_length - d``;
* the lookahead's samples not trimmed, or trimmed by the wrong count (a fixed
  ``lookahead * hop`` also where the codes ended, or a count that is not the
  lookahead decoded): :func:`fit_lookahead_trim` reads the stream as chunks that
  many samples too long or short and finds it then matches the full decode;
* in a padded batch of requests of different lengths, a request run or trimmed
  with another request's (or the padded batch's) length.

:func:`stream_decode` is a correct chunked decode of any ``decode(codes) ->
(waveform, sample_rate)`` (missing samples assumed at the end, as in causal
decoders), :func:`stream_decode_batch` the same per request of a padded batch;
:func:`measure_stream` measures the port's own streaming decode (spec
``decode_candidate_stream``) against its full decode, seam by seam, and with
more left context or lookahead; :func:`measure_stream_batch` measures the
port's batched stream (spec ``decode_candidate_stream_batch``) request by
request against each request's own full decode;
:func:`porting_kit.checks.hop.stream_findings` and
:func:`~porting_kit.checks.hop.stream_batch_findings` say which fault it is
(``hop.stream_boundary``, ``hop.stream_lookahead``, ``hop.stream_batch_row``).

Tolerance: a seam (or a fitted trim) is clean when the stream is within
``SEAM_TOLERANCE`` (1e-3, -60 dB) of the full decode's peak, or 4x the
candidate's own low-precision error when it decodes in bf16. The embedded
example (EnCodec with an LSTM, fp32, 24 frames of left context, 2 of lookahead)
streams within 1.23e-4 of a 0.56 peak (tolerance 5.6e-4), and each request of
its batched stream (80, 50, 21 frames) within 1.23e-4 (tolerance 4.9e-4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from porting_kit.errors import InputError
from porting_kit.probes.waveform import as_channels_first

#: A seam is clean when the streamed audio is within this fraction of the full decode's peak (-60 dB).
SEAM_TOLERANCE = 1e-3
DEFAULT_CHUNK_FRAMES = 10
DEFAULT_CONTEXT_FRAMES = 8
DEFAULT_LOOKAHEAD_FRAMES = 0


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
                  context_frames: int, hop_length: int,
                  lookahead_frames: int = 0) -> tuple[np.ndarray, int]:
    """Decode ``codes`` chunk by chunk with left context and lookahead: a correct streaming decode.

    Parameters
    ----------
    decode : callable
        ``decode(codes[:, a:b]) -> (waveform (channels, samples) or (samples,), sample_rate)``.
    codes : torch.LongTensor [shape=(num_codebooks, frames)]
    chunk_frames : int
        Frames emitted per chunk (> 0).
    context_frames : int
        Frames of left context decoded before each chunk and dropped (>= 0).
    hop_length : int
        Samples per frame.
    lookahead_frames : int, default 0
        Frames of right context (future frames) decoded after each chunk and dropped
        (>= 0; fewer at the end of the codes, where fewer frames exist).

    Returns
    -------
    waveform : np.ndarray [shape=(channels, samples)]
        ``frames * hop_length - d`` samples, like the full decode, when
        ``context_frames * hop_length >= d``.
    sample_rate : int

    Raises
    ------
    ValueError
        ``chunk_frames <= 0`` or a negative context or lookahead.

    Notes
    -----
    The decoder's ``d`` missing samples are measured per call from its output
    length and assumed to be at the end of each decode (causal / valid
    convolutions). Chunk ``[s, e)`` is decoded from frame ``a = s - context`` to
    frame ``b = min(frames, e + lookahead)``; its output covers full-decode
    samples ``[a*hop, b*hop - d)``: the part after the previous chunk starts at
    ``(s - a)*hop - d`` and the last ``(b - e)*hop`` samples (the lookahead's) are
    dropped, so that every chunk ends at full-decode sample ``e*hop - d``.
    """
    if chunk_frames <= 0 or context_frames < 0 or lookahead_frames < 0:
        raise ValueError("chunk_frames must be > 0, context_frames and lookahead_frames >= 0")
    T = int(codes.shape[-1])
    parts, sr = [], 0
    for s in range(0, T, chunk_frames):
        e = min(T, s + chunk_frames)
        a = max(0, s - context_frames)
        b = min(T, e + lookahead_frames)
        wav, sr = decode(codes[:, a:b])
        y = as_channels_first(wav)
        d = output_trim(b - a, y.shape[1], hop_length)
        start = 0 if s == 0 else max((s - a) * hop_length - d, 0)
        parts.append(y[:, start:y.shape[1] - (b - e) * hop_length])
    return np.concatenate(parts, axis=1), int(sr)


def stream_decode_batch(decode: Callable[[Any], tuple[Any, int]], codes, lengths: list[int],
                        chunk_frames: int, context_frames: int, hop_length: int,
                        lookahead_frames: int = 0) -> list[np.ndarray]:
    """:func:`stream_decode` of each request of a padded batch, on its own frames.

    Parameters
    ----------
    decode : callable
        As in :func:`stream_decode` (one request's codes).
    codes : torch.LongTensor [shape=(batch, num_codebooks, max_frames)]
        Padded batch; request ``r`` holds ``lengths[r]`` frames, the rest is padding.
    lengths : list of int
        Frames of each request.
    chunk_frames, context_frames, hop_length, lookahead_frames : int
        As in :func:`stream_decode`.

    Returns
    -------
    list of np.ndarray [shape=(channels, samples)]
        One waveform per request: ``lengths[r] * hop_length - d`` samples.
    """
    return [stream_decode(decode, codes[r, :, :int(n)], chunk_frames, context_frames, hop_length,
                          lookahead_frames)[0] for r, n in enumerate(lengths)]


def chunk_regions(n_frames: int, chunk_frames: int, hop_length: int, trim_d: int,
                  n_samples: int) -> list[tuple[int, int]]:
    """Each chunk's samples in the full decode: ``[s*hop - d, e*hop - d)``, the last to the end.

    Parameters
    ----------
    n_frames : int
        Frames of the request.
    chunk_frames, hop_length, trim_d : int
        Chunk size (frames), samples per frame, the decoder's ``d`` (samples).
    n_samples : int
        Samples of the full decode (the last region's end).

    Returns
    -------
    list of (int, int)
        ``(start, stop)`` sample of each chunk, in order.
    """
    starts = [0] + [max(s * hop_length - trim_d, 0) for s in range(chunk_frames, n_frames, chunk_frames)]
    return [(a, b) for a, b in zip(starts, starts[1:] + [n_samples])]


def first_mismatch(full: np.ndarray, streamed: np.ndarray, tol: float) -> int | None:
    """First sample where the stream and the full decode differ by more than ``tol``.

    Parameters
    ----------
    full, streamed : np.ndarray [shape=(samples,)]
        Mono waveforms.
    tol : float
        Absolute tolerance (waveform units).

    Returns
    -------
    int or None
        The sample index; the shorter length when the common part matches but the
        lengths differ; ``None`` when they are equal within ``tol``.
    """
    n = min(full.size, streamed.size)
    bad = np.flatnonzero(np.abs(full[:n] - streamed[:n]) > tol)
    if bad.size:
        return int(bad[0])
    return None if full.size == streamed.size else n


@dataclass
class TrimFit:
    """A wrong lookahead trim that explains the stream: each chunk keeps ``extra`` samples too many.

    Attributes
    ----------
    name : str
        ``"untrimmed"`` (the lookahead's samples kept), ``"fixed_trim"`` (``lookahead*hop``
        trimmed from every chunk, also where the lookahead was cut short at the end of the
        codes) or ``"wrong_count"`` (a constant trim per chunk with lookahead, not ``(b - e)*hop``).
    trim_samples : int
        Samples the port trims from a chunk with full lookahead.
    expected_trim_samples : int
        ``lookahead_frames * hop_length``.
    extra : list of int
        Samples each chunk keeps beyond its region (negative: cut from its end).
    err : float
        Max |full - streamed| over the regions both cover under this fit.
    """

    name: str
    trim_samples: int
    expected_trim_samples: int
    extra: list[int]
    err: float


def _lookaheads(n_frames: int, chunk_frames: int, lookahead_frames: int) -> list[int]:
    """Frames of lookahead each chunk gets (fewer at the end of the codes)."""
    return [min(n_frames, min(n_frames, s + chunk_frames) + lookahead_frames) - min(n_frames, s + chunk_frames)
            for s in range(0, n_frames, chunk_frames)]


def fit_error(full: np.ndarray, streamed: np.ndarray, regions: list[tuple[int, int]],
              extra: list[int]) -> float:
    """Max |err| of the stream read as chunk regions each ``extra[i]`` samples longer (or shorter).

    Parameters
    ----------
    full, streamed : np.ndarray [shape=(samples,)]
        Mono full decode and stream.
    regions : list of (int, int)
        :func:`chunk_regions`.
    extra : list of int
        Samples chunk ``i`` holds beyond its region (compared: the region's part it holds).

    Returns
    -------
    float
        ``inf`` when the stream's length is not the sum of the chunk lengths.
    """
    lens = [max(b - a + x, 0) for (a, b), x in zip(regions, extra)]
    if sum(lens) != streamed.size:
        return math.inf
    err, p = 0.0, 0
    for (a, b), n in zip(regions, lens):
        m = min(n, b - a)
        if m:
            err = max(err, float(np.max(np.abs(full[a:a + m] - streamed[p:p + m]))))
        p += n
    return err


def fit_lookahead_trim(full: np.ndarray, streamed: np.ndarray, n_frames: int, chunk_frames: int,
                       lookahead_frames: int, hop_length: int, trim_d: int,
                       tol: float) -> TrimFit | None:
    """The wrong lookahead trim that explains the stream, if one does.

    Parameters
    ----------
    full, streamed : np.ndarray [shape=(samples,)]
        Mono full decode and the port's stream.
    n_frames, chunk_frames, lookahead_frames, hop_length, trim_d : int
        The request's frames, chunk and lookahead (frames), samples per frame, the
        decoder's ``d`` (samples).
    tol : float
        Absolute error a fit may leave.

    Returns
    -------
    TrimFit or None
        The first of ``untrimmed``, ``fixed_trim``, ``wrong_count`` whose chunk
        lengths add up to the stream's and whose chunks match the full decode
        within ``tol``; ``None`` without lookahead or when none fits.
    """
    if lookahead_frames <= 0 or streamed.size == full.size:
        return None
    regions = chunk_regions(n_frames, chunk_frames, hop_length, trim_d, full.size)
    la = [x * hop_length for x in _lookaheads(n_frames, chunk_frames, lookahead_frames)]
    want = lookahead_frames * hop_length
    tries = [("untrimmed", 0, la), ("fixed_trim", want, [x - want for x in la])]
    with_la = [x > 0 for x in la]
    diff = streamed.size - full.size  # = sum over chunks with lookahead of (x - t) for a constant t
    if any(with_la) and (sum(la) - diff) % sum(with_la) == 0:
        t = (sum(la) - diff) // sum(with_la)
        tries.append(("wrong_count", t, [x - t if w else 0 for x, w in zip(la, with_la)]))
    for name, t, extra in tries:
        if name == "wrong_count" and t == want:
            continue
        err = fit_error(full, streamed, regions, extra)
        if err <= tol:
            return TrimFit(name, int(t), want, [int(x) for x in extra], err)
    return None


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
    """The port's streaming decode against its full decode, and with more context or lookahead.

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
        The port's stream at its own context and lookahead.
    more_context_frames : int or None
        The last larger left context tried (the smallest that made the seams clean,
        when one did); ``None`` when the stream was clean or none was tried.
    more_context : SeamMeasurement or None
        The stream at ``more_context_frames``.
    lookahead_frames : int
        The port's configured lookahead (frames of right context), 0 without.
    uses_lookahead : bool
        The spec defines ``stream_lookahead_frames``: ``decode_candidate_stream`` takes it.
    first_mismatch_sample : int or None
        First sample of the stream off the full decode by more than the tolerance.
    trim_fit : TrimFit or None
        The wrong lookahead trim that explains the stream (:func:`fit_lookahead_trim`).
    more_lookahead_frames : int or None
        The last larger lookahead tried (the smallest that made the seams clean, when one did).
    more_lookahead : SeamMeasurement or None
        The stream at ``more_lookahead_frames``.
    request : int or None
        The request (row) of a batched stream; ``None`` for the single-request stream.
    frames : int
        Frames of the (request's) codes.
    full_samples : int
        Samples of the full decode.
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
    lookahead_frames: int = 0
    uses_lookahead: bool = False
    first_mismatch_sample: int | None = None
    trim_fit: TrimFit | None = None
    more_lookahead_frames: int | None = None
    more_lookahead: SeamMeasurement | None = None
    request: int | None = None
    frames: int = 0
    full_samples: int = 0


def _measure(full: np.ndarray, streamed: np.ndarray, seams: list[int], tol: float) -> SeamMeasurement:
    errs = seam_errors(full, streamed, seams)
    worst = int(np.argmax(errs)) if errs else 0
    bad = [i for i, e in enumerate(errs) if e > tol]
    return SeamMeasurement(errs, worst, errs[worst] if errs else 0.0, bad[0] if bad else None,
                           int(full.shape[-1] - streamed.shape[-1]),
                           not bad and full.shape[-1] == streamed.shape[-1])


def spec_waveform(x: Any, what: str) -> np.ndarray:
    """A waveform a spec function returned, mono: ``np.ndarray [shape=(samples,)]`` (channel mean).

    Parameters
    ----------
    x : np.ndarray or torch.Tensor [shape=(samples,) or (channels, samples)]
        What the spec function returned for one waveform.
    what : str
        The spec function and the part, for the error line
        (``"decode_candidate_stream_batch's request 1"``).

    Returns
    -------
    np.ndarray [shape=(samples,)], float64

    Raises
    ------
    InputError
        ``x`` is not a numeric array of shape ``(samples,)`` or ``(channels, samples)``
        (a string, a number, a dict...).
    """
    if isinstance(x, (str, bytes, dict)) or np.ndim(x) == 0:
        raise InputError(f"{what} is a {type(x).__name__}, not a waveform (an array or tensor of shape "
                         "(samples,) or (channels, samples))")
    try:
        return as_channels_first(x).mean(axis=0)
    except (TypeError, ValueError) as e:
        raise InputError(f"{what} is not a waveform of shape (samples,) or (channels, samples): {e}") from None


def _waveform_list(out: Any, n_requests: int) -> list[np.ndarray]:
    """``decode_candidate_stream_batch``'s return value as one mono waveform per request.

    Raises
    ------
    InputError
        ``out`` is not a list (tuple, array) of ``n_requests`` waveforms.
    """
    name = "decode_candidate_stream_batch"
    if isinstance(out, (str, bytes, dict)) or not hasattr(out, "__len__") or not hasattr(out, "__getitem__"):
        raise InputError(f"{name} returned a {type(out).__name__}, not a list of waveforms "
                         f"(one per request of the batch of {n_requests})")
    if len(out) != n_requests:
        raise InputError(f"{name} returned {len(out)} waveforms for a batch of "
                         f"{n_requests} requests (one per request expected)")
    return [spec_waveform(out[r], f"{name}'s waveform for request {r}") for r in range(n_requests)]


def _stream_waveform(out: Any) -> np.ndarray:
    """``decode_candidate_stream``'s ``(waveform, sample_rate)`` as a mono waveform.

    Raises
    ------
    InputError
        ``out`` is not a ``(waveform, sample_rate)`` pair holding a waveform.
    """
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise InputError(f"decode_candidate_stream returned a {type(out).__name__}, not "
                         "(waveform, sample_rate)")
    return spec_waveform(out[0], "decode_candidate_stream's waveform")


def stream_config(spec) -> tuple[int, int, int, bool]:
    """The port's streaming configuration from its spec.

    Parameters
    ----------
    spec : Spec
        Optional ``stream_chunk_frames``, ``stream_context_frames``, ``stream_lookahead_frames``
        (ints, or functions returning ints).

    Returns
    -------
    chunk_frames, context_frames, lookahead_frames : int
        Frames (defaults 10, 8, 0).
    uses_lookahead : bool
        The spec defines ``stream_lookahead_frames``: the stream functions take the lookahead.

    Raises
    ------
    InputError
        A ``stream_*_frames`` function raised.
    """
    def get(name: str, default: int) -> int:
        v = spec.get(name, default)
        return int(spec.call(name) if callable(v) else v)

    return (get("stream_chunk_frames", DEFAULT_CHUNK_FRAMES),
            get("stream_context_frames", DEFAULT_CONTEXT_FRAMES),
            get("stream_lookahead_frames", DEFAULT_LOOKAHEAD_FRAMES),
            spec.has("stream_lookahead_frames"))


def _tolerance(full: np.ndarray, precision_floor: float) -> tuple[float, float]:
    peak = float(np.max(np.abs(full))) if full.size else 0.0
    peak = peak or 1.0
    return peak, max(SEAM_TOLERANCE * peak, 4.0 * precision_floor)


def _larger(current: int, n_frames: int) -> list[int]:
    """A few larger frame counts to try: 2x, 4x, +16, +32, all frames."""
    return sorted({min(n_frames, x) for x in (2 * current, 4 * current, current + 16,
                                                current + 32, n_frames)} - {current})


def measure_stream(spec, codes, hop_length: int, full_candidate: Any, trim_d: int | None = None,
                   precision_floor: float = 0.0) -> StreamMeasurement | None:
    """Measure the port's streaming decode against its full decode, seam by seam.

    Parameters
    ----------
    spec : Spec
        Defines ``decode_candidate_stream(codes, chunk_frames, context_frames)`` -
        ``decode_candidate_stream(codes, chunk_frames, context_frames, lookahead_frames)``
        when it defines ``stream_lookahead_frames`` - and optionally
        ``stream_chunk_frames`` / ``stream_context_frames`` / ``stream_lookahead_frames``
        (ints, or functions returning ints, so that a variant can change them).
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
        does not stream). When the stream is not clean: first the wrong lookahead
        trims are fitted (no decode); when none fits, a few larger left contexts
        are tried (2x, 4x, +16, +32 frames, all frames) up to the first that makes
        it clean, then (with ``stream_lookahead_frames``) the same larger lookaheads.

    Raises
    ------
    InputError
        ``decode_candidate_stream`` (or a ``stream_*_frames`` function) raised.
    """
    chunk, context, lookahead, uses = stream_config(spec)
    T = int(codes.shape[-1])
    full = as_channels_first(full_candidate).mean(axis=0)
    peak, tol = _tolerance(full, precision_floor)
    d = output_trim(T, full.size, hop_length) if trim_d is None else int(trim_d)
    seams = [a for a, _ in chunk_regions(T, chunk, hop_length, d, full.size)]

    def stream(ctx_frames: int, la_frames: int) -> np.ndarray | None:
        args = (codes, chunk, ctx_frames) + ((la_frames,) if uses else ())
        out = spec.call("decode_candidate_stream", *args)
        return None if out is None else _stream_waveform(out)

    def run(ctx_frames: int, la_frames: int) -> SeamMeasurement | None:
        y = stream(ctx_frames, la_frames)
        return None if y is None else _measure(full, y, seams, tol)

    y = stream(context, lookahead)
    if y is None:  # the spec says this layout does not stream
        return None
    sm = StreamMeasurement(chunk, context, hop_length, d, seams, peak, tol, _measure(full, y, seams, tol),
                           lookahead_frames=lookahead, uses_lookahead=uses,
                           first_mismatch_sample=first_mismatch(full, y, tol), frames=T,
                           full_samples=int(full.size))
    if sm.streamed.clean:
        return sm
    sm.trim_fit = fit_lookahead_trim(full, y, T, chunk, lookahead, hop_length, d, tol)
    if sm.trim_fit is not None:
        return sm
    for more in _larger(context, T):  # more left context
        sm.more_context_frames, sm.more_context = more, run(more, lookahead)
        if sm.more_context is None or sm.more_context.clean:
            return sm
    if uses:  # more lookahead (right context)
        for more in _larger(lookahead, T):
            sm.more_lookahead_frames, sm.more_lookahead = more, run(context, more)
            if sm.more_lookahead is None or sm.more_lookahead.clean:
                break
    return sm


def batch_lengths(n_frames: int) -> list[int]:
    """Frames of each request of the batched-stream check: very different lengths.

    Parameters
    ----------
    n_frames : int
        Frames of the spec's codes (the longest request).

    Returns
    -------
    list of int
        ``[n, 5n // 8, n // 4 + 1]`` (deduplicated, each >= 1), longest first.
    """
    return sorted({max(1, x) for x in (n_frames, 5 * n_frames // 8, n_frames // 4 + 1)}, reverse=True)


def batch_codes(codes, lengths: list[int], pad: int = 0):
    """A padded batch of requests cut from ``codes``: request ``r`` is its last ``lengths[r]`` frames.

    Parameters
    ----------
    codes : torch.LongTensor [shape=(num_codebooks, frames)]
    lengths : list of int
        Frames of each request (each <= frames).
    pad : int, default 0
        Code written past each request's length.

    Returns
    -------
    torch.LongTensor [shape=(batch, num_codebooks, max(lengths))]
    """
    import torch

    K, T = codes.shape
    out = torch.full((len(lengths), K, max(lengths)), int(pad), dtype=codes.dtype)
    for r, n in enumerate(lengths):
        out[r, :, :n] = codes[:, T - n:]
    return out


@dataclass
class BatchStreamMeasurement:
    """The port's batched streaming decode, each request against its own full decode.

    Attributes
    ----------
    lengths : list of int
        Frames of each request of the padded batch.
    expected_samples : list of int
        Samples of each request's full decode (``frames * hop - d``).
    rows : list of StreamMeasurement
        One per request (``request`` set; no larger context or lookahead tried).
    """

    lengths: list[int]
    expected_samples: list[int]
    rows: list[StreamMeasurement]


def measure_stream_batch(spec, codes, hop_length: int, trim_d: int,
                         precision_floor: float = 0.0) -> BatchStreamMeasurement | None:
    """Measure the port's batched streaming decode, request by request.

    Parameters
    ----------
    spec : Spec
        Defines ``decode_candidate_stream_batch(codes, lengths, chunk_frames,
        context_frames, lookahead_frames) -> list of waveforms`` (one per request,
        ``(samples,)`` or ``(channels, samples)``; ``None``: the layout does not
        stream in batches) and ``decode_candidate(codes)`` (each request's full decode).
    codes : torch.LongTensor [shape=(num_codebooks, frames)]
        The spec's codes; the requests are cut from them (:func:`batch_codes`,
        lengths :func:`batch_lengths`).
    hop_length : int
        Samples per frame.
    trim_d : int
        The codec's ``d`` (samples).
    precision_floor : float
        As in :func:`measure_stream`.

    Returns
    -------
    BatchStreamMeasurement or None
        ``None`` when the batched stream returns ``None``.

    Raises
    ------
    InputError
        A spec function raised, or the batched stream did not return one waveform per request
        (a string, a number, a list of the wrong length...).
    """
    chunk, context, lookahead, _ = stream_config(spec)
    lengths = batch_lengths(int(codes.shape[-1]))
    batch = batch_codes(codes, lengths)
    out = spec.call("decode_candidate_stream_batch", batch, list(lengths), chunk, context, lookahead)
    if out is None:
        return None
    waves = _waveform_list(out, len(lengths))
    rows, expected = [], []
    for r, n in enumerate(lengths):
        full = as_channels_first(spec.call("decode_candidate", batch[r, :, :n])[0]).mean(axis=0)
        y = waves[r]
        peak, tol = _tolerance(full, precision_floor)
        seams = [a for a, _ in chunk_regions(n, chunk, hop_length, trim_d, full.size)]
        sm = StreamMeasurement(chunk, context, hop_length, trim_d, seams, peak, tol,
                               _measure(full, y, seams, tol), lookahead_frames=lookahead,
                               uses_lookahead=True, first_mismatch_sample=first_mismatch(full, y, tol),
                               request=r, frames=n, full_samples=int(full.size))
        if not sm.streamed.clean:
            sm.trim_fit = fit_lookahead_trim(full, y, n, chunk, lookahead, hop_length, trim_d, tol)
        rows.append(sm)
        expected.append(int(full.size))
    return BatchStreamMeasurement(list(lengths), expected, rows)
