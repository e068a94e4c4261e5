"""The embedded example's *sharded* candidate: the tiny TTS talker at tensor-parallel size N.

The LM part of :class:`~porting_kit.embedded.tts_port.TinyTTSPort` rebuilt from the
vLLM-style parallel layers of :mod:`porting_kit.embedded.tp_layers`, with the same
module names (``talker.layers.N.attn.qkv_proj`` ...) and the same norms and rotary
code: vocabulary-parallel embedding, QKV / gate-up column-parallel, ``o_proj`` /
``down_proj`` row-parallel (all-reduced), a vocabulary-parallel LM head whose logits a
:class:`~porting_kit.embedded.tp_layers.LogitsProcessor` gathers. It is built after
the process group exists (the spec's ``candidate_tp(rank, world_size)``) and loads
the *full* reference weights through :meth:`TinyTTSPortTP.load_weights`, each layer
keeping its slice. The codec is not sharded and not part of this model (its weights
are skipped).

Planted faults (:class:`TPOptions`, default = correct): ``reverse_vocab_shards``
(the LM head loads the vocabulary rows of rank ``N - 1 - r``), ``row_bias_every_rank``
(``o_proj`` adds its bias before the all-reduce: N biases), ``gather_dim`` (the logits
are gathered along the sequence axis), ``reverse_embed_shards`` (the embedding serves its
id range from another rank's rows).

Shapes: ``input_ids`` / ``positions`` (batch, T) int64; hidden (batch, T, 64);
logits (batch, T, 1028) (gathered on every rank).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from porting_kit.embedded import tp_layers as tp
from porting_kit.embedded.tts_port import PortOptions, RotaryEmbedding, make_norm, port_constants


@dataclass
class TPOptions:
    """Fault knobs of the sharded port; the defaults give the correct port.

    Attributes
    ----------
    reverse_vocab_shards : bool, default False
        The LM head's loader takes the vocabulary rows of rank ``N - 1 - r``
        (gathered logits have their vocabulary shards permuted).
    row_bias_every_rank : bool, default False
        ``o_proj`` (row-parallel) adds its bias on every rank before the all-reduce.
    gather_dim : int, default -1
        Axis the logits are gathered along (-1, the vocabulary, is correct).
    reverse_embed_shards : bool, default False
        The vocabulary-parallel embedding loads the rows of rank ``N - 1 - r`` while it
        masks its own id range (a wrong vocabulary offset).
    qkv_plain_chunk : bool, default False
        The loader fuses the full ``q_proj``/``k_proj``/``v_proj`` weights into one
        ``[Q|K|V]`` tensor and keeps ``chunk(N)[rank]`` of it (rank 0 holds all of Q at
        TP 2 with 4 heads and 2 kv heads) instead of each part's shard.
    """

    reverse_vocab_shards: bool = False
    row_bias_every_rank: bool = False
    gather_dim: int = -1
    reverse_embed_shards: bool = False
    qkv_plain_chunk: bool = False


class TPAttention(nn.Module):
    """Self-attention over this rank's heads; ``o_proj`` all-reduces.

    Parameters
    ----------
    c : dict
        :func:`~porting_kit.embedded.tts_port.port_constants` (plus ``attention_bias``).
    options : TPOptions
    """

    def __init__(self, c: dict[str, Any], options: TPOptions):
        super().__init__()
        self.head_dim = c["head_dim"]
        bias = bool(c.get("attention_bias", False))
        self.qkv_proj = tp.QKVParallelLinear(c["hidden_size"], self.head_dim, c["num_attention_heads"],
                                             c["num_key_value_heads"], bias=bias)
        self.num_heads, self.num_kv_heads = self.qkv_proj.num_heads, self.qkv_proj.num_kv_heads
        self.q_size, self.kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.o_proj = tp.RowParallelLinear(c["num_attention_heads"] * self.head_dim, c["hidden_size"],
                                           bias=bias, bias_before_reduce=options.row_bias_every_rank)
        self.q_norm = make_norm(self.head_dim, c["rms_norm_eps"], PortOptions())
        self.k_norm = make_norm(self.head_dim, c["rms_norm_eps"], PortOptions())
        self.rotary_emb = RotaryEmbedding(self.head_dim, c["rotary_dim"], c["max_position_embeddings"],
                                          c["rope_theta"])

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        """Causal attention of this rank's heads, all-reduced by ``o_proj``.

        Parameters
        ----------
        positions : torch.LongTensor [shape=(batch, seq)]
        hidden_states : torch.Tensor [shape=(batch, seq, hidden_size)]

        Returns
        -------
        torch.Tensor [shape=(batch, seq, hidden_size)]
        """
        q, k, v = self.qkv_proj(hidden_states).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = self.q_norm(q.unflatten(-1, (self.num_heads, self.head_dim))).flatten(-2)
        k = self.k_norm(k.unflatten(-1, (self.num_kv_heads, self.head_dim))).flatten(-2)
        q, k = self.rotary_emb(positions, q, k)
        batch, seq = hidden_states.shape[:2]
        q = q.view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.head_dim ** -0.5,
                                             enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, self.q_size))


class TPMLP(nn.Module):
    """SwiGLU MLP: column-parallel ``gate_up_proj``, row-parallel ``down_proj``.

    Shapes: x (..., hidden_size) -> (..., hidden_size).
    """

    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_up_proj = tp.MergedColumnParallelLinear(hidden_size, [intermediate_size] * 2)
        self.down_proj = tp.RowParallelLinear(intermediate_size, hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``down(silu(gate(x)) * up(x))`` on this rank's intermediate slice, all-reduced."""
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class TPDecoderLayer(nn.Module):
    """Pre-norm decoder layer: ``h = x + attn(norm1(x)); y = h + mlp(norm2(h))``."""

    def __init__(self, c: dict[str, Any], options: TPOptions):
        super().__init__()
        self.attn = TPAttention(c, options)
        self.mlp = TPMLP(c["hidden_size"], c["intermediate_size"])
        self.input_layernorm = make_norm(c["hidden_size"], c["rms_norm_eps"], PortOptions())
        self.post_attention_layernorm = make_norm(c["hidden_size"], c["rms_norm_eps"], PortOptions())

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        """Shapes: (batch, seq, hidden_size) -> (batch, seq, hidden_size)."""
        h = hidden_states + self.attn(positions, self.input_layernorm(hidden_states))
        return h + self.mlp(self.post_attention_layernorm(h))


class TPTalker(nn.Module):
    """Vocabulary-parallel embedding, decoder layers, final norm."""

    def __init__(self, c: dict[str, Any], options: TPOptions):
        super().__init__()
        self.embed_tokens = tp.VocabParallelEmbedding(c["vocab_size"], c["hidden_size"],
                                                      reverse_shards=options.reverse_embed_shards)
        self.layers = nn.ModuleList(TPDecoderLayer(c, options) for _ in range(c["num_hidden_layers"]))
        self.norm = make_norm(c["hidden_size"], c["rms_norm_eps"], PortOptions())

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Token ids (batch, seq) -> final-normed hidden states (batch, seq, hidden_size)."""
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(positions, h)
        return self.norm(h)


class TinyTTSPortTP(nn.Module):
    """The sharded talker of the embedded port (one rank's part).

    Parameters
    ----------
    lm_config : transformers.Qwen3Config
    options : TPOptions, optional
        Fault knobs; default the correct port.

    Build it after ``torch.distributed`` is initialised (the rank and size come from the
    default process group); weights come through :meth:`load_weights`.
    """

    hf_to_port_prefix = (("lm.model.", "talker."), ("lm.lm_head.", "lm_head."))
    hf_to_port_substr = ((".self_attn.", ".attn."),)
    stacked_params_mapping = (
        ("qkv_proj", "q_proj", "q"),
        ("qkv_proj", "k_proj", "k"),
        ("qkv_proj", "v_proj", "v"),
        ("gate_up_proj", "gate_proj", 0),
        ("gate_up_proj", "up_proj", 1),
    )

    def __init__(self, lm_config: Any, options: TPOptions | None = None):
        super().__init__()
        self.options = options or TPOptions()
        c = dict(port_constants(lm_config))
        c["attention_bias"] = bool(getattr(lm_config, "attention_bias", False))
        self.talker = TPTalker(c, self.options)
        self.lm_head = tp.ParallelLMHead(c["vocab_size"], c["hidden_size"],
                                         reverse_shards=self.options.reverse_vocab_shards)
        self.logits_processor = tp.LogitsProcessor(self.options.gather_dim)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Hidden states (batch, seq, hidden_size), replicated on every rank."""
        return self.talker(input_ids, positions)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Logits (batch, seq, vocab_size), gathered from the vocabulary shards."""
        return self.logits_processor(self.lm_head(hidden_states))

    def _port_name(self, name: str) -> str:
        for old, new in self.hf_to_port_prefix:
            if name.startswith(old):
                name = new + name[len(old):]
                break
        for old, new in self.hf_to_port_substr:
            name = name.replace(old, new)
        return name

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Load the *full* reference (HF-named) tensors; each parallel layer keeps its slice.

        Parameters
        ----------
        weights : iterable of (name, tensor)
            Reference state-dict items; names this model has no parameter for (the codec,
            ``rotary_emb.inv_freq``) are skipped.

        Returns
        -------
        set of str
            Parameter names written.

        Raises
        ------
        ValueError
            A tensor whose slice does not fit its parameter.
        """
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        fused: dict[str, dict] = {}  # qkv_plain_chunk: param -> {"q"|"k"|"v": full tensor}
        for ref_name, tensor in weights:
            name = self._port_name(ref_name)
            shard_id = None
            for param_name, shard_name, sid in self.stacked_params_mapping:
                if name.startswith("talker.") and f".{shard_name}." in name:
                    name, shard_id = name.replace(f".{shard_name}.", f".{param_name}."), sid
                    break
            if name not in params:
                continue
            module = self.get_submodule(name.rsplit(".", 1)[0])
            loader = getattr(module, "weight_loader", None)
            if self.options.qkv_plain_chunk and shard_id in ("q", "k", "v"):
                got = fused.setdefault(name, {})
                got[shard_id] = tensor
                if len(got) == 3:  # the fault: one chunk of the whole fused tensor per rank
                    whole = torch.cat([got["q"], got["k"], got["v"]], dim=0)
                    tp.copy_weight(params[name].data, whole.chunk(module.tp_size, 0)[module.shard_rank()])
                loaded.add(name)
                continue
            if shard_id is not None:
                loader(params[name], tensor, shard_id)
            elif loader is not None:
                loader(params[name], tensor)
            else:
                tp.copy_weight(params[name].data, tensor)
            loaded.add(name)
        return loaded
