"""Real Mimi pair: transformers MimiModel (reference) vs Kyutai's moshi Mimi (candidate), decode path.

Two independent implementations of a convolutional neural codec with a
transformer inside (SEANet decoder of strided transposed convs and residual
units, a depthwise transposed-conv upsampler, a rotary transformer; ~30 aligned
modules). The transformers model is built from a small config with seeded
random weights and random codebooks; moshi's ``MimiModel`` gets them through the
inverse of transformers' conversion mapping (:mod:`porting_kit.adapters.mimi_moshi`).
Clean, the pair must pass layer parity in float32 (a false-alarm gate for the
error-growth localisation: deep conv stacks accumulate float32 rounding).

Usage: ``porting-kit check examples/mimi_pair.py --only parity [--variant NAME]``.
Needs ``pip install --no-deps moshi sentencepiece einops`` (moshi pins torch<2.10 in
its metadata, so it is not in the ``examples`` extra).

Variants (negative controls: faults planted in the conversion):

* ``no_permutation``: the fused q/k rows keep transformers' half-split rotary order
  (moshi rotates interleaved pairs): the decoder transformer's attention differs.
* ``kernel_flip``: one decoder residual unit's conv kernel is stored time-reversed
  (a conversion that flips a kernel meant for a transposed conv).
* ``conv_as_matmul`` (clean): every plain conv of the candidate computed as unfold + matmul,
  the same sums in another float32 order (a port with its own conv kernel).
* ``roundtrip_small_scale``: the roundtrip of ``roundtrip_conv_as_matmul`` with one encoder
  residual conv's weight scaled by 1 + 2e-5: a relative error ~20x the noise floor there,
  which the noise model must still locate.
* ``upsample_scale``: the depthwise upsampler's weight is scaled by 1.001 (a weight
  converted through a lossy rescale): an error of 1e-3 relative in one module.
"""

from __future__ import annotations

import torch

from porting_kit.adapters.mimi_moshi import build_hf_mimi, build_moshi_mimi, convert_hf_to_moshi, hf_mimi_stages

VARIANTS = {
    "no_permutation": "conversion keeps the half-split q/k row order (moshi rotates interleaved pairs)",
    "kernel_flip": "conversion stores decoder.model.3.block.1's conv kernel time-reversed",
    "upsample_scale": "conversion scales the depthwise upsampler's weight by 1.001",
    "conv_as_matmul": "clean: the candidate computes every conv as unfold + matmul (another fp32 op order)",
    "roundtrip": "clean: audio -> encoder -> decoder without the quantizer (both conv stacks, both transformers)",
    "roundtrip_conv_as_matmul": "clean: roundtrip with the candidate's convs as unfold + matmul",
    "roundtrip_small_scale": "roundtrip, convs as unfold + matmul, and encoder.model.4.block.3's conv "
                             "weight scaled by 1 + 2e-5 in the conversion (an error a few times the noise)",
}
VARIANT: str | None = None

SEED = 0
NUM_CODEBOOKS = 8
FRAMES = 12
#: Small Mimi: hidden 64, 8 filters, ratios [8, 6, 5, 4] (hop 960 at the encoder, x2 upsampler).
CONFIG = dict(hidden_size=64, num_filters=8, num_attention_heads=4, num_key_value_heads=4, head_dim=16,
              num_hidden_layers=2, intermediate_size=128, vector_quantization_hidden_dimension=32,
              codebook_dim=32, num_quantizers=NUM_CODEBOOKS, codebook_size=256, upsample_groups=64,
              layer_scale_initial_scale=1.0)
#: ``layer_scale_initial_scale`` 1.0, not Mimi's init 0.01: at 0.01 the transformer blocks add
#: 1 % of their output to the residual, so a fault inside them (``no_permutation``: 1.6e-2 at the
#: attention) reaches the block's output at 4.6e-7, under the reference's own float32 rounding
#: there, where no comparison of block outputs can tell it from noise.
_CACHE: dict[str, object] = {}



def stages() -> dict[str, str]:
    """Where each stage sits in the installed transformers' ``MimiModel`` (``decoder.layers`` on
    transformers 5.17, ``decoder.decoder_seanet.layers`` on 5.24): read from the model."""
    return hf_mimi_stages(reference())


def __getattr__(name):
    """``module_map`` / ``transformed_weights`` name the reference's modules, whose path depends on
    the installed transformers: built from :func:`stages` when the tool reads them."""
    st = stages() if name in ("module_map", "transformed_weights") else None
    if name == "module_map":
        # SEANet layers align by index (HF and moshi both hold a Sequential of the same layers)
        return [(f"{st['decoder_seanet']}.layers.{{i}}", "decoder.model.{i}"),
                (f"{st['encoder_seanet']}.layers.{{i}}", "encoder.model.{i}")]
    if name == "transformed_weights":
        # the kernel flip and the rescales change values the name map alone cannot explain
        return [f"{st['decoder_seanet']}.layers.3.block.1.conv.weight", f"{st['upsample']}.conv.weight",
                f"{st['encoder_seanet']}.layers.4.block.3.conv.weight"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def reference():
    """transformers ``MimiModel``, seeded random weights and codebooks."""
    if "ref" not in _CACHE:
        _CACHE["ref"] = build_hf_mimi(CONFIG, SEED)
    return _CACHE["ref"]


def candidate():
    """moshi ``MimiModel`` of the same layout (weights set by the tool)."""
    model = build_moshi_mimi(reference().config)
    if VARIANT in ("conv_as_matmul", "roundtrip_conv_as_matmul", "roundtrip_small_scale"):
        for mod in model.modules():
            if type(mod) is torch.nn.Conv1d:
                mod.forward = _conv_as_matmul.__get__(mod)
    return model


def _conv_as_matmul(self, x):
    """``Conv1d.forward`` as unfold + matmul: the same sums in another order (a port that
    writes its own conv kernel); clean, it must pass."""
    if self.groups != 1 or self.padding_mode != "zeros":
        return torch.nn.Conv1d.forward(self, x)
    pad = self.padding[0]
    if pad:
        x = torch.nn.functional.pad(x, (pad, pad))
    k, s, d = self.kernel_size[0], self.stride[0], self.dilation[0]
    cols = x.unfold(-1, (k - 1) * d + 1, s)[..., ::d]            # (B, C_in, T_out, k)
    y = torch.einsum("bctk,ock->bot", cols, self.weight)
    return y if self.bias is None else y + self.bias[:, None]


def convert_weights(reference_state_dict):
    """HF -> moshi names (inverse of transformers' conversion script), faults planted per variant."""
    ref = reference()
    out = convert_hf_to_moshi(reference_state_dict, candidate(), ref.config, stages())
    if VARIANT == "no_permutation":
        for i in range(ref.config.num_hidden_layers):
            base = f"{stages()['decoder_transformer']}.layers.{i}.self_attn."
            out[f"decoder_transformer.transformer.layers.{i}.self_attn.in_projs.0.weight"] = torch.cat(
                [reference_state_dict[base + p] for p in ("q_proj.weight", "k_proj.weight", "v_proj.weight")])
    elif VARIANT == "kernel_flip":
        name = "decoder.model.3.block.1.conv.conv.weight"
        out[name] = out[name].flip(-1).contiguous()
    elif VARIANT == "roundtrip_small_scale":
        name = "encoder.model.4.block.3.conv.conv.weight"
        out[name] = out[name] * (1 + 2e-5)
    elif VARIANT == "upsample_scale":
        name = "upsample.convtr.convtr.convtr.weight"
        out[name] = out[name] * 1.001
    return out


def codes():
    """Random codes ``(1, NUM_CODEBOOKS, FRAMES)``, seeded."""
    g = torch.Generator().manual_seed(1234)
    return torch.randint(0, CONFIG["codebook_size"], (1, NUM_CODEBOOKS, FRAMES), generator=g)


def _roundtrip() -> bool:
    return (VARIANT or "").startswith("roundtrip")


def audio():
    """Seeded noise ``(1, 1, FRAMES * 1920)`` (a whole number of 12.5 Hz frames), RMS 0.1."""
    g = torch.Generator().manual_seed(4321)
    return 0.1 * torch.randn(1, 1, FRAMES * 1920, generator=g)


def inputs():
    return {"audio": audio()} if _roundtrip() else {"codes": codes()}


def run_reference(model, inputs):
    if _roundtrip():
        # stage by stage (transformers 5.17's model.encoder is the SEANet alone, 5.24's the whole encoder)
        part = {k: model.get_submodule(v) for k, v in stages().items()}
        h = part["encoder_seanet"](inputs["audio"])
        h = part["encoder_transformer"](h.transpose(1, 2))[0].transpose(1, 2)
        h = part["upsample"](part["downsample"](h))
        h = part["decoder_transformer"](h.transpose(1, 2))[0].transpose(1, 2)
        return part["decoder_seanet"](h)
    return model.decode(inputs["codes"])[0]


def run_candidate(model, inputs):
    if _roundtrip():
        emb = model._to_encoder_framerate(model._encode_to_unquantized_latent(inputs["audio"]))
        (emb,) = model.decoder_transformer(emb)
        return model.decoder(emb)
    return model.decode(inputs["codes"])
