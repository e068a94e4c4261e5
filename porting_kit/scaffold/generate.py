"""Generate the serving-framework files of a port (``porting-kit scaffold``).

Targets and shapes (DESIGN.md, "Scaffolds"):

* vLLM-Omni 0.30.0 — ``two-stage`` (AR code predictor + codec decoder,
  ``async_chunk``), ``single-stage-ar`` (MOSS-TTS-Nano style generator pattern),
  ``native-ar`` (VoxCPM2 style: base LM under vLLM + side computation). Files:
  ``pipeline.py``, ``deploy/<model>.yaml``, ``tts_adapters/<model>.py``, the
  model skeleton, L1-L4 tests, ``end2end.py``, a benchmark entry, and the
  registration lines (pipeline registry, model registry, adapter import block).
* SGLang-Omni 0.1.9 — ``config.py`` (``PipelineConfig`` subclass wired with
  ``next`` / ``wait_for`` + ``merge_fn`` / ``stream_to`` / ``process``),
  ``stages.py`` (factories + merge function) and a YAML of per-stage overrides.
  SGLang-Omni discovers ``sglang_omni/models/<model>/config.py:EntryClass`` by
  itself (``models/registry.py`` walks the package), so no registration lines.

The decisions (what to generate, which values, why) are made here; the text is
in the Jinja2 templates under ``templates/<target>/<shape>/``. Writes go through one
:class:`porting_kit.fsutil.WriteTransaction` (each file atomic; an exception or Ctrl-C
half-way undoes them all); ``--force`` over a scaffold folder builds the new tree in a
copy beside it and swaps it in by rename (:func:`porting_kit.fsutil.replace_tree`: the
old tree survives whole until the new one is complete); nothing existing is overwritten
without ``force`` (then a ``.bak`` is kept); output paths cannot leave the
target directory. A manifest ``.porting-kit/scaffold-<model>.json`` records
what was generated, for ``porting-kit validate --static``.
"""

from __future__ import annotations

import json
import keyword
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from porting_kit.errors import InputError
from porting_kit.scaffold.facts import LM_SUBCONFIG_KEYS, Fact, ModelFacts, read_model_facts

FRAMEWORKS = ("vllm-omni", "sglang-omni")
SHAPES = ("two-stage", "single-stage-ar", "native-ar")
SHAPE_HELP = {
    "two-stage": "AR code predictor + separate codec decoder, chunks streamed between stages "
                 "(Qwen3-TTS style)",
    "single-stage-ar": "upstream bundles AR + codec in one inference_stream() generator "
                       "(MOSS-TTS-Nano style)",
    "native-ar": "base LM is a standard AR LM under vLLM, audio is side computation "
                 "(VoxCPM2 style)",
}
VLLM_OMNI_VERSION = "0.30.0"
SGLANG_OMNI_VERSION = "0.1.9"
MANIFEST_DIR = ".porting-kit"
#: Shared files of a vLLM-Omni tree that ``--into`` adds registration lines to.
REGISTRATION_FILES = ("vllm_omni/config/pipeline_registry.py", "vllm_omni/model_executor/models/registry.py",
                      "vllm_omni/entrypoints/openai/tts_adapters/__init__.py", "benchmarks/tts/model_configs.yaml")
#: Request fields (besides text, language, seed, max_new_tokens) the stage skeleton of each
#: shape reads from ``additional_information``: the adapter forwards exactly these and refuses
#: the others in ``validate()`` (a field forwarded and never read is ``consistency.field_dropped``).
STAGE_FIELDS = {
    "single-stage-ar": ("voice", "instructions", "ref_audio", "ref_text"),
    "two-stage": (),
    "native-ar": (),
}
#: Request fields a model that declares speaker / reference-audio conditioning reads on top of its shape's.
CONDITIONING_FIELDS = ("ref_audio", "ref_text")


def stage_fields(shape: str, facts: ModelFacts) -> tuple[str, ...]:
    """The request fields the stage model reads: the shape's :data:`STAGE_FIELDS`, plus
    ``ref_audio`` / ``ref_text`` when the config declares conditioning (``facts.conditioning``:
    a speaker encoder, or a codec encoder that turns a reference clip into prompt codes)."""
    fields = STAGE_FIELDS[shape]
    if facts.conditioning is not None:
        fields += tuple(f for f in CONDITIONING_FIELDS if f not in fields)
    return fields


#: Card the default ``gpu_memory_utilization`` is sized for (CI's smallest, L4).
SIZING_CARD_GIB = 24.0


@dataclass
class ScaffoldOptions:
    """What to scaffold. ``out`` and ``into`` are alternatives (exactly one).

    Attributes
    ----------
    framework : str
        ``vllm-omni`` or ``sglang-omni``.
    shape : str
        ``two-stage``, ``single-stage-ar`` or ``native-ar``.
    model_type : str
        A Python identifier; module, registry key, stage name.
    config : str or Path
        The model's HF ``config.json``.
    out : str or Path or None
        Write a fresh tree (same layout as the framework's source) here.
    into : str or Path or None
        Write into an existing framework checkout and insert registration lines.
    arch : str or None
        Architecture name (default: the config's ``architectures[0]``).
    force : bool
        Replace differing existing files (a ``.bak`` copy is kept).
    hf_id : str or None
        Hub id used in tests / examples / benchmark entry (default: the config's
        ``_name_or_path`` or ``your-org/<model_type>``).
    max_num_seqs : int or None
        Concurrency of the AR stage (default 4; below 4 needs ``serial_reason``).
    serial_reason : str or None
        Why upstream forces ``max_num_seqs: 1`` (process-wide state other than RNG);
        written into the deploy YAML and the model.
    trust_remote_code : bool
        Write ``trust_remote_code: true`` into the deploy YAML. Only ever set by the
        user (``--trust-remote-code``); a config with ``auto_map`` gets a note
        offering it, never the setting.
    upstream_package : str or Path or None
        The upstream package's wheel / unpacked folder (``--upstream-package``): when its pins
        allow an import the scaffold says so; when they do not, its codec / config files are
        vendored under the model folder's ``_vendored/`` (:mod:`porting_kit.scaffold.vendor`).
    hf : str or Path or None
        A Hugging Face model folder (``--hf``): the port itself, ``port_spec.py`` and the
        weight-map README are generated from it (:mod:`porting_kit.scaffold.hf_port`).
    """

    framework: str
    shape: str
    model_type: str
    config: str | Path
    out: str | Path | None = None
    into: str | Path | None = None
    arch: str | None = None
    force: bool = False
    hf_id: str | None = None
    max_num_seqs: int | None = None
    serial_reason: str | None = None
    trust_remote_code: bool = False
    upstream_package: str | Path | None = None
    hf: str | Path | None = None


@dataclass
class PlannedFile:
    """One file of a scaffold: path relative to the root and its text."""

    path: str
    text: str
    kind: str  # "model", "pipeline", "deploy", "adapter", "test", "example", "config", ...


@dataclass
class ScaffoldResult:
    """What :func:`scaffold` did. Paths are relative to ``root``."""

    root: str
    framework: str
    shape: str
    model_type: str
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    backed_up: list[str] = field(default_factory=list)
    registrations: list[str] = field(default_factory=list)
    manifest: str = ""
    notes: list[str] = field(default_factory=list)


# -- helpers ---------------------------------------------------------------------------------
def camel_case(model_type: str) -> str:
    """``my_tts`` -> ``MyTts``.

    Parameters
    ----------
    model_type : str
        Snake-case model type.

    Returns
    -------
    str
        CamelCase class-name stem; ``"Model"`` when nothing is left.
    """
    return "".join(part[:1].upper() + part[1:] for part in model_type.split("_") if part) or "Model"


def check_model_type(name: str) -> str:
    """Return ``name`` if it is a usable Python identifier, else raise InputError.

    Parameters
    ----------
    name : str
        The model type (folder and module names are built from it).

    Returns
    -------
    str
        ``name`` unchanged.

    Raises
    ------
    InputError
        Not an ASCII identifier, or a Python keyword.
    """
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or not name.isascii():
        raise InputError(f"model type {name!r} is not a Python identifier (use e.g. my_tts: letters, "
                         "digits, underscores, not starting with a digit)")
    if name.startswith("__"):
        raise InputError(f"model type {name!r} is a dunder / private name (it would shadow module attributes "
                         "such as __init__); use e.g. my_tts")
    return name


#: A Hub id or local path safe to show in generated files: no quotes, backslashes, whitespace.
_HF_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/:@+~")


def check_hf_id(value: str, what: str = "--hf-id") -> str:
    """Return ``value`` if it is a plain Hub id / path, else raise InputError.

    Parameters
    ----------
    value : str
        A Hugging Face Hub id (``org/name``) or a POSIX path.
    what : str
        The flag or config key it came from (named in the error).

    Returns
    -------
    str
        ``value`` unchanged.

    Raises
    ------
    InputError
        Empty, or holding a character outside letters, digits and ``._-/:@+~``.
    """
    if not value or not set(value) <= _HF_ID_CHARS:
        raise InputError(f"{what} {value!r} is not a Hub id or plain path (letters, digits and ._-/:@+~ only)")
    return value


def py_literal(value) -> str:
    """The Jinja filter ``py``: a config value as a Python literal.

    Strings are written double-quoted with JSON escapes (every JSON string is a
    Python string literal with the same value: quotes, backslashes, newlines and
    control characters are escaped); numbers and ``True`` / ``False`` / ``None``
    by ``repr``; lists, tuples and dicts element by element.

    Parameters
    ----------
    value : str, int, float, bool, None, or a list / tuple / dict of these
        A value read from a config (or derived from one).

    Returns
    -------
    str
        Source text that ``ast.literal_eval`` turns back into ``value``.

    Raises
    ------
    InputError
        A non-finite float or a value of another type (it could not be written safely).
    """
    if isinstance(value, str):
        return json.dumps(value)
    if value is None or isinstance(value, (bool, int)):
        return repr(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"cannot write the non-finite value {value!r} into generated Python")
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(py_literal(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + "".join(py_literal(v) + ", " for v in value).rstrip(" ") + ")" if value else "()"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py_literal(k)}: {py_literal(v)}" for k, v in value.items()) + "}"
    raise InputError(f"cannot write a {type(value).__name__} into generated Python")


def yaml_scalar(value) -> str:
    """The Jinja filter ``yaml``: a scalar as a YAML flow value (JSON, a subset of YAML)."""
    py_literal(value)
    return json.dumps(value)


def one_line(value) -> str:
    """The Jinja filter ``oneline``: text safe inside a comment or a docstring.

    Whitespace runs (newlines included) become one space, other unprintable characters
    ``?``, backslashes are doubled and triple quotes escaped, so the text cannot end a
    comment, a docstring or a line.
    """
    text = " ".join(str(value).split())
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"').replace("'''", "\\'\\'\\'")


def templates_root() -> Path:
    """The ``templates/`` folder (packaged copy first, then the source checkout's)."""
    from porting_kit.resources import shipped

    return shipped("templates")


def _env():
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_root())),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)
    env.filters.update(py=py_literal, yaml=yaml_scalar, oneline=one_line)
    return env


def size_gpu_memory(param_count: int | None, card_gib: float = SIZING_CARD_GIB) -> tuple[float, str]:
    """``gpu_memory_utilization`` from the parameter count, with the reasoning.

    Weights in bf16 take ``2 * params`` bytes; the same again is reserved for KV
    cache and activations (at least 1 GiB). The sum over ``card_gib`` rounded up
    to 0.05, within [0.1, 0.9].

    Parameters
    ----------
    param_count : int or None
        Parameters of the model (estimated from config.json); None or 0 when unknown.
    card_gib : float, default SIZING_CARD_GIB
        GPU memory sized for, in GiB.

    Returns
    -------
    utilization : float
        Fraction of the card (0.3 when the parameter count is unknown).
    reason : str
        The arithmetic, for the deploy YAML's header comment.
    """
    if not param_count:
        return 0.3, f"parameter count unknown (config.json lacks hidden_size / num_hidden_layers): 0.3 of a {card_gib:g} GiB card"
    weights = 2 * param_count / 2**30
    need = weights + max(weights, 1.0)
    util = min(0.9, max(0.1, math.ceil(need / card_gib * 20) / 20))
    return util, (f"~{param_count / 1e6:.0f}M params: {weights:.2f} GiB bf16 weights + "
                  f"{max(weights, 1.0):.2f} GiB KV/activations on a {card_gib:g} GiB card")


#: Most concurrent requests the reasoned default asks for (more is a measured choice).
MAX_NUM_SEQS_CAP = 16


def reason_max_num_seqs(facts: ModelFacts, util: float, max_model_len: int,
                        card_gib: float = SIZING_CARD_GIB) -> tuple[int, str]:
    """``max_num_seqs`` of the AR stage from the KV cache one request needs, with the reasoning.

    KV bytes per token = ``2 (K, V) * layers * kv_heads * head_dim * 2 (bf16)``; one
    request at ``max_model_len`` tokens needs that times ``max_model_len``. The
    requests that fit in ``util * card_gib`` minus the bf16 weights, clamped to
    ``[4, MAX_NUM_SEQS_CAP]`` (below 4 the stage serialises and leaves audio gaps;
    vLLM preempts when a batch of long requests does not fit).

    Parameters
    ----------
    facts : ModelFacts
        Needs hidden_size, num_hidden_layers, num_attention_heads (num_key_value_heads
        defaults to it) and param_count; otherwise the default 4 with "unknown".
    util : float
        ``gpu_memory_utilization`` of the stage.
    max_model_len : int
        Tokens per request (prompt + generated).
    card_gib : float
        GPU memory sized for, in GiB.

    Returns
    -------
    max_num_seqs : int
    reason : str
        One line for the deploy YAML comment.
    """
    h, layers = facts.value("hidden_size"), facts.value("num_hidden_layers")
    heads = facts.value("num_attention_heads")
    if not (h and layers and heads and facts.param_count):
        return 4, ("max_num_seqs 4: the config lacks hidden_size / num_hidden_layers / num_attention_heads, so "
                   "the KV cache per request is unknown; 4 is the least that keeps audio gap-free under load.")
    kv_heads = facts.value("num_key_value_heads", heads)
    per_token = 2 * layers * kv_heads * (h // heads) * 2
    per_request = per_token * max_model_len
    budget = util * card_gib * 2**30 - 2 * facts.param_count
    fit = int(budget // per_request) if budget > 0 else 0
    n = max(4, min(fit, MAX_NUM_SEQS_CAP))
    return n, (f"max_num_seqs {n}: one {max_model_len}-token request holds {per_request / 2**20:.0f} MiB of KV "
               f"({layers} layers x {kv_heads} KV heads x {h // heads} x K,V x bf16); {fit} fit in the "
               f"{max(budget, 0) / 2**30:.1f} GiB left after weights at gpu_memory_utilization {util} of a "
               f"{card_gib:g} GiB card (kept within 4..{MAX_NUM_SEQS_CAP}).")


def sampling_knobs(facts: ModelFacts) -> list[tuple[str, object, str]]:
    """Stage-0 ``default_sampling_params`` entries that differ from vLLM's defaults, each with its source.

    Parameters
    ----------
    facts : ModelFacts
        ``facts.sampling`` from generation_config.json / config.json.

    Returns
    -------
    list of (key, value, why)
        Only non-default values; ``why`` names the file and key it came from.
    """
    from porting_kit.scaffold.facts import SAMPLING_KEYS

    out = []
    for name, (_spellings, default) in SAMPLING_KEYS.items():
        fact = facts.sampling.get(name)
        if fact is not None and fact.value != default and not (name == "top_k" and fact.value in (0, -1)):
            out.append((name, fact.value, f"{name}: {fact.source} (vLLM's default is {default})."))
    return out


def _fact_lines(facts: ModelFacts) -> list[str]:
    out = []
    for name in ("sample_rate", "hop_length", "num_codebooks", "vocab_size", "stop_token_ids",
                 "rope_theta", "rope_scaling", "max_position_embeddings"):
        f = getattr(facts, name)
        out.append(one_line(f"{name} = {f.value!r} ({f.source})") if f else f"{name}: not in config.json")
    return out


def _template_facts(facts: ModelFacts) -> ModelFacts:
    """A copy of ``facts`` whose text (config path, sources, names) is safe in comments and docstrings."""
    import copy

    safe = copy.deepcopy(facts)
    safe.config_path = one_line(facts.config_path)
    safe.name_or_path = one_line(facts.name_or_path) if facts.name_or_path else None
    safe.notes = [one_line(n) for n in facts.notes]
    for name, value in vars(safe).items():
        if isinstance(value, Fact):
            value.source = one_line(value.source)
    return safe


def _upstream_source(facts: ModelFacts) -> dict | None:
    """The remote-code file and class ``auto_map`` names for the upstream model (``"modeling_x.Cls"`` ->
    ``<config folder>/modeling_x.py``), for the run tier to read (never run) its signatures."""
    if not facts.auto_map or facts.auto_class is None:
        return None
    try:
        ref = json.loads(Path(facts.config_path).read_text(encoding="utf-8"))["auto_map"][facts.auto_class]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    ref = ref[0] if isinstance(ref, list) and ref else ref
    if not isinstance(ref, str) or "--" in ref or ref.count(".") != 1:
        return None  # a class in another repository: nothing to read here
    module, cls = ref.split(".")
    return {"file": str(Path(facts.config_path).resolve().parent / f"{module}.py"), "class": cls}


def _hf_id(opts: ScaffoldOptions, facts: ModelFacts, notes: list[str]) -> str:
    """``--hf-id`` (checked), else the config's ``_name_or_path`` when it is a plain id, else a placeholder."""
    if opts.hf_id is not None:
        return check_hf_id(opts.hf_id)
    name = facts.name_or_path
    if name:
        try:
            return check_hf_id(name, "_name_or_path")
        except InputError:
            notes.append(f"config.json _name_or_path {name!r} is not a plain Hub id: your-org/{opts.model_type} "
                         "was written instead (pass --hf-id)")
    return f"your-org/{opts.model_type}"


def _codec_limit(facts: ModelFacts) -> str | None:
    """One comment line on the codec vocabulary (valid codes per codebook), or None when unknown."""
    size = facts.codebook_size
    if size is None:
        return None
    return one_line(f"codec vocabulary: codes 0..{size.value - 1} per codebook ({size.source}); compute_logits "
                    "must mask every other id of the LM head, or a sampled id breaks the codec lookup.")


#: Left-context frames written when the codec config names no decoder window.
DEFAULT_LEFT_CONTEXT_FRAMES = 8
#: The stop flag a native-ar model emits when its own stop head fires (continue is 0): the
#: sampled token of a native-ar LM is the model's placeholder, never a text token after the prompt.
NATIVE_AR_STOP_ID = 1


def _stop_ids(shape: str, facts: ModelFacts) -> tuple[list[int], str]:
    """Stage-0 stop token ids and where they came from.

    A codec / audio EOS (``codec_eos_token_id`` ...) is the stop id of every shape. A native-ar model
    whose config names only the text LM's ``eos_token_id`` (VoxCPM2: ``lm_config.eos_token_id`` 2)
    stops on its own stop head instead: the model emits :data:`NATIVE_AR_STOP_ID` (vLLM-Omni's
    VoxCPM2 stops on [1]); the text EOS is never sampled after the prompt.
    """
    fact = facts.stop_token_ids
    text_eos = fact is not None and fact.source.rpartition(".")[2] == "eos_token_id"
    if shape == "native-ar" and (fact is None or text_eos):
        why = (f"the model's stop flag (its stop head fires: {NATIVE_AR_STOP_ID}, continue 0)"
               + (f"; {fact.source} {fact.value} is the text LM's EOS, never sampled after the prompt" if fact else ""))
        return [NATIVE_AR_STOP_ID], why
    if fact is not None:
        return list(fact.value), fact.source
    if facts.generation_eos is not None:
        return list(facts.generation_eos.value), facts.generation_eos.source
    return [2], "not in config.json: set it"


@dataclass
class _Context:
    """Template variables, computed once from options + facts."""

    values: dict


def _context(opts: ScaffoldOptions, facts: ModelFacts) -> _Context:
    from porting_kit.version import __version__

    m = opts.model_type
    camel = camel_case(m)
    arch = opts.arch or facts.architecture or f"{camel}ForConditionalGeneration"
    if not arch.isidentifier() or keyword.iskeyword(arch) or arch.startswith("__") or not arch.isascii():
        raise InputError(f"architecture name {arch!r} is not a usable class name (pass --arch)")
    vocab = int(facts.value("vocab_size", 32000))
    stop_ids, stop_why = _stop_ids(opts.shape, facts)
    if max(stop_ids) >= vocab:
        vocab = max(stop_ids) + 2
    codebook_size = facts.value("codebook_size")
    # Code heads: the codec vocabulary. A vocab_size far wider than it is the text vocabulary of a
    # nested config (facts.ambiguities says so): the first head covers the codes and the stop ids.
    head_vocab = vocab if not codebook_size or vocab <= 2 * codebook_size else max(codebook_size,
                                                                                    max(stop_ids) + 1)
    eos = stop_ids[0]
    max_model_len = int(min(facts.value("max_position_embeddings", 4096), 32768))
    util, util_why = size_gpu_memory(facts.param_count)
    max_num_seqs = opts.max_num_seqs
    reasoned, reasoned_why = reason_max_num_seqs(facts, util, max_model_len)
    if opts.serial_reason:
        max_num_seqs = 1
    elif max_num_seqs is None:
        max_num_seqs = reasoned
    elif max_num_seqs < 4:
        raise InputError(f"--max-num-seqs {max_num_seqs} is below 4: give the reason with --serial-reason "
                         "(upstream process-wide state), or use 4 or more")
    notes: list[str] = []
    hf_id = _hf_id(opts, facts, notes)
    if opts.serial_reason:
        seqs_why = f"max_num_seqs 1: {one_line(opts.serial_reason)} Generation must stay serial."
    elif opts.max_num_seqs is None:
        seqs_why = reasoned_why
    else:
        seqs_why = f"max_num_seqs {max_num_seqs}: set with --max-num-seqs (the KV estimate gave {reasoned})."
    mml_src = facts.max_position_embeddings.source if facts.max_position_embeddings else "default 4096"
    stage0: list[tuple[str, object, str]] = [("max_num_seqs", max_num_seqs, seqs_why),
              ("gpu_memory_utilization", util, f"gpu_memory_utilization: {util_why}.")]
    if opts.shape == "single-stage-ar":
        stage0.append(("enforce_eager", "true", ("enforce_eager: the generator pattern steps upstream "
                       "Python code per request; there is no CUDA graph to capture.")))
    elif opts.shape == "native-ar":
        stage0.append(("enforce_eager", "true", ("enforce_eager: the side computation runs outside "
                       "vLLM's graph capture until it is captured separately.")))
    stage0 += [
        ("max_model_len", max_model_len, f"max_model_len: from {mml_src}."),
        ("devices", '"0"', "devices: one GPU."),
    ]
    codebooks = int(facts.value("num_codebooks", 8))
    stage1 = [
        ("max_num_seqs", max(max_num_seqs, 4), ("max_num_seqs: the codec decodes the chunks of every "
         "live stage-0 request; keep it at least stage 0's.")),
        ("gpu_memory_utilization", 0.1, "gpu_memory_utilization: the codec decoder is small next to the LM."),
        ("enforce_eager", "true", "enforce_eager: the codec skeleton has no CUDA graph path yet."),
        ("devices", '"0"', "devices: colocated with stage 0 on one GPU."),
    ]
    codec_tokens = codebooks * max_model_len
    if codec_tokens > 32768:
        budget = 1 << (codec_tokens - 1).bit_length()
        stage1.append(("max_num_batched_tokens", budget, (
            f"max_num_batched_tokens: a full-payload codec prompt is {codebooks} codebooks x up to "
            f"{max_model_len} frames = {codec_tokens} tokens, above the 32768 default.")))
    stop_src = one_line(stop_why)
    left = facts.codec_left_context
    values = dict(  # noqa: C408 - keyword form reads as the template variables
        kit_version=__version__, shape=opts.shape, model_type=m, camel=camel, arch=arch,
        const_name=f"{m.upper()}_PIPELINE", facts=_template_facts(facts), fact_lines=_fact_lines(facts),
        sample_rate=int(facts.value("sample_rate", 24000)), hop_length=int(facts.value("hop_length", 480)),
        num_codebooks=int(facts.value("num_codebooks", 8)), vocab_size=vocab, eos_id=eos,
        continue_id=0 if eos != 0 else 1, stop_token_ids=list(stop_ids), stop_source=stop_src,
        rope_theta=float(facts.value("rope_theta", 10000.0)), max_model_len=max_model_len,
        serial_reason=one_line(opts.serial_reason or ""), hf_id=hf_id, max_num_seqs=max_num_seqs,
        stage0=m, stage1=f"{m}_code2wav", codec_arch=f"{camel}Code2Wav", codec_class=f"{camel}Code2Wav",
        model_class=(f"{camel}ForGeneration" if opts.shape == "single-stage-ar"
                     else f"{camel}TalkerForConditionalGeneration"),
        adapter_class=f"{camel}TTSAdapter", stage0_knobs=stage0, stage1_knobs=stage1,
        stage_ids=[0, 1] if opts.shape == "two-stage" else [0],
        sglang_version=SGLANG_OMNI_VERSION, sglang_package=f"sglang_omni.models.{m}",
        engine_fraction=min(0.8, util + 0.1), param_note=util_why, notes=notes,
        sampling_knobs=sampling_knobs(facts), codec_limit=_codec_limit(facts),
        trust_remote_code=bool(opts.trust_remote_code), accumulate_nonstreaming=opts.shape == "single-stage-ar",
        codebook_size=codebook_size or head_vocab, head_vocab=head_vocab, lm_subconfigs=LM_SUBCONFIG_KEYS,
        left_context_frames=left.value if left else DEFAULT_LEFT_CONTEXT_FRAMES,
        left_context_source=one_line(left.source) if left else "not in the codec config: a placeholder; set it",
        special_tokens=[(k, f.value, one_line(f.source)) for k, f in sorted(facts.special_tokens.items())],
        codec_checkpoint=facts.value("codec_checkpoint"),
        codec_checkpoint_source=one_line(facts.codec_checkpoint.source) if facts.codec_checkpoint else "",
        upstream_auto_class=facts.auto_class or "AutoModel",
        stage_fields=stage_fields(opts.shape, facts),
        conditioning=facts.value("conditioning"),
        conditioning_source=one_line(facts.conditioning.source) if facts.conditioning else "",
    )
    return _Context(values)


def plan_files(opts: ScaffoldOptions, facts: ModelFacts) -> tuple[list[PlannedFile], dict]:
    """The files of the scaffold (relative paths + rendered text) and the context.

    Parameters
    ----------
    opts : ScaffoldOptions
        Framework, shape, model type and the overrides given.
    facts : ModelFacts
        What was read from the config.

    Returns
    -------
    files : list of PlannedFile
        Relative path and rendered text of each file, in write order.
    context : dict
        The template context the files were rendered with.

    Raises
    ------
    InputError
        Unknown framework / shape, or values that cannot make a valid scaffold.
    """
    if opts.framework not in FRAMEWORKS:
        raise InputError(f"--framework must be one of {', '.join(FRAMEWORKS)}, got {opts.framework!r}")
    if opts.shape not in SHAPES:
        raise InputError(f"--shape must be one of {', '.join(SHAPES)}, got {opts.shape!r}")
    check_model_type(opts.model_type)
    ctx = _context(opts, facts).values
    env = _env()
    m = opts.model_type

    def render(name: str) -> str:
        return env.get_template(name).render(**ctx)

    files: list[PlannedFile] = []
    if opts.framework == "sglang-omni":
        pkg = f"sglang_omni/models/{m}"
        files += [
            PlannedFile(f"{pkg}/__init__.py", f'"""{ctx["camel"]} on SGLang-Omni (porting-kit scaffold)."""\n', "init"),
            PlannedFile(f"{pkg}/config.py", render("sglang_omni/config.py.j2"), "config"),
            PlannedFile(f"{pkg}/stages.py", render("sglang_omni/stages.py.j2"), "stages"),
            PlannedFile(f"configs/{m}.yaml", render("sglang_omni/overrides.yaml.j2"), "overrides"),
        ]
        return files, ctx

    shape_dir = f"vllm_omni/{opts.shape}"
    models = f"vllm_omni/model_executor/models/{m}"
    files += [
        PlannedFile(f"{models}/__init__.py", render("vllm_omni/common/init.py.j2"), "init"),
        PlannedFile(f"{models}/pipeline.py", render(f"{shape_dir}/pipeline.py.j2"), "pipeline"),
        PlannedFile(f"{models}/modeling_{m}.py", render(f"{shape_dir}/modeling.py.j2"), "model"),
        PlannedFile(f"{models}/_vllm_seam.py", render("vllm_omni/common/vllm_seam.py.j2"), "seam"),
        PlannedFile(f"vllm_omni/deploy/{m}.yaml", render(f"{shape_dir}/deploy.yaml.j2"), "deploy"),
        PlannedFile(f"vllm_omni/entrypoints/openai/tts_adapters/{m}.py",
                    render("vllm_omni/common/adapter.py.j2"), "adapter"),
        PlannedFile(f"tests/model_executor/models/{m}/test_{m}_config.py",
                    render("vllm_omni/common/test_l1.py.j2"), "test"),
        PlannedFile(f"tests/model_executor/models/{m}/test_{m}_model.py",
                    render("vllm_omni/common/test_model.py.j2"), "test"),
        PlannedFile(f"tests/model_executor/models/{m}/conftest.py",
                    render("vllm_omni/common/conftest_markers.py.j2"), "test"),
        PlannedFile(f"tests/e2e/online_serving/test_{m}.py", render("vllm_omni/common/test_online.py.j2"), "test"),
        PlannedFile(f"tests/e2e/online_serving/test_{m}_expansion.py",
                    render("vllm_omni/common/test_expansion.py.j2"), "test"),
        PlannedFile(f"examples/offline_inference/text_to_speech/{m}/end2end.py",
                    render("vllm_omni/common/end2end.py.j2"), "example"),
    ]
    if opts.shape == "two-stage":
        files += [
            PlannedFile(f"{models}/{m}_code2wav.py", render(f"{shape_dir}/code2wav.py.j2"), "model"),
            PlannedFile(f"vllm_omni/model_executor/stage_input_processors/{m}.py",
                        render(f"{shape_dir}/stage_input_processors.py.j2"), "processor"),
        ]
    return files, ctx


def hf_defaults(values: dict, trust_remote_code: bool = False) -> list[str]:
    """Fill ``config``, ``model_type``, ``shape`` and ``framework`` in ``values`` from the folder
    ``values["hf"]`` where the user gave none; return the lines to print (the shape and why).

    Raises
    ------
    InputError
        The folder cannot be read (:func:`porting_kit.scaffold.hf_folder.read_hf_folder`), or
        ``--config`` names another file than the folder's ``config.json``.
    """
    from porting_kit.scaffold.hf_folder import propose_shape, read_hf_folder

    hf = read_hf_folder(values["hf"], trust_remote_code=trust_remote_code, build_model=False)
    lines = []
    cfg = hf.folder / "config.json"
    if values.get("config") and Path(values["config"]).expanduser().resolve() != cfg:
        raise InputError(f"--config {values['config']} and --hf {values['hf']} disagree: --hf reads {cfg}; "
                         "give one of them")
    values["config"] = cfg
    if not values.get("model_type") and hf.model_type:
        values["model_type"] = hf.model_type
    if not values.get("framework"):
        values["framework"] = "vllm-omni"
    if not values.get("shape"):
        shape, why = propose_shape(hf)
        values["shape"] = shape
        lines.append(f"shape {shape} (proposed; --shape overrides): {why}")
    return lines


def _codec_folder_facts(facts: ModelFacts, opts: ScaffoldOptions) -> list[str]:
    """Set the codec facts (sample rate, hop length, codebooks) of the ``--hf`` folder's codec — its
    ``codec_config`` or a codec sub-folder (Dia keeps DAC apart) — read through transformers' config
    class (Mimi's hop is its ``frame_size``, not the product of ``upsampling_ratios``). Returns a
    note for each value that replaced a different one read from config.json's keys."""
    from porting_kit.scaffold.hf_folder import read_hf_folder
    from porting_kit.scaffold.hf_port import CODEC_CLASSES, codec_facts

    hf = read_hf_folder(opts.hf, trust_remote_code=opts.trust_remote_code, build_model=False)
    codec, where = hf.codec_config, f"{hf.codec_dir.name}/config.json" if hf.codec_dir else ""
    if codec is None and isinstance(hf.config.get("codec_config"), dict):
        codec, where = hf.config["codec_config"], "config.json codec_config"
    if codec is None or codec.get("model_type") not in CODEC_CLASSES:
        return []
    _cls, hop, rate, hop_source = codec_facts(codec)
    found = {"sample_rate": Fact(rate, f"{where} sampling_rate"), "hop_length": Fact(hop, f"{where} ({hop_source})")}
    n = codec.get("n_codebooks", codec.get("num_quantizers"))
    if isinstance(n, int) and n > 0 and facts.num_codebooks is None:
        found["num_codebooks"] = Fact(n, f"{where} n_codebooks")
    notes = []
    for name, fact in found.items():
        old = getattr(facts, name)
        if old is not None and old.value != fact.value:
            notes.append(f"{name} {fact.value} from {fact.source}, not {old.value} ({old.source})")
        setattr(facts, name, fact)
    return notes


def _plan_hf_port(opts: ScaffoldOptions, ctx: dict, files: list[PlannedFile]) -> list[str]:
    """Add the port, ``port_spec.py`` and the weight-map README of ``opts.hf`` to ``files``;
    return the notes (nothing without ``--hf``)."""
    if opts.hf is None:
        return []
    from porting_kit.scaffold.hf_folder import read_hf_folder
    from porting_kit.scaffold.hf_port import plan_port

    hf = read_hf_folder(opts.hf, trust_remote_code=opts.trust_remote_code)
    models = (f"sglang_omni/models/{opts.model_type}" if opts.framework == "sglang-omni"
              else f"vllm_omni/model_executor/models/{opts.model_type}")
    plan = plan_port(hf, model_type=opts.model_type, camel=ctx["camel"], kit_version=ctx["kit_version"],
                     models_dir=models, env=_env())
    kinds = {"port_spec.py": "port_spec"}
    for rel, text in plan.files.items():
        kind = kinds.get(rel, "port_doc" if rel.endswith(".md") else "port")
        files.append(PlannedFile(rel if kind != "port_doc" else f"{models}/README.md", text, kind))
    return hf.notes + plan.notes


def registration_entries(ctx: dict) -> list[tuple[str, str, str, str]]:
    """Model-registry rows ``(arch, folder, module, class)`` for the shape.

    Parameters
    ----------
    ctx : dict
        The template context (``model_type``, ``arch``, ``model_class``, ``shape``;
        for ``two-stage`` also ``codec_arch``, ``codec_class``).

    Returns
    -------
    list of (str, str, str, str)
        One row, two for a two-stage model (the code2wav stage).
    """
    m = ctx["model_type"]
    rows = [(ctx["arch"], m, f"modeling_{m}", ctx["model_class"])]
    if ctx["shape"] == "two-stage":
        rows.append((ctx["codec_arch"], m, f"{m}_code2wav", ctx["codec_class"]))
    return rows


def _registration_doc(ctx: dict) -> str:
    m, const = ctx["model_type"], ctx["const_name"]
    rows = "".join(f'    "{a}": ("{f}", "{mod}", "{c}"),\n' for a, f, mod, c in registration_entries(ctx))
    bench = _env().get_template("vllm_omni/common/benchmark_entry.yaml.j2").render(**ctx)
    return (
        f"# Registration lines for {m}\n\n"
        "`porting-kit scaffold --into <vllm-omni checkout>` inserts these; with `--out` add them by hand.\n\n"
        "## vllm_omni/config/pipeline_registry.py\n\n```python\n"
        f"from vllm_omni.model_executor.models.{m}.pipeline import {const}\n"
        f'# in OMNI_PIPELINES:\n    "{m}": {const},\n```\n\n'
        "## vllm_omni/model_executor/models/registry.py (in `_OMNI_MODELS`)\n\n```python\n"
        f"{rows}```\n\n"
        "## vllm_omni/entrypoints/openai/tts_adapters/__init__.py (import block at the bottom)\n\n"
        f"```python\n    {m},\n```\n\n"
        f"## benchmarks/tts/model_configs.yaml (under `models:`)\n\n```yaml{bench}```\n"
    )


def _safe_target(root: Path, rel: str) -> Path:
    target = (root / rel).resolve()
    if not target.is_relative_to(root):
        raise InputError(f"refusing to write {rel}: it resolves outside {root}")
    return target


def _registration_edits(root: Path, ctx: dict) -> list[tuple[str, str, str | None]]:
    """``(relative path, new text, old text or None)`` for every registration file
    that needs lines added (``--into``)."""
    from porting_kit.adapters.vllm_omni import registry as reg

    m = ctx["model_type"]
    edits = []
    specs = [
        ("vllm_omni/config/pipeline_registry.py",
         lambda t, p: reg.add_pipeline_registration(t, m, ctx["const_name"], p)),
        ("vllm_omni/model_executor/models/registry.py",
         lambda t, p: reg.add_model_registration(t, registration_entries(ctx), p)),
        ("vllm_omni/entrypoints/openai/tts_adapters/__init__.py",
         lambda t, p: reg.add_adapter_import(t, m, p)),
    ]
    for rel, fn in specs:
        path = _safe_target(root, rel)
        if not path.is_file():
            raise InputError(f"{path} not found: --into needs a vLLM-Omni source tree")
        old = path.read_text(encoding="utf-8")
        new = fn(old, rel)
        if new != old:
            if not reg.only_added(old, new):  # never change an existing line
                raise InputError(f"{rel}: registration would change existing lines; add it by hand")
            edits.append((rel, new, old))
    bench_rel = "benchmarks/tts/model_configs.yaml"
    bench_path = _safe_target(root, bench_rel)
    old = bench_path.read_text(encoding="utf-8") if bench_path.is_file() else None
    entry = _env().get_template("vllm_omni/common/benchmark_entry.yaml.j2").render(**ctx)
    new = reg.add_benchmark_entry(old, ctx["hf_id"], entry)
    if new != old:
        edits.append((bench_rel, new, old))
    return edits


def scaffold(opts: ScaffoldOptions) -> ScaffoldResult:
    """Generate the scaffold described by ``opts``.

    Parameters
    ----------
    opts : ScaffoldOptions
        What to generate and where (exactly one of ``out`` or ``into``).

    Returns
    -------
    ScaffoldResult
        Files written, unchanged (identical content already there), backed up,
        registration files edited, the manifest path.

    Raises
    ------
    InputError
        Bad model type / framework / shape, missing or unreadable config,
        ``out`` and ``into`` both or neither given, ``into`` not a framework
        tree, existing differing files without ``force``, a path escaping the
        target directory.
    """
    from porting_kit.fsutil import WriteTransaction, replace_tree

    check_model_type(opts.model_type)
    if (opts.out is None) == (opts.into is None):
        raise InputError("give exactly one of --out DIR (fresh tree) or --into PATH (existing checkout)")
    facts = read_model_facts(opts.config)
    codec_notes = _codec_folder_facts(facts, opts) if opts.hf is not None else []
    files, ctx = plan_files(opts, facts)
    port_notes = codec_notes + _plan_hf_port(opts, ctx, files)
    into = opts.into is not None
    root = Path(opts.into if into else opts.out).expanduser().resolve()
    if into:
        marker = ("vllm_omni/config/stage_config.py" if opts.framework == "vllm-omni"
                  else "sglang_omni/config/schema.py")
        if not (root / marker).is_file():
            raise InputError(f"--into {root}: not a {opts.framework} source tree ({marker} missing)")
    elif root.exists() and not root.is_dir():
        raise InputError(f"--out {root} exists and is not a directory")

    result = ScaffoldResult(root=str(root), framework=opts.framework, shape=opts.shape,
                            model_type=opts.model_type)
    if opts.framework == "vllm-omni" and not into:
        files.append(PlannedFile("REGISTRATION.md", _registration_doc(ctx), "doc"))
    edits = _registration_edits(root, ctx) if (into and opts.framework == "vllm-omni") else []

    vendored = None
    if opts.upstream_package is not None and opts.framework == "vllm-omni":
        from porting_kit.scaffold.vendor import plan_vendoring, vendored_texts

        plan = plan_vendoring(opts.upstream_package)
        vendored = {"decision": plan.decision, "reason": plan.reason(), "package": plan.package,
                    "version": plan.version}
        if plan.decision == "vendor":
            texts, record = vendored_texts(opts.upstream_package, plan)
            base = f"vllm_omni/model_executor/models/{opts.model_type}/_vendored"
            files += [PlannedFile(f"{base}/{rel}", text, "vendored") for rel, text in texts.items()]
            vendored |= {"folder": base, "files": record["files"],
                         "patches_needed": sum(p["after"] is None for p in record["patches"])}
    manifest_rel = f"{MANIFEST_DIR}/scaffold-{opts.model_type}.json"
    manifest = {
        "schema": "porting-kit/scaffold/1", "framework": opts.framework, "shape": opts.shape,
        "model_type": opts.model_type, "arch": ctx["arch"], "kit_version": ctx["kit_version"],
        "target_version": VLLM_OMNI_VERSION if opts.framework == "vllm-omni" else SGLANG_OMNI_VERSION,
        "mode": "into" if into else "out", "stage_ids": ctx["stage_ids"], "entry_stage": ctx["stage0"],
        "const_name": ctx["const_name"], "hf_id": ctx["hf_id"],
        "files": {f.kind + ":" + f.path: f.path for f in files},
        "registration_files": list(REGISTRATION_FILES) if (into and opts.framework == "vllm-omni") else [],
        "facts": {**{name: (getattr(facts, name).value if getattr(facts, name) else None)
                     for name in ("sample_rate", "hop_length", "num_codebooks", "vocab_size",
                                  "stop_token_ids", "rope_theta", "codebook_size")},
                  "generation_eos_token_ids": facts.value("generation_eos")},
        "fact_sources": {name: f"{Path(facts.config_path).name} {getattr(facts, name).source}"
                         for name in ("stop_token_ids", "num_codebooks", "codebook_size") if getattr(facts, name)}
        | ({"generation_eos_token_ids": facts.generation_eos.source} if facts.generation_eos else {}),
        "trust_remote_code": bool(opts.trust_remote_code),
        "ambiguities": list(facts.ambiguities),
        "conditioning": ({"kind": facts.conditioning.value, "source": facts.conditioning.source}
                         if facts.conditioning else None),
        "stage_fields": list(ctx["stage_fields"]),
        "upstream_package": vendored,
        "upstream_source": _upstream_source(facts),
    }
    if ctx["stop_token_ids"] != facts.value("stop_token_ids"):  # a deliberate choice (native-ar stop flag)
        manifest["facts"]["stop_token_ids"] = ctx["stop_token_ids"]
        manifest["fact_sources"]["stop_token_ids"] = ctx["stop_source"]
    manifest["facts"]["codec_left_context"] = facts.value("codec_left_context")
    files.append(PlannedFile(manifest_rel, json.dumps(manifest, indent=2) + "\n", "manifest"))

    # Check everything before writing anything: no half-written scaffold on a conflict.
    conflicts, todo = [], []
    for f in files:
        target = _safe_target(root, f.path)
        if target.exists():
            if target.is_dir():
                raise InputError(f"{target} is a directory; cannot write a file there")
            if target.read_text(encoding="utf-8", errors="replace") == f.text:
                result.unchanged.append(f.path)
                continue
            if f.kind != "manifest":
                conflicts.append(f.path)
        todo.append((f, target))
    if conflicts and not opts.force:
        raise InputError(f"{len(conflicts)} file(s) already exist with other content, e.g. {conflicts[0]}; "
                         "rerun with --force to replace them (a .bak copy of each is kept)")
    def write_all(base: Path) -> None:
        # One transaction: an exception or Ctrl-C half-way leaves ``base`` as it was.
        with WriteTransaction() as txn:
            for f, target in todo:
                target = base / target.relative_to(root)
                existed = target.exists() and f.kind != "manifest"
                txn.write_text(target, f.text, backup=existed)
                if existed:
                    result.backed_up.append(f.path + ".bak*")
                if f.kind != "manifest":
                    result.written.append(f.path)
            for rel, new, _old in edits:
                txn.write_text(base / _safe_target(root, rel).relative_to(root), new)
                result.registrations.append(rel)

    if conflicts and not into:
        # --force over a scaffold folder: the new tree is built in a copy beside it and swapped
        # in by rename, so the old tree survives whole until the new one is complete (a Ctrl-C
        # at any point leaves one or the other). --into writes in the user's framework checkout
        # (a git work tree the shell may stand in): file by file, in one transaction.
        replace_tree(root, write_all)
    else:
        write_all(root)
    result.manifest = manifest_rel
    result.notes += ctx["notes"] + port_notes
    if facts.auto_map and not opts.trust_remote_code and opts.framework == "vllm-omni":
        result.notes.append("config.json has auto_map: the model's code ships with the checkpoint and loading it "
                            "needs trust_remote_code; rerun with --trust-remote-code to write trust_remote_code: "
                            "true into the deploy YAML (never set without asking)")
    if facts.rope_scaling is not None:
        result.notes.append(f"config.json sets RoPE scaling ({facts.rope_scaling.source} = "
                            f"{dict(facts.rope_scaling.value)}): the port must apply it (porting-kit check: rope)")
    result.notes += [f"ambiguous config field: {a}" for a in facts.ambiguities]
    if facts.codec_checkpoint is not None and not opts.trust_remote_code and opts.shape == "single-stage-ar":
        result.notes.append(f"the codec is its own checkpoint ({facts.codec_checkpoint.value!r}, "
                            f"{facts.codec_checkpoint.source}); it is loaded with trust_remote_code=False: if it "
                            "ships its own code, rerun with --trust-remote-code")
    if vendored is not None:
        where = f" into {vendored['folder']} (see VENDORED.json)" if vendored["decision"] == "vendor" else ""
        result.notes.append(f"upstream package: {vendored['reason']}{where}")
    for name in ("sample_rate", "hop_length", "num_codebooks", "stop_token_ids"):
        if getattr(facts, name) is None:
            result.notes.append(f"{name} not found in {facts.config_path}: a placeholder was written; set it")
    return result


def result_dict(result: ScaffoldResult) -> dict:
    """The result as plain JSON-able data (for notebooks).

    Parameters
    ----------
    result : ScaffoldResult

    Returns
    -------
    dict
        ``dataclasses.asdict(result)``.
    """
    return asdict(result)


#: How the generated Python is linted: vLLM-Omni's line length (120), the
#: frameworks' packages first-party, otherwise ruff's defaults (no project config).
RUFF_ARGS = ("check", "--isolated", "--line-length", "120", "--output-format", "concise",
             "--config", "lint.isort.known-first-party = ['vllm_omni', 'sglang_omni', 'tests']")


def ruff_check(root: str | Path) -> tuple[int, str]:
    """Run ruff over the Python files of a scaffold; ``(exit code, output)``.

    Parameters
    ----------
    root : str or pathlib.Path
        The scaffold's root; ruff runs there with :data:`RUFF_ARGS`.

    Returns
    -------
    returncode : int
        ruff's exit code (0: clean).
    output : str
        Its stdout and stderr, stripped.

    Raises
    ------
    InputError
        ruff is not installed.
    """
    import shutil
    import subprocess

    exe = shutil.which("ruff")
    if exe is None:
        raise InputError("ruff is not installed (pip install ruff)")
    proc = subprocess.run([exe, *RUFF_ARGS, "."], cwd=str(root), capture_output=True, text=True, check=False)
    return proc.returncode, (proc.stdout + proc.stderr).strip()
