"""The embedded example's *candidate*: the tiny TTS model written the way a vLLM-Omni port is written.

Its own modules, named as a port names them (``talker.layers.N.attn`` where the
reference has ``lm.model.layers.N.self_attn``), fused ``qkv_proj`` and
``gate_up_proj`` filled through a vLLM-style :meth:`TinyTTSPort.load_weights`
with a ``stacked_params_mapping`` (shard ids ``q``/``k``/``v`` and ``0``/``1``, as
vLLM's Qwen3 loader has), its own :class:`RotaryEmbedding` (non-persistent
``inv_freq`` buffer, cos/sin computed from positions), its own :class:`RMSNorm`,
q/k norms, ``forward(input_ids, positions) -> hidden`` and
``compute_logits(hidden) -> logits``, and a codec wrapper (:class:`CodecWrapper`,
``port.codec``) that reuses transformers' ``EncodecModel`` code but gets its
weights through the same ``load_weights``.

Planted faults are the knobs of :class:`PortOptions` (defaults = the correct
port). The spec ``porting_kit/embedded/tts.py`` maps its variant names to them.

Shapes: ``input_ids`` and ``positions`` (batch, T) int64; hidden (batch, T, 64);
logits (batch, T, 1028).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from porting_kit.adapters.torchaudio_guard import ensure_importable

ensure_importable()  # a CUDA-only torchaudio wheel must not break `import transformers`


@dataclass
class PortOptions:
    """Fault knobs of the port. The defaults give the correct port.

    Attributes
    ----------
    swap_qk_shards : bool, default False
        Parity: the fused-qkv weight loader writes the shards in the order k, q, v
        (q and k swapped) while ``forward`` splits q, k, v.
    skip_weight : str or None, default None
        Parity: a candidate parameter name that ``load_weights`` silently skips (e.g.
        ``"talker.layers.1.mlp.down_proj.weight"``); it keeps the port's own init.
    nan_mlp_layer : int or None, default None
        Parity: index of the decoder layer whose MLP output gets NaN in channel 0.
    meta_init : bool, default False
        RoPE: build the LM stack on the meta device and materialise it with
        ``to_empty()``; the non-persistent ``inv_freq`` buffer is never
        recomputed, so it holds whatever the allocator returned.
    rope_theta_top_level_only : bool, default False
        RoPE: read ``config.rope_theta`` only (falling back to 10000) instead of
        ``config.rope_parameters["rope_theta"]`` where transformers 5.x keeps it.
    rope_interleaved : bool, default False
        RoPE: rotate interleaved pairs (GPT-J / complex layout, ``is_neox_style=False``)
        instead of halves (NeoX / rotate-half, what the reference does).
    partial_rotary_factor : float, default 1.0
        RoPE: fraction of head_dim that gets rotary (reference: 1.0).
    position_offset : int, default 0
        RoPE: positions added to the query positions before RoPE (reference: 0); the keys
        keep the engine's positions, as when a decode step rotates the new token at
        ``p + k`` against keys cached at ``p``. (Shifting queries and keys alike
        would cancel in q.k, RoPE being relative, and change nothing.)
    ignore_rope_scaling : bool, default False
        RoPE: drop ``rope_parameters["rope_type"]`` scaling (linear factor...) and use
        the plain inverse frequencies.
    rope_dtype : str, default "float32"
        RoPE: dtype ``inv_freq`` and cos/sin are computed in (``"bfloat16"`` is the
        low-precision fault).
    rope_pad_factor : float, default 1.0
        RoPE: partial rotary done by padding: ``inv_freq`` is computed over
        ``head_dim * rope_pad_factor`` dims and zero-padded to ``head_dim / 2`` entries,
        the rotation runs over the whole head (zero frequency = identity).
    rope_table_layout : {"", "half", "interleaved"}, default ""
        RoPE: build cos/sin full-width in this layout (``"half"``: ``cat(f, f)`` as HF's
        cache; ``"interleaved"``: ``repeat_interleave(f, 2)``) and apply them elementwise
        with the rotation of ``rope_interleaved``; ``""`` pairs them consistently.
    rms_norm_eps : float or None, default None
        Norm: epsilon override (``None``: the config's ``rms_norm_eps``).
    functional_final_norm_eps : float or None, default None
        Norm: the final norm runs as ``F.rms_norm(h, (hidden,), norm.weight, eps=<this>)``,
        an eps hard-coded in a functional call (``None``: the norm module runs).
    norm_kind : {"rms", "layer"}, default "rms"
        Norm: ``"rms"`` (RMSNorm) or ``"layer"`` (``nn.LayerNorm`` without bias: mean
        subtracted).
    norm_weight_offset : bool, default False
        Norm: apply ``(1 + w)`` (Gemma style) where the reference applies ``w``.
    norm_fp32_upcast : bool, default True
        Norm: compute the variance in float32 (reference). ``False``: in the input
        dtype (shows only in bf16/fp16).
    norm_placement : {"pre", "post"}, default "pre"
        Norm: ``"pre"`` (reference) or ``"post"`` (norm after the residual add).
    qk_norm : bool, default True
        Norm: apply Qwen3's per-head q/k RMSNorm (reference: yes).
    """

    swap_qk_shards: bool = False
    skip_weight: str | None = None
    nan_mlp_layer: int | None = None
    meta_init: bool = False
    rope_theta_top_level_only: bool = False
    rope_interleaved: bool = False
    partial_rotary_factor: float = 1.0
    position_offset: int = 0
    ignore_rope_scaling: bool = False
    rope_dtype: str = "float32"
    rope_pad_factor: float = 1.0
    rope_table_layout: str = ""
    rms_norm_eps: float | None = None
    functional_final_norm_eps: float | None = None
    norm_kind: str = "rms"
    norm_weight_offset: bool = False
    norm_fp32_upcast: bool = True
    norm_placement: str = "pre"
    qk_norm: bool = True


def port_constants(lm_config: Any, options: PortOptions | None = None) -> dict[str, Any]:
    """The constants the port actually uses, read from the HF config as the port reads it.

    Parameters
    ----------
    lm_config : transformers.Qwen3Config
    options : PortOptions, optional

    Returns
    -------
    dict
        ``rope_theta``, ``rope_type``, ``rope_scaling`` (``None`` or a dict with
        ``rope_type`` and ``factor``), ``rms_norm_eps``, ``head_dim``,
        ``rotary_dim``, ``partial_rotary_factor``, ``rope_layout``
        (``"rotate_half"`` / ``"interleaved"``), ``rope_dtype``, ``qk_norm``,
        ``norm_type``, ``hidden_size``, ``num_attention_heads``,
        ``num_key_value_heads``, ``intermediate_size``, ``num_hidden_layers``,
        ``vocab_size``, ``max_position_embeddings``, ``attention_bias``.
    """
    opt = options or PortOptions()
    rope_params = dict(getattr(lm_config, "rope_parameters", None) or {})
    if opt.rope_theta_top_level_only:
        theta = float(getattr(lm_config, "rope_theta", 10000.0))
    else:
        theta = float(rope_params.get("rope_theta", getattr(lm_config, "rope_theta", 10000.0)))
    rope_type = rope_params.get("rope_type", "default")
    if opt.ignore_rope_scaling or rope_type == "default":
        rope_type, scaling = "default", None
    elif rope_type == "linear":
        scaling = {"rope_type": "linear", "factor": float(rope_params["factor"])}
    else:
        raise NotImplementedError(f"TinyTTSPort supports rope_type default/linear, not {rope_type!r}")
    head_dim = int(getattr(lm_config, "head_dim", None)
                   or lm_config.hidden_size // lm_config.num_attention_heads)
    rotary_dim = int(head_dim * opt.partial_rotary_factor)
    return {
        "rope_theta": theta,
        "rope_type": rope_type,
        "rope_scaling": scaling,
        "rms_norm_eps": float(opt.rms_norm_eps if opt.rms_norm_eps is not None
                              else lm_config.rms_norm_eps),
        "head_dim": head_dim,
        "rotary_dim": rotary_dim,
        "partial_rotary_factor": rotary_dim / head_dim,
        "rope_layout": "interleaved" if opt.rope_interleaved else "rotate_half",
        "rope_dtype": opt.rope_dtype,
        "qk_norm": opt.qk_norm,
        "norm_type": "layer_norm" if opt.norm_kind == "layer" else "rms_norm",
        "hidden_size": int(lm_config.hidden_size),
        "num_attention_heads": int(lm_config.num_attention_heads),
        "num_key_value_heads": int(lm_config.num_key_value_heads),
        "intermediate_size": int(lm_config.intermediate_size),
        "num_hidden_layers": int(lm_config.num_hidden_layers),
        "vocab_size": int(lm_config.vocab_size),
        "max_position_embeddings": int(lm_config.max_position_embeddings),
        "attention_bias": bool(getattr(lm_config, "attention_bias", False)),
    }


# --------------------------------------------------------------------------- norms


class RMSNorm(nn.Module):
    """Root-mean-square norm, ``y = w * x / sqrt(mean(x**2) + eps)`` over the last axis.

    Zhang & Sennrich 2019; the variance is computed in float32 and the result cast
    back before the weight is applied, as transformers' ``Qwen3RMSNorm`` does.

    Parameters
    ----------
    hidden_size : int
        Size of the last axis.
    eps : float
        Added to the mean square (``variance_epsilon``).
    weight_offset : bool
        Fault knob: apply ``(1 + w)`` instead of ``w``.
    fp32_upcast : bool
        ``False`` is a fault knob: compute the variance in the input dtype.

    Shapes: x (..., hidden_size) -> (..., hidden_size), same dtype.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6, *, weight_offset: bool = False,
                 fp32_upcast: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps
        self.weight_offset = weight_offset
        self.fp32_upcast = fp32_upcast

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` over its last axis.

        Parameters
        ----------
        x : torch.Tensor [shape=(..., hidden_size)]

        Returns
        -------
        torch.Tensor [shape=(..., hidden_size)]
            ``w * (x / sqrt(mean(x**2) + eps))`` with the normalised value cast back to
            ``x``'s dtype before the weight multiplies it (transformers' ``Qwen3RMSNorm``);
            ``(1 + w)`` with ``weight_offset``.
        """
        input_dtype = x.dtype
        if self.fp32_upcast:
            x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.variance_epsilon)
        weight = 1.0 + self.weight if self.weight_offset else self.weight
        return weight * x.to(input_dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


def make_norm(hidden_size: int, eps: float, options: PortOptions) -> nn.Module:
    """The port's norm module for ``options``.

    Parameters
    ----------
    hidden_size : int
        Normalised width (``hidden_size`` or ``head_dim`` for the q/k norms).
    eps : float
        Epsilon (the port's ``rms_norm_eps``).
    options : PortOptions
        ``norm_kind``, ``norm_weight_offset`` and ``norm_fp32_upcast`` are read.

    Returns
    -------
    torch.nn.Module
        :class:`RMSNorm`, or ``nn.LayerNorm(hidden_size, eps, bias=False)`` for the
        ``norm_kind="layer"`` fault.

    Raises
    ------
    ValueError
        ``norm_kind`` is neither ``"rms"`` nor ``"layer"``.
    """
    if options.norm_kind == "layer":
        return nn.LayerNorm(hidden_size, eps=eps, bias=False)
    if options.norm_kind != "rms":
        raise ValueError(f"norm_kind must be 'rms' or 'layer', not {options.norm_kind!r}")
    return RMSNorm(hidden_size, eps, weight_offset=options.norm_weight_offset,
                   fp32_upcast=options.norm_fp32_upcast)


# --------------------------------------------------------------------------- rotary


class RotaryEmbedding(nn.Module):
    """Rotary position embedding, vLLM style: ``forward(positions, query, key)``.

    ``inv_freq[i] = 1 / base ** (2i / rotary_dim) / scaling_factor`` for
    ``i < rotary_dim / 2`` (Su et al. 2021, RoFormer; linear scaling as in
    transformers' ``"linear"`` rope type). The first ``rotary_dim`` dims of each
    head are rotated, the rest pass through. NeoX layout (``is_neox_style=True``)
    rotates halves ``(x[:d/2], x[d/2:])``; GPT-J layout rotates interleaved pairs
    ``(x[0::2], x[1::2])``.

    Parameters
    ----------
    head_size : int
        Per-head width of query/key.
    rotary_dim : int
        Dims rotated (``<= head_size``).
    max_position_embeddings : int
    base : float
        ``rope_theta``.
    is_neox_style : bool
    scaling_factor : float
        Linear position-interpolation factor (1.0: none).
    dtype : torch.dtype
        Dtype in which ``inv_freq`` and cos/sin are computed (float32 normally).
    query_position_offset : int
        Fault knob: the query is rotated at ``positions + query_position_offset``,
        the key at ``positions``.
    zero_pad_pairs : int
        Fault knob: ``inv_freq`` covers ``rotary_dim - 2 * zero_pad_pairs`` dims and ends
        in that many zeros (partial rotary by padding; 0 normally).
    table_layout : str
        Fault knob: ``"half"`` / ``"interleaved"`` build cos/sin full-width in that layout
        and apply them elementwise with the ``is_neox_style`` rotation; ``""`` normally.

    Attributes
    ----------
    inv_freq : torch.Tensor (rotary_dim // 2,) float32
        Non-persistent buffer (not in the state dict; recompute it with
        :meth:`compute_inv_freq` after a meta-device init).
    """

    def __init__(self, head_size: int, rotary_dim: int, max_position_embeddings: int,
                 base: float, is_neox_style: bool = True, scaling_factor: float = 1.0,
                 dtype: torch.dtype = torch.float32, query_position_offset: int = 0,
                 zero_pad_pairs: int = 0, table_layout: str = ""):
        super().__init__()
        self.zero_pad_pairs = zero_pad_pairs
        self.table_layout = table_layout
        self.head_size = head_size
        self.rotary_dim = rotary_dim
        self.max_position_embeddings = max_position_embeddings
        self.base = base
        self.is_neox_style = is_neox_style
        self.scaling_factor = scaling_factor
        self.compute_dtype = dtype
        self.query_position_offset = query_position_offset
        # noqa below: the rope_inv_freq_uninitialized variant plants exactly this fault
        self.register_buffer("inv_freq", self.compute_inv_freq(), persistent=False)  # noqa: PK701

    def compute_inv_freq(self) -> torch.Tensor:
        """The inverse frequencies, computed in :attr:`compute_dtype`.

        Returns
        -------
        torch.Tensor [shape=(rotary_dim // 2,), float32]
            ``1 / base ** (arange(0, rotary_dim, 2) / rotary_dim) / scaling_factor``, radians
            per position (rounded through ``compute_dtype`` first: the low-precision fault).
        """
        dt = self.compute_dtype
        dim = self.rotary_dim - 2 * self.zero_pad_pairs
        exponent = torch.arange(0, dim, 2, dtype=dt) / dim
        inv_freq = 1.0 / (self.base ** exponent)
        inv_freq = inv_freq / self.scaling_factor
        if self.zero_pad_pairs:
            inv_freq = torch.cat([inv_freq, torch.zeros(self.zero_pad_pairs, dtype=dt)])
        return inv_freq.to(torch.float32)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of ``positions * inv_freq``.

        Parameters
        ----------
        positions : torch.LongTensor [shape=(...)]
            Token positions.

        Returns
        -------
        cos, sin : torch.Tensor [shape=(..., rotary_dim // 2)]
            In :attr:`compute_dtype` (float32 normally), on ``positions``' device.
        """
        dt = self.compute_dtype
        freqs = positions[..., None].to(dt) * self.inv_freq.to(device=positions.device, dtype=dt)
        return freqs.cos(), freqs.sin()

    def forward(self, positions: torch.Tensor, query: torch.Tensor,
                key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate query and key at ``positions``.

        Parameters
        ----------
        positions : torch.LongTensor [shape=(batch, seq)]
        query : torch.Tensor [shape=(batch, seq, n_heads * head_size)]
        key : torch.Tensor [shape=(batch, seq, n_kv_heads * head_size)]

        Returns
        -------
        query, key : torch.Tensor
            Same shapes and dtypes; the first ``rotary_dim`` dims of each head rotated
            (NeoX halves or GPT-J pairs), the rest passed through. The query uses
            ``positions + query_position_offset`` (the fault knob; 0 normally).

        Notes
        -----
        Layouts as vLLM's ``RotaryEmbedding`` (``is_neox_style``); the NeoX form equals
        transformers' ``rotate_half`` / ``apply_rotary_pos_emb``.
        """
        cos, sin = self.cos_sin(positions)
        if self.query_position_offset:
            cos_q, sin_q = self.cos_sin(positions + self.query_position_offset)
        else:
            cos_q, sin_q = cos, sin
        return self._rotate(query, cos_q, sin_q), self._rotate(key, cos, sin)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.view(*shape[:-1], -1, self.head_size)
        cos = cos.unsqueeze(-2).to(x.dtype)
        sin = sin.unsqueeze(-2).to(x.dtype)
        rot, tail = x[..., : self.rotary_dim], x[..., self.rotary_dim:]
        if self.table_layout:
            out = self._rotate_full_table(rot, cos, sin)
        elif self.is_neox_style:
            x1, x2 = rot.chunk(2, dim=-1)
            out = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        else:
            x1, x2 = rot[..., 0::2], rot[..., 1::2]
            out = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
        return torch.cat((out, tail), dim=-1).view(shape)

    def _rotate_full_table(self, rot: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """``rot * cos_full + rotation(rot) * sin_full``, cos/sin widened in :attr:`table_layout`."""
        if self.table_layout == "half":
            cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
        else:
            cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
        if self.is_neox_style:
            x1, x2 = rot.chunk(2, dim=-1)
            turned = torch.cat((-x2, x1), dim=-1)
        else:
            turned = torch.stack((-rot[..., 1::2], rot[..., 0::2]), dim=-1).flatten(-2)
        return rot * cos + turned * sin

    def extra_repr(self) -> str:
        return (f"head_size={self.head_size}, rotary_dim={self.rotary_dim}, base={self.base}, "
                f"is_neox_style={self.is_neox_style}, scaling_factor={self.scaling_factor}"
                + (f", query_position_offset={self.query_position_offset}"
                   if self.query_position_offset else ""))


# --------------------------------------------------------------------------- linears


def default_weight_loader(param: torch.Tensor, loaded_weight: torch.Tensor) -> None:
    """Copy a checkpoint tensor into a parameter/buffer; shapes must match.

    Parameters
    ----------
    param : torch.Tensor
        Destination (a parameter, a buffer or a ``narrow`` view of one); written in place.
    loaded_weight : torch.Tensor
        Source, cast to ``param``'s dtype and device.

    Raises
    ------
    ValueError
        When the shapes differ (names both shapes).

    Notes
    -----
    Same contract as vLLM's ``model_executor/model_loader/weight_utils.py:
    default_weight_loader``.
    """
    if param.shape != loaded_weight.shape:
        raise ValueError(f"shape mismatch: checkpoint {tuple(loaded_weight.shape)} "
                         f"vs parameter {tuple(param.shape)}")
    with torch.no_grad():
        param.copy_(loaded_weight.to(dtype=param.dtype, device=param.device))


class QKVParallelLinear(nn.Linear):
    """Fused q/k/v projection (vLLM's ``QKVParallelLinear`` at tensor-parallel size 1).

    Output [shape=(..., (n_heads + 2 * n_kv_heads) * head_size)], rows ordered q, k, v.
    :meth:`weight_loader` writes one shard (``"q"``, ``"k"``, ``"v"``) at its row offset.

    Parameters
    ----------
    hidden_size : int
        Input features.
    head_size : int
        Per-head width.
    total_num_heads, total_num_kv_heads : int
        Query heads and key/value heads (GQA).
    swap_qk_shards : bool, default False
        Fault knob: the loader lays out k before q (:meth:`shard_offsets`).
    bias : bool, default False
        q/k/v biases (``config.attention_bias``); the loader writes them by shard like the weight.
    """

    def __init__(self, hidden_size: int, head_size: int, total_num_heads: int,
                 total_num_kv_heads: int, *, swap_qk_shards: bool = False, bias: bool = False):
        self.q_size = total_num_heads * head_size
        self.kv_size = total_num_kv_heads * head_size
        super().__init__(hidden_size, self.q_size + 2 * self.kv_size, bias=bias)
        self.swap_qk_shards = swap_qk_shards

    def shard_offsets(self) -> dict[str, tuple[int, int]]:
        """Shard id -> (row offset, rows) of the fused weight.

        Returns
        -------
        dict of str to (int, int)
            ``{"q": (0, q_size), "k": (q_size, kv_size), "v": (q_size + kv_size, kv_size)}``.
            With the ``swap_qk_shards`` fault the loader lays out k before q while
            :meth:`forward` users still split q, k, v.
        """
        q, kv = self.q_size, self.kv_size
        if self.swap_qk_shards:
            return {"k": (0, kv), "q": (kv, q), "v": (q + kv, kv)}
        return {"q": (0, q), "k": (q, kv), "v": (q + kv, kv)}

    def weight_loader(self, param: torch.Tensor, loaded_weight: torch.Tensor,
                      loaded_shard_id: str) -> None:
        """Write one shard of the fused weight.

        Parameters
        ----------
        param : torch.nn.Parameter [shape=(q_size + 2 * kv_size, hidden_size)]
            This module's ``weight``.
        loaded_weight : torch.Tensor [shape=(rows, hidden_size)]
            The reference's ``q_proj`` / ``k_proj`` / ``v_proj`` weight.
        loaded_shard_id : {"q", "k", "v"}

        Raises
        ------
        ValueError
            The shard's shape does not fit its rows.
        KeyError
            Unknown shard id.
        """
        offset, size = self.shard_offsets()[loaded_shard_id]
        default_weight_loader(param.data.narrow(0, offset, size), loaded_weight)


class MergedColumnParallelLinear(nn.Linear):
    """Fused column projections (vLLM's ``MergedColumnParallelLinear`` at TP size 1).

    E.g. gate and up: output [shape=(..., sum(output_sizes))]; shard ``i`` sits after
    shards ``< i``. No bias.

    Parameters
    ----------
    input_size : int
        Input features.
    output_sizes : list of int
        Rows of each shard, in order.
    """

    def __init__(self, input_size: int, output_sizes: list[int]):
        super().__init__(input_size, sum(output_sizes), bias=False)
        self.output_sizes = list(output_sizes)

    def weight_loader(self, param: torch.Tensor, loaded_weight: torch.Tensor,
                      loaded_shard_id: int) -> None:
        """Write shard ``loaded_shard_id`` of the fused weight.

        Parameters
        ----------
        param : torch.nn.Parameter [shape=(sum(output_sizes), input_size)]
            This module's ``weight``.
        loaded_weight : torch.Tensor [shape=(output_sizes[i], input_size)]
        loaded_shard_id : int
            ``i`` (0 = gate, 1 = up in the MLP).

        Raises
        ------
        ValueError
            The shard's shape does not fit its rows.
        """
        offset = sum(self.output_sizes[:loaded_shard_id])
        default_weight_loader(param.data.narrow(0, offset, self.output_sizes[loaded_shard_id]),
                              loaded_weight)


# --------------------------------------------------------------------------- blocks


class Attention(nn.Module):
    """Self-attention of the port: fused qkv, per-head q/k RMSNorm, RoPE, causal SDPA with GQA.

    Parameters
    ----------
    c : dict
        :func:`port_constants` (heads, ``head_dim``, ``rotary_dim``, ``rope_theta``,
        ``rope_scaling``, ``rope_layout``, ``rope_dtype``, ``rms_norm_eps``...).
    options : PortOptions
        ``swap_qk_shards``, ``qk_norm``, ``position_offset`` and the norm knobs are read.
    """

    def __init__(self, c: dict[str, Any], options: PortOptions):
        super().__init__()
        self.num_heads = c["num_attention_heads"]
        self.num_kv_heads = c["num_key_value_heads"]
        self.head_dim = c["head_dim"]
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.scaling = self.head_dim ** -0.5
        self.qkv_proj = QKVParallelLinear(c["hidden_size"], self.head_dim, self.num_heads,
                                          self.num_kv_heads, swap_qk_shards=options.swap_qk_shards,
                                          bias=c["attention_bias"])
        self.o_proj = nn.Linear(self.q_size, c["hidden_size"], bias=c["attention_bias"])
        if options.qk_norm:
            self.q_norm = make_norm(self.head_dim, c["rms_norm_eps"], options)
            self.k_norm = make_norm(self.head_dim, c["rms_norm_eps"], options)
        else:
            self.q_norm = self.k_norm = None
        scaling = c["rope_scaling"]["factor"] if c["rope_scaling"] else 1.0
        self.rotary_emb = RotaryEmbedding(
            self.head_dim, c["rotary_dim"], c["max_position_embeddings"], c["rope_theta"],
            is_neox_style=c["rope_layout"] == "rotate_half", scaling_factor=scaling,
            dtype=getattr(torch, c["rope_dtype"]), query_position_offset=options.position_offset,
            zero_pad_pairs=round(c["rotary_dim"] * (1 - options.rope_pad_factor)) // 2,
            table_layout=options.rope_table_layout)
        #: Decode KV cache: ``None`` (no cache: every forward sees the whole sequence) or
        #: ``{"k", "v"}`` tensors [shape=(batch, kv_heads, cached, head_dim)] (see :meth:`forward`).
        self.kv: dict[str, torch.Tensor] | None = None
        #: Decode fault: a one-token step drops the last cached token before attending.
        self.kv_drop_last = False

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        """Causal self-attention of one layer.

        Parameters
        ----------
        positions : torch.LongTensor [shape=(batch, seq)]
        hidden_states : torch.Tensor [shape=(batch, seq, hidden_size)]

        Returns
        -------
        torch.Tensor [shape=(batch, seq, hidden_size)]
            ``o_proj`` of ``scaled_dot_product_attention(q, k, v, is_causal=True,
            scale=head_dim ** -0.5, enable_gqa=True)``.

        Notes
        -----
        With :attr:`kv` set (a dict, ``{}`` at prefill), k and v are appended to the cache and
        a one-token step attends to every cached token; a prefill must start from ``{}``
        (a multi-token call after cached tokens is not supported).
        """
        qkv = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        if self.q_norm is not None:
            q = self.q_norm(q.unflatten(-1, (self.num_heads, self.head_dim))).flatten(-2)
            k = self.k_norm(k.unflatten(-1, (self.num_kv_heads, self.head_dim))).flatten(-2)
        q, k = self.rotary_emb(positions, q, k)
        batch, seq = hidden_states.shape[:2]
        q = q.view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if self.kv is not None:  # decode: append to the cache, attend to all of it
            if seq == 1 and self.kv_drop_last and "k" in self.kv:
                self.kv = {"k": self.kv["k"][:, :, :-1], "v": self.kv["v"][:, :, :-1]}
            if "k" in self.kv:
                k, v = torch.cat([self.kv["k"], k], dim=2), torch.cat([self.kv["v"], v], dim=2)
            self.kv = {"k": k, "v": v}
        out = F.scaled_dot_product_attention(q, k, v, is_causal=seq > 1, scale=self.scaling,
                                             enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, self.q_size))


class MLP(nn.Module):
    """SwiGLU MLP with fused ``gate_up_proj``: ``down(silu(gate(x)) * up(x))``.

    Parameters
    ----------
    hidden_size : int
    intermediate_size : int
        Width of gate and up (the fused weight has ``2 * intermediate_size`` rows).
    inject_nan : bool, default False
        Fault knob: write NaN into channel 0 of the output.
    """

    def __init__(self, hidden_size: int, intermediate_size: int, inject_nan: bool = False):
        super().__init__()
        self.gate_up_proj = MergedColumnParallelLinear(hidden_size, [intermediate_size] * 2)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.inject_nan = inject_nan

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the MLP.

        Parameters
        ----------
        x : torch.Tensor [shape=(..., hidden_size)]

        Returns
        -------
        torch.Tensor [shape=(..., hidden_size)]
        """
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        out = self.down_proj(F.silu(gate) * up)
        if self.inject_nan:
            out = out.clone()
            out[..., 0] = float("nan")
        return out


class DecoderLayer(nn.Module):
    """One decoder layer.

    Pre-norm (reference): ``h = x + attn(norm1(x)); y = h + mlp(norm2(h))``.
    Post-norm (fault): ``h = norm1(x + attn(x)); y = norm2(h + mlp(h))``.

    Parameters
    ----------
    c : dict
        :func:`port_constants`.
    options : PortOptions
    layer_idx : int
        Index in the stack (``nan_mlp_layer`` compares against it).

    Raises
    ------
    ValueError
        ``options.norm_placement`` is neither ``"pre"`` nor ``"post"``.
    """

    def __init__(self, c: dict[str, Any], options: PortOptions, layer_idx: int):
        super().__init__()
        self.attn = Attention(c, options)
        self.mlp = MLP(c["hidden_size"], c["intermediate_size"],
                       inject_nan=options.nan_mlp_layer == layer_idx)
        self.input_layernorm = make_norm(c["hidden_size"], c["rms_norm_eps"], options)
        self.post_attention_layernorm = make_norm(c["hidden_size"], c["rms_norm_eps"], options)
        if options.norm_placement not in ("pre", "post"):
            raise ValueError(f"norm_placement must be 'pre' or 'post', not {options.norm_placement!r}")
        self.post_norm = options.norm_placement == "post"

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        """Apply the layer.

        Parameters
        ----------
        positions : torch.LongTensor [shape=(batch, seq)]
        hidden_states : torch.Tensor [shape=(batch, seq, hidden_size)]

        Returns
        -------
        torch.Tensor [shape=(batch, seq, hidden_size)]
        """
        x = hidden_states
        if self.post_norm:
            h = self.input_layernorm(x + self.attn(positions, x))
            return self.post_attention_layernorm(h + self.mlp(h))
        h = x + self.attn(positions, self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))


class Talker(nn.Module):
    """The AR talker stack: embedding, decoder layers, final norm.

    Parameters
    ----------
    c : dict
        :func:`port_constants` (``vocab_size``, ``hidden_size``, ``num_hidden_layers``...).
    options : PortOptions
    """

    def __init__(self, c: dict[str, Any], options: PortOptions):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(DecoderLayer(c, options, i) for i in range(c["num_hidden_layers"]))
        self.norm = make_norm(c["hidden_size"], c["rms_norm_eps"], options)
        self.functional_final_norm_eps = options.functional_final_norm_eps

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Token ids -> final-normed hidden states.

        Parameters
        ----------
        input_ids : torch.LongTensor [shape=(batch, seq)]
        positions : torch.LongTensor [shape=(batch, seq)]

        Returns
        -------
        torch.Tensor [shape=(batch, seq, hidden_size)]
        """
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(positions, h)
        if self.functional_final_norm_eps is not None:  # the planted fault: eps hard-coded here
            return F.rms_norm(h, (h.shape[-1],), self.norm.weight, eps=self.functional_final_norm_eps)
        return self.norm(h)


class CodecWrapper(nn.Module):
    """The port's codec stage.

    Reuses transformers' ``EncodecModel`` code (as ports reuse codec code) under
    ``.model``, built without init; its weights come through
    :meth:`TinyTTSPort.load_weights`.

    Parameters
    ----------
    codec_config : transformers.EncodecConfig

    Attributes
    ----------
    sample_rate : int
        Hz (``codec_config.sampling_rate``).
    hop_length : int
        Samples per code frame (product of ``upsampling_ratios``: 320).
    """

    def __init__(self, codec_config: Any):
        super().__init__()
        from transformers import EncodecModel
        from transformers.initialization import no_init_weights

        with no_init_weights():  # a port does not initialise what it loads
            self.model = EncodecModel(codec_config)
        self.sample_rate = int(codec_config.sampling_rate)
        self.hop_length = int(math.prod(codec_config.upsampling_ratios))

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes -> waveform (RVQ embeddings summed, then the decoder), channel 0 only.

        Parameters
        ----------
        codes : torch.LongTensor [shape=(batch, n_codebooks, frames)]

        Returns
        -------
        torch.Tensor [shape=(batch, frames * hop_length)]
            Float, at :attr:`sample_rate` Hz.
        """
        embeddings = self.model.quantizer.decode(codes.transpose(0, 1))
        return self.model.decoder(embeddings)[:, 0, :]


class TinyTTSPort(nn.Module):
    """The candidate port of :class:`~porting_kit.embedded.tts_reference.TinyTTSReference`.

    Parameters
    ----------
    lm_config : transformers.Qwen3Config
        The HF config the port reads (as a vLLM model reads ``hf_config``).
    codec_config : transformers.EncodecConfig
    options : PortOptions, optional
        Fault knobs; default the correct port.

    Weights are not set by the constructor: call :meth:`load_weights` with the
    reference's ``named_parameters``/state-dict items.
    """

    #: vLLM ``WeightsMapper``-style renames, applied in order: (reference prefix, port prefix).
    hf_to_port_prefix = (("lm.model.", "talker."), ("lm.lm_head.", "lm_head."),
                         ("codec.", "codec.model."))
    #: (reference substring, port substring), applied after the prefixes.
    hf_to_port_substr = ((".self_attn.", ".attn."),)
    #: (fused param, reference shard name, shard id), as vLLM's Qwen3 loader.
    stacked_params_mapping = (
        ("qkv_proj", "q_proj", "q"),
        ("qkv_proj", "k_proj", "k"),
        ("qkv_proj", "v_proj", "v"),
        ("gate_up_proj", "gate_proj", 0),
        ("gate_up_proj", "up_proj", 1),
    )

    def __init__(self, lm_config: Any, codec_config: Any, options: PortOptions | None = None):
        super().__init__()
        self.options = options or PortOptions()
        self.constants = port_constants(lm_config, self.options)
        c = self.constants
        if self.options.meta_init:
            # Fast init: build on the meta device, then materialise. Non-persistent
            # buffers (inv_freq) are not in any checkpoint and are never recomputed here.
            with torch.device("meta"):
                self.talker = Talker(c, self.options)
                self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
            self.talker.to_empty(device="cpu")
            self.lm_head.to_empty(device="cpu")
        else:
            self.talker = Talker(c, self.options)
            self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        self.codec = CodecWrapper(codec_config)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Talker forward, vLLM style (no logits).

        Parameters
        ----------
        input_ids : torch.LongTensor [shape=(batch, seq)]
        positions : torch.LongTensor [shape=(batch, seq)]

        Returns
        -------
        torch.Tensor [shape=(batch, seq, hidden_size)]
            Hidden states; :meth:`compute_logits` maps them to logits.
        """
        return self.talker(input_ids, positions)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """LM head.

        Parameters
        ----------
        hidden_states : torch.Tensor [shape=(batch, seq, hidden_size)]

        Returns
        -------
        torch.Tensor [shape=(batch, seq, vocab_size)]
        """
        return self.lm_head(hidden_states)

    def map_weight_name(self, name: str) -> str:
        """Reference (HF) name -> port name before shard stacking.

        Parameters
        ----------
        name : str
            E.g. ``lm.model.layers.0.self_attn.q_proj.weight``.

        Returns
        -------
        str
            E.g. ``talker.layers.0.attn.q_proj.weight``: the first matching
            :attr:`hf_to_port_prefix` rename, then every :attr:`hf_to_port_substr` one.
        """
        for old, new in self.hf_to_port_prefix:
            if name.startswith(old):
                name = new + name[len(old):]
                break
        for old, new in self.hf_to_port_substr:
            name = name.replace(old, new)
        return name

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Load reference (HF-named) tensors, vLLM style.

        Parameters
        ----------
        weights : iterable of (name, tensor)
            Reference state-dict items (``lm.model...``, ``lm.lm_head...``, ``codec...``).

        Returns
        -------
        set of str
            Port parameter/buffer names that were written.

        Raises
        ------
        ValueError
            A tensor whose shape does not fit its parameter (names both shapes).

        Notes
        -----
        Names the port has no parameter for (and ``rotary_emb.inv_freq``) are
        skipped, as vLLM loaders skip extra tensors; the caller compares the
        returned set with the port's parameters to find what was never set.
        """
        params = dict(self.state_dict(keep_vars=True))  # parameters + persistent buffers
        loaded: set[str] = set()
        for ref_name, tensor in weights:
            if "rotary_emb.inv_freq" in ref_name:
                continue
            name = self.map_weight_name(ref_name)
            for param_name, shard_name, shard_id in self.stacked_params_mapping:
                if not name.startswith("talker.") or f".{shard_name}." not in name:
                    continue
                name = name.replace(f".{shard_name}.", f".{param_name}.")
                if name not in params or name == self.options.skip_weight:
                    break
                module = self.get_submodule(name.rsplit(".", 1)[0])
                try:
                    module.weight_loader(params[name], tensor, shard_id)
                except ValueError as exc:
                    raise ValueError(f"{ref_name} -> {name} shard {shard_id!r}: {exc}") from exc
                loaded.add(name)
                break
            else:
                if name not in params or name == self.options.skip_weight:
                    continue
                try:
                    default_weight_loader(params[name], tensor)
                except ValueError as exc:
                    raise ValueError(f"{ref_name} -> {name}: {exc}") from exc
                loaded.add(name)
        return loaded
