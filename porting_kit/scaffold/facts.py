"""Read the facts a scaffold needs from a Hugging Face ``config.json``.

TTS checkpoints spread their audio facts over nested sub-configs
(``talker_config``, ``codec_config``, ``audio_tokenizer_config`` ...), under
names that differ per model family. :func:`read_model_facts` searches the whole
document for the known spellings and records where each value came from, so the
generated files can cite it in a comment ("hop_length 1920 = product of
codec_config.upsampling_ratios").

Everything here is plain JSON reading: no torch, no transformers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from porting_kit.errors import InputError
from porting_kit.fsutil import read_input_text

#: Spellings per fact, in priority order (first match wins within one depth;
#: shallower keys win over deeper ones unless a later spelling is more specific).
#: The output rate first: a codec / VAE that resamples on decode (VoxCPM2's ``audio_vae_config``:
#: ``sample_rate`` 16000 in, ``out_sample_rate`` 48000 out) plays at its output rate.
SAMPLE_RATE_KEYS = ("out_sample_rate", "output_sample_rate", "sample_rate", "sampling_rate", "audio_sample_rate",
                    "audio_tokenizer_sample_rate", "codec_sample_rate")
HOP_KEYS = ("decode_upsample_rate", "hop_length", "hop_size", "samples_per_frame", "frame_hop", "downsample_rate",
            "total_stride")
RATIO_KEYS = ("upsampling_ratios", "upsample_rates", "upsampling_rates", "strides", "ratios")
CODEBOOK_KEYS = ("num_codebooks", "n_codebooks", "num_quantizers", "n_q", "num_code_groups", "n_vq",
                 "codebook_num")
EOS_KEYS = ("codec_eos_token_id", "audio_eos_token_id", "stop_token_id", "stop_token_ids",
            "eos_token_id")
ROPE_THETA_KEYS = ("rope_theta",)
CODEBOOK_SIZE_KEYS = ("codebook_size", "codec_vocab_size", "audio_vocab_size", "audio_codebook_size",
                      "codebook_dim_size")
#: Sub-configs that hold the AR LM of a composite TTS config, in priority order. The LM shape
#: (vocab, hidden size, layers, heads, RoPE) is read there first, so a codec or speaker-encoder
#: sub-config's ``hidden_size`` / ``vocab_size`` cannot stand in for the LM's.
LM_SUBCONFIG_KEYS = ("talker_config", "lm_config", "llm_config", "text_config", "language_config")
#: The LM-shape facts read from the LM sub-config first.
LM_FACT_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size", "max_position_embeddings",
                "num_attention_heads", "num_key_value_heads")
#: Folders beside config.json that hold the codec's own checkpoint (its own config.json):
#: Qwen3-TTS ships its 12 Hz codec as ``speech_tokenizer/``.
CODEC_CONFIG_DIRS = ("speech_tokenizer", "audio_tokenizer", "codec", "tokenizer_codec")
#: Sub-configs of config.json that describe the codec (where a codec's ``sliding_window`` is the
#: decoder's attention window, not the LM's).
CODEC_SUBCONFIG_KEYS = ("codec_config", "audio_tokenizer_config", "speech_tokenizer_config", "audio_codec_config")
#: Keys that declare speaker / reference-audio conditioning (a speaker encoder, x-vectors, a reference clip).
SPEAKER_KEYS = ("speaker_encoder_config", "speaker_encoder", "spk_encoder_config", "voice_encoder_config",
                "speaker_embedding_dim", "spk_embed_dim", "x_vector_dim", "use_speaker_embedding",
                "ref_audio_config", "reference_audio_config", "prompt_audio_config")
#: Keys of a codec / audio VAE that can encode audio: a reference clip can become prompt codes / latents.
CODEC_ENCODER_KEYS = ("encoder_config", "encoder_rates", "encode_downsample_rate", "encoder_dim")
#: Sub-configs where a codec / VAE encoder is looked for (besides the codec's own config.json).
AUDIO_SUBCONFIG_KEYS = (*("codec_config", "audio_tokenizer_config", "speech_tokenizer_config", "audio_codec_config"),
                        "audio_vae_config", "vae_config")
#: Keys naming a separate codec checkpoint (a Hub id or path), as MOSS-TTS-Nano's
#: ``audio_tokenizer_pretrained_name_or_path``.
CODEC_CHECKPOINT_KEYS = ("audio_tokenizer_pretrained_name_or_path", "codec_pretrained_name_or_path",
                         "audio_tokenizer_name_or_path", "codec_name_or_path", "codec_path")
#: vLLM SamplingParams name -> spellings in generation_config.json / config.json, and the vLLM default.
SAMPLING_KEYS = {
    "temperature": (("temperature",), 1.0),
    "top_k": (("top_k",), 0),
    "top_p": (("top_p",), 1.0),
    "repetition_penalty": (("repetition_penalty",), 1.0),
    "min_tokens": (("min_tokens", "min_new_tokens"), 0),
}


@dataclass
class Fact:
    """One value read from config.json and the dotted path it came from."""

    value: Any
    source: str

    def __str__(self) -> str:
        return f"{self.value} ({self.source})"


@dataclass
class ModelFacts:
    """What the scaffold reads from ``config.json``; every field may be ``None``.

    Attributes
    ----------
    config_path : str
        The file read.
    hf_model_type : str or None
        ``model_type`` of the top-level config.
    architecture : str or None
        ``architectures[0]``.
    sample_rate : Fact or None
        Output sample rate in Hz.
    hop_length : Fact or None
        Codec samples per frame (samples); read directly, or the product of the
        decoder's upsampling ratios (the convention of EnCodec / DAC / HiFi-GAN
        decoders: each transposed-conv stride multiplies the frame rate).
    num_codebooks : Fact or None
        Residual codebooks per frame.
    vocab_size : Fact or None
        Vocabulary of the AR LM (text + codec tokens where shared).
    stop_token_ids : Fact or None
        ``list[int]``: codec / audio EOS preferred over the text ``eos_token_id``.
    rope_theta : Fact or None
        RoPE base (``rope_theta``, or ``rope_parameters.rope_theta`` in transformers 5).
    rope_scaling : Fact or None
        ``rope_scaling`` / ``rope_parameters`` dict when its type is not ``default``.
    hidden_size, num_hidden_layers, intermediate_size, max_position_embeddings : Fact or None
        LM shape, used to size memory and ``max_model_len``.
    num_attention_heads, num_key_value_heads : Fact or None
        Attention heads and KV heads (GQA), used to size the KV cache per request.
    param_count : int or None
        Rough LM parameter count, ``L * (4 h^2 + 3 h i) + V h`` (attention + gated
        MLP + embeddings; biases and norms ignored).
    codebook_size : Fact or None
        Codes per codebook (the codec vocabulary; valid codes are ``0 .. size-1``).
    sampling : dict of str to Fact
        Sampling defaults (:data:`SAMPLING_KEYS`: temperature, top_k, top_p,
        repetition_penalty, min_tokens) from ``generation_config.json`` beside the
        config, else from config.json itself.
    generation_eos : Fact or None
        ``list[int]``: ``eos_token_id`` of ``generation_config.json``.
    auto_map : bool
        config.json has ``auto_map`` (the model's code lives in the checkpoint:
        loading it needs ``trust_remote_code``, which only the user may turn on).
    auto_class : str or None
        The transformers auto class ``auto_map`` maps the model under
        (``AutoModelForCausalLM`` preferred over ``AutoModel``), for loading upstream.
    lm_subconfig : str or None
        The sub-config the LM shape was read from (:data:`LM_SUBCONFIG_KEYS`), None when top-level.
    codec_config_path : str or None
        The codec's own ``config.json`` (:data:`CODEC_CONFIG_DIRS`) that was read, if any; its
        facts (hop, output rate, codebook size, left context) win over config.json's.
    codec_left_context : Fact or None
        Frames of left context a streaming codec decoder needs at a chunk boundary: the codec
        decoder's attention ``sliding_window`` (codec config only; the LM's own window is not it).
    codec_checkpoint : Fact or None
        A separate codec checkpoint (Hub id or path) named in config.json
        (:data:`CODEC_CHECKPOINT_KEYS`).
    special_tokens : dict of str to Fact
        Token ids the model's prompt is built from (``tts_bos_token_id``, ``codec_pad_id``,
        ``im_start_token_id`` ...): every int ``*_token_id`` / ``*_id`` key of the top level and of
        the LM sub-config, by key name.
    conditioning : Fact or None
        Speaker / reference-audio conditioning the config declares: ``"speaker encoder"`` (a
        :data:`SPEAKER_KEYS` key: the reference clip is required input of the model) or
        ``"prompt codes"`` (the codec / audio VAE has an encoder, :data:`CODEC_ENCODER_KEYS`: a
        reference clip can be encoded into the prompt). The source names the key.
    ambiguities : list of str
        One line per fact where another key with a different value could be meant
        ("vocab_size 151936 read from talker_config.vocab_size; codec_config.codebook_size 2048 ...").
    """

    config_path: str
    hf_model_type: str | None = None
    architecture: str | None = None
    name_or_path: str | None = None
    sample_rate: Fact | None = None
    hop_length: Fact | None = None
    num_codebooks: Fact | None = None
    vocab_size: Fact | None = None
    stop_token_ids: Fact | None = None
    rope_theta: Fact | None = None
    rope_scaling: Fact | None = None
    hidden_size: Fact | None = None
    num_hidden_layers: Fact | None = None
    intermediate_size: Fact | None = None
    max_position_embeddings: Fact | None = None
    num_attention_heads: Fact | None = None
    num_key_value_heads: Fact | None = None
    param_count: int | None = None
    codebook_size: Fact | None = None
    sampling: dict[str, Fact] = field(default_factory=dict)
    generation_eos: Fact | None = None
    auto_map: bool = False
    auto_class: str | None = None
    lm_subconfig: str | None = None
    codec_config_path: str | None = None
    codec_left_context: Fact | None = None
    codec_checkpoint: Fact | None = None
    conditioning: Fact | None = None
    special_tokens: dict[str, Fact] = field(default_factory=dict)
    ambiguities: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def value(self, name: str, default: Any = None) -> Any:
        """The value of fact ``name`` or ``default`` when it was not found.

        Parameters
        ----------
        name : str
            A field of :class:`ModelFacts` holding a :class:`Fact` (e.g. ``"sample_rate"``).
        default : Any, optional
            Returned when the fact is None (not found in the config).

        Returns
        -------
        Any
            ``Fact.value`` or ``default``.
        """
        f = getattr(self, name)
        return default if f is None else f.value


def _walk(doc: Any, prefix: str = "", depth: int = 0):
    """Yield ``(dotted_path, key, value, depth)`` for every key of nested dicts."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            yield path, str(k), v, depth
            yield from _walk(v, path, depth + 1)


def _find(doc: dict, keys: tuple[str, ...], accept) -> Fact | None:
    """First value whose key is in ``keys`` and passes ``accept``: by key priority,
    then shallowest depth."""
    hits = [(keys.index(k), d, p, v) for p, k, v, d in _walk(doc) if k in keys and accept(v)]
    if not hits:
        return None
    hits.sort(key=lambda h: (h[0], h[1]))
    _, _, path, value = hits[0]
    return Fact(value, path)


def _is_pos_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _is_int_list(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(_is_pos_int(x) for x in v)


#: LM shape keys: positive ints wherever they appear (they size the model and the deploy).
INT_KEYS = frozenset(("vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size",
                      "max_position_embeddings", "num_attention_heads", "num_key_value_heads"))
#: Audio keys: numbers (int lists for the ratios); a string or a bool there is a broken config.
NUMBER_KEYS = frozenset((*SAMPLE_RATE_KEYS, *HOP_KEYS, *CODEBOOK_KEYS, *RATIO_KEYS, *ROPE_THETA_KEYS))
#: Token-id keys: ints >= 0 or lists of them.
TOKEN_KEYS = frozenset(EOS_KEYS)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _bad_value(key: str, value: Any) -> str | None:
    """Why ``value`` cannot be the value of ``key`` (None: acceptable, or not a checked key)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not finite"
    if value is None:
        return None
    values = value if isinstance(value, list) else [value]
    if key in INT_KEYS and not _is_pos_int(value):
        return f"{value!r} is not a positive integer"
    if key in NUMBER_KEYS and not all(_is_number(v) for v in values):
        return f"{value!r} is not a number"
    if key in TOKEN_KEYS and not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        return f"{value!r} is not a token id (an int >= 0, or a list of them)"
    if key in ROPE_THETA_KEYS and not value > 0:
        return f"{value!r} is not a positive number"
    return None


def check_values(doc: dict, path: Path) -> None:
    """Raise InputError naming the first key whose value is of the wrong type or not finite.

    Checked: the keys a scaffold reads wherever they appear (:data:`INT_KEYS` positive ints,
    :data:`NUMBER_KEYS` numbers, :data:`TOKEN_KEYS` token ids), and a non-finite number under any key
    (``NaN`` / ``Infinity`` are not JSON, though Python's parser accepts them).

    Parameters
    ----------
    doc : dict
        The parsed config.json.
    path : Path
        The file (named in the error).

    Raises
    ------
    InputError
        ``<file>: <dotted key> = <value> is not ...``.
    """
    def walk(value: Any, dotted: str, key: str) -> None:
        why = _bad_value(key, value)
        if why:
            raise InputError(f"{path}: {dotted} = {why} (fix config.json; the scaffold writes it into code)")
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{dotted}.{k}" if dotted else str(k), str(k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                if isinstance(v, (dict, list)) or (isinstance(v, float) and not math.isfinite(v)):
                    walk(v, f"{dotted}[{i}]", "")

    walk(doc, "", "")


def read_model_facts(path: str | Path) -> ModelFacts:
    """Read sample rate, hop length, codebooks, vocab, stop tokens and RoPE settings.

    Parameters
    ----------
    path : str or Path
        A Hugging Face ``config.json``.

    Returns
    -------
    ModelFacts
        Each fact with the dotted path it came from; missing facts are ``None``.

    Raises
    ------
    InputError
        The file is missing, unreadable, not JSON, or not a JSON object; or a value
        the scaffold reads has the wrong type or is not finite (:func:`check_values`).
    """
    p = Path(path)
    if p.is_dir():
        raise InputError(f"--config {p}: is a directory (pass the model's HF config.json)")
    if p.exists() and not p.is_file():
        raise InputError(f"--config {p}: not a regular file (a FIFO or a device); pass the model's HF config.json")
    if not p.is_file():
        raise InputError(f"config file not found: {p} (pass the model's HF config.json with --config)")
    try:
        doc = json.loads(read_input_text(p))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"cannot read {p} as JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{p} must hold a JSON object (an HF config.json), got {type(doc).__name__}")
    check_values(doc, p)

    facts = ModelFacts(config_path=str(p))
    facts.hf_model_type = doc.get("model_type") if isinstance(doc.get("model_type"), str) else None
    archs = doc.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        facts.architecture = archs[0]
    if isinstance(doc.get("_name_or_path"), str) and doc["_name_or_path"]:
        facts.name_or_path = doc["_name_or_path"]

    codec_doc, codec_name = _read_codec_config(p.parent)
    if codec_doc is not None:
        facts.codec_config_path = str(p.parent / codec_name / "config.json")
    lm_name = next((k for k in LM_SUBCONFIG_KEYS if isinstance(doc.get(k), dict)), None)
    facts.lm_subconfig = lm_name

    def codec_first(keys, accept):
        """The codec's own config.json first (its decoder decides hop, rate, codes), then config.json."""
        hit = _find(codec_doc, keys, accept) if codec_doc is not None else None
        if hit is not None:
            return Fact(hit.value, f"{codec_name}/config.json {hit.source}")
        return _find(doc, keys, accept)

    facts.sample_rate = codec_first(SAMPLE_RATE_KEYS, _is_pos_int)
    facts.hop_length = codec_first(HOP_KEYS, _is_pos_int)
    if facts.hop_length is None:
        facts.hop_length = _ratio_hop(codec_doc, f"{codec_name}/config.json ") if codec_doc is not None else None
    if facts.hop_length is None:
        facts.hop_length = _ratio_hop(doc, "")
    facts.num_codebooks = _find(doc, CODEBOOK_KEYS, _is_pos_int) or codec_first(CODEBOOK_KEYS, _is_pos_int)
    facts.vocab_size = _find_lm(doc, lm_name, "vocab_size", _is_pos_int)

    eos = _find(doc, EOS_KEYS, lambda v: _is_pos_int(v) or v == 0 or _is_int_list(v))
    if eos is not None:
        ids = eos.value if isinstance(eos.value, list) else [eos.value]
        facts.stop_token_ids = Fact([int(x) for x in ids], eos.source)

    facts.rope_theta = _find_lm(doc, lm_name, "rope_theta", lambda v: isinstance(v, (int, float)) and v > 0)
    for key in ("rope_scaling", "rope_parameters"):
        rs = _find_lm(doc, lm_name, key, lambda v: isinstance(v, dict))
        if rs is None:
            continue
        kind = rs.value.get("rope_type") or rs.value.get("type")
        if kind not in (None, "default"):
            facts.rope_scaling = rs
        break
    for name in LM_FACT_KEYS[1:]:
        setattr(facts, name, _find_lm(doc, lm_name, name, _is_pos_int))

    facts.codebook_size = codec_first(CODEBOOK_SIZE_KEYS, _is_pos_int)
    facts.codec_left_context = _codec_window(doc, codec_doc, codec_name)
    ckpt = _find(doc, CODEC_CHECKPOINT_KEYS, lambda v: isinstance(v, str) and bool(v.strip()))
    facts.codec_checkpoint = ckpt
    facts.auto_map = isinstance(doc.get("auto_map"), dict) and bool(doc["auto_map"])
    if facts.auto_map:
        facts.auto_class = next((c for c in ("AutoModelForCausalLM", "AutoModelForTextToWaveform", "AutoModel")
                                 if c in doc["auto_map"]), None)
    facts.ambiguities = _ambiguities(facts, doc, codec_doc, codec_name)
    facts.conditioning = _conditioning(doc, codec_doc, codec_name)
    for prefix, sub in (("", doc), (f"{lm_name}.", doc.get(lm_name) if lm_name else None)):
        for key, value in (sub or {}).items():
            if (key.endswith("_token_id") or key.endswith("_id")) and isinstance(value, int) \
                    and not isinstance(value, bool) and value >= 0 and key.isidentifier():
                facts.special_tokens.setdefault(key, Fact(value, prefix + key))
    read_generation_facts(facts, doc, p.parent / "generation_config.json")
    h, n_layers = facts.value("hidden_size"), facts.value("num_hidden_layers")
    if h and n_layers:
        inter = facts.value("intermediate_size", 4 * h)
        vocab = facts.value("vocab_size", 0)
        facts.param_count = int(n_layers * (4 * h * h + 3 * h * inter) + vocab * h)
    return facts


def _find_lm(doc: dict, lm_name: str | None, key: str, accept) -> Fact | None:
    """An LM-shape key: top level, then the LM sub-config (``lm_name``), then anywhere."""
    if key in doc and accept(doc[key]):
        return Fact(doc[key], key)
    if lm_name is not None:
        hit = _find(doc[lm_name], (key,), accept)
        if hit is not None:
            return Fact(hit.value, f"{lm_name}.{hit.source}")
    return _find(doc, (key,), accept)


def _ratio_hop(doc: dict, label: str) -> Fact | None:
    """Hop length as the product of the decoder's up-sampling ratios (a sub-config named ``*decoder*``
    first, one named ``*encoder*`` last). Where one sub-config holds
    several ratio lists (Qwen3-TTS's codec decoder: ``upsample_rates`` [8, 5, 4, 3] then
    ``upsampling_ratios`` [2, 2]), the stages are chained: the product of all of them."""
    def parents(d: dict, path: str, depth: int):
        yield d, path, depth
        for k, v in d.items():
            if isinstance(v, dict):
                yield from parents(v, f"{path}.{k}" if path else str(k), depth + 1)

    def side(path: str) -> int:  # the decoder's ratios make the output hop; an encoder's never do
        last = path.rpartition(".")[2].lower()
        return 0 if "decoder" in last else 2 if "encoder" in last else 1

    hits = [(side(path), min(RATIO_KEYS.index(k) for k in RATIO_KEYS if _is_int_list(d.get(k))), depth, path, d)
            for d, path, depth in parents(doc, "", 0) if any(_is_int_list(d.get(k)) for k in RATIO_KEYS)]
    if not hits:
        return None
    *_, parent_path, parent = min(hits, key=lambda h: h[:3])
    lists = [(k, v) for k, v in parent.items() if k in RATIO_KEYS and _is_int_list(v)]  # in the file's order
    total = math.prod(math.prod(v) for _, v in lists)
    where = " x ".join(f"{(parent_path + '.') if parent_path else ''}{k} {v}" for k, v in lists)
    return Fact(total, f"{label}product of {where}")


def _read_codec_config(folder: Path) -> tuple[dict | None, str]:
    """The codec's own ``config.json`` in a :data:`CODEC_CONFIG_DIRS` folder beside the model's."""
    for name in CODEC_CONFIG_DIRS:
        path = folder / name / "config.json"
        if not path.is_file():
            continue
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"cannot read {path} as JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise InputError(f"{path} must hold a JSON object (the codec's config.json), got {type(doc).__name__}")
        check_values(doc, path)
        return doc, name
    return None, ""


def _codec_window(doc: dict, codec_doc: dict | None, codec_name: str) -> Fact | None:
    """The codec decoder's attention window (``sliding_window``), from the codec's config only: its
    ``decoder_config`` first (an encoder's window does not bound decoding), then anywhere in it."""
    if codec_doc is not None:
        for sub in (codec_doc.get("decoder_config"), codec_doc):
            hit = _find(sub, ("sliding_window",), _is_pos_int) if isinstance(sub, dict) else None
            if hit is not None:
                prefix = "decoder_config." if sub is not codec_doc else ""
                return Fact(hit.value, f"{codec_name}/config.json {prefix}{hit.source}")
    for name in CODEC_SUBCONFIG_KEYS:
        if isinstance(doc.get(name), dict):
            hit = _find(doc[name], ("sliding_window",), _is_pos_int)
            if hit is not None:
                return Fact(hit.value, f"{name}.{hit.source}")
    return None


def _conditioning(doc: dict, codec_doc: dict | None, codec_name: str) -> Fact | None:
    """Speaker conditioning first (a declared speaker encoder), then prompt codes (a codec encoder)."""
    def declared(v: Any) -> bool:
        return (isinstance(v, dict) and bool(v)) or v is True or _is_pos_int(v) or (isinstance(v, str) and bool(v))

    hit = _find(doc, SPEAKER_KEYS, declared)
    if hit is not None:
        return Fact("speaker encoder", hit.source)
    if codec_doc is not None:
        hit = _find(codec_doc, CODEC_ENCODER_KEYS, declared)
        if hit is not None:
            return Fact("prompt codes", f"{codec_name}/config.json {hit.source}")
    for name in AUDIO_SUBCONFIG_KEYS:
        if isinstance(doc.get(name), dict):
            hit = _find(doc[name], CODEC_ENCODER_KEYS, declared)
            if hit is not None:
                return Fact("prompt codes", f"{name}.{hit.source}")
    return None


#: Facts checked for a second reading: (field, keys that could hold it).
_AMBIGUOUS = (("sample_rate", SAMPLE_RATE_KEYS), ("hop_length", HOP_KEYS), ("num_codebooks", CODEBOOK_KEYS),
              ("codebook_size", CODEBOOK_SIZE_KEYS))


def _ambiguities(facts: ModelFacts, doc: dict, codec_doc: dict | None, codec_name: str) -> list[str]:
    """Facts another key could mean: the value read, where from, and each other reading."""
    out = []

    def hits(keys, accept):
        found = [(f"{p}", v) for p, k, v, _ in _walk(doc) if k in keys and accept(v)]
        if codec_doc is not None:
            found += [(f"{codec_name}/config.json {p}", v) for p, k, v, _ in _walk(codec_doc)
                      if k in keys and accept(v)]
        return found

    for name, keys in _AMBIGUOUS:
        fact = getattr(facts, name)
        if fact is None:
            continue
        others = sorted({(p, v) for p, v in hits(keys, _is_pos_int) if v != fact.value}, key=str)
        if others:
            alt = "; ".join(f"{p} = {v}" for p, v in others[:3])
            out.append(f"{name} {fact.value} read from {fact.source}; could also be meant: {alt}")
    vocab, size = facts.vocab_size, facts.codebook_size
    if vocab is not None and size is not None and vocab.value > 2 * size.value:
        out.append(f"vocab_size {vocab.value} read from {vocab.source} is far wider than the codec vocabulary "
                   f"{size.value} ({size.source}): it is likely the text vocabulary (a two-stage scaffold sizes "
                   "its code heads from codebook_size)")
    return out


def _sampling_ok(name: str, v: Any) -> bool:
    if not _is_number(v) or not math.isfinite(v):
        return False
    if name in ("top_k", "min_tokens"):
        return isinstance(v, int) and v >= (-1 if name == "top_k" else 0)
    if name == "top_p":
        return 0 < v <= 1
    return v >= 0 if name == "temperature" else v > 0


def read_generation_facts(facts: ModelFacts, doc: dict, gen_path: Path) -> None:
    """Fill ``facts.sampling`` and ``facts.generation_eos`` from ``generation_config.json``
    (when it exists beside the config) and the config's own top-level sampling keys.

    Parameters
    ----------
    facts : ModelFacts
        Updated in place.
    doc : dict
        The parsed config.json.
    gen_path : Path
        Where ``generation_config.json`` would be.

    Raises
    ------
    InputError
        ``generation_config.json`` exists but is not a JSON object, or one of its
        values is wrong-typed / not finite (the key is named).
    """
    gen: dict = {}
    if gen_path.is_file():
        try:
            gen = json.loads(read_input_text(gen_path))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"cannot read {gen_path} as JSON: {exc}") from None
        if not isinstance(gen, dict):
            raise InputError(f"{gen_path} must hold a JSON object, got {type(gen).__name__}")
        check_values(gen, gen_path)
    for name, (spellings, _default) in SAMPLING_KEYS.items():
        for source_name, source in (("generation_config.json", gen), (Path(facts.config_path).name, doc)):
            key = next((k for k in spellings if k in source and source[k] is not None), None)
            if key is None:
                continue
            if not _sampling_ok(name, source[key]):
                raise InputError(f"{gen_path if source is gen else facts.config_path}: {key} = {source[key]!r} is "
                                 f"not a valid {name}")
            facts.sampling[name] = Fact(source[key], f"{source_name} {key}")
            break
    eos = gen.get("eos_token_id")
    if eos is not None:
        ids = eos if isinstance(eos, list) else [eos]
        if ids:
            facts.generation_eos = Fact([int(i) for i in ids], "generation_config.json eos_token_id")
