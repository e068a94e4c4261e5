"""Meta's original EnCodec (``pip install encodec``) next to transformers' ``EncodecModel``.

The two are independent implementations of the same codec (REAL_PAIRS.md,
"Meta EnCodec vs transformers EncodecModel"). In a port spec the transformers
model is the reference and the weights flow HF -> Meta, so this module inverts
the original -> HF mapping of transformers' conversion script
(``convert_encodec_checkpoint_to_pytorch.py``):

===========================================  ==========================================
Meta (original)                              transformers
===========================================  ==========================================
``{encoder,decoder}.model.N.``               ``{encoder,decoder}.layers.N.``
``.conv.conv.`` / ``.convtr.convtr.``        ``.conv.``
``.conv.norm.`` / ``.convtr.norm.``          ``.norm.`` (time_group_norm layouts)
``weight_g`` / ``weight_v``                  ``parametrizations.weight.original0/1``
``quantizer.vq.layers.i._codebook.``         ``quantizer.layers.i.codebook.``
===========================================  ==========================================

Importing ``encodec`` pulls in ``torchaudio``; PyPI's torchaudio is a CUDA
build whose native library fails to load next to a CPU torch, so the import
goes through :func:`porting_kit.adapters.torchaudio_guard.ensure_importable`
(a named stub with a ``__spec__``; EnCodec's codec path never calls torchaudio).
"""

from __future__ import annotations

import math
import re
from typing import Any

#: original -> transformers renames, applied in order (transformers' conversion script).
_META_TO_HF = (
    (re.compile(r"^(encoder|decoder)\.model\."), r"\1.layers."),
    (re.compile(r"\.convtr\.convtr\."), ".conv."),
    (re.compile(r"\.conv\.conv\."), ".conv."),
    (re.compile(r"\.(conv|convtr)\.norm\."), ".norm."),
    (re.compile(r"\.weight_g$"), ".parametrizations.weight.original0"),
    (re.compile(r"\.weight_v$"), ".parametrizations.weight.original1"),
    (re.compile(r"^quantizer\.vq\.layers\.(\d+)\._codebook\."), r"quantizer.layers.\1.codebook."),
)


def import_encodec():
    """Import and return Meta's ``encodec`` package (torchaudio guarded).

    Raises
    ------
    porting_kit.errors.InputError
        When ``encodec`` is not installed (``pip install 'porting-kit[examples]'``).
    """
    from porting_kit.adapters.torchaudio_guard import ensure_importable
    from porting_kit.errors import InputError

    ensure_importable()
    try:
        import encodec
    except ImportError as exc:
        raise InputError("Meta's encodec is not installed: pip install 'porting-kit[examples]'") from exc
    return encodec


def meta_name_to_hf(name: str) -> str:
    """The transformers state-dict name of a Meta EnCodec state-dict name.

    Parameters
    ----------
    name : str
        E.g. ``decoder.model.0.conv.conv.weight_g``.

    Returns
    -------
    str
        E.g. ``decoder.layers.0.conv.parametrizations.weight.original0``: every rename of
        the module table applied in order (unmatched parts unchanged).
    """
    for pattern, repl in _META_TO_HF:
        name = pattern.sub(repl, name)
    return name


def convert_hf_to_meta(hf_state_dict: dict[str, Any], meta_model) -> dict[str, Any]:
    """Convert a transformers ``EncodecModel`` state dict to ``meta_model``'s names.

    Every name of ``meta_model.state_dict()`` is mapped forward with
    :func:`meta_name_to_hf` and looked up in ``hf_state_dict`` (the inverse of
    the conversion script, without guessing which layers are transposed convs).

    Parameters
    ----------
    hf_state_dict : dict of str to torch.Tensor
        ``EncodecModel.state_dict()`` (the reference's codec).
    meta_model : encodec.EncodecModel
        From :func:`build_meta_encodec`; only its state-dict names and shapes are read.

    Returns
    -------
    dict of str to torch.Tensor
        Meta name -> the HF tensor itself (not copied), one entry per Meta tensor; HF
        tensors with no Meta counterpart are left out.

    Raises
    ------
    porting_kit.errors.InputError
        A Meta tensor has no HF counterpart or the shapes differ (names both).
    """
    from porting_kit.errors import InputError

    out = {}
    for meta_name, meta_tensor in meta_model.state_dict().items():
        hf_name = meta_name_to_hf(meta_name)
        if hf_name not in hf_state_dict:
            raise InputError(f"EnCodec conversion: Meta tensor {meta_name} has no transformers "
                             f"counterpart {hf_name}")
        t = hf_state_dict[hf_name]
        if tuple(t.shape) != tuple(meta_tensor.shape):
            raise InputError(f"EnCodec conversion: {hf_name} {tuple(t.shape)} cannot load into "
                             f"{meta_name} {tuple(meta_tensor.shape)}")
        out[meta_name] = t
    return out


def build_meta_encodec(hf_config, num_quantizers: int | None = None):
    """A Meta ``encodec.EncodecModel`` with the same layout as a transformers ``EncodecConfig``.

    Parameters
    ----------
    hf_config : transformers.EncodecConfig
        Sampling rate, channels, hidden size, filters, ratios, causal flag, norm,
        normalisation and chunking are copied.
    num_quantizers : int, optional
        Number of residual codebooks (default: the config's ``num_quantizers``).

    Returns
    -------
    encodec.EncodecModel
        In eval mode; weights uninitialised in the sense that they are
        Meta's own init (load them with :func:`convert_hf_to_meta`).
    """
    encodec = import_encodec()
    from encodec import modules as m
    from encodec import quantization as qt

    common = dict(channels=hf_config.audio_channels, dimension=hf_config.hidden_size,
                  n_filters=hf_config.num_filters, n_residual_layers=hf_config.num_residual_layers,
                  ratios=list(hf_config.upsampling_ratios), norm=hf_config.norm_type,
                  kernel_size=hf_config.kernel_size, last_kernel_size=hf_config.last_kernel_size,
                  residual_kernel_size=hf_config.residual_kernel_size,
                  dilation_base=hf_config.dilation_growth_rate, causal=hf_config.use_causal_conv,
                  pad_mode=hf_config.pad_mode, compress=hf_config.compress,
                  lstm=hf_config.num_lstm_layers, true_skip=not hf_config.use_conv_shortcut)
    import warnings

    with warnings.catch_warnings():  # encodec uses the deprecated torch.nn.utils.weight_norm
        warnings.simplefilter("ignore", FutureWarning)
        encoder = m.SEANetEncoder(**common)
        decoder = m.SEANetDecoder(**common, trim_right_ratio=hf_config.trim_right_ratio)
    n_q = num_quantizers or hf_config.num_quantizers
    quantizer = qt.ResidualVectorQuantizer(dimension=hf_config.hidden_size, n_q=n_q,
                                           bins=hf_config.codebook_size)
    model = encodec.EncodecModel(encoder, decoder, quantizer, list(hf_config.target_bandwidths),
                                 hf_config.sampling_rate, hf_config.audio_channels,
                                 normalize=hf_config.normalize, segment=hf_config.chunk_length_s,
                                 overlap=hf_config.overlap or 0.01)
    return model.eval()


#: Random-init codec scaling so that the decoded audio depends on the codes (see build_hf_encodec).
CODEBOOK_STD = 20.0
DECODER_BIAS_SCALE = 0.01


def build_hf_encodec(config_kwargs: dict[str, Any], seed: int = 0):
    """A transformers ``EncodecModel`` with seeded random weights and random codebooks.

    transformers initialises codebooks to zero (k-means init, ``inited`` set),
    which would make every code decode to the same vector: the codebooks are
    filled with N(0, ``CODEBOOK_STD``^2) values here. With the default init the
    decoder's conv biases dominate its output (a DC offset of ~0.2; two random
    code sequences decode to audio only ~40 dB apart), so they are scaled by
    ``DECODER_BIAS_SCALE``: the audio then depends on the codes (two random
    sequences ~0 dB apart, peak ~0.1). The global RNG is left untouched
    (``torch.random.fork_rng``).

    Parameters
    ----------
    config_kwargs : dict
        Keyword arguments of ``transformers.EncodecConfig``.
    seed : int
        Seed of the local RNG.

    Returns
    -------
    transformers.EncodecModel
        In eval mode, float32.
    """
    import torch

    from porting_kit.adapters.torchaudio_guard import ensure_importable

    ensure_importable()
    from transformers import EncodecConfig, EncodecModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = EncodecModel(EncodecConfig(**config_kwargs))
        with torch.no_grad():
            for name, p in model.decoder.named_parameters():
                if name.endswith(".bias") and ".lstm." not in name:
                    p.mul_(DECODER_BIAS_SCALE)
            for layer in model.quantizer.layers:
                cb = layer.codebook
                cb.embed.normal_(0.0, CODEBOOK_STD)
                cb.embed_avg.copy_(cb.embed)
                cb.cluster_size.fill_(1.0)
                cb.inited.fill_(1.0)
    return model.eval()


def hop_length_of(config) -> int:
    """Hop length in samples: the product of the codec's upsampling ratios.

    Parameters
    ----------
    config : transformers.EncodecConfig or SEANet module or dict
        Read for ``upsampling_ratios`` (transformers) or ``ratios`` (Meta SEANet).

    Returns
    -------
    int
        Samples per code frame (320 for ``[8, 5, 4, 2]``).

    Raises
    ------
    ValueError
        Neither key is present or it is empty.
    """
    get = config.get if isinstance(config, dict) else (lambda k, d=None: getattr(config, k, d))
    ratios = get("upsampling_ratios") or get("ratios")
    if not ratios:
        raise ValueError("codec config has no upsampling_ratios / ratios")
    return int(math.prod(int(r) for r in ratios))
