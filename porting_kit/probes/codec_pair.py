"""The spec's audio names, decoded once per check run and shared by the audio families.

Spec audio names (README "Port spec: audio names")
--------------------------------------------------
``codes() -> LongTensor [shape=(num_codebooks, frames)]``
    The codes to decode, codebook-major (row k = codebook k), deterministic.
``decode_reference(codes) -> (waveform, sample_rate)``
    The HF reference codec's output for ``codes``: ``(channels, samples)`` or
    ``(samples,)``, sample rate in Hz.
``decode_candidate(codes) -> (waveform, sample_rate)``
    What the port *serves* for ``codes`` (after its own glue: code layout,
    trim, downmix, dtype): must be mono, 1-D, float32, finite, in [-1, 1].
``hop_length`` (int or function) or ``codec_config()``
    Hop in samples; from ``codec_config()`` it is the product of the
    ``upsampling_ratios`` (transformers) / ``ratios`` (Meta SEANet).
``decode_candidate_stream(codes, chunk_frames, context_frames[, lookahead_frames]) -> (waveform, sample_rate)``, optional
    The port's streaming decode: chunks of ``chunk_frames`` frames, each
    decoded with ``context_frames`` frames of left context and
    ``lookahead_frames`` future frames (whose samples are trimmed), concatenated.
    ``lookahead_frames`` is passed only when the spec defines
    ``stream_lookahead_frames``. ``stream_chunk_frames`` / ``stream_context_frames``
    / ``stream_lookahead_frames`` (ints or functions, optional) are the port's
    configured values (defaults 10, 8 and 0).
``decode_candidate_stream_batch(codes, lengths, chunk_frames, context_frames, lookahead_frames) -> list``, optional
    The port's batched streaming decode of a padded batch ``codes [shape=(batch,
    num_codebooks, max_frames)]`` (request ``r`` holds ``lengths[r]`` frames, then
    code 0): one waveform per request, each compared with ``decode_candidate`` of
    its own frames.
``codec_candidate() -> nn.Module``, optional
    The candidate's codec module; its parameters must be float32 (dtype check).
``served_channels`` (int or function), optional
    Channels the port serves: 1 (default) = mono 1-D samples; C > 1 = a
    ``(C, samples)`` waveform, compared channel by channel with a C-channel reference.

The reference decode, the candidate decode and the hypotheses they need are
computed once (:func:`get_audio_pair`, cached in ``ctx.state["audio.pair"]``)
as facts (:class:`AudioPair`); the ``hop``, ``channel`` and ``dtype`` families
(:mod:`porting_kit.checks`) judge their part of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from porting_kit.errors import InputError
from porting_kit.probes.waveform import (FP32_MIN_SNR_DB, HYPOTHESIS_SNR_DB, WaveformComparison,
                                         analyse_waveforms, as_channels_first, snr_db)

from porting_kit.spec import AUDIO_NAMES
_STATE_KEY = "audio.pair"
#: dB the candidate's float32 re-decode must gain over its served decode for the
#: low-precision hypothesis to hold (measured: the tts example's bf16 codec, 37.3 -> 41.1 dB;
#: a fault that is not precision gains 0 dB).
FP32_FIX_DB = 2.0


@dataclass
class ContentDiagnosis:
    """Code-layout hypotheses tried when the layout and timing match but the samples differ.

    Attributes
    ----------
    tried : dict
        Hypothesis name (:func:`codebook_hypotheses`) -> SNR in dB of the served
        candidate against the reference decode of the codes in that layout.
    best : str or None
        The hypothesis with the highest SNR.
    codebook_fits : bool
        ``best`` reaches ``HYPOTHESIS_SNR_DB`` and beats the codes as given by 6 dB.
    given_snr_db : float
        SNR of the candidate against the reference decode of the codes as given, dB.
    num_codebooks, frames : int
        The codes' shape.
    """

    tried: dict[str, float]
    best: str | None
    codebook_fits: bool
    given_snr_db: float
    num_codebooks: int
    frames: int


@dataclass
class ReceptiveField:
    """How far one code frame reaches in the reference decode, in frames: a change of frame
    ``j`` changes samples of frames ``j - lookahead_frames`` .. ``j + lookback_frames``
    (measured by changing the codes of one middle frame; 0 and 0 for a frame-local codec)."""

    lookahead_frames: int
    lookback_frames: int


@dataclass
class TailFit:
    """The candidate differs from the reference only at its end: the decode of the codes'
    last ``tail_frames`` frames (codebooks already shifted by a delay pattern, or its special
    tokens) and ``extra_frames`` frames past the end (a delay pattern's padding decoded as audio).

    ``pad``: the padding that reproduces the candidate exactly when one does (``"code 0"``:
    special tokens clamped or mapped to code 0; ``"last frame repeated"``; ``"largest code"``:
    clamped to the top of the codebook), else ``""`` (only the head's match is shown);
    ``first_divergent_frame``: the first frame whose samples differ (the codec's lookahead
    ``lookahead_frames`` spills a changed frame's effect that many frames earlier);
    ``head_snr_db``: SNR of the samples before it; SNRs in dB over the candidate's whole length.
    """

    extra_frames: int
    pad: str
    num_codebooks: int
    hypothesis_snr_db: float
    given_snr_db: float
    tail_frames: int = 0
    first_divergent_frame: int | None = None
    lookahead_frames: int = 0
    head_snr_db: float = math.inf


@dataclass
class CodebookShiftFit:
    """Codebooks ``rows`` are read ``shift_frames`` frames early (negative: late) against the
    others, as when a delay pattern is undone with an off-by-one for one group, or spurious
    code groups come before the codes (every row late: ``rows`` is all of them); the candidate
    has ``candidate_frames`` frames, of which ``frames_used`` are decoded from shifted codes
    and ``compared_frames`` (away from the edges by the codec's receptive field) are compared.
    SNRs in dB of the hypothesis and of the codes as given over those samples.
    """

    rows: tuple[int, ...]
    shift_frames: int
    frames_used: int
    num_codebooks: int
    hypothesis_snr_db: float
    given_snr_db: float
    candidate_frames: int = 0
    compared_frames: int = 0


@dataclass
class AudioPair:
    """The decoded reference/candidate pair and what was measured on it (facts, no findings).

    Attributes
    ----------
    codes : torch.LongTensor [shape=(num_codebooks, frames)]
    hop_length : int or None
        Samples per frame.
    reference, candidate : Any
        The raw decoded outputs (reference native layout; candidate as served).
    sr_reference, sr_candidate : int
        Hz.
    comparison : WaveformComparison
        :func:`porting_kit.probes.waveform.analyse_waveforms` of the pair (served mode).
    diagnosis : ContentDiagnosis or None
        The code-layout hypotheses, tried when no structural hypothesis fits, the
        samples are finite and the SNR is below ``FP32_MIN_SNR_DB``.
    bf16_snr_db : float or None
        SNR (dB) of the reference decoded under bf16 autocast against its fp32 decode.
    dtype_explains : bool
        No code layout fits, the candidate's residual error is the size a
        bf16/autocast decode makes (SNR within 20 dB of ``bf16_snr_db``), and the
        candidate's own decode of the same codes with its codec cast to float32
        (``codec_candidate()``) fixes it: reaches ``FP32_MIN_SNR_DB`` or gains
        ``FP32_FIX_DB`` (a codec stored in bf16 keeps its weights' rounding after the
        cast, so only the compute part of the error goes away). Without
        ``codec_candidate()`` the fix cannot be tried and nothing is blamed on the dtype.
    tail : TailFit or None
        The candidate differs only at its end: padding frames decoded as audio, or its last
        frames decoded from shifted codes.
    codebook_shift : CodebookShiftFit or None
        A group of codebooks is shifted by whole frames against the others.
    fp32_redecode_snr_db : float or None
        SNR (dB) of the candidate's decode with its codec cast to float32 (measured only
        when the low-precision hypothesis is tried and ``codec_candidate()`` exists).
    """

    codes: Any
    hop_length: int | None
    reference: Any
    candidate: Any
    sr_reference: int
    sr_candidate: int
    comparison: WaveformComparison
    diagnosis: ContentDiagnosis | None = None
    bf16_snr_db: float | None = None
    dtype_explains: bool = False
    tail: TailFit | None = None
    codebook_shift: CodebookShiftFit | None = None
    fp32_redecode_snr_db: float | None = None
    receptive_field: ReceptiveField | None = None


def missing_reason(spec) -> str | None:
    """Why the audio families cannot run on ``spec`` (``None`` when they can).

    Parameters
    ----------
    spec : Spec
        The port spec; each name in ``AUDIO_NAMES`` must be a function.

    Returns
    -------
    str or None
        The skip reason naming the missing functions, or None.
    """
    missing = [n for n in AUDIO_NAMES if not callable(spec.get(n))]
    if missing:
        return ("spec defines no audio names (" + ", ".join(f"{n}()" for n in missing)
                + " missing; see README 'Port spec: audio names')")
    return None


def hop_length_of_spec(spec) -> int | None:
    """The spec's hop length in samples: ``hop_length`` (int or function), else the product
    of ``codec_config()``'s upsampling ratios, else ``None``.

    Parameters
    ----------
    spec : Spec
        The port spec.

    Returns
    -------
    int or None
        Samples per code frame, or None when the spec says nothing.

    Raises
    ------
    InputError
        When ``codec_config()`` has no usable upsampling ratios.
    """
    h = spec.get("hop_length")
    if callable(h):
        h = spec.call("hop_length")
    if h is not None:
        return _positive_hop(spec, h, "hop_length")
    if callable(spec.get("codec_config")):
        from porting_kit.adapters.encodec_meta import hop_length_of

        try:
            h = hop_length_of(spec.call("codec_config"))
        except ValueError as exc:
            raise InputError(f"{spec.name}: codec_config(): {exc}") from exc
        return _positive_hop(spec, h, "codec_config()'s upsampling ratios")
    return None


def _positive_hop(spec, h, where: str) -> int:
    """``h`` as a positive whole number of samples per code frame, else InputError (a hop of 0
    makes every length hypothesis trivially true and the audio families pass on anything)."""
    import numbers

    if isinstance(h, bool) or not isinstance(h, numbers.Real) or h != int(h) or int(h) <= 0:
        raise InputError(f"{spec.name}: {where} gives a hop length of {h!r}: it must be a positive whole "
                         "number of samples per code frame")
    return int(h)


def served_channels_of_spec(spec) -> int:
    """The spec's ``served_channels`` (int or function; default 1, mono).

    Parameters
    ----------
    spec : Spec
        The port spec.

    Returns
    -------
    int
        Channels the port serves (>= 1).

    Raises
    ------
    InputError
        The value is not a positive integer.
    """
    v = spec.get("served_channels", 1)
    if callable(v):
        v = spec.call("served_channels")
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise InputError(f"{spec.name}: served_channels must be a positive int, got {v!r}")
    return int(v)


def _decode(spec, name: str, codes) -> tuple[Any, int]:
    out = spec.call(name, codes)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise InputError(f"{spec.name}: {name}() must return (waveform, sample_rate)")
    wav, sr = out
    return wav, int(sr)


def served(x: Any):
    """A waveform's mono mixdown ``np.ndarray [shape=(samples,)]`` (channel mean).

    Parameters
    ----------
    x : np.ndarray or torch.Tensor [shape=(samples,), (channels, samples) or (batch, channels, samples)]
        A decoded waveform, as :func:`porting_kit.probes.waveform.as_channels_first` accepts it.

    Returns
    -------
    np.ndarray [shape=(samples,)]
        The mean over channels.
    """
    return as_channels_first(x).mean(axis=0)


def codebook_hypotheses(codes) -> dict[str, Any]:
    """Code layouts a port gets wrong, as transforms of the correct (K, T) codes.

    ``frame_major_as_codebook_major``: the frame-major stream ``codes.T.reshape(-1)``
    (what an AR model emits, K codes per step) read back with ``reshape(K, T)``;
    ``codebook_major_as_frame_major``: the inverse (``codes.reshape(-1).reshape(T, K).T``);
    ``codebooks_reversed``: rows in reverse order.

    Parameters
    ----------
    codes : torch.Tensor [shape=(num_codebooks, frames)]
        The correct codes.

    Returns
    -------
    dict of str to torch.Tensor [shape=(num_codebooks, frames)]
        Hypothesis name to the mis-laid codes (``codebooks_reversed`` only when K > 1).
    """
    K, T = codes.shape
    out = {"frame_major_as_codebook_major": codes.T.reshape(-1).reshape(K, T),
           "codebook_major_as_frame_major": codes.reshape(-1).reshape(T, K).T.contiguous()}
    if K > 1:
        out["codebooks_reversed"] = codes.flip(0)
    return out


def autocast_decode(spec, codes, device: str = "cpu") -> tuple[Any, int]:
    """The reference decode under ``torch.autocast(device_type, dtype=torch.bfloat16)``:
    what a codec run in bf16 would serve.

    Parameters
    ----------
    spec : Spec
        The port spec; its ``decode_reference`` is called.
    codes : torch.Tensor [shape=(num_codebooks, frames)]
        The codes to decode.
    device : str, default "cpu"
        Where the reference runs; ``cuda*`` autocasts on CUDA, anything else on CPU.

    Returns
    -------
    (waveform, sample_rate)
        The decoded audio and its rate in Hz.

    Raises
    ------
    InputError
        When ``decode_reference`` does not return ``(waveform, sample_rate)``.
    """
    import torch

    dev = "cuda" if str(device).startswith("cuda") else "cpu"
    with torch.no_grad(), torch.autocast(dev, dtype=torch.bfloat16):
        return _decode(spec, "decode_reference", codes)


def get_audio_pair(ctx) -> AudioPair | str:
    """Decode the spec's codes on both sides and analyse them, once per run.

    Parameters
    ----------
    ctx : CheckContext
        The run's context; the pair is cached in ``ctx.state["audio.pair"]`` and
        shown in ``ctx.extras["audio_pair"]``.

    Returns
    -------
    AudioPair, or str
        The reason the audio families cannot run (a ``skip``).

    Raises
    ------
    InputError
        A spec audio function raised or returned something unusable.
    """
    if _STATE_KEY in ctx.state:
        return ctx.state[_STATE_KEY]
    spec = ctx.spec
    reason = missing_reason(spec)
    if reason:
        ctx.state[_STATE_KEY] = reason
        return reason
    import torch

    codes = spec.call("codes")
    if not (isinstance(codes, torch.Tensor) and codes.dim() == 2):
        raise InputError(f"{spec.name}: codes() must return a LongTensor (num_codebooks, frames), "
                         f"got {type(codes).__name__} {tuple(getattr(codes, 'shape', ()))}")
    if codes.numel() == 0:
        raise InputError(f"{spec.name}: codes() returned an empty tensor {tuple(codes.shape)}: "
                         "there is nothing to decode")
    if (codes.is_floating_point() or codes.is_complex()) and not bool(torch.isfinite(codes).all()):
        raise InputError(f"{spec.name}: codes() holds NaN/Inf: codes are codebook indices "
                         "(a LongTensor), there is nothing to decode")
    hop = hop_length_of_spec(spec)
    with torch.no_grad():
        ref, sr_r = _decode(spec, "decode_reference", codes)
        if served(ref).size == 0:
            raise InputError(f"{spec.name}: decode_reference() returned an empty clip for codes "
                             f"{tuple(codes.shape)}: there is no reference to compare against")
        cand, sr_c = _decode(spec, "decode_candidate", codes)
    cmp = analyse_waveforms(ref, cand, sr_r, sr_c, hop_length=hop, frames=int(codes.shape[1]),
                            served=True, served_channels=served_channels_of_spec(spec))
    pair = AudioPair(codes=codes, hop_length=hop, reference=ref, candidate=cand,
                     sr_reference=sr_r, sr_candidate=sr_c, comparison=cmp)
    structural = cmp.structural()
    nonfinite = bool(cmp.nonfinite)
    if not nonfinite:
        bf, _ = autocast_decode(spec, codes, ctx.device)
        r = served(ref)
        b = served(bf)
        n = min(r.size, b.size)
        pair.bf16_snr_db = snr_db(r[:n], b[:n])
    differs = cmp.content_snr_db < FP32_MIN_SNR_DB
    if hop and not nonfinite and (cmp.length is not None or (not structural and differs)):
        pair.receptive_field = receptive_field(spec, codes, hop, served(ref))
        pair.tail = tail_fit(spec, pair)
    lag = cmp.offset.lag_samples if cmp.offset is not None else 0
    whole_frames_late = bool(hop and structural == ["offset"] and lag > 0 and lag % hop == 0
                             and cmp.metrics.candidate_samples - cmp.metrics.reference_samples == lag)
    if whole_frames_late and not nonfinite:  # spurious code groups before the codes?
        pair.receptive_field = receptive_field(spec, codes, hop, served(ref))
        pair.codebook_shift = codebook_shift_fit(spec, pair)
    elif not structural and not nonfinite and differs and pair.tail is None:
        pair.codebook_shift = codebook_shift_fit(spec, pair)
        if pair.codebook_shift is None:
            _diagnose_content(spec, pair)
    ctx.state[_STATE_KEY] = pair
    ctx.extras["audio_pair"] = pair
    return pair


def _diagnose_content(spec, pair: AudioPair) -> None:
    """Same layout and timing, different samples: try the code-layout hypotheses, then the
    low-precision one (``pair.dtype_explains``)."""
    import torch

    cand = served(pair.candidate)
    tried = {}
    for name, codes2 in codebook_hypotheses(pair.codes).items():
        with torch.no_grad():
            y, _ = _decode(spec, "decode_reference", codes2)
        y = served(y)
        n = min(y.size, cand.size)
        tried[name] = snr_db(y[:n], cand[:n])
    best = max(tried, key=lambda k: tried[k]) if tried else None
    given = pair.comparison.content_snr_db
    fits = bool(best and tried[best] >= HYPOTHESIS_SNR_DB and tried[best] > given + 6)
    K, T = pair.codes.shape
    pair.diagnosis = ContentDiagnosis(tried, best, fits, given, int(K), int(T))
    bf = pair.bf16_snr_db
    if not fits and bf is not None and given >= bf - 20.0:
        pair.fp32_redecode_snr_db = fp32_redecode_snr(spec, pair)
        fixed = pair.fp32_redecode_snr_db
        pair.dtype_explains = bool(  # the dtype family reports it
            fixed is not None and fixed >= min(FP32_MIN_SNR_DB, given + FP32_FIX_DB))


def fp32_redecode_snr(spec, pair: AudioPair) -> float | None:
    """SNR (dB) of the candidate's decode of the same codes with its codec cast to float32.

    Casts ``codec_candidate()``'s floating parameters and buffers to float32 for one
    ``decode_candidate(codes)`` call and restores each one's dtype afterwards (bf16/fp16 ->
    fp32 -> back is exact).

    Parameters
    ----------
    spec : Spec
        Defines ``codec_candidate()`` (else ``None`` is returned: the fix cannot be tried).
    pair : AudioPair
        Its ``codes`` and ``reference`` (the fp32 reference decode).

    Returns
    -------
    float or None
        SNR of the re-decoded candidate's mono mixdown against the reference's, over the
        common length; ``None`` when the spec has no ``codec_candidate()``.
    """
    if not callable(spec.get("codec_candidate")):
        return None
    import torch

    codec = spec.call("codec_candidate")
    tensors = [t for t in list(codec.parameters()) + list(codec.buffers()) if t.is_floating_point()]
    saved = [t.data for t in tensors]
    try:
        for t in tensors:
            t.data = t.data.float()
        with torch.no_grad():
            y, _ = _decode(spec, "decode_candidate", pair.codes)
    finally:
        for t, d in zip(tensors, saved):
            t.data = d
    r, c = served(pair.reference), served(y)
    n = min(r.size, c.size)
    return snr_db(r[:n], c[:n])


def _decoded_mono(spec, codes):
    import torch

    with torch.no_grad():
        y, _ = _decode(spec, "decode_reference", codes)
    return served(y)


def receptive_field(spec, codes, hop: int, reference_mono: np.ndarray) -> ReceptiveField:
    """How far a change of one code frame reaches in the reference decode (one extra decode).

    Parameters
    ----------
    spec : Spec
        Its ``decode_reference`` is called once.
    codes : torch.Tensor [shape=(num_codebooks, frames)]
    hop : int
        Samples per frame.
    reference_mono : np.ndarray [shape=(samples,)]
        The reference decode of ``codes`` (mono mixdown).

    Returns
    -------
    ReceptiveField
        Frames before and after the changed middle frame whose samples moved by more than
        1e-6 of the peak; the whole signal when the change reaches everywhere.
    """
    T = int(codes.shape[1])
    j = T // 2
    top = max(int(codes.max()) + 1, 2)
    c2 = codes.clone()
    c2[:, j] = (codes[:, j] + 1) % top
    y = _decoded_mono(spec, c2)
    n = min(y.size, reference_mono.size)
    peak = float(np.max(np.abs(reference_mono))) if reference_mono.size else 0.0
    moved = np.flatnonzero(np.abs(y[:n] - reference_mono[:n]) > 1e-6 * max(peak, 1e-12))
    if moved.size == 0:
        return ReceptiveField(0, 0)
    return ReceptiveField(max(0, j - int(moved[0]) // hop), max(0, int(moved[-1]) // hop - j))


def _frame_errors(ref: np.ndarray, cand: np.ndarray, hop: int) -> np.ndarray:
    """Per-frame error energy of the common part, relative to the reference's mean frame energy."""
    n = min(ref.size, cand.size)
    frames = -(-n // hop)
    diff = np.zeros(frames * hop)
    diff[:n] = (ref[:n] - cand[:n]) ** 2
    per_frame = diff.reshape(frames, hop).sum(axis=1)
    energy = float(np.mean(ref[:n] ** 2)) * hop if n else 0.0
    return per_frame / max(energy, 1e-30)


def tail_fit(spec, pair: AudioPair) -> TailFit | None:
    """Does the candidate differ from the reference only at its end (a delay pattern's tail)?

    Tried when the candidate is as long as the reference or longer by a whole number ``e``
    of frames, ``e <= num_codebooks``. Two ways it fits:

    * the candidate's samples match the reference (as a clean decode does,
      ``FP32_MIN_SNR_DB``) up to a first divergent frame in the second half, and the frames
      that differ, less the codec's lookahead (:class:`ReceptiveField`), are at most
      ``num_codebooks`` frames at the end (the last frames decoded with codebooks already
      shifted, special tokens clamped to codes): ``pad`` names an exact padding when one fits;
    * ``e > 0``, the common part matches, and the extra samples are decoded audio (RMS at
      least a tenth of the reference's, not a silent pad); ``pad`` names the padding frames
      when the reference decodes the codes followed by ``e`` of them (code 0, the largest
      code, or the last frame repeated) to the candidate over its whole length.

    Parameters
    ----------
    spec : Spec
        Its ``decode_reference`` is called once per padding tried.
    pair : AudioPair
        Codes ``[shape=(K, T)]``, hop (samples), both decodes, ``receptive_field``.

    Returns
    -------
    TailFit or None
    """
    import torch

    hop = pair.hop_length
    m = pair.comparison.metrics
    extra = int(m.candidate_samples) - int(m.reference_samples)
    K, T = int(pair.codes.shape[0]), int(pair.codes.shape[1])
    if not hop or K < 2 or extra < 0 or extra % hop or extra // hop > K:
        return None
    e = extra // hop
    cand = served(pair.candidate)
    ref = served(pair.reference)
    given = snr_db(cand, np.concatenate([ref, np.zeros(max(cand.size - ref.size, 0))])[:cand.size])
    err = _frame_errors(ref, cand, hop)
    bad = np.flatnonzero(err > 10 ** (-FP32_MIN_SNR_DB / 10))
    rf = pair.receptive_field or ReceptiveField(0, 0)
    f0 = int(bad[0]) if bad.size else None
    n_ref_frames = -(-ref.size // hop)
    changed = 0 if f0 is None else max(n_ref_frames - f0 - rf.lookahead_frames, 0)
    if f0 is None and e == 0:
        return None
    if f0 is not None and not (2 * f0 >= T and changed <= K and (changed >= 1 or e > 0)):
        return None  # changed 0: only the codec's lookahead into the extra frames
    head = snr_db(ref[:(f0 if f0 is not None else n_ref_frames) * hop],
                  cand[:(f0 if f0 is not None else n_ref_frames) * hop])
    pads = {"code 0": torch.zeros((K, e), dtype=pair.codes.dtype),
            "largest code": torch.full((K, e), int(pair.codes.max()), dtype=pair.codes.dtype),
            "last frame repeated": pair.codes[:, -1:].repeat(1, e)} if e else {}
    for name, pad in pads.items():
        y = _decoded_mono(spec, torch.cat([pair.codes, pad], dim=1))
        if y.size != cand.size:
            continue
        s = snr_db(y, cand)
        if s >= HYPOTHESIS_SNR_DB and s > given + 6:
            return TailFit(e, name, K, s, given, changed, f0, rf.lookahead_frames, head)
    if f0 is None:  # the common part matches: the extra frames must sound like decoded audio
        rms = float(np.sqrt(np.mean(ref ** 2))) if ref.size else 0.0
        tail_rms = float(np.sqrt(np.mean(cand[ref.size:] ** 2)))
        if not tail_rms >= 0.1 * rms > 0:  # silence or a hand-made pad: length_mismatch says it
            return None
    return TailFit(e, "", K, head, given, changed, f0, rf.lookahead_frames, head)


def _row_groups(K: int) -> list[tuple[int, ...]]:
    """Codebook groups a delay-pattern undo can shift: prefixes, suffixes, single rows, and
    every row but one (the others shifted against one row kept in place)."""
    groups = [tuple(range(g)) for g in range(1, K)] + [tuple(range(g, K)) for g in range(1, K)]
    groups += [(k,) for k in range(K)]
    groups += [tuple(j for j in range(K) if j != k) for k in range(K)] if K > 2 else []
    return list(dict.fromkeys(groups))


def _shift_hypotheses(K: int, T: int, cand_frames: int, max_shift: int):
    """``(rows, shift)`` pairs to try: a group read ``shift`` frames early (negative: late),
    the candidate then ``T - |shift|``, ``T`` or ``T + |shift|`` frames long; every row late
    (spurious code groups before the codes) when the candidate is that much longer."""
    delta = cand_frames - T
    shifts = [abs(delta)] if delta else list(range(1, max_shift + 1))
    out = []
    for a in shifts:
        if a < 1 or T - a < 2:
            continue
        for s in (a, -a):
            out += [(rows, s) for rows in _row_groups(K)]
        if delta == a:
            out.append((tuple(range(K)), -a))
    return out


def codebook_shift_fit(spec, pair: AudioPair, max_shift: int = 3) -> CodebookShiftFit | None:
    """Is one group of codebooks shifted by whole frames against the others, or are spurious
    code groups decoded before the codes?

    Each hypothesis (:func:`_shift_hypotheses`: the candidate's frame count fixes the shift
    when it differs from the codes') says which codes each candidate frame holds; the frames
    whose codes it fixes are decoded on the reference and compared with the candidate's
    samples away from their edges by the codec's receptive field (so unknown filler codes
    never enter the comparison), against the codes as given over the same samples.

    Parameters
    ----------
    spec : Spec
        Its ``decode_reference`` is called per hypothesis.
    pair : AudioPair
        Codes, hop, both decodes, ``receptive_field``.
    max_shift : int, default 3
        Largest shift tried (frames) when the lengths are equal.

    Returns
    -------
    CodebookShiftFit or None
        The best hypothesis when it reaches ``HYPOTHESIS_SNR_DB`` and beats the codes as
        given by 6 dB over at least a quarter of the frames; else None.
    """
    codes, hop = pair.codes, pair.hop_length
    K, T = int(codes.shape[0]), int(codes.shape[1])
    if K < 2 or not hop:
        return None
    m = pair.comparison.metrics
    d = T * hop - int(m.reference_samples)
    nc = int(m.candidate_samples)
    if (nc + d) % hop:
        return None
    tc = (nc + d) // hop
    cand, ref = served(pair.candidate), served(pair.reference)
    rf = pair.receptive_field or ReceptiveField(0, 0)
    best: CodebookShiftFit | None = None
    for rows, s in _shift_hypotheses(K, T, tc, max_shift):
        late = [(-s if k in rows else 0) for k in range(K)]  # frames each row is read late
        a, b = max(0, max(late)), min(tc, T + min(late))
        lo, hi = rf.lookback_frames, b - a - rf.lookahead_frames  # local frames both sides fix
        if hi - lo < max(2, T // 4):
            continue
        sub = codes.new_empty((K, b - a))
        for k in range(K):
            sub[k] = codes[k, a - late[k]:b - late[k]]
        y = _decoded_mono(spec, sub)
        i0, i1 = lo * hop, min(hi * hop, y.size, cand.size - a * hop)
        if i1 - i0 < hop:
            continue
        c = cand[a * hop + i0:a * hop + i1]
        score = snr_db(y[i0:i1], c)
        j1 = min(a * hop + i1, ref.size)
        given = snr_db(ref[a * hop + i0:j1], c[:j1 - a * hop - i0]) if j1 > a * hop + i0 else -math.inf
        fit = CodebookShiftFit(tuple(rows), s, b - a, K, score, given, tc, (i1 - i0) // hop)
        if best is None or score > best.hypothesis_snr_db:
            best = fit
    if best and best.hypothesis_snr_db >= HYPOTHESIS_SNR_DB and best.hypothesis_snr_db > best.given_snr_db + 6:
        return best
    return None
