"""Generate the port itself from a Hugging Face model folder (``scaffold --hf``; issue 31, points 2-5).

For an architecture of :data:`porting_kit.scaffold.hf_folder.FAMILIES` this writes, next to the
framework files of the scaffold:

* ``<models>/<model>_port.py``: the port — a vLLM-style talker written from the transformers
  module tree (fused ``qkv_proj`` / ``gate_up_proj``, rotary and RMSNorm from the config), the
  extra heads the transformers model has, ``load_weights`` through a ``WEIGHT_MAP`` generated from
  the checkpoint's key names, and the codec stage wrapping the reference codec class with chunked
  streaming;
* ``port_spec.py`` at the scaffold root: ``porting-kit check OUT/port_spec.py`` proves the port
  against the folder's transformers model;
* ``PORT.md``: the weight-map table (every checkpoint key -> port parameter, or why skipped) and
  where each value came from.

Config values enter the generated Python only through ``repr`` (the ``py`` filter).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from porting_kit.errors import InputError
from porting_kit.scaffold.hf_folder import FAMILIES, HFFolder
from porting_kit.scaffold.weight_map import PrefixRule, WeightMap, build_weight_map, table_rows

#: Prefix rules of each family (checkpoint / state prefix -> port prefix).
RULES = {
    "csm": (
        PrefixRule("backbone_model.embed_tokens.embed_audio_tokens.", "backbone.embed_audio_tokens."),
        PrefixRule("backbone_model.", "backbone.decoder."),
        PrefixRule("depth_decoder.model.embed_tokens.", "depth_decoder.embed_tokens."),
        PrefixRule("depth_decoder.model.inputs_embeds_projector.", "depth_decoder.inputs_embeds_projector."),
        PrefixRule("depth_decoder.model.", "depth_decoder.decoder."),
        PrefixRule("depth_decoder.codebooks_head.weight", "depth_decoder.codebooks_head"),
        PrefixRule("embed_text_tokens.", "embed_text_tokens."),
        PrefixRule("lm_head.", "lm_head."),
        PrefixRule("codec_model.", "codec.model.", fuse=False),
    ),
}
#: Codec classes by the codec config's model_type.
CODEC_CLASSES = {"mimi": "MimiModel", "dac": "DacModel", "encodec": "EncodecModel", "xcodec": "XcodecModel"}
#: Example input sizes of the generated port spec.
SPEC_SEQ_LEN, SPEC_CODEC_FRAMES = 16, 40
#: Streaming chunk of the codec stage (frames).
STREAM_CHUNK_FRAMES = 10


@dataclass
class PortPlan:
    """What :func:`plan_port` decided: files (relative path -> text), notes, the weight map."""

    files: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    weight_map: WeightMap | None = None


def _decoder_config(cfg: dict, where: str) -> dict[str, Any]:
    """The Llama-layout decoder constants of ``cfg`` (``where`` names it in errors)."""
    def need(key: str):
        if key not in cfg:
            raise InputError(f"config.json {where}: no {key!r}; the port cannot be generated")
        return cfg[key]

    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    rope = dict(rope) if isinstance(rope, dict) else {}
    if "rope_theta" not in rope:
        rope["rope_theta"] = float(cfg.get("rope_theta", 10000.0))
    rope.setdefault("rope_type", rope.pop("type", "default"))
    heads = int(need("num_attention_heads"))
    return {
        "hidden_size": int(need("hidden_size")), "intermediate_size": int(need("intermediate_size")),
        "num_hidden_layers": int(need("num_hidden_layers")), "num_attention_heads": heads,
        "num_key_value_heads": int(cfg.get("num_key_value_heads") or heads),
        "head_dim": int(cfg.get("head_dim") or int(need("hidden_size")) // heads),
        "rms_norm_eps": float(cfg.get("rms_norm_eps", 1e-6)), "vocab_size": int(need("vocab_size")),
        "hidden_act": str(cfg.get("hidden_act", "silu")), "attention_bias": bool(cfg.get("attention_bias", False)),
        "mlp_bias": bool(cfg.get("mlp_bias", False)), "rope": rope,
    }


def codec_facts(codec_cfg: dict) -> tuple[str, int, int, str]:
    """(transformers class, hop length, sample rate, where the hop came from) of a codec config,
    read through transformers' own config class (its derived ``frame_size`` / ``hop_length``)."""
    from porting_kit.adapters.torchaudio_guard import ensure_importable

    ensure_importable()
    import transformers

    model_type = str(codec_cfg.get("model_type", ""))
    cls = CODEC_CLASSES.get(model_type)
    if cls is None:
        raise InputError(f"config.json codec_config: codec model_type {model_type!r} has no generated stage "
                         f"(known: {', '.join(CODEC_CLASSES)})")
    config = transformers.AutoConfig.for_model(**codec_cfg)
    for attr in ("frame_size", "hop_length"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return cls, value, int(config.sampling_rate), f"transformers {type(config).__name__}.{attr}"
    ratios = getattr(config, "upsampling_ratios", None)
    if ratios:
        return cls, int(math.prod(ratios)), int(config.sampling_rate), "product of codec upsampling_ratios"
    raise InputError(f"config.json codec_config: cannot tell the {model_type} codec's hop length")


def stream_context(codec_cfg: dict) -> tuple[int, str]:
    """Left context (frames) for chunked decoding and where it came from: the decoder
    transformer's ``sliding_window`` when it has one (its attention span), else 8 frames."""
    window = codec_cfg.get("sliding_window")
    if isinstance(window, int) and window > 0:
        return window, "codec_config.sliding_window (the decoder transformer's attention span)"
    return 8, "default 8 frames (the codec config names no attention span)"


def _weight_tables(wm: WeightMap) -> str:
    from porting_kit.scaffold.generate import py_literal

    lines = ["", "#: Checkpoint / state name -> (port parameter, shard of a fused parameter or None).",
             "#: Generated from the checkpoint's key names; PORT.md shows it as a table.", "WEIGHT_MAP = {"]
    lines += [f"    {py_literal(k)}: ({py_literal(t)}, {py_literal(s)})," for k, (t, s) in wm.entries.items()]
    lines += ["}", "#: Names deliberately not loaded, with the reason.", "SKIPPED_WEIGHTS = {"]
    lines += [f"    {py_literal(k)}: {py_literal(v)}," for k, v in wm.skipped.items()]
    lines += ["}", "#: Tied parameters: filled from their source when the checkpoint does not carry them.",
              "TIED_WEIGHTS = {"]
    lines += [f"    {py_literal(k)}: {py_literal(v)}," for k, v in wm.tied.items()]
    lines += ["}", ""]
    return "\n".join(lines)


def _csm_context(hf: HFFolder, camel: str, kit_version: str, port_rel: str) -> dict[str, Any]:
    cfg = hf.config
    depth = cfg.get("depth_decoder_config")
    codec = cfg.get("codec_config")
    if not isinstance(depth, dict) or not isinstance(codec, dict):
        raise InputError(f"{hf.folder}/config.json: {hf.arch} needs depth_decoder_config and codec_config objects")
    codec_class, hop, rate, hop_source = codec_facts(codec)
    context, context_source = stream_context(codec)
    backbone = _decoder_config(cfg, "(backbone)")
    num_codebooks = int(cfg.get("num_codebooks", 0))
    if num_codebooks < 2:
        raise InputError(f"{hf.folder}/config.json: num_codebooks must be at least 2 for {hf.arch}")
    return {
        "camel": camel, "kit_version": kit_version, "arch": hf.arch, "folder": str(hf.folder),
        "folder_name": hf.folder.name, "port_rel": port_rel,
        "backbone": backbone, "depth": _decoder_config(depth, "depth_decoder_config"),
        "backbone_hidden_size": int(depth.get("backbone_hidden_size", backbone["hidden_size"])),
        "num_codebooks": num_codebooks, "codebook_size": int(cfg.get("codebook_size", backbone["vocab_size"])),
        "vocab_size": backbone["vocab_size"], "text_vocab_size": int(cfg.get("text_vocab_size", 0)),
        "codebook_eos": cfg.get("codebook_eos_token_id") if isinstance(cfg.get("codebook_eos_token_id"), int) else None,
        "codec_class": codec_class, "codec_config": codec, "hop_length": hop, "hop_source": hop_source,
        "sample_rate": rate, "stream_chunk": STREAM_CHUNK_FRAMES, "stream_context": context,
        "stream_lookahead": 0, "stream_source": context_source, "backbone_arch": "LlamaForCausalLM",
        "seq_len": SPEC_SEQ_LEN, "codec_frames": SPEC_CODEC_FRAMES,
        "generation": {k: v for k, v in hf.generation.items()
                       if k in ("do_sample", "temperature", "top_k", "top_p", "max_new_tokens", "eos_token_id")},
    }


def plan_port(hf: HFFolder, *, model_type: str, camel: str, kit_version: str, models_dir: str) -> PortPlan:
    """The port files for ``hf`` (empty plan with a note when its family has no generator).

    Parameters
    ----------
    hf : HFFolder
    model_type, camel : str
        The scaffold's (validated) model type and its CamelCase.
    kit_version : str
    models_dir : str
        Folder of the model's files, relative to the scaffold root.

    Returns
    -------
    PortPlan
    """
    from porting_kit.scaffold.generate import _env

    plan = PortPlan()
    if hf.family not in RULES:
        plan.notes.append(f"{hf.arch or 'this architecture'}: no port generator yet (known: "
                          f"{', '.join(a for archs in FAMILIES.values() for a in archs)}); "
                          "only the framework files were written")
        return plan
    port_rel = f"{models_dir}/{model_type}_port.py"
    wm = build_weight_map(hf.checkpoint_keys, hf.state_names, hf.renamed, hf.tied, RULES[hf.family])
    plan.weight_map = wm
    ctx = _csm_context(hf, camel, kit_version, port_rel)
    env = _env()
    ctx["weight_tables"] = _weight_tables(wm)
    ctx["layers"] = env.get_template("hf_port/layers.py.j2").render(**ctx)
    plan.files[port_rel] = env.get_template(f"hf_port/{hf.family}.py.j2").render(**ctx)
    plan.files["port_spec.py"] = env.get_template(f"hf_port/port_spec_{hf.family}.py.j2").render(**ctx)
    plan.files["PORT.md"] = _port_doc(hf, ctx, wm)
    for name in wm.skipped:
        plan.notes.append(f"checkpoint key {name} has no slot in the port: {wm.skipped[name]}")
    return plan


def _port_doc(hf: HFFolder, ctx: dict, wm: WeightMap) -> str:
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = [f"# {ctx['camel']} port of {hf.arch}", "",
             f"Generated by porting-kit {ctx['kit_version']} from `{cell(hf.folder)}`.", "",
             "Prove it: `porting-kit check port_spec.py` (every applicable family against the folder's "
             "transformers model).", "",
             "## Values and where they came from", "",
             "| value | port | source |", "|---|---|---|",
             f"| backbone rope_theta | {ctx['backbone']['rope']['rope_theta']!r} | config.json rope_parameters |",
             f"| hop length | {ctx['hop_length']} | {cell(ctx['hop_source'])} |",
             f"| sample rate | {ctx['sample_rate']} | codec_config.sampling_rate |",
             f"| stream context frames | {ctx['stream_context']} | {cell(ctx['stream_source'])} |",
             f"| stream chunk frames | {ctx['stream_chunk']} | porting-kit default |", "",
             "## Weight map", "",
             f"{len(wm.entries)} names mapped, {len(wm.skipped)} skipped, {len(wm.tied)} tied.", "",
             "| checkpoint / state name | port parameter |", "|---|---|"]
    lines += [f"| `{cell(a)}` | `{cell(b)}` |" for a, b in table_rows(wm)]
    if wm.tied:
        lines += ["", "Tied (filled from the source when the checkpoint lacks them):", ""]
        lines += [f"* `{cell(a)}` <- `{cell(b)}`" for a, b in wm.tied.items()]
    return "\n".join(lines) + "\n"
