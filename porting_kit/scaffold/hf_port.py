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
    "causal_lm": (
        PrefixRule("model.embed_tokens.", "embed_tokens."),
        PrefixRule("model.", "model."),
        PrefixRule("lm_head.", "lm_head."),
    ),
    "dia": (
        PrefixRule("model.encoder.", "encoder."),
        PrefixRule("model.decoder.embeddings.embed.", "decoder.embed_audio."),
        PrefixRule("model.decoder.", "decoder."),
        PrefixRule("logits_dense.", "logits_dense."),
    ),
}
#: Codec classes by the codec config's model_type.
CODEC_CLASSES = {"mimi": "MimiModel", "dac": "DacModel", "encodec": "EncodecModel", "xcodec": "XcodecModel"}
#: Example input sizes of the generated port spec.
SPEC_SEQ_LEN, SPEC_CODEC_FRAMES = 16, 40
#: generation_config.json keys the port's sampler applies (GenerationConfig names).
SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty")
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
    eps = cfg.get("rms_norm_eps", cfg.get("norm_eps", 1e-6))
    return {
        "hidden_size": int(need("hidden_size")), "intermediate_size": int(need("intermediate_size")),
        "num_hidden_layers": int(need("num_hidden_layers")), "num_attention_heads": heads,
        "num_key_value_heads": int(cfg.get("num_key_value_heads") or heads),
        "head_dim": int(cfg.get("head_dim") or int(need("hidden_size")) // heads),
        "rms_norm_eps": float(eps), "vocab_size": int(need("vocab_size")),
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


def stream_context(codec_cfg: dict) -> tuple[int, int, str]:
    """(left context, lookahead, where they came from), in frames, for chunked decoding.

    A causal decoder with a transformer (Mimi): context = its ``sliding_window`` (the attention
    span), no lookahead. DAC (non-causal convolutions): both sides get the decoder's receptive
    field in frames, ``3 + sum_i (3 + 3 * (1 + 3 + 9)) / prod(strides[:i+1]) + 1`` (the kernel-7
    input conv, each block's transposed conv and its residual units of dilations 1, 3, 9, the
    kernel-7 output conv), rounded up. Otherwise 8 frames of context.
    """
    window = codec_cfg.get("sliding_window")
    if isinstance(window, int) and window > 0:
        return window, 0, "codec_config.sliding_window (the decoder transformer's attention span); causal: no lookahead"
    if codec_cfg.get("model_type") == "dac":
        ratios = codec_cfg.get("upsampling_ratios") or list(reversed(codec_cfg.get("downsampling_ratios") or []))
        span, scale = 3.0, 1
        for r in ratios:
            scale *= int(r)
            span += (3 + 3 * (1 + 3 + 9)) / scale
        frames = math.ceil(span + 1)
        return frames, frames, "the DAC decoder's receptive field (non-causal convolutions: context and lookahead)"
    return 8, 0, "default 8 frames (the codec config names no attention span)"


def _weight_tables(wm: WeightMap, py_literal) -> str:
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
    context, lookahead, context_source = stream_context(codec)
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
        "stream_lookahead": lookahead, "stream_source": context_source, "backbone_arch": "LlamaForCausalLM",
        "seq_len": SPEC_SEQ_LEN, "codec_frames": SPEC_CODEC_FRAMES,
        "generation": {k: v for k, v in hf.generation.items()
                       if k in ("do_sample", "temperature", "top_k", "top_p", "max_new_tokens", "eos_token_id")},
    }


def _causal_lm_context(hf: HFFolder, camel: str, kit_version: str, port_rel: str) -> dict[str, Any]:
    backbone = _decoder_config(hf.config, "(top level)")
    # biases as the checkpoint has them (Qwen2: q/k/v biased, o_proj not; Llama: attention_bias)
    keys = hf.state_names or hf.checkpoint_keys
    backbone["qkv_bias"] = any(k.endswith("self_attn.q_proj.bias") for k in keys)
    backbone["o_bias"] = any(k.endswith("self_attn.o_proj.bias") for k in keys)
    return {
        "camel": camel, "kit_version": kit_version, "arch": hf.arch, "folder": str(hf.folder),
        "folder_name": hf.folder.name, "port_rel": port_rel, "backbone": backbone,
        "vocab_size": backbone["vocab_size"], "seq_len": SPEC_SEQ_LEN, "num_codebooks": 1,
        "codec_frames": 0, "hop_length": None, "hop_source": "no codec", "sample_rate": None,
        "stream_context": None, "stream_chunk": None, "stream_source": "no codec",
        "generation": {k: v for k, v in hf.generation.items()
                       if k in ("do_sample", "temperature", "top_k", "top_p", "max_new_tokens", "eos_token_id")},
    }


def _dia_context(hf: HFFolder, camel: str, kit_version: str, port_rel: str) -> dict[str, Any]:
    cfg = hf.config
    enc, dec = cfg.get("encoder_config"), cfg.get("decoder_config")
    if not isinstance(enc, dict) or not isinstance(dec, dict):
        raise InputError(f"{hf.folder}/config.json: {hf.arch} needs encoder_config and decoder_config objects")
    if hf.codec_config is None:
        raise InputError(f"--hf {hf.folder}: {hf.arch} keeps its codec apart and no sub-folder holds a codec "
                         f"config.json (model_type one of mimi, dac, encodec, xcodec); put the codec's "
                         "save_pretrained() folder inside the model folder")
    codec_class, hop, rate, hop_source = codec_facts(hf.codec_config)
    context, lookahead, context_source = stream_context(hf.codec_config)
    # transformers' DiaSelfAttention / DiaCrossAttention use scaling 1 (the scale is folded into the weights)
    encoder = {**_decoder_config(enc, "encoder_config"), "causal": False, "attention_scale": 1.0}
    decoder = {**_decoder_config(dec, "decoder_config"), "causal": True, "attention_scale": 1.0}
    num_channels = int(dec.get("num_channels", 0))
    codebook_size = int(hf.codec_config.get("codebook_size", 0))
    if num_channels < 1 or not 0 < codebook_size <= decoder["vocab_size"]:
        raise InputError(f"{hf.folder}/config.json: decoder_config.num_channels {num_channels} / codec "
                         f"codebook_size {codebook_size} do not fit decoder vocab_size {decoder['vocab_size']}")
    bos = dec.get("bos_token_id")
    return {
        "camel": camel, "kit_version": kit_version, "arch": hf.arch, "folder": str(hf.folder),
        "folder_name": hf.folder.name, "port_rel": port_rel, "encoder": encoder, "decoder": decoder,
        "backbone": decoder,
        "cross": {"num_heads": int(dec.get("cross_num_attention_heads", decoder["num_attention_heads"])),
                  "num_kv_heads": int(dec.get("cross_num_key_value_heads", decoder["num_key_value_heads"])),
                  "head_dim": int(dec.get("cross_head_dim", decoder["head_dim"])),
                  "hidden_size": int(dec.get("cross_hidden_size", encoder["hidden_size"])), "attention_scale": 1.0},
        "num_channels": num_channels, "audio_vocab_size": decoder["vocab_size"],
        "text_vocab_size": encoder["vocab_size"], "delay_pattern": list(cfg.get("delay_pattern") or []),
        "codec_class": codec_class, "codec_subfolder": hf.codec_dir.name, "codec_config": hf.codec_config,
        "codec_note": f"{codec_class} from the sub-folder {hf.codec_dir.name}/ (its own checkpoint), "
                      "decoded in chunks with left context and lookahead (CodecStage)",
        "hop_length": hop, "hop_source": hop_source, "sample_rate": rate, "stream_chunk": STREAM_CHUNK_FRAMES,
        "stream_context": context, "stream_lookahead": lookahead, "stream_source": context_source,
        "bos_id": int(bos) if isinstance(bos, int) else 0, "codebook_size": codebook_size,
        "seq_len": SPEC_SEQ_LEN, "codec_frames": SPEC_CODEC_FRAMES, "num_codebooks": num_channels,
        "generation": {k: v for k, v in hf.generation.items()
                       if k in ("do_sample", "temperature", "top_k", "top_p", "max_new_tokens", "eos_token_id")},
    }


def plan_port(hf: HFFolder, *, model_type: str, camel: str, kit_version: str, models_dir: str, env) -> PortPlan:
    """The port files for ``hf`` (empty plan with a note when its family has no generator).

    Parameters
    ----------
    hf : HFFolder
    model_type, camel : str
        The scaffold's (validated) model type and its CamelCase.
    kit_version : str
    models_dir : str
        Folder of the model's files, relative to the scaffold root.
    env : jinja2.Environment
        The scaffold's template environment (its ``py`` filter writes every value).

    Returns
    -------
    PortPlan
    """
    plan = PortPlan()
    if hf.family not in RULES:
        plan.notes.append(f"{hf.arch or 'this architecture'}: no port generator yet (known: "
                          f"{', '.join(a for archs in FAMILIES.values() for a in archs)}); "
                          "only the framework files were written")
        return plan
    port_rel = f"{models_dir}/{model_type}_port.py"
    wm = build_weight_map(hf.checkpoint_keys, hf.state_names, hf.renamed, hf.tied, RULES[hf.family])
    plan.weight_map = wm
    build = {"csm": _csm_context, "dia": _dia_context, "causal_lm": _causal_lm_context}[hf.family]
    ctx = build(hf, camel, kit_version, port_rel)
    ctx["family"] = hf.family
    ctx["sampling_defaults"] = {k: v for k, v in hf.generation.items() if k in SAMPLING_KEYS
                                and isinstance(v, (int, float)) and not isinstance(v, bool)}
    ctx["weight_tables"] = _weight_tables(wm, env.filters["py"])
    ctx["layers"] = env.get_template("hf_port/layers.py.j2").render(**ctx)
    plan.files[port_rel] = env.get_template(f"hf_port/{hf.family}.py.j2").render(**ctx)
    plan.files["port_spec.py"] = env.get_template("hf_port/port_spec.py.j2").render(**ctx)
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
             f"| backbone rope_theta | {ctx['backbone']['rope']['rope_theta']!r} | config.json rope_parameters |"]
    if ctx["hop_length"] is not None:
        lines += [f"| hop length | {ctx['hop_length']} | {cell(ctx['hop_source'])} |",
                  f"| sample rate | {ctx['sample_rate']} | codec sampling_rate |",
                  f"| stream context frames | {ctx['stream_context']} | {cell(ctx['stream_source'])} |",
                  f"| stream chunk frames | {ctx['stream_chunk']} | porting-kit default |"]
    lines += ["", "## Weight map", "",
              f"{len(wm.entries)} names mapped, {len(wm.skipped)} skipped, {len(wm.tied)} tied.", "",
              "| checkpoint / state name | port parameter |", "|---|---|"]
    lines += [f"| `{cell(a)}` | `{cell(b)}` |" for a, b in table_rows(wm)]
    if wm.tied:
        lines += ["", "Tied (filled from the source when the checkpoint lacks them):", ""]
        lines += [f"* `{cell(a)}` <- `{cell(b)}`" for a, b in wm.tied.items()]
    return "\n".join(lines) + "\n"
