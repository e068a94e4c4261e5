"""Read a Hugging Face model folder for ``porting-kit scaffold --hf DIR`` (issue 31, point 1).

What is read, and what is not:

* ``config.json`` (a JSON object; the architecture is ``architectures[0]``);
* the checkpoint's key names: ``model.safetensors.index.json``'s ``weight_map``, else the
  JSON header of every ``*.safetensors`` file (8 bytes of length, then the header) — the
  tensor data is never read;
* ``generation_config.json`` when present (sampling defaults, stop ids);
* the transformers class for the architecture, built on the ``meta`` device (no memory,
  no weights) for its full state-dict names and its tied weights. Remote code runs only with
  ``trust_remote_code=True`` (``--trust-remote-code``); a config with ``auto_map`` is refused
  otherwise.

:func:`propose_shape` proposes the scaffold shape from the architecture, with the reason.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

from porting_kit.errors import InputError

#: Architectures the port generator knows (family name -> transformers architectures).
FAMILIES = {
    "csm": ("CsmForConditionalGeneration",),
    "dia": ("DiaForConditionalGeneration",),
    # Llama-layout causal LMs (q/k/v/o projections, gate/up/down MLP, RMSNorm, rotary)
    "causal_lm": ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"),
}
#: Codec model types a separate codec sub-folder may hold.
CODEC_MODEL_TYPES = ("mimi", "dac", "encodec", "xcodec")
#: Largest safetensors header read (bytes); a bigger one is not a safetensors file.
MAX_HEADER_BYTES = 100 * 1024 * 1024


@dataclass
class HFFolder:
    """What ``scaffold --hf`` read from a model folder.

    Attributes
    ----------
    folder : Path
        The model folder (resolved).
    config : dict
        ``config.json``.
    arch : str
        ``architectures[0]`` (``""`` when absent).
    model_type : str
        ``config.json``'s ``model_type``.
    checkpoint_keys : list of str
        The tensor names stored in the checkpoint, sorted (header only).
    state_names : list of str
        The transformers model's state-dict names (persistent), from a meta-device build;
        ``[]`` when transformers has no class for the architecture.
    tied : dict
        Tied weights of the transformers class: state name -> the name it shares storage with.
    renamed : dict
        Checkpoint key -> state name, where transformers renames a key on load (its checkpoint
        conversion mapping: a legacy layout kept on disk).
    generation : dict
        ``generation_config.json`` (``{}`` when absent).
    codec_dir : Path or None
        A sub-folder holding a separate codec checkpoint (its ``config.json`` has a codec
        ``model_type``: Dia keeps DAC apart), None when there is none.
    codec_config : dict or None
        That sub-folder's ``config.json``.
    family : str or None
        The port generator's family (:data:`FAMILIES`), None when it has none.
    notes : list of str
        What the reader could not do, in one line each.
    """

    folder: Path
    config: dict
    arch: str
    model_type: str
    checkpoint_keys: list[str]
    state_names: list[str] = field(default_factory=list)
    tied: dict[str, str] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)
    generation: dict = field(default_factory=dict)
    codec_dir: Path | None = None
    codec_config: dict | None = None
    family: str | None = None
    notes: list[str] = field(default_factory=list)


def _read_json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from exc
    except ValueError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise InputError(f"{path}: not a JSON object")
    return doc


def safetensors_keys(path: Path) -> list[str]:
    """The tensor names in one ``.safetensors`` file, from its header alone.

    Raises
    ------
    InputError
        The file is shorter than its header says, or the header is not a JSON object.
    """
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
            if len(head) != 8:
                raise InputError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (n,) = struct.unpack("<Q", head)
            if n <= 0 or n > MAX_HEADER_BYTES:
                raise InputError(f"{path}: not a safetensors file (header length {n})")
            raw = fh.read(n)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from exc
    try:
        header = json.loads(raw)
    except ValueError as exc:
        raise InputError(f"{path}: safetensors header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise InputError(f"{path}: safetensors header is not a JSON object")
    return sorted(k for k in header if k != "__metadata__")


def checkpoint_keys(folder: Path) -> list[str]:
    """The checkpoint's tensor names: the safetensors index's ``weight_map``, else every
    ``*.safetensors`` header. InputError when the folder holds no safetensors checkpoint."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = _read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise InputError(f"{index}: no weight_map")
        return sorted(str(k) for k in weight_map)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise InputError(f"{folder}: no *.safetensors checkpoint (a save_pretrained() folder is needed; "
                         "pickled .bin checkpoints are not read)")
    keys: set[str] = set()
    for f in files:
        keys.update(safetensors_keys(f))
    return sorted(keys)


def _renames(model, keys: list[str]) -> dict[str, str]:
    """Checkpoint key -> state name for the keys transformers renames on load ({} when its
    conversion API is not there)."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key
    except ImportError:
        return {}
    transforms = get_model_conversion_mapping(model)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    state = model.state_dict()
    out: dict[str, str] = {}
    for key in keys:
        new, _ = rename_source_key(key, renamings, converters, getattr(model, "base_model_prefix", None), state)
        if new != key and new in state:
            out[key] = new
    return out


def _module_names(folder: Path, arch: str, trust_remote_code: bool,
                  keys: list[str]) -> tuple[list[str], dict[str, str], dict[str, str], str]:
    """(state-dict names, tied weights, checkpoint renames, note) of the transformers class,
    built on ``meta``."""
    from porting_kit.adapters.torchaudio_guard import ensure_importable

    ensure_importable()
    import torch
    import transformers

    cls = getattr(transformers, arch, None) if arch else None
    if cls is None or not hasattr(cls, "_from_config"):
        return [], {}, {}, f"transformers {transformers.__version__} has no class {arch!r}: state names from the checkpoint only"
    try:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True,
                                                         trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            model = cls._from_config(config)
    except (OSError, ValueError, KeyError, RuntimeError, TypeError, ImportError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{folder}: transformers cannot build {arch} from config.json: {first}") from exc
    tied = getattr(cls, "_tied_weights_keys", None)
    tied = {str(k): str(v) for k, v in tied.items()} if isinstance(tied, dict) else {}
    return list(model.state_dict().keys()), tied, _renames(model, keys), ""


def read_hf_folder(path: str | Path, *, trust_remote_code: bool = False,
                   build_model: bool = True) -> HFFolder:
    """Read a model folder (see the module docstring).

    Parameters
    ----------
    path : str or Path
        A ``save_pretrained`` folder.
    trust_remote_code : bool, default False
        Only from ``--trust-remote-code``; a config with ``auto_map`` is refused without it.
    build_model : bool, default True
        Build the transformers class on ``meta`` for its state names and tied weights.

    Returns
    -------
    HFFolder

    Raises
    ------
    InputError
        Not a folder, no or bad ``config.json``, no safetensors checkpoint, remote code
        without ``trust_remote_code``, a config transformers cannot build.
    """
    folder = Path(path).expanduser().resolve()
    if not folder.is_dir():
        raise InputError(f"--hf {path}: not a directory (give a save_pretrained() model folder)")
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise InputError(f"--hf {path}: no config.json in {folder}")
    config = _read_json(cfg_path)
    archs = config.get("architectures") or []
    arch = str(archs[0]) if isinstance(archs, list) and archs else ""
    if config.get("auto_map") and not trust_remote_code:
        raise InputError(f"--hf {path}: config.json needs remote code (auto_map); porting-kit never runs it "
                         "implicitly — review that code, then rerun with --trust-remote-code")
    keys = checkpoint_keys(folder)
    gen_path = folder / "generation_config.json"
    generation = _read_json(gen_path) if gen_path.is_file() else {}
    family = next((name for name, archs_ in FAMILIES.items() if arch in archs_), None)
    result = HFFolder(folder=folder, config=config, arch=arch, model_type=str(config.get("model_type") or ""),
                      checkpoint_keys=keys, generation=generation, family=family)
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and (p / "config.json").is_file()):
        doc = _read_json(sub / "config.json")
        if doc.get("model_type") in CODEC_MODEL_TYPES:
            result.codec_dir, result.codec_config = sub, doc
            break
    if build_model:
        names, tied, renamed, note = _module_names(folder, arch, trust_remote_code, keys)
        result.state_names, result.tied, result.renamed = names, tied, renamed
        if note:
            result.notes.append(note)
    return result


def propose_shape(hf: HFFolder) -> tuple[str, str]:
    """The scaffold shape for the folder's architecture and why (one sentence).

    Returns
    -------
    (shape, reason)
        ``two-stage`` for a talker that emits every codebook of a frame and a separate codec;
        ``native-ar`` for a plain causal LM over audio tokens; ``single-stage-ar`` otherwise.
    """
    cfg = hf.config
    codec = next((k for k in ("codec_config", "audio_tokenizer_config", "speech_tokenizer_config")
                  if isinstance(cfg.get(k), dict)), None)
    if hf.family == "csm":
        return "two-stage", (f"{hf.arch}: a Llama backbone predicts codebook 0 and a depth decoder the other "
                             f"{cfg.get('num_codebooks', '?')} - 1 of each frame; the codec ({codec}: "
                             f"{cfg.get(codec, {}).get('model_type', '?') if codec else '?'}) decodes frames "
                             "in its own stage")
    if hf.family == "dia":
        return "two-stage", (f"{hf.arch}: an encoder-decoder emits all {cfg.get('decoder_config', {}).get('num_channels', '?')} "
                             "codebooks of a frame per step (delay pattern); the DAC codec decodes frames in its own stage")
    if hf.arch.endswith("ForCausalLM"):
        return "native-ar", f"{hf.arch}: a standard causal LM; audio is side computation around it"
    if codec:
        return "two-stage", f"{hf.arch}: the config carries {codec}: a separate codec stage"
    return "single-stage-ar", f"{hf.arch or 'no architecture'}: no codec config found; one generator stage"
