"""A tiny generator-style TTS model in the MOSS-TTS-Nano shape, with fault knobs.

The whole TTS pipeline runs inside one AR worker, as vLLM-Omni 0.30.0's
``model_executor/models/moss_tts_nano/modeling_moss_tts_nano.py`` does:

* ``forward()`` keeps one Python generator per request in ``self._stream_gens``,
  keyed by ``global_request_id``; each call advances every row's generator by one
  audio chunk and returns it in ``multimodal_outputs["model_outputs"]`` (a delta,
  one 1-D float32 tensor per row);
* each generator samples codec tokens from its own ``torch.Generator`` seeded with
  the request's ``seed`` (never the process RNG), decodes them with a float32
  codec into stereo audio and mixes it down to mono by the channel mean;
* ``compute_logits()`` forces EOS (token 2) on exactly the rows whose last chunk
  was just yielded and a non-EOS token on the others;
* ``on_requests_finished()`` closes the generators of finished / aborted
  requests, so their ``finally`` block removes the request's temp WAV;
* rows flagged ``_is_dummy`` (and the profile call with no rows) finish at once.

The model is seeded random weights (no checkpoint): a text-conditioned GRU over
a 32-entry codebook and a sinusoidal "codec" (each code is a pitch; a text's
pitch register comes from its bytes, so requests sound different). A request of
``w`` words yields ``w + 1`` chunks of ``FRAMES_PER_CHUNK * HOP`` samples.

``fault`` plants one known porting mistake (see :data:`FAULTS`).
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

SAMPLE_RATE = 24000  #: Hz
HOP = 240  #: samples per codec frame (10 ms)
FRAMES_PER_CHUNK = 4  #: codec frames per streamed chunk (40 ms)
CODEBOOK = 32
HIDDEN = 16
VOCAB = 8  #: logits width of compute_logits
EOS_TOKEN_ID = 2  #: moss_tts_nano/pipeline.py stop_token_ids
SAFE_TOKEN_ID = 1

#: fault knob -> what it plants (the embedded spec's VARIANTS use the same names).
FAULTS = {
    "key_constant": "per-request state keyed by a constant: every request shares one generator",
    "key_legacy_fallback": "keyed by the legacy `_omni_req_id` the engine never sets, "
                           "falling back to one shared key",
    "key_list_repr": "keyed by str() of the one-element list global_request_id arrives as, so "
                     "on_requests_finished (plain ids) never finds it (as upstream MOSS-TTS-Nano)",
    "global_manual_seed": "torch.manual_seed(seed) inside the request (restored only when its stream "
                          "ends, as upstream), sampling from the process RNG",
    "sampling_global_rng": "per-request generator built but torch.multinomial called without generator=",
    "unseeded_generator": "the request's seed is ignored: the generator is seeded from OS entropy",
    "no_on_requests_finished": "no on_requests_finished(): aborted requests keep their generator",
    "cumulative_output": "each step returns the whole waveform so far instead of the new chunk",
    "dummy_leaves_rows_running": "the dummy/profile call leaves its rows running (no EOS)",
    "dummy_missing_model_outputs": "the dummy/profile return path has no 'model_outputs' key",
    "eos_flags_creation_order": "EOS flags listed in request-creation order, not batch-row order",
    "stereo_not_mixed": "codec's (2, T) stereo chunk served without the mono mixdown",
}


class OmniOutput(NamedTuple):
    """Same fields as vLLM-Omni's ``model_executor/models/output_templates.py: OmniOutput``
    (defined here so the example runs without vLLM-Omni installed).

    Attributes
    ----------
    text_hidden_states : torch.Tensor [shape=(tokens, HIDDEN)]
        What ``compute_logits`` reads (zeros here).
    multimodal_outputs : dict or None, default None
        ``{"model_outputs": [chunk per row], "sr": [tensor(24000) per row]}``.
    intermediate_tensors : Any, default None
        Unused (pipeline parallelism).
    next_token_id : torch.Tensor or None, default None
        Unused.
    """

    text_hidden_states: torch.Tensor
    multimodal_outputs: dict | None = None
    intermediate_tensors: Any = None
    next_token_id: torch.Tensor | None = None


def _pick(info: dict, key: str, default: Any) -> Any:
    """A scalar from an ``additional_information`` dict: the engine wraps values in
    one-element lists (same convention as MOSS-TTS-Nano's ``_pick``)."""
    val = info.get(key, default)
    if isinstance(val, (list, tuple)) and len(val) > 0:
        return val[0]
    return val if val is not None else default


def _to_mono_1d(waveform: torch.Tensor) -> torch.Tensor:
    """``(channels, samples)`` -> ``(samples,)`` float32 by the channel mean."""
    chunk = torch.as_tensor(waveform, dtype=torch.float32).cpu()
    if chunk.ndim == 2 and chunk.shape[0] > 1:
        return chunk.mean(dim=0).contiguous()
    return chunk.reshape(-1)


class TinyCodecLM(nn.Module):
    """Text-conditioned GRU over codec tokens.

    ``step(h, prev_code, bias) -> (logits [shape=(CODEBOOK,)], h [shape=(1, HIDDEN)])``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.text_emb = nn.Embedding(256, HIDDEN)
        self.code_emb = nn.Embedding(CODEBOOK + 1, HIDDEN)  # last index = BOS
        self.cell = nn.GRUCell(HIDDEN, HIDDEN)
        self.head = nn.Linear(HIDDEN, CODEBOOK)

    def init_state(self, text: str) -> torch.Tensor:
        """Initial GRU state of a request: the mean byte embedding of its text.

        Parameters
        ----------
        text : str
            UTF-8 bytes are the token ids (an empty text uses byte 0).

        Returns
        -------
        torch.Tensor [shape=(1, HIDDEN)]
        """
        ids = torch.tensor(list(text.encode("utf-8")) or [0], dtype=torch.long,
                           device=self.text_emb.weight.device)
        return self.text_emb(ids).mean(dim=0, keepdim=True)

    def step(self, h: torch.Tensor, prev_code: int, bias: torch.Tensor):
        """One AR step: the next code's logits and the new state.

        Parameters
        ----------
        h : torch.Tensor [shape=(1, HIDDEN)]
            GRU state.
        prev_code : int
            Previous code in ``[0, CODEBOOK]`` (``CODEBOOK`` = BOS).
        bias : torch.Tensor [shape=(CODEBOOK,)]
            Added to the logits (the text's pitch register).

        Returns
        -------
        logits : torch.Tensor [shape=(CODEBOOK,)]
        h : torch.Tensor [shape=(1, HIDDEN)]
            On the module's device.
        """
        h = self.cell(self.code_emb(torch.tensor([prev_code], device=self.head.weight.device)), h)
        return self.head(h)[0] + bias, h


class TinySineCodec(nn.Module):
    """Codes -> stereo waveform, float32.

    Code ``k`` is a tone of ``110 * 2**(k / 8)`` Hz; the phase runs on across frames
    and chunks (the streaming decoder state), left/right differ in gain and phase,
    and a small learned per-code texture is added.
    ``decode(codes [shape=(F,)], phase) -> (audio [shape=(2, F*HOP)], phase)``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.texture = nn.Embedding(CODEBOOK, 2 * HOP)

    def decode(self, codes: torch.Tensor, phase: float):
        """Codes -> stereo audio, carrying the oscillator phase across calls.

        Parameters
        ----------
        codes : torch.LongTensor [shape=(frames,)]
            Each code ``k`` is a tone of ``110 * 2**(k / 8)`` Hz for one frame of ``HOP`` samples.
        phase : float
            Radians, where the previous chunk's oscillator stopped (0.0 for the first chunk).

        Returns
        -------
        audio : torch.Tensor [shape=(2, frames * HOP), float32]
            Left gain 0.30, right 0.24 with a 0.3 rad phase lead, plus a +-0.02 learned texture;
            on the module's device.
        phase : float
            Radians in ``[0, 2 pi)`` for the next chunk.
        """
        t = torch.arange(HOP, dtype=torch.float32, device=self.texture.weight.device)
        frames = []
        for k in codes.tolist():
            freq = 110.0 * 2.0 ** (k / 8.0)
            ph = phase + 2 * math.pi * freq * t / SAMPLE_RATE
            left = 0.30 * torch.sin(ph)
            right = 0.24 * torch.sin(ph + 0.3)
            tex = 0.02 * torch.tanh(self.texture.weight[k].float()).view(2, HOP)
            frames.append(torch.stack([left, right]) + tex)
            phase = float((phase + 2 * math.pi * freq * HOP / SAMPLE_RATE) % (2 * math.pi))
        return torch.cat(frames, dim=1).to(torch.float32), phase


class GeneratorTTSNoFinishHook(nn.Module):
    """The generator-style model without ``on_requests_finished``.

    This class is the ``no_on_requests_finished`` fault; :class:`GeneratorTTS` adds the
    hook.

    Parameters
    ----------
    fault : str or None, default None
        A key of :data:`FAULTS`, or ``None`` for the clean model.
    weight_seed : int, default 0
        Seed of the random weights (drawn on the CPU in a forked RNG: the process RNGs are
        untouched and every device gets the same weights).
    device : str or torch.device, optional
        Where the model lives and decodes (its sampling generators too); default
        ``torch.get_default_device()``, so a model built under ``with torch.device("cuda"):``
        (as vLLM builds models) lands on the GPU. Audio chunks are returned on the CPU.

    Raises
    ------
    ValueError
        ``fault`` is not a key of :data:`FAULTS`.
    """

    requires_raw_input_tokens = True
    have_multimodal_outputs = True
    has_preprocess = False
    enable_update_additional_information = True

    def __init__(self, fault: str | None = None, *, weight_seed: int = 0, device=None) -> None:
        super().__init__()
        if fault is not None and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
        self.fault = fault
        device = torch.device(device) if device is not None else torch.get_default_device()
        # Seeded init on the CPU without touching the caller's process RNGs: fork_rng restores
        # the CPU generator, and only that one is seeded (torch.manual_seed would reseed CUDA's)
        with torch.device("cpu"), torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(weight_seed)
            self.lm = TinyCodecLM()
            self.codec = TinySineCodec()
        self.to(device)
        self.eval()
        self._stream_gens: dict[str, Any] = {}
        self._created: dict[str, int] = {}
        self._n_created = 0
        self._ar_last_chunk_flags: list[bool] = []

    # -- per-request stream -----------------------------------------------------
    def _request_key(self, info: dict) -> str:
        if self.fault == "key_constant":
            return "default"
        if self.fault == "key_legacy_fallback":
            return str(_pick(info, "_omni_req_id", None) or "stream")
        if self.fault == "key_list_repr":
            return str(info.get("global_request_id"))
        gid = _pick(info, "global_request_id", None)
        return str(gid) if gid is not None else f"anonymous-{id(info)}"

    def get_dummy_runtime_additional_information(self, num_reqs: int) -> list[dict]:
        """Rows for the generation runner's dummy run, flagged ``_is_dummy``.

        Parameters
        ----------
        num_reqs : int
            Number of dummy rows.

        Returns
        -------
        list of dict
            ``num_reqs`` references to one ``{"text": "hello", "_is_dummy": True}`` dict.
        """
        return [{"text": "hello", "_is_dummy": True}] * num_reqs

    def _create_stream_gen(self, info: dict):
        """Yields ``(chunk, is_last)``; chunk is ``[shape=(FRAMES_PER_CHUNK*HOP,)]`` float32."""
        text = str(_pick(info, "text", "") or "")
        seed = _pick(info, "seed", None)
        temperature = float(_pick(info, "audio_temperature", 0.8))
        top_k = int(_pick(info, "audio_top_k", 8))
        dev = self.lm.head.weight.device
        gen = torch.Generator(device=dev)
        if seed is None or self.fault == "unseeded_generator":
            gen.seed()
        else:
            gen.manual_seed(int(seed))
        saved_rng = None
        if self.fault == "global_manual_seed" and seed is not None:
            # upstream MOSS-TTS-Nano's mitigation: seed the process RNG, restore it when the
            # request's stream ends -- the state is still mutated between the request's steps
            saved_rng = torch.get_rng_state()
            torch.manual_seed(int(seed))
        draw_from = None if self.fault in ("global_manual_seed", "sampling_global_rng") else gen

        with tempfile.NamedTemporaryFile(suffix=".wav", delete=False) as tmp:
            staged = Path(tmp.name)  # upstream writes its output WAV here
        try:
            n_chunks = len(text.split()) + 1
            center = sum(text.encode("utf-8")) % (CODEBOOK - 8) + 4
            bias = -((torch.arange(CODEBOOK, dtype=torch.float32, device=dev) - center) / 3.0) ** 2
            h = self.lm.init_state(text)
            prev, phase = CODEBOOK, 0.0
            emitted: list[torch.Tensor] = []
            for c in range(n_chunks):
                codes = []
                for _ in range(FRAMES_PER_CHUNK):
                    logits, h = self.lm.step(h, prev, bias)
                    logits = logits / max(temperature, 1e-5)
                    kth = torch.topk(logits, min(top_k, CODEBOOK)).values[-1]
                    probs = torch.softmax(logits.masked_fill(logits < kth, float("-inf")), dim=-1)
                    prev = int(torch.multinomial(probs, 1, generator=draw_from))
                    codes.append(prev)
                stereo, phase = self.codec.decode(torch.tensor(codes, device=dev), phase)
                chunk = stereo.cpu() if self.fault == "stereo_not_mixed" else _to_mono_1d(stereo)  # noqa: PK301 - planted stereo_not_mixed fault, one copy per chunk as upstream
                emitted.append(chunk)
                out = torch.cat(emitted, dim=-1) if self.fault == "cumulative_output" else chunk
                yield out, c == n_chunks - 1
        finally:
            staged.unlink(missing_ok=True)
            if saved_rng is not None:
                torch.set_rng_state(saved_rng)

    # -- engine interface -------------------------------------------------------
    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor | None = None, positions: torch.Tensor | None = None,
                intermediate_tensors: Any = None, inputs_embeds: torch.Tensor | None = None,
                runtime_additional_information: list[dict] | None = None, **kwargs: Any) -> OmniOutput:
        """One engine step: one audio chunk per row.

        Parameters
        ----------
        input_ids : torch.LongTensor [shape=(tokens,)], optional
            Only its length is used (rows of ``text_hidden_states``).
        positions : torch.LongTensor [shape=(tokens,)], optional
            Unused.
        intermediate_tensors, inputs_embeds : optional
            Unused (vLLM signature).
        runtime_additional_information : list of dict, optional
            One dict per batch row (``global_request_id``, ``text``, ``seed``,
            ``audio_temperature``, ``audio_top_k``; values as one-element lists). Empty or all
            ``_is_dummy``: the profile / dummy call, every row finishes at once.
        **kwargs
            ``model_intermediate_buffer`` and other engine keywords; ignored.

        Returns
        -------
        OmniOutput
            ``text_hidden_states`` [shape=(tokens, HIDDEN)] zeros on the model's device and ``multimodal_outputs =
            {"model_outputs": [chunk per row], "sr": [tensor(24000) per row]}``; a chunk is
            [shape=(FRAMES_PER_CHUNK * HOP,)] = 960 samples (40 ms) of mono float32, empty for a
            dummy row or an exhausted stream.
        """
        sr = torch.tensor(SAMPLE_RATE, dtype=torch.int32)
        empty = torch.zeros((0,), dtype=torch.float32)
        n_tok = 1 if input_ids is None else max(1, int(input_ids.shape[0]))
        hidden = torch.zeros((n_tok, HIDDEN), dtype=torch.float32, device=self.lm.head.weight.device)
        infos = runtime_additional_information or [{}]

        if not runtime_additional_information or all(i.get("_is_dummy") for i in infos):
            done = self.fault != "dummy_leaves_rows_running"
            self._ar_last_chunk_flags = [done] * len(infos)
            mm: dict[str, Any] = {"model_outputs": [empty] * len(infos), "sr": [sr] * len(infos)}
            if self.fault == "dummy_missing_model_outputs":
                mm = {"sr": [sr] * len(infos)}
            return OmniOutput(text_hidden_states=hidden, multimodal_outputs=mm)

        outputs, flags, keys = [], [], []
        for info in infos:
            if info.get("_is_dummy"):
                outputs.append(empty)
                flags.append(True)
                keys.append(None)
                continue
            key = self._request_key(info)
            if key not in self._stream_gens:
                self._stream_gens[key] = self._create_stream_gen(info)
                self._created[key] = self._n_created
                self._n_created += 1
            try:
                chunk, is_last = next(self._stream_gens[key])
            except StopIteration:
                self._stream_gens.pop(key, None)
                chunk, is_last = empty, True
            else:
                if is_last:
                    self._stream_gens.pop(key, None)
            outputs.append(chunk)
            flags.append(bool(is_last))
            keys.append(key)
        if self.fault == "eos_flags_creation_order":
            order = sorted(range(len(keys)), key=lambda i: self._created.get(keys[i], -1))
            flags = [flags[i] for i in order]
        self._ar_last_chunk_flags = flags
        return OmniOutput(text_hidden_states=hidden,
                          multimodal_outputs={"model_outputs": outputs, "sr": [sr] * len(infos)})

    def compute_logits(self, hidden_states: torch.Tensor | OmniOutput,
                       sampling_metadata: Any = None) -> torch.Tensor:
        """Forced logits: EOS on rows whose last chunk was just yielded.

        Parameters
        ----------
        hidden_states : torch.Tensor [shape=(rows, HIDDEN)] or OmniOutput
            Only the number of rows is used.
        sampling_metadata : Any, optional
            Unused (vLLM signature).

        Returns
        -------
        torch.Tensor [shape=(rows, VOCAB)]
            On ``hidden_states``' device: ``1e6`` at EOS (token 2) on rows flagged finished by the latest ``forward``, else
            ``-1e9`` at EOS and ``1e6`` at token 1; rows beyond the latest batch count as
            finished.
        """
        if isinstance(hidden_states, OmniOutput):
            hidden_states = hidden_states.text_hidden_states
        rows = int(hidden_states.shape[0]) if hidden_states.ndim >= 1 else 1
        logits = torch.zeros((rows, VOCAB), dtype=torch.float32)
        flags = self._ar_last_chunk_flags
        for r in range(rows):
            if flags[r] if r < len(flags) else True:
                logits[r, EOS_TOKEN_ID] = 1.0e6
            else:
                logits[r, EOS_TOKEN_ID] = -1.0e9
                logits[r, SAFE_TOKEN_ID] = 1.0e6
        return logits.to(hidden_states.device)  # built on the host: one copy, not one per row

    def load_weights(self, weights) -> set[str]:
        """Weights are seeded in ``__init__``; drain the iterator (vLLM convention).

        Parameters
        ----------
        weights : iterable of (str, torch.Tensor)
            Consumed and ignored.

        Returns
        -------
        set of str
            Every parameter name (reported as loaded, as vLLM's loaders do).
        """
        for _ in weights:
            pass
        return {name for name, _ in self.named_parameters()}


class GeneratorTTS(GeneratorTTSNoFinishHook):
    """The generator-style model with ``on_requests_finished`` (the normal case)."""

    def on_requests_finished(self, finished_req_ids) -> None:
        """Close the generators of finished / aborted requests (runs their cleanup).

        Parameters
        ----------
        finished_req_ids : iterable of str
            Request ids as the engine passes them (plain ``global_request_id`` strings); an id
            with no live generator is ignored.
        """
        for req_id in finished_req_ids:
            gen = self._stream_gens.pop(str(req_id), None)
            if gen is not None:
                gen.close()


def build_model(fault: str | None = None, device=None) -> GeneratorTTSNoFinishHook:
    """The example model with ``fault`` planted.

    Parameters
    ----------
    fault : str or None, default None
        A key of :data:`FAULTS`; ``None`` is the clean model.
    device : str or torch.device, optional
        Where the model lives (default ``torch.get_default_device()``).

    Returns
    -------
    GeneratorTTSNoFinishHook
        A :class:`GeneratorTTS`, except for ``no_on_requests_finished``.

    Raises
    ------
    ValueError
        Unknown ``fault``.
    """
    if fault == "no_on_requests_finished":
        return GeneratorTTSNoFinishHook(fault, device=device)
    return GeneratorTTS(fault, device=device)
