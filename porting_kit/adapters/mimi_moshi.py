"""Kyutai's original Mimi (``pip install --no-deps moshi sentencepiece``) next to transformers' ``MimiModel``.

Two independent implementations of the same convolutional codec with a
transformer inside (SEANet encoder/decoder, a strided down/up-sampling conv, a
rotary transformer on each side, a split residual vector quantizer). In a port
spec the transformers model is the reference and the weights flow HF -> moshi,
so this module inverts the original -> HF mapping of transformers' conversion
script (``convert_mimi_checkpoint_to_pytorch.py``). The table gives transformers 5.24's
names; where each stage sits (``encoder.layers.N`` on 5.17, ``encoder.encoder_seanet.layers.N``
on 5.24) is read from the installed model (:func:`hf_mimi_stages`), so every transformers
version the package admits converts:

=================================================  =================================================
moshi (original)                                   transformers
=================================================  =================================================
``{encoder,decoder}.model.N.``                     ``{encoder,decoder}.{..}_seanet.layers.N.``
``.conv.conv.`` / ``.convtr.convtr.``              ``.conv.``
``downsample.conv.conv.conv.``                     ``encoder.downsample.conv.``
``upsample.convtr.convtr.convtr.``                 ``decoder.upsample.conv.``
``X_transformer.transformer.layers.i.``            ``X.X_transformer.layers.i.``
``linear1`` / ``linear2``                          ``mlp.fc1`` / ``mlp.fc2``
``norm1`` / ``norm2``                              ``input_layernorm`` / ``post_attention_layernorm``
``layer_scale_1`` / ``layer_scale_2``              ``self_attn_layer_scale`` / ``mlp_layer_scale``
``self_attn.out_projs.0``                          ``self_attn.o_proj``
``self_attn.in_projs.0.weight`` (fused [Q|K|V])    ``q_proj`` / ``k_proj`` / ``v_proj`` (q, k rows
                                                   permuted interleaved -> half-split rotary)
``quantizer.rvq_first`` / ``rvq_rest``             ``quantizer.semantic_`` / ``acoustic_residual_vector_quantizer``
``vq.layers.i._codebook.embedding_sum``            ``layers.i.codebook.embed_sum``
=================================================  =================================================

moshi's package metadata pins ``torch<2.10``; installed with ``--no-deps`` it
needs only ``einops``, ``safetensors`` and ``sentencepiece`` (imported by its
loaders). Its import pulls in ``torchaudio`` through transformers, so it goes
through :func:`porting_kit.adapters.torchaudio_guard.ensure_importable`.
"""

from __future__ import annotations

import re
from typing import Any

INSTALL = "pip install --no-deps moshi sentencepiece einops"

#: moshi's top-level parts -> (stage of transformers' ``MimiModel``, the prefix inside that stage).
#: Where a stage sits in transformers' module tree changed across 5.x (``encoder.layers.N`` up to
#: about 5.17; ``encoder.encoder_seanet.layers.N`` once the model splits into an encoder and a
#: decoder model): :func:`hf_mimi_stages` reads it from the installed model.
_MOSHI_STAGES = (
    (re.compile(r"^(encoder|decoder)\.model\."), lambda m: f"{m[1]}_seanet", "layers."),
    (re.compile(r"^downsample\.conv\.conv\.conv\."), lambda m: "downsample", "conv."),
    (re.compile(r"^upsample\.convtr\.convtr\.convtr\."), lambda m: "upsample", "conv."),
    (re.compile(r"^(encoder|decoder)_transformer\.transformer\."), lambda m: f"{m[1]}_transformer", ""),
    (re.compile(r"^quantizer\.rvq_first\.(vq\.)?"), lambda m: "quantizer", "semantic_residual_vector_quantizer."),
    (re.compile(r"^quantizer\.rvq_rest\.(vq\.)?"), lambda m: "quantizer", "acoustic_residual_vector_quantizer."),
)
#: moshi -> transformers renames inside a stage, applied in order.
_MOSHI_TO_HF = (
    (re.compile(r"\.convtr\.convtr\."), ".conv."),
    (re.compile(r"\.conv\.conv\."), ".conv."),
    (re.compile(r"\.linear1\."), ".mlp.fc1."),
    (re.compile(r"\.linear2\."), ".mlp.fc2."),
    (re.compile(r"\.norm1\."), ".input_layernorm."),
    (re.compile(r"\.norm2\."), ".post_attention_layernorm."),
    (re.compile(r"\.layer_scale_1\."), ".self_attn_layer_scale."),
    (re.compile(r"\.layer_scale_2\."), ".mlp_layer_scale."),
    (re.compile(r"\.self_attn\.out_projs\.0\."), ".self_attn.o_proj."),
    (re.compile(r"\._codebook\."), ".codebook."),
    (re.compile(r"\.embedding_sum$"), ".embed_sum"),
    (re.compile(r"\._initialized$"), ".initialized"),
)
#: The stages :func:`hf_mimi_stages` finds, by the class of their module in transformers.
STAGES = ("encoder_seanet", "encoder_transformer", "downsample", "quantizer", "upsample",
          "decoder_transformer", "decoder_seanet")


def hf_mimi_stages(hf_model) -> dict[str, str]:
    """Where each stage of ``hf_model`` (a transformers ``MimiModel``) sits in its module tree.

    Read from the installed model, not from one transformers version's names: the SEANet
    encoder / decoder are the ``MimiEncoder`` / ``MimiDecoder`` modules, the transformers the
    two ``MimiTransformerModel`` (named ``encoder_transformer`` / ``decoder_transformer``), the
    resampling convs the modules named ``downsample`` / ``upsample``, the quantizer the
    ``MimiSplitResidualVectorQuantizer``.

    Returns
    -------
    dict of str to str
        Stage (:data:`STAGES`) -> qualified module name (``"encoder"`` on transformers 5.17,
        ``"encoder.encoder_seanet"`` on 5.24; the resampling convs are absent when the
        config has none).

    Raises
    ------
    porting_kit.errors.InputError
        A SEANet / transformer / quantizer stage is missing or found twice.
    """
    from porting_kit.errors import InputError

    by_class = {"MimiEncoder": "encoder_seanet", "MimiDecoder": "decoder_seanet",
                "MimiSplitResidualVectorQuantizer": "quantizer"}
    found: dict[str, list[str]] = {}
    for name, mod in hf_model.named_modules():
        cls, last = type(mod).__name__, name.rsplit(".", 1)[-1]
        if cls in by_class:
            stage = by_class[cls]
        elif cls == "MimiTransformerModel" and last in ("encoder_transformer", "decoder_transformer"):
            stage = last
        elif last in ("downsample", "upsample") and hasattr(mod, "conv"):
            stage = last
        else:
            continue
        found.setdefault(stage, []).append(name)
    bad = [s for s in STAGES if len(found.get(s, ())) != 1 and s not in ("downsample", "upsample")]
    if bad:
        raise InputError(f"Mimi conversion: the transformers MimiModel has no single module for "
                         f"{', '.join(bad)} (found {found})")
    return {stage: names[0] for stage, names in found.items()}


def import_moshi():
    """Import and return ``moshi.models.compression`` (torchaudio guarded).

    Raises
    ------
    porting_kit.errors.InputError
        When ``moshi`` (or one of the few modules it imports) is not installed.
    """
    from porting_kit.adapters.torchaudio_guard import ensure_importable
    from porting_kit.errors import InputError

    ensure_importable()
    try:
        from moshi.models import compression
    except ImportError as exc:
        raise InputError(f"Kyutai's moshi is not installed ({exc}): {INSTALL}") from exc
    return compression


def moshi_name_to_hf(name: str, stages: dict[str, str]) -> str:
    """The transformers state-dict name of a moshi Mimi state-dict name (the table above).

    ``stages`` is :func:`hf_mimi_stages` of the transformers model: each moshi part lands in
    the stage where the installed transformers keeps it. A name no stage claims is returned
    unchanged (the caller reports it).
    """
    for pattern, stage, inner in _MOSHI_STAGES:
        m = pattern.match(name)
        if m is not None and stage(m) in stages:
            name = f"{stages[stage(m)]}.{inner}{name[m.end():]}"
            break
    for pattern, repl in _MOSHI_TO_HF:
        name = pattern.sub(repl, name)
    return name


def _unpermute_rotary(w, n_heads: int):
    """Rows of a q/k projection from transformers' half-split rotary order back to moshi's
    interleaved pairs (inverse of the conversion script's ``permute``)."""
    rows, cols = w.shape
    return w.reshape(n_heads, 2, rows // n_heads // 2, cols).transpose(1, 2).reshape(rows, cols)


def convert_hf_to_moshi(hf_state_dict: dict[str, Any], moshi_model, config,
                        stages: dict[str, str]) -> dict[str, Any]:
    """Convert a transformers ``MimiModel`` state dict to ``moshi_model``'s names.

    Parameters
    ----------
    hf_state_dict : dict of str to torch.Tensor
    moshi_model : moshi.models.compression.MimiModel
        From :func:`build_moshi_mimi`; only its state-dict names and shapes are read.
    config : transformers.MimiConfig
        Head counts for the fused q/k/v projection.
    stages : dict of str to str
        :func:`hf_mimi_stages` of the model ``hf_state_dict`` comes from.

    Returns
    -------
    dict of str to torch.Tensor
        One entry per moshi tensor.

    Raises
    ------
    porting_kit.errors.InputError
        A moshi tensor has no HF counterpart or the shapes differ (names both).
    """
    import torch

    from porting_kit.errors import InputError

    out = {}
    for name, tensor in moshi_model.state_dict().items():
        hf_name = moshi_name_to_hf(name, stages)
        if hf_name.endswith(".self_attn.in_projs.0.weight"):
            base = hf_name[: -len("in_projs.0.weight")]
            q = _unpermute_rotary(hf_state_dict[base + "q_proj.weight"], config.num_attention_heads)
            k = _unpermute_rotary(hf_state_dict[base + "k_proj.weight"], config.num_key_value_heads)
            t = torch.cat([q, k, hf_state_dict[base + "v_proj.weight"]], dim=0)
        elif hf_name not in hf_state_dict:
            raise InputError(f"Mimi conversion: moshi tensor {name} has no transformers counterpart {hf_name}")
        else:
            t = hf_state_dict[hf_name]
        if tuple(t.shape) != tuple(tensor.shape):
            raise InputError(f"Mimi conversion: {hf_name} {tuple(t.shape)} cannot load into "
                             f"{name} {tuple(tensor.shape)}")
        out[name] = t
    return out


def build_moshi_mimi(config):
    """A moshi ``MimiModel`` with the same layout as a transformers ``MimiConfig`` (eval mode)."""
    compression = import_moshi()
    from moshi.modules import SEANetDecoder, SEANetEncoder, transformer
    from moshi.quantization import SplitResidualVectorQuantizer

    seanet = dict(channels=config.audio_channels, dimension=config.hidden_size, causal=config.use_causal_conv,
                  n_filters=config.num_filters, n_residual_layers=config.num_residual_layers,
                  activation="ELU", compress=config.compress, dilation_base=config.dilation_growth_rate,
                  disable_norm_outer_blocks=0, kernel_size=config.kernel_size,
                  residual_kernel_size=config.residual_kernel_size, last_kernel_size=config.last_kernel_size,
                  norm="none", pad_mode=config.pad_mode, ratios=list(config.upsampling_ratios),
                  true_skip=not config.use_conv_shortcut)
    rope_theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
    tr = dict(d_model=config.hidden_size, num_heads=config.num_attention_heads,
              num_layers=config.num_hidden_layers, causal=True,
              layer_scale=config.layer_scale_initial_scale, context=config.sliding_window, conv_layout=True,
              max_period=rope_theta, gating="none", norm="layer_norm", positional_embedding="rope",
              dim_feedforward=config.intermediate_size, input_dimension=config.hidden_size,
              output_dimensions=[config.hidden_size])
    encoder, decoder = SEANetEncoder(**seanet), SEANetDecoder(**seanet)
    quantizer = SplitResidualVectorQuantizer(
        dimension=config.vector_quantization_hidden_dimension, n_q=config.num_quantizers,
        bins=config.codebook_size, input_dimension=config.hidden_size, output_dimension=config.hidden_size,
        n_q_semantic=config.num_semantic_quantizers)
    model = compression.MimiModel(
        encoder, decoder, quantizer, channels=config.audio_channels, sample_rate=config.sampling_rate,
        frame_rate=config.frame_rate, encoder_frame_rate=config.sampling_rate / encoder.hop_length,
        causal=True, resample_method="conv", encoder_transformer=transformer.ProjectedTransformer(**tr),
        decoder_transformer=transformer.ProjectedTransformer(**tr))
    return model.eval()


#: Random-init codebook spread (transformers and moshi start codebooks at zero usage).
CODEBOOK_STD = 1.0


def build_hf_mimi(config_kwargs: dict[str, Any], seed: int = 0):
    """A transformers ``MimiModel`` with seeded random weights and random codebooks (eval, float32).

    The codebooks get ``embed_sum`` ~ N(0, ``CODEBOOK_STD``^2), ``cluster_usage`` 1 and their
    initialised flag set, so that every code decodes to its own vector. The global RNG is
    left untouched.
    """
    import torch

    from porting_kit.adapters.torchaudio_guard import ensure_importable

    ensure_importable()
    from transformers import MimiConfig, MimiModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = MimiModel(MimiConfig(**config_kwargs))
        with torch.no_grad():
            for name, buf in model.quantizer.named_buffers():
                if name.endswith("embed_sum"):
                    buf.normal_(0.0, CODEBOOK_STD)
                elif name.endswith("cluster_usage"):
                    buf.fill_(1.0)
                elif name.endswith("initialized"):
                    buf.fill_(1.0)
    return model.eval()
