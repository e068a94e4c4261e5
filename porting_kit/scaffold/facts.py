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
SAMPLE_RATE_KEYS = ("sample_rate", "sampling_rate", "audio_sample_rate", "output_sample_rate",
                    "audio_tokenizer_sample_rate", "codec_sample_rate")
HOP_KEYS = ("hop_length", "hop_size", "samples_per_frame", "frame_hop", "downsample_rate",
            "total_stride")
RATIO_KEYS = ("upsampling_ratios", "upsample_rates", "upsampling_rates", "strides", "ratios")
CODEBOOK_KEYS = ("num_codebooks", "n_codebooks", "num_quantizers", "n_q", "num_code_groups", "n_vq",
                 "codebook_num")
EOS_KEYS = ("codec_eos_token_id", "audio_eos_token_id", "stop_token_id", "stop_token_ids",
            "eos_token_id")
ROPE_THETA_KEYS = ("rope_theta",)
CODEBOOK_SIZE_KEYS = ("codebook_size", "codec_vocab_size", "audio_vocab_size", "codebook_dim_size")
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

    facts.sample_rate = _find(doc, SAMPLE_RATE_KEYS, _is_pos_int)
    facts.hop_length = _find(doc, HOP_KEYS, _is_pos_int)
    if facts.hop_length is None:
        ratios = _find(doc, RATIO_KEYS, _is_int_list)
        if ratios is not None:
            facts.hop_length = Fact(math.prod(ratios.value), f"product of {ratios.source} {ratios.value}")
    facts.num_codebooks = _find(doc, CODEBOOK_KEYS, _is_pos_int)
    facts.vocab_size = _find(doc, ("vocab_size",), _is_pos_int)

    eos = _find(doc, EOS_KEYS, lambda v: _is_pos_int(v) or v == 0 or _is_int_list(v))
    if eos is not None:
        ids = eos.value if isinstance(eos.value, list) else [eos.value]
        facts.stop_token_ids = Fact([int(x) for x in ids], eos.source)

    facts.rope_theta = _find(doc, ROPE_THETA_KEYS, lambda v: isinstance(v, (int, float)) and v > 0)
    for key in ("rope_scaling", "rope_parameters"):
        rs = _find(doc, (key,), lambda v: isinstance(v, dict))
        if rs is None:
            continue
        kind = rs.value.get("rope_type") or rs.value.get("type")
        if kind not in (None, "default"):
            facts.rope_scaling = rs
        break
    for name in ("hidden_size", "num_hidden_layers", "intermediate_size", "max_position_embeddings",
                 "num_attention_heads", "num_key_value_heads"):
        setattr(facts, name, _find(doc, (name,), _is_pos_int))

    facts.codebook_size = _find(doc, CODEBOOK_SIZE_KEYS, _is_pos_int)
    facts.auto_map = isinstance(doc.get("auto_map"), dict) and bool(doc["auto_map"])
    read_generation_facts(facts, doc, p.parent / "generation_config.json")
    h, n_layers = facts.value("hidden_size"), facts.value("num_hidden_layers")
    if h and n_layers:
        inter = facts.value("intermediate_size", 4 * h)
        vocab = facts.value("vocab_size", 0)
        facts.param_count = int(n_layers * (4 * h * h + 3 * h * inter) + vocab * h)
    return facts


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
