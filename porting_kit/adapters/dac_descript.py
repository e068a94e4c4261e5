"""Descript's original DAC (``pip install --no-deps descript-audio-codec``) next to transformers' ``DacModel``.

Two independent implementations of the same convolutional codec (strided conv
encoder and transposed-conv decoder of residual units with Snake activations, a
residual vector quantizer with factorised codes). The original keeps every conv
under weight normalisation (``weight_g`` / ``weight_v``); transformers' conversion
(``convert_dac_checkpoint.py``) removes it, so transformers holds plain weights.
In a port spec the transformers model is the reference and the weights flow
HF -> DAC: ``weight_v = W`` and ``weight_g = ||W||`` over every axis but the first
(DAC recomputes ``g * v / ||v||``, which rounds: a float32 noise source, not a fault).

=============================================  =============================================
DAC (original)                                 transformers
=============================================  =============================================
``encoder.block.0`` / ``.block.L+1/L+2``       ``encoder.conv1`` / ``encoder.snake1`` / ``.conv2``
``encoder.block.N.block.M.block.{0,1,2,3}``    ``encoder.block.N-1.res_unitM+1.{snake1,conv1,snake2,conv2}``
``encoder.block.N.block.{3,4}``                ``encoder.block.N-1.{snake1,conv1}``
``decoder.model.0`` / ``.L+1`` / ``.L+2``      ``decoder.conv1`` / ``decoder.snake1`` / ``.conv2``
``decoder.model.N.block.{0,1}``                ``decoder.block.N-1.{snake1,conv_t1}``
``decoder.model.N.block.M.block.K``            ``decoder.block.N-1.res_unitM-1.{snake1,conv1,snake2,conv2}``
``quantizer.quantizers.i.*``                   the same
=============================================  =============================================

``import dac`` imports ``audiotools`` (and ``argbind``), whose dependency tree is large
(it is DAC's training toolkit); the codec never calls it. :func:`import_dac` uses the
real packages when they import, else named stubs for exactly the names DAC reads at
import time (``audiotools.AudioSignal``, ``audiotools.STFTParams``,
``audiotools.ml.BaseModel`` as a plain ``torch.nn.Module``, ``argbind.bind``).
"""

from __future__ import annotations

import importlib.machinery
import re
import sys
import types
from typing import Any

INSTALL = "pip install --no-deps descript-audio-codec einops"
_UNIT = ("snake1", "conv1", "snake2", "conv2")


def _stub(name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def _ensure_toolkit_importable() -> None:
    """Stub ``audiotools`` / ``argbind`` where they are not installed (never over real ones)."""
    import importlib.util

    import torch

    if importlib.util.find_spec("audiotools") is None and "audiotools" not in sys.modules:
        class BaseModel(torch.nn.Module):
            INTERN: list = []
            EXTERN: list = []

        ml = _stub("audiotools.ml", BaseModel=BaseModel, Accelerator=object)
        _stub("audiotools", AudioSignal=object, STFTParams=lambda *a, **k: None, ml=ml)
    if importlib.util.find_spec("argbind") is None and "argbind" not in sys.modules:
        _stub("argbind", bind=lambda *a, **k: (lambda f: f))


def import_dac():
    """Import and return Descript's ``dac`` package (torchaudio guarded, toolkit stubbed).

    Raises
    ------
    porting_kit.errors.InputError
        When ``dac`` is not installed.
    """
    from porting_kit.adapters.torchaudio_guard import ensure_importable
    from porting_kit.errors import InputError

    ensure_importable()
    try:
        _ensure_toolkit_importable()
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            import dac
    except ImportError as exc:
        raise InputError(f"Descript's dac is not installed ({exc}): {INSTALL}") from exc
    return dac


def dac_module_to_hf(name: str, n_enc: int, n_dec: int) -> str:
    """The transformers module path of a DAC module path (the table above).

    Parameters
    ----------
    name : str
        E.g. ``decoder.model.2.block.3.block.1``.
    n_enc, n_dec : int
        Encoder / decoder block counts (``len(downsampling_ratios)``, ``len(upsampling_ratios)``).
    """
    if name.startswith("quantizer."):
        return name
    for side, seq, n in (("encoder", "block", n_enc), ("decoder", "model", n_dec)):
        m = re.fullmatch(rf"{side}\.{seq}\.(\d+)(?:\.block\.(\d+)(?:\.block\.(\d+))?)?", name)
        if not m:
            continue
        top, mid, low = int(m[1]), m[2], m[3]
        if mid is None:
            return f"{side}." + {0: "conv1", n + 1: "snake1", n + 2: "conv2"}[top]
        mid = int(mid)
        if low is not None:  # a residual unit's layer
            unit = mid + 1 if side == "encoder" else mid - 1
            return f"{side}.block.{top - 1}.res_unit{unit}.{_UNIT[int(low)]}"
        tail = {"encoder": {3: "snake1", 4: "conv1"}, "decoder": {0: "snake1", 1: "conv_t1"}}[side][mid]
        return f"{side}.block.{top - 1}.{tail}"
    raise KeyError(name)


def convert_hf_to_dac(hf_state_dict: dict[str, Any], dac_model, config) -> dict[str, Any]:
    """Convert a transformers ``DacModel`` state dict to ``dac_model``'s names (weight norm re-applied).

    Returns
    -------
    dict of str to torch.Tensor
        One entry per DAC tensor: ``weight_v`` the HF weight, ``weight_g`` its norm over every
        axis but the first (so ``g * v / ||v|| == W`` up to rounding).

    Raises
    ------
    porting_kit.errors.InputError
        A DAC tensor has no HF counterpart or the shapes differ.
    """
    from porting_kit.errors import InputError

    n_enc, n_dec = len(config.downsampling_ratios), len(config.upsampling_ratios)
    out = {}
    for name, tensor in dac_model.state_dict().items():
        module, param = name.rsplit(".", 1)
        try:
            hf_module = dac_module_to_hf(module, n_enc, n_dec)
        except KeyError:
            raise InputError(f"DAC conversion: no transformers module for {module}") from None
        hf_name = f"{hf_module}.{'weight' if param in ('weight_g', 'weight_v') else param}"
        if hf_name not in hf_state_dict:
            raise InputError(f"DAC conversion: DAC tensor {name} has no transformers counterpart {hf_name}")
        t = hf_state_dict[hf_name]
        if param == "weight_g":
            t = t.norm(dim=tuple(range(1, t.dim())), keepdim=True)
        if tuple(t.shape) != tuple(tensor.shape):
            raise InputError(f"DAC conversion: {hf_name} {tuple(t.shape)} cannot load into "
                             f"{name} {tuple(tensor.shape)}")
        out[name] = t
    return out


def build_dac(config):
    """A Descript ``dac.DAC`` with the same layout as a transformers ``DacConfig`` (eval mode)."""
    dac = import_dac()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model = dac.DAC(encoder_dim=config.encoder_hidden_size, encoder_rates=list(config.downsampling_ratios),
                        latent_dim=config.hidden_size, decoder_dim=config.decoder_hidden_size,
                        decoder_rates=list(config.upsampling_ratios), n_codebooks=config.n_codebooks,
                        codebook_size=config.codebook_size, codebook_dim=config.codebook_dim,
                        sample_rate=config.sampling_rate)
    return model.eval()


def build_hf_dac(config_kwargs: dict[str, Any], seed: int = 0):
    """A transformers ``DacModel`` with seeded random weights (eval, float32; global RNG untouched).

    The convs get torch's default init (``reset_parameters``): transformers' N(0, 0.02) init
    shrinks the signal layer by layer (audio std ~1e-3 out for 0.1 in, under float32's
    ``atol``, where any fault passes); with it the audio keeps the input's scale (std ~0.13).
    Snake's ``alpha`` starts at 1 in both implementations; it is drawn from U(0.5, 1.5) here so
    that a conversion that drops it is visible.
    """
    import torch

    from porting_kit.adapters.torchaudio_guard import ensure_importable

    ensure_importable()
    from transformers import DacConfig, DacModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DacModel(DacConfig(**config_kwargs))
        with torch.no_grad():
            for mod in model.modules():
                if isinstance(mod, (torch.nn.Conv1d, torch.nn.ConvTranspose1d)):
                    mod.reset_parameters()
            for name, p in model.named_parameters():
                if name.endswith(".alpha"):
                    p.uniform_(0.5, 1.5)
    return model.eval()
