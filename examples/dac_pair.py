"""Real DAC pair: transformers DacModel (reference) vs Descript's descript-audio-codec (candidate).

Two independent implementations of a deep convolutional codec (strided conv
encoder, transposed-conv decoder, residual units with Snake activations, a
factorised residual vector quantizer). The transformers model is built from a
small config with seeded random weights (Snake alphas drawn too); DAC gets them
through :mod:`porting_kit.adapters.dac_descript`, which re-applies DAC's weight
normalisation (``g * v / ||v||`` rounds in float32: a clean pair that is *not*
bit-exact, a false-alarm gate for the parity noise model).

Paths: the default runs audio through encoder and decoder (no quantizer: ~60
aligned convs and Snakes); variant ``codes`` decodes random codes through the
quantizer's ``from_codes`` and the decoder.

Usage: ``porting-kit check examples/dac_pair.py --only parity [--variant NAME]``.
Needs ``pip install --no-deps descript-audio-codec einops`` (its training toolkit
``descript-audiotools`` is stubbed when absent: the codec never calls it).

Variants (negative controls, faults planted in the conversion):

* ``codes`` (clean): the decode path from codes.
* ``alpha_default``: decoder block 1's first Snake keeps alpha = 1 (not converted).
* ``convt_flip``: decoder block 2's transposed conv kernel stored time-reversed.
* ``bias_scale``: encoder block 1's strided conv bias scaled by 1.0001 (a tiny error).
"""

from __future__ import annotations

import torch

from porting_kit.adapters.dac_descript import build_dac, build_hf_dac, convert_hf_to_dac

VARIANTS = {
    "codes": "clean: decode random codes (quantizer from_codes + decoder)",
    "alpha_default": "conversion leaves decoder block 1's first Snake alpha at 1",
    "convt_flip": "conversion stores decoder block 2's transposed-conv kernel time-reversed",
    "bias_scale": "conversion scales encoder block 1's strided conv bias by 1.0001",
}
VARIANT: str | None = None

SEED = 0
FRAMES = 20
CONFIG = dict(encoder_hidden_size=8, downsampling_ratios=[2, 4, 5], decoder_hidden_size=64,
              upsampling_ratios=[5, 4, 2], n_codebooks=4, codebook_size=64, codebook_dim=8, hidden_size=32)
HOP = 2 * 4 * 5
_CACHE: dict[str, object] = {}


def reference():
    """transformers ``DacModel``, seeded random weights."""
    if "ref" not in _CACHE:
        _CACHE["ref"] = build_hf_dac(CONFIG, SEED)
    return _CACHE["ref"]


def candidate():
    """Descript ``dac.DAC`` of the same layout (weights set by the tool)."""
    return build_dac(reference().config)


def convert_weights(reference_state_dict):
    """HF -> DAC names, weight norm re-applied; faults planted per variant."""
    out = convert_hf_to_dac(reference_state_dict, candidate(), reference().config)
    if VARIANT == "alpha_default":
        out["decoder.model.1.block.0.alpha"] = torch.ones_like(out["decoder.model.1.block.0.alpha"])
    elif VARIANT == "convt_flip":
        out["decoder.model.2.block.1.weight_v"] = out["decoder.model.2.block.1.weight_v"].flip(-1).contiguous()
    elif VARIANT == "bias_scale":
        out["encoder.block.1.block.4.bias"] = out["encoder.block.1.block.4.bias"] * 1.0001
    return out


#: weight_v / weight_g are the HF weight and its norm; the planted faults change values too.
transformed_weights = ["*.weight", "decoder.block.0.snake1.alpha", "encoder.block.0.conv1.bias"]


def audio():
    g = torch.Generator().manual_seed(4321)
    return 0.1 * torch.randn(1, 1, FRAMES * HOP, generator=g)


def codes():
    g = torch.Generator().manual_seed(1234)
    return torch.randint(0, CONFIG["codebook_size"], (1, CONFIG["n_codebooks"], FRAMES), generator=g)


def inputs():
    return {"codes": codes()} if VARIANT == "codes" else {"audio": audio()}


def run_reference(model, inputs):
    if "codes" in inputs:
        return model.decode(audio_codes=inputs["codes"]).audio_values[:, None]
    return model.decoder(model.encoder(inputs["audio"]))


def run_candidate(model, inputs):
    if "codes" in inputs:
        return model.decode(model.quantizer.from_codes(inputs["codes"])[0])
    return model.decoder(model.encoder(inputs["audio"]))
