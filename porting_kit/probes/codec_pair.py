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
``decode_candidate_stream(codes, chunk_frames, context_frames) -> (waveform, sample_rate)``, optional
    The port's streaming decode: chunks of ``chunk_frames`` frames, each
    decoded with ``context_frames`` frames of left context, concatenated.
    ``stream_chunk_frames`` / ``stream_context_frames`` (ints, optional)
    are the port's configured values (defaults 10 and 8).
``codec_candidate() -> nn.Module``, optional
    The candidate's codec module; its parameters must be float32 (dtype check).

The reference decode, the candidate decode and the hypotheses they need are
computed once (:func:`get_audio_pair`, cached in ``ctx.state["audio.pair"]``)
as facts (:class:`AudioPair`); the ``hop``, ``channel`` and ``dtype`` families
(:mod:`porting_kit.checks`) judge their part of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from porting_kit.errors import InputError
from porting_kit.probes.waveform import (FP32_MIN_SNR_DB, HYPOTHESIS_SNR_DB, WaveformComparison,
                                         analyse_waveforms, as_channels_first, snr_db)

from porting_kit.spec import AUDIO_NAMES  # noqa: E402  (one list of the audio names)
_STATE_KEY = "audio.pair"


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
        No code layout fits and the candidate's residual error is the size a
        bf16/autocast decode makes (SNR within 20 dB of ``bf16_snr_db``).
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
        return int(h)
    if callable(spec.get("codec_config")):
        from porting_kit.adapters.encodec_meta import hop_length_of

        try:
            return hop_length_of(spec.call("codec_config"))
        except ValueError as exc:
            raise InputError(f"{spec.name}: codec_config(): {exc}") from exc
    return None


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
    hop = hop_length_of_spec(spec)
    with torch.no_grad():
        ref, sr_r = _decode(spec, "decode_reference", codes)
        cand, sr_c = _decode(spec, "decode_candidate", codes)
    cmp = analyse_waveforms(ref, cand, sr_r, sr_c, hop_length=hop, frames=int(codes.shape[1]),
                            served=True)
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
    if not structural and not nonfinite and cmp.content_snr_db < FP32_MIN_SNR_DB:
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
        pair.dtype_explains = True  # the dtype family reports it
