"""Tensor-parallel layers in plain ``torch.distributed``, written as vLLM writes them.

The sharded candidate of the embedded example (:mod:`porting_kit.embedded.tts_tp`)
is built from these. Each layer keeps only its rank's slice of the weight and
cuts that slice itself in ``weight_loader`` from the *full* checkpoint tensor, as
vLLM's ``model_executor/layers/linear.py`` and ``vocab_parallel_embedding.py``
do (vLLM 0.x, ``ColumnParallelLinear.weight_loader``: ``loaded_weight.narrow(
output_dim, tp_rank * shard_size, shard_size)``). The attributes vLLM uses to
describe a layer's output are kept (``gather_output``, ``reduce_results``,
``input_is_parallel``, ``output_size_per_partition``, ``num_embeddings_per_partition``):
porting-kit's TP probe reads them to know along which axis a layer's per-rank
outputs are gathered (:mod:`porting_kit.probes.tp`).

The process group must exist before a layer is built (``torch.distributed``
initialised, any backend); with no process group the layers run at TP size 1.

Planted-fault knobs (defaults = correct): ``reverse_shards`` (a layer loads the
slice of rank ``world_size - 1 - rank``), ``bias_before_reduce`` (a row-parallel
layer adds its bias on every rank, before the all-reduce), ``gather_dim`` (the
logits gather concatenates along another axis).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def tp_rank_and_size() -> tuple[int, int]:
    """``(rank, world_size)`` of the default process group, ``(0, 1)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum ``x`` over the ranks (in place; returns ``x``); a no-op at TP size 1."""
    if tp_rank_and_size()[1] > 1:
        dist.all_reduce(x)
    return x


def all_gather(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Concatenate every rank's ``x`` along ``dim``, in rank order.

    Parameters
    ----------
    x : torch.Tensor [shape=(..., n, ...)]
        This rank's shard; same shape on every rank.
    dim : int, default -1
        Axis the shards are concatenated along.

    Returns
    -------
    torch.Tensor [shape=(..., world_size * n, ...)]
        ``x`` itself at TP size 1.
    """
    world = tp_rank_and_size()[1]
    if world == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=dim)


def _shard(total: int, world: int, what: str) -> int:
    if total % world:
        raise ValueError(f"{what} {total} is not divisible by the tensor-parallel size {world}")
    return total // world


def copy_weight(param: torch.Tensor, loaded: torch.Tensor) -> None:
    """Copy ``loaded`` into ``param`` (in place, cast to its dtype/device); ValueError on a shape mismatch."""
    if param.shape != loaded.shape:
        raise ValueError(f"shape mismatch: shard {tuple(loaded.shape)} vs parameter {tuple(param.shape)}")
    with torch.no_grad():
        param.copy_(loaded.to(dtype=param.dtype, device=param.device))


class ColumnParallelLinear(nn.Module):
    """``y = x W^T + b`` with ``W``'s output rows split over the ranks.

    Parameters
    ----------
    input_size, output_size : int
        Full (unsharded) features.
    bias : bool, default False
    gather_output : bool, default False
        All-gather the output along the last axis (then every rank holds the full output).
    reverse_shards : bool, default False
        Fault knob: load the rows of rank ``world_size - 1 - rank``.

    Shapes: x (..., input_size) -> (..., output_size_per_partition), or (..., output_size)
    with ``gather_output``.
    """

    def __init__(self, input_size: int, output_size: int, bias: bool = False, *,
                 gather_output: bool = False, reverse_shards: bool = False):
        super().__init__()
        self.tp_rank, self.tp_size = tp_rank_and_size()
        self.input_size, self.output_size = input_size, output_size
        self.output_size_per_partition = _shard(output_size, self.tp_size, "output_size")
        self.gather_output = gather_output
        self.reverse_shards = reverse_shards
        self.weight = nn.Parameter(torch.empty(self.output_size_per_partition, input_size))
        self.bias = nn.Parameter(torch.empty(self.output_size_per_partition)) if bias else None

    def shard_rank(self) -> int:
        """The rank whose slice this rank loads (its own, unless ``reverse_shards``)."""
        return self.tp_size - 1 - self.tp_rank if self.reverse_shards else self.tp_rank

    def weight_loader(self, param: torch.Tensor, loaded_weight: torch.Tensor) -> None:
        """Copy this rank's rows of the full ``loaded_weight`` [shape=(output_size, ...)] into ``param``."""
        n = self.output_size_per_partition
        copy_weight(param.data, loaded_weight.narrow(0, self.shard_rank() * n, n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Local output features (gathered when ``gather_output``)."""
        y = F.linear(x, self.weight, self.bias)
        return all_gather(y, -1) if self.gather_output else y


class QKVParallelLinear(ColumnParallelLinear):
    """Fused q/k/v projection; each rank holds its heads' rows ``[q_r; k_r; v_r]``.

    Parameters
    ----------
    hidden_size, head_size : int
    total_num_heads, total_num_kv_heads : int
        Divisible by the tensor-parallel size.
    bias : bool, default False

    Shapes: x (..., hidden_size) -> (..., (heads + 2 * kv_heads) * head_size / world_size).
    """

    def __init__(self, hidden_size: int, head_size: int, total_num_heads: int,
                 total_num_kv_heads: int, bias: bool = False):
        world = tp_rank_and_size()[1]
        self.num_heads = _shard(total_num_heads, world, "num_attention_heads")
        self.num_kv_heads = _shard(total_num_kv_heads, world, "num_key_value_heads")
        self.head_size = head_size
        super().__init__(hidden_size, (total_num_heads + 2 * total_num_kv_heads) * head_size, bias)

    def weight_loader(self, param: torch.Tensor, loaded_weight: torch.Tensor,
                      loaded_shard_id: str) -> None:
        """Write this rank's heads of the full ``q_proj`` / ``k_proj`` / ``v_proj`` weight or bias.

        Parameters
        ----------
        param : torch.nn.Parameter [shape=(local rows, ...)]
        loaded_weight : torch.Tensor [shape=(heads * head_size, ...)]
            The full reference tensor of shard ``loaded_shard_id``.
        loaded_shard_id : {"q", "k", "v"}
        """
        q, kv = self.num_heads * self.head_size, self.num_kv_heads * self.head_size
        offset, size = {"q": (0, q), "k": (q, kv), "v": (q + kv, kv)}[loaded_shard_id]
        copy_weight(param.data.narrow(0, offset, size), loaded_weight.narrow(0, self.shard_rank() * size, size))


class MergedColumnParallelLinear(ColumnParallelLinear):
    """Fused column projections (gate and up): rank ``r`` holds ``[gate_r; up_r]``.

    Parameters
    ----------
    input_size : int
    output_sizes : list of int
        Full rows of each fused projection, each divisible by the tensor-parallel size.
    """

    def __init__(self, input_size: int, output_sizes: list[int]):
        super().__init__(input_size, sum(output_sizes), bias=False)
        self.output_sizes = list(output_sizes)

    def weight_loader(self, param: torch.Tensor, loaded_weight: torch.Tensor,
                      loaded_shard_id: int) -> None:
        """Write this rank's rows of projection ``loaded_shard_id`` (0 gate, 1 up)."""
        local = [s // self.tp_size for s in self.output_sizes]
        offset, size = sum(local[:loaded_shard_id]), local[loaded_shard_id]
        copy_weight(param.data.narrow(0, offset, size), loaded_weight.narrow(0, self.shard_rank() * size, size))


class RowParallelLinear(nn.Module):
    """``y = x W^T + b`` with ``W``'s input columns split over the ranks, partial sums all-reduced.

    Parameters
    ----------
    input_size, output_size : int
        Full features.
    bias : bool, default False
        Added once, after the all-reduce.
    reduce_results : bool, default True
        All-reduce the partial products (every rank then holds the full output).
    bias_before_reduce : bool, default False
        Fault knob: every rank adds the bias before the all-reduce (``world_size`` biases).

    Shapes: x (..., input_size / world_size) -> (..., output_size).
    """

    input_is_parallel = True

    def __init__(self, input_size: int, output_size: int, bias: bool = False, *,
                 reduce_results: bool = True, bias_before_reduce: bool = False):
        super().__init__()
        self.tp_rank, self.tp_size = tp_rank_and_size()
        self.input_size_per_partition = _shard(input_size, self.tp_size, "input_size")
        self.output_size = output_size
        self.reduce_results = reduce_results
        self.bias_before_reduce = bias_before_reduce
        self.weight = nn.Parameter(torch.empty(output_size, self.input_size_per_partition))
        self.bias = nn.Parameter(torch.empty(output_size)) if bias else None

    def weight_loader(self, param: torch.Tensor, loaded_weight: torch.Tensor) -> None:
        """Weight: this rank's input columns; bias: the full vector (replicated)."""
        if loaded_weight.dim() == 1:
            copy_weight(param.data, loaded_weight)
            return
        n = self.input_size_per_partition
        copy_weight(param.data, loaded_weight.narrow(1, self.tp_rank * n, n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Partial product, all-reduced, plus the bias (once)."""
        if self.bias is not None and self.bias_before_reduce:
            y = F.linear(x, self.weight, self.bias)
            return all_reduce(y) if self.reduce_results else y
        y = F.linear(x, self.weight)
        if self.reduce_results:
            y = all_reduce(y)
        return y + self.bias if self.bias is not None else y


class VocabParallelEmbedding(nn.Module):
    """Embedding with the vocabulary rows split over the ranks; lookups all-reduced.

    Rank ``r`` holds rows ``[r * n, (r + 1) * n)``; ids outside its range give zero
    vectors, and the all-reduce sums the one non-zero row per id.

    Parameters
    ----------
    num_embeddings, embedding_dim : int
        Full vocabulary (divisible by the tensor-parallel size) and width.
    reverse_shards : bool, default False
        Fault knob: load the rows of rank ``world_size - 1 - rank``.

    Shapes: ids (...) int64 -> (..., embedding_dim).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, *, reverse_shards: bool = False):
        super().__init__()
        self.tp_rank, self.tp_size = tp_rank_and_size()
        self.num_embeddings = num_embeddings
        self.num_embeddings_per_partition = _shard(num_embeddings, self.tp_size, "vocab_size")
        self.vocab_start_index = self.tp_rank * self.num_embeddings_per_partition
        self.reverse_shards = reverse_shards
        self.weight = nn.Parameter(torch.empty(self.num_embeddings_per_partition, embedding_dim))

    def weight_loader(self, param: torch.Tensor, loaded_weight: torch.Tensor) -> None:
        """Copy this rank's vocabulary rows of the full ``loaded_weight`` [shape=(num_embeddings, dim)]."""
        n = self.num_embeddings_per_partition
        shard = self.tp_size - 1 - self.tp_rank if self.reverse_shards else self.tp_rank
        copy_weight(param.data, loaded_weight.narrow(0, shard * n, n))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Masked local lookup, all-reduced over the ranks."""
        local = ids - self.vocab_start_index
        inside = (local >= 0) & (local < self.num_embeddings_per_partition)
        out = F.embedding(local.clamp(0, self.num_embeddings_per_partition - 1), self.weight)
        return all_reduce(out * inside.unsqueeze(-1).to(out.dtype))


class ParallelLMHead(VocabParallelEmbedding):
    """The LM head: vocabulary-parallel rows; ``forward`` gives this rank's logits.

    Shapes: hidden (..., embedding_dim) -> local logits (..., num_embeddings_per_partition);
    :class:`LogitsProcessor` gathers them.
    """

    gather_output = False

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """This rank's slice of the logits (vocabulary rows it holds)."""
        return F.linear(hidden, self.weight)


class LogitsProcessor(nn.Module):
    """Gathers the vocabulary-parallel logits (vLLM's ``LogitsProcessor._gather_logits``).

    Parameters
    ----------
    gather_dim : int, default -1
        Axis the shards are concatenated along; anything but the vocabulary axis (-1)
        is the planted ``tp_gather_axis`` fault.

    Shapes: local logits (batch, seq, vocab / world_size) -> (batch, seq, vocab).
    """

    def __init__(self, gather_dim: int = -1):
        super().__init__()
        self.gather_dim = gather_dim

    def forward(self, local_logits: torch.Tensor) -> torch.Tensor:
        """All-gather the local logits along :attr:`gather_dim`."""
        return all_gather(local_logits, self.gather_dim)
