"""The embedded ``tts`` example's codec path: the candidate's serving glue, with fault knobs.

A TTS server does more with the codec than call it: it rebuilds the
(num_codebooks, frames) codes from the AR model's frame-major token stream,
decodes them, mixes the channels down, trims to the expected length, and
streams chunk by chunk. :class:`CodecGlue` is that glue, written the way a port
writes it; :class:`AudioOptions` holds one knob per audio fault code, and
:data:`AUDIO_VARIANTS` maps the spec's ``audio_*`` variants to them.

The stereo variants (``audio_interleaved_flatten``, ``audio_wrong_downmix``)
need a 2-channel codec - a mono codec has no channel layout to get wrong - so
they swap in the same codec config with ``audio_channels=2`` on both sides
(reference: transformers ``EncodecModel``; candidate: the port's
``CodecWrapper`` loading the same weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

#: Codes decoded by the audio checks: 4 codebooks (3 kbps) x 80 frames (1.07 s at 75 Hz).
NUM_CODEBOOKS = 4
FRAMES = 80
CODES_SEED = 4321
#: The port's streaming configuration (frames).
STREAM_CHUNK_FRAMES = 10
STREAM_CONTEXT_FRAMES = 24
STREAM_LOOKAHEAD_FRAMES = 2
#: The example codec's random init peaks near 1.9; its last conv is scaled so audio stays in [-1, 1].
OUTPUT_GAIN = 0.25


@dataclass
class AudioOptions:
    """Fault knobs of the candidate's codec glue; the defaults are the correct port.

    Attributes
    ----------
    trim_samples : int
        Samples cut from the end (``hop.length_mismatch``: length from ``frames - 1``).
    codes_reshape : bool
        Rebuild codes from the frame-major stream with ``reshape(K, T)`` (``hop.codebook_order``).
    offset_samples : int
        Leading zeros added (output length kept) (``hop.offset``).
    resample_to : int or None
        Resample the audio to this rate but keep reporting the codec's (``hop.duration_drift``).
    reported_rate : int or None
        Sample rate reported instead of the codec's (``hop.sample_rate_mismatch``).
    stream_context : int or None
        Left-context frames of the port's streaming config (``hop.stream_boundary``).
    lookahead_trim : str
        How each streamed chunk's lookahead samples are dropped: ``"decoded"`` (correct:
        the lookahead actually decoded), ``"none"`` (kept) or ``"fixed"`` (``lookahead *
        hop`` from every chunk, also where the codes end) (``hop.stream_lookahead``).
    batch_trim_row0 : bool
        Batched streaming runs and trims every request with request 0's (the longest)
        length (``hop.stream_batch_row``).
    stereo : bool
        Use the 2-channel codec (the stereo variants).
    interleave : bool
        Serve ``y.T.reshape(-1)`` (``channel.interleaved_flatten``).
    first_channel : bool
        Serve ``y[0]`` instead of the mean (``channel.wrong_downmix``).
    keep_channel_axis : bool
        Serve ``(1, samples)`` instead of ``(samples,)`` (``channel.shape_contract``).
    bf16 : bool
        Codec cast to bfloat16, output cast back to float32 (``dtype.codec_autocast``).
    """

    trim_samples: int = 0
    codes_reshape: bool = False
    offset_samples: int = 0
    resample_to: int | None = None
    reported_rate: int | None = None
    stream_context: int | None = None
    lookahead_trim: str = "decoded"
    batch_trim_row0: bool = False
    stereo: bool = False
    interleave: bool = False
    first_channel: bool = False
    keep_channel_axis: bool = False
    bf16: bool = False


#: ``audio_*`` variant -> (description, knobs).
AUDIO_VARIANTS: dict[str, tuple[str, AudioOptions]] = {
    "audio_hop_trim": ("codec glue computes the output length from frames - 1 (last hop cut)",
                       AudioOptions(trim_samples=320)),
    "audio_codebook_order": ("codec glue rebuilds codes from the frame-major stream with reshape(K, T)",
                             AudioOptions(codes_reshape=True)),
    "audio_offset": ("codec glue prepends 120 samples (5 ms) of pre-roll, keeping the length",
                     AudioOptions(offset_samples=120)),
    "audio_duration_drift": ("codec glue resamples 24 kHz audio to 22.05 kHz but still reports 24 kHz",
                             AudioOptions(resample_to=22050)),
    "audio_sample_rate": ("codec glue reports 22050 Hz for 24 kHz samples",
                          AudioOptions(reported_rate=22050)),
    "audio_stream_context": ("streaming decode uses 1 frame of left context (the decoder needs more)",
                             AudioOptions(stream_context=1)),
    "audio_interleaved_flatten": ("stereo codec output served as y.T.reshape(-1)",
                                  AudioOptions(stereo=True, interleave=True)),
    "audio_wrong_downmix": ("stereo codec output served as channel 0 instead of the mean",
                            AudioOptions(stereo=True, first_channel=True)),
    "audio_shape_contract": ("served waveform keeps its channel axis: shape (1, samples)",
                             AudioOptions(keep_channel_axis=True)),
    "audio_codec_bf16": ("codec cast to bfloat16 (output cast back to float32)",
                         AudioOptions(bf16=True)),
    # streaming with lookahead and batched streaming (issue 17 point 5)
    "audio_stream_lookahead_untrimmed": ("streaming decode feeds 2 lookahead frames but keeps their "
                                         "samples", AudioOptions(lookahead_trim="none")),
    "audio_stream_lookahead_fixed_trim": ("streaming decode trims 2 lookahead frames' samples from every "
                                          "chunk, also the last (which had none)",
                                          AudioOptions(lookahead_trim="fixed")),
    "audio_stream_batch_row_trim": ("batched streaming runs and trims every request with request 0's "
                                    "length (padding decoded as audio)", AudioOptions(batch_trim_row0=True)),
}


def audio_options(variant: str | None) -> AudioOptions:
    """The knobs of ``variant`` (the correct glue for any non-audio variant).

    Parameters
    ----------
    variant : str or None
        The spec's ``VARIANT``; a key of :data:`AUDIO_VARIANTS` selects its knobs.

    Returns
    -------
    AudioOptions
        The shared instance of :data:`AUDIO_VARIANTS` (do not modify), or a fresh default.
    """
    return AUDIO_VARIANTS[variant][1] if variant in AUDIO_VARIANTS else AudioOptions()


def example_codes(num_codebooks: int = NUM_CODEBOOKS, frames: int = FRAMES,
                  codebook_size: int = 1024):
    """Seeded codes, codebook-major.

    Parameters
    ----------
    num_codebooks : int, default 4
        ``K`` (4 codebooks = 3 kbps for the 24 kHz EnCodec layout).
    frames : int, default 80
        ``T``: code frames (80 frames = 1.07 s at 75 frames/s).
    codebook_size : int, default 1024
        Codes are drawn uniformly from ``[0, codebook_size)``.

    Returns
    -------
    torch.LongTensor [shape=(num_codebooks, frames)]
        The same on every call (seed :data:`CODES_SEED`; the global RNG is untouched).
    """
    import torch

    g = torch.Generator().manual_seed(CODES_SEED)
    return torch.randint(0, codebook_size, (num_codebooks, frames), generator=g)


def hf_decode(codec) -> Callable[[Any], Any]:
    """A decode function around a transformers ``EncodecModel``.

    Parameters
    ----------
    codec : transformers.EncodecModel

    Returns
    -------
    callable
        ``decode(codes [shape=(K, T)]) -> waveform [shape=(channels, T * hop)]``, float,
        run under ``torch.no_grad`` (``EncodecModel.decode`` with one chunk and no scale).
    """
    import torch

    def decode(codes):
        with torch.no_grad():
            return codec.decode(codes[None, None], [None], return_dict=False)[0][0]

    return decode


def wrapper_decode(wrapper) -> Callable[[Any], Any]:
    """A decode function through a port ``CodecWrapper``'s model, keeping every channel.

    Parameters
    ----------
    wrapper : porting_kit.embedded.tts_port.CodecWrapper

    Returns
    -------
    callable
        ``decode(codes [shape=(K, T)]) -> waveform [shape=(channels, T * hop)]``: the
        quantizer's embeddings then the decoder, under ``torch.no_grad``
        (``CodecWrapper.decode`` keeps channel 0 only, a mono-codec shortcut).
    """
    import torch

    def decode(codes):
        model = wrapper.model
        with torch.no_grad():
            emb = model.quantizer.decode(codes[None].transpose(0, 1))
            return model.decoder(emb)[0]

    return decode


def scale_output_(codec, gain: float = OUTPUT_GAIN) -> None:
    """Scale a transformers ``EncodecModel``'s output by ``gain``, in place.

    Parameters
    ----------
    codec : transformers.EncodecModel
        Its last decoder conv's weight-norm magnitude ``original0`` (or plain ``weight``)
        and bias are multiplied; the layer is linear, so the audio scales exactly.
    gain : float, default OUTPUT_GAIN (0.25)
        Linear factor (0.25 is -12 dB): keeps the random codec's peaks (about 1.9) in [-1, 1].
    """
    import torch

    conv = codec.decoder.layers[-1].conv
    with torch.no_grad():
        plist = getattr(conv, "parametrizations", None)
        if plist is not None and "weight" in plist:
            plist.weight.original0.mul_(gain)
        else:
            conv.weight.mul_(gain)
        conv.bias.mul_(gain)


def stereo_pair(codec_config, seed: int = 0):
    """The 2-channel version of ``codec_config``: a reference and a port loaded from it.

    Parameters
    ----------
    codec_config : transformers.EncodecConfig
        The mono config; copied with ``audio_channels=2``.
    seed : int, default 0
        Seed of the reference's random init
        (:func:`porting_kit.adapters.encodec_meta.build_hf_encodec`).

    Returns
    -------
    reference : transformers.EncodecModel
    candidate : porting_kit.embedded.tts_port.CodecWrapper
        In eval mode, loaded from the reference's state dict.
    """
    from porting_kit.adapters.encodec_meta import build_hf_encodec
    from porting_kit.embedded.tts_port import CodecWrapper

    kwargs = codec_config.to_dict()
    for k in ("model_type", "transformers_version", "architectures", "dtype", "torch_dtype"):
        kwargs.pop(k, None)
    kwargs["audio_channels"] = 2
    ref = build_hf_encodec(kwargs, seed)
    cand = CodecWrapper(ref.config)
    cand.model.load_state_dict(ref.state_dict())
    return ref, cand.eval()


class CodecGlue:
    """The candidate server's codec glue: codes in, served waveform out.

    Parameters
    ----------
    decode_raw : callable
        ``codes (K, T) -> waveform (C, samples)``, the port's codec call.
    sample_rate : int
        The codec's rate, Hz.
    hop_length : int
        Samples per frame.
    options : AudioOptions
        Fault knobs (defaults: correct).
    """

    def __init__(self, decode_raw: Callable[[Any], Any], sample_rate: int, hop_length: int,
                 options: AudioOptions | None = None):
        self.decode_raw = decode_raw
        self.sample_rate = int(sample_rate)
        self.hop_length = int(hop_length)
        self.options = options or AudioOptions()

    def layout_codes(self, codes):
        """Codes as the port rebuilds them from the AR model's frame-major token stream.

        Parameters
        ----------
        codes : torch.LongTensor [shape=(K, T)]
            Codebook-major codes.

        Returns
        -------
        torch.LongTensor [shape=(K, T)]
            The same codes (stream ``reshape(T, K).T``); with ``codes_reshape`` the planted
            ``reshape(K, T)`` that scrambles codebooks and frames.
        """
        K, T = codes.shape
        stream = codes.T.reshape(-1)  # K codes per AR step
        if self.options.codes_reshape:
            return stream.reshape(K, T)
        return stream.reshape(T, K).T

    def _raw(self, codes):
        y = self.decode_raw(codes)
        return y.float() if hasattr(y, "float") else y

    def serve(self, y) -> tuple[Any, int]:
        """Codec output -> (served waveform, reported sample rate).

        Parameters
        ----------
        y : torch.Tensor or array [shape=(channels, samples)]

        Returns
        -------
        waveform : torch.Tensor [shape=(samples,)], float32
            The channel mean, unless a knob plants a fault: interleaved ``y.T.reshape(-1)``
            [shape=(channels * samples,)], channel 0, trimmed by ``trim_samples``, delayed by
            ``offset_samples`` (length kept), resampled to ``resample_to`` Hz (librosa), or
            ``(1, samples)`` with ``keep_channel_axis``.
        sample_rate : int
            Hz: ``reported_rate`` when set, else the codec's.
        """
        import torch

        o = self.options
        y = y if isinstance(y, torch.Tensor) else torch.as_tensor(y)
        if o.interleave:
            out = y.T.reshape(-1)
        elif o.first_channel:
            out = y[0]
        else:
            out = y.mean(dim=0)
        if o.trim_samples:
            out = out[:out.shape[-1] - o.trim_samples]
        if o.offset_samples:
            out = torch.cat([torch.zeros(o.offset_samples, dtype=out.dtype), out])[:out.shape[-1]]
        if o.resample_to:
            import librosa

            out = torch.from_numpy(librosa.resample(out.numpy(), orig_sr=self.sample_rate,
                                                    target_sr=o.resample_to)).float()
        if o.keep_channel_axis:
            out = out[None]
        return out.float().contiguous(), int(o.reported_rate or self.sample_rate)

    def decode(self, codes) -> tuple[Any, int]:
        """Decode ``codes`` the way the port's server does.

        Parameters
        ----------
        codes : torch.LongTensor [shape=(K, T)]

        Returns
        -------
        waveform : torch.Tensor
            :meth:`serve` of the codec output of :meth:`layout_codes`.
        sample_rate : int
            Hz, as reported.
        """
        return self.serve(self._raw(self.layout_codes(codes)))

    def decode_stream(self, codes, chunk_frames: int, context_frames: int,
                      lookahead_frames: int = 0) -> tuple[Any, int]:
        """Streaming decode (a batch of one, :meth:`decode_stream_batch`), then the serving glue.

        Parameters
        ----------
        codes : torch.LongTensor [shape=(K, T)]
        chunk_frames : int
            Frames per chunk.
        context_frames : int
            Frames of left context decoded before each chunk and dropped from its output.
        lookahead_frames : int, default 0
            Frames decoded after each chunk and dropped from its output.

        Returns
        -------
        waveform : torch.Tensor
        sample_rate : int
            Hz, as reported.
        """
        (y,) = self.decode_stream_batch(codes[None], [int(codes.shape[-1])], chunk_frames,
                                        context_frames, lookahead_frames, serve=False)
        return self.serve(y)

    def decode_stream_batch(self, codes, lengths: list[int], chunk_frames: int, context_frames: int,
                            lookahead_frames: int = 0, serve: bool = True) -> list[Any]:
        """Batched streaming decode of a padded batch: one codec window per chunk step.

        Parameters
        ----------
        codes : torch.LongTensor [shape=(B, K, max_frames)]
            Padded batch; request ``r`` holds ``lengths[r]`` frames.
        lengths : list of int
            Frames of each request.
        chunk_frames, context_frames, lookahead_frames : int
            As in :meth:`decode_stream`.
        serve : bool, default True
            Pass each request's audio through :meth:`serve` (waveform only).

        Returns
        -------
        list of torch.Tensor
            One waveform per request (served form; ``(C, samples)`` codec output with
            ``serve=False``).

        Notes
        -----
        Step ``[s, e)`` decodes the window ``[s - context, min(max_frames, e + lookahead))`` of
        every request still running (the codec is causal, so padding frames after a request's
        end do not change its samples) and keeps request ``r``'s samples from
        ``(s - a) * hop - d`` to its own end ``min(lengths[r], e)`` (its lookahead clipped at
        its own length), the way :func:`porting_kit.probes.streaming.stream_decode` slices.
        """
        import torch

        from porting_kit.probes.streaming import output_trim

        o, hop = self.options, self.hop_length
        ends = [int(lengths[0])] * len(lengths) if o.batch_trim_row0 else [int(n) for n in lengths]
        T = int(codes.shape[-1])
        # each request's codes rebuilt from its own token stream, its padding kept after them
        rows = [torch.cat([self.layout_codes(codes[r, :, :n]), codes[r, :, n:]], dim=-1)
                for r, n in enumerate(lengths)]
        parts: list[list[Any]] = [[] for _ in lengths]
        for s in range(0, T, chunk_frames):
            e, a = min(T, s + chunk_frames), max(0, s - context_frames)
            b = min(T, e + lookahead_frames)
            for r, n in enumerate(ends):
                if s >= n:
                    continue
                y = self._raw(rows[r][:, a:b])
                d = output_trim(b - a, y.shape[-1], hop)
                start = 0 if s == 0 else max((s - a) * hop - d, 0)
                stop = (min(n, e) - a) * hop - d  # this request's own end
                if o.lookahead_trim == "none":
                    stop = (min(n, e + lookahead_frames) - a) * hop - d
                elif o.lookahead_trim == "fixed":
                    stop = (min(n, e + lookahead_frames) - a) * hop - d - lookahead_frames * hop
                parts[r].append(y[:, start:stop])
        out = [torch.cat(p, dim=-1).float() for p in parts]
        return [self.serve(y)[0] for y in out] if serve else out
