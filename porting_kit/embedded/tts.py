"""Tiny TTS: transformers Qwen3 LM over codec tokens + EnCodec decoder vs a vLLM-style port.

The embedded default port spec (``porting-kit check`` with no SPEC). The
reference (:mod:`porting_kit.embedded.tts_reference`) is built from real
transformers classes with seeded random weights; the candidate
(:mod:`porting_kit.embedded.tts_port`) is written as a vLLM-Omni port is written
and gets its weights through its own ``load_weights``. Both build and run in well
under a second on CPU.

Variants (``porting-kit check --example tts:NAME``) plant one fault each through
:class:`~porting_kit.embedded.tts_port.PortOptions` (or, for
``rope_scaling_ignored``, give the reference a linear ``rope_parameters`` with
factor 4 that the port drops). Values chosen so the faults show:

* ``norm_eps``: reference eps 1e-6, candidate 1e-5. The LM's embeddings have
  std 0.02 (mean square 4e-4), so eps 1e-5 moves the first norm's output by ~1 %.
* ``rope_position_offset``: only the queries are shifted (by 3). RoPE is
  relative: shifting queries and keys alike changes no q.k score, so a uniform
  shift would leave the output unchanged.
* ``norm_no_fp32_upcast``: identical to the clean port in float32; it differs
  only when run in bfloat16 (``--dtype bfloat16``).
* ``fp16_overflow``: a weight change on the reference (it flows to the port): one
  intermediate neuron of layer 0's MLP is amplified so one hidden channel peaks at
  :data:`OVERFLOW_PEAK` (2e5) on the example input, as the "massive activations" of real
  LLMs (Sun et al., 2024) do; every weight stays inside float16's range. float32 and
  bfloat16 hold it; float16 (max 65504) overflows to Inf at layer 0's ``down_proj`` on
  both sides (``dtype.fp16_overflow``).

* ``tp_*`` (``--tp N``): faults of the sharded port :func:`candidate_tp` only (the
  single-process port is clean); ``tp_row_bias`` gives the reference attention
  biases (random, so a bias added once per rank shows).

* ``decode_position`` / ``decode_kv_stale`` (family ``decode``): the whole-sequence forward
  is clean; :func:`candidate_step` gives a one-token step position 0, or the port's KV
  cache drops its last token before a one-token step attends (``Attention.kv_drop_last``).
* ``sampling_*`` (family ``sampling``): faults in the port's sampler,
  :mod:`porting_kit.embedded.tts_sampling`; ``sampling_draw_*``: faults in its draw only (the
  logits processor is clean), named from the draws.
* ``features_*`` (family ``features``): faults in the port's reference-audio log-mel extractor,
  :mod:`porting_kit.embedded.tts_features`.

Spec names: ``reference``, ``candidate``, ``candidate_tp``, ``inputs``, ``run_reference``,
``run_candidate``, ``reference_config``, ``candidate_config``, ``candidate_step``
(the reference is stepped through its ``cache`` argument), ``sampling_params``,
``candidate_logits_processor``, ``candidate_sampler``, ``sampling_vocab_size``, ``reference_features``,
``candidate_features``, ``engine_model`` (the
serving-side AR worker for the ``rng`` / ``lifecycle`` families: the embedded
generator's clean model, so ``porting-kit check`` with no arguments runs every family
that one CPU process can), the audio names below; models expose
their codecs as ``reference.codec`` (transformers ``EncodecModel``) and
``candidate.codec`` (:class:`~porting_kit.embedded.tts_port.CodecWrapper`); both
have ``decode(codes (batch, n_codebooks, frames)) -> waveform (batch, samples)``
(on the reference: ``reference.decode``).
"""

from __future__ import annotations

from typing import Any

VARIANTS = {
    "qkv_shard_order": "fused qkv loader writes shards k, q, v (q and k swapped)",
    "unmapped_weight": "load_weights silently skips layer 1 mlp.down_proj (keeps the port's init)",
    "nan_layer": "NaN injected into the output of layer 1's MLP",
    "rope_inv_freq_uninitialized": "port built on the meta device + to_empty(); inv_freq never recomputed",
    "rope_theta_default": "port reads config.rope_theta only, falls back to 10000 (reference 1e6 in rope_parameters)",
    "rope_interleaved": "port rotates interleaved pairs (GPT-J) instead of halves (NeoX)",
    "rope_partial": "port applies rotary to half of head_dim only",
    "rope_position_offset": "port rotates queries at position + 3 (keys at the engine's positions)",
    "rope_scaling_ignored": "reference uses linear rope scaling factor 4; the port drops it",
    "rope_low_precision": "port computes inv_freq and cos/sin in bfloat16",
    "rope_padded_half": "port does partial rotary by padding: inv_freq over half of head_dim, "
                        "zero-padded to the full head (rotated fraction 0.5, reference 1.0)",
    "rope_table_half_rot_interleaved": "port builds cos/sin in the half-split (HF cache) layout but "
                                       "rotates interleaved pairs",
    "rope_table_interleaved_rot_half": "port builds cos/sin interleaved (repeat_interleave) but "
                                       "rotates halves (rotate_half)",
    "batch_left_pad": "batched forward left-pads the requests but keeps positions 0..T-1 and no "
                      "padding mask (rows attend to padding, positions shifted)",
    "norm_eps": "port uses rms_norm_eps 1e-5 (reference 1e-6)",
    "norm_functional_eps": "port's final norm is F.rms_norm(..., eps=1e-5) with the eps hard-coded "
                           "(reference 1e-6)",
    "norm_layernorm": "port uses LayerNorm (mean subtracted) instead of RMSNorm",
    "norm_weight_offset": "port applies (1 + w) where the reference applies w",
    "norm_no_fp32_upcast": "port computes the norm variance in the input dtype (shows only in bf16)",
    "norm_post": "port applies the norms after the residual add (post-norm)",
    "norm_no_qk_norm": "port has no q_norm/k_norm",
    "fp16_overflow": "reference weights with a massive activation: layer 0's MLP writes 2e5 into "
                     "one hidden channel (float16 max 65504); shows only with --dtype float16",
    "tp_shard_order": "sharded port (--tp N): the LM head loads the vocabulary rows of rank N-1-r",
    "tp_row_bias": "sharded port (--tp N): o_proj (row-parallel) adds its bias on every rank "
                   "before the all-reduce (reference with attention biases)",
    "tp_gather_axis": "sharded port (--tp N): the logits are gathered along the sequence axis, "
                      "not the vocabulary axis",
    "tp_vocab_offset": "sharded port (--tp N): the vocabulary-parallel embedding masks its own id "
                       "range but loads the rows of rank N-1-r",
    "tp_qkv_plain_chunk": "sharded port (--tp N): the fused [Q|K|V] weight is split with a plain "
                          "chunk(N)[rank] (rank 0 holds all of Q) instead of each part's heads",
    "decode_position": "port's decode steps give the new token position 0 (prefill right)",
    "decode_kv_stale": "port's one-token step drops the last cached token before attending",
}
VARIANT: str | None = None

#: Variant -> PortOptions fields. ``rope_scaling_ignored`` also changes the reference config.
PORT_OPTIONS: dict[str, dict[str, Any]] = {
    "qkv_shard_order": {"swap_qk_shards": True},
    "unmapped_weight": {"skip_weight": "talker.layers.1.mlp.down_proj.weight"},
    "nan_layer": {"nan_mlp_layer": 1},
    "rope_inv_freq_uninitialized": {"meta_init": True},
    "rope_theta_default": {"rope_theta_top_level_only": True},
    "rope_interleaved": {"rope_interleaved": True},
    "rope_partial": {"partial_rotary_factor": 0.5},
    "rope_position_offset": {"position_offset": 3},
    "rope_scaling_ignored": {"ignore_rope_scaling": True},
    "rope_low_precision": {"rope_dtype": "bfloat16"},
    "rope_padded_half": {"rope_pad_factor": 0.5},
    "rope_table_half_rot_interleaved": {"rope_table_layout": "half", "rope_interleaved": True},
    "rope_table_interleaved_rot_half": {"rope_table_layout": "interleaved"},
    "batch_left_pad": {},  # the port is clean: the fault is in run_candidate_batch
    "norm_eps": {"rms_norm_eps": 1e-5},
    "norm_functional_eps": {"functional_final_norm_eps": 1e-5},
    "norm_layernorm": {"norm_kind": "layer"},
    "norm_weight_offset": {"norm_weight_offset": True},
    "norm_no_fp32_upcast": {"norm_fp32_upcast": False},
    "norm_post": {"norm_placement": "post"},
    "norm_no_qk_norm": {"qk_norm": False},
    "fp16_overflow": {},  # the port is clean: the reference's weights carry the activation
}
# decode_position / decode_kv_stale need no PortOptions: candidate_step and the port's KV cache
# plant them (the whole-sequence forward is the clean one).

#: Variant -> TPOptions fields of the sharded port (:func:`candidate_tp`); the single-process
#: port is clean in these variants.
TP_OPTIONS: dict[str, dict[str, Any]] = {
    "tp_shard_order": {"reverse_vocab_shards": True},
    "tp_row_bias": {"row_bias_every_rank": True},
    "tp_gather_axis": {"gather_dim": 1},
    "tp_vocab_offset": {"reverse_embed_shards": True},
    "tp_qkv_plain_chunk": {"qkv_plain_chunk": True},
}

#: Sequence length of the example input (tokens); RoPE faults grow with position.
SEQ_LEN = 64
#: Seed of the candidate's own init (what an unmapped weight keeps).
CANDIDATE_SEED = 1234


def port_options():
    """The :class:`~porting_kit.embedded.tts_port.PortOptions` for the current ``VARIANT``."""
    from porting_kit.embedded.tts_port import PortOptions

    return PortOptions(**PORT_OPTIONS.get(VARIANT or "", {}))


def lm_config():
    """The LM config both sides read (Qwen3Config); linear RoPE scaling x4 in ``rope_scaling_ignored``."""
    from porting_kit.embedded import tts_reference

    if VARIANT == "rope_scaling_ignored":
        return tts_reference.lm_config(
            rope_parameters={"rope_type": "linear", "rope_theta": 1e6, "factor": 4.0})
    if VARIANT == "tp_row_bias":
        return tts_reference.lm_config(attention_bias=True)
    return tts_reference.lm_config()


def codec_config():
    """The codec config both sides read (EncodecConfig, 24 kHz mono, hop 320)."""
    from porting_kit.embedded import tts_reference

    return tts_reference.codec_config()


def reference():
    """The reference ``TinyTTSReference`` (``.lm`` Qwen3ForCausalLM, ``.codec`` EncodecModel),
    seeded random weights, eval mode."""
    from porting_kit.embedded import tts_reference

    model = tts_reference.build_reference(lm_config(), codec_config())
    if VARIANT == "fp16_overflow":
        _plant_massive_activation(model)
    if VARIANT == "tp_row_bias":
        _randomize_lm_biases(model)
    return model


def _randomize_lm_biases(model) -> None:
    """Give every LM bias seeded values ``0.1 * randn`` (transformers initialises them to zero,
    and zero biases would hide a bias added once per rank); the global RNG is untouched."""
    import torch

    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(CANDIDATE_SEED + 1)
        for name, p in model.lm.named_parameters():
            if name.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))


def candidate():
    """The port ``TinyTTSPort`` for the current variant; weights set later through its
    ``load_weights``. Its own init is seeded (global RNG untouched)."""
    import torch

    from porting_kit.embedded.tts_port import TinyTTSPort

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(CANDIDATE_SEED)
        model = TinyTTSPort(lm_config(), codec_config(), port_options())
    return model.eval()


#: The ``fp16_overflow`` variant's massive activation: intermediate neuron, hidden channel,
#: gain on that neuron's gate/up rows, and the channel's peak |value| on the example input.
OVERFLOW_NEURON, OVERFLOW_CHANNEL, OVERFLOW_GAIN, OVERFLOW_PEAK = 7, 5, 400.0, 2e5


def candidate_tp(rank: int, world_size: int):
    """The sharded port for tensor-parallel rank ``rank`` of ``world_size`` (the spec's ``candidate_tp``).

    Called by ``porting-kit check --tp N`` on each rank after the process group exists.

    Parameters
    ----------
    rank, world_size : int
        This rank and the tensor-parallel size (must divide 4 heads, 2 kv heads, vocab 1028).

    Returns
    -------
    TinyTTSPortTP
        The talker with vLLM-style parallel layers (:mod:`porting_kit.embedded.tts_tp`), in
        eval mode; its ``load_weights`` takes the full reference weights and keeps its slice.
    """
    from porting_kit.embedded.tts_tp import TinyTTSPortTP, TPOptions

    return TinyTTSPortTP(lm_config(), TPOptions(**TP_OPTIONS.get(VARIANT or "", {}))).eval()


def _plant_massive_activation(model) -> None:
    """Give layer 0's MLP one massive activation, every weight still inside float16's range.

    Rows :data:`OVERFLOW_NEURON` of ``gate_proj`` / ``up_proj`` are scaled by
    :data:`OVERFLOW_GAIN` (that neuron's ``silu(gate) * up`` reaches the hundreds), then
    ``down_proj.weight[OVERFLOW_CHANNEL, OVERFLOW_NEURON]`` is set so hidden channel
    :data:`OVERFLOW_CHANNEL` peaks near :data:`OVERFLOW_PEAK` on :func:`inputs` (measured in a
    float32 forward; changes ``model`` in place).
    """
    import torch

    mlp = model.lm.model.layers[0].mlp
    j, c = OVERFLOW_NEURON, OVERFLOW_CHANNEL
    with torch.no_grad():
        mlp.gate_proj.weight[j].mul_(OVERFLOW_GAIN)
        mlp.up_proj.weight[j].mul_(OVERFLOW_GAIN)
    act: list = []
    h = mlp.down_proj.register_forward_pre_hook(lambda mod, args: act.append(args[0][..., j].detach()))
    try:
        with torch.no_grad():
            run_reference(model, inputs())
    finally:
        h.remove()
    a = act[0].reshape(-1)
    with torch.no_grad():
        mlp.down_proj.weight[c, j] = OVERFLOW_PEAK / float(a[int(a.abs().argmax())])


def inputs() -> dict:
    """The spec's example inputs.

    Returns
    -------
    dict
        ``{"input_ids": torch.LongTensor [shape=(1, 64)]}``: BOS then seeded random codec
        tokens (the same on every call).
    """
    from porting_kit.embedded import tts_reference

    return {"input_ids": tts_reference.example_input_ids(SEQ_LEN)}


def run_reference(model, inputs):
    """LM logits of the reference (the spec's ``run_reference``).

    Parameters
    ----------
    model : TinyTTSReference
        From :func:`reference`, on the check's device.
    inputs : dict
        :func:`inputs`: ``input_ids`` [shape=(batch, seq), int64].

    Returns
    -------
    torch.Tensor [shape=(batch, seq, vocab_size)]
        Float logits (``vocab_size`` 1028).
    """
    return model(inputs["input_ids"])


def run_candidate(model, inputs):
    """LM logits of the port (the spec's ``run_candidate``).

    Positions ``0..seq-1`` are built from ``input_ids`` (as the engine does), then
    ``forward`` then ``compute_logits``.

    Parameters
    ----------
    model : TinyTTSPort
        From :func:`candidate`, weights loaded.
    inputs : dict
        :func:`inputs`: ``input_ids`` [shape=(batch, seq), int64].

    Returns
    -------
    torch.Tensor [shape=(batch, seq, vocab_size)]
        Float logits.
    """
    import torch

    input_ids = inputs["input_ids"]
    _set_cache(model, None)  # a whole-sequence forward: no decode cache
    positions = torch.arange(input_ids.shape[-1], device=input_ids.device).expand_as(input_ids)
    return model.compute_logits(model(input_ids, positions))


def engine_model():
    """The port's serving-side AR worker, driven through vLLM-Omni's AR-runner contract.

    The tiny TTS's engine form: the embedded generator's clean model
    (:func:`porting_kit.embedded.generator_model.build_model`, MOSS-TTS-Nano shape:
    per-request ``torch.Generator`` keyed by ``global_request_id``, row-wise EOS from
    ``compute_logits``, ``on_requests_finished``). No ``tts`` variant plants a fault in it:
    the ``rng`` / ``lifecycle`` faults are the ``generator`` example's variants.

    Returns
    -------
    porting_kit.embedded.generator_model.GeneratorTTS
        A fresh, seeded model on the CPU (the engine driver calls this once per scenario).
    """
    from porting_kit.embedded.generator_model import build_model

    return build_model(None)


def run_candidate_batch(model, requests):
    """The port's padded batched forward (the ``batch`` family's ``run_candidate_batch``).

    Requests are right-padded with token 0 to the longest; positions are ``0..T-1`` on every
    row. With causal attention a right-padded row never sees its padding, so each row's
    first ``len`` logits equal the request run alone. ``batch_left_pad`` plants the fault:
    left padding with the same positions and no padding mask.

    Parameters
    ----------
    model : TinyTTSPort
    requests : list of dict
        Each ``{"input_ids": LongTensor [shape=(1, len)]}``.

    Returns
    -------
    list of torch.Tensor
        Per request ``[shape=(1, len, vocab_size)]``, its padding removed.
    """
    import torch

    ids = [r["input_ids"][0] for r in requests]
    longest = max(int(x.numel()) for x in ids)
    left = VARIANT == "batch_left_pad"
    rows = []
    for x in ids:
        pad = torch.zeros(longest - x.numel(), dtype=x.dtype, device=x.device)
        rows.append(torch.cat([pad, x]) if left else torch.cat([x, pad]))
    batch = torch.stack(rows)
    positions = torch.arange(longest, device=batch.device).expand_as(batch)
    logits = model.compute_logits(model(batch, positions))
    return [logits[i:i + 1, longest - x.numel():] if left else logits[i:i + 1, :x.numel()]
            for i, x in enumerate(ids)]


def _set_cache(model, kv) -> None:
    for layer in model.talker.layers:
        layer.attn.kv = None if kv is None else dict(kv)
        layer.attn.kv_drop_last = VARIANT == "decode_kv_stale"


def candidate_step(model, tokens, start_pos: int):
    """One decode step of the port with its own KV cache (the ``decode`` family).

    Parameters
    ----------
    model : TinyTTSPort
    tokens : torch.LongTensor [shape=(batch, n)]
        The prompt at ``start_pos`` 0 (the cache is reset), then one token a step.
    start_pos : int
        Position of ``tokens[:, 0]``.

    Returns
    -------
    torch.Tensor [shape=(batch, n, vocab_size)]
        Logits. ``decode_position``: a one-token step is given position 0.
    """
    import torch

    if start_pos == 0:
        _set_cache(model, {})
    n = tokens.shape[-1]
    positions = torch.arange(start_pos, start_pos + n, device=tokens.device).expand_as(tokens)
    if n == 1 and VARIANT == "decode_position":
        positions = torch.zeros_like(positions)
    return model.compute_logits(model(tokens, positions))


def _static(constants: dict[str, Any]) -> dict[str, Any]:
    keys = ("rope_theta", "rope_type", "rope_scaling", "rms_norm_eps", "head_dim",
            "partial_rotary_factor", "rotary_dim", "hidden_size", "num_attention_heads",
            "num_key_value_heads", "intermediate_size", "num_hidden_layers", "vocab_size",
            "max_position_embeddings")
    return {k: constants[k] for k in keys}


def reference_config() -> dict[str, Any]:
    """Static facts of the reference, read from its Qwen3Config the way transformers reads them.

    Returns
    -------
    dict
        ``rope_theta`` (1e6; from ``config.rope_parameters``), ``rope_type``, ``rope_scaling``
        (``None`` or the scaling parameters), ``rms_norm_eps`` (1e-6), ``head_dim`` (16),
        ``partial_rotary_factor`` (1.0), ``rotary_dim``, ``hidden_size``,
        ``num_attention_heads``, ``num_key_value_heads``, ``intermediate_size``,
        ``num_hidden_layers``, ``vocab_size``, ``max_position_embeddings``.
    """
    cfg = lm_config()
    rope = dict(cfg.rope_parameters)
    rope_type = rope.get("rope_type", "default")
    scaling = None if rope_type == "default" else {
        k: v for k, v in rope.items() if k != "rope_theta"}
    return {
        "rope_theta": float(rope["rope_theta"]),
        "rope_type": rope_type,
        "rope_scaling": scaling,
        "rms_norm_eps": float(cfg.rms_norm_eps),
        "head_dim": int(cfg.head_dim),
        "partial_rotary_factor": 1.0,
        "rotary_dim": int(cfg.head_dim),
        "hidden_size": int(cfg.hidden_size),
        "num_attention_heads": int(cfg.num_attention_heads),
        "num_key_value_heads": int(cfg.num_key_value_heads),
        "intermediate_size": int(cfg.intermediate_size),
        "num_hidden_layers": int(cfg.num_hidden_layers),
        "vocab_size": int(cfg.vocab_size),
        "max_position_embeddings": int(cfg.max_position_embeddings),
    }


def candidate_config() -> dict[str, Any]:
    """Static facts of the port: the constants it actually uses for this variant.

    Returns
    -------
    dict
        The keys of :func:`reference_config`, from
        :func:`~porting_kit.embedded.tts_port.port_constants` (e.g. ``rope_theta`` 10000.0
        in ``rope_theta_default``, ``rms_norm_eps`` 1e-5 in ``norm_eps``).
    """
    from porting_kit.embedded.tts_port import port_constants

    return _static(port_constants(lm_config(), port_options()))


# --------------------------------------------------------------------------- audio names (issue 4)
# The codec path (README "Port spec: audio names"): the reference's EncodecModel decodes the codes,
# the port's CodecWrapper decodes them through its serving glue (tts_audio.CodecGlue, fault knobs
# per ``audio_*`` variant).
from porting_kit.embedded import tts_audio as _tts_audio  # noqa: E402

VARIANTS.update({name: desc for name, (desc, _) in _tts_audio.AUDIO_VARIANTS.items()})
stream_chunk_frames = _tts_audio.STREAM_CHUNK_FRAMES
stream_lookahead_frames = _tts_audio.STREAM_LOOKAHEAD_FRAMES
_AUDIO: dict[str, Any] = {}


def _audio():
    """(reference decode, candidate CodecGlue, candidate codec module), built once per load."""
    if "pair" not in _AUDIO:
        import torch

        opts = _tts_audio.audio_options(VARIANT)
        if opts.stereo:
            ref_codec, cand_codec = _tts_audio.stereo_pair(codec_config())
        else:
            ref, cand = reference(), candidate()
            _tts_audio.scale_output_(ref.codec)  # keep the random codec's audio in [-1, 1]
            cand.load_weights(ref.state_dict().items())
            ref_codec, cand_codec = ref.codec, cand.codec
        if opts.bf16:
            cand_codec.to(torch.bfloat16)  # noqa: PK402 - the planted audio_codec_bf16 fault
        glue = _tts_audio.CodecGlue(_tts_audio.wrapper_decode(cand_codec), cand_codec.sample_rate,
                                    cand_codec.hop_length, opts)
        _AUDIO["pair"] = (_tts_audio.hf_decode(ref_codec), glue, cand_codec)
    return _AUDIO["pair"]


def codes():
    """Codes to decode (the spec's ``codes``).

    Returns
    -------
    torch.LongTensor [shape=(4, 80)]
        Codebook-major, seeded: 4 codebooks (3 kbps) x 80 frames (1.07 s at 75 frames/s).
    """
    return _tts_audio.example_codes()


def decode_reference(codes):
    """Reference ``EncodecModel`` decode of ``codes`` (the spec's ``decode_reference``).

    Parameters
    ----------
    codes : torch.LongTensor [shape=(n_codebooks, frames)]
        From :func:`codes` (codebook-major).

    Returns
    -------
    waveform : torch.Tensor [shape=(channels, samples)]
        float32, ``samples = frames * 320``; 1 channel (2 in the stereo variants).
    sample_rate : int
        24000 Hz.
    """
    return _audio()[0](codes), int(codec_config().sampling_rate)


def decode_candidate(codes):
    """The port's served waveform for ``codes`` and its reported sample rate.

    Parameters
    ----------
    codes : torch.LongTensor [shape=(n_codebooks, frames)]

    Returns
    -------
    waveform : torch.Tensor [shape=(samples,)]
        float32 through the port's serving glue (:class:`tts_audio.CodecGlue`): mixed down
        to mono; ``(1, samples)`` in ``audio_shape_contract``; shifted, trimmed or
        resampled in the ``audio_*`` hop variants.
    sample_rate : int
        Hz as the port reports it (22050 in ``audio_sample_rate``, else 24000).
    """
    return _audio()[1].decode(codes)


def decode_candidate_stream(codes, chunk_frames, context_frames, lookahead_frames=0):
    """The port's streaming decode (chunks with left context and lookahead, same serving glue).

    Parameters
    ----------
    codes : torch.LongTensor [shape=(n_codebooks, frames)]
    chunk_frames : int
        Frames decoded per chunk (the spec's ``stream_chunk_frames``, 10).
    context_frames : int
        Frames of left context decoded before each chunk and dropped
        (:func:`stream_context_frames`: 24, 1 in ``audio_stream_context``).
    lookahead_frames : int, default 0
        Frames decoded after each chunk and dropped (:data:`stream_lookahead_frames`: 2).

    Returns
    -------
    waveform : torch.Tensor [shape=(samples,)]
        float32, the served stream concatenated.
    sample_rate : int
        Hz as the port reports it.
    """
    return _audio()[1].decode_stream(codes, chunk_frames, context_frames, lookahead_frames)


def decode_candidate_stream_batch(codes, lengths, chunk_frames, context_frames, lookahead_frames):
    """The port's batched streaming decode of a padded batch of requests.

    Parameters
    ----------
    codes : torch.LongTensor [shape=(batch, n_codebooks, max_frames)]
        Request ``r`` holds ``lengths[r]`` frames, then padding.
    lengths : list of int
        Frames of each request.
    chunk_frames, context_frames, lookahead_frames : int
        As in :func:`decode_candidate_stream`.

    Returns
    -------
    list of torch.Tensor [shape=(samples,)]
        One served waveform per request (request 0's length for every request in
        ``audio_stream_batch_row_trim``).
    """
    return _audio()[1].decode_stream_batch(codes, lengths, chunk_frames, context_frames, lookahead_frames)


def stream_context_frames():
    """The port's configured left context for streaming, in frames."""
    opts = _tts_audio.audio_options(VARIANT)
    return _tts_audio.STREAM_CONTEXT_FRAMES if opts.stream_context is None else opts.stream_context


def codec_candidate():
    """The port's codec module (its parameters must be float32)."""
    return _audio()[2]


# Sampling names (the ``sampling`` family): the port's sampler, tts_sampling.py, with its
# planted faults as ``sampling_*`` variants; the reference is transformers' processors.
from porting_kit.embedded import tts_sampling as _tts_sampling  # noqa: E402

VARIANTS.update(_tts_sampling.SAMPLING_VARIANTS)
VARIANTS.update(_tts_sampling.SAMPLER_VARIANTS)  # sampler-only faults: the draws show them
sampling_vocab_size = _tts_sampling.VOCAB


def sampling_params() -> list[dict]:
    """Sampling parameter sets (``GenerationConfig`` keys; a list holds one value per codebook)."""
    return _tts_sampling.sampling_params()


def candidate_logits_processor(logits, input_ids, params):
    """The port's processed logits, (batch, n_codebooks, vocab) -> same shape."""
    return _tts_sampling.process(logits, input_ids, params, _tts_sampling.faults_for(VARIANT))


def candidate_sampler(logits, input_ids, params, generator):
    """The port's draw: token ids (batch, n_codebooks) from the request's ``generator``."""
    return _tts_sampling.sample(logits, input_ids, params, generator, _tts_sampling.sampler_faults_for(VARIANT))


# --------------------------------------------------------------------------- feature names (issue 17.7)
# Reference-audio features (the ``features`` family): the reference's Whisper-style log-mel from
# transformers.audio_utils against the port's torch extractor, tts_features.py, with its planted
# faults as ``features_*`` variants.
from porting_kit.embedded import tts_features as _tts_features  # noqa: E402

VARIANTS.update(_tts_features.FEATURE_VARIANTS)


def reference_features(waveform, sample_rate):
    """The reference processor's log-mel of a clip, (n_mels, frames) float64."""
    return _tts_features.reference_features(waveform, sample_rate)


def candidate_features(waveform, sample_rate):
    """The port's log-mel of a clip, (n_mels, frames) float32 torch."""
    return _tts_features.candidate_features(waveform, sample_rate, _tts_features.faults_for(VARIANT))
