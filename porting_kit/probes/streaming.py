"""Streaming decode: chunked decoding with left context against one full decode (``hop.stream_boundary``).

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
decoders); :func:`check_stream` compares the port's own streaming decode
(spec ``decode_candidate_stream``) with its full decode and says which fault it is.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from porting_kit.probes.waveform import as_channels_first
from porting_kit.report.findings import Finding, Where

#: A seam is clean when the streamed audio is within this fraction of the full decode's peak (-60 dB).
SEAM_TOLERANCE = 1e-3
DEFAULT_CHUNK_FRAMES = 10
DEFAULT_CONTEXT_FRAMES = 8


def output_trim(n_frames: int, n_samples: int, hop_length: int) -> int:
    """``d`` in ``samples = frames * hop_length - d`` (0 for EnCodec; > 0 for decoders that trim)."""
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
    """
    n = min(full.shape[-1], streamed.shape[-1])
    diff = np.abs(full[..., :n] - streamed[..., :n])
    if diff.ndim > 1:
        diff = diff.max(axis=0)
    bounds = sorted({min(max(b, 0), n) for b in seams} | {0, n})
    return [float(diff[bounds[i]:bounds[i + 1]].max()) if bounds[i + 1] > bounds[i] else 0.0
            for i in range(len(bounds) - 1)]


def _measure(full: np.ndarray, streamed: np.ndarray, seams: list[int], tol: float) -> dict[str, Any]:
    errs = seam_errors(full, streamed, seams)
    worst = int(np.argmax(errs)) if errs else 0
    bad = [i for i, e in enumerate(errs) if e > tol]
    return {"errors": errs, "worst": worst, "worst_err": errs[worst] if errs else 0.0,
            "first_bad": bad[0] if bad else None,
            "missing": int(full.shape[-1] - streamed.shape[-1]),
            "clean": not bad and full.shape[-1] == streamed.shape[-1]}


def check_stream(spec, codes, hop_length: int, full_candidate: Any,
                 trim_d: int | None = None, precision_floor: float = 0.0) -> list[Finding]:
    """Compare the port's streaming decode with its full decode (``hop.stream_boundary``).

    Parameters
    ----------
    spec : Spec
        Defines ``decode_candidate_stream(codes, chunk_frames, context_frames)``
        and optionally ``stream_chunk_frames`` / ``stream_context_frames`` (ints, or
        functions returning ints, so that a variant can change them).
    codes : torch.LongTensor [shape=(num_codebooks, frames)]
    hop_length : int
        Samples per frame.
    full_candidate : waveform
        ``decode_candidate(codes)``'s waveform (served form).
    trim_d : int, optional
        The codec's ``d`` (``frames * hop_length - samples`` of the reference
        decode); default: measured on ``full_candidate``.
    precision_floor : float
        The candidate's own error against the reference (max |diff|) when it
        decodes in low precision: a chunked decode cannot be closer to the
        full decode than that, so the tolerance is at least 4x this.

    Returns
    -------
    list of Finding
        Empty when ``decode_candidate_stream`` returns ``None`` (the layout
        does not stream) or when every seam is within ``SEAM_TOLERANCE`` of the full decode's
        peak; else one ``hop.stream_boundary`` with the worst seam (sample
        range), whether more left context fixes it, and the decoder's ``d``.
    """
    chunk = spec.get("stream_chunk_frames", DEFAULT_CHUNK_FRAMES)
    context = spec.get("stream_context_frames", DEFAULT_CONTEXT_FRAMES)
    chunk = int(chunk() if callable(chunk) else chunk)
    context = int(context() if callable(context) else context)
    T = int(codes.shape[-1])
    full = as_channels_first(full_candidate).mean(axis=0)
    peak = float(np.max(np.abs(full))) or 1.0
    tol = max(SEAM_TOLERANCE * peak, 4.0 * precision_floor)
    d = output_trim(T, full.size, hop_length) if trim_d is None else int(trim_d)
    seams = [0] + [max(s * hop_length - d, 0) for s in range(chunk, T, chunk)]

    def run(ctx_frames: int) -> dict[str, Any] | None:
        out = spec.call("decode_candidate_stream", codes, chunk, ctx_frames)
        if out is None:
            return None
        return _measure(full, as_channels_first(out[0]).mean(axis=0), seams, tol)

    got = run(context)
    if got is None:  # the spec says this layout does not stream
        return []
    if got["clean"]:
        return []
    # more left context: the smallest of a few larger contexts that makes the seams clean
    for more in sorted({min(T, x) for x in (2 * context, 4 * context, context + 16,
                                              context + 32, T)} - {context}):
        bigger = run(more)
        if bigger is None or bigger["clean"]:
            break
    i = got["first_bad"] if got["missing"] else got["worst"]
    i = 0 if i is None else i
    start = seams[i] if i < len(seams) else seams[-1]
    db = 20 * math.log10(max(got["worst_err"], 1e-30) / peak)
    n_seams = max(len(seams) - 1, 1)
    ev = {"chunk_frames": chunk, "context_frames": context, "hop_length": hop_length,
          "decoder_trim_d": d, "seams": n_seams, "worst_seam": i, "worst_seam_sample": start,
          "worst_seam_abs_err": got["worst_err"], "worst_seam_db_below_peak": round(-db, 2),
          "tolerance_abs": tol, "missing_samples": got["missing"],
          "missing_per_seam": round(got["missing"] / n_seams, 3),
          "more_context_frames": more,
          "more_context_abs_err": bigger["worst_err"] if bigger else None,
          "more_context_fixes": bool(bigger and bigger["clean"])}
    if bigger is not None and bigger["clean"]:
        cause = (f"{more} frames of left context fix it: the decoder's receptive field needs more "
                 f"than {context} frames")
        hint = f"Decode each chunk with at least {more} frames of left context (stream_context_frames)."
    elif got["missing"] > 0 and got["missing"] % n_seams == 0:
        per = got["missing"] // n_seams
        cause = (f"more left context does not fix it: the stream is {got['missing']} samples short, "
                 f"{per} per seam (the decoder outputs frames*hop - d, d = {d}): the chunk slice "
                 "drops samples")
        hint = ("Slice each chunk's audio from context_frames*hop_length - d (d = frames*hop_length "
                "- output samples), not from context_frames*hop_length.")
    else:
        cause = (f"more left context ({more} frames) does not fix it: the chunks are not decoded "
                 "with the requested left context, or the seams are joined wrongly")
        hint = ("Decode codes[:, start - context_frames:end] for each chunk and drop the first "
                "context_frames*hop_length - d samples of its audio.")
    return [Finding(
        "hop", "hop.stream_boundary", "fail",
        f"Streaming decode ({chunk}-frame chunks, {context} frames of left context) differs from "
        f"the full decode at seam {i} (sample {start}, |err| {got['worst_err']:.2e}, "
        f"{-db:.0f} dB below peak); {cause}.",
        ev, Where(samples=[int(start), int(start + chunk * hop_length)]), hint)]
