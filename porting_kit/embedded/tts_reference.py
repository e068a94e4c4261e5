"""The embedded example's *reference*: a tiny TTS model built from real transformers classes.

An AR language model over codec tokens (``Qwen3ForCausalLM``) and a neural codec
decoder that turns codes into a waveform (``EncodecModel``), held together in one
wrapper module :class:`TinyTTSReference` with submodules ``lm`` and ``codec``.
Every weight is random (seeded), norm weights included (``1 + 0.1 * randn``), and
the codec's codebooks hold random vectors with their ``inited`` flag set, so that
a port that loads a weight wrongly, or applies a norm weight differently, changes
the output.

Token layout of the LM vocabulary: ids ``0 .. CODEBOOK_SIZE - 1`` are codec tokens,
then the specials :data:`SPECIAL_TOKENS` (BOS, EOS, PAD, text separator).

Shapes: ``input_ids`` (batch, T) int64; LM logits (batch, T, vocab_size);
codec codes (batch, n_codebooks, frames) int64 -> waveform (batch, frames * 320)
float32 at 24000 Hz (hop 320 samples = 8 * 5 * 4 * 2).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from porting_kit.adapters.torchaudio_guard import ensure_importable

ensure_importable()  # a CUDA-only torchaudio wheel must not break `import transformers`

#: Codec tokens per codebook (EnCodec bins).
CODEBOOK_SIZE = 1024
#: Special tokens after the codec tokens.
SPECIAL_TOKENS = {"bos": 1024, "eos": 1025, "pad": 1026, "text_sep": 1027}
#: LM vocabulary: codec tokens + specials.
VOCAB_SIZE = CODEBOOK_SIZE + len(SPECIAL_TOKENS)
#: Default seed of the random init.
SEED = 0
#: Codec sample rate (Hz) and hop (samples per code frame).
SAMPLE_RATE = 24000
HOP_LENGTH = 320


def lm_config(rope_parameters: dict[str, Any] | None = None, **overrides: Any):
    """The tiny Qwen3 config of the reference LM.

    Parameters
    ----------
    rope_parameters : dict, optional
        transformers 5.x RoPE parameters; default ``{"rope_type": "default",
        "rope_theta": 1e6}`` (rope_theta lives here, not as a top-level attribute).
    **overrides
        Any other ``Qwen3Config`` field.

    Returns
    -------
    transformers.Qwen3Config
        vocab 1028 (1024 codec tokens + 4 specials), hidden 64, 2 layers, 4 heads,
        2 kv heads, head_dim 16, intermediate 128, rms_norm_eps 1e-6.
    """
    from transformers import Qwen3Config

    kwargs: dict[str, Any] = {
        "vocab_size": VOCAB_SIZE,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 512,
        "rope_parameters": dict(rope_parameters or {"rope_type": "default", "rope_theta": 1e6}),
        "tie_word_embeddings": False,
        "bos_token_id": SPECIAL_TOKENS["bos"],
        "eos_token_id": SPECIAL_TOKENS["eos"],
        "pad_token_id": SPECIAL_TOKENS["pad"],
    }
    kwargs.update(overrides)
    return Qwen3Config(**kwargs)


def codec_config(**overrides: Any):
    """The tiny EnCodec config of the reference codec decoder.

    24 kHz mono, causal, weight norm, ``upsampling_ratios`` [8, 5, 4, 2] (hop 320
    samples, 75 frames/s), ``codebook_size`` 1024, target bandwidths [1.5, 3.0] kbps
    (4 codebooks at 3.0 kbps: 3000 / (75 * log2(1024))). The layout REAL_PAIRS.md
    gives for the 24 kHz EnCodec pair.

    Parameters
    ----------
    **overrides
        Any other ``EncodecConfig`` field (e.g. ``audio_channels=2``).

    Returns
    -------
    transformers.EncodecConfig
        hidden 32, 8 filters, ``normalize=False``.
    """
    from transformers import EncodecConfig

    kwargs: dict[str, Any] = {
        "sampling_rate": SAMPLE_RATE,
        "audio_channels": 1,
        "hidden_size": 32,
        "num_filters": 8,
        "upsampling_ratios": [8, 5, 4, 2],
        "codebook_size": CODEBOOK_SIZE,
        "target_bandwidths": [1.5, 3.0],
        "use_causal_conv": True,
        "norm_type": "weight_norm",
        "normalize": False,
    }
    kwargs.update(overrides)
    return EncodecConfig(**kwargs)


class TinyTTSReference(nn.Module):
    """The reference TTS pair.

    Parameters
    ----------
    lm : torch.nn.Module
        ``Qwen3ForCausalLM`` over codec tokens (see the module's token layout).
    codec : torch.nn.Module
        ``EncodecModel``, whose decoder turns codes into a waveform.

    Notes
    -----
    ``forward(input_ids)`` returns the LM logits [shape=(batch, seq, vocab_size)];
    :meth:`decode` turns codes [shape=(batch, n_codebooks, frames)] into a waveform
    [shape=(batch, samples)] at :data:`SAMPLE_RATE` Hz.
    """

    def __init__(self, lm: nn.Module, codec: nn.Module):
        super().__init__()
        self.lm = lm
        self.codec = codec

    def forward(self, input_ids: torch.Tensor, cache=None, use_cache: bool = False,
                position_ids: torch.Tensor | None = None):
        """LM logits of ``input_ids``; with ``cache`` (a transformers ``Cache``), one cached step.

        Parameters
        ----------
        input_ids : torch.LongTensor [shape=(batch, seq)]
        cache : transformers.Cache, optional
            Passed to the LM (as ``cache`` or ``past_key_values``, whichever its forward takes).
        use_cache : bool, default False
        position_ids : torch.LongTensor [shape=(batch, seq)], optional

        Returns
        -------
        torch.Tensor [shape=(batch, seq, vocab_size)]
            Without ``cache``; with it, the LM's output object (``.logits`` first).
        """
        if cache is None:
            return self.lm(input_ids=input_ids, use_cache=False, position_ids=position_ids).logits
        import inspect

        key = "cache" if "cache" in inspect.signature(self.lm.forward).parameters else "past_key_values"
        return self.lm(input_ids=input_ids, use_cache=True, position_ids=position_ids, **{key: cache})

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes -> waveform through the EnCodec decoder (no gradient).

        Parameters
        ----------
        codes : torch.LongTensor [shape=(batch, n_codebooks, frames)]

        Returns
        -------
        torch.Tensor [shape=(batch, frames * 320)]
            Float, channel 0 of the codec output, at 24000 Hz.
        """
        audio = self.codec.decode(codes[None], [None], return_dict=False)[0]
        return audio[:, 0, :]


def randomize_codec_(codec: nn.Module) -> None:
    """Seeded LeCun-normal init of every codec parameter, in place (call under a seeded RNG).

    Weights ``normal(0, 1 / sqrt(fan_in))``, biases ``uniform(-0.1, 0.1)``; for
    weight-normed convolutions the direction ``original1`` (v) is drawn and the
    magnitude ``original0`` (g) set to ``||v||`` over the non-output axes, so the
    effective weight is ``v``. Done directly on the parametrization tensors:
    transformers' own init recomputes the weight norm on every access (~100
    ``torch._weight_norm`` calls), which dominates build time on a busy CPU.

    Parameters
    ----------
    codec : torch.nn.Module
        A transformers ``EncodecModel`` (draws from the global torch RNG: the caller
        forks and seeds it).
    """
    with torch.no_grad():
        for name, p in codec.named_parameters():
            if name.endswith("parametrizations.weight.original0"):
                continue
            if p.dim() >= 2:
                p.normal_(0.0, p[0].numel() ** -0.5)
            else:
                p.uniform_(-0.1, 0.1)
        for module in codec.modules():
            plist = getattr(module, "parametrizations", None)
            if plist is None or "weight" not in plist:
                continue
            g, v = plist.weight.original0, plist.weight.original1
            dims = [d for d in range(v.dim()) if g.shape[d] == 1]
            g.copy_(torch.linalg.vector_norm(v, dim=dims, keepdim=True))


def randomize_(model: nn.Module, seed: int = SEED) -> None:
    """Give every norm weight and codebook of ``model`` a random value, in place.

    Norm weights become ``1 + 0.1 * randn`` (so that a ``(1 + w)`` offset or a
    dropped q/k norm shows); EnCodec codebooks ``embed`` / ``embed_avg`` become
    ``randn`` with ``inited`` = 1 and ``cluster_size`` = 1 (transformers
    initialises codebooks to zero, which would make every code decode to the
    same vector). Linear/embedding weights keep their seeded init.

    Parameters
    ----------
    model : torch.nn.Module
        Modules whose class name ends in ``RMSNorm``, ``nn.LayerNorm`` and
        ``EncodecEuclideanCodebook`` are changed.
    seed : int, default SEED (0)
        The draw uses ``seed + 1`` in its own forked RNG: the global torch RNG state is
        left as it was.
    """
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed + 1)
        for module in model.modules():
            kind = type(module).__name__
            if kind.endswith("RMSNorm") or isinstance(module, nn.LayerNorm):
                module.weight.copy_(1.0 + 0.1 * torch.randn_like(module.weight))
            elif kind == "EncodecEuclideanCodebook":
                module.embed.copy_(torch.randn_like(module.embed))
                module.embed_avg.copy_(module.embed)
                module.cluster_size.fill_(1.0)
                module.inited.fill_(1.0)


def build_reference(lm_cfg=None, codec_cfg=None, seed: int = SEED):
    """Build the reference :class:`TinyTTSReference` with seeded random weights.

    Parameters
    ----------
    lm_cfg : transformers.Qwen3Config, optional
        Default :func:`lm_config`.
    codec_cfg : transformers.EncodecConfig, optional
        Default :func:`codec_config`.
    seed : int
        Seed of the random init; the global torch RNG is untouched
        (``torch.random.fork_rng``).

    Returns
    -------
    TinyTTSReference
        In eval mode, float32, on CPU.
    """
    from transformers import EncodecModel, Qwen3ForCausalLM
    from transformers.initialization import no_init_weights

    lm_cfg = lm_cfg if lm_cfg is not None else lm_config()
    codec_cfg = codec_cfg if codec_cfg is not None else codec_config()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        lm = Qwen3ForCausalLM(lm_cfg)  # transformers' init: normal(0, 0.02) weights
        with no_init_weights():
            codec = EncodecModel(codec_cfg)
        randomize_codec_(codec)
    model = TinyTTSReference(lm, codec)
    randomize_(model, seed)
    return model.eval()


def example_input_ids(length: int = 64, batch: int = 1, seed: int = SEED):
    """Deterministic LM input: BOS then random codec tokens.

    Parameters
    ----------
    length : int, default 64
        Tokens per row (``seq``).
    batch : int, default 1
    seed : int, default SEED (0)
        The generator uses ``seed + 7``; the global RNG is untouched.

    Returns
    -------
    torch.LongTensor [shape=(batch, length)]
        Column 0 is BOS (1024), the rest codec tokens in ``[0, 1024)``.
    """
    gen = torch.Generator().manual_seed(seed + 7)
    ids = torch.randint(0, CODEBOOK_SIZE, (batch, length), generator=gen)
    ids[:, 0] = SPECIAL_TOKENS["bos"]
    return ids
